#!/usr/bin/python3
"""Float64 PyTorch reference of Megatron-Core's T5Model as mgt-train --model-family t5 runs it,
written from megatron/core/models/T5/t5_model.py, megatron/core/datasets/t5_dataset.py (not from mgt's code), checked
against a --debug-dump of mgt-train (one process, TP 1, dropout off):

  the iteration's lm loss (tokens' mean over the global batch), its grad norm, the first
  micro-batch's logits, and every gradient of the dump's first iteration (normwise relative, all
  tensors together and each), from the dump's parameters (the run's starting point) and batch.

Model (megatron/core/models/T5, pre-LN layers as transformer_layer.py): one embedding (word +
learned absolute positions) for both stacks.  Encoder: x = word[enc] + pos[0..s-1]; per layer
x += proj(attn(LN1(x))) bidirectional with the keys whose enc_mask < 0.5 masked, x += fc2(act(fc1(LN2(x))));
final LN -> H.  Decoder: y = word[dec] + pos[0..sd-1]; per layer y += proj(attn(LN1(y))) causal,
y += xproj(attn(q = linear_q(LN3(y)), k, v = linear_kv(H) rows per head [k_h; v_h])) with the
encoder's key mask, y += MLP; final LN; logits = y E^T + output_layer.bias over the padded vocabulary.
act: the tanh-approximated GELU (Megatron's default bias-GELU fusion), erf with --no-bias-gelu-fusion.
Scale 1/sqrt(kv_channels).  --position-embedding-type relative: no learned positions; the
encoder's (bidirectional) and the decoder's (causal) bucketed bias tables [buckets, heads] add
table[bucket(k - q)] to the scaled scores of their self-attention (not the cross-attention).
rope: no learned positions; the self-attentions' queries and keys rotated (the cross-attention's
not, as transformer_layer.py passes no rotary embedding to it).  Loss: per micro-batch sum(ce * loss_mask) / sum(loss_mask); the
iteration's objective their mean over micro-batches (mgt-train's GPT loss); the logged lm loss
the global batch's masked sum over its masked tokens.

Prints a table; exits 1 when a figure is over its tolerance.
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_ref import gelu_erf, gelu_tanh, layer_norm, report  # noqa: E402  (the shared float64 pieces)

torch.set_default_dtype(torch.float64)


def bucket(rel, bidirectional, nb, maxd):
    """T5's relative position bucket (HF's _relative_position_bucket, which Megatron-Core's
    RelativePositionEmbedding adapts): rel = key position - query position, the log in float32."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        nb //= 2
        ret = ret + (rel > 0).long() * nb
        n = rel.abs()
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    exact = nb // 2
    large = exact + (torch.log(n.float() / exact) / math.log(maxd / exact) * (nb - exact)).long()
    large = torch.min(large, torch.full_like(large, nb - 1))
    return ret + torch.where(n < exact, n, large)


def rel_bias(table, sq, sk, bidirectional, args):
    """[1, heads, sq, sk]: table[bucket(k - q)] per head."""
    rel = torch.arange(sk)[None, :] - torch.arange(sq)[:, None]
    b = bucket(rel, bidirectional, args["relative_attention_num_buckets"], args["relative_attention_max_distance"])
    return table[b].permute(2, 0, 1)[None]


def attend(q, k, v, mask, bias=None):
    """q [b, n, sq, d], k, v [b, n, sk, d], mask [.., sq or 1, sk] True = masked; bias added to the
    scaled scores (T5's relative position bias)."""
    sc = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if bias is not None:
        sc = sc + bias
    sc = sc.masked_fill(mask, float("-inf"))
    p = torch.softmax(sc, -1)
    p = torch.nan_to_num(p)  # a row with every key masked: 0
    b, n, sq, d = q.shape
    return (p @ v).transpose(1, 2).reshape(b, sq, n * d)


