#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for mgt's tests (Debian's python3 only: no
tensorflow, tensorboard or protobuf package).

    read_events.py FILE...    print each event as a JSON object, one a line; exit 1 (with the
                              file, the record and what is wrong) at the first fault

The framing (TensorFlow's TFRecord) and the protocol buffers are parsed here by hand:
  record   = uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
  mask(c)  = ((c >> 15) | (c << 17)) + 0xa282ead8  (mod 2^32), CRC32C = Castagnoli, reflected
  Event    { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }
  Summary  { repeated Value value = 1 }
  Value    { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9 }
  TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8 }
  SummaryMetadata { PluginData plugin_data = 1 }  PluginData { string plugin_name = 1; bytes content = 2 }
Every length and data CRC is checked, the first record must be the file_version event, every
byte must belong to a record, and a field this reader does not know is a fault (mgt writes only
these).  The CRC32C here is table-driven (mgt's C code computes it bit by bit) and is checked
against the standard check value and, where Debian's python3-crcmod is installed, against it.

Output objects: {"version": STR, "wall_time": X} for the first record, then per summary value
{"step": N, "wall_time": X, "tag": STR, "value": FLOAT} or {"step", "wall_time", "tag",
"text": STR, "plugin": STR}.
"""
import json
import math
import struct
import sys

POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ POLY if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _self_check():
    assert crc32c(b"123456789") == 0xE3069283, "crc32c check value"
    try:
        import crcmod.predefined  # Debian's python3-crcmod, when present
    except ImportError:
        return
    f = crcmod.predefined.mkCrcFun("crc-32c")
    for s in (b"", b"a", b"123456789", bytes(range(256)) * 3):
        assert f(s) == crc32c(s), "crc32c differs from crcmod's"


class Fault(Exception):
    pass


def varint(b, i):
    v, shift = 0, 0
    while True:
        if i >= len(b):
            raise Fault("varint runs past the end")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i
        if shift > 63:
            raise Fault("varint longer than 10 bytes")


def fields(b):
    """[(field, wire, value)] of one message: int for varint, bytes for the others."""
    out, i = [], 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if f == 0:
            raise Fault("field number 0")
        if w == 0:
            v, i = varint(b, i)
        elif w == 1 or w == 5:
            n = 8 if w == 1 else 4
            if i + n > len(b):
                raise Fault("fixed field %d runs past the end" % f)
            v, i = b[i:i + n], i + n
        elif w == 2:
            n, i = varint(b, i)
            if i + n > len(b):
                raise Fault("field %d: length %d runs past the end" % (f, n))
            v, i = b[i:i + n], i + n
        else:
            raise Fault("field %d: wire type %d" % (f, w))
        out.append((f, w, v))
    return out


def expect(fl, allowed, what):
    for f, w, _ in fl:
        if (f, w) not in allowed:
            raise Fault("%s: unexpected field %d (wire type %d)" % (what, f, w))


def one(fl, f):
    vs = [v for g, _, v in fl if g == f]
    if len(vs) > 1:
        raise Fault("field %d repeated" % f)
    return vs[0] if vs else None


def text_value(fl):
    tensor, meta = fields(one(fl, 8)), fields(one(fl, 9) or b"")
    expect(tensor, {(1, 0), (2, 2), (8, 2)}, "TensorProto")
    if one(tensor, 1) != 7:
        raise Fault("text tensor dtype %r, expected DT_STRING (7)" % one(tensor, 1))
    shape = fields(one(tensor, 2) or b"")
    expect(shape, {(2, 2)}, "TensorShapeProto")
    dims = [fields(v) for f, _, v in shape]
    for d in dims:
        expect(d, {(1, 0)}, "TensorShapeProto.Dim")
    strings = [v for f, _, v in tensor if f == 8]
    if [one(d, 1) for d in dims] != [len(strings)]:
        raise Fault("text tensor shape %r for %d strings" % ([one(d, 1) for d in dims], len(strings)))
    expect(meta, {(1, 2)}, "SummaryMetadata")
    plugin = fields(one(meta, 1) or b"")
    expect(plugin, {(1, 2), (2, 2)}, "PluginData")
    return {"text": b"".join(strings).decode("utf-8"), "plugin": (one(plugin, 1) or b"").decode("utf-8")}


def values(summary, step, wall):
    sfl = fields(summary)
    expect(sfl, {(1, 2)}, "Summary")
    for _, _, vb in sfl:
        fl = fields(vb)
        expect(fl, {(1, 2), (2, 5), (8, 2), (9, 2)}, "Summary.Value")
        tag = one(fl, 1)
        if tag is None:
            raise Fault("value without a tag")
        o = {"step": step, "wall_time": wall, "tag": tag.decode("utf-8")}
        sv = one(fl, 2)
        if sv is not None and one(fl, 8) is None:
            o["value"] = struct.unpack("<f", sv)[0]
        elif sv is None and one(fl, 8) is not None:
            o.update(text_value(fl))
        else:
            raise Fault("value %r: expected simple_value or a tensor" % o["tag"])
        yield o


def event(data, first):
    fl = fields(data)
    expect(fl, {(1, 1), (2, 0), (3, 2), (5, 2)}, "Event")
    wall = one(fl, 1)
    if wall is None:
        raise Fault("event without wall_time")
    wall = struct.unpack("<d", wall)[0]
    if not math.isfinite(wall) or wall <= 0:
        raise Fault("wall_time %r" % wall)
    step = one(fl, 2) or 0
    if step >= 1 << 63:
        step -= 1 << 64
    version, summary = one(fl, 3), one(fl, 5)
    if first:
        if version is None or summary is not None:
            raise Fault("the first record is not the file_version event")
        v = version.decode("utf-8")
        if not v.startswith("brain.Event:"):
            raise Fault("file_version %r" % v)
        return [{"version": v, "wall_time": wall}]
    if version is not None or summary is None:
        raise Fault("a record after the first without a summary")
    return list(values(summary, step, wall))


def records(raw):
    i, k = 0, 0
    while i < len(raw):
        if i + 12 > len(raw):
            raise Fault("record %d: header truncated (%d bytes left)" % (k, len(raw) - i))
        head = raw[i:i + 8]
        (n,), (c,) = struct.unpack("<Q", head), struct.unpack("<I", raw[i + 8:i + 12])
        if c != mask(crc32c(head)):
            raise Fault("record %d at byte %d: length CRC 0x%08x, computed 0x%08x" % (k, i, c, mask(crc32c(head))))
        if i + 12 + n + 4 > len(raw):
            raise Fault("record %d at byte %d: length %d runs past the end" % (k, i, n))
        data = raw[i + 12:i + 12 + n]
        (d,) = struct.unpack("<I", raw[i + 12 + n:i + 16 + n])
        if d != mask(crc32c(data)):
            raise Fault("record %d at byte %d: data CRC 0x%08x, computed 0x%08x" % (k, i, d, mask(crc32c(data))))
        yield k, i, data
        i += 16 + n
        k += 1


def read(path):
    """Every event of the file as a list of dicts (see above); raises Fault naming the record."""
    _self_check()
    with open(path, "rb") as f:
        raw = f.read()
    if not raw:
        raise Fault("%s: empty file" % path)
    out = []
    for k, off, data in records(raw):
        try:
            out += event(data, k == 0)
        except (Fault, UnicodeDecodeError, struct.error) as e:
            raise Fault("record %d at byte %d: %s" % (k, off, e))
    return out


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: read_events.py FILE...\n")
        return 2
    for p in argv[1:]:
        try:
            evs = read(p)
        except (Fault, OSError) as e:
            sys.stderr.write("read_events.py: %s: %s\n" % (p, e))
            return 1
        for e in evs:
            print(json.dumps(e))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
