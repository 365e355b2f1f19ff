/* lib/tok/jinja_eval.c: the chat-template evaluator and the public API (tok.h).  Jinja2 3.1
 * semantics (compiler.py, runtime.py) for the statements jinja_parse.c accepts: a for loop has one
 * scope for all its iterations (a set inside it does not leak out; namespace() does), if does not
 * scope, a macro's scope sees the template's top level; `loop` has index, index0, revindex,
 * revindex0, first, last, length, previtem, nextitem; break/continue (loopcontrols).  Operators
 * follow Python (int/float, str and list +, str * int, //, % on numbers, ** , ~ joins str()). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

struct jscope {
	jscope *parent;
	char **names;
	jv *vals;
	size_t n, cap;
};

jscope *jscope_new(jscope *p)
{
	jscope *s = calloc(1, sizeof *s);
	if (!s)
		mgt_err(MGT_ERR_NOMEM, "out of memory");
	else
		s->parent = p;
	return s;
}

void jscope_free(jscope *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->names[i]);
		jv_free(&s->vals[i]);
	}
	free(s->names), free(s->vals), free(s);
}

mgt_status jscope_set(jscope *s, const char *name, const jv *v)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->names[i], name)) {
			jv c = jv_copy(v);
			jv_free(&s->vals[i]);
			s->vals[i] = c;
			return MGT_OK;
		}
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 8;
		char **nn = realloc(s->names, cap * sizeof *nn);
		if (nn)
			s->names = nn;
		jv *vv = nn ? realloc(s->vals, cap * sizeof *vv) : NULL;
		if (!vv)
			return mgt_err(MGT_ERR_NOMEM, "out of memory");
		s->vals = vv, s->cap = cap;
	}
	if (!(s->names[s->n] = strdup(name)))
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	s->vals[s->n++] = jv_copy(v);
	return MGT_OK;
}

static const jv *jscope_get(const jscope *s, const char *name)
{
	for (; s; s = s->parent)
		for (size_t i = 0; i < s->n; i++)
			if (!strcmp(s->names[i], name))
				return &s->vals[i];
	return NULL;
}

mgt_status jerr(jctx *c, const jnode *n, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return mgt_err(MGT_ERR_INPUT, "%s:%d: %s", c->t->name, n ? n->line : 0, msg);
}

static mgt_status undef_err(jctx *c, const jnode *n, const jv *u)
{
	char m[256];
	jv_undef_msg(u, m, sizeof m);
	return jerr(c, n, "UndefinedError: %s", m);
}

static const char *const GLOBALS[] = { "range", "namespace", "dict", "raise_exception", "strftime_now", NULL };

static mgt_status eval_name(jctx *c, jscope *s, const jnode *n, jv *out)
{
	const jv *v = jscope_get(s, n->s);
	if (v) {
		*out = jv_copy(v);
		return MGT_OK;
	}
	for (int i = 0; GLOBALS[i]; i++)
		if (!strcmp(GLOBALS[i], n->s)) {
			memset(out, 0, sizeof *out);
			out->k = JV_FUNC, out->f_name = GLOBALS[i];
			return MGT_OK;
		}
	if (!strcmp(n->s, "lipsum") || !strcmp(n->s, "cycler") || !strcmp(n->s, "joiner"))
		return jerr(c, n, "global '%s' is not supported by this engine", n->s);
	*out = jv_undef(n->s, NULL, 0);
	return MGT_OK;
}

/* ---- arithmetic ------------------------------------------------------------------------------ */

static mgt_status type_err(jctx *c, const jnode *n, const char *op, const jv *a, const jv *b)
{
	return jerr(c, n, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op,
		    a->k == JV_JSON ? json_py_type(a->j) : "object", b->k == JV_JSON ? json_py_type(b->j) : "object");
}

static mgt_status repeat(jctx *c, const jnode *n, const json_t *seq, long long k, jv *out)
{
	(void)c, (void)n;
	if (json_is_string(seq)) {
		mgt_buf b = { 0 };
		for (long long i = 0; i < k; i++)
			if (mgt_buf_add(&b, json_string_value(seq), json_string_length(seq))) { free(b.p); return MGT_ERR_NOMEM; }
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
		free(b.p);
		return MGT_OK;
	}
	json_t *r = json_array();
	for (long long i = 0; i < k; i++)
		json_array_extend(r, (json_t *)seq);
	*out = jv_json(jinja_kind(seq) == SEQ_TUPLE ? jinja_mark(r, SEQ_TUPLE) : r);
	return MGT_OK;
}

