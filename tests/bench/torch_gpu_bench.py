#!/usr/bin/env python3
"""GPU training throughput of PyTorch on the same model shapes and recipe as `mgt-train --device
cuda --bf16` (tests/bench/gpu.sh runs both in one device call).  Not a test.

The model is written here in plain PyTorch, as a PyTorch user would write it fast:
  gpt2-124m   learned positions, LayerNorm, biases, GELU (tanh), dropout 0.1 (hidden and
              attention), tied input/output embeddings;
  llama-3.2-1b RoPE (base 500000), RMSNorm, SwiGLU, no biases, 32 heads / 8 query groups,
              tied embeddings, dropout 0.
Precision as mgt's --bf16: fp32 master parameters, bf16 autocast for the matrix products,
the loss (cross-entropy over the padded vocabulary) in fp32.  Attention through
scaled_dot_product_attention (flash), torch.optim.AdamW(fused=True), global-norm clipping 1.0,
micro-batches accumulated to the global batch, random token ids.  torch.compile is tried and
falls back to eager when it fails (the output says which ran).

Timing: torch.cuda.synchronize() around each iteration, time.perf_counter; the median of the
iterations after --warmup.  Prints one JSON object.

Usage: torch_gpu_bench.py --model gpt2-124m|llama-3.2-1b --seq-length S --micro-batch-size B
         --global-batch-size G [--iters N] [--warmup W] [--vocab-size V] [--no-compile]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    "gpt2-124m": dict(layers=12, hidden=768, ffn=3072, heads=12, groups=12, vocab=50257, kind="gpt2",
                      dropout=0.1),
    "llama-3.2-1b": dict(layers=16, hidden=2048, ffn=8192, heads=32, groups=8, vocab=128256,
                         kind="llama", dropout=0.0),
}


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(s, d, base, device):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    f = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos()[None, None], emb.sin()[None, None]


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.nh, self.ng = c["hidden"], c["heads"], c["groups"]
        self.d = h // self.nh
        self.llama = c["kind"] == "llama"
        bias = not self.llama
        Norm = RMSNorm if self.llama else nn.LayerNorm
        self.ln1, self.ln2 = Norm(h), Norm(h)
        self.qkv = nn.Linear(h, (self.nh + 2 * self.ng) * self.d, bias=bias)
        self.proj = nn.Linear(h, h, bias=bias)
        self.fc1 = nn.Linear(h, 2 * c["ffn"] if self.llama else c["ffn"], bias=bias)
        self.fc2 = nn.Linear(c["ffn"], h, bias=bias)
        self.p = c["dropout"]

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([self.nh * self.d, self.ng * self.d, self.ng * self.d], -1)
        q = q.view(b, s, self.nh, self.d).transpose(1, 2)
        k = k.view(b, s, self.ng, self.d).transpose(1, 2)
        v = v.view(b, s, self.ng, self.d).transpose(1, 2)
        if self.llama:
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0,
                                           enable_gqa=self.ng != self.nh)
        x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, s, -1)), self.p, self.training)
        y = self.fc1(self.ln2(x))
        if self.llama:
            g, u = y.chunk(2, dim=-1)
            y = F.silu(g) * u
        else:
            y = F.gelu(y, approximate="tanh")
        return x + F.dropout(self.fc2(y), self.p, self.training)


class GPT(nn.Module):
    def __init__(self, c, seq, padded_vocab):
        super().__init__()
        self.c = c
        h = c["hidden"]
        self.emb = nn.Embedding(padded_vocab, h)
        self.pos = nn.Embedding(seq, h) if c["kind"] == "gpt2" else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.lnf = RMSNorm(h) if c["kind"] == "llama" else nn.LayerNorm(h)
        self.seq = seq
        for n, p in self.named_parameters():  # Megatron's init
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["layers"]) if n.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, labels, cos, sin):
        x = self.emb(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[None, : tokens.shape[1]]
        x = F.dropout(x, self.c["dropout"], self.training)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = F.linear(self.lnf(x), self.emb.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def main(argv):
    ap = argparse.ArgumentParser(prog="torch_gpu_bench.py")
    ap.add_argument("--model", required=True, choices=sorted(SHAPES))
    ap.add_argument("--seq-length", type=int, required=True)
    ap.add_argument("--micro-batch-size", type=int, required=True)
    ap.add_argument("--global-batch-size", type=int, required=True)
    ap.add_argument("--vocab-size", type=int, default=0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    o = ap.parse_args(argv)
    torch.manual_seed(o.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    c = dict(SHAPES[o.model])
    if o.vocab_size:
        c["vocab"] = o.vocab_size
    padded = (c["vocab"] + 127) // 128 * 128  # --make-vocab-size-divisible-by 128
    s, b, acc = o.seq_length, o.micro_batch_size, o.global_batch_size // o.micro_batch_size
    model = GPT(c, s, padded).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)
    cos, sin = rope_tables(s, c["hidden"] // c["heads"], 500000.0, dev)
    compiled = "eager"
    fwd = model
    if not o.no_compile:
        try:
            fwd = torch.compile(model)
            compiled = "torch.compile"
        except Exception as e:  # noqa: BLE001
            print("# torch.compile failed: %s" % e, file=sys.stderr)
    gen = torch.Generator(device=dev).manual_seed(o.seed)

    def step():
        for _ in range(acc):
            seq = torch.randint(0, c["vocab"], (b, s + 1), device=dev, generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(seq[:, :-1], seq[:, 1:], cos, sin)
            (loss / acc).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, losses = [], []
    model.train()
    t_setup = time.perf_counter()
    for it in range(o.warmup + o.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            loss = step()
        except Exception as e:  # noqa: BLE001  (a compile failure shows at the first call)
            if compiled == "eager" or it > 0:
                raise
            print("# torch.compile failed at the first step, eager instead: %s" % str(e)[:300], file=sys.stderr)
            fwd, compiled = model, "eager (compile failed)"
            opt.zero_grad(set_to_none=True)
            loss = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        if it >= o.warmup:
            times.append(dt)
    med = statistics.median(times)
    tok = o.global_batch_size * s
    out = {"impl": "torch", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "mode": compiled, "model": o.model, "params": nparams, "seq_length": s,
           "micro_batch_size": b, "global_batch_size": o.global_batch_size, "padded_vocab_size": padded,
           "iters": o.iters, "warmup": o.warmup, "iteration_ms": med * 1e3, "tokens_per_s": tok / med,
           "first_iterations_s": time.perf_counter() - t_setup - sum(times),
           "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
           "loss_first": losses[0], "loss_last": losses[-1]}
    print(json.dumps(out))
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
