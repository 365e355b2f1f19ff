/* kernels/: Mamba-2's selective scan, forward and backward (backend.h ssd_scan_fwd / ssd_scan_bwd;
 * the chunked SSD algorithm of Dao & Gu 2024, "Transformers are SSMs", section 6; mamba_ssm
 * ops/triton/ssd_combined.py's steps: chunk cumsum, chunk state, state passing, chunk scan).
 * lib/backend/cpu_ssd.c gives the formulas and the operation order of each term, which these
 * kernels follow (cumulative sums of dt A in double, sequentially from the chunk's start, so the
 * decays match the CPU's bits; products and states fp32; per-head scalars summed in double).
 *
 * One block per (sequence j, chunk c, head h), block index ((j nc + c) nh + h) as the saved
 * states' layout [b][chunk][nh][p][n]:
 *   forward   ssd_state_k   each chunk's own end state (its last document's dt x (x) B, decayed),
 *                           written into states[c], and its decay e^{cum[last]} (0 when a
 *                           document starts in the chunk) into ws;
 *             ssd_carry_k   per (j, h), chunks in order: states[c] = S_in; S = a_c S + own_c;
 *             ssd_out_k     y = the intra-chunk C B^T product masked by decay and document (tiles
 *                           of SSD_TS key positions in shared memory) + e^{cum} C S_in + D x.
 *   backward  ssd_dsin_k    each chunk's direct part of dS_in (rows reading S_in);
 *             ssd_carry_k   chunks in reverse: dSo[c] = dS_in[c+1], dS_in[c] = own_c + a_c dSo[c];
 *             ssd_bwd_k     the chunk's backward from dSo (cpu_ssd.c bwd_intra, bwd_inter,
 *                           bwd_state_out, bwd_dt) with its Q x Q matrices in ws, blocks in
 *                           waves of SSD_WAVE so that ws stays bounded;
 *             ssd_gsum_k    dB, dC: the per-head rows summed over a group's heads in head order;
 *             ssd_scal_k    ddt_bias, dA_log, dD: the per-block double partials summed in order.
 * Every block writes only its own chunk's rows and its own ws slices; what one launch reads,
 * an earlier one wrote (no atomics).
 *
 * Storage: the kernels that touch activations are templated on their type T (float,
 * __nv_bfloat16, __half): x, B, C, dt_raw, dy are read as T and widened exactly (mgt_ld1), y,
 * dx, dB, dC, ddt_raw are written once each, rounded to nearest even (mgt_st1).  The states, ws,
 * parameters and their gradients are fp32 for every T.  For T = float every sum and product is
 * scalar fp32 (the CPU tests' and golden logs' reference); y is summed in shared memory (ssd_out_k:
 * a tile of SSD_TS rows by SSD_PC columns) and dx in registers (bwd_dx), not in the output.  The
 * backward is that scalar code for every T except its two largest chunk products (below), so a
 * 16-bit gradient is the fp32 op's on the widened inputs (and the same states) up to the order of
 * those products' fp32 sums, rounded once.
 *
 * Tensor cores (the forward, T = bf16 or fp16: ssd_state_tc_k, ssd_out_tc_k instead of
 * ssd_state_k, ssd_out_k).  The chunk-level matrix products of the SSD algorithm (Dao & Gu 2024,
 * section 6: the intra-chunk (C B^T o L) X, the chunk states B^T (decay o X), the inter-chunk
 * C S) run as mma.sync m16n8k16 with T operands and fp32 accumulators (kernels/mma.cuh; operands
 * staged in shared memory as T with padded rows, read with ldmatrix), 8 warps a block:
 *   states[c] = X^T W, W[s][n] = wv_s B[s][n] (wv_s = e^{cum[last] - cum[s]} dt_s on the last
 *     document, else 0) computed in fp32 and ROUNDED TO T; X exact;
 *   M = C B^T (C, B exact; fp32 sums), then M[r][s] e^{cum[r] - cum[s]} dt_s masked (s <= r, same
 *     document) in fp32 and ROUNDED TO T; y_intra = M X (X exact);
 *   z = C S_in^T with S_in (the fp32 carried state) ROUNDED TO T; y = y_intra + e^{cum[r]} z (rows
 *     whose document began before the chunk) + D x in fp32, rounded once into y.
 * These are the operand roundings of mamba_ssm's Triton kernels (ops/triton/ssd_chunk_state.py
 * scales B by the decay and dt and casts it to x's type; ssd_chunk_scan.py casts the decayed
 * C B^T to x's type and the previous states to C's type before tl.dot).  The decays, cumulative
 * sums, dt, the carry (ssd_carry_k) and the saved states stay fp32.  Hence a 16-bit y is within
 * 2u (u = 2^-8 bf16, 2^-11 fp16) of the sum of its terms' magnitudes of the fp32 op's y before its
 * own rounding, and a state within u (tests/gpu/test_cuda_ops.c cmp_bound); fp16 operands whose
 * magnitude falls below 2^-14 round to subnormals (absolute 2^-25), and W, M or S_in above 65504
 * would overflow to inf in fp16 (bf16 has fp32's range).  Tiles: y by TC_R = 64 rows (M for keys
 * 0..Q-1 once a row tile, T [TC_R, Q + 8]) and TC_O = 64 columns, warp w owning rows 16 (w % 4)
 * and columns 32 (w / 4); states by 64 x 64 tiles; k staged TC_K = 32 a step.  p and n need not
 * be multiples of 16: staged tiles are zero-filled past q, p and n, and only elements inside are
 * stored.
 *
 * Tensor cores in the backward (T = bf16 or fp16: bwd_mats_tc instead of bwd_mats in ssd_bwd_k).
 * The chunk's Q x Q matrices need the two products C B^T (k = n) and dy X^T (k = p), q^2 (n + p)
 * multiply-adds a chunk, the backward's largest (Dao & Gu 2024, section 6 and its appendix on the
 * SSD backward: for y = (C B^T o L) X, dC = (dY X^T o L) B, dB = (dY X^T o L)^T C, dX = (C B^T o
 * L)^T dY, L the decay mask); their operands are exact T inputs, so they run as mma.sync with fp32
 * accumulators and NOTHING is rounded to T: only the order of their fp32 sums changes
 * (tests/gpu/test_cuda_ops.c t_ssd16_bwd's bound).
 * mamba_ssm's Triton backward (ops/triton/ssd_chunk_scan.py, ssd_chunk_state.py, ssd_bmm.py) runs
 * the same C B^T and dout x^T products with tl.dot on the inputs' type and fp32 accumulators.  The
 * mask, the decays, dt, M = cb E dt, Dm = g E dt, Tm = g E cb and every later product (dx = M^T dy,
 * dC = Dm B, dB = Dm^T C, the S_in and dSo terms, the dt sums) stay the fp32 code of every T.  Row
 * tiles of TB_R = 32, 8 warps of 16 rows by 32 keys (warps whose keys lie above the tile skip the
 * mma), k staged TC_K a step in dynamic shared memory (TC_BWD_SMEM). */
#include "common.cuh"
#include "mma.cuh"

/* Q: backend.h's MGT_SSD_CHUNK (lib/backend/cuda.c asserts it), the saved states' chunking. */
static constexpr int Q = 128, SSD_THREADS = 256, SSD_TS = 32, SSD_PC = 64, SSD_WAVE = 128;
/* The row stride of ssd_out_k's M tile in shared memory: one word of padding, so that the rows
 * a warp reads at once (fewer than 32 columns a row) start in different banks (make
 * check-sim-access). */
static constexpr int SSD_TSP = SSD_TS + 1;

/* softplus with mamba_ssm's threshold, and its slope (cpu_ssd.c softplusf_, dsoftplusf_). */
static __device__ __forceinline__ float softplus_(float v) { return v > 20.0f ? v : log1pf(expf(v)); }
static __device__ __forceinline__ float dsoftplus_(float v) { return v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v)); }

