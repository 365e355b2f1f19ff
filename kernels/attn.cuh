/* kernels/: device code of GQA self-attention (causal, block-diagonal causal over packed
 * documents, or bidirectional under a key padding mask) in fp32 on CUDA cores, flash-attention style
 * (Dao 2023, "FlashAttention-2", section 3.1 / Algorithm 1 forward, section 3.2 / Algorithm 2
 * backward); kernels/attn.cu launches it.  The function is the CPU backend's
 * (lib/backend/cpu_attn.c, lib/backend/backend.h attn_forward / attn_backward) up to fp32 rounding.
 *
 * Layouts (backend.h): qkv [T, ng, r + 2, d] with T = s*b sequence-first (token t = i*b + j for
 * position i of sequence j); query head n (0 <= n < H = ng*r) is slot n % r of group g = n / r,
 * whose key and value are slots r and r + 1; out, dout [T, H, d]; lse and the backward's row terms
 * D [b, H, s].  Scores S = (q . k) / sqrt(d), causal (key i' <= query i), or under the key padding
 * mask key_mask [T] (geom km: key i' of sequence j visible iff km[i'*b + j] != 0, for every query;
 * the kernels' template argument MASK, false for the causal ones), or over packed documents
 * (geom seg, backend.h mgt_attn.seg_start, causal without a mask: query i of sequence j sees keys
 * seg[i*b + j] <= i' <= i, first_key).  Dropout element
 * (j, n, i, i') is kept by mgt_attn_drop_word(key, j*heads_total + head0 + n, s, s, i, i') (lib/util;
 * drop_mult, and drop_mult4 for the four elements one Philox call serves); it applies to the
 * probabilities after the softmax sums (the normalizer l uses the undropped values).
 *
 * Blocks (context parallelism, backend.h MGT_ATTN_BLOCK).  The kernels compute one block of that
 * attention in general (struct geom): sq query rows at global positions qoff.. read from the
 * query slots of a fused qkv, against sk key rows at global positions koff.. read from a separate
 * key/value tensor with kvw slots per group (the key at slot kslot, the value after it); key k is
 * visible from query i iff koff + k <= qoff + i, i.e. k <= i + dlt with dlt = qoff - koff; lse and
 * D rows have stride ld_lse; the dropout draw uses the global positions qoff + i and koff + k
 * with the full length s.  A row with no visible key gets out 0 and lse -inf.  The backward
 * writes (acc = 0) or adds into (acc = 1) dQ and dK/dV.  The whole-sequence attention is the
 * block sq = sk = s, qoff = koff = 0, ld_lse = s, with the key/value slots read from (and their
 * gradients written into) the same fused qkv (kvw = r + 2, kslot = r), acc = 0 (make_geom); under
 * a key mask dlt = sk, so every causal bound below covers all keys, and each thread reads the mask
 * bytes of its score columns (key_vis) once per key tile.  Cross-attention (backend.h MGT_ATTN_CROSS,
 * make_xgeom) is the block sq x sk with the queries read from a separate q [sq*b, ng*r, d] (qw = r
 * slots a group instead of r + 2), keys and values from kv [sk*b, ng, 2, d], dlt = sk (no causal
 * bound, with or without a key mask), and the dropout index of its two lengths (dsq = sq, dsk = sk
 * in place of s, s); its backward writes dq and dkv.
 *
 * Tiling.  A thread block has NT = 256 threads seen as a 16 x 16 grid (ty, tx).  Tiles of BQ query rows,
 * BK keys and DM >= d head columns (DM in 16, 32, 64, 128; columns d..DM-1 are zero in shared
 * memory and never stored) sit in shared memory with a row stride of DM + 1 floats (conflict-free
 * column reads); a BQ x BK score tile lives in registers, thread (ty, tx) holding rows
 * ty + 16a and columns tx + 16c, so a row is spread over 16 consecutive lanes and its max and sum
 * are xor-shuffles within a half warp.  Probabilities go through a shared tile with row stride
 * BK + 16 for the products with V, dO, Q or K.  Head-dimension accumulators (O, dQ, dK, dV) are
 * held the same way: rows ty + 16a, columns tx + 16c.  Tiles strictly above the causal diagonal
 * are skipped, and with packed documents the tiles wholly before them: the forward and dQ start
 * at the key tile of the query tile's earliest document start (first_ktile), the dK/dV kernel
 * stops at the query tile whose first row starts its document after the key tile (doc_after);
 * inside the tiles visited, keys before a row's document start are masked element by element
 * (first_key).  Rows past sq (sk) and columns past d are zero-filled and masked.
 *
 * Forward (fwd_kernel): one block per (query tile, sequence, head), the last query tiles (most
 * keys) first.  For each key tile: S = Q K^T scale, online softmax (running max m and sum l per
 * row, O rescaled by e^(m_old - m_new)), dropout on the probabilities, O += P V.  At the end
 * O /= l and lse = m + log l.
 * Backward: rowdot_kernel writes D_i = rowsum(dO_i * O_i) (in double, rounded once, as the CPU
 * does) into ws.  dkdv_kernel: one block per (key tile, sequence, kv group) keeps its dK and dV
 * rows in registers and loops over the group's r query heads in order and, for each, over the
 * query tiles from the diagonal down in order: it recomputes P = exp(S - lse), Pd = P * mask/(1-p),
 * dV += Pd^T dO, dPd = dO V^T, dS = P * (dPd * mask/(1-p) - D), dK += dS^T Q; dK is scaled once at
 * the end.  dq_kernel: one block per (query tile, sequence, head) recomputes the same dS over its
 * key tiles in order and accumulates dQ = scale * dS K.  Every output element is written by one
 * thread that sums in a fixed order: no atomics, so results are bitwise reproducible.  The cost
 * is computing S and dPd twice in the backward (seven tile products instead of five).
 *
 * Position bias (backend.h mgt_attn.bias, T5's relative positions; the kernels'
 * template argument BIAS, whole-sequence geometry only): the score of (i, k) of local head n
 * gains G.bias[(k - i + s - 1) heads_total + head0 + n] after the scaling, in natural units (the
 * kernels use expf, so lse stays the log-sum-exp of the biased scores), in the forward and in
 * both backward kernels' recomputation of P.  The gradient of the bias is the sum of dS (the
 * softmax input's gradient, dropout included) along each diagonal over sequences and queries:
 * dq_kernel writes every dS it computes into ws (geom ds: [b, H, s, s] fp32, O(b H s^2) memory,
 * as Transformer Engine's unfused attention that Megatron-Core runs for a bias with a gradient
 * materializes the scores), and dbias_kernel, one thread per (head, distance), adds the diagonal
 * into dbias in the CPU's order.
 *
 * ws (backward): D as floats [b, H, s], i.e. b*H*s*4 bytes (ws_bytes); for a block
 * [b, H, ld_lse] (blk_ws_bytes); with a position bias D, then dS from the next multiple of 256
 * bytes, b*H*s*s*4 bytes (bias_ws_bytes).
 */
