/* lib/eval/taskfile.c: zero-shot task files (JSONL, mgt-tasks(5)) into requests, as
 * lm-evaluation-harness builds them for lambada_openai (lambada/lambada_openai.yaml), hellaswag
 * (hellaswag/hellaswag.yaml, utils.py) and its generic loglikelihood / multiple_choice tasks
 * (api/task.py construct_requests: target_delimiter " " for multiple choice). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <utf8proc.h>

#include "data/data.h"
#include "eval.h"

static const char *const type_names[] = { "auto", "lambada", "hellaswag", "cloze", "choice" };

const char *mgt_task_type_name(mgt_task_type t)
{
	return (unsigned)t < sizeof type_names / sizeof *type_names ? type_names[t] : "?";
}

mgt_status mgt_task_type_parse(const char *s, mgt_task_type *out)
{
	for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++)
		if (!strcmp(s, type_names[i])) {
			*out = (mgt_task_type)i;
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_USAGE, "--task-type %s: expected auto, lambada, hellaswag, cloze or choice", s);
}

/* Keys each type requires, then those it ignores (NULL-separated lists). */
static const char *const req_keys[][6] = {
	[MGT_TASK_LAMBADA] = { "text" },
	[MGT_TASK_HELLASWAG] = { "activity_label", "ctx_a", "ctx_b", "endings", "label" },
	[MGT_TASK_CLOZE] = { "context", "continuation" },
	[MGT_TASK_CHOICE] = { "context", "choices", "gold" },
};
static const char *const opt_keys[][7] = {
	[MGT_TASK_LAMBADA] = { "id" },
	[MGT_TASK_HELLASWAG] = { "id", "ind", "ctx", "source_id", "split", "split_type" },
	[MGT_TASK_CLOZE] = { "id" },
	[MGT_TASK_CHOICE] = { "id" },
};

static bool in_list(const char *const *list, size_t n, const char *k)
{
	for (size_t i = 0; i < n && list[i]; i++)
		if (!strcmp(list[i], k)) return true;
	return false;
}

/* Where we are, for messages. */
typedef struct { const char *path; uint64_t line; } where;

static mgt_status bad(const where *w, const char *what)
{
	return mgt_err(MGT_ERR_INPUT, "%s:%llu: %s", w->path, (unsigned long long)w->line, what);
}

static mgt_task_type detect(const json_t *o)
{
	if (json_object_get(o, "text")) return MGT_TASK_LAMBADA;
	if (json_object_get(o, "endings")) return MGT_TASK_HELLASWAG;
	if (json_object_get(o, "choices")) return MGT_TASK_CHOICE;
	if (json_object_get(o, "continuation")) return MGT_TASK_CLOZE;
	return MGT_TASK_AUTO;
}

/* Every required key present, no key outside the required and ignored ones. */
static mgt_status check_keys(const json_t *o, mgt_task_type t, const where *w)
{
	char msg[512];
	for (size_t i = 0; i < 6 && req_keys[t][i]; i++)
		if (!json_object_get(o, req_keys[t][i])) {
			snprintf(msg, sizeof msg, "missing key \"%s\" (a %s task's lines have", req_keys[t][i],
				 mgt_task_type_name(t));
			for (size_t j = 0; j < 6 && req_keys[t][j]; j++)
				snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " \"%s\"", req_keys[t][j]);
			snprintf(msg + strlen(msg), sizeof msg - strlen(msg), ")");
			return bad(w, msg);
		}
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v) {
		if (in_list(req_keys[t], 6, k) || in_list(opt_keys[t], 7, k)) continue;
		snprintf(msg, sizeof msg, "unknown key \"%.100s\" for a %s task (mgt-tasks(5))", k, mgt_task_type_name(t));
		return bad(w, msg);
	}
	return MGT_OK;
}

/* A string value of valid UTF-8. */
static mgt_status get_str(const json_t *o, const char *key, const where *w, const char **s, size_t *n)
{
	const json_t *v = json_object_get(o, key);
	char msg[160];
	if (!json_is_string(v)) {
		snprintf(msg, sizeof msg, "\"%s\": expected a string", key);
		return bad(w, msg);
	}
	*s = json_string_value(v);
	*n = json_string_length(v);
	return MGT_OK;
}

