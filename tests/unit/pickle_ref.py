#!/usr/bin/python3
"""Fixtures for tests/unit/test_pickle.c, written by CPython's pickle and PyTorch's torch.save
(Debian's python3-torch), with the expected values as Python and numpy see them.

    pickle_ref.py OUTDIR            the fixtures and OUTDIR/cases.json
    pickle_ref.py --corpus OUTDIR   small seed inputs for tests/fuzz/fuzz_torch.c

cases.json: a list of {"file", "kind": "torch" | "pickle", "offset", "length", "expect"}; expect
is the value tree: {"t": "none" | "bool" | "int" | "float" | "str" | "bytes" | "tuple" | "list" |
"dict" | "global" | "obj" | "tensor", ...}: ints as decimal strings, floats as float.hex(), bytes
as hex, dict items as [key, value] pairs in order, objects by class module/name with their
attribute dict ("attrs"), REDUCE arguments ("args") or raw BUILD state ("state"); tensors with
dtype, shape, stride, storage offset, a storage id ("sid": equal ids share a storage) and the
files of their values: "raw" (the elements' bytes, little-endian, row-major as numpy gives
them) and "f32" (the values as float32, where exact or a float type).  Exits 77 without torch.
"""
import argparse
import collections
import dataclasses
import enum
import io
import json
import math
import os
import pickle
import struct
import sys
import zipfile

try:
    import numpy as np
    import torch
except ImportError as e:  # the C test skips
    print("pickle_ref.py: %s" % e, file=sys.stderr)
    sys.exit(77)


@dataclasses.dataclass
class Point:
    x: int
    y: float
    tag: str = "p"


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    sizes: tuple


class Color(enum.Enum):
    RED = 1
    GREEN = "g"


class Tupled:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __getstate__(self):
        return (self.a, self.b, None, True, 5)

    def __setstate__(self, s):
        self.a, self.b = s[0], s[1]


# the module name the C test sees for the classes above
MOD = "__main__"

out_dir = None
tensor_files = [0]
storage_ids = {}


def dump_values(t):
    """Write t's values (raw bytes, float32 when exact) and return the files' names."""
    k = tensor_files[0]
    tensor_files[0] += 1
    c = t.detach().contiguous()
    if c.dtype == torch.bfloat16:
        raw = c.view(torch.int16).numpy().tobytes()
        f32 = c.float().numpy()
    elif c.dtype == torch.bool:
        raw = c.numpy().astype(np.uint8).tobytes()
        f32 = c.numpy().astype(np.float32)
    else:
        a = c.numpy()
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        f32 = a.astype(np.float32) if (a.dtype.kind == "f" or np.all(np.abs(a.astype(np.float64)) <= 2**24)) else None
    d = {}
    with open(os.path.join(out_dir, "t%d.raw" % k), "wb") as f:
        f.write(raw)
    d["raw"] = "t%d.raw" % k
    if f32 is not None:
        with open(os.path.join(out_dir, "t%d.f32" % k), "wb") as f:
            f.write(np.ascontiguousarray(f32, dtype="<f4").tobytes())
        d["f32"] = "t%d.f32" % k
    return d


def enc(x):
    """The expected tree of value x."""
    if x is None:
        return {"t": "none"}
    if isinstance(x, bool):
        return {"t": "bool", "v": x}
    if isinstance(x, int) and not isinstance(x, enum.Enum):
        if -2**63 <= x < 2**63:
            return {"t": "int", "v": str(x)}
        return {"t": "int", "v": str(x), "le": pickle.encode_long(x).hex()}
    if isinstance(x, float):
        return {"t": "float", "v": x.hex()}
    if isinstance(x, str):
        return {"t": "str", "v": x}
    if isinstance(x, (bytes, bytearray)):
        return {"t": "bytes", "v": bytes(x).hex()}
    if isinstance(x, torch.dtype):
        return {"t": "global", "module": "torch", "name": str(x).split(".")[1]}
    if isinstance(x, torch.Tensor):
        key = x.untyped_storage().data_ptr() if hasattr(x, "untyped_storage") else x.storage().data_ptr()
        sid = storage_ids.setdefault(key, len(storage_ids))
        d = {"t": "tensor", "dtype": str(x.dtype).split(".")[1], "shape": list(x.shape),
             "stride": list(x.stride()), "offset": x.storage_offset(), "sid": sid}
        d.update(dump_values(x))
        return d
    if isinstance(x, torch.Size):
        return {"t": "tuple", "items": [enc(v) for v in x]}
    if isinstance(x, tuple):
        return {"t": "tuple", "items": [enc(v) for v in x]}
    if isinstance(x, (list, set, frozenset)):
        return {"t": "list", "items": [enc(v) for v in x]}
    if isinstance(x, dict):
        return {"t": "dict", "items": [[enc(k), enc(v)] for k, v in x.items()]}
    if isinstance(x, enum.Enum):
        f, a = x.__reduce_ex__(2)[:2]
        if f is getattr:  # Python >= 3.11: getattr(Color, "RED")
            return {"t": "global", "module": MOD, "name": "%s.%s" % (type(x).__name__, a[1])}
        return {"t": "obj", "module": MOD, "name": type(x).__name__, "args": [enc(x.value)]}
    if isinstance(x, Tupled):
        return {"t": "obj", "module": MOD, "name": "Tupled", "state": enc(x.__getstate__())}
    if isinstance(x, argparse.Namespace) or dataclasses.is_dataclass(x):
        return {"t": "obj", "module": type(x).__module__, "name": type(x).__name__,
                "attrs": [[k, enc(v)] for k, v in vars(x).items()]}
    raise TypeError(type(x))


