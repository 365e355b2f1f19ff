#!/usr/bin/python3
"""CPU training throughput of a PyTorch T5 (Megatron-Core's T5Model as megatron/core/models/T5/t5_model.py describes it: pre-LN encoder under the padding mask and final LN, decoder with causal
self-attention, pre_cross_attn_layernorm, cross-attention over the encoder output, MLP, final LN,
the tied output layer with a vocabulary bias), in float32 with PyTorch's fused pieces
(F.scaled_dot_product_attention where the torch has it, else the unfused softmax(QK^T) V of torch
1.13, F.layer_norm, F.gelu, F.cross_entropy) and torch.optim.AdamW (foreach), as the yardstick
for mgt-train --model-family t5 (tests/bench/t5_cpu.sh runs both).

Dropout as Megatron applies it (and mgt-train with its defaults): --hidden-dropout on the encoder's
and the decoder's embeddings and in each bias-dropout-add (after linear_proj of self- and
cross-attention, after the MLP's linear_fc2), --attention-dropout on the attention probabilities;
both 0.1 by default (Megatron's arguments.py and the 220M example).

Batches: random ids, the last eighth of each encoder sequence padding, every decoder position a
label; loss = the labels' mean cross entropy; global-norm clipping 1.0.  Prints one JSON object:
means over the timed iterations; tokens are the encoder's (Megatron's seq_length x batch).

Usage: torch_t5_bench.py [--layers 12] [--hidden 768] [--heads 12] [--ffn 3072] [--seq-length 512]
         [--decoder-seq-length 128] [--micro-batch-size 2] [--vocab 29184] [--iters 3] [--warmup 1]
         [--threads 2] [--hidden-dropout 0.1] [--attention-dropout 0.1]
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn.functional as F


def make_params(L, h, f, V, S, g):
    n = lambda *s: (torch.randn(*s, generator=g) * 0.015).requires_grad_()
    z = lambda *s: torch.zeros(*s).requires_grad_()
    o = lambda *s: torch.ones(*s).requires_grad_()
    P = {"word": n(V, h), "pos": n(S, h), "elnf_w": o(h), "elnf_b": z(h), "dlnf_w": o(h), "dlnf_b": z(h),
         "out_b": z(V)}
    for pre in ("e", "d"):
        for l in range(L):
            layer = {"ln1_w": o(h), "ln1_b": z(h), "qkv_w": n(3 * h, h), "qkv_b": z(3 * h), "proj_w": n(h, h),
                     "proj_b": z(h), "ln2_w": o(h), "ln2_b": z(h), "fc1_w": n(f, h), "fc1_b": z(f),
                     "fc2_w": n(h, f), "fc2_b": z(h)}
            if pre == "d":
                layer.update({"ln3_w": o(h), "ln3_b": z(h), "xq_w": n(h, h), "xq_b": z(h), "xkv_w": n(2 * h, h),
                              "xkv_b": z(2 * h), "xproj_w": n(h, h), "xproj_b": z(h)})
            for k, v in layer.items():
                P["%s%d.%s" % (pre, l, k)] = v
    return P


HD = AD = 0.1  # hidden and attention dropout (set from the flags in main)


def attention(q, k, v, mask=None, causal=False):
    """SDPA where torch has it (2.0 on); torch 1.13 (Debian 12): the same math unfused."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=AD, is_causal=causal)
    sc = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = sc.shape[-1]
        sc = sc.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    if mask is not None:
        sc = sc.masked_fill(~mask, float("-inf"))
    return F.dropout(torch.softmax(sc, -1), AD) @ v


