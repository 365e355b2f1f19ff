/* lib/data: Megatron indexed dataset (MMIDIDX v1): dtype table, reader and writer.
 *
 * Layout (megatron/core/datasets/indexed_dataset.py, man/man5/mgt-dataset.5): .idx = magic[9] "MMIDIDX\0\0",
 * u64 version (1), u8 dtype code, u64 N (sequences), u64 D1 (document indices), int32 lengths[N],
 * int64 pointers[N], int64 document_indices[D1]; all little-endian, no padding, so the int64
 * arrays are usually unaligned (read with memcpy). .bin = every sequence's ids, packed, in order.
 * Writer: megatron/core/datasets/indexed_dataset.py (_IndexWriter, IndexedDatasetBuilder).
 */
#include "data.h"

#include <endian.h>
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MGT_IDX_HEADER = 34 }; /* magic 9 + version 8 + dtype 1 + N 8 + D1 8 */
static const unsigned char mgt_idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

/* ---- dtype table ------------------------------------------------------------------------- */

size_t mgt_dtype_size(int code)
{
	switch (code) {
	case MGT_DT_UINT8: case MGT_DT_INT8: return 1;
	case MGT_DT_INT16: case MGT_DT_UINT16: return 2;
	case MGT_DT_INT32: case MGT_DT_FLOAT32: return 4;
	case MGT_DT_INT64: case MGT_DT_FLOAT64: return 8;
	}
	return 0;
}

const char *mgt_dtype_name(int code)
{
	switch (code) {
	case MGT_DT_UINT8: return "uint8";
	case MGT_DT_INT8: return "int8";
	case MGT_DT_INT16: return "int16";
	case MGT_DT_INT32: return "int32";
	case MGT_DT_INT64: return "int64";
	case MGT_DT_FLOAT64: return "float64";
	case MGT_DT_FLOAT32: return "float32";
	case MGT_DT_UINT16: return "uint16";
	}
	return "unknown";
}

mgt_dtype mgt_dtype_optimal(int64_t vocab_size)
{
	return vocab_size < 65500 ? MGT_DT_UINT16 : MGT_DT_INT32;
}

/* ---- reader -------------------------------------------------------------------------------- */

/* Scratch bytes for item conversion, copies and hashing. */
#define CONV_BYTES ((size_t)1 << 20)

struct mgt_idx {
	char *prefix, *idx_path, *bin_path;
	const unsigned char *idx;  /* mmap of the .idx */
	size_t idx_size;
	const unsigned char *bin;  /* mmap of the .bin (NULL when empty) */
	size_t bin_size;
	int bin_fd;
	int dtype;
	size_t itemsize;
	uint64_t n, d1, tokens;
	int has_modes;             /* N trailing int8 sequence modes (a multimodal dataset) */
	const unsigned char *lengths, *pointers, *docs;
	bool has_sums;             /* PREFIX.checksums.json was there: bin_sum is the .bin's */
	uint64_t bin_sum;
};

static uint64_t ld_u64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

static int32_t ld_i32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return (int32_t)le32toh(v);
}

static char *cat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = mgt_malloc(na + nb + 1);
	if (s) {
		memcpy(s, a, na);
		memcpy(s + na, b, nb + 1);
	}
	return s;
}

/* mmap a whole file read-only; an empty file maps to NULL. Keeps the fd when keep_fd. */
static mgt_status map_file(const char *path, const unsigned char **p, size_t *size, int *keep_fd)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		mgt_status e = mgt_err(MGT_ERR_IO, "%s: not a regular file", path);
		close(fd);
		return e;
	}
	*size = (size_t)sb.st_size;
	*p = NULL;
	if (*size > 0) {
		void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			mgt_status e = mgt_err(MGT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
			close(fd);
			return e;
		}
		*p = m;
	}
	if (keep_fd)
		*keep_fd = fd;
	else
		close(fd);
	return MGT_OK;
}

