#!/usr/bin/python3
"""Float64 PyTorch reference of Megatron-Core's BertModel as mgt-train --model-family bert runs it,
written from megatron/core/models/bert/bert_model.py, megatron/core/models/T5/t5_model.py (not from mgt's code), checked against
a --debug-dump of mgt-train (one process, TP 1, dropout off):

  the iteration's lm loss and sop loss (means over micro-batches), its grad norm, the first
  micro-batch's logits, and every gradient of the dump's first iteration (normwise relative, all tensors together and each),
  from the dump's parameters (the run's starting point: initialized or loaded) and batch.

Model (pre-LN; megatron/core/models/bert, transformer_layer.py): x = word[tok] + pos[p] (+ tokentype[type]
with the binary head); per layer x += proj(attn(LN1(x))), x += fc2(act(fc1(LN2(x)))), attention
bidirectional with the keys whose padding_mask < 0.5 masked out, scale 1/sqrt(d); the fused QKV
rows per query group [q heads, k, v]; act = tanh-approximated GELU (Megatron's bias-GELU fusion)
unless --no-bias-gelu-fusion (erf); final LN; LM head LN(gelu_erf(dense(h))) -> logits = . E^T +
output bias over the padded vocabulary; lm = sum(ce * loss_mask) / sum(loss_mask) per micro-batch;
pooler tanh(dense(h[0])) -> binary head -> sop = mean CE over sequences with is_random >= 0;
the micro-batch's loss lm + sop, the iteration's the mean over micro-batches.

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

torch.set_default_dtype(torch.float64)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(P, args, tok, pos, types, pad, labels, lmask, isr, out=None):
    """Loss of one micro-batch: batch-first [b, s] tensors. Returns (lm, sop); out["logits"] [b, s, V]."""
    h, nq = args["hidden_size"], args["num_attention_heads"]
    d = args["kv_channels"] or h // nq
    ng = args["num_query_groups"] if args["group_query_attention"] else nq
    r, eps = nq // ng, args["norm_epsilon"]
    act = gelu_erf if args.get("no_bias_gelu_fusion") or not args["add_bias_linear"] else gelu_tanh
    b, s = tok.shape
    x = P["embedding.word_embeddings.weight"][tok] + P["embedding.position_embeddings.weight"][pos]
    if "embedding.tokentype_embeddings.weight" in P:
        x = x + P["embedding.tokentype_embeddings.weight"][types]
    keymask = (pad < 0.5)[:, None, None, :]  # [b, 1, 1, s] keys masked
    for l in range(args["num_layers"]):
        L = lambda n: P["encoder.layers.%d.%s" % (l, n)]
        y = layer_norm(x, L("self_attention.linear_qkv.layer_norm_weight"), L("self_attention.linear_qkv.layer_norm_bias"), eps)
        if "encoder.layers.%d.hf.query.weight" % l in P:  # Hugging Face's separate projections
            hf = lambda n: (y @ L("hf.%s.weight" % n).T + L("hf.%s.bias" % n)).view(b, s, nq, d).transpose(1, 2)
            q, k, v = hf("query"), hf("key"), hf("value")
        else:
            qkv = y @ L("self_attention.linear_qkv.weight").T + L("self_attention.linear_qkv.bias")
            qkv = qkv.view(b, s, ng, r + 2, d)
            q = qkv[:, :, :, :r].reshape(b, s, nq, d).transpose(1, 2)            # head n = g r + i
            k = qkv[:, :, :, r].repeat_interleave(r, dim=2).transpose(1, 2)
            v = qkv[:, :, :, r + 1].repeat_interleave(r, dim=2).transpose(1, 2)
        sc = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        sc = sc.masked_fill(keymask, float("-inf"))
        ctx = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(b, s, nq * d)
        x = x + ctx @ L("self_attention.linear_proj.weight").T + L("self_attention.linear_proj.bias")
        y = layer_norm(x, L("mlp.linear_fc1.layer_norm_weight"), L("mlp.linear_fc1.layer_norm_bias"), eps)
        y = act(y @ L("mlp.linear_fc1.weight").T + L("mlp.linear_fc1.bias"))
        x = x + y @ L("mlp.linear_fc2.weight").T + L("mlp.linear_fc2.bias")
    x = layer_norm(x, P["encoder.final_layernorm.weight"], P["encoder.final_layernorm.bias"], eps)
    y = gelu_erf(x @ P["lm_head.dense.weight"].T + P["lm_head.dense.bias"])
    y = layer_norm(y, P["lm_head.layer_norm.weight"], P["lm_head.layer_norm.bias"], eps)
    E = P.get("output_layer.weight", P["embedding.word_embeddings.weight"])
    logits = y @ E.T + P["output_layer.bias"]
    if out is not None:
        out["logits"] = logits.detach()
    ce = torch.logsumexp(logits, -1) - logits.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    lm = (ce * lmask).sum() / lmask.sum()
    sop = torch.zeros(())
    if "binary_head.weight" in P:
        pooled = torch.tanh(x[:, 0] @ P["pooler.dense.weight"].T + P["pooler.dense.bias"])
        bl = pooled @ P["binary_head.weight"].T + P["binary_head.bias"]
        ok = isr >= 0
        if ok.any():
            sop = torch.nn.functional.cross_entropy(bl[ok], isr[ok])
    return lm, sop


# Hugging Face MegatronBertForPreTraining / ForMaskedLM names (transformers' models/megatron_bert/modeling_megatron_bert.py) ->
# this file's (Megatron-Core's, with the layer's query/key/value kept apart as hf.*)
HF_GLOBAL = {"bert.embeddings.word_embeddings.weight": "embedding.word_embeddings.weight",
             "bert.embeddings.position_embeddings.weight": "embedding.position_embeddings.weight",
             "bert.embeddings.token_type_embeddings.weight": "embedding.tokentype_embeddings.weight",
             "bert.encoder.ln.weight": "encoder.final_layernorm.weight", "bert.encoder.ln.bias": "encoder.final_layernorm.bias",
             "bert.pooler.dense.weight": "pooler.dense.weight", "bert.pooler.dense.bias": "pooler.dense.bias",
             "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
             "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
             "cls.predictions.transform.LayerNorm.weight": "lm_head.layer_norm.weight",
             "cls.predictions.transform.LayerNorm.bias": "lm_head.layer_norm.bias",
             "cls.predictions.bias": "output_layer.bias", "cls.seq_relationship.weight": "binary_head.weight",
             "cls.seq_relationship.bias": "binary_head.bias"}
HF_LAYER = {"attention.ln": "self_attention.linear_qkv.layer_norm_", "attention.self.query": "hf.query.",
            "attention.self.key": "hf.key.", "attention.self.value": "hf.value.",
            "attention.output.dense": "self_attention.linear_proj.", "ln": "mlp.linear_fc1.layer_norm_",
            "intermediate.dense": "mlp.linear_fc1.", "output.dense": "mlp.linear_fc2."}


def hf_params(path):
    """The tensors of a Hugging Face MegatronBert directory under this file's names (float64)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf"))
    import st
    P = {}
    for n, a in st.load_float(path).items():
        if n in HF_GLOBAL:
            P[HF_GLOBAL[n]] = a
        elif n.startswith("bert.encoder.layer."):
            l, rest = n[len("bert.encoder.layer."):].split(".", 1)
            base, kind = rest.rsplit(".", 1)
            P["encoder.layers.%s.%s%s" % (l, HF_LAYER[base], kind)] = a
        elif n == "cls.predictions.decoder.weight" and not np.array_equal(a, P.get("embedding.word_embeddings.weight", a)):
            P["output_layer.weight"] = a
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}


