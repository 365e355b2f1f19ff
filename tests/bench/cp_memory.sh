#!/bin/sh
# Memory per rank under context parallelism, against the sequence length.  Not a test.
# tiny-llama (4 layers, h 128, 8 heads in 2 query groups, RoPE, SwiGLU) on --mock-data with the
# NullTokenizer (vocabulary VOCAB), micro-batch 1, one training iteration, for every sequence
# length in SEQS and context-parallel size in CPS (mpirun with CP ranks; --cp-comm-type KIND).
# Per run: mgt-train's computed activations and workspace of rank 0 (its "memory after training"
# line: what mgt_model_measure counts), and every rank's peak RSS (getrusage of the rank's
# process, through a wrapper), the largest of them given; the table follows, then the raw lines.
# Results go to tests/bench/results/cp_memory-DATE.txt.
#
# Usage: tests/bench/cp_memory.sh [KIND]     (p2p, the default, or allgather)
# Environment: SEQS (default "4096 8192 16384 32768"), CPS (default "1 2 4"), VOCAB (default 32000)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIND=${1:-p2p}
SEQS=${SEQS:-4096 8192 16384 32768}
CPS=${CPS:-1 2 4}
VOCAB=${VOCAB:-32000}
TRAIN=$ROOT/bin/mgt-train
[ -x "$TRAIN" ] || { echo "cp_memory.sh: $TRAIN is not built (make)" >&2; exit 1; }
mkdir -p "$ROOT/tests/bench/results" "$ROOT/build/bench/cp_memory"
OUT=$ROOT/tests/bench/results/cp_memory-$KIND-$(date +%Y%m%d-%H%M%S).txt
W=$ROOT/build/bench/cp_memory
# the wrapper: runs mgt-train, then writes this rank's peak RSS (KiB) to $W/rss.RANK
cat >"$W/rss.py" <<'PY'
import os, resource, subprocess, sys
r = subprocess.call(sys.argv[2:])
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
open(f"{sys.argv[1]}.{rank}", "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)
PY
{
	echo "# cp_memory.sh $KIND: tiny-llama, micro-batch 1, vocabulary $VOCAB, 1 iteration; $(date -u)"
	echo "# seq  CP  activations_MiB  workspace_MiB  max_rank_peak_RSS_MiB  (rank 0 computed; RSS of every rank)"
} >"$OUT"
for S in $SEQS; do
	for CP in $CPS; do
		rm -f "$W"/rss.*[0-9]
		set -- /usr/bin/python3 "$W/rss.py" "$W/rss" "$TRAIN" --model tiny-llama --seq-length "$S" \
			--max-position-embeddings "$S" --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
			--lr 1e-4 --lr-warmup-iters 0 --mock-data --tokenizer-type NullTokenizer --vocab-size "$VOCAB" \
			--eval-interval 0 --eval-iters 0 --log-interval 1 --threads 1 --context-parallel-size "$CP" \
			--cp-comm-type "$KIND"
		if [ "$CP" = 1 ]; then "$@" >"$W/log" 2>&1
		else sh "$ROOT/tests/mpirun.sh" "$CP" "$@" >"$W/log" 2>&1 </dev/null; fi
		line=$(grep "^memory after training" "$W/log")
		act=$(echo "$line" | sed 's/.*activations \([0-9.]*\).*/\1/')
		ws=$(echo "$line" | sed 's/.*workspace \([0-9.]*\).*/\1/')
		rss=$(cat "$W"/rss.*[0-9] | sort -n | tail -1)
		printf "%6d %3d %16s %14s %22.1f   ranks: %s\n" "$S" "$CP" "$act" "$ws" "$(echo "$rss / 1024" | bc -l)" \
			"$(cat "$W"/rss.*[0-9] | tr '\n' ' ')" >>"$OUT"
		echo "#   $line" >>"$OUT"
	done
done
cat "$OUT"
