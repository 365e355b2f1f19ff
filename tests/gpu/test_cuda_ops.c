/* tests/gpu/test_cuda_ops.c: the CUDA backend against the CPU backend, op by op.
 *
 * For every op of mgt_backend_ops: fresh random inputs (never zeros) go to the CPU backend (host
 * memory) and to the CUDA backend (uploaded); both run; the GPU results are downloaded and
 * compared with the CPU's by ||gpu - cpu|| / ||cpu|| in double (for "accumulates" outputs: the
 * increments, out - start, so that the start values do not hide an error).  Before every GPU run,
 * "writes" outputs are poisoned with NaN (a NaN or Inf left anywhere fails the check: an element
 * not written) and "accumulates" outputs start from the same random values as the CPU's.  Every
 * op runs twice on the GPU from the same state and must give the same bits (determinism).
 * Shapes are big enough to spread over many thread blocks (T = 1000..2048, h = 768..2048,
 * V = 50304) and include ragged ones (s not a multiple of 64, h not a multiple of 4).
 *
 * Tolerances (the reason for each is beside its #define): fp32 ops 1e-5, exact ops 0, linear in
 * bf16/fp16 against the CPU backend in the same precision 3e-5 (operands rounded identically,
 * products exact, only the fp32 summation differs), and bf16/fp16 against CPU fp32 1e-2 (a
 * sanity bound).  Every check has a second, tighter tolerance for the CPU simulation of CUDA
 * (tests/sim; this file compiled with -DMGT_CUDA_SIM): there the device's math is the host's, so
 * the bound is the one that holds for the CPU reference itself: 0 where both sides compute the
 * same formula in the same order, one fp32 ulp where a statistic is summed in double in another
 * order, and a stated bound where fp32 sums run in another order.  Norm, softmax and
 * cross-entropy inputs mix ordinary rows with small-variance, large-magnitude and
 * denormal-adjacent ones, compared row by row so that no row type hides behind another.  The last section repeats a few ops with every device buffer starting 4 bytes
 * past its allocation (the model passes tensors at any float offset of its flat buffers); it runs
 * last because a misaligned access leaves the CUDA context unusable.
 *
 * Device buffers are allocated at exactly their size (the simulator's guard zones sit right after
 * them); with the +4-byte offset, the word before the buffer holds a sentinel checked at free.
 *
 * Output: "ok - ..." / "not ok - ..." per check with the error and tolerance, then
 * "N passed, M failed"; exit 1 on any failure (at the first one with MGT_TEST_FAILFAST=1), 77 with "skip: no CUDA device" when
 * mgt_backend_cuda_devices() is 0.  MGT_TEST_SEED=N repeats a run's inputs (the seed is printed);
 * MGT_TEST_ONLY=WORD runs only the sections whose name contains WORD.
 * A 900 s alarm (MGT_TEST_ALARM=N: N s) ends the program if the device hangs.
 *
 * MGT_TEST_SMALL=1 runs the same checks on small shapes (small_ops), for make check-sim, which runs
 * this program against a CPU simulation of CUDA (tests/sim/): still several blocks per launch,
 * ragged sizes, GQA, dropout, vocab shards and misaligned pointers, in about 13 minutes there on
 * 2 cores (MGT_TEST_ALARM=3600: the simulator is no hung device). */
#include "backend/backend.h"
#include "model/model.h"
#if defined(MGT_HAVE_CUDA) || defined(MGT_CUDA_SIM)
#define MMA_PROBE 1
#include <cuda_runtime_api.h>

#include "kernels.h"
#else
#define MMA_PROBE 0
#endif

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"
#include "../unit/attn_calls.h"
#include "../unit/check.h"

/* ---- tolerances under the simulator (tests/sim: host math, exact rounding, no tensor cores) ---- */
#ifdef MGT_CUDA_SIM
#define SIM 1
void mgt_sim_prof_tag(const char *section); /* tests/sim/sim_prof.cc: the access profile's rows */
#else
#define SIM 0
#endif
/* Same formula, same operation order, fp32 on both sides (elementwise ops, AdamW, the
 * embedding's in-order sums, the cross-entropy's per-element math): the same bits. */
#define SIM_EXACT 0.0
/* The same fp32 formula applied to statistics summed in double in a different order (norms,
 * sumexp, column sums) or to cos/sin rounded from double: the doubles differ in their last bits,
 * so an fp32 result can round the other way, by one ulp (2^-23 relative at most) and rarely. */
#define SIM_ULP (1.0 / 8388608.0)
/* fp32 attention (online softmax over 64-key tiles against the CPU's blocking): measured
 * 0.8e-7..3.6e-7 over the shapes here; 2e-6 is 5x that, and 25x below the GPU's bound. */
#define SIM_ATTN 2e-6
/* dbias of the position bias (attn_bias_bwd) against the CPU's: the same sums in the same order
 * of dS values that differ by the fp32 attention's rounding (SIM_ATTN), amplified by the
 * cancellation along each diagonal: measured 3.5e-8..1.03e-6 over 7 seeds of the small shapes
 * (the largest with d = 128 under the key mask); 5e-6 is 5x that. */
#define SIM_ATTN_BIAS 5e-6
/* Context-parallel attention blocks merged (attn_blk_merge: one rescaling of out per block) or
 * against the whole-sequence attention: fp32 rounding of the merges on top of SIM_ATTN. */
#define SIM_CP 4e-6
/* A check's tolerance: gpu on a GPU, sim under the simulator (named in the check's line). */
typedef struct {
	double gpu, sim;
} tol2;
static tol2 T2(double gpu, double sim)
{
	tol2 t = { gpu, sim };
	return t;
}
static double tol_of(tol2 t) { return SIM ? t.sim : t.gpu; }

/* ---- tolerances (normwise relative, ||gpu - cpu|| / ||cpu||) ---- */
/* fp32 ops: both sides compute the same formula in fp32 (statistics and sums in double where the
 * header says so); they differ only by summation order and by 1-ulp differences of expf, erff,
 * cosf, sqrtf and fused multiply-adds, which stay near 1e-7..1e-6 normwise.  A real bug (wrong
 * index, missing term, wrong mask) gives errors near 1e-2..1. */
#define TOL32 1e-5
/* Exact ops: a copy, a gather, a max, one IEEE multiply or add per element: same bits. */
#define TOL_EXACT 0.0
/* Linear, bf16/fp16 operands, vs the CPU backend in the same precision: operands are rounded
 * identically (round to nearest even) and their products are exact in fp32, so only the fp32
 * accumulation differs: summation order, and tensor cores normalizing partial sums with
 * truncation rather than rounding (see lin_tol).  The floor for K up to ~4000; a wrong operand
 * rounding (truncation instead of nearest even, or no rounding) gives 1e-3..3e-3. */
#define TOL_LOWP 3e-5
/* Linear, tolerance for an output that sums K products: the fp32 rounding of a K-term sum grows
 * as u sqrt(K) (u = 2^-24; a sequential FMA chain, as a GEMM tile runs, reaches about
 * u sqrt(K/6) normwise on random data, and the CPU's blocked sums their own), so 4 u sqrt(K)
 * covers both sides: TOL32 up to K = 1700, 5.4e-5 at K = 50304 (the output layer's dx).  Low
 * precision adds the tensor cores' truncating accumulation, up to u per 16-term block, which can
 * add up coherently: + u K / 16, and at least TOL_LOWP. */
static double lin_tol_gpu(mgt_precision p, long K)
{
	const double u = 1.0 / 16777216.0;
	double t = fmax(TOL32, 4 * u * sqrt((double)K));
	return p == MGT_PREC_FP32 ? t : fmax(TOL_LOWP, t + u * (double)K / 16);
}
/* Under the simulator the product is a sequential fp32 FMA chain (no tensor cores, operands
 * rounded as the CPU rounds them), the CPU's a blocked sum: 4 u sqrt(K) without the floor. */
static tol2 lin_tol(mgt_precision p, long K)
{
	return T2(lin_tol_gpu(p, K), 4.0 / 16777216.0 * sqrt((double)K));
}
/* Column sums of T rows (bias gradients, the norm's dw/db): fp32 sums on a GPU's bound, double
 * sums rounded once under the simulator. */
static tol2 colsum_tol(long T) { return T2(lin_tol_gpu(MGT_PREC_FP32, T), SIM_ULP); }
/* Linear, bf16/fp16 GPU vs CPU fp32: the operand rounding itself, about 2^-9 per operand,
 * i.e. 2e-3..4e-3 normwise for bf16 and 10x less for fp16.  A sanity bound only. */
#define TOL_LOWP_VS_FP32 1e-2
/* Attention backward: ds = P * (dP - D) subtracts D, the P-weighted mean of dP, from dP; the
 * GPU computes D = rowsum(dout * out) from the forward's output, the CPU from its own tiles,
 * and the difference of two O(1) numbers amplifies their fp32 rounding by |dP| / |dP - D|.
 * Both are within 1e-5 of a double reference (the CPU's by tests/unit/test_backend.c); their
 * difference is bounded by the sum, and long rows (s = 1000..2048) add a little. */
#define TOL_ATTN_BWD 5e-5
/* dbias of the position bias (attn_bias_bwd): each element sums dS along one diagonal, b*s terms
 * that partly cancel (each row of dS sums to 0 without dropout), so the fp32 rounding of both
 * sides' dS, which dqkv's bound covers, weighs more on it: TOL_ATTN_BWD with a factor 2 for that
 * cancellation (not yet measured on a GPU; under the simulator the errors are 5x below dqkv's
 * bound there, SIM_ATTN_BIAS).  Both sides add the same terms in the same order (sequence, then
 * query ascending, one fp32 sum from the start value); only dS's own rounding differs. */
#define TOL_ATTN_BIAS 1e-4
/* AdamW: the parameters move by ~lr = 3e-4 of their size per step, so a 1e-5 bound on p would
 * let a 3% error in the update through.  p, m, v are each checked at 1e-6 (1 ulp is 6e-8), and the
 * update p - p0 on its own at 1e-3: a 1-ulp difference in p is up to ~1e-4 of a small update. */
#define TOL_ADAM 1e-6
#define TOL_ADAM_UPDATE 1e-3
/* sumsq: both sides add exact squares in double in different orders; the worst case over 5e7
 * positive terms is n * 2^-53 = 5e-9 but rounding errors of positive sums behave as a random
 * walk (~1e-13).  A lost block of 65536 elements would be 1e-3. */
#define TOL_SUMSQ 1e-9

static mgt_backend *cpu, *gpu;
static const mgt_backend_ops *C, *G;
static int mis;             /* device buffers start this many 4-byte words past their allocation */
static bool small;          /* MGT_TEST_SMALL: small_ops instead of all_ops and misaligned_ops */
static const char *tag = ""; /* prefix of every check line */

/* ---- host helpers ---- */

