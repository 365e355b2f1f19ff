/* kernels/: Philox4x32-10 on the device, bit-identical to mgt_philox in lib/util/util.c (Salmon
 * et al., SC'11, section 4.1): same multipliers, Weyl constants, round count and word order, so a
 * dropout mask drawn on the GPU equals the CPU backend's element for element. */
#ifndef MGT_KERNELS_PHILOX_CUH
#define MGT_KERNELS_PHILOX_CUH

#include <stdint.h>

/* The four words of mgt_philox(key, 0, e) into w. */
static __device__ __forceinline__ void mgt_philox4(uint64_t key, uint64_t e, uint32_t w[4])
{
	uint32_t c0 = (uint32_t)e, c1 = (uint32_t)(e >> 32), c2 = 0, c3 = 0;
	uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
	for (int r = 0; r < 10; r++) {
		uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
		uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
		uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
		c1 = lo1; c3 = lo0; c0 = n0; c2 = n2;
		k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
	}
	w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

/* Word 0 of mgt_philox(key, 0, e) (the other words' last products are dead code to the compiler). */
static __device__ __forceinline__ uint32_t mgt_philox0(uint64_t key, uint64_t e)
{
	uint32_t w[4];
	mgt_philox4(key, e, w);
	return w[0];
}

/* Dropout multiplier of Philox word w: 0 when dropped, 1/(1-p) when kept (p > 0). */
static __device__ __forceinline__ float mgt_dropout_mult_w(uint32_t w, float p, float inv_keep)
{
	return (float)(w >> 8) * (1.0f / 16777216.0f) >= p ? inv_keep : 0.0f;
}

/* Dropout multiplier of element e: 0 when dropped, 1/(1-p) when kept (p > 0). */
static __device__ __forceinline__ float mgt_dropout_mult(uint64_t key, uint64_t e, float p, float inv_keep)
{
	float u = (float)(mgt_philox0(key, e) >> 8) * (1.0f / 16777216.0f);
	return u >= p ? inv_keep : 0.0f;
}

#endif
