#!/bin/sh
# CPU time of the Mamba-2 selective scan, forward and backward, at one layer of a 130M-Mamba-2-like
# shape (hidden 768, d_inner 1536 = 24 heads of 64, 1 group of state 128, sequence 1024, micro-batch
# 1), mgt's CPU backend (ssd_scan_fwd / ssd_scan_bwd: the chunked SSD forward and its chunked
# gradient) against a pure-PyTorch chunked SSD of the same algorithm (tests/bench/
# torch_ssd.py, autograd for its backward) run by Debian's /usr/bin/python3 with python3-torch.
# Not a test.  Both on THREADS threads, best of REPS after a warm-up; the PyTorch side then checks
# mgt's outputs and gradients against its own float64 run on the same inputs.  Results go to
# tests/bench/results/mamba_scan-DATE.txt.
#
# Usage: tests/bench/mamba_scan.sh [THREADS]    (default 2)
# Environment: SHAPE "L:B:NH:P:G:N" (default 1024:1:24:64:1:128), REPS (default 5)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
SHAPE=${SHAPE:-1024:1:24:64:1:128}
REPS=${REPS:-5}
LIB=$ROOT/build/libmgt.a
[ -f "$LIB" ] || { echo "mamba_scan.sh: $LIB is not built (make CUDA=0)" >&2; exit 1; }
mkdir -p "$ROOT/tests/bench/results" "$ROOT/build/bench"
OUT=$ROOT/tests/bench/results/mamba_scan-$(date +%Y%m%d-%H%M%S).txt
EXE=$ROOT/build/bench/mamba_scan
# the backend's objects need OpenBLAS and OpenMP only
cc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -I"$ROOT/lib" $(pkg-config --cflags openblas) "$ROOT/tests/bench/mamba_scan.c" \
	"$LIB" $(pkg-config --libs openblas) -lm -o "$EXE"
IFS=: read -r L B NH P G N <<SH
$SHAPE
SH
DUMP=$ROOT/build/bench/mamba_scan.bin
{
	echo "# mamba_scan.sh $(date -u +%FT%TZ) threads $THREADS: L $L b $B heads $NH x $P, groups $G x state $N (d_inner $((NH * P)))"
	echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; mgt $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
	OMP_NUM_THREADS=$THREADS "$EXE" "$THREADS" "$L" "$B" "$NH" "$P" "$G" "$N" "$REPS" "$DUMP"
	OMP_NUM_THREADS=$THREADS /usr/bin/python3 "$ROOT/tests/bench/torch_ssd.py" "$DUMP" "$THREADS" "$REPS"
	# Debian's OpenBLAS may have fallen back to its SSE3 kernels on this CPU, where mgt picks the
	# AVX ones itself (lib/backend/cpu.c): torch once more with the kernels mgt uses (as t5_cpu.sh)
	CORE=$(/usr/bin/python3 "$ROOT/tests/bench/openblas_core.py" 2>/dev/null || true)
	[ -z "$CORE" ] || { echo "# torch again with OPENBLAS_CORETYPE=$CORE"; OMP_NUM_THREADS=$THREADS \
		OPENBLAS_CORETYPE=$CORE /usr/bin/python3 "$ROOT/tests/bench/torch_ssd.py" "$DUMP" "$THREADS" "$REPS" | head -1; }
} | tee "$OUT"
rm -f "$DUMP"
echo "written: $OUT"
