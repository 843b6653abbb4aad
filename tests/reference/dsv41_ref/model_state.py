"""The DeepSeek V4.1 (`deepseek41`) model description and state (v41.md §1-§2, §3.7, §5.3-§5.4).

Owns: the hyper-parameters read from `deepseek41.*` metadata and their validation (C1-C8), the
per-layer roles of §1.3, the weights (dequantized once and held in float32 with the values R
holds), the per-sequence state (window rings, compressed-row and index-key caches per KV source,
compressor pending rows, Engram history, the published index-key slot of the official mode), the
explicit per-forward runtime object that carries the shared quantities between layers (§3.7),
the evaluation options and the stable top-k of the tie rule (§5.3).

The token-by-token forward pass over these is in model.py, which re-exports every public name
of this module (callers import them from dsv41_ref.model).
"""

import numpy as np
import torch

from dsv4_ref.dequant import dequant_row264, dequantize

from . import engram as eg
from .numerics import F32, bf16

ARCH = "deepseek41"

SWA, FULL, REINDEX, REUSE = "swa", "full", "reindex", "reuse"


def ints_or_floats(v):
    """A metadata value that may be an array or a single number (broadcast later)."""
    return v if isinstance(v, list) else [v]


# ---------------------------------------------------------------------------------------------
# Hyper-parameters and roles (§1, §2.4)
# ---------------------------------------------------------------------------------------------


