/* lib/ckpt: GGUF v3 files, writing and reading (see ckpt.h; format: ggml docs/gguf.md, checks
 * after ggml src/gguf.cpp, Q8_0 after ggml-quants.c quantize_row_q8_0_ref). */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GG_CHUNK 8192 /* values per conversion chunk (a multiple of 32) */
#define GG_MAX_KEY 65535

uint64_t mgt_ggml_nbytes(mgt_ggml_type t, uint64_t n)
{
	switch (t) {
	case MGT_GGML_F32: return 4 * n;
	case MGT_GGML_F16:
	case MGT_GGML_BF16: return 2 * n;
	case MGT_GGML_Q8_0: return n / 32 * 34;
	}
	return 0;
}

void mgt_ggml_quantize_q8_0(const float *src, uint64_t n, void *dst)
{
	unsigned char *o = dst;
	for (uint64_t b = 0; b < n / 32; b++, src += 32, o += 34) {
		float amax = 0;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(src[j]));
		float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
		uint16_t h = mgt_f32_to_f16(d);
		memcpy(o, &h, 2);
		for (int j = 0; j < 32; j++) {
			float q = roundf(src[j] * id); /* |q| <= 127 for finite blocks */
			q = isnan(q) ? 0.0f : fmaxf(-127.0f, fminf(127.0f, q)); /* inf/NaN input: no UB */
			o[2 + j] = (unsigned char)(int8_t)q;
		}
	}
}

void mgt_ggml_dequantize_q8_0(const void *src, uint64_t n, float *dst)
{
	const unsigned char *p = src;
	for (uint64_t b = 0; b < n / 32; b++, p += 34, dst += 32) {
		uint16_t h;
		memcpy(&h, p, 2);
		float d = mgt_f16_to_f32(h);
		for (int j = 0; j < 32; j++)
			dst[j] = d * (float)(int8_t)p[2 + j];
	}
}

