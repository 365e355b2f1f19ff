/* kernels/: device code of GQA self-attention (causal, block-diagonal causal over packed
 * documents, or bidirectional under a key padding mask: the kernels' template argument MASK) on
 * tensor cores through mma.sync (kernels/mma.cuh:
 * m16n8k16, bf16 or fp16 operands, fp32 accumulators), with the scores, probabilities and
 * accumulators in registers (FlashAttention-2, Dao 2023, section 3: the softmax of a warp's rows
 * done on its own accumulator fragments); kernels/attn_tc.cu and attn_tc_bwd.cu launch it (kernels.h
 * mgt_k_attn_tc_*).
 *
 * Function, numerics and grids: those of kernels/attn_tc.cuh (same rounding points: Q, K, V, dO
 * rounded to T when staged, P after dropout and dS rounded before their products; fp32 softmax
 * statistics, exponentials and accumulation; D from attn.cuh's rowdot_kernel; the same loops in
 * the same orders, each output element accumulated by one lane in a fixed order: no atomics,
 * bitwise reproducible).  The row-wise work happens in registers (the WMMA kernels these
 * replaced passed every score tile through shared memory, WMMA fragments having no defined
 * element order): a lane holds, of each 8-column accumulator tile, rows gid = lane / 4 and gid + 8, columns
 * 2 (lane % 4) and the next (kernels/mma.cuh), so masking, the online softmax, dropout and dS
 * work on registers, a row's max and sum are two xor-shuffles within the 4 lanes of a quad, the
 * probabilities become the next product's A operand without leaving registers, and the output
 * rescaling by e^(m_old - m_new) is a multiply of the accumulators.  The exponentials are taken in
 * base 2 with log2 e folded into the scale (exp2f: an FFMA and the ex2 unit an element, where expf
 * spends about eight instructions); lse stays in natural-log units.  Dropout: a lane's four
 * elements {i, i + 8} x {k, k + 8} (rows gid and gid + 8 of tiles 2m and 2m + 1) take their
 * multipliers from one Philox call (attn.cuh drop_mult4), a quarter of the draws of one a element.
 *
 * Shared memory holds only the staged operand tiles, T [rows, DM + 8] (16-byte row pitch offset:
 * ldmatrix's eight row addresses fall in distinct banks), read with ldmatrix: A operands and
 * "X^T" B operands (S = Q K^T, S^T = K Q^T, dP = dO V^T, dP^T = V dO^T) untransposed, "X" B
 * operands (O += P V, dV += Pd^T dO, dK += dS^T Q, dQ += dS K) with .trans, so no tile is stored
 * twice.  Blocks have 4 warps, each owning 16 rows of the 64-row tile.  MB, the blocks a
 * multiprocessor should hold (__launch_bounds__'s minimum), caps the registers: fwd_blocks and
 * bwd_blocks.  Uncapped at DM 64 (sm_90a) the kernels took 168 (forward), 220 (dQ) and 254 (dK/dV)
 * registers, 3, 2 and 2 blocks a multiprocessor; capped at 4 and 3 blocks (128 and 168 registers,
 * a few bytes spilled) an H200 ran them 1.07-1.11x (forward) and 1.27-1.30x (backward) faster
 * (tests/bench/results/gpu-nvidia-h200-20261127-154859.txt, then MGT_ATTN_KERNEL=mma-occ).
 *
 * Key padding mask (MASK, geom km: backend.h attn_forward).  The query-side kernels (forward, dQ) run
 * over all key tiles instead of up to the diagonal and test each score element's key against a
 * bit mask of the lane's 2 NK columns, read from km once per key tile (key_bits) in place of the
 * causal test; the dK/dV kernel runs over all query tiles and tests its two key rows' bytes, read
 * once.  A row that sees no key keeps l = 0: out 0, lse -inf (and P = 0 in the backward).
 *
 * Packed documents (geom seg, backend.h mgt_attn.seg_start; causal self-attention without a key
 * mask, the MASK = false kernels): query i of sequence j sees keys seg[i*b + j] <= k <= i.  Each
 * element's test adds k >= its query's document start (sees' kf: the lane's two rows' starts, read
 * once; the dK/dV kernel stages the query tile's starts in shared memory next to lse and D), and
 * a warp's tile takes the unchecked path only when its first key is at or after the warp's (dK/dV:
 * the query tile's) last document start.  Whole tiles before the documents are skipped, exactly at
 * tile level since starts never decrease along a sequence: the forward and dQ kernels start their
 * key loop at the tile holding the query tile's first row's start (attn.cuh first_ktile; the
 * tiles before it are masked for every row, and the online softmax of a row that sees nothing
 * yet keeps m = -inf, l = 0), and the dK/dV kernel ends its query loop before the first query tile
 * whose row 0 starts its document after the key tile (attn.cuh doc_after: so do all later rows).
 * The packed instances are the kernels' SEG template argument (the launchers pick them when geom
 * seg is set), so the causal instances carry none of it: their loops, products and registers
 * are those of the causal kernels before packing, bit for bit.
 *
 * Cross-attention (backend.h MGT_ATTN_CROSS, attn.cuh make_xgeom): the kernels take the queries (q) and
 * the keys and values (kvg) as separate tensors, sq query rows and sk key rows (the fused qkv twice
 * and s, s for self-attention); without a mask the bound k <= i + dlt with dlt = sk (0: causal)
 * lets every key below sk through.
 */
