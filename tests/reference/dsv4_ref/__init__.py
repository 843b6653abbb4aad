"""Independent PyTorch reference of the DeepSeek V4 forward pass (see tests/reference/README.md).

Modules: gguf (file reader), dequant (block formats), ops (one function per op),
model (hyper-parameters, weights, caches and the token-by-token forward pass).
"""
