#!/bin/sh
# mgt-train --bf16 / --fp16 on the CPU, where the low-precision GEMM operands are emulated
# exactly (the reference for the CUDA backend): bf16 stays close to fp32 but is not fp32; fp16
# follows Megatron's dynamic loss scaler (checked against an independent re-implementation of
# grad_scaler.py's rules over the run's own skip pattern), a constant scale never changes, the
# scaler's state survives a checkpoint bit for bit, data parallelism agrees with one process, and
# bad precision or device flags (and the combinations Megatron refuses) are refused (TAP, run by prove).
# Tiers (lib.sh): the full tier adds, in bf16, DP2 with the distributed optimizer (the
# --grad-reduce-in-bf16 overlap case runs its parameter gather), --grad-reduce-in-bf16's plain
# distributed optimizer (the same, in buckets), CP2 allgather (p2p's fp32 blocks on 16-bit keys
# and values; the fp32 CP tests run allgather), TP2 SP on tiny-llama and tiny-moe and q/k norms
# under TP2 (tiny-gpt2's TP2 SP runs the 16-bit TP path, CP2 the q/k norms on 16-bit qkv).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

TRAIN="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 0
 --lr-decay-style constant --eval-interval 0 --log-interval 1 --threads 1 --device cpu"

# col FILE KEY: "iteration value" per training line of a metrics file
col() {
	$PY - "$@" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "lm_loss" in o:
        print(o["iteration"], repr(o[sys.argv[2]]))
PY
}

ok "fp32 run" exits 0 $TRAIN --train-iters 12 --metrics-file f32.jsonl
ok "bf16 run" exits 0 $TRAIN --train-iters 12 --bf16 --metrics-file bf16.jsonl
ok "bf16 tracks fp32 within 1e-2 and differs from it" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("f32.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference bf16 vs fp32: %.2e" % d)
assert len(a) == len(b) == 12 and 0 < d < 1e-2, (a, b)
PY

# --fp32-residual-connection: the residual stream stays fp32 under bf16 (other rounding points
# as before: the losses move, by less than bf16 does from fp32); under fp32 it changes nothing
ok "bf16 --fp32-residual-connection run" exits 0 $TRAIN --train-iters 12 --bf16 --fp32-residual-connection --metrics-file bf16r.jsonl
ok "bf16 --fp32-residual-connection: losses differ from the 16-bit residual's, within 1e-2" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open("bf16r.jsonl")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference bf16 fp32-residual vs 16-bit residual: %.2e" % d)
assert len(a) == len(b) == 12 and 0 < d < 1e-2, (a, b)
PY
ok "fp32 --fp32-residual-connection run" exits 0 $TRAIN --train-iters 12 --fp32-residual-connection --metrics-file f32r.jsonl
ok "... the fp32 run's losses, bitwise" sh -c 'col() { grep -o "\"lm_loss\": *[^,}]*" "$1"; }; col f32.jsonl >x1; col f32r.jsonl >x2; test -s x1 && cmp x1 x2'

# Dynamic fp16: Megatron's 2^32 start overflows fp16 in the backward, steps are skipped and the
# scale comes down; afterwards training proceeds.  A small window exercises growth too.
ok "fp16 dynamic run" exits 0 $TRAIN --train-iters 40 --fp16 --loss-scale-window 6 --metrics-file f16.jsonl
ok "fp16: scale follows grad_scaler.py over the run's skips, skips do not step" $PY - <<'PY'
import json
rows = [json.loads(l) for l in open("f16.jsonl") if "lm_loss" in l]
scale, growth, hyst, window, H, lo = 2.0 ** 32, 0, 2, 6, 2, 1.0
for r in rows:
    if r["skipped"]:
        growth = 0; hyst -= 1
        if hyst <= 0: scale = max(scale * 0.5, lo)
    else:
        growth += 1
        if growth == window: growth = 0; hyst = H; scale *= 2
    assert r["loss_scale"] == scale, (r["iteration"], r["loss_scale"], scale)
sk = [r["skipped"] for r in rows]
print("# skipped iterations:", [r["iteration"] for r in rows if r["skipped"]])
assert sk[0] and sum(sk) >= 3 and not all(sk[-10:]), sk
assert any(not a and b for a, b in zip(sk, sk[1:])), "the scale never grew back into an overflow"
PY
ok "fp16: log line shows the scale and the skipped count" sh -c "grep -q 'loss scale: 4294967296.0 |' '$T/err' && grep -q 'number of skipped iterations:   1 | number of nan iterations:   0 |' '$T/err'"

