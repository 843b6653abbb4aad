"""Independent PyTorch reference of the DeepSeek V4.1 (`deepseek41`) forward pass.

Modules: numerics (bf16 rounding, QDQs, linear classes, RoPE, Sinkhorn, attention core),
engram (prime search, offsets, n-gram hash), model_state (hyper-parameters, schedule, weights,
caches), model (the token-by-token forward; re-exports model_state's names), gguf_writer (writes small random V4.1 models for the
self-tests). The GGUF reader and the dequantizers are shared with the V4 reference (dsv4_ref).
"""

from dsv4_ref import gguf as _gguf

# The V4.1 files add two GGML tensor types to the ones the V4 reader knows:
# id -> (name, block elements, block bytes).
_gguf.GGML_TYPES.setdefault(24, ("I8", 1, 1))
_gguf.GGML_TYPES.setdefault(39, ("MXFP4", 32, 17))
