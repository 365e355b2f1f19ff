/* kernels/: the Mamba-2 mixer's ops around the scan (backend.h mamba_conv_fwd / _bwd,
 * mamba_gated_norm_fwd / _bwd) and the one-token step of inference (mamba_step: Megatron's
 * MambaMixer.ssm_decode, mamba_ssm's selective_state_update): the causal depthwise conv1d + SiLU
 * over xBC (Megatron-Core megatron/core/ssm/mamba_mixer.py, causal_conv1d_fn with activation "silu") and the gated RMSNorm
 * over groups (mamba_ssm ops/triton/layernorm_gated.py RMSNormGated, norm_before_gate=False).
 * lib/backend/cpu_mamba.c gives the operation order, which these follow term for term (fp32
 * products in the same order, sums of squares and weight gradients in double).  The scan is
 * kernels/ssd.cu.
 *
 * Storage (backend.h's t): the conv's and the norm's kernels are templated on the type S of their
 * activations and gradients (float, __nv_bfloat16, __half): loads widen exactly (mgt_ld1), the
 * math is the fp32 kernels' term for term, and each output is rounded once at its store (mgt_st1;
 * the conv backward's g stays fp32 in ws), so S = float is the fp32 op and a 16-bit op gives the
 * fp32 op's outputs on the widened inputs, rounded.  The scan's kernels (kernels/ssd.cu) are
 * templated the same way.
 *
 * Weight gradients (conv dw/db, norm dw): common.cuh's column-reduction scheme, double partials
 * per chunk of rows in ws, then each column's partials summed in chunk order (no atomics).
 *
 * mamba_step: two launches, each thread owning its own columns of the caches, rows in order:
 * step_conv_k one thread per channel c (conv_state[.][.][c], u[.][c]), then step_scan_k one thread
 * per (head h, p') (ssm_state[.][h][p'][:], y[.][h p + p']), which reads the u the first wrote.
 * No thread reads what another thread of the same launch writes. */
#include "common.cuh"

static __device__ __forceinline__ float sigm_(float v) { return 1.0f / (1.0f + expf(-v)); }
static __device__ __forceinline__ float silu_(float v) { return v / (1.0f + expf(-v)); }
/* silu'(u) = s (1 + u (1 - s)), s = sigmoid(u) */
static __device__ __forceinline__ float dsilu_(float u)
{
	const float s = sigm_(u);
	return s * (1.0f + u * (1.0f - s));
}

/* ---- causal depthwise conv1d + SiLU ---- */

/* The conv's geometry: L positions of b sequences, CD channels, K taps, x's row stride. */
struct conv_geo {
	int L, b, CD, K, ld;
	const int32_t *seg;
};

/* The first position row (i, j) may read: its document's start (0 without seg_start). */
static __device__ __forceinline__ int doc_lo(const int32_t *seg, int i, int b, int j)
{
	return seg ? seg[(size_t)i * b + j] : 0;
}

/* bias[c] + sum_k w[c][k] x[i - (K-1) + k, c], k ascending, positions before lo read as 0. */
template <typename S>
static __device__ float conv_pre(const conv_geo &G, const S *x, const float *w, const float *bias, int t, int c)
{
	const int i = t / G.b, j = t % G.b, lo = doc_lo(G.seg, i, G.b, j);
	float u = bias[c];
	for (int k = 0; k < G.K; k++) {
		const int ip = i - (G.K - 1) + k;
		if (ip >= lo)
			u += w[(size_t)c * G.K + k] * mgt_ld1(x, ((size_t)ip * G.b + j) * (size_t)G.ld + c);
	}
	return u;
}

/* y[t, c] = silu(pre) over T * CD elements. */
template <typename S>
static __global__ void conv_fwd_k(S *y, const S *x, const float *w, const float *bias, conv_geo G)
{
	const size_t n = (size_t)G.L * G.b * G.CD;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(e / G.CD), c = (int)(e % G.CD);
		mgt_st1(y, e, silu_(conv_pre(G, x, w, bias, t, c)));
	}
}

/* g[t, c] = dy[t, c] silu'(pre) (pre recomputed), fp32. */
template <typename S>
static __global__ void conv_g_k(float *g, const S *dy, const S *x, const float *w, const float *bias, conv_geo G)
{
	const size_t n = (size_t)G.L * G.b * G.CD;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(e / G.CD), c = (int)(e % G.CD);
		g[e] = mgt_ld1(dy, e) * dsilu_(conv_pre(G, x, w, bias, t, c));
	}
}

