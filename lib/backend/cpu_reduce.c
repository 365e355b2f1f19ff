/* lib/backend: the CPU backend's reductions (backend.h xent_max, xent_stats, xent_loss, xent_bwd,
 * sumsq); CUDA twin kernels/reduce.cu.  Sums run in double in a fixed order (deterministic).
 */
#include "backend/cpu_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN

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
	cpu_load_row(r, (const uint16_t *)logits + (size_t)t * V, lt, (size_t)V);
	return r;
}

/* The row buffers a [T, V] op on 16-bit logits needs (NULL for fp32 ones); *fail when they could
 * not be had (the failure recorded). */
static float *xent_rows(mgt_backend *be, mgt_elem_type lt, int T, int V, bool *fail)
{
	float *rows = lt == MGT_DT_F32 || T <= 0 || V <= 0 ? NULL : cpu_row_bufs(be, (size_t)V);
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
			cpu_store_row(dlogits, lty, (size_t)t * V, dt, V);
	}
}


/* ---- reductions ---- */

double mgt_cpu_sumsq(mgt_backend *be, const float *x, size_t n)
{
	/* At most 256 chunks whose bounds depend only on n, summed in chunk order. */
	enum { NCH = 256 };
	size_t chunk = cpu_zmax(8192, (n + NCH - 1) / NCH);
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