def rel(a, b):
    nb = np.linalg.norm(b.ravel())
    return float(np.linalg.norm((a - b).ravel()) / (nb if nb else 1.0))


def compare_hf(o, f, args, B, mbs):
    """The dump's first micro-batch's logits against the Hugging Face directory's model: equal on the
    true vocabulary (normwise), exactly 0 on the rows mgt pads it with."""
    P = hf_params(o.hf)
    V = P["embedding.word_embeddings.weight"].shape[0]
    T = lambda n, dt=torch.long: torch.tensor(B[n][:mbs].astype(np.int64), dtype=dt)
    out = {}
    with torch.no_grad():
        forward(P, args, T("tokens"), T("position_ids"), T("tokentype_ids"), T("padding_mask", torch.float64),
                T("labels"), torch.tensor(B["loss_mask"][:mbs], dtype=torch.float64), T("is_random"), out)
    got = f["iter1/logits"][()].astype(np.float64)
    e = rel(got[..., :V], out["logits"].numpy())
    pad = float(np.abs(got[..., V:]).max()) if got.shape[-1] > V else 0.0
    print("%-58s %.2e%s" % ("logits of micro-batch 1 vs %s (normwise, %d ids)" % (o.hf, V), e,
                            "  FAIL" if e > o.tol_grad else ""))
    print("%-58s %.2e%s" % ("padded vocabulary rows' logits (%d, must be 0)" % (got.shape[-1] - V), pad,
                            "  FAIL" if pad else ""))
    return 1 if e > o.tol_grad or pad else 0


