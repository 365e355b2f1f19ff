/* lib/backend: the CPU reference backend (fp32, OpenBLAS sgemm, OpenMP threads).
 *
 * Parallelism: every op runs its own `omp parallel` with num_threads(be->threads); sgemm calls
 * made outside a parallel region use OpenBLAS's threads (set to the same count at create), calls
 * made inside one run single-threaded (OpenBLAS's OpenMP build), which is what attention wants.
 * Small ops stay on the calling thread (the `if` clauses), so a tiny model does not pay a fork per
 * op.
 *
 * Determinism: reductions over rows (bias gradients, norm weight gradients, embedding gradients)
 * are split by columns, each column summed over rows in row order, so their bits do not even
 * depend on the thread count; sumsq sums fixed chunks that depend only on n.  No atomics.
 *
 * Attention lives in cpu_attn.c, the Mixture-of-Experts row ops and grouped linears in cpu_moe.c.
 */
#include "backend/cpu_impl.h"
#include "fp8/fp8.h"

#include <cblas.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static void blas_warmup(mgt_backend *be);

#define PAR_MIN CPU_PAR_MIN
/* Columns per task in column-split reductions. */
#define COLCH 128

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

/* ---- memory ---- */

void *mgt_cpu_alloc(mgt_backend *be, size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, zmax(bytes, 1)) != 0) {
		mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	memset(p, 0, bytes);
	return p;
}

void mgt_cpu_free(mgt_backend *be, void *p) { free(p); }

mgt_status mgt_cpu_upload(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
	return MGT_OK;
}

mgt_status mgt_cpu_download(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
	return MGT_OK;
}

void mgt_cpu_zero(mgt_backend *be, void *p, size_t bytes)
{
	const size_t chunk = (size_t)1 << 20;
	size_t nch = (bytes + chunk - 1) / chunk;
	unsigned char *c = p;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (nch > 1)
	for (size_t k = 0; k < nch; k++) {
		size_t o = k * chunk, n = bytes - o < chunk ? bytes - o : chunk;
		memset(c + o, 0, n);
	}
}

void mgt_cpu_sync(mgt_backend *be) {}

/* ---- helpers ---- */

/* db[c] += sum_t x[t, c] over x [T, n], summed in double in row order (column-split tasks). */
static void colsum_acc(mgt_backend *be, float *db, const float *x, int T, int n)
{
	int nch = (n + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)T * n > PAR_MIN && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		int c0 = ch * COLCH, cn = n - c0 < COLCH ? n - c0 : COLCH;
		double acc[COLCH] = {0};
		for (int t = 0; t < T; t++) {
			const float *row = x + (size_t)t * n + c0;
#pragma omp simd
			for (int c = 0; c < cn; c++)
				acc[c] += row[c];
		}
		for (int c = 0; c < cn; c++)
			db[c0 + c] += (float)acc[c];
	}
}

/* ---- linear ---- */

/* OpenBLAS's thread count is process-wide: set it to this backend's before top-level sgemm calls
 * (only when it changes, so one backend pays nothing). */
static int blas_threads_now;

static void blas_threads(mgt_backend *be)
{
	int nt = cpu_threads(be);
	if (__atomic_load_n(&blas_threads_now, __ATOMIC_RELAXED) != nt) {
		openblas_set_num_threads(nt);
		__atomic_store_n(&blas_threads_now, nt, __ATOMIC_RELAXED);
	}
}

/* The k-th rounding buffer grown to n floats; NULL after recording the failure (ops cannot fail).
 * Buffers: 0 and 1 the converted GEMM operands (operand_block: products of two rounded values are
 * exact in fp32, so sgemm on the copies is the mixed-precision GEMM up to summation order) and
 * widened 16-bit inputs (widen), 2 the row buffers of 16-bit outputs, 3 the backward's x. */
static float *round_buf(mgt_backend *be, int k, size_t n)
{
	cpu_impl *im = be->impl;
	if (im->round_cap[k] < n) {
		float *p = realloc(im->round_buf[k], n * sizeof *p);
		if (!p) {
			mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes to round GEMM operands", n * 4);
			return NULL;
		}
		im->round_buf[k] = p;
		im->round_cap[k] = n;
	}
	return im->round_buf[k];
}

/* Row buffers for ops that write 16-bit outputs: `per` floats for each thread, in rounding buffer
 * 2; NULL (failure recorded) when it cannot grow.  Call outside parallel regions. */
static float *row_bufs(mgt_backend *be, size_t per)
{
	return round_buf(be, 2, per * (size_t)cpu_threads(be));
}

/* Store row v [n] fp32 at element off of y, of type yt: copied (fp32) or rounded to nearest even
 * (bf16, fp16: mgt_f32_to_bf16 / mgt_f32_to_f16, the GPU's __float2bfloat16_rn / __float2half_rn). */
static void store_row(void *y, mgt_elem_type yt, size_t off, const float *v, int n)
{
	if (yt == MGT_DT_F32) {
		memcpy((float *)y + off, v, (size_t)n * sizeof *v);
		return;
	}
	uint16_t *h = (uint16_t *)y + off;
	if (yt == MGT_DT_BF16)
		for (int c = 0; c < n; c++)
			h[c] = mgt_f32_to_bf16(v[c]);
	else
		for (int c = 0; c < n; c++)
			h[c] = mgt_f32_to_f16(v[c]);
}

/* r[0..n) = the 16-bit elements h[0..n) of type t as fp32 (exact). */
static void load_row(float *r, const uint16_t *h, mgt_elem_type t, size_t n)
{
	if (t == MGT_DT_BF16)
		for (size_t c = 0; c < n; c++)
			r[c] = mgt_bf16_to_f32(h[c]);
	else
		for (size_t c = 0; c < n; c++)
			r[c] = mgt_f16_to_f32(h[c]);
}

/* The widen op: dst [n] = the 16-bit src of type st as fp32 (exact). */
void mgt_cpu_widen(mgt_backend *be, float *dst, const void *src, mgt_elem_type st, size_t n)
{
	const uint16_t *h = src;
	const size_t ch = 16384; /* elements a task */
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i += ch)
		load_row(dst + i, h + i, st, n - i < ch ? n - i : ch);
}

/* x [n] of type t as fp32: x itself when fp32, else widened exactly into the k-th rounding buffer
 * (NULL, the failure recorded, when it cannot grow). */
static const float *widen(mgt_backend *be, int k, const void *x, mgt_elem_type t, size_t n)
{
	if (t == MGT_DT_F32)
		return x;
	float *r = round_buf(be, k, n);
	if (r)
		mgt_cpu_widen(be, r, x, t, n);
	return r;
}

/* Where an op computes its fp32 result [n] bound for dst of type t: dst itself when fp32, else
 * rounding buffer 4 (NULL, the failure recorded, when it cannot grow); narrow() then stores it. */
static float *out32(mgt_backend *be, void *dst, mgt_elem_type t, size_t n)
{
	return t == MGT_DT_F32 ? dst : round_buf(be, 4, n);
}

/* dst [n] of type t = r [n] (rounded to nearest even when 16-bit; nothing to do when dst is r). */
static void narrow(mgt_backend *be, void *dst, mgt_elem_type t, const float *r, size_t n)
{
	if (t != MGT_DT_F32)
		mgt_cpu_cast(be, dst, t, r, n);
	else if (dst != r)
		memcpy(dst, r, n * sizeof *r);
}

/* narrow() dst [T, w] from r, then (db not NULL) db[w] += the column sums of the values stored
 * (a 16-bit dst widened back into rounding buffer 4): the bias gradient of a 16-bit gradient. */
static void narrow_colsum(mgt_backend *be, void *dst, mgt_elem_type t, const float *r, float *db, int T, int w)
{
	const size_t n = (size_t)T * (size_t)w;
	narrow(be, dst, t, r, n);
	const float *stored = db ? widen(be, 4, dst, t, n) : NULL;
	if (stored)
		colsum_acc(be, db, stored, T, w);
}

/* Output features a GEMM call covers at most (the vocabulary's output layer is split) */
enum { GEMM_COLS = 8192 };

