/* lib/eval/metrics.c: aggregate metrics and their standard errors as lm-evaluation-harness
 * computes them (lm_eval/api/metrics.py); eval.h, loglikelihood section. */
#include <math.h>
#include <stdlib.h>

#include "eval.h"

double mgt_stat_mean(const double *x, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) s += x[i];
	return s / (double)n;
}

/* sample_stddev: sqrt(sum (x - mean)^2 / (n - 1)). */
static double sample_stddev(const double *x, size_t n)
{
	double mu = mgt_stat_mean(x, n), s = 0;
	for (size_t i = 0; i < n; i++) s += (x[i] - mu) * (x[i] - mu);
	return sqrt(s / (double)(n - 1));
}

double mgt_stat_mean_stderr(const double *x, size_t n)
{
	return n < 2 ? NAN : sample_stddev(x, n) / sqrt((double)n);
}

double mgt_stat_perplexity(const double *ll, size_t n)
{
	return exp(-mgt_stat_mean(ll, n));
}

/* MT19937 (Matsumoto and Nishimura, ACM TOMACS 8(1), 1998) as CPython's random module seeds
 * and reads it (Modules/_randommodule.c: init_by_array of the seed's 32-bit words,
 * random_random's 53-bit float). */
enum { MT_N = 624, MT_M = 397 };
typedef struct { uint32_t s[MT_N]; int i; } mt19937;

static void mt_seed_array(mt19937 *mt, const uint32_t *key, int len)
{
	uint32_t *s = mt->s;
	s[0] = 19650218u;
	for (int i = 1; i < MT_N; i++) s[i] = 1812433253u * (s[i - 1] ^ (s[i - 1] >> 30)) + (uint32_t)i;
	int i = 1, j = 0;
	for (int k = MT_N > len ? MT_N : len; k; k--) {
		s[i] = (s[i] ^ ((s[i - 1] ^ (s[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
		if (++i >= MT_N) { s[0] = s[MT_N - 1]; i = 1; }
		if (++j >= len) j = 0;
	}
	for (int k = MT_N - 1; k; k--) {
		s[i] = (s[i] ^ ((s[i - 1] ^ (s[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
		if (++i >= MT_N) { s[0] = s[MT_N - 1]; i = 1; }
	}
	s[0] = 0x80000000u;
	mt->i = MT_N;
}

static void mt_refill(mt19937 *mt)
{
	uint32_t *s = mt->s;
	for (int k = 0; k < MT_N; k++) {
		uint32_t y = (s[k] & 0x80000000u) | (s[(k + 1) % MT_N] & 0x7fffffffu);
		s[k] = s[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
	}
	mt->i = 0;
}

static uint32_t mt_u32(mt19937 *mt)
{
	if (mt->i >= MT_N) mt_refill(mt);
	uint32_t y = mt->s[mt->i++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	return y ^ (y >> 18);
}

/* Python's random.random(): 53 bits from two words. */
static double mt_random(mt19937 *mt)
{
	uint32_t a = mt_u32(mt) >> 5, b = mt_u32(mt) >> 6;
	return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

/* Seed as random.Random(seed) does for a non-negative int below 2^32. */
static void mt_seed(mt19937 *mt, uint32_t seed)
{
	mt_seed_array(mt, &seed, 1);
}

mgt_status mgt_stat_perplexity_stderr(const double *ll, size_t n, int64_t iters, double *out)
{
	*out = NAN;
	if (n < 2 || iters < 1) return MGT_OK;
	int64_t chunk = iters < 1000 ? iters : 1000, chunks = iters / chunk;
	double *rep = mgt_malloc((size_t)(chunks * chunk) * sizeof *rep);
	mt19937 *mt = mgt_malloc(sizeof *mt);
	if (!rep || !mt) {
		free(rep);
		free(mt);
		return MGT_ERR_NOMEM;
	}
	size_t r = 0;
	for (int64_t c = 0; c < chunks; c++) {
		mt_seed(mt, (uint32_t)c);
		for (int64_t k = 0; k < chunk; k++) {
			double s = 0;
			for (size_t i = 0; i < n; i++) s += ll[(size_t)floor(mt_random(mt) * (double)n)];
			rep[r++] = exp(-(s / (double)n));
		}
	}
	*out = sample_stddev(rep, r);
	free(rep);
	free(mt);
	return MGT_OK;
}
