/* lib/util: XXH3-64 checksums (util.h) through xxHash 0.8 (Debian libxxhash-dev), used
 * header-only: XXH_INLINE_ALL compiles the functions into this file, so nothing is linked. */
#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdlib.h>

struct mgt_xxh3 {
	XXH3_state_t st;
};

uint64_t mgt_xxh3_64(const void *p, size_t n) { return XXH3_64bits(p, n); }

mgt_xxh3 *mgt_xxh3_new(void)
{
	mgt_xxh3 *h = aligned_alloc(64, (sizeof *h + 63) / 64 * 64); /* XXH3_state_t is 64-aligned */
	if (!h) {
		mgt_err(MGT_ERR_NOMEM, "out of memory");
		return NULL;
	}
	XXH3_64bits_reset(&h->st);
	return h;
}

void mgt_xxh3_add(mgt_xxh3 *h, const void *p, size_t n) { XXH3_64bits_update(&h->st, p, n); }

uint64_t mgt_xxh3_digest(const mgt_xxh3 *h) { return XXH3_64bits_digest(&h->st); }

void mgt_xxh3_free(mgt_xxh3 *h) { free(h); }

void mgt_xxh3_hex(uint64_t v, char out[17])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 15; i >= 0; i--, v >>= 4)
		out[i] = d[v & 15];
	out[16] = 0;
}

bool mgt_xxh3_parse(const char *s, uint64_t *v)
{
	uint64_t r = 0;
	int i = 0;
	for (; s && i < 16; i++) {
		char c = s[i];
		int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (x < 0)
			return false;
		r = r << 4 | (uint64_t)x;
	}
	if (!s || s[16])
		return false;
	*v = r;
	return true;
}
