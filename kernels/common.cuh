/* kernels/: device helpers shared by the .cu files (not attn.cu's business, but usable there).
 *
 *  - Launch bookkeeping: the stream cast, fixed grid sizes (functions of the shape only, never of
 *    the device, so reductions give the same bits on every run), the error return.
 *  - "Groups of 4": elementwise and row kernels walk their data in groups of 4 consecutive
 *    elements, one group per thread per step.  When the pointers are 16-byte aligned (and a row
 *    length is a multiple of 4) a group is one 128-bit access, else 4 scalar ones; either way a
 *    thread sees the same elements in the same order, so a reduction's bits do not depend on the
 *    alignment of its operands.
 *  - Block reductions (warp shuffles, then one warp over the warps' results): a fixed tree for a
 *    given block size, hence deterministic.  blockDim.x must be a multiple of 32.
 *  - mgt_expf / mgt_erff / mgt_tanhf: the CPU backend's cpu_expf, cpu_erff and cpu_tanhf (lib/backend/cpu_impl.h), same
 *    formulas, so that GELU, SwiGLU and the softmax use the same approximations on both backends
 *    (they differ only by FMA contraction, which nvcc applies and the CPU build does not).
 */
#ifndef MGT_KERNELS_COMMON_CUH
#define MGT_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "philox.cuh"

/* ---- launches ----
 * MGT_LAUNCH(kernel, grid, block, smem, stream, args...) is kernel<<<grid, block, smem, stream>>>(
 * args...) under nvcc; under -DMGT_CUDA_SIM (the kernels compiled as host C++ with
 * tests/sim/cuda_sim.h) it is a call into the simulator.  A template kernel goes in parentheses:
 * MGT_LAUNCH((k<T, U>), ...).  MGT_DYN_SHARED(type, name) declares the block's dynamic shared
 * memory (extern __shared__ type name[]) as a pointer `name`. */
#ifdef MGT_CUDA_SIM
#define MGT_LAUNCH(kern, grid, block, smem, stream, ...) \
	mgt_sim_launch(#kern, kern, grid, block, smem, stream, __VA_ARGS__)
#define MGT_DYN_SHARED(type, name) type *const name = (type *)mgt_sim_dyn_smem()
#else
#define MGT_LAUNCH(kern, grid, block, smem, stream, ...) \
	kern<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define MGT_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

/* ---- host side ---- */

static inline cudaStream_t mgt_st(mgt_k_stream s) { return (cudaStream_t)s; }

/* The launchers' return value: the error of the launches just made (0 when none). */
static inline int mgt_k_rc(void) { return (int)cudaGetLastError(); }

static inline bool mgt_al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* f(mgt_ty<E>()) with E the element type of t (float, __nv_bfloat16, __half), for launchers of
 * kernels templated on element types: mgt_k_typed(t, [&](auto e) { typedef typename
 * decltype(e)::type E; ... }).  Returns what f returns. */
template <typename E> struct mgt_ty {
	typedef E type;
};
template <typename F> static inline int mgt_k_typed(mgt_k_dtype t, F f)
{
	if (t == MGT_K_BF16)
		return f(mgt_ty<__nv_bfloat16>());
	if (t == MGT_K_F16)
		return f(mgt_ty<__half>());
	return f(mgt_ty<float>());
}

static inline size_t mgt_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Blocks for a grid-stride loop over `work` items with `threads` per block: enough to fill any
 * GPU, capped (the loop covers the rest).  Used only where the grid does not shape a sum. */
static inline unsigned mgt_grid(size_t work, int threads)
{
	size_t g = mgt_cdiv(work, (size_t)threads);
	const size_t cap = 65536;
	return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

/* Threads per block of the row kernels (one block per row) and of column reductions. */
static constexpr int MGT_ROW_THREADS = 256, MGT_COL_THREADS = 256;

/* Column reductions over x [T, n] (colsum, the norm's dw/db, bias gradients): the rows are split
 * in R chunks of consecutive rows; pass 1 writes one double partial per (chunk, column) to ws
 * ([R, n] doubles), pass 2 sums each column's partials in chunk order.  R depends on the shape
 * only: about 1024 blocks in pass 1, at most 256 chunks, at least 16 rows a chunk. */
static inline int mgt_col_chunk_rows(int T, int n)
{
	if (T <= 0 || n <= 0)
		return 1;
	size_t cblocks = mgt_cdiv((size_t)n, MGT_COL_THREADS);
	size_t R = mgt_cdiv(1024, cblocks);
	size_t rmax = mgt_cdiv((size_t)T, 16);
	R = R > 256 ? 256 : R;
	R = R > rmax ? rmax : R;
	R = R < 1 ? 1 : R;
	return (int)mgt_cdiv((size_t)T, R);
}

static inline int mgt_col_chunks(int T, int n)
{
	if (T <= 0 || n <= 0)
		return 0;
	return (int)mgt_cdiv((size_t)T, (size_t)mgt_col_chunk_rows(T, n));
}

/* ---- groups of 4 ---- */

struct __align__(8) mgt_h4 { __half2 a, b; };
struct __align__(8) mgt_b4 { __nv_bfloat162 a, b; };

/* Loads group g (elements 4g .. 4g+3, those below n) of p into v (0 beyond n); returns how many
 * were in range.  vec: p is 16-byte aligned (8 for 16-bit types). */
static __device__ __forceinline__ int mgt_ld4(const float *p, size_t g, size_t n, bool vec, float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		float4 q = *reinterpret_cast<const float4 *>(p + i);
		v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
		return 4;
	}
	int cnt = n - i < 4 ? (int)(n - i) : 4;
#pragma unroll
	for (int k = 0; k < 4; k++)
		v[k] = k < cnt ? p[i + k] : 0.0f;
	return cnt;
}

static __device__ __forceinline__ int mgt_ld4(const __half *p, size_t g, size_t n, bool vec, float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		mgt_h4 q = *reinterpret_cast<const mgt_h4 *>(p + i);
		float2 lo = __half22float2(q.a), hi = __half22float2(q.b);
		v[0] = lo.x; v[1] = lo.y; v[2] = hi.x; v[3] = hi.y;
		return 4;
	}
	int cnt = n - i < 4 ? (int)(n - i) : 4;
#pragma unroll
	for (int k = 0; k < 4; k++)
		v[k] = k < cnt ? __half2float(p[i + k]) : 0.0f;
	return cnt;
}

