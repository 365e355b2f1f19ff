#!/bin/sh
# The main job on the bundled data, end to end on CPU:
#  1. tokenize the King James Bible (share/mgt/data/kjv.jsonl.zst, 1,189 chapters) into
#     demo/data/kjv_text_document.{bin,idx} (Megatron's MMIDIDX format) with the bundled 4,096-token
#     byte-level BPE learned from it (share/mgt/tokenizers/kjv-4k, a Hugging Face tokenizer.json
#     made by contrib/kjv-tokenizer.py), or with GPT-2's (DEMO_TOKENIZER=gpt2: 50,257 tokens, the
#     output layer then about 90% of the tiny model's FLOPs and the run about 5 times slower);
#  2. train the tiny GPT-2-style preset on it (Megatron's 969,30,1 split) with periodic validation
#     and checkpoints in demo/ckpt (HDF5, mgt-ckpt(5)); metrics in demo/metrics.jsonl;
#  3. print the validation-loss curve;
#  4. evaluate it (mgt-eval(1)): the test split's perplexity, the KJV cloze and multiple-choice
#     tasks made from held-out chapters (share/mgt/tasks, mgt-tasks(5); results in
#     demo/tasks.json, TensorBoard scalars in demo/tensorboard) and a verse continued;
#  5. export the trained model as demo/kjv.gguf for llama.cpp (mgt-export(1)).
# DEMO_ITERS (default 1000: about 100 s on 2 cores), DEMO_THREADS (default: all cores) and
# DEMO_TOKENIZER (kjv-4k or gpt2) change the run's length, width and tokenizer.
set -e
cd "$(dirname "$0")/.."
mkdir -p demo/data
case "${DEMO_TOKENIZER:-kjv-4k}" in
gpt2) G=share/mgt/tokenizers/gpt2
	TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt" ;;
kjv-4k) TOK="--tokenizer-type HuggingFaceTokenizer --tokenizer-model share/mgt/tokenizers/kjv-4k" ;;
*) echo "demo: DEMO_TOKENIZER is kjv-4k or gpt2, not '$DEMO_TOKENIZER'" >&2; exit 2 ;;
esac
bin/mgt-preprocess --input share/mgt/data/kjv.jsonl.zst --output-prefix demo/data/kjv \
	$TOK --append-eod --workers 2 --overwrite
bin/mgt-dataset info demo/data/kjv_text_document
rm -rf demo/ckpt demo/metrics.jsonl demo/tensorboard
bin/mgt-train --model tiny-gpt2 $TOK --data-path demo/data/kjv_text_document --split 969,30,1 \
	--micro-batch-size 8 --global-batch-size 8 --train-iters "${DEMO_ITERS:-1000}" \
	--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 --lr-decay-style cosine --weight-decay 0.1 \
	--hidden-dropout 0 --attention-dropout 0 --openai-gelu \
	--eval-interval 100 --eval-iters 8 --log-interval 50 --log-throughput \
	--save demo/ckpt --save-interval 250 --threads "${DEMO_THREADS:-0}" \
	--metrics-file demo/metrics.jsonl --tensorboard-dir demo/tensorboard
echo
echo "validation loss by iteration (demo/metrics.jsonl):"
grep valid_loss demo/metrics.jsonl | sed -e 's/.*"iteration": \([0-9]*\), "valid_loss": \([0-9.]*\).*"end".*/  \1 \2 (end of training, next validation samples)/' -e 's/.*"iteration": \([0-9]*\), "valid_loss": \([0-9.]*\).*/  \1 \2/'
EVAL="--load demo/ckpt --threads ${DEMO_THREADS:-0}"
echo
echo "test-split perplexity (mgt-eval loss):"
bin/mgt-eval loss $EVAL --eval-split test 2>/dev/null | sed -n 2p
echo
echo "zero-shot tasks on held-out chapters (mgt-eval tasks; chance: acc 0.25 on kjv-choice):"
bin/mgt-eval tasks $EVAL --task share/mgt/tasks/kjv-cloze.jsonl --task share/mgt/tasks/kjv-choice.jsonl \
	--output demo/tasks.json --tensorboard-dir demo/tensorboard 2>&1 | sed 's/^mgt-eval: /  /'
echo
echo "a verse continued (mgt-eval generate: top-k 40, seed 1234; the tiny model's greedy choice repeats itself):"
bin/mgt-eval generate $EVAL --top-k 40 --seed 1234 --prompt "And it came to pass, when" --max-new-tokens 40
echo
rm -f demo/kjv.gguf
bin/mgt-export --load-dir demo/ckpt --output demo/kjv.gguf --outtype f16
