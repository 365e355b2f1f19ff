/* Unit tests for lib/ckpt's pickle reader (pickle.c) and torch.save reader (torchfile.c), against
 * fixtures that CPython's pickle and PyTorch's torch.save write at test time
 * (tests/unit/pickle_ref.py under Debian's /usr/bin/python3 with python3-torch and numpy; those
 * checks are skipped when either is missing), with the values Python and numpy see: every value
 * of each tree and every tensor element, as raw bytes and as float32.  Also: hand-made bad inputs
 * (each must be MGT_ERR_FORMAT naming the input and what is wrong).  Prints "ok"/"not ok" per
 * check and "N passed, M failed"; exits 1 on failure. */
#include "ckpt/ckpt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char why[512];       /* the first mismatch of match() */
static const mgt_py *sid_storage[256];
static int n_values, n_tensors, n_elements;

static bool fail(const char *path, const char *fmt, const char *a)
{
	if (!why[0])
		snprintf(why, sizeof why, "%s: %s%s", path, fmt, a ? a : "");
	return false;
}

static unsigned char *slurp(const char *path, size_t *n)
{
	char *p = NULL;
	*n = 0;
	if (mgt_file_read(path, &p, n) != MGT_OK)
		return NULL;
	return (unsigned char *)p;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		printf("# cannot write %s\n", path);
}

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static bool hex_eq(const char *s, size_t n, const char *hex)
{
	if (strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] != hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]))
			return false;
	return true;
}

static bool match(mgt_torch *t, const mgt_py *v, json_t *e, const char *path, int depth);

static bool match_items(mgt_torch *t, mgt_py *const *items, size_t n, json_t *a, const char *path, int depth)
{
	if (n != json_array_size(a))
		return fail(path, "item count differs", NULL);
	char sub[400];
	for (size_t i = 0; i < n; i++) {
		snprintf(sub, sizeof sub, "%s[%zu]", path, i);
		if (!match(t, items[i], json_array_get(a, i), sub, depth + 1))
			return false;
	}
	return true;
}

static bool match_pairs(mgt_torch *t, const mgt_py *d, json_t *a, const char *path, int depth)
{
	if (d->n != json_array_size(a))
		return fail(path, "pair count differs", NULL);
	char sub[400];
	for (size_t i = 0; i < json_array_size(a); i++) {
		json_t *kv = json_array_get(a, i);
		snprintf(sub, sizeof sub, "%s{%zu}", path, i);
		if (!match(t, d->v[2 * i], json_array_get(kv, 0), sub, depth + 1) ||
		    !match(t, d->v[2 * i + 1], json_array_get(kv, 1), sub, depth + 1))
			return false;
	}
	return true;
}

static bool match_file(const void *got, size_t n, const char *file, const char *path)
{
	size_t fn;
	unsigned char *want = slurp(path_in(file), &fn);
	bool ok = want && fn == n && (n == 0 || memcmp(want, got, n) == 0);
	free(want);
	return ok ? true : fail(path, "values differ from ", file);
}

