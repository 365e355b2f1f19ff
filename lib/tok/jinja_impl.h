/* lib/tok/jinja_impl.h: private to the chat-template engine (jinja_lex.c, jinja_parse.c,
 * jinja_value.c, jinja_filt.c, jinja_eval.c).  A Jinja2 subset as Hugging Face transformers
 * runs chat templates (chat_template_utils.py: ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks, loopcontrols and the generation tag).  Semantics follow Jinja2 3.1 (lexer.py,
 * parser.py, runtime.py, filters.py, tests.py) and Python's str/dict/list/json. */
#ifndef MGT_JINJA_IMPL_H
#define MGT_JINJA_IMPL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tok.h"

/* ---- lexer ---------------------------------------------------------------------------------- */
enum {
	JT_DATA,       /* template text (s, n: owned copy) */
	JT_VAR_BEGIN,  /* {{ */
	JT_VAR_END,    /* }} */
	JT_BLOCK_BEGIN,/* {% */
	JT_BLOCK_END,  /* %} */
	JT_NAME,       /* identifier */
	JT_STRING,     /* string literal (s, n: decoded, owned) */
	JT_INT,
	JT_FLOAT,
	JT_OP,         /* operator or punctuation (s: static text) */
	JT_EOF,
};
typedef struct {
	int kind, line;
	char *s;
	size_t n;
	long long i;
	double f;
} jtok;
typedef struct {
	jtok *v;
	size_t n, cap;
} jtoks;
/* Tokenize a template (Jinja2 lexer with trim_blocks, lstrip_blocks, keep_trailing_newline off).
 * Errors: MGT_ERR_VOCAB "NAME:LINE: ..." (unclosed tag or string, unknown character). */
mgt_status jinja_lex(const char *src, size_t n, const char *name, jtoks *out);
void jinja_toks_free(jtoks *t);
/* Does t hold the operator text op? */
int jtok_is(const jtok *t, const char *op);
/* Does t hold the name nm? */
int jtok_name(const jtok *t, const char *nm);

/* ---- syntax tree ---------------------------------------------------------------------------- */
enum {
	/* statements */
	N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETATTR, N_SETBLOCK, N_MACRO, N_BREAK,
	N_CONTINUE,
	/* expressions */
	N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BIN, N_NOT, N_NEG,
	N_POS, N_AND, N_OR, N_COND, N_LIST, N_TUPLE, N_DICT, N_CMP,
};
typedef struct jnode jnode;
struct jnode {
	int kind, line, op, neg;
	jnode *a, *b, *c, *d; /* children: condition/target/iterable/body/else, operands */
	jnode **v;            /* list: body statements, args, items, dict keys, compare operands */
	size_t nv;
	jnode **w;            /* second list: kwarg values, dict values, macro defaults */
	size_t nw;
	char *s;              /* name (owned) */
	char **names;         /* kwarg names, for/set targets, macro parameters (owned) */
	size_t nnames;
	int *ops;             /* N_CMP: the operators between v[k] and v[k+1] */
	json_t *lit;          /* N_LIT (owned) */
};
/* binary operators (N_BIN op, N_CMP ops) */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ, OP_NE, OP_LT,
       OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

struct mgt_chat_template {
	char *name;
	jnode *root;       /* N_BODY */
	jnode **nodes;     /* every node, for freeing */
	size_t nnodes, cap;
};
/* Parse tokens into t->root.  Errors: MGT_ERR_VOCAB "NAME:LINE: ..." naming the construct
 * (unsupported statements, filters and tests are refused here). */
mgt_status jinja_parse(mgt_chat_template *t, jtoks *tk);
void jinja_nodes_free(mgt_chat_template *t);
/* Is f a filter / test the engine implements? */
int jinja_has_filter(const char *f);
int jinja_has_test(const char *f);

/* ---- values --------------------------------------------------------------------------------- */
typedef enum { JV_UNDEF, JV_JSON, JV_NS, JV_FUNC, JV_MACRO } jv_kind;
typedef struct jscope jscope;
/* A runtime value: JSON data (strings, numbers, bools, null, lists, dicts; tuples are lists),
 * Jinja2's Undefined (u_obj/u_name say what was missing, for its error message), a namespace()
 * (a JSON object), a global function or a bound method (f_name, j = self), or a macro. */
typedef struct {
	jv_kind k;
	json_t *j;          /* JV_JSON, JV_NS: the value; JV_FUNC: bound self or NULL (one reference) */
	const char *f_name; /* JV_FUNC: static name */
	const jnode *mac;   /* JV_MACRO */
	jscope *mscope;     /* JV_MACRO: the scope it was defined in (its body sees it; that scope
			     * outlives the macro value, which cannot leave it) */
	json_t *u_obj;      /* JV_UNDEF: the object whose attribute/element was missing, or NULL */
	char u_name[64];    /* JV_UNDEF: the missing name (or the element's repr when u_elem) */
	int u_elem;
} jv;

