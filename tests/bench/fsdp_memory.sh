#!/bin/sh
# FSDP's memory per rank on the CPU backend: mgt-train's computed memory line (parameters,
# gradients, optimizer state, the total) against its measured peak RSS over the baseline, for
# DP 1, 2 and 4 and each --data-parallel-sharding-strategy (issue 50: computed within 3% of the
# allocator, and per-rank parameters + gradients + optimizer state about 1/DP of the total).
# gpt2-124m on mock data, 2 iterations of micro-batch 1 at the given sequence length, one thread
# a process, under tests/mpirun.sh.  Not a test: it takes minutes and gigabytes.
#
#   sh tests/bench/fsdp_memory.sh [MODEL] [SEQ]     (default gpt2-124m, 256)
#   NPS="2 4" STRATEGIES=optim_grads_params sh tests/bench/fsdp_memory.sh    (a subset)
#   INSTANCES=2 NPS=4 STRATEGIES="optim optim_grads_params" sh tests/bench/fsdp_memory.sh
#       (hybrid sharding: --num-distributed-optimizer-instances 2; shards over DP/2 ranks)
# Raw results: tests/bench/results/fsdp-memory-<host>-<date>.txt
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
bin=${MGT_BIN:-$root/bin}
model=${1:-gpt2-124m}
seq=${2:-256}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-mem.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
res=$root/tests/bench/results/fsdp-memory-$(hostname)-$(date +%Y%m%d-%H%M%S).txt
mkdir -p "$root/tests/bench/results"
{
inst=${INSTANCES:-1}
echo "# fsdp_memory $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname): $model, seq $seq, micro-batch 1, 2 micro-batches a rank, mock data, $inst distributed-optimizer instance(s)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB"
printf '%-3s %-19s | %9s %9s %9s %9s %9s | %9s %7s\n' DP strategy params grads optim "p+g+o" computed measured "meas/comp"
for np in ${NPS:-1 2 4}; do
	for s in ${STRATEGIES:-no_shard optim optim_grads optim_grads_params}; do
		sh "$root/tests/mpirun.sh" "$np" "$bin/mgt-train" --model "$model" --mock-data --seq-length "$seq" \
			--micro-batch-size 1 --global-batch-size $((2 * np)) --train-iters 2 --device cpu --threads 1 \
			--log-interval 1 --eval-interval 0 --use-megatron-fsdp --data-parallel-sharding-strategy "$s" \
			$([ "$inst" -gt 1 ] && echo --num-distributed-optimizer-instances "$inst") \
			</dev/null >"$tmp/$np-$s.log" 2>&1 || { echo "DP$np $s: mgt-train failed: $(grep error "$tmp/$np-$s.log" | head -1)"; continue; }
		/usr/bin/python3 - "$np" "$s" "$(grep '^memory after training' "$tmp/$np-$s.log")" <<'PY'
import re, sys
np_, s, line = sys.argv[1:4]
m = re.search(r"computed ([0-9.]+) MiB \(parameters ([0-9.]+), gradients ([0-9.]+), optimizer ([0-9.]+).*peak RSS ([0-9.]+) MiB, of which ([0-9.]+) MiB before", line)
if not m: print("DP%s %s: no memory line" % (np_, s)); sys.exit(0)
c, p, g, o, rss, base = map(float, m.groups())
print("%-3s %-19s | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.1f %7.3f" % (np_, s, p, g, o, p + g + o, c, rss - base, (rss - base) / c))
PY
	done
done
} 2>&1 | tee "$res"
echo "saved $res"
