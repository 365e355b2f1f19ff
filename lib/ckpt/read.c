/* lib/ckpt: loading a checkpoint and reading boxes of tensors across pieces (see ckpt.h). */
#include "ckpt/ckpt_impl.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct mgt_ckpt {
	ck_index ix;
	char *meta;
	int64_t iteration;
	hid_t f;  /* the shard file last read from, or -1 */
	int f_at; /* its index in ix.files */
};

static mgt_status parse_tracker(const char *path, char *s, int64_t *iteration)
{
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	while (isspace((unsigned char)*s))
		s++;
	if (strcmp(s, "release") == 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: 'release' checkpoints are not supported (expected "
			       "an iteration number)", path);
	int64_t v = 0;
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n > 18 || s[n])
		return mgt_err(MGT_ERR_FORMAT, "%s: '%.40s' is not an iteration number", path, s);
	for (size_t i = 0; i < n; i++)
		v = 10 * v + (s[i] - '0');
	*iteration = v;
	return MGT_OK;
}

mgt_status mgt_ckpt_latest(const char *load_dir, int64_t *iteration)
{
	char *path = ck_join(load_dir, MGT_CKPT_TRACKER), *text = NULL;
	size_t len;
	if (!path)
		return MGT_ERR_NOMEM;
	mgt_status st = mgt_file_read(path, &text, &len);
	if (st && !ck_exists(path))
		st = mgt_err(MGT_ERR_IO, "%s: no checkpoint tracker (no checkpoint saved here?)", path);
	else if (strlen(text) != len)
		st = mgt_err(MGT_ERR_FORMAT, "%s: not a text file", path);
	else
		st = parse_tracker(path, text, iteration);
	free(text);
	free(path);
	return st;
}

/* The directory of iteration it (or its .old twin after an interrupted replacement). */
static mgt_status find_dir(const char *load_dir, int64_t it, bool tracked, char **dir)
{
	*dir = ck_iter_dir(load_dir, it, "");
	if (!*dir)
		return MGT_ERR_NOMEM;
	if (ck_is_dir(*dir))
		return MGT_OK;
	char *old = ck_iter_dir(load_dir, it, ".old");
	if (old && ck_is_dir(old)) {
		free(*dir);
		*dir = old;
		return MGT_OK;
	}
	free(old);
	mgt_status st = tracked ?
		mgt_err(MGT_ERR_FORMAT, "%s/%s names iteration %lld but %s is missing", load_dir,
			MGT_CKPT_TRACKER, (long long)it, *dir) :
		mgt_err(MGT_ERR_IO, "%s: no such checkpoint directory", *dir);
	free(*dir);
	*dir = NULL;
	return st;
}

static mgt_status read_metadata(const char *dir, char **meta)
{
	char *path = ck_join(dir, "metadata.json");
	size_t len;
	if (!path)
		return MGT_ERR_NOMEM;
	mgt_status st = mgt_file_read(path, meta, &len);
	if (st == MGT_ERR_IO)
		st = mgt_err(MGT_ERR_FORMAT, "%s: missing or unreadable (incomplete checkpoint?)", path);
	free(path);
	return st;
}

mgt_status mgt_ckpt_open(const char *load_dir, int64_t iteration, mgt_ckpt **out)
{
	*out = NULL;
	bool tracked = iteration < 0;
	mgt_status st = tracked ? mgt_ckpt_latest(load_dir, &iteration) : MGT_OK;
	char *dir = NULL;
	if (!st)
		st = find_dir(load_dir, iteration, tracked, &dir);
	mgt_ckpt *c = st ? NULL : mgt_malloc(sizeof *c);
	if (!st && !c)
		st = MGT_ERR_NOMEM;
	if (st) {
		free(dir);
		return st;
	}
	memset(c, 0, sizeof *c);
	c->iteration = iteration;
	c->f = -1;
	json_t *sums = NULL;
	st = read_metadata(dir, &c->meta);
	if (!st)
		st = ck_sums_read(dir, &sums);
	if (!st && sums)
		st = ck_sums_check_files(sums, dir);
	if (!st)
		st = ck_scan(dir, &c->ix, sums, NULL);
	json_decref(sums);
	free(dir);
	if (st) {
		mgt_ckpt_close(c);
		return st;
	}
	*out = c;
	return MGT_OK;
}

