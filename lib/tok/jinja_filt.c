/* lib/tok/jinja_filt.c: the filters and tests of the chat-template engine, with Jinja2 3.1's
 * semantics (filters.py, tests.py) and transformers' tojson (json.dumps, ensure_ascii=False).
 * Filters: length count trim upper lower title capitalize join default d first last list
 * reverse sort unique string int float abs tojson selectattr rejectattr select reject map
 * replace indent items dictsort safe.  Tests: defined undefined none string number integer
 * float mapping iterable sequence boolean true false callable equalto eq == ne != sameas odd
 * even divisibleby lower upper in gt ge lt le > >= < <= greaterthan lessthan. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

static const char *const FILTERS[] = { "length", "count", "trim", "upper", "lower", "title", "capitalize", "join",
	"default", "d", "first", "last", "list", "reverse", "sort", "unique", "string", "int", "float", "abs", "tojson",
	"selectattr", "rejectattr", "select", "reject", "map", "replace", "indent", "items", "dictsort", "safe", NULL };
static const char *const TESTS[] = { "defined", "undefined", "none", "string", "number", "integer", "float",
	"mapping", "iterable", "sequence", "boolean", "true", "false", "callable", "equalto", "eq", "==", "ne", "!=",
	"sameas", "odd", "even", "divisibleby", "lower", "upper", "in", "gt", "ge", "lt", "le", ">", ">=", "<", "<=",
	"greaterthan", "lessthan", NULL };

static int in_list(const char *const *v, const char *s)
{
	for (; *v; v++)
		if (!strcmp(*v, s))
			return 1;
	return 0;
}
int jinja_has_filter(const char *f) { return in_list(FILTERS, f); }
int jinja_has_test(const char *f) { return in_list(TESTS, f); }

typedef struct {
	jv *a;
	size_t na;
	char **kwn;
	jv *kwv;
	size_t nk;
} fargs;

/* argument pos (0-based after the value) or keyword name; NULL if not given */
static const jv *arg(const fargs *f, size_t pos, const char *name)
{
	if (pos < f->na)
		return &f->a[pos];
	for (size_t k = 0; k < f->nk; k++)
		if (name && !strcmp(f->kwn[k], name))
			return &f->kwv[k];
	return NULL;
}

static int arg_true(const fargs *f, size_t pos, const char *name)
{
	const jv *v = arg(f, pos, name);
	return v && jv_truthy(v);
}

static int is_str(const jv *v) { return v && v->k == JV_JSON && json_is_string(v->j); }

static mgt_status str_of(const jv *v, json_t **out)
{
	mgt_buf b = { 0 };
	mgt_status st = jv_str(v, &b);
	if (!st)
		*out = json_stringn_nocheck(b.p ? b.p : "", b.n);
	free(b.p);
	return st;
}

/* an engine-level error (no template line yet) given the node's line */
static mgt_status at_line(jctx *c, const jnode *n, mgt_status st)
{
	const char *m = mgt_err_msg();
	if (st != MGT_ERR_INPUT || !strncmp(m, c->t->name, strlen(c->t->name)))
		return st;
	return jerr(c, n, "%s", m);
}

/* Jinja2's make_attrgetter: dotted parts, integer parts as indexes */
static mgt_status attr_get(jctx *c, const jnode *n, const jv *item, const char *attr, jv *out)
{
	jv cur = jv_copy(item);
	char part[128];
	const char *p = attr;
	while (*p) {
		size_t l = strcspn(p, ".");
		snprintf(part, sizeof part, "%.*s", (int)l, p);
		p += l + (p[l] == '.');
		char *end;
		long long iv = strtoll(part, &end, 10);
		jv key = *part && !*end ? jv_json(json_integer(iv)) : jv_json(json_string(part)), nx;
		mgt_status st = cur.k == JV_UNDEF ? MGT_OK : jinja_getitem(c, n, &cur, &key, &nx);
		jv_free(&key);
		if (st) {
			jv_free(&cur);
			return st;
		}
		if (cur.k == JV_UNDEF)
			break;
		jv_free(&cur);
		cur = nx;
	}
	*out = cur;
	return MGT_OK;
}

