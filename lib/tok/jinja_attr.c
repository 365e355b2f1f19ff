/* lib/tok/jinja_attr.c: attribute and item access (Jinja2 Environment.getattr / getitem: x.name
 * tries the Python attribute first, then the item; x[key] the item first, then the attribute),
 * and the methods of str, dict and list that chat templates call (Python semantics; the
 * sandbox refuses the mutating ones: ImmutableSandboxedEnvironment.is_safe_attribute). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja_impl.h"

static const char *const STR_M[] = { "strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize",
	"startswith", "endswith", "split", "replace", "join", "find", "count", "format", "index", "isdigit",
	"isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "rsplit", "partition", "rpartition",
	"zfill", "center", "ljust", "rjust", "casefold", "swapcase", "encode", "rfind", "rindex", "removeprefix",
	"removesuffix", "expandtabs", "translate", "format_map", "isnumeric", "isdecimal", "istitle", NULL };
static const char *const DICT_M[] = { "get", "items", "keys", "values", "pop", "popitem", "setdefault", "update",
	"clear", "copy", "fromkeys", NULL };
static const char *const LIST_M[] = { "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
	"index", "count", "copy", NULL };

static const char *find_name(const char *const *v, const char *s)
{
	for (; *v; v++)
		if (!strcmp(*v, s))
			return *v;
	return NULL;
}

static void bound(const json_t *self, const char *m, jv *out)
{
	memset(out, 0, sizeof *out);
	out->k = JV_FUNC, out->f_name = m, out->j = json_incref((json_t *)self);
}

mgt_status jinja_getattr(jctx *c, const jnode *n, const jv *obj, const char *name, jv *out)
{
	(void)c, (void)n;
	if (obj->k == JV_NS) {
		json_t *v = json_object_get(obj->j, name);
		*out = v ? jv_json(json_incref(v)) : jv_undef(name, NULL, 0);
		if (!v)
			snprintf(out->u_name, sizeof out->u_name, "%s", name);
		return MGT_OK;
	}
	if (obj->k != JV_JSON) {
		*out = jv_undef(name, NULL, 0);
		return MGT_OK;
	}
	const json_t *j = obj->j;
	const char *m = NULL;
	if (json_is_object(j))
		m = find_name(DICT_M, name);
	else if (json_is_string(j))
		m = find_name(STR_M, name);
	else if (json_is_array(j))
		m = find_name(LIST_M, name);
	if (m) {
		bound(j, m, out);
		return MGT_OK;
	}
	json_t *v = json_is_object(j) ? json_object_get(j, name) : NULL;
	*out = v ? jv_json(json_incref(v)) : jv_undef(name, (json_t *)j, 0);
	return MGT_OK;
}

/* index of code point k of a UTF-8 string (k may be negative); -1 when out of range */
static int str_index(const json_t *s, long long k, size_t *b, size_t *e)
{
	const char *p = json_string_value(s);
	size_t len = json_string_length(s), ncp = 0;
	for (size_t i = 0; i < len; i++)
		ncp += ((unsigned char)p[i] & 0xC0) != 0x80;
	if (k < 0)
		k += (long long)ncp;
	if (k < 0 || k >= (long long)ncp)
		return -1;
	long long cp = -1;
	for (size_t i = 0; i < len; i++) {
		if (((unsigned char)p[i] & 0xC0) != 0x80 && ++cp == k) {
			*b = i, *e = i + 1;
			while (*e < len && ((unsigned char)p[*e] & 0xC0) == 0x80)
				(*e)++;
			return 0;
		}
	}
	return -1;
}

