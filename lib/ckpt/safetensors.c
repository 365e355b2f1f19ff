/* lib/ckpt: safetensors files and Hugging Face model directories, reading (see ckpt.h; format:
 * huggingface/safetensors README; the writer is st_write.c). */
#include "ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)
#define ST_CHUNK (64u << 10)
#define ST_INDEX "model.safetensors.index.json"
#define ST_SINGLE "model.safetensors"

/* pread all n bytes at off. Returns 0, or -1 with errno (0 for a short file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n) {
		ssize_t k = pread(fd, p, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			if (k == 0)
				errno = 0;
			return -1;
		}
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}
/* numel of a shape, false on overflow past 2^62 */
bool ck_shape_numel(int ndim, const int64_t *shape, uint64_t *out)
{
	uint64_t n = 1;
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 0)
			return false;
		if (shape[d] && n > (UINT64_C(1) << 62) / (uint64_t)shape[d])
			return false;
		n *= (uint64_t)shape[d];
	}
	*out = n;
	return true;
}

/* ==== reader ================================================================================= */

typedef struct {
	mgt_st_tensor pub; /* first: a pub pointer is an entry pointer */
	int file;
} st_ent;

typedef struct {
	char *path;
	int fd;
	json_t *meta; /* the file's __metadata__ object or NULL */
} st_file;

struct mgt_st {
	st_file *files;
	size_t nfiles;
	st_ent *ents;
	size_t n, cap;
};

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const st_ent *)a)->pub.name, ((const st_ent *)b)->pub.name);
}

typedef struct {
	uint64_t b, e;
	const char *name;
} range;

static int range_cmp(const void *a, const void *b)
{
	const range *x = a, *y = b;
	return x->b < y->b ? -1 : x->b > y->b ? 1 : x->e < y->e ? -1 : x->e > y->e;
}

static bool json_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* Parse one entry of file fi's header into a new entry. */
static mgt_status parse_entry(mgt_st *s, int fi, const char *path, const char *name, json_t *v,
			      uint64_t base, uint64_t bufsize)
{
	if (!*name)
		return mgt_err(MGT_ERR_FORMAT, "%s: a tensor with an empty name", path);
	if (!json_is_object(v))
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
	json_t *off = json_object_get(v, "data_offsets");
	st_ent e = {.file = fi};
	if (!json_is_string(dt) || !mgt_dt_parse(json_string_value(dt), &e.pub.dtype))
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': unknown dtype %s%s%s (expected F32, F16, "
			       "BF16, F64, I64, I32, I16, I8, U8 or BOOL)", path, name,
			       json_is_string(dt) ? "'" : "", json_is_string(dt) ? json_string_value(dt) :
			       "(missing or not a string)", json_is_string(dt) ? "'" : "");
	if (!json_is_array(sh) || json_array_size(sh) > MGT_ST_MAX_DIM)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': shape is not an array of at most %d "
			       "integers", path, name, MGT_ST_MAX_DIM);
	e.pub.ndim = (int)json_array_size(sh);
	for (int d = 0; d < e.pub.ndim; d++) {
		json_t *x = json_array_get(sh, (size_t)d);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative "
				       "integer", path, name, d);
		e.pub.shape[d] = json_integer_value(x);
	}
	uint64_t numel, b, en;
	if (!ck_shape_numel(e.pub.ndim, e.pub.shape, &numel) ||
	    numel > (UINT64_C(1) << 62) / mgt_dt_size(e.pub.dtype))
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': element count overflows", path, name);
	if (!json_is_array(off) || json_array_size(off) != 2 || !json_u64(json_array_get(off, 0), &b) ||
	    !json_u64(json_array_get(off, 1), &en))
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': data_offsets is not two non-negative "
			       "integers", path, name);
	if (en < b || en > bufsize)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] outside the "
			       "data buffer of %llu bytes", path, name, (unsigned long long)b,
			       (unsigned long long)en, (unsigned long long)bufsize);
	e.pub.nbytes = numel * mgt_dt_size(e.pub.dtype);
	if (en - b != e.pub.nbytes)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes, expected "
			       "%llu for its shape and dtype %s", path, name, (unsigned long long)(en - b),
			       (unsigned long long)e.pub.nbytes, mgt_dt_name(e.pub.dtype));
	e.pub.offset = base + b;
	e.pub.file = s->files[fi].path;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		st_ent *p = mgt_realloc(s->ents, cap * sizeof *p);
		if (!p)
			return MGT_ERR_NOMEM;
		s->ents = p;
		s->cap = cap;
	}
	e.pub.name = mgt_strdup(name);
	if (!e.pub.name)
		return MGT_ERR_NOMEM;
	s->ents[s->n++] = e;
	return MGT_OK;
}

