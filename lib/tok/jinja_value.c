/* lib/tok/jinja_value.c: runtime values of the chat-template engine with Python's semantics:
 * truth, ==, <, str() (Python repr inside lists and dicts), float repr, json.dumps (transformers'
 * tojson: ensure_ascii=False, separators ", " and ": ", or "," and ": " with an indent), and
 * Jinja2's Undefined and its messages (runtime.py Undefined._undefined_message). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja_impl.h"

/* Kinds of JSON arrays: marked while a render runs (pointer identity; the table holds a reference
 * so an address is not reused).  Unmarked arrays are Python lists. */
static _Thread_local struct { json_t **a; int *k; size_t n, cap; } marks;

void jinja_marks_reset(void)
{
	for (size_t i = 0; i < marks.n; i++)
		json_decref(marks.a[i]);
	free(marks.a), free(marks.k);
	memset(&marks, 0, sizeof marks);
}

json_t *jinja_mark(json_t *a, int kind)
{
	if (!a)
		return NULL;
	for (size_t i = 0; i < marks.n; i++)
		if (marks.a[i] == a) {
			marks.k[i] = kind;
			return a;
		}
	if (marks.n == marks.cap) {
		size_t cap = marks.cap ? 2 * marks.cap : 64;
		json_t **na = realloc(marks.a, cap * sizeof *na);
		if (!na)
			return a;
		marks.a = na;
		int *nk = realloc(marks.k, cap * sizeof *nk);
		if (!nk)
			return a;
		marks.k = nk, marks.cap = cap;
	}
	marks.a[marks.n] = json_incref(a), marks.k[marks.n++] = kind;
	return a;
}

int jinja_kind(const json_t *a)
{
	if (!json_is_array(a))
		return SEQ_LIST;
	for (size_t i = marks.n; i > 0; i--)
		if (marks.a[i - 1] == a)
			return marks.k[i - 1];
	return SEQ_LIST;
}

const char *jinja_kind_name(int kind)
{
	static const char *const N[] = { "list", "tuple", "generator", "generator", "dict_items", "dict_keys",
					 "dict_values", "range" };
	return N[kind];
}

jv jv_json(json_t *j)
{
	jv v = { 0 };
	v.k = JV_JSON, v.j = j;
	return v;
}

jv jv_undef(const char *name, json_t *obj, int elem)
{
	jv v = { 0 };
	v.k = JV_UNDEF;
	snprintf(v.u_name, sizeof v.u_name, "%s", name ? name : "");
	v.u_obj = obj ? json_incref(obj) : NULL;
	v.u_elem = elem;
	return v;
}

jv jv_copy(const jv *v)
{
	jv c = *v;
	if (c.j)
		json_incref(c.j);
	if (c.u_obj)
		json_incref(c.u_obj);
	return c;
}

void jv_free(jv *v)
{
	if (v->j)
		json_decref(v->j);
	if (v->u_obj)
		json_decref(v->u_obj);
	memset(v, 0, sizeof *v);
}

int jv_truthy(const jv *v)
{
	if (v->k == JV_UNDEF)
		return 0;
	if (v->k != JV_JSON)
		return 1;
	const json_t *j = v->j;
	switch (json_typeof(j)) {
	case JSON_NULL: case JSON_FALSE: return 0;
	case JSON_TRUE: return 1;
	case JSON_INTEGER: return json_integer_value(j) != 0;
	case JSON_REAL: return json_real_value(j) != 0;
	case JSON_STRING: return json_string_length(j) != 0;
	case JSON_ARRAY: return json_array_size(j) != 0 || jinja_kind(j) == SEQ_GEN || jinja_kind(j) == SEQ_GEN_DONE;
	case JSON_OBJECT: return json_object_size(j) != 0;
	}
	return 1;
}

int json_py_num(const json_t *j, double *d, long long *i, int *is_int)
{
	if (json_is_integer(j))
		*i = json_integer_value(j), *d = (double)*i, *is_int = 1;
	else if (json_is_real(j))
		*d = json_real_value(j), *i = 0, *is_int = 0;
	else if (json_is_boolean(j))
		*i = json_is_true(j), *d = (double)*i, *is_int = 1;
	else
		return 0;
	return 1;
}

