#!/bin/sh
# tests/gpu/profile.sh: the kernels of mgt-train's GPU step, by time (Nsight Compute).  Not a test.
#
# For each model: mgt-train --device cuda --bf16 --mock-data, global batch = one micro-batch,
# one iteration (every kernel of a whole step: forward, backward, optimizer; at most 3000), under
#   ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv -c 3000
# (one replay pass a kernel; clocks left as found; caches not flushed between kernels, as in a
# run).  Then, per model: the top 10 kernels by GPU time, their share and launches, and the time
# by kind (attention, GEMM, casts, optimizer, the rest).
#   gpt2-124m     seq 1024, micro-batch 8 (dropout 0.1)
#   llama-3.2-1b  seq 2048, micro-batch 4, vocabulary 128256, dropout 0
#
# Usage: tests/gpu/profile.sh [OUTDIR]    (default $OUT, else a temporary directory)
# Environment: MGT_BIN (directory with mgt-train), NCU (the ncu binary; default from PATH or
#   /opt/nvidia/nsight-compute/*/ncu), PROFILE_TIMEOUT (150 s a model), PY (python3),
#   MODELS ("gpt2-124m llama-3.2-1b").
# Writes OUTDIR/profile-<model>.csv.gz (ncu's raw CSV) and prints the tables; exit 77 without
# ncu, 1 when a model's profile failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
O=${1:-${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mgt-profile.XXXXXX")}}
PY=${PY:-python3}
TRAIN=${MGT_BIN:-$ROOT/bin}/mgt-train
NCU=${NCU:-$(command -v ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
if [ -z "$NCU" ] || [ ! -x "$NCU" ]; then
	echo "profile: no ncu found (set NCU)"
	exit 77
fi
mkdir -p "$O"
E=$(mktemp -d "${TMPDIR:-/tmp}/mgt-profile-err.XXXXXX") # ncu's stderr, out of OUTDIR (few files come back)
rc=0
for m in ${MODELS:-gpt2-124m llama-3.2-1b}; do
	case $m in
	gpt2-124m) args="--seq-length 1024 --micro-batch-size 8 --global-batch-size 8" ;;
	llama-3.2-1b) args="--seq-length 2048 --micro-batch-size 4 --global-batch-size 4 --vocab-size 128256
		--hidden-dropout 0 --attention-dropout 0" ;;
	*) args="--micro-batch-size 1 --global-batch-size 1" ;;
	esac
	csv=$O/profile-$m.csv
	echo "# profile $m: $NCU --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv -c 3000 mgt-train --model $m $args --train-iters 1"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	timeout "${PROFILE_TIMEOUT:-150}" "$NCU" --metrics gpu__time_duration.sum --clock-control none \
		--cache-control none --csv -c 3000 \
		"$TRAIN" --model "$m" --device cuda --bf16 --mock-data $args --train-iters 1 --lr 3e-4 \
		--eval-interval 0 --log-interval 1 --seed 1234 >"$csv" 2>"$E/$m.err"
	r=$?
	echo "# exit $r after $(( $(date +%s) - t0 )) s"
	[ $r = 0 ] || { rc=1; tail -5 "$E/$m.err"; grep -v '^"' "$csv" | tail -5; }
	$PY - "$csv" "$m" <<-'EOF'
	import collections, csv, sys
	path, model = sys.argv[1], sys.argv[2]
	rows = csv.reader(l for l in open(path, errors="replace") if l.startswith('"'))
	try:
	    head = next(rows)
	except StopIteration:
	    print("%s: no kernel rows in the profile" % model); sys.exit(0)
	ki, vi = head.index("Kernel Name"), head.index("Metric Value")
	t, n = collections.defaultdict(float), collections.Counter()
	for r in rows:
	    if len(r) <= max(ki, vi):
	        continue
	    name = r[ki].split("(")[0].replace("void ", "")
	    t[name] += float(r[vi].replace(",", "")) / 1e6  # ns -> ms
	    n[name] += 1
	tot = sum(t.values())
	if not tot:
	    print("%s: no kernel times" % model); sys.exit(0)
	print("%s: GPU time of one iteration %.2f ms (kernel sum; %d launches)" % (model, tot, sum(n.values())))
	print("  top 10 kernels: ms, share, launches")
	for k, v in sorted(t.items(), key=lambda x: -x[1])[:10]:
	    print("  %8.3f ms %5.1f%% %5d  %s" % (v, 100 * v / tot, n[k], k[:100]))
	def kind(k):
	    if "attn" in k: return "attention"
	    if "nvjet" in k or "gemm" in k.lower() or "cutlass" in k or k.startswith("sm90"): return "GEMM (cuBLASLt)"
	    if "cast" in k or "widen" in k: return "casts"
	    if "adamw" in k or "sumsq" in k or k.startswith("scale_k"): return "optimizer, norms of grads"
	    return "other"
	kd = collections.defaultdict(float)
	for k, v in t.items():
	    kd[kind(k)] += v
	print("  by kind: " + ", ".join("%s %.2f ms (%.1f%%)" % (k, v, 100 * v / tot) for k, v in sorted(kd.items(), key=lambda x: -x[1])))
	EOF
	gzip -f "$csv"
	echo
done
exit $rc