/* Header fields and the size they imply. */
static mgt_status check_header(mgt_idx *d)
{
	const unsigned char *h = d->idx;
	if (d->idx_size < MGT_IDX_HEADER)
		return mgt_err(MGT_ERR_FORMAT, "%s: file is %zu bytes, too short for the %d-byte header",
			d->idx_path, d->idx_size, MGT_IDX_HEADER);
	if (memcmp(h, mgt_idx_magic, 9) != 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: bad magic (expected MMIDIDX)", d->idx_path);
	uint64_t version = ld_u64(h + 9);
	if (version != 1)
		return mgt_err(MGT_ERR_FORMAT, "%s: version is %llu (expected 1)", d->idx_path,
			(unsigned long long)version);
	d->dtype = h[17];
	d->itemsize = mgt_dtype_size(d->dtype);
	if (!d->itemsize)
		return mgt_err(MGT_ERR_FORMAT, "%s: dtype code is %d (expected 1 to 8)", d->idx_path, d->dtype);
	d->n = ld_u64(h + 18);
	d->d1 = ld_u64(h + 26);
	if (d->d1 == 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: document_count is 0 (expected at least 1)", d->idx_path);
	if (d->n > UINT64_MAX / 32 || d->d1 > UINT64_MAX / 32)
		return mgt_err(MGT_ERR_FORMAT, "%s: file is %zu bytes, header says sequence_count %llu, "
			"document_count %llu", d->idx_path, d->idx_size,
			(unsigned long long)d->n, (unsigned long long)d->d1);
	uint64_t want = MGT_IDX_HEADER + 12 * d->n + 8 * d->d1;
	d->has_modes = d->n > 0 && d->idx_size == want + d->n;
	if (d->idx_size != want && !d->has_modes)
		return mgt_err(MGT_ERR_FORMAT, "%s: file is %zu bytes, header says %llu (sequence_count "
			"%llu, document_count %llu)", d->idx_path, d->idx_size, (unsigned long long)want,
			(unsigned long long)d->n, (unsigned long long)d->d1);
	d->lengths = h + MGT_IDX_HEADER;
	d->pointers = d->lengths + 4 * d->n;
	d->docs = d->pointers + 8 * d->n;
	return MGT_OK;
}

/* lengths >= 0 and pointers = running sum of lengths * itemsize; sets d->tokens. */
static mgt_status check_sequences(mgt_idx *d)
{
	uint64_t ptr = 0, tokens = 0;
	for (uint64_t i = 0; i < d->n; i++) {
		int32_t len = ld_i32(d->lengths + 4 * i);
		uint64_t p = ld_u64(d->pointers + 8 * i);
		if (len < 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: sequence_lengths[%llu] is %d (expected >= 0)",
				d->idx_path, (unsigned long long)i, len);
		if (p != ptr)
			return mgt_err(MGT_ERR_FORMAT, "%s: sequence_pointers[%llu] is %lld (expected %llu, "
				"the sum of the preceding lengths times %zu)", d->idx_path, (unsigned long long)i,
				(long long)p, (unsigned long long)ptr, d->itemsize);
		ptr += (uint64_t)len * d->itemsize;
		tokens += (uint64_t)len;
	}
	d->tokens = tokens;
	return MGT_OK;
}

/* document_indices: [0] = 0, non-decreasing, last = N. */
static mgt_status check_documents(const mgt_idx *d)
{
	uint64_t prev = 0;
	for (uint64_t k = 0; k < d->d1; k++) {
		uint64_t v = ld_u64(d->docs + 8 * k);
		if (k == 0 && v != 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: document_indices[0] is %lld (expected 0)",
				d->idx_path, (long long)v);
		if (v < prev || v > d->n)
			return mgt_err(MGT_ERR_FORMAT, "%s: document_indices[%llu] is %lld (expected %llu to "
				"%llu)", d->idx_path, (unsigned long long)k, (long long)v,
				(unsigned long long)prev, (unsigned long long)d->n);
		prev = v;
	}
	if (prev != d->n)
		return mgt_err(MGT_ERR_FORMAT, "%s: document_indices ends at %llu (expected sequence_count "
			"%llu)", d->idx_path, (unsigned long long)prev, (unsigned long long)d->n);
	return MGT_OK;
}

static mgt_status check_bin(const mgt_idx *d)
{
	uint64_t want = d->tokens * d->itemsize;
	if (d->bin_size != want)
		return mgt_err(MGT_ERR_FORMAT, "%s: file is %zu bytes, %s says %llu (%llu tokens of %s)",
			d->bin_path, d->bin_size, d->idx_path, (unsigned long long)want,
			(unsigned long long)d->tokens, mgt_dtype_name(d->dtype));
	return MGT_OK;
}

static mgt_status idx_paths(mgt_idx *d, const char *prefix)
{
	d->prefix = mgt_strdup(prefix);
	d->idx_path = cat(prefix, ".idx");
	d->bin_path = cat(prefix, ".bin");
	return d->prefix && d->idx_path && d->bin_path ? MGT_OK : MGT_ERR_NOMEM;
}

/* ---- PREFIX.checksums.json: {"algorithm": "xxh3_64", "idx": HEX, "bin": HEX, "idx_bytes": N,
 * "bin_bytes": N} (mgt-dataset(5) CHECKSUMS) ---- */

static char *sums_path(const char *prefix) { return cat(prefix, MGT_IDX_SUMS_SUFFIX); }

/* Read the side file if there is one: sizes and the .idx checked now, the .bin's kept. */
static mgt_status check_sums(mgt_idx *d)
{
	char *path = sums_path(d->prefix);
	if (!path)
		return MGT_ERR_NOMEM;
	struct stat sb;
	mgt_status st = MGT_OK;
	if (stat(path, &sb) == 0) {
		json_error_t e;
		json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
		const char *algo = json_string_value(json_object_get(j, "algorithm"));
		uint64_t idx_sum = 0;
		bool ok = j && algo && !strcmp(algo, "xxh3_64") &&
			  mgt_xxh3_parse(json_string_value(json_object_get(j, "idx")), &idx_sum) &&
			  mgt_xxh3_parse(json_string_value(json_object_get(j, "bin")), &d->bin_sum);
		if (!ok)
			st = mgt_err(MGT_ERR_FORMAT, "%s: not a dataset checksum file {\"algorithm\": \"xxh3_64\", \"idx\": "
				     "HEX, \"bin\": HEX, ...} (damaged?)", path);
		else if ((uint64_t)json_integer_value(json_object_get(j, "idx_bytes")) != d->idx_size ||
			 (uint64_t)json_integer_value(json_object_get(j, "bin_bytes")) != d->bin_size)
			st = mgt_err(MGT_ERR_FORMAT, "%s: sizes %lld and %lld recorded, the files are %zu and %zu bytes: the "
				     "dataset was changed or damaged since it was written", path,
				     (long long)json_integer_value(json_object_get(j, "idx_bytes")),
				     (long long)json_integer_value(json_object_get(j, "bin_bytes")), d->idx_size, d->bin_size);
		else if (mgt_xxh3_64(d->idx, d->idx_size) != idx_sum)
			st = mgt_err(MGT_ERR_FORMAT, "%s: its checksum differs from %s's: the file is damaged", d->idx_path, path);
		d->has_sums = !st;
		json_decref(j);
	}
	free(path);
	return st;
}

bool mgt_idx_has_sums(const mgt_idx *d) { return d->has_sums; }

mgt_status mgt_idx_verify_bin(const mgt_idx *d)
{
	uint64_t v = 0;
	mgt_status st = d->has_sums && d->bin_size ? mgt_xxh3_fd(d->bin_fd, d->bin_size, d->bin_path, &v) : MGT_OK;
	if (st || !d->has_sums || v == d->bin_sum || !d->bin_size)
		return st;
	return mgt_err(MGT_ERR_FORMAT, "%s: its checksum differs from %s%s's: the file is damaged", d->bin_path,
		       d->prefix, MGT_IDX_SUMS_SUFFIX);
}

/* Write the side file of the dataset just written at prefix (both files hashed as they are). */
static mgt_status write_sums(const char *prefix)
{
	mgt_idx *d = NULL;
	mgt_status st = mgt_idx_open(&d, prefix);
	char *path = st ? NULL : sums_path(prefix), *text = NULL, hi[17], hb[17];
	if (!st && !path)
		st = MGT_ERR_NOMEM;
	uint64_t bin_sum = mgt_xxh3_64(NULL, 0);
	if (!st && d->bin_size)
		st = mgt_xxh3_fd(d->bin_fd, d->bin_size, d->bin_path, &bin_sum);
	if (!st) {
		mgt_xxh3_hex(mgt_xxh3_64(d->idx, d->idx_size), hi);
		mgt_xxh3_hex(bin_sum, hb);
		json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I}", "algorithm", "xxh3_64", "idx", hi, "bin", hb,
				      "idx_bytes", (json_int_t)d->idx_size, "bin_bytes", (json_int_t)d->bin_size);
		text = j ? json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
		json_decref(j);
		if (!text)
			st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	mgt_afile af;
	if (!st)
		st = mgt_afile_open(&af, path, 1);
	if (!st && (st = mgt_afile_write(&af, text, strlen(text))))
		mgt_afile_abort(&af);
	else if (!st)
		st = mgt_afile_commit(&af);
	free(text);
	free(path);
	mgt_idx_close(d);
	return st;
}

mgt_status mgt_idx_open(mgt_idx **out, const char *prefix)
{
	*out = NULL;
	mgt_idx *d = calloc(1, sizeof *d);
	if (!d)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	d->bin_fd = -1;
	mgt_status st = idx_paths(d, prefix);
	if (!st)
		st = map_file(d->idx_path, &d->idx, &d->idx_size, NULL);
	if (!st)
		st = check_header(d);
	if (!st)
		st = check_sequences(d);
	if (!st)
		st = check_documents(d);
	if (!st)
		st = map_file(d->bin_path, &d->bin, &d->bin_size, &d->bin_fd);
	if (!st)
		st = check_bin(d);
	if (!st)
		st = check_sums(d);
	if (st) {
		mgt_idx_close(d);
		return st;
	}
	*out = d;
	return MGT_OK;
}

void mgt_idx_close(mgt_idx *d)
{
	if (!d)
		return;
	if (d->idx)
		munmap((void *)d->idx, d->idx_size);
	if (d->bin)
		munmap((void *)d->bin, d->bin_size);
	if (d->bin_fd >= 0)
		close(d->bin_fd);
	free(d->prefix);
	free(d->idx_path);
	free(d->bin_path);
	free(d);
}

int mgt_idx_dtype(const mgt_idx *d) { return d->dtype; }
uint64_t mgt_idx_num_sequences(const mgt_idx *d) { return d->n; }
uint64_t mgt_idx_num_documents(const mgt_idx *d) { return d->d1 - 1; }
uint64_t mgt_idx_num_tokens(const mgt_idx *d) { return d->tokens; }
int32_t mgt_idx_seq_length(const mgt_idx *d, uint64_t i) { return ld_i32(d->lengths + 4 * i); }
int64_t mgt_idx_seq_pointer(const mgt_idx *d, uint64_t i) { return (int64_t)ld_u64(d->pointers + 8 * i); }
int64_t mgt_idx_doc_index(const mgt_idx *d, uint64_t k) { return (int64_t)ld_u64(d->docs + 8 * k); }

const void *mgt_idx_bin(const mgt_idx *d, size_t *size)
{
	*size = d->bin_size;
	return d->bin ? (const void *)d->bin : (const void *)"";
}

const char *mgt_idx_prefix(const mgt_idx *d) { return d->prefix; }

/* One .bin item as an int32 id; returns 0 when it is not one (out of range, fractional, NaN). */
static int item_to_i32(const unsigned char *p, int dtype, int32_t *v)
{
	switch (dtype) {
	case MGT_DT_UINT8: *v = p[0]; return 1;
	case MGT_DT_INT8: *v = (int8_t)p[0]; return 1;
	case MGT_DT_INT16: { uint16_t u; memcpy(&u, p, 2); *v = (int16_t)le16toh(u); return 1; }
	case MGT_DT_UINT16: { uint16_t u; memcpy(&u, p, 2); *v = le16toh(u); return 1; }
	case MGT_DT_INT32: *v = ld_i32(p); return 1;
	case MGT_DT_INT64: {
		int64_t x = (int64_t)ld_u64(p);
		*v = (int32_t)x;
		return x >= INT32_MIN && x <= INT32_MAX;
	}
	case MGT_DT_FLOAT32: {
		uint32_t u; float f;
		memcpy(&u, p, 4);
		u = le32toh(u);
		memcpy(&f, &u, 4);
		*v = f >= -2147483648.0f && f < 2147483648.0f ? (int32_t)f : 0;
		return f >= -2147483648.0f && f < 2147483648.0f && (float)*v == f;
	}
	case MGT_DT_FLOAT64: {
		uint64_t u = ld_u64(p); double f;
		memcpy(&f, &u, 8);
		*v = f >= -2147483648.0 && f < 2147483648.0 ? (int32_t)f : 0;
		return f >= -2147483648.0 && f < 2147483648.0 && (double)*v == f;
	}
	}
	return 0;
}

static mgt_status grow_ids(int32_t **out, size_t *cap, size_t n)
{
	if (n <= *cap && *out)
		return MGT_OK;
	size_t c = *cap ? *cap : 256;
	while (c < n)
		c *= 2;
	int32_t *p = mgt_realloc(*out, c * sizeof *p);
	if (!p)
		return MGT_ERR_NOMEM;
	*out = p;
	*cap = c;
	return MGT_OK;
}

mgt_status mgt_idx_get(const mgt_idx *d, uint64_t i, int32_t **out, size_t *n, size_t *cap)
{
	size_t len = (size_t)mgt_idx_seq_length(d, i);
	if (grow_ids(out, cap, len))
		return MGT_ERR_NOMEM;
	*n = 0;
	if (len == 0)
		return MGT_OK;   /* the .bin may be empty (not mapped) */
	const unsigned char *p = d->bin + mgt_idx_seq_pointer(d, i);
	int32_t *v = *out;
	if (d->dtype == MGT_DT_UINT16) {
		for (size_t j = 0; j < len; j++)
			v[j] = (int32_t)p[2 * j] | (int32_t)p[2 * j + 1] << 8;
	} else if (d->dtype == MGT_DT_INT32) {
		for (size_t j = 0; j < len; j++)
			v[j] = ld_i32(p + 4 * j);
	} else {
		for (size_t j = 0; j < len; j++)
			if (!item_to_i32(p + j * d->itemsize, d->dtype, &v[j]))
				return mgt_err(MGT_ERR_FORMAT, "%s: sequence %llu, item %zu: not an int32 token id",
					d->bin_path, (unsigned long long)i, j);
	}
	*n = len;
	return MGT_OK;
}

/* ---- writer -------------------------------------------------------------------------------- */


struct mgt_idx_writer {
	char *bin_path, *idx_path, *prefix;
	int dtype;
	size_t itemsize;
	int overwrite;
	mgt_afile bin;
	FILE *lens, *docs;       /* spools: int32 lengths, int64 document indices after the leading 0 */
	uint64_t n, ndocs, tokens;
	unsigned char *conv;     /* CONV_BYTES scratch for item conversion and copies */
};

static void put_u64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static void put_u32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

/* An anonymous temporary file next to the output: created, then unlinked at once, so nothing is
 * left behind whatever happens to the process. */
static mgt_status spool_open(const char *prefix, const char *what, FILE **out)
{
	char *tmpl = mgt_malloc(strlen(prefix) + strlen(what) + 32);
	if (!tmpl)
		return MGT_ERR_NOMEM;
	sprintf(tmpl, "%s.idx.%s.tmp.XXXXXX", prefix, what);
	int fd = mkostemp(tmpl, O_CLOEXEC);
	if (fd < 0) {
		mgt_status e = mgt_err(MGT_ERR_IO, "%s.idx: cannot create a temporary file beside it (%s): %s",
			prefix, tmpl, strerror(errno));
		free(tmpl);
		return e;
	}
	unlink(tmpl);
	*out = fdopen(fd, "w+b");
	if (!*out) {
		mgt_status e = mgt_err(MGT_ERR_IO, "%s: cannot open: %s", tmpl, strerror(errno));
		close(fd);
		free(tmpl);
		return e;
	}
	free(tmpl);
	return MGT_OK;
}

static mgt_status spool_write(mgt_idx_writer *w, FILE *f, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, f) != n)
		return mgt_err(MGT_ERR_IO, "%s: write failed (temporary index data): %s", w->idx_path,
			strerror(errno ? errno : EIO));
	return MGT_OK;
}

