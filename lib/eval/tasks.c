/* lib/eval/tasks.c: loglikelihoods of continuations and of whole texts, scored the way
 * lm-evaluation-harness scores a causal model (eval.h, loglikelihood section). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "eval.h"

bool mgt_text_isspace(int32_t cp)
{
	if (cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 || cp == 0xa0)
		return true;
	if (cp < 0x80) return false;
	utf8proc_category_t c = utf8proc_category(cp);
	return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* The code point at s[i] (n bytes left) and its length; an invalid byte is -1 of length 1. */
static int32_t next_cp(const char *s, size_t n, size_t *len)
{
	utf8proc_int32_t cp;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
	*len = k > 0 ? (size_t)k : 1;
	return k > 0 ? cp : -1;
}

size_t mgt_text_len(const char *s, size_t n)
{
	size_t count = 0, k;
	for (size_t i = 0; i < n; i += k, count++) next_cp(s + i, n - i, &k);
	return count;
}

size_t mgt_text_words(const char *s, size_t n)
{
	size_t runs = 0, k;
	bool in_space = false;
	for (size_t i = 0; i < n; i += k) {
		bool sp = mgt_text_isspace(next_cp(s + i, n - i, &k));
		if (sp && !in_space) runs++;
		in_space = sp;
	}
	return runs + 1;
}

/* Length of s[0, n) without its trailing white space (Python rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
	size_t keep = 0, k;
	for (size_t i = 0; i < n; i += k)
		if (!mgt_text_isspace(next_cp(s + i, n - i, &k))) keep = i + k;
	return keep;
}

static mgt_status encode(mgt_tok_enc *enc, const char *s, size_t n, mgt_ids *out)
{
	return n ? mgt_tok_encode(enc, s, n, out) : MGT_OK;
}

/* Empty context: [prefix] + encode(cont), or encode(cont) split after its first token when
 * that is prefix. */
static mgt_status encode_no_context(mgt_tok_enc *enc, int32_t prefix, const char *cont, size_t cont_len,
				    mgt_ids *toks, size_t *n_ctx)
{
	size_t base = toks->n;
	if (mgt_ids_push(toks, prefix)) return MGT_ERR_NOMEM;
	mgt_status st = encode(enc, cont, cont_len, toks);
	if (st) return st;
	*n_ctx = 1;
	if (toks->n > base + 1 && toks->v[base + 1] == prefix) { /* drop the pushed prefix */
		memmove(toks->v + base, toks->v + base + 1, (toks->n - base - 1) * sizeof *toks->v);
		toks->n--;
	}
	return MGT_OK;
}

mgt_status mgt_ll_encode(mgt_tok_enc *enc, int32_t prefix, const char *ctx, size_t ctx_len, const char *cont,
			 size_t cont_len, mgt_ids *toks, size_t *n_ctx)
{
	size_t keep = rstrip_len(ctx, ctx_len), base = toks->n;
	if (!keep) { /* the moved white space leads the continuation */
		mgt_buf b = { 0 };
		mgt_status st = mgt_buf_add(&b, ctx, ctx_len);
		if (!st) st = mgt_buf_add(&b, cont, cont_len);
		if (!st) st = encode_no_context(enc, prefix, b.p ? b.p : "", b.n, toks, n_ctx);
		free(b.p);
		return st;
	}
	mgt_buf whole = { 0 };
	mgt_status st = mgt_buf_add(&whole, ctx, ctx_len);
	if (!st) st = mgt_buf_add(&whole, cont, cont_len);
	if (!st) st = encode(enc, ctx, keep, toks); /* the context alone, to count it */
	size_t nc = toks->n - base;
	toks->n = base;
	if (!st) st = encode(enc, whole.p, whole.n, toks);
	free(whole.p);
	if (st) return st;
	*n_ctx = nc < toks->n - base ? nc : toks->n - base;
	return MGT_OK;
}

int64_t mgt_ll_input_len(int64_t n, int64_t max_len)
{
	return (n < max_len + 1 ? n : max_len + 1) - 1;
}

/* log-softmax of token t in row x[0, v), float64; *argmax_is_t: t is the first largest. */
static double log_softmax_at(const float *x, int64_t v, int32_t t, bool *argmax_is_t)
{
	int64_t best = 0;
	for (int64_t i = 1; i < v; i++)
		if (x[i] > x[best]) best = i;
	double m = x[best], s = 0;
	for (int64_t i = 0; i < v; i++) s += exp((double)x[i] - m);
	*argmax_is_t = best == t;
	return (double)x[t] - m - log(s);
}

mgt_status mgt_ll_score(mgt_eval *ev, const int32_t *toks, int64_t n, int64_t n_cont, int64_t max_len, float *logits,
			double *ll, bool *greedy)
{
	if (n_cont < 1 || n_cont > max_len || n_cont >= n)
		return mgt_err(MGT_ERR_USAGE, "loglikelihood: %lld continuation tokens of %lld (%lld positions)",
			       (long long)n_cont, (long long)n, (long long)max_len);
	int64_t len = mgt_ll_input_len(n, max_len), start = n - 1 - len, vocab = mgt_eval_vocab_size(ev);
	mgt_status st = mgt_eval_forward(ev, toks + start, len, logits);
	if (st) return st;
	double sum = 0;
	bool all = true;
	for (int64_t j = 0; j < n_cont; j++) {
		int64_t row = len - n_cont + j;
		bool g;
		sum += log_softmax_at(logits + row * vocab, vocab, toks[start + row + 1], &g);
		all = all && g;
	}
	*ll = sum;
	*greedy = all;
	return MGT_OK;
}

/* One window of get_rolling_token_windows made disjoint: the context, then the n_pred tokens
 * toks[end - n_pred, end) to predict; scored and added to *ll. */
static mgt_status score_window(mgt_eval *ev, const int32_t *toks, int64_t end, int64_t n_pred, int32_t prefix,
			       int64_t max_len, float *logits, int32_t *buf, double *ll)
{
	int64_t begin = end - max_len - 1, n;
	if (begin < 0) { /* the first window: [prefix] + toks[0, end - 1) */
		buf[0] = prefix;
		memcpy(buf + 1, toks, (size_t)end * sizeof *buf);
		n = end + 1;
	} else {
		memcpy(buf, toks + begin, (size_t)(end - begin) * sizeof *buf);
		n = end - begin;
	}
	double w;
	bool g;
	mgt_status st = mgt_ll_score(ev, buf, n, n_pred, max_len, logits, &w, &g);
	*ll += w;
	return st;
}

mgt_status mgt_ll_rolling(mgt_eval *ev, const int32_t *toks, int64_t n, int32_t prefix, int64_t max_len, float *logits,
			  double *ll, int64_t *windows)
{
	*ll = 0;
	*windows = 0;
	if (n < 1 || max_len < 1) return mgt_err(MGT_ERR_USAGE, "rolling loglikelihood: %lld tokens", (long long)n);
	int32_t *buf = mgt_malloc((size_t)(max_len + 2) * sizeof *buf);
	if (!buf) return MGT_ERR_NOMEM;
	int64_t first = n < max_len ? n : max_len, predicted = first;
	mgt_status st = score_window(ev, toks, first, first, prefix, max_len, logits, buf, ll);
	for (*windows = 1; !st && predicted < n; ++*windows) {
		int64_t w = n - predicted < max_len ? n - predicted : max_len; /* pred_len = max_len - 1 + 1 */
		st = score_window(ev, toks, predicted + w, w, prefix, max_len, logits, buf, ll);
		predicted += w;
	}
	free(buf);
	return st;
}
