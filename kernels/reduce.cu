/* kernels/: reductions: sumsq, column sums, vocab-parallel cross-entropy (backend.h's ops of the
 * same names, lib/backend/cpu.c's arithmetic; megatron/core/tensor_parallel/cross_entropy.py).
 *
 * Determinism: every sum is a fixed tree.  Row reductions use one block per row (fixed block
 * size, fixed per-thread element order, fixed shuffle tree).  Whole-tensor and column reductions
 * write per-block partials to the caller's ws, grid sized from the shape only, and a second
 * kernel sums the partials in a fixed order.  Sums the CPU keeps in double are double here too. */
#include "common.cuh"

/* ---- sum of partials ---- */

/* out[0] = sum of part[0 .. np) in double, one block of 256 threads (fixed tree). */
static __global__ void sum_parts_k(double *out, const double *part, int np)
{
	double acc = 0;
	for (int i = threadIdx.x; i < np; i += blockDim.x)
		acc += part[i];
	acc = mgt_block_sum(acc);
	if (threadIdx.x == 0)
		out[0] = acc;
}

/* ---- sumsq ---- */

static constexpr int SUMSQ_THREADS = 256, SUMSQ_MAX_BLOCKS = 1024;

/* Blocks of the partial pass: at least 8 groups of 4 per thread, at most 1024 blocks. */
static int sumsq_blocks(size_t n)
{
	size_t b = mgt_cdiv(n, (size_t)SUMSQ_THREADS * 4 * 8);
	return (int)(b < 1 ? 1 : b > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : b);
}

static __global__ void sumsq_part_k(double *part, const float *x, size_t n, bool vec)
{
	const size_t ng = (n + 3) / 4;
	double acc = 0;
	for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < ng;
	     g += (size_t)gridDim.x * blockDim.x) {
		float v[4];
		mgt_ld4(x, g, n, vec, v); /* 0 beyond n: adds nothing */
#pragma unroll
		for (int k = 0; k < 4; k++)
			acc += (double)v[k] * v[k];
	}
	acc = mgt_block_sum(acc);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

extern "C" size_t mgt_k_sumsq_ws_bytes(size_t n)
{
	return n == 0 ? 0 : (size_t)sumsq_blocks(n) * sizeof(double);
}

/* ws: [blocks] doubles of partial sums.  n == 0 writes out[0] = 0 (a memset, no kernel). */
extern "C" int mgt_k_sumsq(mgt_k_stream s, double *out, const float *x, size_t n, void *ws)
{
	cudaStream_t st = mgt_st(s);
	if (n == 0) {
		cudaError_t e = cudaMemsetAsync(out, 0, sizeof(double), st);
		int rc = mgt_k_rc();
		return e != cudaSuccess ? (int)e : rc;
	}
	const int nb = sumsq_blocks(n);
	double *part = (double *)ws;
	MGT_LAUNCH(sumsq_part_k, nb, SUMSQ_THREADS, 0, st, part, x, n, mgt_al16(x));
	MGT_LAUNCH(sum_parts_k, 1, 256, 0, st, out, part, nb);
	return mgt_k_rc();
}

/* ---- column sums ---- */

/* part[r, c] = sum of x[t, c] over the rows t of chunk r, in row order, in double.  Grid
 * (column blocks, chunks); one thread per column, so a warp reads 32 consecutive floats. */
template <typename X> static __global__ void colsum_part_k(double *part, const X *x, int T, int n, int rows)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n)
		return;
	const int r = blockIdx.y;
	const int t0 = r * rows, t1 = T - t0 < rows ? T : t0 + rows;
	double acc = 0;
	for (int t = t0; t < t1; t++)
		acc += mgt_ld1(x, (size_t)t * n + c);
	part[(size_t)r * n + c] = acc;
}

/* db[c] += sum of part[r, c] over r in order, rounded to fp32 once (as colsum_acc). */
static __global__ void colsum_fin_k(float *db, const double *part, int R, int n)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n)
		return;
	double acc = 0;
	for (int r = 0; r < R; r++)
		acc += part[(size_t)r * n + c];
	db[c] += (float)acc;
}

extern "C" size_t mgt_k_colsum_ws_bytes(int T, int n)
{
	if (T <= 0 || n <= 0)
		return 0;
	return (size_t)mgt_col_chunks(T, n) * (size_t)n * sizeof(double);
}

