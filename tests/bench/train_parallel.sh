#!/bin/sh
# Parallel layouts of mgt-train on this machine's CPU cores (tests/mpirun.sh): per layout the
# training throughput (median iteration after warm-up, tokens/s of the whole job), the bytes each
# rank's communicators count per iteration (--comm-log: the largest rank, and the sum over ranks),
# and the memory mgt computes for the logging rank (parameters, gradients, optimizer state,
# activations).  Not a test.  With P processes each runs max(1, CORES / P) threads, so the
# layouts share the same cores.  Raw results (the table, then every metrics and comm-log line)
# go to tests/bench/results/train_parallel-DATE.txt.
#
# Usage: tests/bench/train_parallel.sh
# Environment: MODEL (tiny-gpt2), SEQ (128), MBS (2), GBS (16), ITERS (12), WARMUP (2), CORES
#              (nproc), LAYOUTS: lines "NP NAME FLAGS..." (default: 1 process, DP2, DP2 with the
#              distributed optimizer, TP2, TP2+SP, PP2, PP2 with 1 layer on the last stage, PP2 with 2 virtual
#              stages, TP2xPP2xDP2)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${MODEL:-tiny-gpt2} SEQ=${SEQ:-128} MBS=${MBS:-2} GBS=${GBS:-16} ITERS=${ITERS:-12} WARMUP=${WARMUP:-2}
CORES=${CORES:-$(nproc)}
PY=${PY:-/usr/bin/python3}
B=$ROOT/build/bench/train_parallel
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/train_parallel-$(date +%Y%m%d-%H%M%S).txt
[ -x "$ROOT/bin/mgt-train" ] || { echo "train_parallel.sh: bin/mgt-train is not built (make)" >&2; exit 1; }
LAYOUTS=${LAYOUTS:-"1 single
2 dp2
2 dp2-distopt --use-distributed-optimizer
2 tp2 --tensor-model-parallel-size 2
2 tp2-sp --tensor-model-parallel-size 2 --sequence-parallel
2 pp2 --pipeline-model-parallel-size 2
2 pp2-last1 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1
2 pp2-vp2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
8 tp2-pp2-dp2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"}

{
	echo "# mgt-train parallel layouts, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), $CORES cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	echo "# $MODEL, seq $SEQ, micro-batch $MBS, global batch $GBS, $ITERS iterations (median of those after $WARMUP), --mock-data, fp32"
	echo "# git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
} >"$OUT"
echo "$LAYOUTS" | while read -r np name flags; do
	[ -n "$np" ] || continue
	th=$((CORES / np)); [ $th -ge 1 ] || th=1
	set -- "$ROOT/bin/mgt-train" --model "$MODEL" --mock-data --seq-length "$SEQ" --micro-batch-size "$MBS" \
		--global-batch-size "$GBS" --train-iters "$ITERS" --lr 1e-4 --eval-interval 0 --log-interval 1 \
		--threads $th --metrics-file "$B/$name.jsonl" --comm-log "$B/$name" $flags
	rm -f "$B/$name".rank*.jsonl
	if [ "$np" = 1 ]; then "$@" 2>"$B/$name.err" </dev/null; else sh "$ROOT/tests/mpirun.sh" "$np" "$@" 2>"$B/$name.err" </dev/null; fi
	$PY - "$B" "$name" "$np" "$th" "$WARMUP" "$flags" >>"$OUT" <<'PY'
import glob, json, re, statistics, sys
b, name, np, th, warm, flags = sys.argv[1:7]
rows = [json.loads(l) for l in open(f"{b}/{name}.jsonl") if "lm_loss" in l]
it = [r for r in rows if r["iteration"] > int(warm)]
ms = statistics.median(r["elapsed_ms"] for r in it)
tok = statistics.median(r["tokens_per_s"] for r in it)
per_rank = []
for f in sorted(glob.glob(f"{b}/{name}.rank*.jsonl")):
    c = [json.loads(l) for l in open(f)]
    per_rank.append(statistics.median(sum(x["bytes"].values()) for x in c))
mem = re.search(r"memory before training: computed ([0-9.]+) MiB \(parameters ([0-9.]+), gradients ([0-9.]+), "
                r"optimizer ([0-9.]+), activations ([0-9.]+)", open(f"{b}/{name}.err").read())
print(f"{name:12s} ranks {np} threads/rank {th} | {ms:8.1f} ms/iter | {tok:8.0f} tokens/s | comm/iter: "
      f"max rank {max(per_rank) / 2**20:8.2f} MiB, all ranks {sum(per_rank) / 2**20:8.2f} MiB | "
      f"log rank computed {mem.group(1)} MiB (params {mem.group(2)}, grads {mem.group(3)}, optimizer "
      f"{mem.group(4)}, activations {mem.group(5)}) | final lm loss {rows[-1]['lm_loss']:.6f} | {flags}")
PY
	tail -1 "$OUT"
done
{
	echo "# raw metrics and comm logs"
	for f in "$B"/*.jsonl; do echo "## $(basename "$f")"; cat "$f"; done
} >>"$OUT"
echo "results: $OUT"