static mgt_status need_json(jctx *c, const jnode *n, const char *f, const jv *v)
{
	if (v->k == JV_JSON)
		return MGT_OK;
	if (v->k == JV_UNDEF) {
		char m[256];
		jv_undef_msg(v, m, sizeof m);
		return jerr(c, n, "UndefinedError: %s (in filter '%s')", m, f);
	}
	return jerr(c, n, "filter '%s' on a namespace, macro or function is not supported by this engine", f);
}

/* sort keys: lower-cased strings unless case_sensitive */
static mgt_status sort_key(const json_t *x, int cs, json_t **out)
{
	if (cs || !json_is_string(x)) {
		*out = json_incref((json_t *)x);
		return MGT_OK;
	}
	jv l;
	mgt_status st = jinja_case(json_string_value(x), json_string_length(x), 'l', &l);
	*out = st ? NULL : l.j;
	return st;
}

/* stable insertion sort of items by keys (parallel arrays) */
static mgt_status sort_by(jctx *c, const jnode *n, json_t *items, json_t *keys, int rev)
{
	size_t len = json_array_size(items);
	for (size_t i = 1; i < len; i++) {
		for (size_t j = i; j > 0; j--) {
			int lt;
			json_t *a = json_array_get(keys, j - 1), *b = json_array_get(keys, j);
			if (json_py_lt(rev ? a : b, rev ? b : a, &lt))
				return jerr(c, n, "TypeError: '<' not supported between instances of '%s' and '%s'",
					    json_py_type(b), json_py_type(a));
			if (!lt)
				break;
			json_t *x = json_incref(json_array_get(items, j)), *k = json_incref(b);
			json_array_set(items, j, json_array_get(items, j - 1)), json_array_set(keys, j, a);
			json_array_set_new(items, j - 1, x), json_array_set_new(keys, j - 1, k);
		}
	}
	return MGT_OK;
}

static mgt_status f_sort(jctx *c, const jnode *n, const jv *v, const fargs *f, int dict, jv *out)
{
	json_t *items, *keys = json_array();
	mgt_status st;
	if (dict) {
		if (v->k != JV_JSON || !json_is_object(v->j))
			return json_decref(keys), jerr(c, n, "dictsort: a dict expected");
		items = json_array();
		const char *k;
		json_t *x;
		json_object_foreach(v->j, k, x)
			json_array_append_new(items, jinja_mark(json_pack("[sO]", k, x), SEQ_TUPLE));
	} else if ((st = jinja_iter_items(c, n, v, &items))) {
		return json_decref(keys), st;
	} else {
		json_t *copy = json_copy(items);
		json_decref(items);
		items = copy;
	}
	int rev = arg_true(f, dict ? 2 : 0, "reverse"), cs = arg_true(f, dict ? 0 : 1, "case_sensitive");
	const jv *by = dict ? arg(f, 1, "by") : NULL, *attr = dict ? NULL : arg(f, 2, "attribute");
	int byval = is_str(by) && !strcmp(json_string_value(by->j), "value");
	st = MGT_OK;
	for (size_t i = 0; !st && i < json_array_size(items); i++) {
		json_t *x = json_array_get(items, i), *k = NULL;
		if (dict) {
			st = sort_key(json_array_get(x, byval), cs, &k);
		} else if (attr && is_str(attr)) {
			jv it = jv_json(json_incref(x)), a;
			st = attr_get(c, n, &it, json_string_value(attr->j), &a);
			jv_free(&it);
			if (!st && a.k != JV_JSON)
				st = jerr(c, n, "sort: attribute '%s' is undefined", json_string_value(attr->j));
			if (!st)
				st = sort_key(a.j, cs, &k);
			jv_free(&a);
		} else {
			st = sort_key(x, cs, &k);
		}
		if (!st)
			json_array_append_new(keys, k);
	}
	if (!st)
		st = sort_by(c, n, items, keys, rev);
	json_decref(keys);
	if (st)
		json_decref(items);
	else
		*out = jv_json(items);
	return st;
}

