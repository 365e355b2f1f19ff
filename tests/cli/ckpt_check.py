#!/usr/bin/python3
"""Checks of the checkpoint `build/tests/test_ckpt --write DIR` writes, for t4000-ckpt-h5py.sh.

    ckpt_check.py values DIR        contrib/mgt_ckpt.py assembles the known tensors and values
    ckpt_check.py expected DIR      ... equal to DIR/expected.h5 (the C dump writer's file)
    ckpt_check.py virtual DIR       DIR/iter_0000007/model.h5's virtual datasets equal them
    ckpt_check.py metadata DIR      metadata.json as written, also as model.h5's attribute
    ckpt_check.py raw DIR NAME OUT  write tensor NAME's bytes (little-endian) to OUT
    ckpt_check.py moe DIR           `test_ckpt --write-moe DIR`'s checkpoint: every expert
                                    tensor is one dataset [E, rows, cols] (E = 4) in the shards
                                    (pieces [k, rows, cols]), in model.h5 and through
                                    mgt_ckpt.load, equal to DIR/expected.h5, Adam's moments too;
                                    no per-expert datasets

The values are computed here from their formula (test_ckpt.c, fill()), independently of HDF5.
Exit status 0 when the check holds; the reason on stderr otherwise.
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../contrib"))
import mgt_ckpt  # noqa: E402

TENSORS = {
    "embedding.word_embeddings.weight": ((10, 6), "float32"),
    "embedding.position_embeddings.weight": ((8, 6), "float32"),
    "decoder.layers.self_attention.linear_qkv.weight": ((2, 18, 6), "float32"),
    "decoder.layers.self_attention.linear_qkv.bias": ((2, 18), "float32"),
    "decoder.layers.self_attention.linear_proj.weight": ((2, 6, 6), "float32"),
    "decoder.layers.mlp.linear_fc1.weight": ((2, 16, 6), "float32"),
    "decoder.layers.mlp.linear_fc2.weight": ((2, 6, 8), "float32"),
    "decoder.final_layernorm.weight": ((6,), "float32"),
    "output_layer.weight": ((10, 6), "float32"),
    "optimizer.state.exp_avg.output_layer.weight": ((10, 6), "float64"),
    "rng.counters": ((5,), "int32"),
}


def known(name):
    shape, dtype = TENSORS[name]
    key = sum(name.encode()) % 997
    v = (key * 131 + np.arange(int(np.prod(shape)), dtype=np.int64) * 7919) % 65521
    if dtype == "int32":
        a = (v - 30000).astype(np.int32)
    else:
        a = (v / 65521.0 - 0.5).astype(dtype)
    return a.reshape(shape)


def same(what, got):
    bad = []
    if sorted(got) != sorted(TENSORS):
        bad.append(f"tensor names {sorted(got)}")
    for name in TENSORS:
        if name in got:
            a, b = np.asarray(got[name]), known(name)
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                bad.append(f"{name}: {a.dtype} {a.shape} differs from {b.dtype} {b.shape}")
    for b in bad:
        print(f"{what}: {b}", file=sys.stderr)
    return not bad


MOE_SHAPES = {"linear_fc1.weight": (4, 16, 8), "linear_fc2.weight": (4, 8, 8)}


def moe(d):
    """The expert datasets of the MoE checkpoint (see the module docstring)."""
    it = os.path.join(d, "iter_0000005")
    bad = []
    with h5py.File(os.path.join(d, "expected.h5"), "r") as f:
        want = {n: f["expected"][n][...] for n in f["expected"]}
    names = [f"{p}decoder.layers.{l}.mlp.experts.{t}" for p in
             ("", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq.") for l in (0, 1) for t in MOE_SHAPES]
    if sorted(want) != sorted(names):
        bad.append(f"expected.h5 holds {sorted(want)}")
    tensors, _ = mgt_ckpt.load(d)
    os.chdir("/")  # model.h5's sources are found next to it
    with h5py.File(os.path.join(it, "model.h5"), "r") as f:
        virt = {n: (f[n].shape, f[n].is_virtual, f[n][...]) for n in names if n in f}
        if any("local_experts" in n for n in f):
            bad.append("model.h5 has per-expert datasets")
    pieces = 0
    for sf in mgt_ckpt.shard_files(it):
        with h5py.File(os.path.join(it, sf), "r") as f:
            for n in names:
                if n in f:
                    pieces += 1
                    gs = tuple(f[n].attrs["global_shape"])
                    if f[n].ndim != 3 or gs != MOE_SHAPES[n.split(".experts.")[1]]:
                        bad.append(f"{sf}: {n}: piece {f[n].shape} of global shape {gs}")
    for n in names:
        shape = MOE_SHAPES[n.split(".experts.")[1]]
        w = want.get(n)
        for what, a in (("mgt_ckpt.load", tensors.get(n)), ("model.h5", virt.get(n, (0, 0, None))[2])):
            if a is None or w is None or a.shape != shape or a.dtype != np.float32 or a.tobytes() != w.tobytes():
                bad.append(f"{what}: {n}: {None if a is None else (a.dtype, a.shape)} differs from the expected float32 {shape} (shape or values)")
        if n in virt and not virt[n][1]:
            bad.append(f"model.h5: {n} is not virtual")
    if pieces < len(names) * 2:  # two EP ranks: at least two pieces of each dataset
        bad.append(f"only {pieces} pieces of the expert datasets in the shards")
    for b in bad:
        print(f"moe: {b}", file=sys.stderr)
    return not bad


def main(cmd, d, *rest):
    it = os.path.join(d, "iter_0000007")
    if cmd == "values":
        tensors, _ = mgt_ckpt.load(d)
        return same("mgt_ckpt.load", tensors)
    if cmd == "expected":
        with h5py.File(os.path.join(d, "expected.h5"), "r") as f:
            got = {n: f["expected"][n][...] for n in f["expected"]}
            ok = json.loads(f.attrs["metadata"]) == {"what": "expected"}
        return same("expected.h5", got) and ok
    if cmd == "virtual":
        os.chdir("/")  # source files are found next to model.h5, not in the working directory
        with h5py.File(os.path.join(it, "model.h5"), "r") as f:
            got = {n: f[n][...] for n in f}
            virt = all(f[n].is_virtual for n in f)
        return same("model.h5", got) and virt
    if cmd == "metadata":
        _, meta = mgt_ckpt.load(it)
        with h5py.File(os.path.join(it, "model.h5"), "r") as f:
            attr = json.loads(f.attrs["metadata"])
        return meta["iteration"] == 7 and meta["format"] == "mgt-ckpt" and attr == meta
    if cmd == "moe":
        return moe(d)
    if cmd == "raw":
        known(rest[0]).astype(known(rest[0]).dtype.newbyteorder("<")).tofile(rest[1])
        return True
    raise SystemExit(f"unknown check {cmd}")


if __name__ == "__main__":
    sys.exit(0 if main(*sys.argv[1:]) else 1)
