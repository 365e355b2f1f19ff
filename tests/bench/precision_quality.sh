#!/bin/sh
# Training quality of --bf16, --fp16 and fp8 against fp32 (issue "mixed precision as Megatron does
# it"): the demo's run as it was before issue 46 (contrib/demo.sh then: tiny-gpt2 on the King James Bible, GPT-2 tokenizer,
# Megatron's 969,30,1 split, 300 iterations, the same schedule) three times on the CPU backend,
# where the 16-bit storage and GEMM operands are emulated bit for bit, and the validation loss at
# each evaluation of each run against fp32's.  fp16 uses Megatron's dynamic loss scaler
# (--initial-loss-scale 2^32: the first iterations are skipped while the scale comes down).  The
# issue asks for the final validation loss within 1%.  Not a test: it takes minutes.
#
#   sh tests/bench/precision_quality.sh [ITERS]      (default 300; DEMO_THREADS threads, default all)
# SEED (default 1234: the demo's) gives all three runs another seed, for the seed-to-seed spread
# that a 1% comparison must stand against; FP16_SCALE sets fp16's --initial-loss-scale (default
# Megatron's 2^32, whose first iterations are skipped: 4096 skips none on this model).  PRECS
# (default "fp32 bf16 fp16") chooses the runs; fp8 is --bf16 with Megatron's Llama 3 fp8 recipe
# (--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max; issue 31 asks
# for the validation loss within 2% of bf16's), and its column compares it with bf16.
# Raw results: tests/bench/results/precision-quality-<host>-<date>.txt
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
bin=${MGT_BIN:-$root/bin}
iters=${1:-300}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/prec-q.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
res=$root/tests/bench/results/precision-quality-$(hostname)-$(date +%Y%m%d-%H%M%S).txt
mkdir -p "$root/tests/bench/results"
G=$root/share/mgt/tokenizers/gpt2
TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt"
"$bin/mgt-preprocess" --input "$root/share/mgt/data/kjv.jsonl.zst" --output-prefix "$tmp/kjv" $TOK --append-eod \
	--workers 2 --overwrite >/dev/null 2>&1 || { echo "mgt-preprocess failed"; exit 1; }
{
echo "# precision_quality $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname): tiny-gpt2 on KJV, $iters iterations, seed ${SEED:-1234}, fp16 initial loss scale ${FP16_SCALE:-4294967296}, $(git -C "$root" rev-parse --short HEAD)"
for prec in ${PRECS:-fp32 bf16 fp16}; do
	flag="--seed ${SEED:-1234}"
	case $prec in
	fp32) ;;
	fp8) flag="$flag --bf16 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max" ;;
	*) flag="$flag --$prec" ;;
	esac
	[ $prec = fp16 ] && flag="$flag --initial-loss-scale ${FP16_SCALE:-4294967296}"
	start=$(date +%s)
	# shellcheck disable=SC2086
	"$bin/mgt-train" --model tiny-gpt2 $TOK --data-path "$tmp/kjv_text_document" --split 969,30,1 \
		--micro-batch-size 8 --global-batch-size 16 --train-iters "$iters" \
		--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 15 --lr-decay-style cosine --weight-decay 0.1 \
		--hidden-dropout 0 --attention-dropout 0 --openai-gelu --eval-interval 25 --eval-iters 4 \
		--log-interval 25 --threads "${DEMO_THREADS:-0}" --metrics-file "$tmp/$prec.jsonl" $flag \
		>"$tmp/$prec.log" 2>&1 || { echo "$prec: mgt-train failed: $(tail -1 "$tmp/$prec.log")"; continue; }
	echo "# $prec: $(($(date +%s) - start)) s; $(grep -c '"skipped":true' "$tmp/$prec.jsonl") skipped iterations"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, os
d = sys.argv[1]
runs = {}
for p in ("fp32", "bf16", "fp16", "fp8"):
    f = os.path.join(d, p + ".jsonl")
    if os.path.exists(f):
        runs[p] = [(o["iteration"], o["valid_loss"]) for o in map(json.loads, open(f)) if "valid_loss" in o]
base = "fp32" if "fp32" in runs else "bf16"
print("%9s %10s %10s %10s %10s %9s %9s %9s" % ("iteration", "fp32", "bf16", "fp16", "fp8", "bf16/fp32", "fp16/fp32",
                                             "fp8/bf16"))
for k, (it, _) in enumerate(runs.get(base, [])):
    g = lambda p: runs[p][k][1] if p in runs and k < len(runs[p]) and runs[p][k][0] == it else None
    v, b, h, e = g("fp32"), g("bf16"), g("fp16"), g("fp8")
    f = lambda x: "%10.4f" % x if x is not None else "%10s" % "-"
    r = lambda x, y: "%+8.2f%%" % (100 * (x / y - 1)) if x is not None and y is not None else "%9s" % "-"
    print("%9d %s %s %s %s %s %s %s" % (it, f(v), f(b), f(h), f(e), r(b, v), r(h, v), r(e, b)))
PY
} | tee "$res"
echo "raw results: $res"
