/* lib/convert/source.c: one model source over mgt checkpoints and Hugging Face directories
 * (mgt_source_*, see convert.h).  An mgt checkpoint is lib/ckpt's mgt_ckpt as is; a Hugging Face
 * directory is read in place through hf_in.c (TP = PP = 1: the whole-model table), one tensor
 * made whole at a time and kept until another is asked for. */
#include "convert_impl.h"

#include <stdlib.h>
#include <string.h>

struct mgt_source {
	int kind;                  /* 1 Hugging Face, 2 mgt, 3 Megatron (mgt_convert_detect) */
	mgt_ckpt *ck;              /* kind 2 */
	mg_src *mg;                /* kind 3 */
	mgt_convert_opts o;        /* kind 1, opened here: own.o */
	hf_in own, *h;             /* kind 1: the directory being read (&own, or the converter's) */
	bool h_open;               /* own is open (closed with s) */
	scratch b;
	char *meta, *dir;
	int cached;                /* the row of h.full whose tensor b.whole holds, or -1 */
	int *list;                 /* kind 1: the rows listed (a dataset at its first expert row) */
	size_t n;
};

/* The tensors of s->h's whole-model table (a dataset at its first expert row) and room to make
 * each whole. */
static mgt_status hf_list(mgt_source *s)
{
	mgt_status st = cv_scratch_alloc(&s->b, &s->h->full, true);
	if (!st && !(s->list = mgt_malloc(((size_t)s->h->full.n + 1) * sizeof *s->list))) st = MGT_ERR_NOMEM;
	for (int i = 0; !st && i < s->h->full.n; i++)
		if (s->h->full.t[i].num_experts <= 0 || !mgt_ckpt_row_seen(&s->h->full, i)) s->list[s->n++] = i;
	return st;
}