static mgt_status f_unique(jctx *c, const jnode *n, const jv *v, const fargs *f, jv *out)
{
	json_t *items, *r = json_array(), *seen = json_array();
	mgt_status st = jinja_iter_items(c, n, v, &items);
	int cs = arg_true(f, 0, "case_sensitive");
	for (size_t i = 0; !st && i < json_array_size(items); i++) {
		json_t *x = json_array_get(items, i), *k;
		if ((st = sort_key(x, cs, &k)))
			break;
		int dup = 0;
		for (size_t j = 0; j < json_array_size(seen) && !dup; j++)
			dup = json_py_eq(json_array_get(seen, j), k);
		if (!dup)
			json_array_append(r, x), json_array_append(seen, k);
		json_decref(k);
	}
	if (f->na > 1 || arg(f, 1, "attribute"))
		st = st ? st : jerr(c, n, "unique(attribute=...) is not supported by this engine");
	json_decref(items), json_decref(seen);
	if (st)
		json_decref(r);
	else
		*out = jv_json(jinja_mark(r, SEQ_GEN)); /* a generator in Jinja2 */
	return st;
}

/* selectattr / rejectattr / select / reject */
/* The end of a filter that yields a generator: items released, r the result (a generator in
 * Jinja2) or released on error. */
static mgt_status gen_out(mgt_status st, json_t *items, json_t *r, jv *out)
{
	json_decref(items);
	if (st)
		json_decref(r);
	else
		*out = jv_json(jinja_mark(r, SEQ_GEN));
	return st;
}

static mgt_status f_select(jctx *c, const jnode *n, const char *name, const jv *v, const fargs *f, jv *out)
{
	int byattr = name[1] == 'e' && name[6] == 'a', rej = name[0] == 'r';
	size_t t0 = byattr ? 1 : 0;
	if (byattr && !is_str(arg(f, 0, NULL)))
		return jerr(c, n, "%s: an attribute name expected", name);
	const jv *test = arg(f, t0, NULL);
	if (test && !is_str(test))
		return jerr(c, n, "%s: a test name expected", name);
	if (test && !jinja_has_test(json_string_value(test->j)))
		return jerr(c, n, "test '%s' is not supported by this engine", json_string_value(test->j));
	if (f->nk)
		return jerr(c, n, "keyword arguments to %s are not supported by this engine", name);
	json_t *items, *r = json_array();
	mgt_status st = jinja_iter_items(c, n, v, &items);
	for (size_t i = 0; !st && i < json_array_size(items); i++) {
		jv it = jv_json(json_incref(json_array_get(items, i))), x;
		if (byattr)
			st = attr_get(c, n, &it, json_string_value(f->a[0].j), &x);
		else
			x = jv_copy(&it);
		int keep = 0;
		if (!st && test)
			st = jinja_test_named(c, n, json_string_value(test->j), &x, f->a + t0 + 1, f->na - t0 - 1 > f->na ? 0 : f->na - t0 - 1, &keep);
		else if (!st)
			keep = jv_truthy(&x);
		if (!st && keep != rej)
			json_array_append(r, it.j);
		jv_free(&x), jv_free(&it);
	}
	return gen_out(st, items, r, out);
}

static mgt_status f_map(jctx *c, const jnode *n, const jv *v, const fargs *f, jv *out)
{
	const jv *attr = arg(f, (size_t)-1, "attribute"), *def = arg(f, (size_t)-1, "default");
	const jv *fname = f->na ? &f->a[0] : NULL;
	if (!attr && !is_str(fname))
		return jerr(c, n, "map: a filter name or attribute= expected");
	if (fname && !attr && !jinja_has_filter(json_string_value(fname->j)))
		return jerr(c, n, "filter '%s' is not supported by this engine", json_string_value(fname->j));
	json_t *items, *r = json_array();
	mgt_status st = jinja_iter_items(c, n, v, &items);
	for (size_t i = 0; !st && i < json_array_size(items); i++) {
		jv it = jv_json(json_incref(json_array_get(items, i))), x = { 0 };
		if (attr) {
			st = is_str(attr) ? attr_get(c, n, &it, json_string_value(attr->j), &x)
					  : jerr(c, n, "map: attribute must be a string");
			if (!st && x.k == JV_UNDEF && def) {
				jv_free(&x);
				x = jv_copy(def);
			}
		} else {
			st = jinja_filter_named(c, n, json_string_value(fname->j), &it, f->a + 1, f->na - 1, f->kwn, f->kwv, f->nk, &x);
		}
		if (!st && x.k != JV_JSON)
			st = jerr(c, n, "map: an undefined result (item %zu) is not supported by this engine", i);
		if (!st)
			json_array_append(r, x.j);
		jv_free(&x), jv_free(&it);
	}
	return gen_out(st, items, r, out);
}

