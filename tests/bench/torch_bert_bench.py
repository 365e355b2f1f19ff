#!/usr/bin/python3
"""CPU training throughput of a PyTorch BERT (Megatron-Core's BertModel as megatron/core/models/bert/bert_model.py describes it: pre-LN, padding-mask attention, LM head, pooler and binary head), in
float32 with PyTorch's fused pieces (F.scaled_dot_product_attention with the key mask where the
torch has it, else the unfused softmax(QK^T) V of torch 1.13,
F.layer_norm, F.gelu, F.cross_entropy) and torch.optim.AdamW (foreach), as the yardstick for
mgt-train --model-family bert (tests/bench/bert_cpu.sh runs both).

Batches: random ids over the vocabulary, 15% of the positions masked for the LM loss, the last
eighth of each sequence padding, random sentence-order labels; loss = masked-LM mean + SOP mean;
global-norm clipping 1.0.  Prints one JSON object: means over the timed iterations.

Usage: torch_bert_bench.py [--layers 12] [--hidden 768] [--heads 12] [--seq-length 512]
         [--micro-batch-size 2] [--vocab 30592] [--iters 3] [--warmup 1] [--threads 2]
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn.functional as F


def make_params(L, h, V, S, g):
    std = 0.02
    n = lambda *s: (torch.randn(*s, generator=g) * std).requires_grad_()
    z = lambda *s: torch.zeros(*s).requires_grad_()
    o = lambda *s: torch.ones(*s).requires_grad_()
    P = {"word": n(V, h), "pos": n(S, h), "type": n(2, h), "lnf_w": o(h), "lnf_b": z(h),
         "lmd_w": n(h, h), "lmd_b": z(h), "lmln_w": o(h), "lmln_b": z(h), "out_b": z(V),
         "pool_w": n(h, h), "pool_b": z(h), "bin_w": n(2, h), "bin_b": z(2)}
    for l in range(L):
        for k, v in {"ln1_w": o(h), "ln1_b": z(h), "qkv_w": n(3 * h, h), "qkv_b": z(3 * h), "proj_w": n(h, h),
                     "proj_b": z(h), "ln2_w": o(h), "ln2_b": z(h), "fc1_w": n(4 * h, h), "fc1_b": z(4 * h),
                     "fc2_w": n(h, 4 * h), "fc2_b": z(h)}.items():
            P["%d.%s" % (l, k)] = v
    return P


def attention(q, k, v, mask):
    """SDPA where torch has it (2.0 on); torch 1.13 (Debian 12): the same math unfused."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    sc = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(sc.masked_fill(~mask, float("-inf")), -1) @ v


def loss_of(P, L, h, nh, tok, types, keep, labels, isr):
    b, s = tok.shape
    x = P["word"][tok] + P["pos"][:s] + P["type"][types]
    mask = keep[:, None, None, :]  # True = attend
    for l in range(L):
        p = lambda k: P["%d.%s" % (l, k)]
        y = F.layer_norm(x, (h,), p("ln1_w"), p("ln1_b"), 1e-5)
        q, k, v = F.linear(y, p("qkv_w"), p("qkv_b")).view(b, s, 3, nh, h // nh).permute(2, 0, 3, 1, 4)
        c = attention(q, k, v, mask).transpose(1, 2).reshape(b, s, h)
        x = x + F.linear(c, p("proj_w"), p("proj_b"))
        y = F.layer_norm(x, (h,), p("ln2_w"), p("ln2_b"), 1e-5)
        x = x + F.linear(F.gelu(F.linear(y, p("fc1_w"), p("fc1_b")), approximate="tanh"), p("fc2_w"), p("fc2_b"))
    x = F.layer_norm(x, (h,), P["lnf_w"], P["lnf_b"], 1e-5)
    y = F.layer_norm(F.gelu(F.linear(x, P["lmd_w"], P["lmd_b"])), (h,), P["lmln_w"], P["lmln_b"], 1e-5)
    logits = F.linear(y, P["word"], P["out_b"])
    lm = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-1)
    pooled = torch.tanh(F.linear(x[:, 0], P["pool_w"], P["pool_b"]))
    sop = F.cross_entropy(F.linear(pooled, P["bin_w"], P["bin_b"]), isr)
    return lm + sop


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-length", type=int, default=512)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=30592)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    o = ap.parse_args()
    torch.set_num_threads(o.threads)
    g = torch.Generator().manual_seed(1234)
    L, h, S, b, V = o.layers, o.hidden, o.seq_length, o.micro_batch_size, o.vocab
    P = make_params(L, h, V, S, g)
    opt = torch.optim.AdamW(P.values(), lr=1e-4, weight_decay=0.01, foreach=True)
    tok = torch.randint(0, V, (b, S), generator=g)
    types = (torch.arange(S) >= S // 2).long().expand(b, S)
    keep = torch.arange(S)[None, :].expand(b, S) < S - S // 8
    labels = torch.where((torch.rand(b, S, generator=g) < 0.15) & keep, tok, torch.full_like(tok, -1))
    isr = torch.randint(0, 2, (b,), generator=g)
    times = []
    for it in range(o.warmup + o.iters):
        t0 = time.perf_counter()
        loss = loss_of(P, L, h, o.heads, tok, types, keep, labels, isr)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it >= o.warmup:
            times.append(time.perf_counter() - t0)
    t = sum(times) / len(times)
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "threads": o.threads, "seq_length": S,
                      "micro_batch_size": b, "iter_s": t, "tokens_per_s": b * S / t, "loss": float(loss),
                      "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
