/* lib/ckpt: torch.save files (PyTorch >= 1.6's zip of stored records) read through libzip (ckpt.h;
 * layout facts: torch/serialization.py _save/_load, caffe2/serialize/inline_container.cc
 * PyTorchStreamReader::init; libzip handles zip64 and the 64-byte aligned local headers). */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "ckpt/pickle_impl.h"

struct mgt_torch {
	zip_t *za;
	char *name;          /* in messages */
	char *arch;          /* the records' directory */
	uint64_t size;       /* the zip's bytes */
	mgt_pickle *pk;
	zip_int64_t *rec;    /* storage k's record index */
	const mgt_py **sorted; /* the tensors by address (mgt_torch_read_* check x is of t) */
	const mgt_py *cache_st; /* the storage whose bytes cache holds (strided reads) */
	uint8_t *cache;
};

static const char *zerr(zip_t *za)
{
	return zip_error_strerror(zip_get_error(za));
}

/* A failed libzip read of record rec: MGT_ERR_IO for the file system's errors, else FORMAT. */
static mgt_status read_err(mgt_torch *t, const char *rec, zip_error_t *ze)
{
	int code = zip_error_code_zip(ze);
	return mgt_err(code == ZIP_ER_READ || code == ZIP_ER_SEEK || code == ZIP_ER_OPEN ? MGT_ERR_IO : MGT_ERR_FORMAT,
		       "%s: record %s: %s", t->name, rec, zip_error_strerror(ze));
}

/* Record rec opened at byte off (*f NULL on failure). */
static mgt_status open_rec(mgt_torch *t, zip_int64_t rec, uint64_t off, zip_file_t **f, const char **rn)
{
	*rn = zip_get_name(t->za, (zip_uint64_t)rec, 0);
	*rn = *rn ? *rn : "?";
	*f = zip_fopen_index(t->za, (zip_uint64_t)rec, 0);
	if (!*f)
		return read_err(t, *rn, zip_get_error(t->za));
	if (off && zip_fseek(*f, (zip_int64_t)off, SEEK_SET) != 0) {
		mgt_status st = read_err(t, *rn, zip_file_get_error(*f));
		zip_fclose(*f);
		*f = NULL;
		return st;
	}
	return MGT_OK;
}

/* The next n bytes of open record f (named rn) into dst. */
static mgt_status read_next(mgt_torch *t, zip_file_t *f, const char *rn, void *dst, size_t n)
{
	for (size_t got = 0; got < n;) {
		zip_int64_t k = zip_fread(f, (uint8_t *)dst + got, n - got);
		if (k < 0)
			return read_err(t, rn, zip_file_get_error(f));
		if (k == 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: record %s is short", t->name, rn);
		got += (size_t)k;
	}
	return MGT_OK;
}

/* n bytes of record index rec from byte off into dst. */
static mgt_status read_rec(mgt_torch *t, zip_int64_t rec, uint64_t off, void *dst, size_t n)
{
	zip_file_t *f;
	const char *rn;
	TRY(open_rec(t, rec, off, &f, &rn));
	mgt_status st = read_next(t, f, rn, dst, n);
	zip_fclose(f);
	return st;
}

/* The index and size of record arch/suffix; -1 when absent.  A record must lie inside the zip:
 * stored, or compressed no more than deflate's 1032:1 (so a hostile size allocates nothing big). */
static mgt_status locate(mgt_torch *t, const char *suffix, zip_int64_t *idx, uint64_t *size, bool stored)
{
	size_t n = strlen(t->arch) + strlen(suffix) + 2;
	char *rn = mgt_malloc(n);
	if (!rn)
		return MGT_ERR_NOMEM;
	snprintf(rn, n, "%s/%s", t->arch, suffix);
	*idx = zip_name_locate(t->za, rn, 0);
	mgt_status st = MGT_OK;
	zip_stat_t sb;
	if (*idx >= 0 && zip_stat_index(t->za, (zip_uint64_t)*idx, 0, &sb) != 0) {
		st = mgt_err(MGT_ERR_FORMAT, "%s: record %s: %s", t->name, rn, zerr(t->za));
	} else if (*idx >= 0) {
		bool ok = (sb.valid & ZIP_STAT_SIZE) && (sb.valid & ZIP_STAT_COMP_SIZE) &&
			  (sb.valid & ZIP_STAT_COMP_METHOD) && sb.comp_size <= t->size &&
			  (sb.comp_method == ZIP_CM_STORE ? sb.size == sb.comp_size
							  : !stored && sb.size / 1032 <= sb.comp_size);
		if (!ok)
			st = mgt_err(MGT_ERR_FORMAT, "%s: record %s: %s, or sizes beyond the file", t->name, rn,
				     stored ? "not stored uncompressed" : "an unknown compression");
		*size = sb.size;
	}
	free(rn);
	return st;
}

/* CRC-32 (the zip's; polynomial 0xEDB88320), four bits at a time. */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
	static const uint32_t t[16] = {
		0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
		0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c};
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		c = (c >> 4) ^ t[c & 15];
		c = (c >> 4) ^ t[c & 15];
	}
	return ~c;
}