mgt_status jinja_getitem(jctx *c, const jnode *n, const jv *obj, const jv *key, jv *out)
{
	if (obj->k == JV_NS && key->k == JV_JSON && json_is_string(key->j))
		return jinja_getattr(c, n, obj, json_string_value(key->j), out);
	char kr[64] = "";
	if (key->k == JV_JSON && !json_is_string(key->j)) {
		mgt_buf b = { 0 };
		json_py_str(key->j, &b);
		snprintf(kr, sizeof kr, "%.*s", (int)b.n, b.p ? b.p : "");
		free(b.p);
	}
	if (obj->k != JV_JSON || key->k != JV_JSON) {
		*out = key->k == JV_UNDEF ? jv_undef("", obj->k == JV_JSON ? obj->j : NULL, 1) : jv_undef(kr, NULL, 0);
		return MGT_OK;
	}
	const json_t *j = obj->j, *k = key->j;
	int kind = jinja_kind(j);
	if (json_is_array(j) && kind >= SEQ_GEN && kind != SEQ_RANGE)
		return jerr(c, n, "TypeError: '%s' object is not subscriptable", jinja_kind_name(kind));
	if (json_is_string(k)) {
		json_t *v = json_is_object(j) ? json_object_get(j, json_string_value(k)) : NULL;
		if (v) {
			*out = jv_json(json_incref(v));
			return MGT_OK;
		}
		return jinja_getattr(c, n, obj, json_string_value(k), out);
	}
	double d;
	long long i;
	int isint;
	if (json_py_num(k, &d, &i, &isint) && isint) {
		if (json_is_array(j)) {
			long long len = (long long)json_array_size(j);
			if (i < 0)
				i += len;
			if (i >= 0 && i < len) {
				*out = jv_json(json_incref(json_array_get(j, (size_t)i)));
				return MGT_OK;
			}
		} else if (json_is_string(j)) {
			size_t b, e;
			if (!str_index(j, i, &b, &e)) {
				*out = jv_json(json_stringn_nocheck(json_string_value(j) + b, e - b));
				return MGT_OK;
			}
		}
	}
	*out = jv_undef(kr, (json_t *)j, 1);
	return MGT_OK;
}

/* ---- str methods ---------------------------------------------------------------------------- */

int jinja_py_space(int32_t cp)
{
	return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
	       cp == 0x3000;
}

static int32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
	utf8proc_int32_t cp;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
	if (k <= 0)
		k = 1, cp = (unsigned char)s[i];
	*len = (size_t)k;
	return cp;
}

/* does the code point at s[i] belong to the strip set (chars, or whitespace when chars is NULL) */
static int in_set(int32_t cp, const json_t *chars)
{
	if (!chars)
		return jinja_py_space(cp);
	const char *s = json_string_value(chars);
	size_t n = json_string_length(chars), l;
	for (size_t i = 0; i < n; i += l)
		if (cp_at(s, n, i, &l) == cp)
			return 1;
	return 0;
}

mgt_status jinja_strip(const char *s, size_t n, const json_t *chars, int left, int right, jv *out)
{
	size_t b = 0, e = n, l;
	while (left && b < e && in_set(cp_at(s, n, b, &l), chars))
		b += l;
	while (right && e > b) {
		size_t p = e - 1;
		while (p > b && ((unsigned char)s[p] & 0xC0) == 0x80)
			p--;
		if (!in_set(cp_at(s, n, p, &l), chars))
			break;
		e = p;
	}
	*out = jv_json(json_stringn_nocheck(s + b, e - b));
	return MGT_OK;
}

static int is_cased(int32_t cp)
{
	utf8proc_category_t k = utf8proc_category(cp);
	return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Code points whose Python case mapping is not utf8proc's one-to-one mapping (Unicode
 * SpecialCasing.txt's unconditional entries, and capital sigma's Final_Sigma rule). */
static int special_casing(int32_t cp)
{
	return cp == 0x0130 || cp == 0x0149 || cp == 0x01F0 || cp == 0x0390 || cp == 0x03A3 || cp == 0x03B0 ||
	       cp == 0x0587 || (cp >= 0x1E96 && cp <= 0x1E9A) || (cp >= 0x1F50 && cp <= 0x1F56) ||
	       (cp >= 0x1F80 && cp <= 0x1FFC && cp != 0x1FB8 && cp != 0x1FB9 && cp != 0x1FBA && cp != 0x1FBB) ||
	       (cp >= 0xFB00 && cp <= 0xFB06) || (cp >= 0xFB13 && cp <= 0xFB17);
}