def plain():
    """Values every protocol writes without classes."""
    shared = [1, 2]
    return {
        "none": None, "t": True, "f": False, "zero": 0, "small": 7, "byte": 255, "short": 65535,
        "int32": -2**31, "big31": 2**31, "big63": 2**63, "neg63": -2**63 - 1, "huge": 3**100, "neg": -5,
        "i64max": 2**63 - 1, "i64min": -2**63,
        "pi": math.pi, "negz": -0.0, "inf": float("inf"), "tiny": 5e-324,
        "ascii": "hello", "uni": "h\u00e9llo \u4e2d \U0001f600", "empty": "", "esc": "a\\b\nc'\"",
        "bytes": b"\x00\x01\xff abc", "nobytes": b"", "latin": bytes(range(256)),
        "tuple": (1, "two", (3.0, None)), "empty_tuple": (), "list": [1, [2, [3, []]]],
        "nested": {"a": {"b": {"c": [1, 2, {"d": "e"}]}}}, "odict": collections.OrderedDict([("z", 1), ("a", 2)]),
        "intkeys": {1: "one", -2: "minus two", 2**70: "big"}, "tuplekeys": {(1, "a"): 1, (2, "b"): 2},
        "set": {3}, "frozenset": frozenset(["x"]), "bytearray": bytearray(b"ab\x00\xfe"),
        "shared": [shared, shared], "long_list": list(range(1500)),
        "long_str": "x" * 70000,
    }


def objects():
    return {
        "point": Point(3, 2.5), "frozen": Frozen("f", (1, 2)), "red": Color.RED, "green": Color.GREEN,
        "tupled": Tupled([1, 2], "b"), "size": torch.Size([4, 5]),
        # .metadata-like: storage_data keyed by frozen dataclass instances (MetadataIndex)
        "storage_data": {Frozen("w", torch.Size([0, 0])): ("__0_0.distcp", 0, 1024),
                         Frozen("w", torch.Size([2, 0])): ("__1_0.distcp", 0, 1024)},
        "args": argparse.Namespace(num_layers=24, hidden_size=1024, lr=3e-4, name="gpt", none=None, fp16=False,
                                   bf16=True, sizes=[1, 2, 3], params_dtype=torch.bfloat16,
                                   seed=2**40),
    }


def tensors():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(4, 6, generator=g)
    d = collections.OrderedDict()
    for dt in [torch.float32, torch.float16, torch.bfloat16, torch.float64]:
        d["rand_" + str(dt).split(".")[1]] = (torch.randn(3, 5, generator=g) * 100).to(dt)
    d["int64"] = torch.tensor([0, 1, -1, 2**24, -2**24, 2**40, 2**62], dtype=torch.int64)
    d["int64_small"] = torch.tensor([[0, 1], [-7, 2**24]], dtype=torch.int64)
    d["int32"] = torch.tensor([5, -6, 2**31 - 1, -2**31], dtype=torch.int32)
    d["int32_small"] = torch.tensor([5, -6, 123456], dtype=torch.int32)
    d["int16"] = torch.tensor([-32768, 32767, 0, 3], dtype=torch.int16)
    d["int8"] = torch.tensor([-128, 127, 0], dtype=torch.int8)
    d["uint8"] = torch.tensor([0, 255, 17], dtype=torch.uint8)
    d["bool"] = torch.tensor([True, False, True])
    d["scalar"] = torch.tensor(2.75)
    d["empty"] = torch.zeros(0, 3)
    d["base"] = base
    d["transpose"] = base.t()
    d["slice"] = base[1:3, 2:5]
    d["strided"] = base[::2, ::3]
    d["tail"] = base.view(-1)[5:]
    d["bf16_t"] = base.to(torch.bfloat16).t()
    d["expand"] = torch.tensor([1.0, 2.0]).expand(3, 2)
    d["4d"] = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5).permute(3, 1, 0, 2)
    w = torch.randn(5, 4, generator=g)
    d["embedding.weight"] = w
    d["output.weight"] = w  # tied: one storage
    d["param"] = torch.nn.Parameter(torch.ones(2, 2))
    return d


