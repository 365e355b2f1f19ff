#!/usr/bin/python3
"""Read mgt checkpoints (man 5 mgt-ckpt) with h5py and numpy.

As a module:

    import mgt_ckpt
    tensors, meta = mgt_ckpt.load("ckpt")                  # the tracker's iteration
    tensors, meta = mgt_ckpt.load("ckpt", iteration=100)   # ckpt/iter_0000100
    tensors, meta = mgt_ckpt.load("ckpt/iter_0000100")     # an iteration directory
    w = tensors["decoder.layers.0.self_attention.linear_qkv.weight"]   # numpy, global shape

load() reads every piece of every shard file (*.h5 except the index model.h5) and assembles
each tensor to its global shape from the pieces' global_offset attributes; it raises
ValueError when pieces disagree or do not cover a tensor.  index(dir) lists the pieces
without reading data.  The virtual index file DIR/model.h5 gives the same whole tensors
directly: h5py.File("ckpt/iter_0000100/model.h5")["output_layer.weight"][...].

As a program:

    python3 contrib/mgt_ckpt.py [--metadata] DIR   list the tensors (name, dtype, global
                                                   shape, number of pieces), or print
                                                   metadata.json
"""
import json
import os
import sys

import h5py
import numpy as np

TRACKER = "latest_checkpointed_iteration.txt"
INDEX = "model.h5"


def iteration_dir(path, iteration=None):
    """The iteration directory for a save directory (its tracker, or iteration) or itself."""
    if iteration is not None:
        return os.path.join(path, "iter_%07d" % iteration)
    if os.path.exists(os.path.join(path, "metadata.json")):
        return path
    tracker = os.path.join(path, TRACKER)
    if not os.path.exists(tracker):
        raise FileNotFoundError(f"{path}: neither a checkpoint (metadata.json) nor a save "
                                f"directory ({TRACKER})")
    with open(tracker) as f:
        text = f.read().strip()
    if not text.isdigit():
        raise ValueError(f"{tracker}: {text!r} is not an iteration number")
    d = os.path.join(path, "iter_%07d" % int(text))
    if not os.path.isdir(d) and os.path.isdir(d + ".old"):
        return d + ".old"  # a replacement of this iteration was interrupted (man 5 mgt-ckpt)
    return d


def shard_files(d):
    """Shard file names of an iteration directory, sorted."""
    return sorted(f for f in os.listdir(d)
                  if f.endswith(".h5") and f != INDEX and not f.startswith("."))


def _open(path):
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise OSError(f"{path}: {e}") from None


def index(d):
    """{name: [(file, global_shape, offset, shape, dtype), ...]} of an iteration directory."""
    out = {}
    for fn in shard_files(d):
        with _open(os.path.join(d, fn)) as f:
            for name, ds in f.items():
                if not isinstance(ds, h5py.Dataset):
                    raise ValueError(f"{d}/{fn}: {name}: not a dataset")
                g = tuple(int(x) for x in ds.attrs["global_shape"])
                o = tuple(int(x) for x in ds.attrs["global_offset"])
                out.setdefault(name, []).append((fn, g, o, ds.shape, ds.dtype))
    return out


def _assemble(d, name, pieces, files):
    g, dtype = pieces[0][1], pieces[0][4]
    whole = np.zeros(g, dtype=dtype)
    covered = np.zeros(g, dtype=bool)
    for fn, gs, off, shape, dt in pieces:
        if gs != g or dt != dtype:
            raise ValueError(f"{d}: {name}: global shape/dtype {g} {dtype} in {pieces[0][0]} "
                             f"but {gs} {dt} in {fn}")
        box = tuple(slice(o, o + s) for o, s in zip(off, shape))
        whole[box] = files[fn][name][...]
        covered[box] = True
    if not covered.all():
        raise ValueError(f"{d}: {name}: {int((~covered).sum())} of {covered.size} elements "
                         f"are in no piece")
    return whole


def load(path, iteration=None, names=None):
    """(tensors, metadata): {name: numpy array of the global shape}, metadata.json as a dict.
    names: only these tensors (default all)."""
    d = iteration_dir(path, iteration)
    with open(os.path.join(d, "metadata.json")) as f:
        meta = json.load(f)
    ix = index(d)
    files = {fn: _open(os.path.join(d, fn)) for fn in shard_files(d)}
    try:
        tensors = {n: _assemble(d, n, p, files) for n, p in sorted(ix.items())
                   if names is None or n in names}
    finally:
        for f in files.values():
            f.close()
    return tensors, meta


def main(argv):
    args = [a for a in argv if a != "--metadata"]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: mgt_ckpt.py [--metadata] DIR", file=sys.stderr)
        return 2
    try:
        d = iteration_dir(args[0])
        if "--metadata" in argv:
            with open(os.path.join(d, "metadata.json")) as f:
                print(f.read())
            return 0
        ix = index(d)
    except (OSError, ValueError, KeyError) as e:
        print(f"mgt_ckpt.py: error: {e}", file=sys.stderr)
        return 1
    print(f"# {d}: {len(ix)} tensors in {len(shard_files(d))} shards")
    for name, p in sorted(ix.items()):
        shape = "x".join(str(x) for x in p[0][1])
        print(f"{name}\t{p[0][4]}\t{shape}\t{len(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