def self_attn(p, x, nh, mask, causal):
    b, s, h = x.shape
    y = F.layer_norm(x, (h,), p("ln1_w"), p("ln1_b"), 1e-5)
    q, k, v = F.linear(y, p("qkv_w"), p("qkv_b")).view(b, s, 3, nh, h // nh).permute(2, 0, 3, 1, 4)
    c = attention(q, k, v, mask, causal).transpose(1, 2).reshape(b, s, h)
    return x + F.dropout(F.linear(c, p("proj_w"), p("proj_b")), HD)


def mlp(p, x):
    h = x.shape[-1]
    y = F.layer_norm(x, (h,), p("ln2_w"), p("ln2_b"), 1e-5)
    y = F.gelu(F.linear(y, p("fc1_w"), p("fc1_b")), approximate="tanh")
    return x + F.dropout(F.linear(y, p("fc2_w"), p("fc2_b")), HD)


def loss_of(P, L, nh, enc, keep, dec, labels):
    b, s = enc.shape
    sd = dec.shape[1]
    h = P["word"].shape[1]
    mask = keep[:, None, None, :]  # True = attend
    x = F.dropout(P["word"][enc] + P["pos"][:s], HD)
    for l in range(L):
        p = lambda k: P["e%d.%s" % (l, k)]
        x = mlp(p, self_attn(p, x, nh, mask, False))
    H = F.layer_norm(x, (h,), P["elnf_w"], P["elnf_b"], 1e-5)
    y = F.dropout(P["word"][dec] + P["pos"][:sd], HD)
    for l in range(L):
        p = lambda k: P["d%d.%s" % (l, k)]
        y = self_attn(p, y, nh, None, True)
        z = F.layer_norm(y, (h,), p("ln3_w"), p("ln3_b"), 1e-5)
        q = F.linear(z, p("xq_w"), p("xq_b")).view(b, sd, nh, h // nh).transpose(1, 2)
        k, v = F.linear(H, p("xkv_w"), p("xkv_b")).view(b, s, nh, 2, h // nh).permute(3, 0, 2, 1, 4)
        c = attention(q, k, v, mask).transpose(1, 2).reshape(b, sd, h)
        y = mlp(p, y + F.dropout(F.linear(c, p("xproj_w"), p("xproj_b")), HD))
    y = F.layer_norm(y, (h,), P["dlnf_w"], P["dlnf_b"], 1e-5)
    logits = F.linear(y, P["word"], P["out_b"])
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("--layers", 12), ("--hidden", 768), ("--heads", 12), ("--ffn", 3072), ("--seq-length", 512),
                 ("--decoder-seq-length", 128), ("--micro-batch-size", 2), ("--vocab", 29184), ("--iters", 3),
                 ("--warmup", 1), ("--threads", 2)):
        ap.add_argument(k, type=int, default=v)
    ap.add_argument("--hidden-dropout", type=float, default=0.1)
    ap.add_argument("--attention-dropout", type=float, default=0.1)
    o = ap.parse_args()
    global HD, AD
    HD, AD = o.hidden_dropout, o.attention_dropout
    torch.set_num_threads(o.threads)
    g = torch.Generator().manual_seed(1234)
    L, S, Sd, b, V = o.layers, o.seq_length, o.decoder_seq_length, o.micro_batch_size, o.vocab
    P = make_params(L, o.hidden, o.ffn, V, S, g)
    opt = torch.optim.AdamW(P.values(), lr=1e-4, weight_decay=0.01, foreach=True)
    enc = torch.randint(0, V, (b, S), generator=g)
    keep = torch.arange(S)[None, :].expand(b, S) < S - S // 8
    dec = torch.randint(0, V, (b, Sd), generator=g)
    labels = torch.randint(0, V, (b, Sd), generator=g)
    times = []
    for it in range(o.warmup + o.iters):
        t0 = time.perf_counter()
        loss = loss_of(P, L, o.heads, enc, keep, dec, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it >= o.warmup:
            times.append(time.perf_counter() - t0)
    t = sum(times) / len(times)
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "threads": o.threads, "seq_length": S,
                      "decoder_seq_length": Sd, "micro_batch_size": b, "hidden_dropout": HD, "attention_dropout": AD, "iter_s": t, "tokens_per_s": b * S / t,
                      "loss": float(loss), "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
