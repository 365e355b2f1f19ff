/* kernels/: fp8's quantizing cast (kernels.h mgt_k_fp8_quantize; lib/fp8 mgt_fp8_quantize is the
 * reference, bit for bit).  The conversion is lib/util mgt_f32_to_fp8's rule written for the device
 * in fp32 (CUDA's cuda_fp8.hpp __nv_cvt_float_to_fp8: snap to the grid with ties to even, subnormals kept, then clamp; NaN
 * -> 0x7F): the quantum 2^(e - mbits) is a power of two, so a / quantum is exact and rintf rounds
 * it to even.  The amax: each block's fmaxf of |x| (NaN ignored) into ws, then one block folds
 * them into amax[0]; a maximum does not depend on the order, so no atomics are needed.  Also the
 * transpose of fp8 bytes (mgt_k_fp8_transpose: the columnwise copies of the TN GEMMs). */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

#ifndef MGT_LAUNCH
#define MGT_LAUNCH(kern, grid, block, smem, stream, ...) kern<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

enum { FP8_T = 256, FP8_BLOCKS = 1024 };

/* 2^k, exactly, for -126 <= k <= 127 */
static __device__ __forceinline__ float pow2(int k) { return __uint_as_float((uint32_t)(k + 127) << 23); }

/* The fp8 byte of x (e5m2: format E5M2, else E4M3). */
static __device__ __forceinline__ uint8_t fp8_from(float x, bool e5m2)
{
	if (isnan(x))
		return 0x7f;
	const int mb = e5m2 ? 2 : 3, emin = e5m2 ? -14 : -6;
	const float maxv = e5m2 ? 57344.0f : 448.0f;
	const uint8_t sign = signbit(x) ? 0x80 : 0;
	const float a = fminf(fabsf(x), maxv);
	int e = (int)((__float_as_uint(a) >> 23) & 0xff) - 127;
	if (e < emin)
		e = emin;
	const float r = rintf(a * pow2(mb - e)) * pow2(e - mb); /* maxv is a grid point: no overshoot */
	if (r < pow2(emin)) /* zero or subnormal: a multiple of 2^(emin - mb) */
		return (uint8_t)(sign | (uint8_t)(r * pow2(mb - emin)));
	const int er = (int)((__float_as_uint(r) >> 23) & 0xff) - 127;
	const unsigned m = (__float_as_uint(r) >> (23 - mb)) & ((1u << mb) - 1);
	return (uint8_t)(sign | (unsigned)(er + (e5m2 ? 15 : 7)) << mb | m);
}

template <typename S>
static __global__ void fp8_quant_k(uint8_t *q, const S *x, size_t n, const float *scale, bool e5m2, float *part)
{
	const float s = scale[0];
	float a = 0.0f;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const float v = mgt_ld1(x, i);
		a = fmaxf(a, fabsf(v));
		if (q)
			q[i] = fp8_from(v * s, e5m2);
	}
	a = mgt_block_max(a);
	if (threadIdx.x == 0)
		part[blockIdx.x] = a;
}

static __global__ void fp8_amax_k(float *amax, const float *part, int nb)
{
	float a = 0.0f;
	for (int i = threadIdx.x; i < nb; i += blockDim.x)
		a = fmaxf(a, part[i]);
	a = mgt_block_max(a);
	if (threadIdx.x == 0)
		amax[0] = fmaxf(amax[0], a);
}

extern "C" size_t mgt_k_fp8_quantize_ws_bytes(void) { return FP8_BLOCKS * sizeof(float); }