/* Block blk's chunk: sequence j, head h (group gi), chunk c of nc (rows i0 .. i0+q-1); base
 * pointers (storage type T) at the chunk's first row and row strides. */
template <typename T> struct chunk_v {
	int j, h, gi, c, nc, i0, q;
	const T *x, *B, *C, *dtr;
	size_t sx, sbc, sdt, sy;
	float A, dtb;
};

template <typename T>
static __device__ chunk_v<T> chunk_of(const mgt_k_ssd &d, int blk, const T *x, const T *B, const T *C,
				      const T *dt_raw, const float *dt_bias, const float *A_log)
{
	chunk_v<T> v;
	v.nc = (d.L + Q - 1) / Q;
	v.h = blk % d.nh, v.c = blk / d.nh % v.nc, v.j = blk / (d.nh * v.nc);
	v.gi = v.h / (d.nh / d.g), v.i0 = v.c * Q, v.q = d.L - v.i0 < Q ? d.L - v.i0 : Q;
	v.sx = (size_t)d.b * d.ld_x, v.sbc = (size_t)d.b * d.ld_bc, v.sdt = (size_t)d.b * d.ld_dt;
	v.sy = (size_t)d.b * d.nh * d.p;
	const size_t r0 = (size_t)v.i0 * d.b + v.j;
	v.x = x + r0 * d.ld_x + (size_t)v.h * d.p;
	v.B = B + r0 * d.ld_bc + (size_t)v.gi * d.n;
	v.C = C + r0 * d.ld_bc + (size_t)v.gi * d.n;
	v.dtr = dt_raw + r0 * d.ld_dt + v.h;
	v.A = -expf(A_log[v.h]);
	v.dtb = dt_bias[v.h];
	return v;
}

/* Chunk row r's x[p], B[n], C[n] and dt_raw, widened. */
template <typename T> static __device__ __forceinline__ float xat(const chunk_v<T> &v, int r, int p)
{
	return mgt_ld1(v.x, (size_t)r * v.sx + p);
}
template <typename T> static __device__ __forceinline__ float bat(const chunk_v<T> &v, int r, int n)
{
	return mgt_ld1(v.B, (size_t)r * v.sbc + n);
}
template <typename T> static __device__ __forceinline__ float cat(const chunk_v<T> &v, int r, int n)
{
	return mgt_ld1(v.C, (size_t)r * v.sbc + n);
}
template <typename T> static __device__ __forceinline__ float dtrat(const chunk_v<T> &v, int r)
{
	return mgt_ld1(v.dtr, (size_t)r * v.sdt);
}

/* The chunk's dt, document starts lo and inclusive cumulative sums of dt A in double, restarted
 * at each document start (cpu_ssd.c chunk_dt), into shared memory by thread 0; then a barrier. */
template <typename T>
static __device__ void chunk_prep(const mgt_k_ssd &d, const chunk_v<T> &v, float *dt, int *lo, double *cum)
{
	if (threadIdx.x == 0) {
		double acc = 0;
		for (int r = 0; r < v.q; r++) {
			const int i = v.i0 + r;
			dt[r] = softplus_(dtrat(v, r) + v.dtb);
			lo[r] = d.seg_start ? d.seg_start[(size_t)i * d.b + v.j] : 0;
			if (lo[r] == i)
				acc = 0;
			acc += (double)dt[r] * v.A;
			cum[r] = acc;
		}
	}
	__syncthreads();
}

/* The first chunk row of row r's document (0 when it began before the chunk). */
static __device__ __forceinline__ int doc_row(const int *lo, int r, int i0) { return lo[r] > i0 ? lo[r] - i0 : 0; }

/* The chunk's decay e^{cum[last]} when its last document began before it, else 0. */
template <typename T> static __device__ __forceinline__ float chunk_decay(const chunk_v<T> &v, const int *lo, const double *cum)
{
	return lo[v.q - 1] < v.i0 ? (float)exp(cum[v.q - 1]) : 0.0f;
}

/* sum_k a[k] b[k] over k < n (fp32 of the widened values, k ascending). */
template <typename A, typename B> static __device__ __forceinline__ float dot_(const A *a, const B *b, int n)
{
	float s = 0.0f;
	for (int k = 0; k < n; k++)
		s += mgt_ld1(a, k) * mgt_ld1(b, k);
	return s;
}

#define BLOCK_LOOP(e, n) for (int e = threadIdx.x; e < (n); e += blockDim.x)

/* ---- forward ---- */

/* decay[blk]; states[blk] = sum_s w_s x_s (x) B_s with w_s = e^{cum[last] - cum[s]} dt_s on the
 * last document (0 before it): the chunk's own end state (the last chunk's is not used). */
template <typename T>
static __global__ void ssd_state_k(mgt_k_ssd d, float *states, float *decay, const T *x, const T *B, const T *C,
				   const T *dt_raw, const float *dt_bias, const float *A_log)
{
	__shared__ double cum[Q];
	__shared__ float dt[Q], wv[Q];
	__shared__ int lo[Q];
	const int blk = blockIdx.x;
	const chunk_v<T> v = chunk_of(d, blk, x, B, C, dt_raw, dt_bias, A_log);
	chunk_prep(d, v, dt, lo, cum);
	const int last = v.q - 1, P = d.p, N = d.n;
	if (threadIdx.x == 0)
		decay[blk] = chunk_decay(v, lo, cum);
	BLOCK_LOOP(s, v.q) {
		wv[s] = v.i0 + s >= lo[last] ? (float)(exp(cum[last] - cum[s]) * dt[s]) : 0.0f;
	}
	__syncthreads();
	float *S = states + (size_t)blk * P * N;
	BLOCK_LOOP(e, P * N) {
		const int p = e / N, n = e % N;
		float acc = 0.0f;
		for (int s = 0; s < v.q; s++)
			acc += xat(v, s, p) * (wv[s] * bat(v, s, n));
		S[e] = acc;
	}
}

/* Element e of (j, h)'s chunks in order (rev == 0) or in reverse: buf[c] = S, then
 * S = a_c S + own_c with own_c what buf[c] held.  Forward: S_in, carried from each chunk's own end
 * state; backward: dSo, carried from each chunk's own part of dS_in (dS_in = own + a dSo). */
static __global__ void ssd_carry_k(mgt_k_ssd d, float *buf, const float *decay, int rev)
{
	const size_t PN = (size_t)d.p * d.n, e = blockIdx.y * (size_t)blockDim.x + threadIdx.x;
	if (e >= PN)
		return;
	const int j = blockIdx.x / d.nh, h = blockIdx.x % d.nh, nc = (d.L + Q - 1) / Q;
	float S = 0.0f;
	for (int i = 0; i < nc; i++) {
		const size_t k = ((size_t)j * nc + (rev ? nc - 1 - i : i)) * d.nh + h;
		const float own = buf[k * PN + e];
		buf[k * PN + e] = S;
		S = decay[k] != 0.0f ? decay[k] * S + own : own;
	}
}

/* What ssd_out_k's row tiles share: the chunk, its shared arrays (dt, lo, cum; M [SSD_TS,
 * SSD_TS] with row stride SSD_TSP, Ya [SSD_TS, SSD_PC]), its rows of y (stride v.sy), S_in [p, n] and D. */
template <typename T> struct out_ctx {
	chunk_v<T> v;
	const float *dt, *S;
	const int *lo;
	const double *cum;
	float *M, *Ya;
	T *Y;
	float Dh;
	int P, N;
};

/* M[r - r0][s - s0] for the rows r0 .. r0+rn-1 and keys s0 .. s0+SSD_TS-1: (C_r . B_s)
 * e^{cum[r] - cum[s]} dt_s on row r's document and s <= r, else 0 (cpu_ssd.c fwd_chunk's
 * masked CB). */