/* colsum_acc in lib/backend/cpu.c.  ws: [R, n] doubles (R chunks of rows, mgt_col_chunks). */
extern "C" int mgt_k_colsum(mgt_k_stream s, float *db, const void *dy, mgt_k_dtype dt, int T, int n, void *ws)
{
	if (T <= 0 || n <= 0)
		return 0;
	cudaStream_t st = mgt_st(s);
	const int rows = mgt_col_chunk_rows(T, n), R = mgt_col_chunks(T, n);
	const unsigned cb = (unsigned)mgt_cdiv((size_t)n, MGT_COL_THREADS);
	double *part = (double *)ws;
	mgt_k_typed(dt, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH(colsum_part_k<E>, dim3(cb, R), MGT_COL_THREADS, 0, st, part, (const E *)dy, T, n, rows);
		return 0;
	});
	MGT_LAUNCH(colsum_fin_k, cb, MGT_COL_THREADS, 0, st, db, part, R, n);
	return mgt_k_rc();
}

/* ---- cross-entropy ---- */

static constexpr int XENT_THREADS = 512;

template <typename L> static __global__ void xent_max_k(float *mx, const L *logits, int V, bool vec)
{
	const size_t nv = (size_t)V, ng = (nv + 3) / 4;
	const L *lt = logits + blockIdx.x * nv;
	float m = -INFINITY;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		int cnt = mgt_ld4(lt, g, nv, vec, v);
#pragma unroll
		for (int k = 0; k < 4; k++)
			if (k < cnt)
				m = mgt_max(m, v[k]);
	}
	m = mgt_block_max(m);
	if (threadIdx.x == 0)
		mx[blockIdx.x] = m;
}

/* Logits of type lt: vec needs 16 bytes of alignment, as for fp32. */
static bool xent_vec(const void *p, int V) { return V % 4 == 0 && mgt_al16(p); }

template <typename L> static void xent_max_launch(mgt_k_stream s, float *mx, const void *logits, int T, int V)
{
	MGT_LAUNCH(xent_max_k<L>, T, XENT_THREADS, 0, mgt_st(s), mx, (const L *)logits, V, xent_vec(logits, V));
}

/* mx[t] = max_c logits[t, c] (row_max in cpu.c; NaN ignored as there).  One block per row. */
extern "C" int mgt_k_xent_max(mgt_k_stream s, float *mx, const void *logits, mgt_k_dtype lt, int T, int V)
{
	if (T <= 0) /* V == 0 runs: mx = -inf, as the CPU's row_max of nothing */
		return 0;
	if (lt == MGT_K_BF16)
		xent_max_launch<__nv_bfloat16>(s, mx, logits, T, V);
	else if (lt == MGT_K_F16)
		xent_max_launch<__half>(s, mx, logits, T, V);
	else
		xent_max_launch<float>(s, mx, logits, T, V);
	return mgt_k_rc();
}

template <typename L>
static __global__ void xent_stats_k(float *sumexp, float *tgt, const L *logits, const int32_t *labels,
				    const float *mx, int64_t v0, int V, bool vec)
{
	const size_t t = blockIdx.x, nv = (size_t)V, ng = (nv + 3) / 4;
	const L *lt = logits + t * nv;
	const float m = mx[t];
	double acc = 0;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		int cnt = mgt_ld4(lt, g, nv, vec, v);
#pragma unroll
		for (int k = 0; k < 4; k++)
			if (k < cnt)
				acc += mgt_expf(v[k] - m);
	}
	acc = mgt_block_sum(acc);
	if (threadIdx.x == 0) {
		int64_t lab = labels[t];
		sumexp[t] = (float)acc;
		tgt[t] = lab >= v0 && lab < v0 + V ? mgt_ld1(lt, (size_t)(lab - v0)) : 0.0f;
	}
}

template <typename L>
static void xent_stats_launch(mgt_k_stream s, float *sumexp, float *tgt, const void *logits, const int32_t *labels,
			      const float *mx, int64_t v0, int T, int V)
{
	MGT_LAUNCH(xent_stats_k<L>, T, XENT_THREADS, 0, mgt_st(s), sumexp, tgt, (const L *)logits, labels, mx, v0, V,
		   xent_vec(logits, V));
}

/* sumexp[t] = sum_c exp(logits[t,c] - mx[t]) in double, tgt[t] = the label's logit or 0
 * (cpu_xent_stats).  One block per row. */
extern "C" int mgt_k_xent_stats(mgt_k_stream s, float *sumexp, float *tgt, const void *logits, mgt_k_dtype lt,
				const int32_t *labels, const float *mx, int64_t v0, int T, int V)
{
	if (T <= 0)
		return 0;
	if (lt == MGT_K_BF16)
		xent_stats_launch<__nv_bfloat16>(s, sumexp, tgt, logits, labels, mx, v0, T, V);
	else if (lt == MGT_K_F16)
		xent_stats_launch<__half>(s, sumexp, tgt, logits, labels, mx, v0, T, V);
	else
		xent_stats_launch<float>(s, sumexp, tgt, logits, labels, mx, v0, T, V);
	return mgt_k_rc();
}

