#!/usr/bin/python3
"""tests/bench/roofline.py: each kernel's roofline time at the profiled shapes, from the CUDA
simulator's counts, beside the ncu times of tests/gpu/profile.sh (a report tool; tests/bench/
roofline.sh runs it).

  roofline.py --model gpt2-124m --sim SIM.txt --sim-log TRAIN.log --ncu NCU.csv.gz [--gpu h200]

SIM.txt is the access profile (MGT_SIM_PROFILE, tests/sim/sim_prof.cc) of one training step of a
small model of the same family run by the simulated mgt-train (build/sim/mgt-train): the same
layers and kernels, small dimensions (roofline.sh: SIM_DIMS below).  Per kernel the simulator
counts the distinct 32-byte sectors read and written (the DRAM traffic of a perfect cache) and
the FLOPs of mma.sync and cuBLASLt.  Those are scaled to the profiled shapes by a stated model per
kernel (CLASS below: which of the dimensions a kernel's traffic grows with); cuBLASLt's matmuls
are scaled dimension by dimension (each of m, n, k mapped from the small model's value to the
profiled one).  Predicted time = max(bytes / bandwidth, FLOPs / peak); the table sets it beside
the measured time (the sum over launches, and the launches of both), sorted by the disagreement
|log(measured / predicted)|.  Rates (NVIDIA's H100 SXM and H200 datasheets and the repository's
own H200 runs): H100 SXM 3.35 TB/s, 989 TFLOP/s dense bf16; H200 4.8 TB/s (NVIDIA's H200
figure; the H200 has the H100 SXM's tensor peak), measured on the H200 of 2026-11-27 4.26 TB/s
(tests/bench/results/gpu-nvidia-h200-20261127-161731.txt, add 1 GiB) and 744.6 TFLOP/s
(gemm-typed bf16 8192^3, same file); fp32 without tensor cores 67 TFLOP/s."""
import argparse
import collections
import csv
import gzip
import math
import re
import sys

RATES = {  # bytes/s, tensor FLOP/s, fp32 FLOP/s; "meas": the H200's measured ceilings
    "h200": (4.8e12, 989e12, 67e12),
    "h100": (3.35e12, 989e12, 67e12),
    "h200-meas": (4.264e12, 744.6e12, 50.9e12),
}

# The profiled runs (tests/gpu/profile.sh) and the small models the simulator runs (roofline.sh).
# T tokens a step, h hidden, ffn, V vocabulary (padded as mgt-train pads it), H heads, s
# sequence, b micro-batch; qkv: the fused QKV projection's width.
PROF = {
    "gpt2-124m": dict(T=8192, h=768, ffn=3072, V=50304, H=12, s=1024, b=8, qkv=2304),
    "llama-3.2-1b": dict(T=8192, h=2048, ffn=8192, V=128256, H=32, s=2048, b=4, qkv=3072),
}
SIM_DIMS = {
    "gpt2-124m": dict(T=128, h=64, ffn=256, V=512, H=1, s=128, b=1, qkv=192),
    "llama-3.2-1b": dict(T=128, h=256, ffn=1024, V=512, H=4, s=128, b=1, qkv=384),
}

# What a kernel's traffic grows with: act = tokens x hidden (ffn and qkv keep their ratio to h),
# param = the parameter count, logits = tokens x vocabulary, tok = tokens, attn = bytes as act and
# FLOPs as b H s^2 (head size the same), mixed = param when the launch reads at least half the
# parameters' bytes, else act (cast_k, scale_k: the flat parameter casts and activation casts).
CLASS = {
    "adamw_k": "param", "sumsq_part_k": "param", "sum_parts_k": "param",
    "cast_k": "mixed", "scale_k": "mixed",
    "xent_max_k": "logits", "xent_stats_k": "logits", "xent_bwd_k": "logits", "xent_loss_k": "tok",
    "emb_keys_k": "tok", "sort_local_k": "tok", "sort_global_k": "tok", "sort_merge_local_k": "tok",
    "fwd_mma_kernel": "attn", "dq_mma_kernel": "attn", "dkdv_mma_kernel": "attn",
}


def base_name(name):
    """cast_k for 'void cast_k<__nv_bfloat16, float>(T1 *, ...)', '(cast_k<D, S>)',
    'mgt_attn_mma::fwd_mma_kernel<T, ...>'; 'GEMM (cuBLASLt)' for cuBLAS's own kernels."""
    n = name.strip("()")
    if n.startswith(("nvjet", "cutlass", "sm90_", "cublasLt")) or "gemm" in n.lower():
        return "GEMM (cuBLASLt)"
    n = re.sub(r"^void ", "", n)
    n = n.split("(")[0].split("<")[0]
    return n.split("::")[-1]


def read_ncu(path):
    """{kernel: [launches, ns]} of gpu__time_duration.sum."""
    out = collections.defaultdict(lambda: [0, 0.0])
    with gzip.open(path, "rt", errors="replace") as f:
        rows = csv.reader(l for l in f if l.startswith('"'))
        head = next(rows)
        ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
        for r in rows:
            if r[mi] != "gpu__time_duration.sum":
                continue
            k = out[base_name(r[ki])]
            k[0] += 1
            k[1] += float(r[vi].replace(",", ""))
    return out


def read_sim(path):
    """The per-shape rows of an access profile: (kernel, grid, launches, rd, wr, flops)."""
    rows = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = line.rstrip("\n").split("\t")
        if f[0] == "*" or len(f) < 18:
            continue
        rows.append((f[1], f[2], float(f[5]), float(f[15]), float(f[16]), float(f[17])))
    return rows


def sim_params(log):
    m = re.search(r"number of parameters .*?: (\d+)", open(log).read())
    if not m:
        sys.exit(f"{log}: no parameter count")
    return int(m.group(1))


