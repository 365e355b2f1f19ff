#!/bin/sh
# mgt-train with fully sharded data parallelism (--use-megatron-fsdp, --data-parallel-sharding-strategy;
# lib/train/fsdp.c): every strategy gives the single-process losses step by step (fp32, relative
# difference <= 1e-5, dropout on); the bytes each rank's communicators count equal Megatron-FSDP's
# volume (comm_volume.py fsdp=og|ogp: reduce-scatters every micro-batch, parameter gathers before
# each layer's forward and backward); a checkpoint saved from the shards resumes under other
# strategies and layouts, and bitwise under its own; what Megatron refuses, or mgt does not
# implement, is refused naming both flags.
# Tiers (lib.sh): the quick tier runs tiny-gpt2 under DP2 with optim_grads and optim_grads_params,
# TP2 x DP2 with SP and PP2 x DP2 with optim_grads_params (every path of fsdp.c: units, hooks,
# pipeline chunks, the sequence-parallel and tied-embedding all-reduces over sharded buckets),
# the checkpoint round and the refusals; the full tier adds DP4 with both strategies, optim_grads
# under TP2 x DP2 and PP2 x DP2, virtual
# pipeline stages, full recomputation, --use-torch-fsdp2, tiny-moe under EP2 (expert buckets over
# the expert-data group), tiny-llama under CP2 x DP2 and bf16.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
kjv_parallel_data
SEQ=32 MBS=2 GBS=8
# train NP MODEL NAME [flags]: 10 iterations; metrics NAME.jsonl
train() { train_kjv "$@"; }
volume() { kjv_volume "$@"; }
# bf16 against the bf16 single process: the distributed optimizer's own bound (rounding of the
# 16-bit sums in another order: 1.5e-5 for DP2 distopt, 2.1e-5 for DP2 optim_grads_params)
near() {
	$PY - "$@" <<'PY'
import json, sys
L = lambda f: [o["lm_loss"] for o in map(json.loads, open(f + ".jsonl")) if "grad_norm" in o]
a, b = L(sys.argv[1]), L(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 10 else 1.0
print(f"# {sys.argv[2]}: max relative difference {worst:.2e}")
sys.exit(worst > 1e-4)
PY
}
V1="--make-vocab-size-divisible-by 512" V2="--make-vocab-size-divisible-by 256"
PAD=vocab=1536
F="--use-megatron-fsdp --data-parallel-sharding-strategy"
G=tiny-gpt2
ok "$G: single process" train 1 $G ref $V1
while read -r tier np name kv flags; do
	if [ $tier = full ] && quick; then skip "$name (full tier: make check-full)"; continue; fi
	ok "$name: trains" train "$np" $G "$name" --comm-log "$name" $flags
	ok "$name: losses of the 10 steps match the single process" losses_same ref "$name"
	ok "$name: bytes per rank per step = Megatron-FSDP's" volume "$np" $G "$name" $PAD $kv
done <<LAYOUTS
quick 2 dp2-og fsdp=og $V1 $F optim_grads
quick 2 dp2-ogp fsdp=ogp $V1 $F optim_grads_params
quick 4 tp2-dp2-ogp fsdp=ogp,tp=2,sp=1 $V2 $F optim_grads_params --tensor-model-parallel-size 2 --sequence-parallel
quick 4 pp2-dp2-ogp fsdp=ogp,pp=2 $V1 $F optim_grads_params --pipeline-model-parallel-size 2
full 4 dp4-og fsdp=og $V1 $F optim_grads
full 4 tp2-dp2-og fsdp=og,tp=2,sp=1 $V2 $F optim_grads --tensor-model-parallel-size 2 --sequence-parallel
full 4 pp2-dp2-og fsdp=og,pp=2 $V1 $F optim_grads --pipeline-model-parallel-size 2
full 4 dp4-ogp fsdp=ogp $V1 $F optim_grads_params
full 4 pp2-vp2-dp2-ogp fsdp=ogp,pp=2,vp=2 $V1 $F optim_grads_params --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
full 2 dp2-ogp-recompute fsdp=ogp $V1 $F optim_grads_params --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
full 2 dp2-fsdp2 fsdp=ogp $V1 --use-torch-fsdp2
full 2 dp2-fsdp2-noreshard fsdp=og $V1 --use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward
LAYOUTS
if full_only "--use-torch-fsdp2 says what it runs"; then
	ok "--use-torch-fsdp2 says what it runs" grep -q "^--use-torch-fsdp2: running mgt's Megatron-FSDP sharding, --data-parallel-sharding-strategy optim_grads_params" dp2-fsdp2.err
fi
if full_only "tiny-moe EP2 x DP4, tiny-llama CP2 x DP2, bf16"; then
	ok "tiny-moe: single process" train 1 tiny-moe moe-ref $V1
	ok "tiny-moe EP2 x DP4 optim_grads_params: trains" train 4 tiny-moe moe-ep2 $V1 $F optim_grads_params --expert-model-parallel-size 2
	ok "  losses match the single process" losses_same moe-ref moe-ep2
	ok "tiny-llama: single process" train 1 tiny-llama ll-ref $V1
	ok "tiny-llama CP2 x DP2 optim_grads_params: trains" train 4 tiny-llama ll-cp2 $V1 $F optim_grads_params --context-parallel-size 2
	ok "  losses match the single process" losses_same ll-ref ll-cp2
	ok "bf16: single process" train 1 $G bf-ref $V1 --bf16
	ok "bf16 DP2 optim_grads_params: trains" train 2 $G bf-ogp $V1 --bf16 $F optim_grads_params
	ok "  losses within 1e-4 of the bf16 single process" near bf-ref bf-ogp
fi

# Checkpoints from the shards: saved under DP2 optim_grads_params at iteration 5, resumed under
# other strategies and layouts (iterations 6-10 match the uninterrupted run) and under its own
# (bitwise); a distributed-optimizer checkpoint resumes under optim_grads_params.
ok "save under DP2 optim_grads_params at iteration 5" train 2 $G save $V1 $F optim_grads_params --save ck --exit-interval 5
ok "resume under one process" train 1 $G r-single $V1 --load ck
ok "  losses 6-10 match" losses_same ref r-single 6
ok "resume under TP2 x DP2 optim_grads" train 4 $G r-tp2 $V2 --tensor-model-parallel-size 2 $F optim_grads --load ck
ok "  losses 6-10 match" losses_same ref r-tp2 6
ok "resume under the same strategy" train 2 $G r-same $V1 $F optim_grads_params --load ck
ok "  losses and grad norms 6-10 bitwise identical to the uninterrupted run" losses_exact dp2-ogp r-same
ok "save under DP2 with the distributed optimizer at iteration 5" train 2 $G save-do $V1 --use-distributed-optimizer --save ck-do --exit-interval 5
ok "resume it under DP2 optim_grads_params" train 2 $G r-do-ogp $V1 $F optim_grads_params --load ck-do
ok "  losses 6-10 match" losses_same ref r-do-ogp 6

# Refusals: exit 2 before training, naming both flags.
refused() {
	needle=$1; shift
	exits 2 "$BIN/mgt-train" --model $G $BPE --data-path kjv_text_document --split 98,2,0 --data-cache-path cache \
		--seq-length $SEQ --micro-batch-size $MBS --train-iters 2 --save never "$@" && err_has "$needle" && no_files never
}
ok "an unknown strategy" refused "--data-parallel-sharding-strategy: expected no_shard, optim, optim_grads or optim_grads_params, got 'zero3'" $F zero3
ok "--use-torch-fsdp2 with --use-distributed-optimizer" refused "--use-torch-fsdp2 with --use-distributed-optimizer" --use-torch-fsdp2 --use-distributed-optimizer
ok "--use-torch-fsdp2 with --fp16" refused "--use-torch-fsdp2 with --fp16" --use-torch-fsdp2 --fp16
ok "both FSDPs" refused "--use-megatron-fsdp with --use-torch-fsdp2" --use-megatron-fsdp --use-torch-fsdp2
ok "optim_grads with --grad-reduce-in-bf16" refused "optim_grads with --grad-reduce-in-bf16" $F optim_grads --bf16 --grad-reduce-in-bf16
ok "no_shard with --fp8-param-gather" refused "--fp8-param-gather needs --use-distributed-optimizer, or --use-megatron-fsdp" $F no_shard --bf16 --fp8-format hybrid --fp8-param-gather
ok "--torch-fsdp2-no-reshard-after-forward alone" refused "--torch-fsdp2-no-reshard-after-forward needs --use-torch-fsdp2" --torch-fsdp2-no-reshard-after-forward
ok "HSDP with the optimizer sharded across instances" refused "--outer-dp-sharding-strategy" $F optim_grads_params --num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy optim
done_testing
