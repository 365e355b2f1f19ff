#!/bin/sh
# Packed against padded SFT on the CPU (issue 47 item 8): the same conversations (the shipped chat
# set share/mgt/data/kjv-chat.jsonl.zst: each user turn half a verse, the assistant the rest) trained with mgt-train --sft as
# Megatron packs them (several conversations a line: one row holds them, block-diagonal
# attention) and one conversation a line (each row one conversation and padding, what an
# unpacked fine-tuning set gives), tiny-llama, --seq-length 256, micro-batch 4, 2 threads.
# Reported per layout: the median time per iteration over iterations 3..N (the log's), the real
# (non-pad) and the loss (answer) tokens per row from mgt-dataset samples over the same lines,
# and from them real and answer tokens per second; and mgt-train's memory line (the computed bytes
# against the process's peak RSS).  Not a test.  Raw results to
# tests/bench/results/sft_packing-HOST-DATE.txt.
#   sh tests/bench/sft_packing.sh [ITERS]      (default 30)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$ROOT/build/bench/sft
PY=/usr/bin/python3
ITERS=${1:-30}
S=256 MBS=4
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/sft_packing-$(hostname)-$(date +%Y%m%d-%H%M%S).txt
cd "$B"
cp "$ROOT/share/mgt/tokenizers/kjv-4k-chat/tokenizer.json" tok.json # kjv-4k with Nemotron's prompt tokens (contrib/kjv-chat.py)
# the shipped chat set (contrib/kjv-chat.py: six conversations a line) and its conversations one a line
zstd -dcq "$ROOT/share/mgt/data/kjv-chat.jsonl.zst" | head -300 >packed.jsonl
$PY -c '
import json
with open("padded.jsonl", "w") as out:
    for line in open("packed.jsonl"):
        m = json.loads(line)["messages"]
        for i in range(0, len(m), 3):  # system, user, assistant
            out.write(json.dumps({"messages": m[i:i + 3]}) + "\n")'
TOK="--tokenizer-type SFTTokenizer --tokenizer-model tok.json"
run() { # NAME: train, then the median iteration time and the rows' token counts
	"$ROOT/bin/mgt-train" --model tiny-llama $TOK --sft --data-path "$1.jsonl" --split 100,0,0 --seq-length $S \
		--max-position-embeddings $S --micro-batch-size $MBS --global-batch-size $MBS --train-iters "$ITERS" \
		--lr 1e-4 --log-interval 1 --threads 2 --device cpu >"$1.log" 2>&1
	n=$((ITERS * MBS))
	"$ROOT/bin/mgt-dataset" samples "$1.jsonl" --dataset-type sft --tokenizer-model tok.json --seq-length $S \
		--samples 0:$n >"$1.samples"
	$PY - "$1" "$n" <<'PY'
import json, re, statistics, sys
name, n = sys.argv[1], int(sys.argv[2])
ms = [float(m) for m in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", open(name + ".log").read())][2:]
rows = [json.loads(l) for l in open(name + ".samples")]
pad = 4099
real = sum(sum(1 for t in r["tokens"] if t != pad) for r in rows) / len(rows)
loss = sum(sum(r["loss_mask"]) for r in rows) / len(rows)
t = statistics.median(ms) / 1000
rows_s = 4 / t
print(f"{name}: {len(rows)} rows, median {t * 1000:.1f} ms/iteration (min {min(ms):.1f}, max {max(ms):.1f}); per row "
      f"{real:.1f} real and {loss:.1f} answer tokens of 256; {real * rows_s:.0f} real and {loss * rows_s:.0f} answer tokens/s")
mem = re.findall(r"memory after training: .*", open(name + ".log").read())
print(f"{name}: {mem[-1] if mem else 'no memory line'}")
PY
}
{
	echo "# packed vs padded SFT, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	echo "# tiny-llama, --seq-length $S, micro-batch $MBS, $ITERS iterations, 2 threads, CPU backend"
	run packed
	run padded
} | tee "$OUT"