/* dx[i', c] = sum_k w[c][k] g[i' + (K-1) - k, c], k descending, over the outputs whose window
 * reaches i' (i' at or after their document's start). */
template <typename S>
static __global__ void conv_dx_k(S *dx, const float *g, const float *w, conv_geo G)
{
	const size_t n = (size_t)G.L * G.b * G.CD;
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(e / G.CD), c = (int)(e % G.CD), ip = t / G.b, j = t % G.b;
		float d = 0.0f;
		for (int k = G.K - 1; k >= 0; k--) {
			const int i = ip + (G.K - 1) - k;
			if (i < G.L && doc_lo(G.seg, i, G.b, j) <= ip)
				d += w[(size_t)c * G.K + k] * g[((size_t)i * G.b + j) * G.CD + c];
		}
		mgt_st1(dx, (size_t)t * G.ld + c, d);
	}
}

/* Chunk r of rows, column m = (k + 1) CD + c of the (K + 1) CD sums: k = -1 the bias's
 * sum_t g[t, c], else sum_t g[t, c] x[i - (K-1) + k, c] (in its document); double, rows in order. */
template <typename S>
static __global__ void conv_dwdb_part_k(double *part, const float *g, const S *x, conv_geo G, int rows)
{
	const int m = blockIdx.x * blockDim.x + threadIdx.x, ncol = (G.K + 1) * G.CD;
	if (m >= ncol)
		return;
	const int k = m / G.CD - 1, c = m % G.CD, T = G.L * G.b, r = blockIdx.y;
	const int t0 = r * rows, t1 = T - t0 < rows ? T : t0 + rows;
	double acc = 0;
	for (int t = t0; t < t1; t++) {
		const int i = t / G.b, j = t % G.b, ip = i - (G.K - 1) + k;
		const float gv = g[(size_t)t * G.CD + c];
		if (k < 0)
			acc += gv;
		else if (ip >= doc_lo(G.seg, i, G.b, j))
			acc += (double)gv * mgt_ld1(x, ((size_t)ip * G.b + j) * (size_t)G.ld + c);
	}
	part[(size_t)r * ncol + m] = acc;
}

/* Column m's R partials [R, ncol], summed in chunk order. */
static __device__ __forceinline__ double col_total(const double *part, int R, int ncol, int m)
{
	double a = 0;
	for (int r = 0; r < R; r++)
		a += part[(size_t)r * ncol + m];
	return a;
}

/* db[c] += the bias column, dw[c][k] += tap k's. */
static __global__ void conv_dwdb_fin_k(float *dw, float *db, const double *part, int R, int CD, int K)
{
	const int m = blockIdx.x * blockDim.x + threadIdx.x, ncol = (K + 1) * CD;
	if (m >= ncol)
		return;
	const int k = m / CD - 1, c = m % CD;
	const float v = (float)col_total(part, R, ncol, m);
	if (k < 0)
		db[c] += v;
	else
		dw[(size_t)c * K + k] += v;
}

extern "C" int mgt_k_mamba_conv_fwd(mgt_k_stream s, void *y, const void *x, int ld_x, const float *w,
				    const float *bias, const int32_t *seg_start, int L, int b, int CD, int K, mgt_k_dtype t)
{
	if (L <= 0 || b <= 0 || CD <= 0)
		return 0;
	const conv_geo G = { L, b, CD, K, ld_x, seg_start };
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((conv_fwd_k<E>), mgt_grid((size_t)L * b * CD, 256), 256, 0, mgt_st(s), (E *)y, (const E *)x, w,
			   bias, G);
		return mgt_k_rc();
	});
}

/* ws: g [T, CD] floats, then the partials [R, (K + 1) CD] doubles (R = mgt_col_chunks(T, (K + 1) CD)). */
static size_t conv_g_bytes(int T, int CD) { return ((size_t)T * CD * sizeof(float) + 15) / 16 * 16; }

extern "C" size_t mgt_k_mamba_conv_bwd_ws_bytes(int L, int b, int CD, int K)
{
	const int T = L * b, ncol = (K + 1) * CD;
	if (T <= 0 || CD <= 0)
		return 0;
	return conv_g_bytes(T, CD) + (size_t)mgt_col_chunks(T, ncol) * ncol * sizeof(double);
}

