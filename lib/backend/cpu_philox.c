/* lib/backend: dropout draws for the CPU backend, many counters at a time.
 *
 * mgt_cpu_philox_row gives word 0 of mgt_philox(key, 0, e0 + c) for c < n, and
 * mgt_cpu_philox_pairs two words of each counter of the attention dropout's blocks (8 counters
 * every 16), bit-identical to lib/util's scalar Philox4x32-10.  The rounds' 32x32->64-bit products are what costs; compilers
 * vectorize them through 64-bit lanes, so the x86-64 paths spell them out: even lanes with one
 * vpmuludq, odd lanes with another after a 32-bit shift, high and low halves put back in place
 * with blends.  The kernel is picked by the CPU (AVX-512F, AVX2, else portable C).
 */
#include "backend/cpu_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_PHILOX_X86 1
#endif

enum { PH_M0 = 0xD2511F53u, PH_M1 = 0xCD9E8D57u, PH_W0 = 0x9E3779B9u, PH_W1 = 0xBB67AE85u };

/* Words sa and sb of mgt_philox(key, 0, e0 + c) (Philox4x32-10; must stay bit-identical to
 * lib/util), written out round by round, with the counter's 64-bit add done as a 32-bit add and
 * carry, so that a loop over c vectorizes. */
CPU_INLINE void cpu_philox2(uint64_t key, uint64_t e0, uint32_t c, int sa, int sb, uint32_t *wa, uint32_t *wb)
{
	uint32_t lo0 = (uint32_t)e0, c0 = lo0 + c, c1 = (uint32_t)(e0 >> 32) + (c0 < lo0), c2 = 0, c3 = 0;
	uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#define CPU_PHILOX_ROUND                                                                        \
	do {                                                                                    \
		uint64_t p0 = (uint64_t)PH_M0 * c0, p1 = (uint64_t)PH_M1 * c2;                  \
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1; \
		c1 = (uint32_t)p1;                                                              \
		c3 = (uint32_t)p0;                                                              \
		c0 = n0;                                                                        \
		c2 = n2;                                                                        \
		k0 += PH_W0;                                                                    \
		k1 += PH_W1;                                                                    \
	} while (0)
	CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND;
	CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND; CPU_PHILOX_ROUND;
#undef CPU_PHILOX_ROUND
	const uint32_t v[4] = {c0, c1, c2, c3};
	*wa = v[sa];
	*wb = v[sb];
}

/* Counter offset of output t: t (spread 0), or (t >> 3) * 16 + (t & 7) (spread 1). */
CPU_INLINE uint32_t ph_off(int t, int spread) { return spread ? (uint32_t)((t >> 3) * 16 + (t & 7)) : (uint32_t)t; }

/* wa[t] = word sa, and with wb wb[t] = word sb, of mgt_philox(key, 0, e0 + ph_off(t)), t < n. */
static void philox_gen_c(uint32_t *wa, uint32_t *wb, uint64_t key, uint64_t e0, int n, int spread, int sa, int sb)
{
	for (int t = 0; t < n; t++) {
		uint32_t b;
		cpu_philox2(key, e0, ph_off(t, spread), sa, sb, wa + t, &b);
		if (wb)
			wb[t] = b;
	}
}

#ifdef CPU_PHILOX_X86
/* U independent vectors per step: one round is a chain of about 8 dependent instructions, so a
 * single vector leaves the multiplier idle most of the time. */
#define PH_U 4

__attribute__((target("avx512f"))) static void philox_gen_avx512(uint32_t *wa, uint32_t *wb, uint64_t key,
								  uint64_t e0, int n, int spread, int sa, int sb)
{
	const __m512i m0 = _mm512_set1_epi64(PH_M0), m1 = _mm512_set1_epi64(PH_M1);
	/* lane l of the vector at t (a multiple of 16) counts e0 + ph_off(t + l) = e0 + (spread + 1) t + iota[l] */
	const __m512i iota = spread ? _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
				    : _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const uint32_t lo0 = (uint32_t)e0, hi0 = (uint32_t)(e0 >> 32);
	const __m512i vlo0 = _mm512_set1_epi32((int)lo0), vhi0 = _mm512_set1_epi32((int)hi0);
	const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
	const __mmask16 odd = 0xAAAA;
	for (int c = 0; c < n; c += 16 * PH_U) {
		__m512i c0[PH_U], c1[PH_U], c2[PH_U], c3[PH_U];
#pragma GCC unroll 4
		for (int u = 0; u < PH_U; u++) {
			c0[u] = _mm512_add_epi32(_mm512_set1_epi32((int)(lo0 + (uint32_t)((c + 16 * u) << spread))), iota);
			__mmask16 carry = _mm512_cmplt_epu32_mask(c0[u], vlo0);
			c1[u] = _mm512_mask_add_epi32(vhi0, carry, vhi0, one);
			c2[u] = c3[u] = zero;
		}
		uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
		for (int r = 0; r < 10; r++) {
			const __m512i vk0 = _mm512_set1_epi32((int)k0), vk1 = _mm512_set1_epi32((int)k1);
#pragma GCC unroll 4
			for (int u = 0; u < PH_U; u++) {
				__m512i pe0 = _mm512_mul_epu32(c0[u], m0);
				__m512i po0 = _mm512_mul_epu32(_mm512_srli_epi64(c0[u], 32), m0);
				__m512i pe1 = _mm512_mul_epu32(c2[u], m1);
				__m512i po1 = _mm512_mul_epu32(_mm512_srli_epi64(c2[u], 32), m1);
				__m512i hi0v = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(pe0, 32), po0);
				__m512i hi1v = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(pe1, 32), po1);
				__m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1v, c1[u]), vk0);
				__m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0v, c3[u]), vk1);
				c1[u] = _mm512_mask_blend_epi32(odd, pe1, _mm512_slli_epi64(po1, 32));
				c3[u] = _mm512_mask_blend_epi32(odd, pe0, _mm512_slli_epi64(po0, 32));
				c0[u] = n0;
				c2[u] = n2;
			}
			k0 += PH_W0;
			k1 += PH_W1;
		}