class HParams:
    """Every size and schedule list of a deepseek41 file (primary §2.4 keys only)."""

    def __init__(self, meta, tensors):
        arch = meta.get("general.architecture")
        if arch != ARCH:
            raise ValueError(f"general.architecture is {arch!r}, expected {ARCH!r}")

        def get(key, default=None):
            full = f"{ARCH}.{key}"
            if full in meta:
                return meta[full]
            if default is None:
                raise KeyError(f"missing GGUF metadata key {full}")
            return default

        def ints(key, default=None):
            v = get(key, default)
            return [int(a) for a in (v if isinstance(v, list) else [v])]

        self.n_layer = int(get("block_count"))
        self.n_mtp = int(get("nextn_predict_layers", 0))
        self.n_embd = int(get("embedding_length"))
        self.n_vocab = int(get("vocab_size"))
        self.n_head = int(get("attention.head_count"))
        self.n_head_kv = int(get("attention.head_count_kv", 1))
        self.n_head_dim = int(get("attention.key_length"))
        self.n_value_dim = int(get("attention.value_length", self.n_head_dim))
        self.n_rot = int(get("rope.dimension_count"))
        self.q_lora = int(get("attention.q_lora_rank"))
        self.n_group = int(get("attention.output_group_count"))
        self.o_lora = int(get("attention.output_lora_rank"))
        self.n_swa = int(get("attention.sliding_window"))
        self.ratios = ints("attention.compress_ratios")
        self.kv_sources = ints("attention.kv_source_layer_ids")
        self.index_sources = ints("attention.index_source_layer_ids")
        self.cand_source = int(get("attention.candidate_source_layer_id"))
        cand_default = None if self.cand_source >= 0 else 0    # required only with a candidate source
        self.cand_blocks = int(get("attention.candidate_topk_blocks", cand_default))
        self.cand_block_size = int(get("attention.candidate_block_size", cand_default))
        self.n_idx_head = int(get("attention.indexer.head_count"))
        self.n_idx_dim = int(get("attention.indexer.key_length"))
        self.idx_topk = int(get("attention.indexer.top_k"))
        self.rope_base = float(get("rope.freq_base"))
        self.compress_rope_base = float(get("attention.compress_rope_freq_base"))
        self.rope_orig_ctx = int(get("rope.scaling.original_context_length"))
        self.rope_factor = float(get("rope.scaling.factor"))
        self.yarn_beta_fast = float(get("rope.scaling.yarn_beta_fast"))
        self.yarn_beta_slow = float(get("rope.scaling.yarn_beta_slow"))
        self.rms_eps = float(get("attention.layer_norm_rms_epsilon"))
        self.n_hc = int(get("hyper_connection.count"))
        self.sinkhorn_iters = int(get("hyper_connection.sinkhorn_iterations"))
        self.hc_eps = float(get("hyper_connection.epsilon"))
        self.n_expert = int(get("expert_count"))
        self.n_expert_used = int(get("expert_used_count"))
        self.n_expert_shared = int(get("expert_shared_count", 1))
        self.n_ff_exp = int(get("expert_feed_forward_length"))
        self.score_func = str(get("expert_scoring_func"))
        self.route_scale = float(get("expert_weights_scale"))
        self.norm_topk = bool(get("expert_weights_norm", True))
        self.gate_temp = float(get("expert_gate_temp", 1.0))
        self.clamp_exp = [float(c) for c in ints_or_floats(get("swiglu_clamp_exp"))]
        self.clamp_shexp = [float(c) for c in ints_or_floats(get("swiglu_clamp_shexp", self.clamp_exp))]
        self.n_hash = int(get("hash_layer_count", 0))

        self.engram_layers = ints("engram.layer_ids", [])
        if self.engram_layers:
            self.engram_rows = ints("engram.num_embeddings")
            self.engram_vocab = int(get("engram.vocab_size"))
            self.engram_ngram = int(get("engram.max_ngram_size"))
            self.engram_heads = int(get("engram.head_count"))
            self.engram_dim = int(get("engram.key_length"))
            self.engram_cvocab = int(get("engram.compressed_vocab_size"))
            self.engram_pad = int(get("engram.pad_id"))
            self.token_map = ints("engram.token_map")
            self.engram_mult = ints("engram.multipliers")
            self.engram_primes_flat = ints("engram.primes", []) or None
            self.engram_offsets_flat = ints("engram.offsets", []) or None

        self.dspark_targets = []
        if self.n_mtp > 0:
            self.dspark_targets = ints("dspark.target_layer_ids")
            self.dspark_block = int(get("dspark.block_size"))
            self.dspark_noise = int(get("dspark.noise_token_id"))
            self.dspark_markov_rank = int(get("dspark.markov_rank"))
            self.dspark_experts = int(get("dspark.expert_count", 0)) or self.n_expert
            self.dspark_used = int(get("dspark.expert_used_count", 0)) or self.n_expert_used
        self._broadcast_clamps()
        self.validate()

    # -- validation (§1.3 C1-C8) -------------------------------------------------------------

    def validate(self):
        L = self.n_layer
        need = L + self.n_mtp
        if len(self.ratios) < need:
            raise ValueError(f"attention.compress_ratios has {len(self.ratios)} entries, need "
                             f"{need} (block_count + nextn_predict_layers) (C1)")
        if any(r not in (0, 1, 2) for r in self.ratios[:need]):
            raise ValueError(f"compress ratio outside {{0, 1, 2}}: {self.ratios[:need]} (C1)")
        if any(r != 0 for r in self.ratios[L:need]):
            raise ValueError("DSpark stages must have compress ratio 0 (C1)")
        for name, lst in (("kv_source_layer_ids", self.kv_sources),
                          ("index_source_layer_ids", self.index_sources)):
            if any(b <= a for a, b in zip(lst, lst[1:])):
                raise ValueError(f"attention.{name} must be strictly increasing (C2)")
            if any(not 0 <= s < L or self.ratios[s] == 0 for s in lst):
                raise ValueError(f"attention.{name} must name backbone layers with ratio > 0 (C2)")
        if not set(self.kv_sources) <= set(self.index_sources):
            raise ValueError("every KV source must also be an index source (C2)")
        for il in range(L):
            if self.ratios[il] == 0:
                continue
            ks, ix = self.kv_source(il), self.index_source(il)
            if ks is None or ix is None:
                raise ValueError(f"layer {il} (ratio {self.ratios[il]}) has no KV or index source (C3)")
            if self.ratios[ks] != self.ratios[il] or self.kv_source(ix) != ks:
                raise ValueError(f"layer {il}: KV source {ks} / index source {ix} are not in one "
                                 "coordinate space (C3)")
        if self.cand_source >= 0:
            if self.cand_source not in self.index_sources:
                raise ValueError("candidate_source_layer_id must be -1 or an index source (C4)")
            for s in self.index_sources:
                if s > self.cand_source and self.kv_source(s) != self.kv_source(self.cand_source):
                    raise ValueError(f"index source {s} is outside the candidate source's KV group (C4)")
            if self.cand_blocks < 1 or self.cand_block_size < 1:
                raise ValueError("candidate_topk_blocks and candidate_block_size must be positive")
            if (self.cand_blocks - 1) * self.cand_block_size + 1 < self.idx_topk:
                raise ValueError("candidate pool smaller than index top-k: (NB-1)*B+1 < K (C5)")
        d = self.n_head_dim
        checks = [
            (self.n_head_kv == 1 and self.n_value_dim == d, "one KV head with value_length == key_length"),
            (d % 32 == 0, "key_length % 32 == 0 (C6)"),
            (self.n_idx_dim % 32 == 0, "indexer.key_length % 32 == 0 (C6)"),
            (self.n_rot % 2 == 0 and self.n_rot <= min(d, self.n_idx_dim), "rope dims even and <= head dims (C6)"),
            (self.n_embd % 32 == 0 and self.q_lora % 32 == 0, "embedding_length and q_lora_rank % 32 == 0 (C6)"),
            ((self.n_group * self.o_lora) % 32 == 0 and self.n_ff_exp % 32 == 0, "G*Ro and F % 32 == 0 (C6)"),
            (self.n_head % self.n_group == 0, "head_count % output_group_count == 0 (C6)"),
            (self.score_func == "sqrtsoftplus", f"expert_scoring_func {self.score_func!r} (only sqrtsoftplus)"),
            (self.n_hash == 0, "hash_layer_count must be 0 for deepseek41"),
            (self.n_expert_shared == 1, "expert_shared_count must be 1"),
            (len(self.clamp_exp) >= L and len(self.clamp_shexp) >= L, "swiglu_clamp_* need block_count entries"),
        ]
        for ok, what in checks:
            if not ok:
                raise ValueError(f"unsupported deepseek41 configuration: {what}")
        if self.engram_layers:
            self._validate_engram()
        if self.dspark_targets:
            t = self.dspark_targets
            if any(b <= a for a, b in zip(t, t[1:])) or any(not 0 <= v < L for v in t):
                raise ValueError("dspark.target_layer_ids must be distinct ascending backbone layers (C8)")
            if (len(t) * self.n_embd) % 32 != 0 or self.dspark_block < 1:
                raise ValueError("dspark: block_size >= 1 and taps * embedding_length % 32 == 0 (C6)")
            if not 0 <= self.dspark_noise < self.n_vocab:
                raise ValueError("dspark.noise_token_id outside the vocabulary")
            if self.dspark_used > self.dspark_experts:
                raise ValueError("dspark.expert_used_count exceeds dspark.expert_count")

    def _validate_engram(self):
        n_eng, N, EH = len(self.engram_layers), self.engram_ngram, self.engram_heads
        C = (N - 1) * EH
        if len(self.token_map) != self.n_vocab:
            raise ValueError(f"engram.token_map has {len(self.token_map)} entries, need vocab_size "
                             f"{self.n_vocab} (§9.11)")
        if any(not 0 <= c < self.engram_cvocab for c in self.token_map):
            raise ValueError("engram.token_map holds an id outside [0, compressed_vocab_size)")
        if len(self.engram_mult) != n_eng * N:
            raise ValueError(f"engram.multipliers has {len(self.engram_mult)} entries, need {n_eng * N}")
        if any(m % 2 == 0 or not 0 < m < 2 ** 63 for m in self.engram_mult):
            raise ValueError("engram.multipliers must be odd positive int64 values (§3.9.3)")
        if len(self.engram_rows) != n_eng:
            raise ValueError("engram.num_embeddings needs one entry per Engram layer")
        if self.engram_dim % 32 != 0 or (C * self.engram_dim) % 32 != 0:
            raise ValueError("engram.key_length must be a multiple of 32 (C6)")
        primes = eg.bucket_primes(n_eng, self.engram_vocab, N, EH)
        flat = [p for layer in primes for row in layer for p in row]
        if self.engram_primes_flat is not None and flat != self.engram_primes_flat:
            raise ValueError("engram.primes differ from the recomputed bucket primes (§3.9.2)")
        offs = [eg.offsets_of(layer) for layer in primes]
        if self.engram_offsets_flat is not None and [o for lo in offs for o in lo] != self.engram_offsets_flat:
            raise ValueError("engram.offsets differ from the prefix sums of the primes (§3.9.2)")
        for k, layer in enumerate(primes):
            if sum(p for row in layer for p in row) != self.engram_rows[k]:
                raise ValueError(f"engram.num_embeddings[{k}] differs from the sum of its primes (C7)")
        self.engram_primes = primes
        self.engram_offsets = offs
        self.engram_mults = [self.engram_mult[k * N:(k + 1) * N] for k in range(n_eng)]

    # -- roles (§1.3) -------------------------------------------------------------------------

    def ratio(self, il):
        return self.ratios[il]

    def clamp(self, il):
        """(routed, shared) SwiGLU clamps of layer il; a DSpark stage uses its own entry when the
        arrays cover it, else the last backbone layer's."""
        j = il if il < len(self.clamp_exp) and il < len(self.clamp_shexp) else self.n_layer - 1
        return self.clamp_exp[j], self.clamp_shexp[j]

    def _broadcast_clamps(self):
        n = self.n_layer + self.n_mtp
        if len(self.clamp_exp) == 1:
            self.clamp_exp = self.clamp_exp * n
        if len(self.clamp_shexp) == 1:
            self.clamp_shexp = self.clamp_shexp * n

    def kv_source(self, il):
        c = [s for s in self.kv_sources if s <= il]
        return c[-1] if c else None

    def index_source(self, il):
        c = [s for s in self.index_sources if s <= il]
        return c[-1] if c else None

    def is_kv_source(self, il):
        return il < self.n_layer and il in self.kv_sources

    def is_index_source(self, il):
        return il < self.n_layer and il in self.index_sources

    def is_cand_source(self, il):
        return self.is_index_source(il) and il == self.cand_source

    def uses_candidates(self, il):
        return self.is_index_source(il) and 0 <= self.cand_source < il

    def mode(self, il):
        if self.ratios[il] == 0:
            return SWA
        if self.is_kv_source(il):
            return FULL
        if self.is_index_source(il):
            return REINDEX
        return REUSE


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


