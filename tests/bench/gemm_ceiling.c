/* tests/bench/gemm_ceiling.c: the GEMM and memory ceilings of the CUDA backend, through mgt's own
 * op table (what mgt-train can reach), for tests/bench/gpu.sh's MFU-vs-ceiling column.
 *
 *  - linear_fwd y[T, out] = x[T, in] . w[out, in]^T with T = in = out = 8192 (2*T*in*out FLOPs)
 *    in bf16, fp16 and fp32 (be->precision): 3 warm-up calls, then 20 timed ones, each between
 *    be->ops->sync calls, timed with clock_gettime(CLOCK_MONOTONIC); median and best.  "gemm"
 *    lines: fp32 x, w and y, so that under bf16/fp16 each call includes the backend's fp32 ->
 *    bf16/fp16 casts of both operands (mgt-plan --gemm-bench reads these lines and takes the
 *    casts' traffic off).  "gemm-typed" lines: x, w and y already bf16, as mgt-train --bf16's
 *    layers call it (16-bit weight copy and activations): the GEMM alone, the ceiling
 *    tests/bench/gpu.sh measures MFU against (cuBLASLt writes the 16-bit y); "gemm-typed-blocks"
 *    lines: the same with MGT_GEMM_D16=0 (the y through fp32 blocks and a cast).  Also GPT-2 small's MLP and output-layer shapes and
 *    a llama-3.2-1b MLP shape, shapes training meets.
 *  - gemm_fp8 (the fp8 linears' GEMM, cuBLASLt TN) at 8192^3 e4m3 x e4m3 with fast accumulation
 *    (the forward: "gemm fp8 8192^3" lines, which mgt-plan --gemm-bench reads) and e4m3 x e5m2
 *    with the split accumulator (dgrad and wgrad), and llama's fc1 shapes; on GPUs with fp8.
 *  - add y += x on two 1 GiB fp32 buffers: bytes moved = 3 GiB (reads x and y, writes y), the
 *    device memory bandwidth as an elementwise op sees it.
 *  - attention (attn_fwd, attn_bwd) on tensor cores in bf16 at the shapes of tests/bench/gpu.sh's
 *    models (gpt2-124m: s 1024, b 8, 12 heads of 64, with and without its attention dropout 0.1;
 *    llama-3.2-1b: s 2048, b 4, 8 groups of 4 heads of 64), with the kernel implementations
 *    (MGT_ATTN_KERNEL=mma and mma-nocp, mgt-train(1)), each with bf16 qkv, out, dout and dqkv (as
 *    mgt-train --bf16 calls it) and with fp32 ones (the op converts); FLOPs as FlashAttention
 *    counts them for a causal mask: forward 4 b s^2 H d / 2, backward 2.5 times that.
 * Inputs are random (never zeros: they run faster than real data), uploaded once; the outputs are
 * checked to be finite.  Prints "gemm bf16 8192^3: X TFLOP/s ..." lines; exit 77 without a CUDA
 * device, 1 on an error.  A 300 s alarm ends it if the device hangs. */
#include "backend/backend.h"
#include "../unit/attn_calls.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

