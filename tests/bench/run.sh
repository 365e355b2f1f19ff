#!/bin/sh
# Benchmarks for mgt-preprocess (make bench). Prints a report and saves it, raw, to
# tests/bench/results/preprocess-HOST-DATE.txt.
#   - throughput on KJV x10 (43 MB of JSONL, zstd), GPT-2 BPE, --workers 1 and 2, 3 runs each:
#     MB/s and tokens/s from the program's own summary (wall time from the start of reading to
#     the rename), and MB per CPU-second (user + sys of all threads: the per-core figure)
#   - peak RSS (GNU time %M) on KJV and on KJV x10, same flags
#   - the reference tokenizers on KJV, one thread, when tests/oracle can be set up
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$ROOT/build/bench
mkdir -p "$B" "$ROOT/tests/bench/results"
KJV=$ROOT/share/mgt/data/kjv.jsonl.zst
G=$ROOT/share/mgt/tokenizers/gpt2
TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt"
OUT=$ROOT/tests/bench/results/preprocess-$(hostname)-$(date +%Y%m%d-%H%M%S).txt
TIME=/usr/bin/time
[ -x $TIME ] || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 1; }
for i in 1 2 3 4 5 6 7 8 9 10; do cat "$KJV"; done > "$B/kjv10.jsonl.zst" # concatenated zstd frames

run() { # LABEL INPUT WORKERS -> one line: label, summary, peak RSS, CPU seconds, MB per CPU-second
	$TIME -f "peak_rss_kb %M cpu_s %U %S" "$ROOT/bin/mgt-preprocess" --input "$2" --output-prefix "$B/out" $TOK \
		--append-eod --workers "$3" --overwrite 2>"$B/err" >/dev/null
	mb=$(grep -o '[0-9.]* MB of JSONL' "$B/err" | cut -d' ' -f1)
	cpu=$(grep peak_rss_kb "$B/err" | awk '{print $4 + $5}')
	echo "$1 workers=$3 $(grep 'MB of JSONL' "$B/err" | sed 's/^mgt-preprocess: //') $(grep peak_rss_kb "$B/err" | cut -d' ' -f1-2)" \
		"cpu_s $cpu MB_per_cpu_s $(awk "BEGIN{printf \"%.1f\", $mb / $cpu}")"
}
{
	echo "# mgt-preprocess benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -m)"
	echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "# commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	for w in 1 2; do
		for rep in 1 2 3; do run "kjv10" "$B/kjv10.jsonl.zst" $w; done
	done
	for w in 1 2; do
		run "kjv1" "$KJV" $w
		run "kjv10" "$B/kjv10.jsonl.zst" $w
	done
	if sh "$ROOT/tests/oracle/setup.sh" >/dev/null 2>&1; then
		zstd -dcq "$KJV" > "$B/kjv.jsonl"
		echo "# reference tokenizers on KJV, one thread (tests/oracle/encode.mjs --time)"
		for m in "--hf $G/tokenizer.json" "--tiktoken gpt2" "--gpt3"; do
			node "$ROOT/tests/oracle/encode.mjs" $m --time "$B/kjv.jsonl" 2>&1 >/dev/null | sed "s|^|oracle $m: |"
		done
	fi
} | tee "$OUT"
echo "saved $OUT"