extern "C" int mgt_k_mamba_conv_bwd(mgt_k_stream s, void *dx, float *dw, float *db, const void *dy, const void *x,
				    int ld_x, const float *w, const float *bias, const int32_t *seg_start, int L, int b,
				    int CD, int K, mgt_k_dtype t, void *ws)
{
	const int T = L * b, ncol = (K + 1) * CD;
	if (T <= 0 || CD <= 0)
		return 0;
	const conv_geo G = { L, b, CD, K, ld_x, seg_start };
	const cudaStream_t st = mgt_st(s);
	const unsigned grid = mgt_grid((size_t)T * CD, 256), cb = (unsigned)mgt_cdiv((size_t)ncol, MGT_COL_THREADS);
	const int rows = mgt_col_chunk_rows(T, ncol), R = mgt_col_chunks(T, ncol);
	float *g = (float *)ws;
	double *part = (double *)((char *)ws + conv_g_bytes(T, CD));
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((conv_g_k<E>), grid, 256, 0, st, g, (const E *)dy, (const E *)x, w, bias, G);
		MGT_LAUNCH((conv_dx_k<E>), grid, 256, 0, st, (E *)dx, g, w, G);
		MGT_LAUNCH((conv_dwdb_part_k<E>), dim3(cb, R), MGT_COL_THREADS, 0, st, part, g, (const E *)x, G, rows);
		MGT_LAUNCH(conv_dwdb_fin_k, cb, MGT_COL_THREADS, 0, st, dw, db, part, R, CD, K);
		return mgt_k_rc();
	});
}

/* ---- gated RMSNorm over groups ---- */

/* One block per (row t, group gi) of gs = di / g channels. */
struct gnorm_geo {
	int di, g, ld_z;
};

/* Block (t, gi): v = y silu(z), r = 1 / sqrt(mean v^2 + eps) (double sum), out = v r w. */
template <typename S>
static __global__ void gnorm_fwd_k(S *out, float *rstd, const S *y, const S *z, const float *w, gnorm_geo G, float eps)
{
	const int t = blockIdx.x / G.g, gi = blockIdx.x % G.g, gs = G.di / G.g;
	const size_t o = (size_t)t * G.di + (size_t)gi * gs, oz = (size_t)t * G.ld_z + (size_t)gi * gs;
	double ss = 0;
	for (int c = threadIdx.x; c < gs; c += blockDim.x) {
		const float v = mgt_ld1(y, o + c) * silu_(mgt_ld1(z, oz + c));
		ss += (double)v * v;
	}
	ss = mgt_block_sum(ss);
	const float r = (float)(1.0 / sqrt(ss / gs + eps));
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	for (int c = threadIdx.x; c < gs; c += blockDim.x) {
		const float v = mgt_ld1(y, o + c) * silu_(mgt_ld1(z, oz + c));
		mgt_st1(out, o + c, v * r * w[gi * gs + c]);
	}
}

/* Block (t, gi): m = mean(dout w v r) (double sum), dv = r (dout w - v r m), dy = dv silu(z),
 * dz = dv y silu'(z). */
template <typename S>
static __global__ void gnorm_dx_k(S *dy, S *dz, const S *dout, const S *y, const S *z, const float *w, const float *rstd,
				  gnorm_geo G)
{
	const int gi = blockIdx.x % G.g, gs = G.di / G.g, t = blockIdx.x / G.g;
	const size_t o = (size_t)t * G.di + (size_t)gi * gs, oz = (size_t)t * G.ld_z + (size_t)gi * gs;
	const float r = rstd[blockIdx.x];
	double sgv = 0;
	for (int c = threadIdx.x; c < gs; c += blockDim.x) {
		const float v = mgt_ld1(y, o + c) * silu_(mgt_ld1(z, oz + c));
		sgv += (double)(mgt_ld1(dout, o + c) * w[gi * gs + c]) * (v * r);
	}
	sgv = mgt_block_sum(sgv);
	const float m = (float)(sgv / gs);
	for (int c = threadIdx.x; c < gs; c += blockDim.x) {
		const float zc = mgt_ld1(z, oz + c), yc = mgt_ld1(y, o + c), sz = silu_(zc), v = yc * sz;
		const float dv = r * (mgt_ld1(dout, o + c) * w[gi * gs + c] - v * r * m);
		mgt_st1(dy, o + c, dv * sz);
		mgt_st1(dz, oz + c, dv * yc * dsilu_(zc));
	}
}