static bool match_tensor(mgt_torch *t, const mgt_py *v, json_t *e, const char *path)
{
	if (!t)
		return fail(path, "a tensor outside a torch file", NULL);
	if (strcmp(v->dtype_name, json_string_value(json_object_get(e, "dtype"))))
		return fail(path, "dtype ", v->dtype_name);
	json_t *shape = json_object_get(e, "shape"), *stride = json_object_get(e, "stride");
	if ((size_t)v->ndim != json_array_size(shape))
		return fail(path, "ndim differs", NULL);
	for (int d = 0; d < v->ndim; d++)
		if (v->size[d] != json_integer_value(json_array_get(shape, d)) ||
		    v->stride[d] != json_integer_value(json_array_get(stride, d)))
			return fail(path, "size or stride differs", NULL);
	if (v->offset != json_integer_value(json_object_get(e, "offset")))
		return fail(path, "storage offset differs", NULL);
	json_int_t sid = json_integer_value(json_object_get(e, "sid"));
	if (sid < 0 || sid >= 256)
		return fail(path, "bad sid", NULL);
	if (!sid_storage[sid])
		for (int k = 0; k < 256; k++)
			if (sid_storage[k] == v->storage)
				return fail(path, "shares a storage it should not", NULL);
	if (sid_storage[sid] && sid_storage[sid] != v->storage)
		return fail(path, "does not share its storage", NULL);
	sid_storage[sid] = v->storage;
	size_t numel = (size_t)mgt_py_numel(v), es = v->dtype_ok ? mgt_dt_size(v->dtype) : 0;
	if (json_is_true(json_object_get(e, "unreadable"))) { /* a dtype mgt_dt lacks: both reads refuse it */
		float f[16];
		n_tensors++;
		return !v->dtype_ok && numel <= 16 && mgt_torch_read_raw(t, v, f) == MGT_ERR_FORMAT &&
		       strstr(mgt_err_msg(), v->dtype_name) && mgt_torch_read_f32(t, v, f) == MGT_ERR_FORMAT
			? true : fail(path, "a tensor of a dtype mgt_dt lacks was read: ", v->dtype_name);
	}
	unsigned char *raw = malloc(numel * es + 1);
	float *f = malloc(numel * 4 + 1);
	bool ok = mgt_torch_read_raw(t, v, raw) == MGT_OK && match_file(raw, numel * es, json_string_value(json_object_get(e, "raw")), path);
	const char *f32 = json_string_value(json_object_get(e, "f32"));
	mgt_status st = mgt_torch_read_f32(t, v, f);
	if (ok && f32)
		ok = st == MGT_OK ? match_file(f, numel * 4, f32, path) : fail(path, "read_f32 failed: ", mgt_err_msg());
	else if (ok && st != MGT_ERR_FORMAT)
		ok = fail(path, "read_f32 of values beyond 2^24 did not fail", NULL);
	if (!ok && !why[0])
		fail(path, "read_raw failed: ", mgt_err_msg());
	free(raw);
	free(f);
	n_tensors++;
	n_elements += (int)numel;
	return ok;
}

static bool match_obj(mgt_torch *t, const mgt_py *v, json_t *e, const char *path, int depth)
{
	const char *mod = json_string_value(json_object_get(e, "module")), *name = json_string_value(json_object_get(e, "name"));
	if (v->kind != MGT_PY_OBJ || !mgt_py_is(v, mod, name))
		return fail(path, "not an object of class ", name);
	json_t *a;
	char sub[400];
	if ((a = json_object_get(e, "attrs"))) {
		if (!v->state || v->state->kind != MGT_PY_DICT || v->state->n != json_array_size(a))
			return fail(path, "attribute count differs", NULL);
		for (size_t i = 0; i < json_array_size(a); i++) {
			const char *k = json_string_value(json_array_get(json_array_get(a, i), 0));
			snprintf(sub, sizeof sub, "%s.%s", path, k);
			const mgt_py *x = mgt_py_get(v, k);
			if (!x)
				return fail(sub, "missing", NULL);
			if (!match(t, x, json_array_get(json_array_get(a, i), 1), sub, depth + 1))
				return false;
		}
	}
	if ((a = json_object_get(e, "args")) &&
	    (!v->args || v->args->kind != MGT_PY_TUPLE || !match_items(t, v->args->v, v->args->n, a, path, depth)))
		return fail(path, "arguments differ", NULL);
	if ((a = json_object_get(e, "state")) && (!v->state || !match(t, v->state, a, path, depth + 1)))
		return fail(path, "state differs", NULL);
	return true;
}

