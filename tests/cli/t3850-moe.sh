#!/bin/sh
# Mixture of Experts in mgt-train (TAP, run by prove):
#  1. the float64 PyTorch reference (tests/torch/moe_ref.py through parity.py) against mgt-train
#     for every router type: logits, loss, every gradient of iteration 1, routed experts and
#     probabilities of iteration 1, lm loss, grad norm, load-balancing and z losses of 6 AdamW
#     iterations, the expert bias after them (tolerance 1e-5); the harness itself fails wrong dumps;
#  2. layout invariance under mpirun: TP2 (SP), EP2 x DP2, EP2 x TP2, EP2 x PP2 x DP2 (distributed
#     optimizer), and EP2 x TP2 with input jitter, against one process, lm loss and
#     load_balancing_loss of 6 iterations within 1e-5;
#  3. the expert group's bytes per rank against the all-to-all volume of the routed rows;
#  4. resume: bitwise with the expert bias state, and across expert-parallel sizes.
# Tiers (lib.sh): the full tier adds the pre-softmax router (its top-k and z loss: the sigmoid
# case runs both in the quick tier) and the position drop policy with padding (capacity: the
# probs policy's case) against the reference, and TP2 and EP2 x TP2 without jitter (EP2 x TP2
# with jitter runs both paths in the quick tier), and the harness's own checks that parity.py
# fails MoE dumps with a wrong probability order, aux-loss scale or load-balancing report (the
# quick tier: a wrong expert-bias sign).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
REF=$ROOT/tests/torch
RUN="sh $ROOT/tests/mpirun.sh"
TRAIN=$BIN/mgt-train
small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
MOE="--model tiny-moe --disable-bias-linear"

# ---- 1. the float64 reference ----------------------------------------------------------------
if $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	SMALL="--set num_layers=2 --set hidden_size=64 --set seq_length=32 --set max_position_embeddings=32 --iters 2"
	FAKE="--preset tiny-llama $SMALL --set num_experts=4 --set moe_router_topk=2 --set moe_aux_loss_coeff=0.01"
	ok "parity.py passes an MoE dump written by the reference" sh -c "
		$PY '$REF/mgt_ref.py' fake-dump fake.h5 $FAKE && $PY '$REF/parity.py' --no-fp32 fake.h5 > fake.out ||
		{ sed 's/^/# /' fake.out; false; }"
	for p in moe-prob-order moe-aux-scale moe-lb-report moe-bias-sign; do
		[ $p = moe-bias-sign ] || full_only "parity.py fails an MoE dump with $p" || continue
		ok "parity.py fails an MoE dump with $p" sh -c "
			$PY '$REF/mgt_ref.py' fake-dump bad.h5 $FAKE --set moe_router_score_function=sigmoid \
				--set moe_router_enable_expert_bias=1 --set moe_router_topk=2 --perturb $p &&
			$PY '$REF/parity.py' --no-fp32 bad.h5 > bad.out; test \$? = 1"
	done
	PAR="$BPE --data-path kjv_text_document --split 969,30,1 --seq-length 32 --micro-batch-size 2 --global-batch-size 4
		--hidden-dropout 0 --attention-dropout 0 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 2 --lr-decay-style cosine
		--eval-interval 0 --log-interval 1 --threads 2 --seed 1234 --train-iters 6"
	# parity NAME FLAGS...: mgt-train with a debug dump, then parity.py (its table as comments)
	parity() {
		n=$1; shift
		"$TRAIN" $MOE $PAR --debug-dump "$n.h5" "$@" >"$n.log" 2>&1 || { echo "# mgt-train: exit $?"; tail -3 "$n.log"; return 1; }
		$PY "$REF/parity.py" --no-fp32 --threads 2 --label "$n" "$n.h5" >"$n.out" 2>&1
		r=$?
		sed 's/^/# /' "$n.out"
		return $r
	}
	ok "softmax top-2, aux_loss (tiny-moe) = reference" parity softmax
	full_only "pre-softmax top-3, z loss = reference" &&
		ok "pre-softmax top-3, z loss = reference" parity pre --moe-router-pre-softmax --moe-router-topk 3 --moe-z-loss-coeff 1e-3
	ok "sigmoid, expert bias, 4 groups (2 kept), scaling 2.5, gated shared expert, seq_aux_loss, z loss, layers [0,1,1,1], router fp32 = reference" \
		parity deepseek --num-experts 8 --moe-router-topk 4 --moe-router-score-function sigmoid \
		--moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 \
		--moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 64 \
		--moe-shared-expert-gate --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 \
		--moe-z-loss-coeff 1e-3 --moe-layer-freq "[0,1,1,1]" --moe-router-dtype fp32
	ok "capacity factor 0.5, drop policy probs = reference" parity cap --moe-expert-capacity-factor 0.5
	full_only "capacity factor 0.5, drop policy position, padded = reference" &&
		ok "capacity factor 0.5, drop policy position, padded = reference" parity pos --moe-expert-capacity-factor 0.5 \
		--moe-token-drop-policy position --moe-pad-expert-input-to-capacity
	ok "... tokens were dropped there (metrics: fewer kept copies than routed)" $PY -c "
