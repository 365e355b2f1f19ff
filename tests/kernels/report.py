#!/usr/bin/python3
"""tests/kernels/report.py BUILD_KERNELS [--check BOUNDS | --write-bounds BOUNDS]: the kernel report
(make kernel-report, issue 51 item 3) from what the CUDA build leaves (Makefile: nvcc -Xptxas -v
-keep): BUILD_KERNELS/NAME.ptxas (ptxas's resource lines of every kernel and template instance,
per architecture) and BUILD_KERNELS/keep/NAME.compute_*.ptx (the PTX ptxas compiled).

Per kernel and architecture: registers per thread, spill stores and loads (bytes), stack frame
(bytes), static shared memory (bytes; dynamic shared memory is the launcher's and not seen here),
the block size it is bounded to (__launch_bounds__: .maxntid in the PTX, or "-"), the occupancy
its registers allow (warps per SM of 64, from 65,536 registers per SM allocated per warp in
units of 256, registers per thread rounded up to 8; with a .maxntid whole blocks of it), and its
tensor-core instructions in the PTX: mma.sync (HMMA after ptxas; with an e4m3/e5m2 operand the
fp8 QMMA) and wgmma.mma_async (Hopper's HGMMA).  The toolkit here has no cuobjdump or nvdisasm,
so the instructions are read from the PTX that ptxas lowers, not from the SASS.

--check BOUNDS: for every sm_90a kernel in BOUNDS (lines "KERNEL regs spills warps mma wgmma";
the header names the nvcc the bounds were written with), fail naming the kernel when it now
spills more or its register-limited occupancy dropped (under the same nvcc; under another, which
allocates registers its own way, these are printed as notes), or it lost its tensor-core
instructions; a kernel missing from the build or from BOUNDS fails too (make kernel-bounds
rewrites BOUNDS after a deliberate change).  Exit 0 when the build has no kernels (CUDA=0): nothing to check.
"""
import glob
import os
import re
import subprocess
import sys

REGS_PER_SM, WARPS_PER_SM, UNIT = 65536, 64, 256


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def ptxas(path):
    """{(kernel, arch): {regs, spill, stack, smem}} from one .ptxas file"""
    out, cur = {}, None
    for line in open(path):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\w+)'", line)
        if m:
            cur = (m.group(1), m.group(2))
            out[cur] = {"regs": 0, "spill": 0, "stack": 0, "smem": 0}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[cur]["stack"] = int(m.group(1))
            out[cur]["spill"] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            out[cur]["smem"] = int(s.group(1)) if s else 0
    return out


def ptx_entries(path):
    """{kernel: {maxntid, mma, wgmma, fp8}} from one .ptx file (an entry's body up to the next entry)"""
    text = open(path, errors="replace").read()
    out = {}
    parts = re.split(r"\n\.visible \.entry |\n\.entry |\n\.weak \.entry ", text)
    for body in parts[1:]:
        name = re.match(r"\s*([\w$]+)", body).group(1)
        nt = re.search(r"\.maxntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", body)
        maxntid = 0
        if nt:
            maxntid = 1
            for g in nt.groups():
                maxntid *= int(g) if g else 1
        out[name] = {"maxntid": maxntid, "mma": len(re.findall(r"\bmma\.sync", body)),
                     "wgmma": len(re.findall(r"\bwgmma\.mma_async", body)),
                     "fp8": len(re.findall(r"\bmma\.sync[\w.]*\.e[45]m[23]", body))}
    return out


