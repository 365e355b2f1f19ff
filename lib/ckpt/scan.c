/* lib/ckpt: scan the shards of an iteration directory into a piece index (see ckpt_impl.h). */
#include "ckpt/ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *ck_shape_str(char *buf, int n, const int64_t *d)
{
	size_t k = 0;
	buf[k++] = '[';
	for (int i = 0; i < n && i < MGT_CKPT_MAX_DIM; i++)
		k += (size_t)snprintf(buf + k, 96 - k, "%s%lld", i ? ", " : "", (long long)d[i]);
	snprintf(buf + k, 96 - k, "]");
	return buf;
}

bool ck_is_shard_name(const char *s)
{
	size_t n = strlen(s);
	return s[0] != '.' && !strchr(s, '/') && n > 3 && strcmp(s + n - 3, ".h5") == 0 &&
	       strcmp(s, MGT_CKPT_INDEX_FILE) != 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static mgt_status list_shards(ck_index *ix)
{
	DIR *d = opendir(ix->dir);
	if (!d)
		return mgt_err(MGT_ERR_IO, "%s: cannot open directory: %s", ix->dir, strerror(errno));
	mgt_status st = MGT_OK;
	size_t cap = 0;
	for (struct dirent *e; !st && (e = readdir(d));) {
		if (!ck_is_shard_name(e->d_name))
			continue;
		if (ix->nfiles == cap) {
			cap = cap ? 2 * cap : 16;
			char **f = mgt_realloc(ix->files, cap * sizeof *f);
			if (!f) {
				st = MGT_ERR_NOMEM;
				break;
			}
			ix->files = f;
		}
		if (!(ix->files[ix->nfiles] = mgt_strdup(e->d_name)))
			st = MGT_ERR_NOMEM;
		else
			ix->nfiles++;
	}
	closedir(d);
	if (!st && ix->nfiles == 0)
		st = mgt_err(MGT_ERR_FORMAT, "%s: no shard files (*.h5) in the checkpoint", ix->dir);
	if (!st)
		qsort(ix->files, ix->nfiles, sizeof *ix->files, cmp_str);
	return st;
}

/* ---- one dataset ------------------------------------------------------------------------- */

static bool dtype_of(hid_t t, mgt_ckpt_dtype *dt)
{
	H5T_class_t c = H5Tget_class(t);
	size_t sz = H5Tget_size(t);
	if (c == H5T_FLOAT && (sz == 4 || sz == 8))
		*dt = sz == 4 ? MGT_CKPT_F32 : MGT_CKPT_F64;
	else if (c == H5T_INTEGER && sz == 4 && H5Tget_sign(t) == H5T_SGN_2)
		*dt = MGT_CKPT_I32;
	else
		return false;
	return true;
}

/* Integer attribute name of ds into v as mem_type: rank dims (1: an array, 0: a scalar) and n
 * values; false when absent or otherwise. */
static bool read_int_attr(hid_t ds, const char *name, int rank, int n, hid_t mem_type, void *v)
{
	if (H5Aexists(ds, name) <= 0)
		return false;
	hid_t a = H5Aopen(ds, name, H5P_DEFAULT);
	hid_t sp = a < 0 ? -1 : H5Aget_space(a), t = a < 0 ? -1 : H5Aget_type(a);
	bool ok = sp >= 0 && t >= 0 && H5Tget_class(t) == H5T_INTEGER &&
		  H5Sget_simple_extent_ndims(sp) == rank && H5Sget_simple_extent_npoints(sp) == n &&
		  H5Aread(a, mem_type, v) >= 0;
	if (t >= 0)
		H5Tclose(t);
	if (sp >= 0)
		H5Sclose(sp);
	if (a >= 0)
		H5Aclose(a);
	return ok;
}

static bool read_i64_attr(hid_t ds, const char *name, int n, int64_t *v)
{
	return read_int_attr(ds, name, 1, n, H5T_NATIVE_INT64, v);
}

/* The optional scalar uint64 checksum attribute (absent in checkpoints from before it). */
static void read_hash_attr(hid_t ds, ck_piece *p)
{
	p->has_hash = read_int_attr(ds, CK_HASH_ATTR, 0, 1, H5T_NATIVE_UINT64, &p->hash);
}

static mgt_status piece_shape(hid_t ds, const char *path, const char *name, ck_piece *p)
{
	hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
	bool ok_t = t >= 0 && dtype_of(t, &p->dtype);
	hsize_t dims[MGT_CKPT_MAX_DIM];
	p->ndim = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
	bool ok_s = p->ndim >= 1 && p->ndim <= MGT_CKPT_MAX_DIM &&
		    H5Sget_simple_extent_dims(sp, dims, NULL) == p->ndim;
	if (t >= 0)
		H5Tclose(t);
	if (sp >= 0)
		H5Sclose(sp);
	if (!ok_t)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: unsupported dtype (expected float32, float64 "
			       "or int32)", path, name);
	if (!ok_s)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: unsupported rank (expected 1 to %d dims)",
			       path, name, MGT_CKPT_MAX_DIM);
	for (int d = 0; d < p->ndim; d++)
		p->shape[d] = (int64_t)dims[d];
	return MGT_OK;
}

