/* Unit tests for lib/backend's CPU backend.
 *
 * Every op's fp32 forward is compared with an independent, naive double-precision reference
 * written here (plain loops; attention with the full s x s softmax), and every backward with
 * central finite differences of that double reference for a random projection L = sum(R * y),
 * the backward being fed dy = R.  Dropout masks in the references are drawn with mgt_philox
 * directly, per the header's formula.  Also: accumulate-vs-write semantics, determinism (with
 * 2 threads), AdamW against torch.optim.AdamW's formula in double, reductions, and the
 * Mixture-of-Experts ops (row gather / combine / scale / dot against plain loops, the grouped
 * linears against double and, under bf16/fp16, bit for bit against per-group linear layers), and
 * the context-parallel attention blocks: all ranks of ring and allgather context parallelism
 * emulated in one process, against the whole-sequence attention (and blocks of uneven sizes also
 * against the double reference); and cross-attention (xattn_*) against its own double reference.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on any failure. */
#include "backend/backend.h"
#include "fp8/fp8.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attn_calls.h"
#include "check.h"

/* Forward tolerance (normwise relative, fp32 vs double) and backward tolerance (fp32 gradient vs
 * double central differences).  Real bugs give errors near 1. */
#define FWD_TOL 1e-5
#define BWD_TOL 5e-5

static mgt_backend *be; /* 2 threads */
static const mgt_backend_ops *O;

/* ---- small helpers ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static double urand(void) /* [-1, 1) */
{
	return (double)(rng_next() >> 11) / 4503599627370496.0 - 1.0;
}

static void *xmalloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p) {
		printf("out of memory\n");
		exit(1);
	}
	return p;
}

static float *randf(size_t n, double scale)
{
	float *p = xmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(scale * urand());
	return p;
}

static float *copyf(const float *x, size_t n)
{
	float *p = xmalloc(n * sizeof *p);
	memcpy(p, x, n * sizeof *p);
	return p;
}

