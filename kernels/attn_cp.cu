/* kernels/: the elementwise parts of context-parallel attention (kernels.h mgt_k_attn_blk_merge,
 * mgt_k_attn_kv_copy; the device twins of backend.h attn_merge and attn_kv_copy).  The block
 * forward and backward are kernels/attn.cu's.
 *
 * Merge: one warp per (token, head) row of out [sq*b, H, d]; every lane reads the row's two
 * log-sum-exps (lse and lb at (j*H + n)*ld_lse + i), computes with m = max(lse, lb)
 *   a = e^(lse - m), c = e^(lb - m), lse' = m + log(a + c),
 *   out' = out * (a / (a + c)) + ob * (c / (a + c))
 * (= out e^(lse - lse') + ob e^(lb - lse')) for its channels, and lane 0 writes lse'.  Rows where
 * both are -inf are left as they are (0 and -inf).  Each element is written by one thread: no
 * atomics, deterministic.
 * Copy: a grid-stride loop over the T*ng*2*d elements of kv. */
#include <cuda_runtime.h>
#include <math.h>

#include "common.cuh"
#include "kernels.h"

static constexpr int CP_THREADS = 256, CP_WARPS = CP_THREADS / 32;

static __global__ void __launch_bounds__(CP_THREADS) blk_merge_kernel(float *out, float *lse,
								       const float *ob, const float *lb,
								       int sq, int b, int H, int d,
								       int ld_lse)
{
	const long long w = (long long)blockIdx.x * CP_WARPS + threadIdx.x / 32;
	const int lane = threadIdx.x % 32;
	if (w >= (long long)sq * b * H)
		return;
	const long long t = w / H;
	const int n = (int)(w % H), j = (int)(t % b), i = (int)(t / b);
	const size_t li = ((size_t)j * H + n) * (size_t)ld_lse + (size_t)i;
	const float l0 = lse[li], l1 = lb[li], m = fmaxf(l0, l1);
	if (m == -INFINITY)
		return; /* neither has a visible key */
	const float a = expf(l0 - m), c = expf(l1 - m), sum = a + c;
	const float fa = a / sum, fc = c / sum;
	float *o = out + (size_t)w * d;
	const float *x = ob + (size_t)w * d;
	for (int k = lane; k < d; k += 32)
		o[k] = o[k] * fa + x[k] * fc;
	__syncwarp();
	if (lane == 0)
		lse[li] = m + logf(sum);
}

extern "C" int mgt_k_attn_blk_merge(mgt_k_stream s, const mgt_k_attn_blk *g, float *out, float *lse,
				    const float *ob, const float *lb)
{
	if (g->sq <= 0 || g->b <= 0 || g->ng <= 0 || g->r <= 0 || g->d <= 0)
		return (int)cudaSuccess;
	const int H = g->ng * g->r;
	const size_t rows = (size_t)g->sq * g->b * H;
	MGT_LAUNCH(blk_merge_kernel, (unsigned)mgt_cdiv(rows, CP_WARPS), CP_THREADS, 0, mgt_st(s), out, lse,
		   ob, lb, g->sq, g->b, H, g->d, g->ld_lse);
	return mgt_k_rc();
}

static __global__ void kv_copy_kernel(float *qkv, float *kv, int T, int ng, int r, int d, int to_kv)
{
	const size_t n = (size_t)T * ng * 2 * d;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const size_t row = e / ((size_t)2 * d); /* (t, g) */
		const size_t f = row * (size_t)(r + 2) * d + (size_t)r * d + e % ((size_t)2 * d);
		if (to_kv)
			kv[e] = qkv[f];
		else
			qkv[f] = kv[e];
	}
}

extern "C" int mgt_k_attn_kv_copy(mgt_k_stream s, float *qkv, float *kv, int T, int ng, int r, int d,
				  int to_kv)
{
	if (T <= 0 || ng <= 0 || r < 0 || d <= 0)
		return (int)cudaSuccess;
	const size_t n = (size_t)T * ng * 2 * d;
	MGT_LAUNCH(kv_copy_kernel, mgt_grid(n, 256), 256, 0, mgt_st(s), qkv, kv, T, ng, r, d, to_kv);
	return mgt_k_rc();
}
