#!/bin/sh
# mgt-eval against the float64 PyTorch reference (tests/cli/eval_ref.py: tests/torch/mgt_ref.py
# built from the checkpoint's metadata.json args and its weights read with h5py through model.h5):
# logits within 1e-5 of the largest reference logit and greedy ids equal to the reference's
# argmax chain, for a GPT-2-style model (learned positions, LayerNorm, GELU, biases, tied
# output) and a Llama-style one (RoPE, RMSNorm, SwiGLU, GQA, no biases, untied) saved by a
# TP2 x PP2 job; that checkpoint re-saved by one process gives the same logits, byte for byte;
# padding after the input changes no logit; RoPE runs past max_position_embeddings, learned
# positions do not; bad input is refused with the documented exit statuses and messages.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
if ! $PY -c 'import h5py, numpy, torch' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 lacks h5py, numpy or torch"; exit 0
fi
EV=$BIN/mgt-eval
REF="$PY $ROOT/tests/cli/eval_ref.py"
MOCK="--mock-data --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --log-interval 100 --threads 1 --device cpu"
# train OUT NAME [flags]: train with mgt-train (log in NAME.log)
train() { _name=$1; shift; "$@" >"$_name.log" 2>&1 </dev/null || { echo "# $_name: exit $?"; tail -3 "$_name.log" | sed 's/^/#   /'; return 1; }; }
# to NAME CMD...: CMD with stdout in NAME.out, stderr in NAME.err
to() { _n=$1; shift; "$@" >"$_n.out" 2>"$_n.err" || { echo "# exit $?: $(head -c 300 "$_n.err")"; return 1; }; }
new_ids() { sed -n 's/^ids: //p' "$1"; }
# relclose A.npy B.npy ROWS TOL: rows [0, ROWS) of A and B within TOL x max |A|
relclose() {
	$PY - "$@" <<'PY'
import sys, numpy as np
a, b, n, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
e = np.abs(a[:n].astype(np.float64) - b[:n]).max() / np.abs(a[:n]).max()
print("# first %d rows: max difference / max |logit| = %.2e (tolerance %.0e)" % (n, e, tol))
sys.exit(not (a.shape[1] == b.shape[1] and e <= tol))
PY
}

# ---- GPT-2 style, GPT-2 tokenizer, one process ----
ok "mgt-train saves a tiny-gpt2 checkpoint (GPT-2 tokenizer, 4 iterations)" \
	train g "$BIN/mgt-train" --model tiny-gpt2 $GPT2 $MOCK --train-iters 4 --lr 1e-2 --lr-decay-style constant \
	--save g --save-interval 4
P="15496 995 11 428 318 257 1332 286 262 6556"
ok "mgt-eval --tokens --logits exits 0" to a "$EV" --load g --tokens "$P" --logits a.npy --threads 1
ok "it prints the input ids and no new ones" test "$(sed -n 's/^prompt: //p' a.out)" = "$P" -a "$(new_ids a.out)" = ""
ok "(a) logits [10, 50257] equal the float64 reference's within 1e-5" $REF g 50257 "$P" a.npy
ok "(b) mgt-eval --max-new-tokens 8 exits 0" to b "$EV" --load g --tokens "$P" --max-new-tokens 8 --logits b.npy
ok "(b) 8 greedy ids, each the reference's argmax, logits of all 17 positions fed within 1e-5" \
	$REF g 50257 "$P" b.npy "$(new_ids b.out)"
ok "(b) the reference check fails on a wrong continuation" sh -c "! $REF g 50257 '$P' b.npy '$(new_ids b.out | awk '{ $3 = ($3 + 1) % 50257; print }')' >/dev/null"
ok "padding after the input (a 17-position model) changes none of the first 10 rows' logits" relclose a.npy b.npy 10 1e-5
ok "the text line is the new ids decoded" test "$(sed -n 's/^text: //p' b.out)" = \
	"$("$BIN/mgt-tokenize" $GPT2 --decode "$(new_ids b.out)")"
ok "--prompt encodes with the checkpoint's tokenizer (GPT-2: 'Hello world' is 15496 995)" \
	sh -c "'$EV' --load g --prompt 'Hello world' --threads 1 | grep -qx 'prompt: 15496 995'"
"$EV" --load g --prompt "Hello world, this is a test of the" --max-new-tokens 3 --threads 1 >c.out 2>c.err
ok "--prompt continues like --tokens of the same ids" test "$(new_ids c.out)" = \
	"$("$EV" --load g --tokens "$(sed -n 's/^prompt: //p' c.out)" --max-new-tokens 3 --threads 1 | sed -n 's/^ids: //p')"

# the checkpoint's own copies of the tokenizer files are used: the recorded paths gone, all works
cp -R g moved
sed -i "s|$SHARE/tokenizers/gpt2/vocab.json|$T/no/vocab.json|g" moved/iter_0000004/metadata.json
$PY "$ROOT/tests/cli/ckpt_rehash.py" moved/iter_0000004
ok "recorded tokenizer paths gone: the checkpoint's copies serve --prompt" exits 0 "$EV" --load moved --prompt "Hello"
ok "... from another directory" sh -c "cd / && '$EV' --load '$T/moved' --prompt Hello --threads 1 >/dev/null 2>&1"
# the copies gone too (a checkpoint from before they were saved): ids still work, text does not
cp -R moved gone
rm -r gone/iter_0000004/tokenizer
$PY - gone/iter_0000004/metadata.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); del m["tokenizer"]["files"]; json.dump(m, open(sys.argv[1], "w"))
PY
$PY "$ROOT/tests/cli/ckpt_rehash.py" gone/iter_0000004
ok "tokenizer files missing: --tokens still runs (exit 0)" exits 0 "$EV" --load gone --tokens "$P" --max-new-tokens 8
ok "... with the same ids" test "$(new_ids "$T/out")" = "$(new_ids b.out)"
ok "... says the tokenizer is missing, naming the file" err_has "$T/no/vocab.json"
ok "... and prints no text line" sh -c "! grep -q '^text:' '$T/out'"
ok "tokenizer files missing: --prompt exits 4" exits 4 "$EV" --load gone --prompt "Hello"
ok "... naming the file" err_has "$T/no/vocab.json"
ok "--vocab-file points at the files elsewhere" exits 0 "$EV" --load gone --prompt "Hello world" \
	--vocab-file "$SHARE/tokenizers/gpt2/vocab.json"

