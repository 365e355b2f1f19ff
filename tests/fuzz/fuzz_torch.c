/* Fuzz target: the pickle reader (lib/ckpt/pickle.c) and the torch.save reader (torchfile.c).
 *
 * An input starting with "PK" is opened with mgt_torch_open_mem, anything else is unpickled
 * with mgt_pickle_load.  Every accepted tree is walked (depth at most 48, at most 200,000 visits:
 * values may be shared or cyclic) through the accessors, and every tensor of a torch file is read:
 * as float32 when of a float dtype, raw otherwise (MGT_ERR_FORMAT for a dtype mgt_dt lacks); a
 * BYTES value that starts with "PK" is opened as a nested torch.save once.  A refusal must be
 * MGT_ERR_FORMAT naming the input; never a crash, leak or sanitizer report. */
#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void need(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_torch: invariant failed: %s (%s)\n", what, mgt_err_msg());
		abort();
	}
}

typedef struct {
	mgt_torch *t;
	long visits;
	int nested;
} walker;

static void open_torch(const uint8_t *data, size_t size, int nested);

static void read_tensor(walker *w, const mgt_py *x)
{
	int64_t numel = mgt_py_numel(x);
	need(numel >= 0, "numel >= 0");
	for (int d = 0; d < x->ndim; d++)
		need(x->size[d] >= 0 && x->stride[d] >= 0, "sizes and strides >= 0");
	need(x->ndim >= 0 && x->ndim <= MGT_PY_MAX_DIM && x->offset >= 0 && x->storage &&
	     x->storage->kind == MGT_PY_STORAGE, "tensor fields");
	if (!w->t || numel > (1 << 20))
		return;
	size_t es = x->dtype_ok ? mgt_dt_size(x->dtype) : 1;
	void *b = malloc((size_t)numel * (es > 4 ? es : 4) + 1);
	bool fl = x->dtype_ok && (x->dtype == MGT_ST_F32 || x->dtype == MGT_ST_F16 || x->dtype == MGT_ST_BF16 ||
				  x->dtype == MGT_ST_F64);
	mgt_status st = fl ? mgt_torch_read_f32(w->t, x, b) : mgt_torch_read_raw(w->t, x, b);
	need(x->dtype_ok ? st == MGT_OK : st == MGT_ERR_FORMAT, "reads of a checked tensor succeed");
	if (x->dtype_ok && !fl) {
		st = mgt_torch_read_f32(w->t, x, b);
		need(st == MGT_OK || st == MGT_ERR_FORMAT, "read_f32 of an integer tensor");
	}
	free(b);
}

static void walk(walker *w, const mgt_py *v, int depth)
{
	if (!v || depth > 48 || ++w->visits > 200000)
		return;
	int64_t i;
	double f;
	need(mgt_py_int(v, &i) == ((v->kind == MGT_PY_INT || v->kind == MGT_PY_BOOL) && !v->big), "mgt_py_int");
	need(mgt_py_float(v, &f) == (v->kind == MGT_PY_FLOAT || (v->kind == MGT_PY_INT && !v->big)), "mgt_py_float");
	need((mgt_py_str(v) != NULL) == (v->kind == MGT_PY_STR), "mgt_py_str");
	switch (v->kind) {
	case MGT_PY_STR:
	case MGT_PY_BYTES:
		need(v->s && v->s[v->len] == 0, "strings NUL-terminated");
		if (v->kind == MGT_PY_BYTES && v->len >= 2 && v->s[0] == 'P' && v->s[1] == 'K' && !w->nested)
			open_torch((const uint8_t *)v->s, v->len, 1);
		break;
	case MGT_PY_INT:
		need(!v->big || (v->s && v->len > 8), "big ints need more than 8 bytes");
		break;
	case MGT_PY_GLOBAL:
		need(v->s && v->name && mgt_py_is(v, v->s, v->name), "globals");
		break;
	case MGT_PY_TUPLE:
	case MGT_PY_LIST:
		for (size_t k = 0; k < v->n; k++)
			walk(w, v->v[k], depth + 1);
		break;
	case MGT_PY_DICT:
		for (size_t k = 0; k < v->n; k++) {
			walk(w, v->v[2 * k], depth + 1);
			walk(w, v->v[2 * k + 1], depth + 1);
			const char *key = mgt_py_str(v->v[2 * k]);
			need(!key || strlen(key) != v->v[2 * k]->len || mgt_py_get(v, key), "mgt_py_get finds a str key");
		}
		walk(w, v->state, depth + 1);
		break;
	case MGT_PY_OBJ:
		need(v->cls != NULL, "objects have a class");
		walk(w, v->cls, depth + 1);
		walk(w, v->args, depth + 1);
		walk(w, v->state, depth + 1);
		for (size_t k = 0; k < (v->kv ? 2 * v->n : v->n); k++)
			walk(w, v->v[k], depth + 1);
		mgt_py_get(v, "x");
		break;
	case MGT_PY_STORAGE:
		need(v->numel >= 0 && v->s && v->dtype_name, "storage fields");
		break;
	case MGT_PY_TENSOR:
		read_tensor(w, v);
		walk(w, v->storage, depth + 1);
		break;
	default:
		walk(w, v->state, depth + 1);
		break;
	}
}

static void open_torch(const uint8_t *data, size_t size, int nested)
{
	mgt_torch *t = NULL;
	mgt_status st = mgt_torch_open_mem(data, size, "fuzz-input", &t);
	need(st == MGT_OK || st == MGT_ERR_FORMAT, "only FORMAT errors");
	need((st == MGT_OK) == (t != NULL), "handle iff success");
	need(st == MGT_OK || strstr(mgt_err_msg(), "fuzz-input") != NULL, "message names the input");
	if (!t)
		return;
	need(!strcmp(mgt_torch_name(t), "fuzz-input"), "name");
	walker w = {t, 0, nested};
	walk(&w, mgt_torch_root(t), 0);
	mgt_torch_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
		open_torch(data, size, 0);
		return 0;
	}
	mgt_pickle *p = NULL;
	mgt_status st = mgt_pickle_load(data, size, "fuzz-input", &p);
	need(st == MGT_OK || st == MGT_ERR_FORMAT, "only FORMAT errors");
	need((st == MGT_OK) == (p != NULL), "handle iff success");
	need(st == MGT_OK || strstr(mgt_err_msg(), "fuzz-input") != NULL, "message names the input");
	if (p) {
		walker w = {NULL, 0, 0};
		walk(&w, mgt_pickle_root(p), 0);
		mgt_pickle_free(p);
	}
	return 0;
}
