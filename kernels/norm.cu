/* kernels/: LayerNorm and RMSNorm, forward and backward (backend.h's norm_fwd / norm_bwd;
 * cpu_norm_fwd / cpu_norm_bwd in lib/backend/cpu.c give the operation order; Ba et al. 2016,
 * Zhang & Sennrich 2019).  kind: 0 LayerNorm, 1 RMSNorm.
 *
 * Row statistics: one block per row, summed in double through a fixed block tree.  dw/db: the
 * column-reduction scheme of common.cuh (double partials per chunk of rows in ws, then summed in
 * chunk order and added to dw/db once), so everything is deterministic. */
#include "common.cuh"

/* Row layout: row t of n starts at element ((t / per) * stride + first + t % per) * h (per = stride
 * = 1, first = 0: contiguous [n, h]; the head norms: query or key heads inside qkv [T, ng, r+2, d],
 * cpu.c's rows_lay). */
struct rows_lay {
	int per, stride, first;
};

static __device__ __forceinline__ size_t row_at(rows_lay L, size_t t, size_t h)
{
	return ((t / (size_t)L.per) * (size_t)L.stride + (size_t)L.first + t % (size_t)L.per) * h;
}

/* Row t: mean (LayerNorm; 0 for RMSNorm) and rstd in double, then y = (x - mean) * rstd * w + b. */
template <typename Y, typename X>
static __global__ void norm_fwd_k(int kind, Y *y, float *mean, float *rstd, const X *x, const float *w,
				  const float *b, int h, float eps, bool vec, rows_lay L)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4;
	const X *xt = x + row_at(L, t, nh);
	Y *yt = y + row_at(L, t, nh);
	double mu = 0, ss = 0;
	if (kind == 0) {
		double sum = 0;
		for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
			float v[4];
			mgt_ld4(xt, g, nh, vec, v); /* 0 beyond h: adds nothing */
#pragma unroll
			for (int k = 0; k < 4; k++)
				sum += v[k];
		}
		mu = mgt_block_sum(sum) / h;
	}
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		int cnt = mgt_ld4(xt, g, nh, vec, v);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			double dv = v[k] - mu;
			if (k < cnt)
				ss += dv * dv;
		}
	}
	ss = mgt_block_sum(ss);
	const float m = (float)mu, rs = (float)(1.0 / sqrt(ss / h + eps));
	if (threadIdx.x == 0) {
		mean[t] = m;
		rstd[t] = rs;
	}
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4], ww[4], bb[4] = {0, 0, 0, 0};
		mgt_ld4(xt, g, nh, vec, v);
		mgt_ld4(w, g, nh, vec, ww);
		if (b)
			mgt_ld4(b, g, nh, vec, bb);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			float o = (v[k] - m) * rs * ww[k];
			v[k] = b ? o + bb[k] : o;
		}
		mgt_st4(yt, g, nh, vec, v);
	}
}

/* The forward's kernel for y of type Y and x of type xt. */
template <typename Y>
static void norm_fwd_x(cudaStream_t st, int T, int kind, Y *y, float *mean, float *rstd, const void *x,
		       mgt_k_dtype xt, const float *w, const float *b, int h, float eps, bool vec, rows_lay L)
{
	typedef __nv_bfloat16 bf;
	if (xt == MGT_K_BF16)
		MGT_LAUNCH((norm_fwd_k<Y, bf>), T, MGT_ROW_THREADS, 0, st, kind, y, mean, rstd, (const bf *)x, w, b, h,
			   eps, vec, L);
	else if (xt == MGT_K_F16)
		MGT_LAUNCH((norm_fwd_k<Y, __half>), T, MGT_ROW_THREADS, 0, st, kind, y, mean, rstd, (const __half *)x, w,
			   b, h, eps, vec, L);
	else
		MGT_LAUNCH((norm_fwd_k<Y, float>), T, MGT_ROW_THREADS, 0, st, kind, y, mean, rstd, (const float *)x, w,
			   b, h, eps, vec, L);
}

/* y of type yt (fp32, or rounded to bf16 / fp16 by mgt_st4), x of type xt. */
static int norm_fwd_rows(mgt_k_stream s, int kind, void *y, mgt_k_dtype yt, float *mean, float *rstd, const void *x,
			 mgt_k_dtype xt, const float *w, const float *b, int T, int h, float eps, rows_lay L)
{
	if (T <= 0 || h <= 0)
		return 0;
	const bool vec = h % 4 == 0 && mgt_al16(y) && mgt_al16(x) && mgt_al16(w) && mgt_al16(b);
	const cudaStream_t st = mgt_st(s);
	if (yt == MGT_K_BF16)
		norm_fwd_x(st, T, kind, (__nv_bfloat16 *)y, mean, rstd, x, xt, w, b, h, eps, vec, L);
	else if (yt == MGT_K_F16)
		norm_fwd_x(st, T, kind, (__half *)y, mean, rstd, x, xt, w, b, h, eps, vec, L);
	else
		norm_fwd_x(st, T, kind, (float *)y, mean, rstd, x, xt, w, b, h, eps, vec, L);
	return mgt_k_rc();
}