static mgt_status writer_exists(const mgt_idx_writer *w)
{
	struct stat sb;
	if (w->overwrite)
		return MGT_OK;
	if (stat(w->bin_path, &sb) == 0)
		return mgt_err(MGT_ERR_EXISTS, "%s: output already exists (remove it or pass --overwrite)",
			w->bin_path);
	if (stat(w->idx_path, &sb) == 0)
		return mgt_err(MGT_ERR_EXISTS, "%s: output already exists (remove it or pass --overwrite)",
			w->idx_path);
	return MGT_OK;
}

mgt_status mgt_idx_writer_open(mgt_idx_writer **out, const char *prefix, mgt_dtype dtype, int overwrite)
{
	*out = NULL;
	if (!mgt_dtype_size((int)dtype))
		return mgt_err(MGT_ERR_USAGE, "%s: unknown dtype code %d", prefix, (int)dtype);
	mgt_idx_writer *w = calloc(1, sizeof *w);
	if (!w)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	w->dtype = (int)dtype;
	w->itemsize = mgt_dtype_size((int)dtype);
	w->overwrite = overwrite;
	w->prefix = mgt_strdup(prefix);
	w->bin_path = cat(prefix, ".bin");
	w->idx_path = cat(prefix, ".idx");
	w->conv = mgt_malloc(CONV_BYTES);
	mgt_status st = w->prefix && w->bin_path && w->idx_path && w->conv ? MGT_OK : MGT_ERR_NOMEM;
	if (!st)
		st = writer_exists(w);
	if (!st)
		st = spool_open(prefix, "lengths", &w->lens);
	if (!st)
		st = spool_open(prefix, "documents", &w->docs);
	if (!st)
		st = mgt_afile_open(&w->bin, w->bin_path, overwrite);
	if (st) {
		mgt_idx_writer_abort(w);
		return st;
	}
	*out = w;
	return MGT_OK;
}