static bool known_type(uint32_t t)
{
	return t == MGT_GGML_F32 || t == MGT_GGML_F16 || t == MGT_GGML_Q8_0 || t == MGT_GGML_BF16;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Convert k float32 values (k a multiple of 32 for Q8_0) to type t into out. */
static void encode(mgt_ggml_type t, const float *x, size_t k, unsigned char *out)
{
	for (size_t j = 0; t != MGT_GGML_Q8_0 && j < k; j++) {
		uint16_t h;
		if (t == MGT_GGML_F32) {
			memcpy(out + 4 * j, &x[j], 4);
			continue;
		}
		h = t == MGT_GGML_F16 ? mgt_f32_to_f16(x[j]) : mgt_f32_to_bf16(x[j]);
		memcpy(out + 2 * j, &h, 2);
	}
	if (t == MGT_GGML_Q8_0)
		mgt_ggml_quantize_q8_0(x, k, out);
}

static void decode(mgt_ggml_type t, const unsigned char *in, size_t k, float *x)
{
	for (size_t j = 0; t != MGT_GGML_Q8_0 && j < k; j++) {
		uint16_t h;
		if (t == MGT_GGML_F32) {
			memcpy(&x[j], in + 4 * j, 4);
			continue;
		}
		memcpy(&h, in + 2 * j, 2);
		x[j] = t == MGT_GGML_F16 ? mgt_f16_to_f32(h) : mgt_bf16_to_f32(h);
	}
	if (t == MGT_GGML_Q8_0)
		mgt_ggml_dequantize_q8_0(in, k, x);
}

/* ==== writer ================================================================================= */

typedef struct {
	char *name;
	mgt_ggml_type type;
	int ndim;
	int64_t shape[MGT_GGUF_MAX_DIM]; /* PyTorch order */
	uint64_t numel, nbytes, offset;  /* offset: relative to the data section */
} ggw_tensor;

enum { GGW_DECLARE, GGW_OPEN, GGW_DONE, GGW_FAILED };

struct mgt_gguf_writer {
	mgt_buf kv;  /* serialized kv pairs */
	char **keys; /* for duplicates */
	size_t nkv;
	uint32_t alignment;
	ggw_tensor *t;
	size_t n, next;
	int state;
	mgt_afile af;
	bool af_open;
	char *path;
};

mgt_status mgt_gguf_writer_new(mgt_gguf_writer **out)
{
	*out = calloc(1, sizeof **out);
	if (!*out)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	(*out)->alignment = MGT_GGUF_DEFAULT_ALIGNMENT;
	return MGT_OK;
}

static mgt_status add_u32(mgt_buf *b, uint32_t v) { return mgt_buf_add(b, &v, 4); }
static mgt_status add_u64(mgt_buf *b, uint64_t v) { return mgt_buf_add(b, &v, 8); }
static mgt_status add_str(mgt_buf *b, const char *s, uint64_t n)
{
	mgt_status st = add_u64(b, n);
	return st ? st : mgt_buf_add(b, s, (size_t)n);
}

/* Check key and append it and the value type; the caller appends the value. */
static mgt_status kv_start(mgt_gguf_writer *w, const char *key, mgt_gguf_vtype type)
{
	if (w->state != GGW_DECLARE)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: key '%s' set after the header was written",
			       key ? key : "(null)");
	size_t n = key ? strlen(key) : 0;
	if (n == 0 || n > GG_MAX_KEY)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: bad key (empty or over %d bytes)", GG_MAX_KEY);
	if (strcmp(key, "general.alignment") == 0 && type != MGT_GGUF_U32)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: general.alignment must be a u32");
	for (size_t i = 0; i < w->nkv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return mgt_err(MGT_ERR_USAGE, "gguf writer: key '%s' set twice", key);
	char **k = mgt_realloc(w->keys, (w->nkv + 1) * sizeof *k);
	if (!k)
		return MGT_ERR_NOMEM;
	w->keys = k;
	if (!(k[w->nkv] = mgt_strdup(key)))
		return MGT_ERR_NOMEM;
	w->nkv++;
	mgt_status st = add_str(&w->kv, key, n);
	return st ? st : add_u32(&w->kv, (uint32_t)type);
}

mgt_status mgt_gguf_set_u32(mgt_gguf_writer *w, const char *key, uint32_t v)
{
	if (key && strcmp(key, "general.alignment") == 0) {
		if (v == 0 || (v & (v - 1)))
			return mgt_err(MGT_ERR_USAGE, "gguf writer: general.alignment %u is not a power of two", v);
		if (w->state == GGW_DECLARE)
			w->alignment = v;
	}
	mgt_status st = kv_start(w, key, MGT_GGUF_U32);
	return st ? st : add_u32(&w->kv, v);
}

mgt_status mgt_gguf_set_i32(mgt_gguf_writer *w, const char *key, int32_t v)
{
	mgt_status st = kv_start(w, key, MGT_GGUF_I32);
	return st ? st : mgt_buf_add(&w->kv, &v, 4);
}

mgt_status mgt_gguf_set_u64(mgt_gguf_writer *w, const char *key, uint64_t v)
{
	mgt_status st = kv_start(w, key, MGT_GGUF_U64);
	return st ? st : add_u64(&w->kv, v);
}

mgt_status mgt_gguf_set_f32(mgt_gguf_writer *w, const char *key, float v)
{
	mgt_status st = kv_start(w, key, MGT_GGUF_F32);
	return st ? st : mgt_buf_add(&w->kv, &v, 4);
}

mgt_status mgt_gguf_set_bool(mgt_gguf_writer *w, const char *key, bool v)
{
	uint8_t b = v ? 1 : 0;
	mgt_status st = kv_start(w, key, MGT_GGUF_BOOL);
	return st ? st : mgt_buf_add(&w->kv, &b, 1);
}

mgt_status mgt_gguf_set_str(mgt_gguf_writer *w, const char *key, const char *s)
{
	if (!s)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: key '%s': NULL string", key ? key : "(null)");
	mgt_status st = kv_start(w, key, MGT_GGUF_STR);
	return st ? st : add_str(&w->kv, s, strlen(s));
}

static mgt_status arr_start(mgt_gguf_writer *w, const char *key, mgt_gguf_vtype t, size_t n)
{
	mgt_status st = kv_start(w, key, MGT_GGUF_ARR);
	if (!st)
		st = add_u32(&w->kv, (uint32_t)t);
	return st ? st : add_u64(&w->kv, n);
}

mgt_status mgt_gguf_set_arr_str(mgt_gguf_writer *w, const char *key, const char *const *s,
				const size_t *len, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i])
			return mgt_err(MGT_ERR_USAGE, "gguf writer: key '%s': string %zu is NULL",
				       key ? key : "(null)", i);
	mgt_status st = arr_start(w, key, MGT_GGUF_STR, n);
	for (size_t i = 0; !st && i < n; i++)
		st = add_str(&w->kv, s[i], len ? len[i] : strlen(s[i]));
	return st;
}

