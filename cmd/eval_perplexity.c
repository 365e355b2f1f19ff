/* cmd/eval_perplexity.c: mgt-eval perplexity: the rolling loglikelihood of every text of a
 * JSONL file (lm-evaluation-harness's loglikelihood_rolling, as its wikitext task), per document
 * and in total.  See mgt-eval(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "data/data.h"
#include "eval_ll.h"

#define PROG EVAL_PROG

enum { OPT_TEXTS = EVAL_OPT_FIRST_FREE, OPT_KEY, OPT_OUTPUT, OPT_MAXLEN, OPT_LIMIT, OPT_TB };

static void usage(void)
{
	printf("Usage: mgt-eval perplexity (--load DIR | --hf DIR) --texts FILE.jsonl [OPTION]...\n"
	       "The loglikelihood of every text of a JSONL file, scored whole in windows of the model's\n"
	       "context (lm-evaluation-harness's loglikelihood_rolling: the end-of-document token first),\n"
	       "one JSON line a document, then the totals: token perplexity, word_perplexity,\n"
	       "byte_perplexity and bits_per_byte as the harness's wikitext task computes them.\n\n"
	       "  --texts FILE          JSONL (plain or zstd), one object a line with the text under --text-key\n"
	       "  --text-key KEY        the key of the text (other keys are ignored) [text]\n"
	       "  --limit N             the first N documents [all]\n"
	       "  --max-length N        the window: the model's context [the checkpoint's seq_length]\n"
	       "  --output FILE         write the lines there (replaced atomically) instead of stdout\n"
	       "  --tensorboard-dir DIR also write the totals as TensorBoard scalars NAME/KEY (NAME: the texts\n"
	       "                        file's name) at the checkpoint's iteration (a new event file in DIR)\n"
	       "  --help\n%s%s\n"
	       "Output: {\"doc\", \"line\", \"tokens\", \"words\", \"bytes\", \"windows\", \"loglikelihood\", \"ppl\"} a\n"
	       "document (ppl = exp(-loglikelihood / tokens)), then {\"total\": {\"documents\", \"tokens\",\n"
	       "\"words\", \"bytes\", \"loglikelihood\", \"perplexity\", \"word_perplexity\", \"byte_perplexity\",\n"
	       "\"bits_per_byte\"}}.  A summary goes to standard error.\n\n%s"
	       "See mgt-eval(1).\n", eval_model_help, mgt_cli_tok_help, eval_exit_help);
}

typedef struct {
	eval_model_opts m;
	const char *texts, *key, *output, *tb;
	long long limit, max_length;
} popts;

typedef struct { int32_t *toks; int64_t n, words, bytes, line, windows; double ll; } doc;

typedef struct { doc *d; size_t n, cap; } docs;

static mgt_status bad(const char *path, uint64_t line, const char *what, const char *key)
{
	return mgt_err(MGT_ERR_INPUT, "%s:%llu: %s%s%s", path, (unsigned long long)line, what, key ? key : "",
		       key ? "\"" : "");
}

/* The text of one line. */
static mgt_status line_text(const popts *o, const char *line, size_t len, uint64_t ln, json_t **obj, const char **s,
			    size_t *n)
{
	if (strspn(line, " \t\r") >= len) return bad(o->texts, ln, "empty line: expected one JSON object a line", NULL);
	json_error_t je;
	*obj = json_loadb(line, len, 0, &je);
	if (!*obj)
		return mgt_err(MGT_ERR_INPUT, "%s:%llu: malformed JSON at column %d: %s", o->texts, (unsigned long long)ln,
			       je.column, je.text);
	if (!json_is_object(*obj)) return bad(o->texts, ln, "expected a JSON object", NULL);
	json_t *v = json_object_get(*obj, o->key);
	if (!v) return bad(o->texts, ln, "missing key \"", o->key);
	if (!json_is_string(v)) return bad(o->texts, ln, "expected a string under \"", o->key);
	*s = json_string_value(v);
	*n = json_string_length(v);
	return *n ? MGT_OK : bad(o->texts, ln, "empty text under \"", o->key);
}