/* metadata.json's "tensors" (if any): each {"name", "shape"} is in the shards with that shape. */
static mgt_status check_listed(const mgt_ckpt *c, json_t *meta)
{
	json_t *list = json_object_get(meta, "tensors"), *x;
	size_t i;
	json_array_foreach(list, i, x) {
		const char *name = json_string_value(json_object_get(x, "name"));
		json_t *shape = json_object_get(x, "shape");
		if (!name || !json_is_array(shape))
			continue;
		long t = ck_find(&c->ix, name);
		if (t < 0)
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor %s of metadata.json is in no shard (a shard "
				       "file missing?)", c->ix.dir, name);
		const ck_piece *p = &c->ix.pieces[c->ix.tensors[t]];
		bool same = (int)json_array_size(shape) == p->ndim;
		for (int d = 0; same && d < p->ndim; d++)
			same = json_integer_value(json_array_get(shape, (size_t)d)) == p->gshape[d];
		if (!same) {
			char a[96];
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor %s: global shape %s in the shards differs "
				       "from metadata.json's", c->ix.dir, name, ck_shape_str(a, p->ndim, p->gshape));
		}
	}
	return MGT_OK;
}

mgt_status mgt_ckpt_check(const mgt_ckpt *c)
{
	json_error_t e;
	json_t *meta = json_loads(c->meta, 0, &e);
	mgt_status st = json_is_object(meta) ? MGT_OK :
		mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: not a JSON object%s%s", c->ix.dir,
			meta ? "" : ": ", meta ? "" : e.text);
	if (!st)
		st = ck_check_coverage(&c->ix);
	if (!st)
		st = check_listed(c, meta);
	json_decref(meta);
	return st;
}

const char *mgt_ckpt_metadata(const mgt_ckpt *c) { return c->meta; }
int64_t mgt_ckpt_iteration(const mgt_ckpt *c) { return c->iteration; }
const char *mgt_ckpt_dir(const mgt_ckpt *c) { return c->ix.dir; }
bool mgt_ckpt_has(const mgt_ckpt *c, const char *name) { return ck_find(&c->ix, name) >= 0; }
size_t mgt_ckpt_count(const mgt_ckpt *c) { return c->ix.ntensors; }

const char *mgt_ckpt_tensor(const mgt_ckpt *c, size_t i, int *ndim, int64_t *global_shape,
			    mgt_ckpt_dtype *dtype)
{
	const ck_piece *p = &c->ix.pieces[c->ix.tensors[i]];
	*ndim = p->ndim;
	memcpy(global_shape, p->gshape, sizeof p->gshape);
	*dtype = p->dtype;
	return p->name;
}

void mgt_ckpt_close(mgt_ckpt *c)
{
	if (!c)
		return;
	if (c->f >= 0)
		H5Fclose(c->f);
	ck_index_free(&c->ix);
	free(c->meta);
	free(c);
}

/* ---- reading a box --------------------------------------------------------------------------- */

typedef struct {
	int ndim;
	const int64_t *off, *shape;
} box;

/* Intersection of the request with piece p: start (global) and size; false when empty. */
static bool intersect(const box *r, const ck_piece *p, int64_t *lo, int64_t *n)
{
	for (int d = 0; d < r->ndim; d++) {
		int64_t a = r->off[d] > p->off[d] ? r->off[d] : p->off[d];
		int64_t b0 = r->off[d] + r->shape[d], b1 = p->off[d] + p->shape[d];
		lo[d] = a;
		n[d] = (b0 < b1 ? b0 : b1) - a;
		if (n[d] <= 0)
			return false;
	}
	return true;
}

static hid_t shard_file(mgt_ckpt *c, int i)
{
	if (c->f >= 0 && c->f_at == i)
		return c->f;
	if (c->f >= 0)
		H5Fclose(c->f);
	char *path = ck_join(c->ix.dir, c->ix.files[i]);
	hid_t fapl = ck_h5_fapl();
	c->f = path ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
	c->f_at = i;
	H5Pclose(fapl);
	free(path);
	return c->f;
}

static herr_t read_slab(hid_t ds, const box *r, const ck_piece *p, const int64_t *lo,
			const int64_t *n, mgt_ckpt_dtype dt, void *dst)
{
	hsize_t fstart[MGT_CKPT_MAX_DIM], mstart[MGT_CKPT_MAX_DIM], cnt[MGT_CKPT_MAX_DIM],
		mdims[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < r->ndim; d++) {
		fstart[d] = (hsize_t)(lo[d] - p->off[d]);
		mstart[d] = (hsize_t)(lo[d] - r->off[d]);
		cnt[d] = (hsize_t)n[d];
		mdims[d] = (hsize_t)r->shape[d];
	}
	hid_t fsp = H5Dget_space(ds), msp = H5Screate_simple(r->ndim, mdims, NULL);
	herr_t e = fsp < 0 || msp < 0 ? -1 :
		   H5Sselect_hyperslab(fsp, H5S_SELECT_SET, fstart, NULL, cnt, NULL);
	if (e >= 0)
		e = H5Sselect_hyperslab(msp, H5S_SELECT_SET, mstart, NULL, cnt, NULL);
	if (e >= 0)
		e = H5Dread(ds, ck_h5_mem_type(dt), msp, fsp, H5P_DEFAULT, dst);
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return e;
}

