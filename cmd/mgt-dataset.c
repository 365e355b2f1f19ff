/* mgt-dataset: inspect, merge and dump Megatron indexed datasets (.bin/.idx, MMIDIDX v1).
 *
 *   mgt-dataset info PREFIX [--json]
 *   mgt-dataset merge --output-prefix OUT [--overwrite] INPUT...   (INPUT: a prefix or a directory)
 *   mgt-dataset dump PREFIX [--ids] [--json-key KEY] [--documents A:B] [--strip-eod] [tokenizer flags]
 *   mgt-dataset samples PREFIX --dataset-type bert|t5 --vocab-file VOCAB [--index] [--samples A:B] ...
 *
 * Manual: man/man1/mgt-dataset.1; formats: man/man5/mgt-dataset.5.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/data.h"

static const char PROG[] = "mgt-dataset";

static const char help_main[] =
	"Usage: mgt-dataset COMMAND [OPTION]... ARG...\n"
	"Inspect, merge and dump Megatron indexed datasets (PREFIX.bin + PREFIX.idx, MMIDIDX v1).\n"
	"\n"
	"Commands:\n"
	"  info PREFIX [--json]          counts and sequence length statistics\n"
	"  merge --output-prefix OUT INPUT...\n"
	"                                concatenate datasets (as Megatron's tools/merge_datasets.py)\n"
	"  dump PREFIX [--ids]           print each document as JSONL text or as token ids\n"
	"  samples PREFIX --dataset-type bert|t5 --vocab-file VOCAB\n"
	"                                Megatron's BERT/T5 sample index and samples as JSON lines\n"
	"  samples FILE.jsonl --dataset-type sft --tokenizer-model TOK --seq-length N\n"
	"                                Megatron's SFT samples (packed conversations) as JSON lines\n"
	"\n"
	"Run 'mgt-dataset COMMAND --help' for a command's options. See mgt-dataset(1), mgt-dataset(5).\n"
	"Exit status: 0 ok, 1 runtime error (I/O, disk full, file size limit), 2 usage error, 3 bad\n"
	"input, 4 bad vocabulary, 5 output exists, 6 malformed dataset, 128+N stopped by signal N\n"
	"(130 SIGINT, 129 SIGHUP, 143 SIGTERM, 138 SIGUSR1, 140 SIGUSR2).\n";

static const char help_info[] =
	"Usage: mgt-dataset info PREFIX [--json]\n"
	"Validate PREFIX.idx and PREFIX.bin and print the dtype, the numbers of sequences, documents,\n"
	"empty documents and tokens, and sequence length statistics (min, mean, median, p99, max;\n"
	"median and p99 as numpy.median and numpy.percentile compute them).\n"
	"\n"
	"  --json       print one JSON object on stdout instead of text\n"
	"  -h, --help   this help\n";

static const char help_merge[] =
	"Usage: mgt-dataset merge --output-prefix OUT [--overwrite] INPUT...\n"
	"Concatenate datasets into OUT.bin and OUT.idx, in the order given. An INPUT that is a\n"
	"directory stands for every PREFIX in it with both PREFIX.bin and PREFIX.idx, sorted by name\n"
	"(Megatron's tools/merge_datasets.py). All inputs must have the same dtype.\n"
	"\n"
	"  --output-prefix OUT   output prefix (required)\n"
	"  --input DIR           same as a positional INPUT (Megatron's flag); may be repeated\n"
	"  --overwrite           replace OUT.bin and OUT.idx if they exist\n"
	"  -h, --help            this help\n";

static const char help_dump[] =
	"Usage: mgt-dataset dump PREFIX [OPTION]...\n"
	"Print each document: by default decoded with the tokenizer, as one JSON line {\"KEY\": TEXT};\n"
	"with --ids, its token ids separated by spaces (no tokenizer needed).\n"
	"\n"
	"  --ids              print token ids instead of text\n"
	"  --json-key KEY     JSON key of the text (default: text)\n"
	"  --documents A:B    only documents A (inclusive) to B (exclusive); A: and :B allowed,\n"
	"                     a single number K means K:K+1\n"
	"  --strip-eod        drop a final end-of-document id from each document (needs a tokenizer)\n"
	"  -h, --help         this help\n"
	"\n";

static const char help_samples[] =
	"Usage: mgt-dataset samples PREFIX --dataset-type bert|t5 --vocab-file VOCAB [OPTION]...\n"
	"Build (or load from the cache) the sample index of Megatron's BERTMaskedWordPieceDataset or\n"
	"T5MaskedWordPieceDataset over the sentence-level dataset PREFIX for each present split, and\n"
	"print, as JSON lines, one summary per split, its index rows (--index) and samples (--samples).\n"
	"\n"
	"  --dataset-type bert|t5        which dataset (required)\n"
	"  --vocab-file VOCAB            WordPiece vocab.txt: one token per line, id = line number\n"
	"                                (required); [CLS] [SEP] [MASK] [PAD] must be in it\n"
	"  --vocab-extra-ids N           T5: sentinels <extra_id_0..N-1> appended at ids V.. (default 100)\n"
	"  --seq-length N                BERT sequence length (default 512)\n"
	"  --encoder-seq-length N        T5 encoder length (default 512)\n"
	"  --decoder-seq-length N        T5 decoder length (default 128)\n"
	"  --bert-no-binary-head         BERT without the sentence-order head (one segment)\n"
	"  --mask-prob P                 masking probability (default 0.15)\n"
	"  --short-seq-prob P            probability of a short target length (default 0.1)\n"
	"  --seed N                      random seed, 1 to 2147483646 (default 1234)\n"
	"  --split S                     train,valid,test weights over documents (default 969, 30, 1)\n"
	"  --num-samples T[,V[,E]]       samples per split: numbers or none (one epoch; default none)\n"
	"  --data-cache-path DIR         cache directory (default PREFIX/cache/CLASS_indices)\n"
	"  --allow-ambiguous-pad-tokens  keep a pad id that collides with eos/eod\n"
	"  --index                       print every index row\n"
	"  --samples A:B                 print samples A to B-1 of each present split (K: one)\n"
	"  -h, --help                    this help\n"
	"\n"
	"Usage: mgt-dataset samples FILE.jsonl --dataset-type sft --tokenizer-model TOK --seq-length N [OPTION]...\n"
	"Print lines of an SFT dataset (Megatron's --sft: one packed sample a line) as JSON lines: tokens,\n"
	"labels (-100 where masked), position_ids, loss_mask, cu_seqlens (its real entries), max_seqlen,\n"
	"and with --context-parallel-size C > 1 cp_indices (each rank's positions: the per-document split).\n"
	"\n"
	"  --tokenizer-model TOK                  Hugging Face tokenizer.json or its directory (required)\n"
	"  --tokenizer-type T                     SFTTokenizer or HuggingFaceTokenizer (the default)\n"
	"  --sft-tokenizer-prompt-format F        nemotron-h-aligned (default), nemotron-nano-v2, identity,\n"
	"                                         or default (the chat_template of tokenizer_config.json)\n"
	"  --seq-length N                         the packed length S (required)\n"
	"  --context-parallel-size N              pad each conversation to a multiple of 2N (default 1)\n"
	"  --samples A:B                          lines A to B-1, 0-based (default all)\n";

/* ---- shared helpers -------------------------------------------------------------------------- */