/* mode: 'u' upper, 'l' lower, 't' title (str.title), 'f' the title filter (Jinja2 do_title:
 * words begin after - ( { [ < or whitespace), 'c' capitalize */
mgt_status jinja_case(const char *s, size_t n, int mode, jv *out)
{
	char *o = malloc(4 * n + 8);
	if (!o)
		return MGT_ERR_NOMEM;
	size_t k = 0, l;
	int prev_cased = 0, first = 1;
	for (size_t i = 0; i < n; i += l) {
		int32_t cp = cp_at(s, n, i, &l), r;
		int up;
		if (mode == 'u')
			up = 1;
		else if (mode == 'l')
			up = 0;
		else if (mode == 't')
			up = !prev_cased;
		else if (mode == 'f')
			up = first;
		else
			up = i == 0;
		if (mode == 'f')
			first = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jinja_py_space(cp);
		prev_cased = is_cased(cp);
		if (cp == 0xDF && up && mode == 'u') {
			o[k++] = 'S', o[k++] = 'S';
			continue;
		}
		if (special_casing(cp) || (cp == 0xDF && up)) {
			free(o);
			return mgt_err(MGT_ERR_INPUT, "case mapping of U+%04X (Unicode SpecialCasing) is not supported by this engine", (unsigned)cp);
		}
		r = !up ? utf8proc_tolower(cp) : (mode == 'u' || mode == 'f') ? utf8proc_toupper(cp) : utf8proc_totitle(cp);
		k += (size_t)utf8proc_encode_char(r, (utf8proc_uint8_t *)o + k);
	}
	*out = jv_json(json_stringn_nocheck(o, k));
	free(o);
	return MGT_OK;
}

static mgt_status m_split(jctx *c, const jnode *n, const json_t *self, jv *a, size_t na, jv *out)
{
	const char *s = json_string_value(self);
	size_t len = json_string_length(self), l;
	long long maxs = -1;
	double d;
	int isint;
	if (na > 1 && !(a[1].k == JV_JSON && json_py_num(a[1].j, &d, &maxs, &isint) && isint))
		return jerr(c, n, "TypeError: split(): maxsplit must be an integer");
	json_t *r = json_array();
	if (na == 0 || (a[0].k == JV_JSON && json_is_null(a[0].j))) {
		size_t i = 0;
		for (;;) {
			while (i < len && jinja_py_space(cp_at(s, len, i, &l)))
				i += l;
			if (i >= len)
				break;
			size_t b = i;
			if (maxs >= 0 && (long long)json_array_size(r) >= maxs) {
				size_t e = len;
				while (e > b && jinja_py_space((unsigned char)s[e - 1]))
					e--;
				json_array_append_new(r, json_stringn_nocheck(s + b, e - b));
				break;
			}
			while (i < len && !jinja_py_space(cp_at(s, len, i, &l)))
				i += l;
			json_array_append_new(r, json_stringn_nocheck(s + b, i - b));
		}
	} else {
		if (a[0].k != JV_JSON || !json_is_string(a[0].j) || !json_string_length(a[0].j)) {
			json_decref(r);
			return jerr(c, n, "ValueError: split(): the separator must be a non-empty string");
		}
		const char *sep = json_string_value(a[0].j);
		size_t sl = json_string_length(a[0].j), b = 0;
		for (size_t i = 0; i + sl <= len;) {
			if ((maxs < 0 || (long long)json_array_size(r) < maxs) && !memcmp(s + i, sep, sl)) {
				json_array_append_new(r, json_stringn_nocheck(s + b, i - b));
				i += sl, b = i;
			} else {
				i++;
			}
		}
		json_array_append_new(r, json_stringn_nocheck(s + b, len - b));
	}
	*out = jv_json(r);
	return MGT_OK;
}