static mgt_status f_join(jctx *c, const jnode *n, const jv *v, const fargs *f, jv *out)
{
	const jv *sep = arg(f, 0, "d"), *attr = arg(f, 1, "attribute");
	json_t *items;
	mgt_status st = jinja_iter_items(c, n, v, &items);
	mgt_buf b = { 0 };
	for (size_t i = 0; !st && i < json_array_size(items); i++) {
		if (i && sep)
			st = jv_str(sep, &b);
		jv it = jv_json(json_incref(json_array_get(items, i))), x;
		if (!st && attr && is_str(attr))
			st = attr_get(c, n, &it, json_string_value(attr->j), &x);
		else
			x = jv_copy(&it);
		if (!st)
			st = jv_str(&x, &b);
		jv_free(&x), jv_free(&it);
	}
	json_decref(items);
	if (!st)
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
	free(b.p);
	return st;
}

static mgt_status f_indent(jctx *c, const jnode *n, const jv *v, const fargs *f, jv *out)
{
	if (v->k != JV_JSON || !json_is_string(v->j)) /* do_indent: s += "\n" */
		return v->k == JV_UNDEF ? need_json(c, n, "indent", v)
					: jerr(c, n, "TypeError: unsupported operand type(s) for +=: '%s' and 'str'",
					       v->k == JV_JSON ? json_py_type(v->j) : "object");
	const jv *w = arg(f, 0, "width");
	mgt_buf ind = { 0 }, b = { 0 };
	long long k = 4, dummy;
	double d;
	int isint;
	mgt_status st = MGT_OK;
	if (is_str(w))
		st = jv_str(w, &ind);
	else if (w && !(w->k == JV_JSON && json_py_num(w->j, &d, &k, &isint) && isint))
		return jerr(c, n, "indent: width must be an integer or a string");
	for (long long i = 0; !st && !is_str(w) && i < k; i++)
		st = mgt_buf_add(&ind, " ", 1);
	(void)dummy;
	int first = arg_true(f, 1, "first"), blank = arg_true(f, 2, "blank");
	mgt_buf s = { 0 };
	if (!st)
		st = jv_str(v, &s);
	if (!st)
		st = mgt_buf_add(&s, "\n", 1);
	/* s.splitlines() joined with "\n" + indent, blank lines unindented unless blank= */
	size_t i = 0, line = 0;
	while (!st && i < s.n) {
		size_t e = i;
		while (e < s.n && s.p[e] != '\n')
			e++;
		if (line && !st)
			st = mgt_buf_add(&b, "\n", 1);
		if (!st && ((line && (blank || e > i)) || (!line && first)))
			st = mgt_buf_add(&b, ind.p, ind.n);
		if (!st)
			st = mgt_buf_add(&b, s.p + i, e - i);
		i = e + 1, line++;
	}
	if (!st)
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
	free(ind.p), free(b.p), free(s.p);
	return st;
}

static mgt_status f_number(jctx *c, const jnode *n, const jv *v, const fargs *f, int want_int, jv *out)
{
	(void)c, (void)n;
	const jv *def = arg(f, 0, "default");
	double d;
	long long i;
	int isint;
	if (v->k == JV_JSON && json_py_num(v->j, &d, &i, &isint)) {
		*out = jv_json(want_int ? json_integer(isint ? i : (long long)trunc(d)) : json_real(d));
		return MGT_OK;
	}
	if (v->k == JV_JSON && json_is_string(v->j)) {
		char *end, buf[128];
		snprintf(buf, sizeof buf, "%s", json_string_value(v->j));
		long long iv = strtoll(buf, &end, 10);
		while (*end == ' ' || *end == '\t' || *end == '\n')
			end++;
		if (*buf && !*end) {
			*out = jv_json(want_int ? json_integer(iv) : json_real((double)iv));
			return MGT_OK;
		}
		d = strtod(buf, &end);
		while (*end == ' ' || *end == '\t' || *end == '\n')
			end++;
		if (*buf && !*end) {
			*out = jv_json(want_int ? json_integer((long long)trunc(d)) : json_real(d));
			return MGT_OK;
		}
	}
	*out = def ? jv_copy(def) : jv_json(want_int ? json_integer(0) : json_real(0));
	return MGT_OK;
}