static constexpr int XLOSS_THREADS = 256, XLOSS_MAX_BLOCKS = 256;

static int xloss_blocks(int T)
{
	size_t b = mgt_cdiv((size_t)(T > 0 ? T : 0), XLOSS_THREADS);
	return (int)(b < 1 ? 1 : b > XLOSS_MAX_BLOCKS ? XLOSS_MAX_BLOCKS : b);
}

static __global__ void xent_loss_k(double *part, float *loss, const float *mx, const float *sumexp,
				   const float *tgt, const float *mask, int T)
{
	double acc = 0;
	for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
		float l = (float)(log((double)sumexp[t]) + (double)mx[t] - (double)tgt[t]);
		loss[t] = l;
		acc += (double)l * mask[t];
	}
	acc = mgt_block_sum(acc);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

extern "C" size_t mgt_k_xent_loss_ws_bytes(int T)
{
	return T <= 0 ? 0 : (size_t)xloss_blocks(T) * sizeof(double);
}

/* cpu_xent_loss: loss[t] = log(sumexp) + mx - tgt in double, rounded; out[0] = sum loss * mask in
 * double (per-block partials in ws, then summed in block order).  T == 0 writes out[0] = 0. */
extern "C" int mgt_k_xent_loss(mgt_k_stream s, double *out, float *loss, const float *mx,
			       const float *sumexp, const float *tgt, const float *mask, int T, void *ws)
{
	cudaStream_t st = mgt_st(s);
	if (T <= 0) {
		cudaError_t e = cudaMemsetAsync(out, 0, sizeof(double), st);
		int rc = mgt_k_rc();
		return e != cudaSuccess ? (int)e : rc;
	}
	const int nb = xloss_blocks(T);
	double *part = (double *)ws;
	MGT_LAUNCH(xent_loss_k, nb, XLOSS_THREADS, 0, st, part, loss, mx, sumexp, tgt, mask, T);
	MGT_LAUNCH(sum_parts_k, 1, 256, 0, st, out, part, nb);
	return mgt_k_rc();
}

/* Row t: dlogits = (softmax - onehot) * mask * scale; each element is read and written by the
 * same thread, so dlogits may be logits. */
template <typename L>
static __global__ void xent_bwd_k(L *dlogits, const L *logits, const int32_t *labels, const float *mx,
				  const float *sumexp, const float *mask, float scale, int64_t v0, int V, bool vec)
{
	const size_t t = blockIdx.x, nv = (size_t)V, ng = (nv + 3) / 4;
	const L *lt = logits + t * nv;
	L *dt = dlogits + t * nv;
	const float ms = mask[t] * scale;
	const float m = mx[t], inv = 1.0f / sumexp[t];
	const int64_t lab = labels[t];
	const int64_t lc = lab >= v0 && lab < v0 + V ? lab - v0 : -1;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		if (ms == 0.0f) {
			v[0] = v[1] = v[2] = v[3] = 0.0f;
		} else {
			mgt_ld4(lt, g, nv, vec, v);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				float pk = mgt_expf(v[k] - m) * inv;
				v[k] = (int64_t)(g * 4 + k) == lc ? (pk - 1.0f) * ms : pk * ms;
			}
		}
		mgt_st4(dt, g, nv, vec, v);
	}
}

template <typename L>
static void xent_bwd_launch(mgt_k_stream s, void *dlogits, const void *logits, const int32_t *labels,
			    const float *mx, const float *sumexp, const float *mask, float scale, int64_t v0, int T,
			    int V)
{
	MGT_LAUNCH(xent_bwd_k<L>, T, XENT_THREADS, 0, mgt_st(s), (L *)dlogits, (const L *)logits, labels, mx, sumexp,
		   mask, scale, v0, V, xent_vec(dlogits, V) && xent_vec(logits, V));
}

/* cpu_xent_bwd (writes every element; rows with mask * scale == 0 get zeros). */
extern "C" int mgt_k_xent_bwd(mgt_k_stream s, void *dlogits, const void *logits, mgt_k_dtype lt,
			      const int32_t *labels, const float *mx, const float *sumexp,
			      const float *mask, float scale, int64_t v0, int T, int V)
{
	if (T <= 0 || V <= 0)
		return 0;
	if (lt == MGT_K_BF16)
		xent_bwd_launch<__nv_bfloat16>(s, dlogits, logits, labels, mx, sumexp, mask, scale, v0, T, V);
	else if (lt == MGT_K_F16)
		xent_bwd_launch<__half>(s, dlogits, logits, labels, mx, sumexp, mask, scale, v0, T, V);
	else
		xent_bwd_launch<float>(s, dlogits, logits, labels, mx, sumexp, mask, scale, v0, T, V);
	return mgt_k_rc();
}
