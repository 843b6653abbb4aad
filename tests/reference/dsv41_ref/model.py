"""The DeepSeek V4.1 (`deepseek41`) forward pass, token by token (v41.md §1-§5, §9).

Owns: the model over one GGUF file, its load-time tensor checks, and the sub-layer functions:
Engram, mHC, attention (compressor, indexer, candidates, top-k, sparse attention), MoE, DSpark
and the head. The hyper-parameters and roles, the weights, the per-sequence and per-forward
state and the options are in model_state.py; they are re-exported here, so callers keep
importing every public name from dsv41_ref.model.

Evaluation is one token at a time (decode semantics). With the engine rules (the R decode
list layout for every query, §5.2, and the tie rules of §5.3) this is also the definition of
prefill and chunked prefill. The bit-level numerics are in numerics.py.
"""

import numpy as np
import torch

from dsv4_ref.gguf import GGUFFile

from . import engram as eg
from . import numerics as nm
from .model_state import (  # noqa: F401  (re-exported: the public names of dsv41_ref.model)
    ARCH,
    FULL,
    REINDEX,
    REUSE,
    SWA,
    ForwardRuntime,
    HParams,
    Options,
    SequenceState,
    SourceCache,
    Weights,
    ints_or_floats,
    stable_topk,
)
from .numerics import F32, bf16


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class Model:
    """A DeepSeek V4.1 model over one GGUF file, evaluating one sequence token by token.

    `recorder(name, value)` receives every named intermediate (docs/reference.md)."""

    def __init__(self, path, options=None):
        self.opt = options or Options()
        self.gguf = GGUFFile(path)
        self.hp = HParams(self.gguf.metadata, self.gguf.tensors)
        self.w = Weights(self.gguf)
        hp = self.hp
        self.rope0 = nm.Rope(hp.n_rot, hp.rope_base)
        self.ropec = nm.Rope(hp.n_rot, hp.compress_rope_base,
                             (hp.rope_factor, hp.rope_orig_ctx, hp.yarn_beta_fast, hp.yarn_beta_slow))
        self.recorder = lambda name, value: None
        self._check_tensors()
        self.reset()

    def reset(self):
        self.seq = SequenceState(self.hp)

    def rope(self, il):
        return self.ropec if self.hp.ratios[il] > 0 else self.rope0

    # -- load-time checks -------------------------------------------------------------------

    def _block_shapes(self, n_expert):
        """PyTorch-order shapes of the tensors every block (backbone or DSpark stage) has."""
        hp = self.hp
        D, H, Dh, Rq, G, Ro = hp.n_embd, hp.n_head, hp.n_head_dim, hp.q_lora, hp.n_group, hp.o_lora
        n, M, E, F = hp.n_hc, (2 + hp.n_hc) * hp.n_hc, n_expert, hp.n_ff_exp
        return {
            "hc_attn_fn.weight": (M, n * D), "hc_ffn_fn.weight": (M, n * D),
            "hc_attn_base.weight": (M,), "hc_ffn_base.weight": (M,),
            "hc_attn_scale.weight": (3,), "hc_ffn_scale.weight": (3,),
            "attn_norm.weight": (D,), "ffn_norm.weight": (D,), "attn_sinks.weight": (H,),
            "attn_q_a.weight": (Rq, D), "attn_q_a_norm.weight": (Rq,), "attn_q_b.weight": (H * Dh, Rq),
            "attn_kv.weight": (Dh, D), "attn_kv_a_norm.weight": (Dh,),
            "attn_output_a.weight": (G * Ro, H * Dh // G), "attn_output_b.weight": (D, G * Ro),
            "ffn_gate_inp.weight": (E, D), "exp_probs_b.bias": (E,),
            "ffn_gate_exps.weight": (E, F, D), "ffn_up_exps.weight": (E, F, D), "ffn_down_exps.weight": (E, D, F),
            "ffn_gate_shexp.weight": (F, D), "ffn_up_shexp.weight": (F, D), "ffn_down_shexp.weight": (D, F),
        }

    def _check_tensors(self):
        """Every tensor the schedule needs, with its shape (dequantizes and caches them all)."""
        hp, w = self.hp, self.w
        D, V, Dh, n = hp.n_embd, hp.n_vocab, hp.n_head_dim, hp.n_hc
        ne = self.gguf.tensors
        if "token_embd.weight" not in ne or tuple(ne["token_embd.weight"].ne) != (D, V):
            raise ValueError(f"token_embd.weight: expected ne [{D}, {V}]")
        w.expect("output.weight", (V, D))
        w.expect("output_norm.weight", (D,))
        for il in range(hp.n_layer + hp.n_mtp):
            p = f"blk.{il}."
            shapes = self._block_shapes(hp.n_expert if il < hp.n_layer else hp.dspark_experts)
            if hp.is_kv_source(il):
                shapes["attn_compressor_kv.weight"] = (Dh, D)
                shapes["attn_compressor_norm.weight"] = (Dh,)
                shapes["indexer.attn_k.weight"] = (hp.n_idx_dim, Dh)
                shapes["indexer.k_norm.weight"] = (hp.n_idx_dim,)
                if hp.ratios[il] > 1:
                    shapes["attn_compressor_gate.weight"] = (Dh, D)
            if hp.is_index_source(il):
                shapes["indexer.attn_q_b.weight"] = (hp.n_idx_head * hp.n_idx_dim, hp.q_lora)
                shapes["indexer.proj.weight"] = (hp.n_idx_head, D)
            if il in hp.engram_layers:
                k = hp.engram_layers.index(il)
                C = (hp.engram_ngram - 1) * hp.engram_heads
                shapes["engram_kv.weight"] = ((n + 1) * D, C * hp.engram_dim)
                shapes["engram_q_norm.weight"] = (n, D)
                shapes["engram_k_norm.weight"] = (n, D)
                t = ne.get(p + "engram_embd.weight")
                ok = t is not None and t.ne[1:] == (hp.engram_rows[k],) and (
                    (t.type_name == "I8" and t.ne[0] == hp.engram_dim + hp.engram_dim // 32) or
                    (t.type_name == "Q8_0" and t.ne[0] == hp.engram_dim))
                if not ok:
                    raise ValueError(f"{p}engram_embd.weight: expected I8 ne [{hp.engram_dim + hp.engram_dim // 32}, "
                                     f"{hp.engram_rows[k]}] (row264) or Q8_0 ne [{hp.engram_dim}, {hp.engram_rows[k]}]")
            if il == hp.n_layer:
                shapes["dspark_main_proj.weight"] = (D, len(hp.dspark_targets) * D)
                shapes["dspark_main_norm.weight"] = (D,)
            if hp.n_mtp > 0 and il == hp.n_layer + hp.n_mtp - 1:
                Rm = hp.dspark_markov_rank
                shapes["dspark_norm.weight"] = (D,)
                shapes["dspark_markov_embd.weight"] = (V, Rm)
                shapes["dspark_markov_head.weight"] = (V, Rm)
                shapes["dspark_conf.weight"] = (1, D + Rm)
            for name, shape in shapes.items():
                w.expect(p + name, shape)

    # -- Engram (§3.9.4) --------------------------------------------------------------------

    def engram(self, il, X, p):
        hp, w, rec = self.hp, self.w, self.recorder
        k = hp.engram_layers.index(il)
        pre = f"blk.{il}."
        idx = eg.hash_ids(self.seq.hist, p, hp.engram_mults[k], hp.engram_primes[k],
                          hp.engram_offsets[k], hp.engram_pad)
        rec(pre + "engram_rows", torch.tensor(idx, dtype=torch.float64))
        f = torch.cat([w.engram_row(pre + "engram_embd.weight", r, hp.engram_dim) for r in idx])  # [C*ED]
        kv = nm.fp8_linear(w(pre + "engram_kv.weight"), f)                 # [(n+1)*D]
        n, D = hp.n_hc, hp.n_embd
        key = kv[:n * D].reshape(n, D)
        val = kv[n * D:]
        wq = w(pre + "engram_q_norm.weight", True) * w(pre + "engram_k_norm.weight", True)  # [n, D]
        rho = (nm.rms_inv_f32(X, hp.rms_eps) * nm.rms_inv_f32(key, hp.rms_eps)).reshape(n)
        dot = nm.seq_sum((X * wq) * key, dim=1) * rho * torch.tensor(float(np.float32(D ** -0.5)), dtype=F32)
        mag = torch.sqrt(torch.clamp(dot.abs(), min=float(np.float32(1e-6))))
        gate = nm.sigmoid(torch.copysign(mag, dot))                       # [n]
        rec(pre + "engram_gate", gate)
        out = bf16(X + gate[:, None] * val[None, :])
        rec(pre + "engram_out", out.reshape(-1))
        return out

    # -- attention (§3.3-§3.7) --------------------------------------------------------------

    def compressor(self, il, x, p):
        """Feed token p to the compressor of KV source il; return the new pre-RoPE latent z_j
        (bf16 [Dh]) when a group completes, else None."""
        hp, w = self.hp, self.w
        pre, r = f"blk.{il}.", hp.ratios[il]
        norm = w(pre + "attn_compressor_norm.weight", True)
        if r == 1:
            return nm.rms_norm(nm.bf16_linear(w(pre + "attn_compressor_kv.weight"), x), norm, hp.rms_eps)
        src = self.seq.sources[il]
        src.pend_a[p % r] = nm.f32_linear(w(pre + "attn_compressor_kv.weight"), x)
        src.pend_b[p % r] = nm.f32_linear(w(pre + "attn_compressor_gate.weight"), x)
        if (p + 1) % r != 0:
            return None
        b = src.pend_b
        e = nm.expf(b - b.amax(dim=0, keepdim=True))
        wts = e / nm.seq_sum(e, dim=0).unsqueeze(0)                       # r-way softmax per channel
        zhat = wts[0] * src.pend_a[0]
        for u in range(1, r):
            zhat = zhat + wts[u] * src.pend_a[u]
        src.pend_b.fill_(-float("inf"))
        return nm.rms_norm(bf16(zhat), norm, hp.rms_eps)

    def emit_entry(self, il, z, j):
        """Index key and main row of latent z_j of KV source il (§3.4 steps 1-4, §3.5)."""
        hp, w = self.hp, self.w
        pre, r = f"blk.{il}.", hp.ratios[il]
        src = self.seq.sources[il]
        kappa = nm.rms_norm(nm.bf16_linear(w(pre + "indexer.attn_k.weight"), z),
                            w(pre + "indexer.k_norm.weight", True), hp.rms_eps)
        kappa = self.ropec.apply(kappa, j * r)
        if self.opt.kv_qdq:
            kappa = nm.qdq_mxfp4(kappa)
        c = self.ropec.apply(z, j * r)
        if self.opt.kv_qdq:
            c = nm.qdq_nvfp4(c)
        assert len(src.comp_rows) == j
        src.comp_rows.append(c)
        src.index_rows.append(kappa)

    def index_scores(self, il, x, q_lat, p, keys):
        """I_j over the n_tot index keys (§3.5), with the bf16 roundings of R."""
        hp, w = self.hp, self.w
        pre = f"blk.{il}."
        iota = nm.fp8_linear(w(pre + "indexer.attn_q_b.weight"), q_lat).reshape(hp.n_idx_head, hp.n_idx_dim)
        iota = self.ropec.apply(iota, p)
        if self.opt.kv_qdq:
            iota = nm.qdq_mxfp4(iota)
        omega = nm.bf16_linear(w(pre + "indexer.proj.weight"), x)
        omega = bf16(omega * torch.tensor(float(np.float32((hp.n_idx_dim ** -0.5) * (hp.n_idx_head ** -0.5))),
                                          dtype=F32))
        s = bf16(nm.seq_matvec(keys, iota))                               # [HI, n] sequential dots
        u = bf16(torch.clamp(s, min=0.0) * omega[:, None])
        acc = u[0].clone()
        for h in range(1, u.shape[0]):
            acc = acc + u[h]
        return bf16(acc)                                                  # [n]

    def candidates(self, I, n_vis):
        """The candidate mask of §3.6 from the unmasked scores I [n_tot]. Returns (mask, kept)."""
        hp = self.hp
        B, NB = hp.cand_block_size, hp.cand_blocks
        n_tot = I.shape[0]
        nblk = -(-n_tot // B)
        pad = torch.full((nblk * B,), -float("inf"), dtype=F32)
        pad[:n_tot] = I
        S = pad.reshape(nblk, B).amax(dim=1)
        if n_vis > 0:
            S[(n_vis - 1) // B] = float("inf")
        picked = stable_topk(S, min(NB, nblk))
        kept = sorted(int(b) for b in picked if S[b] != -float("inf"))
        blk_mask = torch.zeros(nblk, dtype=torch.bool)
        blk_mask[kept] = True
        mask = blk_mask.repeat_interleave(B)[:n_tot]
        return mask, kept

    def attention(self, il, x, p, rt):
        hp, w, rec = self.hp, self.w, self.recorder
        pre, r, mode = f"blk.{il}.", hp.ratios[il], hp.mode(il)
        rope = self.rope(il)
        H, Dh, W = hp.n_head, hp.n_head_dim, hp.n_swa

        qa_kv = nm.fp8_linear(w.cat([pre + "attn_q_a.weight", pre + "attn_kv.weight"]), x)  # [Rq + Dh]
        q_lat = nm.rms_norm(qa_kv[:hp.q_lora], w(pre + "attn_q_a_norm.weight", True), hp.rms_eps)
        rec(pre + "q_lora", q_lat)
        q = nm.fp8_linear(w(pre + "attn_q_b.weight"), q_lat).reshape(H, Dh)
        q = rope.apply(q, p)
        rec(pre + "q", q.reshape(-1))

        kv = nm.rms_norm(qa_kv[hp.q_lora:], w(pre + "attn_kv_a_norm.weight", True), hp.rms_eps)
        kv = rope.apply(kv, p)
        if self.opt.window_qdq:
            kv = nm.qdq_fp8(kv)
        rec(pre + "kv", kv)
        self.seq.rings[il][p % W] = kv

        # R decode layout (§5.2): W window slots, oldest first, EMPTY while the position is < 0.
        win_pos = [p - W + 1 + i for i in range(W)]
        rows = [self.seq.rings[il][t % W] if t >= 0 else torch.zeros(Dh, dtype=F32) for t in win_pos]
        valid = [t >= 0 for t in win_pos]

        if r > 0:
            sel = self.compressed_selection(il, x, q_lat, p, rt, mode)
            src = self.seq.sources[rt.compress_kv]
            rows += [src.comp_rows[j] for j in sel.tolist()]
            valid += [True] * len(sel)
            dump = torch.full((hp.idx_topk,), -1.0, dtype=torch.float64)
            dump[:len(sel)] = sel.to(torch.float64)
            rec(pre + "topk", dump)

        o = nm.sparse_attention(q, torch.stack(rows), torch.tensor(valid), w(pre + "attn_sinks.weight"), Dh)
        o = rope.apply(o, p, inverse=True)
        rec(pre + "attn_heads", o.reshape(-1))
        # Grouped wo_a (BF16-linear per group of H/G heads), then FP8-linear wo_b.
        G, Ro = hp.n_group, hp.o_lora
        og = o.reshape(G, -1)                                              # [G, (H/G)*Dh]
        wa = w(pre + "attn_output_a.weight").reshape(G, Ro, -1)             # [G, Ro, (H/G)*Dh]
        u = torch.cat([nm.bf16_linear(wa[g], og[g]) for g in range(G)])    # [G*Ro]
        return nm.fp8_linear(w(pre + "attn_output_b.weight"), u)

    def compressed_selection(self, il, x, q_lat, p, rt, mode):
        """Compressor, publication, indexer, candidates and top-k of one r > 0 layer; returns
        the selected entry ids (ascending) of its KV group."""
        hp, rec = self.hp, self.recorder
        r = hp.ratios[il]
        n_tot = (p + 1) // r                                               # decode: every entry visible
        if mode == FULL:
            z = self.compressor(il, x, p)
            if z is not None:
                self.emit_entry(il, z, (p + 1) // r - 1)
            rt.compress_kv = il
            if not self.opt.official_index_k or z is not None:
                rt.index_k = il
        src = self.seq.sources[rt.compress_kv]
        if rt.compress_kv != hp.kv_source(il) or len(src.comp_rows) != n_tot:
            raise AssertionError(f"layer {il}: compressed rows of layer {rt.compress_kv} not in step")

        if mode in (FULL, REINDEX):
            if n_tot == 0:
                rt.topk = torch.zeros(0, dtype=torch.int64)              # nothing visible: empty list
            else:
                if rt.index_k is None:
                    raise AssertionError(f"layer {il}: no index keys published")
                kc = self.seq.sources[rt.index_k].index_rows
                if len(kc) < n_tot:
                    raise AssertionError(f"layer {il}: published index keys hold {len(kc)} < {n_tot} rows")
                I = self.index_scores(il, x, q_lat, p, torch.stack(kc[:n_tot]))
                if hp.is_cand_source(il):
                    rt.candidates, kept = self.candidates(I, n_tot)
                    dump = torch.full((hp.cand_blocks,), -1.0, dtype=torch.float64)
                    dump[:len(kept)] = torch.tensor(kept, dtype=torch.float64)
                    rec(f"blk.{il}.candidates", dump)
                if hp.uses_candidates(il):
                    if rt.candidates is None or rt.candidates.shape[0] != n_tot:
                        raise AssertionError(f"layer {il}: no candidate mask for {n_tot} entries")
                    I = torch.where(rt.candidates, I, torch.tensor(-float("inf")))
                picked = stable_topk(I, min(hp.idx_topk, n_tot))
                rt.topk = torch.from_numpy(np.sort(picked).astype(np.int64))
        if rt.topk is None:
            raise AssertionError(f"layer {il}: no top-k list published")
        return rt.topk

    # -- MoE (§3.8) -------------------------------------------------------------------------

    def moe(self, il, x, rec_prefix=None):
        """§3.8 for the token's ffn_norm output x [D]; il may be a DSpark stage (>= n_layer)."""
        hp, w, rec = self.hp, self.w, self.recorder
        pre = f"blk.{il}."
        rec_prefix = pre if rec_prefix is None else rec_prefix
        n_used = hp.n_expert_used if il < hp.n_layer else hp.dspark_used
        clamp_exp, clamp_shexp = hp.clamp(il)
        logits = nm.f32_linear(w(pre + "ffn_gate_inp.weight"), x)
        if hp.gate_temp != 1.0:
            logits = logits / torch.tensor(hp.gate_temp, dtype=F32)
        sigma = torch.sqrt(nm.softplus(logits))
        biased = sigma + w(pre + "exp_probs_b.bias")
        sel = stable_topk(biased, n_used)
        g = sigma[torch.from_numpy(sel.astype(np.int64))]
        if hp.norm_topk and n_used > 1:
            tot = g[0].clone()
            for i in range(1, len(g)):
                tot = tot + g[i]
            g = g / (tot + torch.tensor(1e-20, dtype=F32))
        g = g * torch.tensor(hp.route_scale, dtype=F32)
        rec(rec_prefix + "moe_sel", torch.from_numpy(sel.astype(np.float64)))
        rec(rec_prefix + "moe_weights", g)

        # The selected experts in ascending id, then the shared expert, as one grouped product
        # (bit-identical to separate FP4-/FP8-linears: each row has its own weight).
        key = ("moe", il)
        if key not in w.cache:
            w13 = torch.cat((w.cat([pre + "ffn_gate_exps.weight", pre + "ffn_up_exps.weight"], dim=1),
                             w.cat([pre + "ffn_gate_shexp.weight", pre + "ffn_up_shexp.weight"]
                                   ).unsqueeze(0)))                                        # [E+1, 2F, D]
            w2 = torch.cat((w(pre + "ffn_down_exps.weight"), w(pre + "ffn_down_shexp.weight").unsqueeze(0)))
            w.cache[key] = (w13, w2)                                                       # [E+1, N, K]
        w13, w2 = w.cache[key]
        E = w13.shape[0] - 1
        order = np.sort(sel)
        rows = torch.from_numpy(np.append(order, E).astype(np.int64))                     # [k+1]
        F = hp.n_ff_exp
        au = nm.fp8_linear_grouped(w13[rows], x.unsqueeze(0).expand(len(rows), -1))      # [k+1, 2F]
        a, u = au[:, :F], au[:, F:]
        lim = torch.tensor([clamp_exp] * len(order) + [clamp_shexp], dtype=F32)[:, None]
        if bool((lim > 0).all()):
            u = torch.maximum(torch.minimum(u, lim), -lim)
            a = torch.minimum(a, lim)
        elif bool((lim > 0).any()):
            raise ValueError(f"layer {il}: mixed zero and non-zero SwiGLU clamps are not supported")
        y = nm.silu(a) * u                                                                  # [k+1, F]
        gw = torch.ones(len(rows), dtype=F32)
        pos = {int(e): i for i, e in enumerate(sel)}
        gw[:-1] = torch.stack([g[pos[int(e)]] for e in order])
        y = torch.cat((gw[:-1, None] * y[:-1], y[-1:]))                                     # weight BEFORE w2
        outs = nm.fp8_linear_grouped(w2[rows], bf16(y))                                     # [k+1, D]
        acc = outs[0].clone()
        for i in range(1, outs.shape[0]):
            acc = acc + outs[i]
        return bf16(acc)

    # -- DSpark (§3.10) ---------------------------------------------------------------------

    def window_row(self, il, x, pos):
        """QDQ_FP8(RoPE(RMSNorm(FP8-linear(wkv, x); kv_norm), pos)) of a ratio-0 layer."""
        hp, w = self.hp, self.w
        pre = f"blk.{il}."
        kv = nm.rms_norm(nm.fp8_linear(w(pre + "attn_kv.weight"), x),
                         w(pre + "attn_kv_a_norm.weight", True), hp.rms_eps)
        kv = self.rope0.apply(kv, pos)
        return nm.qdq_fp8(kv) if self.opt.window_qdq else kv

    def dspark_context(self, tap, p):
        """main_x of backbone position p from the taps (inputs of the target layers, copy mean),
        and every stage's ring row at slot p mod W."""
        hp, w, rec = self.hp, self.w, self.recorder
        pre0 = f"blk.{hp.n_layer}."
        rec("dspark.taps", tap)
        main_x = nm.rms_norm(nm.fp8_linear(w(pre0 + "dspark_main_proj.weight"), tap),
                             w(pre0 + "dspark_main_norm.weight", True), hp.rms_eps)
        rec("dspark.main_x", main_x)
        for s in range(hp.n_mtp):
            il = hp.n_layer + s
            row = self.window_row(il, main_x, p)
            rec(f"dspark.{s}.kv", row)
            self.seq.rings[il][p % hp.n_swa] = row

    def dspark_attention(self, il, xs, P):
        """DSpark block attention of stage layer il: rows i = 0..B_d-1 at positions P+1+i; each
        row attends over the ring (slot order, min(W, P+1) slots) then every block row."""
        hp, w = self.hp, self.w
        pre = f"blk.{il}."
        H, Dh, W = hp.n_head, hp.n_head_dim, hp.n_swa
        B = xs.shape[0]
        keys = torch.stack([self.window_row(il, xs[i], P + 1 + i) for i in range(B)])     # [B, Dh]
        ctx = self.seq.rings[il][:min(W, P + 1)]
        rows = torch.cat((ctx, keys))
        valid = torch.ones(rows.shape[0], dtype=torch.bool)
        q_lat = nm.rms_norm(nm.fp8_linear(w(pre + "attn_q_a.weight"), xs),
                            w(pre + "attn_q_a_norm.weight", True), hp.rms_eps)
        qs = nm.fp8_linear(w(pre + "attn_q_b.weight"), q_lat).reshape(B, H, Dh)
        G, Ro = hp.n_group, hp.o_lora
        wa = w(pre + "attn_output_a.weight").reshape(G, Ro, -1)
        outs = []
        for i in range(B):
            q = self.rope0.apply(qs[i], P + 1 + i)
            o = nm.sparse_attention(q, rows, valid, w(pre + "attn_sinks.weight"), Dh)
            o = self.rope0.apply(o, P + 1 + i, inverse=True)
            og = o.reshape(G, -1)
            u = torch.cat([nm.bf16_linear(wa[g], og[g]) for g in range(G)])
            outs.append(u)
        return nm.fp8_linear(w(pre + "attn_output_b.weight"), torch.stack(outs))          # [B, D]

    def draft(self, a, P):
        """One DSpark draft step after backbone position P (positions 0..P processed) with the
        main model's token a at P+1, at temperature 0. Returns (tokens [a, d_0..d_{B-1}],
        logits fp32 [B, V], confidence logits fp32 [B])."""
        hp, w, rec = self.hp, self.w, self.recorder
        if P + 1 != len(self.seq.hist):
            raise ValueError(f"draft after position {P}: the backbone has processed {len(self.seq.hist)} positions")
        B, n = hp.dspark_block, hp.n_hc
        ids = [a] + [hp.dspark_noise] * (B - 1)
        X = torch.stack([w.embed_row(t).unsqueeze(0).repeat(n, 1) for t in ids])           # [B, n, D]
        pi = torch.zeros(B, n, dtype=F32)
        pi[:, 0] = 1.0
        for s in range(hp.n_mtp):
            il = hp.n_layer + s
            pre = f"blk.{il}."
            mA = [self.mixes(il, "attn", X[i]) for i in range(B)]
            xs = torch.stack([nm.rms_norm(nm.collapse(X[i], pi[i]), w(pre + "attn_norm.weight", True), hp.rms_eps)
                              for i in range(B)])
            ys = self.dspark_attention(il, xs, P)
            X = torch.stack([nm.expand(ys[i], X[i], mA[i][1], mA[i][2]) for i in range(B)])
            mF = [self.mixes(il, "ffn", X[i]) for i in range(B)]
            for i in range(B):
                x = nm.rms_norm(nm.collapse(X[i], mA[i][0]), w(pre + "ffn_norm.weight", True), hp.rms_eps)
                y = self.moe(il, x, rec_prefix=f"dspark.{s}.")
                X[i] = nm.expand(y, X[i], mF[i][1], mF[i][2])
            pi = torch.stack([m[0] for m in mF])
        h = torch.stack([nm.collapse(X[i], pi[i]) for i in range(B)])                     # [B, D]
        rec("dspark.h", h.reshape(-1))
        last = f"blk.{hp.n_layer + hp.n_mtp - 1}."
        base = nm.f32_linear(w("output.weight"), nm.rms_norm(h, w(last + "dspark_norm.weight", True), hp.rms_eps))
        memb = w(last + "dspark_markov_embd.weight")
        mhead = w(last + "dspark_markov_head.weight")
        conf_w = w(last + "dspark_conf.weight")
        prev, toks, logits, conf = a, [a], [], []
        for i in range(B):
            me = memb[prev]
            li = base[i] + nm.f32_linear(mhead, me)
            d = int(np.argmax(li.numpy()))                                                # T = 0; ties: lowest id
            logits.append(li)
            conf.append(nm.f32_linear(conf_w, torch.cat((h[i], me)))[0])
            toks.append(d)
            prev = d
        rec("dspark.tokens", torch.tensor(toks, dtype=torch.float64))
        return toks, torch.stack(logits), torch.stack(conf)

    # -- block, head, token --------------------------------------------------------------------

    def mixes(self, il, site, X):
        hp, w = self.hp, self.w
        pre = f"blk.{il}.hc_{site}_"
        return nm.hc_mixes(X, w(pre + "fn.weight"), w(pre + "base.weight"), w(pre + "scale.weight"),
                           hp.n_hc, hp.rms_eps, hp.hc_eps, hp.sinkhorn_iters)

    def block(self, il, X, pi, p, rt):
        hp, w, rec = self.hp, self.w, self.recorder
        pre = f"blk.{il}."
        rec(pre + "hc_attn_in", X.reshape(-1))
        preA, postA, CA = self.mixes(il, "attn", X)
        x = nm.rms_norm(nm.collapse(X, pi), w(pre + "attn_norm.weight", True), hp.rms_eps)
        rec(pre + "attn_norm", x)
        y = self.attention(il, x, p, rt)
        rec(pre + "attn_out", y)
        X = nm.expand(y, X, postA, CA)
        rec(pre + "hc_ffn_in", X.reshape(-1))
        preF, postF, CF = self.mixes(il, "ffn", X)
        x = nm.rms_norm(nm.collapse(X, preA), w(pre + "ffn_norm.weight", True), hp.rms_eps)
        rec(pre + "ffn_norm", x)
        y = self.moe(il, x)
        rec(pre + "ffn_out", y)
        X = nm.expand(y, X, postF, CF)
        rec(pre + "out", X.reshape(-1))
        return X, preF

    def forward_token(self, token, p):
        """The backbone for the token at position p (positions must come in order from 0).
        Returns the head input h [D] (bf16 values)."""
        hp, w, rec = self.hp, self.w, self.recorder
        if p != len(self.seq.hist):
            raise ValueError(f"positions must be processed in order: got {p}, expected {len(self.seq.hist)}")
        if not 0 <= token < hp.n_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {hp.n_vocab})")
        self.seq.hist.append(hp.token_map[token] if hp.engram_layers else token)
        e = w.embed_row(token)
        rec("embd", e)
        X = e.unsqueeze(0).repeat(hp.n_hc, 1)                               # [n, D]
        pi = torch.zeros(hp.n_hc, dtype=F32)
        pi[0] = 1.0
        rt = ForwardRuntime(self.seq.index_k_slot)
        taps = []
        for il in range(hp.n_layer):
            if il in hp.engram_layers:
                X = self.engram(il, X, p)
            if il in hp.dspark_targets:
                s = X[0].clone()
                for i in range(1, hp.n_hc):
                    s = s + X[i]
                taps.append(bf16(s / float(hp.n_hc)))
            X, pi = self.block(il, X, pi, p, rt)
        self.seq.index_k_slot = rt.index_k
        if hp.n_mtp > 0:
            self.dspark_context(torch.cat(taps), p)
        h = nm.rms_norm(nm.collapse(X, pi), w("output_norm.weight", True), hp.rms_eps)
        rec("result_norm", h)
        return h

    def logits(self, h):
        """F32 head on head inputs [n, D] -> fp32 [n, V]."""
        return nm.f32_linear(self.w("output.weight"), h)

    def final_caches(self):
        """{KV source layer: (comp_rows [n, Dh], index_rows [n, DI])} of the sequence."""
        hp = self.hp
        out = {}
        for s, src in self.seq.sources.items():
            cr = torch.stack(src.comp_rows) if src.comp_rows else torch.zeros(0, hp.n_head_dim)
            ir = torch.stack(src.index_rows) if src.index_rows else torch.zeros(0, hp.n_idx_dim)
            out[s] = (cr, ir)
        return out
