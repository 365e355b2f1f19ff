/* lib/ckpt: torch.save writer (see ckpt.h, mgt_pyw_*).  Facts: CPython's Lib/pickle.py (protocol
 * 2: save_tuple, batches of 1000 as Modules/_pickle.c writes them (close_batch), save_reduce with
 * copyreg.__newobj__, save_global with fix_imports through Lib/_compat_pickle.py's reverse
 * mappings, save_bytes as _codecs.encode, memoising with BINPUT), PyTorch's
 * torch/serialization.py _save (persistent ids, records) and caffe2/serialize/inline_container.cc
 * (getPadding: an "FB" local extra field padded with 'Z' so that data starts at a multiple of 64);
 * the zip is written by libzip (1.7.3) through a source of our own over a file or a buffer. */
#include "ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

/* pickle opcodes (Lib/pickle.py) */
enum {
	OP_MARK = '(', OP_STOP = '.', OP_BINFLOAT = 'G', OP_BININT = 'J', OP_BININT1 = 'K',
	OP_BININT2 = 'M', OP_NONE = 'N', OP_BINPERSID = 'Q', OP_REDUCE = 'R', OP_BINUNICODE = 'X',
	OP_APPEND = 'a', OP_BUILD = 'b', OP_GLOBAL = 'c', OP_APPENDS = 'e', OP_BINGET = 'h',
	OP_LONG_BINGET = 'j', OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't',
	OP_SETITEMS = 'u', OP_EMPTY_DICT = '}', OP_EMPTY_LIST = ']', OP_EMPTY_TUPLE = ')',
	OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_TUPLE1 = 0x85, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89,
	OP_LONG1 = 0x8a
};
#define PYW_BATCH 1000 /* pickle's _BATCHSIZE */
#define PYW_ALIGN 64   /* inline_container.cc kFieldAlignment */

enum { FR_TUPLE, FR_LIST, FR_DICT, FR_ODICT, FR_OBJ, FR_REDUCE };

typedef struct {
	int kind;
	size_t mark;    /* offset of the open MARK in the pickle (not FR_OBJ) */
	uint64_t count; /* items given */
	uint64_t batch; /* items since that MARK (lists, dicts) */
} pyw_frame;

typedef struct {
	char *key;  /* "module\nname" of a GLOBAL, or "\n" + a constant string */
	uint32_t memo;
} pyw_memo;

typedef struct {
	const void *data;
	uint64_t nbytes;
} pyw_storage;

struct mgt_pyw {
	mgt_buf pk;
	uint32_t memo; /* next memo index */
	pyw_frame *fr;
	size_t nfr, capfr;
	uint64_t nroot;
	bool stopped;
	pyw_memo *gm;
	size_t ngm, capgm;
	pyw_storage *st;
	size_t nst, capst;
	mgt_status err; /* the first failure, sticky */
	char *errmsg;
};

/* ==== errors and raw output ================================================================= */

static void fail(mgt_pyw *w, mgt_status st)
{
	if (w->err)
		return;
	w->err = st;
	w->errmsg = strdup(mgt_err_msg());
}

static void usage(mgt_pyw *w, const char *what)
{
	if (!w->err)
		fail(w, mgt_err(MGT_ERR_USAGE, "torch.save writer: %s", what));
}

static void put(mgt_pyw *w, const void *p, size_t n)
{
	if (!w->err && mgt_buf_add(&w->pk, p, n))
		fail(w, MGT_ERR_NOMEM);
}

static void op(mgt_pyw *w, int code)
{
	unsigned char c = (unsigned char)code;
	put(w, &c, 1);
}

