/* lib/tok/jinja_exec.c: chat-template statements (output, if, for, set, macro, break/continue),
 * macro calls, the globals (range, namespace, dict, and transformers' raise_exception and
 * strftime_now) and the public API of tok.h. */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_impl.h"

static mgt_status items_of(jctx *c, const jnode *n, const jv *v, json_t **out)
{
	*out = NULL;
	if (v->k == JV_UNDEF) {
		*out = json_array();
		return MGT_OK;
	}
	if (v->k != JV_JSON)
		return jerr(c, n, "TypeError: object is not iterable");
	const json_t *j = v->j;
	if (json_is_array(j)) {
		/* a generator runs once: after that Python's iterates nothing; refused here */
		if (jinja_kind(j) == SEQ_GEN_DONE)
			return jerr(c, n, "iterating a consumed generator (map, select, ...) again is not supported by this engine");
		if (jinja_kind(j) == SEQ_GEN)
			jinja_mark((json_t *)j, SEQ_GEN_DONE);
		*out = json_incref((json_t *)j);
	} else if (json_is_object(j)) {
		*out = json_array();
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)j, k, x)
			json_array_append_new(*out, json_string(k));
	} else if (json_is_string(j)) {
		*out = json_array();
		const char *s = json_string_value(j);
		size_t len = json_string_length(j);
		for (size_t i = 0; i < len;) {
			size_t k = i + 1;
			while (k < len && ((unsigned char)s[k] & 0xC0) == 0x80)
				k++;
			json_array_append_new(*out, json_stringn_nocheck(s + i, k - i));
			i = k;
		}
	} else {
		return jerr(c, n, "TypeError: '%s' object is not iterable", json_py_type(j));
	}
	return MGT_OK;
}

mgt_status jinja_iter_items(jctx *c, const jnode *n, const jv *v, json_t **out)
{
	return items_of(c, n, v, out);
}

static mgt_status bind_targets(jctx *c, jscope *s, const jnode *n, const jv *v)
{
	if (n->nnames == 1)
		return jscope_set(s, n->names[0], v);
	if (v->k != JV_JSON || !json_is_array(v->j))
		return jerr(c, n, "cannot unpack a non-sequence into %zu names", n->nnames);
	if (json_array_size(v->j) != n->nnames)
		return jerr(c, n, "ValueError: cannot unpack %zu values into %zu names", json_array_size(v->j), n->nnames);
	for (size_t i = 0; i < n->nnames; i++) {
		jv e = jv_json(json_array_get(v->j, i));
		mgt_status st = jscope_set(s, n->names[i], &e);
		if (st)
			return st;
	}
	return MGT_OK;
}

static json_t *loop_obj(const json_t *items, size_t i)
{
	size_t n = json_array_size(items);
	json_t *l = json_object();
	json_object_set_new(l, "index", json_integer((json_int_t)i + 1));
	json_object_set_new(l, "index0", json_integer((json_int_t)i));
	json_object_set_new(l, "revindex", json_integer((json_int_t)(n - i)));
	json_object_set_new(l, "revindex0", json_integer((json_int_t)(n - i - 1)));
	json_object_set_new(l, "first", json_boolean(i == 0));
	json_object_set_new(l, "last", json_boolean(i + 1 == n));
	json_object_set_new(l, "length", json_integer((json_int_t)n));
	json_object_set_new(l, "depth", json_integer(1));
	json_object_set_new(l, "depth0", json_integer(0));
	if (i > 0)
		json_object_set(l, "previtem", json_array_get(items, i - 1));
	if (i + 1 < n)
		json_object_set(l, "nextitem", json_array_get(items, i + 1));
	return l;
}

/* the items the inline `if` keeps (evaluated with the targets bound, without loop) */
static mgt_status filter_items(jctx *c, jscope *s, const jnode *n, json_t *all, json_t **out)
{
	*out = json_array();
	jscope *f = jscope_new(s);
	if (!f || !*out)
		return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < json_array_size(all); i++) {
		jv it = jv_json(json_array_get(all, i)), keep;
		if ((st = bind_targets(c, f, n, &it)) || (st = jinja_eval(c, f, n->a, &keep)))
			break;
		if (jv_truthy(&keep))
			json_array_append(*out, it.j);
		jv_free(&keep);
	}
	jscope_free(f);
	return st;
}

