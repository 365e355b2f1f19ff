#!/bin/sh
# Context parallelism in mgt-train (TAP, run by prove):
#  1. layout invariance under mpirun: CP2, CP2 x DP2, CP2 x TP2 (sequence parallel), CP4 and
#     CP2 x PP2 x DP2 (distributed optimizer), for --cp-comm-type p2p and allgather, and for a2a
#     CP2, CP2 x DP2, CP2 x PP2 x DP2 and CP4 (with 4 query groups), against one
#     process: lm loss of 10 iterations of tiny-llama (RoPE, GQA) within 1e-5 relative, with
#     attention and hidden dropout on (their masks are indexed by global positions); and
#     tiny-gpt2 (learned position embeddings) under CP2;
#  2. every rank's bytes per group against the analytic volume (tests/cli/comm_volume.py: the
#     context group's ring or all-gather, the gradients over the data x context group);
#  3. selective and full recomputation under CP2 bitwise equal to the runs without; a bitwise
#     resume under CP2, and the CP2 checkpoint loaded by one process;
#  4. Mixture of Experts under CP (the router's statistics and losses over the whole sequence):
#     CP2 x EP2 and CP2 x TP2 (sequence parallel) against one process, with the sigmoid router, the
#     expert bias, seq_aux_loss, z loss, input jitter and dropout: lm loss, seq_load_balancing_loss
#     and z_loss within 1e-5;
#  5. the errors: a sequence length not divisible by 2 x CP, the a2a kinds, a per-layer list of
#     kinds, MoE token dropping with CP.
# Tiers (lib.sh): the quick tier runs p2p under CP2, CP2 x TP2, CP4 and CP2 x PP2 x DP2 (whose
# data-context group is CP2 x DP2's), allgather under CP2 and CP2 x TP2, a2a under CP2 and CP4;
# the full tier adds CP2 x DP2 for all three kinds, allgather's CP4 and CP2 x PP2 x DP2 and a2a's
# CP2 x PP2 x DP2.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
TRAIN=$BIN/mgt-train
small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
MODEL=tiny-llama
LAY="$BPE --data-path kjv_text_document --split 969,30,1 --data-cache-path cache --seq-length 64
	--micro-batch-size 2 --global-batch-size 4 --lr 2e-3 --lr-warmup-iters 3 --eval-interval 0 --eval-iters 0
	--log-interval 1 --threads 1 --train-iters 10 --make-vocab-size-divisible-by 256 --hidden-dropout 0.1
	--attention-dropout 0.1"
VOL="$PY $ROOT/tests/cli/comm_volume.py $SHARE/models/tiny-llama.json"
# train NP NAME FLAGS...: 10 iterations of $MODEL, metrics NAME.jsonl, per-rank bytes NAME.rank*.jsonl
train() {
	np=$1 n=$2; shift 2
	set -- "$TRAIN" --model $MODEL $LAY --metrics-file "$n.jsonl" --comm-log "$n" "$@"
	if [ "$np" = 1 ]; then "$@" >"$n.out" 2>"$n.err" </dev/null
	else $RUN "$np" "$@" >"$n.out" 2>"$n.err" </dev/null; fi
	r=$?
	[ $r = 0 ] || { echo "# $n: exit $r"; grep -m3 -i error "$n.err" | sed 's/^/#   /'; }
	return $r
}
# same REF RUN [FROM]: lm loss of every iteration (>= FROM) within 1e-5 relative
same() {
	$PY - "$@" <<'PY'
import json, sys
lo = int(sys.argv[3]) if len(sys.argv) > 3 else 1
def L(f): return {o["iteration"]: o["lm_loss"] for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o and o["iteration"] >= lo}
a, b = L(sys.argv[1]), L(sys.argv[2])
if not a or sorted(a) != sorted(b): sys.exit(f"# iterations {sorted(b)}, expected {sorted(a)}")
w = max(abs(a[i] - b[i]) / abs(a[i]) for i in a)
print(f"# {sys.argv[2]}: {len(a)} iterations, max relative difference of the lm loss {w:.2e}")
sys.exit(w > 1e-5)
PY
}
if ! command -v mpirun >/dev/null 2>&1; then
	skip "mpirun not found"
	done_testing
fi

