#!/usr/bin/python3
"""PyTorch reference of Megatron-Core's GPTModel and training step, for mgt parity tests.

Written from Megatron-Core's code (megatron/core/transformer/transformer_layer.py: the GPT layer;
attention.py and mlp.py: the fused QKV and SwiGLU fc1 layouts; megatron/core/optimizer/ and
optimizer_param_scheduler.py: AdamW, clipping and the LR schedule; megatron/training/training.py:
the iteration loss) with plain torch ops, sharing no code with mgt or Megatron.  Test-time only: runs on Debian's
/usr/bin/python3 (torch 1.13 CPU, numpy, h5py).

A model is built from
  args     a dict of Megatron arguments, underscore names (num_layers, hidden_size, ...); missing
           ones take Megatron's defaults (normalize_args)
  tensors  a dict {Megatron-Core name: array} of the global parameters (tensor_specs lists them)
and runs in float64 (the reference) or float32.  Activations are batch-first [b, s, h]; Megatron
is sequence-first, which changes no value.

Mixture of Experts (num_experts > 0): the MLP of the layers mgt_moe_is_layer names is
Megatron-Core's MoE layer, in moe_ref.py (router, capacity, aux / z losses, experts, shared
expert, expert-bias update); the Trainer adds the aux / z loss gradients, reports
load_balancing_loss / z_loss and updates the expert bias once per global batch.

Hybrid models (hybrid_layer_pattern, e.g. "M*M-"; '|' ignored; num_layers = its length): each
symbol is one pre-norm residual block decoder.layers.N.: 'M' Megatron-Core's MambaLayer
(mamba_ref.py: mixer.in_proj / conv1d_weight / dt_bias / A_log / D / norm / out_proj), '*' the
GPT layer's self-attention block alone, '-' its dense MLP block alone, 'E' its MoE block alone
(pre_mlp_layernorm + moe_ref; the MoE layers are exactly the 'E' symbols).  Embedding, final norm
(decoder.final_layernorm.*; a hybrid model's HybridStack names it decoder.final_norm.*) and output layer
as GPT; output-layer inits use std / sqrt(1.0 L) instead of GPT's sqrt(2.0 L).

Also here:
  lr_at(args, n)            Megatron's OptimizerParamScheduler lr after n samples
  Trainer                   one Megatron iteration: micro-batches, loss scaling, clipping, AdamW
  init_params(args, seed)   random parameters (Megatron's init; biases and norms perturbed on request)
  read_dump / write_dump    the `mgt-train --debug-dump` HDF5 file (see write_dump)
Command line:
  mgt_ref.py selfcheck   GPTRef against an independent loop-by-loop numpy forward, lr_at by hand,
                         the MoE layer against moe_ref.naive_moe (values and finite-difference grads),
                         the Mamba layer against mamba_ref.naive_layer (values and finite-difference
                         grads), a '*-' hybrid against the 1-layer GPT of the same weights
Synthetic dumps for testing the parity harness without mgt-train:
  mgt_ref.py fake-dump OUT.h5 [--preset tiny-gpt2|tiny-llama|tiny-hybrid|...] [--set key=value ...]
             [--iters N] [--dtype float32|float64] [--perturb WHAT] [--lr-convention used|logged]
  e.g. --preset tiny-llama --set num_experts=4 --set moe_router_topk=2 --set moe_aux_loss_coeff=0.01
       --preset tiny-hybrid --set hybrid_layer_pattern='M*-E' --set num_experts=4 --set moe_router_topk=2
"""
import argparse
import json
import math
import sys

import os

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_ref  # noqa: E402
import mamba_ref  # noqa: E402

# ---------------------------------------------------------------------------------------------
# arguments

# Megatron's defaults (megatron/training/arguments.py) for every argument this file reads.
DEFAULTS = {
    "num_layers": None, "hidden_size": None, "num_attention_heads": None,
    "ffn_hidden_size": None, "kv_channels": None,
    "group_query_attention": False, "num_query_groups": 1,
    "seq_length": None, "max_position_embeddings": None,
    "position_embedding_type": "learned_absolute",
    "rotary_base": 10000.0, "rotary_percent": 1.0, "rotary_interleaved": False,
    "normalization": "LayerNorm", "norm_epsilon": 1e-5, "apply_layernorm_1p": False,
    "swiglu": False, "add_bias_linear": True, "add_qkv_bias": False,
    "untie_embeddings_and_output_weights": False, "qk_layernorm": False,
    "apply_wd_to_qk_layernorm": False, "openai_gelu": False, "squared_relu": False,
    "use_rope_scaling": False, "rope_scaling_factor": 8.0, "rope_scaling_low_freq_factor": 1.0,
    "rope_scaling_high_freq_factor": 4.0, "rope_scaling_original_max_position_embeddings": 8192,
    "padded_vocab_size": None, "vocab_size": None, "make_vocab_size_divisible_by": 128,
    "hidden_dropout": 0.1, "attention_dropout": 0.1, "init_method_std": 0.02,
    "micro_batch_size": None, "global_batch_size": None, "num_microbatches": None,
    "data_parallel_size": 1,
    "train_iters": None, "train_samples": None,
    "lr": None, "min_lr": 0.0, "lr_warmup_init": 0.0, "lr_decay_style": "linear",
    "lr_decay_iters": None, "lr_decay_samples": None,
    "lr_warmup_iters": 0, "lr_warmup_samples": 0, "lr_warmup_fraction": None,
    "lr_wsd_decay_style": "exponential", "lr_wsd_decay_iters": None, "lr_wsd_decay_samples": None,
    "weight_decay": 0.01, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8,
    "clip_grad": 1.0, "optimizer": "adam", "seed": 1234,
}
DEFAULTS.update(moe_ref.MOE_DEFAULTS)  # Mixture of Experts (moe_ref.py)
DEFAULTS.update(mamba_ref.HYBRID_DEFAULTS)  # hybrid models: Mamba-2 layers (mamba_ref.py)

# Small shapes used when no preset file is given (the lead's share/mgt/models/*.json win).
PRESETS = {
    "tiny-gpt2": dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=64,
                      max_position_embeddings=64, vocab_size=50257, padded_vocab_size=50304),
    "tiny-llama": dict(num_layers=2, hidden_size=64, num_attention_heads=4,
                       group_query_attention=True, num_query_groups=2, ffn_hidden_size=192,
                       seq_length=64, max_position_embeddings=64, normalization="RMSNorm",
                       swiglu=True, position_embedding_type="rope", add_bias_linear=False,
                       untie_embeddings_and_output_weights=True, vocab_size=50257,
                       padded_vocab_size=50304),
    # share/mgt/models/tiny-hybrid.json, for trees without that file
    "tiny-hybrid": dict(family="hybrid", hybrid_layer_pattern="M*M-", num_layers=4, hidden_size=64,
                        ffn_hidden_size=128, num_attention_heads=4, group_query_attention=True,
                        num_query_groups=2, seq_length=128, max_position_embeddings=128,
                        position_embedding_type="none", normalization="RMSNorm", norm_epsilon=1e-5,
                        add_bias_linear=False, untie_embeddings_and_output_weights=True,
                        init_method_std=0.02, mamba_state_dim=16, mamba_head_dim=16, mamba_num_groups=2),
    "gpt2-124m": dict(num_layers=12, hidden_size=768, num_attention_heads=12, seq_length=1024,
                      max_position_embeddings=1024, vocab_size=50257, padded_vocab_size=50304),
}


def _bool(v):
    if isinstance(v, str):
        return v.lower() in ("1", "true", "yes", "on")
    return bool(v)


