/* lib/fp8: the quantizing cast with its amax and the delayed-scaling update (fp8.h).  Checks are
 * hand-derived from Transformer Engine's rules (transformer_engine/common/recipe/delayed_scaling.cu), and a random
 * trace of updates (zeros, NaN, infinities, tiny and huge amaxes, reductions, window lengths 1, 2,
 * 5 and 16, both algorithms, margins 0 and 1) against tests/unit/fp8_te_ref.py, the same rules
 * written again in Python (skipped when /usr/bin/python3 is missing). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fp8/fp8.h"

static void test_quantize(void)
{
	const float x[6] = {1.0f, -300.0f, NAN, 0.1f, -INFINITY, 1e-6f};
	uint8_t q[6];
	float amax = 2.0f;
	mgt_fp8_quantize(q, x, 4, 0.5f, MGT_FP8_E4M3, &amax);
	CHECK(amax == 300.0f, "quantize: amax is the pre-scale max |x| over the calls, NaN ignored (%g)", amax);
	int bad = 0;
	for (int i = 0; i < 4; i++)
		bad += q[i] != mgt_f32_to_fp8(x[i] * 0.5f, MGT_FP8_E4M3);
	CHECK(bad == 0 && q[2] == 0x7f && q[1] == (0x80 | mgt_f32_to_fp8(150.0f, MGT_FP8_E4M3)),
	      "quantize: bytes are the conversion of fl32(x * scale) (%d differ)", bad);
	mgt_fp8_quantize(NULL, x + 4, 2, 1.0f, MGT_FP8_E5M2, &amax);
	CHECK(isinf(amax), "quantize: an infinite input makes amax +inf (fmaxf keeps it)");
	CHECK(mgt_fp8_scale_inv(3.0f) == 1.0f / 3.0f && mgt_fp8_max(MGT_FP8_E4M3) == 448.0f &&
	      mgt_fp8_max(MGT_FP8_E5M2) == 57344.0f, "scale_inv = RN(1/scale); maxima 448 and 57344");
}

static void test_update_cases(void)
{
	mgt_fp8_meta m;
	CHECK(mgt_fp8_meta_init(&m, 0, 1) == MGT_ERR_USAGE, "meta_init: a history of length 0 is refused");
	CHECK(mgt_fp8_meta_init(&m, 3, 2) == MGT_OK && m.scale[0] == 1.0f && m.scale[1] == 1.0f && m.history[5] == 0.0f,
	      "meta_init: scales 1, history zeros");
	m.history[0] = 4.0f; /* slot 0 used, slot 1 not */
	mgt_fp8_meta_update(&m, NULL, 448.0f, 0, MGT_FP8_AMAX_MAX);
	CHECK(m.scale[0] == 112.0f && m.scale[1] == 1.0f, "update: scale = 448 / amax (112); an unused slot keeps 1");
	CHECK(m.history[0] == 0 && m.history[2] == 0 && m.history[4] == 4.0f && m.history[1] == 0 && m.history[5] == 0,
	      "update: the used slot rolls (row 0 cleared, the amax in the last row), the unused one does not");
	m.history[0] = 2.0f;
	mgt_fp8_meta_update(&m, NULL, 448.0f, 0, MGT_FP8_AMAX_MAX);
	CHECK(m.scale[0] == 112.0f && m.history[2] == 4.0f && m.history[4] == 2.0f,
	      "update, max: the window's largest (4) sets the scale; rows shift toward the front");
	m.history[0] = 1.0f;
	mgt_fp8_meta_update(&m, NULL, 448.0f, 1, MGT_FP8_AMAX_MOST_RECENT);
	CHECK(m.scale[0] == 224.0f, "update, most_recent with margin 1: 448 / 2 / 1 = 224 (%g)", m.scale[0]);
	m.history[0] = INFINITY;
	mgt_fp8_meta_update(&m, NULL, 448.0f, 0, MGT_FP8_AMAX_MAX);
	CHECK(m.scale[0] == 224.0f && isinf(m.history[4]), "update: an infinite amax keeps the old scale and enters the history");
	float red[2] = {0.0f, 8.0f};
	m.history[0] = 0.0f;
	mgt_fp8_meta_update(&m, red, 448.0f, 0, MGT_FP8_AMAX_MOST_RECENT);
	CHECK(m.scale[1] == 56.0f && m.history[5] == 8.0f, "update: a reduced amax is used where it is not 0 (448 / 8)");
	mgt_fp8_meta_free(&m);
	CHECK(mgt_fp8_meta_init(&m, 1, 1) == MGT_OK, "meta_init: history of length 1");
	m.history[0] = 1e-44f;
	mgt_fp8_meta_update(&m, NULL, 57344.0f, 0, MGT_FP8_AMAX_MAX);
	CHECK(m.scale[0] == FLT_MAX && m.history[0] == 0.0f, "update, length 1: history back to [0]; an overflowing scale is FLT_MAX");
	mgt_fp8_meta_free(&m);
	CHECK(mgt_fp8_current_scale(0.0f, 448.0f, 0.0f) == 1.0f && mgt_fp8_current_scale(NAN, 448.0f, 0.0f) == 1.0f &&
	      mgt_fp8_current_scale(2.0f, 448.0f, 0.0f) == 224.0f && mgt_fp8_current_scale(1e-3f, 448.0f, 0.5f) == 896.0f &&
	      mgt_fp8_current_scale(1e-44f, 448.0f, 0.0f) == FLT_MAX,
	      "current scaling: 1 for 0 or NaN, fp8_max / amax, eps as the floor, FLT_MAX for an overflow");
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* An amax as the casts could leave it: mostly ordinary, sometimes 0, NaN, inf, tiny or huge. */
static float rand_amax(void)
{
	const double u = urand();
	if (u < 0.15) return 0.0f;
	if (u < 0.18) return NAN;
	if (u < 0.21) return INFINITY;
	if (u < 0.25) return (float)ldexp(urand(), -140); /* subnormal: 448 / amax overflows */
	if (u < 0.30) return (float)ldexp(urand() + 0.5, 120);
	return (float)ldexp(urand() + 0.5, (int)(urand() * 40) - 20);
}

