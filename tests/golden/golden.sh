#!/bin/sh
# tests/golden/golden.sh OUTDIR: golden logs for a restructuring that must not change behaviour
# (issue 45).  Trains every family and layout the quick tier trains, a few iterations each, on
# the CPU, and writes OUTDIR/CASE.txt per case: every iteration's metrics (the metrics file's
# JSON lines without the timings and memory figures) and the XXH3-64 checksum of every tensor
# piece of the checkpoint saved at the end (from its checksums.json), plus mgt-eval's loss and
# greedy generation for the inference paths.  Record before a change, record after, then
#   diff -r BEFORE AFTER
# must print nothing: the same losses, grad norms and weights bit for bit.  Not a test of its own
# (the figures depend on the machine's OpenBLAS kernels); the cases are the quick tier's:
# tiny GPT-2 (and TP2 x PP2 with SP and the distributed optimizer), Llama GQA, MoE with EP2,
# BERT, T5 learned and relative, fp8 delayed, CP2, bf16.
# Environment: MGT_GOLDEN_CASES="gpt2 t5 ..." runs only those.
. "$(dirname "$0")/../cli/lib.sh"
[ $# = 1 ] || { echo "usage: tests/golden/golden.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1" && OUT=$(cd "$1" && pwd) || exit 1
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
small_bpe || exit 1
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod --workers 2 \
	--quiet >/dev/null 2>&1 || { echo "golden: mgt-preprocess (BPE) failed" >&2; exit 1; }
for c in Case LowerCase; do
	"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix wp$c --tokenizer-type BertWordPiece$c \
		--vocab-file "$SHARE/tokenizers/bert/vocab.txt" --split-sentences --workers 2 --quiet >/dev/null 2>&1 ||
		{ echo "golden: mgt-preprocess (WordPiece$c) failed" >&2; exit 1; }
done
COMMON="--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-style cosine
 --min-lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --log-interval 1 --eval-interval 0 --device cpu --threads 2
 --seed 1234 --train-iters 4 --save ck --save-interval 4"
GPTDATA="$BPE --data-path kjv_text_document --split 969,30,1 --seq-length 32 --max-position-embeddings 32"
# summary CASE: the metrics and checkpoint checksums of the run in ./ck and ./m.jsonl
summary() {
	$PY - m.jsonl ck >"$OUT/$1.txt" <<'PY'
import json, os, sys
drop = {"elapsed_ms", "tokens_per_s", "tflops", "peak_rss_bytes"}
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(json.dumps({k: v for k, v in d.items() if k not in drop and not k.startswith("time_")}, sort_keys=True))
ck = sys.argv[2]
it = open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read().strip()
s = json.load(open(os.path.join(ck, "iter_%07d" % int(it), "checksums.json")))
for shard in sorted(s["shards"]):
    for name, p in sorted(s["shards"][shard].items()):
        print(shard, name, p["global_offset"], p["shape"], p["dtype"], p["xxh3_64"])
PY
}
# case NAME NP FLAGS...: train (under mpirun when NP > 1), then summarize
case_() {
	n=$1 np=$2; shift 2
	if [ -n "${MGT_GOLDEN_CASES:-}" ]; then
		case " $MGT_GOLDEN_CASES " in *" $n "*) ;; *) return 0 ;; esac
	fi
	rm -rf ck m.jsonl
	if [ "$np" = 1 ]; then set -- "$BIN/mgt-train" "$@"; else set -- $RUN "$np" "$BIN/mgt-train" "$@"; fi
	"$@" $COMMON --metrics-file m.jsonl >"$n.log" 2>&1 || { echo "golden: $n failed:" >&2; tail -5 "$n.log" >&2; exit 1; }
	summary "$n"
	echo "golden: $n" >&2
	evals "$n" "$np"
}
printf '{"text": "In the beginning God created"}\n{"text": "And the LORD said unto Moses"}\n' >texts.jsonl
# evals CASE: mgt-eval on the checkpoint (loss; for decoders perplexity and greedy generation;
# for T5 generation) appended to OUTDIR/CASE-eval.txt, timings removed
evals() {
	e="$OUT/$1-eval.txt" d=${DATA:-kjv_text_document}
	case $1 in
	gpt2|llama-gqa|moe-ep2|gpt2-tp2pp2) d=kjv_text_document ;;
	bert) d=wpLowerCase_text_sentence ;;
	t5|t5-relative) d=wpCase_text_sentence ;;
	*) return 0 ;;
	esac
	if [ "$2" = 1 ]; then l="$BIN/mgt-eval"; else l="$RUN $2 $BIN/mgt-eval"; fi
	$l loss --load ck --data-path $d --split 949,50,1 --eval-iters 2 --threads 2 >"$e" 2>&1
	case $1 in
	bert) ;;
	t5*) "$BIN/mgt-eval" generate --load ck --prompt "In the beginning" --prompt "And God said" --greedy \
		--max-new-tokens 8 --batch-size 2 --threads 2 >>"$e" 2>&1 ;;
	*) "$BIN/mgt-eval" perplexity --load ck --texts texts.jsonl --threads 2 >>"$e" 2>&1
	   "$BIN/mgt-eval" generate --load ck --prompt "In the beginning" --prompt "And God said" --greedy \
		--max-new-tokens 12 --batch-size 2 --threads 2 >>"$e" 2>&1 ;;
	esac
	sed -i 's/\[ t [0-9.]* s \]//; /load-checkpoint\|elapsed\|tokens\/s\|seconds/d' "$e"
}
case_ gpt2 1 --model tiny-gpt2 $GPTDATA
case_ gpt2-tp2pp2 4 --model tiny-gpt2 $GPTDATA --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
	--sequence-parallel --use-distributed-optimizer --threads 1 --global-batch-size 8
case_ gpt2-bf16 1 --model tiny-gpt2 $GPTDATA --bf16
case_ fp8-delayed 1 --model tiny-gpt2 $GPTDATA --fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max
case_ llama-gqa 1 --model tiny-llama $GPTDATA
case_ moe-ep2 2 --model tiny-moe $GPTDATA --expert-model-parallel-size 2 --threads 1
case_ cp2 2 --model tiny-llama $GPTDATA --context-parallel-size 2 --threads 1
BERT="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
case_ bert 1 --model-family bert $BERT --tokenizer-type BertWordPieceLowerCase \
	--vocab-file "$SHARE/tokenizers/bert/vocab.txt" --data-path wpLowerCase_text_sentence --split 949,50,1
T5="--model-family t5 $BERT --decoder-seq-length 16 --tokenizer-type BertWordPieceCase
 --vocab-file $SHARE/tokenizers/bert/vocab.txt --data-path wpCase_text_sentence --split 949,50,1"
case_ t5 1 $T5
case_ t5-relative 1 $T5 --position-embedding-type relative --relative-attention-num-buckets 8 \
	--relative-attention-max-distance 20
exit 0
