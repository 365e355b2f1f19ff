/* lib/eval/generate.c: batched generation with a key/value cache (eval.h, "generation").
 *
 * Continuous batching over batch_size cache slots: every step feeds, in one mgt_model_infer
 * call, the whole prompt of each slot that has just taken a prompt and the last new token of
 * each slot still generating, and takes the logits of each slot's last token.  Sampling as
 * Megatron's megatron/inference/text_generation/sampling.py (see mgt_gen_opts).
 */
#include "eval_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int64_t prompt;   /* -1: free */
	int64_t fed;      /* positions filled, = the next position */
	int64_t step;     /* new tokens produced */
	int32_t next;     /* the token to feed */
	mgt_ids out;      /* new ids, the eod id excluded */
	mgt_buf text;
} slot;

typedef struct {
	mgt_eval *ev;
	const mgt_gen_opts *o;
	int64_t S, V, Vp, nprompts, taken;
	const int32_t *const *prompts;
	const int64_t *lens;
	int B;
	slot *sl;
	mgt_kv_cache *kv;
	int32_t *tok, *seq, *pos, *rows, *rslot, *idx;
	float *logits;    /* [B, Vp] */
	double *p;        /* [V] */
	mgt_gen_cb cb;
	void *ctx;
} gen;

static mgt_status check_opts(const mgt_eval *ev, const mgt_gen_opts *o, int64_t *S)
{
	if (!ev->m) return mgt_err(MGT_ERR_USAGE, "mgt_eval_generate: the model is not built");
	*S = o->max_length ? o->max_length : ev->s;
	if (*S < 1 || *S > ev->s)
		return mgt_err(MGT_ERR_USAGE, "max length %lld: expected 1 to %lld (the sequence length the model was "
			       "built for)", (long long)*S, (long long)ev->s);
	if (o->max_new_tokens < 0) return mgt_err(MGT_ERR_USAGE, "max new tokens %lld: expected >= 0", (long long)o->max_new_tokens);
	if (o->batch_size < 1) return mgt_err(MGT_ERR_USAGE, "batch size %d: expected >= 1", o->batch_size);
	if (!(o->temperature >= 0) || !isfinite(o->temperature))
		return mgt_err(MGT_ERR_USAGE, "temperature %g: expected a finite value >= 0", o->temperature);
	if (o->top_k < 0 || o->top_k > ev->vocab)
		return mgt_err(MGT_ERR_USAGE, "top-k %lld: expected 0 to the vocabulary size %lld", (long long)o->top_k,
			       (long long)ev->vocab);
	if (!(o->top_p >= 0 && o->top_p <= 1))
		return mgt_err(MGT_ERR_USAGE, "top-p %g: expected 0 (off) or a value in (0, 1]", o->top_p);
	if (o->top_k > 1 && o->top_p > 0)
		return mgt_err(MGT_ERR_USAGE, "top-k %lld and top-p %g: give one of them (Megatron's sampling)",
			       (long long)o->top_k, o->top_p);
	if (o->nstop > 0 && !o->tok) return mgt_err(MGT_ERR_USAGE, "stop strings need the tokenizer");
	return MGT_OK;
}

static mgt_status check_prompts(const gen *g)
{
	for (int64_t i = 0; i < g->nprompts; i++) {
		if (g->lens[i] < 1) return mgt_err(MGT_ERR_INPUT, "prompt %lld: empty (no tokens)", (long long)i);
		if (g->lens[i] > g->S)
			return mgt_err(MGT_ERR_INPUT, "prompt %lld: %lld tokens, longer than the context of %lld positions",
				       (long long)i, (long long)g->lens[i], (long long)g->S);
		mgt_status st = mgt_eval_check_ids(g->ev, g->prompts[i], g->lens[i]);
		if (st) return mgt_err_ctx(st, "prompt %lld", (long long)i);
	}
	return MGT_OK;
}

static bool greedy(const mgt_gen_opts *o) { return o->greedy || o->top_k == 1 || o->temperature == 0; }

static int32_t argmax(const float *lg, int64_t V)
{
	int64_t best = 0;
	for (int64_t v = 1; v < V; v++)
		if (lg[v] > lg[best]) best = v; /* strict: ties keep the lowest id */
	return (int32_t)best;
}