static mgt_status arith(jctx *c, const jnode *n, int op, const jv *a, const jv *b, jv *out)
{
	static const char *const OPN[] = { "+", "-", "*", "/", "//", "%", "**" };
	if (a->k == JV_UNDEF)
		return undef_err(c, n, a);
	if (b->k == JV_UNDEF)
		return undef_err(c, n, b);
	if (a->k != JV_JSON || b->k != JV_JSON)
		return type_err(c, n, OPN[op], a, b);
	const json_t *x = a->j, *y = b->j;
	double dx, dy;
	long long ix, iy;
	int nx, ny;
	if (op == OP_ADD && json_is_string(x) && json_is_string(y)) {
		size_t lx = json_string_length(x), ly = json_string_length(y);
		char *s = malloc(lx + ly + 1);
		if (!s)
			return MGT_ERR_NOMEM;
		memcpy(s, json_string_value(x), lx), memcpy(s + lx, json_string_value(y), ly);
		*out = jv_json(json_stringn_nocheck(s, lx + ly));
		free(s);
		return MGT_OK;
	}
	if ((op == OP_ADD || op == OP_MUL) && ((json_is_array(x) && jinja_kind(x) >= SEQ_GEN) || (json_is_array(y) && jinja_kind(y) >= SEQ_GEN)))
		return jerr(c, n, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", OPN[op],
			    json_is_array(x) ? jinja_kind_name(jinja_kind(x)) : json_py_type(x), json_is_array(y) ? jinja_kind_name(jinja_kind(y)) : json_py_type(y));
	if (op == OP_ADD && json_is_array(x) && json_is_array(y)) {
		if (jinja_kind(x) != jinja_kind(y))
			return jerr(c, n, "TypeError: can only concatenate %s (not \"%s\") to %s", jinja_kind_name(jinja_kind(x)),
				    jinja_kind_name(jinja_kind(y)), jinja_kind_name(jinja_kind(x)));
		json_t *r = json_array();
		json_array_extend(r, (json_t *)x), json_array_extend(r, (json_t *)y);
		*out = jv_json(jinja_kind(x) == SEQ_TUPLE ? jinja_mark(r, SEQ_TUPLE) : r);
		return MGT_OK;
	}
	if (op == OP_MUL && (json_is_string(x) || json_is_array(x)) && json_py_num(y, &dy, &iy, &ny) && ny)
		return repeat(c, n, x, iy, out);
	if (op == OP_MUL && (json_is_string(y) || json_is_array(y)) && json_py_num(x, &dx, &ix, &nx) && nx)
		return repeat(c, n, y, ix, out);
	if (op == OP_MOD && json_is_string(x))
		return jerr(c, n, "string %% formatting is not supported by this engine");
	if (!json_py_num(x, &dx, &ix, &nx) || !json_py_num(y, &dy, &iy, &ny))
		return type_err(c, n, OPN[op], a, b);
	int ints = nx && ny;
	if ((op == OP_DIV || op == OP_FDIV || op == OP_MOD) && dy == 0)
		return jerr(c, n, "ZeroDivisionError: division by zero");
	json_t *r = NULL;
	long long v = 0;
	int ovf = 0;
	switch (op) {
	case OP_ADD: if (ints) ovf = __builtin_add_overflow(ix, iy, &v); else r = json_real(dx + dy); break;
	case OP_SUB: if (ints) ovf = __builtin_sub_overflow(ix, iy, &v); else r = json_real(dx - dy); break;
	case OP_MUL: if (ints) ovf = __builtin_mul_overflow(ix, iy, &v); else r = json_real(dx * dy); break;
	case OP_DIV: r = json_real(dx / dy); break;
	case OP_FDIV:
		if (ints) {
			if (ix == LLONG_MIN && iy == -1)
				ovf = 1;
			else if ((v = ix / iy), (ix % iy) && ((ix < 0) != (iy < 0)))
				v--;
		} else {
			r = json_real(floor(dx / dy));
		}
		break;
	case OP_MOD:
		if (ints) {
			v = iy == -1 ? 0 : ix % iy;
			if (v && ((v < 0) != (iy < 0)))
				v += iy;
		} else {
			double m = fmod(dx, dy);
			if (m != 0 && ((m < 0) != (dy < 0)))
				m += dy;
			r = json_real(m);
		}
		break;
	case OP_POW:
		if (ints && iy >= 0 && (ix == 0 || ix == 1 || ix == -1)) {
			v = iy == 0 ? 1 : ix == -1 ? (iy % 2 ? -1 : 1) : ix;
		} else if (ints && iy >= 0) {
			v = 1;
			for (long long i = 0; i < iy && !ovf; i++)
				ovf = __builtin_mul_overflow(v, ix, &v);
		} else {
			r = json_real(pow(dx, dy));
		}
		break;
	}
	if (ovf)
		return jerr(c, n, "integer overflow: Python's big integers are not supported by this engine");
	if (ints && !r && op != OP_DIV)
		r = json_integer(v);
	*out = jv_json(r);
	return r ? MGT_OK : MGT_ERR_NOMEM;
}