/* A non-negative integer, or a string of decimal digits (HellaSwag's "label"). */
static mgt_status get_index(const json_t *o, const char *key, bool digits_ok, const where *w, int64_t *out)
{
	const json_t *v = json_object_get(o, key);
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	char msg[160];
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = json_integer_value(v);
		return MGT_OK;
	}
	if (digits_ok && s && *s && strlen(s) < 10 && strspn(s, "0123456789") == strlen(s)) {
		*out = atoll(s);
		return MGT_OK;
	}
	snprintf(msg, sizeof msg, "\"%s\": expected a non-negative integer%s", key, digits_ok ? " (or a string of digits)" : "");
	return bad(w, msg);
}

static char *dup_n(const char *s, size_t n)
{
	char *p = mgt_malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

/* ex->conts[i] = delim + choice, its code points without delim in choice_chars. */
static mgt_status set_cont(mgt_task_example *ex, size_t i, const char *delim, const char *s, size_t n)
{
	size_t d = strlen(delim);
	char *p = mgt_malloc(d + n + 1);
	if (!p) return MGT_ERR_NOMEM;
	memcpy(p, delim, d);
	memcpy(p + d, s, n);
	p[d + n] = 0;
	ex->conts[i] = p;
	ex->choice_chars[i] = mgt_text_len(s, n);
	return MGT_OK;
}

static mgt_status alloc_conts(mgt_task_example *ex, size_t n)
{
	ex->n_conts = n;
	ex->conts = calloc(n, sizeof *ex->conts);
	ex->choice_chars = calloc(n, sizeof *ex->choice_chars);
	return ex->conts && ex->choice_chars ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "out of memory");
}

static mgt_status make_lambada(const json_t *o, const where *w, mgt_task_example *ex)
{
	const char *s;
	size_t n;
	mgt_status st = get_str(o, "text", w, &s, &n);
	if (st) return st;
	size_t cut = n;
	while (cut > 0 && s[cut - 1] != ' ') cut--;
	/* text.split(' ')[:-1] joined: everything before the last ' '; target ' ' + the rest */
	ex->context = dup_n(s, cut ? cut - 1 : 0);
	if (!ex->context || (st = alloc_conts(ex, 1))) return MGT_ERR_NOMEM;
	return set_cont(ex, 0, " ", s + cut, n - cut);
}

static mgt_status make_cloze(const json_t *o, const where *w, mgt_task_example *ex)
{
	const char *c, *t;
	size_t cn, tn;
	mgt_status st = get_str(o, "context", w, &c, &cn);
	if (!st) st = get_str(o, "continuation", w, &t, &tn);
	if (st) return st;
	if (!tn) return bad(w, "\"continuation\": empty (nothing to score)");
	if (!(ex->context = dup_n(c, cn)) || alloc_conts(ex, 1)) return MGT_ERR_NOMEM;
	return set_cont(ex, 0, "", t, tn);
}

/* The strings of array key (at least 2), each through preprocess when hs. */
static mgt_status set_choices(const json_t *o, const char *key, bool hs, const where *w, mgt_task_example *ex)
{
	const json_t *a = json_object_get(o, key);
	char msg[200];
	if (!json_is_array(a) || json_array_size(a) < 2) {
		snprintf(msg, sizeof msg, "\"%s\": expected an array of at least 2 strings%s", key,
			 json_is_array(a) ? " (a choice list of length 1 scores nothing)" : "");
		return bad(w, msg);
	}
	if (alloc_conts(ex, json_array_size(a))) return MGT_ERR_NOMEM;
	for (size_t i = 0; i < ex->n_conts; i++) {
		const json_t *v = json_array_get(a, i);
		if (!json_is_string(v)) {
			snprintf(msg, sizeof msg, "\"%s\"[%zu]: expected a string", key, i);
			return bad(w, msg);
		}
		mgt_buf b = { 0 };
		mgt_status st = hs ? mgt_task_hellaswag_preprocess(json_string_value(v), json_string_length(v), &b)
				   : mgt_buf_add(&b, json_string_value(v), json_string_length(v));
		if (!st) st = set_cont(ex, i, " ", b.p ? b.p : "", b.n);
		free(b.p);
		if (st) return st;
	}
	return MGT_OK;
}

static mgt_status check_gold(const where *w, const mgt_task_example *ex, const char *key)
{
	char msg[160];
	if (ex->gold < (int64_t)ex->n_conts) return MGT_OK;
	snprintf(msg, sizeof msg, "\"%s\": %lld is out of range: expected 0 to %zu (the index of the right choice)", key,
		 (long long)ex->gold, ex->n_conts - 1);
	return bad(w, msg);
}