static _Noreturn void usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static _Noreturn void usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: error: ", PROG);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s %s --help'.\n", PROG, cmd);
	exit(2);
}

/* getopt_long returned '?' or ':' (opterr is off, so the message is ours). */
static _Noreturn void bad_option(const char *cmd, int c, char **argv)
{
	const char *opt = argv[optind - 1];
	if (c == ':')
		usage_error(cmd, "%s: option '%s' needs a value", cmd, opt);
	if (optopt && opt[0] == '-' && opt[1] != '-')
		usage_error(cmd, "%s: unknown option '-%c'", cmd, optopt);
	usage_error(cmd, "%s: unknown option '%s'", cmd, opt);
}

static void help(const char *text, const char *extra)
{
	fputs(text, stdout);
	if (extra)
		fputs(extra, stdout);
	exit(0);
}

/* Flush stdout; a failed write (disk full, closed pipe) is a runtime error. */
static int finish_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		mgt_err(MGT_ERR_IO, "stdout: write failed: %s", strerror(errno ? errno : EIO));
		mgt_cli_fail(PROG, MGT_ERR_IO);
	}
	return 0;
}


/* The dataset of a PREFIX argument (mgt_idx_prefix_of), or exit. */
static mgt_idx *open_or_die(const char *arg)
{
	char *prefix = mgt_idx_prefix_of(arg);
	mgt_idx *d;
	if (!prefix)
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	mgt_status st = mgt_idx_open(&d, prefix);
	free(prefix);
	if (st)
		mgt_cli_fail(PROG, st);
	return d;
}