static void op_u32(mgt_pyw *w, int code, uint32_t v)
{
	unsigned char b[5] = {(unsigned char)code, (unsigned char)v, (unsigned char)(v >> 8),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	put(w, b, 5);
}

/* memo[next] = top (BINPUT / LONG_BINPUT); returns the index. */
static uint32_t memoize(mgt_pyw *w)
{
	uint32_t k = w->memo++;
	if (k < 256) {
		unsigned char b[2] = {OP_BINPUT, (unsigned char)k};
		put(w, b, 2);
	} else {
		op_u32(w, OP_LONG_BINPUT, k);
	}
	return k;
}

static void memo_get(mgt_pyw *w, uint32_t k)
{
	if (k < 256) {
		unsigned char b[2] = {OP_BINGET, (unsigned char)k};
		put(w, b, 2);
	} else {
		op_u32(w, OP_LONG_BINGET, k);
	}
}

/* Delete the MARK byte at offset at (a container that turned out to need none). */
static void unmark(mgt_pyw *w, size_t at)
{
	if (w->err)
		return;
	memmove(w->pk.p + at, w->pk.p + at + 1, w->pk.n - at - 1);
	w->pk.n--;
}

/* ==== raw values (not counted as items) ====================================================== */

static void raw_int(mgt_pyw *w, int64_t v)
{
	unsigned char b[10];
	if (v >= 0 && v <= 0xff) {
		b[0] = OP_BININT1, b[1] = (unsigned char)v;
		put(w, b, 2);
	} else if (v >= 0 && v <= 0xffff) {
		b[0] = OP_BININT2, b[1] = (unsigned char)v, b[2] = (unsigned char)(v >> 8);
		put(w, b, 3);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		op_u32(w, OP_BININT, (uint32_t)v);
	} else { /* LONG1: the shortest little-endian two's complement (pickle.py encode_long) */
		uint64_t u = (uint64_t)v;
		int n = 8;
		for (int i = 0; i < 8; i++)
			b[2 + i] = (unsigned char)(u >> (8 * i));
		while (n > 1 && ((b[1 + n] == 0 && !(b[n] & 0x80)) || (b[1 + n] == 0xff && (b[n] & 0x80))))
			n--;
		b[0] = OP_LONG1, b[1] = (unsigned char)n;
		put(w, b, 2 + (size_t)n);
	}
}

/* Whether s[0..n) is UTF-8 that Python's decoder (with surrogatepass) accepts. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
		if (k == 9 || k > n - i - 1)
			return false;
		uint32_t cp = k == 0 ? c : c & (0x3fu >> k);
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3fu);
		}
		static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
		if (cp < min[k] || cp > 0x10ffff)
			return false;
		i += k + 1;
	}
	return true;
}

/* BINUNICODE of s[0..n) (UTF-8), memoised. */
static void raw_str(mgt_pyw *w, const char *s, size_t n)
{
	if (n > UINT32_MAX)
		return usage(w, "a string of 4 GiB or more (protocol 2 has no BINUNICODE8)");
	op_u32(w, OP_BINUNICODE, (uint32_t)n);
	put(w, s, n);
	memoize(w);
}

static pyw_memo *memo_find(mgt_pyw *w, const char *key)
{
	for (size_t i = 0; i < w->ngm; i++)
		if (strcmp(w->gm[i].key, key) == 0)
			return &w->gm[i];
	return NULL;
}

/* Remember key at memo index k (after its value was memoised). */
static void memo_keep(mgt_pyw *w, const char *key, uint32_t k)
{
	if (w->err)
		return;
	if (w->ngm == w->capgm) {
		size_t cap = w->capgm ? 2 * w->capgm : 32;
		pyw_memo *p = mgt_realloc(w->gm, cap * sizeof *p);
		if (!p)
			return fail(w, MGT_ERR_NOMEM);
		w->gm = p, w->capgm = cap;
	}
	char *c = mgt_strdup(key);
	if (!c)
		return fail(w, MGT_ERR_NOMEM);
	w->gm[w->ngm++] = (pyw_memo){c, k};
}

/* A constant string that Python pickles as one object ('storage', 'cpu', 'latin1'): BINGET
 * after its first time. */
static void const_str(mgt_pyw *w, const char *s)
{
	char key[16];
	snprintf(key, sizeof key, "\n%s", s);
	pyw_memo *m = memo_find(w, key);
	if (m)
		return memo_get(w, m->memo);
	raw_str(w, s, strlen(s));
	memo_keep(w, key, w->memo - 1);
}

/* Lib/_compat_pickle.py REVERSE_NAME_MAPPING (its entries other than the exception classes) and
 * REVERSE_IMPORT_MAPPING, as protocol 2's fix_imports applies them: a name pair first, else the
 * module alone. */
static const char *const name_map[][4] = {
	{"builtins", "range", "__builtin__", "xrange"}, {"functools", "reduce", "__builtin__", "reduce"},
	{"_functools", "reduce", "__builtin__", "reduce"}, {"sys", "intern", "__builtin__", "intern"},
	{"builtins", "chr", "__builtin__", "unichr"}, {"builtins", "str", "__builtin__", "unicode"},
	{"builtins", "int", "__builtin__", "long"}, {"builtins", "zip", "itertools", "izip"},
	{"builtins", "map", "itertools", "imap"}, {"builtins", "filter", "itertools", "ifilter"},
	{"itertools", "filterfalse", "itertools", "ifilterfalse"},
	{"itertools", "zip_longest", "itertools", "izip_longest"},
	{"collections", "UserDict", "UserDict", "IterableUserDict"},
	{"collections", "UserList", "UserList", "UserList"},
	{"collections", "UserString", "UserString", "UserString"},
	{"socket", "fromfd", "_socket", "fromfd"}, {"_socket", "socket", "socket", "_socketobject"},
};
static const char *const module_map[][2] = {
	{"builtins", "__builtin__"}, {"copyreg", "copy_reg"}, {"queue", "Queue"},
	{"socketserver", "SocketServer"}, {"configparser", "ConfigParser"}, {"reprlib", "repr"},
	{"_markupbase", "markupbase"}, {"winreg", "_winreg"}, {"_thread", "thread"},
	{"_dummy_thread", "dummy_thread"}, {"dbm.bsd", "dbhash"}, {"dbm.dumb", "dumbdbm"},
	{"dbm.ndbm", "dbm"}, {"dbm.gnu", "gdbm"}, {"xmlrpc.client", "xmlrpclib"},
	{"xmlrpc.server", "SimpleXMLRPCServer"}, {"http.client", "httplib"},
	{"html.entities", "htmlentitydefs"}, {"html.parser", "HTMLParser"}, {"http.cookies", "Cookie"},
	{"http.cookiejar", "cookielib"}, {"http.server", "BaseHTTPServer"},
	{"test.support", "test.test_support"}, {"subprocess", "commands"}, {"urllib.parse", "urlparse"},
	{"urllib.robotparser", "robotparser"}, {"urllib.request", "urllib2"}, {"dbm", "anydbm"},
	{"collections.abc", "_abcoll"}, {"_bz2", "bz2"}, {"_dbm", "dbm"}, {"_functools", "functools"},
	{"_gdbm", "gdbm"}, {"_pickle", "pickle"}, {"tkinter", "Tkinter"},
};

static void py2_name(const char **module, const char **name)
{
	for (size_t i = 0; i < sizeof name_map / sizeof name_map[0]; i++)
		if (strcmp(*module, name_map[i][0]) == 0 && strcmp(*name, name_map[i][1]) == 0) {
			*module = name_map[i][2], *name = name_map[i][3];
			return;
		}
	for (size_t i = 0; i < sizeof module_map / sizeof module_map[0]; i++)
		if (strcmp(*module, module_map[i][0]) == 0) {
			*module = module_map[i][1];
			return;
		}
}

static bool ascii_line(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80 || *s == '\n')
			return false;
	return true;
}

