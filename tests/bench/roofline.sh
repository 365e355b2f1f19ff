#!/bin/sh
# tests/bench/roofline.sh: the roofline of each kernel of one mgt-train step, from the CUDA
# simulator's counts, beside the H200 ncu profile of 2026-11-27 (tests/bench/roofline.py says
# how).  Not a test; needs build/sim/mgt-train (make CUDA=0 DEPS=0 build/sim/mgt-train), no GPU.
#
# For each model: one step of the simulated mgt-train on a small model of the same family (the
# profiled model's layers, heads of the same size, small hidden size, sequence, batch and
# vocabulary; roofline.py SIM_DIMS) under MGT_SIM_PROFILE, then roofline.py against
# tests/bench/results/profile/ncu-<model>-nvidia-h200-20261127.csv.gz.
# Usage: tests/bench/roofline.sh [OUTFILE]   (default: stdout; a few minutes on two cores)
# Environment: GPU (h200, h100 or h200-meas: roofline.py RATES), W (scratch directory).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${W:-$(mktemp -d "${TMPDIR:-/tmp}/mgt-roofline.XXXXXX")}
M=$ROOT/share/mgt/models
COMMON="--device cuda --bf16 --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 128
 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 3e-4 --eval-interval 0 --log-interval 1
 --seed 1234 --threads 1"
# the profiled models' parameter counts (padded vocabulary 50304; 128256, tied embeddings):
# gpt2-124m V h + 1024 h + 12 (12 h^2 + 13 h) + 2 h at h = 768; llama-3.2-1b V h + 16 (14.5 h^2 + 2 h) + h
# at h = 2048 (q, o: h^2; k, v: h^2 / 4; SwiGLU 3 h ffn = 12 h^2)
run() { # run MODEL PARAMS ARGS...
	m=$1 p=$2; shift 2
	# shellcheck disable=SC2086
	MGT_SIM_PROFILE=$W/$m.txt "$ROOT/build/sim/mgt-train" --model "$M/$m.json" "$@" $COMMON >"$W/$m.log" 2>&1
	/usr/bin/python3 "$ROOT/tests/bench/roofline.py" --model "$m" --sim "$W/$m.txt" --sim-log "$W/$m.log" \
		--params "$p" --gpu "${GPU:-h200}" --ncu "$ROOT/tests/bench/results/profile/ncu-$m-nvidia-h200-20261127.csv.gz" \
		--ncu2 "$ROOT/tests/bench/results/profile/ncu-$m-nvidia-h200-20261127-2.csv.gz"
	echo
}
{
	run gpt2-124m 124475904 --hidden-size 64 --num-attention-heads 1 --ffn-hidden-size 256 \
		--max-position-embeddings 128
	run llama-3.2-1b 1235814400 --hidden-size 256 --num-attention-heads 4 --num-query-groups 1 \
		--ffn-hidden-size 1024 --hidden-dropout 0 --attention-dropout 0
} >"${1:-/dev/stdout}"
