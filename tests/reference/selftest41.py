#!/usr/bin/python3
"""Self-test of the DeepSeek V4.1 reference (tests/reference/dsv41_ref).

Checks:
  * the QDQ element formats of v41.md §4.1 (listed examples, E4M3 and E2M1 against brute-force
    nearest-value searches with the stated ties, fast_round_scale), the §4.3 FP4/E4M3-scale QDQ
    against an independent division-based computation and the §4.4 MXFP4 QDQ;
  * the MXFP4 and row264 dequantizers on hand-built blocks, and through the writer's packers;
  * the RoPE inv_freq golden tables of §3.3 and §6.2;
  * the Engram primes, offsets and hash vectors of §3.9.2, §3.9.5 and §6.3;
  * Sinkhorn properties, the top-k tie rule of §5.3, the schedule roles and the C1-C5 checks;
  * a whole random v41-tiny model written by dsv41_ref.gguf_writer: finite logits, Reuse layers
    inherit their source's selection, the candidate mask excludes blocks once T >= 9 (newest
    block pinned, Reindex picks inside it), the tie rule with a zero indexer.proj, the official
    index-key mode differing from the default only from an even position on (§9.1), the QDQ
    switches changing the result, and the ref.py command line with dumps;
  * DSpark on that model: taps, ring contents after a wrap, Markov chaining, confidence logits
    and the bidirectional block attention.

Exit status: 0 all passed, 1 a check failed.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dsv41_ref import engram as eg  # noqa: E402  (first: the package registers the V4.1 GGML types)
from dsv4_ref import dequant  # noqa: E402
from dsv41_ref import gguf_writer as gw  # noqa: E402
from dsv41_ref import model as v41  # noqa: E402
from dsv41_ref import numerics as nm  # noqa: E402

FAILURES = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(name)


def f32_bits(a):
    return [f"{int(v):08x}" for v in np.asarray(a, dtype=np.float32).view(np.uint32)]


def t(values):
    return torch.tensor(values, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# §4 element formats and QDQs
# ---------------------------------------------------------------------------------------------

E4M3_VALUES = dequant.e4m3_table()


def brute_e4m3(v):
    """Nearest finite E4M3 value after the satfinite clamp; ties to the even code."""
    v = float(np.clip(v, -448.0, 448.0))
    codes = [c for c in range(256) if not np.isnan(E4M3_VALUES[c])]
    best = min(codes, key=lambda c: (abs(float(E4M3_VALUES[c]) - v), c & 1, c))
    r = float(E4M3_VALUES[best])
    return -0.0 if r == 0 and np.signbit(v) else (0.0 if r == 0 else r)


def brute_e2m1(v):
    """Nearest E2M1 value (input in [-6, 6]); ties to the even code (§4.1)."""
    mags = nm.E2M1_VALUES
    best = min(range(8), key=lambda c: (abs(mags[c] - abs(v)), c & 1))
    return float(np.copysign(mags[best], v))


def test_formats():
    got = nm.e4m3_rne(t([17, 19, 1.5 * 2 ** -9, 0.5 * 2 ** -9, 1000, -1000, -0.0])).tolist()
    check("E4M3 examples 17->16, 19->20, 1.5*2^-9->2^-8, 0.5*2^-9->0, 1000->448",
          got == [16, 20, 2 ** -8, 0, 448, -448, 0] and np.signbit(got[-1]), str(got))
    rng = np.random.default_rng(5)
    vals = np.concatenate([rng.standard_normal(1500) * 10.0 ** rng.integers(-4, 3, 1500),
                           (E4M3_VALUES[0:126] + E4M3_VALUES[1:127]) / 2.0,        # every midpoint
                           [500.0, 448.5, 2 ** -10, -(2 ** -10), 2 ** -9 * 0.25]]).astype(np.float32)
    ours = nm.e4m3_rne(torch.from_numpy(vals)).numpy()
    want = np.array([brute_e4m3(v) for v in vals], dtype=np.float32)
    check("E4M3 satfinite RNE equals a brute-force nearest-even search",
          np.array_equal(ours, want) and np.array_equal(np.signbit(ours), np.signbit(want)),
          f"{int(np.sum(ours != want))} of {vals.size} differ")
    # The numpy fast path inside qdq_fp8 agrees with e4m3_rne / fast_round_scale.
    x = nm.bf16(torch.from_numpy((rng.standard_normal((7, 96)) * 3.0).astype(np.float32)))
    b = x.reshape(7, 3, 32)
    e = nm.fast_round_scale(torch.clamp(b.abs().amax(-1, keepdim=True), min=float(np.float32(1e-4))), nm.R448)
    slow = nm.bf16(nm.e4m3_rne(b * nm.pow2(-e)) * nm.pow2(e)).reshape(7, 96)
    check("qdq_fp8 fast path equals the torch formulation", torch.equal(nm.qdq_fp8(x), slow))

    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -5.0, 0.0, -0.0]
    got = nm.e2m1_rne(t(ties)).tolist()
    check("E2M1 ties: 0.25,1.25,2.5,5 down; 0.75,1.75,3.5 up; -0 kept",
          got == [0, 1, 1, 2, 2, 4, 4, 0, -1, -4, 0, 0] and np.signbit(got[7]) and np.signbit(got[-1]), str(got))
    v = (rng.uniform(-6, 6, 3000)).astype(np.float32)
    ours = nm.e2m1_rne(torch.from_numpy(v)).numpy()
    want = np.array([brute_e2m1(a) for a in v], dtype=np.float32)
    check("E2M1 RNE equals a brute-force nearest-even search", np.array_equal(ours, want))

    e = nm.fast_round_scale(t([448, 449, 1]), nm.R448).tolist() + nm.fast_round_scale(t([6, 3]), nm.R6).tolist()
    check("fast_round_scale: 448->0, 449->1, 1->-8 (R448); 6->0, 3->-1 (R6)", e == [0, 1, -8, 0, -1], str(e))
    check("R448 = 0x3b124925, R6 = 0x3e2aaaab", f32_bits([nm.R448, nm.R6]) == ["3b124925", "3e2aaaab"])

    # §4.2: block-32 FP8 QDQ against a brute-force per-value rounding.
    x = nm.bf16(torch.from_numpy((rng.standard_normal((4, 64)) * 0.3).astype(np.float32)))
    y = nm.qdq_fp8(x).numpy()
    xb = x.numpy().reshape(4, 2, 32)
    ok = True
    for r in range(4):
        for blk in range(2):
            amax = max(float(np.abs(xb[r, blk]).max()), float(np.float32(1e-4)))
            prod = np.float32(np.float32(amax) * np.float32(nm.R448))
            m, ex = np.frexp(prod)
            E = int(ex) - 1 if m == 0.5 else int(ex)
            want = [brute_e4m3(v * 2.0 ** -E) * 2.0 ** E for v in xb[r, blk]]
            ok &= np.array_equal(y.reshape(4, 2, 32)[r, blk], np.array(want, dtype=np.float32))
    check("FP8 block-32 QDQ equals brute-force rounding with the UE8M0 scale", ok)

    # §4.3: true divisions; the scale is E4M3(amax / 6) and the element step divides by s.
    x = nm.bf16(torch.from_numpy((rng.standard_normal((64, 16)) * rng.uniform(0.01, 5, (64, 1))).astype(np.float32)))
    y = nm.qdq_nvfp4(x).numpy()
    xn = x.numpy()
    ok = True
    for r in range(64):
        amax = np.float32(max(np.abs(xn[r]).max(), np.float32(6 * 2.0 ** -9)))
        s = np.float32(brute_e4m3(np.float32(amax / np.float32(6.0))))
        want = [np.float32(brute_e2m1(float(np.clip(np.float32(v / s), -6, 6))) * s) for v in xn[r]]
        ok &= np.array_equal(y[r], np.array(want, dtype=np.float32))
    check("FP4/E4M3-per-16 QDQ equals an independent division-based computation", ok)

    # §4.4 MXFP4: power-of-two scale from R6.
    x = nm.bf16(torch.from_numpy((rng.standard_normal((8, 32)) * 2.0).astype(np.float32)))
    y = nm.qdq_mxfp4(x).numpy()
    ok = True
    for r in range(8):
        amax = np.float32(np.abs(x.numpy()[r]).max())
        m, ex = np.frexp(np.float32(amax * np.float32(nm.R6)))
        E = int(ex) - 1 if m == 0.5 else int(ex)
        want = [brute_e2m1(float(np.clip(v * 2.0 ** -E, -6, 6))) * 2.0 ** E for v in x.numpy()[r]]
        ok &= np.array_equal(y[r], np.array(want, dtype=np.float32))
    check("MXFP4 QDQ equals brute-force rounding with the UE8M0 scale", ok)


def test_dequant():
    blk = np.zeros(17, dtype=np.uint8)
    blk[0] = 130                                 # 2^(130 - 128) = 4 on GGML's doubled table
    blk[1] = 0x71                                # element 0: code 1 (0.5 * 8 = 4), element 16: code 7 (6 * 8 = 48)
    blk[2] = 0x9F                                # element 1: code 15 (-6 * 8), element 17: code 9 (-0.5 * 8)
    v = dequant.dequantize("MXFP4", blk.tobytes())
    check("MXFP4 dequant: nibble placement and 2^(e-128) scale",
          v.shape == (32,) and v[0] == 4 and v[16] == 48 and v[1] == -48 and v[17] == -4 and not v[2:16].any())
    w = (np.random.default_rng(2).standard_normal((4, 64)) * 0.05).astype(np.float32)
    back = dequant.dequantize("MXFP4", gw.mxfp4_bytes(w)).reshape(4, 64)
    check("MXFP4 pack/dequant round trip equals the MXFP4 QDQ", np.array_equal(back, nm.qdq_mxfp4(torch.from_numpy(w)).numpy()))

    row = np.zeros(264, dtype=np.uint8)
    row[0] = 0x38                                # E4M3 1.0
    row[33] = 0xC4                               # E4M3 -3.0 (e = 8, m = 4: -1.5 * 2)
    row[256], row[257] = 130, 120                # scales 2^3 and 2^-7
    v = dequant.dequant_row264(row.tobytes())
    check("row264 dequant: E4M3 codes times 2^(s - 127) per 32 columns",
          v[0] == 8.0 and v[33] == -3.0 * 2 ** -7 and not np.delete(v, [0, 33]).any())
    tab = nm.bf16(torch.from_numpy((np.random.default_rng(3).standard_normal((5, 256)) * 0.5).astype(np.float32)))
    back = dequant.dequant_row264(gw.row264_bytes(tab.numpy())).reshape(5, 256)
    check("row264 pack/dequant round trip equals the FP8 block-32 QDQ", np.array_equal(back, nm.qdq_fp8(tab).numpy()))
    check("I8 is plain int8", dequant.dequantize("I8", bytes([0, 127, 128, 255])).tolist() == [0, 127, -128, -1])


# ---------------------------------------------------------------------------------------------
# §3.3 / §6.2 RoPE tables
# ---------------------------------------------------------------------------------------------

GOLD_COMPRESSED = (
    "3f800000 3f300a3a 3ef21c1f 3ea67d01 3e64f92e 3e1d7475 3dd88cb4 3d94e963 3d4ccccd 3d0cd4fb "
    "3cc1b019 3c8530ce 3c372dbf 3bfbed88 3bad3d5e 3b6e4237 3b147ae1 3ab714e0 3a5ebdb6 3a0530ce "
    "399bb3af 39305978 38be904d 383e9b5f 37a3d70c 36b443d0 3677eba6 362a7be8 35ea77ff 35a13bdc "
    "355dbf30 35187c4d").split()
GOLD_RATIO0 = (
    "3f800000 3f3ff911 3f0ff59a 3ed7e89b 3ea1e89b 3e72d423 3e361887 3e088d77 3dcccccd 3d99940d "
    "3d6655c2 3d2cba15 3d0186e3 3cc2434f 3c91ad39 3c5a7bf2 3c23d70a 3bf5b9b0 3bb8449c 3b8a2e77 "
    "3b4f3e38 3b1b690d 3ae91528 3aaec98e 3a83126f 3a44948c 3a136a16 39dd1725 39a5cb60 3978a815 "
    "393a7753 390bd472").split()


def test_rope():
    check("inv_freq released ratio>0 table (theta 160000, YaRN 16x from 65536)",
          f32_bits(nm.inv_freq(64, 160000.0, (16.0, 65536, 32.0, 1.0))) == GOLD_COMPRESSED)
    check("inv_freq released ratio-0 table (theta 10000)", f32_bits(nm.inv_freq(64, 10000.0)) == GOLD_RATIO0)
    check("inv_freq v41-tiny ratio-0 table", f32_bits(nm.inv_freq(16, 10000.0)) ==
          "3f800000 3ea1e89b 3dcccccd 3d0186e3 3c23d70a 3b4f3e38 3a83126f 39a5cb60".split())
    check("inv_freq v41-tiny ratio>0 table (lo 0, hi 2)", f32_bits(nm.inv_freq(16, 160000.0, (4.0, 32, 32.0, 1.0))) ==
          "3f800000 3e0f1bbd 3c4ccccd 3b372dbf 3a23d70a 39128aff 3803126f 36ea77ff".split())
    rope = nm.Rope(16, 10000.0)
    x = nm.bf16(torch.randn(3, 64, generator=torch.Generator().manual_seed(1)))
    y = rope.apply(x, 37)
    back = rope.apply(y, 37, inverse=True)
    check("RoPE touches only the last Dr channels; inverse undoes it to bf16 accuracy",
          torch.equal(y[:, :48], x[:, :48]) and float((back - x).abs().max()) < 0.05 and
          torch.equal(nm.bf16(y), y) and torch.equal(rope.apply(x, 0), x))


# ---------------------------------------------------------------------------------------------
# §3.9 Engram
# ---------------------------------------------------------------------------------------------

REL_MULT = [[76632096046245, 4839876093313, 35959672319349, 73987337458391],
            [67716810739261, 51510806800915, 30921347202721, 82619226485591]]
REL_VECTORS = {
    (0, 0): "5702652 24393184 39183301 61503783 78984481 90144770 103724983 121476532 131476717 152385926 "
            "164143652 191599181 198145581 217419202 238329687 247482304 257520185 283540304 288689443 "
            "315264704 322314652 348890037 367865216 380066193",
    (1, 0): "14361964 29977809 32716444 61209771 67456205 84275051 108494439 120604547 132225184 150270452 "
            "174805952 178895254 193207923 211610196 226280582 252505246 261362261 279862797 301364059 "
            "312864848 328367036 349372619 363873742 372375971",
    (0, 2): "4120285 20896480 38390893 58888205 70109306 81443105 96533837 125252592 135465130 146916152 "
            "164515645 190613365 199937688 209413371 231643799 244444211 269195390 279986773 288575333 "
            "312073322 328925064 339981892 352930862 375588124",
    (1, 4): "13515235 25722972 37827947 51628878 66648833 93615889 99456457 120791798 135155987 158427394 "
            "171703745 188332837 200968092 220494500 229620659 252529351 257751966 284251557 293190323 "
            "305038202 322430821 343428666 365775118 382661594",
}
TINY_VECTORS = [
    ([38, 108, 299, 378, 450, 579], [126, 267, 366, 482, 671, 848]),
    ([40, 194, 284, 345, 443, 578], [54, 222, 273, 479, 579, 735]),
    ([73, 177, 285, 346, 451, 555], [66, 151, 396, 448, 682, 844]),
    ([27, 195, 286, 348, 462, 601], [37, 231, 337, 437, 625, 830]),
    ([65, 159, 213, 382, 483, 545], [37, 192, 335, 450, 613, 844]),
    ([17, 173, 214, 417, 525, 558], [76, 177, 367, 516, 677, 726]),
]


def test_engram():
    pr = eg.bucket_primes(2, 16000000, 4, 8)
    sums = [sum(p for row in layer for p in row) for layer in pr]
    check("released Engram prime sums 384006168 / 384016682", sums == [384006168, 384016682], str(sums))
    check("released Engram primes start 16000057 / 16000477 and end 16000463 / 16000889",
          pr[0][0][0] == 16000057 and pr[0][2][7] == 16000463 and pr[1][0][0] == 16000477 and pr[1][2][7] == 16000889)
    offs = [eg.offsets_of(layer) for layer in pr]
    check("released Engram offsets (spot values)", offs[0][:4] == [0, 16000057, 32000136, 48000217]
          and offs[0][-1] == 368005705 and offs[1][-1] == 368015793)
    hist = [0, 7, 99091, 12345, 2]
    ok = True
    for (k, p), want in REL_VECTORS.items():
        got = eg.hash_ids(hist, p, REL_MULT[k], pr[k], offs[k], 2)
        ok &= got == [int(v) for v in want.split()]
    check("released Engram hash vectors (§3.9.5)", ok)

    tp = eg.bucket_primes(2, 100, 4, 2)
    check("v41-tiny primes and offsets (§6.2)",
          tp == [[[101, 103], [107, 109], [113, 127]], [[131, 137], [139, 149], [151, 157]]] and
          eg.offsets_of(tp[0]) == [0, 101, 204, 311, 420, 533] and eg.offsets_of(tp[1]) == [0, 131, 268, 407, 556, 707])
    toks = [5, 17, 300, 2, 511, 42]
    hist = [tk // 2 for tk in toks]
    check("v41-tiny compressed ids", hist == [2, 8, 150, 1, 255, 21])
    ok = True
    for p, (w0, w1) in enumerate(TINY_VECTORS):
        ok &= eg.hash_ids(hist, p, gw.TINY["multipliers"][0], tp[0], eg.offsets_of(tp[0]), 1) == w0
        ok &= eg.hash_ids(hist, p, gw.TINY["multipliers"][1], tp[1], eg.offsets_of(tp[1]), 1) == w1
    check("v41-tiny Engram hash vectors (§6.3)", ok)
    # hist [3, DEAD, 4] at p = 2, mult [3, 5, 7, 11], one head, pad 1: rolling 4*3 = 12;
    # s=1 blocked: 12 ^ 5 = 9 -> 9 % 13; s=2 stays blocked (sticky, hist[0] = 3 is not used):
    # 9 ^ 7 = 14 -> 14 % 17 + 13; s=3 before the start: 14 ^ 11 = 5 -> 5 % 19 + 30.
    dead = eg.hash_ids([3, eg.DEAD, 4], 2, [3, 5, 7, 11], [[13], [17], [19]], [0, 13, 30], 1)
    check("a DEAD token blocks the look-back stickily", dead == [9, 27, 35], str(dead))


# ---------------------------------------------------------------------------------------------
# §3.2 Sinkhorn, §5.3 ties, §1.3 roles
# ---------------------------------------------------------------------------------------------


def test_sinkhorn_ties_roles():
    rng = np.random.default_rng(7)
    ok_cols, ok_rows, ok_pos, ok_ref = True, True, True, True
    for _ in range(20):
        z = torch.from_numpy(rng.standard_normal((4, 4)).astype(np.float32))
        c = nm.sinkhorn(z, 1e-6, 20)
        ok_cols &= bool((c.sum(0) - 1).abs().max() < 1e-5)
        ok_rows &= bool((c.sum(1) - 1).abs().max() < 1e-2)
        ok_pos &= bool((c > 0).all()) and c.dtype == torch.float32
        z64 = z.double().numpy()
        m = np.exp(z64 - z64.max(1, keepdims=True))
        m = m / m.sum(1, keepdims=True) + 1e-6
        m = m / (m.sum(0, keepdims=True) + 1e-6)
        for _ in range(19):
            m = m / (m.sum(1, keepdims=True) + 1e-6)
            m = m / (m.sum(0, keepdims=True) + 1e-6)
        ok_ref &= bool(np.abs(m - c.double().numpy()).max() < 1e-5)
    check("Sinkhorn ends on a column normalisation (column sums 1)", ok_cols)
    check("Sinkhorn rows near 1, entries positive, fp32", ok_rows and ok_pos)
    check("Sinkhorn fp32 equals a float64 evaluation to 1e-5", ok_ref)
    c1 = nm.sinkhorn(torch.zeros(4, 4), 1e-6, 1)
    check("Sinkhorn with one iteration: row softmax, then a column normalisation", bool((c1 - 0.25).abs().max() < 1e-6))

    s = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    check("tie rule: all-equal scores pick the smallest indices", v41.stable_topk(s, 4).tolist() == [0, 1, 2, 3])
    s = torch.tensor([1.0, 3.0, 3.0, -0.0, 0.0, 3.0, float("-inf"), 2.0])
    check("tie rule: larger score first, then smaller index",
          v41.stable_topk(s, 6).tolist() == [1, 2, 5, 7, 0, 3], str(v41.stable_topk(s, 6).tolist()))
    s = torch.tensor([float("-inf"), 5.0, float("inf"), 5.0])
    check("tie rule: +inf (pinned block) always first, -inf last", v41.stable_topk(s, 4).tolist() == [2, 1, 3, 0])

    meta = {k: (v[1] if vt == gw.ARRAY else v) for k, vt, v in gw.tiny_metadata()}
    hp = v41.HParams(meta, None)
    check("v41-tiny roles (§6.1)", [hp.mode(i) for i in range(8)] ==
          ["swa", "full", "reuse", "full", "full", "reuse", "reindex", "reuse"] and
          [hp.kv_source(i) for i in (2, 5, 6, 7)] == [1, 4, 4, 4] and hp.index_source(7) == 6 and
          hp.is_cand_source(4) and hp.uses_candidates(6) and not hp.uses_candidates(4))

    def rejects(change, what):
        m = dict(meta)
        m.update(change)
        try:
            v41.HParams(m, None)
            check(f"config check rejects {what}", False)
        except (ValueError, KeyError) as e:
            check(f"config check rejects {what}", True, str(e)[:70])

    a = "deepseek41."
    rejects({a + "attention.candidate_topk_blocks": 1}, "(NB-1)*B+1 < K (C5)")
    rejects({a + "attention.kv_source_layer_ids": [1, 3]}, "a ratio mismatch inside a KV group (C3)")
    rejects({a + "attention.index_source_layer_ids": [1, 3, 6]}, "a KV source that is no index source (C2)")
    rejects({a + "attention.compress_ratios": [0, 2, 2]}, "too few compress ratios (C1)")
    rejects({a + "engram.primes": [101] * 12}, "wrong Engram primes")
    rejects({a + "engram.token_map": [0] * 10}, "a token map shorter than the vocabulary")
    m = dict(meta)
    del m[a + "attention.kv_source_layer_ids"]
    try:
        v41.HParams(m, None)
        check("a missing source list is an error", False)
    except KeyError as e:
        check("a missing source list is an error", "kv_source_layer_ids" in str(e))


# ---------------------------------------------------------------------------------------------
# Whole random v41-tiny model
# ---------------------------------------------------------------------------------------------


def run_model(path, ids, **opts):
    torch.set_grad_enabled(False)
    m = v41.Model(path, v41.Options(**opts))
    rec = {}
    m.recorder = lambda n, v: rec.setdefault(n, []).append(v.detach().clone())
    heads = [m.forward_token(tk, p) for p, tk in enumerate(ids)]
    return m, m.logits(torch.stack(heads)), rec


def test_model(tmp):
    path = os.path.join(tmp, "v41-tiny.gguf")
    gw.write_tiny_model(path, seed=11)
    rng = np.random.default_rng(3)
    ids = [int(v) for v in rng.integers(0, 512, 36)]
    m, logits, rec = run_model(path, ids)
    T = len(ids)
    check("v41-tiny: logits finite, [T, V]", tuple(logits.shape) == (T, 512) and bool(torch.isfinite(logits).all()))
    topk = {il: torch.stack(rec[f"blk.{il}.topk"]) for il in range(1, 8)}
    check("Reuse layers take their index source's selection (2<-1, 5<-4, 7<-6)",
          torch.equal(topk[2], topk[1]) and torch.equal(topk[5], topk[4]) and torch.equal(topk[7], topk[6]))
    ok = True
    for p in range(T):
        for il, r in ((1, 2), (3, 2), (4, 1), (6, 1)):
            n_tot = (p + 1) // r
            row = topk[il][p]
            sel = row[row >= 0]
            ok &= len(sel) == min(4, n_tot) and bool((sel < n_tot).all()) and bool((sel[1:] > sel[:-1]).all())
    check("top-k lists: min(K, n_tot) ascending visible entries, -1 padded", ok)
    ok_pin, ok_excl, ok_in, excluded = True, True, True, False
    for p in range(T):
        kept = [int(b) for b in rec["blk.4.candidates"][p] if b >= 0]
        n_tot = p + 1
        nblk = -(-n_tot // 4)
        ok_pin &= (n_tot - 1) // 4 in kept
        ok_excl &= len(kept) == min(2, nblk)
        if nblk > 2:
            excluded = True
        sel = [int(j) for j in topk[6][p] if j >= 0]
        ok_in &= all(j // 4 in kept for j in sel)
    check("candidates: newest block pinned, min(NB, blocks) kept", ok_pin and ok_excl)
    check("candidates exclude blocks once T >= 9, and the Reindex layer picks inside them",
          excluded and ok_in and T >= 9)
    comp = m.final_caches()
    check("final caches: rows per KV source = floor(T / r)",
          [comp[s][0].shape[0] for s in (1, 3, 4)] == [T // 2, T // 2, T] and
          [comp[s][1].shape[1] for s in (1, 3, 4)] == [64, 64, 64])
    check("compressed rows are FP4/E4M3-per-16 QDQ fixed points, index keys MXFP4 fixed points",
          torch.equal(nm.qdq_nvfp4(comp[1][0]), comp[1][0]) and torch.equal(nm.qdq_mxfp4(comp[4][1]), comp[4][1]))
    # The compressor state machine against a direct formula from the dumped attention inputs:
    # layer 1 (r = 2) pools the pair (2j, 2j+1) with a per-channel two-way softmax, layer 4
    # (r = 1) takes every token; RoPE at the group's first position j*r.
    w = m.w
    ok = True
    for j in range(T // 2):
        xs = torch.stack([rec["blk.1.attn_norm"][2 * j], rec["blk.1.attn_norm"][2 * j + 1]])
        a = nm.f32_linear(w("blk.1.attn_compressor_kv.weight"), xs)
        b = nm.f32_linear(w("blk.1.attn_compressor_gate.weight"), xs)
        e = torch.exp(b - b.max(0).values)
        z = nm.rms_norm(nm.bf16((e / e.sum(0) * a).sum(0)), w("blk.1.attn_compressor_norm.weight"), 1e-20)
        ok &= torch.equal(comp[1][0][j], nm.qdq_nvfp4(m.ropec.apply(z, 2 * j)))
        k = nm.rms_norm(nm.bf16_linear(w("blk.1.indexer.attn_k.weight"), z), w("blk.1.indexer.k_norm.weight"), 1e-20)
        ok &= torch.equal(comp[1][1][j], nm.qdq_mxfp4(m.ropec.apply(k, 2 * j)))
    for j in (0, 5, T - 1):
        z = nm.rms_norm(nm.bf16_linear(w("blk.4.attn_compressor_kv.weight"), rec["blk.4.attn_norm"][j]),
                        w("blk.4.attn_compressor_norm.weight"), 1e-20)
        ok &= torch.equal(comp[4][0][j], nm.qdq_nvfp4(m.ropec.apply(z, j)))
    check("compressor r = 2 pairs / r = 1 tokens, index key before the main row, RoPE at j*r", ok)
    kv = torch.stack(rec["blk.5.kv"])
    check("window rows are FP8 block-32 QDQ fixed points", torch.equal(nm.qdq_fp8(kv), kv))
    e0 = rec["blk.0.engram_rows"]
    check("Engram ids of the model follow the hash of the file's token map",
          [int(v) for v in e0[3]] == eg.hash_ids([tk // 2 for tk in ids], 3, gw.TINY["multipliers"][0],
                                                 m.hp.engram_primes[0], m.hp.engram_offsets[0], 1))

    # §9.1: official decode uses stale index keys at even positions; with K = 4 the first even
    # position whose selection can change is p = 10 (n_tot = 5 > K at the ratio-2 sources).
    _, off_logits, off_rec = run_model(path, ids, official_index_k=True)
    diff = [p for p in range(T) if not torch.equal(off_logits[p], logits[p])]
    first = diff[0] if diff else None
    check("official index-k mode differs from the default, first at an even position >= 10",
          first is not None and first % 2 == 0 and first >= 10, f"first difference at {first}")
    sel_diff = [p for p in range(T) if not torch.equal(torch.stack(off_rec["blk.1.topk"])[p], topk[1][p])
                or not torch.equal(torch.stack(off_rec["blk.3.topk"])[p], topk[3][p])]
    check("... and the ratio-2 sources' selections first change at that position",
          bool(sel_diff) and sel_diff[0] == first, f"{sel_diff[:3]}")

    _, nofp8, _ = run_model(path, ids[:12], window_qdq=False)
    _, nofp4, _ = run_model(path, ids[:12], kv_qdq=False)
    check("the window FP8 QDQ and the FP4 cache QDQs change the logits",
          not torch.equal(nofp8[-1], logits[11]) and not torch.equal(nofp4[-1], logits[11]))

    # The tie rule inside the model: layer 3's indexer.proj is zero, so every index score is 0
    # and the selection is the lowest entry ids.
    path0 = os.path.join(tmp, "v41-tiny-zero-proj.gguf")
    gw.write_tiny_model(path0, seed=11, zero_index_proj=(3,))
    _, _, rec0 = run_model(path0, ids[:16])
    ok = True
    for p in range(16):
        n_tot = (p + 1) // 2
        want = list(range(min(4, n_tot))) + [-1] * (4 - min(4, n_tot))
        ok &= [int(v) for v in rec0["blk.3.topk"][p]] == want
    check("zero indexer.proj: all scores 0, the lowest entry ids win (§5.3)", ok)

    # The command line: same logits, dumps with the documented shapes.
    tok_path = os.path.join(tmp, "ids.json")
    with open(tok_path, "w") as f:
        json.dump(ids[:12], f)
    out = os.path.join(tmp, "logits.f32")
    ddir = os.path.join(tmp, "dumps")
    cmd = [sys.executable, os.path.join(HERE, "ref.py"), "eval-logits", "-m", path, "--tokens", tok_path,
           "--out", out, "--all-positions", "--dump", "embd,blk.*.topk,blk.1.comp_rows,blk.4.index_rows,"
           "blk.0.out,blk.2.kv,result_norm", "--dump-dir", ddir,
           "--dspark-out", os.path.join(tmp, "ds.f32"), "--dspark-conf", os.path.join(tmp, "dc.f32")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    ok = r.returncode == 0
    if ok:
        got = np.fromfile(out, dtype="<f4").reshape(12, 512)
        ok = np.array_equal(got, logits[:12].numpy())

        def shape(name, width):
            a = np.fromfile(os.path.join(ddir, name + ".f32"), dtype="<f4")
            return a.size % width == 0 and a.size // width

        ok &= (shape("embd", 256) == 12 and shape("blk.1.topk", 4) == 12 and shape("blk.1.comp_rows", 64) == 6
               and shape("blk.4.index_rows", 64) == 12 and shape("blk.0.out", 1024) == 12
               and shape("blk.2.kv", 64) == 12 and not os.path.exists(os.path.join(ddir, "blk.0.topk.f32")))
        ok &= (np.fromfile(os.path.join(tmp, "ds.f32"), dtype="<f4").size == 11 * 3 * 512
               and np.fromfile(os.path.join(tmp, "dc.f32"), dtype="<f4").size == 11 * 3)
    check("ref.py eval-logits on a deepseek41 file: same logits, documented dump shapes", ok, r.stderr.strip()[-200:])
    r = subprocess.run(cmd[:9] + ["--dump", "blk.2.comp_rows", "--dump-dir", ddir], capture_output=True, text=True)
    check("ref.py: a dump name the model lacks is an error", r.returncode == 1 and "no such intermediate" in r.stderr)


def test_dspark(tmp):
    path = os.path.join(tmp, "v41-tiny.gguf")                    # written by test_model (with DSpark)
    ids = [int(v) for v in np.random.default_rng(4).integers(0, 512, 21)]
    torch.set_grad_enabled(False)
    m = v41.Model(path)
    hp = m.hp
    rec = {}
    m.recorder = lambda n, v: rec.setdefault(n, []).append(v.detach().clone())
    drafts = {}
    for p, tok in enumerate(ids[:20]):
        m.forward_token(tok, p)
        if p in (4, 19):                                          # prompts of 5 and 20 tokens (§6.4)
            n_before = len(rec.get("dspark.h", []))
            drafts[p] = m.draft(ids[p + 1], p) + (n_before,)
    n, D = hp.n_hc, hp.n_embd
    ok = True
    for p in range(20):
        want = torch.cat([nm.bf16(rec[f"blk.{L}.hc_attn_in"][p].reshape(n, D).sum(0) / n)
                          for L in hp.dspark_targets])
        ok &= torch.equal(rec["dspark.taps"][p], want)
    check("DSpark taps: bf16 copy means of the inputs of the target layers, ascending", ok)
    ok = True
    for s in range(hp.n_mtp):
        ring = m.seq.rings[hp.n_layer + s]
        for p in range(20 - hp.n_swa, 20):
            ok &= torch.equal(ring[p % hp.n_swa], rec[f"dspark.{s}.kv"][p])
        ok &= torch.equal(nm.qdq_fp8(ring), ring)
    check("DSpark rings: slot p mod W holds every stage's FP8 row of main_x at p (wrapped)", ok)
    last = f"blk.{hp.n_layer + hp.n_mtp - 1}."
    memb, mhead = m.w(last + "dspark_markov_embd.weight"), m.w(last + "dspark_markov_head.weight")
    ok_chain, ok_conf, ok_fin = True, True, True
    for P, (toks, logits, conf, k) in drafts.items():
        h = rec["dspark.h"][k].reshape(hp.dspark_block, D)
        base = nm.f32_linear(m.w("output.weight"), nm.rms_norm(h, m.w(last + "dspark_norm.weight", True), hp.rms_eps))
        ok_fin &= bool(torch.isfinite(logits).all()) and toks[0] == ids[P + 1] and len(toks) == hp.dspark_block + 1
        for i in range(hp.dspark_block):
            ok_chain &= torch.equal(logits[i], base[i] + nm.f32_linear(mhead, memb[toks[i]]))
            ok_chain &= toks[i + 1] == int(np.argmax(logits[i].numpy()))
            ok_conf &= torch.equal(conf[i], nm.f32_linear(m.w(last + "dspark_conf.weight"),
                                                          torch.cat((h[i], memb[toks[i]])))[0])
    check("DSpark drafts: finite, block starts with the main model's token", ok_fin)
    check("DSpark Markov chaining: row i adds the Markov head of the previous token, argmax at T = 0", ok_chain)
    check("DSpark confidence: raw logit over [pre-norm h, Markov embedding]", ok_conf)
    h0 = rec["dspark.h"][drafts[19][3]].reshape(hp.dspark_block, D)[0]
    hp.dspark_noise = (hp.dspark_noise + 1) % hp.n_vocab
    m.draft(ids[20], 19)
    h1 = rec["dspark.h"][-1].reshape(hp.dspark_block, D)[0]
    check("DSpark block attention is bidirectional: row 0 sees the later (noise) rows", not torch.equal(h0, h1))


def main():
    torch.set_grad_enabled(False)
    test_formats()
    test_dequant()
    test_rope()
    test_engram()
    test_sinkhorn_ties_roles()
    with tempfile.TemporaryDirectory() as tmp:
        test_model(tmp)
        test_dspark(tmp)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed: " + ", ".join(FAILURES))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
