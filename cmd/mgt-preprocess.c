/* mgt-preprocess: JSONL (plain or zstd) to Megatron indexed datasets, as Megatron's
 * tools/preprocess_data.py does it: the flags, the tokenizer, and the summary; the pipeline
 * (reader, tokenizing workers, in-order writer) is mgt_preprocess_run in lib/data/preprocess.c.
 * See mgt-preprocess(1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "data/data.h"

static const char *prog = "mgt-preprocess";

#define MAX_KEYS MGT_PREPROCESS_MAX_KEYS

typedef mgt_preprocess_config config;

static void summary(const config *cfg, const mgt_preprocess_stats *s)
{
	if (cfg->quiet)
		return;
	double dt = s->seconds;
	char a[32], b[32], c[32];
	fprintf(stderr, "%s: %s documents, %s tokens (dtype %s), %.1f MB of JSONL in %.2f s: %.1f MB/s, %.2f M tokens/s, %d workers\n",
		prog, mgt_fmt_count(a, s->documents), mgt_fmt_count(b, s->tokens),
		mgt_dtype_name(mgt_dtype_optimal(mgt_tok_vocab_size(cfg->tok))), s->bytes_out / 1e6, dt,
		dt > 0 ? s->bytes_out / dt / 1e6 : 0, dt > 0 ? s->tokens / dt / 1e6 : 0, cfg->workers);
	if (s->unk * 100 > s->tokens) { /* more than 1%: the vocabulary does not fit the text */
		size_t n;
		const char *u = mgt_tok_token_bytes(cfg->tok, mgt_tok_special_id(cfg->tok, "unk"), &n);
		fprintf(stderr, "%s: warning: %.1f%% of the tokens (%s of %s) are the unknown token %.*s: the vocabulary "
			"does not cover the text (cased text needs a cased vocabulary with BertWordPieceCase, such as "
			"bert-large-cased's vocab.txt; see TOKENIZERS in mgt-preprocess(1))\n", prog,
			100.0 * (double)s->unk / (double)s->tokens, mgt_fmt_count(a, s->unk), mgt_fmt_count(b, s->tokens),
			u ? (int)n : 5, u ? u : "(unk)");
	}
	if (s->skipped || s->blank)
		fprintf(stderr, "%s: skipped %s invalid lines and %s blank lines\n", prog, mgt_fmt_count(c, s->skipped),
			mgt_fmt_count(a, s->blank));
	for (int k = 0; k < cfg->n_keys; k++) {
		char *name = mgt_preprocess_output_name(cfg, k);
		fprintf(stderr, "%s: wrote %s.bin and %s.idx\n", prog, name, name);
		free(name);
	}
}

/* ---- options ------------------------------------------------------------------------------ */

enum { OPT_INPUT = CLI_FIRST_FREE, OPT_OUTPUT, OPT_KEYS, OPT_EOD, OPT_WORKERS, OPT_LOG, OPT_OVERWRITE,
       OPT_SKIP, OPT_QUIET, OPT_SPLIT, OPT_KEEP_NL, OPT_LANG, OPT_PARTITIONS, OPT_IGNORED_ARG, OPT_IGNORED, OPT_HELP };

