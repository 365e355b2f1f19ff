#!/bin/sh
# mgt-train with distributed-optimizer instances (--num-distributed-optimizer-instances N, hybrid
# sharding; megatron/core/parallel_state.py and param_and_grad_buffer.py): DP4 with 2 instances
# gives the single-process losses step by step (fp32, relative difference <= 1e-5, dropout on)
# under --use-distributed-optimizer and --use-megatron-fsdp's optim, optim_grads and
# optim_grads_params (Megatron-FSDP's HSDP, outer no_shard); the bytes each rank's communicators
# count equal Megatron's (comm_volume.py inst=2: reduce-scatter and all-gather over the instance,
# the owned shard all-reduced across instances -- once per step, in the last micro-batch's
# backward, under FSDP -- the norm over the instance); the
# computed optimizer state is that of the instance's ranks (DP4 with 2 instances = DP2); a
# checkpoint saved under 2 instances resumes under plain DP2 with the distributed optimizer and
# bitwise under its own layout, one saved under DP2 resumes under 2 instances, and one saved under
# 2 instances with optim_grads_params (parameters from the shards) resumes in one process; what Megatron
# refuses, or mgt does not implement, is refused with exit 2 naming both flags.
# Tiers (lib.sh): the quick tier runs DP4 x 2 instances (distributed optimizer, several buckets
# overlapped with the backward; optim_grads; optim_grads_params), the memory and checkpoint checks
# and the refusals; the full tier adds --use-megatron-fsdp optim, 4 instances of one rank (no
# sharding left, all-reduce only), TP2 x DP2 x 2 instances with sequence parallelism,
# PP2 x DP2 x 2 instances with optim_grads_params and DP6 x 3 instances (the instance's padding).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
kjv_parallel_data
SEQ=32 MBS=2 GBS=8
train() { train_kjv "$@"; }
volume() { kjv_volume "$@"; }
V1="--make-vocab-size-divisible-by 512" V2="--make-vocab-size-divisible-by 256"
PAD=vocab=1536
N=--num-distributed-optimizer-instances
D="--use-distributed-optimizer $N"
F="--use-megatron-fsdp --data-parallel-sharding-strategy"
G=tiny-gpt2
# Bucket of 20000 elements (tiny-gpt2 has about 1.6e5 in its chunk): several buckets, reduced
# during the backward, each with its inter-instance all-reduce.
B="--overlap-grad-reduce --ddp-bucket-size 20000"
# run_layouts REF: the layouts on stdin (tier, processes, name, comm_volume keys, flags) trained
# with --comm-log, their losses against REF's, their bytes against comm_volume.py's
run_layouts() {
	_ref=$1
	while read -r tier np name kv flags; do
		if [ $tier = full ] && quick; then skip "$name (full tier: make check-full)"; continue; fi
		ok "$name: trains" train "$np" $G "$name" --comm-log "$name" $flags
		ok "$name: losses of the 10 steps match the single process" losses_same "$_ref" "$name"
		ok "$name: bytes per rank per step = Megatron's (instances)" volume "$np" $G "$name" $PAD $kv
	done
}
ok "$G: single process" train 1 $G ref $V1
run_layouts ref <<LAYOUTS
quick 4 dp4-i2 distopt=1,inst=2,bucket=20000 $V1 $D 2 $B
full 4 dp4-i2-fsdp distopt=1,inst=2 $V1 $F optim $N 2
full 4 dp4-i2-og fsdp=og,inst=2 $V1 $F optim_grads $N 2
full 4 dp4-i2-ogp fsdp=ogp,inst=2 $V1 $F optim_grads_params $N 2
full 4 dp4-i4 distopt=1,inst=4 $V1 $D 4
full 4 tp2-dp2-i2 distopt=1,inst=2,tp=2,sp=1 $V2 $D 2 --tensor-model-parallel-size 2 --sequence-parallel
LAYOUTS
# Two micro-batches a rank (global batch 16): FSDP's shards accumulate the instance's
# reduce-scatters and are all-reduced across the instances in the last backward only.
GBS=16
ok "$G: single process, global batch 16" train 1 $G ref16 $V1
run_layouts ref16 <<LAYOUTS
quick 4 dp4-i2-og-m2 fsdp=og,inst=2 $V1 $F optim_grads $N 2
quick 4 dp4-i2-ogp-m2 fsdp=ogp,inst=2 $V1 $F optim_grads_params $N 2
full 4 dp4-i2-m2 distopt=1,inst=2 $V1 $D 2
full 4 pp2-dp2-i2-ogp-m2 fsdp=ogp,inst=2,pp=2 $V1 $F optim_grads_params $N 2 --pipeline-model-parallel-size 2
LAYOUTS
# DP 6 with 3 instances of 2 (global batch 12): buckets padded to lcm(2, 128) = 128 elements, the
# instance's, not lcm(6, 128) = 384 (param_and_grad_buffer.py pads to its group's size).
GBS=12
if full_only "DP6 x 3 instances"; then
	ok "$G: single process, global batch 12" train 1 $G ref12 $V1
	run_layouts ref12 <<LAYOUTS
