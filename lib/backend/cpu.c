/* lib/backend: the CPU reference backend (fp32, OpenBLAS sgemm, OpenMP threads).
 *
 * Parallelism: every op runs its own `omp parallel` with num_threads(be->threads); sgemm calls
 * made outside a parallel region use OpenBLAS's threads (set to the same count at create), calls
 * made inside one run single-threaded (OpenBLAS's OpenMP build), which is what attention wants.
 * Small ops stay on the calling thread (the `if` clauses), so a tiny model does not pay a fork per
 * op.
 *
 * Determinism: reductions over rows (bias gradients, norm weight gradients, embedding gradients)
 * are split by columns, each column summed over rows in row order, so their bits do not even
 * depend on the thread count; sumsq sums fixed chunks that depend only on n.  No atomics.
 *
 * This file holds the memory ops, the helpers the other files share (cpu_impl.h), the op table and
 * setup.  The ops live along kernels/' lines: linear layers in cpu_linear.c (CUDA: cuda_gemm.c),
 * embedding in cpu_embedding.c, the norms in cpu_norm.c, rope, activations, bias-dropout-add,
 * AdamW and the casts in cpu_elementwise.c, cross-entropy and sumsq in cpu_reduce.c, fp8 in
 * cpu_fp8.c, attention in cpu_attn.c, the Mixture-of-Experts row ops and grouped linears in
 * cpu_moe.c, the Mamba-2 mixer's conv, gated norm and one-token step in cpu_mamba.c (CUDA:
 * kernels/mamba.cu) and its scan in cpu_ssd.c (kernels/ssd.cu).
 */
#include "backend/cpu_impl.h"
#include "fp8/fp8.h"

#include <cblas.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void blas_warmup(mgt_backend *be);

#define PAR_MIN CPU_PAR_MIN
#define COLCH CPU_COLCH

/* ---- memory ---- */

void *mgt_cpu_alloc(mgt_backend *be, size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, cpu_zmax(bytes, 1)) != 0) {
		mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	memset(p, 0, bytes);
	return p;
}

void mgt_cpu_free(mgt_backend *be, void *p) { free(p); }

mgt_status mgt_cpu_upload(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
	return MGT_OK;
}

mgt_status mgt_cpu_download(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
	return MGT_OK;
}

void mgt_cpu_zero(mgt_backend *be, void *p, size_t bytes)
{
	const size_t chunk = (size_t)1 << 20;
	size_t nch = (bytes + chunk - 1) / chunk;
	unsigned char *c = p;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if (nch > 1)
	for (size_t k = 0; k < nch; k++) {
		size_t o = k * chunk, n = bytes - o < chunk ? bytes - o : chunk;
		memset(c + o, 0, n);
	}
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

void *mgt_cpu_reserve(mgt_backend *be, size_t bytes)
{
	void *p = mmap(NULL, cpu_zmax(bytes, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot map %zu bytes: %s", bytes, strerror(errno));
		return NULL;
	}
	return p;
}

void mgt_cpu_unreserve(mgt_backend *be, void *p, size_t bytes)
{
	if (p) munmap(p, cpu_zmax(bytes, 1));
}

/* Pages are backed when first written: nothing to do. */
mgt_status mgt_cpu_commit(mgt_backend *be, void *p, size_t bytes)
{
	(void)be, (void)p, (void)bytes;
	return MGT_OK;
}

void mgt_cpu_discard(mgt_backend *be, void *p, size_t bytes)
{
	uintptr_t a = (uintptr_t)p, e = a + bytes, pg = page_size();
	uintptr_t lo = (a + pg - 1) / pg * pg, hi = e / pg * pg;
	if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED)) lo = hi = e; /* memset all of it instead */
	memset(p, 0, lo - a);
	memset((void *)hi, 0, e - hi);
}

void mgt_cpu_sync(mgt_backend *be) {}

/* ---- helpers (cpu_impl.h) ---- */

void mgt_cpu_colsum_acc(mgt_backend *be, float *db, const float *x, int T, int n)
{
	int nch = (n + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)T * n > PAR_MIN && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		int c0 = ch * COLCH, cn = n - c0 < COLCH ? n - c0 : COLCH;
		double acc[COLCH] = {0};
		for (int t = 0; t < T; t++) {
			const float *row = x + (size_t)t * n + c0;
#pragma omp simd
			for (int c = 0; c < cn; c++)
				acc[c] += row[c];
		}
		for (int c = 0; c < cn; c++)
			db[c0 + c] += (float)acc[c];
	}
}

