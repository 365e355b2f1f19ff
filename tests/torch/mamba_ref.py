#!/usr/bin/python3
"""Megatron-Core's hybrid models (Mamba-2 layers mixed with attention, MLP and MoE layers) for the
float64 PyTorch reference (mgt_ref.py).

Written from the facts of megatron/core/ssm/{mamba_layer,mamba_mixer}.py and
megatron/core/models/hybrid/ (docs/megatron-hybrid-mamba.md sections 1, 2, 3, 5), in plain torch,
sharing no code with Megatron, mamba_ssm or mgt.  Activations are batch-first [b, s, h].

One 'M' layer (MambaLayer, its pre-norm fused into mixer.in_proj):
  u = Norm(h) (the model's normalization, weight mixer.in_proj.layer_norm_weight)
  [z | x | B | C | dt] = u W_in^T            W_in [2DI + 2GN + NH, H], no bias
  xBC = silu(causal depthwise conv1d (K = 4, bias) of [x | B | C])
  dt = softplus(dt + dt_bias), A = -exp(A_log); head h reads group g = h // (NH / G)
  S_t = exp(dt_t A) S_{t-1} + dt_t x_t (x) B_t;  y_t = S_t C_t + D x_t     (S [P, N] per head)
  v = y * silu(z); per group of DI/G channels v / sqrt(mean(v^2) + 1e-5) * norm.weight
  h + v W_out^T                              W_out [H, DI], no bias
The recurrence is evaluated exactly as written (a loop over t), which is the math Megatron's
chunked SSD kernels compute with other rounding.

Public pieces:
  HYBRID_DEFAULTS, normalize_hybrid(a)   argument defaults, the pattern, derived sizes
  symbols(a)                             the layer symbols ('M', '*', '-', 'E') or None (not hybrid)
  sizes(a)                               (H, DI, NH, P, G, N, CD)
  mamba_specs(a, p, ln_bias)             tensor specs of one Mamba layer, prefix p = decoder.layers.N.
  init_value(init, shape, a, rng)        Megatron's init of the Mamba-specific inits
  mixer(a, p, prefix, u)                 the vectorised mixer on the normalised input u [b, s, H]
  naive_layer(a, P, i, hs)               an independent loop-by-loop numpy layer (selfcheck only)
  selfcheck(mgt_ref)                     naive vs vectorised; autograd vs finite differences;
                                         a '*-' hybrid = a 1-layer GPT
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

HYBRID_DEFAULTS = {
    "hybrid_layer_pattern": "", "mamba_state_dim": 128, "mamba_head_dim": 64,
    "mamba_num_groups": 8, "mamba_num_heads": None,
}
D_CONV = 4          # MambaMixer's hard-coded d_conv
GATED_NORM_EPS = 1e-5  # RMSNormGated's eps, not norm_epsilon
SYMBOLS = "M*-E"


def normalize_hybrid(a):
    """Fill the hybrid defaults into the normalized args dict a (in place): the pattern without
    '|' (num_layers = its length), mamba_num_heads derived, the MoE layers = the 'E' symbols."""
    for k, v in HYBRID_DEFAULTS.items():
        if a.get(k) is None:
            a[k] = v
    if a.get("mamba_num_heads") in (0, -1):
        a["mamba_num_heads"] = None
    pat = (a["hybrid_layer_pattern"] or "").replace("|", "")
    if a.get("family") == "hybrid" and not pat:
        raise ValueError("family 'hybrid' without a hybrid_layer_pattern")
    if not pat:
        a["hybrid_layer_pattern"] = ""
        return a
    if "/" in pat:
        raise ValueError("hybrid_layer_pattern %r: MTP depths ('/') are not in the reference" % pat)
    bad = sorted(set(pat) - set(SYMBOLS))
    if bad:
        raise ValueError("hybrid_layer_pattern %r: symbol(s) %s not in the reference (M * - E)" % (pat, "".join(bad)))
    a["hybrid_layer_pattern"] = pat
    a["num_layers"] = len(pat)
    if "E" in pat and not a.get("num_experts"):
        raise ValueError("hybrid_layer_pattern %r has 'E' layers but num_experts is not set" % pat)
    # the MoE layers are exactly the 'E' symbols (moe_layer_freq is not read in a hybrid model)
    a["moe_layer_pattern"] = "".join("1" if c == "E" else "0" for c in pat) if a.get("num_experts") else ""
    if "M" in pat:
        H, P, G = a["hidden_size"], a["mamba_head_dim"], a["mamba_num_groups"]
        if a["mamba_num_heads"]:
            NH = a["mamba_num_heads"]
        else:
            DI = 2 * H
            if DI % P:
                raise ValueError("d_inner 2*hidden_size = %d not a multiple of mamba_head_dim %d" % (DI, P))
            NH = DI // P
        if NH % G:
            raise ValueError("mamba heads %d not a multiple of mamba_num_groups %d" % (NH, G))
        a["mamba_num_heads"] = NH
    return a


def symbols(a):
    pat = a.get("hybrid_layer_pattern") or ""
    return pat.replace("|", "") or None


def sizes(a):
    H, P, G, N = a["hidden_size"], a["mamba_head_dim"], a["mamba_num_groups"], a["mamba_state_dim"]
    NH = a["mamba_num_heads"]
    DI = NH * P
    return H, DI, NH, P, G, N, DI + 2 * G * N


def mamba_specs(a, p, ln_bias):
    """[(name, shape, init, weight_decay)] of one Mamba layer (registration order of MambaMixer:
    in_proj (its fused norm first), conv1d, dt_bias, A_log, D, norm, out_proj)."""
    H, DI, NH, P, G, N, CD = sizes(a)
    q = p + "mixer."
    s = [(q + "in_proj.layer_norm_weight", (H,), "one", False)]
    if ln_bias:
        s.append((q + "in_proj.layer_norm_bias", (H,), "zero", False))
    s += [(q + "in_proj.weight", (2 * DI + 2 * G * N + NH, H), "normal", True),
          (q + "conv1d_weight", (CD, D_CONV), "conv", True),       # Megatron [CD, 1, 4]; 3-D: decayed
          (q + "conv1d_bias", (CD,), "conv", False),
          (q + "dt_bias", (NH,), "dt_bias", False),
          (q + "A_log", (NH,), "A_log", False),
          (q + "D", (NH,), "one", False),
          (q + "norm.weight", (DI,), "one", False),
          (q + "out_proj.weight", (H, DI), "proj", True)]
    return s


def init_value(init, shape, rng):
    """Megatron's init of the Mamba-only kinds (numpy float64), or None for another kind:
    conv: U(-0.5, 0.5) (kaiming_uniform(a=sqrt 5) of fan-in K = 4, and the bias U(+-1/sqrt K));
    dt_bias: the inverse softplus of dt = exp(U(0,1) (ln 0.1 - ln 0.001) + ln 0.001) clamped at 1e-4;
    A_log: log U(1, 16)."""
    if init == "conv":
        return rng.uniform(-0.5, 0.5, shape)
    if init == "dt_bias":
        lo, hi = math.log(0.001), math.log(0.1)
        dt = np.maximum(np.exp(rng.random(shape) * (hi - lo) + lo), 1e-4)
        return dt + np.log(-np.expm1(-dt))
    if init == "A_log":
        return np.log(rng.uniform(1.0, 16.0, shape))
    return None


def conv_weight(w, CD):
    """conv1d_weight as [CD, K]: mgt's table drops Megatron's unit middle axis ([CD, 1, K])."""
    return w.reshape(CD, D_CONV)


def mixer(a, p, prefix, u, seg=None):
    """MambaMixer of prefix (decoder.layers.N.mixer.) on u [b, s, H] (already normalised by the
    fused in_proj norm) -> [b, s, H] (before the residual add).  p: {name: tensor}.  seg [b, s]
    (long; None: one document a row): packed documents, each token's document start: the conv
    reads nothing before it and the state restarts from zero there (Megatron's seq_idx)."""
    H, DI, NH, P, G, N, CD = sizes(a)
    b, s, _ = u.shape
    zxbcdt = u @ p[prefix + "in_proj.weight"].t()
    z, xbc, dt = torch.split(zxbcdt, [DI, CD, NH], dim=-1)
    w = conv_weight(p[prefix + "conv1d_weight"], CD)                  # [CD, K]
    pad = torch.cat([xbc.new_zeros(b, D_CONV - 1, CD), xbc], dim=1)   # causal: zeros before t = 0
    if seg is None:
        conv = p[prefix + "conv1d_bias"] + sum(w[:, k] * pad[:, k:k + s, :] for k in range(D_CONV))
    else:  # tap k of position t reads position t - (K-1) + k, kept only inside t's document
        t = torch.arange(s)
        keep = [((t - (D_CONV - 1) + k)[None, :] >= seg).to(u.dtype)[:, :, None] for k in range(D_CONV)]
        conv = p[prefix + "conv1d_bias"] + sum(w[:, k] * pad[:, k:k + s, :] * keep[k] for k in range(D_CONV))
    xbc = F.silu(conv)
    x, B, C = torch.split(xbc, [DI, G * N, G * N], dim=-1)
    x = x.reshape(b, s, NH, P)
    hpg = NH // G
    B = B.reshape(b, s, G, N).repeat_interleave(hpg, dim=2)           # head h -> group h // hpg
    C = C.reshape(b, s, G, N).repeat_interleave(hpg, dim=2)
    dt = F.softplus(dt + p[prefix + "dt_bias"])                       # [b, s, NH] (threshold 20)
    A = -torch.exp(p[prefix + "A_log"])
    decay = torch.exp(dt * A)                                         # [b, s, NH]
    Dh = p[prefix + "D"]
    S = u.new_zeros(b, NH, P, N)
    ys = []
    for t in range(s):
        if seg is not None:  # a document starting at t: the state restarts
            S = S * (seg[:, t] != t).to(u.dtype)[:, None, None, None]
        S = decay[:, t, :, None, None] * S + (dt[:, t, :, None, None] * x[:, t, :, :, None]) * B[:, t, :, None, :]
        ys.append((S * C[:, t, :, None, :]).sum(-1) + Dh[:, None] * x[:, t])
    y = torch.stack(ys, dim=1).reshape(b, s, DI)
    v = (y * F.silu(z)).reshape(b, s, G, DI // G)
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + GATED_NORM_EPS)
    v = v.reshape(b, s, DI) * p[prefix + "norm.weight"]
    return v @ p[prefix + "out_proj.weight"].t()


# ---------------------------------------------------------------------------------------------
# an independent loop-by-loop layer (numpy float64), for the selfcheck

def naive_layer(a, P_, i, hs):
    """Layer i ('M') on hs [b][s][H] (lists or an array), token by token, channel by channel and
    head by head from the recurrence (section 3 of the facts sheet); returns [b, s, H]."""
    P = {n: np.asarray(x, dtype=np.float64) for n, x in P_.items()}
    H, DI, NH, Pd, G, N, CD = sizes(a)
    q = "decoder.layers.%d.mixer." % i
    eps = a["norm_epsilon"]
    lw = P[q + "in_proj.layer_norm_weight"]
    Win, Wout = P[q + "in_proj.weight"], P[q + "out_proj.weight"]
    cw = P[q + "conv1d_weight"].reshape(CD, -1)
    cb, dtb, Alog, Dv, nw = (P[q + k] for k in ("conv1d_bias", "dt_bias", "A_log", "D", "norm.weight"))
    hs = np.asarray(hs, dtype=np.float64)
    out = np.zeros_like(hs)

    def sig(v):
        return 1.0 / (1.0 + math.exp(-v))

    for bi in range(hs.shape[0]):
        S = [[[0.0] * N for _ in range(Pd)] for _ in range(NH)]
        hist = [[0.0] * D_CONV for _ in range(CD)]  # the last K pre-conv inputs, oldest first
        for t in range(hs.shape[1]):
            h = hs[bi, t]
            wv = [lw[c] + 1.0 for c in range(H)] if a["apply_layernorm_1p"] else list(lw)
            if a["normalization"] == "LayerNorm":
                mu = sum(h) / H
                var = sum((h[c] - mu) ** 2 for c in range(H)) / H
                u = [(h[c] - mu) / math.sqrt(var + eps) * wv[c] + P[q + "in_proj.layer_norm_bias"][c]
                     for c in range(H)]
            else:
                ms = sum(h[c] * h[c] for c in range(H)) / H
                u = [h[c] / math.sqrt(ms + eps) * wv[c] for c in range(H)]
            v = [sum(Win[r, c] * u[c] for c in range(H)) for r in range(Win.shape[0])]
            z, xin, dtr = v[:DI], v[DI:DI + CD], v[DI + CD:]
            xbc = []
            for c in range(CD):
                hist[c] = hist[c][1:] + [xin[c]]
                pre = cb[c] + sum(cw[c, k] * hist[c][k] for k in range(D_CONV))
                xbc.append(pre * sig(pre))
            x, Bv, Cv = xbc[:DI], xbc[DI:DI + G * N], xbc[DI + G * N:]
            y = [0.0] * DI
            for hh in range(NH):
                g = hh // (NH // G)
                r = dtr[hh] + dtb[hh]
                dt = r if r > 20 else math.log1p(math.exp(r))
                da = math.exp(dt * -math.exp(Alog[hh]))
                for pp in range(Pd):
                    xv = x[hh * Pd + pp]
                    acc = 0.0
                    for n in range(N):
                        S[hh][pp][n] = da * S[hh][pp][n] + dt * xv * Bv[g * N + n]
                        acc += S[hh][pp][n] * Cv[g * N + n]
                    y[hh * Pd + pp] = acc + Dv[hh] * xv
            yg = [y[c] * z[c] * sig(z[c]) for c in range(DI)]
            gs = DI // G
            for g in range(G):
                ms = sum(yg[c] ** 2 for c in range(g * gs, (g + 1) * gs)) / gs
                for c in range(g * gs, (g + 1) * gs):
                    yg[c] = yg[c] / math.sqrt(ms + GATED_NORM_EPS) * nw[c]
            for c in range(H):
                out[bi, t, c] = h[c] + sum(Wout[c, k] * yg[k] for k in range(DI))
    return out


# ---------------------------------------------------------------------------------------------
# selfcheck

LAYER_CASES = {
    # H 8, NH 4 heads of P 3 (DI 12 != 2H: mamba_num_heads set), G 2 groups of N 3
    "rmsnorm-nh4-g2": dict(normalization="RMSNorm", mamba_num_heads=4, mamba_head_dim=3,
                           mamba_num_groups=2, mamba_state_dim=3),
    # DI = 2H = 16 derived, P 4 -> NH 4, G 1; LayerNorm with the 1p weight
    "layernorm1p-derived-g1": dict(normalization="LayerNorm", apply_layernorm_1p=True, mamba_head_dim=4,
                                   mamba_num_groups=1, mamba_state_dim=2),
    # G = NH: one head per group
    "rmsnorm-g4-per-head": dict(normalization="RMSNorm", mamba_num_heads=4, mamba_head_dim=2,
                                mamba_num_groups=4, mamba_state_dim=2, norm_epsilon=1e-6),
}


def _layer_case(mgt_ref, extra, seed):
    a = dict(num_layers=1, hidden_size=8, num_attention_heads=2, seq_length=7, padded_vocab_size=16,
             position_embedding_type="none", add_bias_linear=False, init_method_std=0.3,
             hybrid_layer_pattern="M", micro_batch_size=2, global_batch_size=2)
    a.update(extra)
    a = mgt_ref.normalize_args(a)
    P = mgt_ref.init_params(a, seed=seed, perturb=0.2)
    rng = np.random.default_rng(seed + 1)
    # larger dt and conv inputs than the init gives, so that decay and gating are not near identity
    for n in P:
        if n.endswith("dt_bias"):
            P[n] = (P[n] + rng.normal(0, 1.0, P[n].shape)).astype(np.float32)
    hs = rng.normal(0, 1.0, (2, a["seq_length"], a["hidden_size"]))
    return a, P, hs


def selfcheck(mgt_ref, verbose=True):
    """Returns the number of failed checks."""
    bad = 0
    for name, extra in LAYER_CASES.items():
        a, P, hs = _layer_case(mgt_ref, extra, seed=5)
        model = mgt_ref.GPTRef(a, P, torch.float64)
        x = torch.as_tensor(hs)
        out = model.layer(x, 0)
        nv = naive_layer(a, P, 0, hs)
        ref = out.detach().numpy()
        e = float(np.abs(ref - nv).max() / np.abs(nv - hs).max())  # relative to the layer's update
        ok = e < 1e-12
        bad += not ok
        # gradients: loss = <out, R>, autograd against central differences on every Mamba tensor
        # (on the layer's update alone: the residual would only add rounding to the differences)
        R = torch.as_tensor(np.random.default_rng(9).normal(0, 1, ref.shape))

        def upd():
            return mixer(a, model.params, "decoder.layers.0.mixer.",
                         model._norm(x, "decoder.layers.0.mixer.in_proj."))
        model.zero_grad()
        (upd() * R).sum().backward()
        worst, worst_n = 0.0, ""
        rng = np.random.default_rng(13)
        for n, t in model.params.items():
            if ".mixer." not in n:
                continue
            g = t.grad.reshape(-1)
            flat = t.detach().reshape(-1)
            for j in rng.choice(flat.numel(), size=min(3, flat.numel()), replace=False):
                h = 1e-3 * max(1.0, abs(float(flat[j])))
                old = float(flat[j])
                f = {}
                with torch.no_grad():
                    for m in (-2, -1, 1, 2):
                        flat[j] = old + m * h
                        f[m] = float((upd() * R).sum())
                    flat[j] = old
                fd = (8 * (f[1] - f[-1]) - (f[2] - f[-2])) / (12 * h)  # 5-point central, O(h^4)
                err = abs(fd - float(g[j])) / max(abs(fd), 1e-3)
                if err > worst:
                    worst, worst_n = err, n
        okg = worst < 1e-7
        bad += not okg
        if verbose:
            print("selfcheck mamba %-24s layer max rel diff %.1e  %s; grads vs central diff worst %.1e (%s)  %s"
                  % (name, e, "ok" if ok else "FAIL", worst, worst_n.split("mixer.")[-1], "ok" if okg else "FAIL"))
    bad += _check_hybrid_equals_gpt(mgt_ref, verbose)
    return bad


HYBRID_GPT_CASES = {
    "gpt2": {},
    "llama-nope": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm", swiglu=True,
                       position_embedding_type="none", add_bias_linear=False,
                       untie_embeddings_and_output_weights=True, ffn_hidden_size=24),
    "llama-rope-qk-1p": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm", swiglu=True,
                             position_embedding_type="rope", add_bias_linear=False, qk_layernorm=True,
                             apply_layernorm_1p=True, ffn_hidden_size=24),
}