#ifndef MGT_KERNELS_ATTN_CUH
#define MGT_KERNELS_ATTN_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common.cuh"
#include "philox.cuh"

namespace mgt_attn_k {

enum { NT = 256, TW = 16 }; /* threads per block; the block is a TW x TW grid */

struct geom {
	int b, ng, r, d, H, head0, heads_total;
	int dsq, dsk;       /* the query and key lengths of the dropout index: the full sequence
			     * length s twice (self-attention, blocks); sq and sk (cross-attention) */
	int sq, sk;         /* query rows and key rows of the block */
	int qw;             /* head slots per group of the query tensor: r + 2 (fused qkv), r (q) */
	int qoff, koff;     /* global positions of query row 0 and key row 0 (dropout index) */
	int dlt;            /* qoff - koff: key k is visible from query i iff k <= i + dlt */
	int kvw, kslot;     /* slots per group of the key/value tensor; the key's slot (value: next) */
	int ld_lse;         /* floats between the (j, n) rows of lse and D */
	int acc;            /* backward: 1 adds into dQ and dK/dV, 0 writes them */
	long long ldq, ldk, ldo; /* floats between positions i and i + 1 of one sequence in q, kv, out */
	float scale, p, ks; /* 1/sqrt(d), dropout probability, 1/(1 - p) */
	uint64_t key;
	const uint8_t *km;  /* key padding mask [sk*b] (key k of sequence j: km[k*b + j], 1 visible);
			     * NULL: causal.  Read by the MASK kernels only. */
	const float *bias;  /* position bias [2 dsq - 1, heads_total] (backend.h mgt_attn.bias; the
			     * whole sequence only); read by the BIAS kernels only, NULL otherwise */
	float *ds;          /* BIAS backward: dq_kernel writes dS [b, H, sq, sk] here, dbias_kernel
			     * sums it by distance; NULL otherwise */
	const int32_t *seg; /* packed documents (whole sequence, causal; backend.h mgt_attn.seg_start):
			     * query i of sequence j sees keys seg[i*b + j] <= k <= i; NULL: none */
};

/* The block geometry with the common fields; the caller sets qoff, koff, kvw, kslot, ld_lse, acc
 * (then fix_geom). */
static inline geom base_geom(int sq, int sk, int s, int b, int ng, int r, int d, float p, uint64_t key,
			     int head0, int heads_total)
{
	geom G;
	G.dsq = G.dsk = s; G.b = b; G.ng = ng; G.r = r; G.d = d; G.H = ng * r;
	G.head0 = head0; G.heads_total = heads_total;
	G.sq = sq; G.sk = sk; G.qw = r + 2;
	G.qoff = G.koff = G.dlt = 0;
	G.kvw = r + 2; G.kslot = r;
	G.ld_lse = sq;
	G.acc = 0;
	G.ldq = (long long)b * ng * (r + 2) * d;
	G.ldk = G.ldq;
	G.ldo = (long long)b * ng * r * d;
	G.scale = 1.0f / sqrtf((float)d);
	G.p = p;
	G.ks = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
	G.key = key;
	G.km = nullptr;
	G.bias = nullptr;
	G.ds = nullptr;
	G.seg = nullptr;
	return G;
}

/* Whole-sequence attention of qkv (backend.h MGT_ATTN_SELF): causal, or under key mask km
 * (dlt = s: no causal bound). */
static inline geom make_geom(int s, int b, int ng, int r, int d, float p, uint64_t key, int head0,
			     int heads_total, const uint8_t *km)
{
	geom G = base_geom(s, s, s, b, ng, r, d, p, key, head0, heads_total);
	if (km) {
		G.km = km;
		G.dlt = s;
	}
	return G;
}

/* One block of context-parallel attention (backend.h MGT_ATTN_BLOCK): queries from a fused qkv,
 * keys and values from kv [sk*b, ng, 2, d]; the backward accumulates. */
static inline geom make_blk_geom(const mgt_k_attn_blk *g)
{
	geom G = base_geom(g->sq, g->sk, g->s, g->b, g->ng, g->r, g->d, g->p, g->key, g->head0,
			   g->heads_total);
	G.qoff = g->qoff; G.koff = g->koff; G.dlt = g->qoff - g->koff;
	G.kvw = 2; G.kslot = 0;
	G.ldk = (long long)g->b * g->ng * 2 * g->d;
	G.ld_lse = g->ld_lse;
	G.acc = 1;
	return G;
}

/* Cross-attention (backend.h MGT_ATTN_CROSS): queries from q [sq*b, ng*r, d] (r slots a
 * group), keys and values from kv [sk*b, ng, 2, d]; no causal bound (dlt = sk), key mask km or
 * none (then every key is visible: the MASK = false kernels with dlt = sk); dropout index
 * ((j*heads_total + head0 + n)*sq + i)*sk + k; the backward writes. */
static inline geom make_xgeom(int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key,
			      int head0, int heads_total, const uint8_t *km)
{
	geom G = base_geom(sq, sk, sq, b, ng, r, d, p, key, head0, heads_total);
	G.dsk = sk;
	G.dlt = sk;
	G.qw = r;
	G.kvw = 2; G.kslot = 0;
	G.ldq = (long long)b * ng * r * d;
	G.ldk = (long long)b * ng * 2 * d;
	G.km = km;
	return G;
}

static inline size_t ws_bytes(int s, int b, int ng, int r)
{
	if (s <= 0 || b <= 0 || ng <= 0 || r <= 0)
		return 0;
	return (size_t)s * b * ng * r * sizeof(float);
}

/* The backward with a position bias (BIAS): D, then from the next multiple of 256 bytes dS
 * [b, H, s, s] fp32 (geom ds). */
static inline size_t bias_ds_offset(int s, int b, int ng, int r)
{
	return (ws_bytes(s, b, ng, r) + 255) / 256 * 256;
}
static inline size_t bias_ws_bytes(int s, int b, int ng, int r)
{
	if (s <= 0 || b <= 0 || ng <= 0 || r <= 0)
		return 0;
	return bias_ds_offset(s, b, ng, r) + (size_t)s * s * b * ng * r * sizeof(float);
}

/* A block's D [b, H, ld_lse] (laid out as its lse). */
static inline size_t blk_ws_bytes(const mgt_k_attn_blk *g)
{
	return ws_bytes(g->ld_lse, g->b, g->ng, g->r);
}

/* Dynamic shared memory of the kernels, in bytes. */
static constexpr size_t fwd_smem(int DM, int BQ, int BK)
{
	return ((size_t)(BQ + BK) * (DM + 1) + (size_t)BQ * (BK + 16)) * sizeof(float);
}
static constexpr size_t bwd_smem(int DM, int BQ, int BK)
{
	return ((size_t)2 * (BQ + BK) * (DM + 1) + (size_t)BQ * (BK + 16) + 2 * BQ) * sizeof(float);
}

/* ---- addressing ---- */
/* Slot `slot` (0..r-1 queries, r key, r + 1 value) of group g, position 0 of sequence j, in the
 * fused qkv, or query slot `slot` of q (cross-attention: qw = r); row stride ldq. */
static __device__ __forceinline__ size_t qkv_off(const geom &G, int j, int g, int slot)
{
	return ((size_t)j * G.ng + g) * (size_t)G.qw * G.d + (size_t)slot * G.d;
}
/* Key (v = 0) or value (v = 1) of group g, position 0 of sequence j, in the key/value tensor
 * (row stride ldk). */
static __device__ __forceinline__ size_t kv_off(const geom &G, int j, int g, int v)
{
	return ((size_t)j * G.ng + g) * (size_t)G.kvw * G.d + (size_t)(G.kslot + v) * G.d;
}
static __device__ __forceinline__ size_t out_off(const geom &G, int j, int n)
{
	return ((size_t)j * G.H + n) * G.d;
}
/* Row (j, n) of lse and D: element i at this offset + i. */
static __device__ __forceinline__ size_t vec_off(const geom &G, int j, int n)
{
	return ((size_t)j * G.H + n) * G.ld_lse;
}
/* Dropout of element (j, n, i, k) (block rows i and k): lib/util mgt_attn_drop_word's word for
 * global positions (qoff + i, koff + k) of plane j*heads_total + head0 + n, whose rows start at
 * drop_row0 = plane * dsq (dsq = dsk = s but for cross-attention). */
static __device__ __forceinline__ uint64_t drop_row0(const geom &G, int j, int n)
{
	return ((uint64_t)j * G.heads_total + G.head0 + n) * (uint64_t)G.dsq;
}
/* The Philox counter of the four elements {q, q + 8} x {k, k + 8} (global positions, bit 3 of each clear). */
static __device__ __forceinline__ uint64_t drop_ctr(const geom &G, uint64_t rb, unsigned q, unsigned k)
{
	return (rb + q) * (uint64_t)G.dsk + k;
}
static __device__ __forceinline__ float drop_mult(const geom &G, uint64_t rb, int i, int k)
{
	const unsigned q = (unsigned)(G.qoff + i), kk = (unsigned)(G.koff + k);
	uint32_t w[4];
	mgt_philox4(G.key, drop_ctr(G, rb, q & ~8u, kk & ~8u), w);
	const unsigned x = ((q >> 3) & 1u) * 2u + ((kk >> 3) & 1u);
	return mgt_dropout_mult_w(x & 2u ? (x & 1u ? w[3] : w[2]) : (x & 1u ? w[1] : w[0]), G.p, G.ks);
}
/* The multipliers of the four elements (i, k), (i, k + 8), (i + 8, k), (i + 8, k + 8) (block rows
 * and columns) into mu[0..3]: from one Philox call when the global positions of i and k have bit
 * 3 clear (the tensor-core kernels' tiles start on multiples of 16 when qoff and koff do: always
 * today, their callers have qoff = koff = 0), else element by element. */
static __device__ __forceinline__ void drop_mult4(const geom &G, uint64_t rb, int i, int k, float mu[4])
{
	const unsigned q = (unsigned)(G.qoff + i), kk = (unsigned)(G.koff + k);
	if (((q | kk) & 8u) == 0) {
		uint32_t w[4];
		mgt_philox4(G.key, drop_ctr(G, rb, q, kk), w);
#pragma unroll
		for (int x = 0; x < 4; x++)
			mu[x] = mgt_dropout_mult_w(w[x], G.p, G.ks);
	} else {
		mu[0] = drop_mult(G, rb, i, k);
		mu[1] = drop_mult(G, rb, i, k + 8);
		mu[2] = drop_mult(G, rb, i + 8, k);
		mu[3] = drop_mult(G, rb, i + 8, k + 8);
	}
}
/* The last key row visible from query row i (keys 0..last_key), -1 or less when none (also for
 * rows past sq). */
static __device__ __forceinline__ int last_key(const geom &G, int i)
{
	const int e = i + G.dlt;
	return i >= G.sq ? -1 : e < G.sk ? e : G.sk - 1;
}

/* The first key row visible from query row i of sequence j: the start of its document with
 * packed sequences (G.seg), else 0. */
static __device__ __forceinline__ int first_key(const geom &G, int j, int i)
{
	return G.seg && i < G.sq ? G.seg[(size_t)i * G.b + j] : 0;
}

/* The first key tile (of BK rows) that any query of the tile from row q0 (< sq) of sequence j
 * sees: the tile holding row q0's document start (starts never decrease along a sequence,
 * backend.h mgt_attn.seg_start, so row q0 has the tile's earliest); 0 without packed documents. */
template <int BK>
static __device__ __forceinline__ int first_ktile(const geom &G, int j, int q0)
{
	return first_key(G, j, q0) / BK * BK;
}

/* Packed documents: query row i (< sq) of sequence j starts its document after key kmax, and so
 * does every later row (starts never decrease): none of them sees a key up to kmax.  False
 * without packed documents and past sq. */
static __device__ __forceinline__ bool doc_after(const geom &G, int j, int i, int kmax)
{
	return G.seg && i < G.sq && G.seg[(size_t)i * G.b + j] > kmax;
}

/* The position bias of score (i, k) (block rows) of local head n: bias[(koff + k - qoff - i +
 * dsq - 1) heads_total + head0 + n] (backend.h mgt_attn.bias).  Read for visible keys only. */
static __device__ __forceinline__ float pos_bias(const geom &G, int n, int i, int k)
{
	return G.bias[(size_t)(G.koff + k - G.qoff - i + G.dsq - 1) * (size_t)G.heads_total +
		      (size_t)(G.head0 + n)];
}

/* vis[c]: key k0 + tx + 16c (this thread's score columns) of sequence j visible under the key mask
 * (false past sk); all true without MASK (the causal kernels: folded away). */
template <bool MASK, int CA>
static __device__ __forceinline__ void key_vis(bool (&vis)[CA], const geom &G, int j, int k0)
{
	const int tx = threadIdx.x % TW;
#pragma unroll
	for (int c = 0; c < CA; c++) {
		const int k = k0 + tx + TW * c;
		vis[c] = !MASK || (k < G.sk && G.km[(size_t)k * G.b + j] != 0);
	}
}

/* ---- shared-memory tiles ---- */
/* Rows i0..i0+ROWS-1 of a strided [s, d] matrix into a [ROWS, DM + 1] tile, zero past s and d. */
template <int DM, int ROWS>
static __device__ __forceinline__ void load_rows(float *dst, const float *src, long long ld, int i0,
						 int s, int d)
{
	for (int e = threadIdx.x; e < ROWS * DM; e += NT) {
		const int rr = e / DM, c = e % DM, i = i0 + rr;
		dst[rr * (DM + 1) + c] = i < s && c < d ? src[(size_t)i * ld + c] : 0.0f;
	}
}

template <int ROWS>
static __device__ __forceinline__ void load_vec(float *dst, const float *src, int i0, int s)
{
	for (int e = threadIdx.x; e < ROWS; e += NT)
		dst[e] = i0 + e < s ? src[i0 + e] : 0.0f;
}

/* acc[a][c] = A[ty + 16a, :] . B[tx + 16c, :] over DM columns (tiles with row stride DM + 1). */
template <int DM, int RA, int CA>
static __device__ __forceinline__ void dot_tile(float (&acc)[RA][CA], const float *A,
						const float *B)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++)
