/* lib/tok/jinja_parse.c: the chat-template parser, Jinja2 3.1 parser.py's grammar for the
 * statements chat templates use (if/elif/else, for/else with tuple targets and an inline if,
 * set (name, tuple, namespace attribute, block), macro, break/continue, generation) and its
 * expression precedence: a if c else b < or < and < not < comparisons (in, not in, chains) <
 * + - < ~ < * / // % < ** < unary - + < primary, postfix (.x [i] [a:b:c] (args)), then filters
 * and tests (`x|f(a)`, `x is [not] t(a)`), which bind tighter than every binary operator.
 * Every other statement (include, extends, import, call, filter, raw, with, ...) and every
 * unknown filter or test is refused here with its name and line. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

typedef struct {
	mgt_chat_template *t;
	jtoks *tk;
	size_t p;
	int loops; /* for bodies open around the statement (0 in a macro body) */
} parser;

static jtok *cur(parser *P) { return &P->tk->v[P->p]; }
static jtok *next(parser *P) { jtok *t = cur(P); if (t->kind != JT_EOF) P->p++; return t; }

static mgt_status perr(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mgt_status perr(parser *P, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return mgt_err(MGT_ERR_VOCAB, "%s:%d: %s", P->t->name, cur(P)->line, msg);
}

static jnode *node(parser *P, int kind, int line)
{
	mgt_chat_template *t = P->t;
	if (t->nnodes == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		jnode **v = mgt_realloc(t->nodes, cap * sizeof *v);
		if (!v)
			return NULL;
		t->nodes = v, t->cap = cap;
	}
	jnode *n = calloc(1, sizeof *n);
	if (!n) {
		mgt_err(MGT_ERR_NOMEM, "out of memory");
		return NULL;
	}
	n->kind = kind, n->line = line;
	t->nodes[t->nnodes++] = n;
	return n;
}

static int push_list(jnode ***v, size_t *n, jnode *x)
{
	jnode **nv = realloc(*v, (*n + 1) * sizeof *nv);
	if (!nv)
		return -1;
	nv[(*n)++] = x, *v = nv;
	return 0;
}

static int push_name(jnode *n, const char *s, size_t len)
{
	char **v = realloc(n->names, (n->nnames + 1) * sizeof *v);
	if (!v)
		return -1;
	n->names = v;
	if (!(v[n->nnames] = strndup(s, len)))
		return -1;
	n->nnames++;
	return 0;
}

void jinja_nodes_free(mgt_chat_template *t)
{
	for (size_t i = 0; i < t->nnodes; i++) {
		jnode *n = t->nodes[i];
		free(n->v), free(n->w), free(n->s), free(n->ops);
		for (size_t k = 0; k < n->nnames; k++)
			free(n->names[k]);
		free(n->names);
		if (n->lit)
			json_decref(n->lit);
		free(n);
	}
	free(t->nodes);
	t->nodes = NULL, t->nnodes = t->cap = 0;
}

#define NEW(var, kind, line) do { if (!((var) = node(P, (kind), (line)))) return MGT_ERR_NOMEM; } while (0)
#define TRY(x) do { mgt_status st_ = (x); if (st_) return st_; } while (0)

static mgt_status expect_op(parser *P, const char *op)
{
	if (!jtok_is(cur(P), op))
		return perr(P, "expected '%s'", op);
	next(P);
	return MGT_OK;
}

static mgt_status parse_expr(parser *P, jnode **out, int with_cond);
static mgt_status parse_unary(parser *P, jnode **out, int with_filter);

/* (args) after a callee, filter or test: positional and name=value arguments. */
static mgt_status parse_args(parser *P, jnode *n)
{
	TRY(expect_op(P, "("));
	while (!jtok_is(cur(P), ")")) {
		if (n->nv + n->nw) {
			TRY(expect_op(P, ","));
			if (jtok_is(cur(P), ")"))
				break;
		}
		if (jtok_is(cur(P), "*") || jtok_is(cur(P), "**"))
			return perr(P, "*args / **kwargs in a call are not supported");
		jnode *e;
		if (cur(P)->kind == JT_NAME && jtok_is(&P->tk->v[P->p + 1], "=")) {
			jtok *nm = next(P);
			next(P);
			TRY(parse_expr(P, &e, 1));
			if (push_name(n, nm->s, nm->n) || push_list(&n->w, &n->nw, e))
				return MGT_ERR_NOMEM;
			continue;
		}
		if (n->nw)
			return perr(P, "positional argument after a keyword argument");
		TRY(parse_expr(P, &e, 1));
		if (push_list(&n->v, &n->nv, e))
			return MGT_ERR_NOMEM;
	}
	next(P);
	return MGT_OK;
}

/* [ ... ] : an index or a slice */
static mgt_status parse_subscript(parser *P, jnode *obj, jnode **out)
{
	int line = cur(P)->line;
	next(P);
	jnode *parts[3] = { 0 };
	int k = 0, slice = 0;
	for (;;) {
		if (jtok_is(cur(P), ":")) {
			if (++k > 2)
				return perr(P, "bad slice");
			slice = 1, next(P);
			continue;
		}
		if (jtok_is(cur(P), "]"))
			break;
		if (jtok_is(cur(P), ","))
			return perr(P, "tuple subscripts are not supported");
		TRY(parse_expr(P, &parts[k], 1));
	}
	next(P);
	jnode *n = NULL;
	NEW(n, slice ? N_SLICE : N_ITEM, line);
	n->a = obj, n->b = parts[0], n->c = parts[1], n->d = parts[2];
	if (!slice && !parts[0])
		return perr(P, "empty subscript");
	*out = n;
	return MGT_OK;
}

static mgt_status parse_postfix(parser *P, jnode **io)
{
	for (;;) {
		jtok *t = cur(P);
		jnode *n = NULL;
		if (jtok_is(t, ".")) {
			next(P);
			jtok *nm = next(P);
			NEW(n, N_ATTR, t->line);
			if (nm->kind == JT_NAME) {
				if (!(n->s = strndup(nm->s, nm->n)))
					return MGT_ERR_NOMEM;
			} else if (nm->kind == JT_INT) {
				/* x.0 is x[0] */
				n->kind = N_ITEM;
				NEW(n->b, N_LIT, t->line);
				n->b->lit = json_integer(nm->i);
			} else {
				return perr(P, "expected an attribute name after '.'");
			}
			n->a = *io;
		} else if (jtok_is(t, "[")) {
			TRY(parse_subscript(P, *io, &n));
		} else if (jtok_is(t, "(")) {
			NEW(n, N_CALL, t->line);
			n->a = *io;
			TRY(parse_args(P, n));
		} else {
			return MGT_OK;
		}
		*io = n;
	}
}

/* a dotted filter/test name */
static mgt_status parse_dotted(parser *P, char **out)
{
	jtok *t = next(P);
	if (t->kind != JT_NAME)
		return perr(P, "expected a name");
	char buf[128];
	snprintf(buf, sizeof buf, "%.*s", (int)t->n, t->s);
	while (jtok_is(cur(P), ".")) {
		next(P);
		jtok *u = next(P);
		size_t l = strlen(buf);
		snprintf(buf + l, sizeof buf - l, ".%.*s", (int)u->n, u->s);
	}
	return (*out = strdup(buf)) ? MGT_OK : MGT_ERR_NOMEM;
}

static mgt_status parse_filter(parser *P, jnode **io)
{
	jnode *n = NULL;
	NEW(n, N_FILTER, cur(P)->line);
	next(P);
	TRY(parse_dotted(P, &n->s));
	if (!jinja_has_filter(n->s))
		return perr(P, "filter '%s' is not supported by this engine", n->s);
	if (jtok_is(cur(P), "("))
		TRY(parse_args(P, n));
	n->a = *io, *io = n;
	return MGT_OK;
}

static mgt_status parse_test(parser *P, jnode **io)
{
	jnode *n = NULL;
	NEW(n, N_TEST, cur(P)->line);
	next(P);
	if (jtok_name(cur(P), "not"))
		n->neg = 1, next(P);
	TRY(parse_dotted(P, &n->s));
	if (!jinja_has_test(n->s))
		return perr(P, "test '%s' is not supported by this engine", n->s);
	jtok *t = cur(P);
	if (jtok_is(t, "(")) {
		TRY(parse_args(P, n));
	} else if ((t->kind == JT_NAME || t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
		    jtok_is(t, "[") || jtok_is(t, "{")) &&
		   !jtok_name(t, "else") && !jtok_name(t, "or") && !jtok_name(t, "and")) {
		if (jtok_name(t, "is"))
			return perr(P, "you cannot chain multiple tests with is");
		jnode *arg;
		TRY(parse_unary(P, &arg, 0));
		if (push_list(&n->v, &n->nv, arg))
			return MGT_ERR_NOMEM;
	}
	n->a = *io, *io = n;
	return MGT_OK;
}

/* ( ... ): a parenthesized expression or a tuple */
static mgt_status parse_paren(parser *P, jnode **out)
{
	int line = cur(P)->line;
	next(P);
	jnode *tup;
	NEW(tup, N_TUPLE, line);
	int comma = 0;
	while (!jtok_is(cur(P), ")")) {
		if (tup->nv) {
			TRY(expect_op(P, ","));
			comma = 1;
			if (jtok_is(cur(P), ")"))
				break;
		}
		jnode *e;
		TRY(parse_expr(P, &e, 1));
		if (push_list(&tup->v, &tup->nv, e))
			return MGT_ERR_NOMEM;
	}
	next(P);
	*out = tup->nv == 1 && !comma ? tup->v[0] : tup;
	return MGT_OK;
}

static mgt_status parse_seq(parser *P, jnode **out, int dict)
{
	jnode *n = NULL;
	NEW(n, dict ? N_DICT : N_LIST, cur(P)->line);
	next(P);
	const char *close = dict ? "}" : "]";
	while (!jtok_is(cur(P), close)) {
		if (n->nv) {
			TRY(expect_op(P, ","));
			if (jtok_is(cur(P), close))
				break;
		}
		jnode *e;
		TRY(parse_expr(P, &e, 1));
		if (push_list(&n->v, &n->nv, e))
			return MGT_ERR_NOMEM;
		if (dict) {
			TRY(expect_op(P, ":"));
			TRY(parse_expr(P, &e, 1));
			if (push_list(&n->w, &n->nw, e))
				return MGT_ERR_NOMEM;
		}
	}
	next(P);
	*out = n;
	return MGT_OK;
}

static mgt_status parse_primary(parser *P, jnode **out)
{
	jtok *t = cur(P);
	jnode *n = NULL;
	if (t->kind == JT_NAME) {
		next(P);
		json_t *lit = NULL;
		int islit = 1;
		if (jtok_name(t, "true") || jtok_name(t, "True"))
			lit = json_true();
		else if (jtok_name(t, "false") || jtok_name(t, "False"))
			lit = json_false();
		else if (jtok_name(t, "none") || jtok_name(t, "None"))
			lit = json_null();
		else
			islit = 0;
		NEW(n, islit ? N_LIT : N_NAME, t->line);
		if (islit)
			n->lit = lit;
		else if (!(n->s = strndup(t->s, t->n)))
			return MGT_ERR_NOMEM;
	} else if (t->kind == JT_STRING) {
		/* adjacent string literals concatenate */
		mgt_buf b = { 0 };
		while (cur(P)->kind == JT_STRING) {
			jtok *s = next(P);
			if (mgt_buf_add(&b, s->s, s->n)) { free(b.p); return MGT_ERR_NOMEM; }
		}
		NEW(n, N_LIT, t->line);
		n->lit = json_stringn_nocheck(b.p ? b.p : "", b.n);
		free(b.p);
	} else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
		next(P);
		NEW(n, N_LIT, t->line);
		n->lit = t->kind == JT_INT ? json_integer(t->i) : json_real(t->f);
	} else if (jtok_is(t, "(")) {
		return parse_paren(P, out);
	} else if (jtok_is(t, "[") || jtok_is(t, "{")) {
		return parse_seq(P, out, jtok_is(t, "{"));
	} else {
		return perr(P, "unexpected %s in an expression", t->kind == JT_OP ? t->s : t->kind == JT_EOF ? "end of template" : "token");
	}
	*out = n;
	return MGT_OK;
}