#ifndef MGT_KERNELS_ATTN_MMA_CUH
#define MGT_KERNELS_ATTN_MMA_CUH

#include "attn_tc.cuh"
#include "mma.cuh"

namespace mgt_attn_mma {

using mgt_attn_k::doc_after;
using mgt_attn_k::drop_mult4;
using mgt_attn_k::drop_row0;
using mgt_attn_k::first_key;
using mgt_attn_k::first_ktile;
using mgt_attn_k::geom;
using mgt_attn_k::kv_off;
using mgt_attn_k::out_off;
using mgt_attn_k::qkv_off;
using mgt_attn_k::vec_off;
using mgt_attn_tc::load_kv;
using mgt_attn_tc::load_qdo;
using mgt_attn_tc::load_seg;
using mgt_attn_tc::load_tile;
using mgt_attn_tc::NTC;
using mgt_attn_tc::NW;
using mgt_attn_tc::to16;

/* Blocks a multiprocessor, the kernels' __launch_bounds__ minimum (the register cap): head
 * dimensions up to 64 capped, 128 (twice the accumulators) not. */
/* The softmax in base 2 (FlashAttention-2's exp2 with the scale folded): one FFMA and ex2 an
 * element; lse is written and read in natural log units. */
static constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

static constexpr int fwd_blocks(int DM) { return DM <= 64 ? 4 : 1; }
static constexpr int bwd_blocks(int DM) { return DM <= 64 ? 3 : 1; }

/* Shared-memory bytes (T elements of ES bytes): the operand tiles (K and V twice in the forward
 * and dQ kernels: the tile in use and the next one, prefetched) and the lse, D rows (and in the
 * dK/dV kernel the query rows' document starts, int32, with packed documents). */
static constexpr size_t fwd_smem(int DM, int ES) { return (size_t)5 * 64 * (DM + 8) * ES; }
static constexpr size_t bwd_smem(int DM, int B, int ES, bool SEG)
{
	return ((size_t)2 * 64 + 2 * B) * (DM + 8) * ES + (size_t)(SEG ? 3 : 2) * 64 * 4;
}
static constexpr size_t dq_smem(int DM, int B, int ES)
{
	return ((size_t)2 * 64 + 4 * B) * (DM + 8) * ES + (size_t)2 * 64 * 4;
}

/* The K and V rows k0..k0+ROWS-1 of group g of sequence j (from kv: the fused qkv for
 * self-attention) into Ks and Vs: async (the launcher's choice: d == DM, kv and its row stride
 * 16-byte aligned), cp.async copies of 16 bytes (rows past sk zero-filled) that the caller commits
 * and waits for; else load_kv's loads and stores. */
template <typename T, int DM, int ROWS>
static __device__ __forceinline__ void stage_kv(T *Ks, T *Vs, const geom &G, const T *kv, int j, int g, int k0,
						int vec, bool async)
{
	if (!async) {
		load_kv<T, DM, ROWS>(Ks, Vs, G, kv, j, g, k0, vec);
		return;
	}
	constexpr int LD = DM + 8, C8 = DM / 8, N = ROWS * C8 / NTC;
	static_assert(ROWS * C8 % NTC == 0, "tile shape");
	const T *kp = kv + kv_off(G, j, g, 0), *vp = kv + kv_off(G, j, g, 1);
#pragma unroll
	for (int u = 0; u < N; u++) {
		const int e = u * NTC + threadIdx.x, rr = e / C8, c = e % C8 * 8, i = k0 + rr;
		const bool full = i < G.sk;
		const size_t off = (size_t)(full ? i : 0) * G.ldk + c;
		mgt_cp_async16(Ks + rr * LD + c, kp + off, full);
		mgt_cp_async16(Vs + rr * LD + c, vp + off, full);
	}
}

/* Buffer b of the K/V pair at kv: [K (BK rows) | V (BK rows)] twice, rows of DM + 8 elements. */
template <typename T, int DM, int BK> static __device__ __forceinline__ T *kv_buf(T *kv, int b)
{
	return kv + (size_t)b * 2 * BK * (DM + 8);
}

/* Before computing on the K/V tile in buffer b (staged by the previous call, or before the loop):
 * the next tile (k0 + BK < kend) staged into buffer b ^ 1, and the copies of tile k0 waited for.
 * The caller's barrier before this call frees buffer b ^ 1, the one after it publishes tile k0. */
template <typename T, int DM, int BK>
static __device__ __forceinline__ void next_kv(T *kv, int b, const geom &G, const T *kvg, int j, int g, int k0,
					       int kend, int vec, bool async)
{
	if (k0 + BK < kend) {
		T *n = kv_buf<T, DM, BK>(kv, b ^ 1);
		stage_kv<T, DM, BK>(n, n + BK * (DM + 8), G, kvg, j, g, k0 + BK, vec, async);
		if (async) {
			mgt_cp_async_commit();
			mgt_cp_async_wait<1>();
		}
	} else if (async) {
		mgt_cp_async_wait<0>();
	}
}

/* A operand: rows r0..r0+15, columns c0..c0+15 of a row-major tile (row stride LD). */
template <int LD, typename T>
static __device__ __forceinline__ void frag_a(uint32_t (&a)[4], const T *x, int r0, int c0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4(a, x + (r0 + (l & 15)) * LD + c0 + (l >> 4) * 8);
}

/* B = X^T for output columns n0..n0+15 (rows of X) and k = c0..c0+15 (columns of X): b[0..1] the
 * first 8 output columns, b[2..3] the next 8. */
template <int LD, typename T>
static __device__ __forceinline__ void frag_bt(uint32_t (&b)[4], const T *x, int n0, int c0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4(b, x + (n0 + (l & 7) + (l >> 4) * 8) * LD + c0 + ((l >> 3) & 1) * 8);
}

/* B = X for k = rows r0..r0+15 of X and output columns n0..n0+15 (columns of X). */
template <int LD, typename T>
static __device__ __forceinline__ void frag_b(uint32_t (&b)[4], const T *x, int r0, int n0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4_t(b, x + (r0 + (l & 7) + ((l >> 3) & 1) * 8) * LD + n0 + (l >> 4) * 8);
}

/* s = A B^T for the warp's 16 rows: A rows a0.. of tile xa, B the NF * 8 rows of tile xb, over the
 * DF 16-column slices of the head dimension (S = Q K^T, S^T = K Q^T, dP = dO V^T, dP^T = V dO^T). */
template <typename T, int NF, int DF, int LD>
static __device__ __forceinline__ void warp_scores(float (&s)[NF][4], const T *xa, int a0, const T *xb)
{
#pragma unroll
	for (int c = 0; c < NF; c++)
		s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < DF; kk++) {
		uint32_t a[4];
		frag_a<LD>(a, xa, a0, kk * 16);
#pragma unroll
		for (int c = 0; c < NF; c += 2) {
			uint32_t b[4];
			frag_bt<LD>(b, xb, c * 8, kk * 16);
			mgt_mma16816<T>(s[c], a, b[0], b[1]);
			mgt_mma16816<T>(s[c + 1], a, b[2], b[3]);
		}
	}
}