/* module.name as pickle's save_global writes it with protocol 2: GLOBAL memoised (BINGET when
 * seen before); a dotted name A.B as getattr(A, 'B') (save_reduce). */
static void raw_global(mgt_pyw *w, const char *module, const char *name)
{
	if (w->err)
		return;
	if (!module || !name || !ascii_line(module) || !ascii_line(name))
		return usage(w, "a global needs non-empty ASCII module and name without newlines");
	size_t lm = strlen(module), ln = strlen(name);
	char *key = mgt_malloc(lm + ln + 2);
	if (!key)
		return fail(w, MGT_ERR_NOMEM);
	snprintf(key, lm + ln + 2, "%s\n%s", module, name);
	pyw_memo *m = memo_find(w, key);
	const char *dot = strrchr(name, '.');
	if (m) {
		memo_get(w, m->memo);
	} else if (dot) {
		raw_global(w, "builtins", "getattr");
		key[lm + 1 + (size_t)(dot - name)] = 0;
		raw_global(w, module, key + lm + 1);
		key[lm + 1 + (size_t)(dot - name)] = '.';
		raw_str(w, dot + 1, strlen(dot + 1));
		op(w, OP_TUPLE1 + 1);
		memoize(w);
		op(w, OP_REDUCE);
		memo_keep(w, key, memoize(w));
	} else {
		const char *m2 = module, *n2 = name;
		py2_name(&m2, &n2);
		op(w, OP_GLOBAL);
		put(w, m2, strlen(m2));
		op(w, '\n');
		put(w, n2, strlen(n2));
		op(w, '\n');
		memo_keep(w, key, memoize(w));
	}
	free(key);
}

/* ==== containers ============================================================================ */

/* Account for a new value: an item of the open container (closing a full batch of a list or
 * dict first) or the root.  False when the writer has failed or the value is not allowed. */
static bool item(mgt_pyw *w)
{
	if (w->err)
		return false;
	if (w->stopped) {
		usage(w, "a value after mgt_pyw_save / _to_mem");
		return false;
	}
	if (w->nfr == 0) {
		if (w->nroot++) {
			usage(w, "more than one root value");
			return false;
		}
		return true;
	}
	pyw_frame *f = &w->fr[w->nfr - 1];
	if (f->kind == FR_OBJ && f->count) {
		usage(w, "an object takes one state value");
		return false;
	}
	uint64_t full = f->kind == FR_LIST ? PYW_BATCH : 2 * PYW_BATCH;
	if ((f->kind == FR_LIST || f->kind == FR_DICT || f->kind == FR_ODICT) && f->batch == full) {
		op(w, f->kind == FR_LIST ? OP_APPENDS : OP_SETITEMS);
		f->mark = w->pk.n;
		op(w, OP_MARK);
		f->batch = 0;
	}
	f->count++;
	f->batch++;
	return !w->err;
}

