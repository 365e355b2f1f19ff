#!/bin/sh
# mgt-train against the PyTorch reference (tests/torch/mgt_ref.py, parity.py): logits, per-token
# loss and gradients of iteration 1, then 10 AdamW iterations (loss, grad norm, lr), for the
# GPT-2- and Llama-style tiny presets and bias variants, on KJV tokenized with GPT-2 BPE cut to
# 1,100 tokens (lib.sh small_bpe), micro-batch 2 of global batch 4 (gradient accumulation),
# dropout off; the two presets run 10 iterations with a float32 torch column beside mgt, the
# variants 4 to 6 iterations without.  Needs Debian's python3 with torch and h5py; skipped
# without them.  The parity tables go to the TAP output as comments.
# Tiers (lib.sh): the quick tier runs the two presets and two combined variants, which between
# them take every variant's feature against the reference (gpt2-combo: no linear biases but the
# QKV's, q/k LayerNorm, tanh GELU, clipping, weight decay, the inverse-square-root schedule with
# warmup init; llama-combo: QKV biases, q/k RMSNorm with weight decay on it, RoPE scaling, the
# WSD schedule), and the flips on them; the full tier also runs each variant alone, and checks
# that parity.py fails dumps with a wrong loss iteration or learning rate (the quick tier: a
# wrong QKV layout, and the flips); hybrid models (mamba_ref.py): the four layer kinds in one
# pattern for 11 iterations (quick; tiny-hybrid's M*M- in the full tier), and parity.py failing a
# hybrid dump whose Mamba layer reads in_proj's z and x swapped (quick) or its conv reversed (full), and the reference itself against an independent loop-by-loop
# forward (tests/torch/mgt_ref.py selfcheck: it checks the harness, which mgt's changes leave).
. "$(dirname "$0")/lib.sh"
REF=$ROOT/tests/torch
if ! $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	echo "1..0 # SKIP $PY lacks torch, h5py or numpy"
	exit 0
fi
TRAIN=$BIN/mgt-train
THREADS=${MGT_TEST_THREADS:-2}

# --- the harness itself: the reference against a loop-by-loop forward, synthetic dumps ---------
full_only "reference model = independent loop-by-loop forward; lr schedule by hand" &&
ok "reference model = independent loop-by-loop forward; lr schedule by hand" \
	sh -c "$PY '$REF/mgt_ref.py' selfcheck > '$T/selfcheck.out' 2>&1 || { sed 's/^/# /' '$T/selfcheck.out'; false; }"
SMALL="--set num_layers=2 --set hidden_size=64 --set seq_length=32 --set max_position_embeddings=32 --iters 2"
ok "parity.py passes a dump written by the fp32 reference (GQA, RoPE, SwiGLU)" sh -c "
	$PY '$REF/mgt_ref.py' fake-dump '$T/fake.h5' --preset tiny-llama $SMALL &&
	$PY '$REF/parity.py' --no-fp32 --threads $THREADS '$T/fake.h5' > '$T/fake.out' ||
	{ sed 's/^/# /' '$T/fake.out'; false; }"
for p in qkv-layout loss-iter lr; do
	[ $p = qkv-layout ] || full_only "parity.py fails a dump with a wrong $p" || continue
	ok "parity.py fails a dump with a wrong $p" sh -c "
		$PY '$REF/mgt_ref.py' fake-dump '$T/bad.h5' --preset tiny-gpt2 $SMALL --perturb $p &&
		$PY '$REF/parity.py' --no-fp32 --threads $THREADS '$T/bad.h5' > '$T/bad.out'; test \$? = 1"
done
for p in mamba-conv-direction mamba-zx-order; do
	[ $p = mamba-zx-order ] || full_only "parity.py fails a hybrid dump with a wrong $p" || continue
	ok "parity.py fails a hybrid dump with a wrong $p" sh -c "
		$PY '$REF/mgt_ref.py' fake-dump '$T/badm.h5' --preset tiny-hybrid --set seq_length=32 --iters 2 --perturb $p &&
		$PY '$REF/parity.py' --no-fp32 --threads $THREADS '$T/badm.h5' > '$T/badm.out'; test \$? = 1"
done

# --- mgt-train --------------------------------------------------------------------------------
if [ ! -x "$TRAIN" ]; then
	skip "mgt-train is not built"
	done_testing