full 6 dp6-i3 distopt=1,inst=3 $V1 $D 3
LAYOUTS
fi
GBS=8

# The memory line (lib/train/log.c): the optimizer state is counted over the instance's ranks,
# so DP4 with 2 instances computes DP2's optimizer state (the same buckets: lcm(2, 128) padding).
# optimizer MiB of the memory line of NAME.err
opt_mib() { sed -n 's/^memory after training: computed [0-9.]* MiB (parameters [0-9.]*, gradients [0-9.]*, optimizer \([0-9.]*\).*/\1/p' "$1.err" | head -1; }
same_opt() {
	a=$(opt_mib "$1") b=$(opt_mib "$2")
	echo "# optimizer state: $1 $a MiB, $2 $b MiB"
	[ -n "$a" ] && [ "$a" = "$b" ]
}
ratio() { grep -o 'peak RSS over that / computed: [0-9.]*' "$1.err" | sed 's/^/# '"$1"': /'; }

# Checkpoints: saved under DP4 x 2 instances at iteration 5 (only the first instance writes the
# optimizer's shards), resumed under plain DP2 with the distributed optimizer (iterations 6-10
# match the uninterrupted run) and under its own layout (bitwise); one saved under DP2 resumes
# under DP4 x 2 instances.
ok "save under DP4 x 2 instances at iteration 5" train 4 $G save $V1 $D 2 $B --save ck --exit-interval 5
ok "  only the first instance wrote shards (data-parallel ranks 0 and 1)" eval 'ls ck/iter_0000005/model_tp00_pp000_dp001.h5 >/dev/null && no_files ck/iter_0000005/model_tp00_pp000_dp00[23]*.h5'
ok "resume under DP2 with the distributed optimizer" train 2 $G r-dp2 $V1 --use-distributed-optimizer --load ck
ok "  losses 6-10 match" losses_same ref r-dp2 6
ok "resume under the same layout" train 4 $G r-same $V1 $D 2 $B --load ck
ok "  losses and grad norms 6-10 bitwise identical to the uninterrupted run" losses_exact dp4-i2 r-same
ok "save under DP2 with the distributed optimizer at iteration 5" train 2 $G save-dp2 $V1 --use-distributed-optimizer --save ck2 --exit-interval 5
ok "resume it under DP4 x 2 instances" train 4 $G r-i2 $V1 $D 2 --load ck2
ok "  losses 6-10 match" losses_same ref r-i2 6
ok "save under DP4 x 2 instances optim_grads_params at iteration 5" train 4 $G save-ogp $V1 $F optim_grads_params $N 2 --save ck3 --exit-interval 5
ok "resume it under one process" train 1 $G r-ogp-single $V1 --load ck3
ok "  losses 6-10 match" losses_same ref r-ogp-single 6
ok "memory line: DP4 x 2 instances counts DP2's optimizer state" same_opt dp4-i2 r-dp2
ratio dp4-i2; ratio r-dp2

# Refusals: exit 2 before training, naming both flags (one process: a data-parallel size of 1).
refused() {
	needle=$1; shift
	exits 2 "$BIN/mgt-train" --model $G $BPE --data-path kjv_text_document --split 98,2,0 --data-cache-path cache \
		--seq-length $SEQ --micro-batch-size $MBS --train-iters 2 --save never "$@" && err_has "$needle" && no_files never
}
ok "instances not dividing the data-parallel size" refused "--num-distributed-optimizer-instances 2 does not divide the data-parallel size 1" $D 2
ok "instances without the distributed optimizer" refused "--num-distributed-optimizer-instances 2 needs --use-distributed-optimizer" --num-distributed-optimizer-instances 2
ok "instances with FSDP no_shard" refused "--num-distributed-optimizer-instances 2 with --data-parallel-sharding-strategy no_shard" $F no_shard $N 2
ok "instances with --use-torch-fsdp2" refused "--num-distributed-optimizer-instances 2 with --use-torch-fsdp2" --use-torch-fsdp2 $N 2
ok "instances with --fp8-param-gather" refused "--num-distributed-optimizer-instances 2 with --fp8-param-gather" $D 2 --bf16 --fp8-format hybrid --fp8-param-gather
ok "instances with --megatron-fsdp-grad-comm-dtype bf16" refused "--num-distributed-optimizer-instances 2 with --megatron-fsdp-grad-comm-dtype bf16" $F optim_grads $N 2 --megatron-fsdp-grad-comm-dtype bf16
ok "--outer-dp-sharding-strategy optim" refused "--outer-dp-sharding-strategy" --use-megatron-fsdp --outer-dp-sharding-strategy optim
ok "--enable-full-sharding-in-hsdp" refused "--enable-full-sharding-in-hsdp" --use-megatron-fsdp --enable-full-sharding-in-hsdp
done_testing