/* acc += P X: P the warp's 16 x 16 KT matrix as A operands, X rows 0..16 KT - 1 of a row-major
 * tile, ND 8-column output tiles (O += P V, dV += Pd^T dO, dK += dS^T Q, dQ += dS K). */
template <typename T, int KT, int ND, int LD>
static __device__ __forceinline__ void warp_accum(float (&acc)[ND][4], const uint32_t (&p)[KT][4], const T *x)
{
#pragma unroll
	for (int kk = 0; kk < KT; kk++)
#pragma unroll
		for (int c = 0; c < ND; c += 2) {
			uint32_t b[4];
			frag_b<LD>(b, x, kk * 16, c * 8);
			mgt_mma16816<T>(acc[c], p[kk], b[0], b[1]);
			mgt_mma16816<T>(acc[c + 1], p[kk], b[2], b[3]);
		}
}

/* Accumulator tiles v (NF of 8 columns) rounded to T as the A operands of the next product. */
template <typename T, int NF>
static __device__ __forceinline__ void pack_a(uint32_t (&a)[NF / 2][4], const float (&v)[NF][4])
{
#pragma unroll
	for (int c = 0; c < NF / 2; c++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const float *t = v[2 * c + e / 2] + 2 * (e % 2); /* tile 2c or 2c+1, row gid or gid+8 */
			a[c][e] = mgt_pack2(to16<T>(t[0]), to16<T>(t[1]));
		}
}

/* Row h (0: gid, 1: gid + 8) of the accumulators times f into dst (the row's pointer, O elements:
 * fp32 or rounded to a 16-bit type), columns < d. */
template <int ND, typename O>
static __device__ __forceinline__ void write_row(O *dst, const float (&acc)[ND][4], int h, float f, int d, bool vec)
{
	const int c0 = 2 * (threadIdx.x & 3);
#pragma unroll
	for (int c = 0; c < ND; c++) {
		const int col = c * 8 + c0;
		if (col < d)
			mgt_st2(dst + col, acc[c][2 * h] * f, acc[c][2 * h + 1] * f, vec);
	}
}

