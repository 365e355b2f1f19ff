#!/bin/sh
# mgt-train --model-family bert on the CPU (TAP, run by prove):
#   - KJV split into sentences and tokenized with BertWordPieceLowerCase (mgt-preprocess
#     --split-sentences); a tiny BERT trains 10 iterations, saving;
#   - iteration 11, resumed from that checkpoint with --debug-dump, against tests/torch/bert_ref.py
#     (a float64 PyTorch BertModel written from megatron/core/models/bert/bert_model.py): lm loss and sop loss within
#     1e-6, the grad norm and every gradient within 1e-5 (normwise relative); the same for
#     --bert-no-binary-head and --no-bias-gelu-fusion at iteration 1;
#   - the resumed iteration 11 equals the uninterrupted run's (bit for bit);
#   - the initial losses: lm loss near ln(padded vocabulary), sop loss near ln 2;
#   - a Hugging Face MegatronBert converted to mgt: its logits against the float64 model of the HF
#     tensors;
#   - mgt-eval loss: lm and sop losses, masked tokens (against mgt-dataset samples), accuracy;
#   - TP2 with sequence parallelism under mpirun against one process (full tier: PP2, PP2 with
#     interleaving (4 layers, virtual stages of 1), DP2 with the distributed optimizer, TP2 x PP2 x
#     DP2 on 8 ranks);
#   - what Megatron's BERT cannot run, refused with the reason.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
if ! $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	echo "1..0 # SKIP $PY lacks torch, h5py or numpy"
	exit 0
fi
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
TOK="--tokenizer-type BertWordPieceLowerCase --vocab-file $VOCAB"
ok "KJV split into sentences, WordPiece ids" exits 0 $BIN/mgt-preprocess --input "$SHARE/data/kjv.jsonl.zst" \
	--output-prefix kjv $TOK --split-sentences --workers 2
ok "KJV by chapter (document level)" exits 0 $BIN/mgt-preprocess --input "$SHARE/data/kjv.jsonl.zst" \
	--output-prefix doc $TOK --workers 2
TRAIN="$BIN/mgt-train --model-family bert --num-layers 2 --hidden-size 32 --num-attention-heads 4
 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
 --lr-warmup-iters 2 --lr-decay-style cosine --lr-decay-iters 20 --min-lr 1e-4 --weight-decay 0.01
 --clip-grad 1.0 --log-interval 1 --eval-interval 0 $TOK --data-path kjv_text_sentence --split 949,50,1
 --device cpu --threads 2 --hidden-dropout 0 --attention-dropout 0"
ok "11 iterations" exits 0 $TRAIN --train-iters 11 --metrics-file all.jsonl
ok "10 iterations, saving" exits 0 $TRAIN --train-iters 10 --save ck --save-interval 10
ok "iteration 11 from the checkpoint, --debug-dump" exits 0 $TRAIN --train-iters 11 --load ck --debug-dump d11.h5 \
	--metrics-file r.jsonl
ok "resumed iteration 11 = the uninterrupted run's" $PY - <<'PY'
import json
a = [json.loads(l) for l in open("all.jsonl")][-1]
b = [json.loads(l) for l in open("r.jsonl")][-1]
k = ("iteration", "lm_loss", "sop_loss", "grad_norm")
assert [a[x] for x in k] == [b[x] for x in k], (a, b)
PY
parity() { # parity DUMP: the float64 reference's table as TAP comments
	$PY "$ROOT/tests/torch/bert_ref.py" "$1" > "$1.out" 2>&1; r=$?
	sed 's/^/# /' "$1.out" | head -5
	[ $r = 0 ] || grep FAIL "$1.out" | sed 's/^/# /'
	return $r
}
ok "iteration 11 = float64 reference: lm, sop (1e-6), grad norm, every gradient (1e-5)" parity d11.h5
ok "--bert-no-binary-head, --no-bias-gelu-fusion: iteration 1" exits 0 $TRAIN --train-iters 1 --bert-no-binary-head \
	--no-bias-gelu-fusion --debug-dump d1.h5 --metrics-file one.jsonl
ok "  = float64 reference (no token types, pooler or sop loss; erf GELU)" parity d1.h5
ok "  no sop loss in the log line, no pooler in the model" sh -c "! grep -q 'sop loss' $T/out && \
	$PY -c \"import h5py, sys; f = h5py.File('d1.h5'); sys.exit('pooler' in f['params'] or 'binary_head' in f['params'])\""
