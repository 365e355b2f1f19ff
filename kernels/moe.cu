/* kernels/: the Mixture-of-Experts row ops (backend.h's rows_gather, rows_combine, rows_scale,
 * rows_dot; lib/backend/cpu_moe.c's arithmetic; megatron/core/transformer/moe/moe_utils.py
 * permute / unpermute).  One block per row, walking the row in groups of 4 (common.cuh); no row
 * is touched by two blocks, no atomics.
 *
 *  - rows_combine: each thread owns its groups of columns and adds the token's copies into a zero
 *    accumulator in j order, as the CPU does: the same fp32 additions in the same order, so the
 *    same bits.
 *  - rows of type E (float, __nv_bfloat16, __half): read as fp32, results rounded once to
 *    nearest even when stored (mgt_ld4 / mgt_st4), as the CPU's cpu_ld / cpu_st;
 *  - rows_dot: products summed in double, per thread over its groups in order, then the block's
 *    fixed shuffle tree (mgt_block_sum), rounded to fp32 once: deterministic, and within one fp32
 *    rounding of the CPU's double sum in another order. */
#include "common.cuh"

/* Row i: dst[i] = src[idx[i]] (copied, any element type: moved as the elements' bits). */
template <typename E>
static __global__ void rows_gather_k(E *dst, const E *src, const int32_t *idx, int h)
{
	const size_t i = blockIdx.x, nh = (size_t)h;
	const E *s = src + (size_t)idx[i] * nh;
	E *d = dst + i * nh;
	for (size_t c = threadIdx.x; c < nh; c += blockDim.x)
		d[c] = s[c];
}

/* Rows of 16 bytes moved as uint4 when every row starts 16-byte aligned. */
extern "C" int mgt_k_rows_gather(mgt_k_stream s, void *dst, const void *src, mgt_k_dtype t, const int32_t *idx,
				 int N, int h)
{
	if (N <= 0 || h <= 0)
		return 0;
	const size_t rb = (size_t)h * (t == MGT_K_F32 ? 4 : 2);
	if (rb % 16 == 0 && mgt_al16(dst) && mgt_al16(src))
		MGT_LAUNCH((rows_gather_k<uint4>), N, MGT_ROW_THREADS, 0, mgt_st(s), (uint4 *)dst, (const uint4 *)src, idx,
			   (int)(rb / 16));
	else if (t == MGT_K_F32)
		MGT_LAUNCH((rows_gather_k<float>), N, MGT_ROW_THREADS, 0, mgt_st(s), (float *)dst, (const float *)src, idx, h);
	else
		MGT_LAUNCH((rows_gather_k<uint16_t>), N, MGT_ROW_THREADS, 0, mgt_st(s), (uint16_t *)dst,
			   (const uint16_t *)src, idx, h);
	return mgt_k_rc();
}

/* Token t: dst[t] = 0 + src[slot[t*k + j]] for j = 0 .. k-1 with slot >= 0, in j order, in fp32,
 * rounded once to E. */
template <typename E>
static __global__ void rows_combine_k(E *dst, const E *src, const int32_t *slot, int k, int h, bool vec)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4;
	const int32_t *sl = slot + t * (size_t)k;
	E *d = dst + t * nh;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (int j = 0; j < k; j++) {
			const int32_t r = sl[j];
			if (r < 0)
				continue;
			float v[4];
			mgt_ld4(src + (size_t)r * nh, g, nh, vec, v);
#pragma unroll
			for (int q = 0; q < 4; q++)
				acc[q] += v[q];
		}
		mgt_st4(d, g, nh, vec, acc);
	}
}

extern "C" int mgt_k_rows_combine(mgt_k_stream s, void *dst, const void *src, mgt_k_dtype t, const int32_t *slot,
				  int T, int k, int h)
{
	if (T <= 0 || h <= 0)
		return 0;
	const bool vec = h % 4 == 0 && mgt_al16(dst) && mgt_al16(src);
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((rows_combine_k<E>), T, MGT_ROW_THREADS, 0, mgt_st(s), (E *)dst, (const E *)src, slot,
			   k < 0 ? 0 : k, h, vec);
		return mgt_k_rc();
	});
}

/* Row i: y[i] = w[i] * x[i] (y may be x), rounded once to E. */
template <typename E>
static __global__ void rows_scale_k(E *y, const E *x, const float *w, int f, bool vec)
{
	const size_t i = blockIdx.x, nf = (size_t)f, ng = (nf + 3) / 4;
	const float wi = w[i];
	const E *xi = x + i * nf;
	E *yi = y + i * nf;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		mgt_ld4(xi, g, nf, vec, v);
#pragma unroll
		for (int q = 0; q < 4; q++)
			v[q] = wi * v[q];
		mgt_st4(yi, g, nf, vec, v);
	}
}

extern "C" int mgt_k_rows_scale(mgt_k_stream s, void *y, const void *x, mgt_k_dtype t, const float *w, int N, int f)
{
	if (N <= 0 || f <= 0)
		return 0;
	const bool vec = f % 4 == 0 && mgt_al16(y) && mgt_al16(x);
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((rows_scale_k<E>), N, MGT_ROW_THREADS, 0, mgt_st(s), (E *)y, (const E *)x, w, f, vec);
		return mgt_k_rc();
	});
}

/* Row i: out[i] = sum_c a[i, c] * b[i, c] in double (the products are exact in double). */
template <typename E>
static __global__ void rows_dot_k(float *out, const E *a, const E *b, int f, bool vec)
{
	const size_t i = blockIdx.x, nf = (size_t)f, ng = (nf + 3) / 4;
	const E *ai = a + i * nf, *bi = b + i * nf;
	double acc = 0;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float u[4], v[4];
		mgt_ld4(ai, g, nf, vec, u); /* 0 beyond f: adds nothing */
		mgt_ld4(bi, g, nf, vec, v);
#pragma unroll
		for (int q = 0; q < 4; q++)
			acc += (double)u[q] * (double)v[q];
	}
	acc = mgt_block_sum(acc);
	if (threadIdx.x == 0)
		out[i] = (float)acc;
}

extern "C" int mgt_k_rows_dot(mgt_k_stream s, float *out, const void *a, const void *b, mgt_k_dtype t, int N, int f)
{
	if (N <= 0)
		return 0;
	const bool vec = f % 4 == 0 && mgt_al16(a) && mgt_al16(b);
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((rows_dot_k<E>), N, MGT_ROW_THREADS, 0, mgt_st(s), out, (const E *)a, (const E *)b, f < 0 ? 0 : f,
			   vec);
		return mgt_k_rc();
	});
}
