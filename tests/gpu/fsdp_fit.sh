#!/bin/sh
# tests/gpu/fsdp_fit.sh [OUTFILE]: the largest Llama-shaped model that trains 2 iterations on this
# machine's GPU(s), by layers (issue 50, item 6): the llama-3.1-8b preset's shape (hidden 4096,
# ffn 14336, 32 heads, 8 query groups, vocabulary 128256, bf16, mock data, sequence SEQ, micro-batch
# 1) with --num-layers from LO up in steps of STEP until a run fails, then the step halved
# between the last fit and the first failure, for each configuration:
#   plain     mgt-train --use-distributed-optimizer
#   recompute the same with --recompute-granularity full --recompute-method uniform
#             --recompute-num-layers 1
#   fsdp      --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params with the
#             recomputation (lib/train/fsdp.c; the buffers reserved, committed and discarded
#             through CUDA's virtual memory management, lib/backend/cuda_vmm.c)
# under $LAUNCH (empty: one process; e.g. "mpirun -np 2" for DP2 when mgt is built with MPI).
# What one process can show: with DP = 1 nothing is sharded (lib/train/fsdp.c
# trainer_fsdp_grads), every reserved buffer is committed whole at setup, so fsdp fits what
# recompute fits: the row checks that the driver's VMM path maps, accounts and frees the
# buffers on a real GPU at no memory cost, not FSDP's saving, which needs DP >= 2 (each rank then
# holds 1/DP of the parameters, gradients and optimizer state plus two layer units, and the
# largest model grows about DP-fold for the optimizer's share; mgt-plan(1) computes it).  The
# bundle of the lent GPU machine is built without MPI (README, make bundle): there only the DP1
# rows can run.
# Each row: configuration, layers, fits (exit 0 and 2 iterations logged), the log's peak device
# memory (MiB; backend's accounting: alloc and committed granules) and its "computed" figure,
# the second iteration's elapsed ms.  Env: MGT_BIN (bin), LO (8), STEP (8), MAX (64), SEQ
# (2048), CONFIGS ("plain recompute fsdp"), RUN_TIMEOUT (240 s per run), DEVICE (cuda), EXTRA
# (flags appended to every run: another shape, e.g. for a CPU smoke run), DRY=1 (print the runs).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MGT_BIN:-$ROOT/bin}
OUTF=${1:-/dev/stdout}
LO=${LO:-8} STEP=${STEP:-8} MAX=${MAX:-64} SEQ=${SEQ:-2048}
W=$(mktemp -d "${TMPDIR:-/tmp}/mgt-fsdp-fit.XXXXXX") || exit 1
BASE="--model $ROOT/share/mgt/models/llama-3.1-8b.json --mock-data --tokenizer-type NullTokenizer
 --vocab-size 128256 --seq-length $SEQ --max-position-embeddings $SEQ --micro-batch-size 1
 --global-batch-size ${GBS:-1} --train-iters 2 --lr 1e-4 --lr-warmup-iters 0 --lr-decay-style constant
 --log-interval 1 --eval-interval 0 --bf16 --device ${DEVICE:-cuda} ${EXTRA:-}"
RC="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
flags() {
	case $1 in
	plain) echo "--use-distributed-optimizer" ;;
	recompute) echo "--use-distributed-optimizer $RC" ;;
	fsdp) echo "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params $RC" ;;
	esac
}
# fits CONFIG LAYERS: 0 when 2 iterations ran; the row printed either way
fits() {
	log=$W/$1-$2.log
	# shellcheck disable=SC2046,SC2086
	if [ "${DRY:-0}" = 1 ]; then echo "# ${LAUNCH:-} $BIN/mgt-train $BASE --num-layers $2 $(flags "$1")"; return 0; fi
	# shellcheck disable=SC2046,SC2086
	timeout "${RUN_TIMEOUT:-240}" ${LAUNCH:-} "$BIN/mgt-train" $BASE --num-layers "$2" $(flags "$1") >"$log" 2>&1 </dev/null
	rc=$?
	ok=no
	[ $rc = 0 ] && grep -q "iteration *2/" "$log" && ok=yes
	peak=$(sed -n 's/.*peak device memory \([0-9.]*\) MiB.*/\1/p' "$log" | tail -1)
	comp=$(sed -n 's/.*memory [^:]*: computed \([0-9.]*\) MiB.*/\1/p' "$log" | tail -1)
	ms=$(sed -n 's/.*iteration *2\/.*elapsed time per iteration (ms): *\([0-9.]*\).*/\1/p' "$log" | tail -1)
	printf '%-10s %4d %-4s peak %8s MiB  computed %8s MiB  iteration 2 %8s ms  (exit %d)\n' "$1" "$2" "$ok" \
		"${peak:--}" "${comp:--}" "${ms:--}" "$rc" >>"$OUTF"
	[ $ok = yes ] || tail -2 "$log" | sed 's/^/#   /' >>"$OUTF"
	[ $ok = yes ]
}
# search CONFIG: LO, LO+STEP, ... until one fails, then halve the step in between
search() {
	good=0 n=$LO step=$STEP
	while [ "$n" -le "$MAX" ] && fits "$1" "$n"; do good=$n n=$((n + step)); done
	[ "${DRY:-0}" = 1 ] && return 0
	bad=$n
	while [ $((bad - good)) -gt 1 ] && [ "$good" -gt 0 ]; do
		mid=$(((good + bad) / 2))
		if fits "$1" "$mid"; then good=$mid; else bad=$mid; fi
	done
	echo "# $1: largest that trains: $good layers (of llama-3.1-8b's shape; 0: none from $LO)" >>"$OUTF"
}
echo "# fsdp_fit $(date -u '+%Y-%m-%d %H:%M:%S UTC') seq $SEQ launch '${LAUNCH:-one process}'" >>"$OUTF"
for c in ${CONFIGS:-plain recompute fsdp}; do search "$c"; done
rm -rf "$W"