static mgt_status parse_unary(parser *P, jnode **out, int with_filter)
{
	jtok *t = cur(P);
	if (jtok_is(t, "-") || jtok_is(t, "+")) {
		next(P);
		jnode *n = NULL;
		NEW(n, jtok_is(t, "-") ? N_NEG : N_POS, t->line);
		TRY(parse_unary(P, &n->a, 0));
		*out = n;
	} else {
		TRY(parse_primary(P, out));
		TRY(parse_postfix(P, out));
	}
	if (!with_filter)
		return MGT_OK;
	for (;;) {
		if (jtok_is(cur(P), "|"))
			TRY(parse_filter(P, out));
		else if (jtok_name(cur(P), "is"))
			TRY(parse_test(P, out));
		else if (jtok_is(cur(P), "(")) {
			jnode *n;
			NEW(n, N_CALL, cur(P)->line);
			n->a = *out;
			TRY(parse_args(P, n));
			*out = n;
		} else
			return MGT_OK;
	}
}

typedef struct { const char *tok; int op; } opmap;

static mgt_status parse_binlevel(parser *P, jnode **out, int level);

static const opmap LV_MATH1[] = { { "+", OP_ADD }, { "-", OP_SUB }, { 0, 0 } };
static const opmap LV_CAT[] = { { "~", OP_CAT }, { 0, 0 } };
static const opmap LV_MATH2[] = { { "*", OP_MUL }, { "/", OP_DIV }, { "//", OP_FDIV }, { "%", OP_MOD }, { 0, 0 } };
static const opmap LV_POW[] = { { "**", OP_POW }, { 0, 0 } };
static const opmap *const LEVELS[] = { LV_MATH1, LV_CAT, LV_MATH2, LV_POW };

