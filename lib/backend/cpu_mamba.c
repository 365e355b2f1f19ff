/* lib/backend: the CPU backend's Mamba-2 mixer ops around the scan (backend.h mamba_conv_fwd,
 * mamba_conv_bwd, mamba_gated_norm_fwd, mamba_gated_norm_bwd) and the one-token step of
 * inference (mamba_step): the causal depthwise conv1d + SiLU
 * over xBC (Megatron-Core megatron/core/ssm/mamba_mixer.py, causal_conv1d_fn with activation
 * "silu") and the gated RMSNorm over groups (mamba_ssm ops/triton/layernorm_gated.py RMSNormGated,
 * norm_before_gate=False).  The scan itself is cpu_ssd.c.
 *
 * Determinism: weight gradients are column-split sums over rows in row order (as cpu_norm.c), so
 * their bits do not depend on the thread count.
 */
#include "backend/cpu_impl.h"

#include <math.h>
#include <omp.h>

#define PAR_MIN CPU_PAR_MIN
#define COLCH CPU_COLCH

CPU_INLINE float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }
/* silu(v) = v sigmoid(v), one rounding fewer than v * sigmoidf_(v); -0 for v below about -88. */
CPU_INLINE float siluf_(float v) { return v / (1.0f + expf(-v)); }

/* The first position row (i, j) may read: its document's start (0 without seg_start). */
CPU_INLINE int doc_lo(const int32_t *seg, int i, int b, int j) { return seg ? seg[(size_t)i * b + j] : 0; }

/* u[c] = bias[c] + sum_k w[c][k] x[i - (K-1) + k, c] for c < CD, positions before lo read as 0. */
static void conv_pre(float *u, const float *x, int ld, const float *w, const float *bias, int i, int j, int b,
		     int CD, int K, int lo)
{
	for (int c = 0; c < CD; c++)
		u[c] = bias[c];
	for (int k = 0; k < K; k++) {
		const int ip = i - (K - 1) + k;
		if (ip < lo)
			continue;
		const float *xr = x + ((size_t)ip * b + j) * (size_t)ld;
		for (int c = 0; c < CD; c++)
			u[c] += w[(size_t)c * K + k] * xr[c];
	}
}

void mgt_cpu_mamba_conv_fwd_f32(mgt_backend *be, float *y, const float *x, int ld_x, const float *w, const float *bias,
			    const int32_t *seg_start, int L, int b, int CD, int K)
{
	const int T = L * b;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * CD * K > PAR_MIN)
	for (int t = 0; t < T; t++) {
		const int i = t / b, j = t % b;
		float *yr = y + (size_t)t * CD;
		conv_pre(yr, x, ld_x, w, bias, i, j, b, CD, K, doc_lo(seg_start, i, b, j));
		for (int c = 0; c < CD; c++)
			yr[c] = siluf_(yr[c]);
	}
}

/* dx[i', c] = sum_k w[c][k] g[i' + (K-1) - k, c] over the outputs i = i' + (K-1) - k < L whose
 * window reaches i' (i' >= their document start). */
static void conv_dx(mgt_backend *be, float *dx, int ld_x, const float *g, const float *w, const int32_t *seg,
		    int L, int b, int CD, int K)
{
	const int T = L * b;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * CD * K > PAR_MIN)
	for (int t = 0; t < T; t++) {
		const int ip = t / b, j = t % b;
		float *dr = dx + (size_t)t * ld_x;
		for (int c = 0; c < CD; c++)
			dr[c] = 0.0f;
		for (int k = K - 1; k >= 0; k--) {
			const int i = ip + (K - 1) - k;
			if (i >= L || doc_lo(seg, i, b, j) > ip)
				continue;
			const float *gr = g + ((size_t)i * b + j) * CD;
			for (int c = 0; c < CD; c++)
				dr[c] += w[(size_t)c * K + k] * gr[c];
		}
	}
}

