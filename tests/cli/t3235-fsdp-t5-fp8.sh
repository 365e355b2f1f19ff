#!/bin/sh
# mgt-train with Megatron-FSDP (lib/train/fsdp.c) beyond t3230's cases: optim_grads_params
# (ZeRO-3) where the parameter hook covers two stacks or gathers fp8 weights, and gradients
# reduced in 16 bits (TAP):
#   - T5 (--model-family t5): the encoder's and the decoder's layer units gathered before each
#     layer's forward and backward (lib/model/t5.c): DP2 optim_grads_params gives optim_grads's
#     losses and grad norms bit for bit (the same reduce-scatters, the parameters gathered back
#     exactly) and the single process's within 1e-5 (dropout on); with relative positions
#     (the bias tables outside the units) in the full tier;
#   - --fp8-param-gather (lib/model/fp8lin.c): each rank casts its shards of the layer units to
#     fp8 after the step and keeps them; the hook all-gathers them per layer (1 byte an fp8
#     weight element), unpacks the weight bytes and rebuilds their transposes.  Delayed and
#     tensorwise scaling under DP2 with one micro-batch a rank: the losses equal the distributed
#     optimizer's --fp8-param-gather bit for bit, the grad norms within 1e-12 (relative: the
#     squares are summed over other buckets); lm losses and grad norms equal optim_grads's bit for
#     bit (the same buckets); within 2e-3 of one process's (t3310's bound: one process updates
#     the delayed scales after each of its two micro-batches, DP2 once a step with both ranks'
#     amaxes); the bytes per rank (comm_volume.py fsdp=ogp,fp8pg=1: packed shards, the amaxes'
#     all-reduces) exactly, and fewer than the fp32 gathers'; a checkpoint saved at iteration 3
#     resumes bit for bit, and under the distributed optimizer gives its losses; PP2 x DP2 and
#     TP2 x DP2 with sequence parallelism (full tier) against the distributed optimizer, and
#     their bytes.
#   - --megatron-fsdp-grad-comm-dtype bf16 (Megatron-FSDP's grad_comm_dtype): with one
#     micro-batch a rank, optim and optim_grads_params equal the distributed optimizer with
#     --grad-reduce-in-bf16 bit for bit (the same bf16 reduction of the same fp32 gradients; the
#     grad norms of optim_grads_params within 1e-12, summed over its own buckets);
#     with two, optim_grads_params equals optim_grads bit for bit, differs from the fp32
#     reduction (each micro-batch's reduce-scatter rounded to bf16, its result added to the fp32
#     shard) by under 1e-3 in the losses but not 0, and under 1e-2 in the grad norms (both
#     micro-batches' gradients are in the shard), and moves 2-byte gradients (comm_volume.py
#     gradbf16=1); fp16 trains; a word other than fp32, bf16, fp16 or auto is refused, and the flag
#     without --use-megatron-fsdp is said to be ignored.
# Under mpirun only (a TAP skip without it).  Tiers (lib.sh): the full tier adds T5 with relative
# positions, and PP2 x DP2 and TP2 x DP2 with --fp8-param-gather.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
command -v mpirun >/dev/null 2>&1 || { echo "1..0 # SKIP mpirun not found"; exit 0; }
F="--use-megatron-fsdp --data-parallel-sharding-strategy"

# ---- T5 ----
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
WP="--tokenizer-type BertWordPieceCase --vocab-file $VOCAB"
ok "KJV split into sentences, cased WordPiece ids" exits 0 $BIN/mgt-preprocess --input "$SHARE/data/kjv.jsonl.zst" \
	--output-prefix kjv $WP --split-sentences --workers 2
T5="$BIN/mgt-train --model-family t5 --num-layers 2 --hidden-size 32 --num-attention-heads 4
 --seq-length 32 --decoder-seq-length 16 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8
 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-style cosine --lr-decay-iters 20 --min-lr 1e-4 --weight-decay 0.01
 --clip-grad 1.0 --log-interval 1 --eval-interval 0 $WP --data-path kjv_text_sentence --split 949,50,1
 --device cpu --threads 1 --train-iters 5 --make-vocab-size-divisible-by 1"
ok "T5: one process" exits 0 $T5 --metrics-file t5-one.jsonl
ok "T5 DP2 optim_grads" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads --metrics-file t5-og.jsonl
ok "T5 DP2 optim_grads_params" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads_params --metrics-file t5-ogp.jsonl
ok "  lm losses and grad norms bitwise optim_grads's" losses_exact t5-og t5-ogp
ok "  lm losses of the 5 steps within 1e-5 of one process's" losses_same t5-one t5-ogp
if full_only "T5 DP2 optim_grads_params with relative positions"; then
	ok "T5 DP2 optim_grads_params with relative positions" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $T5 $F optim_grads_params \
		--position-embedding-type relative --metrics-file t5r-ogp.jsonl
	ok "  relative positions: one process" exits 0 $T5 --position-embedding-type relative --metrics-file t5r-one.jsonl
	ok "  lm losses within 1e-5 of one process's" losses_same t5r-one t5r-ogp
