"""The DeepSeek V4 forward pass, token by token (model.md §5, §6, §7, §12).

Owns: the hyper-parameters read from GGUF metadata, the weights (dequantized once per tensor and
cached as torch tensors), the per-layer caches of one sequence (raw window, compressed rows,
compressor frontiers, indexer rows) and the per-sublayer functions that make up one layer, the
output head and the MTP block. The math of each op is in ops.py.

The model is defined token by token (§7), so this file processes one token at a time: that is
the definition, not an approximation of a batched pass.
"""

import math

import numpy as np
import torch

from . import ops
from .dequant import dequantize
from .gguf import GGUFFile

ARCH = "deepseek4"


# ---------------------------------------------------------------------------------------------
# Hyper-parameters (§2, §3.2, §12.6, §12.7)
# ---------------------------------------------------------------------------------------------


class HParams:
    def __init__(self, meta, tensors):
        def get(key, default=None, required=True):
            full = f"{ARCH}.{key}"
            if full in meta:
                return meta[full]
            if required and default is None:
                raise KeyError(f"missing GGUF metadata key {full}")
            return default

        arch = meta.get("general.architecture")
        if arch != ARCH:
            raise ValueError(f"general.architecture is {arch!r}, expected {ARCH!r}")
        self.n_layer = int(get("block_count"))
        self.n_embd = int(get("embedding_length"))
        self.n_vocab = int(get("vocab_size", tensors["token_embd.weight"].ne[1]))
        self.n_head = int(get("attention.head_count"))
        self.n_head_kv = int(get("attention.head_count_kv", 1))
        self.n_head_dim = int(get("attention.key_length"))
        self.n_value_dim = int(get("attention.value_length", self.n_head_dim))
        self.n_rot = int(get("rope.dimension_count"))
        self.q_lora = int(get("attention.q_lora_rank"))
        self.o_lora = int(get("attention.output_lora_rank"))
        self.n_group = int(get("attention.output_group_count"))
        self.n_expert = int(get("expert_count"))
        self.n_expert_used = int(get("expert_used_count"))
        self.n_ff_exp = int(get("expert_feed_forward_length"))
        self.n_expert_shared = int(get("expert_shared_count", 1))
        self.n_hash = int(get("hash_layer_count", 0))
        self.n_swa = int(get("attention.sliding_window"))
        self.n_idx_head = int(get("attention.indexer.head_count"))
        self.n_idx_dim = int(get("attention.indexer.key_length"))
        self.idx_topk = int(get("attention.indexer.top_k"))
        self.n_hc = int(get("hyper_connection.count"))
        self.sinkhorn_iters = int(get("hyper_connection.sinkhorn_iterations"))
        self.compress_ratios = [int(r) for r in get("attention.compress_ratios")]
        self.swiglu_clamp = [float(c) for c in get("swiglu_clamp_exp")]
        self.rope_orig_ctx = int(get("rope.scaling.original_context_length"))
        self.rope_base = float(get("rope.freq_base"))
        self.rope_factor = float(get("rope.scaling.factor"))
        self.yarn_beta_fast = float(get("rope.scaling.yarn_beta_fast"))
        self.yarn_beta_slow = float(get("rope.scaling.yarn_beta_slow"))
        self.compress_rope_base = float(get("attention.compress_rope_freq_base"))
        self.expert_weights_scale = float(get("expert_weights_scale"))
        self.rms_eps = float(get("attention.layer_norm_rms_epsilon"))
        self.hc_eps = float(get("hyper_connection.epsilon"))
        self.expert_weights_norm = bool(get("expert_weights_norm", True))

        if len(self.compress_ratios) < self.n_layer:
            raise ValueError("compress_ratios has fewer than block_count entries (§12.6)")
        if len(self.swiglu_clamp) < self.n_layer:
            raise ValueError("swiglu_clamp_exp has fewer than block_count entries")
        if self.n_head_kv != 1 or self.n_value_dim != self.n_head_dim:
            raise ValueError("expected one shared KV head with key_length == value_length")
        if self.n_head % self.n_group != 0:
            raise ValueError("head_count must be a multiple of output_group_count")
        self.n_nope = self.n_head_dim - self.n_rot

    def ratio(self, il):
        """Compression ratio of layer il; il == n_layer is the MTP block (§12.6: entry
        block_count when present, else 0; the MTP block has no compressor tensors, so it must
        be 0)."""
        if il < len(self.compress_ratios):
            return self.compress_ratios[il]
        return 0

    def clamp(self, il):
        """SwiGLU clamp of layer il; the MTP block uses entry n_layer if present, else the
        last main layer's value."""
        if il < len(self.swiglu_clamp):
            return self.swiglu_clamp[il]
        return self.swiglu_clamp[self.n_layer - 1]

    def rope_args(self, ratio):
        """(n_rot, base, yarn) for rope_tail: base without YaRN for ratio 0, the compress base
        with YaRN otherwise (§2.2, §4.2)."""
        if ratio == 0:
            return (self.n_rot, self.rope_base, None)
        yarn = (self.rope_factor, self.rope_orig_ctx, self.yarn_beta_fast, self.yarn_beta_slow)
        return (self.n_rot, self.compress_rope_base, yarn)


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


