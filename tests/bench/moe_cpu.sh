#!/bin/sh
# CPU training throughput of an MoE model against a dense model with the same active parameters
# (and the same model FLOPs per token): the MoE model's layers have E experts of width F with
# top-k routing, the dense one's MLP has width k x F; attention, embeddings and everything else
# are equal.  Not a test.  Both run mgt-train on --mock-data with the same batches, thread count
# and optimizer; the table gives tokens/s (mean over the timed iterations after warm-up), the
# forward/backward/optimizer split, the ratio MoE/dense and each run's peak RSS; the raw metrics
# lines follow.  Results go to tests/bench/results/moe_cpu-DATE.txt.
#
# Usage: tests/bench/moe_cpu.sh [THREADS]    (default 2)
# Environment: SHAPE "LAYERS:HIDDEN:HEADS:SEQ:MBS" (default 4:256:8:256:4), MOE "E:K:F" (default
#              8:2:512), ITERS (default 12), WARMUP (default 2)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
SHAPE=${SHAPE:-4:256:8:256:4}
MOE=${MOE:-8:2:512}
ITERS=${ITERS:-12}
WARMUP=${WARMUP:-2}
TRAIN=$ROOT/bin/mgt-train
[ -x "$TRAIN" ] || { echo "moe_cpu.sh: $TRAIN is not built (make)" >&2; exit 1; }
mkdir -p "$ROOT/tests/bench/results" "$ROOT/build/bench/moe_cpu"
OUT=$ROOT/tests/bench/results/moe_cpu-$(date +%Y%m%d-%H%M%S).txt
W=$ROOT/build/bench/moe_cpu
IFS=: read -r L H NH S MB <<EOF
$SHAPE
EOF
IFS=: read -r E K F <<EOF
$MOE
EOF
COMMON="--num-layers $L --hidden-size $H --num-attention-heads $NH --seq-length $S --max-position-embeddings $S
 --micro-batch-size $MB --global-batch-size $MB --train-iters $ITERS --lr 1e-4 --mock-data --vocab-size 32000
 --tokenizer-type NullTokenizer --position-embedding-type rope --normalization RMSNorm --swiglu
 --disable-bias-linear --untie-embeddings-and-output-weights --eval-interval 0 --eval-iters 0 --log-interval 1
 --threads $THREADS"
run() { # NAME FLAGS...
	n=$1; shift
	/usr/bin/python3 -c 'import resource, subprocess, sys
r = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL)
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)' "$W/$n.rss" "$TRAIN" $COMMON --metrics-file "$W/$n.jsonl" "$@" 2>"$W/$n.log"
}
run dense --ffn-hidden-size $((K * F))
run moe --ffn-hidden-size $((K * F)) --num-experts "$E" --moe-router-topk "$K" --moe-ffn-hidden-size "$F" \
	--moe-aux-loss-coeff 1e-2
{
	echo "# moe_cpu.sh $(date -u +%FT%TZ) threads $THREADS shape L$L h$H heads $NH seq $S mbs $MB; MoE $E experts of $F, top-$K; dense ffn $((K * F))"
	echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
	/usr/bin/python3 - "$W" "$WARMUP" <<'PY'
import json, sys
w, warm = sys.argv[1], int(sys.argv[2])
res = {}
for n in ("dense", "moe"):
    rows = [o for o in map(json.loads, open(f"{w}/{n}.jsonl")) if "lm_loss" in o][warm:]
    m = lambda k: sum(o[k] for o in rows) / len(rows)
    res[n] = (m("tokens_per_s"), m("time_fwd_ms"), m("time_bwd_ms"), m("time_opt_ms"), int(open(f"{w}/{n}.rss").read()) / 1024)
print(f"{'model':8} {'tokens/s':>10} {'fwd ms':>8} {'bwd ms':>8} {'opt ms':>8} {'peak RSS MiB':>13}")
for n, r in res.items():
    print(f"{n:8} {r[0]:10.1f} {r[1]:8.1f} {r[2]:8.1f} {r[3]:8.1f} {r[4]:13.1f}")
print(f"MoE / dense tokens/s: {res['moe'][0] / res['dense'][0]:.3f}")
PY
	for n in dense moe; do echo "# $n metrics"; cat "$W/$n.jsonl"; done
} | tee "$OUT" | sed -n '1,6p'
echo "raw results: $OUT"