#pragma unroll
		for (int c = 0; c < CA; c++)
			acc[a][c] = 0.0f;
#pragma unroll 8
	for (int k = 0; k < DM; k++) {
		float av[RA], bv[CA];
#pragma unroll
		for (int a = 0; a < RA; a++)
			av[a] = A[(ty + TW * a) * (DM + 1) + k];
#pragma unroll
		for (int c = 0; c < CA; c++)
			bv[c] = B[(tx + TW * c) * (DM + 1) + k];
#pragma unroll
		for (int a = 0; a < RA; a++)
#pragma unroll
			for (int c = 0; c < CA; c++)
				acc[a][c] = fmaf(av[a], bv[c], acc[a][c]);
	}
}

/* acc[a][c] += sum_k P(ty + 16a, k) X[k, tx + 16c] for k < KN, with P(row, k) at
 * P[row * prow + k * pk] and X of row stride DM + 1. */
template <int DM, int RA, int KN>
static __device__ __forceinline__ void acc_tile(float (&acc)[RA][DM / TW], const float *P, int prow,
						int pk, const float *X)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll 8
	for (int k = 0; k < KN; k++) {
		float pv[RA], xv[DM / TW];
#pragma unroll
		for (int a = 0; a < RA; a++)
			pv[a] = P[(ty + TW * a) * prow + k * pk];
#pragma unroll
		for (int c = 0; c < DM / TW; c++)
			xv[c] = X[k * (DM + 1) + tx + TW * c];
#pragma unroll
		for (int a = 0; a < RA; a++)
#pragma unroll
			for (int c = 0; c < DM / TW; c++)
				acc[a][c] = fmaf(pv[a], xv[c], acc[a][c]);
	}
}