class Weights:
    """Dequantized GGUF tensors as torch tensors in PyTorch orientation (reversed ne):
    a GGUF [in, out] tensor becomes [out, in]; a GGUF [in, out, E] tensor becomes [E, out, in].
    Each tensor is dequantized once and cached."""

    def __init__(self, gguf, dtype):
        self.gguf = gguf
        self.dtype = dtype
        self.cache = {}

    def has(self, name):
        return self.gguf.has(name)

    def __call__(self, name):
        if name not in self.cache:
            info = self.gguf.tensors[name]
            values = dequantize(info.type_name, self.gguf.raw(name))
            values = values.reshape(tuple(reversed(info.ne)))
            t = torch.from_numpy(np.ascontiguousarray(values))
            self.cache[name] = t if info.type_name == "I32" else t.to(self.dtype)
        return self.cache[name]

    def rows(self, name, row_ids):
        """Selected rows of a 2-D tensor (used for the embedding), without the whole matrix."""
        info = self.gguf.tensors[name]
        out = []
        for r in row_ids:
            raw = self.gguf.raw_rows(name, int(r), int(r) + 1)
            out.append(torch.from_numpy(dequantize(info.type_name, raw).copy()).to(self.dtype))
        return torch.stack(out)


# ---------------------------------------------------------------------------------------------
# Per-layer state of one sequence (§8.1)
# ---------------------------------------------------------------------------------------------


class LayerState:
    """The cache state of one layer (or of the MTP block) for one sequence."""

    def __init__(self):
        self.raw = {}            # position -> KV row [hd] (only the window is kept)
        self.comp_rows = []      # main compressed rows [hd]
        self.index_rows = []     # indexer rows [Id]
        self.main_comp = None    # ops.Compressor
        self.idx_comp = None     # ops.Compressor