static mgt_status piece_box(hid_t ds, const char *path, const char *name, ck_piece *p)
{
	if (!read_i64_attr(ds, "global_shape", p->ndim, p->gshape) ||
	    !read_i64_attr(ds, "global_offset", p->ndim, p->off))
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: missing or bad attribute global_shape or "
			       "global_offset (expected int64[%d])", path, name, p->ndim);
	for (int d = 0; d < p->ndim; d++)
		if (p->shape[d] < 1 || p->off[d] < 0 || p->off[d] + p->shape[d] > p->gshape[d]) {
			char a[96], b[96], c[96];
			return mgt_err(MGT_ERR_FORMAT, "%s: %s: piece of shape %s at offset %s lies "
				       "outside global shape %s", path, name,
				       ck_shape_str(a, p->ndim, p->shape), ck_shape_str(b, p->ndim, p->off),
				       ck_shape_str(c, p->ndim, p->gshape));
		}
	return MGT_OK;
}

/* ---- one file ------------------------------------------------------------------------------ */

typedef struct {
	ck_index *ix;
	int file;
	const char *path;
	size_t cap;
	mgt_status st;
	json_t *check, *build; /* ck_scan's */
	size_t n;              /* pieces of this file */
} scan_ctx;

static mgt_status add_piece(scan_ctx *s, hid_t ds, const char *name)
{
	ck_index *ix = s->ix;
	if (ix->npieces == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		ck_piece *p = mgt_realloc(ix->pieces, cap * sizeof *p);
		if (!p)
			return MGT_ERR_NOMEM;
		ix->pieces = p;
		s->cap = cap;
	}
	ck_piece *p = &ix->pieces[ix->npieces];
	memset(p, 0, sizeof *p);
	p->file = s->file;
	mgt_status st = piece_shape(ds, s->path, name, p);
	if (!st)
		st = piece_box(ds, s->path, name, p);
	if (!st && !(p->name = mgt_strdup(name)))
		st = MGT_ERR_NOMEM;
	if (!st)
		read_hash_attr(ds, p);
	if (!st && s->check)
		st = ck_sums_check_piece(s->check, ix->dir, ix->files[s->file], p);
	if (!st && s->build)
		st = ck_sums_add_piece(s->build, ix->files[s->file], p);
	if (!st && !s->check && !s->build && p->has_hash)
		st = mgt_err(MGT_ERR_FORMAT, "%s: %s has checksums but %s/%s is missing (the checkpoint "
			     "is damaged)", s->path, name, ix->dir, MGT_CKPT_SUMS_FILE);
	if (p->name && st)
		free(p->name);
	if (!st) {
		ix->npieces++;
		s->n++;
	}
	return st;
}

