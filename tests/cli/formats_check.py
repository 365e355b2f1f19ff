#!/usr/bin/python3
"""Independent checks of the files build/tests/test_formats --write DIR makes (t4010-formats.sh).

  formats_check.py st DIR/single|DIR/sharded   safetensors, parsed here with json + numpy
  formats_check.py gguf DIR/model.gguf         GGUF v3, parsed here with struct + numpy

Nothing of mgt's is used: the files are parsed from the format descriptions (safetensors README;
ggml docs/gguf.md), the expected values are recomputed from the formula the C test uses, and the
16-bit conversions come from torch (bfloat16, float16) and numpy (float16); Q8_0 from ggml's
quantize_row_q8_0_ref formula.  Prints one line per failure and exits 1 on any.
"""
import json
import math
import os
import struct
import sys

import numpy as np

try:
    import torch
except ImportError:  # bf16 checks need torch
    torch = None

fails = []


def need(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def value(k, i):
    """test_formats.c value(k, i): float32 of sin(0.37 i + k) * 2^((i % 13) - 6) (libm sin)."""
    return np.float32(math.sin(0.37 * i + k) * math.ldexp(1.0, (i % 13) - 6))


def values(k, n):
    return np.array([value(k, i) for i in range(n)], dtype=np.float32)


# test_formats.c TS[]: name, dtype, shape (index k = position)
TS = [
    ("model.embed_tokens.weight", "F32", [37, 16]),
    ("model.layers.0.self_attn.q_proj.weight", "BF16", [16, 16]),
    ("model.layers.0.mlp.up_proj.weight", "F16", [48, 16]),
    ("model.norm.weight", "F64", [16]),
    ("lm_head.weight", "F32", [37, 16]),
    ("scalar", "F32", []),
    ("empty", "BF16", [0, 5]),
    ("position_ids", "I64", [1, 7]),
    ("big.4d", "BF16", [2, 3, 4, 5]),
]
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8}


def bf16_bits(x):
    """torch's float32 -> bfloat16 (round to nearest even), as uint16 bits."""
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def expected_bytes(k, dt, n):
    if dt == "I64":
        return np.array([j * 1000003 - 5 for j in range(n)], dtype="<i8").tobytes()
    x = values(k, n)
    if dt == "F32":
        return x.astype("<f4").tobytes()
    if dt == "F64":
        return x.astype("<f8").tobytes()
    if dt == "F16":
        return x.astype("<f2").tobytes()
    if dt == "BF16":
        if torch is None:
            return None
        return bf16_bits(x).astype("<u2").tobytes()
    raise ValueError(dt)


def parse_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    text = blob[8:8 + n]
    need(n % 8 == 0, f"{path}: header length {n} is a multiple of 8")
    need(text.rstrip(b" ") == text.rstrip(), f"{path}: header padded with spaces")
    hdr = json.loads(text)
    return hdr, blob[8 + n:]