ok "initial lm loss near ln(30592), sop loss near ln 2" $PY - <<'PY'
import json, math
a = json.loads(open("all.jsonl").readline())
assert abs(a["lm_loss"] - math.log(30592)) < 0.15 and abs(a["sop_loss"] - math.log(2)) < 0.1, a
PY
# a Hugging Face MegatronBertForPreTraining (tests/hf/make_tiny_bert.py, erf GELU) converted to mgt:
# the first micro-batch's logits against the float64 model of the HF tensors themselves
ok "a tiny HF MegatronBert -> mgt, KJV tokenized with its vocab.txt" sh -c "
	$PY '$ROOT/tests/hf/make_tiny_bert.py' hf --positions 32 >/dev/null &&
	$BIN/mgt-ckpt-convert --quiet --load-dir hf --save-dir ckhf &&
	$BIN/mgt-preprocess --input '$SHARE/data/kjv.jsonl.zst' --output-prefix kjvhf --tokenizer-type BertWordPieceLowerCase \
		--vocab-file hf/vocab.txt --split-sentences --quiet"
ok "  one iteration from it (--finetune), --debug-dump" exits 0 $BIN/mgt-train --load ckhf --use-checkpoint-args --finetune \
	--data-path kjvhf_text_sentence --split 949,50,1 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 \
	--train-iters 1 --lr 1e-4 --device cpu --threads 2 --hidden-dropout 0 --attention-dropout 0 --eval-interval 0 \
	--debug-dump dhf.h5
ok "  its logits = the float64 model of the HF tensors (1e-5), the padded vocabulary's 0" sh -c "
	$PY '$ROOT/tests/torch/bert_ref.py' dhf.h5 --hf hf >hf.out 2>&1; r=\$?; sed 's/^/# /' hf.out; exit \$r"

# mgt-eval loss: the lm and sop losses, the masked tokens (their count against the loss masks of
# the same samples from mgt-dataset samples) and the masked-token accuracy
ok "mgt-eval loss of the iteration-10 checkpoint" exits 0 $BIN/mgt-eval loss --load ck --eval-interval 1 --eval-iters 2 \
	--output e.json
ok "  lm loss, sop loss (block and JSON), masked tokens = the samples' loss masks, accuracy in [0, 1]" sh -c "
	grep -q 'sop loss value' $T/out && grep -q '^masked-token accuracy: ' $T/out &&
	$BIN/mgt-dataset samples kjv_text_sentence --dataset-type bert --vocab-file $VOCAB --seq-length 32 --split 949,50,1 \
		--num-samples 40,88,8 --samples 0:8 >samples.jsonl && $PY - <<'PY'
import json
e = json.load(open('e.json'))
n = sum(sum(o['loss_mask']) for o in map(json.loads, open('samples.jsonl')) if o.get('split') == 'valid' and 'idx' in o)
assert e['samples'] == 8 and e['masked_tokens'] == n > 0, (e, n)
assert 0 <= e['masked_token_accuracy'] <= 1 and e['sop_loss'] > 0 and e['lm_loss'] > 0, e
PY"

# layouts under mpirun (Megatron's rule, as GPT's: the same losses to rounding): TP2 with sequence
# parallelism in the quick tier (the vocab-parallel head, the all-reduced LM head gradient, the
# gathered [CLS] rows); TP2 x PP2 x DP2 with the distributed optimizer, 8 ranks, in the full tier
if command -v mpirun >/dev/null 2>&1; then
	# the padded vocabulary depends on TP (its dummy rows are in the softmax): unpadded for all layouts
	TRAIN="$TRAIN --make-vocab-size-divisible-by 1"
	ok "4 iterations, one process" exits 0 $TRAIN --train-iters 4 --metrics-file one.jsonl
	full && ok "4 iterations, one process, 4 layers" exits 0 $TRAIN --train-iters 4 --num-layers 4 --metrics-file one4.jsonl
	for lay in "tp2sp 2 one --tensor-model-parallel-size 2 --sequence-parallel" \
		"pp2 2 one --pipeline-model-parallel-size 2" "dp2 2 one --use-distributed-optimizer --global-batch-size 4" \
		"pp2vpp2 2 one4 --pipeline-model-parallel-size 2 --num-layers 4 --num-layers-per-virtual-pipeline-stage 1" \
		"tp2pp2dp2 8 one --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2 --use-distributed-optimizer"; do
		set -- $lay; name=$1 np=$2 ref=$3; shift 3
		[ $name != tp2sp ] && ! full_only "BERT $name under mpirun" && continue
		ok "BERT $name under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" $np $TRAIN --train-iters 4 "$@" \
			--metrics-file "$name.jsonl"
		ok "  lm and sop losses, grad norms within 1e-5 of one process's" $PY - "$name.jsonl" "$ref.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[2])]