/* The whole record arch/suffix into a malloc'd buffer (NUL-terminated), its CRC-32 checked (libzip
 * checks none for stored records it can seek in); *buf NULL when absent. */
static mgt_status slurp(mgt_torch *t, const char *suffix, char **buf, size_t *n)
{
	zip_int64_t idx;
	uint64_t size = 0;
	*buf = NULL;
	TRY(locate(t, suffix, &idx, &size, false));
	if (idx < 0)
		return MGT_OK;
	char *b = mgt_malloc((size_t)size + 1);
	if (!b)
		return MGT_ERR_NOMEM;
	mgt_status st = read_rec(t, idx, 0, b, (size_t)size);
	zip_stat_t sb;
	if (st == MGT_OK && (zip_stat_index(t->za, (zip_uint64_t)idx, 0, &sb) != 0 || !(sb.valid & ZIP_STAT_CRC) ||
			     sb.crc != crc32_of((const uint8_t *)b, (size_t)size)))
		st = mgt_err(MGT_ERR_FORMAT, "%s: record %s/%s: CRC-32 mismatch", t->name, t->arch, suffix);
	if (st != MGT_OK) {
		free(b);
		return st;
	}
	b[size] = 0;
	*buf = b;
	*n = (size_t)size;
	return MGT_OK;
}

/* The first record's directory (PyTorchStreamReader::init). */
static mgt_status find_arch(mgt_torch *t)
{
	const char *first = zip_get_num_entries(t->za, 0) > 0 ? zip_get_name(t->za, 0, 0) : NULL;
	const char *slash = first ? strchr(first, '/') : NULL;
	if (!slash || slash == first)
		return mgt_err(MGT_ERR_FORMAT, "%s: no records in a directory (not a torch.save zip)", t->name);
	t->arch = strndup(first, (size_t)(slash - first));
	return t->arch ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "%s: out of memory", t->name);
}

static mgt_status check_byteorder(mgt_torch *t)
{
	char *b;
	size_t n;
	TRY(slurp(t, "byteorder", &b, &n));
	if (!b)
		return MGT_OK; /* absent: little (get_default_load_endianness) */
	bool little = n == 6 && !memcmp(b, "little", 6), big = n == 3 && !memcmp(b, "big", 3);
	free(b);
	if (big)
		return mgt_err(MGT_ERR_FORMAT, "%s: byteorder is \"big\": big-endian storages are not read", t->name);
	if (!little)
		return mgt_err(MGT_ERR_FORMAT, "%s: byteorder is neither \"little\" nor \"big\"", t->name);
	return MGT_OK;
}

static mgt_status load_pickle(mgt_torch *t)
{
	char *b;
	size_t n;
	TRY(slurp(t, "data.pkl", &b, &n));
	if (!b)
		return mgt_err(MGT_ERR_FORMAT, "%s: no record %s/data.pkl", t->name, t->arch);
	size_t wn = strlen(t->name) + strlen(t->arch) + 16;
	char *what = mgt_malloc(wn);
	mgt_status st = what ? MGT_OK : MGT_ERR_NOMEM;
	if (what) {
		snprintf(what, wn, "%s: %s/data.pkl", t->name, t->arch);
		st = mgt_pickle_load(b, n, what, &t->pk);
	}
	free(what);
	free(b);
	return st;
}