ok "fp16 constant scale" exits 0 $TRAIN --train-iters 6 --fp16 --loss-scale 1024 --metrics-file c16.jsonl
ok "constant scale: never skipped, always 1024" $PY - <<'PY'
import json
rows = [json.loads(l) for l in open("c16.jsonl")]
assert all(r["loss_scale"] == 1024 and not r["skipped"] for r in rows), rows
PY

# The scaler's state is checkpointed: a resumed fp16 run is the uninterrupted one, bit for bit.
ok "fp16 20 iterations" exits 0 $TRAIN --train-iters 20 --fp16 --loss-scale-window 4 --metrics-file u.jsonl
ok "fp16 first 9 with --save" exits 0 $TRAIN --train-iters 20 --fp16 --loss-scale-window 4 --exit-interval 9 --save ck --metrics-file a.jsonl
ok "fp16 resume to 20" exits 0 $TRAIN --train-iters 20 --fp16 --loss-scale-window 4 --load ck --metrics-file b.jsonl
col u.jsonl lm_loss >u1; col u.jsonl loss_scale >>u1
col b.jsonl lm_loss >b1; col b.jsonl loss_scale >>b1
grep -E '^(1[0-9]|20) ' u1 >u2
ok "resumed losses and loss scales 10-20 identical" sh -c 'test -s b1 && cmp b1 u2'

# Data parallelism: the same skips and scales as one process (the overflow check sees every
# rank's gradients), losses within float rounding.
if command -v mpirun >/dev/null 2>&1; then
	ok "fp16 under mpirun, 2 data-parallel ranks" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 12 --fp16 \
		--loss-scale-window 6 --metrics-file dp.jsonl
	ok "DP2 fp16: same skips and scales, losses within 1e-5" $PY - <<'PY'
import json
a = [json.loads(l) for l in open("f16.jsonl")][:12]
b = [json.loads(l) for l in open("dp.jsonl")]
assert [(r["skipped"], r["loss_scale"]) for r in a] == [(r["skipped"], r["loss_scale"]) for r in b]
d = max(abs(x["lm_loss"] - y["lm_loss"]) / abs(x["lm_loss"]) for x, y in zip(a, b))
print("# max relative loss difference DP2 vs one process: %.2e" % d)
assert d < 1e-5
PY
	# bf16 under TP2 with sequence parallelism: the norms' outputs, the row-parallel outputs and
	# the activation gradients of the [T,h] stream move in 16 bits (MPI's 16-bit reductions sum
	# the row-parallel outputs and the norm inputs' gradients); the partial sums are rounded
	# before they are added, unlike one process's single GEMM, so the losses agree to rounding,
	# and the tensor group's bytes are the analytic volume with 2 bytes an element
	ok "bf16 under mpirun, TP2 with sequence parallelism" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 12 \
		--bf16 --tensor-model-parallel-size 2 --sequence-parallel --metrics-file tp.jsonl --comm-log tpc
	ok "TP2 SP bf16: losses within 1e-3 of one process's" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open("tp.jsonl")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference TP2 SP vs one process (bf16): %.2e" % d)
assert len(a) == len(b) == 12 and d < 1e-3, (a, b)
PY
	ok "TP2 SP bf16: tensor-parallel bytes as the analytic volume in 16 bits" $PY \
		"$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" tpc 2 tp=2 sp=1 mbs=2 gbs=4 seq=32 vocab=512 prec=bf16
	ok "bf16 TP2 without sequence parallelism under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 2 \
		--bf16 --tensor-model-parallel-size 2 --metrics-file tpn.jsonl --comm-log tpn
	ok "... its 16-bit all-reduces: tensor-parallel bytes as the analytic volume" $PY \
		"$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" tpn 2 tp=2 mbs=2 gbs=4 seq=32 vocab=512 prec=bf16
	ok "... its losses within 1e-3 of one process's" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")][:2]
b = [json.loads(l)["lm_loss"] for l in open("tpn.jsonl")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference TP2 vs one process (bf16): %.2e" % d)
assert len(b) == 2 and d < 1e-3, (a, b)
PY
	# the other parallel paths in bf16: pipeline stages (the tied embedding's gradient all-reduced
	# between them) and data parallelism with the distributed optimizer (its parameter gather
	# refreshes each rank's 16-bit weight copy)
	for lay in "pp2 --pipeline-model-parallel-size 2" "dp2-distopt --use-distributed-optimizer"; do
		set -- $lay; name=$1; shift
		[ $name = dp2-distopt ] && ! full_only "bf16 $name under mpirun" && continue
		ok "bf16 $name under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 12 --bf16 "$@" \
			--metrics-file "$name.jsonl" --comm-log "$name"
		ok "bf16 $name: losses within 1e-3 of one process's" $PY - "$name.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open(sys.argv[1])]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference %s vs one process (bf16): %.2e" % (sys.argv[1], d))
