#!/bin/sh
# CPU training throughput, mgt-train vs PyTorch (tests/bench/torch_train_bench.py: the reference
# model of tests/torch/mgt_ref.py in float32), same shape, micro-batch, thread count, AdamW and
# clipping, random tokens.  Not a test.  For each case it prints tokens/s of the forward, the
# backward and the optimizer step and overall (means over the timed iterations, after warm-up),
# the ratio mgt/PyTorch (torch as shipped and, where Debian's OpenBLAS falls back to its SSE3
# kernels on this CPU, torch with the AVX kernels mgt-train picks), and the peak RSS of each process (getrusage of the child).  Raw results
# (the table, then every mgt metrics line and the torch JSON) go to
# tests/bench/results/train_cpu-DATE.txt.
#
# Usage: tests/bench/train_cpu.sh [THREADS]        (default 2)
# Environment: CASES  space-separated MODEL:SEQ:MBS:WARMUP:ITERS
#                     (default "tiny-gpt2:128:2:2:8 gpt2-124m:1024:1:1:3")
#              PY     the Python with torch (default /usr/bin/python3)
# mgt-train runs with --mock-data (its own random tokens: values differ from torch's, which does
# not change the work done); torch draws uniform ids over the GPT-2 vocabulary.
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
PY=${PY:-/usr/bin/python3}
CASES=${CASES:-"tiny-gpt2:128:2:2:8 gpt2-124m:1024:1:1:3"}
B=$ROOT/build/bench/train_cpu
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/train_cpu-$(date +%Y%m%d-%H%M%S).txt
TRAIN=$ROOT/bin/mgt-train
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[ -x "$TRAIN" ] || { echo "train_cpu.sh: $TRAIN is not built (make)" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null || { echo "train_cpu.sh: $PY has no torch" >&2; exit 1; }

# peak RSS of a child: run CMD under python, print "peak_rss_kb N" to FILE
PEAK='import resource, subprocess, sys
r = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("peak_rss_kb %d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)'

# busy: CPU use by anything during 3 s before starting (from /proc/stat), with a warning
busy() {
	a=$(head -1 /proc/stat); sleep 3; b=$(head -1 /proc/stat)
	echo "$a
$b" | awk '{ t = 0; for (i = 2; i <= NF; i++) t += $i; id = $5 + $6; if (NR == 1) { t0 = t; i0 = id } else {
		u = 100 * (1 - (id - i0) / (t - t0)); printf "# CPU busy before start: %.0f%% of all cores\n", u
		if (u > 10) print "# WARNING: other work is running: OpenMP threads (torch most) collapse under contention; do not trust the ratios" } }'
}
# OpenBLAS 0.3.21 (Debian 12) does not know recent Xeons and falls back to its Prescott (SSE3)
# kernels; mgt-train then picks SkylakeX/Haswell itself (lib/backend/cpu.c).  torch runs twice:
# as Debian ships it ("torch") and with OPENBLAS_CORETYPE set to what mgt picks ("torch-blasfix").
CORE=$($PY -c 'import ctypes
l = ctypes.CDLL("libblas.so.3"); l.openblas_get_corename.restype = ctypes.c_char_p
core = l.openblas_get_corename().decode()
flags = set(open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split())
if core == "Prescott" and {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags: print("SkylakeX")
elif core == "Prescott" and {"avx2", "fma"} <= flags: print("Haswell")' 2>/dev/null)
if [ -n "$CORE" ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then TORCH_VARIANTS="torch torch-blasfix"; else TORCH_VARIANTS=torch; fi
# gemm WHEN [ENV]: torch sgemm speed with the benchmark's threads, a check on the machine's state
gemm() {
	env $2 $PY -c 'import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 768), torch.randn(768, 3072)
a @ b
t = time.perf_counter()
for _ in range(5):
    a @ b
print("# torch sgemm 1024x768x3072 at the %s%s: %.1f GFLOP/s" % (sys.argv[2], sys.argv[3], 5 * 2 * 1024 * 768 * 3072 / (time.perf_counter() - t) / 1e9))' "$THREADS" "$1" "${2:+ with $2}"
}
{
	echo "# train_cpu benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -m), threads $THREADS"
	echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	busy
	echo "# commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	dflt=$(env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS $PY -c 'import torch; print(torch.get_num_threads())')
	echo "# torch.get_num_threads() without OMP_NUM_THREADS: $dflt"
	$PY - "$THREADS" <<-'EOF'
	import os, sys, torch
	d = torch.get_num_threads()
	torch.set_num_threads(int(sys.argv[1]))
	blas = "?"
	try:
	    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
	except OSError:
	    pass
	info = [l.strip() for l in torch.__config__.parallel_info().splitlines()
	        if "threads" in l or "backend" in l]
	print("# torch %s: get_num_threads() %d with OMP_NUM_THREADS=%s, %d after set_num_threads(%s); "
	      "libblas.so.3 -> %s" % (torch.__version__, d, os.environ.get("OMP_NUM_THREADS"),
	                              torch.get_num_threads(), sys.argv[1], blas))
	print("# torch parallel_info: " + "; ".join(info))
	EOF
	echo "# OpenBLAS kernels: $($PY -c 'import ctypes; l = ctypes.CDLL("libblas.so.3"); l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())')${CORE:+ (fallback; torch-blasfix rows use OPENBLAS_CORETYPE=$CORE)}"
	gemm start
	[ -n "$CORE" ] && gemm start "OPENBLAS_CORETYPE=$CORE"
	for c in $CASES; do
		IFS=: read -r model seq mbs warm iters <<-EOF
		$c
		EOF
		tag=$model-s$seq-b$mbs
		rm -f "$B/$tag.jsonl"
		$PY -c "$PEAK" "$B/$tag.mgt.rss" "$TRAIN" --model "$model" --seq-length "$seq" \
			--max-position-embeddings "$seq" --mock-data --micro-batch-size "$mbs" \
			--global-batch-size "$mbs" --train-iters $((warm + iters)) --lr 1e-4 --lr-decay-style constant \
			--threads "$THREADS" --log-interval 1 --eval-interval 0 --metrics-file "$B/$tag.jsonl" \
			>"$B/$tag.mgt.log" 2>&1 || { echo "# mgt-train failed on $c:"; tail -3 "$B/$tag.mgt.log" | sed 's/^/#   /'; }
		for v in $TORCH_VARIANTS; do
			if [ "$v" = torch ]; then env=""; else env="OPENBLAS_CORETYPE=$CORE"; fi
			env $env $PY -c "$PEAK" "$B/$tag.$v.rss" $PY "$ROOT/tests/bench/torch_train_bench.py" \
				--model "$model" --seq-length "$seq" --micro-batch-size "$mbs" --warmup "$warm" \
				--iters "$iters" --threads "$THREADS" >"$B/$tag.$v.json" 2>"$B/$tag.$v.err" ||
				{ echo "# $v bench failed on $c:"; tail -3 "$B/$tag.$v.err" | sed 's/^/#   /'; }
		done
		$PY - "$B/$tag" "$model" "$seq" "$mbs" "$warm" $TORCH_VARIANTS <<-'EOF'
		import json, sys
		base, model, seq, mbs, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
		variants = sys.argv[6:]
		def rss(p):
		    try:
		        return int(open(p).read().split()[1]) / 1024.0
		    except (OSError, IndexError, ValueError):
		        return float("nan")
		tok = seq * mbs
		rows = {}
		try:
		    m = [json.loads(l) for l in open(base + ".jsonl") if l.strip()]
		    m = [r for r in m if "time_fwd_ms" in r][warm:]
		    mean = lambda k: sum(r[k] for r in m) / len(m)
		    rows["mgt"] = [tok / mean("time_fwd_ms") * 1e3, tok / mean("time_bwd_ms") * 1e3,
		                   tok / mean("time_opt_ms") * 1e3, tok / mean("elapsed_ms") * 1e3, rss(base + ".mgt.rss")]
		    for r in m:
		        print("# raw mgt %s" % json.dumps(r))
		except (OSError, ValueError, ZeroDivisionError) as e:
		    print("# mgt: no metrics (%s)" % e)
		for v in variants:
		    try:
		        t = json.loads(open(base + "." + v + ".json").read())
		        rows[v] = [t["tokens_per_s_fwd"], t["tokens_per_s_bwd"], t["tokens_per_s_opt"],
		                   t["tokens_per_s"], rss(base + "." + v + ".rss")]
		        print("# raw %s %s" % (v, json.dumps(t)))
		    except (OSError, ValueError, KeyError) as e:
		        print("# %s: no result (%s)" % (v, e))
		print("%-10s %5s %3s %-17s %10s %10s %10s %10s %9s" % ("model", "seq", "mbs", "impl", "fwd tok/s",
		      "bwd tok/s", "opt tok/s", "all tok/s", "peak MiB"))
		for k, v in rows.items():
		    print("%-10s %5d %3d %-17s %10.1f %10.1f %10.1f %10.1f %9.0f" % (model, seq, mbs, k, *v))
		for v in variants:
		    if "mgt" in rows and v in rows:
		        r = [a / b for a, b in zip(rows["mgt"], rows[v])]
		        print("%-10s %5d %3d %-17s %10.2f %10.2f %10.2f %10.2f %9.2f" % (model, seq, mbs, "mgt/" + v, *r))
		EOF
	done
	echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	gemm end
	[ -n "$CORE" ] && gemm end "OPENBLAS_CORETYPE=$CORE"
} | tee "$OUT"
echo "saved $OUT"
