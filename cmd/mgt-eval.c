/* mgt-eval: the logits and greedy continuation of a checkpoint's model.  See mgt-eval(1).
 *
 *   mgt-eval --load DIR [--ckpt-step N] (--tokens "ID ..." | --prompt TEXT) [--max-new-tokens N]
 *            [--logits FILE.npy] [--device cpu|cuda|auto] [--threads N] [tokenizer flags]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/data.h"
#include "eval/eval.h"

static const char PROG[] = "mgt-eval";

enum { OPT_LOAD = CLI_FIRST_FREE, OPT_STEP, OPT_TOKENS, OPT_PROMPT, OPT_MAX_NEW, OPT_LOGITS, OPT_DEVICE,
       OPT_THREADS, OPT_HELP };

static void usage(void)
{
	printf("Usage: mgt-eval --load DIR (--tokens \"ID ...\" | --prompt TEXT) [OPTION]...\n"
	       "Load a checkpoint's model (any tensor/pipeline parallel layout it was saved with) into one\n"
	       "process and print its greedy continuation of the input; write the input's logits.\n\n"
	       "  --load DIR            checkpoint directory (mgt-ckpt(5)): the iteration its tracker names\n"
	       "  --ckpt-step N         load iteration N instead\n"
	       "  --tokens \"ID ...\"     the input as token ids (spaces or commas between them)\n"
	       "  --prompt TEXT         the input as text, encoded with the checkpoint's tokenizer\n"
	       "  --max-new-tokens N    tokens to generate greedily (argmax, ties to the lowest id) [0]\n"
	       "  --logits FILE.npy     write the logits of the last forward, float32 [positions, vocabulary]:\n"
	       "                        the input's positions, and with N new tokens the first N-1 of them too\n"
	       "  --device D            cpu, cuda, or auto (cuda when built with CUDA and a GPU is present) [auto]\n"
	       "  --threads N           CPU threads (0: all) [0]\n"
	       "  --help\n\n"
	       "Output (stdout): \"prompt: ID ...\" (the input ids), \"ids: ID ...\" (the new ids) and, when the\n"
	       "tokenizer is available, \"text: \" followed by the new ids' text.\n\n"
	       "The tokenizer is the checkpoint's (metadata.json).  Given --tokenizer-type, these flags replace\n"
	       "it; without, --vocab-file, --merge-file and --tokenizer-model replace its files' paths.\n%s\n"
	       "Exit status: 0 ok, 1 runtime error, 2 usage error, 3 bad input (token id outside the vocabulary,\n"
	       "text that is not UTF-8), 4 bad or missing tokenizer files, 6 checkpoint missing, damaged or not\n"
	       "a model mgt knows, 130 interrupted.\nSee mgt-eval(1), mgt-ckpt(5).\n",
	       mgt_cli_tok_help);
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
	const char *load, *tokens, *prompt, *logits, *device;
	long long step, max_new, threads;
	mgt_tok_opts tok;      /* tokenizer flags given */
	int tok_given;         /* which: 1 type (all of them), 2 some file paths */
} opts;

/* The tokenizer: the checkpoint's flags with the command line's applied (see usage). *tok NULL
 * when the checkpoint has none. */
static mgt_status load_tokenizer(const opts *o, const mgt_eval *ev, mgt_tok **tok)
{
	mgt_tok_opts t;
	*tok = NULL;
	if (o->tok.type) {
		t = o->tok;
	} else {
		mgt_eval_tok_opts(ev, &t);
		if (o->tok.vocab_file) t.vocab_file = o->tok.vocab_file;
		if (o->tok.merge_file) t.merge_file = o->tok.merge_file;
		if (o->tok.model) t.model = o->tok.model;
		if (!t.type && t.vocab_file && t.merge_file) t.type = "GPT2BPETokenizer";
		t.hf_no_special_tokens = o->tok.hf_no_special_tokens;
		t.vocab_extra_ids = o->tok.vocab_extra_ids;
	}
	if (!t.type) return MGT_OK;
	mgt_status st = mgt_tok_load(tok, &t);
	if (st == MGT_ERR_VOCAB) {
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", mgt_err_msg());
		mgt_err(st, "tokenizer %s of the checkpoint: %s (--vocab-file, --merge-file and --tokenizer-model give "
			"its files' new paths)", t.type, msg);
	}
	return st;
}