/* left-associative binary levels 0..3 (+ -, ~, * / // %, **) over unary */
static mgt_status parse_binlevel(parser *P, jnode **out, int level)
{
	if (level == 4)
		return parse_unary(P, out, 1);
	TRY(parse_binlevel(P, out, level + 1));
	for (;;) {
		const opmap *m = LEVELS[level];
		while (m->tok && !jtok_is(cur(P), m->tok))
			m++;
		if (!m->tok)
			return MGT_OK;
		jnode *n = NULL;
		NEW(n, N_BIN, cur(P)->line);
		next(P);
		n->op = m->op, n->a = *out;
		TRY(parse_binlevel(P, &n->b, level + 1));
		*out = n;
	}
}

static int cmp_op(parser *P)
{
	static const opmap M[] = { { "==", OP_EQ }, { "!=", OP_NE }, { "<", OP_LT }, { "<=", OP_LE },
				   { ">", OP_GT }, { ">=", OP_GE }, { 0, 0 } };
	for (const opmap *m = M; m->tok; m++)
		if (jtok_is(cur(P), m->tok))
			return next(P), m->op;
	if (jtok_name(cur(P), "in"))
		return next(P), OP_IN;
	if (jtok_name(cur(P), "not") && jtok_name(&P->tk->v[P->p + 1], "in"))
		return next(P), next(P), OP_NOTIN;
	return -1;
}

