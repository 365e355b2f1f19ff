#!/usr/bin/python3
"""CPU training throughput of a PyTorch Mamba-2 language model (Megatron-Core's hybrid model with
every layer 'M': MambaLayer / MambaMixer, megatron/core/ssm/mamba_mixer.py: RMSNorm, in_proj to
[z | x | B | C | dt], the causal depthwise conv of width 4 with SiLU, the chunked SSD scan of
torch_ssd.py (chunk 128, Dao & Gu 2024 section 6: the reference path transformers' Mamba2
torch_forward takes), the gated RMSNorm over groups, out_proj, the residual; the final RMSNorm
and the tied output layer), in float32 with torch.optim.AdamW (foreach), as the yardstick for
mgt-train --model mamba2-130m (tests/bench/hybrid_cpu.sh runs both).  No dropout (Megatron's
hybrid examples train without it).  Batches: random ids, every position a label; loss = mean
cross entropy; global-norm clipping 1.0.  Prints one JSON object: means over the timed
iterations.

On a GPU (--device cuda, tests/bench/gpu.sh's hybrid case) the parameters live there and, with
--bf16, the forward runs under torch.autocast(bfloat16) (the matmuls in bf16, as mgt's --bf16
linears; the scan's einsums too); iterations are timed after torch.cuda.synchronize.

Usage: torch_mamba_bench.py [--layers 24] [--hidden 768] [--head-dim 64] [--state 128]
         [--groups 1] [--seq-length 1024] [--micro-batch-size 1] [--vocab 50304] [--iters 3]
         [--warmup 1] [--threads 2] [--device cpu|cuda] [--bf16]
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ssd import ssd  # noqa: E402


def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def make_params(o, g):
    h, DI = o.hidden, 2 * o.hidden
    NH, CD = DI // o.head_dim, DI + 2 * o.groups * o.state
    n = lambda *s, std=0.02: (torch.randn(*s, generator=g) * std).requires_grad_()
    u = lambda *s: ((torch.rand(*s, generator=g) - 0.5)).requires_grad_()
    P = {"word": n(o.vocab, h), "lnf": torch.ones(h).requires_grad_()}
    for l in range(o.layers):
        P.update({f"{l}.ln": torch.ones(h).requires_grad_(), f"{l}.in": n(2 * DI + 2 * o.groups * o.state + NH, h),
                  f"{l}.cw": u(CD, 4), f"{l}.cb": u(CD), f"{l}.dtb": (torch.rand(NH, generator=g) - 4).requires_grad_(),
                  f"{l}.alog": torch.log(1 + 15 * torch.rand(NH, generator=g)).requires_grad_(),
                  f"{l}.D": torch.ones(NH).requires_grad_(), f"{l}.nw": torch.ones(DI).requires_grad_(),
                  f"{l}.out": n(h, DI, std=0.02 / o.layers ** 0.5)})
    return P, DI, NH, CD


def mixer(o, P, l, x, DI, NH, CD):
    b, L, _ = x.shape
    G, N, p = o.groups, o.state, o.head_dim
    z, xbc, dt = torch.split(x @ P[f"{l}.in"].t(), [DI, CD, NH], dim=-1)
    xbc = F.silu(F.conv1d(xbc.transpose(1, 2), P[f"{l}.cw"][:, None, :], P[f"{l}.cb"], padding=3, groups=CD)[..., :L])
    xs, B, C = torch.split(xbc.transpose(1, 2), [DI, G * N, G * N], dim=-1)
    dt = F.softplus(dt + P[f"{l}.dtb"])
    y = ssd(xs.reshape(b, L, NH, p), dt, -torch.exp(P[f"{l}.alog"]), B.reshape(b, L, G, N), C.reshape(b, L, G, N),
            P[f"{l}.D"]).reshape(b, L, DI)
    v = (y * F.silu(z)).reshape(b, L, G, DI // G)
    v = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(b, L, DI) * P[f"{l}.nw"]
    return v @ P[f"{l}.out"].t()


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("layers", 24), ("hidden", 768), ("head-dim", 64), ("state", 128), ("groups", 1), ("seq-length", 1024),
                 ("micro-batch-size", 1), ("vocab", 50304), ("iters", 3), ("warmup", 1), ("threads", 2)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true")
    o = ap.parse_args()
    torch.set_num_threads(o.threads)
    g = torch.Generator().manual_seed(1234)
    P, DI, NH, CD = make_params(o, g)
    dev = torch.device(o.device)
    P = {k: v.detach().to(dev).requires_grad_() for k, v in P.items()}
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=o.bf16)
    opt = torch.optim.AdamW(P.values(), lr=1e-4, weight_decay=0.01, foreach=True)
    b, S = o.micro_batch_size, o.seq_length
    ts = []
    for it in range(o.warmup + o.iters):
        tok = torch.randint(0, o.vocab, (b, S + 1), generator=g).to(dev)
        sync()
        t0 = time.perf_counter()
        with amp:
            x = P["word"][tok[:, :-1]]
            for l in range(o.layers):
                x = x + mixer(o, P, l, rms(x, P[f"{l}.ln"]), DI, NH, CD)
            logits = rms(x, P["lnf"]) @ P["word"].t()
            loss = F.cross_entropy(logits.reshape(-1, o.vocab).float(), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
        opt.step()
        sync()
        if it >= o.warmup:
            ts.append(time.perf_counter() - t0)
    t = sum(ts) / len(ts)
    mem = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0
    print(json.dumps({"impl": "torch", "mode": "eager" + (" bf16" if o.bf16 else ""), "peak_memory_mib": mem,
                      "torch": torch.__version__, "threads": o.threads, "seq_length": S,
                      "micro_batch_size": b, "layers": o.layers, "iter_s": t, "tokens_per_s": b * S / t,
                      "loss": float(loss), "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