/* dw[c][k] += sum_t g[t, c] x[i - (K-1) + k, c], db[c] += sum_t g[t, c]: column chunks, rows in order. */
static void conv_dwdb(mgt_backend *be, float *dw, float *db, const float *g, const float *x, int ld_x,
		      const int32_t *seg, int L, int b, int CD, int K)
{
	const int T = L * b, nch = (CD + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) if ((size_t)T * CD * K > PAR_MIN && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		const int c0 = ch * COLCH, cn = CD - c0 < COLCH ? CD - c0 : COLCH;
		double acc[COLCH];
		for (int k = -1; k < K; k++) { /* k = -1: the bias */
			for (int c = 0; c < cn; c++)
				acc[c] = 0;
			for (int t = 0; t < T; t++) {
				const int i = t / b, j = t % b, ip = i - (K - 1) + k;
				const float *gr = g + (size_t)t * CD + c0;
				if (k < 0) {
					for (int c = 0; c < cn; c++)
						acc[c] += gr[c];
					continue;
				}
				if (ip < doc_lo(seg, i, b, j))
					continue;
				const float *xr = x + ((size_t)ip * b + j) * (size_t)ld_x + c0;
				for (int c = 0; c < cn; c++)
					acc[c] += (double)gr[c] * xr[c];
			}
			for (int c = 0; c < cn; c++) {
				if (k < 0)
					db[c0 + c] += (float)acc[c];
				else
					dw[(size_t)(c0 + c) * K + k] += (float)acc[c];
			}
		}
	}
}

/* g = dy * silu'(u) (u recomputed) in rounding buffer 4, then dx, dw and db from it. */
void mgt_cpu_mamba_conv_bwd_f32(mgt_backend *be, float *dx, float *dw, float *db, const float *dy, const float *x,
			    int ld_x, const float *w, const float *bias, const int32_t *seg_start, int L, int b, int CD,
			    int K)
{
	const int T = L * b;
	if (T <= 0 || CD <= 0)
		return;
	float *g = mgt_cpu_round_buf(be, 4, (size_t)T * CD);
	if (!g)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * CD * K > PAR_MIN)
	for (int t = 0; t < T; t++) {
		const int i = t / b, j = t % b;
		float *gr = g + (size_t)t * CD;
		const float *dyr = dy + (size_t)t * CD;
		conv_pre(gr, x, ld_x, w, bias, i, j, b, CD, K, doc_lo(seg_start, i, b, j));
		for (int c = 0; c < CD; c++) {
			const float u = gr[c], s = sigmoidf_(u);
			gr[c] = dyr[c] * (s * (1.0f + u * (1.0f - s)));
		}
	}
	conv_dx(be, dx, ld_x, g, w, seg_start, L, b, CD, K);
	conv_dwdb(be, dw, db, g, x, ld_x, seg_start, L, b, CD, K);
}

/* ---- gated RMSNorm over groups ---- */

void mgt_cpu_mamba_gated_norm_fwd_f32(mgt_backend *be, float *out, float *rstd, const float *y, const float *z, int ld_z,
				  const float *w, int T, int di, int g, float eps)
{
	const int gs = di / g;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * di > PAR_MIN)
	for (int t = 0; t < T; t++) {
		for (int gi = 0; gi < g; gi++) {
			const size_t o = (size_t)t * di + (size_t)gi * gs, oz = (size_t)t * ld_z + (size_t)gi * gs;
			float *orow = out + o;
			double ss = 0;
			for (int c = 0; c < gs; c++) {
				const float v = y[o + c] * siluf_(z[oz + c]);
				orow[c] = v;
				ss += (double)v * v;
			}
			const float r = (float)(1.0 / sqrt(ss / gs + eps));
			rstd[(size_t)t * g + gi] = r;
			for (int c = 0; c < gs; c++)
				orow[c] = orow[c] * r * w[gi * gs + c];
		}
	}
}

/* dw first (column chunks, rows in order), then dy and dz row by row:
 *   v = y silu(z), vh = v r, gg = dout w, dv = r (gg - vh mean_group(gg vh)),
 *   dy = dv silu(z), dz = dv y silu'(z),  silu'(z) = s (1 + z (1 - s)), s = sigmoid(z). */
/* Row t's part of gated_norm_bwd's dw over the column chunk [c0, c0 + cn): acc[c] += dout v r,
 * v = y silu(z), r = rstd_t[the column's group]; dout, y, z point at the chunk's first column of
 * the row (fp32), rstd_t at the row's g values.  One expression for the fp32 op and the 16-bit
 * one's widened rows, so their bits agree. */
CPU_INLINE void gn_bwd_dw_row(double *acc, const float *dout, const float *y, const float *z, const float *rstd_t,
			      int c0, int cn, int gs)
{
	for (int c = 0; c < cn; c++) {
		const float v = y[c] * siluf_(z[c]);
		acc[c] += (double)dout[c] * (v * rstd_t[(c0 + c) / gs]);
	}
}

/* Row t of gated_norm_bwd: dy [di] and dz [di] from the row's dout, y, z [di] (fp32), the weight
 * w [di] and rstd_t [g] (per group of di / g columns: m = mean of dout w v r, dv = r (dout w -
 * v r m), dy = dv silu(z), dz = dv y silu'(z)).  z is read before dz is written, column by
 * column. */
