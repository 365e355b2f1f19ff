#!/usr/bin/python3
"""Independent float64 reference of the Hugging Face forward pass for mgt's converter tests.

usage: ref_forward.py MODEL_DIR --tokens "ID ID ..." [--logits OUT.npy] [--greedy N] [--stop-eos]
                      [--variant a|b] [--start-pos P] [--ggml-gelu] [--routing OUT.json]
                      [--gated-norm grouped|full]
       ref_forward.py --self-test [--quick]

MODEL_DIR is a Hugging Face model directory (config.json + model.safetensors or sharded files), read
with tests/hf/st.py (no transformers, no safetensors package).  Every weight is upcast exactly to
float64 and all arithmetic is float64 (torch 1.13 on the CPU).  --logits writes float64 .npy
[n_tokens, vocab_size] for the prompt positions; --greedy N appends N argmax tokens (ties: lowest id;
the whole sequence is recomputed each step, no KV cache) and prints {"greedy": [...new ids...]} as JSON
on stdout.  --stop-eos stops after generating an id in config eos_token_id.

Conventions, as huggingface/transformers defines them (read for facts, not copied, from
src/transformers/models/gpt2/modeling_gpt2.py, models/llama/modeling_llama.py,
models/mistral/modeling_mistral.py, models/qwen2/modeling_qwen2.py, models/qwen3/modeling_qwen3.py,
modeling_rope_utils.py, activations.py, pytorch_utils.py (Conv1D)):
- GPT-2 (GPT2LMHeadModel): h = wte[ids] + wpe[pos]; per block h += c_proj(attn(ln_1(h))) and
  h += mlp.c_proj(gelu_new(mlp.c_fc(ln_2(h)))); ln_f; logits = h @ wte^T (tied).  Conv1D computes
  x @ W + b with W stored [in, out]; c_attn's output columns are [Q | K | V], heads contiguous
  within each; attention scores are scaled by 1/sqrt(head_dim) (scale_attn_weights, no
  scale_attn_by_inverse_layer_idx, no reorder_and_upcast_attn); LayerNorm eps = layer_norm_epsilon,
  biased variance.  gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  The h.N.attn.bias /
  masked_bias entries some files hold are mask buffers, not parameters: ignored.  Keys may carry the
  "transformer." prefix or not.
- Llama / Mistral / Qwen2 / Qwen3: h = embed_tokens[ids]; per layer h += o_proj(attn(RMSNorm_in(h)));
  h += down_proj(silu(gate_proj(x)) * up_proj(x)) with x = RMSNorm_post(h); final RMSNorm; logits =
  lm_head(h) or h @ embed_tokens^T when tie_word_embeddings.  RMSNorm(x) = w * x / sqrt(mean(x^2) + eps)
  (eps = rms_norm_eps).  head_dim = config head_dim when present, else hidden/heads.  q/k/v projections
  are [heads*head_dim, hidden] Linear rows, head-major; Qwen2 has q/k/v biases and no o_proj bias
  (Llama's attention_bias adds all four when true).  Qwen3 applies q_norm / k_norm (RMSNorm over
  head_dim, weights [head_dim]) to each head of q and k after the projection, before RoPE.  GQA: kv
  head g serves query heads g*r .. g*r+r-1 (r = heads/kv_heads; repeat_kv).  Causal softmax attention
  scaled by 1/sqrt(head_dim).
- RoPE (rotate_half convention, "NEOX" in llama.cpp terms): inv_freq_i = 1/theta^(2i/d), i < d/2;
  angle = pos * inv_freq; cos/sin over d = cat(angles, angles); x' = x cos + rotate_half(x) sin with
  rotate_half(x) = cat(-x[d/2:], x[:d/2]).  rope_scaling rope_type "llama3" (_compute_llama3_parameters):
  wavelen = 2 pi / inv_freq; wavelen > orig/low_freq_factor: inv/factor; wavelen < orig/high_freq_factor:
  inv; otherwise (both ends inclusive) (1-s) inv/factor + s inv with s = (orig/wavelen - low)/(high - low);
  attention scaling stays 1.  rope_type "linear": inv/factor.  Others are refused.
- Sliding windows (Mistral sliding_window, Qwen use_sliding_window) are refused when the sequence is
  longer than the window; shorter sequences are unaffected.
- Mixture of Experts (models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock,
  models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock and Qwen2MoeDecoderLayer,
  models/qwen3_moe/modeling_qwen3_moe.py): the MLP of a sparse layer is, on x = RMSNorm_post(h),
  p = softmax(x @ gate^T) over all experts, the k largest (num_experts_per_tok), renormalized to sum
  1 for Mixtral (always) and for Qwen when norm_topk_prob; out = sum_j p_j expert_j(x) with
  expert(x) = down(silu(gate(x)) * up(x)) (Mixtral: w2(silu(w1 x) * w3 x)); Qwen2-MoE adds
  sigmoid(x @ shared_expert_gate^T) * shared_expert(x).  Qwen layer l is sparse when l is not in
  mlp_only_layers and (l + 1) % decoder_sparse_step == 0 (else the dense mlp of intermediate_size);
  Mixtral's layers all are.  Qwen2-MoE's q/k/v biases follow qkv_bias (default true).  --routing
  writes the chosen experts (ascending) and their weights per sparse layer and token, and the
  smallest gap between the k-th and (k+1)-th router logit (how far the choice is from a tie).

- NemotronH / Mamba2 (models/nemotron_h/modeling_nemotron_h.py, models/mamba2/modeling_mamba2.py
  torch_forward; Megatron's megatron/core/ssm/mamba_mixer.py for the mixer's math): h =
  backbone.embeddings[ids]; per layer h += mixer(RMSNorm(h) with backbone.layers.N.norm), the mixer
  chosen by hybrid_override_pattern (or layers_block_type; Mamba2: every layer Mamba): M Mamba-2,
  * attention (no RoPE, GQA, 1/sqrt(head_dim)), - MLP down(act(up(x))) with act = mlp_hidden_act
  (relu2 = relu(x)^2, gelu erf, gelu_new / gelu_pytorch_tanh tanh), E MoE (nemotron_moe: DeepSeek-V3's
  sigmoid router with e_score_correction_bias, experts and shared experts as the MLP); backbone.norm_f;
  lm_head.
  Mamba-2: in_proj rows [z (DI), xBC (DI + 2 G N), dt (NH)]; xBC = silu(causal depthwise conv of width
  4 (conv1d.weight [CD, 1, 4], the last tap on the current token) + conv1d.bias); x, B, C split;
  dt = softplus(dt + dt_bias), NemotronH clamping it below at time_step_min (Mamba2 at
  time_step_limit, default none); A = -exp(A_log); per head h of group g = h / (NH / G), state S
  [P, N] from 0: S = exp(dt A) S + dt x_h B_g^T, y_h = S C_g + D_h x_h; y = y * silu(z); RMSNorm
  over groups of DI / G (NemotronH; Mamba2's MambaRMSNormGated over all of DI) times norm.weight;
  out_proj.  Variant b computes the scan in its quadratic form: y_t = sum_{s <= t} (C_t . B_s)
  exp(A sum_{s < r <= t} dt_r) dt_s x_s (Mamba-2's SSD duality), and the conv with F.conv1d.

Second path (--variant b, used by --self-test): MoE through a dense [tokens, experts] weight matrix
(every expert on every token, argsort for the top-k); GPT-2 through torch.nn.functional (linear on the
transposed Conv1D weights, layer_norm, gelu approximate="tanh", masked_fill + softmax, per-head loop);
the RoPE families with q/k rows (and q/k biases, q_norm/k_norm weights) permuted to the interleaved
layout that Meta's original checkpoints and llama.cpp's LLAMA_ROPE_TYPE_NORM use
(w.reshape(n_head, 2, d/2, in).swapaxes(1, 2), convert_hf_to_gguf.py LlamaModel.permute), rotated
as complex numbers (adjacent pairs times exp(i angle)), llama3 factors computed per frequency with
scalar math, F.silu, repeat_interleave for GQA, and a per-head loop.  The two paths must agree to
~1e-12: that checks the permutation and the rotate_half equivalence on which the GGUF export relies.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

torch.set_default_dtype(torch.float64)
DT = torch.float64
# "exact": HF's gelu_new in float64.  "ggml-f16": llama.cpp's CPU GELU (ggml GGML_GELU_FP16): the input
# rounded to f16, gelu computed in f32, the result rounded to f16 (a 65536-entry table), x <= -10 -> 0,
# x >= 10 -> x.  Only for comparing with llama.cpp (--ggml-gelu), never as the HF reference.
GELU_MODE = "exact"


class RefError(Exception):
    pass


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    W = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in st.load_float(model_dir).items()}
    return cfg, W


MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe")
ROUTING = {}  # filled by moe_mlp: "layer_N" -> {"experts": [[...]], "probs": [[...]]}, "min_gap"


HYBRID_FAMILIES = ("nemotron_h", "mamba2")
NORM_OVERRIDE = None  # self-test: "grouped" or "full" forces the gated norm's width


def family(cfg):
    mt = cfg.get("model_type")
    if mt in ("gpt2", "llama", "mistral", "qwen2", "qwen3") + MOE_FAMILIES + HYBRID_FAMILIES:
        return mt
    raise RefError("config.json: model_type %r not supported (gpt2, llama, mistral, qwen2, qwen3, mixtral, "
                   "qwen2_moe, qwen3_moe, nemotron_h, mamba2)" % mt)


def is_sparse(cfg, fam, i):
    if fam == "mixtral":
        return True
    if fam not in MOE_FAMILIES or cfg.get("num_experts", 0) <= 0:
        return False
    return i not in (cfg.get("mlp_only_layers") or []) and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0


def swiglu_mlp(x, wg, wu, wd, variant):
    gt = x @ wg.t()
    up = x @ wu.t()
    act = F.silu(gt) if variant == "b" else gt / (1.0 + torch.exp(-gt))
    return (act * up) @ wd.t()


def moe_mlp(cfg, fam, W, p, x, i, variant):
    """The sparse MLP of layer i on x [n, H] (see the header)."""
    H, n = cfg["hidden_size"], x.shape[0]
    E = cfg["num_local_experts"] if fam == "mixtral" else cfg["num_experts"]
    k = cfg["num_experts_per_tok"]
    Fe = cfg["intermediate_size"] if fam == "mixtral" else cfg["moe_intermediate_size"]
    blk = p + ("block_sparse_moe." if fam == "mixtral" else "mlp.")
    names = ("w1", "w3", "w2") if fam == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    renorm = fam == "mixtral" or bool(cfg.get("norm_topk_prob", False))
    ex = [(need(W, "%sexperts.%d.%s.weight" % (blk, e, names[0]), (Fe, H)),
           need(W, "%sexperts.%d.%s.weight" % (blk, e, names[1]), (Fe, H)),
           need(W, "%sexperts.%d.%s.weight" % (blk, e, names[2]), (H, Fe))) for e in range(E)]
    logits = x @ need(W, blk + "gate.weight", (E, H)).t()
    if variant == "b":
        probs = F.softmax(logits, dim=-1)
        order = torch.argsort(probs, dim=-1, descending=True)
        sel = order[:, :k]
        top = torch.gather(probs, 1, sel)
        if renorm:
            top = top / top.sum(-1, keepdim=True)
        dense = torch.zeros(n, E).scatter(1, sel, top)
        out = torch.zeros(n, H)
        for e in range(E):
            out = out + dense[:, e:e + 1] * swiglu_mlp(x, *ex[e], variant)
    else:
        z = logits - logits.max(-1, keepdim=True).values
        probs = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)
        top, sel = torch.topk(probs, k, dim=-1)
        if renorm:
            top = top / top.sum(-1, keepdim=True)
        out = torch.zeros(n, H)
        for t in range(n):
            for j in range(k):
                e = int(sel[t, j])
                out[t] += top[t, j] * swiglu_mlp(x[t:t + 1], *ex[e], variant)[0]
    srt = torch.sort(logits, dim=-1, descending=True).values  # the gap in logits: fp32 errors are relative to them
    gap = float((srt[:, k - 1] - srt[:, k]).min()) if k < E else float("inf")
    ROUTING["min_gap"] = min(ROUTING.get("min_gap", float("inf")), gap)
    asc = torch.argsort(sel, dim=-1)
    ROUTING["layer_%d" % i] = {"experts": torch.gather(sel, 1, asc).tolist(),
                               "probs": torch.gather(top, 1, asc).tolist()}
    if fam == "qwen2_moe":
        S = cfg["shared_expert_intermediate_size"]
        sh = swiglu_mlp(x, need(W, p + "mlp.shared_expert.gate_proj.weight", (S, H)),
                        need(W, p + "mlp.shared_expert.up_proj.weight", (S, H)),
                        need(W, p + "mlp.shared_expert.down_proj.weight", (H, S)), variant)
        g = x @ need(W, p + "mlp.shared_expert_gate.weight", (1, H)).t()
        out = out + (torch.sigmoid(g) if variant == "b" else 1.0 / (1.0 + torch.exp(-g))) * sh
    return out


def need(W, name, shape):
    if name not in W:
        raise RefError("tensor %s missing" % name)
    t = W[name]
    if tuple(t.shape) != tuple(shape):
        raise RefError("tensor %s: shape %s, expected %s" % (name, list(t.shape), list(shape)))
    return t


# ----------------------------------------------------------------------------------------- GPT-2
def gpt2_forward(cfg, W, ids, variant="a", start_pos=0):
    pre = "transformer." if any(k.startswith("transformer.") for k in W) else ""
    H, nh, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    V, P = cfg["vocab_size"], cfg["n_positions"]
    I = cfg.get("n_inner") or 4 * H
    eps = cfg["layer_norm_epsilon"]
    if cfg.get("activation_function", "gelu_new") != "gelu_new":
        raise RefError("activation_function %r not supported" % cfg.get("activation_function"))
    if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("reorder_and_upcast_attn"):
        raise RefError("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn not supported")
    if cfg.get("scale_attn_weights", True) is not True:
        raise RefError("scale_attn_weights false not supported")
    d = H // nh
    n = len(ids)
    if start_pos + n > P:
        raise RefError("sequence of %d tokens exceeds n_positions %d" % (start_pos + n, P))
    g = lambda name, shape: need(W, pre + name, shape)  # noqa: E731
    wte = g("wte.weight", (V, H))
    ids_t = torch.tensor(ids, dtype=torch.long)
    pos = torch.arange(start_pos, start_pos + n)
    h = wte[ids_t] + g("wpe.weight", (P, H))[pos]

    def ln(x, w, b):
        if variant == "b":
            return F.layer_norm(x, (H,), w, b, eps)
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * w + b

    def conv1d(x, w, b):
        return F.linear(x, w.t(), b) if variant == "b" else x @ w + b

    def gelu_new(x):
        if GELU_MODE == "ggml-f16":
            x16 = x.to(torch.float32).to(torch.float16).to(torch.float32)
            y = 0.5 * x16 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * x16 * (1.0 + 0.044715 * x16 * x16)))
            y = y.to(torch.float16).to(DT)
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))
        if variant == "b":
            return F.gelu(x, approximate="tanh")
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for i in range(L):
        p = "h.%d." % i
        x = ln(h, g(p + "ln_1.weight", (H,)), g(p + "ln_1.bias", (H,)))
        qkv = conv1d(x, g(p + "attn.c_attn.weight", (H, 3 * H)), g(p + "attn.c_attn.bias", (3 * H,)))
        q, k, v = qkv[:, :H], qkv[:, H:2 * H], qkv[:, 2 * H:]
        ctx = attention(q.reshape(n, nh, d), k.reshape(n, nh, d), v.reshape(n, nh, d), causal, variant)
        h = h + conv1d(ctx.reshape(n, H), g(p + "attn.c_proj.weight", (H, H)), g(p + "attn.c_proj.bias", (H,)))
        x = ln(h, g(p + "ln_2.weight", (H,)), g(p + "ln_2.bias", (H,)))
        x = gelu_new(conv1d(x, g(p + "mlp.c_fc.weight", (H, I)), g(p + "mlp.c_fc.bias", (I,))))
        h = h + conv1d(x, g(p + "mlp.c_proj.weight", (I, H)), g(p + "mlp.c_proj.bias", (H,)))
    h = ln(h, g("ln_f.weight", (H,)), g("ln_f.bias", (H,)))
    return h @ wte.t()


def attention(q, k, v, causal, variant):
    """q [n, nq, d], k/v [n, nq, d] (kv already expanded to the query heads) -> [n, nq, d]."""
    n, nq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    if variant == "b":
        out = torch.empty_like(q)
        for hh in range(nq):
            s = (q[:, hh, :] @ k[:, hh, :].t()) * scale
            s = s.masked_fill(~causal, float("-inf"))
            out[:, hh, :] = torch.softmax(s, dim=-1) @ v[:, hh, :]
        return out
    s = torch.einsum("ihd,jhd->hij", q, k) * scale
    s = torch.where(causal[None], s, torch.tensor(-1e300))
    s = s - s.max(-1, keepdim=True).values
    pr = torch.exp(s)
    pr = pr * causal[None]
    pr = pr / pr.sum(-1, keepdim=True)
    return torch.einsum("hij,jhd->ihd", pr, v)


# ----------------------------------------------------------------------------- RoPE families
def inv_freq(cfg, d, variant="a"):
    theta = float(cfg.get("rope_theta", 10000.0))
    rs = cfg.get("rope_scaling")
    rtype = None
    if rs:
        rtype = rs.get("rope_type", rs.get("type"))
    if variant == "b":
        out = []
        for i in range(d // 2):
            f = 1.0 / theta ** (2.0 * i / d)
            if rtype == "llama3":
                fac, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
                orig = float(rs["original_max_position_embeddings"])
                wl = 2.0 * math.pi / f
                if wl < orig / hi:
                    pass
                elif wl > orig / lo:
                    f = f / fac
                else:
                    s = (orig / wl - lo) / (hi - lo)
                    f = (1.0 - s) * f / fac + s * f
            elif rtype == "linear":
                f = f / float(rs["factor"])
            out.append(f)
        return torch.tensor(out)
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=DT) / d)
    if rtype is None or rtype == "default":
        return inv
    if rtype == "linear":
        return inv / float(rs["factor"])
    if rtype != "llama3":
        raise RefError("rope_scaling rope_type %r not supported" % rtype)
    fac, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    orig = float(rs["original_max_position_embeddings"])
    wl = 2 * math.pi / inv
    low_band = wl > orig / lo
    high_band = wl < orig / hi
    s = (orig / wl - lo) / (hi - lo)
    mid = (1 - s) * inv / fac + s * inv
    return torch.where(high_band, inv, torch.where(low_band, inv / fac, mid))


def rope_regions(cfg, d):
    """(kept, smoothed, divided) frequency counts for a llama3 rope_scaling config."""
    theta = float(cfg.get("rope_theta", 10000.0))
    rs = cfg["rope_scaling"]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=DT) / d)
    wl = 2 * math.pi / inv
    orig = float(rs["original_max_position_embeddings"])
    hi = int((wl < orig / float(rs["high_freq_factor"])).sum())
    lo = int((wl > orig / float(rs["low_freq_factor"])).sum())
    return hi, len(wl) - hi - lo, lo


def rope_half(x, ang):
    """x [n, h, d] rotate_half convention; ang [n, d/2]."""
    c = torch.cat([torch.cos(ang), torch.cos(ang)], -1)[:, None, :]
    s = torch.cat([torch.sin(ang), torch.sin(ang)], -1)[:, None, :]
    h2 = x.shape[-1] // 2
    rot = torch.cat([-x[..., h2:], x[..., :h2]], -1)
    return x * c + rot * s


def rope_interleaved(x, ang):
    """x [n, h, d] with pairs (2j, 2j+1) rotated by ang[:, j], as complex multiplication."""
    n, hh, d = x.shape
    z = torch.view_as_complex(x.reshape(n, hh, d // 2, 2).contiguous())
    r = torch.polar(torch.ones_like(ang), ang)[:, None, :]
    return torch.view_as_real(z * r).reshape(n, hh, d)


def permute_rows(w, n_head):
    """HF (rotate_half) q/k rows -> interleaved pairs; works for [rows, in] weights and [rows] vectors."""
    rows = w.shape[0]
    rest = tuple(w.shape[1:])
    return w.reshape(n_head, 2, rows // n_head // 2, *rest).transpose(1, 2).reshape(rows, *rest)


def rmsnorm(x, w, eps, variant):
    if variant == "b":
        return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))
    return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_forward(cfg, W, ids, variant="a", start_pos=0):
    fam = family(cfg)
    H, nq, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    nkv = cfg.get("num_key_value_heads") or nq
    V, I = cfg["vocab_size"], cfg["intermediate_size"]
    d = cfg.get("head_dim") or H // nq
    eps = cfg["rms_norm_eps"]
    if cfg.get("hidden_act", "silu") != "silu":
        raise RefError("hidden_act %r not supported" % cfg.get("hidden_act"))
    if cfg.get("mlp_bias"):
        raise RefError("mlp_bias not supported")
    n = len(ids)
    sw = cfg.get("sliding_window")
    uses_sw = sw is not None and (fam == "mistral" or cfg.get("use_sliding_window"))
    if uses_sw and start_pos + n > sw:
        raise RefError("sequence of %d tokens is longer than sliding_window %d" % (start_pos + n, sw))
    qkv_bias = fam == "qwen2" or (fam == "qwen2_moe" and cfg.get("qkv_bias", True) is not False) \
        or bool(cfg.get("attention_bias"))
    o_bias = fam not in ("qwen2", "qwen2_moe") and bool(cfg.get("attention_bias"))
    r = nq // nkv
    if nq % nkv:
        raise RefError("num_attention_heads %d not a multiple of num_key_value_heads %d" % (nq, nkv))
    ids_t = torch.tensor(ids, dtype=torch.long)
    emb = need(W, "model.embed_tokens.weight", (V, H))
    h = emb[ids_t].clone()
    pos = torch.arange(start_pos, start_pos + n, dtype=DT)
    ang = pos[:, None] * inv_freq(cfg, d, variant)[None, :]
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for i in range(L):
        p = "model.layers.%d." % i
        x = rmsnorm(h, need(W, p + "input_layernorm.weight", (H,)), eps, variant)
        wq = need(W, p + "self_attn.q_proj.weight", (nq * d, H))
        wk = need(W, p + "self_attn.k_proj.weight", (nkv * d, H))
        wv = need(W, p + "self_attn.v_proj.weight", (nkv * d, H))
        bq = need(W, p + "self_attn.q_proj.bias", (nq * d,)) if qkv_bias else torch.zeros(nq * d)
        bk = need(W, p + "self_attn.k_proj.bias", (nkv * d,)) if qkv_bias else torch.zeros(nkv * d)
        bv = need(W, p + "self_attn.v_proj.bias", (nkv * d,)) if qkv_bias else torch.zeros(nkv * d)
        qn = kn = None
        if fam in ("qwen3", "qwen3_moe"):
            qn = need(W, p + "self_attn.q_norm.weight", (d,))
            kn = need(W, p + "self_attn.k_norm.weight", (d,))
        if variant == "b":
            # interleaved layout: permute q/k rows per head (and the per-head norm weights alike)
            wq, bq = permute_rows(wq, nq), permute_rows(bq, nq)
            wk, bk = permute_rows(wk, nkv), permute_rows(bk, nkv)
            if qn is not None:
                qn, kn = permute_rows(qn, 1), permute_rows(kn, 1)
            q = F.linear(x, wq, bq).reshape(n, nq, d)
            k = F.linear(x, wk, bk).reshape(n, nkv, d)
            v = F.linear(x, wv, bv).reshape(n, nkv, d)
        else:
            q = (x @ wq.t() + bq).reshape(n, nq, d)
            k = (x @ wk.t() + bk).reshape(n, nkv, d)
            v = (x @ wv.t() + bv).reshape(n, nkv, d)
        if qn is not None:
            q = rmsnorm(q, qn, eps, variant)
            k = rmsnorm(k, kn, eps, variant)
        if variant == "b":
            q, k = rope_interleaved(q, ang), rope_interleaved(k, ang)
            k = k.repeat_interleave(r, dim=1)
            v = v.repeat_interleave(r, dim=1)
        else:
            q, k = rope_half(q, ang), rope_half(k, ang)
            k = k[:, :, None, :].expand(n, nkv, r, d).reshape(n, nq, d)
            v = v[:, :, None, :].expand(n, nkv, r, d).reshape(n, nq, d)
        ctx = attention(q, k, v, causal, variant).reshape(n, nq * d)
        wo = need(W, p + "self_attn.o_proj.weight", (H, nq * d))
        h = h + ctx @ wo.t()
        if o_bias:
            h = h + need(W, p + "self_attn.o_proj.bias", (H,))
        x = rmsnorm(h, need(W, p + "post_attention_layernorm.weight", (H,)), eps, variant)
        if is_sparse(cfg, fam, i):
            h = h + moe_mlp(cfg, fam, W, p, x, i, variant)
            continue
        h = h + swiglu_mlp(x, need(W, p + "mlp.gate_proj.weight", (I, H)), need(W, p + "mlp.up_proj.weight", (I, H)),
                           need(W, p + "mlp.down_proj.weight", (H, I)), variant)
    h = rmsnorm(h, need(W, "model.norm.weight", (H,)), eps, variant)
    tied = cfg.get("tie_word_embeddings", fam in ("gpt2",))
    if "lm_head.weight" in W and not tied:
        head = need(W, "lm_head.weight", (V, H))
    elif tied:
        head = emb
    else:
        raise RefError("lm_head.weight missing and tie_word_embeddings is false")
    return h @ head.t()


# ------------------------------------------------------------------------ NemotronH / Mamba2
def hybrid_pattern(cfg):
    if cfg["model_type"] == "mamba2":
        return "M" * cfg["num_hidden_layers"]
    pat = cfg.get("hybrid_override_pattern")
    if pat is None:
        kinds = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        pat = "".join(kinds[k] for k in cfg["layers_block_type"])
    if len(pat) != cfg["num_hidden_layers"]:
        raise RefError("pattern %r vs num_hidden_layers %d" % (pat, cfg["num_hidden_layers"]))
    return pat


def mamba_mixer(cfg, W, L, x, variant):
    """x [n, H] (normed) -> [n, H]."""
    nh = cfg["model_type"] == "nemotron_h"
    NH = cfg["mamba_num_heads"] if nh else cfg["num_heads"]
    P = cfg["mamba_head_dim"] if nh else cfg["head_dim"]
    N = cfg["ssm_state_size"] if nh else cfg["state_size"]
    G = cfg.get("n_groups", cfg.get("mamba_n_groups", 1))
    H, n = x.shape[1], x.shape[0]
    DI, CD = NH * P, NH * P + 2 * G * N
    zxbcdt = x @ need(W, L + "in_proj.weight", (2 * DI + 2 * G * N + NH, H)).t()
    z, xbc, dt = zxbcdt[:, :DI], zxbcdt[:, DI:DI + CD], zxbcdt[:, DI + CD:]
    w = need(W, L + "conv1d.weight", (CD, 1, 4))
    b = need(W, L + "conv1d.bias", (CD,))
    if variant == "b":
        conv = F.conv1d(xbc.t()[None], w, b, padding=3, groups=CD)[0, :, :n].t()
    else:
        pad = torch.cat([torch.zeros(3, CD), xbc])
        conv = b + sum(w[:, 0, k] * pad[k:k + n] for k in range(4))
    xbc = conv / (1.0 + torch.exp(-conv))
    xs, B, C = xbc[:, :DI].reshape(n, NH, P), xbc[:, DI:DI + G * N].reshape(n, G, N), xbc[:, DI + G * N:].reshape(n, G, N)
    dt = F.softplus(dt + need(W, L + "dt_bias", (NH,)))
    if nh:
        dt = torch.clamp(dt, min=cfg.get("time_step_min", 0.001))
    else:
        lim = cfg.get("time_step_limit") or [0.0, float("inf")]
        dt = torch.clamp(dt, lim[0], lim[1])
    A = -torch.exp(need(W, L + "A_log", (NH,)))
    Dw = need(W, L + "D", (NH,))
    grp = torch.arange(NH) // (NH // G)
    Bh, Ch = B[:, grp], C[:, grp]  # [n, NH, N]
    if variant == "b":
        cum = torch.cumsum(dt * A, 0)  # [n, NH]
        decay = torch.exp(cum[:, None, :] - cum[None, :, :])  # [t, s, NH]
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        cb = torch.einsum("thn,shn->tsh", Ch, Bh) * decay * mask[..., None]
        y = torch.einsum("tsh,sh,shp->thp", cb, dt, xs)
    else:
        S = torch.zeros(NH, P, N)
        ys = []
        for t in range(n):
            S = torch.exp(dt[t] * A)[:, None, None] * S + (dt[t][:, None] * xs[t])[:, :, None] * Bh[t][:, None, :]
            ys.append(torch.einsum("hpn,hn->hp", S, Ch[t]))
        y = torch.stack(ys)
    y = (y + Dw[None, :, None] * xs).reshape(n, DI)
    y = y * (z / (1.0 + torch.exp(-z)))
    grouped = nh if NORM_OVERRIDE is None else NORM_OVERRIDE == "grouped"
    gs = DI // G if grouped else DI  # NemotronH: per group; HF Mamba2: over all of d_inner
    yg = y.reshape(n, DI // gs, gs)
    y = (yg / torch.sqrt(yg.pow(2).mean(-1, keepdim=True) + cfg.get("layer_norm_epsilon", 1e-5))).reshape(n, DI)
    y = y * need(W, L + "norm.weight", (DI,))
    return y @ need(W, L + "out_proj.weight", (H, DI)).t()


def act_fn(name, x):
    if name == "relu2":
        return torch.relu(x) ** 2
    if name == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    raise RefError("mlp_hidden_act %r not supported" % name)


def nemotron_moe(cfg, W, M, x, variant="a"):
    """NemotronHMoE on x [n, H]: DeepSeek-V3's router (sigmoid scores s; choice by s + correction bias,
    with n_group > 1 the topk_group groups of the largest sums of their top 2 choice scores, the
    others' choice scores set to -inf (route_tokens_to_experts, transformers @008d9e95; older
    DeepSeek-V3 code set them to 0.0, which differs only when a kept choice score is negative); weights s of the chosen, normalized (+1e-20) when norm_topk_prob,
    times routed_scaling_factor), sum_j w_j expert_j(x) + shared_experts(x), each an MLP up, act, down.
    With moe_latent_size D (NemotronHMoE.forward): the router and the shared experts read x, the routed
    experts fc1_latent_proj(x) [n, D], and their weighted sum goes through fc2_latent_proj [H, D] before
    the shared experts' output is added."""
    E, k, H = cfg["n_routed_experts"], cfg["num_experts_per_tok"], x.shape[1]
    act = cfg.get("mlp_hidden_act", "relu2")
    s = torch.sigmoid(x @ need(W, M + "gate.weight", (E, H)).t())
    choice = s + need(W, M + "gate.e_score_correction_bias", (E,))
    G = cfg.get("n_group") or 1
    if G > 1:
        gs = choice.reshape(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(cfg["topk_group"], dim=-1)[1], 1.0)
        choice = choice.masked_fill(keep.repeat_interleave(E // G, 1) == 0, float("-inf"))
    idx = choice.topk(k, dim=-1)[1]
    w = s.gather(1, idx)
    if cfg.get("norm_topk_prob"):
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * cfg.get("routed_scaling_factor", 1.0)
    Fe, S = cfg["moe_intermediate_size"], cfg["moe_shared_expert_intermediate_size"]
    D = cfg.get("moe_latent_size")

    def mlp(p, v, F_, n=H):
        return act_fn(act, v @ need(W, p + "up_proj.weight", (F_, n)).t()) @ need(W, p + "down_proj.weight", (n, F_)).t()
    shared = mlp(M + "shared_experts.", x, S)
    xr = x @ need(W, M + "fc1_latent_proj.weight", (D, H)).t() if D else x
    n = D or H
    if variant == "b":  # every expert on every token, weighted by a dense [tokens, experts] matrix
        dense = torch.zeros(x.shape[0], E).scatter_(1, idx, w)
        routed = sum(dense[:, e:e + 1] * mlp(M + "experts.%d." % e, xr, Fe, n) for e in range(E))
    else:
        routed = torch.zeros(x.shape[0], n, dtype=x.dtype)
        for t in range(x.shape[0]):
            for j in range(k):
                routed[t] = routed[t] + w[t, j] * mlp(M + "experts.%d." % int(idx[t, j]), xr[t:t + 1], Fe, n)[0]
    if D:
        routed = routed @ need(W, M + "fc2_latent_proj.weight", (H, D)).t()
    return routed + shared


def hybrid_forward(cfg, W, ids, variant="a"):
    pat = hybrid_pattern(cfg)
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    h = need(W, "backbone.embeddings.weight", (V, H))[torch.tensor(ids)]
    n = len(ids)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for i, sym in enumerate(pat):
        L = "backbone.layers.%d." % i
        x = rmsnorm(h, need(W, L + "norm.weight", (H,)), eps, variant)
        M = L + "mixer."
        if sym == "M":
            h = h + mamba_mixer(cfg, W, M, x, variant)
        elif sym == "*":
            nq, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
            d = cfg.get("head_dim") or H // nq
            q = (x @ need(W, M + "q_proj.weight", (nq * d, H)).t()).reshape(n, nq, d)
            k = (x @ need(W, M + "k_proj.weight", (nkv * d, H)).t()).reshape(n, nkv, d)
            v = (x @ need(W, M + "v_proj.weight", (nkv * d, H)).t()).reshape(n, nkv, d)
            k, v = k.repeat_interleave(nq // nkv, 1), v.repeat_interleave(nq // nkv, 1)
            o = attention(q, k, v, causal, variant).reshape(n, nq * d)
            h = h + o @ need(W, M + "o_proj.weight", (H, nq * d)).t()
        elif sym == "-":
            I = cfg["intermediate_size"]
            u = x @ need(W, M + "up_proj.weight", (I, H)).t()
            h = h + act_fn(cfg.get("mlp_hidden_act", "relu2"), u) @ need(W, M + "down_proj.weight", (H, I)).t()
        elif sym == "E":
            h = h + nemotron_moe(cfg, W, M, x, variant)
        else:
            raise RefError("layer kind %r not supported" % sym)
    h = rmsnorm(h, need(W, "backbone.norm_f.weight", (H,)), eps, variant)
    out = W["backbone.embeddings.weight"] if cfg.get("tie_word_embeddings") else need(W, "lm_head.weight", (V, H))
    return h @ out.t()


def forward(cfg, W, ids, variant="a", start_pos=0):
    """-> float64 tensor [len(ids), vocab_size]."""
    if not ids:
        raise RefError("no tokens")
    if min(ids) < 0 or max(ids) >= cfg["vocab_size"]:
        raise RefError("token id out of range [0, %d)" % cfg["vocab_size"])
    with torch.no_grad():
        if family(cfg) == "gpt2":
            return gpt2_forward(cfg, W, ids, variant, start_pos)
        if family(cfg) in HYBRID_FAMILIES:
            return hybrid_forward(cfg, W, ids, variant)
        return rope_forward(cfg, W, ids, variant, start_pos)


def greedy(cfg, W, ids, steps, stop_eos=False, variant="a"):
    eos = cfg.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))
    seq, out = list(ids), []
    for _ in range(steps):
        lg = forward(cfg, W, seq, variant)[-1].numpy()
        t = int(np.argmax(lg))  # first maximum: lowest id on ties
        out.append(t)
        seq.append(t)
        if stop_eos and t in eos:
            break
    return out


# ---------------------------------------------------------------------------------- self-test
def self_test(quick=False):
    global NORM_OVERRIDE
    import subprocess
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    fams = ["gpt2", "llama2", "llama3", "llama3.1", "llama3.2", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe",
            "qwen3_moe", "nemotron_h", "nemotron_h+latent", "mamba2"]
    worst = 0.0
    fails = []
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as tmp:
        for label in fams:
            fam = label.split("+")[0]
            dd = os.path.join(tmp, label)
            extra = ["--pattern", "ME*-E"] if fam == "nemotron_h" else []
            extra += ["--latent", "24"] if label.endswith("+latent") else []  # moe_latent_size below hidden 64
            subprocess.check_call([sys.executable, os.path.join(here, "make_tiny.py"), fam, dd, "--dtype", "fp32"] + extra)
            cfg, W = load(dd)
            n = 12 if quick else 24
            ids = [int(x) for x in rng.integers(0, cfg["vocab_size"], n)]
            la = forward(cfg, W, ids, "a")
            lb = forward(cfg, W, ids, "b")
            dab = float((la - lb).abs().max())
            # causality: changing the last half of the tokens leaves the first half's logits alone
            ids2 = ids[: n // 2] + [int(x) for x in rng.integers(0, cfg["vocab_size"], n - n // 2)]
            l2 = forward(cfg, W, ids2, "a")
            dcaus = float((la[: n // 2] - l2[: n // 2]).abs().max())
            dlater = float((la[n // 2:] - l2[n // 2:]).abs().max())
            spread = float(la.std(-1).mean())
            line = "%-9s paths a/b max|diff| %.2e  causal %.1e (later tokens %.2f)  logit std %.2f" % (
                label, dab, dcaus, dlater, spread)
            if fam in HYBRID_FAMILIES:
                # no positions to shift; instead: the gated norm's width must matter with 2 groups
                # (nemotron_h) and must not with 1 (mamba2): pitfall 2 of the facts
                NORM_OVERRIDE = "full" if fam == "nemotron_h" else "grouped"
                dg = float((la - forward(cfg, W, ids, "a")).abs().max())
                NORM_OVERRIDE = None
                line += "  grouped vs full-width norm %.1e" % dg
                if (dg < 1e-3) if fam == "nemotron_h" else (dg > 1e-10):
                    fails.append("%s: grouped vs full-width norm %.2e" % (fam, dg))
            elif fam != "gpt2":
                # RoPE is relative: the same tokens at positions shifted by 7 give the same logits
                ls = forward(cfg, W, ids, "a", start_pos=7)
                dshift = float((la - ls).abs().max())
                line += "  shift %.1e" % dshift
                if dshift > 1e-9:
                    fails.append("%s: logits change with a position shift (%.2e)" % (fam, dshift))
                if cfg.get("rope_scaling"):
                    reg = rope_regions(cfg, cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
                    c2 = dict(cfg)
                    c2["rope_scaling"] = None
                    dsc = float((la - forward(c2, W, ids, "a")).abs().max())
                    line += "  regions kept/smoothed/divided %s, scaling changes logits by %.2f" % (reg, dsc)
                    if min(reg) < 1 or dsc < 1e-3:
                        fails.append("%s: rope scaling does not matter here" % fam)
            else:
                # GPT-2 has learned absolute positions: shifting must change the logits
                dshift = float((la - forward(cfg, W, ids, "a", start_pos=7)).abs().max())
                line += "  shift changes logits by %.2f" % dshift
                if dshift < 1e-3:
                    fails.append("gpt2: position embeddings have no effect")
            print(line)
            worst = max(worst, dab)
            if dab > 1e-10:
                fails.append("%s: the two paths differ by %.2e" % (fam, dab))
            if dcaus > 1e-12:
                fails.append("%s: not causal (%.2e)" % (fam, dcaus))
            if dlater < 1e-3 or spread < 0.5:
                fails.append("%s: logits insensitive or flat" % fam)
        # rotate_half on HF rows == complex interleaved rotation on permuted rows, for a single vector
        d = 16
        x = torch.randn(3, 2, d)
        ang = torch.rand(3, d // 2) * 10
        a = rope_half(x, ang)
        perm = permute_rows(torch.arange(d), 1)  # interleaved slot -> HF (rotate_half) index
        b = rope_interleaved(x[..., perm], ang)
        da = float((a[..., perm] - b).abs().max())
        dn = float((a.norm(dim=-1) - x.norm(dim=-1)).abs().max())
        print("rope: rotate_half vs permuted interleaved %.1e; norm preserved %.1e" % (da, dn))
        if da > 1e-12 or dn > 1e-12:
            fails.append("rope identities")
    for f in fails:
        print("FAIL: " + f)
    print("self-test %s (worst a/b difference %.2e)" % ("FAILED" if fails else "passed", worst))
    return 1 if fails else 0


def main(argv=None):
    p = argparse.ArgumentParser(description="float64 reference forward pass of an HF model directory")
    p.add_argument("model_dir", nargs="?")
    p.add_argument("--tokens", help="space- or comma-separated token ids")
    p.add_argument("--logits", help="write float64 .npy [n_tokens, vocab]")
    p.add_argument("--greedy", type=int, default=0, metavar="N")
    p.add_argument("--stop-eos", action="store_true")
    p.add_argument("--variant", choices=("a", "b"), default="a")
    p.add_argument("--start-pos", type=int, default=0)
    p.add_argument("--ggml-gelu", action="store_true", help="emulate llama.cpp's f16-table GELU (GPT-2)")
    p.add_argument("--routing", help="write the MoE routing of the prompt as JSON (see the header)")
    p.add_argument("--gated-norm", choices=("grouped", "full"), default=None,
                   help="nemotron_h/mamba2: force the gated norm's width (a negative control)")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        return self_test(a.quick)
    if not a.model_dir or a.tokens is None:
        p.error("MODEL_DIR and --tokens are required")
    ids = [int(t) for t in a.tokens.replace(",", " ").split()]
    global GELU_MODE, NORM_OVERRIDE
    GELU_MODE = "ggml-f16" if a.ggml_gelu else "exact"
    NORM_OVERRIDE = a.gated_norm
    try:
        cfg, W = load(a.model_dir)
        lg = forward(cfg, W, ids, a.variant, a.start_pos)
        if a.logits:
            tmp = a.logits + ".tmp.npy"
            np.save(tmp, lg.numpy())
            os.replace(tmp, a.logits)
        if a.routing:
            with open(a.routing, "w") as f:
                json.dump(ROUTING, f)
        if a.greedy:
            print(json.dumps({"greedy": greedy(cfg, W, ids, a.greedy, a.stop_eos, a.variant)}))
    except (RefError, st.StError, OSError, KeyError) as e:
        sys.stderr.write("ref_forward.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