static mgt_status mismatch(const mgt_ckpt *c, const ck_piece *p, uint64_t have)
{
	char a[17], b[17];
	mgt_xxh3_hex(have, a);
	mgt_xxh3_hex(p->hash, b);
	return mgt_err(MGT_ERR_FORMAT, "%s/%s: tensor %s: the data read back have checksum %s, not "
		       "the %s saved (the shard is damaged)", c->ix.dir, c->ix.files[p->file], p->name, a, b);
}

/* Rows of the piece along dim 0 per read while verifying: about 8 MiB. */
static int64_t verify_rows(const ck_piece *p)
{
	size_t row = ck_piece_bytes(p->ndim - 1, p->shape + 1, p->dtype);
	int64_t k = (int64_t)(((size_t)8 << 20) / row);
	return k < 1 ? 1 : k > p->shape[0] ? p->shape[0] : k;
}

/* Read the whole piece in slabs of rows, hashing as it goes; marks it verified. */
static mgt_status verify_piece(mgt_ckpt *c, hid_t ds, ck_piece *p)
{
	int64_t rows = verify_rows(p), off[MGT_CKPT_MAX_DIM] = {0}, shape[MGT_CKPT_MAX_DIM];
	memcpy(shape, p->shape, sizeof shape);
	shape[0] = rows;
	void *buf = mgt_malloc(ck_piece_bytes(p->ndim, shape, p->dtype));
	mgt_xxh3 *h = buf ? mgt_xxh3_new() : NULL;
	herr_t e = h ? 0 : -1;
	for (int64_t r = 0; e >= 0 && r < p->shape[0]; r += rows) {
		int64_t lo[MGT_CKPT_MAX_DIM], n[MGT_CKPT_MAX_DIM];
		memcpy(n, p->shape, sizeof n);
		memcpy(lo, p->off, sizeof lo);
		lo[0] += r;
		n[0] = shape[0] = p->shape[0] - r < rows ? p->shape[0] - r : rows;
		for (int d = 0; d < p->ndim; d++)
			off[d] = lo[d];
		box b = {p->ndim, off, shape};
		e = read_slab(ds, &b, p, lo, n, p->dtype, buf);
		if (e >= 0)
			mgt_xxh3_add(h, buf, ck_piece_bytes(p->ndim, n, p->dtype));
	}
	uint64_t have = h ? mgt_xxh3_digest(h) : 0;
	mgt_xxh3_free(h);
	free(buf);
	if (!h)
		return MGT_ERR_NOMEM;
	if (e < 0)
		return mgt_err(MGT_ERR_FORMAT, "%s/%s: %s: cannot read (corrupt file?): %s", c->ix.dir,
			       c->ix.files[p->file], p->name, ck_h5_why());
	if (have != p->hash)
		return mismatch(c, p, have);
	p->verified = true;
	return MGT_OK;
}

/* The box is the whole piece, read into dst as the piece's own dtype. */
static bool whole_piece(const box *r, const ck_piece *p)
{
	for (int d = 0; d < r->ndim; d++)
		if (r->off[d] != p->off[d] || r->shape[d] != p->shape[d])
			return false;
	return true;
}

/* Read the part of piece p inside box r into dst.  A piece with a checksum is verified the
 * first time it is read: from dst itself when the box is the piece, else by reading it whole
 * first (verify_piece). */
static mgt_status read_piece(mgt_ckpt *c, const box *r, ck_piece *p, mgt_ckpt_dtype dt, void *dst)
{
	int64_t lo[MGT_CKPT_MAX_DIM], n[MGT_CKPT_MAX_DIM];
	if (!intersect(r, p, lo, n))
		return MGT_OK;
	hid_t f = shard_file(c, p->file);
	const char *file = c->ix.files[p->file];
	if (f < 0)
		return mgt_err(MGT_ERR_FORMAT, "%s/%s: cannot open: %s", c->ix.dir, file, ck_h5_why());
	hid_t ds = H5Dopen2(f, p->name, H5P_DEFAULT);
	bool whole = whole_piece(r, p), check = p->has_hash && !p->verified;
	mgt_status st = ds < 0 || !check || whole ? MGT_OK : verify_piece(c, ds, p);
	mgt_xxh3 *h = !st && whole && check ? mgt_xxh3_new() : NULL;
	if (!st && whole && check && !h)
		st = MGT_ERR_NOMEM;
	herr_t e = ds < 0 ? -1 : st ? 0 : whole ? ck_h5_rows(ds, p->ndim, p->shape, dt, dst, false, h) :
		   read_slab(ds, r, p, lo, n, dt, dst);
	if (ds >= 0)
		H5Dclose(ds);
	bool hashed = h != NULL;
	uint64_t have = hashed ? mgt_xxh3_digest(h) : 0;
	mgt_xxh3_free(h);
	if (!st && e < 0)
		return mgt_err(MGT_ERR_FORMAT, "%s/%s: %s: cannot read (corrupt file?): %s", c->ix.dir,
			       file, p->name, ck_h5_why());
	if (!st && hashed && have != p->hash)
		return mismatch(c, p, have);
	if (!st && hashed)
		p->verified = true;
	return st;
}