def warps(regs, maxntid):
    """the warps per SM that the registers allow (whole blocks of maxntid threads when bounded)"""
    per_warp = -(-max(regs, 1) * 32 // UNIT) * UNIT if regs else UNIT
    w = min(WARPS_PER_SM, REGS_PER_SM // per_warp)
    if maxntid:
        wb = -(-maxntid // 32)
        w = (w // wb) * wb
    return w


def collect(d):
    rows = {}
    for p in sorted(glob.glob(os.path.join(d, "*.ptxas"))):
        src = os.path.basename(p)[:-6]
        res = ptxas(p)
        ptx = {}
        for f in glob.glob(os.path.join(d, "keep", src + ".compute_*.ptx")):
            arch = "sm_" + f.rsplit(".compute_", 1)[1][:-4]
            ptx[arch] = ptx_entries(f)
        for (k, arch), r in res.items():
            e = ptx.get(arch, {}).get(k)
            seen = e is not None  # no PTX (another nvcc's -keep names): instructions unknown
            e = e or {"maxntid": 0, "mma": 0, "wgmma": 0, "fp8": 0}
            rows[(k, arch)] = dict(r, src=src, **e, ptx=seen, warps=warps(r["regs"], e["maxntid"]))
    return rows


def nvcc_version():
    for n in (os.environ.get("NVCC"), "nvcc", "/usr/local/cuda/bin/nvcc"):
        try:
            out = subprocess.run([n, "--version"], capture_output=True, text=True).stdout if n else ""
        except OSError:
            continue
        m = re.search(r"release [\d.]+, (V[\d.]+)", out)
        if m:
            return m.group(1)
    return "unknown"


def report(rows):
    names = demangle(sorted({k for k, _ in rows}))
    print(f"# kernel report (tests/kernels/report.py), nvcc {nvcc_version()}: {len(rows)} kernel builds")
    for arch in sorted({a for _, a in rows}):
        ks = [(k, r) for (k, a), r in sorted(rows.items()) if a == arch]
        spills = [k for k, r in ks if r["spill"]]
        tc = [k for k, r in ks if r["mma"] or r["wgmma"]]
        low = [k for k, r in ks if r["warps"] < 16]
        print(f"# {arch}: {len(ks)} kernels; {len(spills)} spill; {len(tc)} with tensor-core instructions "
              f"({sum(1 for k, r in ks if r['wgmma'])} wgmma, {sum(1 for k, r in ks if r['fp8'])} fp8 mma); "
              f"{len(low)} below 16 warps per SM by registers")
        print(f"# {'file':<12} {'regs':>4} {'spill':>5} {'stack':>5} {'smem':>6} {'ntid':>4} {'warps':>5} "
              f"{'mma':>4} {'wgmma':>5} {'fp8':>3}  kernel")
        for k, r in ks:
            print(f"{r['src']:<14} {r['regs']:>4} {r['spill']:>5} {r['stack']:>5} {r['smem']:>6} "
                  f"{r['maxntid'] or '-':>4} {r['warps']:>5} {r['mma']:>4} {r['wgmma']:>5} {r['fp8']:>3}  {names[k][:110]}")


def write_bounds(rows, path):
    with open(path, "w") as f:
        f.write(f"# kernel bounds (make kernel-bounds), sm_90a, nvcc {nvcc_version()}\n")
        f.write("# KERNEL regs spills warps mma wgmma: spills may not grow, warps (register-limited occupancy,\n")
        f.write("# checked under the same nvcc) may not drop, a kernel with mma or wgmma must keep some\n")
        for (k, a), r in sorted(rows.items()):
            if a == "sm_90a":
                f.write(f"{k} {r['regs']} {r['spill']} {r['warps']} {r['mma']} {r['wgmma']}\n")
    print(f"wrote {path}: {sum(1 for _, a in rows if a == 'sm_90a')} sm_90a kernels")


def check(rows, path):
    lines = open(path).read().splitlines()
    m = re.search(r"nvcc (\S+)", lines[0]) if lines else None
    same = m is not None and m.group(1) == nvcc_version()
    bounds = {}
    for l in lines:
        if l and not l.startswith("#"):
            k, regs, spill, w, mma, wgmma = l.split()
            bounds[k] = (int(regs), int(spill), int(w), int(mma), int(wgmma))
    have = {k: r for (k, a), r in rows.items() if a == "sm_90a"}
    names = demangle(sorted(set(bounds) | set(have)))
    bad, notes = [], []
    for k, (regs, spill, w, mma, wgmma) in sorted(bounds.items()):
        r = have.get(k)
        if r is None:
            bad.append(f"{names[k]}: in {path} but not built (make kernel-bounds after removing a kernel)")
            continue
        # registers and spills are the compiler's: compared under the nvcc the bounds were written
        # with, only noted under another (CI's toolkit may differ from the one here)
        fail = bad if same else notes
        if r["spill"] > spill:
            fail.append(f"{names[k]}: spills {r['spill']} bytes (bound {spill}){'' if same else ', another nvcc'}")
        if r["warps"] < w:
            fail.append(f"{names[k]}: {r['regs']} registers allow {r['warps']} warps per SM, fewer than {w} ({regs} registers)")
        if (mma or wgmma) and not r["ptx"]:
            notes.append(f"{names[k]}: its PTX was not found in keep/: tensor-core instructions not checked")
        elif (mma and not r["mma"]) or (wgmma and not r["wgmma"]):
            bad.append(f"{names[k]}: lost its tensor-core instructions (mma {r['mma']} of {mma}, wgmma {r['wgmma']} of {wgmma})")
    for k in sorted(set(have) - set(bounds)):
        bad.append(f"{names[k]}: a new kernel without bounds (make kernel-bounds, then review the diff)")
    for b in bad:
        print(f"check-kernels: {b}", file=sys.stderr)
    for b in notes:
        print(f"check-kernels: note: {b}", file=sys.stderr)
    print(f"check-kernels: {len(have)} sm_90a kernels against {path}"
          f"{'' if same else f' (nvcc {nvcc_version()}, the bounds {m.group(1) if m else None}: spills and occupancy noted, not failed)'}: "
          f"{'ok' if not bad else str(len(bad)) + ' failed'}")
    return 1 if bad else 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = collect(sys.argv[1])
    if not rows:
        print("kernel report: no kernels built (CUDA=0 or no nvcc): nothing to report")
        return 0
    if len(sys.argv) == 4 and sys.argv[2] == "--check":
        return check(rows, sys.argv[3])
    if len(sys.argv) == 4 and sys.argv[2] == "--write-bounds":
        write_bounds(rows, sys.argv[3])
        return 0
    report(rows)
    return 0


sys.exit(main())
