/* tests/unit/a2a_check.h: the alltoallv test pattern test_parallel.c and test_staged.c share:
 * uneven block sizes, gapped layouts and element values exact in every dtype. */
#ifndef MGT_TEST_A2A_CHECK_H
#define MGT_TEST_A2A_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/parallel.h"

/* Element i of the block group rank q sends to group rank r (exact in every dtype). */
static __attribute__((unused)) int64_t aval(int q, int r, size_t i, mgt_comm_dtype dt)
{
	int64_t v = (int64_t)((q * 31 + r * 17 + (int64_t)(i % 1000003) * 7) % 199) - 99;
	return dt == MGT_DT_I64 ? v * ((int64_t)1 << 35) : v;
}

enum { SENTINEL = 12345 }; /* in dst's gaps; aval never gives it */

/* How many elements group rank q sends to group rank r: uneven, a quarter of the pairs zero
 * (the self block too, for some q), scaled by unit.  sym: cnt(q, r) == cnt(r, q). */
static __attribute__((unused)) size_t a2a_count(int q, int r, int seed, size_t unit, int sym)
{
	int k = sym ? (q + r + seed) % 4 : (q * 5 + r * 3 + seed) % 4;
	return (size_t)k * unit + (k == 3 ? (size_t)(q + (sym ? 1 : 2) * r) % 3 : 0);
}

/* Displacements of p blocks of the given counts: gaps: blocks in reverse rank order (send) or
 * odd ranks first (receive), with gaps of 1 + r elements before block r; else side by side in
 * rank order (Megatron's splits).  Returns the buffer length in elements. */
static __attribute__((unused)) size_t a2a_layout(int p, const int64_t *count, int64_t *displ, int gaps, int recv)
{
	size_t at = 0;
	for (int k = 0; k < p; k++) {
		int r = !gaps ? k : recv ? (k < p / 2 ? 2 * k + 1 : 2 * (k - p / 2)) : p - 1 - k;
		if (gaps) at += 1 + (size_t)r;
		displ[r] = (int64_t)at;
		at += (size_t)count[r];
	}
	return at + (gaps ? 2 : 0);
}

#endif