static void push(mgt_pyw *w, int kind, bool mark)
{
	if (w->err)
		return;
	if (w->nfr == w->capfr) {
		size_t cap = w->capfr ? 2 * w->capfr : 16;
		pyw_frame *p = mgt_realloc(w->fr, cap * sizeof *p);
		if (!p)
			return fail(w, MGT_ERR_NOMEM);
		w->fr = p, w->capfr = cap;
	}
	w->fr[w->nfr++] = (pyw_frame){.kind = kind, .mark = w->pk.n};
	if (mark)
		op(w, OP_MARK);
}

/* The open frame, popped, when it is of kind; NULL otherwise. */
static pyw_frame *pop(mgt_pyw *w, int kind, const char *what)
{
	if (w->err)
		return NULL;
	if (w->nfr == 0 || w->fr[w->nfr - 1].kind != kind) {
		usage(w, what);
		return NULL;
	}
	return &w->fr[--w->nfr];
}

/* Close a tuple whose MARK is at f->mark: EMPTY_TUPLE, TUPLE1-3 or TUPLE, memoised unless empty. */
static void close_tuple(mgt_pyw *w, const pyw_frame *f)
{
	if (f->count <= 3)
		unmark(w, f->mark);
	if (f->count == 0)
		op(w, OP_EMPTY_TUPLE);
	else {
		op(w, f->count <= 3 ? OP_TUPLE1 + (int)f->count - 1 : OP_TUPLE);
		memoize(w);
	}
}

/* Close the last batch of a list or dict.  torch.save pickles with CPython's C pickler, whose
 * rules (_pickle.c) differ by type.  A list or dict (batch_list_exact, batch_dict_exact): a
 * single item (pair) with APPEND / SETITEM and no MARK, else every batch MARK ... APPENDS /
 * SETITEMS, a dict of a multiple of 1000 pairs ending with an empty MARK SETITEMS.  An
 * OrderedDict's items come from an iterator (batch_dict, as pickle.py's _batch_setitems): a
 * last batch of one pair is SETITEM without MARK. */
static void close_batch(mgt_pyw *w, const pyw_frame *f)
{
	bool list = f->kind == FR_LIST;
	uint64_t one = list ? 1 : 2, full = list ? PYW_BATCH : 2 * PYW_BATCH;
	bool single = f->kind == FR_ODICT ? f->batch == one : f->count == one;
	if (f->count == 0 || single)
		unmark(w, f->mark);
	if (single)
		op(w, list ? OP_APPEND : OP_SETITEM);
	else if (f->count)
		op(w, list ? OP_APPENDS : OP_SETITEMS);
	if (f->kind == FR_DICT && f->batch == full) {
		op(w, OP_MARK);
		op(w, OP_SETITEMS);
	}
}

/* ==== public: values ======================================================================== */

mgt_status mgt_pyw_new(mgt_pyw **out)
{
	*out = NULL;
	mgt_pyw *w = calloc(1, sizeof *w);
	if (!w)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	unsigned char proto[2] = {OP_PROTO, 2};
	if (mgt_buf_add(&w->pk, proto, 2)) {
		free(w);
		return MGT_ERR_NOMEM;
	}
	*out = w;
	return MGT_OK;
}

void mgt_pyw_none(mgt_pyw *w)
{
	if (item(w))
		op(w, OP_NONE);
}

void mgt_pyw_bool(mgt_pyw *w, bool v)
{
	if (item(w))
		op(w, v ? OP_NEWTRUE : OP_NEWFALSE);
}

void mgt_pyw_int(mgt_pyw *w, int64_t v)
{
	if (item(w))
		raw_int(w, v);
}

void mgt_pyw_float(mgt_pyw *w, double v)
{
	if (!item(w))
		return;
	uint64_t u;
	memcpy(&u, &v, 8);
	unsigned char b[9] = {OP_BINFLOAT};
	for (int i = 0; i < 8; i++)
		b[1 + i] = (unsigned char)(u >> (56 - 8 * i)); /* big-endian */
	put(w, b, 9);
}

void mgt_pyw_str(mgt_pyw *w, const char *s)
{
	if (!item(w))
		return;
	if (!s || !utf8_ok((const unsigned char *)s, strlen(s)))
		return usage(w, "a string that is not UTF-8");
	raw_str(w, s, strlen(s));
}