static double *tod(const float *x, size_t n)
{
	double *p = xmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

/* ||got - ref|| / ||ref|| */
static double relerr(const float *got, const double *ref, size_t n)
{
	double e = 0, r = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)got[i] - ref[i];
		e += d * d;
		r += ref[i] * ref[i];
	}
	if (isnan(e))
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* Same, got - base vs ref (accumulating outputs). */
static double relerr_delta(const float *got, const float *base, const double *ref, size_t n)
{
	double e = 0, r = 0;
	for (size_t i = 0; i < n; i++) {
		double d = ((double)got[i] - base[i]) - ref[i];
		e += d * d;
		r += ref[i] * ref[i];
	}
	if (isnan(e))
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* ---- finite differences of a double reference ---- */

typedef void (*ref_fn)(void *ctx, double *out);
typedef struct {
	ref_fn f;
	void *ctx;
	const float *R; /* the projection, also fed to the backward as dy */
	size_t nout;
	double *tmp;
} objective;

static double obj_eval(objective *o)
{
	o->f(o->ctx, o->tmp);
	double L = 0;
	for (size_t i = 0; i < o->nout; i++)
		L += (double)o->R[i] * o->tmp[i];
	return L;
}

/* dL/dx by central differences for every element of x (a double input the reference reads). */
static double *fd_grad(objective *o, double *x, size_t n)
{
	double *g = xmalloc(n * sizeof *g);
	for (size_t i = 0; i < n; i++) {
		double x0 = x[i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
		x[i] = x0 + h;
		double lp = obj_eval(o);
		x[i] = x0 - h;
		double lm = obj_eval(o);
		x[i] = x0;
		g[i] = (lp - lm) / (2 * h);
	}
	return g;
}

static double fd_check(objective *o, double *x, size_t n, const float *got)
{
	double *g = fd_grad(o, x, n);
	double e = relerr(got, g, n);
	free(g);
	return e;
}

/* For bigger inputs: central differences at k random elements only, compared normwise. */
static double fd_check_some(objective *o, double *x, size_t n, const float *got, int k)
{
	if (n <= (size_t)k)
		return fd_check(o, x, n, got);
	double e = 0, r = 0;
	for (int j = 0; j < k; j++) {
		size_t i = (size_t)((urand() + 1) / 2 * n) % n;
		double x0 = x[i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
		x[i] = x0 + h;
		double lp = obj_eval(o);
		x[i] = x0 - h;
		double lm = obj_eval(o);
		x[i] = x0;
		double g = (lp - lm) / (2 * h), dd = got[i] - g;
		e += dd * dd;
		r += g * g;
	}
	return isnan(e) ? INFINITY : r > 0 ? sqrt(e / r) : sqrt(e);
}

/* For inputs too big to difference element by element: ndir random directions u, comparing
 * (L(x + h u) - L(x - h u)) / 2h with got . u, relative to the typical size of got . u,
 * ||got|| ||u|| / sqrt(n) (so an error confined to a small part of got still shows). */
static double dir_check(objective *o, double *x, size_t n, const float *got, int ndir)
{
	double *x0 = xmalloc(n * sizeof *x0), *u = xmalloc(n * sizeof *u), worst = 0, gn = 0;
	memcpy(x0, x, n * sizeof *x0);
	for (size_t i = 0; i < n; i++)
		gn += (double)got[i] * got[i];
	for (int k = 0; k < ndir; k++) {
		double un = 0, gu = 0, h = 1e-4;
		for (size_t i = 0; i < n; i++) {
			u[i] = urand();
			un += u[i] * u[i];
			gu += (double)got[i] * u[i];
		}
		for (size_t i = 0; i < n; i++)
			x[i] = x0[i] + h * u[i];
		double lp = obj_eval(o);
		for (size_t i = 0; i < n; i++)
			x[i] = x0[i] - h * u[i];
		double lm = obj_eval(o);
		memcpy(x, x0, n * sizeof *x);
		double e = fabs((lp - lm) / (2 * h) - gu) / (sqrt(gn * un / (double)n) + 1e-300);
		if (!(e <= worst))
			worst = isnan(e) ? INFINITY : e;
	}
	free(x0);
	free(u);
	return worst;
}

static int keep_ref(uint64_t key, uint64_t e, float p)
{
	uint32_t w[4];
	mgt_philox(key, 0, e, w);
	return mgt_u32_to_unit(w[0]) >= p;
}

/* Attention dropout (backend.h attn_fwd): score element (q, k) of plane `plane` (global positions)
 * is drawn from word 2 (q / 8 % 2) + k / 8 % 2 of the Philox counter of the element with q and k
 * moved down 8 when q / 8 or k / 8 is odd. */
static int keep_attn_ref(uint64_t key, uint64_t plane, uint64_t dsq, uint64_t dsk, uint64_t q, uint64_t k, float p)
{
	uint32_t w[4];
	const uint64_t qb = q - 8 * (q / 8 % 2), kb = k - 8 * (k / 8 % 2);
	mgt_philox(key, 0, (plane * dsq + qb) * dsk + kb, w);
	return mgt_u32_to_unit(w[2 * (q / 8 % 2) + k / 8 % 2]) >= p;
}

/* ================= memory ================= */

/* Resident pages of [p, p + n) (p page-aligned), by mincore(2): independent of the backend. */
static size_t resident_pages(void *p, size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg, r = 0;
	unsigned char *v = calloc(np, 1);
	if (v && mincore(p, n, v) == 0)
		for (size_t i = 0; i < np; i++) r += v[i] & 1;
	free(v);
	return r;
}

/* FSDP's memory (backend.h reserve, commit, discard): reserved memory reads zero and holds no pages
 * until written (commit does nothing on the host); discard zeroes exactly its range (partial pages by memset) and gives back the pages
 * wholly inside it, leaving the rest as written. */
static void test_reserve(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 16 * pg + 123;
	unsigned char *p = O->reserve(be, n);
	int zero = p != NULL;
	size_t before = p ? resident_pages(p, n) : 99;
	for (size_t i = 0; p && i < n; i++) zero &= p[i] == 0;
	CHECK(p && zero && before == 0, "reserve: %zu bytes read zero, %zu pages resident before writing", n, before);
	if (!p) return;
	size_t r0 = resident_pages(p, n);
	CHECK(O->commit(be, p + pg, 5 * pg) == MGT_OK && resident_pages(p, n) == r0,
	      "commit: nothing to do on the host (resident pages %zu, as before: backed when first written)", r0);
	memset(p, 0xAB, n);
	size_t written = resident_pages(p, n), lo = 3 * pg + 100, hi = 11 * pg + 7;
	O->discard(be, p + lo, hi - lo);
	size_t after = resident_pages(p, n); /* before reading: a read maps the zero page */
	int ok = 1;
	for (size_t i = 0; i < n; i++) ok &= p[i] == (i >= lo && i < hi ? 0 : 0xAB);
	CHECK(ok && written == 17 && after == 17 - 7, "discard [%zu, %zu): zeroed exactly, resident pages %zu -> %zu "
	      "(the 7 wholly inside given back)", lo, hi, written, after);
	O->unreserve(be, p, n);
}

static void test_memory(void)
{
	float *p = O->alloc(be, 1000 * sizeof *p);
	int zero = p != NULL, aligned = p && ((uintptr_t)p % 32) == 0;
	for (int i = 0; p && i < 1000; i++)
		zero &= p[i] == 0.0f;
	CHECK(zero && aligned, "alloc: zero-filled and aligned");
	float h[1000], back[1000];
	for (int i = 0; i < 1000; i++)
		h[i] = (float)i;
	CHECK(O->upload(be, p, h, sizeof h) == MGT_OK && O->download(be, back, p, sizeof h) == MGT_OK &&
		      memcmp(h, back, sizeof h) == 0,
	      "upload/download round trip");
	O->zero(be, p, 500 * sizeof *p);
	O->download(be, back, p, sizeof back);
	CHECK(back[0] == 0 && back[499] == 0 && back[500] == 500.0f, "zero: exactly the bytes asked");
	O->sync(be);
	O->free(be, p);
	O->free(be, NULL);
}

/* ================= linear ================= */

typedef struct {
	const double *x, *w, *b;
	int T, in, out;
} lin_ctx;

static void lin_ref(void *c_, double *y)
{
	lin_ctx *c = c_;
	for (int t = 0; t < c->T; t++)
		for (int o = 0; o < c->out; o++) {
			double s = c->b ? c->b[o] : 0;
			for (int i = 0; i < c->in; i++)
				s += c->x[t * c->in + i] * c->w[o * c->in + i];
			y[t * c->out + o] = s;
		}
}

static void test_linear_case(int T, int in, int out, int with_bias, int fd)
{
	float *x = randf((size_t)T * in, 1), *w = randf((size_t)out * in, 0.5);
	float *b = with_bias ? randf(out, 1) : NULL;
	float *y = randf((size_t)T * out, 9); /* garbage: the forward writes */
	double *xd = tod(x, (size_t)T * in), *wd = tod(w, (size_t)out * in);
	double *bd = b ? tod(b, out) : NULL, *yr = xmalloc((size_t)T * out * sizeof *yr);
	lin_ctx c = {xd, wd, bd, T, in, out};
	lin_ref(&c, yr);
	O->linear_fwd(be, y, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, b, T, in, out);
	double e = relerr(y, yr, (size_t)T * out);
	CHECK(e < FWD_TOL, "linear_fwd T=%d in=%d out=%d bias=%d: err %.2e", T, in, out, with_bias, e);

	float *R = randf((size_t)T * out, 1);
	float *dx = randf((size_t)T * in, 9), *dw0 = randf((size_t)out * in, 1), *db0 = randf(out, 1);
	float *dw = copyf(dw0, (size_t)out * in), *db = copyf(db0, out);
	O->linear_bwd(be, dx, MGT_DT_F32, dw, b ? db : NULL, R, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
	objective ob = {lin_ref, &c, R, (size_t)T * out, yr};
	if (fd) {
		double ex = fd_check(&ob, xd, (size_t)T * in, dx);
		double *gw = fd_grad(&ob, wd, (size_t)out * in);
		double ew = relerr_delta(dw, dw0, gw, (size_t)out * in);
		CHECK(ex < BWD_TOL && ew < BWD_TOL, "linear_bwd dx, dw (accumulated) vs FD: %.2e %.2e", ex, ew);
		if (b) {
			double *gb = fd_grad(&ob, bd, out);
			double eb = relerr_delta(db, db0, gb, out);
			CHECK(eb < BWD_TOL, "linear_bwd db (accumulated) vs FD: %.2e", eb);
			/* second call: dw, db gain the same gradient again */
			O->linear_bwd(be, NULL, MGT_DT_F32, dw, db, R, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
			for (int i = 0; i < out * in; i++)
				gw[i] *= 2;
			for (int i = 0; i < out; i++)
				gb[i] *= 2;
			double e2 = relerr_delta(dw, dw0, gw, (size_t)out * in);
			double e3 = relerr_delta(db, db0, gb, out);
			CHECK(e2 < BWD_TOL && e3 < BWD_TOL, "linear_bwd twice (dx NULL) doubles dw, db: %.2e %.2e",
			      e2, e3);
			free(gb);
		} else {
			int untouched = memcmp(db, db0, out * sizeof *db) == 0;
			CHECK(untouched, "linear_bwd db NULL leaves db alone");
		}
		free(gw);
	} else {
		/* big shape: compare with the analytic double gradients */
		double *gx = xmalloc((size_t)T * in * sizeof *gx), *gw = xmalloc((size_t)out * in * sizeof *gw);
		for (int t = 0; t < T; t++)
			for (int i = 0; i < in; i++) {
				double s = 0;
				for (int o = 0; o < out; o++)
					s += (double)R[t * out + o] * wd[o * in + i];
				gx[t * in + i] = s;
			}
		for (int o = 0; o < out; o++)
			for (int i = 0; i < in; i++) {
				double s = 0;
				for (int t = 0; t < T; t++)
					s += (double)R[t * out + o] * xd[t * in + i];
				gw[o * in + i] = s;
			}
		double ex = relerr(dx, gx, (size_t)T * in), ew = relerr_delta(dw, dw0, gw, (size_t)out * in);
		CHECK(ex < FWD_TOL && ew < FWD_TOL, "linear_bwd T=%d in=%d out=%d vs double: %.2e %.2e", T,
		      in, out, ex, ew);
		free(gx);
		free(gw);
	}
	free(x), free(w), free(b), free(y), free(xd), free(wd), free(bd), free(yr);
	free(R), free(dx), free(dw0), free(db0), free(dw), free(db);
}

static void test_linear(void)
{
	test_linear_case(5, 4, 3, 1, 1);
	test_linear_case(6, 7, 5, 0, 1);
	test_linear_case(1, 3, 2, 1, 1);
	test_linear_case(70, 96, 80, 1, 0);
}

/* ================= embedding ================= */

/* ---- fp8 GEMM and transpose ---- */

/* A random fp8 byte of format f that is a finite value (no NaN, no Inf); small: magnitudes up to
 * 4, integers only (so every sum of up to 2^7 products is an integer below 2^11, exact in any
 * order). */
static uint8_t fp8_byte(mgt_fp8_format f, bool small)
{
	for (;;) {
		uint8_t v = (uint8_t)(rng_next() >> 24);
		float x = mgt_fp8_to_f32(v, f);
		if (isfinite(x) && (!small || (fabsf(x) <= 4 && x == floorf(x)))) return v;
	}
}

/* gemm_fp8 against sum_k A[i,k] B[j,k] in double times fl32(ai * bi) (+ bias), for D of type dt
 * (accumulating into a random fp32 D when acc); small: exact (bit for bit). */
static void test_gemm_fp8_case(int m, int n, int k, mgt_fp8_format af, mgt_fp8_format bf, mgt_elem_type dt, bool acc,
			       bool bias, bool small)
{
	uint8_t *a = xmalloc((size_t)m * k), *b = xmalloc((size_t)n * k);
	for (size_t i = 0; i < (size_t)m * k; i++) a[i] = fp8_byte(af, small);
	for (size_t i = 0; i < (size_t)n * k; i++) b[i] = fp8_byte(bf, small);
	float ai = small ? 0.25f : 0.0123f, bi = small ? 8.0f : 3.7f, s = ai * bi;
	float *bv = bias ? randf((size_t)m, 1.0) : NULL, *d0 = randf((size_t)m * n, 1.0);
	void *d = xmalloc((size_t)m * n * 4);
	if (acc) memcpy(d, d0, (size_t)m * n * 4);
	O->gemm_fp8(be, d, dt, acc, bv, a, af, &ai, b, bf, &bi, m, n, k, true);
	double err = 0, nrm = 0;
	int exact_bad = 0;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double sum = 0;
			for (int q = 0; q < k; q++)
				sum += (double)mgt_fp8_to_f32(a[(size_t)i * k + q], af) * mgt_fp8_to_f32(b[(size_t)j * k + q], bf);
			double v = sum * (double)s + (bias ? bv[i] : 0.0);
			size_t e = (size_t)j * m + i;
			if (acc) v += d0[e];
			float want = (float)v, got;
			if (dt == MGT_DT_F32)
				got = ((float *)d)[e];
			else
				got = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(((uint16_t *)d)[e]) : mgt_f16_to_f32(((uint16_t *)d)[e]);
			if (dt == MGT_DT_BF16) want = mgt_bf16_to_f32(mgt_f32_to_bf16(want));
			if (dt == MGT_DT_F16) want = mgt_f16_to_f32(mgt_f32_to_f16(want));
			exact_bad += got != want;
			err += (got - v) * (got - v);
			nrm += v * v;
		}
	double rel = sqrt(err / (nrm > 0 ? nrm : 1)), tol = dt == MGT_DT_F32 ? 1e-6 : dt == MGT_DT_BF16 ? 4e-3 : 5e-4;
	if (small)
		CHECK(exact_bad == 0, "gemm_fp8 %dx%dx%d %s x %s -> %s%s%s: exact integer sums bit for bit (%d differ)", m, n,
		      k, af ? "e5m2" : "e4m3", bf ? "e5m2" : "e4m3", dt == MGT_DT_F32 ? "fp32" : dt == MGT_DT_BF16 ? "bf16" : "fp16",
		      acc ? " accumulated" : "", bias ? " with bias" : "", exact_bad);
	else
		CHECK(rel < tol, "gemm_fp8 %dx%dx%d %s x %s -> %s%s%s: rel err %.2e vs double (tol %.0e)", m, n, k,
		      af ? "e5m2" : "e4m3", bf ? "e5m2" : "e4m3", dt == MGT_DT_F32 ? "fp32" : dt == MGT_DT_BF16 ? "bf16" : "fp16",
		      acc ? " accumulated" : "", bias ? " with bias" : "", rel, tol);
	free(a); free(b); free(bv); free(d0); free(d);
}

static void test_fp8_gemm(void)
{
	for (int small = 0; small < 2; small++) {
		test_gemm_fp8_case(48, 32, 64, MGT_FP8_E4M3, MGT_FP8_E4M3, MGT_DT_BF16, false, true, small);
		test_gemm_fp8_case(64, 32, 48, MGT_FP8_E4M3, MGT_FP8_E5M2, MGT_DT_BF16, false, false, small);
		test_gemm_fp8_case(32, 48, 96, MGT_FP8_E4M3, MGT_FP8_E5M2, MGT_DT_F32, true, false, small);
		test_gemm_fp8_case(32, 16, 64, MGT_FP8_E5M2, MGT_FP8_E4M3, small ? MGT_DT_F16 : MGT_DT_BF16, false, true, small);
		test_gemm_fp8_case(16, 16, 32, MGT_FP8_E4M3, MGT_FP8_E4M3, MGT_DT_F32, false, false, small);
	}
	/* the op's threaded chunks against one lib/fp8 call: the same bytes and amax */
	const size_t N = 300007;
	float *x = randf(N, 600.0), sc = 0.75f, a1 = 2.0f, a2 = 2.0f;
	x[N - 3] = 1e30f;
	uint8_t *q1 = xmalloc(N), *q2 = xmalloc(N);
	O->fp8_quantize(be, q1, x, MGT_DT_F32, N, &sc, MGT_FP8_E4M3, &a1);
	mgt_fp8_quantize(q2, x, N, sc, MGT_FP8_E4M3, &a2);
	CHECK(!memcmp(q1, q2, N) && a1 == a2 && a1 == 1e30f, "fp8_quantize op over %zu elements in chunks = one lib/fp8 cast "
	      "(bytes and amax %g)", N, (double)a1);
	free(x); free(q1); free(q2);
	const int R = 37, C = 70;
	uint8_t *src = xmalloc((size_t)R * C), *dst = xmalloc((size_t)R * C);
	for (int i = 0; i < R * C; i++) src[i] = (uint8_t)(rng_next() >> 11);
	O->fp8_transpose(be, dst, src, R, C);
	int bad = 0;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) bad += dst[(size_t)c * R + r] != src[(size_t)r * C + c];
	CHECK(bad == 0, "fp8_transpose %dx%d: every byte in its place (%d misplaced)", R, C, bad);
	free(src);
	free(dst);
}

static void test_embedding(void)
{
	enum { T = 9, h = 6, rows = 5 };
	const int64_t row0 = 3;
	int32_t ids[T] = {3, 7, 2, 8, 5, 5, 100, 0, 4}; /* 2, 8, 100, 0 out of [3, 8) */
	float *table = randf(rows * h, 1), *y = randf(T * h, 9), *y0 = randf(T * h, 1);
	float *ya = copyf(y0, T * h);
	double yr[T * h], ar[T * h];
	for (int t = 0; t < T; t++)
		for (int c = 0; c < h; c++) {
			int in = ids[t] >= row0 && ids[t] < row0 + rows;
			double v = in ? table[(ids[t] - row0) * h + c] : 0;
			yr[t * h + c] = v;
			ar[t * h + c] = y0[t * h + c] + v;
		}
	O->embedding_fwd(be, y, ids, table, row0, rows, T, h, false);
	O->embedding_fwd(be, ya, ids, table, row0, rows, T, h, true);
	CHECK(relerr(y, yr, T * h) == 0, "embedding_fwd writes rows, zeros out of range");
	CHECK(relerr(ya, ar, T * h) < FWD_TOL, "embedding_fwd accumulate adds, skips out of range");

	float *dy = randf(T * h, 1), *dt0 = randf(rows * h, 1), *dt = copyf(dt0, rows * h);
	double gr[rows * h];
	memset(gr, 0, sizeof gr);
	for (int t = 0; t < T; t++)
		if (ids[t] >= row0 && ids[t] < row0 + rows)
			for (int c = 0; c < h; c++)
				gr[(ids[t] - row0) * h + c] += dy[t * h + c];
	O->embedding_bwd(be, dt, dy, MGT_DT_F32, ids, row0, rows, T, h);
	CHECK(relerr_delta(dt, dt0, gr, rows * h) < FWD_TOL,
	      "embedding_bwd accumulates repeated ids, ignores out of range");
	free(table), free(y), free(y0), free(ya), free(dy), free(dt0), free(dt);

	/* bigger, threaded, deterministic */
	enum { T2 = 3000, h2 = 300, rows2 = 50 };
	int32_t *ids2 = xmalloc(T2 * sizeof *ids2);
	for (int t = 0; t < T2; t++)
		ids2[t] = (int32_t)((urand() + 1) * 30);
	float *dy2 = randf((size_t)T2 * h2, 1), *a = xmalloc(rows2 * h2 * 4), *b = xmalloc(rows2 * h2 * 4);
	double *g2 = xmalloc(rows2 * h2 * sizeof *g2);
	for (int t = 0; t < T2; t++)
		if (ids2[t] >= 10 && ids2[t] < 10 + rows2)
			for (int c = 0; c < h2; c++)
				g2[(ids2[t] - 10) * h2 + c] += dy2[(size_t)t * h2 + c];
	O->embedding_bwd(be, a, dy2, MGT_DT_F32, ids2, 10, rows2, T2, h2);
	O->embedding_bwd(be, b, dy2, MGT_DT_F32, ids2, 10, rows2, T2, h2);
	double e = relerr(a, g2, rows2 * h2);
	CHECK(e < FWD_TOL && memcmp(a, b, rows2 * h2 * 4) == 0,
	      "embedding_bwd T=%d h=%d: err %.2e, deterministic", T2, h2, e);
	free(ids2), free(dy2), free(a), free(b), free(g2);
}

/* ================= normalization ================= */

typedef struct {
	mgt_norm_kind kind;
	const double *x, *w, *b;
	int T, h;
	double eps;
} norm_ctx;

static void norm_ref(void *c_, double *y)
{
	norm_ctx *c = c_;
	for (int t = 0; t < c->T; t++) {
		const double *x = c->x + t * c->h;
		double mu = 0, ss = 0;
		if (c->kind == MGT_NORM_LAYERNORM) {
			for (int i = 0; i < c->h; i++)
				mu += x[i];
			mu /= c->h;
		}
		for (int i = 0; i < c->h; i++)
			ss += (x[i] - mu) * (x[i] - mu);
		double rs = 1 / sqrt(ss / c->h + c->eps);
		for (int i = 0; i < c->h; i++)
			y[t * c->h + i] = (x[i] - mu) * rs * c->w[i] + (c->b ? c->b[i] : 0);
	}
}

static void test_norm_case(mgt_norm_kind kind, int with_bias, int T, int h)
{
	const char *kn = kind == MGT_NORM_LAYERNORM ? "layernorm" : "rmsnorm";
	float *x = randf((size_t)T * h, 2), *w = randf(h, 1), *b = with_bias ? randf(h, 1) : NULL;
	for (int i = 0; i < T * h; i++) /* an offset, so LayerNorm's mean matters */
		x[i] += 0.7f;
	float *y = randf((size_t)T * h, 9), *mean = randf(T, 9), *rstd = randf(T, 9);
	double *xd = tod(x, (size_t)T * h), *wd = tod(w, h), *bd = b ? tod(b, h) : NULL;
	double *yr = xmalloc((size_t)T * h * sizeof *yr);
	norm_ctx c = {kind, xd, wd, bd, T, h, 1e-5};
	norm_ref(&c, yr);
	O->norm_fwd(be, kind, y, MGT_DT_F32, mean, rstd, x, MGT_DT_F32, w, b, T, h, 1e-5f);
	double e = relerr(y, yr, (size_t)T * h), em = 0, er = 0;
	for (int t = 0; t < T; t++) {
		double mu = 0, ss = 0;
		for (int i = 0; i < h; i++)
			mu += xd[t * h + i];
		mu = kind == MGT_NORM_LAYERNORM ? mu / h : 0;
		for (int i = 0; i < h; i++)
			ss += (xd[t * h + i] - mu) * (xd[t * h + i] - mu);
		double rs = 1 / sqrt(ss / h + 1e-5);
		em = fmax(em, fabs(mean[t] - mu));
		er = fmax(er, fabs(rstd[t] - rs) / rs);
	}
	CHECK(e < FWD_TOL && em < 1e-6 && er < 1e-6, "norm_fwd %s bias=%d T=%d h=%d: err %.2e %.2e %.2e",
	      kn, with_bias, T, h, e, em, er);

	float *R = randf((size_t)T * h, 1), *dx0 = randf((size_t)T * h, 1), *dw0 = randf(h, 1);
	float *db0 = randf(h, 1), *dx = copyf(dx0, (size_t)T * h), *dw = copyf(dw0, h), *db = copyf(db0, h);
	O->norm_bwd(be, kind, dx, dw, b ? db : NULL, R, MGT_DT_F32, x, MGT_DT_F32, w, mean, rstd, T, h);
	objective ob = {norm_ref, &c, R, (size_t)T * h, yr};
	for (int i = 0; i < T * h; i++) /* the backward's own contribution */
		dx[i] -= dx0[i];
	double *gw = fd_grad(&ob, wd, h);
	double ex = fd_check_some(&ob, xd, (size_t)T * h, dx, 300), ew = relerr_delta(dw, dw0, gw, h), eb = 0;
	if (b) {
		double *gb = fd_grad(&ob, bd, h);
		eb = relerr_delta(db, db0, gb, h);
		free(gb);
	} else {
		eb = memcmp(db, db0, h * sizeof *db) == 0 ? 0 : 1;
	}
	CHECK(ex < BWD_TOL && ew < BWD_TOL && eb < BWD_TOL,
	      "norm_bwd %s bias=%d: dx, dw, db accumulate, vs FD: %.2e %.2e %.2e", kn, with_bias, ex, ew, eb);
	free(x), free(w), free(b), free(y), free(mean), free(rstd), free(xd), free(wd), free(bd), free(yr);
	free(R), free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db), free(gw);
}

/* head_norm_fwd / head_norm_bwd: the query (or key) heads of qkv [T, ng, r+2, d] gathered into
 * rows [n, d] and normalized by norm_ref; other elements untouched; the backward writes dx in
 * place over dy (aliased) and agrees with finite differences. */
typedef struct {
	norm_ctx nc;
	int T, ng, r, d;
	bool key;
	const double *x; /* whole qkv */
} head_ctx;

static size_t head_row_off(const head_ctx *c, int i)
{
	int per = c->key ? 1 : c->r, first = c->key ? c->r : 0;
	return ((size_t)(i / per) * (c->r + 2) + first + i % per) * c->d;
}

static int head_rows_n(const head_ctx *c) { return c->T * c->ng * (c->key ? 1 : c->r); }

/* y [n, d] of the gathered rows */
static void head_ref(void *c_, double *y)
{
	head_ctx *c = c_;
	int n = head_rows_n(c);
	double *xr = xmalloc((size_t)n * c->d * sizeof *xr);
	for (int i = 0; i < n; i++)
		memcpy(xr + (size_t)i * c->d, c->x + head_row_off(c, i), c->d * sizeof *xr);
	norm_ctx nc = c->nc;
	nc.x = xr;
	nc.T = n;
	norm_ref(&nc, y);
	free(xr);
}

static void test_head_norm_case(mgt_norm_kind kind, bool key, int with_bias, int T, int ng, int r, int d)
{
	const char *kn = kind == MGT_NORM_LAYERNORM ? "layernorm" : "rmsnorm";
	const size_t N = (size_t)T * ng * (r + 2) * d;
	float *x = randf(N, 2), *w = randf(d, 1), *b = with_bias ? randf(d, 1) : NULL;
	for (size_t i = 0; i < N; i++)
		x[i] += 0.5f;
	head_ctx c = {{kind, NULL, NULL, NULL, 0, d, 1e-6}, T, ng, r, d, key, NULL};
	int n = head_rows_n(&c);
	double *xd = tod(x, N), *wd = tod(w, d), *bd = b ? tod(b, d) : NULL;
	c.x = xd;
	c.nc.w = wd;
	c.nc.b = bd;
	double *yr = xmalloc((size_t)n * d * sizeof *yr);
	head_ref(&c, yr);
	float *y = randf(N, 9), *y0 = copyf(y, N), *mean = randf(n, 9), *rstd = randf(n, 9);
	O->head_norm_fwd(be, kind, y, MGT_DT_F32, mean, rstd, x, w, b, T, ng, r, d, key, 1e-6f);
	float *yg = xmalloc((size_t)n * d * sizeof *yg);
	char *sel = calloc(N, 1);
	for (int i = 0; i < n; i++) {
		memcpy(yg + (size_t)i * d, y + head_row_off(&c, i), d * sizeof *yg);
		memset(sel + head_row_off(&c, i), 1, d);
	}
	int others = 1;
	for (size_t i = 0; i < N; i++)
		if (!sel[i] && y[i] != y0[i])
			others = 0;
	double e = relerr(yg, yr, (size_t)n * d);
	CHECK(e < FWD_TOL && others, "head_norm_fwd %s %s bias=%d T=%d ng=%d r=%d d=%d: err %.2e, other rows %s",
	      kn, key ? "key" : "query", with_bias, T, ng, r, d, e, others ? "untouched" : "CHANGED");
	/* backward in place: dx aliases dy */
	float *R = randf((size_t)n * d, 1), *g = randf(N, 7), *g0 = copyf(g, N);
	for (int i = 0; i < n; i++)
		memcpy(g + head_row_off(&c, i), R + (size_t)i * d, d * sizeof *g);
	float *dw0 = randf(d, 1), *db0 = randf(d, 1), *dw = copyf(dw0, d), *db = copyf(db0, d);
	O->head_norm_bwd(be, kind, g, dw, b ? db : NULL, g, MGT_DT_F32, x, w, mean, rstd, T, ng, r, d, key);
	int others_g = 1;
	for (size_t i = 0; i < N; i++)
		if (!sel[i] && g[i] != g0[i])
			others_g = 0;
	float *dxs = calloc(N, sizeof *dxs);
	for (int i = 0; i < n; i++)
		memcpy(dxs + head_row_off(&c, i), g + head_row_off(&c, i), d * sizeof *dxs);
	objective ob = {head_ref, &c, R, (size_t)n * d, yr};
	double ex = fd_check_some(&ob, xd, N, dxs, 300);
	double *gw = fd_grad(&ob, wd, d), ew = relerr_delta(dw, dw0, gw, d), eb = 0;
	if (b) {
		double *gb = fd_grad(&ob, bd, d);
		eb = relerr_delta(db, db0, gb, d);
		free(gb);
	} else {
		eb = memcmp(db, db0, d * sizeof *db) == 0 ? 0 : 1;
	}
	CHECK(ex < BWD_TOL && ew < BWD_TOL && eb < BWD_TOL && others_g,
	      "head_norm_bwd %s %s bias=%d in place: dx written, dw, db accumulate, vs FD: %.2e %.2e %.2e, other "
	      "rows %s", kn, key ? "key" : "query", with_bias, ex, ew, eb, others_g ? "untouched" : "CHANGED");
	free(x), free(w), free(b), free(xd), free(wd), free(bd), free(yr), free(y), free(y0), free(mean);
	free(rstd), free(yg), free(sel), free(R), free(g), free(g0), free(dw0), free(db0), free(dw), free(db);
	free(dxs), free(gw);
}

static void test_norm(void)
{
	test_head_norm_case(MGT_NORM_RMSNORM, false, 0, 3, 2, 2, 8);
	test_head_norm_case(MGT_NORM_RMSNORM, true, 0, 3, 2, 2, 8);
	test_head_norm_case(MGT_NORM_LAYERNORM, false, 1, 2, 1, 3, 6);
	test_head_norm_case(MGT_NORM_LAYERNORM, true, 1, 4, 3, 1, 5);
	test_head_norm_case(MGT_NORM_RMSNORM, false, 0, 64, 2, 2, 64); /* threaded */

	test_norm_case(MGT_NORM_LAYERNORM, 1, 4, 7);
	test_norm_case(MGT_NORM_LAYERNORM, 0, 3, 5);
	test_norm_case(MGT_NORM_RMSNORM, 0, 4, 6);
	test_norm_case(MGT_NORM_LAYERNORM, 1, 40, 200); /* threaded path */
	test_norm_case(MGT_NORM_RMSNORM, 0, 40, 200);
}

/* ================= RoPE ================= */

typedef struct {
	const double *x;
	const int32_t *pos;
	int T, ng, r, d, rot;
	const float *inv;
} rope_ctx;

static void rope_ref(void *c_, double *y)
{
	rope_ctx *c = c_;
	size_t n = (size_t)c->T * c->ng * (c->r + 2) * c->d;
	memcpy(y, c->x, n * sizeof *y);
	int half = c->rot / 2;
	for (int t = 0; t < c->T; t++)
		for (int g = 0; g < c->ng; g++)
			for (int m = 0; m <= c->r; m++) {
				double *hd = y + (((size_t)t * c->ng + g) * (c->r + 2) + m) * c->d;
				for (int k = 0; k < half; k++) {
					/* theta in fp32 as the header specifies, cos/sin in double */
					float inv = c->inv[k];
					double th = (float)c->pos[t] * inv;
					double a = hd[k], b = hd[k + half];
					hd[k] = a * cos(th) - b * sin(th);
					hd[k + half] = b * cos(th) + a * sin(th);
				}
			}
}

static void test_rope(void)
{
	enum { T = 6, ng = 2, r = 2, d = 10, rot = 6 };
	const size_t n = (size_t)T * ng * (r + 2) * d;
	int32_t pos[T] = {0, 1, 2, 7, 100, 3000};
	float *x = randf(n, 1), *y = copyf(x, n), inv[rot / 2];
	for (int k = 0; k < rot / 2; k++) /* any table: the op must use it as given */
		inv[k] = 1.0f / powf(10000.0f, (float)(2 * k) / (float)rot) * (k == 1 ? 0.125f : 1.0f);
	double *xd = tod(x, n), *yr = xmalloc(n * sizeof *yr);
	rope_ctx c = {xd, pos, T, ng, r, d, rot, inv};
	rope_ref(&c, yr);
	O->rope(be, y, MGT_DT_F32, pos, inv, T, ng, r, d, rot, false);
	double e = relerr(y, yr, n);
	int vals_same = 1; /* value heads and channels past rot_dim untouched */
	for (int t = 0; t < T; t++)
		for (int g = 0; g < ng; g++)
			for (int m = 0; m < r + 2; m++)
				for (int k = 0; k < d; k++) {
					size_t i = (((size_t)t * ng + g) * (r + 2) + m) * d + k;
					if ((m == r + 1 || k >= rot) && y[i] != x[i])
						vals_same = 0;
				}
	CHECK(e < FWD_TOL && vals_same, "rope rot_dim=%d < d=%d, GQA r=%d: err %.2e, v and tail untouched",
	      rot, d, r, e);
	/* the backward is the inverse rotation applied to the gradient: d(sum R*rope(x))/dx */
	float *R = randf(n, 1), *g = copyf(R, n);
	O->rope(be, g, MGT_DT_F32, pos, inv, T, ng, r, d, rot, true);
	objective ob = {rope_ref, &c, R, n, yr};
	double eg = fd_check(&ob, xd, n, g);
	CHECK(eg < BWD_TOL, "rope inverse = backward vs FD: %.2e", eg);
	O->rope(be, y, MGT_DT_F32, pos, inv, T, ng, r, d, rot, true);
	double er = 0;
	for (size_t i = 0; i < n; i++)
		er = fmax(er, fabs(y[i] - x[i]));
	CHECK(er < 1e-5, "rope inverse undoes rope: %.2e", er);
	free(x), free(y), free(xd), free(yr), free(R), free(g);
}

/* ================= attention ================= */

typedef struct {
	const double *qkv;
	int s, b, ng, r, d;
	float p;
	uint64_t key;
	int head0, heads_total;
	double *lse; /* written when not NULL */
	const uint8_t *km; /* key padding mask [s*b] (1 visible); NULL: causal */
	const double *bias; /* position bias [2 s - 1, heads_total] (attn_bias_fwd); NULL: none */
	const int32_t *seg; /* packed documents (mgt_attn.seg_start [s*b]); NULL: none */
} attn_ctx;

/* The position bias of score (i, i2) of local head n (backend.h attn_bias_fwd), 0 without one. */
static double attn_bias_at(const attn_ctx *c, int n, int i, int i2)
{
	return c->bias ? c->bias[(size_t)(i2 - i + c->s - 1) * c->heads_total + c->head0 + n] : 0;
}

/* Query i of sequence j sees key i2: causal (i2 <= i; with packed documents also i2 at or after
 * the start of i's document), or the key mask's byte of (i2, j). */
static int attn_vis(const attn_ctx *c, int j, int i, int i2)
{
	if (c->km)
		return c->km[(size_t)i2 * c->b + j] != 0;
	return i2 <= i && (!c->seg || c->seg[(size_t)i * c->b + j] <= i2);
}

/* backend.h attn_fwd in double: out (and lse when asked) of the softmax over the keys each query
 * sees (attn_vis), of the scaled scores plus the position bias when there is one; a query that
 * sees none gets out 0 and lse -inf. */
static void attn_ref(void *c_, double *out)
{
	attn_ctx *c = c_;
	const int H = c->ng * c->r, s = c->s, d = c->d;
	const size_t ldq = (size_t)c->b * c->ng * (c->r + 2) * d, ldo = (size_t)c->b * H * d;
	double *pr = xmalloc((size_t)s * sizeof *pr);
	for (int j = 0; j < c->b; j++)
		for (int n = 0; n < H; n++) {
			int g = n / c->r, m = n % c->r;
			const double *q = c->qkv + ((size_t)j * c->ng + g) * (c->r + 2) * d + (size_t)m * d;
			const double *k = c->qkv + ((size_t)j * c->ng + g) * (c->r + 2) * d + (size_t)c->r * d;
			const double *v = k + d;
			for (int i = 0; i < s; i++) {
				double mx = -INFINITY, sum = 0;
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2)) {
					double sc = 0;
					for (int x = 0; x < d; x++)
						sc += q[i * ldq + x] * k[i2 * ldq + x];
					pr[i2] = sc / sqrt((double)d) + attn_bias_at(c, n, i, i2);
					mx = fmax(mx, pr[i2]);
				}
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2))
					sum += pr[i2] = exp(pr[i2] - mx);
				if (c->lse)
					c->lse[((size_t)j * H + n) * s + i] = mx + log(sum);
				double *o = out + (size_t)i * ldo + ((size_t)j * H + n) * d;
				for (int x = 0; x < d; x++)
					o[x] = 0;
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2)) {
					double w = pr[i2] / sum;
					if (c->p > 0) {
						const uint64_t pl = (uint64_t)j * c->heads_total + c->head0 + n;
						w = keep_attn_ref(c->key, pl, s, s, i, i2, c->p) ? w / (1 - (double)c->p) : 0;
					}
					for (int x = 0; x < d; x++)
						o[x] += w * v[i2 * ldq + x];
				}
			}
		}
	free(pr);
}

