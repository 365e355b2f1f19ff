#!/bin/sh
# mgt-train --fp8-format on the CPU, whose fp8 emulation (exact casts, exact products of the fp8
# values accumulated in fp32) is the reference of the GPU path (TAP, run by prove):
#   - the delayed-scaling state of every GEMM operand (amax history and scale) after every update
#     of 10 iterations of 2 micro-batches, from --fp8-trace, against tests/unit/fp8_te_ref.py (a
#     float64 re-implementation of Transformer Engine's rules, transformer_engine/pytorch/fp8.py) replaying
#     the amax rows; the update timing (a forward update after each micro-batch's forward, a
#     backward one after its backward); weights cast on the first micro-batch of a step only; the
#     unused output and grad_input slots never recorded; iteration 1's weight amaxes equal to the
#     largest |bf16(w)| of the initial weights (--debug-dump), an independent value;
#   - hybrid/max/history 4, e4m3/most_recent/history 1 with margin 1, tensorwise;
#   - fp8 tracks bf16 (and is not bf16); a checkpoint resumes bit for bit, eval included;
#   - what Megatron refuses, and what mgt does not implement, refused with the flag named.
# Full tier (lib.sh): TP2 with sequence parallelism, PP2 and DP2 with the distributed optimizer
# under mpirun against one process (the quick tier runs TP2 SP: the amax reductions over TP and
# the gathered norm outputs).  --fp8-param-gather (DP2, distributed optimizer) against the fp32
# parameter all-gather: the same training bit for bit, the same checkpoint but for the amaxes
# its cast records, fewer data-parallel bytes, a bitwise resume from its shard-saved checkpoint.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

TRAIN="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 0
 --lr-decay-style constant --eval-interval 0 --log-interval 1 --threads 1 --device cpu --bf16"
REF=$ROOT/tests/unit

ok "bf16 run, 10 iterations" exits 0 $TRAIN --train-iters 10 --metrics-file bf16.jsonl
ok "fp8 hybrid delayed (history 4, max), --fp8-trace, --debug-dump" exits 0 $TRAIN --train-iters 10 \
	--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max --fp8-trace h.jsonl \
	--debug-dump dd.h5 --metrics-file h.m.jsonl
ok "fp8 e4m3 delayed (history 1, most_recent, margin 1)" exits 0 $TRAIN --train-iters 10 --fp8-format e4m3 \
	--fp8-margin 1 --fp8-trace e.jsonl --metrics-file e.m.jsonl

