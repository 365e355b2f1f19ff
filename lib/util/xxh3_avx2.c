/* lib/util: the XXH3-64 functions of xxh3.c compiled for AVX2 (this file alone is built with
 * -mavx2 on x86-64; xxh3.c calls them only where the CPU has AVX2).  In the cache XXH3 is about
 * 3.5 times as fast with AVX2 as with the SSE2 that x86-64 guarantees (xxHash's own runtime
 * dispatch, xxh_x86dispatch.c, is in Debian's shared library but not its static one, which the
 * bundle links). */
#include "util.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t mgt_xxh3_64_avx2(const void *p, size_t n) { return XXH3_64bits(p, n); }
void mgt_xxh3_update_avx2(void *state, const void *p, size_t n) { XXH3_64bits_update(state, p, n); }
uint64_t mgt_xxh3_digest_avx2(const void *state) { return XXH3_64bits_digest(state); }
#endif