/* Under the key mask: bit 2c + e set iff key k0 + 8c + c0 + e of sequence j (the lane's column e of
 * accumulator tile c, c < NC) is visible (clear past sk). */
template <int NC>
static __device__ __forceinline__ uint32_t key_bits(const geom &G, int j, int k0, int c0)
{
	static_assert(NC <= 16, "32 bits");
	uint32_t v = 0;
#pragma unroll
	for (int c = 0; c < NC; c++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int k = k0 + 8 * c + c0 + e;
			if (k < G.sk && G.km[(size_t)k * G.b + j] != 0)
				v |= 1u << (2 * c + e);
		}
	return v;
}

/* Query i sees key k: bit `bit` of the key mask bits vb under MASK (clear past sk), else
 * kf <= k <= i + dlt and k < sk (causal for self-attention, dlt = 0, kf the start of query i's
 * packed document or 0; every key for cross-attention without a mask, dlt = sk, kf = 0). */
template <bool MASK, bool SEG>
static __device__ __forceinline__ bool sees(const geom &G, uint32_t vb, int bit, int k, int i, int kf)
{
	return MASK ? ((vb >> bit) & 1u) != 0 : k <= i + G.dlt && k < G.sk && (!SEG || k >= kf);
}

/* The end of the keys that query rows q0..q0+BQ-1 see: all sk under MASK, else up to the bound. */
template <bool MASK, int BQ>
static __device__ __forceinline__ int mma_kend(const geom &G, int q0)
{
	const int e = q0 + BQ + G.dlt;
	return MASK || e > G.sk ? G.sk : e;
}

/* Sum (or max) of v over the 4 lanes of a quad (the lanes sharing a row). */
static __device__ __forceinline__ float quad_sum(float v)
{
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
static __device__ __forceinline__ float quad_max(float v)
{
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
	return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* ---- forward: grid (b*H, query tiles of 64), last tile first ---- */
/* One key tile of the forward's online softmax for the lane's rows i[h] (elements 2h, 2h + 1 of
 * each tile; kf[h] their document starts, 0 unpacked), keys kc + 8c + e: the raw scores s become
 * the unnormalized probabilities 2^(s sl2 - m) under the new running max m, l and the output
 * accumulators o are rescaled (first: the rows' first key tile).  CHK false: every score of the
 * warp's tile is visible (no test an element). */
template <bool CHK, bool MASK, bool SEG, int NK, int ND>
static __device__ __forceinline__ void fwd_softmax(float (&s)[NK][4], float (&o)[ND][4], float (&m)[2], float (&l)[2],
						   const geom &G, uint32_t vb, const int (&i)[2], const int (&kf)[2],
						   int kc, bool first, float sl2)
{
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const bool rowok = !CHK || i[h] < G.sq;
		float mx = -INFINITY;
#pragma unroll
		for (int c = 0; c < NK; c++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const bool ok = !CHK || (rowok && sees<MASK, SEG>(G, vb, 2 * c + e, kc + 8 * c + e, i[h], kf[h]));
				mx = fmaxf(mx, ok ? s[c][2 * h + e] : -INFINITY);
			}
		mx = quad_max(mx) * sl2; /* sl2 > 0: the max of the scaled scores */
		const float mnew = first ? mx : fmaxf(m[h], mx);
		const float mb = mnew == -INFINITY ? 0.0f : mnew; /* rows past sq: nothing valid */
		float sum = 0.0f;
#pragma unroll
		for (int c = 0; c < NK; c++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float v = 0.0f;
				if (!CHK || (rowok && sees<MASK, SEG>(G, vb, 2 * c + e, kc + 8 * c + e, i[h], kf[h]))) {
					v = exp2f(s[c][2 * h + e] * sl2 - mb);
					sum += v;
				}
				s[c][2 * h + e] = v;
			}
		sum = quad_sum(sum);
		float alpha = 1.0f;
		if (first) {
			l[h] = sum;
		} else {
			alpha = rowok ? exp2f(m[h] - mb) : 1.0f;
			l[h] = l[h] * alpha + sum;
		}
		m[h] = mnew;
#pragma unroll
		for (int c = 0; c < ND; c++)
			o[c][2 * h] *= alpha, o[c][2 * h + 1] *= alpha;
	}
}

/* dK/dV kernel, one query tile: Pd = P mu into st, dS = P (dP mu - D) into dpt for the lane's key
 * rows kr[h] and queries qc + 8c + e (qc = q0 + c0; L, D the tile's lse and D rows from column c0
 * on, S its document starts from column c0 on: NULL unpacked); the dropout multipliers of tiles 2m
 * and 2m + 1 (queries i, i + 8) from one draw.  CHK false: every query of the tile sees every key
 * row of the warp. */
template <bool CHK, bool MASK, bool SEG, int NQ>
static __device__ __forceinline__ void dkdv_scores(float (&st)[NQ][4], float (&dpt)[NQ][4], const geom &G,
						   uint64_t rb, const bool (&kvis)[2], const int (&kr)[2], int qc,
						   const float *L, const float *D, const int *S, float sl2)
{
#pragma unroll
	for (int m2 = 0; m2 < NQ / 2; m2++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			float mu[4] = {1.0f, 1.0f, 1.0f, 1.0f}; /* (i, kr0), (i, kr1), (i + 8, kr0), (i + 8, kr1) */
			if (G.p > 0.0f)
				drop_mult4(G, rb, qc + 16 * m2 + e, kr[0], mu);
#pragma unroll
			for (int x = 0; x < 2; x++) {
				const int c = 2 * m2 + x, i = qc + 8 * c + e;
				const float li = L[8 * c + e] * LOG2E, di = D[8 * c + e];
				const int si = CHK && SEG ? S[8 * c + e] : 0; /* query i's document start */
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float pd = 0.0f, ds = 0.0f;
					if (!CHK || (i < G.sq && (MASK ? kvis[h] : kr[h] <= i + G.dlt && (!SEG || kr[h] >= si)))) {
						const float P = exp2f(st[c][2 * h + e] * sl2 - li);
						pd = P * mu[2 * x + h];
						ds = P * (dpt[c][2 * h + e] * mu[2 * x + h] - di);
					}
					st[c][2 * h + e] = pd;
					dpt[c][2 * h + e] = ds;
				}
			}
		}
}