static mgt_backend *be;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fail(const char *what)
{
	printf("gemm_ceiling: error: %s: %s\n", what, mgt_err_msg());
	exit(1);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float *upload_random(size_t n, double scale)
{
	float *h = malloc(n * sizeof *h);
	if (!h) {
		printf("gemm_ceiling: error: host out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		h[i] = (float)(scale * ((double)(rng >> 11) / 4503599627370496.0 - 1.0));
	}
	float *d = be->ops->alloc(be, n * sizeof *d);
	if (!d)
		fail("device alloc");
	if (be->ops->upload(be, d, h, n * sizeof *d) != MGT_OK)
		fail("upload");
	free(h);
	return d;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* the first k elements of d are finite */
static void check_finite(const float *d, size_t k, const char *what)
{
	float h[4096];
	if (k > 4096)
		k = 4096;
	if (be->ops->download(be, h, d, k * sizeof *h) != MGT_OK)
		fail(what);
	for (size_t i = 0; i < k; i++)
		if (!isfinite(h[i])) {
			printf("gemm_ceiling: error: %s: non-finite output %g at %zu\n", what, h[i], i);
			exit(1);
		}
}

enum { WARM = 3, REPS = 20 };

/* A 16-bit copy (type t) of the n fp32 values at x, or x itself when t is MGT_DT_F32. */
static void *typed(const float *x, size_t n, mgt_elem_type t)
{
	if (t == MGT_DT_F32)
		return (void *)x;
	void *c = be->ops->alloc(be, n * 2);
	if (!c)
		fail("device alloc");
	be->ops->cast(be, c, t, x, n);
	return c;
}

static void free_typed(void *c, const float *x)
{
	if (c != x)
		be->ops->free(be, c);
}

/* GEMM TFLOP/s of linear_fwd; typed: x, w and y in the precision's 16-bit type, as mgt-train's
 * --bf16/--fp16 layers call it (no operand casts), else fp32 (the op casts both operands). */
static double gemm(mgt_precision prec, int T, int in, int out, const char *label, bool typed_io)
{
	float *x = upload_random((size_t)T * in, 1.0), *w = upload_random((size_t)out * in, 0.05);
	float *y = be->ops->alloc(be, (size_t)T * out * sizeof *y);
	if (!y)
		fail("device alloc");
	be->precision = prec;
	const mgt_elem_type t = typed_io ? mgt_precision_dtype(prec) : MGT_DT_F32;
	const char *d16 = getenv("MGT_GEMM_D16");
	const bool blocks = d16 && strcmp(d16, "0") == 0;
	void *xt = typed(x, (size_t)T * in, t), *wt = typed(w, (size_t)out * in, t);
	double t_[REPS];
	for (int i = 0; i < WARM + REPS; i++) {
		be->ops->sync(be);
		double t0 = now();
		be->ops->linear_fwd(be, y, t, xt, t, wt, t, NULL, T, in, out);
		be->ops->sync(be);
		if (i >= WARM)
			t_[i - WARM] = now() - t0;
	}
	be->precision = MGT_PREC_FP32;
	if (t == MGT_DT_F32)
		check_finite(y, (size_t)T * out, "linear_fwd");
	qsort(t_, REPS, sizeof *t_, cmpd);
	double flops = 2.0 * T * in * out, med = (t_[REPS / 2 - 1] + t_[REPS / 2]) / 2;
	const char *pn = prec == MGT_PREC_BF16 ? "bf16" : prec == MGT_PREC_FP16 ? "fp16" : "fp32";
	printf("%s %s %s: %.1f TFLOP/s (median of %d, %.3f ms; best %.1f TFLOP/s)%s\n",
	       !typed_io ? "gemm" : blocks ? "gemm-typed-blocks" : "gemm-typed", pn, label,
	       flops / med / 1e12, REPS, med * 1e3, flops / t_[0] / 1e12,
	       prec == MGT_PREC_FP32 ? "" : typed_io ? " 16-bit x, w, y" : " incl. operand casts");
	fflush(stdout);
	free_typed(xt, x), free_typed(wt, w);
	be->ops->free(be, x);
	be->ops->free(be, w);
	be->ops->free(be, y);
	return flops / med / 1e12;
}

/* TFLOP/s of gemm_fp8 as the fp8 linears call it: A [m, k] and B [n, k] fp8 bytes (random
 * values cast with scale 1 on the device, so no NaN), scale_inv 1, a bf16 D [n, m]; af x bf: e4m3
 * x e4m3 with fast accumulation (the forward) or e4m3 x e5m2 with the split accumulator (dgrad). */
static double gemm_fp8(int m, int n, int k, bool e5m2_b, const char *label)
{
	float *a32 = upload_random((size_t)m * k, 4.0), *b32 = upload_random((size_t)n * k, 4.0);
	uint8_t *a = be->ops->alloc(be, (size_t)m * k), *b = be->ops->alloc(be, (size_t)n * k);
	float *one = upload_random(2, 0.0), *amax = be->ops->alloc(be, sizeof(float));
	void *d = be->ops->alloc(be, (size_t)m * n * 2);
	if (!a || !b || !amax || !d)
		fail("device alloc");
	const float h1[2] = { 1.0f, 1.0f };
	if (be->ops->upload(be, one, h1, sizeof h1))
		fail("upload");
	const mgt_fp8_format bf = e5m2_b ? MGT_FP8_E5M2 : MGT_FP8_E4M3;
	be->ops->fp8_quantize(be, a, a32, MGT_DT_F32, (size_t)m * k, one, MGT_FP8_E4M3, amax);
	be->ops->fp8_quantize(be, b, b32, MGT_DT_F32, (size_t)n * k, one, bf, amax);
	double t_[REPS];
	for (int i = 0; i < WARM + REPS; i++) {
		be->ops->sync(be);
		double t0 = now();
		be->ops->gemm_fp8(be, d, MGT_DT_BF16, false, NULL, a, MGT_FP8_E4M3, one, b, bf, one + 1, m, n, k, !e5m2_b);
		be->ops->sync(be);
		if (i >= WARM)
			t_[i - WARM] = now() - t0;
	}
	qsort(t_, REPS, sizeof *t_, cmpd);
	double flops = 2.0 * m * n * k, med = (t_[REPS / 2 - 1] + t_[REPS / 2]) / 2;
	printf("gemm fp8 %s: %.1f TFLOP/s (median of %d, %.3f ms; best %.1f TFLOP/s) e4m3 x %s, bf16 D%s\n", label,
	       flops / med / 1e12, REPS, med * 1e3, flops / t_[0] / 1e12, e5m2_b ? "e5m2" : "e4m3",
	       e5m2_b ? ", split accumulator" : ", fast accumulation");
	fflush(stdout);
	void *bufs[] = { a32, b32, a, b, one, amax, d };
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		be->ops->free(be, bufs[i]);
	return flops / med / 1e12;
}

static void bandwidth(void)
{
	const size_t n = (size_t)1 << 28; /* 1 GiB of fp32 per buffer */
	float *x = upload_random(n, 1.0), *y = upload_random(n, 1.0);
	double t[REPS];
	for (int i = 0; i < WARM + REPS; i++) {
		be->ops->sync(be);
		double t0 = now();
		be->ops->add(be, y, x, MGT_DT_F32, n);
		be->ops->sync(be);
		if (i >= WARM)
			t[i - WARM] = now() - t0;
	}
	check_finite(y, n, "add");
	qsort(t, REPS, sizeof *t, cmpd);
	double bytes = 3.0 * (double)n * sizeof(float), med = (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
	printf("add 1 GiB (y += x: reads 2 GiB, writes 1 GiB): %.0f GB/s (median of %d, %.3f ms; best %.0f GB/s)\n",
	       bytes / med / 1e9, REPS, med * 1e3, bytes / t[0] / 1e9);
	be->ops->free(be, x);
	be->ops->free(be, y);
}

/* Median seconds of REPS calls of attn_fwd (bwd false) or attn_bwd after WARM; qkv and o of type
 * t, dout and dq of type gt. */
static double attn_time(bool bwd, void *dq, void *o, float *l, const void *qkv, const void *dout,
			mgt_elem_type t, mgt_elem_type gt, int s, int b, int ng, int r, int d, float p)
{
	double t_[REPS];
	for (int i = 0; i < WARM + REPS; i++) {
		be->ops->sync(be);
		double t0 = now();
		if (bwd)
			at_attn_bwd(be, dq, dout, gt, qkv, o, t, l, s, b, ng, r, d, p, 7, 0, ng * r, NULL);
		else
			at_attn_fwd(be, o, l, qkv, t, s, b, ng, r, d, p, 7, 0, ng * r, NULL);
		be->ops->sync(be);
		if (i >= WARM)
			t_[i - WARM] = now() - t0;
	}
	qsort(t_, REPS, sizeof *t_, cmpd);
	return (t_[REPS / 2 - 1] + t_[REPS / 2]) / 2;
}

static void attention(const char *label, int s, int b, int ng, int r, int d, float p)
{
	const size_t nq = (size_t)s * b * ng * (r + 2) * d, no = (size_t)s * b * ng * r * d;
	float *qkv = upload_random(nq, 1.0), *dout = upload_random(no, 1.0);
	float *o = be->ops->alloc(be, no * sizeof *o), *l = be->ops->alloc(be, (size_t)b * ng * r * s * 4);
	float *dq = be->ops->alloc(be, nq * sizeof *dq);
	if (!o || !l || !dq)
		fail("device alloc");
	const double f = 4.0 * b * (double)s * s * ng * r * d / 2;
	be->precision = MGT_PREC_BF16;
	/* bf16 qkv, out, dout and dqkv, as mgt-train --bf16 calls it (no casts around the kernels
	 * but the backward's fp32 gradient scratch), then fp32 ones (the op converts) */
	void *qkv16 = typed(qkv, nq, MGT_DT_BF16), *dout16 = typed(dout, no, MGT_DT_BF16);
	static const char *const impl[2] = {"mma", "mma-nocp"};
	for (int io = 0; io < 2; io++)
		for (int k = 0; k < 2; k++) {
			const mgt_elem_type t = io == 0 ? MGT_DT_BF16 : MGT_DT_F32;
			const void *q = io == 0 ? qkv16 : qkv, *dO = io == 0 ? dout16 : dout;
			setenv("MGT_ATTN_KERNEL", impl[k], 1);
			const double tf = attn_time(false, dq, o, l, q, dO, t, t, s, b, ng, r, d, p);
			const double tb = attn_time(true, dq, o, l, q, dO, t, t, s, b, ng, r, d, p);
			if (io == 1) {
				check_finite(o, no, "attn_fwd");
				check_finite(dq, nq, "attn_bwd");
			}
			printf("attention bf16 %s %s, %s: fwd %.1f TFLOP/s (%.3f ms), bwd %.1f TFLOP/s (%.3f ms), "
			       "medians of %d\n", impl[k], label, io == 0 ? "bf16 io" : "fp32 io (casts)", f / tf / 1e12,
			       tf * 1e3, 2.5 * f / tb / 1e12, tb * 1e3, REPS);
		}
	free_typed(qkv16, qkv), free_typed(dout16, dout);
	unsetenv("MGT_ATTN_KERNEL");
	be->precision = MGT_PREC_FP32;
	be->ops->free(be, qkv), be->ops->free(be, dout), be->ops->free(be, o);
	be->ops->free(be, l), be->ops->free(be, dq);
}

static void on_alarm(int sig)
{
	static const char msg[] = "gemm_ceiling: error: still running after 300 s\n";
	(void)sig;
	if (write(1, msg, sizeof msg - 1) < 0) {
		/* nothing to do */
	}
	_exit(1);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mgt_backend_cuda_devices() <= 0) {
		printf("skip: no CUDA device\n");
		return 77;
	}
	signal(SIGALRM, on_alarm);
	alarm(300);
	mgt_status st = MGT_OK;
	be = mgt_backend_cuda_create(0, &st);
	if (!be)
		fail("cannot create the cuda backend on device 0");
	gemm(MGT_PREC_BF16, 8192, 8192, 8192, "8192^3", false);
	gemm(MGT_PREC_BF16, 8192, 8192, 8192, "8192^3", true);
	gemm(MGT_PREC_FP16, 8192, 8192, 8192, "8192^3", false);
	gemm(MGT_PREC_FP32, 8192, 8192, 8192, "8192^3", false);
	gemm(MGT_PREC_BF16, 8192, 768, 3072, "8192x768x3072 (gpt2-124m fc1)", false);
	gemm(MGT_PREC_BF16, 8192, 768, 3072, "8192x768x3072 (gpt2-124m fc1)", true);
	gemm(MGT_PREC_BF16, 8192, 768, 50304, "8192x768x50304 (gpt2-124m logits)", true);
	gemm(MGT_PREC_BF16, 8192, 2048, 8192, "8192x2048x8192 (llama-3.2-1b fc1 half)", true);
	setenv("MGT_GEMM_D16", "0", 1); /* the 16-bit y through fp32 blocks and a cast, for comparison */
	gemm(MGT_PREC_BF16, 8192, 8192, 8192, "8192^3", true);
	gemm(MGT_PREC_BF16, 8192, 768, 3072, "8192x768x3072 (gpt2-124m fc1)", true);
	gemm(MGT_PREC_BF16, 8192, 2048, 8192, "8192x2048x8192 (llama-3.2-1b fc1 half)", true);
	unsetenv("MGT_GEMM_D16");
	char why[256];
	if (mgt_backend_supports(be, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why)) {
		gemm_fp8(8192, 8192, 8192, false, "8192^3");
		gemm_fp8(8192, 8192, 8192, true, "8192^3");
		gemm_fp8(8192, 8192, 2048, false, "8192x2048x8192 (llama-3.2-1b fc1 half)");
		gemm_fp8(14336, 8192, 4096, false, "8192x4096x14336 (llama-3-8b fc1 half)");
	} else {
		printf("gemm fp8: skipped (%s)\n", why);
	}
	bandwidth();
	attention("s1024 b8 h12 d64 (gpt2-124m, no dropout)", 1024, 8, 12, 1, 64, 0.0f);
	attention("s1024 b8 h12 d64 (gpt2-124m, dropout 0.1)", 1024, 8, 12, 1, 64, 0.1f);
	attention("s2048 b4 8x4 heads d64 (llama-3.2-1b)", 2048, 4, 8, 4, 64, 0.0f);
	printf("device memory peak %.0f MiB\n", (double)be->bytes_peak / 1048576.0);
	mgt_backend_destroy(be);
	return 0;
}