static bool match(mgt_torch *t, const mgt_py *v, json_t *e, const char *path, int depth)
{
	const char *k = json_string_value(json_object_get(e, "t"));
	json_t *jv = json_object_get(e, "v");
	n_values++;
	if (!v || depth > 64)
		return fail(path, "no value or too deep", NULL);
	if (!strcmp(k, "none"))
		return v->kind == MGT_PY_NONE ? true : fail(path, "not None", NULL);
	if (!strcmp(k, "bool"))
		return v->kind == MGT_PY_BOOL && v->i == json_is_true(jv) ? true : fail(path, "bool differs", NULL);
	if (!strcmp(k, "int")) {
		const char *le = json_string_value(json_object_get(e, "le"));
		if (v->kind != MGT_PY_INT || v->big != (le != NULL))
			return fail(path, "not an int of the right size: ", json_string_value(jv));
		char buf[32];
		snprintf(buf, sizeof buf, "%lld", (long long)v->i);
		return (le ? hex_eq(v->s, v->len, le) : !strcmp(buf, json_string_value(jv))) ? true
			: fail(path, "int differs: want ", json_string_value(jv));
	}
	if (!strcmp(k, "float")) {
		double want = strtod(json_string_value(jv), NULL);
		return v->kind == MGT_PY_FLOAT && !memcmp(&want, &v->f, 8) ? true : fail(path, "float differs: want ", json_string_value(jv));
	}
	if (!strcmp(k, "str")) {
		const char *s = json_string_value(jv);
		return v->kind == MGT_PY_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len) && !v->s[v->len]
			? true : fail(path, "str differs: want ", s);
	}
	if (!strcmp(k, "bytes"))
		return v->kind == MGT_PY_BYTES && hex_eq(v->s, v->len, json_string_value(jv)) && !v->s[v->len]
			? true : fail(path, "bytes differ", NULL);
	if (!strcmp(k, "tuple") || !strcmp(k, "list")) {
		if (v->kind != (!strcmp(k, "tuple") ? MGT_PY_TUPLE : MGT_PY_LIST))
			return fail(path, "not a ", k);
		return match_items(t, v->v, v->n, json_object_get(e, "items"), path, depth);
	}
	if (!strcmp(k, "dict"))
		return v->kind == MGT_PY_DICT ? match_pairs(t, v, json_object_get(e, "items"), path, depth) : fail(path, "not a dict", NULL);
	if (!strcmp(k, "global"))
		return v->kind == MGT_PY_GLOBAL && mgt_py_is(v, json_string_value(json_object_get(e, "module")),
							   json_string_value(json_object_get(e, "name")))
			? true : fail(path, "not the global ", json_string_value(json_object_get(e, "name")));
	if (!strcmp(k, "obj"))
		return match_obj(t, v, e, path, depth);
	if (!strcmp(k, "tensor"))
		return v->kind == MGT_PY_TENSOR ? match_tensor(t, v, e, path) : fail(path, "not a tensor", NULL);
	return fail(path, "unknown expectation ", k);
}

/* Every fixture of cases.json: the tree and the tensors' values. */
static void test_cases(void)
{
	json_error_t je;
	json_t *cases = json_load_file(path_in("cases.json"), 0, &je);
	CHECK(cases && json_array_size(cases) >= 9, "cases.json read (%s)", cases ? "" : je.text);
	for (size_t i = 0; cases && i < json_array_size(cases); i++) {
		json_t *c = json_array_get(cases, i);
		const char *file = json_string_value(json_object_get(c, "file"));
		bool torch = !strcmp(json_string_value(json_object_get(c, "kind")), "torch");
		memset(sid_storage, 0, sizeof sid_storage);
		why[0] = 0;
		n_values = n_tensors = n_elements = 0;
		mgt_torch *t = NULL;
		mgt_pickle *p = NULL;
		mgt_status st;
		const mgt_py *root = NULL;
		if (torch) {
			st = mgt_torch_open(path_in(file), (uint64_t)json_integer_value(json_object_get(c, "offset")),
					    (uint64_t)json_integer_value(json_object_get(c, "length")), &t);
			root = mgt_torch_root(t);
		} else {
			size_t n;
			unsigned char *b = slurp(path_in(file), &n);
			st = b ? mgt_pickle_load(b, n, file, &p) : MGT_ERR_IO;
			free(b); /* values are copies */
			root = mgt_pickle_root(p);
		}
		bool ok = st == MGT_OK && match(t, root, json_object_get(c, "expect"), "root", 0);
		CHECK(ok, "%s: every value as Python sees it (%d values, %d tensors, %d elements)%s%s", file, n_values,
		      n_tensors, n_elements, why[0] ? ": " : "", why);
		mgt_torch_close(t);
		mgt_pickle_free(p);
	}
	json_decref(cases);
}