extern "C" int mgt_k_norm_fwd(mgt_k_stream s, int kind, void *y, mgt_k_dtype yt, float *mean, float *rstd,
			      const void *x, mgt_k_dtype xt, const float *w, const float *b, int T, int h, float eps)
{
	return norm_fwd_rows(s, kind, y, yt, mean, rstd, x, xt, w, b, T, h, eps, rows_lay{1, 1, 0});
}

/* Query heads: r rows per group, group stride r + 2, first 0; key heads: 1 row at offset r. */
static rows_lay head_rows(int T, int ng, int r, int key, int *n)
{
	*n = T * ng * (key ? 1 : r);
	return key ? rows_lay{1, r + 2, r} : rows_lay{r, r + 2, 0};
}

extern "C" int mgt_k_head_norm_fwd(mgt_k_stream s, int kind, void *y, mgt_k_dtype yt, float *mean, float *rstd,
				   const float *x, const float *w, const float *b, int T, int ng, int r,
				   int d, int key, float eps)
{
	int n;
	rows_lay L = head_rows(T, ng, r, key, &n);
	return norm_fwd_rows(s, kind, y, yt, mean, rstd, x, MGT_K_F32, w, b, n, d, eps, L);
}

/* Row t: g = dy * w, xhat = (x - mean) * rstd,
 * dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat))   (RMSNorm: no mean(g) term).  acc: add
 * into dx, else write it (dx may then alias dy: each thread reads its elements of dy before it
 * writes the same elements of dx, after the block's sums).  x of type X, dy of type G (read as
 * fp32), dx of type D (X for the norms, G for the head norms; a 16-bit dx's sum rounded to
 * nearest even). */
template <typename X, typename G, typename D>
static __global__ void norm_dx_k(int kind, D *dx, const G *dy, const X *x, const float *w, const float *mean,
				 const float *rstd, int h, bool vec, rows_lay L, bool acc)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4, off = row_at(L, t, nh);
	const X *xt = x + off;
	const G *gt = dy + off;
	D *dxt = dx + off;
	const float m = mean[t], rs = rstd[t];
	double sg = 0, sgx = 0;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4], gg[4], ww[4];
		int cnt = mgt_ld4(xt, g, nh, vec, v);
		mgt_ld4(gt, g, nh, vec, gg);
		mgt_ld4(w, g, nh, vec, ww);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			float gw = gg[k] * ww[k];
			if (k < cnt) {
				sg += gw;
				sgx += gw * ((v[k] - m) * rs);
			}
		}
	}
	sg = mgt_block_sum(sg);
	sgx = mgt_block_sum(sgx);
	const float a = kind == 0 ? (float)(sg / h) : 0.0f, bx = (float)(sgx / h);
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4], gg[4], ww[4], d[4] = {0, 0, 0, 0};
		mgt_ld4(xt, g, nh, vec, v);
		mgt_ld4(gt, g, nh, vec, gg);
		mgt_ld4(w, g, nh, vec, ww);
		if (acc)
			mgt_ld4(dxt, g, nh, vec, d);
#pragma unroll
		for (int k = 0; k < 4; k++)
			d[k] += rs * (gg[k] * ww[k] - a - (v[k] - m) * rs * bx);
		mgt_st4(dxt, g, nh, vec, d);
	}
}

/* Chunk r of rows, column c: pw[r, c] = sum_t dy * xhat, pb[r, c] = sum_t dy (double, row order). */
template <typename X, typename G>
static __global__ void norm_dwdb_part_k(double *pw, double *pb, const G *dy, const X *x,
					const float *mean, const float *rstd, int T, int h, int rows, rows_lay L)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= h)
		return;
	const int r = blockIdx.y;
	const int t0 = r * rows, t1 = T - t0 < rows ? T : t0 + rows;
	double aw = 0, ab = 0;
	for (int t = t0; t < t1; t++) {
		const size_t i = row_at(L, (size_t)t, (size_t)h) + c;
		const float gv = mgt_ld1(dy, i);
		aw += gv * ((mgt_ld1(x, i) - mean[t]) * rstd[t]);
		ab += gv;
	}
	pw[(size_t)r * h + c] = aw;
	pb[(size_t)r * h + c] = ab;
}