/* y[T, out] (fp32, leading dimension out) = x . w^T (+ b) on fp32 operands; gemv for one token
 * when gemv (a whole call of one token, so that blocks of one row do not change the sums). */
static void gemm_fwd_ld(float *y, int ldy, const float *x, const float *w, const float *b, int T, int in, int out,
			bool gemv)
{
	if (b)
		for (int t = 0; t < T; t++)
			memcpy(y + (size_t)t * ldy, b, (size_t)out * sizeof *y);
	if (in <= 0) {
		if (!b)
			for (int t = 0; t < T; t++)
				memset(y + (size_t)t * ldy, 0, (size_t)out * sizeof *y);
		return;
	}
	if (gemv) /* one token (decoding): OpenBLAS's sgemm would pack all of w first, gemv streams it */
		cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, b ? 1.0f : 0.0f, y, 1);
	else
		for (int j = 0; j < out; j += GEMM_COLS) /* OpenBLAS packs all of a wide w^T panel */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out - j < GEMM_COLS ? out - j : GEMM_COLS,
				    in, 1.0f, x, in, w + (size_t)j * in, in, b ? 1.0f : 0.0f, y + j, ldy);
}

static void gemm_fwd(float *y, const float *x, const float *w, const float *b, int T, int in, int out, bool gemv)
{
	gemm_fwd_ld(y, out, x, w, b, T, in, out, gemv);
}

/* Rows of a 16-bit output block of `out` columns computed at once in fp32 (about 1M floats). */
static int out_block_rows(int T, int out)
{
	size_t r = ((size_t)1 << 20) / (size_t)(out > 0 ? out : 1);
	return r < 1 ? 1 : r > (size_t)T ? T : (int)r;
}

/* Columns of a converted GEMM block (the output features of one block of w): about 1M floats of w
 * a block, a multiple of 64 between 64 and GEMM_COLS.  Converted operands are held one block at a
 * time, so the scratch of the 16-bit emulation stays small beside the model (the output layer's
 * [T, V] logits and [V, h] weight are never copied whole). */
static int conv_cols(int in)
{
	size_t c = ((size_t)1 << 20) / (size_t)(in > 0 ? in : 1) / 64 * 64;
	return c < 64 ? 64 : c > GEMM_COLS ? GEMM_COLS : (int)c;
}

/* Rows [0, rows) and columns [c0, c0 + cols) of the row-major operand src (type t, leading
 * dimension ld) as the GEMM sees them, in rounding buffer k as [rows, cols] fp32: a 16-bit type
 * widened exactly, fp32 rounded to the backend's precision (copied under fp32).  NULL (the failure
 * recorded) when the buffer cannot grow. */
static const float *operand_block(mgt_backend *be, int k, const void *src, mgt_elem_type t, size_t ld, size_t c0,
				  size_t rows, size_t cols)
{
	float *r = round_buf(be, k, rows * cols);
	if (!r)
		return NULL;
	const mgt_precision pr = be->precision;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (rows * cols > PAR_MIN)
	for (size_t i = 0; i < rows; i++) {
		float *d = r + i * cols;
		if (t != MGT_DT_F32) {
			load_row(d, (const uint16_t *)src + i * ld + c0, t, cols);
			continue;
		}
		const float *x = (const float *)src + i * ld + c0;
		if (pr == MGT_PREC_FP32)
			memcpy(d, x, cols * sizeof *d);
		else
			for (size_t c = 0; c < cols; c++)
				d[c] = pr == MGT_PREC_BF16 ? mgt_round_bf16(x[c]) : mgt_round_fp16(x[c]);
	}
	return r;
}

/* Whether a linear op's operands are used as they are (fp32 operands of an fp32 backend): then
 * one sgemm takes them in place. */
static bool gemm_direct(const mgt_backend *be, mgt_elem_type a, mgt_elem_type b)
{
	return be->precision == MGT_PREC_FP32 && a == MGT_DT_F32 && b == MGT_DT_F32;
}

/* y[:, j:j+nc] of a converted forward, one block of w's rows: fp32 y written in place (leading
 * dimension out), a 16-bit y through row blocks in buffer 2, each stored rounded. */
static void linear_fwd_block(mgt_backend *be, void *y, mgt_elem_type yt, const float *x, const float *wj,
			     const float *bj, int T, int in, int out, int j, int nc)
{
	if (yt == MGT_DT_F32) {
		gemm_fwd_ld((float *)y + j, out, x, wj, bj, T, in, nc, T == 1);
		return;
	}
	const int R = out_block_rows(T, nc);
	float *blk = round_buf(be, 2, (size_t)R * nc);
	if (!blk)
		return;
	for (int t0 = 0; t0 < T; t0 += R) {
		const int n = T - t0 < R ? T - t0 : R;
		gemm_fwd_ld(blk, nc, x ? x + (size_t)t0 * in : NULL, wj, bj, n, in, nc, T == 1);
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)n * nc > PAR_MIN)
		for (int t = 0; t < n; t++)
			store_row(y, yt, (size_t)(t0 + t) * out + j, blk + (size_t)t * nc, nc);
	}
}

void mgt_cpu_linear_fwd(mgt_backend *be, void *y, mgt_elem_type yt, const void *x16, mgt_elem_type xt,
			const void *w16, mgt_elem_type wt, const float *b, int T, int in, int out)
{
	if (T <= 0 || out <= 0)
		return;
	blas_threads(be);
	if (gemm_direct(be, xt, wt) && yt == MGT_DT_F32) {
		gemm_fwd(y, x16, w16, b, T, in, out, T == 1);
		return;
	}
	/* converted operands: x once (buffer 0), w a block of conv_cols rows at a time (buffer 1) */
	const float *x = in > 0 ? operand_block(be, 0, x16, xt, (size_t)in, 0, (size_t)T, (size_t)in) : NULL;
	if (in > 0 && !x)
		return;
	const size_t ws = mgt_elem_size(wt);
	for (int j = 0, cb = conv_cols(in); j < out; j += cb) {
		const int nc = out - j < cb ? out - j : cb;
		const float *wj = in > 0 ? operand_block(be, 1, (const char *)w16 + (size_t)j * in * ws, wt, (size_t)in, 0,
							 (size_t)nc, (size_t)in)
					 : NULL;
		if (in > 0 && !wj)
			return;
		linear_fwd_block(be, y, yt, x, wj, b ? b + j : NULL, T, in, out, j, nc);
	}
}

/* linear_bwd with an fp32 dx (mgt_cpu_linear_bwd rounds a 16-bit one from it). */
static void linear_bwd32(mgt_backend *be, float *dx, float *dw, float *db, const void *dy16, mgt_elem_type dyt,
			 const void *x, mgt_elem_type xt, const void *w, mgt_elem_type wt, int T, int in, int out)
{
	if (T <= 0 || in <= 0 || out <= 0) {
		if (dx && T > 0 && in > 0)
			memset(dx, 0, (size_t)T * in * sizeof *dx);
		const float *dy = db && T > 0 && out > 0 ? widen(be, 0, dy16, dyt, (size_t)T * out) : NULL;
		if (dy)
			colsum_acc(be, db, dy, T, out);
		return;
	}
	blas_threads(be);
	/* the bias gradient sums dy in fp32, as the GPU's does (only GEMM operands are rounded) */
	if (db && dyt == MGT_DT_F32)
		colsum_acc(be, db, dy16, T, out);
	if (gemm_direct(be, dyt, xt) && wt == MGT_DT_F32) {
		if (dx)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, in, out, 1.0f, dy16, out, w, in, 0.0f, dx, in);
		for (int j = 0; j < out; j += GEMM_COLS)
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out - j < GEMM_COLS ? out - j : GEMM_COLS, in,
				    T, 1.0f, (const float *)dy16 + j, out, x, in, 1.0f, dw + (size_t)j * in, in);
		return;
	}
	/* converted operands: x once (buffer 3); per block of conv_cols output features, dy's columns
	 * (buffer 0) and w's rows (buffer 1); dx sums the blocks' products in block order */
	const float *xr = operand_block(be, 3, x, xt, (size_t)in, 0, (size_t)T, (size_t)in);
	if (!xr)
		return;
	const size_t ws = mgt_elem_size(wt);
	for (int j = 0, cb = conv_cols(in > T ? in : T); j < out; j += cb) {
		const int nc = out - j < cb ? out - j : cb;
		const float *dj = operand_block(be, 0, dy16, dyt, (size_t)out, (size_t)j, (size_t)T, (size_t)nc);
		if (!dj)
			return;
		if (db && dyt != MGT_DT_F32) /* widened exactly: dy's values */
			colsum_acc(be, db + j, dj, T, nc);
		if (dx) {
			const float *wj = operand_block(be, 1, (const char *)w + (size_t)j * in * ws, wt, (size_t)in, 0,
							(size_t)nc, (size_t)in);
			if (!wj)
				return;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, in, nc, 1.0f, dj, nc, wj, in,
				    j ? 1.0f : 0.0f, dx, in);
		}
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, in, T, 1.0f, dj, nc, xr, in, 1.0f,
			    dw + (size_t)j * in, in);
	}
}

