"""The PyTorch side of tests/bench/mamba_scan.sh (not a test): a pure-PyTorch chunked SSD, written
here from the five steps of megatron-hybrid-mamba.md section 3 (chunk cumsum, chunk states, state
passing, C.B^T, chunk scan; Dao & Gu 2024 section 6), timed forward and forward+backward (autograd)
in fp32 on THREADS threads, then run in float64 on the inputs mgt_scan dumped to check mgt's
outputs and gradients against it.

    /usr/bin/python3 torch_ssd.py DUMP THREADS REPS
"""
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def ssd(x, dt, A, B, C, D, Q=128):
    """x [b, L, H, P], dt [b, L, H] (after softplus), A [H], B and C [b, L, G, N], D [H] -> y like x."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    pad = (-L) % Q
    if pad:  # zero dt and x on the padding: it adds nothing
        x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    nc = (L + pad) // Q
    x = x.reshape(b, nc, Q, G, H // G, P)
    dt = dt.reshape(b, nc, Q, G, H // G)
    B, C = B.reshape(b, nc, Q, G, N), C.reshape(b, nc, Q, G, N)
    cum = torch.cumsum(dt * A.reshape(G, H // G), dim=2)  # 1. [b, c, Q, G, hg]
    w = torch.exp(cum[:, :, -1:] - cum) * dt  # 2. chunk states
    states = torch.einsum("bcsgn,bcsgh,bcsghp->bcghpn", B, w, x)
    decay = torch.exp(cum[:, :, -1])  # 3. state passing [b, c, G, hg]
    S, prev = torch.zeros_like(states[:, 0]), []
    for c in range(nc):
        prev.append(S)
        S = decay[:, c, :, :, None, None] * S + states[:, c]
    prev = torch.stack(prev, dim=1)  # the state entering each chunk
    CB = torch.einsum("bcign,bcjgn->bcgij", C, B)  # 4.
    seg = cum.permute(0, 1, 3, 4, 2)  # 5. [b, c, G, hg, Q]
    diff = seg[..., :, None] - seg[..., None, :]
    mask = torch.ones(Q, Q, dtype=torch.bool).tril()
    Lm = torch.exp(diff.masked_fill(~mask, float("-inf")))
    y = torch.einsum("bcgij,bcghij,bcjgh,bcjghp->bcighp", CB, Lm, dt, x)
    y = y + torch.einsum("bcign,bcghpn,bcigh->bcighp", C, prev, torch.exp(cum))
    y = y + D.reshape(G, H // G, 1) * x
    return y.reshape(b, nc * Q, H, P)[:, :L]


def main():
    path, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    raw = open(path, "rb").read()
    L, b, H, P, G, N = np.frombuffer(raw[:24], dtype=np.int32)
    a = np.frombuffer(raw[24:], dtype=np.float32)
    sizes = [("x", L * b * H * P), ("B", L * b * G * N), ("C", L * b * G * N), ("dtr", L * b * H), ("dtb", H),
             ("alog", H), ("D", H), ("dy", L * b * H * P), ("y", L * b * H * P), ("dx", L * b * H * P),
             ("dB", L * b * G * N), ("dC", L * b * G * N), ("ddtr", L * b * H), ("ddtb", H), ("dalog", H), ("dD", H)]
    v, o = {}, 0
    for k, n in sizes:
        v[k] = torch.from_numpy(a[o:o + n].copy())
        o += n
    seqf = lambda t, *s: t.reshape(L, b, *s).transpose(0, 1)  # rows i*b + j -> [b, L, ...]

    def run(dtype, grad):
        ins = {k: v[k].to(dtype, copy=True).requires_grad_(grad) for k in ("x", "B", "C", "dtr", "dtb", "alog", "D")}
        dt = F.softplus(seqf(ins["dtr"], H) + ins["dtb"])  # threshold 20, as the kernels
        y = ssd(seqf(ins["x"], H, P), dt, -torch.exp(ins["alog"]), seqf(ins["B"], G, N), seqf(ins["C"], G, N),
                ins["D"])
        if grad:
            y.backward(seqf(v["dy"].to(dtype), H, P))
        return y, ins

    def best(f):
        f()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return min(ts) * 1e3

    def fwd():
        with torch.no_grad():
            run(torch.float32, False)

    tf = best(fwd)
    tfb = best(lambda: run(torch.float32, True))
    print(f"torch {torch.__version__} chunked SSD fp32: forward {tf:.1f} ms, backward {tfb - tf:.1f} ms "
          f"(forward+backward {tfb:.1f} ms less forward; best of {reps}, {threads} threads)")
    y64, g = run(torch.float64, True)
    rows = lambda t: t.transpose(0, 1).reshape(-1)  # [b, L, ...] -> rows i*b + j
    pairs = [("y", rows(y64.detach()), v["y"])] + [
        (k, g[src].grad.reshape(-1), v[k]) for k, src in
        (("dx", "x"), ("dB", "B"), ("dC", "C"), ("ddtr", "dtr"), ("ddtb", "dtb"), ("dalog", "alog"), ("dD", "D"))]
    print("mgt's fp32 against this float64 chunked SSD, max |mgt - torch64| / max |torch64|:")
    for k, ref, got in pairs:
        err = (got.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-300)
        print(f"  {k:6} {err:.2e}")


if __name__ == "__main__":
    main()