template <typename T> static __device__ void out_tile(const out_ctx<T> &k, int r0, int rn, int s0)
{
	const chunk_v<T> &v = k.v;
	BLOCK_LOOP(e, rn * SSD_TS) {
		const int r = r0 + e / SSD_TS, s = s0 + e % SSD_TS;
		float m = 0.0f;
		if (s <= r && s >= doc_row(k.lo, r, v.i0)) {
			const float ex = (float)exp(k.cum[r] - k.cum[s]);
			const float cb = dot_(v.C + (size_t)r * v.sbc, v.B + (size_t)s * v.sbc, k.N);
			m = ex != 0.0f ? cb * (ex * k.dt[s]) : 0.0f;
		}
		k.M[(e / SSD_TS) * SSD_TSP + e % SSD_TS] = m;
	}
}

/* y rows r0 .. r0+rn-1, columns p0 .. p0+pn-1: the intra-chunk sums of the key tiles s0 <= r0
 * added in tile order into Ya (element e of the tile always on thread e mod blockDim.x, so Ya
 * needs no barrier), + e^{cum[r]} C_r . S_in (rows whose document began before the chunk), + D x;
 * each element rounded once into y.  Barriers around each M tile. */
template <typename T> static __device__ void out_rows(const out_ctx<T> &k, int r0, int p0)
{
	const chunk_v<T> &v = k.v;
	const int rn = v.q - r0 < SSD_TS ? v.q - r0 : SSD_TS, pn = k.P - p0 < SSD_PC ? k.P - p0 : SSD_PC;
	BLOCK_LOOP(e, rn * pn) {
		k.Ya[e] = 0.0f;
	}
	for (int s0 = 0; s0 <= r0; s0 += SSD_TS) {
		__syncthreads();
		out_tile(k, r0, rn, s0);
		__syncthreads();
		const int s1 = v.q - s0 < SSD_TS ? v.q - s0 : SSD_TS;
		BLOCK_LOOP(e, rn * pn) {
			const int r = r0 + e / pn, p = p0 + e % pn, sn = r - s0 + 1 < s1 ? r - s0 + 1 : s1;
			float acc = 0.0f;
			for (int s = 0; s < sn; s++)
				acc += k.M[(r - r0) * SSD_TSP + s] * xat(v, s0 + s, p);
			k.Ya[e] += acc;
		}
	}
	BLOCK_LOOP(e, rn * pn) {
		const int r = r0 + e / pn, p = p0 + e % pn;
		float yv = k.Ya[e];
		if (v.c > 0 && k.lo[r] < v.i0)
			yv += (float)exp(k.cum[r]) * dot_(v.C + (size_t)r * v.sbc, k.S + (size_t)p * k.N, k.N);
		mgt_st1(k.Y, (size_t)r * v.sy + p, yv + k.Dh * xat(v, r, p));
	}
}

/* y rows of the chunk, by tiles of SSD_TS rows and SSD_PC columns (out_rows; M recomputed per
 * column tile when p > SSD_PC). */
template <typename T>
static __global__ void ssd_out_k(mgt_k_ssd d, T *y, const float *states, const T *x, const T *B, const T *C,
				 const T *dt_raw, const float *dt_bias, const float *A_log, const float *D)
{
	__shared__ double cum[Q];
	__shared__ float dt[Q], M[SSD_TS * SSD_TSP], Ya[SSD_TS * SSD_PC];
	__shared__ int lo[Q];
	const int blk = blockIdx.x;
	out_ctx<T> k;
	k.v = chunk_of(d, blk, x, B, C, dt_raw, dt_bias, A_log);
	chunk_prep(d, k.v, dt, lo, cum);
	k.dt = dt, k.lo = lo, k.cum = cum, k.M = M, k.Ya = Ya, k.P = d.p, k.N = d.n, k.Dh = D[k.v.h];
	k.S = states + (size_t)blk * d.p * d.n;
	k.Y = y + ((size_t)k.v.i0 * d.b + k.v.j) * ((size_t)d.nh * d.p) + (size_t)k.v.h * d.p;
	for (int r0 = 0; r0 < k.v.q; r0 += SSD_TS)
		for (int p0 = 0; p0 < d.p; p0 += SSD_PC)
			out_rows(k, r0, p0);
}

/* ---- the forward on tensor cores (the 16-bit instances; see the header) ---- */

/* Tiles: TC_R rows of y (or TC_O rows of a state) a pass, TC_K k-values staged a step, TC_O output
 * columns; padded pitches (elements) of the T tiles in shared memory: rows 16-byte aligned and 8
 * consecutive rows in distinct banks for ldmatrix (pitches of 80, 144 and 272 bytes). */
static constexpr int TC_R = 64, TC_K = 32, TC_O = 64, TC_KP = TC_K + 8, TC_OP = TC_O + 8, TC_MP = Q + 8;
/* The staging area's size in 16-bit elements: the score pass's C [TC_R, TC_KP] and B [Q, TC_KP].
 * The tiles live in dynamic shared memory (the simulator's access profile sees its bank conflicts;
 * it does not see a template kernel's static __shared__ arrays): ssd_out_tc_k M then the staging
 * area, ssd_state_tc_k X then W; both under 48 KB. */
static constexpr int TC_STAGE = (TC_R + Q) * TC_KP;
static constexpr size_t TC_OUT_SMEM = (size_t)(TC_R * TC_MP + TC_STAGE) * 2, TC_STATE_SMEM = (size_t)2 * TC_K * TC_OP * 2;

/* Which instances use tensor cores (the 16-bit ones; float stays the scalar reference). */
template <typename T> struct ssd_tc { static constexpr bool on = true; };
template <> struct ssd_tc<float> { static constexpr bool on = false; };

/* Fragments (kernels/mma.cuh's layouts) of tiles in shared memory with row pitch LD elements:
 * tc_a: A rows m0..m0+15, columns k0..k0+15 of row-major X; tc_at: A = X^T (A[m][k] = X[k][m]);
 * tc_b: B = X (X[k][n]), k0..k0+15, output columns n0..n0+15 (b[0..1] the first 8, b[2..3] the
 * next 8); tc_bt: B = X^T (X[n][k]). */
template <int LD, typename T> static __device__ __forceinline__ void tc_a(uint32_t (&a)[4], const T *x, int m0, int k0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4(a, x + (m0 + (l & 15)) * LD + k0 + (l >> 4) * 8);
}
template <int LD, typename T> static __device__ __forceinline__ void tc_at(uint32_t (&a)[4], const T *x, int m0, int k0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4_t(a, x + (k0 + (l & 7) + ((l >> 4) & 1) * 8) * LD + m0 + ((l >> 3) & 1) * 8);
}
template <int LD, typename T> static __device__ __forceinline__ void tc_b(uint32_t (&b)[4], const T *x, int k0, int n0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4_t(b, x + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * LD + n0 + (l >> 4) * 8);
}
template <int LD, typename T> static __device__ __forceinline__ void tc_bt(uint32_t (&b)[4], const T *x, int n0, int k0)
{
	const int l = threadIdx.x & 31;
	mgt_ldsm_x4(b, x + (n0 + (l & 7) + (l >> 4) * 8) * LD + k0 + ((l >> 3) & 1) * 8);
}

/* acc[c], acc[c + 1] += A B for the two 8-column halves of b. */
template <typename T> static __device__ __forceinline__ void tc_mma2(float (&acc)[4], float (&acc1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4])
{
	mgt_mma16816<T>(acc, a, b[0], b[1]);
	mgt_mma16816<T>(acc1, a, b[2], b[3]);
}

/* dst [rows, cols] (pitch LD, T) = f(r, c) rounded to T (0 where f says so); block-wide. */
template <int LD, typename T, typename F> static __device__ __forceinline__ void tc_stage(T *dst, int rows, int cols, F f)
{
	BLOCK_LOOP(e, rows * cols) {
		mgt_st1(dst, (e / cols) * LD + e % cols, f(e / cols, e % cols));
	}
}

