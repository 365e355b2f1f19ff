#!/usr/bin/python3
"""Golden values of numpy's legacy RandomState for tests/unit/test_masked.c (numpy 1.24).

Prints one line per value, "NAME ARGS... = VALUE", floats as float.hex(). The C test computes
the same draws with lib/data/masked_rng.c and compares every line. Crafted states: a state
whose next two outputs give a chosen uniform u = k / 2^53 (key[0..1] = untempered outputs,
pos 0), to hit the boundaries of numpy's legacy RandomState (numpy/random/mtrand.pyx).
"""
import numpy as np

MASK32 = 0xFFFFFFFF


def untemper(y):
    """Inverse of MT19937's tempering."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    x = y
    for _ in range(5):
        x = y ^ ((x << 7) & 0x9D2C5680)
    y = x & MASK32
    x = y
    for _ in range(3):
        x = y ^ (x >> 11)
    return x & MASK32


def crafted(k53):
    """A RandomState whose next random() is exactly k53 / 2^53."""
    a, b = k53 >> 26, k53 & ((1 << 26) - 1)
    key = np.zeros(624, dtype=np.uint32)
    key[0], key[1] = untemper(a << 5), untemper(b << 6)
    rs = np.random.RandomState(0)
    rs.set_state(("MT19937", key, 0))
    return rs


def ngram_p(n):
    w = 1.0 / (np.arange(n, dtype=np.int64) + 1)
    p = w / w.sum(keepdims=True)
    return p[:n] / p[:n].sum(keepdims=True)


def main():
    for seed in (0, 1, 1234, 2**32 - 1, 987654321):
        rs = np.random.RandomState(seed)
        print("raw", seed, "=", " ".join(str(x) for x in rs.randint(0, 2**32, 5, dtype=np.uint32)))
        rs = np.random.RandomState(seed)
        print("random", seed, "=", " ".join(float(rs.random()).hex() for _ in range(5)))
        rs = np.random.RandomState(seed)
        for hi in (1, 2, 3, 7, 30522, 2**31, 2**40 + 3):
            print("randint", seed, hi, "=", " ".join(str(rs.randint(0, hi)) for _ in range(4)))
        for max_n in (3, 10):
            rs = np.random.RandomState(seed)
            vals = np.arange(max_n, dtype=np.int64) + 1
            print("choice", seed, max_n, "=", " ".join(str(rs.choice(vals, p=ngram_p(max_n))) for _ in range(20)))
        for p in (0.2, 0.5):
            rs = np.random.RandomState(seed)
            print("geometric", seed, p, "=", " ".join(str(rs.geometric(p)) for _ in range(20)))
        rs = np.random.RandomState(seed)
        x = list(range(37))
        rs.shuffle(x)
        print("shuffle", seed, 37, "=", " ".join(map(str, x)))
    for n in range(1, 21):
        w = 1.0 / (np.arange(n, dtype=np.int64) + 1)
        print("sum", n, "=", float(w.sum()).hex())
    for max_n in (3, 10):
        print("ngram_p", max_n, "=", " ".join(float(v).hex() for v in ngram_p(max_n)))
    cdf = np.cumsum(ngram_p(3))
    cdf /= cdf[-1]
    once = np.cumsum(1.0 / np.arange(1, 4) / (1.0 / np.arange(1, 4)).sum())
    once /= once[-1]
    boundaries = [int(v * 2**53) for v in (cdf[0], cdf[1], once[0], once[1])]
    for k in boundaries + [boundaries[0] - 1, boundaries[1] + 1]:
        print("choice_at", k, "=", crafted(k).choice(np.arange(1, 4), p=ngram_p(3)))
    for k in (3242591731706757, 6646016013306169, 0, 2**53 - 1, 1 << 52):
        print("geometric_at", k, "=", crafted(k).geometric(0.2))


main()