/* Register tile v (rows ty + 16a, columns tx + 16c) into shared P with row stride BK + 16. */
template <int BK, int RA, int CA>
static __device__ __forceinline__ void store_tile(float *P, const float (&v)[RA][CA])
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++)
#pragma unroll
		for (int c = 0; c < CA; c++)
			P[(ty + TW * a) * (BK + 16) + tx + TW * c] = v[a][c];
}

/* Accumulator rows i0 + ty + 16a (< s), columns tx + 16c (< d) times f into dst (row stride ld):
 * written, or added to dst when acc. */
template <int DM, int RA>
static __device__ __forceinline__ void store_rows(float *dst, long long ld,
						  const float (&v)[RA][DM / TW], int i0, int s,
						  int d, float f, int acc = 0)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int i = i0 + ty + TW * a;
		if (i >= s)
			continue;
#pragma unroll
		for (int c = 0; c < DM / TW; c++)
			if (tx + TW * c < d) {
				float *o = dst + (size_t)i * ld + tx + TW * c;
				*o = acc ? *o + v[a][c] * f : v[a][c] * f;
			}
	}
}

/* Max and sum over the 16 lanes holding one score row. */
static __device__ __forceinline__ float row_max(float v)
{
#pragma unroll
	for (int off = TW / 2; off > 0; off /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}
static __device__ __forceinline__ float row_sum(float v)
{
#pragma unroll
	for (int off = TW / 2; off > 0; off /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

/* ---- forward ---- */
/* One key tile of the online softmax for score tile sc of head n (raw dots in, dropped-out
 * unnormalized probabilities out; keys past the causal bound, before the row's document start or
 * with vis false left out): the score is dot * scale, plus pos_bias under BIAS (natural units, as
 * lse); updates the running max m and sum l of each row and rescales o (first: the row's first
 * key tile, which sets m and l). */
template <bool BIAS, int RA, int CA, int DC>
static __device__ __forceinline__ void fwd_softmax(float (&sc)[RA][CA], float (&o)[RA][DC],
						   float (&m)[RA], float (&l)[RA], const bool (&vis)[CA],
						   const geom &G, int q0, int k0, bool first, uint64_t rb, int n,
						   int j)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int i = q0 + ty + TW * a, kl = last_key(G, i), kf = first_key(G, j, i);
		float mx = -INFINITY;
#pragma unroll
		for (int c = 0; c < CA; c++) {
			const int k = k0 + tx + TW * c;
			const bool see = k <= kl && k >= kf && vis[c];
			sc[a][c] = see ? sc[a][c] * G.scale : -INFINITY;
			if (BIAS && see)
				sc[a][c] += pos_bias(G, n, i, k);
			mx = fmaxf(mx, sc[a][c]);
		}
		mx = row_max(mx);
		const float mnew = first ? mx : fmaxf(m[a], mx);
		const float mb = mnew == -INFINITY ? 0.0f : mnew; /* no visible key (yet) */
		float sum = 0.0f;
#pragma unroll
		for (int c = 0; c < CA; c++) {
			sc[a][c] = sc[a][c] == -INFINITY ? 0.0f : expf(sc[a][c] - mb);
			sum += sc[a][c];
		}
		sum = row_sum(sum);
		if (first) {
			l[a] = sum;
		} else {
			const float alpha = expf(m[a] - mb);
			l[a] = l[a] * alpha + sum;
#pragma unroll
			for (int c = 0; c < DC; c++)
				o[a][c] *= alpha;
		}
		m[a] = mnew;
		if (G.p > 0.0f) {
#pragma unroll
			for (int c = 0; c < CA; c++) {
				const int k = k0 + tx + TW * c;
				if (k <= kl && k >= kf && vis[c])
					sc[a][c] *= drop_mult(G, rb, i, k);
			}
		}
	}
}

template <int DM, int RA>
static __device__ __forceinline__ void fwd_finish(const geom &G, float *O, float *L,
						  float (&o)[RA][DM / TW], const float (&m)[RA],
						  const float (&l)[RA], int q0)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int i = q0 + ty + TW * a;
		const float inv = l[a] > 0.0f ? 1.0f / l[a] : 0.0f; /* no visible key: out 0 */
#pragma unroll
		for (int c = 0; c < DM / TW; c++)
			o[a][c] *= inv;
		if (tx == 0 && i < G.sq) /* no visible key: m is 0 or -inf, logf(0) = -inf */
			L[i] = m[a] + logf(l[a]);
	}
	store_rows<DM, RA>(O, G.ldo, o, q0, G.sq, G.d, 1.0f);
}

