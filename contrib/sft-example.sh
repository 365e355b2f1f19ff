#!/bin/sh
# Supervised fine-tuning end to end, as Megatron-LM runs it (--sft), on the bundled data, on CPU
# (mgt-train(1) "SUPERVISED FINE-TUNING"):
#  1. pretrain the tiny Llama-style preset (RoPE, GQA, SwiGLU, RMSNorm) on KJV, tokenized with the
#     shipped chat tokenizer share/mgt/tokenizers/kjv-4k-chat (the demo's kjv-4k with Nemotron's
#     prompt tokens, and a chat_template that renders Megatron's nemotron-nano-v2 format), and
#     convert it to a Hugging Face directory (mgt-ckpt-convert(1)): the "existing model";
#  2. before: its replies to three held-out verse beginnings (mgt-eval generate --chat: the
#     tokenizer's chat template with add_generation_prompt, greedy; a pretrained model does not
#     know the format, so it rambles until --max-new-tokens);
#  3. fine-tune it from the Hugging Face directory (--pretrained-checkpoint) on the shipped chat
#     set share/mgt/data/kjv-chat.jsonl.zst (system "Continue the verse.", user the first half of
#     a verse, assistant the rest; six conversations packed a line) with Megatron's SFT dataset:
#     --sft --sft-tokenizer-prompt-format nemotron-nano-v2, loss on the answers only, packed
#     conversations attending only within themselves, positions restarting per conversation;
#     with SFT_NP=2 (and mpirun) under tensor parallelism 2 with sequence parallelism;
#  4. after: the same prompts; the reply ends at the end-of-turn token <SPECIAL_12> (the chat
#     tokenizer's eos_token), so finish is "eod".
# Work in SFT_DIR (default sft/: the pretrained checkpoint pre, the Hugging Face directory hf, the
# fine-tuned ckpt, metrics *.jsonl, the replies before.jsonl and after.jsonl).  SFT_PRETRAIN_ITERS (600),
# SFT_ITERS (200), SFT_THREADS (0: all cores), SFT_NP (1) change the run.  About 2 minutes on 2 cores (1 min 37 s measured).
set -e
cd "$(dirname "$0")/.."
CT=share/mgt/tokenizers/kjv-4k-chat
TH="--threads ${SFT_THREADS:-0}"
NP=${SFT_NP:-1}
W=${SFT_DIR:-sft}
rm -rf "$W" && mkdir -p "$W/data"
echo "== 1. pretraining the tiny Llama on KJV, then converting it to Hugging Face"
bin/mgt-preprocess --input share/mgt/data/kjv.jsonl.zst --output-prefix $W/data/kjv \
	--tokenizer-type HuggingFaceTokenizer --tokenizer-model $CT --append-eod --workers 2 >/dev/null
bin/mgt-train --model tiny-llama --tokenizer-type HuggingFaceTokenizer --tokenizer-model $CT \
	--data-path $W/data/kjv_text_document --split 969,30,1 --max-position-embeddings 256 \
	--micro-batch-size 8 --global-batch-size 8 \
	--train-iters "${SFT_PRETRAIN_ITERS:-600}" --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 \
	--lr-decay-style cosine --weight-decay 0.1 --eval-interval 200 --eval-iters 4 --log-interval 100 \
	--save $W/pre --save-interval 100000 $TH --metrics-file $W/pretrain.jsonl 2>&1 | grep -E "validation loss|iteration +[0-9]+/|error" || true
bin/mgt-ckpt-convert --load-dir $W/pre --save-dir $W/hf
# held-out verses: from the chapters neither pretraining (969,30,1 split) nor the chat set trains on
cat >$W/prompts.txt <<'EOF'
And I saw a new heaven and a new earth: for the first heaven
He which testifieth these things saith, Surely I come quickly.
Blessed are they that do his commandments, that they may have right
EOF
ask() { # MODEL-FLAGS... > replies (JSONL)
	bin/mgt-eval generate "$@" $TH --chat --system "Continue the verse." --greedy --max-new-tokens 40 --output jsonl <$W/prompts.txt
}
show() { sed -e 's/.*"text":"\([^"]*\)","finish":"\([a-z]*\)".*/   -> \1   [\2]/' "$1"; }
echo
echo "== 2. before fine-tuning (mgt-eval generate --hf $W/hf --chat)"
ask --hf $W/hf >$W/before.jsonl
show $W/before.jsonl
echo
echo "== 3. fine-tuning on the chat set (--sft, nemotron-nano-v2 format, answer-only loss, packed)"
SFT="--model tiny-llama --pretrained-checkpoint $W/hf --tokenizer-type SFTTokenizer --tokenizer-model $CT
	--sft --sft-tokenizer-prompt-format nemotron-nano-v2 --data-path share/mgt/data/kjv-chat.jsonl.zst
	--split 98,2,0 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 8
	--train-iters ${SFT_ITERS:-200} --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 10 --lr-decay-style cosine
	--eval-interval 100 --eval-iters 8 --log-interval 50 --save $W/ckpt --save-interval 100000 $TH
	--metrics-file $W/sft.jsonl"
if [ "$NP" = 1 ]; then
	bin/mgt-train $SFT 2>&1 | grep -E "validation loss|iteration +[0-9]+/|error" || true
else
	mpirun -np "$NP" bin/mgt-train $SFT --tensor-model-parallel-size "$NP" --sequence-parallel 2>&1 |
		grep -E "validation loss|iteration +[0-9]+/|error" || true
fi
echo
echo "== 4. after fine-tuning (mgt-eval generate --load $W/ckpt --chat)"
ask --load $W/ckpt >$W/after.jsonl
show $W/after.jsonl
