"""The DeepSeek V4 forward pass over whole sequences, differentiable, for training.

Owns: a batched ([batch, n_tokens]) formulation of the graph that tests/reference/dsv4_ref
defines token by token (model.md §5-§7, §12): HC with Sinkhorn, low-rank attention with the
raw sliding window, the ratio-4 and ratio-128 compressors, the ratio-4 indexer with its top-k,
sink attention, grouped output, hash and learned MoE routing, the output head and the MTP
block; plus what only training needs: straight-through estimators for the FP8 / FP4 round
trips, the indexer's distillation target, expert loads for bias balancing, and a loss over the
used rows of the vocabulary that equals the full-vocabulary cross entropy.

It reuses the reference's scalar rules (RoPE frequencies, the E4M3 / E2M1 rounding, the
Hadamard matrix) from dsv4_ref.ops, and is checked against the token-by-token reference
(tests/reference, CTest `train_model_parity`): same GGUF, float64, same logits.

Does not own: reading or writing GGUF files, the optimiser or the data (train.py).
"""

import math

import torch

from dsv4_ref import ops

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def rms_norm(x, w=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if w is None else y * w


def ste(x, q):
    """Straight-through estimator: the value of q(x), the gradient of the identity."""
    return x + (q(x.detach()) - x).detach()


def fp8_nope(x, n_nope, enabled):
    if not enabled:
        return x
    return ste(x, lambda v: ops.fp8_e4m3_roundtrip(v, n_nope))


def indexer_qat(x, use_fp4):
    y = ops.hadamard(x)
    return ste(y, ops.fp4_e2m1_roundtrip) if use_fp4 else y


class Rope:
    """cos / sin tables of one (n_rot, base, yarn) for positions 0 .. n-1 (float64 angles)."""

    def __init__(self, n_rot, base, yarn, n_pos, dtype):
        self.n_rot = n_rot
        omega = torch.from_numpy(ops.rope_frequencies(n_rot, float(base), yarn))
        phi = torch.arange(n_pos, dtype=torch.float64)[:, None] * omega[None, :]
        self.cos = torch.cos(phi).to(dtype)  # [n_pos, n_rot/2]
        self.sin = torch.sin(phi).to(dtype)

    def apply(self, x, pos, inverse=False):
        """Rotates the last n_rot dims of x [B, T, (heads,) hd] in adjacent pairs; `pos` is a
        LongTensor of the T positions."""
        cos, sin = self.cos[pos], self.sin[pos]  # [T, n_rot/2]
        for _ in range(x.dim() - 3):  # head axes between T and the channels
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        if inverse:
            sin = -sin
        n = self.n_rot
        head, tail = x[..., :-n], x[..., -n:]
        pairs = tail.reshape(*tail.shape[:-1], n // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rot = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
        return torch.cat((head, rot.reshape(tail.shape)), dim=-1)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class Config:
    """The hyper-parameters the batched graph needs, from a dsv4_ref.model.HParams."""

    def __init__(self, hp):
        self.hp = hp
        self.n_layer = hp.n_layer
        self.D = hp.n_embd
        self.H = hp.n_head
        self.hd = hp.n_head_dim
        self.n_rot = hp.n_rot
        self.n_nope = hp.n_nope
        self.n_hc = hp.n_hc
        self.G = hp.n_group
        self.o_lora = hp.o_lora
        self.E = hp.n_expert
        self.k = hp.n_expert_used
        self.n_swa = hp.n_swa
        self.IH = hp.n_idx_head
        self.Id = hp.n_idx_dim
        self.topk = hp.idx_topk
        self.eps = hp.rms_eps
        self.hc_eps = hp.hc_eps
        self.iters = hp.sinkhorn_iters
        self.n_hash = hp.n_hash
        self.scale = hp.expert_weights_scale
        self.norm_w = hp.expert_weights_norm
        self.n_vocab = hp.n_vocab


class Options:
    """fp8 / fp4: the model's round trips (always on for training and for the parity check;
    off only to isolate them in tests). indexer_aux: compute the indexer distillation target."""

    def __init__(self, fp8=True, fp4=True, indexer_aux=True):
        self.fp8 = fp8
        self.fp4 = fp4
        self.indexer_aux = indexer_aux


class V4:
    """A DeepSeek V4 model over a dict of weights in PyTorch orientation (GGUF [in, out] is
    [out, in]; experts [E, out, in]), keyed by GGUF tensor name.

    `emb` and `out` are the rows of token_embd / output for the vocabulary subset `vocab`
    (local id i is global id vocab[i]); every other row of the full matrices is zero, so the
    logits of the other tokens are exactly 0 and the loss over the subset plus (n_vocab - U)
    zero logits is the full-vocabulary cross entropy.
    """

    def __init__(self, hp, weights, vocab, n_pos, dtype, options=None):
        self.c = Config(hp)
        self.w = weights
        self.vocab = vocab  # LongTensor [U] of global ids
        self.opt = options or Options()
        self.dtype = dtype
        self.ropes = {}
        for il in range(hp.n_layer + 1):
            r = hp.ratio(il)
            n_rot, base, yarn = hp.rope_args(r)
            key = (n_rot, float(base), None if yarn is None else tuple(float(v) for v in yarn))
            if key not in self.ropes:
                self.ropes[key] = Rope(key[0], key[1], key[2], n_pos, dtype)
        self.aux = {}

    def rope(self, il):
        n_rot, base, yarn = self.c.hp.rope_args(self.c.hp.ratio(il))
        return self.ropes[(n_rot, float(base), None if yarn is None else tuple(float(v) for v in yarn))]

    # -- hyper-connections ----------------------------------------------------------------------

    def sinkhorn(self, z):
        """z [..., n_hc, n_hc] (row a = source, column b = destination), as ops.sinkhorn."""
        eps = self.c.hc_eps
        m = torch.softmax(z, dim=-1) + eps
        m = m / (m.sum(dim=-2, keepdim=True) + eps)
        for _ in range(self.c.iters - 1):
            m = m / (m.sum(dim=-1, keepdim=True) + eps)
            m = m / (m.sum(dim=-2, keepdim=True) + eps)
        return m

    def hc_pre(self, pfx, site, X):
        """X [B, T, n_hc, D] -> (y [B, T, D], post [B, T, n_hc], M [B, T, n_hc, n_hc])."""
        c, w = self.c, self.w
        n = c.n_hc
        fn, scale, base = (w[f"{pfx}hc_{site}_fn.weight"], w[f"{pfx}hc_{site}_scale.weight"],
                           w[f"{pfx}hc_{site}_base.weight"])
        f = X.reshape(*X.shape[:-2], n * c.D)
        r = torch.rsqrt(f.pow(2).mean(dim=-1, keepdim=True) + c.eps)
        mix = (f @ fn.t()) * r  # [B, T, (2 + n) n]
        pre = torch.sigmoid(mix[..., :n] * scale[0] + base[:n]) + c.hc_eps
        post = 2.0 * torch.sigmoid(mix[..., n:2 * n] * scale[1] + base[n:2 * n])
        z = (mix[..., 2 * n:] * scale[2] + base[2 * n:]).reshape(*X.shape[:-2], n, n)
        M = self.sinkhorn(z)
        return mix_streams(pre, X), post, M

    @staticmethod
    def hc_post(X, f, post, M):
        """X'[b] = post_b f + sum_a M[a][b] X[a]."""
        # unbind, not indexing: the backward of one unbind is one stack, while each indexed
        # slice would add a zero-filled gradient of the whole state.
        xs, ms, ps = X.unbind(-2), M.unbind(-1), post.unbind(-1)
        out = []
        for b in range(len(xs)):
            mb = ms[b].unbind(-1)  # M[a][b] for each a
            xb = ps[b].unsqueeze(-1) * f
            for a in range(len(xs)):
                xb = xb + mb[a].unsqueeze(-1) * xs[a]
            out.append(xb)
        return torch.stack(out, dim=-2)

    def hc_head(self, X, pfx):
        c, w = self.c, self.w
        fn, scale, base = w[pfx + "_fn.weight"], w[pfx + "_scale.weight"], w[pfx + "_base.weight"]
        f = X.reshape(*X.shape[:-2], c.n_hc * c.D)
        r = torch.rsqrt(f.pow(2).mean(dim=-1, keepdim=True) + c.eps)
        pre = torch.sigmoid((f @ fn.t()) * r * scale[0] + base) + c.hc_eps  # [B, T, n_hc]
        return mix_streams(pre, X)

    # -- the compressor (§6), all blocks at once ------------------------------------------------

    def compress(self, pfx, lane, x, ratio, il, indexer):
        """Rows of every complete block of x [B, T, D]: [B, T // ratio, d]."""
        c, w = self.c, self.w
        wkv, wg = w[f"{pfx}{lane}_kv.weight"], w[f"{pfx}{lane}_gate.weight"]
        ape, nw = w[f"{pfx}{lane}_ape.weight"], w[f"{pfx}{lane}_norm.weight"]
        B, T, _ = x.shape
        nc = T // ratio
        d = nw.shape[0]
        if nc == 0:
            return x.new_zeros(B, 0, d)
        xs = x[:, :nc * ratio]
        kvp = xs @ wkv.t()  # [B, nc R, coff d]
        sc = xs @ wg.t() + ape.repeat(nc, 1)  # ape[p mod R]
        kvp = kvp.reshape(B, nc, ratio, -1)
        sc = sc.reshape(B, nc, ratio, -1)
        if ratio == 4:
            # Two-lane overlap: block c pools the previous block's first d channels and its own
            # last d channels; before block 0 the state is 0 with score -inf.
            prev_kv = torch.cat((kvp.new_zeros(B, 1, ratio, d), kvp[:, :-1, :, :d]), dim=1)
            prev_sc = torch.cat((sc.new_full((B, 1, ratio, d), -math.inf), sc[:, :-1, :, :d]),
                                dim=1)
            cand_kv = torch.cat((prev_kv, kvp[..., d:]), dim=2)  # [B, nc, 2R, d]
            cand_sc = torch.cat((prev_sc, sc[..., d:]), dim=2)
        else:
            cand_kv, cand_sc = kvp, sc  # [B, nc, R, d]
        pooled = (torch.softmax(cand_sc, dim=2) * cand_kv).sum(dim=2)  # [B, nc, d]
        row = rms_norm(pooled, nw, c.eps)
        pos = torch.arange(nc) * ratio
        row = self.rope(il).apply(row, pos)
        if indexer:
            return indexer_qat(row, self.opt.fp4)
        return fp8_nope(row, c.n_nope, self.opt.fp8)

    # -- attention (§5.3) ------------------------------------------------------------------------

    def attention(self, pfx, il, X):
        c, w = self.c, self.w
        hp = c.hp
        B, T = X.shape[:2]
        ratio = hp.ratio(il)
        rope = self.rope(il)
        pos = torch.arange(T)
        y, post, M = self.hc_pre(pfx, "attn", X)
        x = rms_norm(y, w[pfx + "attn_norm.weight"], c.eps)  # [B, T, D]

        qr = rms_norm(x @ w[pfx + "attn_q_a.weight"].t(), w[pfx + "attn_q_a_norm.weight"], c.eps)
        q = (qr @ w[pfx + "attn_q_b.weight"].t()).reshape(B, T, c.H, c.hd)
        q = rope.apply(rms_norm(q, None, c.eps), pos)  # [B, T, H, hd]
        kv = rms_norm(x @ w[pfx + "attn_kv.weight"].t(), w[pfx + "attn_kv_a_norm.weight"], c.eps)
        kv = fp8_nope(rope.apply(kv, pos), c.n_nope, self.opt.fp8)  # [B, T, hd]

        # Raw window: keys at p - n_swa + 1 .. p (slot j holds position p - n_swa + 1 + j).
        W = c.n_swa
        kv_pad = torch.cat((kv.new_zeros(B, W - 1, c.hd), kv), dim=1)
        win = kv_pad.unfold(1, W, 1).transpose(-1, -2)  # [B, T, W, hd]
        win_pos = pos[:, None] - (W - 1) + torch.arange(W)[None, :]  # [T, W]
        scale = 1.0 / math.sqrt(c.hd)
        s_raw = torch.einsum("bthd,btwd->bthw", q, win) * scale
        s_raw = s_raw.masked_fill((win_pos < 0)[None, :, None, :], -math.inf)
        parts_s, parts_v = [s_raw], [win]

        if ratio != 0:
            rows = self.compress(pfx, "attn_compressor", x, ratio, il, False)  # [B, nc, hd]
            nc = rows.shape[1]
            visible = (torch.arange(nc)[None, :] + 1) * ratio <= pos[:, None] + 1  # [T, nc]
            s_comp = torch.einsum("bthd,bcd->bthc", q, rows) * scale  # [B, T, H, nc]
            keep = visible[None, :, :].expand(B, T, nc)
            if ratio == 4:
                keep = self.indexer_keep(pfx, il, x, qr, visible, s_comp)
            s_comp = s_comp.masked_fill(~keep[:, :, None, :], -math.inf)
            parts_s.append(s_comp)
            parts_v.append(rows)

        sinks = w[pfx + "attn_sinks.weight"]  # [H]
        s_all = torch.cat(parts_s + [sinks.reshape(1, 1, c.H, 1).expand(B, T, c.H, 1)], dim=-1)
        p_all = torch.softmax(s_all, dim=-1)
        o = torch.einsum("bthw,btwd->bthd", p_all[..., :W], win)
        if ratio != 0:
            o = o + torch.einsum("bthc,bcd->bthd", p_all[..., W:-1], parts_v[1])
        o = rope.apply(o, pos, inverse=True)  # [B, T, H, hd]

        u = o.reshape(B, T, c.G, -1)  # [B, T, G, (H / G) hd]
        wa = w[pfx + "attn_output_a.weight"].reshape(c.G, c.o_lora, -1)
        z = torch.einsum("btgi,goi->btgo", u, wa).reshape(B, T, c.G * c.o_lora)
        out = z @ w[pfx + "attn_output_b.weight"].t()  # [B, T, D]
        return self.hc_post(X, out, post, M)

    def indexer_keep(self, pfx, il, x, qr, visible, s_comp):
        """Which compressed rows each position attends to in a ratio-4 layer: all visible rows
        while there are at most top_k, else the indexer's top_k. Records the indexer's
        distillation pair (its log-distribution and the attention's) in self.aux."""
        c, w = self.c, self.w
        B, T = x.shape[:2]
        pos = torch.arange(T)
        # The indexer learns from its own loss only: its inputs are cut from the main graph.
        xd, qrd = x.detach(), qr.detach()
        irows = self.compress(pfx, "indexer_compressor", xd, 4, il, True)  # [B, nc, Id]
        qi = (qrd @ w[pfx + "indexer.attn_q_b.weight"].t()).reshape(B, T, c.IH, c.Id)
        qi = indexer_qat(self.rope(il).apply(qi, pos), self.opt.fp4)
        wgt = (xd @ w[pfx + "indexer.proj.weight"].t()) * (1.0 / math.sqrt(c.Id * c.IH))
        dots = torch.relu(torch.einsum("bthi,bci->bthc", qi, irows))  # [B, T, IH, nc]
        score = torch.einsum("bthc,bth->btc", dots, wgt)  # [B, T, nc]
        score = score.masked_fill(~visible[None], -math.inf)
        n_vis = visible.sum(dim=1)  # [T]
        k = min(c.topk, visible.shape[1])
        keep = visible[None].expand(B, T, -1).clone()
        sparse = n_vis > c.topk
        if k > 0 and bool(sparse.any()):
            # Descending, ties towards the lower row (a stable sort), as the reference: ReLU
            # makes exact ties (score 0) common.
            idx = torch.sort(score.detach(), dim=-1, descending=True, stable=True).indices
            idx = idx[..., :k]  # [B, T, k]
            sel = torch.zeros_like(keep).scatter_(-1, idx, True)
            keep = torch.where(sparse[None, :, None], sel, keep)
        if self.opt.indexer_aux:
            # Target: the attention's mass over every visible row (mean over heads), detached.
            mask = ~visible[None, :, None, :]
            p_att = torch.softmax(s_comp.detach().masked_fill(mask, -math.inf), dim=-1)
            target = torch.nan_to_num(p_att.mean(dim=2))  # [B, T, nc]
            logp = torch.log_softmax(score, dim=-1)
            rows_ok = n_vis > 1  # one visible row: nothing to choose
            self.aux.setdefault("indexer", []).append((logp, target, rows_ok))
        return keep

    # -- MoE (§5.5) -------------------------------------------------------------------------------

    def moe(self, pfx, il, x, tokens, clamp):
        """x [B, T, D]; tokens [B, T] global ids (hash routing)."""
        c, w = self.c, self.w
        B, T, D = x.shape
        xf = x.reshape(-1, D)
        s = torch.sqrt(ops.softplus_stable(xf @ w[pfx + "ffn_gate_inp.weight"].t()))  # [N, E]
        if il < c.n_hash:
            sel = w[pfx + "ffn_gate_tid2eid.weight"][tokens.reshape(-1)][:, :c.k].long()
        else:
            biased = s.detach()
            if pfx + "exp_probs_b.bias" in w:
                biased = biased + w[pfx + "exp_probs_b.bias"]
            sel = torch.sort(biased, dim=-1, descending=True, stable=True).indices[:, :c.k]
            self.aux.setdefault("load", {})[pfx] = torch.bincount(sel.reshape(-1), minlength=c.E)
        g = s.gather(1, sel)
        if c.norm_w:
            g = g / g.sum(dim=1, keepdim=True)
        g = g * c.scale  # [N, k]
        gate_w, up_w = w[pfx + "ffn_gate_exps.weight"], w[pfx + "ffn_up_exps.weight"]
        down_w = w[pfx + "ffn_down_exps.weight"]
        out = torch.zeros_like(xf)
        flat_sel = sel.reshape(-1)
        flat_tok = torch.arange(xf.shape[0]).repeat_interleave(c.k)
        flat_g = g.reshape(-1)
        order = torch.argsort(flat_sel, stable=True)
        counts = torch.bincount(flat_sel, minlength=c.E).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            idx = order[start:start + n]
            start += n
            ti = flat_tok[idx]
            xe = xf[ti]
            h = swiglu(xe @ gate_w[e].t(), xe @ up_w[e].t(), clamp) * flat_g[idx, None]
            out = out.index_add(0, ti, h @ down_w[e].t())
        hs = swiglu(xf @ w[pfx + "ffn_gate_shexp.weight"].t(), xf @ w[pfx + "ffn_up_shexp.weight"].t(),
                    clamp)
        out = out + hs @ w[pfx + "ffn_down_shexp.weight"].t()
        return out.reshape(B, T, D)

    def ffn(self, pfx, il, X, tokens):
        c, w = self.c, self.w
        y, post, M = self.hc_pre(pfx, "ffn", X)
        x = rms_norm(y, w[pfx + "ffn_norm.weight"], c.eps)
        f = self.moe(pfx, il, x, tokens, c.hp.clamp(il))
        return self.hc_post(X, f, post, M)

    # -- whole model ------------------------------------------------------------------------------

    def embed(self, local):
        return self.w["emb"][local]  # [B, T, D]

    def head(self, X, hc_pfx, norm_name):
        h = self.hc_head(X, hc_pfx)
        return rms_norm(h, self.w[norm_name], self.c.eps)  # [B, T, D]

    def forward(self, local, tokens, mtp=True):
        """local / tokens: [B, T] local and global ids. Returns (head inputs [B, T, D], MTP head
        inputs [B, T - 1, D] or None); the MTP row at p drafts token p + 2."""
        c = self.c
        self.aux = {}
        e = self.embed(local)
        X = e[:, :, None, :].expand(-1, -1, c.n_hc, -1)  # [B, T, n_hc, D]
        for il in range(c.n_layer):
            pfx = f"blk.{il}."
            X = self.attention(pfx, il, X)
            X = self.ffn(pfx, il, X, tokens)
        hn = self.head(X, "output_hc", "output_norm.weight")
        if not mtp or "mtp.0.e_proj.weight" not in self.w:
            return hn, None
        w, pre = self.w, "mtp.0."
        em = rms_norm(e[:, 1:], w[pre + "enorm.weight"], c.eps) @ w[pre + "e_proj.weight"].t()
        hs = rms_norm(X[:, :-1], w[pre + "hnorm.weight"], c.eps) @ w[pre + "h_proj.weight"].t()
        Xm = em[:, :, None, :] + hs  # [B, T - 1, n_hc, D]
        Xm = self.attention(pre, c.n_layer, Xm)
        Xm = self.ffn(pre, c.n_layer, Xm, tokens[:, 1:])
        return hn, self.head(Xm, pre + "hc_head", pre + "norm.weight")

    def logits_used(self, hn):
        return hn @ self.w["out"].t()  # [..., U]

    def full_vocab_nll(self, hn, target_local):
        """Cross entropy over the full vocabulary: the U trained logits plus n_vocab - U
        logits that are exactly zero. hn [..., D]; target_local [...]. Returns [...]."""
        z = self.logits_used(hn)
        n_zero = self.c.n_vocab - z.shape[-1]
        lse = torch.logsumexp(z, dim=-1)
        if n_zero > 0:
            lse = torch.logaddexp(lse, torch.full_like(lse, math.log(n_zero)))
        return lse - z.gather(-1, target_local[..., None]).squeeze(-1)


def mix_streams(pre, X):
    """sum_j pre_j X[j]: pre [..., n_hc], X [..., n_hc, D] -> [..., D]. Unrolled over the
    streams: a batched product of [1, n_hc] x [n_hc, D] matrices is far slower on the CPU."""
    xs, ps = X.unbind(-2), pre.unbind(-1)
    y = ps[0].unsqueeze(-1) * xs[0]
    for j in range(1, len(xs)):
        y = y + ps[j].unsqueeze(-1) * xs[j]
    return y


def swiglu(gate, up, clamp):
    return torch.nn.functional.silu(torch.clamp(gate, max=clamp)) * torch.clamp(up, -clamp, clamp)