mgt_status mgt_gguf_set_arr_i32(mgt_gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
	mgt_status st = arr_start(w, key, MGT_GGUF_I32, n);
	return st || !n ? st : mgt_buf_add(&w->kv, v, 4 * n);
}

mgt_status mgt_gguf_set_arr_f32(mgt_gguf_writer *w, const char *key, const float *v, size_t n)
{
	mgt_status st = arr_start(w, key, MGT_GGUF_F32, n);
	return st || !n ? st : mgt_buf_add(&w->kv, v, 4 * n);
}

mgt_status mgt_gguf_add_tensor(mgt_gguf_writer *w, const char *name, mgt_ggml_type t, int ndim,
			       const int64_t *shape)
{
	if (w->state != GGW_DECLARE)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s' declared after the header was written",
			       name ? name : "(null)");
	size_t len = name ? strlen(name) : 0;
	if (len == 0 || len > MGT_GGUF_MAX_NAME)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor name '%s' is not 1..%d bytes",
			       name ? name : "(null)", MGT_GGUF_MAX_NAME);
	if (!known_type((uint32_t)t))
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s': unsupported ggml type %d", name, (int)t);
	if (ndim < 1 || ndim > MGT_GGUF_MAX_DIM)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s': %d dims (expected 1..%d)", name,
			       ndim, MGT_GGUF_MAX_DIM);
	uint64_t numel = 1;
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 1 || (uint64_t)shape[d] > (UINT64_C(1) << 60) / numel)
			return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s': bad shape[%d] %lld", name, d,
				       (long long)shape[d]);
		numel *= (uint64_t)shape[d];
	}
	if (t == MGT_GGML_Q8_0 && shape[ndim - 1] % 32)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s': Q8_0 needs rows of a multiple of 32 "
			       "values, not %lld", name, (long long)shape[ndim - 1]);
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s' declared twice", name);
	ggw_tensor *p = mgt_realloc(w->t, (w->n + 1) * sizeof *p);
	if (!p)
		return MGT_ERR_NOMEM;
	w->t = p;
	ggw_tensor *e = &w->t[w->n];
	*e = (ggw_tensor){.type = t, .ndim = ndim, .numel = numel, .nbytes = mgt_ggml_nbytes(t, numel)};
	for (int d = 0; d < ndim; d++)
		e->shape[d] = shape[d];
	if (!(e->name = mgt_strdup(name)))
		return MGT_ERR_NOMEM;
	w->n++;
	return MGT_OK;
}

static mgt_status wfail(mgt_gguf_writer *w, mgt_status st)
{
	w->state = GGW_FAILED;
	return st;
}

static const unsigned char zeros[256];

static mgt_status pad_to(mgt_gguf_writer *w, uint64_t len)
{
	uint64_t pad = align_up(len, w->alignment) - len;
	mgt_status st = MGT_OK;
	while (!st && pad) {
		size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
		st = mgt_afile_write(&w->af, zeros, k);
		pad -= k;
	}
	return st;
}