/* The end of the keys that query rows q0..q0+BQ-1 see (0 or less when none). */
template <int BQ>
static __device__ __forceinline__ int key_end(const geom &G, int q0)
{
	const int e = (q0 + BQ < G.sq ? q0 + BQ : G.sq) + G.dlt;
	return e < G.sk ? e : G.sk;
}

/* grid (b*H, query tiles), last tile first; shared Q [BQ, DM+1], K or V [BK, DM+1] (one buffer),
 * P [BQ, BK+16].  Queries from q's query slots, keys and values from kv (q itself for the whole
 * sequence).  MASK: under G.km.  Packed documents (G.seg): from the first key tile a query of
 * the tile sees (first_ktile; the tiles before it are wholly masked and would leave m, l and o as
 * they are). */
template <int DM, int BQ, int BK, bool MASK = false, bool BIAS = false, bool SEG = false>
__global__ void __launch_bounds__(NT) fwd_kernel(geom G, float *out, float *lse, const float *q,
						 const float *kv)
{
	constexpr int RA = BQ / TW, CA = BK / TW, DC = DM / TW;
	MGT_DYN_SHARED(float, smem);
	float *Qs = smem, *KVs = Qs + BQ * (DM + 1), *Ps = KVs + BK * (DM + 1);
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = key_end<BQ>(G, q0), k1 = SEG ? first_ktile<BK>(G, j, q0) : 0;
	const float *K = kv + kv_off(G, j, g, 0), *V = kv + kv_off(G, j, g, 1);
	const uint64_t rb = drop_row0(G, j, n);
	float o[RA][DC], m[RA], l[RA];

#pragma unroll
	for (int a = 0; a < RA; a++) {
		m[a] = l[a] = 0.0f;
#pragma unroll
		for (int c = 0; c < DC; c++)
			o[a][c] = 0.0f;
	}
	load_rows<DM, BQ>(Qs, q + qkv_off(G, j, g, n % G.r), G.ldq, q0, G.sq, G.d);
	for (int k0 = k1; k0 < kend; k0 += BK) {
		float sc[RA][CA];
		bool vis[CA];
		key_vis<MASK>(vis, G, j, k0);
		load_rows<DM, BK>(KVs, K, G.ldk, k0, G.sk, G.d);
		__syncthreads();
		dot_tile<DM>(sc, Qs, KVs);
		fwd_softmax<BIAS>(sc, o, m, l, vis, G, q0, k0, k0 == k1, rb, n, j);
		__syncthreads(); /* K consumed */
		load_rows<DM, BK>(KVs, V, G.ldk, k0, G.sk, G.d);
		store_tile<BK>(Ps, sc);
		__syncthreads();
		acc_tile<DM, RA, BK>(o, Ps, BK + 16, 1, KVs);
		__syncthreads(); /* V and P consumed */
	}
	fwd_finish<DM>(G, out + out_off(G, j, n), lse + vec_off(G, j, n), o, m, l, q0);
}

