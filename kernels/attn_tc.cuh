/* kernels/: device code of causal GQA self-attention on tensor cores (WMMA, 16x16x16 bf16 or fp16
 * operands, fp32 accumulators); kernels/attn_tc.cu launches it (kernels.h mgt_k_attn_tc_*).
 *
 * Function.  The same as kernels/attn.cuh (FlashAttention-2 forward, Algorithm 1, and backward,
 * Algorithm 2; the layouts, causal mask, GQA grouping, dropout placement and Philox indices of
 * lib/backend/backend.h attn_fwd / attn_bwd), except that qkv and out are T in memory (the
 * model's 16-bit storage: out written rounded to nearest even; dO, dQKV, lse stay fp32) and the
 * six matrix products take operands of type T as FlashAttention does: Q K^T, P V in the
 * forward; K Q^T, V dO^T, Pd^T dO, dS^T Q, Q K^T, dO V^T, dS K in the backward, with P (dropped
 * out) and dS rounded before their products.  Softmax statistics (running max m, sum l, lse),
 * the exponentials, dropout and the row terms D are fp32 (D in double, attn.cuh rowdot_kernel),
 * and all accumulation is fp32.  l sums the unrounded, undropped probabilities.
 *
 * WMMA is used only through fill / load / mma / store: no fragment element is touched, so the
 * code is correct for any fragment layout.  Row-wise work (masking, softmax, dropout, dS, the
 * online-softmax rescaling of O, output scaling) goes through fp32 tiles in shared memory: a warp
 * stores its accumulators (store_matrix_sync), __syncwarp, each lane works on its part of the
 * rows, __syncwarp, and the warp loads the result as operands (load_matrix_sync).
 *
 * Blocks have NW = 4 warps (NTC = 128 threads); warp w owns 16 rows of the block's row tile
 * (queries in the forward and dQ kernels, keys in the dK/dV kernel), so the row statistics never
 * leave the warp.  In row passes lane l works on row l / 2 of the warp's 16 and, of each group of
 * 8 columns, the 4 at offset 4 * (l % 2) (16-byte shared accesses; a row's two lanes combine with
 * one xor-shuffle).  Operand tiles are T in shared memory with a row stride of DM + 8 elements
 * (DM in 16, 32, 64, 128 >= d, columns d..DM-1 zero; the 16-byte pad staggers the banks of the
 * WMMA loads); fp32 score tiles have a row stride of (columns + 8) floats.  Global reads are
 * 4 elements at a time (when vec: d % 4 == 0 and the pointers 16-byte aligned), dO rounded to T
 * while staged; outputs leave through a 16 x 16 fp32 chunk per warp and are written 4 elements
 * at a time (out rounded to T, dQKV fp32).
 *
 * Forward (fwd_tc_kernel<T, DM>): grid (b*H, query tiles of 64), last tile first.  Q staged once in
 * shared memory, O accumulators (DM / 16 fragments per warp) in registers.  For each key tile of 64
 * up to the diagonal: K and V staged; S = Q K^T stored to the warp's fp32 tile; lanes apply the
 * scale and mask, update m and l, dropout, write P (T) to the warp's P tile; when some row's
 * max grew (alpha != 1, a warp-uniform test) the O fragments go through shared memory once to be
 * rescaled; O += P V.  At the end O / l and lse = m + log l.
 *
 * Backward: D = rowsum(dO * O) by attn.cuh's rowdot_kernel into ws.  dkdv_tc_kernel<T, DM, BQ>:
 * grid (b*ng, key tiles of 64); dK and dV accumulators in registers (2 * DM / 16 fragments per
 * warp); loops over the group's r heads in order and, for each, over the query tiles of BQ rows
 * from the diagonal on, in order: S^T = K Q^T and dP^T = V dO^T into fp32 tiles, lanes compute
 * P = exp(S * scale - lse), Pd = P * mu, dS = P * (dP * mu - D) (mu = dropout multiplier) into
 * two T tiles, then dV += Pd^T dO, dK += dS^T Q; dK is scaled at the end.  dq_tc_kernel<T, DM,
 * BK>: grid (b*H, query tiles of 64), last first; over its key tiles of BK in order: S, dP, dS as
 * above, dQ += dS K, scaled at the end.  Each output element is accumulated by one warp in a
 * fixed order (tensor-core sums are in a fixed order too): no atomics, bitwise reproducible.
 * BQ (dK/dV) and BK (dQ) are 64 for DM <= 64 and 32 for DM = 128 (shared memory under 99 KB).
 */