/* _codecs.encode(p[0..n) as latin-1 code points, 'latin1') */
void mgt_pyw_bytes(mgt_pyw *w, const void *p, size_t n)
{
	if (!item(w))
		return;
	if (n && !p)
		return usage(w, "bytes: NULL data");
	const unsigned char *b = p;
	size_t len = n;
	for (size_t i = 0; i < n; i++)
		len += b[i] >> 7;
	if (len > UINT32_MAX)
		return usage(w, "bytes of 4 GiB or more as latin-1 text (protocol 2)");
	raw_global(w, "_codecs", "encode");
	op_u32(w, OP_BINUNICODE, (uint32_t)len);
	if (!w->err && mgt_buf_reserve(&w->pk, len))
		fail(w, MGT_ERR_NOMEM);
	if (w->err)
		return;
	char *o = w->pk.p + w->pk.n;
	for (size_t i = 0; i < n; i++) {
		if (b[i] < 0x80) {
			*o++ = (char)b[i];
		} else {
			*o++ = (char)(0xc0 | b[i] >> 6);
			*o++ = (char)(0x80 | (b[i] & 0x3f));
		}
	}
	w->pk.n += len;
	memoize(w);
	const_str(w, "latin1");
	op(w, OP_TUPLE1 + 1);
	memoize(w);
	op(w, OP_REDUCE);
	memoize(w);
}

void mgt_pyw_global(mgt_pyw *w, const char *module, const char *name)
{
	if (item(w))
		raw_global(w, module, name);
}

void mgt_pyw_tuple_begin(mgt_pyw *w)
{
	if (item(w))
		push(w, FR_TUPLE, true);
}

void mgt_pyw_tuple_end(mgt_pyw *w)
{
	pyw_frame *f = pop(w, FR_TUPLE, "tuple_end without tuple_begin");
	if (f)
		close_tuple(w, f);
}

void mgt_pyw_list_begin(mgt_pyw *w)
{
	if (!item(w))
		return;
	op(w, OP_EMPTY_LIST);
	memoize(w);
	push(w, FR_LIST, true);
}

void mgt_pyw_list_end(mgt_pyw *w)
{
	pyw_frame *f = pop(w, FR_LIST, "list_end without list_begin");
	if (f)
		close_batch(w, f);
}

void mgt_pyw_dict_begin(mgt_pyw *w)
{
	if (!item(w))
		return;
	op(w, OP_EMPTY_DICT);
	memoize(w);
	push(w, FR_DICT, true);
}

static void dict_end(mgt_pyw *w, int kind, const char *what)
{
	pyw_frame *f = pop(w, kind, what);
	if (f && f->count % 2)
		usage(w, "a dict with an odd number of items (keys and values alternate)");
	else if (f)
		close_batch(w, f);
}

void mgt_pyw_dict_end(mgt_pyw *w) { dict_end(w, FR_DICT, "dict_end without dict_begin"); }

/* OrderedDict: REDUCE(collections.OrderedDict, ()), then its items as a dict's. */
void mgt_pyw_odict_begin(mgt_pyw *w)
{
	if (!item(w))
		return;
	raw_global(w, "collections", "OrderedDict");
	op(w, OP_EMPTY_TUPLE);
	op(w, OP_REDUCE);
	memoize(w);
	push(w, FR_ODICT, true);
}

void mgt_pyw_odict_end(mgt_pyw *w) { dict_end(w, FR_ODICT, "odict_end without odict_begin"); }

/* copyreg.__newobj__(cls): cls, (), NEWOBJ; then the state and BUILD (no state: no BUILD, as
 * save_reduce skips a None state). */
void mgt_pyw_obj_begin(mgt_pyw *w, const char *module, const char *name)
{
	if (!item(w))
		return;
	raw_global(w, module, name);
	op(w, OP_EMPTY_TUPLE);
	op(w, OP_NEWOBJ);
	memoize(w);
	push(w, FR_OBJ, false);
}

void mgt_pyw_obj_end(mgt_pyw *w)
{
	pyw_frame *f = pop(w, FR_OBJ, "obj_end without obj_begin");
	if (f && f->count)
		op(w, OP_BUILD);
}

void mgt_pyw_reduce_begin(mgt_pyw *w, const char *module, const char *name)
{
	if (!item(w))
		return;
	raw_global(w, module, name);
	push(w, FR_REDUCE, true);
}

void mgt_pyw_reduce_end(mgt_pyw *w)
{
	pyw_frame *f = pop(w, FR_REDUCE, "reduce_end without reduce_begin");
	if (!f)
		return;
	close_tuple(w, f);
	op(w, OP_REDUCE);
	memoize(w);
}

/* ==== tensors =============================================================================== */

static const char *const storage_class[MGT_ST_COUNT] = {
	[MGT_ST_F32] = "FloatStorage", [MGT_ST_F16] = "HalfStorage", [MGT_ST_BF16] = "BFloat16Storage",
	[MGT_ST_F64] = "DoubleStorage", [MGT_ST_I64] = "LongStorage", [MGT_ST_I32] = "IntStorage",
	[MGT_ST_I16] = "ShortStorage", [MGT_ST_I8] = "CharStorage", [MGT_ST_U8] = "ByteStorage",
	[MGT_ST_BOOL] = "BoolStorage",
};