/* A 16-bit dx is computed in fp32 in rounding buffer 4 (its blocks' products summed there), then
 * rounded once. */
void mgt_cpu_linear_bwd(mgt_backend *be, void *dx, mgt_elem_type dxt, float *dw, float *db, const void *dy,
			mgt_elem_type dyt, const void *x, mgt_elem_type xt, const void *w, mgt_elem_type wt, int T, int in,
			int out)
{
	const size_t nx = T > 0 && in > 0 ? (size_t)T * (size_t)in : 0;
	float *dx32 = dx && nx ? out32(be, dx, dxt, nx) : dx;
	if (dx && nx && !dx32)
		return;
	linear_bwd32(be, dx32, dw, db, dy, dyt, x, xt, w, wt, T, in, out);
	if (dx && nx)
		narrow(be, dx, dxt, dx32, nx);
}

/* ---- embedding ---- */

void mgt_cpu_embedding_fwd(mgt_backend *be, float *y, const int32_t *ids, const float *table,
			      int64_t row0, int64_t rows, int T, int h, bool accumulate)
{
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * h > PAR_MIN)
	for (int t = 0; t < T; t++) {
		float *yt = y + (size_t)t * h;
		int64_t id = ids[t];
		if (id >= row0 && id < row0 + rows) {
			const float *src = table + (size_t)(id - row0) * h;
			if (accumulate) {
#pragma omp simd
				for (int c = 0; c < h; c++)
					yt[c] += src[c];
			} else {
				memcpy(yt, src, (size_t)h * sizeof *yt);
			}
		} else if (!accumulate) {
			memset(yt, 0, (size_t)h * sizeof *yt);
		}
	}
}

void mgt_cpu_embedding_bwd(mgt_backend *be, float *dtable, const void *dy16, mgt_elem_type dyt,
			      const int32_t *ids, int64_t row0, int64_t rows, int T, int h)
{
	const float *dy = T > 0 && h > 0 ? widen(be, 5, dy16, dyt, (size_t)T * (size_t)h) : NULL;
	if (!dy)
		return;
	int nch = (h + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)T * h > PAR_MIN && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		int c0 = ch * COLCH, cn = h - c0 < COLCH ? h - c0 : COLCH;
		for (int t = 0; t < T; t++) {
			int64_t id = ids[t];
			if (id < row0 || id >= row0 + rows)
				continue;
			float *dst = dtable + (size_t)(id - row0) * h + c0;
			const float *src = dy + (size_t)t * h + c0;
#pragma omp simd
			for (int c = 0; c < cn; c++)
				dst[c] += src[c];
		}
	}
}

/* ---- normalization ---- */

/* Row layout of the norms: row i of n starts at element ((i / per) * stride + first + i % per) * h
 * (per = stride = 1, first = 0: contiguous rows [n, h]; head_norm: heads inside qkv). */
typedef struct {
	int per, stride, first;
} rows_lay;

static const rows_lay ROWS_DENSE = { 1, 1, 0 };

CPU_INLINE size_t row_at(rows_lay L, int i, int h)
{
	return ((size_t)(i / L.per) * (size_t)L.stride + (size_t)L.first + (size_t)(i % L.per)) * (size_t)h;
}

/* y (of type yt; fp32 for the head norms) as norm_fwd writes it, row by row; a 16-bit row is
 * computed in fp32 in the thread's row buffer first and then rounded. */
static void norm_fwd_rows(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			  const float *x, const float *w, const float *b, int T, int h, float eps, rows_lay L)
{
	const bool ln = kind == MGT_NORM_LAYERNORM;
	float *rows = yt == MGT_DT_F32 || T <= 0 ? NULL : row_bufs(be, (size_t)h);
	if (yt != MGT_DT_F32 && T > 0 && !rows)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * h > PAR_MIN)
	for (int t = 0; t < T; t++) {
		const float *xt = x + row_at(L, t, h);
		float *yt32 = rows ? rows + (size_t)omp_get_thread_num() * (size_t)h : (float *)y + row_at(L, t, h);
		double mu = 0, ss = 0;
		if (ln) {
			double sum = 0;
#pragma omp simd reduction(+ : sum)
			for (int c = 0; c < h; c++)
				sum += xt[c];
			mu = sum / h;
		}
#pragma omp simd reduction(+ : ss)
		for (int c = 0; c < h; c++) {
			double dv = xt[c] - mu;
			ss += dv * dv;
		}
		float m = (float)mu, rs = (float)(1.0 / sqrt(ss / h + eps));
		mean[t] = m;
		rstd[t] = rs;
		if (b) {
#pragma omp simd
			for (int c = 0; c < h; c++)
				yt32[c] = (xt[c] - m) * rs * w[c] + b[c];
		} else {
#pragma omp simd
			for (int c = 0; c < h; c++)
				yt32[c] = (xt[c] - m) * rs * w[c];
		}
		if (rows)
			store_row(y, yt, row_at(L, t, h), yt32, h);
	}
}

/* A 16-bit x is widened into rounding buffer 0 first (the 16-bit y's rows use buffer 2). */
void mgt_cpu_norm_fwd(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			 const void *x, mgt_elem_type xt, const float *w, const float *b, int T, int h, float eps)
{
	const float *x32 = widen(be, 0, x, xt, (size_t)T * (size_t)(h > 0 ? h : 0));
	if (x32)
		norm_fwd_rows(be, kind, y, yt, mean, rstd, x32, w, b, T, h, eps, ROWS_DENSE);
}