def _check_hybrid_equals_gpt(mgt_ref, verbose):
    """A '*-' hybrid with GPT layer 0's attention as layer 0 and its MLP as layer 1 (and
    final_layernorm as HybridStack's final_norm) gives the 1-layer GPT's logits exactly."""
    bad = 0
    for name, extra in HYBRID_GPT_CASES.items():
        g = dict(num_layers=1, hidden_size=16, num_attention_heads=4, seq_length=6, max_position_embeddings=8,
                 padded_vocab_size=32, micro_batch_size=2, global_batch_size=2, init_method_std=0.3)
        g.update(extra)
        P = mgt_ref.init_params(g, seed=3, perturb=0.2)
        hy = dict(g, hybrid_layer_pattern="*-", num_layers=None)
        Q = {}
        for n, v in P.items():
            if n.startswith("decoder.layers.0.mlp."):
                n = n.replace("decoder.layers.0.", "decoder.layers.1.")
            Q[n.replace("decoder.final_layernorm.", "decoder.final_norm.")] = v
        want = {n for n, _, _, _ in mgt_ref.tensor_specs(hy)}
        names_ok = want == set(Q)
        tok = np.random.default_rng(4).integers(0, 32, size=(2, 6))
        lg = mgt_ref.GPTRef(g, P).forward(tok).detach().numpy()
        lh = mgt_ref.GPTRef(hy, Q).forward(tok).detach().numpy() if names_ok else lg + 1
        e = float(np.abs(lg - lh).max())
        ok = names_ok and e == 0.0
        bad += not ok
        if verbose:
            print("selfcheck hybrid '*-' = 1-layer GPT %-18s max abs logit diff %.1e  %s"
                  % (name, e, "ok" if ok else "FAIL (names differ)" if not names_ok else "FAIL"))
    return bad
