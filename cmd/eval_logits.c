/* cmd/eval_logits.c: mgt-eval logits: a checkpoint's logits of an input and its greedy
 * continuation (recomputing the prefix; mgt-eval generate has the KV cache).  See mgt-eval(1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "eval_cmd.h"

#define PROG EVAL_PROG

enum { OPT_TOKENS = EVAL_OPT_FIRST_FREE, OPT_PROMPT, OPT_MAX_NEW, OPT_LOGITS };

static void usage(void)
{
	printf("Usage: mgt-eval logits (--load DIR | --hf DIR) (--tokens \"ID ...\" | --prompt TEXT) [OPTION]...\n"
	       "Load a model into one process, write the logits of the input and print its greedy\n"
	       "continuation, recomputing the whole prefix for every new token (no KV cache).\n\n"
	       "  --tokens \"ID ...\"     the input as token ids (spaces or commas between them)\n"
	       "  --prompt TEXT         the input as text, encoded with the checkpoint's tokenizer\n"
	       "  --max-new-tokens N    tokens to generate greedily (argmax, ties to the lowest id) [0]\n"
	       "  --logits FILE.npy     write the logits of the last forward, float32 [positions, vocabulary]:\n"
	       "                        the input's positions, and with N new tokens the first N-1 of them too\n"
	       "  --help\n%s%s\n"
	       "Output (stdout): \"prompt: ID ...\" (the input ids), \"ids: ID ...\" (the new ids) and, when the\n"
	       "tokenizer is available, \"text: \" followed by the new ids' text.\n\n%s"
	       "See mgt-eval(1), mgt-ckpt(5).\n", eval_model_help, mgt_cli_tok_help, eval_exit_help);
}

/* "ID ID ..." (spaces, tabs, commas between) into ids. */
static mgt_status parse_ids(const char *s, mgt_ids *ids)
{
	const char *p = s;
	for (;;) {
		p += strspn(p, " \t\r\n,");
		if (!*p) break;
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || (*end && !strchr(" \t\r\n,", *end)))
			return mgt_err(MGT_ERR_USAGE, "--tokens: '%.*s' is not a token id", (int)strcspn(p, " \t\r\n,"), p);
		if (v < 0 || v > INT32_MAX)
			return mgt_err(MGT_ERR_INPUT, "--tokens: token %lld (position %zu) is outside the vocabulary", v, ids->n);
		if (mgt_ids_push(ids, (int32_t)v)) return MGT_ERR_NOMEM;
		p = end;
	}
	return ids->n ? MGT_OK : mgt_err(MGT_ERR_USAGE, "--tokens: no token ids in '%s'", s);
}

typedef struct {
	eval_model_opts m;
	const char *tokens, *prompt, *logits;
	long long max_new;
} lopts;

/* The input ids, from --tokens or --prompt. */
static mgt_status input_ids(const lopts *o, const mgt_tok *tok, mgt_ids *ids)
{
	if (o->tokens) return parse_ids(o->tokens, ids);
	mgt_tok_enc *enc;
	mgt_ids none = { 0 };
	mgt_status st = mgt_tok_enc_new(&enc, tok);
	if (!st) st = eval_encode_empty(enc, &none);
	if (!st) st = mgt_tok_encode(enc, o->prompt, strlen(o->prompt), ids);
	mgt_tok_enc_free(enc);
	if (!st && (!ids->n || !o->prompt[0] || eval_ids_same(ids, &none)))
		st = mgt_err(MGT_ERR_INPUT, "the text encodes to no tokens%s",
			     ids->n ? " but the ones the tokenizer adds to any text" : "");
	free(none.v);
	return st ? mgt_err_ctx(st, "--prompt") : MGT_OK;
}

static void print_ids(const char *label, const int32_t *v, size_t n)
{
	printf("%s:", label);
	for (size_t i = 0; i < n; i++) printf(" %d", v[i]);
	putchar('\n');
}

/* logits [rows, vocab] as a little-endian float32 .npy (numpy format 1.0), atomically. */
static mgt_status write_logits(const char *path, const float *logits, int64_t rows, int64_t vocab)
{
	size_t n = (size_t)rows * (size_t)vocab;
	unsigned char *le = mgt_malloc(n * 4);
	if (!le) return MGT_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &logits[i], 4);
		for (int b = 0; b < 4; b++) le[4 * i + (size_t)b] = (unsigned char)(u >> (8 * b));
	}
	int64_t shape[2] = { rows, vocab };
	mgt_status st = mgt_npy_write(path, "<f4", 2, shape, le, n * 4);
	free(le);
	return st;
}

