#!/bin/sh
# tests/gpu/check.sh (make check-gpu): the CUDA backend on a machine with a GPU.
#
# 1. build/tests/gpu/test_cuda_ops: every backend op on the GPU against the CPU backend
#    (tolerances and reasons in that file).
# 2. mgt-train, tiny-gpt2, tiny-llama and tiny-moe (router GEMM in fp32, as its preset says), --mock-data, seq 128, micro-batch 4, global batch 8
#    (2 micro-batches: gradient accumulation), CPU vs CUDA:
#    (a) iteration 1, dropout 0 (--debug-dump; 2 iterations, constant lr):
#        initial params and batches: identical (params are initialized on the host);
#        cuda fp32 vs cpu fp32: logits, per-token loss and lm loss <= 1e-5 normwise, every
#          gradient tensor <= 2e-5 (both are true fp32 -- no TF32 -- and differ by summation
#          order; the output layer's backward sums V = 50304 terms per element, whose fp32
#          rounding reaches ~u sqrt(V/6) = 5e-6 per side, and feeds every gradient below it;
#          TF32 or a wrong kernel gives 1e-3 and more);
#        cuda --bf16 vs cpu fp32 and vs cpu --bf16: logits and loss <= 2e-2 normwise, each
#          gradient tensor's norm within 2e-2 (bf16 operands carry 2^-9 relative rounding per
#          GEMM; the normwise differences of the gradients are printed, not checked: a rounding
#          flip between CPU and GPU cascades through the layers up to the bf16 noise itself);
#    (b) 50 iterations with dropout 0.1 (hidden and attention; the masks are Philox-keyed, the
#        same on both), per-iteration lm loss, relative |a-b|/|b|:
#        cuda --bf16 vs cpu --bf16, and vs cpu fp32: <= 1e-2 over iterations 1-10, <= 2e-2 over
#          all 50 (bf16 rounding noise grows slowly through training);
#        cuda fp32 vs cpu fp32: <= 1e-5 at iteration 1, <= 1e-3 over all 50 (fp32 rounding
#          differences grow through 50 AdamW steps but stay far below that);
#        no iteration skipped;
#    (c) cuda --bf16 twice with the same seed (dropout 0.1): the log's loss lines (timestamps and
#        timings removed) text-identical, and lm_loss and grad_norm of every iteration in the
#        metrics file (printed with 17 digits) identical: bitwise;
#    (e) cuda --bf16 with --recompute-granularity full (uniform, 1 layer) and selective: as (c)
#        against the (b) run without recomputation (bitwise; the recomputed forward draws the same
#        dropout masks and the kernels are deterministic);
#    (d) cuda --fp16, 50 iterations, dropout 0.1:
#        with --initial-loss-scale 65536 (dynamic scaling from a scale that does not overflow on
#          these models): no iteration skipped, lm loss within 5e-2 of cuda fp32 at every
#          iteration, the log shows loss scale 65536;
#        with the default scaling (Megatron's: 2^32, hysteresis 2): finishes, the log shows the
#          loss scale (falling from 2^32 as the first iterations overflow and are skipped), the last
#          loss is finite and below the first; when nothing was skipped its losses are compared
#          with fp32 as above (skipped iterations shift the updates against the data, so a
#          per-iteration comparison is meaningless then);
#    (g) fp8 on GPUs with it (compute capability 8.9+): cuda --bf16 --fp8-format hybrid (delayed,
#        history 16, max) against the cpu's emulation of the same and against cpu --bf16: losses
#        within 2e-2 over iterations 1-10 and 4e-2 over all; iteration 1's weight amaxes and
#        weight scales (--fp8-trace) bit for bit the cpu's (the same bf16 weights cast);
#    (f) context parallelism on the GPU (when mpirun is there): cuda fp32 with
#        --context-parallel-size 2 as two ranks sharing the GPU (every group then staged through
#        the host: NCCL refuses two ranks on one GPU), --cp-comm-type p2p, allgather and a2a (the
#        attention blocks of kernels/attn.cuh, the all-to-all's row gathers), against cpu fp32 in
#        one process as (b) cuda fp32.
# 3. KJV (optional, when KJV_PREFIX names a tokenized dataset, or demo/data/kjv_text_document
#    exists, e.g. after make demo): tiny-gpt2, 20 iterations, cuda --bf16 vs cpu --bf16 as (b).
# 4. BERT (--model-family bert, 2 x 256, seq 128) on KJV split into sentences: cuda fp32 vs cpu
#    fp32 as (b)'s fp32 (1e-5 at iteration 1, 1e-3 over 20), cuda bf16 vs cpu bf16 as (b).
# 5. T5 (--model-family t5, 2 + 2 x 256, encoder 128 / decoder 32) on KJV sentences
#    (BertWordPieceCase): the same two comparisons as 4, with learned and with relative positions
#    (--position-embedding-type relative: the attention kernels with T5's position bias).
#
# Prints "ok - ..." / "not ok - ..." per check and a summary; exits 0 when all passed, 1 on any
# failure, 77 without a CUDA device.  Logs and metrics of every run are kept in the work directory
# on failure (KEEP=1 always), and copied to $OUT (two files) when $OUT is set.
# Environment: MGT_BIN (directory with mgt-train; default bin/, else build/bundle/bin),
# TEST_CUDA_OPS (default build/tests/gpu/test_cuda_ops, else build/bundle/tests/gpu/...),
# PY (python3 with numpy and h5py), ITERS (50), MODELS ("tiny-gpt2 tiny-llama tiny-moe"), SKIP_OPS=1.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ITERS=${ITERS:-50}
MODELS=${MODELS:-"tiny-gpt2 tiny-llama tiny-moe"}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
if [ -z "${MGT_BIN:-}" ]; then
	MGT_BIN=$ROOT/bin
	[ -x "$MGT_BIN/mgt-train" ] || [ ! -x "$ROOT/build/bundle/bin/mgt-train" ] || MGT_BIN=$ROOT/build/bundle/bin
