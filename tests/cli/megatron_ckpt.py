#!/usr/bin/python3
"""megatron_ckpt.py: test-time fixtures for issue 49 (Megatron-LM checkpoints).

Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy, h5py).

  to-megatron   --mgt SAVE --out DIR --format torch|torch_dist|fsdp_dtensor --tp T --pp P
                [--vp V] [--ep E] [--dp D] [--dist-opt] [--bf16|--fp16]
                [--local-spec] [--no-optim] [--release] [--bucket-size N]
                [--common-in-dcp]
      Write the mgt checkpoint SAVE (latest iteration) as Megatron-Core's
      GPTModel would have saved it with that layout (fsdp_dtensor: Megatron-FSDP
      over --dp ranks, uneven dim-0 row chunks; megatron_ckpt.md A3).
  from-megatron --dir DIR --out FILE.npz [--iteration N]
      Independent reader: every model tensor under its global Megatron-Core
      name and shape (global layer indices; experts stacked [E, ...] under
      mgt's name ...mlp.experts.linear_fc{1,2}.weight), the Adam moments and
      fp32 main params as optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<name>,
      and the scalars in FILE.json.
  selftest [--keep DIR]
      Trains tiny presets with bin/mgt-train, round-trips them through several
      layouts and the three formats, and checks bit equality.

Versions followed: the layout of Megatron-LM HEAD d98e8a64ddf3 (2026-08-22,
megatron-core 0.19-dev) and TransformerEngine d0067d0 (2026-08-22); the
torch_dist .metadata classes of PyTorch >= 2.4 torch.distributed.checkpoint
(Metadata with storage_meta and version fields left None; see torchdist_*).
The legacy files are written with torch 1.13's torch.save (zip, protocol 2).

All layout facts used, with their source (MLM = NVIDIA/Megatron-LM, TE =
NVIDIA/TransformerEngine, PT = pytorch/pytorch), are in
tests/cli/megatron_ckpt.md; each function below also names its source.

MODEL PARAMETER ORDER (Megatron-Core GPTModel, module registration order, which
is named_parameters() order; it decides optimizer state ids and the
distributed optimizer's buffer layout):
  GPTModel.__init__ (MLM models/gpt/gpt_model.py): embedding, decoder, output_layer
    embedding (LanguageModelEmbedding): word_embeddings.weight, position_embeddings.weight
        (first stage only: pp_rank 0 and VPP chunk 0)
    decoder (TransformerBlock, transformer_block.py): layers.0..n-1, final_layernorm
        (final_layernorm on the last stage only)
      TransformerLayer.__init__ (transformer_layer.py): input_layernorm,
        self_attention, pre_cross_attn_layernorm, cross_attention, pre_mlp_layernorm, mlp
        (TE spec: input_layernorm and pre_mlp_layernorm of dense layers are IdentityOp,
         gpt_layer_specs.py; MoE layers keep pre_mlp_layernorm = TENorm)
      Attention.__init__ (attention.py): core_attention (no params), linear_proj;
      SelfAttention.__init__: linear_qkv, q_layernorm, k_layernorm
      TE LayerNormLinear.__init__ (TE pytorch/module/layernorm_linear.py):
        layer_norm_weight, layer_norm_bias, weight, bias
      MLP.__init__ (mlp.py): linear_fc1, linear_fc2 (each weight, bias)
      MoELayer.__init__ (moe/moe_layer.py): router (weight, bias; moe/router.py),
        experts (SequentialMLP.local_experts.j, moe/experts.py), shared_experts
    output_layer.weight: last stage, if untied or (tied and pp > 1)
        (gpt_model.py: skip_weight_param_allocation = pre_process and tied)
  So one TE-spec layer is:
    self_attention.linear_proj.weight, .linear_proj.bias,
    self_attention.linear_qkv.layer_norm_weight, .layer_norm_bias, .weight, .bias,
    mlp.linear_fc1.layer_norm_weight, .layer_norm_bias, .weight, .bias,
    mlp.linear_fc2.weight, .bias
  and a local-spec layer:
    input_layernorm.weight, .bias, self_attention.linear_proj.weight, .bias,
    self_attention.linear_qkv.weight, .bias, pre_mlp_layernorm.weight, .bias,
    mlp.linear_fc1.weight, .bias, mlp.linear_fc2.weight, .bias
  A MoE layer replaces the mlp part by
    pre_mlp_layernorm.weight, .bias, mlp.router.weight,
    mlp.experts.local_experts.j.linear_fc1.weight, .bias, .linear_fc2.weight, .bias (j = 0..)
"""

import argparse
import io
import json
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import torch

# ----------------------------------------------------------------------------
# mgt side