static mgt_status concat(const jv *a, const jv *b, jv *out)
{
	mgt_buf buf = { 0 };
	mgt_status st = jv_str(a, &buf);
	if (!st)
		st = jv_str(b, &buf);
	if (!st)
		*out = jv_json(json_stringn_nocheck(buf.p ? buf.p : "", buf.n));
	free(buf.p);
	return st;
}

/* `a in b` */
static mgt_status contains(jctx *c, const jnode *n, const jv *a, const jv *b, int *res)
{
	*res = 0;
	if (b->k == JV_UNDEF)
		return MGT_OK;
	if (b->k != JV_JSON)
		return jerr(c, n, "TypeError: argument of type 'object' is not iterable");
	const json_t *h = b->j;
	if (json_is_string(h)) {
		if (a->k != JV_JSON || !json_is_string(a->j))
			return jerr(c, n, "TypeError: 'in <string>' requires string as left operand");
		size_t ln = json_string_length(a->j), lh = json_string_length(h);
		const char *s = json_string_value(h), *k = json_string_value(a->j);
		for (size_t i = 0; i + ln <= lh && !*res; i++)
			*res = !memcmp(s + i, k, ln);
		return MGT_OK;
	}
	if (json_is_array(h)) {
		if (jinja_kind(h) == SEQ_GEN_DONE)
			return jerr(c, n, "iterating a consumed generator again is not supported by this engine");
		if (jinja_kind(h) == SEQ_GEN)
			jinja_mark((json_t *)h, SEQ_GEN_DONE);
		for (size_t i = 0; i < json_array_size(h) && !*res; i++) {
			jv e = jv_json(json_array_get(h, i));
			*res = jv_eq(a, &e);
		}
		return MGT_OK;
	}
	if (json_is_object(h)) {
		if (a->k == JV_JSON && (json_is_object(a->j) || (json_is_array(a->j) && jinja_kind(a->j) != SEQ_TUPLE)))
			return jerr(c, n, "TypeError: unhashable type: '%s'", json_is_object(a->j) ? "dict" : jinja_kind_name(jinja_kind(a->j)));
		if (a->k == JV_JSON && json_is_string(a->j))
			*res = json_object_get(h, json_string_value(a->j)) != NULL;
		return MGT_OK;
	}
	return jerr(c, n, "TypeError: argument of type '%s' is not iterable", json_py_type(h));
}