int json_py_eq(const json_t *a, const json_t *b)
{
	double da, db;
	long long ia, ib;
	int na, nb;
	if (json_py_num(a, &da, &ia, &na) && json_py_num(b, &db, &ib, &nb))
		return na && nb ? ia == ib : da == db;
	if (json_typeof(a) != json_typeof(b))
		return 0;
	switch (json_typeof(a)) {
	case JSON_NULL: return 1;
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
	case JSON_ARRAY:
		if (jinja_kind(a) != jinja_kind(b) || jinja_kind(a) >= SEQ_GEN)
			return a == b; /* a list is not a tuple; iterators and views equal only themselves */
		if (json_array_size(a) != json_array_size(b))
			return 0;
		for (size_t i = 0; i < json_array_size(a); i++)
			if (!json_py_eq(json_array_get(a, i), json_array_get(b, i)))
				return 0;
		return 1;
	case JSON_OBJECT: {
		if (json_object_size(a) != json_object_size(b))
			return 0;
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)a, k, x) {
			json_t *y = json_object_get(b, k);
			if (!y || !json_py_eq(x, y))
				return 0;
		}
		return 1;
	}
	default: return 0;
	}
}

int jv_eq(const jv *a, const jv *b)
{
	if (a->k == JV_UNDEF || b->k == JV_UNDEF)
		return a->k == b->k;
	if (a->k == JV_JSON && b->k == JV_JSON)
		return json_py_eq(a->j, b->j);
	if (a->k == JV_NS && b->k == JV_NS)
		return a->j == b->j;
	if (a->k == JV_MACRO && b->k == JV_MACRO)
		return a->mac == b->mac;
	return 0;
}

static int utf8_cmp(const json_t *a, const json_t *b)
{
	size_t la = json_string_length(a), lb = json_string_length(b);
	int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
	return c ? c : (la > lb) - (la < lb);
}

int json_py_lt(const json_t *a, const json_t *b, int *lt)
{
	double da, db;
	long long ia, ib;
	int na, nb;
	if (json_py_num(a, &da, &ia, &na) && json_py_num(b, &db, &ib, &nb)) {
		*lt = na && nb ? ia < ib : da < db;
		return 0;
	}
	if (json_is_string(a) && json_is_string(b)) {
		*lt = utf8_cmp(a, b) < 0;
		return 0;
	}
	if (json_is_array(a) && json_is_array(b)) {
		/* list < list, tuple < tuple; a list and a tuple, iterators, views: TypeError */
		if (jinja_kind(a) != jinja_kind(b) || jinja_kind(a) > SEQ_TUPLE)
			return -1;
		size_t n = json_array_size(a), m = json_array_size(b);
		for (size_t i = 0; i < n && i < m; i++) {
			json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
			if (!json_py_eq(x, y))
				return json_py_lt(x, y, lt);
		}
		*lt = n < m;
		return 0;
	}
	return -1;
}

const char *json_py_type(const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_NULL: return "NoneType";
	case JSON_TRUE: case JSON_FALSE: return "bool";
	case JSON_INTEGER: return "int";
	case JSON_REAL: return "float";
	case JSON_STRING: return "str";
	case JSON_ARRAY: return "list";
	case JSON_OBJECT: return "dict";
	}
	return "object";
}

void jv_undef_msg(const jv *v, char *buf, size_t n)
{
	if (!v->u_obj)
		snprintf(buf, n, "'%s' is undefined", v->u_name);
	else if (json_is_null(v->u_obj))
		snprintf(buf, n, "'None' has no attribute '%s'", v->u_name);
	else if (v->u_elem)
		snprintf(buf, n, "%s object has no element %s", json_py_type(v->u_obj), v->u_name);
	else
		snprintf(buf, n, "'%s object' has no attribute '%s'", json_py_type(v->u_obj), v->u_name);
}