import h5py, sys
e = h5py.File('cap.h5')['iter1/moe/layer_0/experts'][:]
print('# dropped copies in layer 0, iteration 1, micro-batch 1:', int((e < 0).sum()))
sys.exit(int((e < 0).sum() == 0))"
	ok "... the expert bias moved" $PY -c "
import h5py, sys
b = h5py.File('deepseek.h5')['final/decoder.layers.1.mlp.router.expert_bias'][:]
print('# expert bias of layer 1 after 6 iterations:', b)
sys.exit(int(abs(b).max() == 0))"
else
	skip "$PY lacks torch, h5py or numpy: no reference checks"
fi

# ---- 2. layout invariance --------------------------------------------------------------------
if ! command -v mpirun >/dev/null 2>&1; then
	skip "mpirun not found"
	done_testing
fi
LAY="$BPE --data-path kjv_text_document --split 969,30,1 --data-cache-path cache --seq-length 32 --micro-batch-size 2
	--global-batch-size 8 --lr 2e-3 --lr-warmup-iters 3 --eval-interval 0 --eval-iters 0 --log-interval 1 --threads 1
	--train-iters 6 --make-vocab-size-divisible-by 256"
# train NP NAME FLAGS...: 6 iterations, metrics NAME.jsonl
train() {
	np=$1 n=$2; shift 2
	set -- "$TRAIN" $MOE $LAY --metrics-file "$n.jsonl" "$@"
	if [ "$np" = 1 ]; then "$@" >"$n.out" 2>"$n.err" </dev/null
	else $RUN "$np" "$@" >"$n.out" 2>"$n.err" </dev/null; fi
	r=$?
	[ $r = 0 ] || { echo "# $n: exit $r"; grep -m3 error "$n.err" | sed 's/^/#   /'; }
	return $r
}
# same REF RUN [FROM]: lm loss and load_balancing_loss of every iteration (>= FROM) within 1e-5 relative
same() {
	$PY - "$@" <<'PY'
import json, sys
lo = int(sys.argv[3]) if len(sys.argv) > 3 else 1
def L(f): return {o["iteration"]: o for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o and o["iteration"] >= lo}
a, b = L(sys.argv[1]), L(sys.argv[2])
if sorted(a) != sorted(b): sys.exit(f"# iterations {sorted(b)}, expected {sorted(a)}")
w = {k: max(abs(a[i][k] - b[i][k]) / abs(a[i][k]) for i in a) for k in ("lm_loss", "load_balancing_loss")}
print(f"# {sys.argv[2]}: max relative difference, lm loss {w['lm_loss']:.2e}, load_balancing_loss {w['load_balancing_loss']:.2e}")
sys.exit(max(w.values()) > 1e-5)
PY
}
ok "one process: 6 iterations" train 1 one
full_only "TP2 (sequence parallel) = one process" && ok "TP2 (sequence parallel) = one process" eval 'train 2 tp2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same one tp2'
ok "EP2 x DP2 = one process (saving at iteration 3)" eval 'train 4 ep2dp2 --expert-model-parallel-size 2 --comm-log ep2dp2 --save ck2 --save-interval 3 && same one ep2dp2'
full_only "EP2 x TP2 (sequence parallel) = one process" && ok "EP2 x TP2 (sequence parallel) = one process" eval 'train 4 ep2tp2 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same one ep2tp2'
ok "EP2 x PP2 x DP2, distributed optimizer = one process" eval 'train 8 ep2pp2dp2 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer && same one ep2pp2dp2'
JIT="--moe-input-jitter-eps 0.1"
ok "input jitter: one process" train 1 jit1 $JIT
ok "... it changes the run (the last lm loss differs from the run without)" $PY -c "
import json, sys
L = lambda f: [o['lm_loss'] for o in map(json.loads, open(f)) if 'lm_loss' in o][-1]
sys.exit(int(L('jit1.jsonl') == L('one.jsonl')))"
ok "... EP2 x TP2 with jitter = one process (the noise does not depend on the layout)" eval \
	'train 4 jit4 $JIT --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same jit1 jit4'

# ---- 3. the expert group's bytes -------------------------------------------------------------
ok "EP2 x DP2: every rank's expert-group bytes = 4 (2h + 1)(sent + received) + 8 E (EP - 1) a dispatch + the norm's double; sent rows = received rows over the job" \
	$PY - ep2dp2 4 64 4 2 <<'PY'