static void usage(void)
{
	printf("Usage: mgt-preprocess --input FILE|GLOB|- --output-prefix PREFIX --tokenizer-type T [OPTIONS]\n"
	       "Tokenize JSONL (plain or zstd-compressed, detected by content) into Megatron indexed datasets\n"
	       "PREFIX_KEY_document.bin and .idx (MMIDIDX v1, see mgt-dataset(5)), documents in input order;\n"
	       "with --split-sentences PREFIX_KEY_sentence.bin and .idx, one sequence per sentence.\n\n"
	       "  --input FILE|GLOB|-     input file, shell-style glob (sorted), or - for standard input\n"
	       "  --output-prefix PREFIX  output path prefix\n"
	       "  --json-keys KEY...      JSON keys to tokenize, one dataset each (default text)\n"
	       "  --append-eod            append the tokenizer's eod id to each non-empty document\n"
	       "  --split-sentences       one sequence per sentence: a list of strings under a key is the\n"
	       "                          document's sentences; a string is split by ICU's sentence rules\n"
	       "  --keep-newlines         with --split-sentences: whitespace after a sentence stays with it\n"
	       "  --lang LANG             sentence rules: an NLTK punkt language (default english) or a\n"
	       "                          locale code (en, de, pt_BR)\n"
	       "  --workers N             tokenizing threads (default: online CPUs)\n"
	       "  --log-interval N        progress line every N documents when stderr is not a terminal\n"
	       "                          (default 1000, at most one a second)\n"
	       "  --overwrite             replace existing outputs (default: refuse, exit 5)\n"
	       "  --skip-invalid-lines    skip lines with bad JSON, a missing key, a non-string value or\n"
	       "                          invalid UTF-8, and count them (default: stop, as Megatron does)\n"
	       "  --quiet                 no progress or summary\n"
	       "  --help\n\n%s\n"
	       "Accepted for compatibility and ignored: --partitions, --keep-sequential-samples, --dataset-impl,\n"
	       "--tokenizer-hf-no-use-fast, --trust-remote-code.\n\n"
	       "Exit status: 0 ok, 1 runtime error (I/O, disk full, file size limit), 2 usage, 3 bad input line,\n"
	       "4 bad tokenizer files, 5 output exists, 128+N stopped by signal N (130 SIGINT, 129 SIGHUP,\n"
	       "143 SIGTERM, 138 SIGUSR1, 140 SIGUSR2). On failure no file is left under the output names.\n",
	       mgt_cli_tok_help);
}

/* An operand that is an existing JSON Lines file (.jsonl, .json, optionally .zst): the rest of a
 * glob the shell expanded after --input. */
static bool stray_input(const char *a)
{
	size_t n = strlen(a);
	const char *e[] = { ".jsonl", ".json", ".zst" };
	for (size_t k = 0; k < sizeof e / sizeof *e; k++) {
		size_t m = strlen(e[k]);
		if (n > m && !strcmp(a + n - m, e[k])) return access(a, F_OK) == 0;
	}
	return false;
}

