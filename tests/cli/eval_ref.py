#!/usr/bin/python3
"""mgt-eval's logits and greedy ids against the float64 PyTorch reference (tests/torch/mgt_ref.py).

  eval_ref.py CKPT_DIR VOCAB "PROMPT IDS" LOGITS.npy ["NEW IDS"] [--tol T]

The reference model is built from the checkpoint's metadata.json "args" and its weights, read as
whole tensors through the virtual index model.h5 with h5py (so it shares no loading code with
mgt).  VOCAB is the unpadded vocabulary (the test knows it from the tokenizer it trained with).
Checks, printing the figures as TAP comments:
  - LOGITS.npy is float32 [len(PROMPT) + len(NEW) - 1 (or len(PROMPT) without NEW), VOCAB];
  - max |mgt - ref| / max |ref| <= T (default 1e-5) over every row;
  - every new id is the argmax of the reference's logits at the position before it (the greedy
    chain: the prefixes agree by induction), the lowest id among equal ones; a different id
    is accepted only where its reference logit is within T * max |ref| of the maximum (a tie
    at float32 resolution), and said.
Exit 0 when all hold, 1 otherwise.
"""
import json
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import mgt_ref  # noqa: E402


def main():
    argv = sys.argv[1:]
    tol = 1e-5
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    ckpt, vocab, prompt, npy = argv[0], int(argv[1]), [int(x) for x in argv[2].split()], argv[3]
    new = [int(x) for x in argv[4].split()] if len(argv) > 4 else []
    it = int(open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).read())
    d = os.path.join(ckpt, "iter_%07d" % it)
    meta = json.load(open(os.path.join(d, "metadata.json")))
    args = dict(meta["args"])
    with h5py.File(os.path.join(d, "model.h5"), "r") as f:
        tensors = {k: f[k][()] for k in f.keys() if not k.startswith("optimizer.")}
    # expert tensors are stored whole, [E, rows, cols] (mgt-ckpt(5)): the reference names them
    # per expert, as Megatron-Core's SequentialMLP does
    for k in [k for k in tensors if ".mlp.experts.linear_fc" in k and tensors[k].ndim == 3]:
        whole = tensors.pop(k)
        for e in range(whole.shape[0]):
            tensors[k.replace(".mlp.experts.", ".mlp.experts.local_experts.%d." % e)] = whole[e]
    model = mgt_ref.GPTRef(args, tensors, dtype=torch.float64)
    fed = prompt + new[:-1]
    with torch.no_grad():
        ref = model.forward(np.array([fed]))[0].numpy()[:, :vocab]
    got = np.load(npy)
    ok = True
    if got.dtype != np.float32 or got.shape != (len(fed), vocab):
        print("# %s: %s %s, expected float32 %s" % (npy, got.dtype, got.shape, (len(fed), vocab)))
        return 1
    scale = np.abs(ref).max()
    err = np.abs(got.astype(np.float64) - ref).max() / scale
    print("# logits [%d, %d]: max |mgt - ref| / max |ref| = %.2e (max |ref| %.3g), tolerance %.0e"
          % (len(fed), vocab, err, scale, tol))
    ok = err <= tol
    for k, tok in enumerate(new):
        row = ref[len(prompt) + k - 1]
        best = int(np.argmax(row))  # the first of equal maxima
        if tok == best:
            continue
        gap = (row[best] - row[tok]) / scale
        if gap <= tol:
            print("# new token %d: mgt %d, reference %d, a tie at float32 resolution (gap %.1e)" % (k, tok, best, gap))
        else:
            print("# new token %d: mgt %d, reference argmax %d (gap %.2e of max |ref|)" % (k, tok, best, gap))
            ok = False
    if new:
        gaps = []
        for k in range(len(new)):
            r = np.sort(ref[len(prompt) + k - 1])
            gaps.append((r[-1] - r[-2]) / scale)
        print("# %d greedy ids checked; smallest top-2 gap of the reference %.2e of max |ref|" % (len(new), min(gaps)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
