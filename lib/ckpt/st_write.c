/* lib/ckpt: safetensors writer, Hugging Face model directories as transformers' save_pretrained
 * writes them (see ckpt.h; format: huggingface/safetensors README; the reader is safetensors.c). */
#include "ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_CHUNK (64u << 10)
#define ST_INDEX "model.safetensors.index.json"
#define ST_SINGLE "model.safetensors"


static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	while (n) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/* ==== writer ================================================================================= */

typedef struct {
	char *name;
	mgt_dt dt;
	int ndim;
	int64_t shape[MGT_ST_MAX_DIM];
	uint64_t nbytes, offset; /* offset: absolute in its shard */
	size_t shard;
	bool put;
} stw_tensor;

typedef struct {
	char *fname, *path, *tmp;
	int fd;
	bool created, renamed; /* tmp made; renamed to path */
} stw_shard;

enum { STW_DECLARE, STW_BEGUN, STW_DONE, STW_FAILED };

struct mgt_st_writer {
	char *dir;
	uint64_t max_shard;
	stw_tensor *t;
	size_t n, cap;
	stw_shard *sh;
	size_t nsh;
	int state;
	char *index_path; /* once written */
};

mgt_status mgt_st_writer_new(mgt_st_writer **out, const char *dir, uint64_t max_shard_bytes)
{
	*out = NULL;
	mgt_st_writer *w = calloc(1, sizeof *w);
	if (!w || !(w->dir = mgt_strdup(dir))) {
		free(w);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	w->max_shard = max_shard_bytes;
	*out = w;
	return MGT_OK;
}

mgt_status mgt_st_writer_add(mgt_st_writer *w, const char *name, mgt_dt dt, int ndim,
			     const int64_t *shape)
{
	if (w->state != STW_DECLARE)
		return mgt_err(MGT_ERR_USAGE, "%s: safetensors writer: tensor '%s' declared after begin",
			       w->dir, name ? name : "(null)");
	if (!name || !*name)
		return mgt_err(MGT_ERR_USAGE, "%s: safetensors writer: empty tensor name", w->dir);
	if (!mgt_dt_name(dt))
		return mgt_err(MGT_ERR_USAGE, "%s: tensor '%s': bad dtype %d", w->dir, name, (int)dt);
	uint64_t numel;
	if (ndim < 0 || ndim > MGT_ST_MAX_DIM || (ndim && !shape) || !ck_shape_numel(ndim, shape, &numel) ||
	    numel > (UINT64_C(1) << 62) / mgt_dt_size(dt))
		return mgt_err(MGT_ERR_USAGE, "%s: tensor '%s': bad shape (ndim %d; 0..%d dims >= 0)",
			       w->dir, name, ndim, MGT_ST_MAX_DIM);
	if (strcmp(name, "__metadata__") == 0)
		return mgt_err(MGT_ERR_USAGE, "%s: '__metadata__' is not a tensor name", w->dir);
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' declared twice", w->dir, name);
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		stw_tensor *p = mgt_realloc(w->t, cap * sizeof *p);
		if (!p)
			return MGT_ERR_NOMEM;
		w->t = p;
		w->cap = cap;
	}
	stw_tensor *t = &w->t[w->n];
	*t = (stw_tensor){.dt = dt, .ndim = ndim, .nbytes = numel * mgt_dt_size(dt)};
	for (int d = 0; d < ndim; d++)
		t->shape[d] = shape[d];
	if (!(t->name = mgt_strdup(name)))
		return MGT_ERR_NOMEM;
	w->n++;
	return MGT_OK;
}

static mgt_status fail(mgt_st_writer *w, mgt_status st)
{
	w->state = STW_FAILED;
	return st;
}

/* Shard k's header: {"__metadata__":{"format":"pt"}, tensors in declaration order}, padded
 * with spaces to a multiple of 8; sets the tensors' absolute offsets. */
