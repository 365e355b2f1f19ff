#!/bin/sh
# Measures two constants of mgt-plan's GPU cluster files on the GPU it runs on (mgt-plan(5)):
#  1. the per-process overhead: device memory in use (cudaMemGetInfo: total - free) once a
#     process has a CUDA context and a cuBLASLt handle and has run one GEMM, before it allocates
#     anything of its own (a small C program against the CUDA runtime and cuBLASLt);
#  2. sustained against burst GEMM throughput: bf16 8192^3 matmuls back to back (PyTorch,
#     cuBLAS), the median of the first 20 (as bench-gpu's gemm_ceiling times them) against the
#     rate over 60 s of continuous work (clocks under the power limit).
# Needs nvcc and a Python with torch (TORCH_PYTHON, default /opt/torch/.venv/bin/python).
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuda=${CUDA_HOME:-/usr/local/cuda}
cat > "$tmp/ctx.c" <<'C'
#include <stdio.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
int main(void)
{
	size_t f0, t0, f1, t1;
	cudaFree(0);
	cudaMemGetInfo(&f0, &t0);
	cublasLtHandle_t h;
	cublasLtCreate(&h);
	void *a, *b, *c;
	int n = 1024;
	cudaMalloc(&a, (size_t)n * n * 2); cudaMalloc(&b, (size_t)n * n * 2); cudaMalloc(&c, (size_t)n * n * 4);
	cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n); cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n);
	cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, n, n);
	float one = 1, zero = 0;
	cublasLtMatmul(h, op, &one, a, la, b, lb, &zero, c, lc, c, lc, NULL, NULL, 0, 0);
	cudaDeviceSynchronize();
	cudaMemGetInfo(&f1, &t1);
	double mine = (double)n * n * 8;
	printf("context: total %zu, in use after cudaFree(0) %zu bytes; after cuBLASLt and one GEMM %zu bytes, of which %.0f "
	       "are the GEMM's buffers: overhead %.0f bytes (%.1f MiB)\n", t0, t0 - f0, t1 - f1, mine,
	       (double)(t1 - f1) - mine, ((double)(t1 - f1) - mine) / 1048576.0);
	return 0;
}
C
"$cuda/bin/nvcc" -O2 -o "$tmp/ctx" "$tmp/ctx.c" -lcublasLt
"$tmp/ctx"
${TORCH_PYTHON:-/opt/torch/.venv/bin/python} - <<'PY'
import time, statistics, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
flops = 2 * n ** 3
def one():
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.matmul(a, b); e.record(); e.synchronize()
    return s.elapsed_time(e) / 1e3
for _ in range(3): one()
burst = statistics.median(one() for _ in range(20))
print("burst: median of 20: %.1f TFLOP/s" % (flops / burst / 1e12))
t0 = time.time(); k = 0; marks = []
while time.time() - t0 < 60:
    for _ in range(50): torch.matmul(a, b)
    torch.cuda.synchronize(); k += 50
    marks.append((time.time(), k))
# the rate over the last 30 s
tl, kl = marks[-1]
tf, kf = next(m for m in marks if m[0] >= tl - 30)
print("sustained: %.1f TFLOP/s over the last 30 s of 60 s back to back (%d GEMMs)" % (flops * (kl - kf) / (tl - tf) / 1e12, k))
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