static mgt_status compare(jctx *c, const jnode *n, int op, const jv *a, const jv *b, int *res)
{
	static const char *const OPN[] = { "<", "<=", ">", ">=" };
	if (op == OP_EQ || op == OP_NE) {
		*res = jv_eq(a, b) == (op == OP_EQ);
		return MGT_OK;
	}
	if (op == OP_IN || op == OP_NOTIN) {
		mgt_status st = contains(c, n, a, b, res);
		if (op == OP_NOTIN)
			*res = !*res;
		return st;
	}
	if (a->k == JV_UNDEF)
		return undef_err(c, n, a);
	if (b->k == JV_UNDEF)
		return undef_err(c, n, b);
	int lt, gt;
	if (a->k != JV_JSON || b->k != JV_JSON || json_py_lt(a->j, b->j, &lt) || json_py_lt(b->j, a->j, &gt))
		return jerr(c, n, "TypeError: '%s' not supported between instances of '%s' and '%s'", OPN[op - OP_LT],
			    a->k != JV_JSON ? "object" : json_is_array(a->j) ? jinja_kind_name(jinja_kind(a->j)) : json_py_type(a->j),
			    b->k != JV_JSON ? "object" : json_is_array(b->j) ? jinja_kind_name(jinja_kind(b->j)) : json_py_type(b->j));
	switch (op) {
	case OP_LT: *res = lt; break;
	case OP_LE: *res = !gt; break;
	case OP_GT: *res = gt; break;
	default: *res = !lt; break;
	}
	return MGT_OK;
}

static mgt_status eval_cmp(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv a, b;
	mgt_status st = jinja_eval(c, s, n->v[0], &a);
	int res = 1;
	for (size_t i = 1; !st && i < n->nv && res; i++) {
		if ((st = jinja_eval(c, s, n->v[i], &b)))
			break;
		st = compare(c, n, n->ops[i - 1], &a, &b, &res);
		jv_free(&a);
		a = b;
	}
	jv_free(&a);
	if (!st)
		*out = jv_json(json_boolean(res));
	return st;
}

/* ---- slices --------------------------------------------------------------------------------- */