static __device__ __forceinline__ int mgt_ld4(const __nv_bfloat16 *p, size_t g, size_t n, bool vec,
					      float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		mgt_b4 q = *reinterpret_cast<const mgt_b4 *>(p + i);
		float2 lo = __bfloat1622float2(q.a), hi = __bfloat1622float2(q.b);
		v[0] = lo.x; v[1] = lo.y; v[2] = hi.x; v[3] = hi.y;
		return 4;
	}
	int cnt = n - i < 4 ? (int)(n - i) : 4;
#pragma unroll
	for (int k = 0; k < 4; k++)
		v[k] = k < cnt ? __bfloat162float(p[i + k]) : 0.0f;
	return cnt;
}

/* Element i of p as fp32 (exact for the 16-bit types). */
static __device__ __forceinline__ float mgt_ld1(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float mgt_ld1(const __half *p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ float mgt_ld1(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }

/* p[i] = v, rounded to nearest even for the 16-bit types (fp16 overflows to +-inf). */
static __device__ __forceinline__ void mgt_st1(float *p, size_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void mgt_st1(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void mgt_st1(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* p[0], p[1] = x, y (rounded as mgt_st1); vec: one store (p aligned to two elements). */
static __device__ __forceinline__ void mgt_st2(float *p, float x, float y, bool vec)
{
	if (vec)
		*reinterpret_cast<float2 *>(p) = make_float2(x, y);
	else
		p[0] = x, p[1] = y;
}
static __device__ __forceinline__ void mgt_st2(__half *p, float x, float y, bool vec)
{
	if (vec)
		*reinterpret_cast<__half2 *>(p) = __halves2half2(__float2half_rn(x), __float2half_rn(y));
	else
		p[0] = __float2half_rn(x), p[1] = __float2half_rn(y);
}
static __device__ __forceinline__ void mgt_st2(__nv_bfloat16 *p, float x, float y, bool vec)
{
	if (vec)
		*reinterpret_cast<__nv_bfloat162 *>(p) =
			__halves2bfloat162(__float2bfloat16_rn(x), __float2bfloat16_rn(y));
	else
		p[0] = __float2bfloat16_rn(x), p[1] = __float2bfloat16_rn(y);
}

/* Stores the in-range elements of group g of p from v. */
static __device__ __forceinline__ void mgt_st4(float *p, size_t g, size_t n, bool vec, const float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		*reinterpret_cast<float4 *>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
		return;
	}
#pragma unroll
	for (int k = 0; k < 4; k++)
		if (i + k < n)
			p[i + k] = v[k];
}

/* fp32 -> fp16 rounds to nearest even and overflows to +-inf (__float2half_rn), NaN stays NaN. */
static __device__ __forceinline__ void mgt_st4(__half *p, size_t g, size_t n, bool vec, const float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		mgt_h4 q;
		q.a = __halves2half2(__float2half_rn(v[0]), __float2half_rn(v[1]));
		q.b = __halves2half2(__float2half_rn(v[2]), __float2half_rn(v[3]));
		*reinterpret_cast<mgt_h4 *>(p + i) = q;
		return;
	}
#pragma unroll
	for (int k = 0; k < 4; k++)
		if (i + k < n)
			p[i + k] = __float2half_rn(v[k]);
}

static __device__ __forceinline__ void mgt_st4(__nv_bfloat16 *p, size_t g, size_t n, bool vec,
					       const float v[4])
{
	size_t i = g * 4;
	if (vec && i + 4 <= n) {
		mgt_b4 q;
		q.a = __halves2bfloat162(__float2bfloat16_rn(v[0]), __float2bfloat16_rn(v[1]));
		q.b = __halves2bfloat162(__float2bfloat16_rn(v[2]), __float2bfloat16_rn(v[3]));
		*reinterpret_cast<mgt_b4 *>(p + i) = q;
		return;
	}
#pragma unroll
	for (int k = 0; k < 4; k++)
		if (i + k < n)
			p[i + k] = __float2bfloat16_rn(v[k]);
}

/* ---- block reductions ---- */

template <typename V> static __device__ __forceinline__ V mgt_warp_sum(V v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	return v;
}

/* Sum of v over the block, returned to every thread.  Call from all threads. */
template <typename V> static __device__ V mgt_block_sum(V v)
{
	__shared__ V sm[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = mgt_warp_sum(v);
	if (lane == 0)
		sm[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? sm[lane] : (V)0;
		v = mgt_warp_sum(v);
		if (lane == 0)
			sm[0] = v;
	}
	__syncthreads();
	v = sm[0];
	__syncthreads(); /* sm may be reused by the next call */
	return v;
}

/* Larger of a and b; NaN is ignored as in the CPU's row_max (a comparison with NaN is false). */
static __device__ __forceinline__ float mgt_max(float a, float b) { return b > a ? b : a; }

static __device__ float mgt_block_max(float v)
{
	__shared__ float sm[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = mgt_max(v, __shfl_down_sync(0xffffffffu, v, o));
	if (lane == 0)
		sm[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? sm[lane] : -INFINITY;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
			v = mgt_max(v, __shfl_down_sync(0xffffffffu, v, o));
		if (lane == 0)
			sm[0] = v;
	}
	__syncthreads();
	v = sm[0];
	__syncthreads();
	return v;
}

/* ---- the CPU backend's transcendental approximations ---- */

/* cpu_expf: e^x within about 2 ulp, exactly 0 for x < -87 (and -inf), NaN propagates (no
 * fminf/fmaxf: they would drop a NaN). */
static __device__ __forceinline__ float mgt_expf(float x)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23 */
	float xc = x > 88.0f ? 88.0f : x;
	xc = xc < -87.0f ? -87.0f : xc;
	float nm = xc * 1.44269504088896341f + magic;
	float n = nm - magic;
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440054690583e-4f;
	float q = 1.0f / 5040.0f;
	q = q * r + 1.0f / 720.0f;
	q = q * r + 1.0f / 120.0f;
	q = q * r + 1.0f / 24.0f;
	q = q * r + 1.0f / 6.0f;
	q = q * r + 0.5f;
	q = q * r + 1.0f;
	q = q * r + 1.0f;
	uint32_t e = (__float_as_uint(nm) - __float_as_uint(magic) + 127u) << 23;
	float y = q * __uint_as_float(e);
	return x < -87.0f ? 0.0f : y;
}

/* cpu_erff: Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7). */
static __device__ __forceinline__ float mgt_erff(float x)
{
	float a = x < 0 ? -x : x;
	float t = 1.0f / (1.0f + 0.3275911f * a);
	float q = 1.061405429f;
	q = q * t - 1.453152027f;
	q = q * t + 1.421413741f;
	q = q * t - 0.284496736f;
	q = q * t + 0.254829592f;
	float y = 1.0f - q * t * mgt_expf(-a * a);
	return x < 0 ? -y : y;
}

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = e^(-2|x|) with mgt_expf (cpu_impl.h's cpu_tanhf). */
static __device__ __forceinline__ float mgt_tanhf(float x)
{
	float a = x < 0 ? -x : x;
	float e = mgt_expf(-2.0f * a);
	float y = (1.0f - e) / (1.0f + e);
	return x < 0 ? -y : y;
}

#endif