/* Read and check one file's header; its tensors are appended to s->ents. */
static mgt_status parse_file(mgt_st *s, int fi)
{
	st_file *f = &s->files[fi];
	const char *path = f->path;
	struct stat sb;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(f->fd, &sb) != 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return mgt_err(MGT_ERR_IO, "%s: not a regular file", path);
	uint64_t size = (uint64_t)sb.st_size, hlen = 0;
	unsigned char lb[8];
	if (size < 8)
		return mgt_err(MGT_ERR_FORMAT, "%s: %llu bytes, too short for a safetensors file", path,
			       (unsigned long long)size);
	if (pread_all(f->fd, lb, 8, 0))
		return mgt_err(MGT_ERR_IO, "%s: cannot read: %s", path, errno ? strerror(errno) : "file shrank");
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | lb[i];
	if (hlen > size - 8 || hlen > ST_MAX_HEADER || hlen < 2)
		return mgt_err(MGT_ERR_FORMAT, "%s: header length %llu %s", path, (unsigned long long)hlen,
			       hlen < 2 ? "is too small for a JSON object" : hlen > size - 8 ?
			       "runs past the end of the file" : "exceeds the 100 MB limit");
	char *h = mgt_malloc((size_t)hlen);
	if (!h)
		return MGT_ERR_NOMEM;
	if (pread_all(f->fd, h, (size_t)hlen, 8)) {
		free(h);
		return mgt_err(MGT_ERR_IO, "%s: cannot read: %s", path, errno ? strerror(errno) : "file shrank");
	}
	json_error_t je;
	json_t *j = json_loadb(h, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
	free(h);
	if (!j)
		return mgt_err(MGT_ERR_FORMAT, "%s: header is not valid JSON: %s (byte %d)", path, je.text,
			       je.position);
	mgt_status st = MGT_OK;
	if (!json_is_object(j))
		st = mgt_err(MGT_ERR_FORMAT, "%s: header is not a JSON object", path);
	uint64_t base = 8 + hlen, bufsize = size - base;
	size_t first = s->n;
	const char *key;
	json_t *v;
	if (!st)
		json_object_foreach(j, key, v) {
			if (strcmp(key, "__metadata__") == 0) {
				const char *mk;
				json_t *mv;
				if (!json_is_object(v)) {
					st = mgt_err(MGT_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
					break;
				}
				json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
					st = mgt_err(MGT_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a "
						     "string", path, mk);
					break;
				}
				if (st)
					break;
				f->meta = json_incref(v);
				continue;
			}
			if ((st = parse_entry(s, fi, path, key, v, base, bufsize)))
				break;
		}
	json_decref(j);
	/* overlapping ranges (empty ones overlap nothing) */
	size_t nr = s->n - first;
	range *r = !st && nr ? mgt_malloc(nr * sizeof *r) : NULL;
	if (!st && nr && !r)
		st = MGT_ERR_NOMEM;
	if (r) {
		for (size_t i = 0; i < nr; i++) {
			const mgt_st_tensor *t = &s->ents[first + i].pub;
			r[i] = (range){t->offset, t->offset + t->nbytes, t->name};
		}
		qsort(r, nr, sizeof *r, range_cmp);
		uint64_t end = 0;
		const char *prev = NULL;
		for (size_t i = 0; i < nr && !st; i++) {
			if (r[i].b == r[i].e)
				continue;
			if (prev && r[i].b < end)
				st = mgt_err(MGT_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data buffer",
					     path, prev, r[i].name);
			end = r[i].e;
			prev = r[i].name;
		}
		free(r);
	}
	return st;
}

static mgt_status add_file(mgt_st *s, char *path)
{
	st_file *p = mgt_realloc(s->files, (s->nfiles + 1) * sizeof *p);
	if (!p) {
		free(path);
		return MGT_ERR_NOMEM;
	}
	s->files = p;
	s->files[s->nfiles++] = (st_file){.path = path, .fd = -1};
	return MGT_OK;
}

static bool plain_name(const char *n)
{
	return *n && !strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

/* The shard files an index names, in order of first mention; checks each tensor is listed
 * with the file that holds it, after the files are parsed (check_index). */
static mgt_status read_index(mgt_st *s, const char *dir, const char *ipath, json_t **wm_out)
{
	char *text = NULL;
	size_t len;
	mgt_status st = mgt_file_read(ipath, &text, &len);
	if (st)
		return st;
	json_error_t je;
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	free(text);
	if (!j)
		return mgt_err(MGT_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", ipath, je.text, je.line);
	json_t *wm = json_is_object(j) ? json_object_get(j, "weight_map") : NULL;
	if (!json_is_object(wm) || json_object_size(wm) == 0) {
		json_decref(j);
		return mgt_err(MGT_ERR_FORMAT, "%s: no \"weight_map\" object naming the tensors' files", ipath);
	}
	const char *key;
	json_t *v;
	json_object_foreach(wm, key, v) {
		if (!json_is_string(v) || !plain_name(json_string_value(v))) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: weight_map: tensor '%s': file is not a plain file "
				     "name in the directory", ipath, key);
			break;
		}
		const char *fn = json_string_value(v);
		char *fp = ck_join(dir, fn);
		if (!fp) {
			st = MGT_ERR_NOMEM;
			break;
		}
		bool known = false;
		for (size_t i = 0; i < s->nfiles && !known; i++)
			known = strcmp(s->files[i].path, fp) == 0;
		if (known)
			free(fp);
		else if ((st = add_file(s, fp)))
			break;
	}
	if (st) {
		json_decref(j);
		return st;
	}
	*wm_out = json_incref(wm);
	json_decref(j);
	return MGT_OK;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static mgt_status check_index(mgt_st *s, const char *ipath, json_t *wm)
{
	/* every tensor of every file is listed for that file */
	for (size_t i = 0; i < s->n; i++) {
		const mgt_st_tensor *t = &s->ents[i].pub;
		json_t *v = json_object_get(wm, t->name);
		if (!v)
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s' of %s is not in the weight_map", ipath,
				       t->name, t->file);
		if (strcmp(json_string_value(v), base_name(t->file)) != 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s' is in %s, but the weight_map names %s",
				       ipath, t->name, t->file, json_string_value(v));
	}
	/* every listed tensor is present (names unique by now, so counts suffice, but name one) */
	if (json_object_size(wm) != s->n) {
		const char *key;
		json_t *v;
		json_object_foreach(wm, key, v) if (!mgt_st_find(s, key))
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s' listed for %s is not in that file",
				       ipath, key, json_string_value(v));
	}
	return MGT_OK;
}