static mgt_status f_len(jctx *c, const jnode *n, const jv *v, jv *out)
{
	if (v->k == JV_UNDEF) {
		*out = jv_json(json_integer(0));
		return MGT_OK;
	}
	if (v->k == JV_NS)
		return jerr(c, n, "TypeError: object of type 'Namespace' has no len()");
	const json_t *j = v->j;
	size_t k = 0;
	if (json_is_string(j)) {
		for (size_t i = 0; i < json_string_length(j); i++)
			k += ((unsigned char)json_string_value(j)[i] & 0xC0) != 0x80;
	} else if (json_is_array(j) && (jinja_kind(j) == SEQ_GEN || jinja_kind(j) == SEQ_GEN_DONE)) {
		return jerr(c, n, "TypeError: object of type 'generator' has no len()");
	} else if (json_is_array(j)) {
		k = json_array_size(j);
	} else if (json_is_object(j)) {
		k = json_object_size(j);
	} else {
		return jerr(c, n, "TypeError: object of type '%s' has no len()", j ? json_py_type(j) : "function");
	}
	*out = jv_json(json_integer((json_int_t)k));
	return MGT_OK;
}

static mgt_status f_firstlast(jctx *c, const jnode *n, const jv *v, int last, jv *out)
{
	if (last && v->k == JV_JSON && json_is_array(v->j) && jinja_kind(v->j) >= SEQ_GEN && jinja_kind(v->j) <= SEQ_GEN_DONE)
		return jerr(c, n, "TypeError: 'generator' object is not reversible");
	json_t *items;
	mgt_status st = jinja_iter_items(c, n, v, &items);
	if (st)
		return st;
	size_t k = json_array_size(items);
	*out = k ? jv_json(json_incref(json_array_get(items, last ? k - 1 : 0)))
		 : jv_undef(last ? "No last item, sequence was empty." : "No first item, sequence was empty.", NULL, 0);
	json_decref(items);
	return MGT_OK;
}

static mgt_status f_reverse(jctx *c, const jnode *n, const jv *v, jv *out)
{
	/* Jinja2 do_reverse: a string reversed; else reversed(value), an iterator, or for what is not
	 * reversible (a generator) a reversed list */
	int gen_in = v->k == JV_JSON && json_is_array(v->j) && jinja_kind(v->j) == SEQ_GEN;
	json_t *items;
	mgt_status st = jinja_iter_items(c, n, v, &items);
	if (st)
		return st;
	json_t *r = json_array();
	for (size_t i = json_array_size(items); i > 0; i--)
		json_array_append(r, json_array_get(items, i - 1));
	json_decref(items);
	if (v->k == JV_JSON && json_is_string(v->j)) {
		mgt_buf b = { 0 };
		for (size_t i = 0; !st && i < json_array_size(r); i++)
			st = json_py_str(json_array_get(r, i), &b);
		json_decref(r);
		r = json_stringn_nocheck(b.p ? b.p : "", b.n);
		free(b.p);
	} else if (!gen_in) {
		jinja_mark(r, SEQ_GEN);
	}
	*out = jv_json(r);
	return st;
}