/* dw, db first (so that dx may alias dy), then dx (+)= per row. */
static void norm_bwd_rows(mgt_backend *be, mgt_norm_kind kind, float *dx, float *dw, float *db,
			  const float *dy, const float *x, const float *w, const float *mean,
			  const float *rstd, int T, int h, rows_lay L, bool acc)
{
	const bool ln = kind == MGT_NORM_LAYERNORM;
	const int nt = cpu_threads(be);
	const bool par = (size_t)T * h > PAR_MIN;
	/* dw, db: column-split, rows summed in order (deterministic). */
	int nch = (h + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (par && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		int c0 = ch * COLCH, cn = h - c0 < COLCH ? h - c0 : COLCH;
		double aw[COLCH] = {0}, ab[COLCH] = {0};
		for (int t = 0; t < T; t++) {
			const float *xt = x + row_at(L, t, h) + c0, *gt = dy + row_at(L, t, h) + c0;
			const float m = mean[t], rs = rstd[t];
#pragma omp simd
			for (int c = 0; c < cn; c++) {
				aw[c] += gt[c] * ((xt[c] - m) * rs);
				ab[c] += gt[c];
			}
		}
		for (int c = 0; c < cn; c++)
			dw[c0 + c] += (float)aw[c];
		if (db)
			for (int c = 0; c < cn; c++)
				db[c0 + c] += (float)ab[c];
	}
	/* dx: rows in parallel.  g = dy * w, xhat = (x - mean) * rstd,
	 * dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat))   (RMSNorm: no mean(g) term).  Each
	 * element of dx is written after its row's sums are taken, from the same element of dy. */
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
	for (int t = 0; t < T; t++) {
		const float *xt = x + row_at(L, t, h), *gt = dy + row_at(L, t, h);
		float *dxt = dx + row_at(L, t, h);
		const float m = mean[t], rs = rstd[t];
		double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
		for (int c = 0; c < h; c++) {
			float g = gt[c] * w[c];
			sg += g;
			sgx += g * ((xt[c] - m) * rs);
		}
		const float a = ln ? (float)(sg / h) : 0.0f, bx = (float)(sgx / h);
		if (acc) {
#pragma omp simd
			for (int c = 0; c < h; c++)
				dxt[c] += rs * (gt[c] * w[c] - a - (xt[c] - m) * rs * bx);
		} else {
			for (int c = 0; c < h; c++)
				dxt[c] = rs * (gt[c] * w[c] - a - (xt[c] - m) * rs * bx);
		}
	}
}

/* 16-bit inputs widened into rounding buffers 0 (x), 5 (dy) and 4 (dx, accumulated in fp32 there
 * and rounded back). */
void mgt_cpu_norm_bwd(mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, const void *dy,
			 mgt_elem_type dyt, const void *x, mgt_elem_type xt, const float *w, const float *mean,
			 const float *rstd, int T, int h)
{
	if (T <= 0 || h <= 0)
		return;
	const size_t n = (size_t)T * (size_t)h;
	const float *x32 = widen(be, 0, x, xt, n), *dy32 = widen(be, 5, dy, dyt, n);
	float *dx32 = (float *)widen(be, 4, dx, xt, n);
	if (!x32 || !dy32 || !dx32)
		return;
	norm_bwd_rows(be, kind, dx32, dw, db, dy32, x32, w, mean, rstd, T, h, ROWS_DENSE, true);
	narrow(be, dx, xt, dx32, n);
}

/* Query heads: rows per group r, group stride r + 2, first 0; key heads: 1 row at offset r. */
static rows_lay head_rows(int ng, int T, int r, bool key, int *n)
{
	*n = T * ng * (key ? 1 : r);
	return key ? (rows_lay){ 1, r + 2, r } : (rows_lay){ r, r + 2, 0 };
}

void mgt_cpu_head_norm_fwd(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			      const float *x, const float *w, const float *b, int T, int ng, int r, int d,
			      bool key, float eps)
{
	int n;
	rows_lay L = head_rows(ng, T, r, key, &n);
	norm_fwd_rows(be, kind, y, yt, mean, rstd, x, w, b, n, d, eps, L);
}

/* A 16-bit dy is widened whole into rounding buffer 5, the backward runs in place there in fp32,
 * and only the selected rows are rounded back into dx (the others stay as they are). */
void mgt_cpu_head_norm_bwd(mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, const void *dy,
			   mgt_elem_type gt, const float *x, const float *w, const float *mean, const float *rstd, int T,
			   int ng, int r, int d, bool key)
{
	int n;
	rows_lay L = head_rows(ng, T, r, key, &n);
	if (gt == MGT_DT_F32) {
		norm_bwd_rows(be, kind, dx, dw, db, dy, x, w, mean, rstd, n, d, L, false);
		return;
	}
	float *g = (float *)widen(be, 5, dy, gt, (size_t)T * ng * (r + 2) * d);
	if (!g)
		return;
	norm_bwd_rows(be, kind, g, dw, db, g, x, w, mean, rstd, n, d, L, false);
	for (int i = 0; i < n; i++)
		store_row(dx, gt, row_at(L, i, d), g + row_at(L, i, d), d);
}

/* ---- rotary position embedding ---- */

/* The rotation of one head's pairs (x1[k], x2[k]), k < kn, by (cs, sn). */
static void rope_pairs(float *x1, float *x2, const float *cs, const float *sn, int kn)
{
#pragma omp simd
	for (int k = 0; k < kn; k++) {
		float a = x1[k], bb = x2[k];
		x1[k] = a * cs[k] - bb * sn[k];
		x2[k] = bb * cs[k] + a * sn[k];
	}
}

void mgt_cpu_rope(mgt_backend *be, void *qkv, mgt_elem_type qt, const int32_t *pos, const float *inv_freq, int T,
		     int ng, int r, int d, int rot_dim, bool inverse)
{
	const int half = rot_dim / 2;
	if (half <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) \
	if ((size_t)T * ng * (r + 1) * rot_dim > PAR_MIN)
	for (int t = 0; t < T; t++) {
		float cs[256], sn[256], x1[256], x2[256];
		for (int k0 = 0; k0 < half; k0 += 256) {
			int kn = half - k0 < 256 ? half - k0 : 256;
			for (int k = 0; k < kn; k++) {
				float th = (float)pos[t] * inv_freq[k0 + k];
				cs[k] = cosf(th);
				sn[k] = inverse ? -sinf(th) : sinf(th);
			}
			for (int g = 0; g < ng; g++)
				for (int m = 0; m <= r; m++) { /* r query heads and the key head */
					const size_t hd = (((size_t)t * ng + g) * (r + 2) + m) * d;
					if (qt == MGT_DT_F32) {
						float *x = (float *)qkv + hd;
						rope_pairs(x + k0, x + half + k0, cs, sn, kn);
						continue;
					}
					const uint16_t *x = (const uint16_t *)qkv + hd;
					load_row(x1, x + k0, qt, (size_t)kn);
					load_row(x2, x + half + k0, qt, (size_t)kn);
					rope_pairs(x1, x2, cs, sn, kn);
					store_row(qkv, qt, hd + k0, x1, kn);
					store_row(qkv, qt, hd + half + k0, x2, kn);
				}
		}
	}
}

/* ---- attention: cpu_attn.c on fp32 values (16-bit qkv and out widened, out rounded) ---- */

/* attn_fwd with an optional position bias (attn_bias_fwd). */
static void attn_fwd_b(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b, int ng,
		       int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
		       const float *bias)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_attn_fwd32(be, out, lse, qkv, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias);
		return;
	}
	const size_t T = (size_t)s * b, no = T * ng * r * d;
	const float *q = widen(be, 0, qkv, t, T * ng * (r + 2) * d);
	float *o = round_buf(be, 1, no);
	if (!q || !o)
		return;
	mgt_cpu_attn_fwd32(be, o, lse, q, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias);
	mgt_cpu_cast(be, out, t, o, no);
}

void mgt_cpu_attn_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b,
			 int ng, int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	attn_fwd_b(be, out, lse, qkv, t, s, b, ng, r, d, p, key, head0, heads_total, key_mask, NULL);
}

void mgt_cpu_attn_bias_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b,
			   int ng, int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
			   const float *bias)
{
	attn_fwd_b(be, out, lse, qkv, t, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias);
}

/* attn_bwd with an optional position bias (attn_bias_bwd).  16-bit gradients: dout widened into
 * rounding buffer 5, dqkv computed in buffer 4 and rounded. */
static void attn_bwd_b(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
		       const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d, float p,
		       uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const float *bias, float *dbias)
{
	const size_t T = (size_t)s * b, nq = T * ng * (r + 2) * d, no = T * ng * r * d;
	if (!nq)
		return;
	const float *q = widen(be, 0, qkv, t, nq), *o = widen(be, 1, out, t, no), *g = widen(be, 5, dout, gt, no);
	float *dq = out32(be, dqkv, gt, nq);
	if (!q || !o || !g || !dq)
		return;
	mgt_cpu_attn_bwd32(be, dq, g, q, o, lse, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias, dbias);
	narrow(be, dqkv, gt, dq, nq);
}

void mgt_cpu_attn_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
			 const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d, float p,
			 uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	attn_bwd_b(be, dqkv, dout, gt, qkv, out, t, lse, s, b, ng, r, d, p, key, head0, heads_total, key_mask, NULL, NULL);
}

void mgt_cpu_attn_bias_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
			   const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d,
			   float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const float *bias,
			   float *dbias)
{
	attn_bwd_b(be, dqkv, dout, gt, qkv, out, t, lse, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias,
		   dbias);
}