/* A tuple of ints as save_tuple writes it. */
static void int_tuple(mgt_pyw *w, const int64_t *v, int n)
{
	pyw_frame f = {.kind = FR_TUPLE, .mark = w->pk.n, .count = (uint64_t)n};
	op(w, OP_MARK);
	for (int i = 0; i < n; i++)
		raw_int(w, v[i]);
	close_tuple(w, &f);
}

/* ('storage', torch.<X>Storage, key, 'cpu', numel) BINPERSID, as _save's persistent_id. */
static void persid(mgt_pyw *w, mgt_dt dt, size_t key, int64_t numel)
{
	char k[24];
	int kn = snprintf(k, sizeof k, "%zu", key);
	op(w, OP_MARK);
	const_str(w, "storage");
	raw_global(w, "torch", storage_class[dt]);
	raw_str(w, k, (size_t)kn);
	const_str(w, "cpu");
	raw_int(w, numel);
	op(w, OP_TUPLE);
	memoize(w);
	op(w, OP_BINPERSID);
}

static bool tensor_ok(mgt_pyw *w, mgt_dt dt, int ndim, const int64_t *size, const void *data,
		      uint64_t *nbytes)
{
	uint64_t numel;
	if (!mgt_dt_name(dt))
		usage(w, "tensor: bad dtype");
	else if (ndim < 0 || ndim > 8 || (ndim && !size) || !ck_shape_numel(ndim, size, &numel) ||
		 numel > (UINT64_C(1) << 62) / mgt_dt_size(dt))
		usage(w, "tensor: bad shape (0..8 dims, each >= 0)");
	else if (numel && !data)
		usage(w, "tensor: NULL data");
	else
		*nbytes = numel * mgt_dt_size(dt);
	return !w->err;
}

void mgt_pyw_tensor(mgt_pyw *w, mgt_dt dt, int ndim, const int64_t *size, const void *data)
{
	uint64_t nbytes = 0;
	if (!item(w) || !tensor_ok(w, dt, ndim, size, data, &nbytes))
		return;
	if (w->nst == w->capst) {
		size_t cap = w->capst ? 2 * w->capst : 16;
		pyw_storage *p = mgt_realloc(w->st, cap * sizeof *p);
		if (!p)
			return fail(w, MGT_ERR_NOMEM);
		w->st = p, w->capst = cap;
	}
	w->st[w->nst] = (pyw_storage){data, nbytes};
	int64_t stride[8], s = 1; /* contiguous: a dim of size 0 counts as 1 (torch's strides) */
	for (int d = ndim - 1; d >= 0; d--) {
		stride[d] = s;
		s *= size[d] > 1 ? size[d] : 1;
	}
	raw_global(w, "torch._utils", "_rebuild_tensor_v2");
	op(w, OP_MARK);
	persid(w, dt, w->nst, (int64_t)(nbytes / mgt_dt_size(dt)));
	raw_int(w, 0);
	int_tuple(w, size, ndim);
	int_tuple(w, stride, ndim);
	op(w, OP_NEWFALSE);
	raw_global(w, "collections", "OrderedDict");
	op(w, OP_EMPTY_TUPLE);
	op(w, OP_REDUCE);
	memoize(w);
	op(w, OP_TUPLE);
	memoize(w);
	op(w, OP_REDUCE);
	memoize(w);
	w->nst++;
}

/* ==== the zip =============================================================================== */

/* Where libzip's output goes: a file (written through a 1 MiB buffer) or memory. */
typedef struct {
	int fd;             /* -1: memory */
	mgt_buf mem;
	uint64_t pos, end;  /* write position, bytes written so far (the high mark) */
	char *wb;           /* file: pending bytes for offsets [wpos, wpos + wn) */
	size_t wn;
	uint64_t wpos;
	zip_error_t ze;
} pyw_sink;
#define SINK_BUF (1u << 20)

static int sink_pwrite(pyw_sink *k, const char *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pwrite(k->fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			zip_error_set(&k->ze, ZIP_ER_WRITE, r < 0 ? errno : ENOSPC);
			return -1;
		}
		p += r, n -= (size_t)r, off += (uint64_t)r;
	}
	return 0;
}

static int sink_flush(pyw_sink *k)
{
	int r = sink_pwrite(k, k->wb, k->wn, k->wpos);
	k->wn = 0;
	return r;
}

static int sink_mem(pyw_sink *k, const void *data, zip_uint64_t len)
{
	if (k->pos + len > k->mem.n && mgt_buf_reserve(&k->mem, k->pos + len - k->mem.n)) {
		zip_error_set(&k->ze, ZIP_ER_MEMORY, 0);
		return -1;
	}
	memcpy(k->mem.p + k->pos, data, len);
	if (k->pos + len > k->mem.n)
		k->mem.n = k->pos + len;
	return 0;
}

/* Pending bytes go out when the next write is not contiguous or would overflow the buffer;
 * writes of SINK_BUF or more go straight to the file. */