# ---- 1 and 2. layout invariance and bytes ----------------------------------------------------
ok "one process: 10 iterations" train 1 one
ok "... dropout is on (a run without it differs)" eval 'train 1 nodrop --hidden-dropout 0 --attention-dropout 0 && ! same one nodrop 2>/dev/null >/dev/null'
COMMON="mbs=2 gbs=4 seq=64 vocab=1280" # lib.sh small_bpe: 1100 padded to 256 (128 x TP2)
# layout NP NAME KIND KEYS FLAGS...: the run equals one process and its bytes the analytic ones
# (KEYS: comm_volume.py's layout keys)
layout() {
	np=$1 n=$2 kind=$3 keys=$4; shift 4
	train "$np" "$n" --cp-comm-type "$kind" "$@" && same one "$n" && $VOL "$n" "$np" $COMMON $keys cpcomm="$kind"
}
# lay DESC NP NAME KIND KEYS FLAGS...: ok DESC layout ..., except that the quick tier runs, for p2p,
# CP2, CP2 x TP2, CP4 and CP2 x PP2 x DP2 (which has the data-context group of CP2 x DP2), allgather
# CP2 and CP2 x TP2, a2a CP2 (the others a skip)
lay() {
	d=$1; shift
	if quick && case $3:$2 in p2p:cp2dp2*|allgather:cp2dp2*|allgather:cp2pp2dp2*|allgather:cp4*|a2a:cp2dp2*|a2a:cp2pp2dp2*) true;; *) false;; esac; then
		skip "$d (full tier: make check-full)"
	else
		ok "$d" layout "$@"
	fi
}
CP2="--context-parallel-size 2"
for kind in p2p allgather; do
	lay "$kind: CP2 = one process; bytes = analytic" 2 cp2$kind $kind cp=2 $CP2
	lay "$kind: CP2 x DP2 = one process; bytes = analytic" 4 cp2dp2$kind $kind cp=2 $CP2
	lay "$kind: CP2 x TP2 (sequence parallel) = one process; bytes = analytic" 4 cp2tp2$kind $kind "cp=2 tp=2 sp=1" \
		$CP2 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128
	lay "$kind: CP4 = one process; bytes = analytic" 4 cp4$kind $kind cp=4 --context-parallel-size 4
	lay "$kind: CP2 x PP2 x DP2, distributed optimizer = one process; bytes = analytic" 8 cp2pp2dp2$kind $kind \
		"cp=2 pp=2 distopt=1" $CP2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
done
lay "a2a: CP2 = one process; bytes = analytic" 2 cp2a2a a2a cp=2 $CP2
lay "a2a: CP2 x DP2 = one process; bytes = analytic" 4 cp2dp2a2a a2a cp=2 $CP2
lay "a2a: CP2 x PP2 x DP2, distributed optimizer = one process; bytes = analytic" 8 cp2pp2dp2a2a a2a \
	"cp=2 pp=2 distopt=1" $CP2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
ok "4 query groups: one process" train 1 one4 --num-query-groups 4
ok "a2a: CP4 (4 query groups) = one process; bytes = analytic" eval 'train 4 cp4a2a --num-query-groups 4 \
	--context-parallel-size 4 --cp-comm-type a2a && same one4 cp4a2a && $VOL cp4a2a 4 $COMMON cp=4 groups=4 cpcomm=a2a'
MODEL=tiny-gpt2
ok "tiny-gpt2 (learned positions, LayerNorm, biases, tied embeddings): one process" train 1 gpt1
ok "... CP2 = one process" eval 'train 2 gpt2cp2 $CP2 && same gpt1 gpt2cp2'
MODEL=tiny-llama
ok "the bytes check fails a wrong volume (allgather's bytes read as p2p's)" sh -c "! $VOL cp2allgather 2 $COMMON cp=2 cpcomm=p2p >/dev/null"
ok "the memory line: CP2's activations are half of one process's" $PY - one.err cp2p2p.err <<'PY'
import re, sys
a = [float(m.group(1)) for f in sys.argv[1:] for l in open(f) for m in [re.search(r"^memory after training: .*activations ([0-9.]+)", l)] if m]
if len(a) != 2: sys.exit(f"# memory lines: {a}")
print(f"# computed activations (MiB, rounded to 0.1): one process {a[0]}, CP2 rank 0 {a[1]}")
# half, but for the rounding of the two printed values (0.05 each, a[0]'s halved)
sys.exit(abs(a[1] - a[0] / 2) > 0.05 + 0.025 + 1e-9)
PY

# ---- 3. resume ---------------------------------------------------------------------------------
# exact A B: lm loss and grad norm text-identical on the iterations B logged
exact() {
	$PY - "$@" <<'PY'
import json, sys
def L(f): return {o["iteration"]: (repr(o["lm_loss"]), repr(o["grad_norm"])) for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o}
a, b = L(sys.argv[1]), L(sys.argv[2])
print(f"# {sys.argv[2]}: iterations {sorted(b)}")
sys.exit(not b or any(a.get(i) != v for i, v in b.items()))
PY
}
ok "CP2 with selective recomputation (the ring again in the backward) = CP2 without, bitwise" eval \
	'train 2 cp2sel $CP2 --recompute-granularity selective && exact cp2p2p cp2sel'
