/* lib/backend: the CPU backend's fp8 ops (backend.h fp8_quantize, fp8_scale, fp8_transpose,
 * gemm_fp8), the emulation the CUDA backend is checked against; CUDA twin kernels/fp8.cu (and
 * cuBLASLt's fp8 GEMM in cuda_gemm.c).
 */
#include "backend/cpu_impl.h"
#include "fp8/fp8.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN


/* lib/fp8's cast, on x widened into rounding buffer 4 when 16-bit, in chunks across the threads:
 * each chunk's amax starts from 0 and the chunks' maxima fold into amax[0] with fmaxf (a maximum:
 * the same value in any order). */
void mgt_cpu_fp8_quantize(mgt_backend *be, uint8_t *q, const void *x, mgt_elem_type xt, size_t n, const float *scale,
			  mgt_fp8_format fmt, float *amax)
{
	const float *v = cpu_widen(be, 4, x, xt, n);
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
	float *r = mgt_cpu_round_buf(be, k, n);
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
	float *acc = mgt_cpu_round_buf(be, 4, mn);
	const float *A = k > 0 ? fp8_values(be, 0, a, af, (size_t)m * k) : NULL;
	const float *Bv = k > 0 ? fp8_values(be, 1, b, bf, (size_t)n * k) : NULL;
	if (!acc || (k > 0 && (!A || !Bv)))
		return;
	mgt_cpu_blas_threads(be);
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