/* The input ids, from --tokens or --prompt. */
static mgt_status input_ids(const opts *o, const mgt_tok *tok, mgt_ids *ids)
{
	if (o->tokens) return parse_ids(o->tokens, ids);
	mgt_tok_enc *enc;
	mgt_status st = mgt_tok_enc_new(&enc, tok);
	if (!st) st = mgt_tok_encode(enc, o->prompt, strlen(o->prompt), ids);
	mgt_tok_enc_free(enc);
	if (!st && !ids->n) st = mgt_err(MGT_ERR_INPUT, "--prompt: the text encodes to no tokens");
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

static mgt_status run(const opts *o)
{
	mgt_eval *ev = NULL;
	mgt_tok *tok = NULL;
	mgt_ids ids = { 0 };
	int32_t *out = NULL;
	float *logits = NULL;
	mgt_buf text = { 0 }, shown = { 0 };
	mgt_status st = mgt_eval_open(&ev, o->load, o->step);
	if (!st) st = load_tokenizer(o, ev, &tok);
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
	mgt_eval_build_opts bo = { .seq_length = rows, .vocab_size = vocab, .device = o->device, .threads = (int)o->threads };
	if (!st) st = mgt_eval_build(ev, &bo);
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
	mgt_tok_free(tok);
	mgt_eval_free(ev);
	return st;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		MGT_CLI_TOK_LONGOPTS,
		{"load", required_argument, 0, OPT_LOAD}, {"ckpt-step", required_argument, 0, OPT_STEP},
		{"tokens", required_argument, 0, OPT_TOKENS}, {"prompt", required_argument, 0, OPT_PROMPT},
		{"max-new-tokens", required_argument, 0, OPT_MAX_NEW}, {"logits", required_argument, 0, OPT_LOGITS},
		{"device", required_argument, 0, OPT_DEVICE}, {"threads", required_argument, 0, OPT_THREADS},
		{"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
	opts o = { .device = "auto" };
	mgt_cli_tok_defaults(&o.tok);
	mgt_signals_install();
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (mgt_cli_tok_option(PROG, c, optarg, &o.tok)) continue;
		switch (c) {
		case OPT_LOAD: o.load = optarg; break;
		case OPT_STEP: o.step = mgt_cli_int(PROG, "--ckpt-step", optarg); break;
		case OPT_TOKENS: o.tokens = optarg; break;
		case OPT_PROMPT: o.prompt = optarg; break;
		case OPT_MAX_NEW: o.max_new = mgt_cli_int(PROG, "--max-new-tokens", optarg); break;
		case OPT_LOGITS: o.logits = optarg; break;
		case OPT_DEVICE: o.device = optarg; break;
		case OPT_THREADS: o.threads = mgt_cli_int(PROG, "--threads", optarg); break;
		case 'h': case OPT_HELP: usage(); return 0;
		case ':': mgt_cli_usage_error(PROG, "%s needs a value", argv[optind - 1]);
		default: mgt_cli_usage_error(PROG, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc) mgt_cli_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
	if (!o.load) mgt_cli_usage_error(PROG, "--load DIR is required (the checkpoint directory)");
	if (!o.tokens == !o.prompt) mgt_cli_usage_error(PROG, "give one of --tokens and --prompt");
	if (!o.tok.type && (o.tok.tiktoken_pattern || o.tok.tiktoken_num_special != 1000 || o.tok.vocab_size ||
			    o.tok.null_eod_id != -1))
		mgt_cli_usage_error(PROG, "--tiktoken-pattern, --tiktoken-num-special-tokens, --vocab-size and "
				    "--null-tokenizer-eod-id replace the checkpoint's tokenizer: give --tokenizer-type too");
	if (o.max_new > (1LL << 24)) mgt_cli_usage_error(PROG, "--max-new-tokens %lld: too many", o.max_new);
	if (o.threads > 4096) mgt_cli_usage_error(PROG, "--threads %lld: too many", o.threads);
	mgt_status st = run(&o);
	if (fflush(stdout) != 0 && !st) st = mgt_err(MGT_ERR_IO, "standard output: write failed");
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	return 0;
}