fi
small_bpe || echo "# the small BPE could not be written"
ok "KJV dataset (GPT-2 BPE, its first 843 merges)" $BIN/mgt-preprocess --input "$SHARE/data/kjv.jsonl.zst" \
	--output-prefix "$T/kjv" $BPE --append-eod --workers 2 --quiet
RUN="--data-path $T/kjv_text_document --split 969,30,1 $BPE --seq-length ${MGT_TEST_SEQ:-32} --micro-batch-size 2 --global-batch-size 4
	--hidden-dropout 0 --attention-dropout 0 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 2
	--lr-decay-style cosine --eval-interval 0 --log-interval 1 --threads $THREADS --seed 1234"

# parity NAME ITERS PARITY-FLAGS -- MGT-TRAIN-FLAGS...: train ITERS iterations with a debug dump,
# compare with the reference
parity() {
	name=$1 iters=$2 pflags=$3; shift 4
	$TRAIN $RUN --train-iters "$iters" "$@" --debug-dump "$T/$name.h5" --metrics-file "$T/$name.jsonl" \
		>"$T/$name.log" 2>&1
	r=$?
	if [ $r != 0 ]; then
		echo "# mgt-train $*: exit $r"; tail -5 "$T/$name.log" | sed 's/^/#   /'
		return 1
	fi
	$PY "$REF/parity.py" --threads "$THREADS" --label "$name" $pflags "$T/$name.h5" >"$T/$name.out" 2>&1
	r=$?
	sed 's/^/# /' "$T/$name.out"
	return $r
}
ok "tiny-gpt2 (LayerNorm, GELU, learned positions, tied, biases) = reference" \
	parity tiny-gpt2 10 "" -- --model tiny-gpt2
ok "tiny-llama (GQA, SwiGLU, RMSNorm, RoPE, untied, no biases) = reference" \
	parity tiny-llama 10 "" -- --model tiny-llama
# hybrid models (issue 48): the four layer kinds (Mamba-2, attention, MLP, MoE) in one pattern, 11
# iterations (quick tier); tiny-hybrid's own M*M- (full tier)
ok "hybrid M*-EM* (Mamba-2, attention, MLP, MoE of 4 experts top-2; squared ReLU), 11 iterations = reference" \
	parity hybrid-4kinds 11 "" -- --model tiny-hybrid --hybrid-layer-pattern 'M*-EM*' --num-experts 4 \
	--moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --squared-relu
full_only "tiny-hybrid (M*M-) = reference" && ok "tiny-hybrid (M*M-) = reference" \
	parity tiny-hybrid 10 "" -- --model tiny-hybrid
# the variants combined (quick tier), then alone (full tier)
ok "tiny-gpt2 combined: no linear biases but the QKV's, q/k LayerNorm, tanh GELU, clipping, weight decay, inverse-sqrt = reference" \
	parity gpt2-combo 6 --no-fp32 -- --model tiny-gpt2 --disable-bias-linear --add-qkv-bias --qk-layernorm --openai-gelu \
	--clip-grad 0.05 --weight-decay 0.1 --lr-decay-style inverse-square-root --lr-warmup-init 1e-4
ok "tiny-llama combined: QKV biases, q/k RMSNorm with weight decay, RoPE scaling, WSD = reference" \
	parity llama-combo 6 --no-fp32 -- --model tiny-llama --add-qkv-bias --qk-layernorm --norm-epsilon 1e-6 \
	--apply-wd-to-qk-layernorm --weight-decay 1.0 --lr 3e-3 --use-rope-scaling --rope-scaling-factor 32 \
	--rope-scaling-original-max-position-embeddings 64 --lr-decay-style WSD --lr-wsd-decay-iters 4 --lr-wsd-decay-style minus_sqrt
