/* lib/backend: the CPU backend's elementwise ops (backend.h rope, bias_act_fwd / bias_act_bwd,
 * bda_fwd / bda_bwd, adamw, cast, widen, scale, add); CUDA twin kernels/elementwise.cu.
 */
#include "backend/cpu_impl.h"

#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN
#define COLCH CPU_COLCH

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
					cpu_load_row(x1, x + k0, qt, (size_t)kn);
					cpu_load_row(x2, x + half + k0, qt, (size_t)kn);
					rope_pairs(x1, x2, cs, sn, kn);
					cpu_store_row(qkv, qt, hd + k0, x1, kn);
					cpu_store_row(qkv, qt, hd + half + k0, x2, kn);
				}
		}
	}
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

CPU_INLINE float relu2_f(float z) { return z > 0.0f ? z * z : 0.0f; }
CPU_INLINE float relu2_grad(float z) { return z > 0.0f ? 2.0f * z : 0.0f; }

/* act: 0 GELU (erf), 1 SwiGLU, 2 GELU (tanh), 3 squared ReLU -- mgt_act_kind's values. */
CPU_INLINE void act_fwd_row_(float *yt, const float *xt, const float *b, int f, int act, bool hb)
{
	if (act == MGT_ACT_SQUARED_RELU) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			yt[c] = relu2_f(hb ? xt[c] + b[c] : xt[c]);
	} else if (act == MGT_ACT_GELU) {
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
	else if (act == MGT_ACT_SQUARED_RELU)
		b ? act_fwd_row_(yt, xt, b, f, MGT_ACT_SQUARED_RELU, true) : act_fwd_row_(yt, xt, b, f, MGT_ACT_SQUARED_RELU, false);
	else
		b ? act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU, true) : act_fwd_row_(yt, xt, b, f, MGT_ACT_GELU, false);
}

/* Per-thread row buffers of an activation op: xw floats for a 16-bit x row (widened), f for a
 * 16-bit y row; NULL when neither is 16-bit, *fail when they cannot be had. */
static float *act_rows(mgt_backend *be, mgt_elem_type xt, mgt_elem_type yt, int T, int xw, int f, size_t *per,
		       bool *fail)
{
	*per = (xt != MGT_DT_F32 ? (size_t)xw : 0) + (yt != MGT_DT_F32 ? (size_t)f : 0);
	float *rows = *per && T > 0 ? cpu_row_bufs(be, *per) : NULL;
	*fail = *per && T > 0 && !rows;
	return rows;
}

/* Row t of x (xw elements of type xt) as fp32: x's own row, or widened into r. */
static const float *act_x_row(const void *x, mgt_elem_type xt, float *r, int t, int xw)
{
	if (xt == MGT_DT_F32)
		return (const float *)x + (size_t)t * xw;
	cpu_load_row(r, (const uint16_t *)x + (size_t)t * xw, xt, (size_t)xw);
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
			cpu_store_row(y, yt, (size_t)t * f, y32, f);
	}
}

CPU_INLINE void act_bwd_row_(float *dxt, const float *gt, const float *xt, const float *b, int f,
			    int act, bool hb)
{
	if (act == MGT_ACT_SQUARED_RELU) {
#pragma omp simd
		for (int c = 0; c < f; c++)
			dxt[c] = gt[c] * relu2_grad(hb ? xt[c] + b[c] : xt[c]);
	} else if (act == MGT_ACT_GELU) {
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
	else if (act == MGT_ACT_SQUARED_RELU)
		b ? act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_SQUARED_RELU, true) : act_bwd_row_(dxt, gt, xt, b, f, MGT_ACT_SQUARED_RELU, false);
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
	const float *dy = cpu_widen(be, 5, dy16, gt, (size_t)T * (size_t)f);
	float *dx = cpu_out32(be, dx16, gt, n);
	if (fail || !dy || !dx)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * xw > PAR_MIN / 4)
	for (int t = 0; t < T; t++) {
		float *r = rows ? rows + (size_t)omp_get_thread_num() * per : NULL;
		act_bwd_row(dx + (size_t)t * xw, dy + (size_t)t * f, act_x_row(x, xt, r, t, xw), b, f, (int)act);
	}
	mgt_cpu_narrow_colsum(be, dx16, gt, dx, db, T, xw);
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
	const float *y = cpu_widen(be, 5, y16, yt, (size_t)T * (size_t)h); /* a 16-bit y widened first */
	if (!y)
		return;
	float *rows = rt == MGT_DT_F32 || T <= 0 ? NULL : cpu_row_bufs(be, 2 * (size_t)h);
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
			cpu_load_row(r32, (const uint16_t *)resid + o, rt, (size_t)h);
		bda_row(o32, resid ? r32 : NULL, y + o, b, h, key, e0 + (uint64_t)t * h, p, ks);
		cpu_store_row(out, rt, o, o32, h);
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
	const float *dout = cpu_widen(be, 5, dout16, dot, n);
	float *dy = cpu_out32(be, dy16, dyt, n);
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
	mgt_cpu_narrow_colsum(be, dy16, dyt, dy, db, T, h);
}


/* ---- optimizer ---- */

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



void mgt_cpu_cast(mgt_backend *be, void *dst, mgt_elem_type dt, const float *src, size_t n)
{
	uint16_t *h = dst;
	const bool bf = dt == MGT_DT_BF16;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		h[i] = bf ? mgt_f32_to_bf16(src[i]) : mgt_f32_to_f16(src[i]);
}

/* The widen op: dst [n] = the 16-bit src of type st as fp32 (exact). */
void mgt_cpu_widen(mgt_backend *be, float *dst, const void *src, mgt_elem_type st, size_t n)
{
	const uint16_t *h = src;
	const size_t ch = 16384; /* elements a task */
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i += ch)
		cpu_load_row(dst + i, h + i, st, n - i < ch ? n - i : ch);
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
