#!/usr/bin/python3
"""tests/unit/fp8_te_ref.py: Transformer Engine's delayed-scaling update written again from
Transformer Engine's transformer_engine/common/recipe/delayed_scaling.cu in Python (float64, rounded to float32 where TE computes in fp32),
the reference of tests/unit/test_fp8.c for lib/fp8's mgt_fp8_meta_update.

Reads a trace on stdin, one line per update:
  CASE L N MARGIN ALGO FP8MAX | a_0 .. a_{N-1} | r_0 .. r_{N-1}   (r: '-' when no reduction)
where a are the amaxes recorded into history row 0 since the last update and r the MAX-reduced
row; keeps the state across the lines of a case, and
prints after each update the history (L x N, row-major) and the N scales, in hex.  A new CASE
starts from history zeros and scales 1.
"""
import math
import struct
import sys


def f32(x):
    """x rounded to float32 (the value, as a Python float); inf/nan kept."""
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def fmaxf(a, b):
    """C's fmaxf: a NaN argument is ignored."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


FLT_MAX = 3.4028234663852886e38


def update(hist, scale, reduced, fp8max, margin, algo):
    """One update of every slot (hist: L rows of N amaxes, row 0 those recorded since the last
    update; scale: N; reduced: N or None, the MAX-reduced row 0), in place."""
    L, N = len(hist), len(scale)
    scaled_max = f32(fp8max * 2.0 ** -margin)
    for j in range(N):
        r = None if reduced is None else reduced[j]
        last = r if r is not None and r != 0 else hist[0][j]
        if last == 0:
            continue  # unused slot: nothing rolls, the scale stays
        old = [hist[i][j] for i in range(L)]
        amax_max = 0.0
        for i in range(1, L):
            amax_max = fmaxf(amax_max, old[i])
        amax_max = fmaxf(amax_max, last)
        for i in range(L):
            hist[i][j] = 0.0 if i == 0 else (old[i + 1] if i < L - 1 else last)
        amax = last if algo == "most_recent" else amax_max
        if math.isfinite(amax) and amax > 0:
            s = f32(scaled_max / amax)
            scale[j] = FLT_MAX if math.isinf(s) else s


def main():
    state = {}
    for line in sys.stdin:
        head, amaxes, red = line.split("|")
        case, L, N, margin, algo, fp8max = head.split()
        L, N, margin = int(L), int(N), int(margin)
        if case not in state:
            state[case] = ([[0.0] * N for _ in range(L)], [1.0] * N)
        hist, scale = state[case]
        a = [float.fromhex(t) for t in amaxes.split()]
        r = [None if t == "-" else float.fromhex(t) for t in red.split()]
        for j in range(N):
            hist[0][j] = fmaxf(hist[0][j], a[j])  # the casts fmaxf into row 0
        update(hist, scale, r, float.fromhex(fp8max), margin, algo)
        out = [float(v).hex() for row in hist for v in row] + [float(v).hex() for v in scale]
        print(" ".join(out))


if __name__ == "__main__":
    main()
