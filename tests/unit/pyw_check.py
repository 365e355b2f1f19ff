#!/usr/bin/python3
"""tests/unit/pyw_check.py DIR: check the torch.save files that test_pyw wrote into DIR.

DIR/manifest.json lists each case: file, arch, spec (the value, in test_pyw.c's spec language),
tensors (the raw dumps of the tensors' bytes, in spec order), mem/offset/length (a zip embedded
in a bigger file), same_as_torch (data.pkl must equal torch.save's byte for byte).  Every file
is loaded with torch.load and compared with the value the spec describes (types, float bits,
tensor dtype, shape, strides and bytes); the tensor-free one is also read with pickle.loads; the
zip's structure is checked: entries stored, record names <arch>/data.pkl, byteorder,
data/0.., version, every record's data at a multiple of 64 through an 'FB' local extra field
of 'Z's.  Exits 1 on any difference, printing each."""
import argparse  # noqa: F401  (argparse.Namespace is unpickled by name)
import collections
import dataclasses
import enum
import importlib
import io
import json
import math
import os
import pickle
import pickletools
import struct
import sys
import zipfile

import torch


@dataclasses.dataclass(frozen=True)
class FrozenPoint:
    x: int
    y: str


class TupleState:
    def __setstate__(self, st):
        self.state = st


class Empty:
    pass


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Outer:
    class Inner:
        pass


DTYPES = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'F64': torch.float64,
          'I64': torch.int64, 'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8,
          'U8': torch.uint8, 'BOOL': torch.bool}
errors = []


def resolve(m, n):
    o = importlib.import_module(m)
    for part in n.split('.'):
        o = getattr(o, part)
    return o


class Builder:
    """The Python value a spec stands for; tensors from the raw dumps, in spec order."""

    def __init__(self, d, files):
        self.d, self.files, self.k = d, files, 0

    def tensor(self, s):
        raw = open(os.path.join(self.d, self.files[self.k]), 'rb').read()
        self.k += 1
        dt = DTYPES[s['dtype']]
        t = torch.frombuffer(bytearray(raw), dtype=dt) if raw else torch.empty(0, dtype=dt)
        return t.reshape(s['shape'])

    def build(self, s):
        if isinstance(s, list):
            return [self.build(x) for x in s]
        if not isinstance(s, dict):
            return s
        t, v = s['t'], s.get('v')
        if t in ('tuple', 'dict', 'odict'):
            items = [self.build(x) for x in v]
            if t == 'tuple':
                return tuple(items)
            pairs = list(zip(items[0::2], items[1::2]))
            return dict(pairs) if t == 'dict' else collections.OrderedDict(pairs)
        if t == 'bits':
            return struct.unpack('>d', bytes.fromhex(s['hex']))[0]
        if t == 'bytes':
            return bytes(range(*s['range'])) if 'range' in s else bytes.fromhex(s['hex'])
        if t == 'tensor':
            return self.tensor(s)
        if t == 'seq':
            return list(range(s['n']))
        if t == 'seqdict':
            return {i: -i for i in range(s['n'])}
        if t == 'seqodict':
            return collections.OrderedDict((i, -i) for i in range(s['n']))
        if t == 'global':
            return resolve(s['m'], s['n'])
        if t == 'reduce':
            return resolve(s['m'], s['n'])(*[self.build(x) for x in s['args']])
        cls = resolve(s['m'], s['n'])
        o = cls.__new__(cls)
        if 'state' in s:
            st = self.build(s['state'])
            if isinstance(st, dict):
                o.__dict__.update(st)
            else:
                o.__setstate__(st)
        return o


def tensor_bytes(t):
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b''


def same(a, b, where):
    """Record every difference between expected a and loaded b."""
    if type(a) is not type(b):
        errors.append(f'{where}: type {type(b).__name__}, expected {type(a).__name__} ({b!r:.80})')
    elif isinstance(a, torch.Tensor):
        if (a.dtype, a.shape, a.stride()) != (b.dtype, b.shape, b.stride()) or b.requires_grad:
            errors.append(f'{where}: tensor {b.dtype} {tuple(b.shape)} {b.stride()}, expected '
                          f'{a.dtype} {tuple(a.shape)} {a.stride()}')
        elif tensor_bytes(a) != tensor_bytes(b):
            errors.append(f'{where}: tensor bytes differ')
    elif isinstance(a, float):
        if struct.pack('>d', a) != struct.pack('>d', b):
            errors.append(f'{where}: float {b!r}, expected {a!r}')
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            errors.append(f'{where}: length {len(b)}, expected {len(a)}')
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f'{where}[{i}]')
    elif isinstance(a, dict):
        same(list(a.items()), list(b.items()), f'{where}.items()')
    elif isinstance(a, (FrozenPoint, Empty, TupleState, argparse.Namespace)):
        same(vars(a), vars(b), f'{where}.__dict__')
    elif isinstance(a, (type, torch.dtype, enum.Enum)) or callable(a):
        if a is not b:
            errors.append(f'{where}: {b!r}, expected {a!r}')
    elif a != b:
        errors.append(f'{where}: {b!r:.80}, expected {a!r:.80}')