import json, sys
name, n, h, E, EP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
worst, sent, recv, rows = 0.0, 0.0, 0.0, 0
for r in range(n):
    for o in map(json.loads, open(f"{name}.rank{r}.jsonl")):
        m = o["moe_rows"]
        # plus the gradient norm's expert part: one double all-reduced over the EP group
        want = 4 * (2 * h + 1) * (m["sent"] + m["received"]) + 8 * E * (EP - 1) * m["dispatches"] + 16 * (EP - 1) / EP
        worst = max(worst, abs(o["bytes"]["expert"] - want) / want)
        sent += m["sent"]; recv += m["received"]; rows += 1
print(f"# {rows} rank-iterations: worst relative difference {worst:.1e}; rows sent {sent:.0f}, received {recv:.0f}")
sys.exit(worst > 1e-12 or sent != recv or sent == 0)
PY

# ---- 4. resume -------------------------------------------------------------------------------
BIAS="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2"
# exact A B: lm loss, grad norm and load_balancing_loss text-identical on the iterations B logged
exact() {
	$PY - "$@" <<'PY'
import json, sys
def L(f): return {o["iteration"]: (repr(o["lm_loss"]), repr(o["grad_norm"]), repr(o["load_balancing_loss"]))
                  for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o}
a, b = L(sys.argv[1]), L(sys.argv[2])
sys.exit(not b or any(a.get(i) != v for i, v in b.items()))
PY
}
ok "expert bias: a run saving at iteration 3" train 1 full $BIAS --save ck --save-interval 3
ok "... the checkpoint holds the moved expert bias" $PY -c "
import h5py, glob, sys
for f in glob.glob('ck/iter_0000003/*.h5'):
    with h5py.File(f) as h:
        for k in h:
            if k.endswith('router.expert_bias') and abs(h[k][:]).max() > 0: sys.exit(0)
sys.exit(1)"
ok "... resumed at 3: iterations 4-6 bitwise (lm loss, grad norm, load_balancing_loss)" eval \
	'train 1 resumed $BIAS --load ck --ckpt-step 3 && exact full resumed'
ok "the EP2 x DP2 checkpoint resumed in one process (experts resharded): iterations 4-6 within 1e-5 of the one-process run" eval \
	'train 1 ep2to1 --load ck2 --ckpt-step 3 && same one ep2to1 4'
ok "... and under EP2 x TP2 (experts and TP pieces resharded): iterations 4-6 within 1e-5" eval \
	'train 4 ep2to22 --load ck2 --ckpt-step 3 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same one ep2to22 4'

# ---- 5. mgt-eval on an MoE checkpoint (the inference path with a key/value cache) ------------
EV="$BIN/mgt-eval"
P="464 995 11 428 318 257 1032 286 262 656" # ids of lib.sh small_bpe's 1100
ok "mgt-eval logits of the sigmoid + expert-bias checkpoint: exit 0" sh -c "'$EV' logits --load ck --tokens '$P' --logits ev.npy --threads 1 >ev.out 2>ev.err"
if $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	ok "... logits [10, 1100] equal the float64 reference's within 1e-5 (routing with the checkpoint's expert bias)" \
		$PY "$ROOT/tests/cli/eval_ref.py" ck 1100 "$P" ev.npy
fi
ok "generate --greedy 16 tokens with the cache = logits recomputing the prefix, token for token" sh -c "
	'$EV' generate --load ck --prompt 'And God said' --greedy --ignore-eos --max-new-tokens 16 --output jsonl --threads 1 --logits gen.npy >gen.out 2>gen.err &&
	'$EV' logits --load ck --prompt 'And God said' --max-new-tokens 16 --threads 1 --logits full.npy >full.out 2>full.err &&
	a=\$($PY -c 'import json,sys; print(\" \".join(map(str, json.loads(open(\"gen.out\").readline())[\"ids\"])))') &&
	b=\$(sed -n 's/^ids: //p' full.out) && echo \"# cache: \$a\" && test -n \"\$a\" -a \"\$a\" = \"\$b\""
ok "... and the logits each token was chosen from equal the full forward's within 1e-5" $PY -c "
import sys, numpy as np
g, f = np.load('gen.npy').astype(np.float64), np.load('full.npy').astype(np.float64)
e = np.abs(g - f[f.shape[0] - g.shape[0]:]).max() / np.abs(f).max() if g.shape[1] == f.shape[1] else np.inf
print('# %d steps: max difference / max |logit| = %.2e' % (g.shape[0], e))
sys.exit(int(not e <= 1e-5))"
done_testing