# ---- Llama style, saved by TP2 x PP2 (mpirun), padded vocabulary 1280 (TP1 alone pads to 1152) ----
NULL="--tokenizer-type NullTokenizer --vocab-size 1100"
Q="5 17 1099 0 42 7 7 7 300"
if command -v mpirun >/dev/null 2>&1; then
	ok "(c) mpirun -np 4 mgt-train tiny-llama TP2 PP2 saves a checkpoint" \
		train l4 sh "$ROOT/tests/mpirun.sh" 4 "$BIN/mgt-train" --model tiny-llama $NULL $MOCK --train-iters 4 \
		--lr 1e-2 --lr-decay-style constant --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
		--save l4 --save-interval 4
	ok "(c) mgt-eval of the TP2 x PP2 checkpoint, 40 new tokens" to l4 "$EV" --load l4 --tokens "$Q" \
		--max-new-tokens 40 --logits l4.npy --threads 1
	ok "(c) logits [48, 1100] and greedy ids equal the float64 reference's (RoPE, RMSNorm, SwiGLU, GQA)" \
		$REF l4 1100 "$Q" l4.npy "$(new_ids l4.out)"
	# one process loads it and saves it again with lr 0: the same weights under TP1 (checked)
	ok "(c) mgt-train --finetune --lr 0 re-saves it from one process" train l1 "$BIN/mgt-train" --model tiny-llama \
		$NULL $MOCK --make-vocab-size-divisible-by 256 --train-iters 1 --lr 0 --load l4 --finetune --save l1 --save-interval 1
	ok "(c) ... with the same weights (h5py)" $PY -c "
import h5py, numpy as np, sys
a, b = h5py.File('l4/iter_0000004/model.h5', 'r'), h5py.File('l1/iter_0000001/model.h5', 'r')
ks = [k for k in a if not k.startswith('optimizer.')]
sys.exit(not (sorted(ks) == sorted(k for k in b if not k.startswith('optimizer.')) and all(np.array_equal(a[k][()], b[k][()]) for k in ks)))"
	ok "(c) the TP1 checkpoint gives the same logits (bytes) and ids as the TP2 x PP2 one" sh -c "
		'$EV' --load l1 --tokens '$Q' --max-new-tokens 40 --logits l1.npy --threads 1 >l1.out 2>l1.err &&
		cmp l4.npy l1.npy && cmp l4.out l1.out"
	ok "RoPE: 9 + 125 new tokens, past max_position_embeddings 128, equal the reference's" sh -c "
		'$EV' --load l4 --tokens '$Q' --max-new-tokens 125 --logits long.npy --threads 1 >long.out 2>long.err &&
		$REF l4 1100 '$Q' long.npy \"\$(sed -n 's/^ids: //p' long.out)\""
else
	skip "(c) TP2 x PP2 checkpoint: mpirun not found"
fi

# ---- errors ----
ok "no --load: exit 2" exits 2 "$EV" --tokens "1 2"
ok "... naming --load" err_has "--load"
ok "--tokens and --prompt together: exit 2" exits 2 "$EV" --load g --tokens 1 --prompt x
ok "a missing checkpoint directory: exit 6" exits 6 "$EV" --load "$T/nope" --tokens "1 2"
ok "... naming it" err_has "$T/nope"
mkdir empty
ok "a directory without a tracker: exit 6" exits 6 "$EV" --load empty --tokens "1 2"
ok "... naming the tracker" err_has "latest_checkpointed_iteration.txt"
ok "--ckpt-step of an iteration not saved: exit 6" exits 6 "$EV" --load g --ckpt-step 3 --tokens "1 2"
ok "... naming it" err_has "ckpt-step 3"
ok "a token id outside the vocabulary: exit 3" exits 3 "$EV" --load g --tokens "1 50257"
ok "... naming the id and the vocabulary" err_has "token 50257 (position 1) is outside the vocabulary \[0, 50257)"
ok "a negative token id: exit 3" exits 3 "$EV" --load g --tokens "-1"
ok "a token that is not a number: exit 2" exits 2 "$EV" --load g --tokens "1 x2"
ok "... naming it" err_has "'x2' is not a token id"
ok "learned positions: 10 + 120 new tokens (129 positions > 128): exit 2" \
	exits 2 "$EV" --load g --tokens "$P" --max-new-tokens 120
ok "... naming max_position_embeddings" err_has "more than the 128 learned position embeddings"
ok "--device bogus: exit 2" exits 2 "$EV" --load g --tokens 1 --device bogus
ok "--logits into a missing directory: exit 1" exits 1 "$EV" --load g --tokens 1 --logits "$T/no/x.npy"
ok "... and no file left" no_files "$T/no"
cp -R g bad
f=$(ls bad/iter_0000004/model_tp*.h5 | head -1)
head -c 5000 "g/iter_0000004/${f##*/}" >"$f"
ok "a damaged checkpoint (a shard truncated): exit 6" exits 6 "$EV" --load bad --tokens 1
ok "... naming the shard" err_has "${f##*/}"
done_testing
