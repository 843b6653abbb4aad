"""A small GGUF v3 writer and a random `v41-tiny`-shaped DeepSeek V4.1 model (tests only).

Owns: serialising metadata and tensors to GGUF, the checkpoint-format quantizers needed to
write a lossless-profile file (FP8 E4M3 weights with UE8M0 scales per 32x32 tile written as
BF16, routed experts as MXFP4, Engram tables as I8 row264; v41.md §2.3, §4) and the
`v41-tiny` configuration of v41.md §6.1 with the §2.4 metadata keys. It lets the reference run
end to end without the engine's generator; it is not a model converter.
"""

import struct

import numpy as np
import torch

from dsv4_ref.dequant import e4m3_table

from . import engram as eg
from . import numerics as nm

# GGUF metadata value types.
U8, I8, U16, I16, U32, I32, F32T, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# GGML tensor types written here.
T_F32, T_BF16, T_I8, T_MXFP4 = 0, 30, 24, 39

ARCH = "deepseek41"

# v41.md §6.1.
TINY = dict(
    vocab=512, dim=256, n_layers=8, n_heads=4, head_dim=64, rope_dim=16, q_lora=64,
    o_groups=2, o_lora=64, window=8, ratios=[0, 2, 2, 2, 1, 1, 1, 1, 0, 0],
    kv_sources=[1, 3, 4], index_sources=[1, 3, 4, 6], cand_source=4, cand_blocks=2,
    cand_block_size=4, index_heads=4, index_dim=64, index_topk=4, hc_mult=4, sinkhorn=20,
    hc_eps=1e-6, norm_eps=1e-20, rope_theta=10000.0, compress_rope_theta=160000.0,
    orig_seq_len=32, rope_factor=4.0, beta_fast=32.0, beta_slow=1.0, experts=8, experts_used=3,
    inter=128, route_scale=1.5, swiglu_limit=10.0, engram_layers=[0, 1], engram_vocab=100,
    engram_ngram=4, engram_heads=2, engram_dim=32, engram_pad_token=2, engram_cvocab=256,
    n_mtp=2, dspark_block=3, dspark_noise=511, dspark_targets=[5, 6, 7], markov_rank=32,
    dspark_experts=4, dspark_used=2,
    multipliers=[[22948963341361471, 9720090748611819, 1476226777048821, 595470825660793],
                 [29662608052400909, 1873410163432121, 13919202536988139, 28638879857136817]],
    context=256,
)


# ---------------------------------------------------------------------------------------------
# GGUF serialisation
# ---------------------------------------------------------------------------------------------

_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32T: "<f", BOOL: "<?",
        U64: "<Q", I64: "<q", F64: "<d"}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype in _FMT:
        return struct.pack(_FMT[vtype], v)
    if vtype == STRING:
        return _str(v)
    etype, items = v
    if etype in _FMT:
        arr = np.asarray(items, dtype=np.dtype(_FMT[etype]))
        return struct.pack("<IQ", etype, len(items)) + arr.tobytes()
    return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, it) for it in items)


