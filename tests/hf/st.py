#!/usr/bin/python3
"""Tiny safetensors reader/writer for mgt's tests (numpy only), independent of mgt's C code.

Format (huggingface/safetensors, docs "safetensors format"): an 8-byte little-endian u64 N, then N bytes
of UTF-8 JSON {"__metadata__": {str: str}, NAME: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}},
padded with spaces so that the data starts at a multiple of 8; then the data bytes, row-major,
little-endian, offsets relative to the start of the data.  An HF model directory holds model.safetensors
or model-0000K-of-0000N.safetensors shards plus model.safetensors.index.json
{"metadata": {"total_size": N}, "weight_map": {name: shard file}}.

bf16 is stored as uint16 arrays (numpy has no bfloat16); f32 -> bf16 is round-to-nearest-even on the
fp32 bit pattern, NaN kept quiet.

Command line:
  st.py ls PATH                    list tensors (name dtype shape) of a file or an HF directory
  st.py compare DIR_A DIR_B [-n N] bit-for-bit comparison (names, dtypes, shapes, bytes); prints the
                                   first N differences; exit 0 equal, 1 different, 2 usage/read error
  st.py self-test                  bf16/f16 rounding against torch's own casts (all halfway cases too),
                                   write/read round trips, sharding, compare detecting a 1-ulp change
"""
import json
import os
import struct
import sys

import numpy as np

# safetensors dtype name -> numpy dtype used to hold the raw data (BF16 as uint16 bit patterns)
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even; NaN -> quiet NaN, sign kept."""
    shape = np.shape(x)
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    b = x.view(np.uint32).astype(np.uint64)
    lsb = (b >> 16) & 1
    r = ((b + 0x7FFF + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = ((b[nan] >> 16) | 0x0040).astype(np.uint16)
    return r.reshape(shape)


def bf16_bits_to_f32(u):
    return (np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_float(dtype, arr):
    """Raw array of safetensors dtype -> float64 array (exact for F32/F16/BF16/F64)."""
    if dtype == "BF16":
        return bf16_bits_to_f32(arr).astype(np.float64)
    return np.asarray(arr).astype(np.float64)


def from_f32(x, dtype):
    """float32 values -> raw array for dtype (RNE for BF16 and F16; numpy's float16 cast is RNE)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "F32":
        return x
    if dtype == "BF16":
        return f32_to_bf16_bits(x)
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16)
    if dtype == "F64":
        return x.astype(np.float64)
    raise ValueError("from_f32: unsupported dtype " + dtype)


class StError(Exception):
    pass