fi

# ---- --fp8-param-gather ----
G="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 0
 --lr-decay-style constant --eval-interval 0 --log-interval 1 --threads 1 --device cpu --bf16
 --fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max"
P8=--fp8-param-gather
mpi() { _n=$1 _name=$2; shift 2; launch "$_n" "$_name" "$@" --metrics-file "$_name.jsonl"; }
# same A B: on the iterations B logged (3 or more, A has every one of them) lm losses equal,
# grad norms within 1e-12 (relative)
same() {
	$PY - "$@" <<'PY'
import json, sys
L = lambda f: {o["iteration"]: (o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f + ".jsonl"))}
a, b = L(sys.argv[1]), L(sys.argv[2])
assert len(b) >= 3 and all(i in a and a[i][0] == v[0] for i, v in b.items()), (a, b)
d = max(abs(a[i][1] - v[1]) / a[i][1] for i, v in b.items())
print(f"# {sys.argv[2]}: losses bitwise {sys.argv[1]}'s, grad norms within {d:.1e}")
sys.exit(d > 1e-12)
PY
}
# near A B: lm losses within 2e-3 (relative)
near() {
	$PY - "$@" <<'PY'
import json, sys
L = lambda f: [o["lm_loss"] for o in map(json.loads, open(f + ".jsonl"))]
a, b = L(sys.argv[1]), L(sys.argv[2])
d = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) > 0 else 1.0
print(f"# {sys.argv[2]}: max relative loss difference to {sys.argv[1]} {d:.2e}")
sys.exit(d >= 2e-3)
PY
}
vol() { $PY "$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" "$@" mbs=2 gbs=4 seq=32 vocab=512 prec=bf16; }
data_bytes() { $PY -c "import json,sys; print(json.loads(open(sys.argv[1] + '.rank0.jsonl').readline())['bytes']['data'])" "$1"; }
ok "fp8: one process" exits 0 $G --train-iters 6 --metrics-file f8-one.jsonl
ok "fp8 DP2 distributed optimizer $P8" mpi 2 f8-do $G --train-iters 6 $P8 --use-distributed-optimizer --comm-log f8-do
ok "fp8 DP2 optim_grads $P8" mpi 2 f8-og $G --train-iters 6 $P8 $F optim_grads
ok "fp8 DP2 optim_grads_params $P8" mpi 2 f8-ogp $G --train-iters 6 $P8 $F optim_grads_params --comm-log f8-ogp \
	--save ck8 --save-interval 3
ok "fp8 DP2 optim_grads_params, fp32 parameter gathers" mpi 2 f32-ogp $G --train-iters 6 $F optim_grads_params \
	--comm-log f32-ogp
ok "  losses bitwise the distributed optimizer's" same f8-do f8-ogp
ok "  lm losses and grad norms bitwise optim_grads's" losses_exact f8-og f8-ogp
ok "  lm losses within 2e-3 of one process's" near f8-one f8-ogp
ok "  bytes per rank per step = the packed per-layer gathers'" vol f8-ogp 2 fsdp=ogp fp8=delayed fp8pg=1
ok "  the distributed optimizer's too" vol f8-do 2 distopt=1 fp8=delayed fp8pg=1
ok "  the fp32 gathers' too" vol f32-ogp 2 fsdp=ogp fp8=delayed
ok "  fewer bytes than the fp32 gathers" test "$(data_bytes f8-ogp)" -lt "$(data_bytes f32-ogp)"
ok "  resumed from iteration 3" mpi 2 f8-ogp-r $G --train-iters 6 $P8 $F optim_grads_params --load ck8 --ckpt-step 3
ok "  losses and grad norms 4-6 bitwise the uninterrupted run's" losses_exact f8-ogp f8-ogp-r
ok "  resumed from iteration 3 under the distributed optimizer $P8" mpi 2 f8-do-r $G --train-iters 6 $P8 \
	--use-distributed-optimizer --load ck8 --ckpt-step 3