static mgt_status f_tojson(jctx *c, const jnode *n, const jv *v, const fargs *f, jv *out)
{
	const jv *ind = arg(f, 0, "indent");
	long long k = -1;
	double d;
	int isint;
	if (ind && !(ind->k == JV_JSON && (json_is_null(ind->j) || (json_py_num(ind->j, &d, &k, &isint) && isint))))
		return jerr(c, n, "tojson: indent must be an integer");
	if (f->nk > (ind && f->na == 0))
		return jerr(c, n, "tojson: only indent= is supported by this engine");
	if (v->k != JV_JSON)
		return jerr(c, n, "TypeError: Object of type %s is not JSON serializable", v->k == JV_UNDEF ? "Undefined" : "Namespace");
	mgt_buf b = { 0 };
	mgt_status st = json_py_dumps(v->j, k, &b);
	if (!st)
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
	free(b.p);
	return st;
}

static mgt_status f_items(jctx *c, const jnode *n, const jv *v, jv *out)
{
	if (v->k == JV_UNDEF) {
		*out = jv_json(jinja_mark(json_array(), SEQ_GEN));
		return MGT_OK;
	}
	if (v->k != JV_JSON || !json_is_object(v->j))
		return jerr(c, n, "TypeError: can only get item pairs from a mapping.");
	json_t *r = json_array();
	const char *k;
	json_t *x;
	json_object_foreach(v->j, k, x)
		json_array_append_new(r, jinja_mark(json_pack("[sO]", k, x), SEQ_TUPLE));
	*out = jv_json(jinja_mark(r, SEQ_GEN)); /* do_items is a generator */
	return MGT_OK;
}

static mgt_status f_text(jctx *c, const jnode *n, const char *name, const jv *v, const fargs *f, jv *out)
{
	json_t *s;
	mgt_status st = str_of(v, &s);
	if (st)
		return at_line(c, n, st);
	const char *p = json_string_value(s);
	size_t len = json_string_length(s);
	if (!strcmp(name, "trim")) {
		const jv *chars = arg(f, 0, "chars");
		st = jinja_strip(p, len, is_str(chars) ? chars->j : NULL, 1, 1, out);
	} else if (!strcmp(name, "replace")) {
		const jv *o = arg(f, 0, "old"), *w = arg(f, 1, "new"), *cnt = arg(f, 2, "count");
		long long k = -1;
		double d;
		int isint;
		json_t *os = NULL, *ws = NULL;
		if (!o || !w || (cnt && !(cnt->k == JV_JSON && (json_is_null(cnt->j) || (json_py_num(cnt->j, &d, &k, &isint) && isint)))))
			st = jerr(c, n, "replace: (old, new[, count]) expected");
		if (!st && !(st = str_of(o, &os)) && !(st = str_of(w, &ws)))
			st = jinja_replace(s, os, ws, k, out);
		if (os)
			json_decref(os);
		if (ws)
			json_decref(ws);
	} else {
		st = jinja_case(p, len, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 'f' : 'c', out);
		if (st == MGT_ERR_INPUT)
			st = jerr(c, n, "%s", mgt_err_msg());
	}
	json_decref(s);
	return st;
}