mgt_status mgt_gguf_writer_open(mgt_gguf_writer *w, const char *path)
{
	if (w->state != GGW_DECLARE)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: opened twice");
	mgt_buf h = {0};
	mgt_status st = mgt_buf_add(&h, "GGUF", 4);
	if (!st)
		st = add_u32(&h, 3);
	if (!st)
		st = add_u64(&h, w->n);
	if (!st)
		st = add_u64(&h, w->nkv);
	if (!st)
		st = mgt_buf_add(&h, w->kv.p, w->kv.n);
	uint64_t off = 0;
	for (size_t i = 0; !st && i < w->n; i++) {
		ggw_tensor *t = &w->t[i];
		st = add_str(&h, t->name, strlen(t->name));
		if (!st)
			st = add_u32(&h, (uint32_t)t->ndim);
		for (int d = t->ndim - 1; !st && d >= 0; d--) /* ne: innermost first */
			st = add_u64(&h, (uint64_t)t->shape[d]);
		if (!st)
			st = add_u32(&h, (uint32_t)t->type);
		t->offset = off;
		if (!st)
			st = add_u64(&h, off);
		off = align_up(off + t->nbytes, w->alignment);
	}
	if (!st && !(w->path = mgt_strdup(path)))
		st = MGT_ERR_NOMEM;
	if (!st && !(st = mgt_afile_open(&w->af, path, 1)))
		w->af_open = true;
	if (!st)
		st = mgt_afile_write(&w->af, h.p, h.n);
	if (!st)
		st = pad_to(w, h.n);
	free(h.p);
	if (st)
		return wfail(w, st);
	w->state = GGW_OPEN;
	return MGT_OK;
}

mgt_status mgt_gguf_put_f32(mgt_gguf_writer *w, const char *name, const float *src)
{
	if (w->state != GGW_OPEN)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: tensor '%s' put %s", name ? name : "(null)",
			       w->state == GGW_DECLARE ? "before open" : w->state == GGW_DONE ?
			       "after finish" : "after an error");
	if (w->next >= w->n || !name || strcmp(w->t[w->next].name, name) != 0)
		return wfail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' put out of order (expected %s)",
					w->path, name ? name : "(null)", w->next < w->n ? w->t[w->next].name :
					"no more tensors"));
	ggw_tensor *t = &w->t[w->next];
	unsigned char *buf = mgt_malloc(GG_CHUNK * 4);
	if (!buf)
		return wfail(w, MGT_ERR_NOMEM);
	mgt_status st = MGT_OK;
	for (uint64_t i = 0; !st && i < t->numel; i += GG_CHUNK) {
		size_t k = (size_t)(t->numel - i < GG_CHUNK ? t->numel - i : GG_CHUNK);
		encode(t->type, src + i, k, buf);
		st = mgt_afile_write(&w->af, buf, (size_t)mgt_ggml_nbytes(t->type, k));
	}
	free(buf);
	if (!st)
		st = pad_to(w, t->nbytes);
	if (st)
		return wfail(w, st);
	w->next++;
	return MGT_OK;
}

mgt_status mgt_gguf_writer_finish(mgt_gguf_writer *w)
{
	if (w->state != GGW_OPEN)
		return mgt_err(MGT_ERR_USAGE, "gguf writer: finish %s", w->state == GGW_DECLARE ?
			       "before open" : w->state == GGW_DONE ? "called twice" : "after an error");
	if (w->next < w->n)
		return wfail(w, mgt_err(MGT_ERR_USAGE, "%s: tensor '%s' was declared but not put", w->path,
					w->t[w->next].name));
	w->af_open = false;
	mgt_status st = mgt_afile_commit(&w->af);
	if (st)
		return wfail(w, st);
	w->state = GGW_DONE;
	return MGT_OK;
}