/* Record rec readable to its last byte (its local header parsed, its data inside the zip), so
 * that reads after the open fail only on I/O errors. */
static mgt_status probe_rec(mgt_torch *t, zip_int64_t rec, uint64_t size)
{
	uint8_t last;
	return size ? read_rec(t, rec, size - 1, &last, 1) : read_rec(t, rec, 0, &last, 0);
}

/* Every storage's record present, long enough and readable. */
static mgt_status check_storages(mgt_torch *t)
{
	mgt_pickle *pk = t->pk;
	t->rec = calloc(pk->n_storages + 1, sizeof *t->rec);
	if (!t->rec)
		return mgt_err(MGT_ERR_NOMEM, "%s: out of memory", t->name);
	for (size_t k = 0; k < pk->n_storages; k++) {
		const mgt_py *s = pk->storages[k];
		size_t rl = s->len + 8;
		char *rn = mgt_malloc(rl);
		if (!rn)
			return MGT_ERR_NOMEM;
		snprintf(rn, rl, "data/%s", s->s);
		uint64_t size = 0, need;
		mgt_status st = locate(t, rn, &t->rec[k], &size, true);
		free(rn);
		TRY(st);
		if (t->rec[k] < 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: storage '%s': no record %s/data/%s", t->name, s->s, t->arch, s->s);
		if (__builtin_mul_overflow((uint64_t)s->numel, mgt_py_dtype_size(s->dtype_name), &need) || size < need)
			return mgt_err(MGT_ERR_FORMAT, "%s: storage '%s': record %s/data/%s holds %llu bytes, not %lld x %zu",
				       t->name, s->s, t->arch, s->s, (unsigned long long)size, (long long)s->numel,
				       mgt_py_dtype_size(s->dtype_name));
		TRY(probe_rec(t, t->rec[k], size));
	}
	return MGT_OK;
}

/* The last element's index offset + sum (size-1) * stride; false on overflow. */
static bool extent(const mgt_py *x, int64_t *end)
{
	int64_t e = x->offset, p;
	for (int d = 0; d < x->ndim; d++)
		if (__builtin_mul_overflow(x->size[d] - 1, x->stride[d], &p) || __builtin_add_overflow(e, p, &e))
			return false;
	*end = e;
	return true;
}

static int by_address(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (const mgt_py *const *)a, y = (uintptr_t) * (const mgt_py *const *)b;
	return x < y ? -1 : x > y;
}

/* Every non-empty tensor inside its storage; the sorted tensor list. */
static mgt_status check_tensors(mgt_torch *t)
{
	mgt_pickle *pk = t->pk;
	for (size_t k = 0; k < pk->n_tensors; k++) {
		const mgt_py *x = pk->tensors[k];
		int64_t end;
		if (mgt_py_numel(x) == 0)
			continue;
		if (!extent(x, &end) || end >= x->storage->numel)
			return mgt_err(MGT_ERR_FORMAT, "%s: a tensor over storage '%s' reaches beyond its %lld elements",
				       t->name, x->storage->s, (long long)x->storage->numel);
	}
	t->sorted = mgt_malloc((pk->n_tensors + 1) * sizeof *t->sorted);
	if (!t->sorted)
		return MGT_ERR_NOMEM;
	if (pk->n_tensors)
		memcpy(t->sorted, pk->tensors, pk->n_tensors * sizeof *t->sorted);
	qsort(t->sorted, pk->n_tensors, sizeof *t->sorted, by_address);
	return MGT_OK;
}

/* After the zip is open: the records and the pickle. */
static mgt_status load(mgt_torch *t)
{
	TRY(find_arch(t));
	TRY(check_byteorder(t));
	TRY(load_pickle(t));
	TRY(check_storages(t));
	return check_tensors(t);
}

static mgt_status open_source(mgt_torch *t, zip_source_t *src, zip_error_t *ze)
{
	t->za = zip_open_from_source(src, ZIP_RDONLY, ze);
	if (!t->za) {
		zip_source_free(src);
		return mgt_err(MGT_ERR_FORMAT, "%s: not a readable zip: %s", t->name, zip_error_strerror(ze));
	}
	return load(t);
}

static mgt_status new_torch(const char *name, uint64_t size, mgt_torch **out)
{
	*out = calloc(1, sizeof **out);
	if (!*out || !((*out)->name = strdup(name))) {
		free(*out);
		*out = NULL;
		return mgt_err(MGT_ERR_NOMEM, "%s: out of memory", name);
	}
	(*out)->size = size;
	return MGT_OK;
}

static bool is_zip_start(const uint8_t *b, size_t n)
{
	return n >= 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4;
}

#define NOT_ZIP "not a torch.save zip (PyTorch < 1.6's format is not read)"

/* The slice's first 4 bytes and its length (length 0: to the end). */
static mgt_status probe_file(const char *path, const char *name, uint64_t offset, uint64_t *length)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return mgt_err(MGT_ERR_IO, "%s: %s", path, strerror(e));
	}
	uint8_t b[4] = {0};
	ssize_t k = offset < (uint64_t)sb.st_size ? pread(fd, b, 4, (off_t)offset) : 0;
	close(fd);
	if (offset > (uint64_t)sb.st_size || (*length && *length > (uint64_t)sb.st_size - offset))
		return mgt_err(MGT_ERR_FORMAT, "%s: the slice of %llu bytes at %llu passes the file's end (%lld bytes)",
			       name, (unsigned long long)*length, (unsigned long long)offset, (long long)sb.st_size);
	if (!*length)
		*length = (uint64_t)sb.st_size - offset;
	if (k < 4 || !is_zip_start(b, 4))
		return mgt_err(MGT_ERR_FORMAT, "%s: " NOT_ZIP, name);
	return MGT_OK;
}

