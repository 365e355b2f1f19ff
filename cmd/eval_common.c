/* cmd/eval_common.c: what mgt-eval's commands share (eval_cmd.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "convert/convert.h"
#include "eval_cmd.h"

const char eval_model_help[] =
	"Model:\n"
	"  --load DIR            mgt checkpoint directory (mgt-ckpt(5)), saved under any TP/PP layout:\n"
	"                        the iteration its tracker names\n"
	"  --ckpt-step N         load iteration N instead\n"
	"  --hf DIR              a Hugging Face directory (config.json, *.safetensors) instead of --load,\n"
	"                        read in place as mgt-ckpt-convert(1) would convert it\n"
	"  --device D            cpu, cuda, or auto (cuda when built with CUDA and a GPU is present) [auto]\n"
	"  --threads N           CPU threads (0: all) [0]\n"
	"Tokenizer: the checkpoint's (metadata.json).  Given --tokenizer-type, these flags replace it;\n"
	"without, --vocab-file, --merge-file and --tokenizer-model replace its files' paths.\n";

const char eval_exit_help[] =
	"Exit status: 0 ok, 1 runtime error, 2 usage error, 3 bad input (token id outside the vocabulary,\n"
	"text that is not UTF-8, a malformed input line), 4 bad or missing tokenizer files, or a tokenizer\n"
	"given whose vocabulary is not the checkpoint's, 6 checkpoint\n"
	"missing, damaged or not a model mgt knows, or of a family the command cannot run (a BERT for\n"
	"perplexity, generate, tasks and logits; a T5 for perplexity, tasks and logits), 130 interrupted.\n";

void eval_model_defaults(eval_model_opts *o)
{
	memset(o, 0, sizeof *o);
	o->device = "auto";
	mgt_cli_tok_defaults(&o->tok);
}

int eval_model_option(int c, const char *arg, eval_model_opts *o)
{
	if (mgt_cli_tok_option(EVAL_PROG, c, arg, &o->tok)) return 1;
	switch (c) {
	case EVAL_OPT_LOAD: o->load = arg; return 1;
	case EVAL_OPT_HF: o->hf = arg; return 1;
	case EVAL_OPT_STEP: o->step = mgt_cli_int(EVAL_PROG, "--ckpt-step", arg); return 1;
	case EVAL_OPT_DEVICE: o->device = arg; return 1;
	case EVAL_OPT_THREADS:
		o->threads = mgt_cli_int(EVAL_PROG, "--threads", arg);
		if (o->threads > 4096) mgt_cli_usage_error(EVAL_PROG, "--threads %lld: too many", o->threads);
		return 1;
	default: return 0;
	}
}

void eval_model_check(const eval_model_opts *o)
{
	if (!o->load == !o->hf)
		mgt_cli_usage_error(EVAL_PROG, "give one of --load DIR (an mgt checkpoint) and --hf DIR (a Hugging Face "
				    "directory)");
	if (o->hf && o->step) mgt_cli_usage_error(EVAL_PROG, "--ckpt-step: a Hugging Face directory has no iterations");
	mgt_cli_tok_check_override(EVAL_PROG, &o->tok);
}

void eval_getopt_reset(void)
{
	optind = 1;
	opterr = 0;
}

void eval_parse(int argc, char **argv, const struct option *longopts, eval_model_opts *m,
		int (*own)(int c, const char *arg, void *ctx), void *ctx, void (*help)(void))
{
	int c;
	eval_getopt_reset();
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h' || c == EVAL_OPT_HELP) {
			help();
			exit(0);
		}
		if (c == ':') mgt_cli_usage_error(EVAL_PROG, "%s needs a value", argv[optind - 1]);
		if (c == '?' || (!eval_model_option(c, optarg, m) && !own(c, optarg, ctx)))
			mgt_cli_usage_error(EVAL_PROG, "unknown option '%s'", argv[optind - 1]);
	}
	if (optind < argc) mgt_cli_usage_error(EVAL_PROG, "unexpected argument '%s'", argv[optind]);
}

int eval_finish(mgt_status st)
{
	if (fflush(stdout) != 0 && !st) st = mgt_err(MGT_ERR_IO, "standard output: write failed");
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(EVAL_PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(EVAL_PROG, st);
	return 0;
}

mgt_status eval_encode_empty(mgt_tok_enc *enc, mgt_ids *out)
{
	return mgt_tok_encode(enc, "", 0, out);
}

bool eval_ids_same(const mgt_ids *a, const mgt_ids *b)
{
	return a->n == b->n && (!a->n || !memcmp(a->v, b->v, a->n * sizeof *a->v));
}

/* The checkpoint's tokenizer flags with the command line's applied; a tokenizer the command line
 * names (or moves) must have the vocabulary the checkpoint records (mgt_eval_check_tok): else
 * none is kept. */