/* ---- backward ---- */
/* D = rowsum(dO * O), one warp per (token, head) row of out (sq*b tokens; O elements: fp32, or
 * 16-bit read as their fp32 values), into D [b, H, ld_lse]. */
template <typename O>
static __global__ void __launch_bounds__(NT) rowdot_kernel(geom G, float *D, const float *dout, const O *out)
{
	const long long w = (long long)blockIdx.x * (NT / 32) + threadIdx.x / 32;
	const long long rows = (long long)G.sq * G.b * G.H;
	const int lane = threadIdx.x % 32;
	double acc = 0.0;
	if (w < rows)
		for (int c = lane; c < G.d; c += 32)
			acc += (double)dout[w * G.d + c] * (double)mgt_ld1(out, (size_t)(w * G.d + c));
#pragma unroll
	for (int off = 16; off > 0; off /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, off);
	if (w < rows && lane == 0) {
		const long long t = w / G.H, i = t / G.b;
		const int n = (int)(w % G.H), j = (int)(t % G.b);
		D[vec_off(G, j, n) + i] = (float)acc;
	}
}

/* From raw dots sc = q.k and dp = dO.v of a tile of head n: sc = Pd = P * mask/(1-p), dp = dS =
 * P * (dp * mask/(1-p) - D), with P = exp(sc * scale (+ pos_bias under BIAS, as the forward) -
 * lse); 0 where the key is not visible (past the causal bound, or vis false: a row without
 * visible keys, lse -inf, is all 0). */
template <bool BIAS, int RA, int CA>
static __device__ __forceinline__ void bwd_scores(float (&sc)[RA][CA], float (&dp)[RA][CA],
						  const float *Ls, const float *Ds, const bool (&vis)[CA],
						  const geom &G, int q0, int k0, uint64_t rb, int n, int j)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int i = q0 + ty + TW * a, kl = last_key(G, i), kf = first_key(G, j, i);
		const float li = Ls[ty + TW * a], di = Ds[ty + TW * a];
