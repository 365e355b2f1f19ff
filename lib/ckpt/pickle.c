/* lib/ckpt: a Python pickle reader that runs no Python (ckpt.h; opcode semantics from CPython's
 * Lib/pickle.py _Unpickler, torch's persistent ids and rebuild functions from PyTorch's
 * torch/serialization.py and torch/_utils.py).  Values are nodes owned by the mgt_pickle. */
#include "ckpt/ckpt.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/pickle_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/ckpt's pickle reader assumes a little-endian host"
#endif

/* Pickle key hash table entry: (owner, index) with hash h; owner NULL = empty slot.  Owners are
 * DICT or OBJ nodes (index: the pair) or the storages array (index: the storage). */
typedef struct {
	const void *owner;
	uint64_t h;
	size_t idx;
} pk_slot;

typedef struct {
	const uint8_t *p;
	size_t n, pos, op_pos;
	const char *what;
	mgt_pickle *pk;
	mgt_py **stack;
	size_t sn, scap;
	size_t *marks;
	size_t mn, mcap;
	mgt_py **memo;
	size_t memo_cap, memo_count;
	size_t limit;
	pk_slot *tab;
	size_t tab_cap, tab_n;
	uint8_t op;
} pk_vm;

/* The marker of an UntypedStorage no tensor has given a dtype yet (compared by address). */
static const char untyped_name[] = "uint8";

static mgt_status bad(pk_vm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mgt_status bad(pk_vm *m, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return mgt_err(MGT_ERR_FORMAT, "%s: pickle byte %zu (opcode 0x%02x): %s", m->what, m->op_pos,
		       m->op, msg);
}

/* Grow *arr (element size sz, capacity *cap) to hold need elements. */
static mgt_status grow(void *arr, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return MGT_OK;
	size_t c = *cap ? *cap : 8;
	while (c < need)
		c *= 2;
	void *q = mgt_realloc(*(void **)arr, c * sz);
	if (!q)
		return MGT_ERR_NOMEM;
	*(void **)arr = q;
	*cap = c;
	return MGT_OK;
}

/* ---- values ----------------------------------------------------------------------------------- */

static mgt_status new_node(pk_vm *m, mgt_py_kind k, mgt_py **out)
{
	mgt_pickle *pk = m->pk;
	if (pk->n_all >= m->limit)
		return bad(m, "more than %zu values (16 per input byte + 1024)", m->limit);
	TRY(grow(&pk->all, &pk->cap_all, pk->n_all + 1, sizeof *pk->all));
	mgt_py *v = calloc(1, sizeof *v);
	if (!v)
		return mgt_err(MGT_ERR_NOMEM, "%s: out of memory", m->what);
	v->kind = k;
	pk->all[pk->n_all++] = v;
	*out = v;
	return MGT_OK;
}

/* A STR or BYTES node holding a NUL-terminated copy of p[0..n). */
static mgt_status new_blob(pk_vm *m, mgt_py_kind k, const void *p, size_t n, mgt_py **out)
{
	TRY(new_node(m, k, out));
	char *s = mgt_malloc(n + 1);
	if (!s)
		return MGT_ERR_NOMEM;
	if (n)
		memcpy(s, p, n);
	s[n] = 0;
	(*out)->s = s;
	(*out)->len = n;
	return MGT_OK;
}

static mgt_status new_int(pk_vm *m, int64_t i, mgt_py **out)
{
	TRY(new_node(m, MGT_PY_INT, out));
	(*out)->i = i;
	return MGT_OK;
}

/* v->v[used] = x, growing v->v (its capacity: 8, then the power of two above used). */
static mgt_status put_slot(mgt_py *v, size_t used, mgt_py *x)
{
	if (used == 0 || (used >= 8 && (used & (used - 1)) == 0)) {
		mgt_py **q = mgt_realloc(v->v, (used ? 2 * used : 8) * sizeof *q);
		if (!q)
			return MGT_ERR_NOMEM;
		v->v = q;
	}
	v->v[used] = x;
	return MGT_OK;
}

/* Append x to a sequence's items v[0..n). */
static mgt_status add_item(mgt_py *v, mgt_py *x)
{
	mgt_status st = put_slot(v, v->n, x);
	v->n += st == MGT_OK;
	return st;
}

/* A sequence node (TUPLE or LIST) of items[0..k). */
static mgt_status new_seq(pk_vm *m, mgt_py_kind kind, mgt_py *const *items, size_t k, mgt_py **out)
{
	TRY(new_node(m, kind, out));
	for (size_t i = 0; i < k; i++)
		TRY(add_item(*out, items[i]));
	return MGT_OK;
}

/* ---- dictionary keys ---------------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t x)
{
	h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static uint64_t key_hash(const mgt_py *k, int depth)
{
	uint64_t h = mix(0, (uint64_t)k->kind);
	switch (k->kind) {
	case MGT_PY_NONE:
		return h;
	case MGT_PY_BOOL:
	case MGT_PY_INT:
		return k->big ? mix(h, hash_bytes(k->s, k->len)) : mix(h, (uint64_t)k->i);
	case MGT_PY_FLOAT: {
		uint64_t b;
		memcpy(&b, &k->f, 8);
		return mix(h, b);
	}
	case MGT_PY_STR:
	case MGT_PY_BYTES:
		return mix(h, hash_bytes(k->s, k->len));
	case MGT_PY_TUPLE:
		if (depth < 32) {
			for (size_t i = 0; i < k->n; i++)
				h = mix(h, key_hash(k->v[i], depth + 1));
			return mix(h, k->n);
		}
		return mix(h, (uint64_t)(uintptr_t)k); /* too deep: by identity */
	default:
		return mix(h, (uint64_t)(uintptr_t)k);
	}
}

static bool key_eq(const mgt_py *a, const mgt_py *b, int depth)
{
	if (a == b)
		return true;
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case MGT_PY_NONE:
		return true;
	case MGT_PY_BOOL:
	case MGT_PY_INT:
		if (a->big != b->big)
			return false;
		return a->big ? a->len == b->len && !memcmp(a->s, b->s, a->len) : a->i == b->i;
	case MGT_PY_FLOAT:
		return !memcmp(&a->f, &b->f, sizeof a->f);
	case MGT_PY_STR:
	case MGT_PY_BYTES:
		return a->len == b->len && !memcmp(a->s, b->s, a->len);
	case MGT_PY_TUPLE:
		if (depth >= 32 || a->n != b->n)
			return false;
		for (size_t i = 0; i < a->n; i++)
			if (!key_eq(a->v[i], b->v[i], depth + 1))
				return false;
		return true;
	default:
		return false;
	}
}