void py_float_repr(double d, char *buf, size_t n)
{
	if (isnan(d)) { snprintf(buf, n, "nan"); return; }
	if (isinf(d)) { snprintf(buf, n, d < 0 ? "-inf" : "inf"); return; }
	char tmp[64];
	int prec;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	/* digits and decimal exponent of the shortest round-trip form */
	char digits[32];
	int nd = 0, exp10;
	for (const char *p = tmp; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	exp10 = atoi(strchr(tmp, 'e') + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	const char *sign = d < 0 ? "-" : "";
	if (exp10 < -4 || exp10 >= 16) {
		snprintf(buf, n, "%s%c%s%s%se%c%02d", sign, digits[0], nd > 1 ? "." : "", nd > 1 ? digits + 1 : "",
			 "", exp10 < 0 ? '-' : '+', abs(exp10));
	} else {
		size_t k = 0;
		if (*sign)
			buf[k++] = '-';
		if (exp10 < 0) {
			buf[k++] = '0', buf[k++] = '.';
			for (int z = 0; z < -exp10 - 1 && k + 2 < n; z++)
				buf[k++] = '0';
			for (int z = 0; z < nd && k + 2 < n; z++)
				buf[k++] = digits[z];
		} else {
			for (int z = 0; z <= exp10 || z < nd; z++) {
				if (z == exp10 + 1)
					buf[k++] = '.';
				buf[k++] = z < nd ? digits[z] : '0';
			}
			if (nd <= exp10 + 1)
				buf[k++] = '.', buf[k++] = '0';
		}
		buf[k] = 0;
	}
}

static mgt_status adds(mgt_buf *o, const char *s) { return mgt_buf_add(o, s, strlen(s)); }

/* str.isprintable() for one code point: not a control, format, surrogate, private-use,
 * unassigned, line/paragraph separator or space other than U+0020 */
static int py_printable(int32_t cp)
{
	if (cp == ' ')
		return 1;
	utf8proc_category_t k = utf8proc_category(cp);
	return !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
		 k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
		 k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
}

/* repr(str): quotes ' unless the text holds ' and no ", escapes \\ \n \r \t and the quote, and
 * writes what is not printable as \xNN, \uNNNN or \UNNNNNNNN. */
static mgt_status py_repr_str(const char *s, size_t n, mgt_buf *o)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	mgt_status st = mgt_buf_add(o, &q, 1);
	for (size_t i = 0; i < n && !st;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		if (l <= 0)
			l = 1, cp = (unsigned char)s[i];
		char e[16];
		if (cp == '\\') st = adds(o, "\\\\");
		else if (cp == q) { e[0] = '\\', e[1] = q, e[2] = 0; st = adds(o, e); }
		else if (cp == '\n') st = adds(o, "\\n");
		else if (cp == '\r') st = adds(o, "\\r");
		else if (cp == '\t') st = adds(o, "\\t");
		else if (!py_printable(cp)) {
			snprintf(e, sizeof e, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)cp);
			st = adds(o, e);
		} else st = mgt_buf_add(o, s + i, (size_t)l);
		i += (size_t)l;
	}
	return st ? st : mgt_buf_add(o, &q, 1);
}

static mgt_status py_repr(const json_t *j, mgt_buf *o)
{
	if (json_is_string(j))
		return py_repr_str(json_string_value(j), json_string_length(j), o);
	if (json_is_array(j)) {
		int kind = jinja_kind(j), tup = kind == SEQ_TUPLE;
		if (kind == SEQ_GEN || kind == SEQ_GEN_DONE || kind == SEQ_RANGE)
			return mgt_err(MGT_ERR_INPUT, "rendering a %s object as text is not supported by this engine "
				       "(Python prints its address; apply |list first)", jinja_kind_name(kind));
		mgt_status st = adds(o, kind >= SEQ_ITEMS ? jinja_kind_name(kind) : "");
		if (!st && kind >= SEQ_ITEMS)
			st = adds(o, "([");
		else if (!st)
			st = adds(o, tup ? "(" : "[");
		for (size_t i = 0; i < json_array_size(j) && !st; i++) {
			if (i)
				st = adds(o, ", ");
			if (!st)
				st = py_repr(json_array_get(j, i), o);
		}
		if (!st && tup && json_array_size(j) == 1)
			st = adds(o, ",");
		return st ? st : adds(o, kind >= SEQ_ITEMS ? "])" : tup ? ")" : "]");
	}
	if (json_is_object(j)) {
		mgt_status st = adds(o, "{");
		const char *k;
		json_t *x;
		int first = 1;
		json_object_foreach((json_t *)j, k, x) {
			if (!first && !st)
				st = adds(o, ", ");
			first = 0;
			if (!st)
				st = py_repr_str(k, strlen(k), o);
			if (!st)
				st = adds(o, ": ");
			if (!st)
				st = py_repr(x, o);
		}
		return st ? st : adds(o, "}");
	}
	return json_py_str(j, o);
}

mgt_status json_py_str(const json_t *j, mgt_buf *o)
{
	char b[64];
	switch (json_typeof(j)) {
	case JSON_NULL: return adds(o, "None");
	case JSON_TRUE: return adds(o, "True");
	case JSON_FALSE: return adds(o, "False");
	case JSON_INTEGER:
		snprintf(b, sizeof b, "%lld", (long long)json_integer_value(j));
		return adds(o, b);
	case JSON_REAL:
		py_float_repr(json_real_value(j), b, sizeof b);
		return adds(o, b);
	case JSON_STRING: return mgt_buf_add(o, json_string_value(j), json_string_length(j));
	default: return py_repr(j, o);
	}
}