static mgt_status hf_source(mgt_source *s, const char *dir)
{
	s->o = (mgt_convert_opts){ .load_dir = dir, .tp = 1, .pp = 1, .ckpt_step = -1 };
	s->own = (hf_in){ .o = &s->o, .in_place = true };
	s->h = &s->own;
	s->h_open = true;
	mgt_status st = cv_hf_open(s->h);
	if (!st) st = hf_list(s);
	if (!st && !(s->meta = cv_hf_metadata(s->h))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	return st;
}

mgt_status cv_source_over_hf(hf_in *h, mgt_source **out)
{
	*out = NULL;
	mgt_source *s = mgt_malloc(sizeof *s);
	char *dir = mgt_strdup(h->o->load_dir);
	mgt_status st = s && dir ? MGT_OK : MGT_ERR_NOMEM;
	if (s) *s = (mgt_source){ .kind = 1, .h = h, .dir = dir, .cached = -1 };
	else free(dir);
	if (!st) st = hf_list(s);
	if (st) {
		mgt_source_close(s);
		return st;
	}
	*out = s;
	return MGT_OK;
}

mgt_status mgt_source_open(const char *dir, int64_t step, mgt_source **out)
{
	*out = NULL;
	mgt_source *s = mgt_malloc(sizeof *s);
	if (!s) return MGT_ERR_NOMEM;
	memset(s, 0, sizeof *s);
	s->cached = -1;
	mgt_status st = mgt_convert_detect(dir, &s->kind);
	if (st == MGT_ERR_USAGE && step > 0) { /* iter_N of a directory without a tracker */
		s->kind = 2;
		st = MGT_OK;
	}
	if (!st && s->kind == 1 && step > 0)
		st = mgt_err(MGT_ERR_USAGE, "%s: a Hugging Face directory has no iterations (step %lld)", dir, (long long)step);
	if (!st && s->kind == 1) st = hf_source(s, dir);
	if (!st && s->kind == 3) st = cv_mg_open(dir, step, &s->mg);
	if (!st && s->kind == 2) {
		st = mgt_ckpt_open(dir, step > 0 ? step : -1, &s->ck);
		if (!st) st = mgt_ckpt_check(s->ck);
	}
	if (!st && !(s->dir = mgt_strdup(s->kind == 2 ? mgt_ckpt_dir(s->ck) : s->kind == 3 ? cv_mg_dir(s->mg) : dir)))
		st = MGT_ERR_NOMEM;
	if (st) {
		mgt_source_close(s);
		return st;
	}
	*out = s;
	return MGT_OK;
}

mgt_status mgt_source_from_ckpt(mgt_ckpt *c, mgt_source **out)
{
	*out = NULL;
	mgt_source *s = mgt_malloc(sizeof *s);
	char *dir = mgt_strdup(mgt_ckpt_dir(c));
	if (!s || !dir) {
		free(s);
		free(dir);
		mgt_ckpt_close(c);
		return MGT_ERR_NOMEM;
	}
	*s = (mgt_source){ .kind = 2, .ck = c, .dir = dir, .cached = -1 };
	*out = s;
	return MGT_OK;
}

int mgt_source_kind(const mgt_source *s) { return s->kind; }
const char *mgt_source_dir(const mgt_source *s) { return s->dir; }
const char *mgt_source_metadata(const mgt_source *s)
{
	return s->kind == 2 ? mgt_ckpt_metadata(s->ck) : s->kind == 3 ? cv_mg_metadata(s->mg) : s->meta;
}
int64_t mgt_source_iteration(const mgt_source *s)
{
	return s->kind == 2 ? mgt_ckpt_iteration(s->ck) : s->kind == 3 ? cv_mg_iteration(s->mg) : 0;
}
size_t mgt_source_count(const mgt_source *s)
{
	return s->kind == 2 ? mgt_ckpt_count(s->ck) : s->kind == 3 ? cv_mg_count(s->mg) : s->n;
}

const char *mgt_source_tensor(const mgt_source *s, size_t i, int *ndim, int64_t *global_shape, mgt_ckpt_dtype *dtype)
{
	if (s->kind == 2) return mgt_ckpt_tensor(s->ck, i, ndim, global_shape, dtype);
	if (s->kind == 3) return cv_mg_tensor(s->mg, i, ndim, global_shape, dtype);
	if (i >= s->n) return NULL;
	const mgt_tensor *g = &s->h->full.t[s->list[i]];
	int e = g->num_experts > 0;
	*ndim = g->ndim + e;
	if (e) global_shape[0] = g->num_experts;
	for (int d = 0; d < g->ndim; d++) global_shape[d + e] = g->shape[d];
	*dtype = MGT_CKPT_F32;
	return e ? g->dataset : g->name;
}

/* The listed row named name (a tensor, or an expert dataset at its first row), or -1. */
static int find_row(const mgt_source *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++) {
		const mgt_tensor *g = &s->h->full.t[s->list[i]];
		if (!strcmp(g->num_experts > 0 ? g->dataset : g->name, name)) return s->list[i];
	}
	return -1;
}

/* b.whole := the tensor of row i whole ([E, rows, cols] for an expert dataset). */
static mgt_status make_whole(mgt_source *s, int i)
{
	if (s->cached == i) return MGT_OK;
	s->cached = -1;
	const mgt_tensor *g0 = &s->h->full.t[i];
	if (g0->num_experts <= 0) {
		mgt_status st = cv_hf_row(s->h, g0, &s->b, s->b.whole);
		if (!st) s->cached = i;
		return st;
	}
	size_t n = cv_row_numel(g0);
	mgt_status st = MGT_OK;
	for (int j = i; !st && j < s->h->full.n && s->h->full.t[j].layer == g0->layer; j++) {
		const mgt_tensor *g = &s->h->full.t[j];
		if (g->num_experts > 0 && !strcmp(g->dataset, g0->dataset))
			st = cv_hf_row(s->h, g, &s->b, s->b.whole + (size_t)g->expert * n);
	}
	if (!st) s->cached = i;
	return st;
}