static mgt_status parse_compare(parser *P, jnode **out)
{
	jnode *first;
	TRY(parse_binlevel(P, &first, 0));
	int line = cur(P)->line, op = cmp_op(P);
	if (op < 0) {
		*out = first;
		return MGT_OK;
	}
	jnode *n = NULL;
	NEW(n, N_CMP, line);
	if (push_list(&n->v, &n->nv, first))
		return MGT_ERR_NOMEM;
	for (; op >= 0; op = cmp_op(P)) {
		int *ops = realloc(n->ops, n->nv * sizeof *ops);
		if (!ops)
			return MGT_ERR_NOMEM;
		n->ops = ops, ops[n->nv - 1] = op;
		jnode *e;
		TRY(parse_binlevel(P, &e, 0));
		if (push_list(&n->v, &n->nv, e))
			return MGT_ERR_NOMEM;
	}
	*out = n;
	return MGT_OK;
}

static mgt_status parse_not(parser *P, jnode **out)
{
	if (jtok_name(cur(P), "not")) {
		jnode *n = NULL;
		NEW(n, N_NOT, cur(P)->line);
		next(P);
		TRY(parse_not(P, &n->a));
		*out = n;
		return MGT_OK;
	}
	return parse_compare(P, out);
}

static mgt_status parse_andor(parser *P, jnode **out, int is_or)
{
	TRY(is_or ? parse_andor(P, out, 0) : parse_not(P, out));
	while (jtok_name(cur(P), is_or ? "or" : "and")) {
		jnode *n = NULL;
		NEW(n, is_or ? N_OR : N_AND, cur(P)->line);
		next(P);
		n->a = *out;
		TRY(is_or ? parse_andor(P, &n->b, 0) : parse_not(P, &n->b));
		*out = n;
	}
	return MGT_OK;
}