def read_header(path):
    """-> (header dict without __metadata__, metadata dict, data start offset, file size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise StError("%s: shorter than the 8-byte header length" % path)
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise StError("%s: header length %d exceeds the file (%d bytes)" % (path, n, size))
        raw = f.read(n)
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise StError("%s: header is not JSON: %s" % (path, e))
    if not isinstance(hdr, dict):
        raise StError("%s: header is not a JSON object" % path)
    meta = hdr.pop("__metadata__", {}) or {}
    start = 8 + n
    for name, t in hdr.items():
        if t.get("dtype") not in DTYPES:
            raise StError("%s: tensor %s: unknown dtype %r" % (path, name, t.get("dtype")))
        b, e = t["data_offsets"]
        cnt = int(np.prod(t["shape"], dtype=np.int64))
        if not (0 <= b <= e and start + e <= size):
            raise StError("%s: tensor %s: data_offsets %s outside the data (%d bytes)" % (path, name, (b, e), size - start))
        if e - b != cnt * DTYPES[t["dtype"]].itemsize:
            raise StError("%s: tensor %s: %d bytes for %s %s" % (path, name, e - b, t["dtype"], t["shape"]))
    return hdr, meta, start, size


def files_of(path):
    """A .safetensors file, or an HF directory -> list of (tensor name, file path)."""
    if os.path.isfile(path):
        hdr, _, _, _ = read_header(path)
        return [(k, path) for k in hdr]
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        return [(k, os.path.join(path, v)) for k, v in wm.items()]
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return files_of(single)
    raise StError("%s: neither model.safetensors nor model.safetensors.index.json" % path)


def load(path):
    """File or HF directory -> {name: (dtype, shape tuple, raw numpy array)} (BF16 as uint16)."""
    out = {}
    byfile = {}
    for name, fp in files_of(path):
        byfile.setdefault(fp, []).append(name)
    for fp, names in byfile.items():
        hdr, _, start, _ = read_header(fp)
        with open(fp, "rb") as f:
            for name in names:
                if name not in hdr:
                    raise StError("%s: tensor %s named in the index is missing" % (fp, name))
                t = hdr[name]
                b, e = t["data_offsets"]
                f.seek(start + b)
                buf = f.read(e - b)
                arr = np.frombuffer(buf, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
                out[name] = (t["dtype"], tuple(t["shape"]), arr)
    return out


def load_float(path):
    """File or HF directory -> {name: float64 array}."""
    return {k: to_float(d, a) for k, (d, s, a) in load(path).items()}


def _write_file(path, tensors, metadata):
    """tensors: list of (name, dtype, raw numpy array) in data order."""
    hdr = {"__metadata__": dict(metadata)}
    off = 0
    for name, dt, arr in tensors:
        nb = arr.size * DTYPES[dt].itemsize
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + nb]}
        off += nb
    js = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    js += b" " * ((8 - (8 + len(js)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for name, dt, arr in tensors:
            f.write(np.ascontiguousarray(arr, dtype=DTYPES[dt]).tobytes())
    os.replace(tmp, path)


def save_dir(directory, tensors, shard_bytes=0, metadata=None):
    """Write an HF model directory's weights.

    tensors: list of (name, dtype, raw array) in state-dict order.  shard_bytes 0 or >= total: one
    model.safetensors; else shards model-0000K-of-0000N.safetensors filled in order (a new shard starts
    when the next tensor would push the current one past shard_bytes; a tensor larger than the limit gets
    a shard of its own), plus model.safetensors.index.json with weight_map sorted by name."""
    metadata = {"format": "pt"} if metadata is None else metadata
    os.makedirs(directory, exist_ok=True)
    sizes = [a.size * DTYPES[d].itemsize for _, d, a in tensors]
    total = sum(sizes)
    if not shard_bytes or total <= shard_bytes:
        _write_file(os.path.join(directory, "model.safetensors"), tensors, metadata)
        return ["model.safetensors"]
    shards, cur, cur_b = [], [], 0
    for t, nb in zip(tensors, sizes):
        if cur and cur_b + nb > shard_bytes:
            shards.append(cur)
            cur, cur_b = [], 0
        cur.append(t)
        cur_b += nb
    if cur:
        shards.append(cur)
    n = len(shards)
    names = []
    wm = {}
    for k, sh in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n)
        _write_file(os.path.join(directory, fn), sh, metadata)
        names.append(fn)
        for name, _, _ in sh:
            wm[name] = fn
    idx = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}
    with open(os.path.join(directory, "model.safetensors.index.json.tmp"), "w") as f:
        json.dump(idx, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(directory, "model.safetensors.index.json.tmp"),
               os.path.join(directory, "model.safetensors.index.json"))
    return names


def compare(a, b, nmax=10):
    """Bit-for-bit comparison of two files/directories; returns a list of difference lines."""
    A, B = load(a), load(b)
    diffs = []
    for name in sorted(set(A) - set(B)):
        diffs.append("only in %s: %s" % (a, name))
    for name in sorted(set(B) - set(A)):
        diffs.append("only in %s: %s" % (b, name))
    for name in sorted(set(A) & set(B)):
        da, sa, xa = A[name]
        db, sb, xb = B[name]
        if da != db:
            diffs.append("%s: dtype %s vs %s" % (name, da, db))
        elif sa != sb:
            diffs.append("%s: shape %s vs %s" % (name, list(sa), list(sb)))
        else:
            ba = np.ascontiguousarray(xa).view(np.uint8).reshape(-1)
            bb = np.ascontiguousarray(xb).view(np.uint8).reshape(-1)
            if not np.array_equal(ba, bb):
                ua = xa.reshape(-1).view(np.uint8).reshape(xa.size, -1) if xa.size else xa
                ub = xb.reshape(-1).view(np.uint8).reshape(xb.size, -1) if xb.size else xb
                bad = np.nonzero((ua != ub).any(axis=1))[0]
                i = int(bad[0])
                fa = to_float(da, xa.reshape(-1)[i:i + 1])[0] if da in FLOAT_DTYPES else xa.reshape(-1)[i]
                fb = to_float(db, xb.reshape(-1)[i:i + 1])[0] if db in FLOAT_DTYPES else xb.reshape(-1)[i]
                diffs.append("%s: %d of %d elements differ; first at flat index %d (%s): %r vs %r"
                             % (name, len(bad), xa.size, i, list(np.unravel_index(i, sa)) if sa else [], fa, fb))
    return diffs


def self_test():
    import shutil
    import tempfile
    import torch
    fails = []
    rng = np.random.default_rng(0)
    x = np.concatenate([
        (rng.standard_normal(1 << 20) * 1e3).astype(np.float32),
        rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ((rng.integers(0, 2 ** 16, 1 << 16, dtype=np.uint64) << 16) | 0x8000).astype(np.uint32).view(np.float32),
        np.array([np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-45, 6e-8, 65520.0, np.nan], np.float32)])
    nan = np.isnan(x)
    ours = f32_to_bf16_bits(x)
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nb = int((ours[~nan] != ref[~nan]).sum())
    qn = bool(np.isnan(bf16_bits_to_f32(ours[nan])).all())
    print("bf16 RNE vs torch: %d mismatches of %d values; NaN stays NaN: %s" % (nb, int((~nan).sum()), qn))
    f16 = from_f32(x[~nan], "F16").view(np.uint16)
    rf = torch.from_numpy(x[~nan]).to(torch.float16).numpy().view(np.uint16)
    n16 = int((f16 != rf).sum())
    print("f16 vs torch: %d mismatches" % n16)
    if nb or not qn or n16:
        fails.append("rounding")
    tmp = tempfile.mkdtemp(prefix="st-selftest-")
    try:
        t = [("b.w", "BF16", f32_to_bf16_bits(rng.standard_normal((7, 5)).astype(np.float32))),
             ("a.w", "F32", rng.standard_normal((3, 4)).astype(np.float32)),
             ("c.scalar", "F32", np.array(-1e4, np.float32)),
             ("d.h", "F16", rng.standard_normal(9).astype(np.float16)),
             ("e.i", "I64", np.arange(5, dtype=np.int64))]
        save_dir(os.path.join(tmp, "one"), t)
        save_dir(os.path.join(tmp, "sh"), t, shard_bytes=64)
        nsh = len([f for f in os.listdir(os.path.join(tmp, "sh")) if f.endswith(".safetensors")])
        for d in ("one", "sh"):
            L = load(os.path.join(tmp, d))
            for name, dt, arr in t:
                if L[name][0] != dt or L[name][1] != arr.shape or L[name][2].tobytes() != arr.tobytes():
                    fails.append("round trip %s %s" % (d, name))
        with open(os.path.join(tmp, "one", "model.safetensors"), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
        if (8 + n) % 8:
            fails.append("header not padded to 8")
        eq = compare(os.path.join(tmp, "one"), os.path.join(tmp, "sh"))
        t2 = [(nm, dt, a.copy()) for nm, dt, a in t]
        t2[0][2].reshape(-1)[17] ^= 1
        save_dir(os.path.join(tmp, "two"), t2)
        ne = compare(os.path.join(tmp, "one"), os.path.join(tmp, "two"))
        print("round trips ok: %s; %d shards; compare equal: %s; 1-ulp change found: %s"
              % (not fails, nsh, not eq, ne[:1]))
        if eq or len(ne) != 1 or nsh < 3:
            fails.append("compare/shards")
    finally:
        shutil.rmtree(tmp)
    print("st.py self-test %s" % ("FAILED: " + ", ".join(fails) if fails else "passed"))
    return 1 if fails else 0


def main(argv):
    if argv[:1] == ["self-test"]:
        return self_test()
    if len(argv) >= 2 and argv[0] == "ls":
        for name, (d, s, _) in sorted(load(argv[1]).items()):
            print("%s %s %s" % (name, d, list(s)))
        return 0
    if len(argv) >= 3 and argv[0] == "compare":
        nmax = 10
        if len(argv) == 5 and argv[3] == "-n":
            nmax = int(argv[4])
        diffs = compare(argv[1], argv[2], nmax)
        for line in diffs[:nmax]:
            print(line)
        if len(diffs) > nmax:
            print("... %d more differences" % (len(diffs) - nmax))
        if not diffs:
            print("equal: %d tensors" % len(load(argv[1])))
        return 1 if diffs else 0
    sys.stderr.write(__doc__.split("Command line:")[1])
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (StError, OSError, KeyError, ValueError) as e:
        sys.stderr.write("st.py: %s\n" % e)
        sys.exit(2)
