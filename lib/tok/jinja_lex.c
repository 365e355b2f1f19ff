/* lib/tok/jinja_lex.c: the chat-template lexer.  Jinja2 3.1 lexer.py with the options
 * transformers sets: trim_blocks (one newline after %} and #} dropped), lstrip_blocks (spaces and
 * tabs between a line start and {% or {# dropped, unless {%+), keep_trailing_newline off (one
 * trailing newline of the source dropped), and the {%- -%} {{- -}} {#- -#} controls (all
 * whitespace before / after the tag dropped).  Newlines (\r\n, \r) become \n.  Inside tags,
 * }} and %} close the tag only outside brackets, as in Jinja2. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

typedef struct {
	const char *s;
	size_t n, p;
	int line;
	const char *name;
	jtoks *out;
} lexer;

static mgt_status push(lexer *L, int kind, const char *s, size_t n)
{
	jtoks *t = L->out;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		jtok *v = mgt_realloc(t->v, cap * sizeof *v);
		if (!v)
			return MGT_ERR_NOMEM;
		t->v = v, t->cap = cap;
	}
	jtok *k = &t->v[t->n++];
	memset(k, 0, sizeof *k);
	k->kind = kind, k->line = L->line;
	if (kind == JT_DATA || kind == JT_STRING) {
		if (!(k->s = mgt_malloc(n + 1)))
			return MGT_ERR_NOMEM;
		memcpy(k->s, s, n), k->s[n] = 0, k->n = n;
	} else {
		k->s = (char *)s, k->n = n;
	}
	return MGT_OK;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int count_nl(const char *s, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

/* Python's str escapes as Jinja2 decodes string literals ("unicode-escape"). */
static size_t put_utf8(char *o, unsigned long cp)
{
	if (cp < 0x80) { o[0] = (char)cp; return 1; }
	if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63));
		o[2] = (char)(0x80 | (cp & 63)); return 3;
	}
	o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 63));
	o[2] = (char)(0x80 | (cp >> 6 & 63)); o[3] = (char)(0x80 | (cp & 63)); return 4;
}

static int hexval(const char *s, int k, unsigned long *v)
{
	*v = 0;
	for (int i = 0; i < k; i++) {
		if (!isxdigit((unsigned char)s[i]))
			return -1;
		*v = *v * 16 + (unsigned long)(isdigit((unsigned char)s[i]) ? s[i] - '0' : (tolower((unsigned char)s[i]) - 'a' + 10));
	}
	return 0;
}

static mgt_status lex_string(lexer *L)
{
	char q = L->s[L->p];
	size_t i = L->p + 1, o = 0;
	char *buf = mgt_malloc(L->n - L->p + 4);
	if (!buf)
		return MGT_ERR_NOMEM;
	int line0 = L->line;
	for (;; i++) {
		if (i >= L->n) {
			free(buf);
			return mgt_err(MGT_ERR_VOCAB, "%s:%d: unterminated string literal", L->name, line0);
		}
		char c = L->s[i];
		if (c == q)
			break;
		if (c == '\n')
			L->line++;
		if (c != '\\' || i + 1 >= L->n) {
			buf[o++] = c;
			continue;
		}
		char e = L->s[++i];
		unsigned long v;
		int k = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
		switch (e) {
		case 'n': buf[o++] = '\n'; break;
		case 't': buf[o++] = '\t'; break;
		case 'r': buf[o++] = '\r'; break;
		case 'a': buf[o++] = '\a'; break;
		case 'b': buf[o++] = '\b'; break;
		case 'f': buf[o++] = '\f'; break;
		case 'v': buf[o++] = '\v'; break;
		case '\\': case '\'': case '"': buf[o++] = e; break;
		case '\n': L->line++; break; /* line continuation */
		case 'x': case 'u': case 'U':
			if (i + (size_t)k >= L->n || hexval(L->s + i + 1, k, &v) || v > 0x10FFFF) {
				free(buf);
				return mgt_err(MGT_ERR_VOCAB, "%s:%d: bad \\%c escape in a string literal", L->name, L->line, e);
			}
			o += put_utf8(buf + o, v), i += (size_t)k;
			break;
		default:
			if (e >= '0' && e <= '7') {
				v = 0;
				for (int d = 0; d < 3 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; d++, i++)
					v = v * 8 + (unsigned long)(L->s[i] - '0');
				i--;
				o += put_utf8(buf + o, v);
			} else {
				buf[o++] = '\\', buf[o++] = e;
			}
		}
	}
	mgt_status st = push(L, JT_STRING, buf, o);
	free(buf);
	L->p = i + 1;
	return st;
}