/* The backward of attn_ref written out (softmax backward with D = sum_i' P dP), in double:
 * dqkv from dout; with a position bias and dbias not NULL, the scores' gradient dS added into
 * dbias [2 s - 1, heads_total] by distance.  Checked against FD on small shapes, used on the
 * bigger ones. */
static void attn_ref_bwd(const attn_ctx *c, const float *dout, double *dqkv, double *dbias)
{
	const int H = c->ng * c->r, s = c->s, d = c->d;
	const size_t ldq = (size_t)c->b * c->ng * (c->r + 2) * d, ldo = (size_t)c->b * H * d;
	const double sc = 1 / sqrt((double)d);
	double *pr = xmalloc((size_t)s * sizeof *pr), *dp = xmalloc((size_t)s * sizeof *dp);
	double *mk = xmalloc((size_t)s * sizeof *mk);
	memset(dqkv, 0, (size_t)s * ldq * sizeof *dqkv);
	for (int j = 0; j < c->b; j++)
		for (int n = 0; n < H; n++) {
			int g = n / c->r, m = n % c->r;
			size_t base = ((size_t)j * c->ng + g) * (c->r + 2) * d;
			const double *q = c->qkv + base + (size_t)m * d, *k = c->qkv + base + (size_t)c->r * d;
			const double *v = k + d;
			double *dq = dqkv + base + (size_t)m * d, *dk = dqkv + base + (size_t)c->r * d;
			double *dv = dk + d;
			for (int i = 0; i < s; i++) {
				const float *go = dout + (size_t)i * ldo + ((size_t)j * H + n) * d;
				double mx = -INFINITY, sum = 0, D = 0;
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2)) {
					double a = 0;
					for (int x = 0; x < d; x++)
						a += q[i * ldq + x] * k[i2 * ldq + x];
					pr[i2] = a * sc + attn_bias_at(c, n, i, i2);
					mx = fmax(mx, pr[i2]);
				}
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2))
					sum += pr[i2] = exp(pr[i2] - mx);
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2)) {
					const uint64_t pl = (uint64_t)j * c->heads_total + c->head0 + n;
					pr[i2] /= sum;
					mk[i2] = c->p > 0 ? keep_attn_ref(c->key, pl, s, s, i, i2, c->p) / (1 - (double)c->p) : 1;
					double a = 0;
					for (int x = 0; x < d; x++) {
						a += go[x] * v[i2 * ldq + x];
						dv[i2 * ldq + x] += pr[i2] * mk[i2] * go[x];
					}
					dp[i2] = a * mk[i2];
					D += pr[i2] * dp[i2];
				}
				for (int i2 = 0; i2 < s; i2++) if (attn_vis(c, j, i, i2)) {
					double ds = pr[i2] * (dp[i2] - D) * sc;
					if (c->bias && dbias)
						dbias[(size_t)(i2 - i + s - 1) * c->heads_total + c->head0 + n] +=
							pr[i2] * (dp[i2] - D);
					for (int x = 0; x < d; x++) {
						dq[i * ldq + x] += ds * k[i2 * ldq + x];
						dk[i2 * ldq + x] += ds * q[i * ldq + x];
					}
				}
			}
		}
	free(pr), free(dp), free(mk);
}

/* full: element-wise FD of the whole dqkv; else directional checks.  Both also against
 * attn_ref_bwd. */
static void test_attn_case(int s, int b, int ng, int r, int d, float p, int head0, int heads_total,
			   int full)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const uint64_t key = 0x1234567890ABCDEFull ^ (uint64_t)s;
	float *qkv = randf(nq, 1.5), *out = randf(no, 9), *lse = randf(nl, 9);
	double *qd = tod(qkv, nq), *outr = xmalloc(no * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	attn_ctx c = {qd, s, b, ng, r, d, p, key, head0, heads_total, lr, NULL, NULL, NULL};
	attn_ref(&c, outr);
	c.lse = NULL;
	at_attn_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, heads_total, NULL);
	double e = relerr(out, outr, no), el = relerr(lse, lr, nl);
	CHECK(e < FWD_TOL && el < FWD_TOL, "attn_fwd s=%d b=%d ng=%d r=%d d=%d p=%g: out %.2e lse %.2e", s,
	      b, ng, r, d, p, e, el);

	float *R = randf(no, 1), *dq = randf(nq, 9);
	at_attn_bwd(be, dq, R, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, ng, r, d, p, key, head0, heads_total, NULL);
	objective ob = {attn_ref, &c, R, no, outr};
	double eg = full ? fd_check(&ob, qd, nq, dq) : dir_check(&ob, qd, nq, dq, 3);
	double *ga = xmalloc(nq * sizeof *ga);
	attn_ref_bwd(&c, R, ga, NULL);
	double ea = relerr(dq, ga, nq);
	if (full) {
		float *gaf = xmalloc(nq * sizeof *gaf);
		for (size_t i = 0; i < nq; i++)
			gaf[i] = (float)ga[i];
		CHECK(fd_check(&ob, qd, nq, gaf) < BWD_TOL, "attention reference backward vs FD");
		free(gaf);
	}
	free(ga);
	CHECK(eg < BWD_TOL && ea < FWD_TOL,
	      "attn_bwd s=%d b=%d ng=%d r=%d d=%d p=%g vs %s FD: %.2e, vs reference backward: %.2e", s, b,
	      ng, r, d, p, full ? "element-wise" : "directional", eg, ea);

	/* determinism: the same call again gives the same bits */
	float *out2 = randf(no, 9), *lse2 = randf(nl, 9), *dq2 = randf(nq, 9);
	at_attn_fwd(be, out2, lse2, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, heads_total, NULL);
	at_attn_bwd(be, dq2, R, MGT_DT_F32, qkv, out2, MGT_DT_F32, lse2, s, b, ng, r, d, p, key, head0, heads_total, NULL);
	CHECK(!memcmp(out, out2, no * 4) && !memcmp(lse, lse2, nl * 4) && !memcmp(dq, dq2, nq * 4),
	      "attn s=%d: fwd and bwd deterministic", s);
	free(qkv), free(out), free(lse), free(qd), free(outr), free(lr), free(R), free(dq);
	free(out2), free(lse2), free(dq2);
}

/* A key padding mask for b >= 4 sequences of s positions (element i*b + j, 1 visible): sequence
 * 0 all masked, 1 only position 0 visible, 2 its first s/2 + 1 positions (padding at the end, as
 * BERT's batches), the others random (about 3 in 4 visible). */
static uint8_t *attn_mask(int s, int b)
{
	uint8_t *km = xmalloc((size_t)s * b);
	for (int i = 0; i < s; i++)
		for (int j = 0; j < b; j++)
			km[(size_t)i * b + j] =
				(uint8_t)(j == 0 ? 0 : j == 1 ? i == 0 : j == 2 ? i <= s / 2 : urand() > -0.5);
	return km;
}

/* lse against the reference: *ninf the rows where both are -inf (no visible key), *bad the
 * rows where only one is; the relative error of the others. */
static double lse_err(const float *got, const double *ref, size_t n, size_t *ninf, size_t *bad)
{
	double e = 0, r = 0;
	*ninf = *bad = 0;
	for (size_t i = 0; i < n; i++) {
		const int gi = isinf(got[i]) && got[i] < 0, ri = isinf(ref[i]) && ref[i] < 0;
		if (gi || ri) {
			*ninf += gi && ri;
			*bad += gi != ri;
			continue;
		}
		double dd = got[i] - ref[i];
		e += dd * dd;
		r += ref[i] * ref[i];
	}
	return isnan(e) ? INFINITY : r > 0 ? sqrt(e / r) : sqrt(e);
}

/* Elements of dqkv [s*b, ng, r + 2, d] that must be exactly 0 under key mask km and are not (or
 * any element that is not finite): every slot of sequence 0 (no key visible: its queries get
 * nothing, its keys feed no one) and the key and value slots of every masked key. */
static size_t mask_grad_bad(const float *dq, const uint8_t *km, int s, int b, int ng, int r, int d)
{
	size_t bad = 0;
	for (int i = 0; i < s; i++)
		for (int j = 0; j < b; j++)
			for (int g = 0; g < ng; g++)
				for (int m = 0; m < r + 2; m++)
					for (int x = 0; x < d; x++) {
						const float v = dq[((((size_t)i * b + j) * ng + g) * (r + 2) + m) * d + x];
						const int zero = j == 0 || (m >= r && !km[(size_t)i * b + j]);
						bad += !isfinite(v) || (zero && v != 0.0f);
					}
	return bad;
}

/* Document starts of packed rows (mgt_attn.seg_start [s*b], element i*b + j) for b >= 3
 * sequences: sequence 0 one document, 1 documents of one token, the others of random lengths
 * 1..maxlen (crossing the CPU's 64-row blocks and 256-key tiles when s is past them). */
static int32_t *attn_segs(int s, int b, int maxlen)
{
	int32_t *seg = xmalloc((size_t)s * b * sizeof *seg);
	for (int j = 0; j < b; j++)
		for (int i = 0, start = 0, left = 0; i < s; i++) {
			if (j > 0 && left == 0) /* a new document at i */
				start = i, left = j == 1 ? 1 : 1 + (int)((urand() + 1) * 0.5 * maxlen) % maxlen;
			seg[(size_t)i * b + j] = start;
			left -= j > 0;
		}
	return seg;
}

static void at_packed(mgt_backend *b_, int fwd, const int32_t *seg, void *o, float *l, void *dq, const void *R,
		      const float *qkv, int s, int b, int ng, int r, int d, float p, uint64_t key)
{
	mgt_attn a = at_self(MGT_DT_F32, MGT_DT_F32, s, b, ng, r, d, p, key, 0, ng * r, NULL, NULL, NULL);
	a.seg_start = seg;
	if (fwd)
		b_->ops->attn_forward(b_, &a, o, l, qkv, NULL);
	else
		b_->ops->attn_backward(b_, &a, dq, NULL, R, qkv, NULL, o, l);
}

/* Elements of a [s*b, w] activation outside document [d0, d1) of sequence j that differ
 * between x and y (the document's own rows excluded). */
static size_t outside_diff(const float *x, const float *y, int s, int b, size_t w, int j, int d0, int d1)
{
	size_t bad = 0;
	for (int i = 0; i < s; i++)
		for (int jj = 0; jj < b; jj++)
			if (!(jj == j && i >= d0 && i < d1))
				bad += memcmp(x + ((size_t)i * b + jj) * w, y + ((size_t)i * b + jj) * w, w * 4) != 0;
	return bad;
}

/* Packed sequences (mgt_attn.seg_start: Megatron's THD cu_seqlens, --reset-attention-mask):
 * attn_fwd / attn_bwd against attn_ref / attn_ref_bwd with the block-diagonal causal mask in
 * double and against finite differences; one document's q, k, v changed leaves every other
 * row's out, lse and gradients bit for bit (no attention across a boundary); and every row one
 * document (all starts 0) gives the plain causal op's bits. */
static void test_attn_packed_case(int s, int b, int ng, int r, int d, float p, int maxlen, int full)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const uint64_t key = 0x5E6ull ^ (uint64_t)s;
	int32_t *seg = attn_segs(s, b, maxlen);
	float *qkv = randf(nq, 1.5), *out = randf(no, 9), *lse = randf(nl, 9), *R = randf(no, 1), *dq = randf(nq, 9);
	double *qd = tod(qkv, nq), *outr = xmalloc(no * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	attn_ctx c = {qd, s, b, ng, r, d, p, key, 0, H, lr, NULL, NULL, seg};
	attn_ref(&c, outr);
	c.lse = NULL;
	at_packed(be, 1, seg, out, lse, NULL, NULL, qkv, s, b, ng, r, d, p, key);
	size_t ninf, bad;
	const double e = relerr(out, outr, no), el = lse_err(lse, lr, nl, &ninf, &bad);
	CHECK(e < FWD_TOL && el < FWD_TOL && ninf == 0 && bad == 0,
	      "packed attn_fwd s=%d b=%d ng=%d r=%d d=%d p=%g docs <= %d: out %.2e lse %.2e", s, b, ng, r, d, p,
	      maxlen, e, el);
	at_packed(be, 0, seg, out, lse, dq, R, qkv, s, b, ng, r, d, p, key);
	objective ob = {attn_ref, &c, R, no, outr};
	const double eg = full ? fd_check(&ob, qd, nq, dq) : dir_check(&ob, qd, nq, dq, 3);
	double *ga = xmalloc(nq * sizeof *ga);
	attn_ref_bwd(&c, R, ga, NULL);
	const double ea = relerr(dq, ga, nq);
	CHECK(eg < BWD_TOL && ea < FWD_TOL, "packed attn_bwd s=%d b=%d p=%g vs %s FD: %.2e, vs reference: %.2e", s,
	      b, p, full ? "element-wise" : "directional", eg, ea);

	/* the document of sequence b - 1 holding position s / 2 changed: nothing else moves */
	const int j = b - 1, d0 = seg[(size_t)(s / 2) * b + j];
	int d1 = s / 2;
	while (d1 < s && seg[(size_t)d1 * b + j] == d0)
		d1++;
	float *q2 = xmalloc(nq * 4), *out2 = randf(no, 9), *lse2 = randf(nl, 9), *dq2 = randf(nq, 9);
	memcpy(q2, qkv, nq * 4);
	const size_t w = (size_t)ng * (r + 2) * d;
	for (int i = d0; i < d1; i++)
		for (size_t x = 0; x < w; x++)
			q2[((size_t)i * b + j) * w + x] += 0.5f;
	at_packed(be, 1, seg, out2, lse2, NULL, NULL, q2, s, b, ng, r, d, p, key);
	at_packed(be, 0, seg, out2, lse2, dq2, R, q2, s, b, ng, r, d, p, key);
	size_t lbad = 0;
	for (int jj = 0; jj < b; jj++)
		for (int n = 0; n < H; n++)
			for (int i = 0; i < s; i++) {
				const size_t k = ((size_t)jj * H + n) * s + i;
				lbad += !(jj == j && i >= d0 && i < d1) && memcmp(lse + k, lse2 + k, 4);
			}
	const size_t ob_ = outside_diff(out, out2, s, b, (size_t)H * d, j, d0, d1);
	const size_t gb = outside_diff(dq, dq2, s, b, w, j, d0, d1);
	CHECK(ob_ == 0 && lbad == 0 && gb == 0 && memcmp(out, out2, no * 4),
	      "packed attn s=%d: document [%d, %d) of sequence %d changed, other rows' out, lse, dqkv bit for bit "
	      "(%zu, %zu, %zu rows differ)", s, d0, d1, j, ob_, lbad, gb);

	/* one document a row (all starts 0) = the causal op, bit for bit */
	memset(seg, 0, (size_t)T * sizeof *seg);
	at_packed(be, 1, seg, out2, lse2, NULL, NULL, qkv, s, b, ng, r, d, p, key);
	at_packed(be, 0, seg, out2, lse2, dq2, R, qkv, s, b, ng, r, d, p, key);
	at_attn_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, 0, H, NULL);
	at_attn_bwd(be, dq, R, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, ng, r, d, p, key, 0, H, NULL);
	CHECK(!memcmp(out, out2, no * 4) && !memcmp(lse, lse2, nl * 4) && !memcmp(dq, dq2, nq * 4),
	      "packed attn s=%d with one document a row = causal attn, bit for bit", s);
	free(seg), free(qkv), free(out), free(lse), free(R), free(dq), free(qd), free(outr), free(lr), free(ga);
	free(q2), free(out2), free(lse2), free(dq2);
}