static mgt_status tab_grow(pk_vm *m)
{
	if (2 * (m->tab_n + 1) <= m->tab_cap)
		return MGT_OK;
	size_t nc = m->tab_cap ? 2 * m->tab_cap : 64;
	pk_slot *t = calloc(nc, sizeof *t);
	if (!t)
		return mgt_err(MGT_ERR_NOMEM, "%s: out of memory", m->what);
	for (size_t i = 0; i < m->tab_cap; i++) {
		if (!m->tab[i].owner)
			continue;
		size_t j = m->tab[i].h & (nc - 1);
		while (t[j].owner)
			j = (j + 1) & (nc - 1);
		t[j] = m->tab[i];
	}
	free(m->tab);
	m->tab = t;
	m->tab_cap = nc;
	return MGT_OK;
}

/* The table slot for (owner, hash h) whose entry satisfies eq against key, or the empty slot
 * where it goes.  The table is never full (tab_grow first). */
static pk_slot *tab_find(pk_vm *m, const void *owner, uint64_t h, const mgt_py *key)
{
	size_t j = h & (m->tab_cap - 1);
	for (;; j = (j + 1) & (m->tab_cap - 1)) {
		pk_slot *e = &m->tab[j];
		if (!e->owner)
			return e;
		if (e->owner != owner || e->h != h)
			continue;
		if (owner == (const void *)&m->pk->storages) {
			const mgt_py *st = m->pk->storages[e->idx];
			if (st->len == key->len && !memcmp(st->s, key->s, key->len))
				return e;
		} else if (key_eq(((const mgt_py *)owner)->v[2 * e->idx], key, 0)) {
			return e;
		}
	}
}

/* d[key] = val for a DICT (or an OBJ's kv items): a key set again keeps its place. */
static mgt_status dict_set(pk_vm *m, mgt_py *d, mgt_py *key, mgt_py *val)
{
	if (d->kind == MGT_PY_OBJ) {
		if (d->n && !d->kv)
			return bad(m, "SETITEM on an object that has APPENDed items");
		d->kv = true;
	}
	TRY(tab_grow(m));
	uint64_t h = key_hash(key, 0);
	pk_slot *e = tab_find(m, d, h, key);
	if (e->owner) {
		d->v[2 * e->idx + 1] = val;
		return MGT_OK;
	}
	TRY(put_slot(d, 2 * d->n, key));
	TRY(put_slot(d, 2 * d->n + 1, val));
	*e = (pk_slot){d, h, d->n++};
	m->tab_n++;
	return MGT_OK;
}

/* ---- the stack ------------------------------------------------------------------------------------ */

static mgt_status push(pk_vm *m, mgt_py *v)
{
	TRY(grow(&m->stack, &m->scap, m->sn + 1, sizeof *m->stack));
	m->stack[m->sn++] = v;
	return MGT_OK;
}

/* The stack's bottom above the innermost mark (0 without marks). */
static size_t floor_of(const pk_vm *m) { return m->mn ? m->marks[m->mn - 1] : 0; }

static mgt_status pop(pk_vm *m, mgt_py **out)
{
	if (m->sn <= floor_of(m))
		return bad(m, "stack underflow");
	*out = m->stack[--m->sn];
	return MGT_OK;
}

static mgt_status top(pk_vm *m, mgt_py **out)
{
	if (m->sn <= floor_of(m))
		return bad(m, "stack underflow");
	*out = m->stack[m->sn - 1];
	return MGT_OK;
}

/* Pop the innermost mark: the items above it are stack[*from .. sn). */
static mgt_status pop_mark(pk_vm *m, size_t *from)
{
	if (!m->mn)
		return bad(m, "no MARK on the stack");
	*from = m->marks[--m->mn];
	return MGT_OK;
}

/* ---- input ---------------------------------------------------------------------------------------- */

static mgt_status take(pk_vm *m, size_t k, const uint8_t **out)
{
	if (k > m->n - m->pos)
		return bad(m, "truncated: needs %zu more bytes, %zu left", k, m->n - m->pos);
	*out = m->p + m->pos;
	m->pos += k;
	return MGT_OK;
}

static mgt_status take_uint(pk_vm *m, size_t k, uint64_t *out)
{
	const uint8_t *b = NULL;
	TRY(take(m, k, &b));
	uint64_t v = 0;
	for (size_t i = 0; i < k; i++)
		v |= (uint64_t)b[i] << (8 * i);
	*out = v;
	return MGT_OK;
}

/* A text argument up to '\n' (not included). */
static mgt_status take_line(pk_vm *m, const char **s, size_t *len)
{
	const uint8_t *nl = memchr(m->p + m->pos, '\n', m->n - m->pos);
	if (!nl)
		return bad(m, "truncated: no end of line");
	*s = (const char *)m->p + m->pos;
	*len = (size_t)(nl - (m->p + m->pos));
	m->pos += *len + 1;
	return MGT_OK;
}

/* ---- integers --------------------------------------------------------------------------------------- */

/* An INT from b[0..k): little-endian two's complement (decode_long). */
static mgt_status long_node(pk_vm *m, const uint8_t *b, size_t k, mgt_py **out)
{
	bool neg = k && (b[k - 1] & 0x80);
	size_t used = k; /* drop redundant sign bytes */
	while (used > 1 && b[used - 1] == (neg ? 0xff : 0) && ((b[used - 2] & 0x80) != 0) == neg)
		used--;
	if (used <= 8) {
		uint64_t v = neg ? ~0ull : 0;
		for (size_t i = 0; i < used; i++) {
			v &= ~(0xffull << (8 * i));
			v |= (uint64_t)b[i] << (8 * i);
		}
		return new_int(m, (int64_t)v, out);
	}
	TRY(new_blob(m, MGT_PY_INT, b, used, out));
	(*out)->big = true;
	return MGT_OK;
}