static void parse(int argc, char **argv, config *cfg, mgt_tok_opts *to)
{
	static const struct option lo[] = {
		MGT_CLI_TOK_LONGOPTS,
		{"input", required_argument, 0, OPT_INPUT}, {"output-prefix", required_argument, 0, OPT_OUTPUT},
		{"json-keys", required_argument, 0, OPT_KEYS}, {"append-eod", no_argument, 0, OPT_EOD},
		{"workers", required_argument, 0, OPT_WORKERS}, {"log-interval", required_argument, 0, OPT_LOG},
		{"overwrite", no_argument, 0, OPT_OVERWRITE}, {"skip-invalid-lines", no_argument, 0, OPT_SKIP},
		{"quiet", no_argument, 0, OPT_QUIET}, {"split-sentences", no_argument, 0, OPT_SPLIT},
		{"keep-newlines", no_argument, 0, OPT_KEEP_NL}, {"lang", required_argument, 0, OPT_LANG},
		{"partitions", required_argument, 0, OPT_IGNORED_ARG}, {"dataset-impl", required_argument, 0, OPT_IGNORED_ARG},
		{"keep-sequential-samples", no_argument, 0, OPT_IGNORED}, {"tokenizer-hf-no-use-fast", no_argument, 0, OPT_IGNORED},
		{"trust-remote-code", no_argument, 0, OPT_IGNORED}, {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
	const char *input = NULL;
	int c, keys_given = 0;
	long nproc = sysconf(_SC_NPROCESSORS_ONLN);
	cfg->workers = nproc > 0 ? (int)(nproc < 256 ? nproc : 256) : 1;
	cfg->log_interval = 1000;
	cfg->lang = "english";
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (mgt_cli_tok_option(prog, c, optarg, to))
			continue;
		switch (c) {
		case OPT_INPUT: input = optarg; break;
		case OPT_OUTPUT: cfg->output_prefix = optarg; break;
		case OPT_KEYS:
			keys_given = 1;
			if (cfg->n_keys == MAX_KEYS)
				mgt_cli_usage_error(prog, "--json-keys: at most %d keys", MAX_KEYS);
			cfg->keys[cfg->n_keys++] = optarg;
			break;
		case OPT_EOD: cfg->append_eod = 1; break;
		case OPT_WORKERS:
			cfg->workers = (int)mgt_cli_int(prog, "--workers", optarg);
			if (cfg->workers < 1 || cfg->workers > 256)
				mgt_cli_usage_error(prog, "--workers: expected 1 to 256");
			break;
		case OPT_LOG:
			cfg->log_interval = (long)mgt_cli_int(prog, "--log-interval", optarg);
			if (cfg->log_interval < 1)
				mgt_cli_usage_error(prog, "--log-interval: expected a positive integer");
			break;
		case OPT_OVERWRITE: cfg->overwrite = 1; break;
		case OPT_SKIP: cfg->skip_bad = 1; break;
		case OPT_QUIET: cfg->quiet = 1; break;
		case OPT_SPLIT: cfg->split = 1; break;
		case OPT_KEEP_NL: cfg->keep_newlines = 1; break;
		case OPT_LANG: cfg->lang = optarg; break;
		case OPT_IGNORED_ARG: case OPT_IGNORED: break;
		case OPT_HELP: usage(); exit(0);
		default: mgt_cli_usage_error(prog, "unknown option");
		}
	}
	/* Megatron's --json-keys takes several values: operands after it are more keys */
	for (; optind < argc; optind++) {
		if (stray_input(argv[optind]))
			mgt_cli_usage_error(prog, "unexpected argument '%s': --input takes one path or glob; a shell "
					    "expanded an unquoted glob? Quote it (--input 'data/*.jsonl') for mgt-preprocess to "
					    "expand", argv[optind]);
		if (!keys_given)
			mgt_cli_usage_error(prog, "unexpected argument '%s'", argv[optind]);
		if (cfg->n_keys == MAX_KEYS)
			mgt_cli_usage_error(prog, "--json-keys: at most %d keys", MAX_KEYS);
		cfg->keys[cfg->n_keys++] = argv[optind];
	}
	if (!cfg->n_keys)
		cfg->keys[cfg->n_keys++] = "text";
	if (!input || !cfg->output_prefix)
		mgt_cli_usage_error(prog, "--input and --output-prefix are required");
	mgt_status st = mgt_input_expand(input, &cfg->inputs, &cfg->n_inputs);
	if (st)
		mgt_cli_fail(prog, st);
}

int main(int argc, char **argv)
{
	config cfg = {.log = stderr, .prog = prog};
	mgt_tok_opts to;
	mgt_signals_install();
	mgt_cli_tok_defaults(&to);
	parse(argc, argv, &cfg, &to);
	mgt_tok *tok = NULL;
	mgt_tok_sent *probe = NULL; /* an unknown --lang is a usage error before any reading */
	mgt_status st = cfg.split ? mgt_tok_sent_new(&probe, cfg.lang, cfg.keep_newlines) : MGT_OK;
	mgt_tok_sent_free(probe);
	if (!st)
		st = mgt_tok_load(&tok, &to);
	cfg.tok = tok;
	if (!st && cfg.append_eod && mgt_tok_eod(tok) < 0)
		st = mgt_err(MGT_ERR_USAGE, "--append-eod: the tokenizer has no end-of-document token");
	if (st)
		mgt_cli_fail(prog, st);
	mgt_preprocess_stats stats;
	st = mgt_preprocess_run(&cfg, &stats);
	if (!st)
		summary(&cfg, &stats);
	mgt_tok_free(tok);
	for (size_t i = 0; i < cfg.n_inputs; i++)
		free(cfg.inputs[i]);
	free(cfg.inputs);
	if (st)
		mgt_cli_fail(prog, st);
	return 0;
}