mgt_status cv_source_whole(mgt_source *s, const char *name, const float **out)
{
	if (s->kind == 3) return cv_mg_whole(s->mg, name, out);
	int row = find_row(s, name);
	if (row < 0) return mgt_err(MGT_ERR_FORMAT, "%s: no tensor %s in the model config.json describes", s->dir, name);
	mgt_status st = make_whole(s, row);
	*out = st ? NULL : s->b.whole;
	return st;
}

mgt_status mgt_source_read(mgt_source *s, const char *name, int ndim, const int64_t *global_shape,
			   const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst)
{
	if (s->kind == 2) return mgt_ckpt_read(s->ck, name, ndim, global_shape, offset, shape, dt, dst);
	if (s->kind == 3) return cv_mg_read(s->mg, name, ndim, global_shape, offset, shape, dt, dst);
	int row = find_row(s, name);
	if (row < 0) return mgt_err(MGT_ERR_FORMAT, "%s: no tensor %s in the model config.json describes", s->dir, name);
	int nd;
	int64_t gs[MGT_CKPT_MAX_DIM];
	mgt_ckpt_dtype have;
	for (size_t i = 0; i < s->n; i++)
		if (s->list[i] == row) mgt_source_tensor(s, i, &nd, gs, &have);
	bool same = nd == ndim;
	for (int d = 0; same && d < nd; d++) same = gs[d] == global_shape[d];
	if (!same || dt != MGT_CKPT_F32)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor %s: asked for another global shape or dtype than the model's "
			       "(%dD float32)", s->dir, name, nd);
	for (int d = 0; d < nd; d++)
		if (offset[d] < 0 || shape[d] < 1 || offset[d] + shape[d] > gs[d])
			return mgt_err(MGT_ERR_USAGE, "%s: tensor %s: box outside its global shape", s->dir, name);
	mgt_status st = make_whole(s, row);
	if (st) return st;
	cv_copy_box(s->b.whole, nd, gs, offset, shape, dst);
	return MGT_OK;
}

void cv_copy_box(const float *whole, int nd, const int64_t *gs, const int64_t *off, const int64_t *shape, float *dst)
{
	/* row by row (the last dim contiguous) */
	int64_t g1 = nd > 1 ? gs[nd - 1] : 1, g2 = nd > 2 ? gs[1] : 1;
	int64_t n0 = nd > 2 ? shape[0] : 1, n1 = nd > 1 ? shape[nd - 2] : 1, n2 = shape[nd - 1];
	int64_t o0 = nd > 2 ? off[0] : 0, o1 = nd > 1 ? off[nd - 2] : 0, o2 = off[nd - 1];
	for (int64_t a = 0; a < n0; a++)
		for (int64_t r = 0; r < n1; r++)
			memcpy(dst + (a * n1 + r) * n2, whole + ((o0 + a) * g2 + o1 + r) * g1 + o2, (size_t)n2 * sizeof(float));
}

/* mgt_source_read as an mgt_ckpt_box_reader. */
static mgt_status source_box(void *s, const char *name, int ndim, const int64_t *global_shape, const int64_t *offset,
			     const int64_t *shape, mgt_ckpt_dtype dt, void *dst)
{
	return mgt_source_read(s, name, ndim, global_shape, offset, shape, dt, dst);
}

mgt_status mgt_source_row_read(mgt_source *s, const char *prefix, const mgt_tensor *x, size_t lo, size_t hi, float *dst)
{
	return mgt_ckpt_row_read_from(source_box, s, prefix, x, lo, hi, dst);
}

void mgt_source_close(mgt_source *s)
{
	if (!s) return;
	mgt_ckpt_close(s->ck);
	cv_mg_close(s->mg);
	if (s->h_open) cv_hf_close(&s->own);
	cv_scratch_free(&s->b);
	free(s->list);
	free(s->meta);
	free(s->dir);
	free(s);
}