mgt_status jinja_replace(const json_t *self, const json_t *old, const json_t *new, long long count, jv *out)
{
	const char *s = json_string_value(self), *o = json_string_value(old), *w = json_string_value(new);
	size_t len = json_string_length(self), ol = json_string_length(old), wl = json_string_length(new);
	mgt_buf b = { 0 };
	mgt_status st = MGT_OK;
	long long done = 0;
	for (size_t i = 0; i <= len && !st;) {
		int hit = (count < 0 || done < count) && i + ol <= len && !memcmp(s + i, o, ol);
		if (hit) {
			st = mgt_buf_add(&b, w, wl), done++;
			if (ol) {
				i += ol;
				continue;
			}
		}
		if (i == len)
			break;
		size_t l = 1;
		while (i + l < len && ((unsigned char)s[i + l] & 0xC0) == 0x80)
			l++;
		if (!st)
			st = mgt_buf_add(&b, s + i, l);
		i += l;
	}
	if (!st)
		*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
	free(b.p);
	return st;
}

static int affix(const json_t *self, const json_t *x, int end)
{
	size_t n = json_string_length(self), k = json_string_length(x);
	return k <= n && !memcmp(json_string_value(self) + (end ? n - k : 0), json_string_value(x), k);
}

static mgt_status m_affix(jctx *c, const jnode *n, const json_t *self, jv *a, size_t na, int end, jv *out)
{
	if (na != 1 || a[0].k != JV_JSON || !(json_is_string(a[0].j) || json_is_array(a[0].j)))
		return jerr(c, n, "TypeError: %s takes a string or a tuple of strings", end ? "endswith" : "startswith");
	int r = 0;
	if (json_is_string(a[0].j))
		r = affix(self, a[0].j, end);
	for (size_t i = 0; json_is_array(a[0].j) && i < json_array_size(a[0].j); i++) {
		json_t *x = json_array_get(a[0].j, i);
		if (!json_is_string(x))
			return jerr(c, n, "TypeError: %s: a tuple of strings expected", end ? "endswith" : "startswith");
		r |= affix(self, x, end);
	}
	*out = jv_json(json_boolean(r));
	return MGT_OK;
}

static int is_str(const jv *v) { return v->k == JV_JSON && json_is_string(v->j); }