mgt_status mgt_torch_open(const char *path, uint64_t offset, uint64_t length, mgt_torch **out)
{
	*out = NULL;
	char name[4200];
	if (offset)
		snprintf(name, sizeof name, "%s@%llu", path, (unsigned long long)offset);
	else
		snprintf(name, sizeof name, "%s", path);
	TRY(probe_file(path, name, offset, &length));
	mgt_torch *t;
	TRY(new_torch(name, length, &t));
	zip_error_t ze;
	zip_error_init(&ze);
	zip_source_t *src = zip_source_file_create(path, offset, (zip_int64_t)length, &ze);
	mgt_status st = src ? open_source(t, src, &ze)
			    : mgt_err(MGT_ERR_IO, "%s: %s", name, zip_error_strerror(&ze));
	zip_error_fini(&ze);
	if (st != MGT_OK) {
		mgt_torch_close(t);
		return st;
	}
	*out = t;
	return MGT_OK;
}

mgt_status mgt_torch_open_mem(const void *buf, size_t n, const char *what, mgt_torch **out)
{
	*out = NULL;
	if (!is_zip_start(buf, n))
		return mgt_err(MGT_ERR_FORMAT, "%s: " NOT_ZIP, what);
	mgt_torch *t;
	TRY(new_torch(what, n, &t));
	zip_error_t ze;
	zip_error_init(&ze);
	zip_source_t *src = zip_source_buffer_create(buf, n, 0, &ze);
	mgt_status st = src ? open_source(t, src, &ze)
			    : mgt_err(MGT_ERR_NOMEM, "%s: %s", what, zip_error_strerror(&ze));
	zip_error_fini(&ze);
	if (st != MGT_OK) {
		mgt_torch_close(t);
		return st;
	}
	*out = t;
	return MGT_OK;
}

const mgt_py *mgt_torch_root(const mgt_torch *t) { return t && t->pk ? mgt_pickle_root(t->pk) : NULL; }

const char *mgt_torch_name(const mgt_torch *t) { return t ? t->name : NULL; }

void mgt_torch_close(mgt_torch *t)
{
	if (!t)
		return;
	if (t->za)
		zip_discard(t->za);
	mgt_pickle_free(t->pk);
	free(t->rec);
	free(t->sorted);
	free(t->cache);
	free(t->arch);
	free(t->name);
	free(t);
}

/* ---- reads ----------------------------------------------------------------------------------- */

/* x is one of t's tensors, or a view of one (a caller's copy with another offset, sizes and
 * strides) inside the same storage. */