def torch_value():
    v = collections.OrderedDict()
    v["model"] = tensors()
    v["args"] = objects()["args"]
    v["iteration"] = 1234
    v["rng"] = {"state": (3, tuple(range(5)), None), "big": 2**63 + 5}
    v["names"] = ["a", "b"]
    v["set"] = {1}
    v["raw"] = b"\x00\x10\xff"
    v["none"] = None
    return v


def torch_bytes(v):
    b = io.BytesIO()
    torch.save(v, b)
    return b.getvalue()


def put(name, data):
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)


def op_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def crafted_pickle(v3):
    """data.pkl by hand: _rebuild_tensor_v3 over an UntypedStorage of 12 bytes (float16 x 6), a
    shape (2, 3) tensor; and _rebuild_from_type_v2 around a v2 tensor of a typed storage."""
    p = b"\x80\x02}q\x00(" + op_str("v3")
    p += b"ctorch._utils\n_rebuild_tensor_v3\n("
    p += b"(" + op_str("storage") + b"ctorch.storage\nUntypedStorage\n" + op_str("0") + op_str("cpu") + b"K\x0ct"
    p += b"QK\x00K\x02K\x03\x86K\x03K\x01\x86\x89ccollections\nOrderedDict\n)Rctorch\nfloat16\ntR"
    p += op_str("sub") + b"ctorch._tensor\n_rebuild_from_type_v2\n("
    p += b"ctorch._utils\n_rebuild_tensor_v2\nctorch\nTensor\n("
    p += b"(" + op_str("storage") + b"ctorch\nFloatStorage\n" + op_str("1") + op_str("cpu") + b"K\x04t"
    p += b"QK\x01K\x03\x85K\x01\x85\x89ccollections\nOrderedDict\n)Rt}tR"
    p += op_str("f8") + b"ctorch._utils\n_rebuild_tensor_v3\n("
    p += b"(" + op_str("storage") + b"ctorch.storage\nUntypedStorage\n" + op_str("2") + op_str("cpu") + b"K\x04t"
    p += b"QK\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)Rctorch\nfloat8_e4m3fn\ntR"
    p += b"u."
    return p


def zip_of(records):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            z.writestr(name, data)
    return b.getvalue()


def crafted(cases):
    h = np.array([1.5, -2.0, 0.25, 65504.0, -0.0, 3.0], dtype="<f2")
    f = np.array([9.0, 8.0, 7.0, 6.0], dtype="<f4")
    recs = [("arch/data.pkl", crafted_pickle(True)), ("arch/byteorder", b"little"),
            ("arch/data/0", h.tobytes()), ("arch/data/1", f.tobytes()), ("arch/data/2", b"\x38\xb8\x00\x7f"),
            ("arch/version", b"3\n")]
    put("crafted.pt", zip_of(recs))
    put("c0.raw", h.tobytes())
    put("c0.f32", h.astype("<f4").tobytes())
    put("c1.raw", f[1:].tobytes())
    put("c1.f32", f[1:].tobytes())
    exp = {"t": "dict", "items": [
        [enc("v3"), {"t": "tensor", "dtype": "float16", "shape": [2, 3], "stride": [3, 1], "offset": 0,
                     "sid": 100, "raw": "c0.raw", "f32": "c0.f32"}],
        [enc("sub"), {"t": "tensor", "dtype": "float32", "shape": [3], "stride": [1], "offset": 1,
                      "sid": 101, "raw": "c1.raw", "f32": "c1.f32"}],
        [enc("f8"), {"t": "tensor", "dtype": "float8_e4m3fn", "shape": [4], "stride": [1], "offset": 0,
                     "sid": 102, "unreadable": True}]]}
    cases.append({"file": "crafted.pt", "kind": "torch", "offset": 0, "length": 0, "expect": exp})
    # bad variants (the C test expects MGT_ERR_FORMAT naming what is wrong)
    put("bad_big.pt", zip_of([r if r[0] != "arch/byteorder" else ("arch/byteorder", b"big") for r in recs]))
    put("bad_short.pt", zip_of([r if r[0] != "arch/data/0" else ("arch/data/0", h.tobytes()[:10]) for r in recs]))
    put("bad_nokey.pt", zip_of([r for r in recs if r[0] != "arch/data/1"]))
    put("bad_nopkl.pt", zip_of([r for r in recs if r[0] != "arch/data.pkl"]))
    outside = crafted_pickle(True).replace(b"QK\x01K\x03\x85", b"QK\x02K\x03\x85")
    put("bad_outside.pt", zip_of([r if r[0] != "arch/data.pkl" else ("arch/data.pkl", outside) for r in recs]))