static herr_t visit(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	scan_ctx *s = data;
	hid_t ds = info->type == H5L_TYPE_HARD ? H5Dopen2(g, name, H5P_DEFAULT) : -1;
	if (ds < 0) {
		s->st = mgt_err(MGT_ERR_FORMAT, "%s: %s: not a dataset (a shard holds only datasets "
				"at its root)", s->path, name);
		return -1;
	}
	s->st = add_piece(s, ds, name);
	H5Dclose(ds);
	return s->st ? -1 : 0;
}

static mgt_status scan_file(ck_index *ix, int i, size_t *cap, json_t *check, json_t *build,
			    size_t *npieces)
{
	char *path = ck_join(ix->dir, ix->files[i]);
	if (!path)
		return MGT_ERR_NOMEM;
	hid_t fapl = ck_h5_fapl();
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	H5Pclose(fapl);
	scan_ctx s = {ix, i, path, *cap, MGT_OK, check, build, 0};
	if (f < 0)
		s.st = mgt_err(MGT_ERR_FORMAT, "%s: not a valid HDF5 file (truncated or corrupt?): %s",
			       path, ck_h5_why());
	/* native order (the name index's own): the sorted order builds a table of the links, which
	 * HDF5 1.10 frees wrongly when a link of a corrupt file fails to decode (double free);
	 * build_tensors sorts the pieces anyway */
	else if (H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, visit, &s) < 0 && !s.st)
		s.st = mgt_err(MGT_ERR_FORMAT, "%s: cannot list datasets: %s", path, ck_h5_why());
	if (f >= 0 && H5Fclose(f) < 0 && !s.st)
		s.st = mgt_err(MGT_ERR_FORMAT, "%s: cannot close: %s", path, ck_h5_why());
	*cap = s.cap;
	*npieces = s.n;
	free(path);
	return s.st;
}

/* ---- consistency ------------------------------------------------------------------------- */

static int cmp_piece(const void *a, const void *b)
{
	const ck_piece *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* 1 when the boxes of a and b are identical, -1 when they overlap otherwise, 0 when apart. */
static int overlap(const ck_piece *a, const ck_piece *b)
{
	bool same = true;
	for (int d = 0; d < a->ndim; d++) {
		if (a->off[d] >= b->off[d] + b->shape[d] || b->off[d] >= a->off[d] + a->shape[d])
			return 0;
		same &= a->off[d] == b->off[d] && a->shape[d] == b->shape[d];
	}
	return same ? 1 : -1;
}

static mgt_status check_pair(const ck_index *ix, const ck_piece *a, const ck_piece *b, int *dup)
{
	char x[96], y[96];
	const char *fa = ix->files[a->file], *fb = ix->files[b->file];
	if (a->ndim != b->ndim || memcmp(a->gshape, b->gshape, sizeof(int64_t) * (size_t)a->ndim))
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: global shape %s in %s but %s in %s", ix->dir,
			       a->name, ck_shape_str(x, a->ndim, a->gshape), fa,
			       ck_shape_str(y, b->ndim, b->gshape), fb);
	if (a->dtype != b->dtype)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: dtype %s in %s but %s in %s", ix->dir, a->name,
			       mgt_ckpt_dtype_name(a->dtype), fa, mgt_ckpt_dtype_name(b->dtype), fb);
	*dup = overlap(a, b);
	if (*dup < 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: pieces in %s and %s overlap", ix->dir, a->name,
			       fa, fb);
	return MGT_OK;
}

/* Check every pair of the pieces [lo, hi) of one tensor, changing nothing. */
static mgt_status check_tensor(const ck_index *ix, size_t lo, size_t hi)
{
	for (size_t i = lo; i < hi; i++)
		for (size_t j = lo; j < i; j++) {
			int dup;
			mgt_status st = check_pair(ix, &ix->pieces[j], &ix->pieces[i], &dup);
			if (st)
				return st;
		}
	return MGT_OK;
}

/* Move the pieces [lo, hi) of one checked tensor down to *out, dropping exact duplicates
 * (the later file's; replicated tensors saved by several ranks). */