/* dQ kernel, one key tile: dS = P (dP mu - D) into s for the lane's query rows i[h] (document
 * starts kf[h], 0 unpacked) and keys kc + 8c + e (li in log2 units, di: the rows' lse and D); the
 * dropout multipliers of tiles 2m and 2m + 1 (keys k, k + 8) from one draw.  CHK false: every score
 * of the warp's tile is visible. */
template <bool CHK, bool MASK, bool SEG, int NK>
static __device__ __forceinline__ void dq_scores(float (&s)[NK][4], const float (&dp)[NK][4], const geom &G,
						 uint64_t rb, uint32_t vb, const int (&i)[2], const int (&kf)[2], int kc,
						 const float (&li)[2], const float (&di)[2], float sl2)
{
#pragma unroll
	for (int m2 = 0; m2 < NK / 2; m2++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			float mu[4] = {1.0f, 1.0f, 1.0f, 1.0f}; /* (i0, k), (i0, k + 8), (i1, k), (i1, k + 8) */
			if (G.p > 0.0f)
				drop_mult4(G, rb, i[0], kc + 16 * m2 + e, mu);
#pragma unroll
			for (int h = 0; h < 2; h++)
#pragma unroll
				for (int x = 0; x < 2; x++) {
					const int c = 2 * m2 + x;
					float ds = 0.0f;
					if (!CHK || (i[h] < G.sq && sees<MASK, SEG>(G, vb, 2 * c + e, kc + 8 * c + e, i[h], kf[h]))) {
						const float P = exp2f(s[c][2 * h + e] * sl2 - li[h]);
						ds = P * (dp[c][2 * h + e] * mu[2 * h + x] - di[h]);
					}
					s[c][2 * h + e] = ds;
				}
		}
}

/* Dropout on a lane's score fragments s (rows i0, i0 + 8; columns kc + 8c, kc + 8c + 1): tiles 2m
 * and 2m + 1 of column e take their four multipliers from one draw (drop_mult4). */
template <int NK>
static __device__ __forceinline__ void drop_frag(float (&s)[NK][4], const geom &G, uint64_t rb, int i0, int kc)
{
#pragma unroll
	for (int m2 = 0; m2 < NK / 2; m2++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			float mu[4];
			drop_mult4(G, rb, i0, kc + 16 * m2 + e, mu);
			s[2 * m2][e] *= mu[0];
			s[2 * m2 + 1][e] *= mu[1];
			s[2 * m2][2 + e] *= mu[2];
			s[2 * m2 + 1][2 + e] *= mu[3];
		}
}