/* Whether id is exactly representable in dtype (numpy would wrap silently; we refuse). */
static int id_fits(int dtype, int32_t id)
{
	switch (dtype) {
	case MGT_DT_UINT8: return id >= 0 && id <= UINT8_MAX;
	case MGT_DT_INT8: return id >= INT8_MIN && id <= INT8_MAX;
	case MGT_DT_INT16: return id >= INT16_MIN && id <= INT16_MAX;
	case MGT_DT_UINT16: return id >= 0 && id <= UINT16_MAX;
	case MGT_DT_FLOAT32: return id >= -(1 << 24) && id <= (1 << 24);
	}
	return 1;
}

/* Little-endian bytes of n ids (n * itemsize <= CONV_BYTES) into out. */
static void encode_items(unsigned char *out, int dtype, const int32_t *ids, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		int32_t id = ids[j];
		switch (dtype) {
		case MGT_DT_UINT8: case MGT_DT_INT8: out[j] = (unsigned char)id; break;
		case MGT_DT_UINT16: case MGT_DT_INT16:
			out[2 * j] = (unsigned char)id;
			out[2 * j + 1] = (unsigned char)((uint32_t)id >> 8);
			break;
		case MGT_DT_INT32: put_u32(out + 4 * j, (uint32_t)id); break;
		case MGT_DT_INT64: put_u64(out + 8 * j, (uint64_t)(int64_t)id); break;
		case MGT_DT_FLOAT32: {
			float f = (float)id;
			uint32_t u;
			memcpy(&u, &f, 4);
			put_u32(out + 4 * j, u);
			break;
		}
		case MGT_DT_FLOAT64: {
			double f = (double)id;
			uint64_t u;
			memcpy(&u, &f, 8);
			put_u64(out + 8 * j, u);
			break;
		}
		}
	}
}