static mgt_status add_doc(const popts *o, mgt_tok_enc *enc, const char *line, size_t len, uint64_t ln, docs *ds)
{
	json_t *obj = NULL;
	const char *s = "";
	size_t n = 0;
	mgt_status st = line_text(o, line, len, ln, &obj, &s, &n);
	if (!st && ds->n == ds->cap) {
		size_t cap = ds->cap ? 2 * ds->cap : 64;
		doc *p = mgt_realloc(ds->d, cap * sizeof *p);
		if (p) ds->d = p, ds->cap = cap;
		else st = MGT_ERR_NOMEM;
	}
	if (!st) {
		doc *d = &ds->d[ds->n++];
		mgt_ids ids = { 0 };
		st = mgt_tok_encode(enc, s, n, &ids);
		*d = (doc){ ids.v, (int64_t)ids.n, (int64_t)mgt_text_words(s, n), (int64_t)n, (int64_t)ln, 0, 0 };
		if (st) st = mgt_err_ctx(st, "%s:%llu", o->texts, (unsigned long long)ln);
		if (!st && !ids.n) st = bad(o->texts, ln, "the text encodes to no tokens", NULL);
	}
	json_decref(obj);
	return st;
}

static mgt_status read_docs(const popts *o, const mgt_tok *tok, docs *ds)
{
	mgt_jsonl *r = NULL;
	mgt_tok_enc *enc = NULL;
	mgt_status st = mgt_jsonl_open(&r, o->texts);
	if (st) st = mgt_err_ctx(MGT_ERR_USAGE, "--texts");
	if (!st) st = mgt_tok_enc_new(&enc, tok);
	while (!st && (o->limit < 0 || (long long)ds->n < o->limit)) {
		const char *line;
		size_t len;
		st = mgt_jsonl_next(r, &line, &len);
		if (st || !line) break;
		st = add_doc(o, enc, line, len, mgt_jsonl_lineno(r), ds);
	}
	if (!st && !ds->n) st = mgt_err(MGT_ERR_INPUT, "%s: no documents (an empty file)", o->texts);
	mgt_tok_enc_free(enc);
	mgt_jsonl_close(r);
	return st;
}

static mgt_status score_docs(mgt_eval *ev, int32_t prefix, int64_t max_len, int64_t seq, docs *ds)
{
	float *logits = mgt_malloc((size_t)seq * (size_t)mgt_eval_vocab_size(ev) * sizeof *logits);
	if (!logits) return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < ds->n; i++) {
		doc *d = &ds->d[i];
		st = mgt_ll_rolling(ev, d->toks, d->n, prefix, max_len, logits, &d->ll, &d->windows);
	}
	free(logits);
	return st;
}

/* Append JSON object o (consumed) as one line. */
static mgt_status add_line(mgt_buf *b, json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
	json_decref(o);
	mgt_status st = s ? mgt_buf_add(b, s, strlen(s)) : mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = mgt_buf_add(b, "\n", 1);
	free(s);
	return st;
}

static json_t *totals(const docs *ds)
{
	double ll = 0;
	int64_t tok = 0, words = 0, bytes = 0;
	for (size_t i = 0; i < ds->n; i++) {
		ll += ds->d[i].ll;
		tok += ds->d[i].n;
		words += ds->d[i].words;
		bytes += ds->d[i].bytes;
	}
	fprintf(stderr, "%s: %zu documents, %lld tokens: perplexity %.4f, word_perplexity %.4f, byte_perplexity %.4f, "
		"bits_per_byte %.4f\n", PROG, ds->n, (long long)tok, exp(-ll / (double)tok), exp(-ll / (double)words),
		exp(-ll / (double)bytes), -ll / (double)bytes / log(2.0));
	return json_pack("{s:{s:I, s:I, s:I, s:I, s:f, s:o, s:o, s:o, s:o}}", "total", "documents", (json_int_t)ds->n,
			 "tokens", (json_int_t)tok, "words", (json_int_t)words, "bytes", (json_int_t)bytes, "loglikelihood",
			 ll, "perplexity", eval_ll_real(exp(-ll / (double)tok)), "word_perplexity",
			 eval_ll_real(exp(-ll / (double)words)), "byte_perplexity", eval_ll_real(exp(-ll / (double)bytes)),
			 "bits_per_byte", eval_ll_real(-ll / (double)bytes / log(2.0)));
}