jv jv_json(json_t *j); /* steals j (NULL -> NOMEM is the caller's check) */
jv jv_undef(const char *name, json_t *obj, int elem);
jv jv_copy(const jv *v);
void jv_free(jv *v);
/* Python truth value. */
int jv_truthy(const jv *v);
/* Python == (1 == 1.0 == True, deep list/dict equality; Undefined equals Undefined only). */
int jv_eq(const jv *a, const jv *b);
int json_py_eq(const json_t *a, const json_t *b);
/* Python type name for messages ("str", "int", "dict", ...). */
const char *json_py_type(const json_t *j);
/* Jinja2's Undefined message ("'x' is undefined", "'dict object' has no attribute 'x'"). */
void jv_undef_msg(const jv *v, char *buf, size_t n);
/* str(v) appended to out (Python str(): True, None, 1.5, ['a', 1], {'k': 'v'}).
 * Errors: MGT_ERR_NOMEM, MGT_ERR_INPUT (a macro or function). */
mgt_status jv_str(const jv *v, mgt_buf *out);
mgt_status json_py_str(const json_t *j, mgt_buf *out);
/* json.dumps(j, ensure_ascii=False[, indent=indent]) appended to out; indent < 0: none. */
mgt_status json_py_dumps(const json_t *j, int indent, mgt_buf *out);
/* What a JSON array stands for in Python: a list (unmarked), a tuple, an iterator (the
 * generators of map/select/reject/selectattr/rejectattr/unique/items, reversed()): always true,
 * no len(), not subscriptable, iterable once (SEQ_GEN_DONE after), not printable; dict views
 * (.items() .keys() .values()); a range.  Marks live for one render: jinja_marks_reset() after it;
 * jinja_mark returns a. */
enum { SEQ_LIST, SEQ_TUPLE, SEQ_GEN, SEQ_GEN_DONE, SEQ_ITEMS, SEQ_KEYS, SEQ_VALUES, SEQ_RANGE };
void jinja_marks_reset(void);
json_t *jinja_mark(json_t *a, int kind);
int jinja_kind(const json_t *a);
const char *jinja_kind_name(int kind);
/* Python's repr(float). */
void py_float_repr(double d, char *buf, size_t n);
/* Python's < (numbers, strings by code point, lists lexicographically); sets *lt.  Returns 0,
 * or -1 when the types do not compare. */
int json_py_lt(const json_t *a, const json_t *b, int *lt);
/* numeric value of an int/real/bool json (is_num: 1 if it is one) */
int json_py_num(const json_t *j, double *d, long long *i, int *is_int);

/* ---- evaluation ----------------------------------------------------------------------------- */
typedef struct {
	const mgt_chat_template *t;
	const char *date;      /* strftime_now's pinned date (NULL: now) */
	jscope *root;
	int flow;              /* 0, FLOW_BREAK, FLOW_CONTINUE */
	int depth;             /* macro call depth */
} jctx;
enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

/* Error at a node: MGT_ERR_INPUT "NAME:LINE: msg". */
mgt_status jerr(jctx *c, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
mgt_status jinja_eval(jctx *c, jscope *s, const jnode *n, jv *out);
/* Render a macro / call a global or method: args already evaluated. */
mgt_status jinja_call_macro(jctx *c, const jnode *call, const jv *mac, jv *args, size_t na,
			    char **kwn, jv *kwv, size_t nk, jv *out);
mgt_status jinja_call_func(jctx *c, const jnode *call, const jv *fn, jv *args, size_t na,
			   char **kwn, jv *kwv, size_t nk, jv *out);
mgt_status jinja_filter(jctx *c, jscope *s, const jnode *n, jv *val, jv *out);
mgt_status jinja_test(jctx *c, jscope *s, const jnode *n, const jv *val, int *res);
/* obj.name / obj[key] with Jinja2's getattr/getitem fallbacks (methods of str and dict). */
mgt_status jinja_getattr(jctx *c, const jnode *n, const jv *obj, const char *name, jv *out);
mgt_status jinja_getitem(jctx *c, const jnode *n, const jv *obj, const jv *key, jv *out);
/* Apply a filter by name to a value (for map('trim'), select tests) */
mgt_status jinja_filter_named(jctx *c, const jnode *n, const char *name, jv *val, jv *args,
			      size_t na, char **kwn, jv *kwv, size_t nk, jv *out);
mgt_status jinja_test_named(jctx *c, const jnode *n, const char *name, const jv *val, jv *args,
			    size_t na, int *res);
/* Call a bound method (fn->j is self, fn->f_name the method). */
mgt_status jinja_call_method(jctx *c, const jnode *n, const jv *fn, jv *a, size_t na, char **kwn,
			     jv *kwv, size_t nk, jv *out);
/* The items a for loop walks: a list's items, a dict's keys, a string's characters, nothing for
 * Undefined (*out: a new reference to a JSON array). */
mgt_status jinja_iter_items(jctx *c, const jnode *n, const jv *v, json_t **out);
/* Python str helpers (jinja_attr.c): whitespace test, strip (chars NULL: whitespace), case
 * mapping (mode 'u', 'l', 't' title, 'c' capitalize), replace (count < 0: all). */
int jinja_py_space(int32_t cp);
mgt_status jinja_strip(const char *s, size_t n, const json_t *chars, int left, int right, jv *out);
mgt_status jinja_case(const char *s, size_t n, int mode, jv *out);
mgt_status jinja_replace(const json_t *self, const json_t *old, const json_t *new, long long count, jv *out);
/* Render a body into out. */
mgt_status jinja_exec(jctx *c, jscope *s, const jnode *body, mgt_buf *out);
/* A fresh scope whose parent is p; jscope_set stores a copy of v. */
jscope *jscope_new(jscope *p);
void jscope_free(jscope *s);
mgt_status jscope_set(jscope *s, const char *name, const jv *v);

#endif