static mgt_status check_ids(const mgt_idx_writer *w, const int32_t *ids, size_t n)
{
	if (n > INT32_MAX)
		return mgt_err(MGT_ERR_INPUT, "%s: document %llu has %zu tokens (at most %d fit a sequence)",
			w->bin_path, (unsigned long long)w->ndocs, n, INT32_MAX);
	for (size_t j = 0; j < n; j++)
		if (!id_fits(w->dtype, ids[j]))
			return mgt_err(MGT_ERR_INPUT, "%s: token id %d does not fit the dataset dtype %s",
				w->bin_path, ids[j], mgt_dtype_name(w->dtype));
	return MGT_OK;
}

/* Close the current document: document_indices gets the sequence count. */
static mgt_status end_document(mgt_idx_writer *w)
{
	unsigned char b[8];
	put_u64(b, w->n);
	w->ndocs++;
	return spool_write(w, w->docs, b, 8);
}

/* One sequence of n > 0 ids: its bytes and its length, without closing the document. */
static mgt_status add_sequence(mgt_idx_writer *w, const int32_t *ids, size_t n)
{
	mgt_status st;
	size_t per = CONV_BYTES / w->itemsize;
	for (size_t j = 0; j < n; j += per) {
		size_t k = n - j < per ? n - j : per;
		encode_items(w->conv, w->dtype, ids + j, k);
		if ((st = mgt_afile_write(&w->bin, w->conv, k * w->itemsize)))
			return st;
	}
	unsigned char b[4];
	put_u32(b, (uint32_t)n);
	if ((st = spool_write(w, w->lens, b, 4)))
		return st;
	w->n++;
	w->tokens += n;
	return MGT_OK;
}

