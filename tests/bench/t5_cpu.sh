#!/bin/sh
# CPU training throughput of T5, mgt-train --model t5-base-megatron (--model-family t5, Megatron's
# 220M example's shape: encoder 512 / decoder 128 tokens) against PyTorch
# (tests/bench/torch_t5_bench.py: the same model in float32 with SDPA, fused AdamW), same shape,
# micro-batch and thread count, run one after the other.  Not a test.  mgt-train trains on KJV
# split into sentences (mgt-preprocess --split-sentences, BertWordPieceCase); torch on random ids
# with an eighth of the encoder's positions padding (the work does not depend on the values).
# Both with hidden and attention dropout DROPOUT (0.1: Megatron's defaults).
# Tokens are the encoder's (Megatron's seq_length x batch).  Prints tokens/s of each and the
# ratio; raw output to tests/bench/results/t5_cpu-DATE.txt.
#
# Usage: tests/bench/t5_cpu.sh [THREADS]      (default 2)
# Environment: SEQ (512), DSEQ (128), MBS (2), ITERS (3 timed after 1 warm-up), LAYERS (12),
# DROPOUT (0.1)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
SEQ=${SEQ:-512} DSEQ=${DSEQ:-128} MBS=${MBS:-2} ITERS=${ITERS:-3} LAYERS=${LAYERS:-12} DROPOUT=${DROPOUT:-0.1}
DROP="--hidden-dropout $DROPOUT --attention-dropout $DROPOUT"
PY=${PY:-/usr/bin/python3}
B=$ROOT/build/bench/t5_cpu
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/t5_cpu-$(date +%Y%m%d-%H%M%S).txt
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[ -s "$B/kjv_text_sentence.idx" ] || "$ROOT/bin/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" \
	--output-prefix "$B/kjv" --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --split-sentences \
	--workers "$THREADS" >/dev/null
N=$((ITERS + 1))
"$ROOT/bin/mgt-train" --model t5-base-megatron --num-layers "$LAYERS" --seq-length "$SEQ" \
	--decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" $DROP \
	--global-batch-size "$MBS" --train-iters "$N" --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --init-method-std 0.015 --log-interval 1 \
	--eval-interval 0 --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --data-path "$B/kjv_text_sentence" \
	--device cpu --threads "$THREADS" --metrics-file "$B/mgt.jsonl" >"$B/mgt.log" 2>&1
# Debian's OpenBLAS 0.3.21 falls back to its SSE3 kernels on CPUs it does not know, where mgt-train
# picks the AVX ones itself (lib/backend/cpu.c): torch runs again with OPENBLAS_CORETYPE set so
CORE=$($PY "$ROOT/tests/bench/openblas_core.py" 2>/dev/null || true)
$PY "$ROOT/tests/bench/torch_t5_bench.py" --layers "$LAYERS" --seq-length "$SEQ" \
	--decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" $DROP \
	--iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch.json"
echo '{}' >"$B/torch-blasfix.json"
[ -z "$CORE" ] || OPENBLAS_CORETYPE=$CORE $PY "$ROOT/tests/bench/torch_t5_bench.py" --layers "$LAYERS" \
	--seq-length "$SEQ" --decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" $DROP --iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch-blasfix.json"
$PY "$ROOT/tests/bench/cpu_vs_torch.py" "t5-base-megatron ($LAYERS + $LAYERS layers) encoder $SEQ / decoder $DSEQ, micro-batch $MBS, dropout $DROPOUT, $THREADS threads, CPU" "$B/mgt.jsonl" "$B/torch.json" $((SEQ * MBS)) \
	"$B/torch-blasfix.json" "$CORE" | tee "$OUT"
