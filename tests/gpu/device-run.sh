#!/bin/sh
# tests/gpu/device-run.sh check|bench|info: run make check-gpu or make bench-gpu on a GPU machine
# that has the CUDA libraries but none of mgt's Debian libraries and cannot build mgt (the lent
# GPU machine), from the bundle packed here by `make device-pack` into .device/ (an ignored
# folder the device tool carries: carry [".device"]).  Each mode fits one 10-minute call:
#   info   the machine: nvidia-smi, nvcc, where cuBLASLt and NCCL are, ldd of mgt-train
#   check  tests/gpu/check.sh (every CUDA op against the CPU op, model and training checks)
#   bench  tests/bench/gpu.sh kjv (GEMM ceiling, gpt2-124m and llama-3.2-1b tokens/s and MFU)
# Results go to $OUT (at most 8 files come back) and, for bench, tests/bench/results/.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
mode=${1:-check}
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
case $mode in
info) info 2>&1 | tee "${OUT:-/tmp}/device-info.txt" ;;
check) info >"${OUT:-/tmp}/device-info.txt" 2>&1; sh tests/gpu/check.sh ;;
bench) sh tests/bench/gpu.sh kjv ;;
*) echo "usage: $0 info|check|bench"; exit 2 ;;
esac