static mgt_status make_choice(const json_t *o, const where *w, mgt_task_example *ex)
{
	const char *c;
	size_t cn;
	mgt_status st = get_str(o, "context", w, &c, &cn);
	if (!st) st = set_choices(o, "choices", false, w, ex);
	if (!st) st = get_index(o, "gold", false, w, &ex->gold);
	if (!st) st = check_gold(w, ex, "gold");
	if (!st && !(ex->context = dup_n(c, cn))) st = MGT_ERR_NOMEM;
	return st;
}

/* Python str.capitalize on UTF-8 (simple case mappings): the first code point title-cased, the
 * rest lower-cased. */
static mgt_status capitalize(const char *s, size_t n, mgt_buf *out)
{
	size_t i = 0;
	for (bool first = true; i < n; first = false) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		if (k < 1) return mgt_buf_add(out, s + i, n - i); /* checked valid by jansson */
		utf8proc_uint8_t e[4];
		utf8proc_ssize_t m = utf8proc_encode_char(first ? utf8proc_totitle(cp) : utf8proc_tolower(cp), e);
		if (mgt_buf_add(out, e, (size_t)m)) return MGT_ERR_NOMEM;
		i += (size_t)k;
	}
	return MGT_OK;
}

static mgt_status make_hellaswag(const json_t *o, const where *w, mgt_task_example *ex)
{
	const char *al, *a, *b;
	size_t aln, an, bn;
	mgt_buf q = { 0 }, p = { 0 };
	mgt_status st = get_str(o, "activity_label", w, &al, &aln);
	if (!st) st = get_str(o, "ctx_a", w, &a, &an);
	if (!st) st = get_str(o, "ctx_b", w, &b, &bn);
	if (!st) st = mgt_buf_add(&q, al, aln);
	if (!st) st = mgt_buf_add(&q, ": ", 2);
	if (!st) st = mgt_buf_add(&q, a, an);
	if (!st) st = mgt_buf_add(&q, " ", 1);
	if (!st) st = capitalize(b, bn, &q);
	if (!st) st = mgt_task_hellaswag_preprocess(q.p, q.n, &p);
	if (!st && !(ex->context = dup_n(p.p ? p.p : "", p.n))) st = MGT_ERR_NOMEM;
	free(q.p);
	free(p.p);
	if (!st) st = set_choices(o, "endings", true, w, ex);
	if (!st) st = get_index(o, "label", true, w, &ex->gold);
	if (!st) st = check_gold(w, ex, "label");
	return st;
}

/* s with every occurrence of from replaced by to (Python str.replace: left to right, not overlapping). */
static mgt_status replace_all(mgt_buf *s, const char *from, const char *to)
{
	mgt_buf out = { 0 };
	size_t fn = strlen(from), tn = strlen(to);
	for (size_t i = 0; i < s->n;) {
		bool hit = i + fn <= s->n && !memcmp(s->p + i, from, fn);
		if (mgt_buf_add(&out, hit ? to : s->p + i, hit ? tn : 1)) {
			free(out.p);
			return MGT_ERR_NOMEM;
		}
		i += hit ? fn : 1;
	}
	free(s->p);
	*s = out;
	return MGT_OK;
}

/* re.sub(r"\[.*?\]", "", s): a '[' up to the next ']' on the same line goes. */
static void drop_brackets(mgt_buf *s)
{
	size_t o = 0;
	for (size_t i = 0; i < s->n;) {
		size_t j = i + 1;
		if (s->p[i] == '[') {
			while (j < s->n && s->p[j] != ']' && s->p[j] != '\n') j++;
			if (j < s->n && s->p[j] == ']') {
				i = j + 1;
				continue;
			}
		}
		s->p[o++] = s->p[i++];
	}
	s->n = o;
}

/* s[0, n) without leading and trailing white space (Python strip()). */
static void strip(const char **s, size_t *n)
{
	size_t b = 0, e = 0, k;
	bool seen = false;
	for (size_t i = 0; i < *n; i += k) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)*s + i, (utf8proc_ssize_t)(*n - i), &cp);
		k = r > 0 ? (size_t)r : 1;
		if (mgt_text_isspace(r > 0 ? cp : -1)) continue;
		if (!seen) b = i;
		seen = true;
		e = i + k;
	}
	*s += seen ? b : *n;
	*n = seen ? e - b : 0;
}

mgt_status mgt_task_hellaswag_preprocess(const char *s, size_t n, mgt_buf *out)
{
	mgt_buf t = { 0 };
	strip(&s, &n);
	mgt_status st = mgt_buf_add(&t, s, n);
	if (!st) st = replace_all(&t, " [title]", ". ");
	if (!st) drop_brackets(&t);
	if (!st) st = replace_all(&t, "  ", " ");
	if (!st) st = mgt_buf_add(out, t.p ? t.p : "", t.n);
	free(t.p);
	return st;
}