/* Accumulator element e of n8 tile c: the warp tile's row gid + 8 (e / 2), column c 8 + 2 tig + e % 2. */
static __device__ __forceinline__ int tc_row(int e) { return ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
static __device__ __forceinline__ int tc_col(int c, int e) { return c * 8 + 2 * (threadIdx.x & 3) + (e & 1); }

/* The chunk's own end state on tensor cores: states[blk] [p, n] = X^T W with X [q, p] and
 * W[s][n] = wv[s] B[s][n] rounded to T (ssd_state_k's sum), by 64 x 64 tiles; warp w owns rows
 * 16 (w % 4) and columns 32 (w / 4) of a tile, k (the chunk's rows) TC_K a step. */
template <typename T>
static __device__ void state_tile(const chunk_v<T> &v, const float *wv, T *Xs, T *Ws, float *S, int P, int N, int p0, int n0)
{
	const int w = threadIdx.x >> 5, wr = (w & 3) * 16, wc = (w >> 2) * 32;
	float acc[4][4] = {};
	for (int s0 = 0; s0 < v.q; s0 += TC_K) {
		const int sn = v.q - s0 < TC_K ? v.q - s0 : TC_K;
		__syncthreads();
		tc_stage<TC_OP>(Xs, TC_K, TC_O, [&](int r, int c) { return r < sn && p0 + c < P ? xat(v, s0 + r, p0 + c) : 0.0f; });
		tc_stage<TC_OP>(Ws, TC_K, TC_O, [&](int r, int c) {
			return r < sn && n0 + c < N ? wv[s0 + r] * bat(v, s0 + r, n0 + c) : 0.0f;
		});
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < TC_K; kk += 16) {
			uint32_t a[4], b[4];
			tc_at<TC_OP>(a, Xs, wr, kk);
#pragma unroll
			for (int c = 0; c < 4; c += 2) {
				tc_b<TC_OP>(b, Ws, kk, wc + c * 8);
				tc_mma2<T>(acc[c], acc[c + 1], a, b);
			}
		}
	}
#pragma unroll
	for (int c = 0; c < 4; c++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int p = p0 + wr + tc_row(e), n = n0 + wc + tc_col(c, e);
			if (p < P && n < N)
				S[(size_t)p * N + n] = acc[c][e];
		}
}

/* ssd_state_k on tensor cores (T 16-bit). */
template <typename T>
static __global__ void ssd_state_tc_k(mgt_k_ssd d, float *states, float *decay, const T *x, const T *B, const T *C,
				      const T *dt_raw, const float *dt_bias, const float *A_log)
{
	__shared__ double cum[Q];
	__shared__ float dt[Q], wv[Q];
	__shared__ int lo[Q];
	MGT_DYN_SHARED(uint16_t, xs);
	const int blk = blockIdx.x;
	const chunk_v<T> v = chunk_of(d, blk, x, B, C, dt_raw, dt_bias, A_log);
	chunk_prep(d, v, dt, lo, cum);
	const int last = v.q - 1;
	if (threadIdx.x == 0)
		decay[blk] = chunk_decay(v, lo, cum);
	BLOCK_LOOP(s, v.q) {
		wv[s] = v.i0 + s >= lo[last] ? (float)(exp(cum[last] - cum[s]) * dt[s]) : 0.0f;
	}
	float *S = states + (size_t)blk * d.p * d.n;
	for (int p0 = 0; p0 < d.p; p0 += TC_O)
		for (int n0 = 0; n0 < d.n; n0 += TC_O)
			state_tile(v, wv, (T *)xs, (T *)xs + TC_K * TC_OP, S, d.p, d.n, p0, n0);
}

/* What ssd_out_tc_k's passes share: the chunk, its shared arrays, M (T [TC_R, TC_MP]: the row
 * tile's masked decayed scores, keys 0..Q-1), the staging area, y's rows, S_in [p, n] and D. */
template <typename T> struct otc_ctx {
	chunk_v<T> v;
	const float *dt, *S;
	const int *lo;
	const double *cum;
	T *M, *St, *Y;
	float Dh;
	int P, N;
};

/* M for rows r0..r0+TC_R-1: C B^T on tensor cores (k = n, TC_K a step; warp w: rows 16 (w % 4),
 * keys 64 (w / 4) .. + 63, skipped when all above the tile's rows), then out_tile's mask and
 * factor e^{cum[r] - cum[s]} dt_s in fp32, rounded to T into M (0 off the mask). */
template <typename T> static __device__ void otc_scores(const otc_ctx<T> &k, int r0)
{
	const chunk_v<T> &v = k.v;
	const int w = threadIdx.x >> 5, wr = (w & 3) * 16, hc = (w >> 2) * 64;
	const bool live = hc < r0 + TC_R && hc < v.q;
	T *Cs = k.St, *Bs = k.St + TC_R * TC_KP;
	float acc[8][4] = {};
	for (int n0 = 0; n0 < k.N; n0 += TC_K) {
		__syncthreads();
		tc_stage<TC_KP>(Cs, TC_R, TC_K, [&](int r, int c) { return r0 + r < v.q && n0 + c < k.N ? cat(v, r0 + r, n0 + c) : 0.0f; });
		tc_stage<TC_KP>(Bs, Q, TC_K, [&](int s, int c) { return s < v.q && n0 + c < k.N ? bat(v, s, n0 + c) : 0.0f; });
		__syncthreads();
		if (!live)
			continue;
#pragma unroll
		for (int kk = 0; kk < TC_K; kk += 16) {
			uint32_t a[4], b[4];
			tc_a<TC_KP>(a, Cs, wr, kk);
#pragma unroll
			for (int c = 0; c < 8; c += 2) {
				tc_bt<TC_KP>(b, Bs, hc + c * 8, kk);
				tc_mma2<T>(acc[c], acc[c + 1], a, b);
			}
		}
	}
#pragma unroll
	for (int c = 0; c < 8; c++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int r = r0 + wr + tc_row(e), s = hc + tc_col(c, e);
			float m = 0.0f;
			if (r < v.q && s <= r && s >= doc_row(k.lo, r, v.i0)) {
				const float ex = (float)exp(k.cum[r] - k.cum[s]);
				m = ex != 0.0f ? acc[c][e] * (ex * k.dt[s]) : 0.0f;
			}
			mgt_st1(k.M, (size_t)(r - r0) * TC_MP + s, m);
		}
}

/* acc += M X for the warp's 16 rows (wr) and 32 columns (wc) of y columns p0..: keys below the
 * row tile's end, TC_K a step (X staged in T). */
template <typename T> static __device__ void otc_intra(const otc_ctx<T> &k, int r0, int p0, float (&acc)[4][4])
{
	const chunk_v<T> &v = k.v;
	const int w = threadIdx.x >> 5, wr = (w & 3) * 16, wc = (w >> 2) * 32;
	const int kend = v.q < r0 + TC_R ? v.q : r0 + TC_R;
	for (int s0 = 0; s0 < kend; s0 += TC_K) {
		__syncthreads();
		tc_stage<TC_OP>(k.St, TC_K, TC_O, [&](int r, int c) { return s0 + r < v.q && p0 + c < k.P ? xat(v, s0 + r, p0 + c) : 0.0f; });
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < TC_K; kk += 16) {
			uint32_t a[4], b[4];
			tc_a<TC_MP>(a, k.M, wr, s0 + kk);
#pragma unroll
			for (int c = 0; c < 4; c += 2) {
				tc_b<TC_OP>(b, k.St, kk, wc + c * 8);
				tc_mma2<T>(acc[c], acc[c + 1], a, b);
			}
		}
	}
}