static uint64_t rng;
static double urand(void) /* [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static void *xmalloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p) {
		printf("not ok - host out of memory (%zu bytes)\n", n);
		printf("%d passed, %d failed\n", passed, failed + 1);
		exit(1);
	}
	return p;
}

static float *hrand(size_t n, double scale)
{
	float *p = xmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(scale * urand());
	return p;
}

static float *hcopy(const float *x, size_t n)
{
	float *p = xmalloc(n * sizeof *p);
	memcpy(p, x, n * sizeof *p);
	return p;
}

/* n NaNs (a shared buffer, grown as needed) */
static const float *nans(size_t n)
{
	static float *buf;
	static size_t cap;
	if (n > cap) {
		free(buf);
		buf = xmalloc(n * sizeof *buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = NAN;
		cap = n;
	}
	return buf;
}

static const char *nm(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *nm(const char *fmt, ...)
{
	static char buf[64][256]; /* a ring: a check's name lives for the next 63 names */
	static int k;
	char tmp[256]; /* formatted first: an argument may be the slot about to be reused */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	k = (k + 1) % 64;
	memcpy(buf[k], tmp, sizeof tmp);
	return buf[k];
}

/* ---- device helpers: any failure ends the program (a CUDA error is sticky) ---- */

/* Recovery from a failed backend (a refused cuBLASLt call, say): bail() jumps back to main, which
 * makes a new CUDA backend and goes on with the section after the failed one (section() skips the
 * ones before), at most MAX_RECOVER times; a device that cannot give a new backend (a sticky CUDA
 * error) ends the run. */
static sigjmp_buf recover;
static bool recover_armed;
static int sec_no, resume_from; /* sections started in this pass; the first to run */
enum { MAX_RECOVER = 3 };

static void bail(const char *what)
{
	printf("not ok - %s%s failed: %s\n", tag, what, mgt_err_msg());
	failed++;
	if (recover_armed)
		siglongjmp(recover, 1);
	printf("# Bail out! the CUDA backend failed; the checks after this one cannot run\n");
	printf("%d passed, %d failed\n", passed, failed);
	exit(1);
}

#define MAXBUF 64
static struct {
	void *p, *base;
} reg[MAXBUF];

/* The sentinel in the word before a misaligned buffer (a write there is a bug: checked at free). */
static const uint32_t SENTINEL = 0xFDFDFDFDu;

static void *dalloc(size_t bytes)
{
	void *base = G->alloc(gpu, bytes + 4 * (size_t)mis);
	if (!base)
		bail(nm("alloc of %zu bytes", bytes));
	if (mis && G->upload(gpu, base, &SENTINEL, 4) != MGT_OK)
		bail("upload");
	void *p = (char *)base + 4 * mis;
	for (int i = 0; i < MAXBUF; i++)
		if (!reg[i].p) {
			reg[i].p = p;
			reg[i].base = base;
			return p;
		}
	printf("not ok - test bug: more than %d live device buffers\n", MAXBUF);
	exit(1);
}

static void dfree(void *p)
{
	if (!p)
		return;
	for (int i = 0; i < MAXBUF; i++)
		if (reg[i].p == p) {
			uint32_t w = SENTINEL;
			if (reg[i].base != p && G->download(gpu, &w, reg[i].base, 4) != MGT_OK)
				bail("download");
			if (w != SENTINEL)
				CHECK(0, "%sthe word before a device buffer was written (%#x)", tag, (unsigned)w);
			G->free(gpu, reg[i].base);
			reg[i].p = reg[i].base = NULL;
			return;
		}
	printf("not ok - test bug: freeing an unknown device buffer\n");
	exit(1);
}

static void up(void *d, const void *h, size_t bytes)
{
	if (G->upload(gpu, d, h, bytes) != MGT_OK)
		bail("upload");
}

static float *dput(const float *h, size_t n)
{
	float *d = dalloc(n * sizeof *d);
	up(d, h, n * sizeof *d);
	return d;
}

/* h [n] rounded to the 16-bit type dt: its 16-bit elements uploaded into *d16 (device, allocated
 * here), and returned: its fp32 values on the device (the same numbers). */
static float *dput16(const float *h, size_t n, mgt_elem_type dt, void **d16)
{
	uint16_t *g = xmalloc(n * 2);
	float *v = xmalloc(n * 4);
	C->cast(cpu, g, dt, h, n);
	for (size_t i = 0; i < n; i++) v[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(g[i]) : mgt_f16_to_f32(g[i]);
	*d16 = dalloc(n * 2);
	up(*d16, g, n * 2);
	float *dv = dput(v, n);
	free(g), free(v);
	return dv;
}

static int32_t *dputi(const int32_t *h, size_t n)
{
	int32_t *d = dalloc(n * sizeof *d);
	up(d, h, n * sizeof *d);
	return d;
}

static void poison(float *d, size_t n)
{
	up(d, nans(n), n * sizeof *d);
}

static float *dget(const float *d, size_t n)
{
	float *h = xmalloc(n * sizeof *h);
	if (G->download(gpu, h, d, n * sizeof *h) != MGT_OK)
		bail("download (the op before it failed?)");
	return h;
}

/* ---- comparisons ---- */

/* ||g - c|| / ||c|| in double, or of the increments g - base, c - base when base != NULL;
 * ||g - c|| when c is all zero.  +inf when either side has a NaN or Inf (*bad counts them). */
static double relerr(const float *g, const float *c, const float *base, size_t n, size_t *bad)
{
	double e = 0, r = 0;
	size_t nb = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(g[i]) || !isfinite(c[i])) {
			nb++;
			continue;
		}
		double gv = g[i], cv = c[i];
		if (base) {
			gv -= base[i];
			cv -= base[i];
		}
		e += (gv - cv) * (gv - cv);
		r += cv * cv;
	}
	*bad = nb;
	if (nb)
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* "(tol 1e-05)" on a GPU, "(tol 1.2e-07; GPU 1e-05)" under the simulator */
static const char *tol_str(tol2 t)
{
	static char buf[64]; /* its own buffer: nm's rotate under the callers' names */
	if (SIM)
		snprintf(buf, sizeof buf, "tol %.2g; GPU %.2g", t.sim, t.gpu);
	else
		snprintf(buf, sizeof buf, "tol %.2g", t.gpu);
	return buf;
}

static void cmp(const char *what, const float *g, const float *c, const float *base, size_t n, tol2 t)
{
	size_t bad;
	const double tol = tol_of(t);
	double e = relerr(g, c, base, n, &bad);
	if (bad)
		CHECK(0, "%s%s: %zu of %zu elements NaN/Inf (unwritten or overflow)", tag, what, bad, n);
	else
		CHECK(e <= tol, "%s%s: err %.2e (%s)", tag, what, e, tol_str(t));
	if (bad || !(e <= tol)) { /* where: the first non-finite element, else the largest difference */
		size_t w = 0;
		double wd = -1;
		for (size_t i = 0; i < n; i++) {
			double d = fabs((double)g[i] - (double)c[i]);
			if (!isfinite(g[i]) || !isfinite(c[i])) {
				w = i;
				break;
			}
			if (d > wd) {
				wd = d;
				w = i;
			}
		}
		printf("#   worst element %zu of %zu: gpu %.9g cpu %.9g%s\n", w, n, (double)g[w], (double)c[w],
		       base ? " (values including the start)" : "");
	}
}

/* The largest row error (||g_t - c_t|| / ||c_t|| over the h elements of row t, or of the
 * increments from base) over T rows: rows of very different sizes each count. */
static void cmp_rows(const char *what, const float *g, const float *c, const float *base, int T, size_t h, tol2 t)
{
	const double tol = tol_of(t);
	double worst = 0;
	size_t bad = 0, wt = 0;
	for (int r = 0; r < T; r++) {
		size_t b;
		const size_t o = (size_t)r * h;
		double e = relerr(g + o, c + o, base ? base + o : NULL, h, &b);
		bad += b;
		if (!b && e > worst)
			worst = e, wt = (size_t)r;
	}
	if (bad)
		CHECK(0, "%s%s: %zu of %zu elements NaN/Inf (unwritten or overflow)", tag, what, bad, (size_t)T * h);
	else
		CHECK(worst <= tol, "%s%s: worst row %zu err %.2e (%s)", tag, what, wt, worst, tol_str(t));
}

/* elements whose bits differ */
static size_t ndiff(const void *a, const void *b, size_t n, size_t elem)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0;
	return k;
}

static void det(const char *what, size_t nd)
{
	CHECK(nd == 0, "%s%s: two GPU runs bitwise identical (%zu elements differ)", tag, what, nd);
}

/* dropout: the same elements are zero on both sides */
static void same_zeros(const char *what, const float *g, const float *c, size_t n)
{
	size_t k = 0, z = 0;
	for (size_t i = 0; i < n; i++) {
		k += (g[i] == 0.0f) != (c[i] == 0.0f);
		z += c[i] == 0.0f;
	}
	CHECK(k == 0, "%s%s: dropout mask = CPU's (%zu of %zu dropped, %zu differ)", tag, what, z, n, k);
}

static const char *precname(mgt_precision p)
{
	return p == MGT_PREC_BF16 ? "bf16" : p == MGT_PREC_FP16 ? "fp16" : "fp32";
}

/* ================= memory and backend ================= */

static void t_memory(void)
{
	CHECK(!strcmp(G->name, "cuda") && !gpu->host_memory, "cuda backend: name \"%s\", host_memory %d", G->name,
	      (int)gpu->host_memory);
	CHECK(mgt_backend_cuda_stream(gpu) != NULL && mgt_backend_cuda_stream(cpu) == NULL,
	      "mgt_backend_cuda_stream: a stream for cuda, NULL for cpu");
	mgt_status st = MGT_OK;
	mgt_backend *bad = mgt_backend_cuda_create(mgt_backend_cuda_devices() + 7, &st);
	CHECK(bad == NULL && st == MGT_ERR_USAGE, "cuda_create of a device that does not exist: NULL, usage error");
	if (bad)
		mgt_backend_destroy(bad);

	const size_t n = 3 * 1000 * 1000 + 17;
	size_t in0 = gpu->bytes_in_use;
	float *d = G->alloc(gpu, n * sizeof *d);
	if (!d)
		bail("alloc");
	size_t in1 = gpu->bytes_in_use;
	CHECK(in1 - in0 >= n * sizeof *d && gpu->bytes_peak >= in1,
	      "bytes_in_use grows by the allocation (%zu -> %zu), bytes_peak %zu >= it", in0, in1, gpu->bytes_peak);
	printf("# alloc alignment: %s\n", (uintptr_t)d % 256 == 0 ? "256 bytes" : (uintptr_t)d % 16 == 0 ? "16 bytes" : "under 16 bytes");
	float *h = xmalloc(n * sizeof *h);
	if (G->download(gpu, h, d, n * sizeof *h) != MGT_OK)
		bail("download");
	size_t nz = 0;
	for (size_t i = 0; i < n; i++)
		nz += h[i] != 0.0f;
	CHECK(nz == 0, "alloc is zero-filled (%zu nonzero of %zu)", nz, n);
	float *x = hrand(n, 1);
	up(d, x, n * sizeof *x);
	if (G->download(gpu, h, d, n * sizeof *h) != MGT_OK)
		bail("download");
	CHECK(memcmp(h, x, n * sizeof *x) == 0, "upload/download round trip of %zu floats", n);
	G->zero(gpu, d + 5, 1000 * sizeof *d);
	if (G->download(gpu, h, d, n * sizeof *h) != MGT_OK)
		bail("download");
	int zok = h[4] == x[4] && h[1005] == x[1005] && memcmp(h + 1006, x + 1006, (n - 1006) * 4) == 0;
	for (int i = 5; i < 1005; i++)
		zok &= h[i] == 0.0f;
	CHECK(zok, "zero: exactly the bytes asked, at an offset");
	G->sync(gpu);
	G->free(gpu, d);
	G->free(gpu, NULL);
	CHECK(gpu->bytes_in_use == in0, "bytes_in_use back to %zu after free (%zu)", in0, gpu->bytes_in_use);
	free(h), free(x);
}


/* true when the n bytes at host h are all zero */
static bool all_zero(const unsigned char *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (h[i])
			return false;
	return true;
}

/* reserve, commit, discard, unreserve (backend.h; lib/backend/cuda_vmm.c): a reservation holds no
 * device memory; committing one byte maps one granule (its size: what bytes_in_use grows by) and
 * a range maps the granules it touches, zero-filled; uploaded bytes read back; discard zeroes its
 * range and, once the stream is idle (sync), unmaps the granules wholly inside (bytes_in_use
 * falls by them), keeping the partial ones' bytes outside the range; committed again, the range
 * reads zeros between the kept ends; unreserve gives everything back.  Without the driver's
 * entry points (a fallback allocation: bytes_in_use grows by the whole reservation at once) only
 * the values are checked. */
static void t_reserve(void)
{
	const size_t n = ((size_t)16 << 20) + 123;
	size_t in0 = gpu->bytes_in_use;
	unsigned char *p = G->reserve(gpu, n);
	if (!p)
		bail("reserve");
	bool vmm = gpu->bytes_in_use == in0;
	if (G->commit(gpu, p + 5, 1) != MGT_OK)
		bail("commit");
	size_t g = vmm ? gpu->bytes_in_use - in0 : (size_t)2 << 20, a = g + g / 2, b = a + 4 * g + 333;
	printf("# reserve: %s, granule %zu bytes\n", vmm ? "virtual memory management" : "a whole allocation (no VMM)", g);
	CHECK(!vmm || (g > 0 && g <= ((size_t)2 << 20) && b < n), "commit of one byte maps one granule (%zu bytes)", g);
	size_t in1 = gpu->bytes_in_use, lo = a / g * g, hi = (b + g - 1) / g * g;
	if (G->commit(gpu, p + a, b - a) != MGT_OK)
		bail("commit");
	CHECK(!vmm || gpu->bytes_in_use - in1 == hi - lo, "commit [%zu, %zu) maps the %zu granules it touches (%zu bytes)",
	      a, b, (hi - lo) / g, gpu->bytes_in_use - in1);
	unsigned char *h = xmalloc(hi - lo), *x = (unsigned char *)hrand((b - a + 3) / 4, 1);
	if (G->download(gpu, h, p + lo, hi - lo) != MGT_OK)
		bail("download");
	CHECK(all_zero(h, hi - lo), "committed granules read zeros");
	up(p + a, x, b - a);
	if (G->download(gpu, h, p + a, b - a) != MGT_OK)
		bail("download");
	CHECK(memcmp(h, x, b - a) == 0, "upload/download round trip in committed granules");
	size_t d0 = a + 10, d1 = b - 10, in2 = gpu->bytes_in_use, whole = (d1 / g - (d0 + g - 1) / g) * g;
	G->discard(gpu, p + d0, d1 - d0);
	G->sync(gpu);
	CHECK(!vmm || in2 - gpu->bytes_in_use == whole, "discard [%zu, %zu) then sync: the %zu granules wholly inside "
	      "unmapped (%zu bytes given back)", d0, d1, whole / g, in2 - gpu->bytes_in_use);
	if (G->commit(gpu, p + a, b - a) != MGT_OK || G->download(gpu, h, p + a, b - a) != MGT_OK)
		bail("commit after discard");
	CHECK(memcmp(h, x, 10) == 0 && memcmp(h + (b - a) - 10, x + (b - a) - 10, 10) == 0 && all_zero(h + 10, d1 - d0),
	      "committed again: zeros where discarded, the bytes outside kept");
	CHECK(!vmm || gpu->bytes_in_use == in2, "committed again: the same granules mapped (%zu bytes)",
	      gpu->bytes_in_use - in0);
	CHECK(G->commit(gpu, p + n - 1, 1) == MGT_OK, "commit of the last byte");
	G->unreserve(gpu, p, n);
	G->unreserve(gpu, NULL, 0);
	CHECK(gpu->bytes_in_use == in0, "unreserve gives every granule back (%zu bytes in use, %zu before)",
	      gpu->bytes_in_use, in0);
	free(h), free(x);
}

/* A GPU op's output in 16 bits (run writes it into the device buffer d16 of n 2-byte elements, type
 * dt) against the same op's fp32 output y32 (host), rounded on the host: bit for bit, since the
 * kernel computes the same fp32 values and only its store rounds (the model's 16-bit
 * activations). */
static void t_out16(const char *id, void *d16, mgt_elem_type dt, const float *y32, size_t n)
{
	uint16_t *g = xmalloc(n * 2);
	if (G->download(gpu, g, d16, n * 2) != MGT_OK)
		bail("download (the 16-bit op failed?)");
	size_t nd = 0;
	for (size_t i = 0; i < n; i++)
		nd += g[i] != (dt == MGT_DT_BF16 ? mgt_f32_to_bf16(y32[i]) : mgt_f32_to_f16(y32[i]));
	CHECK(nd == 0, "%s%s: the %s output is its fp32 output rounded (%zu elements differ)", tag, id,
	      dt == MGT_DT_BF16 ? "bf16" : "fp16", nd);
	free(g);
}

/* 16-bit ulps between a GEMM's 16-bit output written by cuBLASLt (MGT_GEMM_D16) and its fp32
 * output rounded: the simulator's stand-in sums both in one order (0: bitwise, so a wrong rounding
 * fails); a GPU's algorithm for a 16-bit D may sum in another (1). */
#ifdef MGT_CUDA_SIM
#define D16_ULPS 0
#else
#define D16_ULPS 1
#endif

/* t_out16 allowing ulps 16-bit ulps (the bits as integers of the same sign) between the output and
 * the rounded fp32 output; the count of elements that differ at all is printed. */
static void t_out16_ulp(const char *id, void *d16, mgt_elem_type dt, const float *y32, size_t n, int ulps)
{
	if (!ulps) {
		t_out16(id, d16, dt, y32, n);
		return;
	}
	uint16_t *g = xmalloc(n * 2);
	if (G->download(gpu, g, d16, n * 2) != MGT_OK)
		bail("download (the 16-bit op failed?)");
	size_t nd = 0, nfar = 0;
	for (size_t i = 0; i < n; i++) {
		const uint16_t r = dt == MGT_DT_BF16 ? mgt_f32_to_bf16(y32[i]) : mgt_f32_to_f16(y32[i]);
		const int a = g[i] & 0x7fff, b = r & 0x7fff;
		const int dist = (g[i] >> 15) == (r >> 15) || (a == 0 && b == 0) ? abs(a - b) : 1 << 16;
		nd += dist != 0, nfar += dist > ulps;
	}
	CHECK(nfar == 0, "%s%s: the %s output within %d ulp of its fp32 output rounded (%zu beyond, %zu differ)", tag, id,
	      dt == MGT_DT_BF16 ? "bf16" : "fp16", ulps, nfar, nd);
	free(g);
}

/* ================= linear ================= */

/* The cast op into dst (device, n 16-bit elements of type dt) from src (device fp32, host copy
 * h): bit for bit the CPU's cast of the same values; and the widen op back to fp32 bit for bit
 * the CPU's widen (the exact values). */
static void t_cast_bits(const char *id, void *dst, mgt_elem_type dt, const float *src, const float *h, size_t n)
{
	uint16_t *g = xmalloc(n * 2), *c = xmalloc(n * 2);
	G->cast(gpu, dst, dt, src, n);
	if (G->download(gpu, g, dst, n * 2) != MGT_OK)
		bail("download (cast failed?)");
	C->cast(cpu, c, dt, h, n);
	size_t nd = 0;
	for (size_t i = 0; i < n; i++)
		nd += g[i] != c[i];
	CHECK(nd == 0, "%s%s: cast to the 16-bit weight copy bitwise the CPU's (%zu elements differ)", tag, id, nd);
	float *dW = dalloc(n * 4), *wc = xmalloc(n * 4);
	G->widen(gpu, dW, dst, dt, n);
	C->widen(cpu, wc, c, dt, n);
	float *wg = dget(dW, n);
	nd = ndiff(wg, wc, n, 4);
	CHECK(nd == 0, "%s%s: widen of the 16-bit copy bitwise the CPU's (%zu elements differ)", tag, id, nd);
	free(g), free(c), free(wc), free(wg), dfree(dW);
}

static void t_linear(int T, int in, int out, bool bias, bool want_dx, mgt_precision prec)
{
	const size_t nx = (size_t)T * in, nw = (size_t)out * in, ny = (size_t)T * out;
	const char *id = nm("linear %s T=%d in=%d out=%d%s%s", precname(prec), T, in, out, bias ? " bias" : "",
			    want_dx ? "" : " dx=NULL");
	float *x = hrand(nx, 1), *w = hrand(nw, 0.5), *b = bias ? hrand(out, 1) : NULL, *dy = hrand(ny, 1);
	float *dw0 = hrand(nw, 1), *db0 = hrand(out, 1);
	/* CPU in the same precision */
	cpu->precision = prec;
	float *yc = xmalloc(ny * 4), *dxc = want_dx ? xmalloc(nx * 4) : NULL, *dwc = hcopy(dw0, nw), *dbc = hcopy(db0, out);
	C->linear_fwd(cpu, yc, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, b, T, in, out);
	C->linear_bwd(cpu, dxc, MGT_DT_F32, dwc, bias ? dbc : NULL, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
	cpu->precision = MGT_PREC_FP32;

	gpu->precision = prec;
	float *dX = dput(x, nx), *dW = dput(w, nw), *dB = bias ? dput(b, out) : NULL, *dDY = dput(dy, ny);
	float *dY = dalloc(ny * 4), *dDX = want_dx ? dalloc(nx * 4) : NULL, *dDW = dalloc(nw * 4), *dDB = dalloc(out * 4);
	float *y[2], *dx[2] = { NULL, NULL }, *dw[2], *db[2];
	/* the second run reads the weight as the model's 16-bit copy, made by the cast op: the same
	 * bits as rounding the fp32 weight in the op (det below) */
	const mgt_elem_type lt = mgt_precision_dtype(prec);
	void *dW16 = lt == MGT_DT_F32 ? NULL : dalloc(nw * 2), *dX16 = lt == MGT_DT_F32 ? NULL : dalloc(nx * 2);
	if (dW16)
		t_cast_bits(id, dW16, lt, dW, w, nw), t_cast_bits(id, dX16, lt, dX, x, nx);
	for (int k = 0; k < 2; k++) {
		/* ... and the input as a 16-bit activation */
		const void *wk = k && dW16 ? dW16 : dW, *xk = k && dX16 ? dX16 : dX;
		const mgt_elem_type tk = k && dW16 ? lt : MGT_DT_F32;
		poison(dY, ny);
		if (dDX)
			poison(dDX, nx);
		up(dDW, dw0, nw * 4);
		up(dDB, db0, out * 4);
		G->linear_fwd(gpu, dY, MGT_DT_F32, xk, tk, wk, tk, dB, T, in, out);
		G->linear_bwd(gpu, dDX, MGT_DT_F32, dDW, bias ? dDB : NULL, dDY, MGT_DT_F32, xk, tk, wk, tk, T, in, out);
		y[k] = dget(dY, ny);
		if (want_dx)
			dx[k] = dget(dDX, nx);
		dw[k] = dget(dDW, nw);
		db[k] = dget(dDB, out);
	}
	for (int d16 = 0; dW16 && d16 < 2; d16++) {
		/* the output in 16 bits (the logits): the rounding of the fp32 output, through fp32 blocks
		 * and a cast (MGT_GEMM_D16=0), then rounded by cuBLASLt (2: the default's path, a refusal
		 * failing the op; within one 16-bit ulp: its algorithm for a 16-bit D may sum in another
		 * order, though an H200 gave the same bits; bitwise under the simulator) */
		setenv("MGT_GEMM_D16", d16 ? "2" : "0", 1);
		void *dY16 = dalloc(ny * 2);
		G->linear_fwd(gpu, dY16, lt, dX, MGT_DT_F32, dW, MGT_DT_F32, dB, T, in, out);
		t_out16_ulp(nm("%s: fwd y%s", id, d16 ? " (MGT_GEMM_D16)" : ""), dY16, lt, y[0], ny, d16 ? D16_ULPS : 0);
		dfree(dY16);
		if (want_dx) { /* dx in 16 bits (a norm output's gradient): the rounding of the fp32 dx */
			void *dDX16 = dalloc(nx * 2);
			G->linear_bwd(gpu, dDX16, lt, dDW, NULL, dDY, MGT_DT_F32, dX, MGT_DT_F32, dW, MGT_DT_F32, T, in, out);
			t_out16_ulp(nm("%s: bwd dx%s", id, d16 ? " (MGT_GEMM_D16)" : ""), dDX16, lt, dx[0], nx, d16 ? D16_ULPS : 0);
			dfree(dDX16);
		}
		unsetenv("MGT_GEMM_D16");
	}
	gpu->precision = MGT_PREC_FP32;
	cmp(nm("%s: fwd y", id), y[0], yc, NULL, ny, lin_tol(prec, in));
	if (want_dx)
		cmp(nm("%s: bwd dx", id), dx[0], dxc, NULL, nx, lin_tol(prec, out));
	cmp(nm("%s: bwd dw (accumulated)", id), dw[0], dwc, dw0, nw, lin_tol(prec, T));
	if (bias) /* a column sum of dy in fp32 (not a GEMM) */
		cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, out, colsum_tol(T));
	else
		CHECK(memcmp(db[0], db0, out * 4) == 0, "%s%s: db NULL leaves db alone", tag, id);
	det(id, ndiff(y[0], y[1], ny, 4) + (want_dx ? ndiff(dx[0], dx[1], nx, 4) : 0) + ndiff(dw[0], dw[1], nw, 4) +
			ndiff(db[0], db[1], out, 4));
	if (prec != MGT_PREC_FP32) {
		/* sanity: against the CPU in fp32 */
		float *y32 = xmalloc(ny * 4), *dx32 = want_dx ? xmalloc(nx * 4) : NULL, *dw32 = hcopy(dw0, nw);
		C->linear_fwd(cpu, y32, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, b, T, in, out);
		C->linear_bwd(cpu, dx32, MGT_DT_F32, dw32, NULL, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, in, out);
		cmp(nm("%s vs cpu fp32 (sanity): y", id), y[0], y32, NULL, ny, T2(TOL_LOWP_VS_FP32, TOL_LOWP_VS_FP32));
		if (want_dx)
			cmp(nm("%s vs cpu fp32 (sanity): dx", id), dx[0], dx32, NULL, nx, T2(TOL_LOWP_VS_FP32, TOL_LOWP_VS_FP32));
		cmp(nm("%s vs cpu fp32 (sanity): dw", id), dw[0], dw32, dw0, nw, T2(TOL_LOWP_VS_FP32, TOL_LOWP_VS_FP32));
		free(y32), free(dx32), free(dw32);
	}
	for (int k = 0; k < 2; k++)
		free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
	dfree(dX), dfree(dW), dfree(dB), dfree(dDY), dfree(dY), dfree(dDX), dfree(dDW), dfree(dDB), dfree(dW16), dfree(dX16);
	free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(yc), free(dxc), free(dwc), free(dbc);
}

/* ================= embedding ================= */

/* embedding_bwd of a 16-bit dy (bf16, fp16) on the GPU: the bits of the fp32 op on its values. */
static void embedding_bwd16(const int32_t *ids, const float *dy, const float *dt0, int64_t row0, int64_t rows, int T,
			    int h)
{
	const size_t ny = (size_t)T * h, nt = (size_t)rows * h;
	int32_t *dI = dputi(ids, T);
	float *dT = dalloc(nt * 4);
	for (int k = 0; k < 2; k++) {
		const mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		void *dG16;
		float *dGv = dput16(dy, ny, dt, &dG16), *t[2];
		for (int v = 0; v < 2; v++) {
			up(dT, dt0, nt * 4);
			G->embedding_bwd(gpu, dT, v ? dG16 : (const void *)dGv, v ? dt : MGT_DT_F32, dI, row0, rows, T, h);
			t[v] = dget(dT, nt);
		}
		size_t nd = ndiff(t[0], t[1], nt, 4);
		CHECK(nd == 0, "%sembedding_bwd T=%d h=%d: a %s dy gives the bits of its fp32 values (%zu differ)", tag, T, h,
		      k ? "fp16" : "bf16", nd);
		free(t[0]), free(t[1]), dfree(dGv), dfree(dG16);
	}
	dfree(dI), dfree(dT);
}

/* ids uniform in [0, idmax); the table holds rows [row0, row0 + rows) */
static void t_embedding(int T, int h, int64_t row0, int64_t rows, int64_t idmax)
{
	const size_t ny = (size_t)T * h, nt = (size_t)rows * h;
	const char *id = nm("embedding T=%d h=%d rows [%lld, %lld) ids < %lld", T, h, (long long)row0,
			    (long long)(row0 + rows), (long long)idmax);
	int32_t *ids = xmalloc((size_t)T * sizeof *ids);
	for (int t = 0; t < T; t++)
		ids[t] = (int32_t)((urand() + 1) / 2 * (double)idmax) % (int32_t)idmax;
	ids[0] = (int32_t)row0; /* the range's ends, in and out */
	if (T > 3) {
		ids[1] = (int32_t)(row0 + rows - 1);
		ids[2] = (int32_t)(row0 + rows < idmax ? row0 + rows : row0);
		ids[3] = (int32_t)(row0 > 0 ? row0 - 1 : row0);
	}
	float *table = hrand(nt, 1), *y0 = hrand(ny, 1), *dy = hrand(ny, 1), *dt0 = hrand(nt, 1);
	float *yc = xmalloc(ny * 4), *yac = hcopy(y0, ny), *dtc = hcopy(dt0, nt);
	C->embedding_fwd(cpu, yc, ids, table, row0, rows, T, h, false);
	C->embedding_fwd(cpu, yac, ids, table, row0, rows, T, h, true);
	C->embedding_bwd(cpu, dtc, dy, MGT_DT_F32, ids, row0, rows, T, h);
	embedding_bwd16(ids, dy, dt0, row0, rows, T, h);

	int32_t *dI = dputi(ids, T);
	float *dT = dput(table, nt), *dY = dalloc(ny * 4), *dYA = dalloc(ny * 4), *dDY = dput(dy, ny), *dDT = dalloc(nt * 4);
	float *y[2], *ya[2], *dt[2];
	for (int k = 0; k < 2; k++) {
		poison(dY, ny);
		up(dYA, y0, ny * 4);
		up(dDT, dt0, nt * 4);
		G->embedding_fwd(gpu, dY, dI, dT, row0, rows, T, h, false);
		G->embedding_fwd(gpu, dYA, dI, dT, row0, rows, T, h, true);
		G->embedding_bwd(gpu, dDT, dDY, MGT_DT_F32, dI, row0, rows, T, h);
		y[k] = dget(dY, ny);
		ya[k] = dget(dYA, ny);
		dt[k] = dget(dDT, nt);
	}
	cmp(nm("%s: fwd (writes; rows out of range 0)", id), y[0], yc, NULL, ny, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: fwd accumulate", id), ya[0], yac, NULL, ny, T2(TOL_EXACT, SIM_EXACT));
	/* the backward adds the rows of repeated ids in token order, as the CPU does */
	cmp(nm("%s: bwd dtable (accumulated)", id), dt[0], dtc, dt0, nt, T2(TOL32, SIM_EXACT));
	unsigned char *hit = xmalloc((size_t)rows);
	for (int t = 0; t < T; t++)
		if (ids[t] >= row0 && ids[t] < row0 + rows)
			hit[ids[t] - row0] = 1;
	size_t touched = 0;
	for (int64_t r = 0; r < rows; r++)
		if (!hit[r])
			touched += ndiff(dt[0] + (size_t)r * h, dt0 + (size_t)r * h, (size_t)h, 4);
	CHECK(touched == 0, "%s%s: bwd leaves rows without ids alone (%zu elements changed)", tag, id, touched);
	det(id, ndiff(y[0], y[1], ny, 4) + ndiff(ya[0], ya[1], ny, 4) + ndiff(dt[0], dt[1], nt, 4));
	for (int k = 0; k < 2; k++)
		free(y[k]), free(ya[k]), free(dt[k]);
	dfree(dI), dfree(dT), dfree(dY), dfree(dYA), dfree(dDY), dfree(dDT);
	free(ids), free(table), free(y0), free(dy), free(dt0), free(yc), free(yac), free(dtc), free(hit);
}

/* ================= normalization ================= */

static void t_norm(mgt_norm_kind kind, bool bias, int T, int h)
{
	const size_t n = (size_t)T * h;
	const char *id = nm("norm %s%s T=%d h=%d", kind == MGT_NORM_LAYERNORM ? "layernorm" : "rmsnorm",
			    bias ? " bias" : "", T, h);
	float *x = hrand(n, 2), *w = hrand(h, 0.5), *b = bias ? hrand(h, 1) : NULL;
	/* rows by t mod 5: ordinary (an offset, so that LayerNorm's mean matters); a small variance
	 * about an offset (below eps); a small mean square (near eps); a large magnitude with a small
	 * relative spread (cancellation in the variance); denormal-adjacent values */
	static const float off[5] = { 0.7f, 0.7f, 0.0f, 3000.0f, 0.0f }, sc[5] = { 1.0f, 5e-4f, 1.5e-3f, 5e-3f, 5e-38f };
	for (size_t i = 0; i < n; i++) {
		const int k = T >= 5 ? (int)(i / (size_t)h % 5) : 0;
		x[i] = off[k] + sc[k] * x[i];
	}
	for (int i = 0; i < h; i++)
		w[i] += 1.0f;
	float *yc = xmalloc(n * 4), *mc = xmalloc((size_t)T * 4), *rc = xmalloc((size_t)T * 4);
	C->norm_fwd(cpu, kind, yc, MGT_DT_F32, mc, rc, x, MGT_DT_F32, w, b, T, h, 1e-5f);
	float *dy = hrand(n, 1), *dx0 = hrand(n, 1), *dw0 = hrand(h, 1), *db0 = hrand(h, 1);
	float *dxc = hcopy(dx0, n), *dwc = hcopy(dw0, h), *dbc = hcopy(db0, h);
	/* the backward gets the CPU's mean and rstd on both sides: it is checked on its own */
	C->norm_bwd(cpu, kind, dxc, dwc, bias ? dbc : NULL, dy, MGT_DT_F32, x, MGT_DT_F32, w, mc, rc, T, h);

	float *dX = dput(x, n), *dW = dput(w, h), *dB = bias ? dput(b, h) : NULL, *dY = dalloc(n * 4);
	float *dM = dalloc((size_t)T * 4), *dR = dalloc((size_t)T * 4), *dMc = dput(mc, T), *dRc = dput(rc, T);
	float *dDY = dput(dy, n), *dDX = dalloc(n * 4), *dDW = dalloc((size_t)h * 4), *dDB = dalloc((size_t)h * 4);
	float *y[2], *m[2], *r[2], *dx[2], *dw[2], *db[2];
	for (int k = 0; k < 2; k++) {
		poison(dY, n);
		poison(dM, T);
		poison(dR, T);
		up(dDX, dx0, n * 4);
		up(dDW, dw0, (size_t)h * 4);
		up(dDB, db0, (size_t)h * 4);
		G->norm_fwd(gpu, kind, dY, MGT_DT_F32, dM, dR, dX, MGT_DT_F32, dW, dB, T, h, 1e-5f);
		G->norm_bwd(gpu, kind, dDX, dDW, bias ? dDB : NULL, dDY, MGT_DT_F32, dX, MGT_DT_F32, dW, dMc, dRc, T, h);
		y[k] = dget(dY, n);
		m[k] = dget(dM, T);
		r[k] = dget(dR, T);
		dx[k] = dget(dDX, n);
		dw[k] = dget(dDW, h);
		db[k] = dget(dDB, h);
	}
	cmp_rows(nm("%s: fwd y", id), y[0], yc, NULL, T, (size_t)h, T2(TOL32, SIM_ULP));
	cmp(nm("%s: fwd mean%s", id, kind == MGT_NORM_RMSNORM ? " (written as 0)" : ""), m[0], mc, NULL, T,
	    T2(TOL32, SIM_ULP));
	cmp(nm("%s: fwd rstd", id), r[0], rc, NULL, T, T2(TOL32, SIM_ULP));
	/* dx = rstd (g dy - x mean(g dy x) rstd^2 (- mean...)): the two terms cancel in part, so a row's
	 * fp32 error is u sqrt(h) times that cancellation; an H200 showed 1.26e-5 on one of 100 rows of
	 * h 512 (tests/bench/results/check-gpu-ops-nvidia-h200-20261127-2.txt), a wrong kernel 1e-3
	 * and more: 3e-5 */
	cmp_rows(nm("%s: bwd dx (accumulated)", id), dx[0], dxc, dx0, T, (size_t)h, T2(3e-5, SIM_ULP));
	cmp(nm("%s: bwd dw (accumulated)", id), dw[0], dwc, dw0, h, colsum_tol(T));
	if (bias)
		cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, h, colsum_tol(T));
	else
		CHECK(memcmp(db[0], db0, (size_t)h * 4) == 0, "%s%s: db NULL leaves db alone", tag, id);
	det(id, ndiff(y[0], y[1], n, 4) + ndiff(m[0], m[1], T, 4) + ndiff(r[0], r[1], T, 4) +
			ndiff(dx[0], dx[1], n, 4) + ndiff(dw[0], dw[1], h, 4) + ndiff(db[0], db[1], h, 4));
	void *dY16 = dalloc(n * 2);
	for (int k = 0; k < 2; k++) {
		mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		G->norm_fwd(gpu, kind, dY16, dt, dM, dR, dX, MGT_DT_F32, dW, dB, T, h, 1e-5f);
		t_out16(id, dY16, dt, y[0], n);
	}
	dfree(dY16);
	/* a 16-bit x (the residual stream under --bf16/--fp16) with its 16-bit gradient dx and a 16-bit
	 * dy: the bits of the op on their fp32 values, dx the rounding of the fp32 op's */
	for (int k = 0; k < 2; k++) {
		const mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		uint16_t *x16 = xmalloc(n * 2), *g16 = xmalloc(n * 2), *d16 = xmalloc(n * 2);
		float *xv = xmalloc(n * 4), *gv = xmalloc(n * 4), *dv = xmalloc(n * 4);
		C->cast(cpu, x16, dt, x, n), C->cast(cpu, g16, dt, dy, n), C->cast(cpu, d16, dt, dx0, n);
		for (size_t i = 0; i < n; i++) {
			xv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(x16[i]) : mgt_f16_to_f32(x16[i]);
			gv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(g16[i]) : mgt_f16_to_f32(g16[i]);
			dv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(d16[i]) : mgt_f16_to_f32(d16[i]);
		}
		void *dX16 = dalloc(n * 2), *dG16 = dalloc(n * 2), *dDX16 = dalloc(n * 2);
		float *dGv = dput(gv, n);
		up(dX16, x16, n * 2), up(dG16, g16, n * 2), up(dDX16, d16, n * 2);
		up(dX, xv, n * 4);
		float *o[2][5], *dx32 = NULL;
		for (int v = 0; v < 2; v++) {
			up(dDX, dv, n * 4), up(dDW, dw0, (size_t)h * 4), up(dDB, db0, (size_t)h * 4);
			const void *xx = v ? dX16 : (const void *)dX;
			const mgt_elem_type xt = v ? dt : MGT_DT_F32;
			G->norm_fwd(gpu, kind, dY, MGT_DT_F32, dM, dR, xx, xt, dW, dB, T, h, 1e-5f);
			G->norm_bwd(gpu, kind, v ? dDX16 : (void *)dDX, dDW, bias ? dDB : NULL, v ? dG16 : (const void *)dGv, xt,
				    xx, xt, dW, dMc, dRc, T, h);
			o[v][0] = dget(dY, n), o[v][1] = dget(dM, T), o[v][2] = dget(dR, T);
			o[v][3] = dget(dDW, h), o[v][4] = dget(dDB, h);
			if (!v)
				dx32 = dget(dDX, n);
		}
		const size_t len[5] = { n, (size_t)T, (size_t)T, (size_t)h, (size_t)h };
		size_t nd = 0;
		for (int q = 0; q < 5; q++) nd += ndiff(o[0][q], o[1][q], len[q], 4);
		CHECK(nd == 0, "%s%s: a %s x and dy give the bits of their fp32 values, forward and backward (%zu differ)", tag,
		      id, k ? "fp16" : "bf16", nd);
		t_out16(nm("%s: bwd dx accumulated into a 16-bit dx", id), dDX16, dt, dx32, n);
		for (int v = 0; v < 2; v++)
			for (int q = 0; q < 5; q++) free(o[v][q]);
		free(x16), free(g16), free(d16), free(xv), free(gv), free(dv), free(dx32);
		dfree(dX16), dfree(dG16), dfree(dDX16), dfree(dGv);
	}
	for (int k = 0; k < 2; k++)
		free(y[k]), free(m[k]), free(r[k]), free(dx[k]), free(dw[k]), free(db[k]);
	dfree(dX), dfree(dW), dfree(dB), dfree(dY), dfree(dM), dfree(dR), dfree(dMc), dfree(dRc);
	dfree(dDY), dfree(dDX), dfree(dDW), dfree(dDB);
	free(x), free(w), free(b), free(yc), free(mc), free(rc), free(dy), free(dx0), free(dw0), free(db0);
	free(dxc), free(dwc), free(dbc);
}

/* The query (key == false) or key heads of qkv [T, ng, r+2, d] (head_norm_fwd / head_norm_bwd):
 * rows at the same offsets as the CPU op's; the backward in place (dx aliases dy), as the model
 * calls it; everything else untouched. */
static void t_head_norm(mgt_norm_kind kind, bool key, bool bias, int T, int ng, int r, int d)
{
	const size_t n = (size_t)T * ng * (r + 2) * d, rows = (size_t)T * ng * (key ? 1 : r);
	const char *id = nm("head_norm %s %s%s T=%d ng=%d r=%d d=%d", kind == MGT_NORM_LAYERNORM ? "layernorm" : "rmsnorm",
			    key ? "key" : "query", bias ? " bias" : "", T, ng, r, d);
	float *x = hrand(n, 2), *w = hrand(d, 0.5), *b = bias ? hrand(d, 1) : NULL;
	for (size_t i = 0; i < n; i++)
		x[i] += 0.3f;
	for (int i = 0; i < d; i++)
		w[i] += 1.0f;
	float *y0 = hrand(n, 1), *yc = hcopy(y0, n), *mc = xmalloc(rows * 4), *rc = xmalloc(rows * 4);
	C->head_norm_fwd(cpu, kind, yc, MGT_DT_F32, mc, rc, x, w, b, T, ng, r, d, key, 1e-6f);
	float *g0 = hrand(n, 1), *gc = hcopy(g0, n), *dw0 = hrand(d, 1), *db0 = hrand(d, 1);
	float *dwc = hcopy(dw0, d), *dbc = hcopy(db0, d);
	C->head_norm_bwd(cpu, kind, gc, dwc, bias ? dbc : NULL, gc, MGT_DT_F32, x, w, mc, rc, T, ng, r, d, key);
	float *dX = dput(x, n), *dW = dput(w, d), *dB = bias ? dput(b, d) : NULL, *dY = dalloc(n * 4);
	float *dM = dalloc(rows * 4), *dR = dalloc(rows * 4), *dMc = dput(mc, rows), *dRc = dput(rc, rows);
	float *dG = dalloc(n * 4), *dDW = dalloc((size_t)d * 4), *dDB = dalloc((size_t)d * 4);
	float *y[2], *m[2], *rs[2], *gg[2], *dw[2], *db[2];
	for (int k = 0; k < 2; k++) {
		up(dY, y0, n * 4);
		poison(dM, rows);
		poison(dR, rows);
		up(dG, g0, n * 4);
		up(dDW, dw0, (size_t)d * 4);
		up(dDB, db0, (size_t)d * 4);
		G->head_norm_fwd(gpu, kind, dY, MGT_DT_F32, dM, dR, dX, dW, dB, T, ng, r, d, key, 1e-6f);
		G->head_norm_bwd(gpu, kind, dG, dDW, bias ? dDB : NULL, dG, MGT_DT_F32, dX, dW, dMc, dRc, T, ng, r, d, key);
		y[k] = dget(dY, n);
		m[k] = dget(dM, rows);
		rs[k] = dget(dR, rows);
		gg[k] = dget(dG, n);
		dw[k] = dget(dDW, d);
		db[k] = dget(dDB, d);
	}
	/* rows other than the selected heads keep their bits: compared exactly within the whole */
	cmp(nm("%s: fwd y (other rows untouched)", id), y[0], yc, NULL, n, T2(TOL32, SIM_ULP));
	cmp(nm("%s: fwd mean", id), m[0], mc, NULL, rows, T2(TOL32, SIM_ULP));
	cmp(nm("%s: fwd rstd", id), rs[0], rc, NULL, rows, T2(TOL32, SIM_ULP));
	cmp(nm("%s: bwd dx in place (other rows untouched)", id), gg[0], gc, NULL, n, T2(TOL32, SIM_ULP));
	cmp(nm("%s: bwd dw (accumulated)", id), dw[0], dwc, dw0, d, colsum_tol((int)rows));
	if (bias)
		cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, d, colsum_tol((int)rows));
	size_t moved = 0;
	for (size_t i = 0; i < n; i++) {
		size_t row = i / (size_t)d, m_ = row % (size_t)(r + 2);
		bool sel = key ? m_ == (size_t)r : m_ < (size_t)r;
		if (!sel && (memcmp(&y[0][i], &y0[i], 4) || memcmp(&gg[0][i], &g0[i], 4)))
			moved++;
	}
	CHECK(moved == 0, "%s%s: other heads untouched (%zu changed)", tag, id, moved);
	/* a 16-bit y (the model's qkv under --bf16/--fp16): the selected rows rounded, the others kept */
	for (int k = 0; k < 2; k++) {
		const mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		void *dY16 = dalloc(n * 2);
		uint16_t *y016 = xmalloc(n * 2);
		C->cast(cpu, y016, dt, y0, n);
		up(dY16, y016, n * 2);
		G->head_norm_fwd(gpu, kind, dY16, dt, dM, dR, dX, dW, dB, T, ng, r, d, key, 1e-6f);
		float *yr = hcopy(y[0], n);
		for (size_t i = 0; i < n; i++) /* the unselected rows: y0's rounded values, as uploaded */
			if (memcmp(&y[0][i], &y0[i], 4) == 0)
				yr[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(y016[i]) : mgt_f16_to_f32(y016[i]);
		t_out16(nm("%s: 16-bit y", id), dY16, dt, yr, n);
		/* the backward in place on a 16-bit gradient: the fp32 backward of its values, rounded
		 * (the unselected rows keep their bits); dw and db the same bits */
		void *dG16;
		float *dGv = dput16(g0, n, dt, &dG16);
		float *dw16 = dput(dw0, d), *db16 = dput(db0, d), *dwv = dput(dw0, d), *dbv = dput(db0, d);
		G->head_norm_bwd(gpu, kind, dG16, dw16, bias ? db16 : NULL, dG16, dt, dX, dW, dMc, dRc, T, ng, r, d, key);
		G->head_norm_bwd(gpu, kind, dGv, dwv, bias ? dbv : NULL, dGv, MGT_DT_F32, dX, dW, dMc, dRc, T, ng, r, d, key);
		float *gv = dget(dGv, n), *a1 = dget(dw16, d), *a2 = dget(dwv, d), *b1 = dget(db16, d), *b2 = dget(dbv, d);
		t_out16(nm("%s: bwd in place on a 16-bit gradient", id), dG16, dt, gv, n);
		CHECK(ndiff(a1, a2, d, 4) == 0 && ndiff(b1, b2, d, 4) == 0, "%s%s: %s bwd dw, db the bits of the fp32 values'",
		      tag, id, dt == MGT_DT_BF16 ? "bf16" : "fp16");
		free(gv), free(a1), free(a2), free(b1), free(b2);
		dfree(dG16), dfree(dGv), dfree(dw16), dfree(db16), dfree(dwv), dfree(dbv);
		free(yr), free(y016), dfree(dY16);
	}
	det(id, ndiff(y[0], y[1], n, 4) + ndiff(m[0], m[1], rows, 4) + ndiff(rs[0], rs[1], rows, 4) +
			ndiff(gg[0], gg[1], n, 4) + ndiff(dw[0], dw[1], d, 4) + ndiff(db[0], db[1], d, 4));
	for (int k = 0; k < 2; k++)
		free(y[k]), free(m[k]), free(rs[k]), free(gg[k]), free(dw[k]), free(db[k]);
	dfree(dX), dfree(dW), dfree(dB), dfree(dY), dfree(dM), dfree(dR), dfree(dMc), dfree(dRc);
	dfree(dG), dfree(dDW), dfree(dDB);
	free(x), free(w), free(b), free(y0), free(yc), free(mc), free(rc), free(g0), free(gc), free(dw0);
	free(db0), free(dwc), free(dbc);
}

/* ================= RoPE ================= */

static void t_rope(int T, int ng, int r, int d, int rot, float base, bool scaled)
{
	const size_t n = (size_t)T * ng * (r + 2) * d;
	const char *id = nm("rope T=%d ng=%d r=%d d=%d rot_dim=%d base=%g%s", T, ng, r, d, rot, base,
			    scaled ? " llama3.1-scaled" : "");
	int32_t *pos = xmalloc((size_t)T * sizeof *pos);
	for (int t = 0; t < T; t++) /* positions as long sequences have them (up to 8191) */
		pos[t] = (int32_t)((urand() + 1) * 4096) % 8192;
	pos[0] = 0;
	float *x = hrand(n, 1), *g = hrand(n, 1);
	float *xc = hcopy(x, n), *gc = hcopy(g, n), *inv = xmalloc((size_t)(rot / 2) * sizeof *inv);
	/* the model's table: 1 / base^(2k / rot_dim), Llama 3.1-scaled when scaled (lib/model) */
	mgt_model_config mc;
	memset(&mc, 0, sizeof mc);
	mc.kv_channels = rot;
	mc.rotary_percent = 1.0;
	mc.rotary_base = base;
	mc.use_rope_scaling = scaled;
	mc.rope_scaling_factor = 8;
	mc.rope_scaling_low_freq_factor = 1;
	mc.rope_scaling_high_freq_factor = 4;
	mc.rope_scaling_original_max_position_embeddings = 8192;
	mgt_model_rope_inv_freq(&mc, inv);
	C->rope(cpu, xc, MGT_DT_F32, pos, inv, T, ng, r, d, rot, false);
	C->rope(cpu, gc, MGT_DT_F32, pos, inv, T, ng, r, d, rot, true);
	int32_t *dP = dputi(pos, T);
	float *dI = dput(inv, (size_t)(rot / 2));
	float *dQ = dalloc(n * 4), *dG = dalloc(n * 4);
	float *q[2], *gg[2];
	for (int k = 0; k < 2; k++) {
		up(dQ, x, n * 4);
		up(dG, g, n * 4);
		G->rope(gpu, dQ, MGT_DT_F32, dP, dI, T, ng, r, d, rot, false);
		G->rope(gpu, dG, MGT_DT_F32, dP, dI, T, ng, r, d, rot, true);
		q[k] = dget(dQ, n);
		gg[k] = dget(dG, n);
	}
	cmp(nm("%s: forward", id), q[0], xc, NULL, n, T2(TOL32, SIM_ULP));
	cmp(nm("%s: inverse (backward)", id), gg[0], gc, NULL, n, T2(TOL32, SIM_ULP));
	size_t changed = 0; /* value heads and channels past rot_dim: untouched */
	for (int t = 0; t < T; t++)
		for (int gr = 0; gr < ng; gr++)
			for (int m = 0; m < r + 2; m++)
				for (int c = 0; c < d; c++) {
					size_t i = (((size_t)t * ng + gr) * (r + 2) + m) * d + c;
					if ((m == r + 1 || c >= rot) && (memcmp(&q[0][i], &x[i], 4) || memcmp(&gg[0][i], &g[i], 4)))
						changed++;
				}
	CHECK(changed == 0, "%s%s: value heads and channels past rot_dim untouched (%zu changed)", tag, id, changed);
	det(id, ndiff(q[0], q[1], n, 4) + ndiff(gg[0], gg[1], n, 4));
	/* 16-bit qkv (the model's under --bf16/--fp16): the rounding of the fp32 rotation of its values */
	for (int k = 0; k < 2; k++) {
		const mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		uint16_t *x16 = xmalloc(n * 2);
		C->cast(cpu, x16, dt, x, n);
		for (size_t i = 0; i < n; i++) xc[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(x16[i]) : mgt_f16_to_f32(x16[i]);
		void *dX16 = dalloc(n * 2);
		up(dX16, x16, n * 2);
		up(dQ, xc, n * 4);
		G->rope(gpu, dQ, MGT_DT_F32, dP, dI, T, ng, r, d, rot, false);
		G->rope(gpu, dX16, dt, dP, dI, T, ng, r, d, rot, false);
		float *y = dget(dQ, n);
		t_out16(nm("%s: 16-bit qkv", id), dX16, dt, y, n);
		free(y), free(x16), dfree(dX16);
	}
	for (int k = 0; k < 2; k++)
		free(q[k]), free(gg[k]);
	dfree(dP), dfree(dQ), dfree(dG), dfree(dI);
	free(pos), free(x), free(g), free(xc), free(gc), free(inv);
}

/* ================= attention ================= */

/* qkv uniform in [-scale, scale): scores have a standard deviation of about scale^2 / 3 * sqrt(d)
 * / sqrt(d); scale 4 makes the softmax peaked. */
/* Under --bf16/--fp16 the CUDA backend runs attention on tensor cores (Q, K, V, P and dS rounded,
 * fp32 softmax and accumulation; kernels/attn_tc.cu), the CPU in fp32: bounds from the rounding
 * (measured in the simulator: bf16 out 3e-3, dqkv 6e-3; fp16 about ten times less). */
/* Under the simulator the mma.sync products are exact and summed in fp32 (no tensor-core
 * truncation), so only the operand rounding remains: measured bf16 out and dqkv 2.3e-3..3.6e-3,
 * lse 1.5e-4..2.5e-4, fp16 about 8x less; the bounds below are about 1.7x and 2.5x those.  lse:
 * whether the check is of the log-sum-exp (a sum of s exponentials, 10x smaller errors). */
static tol2 attn_tol(mgt_precision prec, double fp32_tol, bool lse)
{
	if (prec == MGT_PREC_BF16)
		return T2(1.5e-2, lse ? 6e-4 : 6e-3);
	if (prec == MGT_PREC_FP16)
		return T2(2e-3, lse ? 8e-5 : 8e-4);
	return T2(fp32_tol, SIM_ATTN);
}

/* lse arrays with -inf rows (no visible key): the same rows -inf on both sides, the rest compared
 * as cmp does. */
static void cmp_lse(const char *what, const float *g, const float *c, size_t n, tol2 t)
{
	size_t k = 0, ninf = 0;
	float *gz = hcopy(g, n), *cz = hcopy(c, n);
	for (size_t i = 0; i < n; i++) {
		const bool gi = g[i] == -INFINITY, ci = c[i] == -INFINITY;
		k += gi != ci;
		ninf += ci;
		if (gi && ci)
			gz[i] = cz[i] = 0.0f;
	}
	CHECK(k == 0, "%s%s: -inf (no visible key) where the reference has it (%zu of %zu, %zu differ)", tag, what,
	      ninf, n, k);
	cmp(what, gz, cz, NULL, n, t);
	free(gz), free(cz);
}

/* A key padding mask (backend.h attn_fwd) for b sequences of s positions, element i*b + j, 1
 * visible: sequence 0 all masked, 1 only position 0 visible, 2 its first s/2 + 1 positions (BERT's
 * padding at the end), the others random (about 3 in 4 visible). */
static uint8_t *attn_mask(int s, int b)
{
	uint8_t *km = xmalloc((size_t)s * b);
	for (int i = 0; i < s; i++)
		for (int j = 0; j < b; j++)
			km[(size_t)i * b + j] =
				(uint8_t)(j == 0 ? 0 : j == 1 ? i == 0 : j == 2 ? i <= s / 2 : urand() > -0.5);
	return km;
}

/* Under key mask km: the elements that must be exactly 0 and are not, or are not finite: out
 * [s*b, H, d] and dqkv [s*b, ng, r + 2, d] of sequence 0 (no visible key) and the key and value
 * gradients of every masked key. */
static size_t mask_zero_bad(const float *o, const float *dq, const uint8_t *km, int s, int b, int ng, int r, int d)
{
	size_t bad = 0;
	const size_t ho = (size_t)ng * r * d, hq = (size_t)ng * (r + 2) * d;
	for (int i = 0; i < s; i++)
		for (int j = 0; j < b; j++) {
			const size_t t = (size_t)i * b + j;
			for (size_t e = 0; e < ho; e++)
				bad += !isfinite(o[t * ho + e]) || (j == 0 && o[t * ho + e] != 0.0f);
			for (size_t e = 0; e < hq; e++) {
				const bool kv = (int)(e / d % (size_t)(r + 2)) >= r;
				bad += !isfinite(dq[t * hq + e]) || ((j == 0 || (kv && !km[t])) && dq[t * hq + e] != 0.0f);
			}
		}
	return bad;
}

/* The backward's bound, 1.5x the causal one under the simulator with a key mask and 16-bit
 * operands: a row that sees one key (attn_mask's sequence 1) has dS = P (dP - D) = 0 exactly, and
 * the kernels' dP from rounded dO and V minus the fp32 D leaves their rounding there (measured over
 * 5 seeds: bf16 2.7e-3..5.4e-3, fp16 3.5e-4..5.7e-4; causal: attn_tol). */
static tol2 attn_bwd_tol(mgt_precision prec, bool masked)
{
	tol2 t = attn_tol(prec, TOL_ATTN_BWD, false);
	if (masked && prec != MGT_PREC_FP32)
		t.sim *= 1.5;
	return t;
}

/* masked: under attn_mask's key padding mask (the device gets a copy), the lse rows without a
 * visible key -inf on both sides, and sequence 0's out and every gradient of it and of the masked
 * keys exactly 0 on the GPU. */
static void t_attn_prec(mgt_precision prec, int s, int b, int ng, int r, int d, float p, int head0, int htot,
			double scale, bool masked)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const char *id = nm("attn %s s=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d%s%s", precname(prec), s, b, ng, r, d,
			    p, head0, htot, scale > 2 ? " peaked" : scale < 1e-3 ? " denormal-adjacent" : "",
			    masked ? " key-mask" : "");
	gpu->precision = prec;
	uint64_t key = rng ^ 0x5DEECE66Dull;
	uint8_t *km = masked ? attn_mask(s, b) : NULL, *dKM = masked ? dalloc((size_t)T) : NULL;
	if (masked)
		up(dKM, km, (size_t)T);
	float *qkv = hrand(nq, scale), *dout = hrand(no, 1);
	float *oc = xmalloc(no * 4), *lc = xmalloc(nl * 4), *dqc = xmalloc(nq * 4);
	at_attn_fwd(cpu, oc, lc, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, htot, km);
	/* the backward gets the CPU's out and lse on both sides: it is checked on its own */
	at_attn_bwd(cpu, dqc, dout, MGT_DT_F32, qkv, oc, MGT_DT_F32, lc, s, b, ng, r, d, p, key, head0, htot, km);
	float *dQ = dput(qkv, nq), *dO = dalloc(no * 4), *dL = dalloc(nl * 4), *dOc = dput(oc, no), *dLc = dput(lc, nl);
	float *dDO = dput(dout, no), *dDQ = dalloc(nq * 4);
	float *o[2], *l[2], *dq[2];
	for (int k = 0; k < 2; k++) {
		poison(dO, no);
		poison(dL, nl);
		poison(dDQ, nq);
		at_attn_fwd(gpu, dO, dL, dQ, MGT_DT_F32, s, b, ng, r, d, p, key, head0, htot, dKM);
		at_attn_bwd(gpu, dDQ, dDO, MGT_DT_F32, dQ, dOc, MGT_DT_F32, dLc, s, b, ng, r, d, p, key, head0, htot, dKM);
		o[k] = dget(dO, no);
		l[k] = dget(dL, nl);
		dq[k] = dget(dDQ, nq);
	}
	gpu->precision = MGT_PREC_FP32;
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, no, attn_tol(prec, lin_tol_gpu(MGT_PREC_FP32, s), false)); /* sums of s terms */
	if (masked)
		cmp_lse(nm("%s: fwd lse", id), l[0], lc, nl, attn_tol(prec, TOL32, true));
	else
		cmp(nm("%s: fwd lse", id), l[0], lc, NULL, nl, attn_tol(prec, TOL32, true));
	cmp(nm("%s: bwd dqkv", id), dq[0], dqc, NULL, nq, attn_bwd_tol(prec, masked));
	if (masked) {
		const size_t zb = mask_zero_bad(o[0], dq[0], km, s, b, ng, r, d);
		CHECK(zb == 0, "%s%s: out and gradients of sequence 0 (no key) and of the masked keys exactly 0, "
		      "all finite (%zu not)", tag, id, zb);
	}
	det(id, ndiff(o[0], o[1], no, 4) + ndiff(l[0], l[1], nl, 4) + ndiff(dq[0], dq[1], nq, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(dq[k]);
	dfree(dQ), dfree(dO), dfree(dL), dfree(dOc), dfree(dLc), dfree(dDO), dfree(dDQ), dfree(dKM);
	free(qkv), free(dout), free(oc), free(lc), free(dqc), free(km);
}

static void t_attn(int s, int b, int ng, int r, int d, float p, int head0, int htot, double scale)
{
	t_attn_prec(MGT_PREC_FP32, s, b, ng, r, d, p, head0, htot, scale, false);
}

/* The fp32 kernels under a key padding mask (BERT's bidirectional attention). */
static void t_attn_mask(int s, int b, int ng, int r, int d, float p, int head0, int htot)
{
	t_attn_prec(MGT_PREC_FP32, s, b, ng, r, d, p, head0, htot, 1.5, true);
}

/* T5's relative position bias (backend.h attn_bias_fwd / attn_bias_bwd; kernels/attn.cuh BIAS)
 * against the CPU op, causal or under attn_mask's key padding mask: bias [2 s - 1, htot] random,
 * dbias starting from random values (its increments compared), out, lse, dqkv and dbias within
 * the fp32 attention's bounds (the CUDA backend runs the fp32 kernels in every precision: a
 * tensor-core kernel would miss SIM_ATTN by 1000x); the columns of dbias outside this rank's heads
 * head0..head0 + H - 1, and when causal the distances after the diagonal (no score has them), keep
 * the start's bits; every output the same bits on a second run.  Under prec bf16/fp16 the inputs
 * are 16-bit values and the op also runs on 16-bit qkv, out, dout and dqkv (the model's storage,
 * converted through scratch): its out and dqkv are the fp32 run's rounded and its lse and dbias
 * the fp32 run's bits.  The backward gets the CPU's out (rounded to the 16-bit type under
 * bf16/fp16) and lse on every side. */
static void t_attn_bias(mgt_precision prec, int s, int b, int ng, int r, int d, float p, int head0, int htot,
			bool masked)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const size_t nb = (size_t)(2 * s - 1) * htot;
	const bool lp = prec != MGT_PREC_FP32;
	const mgt_elem_type dt = lp ? mgt_precision_dtype(prec) : MGT_DT_F32;
	const char *id = nm("attn_bias %s s=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d%s", precname(prec), s, b, ng, r,
			    d, p, head0, htot, masked ? " key-mask" : " causal");
	uint64_t key = rng ^ 0x2545F4914F6CDD1Dull;
	uint8_t *km = masked ? attn_mask(s, b) : NULL, *dKM = masked ? dalloc((size_t)T) : NULL;
	if (masked)
		up(dKM, km, (size_t)T);
	float *qkv = hrand(nq, 1.5), *dout = hrand(no, 1), *bias = hrand(nb, 2), *db0 = hrand(nb, 0.1);
	void *dQ16 = NULL, *dDO16 = NULL, *dOb16 = NULL;
	float *dQ = lp ? dput16(qkv, nq, dt, &dQ16) : dput(qkv, nq), *dDO = lp ? dput16(dout, no, dt, &dDO16) : dput(dout, no);
	if (lp) { /* the CPU gets the 16-bit values too */
		free(qkv), free(dout);
		qkv = dget(dQ, nq), dout = dget(dDO, no);
	}
	float *oc = xmalloc(no * 4), *lc = xmalloc(nl * 4), *dqc = xmalloc(nq * 4), *dbc = hcopy(db0, nb);
	at_attn_bias_fwd(cpu, oc, lc, qkv, MGT_DT_F32, s, b, ng, r, d, p, key, head0, htot, km, bias);
	float *dOb = lp ? dput16(oc, no, dt, &dOb16) : dput(oc, no), *ob = lp ? dget(dOb, no) : hcopy(oc, no);
	at_attn_bias_bwd(cpu, dqc, dout, MGT_DT_F32, qkv, ob, MGT_DT_F32, lc, s, b, ng, r, d, p, key, head0, htot, km,
			 bias, dbc);
	gpu->precision = prec;
	float *dB = dput(bias, nb), *dDB = dalloc(nb * 4), *dO = dalloc(no * 4), *dL = dalloc(nl * 4);
	float *dLc = dput(lc, nl), *dDQ = dalloc(nq * 4);
	float *o[2], *l[2], *dq[2], *db[2];
	for (int k = 0; k < 2; k++) {
		poison(dO, no);
		poison(dL, nl);
		poison(dDQ, nq);
		up(dDB, db0, nb * 4);
		at_attn_bias_fwd(gpu, dO, dL, dQ, MGT_DT_F32, s, b, ng, r, d, p, key, head0, htot, dKM, dB);
		at_attn_bias_bwd(gpu, dDQ, dDO, MGT_DT_F32, dQ, dOb, MGT_DT_F32, dLc, s, b, ng, r, d, p, key, head0, htot,
				 dKM, dB, dDB);
		o[k] = dget(dO, no);
		l[k] = dget(dL, nl);
		dq[k] = dget(dDQ, nq);
		db[k] = dget(dDB, nb);
	}
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, no, T2(lin_tol_gpu(MGT_PREC_FP32, s), SIM_ATTN));
	if (masked)
		cmp_lse(nm("%s: fwd lse", id), l[0], lc, nl, T2(TOL32, SIM_ATTN));
	else
		cmp(nm("%s: fwd lse", id), l[0], lc, NULL, nl, T2(TOL32, SIM_ATTN));
	cmp(nm("%s: bwd dqkv", id), dq[0], dqc, NULL, nq, T2(TOL_ATTN_BWD, SIM_ATTN));
	cmp(nm("%s: bwd dbias (increments)", id), db[0], dbc, db0, nb, T2(TOL_ATTN_BIAS, SIM_ATTN_BIAS));
	size_t touched = 0;
	for (int x = 0; x < 2 * s - 1; x++)
		for (int h = 0; h < htot; h++) {
			const size_t i = (size_t)x * htot + h;
			touched += (h < head0 || h >= head0 + H || (!masked && x > s - 1)) && memcmp(&db[0][i], &db0[i], 4);
		}
	CHECK(touched == 0, "%s%s: dbias of other ranks' heads%s keeps its bits (%zu changed)", tag, id,
	      masked ? "" : " and of distances after the diagonal", touched);
	if (masked) {
		const size_t zb = mask_zero_bad(o[0], dq[0], km, s, b, ng, r, d);
		CHECK(zb == 0, "%s%s: out and gradients of sequence 0 (no key) and of the masked keys exactly 0, "
		      "all finite (%zu not)", tag, id, zb);
	}
	det(id, ndiff(o[0], o[1], no, 4) + ndiff(l[0], l[1], nl, 4) + ndiff(dq[0], dq[1], nq, 4) +
		ndiff(db[0], db[1], nb, 4));
	if (lp) { /* 16-bit storage: the fp32 run's results, rounded */
		void *dO16 = dalloc(no * 2), *dDQ16 = dalloc(nq * 2);
		poison(dL, nl);
		up(dDB, db0, nb * 4);
		at_attn_bias_fwd(gpu, dO16, dL, dQ16, dt, s, b, ng, r, d, p, key, head0, htot, dKM, dB);
		at_attn_bias_bwd(gpu, dDQ16, dDO16, dt, dQ16, dOb16, dt, dLc, s, b, ng, r, d, p, key, head0, htot, dKM, dB,
				 dDB);
		float *l16 = dget(dL, nl), *db16 = dget(dDB, nb);
		t_out16(nm("%s: 16-bit out", id), dO16, dt, o[0], no);
		t_out16(nm("%s: 16-bit dqkv", id), dDQ16, dt, dq[0], nq);
		CHECK(ndiff(l16, l[0], nl, 4) == 0 && ndiff(db16, db[0], nb, 4) == 0,
		      "%s%s: 16-bit qkv, out and dout: lse and dbias the bits of the fp32 run's", tag, id);
		free(l16), free(db16), dfree(dO16), dfree(dDQ16);
	}
	gpu->precision = MGT_PREC_FP32;
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(dq[k]), free(db[k]);
	dfree(dQ), dfree(dDO), dfree(dOb), dfree(dB), dfree(dDB), dfree(dO), dfree(dL), dfree(dLc), dfree(dDQ), dfree(dKM);
	dfree(dQ16), dfree(dDO16), dfree(dOb16);
	free(km), free(qkv), free(dout), free(bias), free(db0), free(oc), free(lc), free(dqc), free(dbc), free(ob);
}