# trace_check TRACE FWD_MAX BWD_MAX MARGIN ALGO
trace_check() {
	$PY - "$REF" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from fp8_te_ref import update, f32
tr, fmax, bmax, margin, algo = sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
# the trace's floats are printed with 9 digits: exact once read back as float32
lines = [json.loads(l, parse_float=lambda t: f32(float(t))) for l in open(tr)]
order = [(o["iteration"], o["microbatch"], o["pass"]) for o in lines]
want = [(i, mb, p) for i in range(1, 11) for mb in (0, 1) for p in ("forward", "backward")]
assert order == want, ("update timing", order[:6])
state = {}
for o in lines:
    n, fwd = len(o["scale"]), o["pass"] == "forward"
    L = len(o["history"])
    hist, scale = state.setdefault(o["pass"], ([[0.0] * n for _ in range(L)], [1.0] * n))
    a = o["amax"]
    per = 3 if fwd else 2
    for k in range(n // per):
        first = o["microbatch"] == 0
        assert a[per * k] > 0, ("input / grad_output amax recorded", o["iteration"], k)
        assert a[per * k + per - 1] == 0, ("output / grad_input slot unused", k)
        if fwd:
            assert (a[per * k + 1] > 0) == first, ("weight cast on the first micro-batch only", o["iteration"], k)
    hist[0] = list(a)
    update(hist, scale, None, fmax if fwd else bmax, margin, algo)
    assert hist == o["history"], ("history", o["iteration"], o["microbatch"], o["pass"])
    assert scale == o["scale"], ("scale", o["iteration"], o["microbatch"], o["pass"])
assert any(s != 1.0 for s in state["forward"][1]) and any(s != 1.0 for s in state["backward"][1])
print("# %d updates of %d forward and %d backward slots replayed exactly" % (len(lines), len(lines[0]["scale"]), len(lines[1]["scale"])))
PY
}
ok "hybrid: every update of 10 iterations = the float64 re-implementation of TE's rules" trace_check h.jsonl 448 57344 0 max
ok "e4m3: the same with e4m3 gradients (max 448), margin 1, most_recent, history 1" trace_check e.jsonl 448 448 1 most_recent
ok "iteration 1's weight amaxes = max |bf16(w)| of the initial weights (debug dump)" $PY - <<'PY'
import json, h5py, numpy as np
o = json.loads(open("h.jsonl").readline(), parse_float=lambda t: float(np.float32(t)))
f = h5py.File("dd.h5", "r")["params"]
names = ["self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"]
for k in range(o["linears"]):
    w = np.asarray(f["decoder.layers.%d.%s.weight" % (k // 4, names[k % 4])], dtype=np.float32)
    b16 = (w.view(np.uint32).astype(np.uint64) + 0x7FFF + ((w.view(np.uint32) >> 16) & 1)) >> 16
    want = float(np.abs((b16.astype(np.uint32) << 16).view(np.float32)).max())
    assert o["amax"][3 * k + 1] == want, (k, o["amax"][3 * k + 1], want)
print("# %d weight amaxes exact" % o["linears"])
PY
ok "fp8 tracks bf16 within 1% over 10 iterations, and is not bf16" $PY - <<'PY'
import json
a = [json.loads(l)["lm_loss"] for l in open("bf16.jsonl")]
for f in ("h.m.jsonl", "e.m.jsonl"):
    b = [json.loads(l)["lm_loss"] for l in open(f)]
    d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print("# %s: max relative loss difference to bf16 %.2e" % (f, d))
    assert len(b) == 10 and 0 < d < 1e-2, (a, b)
PY

# tensorwise (current scaling); --first-last-layers-bf16 keeps layers 0 and 3 out of fp8
ok "fp8 tensorwise" exits 0 $TRAIN --train-iters 4 --fp8-format hybrid --fp8-recipe tensorwise --metrics-file t.jsonl
ok "fp8 tensorwise with --first-last-layers-bf16" exits 0 $TRAIN --train-iters 4 --fp8-format hybrid \
	--fp8-recipe tensorwise --first-last-layers-bf16 --metrics-file tl.jsonl
ok "... both track bf16 within 1%, and differ from each other and from bf16" $PY - <<'PY'
import json
L = lambda f: [json.loads(l)["lm_loss"] for l in open(f)]
a, t, tl = L("bf16.jsonl")[:4], L("t.jsonl"), L("tl.jsonl")
for b in (t, tl):
    d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    assert len(b) == 4 and 0 < d < 1e-2, (a, b)
assert t != tl
PY

# checkpoints keep the scaling state: an interrupted run with an evaluation before its save
# (evaluation casts record amaxes, folded into the saved row 0) resumes bit for bit
F8="--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max --eval-interval 2 --eval-iters 1 --train-iters 4"
ok "fp8 run with evaluation, uninterrupted" exits 0 $TRAIN $F8 --metrics-file full.jsonl
ok "... interrupted after iteration 2, saving" exits 0 $TRAIN $F8 --save ck --save-interval 2 --exit-interval 2
ok "... the checkpoint holds the fp8 state" $PY - <<'PY'
import h5py, glob
names = set()
for f in glob.glob("ck/iter_0000002/*.h5"):
    h5py.File(f, "r").visit(names.add)
need = {"fp8.forward.amax_history", "fp8.forward.scale", "fp8.backward.amax_history", "fp8.backward.scale"}
assert need <= names, sorted(n for n in names if n.startswith("fp8"))
PY
ok "... resumed" exits 0 $TRAIN $F8 --load ck --metrics-file res.jsonl
ok "... iterations 3-4 bit for bit the uninterrupted run's" $PY - <<'PY'
import json
L = lambda f: {o["iteration"]: (o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f)) if "lm_loss" in o}
a, b = L("full.jsonl"), L("res.jsonl")
assert sorted(b) == [3, 4] and all(a[i] == b[i] for i in b), (a, b)
PY
ok "a bf16 checkpoint loads into an fp8 run, whose scales start at 1" exits 0 $TRAIN --train-iters 4 \
	--load ck --finetune --fp8-format hybrid --fp8-amax-history-len 8
ok "... saying so" err_has "no fp8 scaling state for --fp8-amax-history-len 8"

# refusals: exit 2, the flag and the reason named
refuse() { # refuse WHAT FLAGS...
	w=$1; shift
	exits 2 $TRAIN --train-iters 1 "$@" && err_has "$w"
}
ok "--fp8-format e5m2 refused" refuse "expected e4m3 or hybrid" --fp8-format e5m2
ok "--fp8-recipe mxfp8 refused: Blackwell only" refuse "Blackwell" --fp8-format hybrid --fp8-recipe mxfp8
ok "--fp8-recipe blockwise refused" refuse "blockwise is not implemented" --fp8-format hybrid --fp8-recipe blockwise
ok "--fp8-recipe custom refused" refuse "fp8-quantizer-factory" --fp8-format hybrid --fp8-recipe custom
ok "--fp8-amax-compute-algo mean refused" refuse "most_recent or max" --fp8-format hybrid --fp8-amax-compute-algo mean
ok "--fp8-param-gather without the distributed optimizer refused" refuse "needs --use-distributed-optimizer" \
	--fp8-format hybrid --fp8-param-gather
ok "--fp8-param-gather without --fp8-format refused" refuse "needs --fp8-format" --fp8-param-gather
ok "--first-last-layers-bf16 with delayed scaling refused (as Megatron)" refuse "delayed scaling does not support" \
	--fp8-format hybrid --first-last-layers-bf16
ok "a hidden size not a multiple of 16 refused naming the flag" refuse "change linear_qkv (--hidden-size" \
	--fp8-format hybrid --hidden-size 72 --num-attention-heads 2
ok "tokens not a multiple of 16 refused" refuse "multiple of 16" --fp8-format hybrid --seq-length 24 --micro-batch-size 1 \
	--global-batch-size 2
ok "fp8 MoE refused" refuse "fp8 MoE layers" --fp8-format hybrid --num-experts 2 --moe-router-topk 2 --disable-bias-linear
ok "full recomputation refused" refuse "recompute-granularity full is not implemented" --fp8-format hybrid \
	--recompute-granularity full --recompute-method uniform --recompute-num-layers 1
ok "--fp8-interval and --no-fp8-wgrad accepted without effect" exits 0 $TRAIN --train-iters 1 --fp8-format hybrid \
	--fp8-interval 4 --no-fp8-wgrad
ok "... saying why" sh -c "grep -q 'fp8-interval.*deprecated' $T/err && grep -q 'no-fp8-wgrad.*Transformer Engine 2' $T/err"

# layouts under mpirun: the amaxes reduced over TP (and DP x CP) give every rank the scales of
# one process, so TP2 and PP2 differ from it only by the row-parallel partial sums' rounding;
# DP2 updates once per step with both ranks' amaxes where one process updates after each of its
# two micro-batches, as Megatron does: the losses agree to rounding and to that
if command -v mpirun >/dev/null 2>&1; then
	ok "fp8 one process, 8 iterations" exits 0 $TRAIN --train-iters 8 --fp8-format hybrid --fp8-amax-history-len 4 \
		--fp8-amax-compute-algo max --metrics-file one.jsonl
	for lay in "tp2sp --tensor-model-parallel-size 2 --sequence-parallel" "pp2 --pipeline-model-parallel-size 2" \
		"dp2-distopt --use-distributed-optimizer"; do
		set -- $lay; name=$1; shift
		[ $name != tp2sp ] && ! full_only "fp8 $name under mpirun" && continue
		ok "fp8 $name under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 8 --fp8-format hybrid \
			--fp8-amax-history-len 4 --fp8-amax-compute-algo max "$@" --metrics-file "$name.jsonl"
		ok "fp8 $name: losses within 2e-3 of one process's" $PY - "$name.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["lm_loss"] for l in open("one.jsonl")]
b = [json.loads(l)["lm_loss"] for l in open(sys.argv[1])]
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("# max relative loss difference %s vs one process (fp8): %.2e" % (sys.argv[1], d))
assert len(a) == len(b) == 8 and d < 2e-3, (a, b)
PY
	done
	# --fp8-param-gather: the distributed optimizer's all-gather moves the fp8 weights as bytes
	# (Transformer Engine's transformer_engine/pytorch/module/linear.py, the fp8 weight cast) and computes what the cast on the first micro-batch computed
	DP2="--train-iters 6 --fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max
	 --use-distributed-optimizer --save-interval 3"
	ok "fp8 DP2 distopt, fp32 parameter all-gather" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN $DP2 --save c32 \
		--metrics-file g32.jsonl --comm-log g32
	ok "fp8 DP2 distopt --fp8-param-gather" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN $DP2 --fp8-param-gather \
		--save c8 --metrics-file g8.jsonl --comm-log g8
	ok "--fp8-param-gather resumed from iteration 3" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN $DP2 \
		--fp8-param-gather --load c8 --ckpt-step 3 --metrics-file g8r.jsonl
	ok "--fp8-param-gather: same losses, grad norms and parameters, fewer bytes, bitwise resume" $PY - <<'PY'
import json, h5py, numpy as np
rows = lambda f: [(o["iteration"], o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f))]
a, b, r = rows("g32.jsonl"), rows("g8.jsonl"), rows("g8r.jsonl")
assert len(a) == 6 and a == b, ("param gather changed the training", a, b)
assert r == b[3:], ("resume", r, b[3:])
x, y = h5py.File("c32/iter_0000006/model.h5", "r"), h5py.File("c8/iter_0000006/model.h5", "r")
names = []
x.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
# the weights' cast after the step records their amaxes where the first micro-batch's did
differ = [n for n in names if not np.array_equal(x[n][()], y[n][()])]
assert differ == ["fp8.forward.amax_history"], differ
n8 = sum(x[n].size for n in names if n.split(".")[-2] in ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
         and n.endswith(".weight") and not n.startswith("optimizer"))
data = lambda p: json.loads(open(p + ".rank0.jsonl").readline())["bytes"]["data"]
saved, most = data("g32") - data("g8"), 3 * n8 // 2  # (DP - 1) / DP x 3 bytes an fp8 weight element
print("# DP2 data-parallel bytes a step: fp32 gather %d, fp8 gather %d: %d saved of at most %d (%d fp8 weight "
      "elements; the packed shards are padded to the larger rank's)" % (data("g32"), data("g8"), saved, most, n8))
assert 0.5 * most < saved <= most, (saved, most)
PY
	TW="--train-iters 3 --fp8-format hybrid --fp8-recipe tensorwise --use-distributed-optimizer"
	ok "tensorwise fp8 DP2 distopt, with and without --fp8-param-gather" sh -c "sh $ROOT/tests/mpirun.sh 2 \
		$(echo $TRAIN) $TW --metrics-file t32.jsonl >/dev/null 2>&1 && sh $ROOT/tests/mpirun.sh 2 $(echo $TRAIN) $TW \
		--fp8-param-gather --metrics-file t8.jsonl >/dev/null 2>&1"
	ok "  the same losses and grad norms (each weight's amax MAX-reduced over its shards first)" $PY - <<'PY'
import json
rows = lambda f: [(o["iteration"], o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f))]
assert len(rows("t32.jsonl")) == 3 and rows("t32.jsonl") == rows("t8.jsonl"), (rows("t32.jsonl"), rows("t8.jsonl"))
PY
else
	skip "mpirun not installed"
fi
done_testing