b = [json.loads(l) for l in open(sys.argv[1])]
d = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("lm_loss", "sop_loss", "grad_norm"))
print("# %s: max relative difference to one process %.2e" % (sys.argv[1], d))
assert len(a) == len(b) == 4 and d < 1e-5, (a, b)
PY
	done
else
	skip "mpirun not installed"
fi

# Megatron's examples/bert/train_bert_340m_distributed.sh (its pretrain_bert.py arguments, tests/data/
# megatron/examples): sizes, paths and the impossible TP 8 x PP 16 shrunk, everything else as
# written (--fp16, no --tokenizer-type: pretrain_bert.py's BertWordPieceLowerCase), with
# --model-family bert where the script names pretrain_bert.py
ok "train_bert_340m_distributed runs whole at a tiny size (fp16: its loss scale from 2^32 skips the first steps; saving, evaluating)" sh -c "
	$PY '$ROOT/tests/cli/megatron_example_args.py' '$ROOT/tests/data/megatron/examples/train_bert_340m_distributed.args' \
		--data '$T/kjv_text_sentence' --vocab '$VOCAB' --merges none --tokenizer-json none --dir '$T/bert340m' >bert340m.run &&
	xargs -d '\n' -a bert340m.run $BIN/mgt-train --model-family bert --device cpu --threads 2 >bert340m.out 2>&1 &&
	test \$(grep -c ' iteration  *[1-4]/  *4 | .* loss scale: ' bert340m.out) = 4 && grep -q 'on test set | lm loss value: .* sop loss value' bert340m.out &&
	grep -q 'BertWordPieceLowerCase, pretrain_bert.py' bert340m.out && grep -q '^  fp16 \.* True' bert340m.out &&
	test -d bert340m/ckpt/iter_0000004" || sed 's/^/# /' bert340m.out | grep -v '^#   [a-z]' | tail -5

refuse() { # refuse WHAT FLAGS...
	w=$1; shift
	exits 2 $TRAIN --train-iters 1 "$@" && err_has "$w"
}
ok "a sequence longer than the position table refused naming the flags" refuse "longer than --max-position-embeddings" \
	--seq-length 64
ok "--calculate-per-token-loss refused" refuse "mean of each micro-batch" --calculate-per-token-loss
ok "--mock-data refused" refuse "sentence-level --data-path" --mock-data
ok "a blend refused" refuse "one dataset prefix" --data-path "1 kjv_text_sentence 1 kjv_text_sentence"
ok "a GPT tokenizer refused" refuse "WordPiece" --tokenizer-type NullTokenizer --vocab-size 512
ok "document-level data with the binary head refused naming the flags" sh -c \
	"$(echo $TRAIN) --train-iters 1 --data-path doc_text_document >/dev/null 2>$T/err; r=\$?; [ \$r = 3 ] && \
	grep -q -- '--split-sentences' $T/err && grep -q -- '--bert-no-binary-head' $T/err"
ok "--bert-binary-head (not a Megatron flag) refused naming --bert-no-binary-head" refuse "bert-no-binary-head turns it off" \
	--bert-binary-head
GPTRUN=$(echo $TRAIN | sed 's/--model-family bert //')
ok "--bert-no-binary-head in a GPT run refused naming both families (issue 46)" sh -c \
	"$GPTRUN --train-iters 1 --tokenizer-type NullTokenizer --vocab-size 512 --bert-no-binary-head >/dev/null 2>$T/err; \
	[ \$? = 2 ] && grep -q 'is a flag of BERT models (--model-family bert.*family is gpt' $T/err"
done_testing