extern "C" int mgt_k_fp8_quantize(mgt_k_stream s, uint8_t *q, const void *x, mgt_k_dtype xt, size_t n,
				  const float *scale, int e5m2, float *amax, void *ws)
{
	if (n == 0)
		return 0;
	const size_t want = mgt_cdiv(n, FP8_T);
	const int nb = want < FP8_BLOCKS ? (int)want : FP8_BLOCKS;
	float *part = (float *)ws;
	const cudaStream_t st = mgt_st(s);
	if (xt == MGT_K_BF16)
		MGT_LAUNCH(fp8_quant_k<__nv_bfloat16>, nb, FP8_T, 0, st, q, (const __nv_bfloat16 *)x, n, scale, e5m2 != 0, part);
	else if (xt == MGT_K_F16)
		MGT_LAUNCH(fp8_quant_k<__half>, nb, FP8_T, 0, st, q, (const __half *)x, n, scale, e5m2 != 0, part);
	else
		MGT_LAUNCH(fp8_quant_k<float>, nb, FP8_T, 0, st, q, (const float *)x, n, scale, e5m2 != 0, part);
	MGT_LAUNCH(fp8_amax_k, 1, FP8_T, 0, st, amax, part, nb);
	return mgt_k_rc();
}

/* ---- current scaling (kernels.h mgt_k_fp8_scale) ---- */

/* lib/fp8 mgt_fp8_current_scale (eps 0) and mgt_fp8_scale_inv: IEEE fp32 divisions (nvcc's
 * default -prec-div=true), one thread. */
static __global__ void fp8_scale_k(float *scale, float *scale_inv, const float *amax, float fp8_max)
{
	const float a = amax[0];
	float s = 1.0f;
	if (a > 0.0f && isfinite(a)) {
		s = fp8_max / a;
		if (isinf(s))
			s = FLT_MAX;
	}
	scale[0] = s;
	scale_inv[0] = 1.0f / s;
}

extern "C" int mgt_k_fp8_scale(mgt_k_stream s, float *scale, float *scale_inv, const float *amax, float fp8_max)
{
	MGT_LAUNCH(fp8_scale_k, 1, 1, 0, mgt_st(s), scale, scale_inv, amax, fp8_max);
	return mgt_k_rc();
}

/* ---- the transpose (kernels.h mgt_k_fp8_transpose) ---- */

enum { TR_TILE = 32, TR_ROWS = 8 };

/* dst [cols, rows] = src [rows, cols]^T through a 32 x 32 byte tile in shared memory: a warp reads
 * 32 consecutive bytes of a src row and writes 32 consecutive bytes of a dst row.  Block (x, y)
 * takes the src tile rows [32 x, 32 x + 32) and the column tiles y, y + gridDim.y, ... */
static __global__ void fp8_transpose_k(uint8_t *dst, const uint8_t *src, int rows, int cols)
{
	__shared__ uint8_t tile[TR_TILE][TR_TILE + 1];
	const long r0 = (long)blockIdx.x * TR_TILE;
	for (long c0 = (long)blockIdx.y * TR_TILE; c0 < cols; c0 += (long)gridDim.y * TR_TILE) {
		for (int i = threadIdx.y; i < TR_TILE; i += TR_ROWS) {
			const long r = r0 + i, c = c0 + threadIdx.x;
			if (r < rows && c < cols)
				tile[i][threadIdx.x] = src[r * cols + c];
		}
		__syncthreads();
		for (int i = threadIdx.y; i < TR_TILE; i += TR_ROWS) {
			const long c = c0 + i, r = r0 + threadIdx.x;
			if (r < rows && c < cols)
				dst[c * rows + r] = tile[threadIdx.x][i];
		}
		__syncthreads(); /* the tile is refilled for the next column tile */
	}
}

extern "C" int mgt_k_fp8_transpose(mgt_k_stream s, uint8_t *dst, const uint8_t *src, int rows, int cols)
{
	if (rows <= 0 || cols <= 0)
		return 0;
	const size_t ct = mgt_cdiv((size_t)cols, TR_TILE);
	const dim3 grid((unsigned)mgt_cdiv((size_t)rows, TR_TILE), (unsigned)(ct < 65535 ? ct : 65535));
	MGT_LAUNCH(fp8_transpose_k, grid, dim3(TR_TILE, TR_ROWS), 0, mgt_st(s), dst, src, rows, cols);
	return mgt_k_rc();
}