assert len(a) == len(b) == 12 and d < 1e-3, (a, b)
PY
	done
	# --grad-reduce-in-bf16 (Megatron's bf16 main_grad): gradients rounded to bf16 after each
	# micro-batch and reduced in bf16 (half the data group's bytes); the DP2 layouts (all-reduce,
	# the distributed optimizer's reduce-scatter, overlapped in buckets) against one process,
	# whose second micro-batch's sum is rounded where DP2 rounds each rank's part before the sum
	ok "--bf16 --grad-reduce-in-bf16, one process" exits 0 $TRAIN --train-iters 8 --bf16 --grad-reduce-in-bf16 \
		--metrics-file g1.jsonl
	ok "... its gradients differ from fp32 main_grad's by rounding: losses within 1e-3 of --bf16's" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")][:8]
b = [json.loads(l)["lm_loss"] for l in open("g1.jsonl")]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference --grad-reduce-in-bf16 vs fp32 gradients (bf16): %.2e" % d)
assert len(b) == 8 and 0 < d < 1e-3, (a, b)
PY
	for lay in "gdp2 tp=1" "gdp2-distopt distopt=1 --use-distributed-optimizer" \
		"gdp2-overlap distopt=1,bucket=30000 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 30000"; do
		set -- $lay; name=$1; keys=$2; shift 2
		[ $name = gdp2-distopt ] && ! full_only "--grad-reduce-in-bf16 $name under mpirun" && continue
		ok "--grad-reduce-in-bf16 $name under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 8 --bf16 \
			--grad-reduce-in-bf16 "$@" --metrics-file "$name.jsonl" --comm-log "$name"
		ok "... $name: losses within 1e-3 of one process's" $PY - "$name.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["lm_loss"] for l in open("g1.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open(sys.argv[1])]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference %s vs one process (--grad-reduce-in-bf16): %.2e" % (sys.argv[1], d))
assert len(b) == 8 and d < 1e-3, (a, b)
PY
		ok "... $name: data-parallel bytes as the analytic volume with bf16 gradients" $PY \
			"$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" "$name" 2 $keys mbs=2 gbs=4 seq=32 \
			vocab=512 prec=bf16 gradbf16=1
	done
	# the pipeline's hidden states are the residual stream: 2-byte elements in bf16, 4 with
	# --fp32-residual-connection (their gradients likewise)
	ok "bf16 pp2: pipeline bytes as the analytic volume with 16-bit hidden states and gradients" $PY \
		"$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" pp2 2 pp=2 mbs=2 gbs=4 seq=32 vocab=512 prec=bf16
	ok "bf16 PP2 --fp32-residual-connection under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 2 \
		--bf16 --fp32-residual-connection --pipeline-model-parallel-size 2 --comm-log pp2r
	ok "... its pipeline bytes: fp32 hidden states" $PY "$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" \
		pp2r 2 pp=2 mbs=2 gbs=4 seq=32 vocab=512 prec=bf16 fp32res=1
	# the rest of the layouts in bf16 on the Llama-style models (RoPE on 16-bit qkv, GQA, SwiGLU,
	# RMSNorm): virtual pipeline stages, context parallelism in its three --cp-comm-type (16-bit
	# qkv and ctx; p2p and allgather move the keys and values in 16 bits and run fp32 blocks on
	# their values, a2a moves 16-bit rows), --qk-layernorm (head norms writing 16-bit qkv; with CP
	# too), expert parallelism and TP with MoE layers (tokens, expert activations and their
	# gradients 16-bit, the router's logits fp32; the all-to-all moves 16-bit rows); each against
	# its model's one-process bf16 run, within 1e-3 (reduction orders differ), and the context
	# group's bytes against the analytic volume
	LL=$(echo "$TRAIN" | sed 's/--model tiny-gpt2/--model tiny-llama/')
	MO=$(echo "$TRAIN" | sed 's/--model tiny-gpt2/--model tiny-moe --disable-bias-linear/')
	ok "bf16 tiny-llama, one process" exits 0 $LL --train-iters 6 --bf16 --metrics-file ll.jsonl
	ok "bf16 tiny-moe, one process" exits 0 $MO --train-iters 6 --bf16 --metrics-file mo.jsonl
	ok "bf16 tiny-llama --qk-layernorm, one process" exits 0 $LL --train-iters 6 --bf16 --qk-layernorm --metrics-file lq.jsonl
	while read -r ref name flags; do
		case $ref in ll|lq) T1=$LL;; *) T1=$MO;; esac
		case $name in llama-cp2-allgather|llama-tp2-sp|moe-tp2-sp|llama-qkln-tp2)
			full_only "bf16 $name under mpirun" || continue;; esac
		ok "bf16 $name under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T1 --train-iters 6 --bf16 $flags \
			--metrics-file "$name.jsonl" --comm-log "$name" </dev/null
		ok "bf16 $name: losses within 1e-3 of one process's" $PY - "$ref.jsonl" "$name.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["lm_loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["lm_loss"] for l in open(sys.argv[2])]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference %s vs one process (bf16): %.2e" % (sys.argv[2], d))
