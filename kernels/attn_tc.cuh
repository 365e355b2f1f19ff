/* kernels/: what the tensor-core attention kernels (kernels/attn_mma.cuh, launched by
 * kernels/attn_tc.cu: kernels.h mgt_k_attn_tc_*) stage through shared memory: the rounding to the
 * 16-bit operand type T (to16), 4-element global loads (ld4_as), and the row tiles of Q, K, V and
 * dO (load_tile, load_kv, load_qdo) with their lse and D rows (load_vec) and, for packed
 * documents, the query rows' document starts (load_seg).
 *
 * Function of those kernels.  The same as kernels/attn.cuh (FlashAttention-2 forward, Algorithm 1,
 * and backward, Algorithm 2; the layouts, causal, block-diagonal causal over packed documents
 * (geom seg) or key padding mask, GQA grouping, dropout placement and Philox
 * indices of lib/backend/backend.h attn_forward / attn_backward, self and cross: the query
 * rows from q, sq of them, the key rows from kv, sk of them, on attn.cuh's geometry), except that qkv and out are T in memory
 * (the model's 16-bit storage: out written rounded to nearest even; dO, dQKV, lse stay fp32) and
 * the six matrix products take operands of type T as FlashAttention does: Q K^T, P V in the
 * forward; K Q^T, V dO^T, Pd^T dO, dS^T Q, Q K^T, dO V^T, dS K in the backward, with P (dropped
 * out) and dS rounded before their products.  Softmax statistics (running max m, sum l, lse), the
 * exponentials, dropout and the row terms D are fp32 (D in double, attn.cuh rowdot_kernel), and
 * all accumulation is fp32.  l sums the unrounded, undropped probabilities.
 *
 * Blocks have NW = 4 warps (NTC = 128 threads); warp w owns 16 rows of the block's row tile
 * (queries in the forward and dQ kernels, keys in the dK/dV kernel), so the row statistics never
 * leave the warp.  Operand tiles are T in shared memory with a row stride of DM + 8 elements (DM
 * in 16, 32, 64, 128 >= d, columns d..DM-1 zero; the 16-byte pad staggers the banks of the
 * ldmatrix loads).  Global reads are 4 elements at a time (when vec: d % 4 == 0 and the pointers
 * 16-byte aligned), dO rounded to T while staged.  BQ (dK/dV) and BK (dQ) are 64 for DM <= 64
 * and 32 for DM = 128.
 *
 * (The WMMA kernels that first lived here, score tiles through shared memory, were removed on
 * 2026-11-27 after the mma.sync ones passed on an H200 and ran 1.4-2.5x faster:
 * tests/bench/results/gpu-nvidia-h200-20261127-161731.txt.)
 */
#ifndef MGT_KERNELS_ATTN_TC_CUH
#define MGT_KERNELS_ATTN_TC_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.cuh"
#include "common.cuh"