/* Cross-attention: q widened into rounding buffer 0, kv into 2, out computed in 1 and rounded. */
void mgt_cpu_xattn_fwd(mgt_backend *be, void *out, float *lse, const void *q, const void *kv, mgt_elem_type t,
		       int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
		       const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d;
	const float *q32 = widen(be, 0, q, t, no), *kv32 = widen(be, 2, kv, t, nk);
	float *o = t == MGT_DT_F32 ? out : round_buf(be, 1, no);
	if (!q32 || !kv32 || !o)
		return;
	mgt_cpu_xattn_fwd32(be, o, lse, q32, kv32, sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	narrow(be, out, t, o, no);
}

/* 16-bit inputs widened (q 0, out 1, kv 2, dout 5), 16-bit gradients computed in 4 (dq) and 3 (dkv). */
void mgt_cpu_xattn_bwd(mgt_backend *be, void *dq, void *dkv, const void *dout, mgt_elem_type gt, const void *q,
		       const void *kv, const void *out, mgt_elem_type t, const float *lse, int sq, int sk, int b, int ng,
		       int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d;
	const float *q32 = widen(be, 0, q, t, no), *o32 = widen(be, 1, out, t, no), *kv32 = widen(be, 2, kv, t, nk);
	const float *g = widen(be, 5, dout, gt, no);
	float *dq32 = out32(be, dq, gt, no), *dkv32 = gt == MGT_DT_F32 ? dkv : round_buf(be, 3, nk);
	if (!q32 || !o32 || !kv32 || !g || !dq32 || !dkv32)
		return;
	mgt_cpu_xattn_bwd32(be, dq32, dkv32, g, q32, kv32, o32, lse, sq, sk, b, ng, r, d, p, key, head0, heads_total,
			    key_mask);
	narrow(be, dq, gt, dq32, no);
	narrow(be, dkv, gt, dkv32, nk);
}

/* ---- bias + activation ---- */

CPU_INLINE float gelu_f(float z) { return 0.5f * z * (1.0f + cpu_erff(z * 0.70710678118654752f)); }

CPU_INLINE float gelu_grad(float z)
{
	return 0.5f * (1.0f + cpu_erff(z * 0.70710678118654752f)) +
	       z * 0.39894228040143268f * cpu_expf(-0.5f * z * z);
}

CPU_INLINE float sigmoid_f(float a) { return 1.0f / (1.0f + cpu_expf(-a)); }

/* tanh-approximation GELU (Megatron openai_gelu / bias_gelu, megatron/core/fusions/fused_bias_gelu.py):
 * t = tanh(sqrt(2/pi) z (1 + 0.044715 z^2)), y = 0.5 z (1 + t),
 * dy/dz = 0.5 (1 + t) + 0.5 z (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2). */
CPU_INLINE float gelu_tanh_f(float z)
{
	float t = cpu_tanhf(0.79788456080286536f * z * (1.0f + 0.044715f * z * z));
	return 0.5f * z * (1.0f + t);
}

CPU_INLINE float gelu_tanh_grad(float z)
{
	float t = cpu_tanhf(0.79788456080286536f * z * (1.0f + 0.044715f * z * z));
	return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * (0.79788456080286536f * (1.0f + 0.134145f * z * z));
}

/* act: 0 GELU (erf), 1 SwiGLU, 2 GELU (tanh) -- mgt_act_kind's values. */
CPU_INLINE void act_fwd_row_(float *yt, const float *xt, const float *b, int f, int act, bool hb)
{
	if (act == MGT_ACT_GELU) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			yt[c] = gelu_f(hb ? xt[c] + b[c] : xt[c]);
	} else if (act == MGT_ACT_GELU_TANH) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			yt[c] = gelu_tanh_f(hb ? xt[c] + b[c] : xt[c]);
	} else {
#pragma omp simd
		for (int c = 0; c < f; c++) {
			float a = hb ? xt[c] + b[c] : xt[c], u = hb ? xt[f + c] + b[f + c] : xt[f + c];
			yt[c] = a * sigmoid_f(a) * u;
		}
	}
}

/* Specialized by always_inline calls with constant flags, so each variant's loop has no branches
 * (GCC does not unswitch loops at -O2) and vectorizes. */
CPU_CLONES static void act_fwd_row(float *yt, const float *xt, const float *b, int f, int act)
{
	if (act == MGT_ACT_SWIGLU)
		b ? act_fwd_row_(yt, xt, b, f, MGT_ACT_SWIGLU, true) : act_fwd_row_(yt, xt, b, f, MGT_ACT_SWIGLU, false);
	else if (act == MGT_ACT_GELU_TANH)
		b ? act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU_TANH, true) : act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU_TANH, false);
	else
		b ? act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU, true) : act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU, false);
}

/* Per-thread row buffers of an activation op: xw floats for a 16-bit x row (widened), f for a
 * 16-bit y row; NULL when neither is 16-bit, *fail when they cannot be had. */
static float *act_rows(mgt_backend *be, mgt_elem_type xt, mgt_elem_type yt, int T, int xw, int f, size_t *per,
		       bool *fail)
{
	*per = (xt != MGT_DT_F32 ? (size_t)xw : 0) + (yt != MGT_DT_F32 ? (size_t)f : 0);
	float *rows = *per && T > 0 ? row_bufs(be, *per) : NULL;
	*fail = *per && T > 0 && !rows;
	return rows;
}

/* Row t of x (xw elements of type xt) as fp32: x's own row, or widened into r. */
static const float *act_x_row(const void *x, mgt_elem_type xt, float *r, int t, int xw)
{
	if (xt == MGT_DT_F32)
		return (const float *)x + (size_t)t * xw;
	load_row(r, (const uint16_t *)x + (size_t)t * xw, xt, (size_t)xw);
	return r;
}

void mgt_cpu_bias_act_fwd(mgt_backend *be, mgt_act_kind act, void *y, mgt_elem_type yt, const void *x,
			     mgt_elem_type xt, const float *b, int T, int f)
{
	const bool swi = act == MGT_ACT_SWIGLU;
	const int xw = swi ? 2 * f : f;
	size_t per;
	bool fail;
	float *rows = act_rows(be, xt, yt, T, xw, f, &per, &fail);
	if (fail)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * xw > PAR_MIN / 4)
	for (int t = 0; t < T; t++) {
		float *r = rows ? rows + (size_t)omp_get_thread_num() * per : NULL;
		const float *x32 = act_x_row(x, xt, r, t, xw);
		float *y32 = yt != MGT_DT_F32 ? r + (xt != MGT_DT_F32 ? xw : 0) : (float *)y + (size_t)t * f;
		act_fwd_row(y32, x32, b, f, (int)act);
		if (yt != MGT_DT_F32)
			store_row(y, yt, (size_t)t * f, y32, f);
	}
}

CPU_INLINE void act_bwd_row_(float *dxt, const float *gt, const float *xt, const float *b, int f,
			    int act, bool hb)
{
	if (act == MGT_ACT_GELU) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			dxt[c] = gt[c] * gelu_grad(hb ? xt[c] + b[c] : xt[c]);
	} else if (act == MGT_ACT_GELU_TANH) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			dxt[c] = gt[c] * gelu_tanh_grad(hb ? xt[c] + b[c] : xt[c]);
	} else {
#pragma omp simd
		for (int c = 0; c < f; c++) {
			float a = hb ? xt[c] + b[c] : xt[c], u = hb ? xt[f + c] + b[f + c] : xt[f + c];
			float sg = sigmoid_f(a), silu = a * sg;
			dxt[c] = gt[c] * u * (sg * (1.0f + a * (1.0f - sg)));
			dxt[f + c] = gt[c] * silu;
		}
	}
}

CPU_CLONES static void act_bwd_row(float *dxt, const float *gt, const float *xt, const float *b,
				   int f, int act)
{
	if (act == MGT_ACT_SWIGLU)
		b ? act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_SWIGLU, true) : act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_SWIGLU, false);
	else if (act == MGT_ACT_GELU_TANH)
		b ? act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_GELU_TANH, true) : act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_GELU_TANH, false);
	else
		b ? act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_GELU, true) : act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_GELU, false);
}