static void keep_unique(ck_index *ix, size_t lo, size_t hi, size_t *out)
{
	size_t first = *out;
	for (size_t i = lo; i < hi; i++) {
		bool dup = false;
		for (size_t j = first; j < *out && !dup; j++)
			dup = overlap(&ix->pieces[j], &ix->pieces[i]) == 1;
		if (dup)
			free(ix->pieces[i].name);
		else
			ix->pieces[(*out)++] = ix->pieces[i];
	}
}

static mgt_status build_tensors(ck_index *ix)
{
	if (ix->npieces > 1) qsort(ix->pieces, ix->npieces, sizeof *ix->pieces, cmp_piece);
	if (!(ix->tensors = mgt_malloc((ix->npieces + 1) * sizeof *ix->tensors)))
		return MGT_ERR_NOMEM;
	size_t out = 0, n = ix->npieces;
	mgt_status st = MGT_OK;
	for (size_t lo = 0, hi; lo < n; lo = hi) {
		for (hi = lo + 1; hi < n && strcmp(ix->pieces[hi].name, ix->pieces[lo].name) == 0;)
			hi++;
		if ((st = check_tensor(ix, lo, hi))) {
			memmove(ix->pieces + out, ix->pieces + lo, (n - lo) * sizeof *ix->pieces);
			out += n - lo; /* every name still owned once, for ck_index_free */
			break;
		}
		ix->tensors[ix->ntensors++] = out;
		keep_unique(ix, lo, hi, &out);
	}
	ix->npieces = out;
	return st;
}

/* Every tensor is whole: the pieces (which do not overlap) add up to its global size. */
mgt_status ck_check_coverage(const ck_index *ix)
{
	for (size_t t = 0; t < ix->ntensors; t++) {
		const ck_piece *p = &ix->pieces[ix->tensors[t]];
		int64_t whole = 1, have = 0;
		for (int d = 0; d < p->ndim; d++)
			whole *= p->gshape[d];
		for (size_t i = 0; i < ck_tensor_pieces(ix, t); i++) {
			int64_t v = 1;
			for (int d = 0; d < p->ndim; d++)
				v *= p[i].shape[d];
			have += v;
		}
		if (have != whole) {
			char g[96];
			return mgt_err(MGT_ERR_FORMAT, "%s: %s: the saved pieces cover %lld of the %lld "
				       "elements of global shape %s", ix->dir, p->name, (long long)have,
				       (long long)whole, ck_shape_str(g, p->ndim, p->gshape));
		}
	}
	return MGT_OK;
}

mgt_status ck_scan(const char *dir, ck_index *ix, json_t *check, json_t *build)
{
	memset(ix, 0, sizeof *ix);
	ck_h5_quiet();
	if (!(ix->dir = mgt_strdup(dir)))
		return MGT_ERR_NOMEM;
	mgt_status st = list_shards(ix);
	size_t cap = 0, *per_file = st ? NULL : mgt_malloc(ix->nfiles * sizeof *per_file);
	if (!st && !per_file)
		st = MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < ix->nfiles; i++)
		st = scan_file(ix, (int)i, &cap, check, build, &per_file[i]);
	if (!st && check)
		st = ck_sums_check_shards(check, ix, per_file);
	free(per_file);
	if (!st)
		st = build_tensors(ix);
	if (st)
		ck_index_free(ix);
	return st;
}

void ck_index_free(ck_index *ix)
{
	for (size_t i = 0; i < ix->npieces; i++)
		free(ix->pieces[i].name);
	for (size_t i = 0; i < ix->nfiles; i++)
		free(ix->files[i]);
	free(ix->pieces);
	free(ix->files);
	free(ix->tensors);
	free(ix->dir);
	memset(ix, 0, sizeof *ix);
}

size_t ck_tensor_pieces(const ck_index *ix, size_t t)
{
	size_t end = t + 1 < ix->ntensors ? ix->tensors[t + 1] : ix->npieces;
	return end - ix->tensors[t];
}

long ck_find(const ck_index *ix, const char *name)
{
	size_t lo = 0, hi = ix->ntensors;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(ix->pieces[ix->tensors[mid]].name, name);
		if (c == 0)
			return (long)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}
