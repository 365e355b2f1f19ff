#!/bin/sh
# Packed sequences against the float64 PyTorch reference (tests/torch/mgt_ref.py, parity.py, as
# t3000): logits, per-token loss and every gradient of iteration 1, then AdamW iterations, with
# the reference's attention masked block-diagonally from the dump's batch/seg_start:
#   - mgt-train --sft (tiny-llama: RoPE at each token's offset in its conversation, the THD path)
#     on a KJV chat set, several conversations a row;
#   - --reset-attention-mask with --reset-position-ids on KJV verses as documents, tiny-gpt2
#     (learned positions restarting) and tiny-llama (RoPE at the row's positions, as Megatron's
#     rotary embedding);
#   - hybrid models (tests/torch/mamba_ref.py): the Mamba layers' conv and SSM state restart at
#     each document start (Megatron's seq_idx), under --reset-attention-mask and --sft.
# Needs Debian's python3 with torch and h5py; skipped without them.
. "$(dirname "$0")/lib.sh"
REF=$ROOT/tests/torch
if ! $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	echo "1..0 # SKIP $PY lacks torch, h5py or numpy"
	exit 0
fi
cd "$T" || exit 1
THREADS=${MGT_TEST_THREADS:-2}
cp "$SHARE/tokenizers/kjv-4k-chat/tokenizer.json" tok.json # kjv-4k with Nemotron's prompt tokens (contrib/kjv-chat.py)
zstd -dcq "$SHARE/data/kjv.jsonl.zst" | head -20 | $PY -c '
import json, sys
chat, verses = open("chat.jsonl", "w"), open("verses.jsonl", "w")
for line in sys.stdin:
    vs = [v for v in json.loads(line)["text"].split("\n")[2:] if v.strip()]
    for v in vs:
        verses.write(json.dumps({"text": v}) + "\n")
    for i in range(0, len(vs) - 1, 2):
        msgs = []
        for v in vs[i:i + 2]:
            w = v.partition(" ")[2].split(" "); h = len(w) // 2
            msgs += [{"role": "system", "content": "Continue."}, {"role": "user", "content": " ".join(w[:h])},
                     {"role": "assistant", "content": " ".join(w[h:])}]
        chat.write(json.dumps({"messages": msgs}) + "\n")'
"$BIN/mgt-preprocess" --input verses.jsonl --output-prefix v --tokenizer-type HuggingFaceTokenizer \
	--tokenizer-model "$SHARE/tokenizers/kjv-4k" --append-eod --workers 2 --quiet >/dev/null 2>&1 ||
	{ echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
COMMON="--seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --hidden-dropout 0
	--attention-dropout 0 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 2 --lr-decay-style cosine --eval-interval 0
	--log-interval 1 --threads $THREADS --seed 1234 --device cpu"
parity() { # NAME ITERS -- MGT-TRAIN-FLAGS...: a dump, then parity.py against the float64 reference
	name=$1 iters=$2; shift 3
	"$BIN/mgt-train" $COMMON --train-iters "$iters" "$@" --debug-dump "$name.h5" >"$name.log" 2>&1 ||
		{ echo "# mgt-train: exit $?"; tail -5 "$name.log" | sed 's/^/#   /'; return 1; }
	$PY -c "import h5py, sys; sys.exit('batch/seg_start' not in h5py.File('$name.h5'))" ||
		{ echo "# $name.h5 has no batch/seg_start"; return 1; }
	$PY "$REF/parity.py" --threads "$THREADS" --label "$name" --no-fp32 "$name.h5" >"$name.out" 2>&1
	r=$?
	sed 's/^/# /' "$name.out"
	return $r
}
ok "--sft, tiny-llama (RoPE at the conversation offsets) = float64 reference" parity sft 4 -- --model tiny-llama \
	--sft --data-path chat.jsonl --split 100,0,0 --tokenizer-type SFTTokenizer --tokenizer-model tok.json
DOCS="--data-path v_text_document --split 100,0,0 --tokenizer-type HuggingFaceTokenizer
	--tokenizer-model $SHARE/tokenizers/kjv-4k --reset-attention-mask --reset-position-ids"
ok "--reset-attention-mask, tiny-gpt2 (learned positions restarting) = float64 reference" parity docs-gpt2 4 -- \
	--model tiny-gpt2 $DOCS
ok "--reset-attention-mask, tiny-llama (RoPE at the row's positions) = float64 reference" parity docs-llama 4 -- \
	--model tiny-llama $DOCS
ok "--reset-attention-mask, tiny-hybrid (the Mamba layers' conv and state restart at each document) = float64 reference" \
	parity docs-hybrid 4 -- --model tiny-hybrid $DOCS
ok "--sft, a hybrid M*-M (conversations packed, the states restarting) = float64 reference" parity sft-hybrid 4 -- \
	--model tiny-hybrid --hybrid-layer-pattern 'M*-M' --sft --data-path chat.jsonl --split 100,0,0 \
	--tokenizer-type SFTTokenizer --tokenizer-model tok.json
done_testing