/* dw[c] += sum_r pw[r, c]; db[c] += sum_r pb[r, c] (when db), chunks in order. */
static __global__ void norm_dwdb_fin_k(float *dw, float *db, const double *pw, const double *pb, int R,
				       int h)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= h)
		return;
	double aw = 0, ab = 0;
	for (int r = 0; r < R; r++) {
		aw += pw[(size_t)r * h + c];
		ab += pb[(size_t)r * h + c];
	}
	dw[c] += (float)aw;
	if (db)
		db[c] += (float)ab;
}

/* ws: [R, h] doubles of dw partials, then [R, h] of db partials (R = mgt_col_chunks(T, h)). */
extern "C" size_t mgt_k_norm_bwd_ws_bytes(int T, int h)
{
	if (T <= 0 || h <= 0)
		return 0;
	return 2 * (size_t)mgt_col_chunks(T, h) * (size_t)h * sizeof(double);
}

/* The backward's kernels for x of type X, dy of type G, dx of type D. */
template <typename X, typename G, typename D>
static void norm_bwd_x(cudaStream_t st, int kind, D *dx, float *dw, float *db, const G *dy, const X *x,
		       const float *w, const float *mean, const float *rstd, int T, int h, void *ws, rows_lay L,
		       bool acc, bool vec)
{
	const int rows = mgt_col_chunk_rows(T, h), R = mgt_col_chunks(T, h);
	const unsigned cb = (unsigned)mgt_cdiv((size_t)h, MGT_COL_THREADS);
	double *pw = (double *)ws, *pb = pw + (size_t)R * h;
	MGT_LAUNCH((norm_dwdb_part_k<X, G>), dim3(cb, R), MGT_COL_THREADS, 0, st, pw, pb, dy, x, mean, rstd, T, h, rows,
		   L);
	MGT_LAUNCH(norm_dwdb_fin_k, cb, MGT_COL_THREADS, 0, st, dw, db, pw, pb, R, h);
	MGT_LAUNCH((norm_dx_k<X, G, D>), T, MGT_ROW_THREADS, 0, st, kind, dx, dy, x, w, mean, rstd, h, vec, L, acc);
}

/* dw/db first, then dx: with acc == false dx may alias dy.  x of type xt, dy of type gt, dx of
 * type gt when dx_dy (the head norms, in place on the gradient) else xt. */
static int norm_bwd_rows(mgt_k_stream s, int kind, void *dx, float *dw, float *db, const void *dy, mgt_k_dtype gt,
			 const void *x, mgt_k_dtype xt, const float *w, const float *mean, const float *rstd, int T,
			 int h, void *ws, rows_lay L, bool acc, bool dx_dy)
{
	if (T <= 0 || h <= 0)
		return 0;
	const cudaStream_t st = mgt_st(s);
	const bool vec = h % 4 == 0 && mgt_al16(dx) && mgt_al16(dy) && mgt_al16(x) && mgt_al16(w);
	return mgt_k_typed(xt, [&](auto ex) {
		return mgt_k_typed(gt, [&](auto eg) {
			typedef typename decltype(ex)::type X;
			typedef typename decltype(eg)::type G;
			if (dx_dy)
				norm_bwd_x(st, kind, (G *)dx, dw, db, (const G *)dy, (const X *)x, w, mean, rstd, T, h, ws, L,
					   acc, vec);
			else
				norm_bwd_x(st, kind, (X *)dx, dw, db, (const G *)dy, (const X *)x, w, mean, rstd, T, h, ws, L,
					   acc, vec);
			return mgt_k_rc();
		});
	});
}

extern "C" int mgt_k_norm_bwd(mgt_k_stream s, int kind, void *dx, float *dw, float *db, const void *dy,
			      mgt_k_dtype dyt, const void *x, mgt_k_dtype xt, const float *w, const float *mean,
			      const float *rstd, int T, int h, void *ws)
{
	return norm_bwd_rows(s, kind, dx, dw, db, dy, dyt, x, xt, w, mean, rstd, T, h, ws, rows_lay{1, 1, 0}, true,
			     false);
}

extern "C" size_t mgt_k_head_norm_bwd_ws_bytes(int T, int ng, int r, int d, int key)
{
	int n;
	head_rows(T, ng, r, key, &n);
	return mgt_k_norm_bwd_ws_bytes(n, d);
}

extern "C" int mgt_k_head_norm_bwd(mgt_k_stream s, int kind, void *dx, float *dw, float *db, const void *dy,
				   mgt_k_dtype gt, const float *x, const float *w, const float *mean, const float *rstd, int T,
				   int ng, int r, int d, int key, void *ws)
{
	int n;
	rows_lay L = head_rows(T, ng, r, key, &n);
	return norm_bwd_rows(s, kind, dx, dw, db, dy, gt, x, MGT_K_F32, w, mean, rstd, n, d, ws, L, false, true);
}