/* attn_fwd and attn_bwd under a key padding mask (BERT's bidirectional attention), storage dt
 * (fp32 or bf16), against attn_ref / attn_ref_bwd with the same mask in double and the backward
 * against finite differences of attn_ref (element-wise when full, else directional); the rows
 * without a visible key out 0, lse -inf, 0 gradients, nothing NaN.  bf16: the references take the
 * rounded qkv; out is within bf16 rounding of them, and the op's lse, dqkv are the bits of the fp32
 * op on the same values (out widened). */
static void test_attn_mask_case(int s, int b, int ng, int r, int d, float p, int head0, int heads_total,
				int full, mgt_elem_type dt)
{
	const int H = ng * r, T = s * b, lp = dt != MGT_DT_F32;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const uint64_t key = 0x0BE27ull ^ (uint64_t)s;
	uint8_t *km = attn_mask(s, b);
	float *qkv = randf(nq, 1.5), *out = randf(no, 9), *lse = randf(nl, 9), *R = randf(no, 1), *dq = randf(nq, 9);
	uint16_t *q16 = xmalloc(nq * 2), *o16 = xmalloc(no * 2);
	if (lp) { /* qkv: the bf16 values, for the references and the fp32 op alike */
		O->cast(be, q16, dt, qkv, nq);
		for (size_t i = 0; i < nq; i++)
			qkv[i] = mgt_bf16_to_f32(q16[i]);
	}
	double *qd = tod(qkv, nq), *outr = xmalloc(no * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	attn_ctx c = {qd, s, b, ng, r, d, p, key, head0, heads_total, lr, km, NULL, NULL};
	attn_ref(&c, outr);
	c.lse = NULL;
	at_attn_fwd(be, lp ? (void *)o16 : out, lse, lp ? (void *)q16 : qkv, dt, s, b, ng, r, d, p, key, head0,
		    heads_total, km);
	if (lp)
		for (size_t i = 0; i < no; i++)
			out[i] = mgt_bf16_to_f32(o16[i]);
	size_t ninf, nbad;
	const double e = relerr(out, outr, no), el = lse_err(lse, lr, nl, &ninf, &nbad);
	CHECK(e < (lp ? 4e-3 : FWD_TOL) && el < FWD_TOL && ninf == (size_t)H * s && nbad == 0,
	      "attn_fwd key mask %s s=%d b=%d ng=%d r=%d d=%d p=%g: out %.2e lse %.2e, %zu rows -inf (want %d), %zu wrong",
	      lp ? "bf16" : "fp32", s, b, ng, r, d, p, e, el, ninf, H * s, nbad);

	at_attn_bwd(be, dq, R, MGT_DT_F32, lp ? (void *)q16 : qkv, lp ? (void *)o16 : out, dt, lse, s, b, ng, r, d, p,
		    key, head0, heads_total, km);
	objective ob = {attn_ref, &c, R, no, outr};
	double eg = full ? fd_check(&ob, qd, nq, dq) : dir_check(&ob, qd, nq, dq, 3);
	double *ga = xmalloc(nq * sizeof *ga);
	attn_ref_bwd(&c, R, ga, NULL);
	const double ea = relerr(dq, ga, nq);
	const size_t zbad = mask_grad_bad(dq, km, s, b, ng, r, d);
	CHECK(eg < (lp ? 2e-2 : BWD_TOL) && ea < (lp ? 2e-2 : FWD_TOL) && zbad == 0,
	      "attn_bwd key mask %s s=%d b=%d ng=%d r=%d d=%d p=%g vs %s FD: %.2e, vs reference backward: %.2e; "
	      "%zu gradients of masked keys or of the empty sequence not 0 or not finite",
	      lp ? "bf16" : "fp32", s, b, ng, r, d, p, full ? "element-wise" : "directional", eg, ea, zbad);
	if (lp) { /* the fp32 op on the same values: the same lse and dqkv bits */
		float *l32 = randf(nl, 9), *o32 = randf(no, 9), *d32 = randf(nq, 9);
		at_attn_fwd(be, o32, l32, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, heads_total, km);
		at_attn_bwd(be, d32, R, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, ng, r, d, p, key, head0,
			    heads_total, km);
		size_t nround = 0;
		for (size_t i = 0; i < no; i++)
			nround += o16[i] != mgt_f32_to_bf16(o32[i]);
		CHECK(!memcmp(l32, lse, nl * 4) && !memcmp(d32, dq, nq * 4) && nround == 0,
		      "attn key mask bf16 s=%d: lse and dqkv the bits of the fp32 op's, out its rounding (%zu differ)",
		      s, nround);
		free(l32), free(o32), free(d32);
	}
	free(km), free(qkv), free(out), free(lse), free(R), free(dq), free(q16), free(o16), free(qd), free(outr);
	free(lr), free(ga);
}

/* attn_bias_fwd and attn_bias_bwd (T5's relative position bias, bias [2 s - 1, heads_total]
 * random), causal or under attn_mask's key padding mask, against attn_ref / attn_ref_bwd with the
 * bias in double: out and lse; dqkv against the reference backward and directional finite
 * differences of attn_ref in qkv; the increments of dbias (started from random values) against the
 * reference's sums of dS by distance and against finite differences of attn_ref in the bias
 * (element-wise when full, else at 20 random elements; the columns of other ranks' heads have
 * derivative 0); those columns keep the start's bits, and so do the distances after the diagonal
 * when causal (no score has them); the backward twice gives the same bits. */
static void test_attn_bias_case(int s, int b, int ng, int r, int d, float p, int head0, int heads_total,
				bool masked, int full)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const size_t nb = (size_t)(2 * s - 1) * heads_total;
	const uint64_t key = 0x0F1E2D3C4B5A6978ull ^ (uint64_t)(s * 131 + b);
	uint8_t *km = masked ? attn_mask(s, b) : NULL;
	float *qkv = randf(nq, 1.5), *bias = randf(nb, 2), *out = randf(no, 9), *lse = randf(nl, 9);
	double *qd = tod(qkv, nq), *bd = tod(bias, nb), *outr = xmalloc(no * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	attn_ctx c = {qd, s, b, ng, r, d, p, key, head0, heads_total, lr, km, bd, NULL};
	attn_ref(&c, outr);
	c.lse = NULL;
	at_attn_bias_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, heads_total, km, bias);
	size_t ninf, bad;
	const double e = relerr(out, outr, no), el = lse_err(lse, lr, nl, &ninf, &bad);
	CHECK(e < FWD_TOL && el < FWD_TOL && bad == 0,
	      "attn_bias_fwd %s s=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d: out %.2e lse %.2e (%zu rows -inf, %zu wrong)",
	      masked ? "key mask" : "causal", s, b, ng, r, d, p, head0, heads_total, e, el, ninf, bad);

	float *R = randf(no, 1), *dq = randf(nq, 9), *db0 = randf(nb, 0.1), *db = xmalloc(nb * 4);
	memcpy(db, db0, nb * 4);
	at_attn_bias_bwd(be, dq, R, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, ng, r, d, p, key, head0, heads_total,
			 km, bias, db);
	objective ob = {attn_ref, &c, R, no, outr};
	double *ga = xmalloc(nq * sizeof *ga), *gb = xmalloc(nb * sizeof *gb);
	attn_ref_bwd(&c, R, ga, gb);
	const double eq = dir_check(&ob, qd, nq, dq, 3), ea = relerr(dq, ga, nq), eb = relerr_delta(db, db0, gb, nb);
	float *inc = xmalloc(nb * 4);
	for (size_t i = 0; i < nb; i++)
		inc[i] = (float)((double)db[i] - db0[i]);
	const double ebf = full ? fd_check(&ob, bd, nb, inc) : fd_check_some(&ob, bd, nb, inc, 20);
	size_t touched = 0;
	for (int x = 0; x < 2 * s - 1; x++)
		for (int h = 0; h < heads_total; h++) {
			const size_t i = (size_t)x * heads_total + h;
			touched += (h < head0 || h >= head0 + H || (!masked && x > s - 1)) && memcmp(&db[i], &db0[i], 4);
		}
	CHECK(eq < BWD_TOL && ea < FWD_TOL && eb < FWD_TOL && ebf < BWD_TOL && touched == 0,
	      "attn_bias_bwd %s s=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d: dqkv vs directional FD %.2e, vs reference "
	      "%.2e; dbias increments vs reference %.2e, vs %s FD %.2e; %zu dbias elements of other heads or "
	      "unseen distances changed", masked ? "key mask" : "causal", s, b, ng, r, d, p, head0, heads_total, eq, ea,
	      eb, full ? "element-wise" : "sampled", ebf, touched);

	float *dq2 = randf(nq, 9), *db2 = xmalloc(nb * 4);
	memcpy(db2, db0, nb * 4);
	at_attn_bias_bwd(be, dq2, R, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, ng, r, d, p, key, head0, heads_total,
			 km, bias, db2);
	CHECK(!memcmp(dq, dq2, nq * 4) && !memcmp(db, db2, nb * 4), "attn_bias_bwd s=%d: dqkv and dbias deterministic", s);
	free(km), free(qkv), free(bias), free(out), free(lse), free(qd), free(bd), free(outr), free(lr), free(R);
	free(dq), free(db0), free(db), free(ga), free(gb), free(inc), free(dq2), free(db2);
}

static void test_attn(void)
{
	test_attn_case(7, 2, 2, 2, 8, 0.0f, 0, 4, 1);
	test_attn_case(7, 2, 2, 2, 8, 0.3f, 1, 6, 1);
	test_attn_case(5, 1, 1, 1, 4, 0.0f, 0, 1, 1);
	test_attn_case(6, 3, 3, 1, 6, 0.2f, 2, 5, 1);
	test_attn_case(200, 1, 2, 2, 64, 0.0f, 0, 4, 0);
	test_attn_case(200, 1, 1, 2, 64, 0.1f, 0, 2, 0);
	test_attn_case(300, 2, 2, 2, 16, 0.1f, 1, 5, 0); /* several key tiles */
	test_attn_case(70, 2, 1, 3, 16, 0.0f, 0, 3, 0);
	/* packed sequences: GQA, dropout, one-token documents, documents across key tiles */
	test_attn_packed_case(9, 3, 2, 2, 8, 0.0f, 4, 1);
	test_attn_packed_case(9, 3, 1, 2, 4, 0.3f, 3, 1);
	test_attn_packed_case(300, 3, 1, 2, 16, 0.1f, 90, 0);
	test_attn_packed_case(600, 3, 2, 1, 16, 0.0f, 300, 0);
	/* the key padding mask: GQA, dropout, s past one key tile (256) and not a multiple of 64 */
	test_attn_mask_case(7, 4, 2, 2, 8, 0.0f, 0, 4, 1, MGT_DT_F32);
	test_attn_mask_case(7, 4, 2, 2, 8, 0.3f, 1, 6, 1, MGT_DT_F32);
	test_attn_mask_case(5, 5, 1, 3, 4, 0.2f, 0, 3, 1, MGT_DT_F32);
	test_attn_mask_case(300, 4, 1, 2, 16, 0.1f, 0, 2, 0, MGT_DT_F32);
	test_attn_mask_case(70, 5, 2, 2, 16, 0.0f, 2, 8, 0, MGT_DT_F32);
	test_attn_mask_case(70, 4, 2, 2, 16, 0.1f, 0, 4, 0, MGT_DT_BF16);
	test_attn_mask_case(300, 4, 1, 3, 16, 0.0f, 0, 3, 0, MGT_DT_BF16);
	/* the position bias (T5): causal and key mask, GQA, a rank's heads of more, dropout, key tiles */
	test_attn_bias_case(6, 2, 2, 2, 8, 0.0f, 1, 6, false, 1);
	test_attn_bias_case(7, 4, 1, 2, 8, 0.0f, 0, 2, true, 1);
	test_attn_bias_case(7, 4, 2, 1, 8, 0.3f, 2, 5, true, 1);
	test_attn_bias_case(5, 2, 1, 3, 4, 0.2f, 0, 3, false, 1);
	test_attn_bias_case(300, 1, 1, 2, 16, 0.1f, 2, 4, false, 0); /* several key tiles */
	test_attn_bias_case(70, 4, 2, 1, 16, 0.0f, 0, 2, true, 0);
}

/* ================= cross-attention ================= */

typedef struct {
	const double *q, *kv; /* q [sq*b, ng*r, d], kv [sk*b, ng, 2, d] */
	int sq, sk, b, ng, r, d;
	float p;
	uint64_t key;
	int head0, heads_total;
	double *lse;       /* written when not NULL */
	const uint8_t *km; /* [sk*b] (1 visible); NULL: all visible */
} xattn_ctx;

static int xattn_vis(const xattn_ctx *c, int j, int i2) { return !c->km || c->km[(size_t)i2 * c->b + j]; }

/* Weight of probability (j, n, i, i2) after dropout: 1, or keep / (1 - p) by the header's index. */
static double xattn_drop(const xattn_ctx *c, int j, int n, int i, int i2)
{
	if (!(c->p > 0))
		return 1;
	const uint64_t pl = (uint64_t)j * c->heads_total + c->head0 + n;
	return keep_attn_ref(c->key, pl, c->sq, c->sk, i, i2, c->p) / (1 - (double)c->p);
}

/* The probabilities pr[sk] of query (j, n, i) in double (0 for masked keys); returns lse (-inf
 * when no key is visible, then pr is all 0). */
static double xattn_probs(const xattn_ctx *c, int j, int n, int i, double *pr)
{
	const int H = c->ng * c->r, d = c->d, g = n / c->r;
	const double *q = c->q + (((size_t)i * c->b + j) * H + n) * d;
	double mx = -INFINITY, sum = 0;
	for (int i2 = 0; i2 < c->sk; i2++) {
		pr[i2] = -INFINITY;
		if (!xattn_vis(c, j, i2))
			continue;
		const double *k = c->kv + (((size_t)i2 * c->b + j) * c->ng + g) * 2 * d;
		double a = 0;
		for (int x = 0; x < d; x++)
			a += q[x] * k[x];
		pr[i2] = a / sqrt((double)d);
		mx = fmax(mx, pr[i2]);
	}
	for (int i2 = 0; i2 < c->sk; i2++)
		sum += pr[i2] = pr[i2] == -INFINITY ? 0 : exp(pr[i2] - mx);
	for (int i2 = 0; i2 < c->sk && sum > 0; i2++)
		pr[i2] /= sum;
	return sum > 0 ? mx + log(sum) : -INFINITY;
}

/* backend.h xattn_fwd in double, the full softmax over the visible keys: out (and lse). */
static void xattn_ref(void *c_, double *out)
{
	xattn_ctx *c = c_;
	const int H = c->ng * c->r, d = c->d;
	double *pr = xmalloc((size_t)c->sk * sizeof *pr);
	for (int i = 0; i < c->sq; i++)
		for (int j = 0; j < c->b; j++)
			for (int n = 0; n < H; n++) {
				const double l = xattn_probs(c, j, n, i, pr);
				if (c->lse)
					c->lse[((size_t)j * H + n) * c->sq + i] = l;
				double *o = out + (((size_t)i * c->b + j) * H + n) * d;
				for (int x = 0; x < d; x++)
					o[x] = 0;
				for (int i2 = 0; i2 < c->sk; i2++) {
					const double w = pr[i2] * xattn_drop(c, j, n, i, i2);
					const double *v = c->kv + (((size_t)i2 * c->b + j) * c->ng + n / c->r) * 2 * d + d;
					for (int x = 0; x < d; x++)
						o[x] += w * v[x];
				}
			}
	free(pr);
}

/* The backward of xattn_ref written out in double: g = [dq | dkv] from dout. */
static void xattn_ref_bwd(const xattn_ctx *c, const float *dout, double *g)
{
	const int H = c->ng * c->r, d = c->d;
	const size_t nq = (size_t)c->sq * c->b * H * d, nk = (size_t)c->sk * c->b * c->ng * 2 * d;
	const double sc = 1 / sqrt((double)d);
	double *pr = xmalloc((size_t)c->sk * sizeof *pr), *dp = xmalloc((size_t)c->sk * sizeof *dp);
	memset(g, 0, (nq + nk) * sizeof *g);
	for (int i = 0; i < c->sq; i++)
		for (int j = 0; j < c->b; j++)
			for (int n = 0; n < H; n++) {
				const size_t qo = (((size_t)i * c->b + j) * H + n) * d;
				const float *go = dout + qo;
				double D = 0;
				xattn_probs(c, j, n, i, pr);
				for (int i2 = 0; i2 < c->sk; i2++) {
					const size_t ko = (((size_t)i2 * c->b + j) * c->ng + n / c->r) * 2 * d;
					const double mu = xattn_drop(c, j, n, i, i2), *v = c->kv + ko + d;
					double a = 0;
					for (int x = 0; x < d; x++) {
						a += go[x] * v[x];
						g[nq + ko + d + x] += pr[i2] * mu * go[x];
					}
					dp[i2] = a * mu;
					D += pr[i2] * dp[i2];
				}
				for (int i2 = 0; i2 < c->sk; i2++) {
					const size_t ko = (((size_t)i2 * c->b + j) * c->ng + n / c->r) * 2 * d;
					const double ds = pr[i2] * (dp[i2] - D) * sc;
					for (int x = 0; x < d; x++) {
						g[qo + x] += ds * c->kv[ko + x];
						g[nq + ko + x] += ds * c->q[qo + x];
					}
				}
			}
	free(pr), free(dp);
}