CPU_INLINE void gn_bwd_row(float *dy, float *dz, const float *dout, const float *y, const float *z, const float *w,
			   const float *rstd_t, int di, int g)
{
	const int gs = di / g;
	for (int gi = 0; gi < g; gi++) {
		const int o = gi * gs;
		const float r = rstd_t[gi];
		double sgv = 0;
		for (int c = 0; c < gs; c++) {
			const float v = y[o + c] * siluf_(z[o + c]);
			sgv += (double)(dout[o + c] * w[o + c]) * (v * r);
		}
		const float m = (float)(sgv / gs);
		for (int c = 0; c < gs; c++) {
			const float zc = z[o + c], s = sigmoidf_(zc), sz = siluf_(zc), v = y[o + c] * sz;
			const float dv = r * (dout[o + c] * w[o + c] - v * r * m);
			dy[o + c] = dv * sz;
			dz[o + c] = dv * y[o + c] * (s * (1.0f + zc * (1.0f - s)));
		}
	}
}

void mgt_cpu_mamba_gated_norm_bwd_f32(mgt_backend *be, float *dy, float *dz, float *dw, const float *dout, const float *y,
				      const float *z, int ld_z, const float *w, const float *rstd, int T, int di, int g)
{
	const int gs = di / g, nch = (di + COLCH - 1) / COLCH;
	const bool par = (size_t)T * di > PAR_MIN;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) if (par && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		const int c0 = ch * COLCH, cn = di - c0 < COLCH ? di - c0 : COLCH;
		double acc[COLCH] = { 0 };
		for (int t = 0; t < T; t++) {
			const size_t o = (size_t)t * di + c0, oz = (size_t)t * ld_z + c0;
			gn_bwd_dw_row(acc, dout + o, y + o, z + oz, rstd + (size_t)t * g, c0, cn, gs);
		}
		for (int c = 0; c < cn; c++)
			dw[c0 + c] += (float)acc[c];
	}
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (par)
	for (int t = 0; t < T; t++) {
		const size_t o = (size_t)t * di, oz = (size_t)t * ld_z;
		gn_bwd_row(dy + o, dz + oz, dout + o, y + o, z + oz, w, rstd + (size_t)t * g, di, g);
	}
}

/* r[0..n) = the 16-bit elements h[0..n) of type et (bf16 or fp16) widened exactly: bf16 by its
 * bits shifted into the high half (mgt_bf16_to_f32's definition, here inline so that the loop
 * vectorises instead of calling it per element), fp16 by mgt_f16_to_f32. */
CPU_INLINE void widen_row(float *r, const uint16_t *h, mgt_elem_type et, int n)
{
	if (et == MGT_DT_BF16)
		for (int c = 0; c < n; c++)
			r[c] = cpu_u2f((uint32_t)h[c] << 16);
	else
		for (int c = 0; c < n; c++)
			r[c] = mgt_f16_to_f32(h[c]);
}

/* Row v [n] (fp32) stored at element off of the 16-bit h of type et, rounded to nearest even:
 * bf16 by mgt_f32_to_bf16_inline (the loop not calling out per element), fp16 by mgt_f32_to_f16. */
CPU_INLINE void narrow_row(void *h, mgt_elem_type et, size_t off, const float *v, int n)
{
	uint16_t *o = (uint16_t *)h + off;
	if (et == MGT_DT_BF16)
		for (int c = 0; c < n; c++)
			o[c] = mgt_f32_to_bf16_inline(v[c]);
	else
		for (int c = 0; c < n; c++)
			o[c] = mgt_f32_to_f16(v[c]);
}

