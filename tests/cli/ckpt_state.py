#!/usr/bin/python3
"""Whether two mgt checkpoints hold the same state (t4300): every dataset of the newest iteration
(model.h5 read with h5py: weights and Adam moments) with the same shape and bits, and the same
progress in metadata.json (iteration, consumed samples, the scheduler's step count, the optimizer's
step).  usage: ckpt_state.py CKPT_A CKPT_B [--weights-only] (weights and the iteration alone); exit 0 same, 1 different (each
difference printed as a TAP comment)."""
import json
import os
import sys

import h5py
import numpy as np


def load(d):
    it = int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read().strip())
    p = os.path.join(d, "iter_%07d" % it)
    with h5py.File(os.path.join(p, "model.h5"), "r") as f:
        t = {k: f[k][()] for k in f.keys()}
    return t, json.load(open(os.path.join(p, "metadata.json")))


def main():
    a, ma = load(sys.argv[1])
    b, mb = load(sys.argv[2])
    weights = "--weights-only" in sys.argv
    bad = 0
    for k in sorted(set(a) | set(b)):
        if weights and k.startswith("optimizer."):
            continue
        if k not in a or k not in b:
            print("# %s only in %s" % (k, sys.argv[1] if k in a else sys.argv[2]))
            bad += 1
        elif a[k].shape != b[k].shape or not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)):
            print("# %s differs" % k)
            bad += 1
    keys = [("iteration",)] + ([] if weights else [("consumed_train_samples",), ("consumed_valid_samples",),
                                                   ("opt_param_scheduler", "num_steps"), ("optimizer", "step")])
    for path in keys:
        x, y = ma, mb
        for p in path:
            x, y = x.get(p, {}), y.get(p, {})
        if x != y:
            print("# %s: %s against %s" % (".".join(path), x, y))
            bad += 1
    print("# %d datasets compared, %d differ" % (len(a), bad))
    sys.exit(1 if bad else 0)


main()