static int by_value_desc(const void *a, const void *b, void *key)
{
	const double *p = key;
	double x = p[*(const int32_t *)a], y = p[*(const int32_t *)b];
	if (x != y) return x < y ? 1 : -1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

/* p[0..V): logits / temperature, -inf where top-k or top-p filters them out. */
static void filter(const mgt_gen_opts *o, double *p, int32_t *idx, int64_t V)
{
	if (o->top_k <= 1 && o->top_p <= 0) return;
	for (int64_t v = 0; v < V; v++) idx[v] = (int32_t)v;
	qsort_r(idx, (size_t)V, sizeof *idx, by_value_desc, p);
	if (o->top_k > 1) {
		double kth = p[idx[o->top_k - 1]];
		for (int64_t v = 0; v < V; v++)
			if (p[v] < kth) p[v] = -INFINITY;
		return;
	}
	double mx = p[idx[0]], sum = 0, cum = 0;
	for (int64_t j = 0; j < V; j++) sum += exp(p[idx[j]] - mx);
	bool drop = false;
	for (int64_t j = 0; j < V; j++) {
		double pr = exp(p[idx[j]] - mx) / sum;
		if (drop) p[idx[j]] = -INFINITY;
		cum += pr;
		drop = drop || cum > o->top_p;
	}
}

/* A uniform number in [0, 1) with 53 bits: words 0 and 1 of Philox(seed; prompt, step). */
static double draw(uint64_t seed, int64_t prompt, int64_t step)
{
	uint32_t w[4];
	mgt_philox(seed, (uint64_t)prompt, (uint64_t)step, w);
	return (double)((((uint64_t)w[0] << 21) ^ (w[1] >> 11)) & ((1ull << 53) - 1)) * 0x1p-53;
}

static int32_t sample(gen *g, const float *lg, int64_t prompt, int64_t step)
{
	const mgt_gen_opts *o = g->o;
	int64_t V = g->V;
	if (greedy(o)) return argmax(lg, V);
	for (int64_t v = 0; v < V; v++) g->p[v] = (double)(o->temperature != 1.0 ? lg[v] / (float)o->temperature : lg[v]);
	filter(o, g->p, g->idx, V);
	double mx = -INFINITY, sum = 0;
	for (int64_t v = 0; v < V; v++) mx = g->p[v] > mx ? g->p[v] : mx;
	for (int64_t v = 0; v < V; v++) sum += g->p[v] = exp(g->p[v] - mx);
	double u = draw(o->seed, prompt, step) * sum, acc = 0;
	int64_t last = 0;
	for (int64_t v = 0; v < V; v++) {
		if (g->p[v] <= 0) continue;
		last = v;
		acc += g->p[v];
		if (acc > u) return (int32_t)v;
	}
	return (int32_t)last; /* rounding: the last id with probability */
}

/* The end of the earliest stop string in text[0..n), or 0 when none occurs. */
static size_t stop_end(const mgt_gen_opts *o, const char *text, size_t n)
{
	size_t best = 0;
	for (int k = 0; k < o->nstop; k++) {
		size_t L = strlen(o->stop[k]);
		const char *f = L ? memmem(text, n, o->stop[k], L) : NULL;
		size_t e = f ? (size_t)(f - text) + L : 0;
		if (e && (!best || e < best)) best = e;
	}
	return best;
}

/* Whether id ends a prompt: the eod id or one of the end ids (not with eod < 0). */
static bool is_end(const mgt_gen_opts *o, int32_t id)
{
	if (o->eod < 0) return false;
	bool end = id == o->eod;
	for (int k = 0; !end && k < o->nend; k++) end = id == o->end_ids[k];
	return end;
}

/* Record id as slot s's new token, decide whether the prompt ends, call back. */
static mgt_status emit(gen *g, slot *s, int32_t id, const float *lg)
{
	const mgt_gen_opts *o = g->o;
	mgt_gen_token t = { .prompt = s->prompt, .step = s->step, .id = id, .end = MGT_GEN_MORE, .logits = lg };
	mgt_status st = MGT_OK;
	if (is_end(o, id)) t.end = MGT_GEN_EOD;
	else if (mgt_ids_push(&s->out, id)) return MGT_ERR_NOMEM;
	if (o->tok && t.end == MGT_GEN_MORE) {
		s->text.n = 0;
		st = mgt_tok_decode(o->tok, s->out.v, s->out.n, &s->text);
		size_t e = st ? 0 : stop_end(o, s->text.p, s->text.n);
		if (e) {
			t.end = MGT_GEN_STOP;
			s->text.n = e;
		}
	}
	if (st) return st;
	t.text = o->tok ? (s->text.p ? s->text.p : "") : NULL;
	t.text_len = o->tok ? s->text.n : 0;
	s->step++;
	if (t.end == MGT_GEN_MORE && (s->step >= o->max_new_tokens || s->fed >= g->S)) t.end = MGT_GEN_LENGTH;
	s->next = id;
	st = g->cb ? g->cb(g->ctx, &t) : MGT_OK;
	if (t.end != MGT_GEN_MORE) s->prompt = -1;
	return st;
}

/* Add slot b's tokens of this step to the batch: a new prompt whole, else its last token. */
static void feed(gen *g, int b, int *T, int *nrows)
{
	slot *s = &g->sl[b];
	if (s->prompt < 0 && g->taken < g->nprompts) {
		*s = (slot){ .prompt = g->taken++, .out = s->out, .text = s->text };
		s->out.n = s->text.n = 0;
		const int32_t *pr = g->prompts[s->prompt];
		for (int64_t i = 0; i < g->lens[s->prompt]; i++, (*T)++) {
			g->tok[*T] = pr[i];
			g->seq[*T] = b;
			g->pos[*T] = (int32_t)i;
		}
		s->fed = g->lens[s->prompt];
	} else if (s->prompt >= 0) {
		g->tok[*T] = s->next;
		g->seq[*T] = b;
		g->pos[*T] = (int32_t)s->fed++;
		(*T)++;
	} else {
		return;
	}
	g->rows[*nrows] = *T - 1;
	g->rslot[(*nrows)++] = b;
}

static mgt_status run(gen *g)
{
	mgt_status st = MGT_OK;
	for (;;) {
		int T = 0, nrows = 0;
		for (int b = 0; b < g->B; b++) feed(g, b, &T, &nrows);
		if (!nrows) return MGT_OK;
		st = mgt_model_infer(g->ev->m, g->kv, T, g->tok, g->seq, g->pos, nrows, g->rows, g->logits);
		for (int k = 0; !st && k < nrows; k++) {
			const float *lg = g->logits + (size_t)k * (size_t)g->Vp;
			slot *s = &g->sl[g->rslot[k]];
			st = emit(g, s, sample(g, lg, s->prompt, s->step), lg);
		}
		if (st) return st;
	}
}

static mgt_status gen_alloc(gen *g)
{
	size_t B = (size_t)g->B, cap = B * (size_t)(g->S > g->ev->s ? g->S : g->ev->s), V = (size_t)g->V; /* T5: the encoder's */
	g->sl = mgt_malloc(B * sizeof *g->sl);
	g->tok = mgt_malloc(cap * sizeof *g->tok);
	g->seq = mgt_malloc(cap * sizeof *g->seq);
	g->pos = mgt_malloc(cap * sizeof *g->pos);
	g->rows = mgt_malloc(B * sizeof *g->rows);
	g->rslot = mgt_malloc(B * sizeof *g->rslot);
	g->idx = mgt_malloc(V * sizeof *g->idx);
	g->p = mgt_malloc(V * sizeof *g->p);
	g->logits = mgt_malloc(B * (size_t)g->Vp * sizeof *g->logits);
	if (!g->sl || !g->tok || !g->seq || !g->pos || !g->rows || !g->rslot || !g->idx || !g->p || !g->logits)
		return MGT_ERR_NOMEM;
	memset(g->sl, 0, B * sizeof *g->sl);
	for (size_t b = 0; b < B; b++) g->sl[b].prompt = -1;
	return mgt_kv_cache_create(&g->kv, g->ev->m, g->B, (int)g->S);
}

static void gen_free(gen *g)
{
	for (int b = 0; g->sl && b < g->B; b++) {
		free(g->sl[b].out.v);
		free(g->sl[b].text.p);
	}
	mgt_kv_cache_free(g->kv);
	free(g->sl);
	free(g->tok);
	free(g->seq);
	free(g->pos);
	free(g->rows);
	free(g->rslot);
	free(g->idx);
	free(g->p);
	free(g->logits);
}

/* ---- T5: each group of B prompts encoded once, then decoded in step (a row of B tokens a call) ---- */

/* The encoder input of prompts [p0, p0 + n) into g->tok as [Se, B] rows (padding 0, masked),
 * unused sequences one masked token; *Se the longest prompt. */
static void t5_group(gen *g, int64_t p0, int n, int *Se, uint8_t *mask)
{
	int64_t L = 1;
	for (int j = 0; j < n; j++) L = g->lens[p0 + j] > L ? g->lens[p0 + j] : L;
	*Se = (int)L;
	for (int64_t i = 0; i < L; i++)
		for (int j = 0; j < g->B; j++) {
			size_t t = (size_t)i * (size_t)g->B + (size_t)j;
			bool real = j < n && i < g->lens[p0 + j];
			g->tok[t] = real ? g->prompts[p0 + j][i] : 0;
			mask[t] = real || (j >= n && i == 0);
		}
}

/* Decode the group in step from the decoder's start token until every prompt of it ends. */
static mgt_status t5_decode(gen *g, int n, int32_t start)
{
	mgt_status st = MGT_OK;
	for (int j = 0; j < g->B; j++) g->sl[j].next = start;
	for (int k = 0; !st; k++) {
		int live = 0;
		for (int j = 0; j < g->B; j++) {
			g->tok[j] = g->sl[j].next;
			g->seq[j] = j;
			g->pos[j] = k;
			g->rows[j] = j;
			live += j < n && g->sl[j].prompt >= 0;
		}
		if (!live) return MGT_OK;
		st = mgt_model_infer(g->ev->m, g->kv, g->B, g->tok, g->seq, g->pos, g->B, g->rows, g->logits);
		for (int j = 0; !st && j < n; j++) {
			slot *s = &g->sl[j];
			if (s->prompt < 0) continue;
			s->fed = k + 1;
			const float *lg = g->logits + (size_t)j * (size_t)g->Vp;
			st = emit(g, s, sample(g, lg, s->prompt, s->step), lg);
		}
	}
	return st;
}

static mgt_status gen_t5(gen *g)
{
	int32_t start = g->o->tok ? mgt_tok_special_id(g->o->tok, "bos") : -1;
	if (start < 0)
		return mgt_err(MGT_ERR_USAGE, "T5 generation starts the decoder with the tokenizer's bos token ([CLS] for the "
			       "WordPiece tokenizers): give the tokenizer");
	uint8_t *mask = mgt_malloc((size_t)g->B * (size_t)g->ev->s);
	if (!mask) return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	for (int64_t p0 = 0; !st && p0 < g->nprompts; p0 += g->B) {
		int n = g->nprompts - p0 < g->B ? (int)(g->nprompts - p0) : g->B, Se;
		t5_group(g, p0, n, &Se, mask);
		st = mgt_model_encode(g->ev->m, g->kv, Se, g->tok, mask);
		for (int j = 0; j < g->B; j++) {
			slot *s = &g->sl[j];
			*s = (slot){ .prompt = j < n ? p0 + j : -1, .out = s->out, .text = s->text };
			s->out.n = s->text.n = 0;
		}
		if (!st) st = t5_decode(g, n, start);
	}
	free(mask);
	return st;
}

mgt_status mgt_eval_generate(mgt_eval *ev, const mgt_gen_opts *o, int64_t nprompts, const int32_t *const *prompts,
			     const int64_t *lens, mgt_gen_cb cb, void *ctx)
{
	gen g = { .ev = ev, .o = o, .nprompts = nprompts, .prompts = prompts, .lens = lens, .cb = cb, .ctx = ctx };
	mgt_status st = mgt_eval_supports(ev, MGT_EVAL_USE_GENERATE, "mgt_eval_generate");
	if (!st) st = check_opts(ev, o, &g.S);
	if (st) return st;
	g.V = ev->vocab;
	g.Vp = ev->padded_vocab;
	const bool t5 = mgt_model_family(&ev->a.model)->recipe == MGT_STACK_ENCODER_DECODER;
	if (!(st = check_prompts(&g)) && nprompts > 0 && o->max_new_tokens > 0) {
		g.B = o->batch_size < nprompts ? o->batch_size : (int)nprompts;
		if (t5) g.S = ev->a.model.decoder_seq_length; /* prompts go to the encoder; the cache is the decoder's */
		st = gen_alloc(&g);
		if (!st) st = t5 ? gen_t5(&g) : run(&g);
		gen_free(&g);
	}
	return st;
}