static mgt_status load_tokenizer(const eval_model_opts *o, const mgt_eval *ev, mgt_tok **tok, const char **model)
{
	mgt_tok_opts t;
	*tok = NULL;
	mgt_eval_tok_opts(ev, &t);
	mgt_tok_opts_apply(&t, &o->tok);
	*model = t.model;
	if (!t.type) return MGT_OK;
	mgt_status st = mgt_tok_load(tok, &t);
	bool given = o->tok.type || o->tok.vocab_file || o->tok.merge_file || o->tok.model;
	if (!st && given && (st = mgt_eval_check_tok(ev, *tok, &t))) {
		mgt_tok_free(*tok);
		*tok = NULL;
		return st;
	}
	if (st == MGT_ERR_VOCAB) {
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", mgt_err_msg());
		mgt_err(st, "tokenizer %s of the checkpoint: %s (--vocab-file, --merge-file and --tokenizer-model give "
			"its files' new paths)", t.type, msg);
	}
	return st;
}

/* --hf: the Hugging Face directory read in place (mgt_eval_open_hf: no temporary checkpoint). */
static mgt_status open_hf(const char *hf, mgt_eval **ev)
{
	mgt_status st = mgt_eval_open_hf(ev, hf);
	if (st == MGT_ERR_INPUT) st = MGT_ERR_FORMAT;
	return st ? mgt_err_ctx(st, "--hf %s", hf) : MGT_OK;
}

mgt_status eval_model_open(const eval_model_opts *o, bool need_tok, eval_model *m)
{
	memset(m, 0, sizeof *m);
	mgt_status st = o->hf ? open_hf(o->hf, &m->ev) : mgt_eval_open(&m->ev, o->load, o->step);
	if (!st && o->command) st = mgt_eval_supports(m->ev, o->use, o->command);
	if (!st) st = load_tokenizer(o, m->ev, &m->tok, &m->tok_model);
	if (!st && need_tok && !m->tok)
		st = mgt_err(MGT_ERR_VOCAB, "the checkpoint %s records no tokenizer (--mock-data without "
			     "--tokenizer-type): give --tokenizer-type and its files", mgt_eval_dir(m->ev));
	return st;
}

mgt_status eval_model_build(const eval_model_opts *o, eval_model *m, int64_t seq_length)
{
	int64_t vocab = m->tok ? mgt_tok_vocab_size(m->tok) : mgt_eval_vocab_size(m->ev);
	if (!vocab)
		return mgt_err(MGT_ERR_VOCAB, "%s: the vocabulary size is not recorded and the tokenizer is not "
			       "available: give the tokenizer's files", mgt_eval_dir(m->ev));
	mgt_eval_build_opts bo = { .seq_length = seq_length, .vocab_size = vocab, .device = o->device,
				   .threads = (int)o->threads };
	return mgt_eval_build(m->ev, &bo);
}

void eval_model_close(eval_model *m)
{
	mgt_tok_free(m->tok);
	mgt_eval_free(m->ev);
	memset(m, 0, sizeof *m);
}
