/* The GPTDataset index cache: .npy v1.0 files (numpy/lib/format.py) and md5 (RFC 1321) of the
 * description that names them (megatron/core/datasets/gpt_dataset.py). */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- md5 ----------------------------------------------------------------------------------- */

static const uint32_t md5_k[64] = {
	0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
	0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
	0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
	0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
	0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
	0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
	0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
	0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const uint8_t md5_r[16] = { 7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21 };

static void md5_block(uint32_t h[4], const unsigned char *p)
{
	uint32_t m[16], a = h[0], b = h[1], c = h[2], d = h[3];
	for (int i = 0; i < 16; i++)
		m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
		       (uint32_t)p[4 * i + 3] << 24;
	for (int i = 0; i < 64; i++) {
		uint32_t f;
		int g, round = i / 16;
		if (round == 0) { f = (b & c) | (~b & d); g = i; }
		else if (round == 1) { f = (d & b) | (~d & c); g = (5 * i + 1) % 16; }
		else if (round == 2) { f = b ^ c ^ d; g = (3 * i + 5) % 16; }
		else { f = c ^ (b | ~d); g = (7 * i) % 16; }
		uint32_t t = d, x = a + f + md5_k[i] + m[g];
		int s = md5_r[round * 4 + i % 4];
		d = c;
		c = b;
		b = b + ((x << s) | (x >> (32 - s)));
		a = t;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d;
}

void mgt_md5_hex(const void *data, size_t n, char hex[33])
{
	uint32_t h[4] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476 };
	const unsigned char *p = data;
	size_t i = 0;
	for (; i + 64 <= n; i += 64)
		md5_block(h, p + i);
	unsigned char tail[128] = { 0 };
	size_t r = n - i, tn = r < 56 ? 64 : 128;
	if (r)
		memcpy(tail, p + i, r);
	tail[r] = 0x80;
	uint64_t bits = (uint64_t)n * 8;
	for (int k = 0; k < 8; k++)
		tail[tn - 8 + k] = (unsigned char)(bits >> (8 * k));
	for (size_t k = 0; k < tn; k += 64)
		md5_block(h, tail + k);
	for (int k = 0; k < 16; k++)
		snprintf(hex + 2 * k, 3, "%02x", (h[k / 4] >> (8 * (k % 4))) & 0xff);
}

/* ---- .npy ---------------------------------------------------------------------------------- */

#define NPY_MAGIC "\x93NUMPY"
#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21   /* numpy.lib.format.GROWTH_AXIS_MAX_DIGITS */

size_t mgt_npy_header(char *buf, size_t cap, const char *descr, int ndim, const int64_t *shape)
{
	char dict[200], shp[64];
	if (ndim == 1)
		snprintf(shp, sizeof shp, "(%lld,)", (long long)shape[0]);
	else
		snprintf(shp, sizeof shp, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
	int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shp);
	char first[32];
	int pad = NPY_GROWTH_DIGITS - snprintf(first, sizeof first, "%lld", (long long)shape[0]);
	size_t hlen = (size_t)n + (size_t)(pad > 0 ? pad : 0) + 1;
	size_t padlen = NPY_ALIGN - ((6 + 2 + 2 + hlen) % NPY_ALIGN);
	size_t total = 10 + hlen + padlen;
	if (total > cap || hlen + padlen > 0xffff)
		return 0;
	memcpy(buf, NPY_MAGIC "\x01\x00", 8);
	buf[8] = (char)((hlen + padlen) & 0xff);
	buf[9] = (char)((hlen + padlen) >> 8);
	memcpy(buf + 10, dict, (size_t)n);
	memset(buf + 10 + n, ' ', total - 11 - (size_t)n);
	buf[total - 1] = '\n';
	return total;
}

mgt_status mgt_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape,
			 const void *data, size_t nbytes)
{
	char head[256];
	size_t hn = mgt_npy_header(head, sizeof head, descr, ndim, shape);
	if (!hn)
		return mgt_err(MGT_ERR_IO, "%s: npy header does not fit", path);
	mgt_afile af;
	mgt_status st = mgt_afile_open(&af, path, 1);
	if (st)
		return st;
	if ((st = mgt_afile_write(&af, head, hn)) || (st = mgt_afile_write(&af, data, nbytes))) {
		mgt_afile_abort(&af);
		return st;
	}
	return mgt_afile_commit(&af);
}