/* An INT from decimal text s[0..n) (optional sign; protocol 0's INT and LONG). */
static mgt_status decimal_node(pk_vm *m, const char *s, size_t n, mgt_py **out)
{
	bool neg = n && s[0] == '-';
	size_t i = n && (s[0] == '-' || s[0] == '+');
	if (i == n || n - i > 4096)
		return bad(m, "not a decimal integer");
	uint8_t mag[1712] = {0}; /* 4096 digits < 1712 bytes */
	size_t used = 1;
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return bad(m, "not a decimal integer");
		unsigned carry = (unsigned)(s[i] - '0');
		for (size_t j = 0; j < used; j++) {
			unsigned x = mag[j] * 10u + carry;
			mag[j] = (uint8_t)x;
			carry = x >> 8;
		}
		if (carry)
			mag[used++] = (uint8_t)carry;
	}
	used++; /* room for the sign bit */
	if (neg) { /* two's complement */
		unsigned c = 1;
		for (size_t j = 0; j < used; j++) {
			unsigned x = (uint8_t)~mag[j] + c;
			mag[j] = (uint8_t)x;
			c = x >> 8;
		}
	}
	return long_node(m, mag, used, out);
}

/* ---- strings ------------------------------------------------------------------------------------------- */

static size_t put_utf8(char *d, uint32_t c)
{
	if (c < 0x80) {
		d[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		d[0] = (char)(0xc0 | c >> 6), d[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		d[0] = (char)(0xe0 | c >> 12), d[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		d[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	d[0] = (char)(0xf0 | c >> 18), d[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	d[2] = (char)(0x80 | ((c >> 6) & 0x3f)), d[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* UNICODE's raw-unicode-escape: \uXXXX, \UXXXXXXXX, other bytes as latin-1 code points. */
static mgt_status raw_unicode(pk_vm *m, const char *s, size_t n, mgt_py **out)
{
	char *d = mgt_malloc(4 * n + 1);
	if (!d)
		return MGT_ERR_NOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t w = i + 1 < n && s[i] == '\\' ? (s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0) : 0;
		uint32_t c = (uint8_t)s[i];
		if (w && i + 2 + w <= n) {
			c = 0;
			for (size_t j = 0; j < w; j++) {
				int h = hexval(s[i + 2 + j]);
				if (h < 0) {
					free(d);
					return bad(m, "bad \\u escape in UNICODE");
				}
				c = c * 16 + (uint32_t)h;
			}
			if (c > 0x10ffff) {
				free(d);
				return bad(m, "code point beyond U+10FFFF in UNICODE");
			}
			i += 2 + w;
		} else {
			i++;
		}
		k += put_utf8(d + k, c);
	}
	mgt_status st = new_blob(m, MGT_PY_STR, d, k, out);
	free(d);
	return st;
}

/* STRING's quoted argument with Python's string escapes (codecs.escape_decode). */
static mgt_status quoted(pk_vm *m, const char *s, size_t n, mgt_py **out)
{
	if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
		return bad(m, "the STRING argument is not quoted");
	s++, n -= 2;
	char *d = mgt_malloc(n + 1);
	if (!d)
		return MGT_ERR_NOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		if (s[i] != '\\' || i + 1 == n) {
			d[k++] = s[i++];
			continue;
		}
		char e = s[i + 1];
		i += 2;
		static const char from[] = "ntr\\'\"abfv", to[] = "\n\t\r\\'\"\a\b\f\v";
		const char *f = e ? strchr(from, e) : NULL;
		if (f) {
			d[k++] = to[f - from];
		} else if (e == 'x' && i + 2 <= n && hexval(s[i]) >= 0 && hexval(s[i + 1]) >= 0) {
			d[k++] = (char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
			i += 2;
		} else if (e >= '0' && e <= '7') {
			unsigned c = (unsigned)(e - '0');
			for (int j = 0; j < 2 && i < n && s[i] >= '0' && s[i] <= '7'; j++)
				c = c * 8 + (unsigned)(s[i++] - '0');
			d[k++] = (char)c;
		} else if (e != '\n') {
			d[k++] = '\\', d[k++] = e;
		}
	}
	mgt_status st = new_blob(m, MGT_PY_STR, d, k, out);
	free(d);
	return st;
}

/* BYTES of the code points 0..255 of UTF-8 str v (_codecs.encode(v, "latin1")). */
static mgt_status latin1(pk_vm *m, const mgt_py *v, mgt_py **out)
{
	char *d = mgt_malloc(v->len + 1);
	if (!d)
		return MGT_ERR_NOMEM;
	size_t k = 0;
	const uint8_t *s = (const uint8_t *)v->s;
	for (size_t i = 0; i < v->len; i++) {
		if (s[i] < 0x80) {
			d[k++] = (char)s[i];
		} else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < v->len && (s[i + 1] & 0xc0) == 0x80) {
			d[k++] = (char)(((s[i] & 3) << 6) | (s[i + 1] & 0x3f));
			i++;
		} else {
			free(d);
			return bad(m, "_codecs.encode of a character beyond latin-1");
		}
	}
	mgt_status st = new_blob(m, MGT_PY_BYTES, d, k, out);
	free(d);
	return st;
}

/* ---- torch storages and tensors ------------------------------------------------------------------------- */

static const struct {
	const char *storage, *dtype;
	size_t size;
	int dt; /* mgt_dt, -1: none */
} dtypes[] = {
	{"FloatStorage", "float32", 4, MGT_ST_F32},      {"DoubleStorage", "float64", 8, MGT_ST_F64},
	{"HalfStorage", "float16", 2, MGT_ST_F16},       {"BFloat16Storage", "bfloat16", 2, MGT_ST_BF16},
	{"LongStorage", "int64", 8, MGT_ST_I64},         {"IntStorage", "int32", 4, MGT_ST_I32},
	{"ShortStorage", "int16", 2, MGT_ST_I16},        {"CharStorage", "int8", 1, MGT_ST_I8},
	{"ByteStorage", "uint8", 1, MGT_ST_U8},          {"BoolStorage", "bool", 1, MGT_ST_BOOL},
	{"ComplexFloatStorage", "complex64", 8, -1},     {"ComplexDoubleStorage", "complex128", 16, -1},
	{"QInt8Storage", "qint8", 1, -1},                {"QUInt8Storage", "quint8", 1, -1},
	{"QInt32Storage", "qint32", 4, -1},              {"QUInt4x2Storage", "quint4x2", 1, -1},
	{"QUInt2x4Storage", "quint2x4", 1, -1},          {NULL, "complex32", 4, -1},
	{NULL, "float8_e4m3fn", 1, -1},                  {NULL, "float8_e5m2", 1, -1},
	{NULL, "float8_e4m3fnuz", 1, -1},                {NULL, "float8_e5m2fnuz", 1, -1},
	{NULL, "float8_e8m0fnu", 1, -1},                 {NULL, "uint16", 2, -1},
	{NULL, "uint32", 4, -1},                         {NULL, "uint64", 8, -1},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t mgt_py_dtype_size(const char *dtype_name)
{
	for (size_t i = 0; dtype_name && i < N_DTYPES; i++)
		if (!strcmp(dtypes[i].dtype, dtype_name))
			return dtypes[i].size;
	return 0;
}

static void set_dtype(mgt_py *v, size_t k)
{
	v->dtype_name = dtypes[k].dtype;
	v->dtype_ok = dtypes[k].dt >= 0;
	v->dtype = dtypes[k].dt >= 0 ? (mgt_dt)dtypes[k].dt : MGT_ST_U8;
}

static bool is_str(const mgt_py *v, const char *s) { return v->kind == MGT_PY_STR && !strcmp(v->s, s); }

static bool is_global(const mgt_py *v, const char *module, const char *name)
{
	return v->kind == MGT_PY_GLOBAL && !strcmp(v->s, module) && !strcmp(v->name, name);
}

/* BINPERSID: ('storage', storage class, key, location, numel) -> a STORAGE, one per key. */
static mgt_status persistent(pk_vm *m, const mgt_py *pid, mgt_py **out)
{
	if (pid->kind != MGT_PY_TUPLE || pid->n < 5 || !is_str(pid->v[0], "storage") ||
	    pid->v[1]->kind != MGT_PY_GLOBAL || pid->v[2]->kind != MGT_PY_STR || pid->v[4]->kind != MGT_PY_INT ||
	    pid->v[4]->big || pid->v[4]->i < 0)
		return bad(m, "a persistent id other than ('storage', class, key, location, numel)");
	const mgt_py *cls = pid->v[1], *key = pid->v[2];
	size_t k = N_DTYPES;
	bool untyped = !strcmp(cls->name, "UntypedStorage") || !strcmp(cls->name, "_UntypedStorage");
	for (size_t i = 0; !untyped && i < N_DTYPES; i++)
		if (dtypes[i].storage && !strcmp(dtypes[i].storage, cls->name))
			k = i;
	if (!untyped && k == N_DTYPES)
		return bad(m, "unknown storage class %.64s.%.64s", cls->s, cls->name);
	mgt_pickle *pk = m->pk;
	TRY(tab_grow(m));
	uint64_t h = mix(hash_bytes(key->s, key->len), 7);
	pk_slot *e = tab_find(m, &pk->storages, h, key);
	if (e->owner) { /* torch's persistent_load keeps the first storage of a key */
		*out = pk->storages[e->idx];
		return MGT_OK;
	}
	mgt_py *st = NULL;
	TRY(new_blob(m, MGT_PY_STORAGE, key->s, key->len, &st));
	st->name = mgt_strdup(cls->name);
	if (!st->name)
		return MGT_ERR_NOMEM;
	if (untyped)
		st->dtype_name = untyped_name, st->dtype = MGT_ST_U8, st->dtype_ok = true;
	else
		set_dtype(st, k);
	st->numel = pid->v[4]->i;
	st->i = (int64_t)pk->n_storages;
	TRY(grow(&pk->storages, &pk->cap_storages, pk->n_storages + 1, sizeof *pk->storages));
	pk->storages[pk->n_storages++] = st;
	*e = (pk_slot){&pk->storages, h, (size_t)st->i};
	m->tab_n++;
	*out = st;
	return MGT_OK;
}

/* Sizes or strides: a TUPLE or LIST of non-negative ints, at most MGT_PY_MAX_DIM. */
static mgt_status dims(pk_vm *m, const mgt_py *t, int64_t *d, int *nd, const char *what)
{
	if ((t->kind != MGT_PY_TUPLE && t->kind != MGT_PY_LIST) || t->n > MGT_PY_MAX_DIM)
		return bad(m, "tensor %s: not a tuple of at most %d ints", what, MGT_PY_MAX_DIM);
	for (size_t i = 0; i < t->n; i++) {
		if (t->v[i]->kind != MGT_PY_INT || t->v[i]->big || t->v[i]->i < 0)
			return bad(m, "tensor %s[%zu]: not a non-negative int", what, i);
		d[i] = t->v[i]->i;
	}
	*nd = (int)t->n;
	return MGT_OK;
}

/* Give an UntypedStorage the dtype named by GLOBAL torch.<name> (or check a typed one's). */
static mgt_status storage_dtype(pk_vm *m, mgt_py *st, const mgt_py *dt)
{
	if (dt->kind != MGT_PY_GLOBAL || strcmp(dt->s, "torch"))
		return bad(m, "_rebuild_tensor_v3: dtype is not a torch dtype");
	size_t k = N_DTYPES;
	for (size_t i = 0; i < N_DTYPES; i++)
		if (!strcmp(dtypes[i].dtype, dt->name))
			k = i;
	if (k == N_DTYPES)
		return bad(m, "_rebuild_tensor_v3: unknown dtype torch.%.64s", dt->name);
	if (st->dtype_name != untyped_name) {
		if (strcmp(st->dtype_name, dtypes[k].dtype))
			return bad(m, "a %s tensor over %s storage '%.64s'", dtypes[k].dtype, st->dtype_name, st->s);
		return MGT_OK;
	}
	if (st->numel % (int64_t)dtypes[k].size)
		return bad(m, "untyped storage '%.64s' of %lld bytes is not of whole %s elements", st->s,
			   (long long)st->numel, dtypes[k].dtype);
	st->numel /= (int64_t)dtypes[k].size;
	set_dtype(st, k);
	return MGT_OK;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, ...) and v3 (..., hooks, dtype[, meta]). */
static mgt_status rebuild_tensor(pk_vm *m, const mgt_py *a, bool v3, mgt_py **out)
{
	if (a->n < (v3 ? 7u : 4u) || a->v[0]->kind != MGT_PY_STORAGE || a->v[1]->kind != MGT_PY_INT ||
	    a->v[1]->big || a->v[1]->i < 0)
		return bad(m, "_rebuild_tensor: arguments are not (storage, offset, size, stride, ...)");
	mgt_py *st = a->v[0];
	if (v3)
		TRY(storage_dtype(m, st, a->v[6]));
	else if (st->dtype_name == untyped_name)
		return bad(m, "_rebuild_tensor_v2 over untyped storage '%.64s'", st->s);
	mgt_py *t = NULL;
	TRY(new_node(m, MGT_PY_TENSOR, &t));
	int ns;
	TRY(dims(m, a->v[2], t->size, &t->ndim, "size"));
	TRY(dims(m, a->v[3], t->stride, &ns, "stride"));
	if (ns != t->ndim)
		return bad(m, "tensor of %d sizes and %d strides", t->ndim, ns);
	t->storage = st;
	t->offset = a->v[1]->i;
	t->dtype = st->dtype, t->dtype_ok = st->dtype_ok, t->dtype_name = st->dtype_name;
	mgt_pickle *pk = m->pk;
	TRY(grow(&pk->tensors, &pk->cap_tensors, pk->n_tensors + 1, sizeof *pk->tensors));
	pk->tensors[pk->n_tensors++] = t;
	*out = t;
	return MGT_OK;
}

/* ---- calls -------------------------------------------------------------------------------------------- */

static mgt_status call(pk_vm *m, mgt_py *f, mgt_py *args, int depth, mgt_py **out);

static mgt_status generic(pk_vm *m, mgt_py *cls, mgt_py *args, mgt_py **out)
{
	TRY(new_node(m, MGT_PY_OBJ, out));
	(*out)->cls = cls;
	(*out)->args = args;
	return MGT_OK;
}

/* getattr(GLOBAL module.name, attr) -> GLOBAL module.name.attr (Python >= 3.11 pickles an enum
 * member so: Enum.__reduce_ex__). */
static mgt_status getattr_global(pk_vm *m, const mgt_py *g, const mgt_py *attr, mgt_py **out)
{
	size_t nl = strlen(g->name);
	char *q = mgt_malloc(nl + attr->len + 2);
	if (!q)
		return MGT_ERR_NOMEM;
	memcpy(q, g->name, nl);
	q[nl] = '.';
	memcpy(q + nl + 1, attr->s, attr->len + 1);
	mgt_status st = new_blob(m, MGT_PY_GLOBAL, g->s, g->len, out);
	if (st == MGT_OK)
		(*out)->name = q;
	else
		free(q);
	return st;
}

/* builtins set / frozenset / bytearray / bytes / getattr, or a generic object. */
static mgt_status call_builtin(pk_vm *m, mgt_py *f, mgt_py *a, mgt_py **out)
{
	const char *nm = f->name;
	if (!strcmp(nm, "getattr") && a->n == 2 && a->v[0]->kind == MGT_PY_GLOBAL && a->v[1]->kind == MGT_PY_STR)
		return getattr_global(m, a->v[0], a->v[1], out);
	if (!strcmp(nm, "set") || !strcmp(nm, "frozenset")) {
		if (a->n == 0)
			return new_seq(m, MGT_PY_LIST, NULL, 0, out);
		if (a->n == 1 && (a->v[0]->kind == MGT_PY_LIST || a->v[0]->kind == MGT_PY_TUPLE))
			return new_seq(m, MGT_PY_LIST, a->v[0]->v, a->v[0]->n, out);
	} else if (!strcmp(nm, "bytearray") || !strcmp(nm, "bytes")) {
		if (a->n == 0)
			return new_blob(m, MGT_PY_BYTES, "", 0, out);
		if (a->n == 1 && a->v[0]->kind == MGT_PY_BYTES)
			return new_blob(m, MGT_PY_BYTES, a->v[0]->s, a->v[0]->len, out);
		if (a->n == 2 && a->v[0]->kind == MGT_PY_STR &&
		    (is_str(a->v[1], "latin-1") || is_str(a->v[1], "latin1")))
			return latin1(m, a->v[0], out);
	}
	return generic(m, f, a, out);
}

/* f(*args) for the GLOBALs of ckpt.h's list, evaluated natively; anything else an OBJ. */
static mgt_status call(pk_vm *m, mgt_py *f, mgt_py *a, int depth, mgt_py **out)
{
	if (a->kind != MGT_PY_TUPLE)
		return bad(m, "call arguments are not a tuple");
	if (f->kind != MGT_PY_GLOBAL)
		return generic(m, f, a, out);
	if (depth > 8)
		return bad(m, "calls nested deeper than 8");
	bool v3 = is_global(f, "torch._utils", "_rebuild_tensor_v3");
	if (v3 || is_global(f, "torch._utils", "_rebuild_tensor_v2"))
		return rebuild_tensor(m, a, v3, out);
	if (is_global(f, "torch._utils", "_rebuild_parameter") ||
	    is_global(f, "torch._utils", "_rebuild_parameter_with_state")) {
		if (a->n < 1)
			return bad(m, "_rebuild_parameter without arguments");
		*out = a->v[0];
		return MGT_OK;
	}
	if (is_global(f, "torch._tensor", "_rebuild_from_type_v2")) {
		if (a->n < 3)
			return bad(m, "_rebuild_from_type_v2 with %zu arguments", a->n);
		return call(m, a->v[0], a->v[2], depth + 1, out);
	}
	if (is_global(f, "collections", "OrderedDict") && a->n == 0)
		return new_node(m, MGT_PY_DICT, out);
	if (is_global(f, "torch", "Size") && a->n == 1 &&
	    (a->v[0]->kind == MGT_PY_TUPLE || a->v[0]->kind == MGT_PY_LIST))
		return new_seq(m, MGT_PY_TUPLE, a->v[0]->v, a->v[0]->n, out);
	if (is_global(f, "_codecs", "encode") && a->n == 2 && a->v[0]->kind == MGT_PY_STR &&
	    (is_str(a->v[1], "latin1") || is_str(a->v[1], "latin-1")))
		return latin1(m, a->v[0], out);
	if (!strcmp(f->s, "builtins"))
		return call_builtin(m, f, a, out);
	if (is_global(f, "copyreg", "_reconstructor") && a->n >= 1)
		return generic(m, a->v[0], NULL, out);
	if (is_global(f, "copyreg", "__newobj__") && a->n >= 1) {
		mgt_py *rest;
		TRY(new_seq(m, MGT_PY_TUPLE, a->v + 1, a->n - 1, &rest));
		return call(m, a->v[0], rest, depth + 1, out);
	}
	return generic(m, f, a, out);
}

/* ---- opcodes ---------------------------------------------------------------------------------------- */

/* GLOBAL / STACK_GLOBAL: protocol 2's module names mapped as fix_imports does for the two that
 * matter here (__builtin__ -> builtins, copy_reg -> copyreg). */
static mgt_status global(pk_vm *m, const char *mod, size_t ml, const char *name, size_t nl)
{
	if (ml == 11 && !memcmp(mod, "__builtin__", 11))
		mod = "builtins", ml = 8;
	else if (ml == 8 && !memcmp(mod, "copy_reg", 8))
		mod = "copyreg", ml = 7;
	mgt_py *g = NULL;
	TRY(new_blob(m, MGT_PY_GLOBAL, mod, ml, &g));
	char *n = mgt_malloc(nl + 1);
	if (!n)
		return MGT_ERR_NOMEM;
	memcpy(n, name, nl);
	n[nl] = 0;
	g->name = n;
	return push(m, g);
}

static mgt_status op_global(pk_vm *m)
{
	const char *mod, *name;
	size_t ml, nl;
	TRY(take_line(m, &mod, &ml));
	TRY(take_line(m, &name, &nl));
	return global(m, mod, ml, name, nl);
}

static mgt_status op_stack_global(pk_vm *m)
{
	mgt_py *name = NULL, *mod = NULL;
	TRY(pop(m, &name));
	TRY(pop(m, &mod));
	if (name->kind != MGT_PY_STR || mod->kind != MGT_PY_STR)
		return bad(m, "STACK_GLOBAL of other than two strings");
	return global(m, mod->s, mod->len, name->s, name->len);
}

static mgt_status memo_put(pk_vm *m, uint64_t idx)
{
	mgt_py *v = NULL;
	TRY(top(m, &v));
	if (idx >= m->limit)
		return bad(m, "memo index %llu out of range", (unsigned long long)idx);
	if (idx >= m->memo_cap) {
		size_t old = m->memo_cap;
		TRY(grow(&m->memo, &m->memo_cap, (size_t)idx + 1, sizeof *m->memo));
		memset(m->memo + old, 0, (m->memo_cap - old) * sizeof *m->memo);
	}
	m->memo_count += !m->memo[idx];
	m->memo[idx] = v;
	return MGT_OK;
}

static mgt_status memo_get(pk_vm *m, uint64_t idx)
{
	if (idx >= m->memo_cap || !m->memo[idx])
		return bad(m, "memo entry %llu not set", (unsigned long long)idx);
	return push(m, m->memo[idx]);
}

static mgt_status text_index(pk_vm *m, uint64_t *idx)
{
	const char *s;
	size_t n;
	TRY(take_line(m, &s, &n));
	uint64_t v = 0;
	if (!n || n > 18)
		return bad(m, "bad memo index");
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return bad(m, "bad memo index");
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*idx = v;
	return MGT_OK;
}

/* Items stack[from..sn) appended to (or, kv, set as pairs in) target, then dropped. */
static mgt_status fill(pk_vm *m, mgt_py *target, size_t from, bool kv)
{
	size_t k = m->sn - from;
	if (kv && k % 2)
		return bad(m, "SETITEMS with an odd number of items");
	if (kv && target->kind != MGT_PY_DICT && target->kind != MGT_PY_OBJ)
		return bad(m, "SETITEM(S) on a value that is not a dict");
	if (!kv && target->kind != MGT_PY_LIST && target->kind != MGT_PY_OBJ)
		return bad(m, "APPEND(S) or ADDITEMS on a value that is not a list or set");
	if (!kv && target->kind == MGT_PY_OBJ && target->kv && target->n)
		return bad(m, "APPEND on an object that has SETITEMs");
	for (size_t i = from; i < m->sn; i += kv ? 2 : 1)
		TRY(kv ? dict_set(m, target, m->stack[i], m->stack[i + 1]) : add_item(target, m->stack[i]));
	m->sn = from;
	return MGT_OK;
}

/* APPENDS, SETITEMS, ADDITEMS: the target lies just below the mark. */
static mgt_status op_fill_mark(pk_vm *m, bool kv)
{
	size_t from = 0;
	TRY(pop_mark(m, &from));
	if (from <= floor_of(m))
		return bad(m, "stack underflow");
	return fill(m, m->stack[from - 1], from, kv);
}

/* APPEND, SETITEM: one item or pair above the target. */
static mgt_status op_fill_one(pk_vm *m, bool kv)
{
	size_t k = kv ? 2 : 1;
	if (m->sn < floor_of(m) + k + 1)
		return bad(m, "stack underflow");
	return fill(m, m->stack[m->sn - k - 1], m->sn - k, kv);
}

/* TUPLE, LIST, DICT, FROZENSET: a new container of the items above the mark. */
static mgt_status op_collect(pk_vm *m, mgt_py_kind kind, bool kv)
{
	size_t from = 0;
	TRY(pop_mark(m, &from));
	mgt_py *c = NULL;
	if (kv) {
		TRY(new_node(m, MGT_PY_DICT, &c));
		TRY(fill(m, c, from, true));
	} else {
		TRY(new_seq(m, kind, m->stack + from, m->sn - from, &c));
		m->sn = from;
	}
	return push(m, c);
}

static mgt_status op_tuple_n(pk_vm *m, size_t k)
{
	if (m->sn < floor_of(m) + k)
		return bad(m, "stack underflow");
	mgt_py *t = NULL;
	TRY(new_seq(m, MGT_PY_TUPLE, m->stack + m->sn - k, k, &t));
	m->sn -= k;
	return push(m, t);
}

static mgt_status op_blob(pk_vm *m, mgt_py_kind kind, size_t lenbytes)
{
	uint64_t len = 0;
	const uint8_t *b = NULL;
	TRY(take_uint(m, lenbytes, &len));
	if (len > m->n - m->pos)
		return bad(m, "a string of %llu bytes beyond the input's end", (unsigned long long)len);
	TRY(take(m, (size_t)len, &b));
	mgt_py *v = NULL;
	TRY(new_blob(m, kind, b, (size_t)len, &v));
	return push(m, v);
}

static mgt_status op_long(pk_vm *m, size_t lenbytes)
{
	uint64_t len = 0;
	const uint8_t *b = NULL;
	TRY(take_uint(m, lenbytes, &len));
	if (lenbytes == 4 && len >= 0x80000000u)
		return bad(m, "LONG4 with a negative byte count");
	if (len > m->n - m->pos)
		return bad(m, "a long of %llu bytes beyond the input's end", (unsigned long long)len);
	TRY(take(m, (size_t)len, &b));
	mgt_py *v = NULL;
	TRY(long_node(m, b, (size_t)len, &v));
	return push(m, v);
}

static mgt_status op_binint(pk_vm *m, size_t k)
{
	uint64_t u = 0;
	TRY(take_uint(m, k, &u));
	mgt_py *v = NULL;
	TRY(new_int(m, k == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u, &v));
	return push(m, v);
}

static mgt_status op_binfloat(pk_vm *m)
{
	const uint8_t *b = NULL;
	TRY(take(m, 8, &b));
	uint64_t u = 0;
	for (int i = 0; i < 8; i++)
		u = u << 8 | b[i]; /* big-endian */
	mgt_py *v = NULL;
	TRY(new_node(m, MGT_PY_FLOAT, &v));
	memcpy(&v->f, &u, 8);
	return push(m, v);
}

static mgt_status op_simple(pk_vm *m, mgt_py_kind kind, int64_t i)
{
	mgt_py *v = NULL;
	TRY(new_node(m, kind, &v));
	v->i = i;
	return push(m, v);
}

/* INT, LONG, FLOAT, STRING, UNICODE: protocol 0's text arguments. */
static mgt_status op_text(pk_vm *m)
{
	const char *s;
	size_t n;
	TRY(take_line(m, &s, &n));
	mgt_py *v = NULL;
	switch (m->op) {
	case 'I':
		if (n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))
			return op_simple(m, MGT_PY_BOOL, s[1] == '1');
		TRY(decimal_node(m, s, n, &v));
		break;
	case 'L':
		TRY(decimal_node(m, s, n && s[n - 1] == 'L' ? n - 1 : n, &v));
		break;
	case 'F': {
		char buf[64];
		char *end;
		if (n == 0 || n >= sizeof buf)
			return bad(m, "bad FLOAT argument");
		memcpy(buf, s, n);
		buf[n] = 0;
		double f = strtod(buf, &end);
		if (*end)
			return bad(m, "bad FLOAT argument");
		TRY(new_node(m, MGT_PY_FLOAT, &v));
		v->f = f;
		break;
	}
	case 'S':
		TRY(quoted(m, s, n, &v));
		break;
	default: /* 'V' */
		TRY(raw_unicode(m, s, n, &v));
		break;
	}
	return push(m, v);
}

static mgt_status op_reduce(pk_vm *m)
{
	mgt_py *args = NULL, *f = NULL, *v = NULL;
	TRY(pop(m, &args));
	TRY(pop(m, &f));
	TRY(call(m, f, args, 0, &v));
	return push(m, v);
}

static mgt_status op_newobj_ex(pk_vm *m)
{
	mgt_py *kw = NULL, *args = NULL, *cls = NULL, *v = NULL;
	TRY(pop(m, &kw)); /* keyword arguments: dropped (the class is not run) */
	TRY(pop(m, &args));
	TRY(pop(m, &cls));
	TRY(call(m, cls, args, 0, &v));
	return push(m, v);
}

/* BUILD: the state stays with the value (an OBJ's attributes; any other value keeps it too, as
 * an OrderedDict's _metadata). */
static mgt_status op_build(pk_vm *m)
{
	mgt_py *state = NULL, *v = NULL;
	TRY(pop(m, &state));
	TRY(top(m, &v));
	v->state = state;
	return MGT_OK;
}

static mgt_status op_binpersid(pk_vm *m)
{
	mgt_py *pid = NULL, *st = NULL;
	TRY(pop(m, &pid));
	TRY(persistent(m, pid, &st));
	return push(m, st);
}

static mgt_status op_stack(pk_vm *m)
{
	mgt_py *v = NULL;
	size_t from = 0;
	switch (m->op) {
	case '(':
		TRY(grow(&m->marks, &m->mcap, m->mn + 1, sizeof *m->marks));
		m->marks[m->mn++] = m->sn;
		return MGT_OK;
	case '0':
		if (m->sn > floor_of(m)) {
			m->sn--;
			return MGT_OK;
		}
		return pop_mark(m, &from);
	case '1':
		TRY(pop_mark(m, &from));
		m->sn = from;
		return MGT_OK;
	default: /* '2' */
		TRY(top(m, &v));
		return push(m, v);
	}
}

static mgt_status op_memo(pk_vm *m)
{
	uint64_t idx = 0;
	switch (m->op) {
	case 'p':
		TRY(text_index(m, &idx));
		return memo_put(m, idx);
	case 'q':
	case 'r':
		TRY(take_uint(m, m->op == 'q' ? 1 : 4, &idx));
		return memo_put(m, idx);
	case 0x94:
		return memo_put(m, m->memo_count);
	case 'g':
		TRY(text_index(m, &idx));
		return memo_get(m, idx);
	default: /* 'h', 'j' */
		TRY(take_uint(m, m->op == 'h' ? 1 : 4, &idx));
		return memo_get(m, idx);
	}
}

/* One opcode (m->op, its argument at m->pos). */
static mgt_status step(pk_vm *m)
{
	uint64_t u = 0;
	switch (m->op) {
	case 0x80:
		TRY(take_uint(m, 1, &u));
		return u <= 5 ? MGT_OK : bad(m, "unsupported pickle protocol %u", (unsigned)u);
	case 0x95: return take_uint(m, 8, &u); /* FRAME: a length only */
	case '(': case '0': case '1': case '2': return op_stack(m);
	case 'N': return op_simple(m, MGT_PY_NONE, 0);
	case 0x88: return op_simple(m, MGT_PY_BOOL, 1);
	case 0x89: return op_simple(m, MGT_PY_BOOL, 0);
	case 'J': return op_binint(m, 4);
	case 'K': return op_binint(m, 1);
	case 'M': return op_binint(m, 2);
	case 0x8a: return op_long(m, 1);
	case 0x8b: return op_long(m, 4);
	case 'G': return op_binfloat(m);
	case 'I': case 'L': case 'F': case 'S': case 'V': return op_text(m);
	case 'X': return op_blob(m, MGT_PY_STR, 4);
	case 0x8c: return op_blob(m, MGT_PY_STR, 1);
	case 0x8d: return op_blob(m, MGT_PY_STR, 8);
	case 'T': return op_blob(m, MGT_PY_STR, 4);
	case 'U': return op_blob(m, MGT_PY_STR, 1);
	case 'B': return op_blob(m, MGT_PY_BYTES, 4);
	case 'C': return op_blob(m, MGT_PY_BYTES, 1);
	case 0x8e: case 0x96: return op_blob(m, MGT_PY_BYTES, 8);
	case ')': return op_tuple_n(m, 0);
	case 0x85: return op_tuple_n(m, 1);
	case 0x86: return op_tuple_n(m, 2);
	case 0x87: return op_tuple_n(m, 3);
	case 't': return op_collect(m, MGT_PY_TUPLE, false);
	case ']': case 0x8f: return op_simple(m, MGT_PY_LIST, 0);
	case 'l': case 0x91: return op_collect(m, MGT_PY_LIST, false);
	case '}': return op_simple(m, MGT_PY_DICT, 0);
	case 'd': return op_collect(m, MGT_PY_DICT, true);
	case 'a': return op_fill_one(m, false);
	case 's': return op_fill_one(m, true);
	case 'e': case 0x90: return op_fill_mark(m, false);
	case 'u': return op_fill_mark(m, true);
	case 'c': return op_global(m);
	case 0x93: return op_stack_global(m);
	case 'R': case 0x81: return op_reduce(m);
	case 0x92: return op_newobj_ex(m);
	case 'b': return op_build(m);
	case 'Q': return op_binpersid(m);
	case 'p': case 'q': case 'r': case 0x94: case 'g': case 'h': case 'j': return op_memo(m);
	case 0x97: case 0x98: return bad(m, "out-of-band buffers (NEXT_BUFFER, READONLY_BUFFER) are not read");
	default: return bad(m, "unknown opcode 0x%02x", m->op);
	}
}

static mgt_status run(pk_vm *m)
{
	while (m->pos < m->n) {
		m->op_pos = m->pos;
		m->op = m->p[m->pos++];
		if (m->op == '.') {
			if (m->sn != 1 || m->mn)
				return bad(m, "STOP with %zu values on the stack%s", m->sn, m->mn ? " and an open MARK" : "");
			m->pk->root = m->stack[0];
			return MGT_OK;
		}
		TRY(step(m));
	}
	m->op_pos = m->pos;
	m->op = 0;
	return bad(m, "truncated: no STOP");
}

mgt_status mgt_pickle_load(const void *buf, size_t n, const char *what, mgt_pickle **out)
{
	*out = NULL;
	mgt_pickle *pk = calloc(1, sizeof *pk);
	if (!pk)
		return mgt_err(MGT_ERR_NOMEM, "%s: out of memory", what);
	pk_vm m = {.p = buf, .n = n, .what = what, .pk = pk};
	m.limit = n > (SIZE_MAX - 1024) / 16 ? SIZE_MAX : 16 * n + 1024;
	mgt_status st = grow(&m.stack, &m.scap, 64, sizeof *m.stack); /* never NULL: stack + k */
	if (st == MGT_OK)
		st = run(&m);
	free(m.stack);
	free(m.marks);
	free(m.memo);
	free(m.tab);
	if (st != MGT_OK) {
		if (st == MGT_ERR_NOMEM && !strstr(mgt_err_msg(), what))
			mgt_err_ctx(st, "%s", what);
		mgt_pickle_free(pk);
		return st;
	}
	*out = pk;
	return MGT_OK;
}

const mgt_py *mgt_pickle_root(const mgt_pickle *p) { return p ? p->root : NULL; }

void mgt_pickle_free(mgt_pickle *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_all; i++) {
		mgt_py *v = p->all[i];
		free((void *)v->s);
		free((void *)v->name);
		free(v->v);
		free(v);
	}
	free(p->all);
	free(p->storages);
	free(p->tensors);
	free(p);
}

/* ---- accessors -------------------------------------------------------------------------------------------- */

static const mgt_py *pairs_get(const mgt_py *d, const char *key)
{
	size_t kl = strlen(key);
	for (size_t k = 0; k < d->n; k++)
		if (d->v[2 * k]->kind == MGT_PY_STR && d->v[2 * k]->len == kl && !memcmp(d->v[2 * k]->s, key, kl))
			return d->v[2 * k + 1];
	return NULL;
}

const mgt_py *mgt_py_get(const mgt_py *d, const char *key)
{
	if (!d || !key)
		return NULL;
	if (d->kind == MGT_PY_DICT)
		return pairs_get(d, key);
	if (d->kind != MGT_PY_OBJ)
		return NULL;
	const mgt_py *s = d->state;
	if (s && s->kind == MGT_PY_DICT)
		return pairs_get(s, key);
	if (s && s->kind == MGT_PY_TUPLE) {
		for (size_t i = 0; i < s->n; i++)
			if (s->v[i]->kind == MGT_PY_DICT)
				return pairs_get(s->v[i], key);
		return NULL;
	}
	return d->kv ? pairs_get(d, key) : NULL;
}

bool mgt_py_is(const mgt_py *v, const char *module, const char *name)
{
	if (v && v->kind == MGT_PY_OBJ)
		v = v->cls;
	if (!v || v->kind != MGT_PY_GLOBAL || !name || strcmp(v->name, name))
		return false;
	return !module || !strcmp(v->s, module);
}

bool mgt_py_int(const mgt_py *v, int64_t *out)
{
	if (!v || (v->kind != MGT_PY_INT && v->kind != MGT_PY_BOOL) || v->big)
		return false;
	*out = v->i;
	return true;
}

bool mgt_py_float(const mgt_py *v, double *out)
{
	if (v && v->kind == MGT_PY_FLOAT) {
		*out = v->f;
		return true;
	}
	if (v && v->kind == MGT_PY_INT && !v->big) {
		*out = (double)v->i;
		return true;
	}
	return false;
}

const char *mgt_py_str(const mgt_py *v) { return v && v->kind == MGT_PY_STR ? v->s : NULL; }

int64_t mgt_py_numel(const mgt_py *t)
{
	if (!t || t->kind != MGT_PY_TENSOR)
		return 0;
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		if (__builtin_mul_overflow(n, t->size[d], &n))
			return INT64_MAX;
	return n;
}