#pragma unroll
		for (int c = 0; c < CA; c++) {
			const int k = k0 + tx + TW * c;
			if (k <= kl && k >= kf && vis[c]) {
				float v = sc[a][c] * G.scale;
				if (BIAS)
					v += pos_bias(G, n, i, k);
				const float P = expf(v - li);
				const float mu = G.p > 0.0f ? drop_mult(G, rb, i, k) : 1.0f;
				sc[a][c] = P * mu;
				dp[a][c] = P * (dp[a][c] * mu - di);
			} else {
				sc[a][c] = 0.0f;
				dp[a][c] = 0.0f;
			}
		}
	}
}

/* The dS tile dp of head n, sequence j (rows q0 + ty + 16a, columns k0 + tx + 16c; 0 for the keys
 * not visible) into G.ds [b, H, sq, sk], rows < sq and columns < sk (consecutive lanes: consecutive
 * columns). */
template <int RA, int CA>
static __device__ __forceinline__ void store_ds(const geom &G, const float (&dp)[RA][CA], int j, int n, int q0,
						int k0)
{
	const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
	float *row0 = G.ds + ((size_t)j * G.H + n) * (size_t)G.sq * (size_t)G.sk;
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int i = q0 + ty + TW * a;
		if (i >= G.sq)
			continue;
#pragma unroll
		for (int c = 0; c < CA; c++) {
			const int k = k0 + tx + TW * c;
			if (k < G.sk)
				row0[(size_t)i * G.sk + k] = dp[a][c];
		}
	}
}

/* The backward kernels' shared memory: Q and dO [BQ, DM+1], K and V [BK, DM+1], P [BQ, BK+16],
 * lse and D [BQ]. */
template <int DM, int BQ, int BK>
struct bwd_tiles {
	float *Qs, *dOs, *Ks, *Vs, *Ps, *Ls, *Ds;
	__device__ __forceinline__ explicit bwd_tiles(float *sm)
	{
		Qs = sm;
		dOs = Qs + BQ * (DM + 1);
		Ks = dOs + BQ * (DM + 1);
		Vs = Ks + BK * (DM + 1);
		Ps = Vs + BK * (DM + 1);
		Ls = Ps + BQ * (BK + 16);
		Ds = Ls + BQ;
	}
};

/* Loads the query-side tiles of head n (slot n % r of group n / r): Q, dO, lse, D. */
template <int DM, int BQ, int BK>
static __device__ __forceinline__ void load_query_side(const bwd_tiles<DM, BQ, BK> &t,
						       const geom &G, const float *q,
						       const float *dout, const float *lse,
						       const float *D, int j, int n, int q0)
{
	const int g = n / G.r;
	load_rows<DM, BQ>(t.Qs, q + qkv_off(G, j, g, n % G.r), G.ldq, q0, G.sq, G.d);
	load_rows<DM, BQ>(t.dOs, dout + out_off(G, j, n), G.ldo, q0, G.sq, G.d);
	load_vec<BQ>(t.Ls, lse + vec_off(G, j, n), q0, G.sq);
	load_vec<BQ>(t.Ds, D + vec_off(G, j, n), q0, G.sq);
}

/* grid (b*ng, key tiles).  dK, dV of key rows k0.. of group g, summed over the r heads and the
 * query tiles in a fixed order; writes (or adds into, acc) the key and value of dkv (laid out as
 * kv; dqkv's slots r and r + 1 for the whole sequence).  The grid may leave out the key tiles no
 * query sees when acc (nothing to add).  MASK: under G.km.  Packed documents (G.seg): the query
 * tiles stop at the first whose row 0 starts its document after the key tile (doc_after: no
 * later query sees it). */
template <int DM, int BQ, int BK, bool MASK = false, bool BIAS = false, bool SEG = false>
__global__ void __launch_bounds__(NT) dkdv_kernel(geom G, float *dkv, const float *dout,
						  const float *q, const float *kv, const float *lse,
						  const float *D)
{
	constexpr int RA = BQ / TW, CA = BK / TW, KA = BK / TW, DC = DM / TW;
	MGT_DYN_SHARED(float, smem);
	const bwd_tiles<DM, BQ, BK> t(smem);
	const int j = blockIdx.x / G.ng, g = blockIdx.x % G.ng, k0 = (int)blockIdx.y * BK;
	float dk[KA][DC], dv[KA][DC];
	bool vis[CA];
	key_vis<MASK>(vis, G, j, k0);

#pragma unroll
	for (int a = 0; a < KA; a++)
#pragma unroll
		for (int c = 0; c < DC; c++)
			dk[a][c] = dv[a][c] = 0.0f;
	load_rows<DM, BK>(t.Ks, kv + kv_off(G, j, g, 0), G.ldk, k0, G.sk, G.d);
	load_rows<DM, BK>(t.Vs, kv + kv_off(G, j, g, 1), G.ldk, k0, G.sk, G.d);
	const int qs = k0 - G.dlt > 0 ? (k0 - G.dlt) / BQ * BQ : 0; /* first query tile seeing k0 */
	for (int n = g * G.r; n < (g + 1) * G.r; n++) {
		const uint64_t rb = drop_row0(G, j, n);
		for (int q0 = qs; q0 < G.sq && !(SEG && doc_after(G, j, q0, k0 + BK - 1)); q0 += BQ) {
			float sc[RA][CA], dp[RA][CA];
			__syncthreads(); /* previous tile's Q, dO, P consumed */
			load_query_side(t, G, q, dout, lse, D, j, n, q0);
			__syncthreads();
			dot_tile<DM>(sc, t.Qs, t.Ks);
			dot_tile<DM>(dp, t.dOs, t.Vs);
			bwd_scores<BIAS>(sc, dp, t.Ls, t.Ds, vis, G, q0, k0, rb, n, j);
			store_tile<BK>(t.Ps, sc);
			__syncthreads();
			acc_tile<DM, KA, BQ>(dv, t.Ps, 1, BK + 16, t.dOs); /* dV += Pd^T dO */
			__syncthreads();
			store_tile<BK>(t.Ps, dp);
			__syncthreads();
			acc_tile<DM, KA, BQ>(dk, t.Ps, 1, BK + 16, t.Qs); /* dK += dS^T Q */
		}
	}
	store_rows<DM, KA>(dkv + kv_off(G, j, g, 0), G.ldk, dk, k0, G.sk, G.d, G.scale, G.acc);
	store_rows<DM, KA>(dkv + kv_off(G, j, g, 1), G.ldk, dv, k0, G.sk, G.d, 1.0f, G.acc);
}