ok "CP2 allgather with full recomputation = CP2 allgather without, bitwise" eval \
	'train 2 cp2full $CP2 --cp-comm-type allgather --recompute-granularity full --recompute-method uniform \
	--recompute-num-layers 2 && exact cp2allgather cp2full'
ok "CP2 saving at iteration 5" train 2 full --context-parallel-size 2 --save ck --save-interval 5
ok "... resumed under CP2 at 5: iterations 6-10 bitwise (lm loss, grad norm)" eval \
	'train 2 resumed --context-parallel-size 2 --load ck --ckpt-step 5 && exact full resumed'
ok "... the CP2 checkpoint in one process: iterations 6-10 within 1e-5 of the one-process run" eval \
	'train 1 cp2to1 --load ck --ckpt-step 5 && same one cp2to1 6'

# ---- 4. Mixture of Experts ---------------------------------------------------------------------
MOE="--disable-bias-linear --moe-router-score-function sigmoid --moe-router-enable-expert-bias
	--moe-router-load-balancing-type seq_aux_loss --moe-z-loss-coeff 1e-3 --moe-input-jitter-eps 0.1"
# same3 REF RUN: lm loss, seq_load_balancing_loss and z_loss of every iteration within 1e-5 relative
same3() {
	$PY - "$@" <<'PY'
import json, sys
def L(f): return {o["iteration"]: o for o in map(json.loads, open(f + ".jsonl")) if "lm_loss" in o}
a, b = L(sys.argv[1]), L(sys.argv[2])
if not a or sorted(a) != sorted(b): sys.exit(f"# iterations {sorted(b)}, expected {sorted(a)}")
w = {k: max(abs(a[i][k] - b[i][k]) / abs(a[i][k]) for i in a) for k in ("lm_loss", "seq_load_balancing_loss", "z_loss")}
print(f"# {sys.argv[2]}: " + ", ".join(f"{k} {v:.2e}" for k, v in w.items()))
sys.exit(max(w.values()) > 1e-5)
PY
}
MODEL=tiny-moe
ok "MoE: one process" train 1 moe1 $MOE
ok "MoE: CP2 x EP2 = one process" eval 'train 4 moecp2ep2 $MOE $CP2 --expert-model-parallel-size 2 && same3 moe1 moecp2ep2'
ok "MoE: CP2 x TP2 (sequence parallel), allgather = one process" eval 'train 4 moecp2tp2 $MOE $CP2 --cp-comm-type allgather \
	--tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 128 && same3 moe1 moecp2tp2'

MODEL=tiny-llama

# ---- 5. errors -----------------------------------------------------------------------------------
E=$(echo $TRAIN --model tiny-llama $LAY --train-iters 1 --lr-warmup-iters 0)
ok "--seq-length 60 with CP4: exit 2 naming both flags" sh -c "
	$RUN 4 $E --seq-length 60 --context-parallel-size 4 >e1.out 2>e1.err </dev/null; r=\$?
	grep -q 'seq-length 60 is not divisible by 2 x --context-parallel-size 4' e1.err && test \$r = 2"
ok "--cp-comm-type a2a+p2p: exit 2, not implemented" sh -c "
	$E --cp-comm-type a2a+p2p >e2.out 2>e2.err; r=\$?; grep -q 'cp-comm-type a2a+p2p: the hierarchical form' e2.err && test \$r = 2"
ok "--cp-comm-type a2a with CP4 and 2 query groups: exit 2 naming the flags" sh -c "
	$RUN 4 $E --context-parallel-size 4 --cp-comm-type a2a >e7.out 2>e7.err </dev/null; r=\$?
	grep -q 'query groups per tensor-parallel rank.*not divisible by --context-parallel-size 4' e7.err && test \$r = 2"
ok "--cp-comm-type with different kinds per layer: exit 2" sh -c "
	$E --cp-comm-type p2p allgather p2p allgather >e3.out 2>e3.err; r=\$?; grep -q 'a different kind per layer' e3.err && test \$r = 2"
ok "--cp-comm-type all_gather (the config's spelling) repeated per layer is accepted" sh -c "
	$E --cp-comm-type all_gather all_gather all_gather all_gather >e4.out 2>e4.err"
ok "--cp-comm-type ring: exit 2 naming the kinds" sh -c "
	$E --cp-comm-type ring >e5.out 2>e5.err; r=\$?; grep -q 'expected p2p, allgather' e5.err && test \$r = 2"
ok "MoE token dropping (--moe-expert-capacity-factor) with CP2: exit 2" sh -c "
	$RUN 2 $E --context-parallel-size 2 --num-experts 4 --moe-expert-capacity-factor 1 >e6.out 2>e6.err </dev/null; r=\$?
	grep -q 'token dropping under context parallelism' e6.err && test \$r = 2"
done_testing