# variant DESC NAME ITERS -- FLAGS...: one variant alone against the reference (full tier)
variant() { d=$1 n=$2 i=$3; shift 3; full_only "$d" && ok "$d" parity "$n" "$i" --no-fp32 "$@"; }
variant "tiny-gpt2 --disable-bias-linear = reference" gpt2-nobias 4 -- --model tiny-gpt2 --disable-bias-linear
variant "tiny-gpt2 --disable-bias-linear --add-qkv-bias = reference" gpt2-qkvbias 4 -- --model tiny-gpt2 --disable-bias-linear --add-qkv-bias
variant "tiny-llama --add-qkv-bias (Qwen2-style) = reference" llama-qkvbias 4 -- --model tiny-llama --add-qkv-bias
variant "tiny-gpt2, clipping active (--clip-grad 0.05), weight decay 0.1, linear decay = reference" gpt2-clip 6 -- --model tiny-gpt2 --clip-grad 0.05 --weight-decay 0.1 --lr-decay-style linear
variant "tiny-gpt2, inverse-square-root schedule with warmup init = reference" gpt2-isqrt 4 -- --model tiny-gpt2 --lr-decay-style inverse-square-root --lr-warmup-init 1e-4
variant "tiny-llama, WSD schedule (minus_sqrt anneal over 4 iterations), min-lr = reference" llama-wsd 4 -- --model tiny-llama --lr-decay-style WSD --lr-wsd-decay-iters 4 --lr-wsd-decay-style minus_sqrt
# Converted Hugging Face models: Qwen3's q/k RMSNorm, GPT-2's gelu_new with q/k LayerNorm (biases),
# Llama 3.1 RoPE scaling (original length 64: for head dim 16 and base 500000 that puts one
# frequency in each band, high, smoothed, and scaled), weight decay on the q/k norms.
variant "tiny-llama --qk-layernorm (Qwen3-style q/k RMSNorm) = reference" llama-qkln 4 -- --model tiny-llama --qk-layernorm --norm-epsilon 1e-6
variant "tiny-gpt2 --qk-layernorm (LayerNorm with biases) --openai-gelu = reference" gpt2-qkln-ogelu 4 -- --model tiny-gpt2 --qk-layernorm --openai-gelu
variant "tiny-llama --use-rope-scaling (factor 8, 1..4, original length 64) = reference" llama-ropescale 4 -- --model tiny-llama --use-rope-scaling --rope-scaling-original-max-position-embeddings 64
variant "tiny-llama --qk-layernorm --apply-wd-to-qk-layernorm --weight-decay 1 --lr 3e-3 = reference" llama-qkln-wd 4 -- --model tiny-llama --qk-layernorm --apply-wd-to-qk-layernorm --weight-decay 1.0 --lr 3e-3 --use-rope-scaling --rope-scaling-factor 32 --rope-scaling-original-max-position-embeddings 64
# flip NAME KEY: the dump NAME with boolean argument KEY turned off must fail parity (exit 1: the
# feature changed mgt's numbers beyond the tolerance)
flip() {
	cp "$T/$1.h5" "$T/flip.h5" || return 1
	$PY - "$T/flip.h5" "$2" <<'EOF_PY' || { echo "# cannot turn $2 off in $1.h5"; return 1; }
import h5py, json, sys
f = h5py.File(sys.argv[1], "r+")
k = "json" if "json" in f.attrs else "metadata"
v = f.attrs[k]
m = json.loads(v.decode() if isinstance(v, bytes) else str(v))
a = m.get("args", m)
assert a[sys.argv[2]] is True, sys.argv[2]
a[sys.argv[2]] = False
f.attrs[k] = json.dumps(m)
f.close()
EOF_PY
	$PY "$REF/parity.py" --no-fp32 --threads "$THREADS" "$T/flip.h5" >"$T/flip.out" 2>&1
	r=$?
	grep -E "FAIL" "$T/flip.out" | head -3 | sed 's/^/# /'
	test $r = 1
}
ok "parity.py fails the rope-scaled dump replayed without the scaling" flip llama-combo use_rope_scaling
ok "parity.py fails the --openai-gelu dump replayed with erf's GELU" flip gpt2-combo openai_gelu
ok "parity.py fails the --apply-wd-to-qk-layernorm dump replayed without it" flip llama-combo apply_wd_to_qk_layernorm
ok "metrics file: one JSON object per iteration with lm_loss, lr, grad_norm" $PY -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "lm_loss" in r]
assert [r["iteration"] for r in rows] == list(range(1, 11)), rows
assert all(k in r for r in rows for k in ("lr", "grad_norm", "tokens_per_s")), rows[0]
' "$T/tiny-gpt2.jsonl"
done_testing
