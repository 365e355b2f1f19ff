#!/bin/sh
# CPU training speed under context parallelism.  Not a test.  tiny-llama on --mock-data
# (NullTokenizer, vocabulary 32000, no dropout), micro-batch 1, global batch 2, at sequence length SEQ: one
# process with 2 threads against CP2 as two ranks of one thread each (the same 2 cores), for
# --cp-comm-type p2p, allgather and a2a; the table gives the mean time per iteration and its
# forward/backward/optimizer split over iterations 3..ITERS, then the raw metrics lines.
# Results go to tests/bench/results/cp_cpu-DATE.txt.
#
# Usage: tests/bench/cp_cpu.sh     Environment: SEQ (default 4096), ITERS (default 6)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SEQ=${SEQ:-4096}
ITERS=${ITERS:-6}
TRAIN=$ROOT/bin/mgt-train
[ -x "$TRAIN" ] || { echo "cp_cpu.sh: $TRAIN is not built (make)" >&2; exit 1; }
mkdir -p "$ROOT/tests/bench/results" "$ROOT/build/bench/cp_cpu"
OUT=$ROOT/tests/bench/results/cp_cpu-$(date +%Y%m%d-%H%M%S).txt
W=$ROOT/build/bench/cp_cpu
# OpenMPI's defaults (shared memory with the single-copy CMA mechanism), not tests/mpirun.sh's:
# without CMA a large message moves only while its sender is inside MPI, so the ring's send,
# posted before the step's attention, waits for the end of it (p2p 1.4x slower here)
MPIFLAGS="--oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && MPIFLAGS="$MPIFLAGS --allow-run-as-root"
COMMON="--model tiny-llama --seq-length $SEQ --max-position-embeddings $SEQ --micro-batch-size 1
 --global-batch-size 2 --train-iters $ITERS --lr 1e-4 --lr-warmup-iters 0 --mock-data --tokenizer-type NullTokenizer
 --vocab-size 32000 --eval-interval 0 --eval-iters 0 --log-interval 1 --hidden-dropout 0 --attention-dropout 0"
# shellcheck disable=SC2086
"$TRAIN" $COMMON --threads 2 --metrics-file "$W/one.jsonl" >"$W/one.log" 2>&1
for k in p2p allgather a2a; do
	# shellcheck disable=SC2086
	mpirun $MPIFLAGS -np 2 "$TRAIN" $COMMON --threads 1 --context-parallel-size 2 --cp-comm-type $k \
		--metrics-file "$W/$k.jsonl" >"$W/$k.log" 2>&1 </dev/null
done
{
	echo "# cp_cpu.sh: tiny-llama, seq $SEQ, micro-batch 1, global batch 2, iterations 3..$ITERS; $(date -u)"
	/usr/bin/python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
print("# run                 ms/iter   fwd     bwd     opt")
for n, label in (("one", "1 process, 2 threads"), ("p2p", "CP2 p2p"), ("allgather", "CP2 allgather"), ("a2a", "CP2 a2a")):
    r = [o for o in map(json.loads, open(f"{w}/{n}.jsonl")) if "lm_loss" in o][2:]
    m = lambda k: sum(o[k] for o in r) / len(r)
    print(f"{label:22s} {m('elapsed_ms'):7.0f} {m('time_fwd_ms'):7.0f} {m('time_bwd_ms'):7.0f} {m('time_opt_ms'):7.0f}")
PY
	for n in one p2p allgather a2a; do echo "# raw $n"; sed 's/^/#   /' "$W/$n.jsonl"; done
} >"$OUT"
grep -v "^#   " "$OUT"