def normalize_args(args):
    """A copy of args with Megatron's defaults and derived values filled in."""
    a = dict(DEFAULTS)
    a.update({k: v for k, v in args.items() if v is not None or k not in DEFAULTS})
    # mgt writes 0 (or -1 for the warmup fraction) where Megatron has None
    for k in ("kv_channels", "ffn_hidden_size", "max_position_embeddings", "lr_decay_iters",
              "lr_decay_samples", "lr_wsd_decay_iters", "lr_wsd_decay_samples", "train_samples",
              "train_iters", "padded_vocab_size", "vocab_size", "num_microbatches"):
        if a.get(k) == 0:
            a[k] = None
    if a["lr_warmup_fraction"] is not None and a["lr_warmup_fraction"] < 0:
        a["lr_warmup_fraction"] = None
    if "disable_bias_linear" in args and "add_bias_linear" not in args:
        a["add_bias_linear"] = not _bool(args["disable_bias_linear"])
    for k in ("group_query_attention", "swiglu", "add_bias_linear", "add_qkv_bias",
              "untie_embeddings_and_output_weights", "apply_layernorm_1p", "rotary_interleaved",
              "qk_layernorm", "apply_wd_to_qk_layernorm", "openai_gelu", "squared_relu", "use_rope_scaling"):
        a[k] = _bool(a[k])
    h, nq = a["hidden_size"], a["num_attention_heads"]
    if a["kv_channels"] is None:
        a["kv_channels"] = h // nq
    if not a["group_query_attention"]:
        a["num_query_groups"] = nq
    if a["ffn_hidden_size"] is None:
        a["ffn_hidden_size"] = int((4 * h * 2 / 3) / 64) * 64 if a["swiglu"] else 4 * h
    if a["padded_vocab_size"] is None and a["vocab_size"] is not None:
        m = a["make_vocab_size_divisible_by"]
        a["padded_vocab_size"] = -(-a["vocab_size"] // m) * m
    if a["max_position_embeddings"] is None:
        a["max_position_embeddings"] = a["seq_length"]
    mbs, gbs = a["micro_batch_size"], a["global_batch_size"]
    if gbs is None and mbs is not None:
        a["global_batch_size"] = gbs = mbs * a["data_parallel_size"]
    if a["num_microbatches"] is None and mbs is not None:
        a["num_microbatches"] = gbs // (mbs * a["data_parallel_size"])
    if a["normalization"] not in ("LayerNorm", "RMSNorm"):
        raise ValueError("normalization %r not supported" % a["normalization"])
    if a["position_embedding_type"] not in ("learned_absolute", "rope", "none"):
        raise ValueError("position_embedding_type %r not supported" % a["position_embedding_type"])
    if a["rotary_interleaved"]:
        raise ValueError("rotary_interleaved is not in the reference model")
    mamba_ref.normalize_hybrid(a)  # before the MoE: a hybrid model's MoE layers are its 'E' symbols
    return moe_ref.normalize_moe(a)


def llama31_scaling(inv, a):
    """Llama 3.1 RoPE frequency scaling (transformers' modeling_rope_utils.py, tools/checkpoint/, Megatron
    RotaryEmbedding._apply_scaling), on the fp32 tensor inv as torch evaluates the expression."""
    factor, lo, hi = a["rope_scaling_factor"], a["rope_scaling_low_freq_factor"], a["rope_scaling_high_freq_factor"]
    orig = a["rope_scaling_original_max_position_embeddings"]
    lo_wl, hi_wl = orig / lo, orig / hi
    wavelen = 2 * math.pi / inv
    low_band = torch.where(wavelen > lo_wl, inv / factor, inv)
    smooth = (orig / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * low_band / factor + smooth * low_band
    medium = ~(wavelen < hi_wl) & ~(wavelen > lo_wl)
    return torch.where(medium, mid, low_band)


def has_qkv_bias(a):
    return a["add_bias_linear"] or a["add_qkv_bias"]


def _attention_specs(a, p, ln_b):
    """The self-attention block of layer prefix p (its fused pre-norm first)."""
    h, nq, ng, d = a["hidden_size"], a["num_attention_heads"], a["num_query_groups"], a["kv_channels"]
    s = [(p + "self_attention.linear_qkv.layer_norm_weight", (h,), "one", False)]
    if ln_b:
        s.append((p + "self_attention.linear_qkv.layer_norm_bias", (h,), "zero", False))
    s.append((p + "self_attention.linear_qkv.weight", ((nq + 2 * ng) * d, h), "normal", True))
    if has_qkv_bias(a):
        s.append((p + "self_attention.linear_qkv.bias", ((nq + 2 * ng) * d,), "zero", False))
    if a["qk_layernorm"]:  # Megatron: 1-D, so no weight decay unless apply_wd_to_qk_layernorm
        wd = a["apply_wd_to_qk_layernorm"]
        for qk in ("q_layernorm.", "k_layernorm."):
            s.append((p + "self_attention." + qk + "weight", (d,), "one", wd))
            if ln_b:
                s.append((p + "self_attention." + qk + "bias", (d,), "zero", wd))
    s.append((p + "self_attention.linear_proj.weight", (h, nq * d), "proj", True))
    if a["add_bias_linear"]:
        s.append((p + "self_attention.linear_proj.bias", (h,), "zero", False))
    return s


def _mlp_specs(a, p, ln_b):
    """The dense MLP block of layer prefix p (its fused pre-norm first)."""
    h, f, bias = a["hidden_size"], a["ffn_hidden_size"], a["add_bias_linear"]
    s = [(p + "mlp.linear_fc1.layer_norm_weight", (h,), "one", False)]
    if ln_b:
        s.append((p + "mlp.linear_fc1.layer_norm_bias", (h,), "zero", False))
    fo = 2 * f if a["swiglu"] else f
    s.append((p + "mlp.linear_fc1.weight", (fo, h), "normal", True))
    if bias:
        s.append((p + "mlp.linear_fc1.bias", (fo,), "zero", False))
    s.append((p + "mlp.linear_fc2.weight", (h, f), "proj", True))
    if bias:
        s.append((p + "mlp.linear_fc2.bias", (h,), "zero", False))
    return s


def final_norm_prefix(a):
    """The final norm's name prefix: GPT's TransformerBlock final_layernorm, a hybrid model's
    HybridStack final_norm (megatron/core/models/hybrid/hybrid_block.py)."""
    return "decoder.final_norm." if a.get("hybrid_layer_pattern") else "decoder.final_layernorm."


def tensor_specs(args):
    """[(name, shape, init, weight_decay)] of the GPT (or hybrid) model, init in
    normal|proj|zero|one, and for Mamba layers conv|dt_bias|A_log (mamba_ref.init_value)."""
    a = normalize_args(args)
    h, L, V = a["hidden_size"], a["num_layers"], a["padded_vocab_size"]
    ln_b = a["normalization"] == "LayerNorm"
    moe = moe_ref.moe_layer_flags(a)
    pat = mamba_ref.symbols(a)
    s = [("embedding.word_embeddings.weight", (V, h), "normal", True)]
    if a["position_embedding_type"] == "learned_absolute":
        s.append(("embedding.position_embeddings.weight", (a["max_position_embeddings"], h), "normal", True))
    for i in range(L):
        p = "decoder.layers.%d." % i
        if pat:  # hybrid: one block per symbol
            c = pat[i]
            if c == "M":
                s += mamba_ref.mamba_specs(a, p, ln_b)
            elif c == "*":
                s += _attention_specs(a, p, ln_b)
            elif c == "-":
                s += _mlp_specs(a, p, ln_b)
            else:  # 'E'
                s += moe_ref.moe_specs(a, p, ln_b)
            continue
        s += _attention_specs(a, p, ln_b)
        if moe[i]:  # pre_mlp_layernorm, router, experts, shared experts (lib/model/table.c add_moe)
            s += moe_ref.moe_specs(a, p, ln_b)
            continue
        s += _mlp_specs(a, p, ln_b)
    fn = final_norm_prefix(a)
    s.append((fn + "weight", (h,), "one", False))
    if ln_b:
        s.append((fn + "bias", (h,), "zero", False))
    if a["untie_embeddings_and_output_weights"]:
        s.append(("output_layer.weight", (V, h), "normal", True))
    return s


def init_params(args, seed=1234, perturb=0.0):
    """Megatron-style random parameters {name: float32 array}: N(0, std), linear_proj and
    linear_fc2 N(0, std/sqrt(2L)), biases 0 and norm weights 1 -- plus, with perturb > 0,
    N(0, perturb) noise on biases and norm weights (and the Mamba D) so that tests see them.
    Hybrid models: every output-layer init (linear_proj, linear_fc2, experts' fc2, out_proj) is
    N(0, std/sqrt(1.0 L)), L = the number of pattern symbols; the Mamba conv, dt_bias and A_log
    draws are mamba_ref.init_value's; the pre-norm weights are 0 under apply_layernorm_1p."""
    a = normalize_args(args)
    g = np.random.default_rng(seed)
    std = a["init_method_std"]
    hybrid = mamba_ref.symbols(a) is not None
    mult = 1.0 if hybrid else 2.0
    out = {}
    for name, shape, init, _ in tensor_specs(a):
        if init == "normal":
            x = g.normal(0.0, std, shape)
        elif init == "proj":
            x = g.normal(0.0, std / math.sqrt(mult * a["num_layers"]), shape)
        elif init in ("one", "zero"):
            one = init == "one"
            if hybrid and one and a["apply_layernorm_1p"] and "mixer.norm." not in name and not name.endswith(".D"):
                one = False  # zero-centred norm weight (applied as 1 + w)
            x = np.full(shape, 1.0 if one else 0.0)
            if perturb > 0:
                x = x + g.normal(0.0, perturb, shape)
        else:
            x = mamba_ref.init_value(init, shape, g)
        out[name] = x.astype(np.float32)
    return out


# ---------------------------------------------------------------------------------------------
# the model

class GPTRef:
    """Megatron-Core GPTModel (megatron/core/transformer/transformer_layer.py) over named tensors.

    tensors: {name: numpy array or torch tensor} (copied, except torch tensors already of dtype).
    params: {name: leaf tensor (dtype, requires_grad)}.  forward() gives logits [b, s, Vpad].
    MoE layers (moe_ref.py): the router's expert_bias is frozen (no gradient); its float32 state is
    expert_bias32 {layer: array}.  Each forward appends to moe_records one record per MoE layer and
    to moe_losses the aux / z loss terms (times aux_grad_scale) that the Trainer adds to the
    objective; the caller clears both."""

    def __init__(self, args, tensors, dtype=torch.float64, strict=True):
        self.a = a = normalize_args(args)
        self.dtype = dtype
        specs = tensor_specs(a)
        want = {n: shape for n, shape, _, _ in specs}
        self.no_decay = {n for n, shape, _, wd in specs if not wd}
        missing = [n for n in want if n not in tensors]
        extra = [n for n in tensors if n not in want]
        if strict and (missing or extra):
            raise ValueError("tensor names differ from the model's: missing %s, unexpected %s"
                             % (missing[:5], extra[:5]))
        self.params = {}
        for n, shape in want.items():
            x = tensors[n]
            if isinstance(x, torch.Tensor) and x.dtype == dtype:
                t = x.detach()  # used in place (benchmarks: no second copy of the weights)
            else:
                t = torch.as_tensor(np.asarray(x)).to(dtype).clone()
            if n.endswith("mixer.conv1d_weight") and tuple(t.shape) != tuple(shape) and t.numel() == math.prod(shape):
                t = t.detach().reshape(shape).clone()  # Megatron's [CD, 1, 4]; the table has [CD, 4]
            if tuple(t.shape) != tuple(shape):
                raise ValueError("%s: shape %s, expected %s" % (n, tuple(t.shape), tuple(shape)))
            self.params[n] = t.requires_grad_(not moe_ref.is_frozen(n))
        self._rope_cache = {}
        self._seg, self._rope_pos = None, None  # packed documents of the current forward
        self.moe_layers = moe_ref.moe_layer_flags(a)
        self.pattern = mamba_ref.symbols(a)  # hybrid: one symbol per layer, else None
        self.expert_bias32 = {i: np.asarray(tensors[n], dtype=np.float32).copy()
                              for i in range(a["num_layers"])
                              for n in ["decoder.layers.%d.mlp.router.expert_bias" % i] if n in tensors}
        self.moe_records, self.moe_losses = [], []
        self.aux_grad_scale = 1.0

    def set_expert_bias(self, i, bias32):
        self.expert_bias32[i] = np.asarray(bias32, dtype=np.float32).copy()
        with torch.no_grad():
            self.params["decoder.layers.%d.mlp.router.expert_bias" % i].copy_(
                torch.as_tensor(self.expert_bias32[i].astype(np.float64)))

    # -- pieces --
    def _norm(self, x, prefix):
        """The model's normalization over the last dim of x with prefix's weight (and bias);
        also the q/k head norms (prefix ...q_layernorm.), over kv_channels."""
        a, p = self.a, self.params
        ln = "layer_norm_" if prefix + "layer_norm_weight" in p else ""  # fused into the linear
        w = p[prefix + ln + "weight"]
        if a["apply_layernorm_1p"]:
            w = w + 1
        if a["normalization"] == "LayerNorm":
            b = p[prefix + ln + "bias"]
            return F.layer_norm(x, (x.shape[-1],), w, b, a["norm_epsilon"])
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a["norm_epsilon"])
        return x * rstd * w

    def _rope(self, s):
        """cos, sin [s, rot_dim] as Megatron's RotaryEmbedding: inv_freq and the angles
        pos * inv_freq in float32, then cos/sin of those angles in the model dtype."""
        if s not in self._rope_cache:
            a = self.a
            rot = int(a["kv_channels"] * a["rotary_percent"])
            inv = 1.0 / (a["rotary_base"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
            if a["use_rope_scaling"]:
                inv = llama31_scaling(inv, a)
            ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
            ang = torch.cat([ang, ang], dim=-1).to(self.dtype)
            self._rope_cache[s] = (torch.cos(ang), torch.sin(ang))
        return self._rope_cache[s]

    def _apply_rope(self, t, cos, sin):
        """t [b, s, heads, d]: rotate_half on the first rot_dim channels."""
        rot = cos.shape[-1]
        x, rest = t[..., :rot], t[..., rot:]
        x1, x2 = x[..., : rot // 2], x[..., rot // 2:]
        if cos.dim() == 3:  # per token [b, s, rot] (packed sequences' own positions)
            c, sn = cos[:, :, None, :], sin[:, :, None, :]
        else:
            c, sn = cos[None, :, None, :], sin[None, :, None, :]
        y = x * c + torch.cat([-x2, x1], dim=-1) * sn
        return torch.cat([y, rest], dim=-1)

    def _linear(self, x, prefix, bias=True):
        p = self.params
        y = x @ p[prefix + "weight"].t()
        if bias and prefix + "bias" in p:
            y = y + p[prefix + "bias"]
        return y

    def _attention(self, x, i):
        a, p = self.a, self.params
        b, s, _ = x.shape
        nq, ng, d = a["num_attention_heads"], a["num_query_groups"], a["kv_channels"]
        r = nq // ng
        pre = "decoder.layers.%d.self_attention." % i
        qkv = self._linear(x, pre + "linear_qkv.").view(b, s, ng, r + 2, d)
        q = qkv[:, :, :, :r, :].reshape(b, s, nq, d)      # head n = g*r + j
        k = qkv[:, :, :, r, :]                             # [b, s, ng, d]
        v = qkv[:, :, :, r + 1, :]
        if a["qk_layernorm"]:  # per head over d, before RoPE (Megatron attention.py)
            q, k = self._norm(q, pre + "q_layernorm."), self._norm(k, pre + "k_layernorm.")
        if a["position_embedding_type"] == "rope":
            cos, sin = self._rope(s)
            if self._rope_pos is not None:  # THD: each token at its offset in its conversation
                cos, sin = self._rope(int(self._rope_pos.max()) + 1)
                cos, sin = cos[self._rope_pos], sin[self._rope_pos]
            q, k = self._apply_rope(q, cos, sin), self._apply_rope(k, cos, sin)
        q = q.permute(0, 2, 1, 3)                          # [b, nq, s, d]
        k = k.permute(0, 2, 1, 3).repeat_interleave(r, dim=1)  # head n uses kv head n // r
        v = v.permute(0, 2, 1, 3).repeat_interleave(r, dim=1)
        sc = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        if self._seg is not None:  # packed documents: key k of query i only from i's document start
            mask = (mask[None] | (torch.arange(s)[None, None, :] < self._seg[:, :, None]))[:, None]
        sc = sc.masked_fill(mask, float("-inf"))
        ctx = torch.softmax(sc, dim=-1) @ v               # [b, nq, s, d]
        ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, nq * d)
        return self._linear(ctx, pre + "linear_proj.")

    def _mlp(self, x, i):
        a = self.a
        pre = "decoder.layers.%d.mlp." % i
        y = self._linear(x, pre + "linear_fc1.")
        if a["swiglu"]:
            gate, up = torch.chunk(y, 2, dim=-1)
            y = F.silu(gate) * up
        elif a["openai_gelu"]:  # tanh approximation (Hendrycks & Gimpel 2016, eq. for GPT)
            y = 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y.pow(3))))
        elif a["squared_relu"]:  # megatron/core/activations.py squared_relu
            y = torch.pow(F.relu(y), 2)
        else:
            y = F.gelu(y)
        return self._linear(y, pre + "linear_fc2.")

    # -- the model --
    def forward(self, tokens, position_ids=None, seg_start=None):
        """tokens, position_ids [b, s] (int) -> logits [b, s, Vpad].  seg_start [b, s]: packed
        documents (each token's document start: attention stays inside the document, Megatron's
        THD cu_seqlens or --reset-attention-mask's mask); under --sft RoPE then takes
        position_ids (the offsets in the conversation, as the THD path), else the row's
        positions (Megatron's rotary embedding ignores position_ids)."""
        a, p = self.a, self.params
        tokens = torch.as_tensor(np.asarray(tokens)).long()
        self._seg = None if seg_start is None else torch.as_tensor(np.asarray(seg_start)).long()
        self._rope_pos = None
        if seg_start is not None and a.get("sft") and position_ids is not None:
            self._rope_pos = torch.as_tensor(np.asarray(position_ids)).long()
        x = p["embedding.word_embeddings.weight"][tokens]
        if a["position_embedding_type"] == "learned_absolute":
            if position_ids is None:
                position_ids = np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape)
            pos = torch.as_tensor(np.array(position_ids)).long()
            x = x + p["embedding.position_embeddings.weight"][pos]
        for i in range(a["num_layers"]):
            if self.pattern:
                x = self.layer(x, i)
                continue
            x = x + self._attention(self._norm(x, "decoder.layers.%d.self_attention.linear_qkv." % i), i)
            if self.moe_layers[i]:
                x = x + self._moe(x, i)
                continue
            x = x + self._mlp(self._norm(x, "decoder.layers.%d.mlp.linear_fc1." % i), i)
        x = self._norm(x, final_norm_prefix(a))
        w = p["output_layer.weight"] if a["untie_embeddings_and_output_weights"] else p["embedding.word_embeddings.weight"]
        return x @ w.t()

    def _moe(self, x, i):
        """The MoE block of layer i on the residual stream x (pre_mlp_layernorm, then the MoE)."""
        y, rec, loss = moe_ref.moe_forward(self.a, self.params, i,
                                           self._norm(x, "decoder.layers.%d.pre_mlp_layernorm." % i),
                                           self.expert_bias32.get(i), self.aux_grad_scale)
        rec["layer"] = i
        self.moe_records.append(rec)
        if loss is not None:
            self.moe_losses.append(loss)
        return y

    def layer(self, x, i):
        """Hybrid models: layer i (its pattern symbol) on the residual stream x [b, s, h]; each
        is its own pre-norm residual block: 'M' Mamba (mamba_ref.mixer), '*' self-attention only,
        '-' dense MLP only, 'E' MoE only (hidden dropout 0)."""
        c = self.pattern[i]
        p = "decoder.layers.%d." % i
        if c == "M":
            return x + mamba_ref.mixer(self.a, self.params, p + "mixer.", self._norm(x, p + "mixer.in_proj."), self._seg)
        if c == "*":
            return x + self._attention(self._norm(x, p + "self_attention.linear_qkv."), i)
        if c == "-":
            return x + self._mlp(self._norm(x, p + "mlp.linear_fc1."), i)
        return x + self._moe(x, i)

    def losses(self, tokens, labels, position_ids=None, seg_start=None):
        """-> logits [b, s, Vpad], per-token cross-entropy [b, s]."""
        logits = self.forward(tokens, position_ids, seg_start)
        lab = torch.as_tensor(np.asarray(labels)).long()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1), reduction="none")
        return logits, loss.view(lab.shape)

    def zero_grad(self):
        for t in self.params.values():
            t.grad = None

    def grads(self):
        return {n: (t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in self.params.items()}

    def frozen(self):
        return [n for n in self.params if moe_ref.is_frozen(n)]


# ---------------------------------------------------------------------------------------------
# LR schedule and optimizer

def schedule_steps(args):
    """(warmup_steps, decay_steps, wsd_decay_steps) in samples, as Megatron's
    OptimizerParamScheduler is built in training.py (iteration- or sample-based)."""
    a = normalize_args(args)
    gbs = a["global_batch_size"]
    if a["train_iters"] is not None:
        decay = (a["lr_decay_iters"] if a["lr_decay_iters"] is not None else a["train_iters"]) * gbs
        wsd = (a["lr_wsd_decay_iters"] or 0) * gbs
        warm = a["lr_warmup_iters"] * gbs
    else:
        decay = a["lr_decay_samples"] if a["lr_decay_samples"] is not None else a["train_samples"]
        wsd = a["lr_wsd_decay_samples"] or 0
        warm = a["lr_warmup_samples"]
    if a["lr_warmup_fraction"] is not None:
        warm = a["lr_warmup_fraction"] * decay
    return warm, decay, wsd


def lr_at(args, n):
    """Learning rate after n samples (megatron/core/optimizer_param_scheduler.py)."""
    a = normalize_args(args)
    warm, decay, wsd = schedule_steps(a)
    mx, mn, init = float(a["lr"]), float(a["min_lr"]), float(a["lr_warmup_init"])
    style = a["lr_decay_style"]
    if warm > 0 and n <= warm:
        return init + (mx - init) * float(n) / float(warm)
    if style == "constant":
        return mx
    if n > decay:
        return mn
    if style == "inverse-square-root":
        return max(mn, mx * math.sqrt(max(warm, 1)) / math.sqrt(max(n, 1)))
    ratio = float(n - warm) / float(decay - warm)
    if style == "linear":
        c = 1.0 - ratio
    elif style == "cosine":
        c = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    elif style == "WSD":
        start = decay - wsd
        if n <= start:
            c = 1.0
        else:
            r = float(n - start) / float(wsd)
            c = {"exponential": lambda: 2.0 * math.pow(0.5, r) - 1.0, "linear": lambda: 1.0 - r,
                 "cosine": lambda: 0.5 * (math.cos(math.pi * r) + 1.0),
                 "minus_sqrt": lambda: 1.0 - math.sqrt(r)}[a["lr_wsd_decay_style"]]()
    else:
        raise ValueError("lr_decay_style %r not supported" % style)
    return mn + c * (mx - mn)


class Trainer:
    """Megatron iterations on a GPTRef: per micro-batch loss sum(loss*mask)/max(sum(mask),1)/M,
    backward summed over the M micro-batches, global-L2-norm clipping, AdamW with no weight
    decay on biases and 1-D tensors, lr of iteration k at n = (k-1)*GBS samples.
    MoE: each micro-batch's aux and z losses (coeff * value) enter the backward with scale
    aux_grad_scale (default loss_scale / M = 1 / M, MoEAuxLossAutoScaler) and not the lm loss;
    the iteration reports load_balancing_loss (or seq_load_balancing_loss) and z_loss, the
    unscaled values summed over micro-batches / M, summed over MoE layers / their number; the
    expert bias is updated after the iteration from the tokens per expert of all its micro-batches."""

    def __init__(self, model, aux_grad_scale=None):
        self.m, self.a = model, model.a
        a = self.a
        self.aux_grad_scale = 1.0 / a["num_microbatches"] if aux_grad_scale is None else aux_grad_scale
        frozen = set(model.frozen())
        dec = [t for n, t in model.params.items() if n not in model.no_decay and n not in frozen]
        nod = [t for n, t in model.params.items() if n in model.no_decay and n not in frozen]
        groups = [{"params": dec, "weight_decay": a["weight_decay"]}]
        if nod:
            groups.append({"params": nod, "weight_decay": 0.0})
        self.opt = torch.optim.AdamW(groups, lr=float(a["lr"]), betas=(a["adam_beta1"], a["adam_beta2"]),
                                     eps=a["adam_eps"])
        self.iteration = 0

    def grads_for(self, tokens, labels, loss_mask, position_ids=None, keep_first=False, seg_start=None):
        """Forward/backward of one global batch ([GBS, s] arrays, sample-major), accumulating
        grads.  Returns (num, den, first micro-batch (logits, loss) detached or None); the MoE
        records of all micro-batches are left in self.moe_records ([micro-batch][MoE layer])."""
        a, m = self.a, self.m
        mbs, M = a["micro_batch_size"], a["num_microbatches"]
        tokens, labels = np.asarray(tokens), np.asarray(labels)
        mask_all = torch.as_tensor(np.asarray(loss_mask)).to(m.dtype)
        num = den = 0.0
        first = None
        m.zero_grad()
        m.aux_grad_scale = self.aux_grad_scale
        self.moe_records = []
        for j in range(M):
            sl = slice(j * mbs, (j + 1) * mbs)
            pos = None if position_ids is None else np.asarray(position_ids)[sl]
            seg = None if seg_start is None else np.asarray(seg_start)[sl]
            m.moe_records, m.moe_losses = [], []
            logits, loss = m.losses(tokens[sl], labels[sl], pos, seg)
            mask = mask_all[sl]
            lsum, ntok = (loss * mask).sum(), mask.sum()
            obj = lsum / torch.clamp(ntok, min=1.0) / M
            for aux in m.moe_losses:  # MoEAuxLossAutoScaler: gradient scale aux_grad_scale
                obj = obj + aux
            obj.backward()
            self.moe_records.append(m.moe_records)
            m.moe_records, m.moe_losses = [], []
            num += float(lsum.detach())
            den += float(ntok)
            if keep_first and j == 0:
                first = (logits.detach(), loss.detach())
            del logits, loss
        return num, den, first

    def moe_report(self):
        """{tracker name: value} of the iteration (Megatron's MoEMetricsTracker.report) and the
        tokens per expert summed over its micro-batches {layer: counts}."""
        a = self.a
        out, counts = {}, {}
        recs = [r for mb in self.moe_records for r in mb]
        if not recs:
            return out, counts
        nmoe = sum(self.m.moe_layers)
        M = a["num_microbatches"]
        name = moe_ref.lb_name(a)
        if name:
            out[name] = sum(r["aux"] for r in recs) / M / nmoe
        if a["moe_z_loss_coeff"]:
            out["z_loss"] = sum(r["z"] for r in recs) / M / nmoe
        for r in recs:
            counts[r["layer"]] = counts.get(r["layer"], 0) + r["counts"]
        return out, counts

    def update_expert_bias(self, counts, sign=1.0):
        """Once per global batch (finalize_model_grads): every MoE layer's expert bias."""
        a = self.a
        for i in sorted(self.m.expert_bias32):
            if i in counts:
                rate = a["moe_router_bias_update_rate"] * sign
                self.m.set_expert_bias(i, moe_ref.update_expert_bias(self.m.expert_bias32[i], counts[i], rate))

    def grad_norm(self):
        # Sum of squares accumulated in float64: torch 1.13's CPU torch.norm of a large float32
        # tensor is off by ~1e-4 relative (50304x64 embedding gradient), far above fp32 rounding.
        sq = sum(float(t.grad.double().pow(2).sum()) for t in self.m.params.values() if t.grad is not None)
        return math.sqrt(sq)

    def step(self, tokens, labels, loss_mask, position_ids=None, keep=False, seg_start=None):
        """One iteration; returns dict(lm_loss, grad_norm, lr[, grads, logits, loss])."""
        a = self.a
        self.iteration += 1
        num, den, first = self.grads_for(tokens, labels, loss_mask, position_ids, keep_first=keep, seg_start=seg_start)
        out = {"lm_loss": num / den if den > 0 else float("nan")}
        out["moe"], counts = self.moe_report()
        if keep and self.moe_records:
            out["moe_first"] = self.moe_records[0]
        if a["moe_router_enable_expert_bias"]:
            self.update_expert_bias(counts, getattr(self, "bias_sign", 1.0))
        if keep:
            out["grads"] = {n: g.detach().clone() for n, g in self.m.grads().items()}
            out["logits"], out["loss"] = first
        norm = self.grad_norm()
        out["grad_norm"] = norm
        if a["clip_grad"] and a["clip_grad"] > 0:
            coeff = a["clip_grad"] / (norm + 1e-6)
            if coeff < 1.0:
                with torch.no_grad():
                    for t in self.m.params.values():
                        if t.grad is not None:
                            t.grad.mul_(coeff)
        lr = lr_at(a, (self.iteration - 1) * a["global_batch_size"])
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        out["lr"] = lr
        out["lr_logged"] = lr_at(a, self.iteration * a["global_batch_size"])
        return out


# ---------------------------------------------------------------------------------------------
# the debug dump

def _json_attr(f):
    # the brief named the root attribute "json"; mgt-train writes "metadata" (as its checkpoints)
    key = "json" if "json" in f.attrs else "metadata"
    v = f.attrs[key]
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    if not isinstance(v, str):  # an array of one string
        v = np.asarray(v).ravel()[0]
        v = v.decode("utf-8") if isinstance(v, bytes) else str(v)
    return json.loads(v)


def read_dump(path):
    """{'meta': root JSON, 'args', 'params', 'grads', 'batch', 'iter1', 'train', 'final'} of numpy
    arrays (iter1 keys are paths below iter1/, e.g. 'moe/layer_0/probs')."""
    import h5py
    out = {"params": {}, "grads": {}, "batch": {}, "iter1": {}, "train": {}, "final": {}}
    with h5py.File(path, "r") as f:
        out["meta"] = _json_attr(f)
        out["args"] = out["meta"].get("args", out["meta"])

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                top, _, rest = name.partition("/")
                if top in out and rest:
                    out[top][rest] = obj[()]
        f.visititems(visit)
    return out


def write_dump(path, args, params, batch, iter1, train, grads, extra=None):
    """Write a dump in the layout `mgt-train --debug-dump` promises:
      attr json {"args": {...}}; params/<name>, grads/<name> float32 (global shapes);
      batch/{tokens,labels,position_ids} int32 and batch/loss_mask float32 [iters, GBS, s];
      iter1/logits [mbs, s, Vpad], iter1/loss [mbs, s] float32 (first micro-batch);
      train/{lm_loss,lr,grad_norm} float64 [iters];
    with MoE (moe_dump_datasets): iter1/moe/layer_N/{experts int32, probs float32} [mbs, s, k],
      train/{load_balancing_loss|seq_load_balancing_loss, z_loss} float64 [iters],
      final/decoder.layers.N.mlp.router.expert_bias float32 [E].
    extra: {dataset path: array} written as given."""
    import h5py
    with h5py.File(path, "w") as f:
        f.attrs["json"] = json.dumps({"args": args})
        for n, x in params.items():
            f.create_dataset("params/" + n, data=np.asarray(x, dtype=np.float32))
        for n, x in grads.items():
            f.create_dataset("grads/" + n, data=np.asarray(x, dtype=np.float32))
        for k in ("tokens", "labels", "position_ids"):
            f.create_dataset("batch/" + k, data=np.asarray(batch[k], dtype=np.int32))
        f.create_dataset("batch/loss_mask", data=np.asarray(batch["loss_mask"], dtype=np.float32))
        f.create_dataset("iter1/logits", data=np.asarray(iter1["logits"], dtype=np.float32))
        f.create_dataset("iter1/loss", data=np.asarray(iter1["loss"], dtype=np.float32))
        for k in ("lm_loss", "lr", "grad_norm"):
            f.create_dataset("train/" + k, data=np.asarray(train[k], dtype=np.float64))
        for k, x in (extra or {}).items():
            f.create_dataset(k, data=x)


def moe_dump_datasets(first_records, hist, model):
    """The MoE datasets of a dump {path: array} from iteration 1's first micro-batch records, the
    per-iteration reports hist {name: [iters]} and the model after the run (expert bias)."""
    out = {}
    for r in first_records:
        out["iter1/moe/layer_%d/experts" % r["layer"]] = np.asarray(r["experts"], dtype=np.int32)
        out["iter1/moe/layer_%d/probs" % r["layer"]] = np.asarray(r["probs"], dtype=np.float32)
    for k, v in hist.items():
        out["train/" + k] = np.asarray(v, dtype=np.float64)
    for i, b in sorted(model.expert_bias32.items()):
        out["final/decoder.layers.%d.mlp.router.expert_bias" % i] = np.asarray(b, dtype=np.float32)
    return out


def random_batches(args, iters, seed=1, mask_fraction=0.1, vocab=None):
    """Random token data [iters, GBS, s]: labels = next token, some loss_mask zeros."""
    a = normalize_args(args)
    g = np.random.default_rng(seed)
    gbs, s = a["global_batch_size"], a["seq_length"]
    V = vocab or a["vocab_size"] or a["padded_vocab_size"]
    seq = g.integers(0, V, size=(iters, gbs, s + 1))
    mask = (g.random((iters, gbs, s)) >= mask_fraction).astype(np.float32)
    pos = np.broadcast_to(np.arange(s), (iters, gbs, s)).copy()
    return {"tokens": seq[..., :-1].astype(np.int32), "labels": seq[..., 1:].astype(np.int32),
            "loss_mask": mask, "position_ids": pos.astype(np.int32)}


def fake_dump(path, args, iters=10, dtype=torch.float32, seed=1234, perturb=None,
              lr_convention="used"):
    """A dump produced by this reference (standing in for mgt-train) to test parity.py.
    perturb: None, 'grads' (one grad tensor off by 1e-3), 'logits' (1e-3), 'loss-iter' (loss of the
    last iteration off by 1e-3), 'lr' (lr of iteration 3 off by 1%), 'qkv-layout' (the model reads
    QKV rows as [Q;K;V] blocks instead of group-interleaved; an mgt layout bug); with MoE:
    'moe-prob-order' (iter1 probs written in top-k order beside experts in ascending order),
    'moe-aux-scale' (aux and z losses back-propagated with scale 1 instead of 1/M),
    'moe-lb-report' (the reported load-balancing loss not divided by M),
    'moe-bias-sign' (the expert bias moved towards the loaded experts); hybrid models with Mamba
    layers: 'mamba-conv-direction' (the causal conv's taps reversed: w[c, 0] on the current token),
    'mamba-zx-order' (in_proj's z and x blocks swapped: the gate reads x's rows)."""
    a = normalize_args(args)
    params = init_params(a, seed, perturb=0.02)
    batch = random_batches(a, iters, seed + 1)
    init = {n: x.copy() for n, x in params.items()}
    if perturb == "qkv-layout":  # emulate a model that ignores group interleaving
        nq, ng, d = a["num_attention_heads"], a["num_query_groups"], a["kv_channels"]
        r = nq // ng
        for n in list(params):
            if n.endswith("linear_qkv.weight") or n.endswith("linear_qkv.bias"):
                x = params[n]
                blk = x.reshape(nq + 2 * ng, d, *x.shape[1:])  # read as [Q; K; V] blocks
                qs, ks, vs = blk[:nq], blk[nq:nq + ng], blk[nq + ng:]
                il = []
                for g_ in range(ng):
                    il += [qs[g_ * r:(g_ + 1) * r], ks[g_:g_ + 1], vs[g_:g_ + 1]]
                params[n] = np.concatenate(il).reshape(x.shape)
    if perturb == "mamba-conv-direction":  # a model whose conv tap k=0 multiplies the current token
        for n in list(params):
            if n.endswith("mixer.conv1d_weight"):
                params[n] = np.ascontiguousarray(params[n][..., ::-1])
    elif perturb == "mamba-zx-order":  # a model that reads in_proj's first two blocks as [x | z]
        DI = mamba_ref.sizes(a)[1] if mamba_ref.symbols(a) and "M" in mamba_ref.symbols(a) else 0
        for n in list(params):
            if n.endswith("mixer.in_proj.weight"):
                w = params[n]
                params[n] = np.concatenate([w[DI:2 * DI], w[:DI], w[2 * DI:]])
    model = GPTRef(a, params, dtype)
    tr = Trainer(model, aux_grad_scale=1.0 if perturb == "moe-aux-scale" else None)
    if perturb == "moe-bias-sign":
        tr.bias_sign = -1.0
    hist = {"lm_loss": [], "lr": [], "grad_norm": []}
    moe_hist = {}
    first = None
    for k in range(iters):
        o = tr.step(batch["tokens"][k], batch["labels"][k], batch["loss_mask"][k],
                    batch["position_ids"][k], keep=(k == 0))
        if k == 0:
            first = o
        hist["lm_loss"].append(o["lm_loss"])
        hist["lr"].append(o["lr"] if lr_convention == "used" else o["lr_logged"])
        hist["grad_norm"].append(o["grad_norm"])
        for n, v in o["moe"].items():
            moe_hist.setdefault(n, []).append(v * (a["num_microbatches"] if perturb == "moe-lb-report"
                                                    and n.endswith("load_balancing_loss") else 1))
    grads = {n: g.numpy() for n, g in first["grads"].items()}
    logits, loss = first["logits"].numpy(), first["loss"].numpy()
    if perturb == "grads":
        live = sorted(n for n in grads if not moe_ref.is_frozen(n))
        n = live[len(live) // 2]
        grads[n] = grads[n] * (1 + 1e-3)
    elif perturb == "logits":
        logits = logits * (1 + 1e-3)
    elif perturb == "loss-iter":
        hist["lm_loss"][-1] *= 1 + 1e-3
    elif perturb == "lr":
        hist["lr"][min(2, iters - 1)] *= 1.01
    recs = first.get("moe_first", [])
    if perturb == "moe-prob-order":  # probs in top-k order (descending prob), experts ascending
        for r in recs:
            r["probs"] = -np.sort(-r["probs"], axis=-1)
    a_out = {k: v for k, v in a.items() if k != "moe_layers"}
    for n in model.frozen():  # mgt has no gradient for the expert bias; its buffer holds zeros
        grads[n] = np.zeros_like(grads[n])
    write_dump(path, a_out, init, batch, {"logits": logits, "loss": loss}, hist, grads,
               moe_dump_datasets(recs, moe_hist, model))


# ---------------------------------------------------------------------------------------------
# an independent, loop-by-loop forward (numpy float64) to check GPTRef against

def naive_logits(args, P, tokens):
    """Logits [b, s, Vpad] computed token by token and head by head from the section 8 / 7.2 /
    7.3 text, sharing no code with GPTRef (used by `mgt_ref.py selfcheck`).  MoE layers use
    moe_ref.naive_moe token by token, so only dropless routing (no capacity factor)."""
    a = normalize_args(args)
    if mamba_ref.symbols(a):
        raise ValueError("naive_logits: GPT layers only (hybrid layers: mamba_ref.naive_layer)")
    moe = moe_ref.moe_layer_flags(a)
    if any(moe) and a["moe_expert_capacity_factor"] is not None:
        raise ValueError("naive_logits: token dropping couples the tokens; check it with moe_ref.selfcheck")
    a_fwd = dict(a, moe_aux_loss_coeff=0.0, moe_z_loss_coeff=None)  # forward only
    P = {n: np.asarray(x, dtype=np.float64) for n, x in P.items()}
    h, L = a["hidden_size"], a["num_layers"]
    nq, ng, d, f = a["num_attention_heads"], a["num_query_groups"], a["kv_channels"], a["ffn_hidden_size"]
    r = nq // ng
    eps = a["norm_epsilon"]
    rot = int(d * a["rotary_percent"])
    half = rot // 2
    inv = [np.float32(1.0) / np.float32(np.float32(a["rotary_base"]) ** (np.float32(2 * k) / np.float32(rot)))
           for k in range(half)]
    if a["use_rope_scaling"]:  # the three bands, scalar by scalar in fp32
        f32 = np.float32
        fac, lo, hi = f32(a["rope_scaling_factor"]), a["rope_scaling_low_freq_factor"], a["rope_scaling_high_freq_factor"]
        orig = a["rope_scaling_original_max_position_embeddings"]
        out = []
        for fq in inv:
            wl = f32(f32(1.0) / fq) * f32(2 * math.pi)
            if wl > f32(orig / lo):
                out.append(f32(fq / fac))
            elif wl < f32(orig / hi):
                out.append(fq)
            else:
                sm = f32(f32(f32(f32(1.0) / wl) * f32(orig)) - f32(lo)) / f32(hi - lo)
                out.append(f32(f32(f32(f32(1.0) - sm) * fq) / fac) + f32(sm * fq))
        inv = out

    def norm(v, w, bname):
        n = len(v)
        if a["normalization"] == "LayerNorm":
            mu = sum(v) / n
            var = sum((x - mu) ** 2 for x in v) / n
            return [(v[c] - mu) / math.sqrt(var + eps) * w[c] + P[bname][c] for c in range(n)]
        ms = sum(x * x for x in v) / n
        return [v[c] / math.sqrt(ms + eps) * w[c] for c in range(n)]

    def lin(name, v):
        y = P[name + "weight"] @ np.array(v)
        if name + "bias" in P:
            y = y + P[name + "bias"]
        return list(y)

    def rope(vec, t):
        out = list(vec)
        for k in range(half):
            th = float(np.float32(t) * inv[k])
            x1, x2 = vec[k], vec[k + half]
            out[k] = x1 * math.cos(th) - x2 * math.sin(th)
            out[k + half] = x2 * math.cos(th) + x1 * math.sin(th)
        return out

    B, S = len(tokens), len(tokens[0])
    out = np.zeros((B, S, P["embedding.word_embeddings.weight"].shape[0]))
    for b in range(B):
        xs = []
        for t in range(S):
            v = list(P["embedding.word_embeddings.weight"][tokens[b][t]])
            if a["position_embedding_type"] == "learned_absolute":
                v = [v[c] + P["embedding.position_embeddings.weight"][t][c] for c in range(h)]
            xs.append(v)
        for i in range(L):
            pa = "decoder.layers.%d.self_attention." % i
            pm = "decoder.layers.%d.mlp." % i
            q, k, vv = {}, {}, {}
            for t in range(S):
                y = lin(pa + "linear_qkv.", norm(xs[t], P[pa + "linear_qkv.layer_norm_weight"],
                                                pa + "linear_qkv.layer_norm_bias"))
                for n in range(nq):
                    g, j = n // r, n % r
                    q[t, n] = y[g * (r + 2) * d + j * d: g * (r + 2) * d + (j + 1) * d]
                for g in range(ng):
                    k[t, g] = y[g * (r + 2) * d + r * d: g * (r + 2) * d + (r + 1) * d]
                    vv[t, g] = y[g * (r + 2) * d + (r + 1) * d: g * (r + 2) * d + (r + 2) * d]
                if a["qk_layernorm"]:
                    for n in range(nq):
                        q[t, n] = norm(q[t, n], P[pa + "q_layernorm.weight"], pa + "q_layernorm.bias")
                    for g in range(ng):
                        k[t, g] = norm(k[t, g], P[pa + "k_layernorm.weight"], pa + "k_layernorm.bias")
                if a["position_embedding_type"] == "rope":
                    for n in range(nq):
                        q[t, n] = rope(q[t, n], t)
                    for g in range(ng):
                        k[t, g] = rope(k[t, g], t)
            new = []
            for t in range(S):
                ctx = []
                for n in range(nq):
                    g = n // r
                    sc = [sum(q[t, n][c] * k[u, g][c] for c in range(d)) / math.sqrt(d) for u in range(t + 1)]
                    m = max(sc)
                    e = [math.exp(x - m) for x in sc]
                    z = sum(e)
                    ctx += [sum(e[u] / z * vv[u, g][c] for u in range(t + 1)) for c in range(d)]
                o = lin(pa + "linear_proj.", ctx)
                x1 = [xs[t][c] + o[c] for c in range(h)]
                if moe[i]:
                    pl = "decoder.layers.%d." % i
                    xn = norm(x1, P[pl + "pre_mlp_layernorm.weight"], pl + "pre_mlp_layernorm.bias")
                    eb = P.get(pm + "router.expert_bias")
                    z2 = moe_ref.naive_moe(a_fwd, P, i, [xn], None if eb is None else eb.astype(np.float32))[0][0]
                    new.append([x1[c] + z2[c] for c in range(h)])
                    continue
                y = lin(pm + "linear_fc1.", norm(x1, P[pm + "linear_fc1.layer_norm_weight"],
                                                 pm + "linear_fc1.layer_norm_bias"))
                if a["swiglu"]:
                    y = [y[c] / (1 + math.exp(-y[c])) * y[f + c] for c in range(f)]
                elif a["openai_gelu"]:
                    y = [0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))) for x in y]
                elif a["squared_relu"]:
                    y = [max(x, 0.0) ** 2 for x in y]
                else:
                    y = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in y]
                z2 = lin(pm + "linear_fc2.", y)
                new.append([x1[c] + z2[c] for c in range(h)])
            xs = new
        W = P["output_layer.weight"] if a["untie_embeddings_and_output_weights"] else P["embedding.word_embeddings.weight"]
        for t in range(S):
            out[b, t] = W @ np.array(norm(xs[t], P["decoder.final_layernorm.weight"], "decoder.final_layernorm.bias"))
    return out