void mgt_cpu_mamba_gated_norm_bwd_16(mgt_backend *be, void *dy, void *dz, float *dw, const void *dout, const void *y,
				     const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g,
				     mgt_elem_type et)
{
	const int gs = di / g, nch = (di + COLCH - 1) / COLCH;
	const bool par = (size_t)T * di > PAR_MIN;
	const uint16_t *dout16 = dout, *y16 = y, *z16 = z;
	float *rows = cpu_row_bufs(be, 5 * (size_t)di); /* a thread's dout, y, z, dy, dz rows */
	if (!rows)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) if (par && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		const int c0 = ch * COLCH, cn = di - c0 < COLCH ? di - c0 : COLCH;
		double acc[COLCH] = { 0 };
		float a[COLCH], b[COLCH], c[COLCH];
		for (int t = 0; t < T; t++) {
			const size_t o = (size_t)t * di + c0, oz = (size_t)t * ld_z + c0;
			widen_row(a, dout16 + o, et, cn);
			widen_row(b, y16 + o, et, cn);
			widen_row(c, z16 + oz, et, cn);
			gn_bwd_dw_row(acc, a, b, c, rstd + (size_t)t * g, c0, cn, gs);
		}
		for (int k = 0; k < cn; k++)
			dw[c0 + k] += (float)acc[k];
	}
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (par)
	for (int t = 0; t < T; t++) {
		float *r = rows + (size_t)omp_get_thread_num() * 5 * (size_t)di;
		const size_t o = (size_t)t * di, oz = (size_t)t * ld_z;
		widen_row(r, dout16 + o, et, di);
		widen_row(r + di, y16 + o, et, di);
		widen_row(r + 2 * (size_t)di, z16 + oz, et, di);
		gn_bwd_row(r + 3 * (size_t)di, r + 4 * (size_t)di, r, r + di, r + 2 * (size_t)di, w, rstd + (size_t)t * g, di, g);
		narrow_row(dy, et, o, r + 3 * (size_t)di, di);
		narrow_row(dz, et, oz, r + 4 * (size_t)di, di);
	}
}

/* softplus as the scan kernels compute it: v above 20 is v itself. */
CPU_INLINE float softplusf_(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

/* Row t of mamba_step: the conv over the kept rows hist [K-1, CD] and xbc, into u [CD], then
 * the kept rows shifted. */
static void step_conv(float *u, float *hist, const float *xbc, const float *w, const float *bias, int CD, int K)
{
	for (int c = 0; c < CD; c++) {
		float a = bias[c];
		for (int k = 0; k < K - 1; k++)
			a += w[(size_t)c * K + k] * hist[(size_t)k * CD + c];
		a += w[(size_t)c * K + K - 1] * xbc[c];
		u[c] = siluf_(a);
	}
	for (int k = 0; k + 1 < K - 1; k++)
		for (int c = 0; c < CD; c++)
			hist[(size_t)k * CD + c] = hist[(size_t)(k + 1) * CD + c];
	for (int c = 0; K > 1 && c < CD; c++)
		hist[(size_t)(K - 2) * CD + c] = xbc[c];
}

/* One head of mamba_step: S [p, n] advanced by the token, y [p] written. */
static void step_head(float *y, float *S, const float *x, const float *B, const float *C, float dt, float A, float D,
		      int p, int n)
{
	const float a = expf(dt * A);
	for (int i = 0; i < p; i++) {
		float acc = 0;
		for (int j = 0; j < n; j++) {
			float *s = S + (size_t)i * n + j;
			*s = a * *s + dt * x[i] * B[j];
			acc += *s * C[j];
		}
		y[i] = acc + D * x[i];
	}
}

void mgt_cpu_mamba_step(mgt_backend *be, const mgt_ssd *d, int T, float *y, float *u, float *conv_state, float *ssm_state,
			const float *xbc, int ld, const float *dt_raw, const int32_t *seq, const int32_t *pos,
			const float *conv_w, const float *conv_b, int K, const float *dt_bias, const float *A_log, const float *D)
{
	(void)be;
	const int nh = d->nh, p = d->p, g = d->g, n = d->n, di = nh * p, CD = di + 2 * g * n, hpg = nh / g;
	for (int t = 0; t < T; t++) {
		const int b = seq[t];
		float *hist = conv_state + (size_t)b * (size_t)(K - 1) * CD, *S = ssm_state + (size_t)b * (size_t)nh * p * n;
		float *ut = u + (size_t)t * CD;
		if (pos[t] == 0) {
			memset(hist, 0, (size_t)(K - 1) * CD * sizeof *hist);
			memset(S, 0, (size_t)nh * p * n * sizeof *S);
		}
		step_conv(ut, hist, xbc + (size_t)t * ld, conv_w, conv_b, CD, K);
		for (int h = 0; h < nh; h++) {
			const int gi = h / hpg;
			const float dt = softplusf_(dt_raw[(size_t)t * d->ld_dt + h] + dt_bias[h]), A = -expf(A_log[h]);
			step_head(y + (size_t)t * di + (size_t)h * p, S + (size_t)h * p * n, ut + (size_t)h * p, ut + di + (size_t)gi * n,
				  ut + di + (size_t)g * n + (size_t)gi * n, dt, A, D[h], p, n);
		}
	}
}