/* --tensorboard-dir: the totals under the texts file's name. */
static mgt_status write_tb(const popts *o, const mgt_eval *ev, json_t *tot)
{
	char name[256];
	eval_ll_basename(o->texts, name, sizeof name);
	json_t *r = json_pack("{s:O}", name, json_object_get(tot, "total"));
	mgt_status st = r ? eval_ll_tensorboard(o->tb, r, mgt_eval_iteration(ev)) : MGT_ERR_NOMEM;
	json_decref(r);
	return st;
}

static mgt_status write_docs(const popts *o, const mgt_eval *ev, const docs *ds)
{
	mgt_buf b = { 0 };
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < ds->n; i++) {
		const doc *d = &ds->d[i];
		st = add_line(&b, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o}", "doc", (json_int_t)i, "line",
					    (json_int_t)d->line, "tokens", (json_int_t)d->n, "words", (json_int_t)d->words,
					    "bytes", (json_int_t)d->bytes, "windows", (json_int_t)d->windows,
					    "loglikelihood", d->ll, "ppl", eval_ll_real(exp(-d->ll / (double)d->n))));
	}
	json_t *tot = st ? NULL : totals(ds);
	if (!st && o->tb && tot) st = write_tb(o, ev, tot);
	if (!st) st = add_line(&b, tot);
	else json_decref(tot);
	if (!st) st = eval_ll_write(o->output, b.p, b.n);
	free(b.p);
	return st;
}

static mgt_status run(const popts *o)
{
	eval_model em = { 0 };
	docs ds = { 0 };
	int32_t prefix = 0;
	int64_t max_len = 0, seq = 1;
	mgt_status st = eval_model_open(&o->m, true, &em);
	if (!st) st = eval_ll_prefix(em.tok, &prefix);
	if (!st) st = eval_ll_max_length(em.ev, o->max_length, &max_len);
	if (!st) st = read_docs(o, em.tok, &ds);
	for (size_t i = 0; !st && i < ds.n; i++)
		if (ds.d[i].n > seq) seq = ds.d[i].n < max_len ? ds.d[i].n : max_len;
	if (!st) st = eval_model_build(&o->m, &em, seq);
	if (!st) st = score_docs(em.ev, prefix, max_len, seq, &ds);
	if (!st) st = write_docs(o, em.ev, &ds);
	for (size_t i = 0; i < ds.n; i++) free(ds.d[i].toks);
	free(ds.d);
	eval_model_close(&em);
	return st;
}

static int own_option(int c, const char *arg, void *ctx)
{
	popts *o = ctx;
	switch (c) {
	case OPT_TEXTS: o->texts = arg; return 1;
	case OPT_KEY: o->key = arg; return 1;
	case OPT_OUTPUT: o->output = arg; return 1;
	case OPT_MAXLEN: o->max_length = mgt_cli_int(PROG, "--max-length", arg); return 1;
	case OPT_LIMIT: o->limit = mgt_cli_int(PROG, "--limit", arg); return 1;
	case OPT_TB: o->tb = arg; return 1;
	default: return 0;
	}
}

int eval_cmd_perplexity(int argc, char **argv)
{
	static const struct option longopts[] = {
		EVAL_MODEL_LONGOPTS,
		{"texts", required_argument, 0, OPT_TEXTS}, {"text-key", required_argument, 0, OPT_KEY},
		{"output", required_argument, 0, OPT_OUTPUT}, {"max-length", required_argument, 0, OPT_MAXLEN},
		{"limit", required_argument, 0, OPT_LIMIT}, {"tensorboard-dir", required_argument, 0, OPT_TB},
		{0, 0, 0, 0}};
	popts o = { .key = "text", .limit = -1 };
	eval_model_defaults(&o.m);
	o.m.command = EVAL_PROG " perplexity";
	o.m.use = MGT_EVAL_USE_NEXT_TOKEN;
	eval_parse(argc, argv, longopts, &o.m, own_option, &o, usage);
	eval_model_check(&o.m);
	if (!o.texts) mgt_cli_usage_error(PROG, "perplexity: give --texts FILE.jsonl");
	if (o.limit == 0 || o.limit < -1) mgt_cli_usage_error(PROG, "--limit %lld: expected at least 1", o.limit);
	if (o.max_length < 0) mgt_cli_usage_error(PROG, "--max-length %lld: expected at least 1", o.max_length);
	return eval_finish(run(&o));
}
