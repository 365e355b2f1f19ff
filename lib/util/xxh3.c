/* lib/util: XXH3-64 checksums (util.h) through xxHash 0.8 (Debian libxxhash-dev), used
 * header-only: XXH_INLINE_ALL compiles the functions into this file, so nothing is linked. */
#include "util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mgt_xxh3 {
	XXH3_state_t st;
};

#if defined(__x86_64__) && defined(MGT_HAVE_AVX2_TU)
/* xxh3_avx2.c: the same functions built for AVX2; the state is the same struct */
uint64_t mgt_xxh3_64_avx2(const void *p, size_t n);
void mgt_xxh3_update_avx2(void *state, const void *p, size_t n);
uint64_t mgt_xxh3_digest_avx2(const void *state);
static bool avx2(void)
{
	static int have = -1;
	if (have < 0)
		have = __builtin_cpu_supports("avx2") ? 1 : 0;
	return have;
}
#else
static bool avx2(void) { return false; }
#define mgt_xxh3_64_avx2(p, n) XXH3_64bits(p, n)
#define mgt_xxh3_update_avx2(s, p, n) XXH3_64bits_update(s, p, n)
#define mgt_xxh3_digest_avx2(s) XXH3_64bits_digest(s)
#endif

uint64_t mgt_xxh3_64(const void *p, size_t n) { return avx2() ? mgt_xxh3_64_avx2(p, n) : XXH3_64bits(p, n); }

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

void mgt_xxh3_add(mgt_xxh3 *h, const void *p, size_t n)
{
	if (avx2())
		mgt_xxh3_update_avx2(&h->st, p, n);
	else
		XXH3_64bits_update(&h->st, p, n);
}

uint64_t mgt_xxh3_digest(const mgt_xxh3 *h) { return avx2() ? mgt_xxh3_digest_avx2(&h->st) : XXH3_64bits_digest(&h->st); }

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

mgt_status mgt_xxh3_fd(int fd, uint64_t size, const char *path, uint64_t *out)
{
	enum { CHUNK = 1 << 20 };
	mgt_xxh3 *h = mgt_xxh3_new();
	unsigned char *buf = h ? mgt_malloc(CHUNK) : NULL;
	mgt_status st = buf ? MGT_OK : MGT_ERR_NOMEM;
	for (uint64_t off = 0; !st && off < size;) {
		ssize_t k = pread(fd, buf, size - off < CHUNK ? (size_t)(size - off) : CHUNK, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			st = mgt_err(MGT_ERR_IO, "%s: read failed: %s", path, k < 0 ? strerror(errno) : "file shrank");
		else {
			mgt_xxh3_add(h, buf, (size_t)k);
			off += (uint64_t)k;
		}
	}
	if (!st)
		*out = mgt_xxh3_digest(h);
	free(buf);
	mgt_xxh3_free(h);
	return st;
}
