#!/bin/sh
# tests/gpu/device-run.sh all|quick|check|bench|profile|info|fsdp-fit: run the GPU checks and benchmarks on a GPU
# machine that has the CUDA libraries but none of mgt's Debian libraries and cannot build mgt (the
# lent GPU machine), from the bundle packed here by `make device-pack` into .device/ (an ignored
# folder the device tool carries: carry [".device"]).  Each mode fits one 10-minute call:
#   all      the lease's one call (tests/bench/README.md): every question at once, each
#            step under its own time limit and all of them under BUDGET seconds (520), most
#            wanted first, so that a hang or an overrun costs only the steps after it:
#              1. test_cuda_ops: every op against the CPU (the mma probe and the two attention
#                 implementations first) -> $OUT/test_cuda_ops.txt
#              2. tests/bench/gpu.sh: the GEMM ceilings and attention microbenchmarks (both
#                 implementations, bf16 and fp32 io), gpt2-124m at micro-batch 8 and at the
#                 largest of 64/32/16, llama-3.2-1b at 4, mamba2-130m (issue 48) beside PyTorch's
#                 chunked-SSD reference path, the A/B variants of AB
#                 (MGT_ATTN_KERNEL=mma-nocp, mma-mb2; MGT_GEMM_D16=0), PyTorch (torch.compile) at the same shapes
#                 -> $OUT/gpu-<device>-<date>.txt
#              3. tests/gpu/profile.sh: ncu's kernel times of two steps of each model
#                 -> $OUT/profile-<model>.csv.gz
#              4. tests/gpu/check.sh without its op part, 30 iterations: the training checks
#                 -> $OUT/check-gpu-results.txt, check-gpu-logs.tar.gz
#            and everything printed -> $OUT/run.log (7 files; at most 8 come back)
#   quick    a shorter second call (BUDGET 250 s) after a fix: 1 as in all, 2 without PyTorch or
#            the largest micro-batch (their figures from the first call on the same kind), with
#            A/B variants for llama-3.2-1b too (AB_LLAMA, MGT_GEMM_D16=0), 3, and 4 for tiny-gpt2
#   info     the machine: nvidia-smi, nvcc, where cuBLASLt and NCCL are, ldd of mgt-train
#   check    tests/gpu/check.sh (every CUDA op against the CPU op, model and training checks)
#   bench    tests/bench/gpu.sh kjv (GEMM ceiling, gpt2-124m and llama-3.2-1b tokens/s and MFU)
#   profile  tests/gpu/profile.sh
#   fsdp-fit not in all or quick (a call of its own, when asked for): tests/gpu/fsdp_fit.sh, the
#            largest llama-3.1-8b-shaped model by layers that trains 2 iterations without and with
#            full recomputation and with --use-megatron-fsdp optim_grads_params, each search
#            under BUDGET seconds (520) -> $OUT/fsdp-fit.txt (one process: DP1, see the script)
# Results go to $OUT (at most 8 files come back) and, for bench, tests/bench/results/.
# DRY=1 (all): print each step's command and limit instead of running it (a check of the script
# on a machine without a GPU).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
mode=${1:-all}
B=$ROOT/.device/mgt-bundle
if [ ! -x "$B/bin/mgt-train" ]; then
	[ -f .device/mgt-bundle.tar.xz ] || { echo "no .device/mgt-bundle.tar.xz: run make device-pack and carry .device"; exit 2; }
	(cd .device && xz -dc mgt-bundle.tar.xz | tar xf -) || exit 2