/* z = C S_in^T for the warp's rows and columns (S_in rounded to T), k = n TC_K a step. */
template <typename T> static __device__ void otc_inter(const otc_ctx<T> &k, int r0, int p0, float (&z)[4][4])
{
	const chunk_v<T> &v = k.v;
	const int w = threadIdx.x >> 5, wr = (w & 3) * 16, wc = (w >> 2) * 32;
	T *Cs = k.St, *Ss = k.St + TC_R * TC_KP;
	for (int n0 = 0; n0 < k.N; n0 += TC_K) {
		__syncthreads();
		tc_stage<TC_KP>(Cs, TC_R, TC_K, [&](int r, int c) { return r0 + r < v.q && n0 + c < k.N ? cat(v, r0 + r, n0 + c) : 0.0f; });
		tc_stage<TC_KP>(Ss, TC_O, TC_K, [&](int p, int c) {
			return p0 + p < k.P && n0 + c < k.N ? k.S[(size_t)(p0 + p) * k.N + n0 + c] : 0.0f;
		});
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < TC_K; kk += 16) {
			uint32_t a[4], b[4];
			tc_a<TC_KP>(a, Cs, wr, kk);
#pragma unroll
			for (int c = 0; c < 4; c += 2) {
				tc_bt<TC_KP>(b, Ss, wc + c * 8, kk);
				tc_mma2<T>(z[c], z[c + 1], a, b);
			}
		}
	}
}

/* y rows r0.., columns p0..: intra + e^{cum[r]} inter (rows whose document began before the
 * chunk, chunks after the first) + D x, each element rounded once (out_rows' order). */
template <typename T> static __device__ void otc_rows(const otc_ctx<T> &k, int r0, int p0)
{
	const chunk_v<T> &v = k.v;
	const int w = threadIdx.x >> 5, wr = (w & 3) * 16, wc = (w >> 2) * 32;
	float acc[4][4] = {}, z[4][4] = {};
	otc_intra(k, r0, p0, acc);
	if (v.c > 0)
		otc_inter(k, r0, p0, z);
#pragma unroll
	for (int c = 0; c < 4; c++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int r = r0 + wr + tc_row(e), p = p0 + wc + tc_col(c, e);
			if (r >= v.q || p >= k.P)
				continue;
			float yv = acc[c][e];
			if (v.c > 0 && k.lo[r] < v.i0)
				yv += (float)exp(k.cum[r]) * z[c][e];
			mgt_st1(k.Y, (size_t)r * v.sy + p, yv + k.Dh * xat(v, r, p));
		}
}

/* ssd_out_k on tensor cores (T 16-bit): per row tile of TC_R rows, M once (otc_scores), then y by
 * column tiles of TC_O. */
template <typename T>
static __global__ void ssd_out_tc_k(mgt_k_ssd d, T *y, const float *states, const T *x, const T *B, const T *C,
				    const T *dt_raw, const float *dt_bias, const float *A_log, const float *D)
{
	__shared__ double cum[Q];
	__shared__ float dt[Q];
	__shared__ int lo[Q];
	MGT_DYN_SHARED(uint16_t, ms);
	const int blk = blockIdx.x;
	otc_ctx<T> k;
	k.v = chunk_of(d, blk, x, B, C, dt_raw, dt_bias, A_log);
	chunk_prep(d, k.v, dt, lo, cum);
	k.dt = dt, k.lo = lo, k.cum = cum, k.M = (T *)ms, k.St = (T *)ms + TC_R * TC_MP, k.P = d.p, k.N = d.n, k.Dh = D[k.v.h];
	k.S = states + (size_t)blk * d.p * d.n;
	k.Y = y + ((size_t)k.v.i0 * d.b + k.v.j) * ((size_t)d.nh * d.p) + (size_t)k.v.h * d.p;
	for (int r0 = 0; r0 < k.v.q; r0 += TC_R) {
		otc_scores(k, r0);
		for (int p0 = 0; p0 < d.p; p0 += TC_O)
			otc_rows(k, r0, p0);
	}
}

extern "C" size_t mgt_k_ssd_scan_fwd_ws_bytes(const mgt_k_ssd *d)
{
	return (size_t)d->b * ((d->L + Q - 1) / Q) * d->nh * sizeof(float);
}

static bool ssd_empty(const mgt_k_ssd *d) { return d->L <= 0 || d->b <= 0 || d->nh <= 0 || d->p <= 0 || d->n <= 0; }

extern "C" int mgt_k_ssd_scan_fwd(mgt_k_stream s, const mgt_k_ssd *d, void *y, float *states, const void *x,
				  const void *B, const void *C, const void *dt_raw, const float *dt_bias,
				  const float *A_log, const float *D, mgt_k_dtype t, void *ws)
{
	if (ssd_empty(d))
		return 0;
	const cudaStream_t st = mgt_st(s);
	const unsigned nblk = (unsigned)(d->b * ((d->L + Q - 1) / Q) * d->nh);
	const dim3 pass((unsigned)(d->b * d->nh), (unsigned)mgt_cdiv((size_t)d->p * d->n, SSD_THREADS));
	float *decay = (float *)ws;
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		const E *xe = (const E *)x, *Be = (const E *)B, *Ce = (const E *)C, *dte = (const E *)dt_raw;
		if constexpr (ssd_tc<E>::on)
			MGT_LAUNCH(ssd_state_tc_k<E>, nblk, SSD_THREADS, TC_STATE_SMEM, st, *d, states, decay, xe, Be, Ce, dte, dt_bias, A_log);
		else
			MGT_LAUNCH(ssd_state_k<E>, nblk, SSD_THREADS, 0, st, *d, states, decay, xe, Be, Ce, dte, dt_bias, A_log);
		MGT_LAUNCH(ssd_carry_k, pass, SSD_THREADS, 0, st, *d, states, decay, 0);
		if constexpr (ssd_tc<E>::on)
			MGT_LAUNCH(ssd_out_tc_k<E>, nblk, SSD_THREADS, TC_OUT_SMEM, st, *d, (E *)y, states, xe, Be, Ce, dte, dt_bias, A_log, D);
		else
			MGT_LAUNCH(ssd_out_k<E>, nblk, SSD_THREADS, 0, st, *d, (E *)y, states, xe, Be, Ce, dte, dt_bias, A_log, D);
		return mgt_k_rc();
	});
}

/* ---- backward ---- */

/* decay[blk]; dsi[blk] = sum_r (e^{cum[r]} gy_r) (x) C_r over the rows reading S_in (none in the
 * first chunk): the part of dL/dS_in that does not pass through S_out (cpu_ssd.c bwd_inter). */
template <typename T>
static __global__ void ssd_dsin_k(mgt_k_ssd d, float *dsi, float *decay, const T *dy, const T *x, const T *B,
				  const T *C, const T *dt_raw, const float *dt_bias, const float *A_log)
{
	__shared__ double cum[Q];
	__shared__ float dt[Q], ex[Q];
	__shared__ int lo[Q];
	const int blk = blockIdx.x, P = d.p, N = d.n;
	const chunk_v<T> v = chunk_of(d, blk, x, B, C, dt_raw, dt_bias, A_log);
	chunk_prep(d, v, dt, lo, cum);
	if (threadIdx.x == 0)
		decay[blk] = chunk_decay(v, lo, cum);
	BLOCK_LOOP(r, v.q) {
		ex[r] = v.c > 0 && lo[r] < v.i0 ? (float)exp(cum[r]) : 0.0f;
	}
	__syncthreads();
	const T *G = dy + ((size_t)v.i0 * d.b + v.j) * ((size_t)d.nh * P) + (size_t)v.h * P;
	BLOCK_LOOP(e, P * N) {
		const int p = e / N, n = e % N;
		float acc = 0.0f;
		for (int r = 0; r < v.q && ex[r] != 0.0f; r++)
			acc += (ex[r] * mgt_ld1(G, (size_t)r * v.sy + p)) * cat(v, r, n);
		dsi[(size_t)blk * P * N + e] = acc;
	}
}