/* ---- info -------------------------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c, as_json = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'j')
			as_json = 1;
		else if (c == 'h')
			help(help_info, NULL);
		else
			bad_option("info", c, argv);
	}
	if (argc - optind != 1)
		usage_error("info", "info: expected one PREFIX, got %d arguments", argc - optind);
	mgt_idx *d = open_or_die(argv[optind]);
	mgt_idx_info s;
	mgt_idx_info_get(d, &s);
	mgt_idx_info_write(stdout, d, &s, as_json);
	mgt_idx_close(d);
	return finish_stdout();
}

/* ---- merge ------------------------------------------------------------------------------------- */

static int cmd_merge(int argc, char **argv)
{
	enum { OPT_OUT = CLI_FIRST_FREE, OPT_INPUT, OPT_OVERWRITE };
	static const struct option opts[] = {
		{"output-prefix", required_argument, 0, OPT_OUT}, {"input", required_argument, 0, OPT_INPUT},
		{"overwrite", no_argument, 0, OPT_OVERWRITE}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	int c, overwrite = 0;
	size_t n_inputs = 0;
	/* static: reachable (not reported as leaks by LeakSanitizer) when a usage error exits */
	static const char **inputs;
	static mgt_idx_inputs prefixes;
	if (!(inputs = mgt_malloc((size_t)argc * sizeof *inputs)))
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_OUT: out = optarg; break;
		case OPT_INPUT: inputs[n_inputs++] = optarg; break;
		case OPT_OVERWRITE: overwrite = 1; break;
		case 'h': help(help_merge, NULL); break;
		default: bad_option("merge", c, argv);
		}
	}
	if (!out)
		usage_error("merge", "merge: --output-prefix is required");
	for (int i = optind; i < argc; i++)
		inputs[n_inputs++] = argv[i];
	if (n_inputs == 0)
		usage_error("merge", "merge: no INPUT given");
	for (size_t i = 0; i < n_inputs; i++) {
		bool empty;
		mgt_status st = mgt_idx_inputs_add(&prefixes, inputs[i], &empty);
		if (st)
			mgt_cli_fail(PROG, st);
		if (empty)
			fprintf(stderr, "%s: warning: %s: no datasets (.bin/.idx pairs) in this directory\n", PROG,
				inputs[i]);
	}
	if (prefixes.n == 0)
		usage_error("merge", "merge: the inputs hold no datasets");
	uint64_t docs = 0, tokens = 0;
	mgt_status st = mgt_idx_merge(out, overwrite, &prefixes, &docs, &tokens);
	if (!st) {
		char b1[32], b2[32];
		fprintf(stderr, "%s: merged %zu datasets into %s: %s documents, %s tokens\n", PROG, prefixes.n, out,
			mgt_fmt_count(b1, docs), mgt_fmt_count(b2, tokens));
	}
	free(inputs);
	mgt_idx_inputs_free(&prefixes);
	if (st)
		mgt_cli_fail(PROG, st);
	return 0;
}