def rope(t, args):
    """t [b, heads, s, d]: Megatron's RotaryEmbedding (inv_freq and the angles in float32, rotate_half
    on the first rotary_percent of the channels) at positions 0..s-1 (self-attention only)."""
    s, d = t.shape[2], t.shape[3]
    rot = int(d * args["rotary_percent"])
    inv = 1.0 / (args["rotary_base"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1).double()
    c, sn = torch.cos(ang), torch.sin(ang)
    x, rest = t[..., :rot], t[..., rot:]
    x1, x2 = x[..., : rot // 2], x[..., rot // 2:]
    return torch.cat([x * c + torch.cat([-x2, x1], dim=-1) * sn, rest], dim=-1)


def self_attention(P, pre, x, mask, nq, d, eps, bias=None, args=None):
    L = lambda n: P[pre + n]
    y = layer_norm(x, L("self_attention.linear_qkv.layer_norm_weight"), L("self_attention.linear_qkv.layer_norm_bias"), eps)
    b, s, _ = y.shape
    qkv = (y @ L("self_attention.linear_qkv.weight").T + L("self_attention.linear_qkv.bias")).view(b, s, nq, 3, d)
    q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # one key and value head per query head
    if args is not None and args["position_embedding_type"] == "rope":
        q, k = rope(q, args), rope(k, args)
    return x + attend(q, k, v, mask, bias) @ L("self_attention.linear_proj.weight").T + L("self_attention.linear_proj.bias")


def mlp(P, pre, x, act, eps):
    L = lambda n: P[pre + n]
    y = layer_norm(x, L("mlp.linear_fc1.layer_norm_weight"), L("mlp.linear_fc1.layer_norm_bias"), eps)
    y = act(y @ L("mlp.linear_fc1.weight").T + L("mlp.linear_fc1.bias"))
    return x + y @ L("mlp.linear_fc2.weight").T + L("mlp.linear_fc2.bias")


def cross_attention(P, pre, x, H, kmask, nq, d, eps):
    L = lambda n: P[pre + n]
    y = layer_norm(x, L("pre_cross_attn_layernorm.weight"), L("pre_cross_attn_layernorm.bias"), eps)
    b, sq, _ = y.shape
    sk = H.shape[1]
    q = (y @ L("cross_attention.linear_q.weight").T + L("cross_attention.linear_q.bias")).view(b, sq, nq, d).transpose(1, 2)
    kv = (H @ L("cross_attention.linear_kv.weight").T + L("cross_attention.linear_kv.bias")).view(b, sk, nq, 2, d)
    k, v = kv[:, :, :, 0].transpose(1, 2), kv[:, :, :, 1].transpose(1, 2)
    out = attend(q, k, v, kmask)
    return x + out @ L("cross_attention.linear_proj.weight").T + L("cross_attention.linear_proj.bias")


def forward(P, args, enc, enc_mask, dec, out=None):
    """Logits [b, sd, V] of one micro-batch (batch-first tensors)."""
    h, nq = args["hidden_size"], args["num_attention_heads"]
    d = args["kv_channels"] or h // nq
    eps, nl = args["norm_epsilon"], args["num_layers"]
    act = gelu_erf if args.get("no_bias_gelu_fusion") or not args["add_bias_linear"] else gelu_tanh
    W, Pe = P["embedding.word_embeddings.weight"], P.get("embedding.position_embeddings.weight")
    b, s = enc.shape
    sd = dec.shape[1]
    kmask = (enc_mask < 0.5)[:, None, None, :]  # [b, 1, 1, s] keys masked
    rel = args["position_embedding_type"] == "relative"  # no learned positions then
    eb = rel_bias(P["encoder_relative_pos_emb.relative_attention_bias.weight"], s, s, True, args) if rel else None
    db = rel_bias(P["decoder_relative_pos_emb.relative_attention_bias.weight"], sd, sd, False, args) if rel else None
    x = W[enc] + (0 if Pe is None else Pe[torch.arange(s)])
    for l in range(nl):
        pre = "encoder.layers.%d." % l
        x = self_attention(P, pre, x, kmask, nq, d, eps, eb, args)
        x = mlp(P, pre, x, act, eps)
    H = layer_norm(x, P["encoder.final_layernorm.weight"], P["encoder.final_layernorm.bias"], eps)
    y = W[dec] + (0 if Pe is None else Pe[torch.arange(sd)])
    causal = torch.triu(torch.ones(sd, sd, dtype=torch.bool), 1)[None, None]
    for l in range(nl):
        pre = "decoder.layers.%d." % l
        y = self_attention(P, pre, y, causal, nq, d, eps, db, args)
        y = cross_attention(P, pre, y, H, kmask, nq, d, eps)
        y = mlp(P, pre, y, act, eps)
    y = layer_norm(y, P["decoder.final_layernorm.weight"], P["decoder.final_layernorm.bias"], eps)
    E = P.get("lm_head.output_layer.weight", W)
    logits = y @ E.T
    if "lm_head.output_layer.bias" in P:
        logits = logits + P["lm_head.output_layer.bias"]
    if out is not None:
        out["logits"] = logits.detach()
    return logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--tol-loss", type=float, default=1e-6)
    ap.add_argument("--tol-grad", type=float, default=1e-5)
    o = ap.parse_args()
    f = h5py.File(o.dump, "r")
    args = json.loads(f.attrs["metadata"])["args"]
    P = {}
    f["params"].visititems(lambda n, x: P.__setitem__(n, torch.tensor(x[()], dtype=torch.float64, requires_grad=True))
                           if isinstance(x, h5py.Dataset) else None)
    B = {k: f["batch/" + k][0] for k in f["batch"]}
    gbs, mbs = args["global_batch_size"], args["micro_batch_size"]
    nmb = gbs // mbs
    obj, num, den, first = 0.0, 0.0, 0.0, {}
    for k in range(nmb):
        sl = slice(k * mbs, (k + 1) * mbs)
        T = lambda n, dt=torch.long: torch.tensor(B[n][sl].astype(np.int64), dtype=dt)
        logits = forward(P, args, T("tokens"), T("padding_mask", torch.float64), T("dec_tokens"), first if k == 0 else None)
        labels, lmask = T("labels"), torch.tensor(B["loss_mask"][sl], dtype=torch.float64)
        ce = torch.logsumexp(logits, -1) - logits.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
        lsum, ntok = (ce * lmask).sum(), lmask.sum()
        obj = obj + lsum / torch.clamp(ntok, min=1.0) / nmb
        num += float(lsum)
        den += float(ntok)
    obj.backward()
    G = {n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape) for n, p in P.items()}
    got = {n: f["grads/" + n][()].astype(np.float64) for n in P}
    gnorm_ref = math.sqrt(sum(float((g ** 2).sum()) for g in G.values()))
    rows = [("lm loss", float(f["train/lm_loss"][0]), num / den, o.tol_loss),
            ("grad norm", float(f["train/grad_norm"][0]), gnorm_ref, o.tol_grad)]
    sys.exit(report(f, P, G, got, gnorm_ref, rows, first.get("logits"), o, 64))


if __name__ == "__main__":
    main()