static mgt_status str_method(jctx *c, const jnode *n, const char *m, const json_t *self, jv *a, size_t na, jv *out)
{
	const char *s = json_string_value(self);
	size_t len = json_string_length(self);
	if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
		if (na > 1 || (na == 1 && !is_str(&a[0]) && !(a[0].k == JV_JSON && json_is_null(a[0].j))))
			return jerr(c, n, "TypeError: %s arg must be None or str", m);
		const json_t *chars = na && is_str(&a[0]) ? a[0].j : NULL;
		return jinja_strip(s, len, chars, m[0] != 'r', m[0] != 'l', out);
	}
	if (!na && (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize")))
	{
		mgt_status st = jinja_case(s, len, m[0] == 'u' ? 'u' : m[0] == 'l' ? 'l' : m[0] == 't' ? 't' : 'c', out);
		return st == MGT_ERR_INPUT ? jerr(c, n, "%s", mgt_err_msg()) : st;
	}
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
		return m_affix(c, n, self, a, na, m[0] == 'e', out);
	if (!strcmp(m, "split") && na <= 2)
		return m_split(c, n, self, a, na, out);
	if (!strcmp(m, "replace") && (na == 2 || na == 3) && is_str(&a[0]) && is_str(&a[1])) {
		long long cnt = -1;
		double d;
		int isint;
		if (na == 3 && !(a[2].k == JV_JSON && json_py_num(a[2].j, &d, &cnt, &isint) && isint))
			return jerr(c, n, "TypeError: replace(): count must be an integer");
		return jinja_replace(self, a[0].j, a[1].j, cnt, out);
	}
	if (!strcmp(m, "join") && na == 1) {
		json_t *items;
		mgt_status st = jinja_iter_items(c, n, &a[0], &items);
		if (st)
			return st;
		mgt_buf b = { 0 };
		for (size_t i = 0; !st && i < json_array_size(items); i++) {
			json_t *x = json_array_get(items, i);
			if (!json_is_string(x))
				st = jerr(c, n, "TypeError: sequence item %zu: expected str instance, %s found", i, json_py_type(x));
			else if (i)
				st = mgt_buf_add(&b, s, len);
			if (!st)
				st = mgt_buf_add(&b, json_string_value(x), json_string_length(x));
		}
		if (!st)
			*out = jv_json(json_stringn_nocheck(b.p ? b.p : "", b.n));
		free(b.p), json_decref(items);
		return st;
	}
	return jerr(c, n, "str.%s() with %zu argument(s) is not supported by this engine", m, na);
}

static mgt_status dict_method(jctx *c, const jnode *n, const char *m, const json_t *self, jv *a, size_t na, jv *out)
{
	if (!strcmp(m, "get") && (na == 1 || na == 2)) {
		json_t *v = is_str(&a[0]) ? json_object_get(self, json_string_value(a[0].j)) : NULL;
		*out = v ? jv_json(json_incref(v)) : na == 2 ? jv_copy(&a[1]) : jv_json(json_null());
		return MGT_OK;
	}
	if (na == 0 && (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values"))) {
		json_t *r = json_array();
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)self, k, x) {
			if (m[0] == 'k')
				json_array_append_new(r, json_string(k));
			else if (m[0] == 'v')
				json_array_append(r, x);
			else
				json_array_append_new(r, jinja_mark(json_pack("[sO]", k, x), SEQ_TUPLE));
		}
		*out = jv_json(jinja_mark(r, m[0] == 'k' ? SEQ_KEYS : m[0] == 'v' ? SEQ_VALUES : SEQ_ITEMS));
		return MGT_OK;
	}
	if (!strcmp(m, "get") || !strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values"))
		return jerr(c, n, "dict.%s() with %zu argument(s) is not supported by this engine", m, na);
	return jerr(c, n, "SecurityError: access to attribute '%s' of 'dict' object is unsafe.", m);
}

mgt_status jinja_call_method(jctx *c, const jnode *n, const jv *fn, jv *a, size_t na, char **kwn, jv *kwv,
			     size_t nk, jv *out)
{
	(void)kwn, (void)kwv;
	const json_t *self = fn->j;
	if (nk)
		return jerr(c, n, "keyword arguments to %s.%s() are not supported by this engine", json_py_type(self), fn->f_name);
	if (json_is_string(self))
		return str_method(c, n, fn->f_name, self, a, na, out);
	if (json_is_object(self))
		return dict_method(c, n, fn->f_name, self, a, na, out);
	if ((!strcmp(fn->f_name, "index") || !strcmp(fn->f_name, "count")) && na == 1) {
		long long k = 0, at = -1;
		for (size_t i = 0; i < json_array_size(self); i++) {
			jv e = jv_json(json_array_get(self, i));
			if (jv_eq(&a[0], &e)) {
				k++;
				if (at < 0)
					at = (long long)i;
			}
		}
		if (fn->f_name[0] == 'i' && at < 0)
			return jerr(c, n, "ValueError: list.index(x): x not in list");
		*out = jv_json(json_integer(fn->f_name[0] == 'i' ? at : k));
		return MGT_OK;
	}
	if (!strcmp(fn->f_name, "index") || !strcmp(fn->f_name, "count") || !strcmp(fn->f_name, "copy"))
		return jerr(c, n, "list.%s() with %zu argument(s) is not supported by this engine", fn->f_name, na);
	return jerr(c, n, "SecurityError: access to attribute '%s' of 'list' object is unsafe.", fn->f_name);
}