namespace mgt_attn_tc {

using mgt_attn_k::drop_mult;
using mgt_attn_k::drop_row0;
using mgt_attn_k::geom;
using mgt_attn_k::kv_off;
using mgt_attn_k::out_off;
using mgt_attn_k::qkv_off;
using mgt_attn_k::vec_off;

enum { NW = 4, NTC = 32 * NW }; /* warps, threads per block */

/* fp32 -> T, round to nearest even (T = float only in the host emulation). */
template <typename T> static __device__ __forceinline__ T to16(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float x)
{
	return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half to16<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float to16<float>(float x) { return x; }

template <typename T> struct alignas(8) q4 {
	T v[4];
};

static __device__ __forceinline__ float4 ld4s(const float *p)
{
	return *reinterpret_cast<const float4 *>(p);
}

/* Elements c..c+3 of row p (those below d; zeros past it) as T: fp32 rounded, or T as it is; vec:
 * one 16- or 8-byte load (c + 4 <= d, p aligned). */
template <typename T>
static __device__ __forceinline__ q4<T> ld4_as(const float *p, int c, int d, bool vec)
{
	float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	if (vec) {
		const float4 q = ld4s(p + c);
		v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
	} else {
#pragma unroll
		for (int k = 0; k < 4; k++)
			if (c + k < d)
				v[k] = p[c + k];
	}
	q4<T> w;
#pragma unroll
	for (int k = 0; k < 4; k++)
		w.v[k] = to16<T>(v[k]);
	return w;
}
template <typename T>
static __device__ __forceinline__ q4<T> ld4_as(const T *p, int c, int d, bool vec)
{
	if (vec)
		return *reinterpret_cast<const q4<T> *>(p + c);
	q4<T> w;
#pragma unroll
	for (int k = 0; k < 4; k++)
		w.v[k] = c + k < d ? p[c + k] : to16<T>(0.0f);
	return w;
}

/* Rows i0..i0+ROWS-1 of a strided [s, d] matrix of S elements (fp32, rounded to T, or T itself)
 * into dst [ROWS, DM+8]; zero past s and d.  Loads go in batches of 4 per thread before their
 * stores.  vec: 4-element loads (d % 4 == 0, src and ld aligned to them). */
template <typename T, int DM, int ROWS, typename S>
static __device__ __forceinline__ void load_tile(T *dst, const S *src, long long ld, int i0, int s,
						 int d, bool vec)
{
	constexpr int LD = DM + 8, G4 = DM / 4, N = ROWS * G4 / NTC, B = N < 4 ? N : 4;
	static_assert(ROWS * G4 % NTC == 0 && N % B == 0, "tile shape");
#pragma unroll
	for (int e0 = 0; e0 < N; e0 += B) {
		q4<T> v[B];
#pragma unroll
		for (int u = 0; u < B; u++) {
			const int e = (e0 + u) * NTC + threadIdx.x, rr = e / G4, c = e % G4 * 4;
			const int i = i0 + rr;
			if (i < s && c < d)
				v[u] = ld4_as<T>(src + (size_t)i * ld, c, d, vec);
			else
				v[u].v[0] = v[u].v[1] = v[u].v[2] = v[u].v[3] = to16<T>(0.0f);
		}
#pragma unroll
		for (int u = 0; u < B; u++) {
			const int e = (e0 + u) * NTC + threadIdx.x, rr = e / G4, c = e % G4 * 4;
			*reinterpret_cast<q4<T> *>(dst + rr * LD + c) = v[u];
		}
	}
}

/* dst[e] = src[i0 + e] for e < ROWS (0 past s). */
template <int ROWS>
static __device__ __forceinline__ void load_vec(float *dst, const float *src, int i0, int s)
{
	for (int e = threadIdx.x; e < ROWS; e += NTC)
		dst[e] = i0 + e < s ? src[i0 + e] : 0.0f;
}

/* Packed documents (G.seg): the document starts of query rows q0..q0+ROWS-1 of sequence j into
 * dst (0 past sq). */
template <int ROWS>
static __device__ __forceinline__ void load_seg(int *dst, const geom &G, int j, int q0)
{
	for (int e = threadIdx.x; e < ROWS; e += NTC)
		dst[e] = q0 + e < G.sq ? G.seg[(size_t)(q0 + e) * G.b + j] : 0;
}

/* The K and V rows k0..k0+ROWS-1 of group g of sequence j, staged into Ks and Vs (load_tile) from
 * kv (the fused qkv for self-attention: kv_off's slots r and r + 1). */
template <typename T, int DM, int ROWS>
static __device__ __forceinline__ void load_kv(T *Ks, T *Vs, const geom &G, const T *kv, int j, int g, int k0,
					       int vec)
{
	load_tile<T, DM, ROWS>(Ks, kv + kv_off(G, j, g, 0), G.ldk, k0, G.sk, G.d, vec);
	load_tile<T, DM, ROWS>(Vs, kv + kv_off(G, j, g, 1), G.ldk, k0, G.sk, G.d, vec);
}

/* The backward's query-side rows q0..q0+ROWS-1 of head n of sequence j: Q and dO staged into Qs and
 * dOs, lse and D into Ls and Ds. */
template <typename T, int DM, int ROWS>
static __device__ __forceinline__ void load_qdo(T *Qs, T *dOs, float *Ls, float *Ds, const geom &G,
						const T *q, const float *dout, const float *lse,
						const float *D, int j, int n, int q0, int vec)
{
	load_tile<T, DM, ROWS>(Qs, q + qkv_off(G, j, n / G.r, n % G.r), G.ldq, q0, G.sq, G.d, vec);
	load_tile<T, DM, ROWS>(dOs, dout + out_off(G, j, n), G.ldo, q0, G.sq, G.d, vec);
	load_vec<ROWS>(Ls, lse + vec_off(G, j, n), q0, G.sq);
	load_vec<ROWS>(Ds, D + vec_off(G, j, n), q0, G.sq);
}

} /* namespace mgt_attn_tc */

#endif
