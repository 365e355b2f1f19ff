#!/usr/bin/python3
"""CPU training throughput of the PyTorch reference model (tests/torch/mgt_ref.py), float32,
as the yardstick for `mgt-train` (tests/bench/train_cpu.sh runs both).

Same recipe as mgt-train: micro-batch = global batch (one micro-batch per iteration), random
token ids (uniform over the GPT-2 vocabulary), loss = token mean of the per-token cross-entropy
over the padded vocabulary, global-norm clipping (--clip-grad), AdamW with no weight decay on
biases and norms.  Each phase is timed with time.perf_counter (torch on CPU is synchronous):
  forward   embedding .. logits .. per-token loss and its mean
  backward  loss.backward()
  optimizer grad norm, clipping, AdamW step, zeroing the grads
Prints one JSON object (means over the timed iterations after --warmup) to stdout.

Usage: torch_train_bench.py --model tiny-gpt2|gpt2-124m|FILE.json [--seq-length S]
         [--micro-batch-size B] [--iters N] [--warmup W] [--threads T] [--seed N]
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import mgt_ref  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(prog="torch_train_bench.py")
    ap.add_argument("--model", default="tiny-gpt2")
    ap.add_argument("--seq-length", type=int, default=0)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--clip-grad", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    o = ap.parse_args(argv)
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)

    args = mgt_ref.load_preset(o.model)
    if o.seq_length:
        args["seq_length"] = o.seq_length
        args["max_position_embeddings"] = max(o.seq_length, args.get("max_position_embeddings") or 0)
    args.update(micro_batch_size=o.micro_batch_size, global_batch_size=o.micro_batch_size, lr=o.lr,
                clip_grad=o.clip_grad, hidden_dropout=0.0, attention_dropout=0.0)
    a = mgt_ref.normalize_args(args)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(o.seed)
    std = a["init_method_std"]
    init = {}
    for name, shape, kind, _ in mgt_ref.tensor_specs(a):  # Megatron's init, float32 throughout
        t = torch.empty(shape, dtype=torch.float32)
        if kind in ("normal", "proj"):
            t.normal_(0.0, std / math.sqrt(2.0 * a["num_layers"]) if kind == "proj" else std, generator=gen)
        else:
            t.fill_(1.0 if kind == "one" else 0.0)
        init[name] = t
    model = mgt_ref.GPTRef(a, init, torch.float32)
    del init
    tr = mgt_ref.Trainer(model)
    setup_s = time.perf_counter() - t0
    nparams = sum(t.numel() for t in model.params.values())

    b, s = o.micro_batch_size, a["seq_length"]
    V = a["vocab_size"] or a["padded_vocab_size"]
    g = np.random.default_rng(o.seed)
    times = []
    losses = []
    for it in range(o.warmup + o.iters):
        seq = g.integers(0, V, size=(b, s + 1))
        t0 = time.perf_counter()
        _, loss = model.losses(seq[:, :-1], seq[:, 1:])
        obj = loss.mean()
        t1 = time.perf_counter()
        obj.backward()
        t2 = time.perf_counter()
        # sdot per tensor: no temporaries, fp32 accumulation (OpenBLAS), like a C trainer
        norm = math.sqrt(sum(float(torch.dot(t.grad.view(-1), t.grad.view(-1))) for t in model.params.values()))
        coeff = o.clip_grad / (norm + 1e-6)
        with torch.no_grad():
            if o.clip_grad > 0 and coeff < 1.0:
                for p in model.params.values():
                    p.grad.mul_(coeff)
        tr.opt.step()
        model.zero_grad()
        t3 = time.perf_counter()
        losses.append(float(obj))
        if it >= o.warmup:
            times.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
        del loss, obj

    tok = b * s
    mean = [sum(x[i] for x in times) / len(times) for i in range(4)]
    out = {
        "impl": "torch", "torch": torch.__version__, "model": o.model, "params": nparams,
        "seq_length": s, "micro_batch_size": b, "padded_vocab_size": a["padded_vocab_size"],
        "iters": o.iters, "warmup": o.warmup, "setup_s": setup_s,
        "threads_requested": o.threads, "torch_num_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "time_fwd_ms": mean[0] * 1e3, "time_bwd_ms": mean[1] * 1e3, "time_opt_ms": mean[2] * 1e3,
        "time_iter_ms": mean[3] * 1e3,
        "tokens_per_s_fwd": tok / mean[0], "tokens_per_s_bwd": tok / mean[1],
        "tokens_per_s_opt": tok / mean[2], "tokens_per_s": tok / mean[3],
        "loss_first": losses[0], "loss_last": losses[-1],
        "peak_rss_kb_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    if not all(math.isfinite(x) for x in losses):
        out["error"] = "non-finite loss"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