ok "  losses 4-6 bitwise the distributed optimizer's uninterrupted run" same f8-do f8-do-r
TW="--train-iters 3 --fp8-recipe tensorwise $P8"
ok "tensorwise fp8 DP2 distributed optimizer $P8" mpi 2 tw-do $G $TW --use-distributed-optimizer
ok "tensorwise fp8 DP2 optim_grads_params $P8" mpi 2 tw-ogp $G $TW $F optim_grads_params --comm-log tw-ogp
ok "  losses bitwise the distributed optimizer's" same tw-do tw-ogp
ok "  bytes per rank per step (the weights' amaxes reduced once a step)" vol tw-ogp 2 fsdp=ogp fp8=tensorwise fp8pg=1
if full_only "fp8 PP2 x DP2 and TP2 x DP2 optim_grads_params $P8"; then
	ok "fp8 PP2 x DP2 distributed optimizer $P8" mpi 4 pp-do $G --train-iters 4 $P8 --use-distributed-optimizer \
		--pipeline-model-parallel-size 2
	ok "fp8 PP2 x DP2 optim_grads_params $P8" mpi 4 pp-ogp $G --train-iters 4 $P8 $F optim_grads_params \
		--pipeline-model-parallel-size 2 --comm-log pp-ogp
	ok "  losses bitwise the distributed optimizer's" same pp-do pp-ogp
	ok "  bytes per rank per step" vol pp-ogp 4 fsdp=ogp,pp=2 fp8=delayed fp8pg=1
	TP="--tensor-model-parallel-size 2 --sequence-parallel"
	ok "fp8 TP2 x DP2 (SP) distributed optimizer $P8" mpi 4 tp-do $G --train-iters 4 $P8 --use-distributed-optimizer $TP
	ok "fp8 TP2 x DP2 (SP) optim_grads_params $P8" mpi 4 tp-ogp $G --train-iters 4 $P8 $F optim_grads_params $TP \
		--comm-log tp-ogp
	ok "  losses bitwise the distributed optimizer's" same tp-do tp-ogp
	ok "  bytes per rank per step (the fp8 norm outputs gathered in fp32)" vol tp-ogp 4 fsdp=ogp,tp=2,sp=1 fp8=delayed \
		fp8pg=1
fi

# ---- --megatron-fsdp-grad-comm-dtype ----
C="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --lr 1e-3 --lr-warmup-iters 0 --lr-decay-style constant
 --eval-interval 0 --log-interval 1 --threads 1 --device cpu --bf16 --train-iters 5"
GC=--megatron-fsdp-grad-comm-dtype
ok "DP2 distributed optimizer --grad-reduce-in-bf16, one micro-batch a rank" mpi 2 gc-do $C --global-batch-size 4 \
	--use-distributed-optimizer --grad-reduce-in-bf16
ok "DP2 optim $GC bf16" mpi 2 gc-o $C --global-batch-size 4 $F optim $GC bf16
ok "  lm losses and grad norms bitwise" losses_exact gc-do gc-o
ok "DP2 optim_grads_params $GC bf16" mpi 2 gc-ogp1 $C --global-batch-size 4 $F optim_grads_params $GC bf16 --comm-log gc-ogp1
ok "  lm losses bitwise, grad norms within 1e-12 (other buckets)" same gc-do gc-ogp1
ok "  bytes per rank per step (2-byte reduce-scatters)" vol gc-ogp1 2 fsdp=ogp gradbf16=1
ok "two micro-batches a rank: optim_grads_params, fp32 reduction" mpi 2 gc-ogp32 $C --global-batch-size 8 $F optim_grads_params
ok "  optim_grads $GC bf16" mpi 2 gc-og2 $C --global-batch-size 8 $F optim_grads $GC bf16
ok "  optim_grads_params $GC bf16" mpi 2 gc-ogp2 $C --global-batch-size 8 $F optim_grads_params $GC bf16 --comm-log gc-ogp2
ok "  lm losses and grad norms bitwise optim_grads's" losses_exact gc-og2 gc-ogp2
ok "  lm losses within 1e-3 and grad norms within 1e-2 of the fp32 reduction's, not equal" $PY - <<'PY'
import json
L = lambda f, k: [o[k] for o in map(json.loads, open(f + ".jsonl"))]
rel = lambda a, b: max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 5 else 1.0
d = rel(L("gc-ogp32", "lm_loss"), L("gc-ogp2", "lm_loss"))
n = rel(L("gc-ogp32", "grad_norm"), L("gc-ogp2", "grad_norm"))
print(f"# bf16 against fp32 gradient reduce-scatters: max relative difference of losses {d:.2e}, grad norms {n:.2e}")
assert 0 < d < 1e-3 and n < 1e-2, (d, n)
PY
vol8() { $PY "$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-gpt2.json" "$@" mbs=2 gbs=8 seq=32 vocab=512 prec=bf16; }
ok "  bytes per rank per step" vol8 gc-ogp2 2 fsdp=ogp gradbf16=1
ok "  fp16: trains" mpi 2 gc-f16 $C --global-batch-size 8 $F optim_grads_params $GC fp16
gcref() { exits 2 $C --global-batch-size 4 --train-iters 1 "$@"; }
ok "$GC fp8 refused" gcref $F optim_grads $GC fp8
ok "  naming the words" err_has "$GC: expected fp32, fp16, bf16 or auto, got 'fp8'"
ok "$GC bf16 without --use-megatron-fsdp: said to be ignored" exits 0 $C --global-batch-size 4 --train-iters 1 $GC bf16
ok "  naming Megatron-FSDP" err_has "megatron-fsdp-grad-comm-dtype.*--use-megatron-fsdp"

done_testing