def check_st(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            ix = json.load(f)
        wm = ix["weight_map"]
        need(list(wm) == sorted(wm), "index: weight_map keys sorted")
        files = sorted(set(wm.values()))
        nsh = len(files)
        need(files == [f"model-{i:05d}-of-{nsh:05d}.safetensors" for i in range(1, nsh + 1)],
             f"index: shard names {files}")
        total = sum(SIZES[dt] * int(np.prod(sh, dtype=np.int64)) for _, dt, sh in TS)
        need(ix["metadata"]["total_size"] == total, f"index: total_size {ix['metadata']} == {total}")
    else:
        files = ["model.safetensors"]
        wm = {name: "model.safetensors" for name, _, _ in TS}
    seen = {}
    for fn in files:
        hdr, buf = parse_st(os.path.join(d, fn))
        need(hdr.get("__metadata__") == {"format": "pt"}, f"{fn}: __metadata__ {{format: pt}}")
        end = 0
        for name, e in hdr.items():  # json keeps file order: declaration order, no gaps
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            need(b == end, f"{fn}: {name} starts where the previous tensor ends ({b} vs {end})")
            end = en
            seen[name] = (fn, e, buf[b:en])
        need(end == len(buf), f"{fn}: data buffer ends with the last tensor")
    need(sorted(seen) == sorted(wm), "every tensor present once")
    for k, (name, dt, shape) in enumerate(TS):
        if name not in seen:
            continue
        fn, e, raw = seen[name]
        need(wm[name] == fn, f"{name}: in the file the index names")
        need(e["dtype"] == dt and e["shape"] == shape, f"{name}: dtype {e['dtype']} shape {e['shape']}")
        want = expected_bytes(k, dt, int(np.prod(shape, dtype=np.int64)))
        if want is not None:
            need(raw == want, f"{name}: bytes equal the reference conversion ({dt})")


def check_gguf(path):
    with open(path, "rb") as f:
        b = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def gstr():
        nonlocal pos
        n = take("Q")
        s = b[pos:pos + n]
        pos += n
        return s

    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        if t == 8:
            return gstr()
        if t == 9:
            at, n = take("I"), take("Q")
            return (at, [val(at) for _ in range(n)])
        return (t, take(scal[t]))

    need(b[:4] == b"GGUF", "magic")
    pos = 4
    ver, nt, nkv = take("I"), take("Q"), take("Q")
    need(ver == 3, "version 3")
    kv = {}
    for _ in range(nkv):
        k = gstr().decode()
        t = take("I")
        kv[k] = (t, val(t))
    need(kv["general.architecture"] == (8, b"llama"), "general.architecture")
    need(kv["llama.block_count"] == (4, (4, 1)), "u32 llama.block_count 1")
    need(kv["test.i32"] == (5, (5, -7)) and kv["test.u64"] == (10, (10, 1 << 40)), "i32, u64")
    need(kv["test.bool"] == (7, (7, True)), "bool")
    eps = kv["llama.attention.layer_norm_rms_epsilon"]
    need(eps[0] == 6 and eps[1][1] == float(np.float32(1e-5)), "f32 epsilon")
    need(kv["tokenizer.ggml.tokens"] == (9, (8, [b"<s>", b"a\0b", "\u0120the".encode()])), "string array")
    need(kv["tokenizer.ggml.token_type"] == (9, (5, [(5, 1), (5, -2), (5, 3)])), "i32 array")
    need(kv["tokenizer.ggml.scores"] == (9, (6, [(6, 0.5), (6, -1.25)])), "f32 array")
    need(kv["test.empty"] == (9, (8, [])), "empty array")
    align = 32
    infos = []
    for _ in range(nt):
        name = gstr().decode()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        typ, off = take("I"), take("Q")
        infos.append((name, ne, typ, off))
    data = (pos + align - 1) // align * align
    need(all(x == 0 for x in b[pos:data]), "zero padding before the data section")
    # test_formats.c GS[]: name, type, PyTorch shape; values(100 + k)
    GS = [("token_embd.weight", 0, [37, 64]), ("blk.0.attn_q.weight", 1, [64, 64]),
          ("blk.0.ffn_up.weight", 8, [96, 64]), ("blk.0.attn_norm.weight", 30, [64]),
          ("t3", 0, [3, 5, 7]), ("t4", 8, [2, 1, 3, 32])]
    need([i[0] for i in infos] == [g[0] for g in GS], "tensor names in declaration order")
    expect_off = 0
    for k, ((name, ne, typ, off), (_, gt, shape)) in enumerate(zip(infos, GS)):
        need(ne == shape[::-1] and typ == gt, f"{name}: ne {ne} = reversed {shape}, type {typ}")
        need(off == expect_off and off % align == 0, f"{name}: offset {off} aligned, packed")
        n = int(np.prod(shape))
        x = values(100 + k, n)
        if typ == 0:
            want = x.astype("<f4").tobytes()
        elif typ == 1:
            want = x.astype("<f2").tobytes()
        elif typ == 30:
            want = bf16_bits(x).astype("<u2").tobytes() if torch is not None else None
        else:  # Q8_0: d = amax/127 (f32), id = 1/d, q = roundf(x*id) (half away from zero)
            out = bytearray()
            for blk in x.reshape(-1, 32):
                amax = np.max(np.abs(blk))
                d = np.float32(amax / np.float32(127))
                idv = np.float32(1) / d if d != 0 else np.float32(0)
                v = (blk * idv).astype(np.float32).astype(np.float64)
                q = np.sign(v) * np.floor(np.abs(v) + 0.5)
                out += np.float16(d).tobytes() + q.astype(np.int8).tobytes()
            want = bytes(out)
        size = {0: 4 * n, 1: 2 * n, 30: 2 * n, 8: n // 32 * 34}[typ]
        got = b[data + off:data + off + size]
        if want is not None:
            need(got == want, f"{name}: data equal the reference encoding (type {typ})")
        expect_off = (off + size + align - 1) // align * align
    need(len(b) == data + expect_off, "file ends with the last tensor's padding")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("st", "gguf"):
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "st":
        check_st(sys.argv[2])
    else:
        check_gguf(sys.argv[2])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