/* byte offsets of the code points of a UTF-8 string (n + 1 entries) */
static size_t *cp_offsets(const char *s, size_t len, size_t *n)
{
	size_t *o = malloc((len + 1) * sizeof *o), k = 0;
	if (!o)
		return NULL;
	for (size_t i = 0; i < len; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			o[k++] = i;
	o[k] = len, *n = k;
	return o;
}

static mgt_status slice_bound(jctx *c, jscope *s, const jnode *e, long long def, long long *v, int *given)
{
	*given = 0, *v = def;
	if (!e)
		return MGT_OK;
	jv x;
	mgt_status st = jinja_eval(c, s, e, &x);
	if (st)
		return st;
	double d;
	int isint = 0;
	if (x.k == JV_JSON && json_is_null(x.j)) {
		jv_free(&x);
		return MGT_OK;
	}
	if (x.k != JV_JSON || !json_py_num(x.j, &d, v, &isint) || !isint) {
		jv_free(&x);
		return jerr(c, e, "TypeError: slice indices must be integers or None");
	}
	jv_free(&x);
	*given = 1;
	return MGT_OK;
}

static mgt_status eval_slice(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv obj;
	mgt_status st = jinja_eval(c, s, n->a, &obj);
	if (st)
		return st;
	long long a, b, step;
	int ga, gb, gs;
	if ((st = slice_bound(c, s, n->d, 1, &step, &gs)) || (st = slice_bound(c, s, n->b, 0, &a, &ga)) ||
	    (st = slice_bound(c, s, n->c, 0, &b, &gb))) {
		jv_free(&obj);
		return st;
	}
	if (obj.k == JV_UNDEF) {
		st = undef_err(c, n, &obj);
		jv_free(&obj);
		return st;
	}
	if (obj.k != JV_JSON || !(json_is_string(obj.j) || json_is_array(obj.j))) {
		jv_free(&obj);
		return jerr(c, n, "slicing is supported on strings and lists only");
	}
	if (step == 0) {
		jv_free(&obj);
		return jerr(c, n, "ValueError: slice step cannot be zero");
	}
	int kind = jinja_kind(obj.j);
	if (kind >= SEQ_GEN && kind != SEQ_RANGE) {
		jv_free(&obj);
		return jerr(c, n, "TypeError: '%s' object is not subscriptable", jinja_kind_name(kind));
	}
	size_t len, *off = NULL;
	if (json_is_string(obj.j)) {
		if (!(off = cp_offsets(json_string_value(obj.j), json_string_length(obj.j), &len))) {
			jv_free(&obj);
			return MGT_ERR_NOMEM;
		}
	} else {
		len = json_array_size(obj.j);
	}
	long long L = (long long)len;
	/* Python's PySlice_AdjustIndices */
	if (!ga) a = step > 0 ? 0 : L - 1;
	else if (a < 0) a = a + L < 0 ? (step > 0 ? 0 : -1) : a + L;
	else if (a >= L) a = step > 0 ? L : L - 1;
	if (!gb) b = step > 0 ? L : -1;
	else if (b < 0) b = b + L < 0 ? (step > 0 ? 0 : -1) : b + L;
	else if (b >= L) b = step > 0 ? L : L - 1;
	json_t *r = off ? NULL : json_array();
	mgt_buf buf = { 0 };
	for (long long i = a; step > 0 ? i < b : i > b; i += step) {
		if (off)
			st = mgt_buf_add(&buf, json_string_value(obj.j) + off[i], off[i + 1] - off[i]);
		else
			json_array_append(r, json_array_get(obj.j, (size_t)i));
		if (st)
			break;
	}
	if (off)
		r = json_stringn_nocheck(buf.p ? buf.p : "", buf.n);
	else if (kind != SEQ_LIST)
		jinja_mark(r, kind); /* a tuple's slice is a tuple, a range's a range */
	free(buf.p), free(off);
	jv_free(&obj);
	*out = jv_json(r);
	return st;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static mgt_status eval_seq(jctx *c, jscope *s, const jnode *n, jv *out)
{
	json_t *r = n->kind == N_DICT ? json_object() : json_array();
	if (!r)
		return MGT_ERR_NOMEM;
	for (size_t i = 0; i < n->nv; i++) {
		jv k, v;
		mgt_status st = jinja_eval(c, s, n->v[i], &k);
		if (st) {
			json_decref(r);
			return st;
		}
		if (n->kind != N_DICT) {
			if (k.k != JV_JSON) {
				jv_free(&k), json_decref(r);
				return jerr(c, n->v[i], "a list holding an undefined value, namespace or macro is not supported by this engine");
			}
			json_array_append(r, k.j);
			jv_free(&k);
			continue;
		}
		if (k.k != JV_JSON || !json_is_string(k.j)) {
			jv_free(&k), json_decref(r);
			return jerr(c, n->v[i], "dict keys other than strings are not supported by this engine");
		}
		if ((st = jinja_eval(c, s, n->w[i], &v))) {
			jv_free(&k), json_decref(r);
			return st;
		}
		if (v.k != JV_JSON) {
			jv_free(&k), jv_free(&v), json_decref(r);
			return jerr(c, n->w[i], "a dict holding an undefined value, namespace or macro is not supported by this engine");
		}
		json_object_set(r, json_string_value(k.j), v.j);
		jv_free(&k), jv_free(&v);
	}
	if (n->kind == N_TUPLE)
		jinja_mark(r, SEQ_TUPLE);
	*out = jv_json(r);
	return MGT_OK;
}

static mgt_status eval_call(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv fn, *args = NULL, *kw = NULL;
	mgt_status st = jinja_eval(c, s, n->a, &fn);
	if (st)
		return st;
	args = calloc(n->nv + 1, sizeof *args), kw = calloc(n->nw + 1, sizeof *kw);
	if (!args || !kw)
		st = MGT_ERR_NOMEM;
	size_t na = 0, nk = 0;
	for (; !st && na < n->nv; na++)
		st = jinja_eval(c, s, n->v[na], &args[na]);
	for (; !st && nk < n->nw; nk++)
		st = jinja_eval(c, s, n->w[nk], &kw[nk]);
	if (!st) {
		if (fn.k == JV_MACRO)
			st = jinja_call_macro(c, n, &fn, args, na, n->names, kw, nk, out);
		else if (fn.k == JV_FUNC)
			st = jinja_call_func(c, n, &fn, args, na, n->names, kw, nk, out);
		else if (fn.k == JV_UNDEF)
			st = undef_err(c, n, &fn);
		else
			st = jerr(c, n, "TypeError: '%s' object is not callable", fn.k == JV_JSON ? json_py_type(fn.j) : "namespace");
	}
	for (size_t i = 0; args && i < n->nv; i++)
		jv_free(&args[i]);
	for (size_t i = 0; kw && i < n->nw; i++)
		jv_free(&kw[i]);
	free(args), free(kw);
	jv_free(&fn);
	return st;
}

static mgt_status eval_unary(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv a;
	mgt_status st = jinja_eval(c, s, n->a, &a);
	if (st)
		return st;
	if (n->kind == N_NOT) {
		*out = jv_json(json_boolean(!jv_truthy(&a)));
	} else {
		jv zero = jv_json(json_integer(0));
		st = n->kind == N_NEG ? arith(c, n, OP_SUB, &zero, &a, out) : arith(c, n, OP_ADD, &zero, &a, out);
		jv_free(&zero);
	}
	jv_free(&a);
	return st;
}

static mgt_status eval_bin(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv a, b;
	mgt_status st = jinja_eval(c, s, n->a, &a);
	if (st)
		return st;
	if ((st = jinja_eval(c, s, n->b, &b))) {
		jv_free(&a);
		return st;
	}
	st = n->op == OP_CAT ? concat(&a, &b, out) : arith(c, n, n->op, &a, &b, out);
	jv_free(&a), jv_free(&b);
	return st;
}

static mgt_status eval_two(jctx *c, jscope *s, const jnode *n, jv *out)
{
	jv a, b;
	mgt_status st;
	if ((st = jinja_eval(c, s, n->a, &a)))
		return st;
	if (n->kind == N_ATTR && n->a->kind == N_NAME && !strcmp(n->a->s, "loop") &&
	    (!strcmp(n->s, "cycle") || !strcmp(n->s, "changed"))) {
		st = jerr(c, n, "loop.%s is not supported by this engine", n->s);
	} else if (n->kind == N_ATTR) {
		st = a.k == JV_UNDEF ? undef_err(c, n, &a) : jinja_getattr(c, n, &a, n->s, out);
	} else if ((st = jinja_eval(c, s, n->b, &b)) == MGT_OK) {
		st = a.k == JV_UNDEF ? undef_err(c, n, &a) : jinja_getitem(c, n, &a, &b, out);
		jv_free(&b);
	}
	jv_free(&a);
	return st;
}

mgt_status jinja_eval(jctx *c, jscope *s, const jnode *n, jv *out)
{
	memset(out, 0, sizeof *out);
	mgt_status st;
	jv a;
	switch (n->kind) {
	case N_LIT:
		*out = jv_json(json_incref(n->lit));
		return MGT_OK;
	case N_NAME: return eval_name(c, s, n, out);
	case N_ATTR: case N_ITEM: return eval_two(c, s, n, out);
	case N_SLICE: return eval_slice(c, s, n, out);
	case N_CALL: return eval_call(c, s, n, out);
	case N_FILTER:
		if ((st = jinja_eval(c, s, n->a, &a)))
			return st;
		st = jinja_filter(c, s, n, &a, out);
		jv_free(&a);
		return st;
	case N_TEST: {
		int res = 0;
		if ((st = jinja_eval(c, s, n->a, &a)))
			return st;
		st = jinja_test(c, s, n, &a, &res);
		jv_free(&a);
		if (!st)
			*out = jv_json(json_boolean(res != n->neg));
		return st;
	}
	case N_BIN: return eval_bin(c, s, n, out);
	case N_NOT: case N_NEG: case N_POS: return eval_unary(c, s, n, out);
	case N_AND: case N_OR:
		if ((st = jinja_eval(c, s, n->a, &a)))
			return st;
		if (jv_truthy(&a) == (n->kind == N_OR)) {
			*out = a;
			return MGT_OK;
		}
		jv_free(&a);
		return jinja_eval(c, s, n->b, out);
	case N_COND:
		if ((st = jinja_eval(c, s, n->b, &a)))
			return st;
		int t = jv_truthy(&a);
		jv_free(&a);
		if (t)
			return jinja_eval(c, s, n->a, out);
		if (n->c)
			return jinja_eval(c, s, n->c, out);
		*out = jv_undef("", NULL, 0);
		return MGT_OK;
	case N_LIST: case N_TUPLE: case N_DICT: return eval_seq(c, s, n, out);
	case N_CMP: return eval_cmp(c, s, n, out);
	default:
		return jerr(c, n, "internal error: not an expression");
	}
}