/* Gradients [dq | dkv] that must be exactly 0 under key mask km and are not, or are not finite:
 * everything of a sequence whose keys are all masked, and the key and value rows of masked keys. */
static size_t xattn_zero_bad(const float *g, const uint8_t *km, int sq, int sk, int b, int ng, int r, int d)
{
	const size_t hq = (size_t)ng * r * d, hk = (size_t)ng * 2 * d;
	size_t bad = 0;
	for (int j = 0; j < b; j++) {
		int any = 0;
		for (int i2 = 0; km && i2 < sk; i2++)
			any |= km[(size_t)i2 * b + j] != 0;
		for (int i = 0; i < sq; i++)
			for (size_t e = 0; e < hq; e++) {
				const float v = g[((size_t)i * b + j) * hq + e];
				bad += !isfinite(v) || (km && !any && v != 0.0f);
			}
		for (int i2 = 0; i2 < sk; i2++)
			for (size_t e = 0; e < hk; e++) {
				const float v = g[(size_t)sq * b * hq + ((size_t)i2 * b + j) * hk + e];
				bad += !isfinite(v) || (km && !km[(size_t)i2 * b + j] && v != 0.0f);
			}
	}
	return bad;
}

/* Elements of a and b [n] (16-bit) that differ. */
static size_t ndiff16(const uint16_t *a, const uint16_t *b, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += a[i] != b[i];
	return k;
}

/* Rounds x [n] to the 16-bit type dt in place (the values a 16-bit tensor holds); returns them as
 * 16-bit elements too. */
