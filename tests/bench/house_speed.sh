#!/bin/sh
# CPU training speed of two builds of mgt, alternated in one run (issue 45: a restructuring keeps
# the speed).  Not a test.  Each round runs gpt2-124m (sequence 1024, micro-batch 1, mock data)
# and t5-base-megatron (encoder 512, decoder 128, micro-batch 2, KJV in sentences) with build A,
# then with build B, then B and A (ABBA, so a drift of the machine weighs on both alike), and
# takes each run's tokens/s of its timed iterations (after the first).  Prints min, median and
# max per model and build; raw metrics go to tests/bench/results/house_speed-DATE.txt.
# Usage: tests/bench/house_speed.sh BIN_A BIN_B [ROUNDS]     (bin/ folders; default 3 rounds)
# Environment: THREADS (default 2), ITERS (default 4).
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
A=$1 B=$2 R=${3:-3}
[ -x "$A/mgt-train" ] && [ -x "$B/mgt-train" ] || { echo "usage: house_speed.sh BIN_A BIN_B [ROUNDS]" >&2; exit 2; }
THREADS=${THREADS:-2} ITERS=${ITERS:-4}
W=$ROOT/build/bench/house_speed
mkdir -p "$W" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/house_speed-$(date +%Y%m%d-%H%M%S).txt
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
[ -s "$W/kjv_text_sentence.idx" ] || "$A/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" \
	--output-prefix "$W/kjv" --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --split-sentences \
	--workers "$THREADS" >/dev/null
COMMON="--train-iters $ITERS --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --log-interval 1 --eval-interval 0
 --device cpu --threads $THREADS"
# run BIN MODEL TAG: one training run, its metrics appended to $OUT and its tokens/s to $W/TAG
run() {
	case $2 in
	gpt2) set -- "$1" "$2" "$3" --model gpt2-124m --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 \
		--seq-length 1024 --micro-batch-size 1 --global-batch-size 1 ;;
	t5) set -- "$1" "$2" "$3" --model t5-base-megatron --seq-length 512 --decoder-seq-length 128 --micro-batch-size 2 \
		--global-batch-size 2 --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --data-path "$W/kjv_text_sentence" ;;
	esac
	bin=$1 tag=$3; shift 3
	OMP_NUM_THREADS=$THREADS "$bin/mgt-train" "$@" $COMMON --metrics-file "$W/m.jsonl" >"$W/log" 2>&1 ||
		{ echo "house_speed.sh: $bin/mgt-train failed:" >&2; tail -3 "$W/log" >&2; exit 1; }
	echo "# $tag $bin" >>"$OUT"; cat "$W/m.jsonl" >>"$OUT"
	/usr/bin/python3 -c '
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(x["tokens_per_s"] for x in d) / len(d))' "$W/m.jsonl" >>"$W/$tag"
}
rm -f "$W"/gpt2-* "$W"/t5-*
i=0
while [ $i -lt "$R" ]; do
	for m in gpt2 t5; do run "$A" $m $m-A; run "$B" $m $m-B; run "$B" $m $m-B; run "$A" $m $m-A; done
	i=$((i + 1))
done
/usr/bin/python3 - "$W" "$A" "$B" <<'PY' | tee -a "$OUT"
import statistics, sys
w, a, b = sys.argv[1:4]
print(f"A = {a}\nB = {b}")
for m in ("gpt2", "t5"):
    for t in ("A", "B"):
        v = [float(l) for l in open(f"{w}/{m}-{t}")]
        print(f"{m:5s} {t}: tokens/s min {min(v):.1f} median {statistics.median(v):.1f} max {max(v):.1f} ({len(v)} runs)")
    ma = statistics.median(float(l) for l in open(f"{w}/{m}-A"))
    mb = statistics.median(float(l) for l in open(f"{w}/{m}-B"))
    print(f"{m:5s} B/A median: {mb / ma:.3f}")
PY
echo "raw: $OUT"