static mgt_status exec_for(jctx *c, jscope *s, const jnode *n, mgt_buf *out)
{
	jv seq;
	json_t *items = NULL, *all = NULL;
	mgt_status st = jinja_eval(c, s, n->b, &seq);
	if (st)
		return st;
	st = items_of(c, n, &seq, &all);
	jv_free(&seq);
	if (st)
		return st;
	if (n->a)
		st = filter_items(c, s, n, all, &items);
	else
		items = json_incref(all);
	json_decref(all);
	if (st) {
		json_decref(items);
		return st;
	}
	/* each iteration runs in a fresh scope (a set inside does not outlive the iteration); the
	 * else block runs when no iteration reached the end of the body (Jinja2 resets its
	 * iteration indicator there, so a break or continue before it counts as no iteration) */
	size_t len = json_array_size(items);
	int completed = 0;
	for (size_t i = 0; !st && i < len; i++) {
		jscope *ls = jscope_new(s);
		if (!ls) {
			st = MGT_ERR_NOMEM;
			break;
		}
		jv it = jv_json(json_array_get(items, i)), lp = jv_json(loop_obj(items, i));
		st = bind_targets(c, ls, n, &it);
		if (!st)
			st = jscope_set(ls, "loop", &lp);
		jv_free(&lp);
		if (!st)
			st = jinja_exec(c, ls, n->c, out);
		if (!st && !c->flow)
			completed = 1;
		jscope_free(ls);
		if (c->flow == FLOW_BREAK) {
			c->flow = 0;
			break;
		}
		c->flow = 0;
	}
	if (!st && !completed && n->d) {
		jscope *es = jscope_new(s);
		st = es ? jinja_exec(c, es, n->d, out) : MGT_ERR_NOMEM;
		jscope_free(es);
	}
	json_decref(items);
	return st;
}

static mgt_status exec_set(jctx *c, jscope *s, const jnode *n, mgt_buf *out)
{
	(void)out;
	jv v;
	mgt_status st;
	if (n->kind == N_SETBLOCK) {
		mgt_buf b = { 0 };
		if ((st = jinja_exec(c, s, n->a, &b))) {
			free(b.p);
			return st;
		}
		v = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
		free(b.p);
	} else if ((st = jinja_eval(c, s, n->a, &v))) {
		return st;
	}
	if (n->kind == N_SETATTR) {
		jnode nm = { .kind = N_NAME, .line = n->line, .s = n->names[0] };
		jv ns;
		if (!(st = jinja_eval(c, s, &nm, &ns))) {
			if (ns.k != JV_NS)
				st = jerr(c, n, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
			else if (v.k != JV_JSON)
				st = jerr(c, n, "storing an undefined value, macro or namespace in a namespace is not supported by this engine");
			else
				json_object_set(ns.j, n->names[1], v.j);
			jv_free(&ns);
		}
	} else {
		st = bind_targets(c, s, n, &v);
	}
	jv_free(&v);
	return st;
}

static mgt_status exec_stmt(jctx *c, jscope *s, const jnode *n, mgt_buf *out)
{
	jv v;
	mgt_status st;
	switch (n->kind) {
	case N_BODY: return jinja_exec(c, s, n, out);
	case N_TEXT: return mgt_buf_add(out, json_string_value(n->lit), json_string_length(n->lit));
	case N_OUT:
		if ((st = jinja_eval(c, s, n->a, &v)))
			return st;
		st = jv_str(&v, out);
		if (st == MGT_ERR_INPUT)
			st = jerr(c, n, "%s", mgt_err_msg());
		jv_free(&v);
		return st;
	case N_IF:
		if ((st = jinja_eval(c, s, n->a, &v)))
			return st;
		int t = jv_truthy(&v);
		jv_free(&v);
		if (t)
			return jinja_exec(c, s, n->b, out);
		return n->c ? exec_stmt(c, s, n->c, out) : MGT_OK;
	case N_FOR: return exec_for(c, s, n, out);
	case N_SET: case N_SETATTR: case N_SETBLOCK: return exec_set(c, s, n, out);
	case N_MACRO:
		memset(&v, 0, sizeof v);
		v.k = JV_MACRO, v.mac = n, v.mscope = s;
		return jscope_set(s, n->s, &v);
	case N_BREAK: c->flow = FLOW_BREAK; return MGT_OK;
	case N_CONTINUE: c->flow = FLOW_CONTINUE; return MGT_OK;
	default: return jerr(c, n, "internal error: not a statement");
	}
}

mgt_status jinja_exec(jctx *c, jscope *s, const jnode *body, mgt_buf *out)
{
	if (body->kind != N_BODY)
		return exec_stmt(c, s, body, out);
	for (size_t i = 0; i < body->nv && !c->flow; i++) {
		mgt_status st = exec_stmt(c, s, body->v[i], out);
		if (st)
			return st;
	}
	return MGT_OK;
}

mgt_status jinja_call_macro(jctx *c, const jnode *call, const jv *fn, jv *args, size_t na,
			    char **kwn, jv *kwv, size_t nk, jv *out)
{
	const jnode *mac = fn->mac;
	if (na > mac->nnames)
		return jerr(c, call, "TypeError: macro '%s' takes not more than %zu argument(s)", mac->s, mac->nnames);
	if (c->depth > 200)
		return jerr(c, call, "macro '%s': recursion deeper than 200 calls", mac->s);
	jscope *s = jscope_new(fn->mscope ? fn->mscope : c->root);
	if (!s)
		return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < mac->nnames; i++) {
		const jv *given = i < na ? &args[i] : NULL;
		for (size_t k = 0; k < nk; k++)
			if (!strcmp(kwn[k], mac->names[i]))
				given = &kwv[k];
		jv v;
		if (given)
			v = jv_copy(given);
		else if (mac->w[i])
			st = jinja_eval(c, s, mac->w[i], &v);
		else
			v = jv_undef(mac->names[i], NULL, 0);
		if (!st)
			st = jscope_set(s, mac->names[i], &v);
		jv_free(&v);
	}
	for (size_t k = 0; !st && k < nk; k++) {
		size_t i;
		for (i = 0; i < mac->nnames && strcmp(kwn[k], mac->names[i]); i++)
			;
		if (i == mac->nnames)
			st = jerr(c, call, "TypeError: macro '%s' takes no keyword argument '%s'", mac->s, kwn[k]);
	}
	mgt_buf b = { 0 };
	c->depth++;
	if (!st)
		st = jinja_exec(c, s, mac->a, &b);
	c->depth--;
	c->flow = 0;
	if (!st)
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
	free(b.p);
	jscope_free(s);
	return st;
}