SELFCHECK_VARIANTS = {
    "gpt2": {},
    "gpt2-qkv-bias-nobias": dict(add_bias_linear=False, add_qkv_bias=True),
    "llama": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm", swiglu=True,
                  position_embedding_type="rope", add_bias_linear=False,
                  untie_embeddings_and_output_weights=True, ffn_hidden_size=24),
    "mqa-rope-half": dict(group_query_attention=True, num_query_groups=1, position_embedding_type="rope",
                          rotary_percent=0.5, rotary_base=100.0),
    "mha-rope-swiglu-layernorm": dict(position_embedding_type="rope", swiglu=True, ffn_hidden_size=20),
    "qwen3-qk-rmsnorm": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm", swiglu=True,
                             position_embedding_type="rope", add_bias_linear=False, qk_layernorm=True,
                             norm_epsilon=1e-6, ffn_hidden_size=24),
    "gpt2-qk-layernorm-openai-gelu": dict(qk_layernorm=True, openai_gelu=True),
    "llama31-rope-scaling": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm",
                                 swiglu=True, position_embedding_type="rope", add_bias_linear=False,
                                 kv_channels=16, hidden_size=16, use_rope_scaling=True,
                                 rope_scaling_original_max_position_embeddings=64, rotary_base=500000.0,
                                 ffn_hidden_size=24),
    # whole models with MoE layers (dropless; capacity is checked layer by layer in moe_ref)
    "moe-llama-softmax-top2-freq2": dict(group_query_attention=True, num_query_groups=2, normalization="RMSNorm",
                                         swiglu=True, position_embedding_type="rope", add_bias_linear=False,
                                         untie_embeddings_and_output_weights=True, ffn_hidden_size=24,
                                         num_layers=3, num_experts=4, moe_router_topk=2, moe_layer_freq=2,
                                         moe_ffn_hidden_size=12),
    "moe-gpt2-presoftmax-shared-gate": dict(num_experts=4, moe_router_topk=2, moe_router_pre_softmax=True,
                                            moe_shared_expert_intermediate_size=20, moe_shared_expert_gate=True,
                                            moe_layer_pattern="01"),
    "moe-deepseek-sigmoid-bias-groups": dict(normalization="RMSNorm", swiglu=True, position_embedding_type="rope",
                                             add_bias_linear=False, ffn_hidden_size=24, num_experts=16,
                                             moe_router_topk=4, moe_router_score_function="sigmoid",
                                             moe_router_enable_expert_bias=True, moe_router_num_groups=4,
                                             moe_router_group_topk=2, moe_router_topk_scaling_factor=2.5,
                                             moe_shared_expert_intermediate_size=16, moe_ffn_hidden_size=8),
}