mgt_status jv_str(const jv *v, mgt_buf *out)
{
	switch (v->k) {
	case JV_UNDEF: return MGT_OK;
	case JV_JSON: return json_py_str(v->j, out);
	case JV_NS: {
		mgt_status st = adds(out, "<Namespace ");
		if (!st)
			st = py_repr(v->j, out);
		return st ? st : adds(out, ">");
	}
	default:
		return mgt_err(MGT_ERR_INPUT, "rendering a %s as text is not supported by this engine",
			       v->k == JV_MACRO ? "macro" : "function");
	}
}

/* json.dumps string escaping with ensure_ascii=False */
static mgt_status dump_str(const char *s, size_t n, mgt_buf *o)
{
	mgt_status st = adds(o, "\"");
	for (size_t i = 0; i < n && !st; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];
		switch (c) {
		case '"': st = adds(o, "\\\""); break;
		case '\\': st = adds(o, "\\\\"); break;
		case '\n': st = adds(o, "\\n"); break;
		case '\r': st = adds(o, "\\r"); break;
		case '\t': st = adds(o, "\\t"); break;
		case '\b': st = adds(o, "\\b"); break;
		case '\f': st = adds(o, "\\f"); break;
		default:
			if (c < 0x20) {
				snprintf(e, sizeof e, "\\u%04x", c);
				st = adds(o, e);
			} else {
				st = mgt_buf_add(o, s + i, 1);
			}
		}
	}
	return st ? st : adds(o, "\"");
}

static mgt_status newline_indent(mgt_buf *o, int indent, int level)
{
	mgt_status st = adds(o, "\n");
	for (int i = 0; i < indent * level && !st; i++)
		st = adds(o, " ");
	return st;
}

static mgt_status dumps(const json_t *j, int indent, int level, mgt_buf *o)
{
	char b[64];
	const char *sep = indent >= 0 ? "," : ", ";
	mgt_status st = MGT_OK;
	switch (json_typeof(j)) {
	case JSON_NULL: return adds(o, "null");
	case JSON_TRUE: return adds(o, "true");
	case JSON_FALSE: return adds(o, "false");
	case JSON_INTEGER: return json_py_str(j, o);
	case JSON_REAL: {
		double d = json_real_value(j);
		if (isnan(d) || isinf(d))
			return adds(o, isnan(d) ? "NaN" : d < 0 ? "-Infinity" : "Infinity");
		py_float_repr(d, b, sizeof b);
		return adds(o, b);
	}
	case JSON_STRING: return dump_str(json_string_value(j), json_string_length(j), o);
	case JSON_ARRAY:
		if (jinja_kind(j) >= SEQ_GEN)
			return mgt_err(MGT_ERR_INPUT, "TypeError: Object of type %s is not JSON serializable", jinja_kind_name(jinja_kind(j)));
		if (!json_array_size(j))
			return adds(o, "[]");
		st = adds(o, "[");
		for (size_t i = 0; i < json_array_size(j) && !st; i++) {
			if (i)
				st = adds(o, sep);
			if (!st && indent >= 0)
				st = newline_indent(o, indent, level + 1);
			if (!st)
				st = dumps(json_array_get(j, i), indent, level + 1, o);
		}
		if (!st && indent >= 0)
			st = newline_indent(o, indent, level);
		return st ? st : adds(o, "]");
	case JSON_OBJECT: {
		if (!json_object_size(j))
			return adds(o, "{}");
		st = adds(o, "{");
		const char *k;
		json_t *x;
		int first = 1;
		json_object_foreach((json_t *)j, k, x) {
			if (!first && !st)
				st = adds(o, sep);
			first = 0;
			if (!st && indent >= 0)
				st = newline_indent(o, indent, level + 1);
			if (!st)
				st = dump_str(k, strlen(k), o);
			if (!st)
				st = adds(o, ": ");
			if (!st)
				st = dumps(x, indent, level + 1, o);
		}
		if (!st && indent >= 0)
			st = newline_indent(o, indent, level);
		return st ? st : adds(o, "}");
	}
	}
	return st;
}

mgt_status json_py_dumps(const json_t *j, int indent, mgt_buf *out)
{
	return dumps(j, indent, 0, out);
}