mgt_status jinja_filter_named(jctx *c, const jnode *n, const char *name, jv *val, jv *args, size_t na,
			      char **kwn, jv *kwv, size_t nk, jv *out)
{
	fargs f = { args, na, kwn, kwv, nk };
	memset(out, 0, sizeof *out);
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		const jv *d = arg(&f, 0, "default_value");
		int use = val->k == JV_UNDEF || (arg_true(&f, 1, "boolean") && !jv_truthy(val));
		*out = use ? (d ? jv_copy(d) : jv_json(json_string(""))) : jv_copy(val);
		return MGT_OK;
	}
	if (!strcmp(name, "safe")) {
		*out = jv_copy(val);
		return MGT_OK;
	}
	if (!strcmp(name, "string")) {
		json_t *s;
		mgt_status st = val->k == JV_JSON && json_is_string(val->j) ? (s = json_incref(val->j), MGT_OK) : str_of(val, &s);
		if (!st)
			*out = jv_json(s);
		return st == MGT_ERR_INPUT ? jerr(c, n, "%s", mgt_err_msg()) : st;
	}
	if (!strcmp(name, "length") || !strcmp(name, "count"))
		return f_len(c, n, val, out);
	if (!strcmp(name, "tojson"))
		return f_tojson(c, n, val, &f, out);
	if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
	    !strcmp(name, "capitalize") || !strcmp(name, "replace"))
		return f_text(c, n, name, val, &f, out);
	if (!strcmp(name, "join"))
		return f_join(c, n, val, &f, out);
	if (!strcmp(name, "first") || !strcmp(name, "last"))
		return f_firstlast(c, n, val, name[0] == 'l', out);
	if (!strcmp(name, "list")) {
		json_t *items;
		mgt_status st = jinja_iter_items(c, n, val, &items);
		if (!st)
			*out = jv_json(json_copy(items)), json_decref(items);
		return st;
	}
	if (!strcmp(name, "reverse"))
		return f_reverse(c, n, val, out);
	if (!strcmp(name, "sort") || !strcmp(name, "dictsort"))
		return f_sort(c, n, val, &f, name[0] == 'd', out);
	if (!strcmp(name, "unique"))
		return f_unique(c, n, val, &f, out);
	if (!strcmp(name, "items"))
		return f_items(c, n, val, out);
	if (!strcmp(name, "map"))
		return f_map(c, n, val, &f, out);
	if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") || !strcmp(name, "reject"))
		return f_select(c, n, name, val, &f, out);
	if (!strcmp(name, "indent"))
		return f_indent(c, n, val, &f, out);
	mgt_status st = need_json(c, n, name, val);
	if (st)
		return st;
	if (!strcmp(name, "int") || !strcmp(name, "float"))
		return f_number(c, n, val, &f, name[0] == 'i', out);
	if (!strcmp(name, "abs")) {
		double d;
		long long i;
		int isint;
		if (!json_py_num(val->j, &d, &i, &isint))
			return jerr(c, n, "TypeError: bad operand type for abs(): '%s'", json_py_type(val->j));
		*out = jv_json(isint ? json_integer(i < 0 ? -i : i) : json_real(fabs(d)));
		return MGT_OK;
	}
	return jerr(c, n, "filter '%s' is not supported by this engine", name);
}