template <typename T, int DM, int MB = 1, bool MASK = false, bool SEG = false>
__global__ void __launch_bounds__(NTC, MB) fwd_mma_kernel(geom G, T *out, float *lse, const T *q,
						      const T *kvg, int vec, int async)
{
	constexpr int BQ = 16 * NW, BK = 64, LD = DM + 8, DF = DM / 16, NK = BK / 8, ND = DM / 8;
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, c0 = 2 * (lane & 3);
	T *Qs = reinterpret_cast<T *>(smem), *kv = Qs + BQ * LD; /* K/V: two buffers (kv_buf) */
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = mma_kend<MASK, BQ>(G, q0);
	const int k1 = SEG ? first_ktile<BK>(G, j, q0) : 0; /* packed documents: the first key tile seen */
	const int i[2] = {q0 + w * 16 + gid, q0 + w * 16 + gid + 8}; /* this lane's query rows */
	const int kf[2] = {SEG ? first_key(G, j, i[0]) : 0, SEG ? first_key(G, j, i[1]) : 0}; /* their document starts */
	const int wf = SEG ? first_key(G, j, q0 + w * 16 + 15) : 0; /* the warp's last row's document start */
	const uint64_t rb = drop_row0(G, j, n);
	const float sl2 = G.scale * LOG2E; /* scores in log2 units: exp2 of them, m and mb too */
	float o[ND][4], m[2] = {0.0f, 0.0f}, l[2] = {0.0f, 0.0f};
#pragma unroll
	for (int c = 0; c < ND; c++)
		o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.0f;

	load_tile<T, DM, BQ>(Qs, q + qkv_off(G, j, g, n % G.r), G.ldq, q0, G.sq, G.d, vec);
	stage_kv<T, DM, BK>(kv, kv + BK * LD, G, kvg, j, g, k1, vec, async);
	if (async)
		mgt_cp_async_commit();
	for (int k0 = k1, b = 0; k0 < kend; k0 += BK, b ^= 1) {
		__syncthreads(); /* Q loaded; the tile before consumed (its buffer b ^ 1 free) */
		next_kv<T, DM, BK>(kv, b, G, kvg, j, g, k0, kend, vec, async);
		__syncthreads(); /* tile k0 in buffer b */
		const T *Ks = kv_buf<T, DM, BK>(kv, b), *Vs = Ks + BK * LD;
		float s[NK][4];
		const uint32_t vb = MASK ? key_bits<NK>(G, j, k0, c0) : 0u;
		warp_scores<T, NK, DF, LD>(s, Qs, w * 16, Ks);
		/* the online softmax; the warp's tile is checked element by element only where some of
		 * its scores are masked (the diagonal, past sq or sk, a key mask, a document start) */
		if (!MASK && k0 + BK - 1 <= q0 + w * 16 + G.dlt && k0 + BK <= G.sk && q0 + w * 16 + 16 <= G.sq &&
		    (!SEG || k0 >= wf))
			fwd_softmax<false, MASK, SEG>(s, o, m, l, G, vb, i, kf, k0 + c0, k0 == k1, sl2);
		else
			fwd_softmax<true, MASK, SEG>(s, o, m, l, G, vb, i, kf, k0 + c0, k0 == k1, sl2);
		if (G.p > 0.0f) /* dropout (l sums the undropped probabilities) */
			drop_frag<NK>(s, G, rb, i[0], k0 + c0);
		uint32_t pa[BK / 16][4];
		pack_a<T, NK>(pa, s);
		warp_accum<T, BK / 16, ND, LD>(o, pa, Vs); /* O += P V */
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (i[h] >= G.sq)
			continue;
		const float inv = MASK && !(l[h] > 0.0f) ? 0.0f : 1.0f / l[h]; /* no visible key: out 0 */
		write_row<ND>(out + out_off(G, j, n) + (size_t)i[h] * G.ldo, o, h, inv, G.d, vec != 0);
		if (c0 == 0)
			lse[vec_off(G, j, n) + i[h]] = (m[h] + log2f(l[h])) * LN2;
	}
}

/* ---- backward ---- */
/* grid (b*ng, key tiles of 64): dK, dV of key rows k0.. of group g, over the group's heads and
 * the query tiles of BQ rows from the diagonal on (MASK or cross-attention: all of them; packed
 * documents: up to the last tile with a row whose document starts in or before the key tile,
 * doc_after); written to dkv (laid out as kv: dqkv for self-attention). */