/* Chunk r of rows, column c: sum_t dout[t, c] (v r)[t, c] in double, rows in order. */
template <typename S>
static __global__ void gnorm_dw_part_k(double *part, const S *dout, const S *y, const S *z, const float *rstd,
				       gnorm_geo G, int T, int rows)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= G.di)
		return;
	const int r = blockIdx.y, t0 = r * rows, t1 = T - t0 < rows ? T : t0 + rows, gi = c / (G.di / G.g);
	double acc = 0;
	for (int t = t0; t < t1; t++) {
		const float v = mgt_ld1(y, (size_t)t * G.di + c) * silu_(mgt_ld1(z, (size_t)t * G.ld_z + c));
		acc += (double)mgt_ld1(dout, (size_t)t * G.di + c) * (v * rstd[(size_t)t * G.g + gi]);
	}
	part[(size_t)r * G.di + c] = acc;
}

static __global__ void gnorm_dw_fin_k(float *dw, const double *part, int R, int di)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c < di)
		dw[c] += (float)col_total(part, R, di, c);
}

extern "C" int mgt_k_mamba_gated_norm_fwd(mgt_k_stream s, void *out, float *rstd, const void *y, const void *z,
					  int ld_z, const float *w, int T, int di, int g, float eps, mgt_k_dtype t)
{
	if (T <= 0 || di <= 0 || g <= 0)
		return 0;
	const gnorm_geo G = { di, g, ld_z };
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((gnorm_fwd_k<E>), (unsigned)((size_t)T * g), MGT_ROW_THREADS, 0, mgt_st(s), (E *)out, rstd,
			   (const E *)y, (const E *)z, w, G, eps);
		return mgt_k_rc();
	});
}

extern "C" size_t mgt_k_mamba_gated_norm_bwd_ws_bytes(int T, int di)
{
	if (T <= 0 || di <= 0)
		return 0;
	return (size_t)mgt_col_chunks(T, di) * di * sizeof(double);
}

extern "C" int mgt_k_mamba_gated_norm_bwd(mgt_k_stream s, void *dy, void *dz, float *dw, const void *dout,
					  const void *y, const void *z, int ld_z, const float *w, const float *rstd,
					  int T, int di, int g, mgt_k_dtype t, void *ws)
{
	if (T <= 0 || di <= 0 || g <= 0)
		return 0;
	const gnorm_geo G = { di, g, ld_z };
	const cudaStream_t st = mgt_st(s);
	const int rows = mgt_col_chunk_rows(T, di), R = mgt_col_chunks(T, di);
	const unsigned cb = (unsigned)mgt_cdiv((size_t)di, MGT_COL_THREADS);
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		const E *dO = (const E *)dout, *Y = (const E *)y, *Z = (const E *)z;
		MGT_LAUNCH((gnorm_dw_part_k<E>), dim3(cb, R), MGT_COL_THREADS, 0, st, (double *)ws, dO, Y, Z, rstd, G, T,
			   rows);
		MGT_LAUNCH(gnorm_dw_fin_k, cb, MGT_COL_THREADS, 0, st, dw, (const double *)ws, R, di);
		MGT_LAUNCH((gnorm_dx_k<E>), (unsigned)((size_t)T * g), MGT_ROW_THREADS, 0, st, (E *)dy, (E *)dz, dO, Y, Z, w,
			   rstd, G);
		return mgt_k_rc();
	});
}

/* ---- mamba_step: the one-token step of inference with conv and SSM state caches ---- */

