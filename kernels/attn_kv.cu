/* kernels/: attention of new tokens against a key/value cache (inference; kernels.h
 * mgt_k_attn_kv, the device twin of the CPU op attn_decode in lib/backend/backend.h).
 *
 * Two launches on the stream: kv_store copies every new token's key and value heads into the
 * caches; then one block of KV_THREADS threads per (token, query head) attends over the
 * sequence's cached positions 0..pos[t] (grid: tokens x heads).  Warp w takes keys w, w + KV_WARPS, ... in order; a
 * lane holds channels lane + 32 j (j < KV_CMAX, so d <= 256) of the query and of its running
 * output; the dot product is a warp sum (xor butterfly: every lane gets the same bits), the
 * softmax is online per warp (running max and sum, the output rescaled when the max grows),
 * and at the end the warps' partial results are merged in warp order through shared memory.
 * T5's relative position bias (bias non-NULL) is added to each scaled score, read by distance.
 * Fixed block shape and order: deterministic.  No atomics; blocks write disjoint output rows. */
#include <cuda_runtime.h>

#include "common.cuh"
#include "kernels.h"

static constexpr int KV_THREADS = 128, KV_WARPS = KV_THREADS / 32, KV_CMAX = 8;

static __global__ void kv_store_kernel(float *kc, float *vc, const float *qkv, const int32_t *seq,
				       const int32_t *pos, int T, int ng, int r, int d, int S)
{
	const size_t n = (size_t)T * ng * d;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const int c = (int)(e % d), g = (int)(e / d % ng), t = (int)(e / ((size_t)d * ng));
		const float *src = qkv + ((size_t)t * ng + g) * (size_t)(r + 2) * d + (size_t)r * d + c;
		const size_t dst = (((size_t)seq[t] * ng + g) * S + (size_t)pos[t]) * d + c;
		kc[dst] = src[0];
		vc[dst] = src[d];
	}
}

static __device__ __forceinline__ float kv_warp_allsum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __global__ void attn_kv_kernel(float *out, const float *kc, const float *vc, const float *qkv,
				      const int32_t *seq, const int32_t *pos, int ng, int r, int d, int S,
				      const float *bias, int bs)
{
	__shared__ float sm_m[KV_WARPS], sm_l[KV_WARPS];
	MGT_DYN_SHARED(float, sm_o); /* [KV_WARPS, d] */
	const int t = blockIdx.x, n = blockIdx.y, g = n / r, H = ng * r;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, np = pos[t] + 1;
	const float scale = 1.0f / sqrtf((float)d);
	const float *q = qkv + ((size_t)t * ng + g) * (size_t)(r + 2) * d + (size_t)(n % r) * d;
	const size_t kv0 = ((size_t)seq[t] * ng + g) * (size_t)S * d;
	float qv[KV_CMAX], acc[KV_CMAX], m = -INFINITY, l = 0.0f;
#pragma unroll
	for (int j = 0; j < KV_CMAX; j++) {
		const int c = lane + 32 * j;
		qv[j] = c < d ? q[c] : 0.0f;
		acc[j] = 0.0f;
	}
	for (int i = warp; i < np; i += KV_WARPS) {
		const float *k = kc + kv0 + (size_t)i * d, *v = vc + kv0 + (size_t)i * d;
		float s = 0.0f;
#pragma unroll
		for (int j = 0; j < KV_CMAX; j++)
			if (lane + 32 * j < d)
				s += qv[j] * k[lane + 32 * j];
		s = kv_warp_allsum(s) * scale;
		if (bias)
			s += bias[(size_t)(i - pos[t] + bs - 1) * H + n];
		const float mn = mgt_max(m, s), corr = mgt_expf(m - mn), p = mgt_expf(s - mn);
		l = l * corr + p;
#pragma unroll
		for (int j = 0; j < KV_CMAX; j++)
			if (lane + 32 * j < d)
				acc[j] = acc[j] * corr + p * v[lane + 32 * j];
		m = mn;
	}
#pragma unroll
	for (int j = 0; j < KV_CMAX; j++)
		if (lane + 32 * j < d)
			sm_o[warp * d + lane + 32 * j] = acc[j];
	if (lane == 0) {
		sm_m[warp] = m;
		sm_l[warp] = l;
	}
	__syncthreads();
	float M = -INFINITY;
	for (int w = 0; w < KV_WARPS; w++)
		M = mgt_max(M, sm_m[w]);
	float L = 0.0f;
	for (int w = 0; w < KV_WARPS; w++)
		L += sm_l[w] * mgt_expf(sm_m[w] - M);
	for (int c = threadIdx.x; c < d; c += KV_THREADS) {
		float o = 0.0f;
		for (int w = 0; w < KV_WARPS; w++)
			o += sm_o[w * d + c] * mgt_expf(sm_m[w] - M);
		out[((size_t)t * H + n) * d + c] = o / L;
	}
}

extern "C" int mgt_k_attn_kv(mgt_k_stream s, float *out, float *kc, float *vc, const float *qkv,
			     const int32_t *seq, const int32_t *pos, int T, int ng, int r, int d, int S,
			     const float *bias, int bs)
{
	if (T <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return (int)cudaSuccess;
	if (d > 32 * KV_CMAX || ng * r > 65535)
		return (int)cudaErrorInvalidValue;
	const cudaStream_t st = mgt_st(s);
	const size_t n = (size_t)T * ng * d;
	MGT_LAUNCH(kv_store_kernel, mgt_grid(n, 256), 256, 0, st, kc, vc, qkv, seq, pos, T, ng, r, d, S);
	const cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return (int)e;
	const dim3 grid((unsigned)T, (unsigned)(ng * r));
	MGT_LAUNCH(attn_kv_kernel, grid, KV_THREADS, (size_t)KV_WARPS * d * sizeof(float), st, out, kc, vc, qkv,
		   seq, pos, ng, r, d, S, bias, bs);
	return mgt_k_rc();
}
