#!/bin/sh
# mgt-train with FSDP's optim_grads_params (ZeRO-3, lib/train/fsdp.c) where the parameter hook
# covers more than one decoder stack, or gathers other bytes than the fp32 parameters:
#   - T5 (--model-family t5): the encoder's and the decoder's layer units gathered before each
#     layer's forward and backward (lib/model/t5.c): DP2 optim_grads_params gives optim_grads's
#     losses and grad norms bit for bit (the same reduce-scatters, the parameters gathered back
#     exactly) and the single process's within 1e-5 (dropout on);
# Under mpirun only (a TAP skip without it).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
command -v mpirun >/dev/null 2>&1 || { echo "1..0 # SKIP mpirun not found"; exit 0; }
F="--use-megatron-fsdp --data-parallel-sharding-strategy"

# ---- T5 ----
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
WP="--tokenizer-type BertWordPieceCase --vocab-file $VOCAB"
ok "KJV split into sentences, cased WordPiece ids" exits 0 $BIN/mgt-preprocess --input "$SHARE/data/kjv.jsonl.zst" \
	--output-prefix kjv $WP --split-sentences --workers 2
T5="$BIN/mgt-train --model-family t5 --num-layers 2 --hidden-size 32 --num-attention-heads 4
 --seq-length 32 --decoder-seq-length 16 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8
 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-style cosine --lr-decay-iters 20 --min-lr 1e-4 --weight-decay 0.01
 --clip-grad 1.0 --log-interval 1 --eval-interval 0 $WP --data-path kjv_text_sentence --split 949,50,1
 --device cpu --threads 1 --train-iters 5 --make-vocab-size-divisible-by 1"
ok "T5: one process" exits 0 $T5 --metrics-file t5-one.jsonl
ok "T5 DP2 optim_grads" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads --metrics-file t5-og.jsonl
ok "T5 DP2 optim_grads_params" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads_params --metrics-file t5-ogp.jsonl
ok "  lm losses and grad norms bitwise optim_grads's" losses_exact t5-og t5-ogp
ok "  lm losses of the 5 steps within 1e-5 of one process's" losses_same t5-one t5-ogp
ok "T5 DP2 optim_grads_params with relative positions" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads_params \
	--position-embedding-type relative --metrics-file t5r-ogp.jsonl
ok "  relative positions: one process" exits 0 $T5 --position-embedding-type relative --metrics-file t5r-one.jsonl
ok "  lm losses within 1e-5 of one process's" losses_same t5r-one t5r-ogp

done_testing