fi
TRAIN=$MGT_BIN/mgt-train
if [ -z "${TEST_CUDA_OPS:-}" ]; then
	TEST_CUDA_OPS=$ROOT/build/tests/gpu/test_cuda_ops
	[ -x "$TEST_CUDA_OPS" ] || [ ! -x "$ROOT/build/bundle/tests/gpu/test_cuda_ops" ] ||
		TEST_CUDA_OPS=$ROOT/build/bundle/tests/gpu/test_cuda_ops
fi
if [ -z "${PY:-}" ]; then
	PY=python3
	for p in python3 /usr/bin/python3; do
		if $p -c 'import numpy, h5py' 2>/dev/null; then PY=$p; break; fi
	done
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/mgt-check-gpu.XXXXXX")
RES=$W/results
: >"$RES"
T_START=$(date +%s)

ok() { echo "ok - $*" | tee -a "$RES"; }
notok() { echo "not ok - $*" | tee -a "$RES"; }
# check DESC CMD...: ok/not ok for CMD's exit status
check() { d=$1; shift; if "$@"; then ok "$d"; else notok "$d"; fi; }

finish() {
	np=$(grep -c '^ok' "$RES")
	nf=$(grep -c '^not ok' "$RES")
	echo
	echo "==== check-gpu summary ($(( $(date +%s) - T_START )) s) ===="
	grep '^not ok' "$RES" | sed 's/^/  /'
	echo "$np passed, $nf failed"
	if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
		# the device tool returns at most 8 files: the summary, and every log in one archive
		cp "$RES" "$OUT/check-gpu-results.txt" 2>/dev/null
		(cd "$W" && tar czf "$OUT/check-gpu-logs.tar.gz" ./*.log ./*.jsonl ./*.txt 2>/dev/null)
		echo "results and logs copied to $OUT (check-gpu-results.txt, check-gpu-logs.tar.gz)"
	fi
	if [ "$nf" != 0 ] || [ "${KEEP:-0}" = 1 ]; then
		rm -f "$W"/*.h5
		echo "work directory kept: $W"
	else
		rm -rf "$W"
	fi
	[ "$nf" = 0 ]
	exit $?
}

echo "# check-gpu $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
else
	echo "# nvidia-smi not found"
fi
echo "# mgt-train: $TRAIN; test_cuda_ops: $TEST_CUDA_OPS; python: $PY"
for b in "$TRAIN" "$TEST_CUDA_OPS"; do
	[ -x "$b" ] && ldd "$b" 2>/dev/null | grep 'not found' | sed "s|^|# WARNING: $(basename "$b") needs |"
done

# ---------------------------------------------------------------- 1. ops
if [ "${SKIP_OPS:-0}" != 1 ]; then
	echo "# ---- 1. test_cuda_ops: every op, GPU vs CPU backend"
	if [ ! -x "$TEST_CUDA_OPS" ]; then
		notok "test_cuda_ops is not built ($TEST_CUDA_OPS)"
	else
		timeout 900 "$TEST_CUDA_OPS" >"$W/test_cuda_ops.txt" 2>&1
		rc=$?
		cat "$W/test_cuda_ops.txt"
		if [ $rc = 77 ]; then
			rm -rf "$W"
			exit 77
		fi
		summary=$(tail -1 "$W/test_cuda_ops.txt")
		check "test_cuda_ops: exit $rc ($summary)" test $rc = 0
	fi
fi

# ---------------------------------------------------------------- 2. mgt-train
if [ ! -x "$TRAIN" ]; then
	notok "mgt-train is not built ($TRAIN)"
	finish
fi
if ! "$TRAIN" --help 2>&1 | grep -q -- '--device'; then
	notok "mgt-train has no --device flag (not built with the CUDA changes?)"
	finish
fi
if ! $PY -c 'import numpy, h5py' 2>/dev/null; then
	notok "$PY lacks numpy or h5py: the model-level comparisons cannot run"
	finish
fi

# The comparisons (python3, numpy, h5py).  Each prints ok/not ok lines.
cat >"$W/cmp.py" <<'EOF'
import json, math, re, sys
import numpy as np

def out(ok, msg):
    print(("ok - " if ok else "not ok - ") + msg)
    sys.stdout.flush()

def rel(a, b):
    a = np.asarray(a, dtype=np.float64).ravel(); b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        return float("inf")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    nb = np.linalg.norm(b)
    d = np.linalg.norm(a - b)
    return float(d / nb) if nb > 0 else float(d)

def read_dump(path):
    import h5py
    d = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                d[name] = obj[()]
        f.visititems(visit)
    return d

def dump(argv):
    """dump A.h5 B.h5 LABEL MODE: A (cuda) against B (cpu).  MODE exact: logits, loss <= 1e-5,
    grads normwise <= 2e-5; MODE lowp: logits, loss <= 2e-2, per-tensor gradient norms within 2e-2."""
    a_path, b_path, label, mode = argv
    try:
        A, B = read_dump(a_path), read_dump(b_path)
    except Exception as e:
        out(False, "%s: cannot read the dumps: %s" % (label, e)); return
    tol = 1e-5 if mode == "exact" else 2e-2
    gtol = 2e-5 if mode == "exact" else 2e-2
    pa = sorted(k for k in A if k.startswith("params/"))
    if not pa or sorted(k for k in B if k.startswith("params/")) != pa:
        out(False, "%s: the dumps hold different tensors" % label); return
    ndiff = sum(int(np.sum(A[k].view(np.uint32) != B[k].view(np.uint32))) for k in pa)
    out(ndiff == 0, "%s: initial params bitwise identical (%d elements differ)" % (label, ndiff))
    bk = [k for k in ("batch/tokens", "batch/labels", "batch/loss_mask", "batch/position_ids") if k in B]
    bsame = all(k in A and np.array_equal(A[k], B[k]) for k in bk)
    out(bsame, "%s: batches identical (%s)" % (label, ", ".join(k.split("/")[1] for k in bk)))
    for k in ("iter1/logits", "iter1/loss"):
        e = rel(A.get(k, []), B.get(k, [1]))
        out(e <= tol, "%s: %s err %.2e (tol %.0e)" % (label, k, e, tol))
    la, lb = A.get("train/lm_loss", []), B.get("train/lm_loss", [])
    if len(la) and len(lb):
        e = abs(float(la[0]) - float(lb[0])) / abs(float(lb[0]))
        out(e <= tol, "%s: iteration-1 lm loss %.9g vs %.9g: err %.2e (tol %.0e)" % (label, la[0], lb[0], e, tol))
        if len(la) > 1 and len(lb) > 1:
            print("# %s: iteration-2 lm loss %.9g vs %.9g (after one AdamW step; not checked)" % (label, la[1], lb[1]))
    ga = sorted(k for k in B if k.startswith("grads/"))
    errs, nerrs = [], []
    for k in ga:
        g, r = A.get(k), B[k]
        e = rel(g, r) if g is not None else float("inf")
        na = float(np.linalg.norm(np.asarray(g, np.float64))) if g is not None else float("nan")
        nb = float(np.linalg.norm(np.asarray(r, np.float64)))
        ne = abs(na - nb) / nb if nb > 0 else abs(na - nb)
        if not math.isfinite(ne):
            ne = float("inf")
        errs.append((e, k[6:])); nerrs.append((ne, k[6:]))
    errs.sort(reverse=True); nerrs.sort(reverse=True)
    if not errs:
        out(False, "%s: no gradients in the dumps" % label); return
    top = ", ".join("%s %.1e" % (n, e) for e, n in errs[:3])
    if mode == "exact":
        out(errs[0][0] <= gtol, "%s: every gradient (%d tensors) normwise; worst %s err %.2e (tol %.0e)"
            % (label, len(errs), errs[0][1], errs[0][0], gtol))
        print("#   worst three: %s" % top)
    else:
        out(nerrs[0][0] <= gtol, "%s: every gradient's norm (%d tensors); worst %s err %.2e (tol %.0e)"
            % (label, len(nerrs), nerrs[0][1], nerrs[0][0], gtol))
        print("#   gradients normwise (not checked), worst three: %s" % top)

def metrics(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line:
            r = json.loads(line)
            if "lm_loss" in r and "iteration" in r:
                rows.append(r)
    return rows

def losses(argv):
    """losses A.jsonl B.jsonl LABEL ITERS FIRST TOL_FIRST TOL_ALL [TOL_ITER1]: lm loss per
    iteration, relative to B."""
    a_path, b_path, label, iters, first, tf, ta = argv[:7]
    iters, first, tf, ta = int(iters), int(first), float(tf), float(ta)
    t1 = float(argv[7]) if len(argv) > 7 else None
    try:
        A, B = metrics(a_path), metrics(b_path)
    except Exception as e:
        out(False, "%s: cannot read the metrics: %s" % (label, e)); return
    ia, ib = [r["iteration"] for r in A], [r["iteration"] for r in B]
    if ia != list(range(1, iters + 1)) or ib != ia:
        out(False, "%s: iterations %s.. (%d) vs %s.. (%d), expected 1..%d" % (label, ia[:3], len(ia), ib[:3], len(ib), iters))
        return
    la = [float(r["lm_loss"]) for r in A]; lb = [float(r["lm_loss"]) for r in B]
    bad = [i + 1 for i in range(iters) if not (math.isfinite(la[i]) and la[i] > 0 and math.isfinite(lb[i]) and lb[i] > 0)]
    if bad:
        out(False, "%s: non-finite lm loss at iterations %s" % (label, bad[:5])); return
    d = [abs(x - y) / abs(y) for x, y in zip(la, lb)]
    def worst(lo, hi):
        i = max(range(lo, hi), key=lambda k: d[k])
        return d[i], i + 1
    wf, itf = worst(0, min(first, iters))
    wa, ita = worst(0, iters)
    if t1 is not None:
        out(d[0] <= t1, "%s: iteration-1 lm loss %.9g vs %.9g: err %.2e (tol %.0e)" % (label, la[0], lb[0], d[0], t1))
    out(wf <= tf, "%s: lm loss, iterations 1-%d: max rel diff %.2e at %d (tol %.0e)" % (label, min(first, iters), wf, itf, tf))
    out(wa <= ta, "%s: lm loss, iterations 1-%d: max rel diff %.2e at %d (tol %.0e); last %.6f vs %.6f"
        % (label, iters, wa, ita, ta, la[-1], lb[-1]))
    ga = [float(r.get("grad_norm", float("nan"))) for r in A]; gb = [float(r.get("grad_norm", float("nan"))) for r in B]
    gd = [abs(x - y) / abs(y) for x, y in zip(ga, gb) if math.isfinite(x) and math.isfinite(y) and y > 0]
    if gd:
        print("#   grad norm: max rel diff %.2e (not checked); first %.6g vs %.6g" % (max(gd), ga[0], gb[0]))
    sa, sb = sum(1 for r in A if r.get("skipped")), sum(1 for r in B if r.get("skipped"))
    out(sa == 0 and sb == 0, "%s: no skipped iterations (%d, %d)" % (label, sa, sb))

LINE_RE = re.compile(r"iteration\s+\d+/")
def loss_lines(path):
    lines = []
    for line in open(path, errors="replace"):
        if LINE_RE.search(line) and "lm loss" in line:
            line = re.sub(r"^\s*\[[^]]*\]", "", line)
            line = re.sub(r"elapsed time per iteration \(ms\): [^|]*\|", "", line)
            line = re.sub(r"throughput per GPU \(TFLOP/s/GPU\): [^|]*\|", "", line)
            lines.append(line.strip())
    return lines

def same(argv):
    """same A.log B.log A.jsonl B.jsonl LABEL: bitwise-identical runs."""
    la_p, lb_p, ma_p, mb_p, label = argv
    try:
        A, B = loss_lines(la_p), loss_lines(lb_p)
        MA, MB = metrics(ma_p), metrics(mb_p)
    except Exception as e:
        out(False, "%s: cannot read the logs: %s" % (label, e)); return
    diff = [i for i in range(min(len(A), len(B))) if A[i] != B[i]]
    okl = len(A) > 0 and len(A) == len(B) and not diff
    out(okl, "%s: %d loss lines text-identical (%d differ)" % (label, len(A), len(diff) + abs(len(A) - len(B))))
    if diff:
        print("#   first difference:\n#   %s\n#   %s" % (A[diff[0]], B[diff[0]]))
    key = lambda rows: [(r["iteration"], repr(float(r["lm_loss"])), repr(float(r.get("grad_norm", 0)))) for r in rows]
    ka, kb = key(MA), key(MB)
    nd = sum(1 for x, y in zip(ka, kb) if x != y) + abs(len(ka) - len(kb))
    out(len(ka) > 0 and nd == 0, "%s: lm_loss and grad_norm of %d iterations bitwise identical (%d differ)" % (label, len(ka), nd))
    if nd:
        i = next((i for i in range(min(len(ka), len(kb))) if ka[i] != kb[i]), None)
        if i is not None:
            print("#   first difference: %s vs %s" % (ka[i], kb[i]))

SCALE_RE = re.compile(r"loss scale: ([0-9.eE+-]+|inf|nan) \|")
def fp16(argv):
    """fp16 RUN.log RUN.jsonl REF.jsonl LABEL ITERS TOL MODE: MODE fixed (--initial-loss-scale
    65536) or default."""
    log_p, m_p, ref_p, label, iters, tol, mode = argv
    iters, tol = int(iters), float(tol)
    try:
        scales = [float(s) for s in SCALE_RE.findall(open(log_p, errors="replace").read())]
        M = metrics(m_p)
    except Exception as e:
        out(False, "%s: cannot read the run: %s" % (label, e)); return
    skipped = sum(1 for r in M if r.get("skipped"))
    loss = [float(r["lm_loss"]) for r in M if not r.get("skipped")]
    traj = " -> ".join("%g" % s for s in (scales[:1] + scales[-1:])) if scales else "none"
    print("#   %s: %d iterations, %d skipped, loss scale %s" % (label, len(M), skipped, traj))
    out(len(M) == iters, "%s: %d of %d iterations in the metrics" % (label, len(M), iters))
    if mode == "fixed":
        out(len(scales) > 0 and scales[0] == 65536.0, "%s: the log shows loss scale 65536 (%s)" % (label, traj))
        out(skipped == 0, "%s: no skipped iterations (%d)" % (label, skipped))
    else:
        out(len(scales) > 0 and any(s != 1.0 for s in scales),
            "%s: the log shows the dynamic loss scale (%s, %d skipped)" % (label, traj, skipped))
        out(len(loss) > 1 and all(math.isfinite(x) for x in loss) and loss[-1] < loss[0],
            "%s: losses finite, last %.4f below first %.4f" % (label, loss[-1] if loss else float("nan"), loss[0] if loss else float("nan")))
    if skipped == 0:
        losses([m_p, ref_p, label + " vs cuda fp32", str(iters), "10", str(tol), str(tol)])
    else:
        print("#   %s: %d iterations skipped: not compared per iteration with fp32" % (label, skipped))

{"dump": dump, "losses": losses, "same": same, "fp16": fp16}[sys.argv[1]](sys.argv[2:])
EOF

# compare SUBCOMMAND ARGS...: run a comparison, its lines into the results
compare() { $PY "$W/cmp.py" "$@" 2>&1 | tee -a "$RES"; }

# train NAME FLAGS...: one mgt-train run (NAME.log, NAME.jsonl); prints its time and exit status;
# started through $LAUNCH when set (an MPI launcher)
LAUNCH=
train() {
	name=$1; shift
	rm -f "$W/$name.jsonl" "$W/$name.h5"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	timeout "$RUN_TIMEOUT" $LAUNCH "$TRAIN" "$@" --metrics-file "$W/$name.jsonl" >"$W/$name.log" 2>&1 </dev/null
	rc=$?
	echo "# run $name: exit $rc, $(( $(date +%s) - t0 )) s"
	if [ $rc != 0 ]; then
		notok "mgt-train $name exited with status $rc$( [ $rc = 124 ] && echo " (timeout ${RUN_TIMEOUT} s)")"
		tail -5 "$W/$name.log" | sed 's/^/#   /'
		return 1
	fi
	grep -m1 'peak device memory' "$W/$name.log" | sed 's/^/#   /'
	return 0
}

BASE="--mock-data --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8
	--eval-interval 0 --log-interval 1 --seed 1234"
DUMP="$BASE --train-iters 2 --lr 1e-3 --lr-decay-style constant --hidden-dropout 0 --attention-dropout 0"
RUN="$BASE --train-iters $ITERS --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 5 --lr-decay-style cosine
	--hidden-dropout 0.1 --attention-dropout 0.1"

for m in $MODELS; do
	echo "# ---- 2. $m"
	echo "# (a) iteration 1, dropout 0: --debug-dump, cuda vs cpu"
	# shellcheck disable=SC2086
	{
		train "$m-dump-cpu" --model "$m" $DUMP --device cpu --debug-dump "$W/$m-dump-cpu.h5"
		train "$m-dump-cpu-bf16" --model "$m" $DUMP --device cpu --bf16 --debug-dump "$W/$m-dump-cpu-bf16.h5"
		train "$m-dump-cuda" --model "$m" $DUMP --device cuda --debug-dump "$W/$m-dump-cuda.h5"
		train "$m-dump-cuda-bf16" --model "$m" $DUMP --device cuda --bf16 --debug-dump "$W/$m-dump-cuda-bf16.h5"
	}
	[ -f "$W/$m-dump-cuda.h5" ] && [ -f "$W/$m-dump-cpu.h5" ] &&
		compare dump "$W/$m-dump-cuda.h5" "$W/$m-dump-cpu.h5" "$m (a) cuda fp32 vs cpu fp32" exact
	[ -f "$W/$m-dump-cuda-bf16.h5" ] && [ -f "$W/$m-dump-cpu.h5" ] &&
		compare dump "$W/$m-dump-cuda-bf16.h5" "$W/$m-dump-cpu.h5" "$m (a) cuda bf16 vs cpu fp32" lowp
	[ -f "$W/$m-dump-cuda-bf16.h5" ] && [ -f "$W/$m-dump-cpu-bf16.h5" ] &&
		compare dump "$W/$m-dump-cuda-bf16.h5" "$W/$m-dump-cpu-bf16.h5" "$m (a) cuda bf16 vs cpu bf16" lowp
	rm -f "$W"/*.h5

	echo "# (b) $ITERS iterations, dropout 0.1: lm loss per iteration, cuda vs cpu"
	# shellcheck disable=SC2086
	{
		train "$m-cpu" --model "$m" $RUN --device cpu
		train "$m-cpu-bf16" --model "$m" $RUN --device cpu --bf16
		train "$m-cuda" --model "$m" $RUN --device cuda
		train "$m-cuda-bf16" --model "$m" $RUN --device cuda --bf16
	}
	compare losses "$W/$m-cuda-bf16.jsonl" "$W/$m-cpu-bf16.jsonl" "$m (b) cuda bf16 vs cpu bf16" "$ITERS" 10 1e-2 2e-2
	compare losses "$W/$m-cuda-bf16.jsonl" "$W/$m-cpu.jsonl" "$m (b) cuda bf16 vs cpu fp32" "$ITERS" 10 1e-2 2e-2
	compare losses "$W/$m-cuda.jsonl" "$W/$m-cpu.jsonl" "$m (b) cuda fp32 vs cpu fp32" "$ITERS" 10 1e-3 1e-3 1e-5

	echo "# (c) the same run again on the GPU: bitwise identical"
	# shellcheck disable=SC2086
	train "$m-cuda-bf16-again" --model "$m" $RUN --device cuda --bf16 &&
		compare same "$W/$m-cuda-bf16.log" "$W/$m-cuda-bf16-again.log" "$W/$m-cuda-bf16.jsonl" \
			"$W/$m-cuda-bf16-again.jsonl" "$m (c) cuda bf16 twice"

	echo "# (e) activation recomputation: the (b) cuda --bf16 run again, bitwise"
	case $m in
	*moe*) echo "# (e) full recomputation skipped for $m: mgt-train refuses it with --num-experts (selective only)" ;;
	*)
		# shellcheck disable=SC2086
		train "$m-cuda-bf16-rc-full" --model "$m" $RUN --device cuda --bf16 --recompute-granularity full \
			--recompute-method uniform --recompute-num-layers 1 &&
			compare same "$W/$m-cuda-bf16.log" "$W/$m-cuda-bf16-rc-full.log" "$W/$m-cuda-bf16.jsonl" \
				"$W/$m-cuda-bf16-rc-full.jsonl" "$m (e) cuda bf16, full recomputation vs none" ;;
	esac
	# shellcheck disable=SC2086
	train "$m-cuda-bf16-rc-sel" --model "$m" $RUN --device cuda --bf16 --recompute-granularity selective &&
		compare same "$W/$m-cuda-bf16.log" "$W/$m-cuda-bf16-rc-sel.log" "$W/$m-cuda-bf16.jsonl" \
			"$W/$m-cuda-bf16-rc-sel.jsonl" "$m (e) cuda bf16, selective recomputation vs none"

	echo "# (f) context parallelism on the GPU: CP2 (two ranks on this GPU; p2p, allgather, a2a) vs cpu fp32"
	if [ -n "${NO_MPI:-}" ]; then
		echo "# (f) skipped: $NO_MPI"
	elif command -v mpirun >/dev/null 2>&1; then
		for kind in p2p allgather a2a; do
			LAUNCH="sh $ROOT/tests/mpirun.sh 2"
			# shellcheck disable=SC2086
			train "$m-cuda-cp2-$kind" --model "$m" $RUN --device cuda --context-parallel-size 2 --cp-comm-type $kind &&
				compare losses "$W/$m-cuda-cp2-$kind.jsonl" "$W/$m-cpu.jsonl" "$m (f) cuda CP2 $kind vs cpu fp32" \
					"$ITERS" 10 1e-3 1e-3 1e-5
			if grep -q 'built without MPI' "$W/$m-cuda-cp2-$kind.log" 2>/dev/null; then
				# the device bundle (make bundle: MPI=0): a skip, not a failure, from here on
				sed -i '$d' "$RES"
				NO_MPI="mgt-train was built without MPI (the device bundle); CP2 needs two ranks"
				echo "# (f) skipped: $NO_MPI"
				break
			fi
		done
		LAUNCH=
	else
		echo "# (f) skipped: mpirun not found"
	fi

	echo "# (g) fp8 (--fp8-format hybrid, delayed scaling, history 16, max) vs the cpu's emulation"
	if [ "$m" = tiny-moe ]; then
		echo "# (g) skipped: fp8 MoE layers are not implemented"
	elif "$ROOT/tests/gpu/fp8_capable.sh" 2>/dev/null; then
		F8="--bf16 --fp8-format hybrid --fp8-amax-history-len 16 --fp8-amax-compute-algo max"
		# shellcheck disable=SC2086
		{
			train "$m-cpu-fp8" --model "$m" $RUN --device cpu $F8 --fp8-trace "$W/$m-cpu-fp8.trace"
			train "$m-cuda-fp8" --model "$m" $RUN --device cuda $F8 --fp8-trace "$W/$m-cuda-fp8.trace"
		} && {
			compare losses "$W/$m-cuda-fp8.jsonl" "$W/$m-cpu-fp8.jsonl" "$m (g) cuda fp8 vs cpu fp8" "$ITERS" 10 2e-2 4e-2
			compare losses "$W/$m-cuda-fp8.jsonl" "$W/$m-cpu-bf16.jsonl" "$m (g) cuda fp8 vs cpu bf16" "$ITERS" 10 2e-2 4e-2
			check "$m (g) iteration 1: the weights' amaxes and the first forward's scales bit for bit the cpu's" \
				$PY - "$W/$m-cuda-fp8.trace" "$W/$m-cpu-fp8.trace" <<'PY'
import json, sys
a, b = (json.loads(open(f).readline()) for f in sys.argv[1:])
w = lambda o: o["amax"][1::3]
print("# %d weight amaxes; scales %d" % (len(w(a)), len(a["scale"])))
sys.exit(not (w(a) == w(b) and all(x > 0 for x in w(a)) and a["scale"][1::3] == b["scale"][1::3]))
PY
		}
	else
		echo "# (g) skipped: this GPU has no fp8 (compute capability below 8.9)"
	fi

	echo "# (d) --fp16 with loss scaling"
	# shellcheck disable=SC2086
	train "$m-cuda-fp16-s65536" --model "$m" $RUN --device cuda --fp16 --initial-loss-scale 65536 &&
		compare fp16 "$W/$m-cuda-fp16-s65536.log" "$W/$m-cuda-fp16-s65536.jsonl" "$W/$m-cuda.jsonl" \
			"$m (d) cuda fp16 initial scale 65536" "$ITERS" 5e-2 fixed
	# shellcheck disable=SC2086
	train "$m-cuda-fp16" --model "$m" $RUN --device cuda --fp16 &&
		compare fp16 "$W/$m-cuda-fp16.log" "$W/$m-cuda-fp16.jsonl" "$W/$m-cuda.jsonl" \
			"$m (d) cuda fp16 default loss scaling" "$ITERS" 5e-2 default
done

# ---------------------------------------------------------------- 3. KJV (optional)
KJV=${KJV_PREFIX:-$ROOT/demo/data/kjv_text_document}
if [ -f "$KJV.bin" ] && [ -f "$KJV.idx" ]; then
	echo "# ---- 3. tiny-gpt2 on KJV ($KJV): cuda bf16 vs cpu bf16, 20 iterations"
	mkdir -p "$W/cache"
	G=$ROOT/share/mgt/tokenizers/gpt2
	KRUN="--model tiny-gpt2 --data-path $KJV --split 969,30,1 --tokenizer-type GPT2BPETokenizer
		--vocab-file $G/vocab.json --merge-file $G/merges.txt --micro-batch-size 4 --global-batch-size 8
		--train-iters 20 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 5 --lr-decay-style cosine
		--eval-interval 0 --log-interval 1 --seed 1234 --data-cache-path $W/cache"
	# shellcheck disable=SC2086
	train kjv-cpu-bf16 $KRUN --device cpu --bf16 && train kjv-cuda-bf16 $KRUN --device cuda --bf16 &&
		compare losses "$W/kjv-cuda-bf16.jsonl" "$W/kjv-cpu-bf16.jsonl" "kjv tiny-gpt2 cuda bf16 vs cpu bf16" 20 10 1e-2 2e-2
else
	echo "# ---- 3. KJV: skipped (no $KJV.bin; set KJV_PREFIX or run make demo)"
fi

# ---------------------------------------------------------------- 4. BERT
# --model-family bert on KJV split into sentences (BertWordPieceLowerCase): the padding-mask
# attention kernels, the heads (pooler and binary head on the host), cuda vs cpu
PRE=$MGT_BIN/mgt-preprocess
BV=$ROOT/share/mgt/tokenizers/bert/vocab.txt
if [ -x "$PRE" ] && [ -f "$BV" ] && "$PRE" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" --output-prefix "$W/kjvs" \
	--tokenizer-type BertWordPieceLowerCase --vocab-file "$BV" --split-sentences --workers 4 --quiet; then
	echo "# ---- 4. BERT (2 x 256, seq 128, micro-batch 4 of 8) on KJV sentences: cuda vs cpu, 20 iterations"
	BRUN="--model-family bert --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128
		--max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 1e-3
		--lr-warmup-iters 2 --eval-interval 0 --log-interval 1 --hidden-dropout 0 --attention-dropout 0
		--tokenizer-type BertWordPieceLowerCase --vocab-file $BV --data-path $W/kjvs_text_sentence --split 949,50,1
		--data-cache-path $W/cache"
	mkdir -p "$W/cache"
	# shellcheck disable=SC2086
	train bert-cpu $BRUN --device cpu && train bert-cuda $BRUN --device cuda &&
		compare losses "$W/bert-cuda.jsonl" "$W/bert-cpu.jsonl" "bert cuda fp32 vs cpu fp32" 20 10 1e-3 1e-3 1e-5
	# shellcheck disable=SC2086
	train bert-cpu-bf16 $BRUN --device cpu --bf16 && train bert-cuda-bf16 $BRUN --device cuda --bf16 &&
		compare losses "$W/bert-cuda-bf16.jsonl" "$W/bert-cpu-bf16.jsonl" "bert cuda bf16 vs cpu bf16" 20 10 1e-2 2e-2
else
	echo "# ---- 4. BERT: skipped (no mgt-preprocess, vocab or KJV)"
fi

# ---------------------------------------------------------------- 5. T5
# --model-family t5 on KJV split into sentences (BertWordPieceCase: its sentinels): the encoder's
# padding-mask attention, the decoder's causal self-attention and cross-attention kernels
# (attn_forward/attn_backward, MGT_ATTN_CROSS), the encoder output's summed gradient, cuda vs cpu
if [ -x "$PRE" ] && [ -f "$BV" ] && "$PRE" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" --output-prefix "$W/kjvc" \
	--tokenizer-type BertWordPieceCase --vocab-file "$BV" --split-sentences --workers 4 --quiet; then
	echo "# ---- 5. T5 (2 + 2 x 256, encoder 128 / decoder 32, micro-batch 4 of 8) on KJV sentences: cuda vs cpu"
	TRUN="--model-family t5 --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128
		--decoder-seq-length 32 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8 --train-iters 20
		--lr 1e-3 --lr-warmup-iters 2 --eval-interval 0 --log-interval 1 --hidden-dropout 0 --attention-dropout 0
		--tokenizer-type BertWordPieceCase --vocab-file $BV --data-path $W/kjvc_text_sentence --split 949,50,1
		--data-cache-path $W/cache"
	mkdir -p "$W/cache"
	# shellcheck disable=SC2086
	train t5-cpu $TRUN --device cpu && train t5-cuda $TRUN --device cuda &&
		compare losses "$W/t5-cuda.jsonl" "$W/t5-cpu.jsonl" "t5 cuda fp32 vs cpu fp32" 20 10 1e-3 1e-3 1e-5
	# shellcheck disable=SC2086
	train t5-cpu-bf16 $TRUN --device cpu --bf16 && train t5-cuda-bf16 $TRUN --device cuda --bf16 &&
		compare losses "$W/t5-cuda-bf16.jsonl" "$W/t5-cpu-bf16.jsonl" "t5 cuda bf16 vs cpu bf16" 20 10 1e-2 2e-2
	# T5's relative position bias (attn_forward / attn_backward with mgt_attn.bias: the fp32 attention kernels with the
	# bias, dS through scratch and its sums by distance into the tables' gradients), same bounds
	REL="--position-embedding-type relative"
	# shellcheck disable=SC2086
	train t5r-cpu $TRUN $REL --device cpu && train t5r-cuda $TRUN $REL --device cuda &&
		compare losses "$W/t5r-cuda.jsonl" "$W/t5r-cpu.jsonl" "t5 relative positions cuda fp32 vs cpu fp32" 20 10 \
			1e-3 1e-3 1e-5
	# shellcheck disable=SC2086
	train t5r-cpu-bf16 $TRUN $REL --device cpu --bf16 && train t5r-cuda-bf16 $TRUN $REL --device cuda --bf16 &&
		compare losses "$W/t5r-cuda-bf16.jsonl" "$W/t5r-cpu-bf16.jsonl" "t5 relative positions cuda bf16 vs cpu bf16" \
			20 10 1e-2 2e-2
else
	echo "# ---- 5. T5: skipped (no mgt-preprocess, vocab or KJV)"
fi

finish