/* ---- dump -------------------------------------------------------------------------------------- */

static void parse_range_arg(const char *cmd, const char *arg, uint64_t ndocs, uint64_t *a, uint64_t *b);

/* "A:B", "A:", ":B" or "K"; B defaults to the number of documents. */
static void parse_range(const char *arg, uint64_t ndocs, uint64_t *a, uint64_t *b)
{
	parse_range_arg("dump", arg, ndocs, a, b);
}

/* The same for the option of command cmd (--documents of dump, --samples of samples). */
static void parse_range_arg(const char *cmd, const char *arg, uint64_t ndocs, uint64_t *a, uint64_t *b)
{
	const char *opt = strcmp(cmd, "dump") ? "--samples" : "--documents";
	const char *colon = strchr(arg, ':');
	char *end;
	*a = 0;
	*b = ndocs;
	if (colon != arg) {
		errno = 0;
		*a = strtoull(arg, &end, 10);
		if (errno || end == arg || end != (colon ? colon : arg + strlen(arg)) || arg[0] == '-')
			usage_error(cmd, "%s %s: expected A:B with non-negative integers", opt, arg);
		if (!colon)
			*b = *a + 1;
	}
	if (colon && colon[1]) {
		errno = 0;
		*b = strtoull(colon + 1, &end, 10);
		if (errno || *end || colon[1] == '-')
			usage_error(cmd, "%s %s: expected A:B with non-negative integers", opt, arg);
	}
	if (*a > *b || *b > ndocs)
		usage_error(cmd, "%s %s: out of range (the dataset has %llu documents)", opt, arg,
			(unsigned long long)ndocs);
}

static int cmd_dump(int argc, char **argv)
{
	enum { OPT_IDS = CLI_FIRST_FREE, OPT_KEY, OPT_DOCS, OPT_STRIP };
	static const struct option opts[] = {
		{"ids", no_argument, 0, OPT_IDS}, {"json-key", required_argument, 0, OPT_KEY},
		{"documents", required_argument, 0, OPT_DOCS}, {"strip-eod", no_argument, 0, OPT_STRIP},
		{"help", no_argument, 0, 'h'}, MGT_CLI_TOK_LONGOPTS, {0, 0, 0, 0}};
	mgt_idx_dump_opts o = {.key = "text"};
	mgt_tok *tok = NULL;
	mgt_tok_opts to;
	const char *range = NULL;
	int c;
	mgt_cli_tok_defaults(&to);
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (mgt_cli_tok_option(PROG, c, optarg, &to))
			continue;
		switch (c) {
		case OPT_IDS: o.ids = 1; break;
		case OPT_KEY: o.key = optarg; break;
		case OPT_DOCS: range = optarg; break;
		case OPT_STRIP: o.strip_eod = 1; break;
		case 'h': help(help_dump, mgt_cli_tok_help); break;
		default: bad_option("dump", c, argv);
		}
	}
	if (argc - optind != 1)
		usage_error("dump", "dump: expected one PREFIX, got %d arguments", argc - optind);
	if (!to.type && (!o.ids || o.strip_eod))
		usage_error("dump", "dump: %s needs a tokenizer (--tokenizer-type and its files)",
			o.ids ? "--strip-eod" : "decoding text (without --ids)");
	static mgt_idx *d;   /* static: still reachable if parse_range exits */
	d = open_or_die(argv[optind]);
	o.end = mgt_idx_num_documents(d);
	if (range)
		parse_range(range, mgt_idx_num_documents(d), &o.first, &o.end);
	mgt_status st = to.type ? mgt_tok_load(&tok, &to) : MGT_OK;
	o.tok = tok;
	if (!st)
		st = mgt_idx_dump(stdout, d, &o);
	mgt_tok_free(tok);
	mgt_idx_close(d);
	if (st)
		mgt_cli_fail(PROG, st);
	return finish_stdout();
}