void mgt_gguf_writer_free(mgt_gguf_writer *w)
{
	if (!w)
		return;
	if (w->af_open)
		mgt_afile_abort(&w->af);
	for (size_t i = 0; i < w->nkv; i++)
		free(w->keys[i]);
	for (size_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	free(w->keys);
	free(w->t);
	free(w->kv.p);
	free(w->path);
	free(w);
}

/* ==== reader ================================================================================= */

struct mgt_gguf {
	char *path;
	int fd;
	uint64_t size;
	uint32_t alignment;
	mgt_gguf_kv *kv;
	size_t nkv;
	mgt_gguf_tensor *t;
	size_t nt;
};

/* A buffered forward cursor over the file with bounds checks against its size. */
typedef struct {
	int fd;
	uint64_t size, pos; /* pos: file offset of the next byte */
	unsigned char buf[65536];
	uint64_t bstart, blen;
	const char *path;
} cursor;

static mgt_status rd(cursor *c, void *dst, uint64_t n, const char *what)
{
	if (n > c->size - c->pos)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s runs past the end of the file (offset %llu, %llu "
			       "bytes, file %llu bytes)", c->path, what, (unsigned long long)c->pos,
			       (unsigned long long)n, (unsigned long long)c->size);
	unsigned char *o = dst;
	while (n) {
		if (c->pos < c->bstart || c->pos >= c->bstart + c->blen) {
			uint64_t want = c->size - c->pos < sizeof c->buf ? c->size - c->pos : sizeof c->buf;
			ssize_t k;
			do
				k = pread(c->fd, c->buf, (size_t)want, (off_t)c->pos);
			while (k < 0 && errno == EINTR);
			if (k <= 0)
				return mgt_err(MGT_ERR_IO, "%s: cannot read: %s", c->path,
					       k < 0 ? strerror(errno) : "file shrank");
			c->bstart = c->pos;
			c->blen = (uint64_t)k;
		}
		uint64_t at = c->pos - c->bstart, k = c->blen - at < n ? c->blen - at : n;
		memcpy(o, c->buf + at, (size_t)k);
		o += k;
		n -= k;
		c->pos += k;
	}
	return MGT_OK;
}

static mgt_status rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static mgt_status rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* A gguf string into a malloc'd NUL-terminated copy. */
static mgt_status rd_str(cursor *c, char **out, uint64_t *len, const char *what)
{
	uint64_t n;
	mgt_status st = rd_u64(c, &n, what);
	if (st)
		return st;
	if (n > c->size - c->pos)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: string length %llu runs past the end of the file",
			       c->path, what, (unsigned long long)n);
	char *s = mgt_malloc((size_t)n + 1);
	if (!s)
		return MGT_ERR_NOMEM;
	if ((st = rd(c, s, n, what))) {
		free(s);
		return st;
	}
	s[n] = 0;
	*out = s;
	if (len)
		*len = n;
	return MGT_OK;
}

static size_t vsize(uint32_t t)
{
	static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	return t < sizeof sz / sizeof sz[0] ? sz[t] : 0;
}

static mgt_status rd_value(cursor *c, mgt_gguf_kv *kv)
{
	const char *key = kv->key;
	mgt_status st = MGT_OK;
	uint32_t t = (uint32_t)kv->type;
	if (t == MGT_GGUF_STR) {
		char *s = NULL;
		st = rd_str(c, &s, &kv->n, key);
		kv->str = s;
		return st;
	}
	if (t == MGT_GGUF_ARR) {
		uint32_t at;
		uint64_t n;
		if ((st = rd_u32(c, &at, key)) || (st = rd_u64(c, &n, key)))
			return st;
		if (at == MGT_GGUF_ARR)
			return mgt_err(MGT_ERR_FORMAT, "%s: key '%s': nested arrays are not supported", c->path, key);
		if (at != MGT_GGUF_STR && !vsize(at))
			return mgt_err(MGT_ERR_FORMAT, "%s: key '%s': unknown array element type %u", c->path,
				       key, at);
		uint64_t min = at == MGT_GGUF_STR ? 8 : vsize(at);
		if (n > (c->size - c->pos) / min)
			return mgt_err(MGT_ERR_FORMAT, "%s: key '%s': array of %llu elements runs past the end "
				       "of the file", c->path, key, (unsigned long long)n);
		kv->arr_type = (mgt_gguf_vtype)at;
		kv->n = n;
		if (at != MGT_GGUF_STR) {
			void *a = mgt_malloc(n ? (size_t)(n * min) : 1);
			if (!a)
				return MGT_ERR_NOMEM;
			kv->arr = a;
			return rd(c, a, n * min, key);
		}
		char **s = calloc(n ? (size_t)n : 1, sizeof *s);
		uint64_t *l = mgt_malloc(n ? (size_t)n * sizeof *l : 1);
		kv->strs = (const char *const *)s;
		kv->lens = l;
		if (!s || !l)
			return mgt_err(MGT_ERR_NOMEM, "out of memory");
		for (uint64_t i = 0; !st && i < n; i++)
			st = rd_str(c, &s[i], &l[i], key);
		return st;
	}
	size_t sz = vsize(t);
	if (!sz)
		return mgt_err(MGT_ERR_FORMAT, "%s: key '%s': unknown value type %u", c->path, key, t);
	unsigned char b[8] = {0};
	if ((st = rd(c, b, sz, key)))
		return st;
	uint64_t u = 0;
	memcpy(&u, b, sz);
	switch (t) {
	case MGT_GGUF_I8: kv->i = (int8_t)u; break;
	case MGT_GGUF_I16: kv->i = (int16_t)u; break;
	case MGT_GGUF_I32: kv->i = (int32_t)u; break;
	case MGT_GGUF_I64: kv->i = (int64_t)u; break;
	case MGT_GGUF_F32: { float f; memcpy(&f, b, 4); kv->f = f; break; }
	case MGT_GGUF_F64: memcpy(&kv->f, b, 8); break;
	case MGT_GGUF_BOOL:
		if (u > 1)
			return mgt_err(MGT_ERR_FORMAT, "%s: key '%s': bool value %u is not 0 or 1", c->path,
				       key, (unsigned)u);
		kv->u = u;
		break;
	default: kv->u = u;
	}
	return MGT_OK;
}