def selfcheck():
    """GPTRef (float64) against naive_logits on tiny shapes, and lr_at against hand values."""
    bad = 0
    for name, extra in SELFCHECK_VARIANTS.items():
        a = dict(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=6,
                 max_position_embeddings=8, padded_vocab_size=32, micro_batch_size=2,
                 global_batch_size=2, init_method_std=0.3)
        a.update(extra)
        P = init_params(a, seed=7, perturb=0.2)
        tok = np.random.default_rng(3).integers(0, 32, size=(2, 6))
        ref = GPTRef(a, P, torch.float64).forward(tok).detach().numpy()
        nv = naive_logits(a, P, tok)
        e = np.abs(ref - nv).max() / np.abs(nv).max()
        ok = e < 1e-12
        bad += not ok
        print("selfcheck %-28s max rel diff %.1e  %s" % (name, e, "ok" if ok else "FAIL"))
    base = dict(lr=1.0, min_lr=0.1, lr_warmup_iters=2, train_iters=10, global_batch_size=4,
                micro_batch_size=4, num_layers=1, hidden_size=4, num_attention_heads=1)
    cases = [({}, 0, 0.0), ({}, 4, 0.5), ({}, 8, 1.0), ({}, 40, 0.1), ({}, 24, 0.1 + 0.9 * 0.5),
             ({"lr_decay_style": "cosine"}, 24, 0.1 + 0.9 * 0.5), ({"lr_decay_style": "cosine"}, 12, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 8))),
             ({"lr_decay_style": "constant"}, 36, 1.0), ({"lr_decay_style": "constant"}, 44, 1.0),
             ({"lr_decay_style": "inverse-square-root"}, 32, math.sqrt(8) / math.sqrt(32)),
             ({"lr_decay_style": "WSD", "lr_wsd_decay_iters": 4}, 20, 1.0),
             ({"lr_decay_style": "WSD", "lr_wsd_decay_iters": 4, "lr_wsd_decay_style": "linear"}, 32, 0.1 + 0.9 * 0.5),
             ({"lr_decay_style": "WSD", "lr_wsd_decay_iters": 4}, 40, 0.1),
             ({"lr_warmup_init": 0.2}, 4, 0.6), ({"lr_decay_iters": 6}, 28, 0.1)]
    for extra, n, want in cases:
        got = lr_at(dict(base, **extra), n)
        ok = abs(got - want) < 1e-12
        bad += not ok
        if not ok:
            print("selfcheck lr %s n=%d: got %r, want %r  FAIL" % (extra, n, got, want))
    print("selfcheck lr schedule: %d cases %s" % (len(cases), "ok" if not bad else "(see above)"))
    bad += moe_ref.selfcheck(sys.modules[__name__])
    bad += mamba_ref.selfcheck(sys.modules[__name__])
    return 1 if bad else 0