/* ---- samples ----------------------------------------------------------------------------------- */

/* --num-samples T[,V[,E]]: numbers or "none". */
static void parse_num_samples(const char *arg, uint64_t out[3])
{
	char tmp[256];
	snprintf(tmp, sizeof tmp, "%s", arg);
	int k = 0;
	for (char *save, *w = strtok_r(tmp, ",", &save); w; w = strtok_r(NULL, ",", &save), k++) {
		char *e;
		while (*w == ' ')
			w++;
		if (k == 3)
			usage_error("samples", "--num-samples %s: at most three counts (train, valid, test)", arg);
		if (!strcmp(w, "none")) {
			out[k] = MGT_GPT_ALL;
			continue;
		}
		errno = 0;
		out[k] = strtoull(w, &e, 10);
		if (errno || e == w || *e || w[0] == '-')
			usage_error("samples", "--num-samples %s: expected numbers or none, separated by commas", arg);
	}
}

static long num_arg(const char *opt, const char *arg, long lo, long hi)
{
	char *e;
	errno = 0;
	long v = strtol(arg, &e, 10);
	if (errno || e == arg || *e || v < lo || v > hi)
		usage_error("samples", "%s %s: expected an integer in [%ld, %ld]", opt, arg, lo, hi);
	return v;
}

static double prob_arg(const char *opt, const char *arg)
{
	char *e;
	double v = strtod(arg, &e);
	if (e == arg || *e)
		usage_error("samples", "%s %s: expected a number", opt, arg);
	return v;
}