mgt_status mgt_st_open(const char *path, mgt_st **out)
{
	*out = NULL;
	mgt_st *s = calloc(1, sizeof *s);
	if (!s)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	struct stat sb;
	mgt_status st = MGT_OK;
	json_t *wm = NULL;
	char *ipath = NULL;
	if (stat(path, &sb) != 0) {
		st = mgt_err(MGT_ERR_IO, "%s: %s", path, strerror(errno));
	} else if (S_ISDIR(sb.st_mode)) {
		char *single = ck_join(path, ST_SINGLE);
		ipath = ck_join(path, ST_INDEX);
		if (!single || !ipath) {
			free(single);
			st = MGT_ERR_NOMEM;
		} else if (access(single, F_OK) == 0) {
			st = add_file(s, single);
		} else {
			free(single);
			if (access(ipath, F_OK) != 0)
				st = mgt_err(MGT_ERR_IO, "%s: neither %s nor %s in this directory", path,
					     ST_SINGLE, ST_INDEX);
			else
				st = read_index(s, path, ipath, &wm);
		}
	} else {
		char *p = mgt_strdup(path);
		st = p ? add_file(s, p) : MGT_ERR_NOMEM;
	}
	for (size_t i = 0; !st && i < s->nfiles; i++)
		st = parse_file(s, (int)i);
	if (!st && s->n)
		qsort(s->ents, s->n, sizeof *s->ents, ent_cmp);
	for (size_t i = 1; !st && i < s->n; i++)
		if (strcmp(s->ents[i - 1].pub.name, s->ents[i].pub.name) == 0)
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s' is in both %s and %s", path,
				     s->ents[i].pub.name, s->ents[i - 1].pub.file, s->ents[i].pub.file);
	if (!st && wm)
		st = check_index(s, ipath, wm);
	json_decref(wm);
	free(ipath);
	if (st) {
		mgt_st_close(s);
		return st;
	}
	*out = s;
	return MGT_OK;
}

