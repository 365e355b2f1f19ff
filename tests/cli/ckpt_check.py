#!/usr/bin/python3
"""Checks of the checkpoint `build/tests/test_ckpt --write DIR` writes, for t4000-ckpt-h5py.sh.

    ckpt_check.py values DIR        contrib/mgt_ckpt.py assembles the known tensors and values
    ckpt_check.py expected DIR      ... equal to DIR/expected.h5 (the C dump writer's file)
    ckpt_check.py virtual DIR       DIR/iter_0000007/model.h5's virtual datasets equal them
    ckpt_check.py metadata DIR      metadata.json as written, also as model.h5's attribute
    ckpt_check.py raw DIR NAME OUT  write tensor NAME's bytes (little-endian) to OUT

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
    if cmd == "raw":
        known(rest[0]).astype(known(rest[0]).dtype.newbyteorder("<")).tofile(rest[1])
        return True
    raise SystemExit(f"unknown check {cmd}")


if __name__ == "__main__":
    sys.exit(0 if main(*sys.argv[1:]) else 1)