mgt_status jinja_filter(jctx *c, jscope *s, const jnode *n, jv *val, jv *out)
{
	jv *a = calloc(n->nv + 1, sizeof *a), *k = calloc(n->nw + 1, sizeof *k);
	mgt_status st = a && k ? MGT_OK : MGT_ERR_NOMEM;
	size_t na = 0, nk = 0;
	for (; !st && na < n->nv; na++)
		st = jinja_eval(c, s, n->v[na], &a[na]);
	for (; !st && nk < n->nw; nk++)
		st = jinja_eval(c, s, n->w[nk], &k[nk]);
	if (!st)
		st = at_line(c, n, jinja_filter_named(c, n, n->s, val, a, na, n->names, k, nk, out));
	for (size_t i = 0; a && i < n->nv; i++)
		jv_free(&a[i]);
	for (size_t i = 0; k && i < n->nw; i++)
		jv_free(&k[i]);
	free(a), free(k);
	return st;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* str(value).isupper() / islower(): at least one cased character, and none of the other case */
static int cased_all(const jv *v, int upper)
{
	json_t *s;
	if (str_of(v, &s))
		return 0;
	jv o, other;
	int r = 0;
	if (!jinja_case(json_string_value(s), json_string_length(s), upper ? 'u' : 'l', &o)) {
		if (!jinja_case(json_string_value(s), json_string_length(s), upper ? 'l' : 'u', &other)) {
			r = json_py_eq(o.j, s) && !json_py_eq(other.j, s);
			jv_free(&other);
		}
		jv_free(&o);
	}
	json_decref(s);
	return r;
}

mgt_status jinja_test_named(jctx *c, const jnode *n, const char *t, const jv *v, jv *args, size_t na, int *res)
{
	const json_t *j = v->k == JV_JSON ? v->j : NULL;
	double d;
	long long i = 0;
	int isint = 0, num = j && json_py_num(j, &d, &i, &isint);
	*res = 0;
	if (!strcmp(t, "defined")) *res = v->k != JV_UNDEF;
	else if (!strcmp(t, "undefined")) *res = v->k == JV_UNDEF;
	else if (!strcmp(t, "none")) *res = j && json_is_null(j);
	else if (!strcmp(t, "string")) *res = j && json_is_string(j);
	else if (!strcmp(t, "number")) *res = num;
	else if (!strcmp(t, "integer")) *res = j && json_is_integer(j);
	else if (!strcmp(t, "float")) *res = j && json_is_real(j);
	else if (!strcmp(t, "boolean")) *res = j && json_is_boolean(j);
	else if (!strcmp(t, "true")) *res = j && json_is_true(j);
	else if (!strcmp(t, "false")) *res = j && json_is_false(j);
	else if (!strcmp(t, "mapping")) *res = j && json_is_object(j);
	else if (!strcmp(t, "iterable")) *res = v->k == JV_UNDEF || (j && (json_is_string(j) || json_is_array(j) || json_is_object(j)));
	else if (!strcmp(t, "sequence")) *res = v->k == JV_UNDEF || (j && (json_is_string(j) || json_is_object(j) ||
							     (json_is_array(j) && (jinja_kind(j) <= SEQ_TUPLE || jinja_kind(j) == SEQ_RANGE))));
	else if (!strcmp(t, "callable")) *res = v->k == JV_FUNC || v->k == JV_MACRO;
	else if (!strcmp(t, "lower") || !strcmp(t, "upper")) *res = cased_all(v, t[0] == 'u');
	else if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
		long long m = 2, r;
		if (!num || !isint || (t[0] == 'd' && (na != 1 || args[0].k != JV_JSON || !json_py_num(args[0].j, &d, &m, &isint) || !m)))
			return jerr(c, n, "test '%s' needs integers", t);
		r = ((i % m) + m) % m;
		*res = t[0] == 'o' ? r == 1 : r == 0;
	} else {
		if (na != 1)
			return jerr(c, n, "test '%s' takes one argument", t);
		if (!strcmp(t, "in")) {
			if (args[0].k == JV_JSON && json_is_array(args[0].j)) {
				for (size_t k = 0; k < json_array_size(args[0].j) && !*res; k++) {
					jv e = jv_json(json_array_get(args[0].j, k));
					*res = jv_eq(v, &e);
				}
			} else if (args[0].k == JV_JSON && json_is_object(args[0].j)) {
				*res = j && json_is_string(j) && json_object_get(args[0].j, json_string_value(j));
			} else if (args[0].k == JV_JSON && json_is_string(args[0].j) && j && json_is_string(j)) {
				*res = strstr(json_string_value(args[0].j), json_string_value(j)) != NULL;
			} else {
				return jerr(c, n, "test 'in': a list, dict or string expected");
			}
			return MGT_OK;
		}
		if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==") || !strcmp(t, "sameas")) {
			*res = jv_eq(v, &args[0]);
			return MGT_OK;
		}
		if (!strcmp(t, "ne") || !strcmp(t, "!=")) {
			*res = !jv_eq(v, &args[0]);
			return MGT_OK;
		}
		int lt, gt;
		if (!j || args[0].k != JV_JSON || json_py_lt(j, args[0].j, &lt) || json_py_lt(args[0].j, j, &gt))
			return jerr(c, n, "test '%s': values that do not compare", t);
		if (!strcmp(t, "lt") || !strcmp(t, "<") || !strcmp(t, "lessthan")) *res = lt;
		else if (!strcmp(t, "le") || !strcmp(t, "<=")) *res = !gt;
		else if (!strcmp(t, "gt") || !strcmp(t, ">") || !strcmp(t, "greaterthan")) *res = gt;
		else *res = !lt;
	}
	return MGT_OK;
}

mgt_status jinja_test(jctx *c, jscope *s, const jnode *n, const jv *val, int *res)
{
	if (n->nw)
		return jerr(c, n, "keyword arguments to test '%s' are not supported by this engine", n->s);
	jv *a = calloc(n->nv + 1, sizeof *a);
	mgt_status st = a ? MGT_OK : MGT_ERR_NOMEM;
	size_t na = 0;
	for (; !st && na < n->nv; na++)
		st = jinja_eval(c, s, n->v[na], &a[na]);
	if (!st)
		st = jinja_test_named(c, n, n->s, val, a, na, res);
	for (size_t i = 0; a && i < n->nv; i++)
		jv_free(&a[i]);
	free(a);
	return st;
}