/* Parse a v1.0 header at p (n bytes of file): descr, shape; *off = data offset. */
static mgt_status npy_parse(const char *path, const unsigned char *p, size_t n, char descr[8], int *ndim,
			    int64_t shape[2], size_t *off)
{
	if (n < 10 || memcmp(p, NPY_MAGIC "\x01\x00", 8) != 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: not a .npy v1.0 file", path);
	size_t hlen = (size_t)p[8] | (size_t)p[9] << 8;
	if (10 + hlen > n)
		return mgt_err(MGT_ERR_FORMAT, "%s: truncated .npy header", path);
	char h[0x10000];
	memcpy(h, p + 10, hlen);
	h[hlen] = 0;
	const char *d = strstr(h, "'descr': '"), *f = strstr(h, "'fortran_order': False"),
		   *s = strstr(h, "'shape': (");
	if (!d || !f || !s || sscanf(d + 10, "%7[^']", descr) != 1)
		return mgt_err(MGT_ERR_FORMAT, "%s: unexpected .npy header", path);
	long long a = -1, b = -1;
	int k = sscanf(s + 10, "%lld, %lld", &a, &b);
	*ndim = k == 2 && b >= 0 ? 2 : 1;
	if (k < 1 || a < 0 || (*ndim == 1 && !strstr(s, ",)")))
		return mgt_err(MGT_ERR_FORMAT, "%s: unexpected .npy shape", path);
	shape[0] = a;
	shape[1] = *ndim == 2 ? b : 1;
	*off = 10 + hlen;
	return MGT_OK;
}

static size_t descr_size(const char *descr) { return (size_t)(descr[2] - '0'); }

static mgt_status map_ro(const char *path, void **map, size_t *size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	mgt_status st = MGT_OK;
	*map = NULL;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
		st = mgt_err(MGT_ERR_FORMAT, "%s: empty or not a regular file", path);
	else if ((*map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		*map = NULL;
		st = mgt_err(MGT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
	}
	*size = (size_t)sb.st_size;
	close(fd);
	return st;
}

/* Map DIR/BASE-affix and check it holds exactly a's descr and shape. */
static mgt_status npy_load_one(const char *path, mgt_npy_array *a)
{
	mgt_status st = map_ro(path, &a->map, &a->map_size);
	if (st)
		return st;
	char descr[8];
	int ndim;
	int64_t shape[2];
	size_t off;
	st = npy_parse(path, a->map, a->map_size, descr, &ndim, shape, &off);
	uint64_t items = (uint64_t)shape[0] * (uint64_t)(ndim == 2 ? shape[1] : 1);
	if (!st && (strcmp(descr, a->descr) || ndim != a->ndim || shape[0] != a->shape[0] ||
		    (ndim == 2 && shape[1] != a->shape[1])))
		st = mgt_err(MGT_ERR_FORMAT, "%s: holds %s %lld items, expected %s %lld", path, descr,
			     (long long)shape[0], a->descr, (long long)a->shape[0]);
	else if (!st && a->map_size - off != items * descr_size(descr))
		st = mgt_err(MGT_ERR_FORMAT, "%s: %zu data bytes, expected %llu", path, a->map_size - off,
			     (unsigned long long)(items * descr_size(descr)));
	if (st) {
		munmap(a->map, a->map_size);
		a->map = NULL;
		return st;
	}
	a->data = (const char *)a->map + off;
	return MGT_OK;
}

static char *cache_path(const char *dir, const char *base, const char *affix)
{
	size_t n = strlen(dir) + strlen(base) + strlen(affix) + 3;
	char *p = mgt_malloc(n);
	if (p)
		snprintf(p, n, "%s/%s-%s", dir, base, affix);
	return p;
}

static mgt_status description_matches(const char *path, const char *description)
{
	char *text;
	size_t n;
	mgt_status st = mgt_file_read(path, &text, &n);
	if (st)
		return st;
	if (n != strlen(description) || memcmp(text, description, n) != 0)
		st = mgt_err(MGT_ERR_FORMAT, "%s: another description (a hash collision or an edit)", path);
	free(text);
	return st;
}

void mgt_npy_cache_unmap(mgt_npy_array *arrays, int n)
{
	for (int i = 0; i < n; i++) {
		if (arrays[i].map)
			munmap(arrays[i].map, arrays[i].map_size);
		arrays[i].map = NULL;
		arrays[i].data = NULL;
	}
}

mgt_status mgt_npy_cache_load(const char *dir, const char *base, const char *description,
			      mgt_npy_array *arrays, int n)
{
	char *p = cache_path(dir, base, "description.txt");
	if (!p)
		return MGT_ERR_NOMEM;
	mgt_status st = description_matches(p, description);
	free(p);
	for (int i = 0; i < n; i++)
		arrays[i].map = NULL;
	for (int i = 0; i < n && !st; i++) {
		if (!(p = cache_path(dir, base, arrays[i].affix)))
			st = MGT_ERR_NOMEM;
		else
			st = npy_load_one(p, &arrays[i]);
		free(p);
	}
	if (st)
		mgt_npy_cache_unmap(arrays, n);
	return st;
}

static mgt_status write_text(const char *path, const char *text)
{
	mgt_afile af;
	mgt_status st = mgt_afile_open(&af, path, 1);
	if (st)
		return st;
	if ((st = mgt_afile_write(&af, text, strlen(text)))) {
		mgt_afile_abort(&af);
		return st;
	}
	return mgt_afile_commit(&af);
}

mgt_status mgt_npy_cache_save(const char *dir, const char *base, const char *description,
			      const mgt_npy_array *arrays, int n)
{
	mgt_status st = MGT_OK;
	for (int i = 0; i <= n && !st; i++) {
		char *p = cache_path(dir, base, i < n ? arrays[i].affix : "description.txt");
		if (!p)
			return MGT_ERR_NOMEM;
		if (i == n) {
			st = write_text(p, description);
		} else {
			const mgt_npy_array *a = &arrays[i];
			size_t items = (size_t)a->shape[0] * (size_t)(a->ndim == 2 ? a->shape[1] : 1);
			st = mgt_npy_write(p, a->descr, a->ndim, a->shape, a->data, items * descr_size(a->descr));
		}
		free(p);
	}
	return st;
}