static mgt_status parse_expr(parser *P, jnode **out, int with_cond)
{
	TRY(parse_andor(P, out, 1));
	while (with_cond && jtok_name(cur(P), "if")) {
		jnode *n = NULL;
		NEW(n, N_COND, cur(P)->line);
		next(P);
		n->a = *out;
		TRY(parse_andor(P, &n->b, 1));
		if (jtok_name(cur(P), "else")) {
			next(P);
			TRY(parse_expr(P, &n->c, 0));
		}
		*out = n;
	}
	return MGT_OK;
}

/* an expression, or an unparenthesized tuple of them (`{{ a, b }}`, `for x in a, b`) */
static mgt_status parse_tuple_expr(parser *P, jnode **out)
{
	jnode *e;
	TRY(parse_expr(P, &e, 1));
	if (!jtok_is(cur(P), ",")) {
		*out = e;
		return MGT_OK;
	}
	jnode *n = NULL;
	NEW(n, N_TUPLE, cur(P)->line);
	if (push_list(&n->v, &n->nv, e))
		return MGT_ERR_NOMEM;
	while (jtok_is(cur(P), ",")) {
		next(P);
		if (cur(P)->kind == JT_BLOCK_END || cur(P)->kind == JT_VAR_END)
			break;
		TRY(parse_expr(P, &e, 1));
		if (push_list(&n->v, &n->nv, e))
			return MGT_ERR_NOMEM;
	}
	*out = n;
	return MGT_OK;
}

/* ---- statements ---------------------------------------------------------------------------- */

static mgt_status parse_body(parser *P, jnode **out, const char *const *ends, const char **which);

static mgt_status end_block(parser *P)
{
	if (cur(P)->kind != JT_BLOCK_END)
		return perr(P, "expected the end of the statement ('%%}')");
	next(P);
	return MGT_OK;
}

/* for/set targets: NAME or NAME, NAME... (optionally in parentheses) */
static mgt_status parse_targets(parser *P, jnode *n)
{
	int paren = jtok_is(cur(P), "(");
	if (paren)
		next(P);
	for (;;) {
		jtok *t = next(P);
		if (t->kind != JT_NAME)
			return perr(P, "expected a variable name");
		if (push_name(n, t->s, t->n))
			return MGT_ERR_NOMEM;
		if (!jtok_is(cur(P), ","))
			break;
		next(P);
		if (jtok_name(cur(P), "in") || jtok_is(cur(P), "=") || jtok_is(cur(P), ")"))
			break;
	}
	if (paren)
		TRY(expect_op(P, ")"));
	return MGT_OK;
}

