#!/bin/sh
# CPU training throughput of a Mamba-2 model, mgt-train --model mamba2-130m (--model-family
# hybrid: 24 Mamba-2 layers, h 768, 24 heads of 64, state 128, 1 group; tied) against PyTorch
# (tests/bench/torch_mamba_bench.py: the same model in float32, the chunked SSD of torch_ssd.py,
# which is the reference path transformers' Mamba2 takes without its CUDA kernels, F.conv1d,
# fused AdamW), same shape, micro-batch and thread count, run one after the other.  Not a test.
# mgt-train trains on KJV (GPT-2 BPE: vocabulary 50257, padded to 50304 as torch's); torch on
# random ids (the work does not depend on them).  No dropout.  Prints tokens/s of each and the
# ratio; raw output to tests/bench/results/hybrid_cpu-DATE.txt.
#
# Usage: tests/bench/hybrid_cpu.sh [THREADS]      (default 2)
# Environment: SEQ (1024), MBS (1), ITERS (3 timed after 1 warm-up), LAYERS (24)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
SEQ=${SEQ:-1024} MBS=${MBS:-1} ITERS=${ITERS:-3} LAYERS=${LAYERS:-24}
PY=${PY:-/usr/bin/python3}
B=$ROOT/build/bench/hybrid_cpu
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/hybrid_cpu-$(date +%Y%m%d-%H%M%S).txt
G=$ROOT/share/mgt/tokenizers/gpt2
BPE="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt"
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[ -s "$B/kjv_text_document.idx" ] || "$ROOT/bin/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" \
	--output-prefix "$B/kjv" $BPE --append-eod --workers "$THREADS" >/dev/null
PAT=$(printf 'M%.0s' $(seq "$LAYERS"))
N=$((ITERS + 1))
"$ROOT/bin/mgt-train" --model mamba2-130m --hybrid-layer-pattern "$PAT" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
	--micro-batch-size "$MBS" --global-batch-size "$MBS" --train-iters "$N" --lr 1e-4 --weight-decay 0.01 \
	--clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 0 $BPE \
	--data-path "$B/kjv_text_document" --device cpu --threads "$THREADS" --metrics-file "$B/mgt.jsonl" >"$B/mgt.log" 2>&1
CORE=$($PY "$ROOT/tests/bench/openblas_core.py" 2>/dev/null || true)
$PY "$ROOT/tests/bench/torch_mamba_bench.py" --layers "$LAYERS" --seq-length "$SEQ" --micro-batch-size "$MBS" \
	--iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch.json"
echo '{}' >"$B/torch-blasfix.json"
[ -z "$CORE" ] || OPENBLAS_CORETYPE=$CORE $PY "$ROOT/tests/bench/torch_mamba_bench.py" --layers "$LAYERS" \
	--seq-length "$SEQ" --micro-batch-size "$MBS" --iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch-blasfix.json"
$PY "$ROOT/tests/bench/cpu_vs_torch.py" "mamba2-130m ($LAYERS Mamba-2 layers) sequence $SEQ, micro-batch $MBS, $THREADS threads, CPU" \
	"$B/mgt.jsonl" "$B/torch.json" $((SEQ * MBS)) "$B/torch-blasfix.json" "$CORE" | tee "$OUT"