/* What ssd_bwd_k's phases share: the chunk, its shared arrays, its rows of dy, S_in, dSo and of
 * the outputs, and its ws matrices (row stride Q). */
template <typename T> struct bwd_ctx {
	chunk_v<T> v;
	const T *G;                     /* dy rows (stride v.sy) */
	const float *Sin, *dSo;         /* S_in and dSo [p, n] */
	T *DX;                          /* dx rows (stride v.sx) */
	float *PB, *PC;                 /* per-head dB, dC rows (stride n) */
	float *M, *Dm, *Tm, *Z, *U, *V; /* [Q, Q] x3, [Q, n], [Q, n], [Q, p] */
	double *cum, *dcum, *dde, *tmp; /* shared [Q] */
	float *dt, *F;
	int *lo;
	int P, N;
};

/* Chunk row r's dy[p], widened. */
template <typename T> static __device__ __forceinline__ float gat(const bwd_ctx<T> &k, int r, int p)
{
	return mgt_ld1(k.G, (size_t)r * k.v.sy + p);
}

/* M = (C B^T) E dt, dCB = (gy X^T) E dt, T = (gy X^T) E (C B^T) on the document mask. */
template <typename T> static __device__ void bwd_mats(const bwd_ctx<T> &k)
{
	const chunk_v<T> &v = k.v;
	BLOCK_LOOP(e, v.q * v.q) {
		const int r = e / v.q, s = e % v.q, o = r * Q + s;
		float m = 0.0f, dm = 0.0f, t = 0.0f;
		if (s <= r && s >= doc_row(k.lo, r, v.i0)) {
			const float E = (float)exp(k.cum[r] - k.cum[s]);
			const float cb = dot_(v.C + (size_t)r * v.sbc, v.B + (size_t)s * v.sbc, k.N);
			float g = 0.0f;
			for (int p = 0; p < k.P; p++)
				g += gat(k, r, p) * xat(v, s, p);
			const float ge = g * E;
			m = cb * (E * k.dt[s]), t = ge * cb, dm = ge * k.dt[s];
		}
		k.M[o] = m, k.Dm[o] = dm, k.Tm[o] = t;
	}
}

/* The backward's tiles (T 16-bit): TB_R rows a pass (warp w: rows 16 (w % 2), keys 32 (w / 2));
 * row tile A [TB_R, TC_KP] and key rows B [Q, TC_KP] (12800 B). */
static constexpr int TB_R = 32;
static constexpr size_t TC_BWD_SMEM = (size_t)(TB_R + Q) * TC_KP * 2;

/* acc (warp w: rows r0 + 16 (w % 2) .. + 15, keys 32 (w / 2) .. + 31 of the chunk) = sum over k < K of
 * fa(r, k) fb(s, k) on tensor cores, TC_K a step staged in T (As [TB_R, TC_KP], Bs [Q, TC_KP], zero
 * past q and K); fa, fb give values exact in T.  Warps whose keys all lie above the row tile
 * (s > r everywhere: off the causal mask) skip the mma and keep acc 0.  Block-wide. */
template <typename T, typename FA, typename FB>
static __device__ void tc_rows_keys(float (&acc)[4][4], T *As, T *Bs, int q, int r0, int K, FA fa, FB fb)
{
	const int w = threadIdx.x >> 5, wr = (w & 1) * 16, hc = (w >> 1) * 32;
	const bool live = hc < r0 + TB_R && hc < q;
#pragma unroll
	for (int c = 0; c < 4; c++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[c][e] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += TC_K) {
		__syncthreads();
		tc_stage<TC_KP>(As, TB_R, TC_K, [&](int r, int c) { return r0 + r < q && k0 + c < K ? fa(r0 + r, k0 + c) : 0.0f; });
		tc_stage<TC_KP>(Bs, Q, TC_K, [&](int s, int c) { return s < q && k0 + c < K ? fb(s, k0 + c) : 0.0f; });
		__syncthreads();
		if (!live)
			continue;
#pragma unroll
		for (int kk = 0; kk < TC_K; kk += 16) {
			uint32_t a[4], b[4];
			tc_a<TC_KP>(a, As, wr, kk);
#pragma unroll
			for (int c = 0; c < 4; c += 2) {
				tc_bt<TC_KP>(b, Bs, hc + c * 8, kk);
				tc_mma2<T>(acc[c], acc[c + 1], a, b);
			}
		}
	}
}

/* bwd_mats with its two chunk products on tensor cores (T 16-bit), by row tiles of TB_R:
 * cb = C B^T (k = n) and g = gy X^T (k = p), both of exact T inputs with fp32 accumulators (only
 * the order of the fp32 sums differs from bwd_mats' dot products; nothing is rounded to T), then
 * bwd_mats' mask and factors in fp32: M = cb (E dt_s), Dm = (g E) dt_s, Tm = (g E) cb.  The raw cb
 * goes through M (each thread reads back only the elements it wrote).  ts: the staging area
 * (TC_BWD_SMEM bytes of dynamic shared memory). */
template <typename T> static __device__ void bwd_mats_tc(const bwd_ctx<T> &k, T *ts)
{
	const chunk_v<T> &v = k.v;
	const int w = threadIdx.x >> 5, wr = (w & 1) * 16, hc = (w >> 1) * 32;
	T *As = ts, *Bs = ts + TB_R * TC_KP;
	float acc[4][4];
	for (int r0 = 0; r0 < v.q; r0 += TB_R) {
		tc_rows_keys(acc, As, Bs, v.q, r0, k.N, [&](int r, int n) { return cat(v, r, n); },
			     [&](int s, int n) { return bat(v, s, n); });
#pragma unroll
		for (int c = 0; c < 4; c++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int r = r0 + wr + tc_row(e), s = hc + tc_col(c, e);
				if (r < v.q && s < v.q)
					k.M[r * Q + s] = acc[c][e];
			}
		tc_rows_keys(acc, As, Bs, v.q, r0, k.P, [&](int r, int p) { return gat(k, r, p); },
			     [&](int s, int p) { return xat(v, s, p); });
#pragma unroll
		for (int c = 0; c < 4; c++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int r = r0 + wr + tc_row(e), s = hc + tc_col(c, e), o = r * Q + s;
				if (r >= v.q || s >= v.q)
					continue;
				float m = 0.0f, dm = 0.0f, t = 0.0f;
				if (s <= r && s >= doc_row(k.lo, r, v.i0)) {
					const float E = (float)exp(k.cum[r] - k.cum[s]), cb = k.M[o], ge = acc[c][e] * E;
					m = cb * (E * k.dt[s]), t = ge * cb, dm = ge * k.dt[s];
				}
				k.M[o] = m, k.Dm[o] = dm, k.Tm[o] = t;
			}
	}
}

/* dC = dCB B; dB = dCB^T C; dcum[r] = sum_s T dt_s, dde[s] = sum_r T, tmp[s] = sum_r T dt_s
 * (subtracted from dcum[s] next).  dx's M^T gy is bwd_dx's. */
template <typename T> static __device__ void bwd_intra(const bwd_ctx<T> &k)
{
	const chunk_v<T> &v = k.v;
	const int q = v.q;
	BLOCK_LOOP(e, q * k.N) {
		const int i = e / k.N, n = e % k.N;
		float c = 0.0f, b = 0.0f;
		for (int s = 0; s <= i; s++)
			c += k.Dm[i * Q + s] * bat(v, s, n);
		for (int r = i; r < q; r++)
			b += k.Dm[r * Q + i] * cat(v, r, n);
		k.PC[(size_t)i * k.N + n] = c;
		k.PB[(size_t)i * k.N + n] = b;
	}
	BLOCK_LOOP(i, q) {
		double rs = 0, cs = 0, cd = 0;
		for (int s = 0; s < q; s++)
			rs += (double)k.Tm[i * Q + s] * k.dt[s];
		for (int r = 0; r < q; r++) {
			cs += k.Tm[r * Q + i];
			cd += (double)k.Tm[r * Q + i] * k.dt[i];
		}
		k.dcum[i] = rs, k.dde[i] = cs, k.tmp[i] = cd;
	}
	__syncthreads();
	BLOCK_LOOP(i, q) {
		k.dcum[i] -= k.tmp[i];
	}
	__syncthreads();
}