static uint16_t *round16(float *x, size_t n, mgt_elem_type dt)
{
	uint16_t *h = xmalloc(n * 2);
	O->cast(be, h, dt, x, n);
	for (size_t i = 0; i < n; i++)
		x[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(h[i]) : mgt_f16_to_f32(h[i]);
	return h;
}

/* xattn_fwd / xattn_bwd with sq queries against sk keys, storage dt (fp32, or bf16/fp16 with the
 * references on the rounded values), masked (attn_mask's key mask over the sk keys: a sequence
 * with every key masked, one with a single visible key, random ones) or not, against xattn_ref
 * and xattn_ref_bwd in double and finite differences of xattn_ref (element-wise when full, else
 * directional); then the same call again (the same bits), and for 16-bit storage the fp32 op on
 * the same values (the same lse and gradient bits, out its rounding) and 16-bit gradients (the
 * rounding of the fp32 ones). */
static void test_xattn_case(int sq, int sk, int b, int ng, int r, int d, float p, int head0, int heads_total,
			    bool masked, int full, mgt_elem_type dt)
{
	const int H = ng * r, lp = dt != MGT_DT_F32;
	const size_t nq = (size_t)sq * b * H * d, nk = (size_t)sk * b * ng * 2 * d, nl = (size_t)b * H * sq;
	const uint64_t key = 0xC205Full ^ (uint64_t)sq << 20 ^ (uint64_t)sk;
	const char *tn = dt == MGT_DT_F32 ? "fp32" : dt == MGT_DT_BF16 ? "bf16" : "fp16";
	uint8_t *km = masked ? attn_mask(sk, b) : NULL;
	float *x = randf(nq + nk, 1.5), *out = randf(nq, 9), *lse = randf(nl, 9), *R = randf(nq, 1);
	float *g = randf(nq + nk, 9); /* [dq | dkv] */
	uint16_t *x16 = lp ? round16(x, nq + nk, dt) : NULL, *o16 = xmalloc(nq * 2);
	double *xd = tod(x, nq + nk), *outr = xmalloc(nq * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	xattn_ctx c = {xd, xd + nq, sq, sk, b, ng, r, d, p, key, head0, heads_total, lr, km};
	xattn_ref(&c, outr);
	c.lse = NULL;
	const void *q = lp ? (void *)x16 : x, *kv = lp ? (void *)(x16 + nq) : x + nq;
	at_xattn_fwd(be, lp ? (void *)o16 : out, lse, q, kv, dt, sq, sk, b, ng, r, d, p, key, head0, heads_total, km);
	for (size_t i = 0; lp && i < nq; i++)
		out[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(o16[i]) : mgt_f16_to_f32(o16[i]);
	size_t ninf, nbad, want = 0;
	for (int j = 0; masked && j < b; j++) {
		int any = 0;
		for (int i2 = 0; i2 < sk; i2++)
			any |= km[(size_t)i2 * b + j];
		want += any ? 0 : (size_t)H * sq;
	}
	const double e = relerr(out, outr, nq), el = lse_err(lse, lr, nl, &ninf, &nbad);
	CHECK(e < (lp ? 4e-3 : FWD_TOL) && el < FWD_TOL && ninf == want && nbad == 0,
	      "xattn_fwd %s sq=%d sk=%d b=%d ng=%d r=%d d=%d p=%g%s: out %.2e lse %.2e, %zu rows -inf (want %zu), "
	      "%zu wrong", tn, sq, sk, b, ng, r, d, p, masked ? " key-mask" : "", e, el, ninf, want, nbad);

	at_xattn_bwd(be, g, g + nq, R, MGT_DT_F32, q, kv, lp ? (void *)o16 : out, dt, lse, sq, sk, b, ng, r, d, p, key,
		     head0, heads_total, km);
	objective ob = {xattn_ref, &c, R, nq, outr};
	const double eg = full ? fd_check(&ob, xd, nq + nk, g) : dir_check(&ob, xd, nq + nk, g, 3);
	double *ga = xmalloc((nq + nk) * sizeof *ga);
	xattn_ref_bwd(&c, R, ga);
	if (full) {
		float *gaf = xmalloc((nq + nk) * sizeof *gaf);
		for (size_t i = 0; i < nq + nk; i++)
			gaf[i] = (float)ga[i];
		CHECK(fd_check(&ob, xd, nq + nk, gaf) < BWD_TOL, "cross-attention reference backward vs FD");
		free(gaf);
	}
	const double ea = relerr(g, ga, nq + nk), eq = relerr(g, ga, nq), ek = relerr(g + nq, ga + nq, nk);
	const size_t zb = xattn_zero_bad(g, km, sq, sk, b, ng, r, d);
	CHECK(eg < (lp ? 2e-2 : BWD_TOL) && ea < (lp ? 2e-2 : FWD_TOL) && zb == 0,
	      "xattn_bwd %s sq=%d sk=%d b=%d ng=%d r=%d d=%d p=%g%s vs %s FD: %.2e, vs reference backward: %.2e "
	      "(dq %.2e, dkv %.2e); %zu gradients of masked keys or empty sequences not 0 or not finite",
	      tn, sq, sk, b, ng, r, d, p, masked ? " key-mask" : "", full ? "element-wise" : "directional", eg, ea, eq,
	      ek, zb);

	float *o2 = randf(nq, 9), *l2 = randf(nl, 9), *g2 = randf(nq + nk, 9);
	if (!lp) { /* determinism */
		at_xattn_fwd(be, o2, l2, q, kv, dt, sq, sk, b, ng, r, d, p, key, head0, heads_total, km);
		at_xattn_bwd(be, g2, g2 + nq, R, MGT_DT_F32, q, kv, o2, dt, l2, sq, sk, b, ng, r, d, p, key, head0,
			     heads_total, km);
		CHECK(!memcmp(out, o2, nq * 4) && !memcmp(lse, l2, nl * 4) && !memcmp(g, g2, (nq + nk) * 4),
		      "xattn sq=%d sk=%d: fwd and bwd deterministic", sq, sk);
	} else { /* the fp32 op on the same values; 16-bit gradients */
		at_xattn_fwd(be, o2, l2, x, x + nq, MGT_DT_F32, sq, sk, b, ng, r, d, p, key, head0, heads_total, km);
		at_xattn_bwd(be, g2, g2 + nq, R, MGT_DT_F32, x, x + nq, out, MGT_DT_F32, lse, sq, sk, b, ng, r, d, p, key,
			     head0, heads_total, km);
		size_t nround = 0;
		for (size_t i = 0; i < nq; i++)
			nround += o16[i] != (dt == MGT_DT_BF16 ? mgt_f32_to_bf16(o2[i]) : mgt_f32_to_f16(o2[i]));
		const bool same = !memcmp(l2, lse, nl * 4) && !memcmp(g2, g, (nq + nk) * 4);
		/* 16-bit dout (R rounded) and gradients: the fp32 gradients of the rounded R, rounded */
		float *Rr = copyf(R, nq), *g3 = randf(nq + nk, 9);
		uint16_t *R16 = round16(Rr, nq, dt), *g16 = xmalloc((nq + nk) * 2), *r16 = xmalloc((nq + nk) * 2);
		at_xattn_bwd(be, g3, g3 + nq, Rr, MGT_DT_F32, q, kv, o16, dt, lse, sq, sk, b, ng, r, d, p, key, head0,
			     heads_total, km);
		O->cast(be, r16, dt, g3, nq + nk);
		at_xattn_bwd(be, g16, g16 + nq, R16, dt, q, kv, o16, dt, lse, sq, sk, b, ng, r, d, p, key, head0,
			     heads_total, km);
		const size_t n16 = ndiff16(g16, r16, nq + nk);
		CHECK(same && nround == 0 && n16 == 0,
		      "xattn %s sq=%d sk=%d: lse and gradients the bits of the fp32 op's, out its rounding (%zu differ), "
		      "16-bit gradients the fp32 ones rounded (%zu differ)", tn, sq, sk, nround, n16);
		free(Rr), free(g3), free(R16), free(g16), free(r16);
	}
	free(km), free(x), free(out), free(lse), free(R), free(g), free(x16), free(o16), free(xd), free(outr), free(lr);
	free(ga), free(o2), free(l2), free(g2);
}

static void test_xattn(void)
{
	/* small: element-wise FD; sq != sk both ways, MHA (r = 1) and GQA (r = 2), dropout */
	test_xattn_case(5, 7, 4, 2, 1, 8, 0.0f, 0, 2, true, 1, MGT_DT_F32);
	test_xattn_case(7, 4, 4, 2, 2, 8, 0.3f, 1, 6, true, 1, MGT_DT_F32);
	test_xattn_case(6, 9, 2, 1, 3, 4, 0.2f, 0, 3, false, 1, MGT_DT_F32);
	/* 37 decoder positions against 70 encoder ones (neither a multiple of a tile), and past a
	 * key tile (300 keys) */
	test_xattn_case(37, 70, 4, 2, 1, 16, 0.1f, 2, 8, true, 0, MGT_DT_F32);
	test_xattn_case(37, 70, 5, 1, 2, 16, 0.0f, 0, 2, true, 0, MGT_DT_F32);
	test_xattn_case(70, 37, 3, 2, 2, 16, 0.1f, 0, 4, false, 0, MGT_DT_F32);
	test_xattn_case(40, 300, 4, 1, 2, 16, 0.1f, 0, 2, true, 0, MGT_DT_F32);
	test_xattn_case(37, 70, 4, 2, 1, 16, 0.1f, 0, 2, true, 0, MGT_DT_BF16);
	test_xattn_case(45, 33, 4, 1, 2, 16, 0.0f, 1, 4, false, 0, MGT_DT_F16);
}

/* ================= context-parallel attention blocks ================= */

/* ||got - ref|| / ||ref|| of two fp32 arrays, in double; their largest |got - ref| in *mx. */
static double relerr_f(const float *got, const float *ref, size_t n, double *mx)
{
	double e = 0, r = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)got[i] - ref[i];
		e += d * d;
		r += (double)ref[i] * ref[i];
		m = fmax(m, fabs(d));
	}
	*mx = isnan(e) ? INFINITY : m;
	if (isnan(e))
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

static float *fill_f(size_t n, float v)
{
	float *x = xmalloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = v;
	return x;
}

/* The key and value slots of qkv [T, ng, r + 2, d] equal those of ref, bit for bit. */
static bool kv_slots_equal(const float *qkv, const float *ref, int T, int ng, int r, int d)
{
	for (size_t t = 0; t < (size_t)T * ng; t++)
		if (memcmp(qkv + (t * (r + 2) + r) * d, ref + (t * (r + 2) + r) * d, 2 * (size_t)d * 4))
			return false;
	return true;
}

/* One test shape: the full sequence's tensors and the whole-sequence results to match. */
typedef struct {
	int S, b, ng, r, d, H;
	float p;
	uint64_t key;
	int head0, heads_total;
	size_t wq, wk, wo; /* floats per position in qkv, kv, out */
	float *qkv, *R, *out, *lse, *dq;
} cp_case;

static void cp_case_init(cp_case *t, int S, int b, int ng, int r, int d, float p, int head0, int heads_total)
{
	*t = (cp_case){S, b, ng, r, d, ng * r, p, 0xC0FFEEull ^ (uint64_t)S * 31, head0, heads_total, 0, 0, 0,
		       NULL, NULL, NULL, NULL, NULL};
	t->wq = (size_t)b * ng * (r + 2) * d, t->wk = (size_t)b * ng * 2 * d, t->wo = (size_t)b * t->H * d;
	t->qkv = randf(S * t->wq, 1.5), t->R = randf(S * t->wo, 1);
	t->out = randf(S * t->wo, 9), t->lse = randf((size_t)b * t->H * S, 9), t->dq = randf(S * t->wq, 9);
	at_attn_fwd(be, t->out, t->lse, t->qkv, MGT_DT_F32, S, b, ng, r, d, p, t->key, head0, heads_total, NULL);
	at_attn_bwd(be, t->dq, t->R, MGT_DT_F32, t->qkv, t->out, MGT_DT_F32, t->lse, S, b, ng, r, d, p, t->key, head0, heads_total, NULL);
}

static void cp_case_free(cp_case *t)
{
	free(t->qkv), free(t->R), free(t->out), free(t->lse), free(t->dq);
}

static mgt_attn cp_blk(const cp_case *t, int sq, int sk, int qoff, int koff, int ld_lse)
{
	return (mgt_attn){ .sq = sq, .sk = sk, .b = t->b, .ng = t->ng, .r = t->r, .d = t->d, .qoff = qoff,
			   .koff = koff, .s = t->S, .ld_lse = ld_lse, .p = t->p, .key = t->key, .head0 = t->head0,
			   .heads_total = t->heads_total, .kind = MGT_ATTN_BLOCK, .t = MGT_DT_F32, .gt = MGT_DT_F32 };
}

/* Global chunk of local half h (0, 1) of CP rank rk of c: the rank keeps chunks rk and 2c-1-rk. */
static int cp_chunk(int c, int rk, int h) { return h ? 2 * c - 1 - rk : rk; }

/* Between the global rows of the sequence (w floats per position) and rank rk's local rows. */
static void cp_rows(float *glob, float *loc, int c, int rk, int C, size_t w, bool to_local)
{
	for (int h = 0; h < 2; h++) {
		float *g = glob + (size_t)cp_chunk(c, rk, h) * C * w, *l = loc + (size_t)h * C * w;
		memcpy(to_local ? l : g, to_local ? g : l, (size_t)C * w * sizeof *g);
	}
}

/* Local lse [rows, 2C] of rank rk into the global [rows, 2cC]. */
static void cp_lse_gather(float *glob, const float *loc, int c, int rk, int C, int rows)
{
	for (int x = 0; x < rows; x++)
		for (int h = 0; h < 2; h++)
			memcpy(glob + ((size_t)x * 2 * c + cp_chunk(c, rk, h)) * C, loc + ((size_t)x * 2 + h) * C,
			       (size_t)C * sizeof *glob);
}

/* The rank-local tensors of c emulated ranks, rank rk's at rk * (its size). */
typedef struct {
	int c, C;
	float *q, *kv, *ctx, *lse, *dq, *dkv, *R;
	float *ob, *lb; /* one block's result */
} cp_ranks;

static float *cp_at(float *x, const cp_ranks *k, int rk, size_t w) { return x + (size_t)rk * 2 * k->C * w; }

/* The local chunks of out and lse gathered into global tensors and compared with the
 * whole-sequence results (normwise and largest differences printed). */
static void cp_check_fwd(const cp_case *t, const cp_ranks *k, const char *what, int ord)
{
	const int rows = t->b * t->H;
	float *out = xmalloc((size_t)t->S * t->wo * 4), *lse = xmalloc((size_t)rows * t->S * 4);
	for (int rk = 0; rk < k->c; rk++) {
		cp_rows(out, cp_at(k->ctx, k, rk, t->wo), k->c, rk, k->C, t->wo, false);
		cp_lse_gather(lse, cp_at(k->lse, k, rk, rows), k->c, rk, k->C, rows);
	}
	double mo, ml, eo = relerr_f(out, t->out, (size_t)t->S * t->wo, &mo);
	double el = relerr_f(lse, t->lse, (size_t)rows * t->S, &ml);
	CHECK(eo < FWD_TOL && el < FWD_TOL,
	      "attn_blk %s S=%d cp=%d b=%d ng=%d r=%d d=%d p=%g%s vs attn_fwd: out %.2e (max %.2e) lse %.2e (max %.2e)",
	      what, t->S, k->c, t->b, t->ng, t->r, t->d, t->p, ord ? " (other order)" : "", eo, mo, el, ml);
	free(out), free(lse);
}

/* Local dq (query, key and value slots) of every rank gathered and compared with attn_bwd's. */
static void cp_check_bwd(const cp_case *t, const cp_ranks *k, const char *what)
{
	float *dq = xmalloc((size_t)t->S * t->wq * 4);
	for (int rk = 0; rk < k->c; rk++)
		cp_rows(dq, cp_at(k->dq, k, rk, t->wq), k->c, rk, k->C, t->wq, false);
	double m, e = relerr_f(dq, t->dq, (size_t)t->S * t->wq, &m);
	CHECK(e < FWD_TOL, "attn_blk_bwd %s S=%d cp=%d b=%d ng=%d r=%d d=%d p=%g vs attn_bwd: dqkv %.2e (max %.2e)",
	      what, t->S, k->c, t->b, t->ng, t->r, t->d, t->p, e, m);
	free(dq);
}

/* Ring attention as context parallelism runs it, all c ranks in this process: at step st rank
 * rk holds the kv of rank (rk - st) mod c.  ord 0 visits the steps and query chunks in ring
 * order, 1 in reverse (so merges start off the diagonal).  bwd: the backward instead, with the
 * merged out and lse, dkv accumulating at the kv's owner. */
static void cp_ring(const cp_case *t, const cp_ranks *k, int ord, bool bwd)
{
	const int c = k->c, C = k->C, rows = t->b * t->H;
	for (int s0 = 0; s0 < c; s0++)
		for (int rk = 0; rk < c; rk++) {
			const int st = ord ? c - 1 - s0 : s0, src = (rk - st + c) % c;
			for (int h = 0; h < 4; h++) {
				const int hq = ord ? 1 - h / 2 : h / 2, hk = h % 2;
				const int gq = cp_chunk(c, rk, hq), gk = cp_chunk(c, src, hk);
				if (gk > gq)
					continue;
				const mgt_attn g = cp_blk(t, C, C, gq * C, gk * C, 2 * C);
				const size_t qo = (size_t)hq * C, ko = (size_t)hk * C;
				float *q = cp_at(k->q, k, rk, t->wq) + qo * t->wq, *kv = cp_at(k->kv, k, src, t->wk) + ko * t->wk;
				float *ctx = cp_at(k->ctx, k, rk, t->wo) + qo * t->wo, *lse = cp_at(k->lse, k, rk, rows) + qo;
				if (bwd)
					at_attn_blk_bwd(be, &g, cp_at(k->dq, k, rk, t->wq) + qo * t->wq,
							cp_at(k->dkv, k, src, t->wk) + ko * t->wk,
							cp_at(k->R, k, rk, t->wo) + qo * t->wo, q, kv, ctx, lse);
				else {
					at_attn_blk_fwd(be, &g, k->ob, k->lb, q, kv);
					at_attn_blk_merge(be, &g, ctx, lse, k->ob, k->lb);
				}
			}
		}
}

/* The allgather form: one complete block per local query chunk, against the whole sequence's kv
 * (koff 0, sk up to the chunk's end); the backward's dkv accumulates into the whole kv's. */
static void cp_allgather(const cp_case *t, const cp_ranks *k, const float *kvall, float *dkvall, bool bwd)
{
	const int C = k->C, rows = t->b * t->H;
	for (int rk = 0; rk < k->c; rk++)
		for (int hq = 0; hq < 2; hq++) {
			const int gq = cp_chunk(k->c, rk, hq);
			const mgt_attn g = cp_blk(t, C, (gq + 1) * C, gq * C, 0, 2 * C);
			const size_t qo = (size_t)hq * C;
			float *q = cp_at(k->q, k, rk, t->wq) + qo * t->wq;
			float *ctx = cp_at(k->ctx, k, rk, t->wo) + qo * t->wo, *lse = cp_at(k->lse, k, rk, rows) + qo;
			if (bwd)
				at_attn_blk_bwd(be, &g, cp_at(k->dq, k, rk, t->wq) + qo * t->wq, dkvall,
						cp_at(k->R, k, rk, t->wo) + qo * t->wo, q, kvall, ctx, lse);
			else
				at_attn_blk_fwd(be, &g, ctx, lse, q, kvall);
		}
}

/* Context parallelism of size c on a sequence of S = 2cC positions: the ring (in two orders) and
 * the allgather form, forward and backward, against the whole-sequence attn_fwd and attn_bwd. */
static void test_attn_cp_case(int S, int b, int ng, int r, int d, float p, int head0, int heads_total, int c)
{
	cp_case t;
	cp_case_init(&t, S, b, ng, r, d, p, head0, heads_total);
	const int C = S / (2 * c), rows = b * t.H, T = S * b;
	const size_t L = 2 * (size_t)C; /* local positions */
	cp_ranks k = {c, C, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
	k.q = xmalloc(c * L * t.wq * 4), k.kv = xmalloc(c * L * t.wk * 4), k.ctx = xmalloc(c * L * t.wo * 4);
	k.lse = xmalloc(c * L * rows * 4), k.dq = xmalloc(c * L * t.wq * 4), k.dkv = xmalloc(c * L * t.wk * 4);
	k.R = xmalloc(c * L * t.wo * 4), k.ob = xmalloc(C * t.wo * 4), k.lb = xmalloc(L * rows * 4);
	for (int rk = 0; rk < c; rk++) {
		cp_rows(t.qkv, cp_at(k.q, &k, rk, t.wq), c, rk, C, t.wq, true);
		cp_rows(t.R, cp_at(k.R, &k, rk, t.wo), c, rk, C, t.wo, true);
		O->attn_kv_copy(be, cp_at(k.q, &k, rk, t.wq), cp_at(k.kv, &k, rk, t.wk), (int)L * b, ng, r, d, true);
	}
	for (int ord = 0; ord < 2; ord++) {
		for (size_t i = 0; i < c * L * t.wo; i++)
			k.ctx[i] = 0.0f;
		for (size_t i = 0; i < c * L * rows; i++)
			k.lse[i] = -INFINITY;
		cp_ring(&t, &k, ord, false);
		cp_check_fwd(&t, &k, "ring", ord);
	}
	/* backward: the key and value slots of dq hold a sentinel that attn_blk_bwd must not touch */
	float *sentinel = randf(c * L * t.wq, 5);
	for (size_t i = 0; i < c * L * t.wq; i++)
		k.dq[i] = (i / d) % (r + 2) < (size_t)r ? 0.0f : sentinel[i];
	memset(k.dkv, 0, c * L * t.wk * 4);
	cp_ring(&t, &k, 0, true);
	CHECK(kv_slots_equal(k.dq, sentinel, c * (int)L * b, ng, r, d), "attn_blk_bwd leaves dq's key and value slots");
	for (int rk = 0; rk < c; rk++)
		O->attn_kv_copy(be, cp_at(k.dq, &k, rk, t.wq), cp_at(k.dkv, &k, rk, t.wk), (int)L * b, ng, r, d, false);
	cp_check_bwd(&t, &k, "ring");

	/* allgather */
	float *kvall = xmalloc(S * t.wk * 4), *dkvall = xmalloc(S * t.wk * 4);
	O->attn_kv_copy(be, t.qkv, kvall, T, ng, r, d, true);
	cp_allgather(&t, &k, kvall, NULL, false);
	cp_check_fwd(&t, &k, "allgather", 0);
	memset(k.dq, 0, c * L * t.wq * 4);
	memset(dkvall, 0, S * t.wk * 4);
	cp_allgather(&t, &k, kvall, dkvall, true);
	for (int rk = 0; rk < c; rk++) { /* each rank's rows of the whole dkv (a reduce-scatter) into its dq */
		cp_rows(dkvall, cp_at(k.dkv, &k, rk, t.wk), c, rk, C, t.wk, true);
		O->attn_kv_copy(be, cp_at(k.dq, &k, rk, t.wq), cp_at(k.dkv, &k, rk, t.wk), (int)L * b, ng, r, d,
				false);
	}
	cp_check_bwd(&t, &k, "allgather");
	free(sentinel), free(kvall), free(dkvall);
	free(k.q), free(k.kv), free(k.ctx), free(k.lse), free(k.dq), free(k.dkv), free(k.R), free(k.ob), free(k.lb);
	cp_case_free(&t);
}

/* Blocks of uneven sizes (sq != sk) on one sequence: query pieces [qcut[a], qcut[a+1]) against key
 * pieces [kcut[x], kcut[x+1]), every pair run, empty ones included (they must write out 0 and lse
 * -inf), some with rows that see no key; merged latest keys first, so that rows begin with merges
 * of two -inf.  Against attn_fwd and attn_bwd and the double reference attn_ref, attn_ref_bwd. */
static void test_attn_blk_uneven(int S, int b, int ng, int r, int d, float p, int head0, int heads_total,
				 const int *qcut, int nq, const int *kcut, int nk)
{
	cp_case t;
	cp_case_init(&t, S, b, ng, r, d, p, head0, heads_total);
	const int rows = b * t.H, T = S * b;
	const size_t nl = (size_t)rows * S;
	float *kv = xmalloc(S * t.wk * 4), *ctx = fill_f(S * t.wo, 0.0f), *lse = fill_f(nl, -INFINITY);
	float *ob = xmalloc(S * t.wo * 4), *lb = xmalloc(nl * 4);
	O->attn_kv_copy(be, t.qkv, kv, T, ng, r, d, true);
	int nempty = 0, empty_ok = 1, ninf = 0, inf_ok = 1;
	for (int a = 0; a < nq; a++) {
		const int q0 = qcut[a], sq = qcut[a + 1] - q0;
		bool fresh = true; /* the piece's rows still (0, -inf) */
		for (int x = nk - 1; x >= 0; x--) {
			const int k0 = kcut[x], sk = kcut[x + 1] - k0;
			const mgt_attn g = cp_blk(&t, sq, sk, q0, k0, S);
			const bool empty = k0 > q0 + sq - 1;
			for (size_t i = 0; i < sq * t.wo; i++)
				ob[i] = 7.0f;
			for (size_t i = 0; i < nl; i++)
				lb[i] = 7.0f;
			at_attn_blk_fwd(be, &g, ob, lb, t.qkv + q0 * t.wq, kv + k0 * t.wk);
			if (empty) {
				nempty++;
				for (size_t i = 0; i < sq * t.wo; i++)
					empty_ok &= ob[i] == 0.0f;
				for (int y = 0; y < rows; y++)
					for (int i = 0; i < sq; i++)
						empty_ok &= lb[(size_t)y * S + i] == -INFINITY;
			}
			at_attn_blk_merge(be, &g, ctx + q0 * t.wo, lse + q0, ob, lb);
			if (empty && fresh) { /* both sides -inf: stays (0, -inf) */
				ninf++;
				for (size_t i = 0; i < sq * t.wo; i++)
					inf_ok &= ctx[q0 * t.wo + i] == 0.0f;
				for (int y = 0; y < rows; y++)
					for (int i = 0; i < sq; i++)
						inf_ok &= lse[(size_t)y * S + q0 + i] == -INFINITY;
			}
			fresh &= empty;
		}
	}
	CHECK(nempty > 0 && empty_ok, "attn_blk_fwd: %d empty blocks write out 0 and lse -inf", nempty);
	CHECK(ninf > 0 && inf_ok, "attn_blk_merge: %d merges of -inf into -inf leave (0, -inf)", ninf);
	double *qd = tod(t.qkv, S * t.wq), *outr = xmalloc(S * t.wo * sizeof *outr), *lr = xmalloc(nl * sizeof *lr);
	double *ga = xmalloc(S * t.wq * sizeof *ga);
	attn_ctx c = {qd, S, b, ng, r, d, p, t.key, head0, heads_total, lr, NULL, NULL, NULL};
	attn_ref(&c, outr);
	attn_ref_bwd(&c, t.R, ga, NULL);
	double mo, ml, eo = relerr_f(ctx, t.out, S * t.wo, &mo), el = relerr_f(lse, t.lse, nl, &ml);
	double ro = relerr(ctx, outr, S * t.wo), rl = relerr(lse, lr, nl);
	CHECK(eo < FWD_TOL && el < FWD_TOL && ro < FWD_TOL && rl < FWD_TOL,
	      "attn_blk uneven S=%d b=%d ng=%d r=%d d=%d p=%g vs attn_fwd: out %.2e (max %.2e) lse %.2e (max %.2e); "
	      "vs double: out %.2e lse %.2e", S, b, ng, r, d, p, eo, mo, el, ml, ro, rl);

	float *sentinel = randf(S * t.wq, 5), *dq = xmalloc(S * t.wq * 4), *dkv = xmalloc(S * t.wk * 4);
	for (size_t i = 0; i < S * t.wq; i++)
		dq[i] = (i / d) % (r + 2) < (size_t)r ? 0.0f : sentinel[i];
	for (int a = 0; a < nq; a++)
		for (int x = 0; x < nk; x++) {
			const int q0 = qcut[a], k0 = kcut[x];
			const mgt_attn g = cp_blk(&t, qcut[a + 1] - q0, kcut[x + 1] - k0, q0, k0, S);
			at_attn_blk_bwd(be, &g, dq + q0 * t.wq, dkv + k0 * t.wk, t.R + q0 * t.wo, t.qkv + q0 * t.wq,
					kv + k0 * t.wk, ctx + q0 * t.wo, lse + q0);
		}
	const bool kept = kv_slots_equal(dq, sentinel, T, ng, r, d);
	O->attn_kv_copy(be, dq, dkv, T, ng, r, d, false);
	double mg, eg = relerr_f(dq, t.dq, S * t.wq, &mg), rg = relerr(dq, ga, S * t.wq);
	CHECK(kept && eg < FWD_TOL && rg < FWD_TOL,
	      "attn_blk_bwd uneven S=%d vs attn_bwd: dqkv %.2e (max %.2e); vs double %.2e; key/value slots kept", S,
	      eg, mg, rg);

	/* counts of 0 do nothing */
	memcpy(ob, ctx, S * t.wo * 4);
	mgt_attn g0 = cp_blk(&t, S, 0, 0, 0, S);
	at_attn_blk_fwd(be, &g0, ctx, lse, t.qkv, kv);
	g0.sk = S, g0.sq = 0;
	at_attn_blk_fwd(be, &g0, ctx, lse, t.qkv, kv);
	CHECK(!memcmp(ob, ctx, S * t.wo * 4), "attn_blk_fwd with sq or sk 0 writes nothing");
	free(kv), free(ctx), free(lse), free(ob), free(lb), free(qd), free(outr), free(lr), free(ga);
	free(sentinel), free(dq), free(dkv);
	cp_case_free(&t);
}

static void test_attn_cp(void)
{
	test_attn_cp_case(12, 1, 1, 1, 8, 0.0f, 0, 1, 1);
	test_attn_cp_case(300, 2, 2, 2, 20, 0.0f, 0, 4, 2);  /* chunks of 75: two query blocks */
	test_attn_cp_case(300, 1, 1, 3, 12, 0.1f, 1, 5, 3);  /* dropout, heads of a TP rank */
	test_attn_cp_case(600, 2, 2, 2, 16, 0.2f, 2, 8, 1);  /* chunks of 300: several key tiles */
	test_attn_cp_case(66, 3, 3, 1, 6, 0.3f, 0, 3, 3);
	test_attn_cp_case(84, 2, 2, 2, 7, 0.1f, 2, 6, 2);
	static const int q1[] = {0, 70, 90, 333, 600}, k1[] = {0, 37, 300, 301, 600};
	test_attn_blk_uneven(600, 2, 2, 2, 20, 0.1f, 1, 6, q1, 4, k1, 4);
	static const int q2[] = {0, 1, 64, 130}, k2[] = {0, 65, 129, 130};
	test_attn_blk_uneven(130, 1, 1, 2, 5, 0.2f, 0, 2, q2, 3, k2, 3);
}

/* ================= bias + activation ================= */

typedef struct {
	mgt_act_kind act;
	const double *x, *b;
	int T, f;
} act_ctx;

static void act_ref(void *c_, double *y)
{
	act_ctx *c = c_;
	for (int t = 0; t < c->T; t++)
		for (int i = 0; i < c->f; i++) {
			if (c->act == MGT_ACT_GELU) {
				double z = c->x[t * c->f + i] + (c->b ? c->b[i] : 0);
				y[t * c->f + i] = 0.5 * z * (1 + erf(z / sqrt(2.0)));
			} else if (c->act == MGT_ACT_GELU_TANH) {
				double z = c->x[t * c->f + i] + (c->b ? c->b[i] : 0);
				y[t * c->f + i] = 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
			} else if (c->act == MGT_ACT_SQUARED_RELU) {
				double z = c->x[t * c->f + i] + (c->b ? c->b[i] : 0);
				y[t * c->f + i] = z > 0 ? z * z : 0;
			} else {
				double a = c->x[t * 2 * c->f + i] + (c->b ? c->b[i] : 0);
				double u = c->x[t * 2 * c->f + c->f + i] + (c->b ? c->b[c->f + i] : 0);
				y[t * c->f + i] = a / (1 + exp(-a)) * u;
			}
		}
}

static void test_act_case(mgt_act_kind act, int with_bias, int T, int f)
{
	const char *an = act == MGT_ACT_GELU ? "gelu" : act == MGT_ACT_GELU_TANH ? "gelu-tanh"
			 : act == MGT_ACT_SQUARED_RELU ? "squared-relu" : "swiglu";
	const int xw = act == MGT_ACT_SWIGLU ? 2 * f : f;
	float *x = randf((size_t)T * xw, 3), *b = with_bias ? randf(xw, 1) : NULL;
	float *y = randf((size_t)T * f, 9);
	double *xd = tod(x, (size_t)T * xw), *bd = b ? tod(b, xw) : NULL;
	double *yr = xmalloc((size_t)T * f * sizeof *yr);
	act_ctx c = {act, xd, bd, T, f};
	act_ref(&c, yr);
	O->bias_act_fwd(be, act, y, MGT_DT_F32, x, MGT_DT_F32, b, T, f);
	double e = relerr(y, yr, (size_t)T * f);
	CHECK(e < FWD_TOL, "bias_act_fwd %s bias=%d T=%d f=%d: err %.2e", an, with_bias, T, f, e);
	float *R = randf((size_t)T * f, 1), *dx = randf((size_t)T * xw, 9), *db0 = randf(xw, 1);
	float *db = copyf(db0, xw);
	O->bias_act_bwd(be, act, dx, b ? db : NULL, R, MGT_DT_F32, x, MGT_DT_F32, b, T, f);
	objective ob = {act_ref, &c, R, (size_t)T * f, yr};
	double ex = fd_check_some(&ob, xd, (size_t)T * xw, dx, 300);
	double eb = 0;
	if (b) {
		double *gb = fd_grad(&ob, bd, xw);
		eb = relerr_delta(db, db0, gb, xw);
		free(gb);
	}
	CHECK(ex < BWD_TOL && eb < BWD_TOL, "bias_act_bwd %s bias=%d: dx, db (accumulated) vs FD: %.2e %.2e",
	      an, with_bias, ex, eb);
	free(x), free(b), free(y), free(xd), free(bd), free(yr), free(R), free(dx), free(db0), free(db);
}

static void test_act(void)
{
	test_act_case(MGT_ACT_GELU, 1, 5, 7);
	test_act_case(MGT_ACT_GELU, 0, 4, 6);
	test_act_case(MGT_ACT_SWIGLU, 1, 5, 6);
	test_act_case(MGT_ACT_SWIGLU, 0, 3, 5);
	test_act_case(MGT_ACT_GELU, 1, 64, 300); /* threaded */
	test_act_case(MGT_ACT_SWIGLU, 1, 64, 150);
	test_act_case(MGT_ACT_GELU_TANH, 1, 5, 7);
	test_act_case(MGT_ACT_GELU_TANH, 0, 4, 6);
	test_act_case(MGT_ACT_GELU_TANH, 1, 64, 300);
	test_act_case(MGT_ACT_SQUARED_RELU, 1, 5, 7);
	test_act_case(MGT_ACT_SQUARED_RELU, 0, 64, 300);
}

/* ================= bias-dropout-add ================= */

typedef struct {
	const double *resid, *y, *b;
	int T, h;
	float p;
	uint64_t key, e0;
} bda_ctx;

static void bda_ref(void *c_, double *out)
{
	bda_ctx *c = c_;
	for (int t = 0; t < c->T; t++)
		for (int i = 0; i < c->h; i++) {
			size_t k = (size_t)t * c->h + i;
			double v = c->y[k] + (c->b ? c->b[i] : 0);
			if (c->p > 0)
				v = keep_ref(c->key, c->e0 + k, c->p) ? v / (1 - (double)c->p) : 0;
			out[k] = (c->resid ? c->resid[k] : 0) + v;
		}
}

static void test_bda_case(int T, int h, float p, int with_resid, int with_bias, int alias)
{
	const size_t n = (size_t)T * h;
	const uint64_t key = 77, e0 = 0xFFFFFFF0ull; /* crosses a 2^32 boundary of the counter */
	float *resid = with_resid ? randf(n, 1) : NULL, *y = randf(n, 1), *b = with_bias ? randf(h, 1) : NULL;
	double *rd = resid ? tod(resid, n) : NULL, *yd = tod(y, n), *bd = b ? tod(b, h) : NULL;
	double *outr = xmalloc(n * sizeof *outr);
	bda_ctx c = {rd, yd, bd, T, h, p, key, e0};
	bda_ref(&c, outr);
	float *out = alias && resid ? copyf(resid, n) : randf(n, 9);
	O->bda_fwd(be, out, alias && resid ? out : resid, MGT_DT_F32, y, MGT_DT_F32, b, T, h, p, key, e0);
	double e = relerr(out, outr, n);
	CHECK(e < FWD_TOL, "bda_fwd T=%d h=%d p=%g resid=%d bias=%d alias=%d: err %.2e", T, h, p, with_resid,
	      with_bias, alias, e);
	float *R = randf(n, 1), *dy = alias ? copyf(R, n) : randf(n, 9), *db0 = randf(h, 1);
	float *db = copyf(db0, h);
	O->bda_bwd(be, dy, MGT_DT_F32, b ? db : NULL, alias ? dy : R, MGT_DT_F32, T, h, p, key, e0);
	objective ob = {bda_ref, &c, R, n, outr};
	double ey = fd_check_some(&ob, yd, n, dy, 300), eb = 0;
	if (b) {
		double *gb = fd_grad(&ob, bd, h);
		eb = relerr_delta(db, db0, gb, h);
		free(gb);
	}
	CHECK(ey < BWD_TOL && eb < BWD_TOL, "bda_bwd p=%g alias=%d: dy, db vs FD: %.2e %.2e", p, alias, ey, eb);
	free(resid), free(y), free(b), free(rd), free(yd), free(bd), free(outr), free(out), free(R);
	free(dy), free(db0), free(db);
}

static void test_bda(void)
{
	test_bda_case(4, 9, 0.0f, 1, 1, 0);
	test_bda_case(4, 9, 0.25f, 1, 1, 0);
	test_bda_case(4, 9, 0.25f, 1, 0, 1);
	test_bda_case(3, 8, 0.5f, 0, 1, 0);
	test_bda_case(3, 8, 0.0f, 0, 0, 1);
	test_bda_case(40, 300, 0.1f, 1, 1, 1); /* threaded (FD over 12000 inputs of a cheap ref) */

	/* the mask itself: about p of the elements dropped, exactly the Philox ones (a row that
	 * crosses a 2^32 boundary of the counter, with a ragged tail) */
	enum { n = 4101 };
	const uint64_t e0 = (1ull << 33) - 1000;
	float *y = xmalloc(n * 4), *o = xmalloc(n * 4);
	for (int i = 0; i < n; i++)
		y[i] = 1.0f;
	O->bda_fwd(be, o, NULL, MGT_DT_F32, y, MGT_DT_F32, NULL, 1, n, 0.3f, 5, e0);
	int dropped = 0, exact = 1;
	for (int i = 0; i < n; i++) {
		dropped += o[i] == 0.0f;
		exact &= o[i] == (keep_ref(5, e0 + (uint64_t)i, 0.3f) ? 1.0f / (1.0f - 0.3f) : 0.0f);
	}
	CHECK(exact && dropped > n * 0.27 && dropped < n * 0.33, "bda dropout mask: %d of %d dropped, exact",
	      dropped, n);
	free(y), free(o);
}

/* ================= cross-entropy ================= */

typedef struct {
	const double *logits;
	const int32_t *labels;
	const float *mask;
	int T, V;
	float scale;
} xent_ctx;

/* out[t] = mask[t] * scale * (logsumexp(row t) - logits[t, label]) over the full vocabulary */
static void xent_ref(void *c_, double *out)
{
	xent_ctx *c = c_;
	for (int t = 0; t < c->T; t++) {
		const double *l = c->logits + (size_t)t * c->V;
		double mx = -INFINITY, se = 0;
		for (int i = 0; i < c->V; i++)
			mx = fmax(mx, l[i]);
		for (int i = 0; i < c->V; i++)
			se += exp(l[i] - mx);
		out[t] = c->mask[t] * c->scale * (log(se) + mx - l[c->labels[t]]);
	}
}

static void test_xent(void)
{
	/* one piece [v0, v0 + V) with labels inside and outside it */
	{
		enum { T = 6, V = 11 };
		const int64_t v0 = 7;
		int32_t labels[T] = {7, 17, 3, 12, 18, 30};
		float *lg = randf(T * V, 4), mx[T], se[T], tg[T], loss[T];
		float mask[T] = {1, 1, 0, 1, 1, 1};
		O->xent_max(be, mx, lg, MGT_DT_F32, T, V);
		O->xent_stats(be, se, tg, lg, MGT_DT_F32, labels, mx, v0, T, V);
		double sum = O->xent_loss(be, loss, mx, se, tg, mask, T), sr = 0;
		int ok = 1;
		for (int t = 0; t < T; t++) {
			double m = -INFINITY, s = 0, tr;
			for (int i = 0; i < V; i++)
				m = fmax(m, lg[t * V + i]);
			for (int i = 0; i < V; i++)
				s += exp(lg[t * V + i] - m);
			tr = labels[t] >= v0 && labels[t] < v0 + V ? lg[t * V + labels[t] - v0] : 0;
			double lr = log(s) + m - tr;
			ok &= mx[t] == (float)m && fabs(se[t] - s) < 1e-6 * s && tg[t] == (float)tr &&
			      fabs(loss[t] - lr) < 1e-5 * fmax(1, fabs(lr));
			sr += lr * mask[t];
		}
		CHECK(ok && fabs(sum - sr) < 1e-5 * fabs(sr), "xent max/stats/loss on a piece with v0=%d, labels out of range",
		      (int)v0);
		free(lg);
	}
	/* a vocabulary of V split in two pieces as tensor parallelism does, vs the whole */
	enum { T = 7, V = 23, V1 = 10 };
	int32_t labels[T] = {0, 9, 10, 22, 5, 15, 10};
	float mask[T] = {1, 0, 1, 1, 1, 0, 1}, scale = 0.37f;
	float *lg = randf(T * V, 5), *p0 = xmalloc(T * V1 * 4), *p1 = xmalloc(T * (V - V1) * 4);
	for (int t = 0; t < T; t++) {
		memcpy(p0 + t * V1, lg + t * V, V1 * 4);
		memcpy(p1 + t * (V - V1), lg + t * V + V1, (V - V1) * 4);
	}
	float mx[T], m1[T], se[T], s1[T], tg[T], t1[T], loss[T];
	O->xent_max(be, mx, p0, MGT_DT_F32, T, V1);
	O->xent_max(be, m1, p1, MGT_DT_F32, T, V - V1);
	for (int t = 0; t < T; t++) /* all-reduce max */
		mx[t] = fmaxf(mx[t], m1[t]);
	O->xent_stats(be, se, tg, p0, MGT_DT_F32, labels, mx, 0, T, V1);
	O->xent_stats(be, s1, t1, p1, MGT_DT_F32, labels, mx, V1, T, V - V1);
	for (int t = 0; t < T; t++) { /* all-reduce sum */
		se[t] += s1[t];
		tg[t] += t1[t];
	}
	double sum = O->xent_loss(be, loss, mx, se, tg, mask, T);
	double *lgd = tod(lg, T * V), lr[T], sr = 0;
	xent_ctx c = {lgd, labels, mask, T, V, 1.0f};
	float ones[T];
	for (int t = 0; t < T; t++)
		ones[t] = 1;
	c.mask = ones;
	xent_ref(&c, lr);
	for (int t = 0; t < T; t++)
		sr += lr[t] * mask[t];
	double e = relerr(loss, lr, T);
	CHECK(e < FWD_TOL && fabs(sum - sr) < 1e-5 * fabs(sr), "xent over two vocab pieces = whole: %.2e",
	      e);
	/* backward, second piece in place */
	float *d0 = xmalloc(T * V1 * 4);
	O->xent_bwd(be, d0, p0, MGT_DT_F32, labels, mx, se, mask, scale, 0, T, V1);
	O->xent_bwd(be, p1, p1, MGT_DT_F32, labels, mx, se, mask, scale, V1, T, V - V1);
	float *dl = xmalloc(T * V * 4), R[T];
	for (int t = 0; t < T; t++) {
		memcpy(dl + t * V, d0 + t * V1, V1 * 4);
		memcpy(dl + t * V + V1, p1 + t * (V - V1), (V - V1) * 4);
		R[t] = 1;
	}
	c.mask = mask;
	c.scale = scale;
	double tmp[T];
	objective ob = {xent_ref, &c, R, T, tmp};
	double eg = fd_check(&ob, lgd, T * V, dl);
	int zero_rows = 1;
	for (int i = 0; i < V; i++)
		zero_rows &= dl[1 * V + i] == 0 && dl[5 * V + i] == 0;
	CHECK(eg < BWD_TOL && zero_rows, "xent_bwd over two pieces (one in place) vs FD, masked rows 0: %.2e",
	      eg);
	free(lg), free(p0), free(p1), free(lgd), free(d0), free(dl);

	/* bigger rows, threaded */
	enum { T2 = 40, V2 = 3000 };
	float *big = randf(T2 * V2, 8), bm[T2], bs[T2], bt[T2];
	int32_t bl[T2];
	for (int t = 0; t < T2; t++)
		bl[t] = t * 71;
	O->xent_max(be, bm, big, MGT_DT_F32, T2, V2);
	O->xent_stats(be, bs, bt, big, MGT_DT_F32, bl, bm, 0, T2, V2);
	double worst = 0;
	for (int t = 0; t < T2; t++) {
		double m = -INFINITY, s = 0;
		for (int i = 0; i < V2; i++)
			m = fmax(m, big[t * V2 + i]);
		for (int i = 0; i < V2; i++)
			s += exp(big[t * V2 + i] - m);
		worst = fmax(worst, fabs(bs[t] - s) / s + (bm[t] != (float)m));
	}
	CHECK(worst < 1e-6, "xent_stats V=%d: sumexp err %.2e", V2, worst);
	free(big);
}

/* ================= optimizer and reductions ================= */

static void test_adamw(void)
{
	enum { n = 37, steps = 4 };
	float *p = randf(n, 1), *m = xmalloc(n * 4), *v = xmalloc(n * 4);
	double pd[n], md[n] = {0}, vd[n] = {0};
	for (int i = 0; i < n; i++)
		pd[i] = p[i];
	const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
	for (int step = 1; step <= steps; step++) {
		float *g = randf(n, 1);
		g[0] = 0; /* an exactly-zero gradient: eps matters */
		O->adamw(be, p, g, m, v, n, lr, b1, b2, eps, wd, step);
		/* torch.optim.AdamW (single tensor), in double */
		double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
		for (int i = 0; i < n; i++) {
			pd[i] *= 1 - (double)lr * wd;
			md[i] = b1 * md[i] + (1 - (double)b1) * g[i];
			vd[i] = b2 * vd[i] + (1 - (double)b2) * g[i] * g[i];
			double denom = sqrt(vd[i]) / sqrt(bc2) + eps;
			pd[i] -= lr / bc1 * md[i] / denom;
		}
		free(g);
	}
	double e = relerr(p, pd, n), em = relerr(m, md, n), ev = relerr(v, vd, n);
	CHECK(e < 1e-6 && em < 1e-6 && ev < 1e-6, "adamw %d steps vs torch formula: p %.2e m %.2e v %.2e",
	      steps, e, em, ev);
	free(p), free(m), free(v);

	/* threaded size */
	size_t N = 100003;
	float *P = randf(N, 1), *G = randf(N, 1), *M = randf(N, 0.1), *Vv = randf(N, 0.1);
	for (size_t i = 0; i < N; i++)
		Vv[i] = fabsf(Vv[i]);
	double *Pd = tod(P, N), *Md = tod(M, N), *Vd = tod(Vv, N);
	O->adamw(be, P, G, M, Vv, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 10);
	double bc1 = 1 - pow(0.9f, 10), bc2 = 1 - pow(0.999f, 10);
	for (size_t i = 0; i < N; i++) {
		Pd[i] *= 1 - (double)1e-3f * 0.01f;
		Md[i] = 0.9f * Md[i] + (1 - (double)0.9f) * G[i];
		Vd[i] = 0.999f * Vd[i] + (1 - (double)0.999f) * G[i] * G[i];
		Pd[i] -= 1e-3f / bc1 * Md[i] / (sqrt(Vd[i]) / sqrt(bc2) + 1e-8f);
	}
	e = relerr(P, Pd, N);
	CHECK(e < 1e-6, "adamw n=%zu step 10: err %.2e", N, e);
	free(P), free(G), free(M), free(Vv), free(Pd), free(Md), free(Vd);
}

static void test_reductions(void)
{
	size_t n = 300001;
	float *x = randf(n, 2), *y = randf(n, 1);
	double ref = 0;
	for (size_t i = 0; i < n; i++)
		ref += (double)x[i] * x[i];
	double s1 = O->sumsq(be, x, n), s2 = O->sumsq(be, x, n);
	CHECK(fabs(s1 - ref) < 1e-12 * ref && s1 == s2, "sumsq n=%zu: err %.2e, deterministic", n,
	      fabs(s1 - ref) / ref);
	CHECK(O->sumsq(be, x, 0) == 0 && O->sumsq(be, x, 3) == (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2],
	      "sumsq of 0 and 3 elements");
	float keep = x[1234];
	x[1234] = NAN;
	CHECK(isnan(O->sumsq(be, x, n)), "sumsq propagates NaN");
	x[1234] = INFINITY;
	CHECK(isinf(O->sumsq(be, x, n)), "sumsq propagates Inf");
	x[1234] = keep;
	double *yr = xmalloc(n * sizeof *yr);
	for (size_t i = 0; i < n; i++)
		yr[i] = (double)y[i] + x[i];
	O->add(be, y, x, MGT_DT_F32, n);
	double ea = relerr(y, yr, n);
	for (size_t i = 0; i < n; i++)
		yr[i] = (double)x[i] * 0.37f;
	O->scale(be, x, n, 0.37f);
	double es = relerr(x, yr, n);
	CHECK(ea < 1e-7 && es < 1e-7, "add, scale: %.2e %.2e", ea, es);
	free(x), free(y), free(yr);
}

/* ================= Mixture of Experts: row ops and grouped linears ================= */

/* Elements of a and b (n floats) whose bits differ. */
static size_t bits_differ(const float *a, const float *b, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += memcmp(a + i, b + i, sizeof *a) != 0;
	return k;
}

/* A routing of T tokens to k slots each over N expert rows: every row used once, some slots
 * -1 (dropped), token `empty` with no copy at all.  Returns slot [T*k] and idx [N] (row -> token). */
static int32_t *moe_routing(int T, int k, int empty, int32_t **idx_out, int *N_out)
{
	int32_t *slot = xmalloc((size_t)T * k * sizeof *slot);
	int N = 0;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			slot[t * k + j] = t == empty || urand() < -0.6 ? -1 : N++;
	/* shuffle the row numbers, so rows are not in token order (as grouping by expert makes them) */
	int32_t *perm = xmalloc((size_t)(N ? N : 1) * sizeof *perm);
	for (int i = 0; i < N; i++)
		perm[i] = i;
	for (int i = N - 1; i > 0; i--) {
		int j = (int)((urand() + 1) / 2 * (i + 1)) % (i + 1);
		int32_t tmp = perm[i];
		perm[i] = perm[j];
		perm[j] = tmp;
	}
	int32_t *idx = xmalloc((size_t)(N ? N : 1) * sizeof *idx);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			if (slot[t * k + j] >= 0) {
				slot[t * k + j] = perm[slot[t * k + j]];
				idx[slot[t * k + j]] = t;
			}
	free(perm);
	*idx_out = idx;
	*N_out = N;
	return slot;
}

static void test_moe_rows_case(int T, int k, int h)
{
	int32_t *idx, N;
	int32_t *slot = moe_routing(T, k, T / 2, &idx, &N);
	float *x = randf((size_t)T * h, 1);
	/* gather: exact copies */
	float *xe = randf((size_t)N * h, 9);
	O->rows_gather(be, xe, x, MGT_DT_F32, idx, N, h);
	size_t bad = 0;
	for (int i = 0; i < N; i++)
		bad += bits_differ(xe + (size_t)i * h, x + (size_t)idx[i] * h, h);
	CHECK(bad == 0, "rows_gather T=%d k=%d h=%d N=%d: rows copied exactly (%zu elements differ)", T, k, h, N, bad);

	/* combine: against a double sum, and bit for bit against fp32 sums in j order from 0 */
	float *ye = randf((size_t)N * h, 1), *y = randf((size_t)T * h, 9);
	double *yr = xmalloc((size_t)T * h * sizeof *yr);
	float *yf = xmalloc((size_t)T * h * sizeof *yf);
	for (int t = 0; t < T; t++)
		for (int c = 0; c < h; c++) {
			double sd = 0;
			float sf = 0.0f;
			for (int j = 0; j < k; j++) {
				int32_t r = slot[t * k + j];
				if (r >= 0) {
					sd += ye[(size_t)r * h + c];
					sf += ye[(size_t)r * h + c];
				}
			}
			yr[(size_t)t * h + c] = sd;
			yf[(size_t)t * h + c] = sf;
		}
	O->rows_combine(be, y, ye, MGT_DT_F32, slot, T, k, h);
	double e = relerr(y, yr, (size_t)T * h);
	size_t nd = bits_differ(y, yf, (size_t)T * h), nz = 0;
	for (int c = 0; c < h; c++)
		nz += y[(size_t)(T / 2) * h + c] != 0.0f;
	CHECK(e < 1e-7 && nd == 0 && nz == 0,
	      "rows_combine T=%d k=%d h=%d: err %.2e vs double, %zu differ from fp32 in j order, "
	      "token without copies %zu nonzero", T, k, h, e, nd, nz);

	/* scale (and in place), dot */
	float *w = randf(N, 1), *ys = randf((size_t)N * h, 9), *ysi = copyf(ye, (size_t)N * h);
	O->rows_scale(be, ys, ye, MGT_DT_F32, w, N, h);
	O->rows_scale(be, ysi, ysi, MGT_DT_F32, w, N, h);
	bad = 0;
	double es = 0;
	for (int i = 0; i < N; i++)
		for (int c = 0; c < h; c++) {
			float want = w[i] * ye[(size_t)i * h + c];
			double d = (double)ys[(size_t)i * h + c] - (double)w[i] * ye[(size_t)i * h + c];
			bad += memcmp(&want, ys + (size_t)i * h + c, 4) != 0;
			es = fmax(es, fabs(d) / (fabs((double)w[i] * ye[(size_t)i * h + c]) + 1e-30));
		}
	CHECK(bad == 0 && es <= 0x1p-24 && bits_differ(ys, ysi, (size_t)N * h) == 0,
	      "rows_scale N=%d f=%d: one fp32 product per element (max rel err %.2e), in place the same", N, h, es);
	float *dot = randf(N, 9);
	double *dr = xmalloc((size_t)(N ? N : 1) * sizeof *dr);
	/* every other row: two products of about +-1e4 that nearly cancel (an fp32 sum would lose the
	 * rest of the row) */
	for (int i = 0; i < N && h > 1; i += 2) {
		xe[(size_t)i * h] = 1e4f / ye[(size_t)i * h];
		xe[(size_t)i * h + h / 2] = -1e4f / ye[(size_t)i * h + h / 2];
	}
	for (int i = 0; i < N; i++) {
		double sd = 0;
		for (int c = 0; c < h; c++)
			sd += (double)ye[(size_t)i * h + c] * xe[(size_t)i * h + c];
		dr[i] = sd;
	}
	O->rows_dot(be, dot, ye, xe, MGT_DT_F32, N, h);
	bad = 0;
	double ed = 0;
	for (int i = 0; i < N; i++) {
		bad += dot[i] != (float)dr[i];
		ed = fmax(ed, fabs(dot[i] - dr[i]) / (fabs(dr[i]) + 1e-30));
	}
	/* a double sum in another order can round the other way, rarely: 1 fp32 ulp at most */
	CHECK(ed <= 0x1p-23 && bad <= (size_t)(N / 100 + 1),
	      "rows_dot N=%d f=%d: max rel err %.2e vs double (bound 2^-23), %zu of %d not the double sum rounded",
	      N, h, ed, bad, N);
	free(slot), free(idx), free(x), free(xe), free(ye), free(y), free(yr), free(yf);
	free(w), free(ys), free(ysi), free(dot), free(dr);
}

/* Grouped linear over G groups of rows[g] rows: against a double reference in fp32, and under
 * bf16/fp16 bit for bit against linear_fwd / linear_bwd called per group. */
static void test_moe_grouped_case(const int *rows, int G, int in, int out)
{
	int M = 0;
	for (int g = 0; g < G; g++)
		M += rows[g];
	const size_t nx = (size_t)M * in, ny = (size_t)M * out, nw = (size_t)out * in;
	const int pad = 3; /* rows past the end of y and dx that must stay untouched */
	float *x = randf(nx, 1), *dy = randf(ny, 1);
	float **w = xmalloc(G * sizeof *w), **dw = xmalloc(G * sizeof *dw), **dw0 = xmalloc(G * sizeof *dw0);
	for (int g = 0; g < G; g++) {
		w[g] = randf(nw, 0.5);
		dw0[g] = randf(nw, 1);
		dw[g] = copyf(dw0[g], nw);
	}
	float *y = randf(ny + (size_t)pad * out, 9), *dx = randf(nx + (size_t)pad * in, 9);
	float *y_end = copyf(y + ny, (size_t)pad * out), *dx_end = copyf(dx + nx, (size_t)pad * in);
	double *yr = xmalloc((ny ? ny : 1) * sizeof *yr), *dxr = xmalloc((nx ? nx : 1) * sizeof *dxr);
	double *dwr = xmalloc(nw * sizeof *dwr);
	O->linear_fwd_grouped(be, y, x, MGT_DT_F32, (const void *const *)w, MGT_DT_F32, rows, G, in, out);
	O->linear_bwd_grouped(be, dx, dw, dy, x, MGT_DT_F32, (const void *const *)w, MGT_DT_F32, rows, G, in, out);
	char id[128];
	int n = snprintf(id, sizeof id, "G=%d rows", G);
	for (int g = 0; g < G && n < 100; g++)
		n += snprintf(id + n, sizeof id - n, "%s%d", g ? "," : " ", rows[g]);
	snprintf(id + n, sizeof id - n, " in=%d out=%d", in, out);
	double ewmax = 0;
	int r0 = 0, untouched = 1;
	for (int g = 0; g < G; g++) {
		const float *xg = x + (size_t)r0 * in, *dyg = dy + (size_t)r0 * out, *wg = w[g];
		for (int t = 0; t < rows[g]; t++) {
			for (int o = 0; o < out; o++) {
				double sd = 0;
				for (int i = 0; i < in; i++)
					sd += (double)xg[(size_t)t * in + i] * wg[(size_t)o * in + i];
				yr[(size_t)(r0 + t) * out + o] = sd;
			}
			for (int i = 0; i < in; i++) {
				double sd = 0;
				for (int o = 0; o < out; o++)
					sd += (double)dyg[(size_t)t * out + o] * wg[(size_t)o * in + i];
				dxr[(size_t)(r0 + t) * in + i] = sd;
			}
		}
		for (int o = 0; o < out; o++)
			for (int i = 0; i < in; i++) {
				double sd = 0;
				for (int t = 0; t < rows[g]; t++)
					sd += (double)dyg[(size_t)t * out + o] * xg[(size_t)t * in + i];
				dwr[(size_t)o * in + i] = sd;
			}
		if (rows[g] == 0)
			untouched &= bits_differ(dw[g], dw0[g], nw) == 0;
		else
			ewmax = fmax(ewmax, relerr_delta(dw[g], dw0[g], dwr, nw));
		r0 += rows[g];
	}
	double ey = relerr(y, yr, ny), ex = relerr(dx, dxr, nx);
	int ends = bits_differ(y + ny, y_end, (size_t)pad * out) == 0 && bits_differ(dx + nx, dx_end, (size_t)pad * in) == 0;
	CHECK(ey < FWD_TOL && ex < FWD_TOL && ewmax < FWD_TOL && untouched && ends,
	      "linear_fwd/bwd_grouped %s vs double: y %.2e, dx %.2e, dw (accumulated, worst group) %.2e; "
	      "empty groups' dw untouched %d, rows past the end untouched %d", id, ey, ex, ewmax, untouched, ends);

	/* dx NULL: dw gains the same increment again, nothing else is written */
	float **dw2 = xmalloc(G * sizeof *dw2);
	for (int g = 0; g < G; g++)
		dw2[g] = copyf(dw[g], nw);
	O->linear_bwd_grouped(be, NULL, dw2, dy, x, MGT_DT_F32, (const void *const *)w, MGT_DT_F32, rows, G, in, out);
	double e2 = 0;
	for (int g = 0; g < G; g++) {
		double *inc = xmalloc(nw * sizeof *inc);
		for (size_t i = 0; i < nw; i++)
			inc[i] = (double)dw[g][i] - dw0[g][i];
		if (rows[g])
			e2 = fmax(e2, relerr_delta(dw2[g], dw[g], inc, nw));
		free(inc);
	}
	CHECK(e2 < FWD_TOL, "linear_bwd_grouped %s with dx NULL: dw increment again (err %.2e)", id, e2);

	/* bf16 and fp16: bitwise the per-group linear layers */
	for (int pr = 1; pr <= 2; pr++) {
		be->precision = (mgt_precision)pr;
		float *yg = xmalloc((ny ? ny : 1) * 4), *yp = xmalloc((ny ? ny : 1) * 4);
		float *dxg = xmalloc((nx ? nx : 1) * 4), *dxp = xmalloc((nx ? nx : 1) * 4);
		size_t ndw = 0;
		float **dwg = xmalloc(G * sizeof *dwg), **dwp = xmalloc(G * sizeof *dwp);
		for (int g = 0; g < G; g++)
			dwg[g] = copyf(dw0[g], nw), dwp[g] = copyf(dw0[g], nw);
		O->linear_fwd_grouped(be, yg, x, MGT_DT_F32, (const void *const *)w, MGT_DT_F32, rows, G, in, out);
		O->linear_bwd_grouped(be, dxg, dwg, dy, x, MGT_DT_F32, (const void *const *)w, MGT_DT_F32, rows, G, in, out);
		r0 = 0;
		for (int g = 0; g < G; g++) {
			if (rows[g]) {
				O->linear_fwd(be, yp + (size_t)r0 * out, MGT_DT_F32, x + (size_t)r0 * in, MGT_DT_F32, w[g], MGT_DT_F32, NULL, rows[g], in, out);
				O->linear_bwd(be, dxp + (size_t)r0 * in, MGT_DT_F32, dwp[g], NULL, dy + (size_t)r0 * out, MGT_DT_F32,
					      x + (size_t)r0 * in, MGT_DT_F32, w[g], MGT_DT_F32, rows[g], in, out);
			}
			ndw += bits_differ(dwg[g], dwp[g], nw);
			r0 += rows[g];
		}
		size_t nyd = bits_differ(yg, yp, ny), nxd = bits_differ(dxg, dxp, nx);
		/* and the rounding happened: fp32 differs */
		size_t n32 = bits_differ(yg, y, ny);
		be->precision = MGT_PREC_FP32;
		CHECK(nyd == 0 && nxd == 0 && ndw == 0 && (ny == 0 || n32 > 0),
		      "linear_*_grouped %s %s: bitwise per-group linear_fwd/bwd (y %zu, dx %zu, dw %zu differ; "
		      "%zu of y differ from fp32)", pr == 1 ? "bf16" : "fp16", id, nyd, nxd, ndw, n32);
		for (int g = 0; g < G; g++)
			free(dwg[g]), free(dwp[g]);
		free(dwg), free(dwp), free(yg), free(yp), free(dxg), free(dxp);
	}
	for (int g = 0; g < G; g++)
		free(w[g]), free(dw[g]), free(dw0[g]), free(dw2[g]);
	free(w), free(dw), free(dw0), free(dw2), free(x), free(dy), free(y), free(dx), free(y_end), free(dx_end);
	free(yr), free(dxr), free(dwr);
}

static void test_moe(void)
{
	test_moe_rows_case(9, 2, 6);
	test_moe_rows_case(300, 3, 130); /* over the parallel threshold, h not a multiple of 4 */
	test_moe_rows_case(5, 1, 1);
	const int r1[] = { 7, 0, 13, 1, 0 }, r2[] = { 70, 0, 33, 100 }, r3[] = { 0, 0, 0 }, r4[] = { 4 };
	test_moe_grouped_case(r1, 5, 12, 9);
	test_moe_grouped_case(r2, 4, 96, 80);
	test_moe_grouped_case(r3, 3, 8, 5); /* no rows at all: nothing written */
	test_moe_grouped_case(r4, 1, 5, 3);
}

/* ================= determinism of the threaded reductions ================= */

static void test_determinism(void)
{
	enum { T = 257, in = 96, out = 130 };
	float *x = randf(T * in, 1), *w = randf(out * in, 1), *dy = randf(T * out, 1);
	float *dw1 = xmalloc(out * in * 4), *dw2 = xmalloc(out * in * 4), *db1 = xmalloc(out * 4),
	      *db2 = xmalloc(out * 4), *dx1 = xmalloc(T * in * 4), *dx2 = xmalloc(T * in * 4);
	O->linear_bwd(be, dx1, MGT_DT_F32, dw1, db1, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
	O->linear_bwd(be, dx2, MGT_DT_F32, dw2, db2, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
	CHECK(!memcmp(dw1, dw2, out * in * 4) && !memcmp(db1, db2, out * 4) && !memcmp(dx1, dx2, T * in * 4),
	      "linear_bwd deterministic (2 threads)");
	float *mean = xmalloc(T * 4), *rstd = xmalloc(T * 4), *yy = xmalloc(T * in * 4);
	O->norm_fwd(be, MGT_NORM_LAYERNORM, yy, MGT_DT_F32, mean, rstd, x, MGT_DT_F32, w, w + in, T, in, 1e-5f);
	float *nw1 = xmalloc(in * 4), *nw2 = xmalloc(in * 4), *nb1 = xmalloc(in * 4), *nb2 = xmalloc(in * 4);
	memset(dx1, 0, T * in * 4);
	memset(dx2, 0, T * in * 4);
	O->norm_bwd(be, MGT_NORM_LAYERNORM, dx1, nw1, nb1, dy, MGT_DT_F32, x, MGT_DT_F32, w, mean, rstd, T, in);
	O->norm_bwd(be, MGT_NORM_LAYERNORM, dx2, nw2, nb2, dy, MGT_DT_F32, x, MGT_DT_F32, w, mean, rstd, T, in);
	CHECK(!memcmp(nw1, nw2, in * 4) && !memcmp(nb1, nb2, in * 4) && !memcmp(dx1, dx2, T * in * 4),
	      "norm_bwd deterministic (2 threads)");
	/* a 1-thread backend agrees to rounding */
	mgt_backend *b1 = mgt_backend_cpu_create(1);
	CHECK(b1 && b1->threads == 1, "cpu backend with 1 thread");
	if (b1) {
		float *dw3 = xmalloc(out * in * 4), *db3 = xmalloc(out * 4), *dx3 = xmalloc(T * in * 4);
		b1->ops->linear_bwd(b1, dx3, MGT_DT_F32, dw3, db3, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
		double *r = tod(dw1, out * in);
		double e = relerr(dw3, r, out * in);
		CHECK(e < 1e-6 && !memcmp(db1, db3, out * 4), "1 thread vs 2 threads: dw %.2e, db identical", e);
		free(r), free(dw3), free(db3), free(dx3);
		mgt_backend_destroy(b1);
	}
	free(x), free(w), free(dy), free(dw1), free(dw2), free(db1), free(db2), free(dx1), free(dx2);
	free(mean), free(rstd), free(yy), free(nw1), free(nw2), free(nb1), free(nb2);
}

#ifdef MGT_HAVE_CUDA
#include <cublasLt.h>

/* Whether this process has libcublasLt mapped. */
static bool cublaslt_mapped(void)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f))
		found |= strstr(line, "libcublasLt") != NULL;
	if (f)
		fclose(f);
	return found;
}

/* lib/backend/cuda_lt.c: cuBLASLt is not loaded when a program starts, and the first call opens
 * it: the library's own status string comes back (no GPU needed). */
static void test_cublaslt_lazy(void)
{
	CHECK(!cublaslt_mapped(), "cuBLASLt not loaded at program start");
	const char *s = cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);
	CHECK(s && *s && !strstr(s, "libcublasLt"), "cuBLASLt opened at its first call: status string '%s'",
	      s ? s : "(null)");
	CHECK(cublaslt_mapped(), "... and mapped after it");
}
#endif

/* mgt_backend_supports: the CPU runs every op of its table on fp32, bf16 and fp16 (fp8's GEMM by
 * emulation); an op missing from a table, another element type or an unknown op is refused with
 * a reason naming it. */
static void test_supports(void)
{
	char why[256] = "";
	CHECK(MGT_OP_COUNT == 57, "the op table has 57 ops (%d)", (int)MGT_OP_COUNT);
	CHECK(mgt_backend_supports(be, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why), "cpu supports gemm_fp8 (the emulation)");
	CHECK(mgt_backend_supports(be, MGT_OP_attn_forward, MGT_DT_BF16, why, sizeof why) &&
	      mgt_backend_supports(be, MGT_OP_attn_decode, MGT_DT_F16, why, sizeof why), "cpu supports attention ops");
	CHECK(!mgt_backend_supports(be, MGT_OP_attn_forward, MGT_DT_I32, why, sizeof why) &&
	      strstr(why, "attn_forward") && strstr(why, "fp32, bf16 or fp16"), "int32 elements refused: %s", why);
	CHECK(!mgt_backend_supports(be, MGT_OP_COUNT, MGT_DT_F32, why, sizeof why), "an unknown op refused: %s", why);
	mgt_backend_ops ops = *be->ops;
	ops.attn_decode = NULL;
	mgt_backend fake = *be;
	fake.ops = &ops;
	CHECK(!mgt_backend_supports(&fake, MGT_OP_attn_decode, MGT_DT_F32, why, sizeof why) && strstr(why, "attn_decode"),
	      "a table without attn_decode refuses it: %s", why);
	CHECK(mgt_backend_supports(&fake, MGT_OP_attn_merge, MGT_DT_F32, why, sizeof why), "... and keeps attn_merge");
}

int main(void)
{
#ifdef MGT_HAVE_CUDA
	test_cublaslt_lazy();
#endif
	be = mgt_backend_cpu_create(2);
	if (!be) {
		printf("not ok - cannot create the cpu backend: %s\n", mgt_err_msg());
		return 1;
	}
	O = be->ops;
	CHECK(!strcmp(O->name, "cpu") && be->threads == 2, "cpu backend created with 2 threads");
#if defined(__x86_64__) && defined(__GNUC__)
	/* an unrecognized CPU must not leave OpenBLAS on its generic kernels (10x slower) */
	const char *core = openblas_get_corename();
	CHECK(getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx2") || strcmp(core, "Prescott") != 0,
	      "OpenBLAS kernels: %s", core);
#endif
	test_memory();
	test_reserve();
	test_linear();
	test_fp8_gemm();
	test_embedding();
	test_norm();
	test_rope();
	test_attn();
	test_xattn();
	test_attn_cp();
	test_act();
	test_bda();
	test_xent();
	test_adamw();
	test_reductions();
	test_moe();
	test_determinism();
	test_supports();
	mgt_backend_destroy(be);
	mgt_backend_destroy(NULL);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