assert len(a) == len(b) == 6 and d < 1e-3, (a, b)
PY
	done <<LAYOUTS
ll llama-pp2-vp2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
ll llama-cp2 --context-parallel-size 2
ll llama-cp2-allgather --context-parallel-size 2 --cp-comm-type allgather
ll llama-cp2-a2a --context-parallel-size 2 --cp-comm-type a2a
ll llama-tp2-sp --tensor-model-parallel-size 2 --sequence-parallel
mo moe-ep2 --expert-model-parallel-size 2
mo moe-tp2-sp --tensor-model-parallel-size 2 --sequence-parallel
lq llama-qkln-tp2 --qk-layernorm --tensor-model-parallel-size 2
lq llama-qkln-cp2 --qk-layernorm --context-parallel-size 2
LAYOUTS
	ok "bf16 moe-ep2: expert-group bytes = (2 * 2h + 4)(sent + received rows) + 8 E (EP - 1) a dispatch + the norm's double (tokens and their gradients in 16 bits, probabilities fp32)" \
		$PY - moe-ep2 2 64 4 2 <<'PY'
import json, sys
name, n, h, E, EP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
worst, rows = 0.0, 0
for r in range(n):
    for o in map(json.loads, open(f"{name}.rank{r}.jsonl")):
        m = o["moe_rows"]
        want = (2 * 2 * h + 4) * (m["sent"] + m["received"]) + 8 * E * (EP - 1) * m["dispatches"] + 16 * (EP - 1) / EP
        worst = max(worst, abs(o["bytes"]["expert"] - want) / want)
        rows += 1
print(f"# {rows} rank-iterations: worst relative difference {worst:.1e}")
sys.exit(worst > 1e-12 or rows == 0)
PY
	for kind in p2p allgather a2a; do
		name=llama-cp2-$kind; [ $kind = p2p ] && name=llama-cp2
		[ $kind = allgather ] && ! full_only "bf16 $name: context-parallel bytes" && continue
		ok "bf16 $name: context-parallel bytes as the analytic volume (keys and values in 16 bits)" $PY \
			"$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-llama.json" $name 2 cp=2 cpcomm=$kind mbs=2 gbs=4 \
			seq=32 vocab=512 prec=bf16
	done
else
	for i in $(seq 51); do skip "mpirun not installed"; done
fi

ok "--bf16 with --fp16 refused (exit 2)" exits 2 $TRAIN --train-iters 1 --bf16 --fp16
ok "... and says why" err_has "exclude each other"
ok "--grad-reduce-in-bf16 without --bf16 refused (exit 2)" exits 2 $TRAIN --train-iters 1 --grad-reduce-in-bf16
ok "... naming both flags" err_has "--grad-reduce-in-bf16 needs --bf16"
ok "--grad-reduce-in-bf16 with --fp16 refused (exit 2)" exits 2 $TRAIN --train-iters 1 --fp16 --grad-reduce-in-bf16
ok "... naming all three" err_has "needs --bf16 (it chooses how a bf16 run reduces its gradients), not --fp16"
ok "--fp16-lm-cross-entropy without --fp16 refused (exit 2)" exits 2 $TRAIN --train-iters 1 --bf16 --fp16-lm-cross-entropy
ok "... naming both flags" err_has "--fp16-lm-cross-entropy needs --fp16 (as in Megatron), not --bf16"
ok "--device gpu refused (exit 2)" exits 2 $TRAIN --train-iters 1 --device gpu
ok "... naming the choices" err_has "expected auto, cpu or cuda"
ok "--fp16 --min-loss-scale above the initial scale refused" exits 2 $TRAIN --train-iters 1 --fp16 --initial-loss-scale 4 --min-loss-scale 8
ok "... naming the flag" err_has "min-loss-scale"
# --device cuda on a machine without a GPU (CI): refused with the reason, exit 2
if [ "$(nvidia-smi -L 2>/dev/null | grep -c GPU)" = 0 ]; then
	ok "--device cuda without a GPU refused (exit 2)" exits 2 $TRAIN --train-iters 1 --device cuda
	ok "... saying why" sh -c "grep -Eq 'without CUDA|no usable CUDA device|no CUDA device' '$T/err' || { head -c 300 '$T/err'; false; }"
else
	skip "a GPU is present"
	skip "a GPU is present"
fi
done_testing