static mgt_status parse_if(parser *P, jnode *n)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	const char *w;
	TRY(parse_expr(P, &n->a, 1));
	TRY(end_block(P));
	TRY(parse_body(P, &n->b, ends, &w));
	if (!strcmp(w, "elif")) {
		NEW(n->c, N_IF, cur(P)->line);
		return parse_if(P, n->c);
	}
	if (!strcmp(w, "else")) {
		static const char *const e2[] = { "endif", NULL };
		TRY(end_block(P));
		TRY(parse_body(P, &n->c, e2, &w));
	}
	return end_block(P);
}

static mgt_status parse_for(parser *P, jnode *n)
{
	static const char *const ends[] = { "else", "endfor", NULL };
	static const char *const e2[] = { "endfor", NULL };
	const char *w;
	TRY(parse_targets(P, n));
	if (!jtok_name(next(P), "in"))
		return perr(P, "expected 'in' in a for loop");
	TRY(parse_andor(P, &n->b, 1));
	if (jtok_is(cur(P), ",")) {
		jnode *tup;
		NEW(tup, N_TUPLE, cur(P)->line);
		if (push_list(&tup->v, &tup->nv, n->b))
			return MGT_ERR_NOMEM;
		while (jtok_is(cur(P), ",")) {
			next(P);
			jnode *e;
			TRY(parse_andor(P, &e, 1));
			if (push_list(&tup->v, &tup->nv, e))
				return MGT_ERR_NOMEM;
		}
		n->b = tup;
	}
	if (jtok_name(cur(P), "if")) {
		next(P);
		TRY(parse_expr(P, &n->a, 1));
	}
	if (jtok_name(cur(P), "recursive"))
		return perr(P, "recursive for loops are not supported by this engine");
	TRY(end_block(P));
	P->loops++;
	mgt_status st = parse_body(P, &n->c, ends, &w);
	P->loops--;
	TRY(st);
	if (!strcmp(w, "else")) {
		TRY(end_block(P));
		TRY(parse_body(P, &n->d, e2, &w));
	}
	return end_block(P);
}

static mgt_status parse_set(parser *P, jnode *n)
{
	static const char *const ends[] = { "endset", NULL };
	const char *w;
	if (cur(P)->kind == JT_NAME && jtok_is(&P->tk->v[P->p + 1], ".")) {
		jtok *ns = next(P);
		next(P);
		jtok *at = next(P);
		if (at->kind != JT_NAME)
			return perr(P, "expected an attribute name");
		n->kind = N_SETATTR;
		if (push_name(n, ns->s, ns->n) || push_name(n, at->s, at->n))
			return MGT_ERR_NOMEM;
		TRY(expect_op(P, "="));
		TRY(parse_tuple_expr(P, &n->a));
		return end_block(P);
	}
	TRY(parse_targets(P, n));
	if (jtok_is(cur(P), "=")) {
		next(P);
		TRY(parse_tuple_expr(P, &n->a));
		return end_block(P);
	}
	if (jtok_is(cur(P), "|"))
		return perr(P, "filtered block set ({%% set x | f %%}) is not supported by this engine");
	if (n->nnames != 1)
		return perr(P, "a block set takes one name");
	n->kind = N_SETBLOCK;
	TRY(end_block(P));
	TRY(parse_body(P, &n->a, ends, &w));
	return end_block(P);
}

static mgt_status parse_macro(parser *P, jnode *n)
{
	static const char *const ends[] = { "endmacro", NULL };
	const char *w;
	jtok *nm = next(P);
	if (nm->kind != JT_NAME)
		return perr(P, "expected a macro name");
	if (!(n->s = strndup(nm->s, nm->n)))
		return MGT_ERR_NOMEM;
	TRY(expect_op(P, "("));
	while (!jtok_is(cur(P), ")")) {
		if (n->nnames)
			TRY(expect_op(P, ","));
		jtok *a = next(P);
		if (a->kind != JT_NAME)
			return perr(P, "expected a parameter name");
		if (push_name(n, a->s, a->n))
			return MGT_ERR_NOMEM;
		jnode *def = NULL;
		if (jtok_is(cur(P), "=")) {
			next(P);
			TRY(parse_expr(P, &def, 1));
		} else if (n->nw && n->w[n->nw - 1]) {
			return perr(P, "non-default argument follows default argument");
		}
		if (push_list(&n->w, &n->nw, def))
			return MGT_ERR_NOMEM;
	}
	next(P);
	TRY(end_block(P));
	int loops = P->loops;
	P->loops = 0;
	mgt_status st = parse_body(P, &n->a, ends, &w);
	P->loops = loops;
	TRY(st);
	return end_block(P);
}