static mgt_status check_x(const mgt_torch *t, const mgt_py *x)
{
	if (!x || x->kind != MGT_PY_TENSOR || !t->pk)
		return mgt_err(MGT_ERR_FORMAT, "%s: not a tensor of this file", t->name);
	if (bsearch(&x, t->sorted, t->pk->n_tensors, sizeof *t->sorted, by_address))
		return MGT_OK;
	bool mine = false;
	for (size_t i = 0; !mine && i < t->pk->n_tensors; i++)
		mine = t->sorted[i]->storage == x->storage && t->sorted[i]->dtype == x->dtype;
	int64_t end;
	bool inside = x->ndim >= 0 && x->ndim <= MGT_PY_MAX_DIM && x->offset >= 0 && extent(x, &end) &&
		      (mgt_py_numel(x) == 0 || end < x->storage->numel);
	if (!mine || !inside)
		return mgt_err(MGT_ERR_FORMAT, "%s: not a tensor of this file (nor a view inside one's storage)", t->name);
	return MGT_OK;
}

/* Element e (elsize bytes at p) of x's dtype as float32; false when an integer is beyond 2^24. */
static bool to_f32(mgt_dt dt, const uint8_t *p, float *out)
{
	int64_t i;
	switch (dt) {
	case MGT_ST_F32: memcpy(out, p, 4); return true;
	case MGT_ST_F16: *out = mgt_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); return true;
	case MGT_ST_BF16: *out = mgt_bf16_to_f32((uint16_t)(p[0] | p[1] << 8)); return true;
	case MGT_ST_F64: {
		double d;
		memcpy(&d, p, 8);
		*out = (float)d;
		return true;
	}
	case MGT_ST_I64: memcpy(&i, p, 8); break;
	case MGT_ST_I32: { int32_t v; memcpy(&v, p, 4); i = v; break; }
	case MGT_ST_I16: { int16_t v; memcpy(&v, p, 2); i = v; break; }
	case MGT_ST_I8: i = (int8_t)p[0]; break;
	case MGT_ST_BOOL: i = p[0] != 0; break;
	default: i = p[0]; break; /* U8 */
	}
	*out = (float)i;
	return i >= -(1 << 24) && i <= (1 << 24);
}

static mgt_status convert(const mgt_torch *t, const mgt_py *x, const uint8_t *src, float *dst, size_t k)
{
	size_t es = mgt_dt_size(x->dtype);
	if (x->dtype == MGT_ST_F32) {
		memcpy(dst, src, 4 * k);
		return MGT_OK;
	}
	if (x->dtype == MGT_ST_BF16) { /* bfloat16: the high half of a float32 */
		for (size_t j = 0; j < k; j++) {
			uint32_t u = (uint32_t)(src[2 * j] | src[2 * j + 1] << 8) << 16;
			memcpy(dst + j, &u, 4);
		}
		return MGT_OK;
	}
	for (size_t j = 0; j < k; j++)
		if (!to_f32(x->dtype, src + j * es, dst + j))
			return mgt_err(MGT_ERR_FORMAT, "%s: a %s tensor over storage '%s': a value beyond 2^24 is not "
				       "exact as float32", t->name, x->dtype_name, x->storage->s);
	return MGT_OK;
}

static bool contiguous(const mgt_py *x)
{
	int64_t want = 1;
	for (int d = x->ndim - 1; d >= 0; d--) {
		if (x->size[d] != 1 && x->stride[d] != want)
			return false;
		want *= x->size[d];
	}
	return true;
}

/* A contiguous tensor: straight from the record, in chunks when converting. */
static mgt_status read_contig(mgt_torch *t, const mgt_py *x, void *dst, bool f32, size_t numel)
{
	size_t es = mgt_dt_size(x->dtype);
	zip_int64_t rec = t->rec[x->storage->i];
	uint64_t off = (uint64_t)x->offset * es;
	if (!f32 || x->dtype == MGT_ST_F32)
		return read_rec(t, rec, off, dst, numel * es);
	enum { CHUNK = 1 << 18 }; /* elements */
	uint8_t *buf = mgt_malloc(CHUNK * es);
	if (!buf)
		return MGT_ERR_NOMEM;
	zip_file_t *f;
	const char *rn;
	mgt_status st = open_rec(t, rec, off, &f, &rn);
	for (size_t i = 0; st == MGT_OK && i < numel; i += CHUNK) {
		size_t k = numel - i < CHUNK ? numel - i : CHUNK;
		st = read_next(t, f, rn, buf, k * es);
		if (st == MGT_OK)
			st = convert(t, x, buf, (float *)dst + i, k);
	}
	if (f)
		zip_fclose(f);
	free(buf);
	return st;
}