#ifndef MGT_KERNELS_ATTN_TC_CUH
#define MGT_KERNELS_ATTN_TC_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifndef MGT_CUDA_SIM
#include <mma.h> /* under the simulator, cuda_sim.h brings tests/sim/wmma_sim.h */
#endif

#include "attn.cuh"
#include "common.cuh"

namespace mgt_attn_tc {

using mgt_attn::drop_mult;
using mgt_attn::drop_row0;
using mgt_attn::geom;
using mgt_attn::out_off;
using mgt_attn::qkv_off;
using mgt_attn::vec_off;
namespace wmma = nvcuda::wmma;

enum { NW = 4, NTC = 32 * NW, CL = 20 }; /* warps, threads per block, row stride of a chunk */

/* Shared-memory bytes of the kernels (T elements of ES bytes). */
static constexpr size_t fwd_smem(int DM, int ES)
{
	/* Q, K, V [64, DM+8] T; per warp S [16, 72] fp32 and P [16, 72] T */
	return (size_t)3 * 64 * (DM + 8) * ES + (size_t)NW * 16 * 72 * (4 + ES);
}
static constexpr size_t dkdv_smem(int DM, int BQ, int ES)
{
	/* K, V [64, DM+8], Q, dO [BQ, DM+8] T; per warp S^T, dP^T [16, BQ+8] fp32, Pd^T, dS^T
	 * [16, BQ+8] T; lse, D [BQ] */
	return ((size_t)2 * 64 + 2 * BQ) * (DM + 8) * ES + (size_t)NW * 16 * (BQ + 8) * 2 * (4 + ES) +
	       (size_t)2 * BQ * 4;
}
static constexpr size_t dq_smem(int DM, int BK, int ES)
{
	/* Q, dO [64, DM+8], K, V [BK, DM+8] T; per warp S, dP [16, BK+8] fp32, dS [16, BK+8] T;
	 * lse, D [64] */
	return ((size_t)2 * 64 + 2 * BK) * (DM + 8) * ES + (size_t)NW * 16 * (BK + 8) * (8 + ES) +
	       (size_t)2 * 64 * 4;
}

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

template <typename T>
using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> /* B = X^T for a row-major X */
using frag_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
template <typename T>
using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
using frag_c = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

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

/* The K and V rows k0..k0+ROWS-1 of group g of sequence j, staged into Ks and Vs (load_tile). */
template <typename T, int DM, int ROWS>
static __device__ __forceinline__ void load_kv(T *Ks, T *Vs, const geom &G, const T *qkv, int j, int g, int k0,
					       int vec)
{
	load_tile<T, DM, ROWS>(Ks, qkv + qkv_off(G, j, g, G.r), G.ldq, k0, G.s, G.d, vec);
	load_tile<T, DM, ROWS>(Vs, qkv + qkv_off(G, j, g, G.r + 1), G.ldq, k0, G.s, G.d, vec);
}

/* The backward's query-side rows q0..q0+ROWS-1 of head n of sequence j: Q and dO staged into Qs and
 * dOs, lse and D into Ls and Ds. */
template <typename T, int DM, int ROWS>
static __device__ __forceinline__ void load_qdo(T *Qs, T *dOs, float *Ls, float *Ds, const geom &G,
						const T *qkv, const float *dout, const float *lse,
						const float *D, int j, int n, int q0, int vec)
{
	load_tile<T, DM, ROWS>(Qs, qkv + qkv_off(G, j, n / G.r, n % G.r), G.ldq, q0, G.s, G.d, vec);
	load_tile<T, DM, ROWS>(dOs, dout + out_off(G, j, n), G.ldo, q0, G.s, G.d, vec);
	load_vec<ROWS>(Ls, lse + vec_off(G, j, n), q0, G.s);
	load_vec<ROWS>(Ds, D + vec_off(G, j, n), q0, G.s);
}

/* dst[0..8) = v * f (fp32, or rounded to T), those below n = d - col; vec && n >= 8: two 4-element
 * stores. */
static __device__ __forceinline__ void st8(float *dst, const float (&v)[8], float f, int n, bool vec)
{
	if (vec && n >= 8) {
		*reinterpret_cast<float4 *>(dst) = make_float4(v[0] * f, v[1] * f, v[2] * f, v[3] * f);
		*reinterpret_cast<float4 *>(dst + 4) = make_float4(v[4] * f, v[5] * f, v[6] * f, v[7] * f);
		return;
	}
#pragma unroll
	for (int k = 0; k < 8; k++)
		if (k < n)
			dst[k] = v[k] * f;
}
template <typename T>
static __device__ __forceinline__ void st8(T *dst, const float (&v)[8], float f, int n, bool vec)
{
	if (vec && n >= 8) {
		q4<T> a, b;
#pragma unroll
		for (int k = 0; k < 4; k++)
			a.v[k] = to16<T>(v[k] * f), b.v[k] = to16<T>(v[k + 4] * f);
		*reinterpret_cast<q4<T> *>(dst) = a;
		*reinterpret_cast<q4<T> *>(dst + 4) = b;
		return;
	}
#pragma unroll
	for (int k = 0; k < 8; k++)
		if (k < n)
			dst[k] = to16<T>(v[k] * f);
}

/* Writes the warp's accumulators f[0..DM/16) (rows of this lane: row r = lane / 2 of the 16) times
 * f_row to dst row `i` (row pointer to O elements, fp32 or rounded to a 16-bit type; columns < d),
 * when `ok`; through the chunk buffer cb (2 x [16, CL] floats of the warp). */
template <int DM, typename O>
static __device__ __forceinline__ void write_rows(O *dst, const frag_c (&f)[DM / 16], float *cb, bool ok,
						  float frow, int d, bool vec)
{
	const int lane = threadIdx.x & 31, r = lane >> 1, h = lane & 1;
#pragma unroll
	for (int c = 0; c < DM / 16; c++) {
		float *cs = cb + (c & 1) * 16 * CL;
		wmma::store_matrix_sync(cs, f[c], CL, wmma::mem_row_major);
		__syncwarp();
		const int col = c * 16 + 8 * h;
		if (ok) {
			const float4 a = ld4s(cs + r * CL + 8 * h), b = ld4s(cs + r * CL + 8 * h + 4);
			const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
			st8(dst + col, v, frow, d - col, vec);
		}
		/* the next store goes to the other half of cb; the one after that follows the next
		 * __syncwarp, which every lane reaches after its reads here */
	}
}

/* acc[c] += A B[:, 16c : 16c + 16] for the warp's 16 rows: A is 16 x 16*KT (16-bit, row-major,
 * leading dimension lda), B is 16*KT x 16*DF (row-major, leading dimension LD).  The forward's
 * O += P V and the backward's dV += Pd^T dO, dK += dS^T Q, dQ += dS K. */
template <typename T, int KT, int DF, int LD>
static __device__ __forceinline__ void warp_accum(frag_c (&acc)[DF], const T *a, int lda, const T *b)
{
#pragma unroll 1
	for (int kk = 0; kk < KT; kk++) {
		frag_a<T> x;
		wmma::load_matrix_sync(x, a + kk * 16, lda);
#pragma unroll
		for (int c = 0; c < DF; c++) {
			frag_b<T> y;
			wmma::load_matrix_sync(y, b + kk * 16 * LD + c * 16, LD);
			wmma::mma_sync(acc[c], x, y, acc[c]);
		}
	}
}

/* The warp's two score-like products of one backward step, stored row-major (leading dimension
 * ldc) to c1 and c2: C1 = A1 B1^T and C2 = A2 B2^T, where A1, A2 are the warp's 16 rows of two
 * shared tiles (a1, a2, leading dimension LD) and B1, B2 the NF * 16 rows of two others, over the
 * DF 16-wide slices of the head dimension.  dK/dV uses it for S^T = K Q^T and dP^T = V dO^T, dQ
 * for S = Q K^T and dP = dO V^T. */
template <typename T, int NF, int DF, int LD>
static __device__ __forceinline__ void warp_products2(float *c1, float *c2, int ldc, const T *a1, const T *a2,
						      const T *b1, const T *b2)
{
	frag_c f1[NF], f2[NF];
#pragma unroll
	for (int c = 0; c < NF; c++) {
		wmma::fill_fragment(f1[c], 0.0f);
		wmma::fill_fragment(f2[c], 0.0f);
	}
#pragma unroll 1
	for (int kk = 0; kk < DF; kk++) {
		frag_a<T> x1, x2;
		wmma::load_matrix_sync(x1, a1 + kk * 16, LD);
		wmma::load_matrix_sync(x2, a2 + kk * 16, LD);
#pragma unroll
		for (int c = 0; c < NF; c++) {
			frag_bt<T> y1, y2;
			wmma::load_matrix_sync(y1, b1 + c * 16 * LD + kk * 16, LD);
			wmma::mma_sync(f1[c], x1, y1, f1[c]);
			wmma::load_matrix_sync(y2, b2 + c * 16 * LD + kk * 16, LD);
			wmma::mma_sync(f2[c], x2, y2, f2[c]);
		}
	}
#pragma unroll
	for (int c = 0; c < NF; c++) {
		wmma::store_matrix_sync(c1 + c * 16, f1[c], ldc, wmma::mem_row_major);
		wmma::store_matrix_sync(c2 + c * 16, f2[c], ldc, wmma::mem_row_major);
	}
}

/* ---- forward ---- */
template <typename T, int DM>
__global__ void __launch_bounds__(NTC, 1) fwd_tc_kernel(geom G, T *out, float *lse, const T *qkv,
						     int vec)
{
	constexpr int BQ = 16 * NW, BK = 64, LD = DM + 8, SL = BK + 8, DF = DM / 16, KF = BK / 16;
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = lane >> 1, h = lane & 1;
	T *Ks = reinterpret_cast<T *>(smem), *Vs = Ks + BK * LD, *Qs = Vs + BK * LD;
	float *Sw = reinterpret_cast<float *>(Qs + BQ * LD) + w * 16 * SL;
	T *Pw = reinterpret_cast<T *>(reinterpret_cast<float *>(Qs + BQ * LD) + NW * 16 * SL) +
		w * 16 * SL;
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = q0 + BQ < G.s ? q0 + BQ : G.s;
	const int i = q0 + w * 16 + r; /* this lane's query row */
	const bool rowok = i < G.s;
	const uint64_t rb = drop_row0(G, j, n);
	frag_c of[DF];
	float m = 0.0f, l = 0.0f;

	load_tile<T, DM, BQ>(Qs, qkv + qkv_off(G, j, g, n % G.r), G.ldq, q0, G.s, G.d, vec);
#pragma unroll
	for (int c = 0; c < DF; c++)
		wmma::fill_fragment(of[c], 0.0f);
	for (int k0 = 0; k0 < kend; k0 += BK) {
		__syncthreads(); /* Q loaded; previous K and V consumed */
		load_kv<T, DM, BK>(Ks, Vs, G, qkv, j, g, k0, vec);
		__syncthreads();
		/* S = Q K^T */
		{
			frag_c sf[KF];
#pragma unroll
			for (int c = 0; c < KF; c++)
				wmma::fill_fragment(sf[c], 0.0f);
#pragma unroll 1
			for (int kk = 0; kk < DF; kk++) {
				frag_a<T> qa;
				wmma::load_matrix_sync(qa, Qs + w * 16 * LD + kk * 16, LD);
#pragma unroll
				for (int c = 0; c < KF; c++) {
					frag_bt<T> kb;
					wmma::load_matrix_sync(kb, Ks + c * 16 * LD + kk * 16, LD);
					wmma::mma_sync(sf[c], qa, kb, sf[c]);
				}
			}
#pragma unroll
			for (int c = 0; c < KF; c++)
				wmma::store_matrix_sync(Sw + c * 16, sf[c], SL, wmma::mem_row_major);
		}
		__syncwarp();
		/* online softmax on row r, columns 8q + 4h + e: max, then exp, sum, dropout, P */
		float mx = -INFINITY;
#pragma unroll
		for (int q = 0; q < BK / 8; q++) {
			const float4 t = ld4s(Sw + r * SL + 8 * q + 4 * h);
			const float tv[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int k = k0 + 8 * q + 4 * h + e;
				mx = fmaxf(mx, rowok && k <= i ? tv[e] * G.scale : -INFINITY);
			}
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		const float mnew = k0 == 0 ? mx : fmaxf(m, mx);
		const float mb = mnew == -INFINITY ? 0.0f : mnew; /* rows past s: nothing valid */
		float sum = 0.0f;
#pragma unroll 2
		for (int q = 0; q < BK / 8; q++) {
			const float4 t = ld4s(Sw + r * SL + 8 * q + 4 * h);
			const float tv[4] = {t.x, t.y, t.z, t.w};
			q4<T> pw;
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int k = k0 + 8 * q + 4 * h + e;
				float v = 0.0f;
				if (rowok && k <= i) {
					const float x = tv[e] * G.scale;
					v = expf(x - mb);
					sum += v;
					if (G.p > 0.0f)
						v *= drop_mult(G, rb, i, k);
				}
				pw.v[e] = to16<T>(v);
			}
			*reinterpret_cast<q4<T> *>(Pw + r * SL + 8 * q + 4 * h) = pw;
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		float alpha = 1.0f;
		if (k0 == 0) {
			l = sum;
		} else {
			alpha = rowok ? expf(m - mb) : 1.0f;
			l = l * alpha + sum;
		}
		m = mnew;
		/* does any row of the warp need O rescaled?  (same answer in every lane) */
		float any = alpha != 1.0f ? 1.0f : 0.0f;
#pragma unroll
		for (int off = 1; off < 32; off *= 2)
			any = fmaxf(any, __shfl_xor_sync(0xffffffffu, any, off));
		__syncwarp(); /* P written, S consumed */
		if (any != 0.0f) {
#pragma unroll
			for (int c = 0; c < DF; c++) {
				float *cs = Sw + (c & 1) * 16 * CL;
				wmma::store_matrix_sync(cs, of[c], CL, wmma::mem_row_major);
				__syncwarp();
				float4 *p = reinterpret_cast<float4 *>(cs + r * CL + 8 * h);
				float4 a = p[0], b = p[1];
				a.x *= alpha; a.y *= alpha; a.z *= alpha; a.w *= alpha;
				b.x *= alpha; b.y *= alpha; b.z *= alpha; b.w *= alpha;
				p[0] = a;
				p[1] = b;
				__syncwarp();
				wmma::load_matrix_sync(of[c], cs, CL, wmma::mem_row_major);
			}
		}
		/* O += P V */
		warp_accum<T, KF, DF, LD>(of, Pw, SL, Vs);
	}
	__syncwarp(); /* the last rescale's loads are done before Sw is reused */
	write_rows<DM>(out + out_off(G, j, n) + (size_t)(rowok ? i : 0) * G.ldo, of, Sw, rowok,
		       rowok ? 1.0f / l : 0.0f, G.d, vec != 0);
	if (rowok && h == 0)
		lse[vec_off(G, j, n) + i] = m + logf(l);
}

/* ---- backward ---- */
/* grid (b*ng, key tiles of 64).  dK, dV of key rows k0.. of group g. */
template <typename T, int DM, int BQ>
__global__ void __launch_bounds__(NTC, 1) dkdv_tc_kernel(geom G, float *dqkv, const float *dout,
						      const T *qkv, const float *lse,
						      const float *D, int vec)
{
	constexpr int BK = 16 * NW, LD = DM + 8, SQ = BQ + 8, DF = DM / 16, QF = BQ / 16;
	static_assert(16 * SQ >= 2 * 16 * CL, "chunk buffer");
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = lane >> 1, h = lane & 1;
	T *Ks = reinterpret_cast<T *>(smem), *Vs = Ks + BK * LD, *Qs = Vs + BK * LD,
	  *dOs = Qs + BQ * LD;
	float *const F0 = reinterpret_cast<float *>(dOs + BQ * LD); /* S^T, dP^T of all warps */
	T *const T0 = reinterpret_cast<T *>(F0 + 2 * NW * 16 * SQ);  /* Pd^T, dS^T of all warps */
	float *Sw = F0 + w * 16 * SQ, *dPw = F0 + (NW + w) * 16 * SQ;
	T *Pw = T0 + w * 16 * SQ, *dSw = T0 + (NW + w) * 16 * SQ;
	float *Ls = reinterpret_cast<float *>(T0 + 2 * NW * 16 * SQ), *Ds = Ls + BQ;
	const int j = blockIdx.x / G.ng, g = blockIdx.x % G.ng, k0 = (int)blockIdx.y * BK;
	const int kr = k0 + w * 16 + r; /* this lane's key row */
	frag_c dk[DF], dv[DF];

#pragma unroll
	for (int c = 0; c < DF; c++) {
		wmma::fill_fragment(dk[c], 0.0f);
		wmma::fill_fragment(dv[c], 0.0f);
	}
	load_kv<T, DM, BK>(Ks, Vs, G, qkv, j, g, k0, vec);
	for (int n = g * G.r; n < (g + 1) * G.r; n++) {
		const uint64_t rb = drop_row0(G, j, n);
		for (int q0 = k0 / BQ * BQ; q0 < G.s; q0 += BQ) {
			__syncthreads(); /* previous tile's Q, dO, lse, D consumed */
			load_qdo<T, DM, BQ>(Qs, dOs, Ls, Ds, G, qkv, dout, lse, D, j, n, q0, vec);
			__syncthreads();
			/* S^T = K Q^T, dP^T = V dO^T (the warp's 16 keys x BQ queries) */
			warp_products2<T, QF, DF, LD>(Sw, dPw, SQ, Ks + w * 16 * LD, Vs + w * 16 * LD, Qs, dOs);
			__syncwarp();
			/* Pd = P mu, dS = P (dP mu - D) on key row kr, query columns 8q + 4h + e */
#pragma unroll 2
			for (int q = 0; q < BQ / 8; q++) {
				const int cc = 8 * q + 4 * h;
				const float4 s4 = ld4s(Sw + r * SQ + cc), p4 = ld4s(dPw + r * SQ + cc);
				const float4 l4 = ld4s(Ls + cc), d4 = ld4s(Ds + cc);
				const float sv[4] = {s4.x, s4.y, s4.z, s4.w}, pv[4] = {p4.x, p4.y, p4.z, p4.w};
				const float lv[4] = {l4.x, l4.y, l4.z, l4.w}, dv4[4] = {d4.x, d4.y, d4.z, d4.w};
				q4<T> pw, dw;
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int i = q0 + cc + e;
					float pd = 0.0f, ds = 0.0f;
					if (i < G.s && kr <= i) {
						const float P = expf(sv[e] * G.scale - lv[e]);
						const float mu =
							G.p > 0.0f ? drop_mult(G, rb, i, kr) : 1.0f;
						pd = P * mu;
						ds = P * (pv[e] * mu - dv4[e]);
					}
					pw.v[e] = to16<T>(pd);
					dw.v[e] = to16<T>(ds);
				}
				*reinterpret_cast<q4<T> *>(Pw + r * SQ + cc) = pw;
				*reinterpret_cast<q4<T> *>(dSw + r * SQ + cc) = dw;
			}
			__syncwarp();
			/* dV += Pd^T dO, dK += dS^T Q */
			warp_accum<T, QF, DF, LD>(dv, Pw, SQ, dOs);
			warp_accum<T, QF, DF, LD>(dk, dSw, SQ, Qs);
		}
	}
	const bool ok = kr < G.s;
	const size_t ro = (size_t)(ok ? kr : 0) * G.ldq;
	/* Sw was last read before the final __syncwarp above */
	write_rows<DM>(dqkv + qkv_off(G, j, g, G.r) + ro, dk, Sw, ok, G.scale, G.d, vec != 0);
	__syncwarp();
	write_rows<DM>(dqkv + qkv_off(G, j, g, G.r + 1) + ro, dv, Sw, ok, 1.0f, G.d, vec != 0);
}

/* grid (b*H, query tiles of 64), last first.  dQ of query rows q0.. of head n. */
template <typename T, int DM, int BK>
__global__ void __launch_bounds__(NTC, 1) dq_tc_kernel(geom G, float *dqkv, const float *dout,
						    const T *qkv, const float *lse,
						    const float *D, int vec)
{
	constexpr int BQ = 16 * NW, LD = DM + 8, SK = BK + 8, DF = DM / 16, KF = BK / 16;
	static_assert(16 * SK >= 2 * 16 * CL, "chunk buffer");
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = lane >> 1, h = lane & 1;
	T *Qs = reinterpret_cast<T *>(smem), *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD,
	  *Vs = Ks + BK * LD;
	float *S0 = reinterpret_cast<float *>(Vs + BK * LD);
	float *Sw = S0 + w * 16 * SK, *dPw = S0 + (NW + w) * 16 * SK;
	T *dSw = reinterpret_cast<T *>(S0 + 2 * NW * 16 * SK) + w * 16 * SK;
	float *Ls = reinterpret_cast<float *>(reinterpret_cast<T *>(S0 + 2 * NW * 16 * SK) +
					      NW * 16 * SK),
	      *Ds = Ls + BQ;
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = q0 + BQ < G.s ? q0 + BQ : G.s;
	const int i = q0 + w * 16 + r; /* this lane's query row */
	const bool rowok = i < G.s;
	const uint64_t rb = drop_row0(G, j, n);
	frag_c dq[DF];

#pragma unroll
	for (int c = 0; c < DF; c++)
		wmma::fill_fragment(dq[c], 0.0f);
	load_qdo<T, DM, BQ>(Qs, dOs, Ls, Ds, G, qkv, dout, lse, D, j, n, q0, vec);
	for (int k0 = 0; k0 < kend; k0 += BK) {
		__syncthreads(); /* Q, dO, lse, D loaded; previous K, V consumed */
		load_kv<T, DM, BK>(Ks, Vs, G, qkv, j, g, k0, vec);
		__syncthreads();
		/* S = Q K^T, dP = dO V^T (the warp's 16 queries x BK keys) */
		warp_products2<T, KF, DF, LD>(Sw, dPw, SK, Qs + w * 16 * LD, dOs + w * 16 * LD, Ks, Vs);
		__syncwarp();
		/* dS on query row i, key columns 8q + 4h + e */
		{
			const float li = Ls[w * 16 + r], di = Ds[w * 16 + r];
#pragma unroll 2
			for (int q = 0; q < BK / 8; q++) {
				const int cc = 8 * q + 4 * h;
				const float4 s4 = ld4s(Sw + r * SK + cc), p4 = ld4s(dPw + r * SK + cc);
				const float sv[4] = {s4.x, s4.y, s4.z, s4.w}, pv[4] = {p4.x, p4.y, p4.z, p4.w};
				q4<T> dw;
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int k = k0 + cc + e;
					float ds = 0.0f;
					if (rowok && k <= i) {
						const float P = expf(sv[e] * G.scale - li);
						const float mu = G.p > 0.0f ? drop_mult(G, rb, i, k) : 1.0f;
						ds = P * (pv[e] * mu - di);
					}
					dw.v[e] = to16<T>(ds);
				}
				*reinterpret_cast<q4<T> *>(dSw + r * SK + cc) = dw;
			}
		}
		__syncwarp();
		/* dQ += dS K */
		warp_accum<T, KF, DF, LD>(dq, dSw, SK, Ks);
	}
	write_rows<DM>(dqkv + qkv_off(G, j, g, n % G.r) + (size_t)(rowok ? i : 0) * G.ldq, dq, Sw,
		       rowok, G.scale, G.d, vec != 0);
}

} /* namespace mgt_attn_tc */

#endif