static mgt_status shard_header(mgt_st_writer *w, size_t k, char **out, size_t *len)
{
	json_t *h = json_object(), *m = json_object();
	mgt_status st = h && m ? MGT_OK : MGT_ERR_NOMEM;
	if (!st && (json_object_set_new(h, "__metadata__", m) || json_object_set_new(m, "format",
										   json_string("pt"))))
		st = MGT_ERR_NOMEM;
	else if (st)
		json_decref(m);
	uint64_t off = 0;
	for (size_t i = 0; !st && i < w->n; i++) {
		stw_tensor *t = &w->t[i];
		if (t->shard != k)
			continue;
		json_t *e = json_object(), *sh = json_array(), *o = json_array();
		for (int d = 0; sh && d < t->ndim; d++)
			json_array_append_new(sh, json_integer(t->shape[d]));
		if (o) {
			json_array_append_new(o, json_integer((json_int_t)off));
			json_array_append_new(o, json_integer((json_int_t)(off + t->nbytes)));
		}
		if (!e || !sh || !o || json_object_set_new(e, "dtype", json_string(mgt_dt_name(t->dt))) ||
		    json_object_set_new(e, "shape", sh) || json_object_set_new(e, "data_offsets", o) ||
		    json_object_set_new(h, t->name, e))
			st = mgt_err(MGT_ERR_NOMEM, "out of memory");
		t->offset = off; /* relative for now */
		off += t->nbytes;
	}
	char *text = st ? NULL : json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(h);
	if (!st && !text)
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (st)
		return st;
	size_t n = strlen(text), padded = (8 + n + 7) / 8 * 8 - 8;
	char *buf = mgt_malloc(8 + padded);
	if (!buf) {
		free(text);
		return MGT_ERR_NOMEM;
	}
	for (int i = 0; i < 8; i++)
		buf[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
	memcpy(buf + 8, text, n);
	memset(buf + 8 + n, ' ', padded - n);
	free(text);
	for (size_t i = 0; i < w->n; i++)
		if (w->t[i].shard == k)
			w->t[i].offset += 8 + padded;
	*out = buf;
	*len = 8 + padded;
	return MGT_OK;
}

mgt_status mgt_st_writer_begin(mgt_st_writer *w)
{
	if (w->state != STW_DECLARE)
		return mgt_err(MGT_ERR_USAGE, "%s: safetensors writer: begin called twice", w->dir);
	/* shards, filled in declaration order */
	size_t nsh = 0;
	uint64_t cur = 0;
	for (size_t i = 0; i < w->n; i++) {
		if (nsh == 0 || (w->max_shard && cur > 0 && cur + w->t[i].nbytes > w->max_shard)) {
			nsh++;
			cur = 0;
		}
		w->t[i].shard = nsh - 1;
		cur += w->t[i].nbytes;
	}
	if (nsh == 0)
		nsh = 1; /* no tensors: one file with an empty table */
	w->sh = calloc(nsh, sizeof *w->sh);
	if (!w->sh)
		return fail(w, mgt_err(MGT_ERR_NOMEM, "out of memory"));
	w->nsh = nsh;
	for (size_t k = 0; k < nsh; k++)
		w->sh[k].fd = -1;
	for (size_t k = 0; k < nsh; k++) {
		char fn[64];
		if (nsh == 1)
			snprintf(fn, sizeof fn, "%s", ST_SINGLE);
		else
			snprintf(fn, sizeof fn, "model-%05zu-of-%05zu.safetensors", k + 1, nsh);
		stw_shard *s = &w->sh[k];
		s->fname = mgt_strdup(fn);
		s->path = s->fname ? ck_join(w->dir, fn) : NULL;
		size_t tl = s->path ? strlen(s->path) + 32 : 0;
		s->tmp = tl ? mgt_malloc(tl) : NULL;
		if (!s->tmp)
			return fail(w, MGT_ERR_NOMEM);
		snprintf(s->tmp, tl, "%s.tmp.%ld", s->path, (long)getpid());
		if (access(s->path, F_OK) == 0)
			return fail(w, mgt_err(MGT_ERR_EXISTS, "%s: already exists", s->path));
	}
	if (nsh > 1) {
		w->index_path = ck_join(w->dir, ST_INDEX);
		if (!w->index_path)
			return fail(w, MGT_ERR_NOMEM);
		if (access(w->index_path, F_OK) == 0) {
			mgt_status st = mgt_err(MGT_ERR_EXISTS, "%s: already exists", w->index_path);
			free(w->index_path);
			w->index_path = NULL;
			return fail(w, st);
		}
		free(w->index_path);
		w->index_path = NULL;
	}
	for (size_t k = 0; k < nsh; k++) {
		stw_shard *s = &w->sh[k];
		char *hdr;
		size_t hlen;
		mgt_status st = shard_header(w, k, &hdr, &hlen);
		if (st)
			return fail(w, st);
		mgt_tmp_clean_stale(s->path);
		unlink(s->tmp);
		s->fd = open(s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (s->fd < 0) {
			free(hdr);
			return fail(w, mgt_err(MGT_ERR_IO, "%s: cannot create: %s", s->tmp, strerror(errno)));
		}
		s->created = true;
		mgt_tmp_add_file(s->tmp);
		uint64_t size = hlen;
		for (size_t i = 0; i < w->n; i++)
			if (w->t[i].shard == k)
				size += w->t[i].nbytes;
		int bad = pwrite_all(s->fd, hdr, hlen, 0) || ftruncate(s->fd, (off_t)size) != 0;
		free(hdr);
		if (bad)
			return fail(w, mgt_err(MGT_ERR_IO, "%s: cannot write: %s", s->path, strerror(errno)));
	}
	w->state = STW_BEGUN;
	return MGT_OK;
}

static stw_tensor *wfind(mgt_st_writer *w, const char *name)
{
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return &w->t[i];
	return NULL;
}

static mgt_status put(mgt_st_writer *w, const char *name, const void *src, bool f32)
{
	if (w->state != STW_BEGUN)
		return mgt_err(MGT_ERR_USAGE, "%s: safetensors writer: put of '%s' %s", w->dir,
			       name ? name : "(null)", w->state == STW_DECLARE ? "before begin" :
			       w->state == STW_DONE ? "after finish" : "after an error");
	stw_tensor *t = name ? wfind(w, name) : NULL;
	if (!t)
		return fail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' was not declared", w->dir,
				       name ? name : "(null)"));
	if (t->put)
		return fail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' put twice", w->dir, name));
	stw_shard *s = &w->sh[t->shard];
	if (!f32) {
		if (pwrite_all(s->fd, src, (size_t)t->nbytes, t->offset))
			return fail(w, mgt_err(MGT_ERR_IO, "%s: tensor '%s': cannot write: %s", s->path, name,
					       strerror(errno)));
		t->put = true;
		return MGT_OK;
	}
	if (t->dt == MGT_ST_F32)
		return put(w, name, src, false);
	if (t->dt != MGT_ST_F16 && t->dt != MGT_ST_BF16 && t->dt != MGT_ST_F64)
		return fail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' has dtype %s: not written from "
				       "float32", w->dir, name, mgt_dt_name(t->dt)));
	size_t esz = mgt_dt_size(t->dt), per = ST_CHUNK / esz;
	uint64_t n = t->nbytes / esz;
	const float *x = src;
	unsigned char *buf = mgt_malloc(ST_CHUNK);
	if (!buf)
		return fail(w, MGT_ERR_NOMEM);
	for (uint64_t i = 0; i < n; i += per) {
		size_t k = (size_t)(n - i < per ? n - i : per);
		for (size_t j = 0; j < k; j++) {
			if (t->dt == MGT_ST_F64) {
				double d = x[i + j];
				memcpy(buf + 8 * j, &d, 8);
			} else {
				uint16_t h = t->dt == MGT_ST_F16 ? mgt_f32_to_f16(x[i + j]) : mgt_f32_to_bf16(x[i + j]);
				memcpy(buf + 2 * j, &h, 2);
			}
		}
		if (pwrite_all(s->fd, buf, k * esz, t->offset + i * esz)) {
			free(buf);
			return fail(w, mgt_err(MGT_ERR_IO, "%s: tensor '%s': cannot write: %s", s->path, name,
					       strerror(errno)));
		}
	}
	free(buf);
	t->put = true;
	return MGT_OK;
}