/* The bytes of x's storage in t->cache (kept for the next strided read of the same storage). */
static mgt_status cache_storage(mgt_torch *t, const mgt_py *st, size_t es)
{
	if (t->cache_st == st)
		return MGT_OK;
	free(t->cache);
	t->cache = NULL;
	t->cache_st = NULL;
	size_t n = (size_t)st->numel * es;
	uint8_t *b = mgt_malloc(n ? n : 1);
	if (!b)
		return MGT_ERR_NOMEM;
	mgt_status s = read_rec(t, t->rec[st->i], 0, b, n);
	if (s != MGT_OK) {
		free(b);
		return s;
	}
	t->cache = b;
	t->cache_st = st;
	return MGT_OK;
}

/* The elements base + j * ls, j < k, of the cached storage: copied to dst (raw) or through seg
 * (k elements' room) converted to float32. */
static mgt_status gather(mgt_torch *t, const mgt_py *x, int64_t base, int64_t ls, size_t k, uint8_t *seg,
			 void *dst, bool f32)
{
	size_t es = mgt_dt_size(x->dtype);
	uint8_t *o = f32 ? seg : dst;
	const uint8_t *c = t->cache;
	if (es == 2)
		for (size_t j = 0; j < k; j++)
			memcpy(o + 2 * j, c + (size_t)(base + (int64_t)j * ls) * 2, 2);
	else
		for (size_t j = 0; j < k; j++)
			memcpy(o + j * es, c + (size_t)(base + (int64_t)j * ls) * es, es);
	return f32 ? convert(t, x, seg, dst, k) : MGT_OK;
}

/* A strided tensor: gathered from the cached storage, the last dim in segments of 2^14. */
static mgt_status read_strided(mgt_torch *t, const mgt_py *x, void *dst, bool f32)
{
	size_t es = mgt_dt_size(x->dtype);
	TRY(cache_storage(t, x->storage, es));
	enum { SEG = 1 << 14 };
	uint8_t *seg = mgt_malloc(SEG * es);
	if (!seg)
		return MGT_ERR_NOMEM;
	int nd = x->ndim;
	int64_t idx[MGT_PY_MAX_DIM] = {0}, last = x->size[nd - 1], ls = x->stride[nd - 1];
	size_t out = 0, osz = f32 ? 4 : es;
	mgt_status st = MGT_OK;
	for (int d = 0; st == MGT_OK && d >= 0;) {
		int64_t base = x->offset;
		for (int e = 0; e < nd - 1; e++)
			base += idx[e] * x->stride[e];
		for (int64_t j = 0; st == MGT_OK && j < last; j += SEG) {
			size_t k = (size_t)(last - j < SEG ? last - j : SEG);
			st = gather(t, x, base + j * ls, ls, k, seg, (uint8_t *)dst + out * osz, f32);
			out += k;
		}
		for (d = nd - 2; d >= 0 && ++idx[d] == x->size[d]; d--)
			idx[d] = 0;
	}
	free(seg);
	return st;
}

static mgt_status read_any(mgt_torch *t, const mgt_py *x, void *dst, bool f32)
{
	TRY(check_x(t, x));
	if (!x->dtype_ok)
		return mgt_err(MGT_ERR_FORMAT, "%s: a tensor of dtype %s (over storage '%s') cannot be read", t->name,
			       x->dtype_name, x->storage->s);
	int64_t numel = mgt_py_numel(x);
	if (numel == 0)
		return MGT_OK;
	if (x->ndim == 0 || contiguous(x))
		return read_contig(t, x, dst, f32, (size_t)numel);
	return read_strided(t, x, dst, f32);
}

mgt_status mgt_torch_read_f32(mgt_torch *t, const mgt_py *x, float *dst) { return read_any(t, x, dst, true); }

mgt_status mgt_torch_read_raw(mgt_torch *t, const mgt_py *x, void *dst) { return read_any(t, x, dst, false); }