def report(f, P, G, got, gnorm_ref, rows, logits, o, w=58):
    """Print the table: the scalar rows (name, mgt, reference, tolerance), the first micro-batch's
    logits against the dump's (when it has them), every gradient together and each; returns the
    number of figures over their tolerance."""
    bad = 0
    print("%-*s %-22s %-22s %s" % (w, "figure", "mgt", "float64 reference", "relative"))
    for name, a, b, tol in rows:
        e = abs(a - b) / (abs(b) if b else 1.0)
        bad += e > tol
        print("%-*s %-22.15g %-22.15g %.2e%s" % (w, name, a, b, e, "  FAIL" if e > tol else ""))
    if "iter1/logits" in f and logits is not None:  # the first micro-batch's logits over the padded vocabulary
        e = rel(f["iter1/logits"][()].astype(np.float64), logits.numpy())
        bad += e > o.tol_grad
        print("%-*s %-22s %-22s %.2e%s" % (w, "logits of micro-batch 1 (normwise)", "", "", e, "  FAIL" if e > o.tol_grad else ""))
    num = sum(np.linalg.norm((got[n] - G[n]).ravel()) ** 2 for n in P)
    e = math.sqrt(num) / gnorm_ref
    bad += e > o.tol_grad
    print("%-*s %-22s %-22s %.2e%s" % (w, "every gradient (normwise, all tensors)", "", "", e, "  FAIL" if e > o.tol_grad else ""))
    for n in sorted(P):
        en = rel(got[n], G[n]) if np.linalg.norm(G[n]) > 1e-9 * gnorm_ref else np.linalg.norm(got[n] - G[n]) / gnorm_ref
        bad += en > o.tol_grad
        print("%-*s %-22s %-22s %.2e%s" % (w, "  grad " + n, "", "", en, "  FAIL" if en > o.tol_grad else ""))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--tol-loss", type=float, default=1e-6)
    ap.add_argument("--tol-grad", type=float, default=1e-5)
    ap.add_argument("--hf", metavar="DIR", help="compare the dump's logits with the float64 model of this Hugging Face "
                    "MegatronBert directory (its own tensors, names and true vocabulary) instead")
    o = ap.parse_args()
    f = h5py.File(o.dump, "r")
    args = json.loads(f.attrs["metadata"])["args"]
    P = {}
    f["params"].visititems(lambda n, x: P.__setitem__(n, torch.tensor(x[()], dtype=torch.float64, requires_grad=True))
                           if isinstance(x, h5py.Dataset) else None)
    B = {k: f["batch/" + k][0] for k in f["batch"]}
    gbs, mbs = args["global_batch_size"], args["micro_batch_size"]
    if o.hf:
        sys.exit(compare_hf(o, f, args, B, mbs))
    nmb = gbs // mbs
    total, lms, sops, first = 0.0, 0.0, 0.0, {}
    for k in range(nmb):
        sl = slice(k * mbs, (k + 1) * mbs)
        T = lambda n, dt=torch.long: torch.tensor(B[n][sl].astype(np.int64), dtype=dt)
        lm, sop = forward(P, args, T("tokens"), T("position_ids"), T("tokentype_ids"), T("padding_mask", torch.float64),
                          T("labels"), torch.tensor(B["loss_mask"][sl], dtype=torch.float64), T("is_random"),
                          first if k == 0 else None)
        total = total + (lm + sop) / nmb
        lms += float(lm) / nmb
        sops += float(sop) / nmb
    total.backward()
    G = {n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape) for n, p in P.items()}
    got = {n: f["grads/" + n][()].astype(np.float64) for n in P}
    gnorm_ref = math.sqrt(sum(float((g ** 2).sum()) for g in G.values()))
    rows = [("lm loss", float(f["train/lm_loss"][0]), lms, o.tol_loss),
            ("sop loss", float(f["train/sop_loss"][0]), sops, o.tol_loss),
            ("grad norm", float(f["train/grad_norm"][0]), gnorm_ref, o.tol_grad)]
    sys.exit(report(f, P, G, got, gnorm_ref, rows, first.get("logits"), o))


if __name__ == "__main__":
    main()