/* samples --dataset-type sft: Megatron's SFTDataset over a JSONL file (lib/data/sft.c). */
static int samples_sft(int argc, char **argv)
{
	enum { OPT_TYPE = CLI_FIRST_FREE, OPT_TT, OPT_TM, OPT_FMT, OPT_SEQ, OPT_CP, OPT_SAMPLES };
	static const struct option opts[] = {
		{"dataset-type", required_argument, 0, OPT_TYPE}, {"tokenizer-type", required_argument, 0, OPT_TT},
		{"tokenizer-model", required_argument, 0, OPT_TM},
		{"sft-tokenizer-prompt-format", required_argument, 0, OPT_FMT},
		{"seq-length", required_argument, 0, OPT_SEQ}, {"context-parallel-size", required_argument, 0, OPT_CP},
		{"samples", required_argument, 0, OPT_SAMPLES}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	mgt_sft_config c = { .format = MGT_SFT_NEMOTRON_H_ALIGNED, .seq_length = 0, .cp = 1 };
	mgt_tok_opts to = { .type = "HuggingFaceTokenizer", .hf_no_special_tokens = 1 };
	const char *range = NULL, *fmt = "nemotron-h-aligned";
	int c_;
	while ((c_ = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c_) {
		case OPT_TYPE: break;
		case OPT_TT:
			if (strcmp(optarg, "HuggingFaceTokenizer") && strcmp(optarg, "SFTTokenizer"))
				usage_error("samples", "--tokenizer-type %s: SFT reads a Hugging Face tokenizer "
					    "(SFTTokenizer or HuggingFaceTokenizer)", optarg);
			break;
		case OPT_TM: to.model = optarg; break;
		case OPT_FMT: fmt = optarg; break;
		case OPT_SEQ: c.seq_length = (int)num_arg("--seq-length", optarg, 1, INT32_MAX / 4); break;
		case OPT_CP: c.cp = (int)num_arg("--context-parallel-size", optarg, 1, 1 << 16); break;
		case OPT_SAMPLES: range = optarg; break;
		case 'h': help(help_samples, NULL); break;
		default: bad_option("samples", c_, argv);
		}
	}
	if (argc - optind != 1)
		usage_error("samples", "samples: expected one JSONL file, got %d arguments", argc - optind);
	if (!to.model || !c.seq_length)
		usage_error("samples", "samples --dataset-type sft: --tokenizer-model and --seq-length are required");
	uint64_t first = 0, end = UINT64_MAX;
	if (range) parse_range_arg("samples", range, UINT64_MAX, &first, &end);
	static mgt_tok *tok; /* static: reachable if a usage error exits */
	static mgt_chat_config chat;
	mgt_sft_data *d = NULL;
	mgt_status st = mgt_sft_format_parse(fmt, &c.format);
	if (!st) st = mgt_tok_load(&tok, &to);
	if (!st && c.format == MGT_SFT_DEFAULT) st = mgt_chat_config_open(&chat, NULL, to.model);
	c.path = argv[optind], c.tok = tok, c.chat = &chat;
	if (!st) st = mgt_sft_open(&c, &d);
	if (!st) st = mgt_sft_write(stdout, d, (int64_t)first, end > INT64_MAX ? INT64_MAX : (int64_t)end);
	mgt_sft_close(d);
	mgt_chat_config_close(&chat);
	mgt_tok_free(tok);
	if (st) mgt_cli_fail(PROG, st);
	return finish_stdout();
}

static int cmd_samples(int argc, char **argv)
{
	for (int k = 1; k + 1 < argc; k++)
		if (!strcmp(argv[k], "--dataset-type") && !strcmp(argv[k + 1], "sft")) return samples_sft(argc, argv);
	enum { OPT_TYPE = CLI_FIRST_FREE, OPT_VOCAB, OPT_EXTRA, OPT_SEQ, OPT_ENC, OPT_DEC, OPT_NOHEAD, OPT_MASK,
	       OPT_SHORT, OPT_SEED, OPT_SPLIT, OPT_NUM, OPT_CACHE, OPT_AMBIG, OPT_INDEX, OPT_SAMPLES };
	static const struct option opts[] = {
		{"dataset-type", required_argument, 0, OPT_TYPE}, {"vocab-file", required_argument, 0, OPT_VOCAB},
		{"vocab-extra-ids", required_argument, 0, OPT_EXTRA}, {"seq-length", required_argument, 0, OPT_SEQ},
		{"encoder-seq-length", required_argument, 0, OPT_ENC},
		{"decoder-seq-length", required_argument, 0, OPT_DEC},
		{"bert-no-binary-head", no_argument, 0, OPT_NOHEAD}, {"mask-prob", required_argument, 0, OPT_MASK},
		{"short-seq-prob", required_argument, 0, OPT_SHORT}, {"seed", required_argument, 0, OPT_SEED},
		{"split", required_argument, 0, OPT_SPLIT}, {"num-samples", required_argument, 0, OPT_NUM},
		{"data-cache-path", required_argument, 0, OPT_CACHE},
		{"allow-ambiguous-pad-tokens", no_argument, 0, OPT_AMBIG}, {"index", no_argument, 0, OPT_INDEX},
		{"samples", required_argument, 0, OPT_SAMPLES}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	mgt_masked_config c = { .seq_length = 512, .decoder_seq_length = 128, .binary_head = true,
				.mask_prob = 0.15, .short_seq_prob = 0.1, .seed = 1234,
				.num_samples = { MGT_GPT_ALL, MGT_GPT_ALL, MGT_GPT_ALL } };
	mgt_masked_write_opts o = {0};
	const char *type = NULL, *vocab = NULL, *range = NULL;
	int c_, extra = 100, enc = 0;
	while ((c_ = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c_) {
		case OPT_TYPE: type = optarg; break;
		case OPT_VOCAB: vocab = optarg; break;
		case OPT_EXTRA: extra = (int)num_arg("--vocab-extra-ids", optarg, 0, 1 << 20); break;
		case OPT_SEQ: c.seq_length = (int)num_arg("--seq-length", optarg, 1, INT32_MAX); break;
		case OPT_ENC: enc = (int)num_arg("--encoder-seq-length", optarg, 1, INT32_MAX); break;
		case OPT_DEC: c.decoder_seq_length = (int)num_arg("--decoder-seq-length", optarg, 1, INT32_MAX); break;
		case OPT_NOHEAD: c.binary_head = false; break;
		case OPT_MASK: c.mask_prob = prob_arg("--mask-prob", optarg); break;
		case OPT_SHORT: c.short_seq_prob = prob_arg("--short-seq-prob", optarg); break;
		case OPT_SEED: c.seed = (uint32_t)num_arg("--seed", optarg, 1, INT32_MAX - 1); break;
		case OPT_SPLIT: c.split = optarg; break;
		case OPT_NUM: parse_num_samples(optarg, c.num_samples); break;
		case OPT_CACHE: c.cache_path = optarg; break;
		case OPT_AMBIG: c.allow_ambiguous_pad = true; break;
		case OPT_INDEX: o.index = 1; break;
		case OPT_SAMPLES: range = optarg; break;
		case 'h': help(help_samples, NULL); break;
		default: bad_option("samples", c_, argv);
		}
	}
	if (argc - optind != 1)
		usage_error("samples", "samples: expected one PREFIX, got %d arguments", argc - optind);
	if (!type || (strcmp(type, "bert") && strcmp(type, "t5")))
		usage_error("samples", "samples: --dataset-type bert, t5 or sft is required");
	if (!vocab)
		usage_error("samples", "samples: --vocab-file is required");
	c.kind = !strcmp(type, "t5") ? MGT_MASKED_T5 : MGT_MASKED_BERT;
	if (c.kind == MGT_MASKED_T5 && enc)
		c.seq_length = enc;
	if (range) {
		o.have_samples = true;
		parse_range_arg("samples", range, UINT64_MAX, &o.first, &o.end);
	}
	static mgt_tok *vt;   /* static: reachable if a usage error exits */
	static uint8_t *subword;
	static char *prefix;
	if (!(prefix = mgt_idx_prefix_of(argv[optind])))
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	c.path = prefix;
	mgt_masked_vocab mv;
	mgt_status st = mgt_tok_load_wordpiece_vocab(&vt, vocab, c.kind == MGT_MASKED_T5 ? extra : 0);
	if (!st)
		st = mgt_masked_vocab_from_tok(vt, &mv, &subword);
	c.vocab = &mv;
	mgt_masked_data *d = NULL;
	if (!st)
		st = mgt_masked_data_open(&c, &d);
	if (!st && mgt_masked_data_note(d)[0])
		fprintf(stderr, "%s: note: %s\n", PROG, mgt_masked_data_note(d));
	for (int k = 0; k < 3 && !st; k++)
		st = mgt_masked_data_write(stdout, d, &c, (mgt_split)k, &o);
	mgt_masked_data_close(d);
	mgt_tok_free(vt);
	free(subword);
	free(prefix);
	if (st)
		mgt_cli_fail(PROG, st);
	return finish_stdout();
}

/* ---- main -------------------------------------------------------------------------------------- */

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {{"info", cmd_info}, {"merge", cmd_merge}, {"dump", cmd_dump}, {"samples", cmd_samples}};

int main(int argc, char **argv)
{
	if (argc < 2)
		mgt_cli_usage_error(PROG, "a command is required (info, merge, dump, samples)");
	const char *cmd = argv[1];
	opterr = 0;
	mgt_signals_install();
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help"))
		help(help_main, NULL);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	mgt_cli_usage_error(PROG, "unknown command '%s' (expected info, merge, dump or samples)", cmd);
}