static mgt_status run(const lopts *o)
{
	eval_model em;
	mgt_ids ids = { 0 };
	int32_t *out = NULL;
	float *logits = NULL;
	mgt_buf text = { 0 }, shown = { 0 };
	mgt_status st = eval_model_open(&o->m, false, &em);
	mgt_eval *ev = em.ev;
	mgt_tok *tok = em.tok;
	if ((st == MGT_ERR_VOCAB || st == MGT_ERR_USAGE) && ev && o->tokens) { /* ids need no tokenizer */
		fprintf(stderr, "%s: note: %s; printing ids only\n", PROG, mgt_err_msg());
		st = MGT_OK;
	}
	if (!st && !tok && o->prompt)
		st = mgt_err(MGT_ERR_VOCAB, "--prompt: the checkpoint %s records no tokenizer (--mock-data "
			     "without --tokenizer-type): give --tokenizer-type and its files, or --tokens", mgt_eval_dir(ev));
	if (!st) st = input_ids(o, tok, &ids);
	int64_t vocab = tok ? mgt_tok_vocab_size(tok) : ev ? mgt_eval_vocab_size(ev) : 0;
	if (!st && !vocab)
		st = mgt_err(MGT_ERR_VOCAB, "%s: the vocabulary size is not recorded and the tokenizer is not "
			     "available: give the tokenizer's files", mgt_eval_dir(ev));
	for (size_t i = 0; !st && i < ids.n; i++)
		if (ids.v[i] >= vocab)
			st = mgt_err(MGT_ERR_INPUT, "--tokens: token %d (position %zu) is outside the vocabulary "
				     "[0, %lld)", ids.v[i], i, (long long)vocab);
	int64_t n = (int64_t)ids.n, m = o->max_new, rows = m ? n + m - 1 : n;
	const mgt_model_config *mc = ev ? &mgt_eval_args(ev)->model : NULL;
	if (!st && !strcmp(mc->position_embedding_type, "learned_absolute") && rows > mc->max_position_embeddings)
		st = mgt_err(MGT_ERR_USAGE, "%lld input tokens and --max-new-tokens %lld need %lld positions: more than the "
			     "%lld learned position embeddings of the checkpoint (max_position_embeddings)", (long long)n,
			     (long long)m, (long long)rows, (long long)mc->max_position_embeddings);
	if (!st) st = eval_model_build(&o->m, &em, rows);
	if (!st && !(out = mgt_malloc((size_t)(m ? m : 1) * sizeof *out))) st = MGT_ERR_NOMEM;
	if (!st && o->logits && !(logits = mgt_malloc((size_t)rows * (size_t)vocab * sizeof *logits)))
		st = MGT_ERR_NOMEM;
	if (!st) st = mgt_eval_greedy(ev, ids.v, n, m, out, logits);
	if (!st && o->logits) st = write_logits(o->logits, logits, rows, vocab);
	if (!st) {
		print_ids("prompt", ids.v, ids.n);
		print_ids("ids", out, (size_t)m);
	}
	if (!st && tok) {
		st = mgt_tok_decode(tok, out, (size_t)m, &text);
		if (!st) st = mgt_tok_utf8_lossy(text.p ? text.p : "", text.n, &shown);
		if (!st) printf("text: %.*s\n", (int)shown.n, shown.p ? shown.p : "");
	}
	free(text.p);
	free(shown.p);
	free(out);
	free(logits);
	free(ids.v);
	eval_model_close(&em);
	return st;
}

static int own_option(int c, const char *arg, void *ctx)
{
	lopts *o = ctx;
	switch (c) {
	case OPT_TOKENS: o->tokens = arg; return 1;
	case OPT_PROMPT: o->prompt = arg; return 1;
	case OPT_MAX_NEW: o->max_new = mgt_cli_int(PROG, "--max-new-tokens", arg); return 1;
	case OPT_LOGITS: o->logits = arg; return 1;
	default: return 0;
	}
}

int eval_cmd_logits(int argc, char **argv)
{
	static const struct option longopts[] = {
		EVAL_MODEL_LONGOPTS,
		{"tokens", required_argument, 0, OPT_TOKENS}, {"prompt", required_argument, 0, OPT_PROMPT},
		{"max-new-tokens", required_argument, 0, OPT_MAX_NEW}, {"logits", required_argument, 0, OPT_LOGITS},
		{0, 0, 0, 0}};
	lopts o = { 0 };
	eval_model_defaults(&o.m);
	o.m.command = EVAL_PROG " logits";
	o.m.use = MGT_EVAL_USE_NEXT_TOKEN;
	eval_parse(argc, argv, longopts, &o.m, own_option, &o, usage);
	eval_model_check(&o.m);
	if (!o.tokens == !o.prompt) mgt_cli_usage_error(PROG, "give one of --tokens and --prompt");
	if (o.max_new > (1LL << 24)) mgt_cli_usage_error(PROG, "--max-new-tokens %lld: too many", o.max_new);
	return eval_finish(run(&o));
}