mgt_status mgt_st_writer_put_f32(mgt_st_writer *w, const char *name, const float *src)
{
	return put(w, name, src, true);
}

mgt_status mgt_st_writer_put_raw(mgt_st_writer *w, const char *name, const void *src)
{
	return put(w, name, src, false);
}

static mgt_status write_index(mgt_st_writer *w)
{
	json_t *j = json_object(), *m = json_object(), *wm = json_object();
	uint64_t total = 0;
	int bad = !j || !m || !wm;
	for (size_t i = 0; !bad && i < w->n; i++) {
		total += w->t[i].nbytes;
		bad = json_object_set_new(wm, w->t[i].name, json_string(w->sh[w->t[i].shard].fname));
	}
	if (!bad)
		bad = json_object_set_new(m, "total_size", json_integer((json_int_t)total)) ||
		      json_object_set(j, "metadata", m) || json_object_set(j, "weight_map", wm);
	char *text = bad ? NULL : json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(j);
	json_decref(m);
	json_decref(wm);
	if (!text)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	char *path = ck_join(w->dir, ST_INDEX);
	mgt_afile af;
	mgt_status st = path ? mgt_afile_open(&af, path, 0) : MGT_ERR_NOMEM;
	if (!st && ((st = mgt_afile_write(&af, text, strlen(text))) || (st = mgt_afile_write(&af, "\n", 1))))
		mgt_afile_abort(&af);
	else if (!st)
		st = mgt_afile_commit(&af);
	free(text);
	if (!st)
		w->index_path = path;
	else
		free(path);
	return st;
}