/* Document starts for b sequences of s positions (element i*b + j): sequence 0 one document, 1
 * one-token documents, 2 documents starting where i % 128 is 0, 31, 63 or 96 (at the 64-row tiles'
 * boundaries, one row before them, and at the dK/dV kernels' 32-row query tiles of DM 128), the
 * others random lengths up to maxlen. */
static int32_t *packed_starts(int s, int b, int maxlen)
{
	int32_t *seg = xmalloc((size_t)s * b * sizeof *seg);
	for (int j = 0; j < b; j++)
		for (int i = 0, start = 0, left = 0; i < s; i++) {
			const int m = i % 128;
			if (j == 2 && (m == 0 || m == 31 || m == 63 || m == 96))
				start = i;
			else if (j > 2 && left == 0)
				start = i, left = 1 + (int)((urand() + 1) * 0.5 * maxlen) % maxlen;
			else if (j == 1)
				start = i;
			seg[(size_t)i * b + j] = start;
			left -= j > 2;
		}
	return seg;
}

/* Packed sequences (backend.h mgt_attn.seg_start: Megatron's THD cu_seqlens, --sft and
 * --reset-attention-mask) against the CPU op in fp32, on the backend's kernels of precision prec
 * (fp32: the CUDA-core ones; bf16/fp16: the tensor-core ones, which skip the key tiles before the
 * documents as the fp32 ones do), document starts of packed_starts (across the 64-row tiles,
 * shorter than a tile, at a tile's first row); out, lse and dqkv within the bounds of the
 * unpacked checks of that precision (attn_tol; the backward's under a key mask, the one-token
 * documents' rows seeing one key), lse's twice that on tensor cores (a short document's lse is the
 * log of a few exponentials, near its largest score, which carries the operands' rounding: under
 * the simulator bf16 3.6e-4..6.1e-4, fp16 4.5e-5..8.0e-5 over 3 seeds, the shortest documents
 * highest), the same bits on a second run. */