class Weights:
    """Dequantized tensors in PyTorch orientation (reversed ne), float32, cached.
    `bf16=True` rounds the values to bf16 at load (tensors R holds in bf16)."""

    def __init__(self, gguf):
        self.gguf = gguf
        self.cache = {}

    def has(self, name):
        return self.gguf.has(name)

    def __call__(self, name, round_bf16=False):
        key = (name, round_bf16)
        if key not in self.cache:
            if not self.gguf.has(name):
                raise KeyError(f"missing tensor {name}")
            info = self.gguf.tensors[name]
            if info.type_name == "I8":
                raise ValueError(f"tensor {name}: I8 is only supported for Engram row264 tables")
            vals = dequantize(info.type_name, self.gguf.raw(name)).reshape(tuple(reversed(info.ne)))
            t = torch.from_numpy(np.ascontiguousarray(vals)).to(F32)
            self.cache[key] = bf16(t) if round_bf16 else t
        return self.cache[key]

    def cat(self, names, dim=0):
        """Concatenation of several tensors (cached): rows of one matrix feeding the same
        input give bit-identical outputs, so merged linears save activation QDQs."""
        key = ("cat", tuple(names), dim)
        if key not in self.cache:
            self.cache[key] = torch.cat([self(n) for n in names], dim=dim).contiguous()
        return self.cache[key]

    def expect(self, name, shape):
        t = self(name)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"tensor {name}: shape {list(t.shape)} (PyTorch order), expected {list(shape)}")
        return t

    def embed_row(self, token):
        info = self.gguf.tensors["token_embd.weight"]
        raw = self.gguf.raw_rows("token_embd.weight", token, token + 1)
        return torch.from_numpy(dequantize(info.type_name, raw).copy()).to(F32)

    def engram_row(self, name, row, width):
        """Row `row` of an Engram table as bf16 values [width]: I8 row264 (lossless: E4M3 codes
        then one UE8M0 byte per 32) or Q8_0 [width, rows] (the lossy alias of §2.3)."""
        info = self.gguf.tensors[name]
        if not 0 <= row < info.ne[1]:
            raise ValueError(f"tensor {name}: Engram row {row} outside [0, {info.ne[1]})")
        raw = self.gguf.raw_rows(name, row, row + 1)
        if info.type_name == "I8" and info.ne[0] == width + width // 32:
            return torch.from_numpy(dequant_row264(raw, width))
        if info.type_name == "Q8_0" and info.ne[0] == width:
            return bf16(torch.from_numpy(dequantize("Q8_0", raw).copy()))
        raise ValueError(f"tensor {name}: expected I8 rows of {width + width // 32} bytes (row264) or "
                         f"Q8_0 rows of {width}, got {info.type_name} ne={list(info.ne)}")