/* softplus with mamba_ssm's threshold (cpu_mamba.c softplusf_, ssd.cu softplus_). */
static __device__ __forceinline__ float step_softplus_(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

/* The step's geometry: T rows, nh heads of p, g groups of n (CD = nh p + 2 g n channels), K taps,
 * row strides of xbc and dt_raw. */
struct step_geo {
	int T, nh, p, g, n, CD, K, ld, ld_dt;
};

/* Thread c: for t in order, sequence b = seq[t]'s kept rows hist[k][c] (zeroed first at
 * position 0), u[t, c] = silu(bias[c] + sum_{k<K-1} w[c][k] hist[k][c] + w[c][K-1] xbc[t, c]),
 * then the kept rows shifted by one and xbc[t, c] appended (cpu_mamba.c step_conv). */
static __global__ void step_conv_k(float *u, float *conv_state, const float *xbc, const int32_t *seq,
				   const int32_t *pos, const float *w, const float *bias, step_geo G)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= G.CD)
		return;
	const int Km = G.K - 1;
	const float *wc = w + (size_t)c * G.K;
	for (int t = 0; t < G.T; t++) {
		float *hist = conv_state + (size_t)seq[t] * Km * G.CD + c;
		if (pos[t] == 0)
			for (int k = 0; k < Km; k++)
				hist[(size_t)k * G.CD] = 0.0f;
		const float xt = xbc[(size_t)t * G.ld + c];
		float a = bias[c];
		for (int k = 0; k < Km; k++)
			a += wc[k] * hist[(size_t)k * G.CD];
		a += wc[Km] * xt;
		u[(size_t)t * G.CD + c] = silu_(a);
		for (int k = 0; k + 1 < Km; k++)
			hist[(size_t)k * G.CD] = hist[(size_t)(k + 1) * G.CD];
		if (Km > 0)
			hist[(size_t)(Km - 1) * G.CD] = xt;
	}
}

/* Thread (h, p'): for t in order, S = ssm_state[seq[t]][h][p'][:] (zeroed first at position 0),
 * dt = softplus(dt_raw[t, h] + dt_bias[h]), A = -exp(A_log[h]); S[j] = e^{dt A} S[j] + dt x B[j]
 * and y[t, h p + p'] = sum_j S[j] C[j] (j ascending) + D[h] x, with x, B, C the blocks of u[t]
 * for head h's group h / (nh / g) (cpu_mamba.c step_head). */
static __global__ void step_scan_k(float *y, float *ssm_state, const float *u, const float *dt_raw,
				   const int32_t *seq, const int32_t *pos, const float *dt_bias, const float *A_log,
				   const float *D, step_geo G)
{
	const int di = G.nh * G.p, e = blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= di)
		return;
	const int h = e / G.p, gi = h / (G.nh / G.g);
	const float A = -expf(A_log[h]), Dh = D[h];
	for (int t = 0; t < G.T; t++) {
		float *S = ssm_state + ((size_t)seq[t] * di + e) * G.n;
		if (pos[t] == 0)
			for (int j = 0; j < G.n; j++)
				S[j] = 0.0f;
		const float dt = step_softplus_(dt_raw[(size_t)t * G.ld_dt + h] + dt_bias[h]), a = expf(dt * A);
		const float *ut = u + (size_t)t * G.CD, x = ut[e];
		const float *B = ut + di + (size_t)gi * G.n, *C = ut + di + (size_t)(G.g + gi) * G.n;
		float acc = 0.0f;
		for (int j = 0; j < G.n; j++) {
			S[j] = a * S[j] + dt * x * B[j];
			acc += S[j] * C[j];
		}
		y[(size_t)t * di + e] = acc + Dh * x;
	}
}

extern "C" int mgt_k_mamba_step(mgt_k_stream s, const mgt_k_ssd *d, int T, float *y, float *u, float *conv_state,
				float *ssm_state, const float *xbc, int ld, const float *dt_raw, const int32_t *seq,
				const int32_t *pos, const float *conv_w, const float *conv_b, int K,
				const float *dt_bias, const float *A_log, const float *D)
{
	const int di = d->nh * d->p;
	if (T <= 0 || di <= 0 || d->g <= 0)
		return 0;
	const step_geo G = { T, d->nh, d->p, d->g, d->n, di + 2 * d->g * d->n, K, ld, d->ld_dt };
	const cudaStream_t st = mgt_st(s);
	MGT_LAUNCH(step_conv_k, (unsigned)mgt_cdiv((size_t)G.CD, 128), 128, 0, st, u, conv_state, xbc, seq, pos,
		   conv_w, conv_b, G);
	MGT_LAUNCH(step_scan_k, (unsigned)mgt_cdiv((size_t)di, 128), 128, 0, st, y, ssm_state, u, dt_raw, seq, pos,
		   dt_bias, A_log, D, G);
	return mgt_k_rc();
}
