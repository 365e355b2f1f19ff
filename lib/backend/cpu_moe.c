/* lib/backend: the CPU backend's Mixture-of-Experts ops (backend.h, "Mixture of Experts"): the
 * row gather / combine of the token permutation (megatron/core/transformer/moe/moe_utils.py
 * permute / unpermute), the per-row scale by routing probabilities and its backward dot product,
 * and the experts' grouped linear layers (megatron/core/transformer/moe/experts.py).
 *
 * Rows run in parallel (OpenMP over rows, one thread per row, so results do not depend on the
 * thread count); nothing is shared between rows, no atomics.  16-bit rows are read as fp32 and
 * results rounded once when stored (cpu_ld / cpu_st).  rows_combine adds a token's copies
 * in j order into a zero row; rows_dot sums the products of a row in double.
 *
 * The grouped linears are lib/backend/grouped.c's: linear_fwd / linear_bwd (cpu.c) once per group
 * with rows, so each group gets the very same sgemm calls and bf16/fp16 operand rounding as a
 * linear layer of its own.
 */
#include "backend/cpu_impl.h"

#include <omp.h>
#include <string.h>

void mgt_cpu_rows_gather(mgt_backend *be, void *dst, const void *src, mgt_elem_type t, const int32_t *idx, int N,
			 int h)
{
	if (N <= 0 || h <= 0)
		return;
	const size_t rb = (size_t)h * mgt_elem_size(t);
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * h > CPU_PAR_MIN)
	for (int i = 0; i < N; i++)
		memcpy((char *)dst + (size_t)i * rb, (const char *)src + (size_t)idx[i] * rb, rb);
}

/* acc[0..n) += the n elements of x of type t from element off (fp32 values). */
static void add_elems(float *acc, const void *x, mgt_elem_type t, size_t off, int n)
{
	if (t == MGT_DT_F32) {
		const float *r = (const float *)x + off;
#pragma omp simd
		for (int c = 0; c < n; c++)
			acc[c] += r[c];
		return;
	}
	for (int c = 0; c < n; c++)
		acc[c] += cpu_ld(x, t, off + (size_t)c);
}

enum { COMBINE_COLS = 256 }; /* columns of a token summed at once */

void mgt_cpu_rows_combine(mgt_backend *be, void *dst, const void *src, mgt_elem_type t, const int32_t *slot, int T,
			  int k, int h)
{
	if (T <= 0 || h <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) \
	if ((size_t)T * h * (k > 0 ? k : 1) > CPU_PAR_MIN)
	for (int tk = 0; tk < T; tk++)
		for (int c0 = 0; c0 < h; c0 += COMBINE_COLS) {
			const int n = h - c0 < COMBINE_COLS ? h - c0 : COMBINE_COLS;
			float acc[COMBINE_COLS] = { 0 };
			for (int j = 0; j < k; j++) {
				const int32_t s = slot[(size_t)tk * k + j];
				if (s >= 0)
					add_elems(acc, src, t, (size_t)s * h + c0, n);
			}
			for (int c = 0; c < n; c++)
				cpu_st(dst, t, (size_t)tk * h + c0 + c, acc[c]);
		}
}

void mgt_cpu_rows_scale(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const float *w, int N, int f)
{
	if (N <= 0 || f <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * f > CPU_PAR_MIN)
	for (int i = 0; i < N; i++) {
		const float wi = w[i];
		const size_t o = (size_t)i * f;
		if (t == MGT_DT_F32) {
			const float *xi = (const float *)x + o;
			float *yi = (float *)y + o;
#pragma omp simd
			for (int c = 0; c < f; c++)
				yi[c] = wi * xi[c];
		} else {
			for (size_t c = o; c < o + (size_t)f; c++)
				cpu_st(y, t, c, wi * cpu_ld(x, t, c));
		}
	}
}

void mgt_cpu_rows_dot(mgt_backend *be, float *out, const void *a, const void *b, mgt_elem_type t, int N, int f)
{
	if (N <= 0)
		return;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)N * f > CPU_PAR_MIN)
	for (int i = 0; i < N; i++) {
		double acc = 0;
		const size_t o = (size_t)i * f;
		if (t == MGT_DT_F32) {
			const float *ai = (const float *)a + o, *bi = (const float *)b + o;
#pragma omp simd reduction(+ : acc)
			for (int c = 0; c < f; c++)
				acc += (double)ai[c] * bi[c];
		} else {
			for (size_t c = o; c < o + (size_t)f; c++)
				acc += (double)cpu_ld(a, t, c) * cpu_ld(b, t, c);
		}
		out[i] = (float)acc;
	}
}

void mgt_cpu_linear_fwd_grouped(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const void *const *w,
				mgt_elem_type wt, const int *rows, int G, int in, int out)
{
	mgt_backend_grouped_fwd(be, y, x, t, w, wt, rows, G, in, out);
}

void mgt_cpu_linear_bwd_grouped(mgt_backend *be, void *dx, float *const *dw, const void *dy, const void *x,
				mgt_elem_type t, const void *const *w, mgt_elem_type wt, const int *rows, int G, int in,
				int out)
{
	mgt_backend_grouped_bwd(be, dx, dw, dy, x, t, w, wt, rows, G, in, out);
}
