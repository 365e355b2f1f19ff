/* lib/backend: dropout draws for the CPU backend, many counters at a time.
 *
 * mgt_cpu_philox_row gives word 0 of mgt_philox(key, 0, e0 + c) for c < n, bit-identical to
 * lib/util's scalar Philox4x32-10.  The rounds' 32x32->64-bit products are what costs; compilers
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

/* Word 0 of mgt_philox(key, 0, e) for e = e0 + c (Philox4x32-10; must stay bit-identical to
 * lib/util), written out round by round, with the counter's 64-bit add done as a 32-bit add and
 * carry, so that a loop over c vectorizes. */
CPU_INLINE uint32_t cpu_philox0(uint64_t key, uint64_t e0, uint32_t c)
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
	return c0;
}

static void philox_row_c(uint32_t *w, uint64_t key, uint64_t e0, int n)
{
#pragma omp simd
	for (int c = 0; c < n; c++)
		w[c] = cpu_philox0(key, e0, (uint32_t)c);
}

#ifdef CPU_PHILOX_X86
/* U independent vectors per step: one round is a chain of about 8 dependent instructions, so a
 * single vector leaves the multiplier idle most of the time. */
#define PH_U 4

__attribute__((target("avx512f"))) static void philox_row_avx512(uint32_t *w, uint64_t key,
								  uint64_t e0, int n)
{
	const __m512i m0 = _mm512_set1_epi64(PH_M0), m1 = _mm512_set1_epi64(PH_M1);
	const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const uint32_t lo0 = (uint32_t)e0, hi0 = (uint32_t)(e0 >> 32);
	const __m512i vlo0 = _mm512_set1_epi32((int)lo0), vhi0 = _mm512_set1_epi32((int)hi0);
	const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
	const __mmask16 odd = 0xAAAA;
	for (int c = 0; c < n; c += 16 * PH_U) {
		__m512i c0[PH_U], c1[PH_U], c2[PH_U], c3[PH_U];
#pragma GCC unroll 4
		for (int u = 0; u < PH_U; u++) {
			c0[u] = _mm512_add_epi32(_mm512_set1_epi32((int)(lo0 + (uint32_t)(c + 16 * u))), iota);
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
			if (n - at >= 16)
				_mm512_storeu_si512((void *)(w + at), c0[u]);
			else if (n - at > 0)
				_mm512_mask_storeu_epi32(w + at, (__mmask16)((1u << (n - at)) - 1), c0[u]);
		}
	}
}

__attribute__((target("avx2"))) static void philox_row_avx2(uint32_t *w, uint64_t key, uint64_t e0,
							     int n)
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
			c0[u] = _mm256_add_epi32(_mm256_set1_epi32((int)(lo0 + (uint32_t)(c + 8 * u))), iota);
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
			const int at = c + 8 * u;
			if (n - at >= 8) {
				_mm256_storeu_si256((__m256i *)(w + at), c0[u]);
			} else if (n - at > 0) {
				uint32_t tmp[8];
				_mm256_storeu_si256((__m256i *)tmp, c0[u]);
				memcpy(w + at, tmp, (size_t)(n - at) * sizeof *w);
			}
		}
	}
}
#endif

void mgt_cpu_philox_row(uint32_t *w, uint64_t key, uint64_t e0, int n)
{
	if (n <= 0)
		return;
#ifdef CPU_PHILOX_X86
	if (__builtin_cpu_supports("avx512f")) {
		philox_row_avx512(w, key, e0, n);
		return;
	}
	if (__builtin_cpu_supports("avx2")) {
		philox_row_avx2(w, key, e0, n);
		return;
	}
#endif
	philox_row_c(w, key, e0, n);
}