float *mgt_cpu_round_buf(mgt_backend *be, int k, size_t n)
{
	cpu_impl *im = be->impl;
	if (im->round_cap[k] < n) {
		float *p = realloc(im->round_buf[k], n * sizeof *p);
		if (!p) {
			mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes to round GEMM operands", n * 4);
			return NULL;
		}
		im->round_buf[k] = p;
		im->round_cap[k] = n;
	}
	return im->round_buf[k];
}

void mgt_cpu_narrow_colsum(mgt_backend *be, void *dst, mgt_elem_type t, const float *r, float *db, int T, int w)
{
	const size_t n = (size_t)T * (size_t)w;
	cpu_narrow(be, dst, t, r, n);
	const float *stored = db ? cpu_widen(be, 4, dst, t, n) : NULL;
	if (stored)
		mgt_cpu_colsum_acc(be, db, stored, T, w);
}

void mgt_cpu_copy(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	if (bytes)
		memcpy(dst, src, bytes);
}

/* ---- the table ---- */

#define CPU_OP_ENTRY(ret, n, params) .n = mgt_cpu_##n,
static const mgt_backend_ops cpu_ops = { .name = "cpu", MGT_BACKEND_OPS(CPU_OP_ENTRY) };

/* OpenBLAS's DYNAMIC_ARCH builds pick their kernels from the CPU model; a model newer than the
 * library (Debian 12's 0.3.21 on Emerald Rapids, model 0xCF) falls back to the Prescott (SSE3)
 * kernels, ten times slower than the AVX-512 ones.  When that happened and the user did not choose
 * with OPENBLAS_CORETYPE, choose from the CPU's features instead, through the library's own
 * re-initialization (gotoblas_dynamic_quit/init, exported by DYNAMIC_ARCH builds only, hence weak). */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static void blas_fix_coretype(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	const char *core = openblas_get_corename();
	if (getenv("OPENBLAS_CORETYPE") || !core || strcmp(core, "Prescott") != 0 || !gotoblas_dynamic_init ||
	    !gotoblas_dynamic_quit)
		return;
	__builtin_cpu_init();
	const char *want = NULL;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512cd"))
		want = "SkylakeX";
	else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		want = "Haswell";
	if (!want || setenv("OPENBLAS_CORETYPE", want, 0) != 0)
		return;
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
}

mgt_backend *mgt_backend_cpu_create(int threads)
{
	if (threads <= 0)
		threads = omp_get_num_procs();
	if (threads <= 0)
		threads = 1;
	mgt_backend *be = calloc(1, sizeof *be);
	cpu_impl *im = calloc(1, sizeof *im);
	void *scratch = NULL;
	if (!be || !im || posix_memalign(&scratch, 64, (size_t)threads * cpu_scratch_bytes) != 0) {
		free(be);
		free(im);
		mgt_err(MGT_ERR_NOMEM, "cpu backend: cannot allocate %d threads' scratch", threads);
		return NULL;
	}
	memset(scratch, 0, (size_t)threads * cpu_scratch_bytes);
	im->threads = threads;
	im->scratch = scratch;
	be->ops = &cpu_ops;
	be->threads = threads;
	be->host_memory = true;
	be->impl = im;
	blas_fix_coretype();
	mgt_cpu_blas_threads(be);
	blas_warmup(be);
	return be;
}

/* OpenBLAS allocates its GEMM buffers (tens of MiB) on a thread's first sgemm: do that now, from
 * a multi-threaded call and from inside a parallel region as attention does, so that memory is
 * part of the process's baseline rather than appearing mid-training (mgt-train reports the peak
 * RSS against the computed memory). */
static void blas_warmup(mgt_backend *be)
{
	/* wide enough (N) and deep enough (K) to fill OpenBLAS's packing panels; the inputs are
	 * calloc'd and only read, so they stay on the shared zero page and cost no RSS */
	enum { M = 128, N = 16384, K = 512 };
	int nt = be->threads;
	const float *in = calloc((size_t)N * K, sizeof(float));
	float *out = calloc((size_t)nt * M * N, sizeof(float));
	if (in && out) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, in, K, in, K, 0.0f, out, N);
#pragma omp parallel num_threads(nt)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, in, K, in, K, 0.0f,
			    out + (size_t)omp_get_thread_num() * M * N, N);
	}
	free((void *)in);
	free(out);
}

void mgt_cpu_destroy(mgt_backend *be)
{
	cpu_impl *im = be->impl;
	if (im) {
		free(im->scratch);
		for (int k = 0; k < CPU_ROUND_BUFS; k++)
			free(im->round_buf[k]);
	}
	free(im);
	free(be);
}

void mgt_backend_destroy(mgt_backend *be)
{
	if (be)
		be->ops->destroy(be);
}