# ---------------------------------------------------------------------------------------------
# State: per sequence, and per forward call (§3.7, §5.4)
# ---------------------------------------------------------------------------------------------


class SourceCache:
    """The persistent caches of one KV source: compressed rows and index keys by entry id,
    plus the r >= 2 compressor's pending (a, b) rows."""

    def __init__(self, layer, ratio, width, idx_width):
        self.layer = layer
        self.comp_rows = []          # entry j -> bf16 [Dh] after RoPE at j*r and FP4 QDQ
        self.index_rows = []         # entry j -> bf16 [DI] after k_norm, RoPE and MXFP4 QDQ
        self.pend_a = torch.zeros(ratio, width, dtype=F32)
        self.pend_b = torch.full((ratio, width), -float("inf"), dtype=F32)
        self.width, self.idx_width = width, idx_width


class SequenceState:
    """Everything one sequence carries between forward calls."""

    def __init__(self, hp):
        W, d = hp.n_swa, hp.n_head_dim
        self.hist = []                                            # Engram compressed ids by position
        self.rings = {il: torch.zeros(W, d, dtype=F32) for il in range(hp.n_layer + hp.n_mtp)}
        self.sources = {s: SourceCache(s, hp.ratios[s], d, hp.n_idx_dim) for s in hp.kv_sources}
        self.index_k_slot = None     # official mode: the source whose index keys were last published


class ForwardRuntime:
    """The shared quantities of one forward call (§3.7, engine rule): an explicit object passed
    through the layers, never a global. Raw entry ids; the layout is applied by the consumer."""

    def __init__(self, index_k_slot):
        self.compress_kv = None      # KV source layer whose compressed rows are current
        self.index_k = index_k_slot  # KV source layer whose index keys are current
        self.topk = None             # LongTensor of selected entry ids, ascending
        self.candidates = None       # bool [n_tot] candidate mask, or None


class Options:
    def __init__(self, official_index_k=False, window_qdq=True, kv_qdq=True):
        self.official_index_k = official_index_k   # §9.2 official-compatible index-key publication
        self.window_qdq = window_qdq               # FP8 QDQ of window rows (tests only: off)
        self.kv_qdq = kv_qdq                       # FP4 QDQ of compressed rows and index q/k (tests only: off)


def stable_topk(scores, k):
    """Entry ids of the k best scores: larger score first, then smaller index (§5.3), as a
    stable sort on (-score, index). Returns them in selection order."""
    s = scores.detach().numpy().astype(np.float64)
    order = np.argsort(-s, kind="stable")
    return order[:k]