/* 16-bit gradients: dy widened into rounding buffer 5, dx computed in buffer 4 and rounded; db sums
 * the rounded values (widened back into buffer 4). */
void mgt_cpu_bias_act_bwd(mgt_backend *be, mgt_act_kind act, void *dx16, float *db, const void *dy16,
			     mgt_elem_type gt, const void *x, mgt_elem_type xt, const float *b, int T, int f)
{
	const bool swi = act == MGT_ACT_SWIGLU;
	const int xw = swi ? 2 * f : f;
	if (T <= 0 || f <= 0)
		return;
	size_t per, n = (size_t)T * (size_t)xw;
	bool fail;
	float *rows = act_rows(be, xt, MGT_DT_F32, T, xw, f, &per, &fail);
	const float *dy = widen(be, 5, dy16, gt, (size_t)T * (size_t)f);
	float *dx = out32(be, dx16, gt, n);
	if (fail || !dy || !dx)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * xw > PAR_MIN / 4)
	for (int t = 0; t < T; t++) {
		float *r = rows ? rows + (size_t)omp_get_thread_num() * per : NULL;
		act_bwd_row(dx + (size_t)t * xw, dy + (size_t)t * f, act_x_row(x, xt, r, t, xw), b, f, (int)act);
	}
	narrow_colsum(be, dx16, gt, dx, db, T, xw);
}

/* ---- bias-dropout-add ---- */

CPU_INLINE void bda_row_(float *ot, const float *rt, const float *yt, const float *b, int h,
			 uint64_t key, uint64_t et, float p, float ks, bool hr, bool hb, bool hp)
{
	if (!hp) {
#pragma omp simd
		for (int c = 0; c < h; c++) {
			float v = hb ? yt[c] + b[c] : yt[c];
			ot[c] = hr ? rt[c] + v : v;
		}
		return;
	}
	uint32_t w[CPU_PH];
	for (int c0 = 0; c0 < h; c0 += CPU_PH) {
		const int n = h - c0 < CPU_PH ? h - c0 : CPU_PH;
		mgt_cpu_philox_row(w, key, et + (uint64_t)c0, n);
#pragma omp simd
		for (int c = 0; c < n; c++) {
			const int e = c0 + c;
			float v = (hb ? yt[e] + b[e] : yt[e]) * (cpu_keep_w(w[c], p) * ks);
			ot[e] = hr ? rt[e] + v : v;
		}
	}
}

CPU_CLONES static void bda_row(float *ot, const float *rt, const float *yt, const float *b, int h,
			       uint64_t key, uint64_t et, float p, float ks)
{
	const bool hp = p > 0;
	if (rt) {
		if (b)
			hp ? bda_row_(ot, rt, yt, b, h, key, et, p, ks, true, true, true)
			   : bda_row_(ot, rt, yt, b, h, key, et, p, ks, true, true, false);
		else
			hp ? bda_row_(ot, rt, yt, b, h, key, et, p, ks, true, false, true)
			   : bda_row_(ot, rt, yt, b, h, key, et, p, ks, true, false, false);
	} else {
		if (b)
			hp ? bda_row_(ot, rt, yt, b, h, key, et, p, ks, false, true, true)
			   : bda_row_(ot, rt, yt, b, h, key, et, p, ks, false, true, false);
		else
			hp ? bda_row_(ot, rt, yt, b, h, key, et, p, ks, false, false, true)
			   : bda_row_(ot, rt, yt, b, h, key, et, p, ks, false, false, false);
	}
}

/* 16-bit out and resid: each row through the thread's two row buffers (resid widened, the fp32
 * sum rounded by store_row). */
void mgt_cpu_bda_fwd(mgt_backend *be, void *out, const void *resid, mgt_elem_type rt, const void *y16,
			mgt_elem_type yt, const float *b, int T, int h, float p, uint64_t key, uint64_t e0)
{
	if (T <= 0 || h <= 0)
		return;
	const float ks = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
	const float *y = widen(be, 5, y16, yt, (size_t)T * (size_t)h); /* a 16-bit y widened first */
	if (!y)
		return;
	float *rows = rt == MGT_DT_F32 || T <= 0 ? NULL : row_bufs(be, 2 * (size_t)h);
	if (rt != MGT_DT_F32 && T > 0 && !rows)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) \
	if ((size_t)T * h > (p > 0 ? PAR_MIN / 16 : PAR_MIN))
	for (int t = 0; t < T; t++) {
		const size_t o = (size_t)t * h;
		if (!rows) {
			bda_row((float *)out + o, resid ? (const float *)resid + o : NULL, y + o, b, h, key,
				e0 + (uint64_t)t * h, p, ks);
			continue;
		}
		float *r32 = rows + (size_t)omp_get_thread_num() * 2 * (size_t)h, *o32 = r32 + h;
		if (resid)
			load_row(r32, (const uint16_t *)resid + o, rt, (size_t)h);
		bda_row(o32, resid ? r32 : NULL, y + o, b, h, key, e0 + (uint64_t)t * h, p, ks);
		store_row(out, rt, o, o32, h);
	}
}

CPU_CLONES static void drop_mul_row(float *dt, const float *gt, int h, uint64_t key, uint64_t et,
				    float p, float ks)
{
	uint32_t w[CPU_PH];
	for (int c0 = 0; c0 < h; c0 += CPU_PH) {
		const int n = h - c0 < CPU_PH ? h - c0 : CPU_PH;
		mgt_cpu_philox_row(w, key, et + (uint64_t)c0, n);
#pragma omp simd
		for (int c = 0; c < n; c++)
			dt[c0 + c] = gt[c0 + c] * (cpu_keep_w(w[c], p) * ks);
	}
}

/* 16-bit dout widened into rounding buffer 5, a 16-bit dy computed in buffer 4 and rounded; db
 * sums the rounded values (widened back into buffer 4). */
void mgt_cpu_bda_bwd(mgt_backend *be, void *dy16, mgt_elem_type dyt, float *db, const void *dout16,
			mgt_elem_type dot, int T, int h, float p, uint64_t key, uint64_t e0)
{
	if (T <= 0 || h <= 0)
		return;
	const size_t n = (size_t)T * (size_t)h;
	const float *dout = widen(be, 5, dout16, dot, n);
	float *dy = out32(be, dy16, dyt, n);
	if (!dout || !dy)
		return;
	if (p > 0) {
		const float ks = 1.0f / (1.0f - p);
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * h > PAR_MIN / 16)
		for (int t = 0; t < T; t++)
			drop_mul_row(dy + (size_t)t * h, dout + (size_t)t * h, h, key, e0 + (uint64_t)t * h, p,
				     ks);
	} else if (dy != dout) {
		memcpy(dy, dout, (size_t)T * h * sizeof *dy);
	}
	narrow_colsum(be, dy16, dyt, dy, db, T, h);
}

/* ---- vocab-parallel cross-entropy ---- */

CPU_CLONES static float row_max(const float *x, int n)
{
	float m = -INFINITY;
#pragma omp simd reduction(max : m)
	for (int c = 0; c < n; c++)
		m = x[c] > m ? x[c] : m;
	return m;
}

CPU_CLONES static double row_sumexp(const float *x, int n, float m)
{
	double se = 0;
#pragma omp simd reduction(+ : se)
	for (int c = 0; c < n; c++)
		se += cpu_expf(x[c] - m);
	return se;
}

/* d[c] = exp(x[c] - m) * inv * ms; d may alias x. */
CPU_CLONES static void row_softmax_scaled(float *d, const float *x, int n, float m, float inv, float ms)
{
#pragma omp simd
	for (int c = 0; c < n; c++)
		d[c] = cpu_expf(x[c] - m) * inv * ms;
}

/* Row t of a [T, V] buffer of type lt as fp32: the row itself (fp32), or widened exactly into the
 * thread's row buffer (rows, V floats a thread). */
