#!/bin/sh
# One quick run of every program on tiny inputs, each checked only for its exit status and its
# output files: the sanitized pass of .ci/run (make check-smoke under SANITIZE=address,undefined,
# where AddressSanitizer, LeakSanitizer and UBSan make any memory or undefined-behaviour bug a
# non-zero exit) and part of the quick tier.  The numbers are checked by the other scripts.
# Paths: tokenize, preprocess (zstd JSON Lines, 2 workers), dataset info and merge, train on one
# process (save, resume) and under mpirun (TP2 with SP and the distributed optimizer, PP2,
# MoE with EP2, CP2), eval (loss, generate, perplexity, tasks), convert both ways, export GGUF,
# plan, and the mgt dispatcher.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
small_bpe || { echo "1..0 # SKIP no python3"; exit 0; }

ok "mgt --version" exits 0 "$BIN/mgt" --version
ok "mgt-tokenize encodes" sh -c "echo 'In the beginning' | '$BIN/mgt-tokenize' $BPE >tok.out && test -s tok.out"
zstd -dc "$SHARE/data/kjv.jsonl.zst" | head -40 | zstd -q >kjv40.jsonl.zst
ok "mgt-preprocess, 2 workers" exits 0 "$BIN/mgt-preprocess" --input kjv40.jsonl.zst --output-prefix k \
	$BPE --append-eod --workers 2 --quiet
D=k_text_document
ok "mgt-dataset info" exits 0 "$BIN/mgt-dataset" info $D
ok "mgt-dataset merge" exits 0 "$BIN/mgt-dataset" merge --input $D --input $D --output-prefix m

TRAIN="--model tiny-gpt2 $BPE --data-path $D --split 90,10,0 --data-cache-path cache --seq-length 64
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --eval-interval 2 --eval-iters 1 --log-interval 1
 --threads 1"
ok "mgt-train: 2 iterations, saved" exits 0 "$BIN/mgt-train" $TRAIN --train-iters 2 --save ck
ok "mgt-train: resumed to 3" exits 0 "$BIN/mgt-train" $TRAIN --train-iters 3 --load ck --save ck
ok "mgt-train, TP2 + SP + distributed optimizer, bf16" exits 0 $RUN 2 "$BIN/mgt-train" $TRAIN --train-iters 2 \
	--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --bf16 --save tp
ok "mgt-train, PP2" exits 0 $RUN 2 "$BIN/mgt-train" $TRAIN --train-iters 2 --pipeline-model-parallel-size 2
ok "mgt-train, MoE with EP2" exits 0 $RUN 2 "$BIN/mgt-train" $TRAIN --model tiny-moe --disable-bias-linear \
	--train-iters 2 --expert-model-parallel-size 2
ok "mgt-train, CP2" exits 0 $RUN 2 "$BIN/mgt-train" $TRAIN --model tiny-llama --train-iters 2 \
	--context-parallel-size 2
ok "mgt-eval loss" exits 0 "$BIN/mgt-eval" loss --load ck --output loss.json
ok "mgt-eval generate (the TP2 checkpoint in one process)" exits 0 "$BIN/mgt-eval" generate --load tp \
	--prompt "In the" --max-new-tokens 4
ok "mgt-eval perplexity" exits 0 "$BIN/mgt-eval" perplexity --load ck --texts kjv40.jsonl.zst --limit 2
ok "mgt-eval tasks" exits 0 "$BIN/mgt-eval" tasks --load ck --task "$SHARE/tasks/kjv-choice.jsonl" --limit 2
ok "mgt-ckpt-convert to Hugging Face" exits 0 "$BIN/mgt-ckpt-convert" --load-dir ck --save-dir hf
ok "mgt-ckpt-convert back, TP2" exits 0 "$BIN/mgt-ckpt-convert" --load-dir hf --save-dir back \
	--target-tensor-parallel-size 2
ok "mgt-export GGUF" exits 0 "$BIN/mgt-export" --load-dir ck --output m.gguf
ok "mgt-plan" exits 0 "$BIN/mgt-plan" --model gpt2-124m --cluster "$SHARE/clusters/dgx-h100.json" \
	--vocab-size 50257 --global-batch-size 64 --output plan.json
done_testing