/* The accessors over all.pt's Megatron-like tree. */
static void test_accessors(void)
{
	mgt_torch *t = NULL;
	mgt_status st = mgt_torch_open(path_in("all.pt"), 0, 0, &t);
	CHECK(st == MGT_OK && !strcmp(mgt_torch_name(t), path_in("all.pt")), "all.pt opens, named by its path");
	if (st != MGT_OK)
		return;
	const mgt_py *r = mgt_torch_root(t), *args = mgt_py_get(r, "args");
	int64_t i = 0;
	double f = 0;
	CHECK(mgt_py_is(args, "argparse", "Namespace") && mgt_py_is(args, NULL, "Namespace") &&
	      !mgt_py_is(args, "torch", "Namespace"), "args is an argparse.Namespace");
	CHECK(mgt_py_int(mgt_py_get(args, "num_layers"), &i) && i == 24 && mgt_py_float(mgt_py_get(args, "lr"), &f) &&
	      f == 3e-4 && mgt_py_float(mgt_py_get(args, "hidden_size"), &f) && f == 1024 &&
	      !strcmp(mgt_py_str(mgt_py_get(args, "name")), "gpt") && mgt_py_int(mgt_py_get(args, "bf16"), &i) && i == 1 &&
	      mgt_py_is(mgt_py_get(args, "params_dtype"), "torch", "bfloat16") && mgt_py_int(mgt_py_get(args, "seed"), &i) &&
	      i == 1ll << 40, "args' ints, floats, bools, strings and dtype");
	CHECK(!mgt_py_get(args, "absent") && !mgt_py_str(mgt_py_get(args, "num_layers")) &&
	      !mgt_py_int(mgt_py_get(args, "lr"), &i) && !mgt_py_get(mgt_py_get(args, "lr"), "x") &&
	      !mgt_py_int(mgt_py_get(mgt_py_get(r, "rng"), "big"), &i), "absent keys and wrong kinds give NULL / false");
	const mgt_py *model = mgt_py_get(r, "model"), *e = mgt_py_get(model, "embedding.weight"),
		     *o = mgt_py_get(model, "output.weight");
	CHECK(e && o && e->storage == o->storage && mgt_py_numel(e) == 20 && mgt_py_numel(mgt_py_get(model, "scalar")) == 1 &&
	      mgt_py_numel(mgt_py_get(model, "empty")) == 0 && mgt_py_numel(args) == 0, "tied weights share a storage; numel");
	/* a caller's view inside a tensor's storage (the distributed optimizer's rows of its buffer) */
	float whole[64], rows[64];
	mgt_py view = e ? *e : (mgt_py){0}, out = view;
	view.offset += e ? e->stride[0] : 0;
	view.size[0] -= 1;
	out.offset = e ? e->storage->numel : 0;
	CHECK(e && e->ndim == 2 && mgt_torch_read_f32(t, e, whole) == MGT_OK && mgt_torch_read_f32(t, &view, rows) == MGT_OK &&
	      !memcmp(rows, whole + e->size[1], (size_t)(mgt_py_numel(e) - e->size[1]) * sizeof(float)) &&
	      mgt_torch_read_f32(t, &out, rows) == MGT_ERR_FORMAT && strstr(mgt_err_msg(), "nor a view"),
	      "a view inside a tensor's storage reads its rows; one past the storage is refused (%s)", mgt_err_msg());
	mgt_torch *s = NULL;
	float buf[64];
	st = mgt_torch_open(path_in("small.pt"), 0, 0, &s);
	CHECK(st == MGT_OK && mgt_torch_read_f32(t, mgt_py_get(mgt_torch_root(s), "w"), buf) == MGT_ERR_FORMAT &&
	      strstr(mgt_err_msg(), "not a tensor of this file") && mgt_torch_read_raw(t, args, buf) == MGT_ERR_FORMAT,
	      "a tensor of another file, or not a tensor, is refused");
	mgt_torch_close(s);
	mgt_torch_close(t);
}