def write_fixtures(d):
    global out_dir
    out_dir = d
    cases = []
    tv = torch_value()
    data = torch_bytes(tv)
    put("all.pt", data)
    cases.append({"file": "all.pt", "kind": "torch", "offset": 0, "length": 0, "expect": enc(tv)})
    # a torch.save stream embedded at offset 1000 of a bigger file (a .distcp item)
    small = collections.OrderedDict([("w", torch.arange(10, dtype=torch.bfloat16).reshape(2, 5)[:, 1:4]),
                                     ("step", 7)])
    sb = torch_bytes(small)
    put("embedded.distcp", b"\xab" * 1000 + sb + b"PK\x05\x06trailing" * 40)
    cases.append({"file": "embedded.distcp", "kind": "torch", "offset": 1000, "length": len(sb),
                  "expect": enc(small)})
    put("small.pt", sb)
    value = plain()
    value.update(objects())
    for proto in (2, 3, 4, 5):
        name = "p%d.pkl" % proto
        put(name, pickle.dumps(value, protocol=proto))
        cases.append({"file": name, "kind": "pickle", "offset": 0, "length": 0, "expect": enc(value)})
    for proto in (0, 1):
        name = "p%d.pkl" % proto
        put(name, pickle.dumps(plain(), protocol=proto))
        cases.append({"file": name, "kind": "pickle", "offset": 0, "length": 0, "expect": enc(plain())})
    crafted(cases)
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(cases, f)


def write_corpus(d):
    global out_dir
    out_dir = "/tmp"
    os.makedirs(d, exist_ok=True)
    small = collections.OrderedDict([("w", torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()),
                                     ("b", torch.tensor([1, 2], dtype=torch.int64)), ("s", torch.tensor(1.5, dtype=torch.float64))])
    tied = torch.ones(2, 2, dtype=torch.float16)
    seeds = {
        "torch_small.pt": torch_bytes(small),
        "torch_tied.pt": torch_bytes({"a": tied, "b": tied, "c": tied[1:]}),
        "torch_args.pt": torch_bytes({"args": argparse.Namespace(lr=0.1, dtype=torch.bfloat16, n=[1, None]),
                                      "it": 2**40, "u8": torch.tensor([1, 2], dtype=torch.uint8)}),
    }
    recs = [("arch/data.pkl", crafted_pickle(True)), ("arch/byteorder", b"little"),
            ("arch/data/0", bytes(12)), ("arch/data/1", bytes(16)), ("arch/data/2", bytes(4))]
    seeds["torch_crafted.pt"] = zip_of(recs)
    small_plain = {"a": [1, 2**70, -3, 1.5, "s\u00e9", b"b", (None, True)], "o": collections.OrderedDict(x=1),
                   "set": {1}, "fs": frozenset([2]), "ba": bytearray(b"z")}
    obj = {"p": Point(1, 2.0), "f": Frozen("n", (1,)), "c": Color.RED, "t": Tupled(1, 2),
           "ns": argparse.Namespace(a=1, d=torch.float16)}
    for proto in range(0, 6):
        seeds["plain_p%d.pkl" % proto] = pickle.dumps(small_plain, protocol=proto)
    for proto in range(2, 6):
        seeds["obj_p%d.pkl" % proto] = pickle.dumps(obj, protocol=proto)
    for name, data in seeds.items():
        assert len(data) < 4096, (name, len(data))
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    if sys.argv[1] == "--corpus":
        write_corpus(sys.argv[2])
    else:
        write_fixtures(sys.argv[1])
