#!/usr/bin/python3
"""Make a tiny random Hugging Face model directory (config.json, generation_config.json, safetensors).

usage: make_tiny.py FAMILY OUTDIR [--dtype bf16|fp16|fp32] [--vocab N] [--layers N] [--hidden N]
                    [--heads N] [--kv-heads N] [--head-dim N] [--ffn N] [--seed N] [--shard-bytes N]
                    [--tie | --untie] [--rope-orig N] [--gpt2-prefix none|transformer]
                    [--gpt2-buffers none|bias|masked] [--experts N] [--topk K] [--moe-ffn N]
                    [--shared-ffn N] [--sparse-step N] [--mlp-only L,L,...] [--norm-topk|--no-norm-topk]
FAMILY: gpt2 llama2 llama3 llama3.1 llama3.2 mistral qwen2 qwen3 mixtral qwen2_moe qwen3_moe

The files follow what transformers' save_pretrained writes for each family (facts read from
huggingface/transformers: models/<family>/configuration_<family>.py for the config keys and defaults,
modeling_<family>.py for the parameter names and shapes, and the published config.json files of
openai-community/gpt2, meta-llama/Llama-2-7b-hf, Meta-Llama-3-8B, Llama-3.1-8B, Llama-3.2-1B,
mistralai/Mistral-7B-v0.3, Qwen/Qwen2-0.5B and Qwen/Qwen3-0.6B; for the Mixture-of-Experts families
models/{mixtral,qwen2_moe,qwen3_moe}/ and the config.json keys of mistralai/Mixtral-8x7B-v0.1,
Qwen/Qwen1.5-MoE-A2.7B and Qwen/Qwen3-30B-A3B):
- Linear weights are [out, in] (nn.Linear); GPT-2's Conv1D weights are [in, out], c_attn's columns
  are [Q | K | V].
- Tied embeddings: lm_head.weight is not saved (safetensors drops the shared tensor).
- GPT-2: openai-community/gpt2's model.safetensors has no "transformer." prefix and holds the causal
  mask buffers h.N.attn.bias ([1,1,n_positions,n_positions] lower-triangular ones); newer saves of
  GPT2LMHeadModel use the "transformer." prefix and no buffers (persistent=False); some older files
  (e.g. microsoft/DialoGPT-small) also hold h.N.attn.masked_bias (a scalar -1e4).  --gpt2-prefix and
  --gpt2-buffers select these variants.
- Weights are random normal (std 0.05-0.4 by role) so that attention is not uniform and logits are
  not flat; norm weights are 1 + 0.1*N(0,1), biases 0.05-0.1*N(0,1).  Values are drawn in float32,
  then rounded to the file dtype (bf16: round to nearest even, st.f32_to_bf16_bits).
- The default vocabulary (1000) is not a multiple of 128, so converters must pad it.
- Mixture of Experts, as the files on the Hub name them: Mixtral (MixtralSparseMoeBlock)
  model.layers.N.block_sparse_moe.gate.weight [E, h] and ...experts.E.w1 (gate) / w3 (up) [F, h],
  w2 [h, F], every layer sparse (num_local_experts, num_experts_per_tok, intermediate_size = F).
  Qwen2-MoE / Qwen3-MoE (Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock) model.layers.N.mlp.gate.weight
  [E, h], mlp.experts.E.{gate,up,down}_proj (moe_intermediate_size), Qwen2-MoE also
  mlp.shared_expert.{gate,up,down}_proj (shared_expert_intermediate_size) and
  mlp.shared_expert_gate.weight [1, h]; layer l is sparse when l is not in mlp_only_layers and
  (l + 1) % decoder_sparse_step == 0, else a dense mlp.{gate,up,down}_proj of intermediate_size.
  Router weights get std 0.5 so that the top-k choice is far from ties (the reference and mgt
  must pick the same experts).  Defaults: mixtral 4 experts top-2; qwen2_moe 8 experts top-4,
  norm_topk_prob false, shared expert 96, decoder_sparse_step 2 (layers 1, 3 sparse with 4
  layers); qwen3_moe 8 experts top-2, norm_topk_prob true, mlp_only_layers [0]; expert size 48.

Llama 3.1/3.2 rope scaling (rope_type llama3, factor 8 / 32, low_freq_factor 1, high_freq_factor 4,
rope_theta 500000) with a tiny head_dim: the real original_max_position_embeddings 8192 would put
almost every frequency of a short test sequence in the "unchanged" region and the effect of scaling
at positions < 64 would be invisible.  So the tiny models use original_max_position_embeddings = 64:
the thresholds become high_freq_wavelen = 64/4 = 16 and low_freq_wavelen = 64/1 = 64.  With head_dim
16 the wavelengths 2*pi*500000^(2i/16) are 6.3, 32.4, 167, 861, ... : i=0 is below 16 (kept), i=1 lies
between 16 and 64 (smoothed), i>=2 are above 64 (divided by factor), and at positions 0..63 the
scaled low frequencies change the angles by far more than rounding.  make_tiny checks that every
region holds at least one frequency for the chosen head_dim and refuses otherwise (--rope-orig N
changes the value).  max_position_embeddings = factor * original.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

FAMILIES = ("gpt2", "llama2", "llama3", "llama3.1", "llama3.2", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe",
            "qwen3_moe", "nemotron_h", "mamba2")
HYBRID = ("nemotron_h", "mamba2")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe")
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ST_DTYPE = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}


def putter(rng, sdt, tensors):
    """put(name, shape, std, mean, value): a tensor of mean + std N(0, 1) (or value) in float32,
    rounded to the file dtype sdt, appended to tensors."""
    def put(name, shape, std=None, mean=0.0, value=None):
        if value is None:
            value = mean + std * rng.standard_normal(shape, dtype=np.float32)
        tensors.append((name, sdt, st.from_f32(np.asarray(value, np.float32).reshape(shape), sdt)))
    return put


def write_dir(a, tensors, cfg, gen):
    """The weights (st.save_dir, shards of a.shard_bytes), config.json and generation_config.json
    (sorted keys, written under a temporary name and renamed) into a.outdir."""
    os.makedirs(a.outdir, exist_ok=True)
    st.save_dir(a.outdir, tensors, a.shard_bytes)
    for fn, obj in (("config.json", cfg), ("generation_config.json", gen)):
        with open(os.path.join(a.outdir, fn + ".tmp"), "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(os.path.join(a.outdir, fn + ".tmp"), os.path.join(a.outdir, fn))
    return 0


def rope_regions(head_dim, theta, orig, low=1.0, high=4.0):
    """Counts of inv_freq entries kept / smoothed / divided by factor (transformers' llama3 rule)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wl = 2 * math.pi / inv
    hi_wl, lo_wl = orig / high, orig / low
    kept = int((wl < hi_wl).sum())
    scaled = int((wl > lo_wl).sum())
    return kept, len(wl) - kept - scaled, scaled


def moe_layer(fam, a, n):
    """Whether layer n has experts (transformers' Qwen2MoeDecoderLayer rule; Mixtral: every layer)."""
    if fam == "mixtral":
        return True
    return n not in a.mlp_only and (n + 1) % a.sparse_step == 0


def moe_config(fam, a, ffn, bos, eos):
    tdt = TORCH_DTYPE[a.dtype]
    c = {"architectures": [{"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                            "qwen3_moe": "Qwen3MoeForCausalLM"}[fam]]}
    if fam == "qwen3_moe":
        c["attention_bias"] = False
    c.update({"attention_dropout": 0.0, "bos_token_id": bos, "eos_token_id": eos, "hidden_act": "silu",
              "hidden_size": a.hidden, "initializer_range": 0.02, "intermediate_size": ffn,
              "max_position_embeddings": a.positions, "model_type": fam, "num_attention_heads": a.heads,
              "num_experts_per_tok": a.topk, "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
              "output_router_logits": False, "rms_norm_eps": 1e-05 if fam == "mixtral" else 1e-06,
              "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02 if fam == "mixtral" else 0.001,
              "sliding_window": None, "tie_word_embeddings": a.tied, "torch_dtype": tdt,
              "transformers_version": "4.51.0", "use_cache": True, "vocab_size": a.vocab})
    if fam == "mixtral":
        c["num_local_experts"] = a.experts
    else:
        c.update({"decoder_sparse_step": a.sparse_step, "max_window_layers": a.layers,
                  "moe_intermediate_size": a.moe_ffn, "norm_topk_prob": a.norm_topk, "num_experts": a.experts,
                  "use_sliding_window": False})
        if a.mlp_only or fam == "qwen3_moe":
            c["mlp_only_layers"] = a.mlp_only
    if fam == "qwen2_moe":
        c["shared_expert_intermediate_size"] = a.shared_ffn
        c["sliding_window"] = a.positions
    if fam == "qwen3_moe":
        c["head_dim"] = a.head_dim_used
        c["rope_scaling"] = None
    return c, {"bos_token_id": bos, "eos_token_id": eos, "transformers_version": "4.51.0"}


def make_config(fam, a, head_dim, ffn, bos, eos):
    if fam in MOE:
        return moe_config(fam, a, ffn, bos, eos)
    tdt = TORCH_DTYPE[a.dtype]
    if fam == "gpt2":
        c = {
            "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": bos, "embd_pdrop": 0.1, "eos_token_id": eos, "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": a.positions, "n_embd": a.hidden,
            "n_head": a.heads, "n_inner": None if ffn == 4 * a.hidden else ffn, "n_layer": a.layers,
            "n_positions": a.positions, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
            "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
            "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
            "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": tdt,
            "transformers_version": "4.46.3", "use_cache": True, "vocab_size": a.vocab,
        }
        return c, {"_from_model_config": True, "bos_token_id": bos, "eos_token_id": eos,
                   "transformers_version": "4.46.3"}
    arch = {"llama2": "LlamaForCausalLM", "llama3": "LlamaForCausalLM", "llama3.1": "LlamaForCausalLM",
            "llama3.2": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM"}[fam]
    mtype = {"mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}.get(fam, "llama")
    c = {"architectures": [arch]}
    if fam not in ("llama2", "mistral", "qwen2"):
        c["attention_bias"] = False
    c.update({"attention_dropout": 0.0, "bos_token_id": bos, "eos_token_id": eos})
    if fam in ("llama3.2", "qwen3"):
        c["head_dim"] = head_dim
    c.update({"hidden_act": "silu", "hidden_size": a.hidden, "initializer_range": 0.02,
              "intermediate_size": ffn, "max_position_embeddings": a.positions})
    if fam in ("qwen2", "qwen3"):
        c["max_window_layers"] = a.layers
    if fam in ("llama3.1", "llama3.2"):
        c["mlp_bias"] = False
    c.update({"model_type": mtype, "num_attention_heads": a.heads, "num_hidden_layers": a.layers,
              "num_key_value_heads": a.kv_heads})
    if fam.startswith("llama"):
        c["pretraining_tp"] = 1
    c["rms_norm_eps"] = 1e-06 if fam in ("qwen2", "qwen3") else 1e-05
    if fam in ("llama3.1", "llama3.2"):
        c["rope_scaling"] = {"factor": 8.0 if fam == "llama3.1" else 32.0, "high_freq_factor": 4.0,
                             "low_freq_factor": 1.0, "original_max_position_embeddings": a.rope_orig,
                             "rope_type": "llama3"}
    elif fam != "qwen2":
        c["rope_scaling"] = None
    c["rope_theta"] = {"llama2": 10000.0, "mistral": 1000000.0, "qwen2": 1000000.0,
                       "qwen3": 1000000}.get(fam, 500000.0)
    if fam in ("mistral", "qwen2", "qwen3"):
        c["sliding_window"] = a.positions if fam == "qwen2" else None
    c.update({"tie_word_embeddings": a.tied, "torch_dtype": tdt, "transformers_version": "4.46.3",
              "use_cache": True})
    if fam in ("qwen2", "qwen3"):
        c["use_sliding_window"] = False
    c["vocab_size"] = a.vocab
    g = {"_from_model_config": True, "bos_token_id": bos, "eos_token_id": eos,
         "transformers_version": "4.46.3"}
    if fam in ("llama3.1", "llama3.2"):
        g = {"bos_token_id": bos, "do_sample": True, "eos_token_id": eos, "temperature": 0.6,
             "top_p": 0.9, "transformers_version": "4.46.3"}
    return c, g


def main(argv=None):
    p = argparse.ArgumentParser(description="make a tiny random Hugging Face model directory")
    p.add_argument("family", choices=FAMILIES)
    p.add_argument("outdir")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                   help="file dtype (default fp32 for gpt2, bf16 otherwise)")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None, help="default: heads for gpt2/llama2, 2 otherwise")
    p.add_argument("--head-dim", type=int, default=None, help="qwen3 only (default 32); others hidden/heads")
    p.add_argument("--ffn", type=int, default=None, help="intermediate size (default 4*hidden for gpt2, 176)")
    p.add_argument("--positions", type=int, default=None, help="max_position_embeddings / n_positions")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--shard-bytes", type=int, default=0)
    t = p.add_mutually_exclusive_group()
    t.add_argument("--tie", dest="tied", action="store_const", const=True, default=None)
    t.add_argument("--untie", dest="tied", action="store_const", const=False)
    p.add_argument("--rope-orig", type=int, default=64, help="llama3.1/3.2 original_max_position_embeddings")
    p.add_argument("--gpt2-prefix", choices=("none", "transformer"), default="none")
    p.add_argument("--gpt2-buffers", choices=("none", "bias", "masked"), default="none")
    p.add_argument("--experts", type=int, default=None, help="MoE: experts (mixtral 4, qwen 8)")
    p.add_argument("--topk", type=int, default=None, help="MoE: experts per token (mixtral 2, qwen2_moe 4, qwen3_moe 2)")
    p.add_argument("--moe-ffn", type=int, default=48, help="qwen MoE: moe_intermediate_size")
    p.add_argument("--shared-ffn", type=int, default=96, help="qwen2_moe: shared_expert_intermediate_size")
    p.add_argument("--sparse-step", type=int, default=None, help="qwen MoE: decoder_sparse_step (qwen2_moe 2, qwen3_moe 1)")
    p.add_argument("--mlp-only", default=None, help="qwen MoE: mlp_only_layers, comma-separated (qwen3_moe 0)")
    nt = p.add_mutually_exclusive_group()
    nt.add_argument("--norm-topk", dest="norm_topk", action="store_const", const=True, default=None)
    nt.add_argument("--no-norm-topk", dest="norm_topk", action="store_const", const=False)
    p.add_argument("--pattern", default="M*M-", help="nemotron_h: hybrid_override_pattern")
    p.add_argument("--mamba-heads", type=int, default=8)
    p.add_argument("--mamba-head-dim", type=int, default=16)
    p.add_argument("--groups", type=int, default=None, help="Mamba n_groups (nemotron_h 2, mamba2 1)")
    p.add_argument("--state", type=int, default=16, help="Mamba ssm_state_size")
    p.add_argument("--mlp-act", default="gelu", help="nemotron_h: mlp_hidden_act")
    p.add_argument("--n-group", type=int, default=1, help="nemotron_h MoE: n_group (router groups)")
    p.add_argument("--topk-group", type=int, default=1, help="nemotron_h MoE: topk_group (groups kept)")
    p.add_argument("--latent", type=int, default=None,
                   help="nemotron_h MoE: moe_latent_size (fc1_latent_proj / fc2_latent_proj around the routed experts)")
    p.add_argument("--time-step-min", type=float, default=0.001,
                   help="nemotron_h/mamba2 time_step_min (NemotronH clamps dt below at it; 0: no clamp)")
    p.add_argument("--pattern-key", choices=("pattern", "list"), default="pattern",
                   help="nemotron_h: hybrid_override_pattern or layers_block_type")
    a = p.parse_args(argv)
    fam = a.family
    if fam in HYBRID:
        return make_hybrid(a)
    if a.dtype is None:
        a.dtype = "fp32" if fam == "gpt2" else "bf16"
    if a.kv_heads is None:
        a.kv_heads = a.heads if fam in ("gpt2", "llama2") else min(2, a.heads)
    if fam == "gpt2" and a.kv_heads != a.heads:
        p.error("gpt2 has no grouped-query attention")
    if a.heads % a.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    if a.head_dim is not None and fam not in ("qwen3", "qwen3_moe"):
        p.error("--head-dim is for qwen3 and qwen3_moe (others use hidden/heads)")
    if fam in MOE:
        if a.layers == 2 and fam != "mixtral":
            a.layers = 4
        a.experts = a.experts or (4 if fam == "mixtral" else 8)
        a.topk = a.topk or {"mixtral": 2, "qwen2_moe": 4, "qwen3_moe": 2}[fam]
        a.sparse_step = a.sparse_step or (2 if fam == "qwen2_moe" else 1)
        if a.mlp_only is None:
            a.mlp_only = "0" if fam == "qwen3_moe" else ""
        a.mlp_only = [int(x) for x in a.mlp_only.split(",") if x != ""]
        if a.norm_topk is None:
            a.norm_topk = fam == "qwen3_moe"
        if not 1 <= a.topk <= a.experts:
            p.error("--topk must be in 1..--experts")
    if a.hidden % a.heads:
        p.error("--hidden must be a multiple of --heads")
    head_dim = a.head_dim or (32 if fam in ("qwen3", "qwen3_moe") else a.hidden // a.heads)
    a.head_dim_used = head_dim
    if head_dim % 2:
        p.error("head_dim must be even for RoPE")
    ffn = a.ffn or (4 * a.hidden if fam == "gpt2" else 176)
    if a.tied is None:
        a.tied = fam in ("gpt2", "llama3.2", "qwen2", "qwen3")
    if fam == "mixtral" and a.ffn is None:
        ffn = a.moe_ffn  # Mixtral's intermediate_size is the experts' size
    if fam == "gpt2" and not a.tied:
        p.error("GPT2LMHeadModel always ties lm_head to wte")
    factor = {"llama3.1": 8, "llama3.2": 32}.get(fam)
    if a.positions is None:
        a.positions = {"gpt2": 128}.get(fam, a.rope_orig * factor if factor else 256)
    if factor:
        kept, smoothed, scaled = rope_regions(head_dim, 500000.0, a.rope_orig)
        if not (kept and smoothed and scaled):
            p.error("rope scaling regions kept/smoothed/scaled = %d/%d/%d for head_dim %d and "
                    "original_max_position_embeddings %d: choose another --rope-orig"
                    % (kept, smoothed, scaled, head_dim, a.rope_orig))
    V = a.vocab
    if fam == "gpt2":
        bos = eos = V - 1
    elif fam in ("llama2", "mistral", "mixtral"):
        bos, eos = 1, 2
    elif fam == "llama3":
        bos, eos = V - 8, V - 7
    elif fam in ("llama3.1", "llama3.2"):
        bos, eos = V - 8, [V - 7, V - 4, V - 3]
    elif fam in ("qwen2", "qwen2_moe"):
        bos = eos = V - 20
    else:
        bos, eos = V - 20, V - 18
    if V < 30:
        p.error("--vocab must be at least 30")

    rng = np.random.default_rng(a.seed)
    tensors = []
    put = putter(rng, ST_DTYPE[a.dtype], tensors)

    H, I = a.hidden, ffn
    if fam == "gpt2":
        pre = "transformer." if a.gpt2_prefix == "transformer" else ""
        put(pre + "wte.weight", (V, H), 0.4)
        put(pre + "wpe.weight", (a.positions, H), 0.1)
        tril = np.tril(np.ones((a.positions, a.positions), np.float32)).reshape(1, 1, a.positions, a.positions)
        for n in range(a.layers):
            L = "%sh.%d." % (pre, n)
            put(L + "ln_1.weight", (H,), 0.1, 1.0)
            put(L + "ln_1.bias", (H,), 0.05)
            if a.gpt2_buffers != "none":
                put(L + "attn.bias", tril.shape, value=tril)
            if a.gpt2_buffers == "masked":
                put(L + "attn.masked_bias", (), value=np.float32(-1e4))
            # c_attn [in, 3*out]: Q columns get a larger scale so attention is not uniform
            w = 0.12 * rng.standard_normal((H, 3 * H), dtype=np.float32)
            w[:, :2 * H] *= 2.0
            put(L + "attn.c_attn.weight", (H, 3 * H), value=w)
            put(L + "attn.c_attn.bias", (3 * H,), 0.1)
            put(L + "attn.c_proj.weight", (H, H), 0.12)
            put(L + "attn.c_proj.bias", (H,), 0.05)
            put(L + "ln_2.weight", (H,), 0.1, 1.0)
            put(L + "ln_2.bias", (H,), 0.05)
            put(L + "mlp.c_fc.weight", (H, I), 0.12)
            put(L + "mlp.c_fc.bias", (I,), 0.1)
            put(L + "mlp.c_proj.weight", (I, H), 0.06)
            put(L + "mlp.c_proj.bias", (H,), 0.05)
        put(pre + "ln_f.weight", (H,), 0.1, 1.0)
        put(pre + "ln_f.bias", (H,), 0.05)
    else:
        nq, nkv, d = a.heads, a.kv_heads, head_dim
        put("model.embed_tokens.weight", (V, H), 0.4)
        for n in range(a.layers):
            L = "model.layers.%d." % n
            qkv_bias = fam in ("qwen2", "qwen2_moe")
            put(L + "self_attn.q_proj.weight", (nq * d, H), 0.25)
            if qkv_bias:
                put(L + "self_attn.q_proj.bias", (nq * d,), 0.1)
            put(L + "self_attn.k_proj.weight", (nkv * d, H), 0.25)
            if qkv_bias:
                put(L + "self_attn.k_proj.bias", (nkv * d,), 0.1)
            put(L + "self_attn.v_proj.weight", (nkv * d, H), 0.12)
            if qkv_bias:
                put(L + "self_attn.v_proj.bias", (nkv * d,), 0.1)
            put(L + "self_attn.o_proj.weight", (H, nq * d), 0.12)
            if fam in ("qwen3", "qwen3_moe"):
                put(L + "self_attn.q_norm.weight", (d,), 0.2, 1.0)
                put(L + "self_attn.k_norm.weight", (d,), 0.2, 1.0)
            if fam in MOE and moe_layer(fam, a, n):
                F_ = I if fam == "mixtral" else a.moe_ffn
                blk = "block_sparse_moe." if fam == "mixtral" else "mlp."
                put(L + blk + "gate.weight", (a.experts, H), 0.5)
                for e in range(a.experts):
                    E = "%sexperts.%d." % (blk, e)
                    names = ("w1", "w3", "w2") if fam == "mixtral" else ("gate_proj", "up_proj", "down_proj")
                    put(L + E + names[0] + ".weight", (F_, H), 0.12)
                    put(L + E + names[1] + ".weight", (F_, H), 0.12)
                    put(L + E + names[2] + ".weight", (H, F_), 0.08)
                if fam == "qwen2_moe":
                    S = a.shared_ffn
                    put(L + "mlp.shared_expert.gate_proj.weight", (S, H), 0.12)
                    put(L + "mlp.shared_expert.up_proj.weight", (S, H), 0.12)
                    put(L + "mlp.shared_expert.down_proj.weight", (H, S), 0.08)
                    put(L + "mlp.shared_expert_gate.weight", (1, H), 0.3)
            else:
                put(L + "mlp.gate_proj.weight", (I, H), 0.12)
                put(L + "mlp.up_proj.weight", (I, H), 0.12)
                put(L + "mlp.down_proj.weight", (H, I), 0.08)
            put(L + "input_layernorm.weight", (H,), 0.1, 1.0)
            put(L + "post_attention_layernorm.weight", (H,), 0.1, 1.0)
        put("model.norm.weight", (H,), 0.1, 1.0)
        if not a.tied:
            put("lm_head.weight", (V, H), 0.3)

    cfg, gen = make_config(fam, a, head_dim, ffn, bos, eos)
    return write_dir(a, tensors, cfg, gen)


def make_hybrid(a):
    """NemotronHForCausalLM / Mamba2ForCausalLM (transformers' models/nemotron_h/, models/mamba2/; the
    Megatron-Bridge's NemotronH names): backbone.embeddings, backbone.layers.N.norm (the layer's
    pre-norm) and .mixer: Mamba-2 in_proj [2 DI + 2 G N + NH, h] (rows z, x, B, C, dt), conv1d.weight
    [CD, 1, 4] and .bias [CD] (CD = DI + 2 G N), dt_bias, A_log, D [NH], norm.weight [DI],
    out_proj [h, DI]; attention q/k/v/o_proj (no RoPE); MLP up_proj, down_proj; MoE (E) gate.weight
    [E, h] and gate.e_score_correction_bias [E], experts.E.up_proj / down_proj (--moe-ffn, default 48),
    shared_experts.up_proj / down_proj (--shared-ffn, default 96), --experts 4, --topk 2,
    routed_scaling_factor 2.5, one router group (--n-group, --topk-group); backbone.norm_f,
    lm_head (untied by default, as both configs default tie_word_embeddings false)."""
    fam = a.family
    if a.dtype is None:
        a.dtype = "fp32"
    a.experts, a.topk = a.experts or 4, a.topk or 2
    pat = a.pattern if fam == "nemotron_h" else "M" * a.layers
    G = a.groups or (2 if fam == "nemotron_h" else 1)
    H, V, NH, P, N = a.hidden, a.vocab, a.mamba_heads, a.mamba_head_dim, a.state
    DI, CD = NH * P, NH * P + 2 * G * N
    nq = a.heads
    nkv = a.kv_heads or min(2, nq)
    d = a.head_dim or H // nq
    I = a.ffn or 176
    tied = bool(a.tied)
    rng = np.random.default_rng(a.seed)
    tensors = []
    put = putter(rng, ST_DTYPE[a.dtype], tensors)

    put("backbone.embeddings.weight", (V, H), 0.4)
    for n, sym in enumerate(pat):
        L = "backbone.layers.%d." % n
        put(L + "norm.weight", (H,), 0.1, 1.0)
        if sym == "M":
            put(L + "mixer.in_proj.weight", (2 * DI + 2 * G * N + NH, H), 0.15)
            put(L + "mixer.conv1d.weight", (CD, 1, 4), 0.3)
            put(L + "mixer.conv1d.bias", (CD,), 0.1)
            dt = rng.uniform(0.01, 0.1, NH).astype(np.float32)     # softplus(dt_bias) in [0.01, 0.1]
            put(L + "mixer.dt_bias", (NH,), value=dt + np.log(-np.expm1(-dt)))
            put(L + "mixer.A_log", (NH,), value=np.log(rng.uniform(1, 16, NH)).astype(np.float32))
            put(L + "mixer.D", (NH,), 0.1, 1.0)
            put(L + "mixer.norm.weight", (DI,), 0.1, 1.0)
            put(L + "mixer.out_proj.weight", (H, DI), 0.1)
        elif sym == "*":
            put(L + "mixer.q_proj.weight", (nq * d, H), 0.25)
            put(L + "mixer.k_proj.weight", (nkv * d, H), 0.25)
            put(L + "mixer.v_proj.weight", (nkv * d, H), 0.12)
            put(L + "mixer.o_proj.weight", (H, nq * d), 0.12)
        elif sym == "-":
            put(L + "mixer.up_proj.weight", (I, H), 0.12)
            put(L + "mixer.down_proj.weight", (H, I), 0.08)
        elif sym == "E":
            # the router's weights std 0.5 and a small correction bias: choices far from ties
            put(L + "mixer.gate.weight", (a.experts, H), 0.5)
            put(L + "mixer.gate.e_score_correction_bias", (a.experts,),
                value=0.05 * np.abs(rng.standard_normal(a.experts, dtype=np.float32)))
            EH = a.latent or H  # the routed experts' side (NemotronHExperts: moe_latent_size or hidden)
            if a.latent:
                put(L + "mixer.fc1_latent_proj.weight", (a.latent, H), 0.2)
                put(L + "mixer.fc2_latent_proj.weight", (H, a.latent), 0.2)
            for e in range(a.experts):
                put(L + "mixer.experts.%d.up_proj.weight" % e, (a.moe_ffn, EH), 0.12)
                put(L + "mixer.experts.%d.down_proj.weight" % e, (EH, a.moe_ffn), 0.08)
            put(L + "mixer.shared_experts.up_proj.weight", (a.shared_ffn, H), 0.12)
            put(L + "mixer.shared_experts.down_proj.weight", (H, a.shared_ffn), 0.08)
        else:
            raise SystemExit("make_tiny.py: pattern symbol %r not made" % sym)
    put("backbone.norm_f.weight", (H,), 0.1, 1.0)
    if not tied:
        put("lm_head.weight", (V, H), 0.3)
    common = {"vocab_size": V, "hidden_size": H, "num_hidden_layers": len(pat), "layer_norm_epsilon": 1e-5,
              "n_groups": G, "expand": DI // H if DI % H == 0 else DI / H, "conv_kernel": 4, "chunk_size": 128,
              "use_conv_bias": True, "use_bias": False, "residual_in_fp32": True, "tie_word_embeddings": tied,
              "time_step_min": a.time_step_min, "time_step_max": 0.1, "time_step_floor": 1e-4, "initializer_range": 0.02,
              "torch_dtype": TORCH_DTYPE[a.dtype], "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
              "use_cache": True, "transformers_version": "4.56.0"}
    if fam == "mamba2":
        cfg = dict(common, architectures=["Mamba2ForCausalLM"], model_type="mamba2", num_heads=NH, head_dim=P,
                   state_size=N, hidden_act="silu", rms_norm=True, norm_before_gate=False,
                   time_step_rank=math.ceil(H / 16), rescale_prenorm_residual=False)
    else:
        cfg = dict(common, architectures=["NemotronHForCausalLM"], model_type="nemotron_h", mamba_num_heads=NH,
                   mamba_head_dim=P, ssm_state_size=N, mamba_hidden_act="silu", mamba_proj_bias=False,
                   mlp_hidden_act=a.mlp_act, num_attention_heads=nq, num_key_value_heads=nkv, head_dim=d,
                   intermediate_size=I, max_position_embeddings=a.positions or 256, attention_bias=False,
                   mlp_bias=False, attention_dropout=0.0, hidden_dropout=0.0)
        if "E" in pat:
            cfg.update(n_routed_experts=a.experts, num_experts_per_tok=a.topk, moe_intermediate_size=a.moe_ffn,
                       moe_shared_expert_intermediate_size=a.shared_ffn, routed_scaling_factor=2.5,
                       n_group=a.n_group, topk_group=a.topk_group, norm_topk_prob=a.topk > 1, moe_latent_size=a.latent)
        if a.pattern_key == "list":
            kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
            cfg["layers_block_type"] = [kinds[c] for c in pat]
        else:
            cfg["hybrid_override_pattern"] = pat
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "transformers_version": "4.56.0"}
    return write_dir(a, tensors, cfg, gen)


if __name__ == "__main__":
    sys.exit(main())
