/* The random draws of Megatron's masked datasets (numpy's legacy RandomState, numpy/random/mtrand.pyx), bit for bit:
 *
 * numpy's legacy RandomState distributions on the MT19937 of gpt_rng.c: random_sample (53-bit
 * double), randint (masked rejection), choice with p (cumsum, divided by its last item, first cdf
 * above a uniform) and geometric (legacy_random_geometric: inversion below p = 1/3, search above).
 * Sources: numpy mtrand.pyx, src/distributions/distributions.c, src/legacy/legacy-distributions.c
 * (numpy 1.24).
 *
 * std::mt19937_64 (C++11 [rand.eng.mers], [rand.predef]) for helpers.cpp's build_mapping shuffle.
 */
#include "data.h"

#include <math.h>

/* ---- numpy legacy RandomState ------------------------------------------------------------------ */

double mgt_mt19937_random(mgt_mt19937 *rs)
{
	uint32_t a = mgt_mt19937_next32(rs) >> 5, b = mgt_mt19937_next32(rs) >> 6;
	return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}

int64_t mgt_mt19937_randint(mgt_mt19937 *rs, int64_t lo, int64_t hi)
{
	return lo + (int64_t)mgt_mt19937_interval(rs, (uint64_t)(hi - 1 - lo));
}

/* numpy's pairwise sum of n doubles (the reduction of ndarray.sum), blocks of 8 below 128. */
double mgt_numpy_sum(const double *a, int n)
{
	if (n < 8) {
		double res = 0.;
		for (int i = 0; i < n; i++)
			res += a[i];
		return res;
	}
	if (n <= 128) {
		double r[8];
		int i;
		for (int j = 0; j < 8; j++)
			r[j] = a[j];
		for (i = 8; i < n - n % 8; i += 8)
			for (int j = 0; j < 8; j++)
				r[j] += a[i + j];
		double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			res += a[i];
		return res;
	}
	int n2 = n / 2;
	n2 -= n2 % 8;
	return mgt_numpy_sum(a, n2) + mgt_numpy_sum(a + n2, n - n2);
}

int mgt_mt19937_choice(mgt_mt19937 *rs, const double *p, int n)
{
	double cdf[MGT_CHOICE_MAX];
	double acc = 0.;
	for (int i = 0; i < n; i++)
		cdf[i] = acc += p[i];
	double last = cdf[n - 1];
	for (int i = 0; i < n; i++)
		cdf[i] /= last;
	double u = mgt_mt19937_random(rs);
	int i = 0;
	while (i < n - 1 && !(cdf[i] > u))
		i++;
	return i;
}

int64_t mgt_mt19937_geometric(mgt_mt19937 *rs, double p)
{
	if (p >= 0.333333333333333333333333) {    /* legacy_random_geometric_search */
		double q = 1.0 - p, prod = p, sum = p, u = mgt_mt19937_random(rs);
		int64_t x = 1;
		while (u > sum) {
			prod *= q;
			sum += prod;
			x++;
		}
		return x;
	}
	return (int64_t)ceil(log1p(-mgt_mt19937_random(rs)) / log(1.0 - p));
}

/* ---- std::mt19937_64 --------------------------------------------------------------------------- */

enum { MT64_N = 312, MT64_M = 156 };

void mgt_mt19937_64_seed(mgt_mt19937_64 *g, uint64_t seed)
{
	g->key[0] = seed;
	for (int i = 1; i < MT64_N; i++)
		g->key[i] = 6364136223846793005ULL * (g->key[i - 1] ^ (g->key[i - 1] >> 62)) + (uint64_t)i;
	g->pos = MT64_N;
}

static uint64_t mt64_twist(uint64_t a, uint64_t b, uint64_t m)
{
	uint64_t y = (a & 0xFFFFFFFF80000000ULL) | (b & 0x7FFFFFFFULL);
	return m ^ (y >> 1) ^ ((0ULL - (y & 1ULL)) & 0xB5026F5AA96619E9ULL);
}

uint64_t mgt_mt19937_64_next(mgt_mt19937_64 *g)
{
	if (g->pos >= MT64_N) {
		uint64_t *k = g->key;
		for (int i = 0; i < MT64_N; i++)
			k[i] = mt64_twist(k[i], k[(i + 1) % MT64_N], k[(i + MT64_M) % MT64_N]);
		g->pos = 0;
	}
	uint64_t y = g->key[g->pos++];
	y ^= (y >> 29) & 0x5555555555555555ULL;
	y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
	y ^= (y << 37) & 0xFFF7EEE000000000ULL;
	return y ^ (y >> 43);
}