static const float *xent_row(const void *logits, mgt_elem_type lt, float *rows, int t, int V)
{
	if (lt == MGT_DT_F32)
		return (const float *)logits + (size_t)t * V;
	float *r = rows + (size_t)omp_get_thread_num() * (size_t)V;
	load_row(r, (const uint16_t *)logits + (size_t)t * V, lt, (size_t)V);
	return r;
}

/* The row buffers a [T, V] op on 16-bit logits needs (NULL for fp32 ones); *fail when they could
 * not be had (the failure recorded). */
static float *xent_rows(mgt_backend *be, mgt_elem_type lt, int T, int V, bool *fail)
{
	float *rows = lt == MGT_DT_F32 || T <= 0 || V <= 0 ? NULL : row_bufs(be, (size_t)V);
	*fail = lt != MGT_DT_F32 && T > 0 && V > 0 && !rows;
	return rows;
}

void mgt_cpu_xent_max(mgt_backend *be, float *mx, const void *logits, mgt_elem_type lt, int T, int V)
{
	bool fail;
	float *rows = xent_rows(be, lt, T, V, &fail);
	if (fail)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * V > PAR_MIN)
	for (int t = 0; t < T; t++)
		mx[t] = row_max(xent_row(logits, lt, rows, t, V), V);
}

void mgt_cpu_xent_stats(mgt_backend *be, float *sumexp, float *tgt, const void *logits, mgt_elem_type lty,
			   const int32_t *labels, const float *mx, int64_t v0, int T, int V)
{
	bool fail;
	float *rows = xent_rows(be, lty, T, V, &fail);
	if (fail)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * V > PAR_MIN / 4)
	for (int t = 0; t < T; t++) {
		const float *lt = xent_row(logits, lty, rows, t, V);
		sumexp[t] = (float)row_sumexp(lt, V, mx[t]);
		int64_t lab = labels[t];
		tgt[t] = lab >= v0 && lab < v0 + V ? lt[lab - v0] : 0.0f;
	}
}

double mgt_cpu_xent_loss(mgt_backend *be, float *loss, const float *mx, const float *sumexp,
			    const float *tgt, const float *mask, int T)
{
	double sum = 0;
	for (int t = 0; t < T; t++) {
		loss[t] = (float)(log((double)sumexp[t]) + (double)mx[t] - (double)tgt[t]);
		sum += (double)loss[t] * mask[t];
	}
	return sum;
}

void mgt_cpu_xent_bwd(mgt_backend *be, void *dlogits, const void *logits, mgt_elem_type lty,
			 const int32_t *labels, const float *mx, const float *sumexp, const float *mask, float scale,
			 int64_t v0, int T, int V)
{
	bool fail;
	float *rows = xent_rows(be, lty, T, V, &fail);
	if (fail)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * V > PAR_MIN / 4)
	for (int t = 0; t < T; t++) {
		const float *lt = xent_row(logits, lty, rows, t, V);
		/* a 16-bit row is computed in place in its fp32 copy, then stored rounded */
		float *dt = rows ? (float *)lt : (float *)dlogits + (size_t)t * V;
		const float ms = mask[t] * scale;
		if (ms == 0.0f) {
			memset(dt, 0, (size_t)V * sizeof *dt);
		} else {
			const float m = mx[t], inv = 1.0f / sumexp[t];
			int64_t lab = labels[t];
			bool here = lab >= v0 && lab < v0 + V;
			float pl = here ? cpu_expf(lt[lab - v0] - m) * inv : 0.0f;
			row_softmax_scaled(dt, lt, V, m, inv, ms);
			if (here)
				dt[lab - v0] = (pl - 1.0f) * ms;
		}
		if (rows)
			store_row(dlogits, lty, (size_t)t * V, dt, V);
	}
}

/* ---- optimizer and reductions ---- */

typedef struct {
	float b1, b2, ob1, ob2, eps, step_size, bc2_sqrt, decay;
} adamw_k;

/* sqrtf stays a libm call with an errno branch unless the whole build has -fno-math-errno, which
 * stops vectorization, so the x86-64 path spells the loop out in SSE (4 lanes is plenty: this
 * loop is bound by memory, 28 bytes per element). */
static void adamw_chunk(float *p, const float *g, float *m, float *v, size_t n, const adamw_k *k)
{
	const float b1 = k->b1, b2 = k->b2, ob1 = k->ob1, ob2 = k->ob2, eps = k->eps;
	const float step_size = k->step_size, bc2_sqrt = k->bc2_sqrt, decay = k->decay;
	size_t i = 0;
#ifdef __SSE2__
	const __m128 vb1 = _mm_set1_ps(b1), vb2 = _mm_set1_ps(b2), vob1 = _mm_set1_ps(ob1);
	const __m128 vob2 = _mm_set1_ps(ob2), veps = _mm_set1_ps(eps), vss = _mm_set1_ps(step_size);
	const __m128 vbc = _mm_set1_ps(bc2_sqrt), vdec = _mm_set1_ps(decay);
	for (; i + 4 <= n; i += 4) {
		__m128 gi = _mm_loadu_ps(g + i);
		__m128 mi = _mm_add_ps(_mm_mul_ps(vb1, _mm_loadu_ps(m + i)), _mm_mul_ps(vob1, gi));
		__m128 vi = _mm_add_ps(_mm_mul_ps(vb2, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(vob2, gi), gi));
		__m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), vbc), veps);
		_mm_storeu_ps(m + i, mi);
		_mm_storeu_ps(v + i, vi);
		__m128 pi = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + i), vdec),
				       _mm_mul_ps(vss, _mm_div_ps(mi, denom)));
		_mm_storeu_ps(p + i, pi);
	}
#endif
	for (; i < n; i++) {
		float gi = g[i];
		float mi = b1 * m[i] + ob1 * gi;
		float vi = b2 * v[i] + ob2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * decay - step_size * (mi / denom);
	}
}

void mgt_cpu_adamw(mgt_backend *be, float *p, const float *g, float *m, float *v, size_t n,
		      float lr, float b1, float b2, float eps, float wd, int64_t step)
{
	/* Scalars as torch computes them: bias corrections in double, then used as fp32. */
	const double bc1 = 1.0 - pow((double)b1, (double)step);
	const double bc2 = 1.0 - pow((double)b2, (double)step);
	const adamw_k k = {b1, b2, 1.0f - b1, 1.0f - b2, eps, (float)((double)lr / bc1),
			   (float)sqrt(bc2), (float)(1.0 - (double)lr * (double)wd)};
	const size_t chunk = 16384, nch = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (nch > 1)
	for (size_t c = 0; c < nch; c++) {
		size_t o = c * chunk, len = n - o < chunk ? n - o : chunk;
		adamw_chunk(p + o, g + o, m + o, v + o, len, &k);
	}
}

double mgt_cpu_sumsq(mgt_backend *be, const float *x, size_t n)
{
	/* At most 256 chunks whose bounds depend only on n, summed in chunk order. */
	enum { NCH = 256 };
	size_t chunk = zmax(8192, (n + NCH - 1) / NCH);
	int nch = (int)((n + chunk - 1) / chunk);
	double part[NCH];
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (nch > 1)
	for (int k = 0; k < nch; k++) {
		size_t o = (size_t)k * chunk, e = o + chunk < n ? o + chunk : n;
		double acc = 0;
#pragma omp simd reduction(+ : acc)
		for (size_t i = o; i < e; i++)
			acc += (double)x[i] * x[i];
		part[k] = acc;
	}
	double sum = 0;
	for (int k = 0; k < nch; k++)
		sum += part[k];
	return sum;
}

void mgt_cpu_copy(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	if (bytes)
		memcpy(dst, src, bytes);
}

void mgt_cpu_cast(mgt_backend *be, void *dst, mgt_elem_type dt, const float *src, size_t n)
{
	uint16_t *h = dst;
	const bool bf = dt == MGT_DT_BF16;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		h[i] = bf ? mgt_f32_to_bf16(src[i]) : mgt_f32_to_f16(src[i]);
}

/* lib/fp8's cast, on x widened into rounding buffer 4 when 16-bit, in chunks across the threads:
 * each chunk's amax starts from 0 and the chunks' maxima fold into amax[0] with fmaxf (a maximum:
 * the same value in any order). */