template <typename T, int DM, int BQ, int MB = 1, bool MASK = false, bool SEG = false>
__global__ void __launch_bounds__(NTC, MB) dkdv_mma_kernel(geom G, float *dkv, const float *dout,
						       const T *q, const T *kvg, const float *lse, const float *D,
						       int vec)
{
	constexpr int BK = 16 * NW, LD = DM + 8, DF = DM / 16, ND = DM / 8, NQ = BQ / 8;
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, c0 = 2 * (lane & 3);
	T *Ks = reinterpret_cast<T *>(smem), *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *dOs = Qs + BQ * LD;
	float *Ls = reinterpret_cast<float *>(dOs + BQ * LD), *Ds = Ls + BQ;
	int *Ss = reinterpret_cast<int *>(Ds + BQ); /* packed documents: the query rows' starts */
	const int j = blockIdx.x / G.ng, g = blockIdx.x % G.ng, k0 = (int)blockIdx.y * BK;
	const int kr[2] = {k0 + w * 16 + gid, k0 + w * 16 + gid + 8}; /* this lane's key rows */
	bool kvis[2] = {false, false}; /* under MASK: the key rows' mask bytes */
	const float sl2 = G.scale * LOG2E; /* P = 2^(s sl2 - lse log2 e) */
#pragma unroll
	for (int h = 0; h < 2; h++)
		kvis[h] = MASK && kr[h] < G.sk && G.km[(size_t)kr[h] * G.b + j] != 0;
	float dk[ND][4], dv[ND][4];
#pragma unroll
	for (int c = 0; c < ND; c++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[c][e] = dv[c][e] = 0.0f;

	load_kv<T, DM, BK>(Ks, Vs, G, kvg, j, g, k0, vec);
	const int qs = MASK || k0 <= G.dlt ? 0 : (k0 - G.dlt) / BQ * BQ; /* the first query tile seeing k0 */
	for (int n = g * G.r; n < (g + 1) * G.r; n++) {
		const uint64_t rb = drop_row0(G, j, n);
		for (int q0 = qs; q0 < G.sq && !(SEG && doc_after(G, j, q0, k0 + BK - 1)); q0 += BQ) {
			__syncthreads(); /* previous tile's Q, dO, lse, D consumed */
			load_qdo<T, DM, BQ>(Qs, dOs, Ls, Ds, G, q, dout, lse, D, j, n, q0, vec);
			if (SEG)
				load_seg<BQ>(Ss, G, j, q0);
			__syncthreads();
			/* S^T = K Q^T, dP^T = V dO^T: the warp's 16 keys x BQ queries */
			float st[NQ][4], dpt[NQ][4];
			warp_scores<T, NQ, DF, LD>(st, Ks, w * 16, Qs);
			warp_scores<T, NQ, DF, LD>(dpt, Vs, w * 16, dOs);
			const int *S = SEG ? Ss + c0 : nullptr;
			/* every query sees every key (the last query's document starts at or before them) */
			if (!MASK && k0 + w * 16 + 15 <= q0 + G.dlt && q0 + BQ <= G.sq &&
			    (!SEG || k0 + w * 16 >= first_key(G, j, q0 + BQ - 1)))
				dkdv_scores<false, MASK, SEG>(st, dpt, G, rb, kvis, kr, q0 + c0, Ls + c0, Ds + c0, S, sl2);
			else
				dkdv_scores<true, MASK, SEG>(st, dpt, G, rb, kvis, kr, q0 + c0, Ls + c0, Ds + c0, S, sl2);
			uint32_t pa[BQ / 16][4], sa[BQ / 16][4];
			pack_a<T, NQ>(pa, st);
			pack_a<T, NQ>(sa, dpt);
			warp_accum<T, BQ / 16, ND, LD>(dv, pa, dOs); /* dV += Pd^T dO */
			warp_accum<T, BQ / 16, ND, LD>(dk, sa, Qs);  /* dK += dS^T Q */
		}
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (kr[h] >= G.sk)
			continue;
		const size_t ro = (size_t)kr[h] * G.ldk;
		write_row<ND>(dkv + kv_off(G, j, g, 0) + ro, dk, h, G.scale, G.d, vec != 0);
		write_row<ND>(dkv + kv_off(G, j, g, 1) + ro, dv, h, 1.0f, G.d, vec != 0);
	}
}

/* grid (b*H, query tiles of 64), last first: dQ of query rows q0.. of head n over its key tiles of
 * BK in order (up to the diagonal; MASK or cross-attention: all of them; packed documents: from the
 * first tile a row sees, first_ktile); written to dq (laid out as q: dqkv for self-attention). */
template <typename T, int DM, int BK, int MB = 1, bool MASK = false, bool SEG = false>
__global__ void __launch_bounds__(NTC, MB) dq_mma_kernel(geom G, float *dq, const float *dout,
						     const T *q, const T *kvg, const float *lse, const float *D,
						     int vec, int async)
{
	constexpr int BQ = 16 * NW, LD = DM + 8, DF = DM / 16, ND = DM / 8, NK = BK / 8;
	MGT_DYN_SHARED(float, smem);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, c0 = 2 * (lane & 3);
	T *Qs = reinterpret_cast<T *>(smem), *dOs = Qs + BQ * LD, *kv = dOs + BQ * LD; /* K/V: kv_buf */
	float *Ls = reinterpret_cast<float *>(kv + 4 * BK * LD), *Ds = Ls + BQ;
	const int j = blockIdx.x / G.H, n = blockIdx.x % G.H, g = n / G.r;
	const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BQ;
	const int kend = mma_kend<MASK, BQ>(G, q0);
	const int k1 = SEG ? first_ktile<BK>(G, j, q0) : 0; /* packed documents: the first key tile seen */
	const int i[2] = {q0 + w * 16 + gid, q0 + w * 16 + gid + 8}; /* this lane's query rows */
	const int kf[2] = {SEG ? first_key(G, j, i[0]) : 0, SEG ? first_key(G, j, i[1]) : 0}; /* their document starts */
	const int wf = SEG ? first_key(G, j, q0 + w * 16 + 15) : 0; /* the warp's last row's document start */
	const uint64_t rb = drop_row0(G, j, n);
	const float sl2 = G.scale * LOG2E; /* P = 2^(s sl2 - lse log2 e) */
	float acc[ND][4];
#pragma unroll
	for (int c = 0; c < ND; c++)
		acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f;

	load_qdo<T, DM, BQ>(Qs, dOs, Ls, Ds, G, q, dout, lse, D, j, n, q0, vec);
	stage_kv<T, DM, BK>(kv, kv + BK * LD, G, kvg, j, g, k1, vec, async);
	if (async)
		mgt_cp_async_commit();
	for (int k0 = k1, b = 0; k0 < kend; k0 += BK, b ^= 1) {
		__syncthreads(); /* Q, dO, lse, D loaded; the tile before consumed (buffer b ^ 1 free) */
		next_kv<T, DM, BK>(kv, b, G, kvg, j, g, k0, kend, vec, async);
		__syncthreads(); /* tile k0 in buffer b */
		const T *Ks = kv_buf<T, DM, BK>(kv, b), *Vs = Ks + BK * LD;
		/* S = Q K^T, dP = dO V^T: the warp's 16 queries x BK keys */
		float s[NK][4], dp[NK][4];
		const uint32_t vb = MASK ? key_bits<NK>(G, j, k0, c0) : 0u;
		warp_scores<T, NK, DF, LD>(s, Qs, w * 16, Ks);
		warp_scores<T, NK, DF, LD>(dp, dOs, w * 16, Vs);
		const float li[2] = {Ls[w * 16 + gid] * LOG2E, Ls[w * 16 + gid + 8] * LOG2E};
		const float di[2] = {Ds[w * 16 + gid], Ds[w * 16 + gid + 8]};
		if (!MASK && k0 + BK - 1 <= q0 + w * 16 + G.dlt && k0 + BK <= G.sk && q0 + w * 16 + 16 <= G.sq &&
		    (!SEG || k0 >= wf))
			dq_scores<false, MASK, SEG>(s, dp, G, rb, vb, i, kf, k0 + c0, li, di, sl2);
		else
			dq_scores<true, MASK, SEG>(s, dp, G, rb, vb, i, kf, k0 + c0, li, di, sl2);
		uint32_t sa[BK / 16][4];
		pack_a<T, NK>(sa, s);
		warp_accum<T, BK / 16, ND, LD>(acc, sa, Ks); /* dQ += dS K */
	}
#pragma unroll
	for (int h = 0; h < 2; h++)
		if (i[h] < G.sq)
			write_row<ND>(dq + qkv_off(G, j, g, n % G.r) + (size_t)i[h] * G.ldq, acc, h, G.scale, G.d,
				      vec != 0);
}

/* ---- the fragment-layout probe (mgt_k_mma_probe): one warp, the helpers above on 16 x 16 tiles ---- */
static constexpr size_t probe_smem = (size_t)3 * 16 * 24 * 2; /* X, Y and the index tile */
template <typename T>
__global__ void __launch_bounds__(32) mma_probe_kernel(const float *x, const float *y, float *c1, float *c2,
							uint32_t *frag)
{
	constexpr int LD = 24; /* 48-byte rows: ldmatrix's 16-byte alignment, as the kernels' DM + 8 */
	MGT_DYN_SHARED(float, smem); /* probe_smem bytes */
	T *const xs = reinterpret_cast<T *>(smem), *const ys = xs + 16 * LD;
	uint16_t *const ids = reinterpret_cast<uint16_t *>(ys + 16 * LD);
	const int l = threadIdx.x, gid = l >> 2;
	for (int i = l; i < 256; i += 32) {
		xs[i / 16 * LD + i % 16] = to16<T>(x[i]);
		ys[i / 16 * LD + i % 16] = to16<T>(y[i]);
		ids[i / 16 * LD + i % 16] = (uint16_t)i;
	}
	__syncthreads();
	float s[2][4], acc[2][4] = {};
	uint32_t p[1][4];
	warp_scores<T, 2, 1, LD>(s, xs, 0, ys); /* X Y^T */
	pack_a<T, 2>(p, s);
	warp_accum<T, 1, 2, LD>(acc, p, ys); /* round(X Y^T) Y */
	for (int h = 0; h < 2; h++) {
		write_row<2>(c1 + (gid + 8 * h) * 16, s, h, 1.0f, 16, false);
		write_row<2>(c2 + (gid + 8 * h) * 16, acc, h, 1.0f, 16, false);
	}
	uint32_t r[3][4];
	frag_a<LD>(r[0], ids, 0, 0);
	frag_bt<LD>(r[1], ids, 0, 0);
	frag_b<LD>(r[2], ids, 0, 0);
	for (int k = 0; k < 3; k++)
		for (int e = 0; e < 4; e++)
			frag[(k * 32 + l) * 4 + e] = r[k][e];
}

} /* namespace mgt_attn_mma */

#endif