mgt_status mgt_st_writer_finish(mgt_st_writer *w)
{
	if (w->state != STW_BEGUN)
		return mgt_err(MGT_ERR_USAGE, "%s: safetensors writer: finish %s", w->dir,
			       w->state == STW_DECLARE ? "before begin" : w->state == STW_DONE ?
			       "called twice" : "after an error");
	for (size_t i = 0; i < w->n; i++)
		if (!w->t[i].put)
			return fail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' was declared but not put",
					       w->dir, w->t[i].name));
	for (size_t k = 0; k < w->nsh; k++) {
		stw_shard *s = &w->sh[k];
		int r = fsync(s->fd);
		if (close(s->fd) != 0)
			r = -1;
		s->fd = -1;
		if (r != 0)
			return fail(w, mgt_err(MGT_ERR_IO, "%s: cannot write: %s", s->path, strerror(errno)));
	}
	for (size_t k = 0; k < w->nsh; k++) {
		stw_shard *s = &w->sh[k];
		if (rename(s->tmp, s->path) != 0)
			return fail(w, mgt_err(MGT_ERR_IO, "%s: cannot rename into place: %s", s->path,
					       strerror(errno)));
		s->renamed = true;
		mgt_tmp_forget(s->tmp);
	}
	mgt_status st = w->nsh > 1 ? write_index(w) : MGT_OK;
	if (st)
		return fail(w, st);
	int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0) {
		st = mgt_err(MGT_ERR_IO, "%s: cannot fsync: %s", w->dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return fail(w, st);
	}
	close(dfd);
	w->state = STW_DONE;
	return MGT_OK;
}

void mgt_st_writer_free(mgt_st_writer *w)
{
	if (!w)
		return;
	bool done = w->state == STW_DONE;
	for (size_t k = 0; k < w->nsh; k++) {
		stw_shard *s = &w->sh[k];
		if (s->fd >= 0)
			close(s->fd);
		if (!done && s->created && !s->renamed) {
			unlink(s->tmp);
			mgt_tmp_forget(s->tmp);
		}
		if (!done && s->renamed)
			unlink(s->path);
		free(s->fname);
		free(s->path);
		free(s->tmp);
	}
	if (!done && w->index_path)
		unlink(w->index_path);
	for (size_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	free(w->index_path);
	free(w->sh);
	free(w->t);
	free(w->dir);
	free(w);
}
