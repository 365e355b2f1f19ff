/* lib/backend: the CPU backend's Mixture-of-Experts ops (backend.h, "Mixture of Experts"): the
 * row gather / combine of the token permutation (megatron/core/transformer/moe/moe_utils.py
 * permute / unpermute), the per-row scale by routing probabilities and its backward dot product,
 * and the experts' grouped linear layers (megatron/core/transformer/moe/experts.py).
 *
 * Rows run in parallel (OpenMP over rows, one thread per row, so results do not depend on the
 * thread count); nothing is shared between rows, no atomics.  rows_combine adds a token's copies
 * in j order into a zero row; rows_dot sums the products of a row in double.
 *
 * The grouped linears call linear_fwd / linear_bwd (cpu.c) once per group with rows, so each
 * group gets the very same sgemm calls and bf16/fp16 operand rounding as a linear layer of its
 * own: the grouped result is bitwise the per-group one.  Groups with no rows are skipped.
 */
#include "backend/cpu_impl.h"

#include <omp.h>
#include <string.h>

void mgt_cpu_rows_gather(mgt_backend *be, float *dst, const float *src, const int32_t *idx, int N, int h)
{
	if (N <= 0 || h <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * h > CPU_PAR_MIN)
	for (int i = 0; i < N; i++)
		memcpy(dst + (size_t)i * h, src + (size_t)idx[i] * h, (size_t)h * sizeof *dst);
}

void mgt_cpu_rows_combine(mgt_backend *be, float *dst, const float *src, const int32_t *slot, int T, int k,
			  int h)
{
	if (T <= 0 || h <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) \
	if ((size_t)T * h * (k > 0 ? k : 1) > CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		float *d = dst + (size_t)t * h;
		memset(d, 0, (size_t)h * sizeof *d);
		for (int j = 0; j < k; j++) {
			const int32_t s = slot[(size_t)t * k + j];
			if (s < 0)
				continue;
			const float *r = src + (size_t)s * h;
#pragma omp simd
			for (int c = 0; c < h; c++)
				d[c] += r[c];
		}
	}
}

void mgt_cpu_rows_scale(mgt_backend *be, float *y, const float *x, const float *w, int N, int f)
{
	if (N <= 0 || f <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * f > CPU_PAR_MIN)
	for (int i = 0; i < N; i++) {
		const float wi = w[i];
		const float *xi = x + (size_t)i * f;
		float *yi = y + (size_t)i * f;
#pragma omp simd
		for (int c = 0; c < f; c++)
			yi[c] = wi * xi[c];
	}
}

void mgt_cpu_rows_dot(mgt_backend *be, float *out, const float *a, const float *b, int N, int f)
{
	if (N <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * f > CPU_PAR_MIN)
	for (int i = 0; i < N; i++) {
		const float *ai = a + (size_t)i * f, *bi = b + (size_t)i * f;
		double acc = 0;
#pragma omp simd reduction(+ : acc)
		for (int c = 0; c < f; c++)
			acc += (double)ai[c] * bi[c];
		out[i] = (float)acc;
	}
}

void mgt_cpu_linear_fwd_grouped(mgt_backend *be, float *y, const float *x, const void *const *w, mgt_elem_type wt,
				const int *rows, int G, int in, int out)
{
	size_t r = 0;
	for (int g = 0; g < G; g++) {
		if (rows[g] <= 0)
			continue;
		mgt_cpu_linear_fwd(be, y + r * out, MGT_DT_F32, x + r * in, MGT_DT_F32, w[g], wt, NULL, rows[g], in, out);
		r += (size_t)rows[g];
	}
}

void mgt_cpu_linear_bwd_grouped(mgt_backend *be, float *dx, float *const *dw, const float *dy, const float *x,
				const void *const *w, mgt_elem_type wt, const int *rows, int G, int in, int out)
{
	size_t r = 0;
	for (int g = 0; g < G; g++) {
		if (rows[g] <= 0)
			continue;
		mgt_cpu_linear_bwd(be, dx ? dx + r * in : NULL, MGT_DT_F32, dw[g], NULL, dy + r * out, MGT_DT_F32,
				   x + r * in, MGT_DT_F32, w[g], wt, rows[g], in, out);
		r += (size_t)rows[g];
	}
}
