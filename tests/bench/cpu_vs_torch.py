#!/usr/bin/python3
"""The table of a CPU bench against PyTorch (bert_cpu.sh, t5_cpu.sh): mgt-train's metrics file (the
first iteration left out) and torch bench JSON objects, tokens/s of each and their ratio.

  cpu_vs_torch.py TITLE MGT.jsonl TORCH.json TOKENS_PER_ITER [BLASFIX.json CORETYPE]"""
import json
import sys

title, mj, tj, tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
m = [json.loads(l) for l in open(mj)][1:]
t = json.load(open(tj))
ms = sum(o["elapsed_ms"] for o in m) / len(m) / 1e3
mt = tokens / ms
print("# %s; means of %d timed iterations after 1" % (title, len(m)))
print("%-8s %12s %12s" % ("impl", "s/iter", "tokens/s"))
print("%-8s %12.3f %12.1f" % ("mgt", ms, mt))
print("%-8s %12.3f %12.1f" % ("torch", t["iter_s"], t["tokens_per_s"]))
print("mgt/torch tokens/s: %.2f" % (mt / t["tokens_per_s"]))
f = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else {}
if f:
    print("%-8s %12.3f %12.1f   (torch with OPENBLAS_CORETYPE=%s)" % ("torch-bf", f["iter_s"], f["tokens_per_s"], sys.argv[6]))
    print("mgt/torch-blasfix tokens/s: %.2f" % (mt / f["tokens_per_s"]))
print("# torch %s" % json.dumps(t))
if f:
    print("# torch-blasfix %s" % json.dumps(f))
