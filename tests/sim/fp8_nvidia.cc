/* tests/sim/fp8_nvidia.cc (make check-sim): lib/util's fp8 conversions (mgt_f32_to_fp8,
 * mgt_fp8_to_f32) against NVIDIA's own host reference in the CUDA toolkit's cuda_fp8.hpp
 * (__nv_cvt_float_to_fp8 with __NV_SATFINITE, __nv_cvt_fp8_to_halfraw), which cuda_fp8.hpp says
 * matches the device path (PTX cvt.rn.satfinite): every STRIDE-th float32 bit pattern (default 97:
 * about 44 million, all signs, exponents, NaNs and infinities) and all 256 codes of each format.
 * Needs only g++ and the toolkit's headers (no GPU, no nvcc).  Prints ok/not ok lines; exits 1 on
 * a difference.  (Every 7th pattern, 613 million, agreed on 2026-11-27 with CUDA 13.0.) */
#include <cuda_fp8.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "util/util.h"
}

static const __nv_fp8_interpretation_t nv_fmt[2] = {__NV_E4M3, __NV_E5M2};
static const char *const name[2] = {"e4m3", "e5m2"};

int main(int argc, char **argv)
{
	const uint64_t stride = argc > 1 ? strtoull(argv[1], NULL, 0) : 97;
	unsigned long long n = 0, bad[2] = {0, 0}, badd[2] = {0, 0};
	for (uint64_t u = 0; u < (1ull << 32); u += stride, n++) {
		const uint32_t w = (uint32_t)u;
		float x;
		memcpy(&x, &w, 4);
		for (int f = 0; f < 2; f++) {
			const unsigned nv = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, nv_fmt[f]);
			const unsigned me = mgt_f32_to_fp8(x, (mgt_fp8_format)f);
			if (nv != me && bad[f]++ < 3)
				printf("# %s: %a: cuda_fp8.hpp %02x, mgt %02x\n", name[f], (double)x, nv, me);
		}
	}
	for (unsigned c = 0; c < 256; c++)
		for (int f = 0; f < 2; f++) {
			const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, nv_fmt[f]);
			const __half hh = h;
			const float a = __half2float(hh), b = mgt_fp8_to_f32((uint8_t)c, (mgt_fp8_format)f);
			badd[f] += !(a == b || (a != a && b != b));
		}
	int failed = 0;
	for (int f = 0; f < 2; f++) {
		printf("%s - fp8 %s: %llu float32 bit patterns (every %llu-th) convert as cuda_fp8.hpp's "
		       "__nv_cvt_float_to_fp8(SATFINITE) does (%llu differ)\n",
		       bad[f] ? "not ok" : "ok", name[f], n, (unsigned long long)stride, bad[f]);
		printf("%s - fp8 %s: all 256 codes decode as cuda_fp8.hpp's (%llu differ)\n", badd[f] ? "not ok" : "ok",
		       name[f], badd[f]);
		failed += (bad[f] != 0) + (badd[f] != 0);
	}
	return failed != 0;
}