static void free_kv(mgt_gguf_kv *kv)
{
	free((char *)kv->key);
	free((char *)kv->str);
	free((void *)kv->arr);
	if (kv->strs)
		for (uint64_t i = 0; i < kv->n; i++)
			free((char *)kv->strs[i]);
	free((void *)kv->strs);
	free((void *)kv->lens);
}

void mgt_gguf_close(mgt_gguf *g)
{
	if (!g)
		return;
	if (g->fd >= 0)
		close(g->fd);
	for (size_t i = 0; i < g->nkv; i++)
		free_kv(&g->kv[i]);
	for (size_t i = 0; i < g->nt; i++)
		free((char *)g->t[i].name);
	free(g->kv);
	free(g->t);
	free(g->path);
	free(g);
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct {
	uint64_t b, e;
	size_t i;
} span;

static int span_cmp(const void *a, const void *b)
{
	const span *x = a, *y = b;
	return x->b < y->b ? -1 : x->b > y->b;
}

/* Names unique (sorted copy of the pointers); what: "key" / "tensor". */
static mgt_status unique(const char *path, const char **names, size_t n, const char *what)
{
	if (n < 2)
		return MGT_OK;
	const char **s = mgt_malloc(n * sizeof *s);
	if (!s)
		return MGT_ERR_NOMEM;
	memcpy(s, names, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp_str_ptr);
	mgt_status st = MGT_OK;
	for (size_t i = 1; i < n && !st; i++)
		if (strcmp(s[i - 1], s[i]) == 0)
			st = mgt_err(MGT_ERR_FORMAT, "%s: duplicate %s '%s'", path, what, s[i]);
	free(s);
	return st;
}

static mgt_status parse(mgt_gguf *g, cursor *c)
{
	const char *path = g->path;
	unsigned char magic[4];
	uint32_t ver;
	uint64_t nt, nkv;
	mgt_status st = rd(c, magic, 4, "header");
	if (!st && memcmp(magic, "GGUF", 4) != 0)
		return mgt_err(MGT_ERR_FORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", path);
	if (!st && !(st = rd_u32(c, &ver, "header")) && ver != 3)
		return mgt_err(MGT_ERR_FORMAT, "%s: GGUF version %u (expected 3)", path, ver);
	if (!st && !(st = rd_u64(c, &nt, "header")))
		st = rd_u64(c, &nkv, "header");
	if (st)
		return st;
	/* smallest kv: 8-byte key length, 4-byte type, 1-byte value; smallest tensor info: 8 + 4 +
	 * 8 + 4 + 8 bytes */
	if (nkv > (c->size - c->pos) / 13)
		return mgt_err(MGT_ERR_FORMAT, "%s: kv count %llu cannot fit in the file", path,
			       (unsigned long long)nkv);
	if (nt > (c->size - c->pos) / 32)
		return mgt_err(MGT_ERR_FORMAT, "%s: tensor count %llu cannot fit in the file", path,
			       (unsigned long long)nt);
	g->kv = calloc(nkv ? (size_t)nkv : 1, sizeof *g->kv);
	g->t = calloc(nt ? (size_t)nt : 1, sizeof *g->t);
	if (!g->kv || !g->t)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (uint64_t i = 0; i < nkv; i++) {
		mgt_gguf_kv *kv = &g->kv[g->nkv++];
		char *key = NULL;
		uint32_t t;
		if ((st = rd_str(c, &key, NULL, "key")))
			return st;
		kv->key = key;
		if ((st = rd_u32(c, &t, key)))
			return st;
		kv->type = (mgt_gguf_vtype)t;
		if ((st = rd_value(c, kv)))
			return st;
	}
	const char **names = mgt_malloc((nkv > nt ? nkv : nt) * sizeof *names + 1);
	if (!names)
		return MGT_ERR_NOMEM;
	for (size_t i = 0; i < g->nkv; i++)
		names[i] = g->kv[i].key;
	st = unique(path, names, g->nkv, "key");
	g->alignment = MGT_GGUF_DEFAULT_ALIGNMENT;
	const mgt_gguf_kv *al = st ? NULL : mgt_gguf_kv_find(g, "general.alignment");
	if (al) {
		if (al->type != MGT_GGUF_U32 || al->u == 0 || (al->u & (al->u - 1)))
			st = mgt_err(MGT_ERR_FORMAT, "%s: general.alignment is not a u32 power of two", path);
		else
			g->alignment = (uint32_t)al->u;
	}
	for (uint64_t i = 0; !st && i < nt; i++) {
		mgt_gguf_tensor *t = &g->t[g->nt++];
		char *name = NULL;
		uint64_t len;
		uint32_t nd, ty;
		if ((st = rd_str(c, &name, &len, "tensor name")))
			break;
		t->name = name;
		if (len == 0 || len > MGT_GGUF_MAX_NAME || strlen(name) != len) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor %llu: name of %llu bytes (expected 1..%d, no NUL)",
				     path, (unsigned long long)i, (unsigned long long)len, MGT_GGUF_MAX_NAME);
			break;
		}
		if ((st = rd_u32(c, &nd, name)))
			break;
		if (nd < 1 || nd > MGT_GGUF_MAX_DIM) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': %u dims (expected 1..%d)", path, name,
				     nd, MGT_GGUF_MAX_DIM);
			break;
		}
		t->ndim = (int)nd;
		uint64_t numel = 1;
		for (int d = 0; d < MGT_GGUF_MAX_DIM; d++)
			t->ne[d] = 1;
		for (uint32_t d = 0; !st && d < nd; d++) {
			uint64_t ne;
			if ((st = rd_u64(c, &ne, name)))
				break;
			if (ne > INT64_MAX || (ne && numel > (UINT64_C(1) << 60) / ne))
				st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': ne[%u] = %llu: element count "
					     "overflows", path, name, d, (unsigned long long)ne);
			t->ne[d] = (int64_t)ne;
			numel *= ne;
		}
		if (st || (st = rd_u32(c, &ty, name)) || (st = rd_u64(c, &t->offset, name)))
			break;
		if (!known_type(ty)) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': unsupported ggml type %u (expected F32 0, "
				     "F16 1, Q8_0 8 or BF16 30)", path, name, ty);
			break;
		}
		t->type = (mgt_ggml_type)ty;
		if (ty == MGT_GGML_Q8_0 && t->ne[0] % 32) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': Q8_0 with ne[0] = %lld, not a multiple "
				     "of 32", path, name, (long long)t->ne[0]);
			break;
		}
		t->nbytes = mgt_ggml_nbytes(t->type, numel);
		if (t->offset % g->alignment) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the "
				     "alignment %u", path, name, (unsigned long long)t->offset, g->alignment);
			break;
		}
	}
	if (!st) {
		for (size_t i = 0; i < g->nt; i++)
			names[i] = g->t[i].name;
		st = unique(path, names, g->nt, "tensor");
	}
	free(names);
	if (st)
		return st;
	uint64_t data = align_up(c->pos, g->alignment);
	if (data > c->size && g->nt)
		return mgt_err(MGT_ERR_FORMAT, "%s: data section starts past the end of the file", path);
	span *sp = mgt_malloc(g->nt * sizeof *sp + 1);
	if (!sp)
		return MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < g->nt; i++) {
		mgt_gguf_tensor *t = &g->t[i];
		if (t->offset > c->size - data || t->nbytes > c->size - data - t->offset)
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor '%s': data [%llu, +%llu) runs past the end of "
				     "the file", path, t->name, (unsigned long long)t->offset,
				     (unsigned long long)t->nbytes);
		t->offset += data;
		sp[i] = (span){t->offset, t->offset + t->nbytes, i};
	}
	if (!st && g->nt)
		qsort(sp, g->nt, sizeof *sp, span_cmp);
	uint64_t end = 0;
	size_t prev = SIZE_MAX;
	for (size_t i = 0; !st && i < g->nt; i++) {
		if (sp[i].b == sp[i].e)
			continue; /* empty tensors overlap nothing */
		if (prev != SIZE_MAX && sp[i].b < end)
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path,
				     g->t[prev].name, g->t[sp[i].i].name);
		end = sp[i].e;
		prev = sp[i].i;
	}
	free(sp);
	return st;
}