mgt_status mgt_idx_writer_add_document(mgt_idx_writer *w, const int32_t *ids, size_t n)
{
	mgt_status st = check_ids(w, ids, n);
	if (!st && n)
		st = add_sequence(w, ids, n);
	return st ? st : end_document(w);
}

mgt_status mgt_idx_writer_add_sequences(mgt_idx_writer *w, const int32_t *ids, const int32_t *lens, size_t k)
{
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < k && !st; i++) {
		if (lens[i] <= 0)
			return mgt_err(MGT_ERR_INPUT, "%s: document %llu: sequence %zu has length %d", w->bin_path,
				       (unsigned long long)w->ndocs, i, lens[i]);
		if (!(st = check_ids(w, ids, (size_t)lens[i])))
			st = add_sequence(w, ids, (size_t)lens[i]);
		ids += lens[i];
	}
	return st ? st : end_document(w);
}

uint64_t mgt_idx_writer_num_tokens(const mgt_idx_writer *w) { return w->tokens; }
uint64_t mgt_idx_writer_num_documents(const mgt_idx_writer *w) { return w->ndocs; }

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			if (k == 0)
				errno = ENOSPC;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Append the .bin of d to the output: copy_file_range (no user-space copy, reflinks where the
 * file system can), falling back to pread through the scratch buffer. */
