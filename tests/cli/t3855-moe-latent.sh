#!/bin/sh
# The latent MoE projection (--moe-latent-size; Megatron-Core moe_layer.py fc1_latent_proj /
# fc2_latent_proj, Nemotron-3's moe_latent_size) in mgt-train (TAP, run by prove):
#  1. the float64 reference's own latent layer (tests/torch/moe_ref.py) against its loop-by-loop
#     layer: outputs, routing, and gradients by central differences;
#  2. mgt-train against the float64 PyTorch reference through parity.py: logits, loss, every
#     gradient of iteration 1 (the two projections' included), routing, 6 AdamW iterations
#     (tolerance 1e-5), for a GPT MoE with a latent width below h and a NemotronH-style hybrid
#     (M*EM-E: squared ReLU experts, sigmoid router with expert bias, a shared expert) with one
#     above h;
#  3. layout invariance under mpirun: TP2 (SP), EP2 x DP2 and EP2 x TP2 against one process: lm
#     loss, load_balancing_loss and grad norm of 6 iterations within 1e-5, and the projections'
#     weights of the checkpoint saved at iteration 6 within 1e-5 (the projections are whole on
#     every rank and their gradients partial over TP: a missed TP reduction moves them by the
#     learning rate's order);
#  4. a checkpoint records moe_latent_size: a run without the flag is refused loading it, and
#     --use-checkpoint-args takes it;
#  5. bad input refused naming the flag, exit 2, before anything is written: a latent size
#     without --num-experts, a negative one, 0;
#  6. conversions of that GPT MoE checkpoint: to Hugging Face and GGUF refused naming the flag
#     (only NemotronH has latent projections: t4140 converts those); to Megatron-LM torch (TP2 x
#     EP2) and torch_dist (TP2) and back, every weight bit for bit, the independent reader
#     (tests/cli/megatron_ckpt.py, torch.load) finding the projections; the fixtures' Megatron
#     checkpoints (torch TP2 x EP2 x DP2; torch_dist TP2 x PP2 x DP2 with the distributed
#     optimizer: the projections' place in Megatron's parameter order) read bit for bit, Adam's
#     moments and the progress included.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
REF=$ROOT/tests/torch
RUN="sh $ROOT/tests/mpirun.sh"
TRAIN=$BIN/mgt-train
small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
MOE="--model tiny-moe --disable-bias-linear --moe-latent-size 24"
HYB="--model tiny-hybrid --hybrid-layer-pattern M*EM-E --num-experts 4 --moe-router-topk 2 --squared-relu
	--moe-latent-size 80 --moe-shared-expert-intermediate-size 32 --moe-router-score-function sigmoid
	--moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --moe-router-topk-scaling-factor 2.5
	--moe-aux-loss-coeff 1e-3"

# ---- 1, 2. the float64 reference -------------------------------------------------------------
if $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	ok "reference: latent layer = loop-by-loop layer (values; gradients by central differences)" sh -c "
		cd '$REF' && $PY -c '