/* ---- globals ------------------------------------------------------------------------------- */

static int arg_int(const jv *v, long long *i)
{
	double d;
	int isint;
	return v->k == JV_JSON && json_py_num(v->j, &d, i, &isint) && isint;
}

static mgt_status g_range(jctx *c, const jnode *n, jv *a, size_t na, jv *out)
{
	long long v[3] = { 0, 0, 1 };
	if (na < 1 || na > 3)
		return jerr(c, n, "TypeError: range expected 1 to 3 arguments, got %zu", na);
	for (size_t i = 0; i < na; i++)
		if (!arg_int(&a[i], &v[na == 1 ? 1 : i]))
			return jerr(c, n, "TypeError: range() arguments must be integers");
	if (!v[2])
		return jerr(c, n, "ValueError: range() arg 3 must not be zero");
	json_t *r = json_array();
	for (long long i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
		if (json_array_size(r) >= 100000) {
			json_decref(r);
			return jerr(c, n, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
		}
		json_array_append_new(r, json_integer(i));
	}
	*out = jv_json(jinja_mark(r, SEQ_RANGE));
	return MGT_OK;
}

static mgt_status g_dict(jctx *c, const jnode *n, jv *a, size_t na, char **kwn, jv *kwv, size_t nk, jv *out, int ns)
{
	json_t *o = json_object();
	if (na > 1 || (na == 1 && (a[0].k != JV_JSON || !json_is_object(a[0].j)))) {
		json_decref(o);
		return jerr(c, n, "%s(): only a dict argument and keyword arguments are supported by this engine", ns ? "namespace" : "dict");
	}
	if (na)
		json_object_update(o, a[0].j);
	for (size_t k = 0; k < nk; k++) {
		if (kwv[k].k != JV_JSON) {
			json_decref(o);
			return jerr(c, n, "%s(): an undefined value, macro or namespace as a value is not supported by this engine", ns ? "namespace" : "dict");
		}
		json_object_set(o, kwn[k], kwv[k].j);
	}
	memset(out, 0, sizeof *out);
	out->k = ns ? JV_NS : JV_JSON, out->j = o;
	return MGT_OK;
}

static mgt_status g_strftime(jctx *c, const jnode *n, jv *a, size_t na, jv *out)
{
	if (na != 1 || a[0].k != JV_JSON || !json_is_string(a[0].j))
		return jerr(c, n, "strftime_now takes one format string");
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (c->date) {
		const char *e = strptime(c->date, "%Y-%m-%d", &tm);
		if (e && *e == 'T')
			e = strptime(e + 1, "%H:%M:%S", &tm);
		if (!e || *e)
			return jerr(c, n, "strftime_now: the pinned date '%s' is not YYYY-MM-DD[THH:MM:SS]", c->date);
		tm.tm_isdst = -1;
		time_t t = timegm(&tm);
		gmtime_r(&t, &tm); /* fills tm_wday, tm_yday */
	} else {
		time_t t = time(NULL);
		localtime_r(&t, &tm);
	}
	char buf[512];
	size_t k = strftime(buf, sizeof buf, json_string_value(a[0].j), &tm);
	*out = jv_json(json_stringn_nocheck(buf, k));
	return MGT_OK;
}

mgt_status jinja_call_func(jctx *c, const jnode *call, const jv *fn, jv *args, size_t na,
			   char **kwn, jv *kwv, size_t nk, jv *out)
{
	const char *f = fn->f_name;
	if (fn->j)
		return jinja_call_method(c, call, fn, args, na, kwn, kwv, nk, out);
	if (!strcmp(f, "namespace") || !strcmp(f, "dict"))
		return g_dict(c, call, args, na, kwn, kwv, nk, out, f[0] == 'n');
	if (nk)
		return jerr(c, call, "TypeError: %s() takes no keyword arguments", f);
	if (!strcmp(f, "range"))
		return g_range(c, call, args, na, out);
	if (!strcmp(f, "strftime_now"))
		return g_strftime(c, call, args, na, out);
	/* raise_exception(message): transformers raises jinja2.exceptions.TemplateError(message) */
	mgt_buf m = { 0 };
	mgt_status st = na ? jv_str(&args[0], &m) : MGT_OK;
	if (!st)
		st = jerr(c, call, "raise_exception: %.*s", (int)m.n, m.p ? m.p : "");
	free(m.p);
	return st;
}

/* ---- public API ----------------------------------------------------------------------------- */

mgt_status mgt_chat_template_parse(const char *src, size_t n, const char *name, mgt_chat_template **out)
{
	*out = NULL;
	mgt_chat_template *t = calloc(1, sizeof *t);
	if (!t || !(t->name = strdup(name ? name : "<template>"))) {
		free(t);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	jtoks tk;
	mgt_status st = jinja_lex(src, n, t->name, &tk);
	if (!st) {
		st = jinja_parse(t, &tk);
		jinja_toks_free(&tk);
	}
	if (st) {
		mgt_chat_template_free(t);
		return st;
	}
	*out = t;
	return MGT_OK;
}

void mgt_chat_template_free(mgt_chat_template *t)
{
	if (!t)
		return;
	jinja_nodes_free(t);
	free(t->name);
	free(t);
}

mgt_status mgt_chat_template_render(const mgt_chat_template *t, const json_t *vars, const char *date, mgt_buf *out)
{
	if (vars && !json_is_object(vars))
		return mgt_err(MGT_ERR_USAGE, "chat template variables must be a JSON object");
	jctx c = { t, date, NULL, 0, 0 };
	jscope *root = jscope_new(NULL);
	if (!root)
		return MGT_ERR_NOMEM;
	c.root = root;
	mgt_status st = MGT_OK;
	const char *k;
	json_t *x;
	if (vars)
	json_object_foreach((json_t *)vars, k, x) {
		jv v = jv_json(json_incref(x));
		st = jscope_set(root, k, &v);
		jv_free(&v);
		if (st)
			break;
	}
	size_t n0 = out->n;
	if (!st)
		st = jinja_exec(&c, root, t->root, out);
	jinja_marks_reset();
	if (st)
		out->n = n0;
	jscope_free(root);
	return st;
}