fi
# device-pack leaves share/ out of the archive (the working tree travels with it): the presets,
# tokenizers and data the programs look for in BIN/../share/mgt come from the tree
[ -e "$B/share" ] || ln -s "$ROOT/share" "$B/share"
. "$B/env.sh"
export MGT_BIN="$B/bin" TEST_CUDA_OPS="$B/libexec/test_cuda_ops" GEMM_CEILING="$B/libexec/gemm_ceiling"
info() {
	nvidia-smi || true
	nvcc --version 2>/dev/null | tail -2
	ls "${CUDA_HOME:-/usr/local/cuda}/lib64" 2>/dev/null | grep -E 'cublasLt|nccl' | head
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	ldd "$MGT_BIN/mgt-train"
}
# step NAME LIMIT CMD...: CMD under min(LIMIT, the seconds left before DEADLINE less 5); skipped
# when under 20 s are left
step() {
	n=$1 lim=$2
	shift 2
	left=$((DEADLINE - $(date +%s) - 5))
	[ "$left" -lt "$lim" ] && lim=$left
	if [ "$lim" -lt 20 ]; then
		echo "#### step $n: skipped ($left s left of the budget)"
		return 0
	fi
	echo "#### step $n (limit $lim s): $*"
	if [ "${DRY:-0}" = 1 ]; then return 0; fi
	t0=$(date +%s)
	timeout "$lim" "$@"
	echo "#### step $n: exit $? after $(( $(date +%s) - t0 )) s"
}
# begin MODE BUDGET: the output folder O, the deadline, the start line
begin() {
	O=${OUT:-/tmp/mgt-device-out}
	mkdir -p "$O"
	DEADLINE=$(( $(date +%s) + $2 ))
	echo "# device-run $1 $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget $2 s"
}
# ops_step LIMIT: test_cuda_ops into $O/test_cuda_ops.txt, its failures and summary printed
ops_step() {
	step ops "$1" sh -c '"$1" >"$2/test_cuda_ops.txt" 2>&1; r=$?; grep "^not ok" "$2/test_cuda_ops.txt";
		grep "^# total" "$2/test_cuda_ops.txt"; tail -1 "$2/test_cuda_ops.txt"; exit $r' sh "$TEST_CUDA_OPS" "$O"
}
# kjv_prep: KJV_PREFIX for check.sh's section 3 (tiny-gpt2 on KJV, cuda vs cpu): the bundled
# KJV tokenized with GPT-2's BPE into /tmp when no dataset is named (a few seconds)
kjv_prep() {
	[ -z "${KJV_PREFIX:-}" ] || return 0
	G=$ROOT/share/mgt/tokenizers/gpt2
	mkdir -p /tmp/mgt-kjv
	if [ "${DRY:-0}" != 1 ] && "$MGT_BIN/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" \
		--output-prefix /tmp/mgt-kjv/kjv --tokenizer-type GPT2BPETokenizer --vocab-file "$G/vocab.json" \
		--merge-file "$G/merges.txt" --append-eod --quiet; then
		export KJV_PREFIX=/tmp/mgt-kjv/kjv_text_document
	fi
	echo "# KJV for check.sh: ${KJV_PREFIX:-none}"
}
all() {
	begin all "${BUDGET:-520}"
	info
	ops_step 90
	step bench 270 env RUN_TIMEOUT=110 MOE=0 GPT2_BIG_MBS="64 32 16" AB="${AB-MGT_ATTN_KERNEL=mma-nocp MGT_ATTN_KERNEL=mma-mb2 MGT_GEMM_D16=0}" \
		sh tests/bench/gpu.sh
	step profile 70 env PROFILE_TIMEOUT=35 sh tests/gpu/profile.sh "$O"
	kjv_prep
	step train 150 env ITERS="${ITERS:-30}" SKIP_OPS=1 RUN_TIMEOUT=60 sh tests/gpu/check.sh
	echo "# device-run all done $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
}
quick() {
	begin quick "${BUDGET:-250}"
	nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv 2>&1
	ops_step 100
	step bench 150 env RUN_TIMEOUT=60 MOE=0 TORCH=0 AB="${AB-MGT_ATTN_KERNEL=mma-nocp MGT_ATTN_KERNEL=mma-mb2 MGT_GEMM_D16=0}" \
		AB_LLAMA="${AB_LLAMA-MGT_ATTN_KERNEL=mma-mb2 MGT_GEMM_D16=0}" sh tests/bench/gpu.sh
	step profile 60 env PROFILE_TIMEOUT=30 sh tests/gpu/profile.sh "$O"
	step train 60 env ITERS=20 MODELS=tiny-gpt2 SKIP_OPS=1 RUN_TIMEOUT=30 sh tests/gpu/check.sh
	echo "# device-run quick done $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
}
case $mode in
all) mkdir -p "${OUT:-/tmp/mgt-device-out}"; all 2>&1 | tee "${OUT:-/tmp/mgt-device-out}/run.log" ;;
quick) mkdir -p "${OUT:-/tmp/mgt-device-out}"; quick 2>&1 | tee "${OUT:-/tmp/mgt-device-out}/run.log" ;;
profile) sh tests/gpu/profile.sh ;;
info) info 2>&1 | tee "${OUT:-/tmp}/device-info.txt" ;;
check) info >"${OUT:-/tmp}/device-info.txt" 2>&1; sh tests/gpu/check.sh ;;
bench) sh tests/bench/gpu.sh kjv ;;
fsdp-fit) begin fsdp-fit "${BUDGET:-520}"
	step fsdp-fit "${BUDGET:-520}" sh tests/gpu/fsdp_fit.sh "$O/fsdp-fit.txt"; cat "$O/fsdp-fit.txt" ;;
*) echo "usage: $0 all|quick|check|bench|profile|info|fsdp-fit"; exit 2 ;;
esac