void mgt_cpu_fp8_quantize(mgt_backend *be, uint8_t *q, const void *x, mgt_elem_type xt, size_t n, const float *scale,
			  mgt_fp8_format fmt, float *amax)
{
	const float *v = widen(be, 4, x, xt, n);
	if (!v)
		return;
	enum { CH = 65536 };
	const size_t nch = (n + CH - 1) / CH;
	float m = amax[0];
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) reduction(max : m) if (nch > 1)
	for (size_t c = 0; c < nch; c++) {
		const size_t o = c * CH, k = n - o < CH ? n - o : CH;
		float a = 0.0f;
		mgt_fp8_quantize(q ? q + o : NULL, v + o, k, scale[0], fmt, &a);
		m = fmaxf(m, a);
	}
	amax[0] = m;
}

/* The k-th rounding buffer holding the n fp8 bytes q of format f as their fp32 values (exact; a
 * table of the 256 codes); NULL (failure recorded) when it cannot grow. */
static const float *fp8_values(mgt_backend *be, int k, const uint8_t *q, mgt_fp8_format f, size_t n)
{
	float tab[256];
	for (int v = 0; v < 256; v++)
		tab[v] = mgt_fp8_to_f32((uint8_t)v, f);
	float *r = round_buf(be, k, n);
	if (r) {
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
		for (size_t i = 0; i < n; i++)
			r[i] = tab[q[i]];
	}
	return r;
}

void mgt_cpu_fp8_scale(mgt_backend *be, float *scale, float *scale_inv, const float *amax, float fp8_max)
{
	(void)be;
	scale[0] = mgt_fp8_current_scale(amax[0], fp8_max, 0.0f);
	scale_inv[0] = mgt_fp8_scale_inv(scale[0]);
}

void mgt_cpu_fp8_transpose(mgt_backend *be, uint8_t *dst, const uint8_t *src, int rows, int cols)
{
	enum { B = 64 };
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)rows * cols > PAR_MIN)
	for (int r0 = 0; r0 < rows; r0 += B)
		for (int c0 = 0; c0 < cols; c0 += B)
			for (int r = r0; r < rows && r < r0 + B; r++)
				for (int c = c0; c < cols && c < c0 + B; c++)
					dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* The operands' values in rounding buffers 0 and 1 (products of fp8 values are exact in fp32, so
 * sgemm on them sums the exact products in fp32), the sums in buffer 4, then the scaled epilogue. */
void mgt_cpu_gemm_fp8(mgt_backend *be, void *d, mgt_elem_type dt, bool accumulate, const float *bias, const uint8_t *a,
		      mgt_fp8_format af, const float *a_inv, const uint8_t *b, mgt_fp8_format bf, const float *b_inv,
		      int m, int n, int k, bool fast_accum)
{
	(void)fast_accum;
	if (m <= 0 || n <= 0)
		return;
	const size_t mn = (size_t)m * (size_t)n;
	float *acc = round_buf(be, 4, mn);
	const float *A = k > 0 ? fp8_values(be, 0, a, af, (size_t)m * k) : NULL;
	const float *Bv = k > 0 ? fp8_values(be, 1, b, bf, (size_t)n * k) : NULL;
	if (!acc || (k > 0 && (!A || !Bv)))
		return;
	blas_threads(be);
	if (k > 0)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, Bv, k, A, k, 0.0f, acc, m);
	else
		memset(acc, 0, mn * sizeof *acc);
	const float s = a_inv[0] * b_inv[0];
	float *d32 = dt == MGT_DT_F32 ? d : acc;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (mn > PAR_MIN)
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			const size_t e = (size_t)j * m + i;
			float v = acc[e] * s;
			if (bias)
				v += bias[i];
			d32[e] = accumulate ? d32[e] + v : v;
		}
	if (dt != MGT_DT_F32)
		mgt_cpu_cast(be, d, dt, acc, mn);
}

void mgt_cpu_scale(mgt_backend *be, float *x, size_t n, float alpha)
{
#pragma omp parallel for simd num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		x[i] *= alpha;
}

void mgt_cpu_add(mgt_backend *be, void *y, const void *x, mgt_elem_type t, size_t n)
{
	if (t != MGT_DT_F32) {
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
		for (size_t i = 0; i < n; i++)
			cpu_st(y, t, i, cpu_ld(y, t, i) + cpu_ld(x, t, i));
		return;
	}
	float *yf = y;
	const float *xf = x;
#pragma omp parallel for simd num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		yf[i] += xf[i];
}

/* ---- the table ---- */

#define CPU_OP_ENTRY(ret, n, params) .n = mgt_cpu_##n,
static const mgt_backend_ops cpu_ops = { .name = "cpu", MGT_BACKEND_OPS(CPU_OP_ENTRY) };

/* OpenBLAS's DYNAMIC_ARCH builds pick their kernels from the CPU model; a model newer than the
 * library (Debian 12's 0.3.21 on Emerald Rapids, model 0xCF) falls back to the Prescott (SSE3)
 * kernels, ten times slower than the AVX-512 ones.  When that happened and the user did not choose
 * with OPENBLAS_CORETYPE, choose from the CPU's features instead, through the library's own
 * re-initialization (gotoblas_dynamic_quit/init, exported by DYNAMIC_ARCH builds only, hence weak). */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static void blas_fix_coretype(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	const char *core = openblas_get_corename();
	if (getenv("OPENBLAS_CORETYPE") || !core || strcmp(core, "Prescott") != 0 || !gotoblas_dynamic_init ||
	    !gotoblas_dynamic_quit)
		return;
	__builtin_cpu_init();
	const char *want = NULL;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512cd"))
		want = "SkylakeX";
	else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		want = "Haswell";
	if (!want || setenv("OPENBLAS_CORETYPE", want, 0) != 0)
		return;
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
}

mgt_backend *mgt_backend_cpu_create(int threads)
{
	if (threads <= 0)
		threads = omp_get_num_procs();
	if (threads <= 0)
		threads = 1;
	mgt_backend *be = calloc(1, sizeof *be);
	cpu_impl *im = calloc(1, sizeof *im);
	void *scratch = NULL;
	if (!be || !im || posix_memalign(&scratch, 64, (size_t)threads * cpu_scratch_bytes) != 0) {
		free(be);
		free(im);
		mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %d threads' scratch", threads);
		return NULL;
	}
	memset(scratch, 0, (size_t)threads * cpu_scratch_bytes);
	im->threads = threads;
	im->scratch = scratch;
	be->ops = &cpu_ops;
	be->threads = threads;
	be->host_memory = true;
	be->impl = im;
	blas_fix_coretype();
	blas_threads(be);
	blas_warmup(be);
	return be;
}

/* OpenBLAS allocates its GEMM buffers (tens of MiB) on a thread's first sgemm: do that now, from
 * a multi-threaded call and from inside a parallel region as attention does, so that memory is
 * part of the process's baseline rather than appearing mid-training (mgt-train reports the peak
 * RSS against the computed memory). */
static void blas_warmup(mgt_backend *be)
{
	/* wide enough (N) and deep enough (K) to fill OpenBLAS's packing panels; the inputs are
	 * calloc'd and only read, so they stay on the shared zero page and cost no RSS */
	enum { M = 128, N = 16384, K = 512 };
	int nt = be->threads;
	const float *in = calloc((size_t)N * K, sizeof(float));
	float *out = calloc((size_t)nt * M * N, sizeof(float));
	if (in && out) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, in, K, in, K, 0.0f, out, N);
#pragma omp parallel num_threads(nt)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, in, K, in, K, 0.0f,
			    out + (size_t)omp_get_thread_num() * M * N, N);
	}
	free((void *)in);
	free(out);
}

void mgt_cpu_destroy(mgt_backend *be)
{
	cpu_impl *im = be->impl;
	if (im) {
		free(im->scratch);
		for (int k = 0; k < 6; k++)
			free(im->round_buf[k]);
	}
	free(im);
	free(be);
}

void mgt_backend_destroy(mgt_backend *be)
{
	if (be)
		be->ops->destroy(be);
}