/* grid (b*H, query tiles), last tile first.  dQ of query rows q0.. of head n over its key tiles
 * in order (packed documents: from first_ktile, as the forward); writes (or adds into, acc) dq's
 * slot n % r of group n / r (dq laid out as q).  MASK: under G.km. */
template <int DM, int BQ, int BK, bool MASK = false, bool BIAS = false, bool SEG = false>
__global__ void __launch_bounds__(NT) dq_kernel(geom G, float *dq, const float *dout,
						const float *q, const float *kv, const float *lse,
						const float *D)
{
	constexpr int RA = BQ / TW, CA = BK / TW, DC = DM / TW;
	MGT_DYN_SHARED(float, smem);
	const bwd_tiles<DM, BQ, BK> t(smem);
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = key_end<BQ>(G, q0), k1 = SEG ? first_ktile<BK>(G, j, q0) : 0;
	const uint64_t rb = drop_row0(G, j, n);
	float acc[RA][DC];

#pragma unroll
	for (int a = 0; a < RA; a++)
#pragma unroll
		for (int c = 0; c < DC; c++)
			acc[a][c] = 0.0f;
	load_query_side(t, G, q, dout, lse, D, j, n, q0);
	for (int k0 = k1; k0 < kend; k0 += BK) {
		float sc[RA][CA], dp[RA][CA];
		bool vis[CA];
		key_vis<MASK>(vis, G, j, k0);
		__syncthreads(); /* previous tile's K, V, P consumed */
		load_rows<DM, BK>(t.Ks, kv + kv_off(G, j, g, 0), G.ldk, k0, G.sk, G.d);
		load_rows<DM, BK>(t.Vs, kv + kv_off(G, j, g, 1), G.ldk, k0, G.sk, G.d);
		__syncthreads();
		dot_tile<DM>(sc, t.Qs, t.Ks);
		dot_tile<DM>(dp, t.dOs, t.Vs);
		bwd_scores<BIAS>(sc, dp, t.Ls, t.Ds, vis, G, q0, k0, rb, n, j);
		if (BIAS)
			store_ds(G, dp, j, n, q0, k0);
		store_tile<BK>(t.Ps, dp);
		__syncthreads();
		acc_tile<DM, RA, BK>(acc, t.Ps, BK + 16, 1, t.Ks); /* dQ += dS K */
	}
	store_rows<DM, RA>(dq + qkv_off(G, j, g, n % G.r), G.ldq, acc, q0, G.sq, G.d, G.scale, G.acc);
}

/* The position bias's gradient (BIAS, the whole sequence: sq = sk = dsq = s), after dq_kernel has
 * written dS into ds [b, H, s, s] (every tile it visits; causal: the tiles past the diagonal it
 * skips are never read here).  grid ceil(H (2s - 1) / NT): thread t = n (2s - 1) + e, local head
 * n and distance index e (key i' = i + e - (s - 1)), adds to dbias[e heads_total + head0 + n]
 * the dS of its diagonal, sequence j = 0..b-1 outer, query i = 0..s-1 ascending inner, one fp32
 * sum started from dbias's value (the CPU's order and formula: lib/backend/cpu_attn.c bwd_block).
 * Causal (MASK false): keys after the query (e > s - 1) have no score; their dbias untouched.
 * Each thread owns its one element of dbias: no atomics, deterministic.  Consecutive threads read
 * consecutive columns of a row of ds. */
template <bool MASK>
__global__ void __launch_bounds__(NT) dbias_kernel(geom G, float *dbias, const float *ds)
{
	const int s = G.sq, nd = 2 * s - 1;
	const long long t = (long long)blockIdx.x * NT + threadIdx.x;
	if (t >= (long long)G.H * nd)
		return;
	const int n = (int)(t / nd), e = (int)(t % nd), off = e - (s - 1);
	if (!MASK && off > 0)
		return;
	float *db = dbias + (size_t)e * (size_t)G.heads_total + (size_t)(G.head0 + n);
	float acc = *db;
	for (int j = 0; j < G.b; j++) {
		const float *row0 = ds + ((size_t)j * G.H + n) * (size_t)s * (size_t)s;
		for (int i = 0; i < s; i++) {
			const int k = i + off;
			if (k >= 0 && k < s)
				acc += row0[(size_t)i * s + k];
		}
	}
	*db = acc;
}

} /* namespace mgt_attn_k */

#endif