static void free_example(mgt_task_example *ex)
{
	for (size_t i = 0; ex->conts && i < ex->n_conts; i++) free(ex->conts[i]);
	free(ex->conts);
	free(ex->choice_chars);
	free(ex->context);
}

void mgt_task_free(mgt_task *t)
{
	if (!t) return;
	for (size_t i = 0; i < t->n; i++) free_example(&t->ex[i]);
	free(t->ex);
	free(t->path);
	free(t->name);
	free(t);
}

/* One line into ex (kept) or checked only (ex NULL). */
static mgt_status parse_line(mgt_task *t, const char *line, size_t len, const where *w, mgt_task_example *ex)
{
	if (strspn(line, " \t\r") >= len)
		return bad(w, "empty line: expected one JSON object a line (mgt-tasks(5))");
	json_error_t je;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
	char msg[400];
	if (!o) {
		snprintf(msg, sizeof msg, "malformed JSON at column %d: %s", je.column, je.text);
		return bad(w, msg);
	}
	mgt_status st = MGT_OK;
	if (!json_is_object(o)) st = bad(w, "expected a JSON object");
	if (!st && t->type == MGT_TASK_AUTO && (t->type = detect(o)) == MGT_TASK_AUTO)
		st = bad(w, "cannot tell the task's kind: expected the key \"text\" (lambada), \"endings\" (hellaswag), "
			 "\"choices\" (choice) or \"continuation\" (cloze); or give --task-type");
	if (!st) st = check_keys(o, t->type, w);
	mgt_task_example tmp = { 0 };
	mgt_task_example *e = ex ? ex : &tmp;
	memset(e, 0, sizeof *e);
	e->line = w->line;
	if (!st) switch (t->type) {
	case MGT_TASK_LAMBADA: st = make_lambada(o, w, e); break;
	case MGT_TASK_HELLASWAG: st = make_hellaswag(o, w, e); break;
	case MGT_TASK_CLOZE: st = make_cloze(o, w, e); break;
	default: st = make_choice(o, w, e); break;
	}
	if (!ex || st) free_example(e);
	if (st && ex) memset(ex, 0, sizeof *ex);
	json_decref(o);
	return st;
}

static mgt_status set_names(mgt_task *t, const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t n = strlen(base);
	static const char *const ext[] = { ".jsonl.zst", ".jsonl", ".json" };
	for (size_t i = 0; i < 3; i++) {
		size_t e = strlen(ext[i]);
		if (n > e && !strcmp(base + n - e, ext[i])) {
			n -= e;
			break;
		}
	}
	t->path = mgt_strdup(path);
	t->name = dup_n(base, n);
	return t->path && t->name ? MGT_OK : MGT_ERR_NOMEM;
}

static mgt_status read_lines(mgt_task *t, mgt_jsonl *r, int64_t limit)
{
	size_t cap = 0;
	for (;;) {
		const char *line;
		size_t len;
		mgt_status st = mgt_jsonl_next(r, &line, &len);
		if (st || !line) return st;
		where w = { t->path, mgt_jsonl_lineno(r) };
		bool keep = limit < 0 || (int64_t)t->n < limit;
		if (keep && t->n == cap) {
			cap = cap ? 2 * cap : 64;
			mgt_task_example *p = mgt_realloc(t->ex, cap * sizeof *p);
			if (!p) return MGT_ERR_NOMEM;
			t->ex = p;
		}
		st = parse_line(t, line, len, &w, keep ? &t->ex[t->n] : NULL);
		if (st) return st;
		t->n += keep;
		t->n_total++;
	}
}

mgt_status mgt_task_load(mgt_task **out, const char *path, mgt_task_type type, int64_t limit)
{
	mgt_task *t = calloc(1, sizeof *t);
	mgt_jsonl *r = NULL;
	*out = NULL;
	if (!t) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	t->type = type;
	mgt_status st = set_names(t, path);
	if (!st) st = mgt_jsonl_open(&r, path);
	if (!st) st = read_lines(t, r, limit);
	if (!st && !t->n_total) st = mgt_err(MGT_ERR_INPUT, "%s: no examples (an empty file)", path);
	mgt_jsonl_close(r);
	if (st) {
		mgt_task_free(t);
		return st;
	}
	t->multiple_choice = t->type == MGT_TASK_HELLASWAG || t->type == MGT_TASK_CHOICE;
	*out = t;
	return MGT_OK;
}