/* The same stream in memory (a BYTES value or a .distcp slice read into memory). */
static void test_memory(void)
{
	size_t n;
	unsigned char *b = slurp(path_in("embedded.distcp"), &n);
	mgt_torch *t = NULL;
	mgt_status st = b ? mgt_torch_open_mem(b + 1000, n - 1000 - 40 * 12, "item@1000", &t) : MGT_ERR_IO;
	float w[6] = {0};
	const mgt_py *x = mgt_py_get(mgt_torch_root(t), "w");
	CHECK(st == MGT_OK && !strcmp(mgt_torch_name(t), "item@1000") && mgt_torch_read_f32(t, x, w) == MGT_OK &&
	      w[0] == 1 && w[1] == 2 && w[2] == 3 && w[3] == 6 && w[4] == 7 && w[5] == 8,
	      "mgt_torch_open_mem over the embedded stream: w = [[1 2 3] [6 7 8]] (%s)", mgt_err_msg());
	mgt_torch_close(t);
	mgt_torch *u = NULL;
	st = mgt_torch_open(path_in("embedded.distcp"), 1000, 0, &u);
	CHECK(st == MGT_OK || st == MGT_ERR_FORMAT, "the slice to the file's end: opens or is refused (%s)", mgt_err_msg());
	mgt_torch_close(u);
	free(b);
}

static void expect_pickle(const char *what, const void *p, size_t n, const char *phrase)
{
	mgt_pickle *pk = (mgt_pickle *)1;
	mgt_status st = mgt_pickle_load(p, n, what, &pk);
	CHECK(st == MGT_ERR_FORMAT && !pk && strstr(mgt_err_msg(), what) && strstr(mgt_err_msg(), phrase),
	      "%s: MGT_ERR_FORMAT naming it and \"%s\" (%s)", what, phrase, mgt_err_msg());
}

static void test_bad_pickles(void)
{
	expect_pickle("unknown.pkl", "\x80\x02\xff.", 4, "unknown opcode 0xff");
	expect_pickle("memo-miss.pkl", "\x80\x02h\x05.", 5, "memo entry 5 not set");
	expect_pickle("memo-range.pkl", "\x80\x02Nr\xff\xff\xff\xff.", 9, "out of range");
	expect_pickle("underflow.pkl", "\x80\x02]a.", 5, "stack underflow");
	expect_pickle("underflow2.pkl", "\x80\x02(N\x86.", 6, "stack underflow");
	expect_pickle("nomark.pkl", "\x80\x02Nt.", 5, "no MARK");
	expect_pickle("stop0.pkl", "\x80\x02.", 3, "STOP with 0 values");
	expect_pickle("stop2.pkl", "\x80\x02NN.", 5, "STOP with 2 values");
	expect_pickle("nostop.pkl", "\x80\x02N", 3, "no STOP");
	expect_pickle("empty.pkl", "", 0, "no STOP");
	expect_pickle("strlen.pkl", "\x80\x02X\xff\x00\x00\x00ab.", 10, "beyond the input");
	expect_pickle("short-arg.pkl", "\x80\x02J\x01\x02", 5, "truncated");
	expect_pickle("buffer.pkl", "\x80\x05\x97.", 4, "out-of-band");
	expect_pickle("persid.pkl", "\x80\x02K\x01Q.", 6, "persistent id");
	expect_pickle("setitems-odd.pkl", "\x80\x02}(Nu.", 7, "odd");
	expect_pickle("append-tuple.pkl", "\x80\x02)Na.", 6, "not a list");
	expect_pickle("line.pkl", "\x80\x02" "cabc", 6, "no end of line");
	size_t n;
	unsigned char *b = slurp(path_in("p2.pkl"), &n);
	if (b) {
		expect_pickle("half.pkl", b, n / 2, "truncated");
		expect_pickle("one-short.pkl", b, n - 1, "no STOP");
	}
	free(b);
	/* a tensor of negative sizes and of too many dims */
	static const char neg[] = "\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
				  "ctorch\nFloatStorage\nX\x01\x00\x00\x00\x30X\x03\x00\x00\x00\x63puK\x04tQK\x00J\xff\xff\xff\xff\x85K\x01\x85\x89)tR.";
	expect_pickle("neg-size.pkl", neg, sizeof neg - 1, "non-negative");
	/* a key set again keeps its place and takes the new value; keys compare by kind and content */
	mgt_pickle *pk = NULL;
	static const char twice[] = "\x80\x02}(K\x01K\x02K\x03K\x04K\x01K\x05X\x01\x00\x00\x00" "aK\x06\x88K\x07"
				    "X\x01\x00\x00\x00" "aK\x08u.";
	mgt_status st = mgt_pickle_load(twice, sizeof twice - 1, "twice.pkl", &pk);
	const mgt_py *d = mgt_pickle_root(pk);
	CHECK(st == MGT_OK && d->kind == MGT_PY_DICT && d->n == 4 && d->v[0]->i == 1 && d->v[1]->i == 5 &&
	      d->v[2]->i == 3 && d->v[3]->i == 4 && d->v[4]->len == 1 && d->v[5]->i == 8 && d->v[6]->kind == MGT_PY_BOOL &&
	      d->v[7]->i == 7, "SETITEMS: {1: 2, 3: 4, 1: 5, 'a': 6, True: 7, 'a': 8} = {1: 5, 3: 4, 'a': 8, True: 7}");
	mgt_pickle_free(pk);
}