def write_gguf(path, meta, tensors, alignment=32):
    """meta: [(key, vtype, value)] (arrays: (ARRAY, (etype, list))); tensors: [(name, ne, ggml_type,
    bytes)] with ne in GGUF order."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, vtype, v in meta:
        head += _str(key) + struct.pack("<I", vtype) + _value(vtype, v)
    offset, infos, blobs = 0, b"", []
    for name, ne, gtype, data in tensors:
        infos += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", gtype, offset)
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head += infos
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------------------------
# Checkpoint-format quantizers (writer side)
# ---------------------------------------------------------------------------------------------

_E4M3_POS = e4m3_table()[:127]            # codes 0..126: the non-negative finite values


def bf16_bytes(a):
    """float32 values -> BF16 bytes (RNE)."""
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().astype("<i2").tobytes()


def fp8_tile_weight(w):
    """A float32 [out, in] weight quantized as the checkpoint does (E4M3 codes, UE8M0 scale per
    32x32 tile) and returned dequantized (exactly representable in bf16)."""
    o, i = w.shape
    po, pi = -(-o // 32) * 32, -(-i // 32) * 32
    t = np.zeros((po, pi), dtype=np.float32)
    t[:o, :i] = w
    tiles = torch.from_numpy(t.reshape(po // 32, 32, pi // 32, 32))
    amax = torch.clamp(tiles.abs().amax(dim=(1, 3), keepdim=True), min=1e-4)
    e = nm.fast_round_scale(amax, nm.R448)
    q = nm.e4m3_rne(tiles * nm.pow2(-e)) * nm.pow2(e)
    return q.numpy().reshape(po, pi)[:o, :i].copy()


def e4m3_codes(v):
    """Codes of values already on the E4M3 grid (float32 array)."""
    mag = np.abs(v)
    code = np.searchsorted(_E4M3_POS, mag).astype(np.uint8)
    if not np.array_equal(_E4M3_POS[code], mag):
        raise ValueError("e4m3_codes: value not on the E4M3 grid")
    return code | np.where(np.signbit(v), 0x80, 0).astype(np.uint8)


def row264_bytes(table):
    """[rows, 256] float32 -> I8 row264 bytes (E4M3 codes, then one UE8M0 byte per 32)."""
    rows, width = table.shape
    b = torch.from_numpy(table.astype(np.float32)).reshape(rows, width // 32, 32)
    amax = torch.clamp(b.abs().amax(dim=-1, keepdim=True), min=1e-4)
    e = nm.fast_round_scale(amax, nm.R448)
    q = nm.e4m3_rne(b * nm.pow2(-e)).numpy().reshape(rows, width)
    out = np.empty((rows, width + width // 32), dtype=np.uint8)
    out[:, :width] = e4m3_codes(q)
    out[:, width:] = (e.numpy().reshape(rows, width // 32) + 127).astype(np.uint8)
    return out.tobytes()


def mxfp4_bytes(w):
    """[rows, K] float32 -> GGML MXFP4 blocks (per 32 inputs: UE8M0 byte, 16 nibble bytes)."""
    rows, k = w.shape
    b = torch.from_numpy(w.astype(np.float32)).reshape(rows * k // 32, 32)
    amax = torch.clamp(b.abs().amax(dim=-1, keepdim=True), min=6.0 * 2.0 ** -126)
    e = nm.fast_round_scale(amax, nm.R6)
    v = nm.e2m1_rne(torch.clamp(b * nm.pow2(-e), -6.0, 6.0)).numpy()
    mag_code = np.searchsorted(np.array(nm.E2M1_VALUES, dtype=np.float32), np.abs(v)).astype(np.uint8)
    code = mag_code | np.where(np.signbit(v), 8, 0).astype(np.uint8)
    out = np.empty((b.shape[0], 17), dtype=np.uint8)
    out[:, 0] = (e.numpy().reshape(-1) + 127).astype(np.uint8)
    out[:, 1:] = code[:, :16] | (code[:, 16:] << 4)
    return out.tobytes()


# ---------------------------------------------------------------------------------------------
# Random v41-tiny model
# ---------------------------------------------------------------------------------------------


def write_tiny_model(path, seed=1, zero_index_proj=(), cfg=None, dspark=True):
    """Writes a random model with the v41-tiny shapes and schedule (lossless profile).

    zero_index_proj: layers whose indexer.proj is all zero (every index score is then 0).
    dspark: also write the DSpark stages (blk.{n_layers + s}.*) and their keys."""
    c = dict(TINY if cfg is None else cfg)
    if not dspark:
        c["n_mtp"] = 0
    rng = np.random.default_rng(seed)
    D, V, H, Dh = c["dim"], c["vocab"], c["n_heads"], c["head_dim"]
    Rq, G, Ro, L = c["q_lora"], c["o_groups"], c["o_lora"], c["n_layers"]
    n, E, F = c["hc_mult"], c["experts"], c["inter"]
    HI, DI = c["index_heads"], c["index_dim"]
    M = (2 + n) * n
    N, EH, ED = c["engram_ngram"], c["engram_heads"], c["engram_dim"]
    C = (N - 1) * EH
    tensors = []

    def randn(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def proj(out, inp, gain=1.5):
        return randn(out, inp, std=gain / np.sqrt(inp))

    def norm_w(size, mean):
        return (mean * (1.0 + randn(size, std=0.1))).astype(np.float32)

    def add_f32(name, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        tensors.append((name, list(reversed(a.shape)), T_F32, a.astype("<f4").tobytes()))

    def add_bf16(name, a):
        tensors.append((name, list(reversed(a.shape)), T_BF16, bf16_bytes(a)))

    def add_fp8(name, a):
        add_bf16(name, fp8_tile_weight(a))

    def add_norm(name, size, mean):
        add_f32(name, nm.bf16(torch.from_numpy(norm_w(size, mean))).numpy())

    add_bf16("token_embd.weight", randn(V, D, std=0.12))
    add_norm("output_norm.weight", D, 1.0)
    add_bf16("output.weight", proj(V, D, 1.0))

    kv_src, ix_src = c["kv_sources"], c["index_sources"]
    S = c["n_mtp"]
    for il in range(L + S):
        p = f"blk.{il}."
        r = c["ratios"][il]
        Ex = E if il < L else c["dspark_experts"]
        for site in ("attn", "ffn"):
            add_f32(p + f"hc_{site}_fn.weight", randn(M, n * D, std=0.5 / np.sqrt(n * D)))
            base = np.zeros(M, dtype=np.float32)
            base[:n] = -1.1 + randn(n, std=0.1)
            base[n:2 * n] = randn(n, std=0.1)
            base[2 * n:] = (2.0 * np.eye(n, dtype=np.float32)).reshape(-1) + randn(n * n, std=0.1)
            add_f32(p + f"hc_{site}_base.weight", base)
            add_f32(p + f"hc_{site}_scale.weight", np.array([0.5, 0.5, 0.5], dtype=np.float32))
        add_norm(p + "attn_norm.weight", D, 0.5)
        add_norm(p + "ffn_norm.weight", D, 0.5)
        add_f32(p + "attn_sinks.weight", randn(H))
        add_fp8(p + "attn_q_a.weight", proj(Rq, D, 2.0))
        add_norm(p + "attn_q_a_norm.weight", Rq, 0.97)
        add_fp8(p + "attn_q_b.weight", proj(H * Dh, Rq, 2.0))
        add_fp8(p + "attn_kv.weight", proj(Dh, D, 2.0))
        add_norm(p + "attn_kv_a_norm.weight", Dh, 0.4)
        add_bf16(p + "attn_output_a.weight", fp8_tile_weight(proj(G * Ro, H * Dh // G)))
        add_fp8(p + "attn_output_b.weight", proj(D, G * Ro))
        if il in kv_src:
            add_bf16(p + "attn_compressor_kv.weight", proj(Dh, D, 2.0))
            if r > 1:
                add_bf16(p + "attn_compressor_gate.weight", proj(Dh, D, 2.0))
            add_norm(p + "attn_compressor_norm.weight", Dh, 0.6)
            add_bf16(p + "indexer.attn_k.weight", proj(DI, Dh, 2.0))
            add_norm(p + "indexer.k_norm.weight", DI, 0.5)
        if il in ix_src:
            add_fp8(p + "indexer.attn_q_b.weight", proj(HI * DI, Rq, 2.0))
            wp = np.zeros((HI, D), np.float32) if il in zero_index_proj else proj(HI, D, 2.0)
            add_bf16(p + "indexer.proj.weight", wp)
        add_bf16(p + "ffn_gate_inp.weight", proj(Ex, D, 2.0))
        add_f32(p + "exp_probs_b.bias", randn(Ex, std=0.1))
        add_f32(p + "exp_probs_b_vl.bias", randn(Ex, std=0.1))
        for nm_, shape in (("ffn_gate_exps", (F, D)), ("ffn_up_exps", (F, D)), ("ffn_down_exps", (D, F))):
            w = np.stack([proj(*shape) for _ in range(Ex)])                # [E, out, in]
            raw = mxfp4_bytes(w.reshape(-1, shape[1]))
            tensors.append((p + nm_ + ".weight", [shape[1], shape[0], Ex], T_MXFP4, raw))
        add_fp8(p + "ffn_gate_shexp.weight", proj(F, D))
        add_fp8(p + "ffn_up_shexp.weight", proj(F, D))
        add_fp8(p + "ffn_down_shexp.weight", proj(D, F))

    if S > 0:
        Rm, T = c["markov_rank"], len(c["dspark_targets"])
        add_fp8(f"blk.{L}.dspark_main_proj.weight", proj(D, T * D))
        add_norm(f"blk.{L}.dspark_main_norm.weight", D, 1.0)
        last = f"blk.{L + S - 1}."
        add_norm(last + "dspark_norm.weight", D, 1.0)
        add_bf16(last + "dspark_markov_embd.weight", randn(V, Rm))
        add_bf16(last + "dspark_markov_head.weight", proj(V, Rm, 0.5))
        add_f32(last + "dspark_conf.weight", nm.bf16(torch.from_numpy(proj(1, D + Rm))).numpy())

    primes = eg.bucket_primes(len(c["engram_layers"]), c["engram_vocab"], N, EH)
    rows = [sum(p for row in layer for p in row) for layer in primes]
    for k, il in enumerate(c["engram_layers"]):
        p = f"blk.{il}."
        tensors.append((p + "engram_embd.weight", [ED + ED // 32, rows[k]], T_I8,
                        row264_bytes(randn(rows[k], ED, std=0.5))))
        add_fp8(p + "engram_kv.weight", proj((n + 1) * D, C * ED))
        add_f32(p + "engram_q_norm.weight", 1.0 + randn(n, D, std=0.1))
        add_f32(p + "engram_k_norm.weight", 1.0 + randn(n, D, std=0.1))

    write_gguf(path, tiny_metadata(c), tensors)


def tiny_metadata(cfg=None):
    """The §2.4 metadata of a v41-tiny-shaped model: [(key, vtype, value)]."""
    c = dict(TINY if cfg is None else cfg)
    L, D, V, H, Dh, Dr = c["n_layers"], c["dim"], c["vocab"], c["n_heads"], c["head_dim"], c["rope_dim"]
    Rq, G, Ro, n, E, F = c["q_lora"], c["o_groups"], c["o_lora"], c["hc_mult"], c["experts"], c["inter"]
    HI, DI, N, EH, ED = c["index_heads"], c["index_dim"], c["engram_ngram"], c["engram_heads"], c["engram_dim"]
    kv_src, ix_src = c["kv_sources"], c["index_sources"]
    primes = eg.bucket_primes(len(c["engram_layers"]), c["engram_vocab"], N, EH)
    rows = [sum(p for row in layer for p in row) for layer in primes]
    a = ARCH + "."
    token_map = [t // 2 for t in range(V)]
    offs = [o for layer in primes for o in eg.offsets_of(layer)]
    ratios = c["ratios"]
    meta = [
        ("general.architecture", STRING, ARCH),
        ("general.name", STRING, "v41-tiny (random, reference self-test)"),
        (a + "block_count", U32, L), (a + "nextn_predict_layers", U32, c["n_mtp"]),
        (a + "context_length", U32, c["context"]), (a + "embedding_length", U32, D),
        (a + "vocab_size", U32, V), (a + "attention.head_count", U32, H),
        (a + "attention.head_count_kv", U32, 1), (a + "attention.key_length", U32, Dh),
        (a + "attention.value_length", U32, Dh), (a + "rope.dimension_count", U32, Dr),
        (a + "attention.q_lora_rank", U32, Rq), (a + "attention.output_group_count", U32, G),
        (a + "attention.output_lora_rank", U32, Ro), (a + "attention.sliding_window", U32, c["window"]),
        (a + "attention.compress_ratios", ARRAY, (I32, ratios)),
        (a + "attention.kv_source_layer_ids", ARRAY, (U32, kv_src)),
        (a + "attention.index_source_layer_ids", ARRAY, (U32, ix_src)),
        (a + "attention.candidate_source_layer_id", I32, c["cand_source"]),
        (a + "attention.candidate_topk_blocks", U32, c["cand_blocks"]),
        (a + "attention.candidate_block_size", U32, c["cand_block_size"]),
        (a + "attention.indexer.head_count", U32, HI), (a + "attention.indexer.key_length", U32, DI),
        (a + "attention.indexer.top_k", U32, c["index_topk"]),
        (a + "rope.freq_base", F32T, c["rope_theta"]),
        (a + "attention.compress_rope_freq_base", F32T, c["compress_rope_theta"]),
        (a + "rope.scaling.type", STRING, "yarn"),
        (a + "rope.scaling.original_context_length", U32, c["orig_seq_len"]),
        (a + "rope.scaling.factor", F32T, c["rope_factor"]),
        (a + "rope.scaling.yarn_beta_fast", F32T, c["beta_fast"]),
        (a + "rope.scaling.yarn_beta_slow", F32T, c["beta_slow"]),
        (a + "attention.layer_norm_rms_epsilon", F32T, c["norm_eps"]),
        (a + "hyper_connection.count", U32, n), (a + "hyper_connection.sinkhorn_iterations", U32, c["sinkhorn"]),
        (a + "hyper_connection.epsilon", F32T, c["hc_eps"]),
        (a + "expert_count", U32, E), (a + "expert_used_count", U32, c["experts_used"]),
        (a + "expert_shared_count", U32, 1), (a + "expert_feed_forward_length", U32, F),
        (a + "expert_scoring_func", STRING, "sqrtsoftplus"),
        (a + "expert_weights_scale", F32T, c["route_scale"]), (a + "expert_weights_norm", BOOL, True),
        (a + "swiglu_clamp_exp", ARRAY, (F32T, [c["swiglu_limit"]] * (L + c["n_mtp"]))),
        (a + "swiglu_clamp_shexp", ARRAY, (F32T, [c["swiglu_limit"]] * (L + c["n_mtp"]))),
        (a + "hash_layer_count", U32, 0),
        (a + "engram.layer_ids", ARRAY, (U32, c["engram_layers"])),
        (a + "engram.num_embeddings", ARRAY, (U64, rows)),
        (a + "engram.vocab_size", U32, c["engram_vocab"]),
        (a + "engram.max_ngram_size", U32, N), (a + "engram.head_count", U32, EH),
        (a + "engram.key_length", U32, ED), (a + "engram.compressed_vocab_size", U32, c["engram_cvocab"]),
        (a + "engram.pad_id", U32, token_map[c["engram_pad_token"]]),
        (a + "engram.token_map", ARRAY, (I32, token_map)),
        (a + "engram.multipliers", ARRAY, (U64, [m for row in c["multipliers"] for m in row])),
        (a + "engram.primes", ARRAY, (U64, [p for layer in primes for row in layer for p in row])),
        (a + "engram.offsets", ARRAY, (U64, offs)),
        (a + "engram.encoding", STRING, "e4m3_e8m0_32_row264"),
    ]
    if c["n_mtp"] > 0:
        meta += [
            (a + "dspark.block_size", U32, c["dspark_block"]),
            (a + "dspark.noise_token_id", U32, c["dspark_noise"]),
            (a + "dspark.target_layer_ids", ARRAY, (U32, c["dspark_targets"])),
            (a + "dspark.markov_rank", U32, c["markov_rank"]),
            (a + "dspark.expert_count", U32, c["dspark_experts"]),
            (a + "dspark.expert_used_count", U32, c["dspark_used"]),
        ]
    return meta