/* Same rank, global shape and dtype as saved, box inside the global shape. */
static mgt_status check_request(const mgt_ckpt *c, const ck_piece *p, const int64_t *gshape,
				const box *r, mgt_ckpt_dtype dt)
{
	char a[96], b[96], g[96];
	if (r->ndim != p->ndim || memcmp(gshape, p->gshape, sizeof(int64_t) * (size_t)r->ndim))
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: global shape %s in the checkpoint, expected %s",
			       c->ix.dir, p->name, ck_shape_str(a, p->ndim, p->gshape),
			       ck_shape_str(b, r->ndim, gshape));
	if (dt != p->dtype)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: dtype %s in the checkpoint, expected %s",
			       c->ix.dir, p->name, mgt_ckpt_dtype_name(p->dtype),
			       mgt_ckpt_dtype_name(dt));
	for (int d = 0; d < r->ndim; d++)
		if (r->off[d] < 0 || r->shape[d] < 0 || r->off[d] + r->shape[d] > gshape[d])
			return mgt_err(MGT_ERR_USAGE, "%s: box of shape %s at offset %s lies outside "
				       "global shape %s", p->name, ck_shape_str(a, r->ndim, r->shape),
				       ck_shape_str(b, r->ndim, r->off), ck_shape_str(g, r->ndim, gshape));
	return MGT_OK;
}

/* The pieces do not overlap (ck_scan), so the box is covered when the intersections add up. */
static mgt_status check_covered(const mgt_ckpt *c, const box *r, const ck_piece *p, size_t np)
{
	int64_t want = 1, have = 0, lo[MGT_CKPT_MAX_DIM], n[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < r->ndim; d++)
		want *= r->shape[d];
	for (size_t i = 0; i < np; i++)
		if (intersect(r, &p[i], lo, n)) {
			int64_t v = 1;
			for (int d = 0; d < r->ndim; d++)
				v *= n[d];
			have += v;
		}
	if (have == want)
		return MGT_OK;
	char a[96], b[96];
	return mgt_err(MGT_ERR_FORMAT, "%s: %s: box of shape %s at offset %s: only %lld of %lld "
		       "elements are in the saved pieces (missing shard?)", c->ix.dir, p->name,
		       ck_shape_str(a, r->ndim, r->shape), ck_shape_str(b, r->ndim, r->off),
		       (long long)have, (long long)want);
}

mgt_status mgt_ckpt_read(mgt_ckpt *c, const char *name, int ndim, const int64_t *global_shape,
			 const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst)
{
	ck_h5_quiet();
	long t = ck_find(&c->ix, name);
	if (t < 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: no tensor %s in the checkpoint", c->ix.dir, name);
	if (ndim < 1 || ndim > MGT_CKPT_MAX_DIM)
		return mgt_err(MGT_ERR_USAGE, "%s: ndim %d (expected 1 to %d)", name, ndim,
			       MGT_CKPT_MAX_DIM);
	ck_piece *p = &c->ix.pieces[c->ix.tensors[t]];
	size_t np = ck_tensor_pieces(&c->ix, (size_t)t);
	box r = {ndim, offset, shape};
	mgt_status st = check_request(c, p, global_shape, &r, dt);
	if (!st)
		st = check_covered(c, &r, p, np);
	for (size_t i = 0; !st && i < np; i++)
		st = read_piece(c, &r, &p[i], dt, dst);
	return st;
}

mgt_status mgt_ckpt_check_data(mgt_ckpt *c)
{
	ck_h5_quiet();
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < c->ix.npieces; i++) {
		ck_piece *p = &c->ix.pieces[i];
		if (!p->has_hash || p->verified)
			continue;
		hid_t f = shard_file(c, p->file);
		hid_t ds = f < 0 ? -1 : H5Dopen2(f, p->name, H5P_DEFAULT);
		st = ds < 0 ? mgt_err(MGT_ERR_FORMAT, "%s/%s: %s: cannot open: %s", c->ix.dir,
				      c->ix.files[p->file], p->name, ck_h5_why()) : verify_piece(c, ds, p);
		if (ds >= 0)
			H5Dclose(ds);
	}
	return st;
}