static mgt_status parse_stmt(parser *P, jnode **out)
{
	jtok *t = next(P);
	if (t->kind != JT_NAME)
		return perr(P, "expected a statement name after '{%%'");
	jnode *n = NULL;
	NEW(n, N_BODY, t->line);
	*out = n;
	if (jtok_name(t, "if"))
		return n->kind = N_IF, parse_if(P, n);
	if (jtok_name(t, "for"))
		return n->kind = N_FOR, parse_for(P, n);
	if (jtok_name(t, "set"))
		return n->kind = N_SET, parse_set(P, n);
	if (jtok_name(t, "macro"))
		return n->kind = N_MACRO, parse_macro(P, n);
	if (jtok_name(t, "break") || jtok_name(t, "continue")) {
		n->kind = jtok_name(t, "break") ? N_BREAK : N_CONTINUE;
		if (!P->loops) {
			P->p--;
			return perr(P, "'%.*s' outside a loop", (int)t->n, t->s);
		}
		return end_block(P);
	}
	if (jtok_name(t, "generation")) {
		/* transformers' AssistantTracker: the body renders as is */
		static const char *const ends[] = { "endgeneration", NULL };
		const char *w;
		TRY(end_block(P));
		TRY(parse_body(P, &n, ends, &w));
		*out = n;
		return end_block(P);
	}
	P->p--;
	return perr(P, "statement '%.*s' is not supported by this engine", (int)t->n, t->s);
}

static mgt_status parse_body(parser *P, jnode **out, const char *const *ends, const char **which)
{
	jnode *b;
	NEW(b, N_BODY, cur(P)->line);
	*out = b;
	for (;;) {
		jtok *t = cur(P);
		jnode *n = NULL;
		if (t->kind == JT_EOF) {
			if (!ends)
				return MGT_OK;
			size_t k = 0;
			while (ends[k + 1])
				k++;
			return perr(P, "unexpected end of template: missing '{%% %s %%}'", ends[k]);
		}
		if (t->kind == JT_DATA) {
			next(P);
			NEW(n, N_LIT, t->line);
			n->kind = N_TEXT;
			if (!(n->lit = json_stringn_nocheck(t->s, t->n)))
				return MGT_ERR_NOMEM;
		} else if (t->kind == JT_VAR_BEGIN) {
			next(P);
			NEW(n, N_OUT, t->line);
			TRY(parse_tuple_expr(P, &n->a));
			if (cur(P)->kind != JT_VAR_END)
				return perr(P, "expected '}}'");
			next(P);
		} else if (t->kind == JT_BLOCK_BEGIN) {
			jtok *k = &P->tk->v[P->p + 1];
			for (size_t e = 0; ends && ends[e]; e++)
				if (jtok_name(k, ends[e])) {
					P->p += 2;
					*which = ends[e];
					return MGT_OK;
				}
			if (k->kind == JT_NAME && (jtok_name(k, "endif") || jtok_name(k, "endfor") || jtok_name(k, "else") ||
						   jtok_name(k, "elif") || jtok_name(k, "endset") || jtok_name(k, "endmacro") ||
						   jtok_name(k, "endgeneration"))) {
				P->p++;
				return perr(P, "unexpected '%.*s'", (int)k->n, k->s);
			}
			next(P);
			TRY(parse_stmt(P, &n));
		} else {
			return perr(P, "unexpected token");
		}
		if (push_list(&b->v, &b->nv, n))
			return MGT_ERR_NOMEM;
	}
}

mgt_status jinja_parse(mgt_chat_template *t, jtoks *tk)
{
	parser P = { t, tk, 0, 0 };
	const char *w;
	return parse_body(&P, &t->root, NULL, &w);
}