static void t_attn_packed(mgt_precision prec, int s, int b, int ng, int r, int d, float p, int maxlen)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const char *id = nm("attn packed %s s=%d b=%d ng=%d r=%d d=%d p=%g docs<=%d", precname(prec), s, b, ng, r, d, p,
			    maxlen);
	uint64_t key = rng ^ 0x9E3779B97F4A7C15ull;
	int32_t *seg = packed_starts(s, b, maxlen);
	float *qkv = hrand(nq, 1.5), *dout = hrand(no, 1);
	float *oc = xmalloc(no * 4), *lc = xmalloc(nl * 4), *dqc = xmalloc(nq * 4);
	mgt_attn a = at_self(MGT_DT_F32, MGT_DT_F32, s, b, ng, r, d, p, key, 0, H, NULL, NULL, NULL);
	a.seg_start = seg;
	cpu->ops->attn_forward(cpu, &a, oc, lc, qkv, NULL);
	cpu->ops->attn_backward(cpu, &a, dqc, NULL, dout, qkv, NULL, oc, lc);
	int32_t *dSeg = dalloc((size_t)T * sizeof *dSeg);
	up(dSeg, seg, (size_t)T * sizeof *seg);
	a.seg_start = dSeg;
	float *dQ = dput(qkv, nq), *dO = dalloc(no * 4), *dL = dalloc(nl * 4), *dOc = dput(oc, no), *dLc = dput(lc, nl);
	float *dDO = dput(dout, no), *dDQ = dalloc(nq * 4);
	float *o[2], *l[2], *dq[2];
	gpu->precision = prec;
	for (int k = 0; k < 2; k++) {
		poison(dO, no);
		poison(dL, nl);
		poison(dDQ, nq);
		gpu->ops->attn_forward(gpu, &a, dO, dL, dQ, NULL);
		gpu->ops->attn_backward(gpu, &a, dDQ, NULL, dDO, dQ, NULL, dOc, dLc);
		o[k] = dget(dO, no);
		l[k] = dget(dL, nl);
		dq[k] = dget(dDQ, nq);
	}
	gpu->precision = MGT_PREC_FP32;
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, no, attn_tol(prec, lin_tol_gpu(MGT_PREC_FP32, s), false));
	tol2 tl = attn_tol(prec, TOL32, true);
	if (prec != MGT_PREC_FP32)
		tl.sim *= 2;
	cmp(nm("%s: fwd lse", id), l[0], lc, NULL, nl, tl);
	cmp(nm("%s: bwd dqkv", id), dq[0], dqc, NULL, nq, attn_bwd_tol(prec, true));
	det(id, ndiff(o[0], o[1], no, 4) + ndiff(l[0], l[1], nl, 4) + ndiff(dq[0], dq[1], nq, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(dq[k]);
	dfree(dQ), dfree(dO), dfree(dL), dfree(dOc), dfree(dLc), dfree(dDO), dfree(dDQ), dfree(dSeg);
	free(seg), free(qkv), free(dout), free(oc), free(lc), free(dqc);
}

/* Packed sequences on the tensor-core kernels, bf16 and fp16: GQA, dropout, several key tiles
 * (tiles skipped), DM 128 (32-row backward tiles), d padded (48: no cp.async), the mma-nocp
 * staging. */
static void t_attn_packed_tc(bool small)
{
	for (mgt_precision pr = MGT_PREC_BF16; pr <= MGT_PREC_FP16; pr++) {
		t_attn_packed(pr, small ? 200 : 1000, 4, 1, 2, 64, 0.1f, small ? 20 : 300);
		t_attn_packed(pr, small ? 130 : 513, 4, 2, 2, 128, 0.0f, small ? 40 : 100);
		t_attn_packed(pr, small ? 33 : 130, 4, 1, 2, 128, 0.1f, 9);
		t_attn_packed(pr, small ? 70 : 300, 5, 1, 3, 48, 0.1f, small ? 9 : 70);
	}
	setenv("MGT_ATTN_KERNEL", "mma-nocp", 1);
	tag = "[mma-nocp] ";
	t_attn_packed(MGT_PREC_BF16, small ? 200 : 1000, 4, 1, 2, 64, 0.1f, small ? 20 : 300);
	tag = "";
	unsetenv("MGT_ATTN_KERNEL");
}

/* attn_kv (kernels/attn_kv.cu): a cache of B sequences of S positions; a prefill call with
 * sequence b's first len_b = 1 + (b * 7) % (S - 1) positions (tokens of the sequences
 * interleaved), then a decode call of one token per sequence at position len_b.  Outputs of both
 * calls and the caches against the CPU op; the caches are copies (exact).  bias: with T5's
 * relative position bias [2 S - 1, ng*r] (random values). */
static void t_attn_kv(int B, int S, int ng, int r, int d, double scale, bool bias)
{
	const int H = ng * r;
	const char *id = nm("attn_kv B=%d S=%d ng=%d r=%d d=%d%s", B, S, ng, r, d, bias ? " with a position bias" : "");
	int32_t *seq = xmalloc((size_t)B * S * 4), *pos = xmalloc((size_t)B * S * 4);
	int T = 0, maxlen = 0;
	for (int i = 0; i < S - 1; i++)
		for (int b = 0; b < B; b++)
			if (i < 1 + (b * 7) % (S - 1)) seq[T] = b, pos[T++] = i, maxlen = i + 1 > maxlen ? i + 1 : maxlen;
	const size_t nc = (size_t)B * ng * S * d, hd = (size_t)ng * (r + 2) * d;
	float *qkv = hrand((size_t)T * hd, scale), *qkv2 = hrand((size_t)B * hd, scale);
	int32_t seq2[64], pos2[64];
	for (int b = 0; b < B; b++) seq2[b] = b, pos2[b] = 1 + (b * 7) % (S - 1);
	float *kc = xmalloc(nc * 4), *vc = xmalloc(nc * 4), *oc = xmalloc((size_t)T * H * d * 4), *oc2 = xmalloc((size_t)B * H * d * 4);
	memset(kc, 0, nc * 4), memset(vc, 0, nc * 4);
	float *pb = bias ? hrand((size_t)(2 * S - 1) * H, 2.0) : NULL, *dPB = bias ? dput(pb, (size_t)(2 * S - 1) * H) : NULL;
	at_attn_kv(cpu, oc, kc, vc, qkv, seq, pos, T, ng, r, d, S, pb, S);
	at_attn_kv(cpu, oc2, kc, vc, qkv2, seq2, pos2, B, ng, r, d, S, pb, S);
	float *dK = dalloc(nc * 4), *dV = dalloc(nc * 4), *dQ = dput(qkv, (size_t)T * hd), *dQ2 = dput(qkv2, (size_t)B * hd);
	float *dO = dalloc((size_t)T * H * d * 4), *dO2 = dalloc((size_t)B * H * d * 4);
	int32_t *dS = dputi(seq, (size_t)T), *dP = dputi(pos, (size_t)T), *dS2 = dputi(seq2, (size_t)B), *dP2 = dputi(pos2, (size_t)B);
	G->zero(gpu, dK, nc * 4), G->zero(gpu, dV, nc * 4);
	poison(dO, (size_t)T * H * d), poison(dO2, (size_t)B * H * d);
	at_attn_kv(gpu, dO, dK, dV, dQ, dS, dP, T, ng, r, d, S, dPB, S);
	at_attn_kv(gpu, dO2, dK, dV, dQ2, dS2, dP2, B, ng, r, d, S, dPB, S);
	float *o = dget(dO, (size_t)T * H * d), *o2 = dget(dO2, (size_t)B * H * d), *k = dget(dK, nc), *v = dget(dV, nc);
	tol2 t = T2(lin_tol_gpu(MGT_PREC_FP32, maxlen + 1), SIM_ATTN);
	cmp(nm("%s: prefill out", id), o, oc, NULL, (size_t)T * H * d, t);
	cmp(nm("%s: decode out", id), o2, oc2, NULL, (size_t)B * H * d, t);
	cmp(nm("%s: key cache", id), k, kc, NULL, nc, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: value cache", id), v, vc, NULL, nc, T2(TOL_EXACT, SIM_EXACT));
	free(o), free(o2), free(k), free(v);
	dfree(dK), dfree(dV), dfree(dQ), dfree(dQ2), dfree(dO), dfree(dO2);
	dfree(dS), dfree(dP), dfree(dS2), dfree(dP2), dfree(dPB);
	free(seq), free(pos), free(qkv), free(qkv2), free(kc), free(vc), free(oc), free(oc2), free(pb);
}

/* The fused QKV activation and the attention output stored in 16 bits (the model under
 * --bf16/--fp16): attn_fwd on 16-bit qkv gives the lse, and out rounded, of the same op on fp32 qkv
 * holding the same values (bitwise: the tensor-core kernels stage the same operands, an
 * unsupported head dimension goes through the fp32 kernel either way), attn_bwd from 16-bit qkv
 * and out the same dqkv bits; and against the CPU's 16-bit path within attn_tol. */
static void t_attn16(mgt_precision prec, int s, int b, int ng, int r, int d, float p)
{
	const int H = ng * r, T = s * b;
	const size_t nq = (size_t)T * ng * (r + 2) * d, no = (size_t)T * H * d, nl = (size_t)b * H * s;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	const char *id = nm("attn %s 16-bit qkv/out s=%d b=%d ng=%d r=%d d=%d p=%g", precname(prec), s, b, ng, r, d, p);
	float *qkv = hrand(nq, 1.5), *dout = hrand(no, 1), *qv = xmalloc(nq * 4), *ov = xmalloc(no * 4);
	uint16_t *q16 = xmalloc(nq * 2), *oc16 = xmalloc(no * 2), *o16 = xmalloc(no * 2);
	float *lc = xmalloc(nl * 4), *dqc = xmalloc(nq * 4);
	C->cast(cpu, q16, dt, qkv, nq);
	for (size_t i = 0; i < nq; i++) qv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(q16[i]) : mgt_f16_to_f32(q16[i]);
	at_attn_fwd(cpu, oc16, lc, q16, dt, s, b, ng, r, d, p, 5, 0, H, NULL);
	at_attn_bwd(cpu, dqc, dout, MGT_DT_F32, q16, oc16, dt, lc, s, b, ng, r, d, p, 5, 0, H, NULL);
	gpu->precision = prec;
	void *dQ16 = dalloc(nq * 2), *dO16 = dalloc(no * 2);
	up(dQ16, q16, nq * 2);
	float *dQv = dput(qv, nq), *dOv = dalloc(no * 4), *dL = dalloc(nl * 4), *dLv = dalloc(nl * 4);
	float *dDO = dput(dout, no), *dDQ = dalloc(nq * 4), *dDQv = dalloc(nq * 4);
	poison(dOv, no), poison(dL, nl), poison(dLv, nl), poison(dDQ, nq), poison(dDQv, nq);
	at_attn_fwd(gpu, dO16, dL, dQ16, dt, s, b, ng, r, d, p, 5, 0, H, NULL);
	at_attn_fwd(gpu, dOv, dLv, dQv, MGT_DT_F32, s, b, ng, r, d, p, 5, 0, H, NULL);
	float *l = dget(dL, nl), *lv = dget(dLv, nl), *o = dget(dOv, no);
	t_out16(nm("%s: out", id), dO16, dt, o, no);
	CHECK(ndiff(l, lv, nl, 4) == 0, "%s%s: lse the bits of the fp32 qkv's", tag, id);
	if (G->download(gpu, o16, dO16, no * 2) != MGT_OK) bail("download");
	for (size_t i = 0; i < no; i++) ov[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(o16[i]) : mgt_f16_to_f32(o16[i]);
	up(dOv, ov, no * 4); /* the backward's fp32 out: the 16-bit out's values */
	at_attn_bwd(gpu, dDQ, dDO, MGT_DT_F32, dQ16, dO16, dt, dL, s, b, ng, r, d, p, 5, 0, H, NULL);
	at_attn_bwd(gpu, dDQv, dDO, MGT_DT_F32, dQv, dOv, MGT_DT_F32, dLv, s, b, ng, r, d, p, 5, 0, H, NULL);
	float *dq = dget(dDQ, nq), *dqv = dget(dDQv, nq);
	CHECK(ndiff(dq, dqv, nq, 4) == 0, "%s%s: dqkv the bits of the fp32 qkv and out's", tag, id);
	{ /* 16-bit dout and dqkv (through the backend's scratch): the rounding of the fp32 dqkv from dout's values */
		void *dG16, *dDQ16 = dalloc(nq * 2);
		float *dGv = dput16(dout, no, dt, &dG16);
		at_attn_bwd(gpu, dDQv, dGv, MGT_DT_F32, dQ16, dO16, dt, dL, s, b, ng, r, d, p, 5, 0, H, NULL);
		at_attn_bwd(gpu, dDQ16, dG16, dt, dQ16, dO16, dt, dL, s, b, ng, r, d, p, 5, 0, H, NULL);
		float *d32 = dget(dDQv, nq);
		t_out16(nm("%s: 16-bit dout and dqkv", id), dDQ16, dt, d32, nq);
		free(d32), dfree(dGv), dfree(dG16), dfree(dDQ16);
	}
	gpu->precision = MGT_PREC_FP32;
	float *ocv = xmalloc(no * 4);
	for (size_t i = 0; i < no; i++) ocv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(oc16[i]) : mgt_f16_to_f32(oc16[i]);
	cmp(nm("%s: fwd out vs the CPU's", id), ov, ocv, NULL, no, attn_tol(prec, 0, false));
	cmp(nm("%s: fwd lse vs the CPU's", id), l, lc, NULL, nl, attn_tol(prec, 0, true));
	cmp(nm("%s: bwd dqkv vs the CPU's", id), dq, dqc, NULL, nq, attn_tol(prec, 0, false));
	free(qkv), free(dout), free(qv), free(ov), free(q16), free(oc16), free(o16), free(lc), free(dqc), free(ocv);
	free(l), free(lv), free(o), free(dq), free(dqv);
	dfree(dQ16), dfree(dO16), dfree(dQv), dfree(dOv), dfree(dL), dfree(dLv), dfree(dDO), dfree(dDQ), dfree(dDQv);
}

/* The attention shapes of the tensor-core kernels. */
static void t_attn_tc_shapes(bool small)
{
	for (mgt_precision pr = MGT_PREC_BF16; pr <= MGT_PREC_FP16; pr++) {
		t_attn_prec(pr, small ? 50 : 1000, 1, 1, 4, 48, 0.1f, 2, 8, 1.5, false); /* d 48: padded to 64 */
		t_attn_prec(pr, small ? 70 : 257, 2, 2, 2, 64, 0.0f, 0, 4, 1.5, false);
		if (small) /* tiles wholly below the diagonal (the kernels' unchecked softmax), with dropout */
			t_attn_prec(pr, 200, 1, 1, 2, 64, 0.1f, 0, 2, 1.5, false);
		t_attn_prec(pr, small ? 77 : 1000, 1, 1, 4, 32, 0.1f, 2, 8, 1.5, false);
		t_attn_prec(pr, small ? 63 : 130, 2, 1, 3, 128, 0.1f, 3, 12, 1.5, false);
		t_attn_prec(pr, small ? 33 : 128, 1, 2, 1, 16, 0.0f, 0, 2, 1.5, false);
		t_attn_prec(pr, small ? 40 : 100, 1, 1, 2, 24, 0.1f, 0, 2, 1.5, false);
		t_attn16(pr, small ? 40 : 257, 2, 2, 2, 64, 0.1f);
		t_attn16(pr, small ? 40 : 100, 1, 1, 2, 24, 0.0f); /* the fp32 kernel through conversions */
		/* the key padding mask: several key tiles, DM 128 (32-row backward tiles), d padded */
		t_attn_prec(pr, small ? 70 : 300, 4, 1, 2, 64, 0.1f, 0, 2, 1.5, true);
		t_attn_prec(pr, small ? 45 : 257, 4, 2, 2, 128, 0.0f, 2, 8, 1.5, true);
		t_attn_prec(pr, small ? 33 : 130, 5, 1, 1, 48, 0.1f, 0, 1, 1.5, true);
	}
}

/* The mma.sync kernels with and without their cp.async prefetch of K and V (MGT_ATTN_KERNEL=mma,
 * mma-nocp), and (mma-mb2) with the d 64 causal kernels bounded to 2 blocks per SM, on the same
 * inputs: the same products in the same order, only the staging or the register budget differs,
 * so forward and backward are bitwise equal, on a GPU too.  (Until 2026-11-27 this compared the
 * mma.sync kernels with the WMMA ones, within 1e-6 under the simulator; an H200 passed it.)
 * masked: under attn_mask's key padding mask. */
static void t_attn_impls(int s, int b, int ng, int r, int d, float p, bool masked)
{
	const size_t nq = (size_t)s * b * ng * (r + 2) * d, no = (size_t)s * b * ng * r * d, nl = (size_t)b * ng * r * s;
	const char *id = nm("attn bf16 mma = mma-nocp = mma-mb2 s=%d b=%d ng=%d r=%d d=%d p=%g%s", s, b, ng, r, d, p,
			    masked ? " key-mask" : "");
	uint8_t *km = masked ? attn_mask(s, b) : NULL, *dKM = masked ? dalloc((size_t)s * b) : NULL;
	if (masked)
		up(dKM, km, (size_t)s * b);
	float *qkv = hrand(nq, 1.5), *dout = hrand(no, 1);
	float *dQ = dput(qkv, nq), *dDO = dput(dout, no), *dO = dalloc(no * 4), *dL = dalloc(nl * 4), *dDQ = dalloc(nq * 4);
	float *o[3], *l[3], *dq[3];
	static const char *const impl[3] = {"mma", "mma-nocp", "mma-mb2"};
	gpu->precision = MGT_PREC_BF16;
	for (int k = 0; k < 3; k++) {
		setenv("MGT_ATTN_KERNEL", impl[k], 1);
		poison(dO, no), poison(dL, nl);
		at_attn_fwd(gpu, dO, dL, dQ, MGT_DT_F32, s, b, ng, r, d, p, 99, 0, ng * r, dKM);
		o[k] = dget(dO, no), l[k] = dget(dL, nl);
	}
	float *dOc = dput(o[0], no), *dLc = dput(l[0], nl); /* both backwards get the mma forward's */
	for (int k = 0; k < 3; k++) {
		setenv("MGT_ATTN_KERNEL", impl[k], 1);
		poison(dDQ, nq);
		at_attn_bwd(gpu, dDQ, dDO, MGT_DT_F32, dQ, dOc, MGT_DT_F32, dLc, s, b, ng, r, d, p, 99, 0, ng * r, dKM);
		dq[k] = dget(dDQ, nq);
	}
	unsetenv("MGT_ATTN_KERNEL");
	gpu->precision = MGT_PREC_FP32;
	for (int k = 1; k < 3; k++) {
		cmp(nm("%s: %s fwd out", id, impl[k]), o[0], o[k], NULL, no, T2(TOL_EXACT, SIM_EXACT));
		if (masked)
			cmp_lse(nm("%s: %s fwd lse", id, impl[k]), l[0], l[k], nl, T2(TOL_EXACT, SIM_EXACT));
		else
			cmp(nm("%s: %s fwd lse", id, impl[k]), l[0], l[k], NULL, nl, T2(TOL_EXACT, SIM_EXACT));
		cmp(nm("%s: %s bwd dqkv", id, impl[k]), dq[0], dq[k], NULL, nq, T2(TOL_EXACT, SIM_EXACT));
	}
	for (int k = 0; k < 3; k++)
		free(o[k]), free(l[k]), free(dq[k]);
	dfree(dQ), dfree(dDO), dfree(dO), dfree(dL), dfree(dDQ), dfree(dOc), dfree(dLc), dfree(dKM);
	free(qkv), free(dout), free(km);
}

/* The tensor-core kernels in both 16-bit types on a few shapes (head dims 16..128, ragged s, GQA,
 * dropout); head dims they do not take (24) fall back to the fp32 kernel.  Both stagings: with
 * the cp.async prefetch (the default) and without (MGT_ATTN_KERNEL=mma-nocp, which the CUDA
 * backend reads at each call). */
#if MMA_PROBE
/* The PTX ISA's m16n8k16 fragments (kernels/mma.cuh) of a 16 x 16 tile X whose element (i, j) is
 * 16 i + j: register e of `lane` for k = 0 the A operand X, 1 the B operand X^T (output columns
 * are X's rows), 2 the B operand X (k runs down X's rows); the low half holds the lower k. */
static uint32_t frag_want(int k, int lane, int e)
{
	const int gid = lane / 4, c = 2 * (lane % 4);
	int i, j, di = 0, dj = 1;
	if (k == 0)
		i = gid + 8 * (e & 1), j = c + 8 * (e >> 1);
	else if (k == 1)
		i = gid + 8 * (e >> 1), j = c + 8 * (e & 1);
	else
		i = c + 8 * (e & 1), j = gid + 8 * (e >> 1), di = 1, dj = 0;
	return (uint32_t)(16 * i + j) | (uint32_t)(16 * (i + di) + j + dj) << 16;
}

/* frag k of the probe against frag_want: the first wrong lane and register named. */
static void check_frag(const char *ty, int k, const uint32_t *f)
{
	static const char *const fn[3] = {"frag_a (A = X)", "frag_bt (B = X^T)", "frag_b (B = X)"};
	int w = -1;
	for (int i = 0; i < 128 && w < 0; i++)
		if (f[i] != frag_want(k, i / 4, i % 4))
			w = i;
	CHECK(w < 0, "mma probe %s: %s registers of all 32 lanes = the PTX ISA's m16n8k16 fragment", ty, fn[k]);
	if (w >= 0) {
		const uint32_t g = f[w], x = frag_want(k, w / 4, w % 4);
		printf("#   lane %d register %d holds elements %u, %u; expected %u, %u (element 16 i + j)\n", w / 4,
		       w % 4, g & 0xffff, g >> 16, x & 0xffff, x >> 16);
	}
}

/* The mma.sync attention kernels' fragment helpers alone (kernels.h mgt_k_mma_probe, one warp):
 * the registers frag_a, frag_bt and frag_b load, exactly, and the two products the attention
 * kernels chain, X Y^T (S = Q K^T) and round(X Y^T) Y (P V, the accumulators repacked as the A
 * operand by pack_a), against double sums of the same rounded operands: the products of 16-bit
 * values are exact in fp32, so only the fp32 accumulation differs (tensor cores: 1e-4; the
 * simulator sums in order: 1e-6).  On a GPU this checks the layouts as read from the PTX ISA; the
 * attention checks alone would only say that something is wrong. */
static void t_mma_probe(int dtype)
{
	const char *ty = dtype == MGT_K_BF16 ? "bf16" : "fp16";
	float *x = hrand(256, 1), *y = hrand(256, 1), r1[256], r2[256];
	float *dx = dput(x, 256), *dy = dput(y, 256), *d1 = dalloc(256 * 4), *d2 = dalloc(256 * 4), *df = dalloc(384 * 4);
	int e = (int)cudaDeviceSynchronize(); /* the uploads ran on the backend's own stream */
	if (!e)
		e = mgt_k_mma_probe(NULL, dtype, dx, dy, d1, d2, (uint32_t *)df);
	if (!e)
		e = (int)cudaDeviceSynchronize();
	CHECK(e == 0, "mma probe %s: the kernel ran (cuda error %d)", ty, e);
	if (!e) {
		float *c1 = dget(d1, 256), *c2 = dget(d2, 256), *f = dget(df, 384);
		float (*rnd)(float) = dtype == MGT_K_BF16 ? mgt_round_bf16 : mgt_round_fp16;
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 16; j++) {
				double a = 0, b = 0;
				for (int k = 0; k < 16; k++) {
					a += (double)rnd(x[i * 16 + k]) * rnd(y[j * 16 + k]);
					b += (double)rnd(c1[i * 16 + k]) * rnd(y[k * 16 + j]);
				}
				r1[i * 16 + j] = (float)a, r2[i * 16 + j] = (float)b;
			}
		uint32_t fr[384];
		memcpy(fr, f, sizeof fr); /* the registers' bits, downloaded as 384 words */
		for (int k = 0; k < 3; k++)
			check_frag(ty, k, fr + 128 * k);
		cmp(nm("mma probe %s: X Y^T (frag_a, frag_bt)", ty), c1, r1, NULL, 256, T2(1e-4, 1e-6));
		cmp(nm("mma probe %s: round(X Y^T) Y (pack_a, frag_b)", ty), c2, r2, NULL, 256, T2(1e-4, 1e-6));
		free(c1), free(c2), free(f);
	}
	dfree(dx), dfree(dy), dfree(d1), dfree(d2), dfree(df);
	free(x), free(y);
}
#endif

/* The fragment-layout probe and the two tensor-core implementations on the same inputs: all_ops
 * runs them first, so that a GPU run pins a layout error to one helper before anything else. */
static void t_mma_first(bool small)
{
#if MMA_PROBE
	t_mma_probe(MGT_K_BF16);
	t_mma_probe(MGT_K_F16);
#endif
	t_attn_impls(small ? 70 : 300, 2, 2, 2, 64, 0.1f, false);
	t_attn_impls(small ? 40 : 130, 1, 1, 3, 128, 0.0f, false);
	t_attn_impls(small ? 70 : 300, 4, 1, 2, 64, 0.1f, true);
}

/* The tensor-core kernels (mma, mma-nocp) against the CPU at the attention shapes (first: the
 * probe and the two stagings against each other when first is true). */
static void t_attn_tc(bool small, bool first)
{
	if (first)
		t_mma_first(small);
	setenv("MGT_ATTN_KERNEL", "mma", 1);
	t_attn_tc_shapes(small);
	setenv("MGT_ATTN_KERNEL", "mma-nocp", 1);
	tag = "[mma-nocp] ";
	t_attn_tc_shapes(small);
	tag = "";
	unsetenv("MGT_ATTN_KERNEL");
}

/* ---- cross-attention (backend.h xattn_fwd / xattn_bwd) ---- */

/* Under attn_mask's key mask km [sk*b]: the elements that must be exactly 0 and are not, or are not
 * finite: out and dq [sq*b, H, d] of sequence 0 (every key masked) and the dkv [sk*b, ng, 2, d]
 * rows of masked keys. */
static size_t xattn_zero_bad(const float *o, const float *dq, const float *dkv, const uint8_t *km, int sq, int sk,
			     int b, size_t ho, size_t hk)
{
	size_t bad = 0;
	for (int i = 0; i < sq; i++)
		for (int j = 0; j < b; j++)
			for (size_t e = 0, t = (size_t)i * b + j; e < ho; e++) {
				bad += !isfinite(o[t * ho + e]) || (km && j == 0 && o[t * ho + e] != 0.0f);
				bad += !isfinite(dq[t * ho + e]) || (km && j == 0 && dq[t * ho + e] != 0.0f);
			}
	for (size_t t = 0; t < (size_t)sk * b; t++)
		for (size_t e = 0; e < hk; e++)
			bad += !isfinite(dkv[t * hk + e]) || (km && !km[t] && dkv[t * hk + e] != 0.0f);
	return bad;
}

/* 16-bit elements [n] of type dt widened. */
static float *widen16(const uint16_t *h, size_t n, mgt_elem_type dt)
{
	float *v = xmalloc(n * 4);
	for (size_t i = 0; i < n; i++) v[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(h[i]) : mgt_f16_to_f32(h[i]);
	return v;
}

/* The inputs and the CPU's results of one cross-attention check; q, kv, out of type st (host). */
typedef struct {
	int sq, sk, b, ng, r, d, head0, htot;
	float p;
	uint64_t key;
	mgt_elem_type st;
	size_t no, nk, nl, es;
	void *q, *kv, *oc;  /* type st: q [no], kv [nk], the CPU's out [no] */
	float *dout, *lc, *dqc, *dkvc;
	uint8_t *km;
} xcase;

static void xcase_init(xcase *x, int sq, int sk, int b, int ng, int r, int d, float p, int head0, int htot,
		       bool masked, mgt_elem_type st)
{
	*x = (xcase){sq, sk, b, ng, r, d, head0, htot, p, rng ^ 0xC2055ull, st, 0, 0, 0, st == MGT_DT_F32 ? 4 : 2,
		     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
	x->no = (size_t)sq * b * ng * r * d, x->nk = (size_t)sk * b * ng * 2 * d, x->nl = (size_t)b * ng * r * sq;
	x->km = masked ? attn_mask(sk, b) : NULL;
	float *q = hrand(x->no, 1.5), *kv = hrand(x->nk, 1.5);
	x->q = xmalloc(x->no * x->es), x->kv = xmalloc(x->nk * x->es), x->oc = xmalloc(x->no * x->es);
	C->cast(cpu, x->q, st, q, x->no);
	C->cast(cpu, x->kv, st, kv, x->nk);
	x->dout = hrand(x->no, 1), x->lc = xmalloc(x->nl * 4), x->dqc = xmalloc(x->no * 4), x->dkvc = xmalloc(x->nk * 4);
	at_xattn_fwd(cpu, x->oc, x->lc, x->q, x->kv, st, sq, sk, b, ng, r, d, p, x->key, head0, htot, x->km);
	at_xattn_bwd(cpu, x->dqc, x->dkvc, x->dout, MGT_DT_F32, x->q, x->kv, x->oc, st, x->lc, sq, sk, b, ng, r, d, p,
		     x->key, head0, htot, x->km);
	free(q), free(kv);
}

static void xcase_free(xcase *x)
{
	free(x->q), free(x->kv), free(x->oc), free(x->dout), free(x->lc), free(x->dqc), free(x->dkvc), free(x->km);
}

/* The GPU's out (widened), lse, dq, dkv of case x at precision prec, the backward from the CPU's
 * out and lse; outputs poisoned (NaN) first. */
static void xattn_gpu(const xcase *x, mgt_precision prec, float **o, float **l, float **dq, float **dkv)
{
	void *dQ = dalloc(x->no * x->es), *dKV = dalloc(x->nk * x->es), *dO = dalloc(x->no * x->es);
	void *dOc = dalloc(x->no * x->es);
	uint8_t *dKM = x->km ? dalloc((size_t)x->sk * x->b) : NULL;
	up(dQ, x->q, x->no * x->es), up(dKV, x->kv, x->nk * x->es), up(dOc, x->oc, x->no * x->es);
	if (dKM) up(dKM, x->km, (size_t)x->sk * x->b);
	uint8_t *ff = xmalloc(x->no * x->es);
	memset(ff, 0xFF, x->no * x->es); /* NaN in fp32, bf16 and fp16 */
	up(dO, ff, x->no * x->es);
	float *dL = dalloc(x->nl * 4), *dLc = dput(x->lc, x->nl), *dG = dput(x->dout, x->no);
	float *dDQ = dalloc(x->no * 4), *dDKV = dalloc(x->nk * 4);
	poison(dL, x->nl), poison(dDQ, x->no), poison(dDKV, x->nk);
	gpu->precision = prec;
	at_xattn_fwd(gpu, dO, dL, dQ, dKV, x->st, x->sq, x->sk, x->b, x->ng, x->r, x->d, x->p, x->key, x->head0, x->htot,
		     dKM);
	at_xattn_bwd(gpu, dDQ, dDKV, dG, MGT_DT_F32, dQ, dKV, dOc, x->st, dLc, x->sq, x->sk, x->b, x->ng, x->r, x->d,
		     x->p, x->key, x->head0, x->htot, dKM);
	gpu->precision = MGT_PREC_FP32;
	if (x->st == MGT_DT_F32) {
		*o = dget(dO, x->no);
	} else {
		uint16_t *h = xmalloc(x->no * 2);
		if (G->download(gpu, h, dO, x->no * 2) != MGT_OK) bail("download");
		*o = widen16(h, x->no, x->st);
		free(h);
	}
	*l = dget(dL, x->nl), *dq = dget(dDQ, x->no), *dkv = dget(dDKV, x->nk);
	dfree(dQ), dfree(dKV), dfree(dO), dfree(dOc), dfree(dKM), dfree(dL), dfree(dLc), dfree(dG), dfree(dDQ), dfree(dDKV);
	free(ff);
}

/* dq under the key mask with 16-bit operands.  attn_mask's sequence 1, whose queries see one key,
 * has dS = P (dP - D) = 0 exactly on the CPU; the tensor cores' dP from rounded dO and V leaves
 * their rounding in its dq rows, while the other rows' dS spread over sk keys (P ~ 1/sk each), so
 * that noise weighs more in dq alone than in attn_bwd's dqkv (measured under the simulator, 5
 * seeds, whole dq: bf16 0.9e-2..1.4e-2, fp16 1.4e-3..2.9e-3).  So: the other sequences' rows at
 * attn_bwd_tol, and sequence 1's rows (their error relative to the whole dq's norm) at 8x
 * attn_tol, where a wrong mask or a wrong key gives errors near 1. */
static void cmp_dq_masked(const char *id, mgt_precision prec, const float *g, const float *c, int sq, int b, size_t ho)
{
	const size_t n = (size_t)sq * b * ho;
	float *g0 = hcopy(g, n), *c0 = hcopy(c, n); /* sequence 1's rows zeroed */
	double num = 0, den = 0;                     /* sequence 1's rows' error; the whole dq's norm */
	for (size_t k = 0; k < n; k++) {
		den += (double)c[k] * c[k];
		if ((int)(k / ho % (size_t)b) == 1) {
			num += ((double)g[k] - c[k]) * ((double)g[k] - c[k]);
			g0[k] = c0[k] = 0.0f;
		}
	}
	cmp(nm("%s: bwd dq (sequences with more than one key)", id), g0, c0, NULL, n, attn_bwd_tol(prec, true));
	const double e = den > 0 ? sqrt(num / den) : sqrt(num);
	const tol2 t = T2(8 * attn_tol(prec, 0, false).gpu, 8 * attn_tol(prec, 0, false).sim);
	CHECK(isfinite(e) && e <= tol_of(t), "%s%s: bwd dq of the sequence with one key: err %.2e of the whole dq's norm "
	      "(tol %.2g)", tag, id, e, tol_of(t));
	free(g0), free(c0);
}

/* xattn_fwd / xattn_bwd on the GPU at precision prec (fp32: the CUDA-core kernels; bf16/fp16 with
 * d % 16 == 0: the tensor-core kernels) against the CPU op, with sq queries against sk keys, under
 * attn_mask's key mask over the keys (a sequence with no key, one with a single key, random ones)
 * or none, q, kv and out stored as st (fp32 or the precision's 16-bit type); tolerances those of
 * attn_fwd's masked checks (dq: cmp_dq_masked); the rows without a key exactly 0 (out, dq; the masked keys' dkv), the
 * same bits from a second run. */
static void t_xattn(mgt_precision prec, int sq, int sk, int b, int ng, int r, int d, float p, int head0, int htot,
		    bool masked, mgt_elem_type st)
{
	const char *id = nm("xattn %s sq=%d sk=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d%s%s", precname(prec), sq, sk, b,
			    ng, r, d, p, head0, htot, masked ? " key-mask" : "", st != MGT_DT_F32 ? " 16-bit q/kv/out" : "");
	xcase x;
	xcase_init(&x, sq, sk, b, ng, r, d, p, head0, htot, masked, st);
	float *o[2], *l[2], *dq[2], *dkv[2];
	for (int k = 0; k < 2; k++)
		xattn_gpu(&x, prec, &o[k], &l[k], &dq[k], &dkv[k]);
	float *oc = st == MGT_DT_F32 ? hcopy(x.oc, x.no) : widen16(x.oc, x.no, st);
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, x.no, attn_tol(prec, lin_tol_gpu(MGT_PREC_FP32, sk), false));
	cmp_lse(nm("%s: fwd lse", id), l[0], x.lc, x.nl, attn_tol(prec, TOL32, true));
	if (masked && prec != MGT_PREC_FP32)
		cmp_dq_masked(id, prec, dq[0], x.dqc, sq, b, (size_t)ng * r * d);
	else
		cmp(nm("%s: bwd dq", id), dq[0], x.dqc, NULL, x.no, attn_bwd_tol(prec, masked));
	cmp(nm("%s: bwd dkv", id), dkv[0], x.dkvc, NULL, x.nk, attn_bwd_tol(prec, masked));
	const size_t zb = xattn_zero_bad(o[0], dq[0], dkv[0], x.km, sq, sk, b, (size_t)ng * r * d, (size_t)ng * 2 * d);
	CHECK(zb == 0, "%s%s: all finite; out and dq of the sequence without keys and dkv of the masked keys exactly 0 "
	      "(%zu not)", tag, id, zb);
	det(id, ndiff(o[0], o[1], x.no, 4) + ndiff(l[0], l[1], x.nl, 4) + ndiff(dq[0], dq[1], x.no, 4) +
			ndiff(dkv[0], dkv[1], x.nk, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(dq[k]), free(dkv[k]);
	free(oc);
	xcase_free(&x);
}

/* Every kernel family: fp32 (CUDA cores), and the tensor-core kernels in bf16 and fp16 with and
 * without their cp.async staging (MGT_ATTN_KERNEL=mma, mma-nocp); sq != sk both ways and neither a
 * multiple of 64, several key tiles, GQA (r = 2) and Megatron's r = 1, dropout, DM 128 (32-row
 * backward tiles), d padded, a masked and an unmasked case each. */
static void t_xattn_all(bool small)
{
	t_xattn(MGT_PREC_FP32, 37, 70, 4, 2, 1, 64, 0.1f, 0, 2, true, MGT_DT_F32);
	t_xattn(MGT_PREC_FP32, 70, small ? 37 : 300, 3, 1, 2, 32, 0.0f, 1, 4, false, MGT_DT_F32);
	t_xattn(MGT_PREC_FP32, 29, 45, 5, 1, 2, 128, 0.1f, 0, 2, true, MGT_DT_F32);
	t_xattn(MGT_PREC_FP32, 33, 40, 4, 2, 1, 24, 0.0f, 0, 2, true, MGT_DT_F32);
	static const char *const impl[2] = {"mma", "mma-nocp"};
	for (int k = 0; k < 2; k++) {
		setenv("MGT_ATTN_KERNEL", impl[k], 1);
		tag = k ? "[mma-nocp] " : "";
		for (mgt_precision pr = MGT_PREC_BF16; pr <= MGT_PREC_FP16; pr++) {
			const mgt_elem_type dt = mgt_precision_dtype(pr);
			t_xattn(pr, 37, 70, 4, 2, 1, 64, 0.1f, 0, 2, true, MGT_DT_F32);
			t_xattn(pr, 70, small ? 37 : 300, 3, 1, 2, 64, 0.0f, 1, 4, false, dt);
			t_xattn(pr, 29, 45, 4, 1, 2, 128, 0.1f, 0, 2, true, dt);
			t_xattn(pr, 45, 33, 5, 1, 1, 48, 0.0f, 0, 1, true, MGT_DT_F32);
		}
	}
	tag = "";
	unsetenv("MGT_ATTN_KERNEL");
}

/* ---- context-parallel attention blocks (backend.h attn_blk_*, attn_kv_copy) ---- */


/* Global chunk of local chunk h (0, 1) of rank rk of c: rk and 2c-1-rk (the causal mask's load
 * balance of context parallelism). */
static int cp_chunk(int c, int rk, int h)
{
	return h ? 2 * c - 1 - rk : rk;
}

/* Context parallelism as the model runs it (/work/cp-plan.md, lib/model/cp.c): a sequence of
 * S = 2cC positions cut into 2c chunks of C, rank rk keeping global chunks rk and 2c-1-rk; every
 * rank's tensors lie here side by side in one device buffer.  Ring (allgather == false): each
 * rank's kv = attn_kv_copy of its local qkv; forward: attn_blk_fwd of every (local query chunk,
 * kv chunk of every rank) pair in ring order, visible or not (an empty block must give out 0 and
 * lse -inf and merge as nothing), merged into the rank's (ctx, lse) from (0, -inf); backward:
 * attn_blk_bwd of the same pairs with the final out and lse, dq accumulating into the rank's
 * dqkv, dK/dV into the kv owner's dkv, then attn_kv_copy writes each rank's dkv into its dqkv's
 * key and value slots.  Allgather: kv of the whole sequence in global order, one block per local
 * query chunk (sk = (gq+1)C, koff = 0: partly masked, no merge), dkv of the whole sequence.  The
 * gathered results must be the CPU backend's whole-sequence attn_fwd / attn_bwd (the backward
 * gets the CPU's out and lse, as t_attn_prec's; the block ops draw the same dropout mask, Philox
 * indexed by global positions).  Runs twice: the same bits. */
static void t_attn_cp(bool allgather, int c, int Cn, int b, int ng, int r, int d, float p, int head0, int htot)
{
	const int S = 2 * c * Cn, H = ng * r, L = 2 * Cn;
	const size_t W = (size_t)ng * (r + 2) * d, KW = (size_t)ng * 2 * d, OW = (size_t)H * d;
	const size_t CB = (size_t)Cn * b, RB = 2 * CB; /* rows of a chunk, of a rank */
	const size_t nq = (size_t)S * b * W, no = (size_t)S * b * OW, nl = (size_t)b * H * S, nlr = (size_t)b * H * L;
	const char *id = nm("attn_cp %s c=%d C=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d", allgather ? "allgather" : "ring",
			    c, Cn, b, ng, r, d, p, head0, htot);
	uint64_t key = rng ^ 0x2545F4914F6CDD1Dull;
	float *qkv = hrand(nq, 1.5), *dout = hrand(no, 1);
	float *oc = xmalloc(no * 4), *lc = xmalloc(nl * 4), *dqc = xmalloc(nq * 4);
	at_attn_fwd(cpu, oc, lc, qkv, MGT_DT_F32, S, b, ng, r, d, p, key, head0, htot, NULL);
	at_attn_bwd(cpu, dqc, dout, MGT_DT_F32, qkv, oc, MGT_DT_F32, lc, S, b, ng, r, d, p, key, head0, htot, NULL);
	/* the local views (rank rk's rows at rk*RB), the CPU's results reordered the same way */
	float *lq = xmalloc(nq * 4), *ldo = xmalloc(no * 4), *loc = xmalloc(no * 4), *ldq = xmalloc(nq * 4);
	float *llc = xmalloc(nl * 4), *ninf = xmalloc(nl * 4);
	for (int rk = 0; rk < c; rk++)
		for (int h = 0; h < 2; h++) {
			const size_t gr = (size_t)cp_chunk(c, rk, h) * CB, lr = rk * RB + h * CB; /* first rows */
			memcpy(lq + lr * W, qkv + gr * W, CB * W * 4);
			memcpy(ldq + lr * W, dqc + gr * W, CB * W * 4);
			memcpy(ldo + lr * OW, dout + gr * OW, CB * OW * 4);
			memcpy(loc + lr * OW, oc + gr * OW, CB * OW * 4);
			for (int jn = 0; jn < b * H; jn++)
				memcpy(llc + rk * nlr + (size_t)jn * L + h * Cn,
				       lc + (size_t)jn * S + (size_t)cp_chunk(c, rk, h) * Cn, (size_t)Cn * 4);
		}
	for (size_t i = 0; i < nl; i++)
		ninf[i] = -INFINITY;
	/* kv and dkv: per rank [RB, ng, 2, d] (ring), or the whole sequence [S*b, ng, 2, d] */
	const size_t nkv = (size_t)S * b * KW;
	float *dQ = dput(lq, nq), *dKV = dalloc(nkv * 4), *dCtx = dalloc(no * 4), *dLse = dalloc(nl * 4);
	float *dDO = dput(ldo, no), *dOc = dput(loc, no), *dLc = dput(llc, nl), *dDQ = dalloc(nq * 4);
	float *dDKV = dalloc(nkv * 4), *dOb = dalloc(CB * OW * 4), *dLb = dalloc(nlr * 4), *dG = NULL;
	if (allgather)
		dG = dput(qkv, nq); /* the gathered qkv, global order */
	float *o[2], *l[2], *dq[2];
	for (int k = 0; k < 2; k++) {
		G->zero(gpu, dCtx, no * 4);
		up(dLse, ninf, nl * 4);
		poison(dKV, nkv);
		G->zero(gpu, dDQ, nq * 4);
		G->zero(gpu, dDKV, nkv * 4);
		if (allgather)
			G->attn_kv_copy(gpu, dG, dKV, S * b, ng, r, d, true);
		else
			for (int rk = 0; rk < c; rk++)
				G->attn_kv_copy(gpu, dQ + rk * RB * W, dKV + rk * RB * KW, (int)RB, ng, r, d, true);
		for (int bwd = 0; bwd < 2; bwd++)
			for (int rk = 0; rk < c; rk++)
				for (int hq = 0; hq < 2; hq++) {
					const int gq = cp_chunk(c, rk, hq);
					const size_t qr = rk * RB + hq * CB, lo = rk * nlr + hq * Cn; /* q row, lse offset */
					mgt_attn g = { .sq = Cn, .sk = Cn, .b = b, .ng = ng, .r = r, .d = d,
							   .qoff = gq * Cn, .s = S, .ld_lse = L, .p = p, .key = key,
							   .head0 = head0, .heads_total = htot };
					if (allgather) {
						g.sk = (gq + 1) * Cn;
						g.koff = 0;
						if (!bwd)
							at_attn_blk_fwd(gpu, &g, dCtx + qr * OW, dLse + lo, dQ + qr * W, dKV);
						else
							at_attn_blk_bwd(gpu, &g, dDQ + qr * W, dDKV, dDO + qr * OW, dQ + qr * W,
									dKV, dOc + qr * OW, dLc + lo);
						continue;
					}
					for (int step = 0; step < c; step++)
						for (int hk = 0; hk < 2; hk++) {
							const int src = (rk - step + c) % c, gk = cp_chunk(c, src, hk);
							const size_t kr = src * RB + hk * CB;
							g.koff = gk * Cn;
							if (!bwd) {
								at_attn_blk_fwd(gpu, &g, dOb, dLb + hq * Cn, dQ + qr * W,
										dKV + kr * KW);
								at_attn_blk_merge(gpu, &g, dCtx + qr * OW, dLse + lo, dOb,
										  dLb + hq * Cn);
							} else {
								at_attn_blk_bwd(gpu, &g, dDQ + qr * W, dDKV + kr * KW,
										dDO + qr * OW, dQ + qr * W, dKV + kr * KW,
										dOc + qr * OW, dLc + lo);
							}
						}
				}
		if (allgather) { /* the gathered dK/dV back to the ranks' dqkv */
			for (int rk = 0; rk < c; rk++)
				for (int h = 0; h < 2; h++)
					G->attn_kv_copy(gpu, dDQ + (rk * RB + h * CB) * W,
							dDKV + (size_t)cp_chunk(c, rk, h) * CB * KW, (int)CB, ng, r, d, false);
		} else {
			for (int rk = 0; rk < c; rk++)
				G->attn_kv_copy(gpu, dDQ + rk * RB * W, dDKV + rk * RB * KW, (int)RB, ng, r, d, false);
		}
		o[k] = dget(dCtx, no);
		l[k] = dget(dLse, nl);
		dq[k] = dget(dDQ, nq);
	}
	cmp(nm("%s: fwd out", id), o[0], loc, NULL, no, T2(lin_tol_gpu(MGT_PREC_FP32, S), SIM_CP));
	cmp_lse(nm("%s: fwd lse", id), l[0], llc, nl, T2(TOL32, SIM_CP));
	cmp(nm("%s: bwd dqkv", id), dq[0], ldq, NULL, nq, T2(TOL_ATTN_BWD, SIM_CP));
	det(id, ndiff(o[0], o[1], no, 4) + ndiff(l[0], l[1], nl, 4) + ndiff(dq[0], dq[1], nq, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(dq[k]);
	dfree(dQ), dfree(dKV), dfree(dCtx), dfree(dLse), dfree(dDO), dfree(dOc), dfree(dLc), dfree(dDQ);
	dfree(dDKV), dfree(dOb), dfree(dLb), dfree(dG);
	free(qkv), free(dout), free(oc), free(lc), free(dqc), free(lq), free(ldo), free(loc), free(ldq);
	free(llc), free(ninf);
}

/* The block ops one by one against the CPU ops of the same name, on one block of any placement:
 * attn_blk_fwd (out, lse with its -inf rows), attn_blk_merge of random running (out, lse) with
 * the block's result (some rows -inf on either side, some on both), attn_blk_bwd from random
 * start values of dq and dkv (the increments compared; dq's key and value slots must stay) with
 * a random "final" out and lse = the block's lse + 0.5 (rows of other blocks), and attn_kv_copy
 * both ways (exact).  lse rows have stride ld_lse = sq + 3. */
static void t_attn_blk(int sq, int sk, int qoff, int koff, int s, int b, int ng, int r, int d, float p, int head0,
		       int htot)
{
	const int H = ng * r, ld = sq + 3;
	const size_t nq = (size_t)sq * b * ng * (r + 2) * d, nkv = (size_t)sk * b * ng * 2 * d;
	const size_t no = (size_t)sq * b * H * d, nl = (size_t)b * H * ld;
	char id[160]; /* its own buffer: more than nm's 8 names follow */
	snprintf(id, sizeof id, "attn_blk sq=%d sk=%d qoff=%d koff=%d s=%d b=%d ng=%d r=%d d=%d p=%g head0=%d/%d", sq,
		 sk, qoff, koff, s, b, ng, r, d, p, head0, htot);
	const mgt_attn g = { .sq = sq, .sk = sk, .b = b, .ng = ng, .r = r, .d = d, .qoff = qoff, .koff = koff,
				 .s = s, .ld_lse = ld, .p = p, .key = rng ^ 0x9E3779B97F4A7C15ull, .head0 = head0,
				 .heads_total = htot };
	float *q = hrand(nq, 1.5), *kv = hrand(nkv, 1.5), *dout = hrand(no, 1);
	/* CPU: the block, then the rest from its results */
	float *oc = hrand(no, 1), *lc = hrand(nl, 1); /* lse padding (ld > sq) must stay */
	float *l0 = hcopy(lc, nl);
	at_attn_blk_fwd(cpu, &g, oc, lc, q, kv);
	/* running (out, lse): random, -inf (out 0) on every 5th row; for every 7th the block's too */
	float *ro = hrand(no, 1), *rl = hrand(nl, 2), *bo = hcopy(oc, no), *bl = hcopy(lc, nl);
	for (int j = 0; j < b; j++)
		for (int n = 0; n < H; n++)
			for (int i = 0; i < sq; i++) {
				const size_t li = ((size_t)j * H + n) * ld + i, oi = (((size_t)i * b + j) * H + n) * d;
				if ((li % 5) == 0) {
					rl[li] = -INFINITY;
					memset(ro + oi, 0, (size_t)d * 4);
				}
				if ((li % 7) == 0) {
					bl[li] = -INFINITY;
					memset(bo + oi, 0, (size_t)d * 4);
				}
			}
	float *mo = hcopy(ro, no), *ml = hcopy(rl, nl);
	at_attn_blk_merge(cpu, &g, mo, ml, bo, bl);
	float *fo = hrand(no, 1), *fl = hcopy(lc, nl); /* "final" out and lse */
	for (size_t i = 0; i < nl; i++)
		fl[i] += fl[i] == -INFINITY ? 0.0f : 0.5f;
	float *dq0 = hrand(nq, 1), *dkv0 = hrand(nkv, 1);
	float *dqc = hcopy(dq0, nq), *dkvc = hcopy(dkv0, nkv);
	at_attn_blk_bwd(cpu, &g, dqc, dkvc, dout, q, kv, fo, fl);
	const size_t nk2 = (size_t)sq * b * ng * 2 * d; /* kv of the block's query rows */
	float *kvc = xmalloc(nk2 * 4), *qr = hrand(nq, 1), *qrc = hcopy(qr, nq);
	C->attn_kv_copy(cpu, q, kvc, sq * b, ng, r, d, true);
	C->attn_kv_copy(cpu, qrc, kvc, sq * b, ng, r, d, false); /* random query slots kept */
	/* GPU */
	float *dQ = dput(q, nq), *dKV = dput(kv, nkv), *dO = dalloc(no * 4), *dL = dalloc(nl * 4);
	float *dRO = dalloc(no * 4), *dRL = dalloc(nl * 4), *dBO = dput(bo, no), *dBL = dput(bl, nl);
	float *dFO = dput(fo, no), *dFL = dput(fl, nl), *dDO = dput(dout, no), *dDQ = dalloc(nq * 4);
	float *dDKV = dalloc(nkv * 4), *dK2 = dalloc(nk2 * 4), *dQ2 = dalloc(nq * 4);
	float *o[2], *l[2], *mo_[2], *ml_[2], *dq[2], *dkv[2], *k2[2], *q2[2];
	for (int k = 0; k < 2; k++) {
		poison(dO, no);
		up(dL, l0, nl * 4);
		up(dRO, ro, no * 4), up(dRL, rl, nl * 4);
		up(dDQ, dq0, nq * 4), up(dDKV, dkv0, nkv * 4);
		poison(dK2, nk2);
		up(dQ2, qr, nq * 4);
		at_attn_blk_fwd(gpu, &g, dO, dL, dQ, dKV);
		at_attn_blk_merge(gpu, &g, dRO, dRL, dBO, dBL);
		at_attn_blk_bwd(gpu, &g, dDQ, dDKV, dDO, dQ, dKV, dFO, dFL);
		G->attn_kv_copy(gpu, dQ, dK2, sq * b, ng, r, d, true);
		G->attn_kv_copy(gpu, dQ2, dK2, sq * b, ng, r, d, false);
		o[k] = dget(dO, no), l[k] = dget(dL, nl), mo_[k] = dget(dRO, no), ml_[k] = dget(dRL, nl);
		dq[k] = dget(dDQ, nq), dkv[k] = dget(dDKV, nkv), k2[k] = dget(dK2, nk2), q2[k] = dget(dQ2, nq);
	}
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, no, T2(lin_tol_gpu(MGT_PREC_FP32, sk), SIM_ATTN));
	cmp_lse(nm("%s: fwd lse", id), l[0], lc, nl, T2(TOL32, SIM_ATTN));
	cmp(nm("%s: merge out", id), mo_[0], mo, NULL, no, T2(TOL32, SIM_CP));
	cmp_lse(nm("%s: merge lse", id), ml_[0], ml, nl, T2(TOL32, SIM_CP));
	cmp(nm("%s: bwd dq", id), dq[0], dqc, dq0, nq, T2(TOL_ATTN_BWD, SIM_ATTN));
	cmp(nm("%s: bwd dkv", id), dkv[0], dkvc, dkv0, nkv, T2(TOL_ATTN_BWD, SIM_ATTN));
	cmp(nm("%s: kv_copy qkv -> kv", id), k2[0], kvc, NULL, nk2, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: kv_copy kv -> qkv", id), q2[0], qrc, NULL, nq, T2(TOL_EXACT, SIM_EXACT));
	det(id, ndiff(o[0], o[1], no, 4) + ndiff(l[0], l[1], nl, 4) + ndiff(mo_[0], mo_[1], no, 4) +
			ndiff(ml_[0], ml_[1], nl, 4) + ndiff(dq[0], dq[1], nq, 4) + ndiff(dkv[0], dkv[1], nkv, 4) +
			ndiff(q2[0], q2[1], nq, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(l[k]), free(mo_[k]), free(ml_[k]), free(dq[k]), free(dkv[k]), free(k2[k]), free(q2[k]);
	dfree(dQ), dfree(dKV), dfree(dO), dfree(dL), dfree(dRO), dfree(dRL), dfree(dBO), dfree(dBL), dfree(dFO);
	dfree(dFL), dfree(dDO), dfree(dDQ), dfree(dDKV), dfree(dK2), dfree(dQ2);
	free(q), free(kv), free(dout), free(oc), free(lc), free(l0), free(ro), free(rl), free(bo), free(bl);
	free(mo), free(ml), free(fo), free(fl), free(dq0), free(dkv0), free(dqc), free(dkvc), free(kvc);
	free(qr), free(qrc);
}

/* Context parallelism's ring and allgather schedules (against the whole-sequence attention) and
 * each block op against the CPU's: diagonal, unmasked, partly masked, rows without a visible key,
 * empty blocks; GQA, dropout, head dims 16..128 (128: the backward's 32 x 32 tiles), chunks not a
 * multiple of the 64-row tiles. */
static void cp_ops(bool small)
{
	if (small) {
		t_attn_cp(false, 2, 37, 2, 2, 2, 32, 0.0f, 0, 4);
		t_attn_cp(false, 3, 24, 1, 1, 3, 16, 0.1f, 2, 6);
		t_attn_cp(false, 2, 70, 1, 2, 1, 128, 0.1f, 0, 2);
		t_attn_cp(true, 2, 37, 2, 2, 2, 32, 0.1f, 0, 4);
		t_attn_cp(true, 4, 20, 1, 1, 2, 64, 0.0f, 0, 2);
		t_attn_blk(50, 50, 100, 100, 300, 2, 2, 2, 32, 0.1f, 0, 4);  /* diagonal */
		t_attn_blk(40, 70, 150, 20, 300, 1, 1, 3, 64, 0.1f, 3, 12);  /* unmasked */
		t_attn_blk(70, 90, 100, 60, 300, 2, 2, 1, 16, 0.0f, 0, 2);   /* partly masked, sq != sk */
		t_attn_blk(45, 33, 10, 30, 100, 1, 2, 2, 24, 0.1f, 0, 4);    /* rows 0..19 see no key */
		t_attn_blk(20, 30, 10, 40, 100, 2, 1, 2, 32, 0.1f, 0, 2);    /* empty */
		t_attn_blk(70, 70, 0, 0, 70, 1, 1, 2, 128, 0.1f, 0, 2);      /* the whole sequence, d 128 */
		return;
	}
	t_attn_cp(false, 2, 256, 2, 2, 2, 64, 0.1f, 0, 4);
	t_attn_cp(false, 4, 100, 1, 2, 4, 128, 0.1f, 8, 16);
	t_attn_cp(false, 8, 64, 2, 1, 2, 32, 0.0f, 0, 2);
	t_attn_cp(true, 4, 100, 1, 2, 4, 128, 0.1f, 8, 16);
	t_attn_cp(true, 2, 333, 2, 2, 1, 16, 0.1f, 0, 2);
	t_attn_blk(512, 512, 1024, 1024, 4096, 2, 2, 2, 64, 0.1f, 0, 4);
	t_attn_blk(300, 700, 1500, 200, 4096, 1, 1, 4, 128, 0.1f, 4, 8);
	t_attn_blk(700, 900, 1000, 600, 4096, 2, 2, 2, 32, 0.0f, 0, 4);
	t_attn_blk(450, 330, 100, 300, 1000, 1, 2, 2, 24, 0.1f, 0, 4);
	t_attn_blk(200, 300, 100, 400, 1000, 2, 1, 2, 64, 0.1f, 0, 2);
	t_attn_blk(1000, 1000, 0, 0, 1000, 1, 1, 2, 128, 0.1f, 0, 2);
}

/* ================= bias + activation ================= */

static void t_act(mgt_act_kind act, bool bias, int T, int f)
{
	const int xw = act == MGT_ACT_SWIGLU ? 2 * f : f;
	const size_t nx = (size_t)T * xw, ny = (size_t)T * f;
	const char *id = nm("bias_act %s%s T=%d f=%d", act == MGT_ACT_GELU ? "gelu" : act == MGT_ACT_GELU_TANH ? "gelu-tanh" : act == MGT_ACT_SQUARED_RELU ? "squared-relu" : "swiglu",
			    bias ? " bias" : "", T, f);
	float *x = hrand(nx, 3), *b = bias ? hrand(xw, 1) : NULL, *dy = hrand(ny, 1), *db0 = hrand(xw, 1);
	float *yc = xmalloc(ny * 4), *dxc = xmalloc(nx * 4), *dbc = hcopy(db0, xw);
	C->bias_act_fwd(cpu, act, yc, MGT_DT_F32, x, MGT_DT_F32, b, T, f);
	C->bias_act_bwd(cpu, act, dxc, bias ? dbc : NULL, dy, MGT_DT_F32, x, MGT_DT_F32, b, T, f);
	float *dX = dput(x, nx), *dB = bias ? dput(b, xw) : NULL, *dY = dalloc(ny * 4), *dDY = dput(dy, ny);
	float *dDX = dalloc(nx * 4), *dDB = dalloc((size_t)xw * 4);
	float *y[2], *dx[2], *db[2];
	for (int k = 0; k < 2; k++) {
		poison(dY, ny);
		poison(dDX, nx);
		up(dDB, db0, (size_t)xw * 4);
		G->bias_act_fwd(gpu, act, dY, MGT_DT_F32, dX, MGT_DT_F32, dB, T, f);
		G->bias_act_bwd(gpu, act, dDX, bias ? dDB : NULL, dDY, MGT_DT_F32, dX, MGT_DT_F32, dB, T, f);
		y[k] = dget(dY, ny);
		dx[k] = dget(dDX, nx);
		db[k] = dget(dDB, xw);
	}
	cmp(nm("%s: fwd y", id), y[0], yc, NULL, ny, T2(TOL32, SIM_EXACT));
	cmp(nm("%s: bwd dx", id), dx[0], dxc, NULL, nx, T2(TOL32, SIM_EXACT));
	if (bias)
		cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, xw, colsum_tol(T));
	else
		CHECK(memcmp(db[0], db0, (size_t)xw * 4) == 0, "%s%s: db NULL leaves db alone", tag, id);
	det(id, ndiff(y[0], y[1], ny, 4) + ndiff(dx[0], dx[1], nx, 4) + ndiff(db[0], db[1], xw, 4));
	void *dY16 = dalloc(ny * 2), *dX16 = dalloc(nx * 2);
	uint16_t *x16 = xmalloc(nx * 2);
	float *xv = xmalloc(nx * 4);
	for (int k = 0; k < 2; k++) {
		mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		G->bias_act_fwd(gpu, act, dY16, dt, dX, MGT_DT_F32, dB, T, f);
		t_out16(id, dY16, dt, y[0], ny);
		/* a 16-bit x (fc1's output): the bits of the same values in fp32, forward and backward */
		C->cast(cpu, x16, dt, x, nx);
		for (size_t i = 0; i < nx; i++)
			xv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(x16[i]) : mgt_f16_to_f32(x16[i]);
		up(dX16, x16, nx * 2);
		float *dXv = dput(xv, nx), *r[4];
		for (int j = 0; j < 2; j++) {
			G->bias_act_fwd(gpu, act, dY, MGT_DT_F32, j ? dX16 : (void *)dXv, j ? dt : MGT_DT_F32, dB, T, f);
			G->bias_act_bwd(gpu, act, dDX, NULL, dDY, MGT_DT_F32, j ? dX16 : (void *)dXv, j ? dt : MGT_DT_F32, dB, T, f);
			r[2 * j] = dget(dY, ny), r[2 * j + 1] = dget(dDX, nx);
		}
		CHECK(!ndiff(r[0], r[2], ny, 4) && !ndiff(r[1], r[3], nx, 4),
		      "%s%s: %s x: the bits of its fp32 values, forward and backward", tag, id,
		      dt == MGT_DT_BF16 ? "bf16" : "fp16");
		/* 16-bit dy and dx: dx the rounding of the fp32 dx from dy's values (r[3] from dXv's x
		 * and dDY's dy: dy is uploaded as 16-bit values for this) */
		void *dG16, *dDX16 = dalloc(nx * 2);
		float *dGv = dput16(dy, ny, dt, &dG16);
		G->bias_act_bwd(gpu, act, dDX, NULL, dGv, MGT_DT_F32, dXv, MGT_DT_F32, dB, T, f);
		G->bias_act_bwd(gpu, act, dDX16, NULL, dG16, dt, dXv, MGT_DT_F32, dB, T, f);
		float *d32 = dget(dDX, nx);
		t_out16(nm("%s: 16-bit dy and dx", id), dDX16, dt, d32, nx);
		free(d32), dfree(dGv), dfree(dG16), dfree(dDX16);
		for (int j = 0; j < 4; j++)
			free(r[j]);
		dfree(dXv);
	}
	free(x16), free(xv);
	dfree(dY16), dfree(dX16);
	for (int k = 0; k < 2; k++)
		free(y[k]), free(dx[k]), free(db[k]);
	dfree(dX), dfree(dB), dfree(dY), dfree(dDY), dfree(dDX), dfree(dDB);
	free(x), free(b), free(dy), free(db0), free(yc), free(dxc), free(dbc);
}

/* ================= bias-dropout-add ================= */

/* alias: the forward writes into resid (out == resid), the backward in place (dy == dout) */
/* bda with a 16-bit row-parallel output y and 16-bit gradients (type dt), on the GPU: bda_fwd of a
 * 16-bit y gives the bits of its fp32 values; bda_bwd from a 16-bit dout into a 16-bit dy (and
 * in place) the rounding of the fp32 op on dout's values, db the column sums of the stored dy. */
static void bda16_grads(int T, int h, float p, const float *y, const float *dout, const float *b, const float *db0,
			mgt_elem_type dt, uint64_t key, uint64_t e0, const char *id)
{
	const size_t n = (size_t)T * h;
	void *dY16, *dG16;
	float *dYv = dput16(y, n, dt, &dY16), *dGv = dput16(dout, n, dt, &dG16);
	float *dB = b ? dput(b, h) : NULL, *dO = dalloc(n * 4), *dD = dalloc(n * 4);
	float *dDB = dput(db0, h), *dDB16 = dput(db0, h);
	G->bda_fwd(gpu, dO, NULL, MGT_DT_F32, dYv, MGT_DT_F32, dB, T, h, p, key, e0);
	float *o1 = dget(dO, n);
	G->bda_fwd(gpu, dO, NULL, MGT_DT_F32, dY16, dt, dB, T, h, p, key, e0);
	float *o2 = dget(dO, n);
	size_t nd = ndiff(o1, o2, n, 4);
	CHECK(nd == 0, "%s%s: bda_fwd of a %s y gives the bits of its fp32 values (%zu differ)", tag, id,
	      dt == MGT_DT_BF16 ? "bf16" : "fp16", nd);
	G->bda_bwd(gpu, dD, MGT_DT_F32, NULL, dGv, MGT_DT_F32, T, h, p, key, e0);
	float *d32 = dget(dD, n);
	for (size_t i = 0; i < n; i++) /* the stored dy, for the reference db */
		d32[i] = dt == MGT_DT_BF16 ? mgt_round_bf16(d32[i]) : mgt_round_fp16(d32[i]);
	up(dD, d32, n * 4);
	G->bda_bwd(gpu, dO, MGT_DT_F32, dDB, dD, MGT_DT_F32, T, h, 0.0f, 0, 0);
	G->bda_bwd(gpu, dG16, dt, dDB16, dG16, dt, T, h, p, key, e0); /* in place */
	t_out16(nm("%s: bwd dy of a 16-bit dout, in place", id), dG16, dt, d32, n);
	float *r1 = dget(dDB, h), *r2 = dget(dDB16, h);
	CHECK(ndiff(r1, r2, h, 4) == 0, "%s%s: bwd db of a 16-bit dy: the sums of its stored values", tag, id);
	free(o1), free(o2), free(d32), free(r1), free(r2);
	dfree(dYv), dfree(dGv), dfree(dB), dfree(dO), dfree(dD), dfree(dDB), dfree(dDB16), dfree(dY16), dfree(dG16);
}

static void t_bda(int T, int h, float p, bool resid, bool bias, bool alias, uint64_t e0)
{
	const size_t n = (size_t)T * h;
	const char *id = nm("bda T=%d h=%d p=%g%s%s%s e0=%#llx", T, h, p, resid ? " resid" : "", bias ? " bias" : "",
			    alias ? " in-place" : "", (unsigned long long)e0);
	uint64_t key = rng ^ 0xB5297A4Dull;
	float *rs = resid ? hrand(n, 1) : NULL, *y = hrand(n, 1), *b = bias ? hrand(h, 1) : NULL;
	float *dout = hrand(n, 1), *db0 = hrand(h, 1);
	float *oc = alias && resid ? hcopy(rs, n) : xmalloc(n * 4);
	C->bda_fwd(cpu, oc, alias && resid ? oc : rs, MGT_DT_F32, y, MGT_DT_F32, b, T, h, p, key, e0);
	float *dyc = alias ? hcopy(dout, n) : xmalloc(n * 4), *dbc = hcopy(db0, h);
	C->bda_bwd(cpu, dyc, MGT_DT_F32, bias ? dbc : NULL, alias ? dyc : dout, MGT_DT_F32, T, h, p, key, e0);
	float *dR = resid && !alias ? dput(rs, n) : NULL, *dYin = dput(y, n), *dB = bias ? dput(b, h) : NULL;
	float *dO = dalloc(n * 4), *dDO = alias ? NULL : dput(dout, n), *dDY = dalloc(n * 4), *dDB = dalloc((size_t)h * 4);
	float *o[2], *dy[2], *db[2];
	for (int k = 0; k < 2; k++) {
		if (alias && resid)
			up(dO, rs, n * 4);
		else
			poison(dO, n);
		if (alias)
			up(dDY, dout, n * 4);
		else
			poison(dDY, n);
		up(dDB, db0, (size_t)h * 4);
		G->bda_fwd(gpu, dO, alias && resid ? dO : dR, MGT_DT_F32, dYin, MGT_DT_F32, dB, T, h, p, key, e0);
		G->bda_bwd(gpu, dDY, MGT_DT_F32, bias ? dDB : NULL, alias ? dDY : dDO, MGT_DT_F32, T, h, p, key, e0);
		o[k] = dget(dO, n);
		dy[k] = dget(dDY, n);
		db[k] = dget(dDB, h);
	}
	cmp(nm("%s: fwd out", id), o[0], oc, NULL, n, T2(TOL32, SIM_EXACT));
	cmp(nm("%s: bwd dy", id), dy[0], dyc, NULL, n, T2(TOL32, SIM_EXACT));
	if (p > 0)
		same_zeros(nm("%s: bwd dy", id), dy[0], dyc, n);
	if (bias)
		cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, h, colsum_tol(T));
	else
		CHECK(memcmp(db[0], db0, (size_t)h * 4) == 0, "%s%s: db NULL leaves db alone", tag, id);
	det(id, ndiff(o[0], o[1], n, 4) + ndiff(dy[0], dy[1], n, 4) + ndiff(db[0], db[1], h, 4));
	/* a 16-bit residual stream (out and resid 16-bit): the rounding of the op on resid's values */
	for (int k = 0; k < 2; k++) {
		const mgt_elem_type dt = k ? MGT_DT_F16 : MGT_DT_BF16;
		uint16_t *r16 = xmalloc(n * 2);
		float *rv = xmalloc(n * 4);
		C->cast(cpu, r16, dt, resid ? rs : y, n);
		for (size_t i = 0; i < n; i++) rv[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(r16[i]) : mgt_f16_to_f32(r16[i]);
		float *dRv = dput(rv, n);
		void *dO16 = dalloc(n * 2);
		up(dO16, r16, n * 2);
		G->bda_fwd(gpu, dO, resid ? dRv : NULL, MGT_DT_F32, dYin, MGT_DT_F32, dB, T, h, p, key, e0);
		G->bda_fwd(gpu, dO16, resid ? dO16 : NULL, dt, dYin, MGT_DT_F32, dB, T, h, p, key, e0); /* in place */
		float *o32 = dget(dO, n);
		t_out16(nm("%s: 16-bit out and resid", id), dO16, dt, o32, n);
		free(o32), free(r16), free(rv), dfree(dRv), dfree(dO16);
		bda16_grads(T, h, p, y, dout, b, db0, dt, key, e0, id);
	}
	for (int k = 0; k < 2; k++)
		free(o[k]), free(dy[k]), free(db[k]);
	dfree(dR), dfree(dYin), dfree(dB), dfree(dO), dfree(dDO), dfree(dDY), dfree(dDB);
	free(rs), free(y), free(b), free(dout), free(db0), free(oc), free(dyc), free(dbc);
}

/* ================= Mixture of Experts: row ops and grouped linears ================= */

/* T tokens routed to k slots each over N expert rows (every row used once, in a shuffled order
 * as grouping by expert leaves them); about a third of the slots -1 and token `empty` without any
 * copy.  Returns slot [T*k] and *idx [N] (row -> token). */
static int32_t *moe_routing(int T, int k, int empty, int32_t **idx_out, int *N_out)
{
	int32_t *slot = xmalloc((size_t)T * k * sizeof *slot);
	int N = 0;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			slot[(size_t)t * k + j] = t == empty || urand() < -0.4 ? -1 : N++;
	int32_t *perm = xmalloc((size_t)(N + 1) * sizeof *perm), *idx = xmalloc((size_t)(N + 1) * sizeof *idx);
	for (int i = 0; i < N; i++)
		perm[i] = i;
	for (int i = N - 1; i > 0; i--) {
		int j = (int)((urand() + 1) / 2 * (i + 1)) % (i + 1), tmp = perm[i];
		perm[i] = perm[j];
		perm[j] = tmp;
	}
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			int32_t *sl = &slot[(size_t)t * k + j];
			if (*sl >= 0) {
				*sl = perm[*sl];
				idx[*sl] = t;
			}
		}
	free(perm);
	*idx_out = idx;
	*N_out = N;
	return slot;
}

static void t_moe_rows(int T, int k, int h)
{
	int32_t *idx, N;
	int32_t *slot = moe_routing(T, k, T / 2, &idx, &N);
	const size_t nt = (size_t)T * h, nr = (size_t)N * h;
	const char *id = nm("moe rows T=%d k=%d h=%d N=%d", T, k, h, N);
	float *x = hrand(nt, 1), *ye = hrand(nr, 1), *w = hrand(N, 1), *b = hrand(nr, 1);
	/* rows_dot: in every other row two products of about +-1e4 that nearly cancel, so that a sum
	 * kept in fp32 anywhere loses the rest of the row (relative errors near 1e-4) */
	for (int i = 0; i < N && h > 1; i += 2) {
		float *bi = b + (size_t)i * h;
		const float *ai = ye + (size_t)i * h;
		bi[0] = 1e4f / ai[0];
		bi[h / 2] = -1e4f / ai[h / 2];
	}
	float *xec = xmalloc(nr * 4), *yc = xmalloc(nt * 4), *ysc = xmalloc(nr * 4), *dc = xmalloc((size_t)N * 4);
	C->rows_gather(cpu, xec, x, MGT_DT_F32, idx, N, h);
	C->rows_combine(cpu, yc, ye, MGT_DT_F32, slot, T, k, h);
	C->rows_scale(cpu, ysc, ye, MGT_DT_F32, w, N, h);
	C->rows_dot(cpu, dc, ye, b, MGT_DT_F32, N, h);
	int32_t *dI = dputi(idx, N), *dS = dputi(slot, (size_t)T * k);
	float *dX = dput(x, nt), *dYE = dput(ye, nr), *dW = dput(w, N), *dB = dput(b, nr);
	float *dXE = dalloc(nr * 4), *dY = dalloc(nt * 4), *dYS = dalloc(nr * 4), *dYI = dalloc(nr * 4),
	      *dD = dalloc((size_t)N * 4);
	float *xe[2], *y[2], *ys[2], *yi[2], *d[2];
	for (int r = 0; r < 2; r++) {
		poison(dXE, nr);
		poison(dY, nt);
		poison(dYS, nr);
		poison(dD, N);
		up(dYI, ye, nr * 4);
		G->rows_gather(gpu, dXE, dX, MGT_DT_F32, dI, N, h);
		G->rows_combine(gpu, dY, dYE, MGT_DT_F32, dS, T, k, h);
		G->rows_scale(gpu, dYS, dYE, MGT_DT_F32, dW, N, h);
		G->rows_scale(gpu, dYI, dYI, MGT_DT_F32, dW, N, h); /* in place */
		G->rows_dot(gpu, dD, dYE, dB, MGT_DT_F32, N, h);
		xe[r] = dget(dXE, nr);
		y[r] = dget(dY, nt);
		ys[r] = dget(dYS, nr);
		yi[r] = dget(dYI, nr);
		d[r] = dget(dD, N);
	}
	/* copies, fp32 additions in j order from 0, one product per element: the same bits */
	cmp(nm("%s: rows_gather", id), xe[0], xec, NULL, nr, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: rows_combine (token %d without copies)", id, T / 2), y[0], yc, NULL, nt, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: rows_scale", id), ys[0], ysc, NULL, nr, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: rows_scale in place", id), yi[0], ysc, NULL, nr, T2(TOL_EXACT, SIM_EXACT));
	/* double sums in another order, rounded once: one fp32 ulp at most, on both; row by row */
	cmp_rows(nm("%s: rows_dot (cancelling rows)", id), d[0], dc, NULL, N, 1, T2(SIM_ULP, SIM_ULP));
	det(id, ndiff(xe[0], xe[1], nr, 4) + ndiff(y[0], y[1], nt, 4) + ndiff(ys[0], ys[1], nr, 4) +
			ndiff(yi[0], yi[1], nr, 4) + ndiff(d[0], d[1], N, 4));
	for (int r = 0; r < 2; r++)
		free(xe[r]), free(y[r]), free(ys[r]), free(yi[r]), free(d[r]);
	dfree(dI), dfree(dS), dfree(dX), dfree(dYE), dfree(dW), dfree(dB), dfree(dXE), dfree(dY), dfree(dYS),
		dfree(dYI), dfree(dD);
	free(slot), free(idx), free(x), free(ye), free(w), free(b), free(xec), free(yc), free(ysc), free(dc);
}

/* The MoE ops on 16-bit rows (type of prec): each GPU op on the 16-bit rows against the same GPU
 * op in fp32 on their values, its 16-bit output rounded on the host (t_out16: bit for bit, the
 * kernels compute the same fp32 values and only the store rounds); the gather the very bits;
 * rows_dot's fp32 output and the grouped linears' dw the same bits. */
static void t_moe16(int T, int k, int h, int f, mgt_precision prec)
{
	int32_t *idx, N;
	int32_t *slot = moe_routing(T, k, T / 2, &idx, &N);
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	const size_t nt = (size_t)T * h, nr = (size_t)N * h, nf = (size_t)N * f;
	const char *id = nm("moe %s 16-bit rows T=%d k=%d h=%d f=%d N=%d", precname(prec), T, k, h, f, N);
	float *x = hrand(nt, 1), *ye = hrand(nr, 1), *w = hrand(N, 1), *wt = hrand((size_t)f * h * 2, 0.5);
	float *dy = hrand(nf, 1), *dw0 = hrand((size_t)f * h * 2, 1);
	void *dX16, *dYE16, *dDY16;
	float *dX = dput16(x, nt, dt, &dX16), *dYE = dput16(ye, nr, dt, &dYE16), *dDY = dput16(dy, nf, dt, &dDY16);
	float *dW = dput(w, N), *dWT = dput(wt, (size_t)f * h * 2);
	int32_t *dI = dputi(idx, N), *dS = dputi(slot, (size_t)T * k);
	void *o16 = dalloc(nt > nr ? nt * 2 : nr * 2), *s16 = dalloc(nr * 2);
	float *o32 = dalloc((nt > nr ? nt : nr) * 4), *d16 = dalloc((size_t)N * 4 + 4), *d32 = dalloc((size_t)N * 4 + 4);
	/* gather: the bits */
	G->rows_gather(gpu, o16, dX16, dt, dI, N, h);
	uint16_t *g = xmalloc(nr * 2 + 2), *xh = xmalloc(nt * 2);
	if (G->download(gpu, g, o16, nr * 2) || G->download(gpu, xh, dX16, nt * 2))
		bail("download (rows_gather failed?)");
	size_t nd = 0;
	for (size_t i = 0; i < nr; i++)
		nd += g[i] != xh[(size_t)idx[i / h] * h + i % h];
	CHECK(nd == 0, "%s%s: rows_gather moves the 16-bit bits (%zu differ)", tag, id, nd);
	float *y;
	G->rows_combine(gpu, o16, dYE16, dt, dS, T, k, h);
	G->rows_combine(gpu, o32, dYE, MGT_DT_F32, dS, T, k, h);
	t_out16(nm("%s: rows_combine", id), o16, dt, y = dget(o32, nt), nt), free(y);
	G->rows_scale(gpu, o16, dYE16, dt, dW, N, h);
	G->rows_scale(gpu, o32, dYE, MGT_DT_F32, dW, N, h);
	t_out16(nm("%s: rows_scale", id), o16, dt, y = dget(o32, nr), nr);
	up(s16, g, nr * 2);
	G->rows_scale(gpu, s16, s16, dt, dW, N, h); /* in place, on the gathered rows */
	G->rows_gather(gpu, o32, dX, MGT_DT_F32, dI, N, h);
	G->rows_scale(gpu, o32, o32, MGT_DT_F32, dW, N, h);
	free(y);
	t_out16(nm("%s: rows_scale in place", id), s16, dt, y = dget(o32, nr), nr), free(y);
	G->rows_dot(gpu, d16, dYE16, s16, dt, N, h);
	G->widen(gpu, o32, s16, dt, nr);
	G->rows_dot(gpu, d32, dYE, o32, MGT_DT_F32, N, h);
	float *a = dget(d16, N), *b = dget(d32, N);
	CHECK(ndiff(a, b, N, 4) == 0, "%s%s: rows_dot of 16-bit rows, the fp32 op's bits on their values (%zu differ)", tag,
	      id, ndiff(a, b, N, 4));
	free(a), free(b);
	up(s16, g, nr * 2);
	G->add(gpu, s16, dYE16, dt, nr);
	G->rows_gather(gpu, o32, dX, MGT_DT_F32, dI, N, h);
	G->add(gpu, o32, dYE, MGT_DT_F32, nr);
	t_out16(nm("%s: add", id), s16, dt, y = dget(o32, nr), nr), free(y);
	/* grouped linears [N, h] -> [N, f] over 3 experts, the middle one empty */
	gpu->precision = prec;
	const int rows[3] = { N / 3, 0, N - N / 3 };
	const void *wg[3] = { dWT, dWT + (size_t)f * h, dWT + (size_t)f * h };
	float *dw1 = dput(dw0, (size_t)f * h * 2), *dw2 = dput(dw0, (size_t)f * h * 2);
	float *pg1[3] = { dw1, dw1 + (size_t)f * h, dw1 + (size_t)f * h }, *pg2[3] = { dw2, dw2 + (size_t)f * h, dw2 + (size_t)f * h };
	void *y16 = dalloc(nf * 2), *dx16 = dalloc(nr * 2);
	float *y32 = dalloc(nf * 4), *dx32 = dalloc(nr * 4);
	G->linear_fwd_grouped(gpu, y16, dYE16, dt, wg, MGT_DT_F32, rows, 3, h, f);
	G->linear_fwd_grouped(gpu, y32, dYE, MGT_DT_F32, wg, MGT_DT_F32, rows, 3, h, f);
	G->linear_bwd_grouped(gpu, dx16, pg2, dDY16, dYE16, dt, wg, MGT_DT_F32, rows, 3, h, f);
	G->linear_bwd_grouped(gpu, dx32, pg1, dDY, dYE, MGT_DT_F32, wg, MGT_DT_F32, rows, 3, h, f);
	gpu->precision = MGT_PREC_FP32;
	t_out16(nm("%s: linear_fwd_grouped y", id), y16, dt, y = dget(y32, nf), nf), free(y);
	t_out16(nm("%s: linear_bwd_grouped dx", id), dx16, dt, y = dget(dx32, nr), nr), free(y);
	a = dget(dw1, (size_t)f * h * 2), b = dget(dw2, (size_t)f * h * 2);
	CHECK(ndiff(a, b, (size_t)f * h * 2, 4) == 0, "%s%s: linear_bwd_grouped dw of 16-bit rows, the bits (%zu differ)",
	      tag, id, ndiff(a, b, (size_t)f * h * 2, 4));
	free(a), free(b), free(g), free(xh);
	dfree(dX16), dfree(dYE16), dfree(dDY16), dfree(dX), dfree(dYE), dfree(dDY), dfree(dW), dfree(dWT), dfree(dI),
		dfree(dS), dfree(o16), dfree(s16), dfree(o32), dfree(d16), dfree(d32), dfree(dw1), dfree(dw2), dfree(y16),
		dfree(dx16), dfree(y32), dfree(dx32);
	free(slot), free(idx), free(x), free(ye), free(w), free(wt), free(dy), free(dw0);
}

/* Grouped linear over G groups of rows[g] rows (some 0): against the CPU's grouped linear in the
 * same precision, and bit for bit against the GPU's own linear_fwd / linear_bwd per group.  The
 * experts' weights and gradients are G pieces of one device buffer each (as a model's flat
 * buffers hold them); rows past the end of y and dx must stay untouched. */
static void t_grouped(const int *rows, int NG, int in, int out, bool want_dx, mgt_precision prec)
{
	enum { GMAX = 16, PAD = 2 };
	int M = 0, kmax = 0;
	char rs[128];
	int n = 0;
	for (int g = 0; g < NG; g++) {
		M += rows[g];
		kmax = rows[g] > kmax ? rows[g] : kmax;
		if (n < 100)
			n += snprintf(rs + n, sizeof rs - n, "%s%d", g ? "," : "", rows[g]);
	}
	const size_t nx = (size_t)M * in, ny = (size_t)M * out, nw = (size_t)out * in;
	const char *id = nm("linear_grouped %s G=%d rows %s in=%d out=%d%s", precname(prec), NG, rs, in, out,
			    want_dx ? "" : " dx=NULL");
	float *x = hrand(nx, 1), *w = hrand(nw * NG, 0.5), *dy = hrand(ny, 1), *dw0 = hrand(nw * NG, 1);
	const void *wc[GMAX];
	float *dwc[GMAX];
	float *yc = xmalloc(ny * 4), *dxc = want_dx ? xmalloc(nx * 4) : NULL, *dwcb = hcopy(dw0, nw * NG);
	for (int g = 0; g < NG; g++)
		wc[g] = w + g * nw, dwc[g] = dwcb + g * nw;
	cpu->precision = prec;
	C->linear_fwd_grouped(cpu, yc, x, MGT_DT_F32, wc, MGT_DT_F32, rows, NG, in, out);
	C->linear_bwd_grouped(cpu, dxc, dwc, dy, x, MGT_DT_F32, wc, MGT_DT_F32, rows, NG, in, out);
	cpu->precision = MGT_PREC_FP32;

	gpu->precision = prec;
	float *dX = dput(x, nx), *dWb = dput(w, nw * NG), *dDY = dput(dy, ny);
	float *dY = dalloc((ny + (size_t)PAD * out) * 4), *dDX = want_dx ? dalloc((nx + (size_t)PAD * in) * 4) : NULL;
	float *dDWb = dalloc(nw * NG * 4), *dYP = dalloc(ny * 4 + 4), *dDXP = dalloc(nx * 4 + 4),
	      *dDWP = dalloc(nw * NG * 4);
	const void *dw_[GMAX];
	float *ddw[GMAX];
	for (int g = 0; g < NG; g++)
		dw_[g] = dWb + g * nw, ddw[g] = dDWb + g * nw;
	float *y[2], *dx[2] = { NULL, NULL }, *dw[2];
	for (int r = 0; r < 2; r++) {
		poison(dY, ny + (size_t)PAD * out);
		if (dDX)
			poison(dDX, nx + (size_t)PAD * in);
		up(dDWb, dw0, nw * NG * 4);
		G->linear_fwd_grouped(gpu, dY, dX, MGT_DT_F32, dw_, MGT_DT_F32, rows, NG, in, out);
		G->linear_bwd_grouped(gpu, dDX, ddw, dDY, dX, MGT_DT_F32, dw_, MGT_DT_F32, rows, NG, in, out);
		y[r] = dget(dY, ny + (size_t)PAD * out);
		if (dDX)
			dx[r] = dget(dDX, nx + (size_t)PAD * in);
		dw[r] = dget(dDWb, nw * NG);
	}
	/* the same through the GPU's linear layers, group by group */
	poison(dYP, ny);
	poison(dDXP, nx);
	up(dDWP, dw0, nw * NG * 4);
	for (int g = 0, r0 = 0; g < NG; r0 += rows[g], g++)
		if (rows[g]) {
			G->linear_fwd(gpu, dYP + (size_t)r0 * out, MGT_DT_F32, dX + (size_t)r0 * in, MGT_DT_F32, dw_[g], MGT_DT_F32, NULL, rows[g], in, out);
			G->linear_bwd(gpu, dDX ? dDXP + (size_t)r0 * in : NULL, MGT_DT_F32, dDWP + g * nw, NULL, dDY + (size_t)r0 * out, MGT_DT_F32,
				      dX + (size_t)r0 * in, MGT_DT_F32, dw_[g], MGT_DT_F32, rows[g], in, out);
		}
	float *yp = dget(dYP, ny), *dxp = dget(dDXP, nx), *dwp = dget(dDWP, nw * NG);
	gpu->precision = MGT_PREC_FP32;

	cmp(nm("%s: fwd y", id), y[0], yc, NULL, ny, lin_tol(prec, in));
	if (want_dx)
		cmp(nm("%s: bwd dx", id), dx[0], dxc, NULL, nx, lin_tol(prec, out));
	cmp(nm("%s: bwd dw (accumulated, all groups)", id), dw[0], dwcb, dw0, nw * NG, lin_tol(prec, kmax));
	size_t empty_changed = 0, past_end = 0;
	for (int g = 0; g < NG; g++)
		if (!rows[g])
			empty_changed += ndiff(dw[0] + g * nw, dw0 + g * nw, nw, 4);
	for (size_t i = 0; i < (size_t)PAD * out; i++)
		past_end += !isnan(y[0][ny + i]);
	for (size_t i = 0; want_dx && i < (size_t)PAD * in; i++)
		past_end += !isnan(dx[0][nx + i]);
	CHECK(empty_changed == 0 && past_end == 0,
	      "%s%s: empty groups' dw untouched (%zu changed), rows past the end untouched (%zu written)", tag, id,
	      empty_changed, past_end);
	CHECK(ndiff(y[0], yp, ny, 4) == 0 && (!want_dx || ndiff(dx[0], dxp, nx, 4) == 0) &&
		      ndiff(dw[0], dwp, nw * NG, 4) == 0,
	      "%s%s: bitwise the GPU's linear_fwd/bwd per group (y %zu, dx %zu, dw %zu differ)", tag, id,
	      ndiff(y[0], yp, ny, 4), want_dx ? ndiff(dx[0], dxp, nx, 4) : 0, ndiff(dw[0], dwp, nw * NG, 4));
	det(id, ndiff(y[0], y[1], ny, 4) + (want_dx ? ndiff(dx[0], dx[1], nx, 4) : 0) + ndiff(dw[0], dw[1], nw * NG, 4));
	for (int r = 0; r < 2; r++)
		free(y[r]), free(dx[r]), free(dw[r]);
	free(yp), free(dxp), free(dwp);
	dfree(dX), dfree(dWb), dfree(dDY), dfree(dY), dfree(dDX), dfree(dDWb), dfree(dYP), dfree(dDXP), dfree(dDWP);
	free(x), free(w), free(dy), free(dw0), free(yc), free(dxc), free(dwcb);
}

/* ================= cross-entropy ================= */

/* logits [T, V] = columns [v0, v0 + V) of a vocabulary of vtot; labels uniform over all of it */
/* The cross-entropy ops on 16-bit logits (type dt, made from lg by the cast op): max, sumexp and
 * target bit for bit those of the fp32 ops on the same values, the gradient (in place) the
 * rounding of the fp32 one; the GPU against itself, the simulator's CPU-run kernels too. */
static void t_xent16(const char *id0, mgt_elem_type dt, const float *lg, const int32_t *dLab,
		     const float *dMask, float scale, int64_t v0, int T, int V)
{
	const size_t n = (size_t)T * V;
	const char *id = nm("%s %s logits", id0, dt == MGT_DT_BF16 ? "bf16" : "fp16");
	uint16_t *h = xmalloc(n * 2);
	float *w = xmalloc(n * 4);
	C->cast(cpu, h, dt, lg, n);
	for (size_t i = 0; i < n; i++)
		w[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(h[i]) : mgt_f16_to_f32(h[i]);
	void *d16 = dalloc(n * 2);
	up(d16, h, n * 2);
	float *dW = dput(w, n), *m[2], *se[2], *tg[2];
	float *dm = dalloc((size_t)T * 4), *dse = dalloc((size_t)T * 4), *dtg = dalloc((size_t)T * 4);
	for (int k = 0; k < 2; k++) {
		G->xent_max(gpu, dm, k ? d16 : (void *)dW, k ? dt : MGT_DT_F32, T, V);
		G->xent_stats(gpu, dse, dtg, k ? d16 : (void *)dW, k ? dt : MGT_DT_F32, dLab, dm, v0, T, V);
		m[k] = dget(dm, T), se[k] = dget(dse, T), tg[k] = dget(dtg, T);
	}
	CHECK(!ndiff(m[0], m[1], T, 4) && !ndiff(se[0], se[1], T, 4) && !ndiff(tg[0], tg[1], T, 4),
	      "%s%s: xent_max, xent_stats bitwise those on the widened logits", tag, id);
	G->xent_bwd(gpu, dW, dW, MGT_DT_F32, dLab, dm, dse, dMask, scale, v0, T, V);
	G->xent_bwd(gpu, d16, d16, dt, dLab, dm, dse, dMask, scale, v0, T, V);
	float *g32 = dget(dW, n);
	t_out16(nm("%s: xent_bwd in place", id), d16, dt, g32, n);
	for (int k = 0; k < 2; k++)
		free(m[k]), free(se[k]), free(tg[k]);
	free(g32), free(h), free(w);
	dfree(d16), dfree(dW), dfree(dm), dfree(dse), dfree(dtg);
}

static void t_xent(int T, int V, int64_t v0, int64_t vtot)
{
	const size_t n = (size_t)T * V;
	const char *id = nm("xent T=%d V=%d v0=%lld of %lld", T, V, (long long)v0, (long long)vtot);
	float *lg = hrand(n, 4);
	for (int t = 0; t < T; t++) /* rows far above 0 (the max must be subtracted), all far below 0
				     * (the max is negative) and denormal-adjacent (a nearly flat softmax) */
		for (int c = 0; c < V && t % 7 < 3; c++) {
			float *v = &lg[(size_t)t * V + c];
			*v = t % 7 == 0 ? *v + 40.0f : t % 7 == 1 ? *v - 60.0f : *v * 2.5e-39f;
		}
	int32_t *lab = xmalloc((size_t)T * sizeof *lab);
	float *mask = xmalloc((size_t)T * sizeof *mask), nmask = 0;
	for (int t = 0; t < T; t++) {
		lab[t] = (int32_t)((urand() + 1) / 2 * (double)vtot) % (int32_t)vtot;
		mask[t] = urand() > -0.8 ? 1.0f : 0.0f; /* 10% masked */
	}
	int32_t ends[4] = { (int32_t)v0, (int32_t)(v0 + V - 1), (int32_t)(v0 + V < vtot ? v0 + V : v0),
			    (int32_t)(v0 > 0 ? v0 - 1 : v0) };
	for (int i = 0; i < 4 && i < T; i++)
		lab[i] = ends[i];
	mask[T - 1] = 0;
	mask[0] = 1;
	for (int t = 0; t < T; t++)
		nmask += mask[t];
	const float scale = 1.0f / nmask;
	float *mxc = xmalloc((size_t)T * 4), *sec = xmalloc((size_t)T * 4), *tgc = xmalloc((size_t)T * 4);
	float *lossc = xmalloc((size_t)T * 4), *dlc = xmalloc(n * 4);
	C->xent_max(cpu, mxc, lg, MGT_DT_F32, T, V);
	C->xent_stats(cpu, sec, tgc, lg, MGT_DT_F32, lab, mxc, v0, T, V);
	double sumc = C->xent_loss(cpu, lossc, mxc, sec, tgc, mask, T);
	C->xent_bwd(cpu, dlc, lg, MGT_DT_F32, lab, mxc, sec, mask, scale, v0, T, V);

	/* each GPU op gets the CPU's results of the ops before it: checked one by one */
	float *dLg = dput(lg, n), *dMask = dput(mask, T), *dMxc = dput(mxc, T), *dSec = dput(sec, T), *dTgc = dput(tgc, T);
	int32_t *dLab = dputi(lab, T);
	float *dMx = dalloc((size_t)T * 4), *dSe = dalloc((size_t)T * 4), *dTg = dalloc((size_t)T * 4);
	float *dLoss = dalloc((size_t)T * 4), *dDl = dalloc(n * 4);
	float *mx[2], *se[2], *tg[2], *loss[2], *dl[2];
	double sum[2];
	for (int k = 0; k < 2; k++) {
		poison(dMx, T);
		poison(dSe, T);
		poison(dTg, T);
		poison(dLoss, T);
		poison(dDl, n);
		G->xent_max(gpu, dMx, dLg, MGT_DT_F32, T, V);
		G->xent_stats(gpu, dSe, dTg, dLg, MGT_DT_F32, dLab, dMxc, v0, T, V);
		sum[k] = G->xent_loss(gpu, dLoss, dMxc, dSec, dTgc, dMask, T);
		G->xent_bwd(gpu, dDl, dLg, MGT_DT_F32, dLab, dMxc, dSec, dMask, scale, v0, T, V);
		mx[k] = dget(dMx, T);
		se[k] = dget(dSe, T);
		tg[k] = dget(dTg, T);
		loss[k] = dget(dLoss, T);
		dl[k] = dget(dDl, n);
	}
	cmp(nm("%s: xent_max", id), mx[0], mxc, NULL, T, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: xent_stats sumexp", id), se[0], sec, NULL, T, T2(TOL32, SIM_ULP));
	cmp(nm("%s: xent_stats target logit (0 outside the shard)", id), tg[0], tgc, NULL, T, T2(TOL_EXACT, SIM_EXACT));
	/* xent_loss and xent_bwd get the CPU's max and sumexp: the same formula on the same inputs
	 * (the same bits under the simulator), then a masked double sum of T equal per-token losses in
	 * another order (at most T 2^-52 relative) */
	cmp(nm("%s: xent_loss per token", id), loss[0], lossc, NULL, T, T2(TOL32, SIM_EXACT));
	double es = fabs(sum[0] - sumc) / fabs(sumc);
	/* the masked sum is taken in double on both sides, of per-token losses within 1 ulp */
	const tol2 ts = T2(1e-6, (double)T / 4503599627370496.0);
	CHECK(isfinite(sum[0]) && es <= tol_of(ts), "%s%s: xent_loss masked sum %.9g vs %.9g: err %.2e (%s)", tag, id,
	      sum[0], sumc, es, tol_str(ts));
	cmp_rows(nm("%s: xent_bwd dlogits", id), dl[0], dlc, NULL, T, (size_t)V, T2(TOL32, SIM_EXACT));
	size_t nzm = 0;
	for (int t = 0; t < T; t++)
		if (mask[t] == 0)
			for (int c = 0; c < V; c++)
				nzm += dl[0][(size_t)t * V + c] != 0.0f;
	CHECK(nzm == 0, "%s%s: xent_bwd masked rows exactly 0 (%zu nonzero)", tag, id, nzm);
	det(id, ndiff(mx[0], mx[1], T, 4) + ndiff(se[0], se[1], T, 4) + ndiff(tg[0], tg[1], T, 4) +
			ndiff(loss[0], loss[1], T, 4) + ndiff(dl[0], dl[1], n, 4) + ndiff(&sum[0], &sum[1], 1, 8));
	/* in place: dlogits == logits */
	G->xent_bwd(gpu, dLg, dLg, MGT_DT_F32, dLab, dMxc, dSec, dMask, scale, v0, T, V);
	float *ip = dget(dLg, n);
	cmp_rows(nm("%s: xent_bwd in place (dlogits = logits)", id), ip, dlc, NULL, T, (size_t)V, T2(TOL32, SIM_EXACT));
	free(ip);
	for (int k = 0; k < 2; k++)
		t_xent16(id, k ? MGT_DT_F16 : MGT_DT_BF16, lg, dLab, dMask, scale, v0, T, V);
	for (int k = 0; k < 2; k++)
		free(mx[k]), free(se[k]), free(tg[k]), free(loss[k]), free(dl[k]);
	dfree(dLg), dfree(dMask), dfree(dMxc), dfree(dSec), dfree(dTgc), dfree(dLab), dfree(dMx), dfree(dSe);
	dfree(dTg), dfree(dLoss), dfree(dDl);
	free(lg), free(lab), free(mask), free(mxc), free(sec), free(tgc), free(lossc), free(dlc);
}

/* ================= AdamW ================= */

static void t_adamw(size_t n, int64_t step)
{
	const char *id = nm("adamw n=%zu step=%lld", n, (long long)step);
	const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
	float *p0 = hrand(n, 0.02), *g = hrand(n, 0.01), *m0 = hrand(n, 0.01), *v0 = hrand(n, 1e-4);
	for (size_t i = 0; i < n; i++)
		v0[i] = fabsf(v0[i]) + 1e-12f;
	for (size_t i = 0; i < n; i += 97) /* exactly-zero gradients: eps matters */
		g[i] = 0;
	float *pc = hcopy(p0, n), *mc = hcopy(m0, n), *vc = hcopy(v0, n);
	C->adamw(cpu, pc, g, mc, vc, n, lr, b1, b2, eps, wd, step);
	float *dP = dalloc(n * 4), *dG = dput(g, n), *dM = dalloc(n * 4), *dV = dalloc(n * 4);
	float *p[2], *m[2], *v[2];
	for (int k = 0; k < 2; k++) {
		up(dP, p0, n * 4);
		up(dM, m0, n * 4);
		up(dV, v0, n * 4);
		G->adamw(gpu, dP, dG, dM, dV, n, lr, b1, b2, eps, wd, step);
		p[k] = dget(dP, n);
		m[k] = dget(dM, n);
		v[k] = dget(dV, n);
	}
	/* the CPU's arithmetic element by element: the same bits under the simulator */
	cmp(nm("%s: p", id), p[0], pc, NULL, n, T2(TOL_ADAM, SIM_EXACT));
	cmp(nm("%s: update p - p0", id), p[0], pc, p0, n, T2(TOL_ADAM_UPDATE, SIM_EXACT));
	cmp(nm("%s: m", id), m[0], mc, NULL, n, T2(TOL_ADAM, SIM_EXACT));
	cmp(nm("%s: v", id), v[0], vc, NULL, n, T2(TOL_ADAM, SIM_EXACT));
	det(id, ndiff(p[0], p[1], n, 4) + ndiff(m[0], m[1], n, 4) + ndiff(v[0], v[1], n, 4));
	for (int k = 0; k < 2; k++)
		free(p[k]), free(m[k]), free(v[k]);
	dfree(dP), dfree(dG), dfree(dM), dfree(dV);
	free(p0), free(g), free(m0), free(v0), free(pc), free(mc), free(vc);
}

/* ================= reductions ================= */

static void t_sumsq(size_t n)
{
	float *x = hrand(n, 2);
	double ref = C->sumsq(cpu, x, n);
	float *dX = dput(x, n);
	double s1 = G->sumsq(gpu, dX, n), s2 = G->sumsq(gpu, dX, n);
	double e = ref > 0 ? fabs(s1 - ref) / ref : fabs(s1 - ref);
	/* under the simulator: the worst case of a positive double sum in another order, n 2^-53 */
	const tol2 t = T2(TOL_SUMSQ, fmin(TOL_SUMSQ, (double)n / 9007199254740992.0));
	CHECK(isfinite(s1) && e <= tol_of(t), "%ssumsq n=%zu: %.17g vs cpu %.17g: err %.2e (%s)", tag, n, s1, ref, e,
	      tol_str(t));
	det(nm("sumsq n=%zu", n), ndiff(&s1, &s2, 1, 8));
	if (n > 10) {
		float keep = x[n / 2], nanv = NAN, infv = INFINITY;
		up(dX + n / 2, &nanv, 4);
		double sn = G->sumsq(gpu, dX, n);
		up(dX + n / 2, &infv, 4);
		double si = G->sumsq(gpu, dX, n);
		up(dX + n / 2, &keep, 4);
		CHECK(isnan(sn) && isinf(si), "%ssumsq n=%zu propagates NaN (%g) and Inf (%g)", tag, n, sn, si);
	}
	dfree(dX);
	free(x);
}

static void t_scale_add(size_t n)
{
	const char *id = nm("scale, add n=%zu", n);
	float *x = hrand(n, 3), *y = hrand(n, 1);
	float *xc = hcopy(x, n), *yc = hcopy(y, n);
	C->scale(cpu, xc, n, 0.37f);
	C->add(cpu, yc, x, MGT_DT_F32, n);
	float *dX = dalloc(n * 4), *dY = dalloc(n * 4), *dS = dput(x, n);
	float *xs[2], *ya[2];
	for (int k = 0; k < 2; k++) {
		up(dX, x, n * 4);
		up(dY, y, n * 4);
		G->scale(gpu, dX, n, 0.37f);
		G->add(gpu, dY, dS, MGT_DT_F32, n);
		xs[k] = dget(dX, n);
		ya[k] = dget(dY, n);
	}
	/* one IEEE multiply / add per element on both sides */
	cmp(nm("scale n=%zu alpha=0.37", n), xs[0], xc, NULL, n, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("add n=%zu", n), ya[0], yc, NULL, n, T2(TOL_EXACT, SIM_EXACT));
	det(id, ndiff(xs[0], xs[1], n, 4) + ndiff(ya[0], ya[1], n, 4));
	for (int k = 0; k < 2; k++)
		free(xs[k]), free(ya[k]);
	dfree(dX), dfree(dY), dfree(dS);
	free(x), free(y), free(xc), free(yc);
}

static void t_reductions(void)
{
	t_sumsq(50 * 1000 * 1000 + 17);
	t_sumsq(100003);
	t_sumsq(10);
	t_sumsq(1);
	float one = 1.5f, *d = dput(&one, 1);
	double z = G->sumsq(gpu, d, 0);
	CHECK(z == 0.0, "%ssumsq of 0 elements is 0 (%g)", tag, z);
	dfree(d);
	t_scale_add(10 * 1000 * 1000 + 3);
	t_scale_add(5);
	t_scale_add(1);
}

/* ================= driver ================= */

static double t_section;
/* Starts section `name` (NULL: ends the last); false for a section that an earlier pass already
 * ran (before a recovery: bail). */
static bool section(const char *name)
{
	double now = mgt_now();
	if (name && sec_no++ < resume_from)
		return false;
	if (name && getenv("MGT_TEST_ONLY") && !strstr(name, getenv("MGT_TEST_ONLY")))
		return false;
	if (t_section > 0)
		printf("# (%.1f s)\n", now - t_section);
	t_section = now;
	if (name)
		printf("# ---- %s%s\n", tag, name);
#ifdef MGT_CUDA_SIM
	mgt_sim_prof_tag(name);
#endif
	fflush(stdout);
	return true;
}

static void on_alarm(int sig)
{
	static const char msg[] = "not ok - test_cuda_ops still running after 900 s: the device hangs?\n";
	(void)sig;
	if (write(1, msg, sizeof msg - 1) < 0) {
		/* nothing to do */
	}
	_exit(1);
}

/* ---- fp8's quantizing cast (backend.h fp8_quantize; lib/fp8) ----
 * Inputs over the whole range of both formats: random magnitudes 2^-24..2^18 of both signs, the
 * midpoints between neighbouring fp8 values and the floats next to them (the rounding boundaries,
 * divided by the scale so that x * scale lands on them when the scale is a power of two), zeros,
 * NaN, values past the largest.  The bytes and the amax must be the CPU's bit for bit (one
 * fp32 multiply and lib/util's rounding rule on both sides). */
static float *fp8_inputs(size_t n, float scale)
{
	float *x = hrand(n, 1.0);
	size_t k = 0;
	for (int f = 0; f < 2 && k + 8 < n; f++)
		for (unsigned c = 0; c + 1 < 256 && k + 8 < n; c++) {
			const float lo = mgt_fp8_to_f32((uint8_t)c, (mgt_fp8_format)f), hi = mgt_fp8_to_f32((uint8_t)(c + 1), (mgt_fp8_format)f);
			if (!isfinite(lo) || !isfinite(hi) || c == 0x7f)
				continue;
			const float m = (lo + hi) / 2;
			x[k++] = m / scale, x[k++] = nextafterf(m, 0.0f) / scale, x[k++] = nextafterf(m, INFINITY) / scale;
		}
	/* (no infinities: they would make every amax +inf; lib/util's tests cover their saturation) */
	const float special[] = {0.0f, -0.0f, NAN, -NAN, -500.0f, 70000.0f, 1e-45f, -3e-39f};
	for (size_t i = 0; i < sizeof special / sizeof *special && k < n; i++)
		x[k++] = special[i];
	for (; k < n; k++) { /* random magnitudes 2^-24..2^18 */
		const double u = (urand() + 1) / 2; /* [0, 1) */
		x[k] = (float)ldexp(0.5 + (urand() + 1) / 4, (int)(u * 42) - 24) * (urand() < 0 ? -1.0f : 1.0f);
	}
	return x;
}

static void t_fp8_quantize(size_t n, float scale, mgt_elem_type xt)
{
	const char *id = nm("fp8_quantize n=%zu scale=%g x %s", n, scale, xt == MGT_DT_F32 ? "fp32" : "bf16");
	float *x = fp8_inputs(n, scale);
	void *d16 = NULL;
	float *dX = xt == MGT_DT_F32 ? dput(x, n) : dput16(x, n, xt, &d16);
	if (xt != MGT_DT_F32) /* the CPU gets the same bf16 values */
		free(x), x = dget(dX, n);
	const void *gx = xt == MGT_DT_F32 ? (const void *)dX : d16;
	uint16_t *x16 = NULL;
	if (xt != MGT_DT_F32) {
		x16 = xmalloc(n * 2);
		C->cast(cpu, x16, xt, x, n);
	}
	const void *cx = xt == MGT_DT_F32 ? (const void *)x : x16;
	float two[2] = {scale, 0.75f}, *dS = dput(two, 2);
	for (int f = 0; f < 2; f++) {
		const mgt_fp8_format fmt = (mgt_fp8_format)f;
		uint8_t *qc = xmalloc(n), *qg = xmalloc(n);
		uint8_t *dQ = dalloc(n);
		float ac = 0.75f, ag;
		C->fp8_quantize(cpu, qc, cx, xt, n, &scale, fmt, &ac);
		G->fp8_quantize(gpu, dQ, gx, xt, n, dS, fmt, dS + 1); /* amax starts at 0.75 as the CPU's */
		if (G->download(gpu, qg, dQ, n) != MGT_OK || G->download(gpu, &ag, dS + 1, 4) != MGT_OK)
			bail("download (fp8_quantize failed?)");
		size_t nd = 0;
		for (size_t i = 0; i < n; i++)
			nd += qg[i] != qc[i];
		CHECK(nd == 0, "%s%s %s: bytes the CPU's bit for bit (%zu of %zu differ)", tag, id, f ? "e5m2" : "e4m3", nd, n);
		CHECK(ag == ac, "%s%s %s: amax the CPU's (%a vs %a)", tag, id, f ? "e5m2" : "e4m3", (double)ag, (double)ac);
		G->fp8_quantize(gpu, NULL, gx, xt, n, dS, fmt, dS + 1);
		if (G->download(gpu, &ag, dS + 1, 4) != MGT_OK)
			bail("download (fp8_quantize failed?)");
		CHECK(ag == ac, "%s%s %s: q NULL: the amax alone, accumulated (%a)", tag, id, f ? "e5m2" : "e4m3", (double)ag);
		up(dS + 1, &two[1], 4); /* amax back to 0.75 for the next format */
		free(qc), free(qg), dfree(dQ);
	}
	free(x), free(x16), dfree(dX), dfree(d16), dfree(dS);
}

/* Current scaling (backend.h fp8_scale): the scale and its reciprocal from amaxes of every kind
 * (0, NaN, +Inf, subnormals whose quotient overflows to FLT_MAX, ordinary and huge values, the
 * largest fp8 values themselves) for both formats, bit for bit the CPU's. */
static void t_fp8_scale(void)
{
	const float amax[] = {0.0f, NAN, INFINITY, 1e-45f, 1e-38f, 3e-36f, 0.5f, 1.0f, 3.0f, 448.0f, 57344.0f,
			      123.456f, 7e37f, FLT_MAX, 0.1f, 1e-7f};
	const int n = (int)(sizeof amax / sizeof *amax);
	float *dA = dput(amax, (size_t)n), *dS = dalloc((size_t)2 * 4);
	int bad = 0;
	for (int f = 0; f < 2; f++)
		for (int i = 0; i < n; i++) {
			const float mx = f ? 57344.0f : 448.0f;
			float c[2], g[2];
			C->fp8_scale(cpu, c, c + 1, amax + i, mx);
			G->fp8_scale(gpu, dS, dS + 1, dA + i, mx);
			if (G->download(gpu, g, dS, sizeof g) != MGT_OK)
				bail("download (fp8_scale failed?)");
			if (memcmp(c, g, sizeof c)) {
				bad++;
				printf("# fp8_scale amax %a max %g: cpu %a %a, gpu %a %a\n", (double)amax[i], (double)mx, (double)c[0],
				       (double)c[1], (double)g[0], (double)g[1]);
			}
		}
	CHECK(bad == 0, "%sfp8_scale: %d amaxes x 2 formats, scale and scale_inv the CPU's bit for bit (%d differ)", tag, n,
	      bad);
	dfree(dA), dfree(dS);
}

/* ---- fp8 transpose and GEMM (backend.h fp8_transpose, gemm_fp8) ---- */

/* n random fp8 bytes of format f, none a NaN or Inf code */
static uint8_t *fp8_random(size_t n, mgt_fp8_format f)
{
	uint8_t *q = xmalloc(n);
	for (size_t i = 0; i < n; i++)
		do
			q[i] = (uint8_t)((urand() + 1) * 128);
		while (!isfinite(mgt_fp8_to_f32(q[i], f)));
	return q;
}

/* The transpose: random bytes (NaN codes too: it copies bytes), bit for bit the CPU's.  rows stays
 * even under the simulator, whose race check sees 2-byte units: dst rows of odd length would put
 * two blocks' bytes into one unit, which a GPU's byte stores allow. */
static void t_fp8_transpose(int rows, int cols)
{
	const char *id = nm("fp8_transpose rows=%d cols=%d", rows, cols);
	const size_t n = (size_t)rows * cols;
	uint8_t *src = xmalloc(n), *tc = xmalloc(n), *tg[2] = {xmalloc(n), xmalloc(n)};
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)((urand() + 1) * 128);
	C->fp8_transpose(cpu, tc, src, rows, cols);
	uint8_t *dS = dalloc(n), *dT = dalloc(n);
	up(dS, src, n);
	for (int r = 0; r < 2; r++) {
		memset(tg[r], 0xFF, n);
		up(dT, tg[r], n); /* 0xFF: a byte not written shows unless the source had 0xFF there */
		G->fp8_transpose(gpu, dT, dS, rows, cols);
		if (G->download(gpu, tg[r], dT, n) != MGT_OK)
			bail("download (fp8_transpose failed?)");
	}
	CHECK(ndiff(tg[0], tc, n, 1) == 0, "%s%s: bytes the CPU's bit for bit (%zu of %zu differ)", tag, id,
	      ndiff(tg[0], tc, n, 1), n);
	det(id, ndiff(tg[0], tg[1], n, 1));
	free(src), free(tc), free(tg[0]), free(tg[1]), dfree(dS), dfree(dT);
}

/* One kind of gemm_fp8 call: B's format, D's type, bias, accumulate, fast accumulation. */
typedef struct {
	const char *name;
	mgt_fp8_format bf;
	mgt_elem_type dt;
	bool bias, acc, fast;
} fp8_case;

/* The three GEMMs of a linear (backend.h gemm_fp8; Transformer Engine's pytorch/module/linear.py), and the other paths: a 16-bit
 * D written by cuBLASLt from e4m3 x e4m3, an fp32 D written, an fp32 D with a bias accumulated. */
static const fp8_case FP8_FWD = {"fwd e4m3 x e4m3 -> bf16 + bias (fast)", MGT_FP8_E4M3, MGT_DT_BF16, true, false, true};
static const fp8_case FP8_DGRAD = {"dgrad e4m3 x e5m2 -> bf16", MGT_FP8_E5M2, MGT_DT_BF16, false, false, false};
static const fp8_case FP8_WGRAD = {"wgrad e4m3 x e5m2 -> fp32 +=", MGT_FP8_E5M2, MGT_DT_F32, false, true, false};
static const fp8_case FP8_F16 = {"e4m3 x e4m3 -> fp16 (fast)", MGT_FP8_E4M3, MGT_DT_F16, false, false, true};
static const fp8_case FP8_F32 = {"e4m3 x e4m3 -> fp32", MGT_FP8_E4M3, MGT_DT_F32, false, false, false};
static const fp8_case FP8_F32B = {"e4m3 x e5m2 -> fp32 + bias +=", MGT_FP8_E5M2, MGT_DT_F32, true, true, false};

/* rows x k fp8 bytes of format f holding integers in [-lim, lim] (exact in both formats for lim <= 8),
 * zero off every stride-th position of a row (shifted by the row), so that a row has at most
 * ceil(k / stride) nonzeros. */
static uint8_t *fp8_ints(int rows, int k, mgt_fp8_format f, int lim, int stride)
{
	uint8_t *q = xmalloc((size_t)rows * k);
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < k; c++) {
			const int v = (c + r) % stride ? 0 : (int)floor((urand() + 1) / 2 * (2 * lim + 1)) - lim;
			q[(size_t)r * k + c] = mgt_f32_to_fp8((float)v, f);
		}
	return q;
}

/* S[j, i] = sum_k |A[i, k] B[j, k]| in double: the scale of each output's rounding errors */
static double *fp8_abs_sums(const uint8_t *a, const uint8_t *b, mgt_fp8_format bf, int m, int n, int k)
{
	float ta[256], tb[256];
	for (int v = 0; v < 256; v++)
		ta[v] = fabsf(mgt_fp8_to_f32((uint8_t)v, MGT_FP8_E4M3)), tb[v] = fabsf(mgt_fp8_to_f32((uint8_t)v, bf));
	double *S = xmalloc((size_t)m * n * sizeof *S);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int q = 0; q < k; q++)
				s += (double)ta[a[(size_t)i * k + q]] * tb[b[(size_t)j * k + q]];
			S[(size_t)j * m + i] = s;
		}
	return S;
}

static double elem_value(const void *p, mgt_elem_type t, size_t e)
{
	if (t == MGT_DT_F32)
		return ((const float *)p)[e];
	const uint16_t h = ((const uint16_t *)p)[e];
	return t == MGT_DT_BF16 ? mgt_bf16_to_f32(h) : mgt_f16_to_f32(h);
}

/* One unit in the last place of D's type at |x| (fp32: 2^-23 relative) */
static double ulp_of(mgt_elem_type t, double x)
{
	int e;
	frexp(x, &e);
	if (t == MGT_DT_F32)
		return ldexp(fabs(x), -23);
	return t == MGT_DT_BF16 ? ldexp(1, e - 8) : ldexp(1, (e > -13 ? e : -13) - 11);
}

/* |gpu - cpu| <= tol (s S[e] + |bias[i]|) + one ulp of D's type at the larger of the two (each
 * side rounds its own sum: a 16-bit D by up to half an ulp, an accumulated fp32 D once more), for
 * every element e = (j, i) of D [n, m]; prints the largest |gpu - cpu| / (s S). */
static void fp8_cmp(const char *id, const void *g, const void *c, mgt_elem_type dt, const double *S, double s,
		    const float *bias, int m, int n, tol2 t)
{
	const double tol = tol_of(t);
	double worst = 0, rel = 0;
	size_t bad = 0, we = 0;
	for (size_t e = 0; e < (size_t)m * n; e++) {
		const double gv = elem_value(g, dt, e), cv = elem_value(c, dt, e), d = fabs(gv - cv);
		if (!isfinite(gv) || !isfinite(cv)) {
			bad++;
			continue;
		}
		const double base = s * S[e] + (bias ? fabs(bias[e % (size_t)m]) : 0.0);
		const double lim = tol * base + ulp_of(dt, fmax(fabs(gv), fabs(cv)));
		const double r = d == 0 ? 0 : lim > 0 ? d / lim : INFINITY;
		if (r > worst)
			worst = r, we = e;
		if (s * S[e] > 0 && d / (s * S[e]) > rel)
			rel = d / (s * S[e]);
	}
	CHECK(!bad && worst <= 1, "%s%s: |gpu - cpu| within tol * (s sum|a b| + |bias|) + 1 ulp of D (%s): worst %.2f of "
	      "that at element %zu, %zu NaN/Inf", tag, id, tol_str(t), worst, we, bad);
	printf("#   largest |gpu - cpu| / (s sum|a b|): %.3g\n", rel);
}

/* gemm_fp8 tolerance relative to s sum|a b|: under the simulator both sides sum exact products in
 * fp32 in their own orders (each off by at most (k - 1) u sum|a b|, u = 2^-24), the stand-in scales
 * in double, the CPU by fl32(a_inv b_inv), and a bias add rounds: (2k + 8) u.  A GPU's tensor cores
 * accumulate fp8 products with about 14 bits between promotions to fp32 (Transformer Engine's pytorch/module/linear.py; less with
 * fast accumulation): 2^-8, while a wrong element or scale moves an output by about sum|a b| / sqrt(k). */
static tol2 fp8_tol(int k) { return T2(1.0 / 256, (2.0 * k + 8) / 16777216.0); }

/* A gemm_fp8 call of case c, A [m, k] e4m3, B [n, k]: exact (integer values whose partial sums
 * stay below 2^11 in magnitude, power-of-two scale_invs, a bias and a start of D on a grid that
 * sums exactly: the GPU's bits must be the CPU's whatever its summation order and accumulator,
 * TE's pytorch/module/linear.py) or random (any finite bytes, scale_invs 0.0123 and 3.7: within fp8_tol).
 * Twice on the GPU: the same bits. */
static void t_gemm_fp8(const fp8_case *c, int m, int n, int k, bool exact)
{
	const char *id = nm("gemm_fp8 %s m=%d n=%d k=%d %s", c->name, m, n, k, exact ? "exact" : "random");
	const size_t na = (size_t)m * k, nb = (size_t)n * k, nd = (size_t)m * n, es = mgt_elem_size(c->dt);
	const int lim = (int)fmin(8, fmax(1, floor(sqrt(2040.0 / k))));
	const int stride = (int)ceil((double)k * lim * lim / 2040.0);
	uint8_t *a = exact ? fp8_ints(m, k, MGT_FP8_E4M3, lim, stride) : fp8_random(na, MGT_FP8_E4M3);
	uint8_t *b = exact ? fp8_ints(n, k, c->bf, lim, 1) : fp8_random(nb, c->bf);
	double *S = exact ? NULL : fp8_abs_sums(a, b, c->bf, m, n, k);
	const float sc[2] = {exact ? 0.125f : 0.0123f, exact ? 4.0f : 3.7f}; /* a_inv, b_inv */
	const double grid = exact ? 0.0625 : 0; /* exact: bias and start of D multiples of 2^-4, below 100 and 8 */
	float *bias = c->bias ? hrand(m, 100) : NULL, *d0 = c->acc ? hrand(nd, 1000) : NULL;
	for (int i = 0; grid > 0 && bias && i < m; i++)
		bias[i] = (float)(round(bias[i] / grid) * grid);
	for (size_t e = 0; grid > 0 && d0 && e < nd; e++)
		d0[e] = (float)(round(d0[e] / 8) * grid);
	double smax = 0; /* exact: sum |a b| <= (the largest sum |a| of a row of A) lim */
	for (int i = 0; exact && i < m; i++) {
		double r = 0;
		for (int q = 0; q < k; q++)
			r += fabs(mgt_fp8_to_f32(a[(size_t)i * k + q], MGT_FP8_E4M3));
		smax = fmax(smax, r * lim);
	}
	if (exact)
		CHECK(smax < 2048, "%s%s: test inputs: sum |a b| at most %.0f < 2^11", tag, id, smax);
	void *dc = xmalloc(nd * es), *dg[2] = {xmalloc(nd * es), xmalloc(nd * es)};
	if (d0)
		memcpy(dc, d0, nd * 4);
	C->gemm_fp8(cpu, dc, c->dt, c->acc, bias, a, MGT_FP8_E4M3, &sc[0], b, c->bf, &sc[1], m, n, k, c->fast);
	uint8_t *dA = dalloc(na), *dB = dalloc(nb);
	up(dA, a, na), up(dB, b, nb);
	float *dS = dput(sc, 2), *dBias = bias ? dput(bias, m) : NULL;
	void *dD = dalloc(nd * es);
	for (int r = 0; r < 2; r++) {
		if (d0)
			up(dD, d0, nd * 4);
		else
			memset(dg[r], 0xFF, nd * es), up(dD, dg[r], nd * es); /* NaN: an element not written shows */
		G->gemm_fp8(gpu, dD, c->dt, c->acc, dBias, dA, MGT_FP8_E4M3, dS, dB, c->bf, dS + 1, m, n, k, c->fast);
		if (G->download(gpu, dg[r], dD, nd * es) != MGT_OK)
			bail("download (gemm_fp8 failed?)");
	}
	if (exact)
		CHECK(ndiff(dg[0], dc, nd, es) == 0, "%s%s: D the CPU's bit for bit (%zu of %zu differ)", tag, id,
		      ndiff(dg[0], dc, nd, es), nd);
	else
		fp8_cmp(id, dg[0], dc, c->dt, S, (double)(sc[0] * sc[1]), bias, m, n, fp8_tol(k));
	det(id, ndiff(dg[0], dg[1], nd, es));
	free(a), free(b), free(S), free(bias), free(d0), free(dc), free(dg[0]), free(dg[1]);
	dfree(dA), dfree(dB), dfree(dS), dfree(dBias), dfree(dD);
}

/* mgt_backend_supports(be, MGT_OP_gemm_fp8, ...): the CPU always; the GPU by its compute capability and cuBLASLt
 * (under the simulator also the refusals, MGT_SIM_CC and MGT_SIM_LT_VERSION).  Returns the GPU's. */
static bool t_fp8_supported(void)
{
	char why[256] = "";
	CHECK(mgt_backend_supports(cpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why), "fp8 supported on the CPU (the emulation)");
	const bool ok = mgt_backend_supports(gpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why);
	printf("# fp8 GEMMs on this GPU: %s%s\n", ok ? "yes" : "no: ", ok ? "" : why);
	if (SIM) {
		setenv("MGT_SIM_CC", "8.0", 1);
		bool r = mgt_backend_supports(gpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why);
		CHECK(!r && strstr(why, "8.9") && strstr(why, "compute capability 8.0"), "fp8 refused on sm_80: %s", why);
		unsetenv("MGT_SIM_CC");
		setenv("MGT_SIM_LT_VERSION", "120102", 1);
		r = mgt_backend_supports(gpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why);
		CHECK(!r && strstr(why, "12.1.2"), "fp8 refused with cuBLASLt 12.1.2: %s", why);
		setenv("MGT_SIM_CC", "8.9", 1);
		setenv("MGT_SIM_LT_VERSION", "120103", 1);
		CHECK(mgt_backend_supports(gpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why), "fp8 supported on sm_89 with cuBLASLt 12.1.3");
		unsetenv("MGT_SIM_CC"), unsetenv("MGT_SIM_LT_VERSION");
		CHECK(ok, "fp8 supported on the simulated sm_90");
	}
	return ok;
}

/* The transposes, then each GEMM case exact and random on the shapes of a linear y[T, out] =
 * x[T, in] w[out, in]^T (fwd m out, n T, k in; dgrad m in, n T, k out; wgrad m in, n out, k T);
 * the GEMMs skipped (one line) on a GPU without fp8. */
static void fp8_gemm_ops(const int *tr, int ntr, int T, int in, int out)
{
	for (int i = 0; i < ntr; i++)
		t_fp8_transpose(tr[2 * i], tr[2 * i + 1]);
	if (!t_fp8_supported()) {
		CHECK(1, "gemm_fp8 # SKIP this GPU has no fp8 GEMMs");
		return;
	}
	for (int ex = 1; ex >= 0; ex--) {
		t_gemm_fp8(&FP8_FWD, out, T, in, ex);
		t_gemm_fp8(&FP8_DGRAD, in, T, out, ex);
		t_gemm_fp8(&FP8_WGRAD, in, out, T, ex);
		t_gemm_fp8(&FP8_F32B, out, T, in, ex);
		t_gemm_fp8(&FP8_F32, in, out, T, ex);
	}
	t_gemm_fp8(&FP8_F16, out, T, in, true); /* (random bytes overflow fp16) */
}

/* ---- the Mamba-2 mixer (backend.h MGT_BACKEND_MAMBA_OPS: kernels/mamba.cu, kernels/ssd.cu) ---- */

/* The conv: the same fp32 products in the same order as cpu_mamba.c, so under the simulator the
 * same bits but for silu's expf; the weight gradients are double sums in another order, rounded
 * once. */
#define SIM_MAMBA SIM_ULP
/* The scan: its chunk products are fp32 sums of up to 128 terms in another order than the CPU's
 * sgemm (cpu_ssd.c): y, states, dx/dB/dC and ddt_raw measured 0..1.4e-7 under the simulator over
 * 30 seeds of the small shapes; 7e-7 is 5x that (a dropped term or a wrong mask gives 1e-3 and
 * more).  ddt_bias and dA_log sum every row's dt gradient, terms of both signs that cancel in
 * part, which amplifies those roundings: measured up to 1.9e-6; 1e-5.  On a GPU TOL32 for the
 * tensors and 5e-5 for those two sums (not yet measured on a GPU: expf, log1pf and fused
 * multiply-adds differ from the CPU's there, and the cancellation amplifies them the same way). */
#define SIM_SSD 7e-7
#define SIM_SSD_SUMS 1e-5
#define TOL_SSD_SUMS 5e-5

/* A copy of h [n] for the CPU side and its device copy: the same start for "written" outputs
 * whose unwritten columns must stay as they were. */
static float *dmirror(const float *h, size_t n, float **cpu_copy)
{
	*cpu_copy = hcopy(h, n);
	return dput(h, n);
}

/* Causal depthwise conv1d + SiLU over a row-strided x [L*b, ld] (ld >= CD), packed documents
 * when docs; both directions, twice on the GPU for determinism. */
static void t_mamba_conv(int L, int b, int CD, int K, int ld, bool docs)
{
	const size_t T = (size_t)L * b, nx = T * ld, ny = T * CD, nw = (size_t)CD * K;
	const char *id = nm("mamba conv L=%d b=%d CD=%d ld=%d%s", L, b, CD, ld, docs ? " packed" : "");
	float *x = hrand(nx, 1.5), *w = hrand(nw, 0.7), *bias = hrand(CD, 0.5), *dy = hrand(ny, 1);
	float *dx0 = hrand(nx, 1), *dw0 = hrand(nw, 1), *db0 = hrand(CD, 1), *dxc, *dwc, *dbc;
	int32_t *seg = docs ? packed_starts(L, b, 9) : NULL;
	float *yc = xmalloc(ny * 4);
	float *dX = dput(x, nx), *dW = dput(w, nw), *dBi = dput(bias, CD), *dDY = dput(dy, ny), *dY = dalloc(ny * 4);
	float *dDX = dmirror(dx0, nx, &dxc), *dDW = dmirror(dw0, nw, &dwc), *dDB = dmirror(db0, CD, &dbc);
	int32_t *dS = seg ? dputi(seg, T) : NULL;
	C->mamba_conv_fwd(cpu, yc, x, ld, w, bias, seg, L, b, CD, K, MGT_DT_F32);
	C->mamba_conv_bwd(cpu, dxc, dwc, dbc, dy, x, ld, w, bias, seg, L, b, CD, K, MGT_DT_F32);
	float *y[2], *dx[2], *dw[2], *db[2];
	for (int k = 0; k < 2; k++) {
		poison(dY, ny);
		up(dDX, dx0, nx * 4), up(dDW, dw0, nw * 4), up(dDB, db0, (size_t)CD * 4);
		G->mamba_conv_fwd(gpu, dY, dX, ld, dW, dBi, dS, L, b, CD, K, MGT_DT_F32);
		G->mamba_conv_bwd(gpu, dDX, dDW, dDB, dDY, dX, ld, dW, dBi, dS, L, b, CD, K, MGT_DT_F32);
		y[k] = dget(dY, ny), dx[k] = dget(dDX, nx), dw[k] = dget(dDW, nw), db[k] = dget(dDB, CD);
	}
	cmp(nm("%s: fwd y", id), y[0], yc, NULL, ny, T2(TOL32, SIM_MAMBA));
	cmp(nm("%s: bwd dx (columns past CD kept)", id), dx[0], dxc, NULL, nx, T2(TOL32, SIM_MAMBA));
	cmp(nm("%s: bwd dw (accumulated)", id), dw[0], dwc, dw0, nw, colsum_tol((long)T));
	cmp(nm("%s: bwd db (accumulated)", id), db[0], dbc, db0, CD, colsum_tol((long)T));
	det(id, ndiff(y[0], y[1], ny, 4) + ndiff(dx[0], dx[1], nx, 4) + ndiff(dw[0], dw[1], nw, 4) +
			ndiff(db[0], db[1], CD, 4));
	for (int k = 0; k < 2; k++)
		free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
	dfree(dX), dfree(dW), dfree(dBi), dfree(dDY), dfree(dY), dfree(dDX), dfree(dDW), dfree(dDB), dfree(dS);
	free(x), free(w), free(bias), free(dy), free(dx0), free(dw0), free(db0), free(dxc), free(dwc), free(dbc);
	free(seg), free(yc);
}

/* mamba_step (inference: conv and SSM state caches, tokens in order): B = 3 cache sequences whose
 * rows interleave, in calls of several sizes that carry the states, sequence 1 restarting at
 * position 0 in the fifth call, and every sequence's first token at position 0 over states that
 * start as garbage (the zeroing is checked).  xbc [T, ld] and dt_raw [T, ld_dt] row-strided wider
 * than read; a few dt_raw at 100 take softplus's v > 20 branch (e^v would overflow).  Both sides run the same fp32
 * products in the same order (cpu_mamba.c step_conv, step_head), so under the simulator the same
 * bits (host expf and log1pf on both sides: measured 0 on every output); on a GPU expf, log1pf
 * and fused multiply-adds differ by ulps (TOL32), and the conv state is a copy (exact). */
static void t_mamba_step(int nh, int g, int p, int n, int K, int ld_pad, int ld_dt_pad)
{
	enum { NB = 3, NC = 7, RESTART_CALL = 4 };
	static const int calls[NC] = { 7, 1, 5, 2, 9, 1, 4 };
	const int di = nh * p, CD = di + 2 * g * n, ld = CD + ld_pad, ld_dt = nh + ld_dt_pad;
	int T = 0;
	for (int k = 0; k < NC; k++)
		T += calls[k];
	const char *id = nm("mamba step nh=%d g=%d p=%d n=%d K=%d ld=%d", nh, g, p, n, K, ld);
	const size_t ncs = (size_t)NB * (K - 1) * CD, nss = (size_t)NB * di * n, ny = (size_t)T * di, nu = (size_t)T * CD;
	float *xbc = hrand((size_t)T * ld, 1.5), *dtr = hrand((size_t)T * ld_dt, 1.5), *w = hrand((size_t)CD * K, 0.5);
	float *cb = hrand(CD, 0.3), *dtb = hrand(nh, 0.5), *alog = hrand(nh, 1.0), *Dv = hrand(nh, 1.0);
	float *cs0 = hrand(ncs, 1.0), *ss0 = hrand(nss, 1.0);
	int32_t *seq = xmalloc((size_t)T * sizeof *seq), *pos = xmalloc((size_t)T * sizeof *pos);
	int len[NB] = { 0, 0, 0 }, t0 = 0;
	for (int k = 0, t = 0; k < NC; k++)
		for (int i = 0; i < calls[k]; i++, t++) {
			seq[t] = (int32_t)((urand() + 1.0) * 1.5) % NB;
			if (k == RESTART_CALL && i == 2)
				seq[t] = 1, len[1] = 0;
			pos[t] = len[seq[t]]++;
			if (t % 5 == 3)
				dtr[(size_t)t * ld_dt + t % nh] = 100.0f;
		}
	const mgt_ssd d = { .nh = nh, .p = p, .g = g, .n = n, .ld_dt = ld_dt };
	float *yc = xmalloc(ny * 4), *uc = xmalloc(nu * 4), *csc = hcopy(cs0, ncs), *ssc = hcopy(ss0, nss);
	float *dX = dput(xbc, (size_t)T * ld), *dDT = dput(dtr, (size_t)T * ld_dt), *dW = dput(w, (size_t)CD * K);
	float *dCB = dput(cb, CD), *dDTB = dput(dtb, nh), *dAL = dput(alog, nh), *dD = dput(Dv, nh);
	float *dCS = dput(cs0, ncs), *dSS = dput(ss0, nss), *dY = dalloc(ny * 4), *dU = dalloc(nu * 4);
	int32_t *dSeq = dputi(seq, T), *dPos = dputi(pos, T);
	float *y[2], *u[2], *cs[2], *ss[2];
	for (int r = 0; r < 3; r++) {
		if (r > 0)
			poison(dY, ny), poison(dU, nu), up(dCS, cs0, ncs * 4), up(dSS, ss0, nss * 4);
		t0 = 0;
		for (int k = 0; k < NC; t0 += calls[k++]) {
			if (r == 0)
				C->mamba_step(cpu, &d, calls[k], yc + (size_t)t0 * di, uc + (size_t)t0 * CD, csc, ssc,
					      xbc + (size_t)t0 * ld, ld, dtr + (size_t)t0 * ld_dt, seq + t0, pos + t0, w, cb, K,
					      dtb, alog, Dv);
			else
				G->mamba_step(gpu, &d, calls[k], dY + (size_t)t0 * di, dU + (size_t)t0 * CD, dCS, dSS,
					      dX + (size_t)t0 * ld, ld, dDT + (size_t)t0 * ld_dt, dSeq + t0, dPos + t0, dW, dCB,
					      K, dDTB, dAL, dD);
		}
		if (r > 0)
			y[r - 1] = dget(dY, ny), u[r - 1] = dget(dU, nu), cs[r - 1] = dget(dCS, ncs), ss[r - 1] = dget(dSS, nss);
	}
	cmp(nm("%s: u", id), u[0], uc, NULL, nu, T2(TOL32, SIM_EXACT));
	cmp(nm("%s: y", id), y[0], yc, NULL, ny, T2(TOL32, SIM_EXACT));
	cmp(nm("%s: conv state", id), cs[0], csc, NULL, ncs, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: ssm state", id), ss[0], ssc, NULL, nss, T2(TOL32, SIM_EXACT));
	det(id, ndiff(y[0], y[1], ny, 4) + ndiff(u[0], u[1], nu, 4) + ndiff(cs[0], cs[1], ncs, 4) +
			ndiff(ss[0], ss[1], nss, 4));
	for (int r = 0; r < 2; r++)
		free(y[r]), free(u[r]), free(cs[r]), free(ss[r]);
	dfree(dX), dfree(dDT), dfree(dW), dfree(dCB), dfree(dDTB), dfree(dAL), dfree(dD), dfree(dCS), dfree(dSS);
	dfree(dY), dfree(dU), dfree(dSeq), dfree(dPos);
	free(xbc), free(dtr), free(w), free(cb), free(dtb), free(alog), free(Dv), free(cs0), free(ss0), free(seq), free(pos);
	free(yc), free(uc), free(csc), free(ssc);
}

/* Gated RMSNorm over g groups of di / g channels, z [T, ld_z] (ld_z >= di). */
static void t_mamba_gnorm(int T, int di, int g, int ld_z)
{
	const size_t n = (size_t)T * di, nz = (size_t)T * ld_z, ng = (size_t)T * g;
	const char *id = nm("mamba gated norm T=%d di=%d g=%d ld_z=%d", T, di, g, ld_z);
	float *y = hrand(n, 1.5), *z = hrand(nz, 3), *w = hrand(di, 0.5), *dout = hrand(n, 1);
	float *dz0 = hrand(nz, 1), *dw0 = hrand(di, 1), *dzc, *dwc;
	for (int c = 0; c < di; c++)
		w[c] += 1.0f;
	float *oc = xmalloc(n * 4), *rc = xmalloc(ng * 4), *dyc = xmalloc(n * 4);
	C->mamba_gated_norm_fwd(cpu, oc, rc, y, z, ld_z, w, T, di, g, 1e-5f, MGT_DT_F32);
	float *dYi = dput(y, n), *dZ = dput(z, nz), *dW = dput(w, di), *dDO = dput(dout, n), *dO = dalloc(n * 4);
	float *dR = dalloc(ng * 4), *dRc = dput(rc, ng), *dDY = dalloc(n * 4);
	float *dDZ = dmirror(dz0, nz, &dzc), *dDW = dmirror(dw0, di, &dwc);
	/* the backward gets the CPU's rstd on both sides: it is checked on its own */
	C->mamba_gated_norm_bwd(cpu, dyc, dzc, dwc, dout, y, z, ld_z, w, rc, T, di, g, MGT_DT_F32);
	float *o[2], *r[2], *dyg[2], *dzg[2], *dwg[2];
	for (int k = 0; k < 2; k++) {
		poison(dO, n), poison(dR, ng), poison(dDY, n);
		up(dDZ, dz0, nz * 4), up(dDW, dw0, (size_t)di * 4);
		G->mamba_gated_norm_fwd(gpu, dO, dR, dYi, dZ, ld_z, dW, T, di, g, 1e-5f, MGT_DT_F32);
		G->mamba_gated_norm_bwd(gpu, dDY, dDZ, dDW, dDO, dYi, dZ, ld_z, dW, dRc, T, di, g, MGT_DT_F32);
		o[k] = dget(dO, n), r[k] = dget(dR, ng), dyg[k] = dget(dDY, n), dzg[k] = dget(dDZ, nz), dwg[k] = dget(dDW, di);
	}
	cmp_rows(nm("%s: fwd out", id), o[0], oc, NULL, T, (size_t)di, T2(TOL32, SIM_ULP));
	cmp(nm("%s: fwd rstd", id), r[0], rc, NULL, ng, T2(TOL32, SIM_ULP));
	cmp_rows(nm("%s: bwd dy", id), dyg[0], dyc, NULL, T, (size_t)di, T2(3e-5, SIM_ULP));
	cmp_rows(nm("%s: bwd dz (columns past di kept)", id), dzg[0], dzc, NULL, T, (size_t)ld_z, T2(3e-5, SIM_ULP));
	cmp(nm("%s: bwd dw (accumulated)", id), dwg[0], dwc, dw0, di, colsum_tol(T));
	det(id, ndiff(o[0], o[1], n, 4) + ndiff(r[0], r[1], ng, 4) + ndiff(dyg[0], dyg[1], n, 4) +
			ndiff(dzg[0], dzg[1], nz, 4) + ndiff(dwg[0], dwg[1], di, 4));
	for (int k = 0; k < 2; k++)
		free(o[k]), free(r[k]), free(dyg[k]), free(dzg[k]), free(dwg[k]);
	dfree(dYi), dfree(dZ), dfree(dW), dfree(dDO), dfree(dO), dfree(dR), dfree(dRc), dfree(dDY), dfree(dDZ), dfree(dDW);
	free(y), free(z), free(w), free(dout), free(dz0), free(dw0), free(dzc), free(dwc), free(oc), free(rc), free(dyc);
}

/* The scan's inputs as in_proj and the conv leave them: xbc [T, ldc] = x (nh p columns), B, C
 * (g n each), 3 more columns; dt_raw at columns 2 .. nh+1 of dtr [T, nh + 5]. */
typedef struct {
	mgt_ssd d;
	size_t T, nxbc, ndt, nst;
	int bc; /* B's first column (C's: bc + g n) */
	float *xbc, *dtr, *dtb, *alog, *D;
} ssd_case;

static ssd_case ssd_make(int L, int b, int nh, int g, int p, int n, bool docs)
{
	ssd_case s = { .T = (size_t)L * b, .bc = nh * p };
	const int ldc = nh * p + 2 * g * n + 3;
	s.d = (mgt_ssd){ .L = L, .b = b, .nh = nh, .p = p, .g = g, .n = n, .ld_x = ldc, .ld_bc = ldc, .ld_dt = nh + 5,
			 .seg_start = docs ? packed_starts(L, b, 150) : NULL };
	if (docs) { /* sequence 0: a document from position 128 on, a chunk's first row (its decay is 0) */
		int32_t *seg = (int32_t *)s.d.seg_start;
		for (int i = 0; i < L; i++)
			seg[(size_t)i * b] = i >= 128 ? 128 : 0;
	}
	s.nxbc = s.T * ldc, s.ndt = s.T * s.d.ld_dt, s.nst = mgt_ssd_states_floats(&s.d);
	s.xbc = hrand(s.nxbc, 1), s.dtr = hrand(s.ndt, 2);
	s.dtb = xmalloc((size_t)nh * 4), s.alog = xmalloc((size_t)nh * 4), s.D = xmalloc((size_t)nh * 4);
	/* dt about 0.05 .. 0.3 and A = -(1 .. 16) as Megatron's init, but every third head past
	 * softplus's threshold (dt = dt_raw + 21) and every third one slow (A about -0.02: a chunk
	 * decays the state by about e^-0.3, so what crosses chunks weighs in y) */
	for (int h = 0; h < nh; h++) {
		s.dtb[h] = h % 3 == 2 ? 21.0f : (float)(-2.0 + 0.5 * urand());
		s.alog[h] = (float)(h % 3 == 1 ? -4.0 + 0.3 * urand() : 1.4 + 1.3 * urand());
		s.D[h] = (float)(1.0 + 0.5 * urand());
	}
	return s;
}

/* Device copies of a case's inputs (seg_start replaced by its device copy in *dd). */
typedef struct {
	mgt_ssd d;
	float *xbc, *dtr, *dtb, *alog, *D;
	int32_t *seg;
} ssd_dev;

static ssd_dev ssd_put(const ssd_case *s)
{
	ssd_dev v = { .d = s->d };
	v.seg = s->d.seg_start ? dputi(s->d.seg_start, s->T) : NULL;
	v.d.seg_start = v.seg;
	v.xbc = dput(s->xbc, s->nxbc), v.dtr = dput(s->dtr, s->ndt), v.dtb = dput(s->dtb, s->d.nh);
	v.alog = dput(s->alog, s->d.nh), v.D = dput(s->D, s->d.nh);
	return v;
}

/* The scan on one backend: y, states; then dxbc (x, B, C gradients into a copy of gx0), ddt (into
 * a copy of gdt0) and the per-head sums (into a copy of gh0 [3 nh]).  host: be's pointers are
 * host memory; else device copies are made here and the results downloaded. */
typedef struct {
	float *y, *st, *gx, *gdt, *gh;
} ssd_res;

static ssd_res ssd_run_cpu(const ssd_case *s, const float *dy, const float *gx0, const float *gdt0, const float *gh0)
{
	const mgt_ssd *d = &s->d;
	const int nh = d->nh, bc = s->bc, cc = bc + d->g * d->n;
	ssd_res r = { xmalloc(s->T * nh * d->p * 4), xmalloc(s->nst * 4), hcopy(gx0, s->nxbc), hcopy(gdt0, s->ndt),
		      hcopy(gh0, 3 * (size_t)nh) };
	C->ssd_scan_fwd(cpu, d, r.y, r.st, s->xbc, s->xbc + bc, s->xbc + cc, s->dtr + 2, s->dtb, s->alog, s->D, MGT_DT_F32);
	C->ssd_scan_bwd(cpu, d, r.gx, r.gx + bc, r.gx + cc, r.gdt + 2, r.gh, r.gh + nh, r.gh + 2 * nh, dy, r.st, s->xbc,
			s->xbc + bc, s->xbc + cc, s->dtr + 2, s->dtb, s->alog, s->D, MGT_DT_F32);
	return r;
}

static ssd_res ssd_run_gpu(const ssd_case *s, const ssd_dev *v, const float *dDY, const float *gx0, const float *gdt0,
			   const float *gh0)
{
	const mgt_ssd *d = &v->d;
	const int nh = d->nh, bc = s->bc, cc = bc + d->g * d->n;
	const size_t ny = s->T * nh * d->p;
	float *dY = dalloc(ny * 4), *dSt = dalloc(s->nst * 4), *dGX = dput(gx0, s->nxbc), *dGD = dput(gdt0, s->ndt);
	float *dGH = dput(gh0, 3 * (size_t)nh);
	poison(dY, ny), poison(dSt, s->nst);
	G->ssd_scan_fwd(gpu, d, dY, dSt, v->xbc, v->xbc + bc, v->xbc + cc, v->dtr + 2, v->dtb, v->alog, v->D, MGT_DT_F32);
	G->ssd_scan_bwd(gpu, d, dGX, dGX + bc, dGX + cc, dGD + 2, dGH, dGH + nh, dGH + 2 * nh, dDY, dSt, v->xbc,
			v->xbc + bc, v->xbc + cc, v->dtr + 2, v->dtb, v->alog, v->D, MGT_DT_F32);
	ssd_res r = { dget(dY, ny), dget(dSt, s->nst), dget(dGX, s->nxbc), dget(dGD, s->ndt), dget(dGH, 3 * (size_t)nh) };
	dfree(dY), dfree(dSt), dfree(dGX), dfree(dGD), dfree(dGH);
	return r;
}

static size_t ssd_ndiff(const ssd_case *s, const ssd_res *a, const ssd_res *b)
{
	return ndiff(a->y, b->y, s->T * s->d.nh * s->d.p, 4) + ndiff(a->st, b->st, s->nst, 4) +
	       ndiff(a->gx, b->gx, s->nxbc, 4) + ndiff(a->gdt, b->gdt, s->ndt, 4) + ndiff(a->gh, b->gh, 3 * (size_t)s->d.nh, 4);
}

static void ssd_res_free(ssd_res *r) { free(r->y), free(r->st), free(r->gx), free(r->gdt), free(r->gh); }

/* The selective scan, forward and backward: y, the saved states, dx/dB/dC (inside xbc's layout,
 * the columns they do not write kept), ddt_raw (inside dtr's), ddt_bias, dA_log, dD accumulated. */
static void t_ssd(int L, int b, int nh, int g, int p, int n, bool docs)
{
	const char *id = nm("ssd scan L=%d b=%d nh=%d g=%d p=%d n=%d%s", L, b, nh, g, p, n, docs ? " packed" : "");
	ssd_case s = ssd_make(L, b, nh, g, p, n, docs);
	const size_t ny = s.T * nh * p;
	float *dy = hrand(ny, 1), *gx0 = hrand(s.nxbc, 1), *gdt0 = hrand(s.ndt, 1), *gh0 = hrand(3 * (size_t)nh, 1);
	ssd_res c = ssd_run_cpu(&s, dy, gx0, gdt0, gh0);
	ssd_dev v = ssd_put(&s);
	float *dDY = dput(dy, ny);
	ssd_res gr[2];
	for (int k = 0; k < 2; k++)
		gr[k] = ssd_run_gpu(&s, &v, dDY, gx0, gdt0, gh0);
	const tol2 t = T2(TOL32, SIM_SSD);
	cmp(nm("%s: fwd y", id), gr[0].y, c.y, NULL, ny, t);
	cmp(nm("%s: fwd states", id), gr[0].st, c.st, NULL, s.nst, t);
	cmp(nm("%s: bwd dx, dB, dC (other columns kept)", id), gr[0].gx, c.gx, gx0, s.nxbc, t);
	cmp(nm("%s: bwd ddt_raw (other columns kept)", id), gr[0].gdt, c.gdt, gdt0, s.ndt, t);
	cmp(nm("%s: bwd ddt_bias (accumulated)", id), gr[0].gh, c.gh, gh0, nh, T2(TOL_SSD_SUMS, SIM_SSD_SUMS));
	cmp(nm("%s: bwd dA_log (accumulated)", id), gr[0].gh + nh, c.gh + nh, gh0 + nh, nh, T2(TOL_SSD_SUMS, SIM_SSD_SUMS));
	cmp(nm("%s: bwd dD (accumulated)", id), gr[0].gh + 2 * nh, c.gh + 2 * nh, gh0 + 2 * nh, nh, t);
	det(id, ssd_ndiff(&s, &gr[0], &gr[1]));
	ssd_res_free(&c), ssd_res_free(&gr[0]), ssd_res_free(&gr[1]);
	dfree(v.xbc), dfree(v.dtr), dfree(v.dtb), dfree(v.alog), dfree(v.D), dfree(v.seg), dfree(dDY);
	free(dy), free(gx0), free(gdt0), free(gh0);
	free(s.xbc), free(s.dtr), free(s.dtb), free(s.alog), free(s.D), free((void *)s.d.seg_start);
}

/* ---- the mixer's ops on 16-bit storage (backend.h's t = bf16 or fp16) ----
 * Each op runs three ways on inputs rounded to the type: the GPU op in 16 bits, the GPU op in fp32
 * on the same (widened) values, the CPU op in 16 bits.  The 16-bit op computes in fp32 and rounds
 * each output once, so its outputs are the fp32 op's rounded, bit for bit (t_out16: a wrong
 * stride, column or rounding of a 16-bit load or store, or a 16-bit intermediate, fails), outputs'
 * columns it must not write keep their bits, and its fp32 outputs (weight gradients, states,
 * rstd) are the fp32 op's bit for bit.  Against the CPU's 16-bit op: within the fp32 op's bound
 * plus one rounding of the type
 * (normwise 2^-8 bf16, 2^-11 fp16: an element whose fp32 values straddle a rounding boundary
 * differs by one ulp); under the simulator, where few elements straddle, a 16th of that rounding
 * (measured at most 1.3e-7 bf16 and 7.3e-6 fp16 over the small shapes; the bound 2.4e-4, 3.1e-5). */
static const char *dtn(mgt_elem_type dt) { return dt == MGT_DT_BF16 ? "bf16" : "fp16"; }
static double tol16(mgt_elem_type dt) { return dt == MGT_DT_BF16 ? 1.0 / 256 : 1.0 / 2048; }

/* h [n] rounded to dt, as fp32 values (host). */
static float *hround16(const float *h, size_t n, mgt_elem_type dt)
{
	float *v = xmalloc(n * 4);
	for (size_t i = 0; i < n; i++)
		v[i] = dt == MGT_DT_BF16 ? mgt_bf16_to_f32(mgt_f32_to_bf16(h[i])) : mgt_f16_to_f32(mgt_f32_to_f16(h[i]));
	return v;
}

/* Host 16-bit copy of h [n] (rounded to dt). */
static uint16_t *h16(const float *h, size_t n, mgt_elem_type dt)
{
	uint16_t *g = xmalloc(n * 2);
	C->cast(cpu, g, dt, h, n);
	return g;
}

/* Device 16-bit copy of h [n] (rounded to dt). */
static void *d16(const float *h, size_t n, mgt_elem_type dt)
{
	uint16_t *g = h16(h, n, dt);
	void *d = dalloc(n * 2);
	up(d, g, n * 2);
	free(g);
	return d;
}

/* The CPU's 16-bit output h [n] against the GPU's (device d) widened: the bound above. */
static void cmp16(const char *id, const void *d, const uint16_t *h, size_t n, mgt_elem_type dt, double tol32)
{
	uint16_t *g = xmalloc(n * 2);
	if (G->download(gpu, g, d, n * 2) != MGT_OK)
		bail("download (the 16-bit op failed?)");
	float *gv = widen16(g, n, dt), *cv = widen16(h, n, dt);
	cmp(nm("%s: against the CPU's %s op", id, dtn(dt)), gv, cv, NULL, n, T2(tol32 + tol16(dt), tol32 + tol16(dt) / 16));
	free(g), free(gv), free(cv);
}

/* The conv (t_mamba_conv's shapes) on 16-bit x, y, dy, dx. */
static void t_mamba_conv16(mgt_elem_type dt, int L, int b, int CD, int K, int ld, bool docs)
{
	const size_t T = (size_t)L * b, nx = T * ld, ny = T * CD, nw = (size_t)CD * K;
	const char *id = nm("mamba conv %s L=%d b=%d CD=%d ld=%d%s", dtn(dt), L, b, CD, ld, docs ? " packed" : "");
	float *r[3] = { hrand(nx, 1.5), hrand(ny, 1), hrand(nx, 1) };
	float *x = hround16(r[0], nx, dt), *dy = hround16(r[1], ny, dt), *dx0 = hround16(r[2], nx, dt);
	float *w = hrand(nw, 0.7), *bias = hrand(CD, 0.5), *dw0 = hrand(nw, 1), *db0 = hrand(CD, 1);
	int32_t *seg = docs ? packed_starts(L, b, 9) : NULL, *dS = seg ? dputi(seg, T) : NULL;
	float *dW = dput(w, nw), *dBi = dput(bias, CD);
	/* fp32 on the widened values */
	float *dX = dput(x, nx), *dDY = dput(dy, ny), *dY = dalloc(ny * 4), *dDX = dput(dx0, nx);
	float *dDW = dput(dw0, nw), *dDB = dput(db0, CD);
	G->mamba_conv_fwd(gpu, dY, dX, ld, dW, dBi, dS, L, b, CD, K, MGT_DT_F32);
	G->mamba_conv_bwd(gpu, dDX, dDW, dDB, dDY, dX, ld, dW, dBi, dS, L, b, CD, K, MGT_DT_F32);
	float *y32 = dget(dY, ny), *dx32 = dget(dDX, nx), *dw32 = dget(dDW, nw), *db32 = dget(dDB, CD);
	/* 16 bits */
	void *hX = d16(x, nx, dt), *hDY = d16(dy, ny, dt), *hY = dalloc(ny * 2), *hDX = d16(dx0, nx, dt);
	up(dDW, dw0, nw * 4), up(dDB, db0, (size_t)CD * 4);
	G->mamba_conv_fwd(gpu, hY, hX, ld, dW, dBi, dS, L, b, CD, K, dt);
	G->mamba_conv_bwd(gpu, hDX, dDW, dDB, hDY, hX, ld, dW, dBi, dS, L, b, CD, K, dt);
	float *dw16 = dget(dDW, nw), *db16 = dget(dDB, CD);
	t_out16(nm("%s: fwd y", id), hY, dt, y32, ny);
	t_out16(nm("%s: bwd dx (columns past CD kept)", id), hDX, dt, dx32, nx);
	cmp(nm("%s: bwd dw as fp32's", id), dw16, dw32, NULL, nw, T2(TOL_EXACT, SIM_EXACT));
	cmp(nm("%s: bwd db as fp32's", id), db16, db32, NULL, CD, T2(TOL_EXACT, SIM_EXACT));
	/* the CPU's 16-bit op */
	uint16_t *cx = h16(x, nx, dt), *cdy = h16(dy, ny, dt), *cy = xmalloc(ny * 2), *cdx = h16(dx0, nx, dt);
	float *cdw = hcopy(dw0, nw), *cdb = hcopy(db0, CD);
	C->mamba_conv_fwd(cpu, cy, cx, ld, w, bias, seg, L, b, CD, K, dt);
	C->mamba_conv_bwd(cpu, cdx, cdw, cdb, cdy, cx, ld, w, bias, seg, L, b, CD, K, dt);
	cmp16(nm("%s: fwd y", id), hY, cy, ny, dt, TOL32);
	cmp16(nm("%s: bwd dx", id), hDX, cdx, nx, dt, TOL32);
	for (int k = 0; k < 3; k++)
		free(r[k]);
	free(x), free(dy), free(dx0), free(w), free(bias), free(dw0), free(db0), free(seg), free(y32), free(dx32);
	free(dw32), free(db32), free(dw16), free(db16), free(cx), free(cdy), free(cy), free(cdx), free(cdw), free(cdb);
	dfree(dS), dfree(dW), dfree(dBi), dfree(dX), dfree(dDY), dfree(dY), dfree(dDX), dfree(dDW), dfree(dDB);
	dfree(hX), dfree(hDY), dfree(hY), dfree(hDX);
}

/* The gated norm (t_mamba_gnorm's shapes) on 16-bit y, z, out, dout, dy, dz. */
static void t_mamba_gnorm16(mgt_elem_type dt, int T, int di, int g, int ld_z)
{
	const size_t n = (size_t)T * di, nz = (size_t)T * ld_z, ng = (size_t)T * g;
	const char *id = nm("mamba gated norm %s T=%d di=%d g=%d ld_z=%d", dtn(dt), T, di, g, ld_z);
	float *r[4] = { hrand(n, 1.5), hrand(nz, 3), hrand(n, 1), hrand(nz, 1) };
	float *y = hround16(r[0], n, dt), *z = hround16(r[1], nz, dt), *dout = hround16(r[2], n, dt);
	float *dz0 = hround16(r[3], nz, dt), *w = hrand(di, 0.5), *dw0 = hrand(di, 1);
	for (int c = 0; c < di; c++)
		w[c] += 1.0f;
	float *dW = dput(w, di), *dR = dalloc(ng * 4), *dDW = dput(dw0, di);
	float *dYi = dput(y, n), *dZ = dput(z, nz), *dDO = dput(dout, n), *dO = dalloc(n * 4), *dDY = dalloc(n * 4);
	float *dDZ = dput(dz0, nz);
	G->mamba_gated_norm_fwd(gpu, dO, dR, dYi, dZ, ld_z, dW, T, di, g, 1e-5f, MGT_DT_F32);
	G->mamba_gated_norm_bwd(gpu, dDY, dDZ, dDW, dDO, dYi, dZ, ld_z, dW, dR, T, di, g, MGT_DT_F32);
	float *o32 = dget(dO, n), *r32 = dget(dR, ng), *dy32 = dget(dDY, n), *dz32 = dget(dDZ, nz), *dw32 = dget(dDW, di);
	void *hY = d16(y, n, dt), *hZ = d16(z, nz, dt), *hDO = d16(dout, n, dt), *hO = dalloc(n * 2);
	void *hDY = dalloc(n * 2), *hDZ = d16(dz0, nz, dt);
	up(dDW, dw0, (size_t)di * 4), poison(dR, ng);
	G->mamba_gated_norm_fwd(gpu, hO, dR, hY, hZ, ld_z, dW, T, di, g, 1e-5f, dt);
	G->mamba_gated_norm_bwd(gpu, hDY, hDZ, dDW, hDO, hY, hZ, ld_z, dW, dR, T, di, g, dt);
	float *r16 = dget(dR, ng), *dw16 = dget(dDW, di);
	t_out16(nm("%s: fwd out", id), hO, dt, o32, n);
	cmp(nm("%s: fwd rstd as fp32's", id), r16, r32, NULL, ng, T2(TOL_EXACT, SIM_EXACT));
	t_out16(nm("%s: bwd dy", id), hDY, dt, dy32, n);
	t_out16(nm("%s: bwd dz (columns past di kept)", id), hDZ, dt, dz32, nz);
	cmp(nm("%s: bwd dw as fp32's", id), dw16, dw32, NULL, di, T2(TOL_EXACT, SIM_EXACT));
	uint16_t *cy = h16(y, n, dt), *cz = h16(z, nz, dt), *cdo = h16(dout, n, dt), *co = xmalloc(n * 2);
	uint16_t *cdy = xmalloc(n * 2), *cdz = h16(dz0, nz, dt);
	float *crs = xmalloc(ng * 4), *cdw = hcopy(dw0, di);
	C->mamba_gated_norm_fwd(cpu, co, crs, cy, cz, ld_z, w, T, di, g, 1e-5f, dt);
	C->mamba_gated_norm_bwd(cpu, cdy, cdz, cdw, cdo, cy, cz, ld_z, w, crs, T, di, g, dt);
	cmp16(nm("%s: fwd out", id), hO, co, n, dt, TOL32);
	cmp16(nm("%s: bwd dy", id), hDY, cdy, n, dt, 3e-5);
	cmp16(nm("%s: bwd dz", id), hDZ, cdz, nz, dt, 3e-5);
	for (int k = 0; k < 4; k++)
		free(r[k]);
	free(y), free(z), free(dout), free(dz0), free(w), free(dw0), free(o32), free(r32), free(dy32), free(dz32);
	free(dw32), free(r16), free(dw16), free(cy), free(cz), free(cdo), free(co), free(cdy), free(cdz), free(crs), free(cdw);
	dfree(dW), dfree(dR), dfree(dDW), dfree(dYi), dfree(dZ), dfree(dDO), dfree(dO), dfree(dDY), dfree(dDZ);
	dfree(hY), dfree(hZ), dfree(hDO), dfree(hO), dfree(hDY), dfree(hDZ);
}

/* The scan's forward on 16-bit storage runs its chunk products on tensor cores (kernels/ssd.cu,
 * "tensor cores"): the operands that are fp32 intermediates are rounded to T (u = tol16: 2^-8
 * bf16, 2^-11 fp16, relative, round to nearest), the inputs are exact, the sums fp32.  Per output
 * element, with |.| every input replaced by its magnitude (mag: the CPU op run on |x|, |B|, |C|
 * and D = 0, which sums the magnitudes of every term of y and of the states):
 *   states: each W = wv B rounded once (u |W|), carried by positive decays: u mag;
 *   y: the intra-chunk part rounds each masked score M once (u per term), the inter-chunk part
 *     reads S_in rounded (u) that already carries the states' u: 2u mag (u mag when L <= Q: one
 *     chunk, no inter-chunk part); then y is rounded once
 *     (u |y| of the value before it, at most (u + 2u^2) |y16|; with D x's fp32 product and sum,
 *     which mag leaves out, 2^-22 |y16| more);
 * plus the fp32 sums in another order than the reference's, both sides (2 (Q + n + 4) 2^-24 mag),
 * second-order terms (4 u^2 mag) and, for fp16, operands that round to subnormals (an absolute
 * 2^-25 each, times the other operand's magnitude mx summed over the terms: ftail).  A dropped
 * term, a wrong mask or fragment gives errors of the size of the terms themselves. */
static void cmp_bound(const char *what, const float *g, const float *ref, const float *mag, size_t n, double ku,
		      double uy, double ftail)
{
	double worst = 0, emax = 0;
	size_t w = 0, nbad = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(g[i])) {
			nbad++;
			continue;
		}
		const double e = fabs((double)g[i] - ref[i]), allow = ku * mag[i] + uy * fabs(g[i]) + ftail;
		emax = e > emax ? e : emax;
		if (e / allow > worst)
			worst = e / allow, w = i;
	}
	CHECK(nbad == 0 && worst <= 1, "%s%s: max err %.2e, %.3f of its bound at worst (%zu non-finite)", tag, what, emax,
	      worst, nbad);
	if (nbad || worst > 1)
		printf("#   worst element %zu of %zu: gpu %.9g ref %.9g magnitude %.9g\n", w, n, (double)g[w],
		       (double)ref[w], (double)mag[w]);
}

/* The 16-bit forward (Y: T, st16: fp32 states) against the CPU's fp32 op on the same widened
 * values (c), within cmp_bound's bounds. */
static void t_ssd16_fwd(const char *id, const ssd_case *s, mgt_elem_type dt, const void *Y, const float *st16,
			const ssd_res *c)
{
	const mgt_ssd *d = &s->d;
	const size_t ny = s->T * d->nh * d->p;
	ssd_case a = *s;
	a.xbc = xmalloc(s->nxbc * 4), a.D = xmalloc((size_t)d->nh * 4);
	double mx = 0;
	for (size_t i = 0; i < s->nxbc; i++)
		a.xbc[i] = fabsf(s->xbc[i]), mx = a.xbc[i] > mx ? a.xbc[i] : mx;
	memset(a.D, 0, (size_t)d->nh * 4);
	float *ya = xmalloc(ny * 4), *sa = xmalloc(s->nst * 4);
	C->ssd_scan_fwd(cpu, d, ya, sa, a.xbc, a.xbc + s->bc, a.xbc + s->bc + d->g * d->n, a.dtr + 2, a.dtb, a.alog, a.D,
			MGT_DT_F32);
	const double u = tol16(dt), sl = 4 * u * u + 2.0 * (128 + d->n + 4) / (1 << 24);
	const double nc = (d->L + 127) / 128, sub = dt == MGT_DT_F16 ? 0x1p-25 : 0;
	uint16_t *g = xmalloc(ny * 2);
	if (G->download(gpu, g, Y, ny * 2) != MGT_OK)
		bail("download (the 16-bit op failed?)");
	float *gy = widen16(g, ny, dt);
	cmp_bound(nm("%s: fwd y (tensor cores)", id), gy, c->y, ya, ny, (nc > 1 ? 2 * u : u) + sl, u + 2 * u * u + 0x1p-22,
		  sub * mx * (128 + d->n * mx * (128 * nc + 1)));
	cmp_bound(nm("%s: fwd states (tensor cores)", id), st16, c->st, sa, s->nst, u + sl, 0, sub * mx * 128 * nc);
	free(a.xbc), free(a.D), free(ya), free(sa), free(g), free(gy);
}

/* The 16-bit backward's tensor cores (kernels/ssd.cu bwd_mats_tc): cb = C B^T and g = gy X^T of
 * exact 16-bit inputs, summed on tensor cores; only the order of their fp32 sums differs from the
 * fp32 instance's dot products (a K-term sum: at most (K + 2) 2^-23 of its terms' magnitudes on
 * the tensor cores, whose additions may truncate, and (K + 2) 2^-24 in the reference: ssd_eps).
 * Everything after them is the fp32 instance's code, so the reference is that instance on the
 * same widened values and states (t_ssd checks it against the CPU), and per output element:
 *   dx (M = cb E dt), dB, dC (Dm = g E dt): the perturbed factor's ssd_eps plus its product's own
 *     fp32 rounding on both sides (4 2^-24), and the later fp32 sums (bwd_dx, bwd_intra over at
 *     most Q terms, the S_in and dSo terms, the group's nh/g heads) each re-rounding a different
 *     value on both sides (2 (Q + 4 + nh/g) 2^-24), all times mag: the CPU op run on |x|, |B|,
 *     |C|, |dy|, |S_in| and |D| (every term positive, so it sums the magnitudes of every term);
 *   ddt_raw, ddt_bias, dA_log: Tm = (g E) cb carries both (kT = eps_n + eps_p + eps_n eps_p +
 *     4 2^-24); bwd_intra and bwd_dt sum Tm in double (exact to 2^-53) into dde[s] = sum_r Tm[r][s]
 *     and dcum[r] = sum_s Tm[r][s] dt_s - dt_r sum_r' Tm[r'][r], then g_r = the document's
 *     sum_{r' >= r} dcum[r'] in the chunk and ddt = (dde + A g) dsoftplus: ssd_tmag sums the same
 *     terms' magnitudes (Tm's as E (|gy_r|.|x_s|)(|C_r|.|B_s|) on the mask); then (float) ddt and
 *     its product with dsoftplus (2^-22 |ddt|), the per-head sums of gdt (ddt_bias) and dt g (dA
 *     before its factor -e^{A_log}) in double, and their fp32 additions to the accumulated values
 *     (2^-22 of the old and the new value);
 * and each 16-bit output's own rounding (u + 2u^2 of its 16-bit value; 2^-25 absolute where fp16
 * rounds to subnormals).  dD (bwd_dt's gy.x) does not change: checked bit for bit.  A wrong
 * fragment, mask or a dropped term gives errors of the size of the terms themselves. */
static double ssd_eps(int K) { return 3.0 * (K + 2) / (1 << 24); }

/* (host, fp64) md [T, ld_dt] at ddt_raw's places: the magnitudes of ddt's Tm terms (times
 * dsoftplus, as ddt); ma, mb [nh]: those of dA_log's (times e^{A_log}) and ddt_bias's, from the
 * case's values (s: rounded inputs; dy [T, nh p]).  cpu_ssd.c's dt, cumulative sums, document
 * mask and chunks of 128. */
static void ssd_tmag(const ssd_case *s, const float *dy, double *md, double *ma, double *mb)
{
	const mgt_ssd *d = &s->d;
	const int L = d->L, nb = d->b, nh = d->nh, P = d->p, N = d->n, ldc = d->ld_x, Qc = 128, cc = s->bc + d->g * N;
	double *dt = xmalloc(Qc * 8), *cum = xmalloc(Qc * 8), *dsp = xmalloc(Qc * 8), *tm = xmalloc((size_t)Qc * Qc * 8);
	double *de = xmalloc(Qc * 8), *dc = xmalloc(Qc * 8);
	int *lo = xmalloc(Qc * sizeof(int));
	for (int h = 0; h < nh; h++)
		ma[h] = mb[h] = 0;
	for (int j = 0; j < nb; j++)
		for (int h = 0; h < nh; h++)
			for (int i0 = 0; i0 < L; i0 += Qc) {
				const int q = L - i0 < Qc ? L - i0 : Qc, gi = h / (nh / d->g);
				const double A = exp((double)s->alog[h]);
				double acc = 0;
				for (int r = 0; r < q; r++) {
					const size_t t = (size_t)(i0 + r) * nb + j;
					const double v = (double)s->dtr[t * d->ld_dt + 2 + h] + s->dtb[h];
					dt[r] = v > 20 ? v : log1p(exp(v)), dsp[r] = v > 20 ? 1 : 1 / (1 + exp(-v));
					lo[r] = d->seg_start ? d->seg_start[t] : 0;
					acc = (lo[r] == i0 + r ? 0 : acc) - dt[r] * A;
					cum[r] = acc;
				}
				for (int r = 0; r < q; r++)
					for (int c = 0; c < q; c++) {
						const size_t tr = (size_t)(i0 + r) * nb + j, tc = (size_t)(i0 + c) * nb + j;
						double gx = 0, cb = 0;
						if (c <= r && i0 + c >= lo[r]) {
							for (int k = 0; k < P; k++)
								gx += fabs(dy[tr * nh * P + h * P + k] * (double)s->xbc[tc * ldc + h * P + k]);
							for (int k = 0; k < N; k++)
								cb += fabs((double)s->xbc[tr * ldc + cc + gi * N + k] * s->xbc[tc * ldc + s->bc + gi * N + k]);
						}
						tm[(size_t)r * Qc + c] = gx * cb * exp(cum[r] - cum[c]);
					}
				for (int i = 0; i < q; i++) {
					double rs = 0, cs = 0;
					for (int c = 0; c < q; c++)
						rs += tm[(size_t)i * Qc + c] * dt[c], cs += tm[(size_t)c * Qc + i];
					de[i] = cs, dc[i] = rs + dt[i] * cs;
				}
				double g = 0;
				for (int r = q - 1; r >= 0; r--) {
					const size_t t = (size_t)(i0 + r) * nb + j;
					g += dc[r];
					md[t * d->ld_dt + 2 + h] = (de[r] + A * g) * dsp[r];
					ma[h] += dt[r] * g * A, mb[h] += (de[r] + A * g) * dsp[r];
					if (lo[r] == i0 + r)
						g = 0;
				}
			}
	free(dt), free(cum), free(dsp), free(tm), free(de), free(dc), free(lo);
}

/* (host) columns c0 .. c1-1 of the rows of a [rows, ld], packed [rows, c1 - c0]. */
static float *ssd_cols(const float *a, size_t rows, int ld, int c0, int c1)
{
	float *o = xmalloc(rows * (size_t)(c1 - c0) * 4);
	for (size_t i = 0; i < rows; i++)
		memcpy(o + i * (size_t)(c1 - c0), a + i * (size_t)ld + c0, (size_t)(c1 - c0) * 4);
	return o;
}

/* The 16-bit backward (GX: dx, dB, dC in xbc's layout, GD: ddt_raw in dtr's, gh16: ddt_bias,
 * dA_log, dD) against the fp32 instance's (f, on the same states st) within the bounds above. */
static void t_ssd16_bwd(const char *id, const ssd_case *s, mgt_elem_type dt, const void *GX, const void *GD,
			const float *gh16, const float *dy, const float *st, const float *gh0, const ssd_res *f)
{
	const mgt_ssd *d = &s->d;
	const int nh = d->nh, bc = s->bc, cc = bc + d->g * d->n, K = d->n > d->p ? d->n : d->p;
	const size_t ny = s->T * nh * d->p, nh3 = 3 * (size_t)nh;
	const double u = tol16(dt), sub = dt == MGT_DT_F16 ? 0x1p-25 : 0, e2 = 1.0 / (1 << 24);
	const double en = ssd_eps(d->n), ep = ssd_eps(d->p), kT = en + ep + en * ep + 4 * e2;
	/* mag: the CPU op on magnitudes (dt_raw, dt_bias, A_log as they are) */
	float *ax = xmalloc(s->nxbc * 4), *ady = xmalloc(ny * 4), *ast = xmalloc(s->nst * 4), *aD = xmalloc((size_t)nh * 4);
	for (size_t i = 0; i < s->nxbc; i++)
		ax[i] = fabsf(s->xbc[i]);
	for (size_t i = 0; i < ny; i++)
		ady[i] = fabsf(dy[i]);
	for (size_t i = 0; i < s->nst; i++)
		ast[i] = fabsf(st[i]);
	for (int h = 0; h < nh; h++)
		aD[h] = fabsf(s->D[h]);
	float *mx = calloc(s->nxbc, 4), *mg = calloc(s->ndt, 4), *mh = calloc(nh3, 4);
	C->ssd_scan_bwd(cpu, d, mx, mx + bc, mx + cc, mg + 2, mh, mh + nh, mh + 2 * nh, ady, ast, ax, ax + bc, ax + cc,
			s->dtr + 2, s->dtb, s->alog, aD, MGT_DT_F32);
	uint16_t *hx = xmalloc(s->nxbc * 2), *hd = xmalloc(s->ndt * 2);
	if (G->download(gpu, hx, GX, s->nxbc * 2) != MGT_OK || G->download(gpu, hd, GD, s->ndt * 2) != MGT_OK)
		bail("download (the 16-bit op failed?)");
	float *gx = widen16(hx, s->nxbc, dt), *gd = widen16(hd, s->ndt, dt);
	const double kx = ssd_eps(K) + 4 * e2 + 2.0 * (128 + 4 + nh / d->g) * e2;
	const char *on[4] = { "dx", "dB", "dC", "the other columns kept" };
	const int c0[5] = { 0, bc, cc, cc + d->g * d->n, d->ld_x };
	for (int k = 0; k < 4; k++) {
		float *a = ssd_cols(gx, s->T, d->ld_x, c0[k], c0[k + 1]), *r = ssd_cols(f->gx, s->T, d->ld_x, c0[k], c0[k + 1]);
		float *m = ssd_cols(mx, s->T, d->ld_x, c0[k], c0[k + 1]);
		const size_t nc = s->T * (size_t)(c0[k + 1] - c0[k]);
		if (k < 3)
			cmp_bound(nm("%s: bwd %s (tensor cores)", id, on[k]), a, r, m, nc, kx, u + 2 * u * u, sub);
		else
			cmp(nm("%s: bwd xbc's %s", id, on[k]), a, r, NULL, nc, T2(TOL_EXACT, SIM_EXACT));
		free(a), free(r), free(m);
	}
	double *md = calloc(s->ndt, 8), *ma = xmalloc(nh3 * 8), *mb = ma + nh;
	ssd_tmag(s, dy, md, ma, mb);
	float *ad = xmalloc(s->ndt * 4), *ah = xmalloc(nh3 * 4);
	for (size_t i = 0; i < s->ndt; i++)
		ad[i] = (float)(kT * md[i]);
	cmp_bound(nm("%s: bwd ddt_raw (tensor cores; other columns kept)", id), gd, f->gdt, ad, s->ndt, 1,
		  u + 2 * u * u + 0x1p-22, sub);
	for (int h = 0; h < nh; h++) { /* ddt_bias: the gdt values before their rounding to T */
		double a = 0;
		for (int i = 0; i < d->L * d->b; i++)
			a += 0x1p-22 * (1 + 2 * u) * fabs(gd[(size_t)i * d->ld_dt + 2 + h]) + sub;
		ah[h] = (float)(kT * mb[h] + a + 0x1p-22 * fabs(gh0[h]));
		ah[nh + h] = (float)(kT * ma[h] + 0x1p-22 * fabs(gh0[nh + h]));
	}
	cmp_bound(nm("%s: bwd ddt_bias, dA_log (tensor cores)", id), gh16, f->gh, ah, 2 * (size_t)nh, 1, 0x1p-22, 0);
	cmp(nm("%s: bwd dD as fp32's", id), gh16 + 2 * nh, f->gh + 2 * nh, NULL, nh, T2(TOL_EXACT, SIM_EXACT));
	free(ax), free(ady), free(ast), free(aD), free(mx), free(mg), free(mh), free(hx), free(hd), free(gx), free(gd);
	free(md), free(ma), free(ad), free(ah);
}

/* The scan (t_ssd's cases) on 16-bit x, B, C, dt_raw, y, dy and their gradients: the forward
 * within its bounds (t_ssd16_fwd); the backward (its chunk products on tensor cores) given the fp32
 * op's states within t_ssd16_bwd's bounds of the fp32 op's (dD bit for bit). */
static void t_ssd16(mgt_elem_type dt, int L, int b, int nh, int g, int p, int n, bool docs)
{
	const char *id = nm("ssd scan %s L=%d b=%d nh=%d g=%d p=%d n=%d%s", dtn(dt), L, b, nh, g, p, n,
			    docs ? " packed" : "");
	ssd_case s = ssd_make(L, b, nh, g, p, n, docs);
	float *t0 = s.xbc, *t1 = s.dtr;
	s.xbc = hround16(t0, s.nxbc, dt), s.dtr = hround16(t1, s.ndt, dt);
	free(t0), free(t1);
	const size_t ny = s.T * nh * p, nh3 = 3 * (size_t)nh;
	float *r[3] = { hrand(ny, 1), hrand(s.nxbc, 1), hrand(s.ndt, 1) };
	float *dy = hround16(r[0], ny, dt), *gx0 = hround16(r[1], s.nxbc, dt), *gdt0 = hround16(r[2], s.ndt, dt);
	float *gh0 = hrand(nh3, 1);
	ssd_dev v = ssd_put(&s);
	const mgt_ssd *d = &v.d;
	const int bc = s.bc, cc = bc + g * n;
	float *dDY = dput(dy, ny);
	ssd_res f = ssd_run_gpu(&s, &v, dDY, gx0, gdt0, gh0); /* fp32 on the widened values */
	/* 16 bits: x, B, C in one [T, ldc] buffer, dt_raw inside dtr's; the gradients likewise */
	uint16_t *X = d16(s.xbc, s.nxbc, dt), *DT = d16(s.dtr, s.ndt, dt), *DY = d16(dy, ny, dt);
	uint16_t *GX = d16(gx0, s.nxbc, dt), *GD = d16(gdt0, s.ndt, dt), *Y = dalloc(ny * 2);
	float *dSt = dalloc(s.nst * 4), *dGH = dput(gh0, nh3);
	G->ssd_scan_fwd(gpu, d, Y, dSt, X, X + bc, X + cc, DT + 2, v.dtb, v.alog, v.D, dt);
	float *st16 = dget(dSt, s.nst);
	ssd_res c32 = ssd_run_cpu(&s, dy, gx0, gdt0, gh0); /* the CPU's fp32 op on the widened values */
	t_ssd16_fwd(id, &s, dt, Y, st16, &c32);
	up(dSt, f.st, s.nst * 4);
	G->ssd_scan_bwd(gpu, d, GX, GX + bc, GX + cc, GD + 2, dGH, dGH + nh, dGH + 2 * nh, DY, dSt, X, X + bc, X + cc,
			DT + 2, v.dtb, v.alog, v.D, dt);
	float *gh16 = dget(dGH, nh3);
	t_ssd16_bwd(id, &s, dt, GX, GD, gh16, dy, f.st, gh0, &f);
	/* the CPU's 16-bit op (its own states) */
	uint16_t *cX = h16(s.xbc, s.nxbc, dt), *cDT = h16(s.dtr, s.ndt, dt), *cDY = h16(dy, ny, dt);
	uint16_t *cGX = h16(gx0, s.nxbc, dt), *cGD = h16(gdt0, s.ndt, dt), *cY = xmalloc(ny * 2);
	float *cSt = xmalloc(s.nst * 4), *cGH = hcopy(gh0, nh3);
	const mgt_ssd *hd = &s.d;
	C->ssd_scan_fwd(cpu, hd, cY, cSt, cX, cX + bc, cX + cc, cDT + 2, s.dtb, s.alog, s.D, dt);
	C->ssd_scan_bwd(cpu, hd, cGX, cGX + bc, cGX + cc, cGD + 2, cGH, cGH + nh, cGH + 2 * nh, cDY, cSt, cX, cX + bc,
			cX + cc, cDT + 2, s.dtb, s.alog, s.D, dt);
	cmp16(nm("%s: bwd dx, dB, dC", id), GX, cGX, s.nxbc, dt, TOL32);
	cmp16(nm("%s: bwd ddt_raw", id), GD, cGD, s.ndt, dt, TOL32);
	cmp(nm("%s: bwd dD against the CPU's", id), gh16 + 2 * nh, cGH + 2 * nh, gh0 + 2 * nh, nh, T2(TOL32, SIM_SSD));
	for (int k = 0; k < 3; k++)
		free(r[k]);
	ssd_res_free(&f), ssd_res_free(&c32);
	free(dy), free(gx0), free(gdt0), free(gh0), free(st16), free(gh16), free(cX), free(cDT), free(cDY), free(cGX);
	free(cGD), free(cY), free(cSt), free(cGH);
	dfree(X), dfree(DT), dfree(DY), dfree(GX), dfree(GD), dfree(Y), dfree(dSt), dfree(dGH), dfree(dDY);
	dfree(v.xbc), dfree(v.dtr), dfree(v.dtb), dfree(v.alog), dfree(v.D), dfree(v.seg);
	free(s.xbc), free(s.dtr), free(s.dtb), free(s.alog), free(s.D), free((void *)s.d.seg_start);
}

/* Both 16-bit types over shapes of the fp32 checks (strided, packed, several heads and groups). */
static void mamba_ops16(bool big)
{
	const mgt_elem_type ts[] = { MGT_DT_BF16, MGT_DT_F16 };
	for (int k = 0; k < 2; k++) {
		t_mamba_conv16(ts[k], 70, 4, 40, 4, 45, true);
		t_mamba_conv16(ts[k], 33, 1, 7, 4, 7, false);
		t_mamba_gnorm16(ts[k], 50, 96, 2, 136);
		t_mamba_gnorm16(ts[k], 40, 520, 1, 600);
		t_ssd16(ts[k], 150, 4, 2, 1, 16, 8, true);
		t_ssd16(ts[k], 45, 1, 3, 3, 4, 4, false);
		t_ssd16(ts[k], 150, 2, 2, 1, 80, 8, true);
		/* the tensor cores' partial tiles: p, n not multiples of 16, n over two state tiles and
		 * three k steps, a chunk of q = 100 (its second row tile partial) */
		t_ssd16(ts[k], 228, 1, 2, 1, 24, 72, true);
		if (big) {
			t_mamba_conv16(ts[k], 1000, 2, 1280, 4, 2600, true);
			t_mamba_gnorm16(ts[k], 2000, 1024, 8, 2600);
			t_ssd16(ts[k], 1000, 2, 8, 2, 64, 128, true);
		}
	}
}

/* The mixer's ops: shapes with L not a multiple of 128, several sequences, heads and groups,
 * packed documents, row strides wider than the block read; big: the GPU's sizes too. */
static void mamba_ops(bool big)
{
	t_mamba_conv(70, 4, 40, 4, 45, true);
	t_mamba_conv(33, 1, 7, 4, 7, false);
	t_mamba_conv(130, 3, 24, 4, 30, true);
	t_mamba_gnorm(50, 96, 2, 136);
	t_mamba_gnorm(7, 30, 3, 35);
	t_mamba_gnorm(40, 520, 1, 600); /* a group wider than the block */
	t_ssd(200, 2, 4, 2, 8, 16, false);
	t_ssd(150, 4, 2, 1, 16, 8, true);
	t_ssd(45, 1, 3, 3, 4, 4, false);
	t_ssd(260, 2, 24, 4, 2, 4, true); /* 144 chunk blocks: two waves of the backward */
	t_ssd(150, 2, 2, 1, 80, 8, true); /* p > 64: the forward's y in two column tiles */
	t_mamba_step(4, 2, 8, 16, 4, 37, 5);
	t_mamba_step(5, 1, 3, 7, 4, 3, 0);  /* CD = 29 */
	t_mamba_step(6, 3, 24, 45, 3, 101, 9); /* CD = 414, nh p = 144: several blocks of both kernels */
	t_mamba_step(3, 3, 2, 2, 2, 1, 1);  /* one kept row */
	if (big) {
		t_mamba_conv(1000, 2, 1280, 4, 2600, true);
		t_mamba_gnorm(2000, 1024, 8, 2600);
		t_ssd(1000, 2, 8, 2, 64, 128, true);
		t_ssd(2048, 1, 16, 1, 64, 64, false);
		t_mamba_step(24, 1, 64, 128, 4, 1600, 24); /* mamba2-130m's mixer: CD = 1792 */
	}
}

static void all_ops(void)
{
	if (section("tensor-core fragments and attention implementations (first)")) {
		t_mma_first(false);

	}
	if (section("linear")) {
		for (int pr = 0; pr < 3; pr++) {
			mgt_precision p = (mgt_precision)pr;
			t_linear(1024, 768, 2304, true, true, p);   /* GPT-2 small QKV */
			t_linear(37, 100, 3, true, true, p);        /* ragged, tiny */
		}
		t_linear(512, 256, 50304, false, true, MGT_PREC_FP32); /* output layer */
		t_linear(512, 256, 50304, false, true, MGT_PREC_BF16);
		t_linear(1000, 352, 128, false, true, MGT_PREC_FP32);  /* tiny-llama fc2 */
		t_linear(1000, 128, 704, false, false, MGT_PREC_BF16); /* dx NULL */
		t_linear(2048, 2048, 3072, true, true, MGT_PREC_BF16); /* bigger, K = 2048 */
		t_linear(1000, 768, 3072, true, false, MGT_PREC_FP16);

	}
	if (section("embedding")) {
		t_embedding(2048, 768, 0, 50304, 50304);       /* whole vocabulary */
		t_embedding(1500, 256, 12576, 12576, 50304);   /* vocab-parallel piece 2 of 4 */
		t_embedding(3000, 100, 5, 37, 50);             /* ~80 repeats per row */

	}
	if (section("norm")) {
		t_norm(MGT_NORM_LAYERNORM, true, 2048, 768);
		t_norm(MGT_NORM_LAYERNORM, false, 1000, 1024);
		t_norm(MGT_NORM_RMSNORM, false, 1000, 2048);
		t_norm(MGT_NORM_RMSNORM, false, 3, 128);
		t_norm(MGT_NORM_LAYERNORM, true, 7, 130); /* h not a multiple of 4 */
		t_head_norm(MGT_NORM_RMSNORM, false, false, 2048, 8, 2, 128); /* Qwen3-style q_norm */
		t_head_norm(MGT_NORM_RMSNORM, true, false, 2048, 8, 2, 128);
		t_head_norm(MGT_NORM_LAYERNORM, false, true, 1000, 4, 1, 64);
		t_head_norm(MGT_NORM_LAYERNORM, true, true, 100, 3, 3, 30); /* d not a multiple of 4 */

	}
	if (section("rope")) {
		t_rope(2048, 2, 4, 64, 64, 500000.0f, false);
		t_rope(2048, 2, 4, 128, 128, 500000.0f, true);
		t_rope(1000, 3, 1, 128, 64, 10000.0f, false); /* partial rot_dim */
		t_rope(100, 1, 2, 16, 8, 10000.0f, false);
		t_rope(129, 2, 2, 80, 40, 10000.0f, false);

	}
	if (section("attention")) {
		t_attn(128, 2, 2, 2, 64, 0.0f, 0, 4, 1.5);
		t_attn(128, 2, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn(200, 3, 1, 4, 32, 0.1f, 2, 8, 1.5);
		t_attn(257, 2, 2, 3, 128, 0.0f, 0, 6, 1.5);
		t_attn(257, 2, 2, 3, 128, 0.1f, 3, 12, 1.5);
		t_attn(1000, 1, 2, 2, 64, 0.1f, 1, 6, 1.5);
		t_attn(1000, 2, 1, 1, 16, 0.0f, 0, 1, 4.0);
		t_attn(77, 4, 4, 1, 16, 0.1f, 0, 4, 1.5);
		t_attn(130, 2, 1, 8, 128, 0.0f, 0, 8, 1.5);
		t_attn(63, 1, 1, 2, 32, 0.1f, 0, 2, 1.5);
		t_attn(512, 2, 2, 2, 32, 0.0f, 0, 4, 1.5);
		t_attn(1, 3, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn(2048, 1, 1, 2, 128, 0.0f, 0, 2, 1.5);
		t_attn(300, 1, 1, 2, 64, 0.0f, 0, 2, 3e-19); /* products near FLT_MIN and below */
		t_attn_mask(128, 4, 2, 2, 64, 0.0f, 0, 4);
		t_attn_mask(257, 4, 2, 3, 128, 0.1f, 3, 12);
		t_attn_mask(1000, 5, 1, 2, 32, 0.1f, 1, 4);
		t_attn_mask(77, 4, 4, 1, 16, 0.1f, 0, 4);
		t_attn_mask(200, 6, 1, 2, 24, 0.0f, 0, 2); /* d padded to 32 */
		t_attn_kv(8, 300, 2, 2, 64, 1.5, false);
		t_attn_kv(4, 200, 12, 1, 64, 1.5, true);
		t_attn_kv(3, 1030, 1, 4, 128, 1.5, false);
		t_attn_kv(2, 50, 3, 1, 256, 1.5, false);
		t_attn_tc(false, false);

	}
	if (section("attention with a position bias")) { /* T5's relative positions */
		t_attn_bias(MGT_PREC_FP32, 512, 4, 4, 1, 64, 0.1f, 4, 8, false);
		t_attn_bias(MGT_PREC_FP32, 512, 4, 4, 1, 64, 0.1f, 0, 4, true);
		t_attn_bias(MGT_PREC_FP32, 257, 2, 2, 3, 128, 0.0f, 6, 12, false);
		t_attn_bias(MGT_PREC_FP32, 257, 5, 1, 3, 128, 0.1f, 0, 3, true);
		t_attn_bias(MGT_PREC_FP32, 1000, 2, 1, 2, 32, 0.1f, 1, 4, true);
		t_attn_bias(MGT_PREC_FP32, 1, 3, 2, 2, 64, 0.1f, 0, 4, false);
		t_attn_bias(MGT_PREC_BF16, 300, 4, 2, 2, 64, 0.1f, 0, 4, true);
		t_attn_bias(MGT_PREC_BF16, 128, 2, 4, 1, 64, 0.0f, 4, 8, false);
		t_attn_packed(MGT_PREC_FP32, 1000, 4, 2, 2, 64, 0.1f, 300); /* packed documents */
		t_attn_packed(MGT_PREC_FP32, 513, 4, 1, 2, 128, 0.0f, 100);
		t_attn_packed_tc(false);
		t_attn_bias(MGT_PREC_FP16, 200, 4, 2, 1, 24, 0.1f, 2, 4, true); /* d padded to 32 */
		t_attn_bias(MGT_PREC_FP16, 130, 2, 1, 2, 16, 0.1f, 0, 2, false);
	}
	if (section("cross-attention")) {
		t_xattn_all(false);

	}
	if (section("context-parallel attention blocks")) {
		cp_ops(false);

	}
	if (section("bias_act")) {
		t_act(MGT_ACT_GELU, true, 2048, 3072);
		t_act(MGT_ACT_GELU, false, 1000, 512);
		t_act(MGT_ACT_SWIGLU, true, 1000, 2816);
		t_act(MGT_ACT_SWIGLU, false, 2048, 352);
		t_act(MGT_ACT_GELU, true, 5, 7);
		t_act(MGT_ACT_SWIGLU, false, 3, 5);
		t_act(MGT_ACT_GELU_TANH, true, 2048, 3072);
		t_act(MGT_ACT_GELU_TANH, false, 5, 7);
		t_act(MGT_ACT_SQUARED_RELU, true, 64, 300);

	}
	if (section("bias-dropout-add")) {
		t_bda(2048, 768, 0.1f, true, true, false, 0xFFFFF000ull); /* crosses 2^32 */
		t_bda(2048, 768, 0.1f, true, false, true, (1ull << 33) - 1000);
		t_bda(1000, 1024, 0.0f, true, true, true, 0);
		t_bda(777, 768, 0.1f, false, true, false, 5);
		t_bda(3, 5, 0.5f, true, true, false, 0);
		t_bda(1000, 130, 0.3f, false, false, true, 123);

	}
	if (section("mamba-2 mixer")) {
		mamba_ops(true);
		mamba_ops16(true);
	}
	if (section("mixture of experts")) {
		t_moe_rows(2048, 2, 768);
		t_moe_rows(1000, 8, 130);
		t_moe_rows(3, 1, 5);
		for (int pr = 1; pr <= 2; pr++) {
			t_moe16(2048, 2, 768, 1408, (mgt_precision)pr);
			t_moe16(300, 4, 130, 77, (mgt_precision)pr); /* rows not a multiple of 4 */
		}
		{
			const int r8[] = { 300, 0, 1000, 17, 511, 0, 64, 1200 }, r4[] = { 0, 129, 0, 1 };
			for (int pr = 0; pr < 3; pr++) {
				t_grouped(r8, 8, 1024, 2816, true, (mgt_precision)pr); /* SwiGLU fc1 of 8 experts */
				t_grouped(r8, 8, 1408, 1024, pr != 1, (mgt_precision)pr); /* fc2 */
			}
			t_grouped(r4, 4, 96, 130, true, MGT_PREC_BF16);
		}

	}
	if (section("cross-entropy")) {
		t_xent(1000, 50304, 0, 50304);
		t_xent(1000, 12576, 25152, 50304); /* vocab-parallel piece 3 of 4: most labels outside */
		t_xent(3, 50304, 0, 50304);

	}
	if (section("adamw")) {
		t_adamw(10 * 1000 * 1000 + 19, 1);
		t_adamw(10 * 1000 * 1000 + 19, 10);
		t_adamw(777, 1000);
		t_adamw(1, 3);

	}
	if (section("sumsq, scale, add")) {
		t_reductions();

	}
	if (section("fp8 quantizing cast")) {
		t_fp8_quantize(1000003, 1.0f, MGT_DT_F32);
		t_fp8_quantize(70001, 0.0625f, MGT_DT_F32);
		t_fp8_quantize(70001, 112.345f, MGT_DT_F32);
		t_fp8_quantize(30001, 4.0f, MGT_DT_BF16);
	}
	if (section("fp8 transpose and GEMM")) {
		const int tr[] = {1024, 768, 2304, 768, 999, 333, 2, 3, 1, 4096};
		fp8_gemm_ops(tr, 5, 1024, 768, 2304); /* GPT-2 small's QKV */
		char why[256];
		if (mgt_backend_supports(gpu, MGT_OP_gemm_fp8, MGT_DT_F32, why, sizeof why)) { /* D over 16M floats: bias blocks of 4096 columns */
			t_gemm_fp8(&FP8_FWD, 4096, 4608, 64, true);
			t_gemm_fp8(&FP8_F32B, 4096, 4608, 64, false);
		}
	}
}

static void misaligned_ops(void)
{
	mis = 1;
	tag = "[+4B] ";
	if (section("ops on device pointers 4 bytes past an allocation (model tensors start at any float offset)")) {
		t_linear(200, 96, 130, true, true, MGT_PREC_FP32);
		t_linear(200, 96, 130, true, true, MGT_PREC_BF16);
		t_embedding(300, 100, 5, 37, 50);
		t_norm(MGT_NORM_LAYERNORM, true, 100, 768);
		t_norm(MGT_NORM_RMSNORM, false, 100, 512);
		t_head_norm(MGT_NORM_RMSNORM, false, false, 100, 2, 2, 128);
		t_rope(100, 2, 2, 64, 64, 10000.0f, false);
		t_attn(70, 2, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn_cp(false, 2, 40, 2, 2, 2, 64, 0.1f, 0, 4);
		t_attn_blk(50, 60, 80, 40, 200, 2, 2, 2, 64, 0.1f, 0, 4);
		t_act(MGT_ACT_GELU, true, 100, 300);
		t_act(MGT_ACT_SWIGLU, true, 100, 150);
		t_bda(100, 768, 0.1f, true, true, false, 0);
		t_xent(10, 50304, 0, 50304);
		t_moe_rows(300, 2, 768);
		{
			const int r3[] = { 100, 0, 37 };
			t_grouped(r3, 3, 96, 130, true, MGT_PREC_FP32);
			t_grouped(r3, 3, 96, 130, true, MGT_PREC_BF16);
		}
		t_adamw(100003, 3);
		t_sumsq(100003);
		t_scale_add(100003);
		mis = 0;
		tag = "";
	}
}

/* all_ops and misaligned_ops on small shapes (MGT_TEST_SMALL=1): what each big shape checks, with
 * T, h and V cut so that a CPU simulation of the device runs them all in about a minute. */
static void small_ops(void)
{
	if (section("linear")) {
		for (int pr = 0; pr < 3; pr++) {
			mgt_precision p = (mgt_precision)pr;
			t_linear(64, 96, 160, true, true, p);
			t_linear(37, 100, 3, true, true, p);
		}
		t_linear(32, 64, 1000, false, true, MGT_PREC_FP32); /* output layer */
		t_linear(32, 64, 1000, false, true, MGT_PREC_BF16);
		t_linear(100, 44, 24, false, true, MGT_PREC_FP32);
		t_linear(100, 32, 88, false, false, MGT_PREC_BF16); /* dx NULL */
		t_linear(48, 256, 96, true, true, MGT_PREC_BF16);   /* K = 256 */
		t_linear(50, 96, 200, true, false, MGT_PREC_FP16);

	}
	if (section("embedding")) {
		t_embedding(300, 96, 0, 1000, 1000);    /* whole vocabulary */
		t_embedding(200, 64, 250, 250, 1000);   /* vocab-parallel piece 2 of 4 */
		t_embedding(2100, 20, 5, 37, 50);       /* > 2048 tokens: the global sort stages */

	}
	if (section("norm")) {
		t_norm(MGT_NORM_LAYERNORM, true, 70, 520);
		t_norm(MGT_NORM_LAYERNORM, false, 40, 1024);
		t_norm(MGT_NORM_RMSNORM, false, 40, 2048);
		t_norm(MGT_NORM_RMSNORM, false, 3, 128);
		t_norm(MGT_NORM_LAYERNORM, true, 7, 130); /* h not a multiple of 4 */
		t_head_norm(MGT_NORM_RMSNORM, false, false, 64, 2, 2, 128);
		t_head_norm(MGT_NORM_RMSNORM, true, false, 64, 2, 2, 128);
		t_head_norm(MGT_NORM_LAYERNORM, false, true, 40, 3, 1, 64);
		t_head_norm(MGT_NORM_LAYERNORM, true, true, 20, 3, 3, 30); /* d not a multiple of 4 */

	}
	if (section("rope")) {
		t_rope(64, 2, 4, 64, 64, 500000.0f, false);
		t_rope(64, 2, 4, 128, 128, 500000.0f, true);
		t_rope(50, 3, 1, 128, 64, 10000.0f, false); /* partial rot_dim */
		t_rope(30, 1, 2, 16, 8, 10000.0f, false);
		t_rope(29, 2, 2, 80, 40, 10000.0f, false);

	}
	if (section("attention")) {
		t_attn(128, 2, 2, 2, 64, 0.0f, 0, 4, 1.5);
		t_attn(128, 1, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn(100, 1, 1, 4, 32, 0.1f, 2, 8, 1.5);
		t_attn(70, 1, 1, 3, 128, 0.1f, 3, 12, 1.5); /* DM 128: 32 x 32 backward tiles */
		t_attn(77, 2, 2, 1, 16, 0.1f, 0, 4, 1.5);
		t_attn(63, 1, 1, 2, 24, 0.0f, 0, 2, 4.0);
		t_attn_tc(true, true);
		t_attn(1, 3, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn(40, 1, 1, 2, 32, 0.0f, 0, 2, 3e-19); /* products near FLT_MIN and below */
		t_attn_mask(70, 4, 2, 2, 64, 0.1f, 0, 4); /* several key tiles of 64 */
		t_attn_mask(45, 4, 1, 3, 128, 0.0f, 3, 12); /* DM 128: 32 x 32 backward tiles */
		t_attn_mask(40, 5, 1, 2, 24, 0.1f, 0, 2);
		t_attn_kv(3, 20, 2, 2, 32, 1.5, false);
		t_attn_kv(2, 20, 3, 1, 32, 1.5, true);
		t_attn_kv(2, 70, 1, 4, 64, 1.5, false); /* more keys than one warp's stride */
		t_attn_kv(1, 9, 3, 1, 24, 4.0, false);
		t_attn_kv(2, 12, 1, 2, 160, 1.5, false); /* d > 128: several channels a lane */

	}
	if (section("attention with a position bias")) { /* T5's relative positions */
		t_attn_bias(MGT_PREC_FP32, 70, 2, 2, 2, 32, 0.1f, 2, 8, false); /* GQA, a rank's heads, 2 key tiles */
		t_attn_packed(MGT_PREC_FP32, 70, 3, 1, 2, 64, 0.1f, 20); /* documents across the 64-row tiles */
		t_attn_packed(MGT_PREC_FP32, 40, 3, 2, 1, 32, 0.0f, 7);
		t_attn_packed(MGT_PREC_FP32, 200, 4, 1, 2, 32, 0.1f, 20); /* key tiles skipped */
		t_attn_packed(MGT_PREC_FP32, 130, 4, 1, 1, 128, 0.0f, 40); /* DM 128: 32 x 32 backward tiles */
		t_attn_packed_tc(true);
		t_attn_bias(MGT_PREC_FP32, 70, 4, 1, 2, 64, 0.1f, 0, 2, true);
		t_attn_bias(MGT_PREC_FP32, 33, 4, 1, 1, 128, 0.0f, 1, 3, true); /* DM 128: 32 x 32 backward tiles */
		t_attn_bias(MGT_PREC_BF16, 40, 2, 1, 2, 24, 0.0f, 1, 4, false); /* d padded to 32 */
		t_attn_bias(MGT_PREC_FP16, 33, 4, 2, 1, 16, 0.1f, 0, 2, true);
	}
	if (section("cross-attention")) {
		t_xattn_all(true);

	}
	if (section("context-parallel attention blocks")) {
		cp_ops(true);

	}
	if (section("bias_act")) {
		t_act(MGT_ACT_GELU, true, 64, 300);
		t_act(MGT_ACT_GELU, false, 40, 512);
		t_act(MGT_ACT_SWIGLU, true, 40, 282);
		t_act(MGT_ACT_SWIGLU, false, 64, 352);
		t_act(MGT_ACT_GELU, true, 5, 7);
		t_act(MGT_ACT_SWIGLU, false, 3, 5);
		t_act(MGT_ACT_GELU_TANH, true, 64, 300);
		t_act(MGT_ACT_GELU_TANH, false, 5, 7);
		t_act(MGT_ACT_SQUARED_RELU, true, 64, 300);

	}
	if (section("bias-dropout-add")) {
		t_bda(100, 768, 0.1f, true, true, false, 0xFFFFF000ull); /* crosses 2^32 */
		t_bda(100, 768, 0.1f, true, false, true, (1ull << 33) - 1000);
		t_bda(64, 1024, 0.0f, true, true, true, 0);
		t_bda(77, 768, 0.1f, false, true, false, 5);
		t_bda(3, 5, 0.5f, true, true, false, 0);
		t_bda(100, 130, 0.3f, false, false, true, 123);

	}
	if (section("mamba-2 mixer")) {
		mamba_ops(false);
		mamba_ops16(false);
	}
	if (section("mixture of experts")) {
		t_moe_rows(100, 2, 96);
		t_moe_rows(70, 4, 130); /* h not a multiple of 4 */
		t_moe_rows(3, 1, 5);
		for (int pr = 1; pr <= 2; pr++) {
			t_moe16(60, 2, 96, 64, (mgt_precision)pr);
			t_moe16(37, 4, 130, 77, (mgt_precision)pr); /* rows not a multiple of 4 */
		}
		{
			const int r6[] = { 37, 0, 64, 5, 0, 21 }, r3[] = { 0, 0, 9 };
			for (int pr = 0; pr < 3; pr++) {
				t_grouped(r6, 6, 64, 96, true, (mgt_precision)pr);
				t_grouped(r6, 6, 48, 64, pr != 1, (mgt_precision)pr);
			}
			t_grouped(r3, 3, 30, 7, true, MGT_PREC_BF16);
		}

	}
	if (section("cross-entropy")) {
		t_xent(64, 3000, 0, 3000);
		t_xent(64, 750, 1500, 3000); /* vocab-parallel piece 3 of 4, V not a multiple of 4 */
		t_xent(3, 3000, 0, 3000);

	}
	if (section("adamw")) {
		t_adamw(100003, 1);
		t_adamw(100003, 10);
		t_adamw(777, 1000);
		t_adamw(1, 3);

	}
	if (section("fp8 quantizing cast")) {
		t_fp8_quantize(3001, 1.0f, MGT_DT_F32);
		t_fp8_quantize(3001, 112.345f, MGT_DT_F32);
		t_fp8_quantize(1201, 4.0f, MGT_DT_BF16);
		t_fp8_scale();

	}
	if (section("fp8 transpose and GEMM")) {
		const int tr[] = {64, 48, 50, 37, 2, 3, 96, 1, 34, 100};
		fp8_gemm_ops(tr, 5, 48, 64, 96);
	}
	if (section("sumsq, scale, add")) {
		t_sumsq(1000003);
		t_sumsq(10);
		t_sumsq(1);
		t_scale_add(1000003);
		t_scale_add(5);
		t_scale_add(1);

		mis = 1;
		tag = "[+4B] ";
	}
	if (section("ops on device pointers 4 bytes past an allocation")) {
		t_linear(50, 96, 130, true, true, MGT_PREC_FP32);
		t_linear(50, 96, 130, true, true, MGT_PREC_BF16);
		t_embedding(300, 100, 5, 37, 50);
		t_norm(MGT_NORM_LAYERNORM, true, 30, 768);
		t_norm(MGT_NORM_RMSNORM, false, 30, 512);
		t_head_norm(MGT_NORM_RMSNORM, true, false, 30, 2, 2, 128);
		t_rope(30, 2, 2, 64, 64, 10000.0f, false);
		t_attn(70, 1, 2, 2, 64, 0.1f, 0, 4, 1.5);
		t_attn_cp(false, 2, 20, 1, 2, 2, 64, 0.1f, 0, 4);
		t_attn_blk(30, 40, 50, 20, 100, 1, 2, 2, 64, 0.1f, 0, 4);
		t_act(MGT_ACT_GELU, true, 30, 300);
		t_act(MGT_ACT_SWIGLU, true, 30, 150);
		t_bda(30, 768, 0.1f, true, true, false, 0);
		t_xent(10, 3000, 0, 3000);
		t_mamba_conv(40, 2, 24, 4, 30, true);
		t_mamba_gnorm(30, 96, 2, 100);
		t_ssd(150, 2, 2, 1, 8, 8, true);
		t_mamba_step(4, 2, 8, 16, 4, 37, 5);
		t_moe_rows(30, 2, 96);
		{
			const int r3[] = { 20, 0, 13 };
			t_grouped(r3, 3, 64, 96, true, MGT_PREC_FP32);
			t_grouped(r3, 3, 64, 96, true, MGT_PREC_BF16);
		}
		t_adamw(100003, 3);
		t_sumsq(100003);
		t_scale_add(100003);
		mis = 0;
		tag = "";
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int ndev = mgt_backend_cuda_devices();
	if (ndev <= 0) {
		printf("skip: no CUDA device\n");
		return 77;
	}
	signal(SIGALRM, on_alarm);
	const char *al = getenv("MGT_TEST_ALARM");
	alarm(al && atoi(al) > 0 ? (unsigned)atoi(al) : 900u);
	const char *se = getenv("MGT_TEST_SEED");
	uint64_t seed = se && *se ? strtoull(se, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	rng = seed ? seed : 1;
	printf("# test_cuda_ops: %d CUDA device(s); seed %llu (MGT_TEST_SEED=%llu repeats these inputs)\n", ndev,
	       (unsigned long long)seed, (unsigned long long)seed);
	for (int i = 0; i < 10; i++)
		urand();
	const char *sm = getenv("MGT_TEST_SMALL");
	small = sm && *sm && strcmp(sm, "0") != 0;

	cpu = mgt_backend_cpu_create(0);
	if (!cpu) {
		printf("not ok - cannot create the cpu backend: %s\n", mgt_err_msg());
		return 1;
	}
	mgt_status st = MGT_OK;
	gpu = mgt_backend_cuda_create(0, &st);
	if (!gpu) {
		printf("not ok - cannot create the cuda backend on device 0 (status %d): %s\n", (int)st, mgt_err_msg());
		printf("0 passed, 1 failed\n");
		return 1;
	}
	C = cpu->ops;
	G = gpu->ops;
	printf("# cpu backend: %d threads\n", cpu->threads);
	double t0 = mgt_now();
	section("memory and backend");
	t_memory();
	t_reserve();
	static int recoveries; /* static: its value survives siglongjmp */
	for (;;) {
		if (sigsetjmp(recover, 1)) { /* bail(): a new backend, on from the next section */
			printf("# the CUDA backend failed in section %d: a new backend, on with the next section\n", sec_no);
			if (++recoveries > MAX_RECOVER || !(gpu = mgt_backend_cuda_create(0, &st))) {
				printf("# Bail out! %s\n%d passed, %d failed\n", recoveries > MAX_RECOVER ? "too many failures" :
				       "no new CUDA backend", passed, failed);
				return 1;
			}
			G = gpu->ops;
			resume_from = sec_no, mis = 0, tag = "";
			unsetenv("MGT_ATTN_KERNEL"), unsetenv("MGT_GEMM_D16");
		}
		recover_armed = true;
		sec_no = 1; /* "memory and backend" was section 0 */
		if (small) {
			small_ops();
		} else {
			all_ops();
			misaligned_ops();
		}
		break;
	}
	recover_armed = false;
	section(NULL);
	printf("# device memory: peak %.1f MiB, %zu bytes still in use\n", (double)gpu->bytes_peak / 1048576.0,
	       gpu->bytes_in_use);
	printf("# total %.1f s\n", mgt_now() - t0);
	mgt_backend_destroy(gpu);
	mgt_backend_destroy(cpu);
	return check_finish();
}