static void test_update_trace(void)
{
	FILE *t = fopen(path_in("trace.txt"), "w"), *o = fopen(path_in("mgt.txt"), "w");
	if (!t || !o)
		CHECK(0, "cannot write the trace files in %s", dir);
	static const int lens[4] = {1, 2, 5, 16};
	int updates = 0;
	for (int c = 0; t && o && c < 8; c++) {
		const int L = lens[c % 4], N = 3, margin = c / 4;
		const mgt_fp8_amax_algo algo = c % 2 ? MGT_FP8_AMAX_MOST_RECENT : MGT_FP8_AMAX_MAX;
		const float fmax = c % 3 ? 448.0f : 57344.0f;
		mgt_fp8_meta m;
		if (mgt_fp8_meta_init(&m, L, N) != MGT_OK)
			break;
		for (int u = 0; u < 40; u++, updates++) {
			float a[3], r[3];
			const bool reduce = urand() < 0.3;
			fprintf(t, "%d %d %d %d %s %a |", c, L, N, margin, algo == MGT_FP8_AMAX_MOST_RECENT ? "most_recent" : "max",
				(double)fmax);
			for (int j = 0; j < N; j++) {
				a[j] = rand_amax(), r[j] = rand_amax();
				m.history[j] = fmaxf(m.history[j], a[j]);
				fprintf(t, " %a", (double)a[j]);
			}
			fprintf(t, " |");
			for (int j = 0; j < N; j++)
				reduce ? fprintf(t, " %a", (double)r[j]) : fprintf(t, " -");
			fprintf(t, "\n");
			mgt_fp8_meta_update(&m, reduce ? r : NULL, fmax, margin, algo);
			for (int i = 0; i < L * N; i++)
				fprintf(o, "%s%a", i ? " " : "", (double)m.history[i]);
			for (int j = 0; j < N; j++)
				fprintf(o, " %a", (double)m.scale[j]);
			fprintf(o, "\n");
		}
		mgt_fp8_meta_free(&m);
	}
	if (t)
		fclose(t);
	if (o)
		fclose(o);
	if (access("/usr/bin/python3", X_OK) != 0) {
		printf("# skip: no /usr/bin/python3 for tests/unit/fp8_te_ref.py\n");
		return;
	}
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/unit/fp8_te_ref.py < %s > %s", path_in("trace.txt"),
		 path_in("ref.txt"));
	const int rc = system(cmd);
	CHECK(rc == 0, "tests/unit/fp8_te_ref.py ran (status %d)", rc);
	/* the two outputs, value by value (hex floats; Python writes nan/inf as nan/inf, C %a as nan/inf) */
	FILE *a = fopen(path_in("mgt.txt"), "r"), *b = fopen(path_in("ref.txt"), "r");
	long nv = 0, nd = 0;
	char x[64], y[64];
	while (a && b && fscanf(a, "%63s", x) == 1) {
		if (fscanf(b, "%63s", y) != 1) {
			nd++;
			break;
		}
		const double u = strtod(x, NULL), v = strtod(y, NULL);
		nv++;
		nd += !(u == v || (isnan(u) && isnan(v)));
	}
	if (a && b && fscanf(b, "%63s", y) == 1)
		nd++;
	if (a)
		fclose(a);
	if (b)
		fclose(b);
	CHECK(nv > 0 && nd == 0, "update: %d random updates (histories and scales, %ld values) equal fp8_te_ref.py's (%ld differ)",
	      updates, nv, nd);
}

int main(void)
{
	snprintf(dir, sizeof dir, "%s/mgt-test-fp8.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		printf("not ok - cannot make a scratch directory\n");
		return 1;
	}
	test_quantize();
	test_update_cases();
	test_update_trace();
	if (!failed) { /* the traces stay for a look when something failed */
		remove(path_in("trace.txt")), remove(path_in("mgt.txt")), remove(path_in("ref.txt"));
		rmdir(dir);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