static int sink_file(pyw_sink *k, const void *data, zip_uint64_t len)
{
	if (k->wn && (k->wpos + k->wn != k->pos || k->wn + len > SINK_BUF) && sink_flush(k))
		return -1;
	if (len >= SINK_BUF)
		return sink_pwrite(k, data, len, k->pos);
	if (k->wn == 0)
		k->wpos = k->pos;
	memcpy(k->wb + k->wn, data, len);
	k->wn += len;
	return 0;
}

static zip_int64_t sink_write(pyw_sink *k, const void *data, zip_uint64_t len)
{
	if (len && (k->fd < 0 ? sink_mem(k, data, len) : sink_file(k, data, len)))
		return -1;
	k->pos += len;
	if (k->pos > k->end)
		k->end = k->pos;
	return (zip_int64_t)len;
}

static zip_int64_t sink_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
	pyw_sink *k = ud;
	switch (cmd) {
	case ZIP_SOURCE_SUPPORTS:
		return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
			ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
			ZIP_SOURCE_BEGIN_WRITE, ZIP_SOURCE_WRITE, ZIP_SOURCE_COMMIT_WRITE, ZIP_SOURCE_ROLLBACK_WRITE,
			ZIP_SOURCE_SEEK_WRITE, ZIP_SOURCE_TELL_WRITE, ZIP_SOURCE_REMOVE, ZIP_SOURCE_SUPPORTS, -1);
	case ZIP_SOURCE_STAT: { /* an empty archive: ZIP_TRUNCATE starts a new one */
		zip_stat_t *st = data;
		zip_stat_init(st);
		st->size = 0;
		st->valid |= ZIP_STAT_SIZE;
		return sizeof *st;
	}
	case ZIP_SOURCE_BEGIN_WRITE:
		k->pos = k->end = 0;
		return 0;
	case ZIP_SOURCE_WRITE:
		return sink_write(k, data, len);
	case ZIP_SOURCE_SEEK_WRITE: {
		zip_int64_t to = zip_source_seek_compute_offset(k->pos, k->end, data, len, &k->ze);
		if (to < 0)
			return -1;
		k->pos = (uint64_t)to;
		return 0;
	}
	case ZIP_SOURCE_TELL_WRITE:
		return (zip_int64_t)k->pos;
	case ZIP_SOURCE_COMMIT_WRITE: /* fsync: EINVAL is a file that cannot be synced (a device) */
		if (k->fd >= 0 && (sink_flush(k) || (fsync(k->fd) != 0 && errno != EINVAL))) {
			if (!zip_error_code_zip(&k->ze))
				zip_error_set(&k->ze, ZIP_ER_WRITE, errno);
			return -1;
		}
		return 0;
	case ZIP_SOURCE_ERROR:
		return zip_error_to_data(&k->ze, data, len);
	default: /* OPEN READ SEEK TELL CLOSE (an empty archive), ROLLBACK_WRITE REMOVE FREE: nothing to do */
		return 0;
	}
}

/* Add name = data[0..n) stored, with the FB field that puts its data at a multiple of 64
 * (inline_container.cc getPadding): libzip writes each local header as 30 bytes + the name +
 * its zip64 field (20 bytes, only for sizes above 4 GiB) + ours, entries back to back from
 * offset 0 (no data descriptors on a seekable output), so *off tracks where each begins. */
static int add_entry(zip_t *za, const char *name, const void *data, uint64_t n, uint64_t *off)
{
	zip_uint8_t zs[PYW_ALIGN];
	memset(zs, 'Z', sizeof zs);
	uint64_t start = *off + 30 + strlen(name) + 4 + (n > UINT32_MAX ? 20 : 0);
	uint16_t pad = (uint16_t)((PYW_ALIGN - start % PYW_ALIGN) % PYW_ALIGN);
	zip_source_t *s = zip_source_buffer(za, data, n, 0);
	if (!s)
		return -1;
	zip_int64_t i = zip_file_add(za, name, s, 0);
	if (i < 0) {
		zip_source_free(s);
		return -1;
	}
	if (zip_set_file_compression(za, (zip_uint64_t)i, ZIP_CM_STORE, 0) ||
	    zip_file_set_dostime(za, (zip_uint64_t)i, 0, 0x21, 0) || /* 1980-01-01 00:00 */
	    zip_file_extra_field_set(za, (zip_uint64_t)i, 0x4246 /* "FB" */, ZIP_EXTRA_FIELD_NEW,
				     pad ? zs : NULL, pad, ZIP_FL_LOCAL))
		return -1;
	*off = start + pad + n;
	return 0;
}