def check_zip(data, case, name):
    """The container: names, stored entries, CRCs, FB-aligned data, byteorder and version."""
    arch = case['arch']
    z = zipfile.ZipFile(io.BytesIO(data))
    want = [f'{arch}/data.pkl', f'{arch}/byteorder'] + \
        [f'{arch}/data/{k}' for k in range(len(case['tensors']))] + [f'{arch}/version']
    names = [i.filename for i in z.infolist()]
    if names != want:
        errors.append(f'{name}: records {names}, expected {want}')
    if z.testzip() is not None:
        errors.append(f'{name}: CRC error in {z.testzip()}')
    for i in z.infolist():
        if i.compress_type != 0:
            errors.append(f'{name}: {i.filename} not stored (method {i.compress_type})')
        off = i.header_offset
        sig, _, _, method, _, _, _, csize, usize, nlen, elen = struct.unpack('<4sHHHHHIIIHH', data[off:off + 30])
        start = off + 30 + nlen + elen
        extra, fb = data[off + 30 + nlen:start], None
        while len(extra) >= 4:
            eid, esz = struct.unpack('<HH', extra[:4])
            if extra[:2] == b'FB':
                fb = extra[4:4 + esz]
            extra = extra[4 + esz:]
        if sig != b'PK\x03\x04' or method != 0 or data[off + 30:off + 30 + nlen].decode() != i.filename:
            errors.append(f'{name}: {i.filename}: bad local header')
        if fb is None or fb.strip(b'Z') != b'' or start % 64:
            errors.append(f'{name}: {i.filename}: data at {start} (FB {fb!r:.20}), not 64-byte aligned')
    if z.read(f'{arch}/byteorder') != b'little' or z.read(f'{arch}/version') != b'3\n':
        errors.append(f'{name}: byteorder or version record wrong')
    return z


def first_difference(a, b):
    n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    out = []
    for label, p in (('ours', a), ('torch.save', b)):
        text = io.StringIO()
        try:
            pickletools.dis(p, out=text)
        except Exception as e:  # a broken pickle still shows its start
            text.write(f'({e})')
        lines = [ln for ln in text.getvalue().splitlines() if ln.split(':')[0].strip().isdigit()
                 and n - 40 <= int(ln.split(':')[0]) <= n + 40]
        out.append(f'--- {label} near byte {n}:\n' + '\n'.join(lines))
    return '\n'.join(out)


def check_case(d, case):
    name = case['file']
    data = open(os.path.join(d, name), 'rb').read()
    if case['mem']:
        data = data[case['offset']:case['offset'] + case['length']]
    z = check_zip(data, case, name)
    expect = Builder(d, case['tensors']).build(case['spec'])
    same(expect, torch.load(io.BytesIO(data) if case['mem'] else os.path.join(d, name)), f'{name}: torch.load')
    pkl = z.read(f"{case['arch']}/data.pkl")
    if not case['tensors']:
        same(expect, pickle.loads(pkl), f'{name}: pickle.loads')
    if case['same_as_torch']:
        buf = io.BytesIO()
        torch.save(expect, buf)
        ref = zipfile.ZipFile(io.BytesIO(buf.getvalue())).read('archive/data.pkl')
        if ref != pkl:
            errors.append(f'{name}: data.pkl ({len(pkl)} bytes) differs from torch.save\'s ({len(ref)} bytes)\n'
                          + first_difference(pkl, ref))
    return len(errors)


def main():
    d = sys.argv[1]
    cases = json.load(open(os.path.join(d, 'manifest.json')))
    for case in cases:
        before = len(errors)
        check_case(d, case)
        print(f"# pyw_check: {case['file']}: {'ok' if len(errors) == before else 'DIFFERENT'}", flush=True)
    for e in errors:
        print('# pyw_check:', e)
    print(f'# pyw_check: {len(cases)} files, {len(errors)} differences (torch {torch.__version__})')
    sys.exit(1 if errors or not cases else 0)


if __name__ == '__main__':
    main()