/* Rows reading S_in (ex_r = e^{cum[r]}): dC_r += ex_r S_in^T gy_r, dcum[r] += ex_r gy_r . S_in C_r. */
template <typename T> static __device__ void bwd_inter(const bwd_ctx<T> &k)
{
	const chunk_v<T> &v = k.v;
	if (v.c == 0)
		return;
	BLOCK_LOOP(e, v.q * k.N) {
		const int r = e / k.N, n = e % k.N;
		if (k.lo[r] >= v.i0)
			continue;
		float z = 0.0f;
		for (int p = 0; p < k.P; p++)
			z += gat(k, r, p) * k.Sin[(size_t)p * k.N + n];
		k.Z[(size_t)r * k.N + n] = z;
		k.PC[(size_t)r * k.N + n] += (float)exp(k.cum[r]) * z;
	}
	__syncthreads();
	BLOCK_LOOP(r, v.q) {
		if (k.lo[r] >= v.i0)
			continue;
		double zc = 0;
		for (int n = 0; n < k.N; n++)
			zc += (double)k.Z[(size_t)r * k.N + n] * cat(v, r, n);
		k.dcum[r] += (float)exp(k.cum[r]) * zc;
	}
	__syncthreads();
}

/* V = B dSo^T, U = X dSo (rows of the chunk). */
template <typename T> static __device__ void bwd_uv(const bwd_ctx<T> &k)
{
	const chunk_v<T> &v = k.v;
	BLOCK_LOOP(e, v.q * k.P) {
		const int s = e / k.P, p = e % k.P;
		k.V[(size_t)s * k.P + p] = dot_(v.B + (size_t)s * v.sbc, k.dSo + (size_t)p * k.N, k.N);
	}
	BLOCK_LOOP(e, v.q * k.N) {
		const int s = e / k.N, n = e % k.N;
		float a = 0.0f;
		for (int p = 0; p < k.P; p++)
			a += xat(v, s, p) * k.dSo[(size_t)p * k.N + n];
		k.U[(size_t)s * k.N + n] = a;
	}
	__syncthreads();
}

/* The end state's gradient dSo (chunks before the last): with F_s = e^{cum[last] - cum[s]} dt_s on
 * the last document, k_s = x_s . V_s: dB_s += F_s U_s, dde[s] += e k_s, dcum[s] -= F_s k_s,
 * dcum[last] += sum_s F_s k_s (+ e^{cum[last]} <dSo, S_in> when S_in reaches S_out); dx's
 * F_s V_s is bwd_dx's. */
template <typename T> static __device__ void bwd_state_out(const bwd_ctx<T> &k)
{
	const chunk_v<T> &v = k.v;
	const int last = v.q - 1;
	if (v.c == v.nc - 1)
		return;
	bwd_uv(k);
	BLOCK_LOOP(s, v.q) {
		k.F[s] = 0.0f, k.tmp[s] = 0;
		if (v.i0 + s < k.lo[last])
			continue;
		const double e = exp(k.cum[last] - k.cum[s]);
		const float F = (float)(e * k.dt[s]);
		double ks = 0;
		for (int p = 0; p < k.P; p++)
			ks += (double)xat(v, s, p) * k.V[(size_t)s * k.P + p];
		k.dde[s] += e * ks;
		k.dcum[s] -= F * ks;
		k.F[s] = F, k.tmp[s] = F * ks;
	}
	__syncthreads();
	BLOCK_LOOP(e, v.q * k.N) {
		if (v.i0 + e / k.N >= k.lo[last])
			k.PB[e] += k.F[e / k.N] * k.U[e];
	}
	double dot = 0;
	BLOCK_LOOP(e, k.P * k.N) {
		dot += (double)k.dSo[e] * k.Sin[e];
	}
	dot = mgt_block_sum(dot);
	if (threadIdx.x == 0) {
		double a = 0;
		for (int s = 0; s < v.q; s++)
			a += k.tmp[s];
		k.dcum[last] += a;
		if (k.lo[last] < v.i0)
			k.dcum[last] += (float)exp(k.cum[last]) * dot;
	}
	__syncthreads();
}

/* dx rows of the chunk: M^T gy, + F_s V_s (chunks before the last, rows of its last document),
 * + D gy, summed in fp32 in that order (the fp32 kernel's), each element rounded once. */
template <typename T> static __device__ void bwd_dx(const bwd_ctx<T> &k, float Dh)
{
	const chunk_v<T> &v = k.v;
	const int q = v.q, last = q - 1;
	const bool out = v.c < v.nc - 1;
	BLOCK_LOOP(e, q * k.P) {
		const int s = e / k.P, p = e % k.P;
		float a = 0.0f;
		for (int r = s; r < q; r++)
			a += k.M[r * Q + s] * gat(k, r, p);
		if (out && v.i0 + s >= k.lo[last])
			a += k.F[s] * k.V[e];
		a += Dh * gat(k, s, p);
		mgt_st1(k.DX, (size_t)s * v.sx + p, a);
	}
}

/* (thread 0, rows in reverse) dt from the explicit terms and the reverse cumulative sum of dcum
 * (restarted at document starts): ddt_raw, and this block's partial sums of dA (before the chain
 * rule through A_log), ddt_bias and dD into part[3 blk ..]. */
template <typename T> static __device__ void bwd_dt(const bwd_ctx<T> &k, const mgt_k_ssd &d, T *ddt_raw, double *part, int blk)
{
	const chunk_v<T> &v = k.v;
	__syncthreads();
	BLOCK_LOOP(r, v.q) {
		double a = 0;
		for (int p = 0; p < k.P; p++)
			a += (double)gat(k, r, p) * xat(v, r, p);
		k.tmp[r] = a;
	}
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	double g = 0, dA = 0, db = 0, dD = 0;
	T *dd = ddt_raw + ((size_t)v.i0 * d.b + v.j) * d.ld_dt + v.h;
	for (int r = v.q - 1; r >= 0; r--) {
		dD += k.tmp[r];
		g += k.dcum[r];
		const double ddt = k.dde[r] + (double)v.A * g;
		dA += k.dt[r] * g;
		const float gdt = (float)ddt * dsoftplus_(dtrat(v, r) + v.dtb);
		mgt_st1(dd, (size_t)r * v.sdt, gdt);
		db += gdt;
		if (k.lo[r] == v.i0 + r)
			g = 0;
	}
	part[3 * (size_t)blk] = dA, part[3 * (size_t)blk + 1] = db, part[3 * (size_t)blk + 2] = dD;
}

/* The backward's ws, in bytes from its start: part (3 doubles a block), decay (a float a block),
 * dSo [blocks, p, n], per-head dB and dC [b, nh, L, n] each, the wave's matrices. */
struct bwd_ws {
	size_t part, decay, dso, pb, pc, mats, total, per;
};

static size_t al16(size_t v) { return (v + 15) / 16 * 16; }