#pragma GCC unroll 4
		for (int u = 0; u < PH_U; u++) {
			const int at = c + 16 * u;
			if (n - at <= 0)
				break;
			const __m512i v[4] = {c0[u], c1[u], c2[u], c3[u]};
			const __mmask16 m = n - at >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - at)) - 1);
			_mm512_mask_storeu_epi32(wa + at, m, v[sa]);
			if (wb)
				_mm512_mask_storeu_epi32(wb + at, m, v[sb]);
		}
	}
}

__attribute__((target("avx2"))) static void philox_gen_avx2(uint32_t *wa, uint32_t *wb, uint64_t key, uint64_t e0,
							     int n, int spread, int sa, int sb)
{
	const __m256i m0 = _mm256_set1_epi64x(PH_M0), m1 = _mm256_set1_epi64x(PH_M1);
	const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
	const uint32_t lo0 = (uint32_t)e0, hi0 = (uint32_t)(e0 >> 32);
	const __m256i vlo0s = _mm256_set1_epi32((int)(lo0 ^ 0x80000000u)), vhi0 = _mm256_set1_epi32((int)hi0);
	const __m256i zero = _mm256_setzero_si256();
	for (int c = 0; c < n; c += 8 * PH_U) {
		__m256i c0[PH_U], c1[PH_U], c2[PH_U], c3[PH_U];
#pragma GCC unroll 4
		for (int u = 0; u < PH_U; u++) {
			/* at t = c + 8u (a multiple of 8) the offsets are (spread + 1) t + 0..7 */
			c0[u] = _mm256_add_epi32(_mm256_set1_epi32((int)(lo0 + (uint32_t)((c + 8 * u) << spread))), iota);
			/* carry = (c0 < lo0) unsigned, as a signed compare of sign-flipped values: -1 or 0 */
			__m256i carry = _mm256_cmpgt_epi32(vlo0s, _mm256_xor_si256(c0[u], sign));
			c1[u] = _mm256_sub_epi32(vhi0, carry);
			c2[u] = c3[u] = zero;
		}
		uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
		for (int r = 0; r < 10; r++) {
			const __m256i vk0 = _mm256_set1_epi32((int)k0), vk1 = _mm256_set1_epi32((int)k1);
#pragma GCC unroll 4
			for (int u = 0; u < PH_U; u++) {
				__m256i pe0 = _mm256_mul_epu32(c0[u], m0);
				__m256i po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[u], 32), m0);
				__m256i pe1 = _mm256_mul_epu32(c2[u], m1);
				__m256i po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[u], 32), m1);
				__m256i hi0v = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
				__m256i hi1v = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
				__m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1v, c1[u]), vk0);
				__m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0v, c3[u]), vk1);
				c1[u] = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
				c3[u] = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
				c0[u] = n0;
				c2[u] = n2;
			}
			k0 += PH_W0;
			k1 += PH_W1;
		}
#pragma GCC unroll 4
		for (int u = 0; u < PH_U; u++) {
			const int at = c + 8 * u, k = n - at < 8 ? n - at : 8;
			const __m256i v[4] = {c0[u], c1[u], c2[u], c3[u]};
			uint32_t tmp[8];
			if (k <= 0)
				break;
			_mm256_storeu_si256((__m256i *)tmp, v[sa]);
			memcpy(wa + at, tmp, (size_t)k * sizeof *wa);
			if (wb) {
				_mm256_storeu_si256((__m256i *)tmp, v[sb]);
				memcpy(wb + at, tmp, (size_t)k * sizeof *wb);
			}
		}
	}
}
#endif

static void philox_gen(uint32_t *wa, uint32_t *wb, uint64_t key, uint64_t e0, int n, int spread, int sa, int sb)
{
	if (n <= 0)
		return;
#ifdef CPU_PHILOX_X86
	if (__builtin_cpu_supports("avx512f")) {
		philox_gen_avx512(wa, wb, key, e0, n, spread, sa, sb);
		return;
	}
	if (__builtin_cpu_supports("avx2")) {
		philox_gen_avx2(wa, wb, key, e0, n, spread, sa, sb);
		return;
	}
#endif
	philox_gen_c(wa, wb, key, e0, n, spread, sa, sb);
}

void mgt_cpu_philox_row(uint32_t *w, uint64_t key, uint64_t e0, int n)
{
	philox_gen(w, NULL, key, e0, n, 0, 0, 0);
}

void mgt_cpu_philox_pairs(uint32_t *wa, uint32_t *wb, uint64_t key, uint64_t e0, int n, int hi)
{
	philox_gen(wa, wb, key, e0, n, 1, 2 * hi, 2 * hi + 1);
}