class Options:
    """Compute dtype, and the switches that skip the FP8 / FP4 round trips (tests only)."""

    def __init__(self, dtype=torch.float64, fp8=True, fp4=True):
        self.dtype = dtype
        self.fp8 = fp8
        self.fp4 = fp4


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class Model:
    """A DeepSeek V4 model over one GGUF file, evaluating one sequence token by token.

    `recorder(name, value)` is called for every named intermediate (docs/reference.md); the
    name uses the prefix `blk.{il}.` (main layers) or `mtp.` (MTP block).
    """

    def __init__(self, path, options=None):
        self.opt = options or Options()
        self.gguf = GGUFFile(path)
        self.hp = HParams(self.gguf.metadata, self.gguf.tensors)
        self.w = Weights(self.gguf, self.opt.dtype)
        self.has_mtp = self.gguf.has("mtp.0.e_proj.weight")
        self.recorder = lambda name, value: None
        self.reset()

    # -- state --------------------------------------------------------------------------------

    def reset(self):
        hp = self.hp
        self.layers = [self._new_layer_state(il, f"blk.{il}.") for il in range(hp.n_layer)]
        self.mtp_state = LayerState() if self.has_mtp else None

    def _new_layer_state(self, il, prefix):
        hp, w = self.hp, self.w
        st = LayerState()
        ratio = hp.ratio(il)
        if ratio != 0:
            rope = hp.rope_args(ratio)
            st.main_comp = ops.Compressor(
                ratio, w(prefix + "attn_compressor_kv.weight"), w(prefix + "attn_compressor_gate.weight"),
                w(prefix + "attn_compressor_ape.weight"), w(prefix + "attn_compressor_norm.weight"),
                rope, hp.n_nope if self.opt.fp8 else None, False, norm_eps=hp.rms_eps)
            if ratio == 4:
                st.idx_comp = ops.Compressor(
                    ratio, w(prefix + "indexer_compressor_kv.weight"),
                    w(prefix + "indexer_compressor_gate.weight"),
                    w(prefix + "indexer_compressor_ape.weight"),
                    w(prefix + "indexer_compressor_norm.weight"),
                    rope, None, True, use_fp4=self.opt.fp4, norm_eps=hp.rms_eps)
        return st

    # -- sublayers ----------------------------------------------------------------------------

    def hc_pre(self, prefix, site, X):
        w, hp = self.w, self.hp
        return ops.hc_pre(X, w(f"{prefix}hc_{site}_fn.weight"), w(f"{prefix}hc_{site}_scale.weight"),
                          w(f"{prefix}hc_{site}_base.weight"), hp.hc_eps, hp.sinkhorn_iters,
                          norm_eps=hp.rms_eps)

    def query(self, prefix, x, p, rope):
        """§5.3a: low-rank q with q_a_norm, per-head unweighted norm, RoPE on the tails.
        Returns (q [H, hd], qr [q_lora])."""
        w, hp = self.w, self.hp
        qr = ops.linear(w(prefix + "attn_q_a.weight"), x)                   # [q_lora]
        qr = ops.rms_norm(qr, w(prefix + "attn_q_a_norm.weight"), hp.rms_eps)
        q = ops.linear(w(prefix + "attn_q_b.weight"), qr).reshape(hp.n_head, hp.n_head_dim)  # [H, hd]
        q = ops.rms_norm(q, None, hp.rms_eps)
        q = ops.rope_tail(q, p, *rope)
        return q, qr

    def kv_row(self, prefix, x, p, rope):
        """§5.3b: the shared KV latent after its norm, RoPE and the FP8 round trip. [hd]"""
        w, hp = self.w, self.hp
        kv = ops.linear(w(prefix + "attn_kv.weight"), x)                    # [hd]
        kv = ops.rms_norm(kv, w(prefix + "attn_kv_a_norm.weight"), hp.rms_eps)
        kv = ops.rope_tail(kv, p, *rope)
        if self.opt.fp8:
            kv = ops.fp8_e4m3_roundtrip(kv, hp.n_nope)
        return kv

    def indexer_select(self, prefix, st, x, qr, p, rope):
        """§5.3e: indexer top-k over the visible indexer rows (ascending indices)."""
        w, hp = self.w, self.hp
        qi = ops.linear(w(prefix + "indexer.attn_q_b.weight"), qr).reshape(hp.n_idx_head, hp.n_idx_dim)
        qi = ops.rope_tail(qi, p, *rope)
        qi = ops.indexer_qat(qi, self.opt.fp4)
        wgt = ops.linear(w(prefix + "indexer.proj.weight"), x)              # [IH], from x, not qr
        wgt = wgt * (1.0 / math.sqrt(hp.n_idx_dim * hp.n_idx_head))
        rows = torch.stack(st.index_rows)                                  # [n_vis, Id]
        scores = ops.indexer_scores(qi, wgt, rows)
        return ops.topk_lower_index(scores, hp.idx_topk)

    def grouped_output(self, prefix, o):
        """§5.3g: attn_output_a per group (rows g*o_lora.. of the weight), then attn_output_b."""
        w, hp = self.w, self.hp
        G = hp.n_group
        u = o.reshape(G, -1)                                               # [G, (H/G)*hd]
        wa = w(prefix + "attn_output_a.weight").reshape(G, hp.o_lora, -1)  # [G, o_lora, (H/G)*hd]
        z = torch.einsum("goi,gi->go", wa, u).reshape(-1)                  # [G*o_lora]
        return ops.linear(w(prefix + "attn_output_b.weight"), z)            # [D]

    def attention(self, name, prefix, il, st, X, p):
        """One attention sublayer with its HC pre/post mix (§5.2-§5.4). Returns X'."""
        hp, w, rec = self.hp, self.w, self.recorder
        ratio = hp.ratio(il)
        rope = hp.rope_args(ratio)
        rec(name + "hc_attn_in", X.reshape(-1))
        y, post, M = self.hc_pre(prefix, "attn", X)
        x = ops.rms_norm(y, w(prefix + "attn_norm.weight"), hp.rms_eps)
        rec(name + "attn_norm", x)

        q, qr = self.query(prefix, x, p, rope)
        rec(name + "q", q.reshape(-1))
        kv = self.kv_row(prefix, x, p, rope)
        rec(name + "kv", kv)
        st.raw[p] = kv
        st.raw.pop(p - hp.n_swa, None)                                     # keep n_swa rows

        # Compressors run before this token's attention: a row completed now is visible now.
        if st.main_comp is not None:
            row = st.main_comp.push(p, x)
            if row is not None:
                st.comp_rows.append(row)
        if st.idx_comp is not None:
            row = st.idx_comp.push(p, x)
            if row is not None:
                st.index_rows.append(row)

        keys = [st.raw[t] for t in range(max(0, p - hp.n_swa + 1), p + 1)]
        n_vis = (p + 1) // ratio if ratio != 0 else 0
        assert len(st.comp_rows) == n_vis
        if ratio == 4:
            topk_dump = torch.full((hp.idx_topk,), -1.0, dtype=self.opt.dtype)
            if n_vis > hp.idx_topk:
                sel = self.indexer_select(prefix, st, x, qr, p, rope)
                topk_dump[:len(sel)] = sel.to(self.opt.dtype)
                keys += [st.comp_rows[i] for i in sel.tolist()]
            else:
                keys += st.comp_rows
            rec(name + "index_topk", topk_dump)
        elif ratio != 0:
            keys += st.comp_rows

        o = ops.sink_attention(q, torch.stack(keys), w(prefix + "attn_sinks.weight"),
                               1.0 / math.sqrt(hp.n_head_dim))
        o = ops.rope_tail(o, p, *rope, inverse=True)
        out = self.grouped_output(prefix, o)
        rec(name + "attn_out", out)
        return ops.hc_post(X, out, post, M)

    def moe(self, name, prefix, il, x, token):
        """§5.5: router, hash or biased top-k selection, routed experts and the shared expert."""
        hp, w, rec = self.hp, self.w, self.recorder
        clamp = hp.clamp(il)
        logits = ops.linear(w(prefix + "ffn_gate_inp.weight"), x)           # [E]
        is_hash = il < hp.n_hash
        tid_row = w(prefix + "ffn_gate_tid2eid.weight")[token].tolist() if is_hash else None
        bias = None
        if not is_hash and w.has(prefix + "exp_probs_b.bias"):
            bias = w(prefix + "exp_probs_b.bias")
        sel, weights = ops.route(logits, bias, tid_row, hp.n_expert_used, hp.expert_weights_scale,
                                 hp.expert_weights_norm)
        rec(name + "moe_sel", sel.to(self.opt.dtype))
        rec(name + "moe_weights", weights)

        gate_w = w(prefix + "ffn_gate_exps.weight")                         # [E, F, D]
        up_w = w(prefix + "ffn_up_exps.weight")                             # [E, F, D]
        down_w = w(prefix + "ffn_down_exps.weight")                         # [E, D, F]
        routed = torch.zeros_like(x)                                        # [D]
        for i, e in enumerate(sel.tolist()):
            h = ops.swiglu_clamped(ops.linear(gate_w[e], x), ops.linear(up_w[e], x), clamp) * weights[i]
            routed = routed + ops.linear(down_w[e], h)

        hs = ops.swiglu_clamped(ops.linear(w(prefix + "ffn_gate_shexp.weight"), x),
                                ops.linear(w(prefix + "ffn_up_shexp.weight"), x), clamp)
        shared = ops.linear(w(prefix + "ffn_down_shexp.weight"), hs)
        return routed + shared

    def ffn(self, name, prefix, il, X, token):
        hp, w, rec = self.hp, self.w, self.recorder
        rec(name + "hc_ffn_in", X.reshape(-1))
        y, post, M = self.hc_pre(prefix, "ffn", X)
        x = ops.rms_norm(y, w(prefix + "ffn_norm.weight"), hp.rms_eps)
        rec(name + "ffn_norm", x)
        f = self.moe(name, prefix, il, x, token)
        rec(name + "ffn_out", f)
        return ops.hc_post(X, f, post, M)

    def layer(self, il, X, token, p):
        name = prefix = f"blk.{il}."
        X = self.attention(name, prefix, il, self.layers[il], X, p)
        X = self.ffn(name, prefix, il, X, token)
        self.recorder(name + "out", X.reshape(-1))
        return X

    # -- embedding, head, MTP -----------------------------------------------------------------

    def embed(self, token):
        return self.w.rows("token_embd.weight", [token])[0]                  # [D]

    def head_input(self, X, prefix_hc, norm_name):
        """§5.6: HC collapse then output_norm; the LM head's input [D]."""
        hp, w = self.hp, self.w
        h = ops.hc_head(X, w(prefix_hc + "_fn.weight"), w(prefix_hc + "_scale.weight"),
                        w(prefix_hc + "_base.weight"), hp.hc_eps, norm_eps=hp.rms_eps)
        return ops.rms_norm(h, w(norm_name), hp.rms_eps)

    def logits(self, hn):
        """LM head on head inputs [n, D] -> [n, V]."""
        return ops.linear(self.w("output.weight"), hn)

    def forward_token(self, token, p):
        """Main model for the token at position p. Returns (final HC state [n_hc, D], head input [D])."""
        hp = self.hp
        e = self.embed(token)
        self.recorder("embd", e)
        X = e.unsqueeze(0).repeat(hp.n_hc, 1)                                # [n_hc, D]
        for il in range(hp.n_layer):
            X = self.layer(il, X, token, p)
        hn = self.head_input(X, "output_hc", "output_norm.weight")
        self.recorder("result_norm", hn)
        return X, hn

    def mtp_token(self, Hs, token, p):
        """§3.5/§5.7: the MTP block on HC state Hs [n_hc, D] with the embedding of `token` at
        attention position p. Returns (MTP output HC state, its head input [D])."""
        hp, w = self.hp, self.w
        pre = "mtp.0."
        e = ops.rms_norm(self.embed(token), w(pre + "enorm.weight"), hp.rms_eps)
        ep = ops.linear(w(pre + "e_proj.weight"), e)                          # [D]
        hs = ops.rms_norm(Hs, w(pre + "hnorm.weight"), hp.rms_eps)           # per stream [n_hc, D]
        X = ep[None, :] + ops.linear(w(pre + "h_proj.weight"), hs)           # [n_hc, D]
        il = hp.n_layer
        if hp.ratio(il) != 0:
            raise ValueError("the MTP block must have compress ratio 0 (§12.6)")
        X = self.attention("mtp.", pre, il, self.mtp_state, X, p)
        X = self.ffn("mtp.", pre, il, X, token)
        self.recorder("mtp.out", X.reshape(-1))
        hn = self.head_input(X, pre + "hc_head", pre + "norm.weight")
        self.recorder("mtp.result_norm", hn)
        return X, hn