static mgt_status lex_number(lexer *L)
{
	size_t i = L->p;
	int isf = 0;
	while (i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_'))
		i++;
	if (i + 1 < L->n && L->s[i] == '.' && isdigit((unsigned char)L->s[i + 1])) {
		isf = 1, i++;
		while (i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_'))
			i++;
	}
	if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
		size_t j = i + 1;
		if (j < L->n && (L->s[j] == '+' || L->s[j] == '-'))
			j++;
		if (j < L->n && isdigit((unsigned char)L->s[j])) {
			isf = 1, i = j;
			while (i < L->n && isdigit((unsigned char)L->s[i]))
				i++;
		}
	}
	char num[64];
	size_t k = 0;
	for (size_t j = L->p; j < i && k < sizeof num - 1; j++)
		if (L->s[j] != '_')
			num[k++] = L->s[j];
	num[k] = 0;
	mgt_status st = push(L, isf ? JT_FLOAT : JT_INT, L->s + L->p, i - L->p);
	if (st)
		return st;
	jtok *t = &L->out->v[L->out->n - 1];
	if (isf)
		t->f = strtod(num, NULL);
	else {
		errno = 0;
		t->i = strtoll(num, NULL, 10);
		if (errno == ERANGE)
			return mgt_err(MGT_ERR_VOCAB, "%s:%d: integer literal %s: Python's big integers are not supported by this engine", L->name, L->line, num);
	}
	L->p = i;
	return MGT_OK;
}

static const char *const OPS[] = { "//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~",
				   "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", NULL };

/* The inside of a {{ }} or {% %} tag; closes on the end delimiter outside brackets.  Sets
 * *strip when the tag ends with -}} / -%}. */
static mgt_status lex_tag(lexer *L, int var, int *strip)
{
	int depth = 0;
	char e0 = var ? '}' : '%';
	for (;;) {
		while (L->p < L->n && is_ws(L->s[L->p]))
			L->line += L->s[L->p++] == '\n';
		if (L->p >= L->n)
			return mgt_err(MGT_ERR_VOCAB, "%s:%d: unclosed %s tag", L->name, L->line, var ? "{{" : "{%");
		const char *c = L->s + L->p;
		size_t left = L->n - L->p;
		if (depth == 0 && left >= 3 && c[0] == '-' && c[1] == e0 && c[2] == '}') {
			*strip = 1, L->p += 3;
			return push(L, var ? JT_VAR_END : JT_BLOCK_END, NULL, 0);
		}
		if (depth == 0 && left >= 2 && c[0] == e0 && c[1] == '}') {
			*strip = 0, L->p += 2;
			return push(L, var ? JT_VAR_END : JT_BLOCK_END, NULL, 0);
		}
		mgt_status st;
		if (*c == '"' || *c == '\'') {
			st = lex_string(L);
		} else if (isdigit((unsigned char)*c)) {
			st = lex_number(L);
		} else if (isalpha((unsigned char)*c) || *c == '_') {
			size_t i = L->p;
			while (i < L->n && (isalnum((unsigned char)L->s[i]) || L->s[i] == '_'))
				i++;
			st = push(L, JT_NAME, c, i - L->p);
			L->p = i;
		} else {
			int k;
			for (k = 0; OPS[k]; k++)
				if (!strncmp(c, OPS[k], strlen(OPS[k])))
					break;
			if (!OPS[k])
				return mgt_err(MGT_ERR_VOCAB, "%s:%d: unexpected character '%c' in a tag", L->name, L->line, *c);
			if (strchr("([{", *c) && strlen(OPS[k]) == 1)
				depth++;
			if (strchr(")]}", *c) && strlen(OPS[k]) == 1 && depth > 0)
				depth--;
			st = push(L, JT_OP, OPS[k], strlen(OPS[k]));
			L->p += strlen(OPS[k]);
		}
		if (st)
			return st;
	}
}

/* Emit text [a, b) with the strip rules for a following tag of kind k ('{', '%', '#') and sign. */
static mgt_status emit_text(lexer *L, size_t a, size_t b, char k, char sign, int line_starting)
{
	if (sign == '-') {
		while (b > a && is_ws(L->s[b - 1]))
			b--;
	} else if (sign != '+' && k != '{') {
		size_t l = b;
		while (l > a && L->s[l - 1] != '\n')
			l--;
		if (l > a || line_starting) {
			size_t j = l;
			while (j < b && is_ws(L->s[j]))
				j++;
			if (j == b && b > l)
				b = l;
		}
	}
	if (b > a)
		return push(L, JT_DATA, L->s + a, b - a);
	return MGT_OK;
}

/* After a tag: -x} strips all whitespace; %} and #} (trim_blocks) drop one newline. */
static void after_tag(lexer *L, int strip, int trim, int *line_starting)
{
	size_t p0 = L->p;
	if (strip) {
		while (L->p < L->n && is_ws(L->s[L->p]))
			L->p++;
	} else if (trim && L->p < L->n && L->s[L->p] == '\n') {
		L->p++;
	}
	*line_starting = L->p > 0 && L->s[L->p - 1] == '\n' && (L->p > p0 || strip || trim);
	if (L->p == p0)
		*line_starting = 0;
	L->line += count_nl(L->s + p0, L->p - p0);
}

static mgt_status lex_all(lexer *L)
{
	int line_starting = 1;
	while (L->p < L->n) {
		const char *q = L->s + L->p;
		size_t i;
		for (i = L->p; i + 1 < L->n; i++)
			if (L->s[i] == '{' && (L->s[i + 1] == '{' || L->s[i + 1] == '%' || L->s[i + 1] == '#'))
				break;
		if (i + 1 >= L->n) {
			mgt_status st = emit_text(L, L->p, L->n, 0, 0, 0);
			L->line += count_nl(q, L->n - L->p);
			L->p = L->n;
			return st;
		}
		char k = L->s[i + 1];
		char sign = i + 2 < L->n && (L->s[i + 2] == '-' || L->s[i + 2] == '+') ? L->s[i + 2] : 0;
		if (k == '{' && sign == '+')
			sign = 0;
		mgt_status st = emit_text(L, L->p, i, k, sign, line_starting);
		if (st)
			return st;
		L->line += count_nl(q, i - L->p);
		L->p = i + 2 + (sign != 0);
		if (k == '#') {
			const char *e = NULL;
			for (size_t j = L->p; j + 1 < L->n; j++)
				if (L->s[j] == '#' && L->s[j + 1] == '}') { e = L->s + j; break; }
			if (!e)
				return mgt_err(MGT_ERR_VOCAB, "%s:%d: unclosed comment", L->name, L->line);
			int strip = e > L->s + L->p && e[-1] == '-';
			L->line += count_nl(L->s + L->p, (size_t)(e - (L->s + L->p)));
			L->p = (size_t)(e - L->s) + 2;
			after_tag(L, strip, 1, &line_starting);
			continue;
		}
		if ((st = push(L, k == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, NULL, 0)))
			return st;
		int strip = 0;
		if ((st = lex_tag(L, k == '{', &strip)))
			return st;
		after_tag(L, strip, k == '%', &line_starting);
	}
	return MGT_OK;
}

mgt_status jinja_lex(const char *src, size_t n, const char *name, jtoks *out)
{
	/* newlines normalized, then one trailing newline dropped (keep_trailing_newline=False) */
	char *s = mgt_malloc(n + 1);
	if (!s)
		return MGT_ERR_NOMEM;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '\r') {
			s[m++] = '\n';
			if (i + 1 < n && src[i + 1] == '\n')
				i++;
		} else {
			s[m++] = src[i];
		}
	}
	if (m && s[m - 1] == '\n')
		m--;
	lexer L = { s, m, 0, 1, name, out };
	memset(out, 0, sizeof *out);
	mgt_status st = lex_all(&L);
	if (!st)
		st = push(&L, JT_EOF, NULL, 0);
	/* operator and name tokens point into s: keep s alive as the last token's buffer */
	if (!st) {
		out->v[out->n - 1].s = s;
		return MGT_OK;
	}
	free(s);
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i].kind == JT_DATA || out->v[i].kind == JT_STRING)
			free(out->v[i].s);
	free(out->v);
	memset(out, 0, sizeof *out);
	return st;
}

void jinja_toks_free(jtoks *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].kind == JT_DATA || t->v[i].kind == JT_STRING || t->v[i].kind == JT_EOF)
			free(t->v[i].s);
	free(t->v);
	memset(t, 0, sizeof *t);
}

int jtok_is(const jtok *t, const char *op)
{
	return t->kind == JT_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

int jtok_name(const jtok *t, const char *nm)
{
	return t->kind == JT_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}