import sys, mgt_ref, moe_ref
moe_ref.SELFCHECK_MOE = {k: v for k, v in moe_ref.SELFCHECK_MOE.items() if k.startswith(\"latent\")}
assert len(moe_ref.SELFCHECK_MOE) == 2
sys.exit(moe_ref.selfcheck(mgt_ref))' > '$T/self.out' 2>&1; r=\$?; sed 's/^/# /' '$T/self.out'; exit \$r"
	PAR="$BPE --data-path kjv_text_document --split 969,30,1 --seq-length 32 --micro-batch-size 2 --global-batch-size 4
		--hidden-dropout 0 --attention-dropout 0 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 2 --lr-decay-style cosine
		--eval-interval 0 --log-interval 1 --threads 2 --seed 1234 --train-iters 6"
	parity() {
		n=$1; shift
		"$TRAIN" $PAR --debug-dump "$n.h5" "$@" >"$n.log" 2>&1 || { echo "# mgt-train: exit $?"; tail -3 "$n.log"; return 1; }
		$PY "$REF/parity.py" --no-fp32 --threads 2 --label "$n" "$n.h5" >"$n.out" 2>&1
		r=$?
		sed 's/^/# /' "$n.out"
		return $r
	}
	ok "tiny-moe, latent 24 < h 64 (softmax top-2, SwiGLU experts) = reference" parity gpt $MOE
	ok "... the dump holds both projections with their shapes" $PY -c "
import h5py, sys
f = h5py.File('gpt.h5')
s = {k: f['grads/' + k].shape for k in ('decoder.layers.0.mlp.fc1_latent_proj.weight',
     'decoder.layers.0.mlp.fc2_latent_proj.weight', 'decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight')}
print('#', s)
sys.exit(list(s.values()) != [(24, 64), (64, 24), (256, 24)])"
	ok "hybrid M*EM-E, latent 80 > h 64 (sigmoid, expert bias, shared expert, squared ReLU) = reference" parity hyb $HYB
else
	skip "$PY lacks torch, h5py or numpy: no reference checks"
fi

# ---- 5. bad input ------------------------------------------------------------------------------
B="$BPE --data-path kjv_text_document --split 969,30,1 --seq-length 32 --micro-batch-size 2 --global-batch-size 4
	--train-iters 2 --threads 1"
# refused NAME WORD FLAGS...: exit 2, the message names WORD, no save directory or metrics file written
refused() {
	n=$1 w=$2; shift 2
	"$TRAIN" $B --save "bad_$n" --metrics-file "bad_$n.jsonl" "$@" >"bad_$n.out" 2>"bad_$n.err"
	r=$?
	sed 's/^/# /' "bad_$n.err" | head -2
	[ $r = 2 ] && grep -q -- "$w" "bad_$n.err" && [ ! -e "bad_$n" ] && [ ! -e "bad_$n.jsonl" ]
}
ok "--moe-latent-size without --num-experts: exit 2, naming the flag, nothing written" \
	refused noexp --moe-latent-size --model tiny-llama --moe-latent-size 32
ok "--moe-latent-size -3: exit 2, naming the flag" refused neg --moe-latent-size $MOE --moe-latent-size -3
ok "--moe-latent-size 0: exit 2, naming the flag" refused zero --moe-latent-size $MOE --moe-latent-size 0

# ---- 3, 4. layouts and checkpoints -------------------------------------------------------------
if ! command -v mpirun >/dev/null 2>&1; then
	skip "mpirun not found"
	done_testing
fi
LAY="$BPE --data-path kjv_text_document --split 969,30,1 --data-cache-path cache --seq-length 32 --micro-batch-size 2
	--global-batch-size 8 --lr 2e-3 --lr-warmup-iters 3 --eval-interval 0 --eval-iters 0 --log-interval 1 --threads 1
	--train-iters 6 --make-vocab-size-divisible-by 256 --save-interval 6"
train() {
	np=$1 n=$2; shift 2
	set -- "$TRAIN" $MOE $LAY --metrics-file "$n.jsonl" --save "ck_$n" "$@"
	if [ "$np" = 1 ]; then "$@" >"$n.out" 2>"$n.err" </dev/null
	else $RUN "$np" "$@" >"$n.out" 2>"$n.err" </dev/null; fi
	r=$?
	[ $r = 0 ] || { echo "# $n: exit $r"; grep -m3 error "$n.err" | sed 's/^/#   /'; }
	return $r
}
# same REF RUN: lm loss, load_balancing_loss and grad norm of every iteration, and the latent
# projections of the iteration-6 checkpoints, within 1e-5 relative
same() {
	$PY - "$@" <<'PY'
import glob, json, sys
import h5py, numpy as np
def L(f): return {o["iteration"]: o for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o}
a, b = L(sys.argv[1]), L(sys.argv[2])
if sorted(a) != sorted(b) or not a: sys.exit(f"# iterations {sorted(b)}, expected {sorted(a)}")
w = {k: max(abs(a[i][k] - b[i][k]) / abs(a[i][k]) for i in a) for k in ("lm_loss", "load_balancing_loss", "grad_norm")}
def W(run):
    out = {}
    for f in glob.glob(f"ck_{run}/iter_0000006/*.h5"):
        with h5py.File(f) as h:
            out.update({k: h[k][:] for k in h if "latent_proj" in k and not k.startswith("optimizer.")})
    return out
wa, wb = W(sys.argv[1]), W(sys.argv[2])
if len(wa) != 8 or sorted(wa) != sorted(wb): sys.exit(f"# latent tensors {sorted(wb)}, expected {sorted(wa)} (8)")
w["latent weights"] = max(np.linalg.norm(wa[k] - wb[k]) / np.linalg.norm(wa[k]) for k in wa)
print(f"# {sys.argv[2]}: max relative difference, " + ", ".join(f"{k} {v:.2e}" for k, v in w.items()))
sys.exit(int(max(w.values()) > 1e-5))
PY
}
ok "one process: 6 iterations" train 1 one
ok "TP2 (sequence parallel) = one process" eval 'train 2 tp2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same one tp2'
ok "EP2 x DP2 = one process" eval 'train 4 ep2dp2 --expert-model-parallel-size 2 && same one ep2dp2'
ok "EP2 x TP2 (sequence parallel) = one process" eval 'train 4 ep2tp2 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same one ep2tp2'
ok "the checkpoint's args record moe_latent_size 24" $PY -c "
import json, sys
a = json.load(open('ck_one/iter_0000006/metadata.json'))['args']
print('# moe_latent_size', a.get('moe_latent_size')); sys.exit(a.get('moe_latent_size') != 24)"
# resume NAME FLAGS...: tiny-moe without --moe-latent-size, loading ck_one, to iteration 7
resume() {
	n=$1; shift
	"$TRAIN" --model tiny-moe --disable-bias-linear $LAY --train-iters 7 --load ck_one --metrics-file "$n.jsonl" \
		"$@" >"$n.out" 2>"$n.err"
}
nolat() {
	resume nolat && { echo "# loaded"; return 1; }
	tail -2 nolat.err | sed 's/^/# /'; grep -q 'error.*moe_latent_size' nolat.err
}
ok "a run without --moe-latent-size is refused loading it (naming moe_latent_size)" nolat
ok "--use-checkpoint-args takes moe_latent_size: iteration 7 resumes" eval \
	"resume uca --use-checkpoint-args && grep -q 'moe_latent_size \.* 24' uca.err && grep -q '\"iteration\":7' uca.jsonl"
# ---- 6. conversions of the tiny-moe checkpoint ------------------------------------------------
# to Hugging Face or GGUF: no family but NemotronH (t4140) has latent projections: exit 3 / 2
ok "mgt-ckpt-convert to HF: exit 3, naming --moe-latent-size, nothing written" eval \
	'"$BIN/mgt-ckpt-convert" --load-dir ck_one --save-dir nohf 2>nohf.err; r=$?; sed "s/^/# /" nohf.err
	[ $r = 3 ] && grep -q -- --moe-latent-size nohf.err && [ ! -e nohf ]'
ok "mgt-export to GGUF: refused, naming --moe-latent-size, nothing written" eval \
	'"$BIN/mgt-export" --load-dir ck_one --output no.gguf 2>nogg.err; r=$?; sed "s/^/# /" nogg.err
	[ $r != 0 ] && grep -q -- --moe-latent-size nogg.err && [ ! -e no.gguf ]'
# Megatron-LM's formats (mlp.fc1_latent_proj / fc2_latent_proj, TELinear with _extra_state, after the
# router in the parameter order): mgt's writer and the fixtures' (tests/cli/megatron_ckpt.py), read back
if $PY -c 'import torch' 2>/dev/null; then
	MG="$PY $ROOT/tests/cli/megatron_ckpt.py"
	for f in "torch|--target-tensor-parallel-size 2 --target-expert-parallel-size 2" "torch_dist|--target-tensor-parallel-size 2"; do
		fmt=${f%%|*} fl=${f#*|}
		ok "to Megatron $fmt ($fl) and back: every weight bit for bit" eval \
			'"$BIN/mgt-ckpt-convert" --quiet --load-dir ck_one --save-dir mg-$fmt --save-format $fmt $fl &&
			"$BIN/mgt-ckpt-convert" --quiet --load-dir mg-$fmt --save-dir mg-$fmt.mgt &&
			$PY "$ROOT/tests/cli/ckpt_state.py" ck_one mg-$fmt.mgt --weights-only'
		ok "  the independent reader finds the projections [24, 64] and [64, 24]" $PY -c "
import subprocess, sys, numpy as np
subprocess.check_call(sys.argv[1:] + ['from-megatron', '--dir', 'mg-$fmt', '--out', 'mg-$fmt.npz'])
z = np.load('mg-$fmt.npz')
s = [z[k].shape for k in sorted(z.files) if 'latent_proj' in k and k.startswith('decoder.')]
print('#', len(s), set(s)); sys.exit(len(s) != 8 or set(s) != {(24, 64), (64, 24)})" $MG
	done
	for f in "torch --tp 2 --ep 2 --dp 2" "torch_dist --tp 2 --pp 2 --dp 2 --dist-opt"; do
		ok "Megatron fixture ($f) to mgt: weights, Adam moments and progress bit for bit" eval \
			'rm -rf fx fx.mgt && $MG to-megatron --mgt ck_one --out fx --format $f >fx.log 2>&1 &&
			"$BIN/mgt-ckpt-convert" --quiet --load-dir fx --save-dir fx.mgt && $PY "$ROOT/tests/cli/ckpt_state.py" ck_one fx.mgt'
	done
else
	skip "$PY lacks torch: no Megatron fixtures"
fi
done_testing
