/* lib/backend: the CPU backend's linear layers (backend.h linear_fwd, linear_bwd): OpenBLAS sgemm on
 * fp32 operands, or on operands rounded to the training's 16-bit type one block at a time (the
 * mixed-precision GEMM, bit for bit per product).  The CUDA twin is cuda_gemm.c (cuBLASLt).
 */
#include "backend/cpu_impl.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN

/* ---- linear ---- */

/* OpenBLAS's thread count now (mgt_cpu_blas_threads). */
static int blas_threads_now;

void mgt_cpu_blas_threads(mgt_backend *be)
{
	int nt = cpu_threads(be);
	if (__atomic_load_n(&blas_threads_now, __ATOMIC_RELAXED) != nt) {
		openblas_set_num_threads(nt);
		__atomic_store_n(&blas_threads_now, nt, __ATOMIC_RELAXED);
	}
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
	float *r = mgt_cpu_round_buf(be, k, rows * cols);
	if (!r)
		return NULL;
	const mgt_precision pr = be->precision;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (rows * cols > PAR_MIN)
	for (size_t i = 0; i < rows; i++) {
		float *d = r + i * cols;
		if (t != MGT_DT_F32) {
			cpu_load_row(d, (const uint16_t *)src + i * ld + c0, t, cols);
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
	float *blk = mgt_cpu_round_buf(be, 2, (size_t)R * nc);
	if (!blk)
		return;
	for (int t0 = 0; t0 < T; t0 += R) {
		const int n = T - t0 < R ? T - t0 : R;
		gemm_fwd_ld(blk, nc, x ? x + (size_t)t0 * in : NULL, wj, bj, n, in, nc, T == 1);
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)n * nc > PAR_MIN)
		for (int t = 0; t < n; t++)
			cpu_store_row(y, yt, (size_t)(t0 + t) * out + j, blk + (size_t)t * nc, nc);
	}
}

void mgt_cpu_linear_fwd(mgt_backend *be, void *y, mgt_elem_type yt, const void *x16, mgt_elem_type xt,
			const void *w16, mgt_elem_type wt, const float *b, int T, int in, int out)
{
	if (T <= 0 || out <= 0)
		return;
	mgt_cpu_blas_threads(be);
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
		const float *dy = db && T > 0 && out > 0 ? cpu_widen(be, 0, dy16, dyt, (size_t)T * out) : NULL;
		if (dy)
			mgt_cpu_colsum_acc(be, db, dy, T, out);
		return;
	}
	mgt_cpu_blas_threads(be);
	/* the bias gradient sums dy in fp32, as the GPU's does (only GEMM operands are rounded) */
	if (db && dyt == MGT_DT_F32)
		mgt_cpu_colsum_acc(be, db, dy16, T, out);
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
			mgt_cpu_colsum_acc(be, db + j, dj, T, nc);
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
	float *dx32 = dx && nx ? cpu_out32(be, dx, dxt, nx) : dx;
	if (dx && nx && !dx32)
		return;
	linear_bwd32(be, dx32, dw, db, dy, dyt, x, xt, w, wt, T, in, out);
	if (dx && nx)
		cpu_narrow(be, dx, dxt, dx32, nx);
}