def load_mgt(save):
    """Read an mgt checkpoint: SAVE/latest_checkpointed_iteration.txt names the
    iteration; iter_%07d/model.h5 holds one dataset per tensor (fp32 master
    weights and optimizer.state.exp_avg/exp_avg_sq.<name>); metadata.json the
    scalars."""
    import h5py
    with open(os.path.join(save, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read().strip())
    d = os.path.join(save, "iter_%07d" % it)
    with open(os.path.join(d, "metadata.json")) as f:
        meta = json.load(f)
    params, m1, m2 = OrderedDict(), {}, {}
    with h5py.File(os.path.join(d, "model.h5"), "r") as h:
        for k in h.keys():
            a = np.asarray(h[k][()], dtype=np.float32)
            if k.startswith("optimizer.state.exp_avg_sq."):
                m2[k[len("optimizer.state.exp_avg_sq."):]] = a
            elif k.startswith("optimizer.state.exp_avg."):
                m1[k[len("optimizer.state.exp_avg."):]] = a
            elif not k.startswith("optimizer."):
                params[k] = a
    return dict(iteration=it, meta=meta, params=params, exp_avg=m1, exp_avg_sq=m2)


# ----------------------------------------------------------------------------
# Model description, shared by the writer and the reader (these are the facts).


@dataclass
class Model:
    L: int
    tied: bool
    swiglu: bool
    E: int  # 0 = dense
    moe_layer_freq: int


def model_from_args(a):
    g = a.get if isinstance(a, dict) else (lambda k, d=None: getattr(a, k, d))
    E = g("num_experts") or 0
    freq = g("moe_layer_freq", 1) or 1
    if not isinstance(freq, int):
        raise SystemExit("moe_layer_freq patterns are not supported here")
    return Model(L=g("num_layers"), tied=not g("untie_embeddings_and_output_weights"),
                 swiglu=bool(g("swiglu")), E=E, moe_layer_freq=freq)


def is_moe_layer(m, layer):
    # MLM transformer/moe/moe_utils / gpt_layer_specs: moe_layer_freq k => layer i is MoE iff i % k == 0
    return m.E > 0 and layer % m.moe_layer_freq == 0


def chunk_layers(L, pp, vp, p, c):
    """Global layers of pp rank p, VPP chunk c (MLM transformer_layer.py
    get_transformer_layer_offset: offset = c*(L/vp) + p*(L/(pp*vp)))."""
    assert L % (pp * vp) == 0, "uneven pipeline splits are not supported"
    n = L // (pp * vp)
    off = c * (L // vp) + p * n
    return list(range(off, off + n))


def is_first(p, c):
    return p == 0 and c == 0


def is_last(p, c, pp, vp):
    return p == pp - 1 and c == vp - 1


# Megatron module registration order inside one TransformerLayer (see header).
_LAYER_ORDER_TE = [
    "input_layernorm.weight", "input_layernorm.bias",
    "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",
    "self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
    "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
    "self_attention.q_layernorm.weight", "self_attention.q_layernorm.bias",
    "self_attention.k_layernorm.weight", "self_attention.k_layernorm.bias",
    "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
    "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias",
    "mlp.linear_fc1.weight", "mlp.linear_fc1.bias",
    "mlp.linear_fc2.weight", "mlp.linear_fc2.bias",
    "mlp.router.weight", "mlp.router.bias",
    # --moe-latent-size: MoELayer registers its TELinear latent projections after the router
    "mlp.fc1_latent_proj.weight", "mlp.fc1_latent_proj.bias", "mlp.fc2_latent_proj.weight", "mlp.fc2_latent_proj.bias",
    "mlp.experts.local_experts.*",
]
_EXPERT_ORDER = ["linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight", "linear_fc2.bias"]


def param_sort_key(local_name):
    """Position of a per-chunk Megatron parameter name in named_parameters()
    order (GPTModel / TransformerLayer / Attention / TE LayerNormLinear / MLP /
    MoELayer registration order, header)."""
    n = local_name
    if n == "embedding.word_embeddings.weight":
        return (0,)
    if n == "embedding.position_embeddings.weight":
        return (1,)
    if n.startswith("decoder.layers."):
        rest = n[len("decoder.layers."):]
        i, sub = rest.split(".", 1)
        if sub.startswith("mlp.experts.local_experts."):
            j, s = sub[len("mlp.experts.local_experts."):].split(".", 1)
            return (2, int(i), _LAYER_ORDER_TE.index("mlp.experts.local_experts.*"), int(j), _EXPERT_ORDER.index(s))
        return (2, int(i), _LAYER_ORDER_TE.index(sub))
    if n.startswith("decoder.final_layernorm."):
        return (3, 0 if n.endswith("weight") else 1)
    if n == "output_layer.weight":
        return (4,)
    raise KeyError("unknown Megatron parameter name " + n)


# Local (non-TE) spec names of the fused TE layer norms (MLM gpt_layer_specs.py
# get_gpt_layer_local_spec vs get_gpt_layer_with_transformer_engine_spec).
_TE_TO_LOCAL = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias",
}
_LOCAL_TO_TE = {v: k for k, v in _TE_TO_LOCAL.items()}

# TE modules that carry an _extra_state entry in the state dict (TE base.py
# TransformerEngineBaseModule.get_extra_state); core_attention is TEDotProductAttention.
# TENorm (te.pytorch.LayerNorm/RMSNorm, built on TE ops: TE pytorch/ops/op.py
# BasicOperation.get_extra_state, same empty uint8 tensor when not quantized) carries one
# too: MoE layers' pre_mlp_layernorm and, with TE installed, decoder.final_layernorm
# (MLM transformer_block.py LayerNormImpl = TENorm if HAVE_TE).
_TE_EXTRA_STATE_MODULES = ["self_attention.core_attention", "self_attention.linear_proj",
                           "self_attention.linear_qkv", "pre_mlp_layernorm", "mlp.linear_fc1", "mlp.linear_fc2",
                           "mlp.fc1_latent_proj", "mlp.fc2_latent_proj"]  # the latter: TELinear, duplicated


def tp_kind(name, swiglu):
    """TP split of a Megatron parameter (MLM extensions/transformer_engine.py and
    tensor_parallel/layers.py: column-parallel weight/bias on dim 0, row-parallel
    weight on dim 1, row-parallel bias replicated; VocabParallelEmbedding rows;
    gated fc1 = per rank [W_r; V_r], mlp.py MLP / apply_swiglu_sharded_factory)."""
    if name.endswith("word_embeddings.weight") or name == "output_layer.weight":
        return "row"
    if name.endswith("linear_qkv.weight") or name.endswith("linear_qkv.bias"):
        return "row"  # contiguous blocks of the query-group-interleaved rows
    if name.endswith("linear_fc1.weight") or name.endswith("linear_fc1.bias"):
        return "glu" if swiglu else "row"
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return "col"
    return "rep"


def tp_shard(x, kind, r, tp):
    if kind == "rep" or tp == 1:
        return x
    if kind == "row":
        n = x.shape[0] // tp
        return x[r * n:(r + 1) * n]
    if kind == "col":
        n = x.shape[1] // tp
        return x[:, r * n:(r + 1) * n]
    if kind == "glu":
        F = x.shape[0] // 2
        n = F // tp
        return np.concatenate([x[r * n:(r + 1) * n], x[F + r * n:F + (r + 1) * n]], 0)
    raise ValueError(kind)


def tp_merge(parts, kind):
    tp = len(parts)
    if kind == "rep" or tp == 1:
        for q in parts[1:]:
            if not np.array_equal(q, parts[0]):
                raise ValueError("replicated tensor differs between TP ranks")
        return parts[0]
    if kind == "row":
        return np.concatenate(parts, 0)
    if kind == "col":
        return np.concatenate(parts, 1)
    if kind == "glu":
        n = parts[0].shape[0] // 2
        return np.concatenate([q[:n] for q in parts] + [q[n:] for q in parts], 0)
    raise ValueError(kind)


def chunk_param_specs(m, names_in_layer, p, c, pp, vp, ep_rank, ep, local_spec, has_pos, final_norm):
    """List of (local Megatron name, mgt global name, expert index or None) for
    pp rank p, chunk c, EP rank ep_rank, in registration order. names_in_layer:
    function(layer) -> the mgt names of that layer without the prefix."""
    out = []
    if is_first(p, c):
        out.append(("embedding.word_embeddings.weight", "embedding.word_embeddings.weight", None))
        if has_pos:
            out.append(("embedding.position_embeddings.weight", "embedding.position_embeddings.weight", None))
    for i, layer in enumerate(chunk_layers(m.L, pp, vp, p, c)):
        for sub in names_in_layer(layer):
            g = "decoder.layers.%d.%s" % (layer, sub)
            if sub.startswith("mlp.experts."):
                s = sub[len("mlp.experts."):]
                per = m.E // ep
                for j in range(per):
                    out.append(("decoder.layers.%d.mlp.experts.local_experts.%d.%s" % (i, j, s), g, ep_rank * per + j))
                continue
            loc = _TE_TO_LOCAL.get(sub, sub) if local_spec else sub
            out.append(("decoder.layers.%d.%s" % (i, loc), g, None))
    if is_last(p, c, pp, vp):
        for s in final_norm:
            out.append(("decoder.final_layernorm." + s, "decoder.final_layernorm." + s, None))
        if not m.tied:
            out.append(("output_layer.weight", "output_layer.weight", None))
        elif pp > 1:
            # tied, pp>1: the last stage keeps its own copy of the embedding
            # (language_module.py setup_embeddings_and_output_layer)
            out.append(("output_layer.weight", "embedding.word_embeddings.weight", None))
    out.sort(key=lambda t: param_sort_key(t[0]))
    return out


def is_expert_param(local_name):
    return ".mlp.experts." in local_name


def no_weight_decay(local_name, shape):
    """MLM optimizer/__init__.py get_standard_config_overrides: wd_mult 0.0 for
    '*.bias' and every parameter with len(shape) == 1."""
    return local_name.endswith(".bias") or len(shape) == 1


def param_groups_of(items, expert_pgs):
    """MLM optimizer/__init__.py _get_param_groups: params keyed by
    (override tuple, is_expert_parallel), sorted with the no-override (weight
    decay) key first, then the wd_mult=0.0 key; get_megatron_optimizer builds
    one optimizer over the dense groups and, when expert params use the expert
    process groups (ep > 1: extensions/transformer_engine.py use_expert_pgs),
    another over the expert groups (ChainedOptimizer).
    items: [(key, local name, shape)] in named_parameters() order over the
    model chunks.  Returns a list of optimizers, each a list of groups
    [(wd_mult, [key...])]."""
    dense = {1.0: [], 0.0: []}
    expert = {1.0: [], 0.0: []}
    for key, n, shp in items:
        d = expert if (expert_pgs and is_expert_param(n)) else dense
        d[0.0 if no_weight_decay(n, shp) else 1.0].append(key)
    opts = [[(k, v) for k, v in ((1.0, dense[1.0]), (0.0, dense[0.0])) if v]]
    if expert_pgs:
        opts.append([(k, v) for k, v in ((1.0, expert[1.0]), (0.0, expert[0.0])) if v])
    return opts


# ----------------------------------------------------------------------------
# Distributed optimizer buffer layout (MLM optimizer/distrib_optimizer.py
# DistributedOptimizer._compute_per_buffer_param_layout; optimizer/param_layout.py
# pad_param_start (64 elements), pad_bucket_end (lcm(dp, 128))).

PARAM_START_ALIGN = 64


def buffer_layout(params, bucket_size, dp, shared_embedding=()):
    """params: [(name, numel)] in model-parameter order of one buffer.
    Returns (index {name: (start, end, bucket)}, bucket_indices [(start,end)],
    per_bucket_numel_unpadded)."""
    div = math.lcm(dp, 128)
    pad_start = lambda v: int(math.ceil(v / PARAM_START_ALIGN) * PARAM_START_ALIGN)
    pad_end = lambda v: int(math.ceil(v / div) * div)
    index, buckets, unpadded = {}, [], []
    start = bstart = 0
    bparams = 0
    bid = 0
    end = 0

    def finalize(end, bstart, bid):
        unpadded.append(end - bstart)
        bend = pad_end(end)
        buckets.append((bstart, bend))
        return bend, bid + 1

    for name, numel in params[::-1]:
        start = pad_start(start)
        if name in shared_embedding and bparams > 0:
            bstart, bid = finalize(start, bstart, bid)
            bparams = 0
            start = bstart
        end = start + numel
        index[name] = (start, end, bid)
        bparams += 1
        if (bucket_size is not None and end - bstart >= bucket_size) or name in shared_embedding:
            bstart, bid = finalize(end, bstart, bid)
            bparams = 0
            start = bstart
        else:
            start = end
    if bparams > 0:
        finalize(end, bstart, bid)
    return index, buckets, unpadded


def compact_offsets(index, buckets, unpadded):
    """distrib_optim.pt keeps each bucket's first numel_unpadded elements,
    concatenated (distrib_optimizer.py get_parameter_state_dp_zero).
    Returns {name: offset in the compact tensor}, total length."""
    base, acc = [], 0
    for u in unpadded:
        base.append(acc)
        acc += u
    return {n: base[b] + (s - buckets[b][0]) for n, (s, e, b) in index.items()}, acc


# ----------------------------------------------------------------------------
# Writer: legacy `torch` format


def to_dtype(x, dt):
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.to(dt).contiguous()


def scheduler_lr(sch, step_samples):
    """Current LR of OptimizerParamScheduler.get_lr (linear/cosine/constant only)."""
    mx, mn = sch["max_lr"], sch["min_lr"]
    w, dsteps = sch.get("lr_warmup_steps", 0), sch.get("lr_decay_steps", 1)
    n = step_samples
    if w > 0 and n <= w:
        return sch.get("lr_warmup_init", 0.0) + (mx - sch.get("lr_warmup_init", 0.0)) * n / w
    style = sch.get("lr_decay_style", "linear")
    if style == "constant":
        return mx
    if n > dsteps:
        return mn
    ratio = (n - w) / max(1, dsteps - w)
    coeff = 1.0 - ratio if style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return mn + coeff * (mx - mn)


def make_args(meta, o, dtype):
    """argparse.Namespace as Megatron's parse_args/validate_args leaves it
    (MLM training/arguments.py; fields restored by checkpointing.py
    load_args_from_checkpoint._set_arg)."""
    a = dict(meta["args"])
    sch = meta["opt_param_scheduler"]
    ns = argparse.Namespace()
    keep = ["num_layers", "hidden_size", "ffn_hidden_size", "seq_length", "num_attention_heads",
            "num_query_groups", "group_query_attention", "kv_channels", "max_position_embeddings",
            "position_embedding_type", "rotary_base", "rotary_percent", "add_bias_linear",
            "add_qkv_bias", "squared_relu", "swiglu", "untie_embeddings_and_output_weights",
            "apply_layernorm_1p", "normalization", "num_experts", "moe_layer_freq",
            "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size", "moe_latent_size",
            "moe_router_score_function", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
            "padded_vocab_size", "norm_epsilon", "qk_layernorm", "make_vocab_size_divisible_by",
            "micro_batch_size", "global_batch_size", "lr", "min_lr", "lr_decay_style",
            "lr_warmup_iters", "lr_decay_iters", "train_iters", "seed", "tokenizer_type",
            "vocab_size", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad",
            "init_method_std", "attention_dropout", "hidden_dropout", "use_rope_scaling",
            "rope_scaling_factor", "decoder_first_pipeline_num_layers",
            "decoder_last_pipeline_num_layers"]
    for k in keep:
        setattr(ns, k, a.get(k))
    if not ns.num_query_groups:
        ns.num_query_groups = ns.num_attention_heads
    ns.decoder_first_pipeline_num_layers = a.get("decoder_first_pipeline_num_layers") or None
    ns.decoder_last_pipeline_num_layers = a.get("decoder_last_pipeline_num_layers") or None
    ns.add_position_embedding = a.get("position_embedding_type") == "learned_absolute"
    ns.use_rotary_position_embeddings = a.get("position_embedding_type") == "rope"
    ns.rotary_interleaved = False
    ns.moe_grouped_gemm = False
    ns.mtp_num_layers = None
    ns.transformer_impl = "local" if o.local_spec else "transformer_engine"
    ns.bf16 = dtype == torch.bfloat16
    ns.fp16 = dtype == torch.float16
    ns.params_dtype = dtype
    ns.accumulate_allreduce_grads_in_fp32 = ns.bf16
    ns.use_distributed_optimizer = bool(o.dist_opt)
    ns.ckpt_format = o.format
    ns.tensor_model_parallel_size = o.tp
    ns.pipeline_model_parallel_size = o.pp
    ns.virtual_pipeline_model_parallel_size = o.vp if o.vp > 1 else None
    ns.num_layers_per_virtual_pipeline_stage = (ns.num_layers // (o.pp * o.vp)) if o.vp > 1 else None
    ns.expert_model_parallel_size = o.ep
    ns.expert_tensor_parallel_size = o.tp
    ns.context_parallel_size = 1
    ns.data_parallel_size = o.dp
    ns.world_size = o.tp * o.pp * o.dp
    ns.pipeline_model_parallel_layout = None
    ns.account_for_embedding_in_pipeline_split = False
    ns.account_for_loss_in_pipeline_split = False
    ns.sequence_parallel = False
    ns.overlap_grad_reduce = o.bucket_size is not None
    ns.ddp_bucket_size = o.bucket_size
    ns.optimizer = "adam"
    ns.consumed_train_samples = meta["consumed_train_samples"]
    ns.consumed_valid_samples = meta["consumed_valid_samples"]
    ns.iteration = meta["iteration"]
    ns.save = None
    ns.load = None
    ns.no_save_optim = bool(o.no_optim)
    ns.no_save_rng = False
    ns.data_parallel_random_init = False
    ns.lr_warmup_samples = sch.get("lr_warmup_steps", 0) if a.get("lr_warmup_samples") else 0
    return ns


def rng_state_entry(seed):
    """One element of MLM checkpointing.py get_rng_state's list."""
    r = random.Random(seed)
    nps = np.random.RandomState(seed)
    g = torch.Generator()
    g.manual_seed(seed)
    cuda = torch.zeros(16, dtype=torch.uint8)  # stand-in for torch.cuda.get_rng_state()
    cuda[:8] = torch.tensor(list(int(seed).to_bytes(8, "little")), dtype=torch.uint8)
    return {"random_rng_state": r.getstate(), "np_rng_state": nps.get_state(),
            "torch_rng_state": g.get_state(), "cuda_rng_state": cuda,
            "rng_tracker_states": {}}


def build_rank_tensors(ck, m, o, p, c, ep_rank, t):
    """For pp rank p, chunk c, EP rank ep_rank, TP rank t: list of
    (local name, fp32 numpy shard, exp_avg shard, exp_avg_sq shard)."""
    params = ck["params"]
    a = ck["meta"]["args"]
    has_pos = "embedding.position_embeddings.weight" in params

    def names_in_layer(layer):
        pre = "decoder.layers.%d." % layer
        return sorted({k[len(pre):] for k in params if k.startswith(pre)},
                      key=lambda s: param_sort_key("decoder.layers.0." + (
                          "mlp.experts.local_experts.0." + s[len("mlp.experts."):] if s.startswith("mlp.experts.") else s)))

    out = []
    final_norm = [x for x in ("weight", "bias") if "decoder.final_layernorm." + x in params]
    for loc, g, e in chunk_param_specs(m, names_in_layer, p, c, o.pp, o.vp, ep_rank, o.ep, o.local_spec, has_pos, final_norm):
        kind = tp_kind(loc, m.swiglu)
        srcs = []
        for src in (params, ck["exp_avg"], ck["exp_avg_sq"]):
            x = src[g]
            if e is not None:
                x = x[e]
            srcs.append(np.ascontiguousarray(tp_shard(x, kind, t, o.tp)))
        out.append((loc,) + tuple(srcs))
    return out


def legacy_dirname(t, p, e, pp, ep):
    """MLM training/checkpointing.py get_checkpoint_name: mp_rank_%02d, then
    _%03d pp rank if pp>1, then _%03d ep rank if ep>1."""
    n = "mp_rank_%02d" % t
    if pp > 1:
        n += "_%03d" % p
    if ep > 1:
        n += "_%03d" % e
    return n


def adam_group_dict(wd_mult, ids, sch, step_samples, a, expert):
    """One torch Adam/AdamW param_group as torch.optim.Optimizer.state_dict
    writes it, with Megatron's extra keys (optimizer/__init__.py
    _get_param_groups: is_expert_parallel, default_config, wd_mult, lr_mult,
    is_decoupled_lr, max_lr, min_lr); lr and weight_decay as
    OptimizerParamScheduler.step sets them."""
    return {"lr": scheduler_lr(sch, step_samples),
            "betas": (a.get("adam_beta1", 0.9), a.get("adam_beta2", 0.999)),
            "eps": a.get("adam_eps", 1e-8),
            "weight_decay": a.get("weight_decay", 0.01) * wd_mult,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
            "differentiable": False, "fused": None,
            "is_expert_parallel": expert, "default_config": True,
            "wd_mult": wd_mult, "lr_mult": 1.0, "is_decoupled_lr": False,
            "max_lr": sch["max_lr"], "min_lr": sch["min_lr"],
            "params": ids}


def write_legacy(ck, o, outdir):
    meta = ck["meta"]
    a = meta["args"]
    m = model_from_args(a)
    dtype = torch.bfloat16 if o.bf16 else (torch.float16 if o.fp16 else torch.float32)
    it = ck["iteration"]
    step = meta["optimizer"]["step"]
    sch = meta["opt_param_scheduler"]
    expert_pgs = m.E > 0 and o.ep > 1
    if m.E and m.E % o.ep:
        raise SystemExit("num_experts not divisible by ep")
    if expert_pgs and o.dp % o.ep:
        raise SystemExit("dp must be a multiple of ep (expert data-parallel size = dp*tp/(ep*etp))")
    edp = o.dp // o.ep if expert_pgs else o.dp
    grad_dtype = torch.float32 if dtype != torch.float16 else torch.float16
    sub = "release" if o.release else "iter_%07d" % it
    os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    ns = make_args(meta, o, dtype)
    for p in range(o.pp):
        for e in range(o.ep):
            for t in range(o.tp):
                sd = OrderedDict()
                sd["args"] = ns
                sd["checkpoint_version"] = 3.0
                sd["iteration"] = 0 if o.release else it
                chunks = []
                for c in range(o.vp):
                    rows = build_rank_tensors(ck, m, o, p, c, e, t)
                    chunks.append(rows)
                    model = OrderedDict()
                    for loc, w, _, _ in rows:
                        model[loc] = to_dtype(w, dtype)
                    if not o.local_spec:
                        add_extra_state(model)
                    sd["model%d" % c if o.vp > 1 else "model"] = model
                if not o.no_optim:
                    opt, dist = legacy_optimizer(chunks, o, dtype, grad_dtype, step, sch, a, expert_pgs, edp, p, e, m)
                    sd["optimizer"] = opt
                    sd["opt_param_scheduler"] = dict(sch_state(sch))
                else:
                    dist = None
                    sd["opt_param_scheduler"] = dict(sch_state(sch))
                sd["rng_state"] = [rng_state_entry(meta.get("rng", {}).get("seed", a.get("seed", 1234)) + 100 * p + t)]
                sd["num_floating_point_operations_so_far"] = int(meta.get("num_floating_point_operations_so_far", 0))
                d = os.path.join(outdir, sub, legacy_dirname(t, p, e, o.pp, o.ep))
                os.makedirs(d, exist_ok=True)
                torch.save(sd, os.path.join(d, "model_optim_rng.pt"))
                if dist is not None:
                    torch.save(dist, os.path.join(d, "distrib_optim.pt"))
    with open(os.path.join(outdir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if o.release else str(it))


def sch_state(sch):
    """OptimizerParamScheduler.state_dict keys (MLM optimizer_param_scheduler.py)."""
    return OrderedDict([("max_lr", sch["max_lr"]), ("lr_warmup_steps", sch.get("lr_warmup_steps", 0)),
                        ("num_steps", sch.get("num_steps", 0)), ("lr_decay_style", sch.get("lr_decay_style", "linear")),
                        ("lr_decay_steps", sch.get("lr_decay_steps", 0)), ("min_lr", sch["min_lr"]),
                        ("start_wd", sch.get("start_wd", 0.01)), ("end_wd", sch.get("end_wd", 0.01)),
                        ("wd_incr_style", sch.get("wd_incr_style", "constant")),
                        ("wd_incr_steps", sch.get("wd_incr_steps", 0))])


def add_extra_state(model):
    """TE modules' _extra_state entries when FP8 is off: torch.empty(0, dtype=torch.uint8)
    (TE pytorch/module/base.py TransformerEngineBaseModule.get_extra_state:
    'if not fp8_checkpoint: return torch.empty(0, dtype=torch.uint8)').  Placed after
    each module's parameters, as nn.Module.state_dict does."""
    layers = sorted({int(k.split(".")[2]) for k in model if k.startswith("decoder.layers.")})
    items = list(model.items())
    model.clear()
    mods = []
    for i in layers:
        pre = "decoder.layers.%d." % i
        for mname in _TE_EXTRA_STATE_MODULES:
            if any(k.startswith(pre + mname + ".") for k, _ in items) or mname.endswith("core_attention"):
                mods.append(pre + mname)
        for k, _ in items:
            if k.startswith(pre + "mlp.experts.local_experts."):
                j = k.split(".")[6]
                for s in ("linear_fc1", "linear_fc2"):
                    mm = pre + "mlp.experts.local_experts.%s.%s" % (j, s)
                    if mm not in mods:
                        mods.append(mm)
    if any(k.startswith("decoder.final_layernorm.") for k, _ in items):
        mods.append("decoder.final_layernorm")
    last_of = {}
    for idx, (k, _) in enumerate(items):
        for mm in mods:
            if k.startswith(mm + "."):
                last_of[mm] = idx
    for idx, (k, v) in enumerate(items):
        if k.startswith("decoder.layers.") and k.endswith(".linear_proj.weight"):
            ca = k[:-len("linear_proj.weight")] + "core_attention"
            if ca in mods:
                model[ca + "._extra_state"] = torch.empty(0, dtype=torch.uint8)
        model[k] = v
        for mm, li in last_of.items():
            if li == idx:
                model[mm + "._extra_state"] = torch.empty(0, dtype=torch.uint8)


def legacy_optimizer(chunks, o, dtype, grad_dtype, step, sch, a, expert_pgs, edp, p, e, m):
    """The 'optimizer' entry of model_optim_rng.pt and (with --dist-opt) the
    distrib_optim.pt object for one (tp, pp, ep) file."""
    steps_samples = sch.get("num_steps", 0)
    # named_parameters() over the model chunks, in order (optimizer/__init__.py _get_param_groups)
    allp = []
    for c, rows in enumerate(chunks):
        for loc, w, m1, m2 in rows:
            allp.append((c, loc, w, m1, m2))
    byname = {(c, loc): (w, m1, m2) for c, loc, w, m1, m2 in allp}
    opts = param_groups_of([((c, loc), loc, w.shape) for c, loc, w, _, _ in allp], expert_pgs)
    sds, dists = [], []
    for oi, groups in enumerate(opts):
        is_exp = oi == 1
        if not o.dist_opt:
            state, pgs, idx = {}, [], 0
            fp32_from = []
            for wd, names in groups:
                ids = []
                fl = []
                for key in names:
                    w, m1, m2 = byname[key]
                    state[idx] = {"step": torch.tensor(float(step)),
                                  "exp_avg": to_dtype(m1, torch.float32),
                                  "exp_avg_sq": to_dtype(m2, torch.float32)}
                    ids.append(idx)
                    fl.append(to_dtype(w, torch.float32))
                    idx += 1
                pgs.append(adam_group_dict(wd, ids, sch, steps_samples, a, is_exp))
                fp32_from.append(fl)
            inner = {"state": state, "param_groups": pgs}
            if dtype == torch.float32:
                sds.append(inner)  # FP32Optimizer.state_dict (optimizer.py)
            else:
                sd = {"optimizer": inner}
                if dtype == torch.float16:
                    sd["grad_scaler"] = {"scale": torch.tensor(4294967296.0), "growth_tracker": 0, "hysteresis_tracker": 2}
                sd["fp32_from_fp16_params"] = fp32_from  # Float16OptimizerWithFloat16Params.state_dict
                sds.append(sd)
        else:
            # DistributedOptimizer.state_dict: param_groups without 'params', 'step' added
            pgs = []
            for wd, names in groups:
                g = adam_group_dict(wd, [], sch, steps_samples, a, is_exp)
                del g["params"]
                g["step"] = float(step)
                pgs.append(g)
            sd = {"optimizer": {"param_groups": pgs}}
            if dtype == torch.float16:
                sd["grad_scaler"] = {"scale": torch.tensor(4294967296.0), "growth_tracker": 0, "hysteresis_tracker": 2}
            sds.append(sd)
            dpsize = edp if is_exp else o.dp
            # dense dp rank 0 sits on ep rank 0; other EP ranks' files hold None for the
            # dense optimizer (ChainedOptimizer.save_parameter_state)
            if is_exp or e == 0 or not expert_pgs:
                dists.append(dist_param_state(chunks, o, dtype, grad_dtype, is_exp, expert_pgs, dpsize, p, m))
            else:
                dists.append(None)
    if len(sds) == 1:
        return sds[0], (dists[0] if o.dist_opt else None)
    return sds, (dists if o.dist_opt else None)


def dist_param_state(chunks, o, dtype, grad_dtype, is_exp, expert_pgs, dpsize, p, m):
    """distrib_optim.pt content for one optimizer (distrib_optimizer.py
    get_parameter_state_dp_zero): {'buckets_coalesced': True, gbuf_idx:
    {(param_dtype, grad_dtype): {'param','exp_avg','exp_avg_sq','numel_unpadded'}}};
    gbuf_idx enumerates the buffers of each model chunk in chunk order
    (DistributedOptimizer.__init__ self.buffers)."""
    state = {"buckets_coalesced": True}
    gi = 0
    for c, rows in enumerate(chunks):
        sel = [r for r in rows if (expert_pgs and is_expert_param(r[0])) == is_exp]
        if not sel:
            continue
        # DDP: bucketing off on pp_rank>0 and chunks after the first (distributed_data_parallel.py)
        bsize = o.bucket_size if (p == 0 and c == 0) else None
        shared = set()
        if m.tied and o.pp > 1 and not is_exp:
            # language_module.py setup_embeddings_and_output_layer: shared_embedding flag
            shared = {"embedding.word_embeddings.weight", "output_layer.weight"}
        index, buckets, unp = buffer_layout([(r[0], r[1].size) for r in sel], bsize, dpsize, shared)
        offs, total = compact_offsets(index, buckets, unp)
        ent = {k: torch.zeros(total, dtype=torch.float32) for k in ("param", "exp_avg", "exp_avg_sq")}
        for loc, w, m1, m2 in sel:
            s = offs[loc]
            for k, x in (("param", w), ("exp_avg", m1), ("exp_avg_sq", m2)):
                ent[k][s:s + x.size] = torch.from_numpy(np.ascontiguousarray(x).reshape(-1))
        ent["numel_unpadded"] = total
        state[gi] = {(dtype, grad_dtype): ent}
        gi += 1
    return state


# ----------------------------------------------------------------------------
# Reader: legacy `torch` format (independent of the writer: it uses only the
# facts above: names, TP split rules, parameter order, buffer rules).


def to_np32(t):
    if isinstance(t, torch.Tensor):
        return t.detach().to(torch.float32).contiguous().numpy()
    return np.asarray(t, dtype=np.float32)


def args_get(a, k, d=None):
    v = getattr(a, k, d)
    return d if v is None else v


def global_name(local, layers, m, ep_rank, ep):
    """Per-chunk Megatron name -> (global mgt name, expert index or None);
    None for the tied output_layer copy of the last stage."""
    if local.startswith("decoder.layers."):
        i, sub = local[len("decoder.layers."):].split(".", 1)
        layer = layers[int(i)]
        if sub.startswith("mlp.experts.local_experts."):
            j, s = sub[len("mlp.experts.local_experts."):].split(".", 1)
            return "decoder.layers.%d.mlp.experts.%s" % (layer, s), ep_rank * (m.E // ep) + int(j)
        if sub.startswith("pre_mlp_layernorm.") and is_moe_layer(m, layer):
            return "decoder.layers.%d.%s" % (layer, sub), None  # MoE layers keep a real TENorm
        return "decoder.layers.%d.%s" % (layer, _LOCAL_TO_TE.get(sub, sub)), None
    if local == "output_layer.weight" and m.tied:
        return None, None
    return local, None


class Collector:
    """Gathers TP shards (and experts) of every tensor, then merges them."""

    def __init__(self, swiglu):
        self.swiglu = swiglu
        self.parts = {}  # name -> {expert: {t: array}}, plus kind

    def add(self, prefix, gname, expert, t, arr, local):
        d = self.parts.setdefault(prefix + gname, (tp_kind(local, self.swiglu), {}))[1]
        slot = d.setdefault(expert, {})
        if t in slot and not np.array_equal(slot[t], arr):
            raise ValueError("conflicting copies of %s%s" % (prefix, gname))
        slot[t] = arr

    def result(self):
        out = {}
        for name, (kind, d) in self.parts.items():
            def merge(slot):
                return tp_merge([slot[t] for t in sorted(slot)], kind)
            if list(d) == [None]:
                out[name] = merge(d[None])
            else:
                es = sorted(d)
                if es != list(range(len(es))):
                    raise ValueError("missing experts for " + name)
                out[name] = np.stack([merge(d[e]) for e in es], 0)
        return out


def find_iteration_dir(root, iteration):
    if iteration is None:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
            s = f.read().strip()
        sub = "release" if s == "release" else "iter_%07d" % int(s)
    else:
        sub = "iter_%07d" % iteration
    return os.path.join(root, sub)


def parse_rank_dir(name, pp, ep):
    """mp_rank_TT[_PPP][_EEE] (checkpointing.py get_checkpoint_name)."""
    f = name.split("_")[2:]
    t = int(f[0])
    rest = [int(x) for x in f[1:]]
    p = rest.pop(0) if pp > 1 else 0
    e = rest.pop(0) if ep > 1 else 0
    assert not rest, name
    return t, p, e


def legacy_load(path):
    # plain torch 1.13 semantics (weights_only did not exist yet as default)
    return torch.load(path, map_location="cpu")


def read_legacy(d):
    files = sorted(x for x in os.listdir(d) if x.startswith("mp_rank_"))
    first = legacy_load(os.path.join(d, files[0], "model_optim_rng.pt"))
    a = first["args"]
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    vp = args_get(a, "virtual_pipeline_model_parallel_size", 1)
    ep = args_get(a, "expert_model_parallel_size", 1)
    m = model_from_args(a)
    dtype = a.params_dtype
    expert_pgs = m.E > 0 and ep > 1
    dp = args_get(a, "data_parallel_size", 1)
    etp = args_get(a, "expert_tensor_parallel_size", tp)
    edp = dp * tp // (ep * etp)
    col = Collector(m.swiglu)
    scal = None
    for fname in files:
        t, p, e = parse_rank_dir(fname, pp, ep)
        sd = legacy_load(os.path.join(d, fname, "model_optim_rng.pt"))
        if scal is None:
            scal = legacy_scalars(sd)
        chunks = []  # per chunk: [(local, array)] in parameter order
        for c in range(vp):
            model = sd["model%d" % c] if vp > 1 else sd["model"]
            layers = chunk_layers(m.L, pp, vp, p, c)
            rows = [(k, v) for k, v in model.items() if not k.endswith("._extra_state")]
            rows.sort(key=lambda kv: param_sort_key(kv[0]))
            chunks.append((layers, rows))
            for k, v in rows:
                g, ex = global_name(k, layers, m, e, ep)
                if g is not None:
                    col.add("", g, ex, t, to_np32(v), k)
        if "optimizer" not in sd:
            continue
        allp = [((c, k), k, tuple(v.shape)) for c, (layers, rows) in enumerate(chunks) for k, v in rows]
        opts = param_groups_of(allp, expert_pgs)
        osd = sd["optimizer"]
        osds = osd if isinstance(osd, list) else [osd]
        assert len(osds) == len(opts), "optimizer count %d != %d" % (len(osds), len(opts))
        shapes = {key: shp for key, _, shp in allp}
        weights = {(c, k): v for c, (layers, rows) in enumerate(chunks) for k, v in rows}
        states = {}  # key -> {'exp_avg','exp_avg_sq','fp32_param'}
        if args_get(a, "use_distributed_optimizer", False):
            dpath = os.path.join(d, fname, "distrib_optim.pt")
            dist = torch.load(dpath, map_location="cpu")
            dists = dist if isinstance(dist, list) else [dist]
            for oi, groups in enumerate(opts):
                if dists[oi] is None:
                    continue
                is_exp = oi == 1
                read_dist_state(dists[oi], chunks, groups, is_exp, expert_pgs, a,
                                edp if is_exp else dp, p, m, shapes, states)
        else:
            for oi, groups in enumerate(opts):
                sdo = osds[oi]
                inner = sdo["optimizer"] if "fp32_from_fp16_params" in sdo else sdo
                pgs = inner["param_groups"]
                assert len(pgs) == len(groups), "param group count"
                for gi, (wd, keys) in enumerate(groups):
                    ids = pgs[gi]["params"]
                    assert len(ids) == len(keys), "group %d: %d ids for %d params" % (gi, len(ids), len(keys))
                    assert pgs[gi].get("wd_mult", wd) == wd
                    for j, (key, pid) in enumerate(zip(keys, ids)):
                        st = inner["state"][pid]
                        if "fp32_from_fp16_params" in sdo:
                            f32 = sdo["fp32_from_fp16_params"][gi][j]
                        else:
                            f32 = weights[key]
                        states[key] = {"exp_avg": to_np32(st["exp_avg"]), "exp_avg_sq": to_np32(st["exp_avg_sq"]),
                                       "fp32_param": to_np32(f32)}
                        for kk, vv in states[key].items():
                            assert vv.shape == shapes[key], (key, kk, vv.shape)
        for (c, k), st in states.items():
            g, ex = global_name(k, chunks[c][0], m, e, ep)
            if g is None:
                continue
            for kk, vv in st.items():
                col.add("optimizer.state.%s." % kk, g, ex, t, vv, k)
    scal["model_dtype"] = str(dtype)
    return col.result(), scal


def read_dist_state(state, chunks, groups, is_exp, expert_pgs, a, dpsize, p, m, shapes, out):
    """Undo distrib_optim.pt's layout (see buffer_layout)."""
    assert state.get("buckets_coalesced") is True, "pre-coalesced layout not supported"
    pp = a.pipeline_model_parallel_size
    if args_get(a, "overlap_grad_reduce", False):
        bs = args_get(a, "ddp_bucket_size", None) or max(40000000, 1000000 * dpsize)
    else:
        bs = None
    gi = 0
    for c, (layers, rows) in enumerate(chunks):
        sel = [k for k, v in rows if (expert_pgs and is_expert_param(k)) == is_exp]
        if not sel:
            continue
        shared = set()
        if m.tied and pp > 1 and not is_exp:
            shared = {"embedding.word_embeddings.weight", "output_layer.weight"}
        offs, total = reader_offsets([(k, int(np.prod(shapes[(c, k)]))) for k in sel],
                                     bs if (p == 0 and c == 0) else None, dpsize, shared)
        ent = state[gi]
        assert len(ent) == 1
        (key_dt, tens), = ent.items()
        assert isinstance(key_dt, tuple) and len(key_dt) == 2, key_dt
        assert tens["numel_unpadded"] == total, "numel_unpadded %s != %d" % (tens["numel_unpadded"], total)
        for k in sel:
            s = offs[k]
            n = int(np.prod(shapes[(c, k)]))
            out[(c, k)] = {kk: to_np32(tens[src][s:s + n]).reshape(shapes[(c, k)])
                           for kk, src in (("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq"), ("fp32_param", "param"))}
        gi += 1
    assert gi == len([k for k in state if k != "buckets_coalesced"]), "extra buffers in distrib_optim.pt"


def reader_offsets(params, bucket_size, dp, shared, bucket_sizes_out=None):
    """The reader's own statement of the distributed optimizer's buffer rules
    (written apart from buffer_layout so that a slip in one is caught by the
    round trip): walk the params last to first; a param starts at the next
    multiple of 64 (param_layout.py pad_param_start); a bucket is closed after
    the param that brings it to >= bucket_size elements, and around a
    shared_embedding param (distrib_optimizer.py
    _compute_per_buffer_param_layout); distrib_optim.pt drops each bucket's
    tail padding (up to a multiple of lcm(dp, 128), param_layout.py
    pad_bucket_end), so in the file a bucket starts where the previous
    bucket's last param ended.  Returns ({name: file offset}, total)."""
    offs = {}
    file_pos = 0      # end of the data written to the file so far
    in_bucket = 0     # elements used in the current bucket (relative, incl. 64-alignment gaps)
    nparams = 0
    sizes = []        # unpadded size of each bucket
    for name, n in reversed(params):
        aligned = -(-in_bucket // 64) * 64
        if name in shared and nparams:
            sizes.append(aligned)       # the closed bucket keeps the alignment gap
            file_pos += aligned
            in_bucket, nparams, aligned = 0, 0, 0
        offs[name] = file_pos + aligned
        in_bucket = aligned + n
        nparams += 1
        if name in shared or (bucket_size is not None and in_bucket >= bucket_size):
            sizes.append(in_bucket)
            file_pos += in_bucket
            in_bucket, nparams = 0, 0
    if nparams:
        sizes.append(in_bucket)
        file_pos += in_bucket
    if bucket_sizes_out is not None:
        bucket_sizes_out.extend(sizes)
    return offs, file_pos


def legacy_scalars(sd):
    a = sd["args"]
    osd = sd.get("optimizer")
    step = None
    if osd is not None:
        o0 = osd[0] if isinstance(osd, list) else osd
        inner = o0.get("optimizer", o0)
        if inner.get("state"):
            step = float(next(iter(inner["state"].values()))["step"])
        elif inner["param_groups"] and "step" in inner["param_groups"][0]:
            step = float(inner["param_groups"][0]["step"])
    sch = sd.get("opt_param_scheduler", sd.get("lr_scheduler"))
    return {"iteration": sd.get("iteration", 0), "checkpoint_version": sd.get("checkpoint_version"),
            "consumed_train_samples": getattr(a, "consumed_train_samples", None),
            "consumed_valid_samples": getattr(a, "consumed_valid_samples", None),
            "opt_param_scheduler": dict(sch) if sch is not None else None,
            "optimizer_step": step,
            "args": {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(a).items()}}


# ----------------------------------------------------------------------------
# torch_dist format: PyTorch DCP classes (stubs with the real module paths)
#
# Followed: PT torch/distributed/checkpoint/metadata.py as of PyTorch >= 2.4
# (Metadata(state_dict_metadata, planner_data, storage_data, storage_meta,
# version); TensorProperties.__getstate__ -> (dtype, layout, requires_grad,
# _MEM_FORMAT_ENCODING member, pin_memory)); PT filesystem.py _StorageInfo
# (relative_path, offset, length, transform_descriptors; __getstate__ drops
# None fields).  python3-torch 1.13 has no torch.distributed.checkpoint, so the
# writer registers stand-in modules in sys.modules only while pickling.


def _make_dcp_stubs():
    import enum
    md = types.ModuleType("torch.distributed.checkpoint.metadata")
    fs = types.ModuleType("torch.distributed.checkpoint.filesystem")

    @dataclass
    class ChunkStorageMetadata:
        offsets: Any
        sizes: Any

    class _MEM_FORMAT_ENCODING(enum.Enum):
        TORCH_CONTIGUOUS_FORMAT = 0
        TORCH_CHANNELS_LAST = 1
        TORCH_PRESERVE_FORMAT = 2

    @dataclass
    class TensorProperties:
        dtype: Any = None
        layout: Any = None
        requires_grad: bool = False
        memory_format: Any = None
        pin_memory: bool = False

        def __getstate__(self):
            return (self.dtype, self.layout, self.requires_grad,
                    _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

        def __setstate__(self, st):
            self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory = st

    @dataclass
    class TensorStorageMetadata:
        properties: Any
        size: Any
        chunks: list

    @dataclass
    class BytesStorageMetadata:
        pass

    @dataclass
    class StorageMeta:
        checkpoint_id: Any = None
        save_id: Any = None
        load_id: Any = None
        modules: list = field(default_factory=list)

    @dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: Any = None
        storage_data: Any = None
        storage_meta: Any = None
        version: Any = None

    @dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: Any = None
        index: Any = field(hash=False, compare=False, default=None)

    @dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int
        transform_descriptors: Any = None

        def __getstate__(self):
            return {k: v for k, v in self.__dict__.items() if v is not None}

    for mod, classes in ((md, [ChunkStorageMetadata, _MEM_FORMAT_ENCODING, TensorProperties, TensorStorageMetadata,
                               BytesStorageMetadata, StorageMeta, Metadata, MetadataIndex]),
                         (fs, [_StorageInfo])):
        for cl in classes:
            cl.__module__ = mod.__name__
            cl.__qualname__ = cl.__name__
            setattr(mod, cl.__name__, cl)
    return md, fs


DCP_MD, DCP_FS = _make_dcp_stubs()


class _dcp_modules:
    """Context: make the stub classes importable under PyTorch's module names."""

    def __enter__(self):
        pkg = types.ModuleType("torch.distributed.checkpoint")
        pkg.metadata, pkg.filesystem = DCP_MD, DCP_FS
        self.saved = {}
        for n, mod in (("torch.distributed.checkpoint", pkg), ("torch.distributed.checkpoint.metadata", DCP_MD),
                       ("torch.distributed.checkpoint.filesystem", DCP_FS)):
            self.saved[n] = sys.modules.get(n)
            sys.modules[n] = mod

    def __exit__(self, *a):
        for n, mod in self.saved.items():
            if mod is None:
                del sys.modules[n]
            else:
                sys.modules[n] = mod


class GenericObj:
    """Any class the reader does not know (e.g. Megatron's SavePlan objects in
    metadata.all_local_plans): keeps the state."""

    def __init__(self, *a, **k):
        self._args = a

    def __setstate__(self, st):
        self._state = st


class MetadataUnpickler(pickle.Unpickler):
    """Reads .metadata without torch.distributed.checkpoint: PyTorch's DCP
    classes are matched by class name (old releases keep TensorProperties in
    torch.distributed._shard.sharded_tensor.metadata), anything else unknown
    becomes GenericObj."""

    def find_class(self, module, name):
        if module.startswith("torch.distributed") or module.startswith("megatron"):
            for mod in (DCP_MD, DCP_FS):
                if hasattr(mod, name) and isinstance(getattr(mod, name), type):
                    return getattr(mod, name)
            if name == "MEM_FORMAT_ENCODING":
                return DCP_MD._MEM_FORMAT_ENCODING
            return type(name, (GenericObj,), {})
        return super().find_class(module, name)


def torch_save_bytes(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def torch_load_bytes(b):
    return torch.load(io.BytesIO(b), map_location="cpu")


# ----------------------------------------------------------------------------
# torch_dist writer


class DcpStore:
    """Collects items per writing rank, then writes __R_0.distcp files and
    .metadata (PT filesystem.py: items back to back, storage_data[index] =
    _StorageInfo(file, offset, length))."""

    def __init__(self):
        self.tensors = OrderedDict()  # key -> (global shape, dtype, [(offsets, sizes)])
        self.bytes_keys = OrderedDict()
        self.files = OrderedDict()  # rank -> [(MetadataIndex args, payload bytes)]

    def add_chunk(self, rank, key, gshape, offsets, t):
        t = t.contiguous().clone()
        ent = self.tensors.setdefault(key, (tuple(gshape), t.dtype, []))
        assert ent[0] == tuple(gshape) and ent[1] == t.dtype, (key, ent[0], gshape)
        ent[2].append((tuple(offsets), tuple(t.shape)))
        self.files.setdefault(rank, []).append(((key, tuple(offsets)), torch_save_bytes(t)))

    def add_object(self, rank, unique_key, objs):
        """MLM strategies/torch.py _mcore_to_torch_sharded_object: torch.save of
        the list of the ShardedObjects' data."""
        assert unique_key not in self.bytes_keys, unique_key
        self.bytes_keys[unique_key] = True
        self.files.setdefault(rank, []).append(((unique_key, None), torch_save_bytes(list(objs))))

    def add_value(self, rank, key, value):
        """A non-tensor as DefaultSavePlanner writes it: a BYTE_IO item of torch.save(value)."""
        assert key not in self.bytes_keys, key
        self.bytes_keys[key] = True
        self.files.setdefault(rank, []).append(((key, None), torch_save_bytes(value)))

    def write(self, d):
        M = DCP_MD
        sdm = OrderedDict()
        for k, (gs, dt, chunks) in self.tensors.items():
            sdm[k] = M.TensorStorageMetadata(
                properties=M.TensorProperties(dtype=dt, layout=torch.strided, requires_grad=False,
                                              memory_format=None, pin_memory=False),
                size=torch.Size(gs),
                chunks=[M.ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s)) for o, s in chunks])
        for k in self.bytes_keys:
            sdm[k] = M.BytesStorageMetadata()
        storage = {}
        for rank, items in self.files.items():
            name = "__%d_0.distcp" % rank
            pos = 0
            with open(os.path.join(d, name), "wb") as f:
                for (fqn, off), payload in items:
                    f.write(payload)
                    idx = M.MetadataIndex(fqn, torch.Size(off) if off is not None else None, None)
                    storage[idx] = DCP_FS._StorageInfo(name, pos, len(payload))
                    pos += len(payload)
        meta = M.Metadata(state_dict_metadata=sdm, planner_data=None, storage_data=storage,
                          storage_meta=M.StorageMeta(checkpoint_id=None, save_id=None, load_id=None, modules=[]),
                          version="1.0.0")
        with _dcp_modules():
            with open(os.path.join(d, ".metadata"), "wb") as f:
                pickle.dump(meta, f)  # default protocol (4 on CPython 3.8-3.13), PT filesystem.py finish


# Local spec: TransformerLayerSubmodules.sharded_state_dict_keys_map (MLM
# models/gpt/gpt_layer_specs.py get_gpt_layer_local_submodules) renames the norms
# to the TE names in torch_dist keys, in every layer (MoE layers included).
_LOCAL_SHARDED_KEYS_MAP = {"input_layernorm.": "self_attention.linear_qkv.layer_norm_",
                           "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_"}


def sharded_key_of(local, is_moe, local_spec=False):
    """ShardedTensor key of a per-chunk parameter name (MLM transformer_block.py
    TransformerBlock.sharded_state_dict: homogeneous stacks drop the layer
    index; moe/experts.py SequentialMLP.sharded_state_dict: local_experts.j. ->
    experts.).  Returns (key, is_layer, expert_local or None)."""
    if local.startswith("decoder.layers."):
        i, sub = local[len("decoder.layers."):].split(".", 1)
        if sub.startswith("mlp.experts.local_experts."):
            j, s = sub[len("mlp.experts.local_experts."):].split(".", 1)
            return "decoder.layers.mlp.experts.experts." + s, int(i), int(j)
        if local_spec:
            for a_, b_ in _LOCAL_SHARDED_KEYS_MAP.items():
                if sub.startswith(a_):
                    sub = b_ + sub[len(a_):]
        return "decoder.layers." + sub, int(i), None
    return local, None, None


def global_rank(t, d, p, tp, dp):
    # default rank order 'tp-cp-ep-dp-pp' with cp=1 (MLM parallel_state.py RankGenerator)
    return t + tp * d + tp * dp * p


def write_torch_dist(ck, o, outdir):
    meta = ck["meta"]
    a = meta["args"]
    m = model_from_args(a)
    if m.E and m.moe_layer_freq != 1:
        raise SystemExit("non-homogeneous MoE stacks are not covered by this fixture")
    dtype = torch.bfloat16 if o.bf16 else (torch.float16 if o.fp16 else torch.float32)
    it = ck["iteration"]
    step = meta["optimizer"]["step"]
    sch = meta["opt_param_scheduler"]
    expert_pgs = m.E > 0 and o.ep > 1
    if expert_pgs and o.dp % o.ep:
        raise SystemExit("dp must be a multiple of ep")
    edp = o.dp // o.ep if expert_pgs else o.dp
    grad_dtype = torch.float32 if dtype != torch.float16 else torch.float16
    sub = "release" if o.release else "iter_%07d" % it
    d = os.path.join(outdir, sub)
    os.makedirs(d, exist_ok=True)
    ns = make_args(meta, o, dtype)
    st = DcpStore()
    L = m.L
    common_opt = None
    for p in range(o.pp):
        for e in range(o.ep):
            for t in range(o.tp):
                rank = global_rank(t, e, p, o.tp, o.dp)
                chunks = [build_rank_tensors(ck, m, o, p, c, e, t) for c in range(o.vp)]
                for c, rows in enumerate(chunks):
                    layers = chunk_layers(L, o.pp, o.vp, p, c)
                    for loc, w, m1, m2 in rows:
                        for prefix, arr, dt in [("", w, dtype)] + (
                                [] if o.no_optim else
                                [("optimizer.state.exp_avg.", m1, torch.float32),
                                 ("optimizer.state.exp_avg_sq.", m2, torch.float32)] +
                                ([("optimizer.state.fp32_param.", w, torch.float32)] if dtype != torch.float32 else [])):
                            if prefix and o.dist_opt:
                                continue
                            dist_model_chunks(st, rank, prefix, loc, arr, dt, m, o, p, t, e, layers)
                    if not o.local_spec:
                        # TE _extra_state ShardedObjects, replica (0, tp_rank, dp): tp rank 0 writes
                        # (MLM transformer/utils.py make_sharded_tensors_for_checkpoint,
                        # make_sharded_object_for_checkpoint, _get_extra_state_offsets)
                        if t == 0:
                            for i, layer in enumerate(layers):
                                mods = [mm for mm in _TE_EXTRA_STATE_MODULES
                                        if mm.endswith("core_attention") or any(
                                            r[0].startswith("decoder.layers.%d.%s." % (i, mm)) for r in rows)]
                                for mm in mods if e == 0 else []:
                                    st.add_object(rank, "decoder.layers.%s._extra_state/shard_%d_%d" % (mm, layer, L),
                                                  [torch.empty(0, dtype=torch.uint8)])
                                if is_moe_layer(m, layer):
                                    per = m.E // o.ep
                                    for j in range(per):
                                        ge = e * per + j
                                        for s in ("linear_fc1", "linear_fc2"):
                                            st.add_object(rank, "decoder.layers.mlp.experts.experts.%s._extra_state/shard_%d.%d_%d.%d"
                                                          % (s, layer, ge, L, m.E), [torch.empty(0, dtype=torch.uint8)])
                if not o.local_spec and t == 0 and e == 0 and p == o.pp - 1:
                    # TransformerBlock.sharded_state_dict -> sharded_state_dict_default, no offsets:
                    # shape (1,), offset (0,) (transformer/utils.py _get_extra_state_offsets)
                    st.add_object(rank, "decoder.final_layernorm._extra_state/shard_0_1",
                                  [torch.empty(0, dtype=torch.uint8)])
                # rng: ShardedObject('rng_state', [dict], (PP, TP), (p, t)), replica dp (checkpointing.py get_rng_state)
                if e == 0:
                    st.add_object(rank, "rng_state/shard_%d.%d_%d.%d" % (p, t, o.pp, o.tp),
                                  [[rng_state_entry(meta.get("rng", {}).get("seed", 1234) + 100 * p + t)]])
                if not o.no_optim and o.dist_opt:
                    dist_opt_dp_reshardable(st, chunks, o, dtype, grad_dtype, step, sch, a,
                                            expert_pgs, edp, p, t, e, m)
                    # DistributedOptimizer.sharded_state_dict: what is left in the common state
                    common_opt = {"param_state_sharding_type": "dp_reshardable"}
                    if expert_pgs:
                        common_opt = {0: dict(common_opt), 1: dict(common_opt)}
    if not o.no_optim and not o.dist_opt:
        # non-distributed optimizer: tensors above; param_groups and the common step stay in the
        # common state (dist_checkpointing/optimizer.py optim_state_to_sharding_state:
        # group['params'] becomes a LocalNonpersistentObject)
        # Float16OptimizerWithFloat16Params.sharded_state_dict (optimizer.py): 'common_step' in
        # state; FP32Optimizer: the raw torch dict; ChainedOptimizer: {index: ...} (dense, experts)
        parts = []
        for is_exp in [False] + ([True] if expert_pgs else []):
            groups = []
            for wd in (1.0, 0.0):
                g = adam_group_dict(wd, [], sch, sch.get("num_steps", 0), a, is_exp)
                del g["params"]
                groups.append(g)
            inner = {"param_groups": groups, "state": {"common_step": torch.tensor(float(step))}}
            parts.append(inner if dtype == torch.float32 else {"optimizer": inner})
        common_opt = parts[0] if len(parts) == 1 else {i: v for i, v in enumerate(parts)}
    common = OrderedDict()
    common["args"] = ns
    common["checkpoint_version"] = 3.0
    common["iteration"] = 0 if o.release else it
    common["opt_param_scheduler"] = dict(sch_state(sch))
    common["num_floating_point_operations_so_far"] = int(meta.get("num_floating_point_operations_so_far", 0))
    if common_opt is not None:
        common["optimizer"] = common_opt
    # checkpointing.py _build_sharded_state_dict_metadata
    cm = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
    if o.dist_opt:
        cm["distrib_optim_sharding_type"] = "dp_reshardable"
    common["content_metadata"] = cm
    if o.common_in_dcp:
        # core >= 0.19: ShardedObject common_state/shard_0_1 holding [state_dict]
        st.add_object(0, "common_state/shard_0_1", [common])
    else:
        torch.save(common, os.path.join(d, "common.pt"))
    st.write(d)
    with open(os.path.join(d, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1}, f)
    with open(os.path.join(outdir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if o.release else str(it))


def dist_model_chunks(st, rank, prefix, loc, arr, dt, m, o, p, t, e, layers):
    """The chunks one (pp, tp, ep) rank writes for one parameter (dp rank 0 only)."""
    key, li, j = sharded_key_of(loc, m.E, o.local_spec)
    kind = tp_kind(loc, m.swiglu)
    if j is None and e != 0:
        return  # dense params: the main replica is DP rank 0, which is EP rank 0
    if kind == "rep" and t != 0:
        return  # replica_id (0, tp_rank, dp): only TP rank 0 is the main replica (mapping.py is_main_replica)
    if loc == "output_layer.weight" and m.tied:
        return  # saved under embedding.word_embeddings.weight with replica_id (1, 0, dp): not written
    x = torch.from_numpy(np.ascontiguousarray(arr)).to(dt)
    lshape = tuple(x.shape)
    tp = o.tp
    # global shape and this rank's offsets of the tensor part
    if kind == "row":
        gsh = (lshape[0] * tp,) + lshape[1:]
        pieces = [((t * lshape[0],) + (0,) * (len(lshape) - 1), x)]
    elif kind == "col":
        gsh = (lshape[0], lshape[1] * tp) + lshape[2:]
        pieces = [((0, t * lshape[1]) + (0,) * (len(lshape) - 2), x)]
    elif kind == "glu":
        # mlp.py apply_swiglu_sharded_factory: [W_r; V_r] -> fragments r and tp + r of 2*tp
        n = lshape[0] // 2
        gsh = (lshape[0] * tp,) + lshape[1:]
        rest = (0,) * (len(lshape) - 1)
        pieces = [((t * n,) + rest, x[:n]), ((tp * n + t * n,) + rest, x[n:])]
    else:
        gsh = lshape
        pieces = [((0,) * len(lshape), x)]
    pre_shape, pre_off = (), ()
    if li is not None:
        pre_shape, pre_off = (m.L,), (layers[li],)
        if j is not None:
            pre_shape, pre_off = (m.L, m.E), (layers[li], e * (m.E // o.ep) + j)
    for off, piece in pieces:
        st.add_chunk(rank, prefix + key, pre_shape + gsh, pre_off + off,
                     piece.reshape((1,) * len(pre_shape) + tuple(piece.shape)))


def dist_opt_dp_reshardable(st, chunks, o, dtype, grad_dtype, step, sch, a, expert_pgs, edp, p, t, e, m):
    """DistributedOptimizer.sharded_param_state_dp_reshardable (distrib_optimizer.py):
    per buffer and bucket the keys
      optimizer.distributed.dp_group_idx_<g>.gbuf_idx_<b>.dtype_<(param_dtype, grad_dtype)>.bucket_idx_<k>.<param|exp_avg|exp_avg_sq>
    1-D fp32 [bucket numel_unpadded], one chunk per (DP rank, param piece or gap) at
    dp_rank * local_numel + gbuf_local_start; replica (0, 0, 0), so every DP rank writes
    its own pieces.  g = the rank in the model-parallel group (optimizer/__init__.py
    data_parallel_group_idx=model_parallel_rank).  With experts (ChainedOptimizer,
    optimizer.py ChainedOptimizer.sharded_state_dict) each optimizer's keys get the
    prefix 'chained_<i>.'."""
    opts = [False] + ([True] if expert_pgs else [])
    pgs_all = []
    for oi, is_exp in enumerate(opts):
        if is_exp:
            g = (p * o.ep + e) * o.tp + t  # derived: expert model-parallel rank, tp fastest
        else:
            g = p * o.tp + t
        if not is_exp and e != 0:
            pgs_all.append(None)
            continue  # dense optimizer state of this (tp, pp) is written from ep rank 0's view
        dpsize = edp if is_exp else o.dp
        pre = ("chained_%d." % oi) if len(opts) > 1 else ""
        base = "%soptimizer.distributed.dp_group_idx_%d" % (pre, g)
        gi = 0
        per_bucket_numel, per_bucket_unpadded = [], []
        for c, rows in enumerate(chunks):
            sel = [r for r in rows if (expert_pgs and is_expert_param(r[0])) == is_exp]
            if not sel:
                continue
            bsize = o.bucket_size if (p == 0 and c == 0) else None
            shared = {"embedding.word_embeddings.weight", "output_layer.weight"} if (m.tied and o.pp > 1 and not is_exp) else set()
            index, buckets, unp = buffer_layout([(r[0], r[1].size) for r in sel], bsize, dpsize, shared)
            dkey = (dtype, grad_dtype)
            per_bucket_numel.append({dkey: [b1 - b0 for b0, b1 in buckets]})
            per_bucket_unpadded.append({dkey: list(unp)})
            flat = {r[0]: {"param": r[1].reshape(-1), "exp_avg": r[2].reshape(-1), "exp_avg_sq": r[3].reshape(-1)} for r in sel}
            for bi, (b0, b1) in enumerate(buckets):
                world = b1 - b0
                assert world % dpsize == 0
                local = world // dpsize
                bkey = "%s.gbuf_idx_%d.dtype_%s.bucket_idx_%d" % (base, gi, str(dkey), bi)
                inb = sorted((s - b0, en - b0, n) for n, (s, en, bb) in index.items() if bb == bi)
                for dr in range(dpsize):
                    lo, hi = dr * local, (dr + 1) * local
                    pieces = []
                    for s, en, n in inb:
                        a0, a1 = max(s, lo), min(en, hi)
                        if a0 < a1:
                            pieces.append((a0, a1, n, a0 - s))
                    assert pieces, "empty bucket encountered (distrib_optimizer.py)"
                    cur = lo
                    items = []
                    for a0, a1, n, po in pieces:
                        if a0 > cur and cur < unp[bi]:
                            items.append((cur, a0, None, 0))
                        items.append((a0, a1, n, po))
                        cur = a1
                    if cur < hi and cur < unp[bi]:
                        items.append((cur, hi, None, 0))
                    rank = global_rank(t, dr * (o.ep if is_exp else 1) + (e if is_exp else 0), p, o.tp, o.dp)
                    for s0, s1, n, po in items:
                        for k in ("param", "exp_avg", "exp_avg_sq"):
                            if n is None:
                                piece = torch.zeros(s1 - s0, dtype=torch.float32)
                            else:
                                piece = torch.from_numpy(np.ascontiguousarray(flat[n][k][po:po + s1 - s0]))
                            st.add_chunk(rank, "%s.%s" % (bkey, k), (unp[bi],), (s0,), piece)
            gi += 1
        for nm, val in (("per_bucket_numel", per_bucket_numel), ("per_bucket_numel_unpadded", per_bucket_unpadded)):
            st.add_object(global_rank(t, e, p, o.tp, o.dp), "%s.%s/shard_0_1" % (base, nm), [val])
        groups = []
        for wd in (1.0, 0.0):
            gd = adam_group_dict(wd, [], sch, sch.get("num_steps", 0), a, is_exp)
            del gd["params"]
            gd["step"] = float(step)
            groups.append(gd)
        st.add_object(global_rank(t, e, p, o.tp, o.dp), "%s.optimizer/shard_0_1" % base, [{"param_groups": groups}])
        if dtype == torch.float16:
            st.add_object(global_rank(t, e, p, o.tp, o.dp), "%s.grad_scaler/shard_0_1" % base,
                          [{"scale": torch.tensor(4294967296.0), "growth_tracker": 0, "hysteresis_tracker": 2}])
        pgs_all.append(groups)


# ----------------------------------------------------------------------------
# fsdp_dtensor writer (Megatron-FSDP, --use-megatron-fsdp --ckpt-format fsdp_dtensor)

FSDP_MODEL = "model.module."
FSDP_OPT = "optimizer.state.module.module.module."
FSDP_GROUP = "optimizer.param_to_group_meta.module.module.module."


def fsdp_params(ck, m, local_spec):
    """(Megatron-FSDP parameter name, fp32 array, exp_avg, exp_avg_sq) of every mgt tensor:
    per layer; the gated fc1 split into <name>_w / <name>_v (MLM transformer/
    fsdp_dtensor_checkpoint.py handle_swiglu_in_state_dict); experts at global index j,
    TEGroupedMLP's mlp.experts.linear_fc1.weight<j> or SequentialMLP's
    mlp.experts.local_experts.<j>.linear_fc1.weight with the local spec
    (handle_experts_in_state_dict)."""
    out = []
    for k, w in ck["params"].items():
        srcs = (w, ck["exp_avg"][k], ck["exp_avg_sq"][k])
        pieces = []
        if ".mlp.experts." in k:
            pre, suf = k.split(".mlp.experts.", 1)
            for j in range(w.shape[0]):
                nm = ("%s.mlp.experts.local_experts.%d.%s" % (pre, j, suf)) if local_spec else "%s%d" % (k, j)
                pieces.append((nm, tuple(x[j] for x in srcs)))
        else:
            pieces.append((k, srcs))
        for nm, xs in pieces:
            if m.swiglu and "linear_fc1." in nm:
                n = xs[0].shape[0] // 2
                out.append((nm + "_w",) + tuple(x[:n] for x in xs))
                out.append((nm + "_v",) + tuple(x[n:] for x in xs))
            else:
                out.append((nm,) + tuple(xs))
    return out


def fsdp_row_ranges(params, nranks):
    """Each rank's dim-0 rows of each parameter: the parameters laid end to end in one
    buffer cut into nranks equal element ranges, a row going to the rank its first
    element falls in (whole rows, uneven counts; a rank may hold none: MLM
    uneven_dtensor.py update_uneven_dtensor_chunk_metadata).  [(rank, row0, rows)] per
    parameter."""
    total = sum(int(np.prod(p[1].shape)) for p in params)
    per = -(-total // nranks)
    base, out = 0, []
    for _, w, _, _ in params:
        rs = int(np.prod(w.shape[1:])) if w.ndim > 1 else 1
        owner = [min((base + i * rs) // per, nranks - 1) for i in range(w.shape[0])]
        ranges = []
        for r in range(nranks):
            rows = [i for i, o_ in enumerate(owner) if o_ == r]
            if rows:
                ranges.append((r, rows[0], len(rows)))
        out.append(ranges)
        base += int(np.prod(w.shape))
    return out


def write_fsdp_dtensor(ck, o, outdir):
    """torch.distributed.checkpoint.save(FileSystemWriter) of preprocess_fsdp_dtensor_state_dict's
    dict (MLM checkpointing.py save_checkpoint, generate_state_dict), flattened by the default
    planner: the fp32 main weights model.module.<name>, Adam's
    optimizer.state.module.module.module.<name>.exp_avg / .exp_avg_sq, the param groups'
    optimizer.param_to_group_meta.module.module.module.<name>.<field>, and args, iteration,
    checkpoint_version, opt_param_scheduler.<field>, ... as BYTE_IO items (rank 0).  No
    metadata.json, no common.pt.  o.dp ranks hold uneven dim-0 row ranges."""
    meta = ck["meta"]
    m = model_from_args(meta["args"])
    if o.pp != 1 or o.vp != 1:
        raise SystemExit("fsdp_dtensor fixtures: --pp 1 --vp 1 only")
    dtype = torch.bfloat16 if o.bf16 else (torch.float16 if o.fp16 else torch.float32)
    it = ck["iteration"]
    sch = meta["opt_param_scheduler"]
    d = os.path.join(outdir, "release" if o.release else "iter_%07d" % it)
    os.makedirs(d, exist_ok=True)
    ns = make_args(meta, o, dtype)
    ns.use_megatron_fsdp = True
    ns.data_parallel_sharding_strategy = "optim_grads_params"
    st = DcpStore()
    params = fsdp_params(ck, m, o.local_spec)
    for (nm, w, m1, m2), ranges in zip(params, fsdp_row_ranges(params, o.dp)):
        kinds = [(FSDP_MODEL + nm, w)]
        if not o.no_optim:
            kinds += [(FSDP_OPT + nm + ".exp_avg", m1), (FSDP_OPT + nm + ".exp_avg_sq", m2)]
        for key, arr in kinds:
            x = torch.from_numpy(np.ascontiguousarray(arr)).to(torch.float32)
            for r, r0, n in ranges:
                st.add_chunk(r, key, x.shape, (r0,) + (0,) * (x.dim() - 1), x[r0:r0 + n])
    st.add_value(0, "args", ns)
    st.add_value(0, "checkpoint_version", 3.0)
    st.add_value(0, "iteration", 0 if o.release else it)
    if not o.no_optim:
        step = int(meta["optimizer"]["step"])
        for nm, w, _, _ in params:
            wd = 0.0 if w.ndim < 2 or nm.endswith("bias") else float(meta["args"].get("weight_decay", 0.01))
            for f, v in (("lr", scheduler_lr(sch, sch.get("num_steps", 0))), ("weight_decay", wd), ("step", step)):
                st.add_value(0, FSDP_GROUP + nm + "." + f, v)
        for f, v in sch_state(sch).items():
            st.add_value(0, "opt_param_scheduler." + f, v)
    st.add_value(0, "num_floating_point_operations_so_far", int(meta.get("num_floating_point_operations_so_far", 0)))
    for r in range(o.dp):
        st.add_value(r, "rng_state.(0, %d)" % r, [rng_state_entry(meta.get("rng", {}).get("seed", 1234) + r)])
    st.write(d)
    with open(os.path.join(outdir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if o.release else str(it))


def read_fsdp_dtensor(d, tens, objs):
    """The fsdp_dtensor keys back to mgt's names: _w/_v concatenated, experts stacked."""
    a = objs["args"]
    out, experts = {}, {}
    for k, v in tens.items():
        if k.startswith(FSDP_MODEL):
            pre, nm = "", k[len(FSDP_MODEL):]
        elif k.startswith(FSDP_OPT):
            nm, kind = k[len(FSDP_OPT):].rsplit(".", 1)
            pre = "optimizer.state.%s." % kind
        else:
            continue
        arr = to_np32(v)
        if nm.endswith("_v"):
            continue
        if nm.endswith("_w"):
            other = FSDP_OPT + nm[:-2] + "_v." + kind if pre else FSDP_MODEL + nm[:-2] + "_v"
            arr = np.concatenate([arr, to_np32(tens[other])])
            nm = nm[:-2]
        if ".mlp.experts.local_experts." in nm:
            head, rest = nm.split(".mlp.experts.local_experts.", 1)
            j, suf = rest.split(".", 1)
            experts.setdefault(pre + head + ".mlp.experts." + suf, {})[int(j)] = arr
        elif ".mlp.experts." in nm:
            base = nm.rstrip("0123456789")
            experts.setdefault(pre + base, {})[int(nm[len(base):])] = arr
        else:
            out[pre + nm] = arr
    for k, byj in experts.items():
        out[k] = np.stack([byj[j] for j in range(len(byj))])
    if any(k.startswith("optimizer.state.exp_avg.") for k in out):
        for n in [k for k in out if not k.startswith("optimizer.")]:
            out["optimizer.state.fp32_param." + n] = out[n]  # the model entries are the main weights
    steps = {v for k, v in objs.items() if k.startswith(FSDP_GROUP) and k.endswith(".step")}
    sch = {k.split(".", 1)[1]: v for k, v in objs.items() if k.startswith("opt_param_scheduler.")}
    model_dtype = {str(v.dtype) for k, v in tens.items() if k.startswith(FSDP_MODEL)}
    scal = {"iteration": objs.get("iteration", 0), "checkpoint_version": objs.get("checkpoint_version"),
            "consumed_train_samples": getattr(a, "consumed_train_samples", None),
            "consumed_valid_samples": getattr(a, "consumed_valid_samples", None),
            "opt_param_scheduler": sch or None, "optimizer_step": float(steps.pop()) if len(steps) == 1 else None,
            "args": {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(a).items()},
            "model_dtype": model_dtype.pop() if len(model_dtype) == 1 else str(model_dtype)}
    return out, scal


# ----------------------------------------------------------------------------
# torch_dist reader


def dcp_read(d):
    """Returns (metadata, tensors {key: torch tensor}, objects {key: loaded list})."""
    with open(os.path.join(d, ".metadata"), "rb") as f:
        md = MetadataUnpickler(f).load()
    index = {}
    for k, v in md.storage_data.items():
        index[(k.fqn, tuple(k.offset) if k.offset is not None else None)] = v
    cache = {}

    def item(fqn, off):
        si = index[(fqn, off)]
        path = os.path.join(d, si.relative_path)
        if path not in cache:
            with open(path, "rb") as f:
                cache[path] = f.read()
        return cache[path][si.offset:si.offset + si.length]

    tensors, objects = {}, {}
    for k, v in md.state_dict_metadata.items():
        if type(v).__name__ == "BytesStorageMetadata":
            objects[k] = torch_load_bytes(item(k, None))
            continue
        full = torch.zeros(tuple(v.size), dtype=v.properties.dtype)
        covered = 0
        for ch in v.chunks:
            t = torch_load_bytes(item(k, tuple(ch.offsets)))
            assert tuple(t.shape) == tuple(ch.sizes), (k, t.shape, ch.sizes)
            sl = tuple(slice(o_, o_ + s_) for o_, s_ in zip(ch.offsets, ch.sizes))
            full[sl] = t
            covered += t.numel()
        assert covered == full.numel(), "%s: chunks cover %d of %d elements" % (k, covered, full.numel())
        tensors[k] = full
    return md, tensors, objects


def check_torch_dist_metadata(root):
    """Unpickle .metadata with the stubs and check the chunk lists: every
    tensor key's chunks tile its global shape, each has a storage entry."""
    n = 0
    for dp_, _, fs in os.walk(root):
        if ".metadata" in fs:
            with open(os.path.join(dp_, ".metadata"), "rb") as f:
                raw = f.read()
            assert raw[:2] == b"\x80\x04", "pickle protocol 4 expected"
            md = MetadataUnpickler(io.BytesIO(raw)).load()
            keys = {(k.fqn, tuple(k.offset) if k.offset is not None else None) for k in md.storage_data}
            for k, v in md.state_dict_metadata.items():
                if type(v).__name__ == "TensorStorageMetadata":
                    assert isinstance(v.size, torch.Size)
                    tot = 0
                    for ch in v.chunks:
                        assert (k, tuple(ch.offsets)) in keys, (k, ch.offsets)
                        assert all(o_ + s_ <= g_ for o_, s_, g_ in zip(ch.offsets, ch.sizes, v.size))
                        tot += int(np.prod(ch.sizes))
                    assert tot == int(np.prod(v.size)), (k, tot, v.size)
                    assert isinstance(v.properties.dtype, torch.dtype)
                    n += 1
                else:
                    assert (k, None) in keys, k
    return n


def read_torch_dist(d):
    md, tens, objs = dcp_read(d)
    if not os.path.exists(os.path.join(d, "common.pt")) and "args" in objs:
        return read_fsdp_dtensor(d, tens, objs)
    if os.path.exists(os.path.join(d, "common.pt")):
        common = torch.load(os.path.join(d, "common.pt"), map_location="cpu")
    else:
        common = objs["common_state/shard_0_1"][0]
    a = common["args"]
    m = model_from_args(a)
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    vp = args_get(a, "virtual_pipeline_model_parallel_size", 1)
    ep = args_get(a, "expert_model_parallel_size", 1)
    out = {}
    model_dtype = None
    # un-stack the model and the non-distributed optimizer keys
    for k, v in tens.items():
        if k.startswith("optimizer.distributed.") or k.startswith("chained_"):
            continue
        prefix = ""
        for pr in ("optimizer.state.exp_avg_sq.", "optimizer.state.exp_avg.", "optimizer.state.fp32_param."):
            if k.startswith(pr):
                prefix, k = pr, k[len(pr):]
                break
        if not prefix:
            model_dtype = v.dtype
        arr = to_np32(v)
        if k.startswith("decoder.layers.") and not k[len("decoder.layers."):].split(".")[0].isdigit():
            sub = k[len("decoder.layers."):]
            for layer in range(arr.shape[0]):
                if sub.startswith("mlp.experts.experts."):
                    out[prefix + "decoder.layers.%d.mlp.experts.%s" % (layer, sub[len("mlp.experts.experts."):])] = arr[layer]
                else:
                    nm = sub
                    if is_moe_layer(m, layer):
                        # a MoE layer's norm is pre_mlp_layernorm; local-spec files spell it
                        # mlp.linear_fc1.layer_norm_* (sharded_state_dict_keys_map)
                        if sub.startswith("mlp.linear_fc1.layer_norm_"):
                            nm = "pre_mlp_layernorm." + sub[len("mlp.linear_fc1.layer_norm_"):]
                        elif sub.startswith("input_layernorm."):
                            nm = _LOCAL_TO_TE[sub]
                    else:
                        nm = _LOCAL_TO_TE.get(sub, sub)
                    out[prefix + "decoder.layers.%d.%s" % (layer, nm)] = arr[layer]
        else:
            out[prefix + k] = arr
    model_names = [k for k in out if not k.startswith("optimizer.")]
    if args_get(a, "use_distributed_optimizer", False) and any(k.startswith("optimizer.distributed.") or
                                                                k.startswith("chained_") for k in tens):
        read_dp_reshardable(tens, out, a, m, model_names)
        check_bucket_padding(objs, a, m)
    elif any(k.startswith("optimizer.state.exp_avg.") for k in out) and not any(
            k.startswith("optimizer.state.fp32_param.") for k in out):
        for n in model_names:
            out["optimizer.state.fp32_param." + n] = out[n]  # fp32 training: main params are the weights
    opt = common.get("optimizer") or {}
    step = None
    if 0 in opt:
        opt = opt[0]  # ChainedOptimizer
    st_ = (opt.get("optimizer") or opt).get("state") or {}
    if "common_step" in st_:
        step = float(st_["common_step"])
    for k, v in objs.items():
        if k.endswith(".optimizer/shard_0_1") and step is None:
            pg = v[0]["param_groups"]
            if pg and "step" in pg[0]:
                step = float(pg[0]["step"])
    sch = common.get("opt_param_scheduler")
    scal = {"iteration": common.get("iteration", 0), "checkpoint_version": common.get("checkpoint_version"),
            "consumed_train_samples": getattr(a, "consumed_train_samples", None),
            "consumed_valid_samples": getattr(a, "consumed_valid_samples", None),
            "opt_param_scheduler": dict(sch) if sch is not None else None, "optimizer_step": step,
            "args": {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(a).items()},
            "model_dtype": str(model_dtype), "content_metadata": common.get("content_metadata")}
    return out, scal


def check_bucket_padding(objs, a, m):
    """per_bucket_numel (padded) against per_bucket_numel_unpadded: each bucket
    is padded to the next multiple of lcm(dp, 128) (param_layout.py
    pad_bucket_end; dp = the expert data-parallel size for chained_1)."""
    dp = args_get(a, "data_parallel_size", 1)
    ep = args_get(a, "expert_model_parallel_size", 1)
    for k, v in objs.items():
        if not k.endswith(".per_bucket_numel/shard_0_1"):
            continue
        unp = objs[k.replace(".per_bucket_numel/", ".per_bucket_numel_unpadded/")][0]
        d = dp // ep if k.startswith("chained_1.") else dp
        div = math.lcm(d, 128)
        for gb, gu in zip(v[0], unp):
            (dk, nums), = gb.items()
            (_, nu), = gu.items()
            for n, u in zip(nums, nu):
                if n != -(-u // div) * div:
                    raise ValueError("%s: bucket of %d elements padded to %d, want a multiple of %d" % (k, u, n, div))


def read_dp_reshardable(tens, out, a, m, model_names):
    """Undo the dp_reshardable buckets: concatenating a buffer's bucket tensors
    gives distrib_optim.pt's coalesced layout; the per-rank parameter lists
    come from the global model (names, TP split rules, parameter order)."""
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    vp = args_get(a, "virtual_pipeline_model_parallel_size", 1)
    ep = args_get(a, "expert_model_parallel_size", 1)
    dp = args_get(a, "data_parallel_size", 1)
    expert_pgs = m.E > 0 and ep > 1
    edp = dp // ep if expert_pgs else dp
    local_spec = args_get(a, "transformer_impl", "transformer_engine") == "local"
    gl = {n: out[n] for n in model_names}
    has_pos = "embedding.position_embeddings.weight" in gl
    final_norm = [x for x in ("weight", "bias") if "decoder.final_layernorm." + x in gl]

    def names_in_layer(layer):
        pre = "decoder.layers.%d." % layer
        return sorted({k[len(pre):] for k in gl if k.startswith(pre)},
                      key=lambda s: param_sort_key("decoder.layers.0." + (
                          "mlp.experts.local_experts.0." + s[len("mlp.experts."):] if s.startswith("mlp.experts.") else s)))

    col = Collector(m.swiglu)
    nopt = 2 if expert_pgs else 1
    for p in range(pp):
        for e in range(ep):
            for t in range(tp):
                specs = [chunk_param_specs(m, names_in_layer, p, c, pp, vp, e, ep, local_spec, has_pos, final_norm)
                         for c in range(vp)]
                for oi in range(nopt):
                    is_exp = oi == 1
                    if not is_exp and e != 0:
                        continue
                    g = (p * ep + e) * tp + t if is_exp else p * tp + t
                    pre = ("chained_%d." % oi) if nopt > 1 else ""
                    base = "%soptimizer.distributed.dp_group_idx_%d" % (pre, g)
                    gi = 0
                    for c in range(vp):
                        sel = []
                        for loc, gname, ex in specs[c]:
                            if (expert_pgs and is_expert_param(loc)) != is_exp:
                                continue
                            x = gl[gname] if ex is None else gl[gname][ex]
                            shape = tp_shard(x, tp_kind(loc, m.swiglu), t, tp).shape
                            sel.append((loc, gname, ex, shape))
                        if not sel:
                            continue
                        bkeys = sorted((k for k in tens if k.startswith("%s.gbuf_idx_%d." % (base, gi)) and k.endswith(".param")),
                                       key=lambda k: int(k.split(".bucket_idx_")[1].split(".")[0]))
                        assert bkeys, "no buckets for %s gbuf %d" % (base, gi)
                        comp = {kk: np.concatenate([to_np32(tens[b[:-len("param")] + kk]) for b in bkeys])
                                for kk in ("param", "exp_avg", "exp_avg_sq")}
                        if args_get(a, "overlap_grad_reduce", False):
                            bs = args_get(a, "ddp_bucket_size", None) or max(40000000, 1000000 * (edp if is_exp else dp))
                        else:
                            bs = None
                        shared = {"embedding.word_embeddings.weight", "output_layer.weight"} if (m.tied and pp > 1 and not is_exp) else set()
                        bsz = []
                        offs, total = reader_offsets([(s[0], int(np.prod(s[3]))) for s in sel],
                                                     bs if (p == 0 and c == 0) else None, edp if is_exp else dp, shared, bsz)
                        got_bsz = [int(tens[b].numel()) for b in bkeys]
                        assert got_bsz == bsz, "%s gbuf %d: buckets %s, layout says %s" % (base, gi, got_bsz, bsz)
                        assert total == comp["param"].size, "%s gbuf %d: %d elements, layout says %d" % (base, gi, comp["param"].size, total)
                        for loc, gname, ex, shape in sel:
                            if loc == "output_layer.weight" and m.tied:
                                continue
                            s = offs[loc]
                            n = int(np.prod(shape))
                            for kk, name in (("param", "fp32_param"), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
                                col.add("optimizer.state.%s." % name, gname, ex, t, comp[kk][s:s + n].reshape(shape), loc)
                        gi += 1
    out.update(col.result())


# ----------------------------------------------------------------------------
# CLI


def cmd_to_megatron(o):
    ck = load_mgt(o.mgt)
    if o.format == "torch":
        write_legacy(ck, o, o.out)
    elif o.format == "fsdp_dtensor":
        write_fsdp_dtensor(ck, o, o.out)
    else:
        write_torch_dist(ck, o, o.out)


def read_any(root, iteration=None):
    d = find_iteration_dir(root, iteration)
    if os.path.exists(os.path.join(d, ".metadata")):
        return read_torch_dist(d)
    return read_legacy(d)


def json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return repr(v)


def cmd_from_megatron(o):
    tensors, scal = read_any(o.dir, o.iteration)
    np.savez(o.out, **tensors)
    js = os.path.splitext(o.out)[0] + ".json"
    with open(js, "w") as f:
        json.dump(scal, f, indent=1, sort_keys=True, default=json_default)


def add_layout_args(ap):
    ap.add_argument("--format", choices=["torch", "torch_dist", "fsdp_dtensor"], default="torch")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--vp", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--dist-opt", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--local-spec", action="store_true")
    ap.add_argument("--no-optim", action="store_true")
    ap.add_argument("--release", action="store_true")
    ap.add_argument("--bucket-size", type=int, default=None,
                    help="DDP bucket size in elements (implies --overlap-grad-reduce); default one bucket")
    ap.add_argument("--common-in-dcp", action="store_true",
                    help="torch_dist: common state as the common_state/shard_0_1 item (core >= 0.19) instead of common.pt")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    a = sp.add_parser("to-megatron")
    a.add_argument("--mgt", required=True)
    a.add_argument("--out", required=True)
    add_layout_args(a)
    b = sp.add_parser("from-megatron")
    b.add_argument("--dir", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--iteration", type=int, default=None)
    c = sp.add_parser("selftest")
    c.add_argument("--keep", default=None, help="work directory to keep")
    c.add_argument("--mgt-bin", default=None, help="directory with mgt-train (default: bin/ of this checkout)")
    c.add_argument("--quick", action="store_true")
    o = ap.parse_args(argv)
    if o.cmd == "to-megatron":
        if o.bf16 and o.fp16:
            ap.error("--bf16 and --fp16 exclude each other")
        cmd_to_megatron(o)
    elif o.cmd == "from-megatron":
        cmd_from_megatron(o)
    else:
        return selftest(o)
    return 0


# ----------------------------------------------------------------------------
# selftest

# name -> mgt-train arguments; "odd" has 96-wide norms so that the distributed
# optimizer's 64-element start padding is exercised (the presets' sizes are all
# multiples of 64).
PRESETS = {
    "tiny-llama": ["--model", "tiny-llama"],
    "tiny-gpt2": ["--model", "tiny-gpt2"],
    "tiny-moe": ["--model", "tiny-moe"],
    "odd": ["--model", "tiny-llama", "--hidden-size", "96", "--num-attention-heads", "6",
            "--num-query-groups", "2", "--ffn-hidden-size", "200"],
}
LAYOUTS = [
    # (preset, format, flags)
    ("tiny-llama", "torch", "--tp 2 --pp 2 --dp 2 --dist-opt --bf16"),
    ("tiny-llama", "torch", "--tp 1 --pp 1"),
    ("tiny-llama", "torch", "--tp 2 --pp 2 --bf16"),
    ("tiny-llama", "torch", "--pp 2 --vp 2 --dist-opt --dp 4 --bf16"),
    ("tiny-llama", "torch", "--tp 2 --local-spec --fp16"),
    ("tiny-llama", "torch", "--tp 2 --dist-opt --dp 3 --bucket-size 20000"),
    ("tiny-llama", "torch", "--tp 2 --pp 2 --no-optim --release --bf16"),
    ("odd", "torch", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
    ("odd", "torch", "--dist-opt --dp 3 --bucket-size 10000"),
    ("odd", "torch", "--tp 2 --bf16"),
    ("tiny-gpt2", "torch", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
    ("tiny-gpt2", "torch", "--tp 1 --pp 1 --dist-opt"),
    ("tiny-gpt2", "torch", "--pp 2 --vp 2 --bf16"),
    ("tiny-gpt2", "torch", "--tp 2 --local-spec"),
    ("tiny-moe", "torch", "--ep 2 --dp 2 --dist-opt --bf16"),
    ("tiny-moe", "torch", "--ep 2 --tp 2 --pp 2 --dp 2 --bf16"),
    ("tiny-moe", "torch", "--ep 1 --tp 2 --dist-opt"),
    ("tiny-moe", "torch", "--local-spec --ep 2 --dp 2 --dist-opt"),
    ("tiny-llama", "torch_dist", "--tp 2 --pp 2 --dp 2 --dist-opt --bf16"),
    ("tiny-llama", "torch_dist", "--tp 1 --pp 1"),
    ("tiny-llama", "torch_dist", "--pp 2 --vp 2 --bf16 --common-in-dcp"),
    ("tiny-gpt2", "torch_dist", "--tp 2 --pp 2 --bf16"),
    ("tiny-gpt2", "torch_dist", "--tp 2 --dist-opt --dp 2"),
    ("tiny-gpt2", "torch_dist", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
    ("odd", "torch_dist", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
    ("tiny-moe", "torch_dist", "--ep 2 --dp 2 --tp 2 --bf16"),
    ("tiny-moe", "torch_dist", "--ep 2 --dp 2 --dist-opt --bf16"),
    ("tiny-moe", "torch_dist", "--local-spec --ep 2 --dp 2 --tp 2"),
    ("tiny-llama", "torch_dist", "--local-spec --tp 2 --fp16"),
    ("odd", "torch_dist", "--dist-opt --dp 3 --bucket-size 10000 --fp16"),
    # Megatron-FSDP: uneven dim-0 row ranges over --dp ranks, fp32 main weights whatever the dtype
    ("tiny-llama", "fsdp_dtensor", "--dp 3 --bf16"),
    ("tiny-gpt2", "fsdp_dtensor", "--dp 2 --tp 2"),
    ("odd", "fsdp_dtensor", "--dp 5 --no-optim --release"),
    ("tiny-moe", "fsdp_dtensor", "--dp 4 --ep 2 --bf16"),
    ("tiny-moe", "fsdp_dtensor", "--dp 3 --local-spec"),
]


# --quick: one layout per main rule (legacy TP2xPP2 dist-opt bf16, 64-element padding with
# buckets, tied PP2 dist-opt, MoE EP2 dist-opt, torch_dist padding, tied and MoE torch_dist)
QUICK = [("tiny-llama", "torch", "--tp 2 --pp 2 --dp 2 --dist-opt --bf16"),
         ("odd", "torch", "--dist-opt --dp 3 --bucket-size 10000"),
         ("tiny-gpt2", "torch", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
         ("tiny-moe", "torch", "--ep 2 --dp 2 --dist-opt --bf16"),
         ("tiny-gpt2", "torch_dist", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
         ("odd", "torch_dist", "--tp 2 --pp 2 --dist-opt --dp 2 --bf16"),
         ("tiny-moe", "torch_dist", "--ep 2 --dp 2 --dist-opt --bf16"),
         ("tiny-moe", "fsdp_dtensor", "--dp 4 --ep 2 --bf16")]


def bf16_round(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).to(torch.float32).numpy()


def fp16_round(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float16).to(torch.float32).numpy()


def expected_tensors(ck, flags):
    rnd = bf16_round if "--bf16" in flags else (fp16_round if "--fp16" in flags else (lambda x: x))
    exp = {}
    for k, v in ck["params"].items():
        exp[k] = rnd(v)
    if "--no-optim" not in flags:
        for k, v in ck["params"].items():
            exp["optimizer.state.fp32_param." + k] = v
            exp["optimizer.state.exp_avg." + k] = ck["exp_avg"][k]
            exp["optimizer.state.exp_avg_sq." + k] = ck["exp_avg_sq"][k]
    return exp


def compare(exp, got, scal, ck, flags):
    errs = []
    for k in sorted(set(exp) | set(got)):
        if k not in got:
            errs.append("missing " + k)
        elif k not in exp:
            errs.append("unexpected " + k)
        elif exp[k].shape != got[k].shape:
            errs.append("%s shape %s != %s" % (k, got[k].shape, exp[k].shape))
        elif not np.array_equal(exp[k].view(np.uint32), got[k].astype(np.float32).view(np.uint32)):
            n = int((exp[k].view(np.uint32) != got[k].astype(np.float32).view(np.uint32)).sum())
            errs.append("%s: %d elements differ" % (k, n))
    meta = ck["meta"]
    want = {"iteration": 0 if "--release" in flags else ck["iteration"],
            "consumed_train_samples": meta["consumed_train_samples"],
            "consumed_valid_samples": meta["consumed_valid_samples"],
            "checkpoint_version": 3.0}
    if "--no-optim" not in flags:
        want["optimizer_step"] = float(meta["optimizer"]["step"])
    for k, v in want.items():
        if scal.get(k) != v:
            errs.append("scalar %s = %r, want %r" % (k, scal.get(k), v))
    sch = scal.get("opt_param_scheduler") or {}
    # generate_state_dict saves opt_param_scheduler with the optimizer only (fsdp_dtensor's
    # fixture follows it; the others always write it)
    skip_sch = "--no-optim" in flags and scal.get("opt_param_scheduler") is None and "args" in scal and \
        scal["args"].get("ckpt_format") == "fsdp_dtensor"
    for k in () if skip_sch else ("max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps", "num_steps", "lr_decay_style"):
        if sch.get(k) != meta["opt_param_scheduler"].get(k):
            errs.append("scheduler %s = %r, want %r" % (k, sch.get(k), meta["opt_param_scheduler"].get(k)))
    for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
              "kv_channels", "swiglu", "normalization", "position_embedding_type",
              "untie_embeddings_and_output_weights", "padded_vocab_size", "num_experts", "seed"):
        if scal["args"].get(k) != meta["args"].get(k):
            errs.append("args.%s = %r, want %r" % (k, scal["args"].get(k), meta["args"].get(k)))
    want_dt = "torch.bfloat16" if "--bf16" in flags else ("torch.float16" if "--fp16" in flags else "torch.float32")
    if scal.get("model_dtype") != want_dt:
        errs.append("model dtype %s, want %s" % (scal.get("model_dtype"), want_dt))
    return errs


def train_preset(mgt_bin, preset, work):
    save = os.path.join(work, "mgt-" + preset)
    if os.path.exists(os.path.join(save, "latest_checkpointed_iteration.txt")):
        return save
    cmd = [os.path.join(mgt_bin, "mgt-train")] + PRESETS[preset] + ["--mock-data", "--tokenizer-type", "NullTokenizer",
           "--vocab-size", "512", "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
           "--train-iters", "3", "--lr", "1e-3", "--log-interval", "1", "--threads", "2", "--save", save,
           "--save-interval", "3", "--device", "cpu"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return save


def check_legacy_files(root):
    """Every legacy file opens with plain torch 1.13 torch.load and is a zip
    whose records sit under '<archive>/' (A4)."""
    n = 0
    for dp, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".pt"):
                path = os.path.join(dp, f)
                with zipfile.ZipFile(path) as z:
                    names = z.namelist()
                    pre = names[0].split("/")[0]
                    assert pre == f[:-3], (path, pre)
                    assert pre + "/data.pkl" in names
                    assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
                torch.load(path, map_location="cpu")
                n += 1
    return n


# The parameter order of the header, restated literally (a second statement of
# _LAYER_ORDER_TE / param_sort_key, which the writer and the reader share: a
# round trip cannot see a wrong order, this comparison can).
SPEC_ORDER_TE_DENSE_FIRST_LAST = [
    "embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
    "decoder.layers.0.self_attention.linear_proj.weight", "decoder.layers.0.self_attention.linear_proj.bias",
    "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
    "decoder.layers.0.self_attention.linear_qkv.layer_norm_bias",
    "decoder.layers.0.self_attention.linear_qkv.weight", "decoder.layers.0.self_attention.linear_qkv.bias",
    "decoder.layers.0.mlp.linear_fc1.layer_norm_weight", "decoder.layers.0.mlp.linear_fc1.layer_norm_bias",
    "decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.0.mlp.linear_fc1.bias",
    "decoder.layers.0.mlp.linear_fc2.weight", "decoder.layers.0.mlp.linear_fc2.bias",
    "decoder.layers.1.self_attention.linear_proj.weight",
    "decoder.final_layernorm.weight", "decoder.final_layernorm.bias", "output_layer.weight"]
SPEC_ORDER_LOCAL_MOE = [
    "decoder.layers.0.input_layernorm.weight", "decoder.layers.0.input_layernorm.bias",
    "decoder.layers.0.self_attention.linear_proj.weight", "decoder.layers.0.self_attention.linear_qkv.weight",
    "decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.mlp.router.weight",
    "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight",
    "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight",
    "decoder.layers.0.mlp.experts.local_experts.1.linear_fc1.weight",
    "decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight",
    "decoder.layers.1.input_layernorm.weight"]


# Global layers per (pp rank, VPP chunk) for L=8, pp=2, vp=2, restated from the
# facts (transformer_layer.py get_transformer_layer_offset).
SPEC_CHUNK_LAYERS_8_2_2 = {(0, 0): [0, 1], (1, 0): [2, 3], (0, 1): [4, 5], (1, 1): [6, 7]}


def check_param_order():
    errs = []
    for (p, c), want in SPEC_CHUNK_LAYERS_8_2_2.items():
        if chunk_layers(8, 2, 2, p, c) != want:
            errs.append("chunk_layers(8, 2, 2, %d, %d) = %s, want %s" % (p, c, chunk_layers(8, 2, 2, p, c), want))
    for spec in (SPEC_ORDER_TE_DENSE_FIRST_LAST, SPEC_ORDER_LOCAL_MOE):
        got = sorted(reversed(spec), key=param_sort_key)
        if got != spec:
            errs.append("parameter order: %s" % [n for n, s in zip(got, spec) if n != s][:3])
    return errs


def selftest(o):
    errs = check_param_order()
    if errs:
        print("FAIL parameter order (param_sort_key against the header's literal lists)")
        for e in errs:
            print("   ", e)
        return 1
    print("ok   parameter order (param_sort_key against the header's literal lists)")
    here = os.path.dirname(os.path.abspath(__file__))
    mgt_bin = o.mgt_bin or os.path.join(here, "..", "..", "bin")
    work = o.keep or tempfile.mkdtemp(prefix="megatron_ckpt.")
    os.makedirs(work, exist_ok=True)
    cks = {}
    fails = 0
    assert all(q in LAYOUTS for q in QUICK)
    layouts = QUICK if o.quick else LAYOUTS
    for preset, fmt, flags in layouts:
        if preset not in cks:
            cks[preset] = (train_preset(mgt_bin, preset, work), None)
            cks[preset] = (cks[preset][0], load_mgt(cks[preset][0]))
        save, ck = cks[preset]
        tag = "%s %s %s" % (preset, fmt, flags)
        out = os.path.join(work, "out", (preset + "-" + fmt + flags.replace(" ", "")).replace("--", "_"))
        shutil.rmtree(out, ignore_errors=True)
        try:
            main(["to-megatron", "--mgt", save, "--out", out, "--format", fmt] + flags.split())
            extra = ""
            if fmt == "torch":
                extra = " (%d .pt files load)" % check_legacy_files(out)
            else:
                extra = " (%d chunk lists)" % check_torch_dist_metadata(out)
            npz = out + ".npz"
            main(["from-megatron", "--dir", out, "--out", npz])
            got = dict(np.load(npz))
            with open(out + ".json") as f:
                scal = json.load(f)
            # fsdp_dtensor's model entries are the fp32 main weights
            eflags = flags if fmt != "fsdp_dtensor" else flags.replace("--bf16", "").replace("--fp16", "")
            errs = compare(expected_tensors(ck, eflags), got, scal, ck, eflags)
        except Exception as ex:  # report and go on
            import traceback
            traceback.print_exc()
            errs = ["exception: %r" % (ex,)]
            extra = ""
        if errs:
            fails += 1
            print("FAIL %s" % tag)
            for e in errs[:20]:
                print("   ", e)
        else:
            print("ok   %s: %d tensors bit-equal%s" % (tag, len(got), extra))
    if not o.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("%d/%d layouts failed" % (fails, len(layouts)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