static void expect_torch(const char *file, uint64_t off, uint64_t len, mgt_status want, const char *phrase)
{
	mgt_torch *t = (mgt_torch *)1;
	mgt_status st = mgt_torch_open(path_in(file), off, len, &t);
	CHECK(st == want && !t && strstr(mgt_err_msg(), file) && strstr(mgt_err_msg(), phrase),
	      "%s: refused naming it and \"%s\" (%s)", file, phrase, mgt_err_msg());
}

static void test_bad_torch(void)
{
	expect_torch("bad_big.pt", 0, 0, MGT_ERR_FORMAT, "big");
	expect_torch("bad_short.pt", 0, 0, MGT_ERR_FORMAT, "holds 10 bytes");
	expect_torch("bad_nokey.pt", 0, 0, MGT_ERR_FORMAT, "no record arch/data/1");
	expect_torch("bad_nopkl.pt", 0, 0, MGT_ERR_FORMAT, "data.pkl");
	expect_torch("bad_outside.pt", 0, 0, MGT_ERR_FORMAT, "beyond");
	expect_torch("p2.pkl", 0, 0, MGT_ERR_FORMAT, "not a torch.save zip");
	expect_torch("absent.pt", 0, 0, MGT_ERR_IO, "No such file");
	expect_torch("small.pt", 100000, 0, MGT_ERR_FORMAT, "passes the file's end");
	size_t n;
	unsigned char *b = slurp(path_in("all.pt"), &n);
	if (!b)
		return;
	write_bytes(path_in("trunc.pt"), b, n * 6 / 10);
	expect_torch("trunc.pt", 0, 0, MGT_ERR_FORMAT, "not a readable zip");
	/* one byte of data.pkl changed: the CRC or the pickle refuses it */
	unsigned char *pk = memmem(b, n, "\x80\x02", 2);
	if (pk) {
		pk[1] = 9;
		write_bytes(path_in("crc.pt"), b, n);
		expect_torch("crc.pt", 0, 0, MGT_ERR_FORMAT, "data.pkl");
	}
	free(b);
}

int main(void)
{
	snprintf(dir, sizeof dir, "%s/mgt-test-pickle.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		printf("not ok - cannot make a scratch directory\n");
		return 1;
	}
	test_bad_pickles();
	int rc = -1;
	if (access("/usr/bin/python3", X_OK) == 0) {
		char cmd[600];
		snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/unit/pickle_ref.py '%s'", dir);
		rc = system(cmd);
		rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
	}
	if (rc == 77 || (rc == -1 && access("/usr/bin/python3", X_OK) != 0)) {
		printf("# skip: the fixtures need /usr/bin/python3 with python3-torch and numpy (tests/unit/pickle_ref.py)\n");
	} else {
		CHECK(rc == 0, "tests/unit/pickle_ref.py wrote the fixtures (status %d)", rc);
		test_cases();
		test_accessors();
		test_memory();
		test_bad_torch();
	}
	return check_finish();
}