mgt_status mgt_gguf_open(const char *path, mgt_gguf **out)
{
	*out = NULL;
	mgt_gguf *g = calloc(1, sizeof *g);
	cursor *c = calloc(1, sizeof *c);
	if (!g || !c || !(g->path = mgt_strdup(path))) {
		free(g);
		free(c);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	mgt_status st = MGT_OK;
	struct stat sb;
	g->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (g->fd < 0)
		st = mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	else if (fstat(g->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
		st = mgt_err(MGT_ERR_IO, "%s: not a readable regular file", path);
	if (!st) {
		g->size = (uint64_t)sb.st_size;
		*c = (cursor){.fd = g->fd, .size = g->size, .path = g->path};
		st = parse(g, c);
	}
	free(c);
	if (st) {
		mgt_gguf_close(g);
		return st;
	}
	*out = g;
	return MGT_OK;
}

uint32_t mgt_gguf_alignment(const mgt_gguf *g) { return g->alignment; }
size_t mgt_gguf_kv_count(const mgt_gguf *g) { return g->nkv; }
const mgt_gguf_kv *mgt_gguf_kv_at(const mgt_gguf *g, size_t i) { return i < g->nkv ? &g->kv[i] : NULL; }
size_t mgt_gguf_tensor_count(const mgt_gguf *g) { return g->nt; }
const mgt_gguf_tensor *mgt_gguf_tensor_at(const mgt_gguf *g, size_t i) { return i < g->nt ? &g->t[i] : NULL; }

const mgt_gguf_kv *mgt_gguf_kv_find(const mgt_gguf *g, const char *key)
{
	for (size_t i = 0; i < g->nkv; i++)
		if (strcmp(g->kv[i].key, key) == 0)
			return &g->kv[i];
	return NULL;
}

const mgt_gguf_tensor *mgt_gguf_tensor_find(const mgt_gguf *g, const char *name)
{
	for (size_t i = 0; i < g->nt; i++)
		if (strcmp(g->t[i].name, name) == 0)
			return &g->t[i];
	return NULL;
}

mgt_status mgt_gguf_read_f32(mgt_gguf *g, const mgt_gguf_tensor *t, float *dst)
{
	if (!t || g->nt == 0 || t < g->t || t >= g->t + g->nt)
		return mgt_err(MGT_ERR_USAGE, "gguf read: tensor not from this reader");
	uint64_t numel = 1;
	for (int d = 0; d < t->ndim; d++)
		numel *= (uint64_t)t->ne[d];
	unsigned char *buf = mgt_malloc(GG_CHUNK * 4);
	if (!buf)
		return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	uint64_t off = t->offset;
	for (uint64_t i = 0; !st && i < numel; i += GG_CHUNK) {
		size_t k = (size_t)(numel - i < GG_CHUNK ? numel - i : GG_CHUNK);
		size_t nb = (size_t)mgt_ggml_nbytes(t->type, k);
		size_t got = 0;
		while (got < nb) {
			ssize_t r = pread(g->fd, buf + got, nb - got, (off_t)(off + got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				st = mgt_err(MGT_ERR_IO, "%s: tensor '%s': cannot read: %s", g->path, t->name,
					     r < 0 ? strerror(errno) : "file shrank");
				break;
			}
			got += (size_t)r;
		}
		if (!st)
			decode(t->type, buf, k, dst + i);
		off += nb;
	}
	free(buf);
	return st;
}