static bwd_ws bwd_layout(const mgt_k_ssd *d)
{
	bwd_ws w;
	const size_t nblk = (size_t)d->b * ((d->L + Q - 1) / Q) * d->nh, PN = (size_t)d->p * d->n;
	const size_t rows = (size_t)d->b * d->nh * d->L * d->n, wave = nblk < (size_t)SSD_WAVE ? nblk : (size_t)SSD_WAVE;
	w.per = 3 * (size_t)Q * Q + 2 * (size_t)Q * d->n + (size_t)Q * d->p;
	w.part = 0;
	w.decay = al16(3 * nblk * sizeof(double));
	w.dso = w.decay + al16(nblk * sizeof(float));
	w.pb = w.dso + al16(nblk * PN * sizeof(float));
	w.pc = w.pb + al16(rows * sizeof(float));
	w.mats = w.pc + al16(rows * sizeof(float));
	w.total = w.mats + wave * w.per * sizeof(float);
	return w;
}

/* Arguments of ssd_bwd_k (T: the activations' and their gradients' storage). */
template <typename T> struct bwd_args {
	T *dx, *ddt_raw;
	float *pb, *pc, *mats;
	double *part;
	const T *dy;
	const float *states, *dso;
	const T *x, *B, *C, *dt_raw;
	const float *dt_bias, *A_log, *D;
	int blk0;
};

/* Block blk0 + blockIdx.x: its chunk's backward (matrices in its ws slice; T 16-bit: TC_BWD_SMEM
 * bytes of dynamic shared memory for bwd_mats_tc's tiles, none for float). */
template <typename T> static __global__ void ssd_bwd_k(mgt_k_ssd d, bwd_args<T> a, size_t per)
{
	__shared__ double cum[Q], dcum[Q], dde[Q], tmp[Q];
	__shared__ float dt[Q], F[Q];
	__shared__ int lo[Q];
	MGT_DYN_SHARED(uint16_t, ts);
	const int blk = a.blk0 + blockIdx.x;
	bwd_ctx<T> k;
	k.v = chunk_of(d, blk, a.x, a.B, a.C, a.dt_raw, a.dt_bias, a.A_log);
	chunk_prep(d, k.v, dt, lo, cum);
	const chunk_v<T> &v = k.v;
	const size_t PN = (size_t)d.p * d.n, r0 = (size_t)v.i0 * d.b + v.j;
	const size_t hr = ((size_t)v.j * d.nh + v.h) * d.L + v.i0;
	k.P = d.p, k.N = d.n, k.cum = cum, k.dcum = dcum, k.dde = dde, k.tmp = tmp, k.dt = dt, k.F = F, k.lo = lo;
	k.G = a.dy + r0 * ((size_t)d.nh * d.p) + (size_t)v.h * d.p;
	k.Sin = a.states + (size_t)blk * PN, k.dSo = a.dso + (size_t)blk * PN;
	k.DX = a.dx + r0 * d.ld_x + (size_t)v.h * d.p;
	k.PB = a.pb + hr * d.n, k.PC = a.pc + hr * d.n;
	k.M = a.mats + (size_t)blockIdx.x * per, k.Dm = k.M + Q * Q, k.Tm = k.Dm + Q * Q;
	k.Z = k.Tm + Q * Q, k.U = k.Z + (size_t)Q * d.n, k.V = k.U + (size_t)Q * d.n;
	if constexpr (ssd_tc<T>::on)
		bwd_mats_tc(k, (T *)ts);
	else
		bwd_mats(k);
	__syncthreads();
	bwd_intra(k);
	bwd_inter(k);
	bwd_state_out(k);
	bwd_dx(k, a.D[v.h]);
	bwd_dt(k, d, a.ddt_raw, a.part, blk);
}

/* dB, dC [t, gi n + n'] = the group's heads' per-head rows summed in head order (fp32), rounded
 * once into T. */
template <typename T> static __global__ void ssd_gsum_k(mgt_k_ssd d, T *dB, T *dC, const float *pb, const float *pc)
{
	const size_t n = (size_t)d.L * d.b * d.g * d.n, hpg = d.nh / d.g;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const size_t t = e / ((size_t)d.g * d.n), gi = e / d.n % d.g, m = e % d.n, i = t / d.b, j = t % d.b;
		float ob = 0.0f, oc = 0.0f;
		for (size_t h = gi * hpg; h < (gi + 1) * hpg; h++) {
			const size_t o = ((j * d.nh + h) * d.L + i) * d.n + m;
			ob += pb[o];
			oc += pc[o];
		}
		mgt_st1(dB, t * d.ld_bc + gi * d.n + m, ob);
		mgt_st1(dC, t * d.ld_bc + gi * d.n + m, oc);
	}
}

/* Head h: its blocks' partials summed (sequences, then chunks, in order); dA_log += dA (-e^{A_log}). */
static __global__ void ssd_scal_k(mgt_k_ssd d, float *ddt_bias, float *dA_log, float *dD, const double *part,
				  const float *A_log)
{
	const int h = blockIdx.x * blockDim.x + threadIdx.x, nc = (d.L + Q - 1) / Q;
	if (h >= d.nh)
		return;
	double sa = 0, sb = 0, sd = 0;
	for (int k = 0; k < d.b * nc; k++) {
		const double *s = part + 3 * ((size_t)k * d.nh + h);
		sa += s[0], sb += s[1], sd += s[2];
	}
	dA_log[h] += (float)(sa * -exp((double)A_log[h]));
	ddt_bias[h] += (float)sb;
	dD[h] += (float)sd;
}

extern "C" size_t mgt_k_ssd_scan_bwd_ws_bytes(const mgt_k_ssd *d)
{
	return ssd_empty(d) ? 0 : bwd_layout(d).total;
}

extern "C" int mgt_k_ssd_scan_bwd(mgt_k_stream s, const mgt_k_ssd *d, void *dx, void *dB, void *dC, void *ddt_raw,
				  float *ddt_bias, float *dA_log, float *dD, const void *dy, const float *states,
				  const void *x, const void *B, const void *C, const void *dt_raw, const float *dt_bias,
				  const float *A_log, const float *D, mgt_k_dtype t, void *ws)
{
	if (ssd_empty(d))
		return 0;
	const cudaStream_t st = mgt_st(s);
	const bwd_ws w = bwd_layout(d);
	char *base = (char *)ws;
	const int nblk = d->b * ((d->L + Q - 1) / Q) * d->nh;
	float *decay = (float *)(base + w.decay), *dso = (float *)(base + w.dso);
	const dim3 pass((unsigned)(d->b * d->nh), (unsigned)mgt_cdiv((size_t)d->p * d->n, SSD_THREADS));
	const size_t ng = (size_t)d->L * d->b * d->g * d->n;
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		bwd_args<E> a = { (E *)dx, (E *)ddt_raw, (float *)(base + w.pb), (float *)(base + w.pc),
				  (float *)(base + w.mats), (double *)(base + w.part), (const E *)dy, states, dso,
				  (const E *)x, (const E *)B, (const E *)C, (const E *)dt_raw, dt_bias, A_log, D, 0 };
		MGT_LAUNCH(ssd_dsin_k<E>, nblk, SSD_THREADS, 0, st, *d, dso, decay, a.dy, a.x, a.B, a.C, a.dt_raw, dt_bias,
			   A_log);
		MGT_LAUNCH(ssd_carry_k, pass, SSD_THREADS, 0, st, *d, dso, decay, 1);
		for (a.blk0 = 0; a.blk0 < nblk; a.blk0 += SSD_WAVE) {
			const int nw = nblk - a.blk0 < SSD_WAVE ? nblk - a.blk0 : SSD_WAVE;
			MGT_LAUNCH(ssd_bwd_k<E>, nw, SSD_THREADS, ssd_tc<E>::on ? TC_BWD_SMEM : 0, st, *d, a, w.per);
		}
		MGT_LAUNCH(ssd_gsum_k<E>, mgt_grid(ng, 256), 256, 0, st, *d, (E *)dB, (E *)dC, a.pb, a.pc);
		MGT_LAUNCH(ssd_scal_k, (unsigned)mgt_cdiv((size_t)d->nh, 64), 64, 0, st, *d, ddt_bias, dA_log, dD, a.part,
			   A_log);
		return mgt_k_rc();
	});
}