def load_preset(name):
    """Model args from a JSON file, share/mgt/models/NAME.json, or the built-in PRESETS (in that
    order); keys starting with '_' are dropped and the GPT-2 vocabulary is assumed when the
    preset names none."""
    import os
    share = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "share", "mgt", "models")
    for path in (name, os.path.join(share, name + ".json")):
        if os.path.isfile(path):
            with open(path) as fh:
                args = {k: v for k, v in json.load(fh).items() if not k.startswith("_")}
            break
    else:
        if name not in PRESETS:
            raise SystemExit("mgt_ref.py: error: no preset %r" % name)
        args = dict(PRESETS[name])
    if not args.get("padded_vocab_size") and not args.get("vocab_size"):
        args["vocab_size"] = 50257
    return args


def _parse_value(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def main(argv):
    ap = argparse.ArgumentParser(prog="mgt_ref.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    fd = sub.add_parser("fake-dump", help="write a synthetic debug dump from this reference")
    fd.add_argument("out")
    fd.add_argument("--preset", default="tiny-gpt2", help="|".join(PRESETS) + " or a JSON file of args")
    fd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override an argument (JSON value), e.g. --set swiglu=true")
    fd.add_argument("--iters", type=int, default=10)
    fd.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    fd.add_argument("--seed", type=int, default=1234)
    fd.add_argument("--perturb", choices=["grads", "logits", "loss-iter", "lr", "qkv-layout", "moe-prob-order",
                                          "moe-aux-scale", "moe-lb-report", "moe-bias-sign",
                                          "mamba-conv-direction", "mamba-zx-order"])
    fd.add_argument("--lr-convention", choices=["used", "logged"], default="used")
    sub.add_parser("selfcheck", help="check GPTRef against a loop-by-loop forward and lr_at by hand")
    o = ap.parse_args(argv)
    if o.cmd == "selfcheck":
        return selfcheck()
    args = load_preset(o.preset)
    args.update(dict(micro_batch_size=2, global_batch_size=4, train_iters=o.iters, lr=1e-3,
                     lr_warmup_iters=2, lr_decay_style="cosine", min_lr=1e-4,
                     hidden_dropout=0.0, attention_dropout=0.0))
    for kv in o.set:
        k, _, v = kv.partition("=")
        args[k.replace("-", "_")] = _parse_value(v)
    torch.manual_seed(o.seed)
    fake_dump(o.out, args, o.iters, getattr(torch, o.dtype), o.seed, o.perturb, o.lr_convention)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