static mgt_status copy_bin(mgt_idx_writer *w, const mgt_idx *d)
{
	if (fflush(w->bin.f) != 0)
		return mgt_err(MGT_ERR_IO, "%s: write failed: %s", w->bin_path, strerror(errno));
	int out = fileno(w->bin.f);
	off_t off = 0;
	size_t left = d->bin_size;
	int use_cfr = 1;
	while (left > 0) {
		ssize_t k = -1;
		if (use_cfr) {
			k = copy_file_range(d->bin_fd, &off, out, NULL, left, 0);
			if (k < 0 && errno != EINTR) {
				use_cfr = 0;
				continue;
			}
		} else {
			k = pread(d->bin_fd, w->conv, left < CONV_BYTES ? left : CONV_BYTES, off);
			if (k > 0 && write_all(out, w->conv, (size_t)k) != 0)
				return mgt_err(MGT_ERR_IO, "%s: write failed: %s", w->bin_path, strerror(errno));
			if (k > 0)
				off += k;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return mgt_err(MGT_ERR_IO, "%s: read failed: %s", d->bin_path,
				k < 0 ? strerror(errno) : "file shrank while merging");
		left -= (size_t)k;
	}
	if (fseeko(w->bin.f, 0, SEEK_END) != 0)
		return mgt_err(MGT_ERR_IO, "%s: seek failed: %s", w->bin_path, strerror(errno));
	return MGT_OK;
}

/* document_indices[1:] of d shifted by offset (IndexedDatasetBuilder.add_index). */
static mgt_status append_docs(mgt_idx_writer *w, const mgt_idx *d, uint64_t offset)
{
	size_t per = CONV_BYTES / 8, k = 0;
	for (uint64_t i = 1; i < d->d1; i++) {
		put_u64(w->conv + 8 * k, offset + ld_u64(d->docs + 8 * i));
		if (++k == per || i + 1 == d->d1) {
			mgt_status st = spool_write(w, w->docs, w->conv, 8 * k);
			if (st)
				return st;
			k = 0;
		}
	}
	return MGT_OK;
}

mgt_status mgt_idx_writer_add_dataset(mgt_idx_writer *w, const mgt_idx *d)
{
	if (d->dtype != w->dtype)
		return mgt_err(MGT_ERR_FORMAT, "%s: dtype is %s (expected %s, the dtype of %s)", d->prefix,
			mgt_dtype_name(d->dtype), mgt_dtype_name(w->dtype), w->prefix);
	uint64_t offset = w->n;
	mgt_status st = copy_bin(w, d);
	if (!st)
		st = spool_write(w, w->lens, d->lengths, 4 * d->n);
	if (!st)
		st = append_docs(w, d, offset);
	if (st)
		return st;
	w->n += d->n;
	w->ndocs += d->d1 - 1;
	w->tokens += d->tokens;
	return MGT_OK;
}

/* Copy `bytes` bytes of a spool to the .idx. */
static mgt_status copy_spool(mgt_idx_writer *w, mgt_afile *idx, FILE *f, uint64_t bytes)
{
	rewind(f);
	while (bytes > 0) {
		size_t k = bytes < CONV_BYTES ? (size_t)bytes : CONV_BYTES;
		if (fread(w->conv, 1, k, f) != k)
			return mgt_err(MGT_ERR_IO, "%s: read failed (temporary index data)", w->idx_path);
		mgt_status st = mgt_afile_write(idx, w->conv, k);
		if (st)
			return st;
		bytes -= k;
	}
	return MGT_OK;
}

/* sequence_pointers from the spooled lengths: pointer[i] = sum(lengths[:i]) * itemsize. */
static mgt_status write_pointers(mgt_idx_writer *w, mgt_afile *idx)
{
	unsigned char out[8 * 4096], in[4 * 4096];
	uint64_t ptr = 0, left = w->n;
	rewind(w->lens);
	while (left > 0) {
		size_t k = left < 4096 ? (size_t)left : 4096;
		if (fread(in, 4, k, w->lens) != k)
			return mgt_err(MGT_ERR_IO, "%s: read failed (temporary index data)", w->idx_path);
		for (size_t j = 0; j < k; j++) {
			put_u64(out + 8 * j, ptr);
			ptr += (uint64_t)ld_i32(in + 4 * j) * w->itemsize;
		}
		mgt_status st = mgt_afile_write(idx, out, 8 * k);
		if (st)
			return st;
		left -= k;
	}
	return MGT_OK;
}

static mgt_status write_idx(mgt_idx_writer *w, mgt_afile *idx)
{
	unsigned char h[MGT_IDX_HEADER], zero[8] = {0};
	memcpy(h, mgt_idx_magic, 9);
	put_u64(h + 9, 1);
	h[17] = (unsigned char)w->dtype;
	put_u64(h + 18, w->n);
	put_u64(h + 26, w->ndocs + 1);
	mgt_status st = mgt_afile_write(idx, h, sizeof h);
	if (!st && fflush(w->lens) != 0)
		st = mgt_err(MGT_ERR_IO, "%s: write failed (temporary index data): %s", w->idx_path,
			strerror(errno));
	if (!st && fflush(w->docs) != 0)
		st = mgt_err(MGT_ERR_IO, "%s: write failed (temporary index data): %s", w->idx_path,
			strerror(errno));
	if (!st)
		st = copy_spool(w, idx, w->lens, 4 * w->n);
	if (!st)
		st = write_pointers(w, idx);
	if (!st)
		st = mgt_afile_write(idx, zero, 8);
	if (!st)
		st = copy_spool(w, idx, w->docs, 8 * w->ndocs);
	if (!st && fflush(idx->f) != 0)
		st = mgt_err(MGT_ERR_IO, "%s: write failed: %s", w->idx_path, strerror(errno));
	return st;
}

static void writer_free(mgt_idx_writer *w)
{
	if (w->lens)
		fclose(w->lens);
	if (w->docs)
		fclose(w->docs);
	free(w->conv);
	free(w->prefix);
	free(w->bin_path);
	free(w->idx_path);
	free(w);
}

mgt_status mgt_idx_writer_finish(mgt_idx_writer *w)
{
	mgt_afile idx;
	char *sums = sums_path(w->prefix);
	if (sums) /* an older dataset's, which the new files are about to replace */
		unlink(sums);
	free(sums);
	mgt_status st = mgt_afile_open(&idx, w->idx_path, w->overwrite);
	if (st) {
		mgt_idx_writer_abort(w);
		return st;
	}
	st = write_idx(w, &idx);
	if (!st && fflush(w->bin.f) != 0)
		st = mgt_err(MGT_ERR_IO, "%s: write failed: %s", w->bin_path, strerror(errno));
	if (!st)
		st = mgt_afile_commit(&w->bin);   /* .bin first: a visible .idx implies its .bin */
	if (st) {
		mgt_afile_abort(&idx);
		mgt_idx_writer_abort(w);
		return st;
	}
	if ((st = mgt_afile_commit(&idx))) {
		unlink(w->bin_path);
		unlink(w->idx_path);
	}
	if (!st)
		st = write_sums(w->prefix);
	writer_free(w);
	return st;
}

void mgt_idx_writer_abort(mgt_idx_writer *w)
{
	if (!w)
		return;
	mgt_afile_abort(&w->bin);
	writer_free(w);
}