/* The records: data.pkl, byteorder, data/<key>, version (serialization.py _save). */
static int add_records(mgt_pyw *w, zip_t *za, const char *arch)
{
	size_t la = strlen(arch);
	char *name = mgt_malloc(la + 40);
	if (!name)
		return -1;
	uint64_t off = 0;
	int r = 0;
	snprintf(name, la + 40, "%s/data.pkl", arch);
	r |= add_entry(za, name, w->pk.p, w->pk.n, &off);
	snprintf(name, la + 40, "%s/byteorder", arch);
	r |= r ? 0 : add_entry(za, name, "little", 6, &off);
	for (size_t i = 0; i < w->nst && !r; i++) {
		snprintf(name, la + 40, "%s/data/%zu", arch, i);
		r |= add_entry(za, name, w->st[i].data, w->st[i].nbytes, &off);
	}
	snprintf(name, la + 40, "%s/version", arch);
	r |= r ? 0 : add_entry(za, name, "3\n", 2, &off);
	free(name);
	return r;
}

/* Checks before writing; appends STOP the first time. */
static mgt_status finish(mgt_pyw *w, const char *arch)
{
	if (!w->err && w->nfr)
		usage(w, "save with a container still open");
	if (!w->err && w->nroot != 1)
		usage(w, "save needs exactly one root value");
	if (!w->err && (!arch || !*arch || strchr(arch, '/') || !ascii_line(arch)))
		usage(w, "the archive name must be non-empty ASCII without '/'");
	if (w->err)
		return mgt_err(w->err, "%s", w->errmsg ? w->errmsg : "torch.save writer failed");
	if (!w->stopped)
		op(w, OP_STOP);
	w->stopped = true;
	return w->err;
}

static mgt_status write_zip(mgt_pyw *w, pyw_sink *k, const char *arch, const char *what)
{
	zip_error_init(&k->ze);
	zip_error_t ze;
	zip_error_init(&ze);
	zip_source_t *src = zip_source_function_create(sink_cb, k, &ze);
	zip_t *za = src ? zip_open_from_source(src, ZIP_CREATE | ZIP_TRUNCATE, &ze) : NULL;
	if (!za) {
		if (src)
			zip_source_free(src);
		mgt_status st = mgt_err(MGT_ERR_NOMEM, "%s: libzip: %s", what, zip_error_strerror(&ze));
		zip_error_fini(&ze);
		return st;
	}
	zip_error_fini(&ze);
	mgt_status st = MGT_OK;
	if (add_records(w, za, arch)) {
		st = mgt_err(MGT_ERR_NOMEM, "%s: libzip: %s", what, zip_strerror(za));
		zip_discard(za);
	} else if (zip_close(za)) {
		bool io = zip_error_code_zip(zip_get_error(za)) != ZIP_ER_MEMORY;
		st = mgt_err(io ? MGT_ERR_IO : MGT_ERR_NOMEM, "%s: write failed: %s", what, zip_strerror(za));
		zip_discard(za);
	}
	zip_error_fini(&k->ze);
	return st;
}

mgt_status mgt_pyw_save(mgt_pyw *w, const char *path, const char *arch)
{
	mgt_status st = finish(w, arch);
	if (st)
		return st;
	pyw_sink k = {.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
	if (k.fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
	if (!(k.wb = mgt_malloc(SINK_BUF)))
		st = MGT_ERR_NOMEM;
	else
		st = write_zip(w, &k, arch, path);
	free(k.wb);
	if (close(k.fd) != 0 && !st) /* on failure the partial file stays: the caller's temporary */
		st = mgt_err(MGT_ERR_IO, "%s: close failed: %s", path, strerror(errno));
	return st;
}

mgt_status mgt_pyw_to_mem(mgt_pyw *w, const char *arch, void **buf, size_t *n)
{
	*buf = NULL;
	*n = 0;
	mgt_status st = finish(w, arch);
	if (st)
		return st;
	pyw_sink k = {.fd = -1};
	st = write_zip(w, &k, arch, "torch.save buffer");
	if (st) {
		free(k.mem.p);
		return st;
	}
	*buf = k.mem.p;
	*n = k.mem.n;
	return MGT_OK;
}

mgt_status mgt_pyw_pickle(mgt_pyw *w, void **buf, size_t *n)
{
	*buf = NULL;
	*n = 0;
	mgt_status st = finish(w, "archive");
	if (!st && w->nst)
		st = mgt_err(MGT_ERR_USAGE, "a pickle alone holds no tensors (%zu given): save it as torch.save", (size_t)w->nst);
	if (!st && !(*buf = mgt_malloc(w->pk.n ? w->pk.n : 1)))
		st = MGT_ERR_NOMEM;
	if (st)
		return st;
	memcpy(*buf, w->pk.p, w->pk.n);
	*n = w->pk.n;
	return MGT_OK;
}

void mgt_pyw_free(mgt_pyw *w)
{
	if (!w)
		return;
	free(w->pk.p);
	free(w->fr);
	for (size_t i = 0; i < w->ngm; i++)
		free(w->gm[i].key);
	free(w->gm);
	free(w->st);
	free(w->errmsg);
	free(w);
}
