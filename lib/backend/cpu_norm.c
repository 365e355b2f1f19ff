/* lib/backend: the CPU backend's LayerNorm and RMSNorm over rows and over attention heads
 * (backend.h norm_fwd, norm_bwd, head_norm_fwd, head_norm_bwd); CUDA twin kernels/norm.cu.
 */
#include "backend/cpu_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN
#define COLCH CPU_COLCH

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
	float *rows = yt == MGT_DT_F32 || T <= 0 ? NULL : cpu_row_bufs(be, (size_t)h);
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
			cpu_store_row(y, yt, row_at(L, t, h), yt32, h);
	}
}

/* A 16-bit x is widened into rounding buffer 0 first (the 16-bit y's rows use buffer 2). */
void mgt_cpu_norm_fwd(mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, float *rstd,
			 const void *x, mgt_elem_type xt, const float *w, const float *b, int T, int h, float eps)
{
	const float *x32 = cpu_widen(be, 0, x, xt, (size_t)T * (size_t)(h > 0 ? h : 0));
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
	const float *x32 = cpu_widen(be, 0, x, xt, n), *dy32 = cpu_widen(be, 5, dy, dyt, n);
	float *dx32 = (float *)cpu_widen(be, 4, dx, xt, n);
	if (!x32 || !dy32 || !dx32)
		return;
	norm_bwd_rows(be, kind, dx32, dw, db, dy32, x32, w, mean, rstd, T, h, ROWS_DENSE, true);
	cpu_narrow(be, dx, xt, dx32, n);
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
	float *g = (float *)cpu_widen(be, 5, dy, gt, (size_t)T * ng * (r + 2) * d);
	if (!g)
		return;
	norm_bwd_rows(be, kind, g, dw, db, g, x, w, mean, rstd, n, d, L, false);
	for (int i = 0; i < n; i++)
		cpu_store_row(dx, gt, row_at(L, i, d), g + row_at(L, i, d), d);
}
