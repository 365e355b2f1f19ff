/* The two numpy generators Megatron's GPT data path draws from, reproduced bit for bit.
 *
 * MT19937 as numpy.random.RandomState (megatron/core/datasets/gpt_dataset.py's shuffles): init_genrand seeding,
 * random_interval by mask and rejection, shuffle from n-1 down to 1. gpt_dataset.py shuffles the
 * document and shuffle indices with it.
 *
 * PCG64 seeded through SeedSequence, and Generator.integers' Lemire bounded draw, for
 * MockGPTLowLevelDataset's sequence lengths (gpt_dataset.py: default_rng(0).integers(1, 4096,
 * 100000, int32)). Algorithms: M. Matsumoto and T. Nishimura, "Mersenne Twister", ACM TOMACS 8(1),
 * 1998; M. O'Neill, "PCG: A Family of Simple Fast Space-Efficient Statistically Good Algorithms for
 * Random Number Generation", 2014 (XSL-RR 128/64); D. Lemire, "Fast Random Integer Generation in an
 * Interval", ACM TOMACS 29(1), 2019; numpy's SeedSequence hash (numpy/random/bit_generator.pyx).
 */
#include "data.h"

#include <string.h>

/* ---- MT19937 ------------------------------------------------------------------------------- */

enum { MT_N = 624, MT_M = 397 };

void mgt_mt19937_seed(mgt_mt19937 *rs, uint32_t seed)
{
	rs->key[0] = seed;
	for (int i = 1; i < MT_N; i++)
		rs->key[i] = 1812433253u * (rs->key[i - 1] ^ (rs->key[i - 1] >> 30)) + (uint32_t)i;
	rs->pos = MT_N;
}

static uint32_t mt_twist(uint32_t a, uint32_t b, uint32_t m)
{
	uint32_t y = (a & 0x80000000u) | (b & 0x7fffffffu);
	return m ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
}

static void mt_refill(mgt_mt19937 *rs)
{
	uint32_t *k = rs->key;
	int i = 0;
	for (; i < MT_N - MT_M; i++)
		k[i] = mt_twist(k[i], k[i + 1], k[i + MT_M]);
	for (; i < MT_N - 1; i++)
		k[i] = mt_twist(k[i], k[i + 1], k[i + MT_M - MT_N]);
	k[MT_N - 1] = mt_twist(k[MT_N - 1], k[0], k[MT_M - 1]);
	rs->pos = 0;
}

uint32_t mgt_mt19937_next32(mgt_mt19937 *rs)
{
	if (rs->pos >= MT_N)
		mt_refill(rs);
	uint32_t y = rs->key[rs->pos++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	return y ^ (y >> 18);
}

uint64_t mgt_mt19937_interval(mgt_mt19937 *rs, uint64_t max)
{
	if (max == 0)
		return 0;
	uint64_t mask = max, v;
	for (int s = 1; s < 64; s *= 2)
		mask |= mask >> s;
	if (max <= 0xffffffffu) {
		while ((v = mgt_mt19937_next32(rs) & mask) > max)
			;
	} else {
		do {
			v = (uint64_t)mgt_mt19937_next32(rs) << 32;
			v |= mgt_mt19937_next32(rs);
			v &= mask;
		} while (v > max);
	}
	return v;
}

#define SHUFFLE_AS(T)                                                                     \
	do {                                                                              \
		T *a = items, t;                                                          \
		for (uint64_t i = n - 1; i >= 1; i--) {                                   \
			uint64_t j = mgt_mt19937_interval(rs, i);                         \
			t = a[i];                                                         \
			a[i] = a[j];                                                      \
			a[j] = t;                                                         \
		}                                                                         \
	} while (0)

void mgt_mt19937_shuffle(mgt_mt19937 *rs, void *items, uint64_t n, size_t itemsize)
{
	if (n < 2)
		return;
	switch (itemsize) {
	case 1: SHUFFLE_AS(uint8_t); break;
	case 2: SHUFFLE_AS(uint16_t); break;
	case 4: SHUFFLE_AS(uint32_t); break;
	default: SHUFFLE_AS(uint64_t); break;
	}
}

/* ---- SeedSequence + PCG64 + bounded integers (MockGPTLowLevelDataset) ----------------------- */

__extension__ typedef unsigned __int128 u128;

typedef struct {
	u128 state, inc;
	int has32;
	uint32_t next32;
} pcg64;

/* numpy SeedSequence constants (bit_generator.pyx). */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u

static uint32_t ss_hashmix(uint32_t v, uint32_t *hc)
{
	v ^= *hc;
	*hc *= SS_MULT_A;
	v *= *hc;
	return v ^ (v >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
	uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
	return r ^ (r >> 16);
}

/* SeedSequence(entropy).generate_state(4, uint64) for a seed below 2^32 (one entropy word). */
static void seedseq_state(uint32_t entropy, uint64_t out[4])
{
	uint32_t pool[4], hc = SS_INIT_A;
	for (int i = 0; i < 4; i++)
		pool[i] = ss_hashmix(i == 0 ? entropy : 0, &hc);
	for (int s = 0; s < 4; s++)
		for (int d = 0; d < 4; d++)
			if (s != d)
				pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &hc));
	uint32_t hb = SS_INIT_B, w[8];
	for (int i = 0; i < 8; i++) {
		uint32_t v = pool[i % 4] ^ hb;
		hb *= SS_MULT_B;
		v *= hb;
		w[i] = v ^ (v >> 16);
	}
	for (int i = 0; i < 4; i++)
		out[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
}

static void pcg_step(pcg64 *g)
{
	const u128 mult = (u128)2549297995355413924ULL << 64 | 4865540595714422341ULL;
	g->state = g->state * mult + g->inc;
}

/* numpy.random.PCG64(seed): pcg64_set_seed(state = s[0]:s[1], inc = s[2]:s[3]). */
static void pcg_seed(pcg64 *g, uint32_t seed)
{
	uint64_t s[4];
	seedseq_state(seed, s);
	g->state = 0;
	g->inc = ((u128)s[2] << 64 | s[3]) << 1 | 1u;
	pcg_step(g);
	g->state += (u128)s[0] << 64 | s[1];
	pcg_step(g);
	g->has32 = 0;
}

static uint64_t pcg_next64(pcg64 *g)
{
	pcg_step(g);
	uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
	unsigned rot = (unsigned)(g->state >> 122);
	return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(pcg64 *g)
{
	if (g->has32) {
		g->has32 = 0;
		return g->next32;
	}
	uint64_t v = pcg_next64(g);
	g->has32 = 1;
	g->next32 = (uint32_t)(v >> 32);
	return (uint32_t)v;
}

/* buffered_bounded_lemire_uint32: uniform in [0, rng]. */
static uint32_t lemire32(pcg64 *g, uint32_t rng)
{
	uint32_t excl = rng + 1;
	uint64_t m = (uint64_t)pcg_next32(g) * excl;
	uint32_t left = (uint32_t)m;
	if (left < excl) {
		uint32_t threshold = (UINT32_MAX - rng) % excl;
		while (left < threshold) {
			m = (uint64_t)pcg_next32(g) * excl;
			left = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

void mgt_gpt_mock_lengths(int32_t *lengths)
{
	pcg64 g;
	pcg_seed(&g, 0);
	for (int i = 0; i < MGT_GPT_MOCK_SEQUENCES; i++)
		lengths[i] = 1 + (int32_t)lemire32(&g, MGT_GPT_MOCK_MAX_LENGTH - 2);
}