size_t mgt_st_count(const mgt_st *s) { return s->n; }

const mgt_st_tensor *mgt_st_at(const mgt_st *s, size_t i) { return i < s->n ? &s->ents[i].pub : NULL; }

const mgt_st_tensor *mgt_st_find(const mgt_st *s, const char *name)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->ents[mid].pub.name, name);
		if (c == 0)
			return &s->ents[mid].pub;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *mgt_st_metadata(const mgt_st *s, const char *key)
{
	for (size_t i = 0; i < s->nfiles; i++) {
		json_t *v = s->files[i].meta ? json_object_get(s->files[i].meta, key) : NULL;
		if (v)
			return json_string_value(v);
	}
	return NULL;
}

static const st_ent *own(const mgt_st *s, const mgt_st_tensor *t)
{
	const st_ent *e = (const st_ent *)t;
	if (!t || s->n == 0 || e < s->ents || e >= s->ents + s->n)
		return NULL;
	return e;
}

mgt_status mgt_st_read_raw(mgt_st *s, const mgt_st_tensor *t, void *dst)
{
	const st_ent *e = own(s, t);
	if (!e)
		return mgt_err(MGT_ERR_USAGE, "safetensors read: tensor not from this reader");
	if (pread_all(s->files[e->file].fd, dst, (size_t)t->nbytes, t->offset))
		return mgt_err(MGT_ERR_IO, "%s: tensor '%s': cannot read: %s", t->file, t->name,
			       errno ? strerror(errno) : "file shrank");
	return MGT_OK;
}

mgt_status mgt_st_read_f32(mgt_st *s, const mgt_st_tensor *t, float *dst)
{
	const st_ent *e = own(s, t);
	if (!e)
		return mgt_err(MGT_ERR_USAGE, "safetensors read: tensor not from this reader");
	mgt_dt dt = t->dtype;
	if (dt == MGT_ST_F32)
		return mgt_st_read_raw(s, t, dst);
	if (dt != MGT_ST_F16 && dt != MGT_ST_BF16 && dt != MGT_ST_F64)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s' has dtype %s, not a floating-point type",
			       t->file, t->name, mgt_dt_name(dt));
	size_t esz = mgt_dt_size(dt), per = ST_CHUNK / esz;
	uint64_t n = t->nbytes / esz;
	unsigned char *buf = mgt_malloc(ST_CHUNK);
	if (!buf)
		return MGT_ERR_NOMEM;
	for (uint64_t i = 0; i < n; i += per) {
		size_t k = (size_t)(n - i < per ? n - i : per);
		if (pread_all(s->files[e->file].fd, buf, k * esz, t->offset + i * esz)) {
			free(buf);
			return mgt_err(MGT_ERR_IO, "%s: tensor '%s': cannot read: %s", t->file, t->name,
				       errno ? strerror(errno) : "file shrank");
		}
		for (size_t j = 0; j < k; j++) {
			if (dt == MGT_ST_F64) {
				double d;
				memcpy(&d, buf + 8 * j, 8);
				dst[i + j] = (float)d;
			} else {
				uint16_t h;
				memcpy(&h, buf + 2 * j, 2);
				dst[i + j] = dt == MGT_ST_F16 ? mgt_f16_to_f32(h) : mgt_bf16_to_f32(h);
			}
		}
	}
	free(buf);
	return MGT_OK;
}

void mgt_st_close(mgt_st *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nfiles; i++) {
		if (s->files[i].fd >= 0)
			close(s->files[i].fd);
		json_decref(s->files[i].meta);
		free(s->files[i].path);
	}
	for (size_t i = 0; i < s->n; i++)
		free((char *)s->ents[i].pub.name);
	free(s->files);
	free(s->ents);
	free(s);
}