def scale(cls, p, s, params):
    """(bytes factor, FLOPs factor) of a kernel class from the small model s to the profiled p."""
    act = p["T"] * p["h"] / (s["T"] * s["h"])
    return {
        "act": (act, act),
        "param": (params, params),
        "logits": (p["T"] * p["V"] / (s["T"] * s["V"]),) * 2,
        "tok": (p["T"] / s["T"],) * 2,
        "attn": (act, p["b"] * p["H"] * p["s"] ** 2 / (s["b"] * s["H"] * s["s"] ** 2)),
    }[cls]


def gemm_scaled(name, p, s):
    """A matmul 'cublasLtMatmul mM nN kK' at the profiled shape: (m, n, k, factor of its bytes)."""
    m, n, k = (int(x) for x in re.findall(r"[mnk](\d+)", name))
    dims = {s[d]: p[d] for d in ("T", "h", "ffn", "V", "qkv")}
    dims[2 * s["ffn"]] = 2 * p["ffn"]  # SwiGLU's fused gate and up projection
    try:
        M, N, K = dims[m], dims[n], dims[k]
    except KeyError as e:
        sys.exit(f"{name}: dimension {e} is none of the small model's")
    return M, N, K, (M * K + K * N + M * N) / (m * k + k * n + m * n)


def predict(rows, model, params_ratio):
    """{kernel: [launches, bytes, flops]} at the profiled shapes."""
    p, s = PROF[model], SIM_DIMS[model]
    out = collections.defaultdict(lambda: [0, 0.0, 0.0])
    pbytes = None
    for kern, grid, n, rd, wr, fl in rows:
        b = base_name(kern)
        o = out[b]
        o[0] += n
        if kern.startswith("cublasLtMatmul m"):
            M, N, K, f = gemm_scaled(kern, p, s)
            o[1] += (rd + wr) * f
            o[2] += 2.0 * M * N * K * n
            continue
        cls = CLASS.get(b, "act")
        if cls == "mixed":
            pbytes = pbytes or params_ratio[1] * 4
            cls = "param" if rd / n >= 0.5 * pbytes else "act"
        bf, ff = scale(cls, p, s, params_ratio[0])
        o[1] += (rd + wr) * bf
        o[2] += fl * ff
    return out


def pred_us(k, by, fl, gpu):
    bw, tc, f32 = RATES[gpu]
    peak = tc if ("mma" in k or k.startswith("GEMM")) else f32
    return max(by / bw, fl / peak) * 1e6


def table(model, pred, meas, meas2, gpu):
    """Rows sorted by |log(measured / predicted)|; 'latency' marks kernels under 5 us a launch."""
    lines = []
    for k in sorted(set(pred) | set(meas)):
        n_s, by, fl = pred.get(k, (0, 0.0, 0.0))
        n_m, ns = meas.get(k, (0, 0.0))
        t, tm = pred_us(k, by, fl, gpu), pred_us(k, by, fl, "h200-meas")
        r = ns / 1e3 / t if t and ns else float("nan")
        lines.append((abs(math.log(r)) if r == r else -1, k, n_s, n_m, by, fl, t, tm, ns / 1e3,
                      meas2.get(k, (0, 0.0))[1] / 1e3, r))
    lines.sort(key=lambda x: -x[0])
    bw, tc, f32 = RATES[gpu]
    out = [f"# {model}: predicted = max(bytes / BW, FLOPs / peak) at {bw / 1e12:.2f} TB/s, {tc / 1e12:.0f} TFLOP/s "
           f"tensor (mma, GEMM), {f32 / 1e12:.0f} TFLOP/s fp32; 'pred ceil' at the H200's measured 4.26 TB/s and "
           f"744.6 TFLOP/s; measured: ncu gpu__time_duration.sum summed over the step's launches (run 1, run 2 of "
           f"2026-11-27); sorted by |log(meas / pred)|",
           f"{'kernel':24} {'class':6} {'launches':>9} {'MB':>9} {'GFLOP':>8} {'pred us':>8} {'pred ceil':>9} "
           f"{'meas us':>8} {'meas2 us':>8} {'meas/pred':>9} {'us/launch':>9}",
           f"{'':24} {'':6} {'sim/ncu':>9}"]
    for _, k, n_s, n_m, by, fl, t, tm, us, us2, r in lines:
        per = us / n_m if n_m else 0
        cls = "gemm" if k.startswith("GEMM") else CLASS.get(k, "act")
        note = "  latency" if n_m and per < 5 else ""
        out.append(f"{k[:24]:24} {cls:6} {n_s:4.0f}/{n_m:<4d} {by / 1e6:9.1f} {fl / 1e9:8.1f} {t:8.1f} {tm:9.1f} "
                   f"{us:8.1f} {us2:8.1f} {r:9.2f} {per:9.1f}{note}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(PROF))
    ap.add_argument("--sim", required=True)
    ap.add_argument("--sim-log", required=True, help="the simulated mgt-train's log (its parameter count)")
    ap.add_argument("--ncu", required=True)
    ap.add_argument("--ncu2", help="a second profile of the same step (run-to-run spread)")
    ap.add_argument("--params", type=int, required=True, help="the profiled model's parameter count")
    ap.add_argument("--gpu", default="h200", choices=sorted(RATES))
    a = ap.parse_args()
    ps = sim_params(a.sim_log)
    pred = predict(read_sim(a.sim), a.model, (a.params / ps, ps))
    meas2 = read_ncu(a.ncu2) if a.ncu2 else {}
    print("\n".join(table(a.model, pred, read_ncu(a.ncu), meas2, a.gpu)))


if __name__ == "__main__":
    main()
