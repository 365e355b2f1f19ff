#!/bin/sh
# mgt-eval on BERT and T5 checkpoints (TAP, run by prove; issue 46): tiny BERT, T5 and GPT trained
# two iterations without --eval-interval on KJV split into sentences (BertWordPieceCase):
#   - mgt-eval loss evaluates them (validation and test splits: eval_iters x global batch samples,
#     as Megatron sizes them), and --hf needs no --train-iters;
#   - a tokenizer given at evaluation whose vocabulary differs from the checkpoint's is refused
#     naming both (exit 4: logits, generate, loss), not run over the wrong ids;
#   - what a family cannot do is refused naming the family and the command (exit 6): BERT in
#     generate, perplexity, tasks and logits; T5 in perplexity, tasks and logits (no internal
#     message, no usage hint), while T5's generate runs;
#   - an empty prompt (WordPiece encodes it to [CLS] [SEP]) is bad input (exit 3), in generate
#     (--prompt and stdin) and logits;
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
VOCAB=$SHARE/tokenizers/bert/vocab.txt
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix wp --tokenizer-type BertWordPieceCase \
	--vocab-file "$VOCAB" --split-sentences --workers 2 --quiet >/dev/null 2>&1 ||
	{ echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
TRAIN="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 2 --log-interval 1
 --tokenizer-type BertWordPieceCase --vocab-file $VOCAB --data-path wp_text_sentence --split 949,50,1
 --device cpu --threads 2 --save-interval 2"
ok "a tiny BERT, 2 iterations, no --eval-interval" exits 0 "$BIN/mgt-train" --model-family bert $TRAIN --save bert
ok "a tiny T5, 2 iterations, no --eval-interval" exits 0 "$BIN/mgt-train" --model-family t5 $TRAIN \
	--decoder-seq-length 16 --save t5
ok "a tiny GPT with the same WordPiece tokenizer" exits 0 "$BIN/mgt-train" $TRAIN --save gpt
printf '{"text": "In the beginning God created"}\n' >texts.jsonl
E="$BIN/mgt-eval"

# loss: the samples of one evaluation (Megatron's eval_iters x global batch), not "no samples"
json_key() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
ok "BERT: loss, validation split, exit 0" exits 0 "$E" loss --load bert --eval-iters 2 --threads 2 --output bv.json
ok "  Megatron's block with the sop loss" grep -q "validation loss at iteration 2 on validation set | lm loss value: .* sop loss value" "$T/out"
ok "  2 x 4 samples from sample 0" test "$(json_key bv.json samples) $(json_key bv.json first_sample)" = "8 0"
ok "BERT: loss --eval-split test" exits 0 "$E" loss --load bert --eval-iters 2 --eval-split test --threads 2
ok "T5: loss, validation split, exit 0" exits 0 "$E" loss --load t5 --eval-iters 2 --threads 2 --output tv.json
ok "  2 x 4 samples" test "$(json_key tv.json samples)" = 8
ok "T5: loss --eval-split test" exits 0 "$E" loss --load t5 --eval-iters 1 --eval-split test --threads 2
ok "  on test set" grep -q "validation loss at iteration 2 on test set | lm loss value" "$T/out"
ok "GPT exported to Hugging Face" exits 0 "$BIN/mgt-ckpt-convert" --load-dir gpt --save-dir gpt-hf
ok "loss --hf without --train-iters" exits 0 "$E" loss --hf gpt-hf --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" \
	--data-path wp_text_sentence --split 949,50,1 --micro-batch-size 2 --global-batch-size 4 --eval-iters 1 --threads 2

# refused CMD ARGS...: exit 6, the message names the family and the command
refused() {
	fam=$1 cmd=$2; shift 2
	exits 6 "$E" "$cmd" --threads 2 "$@" && err_has "mgt-eval $cmd: .* is a $fam checkpoint (--model-family" &&
		! grep -q "Try 'mgt-eval --help'" "$T/err"
}
ok "BERT: generate refused (no next-token distribution), exit 6" refused BERT generate --load bert --prompt "In the"
ok "BERT: perplexity refused" refused BERT perplexity --load bert --texts texts.jsonl
ok "BERT: tasks refused" refused BERT tasks --load bert --task "$SHARE/tasks/kjv-choice.jsonl"
ok "BERT: logits refused" refused BERT logits --load bert --prompt "In the beginning"
ok "BERT: logits without a command refused" exits 6 "$E" --load bert --tokens "101 1130 102" --threads 2
ok "  the message says what evaluates it" err_has "mgt-eval loss"
ok "T5: perplexity refused (an encoder-decoder), exit 6" refused T5 perplexity --load t5 --texts texts.jsonl
ok "T5: tasks refused" refused T5 tasks --load t5 --task "$SHARE/tasks/kjv-choice.jsonl"
ok "T5: logits refused" refused T5 logits --load t5 --prompt "In the beginning"
ok "  the message says what evaluates it" err_has "'mgt-eval generate'"
ok "T5: generate runs" exits 0 "$E" generate --load t5 --prompt "In the beginning" --greedy --max-new-tokens 3 \
	--threads 2
ok "generate --prompt '' (WordPiece: [CLS] [SEP]): empty prompt, exit 3" exits 3 "$E" generate --load t5 --prompt "" \
	--max-new-tokens 2 --threads 2
ok "  named as --prompt 1" err_has "prompt 1: empty prompt"
ok "generate --prompt ' ': the same" exits 3 "$E" generate --load t5 --prompt " " --max-new-tokens 2 --threads 2
ok "generate, an empty stdin line: the same" sh -c "echo | '$E' generate --load t5 --max-new-tokens 2 --threads 2 \
	>/dev/null 2>'$T/err'; [ \$? = 3 ] && grep -q 'stdin line 1: empty prompt' '$T/err'"
ok "logits --prompt '' (a GPT with WordPiece): exit 3" exits 3 "$E" logits --load gpt --prompt "" --threads 2
ok "  the message says why" err_has "encodes to no tokens but the ones the tokenizer adds"

# another tokenizer than the checkpoint's: a 1,000-token vocabulary, GPT-2's BPE
head -1000 "$VOCAB" >v1000.txt
ok "logits --vocab-file (1,000 tokens) on a 30,522-token model: exit 4" exits 4 "$E" logits --load gpt \
	--prompt "In the beginning" --vocab-file v1000.txt --logits l.npy --threads 2
ok "  names both tokenizers and sizes" err_has "the tokenizer given, BertWordPieceCase (v1000.txt), has 1100 tokens but the checkpoint's, BertWordPieceCase (.*), has 30622"
ok "  no logits written" no_files l.npy
ok "logits --tokens with it: a note, ids only, over the checkpoint's vocabulary" sh -c "
	'$E' logits --load gpt --tokens '101 1130 102' --vocab-file v1000.txt --logits l.npy --threads 2 2>'$T/err' &&
	grep -q 'note: the tokenizer given' '$T/err' && $PY -c 'import sys; sys.exit(b\"(3, 30622)\" not in open(\"l.npy\", \"rb\").read(128))'"
ok "generate --tokenizer-type BertWordPieceLowerCase --vocab-file (1,000): exit 4" exits 4 "$E" generate --load t5 \
	--prompt "In" --tokenizer-type BertWordPieceLowerCase --vocab-file v1000.txt --threads 2
ok "generate --vocab-file (the same vocabulary elsewhere): runs" exits 0 "$E" generate --load t5 --prompt "In" \
	--vocab-file "$VOCAB" --max-new-tokens 2 --threads 2
ok "loss with GPT-2's BPE on a BERT: exit 4, not advice on the padding" exits 4 "$E" loss --load bert --eval-iters 1 \
	--threads 2 $GPT2
ok "  names both" err_has "the tokenizer given, GPT2BPETokenizer (.*), has 50257 tokens but the checkpoint's, BertWordPieceCase"
ok "  no --make-vocab-size-divisible-by advice" sh -c "! grep -q make-vocab-size-divisible-by '$T/err'"
done_testing
