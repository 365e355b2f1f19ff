/* mgt-dataset: inspect, merge and dump Megatron indexed datasets (.bin/.idx, MMIDIDX v1).
 *
 *   mgt-dataset info PREFIX [--json]
 *   mgt-dataset merge --output-prefix OUT [--overwrite] INPUT...   (INPUT: a prefix or a directory)
 *   mgt-dataset dump PREFIX [--ids] [--json-key KEY] [--documents A:B] [--strip-eod] [tokenizer flags]
 *   mgt-dataset samples PREFIX --dataset-type bert|t5 --vocab-file VOCAB [--index] [--samples A:B] ...
 *
 * Manual: man/man1/mgt-dataset.1; formats: man/man5/mgt-dataset.5.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	"  -h, --help                    this help\n";

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

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && strcmp(s + n - k, suf) == 0;
}

/* Accept "data/x", and also "data/x.idx" or "data/x.bin" when that file exists. */
static char *prefix_of(const char *arg)
{
	char *p = mgt_strdup(arg);
	struct stat sb;
	if (!p)
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	if ((has_suffix(p, ".idx") || has_suffix(p, ".bin")) && stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
		p[strlen(p) - 4] = 0;
	return p;
}

static mgt_idx *open_or_die(const char *arg)
{
	char *prefix = prefix_of(arg);
	mgt_idx *d;
	mgt_status st = mgt_idx_open(&d, prefix);
	free(prefix);
	if (st)
		mgt_cli_fail(PROG, st);
	return d;
}

/* ---- info -------------------------------------------------------------------------------------- */

typedef struct {
	uint64_t empty_docs;
	int32_t min, max;
	double mean, median, p99;
} length_stats;

/* The k-th smallest sequence length (0-based), exactly, in O(1) memory: a histogram of the high
 * 16 bits picks the bucket, a second pass over that bucket's low 16 bits picks the value. */
static int32_t kth_length(const mgt_idx *d, uint64_t k)
{
	static uint64_t hist[1 << 16];
	uint64_t n = mgt_idx_num_sequences(d);
	memset(hist, 0, sizeof hist);
	for (uint64_t i = 0; i < n; i++)
		hist[(uint32_t)mgt_idx_seq_length(d, i) >> 16]++;
	uint32_t hi = 0;
	while (k >= hist[hi])
		k -= hist[hi++];
	memset(hist, 0, sizeof hist);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)mgt_idx_seq_length(d, i);
		if (v >> 16 == hi)
			hist[v & 0xFFFF]++;
	}
	uint32_t lo = 0;
	while (k >= hist[lo])
		k -= hist[lo++];
	return (int32_t)(hi << 16 | lo);
}

/* numpy.percentile(lengths, q), method "linear": numpy's virtual index and _lerp. */
static double percentile(const mgt_idx *d, double q)
{
	uint64_t n = mgt_idx_num_sequences(d);
	double vi = (double)(n - 1) * (q / 100.0);
	uint64_t below = (uint64_t)vi, above = below + 1 < n ? below + 1 : n - 1;
	double gamma = vi - (double)below;
	double a = kth_length(d, below), b = above == below ? a : kth_length(d, above);
	double diff = b - a;
	return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

/* numpy.median: the middle value, or the mean of the two middle values. */
static double median(const mgt_idx *d)
{
	uint64_t n = mgt_idx_num_sequences(d);
	if (n % 2)
		return kth_length(d, n / 2);
	return ((double)kth_length(d, n / 2 - 1) + (double)kth_length(d, n / 2)) / 2.0;
}

static length_stats compute_stats(const mgt_idx *d)
{
	length_stats s = {0};
	uint64_t n = mgt_idx_num_sequences(d), docs = mgt_idx_num_documents(d);
	for (uint64_t k = 0; k < docs; k++)
		s.empty_docs += mgt_idx_doc_index(d, k) == mgt_idx_doc_index(d, k + 1);
	if (n == 0)
		return s;
	s.min = INT32_MAX;
	for (uint64_t i = 0; i < n; i++) {
		int32_t len = mgt_idx_seq_length(d, i);
		s.min = len < s.min ? len : s.min;
		s.max = len > s.max ? len : s.max;
	}
	s.mean = (double)mgt_idx_num_tokens(d) / (double)n;
	s.median = median(d);
	s.p99 = percentile(d, 99.0);
	return s;
}

static json_t *stats_json(const mgt_idx *d, const length_stats *s)
{
	size_t bin_size;
	mgt_idx_bin(d, &bin_size);
	json_t *o = json_object(), *len = json_null();
	json_object_set_new(o, "prefix", json_string(mgt_idx_prefix(d)));
	json_object_set_new(o, "dtype", json_string(mgt_dtype_name(mgt_idx_dtype(d))));
	json_object_set_new(o, "dtype_code", json_integer(mgt_idx_dtype(d)));
	json_object_set_new(o, "sequences", json_integer((json_int_t)mgt_idx_num_sequences(d)));
	json_object_set_new(o, "documents", json_integer((json_int_t)mgt_idx_num_documents(d)));
	json_object_set_new(o, "empty_documents", json_integer((json_int_t)s->empty_docs));
	json_object_set_new(o, "tokens", json_integer((json_int_t)mgt_idx_num_tokens(d)));
	json_object_set_new(o, "bin_bytes", json_integer((json_int_t)bin_size));
	if (mgt_idx_num_sequences(d) > 0) {
		json_decref(len);
		len = json_object();
		json_object_set_new(len, "min", json_integer(s->min));
		json_object_set_new(len, "mean", json_real(s->mean));
		json_object_set_new(len, "median", json_real(s->median));
		json_object_set_new(len, "p99", json_real(s->p99));
		json_object_set_new(len, "max", json_integer(s->max));
	}
	json_object_set_new(o, "sequence_length", len);
	return o;
}

static void print_stats_text(const mgt_idx *d, const length_stats *s)
{
	char b[32];
	size_t bin_size;
	mgt_idx_bin(d, &bin_size);
	printf("prefix:           %s\n", mgt_idx_prefix(d));
	printf("dtype:            %s (code %d)\n", mgt_dtype_name(mgt_idx_dtype(d)), mgt_idx_dtype(d));
	printf("sequences:        %s\n", mgt_fmt_count(b, mgt_idx_num_sequences(d)));
	printf("documents:        %s\n", mgt_fmt_count(b, mgt_idx_num_documents(d)));
	printf("empty documents:  %s\n", mgt_fmt_count(b, s->empty_docs));
	printf("tokens:           %s\n", mgt_fmt_count(b, mgt_idx_num_tokens(d)));
	printf(".bin bytes:       %s\n", mgt_fmt_count(b, bin_size));
	if (mgt_idx_num_sequences(d) == 0) {
		printf("sequence length:  - (no sequences)\n");
		return;
	}
	printf("sequence length:  min %d, mean %.2f, median %.6g, p99 %.6g, max %d\n", s->min, s->mean,
		s->median, s->p99, s->max);
}

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
	length_stats s = compute_stats(d);
	if (as_json) {
		json_t *o = stats_json(d, &s);
		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(o);
	} else {
		print_stats_text(d, &s);
	}
	mgt_idx_close(d);
	return finish_stdout();
}

/* ---- merge ------------------------------------------------------------------------------------- */

typedef struct {
	char **v;
	size_t n, cap;
} strlist;

static void strlist_add(strlist *l, char *s)
{
	if (!s)
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = realloc(l->v, l->cap * sizeof *l->v);
		if (!l->v) {
			mgt_err(MGT_ERR_NOMEM, "out of memory");
			mgt_cli_fail(PROG, MGT_ERR_NOMEM);
		}
	}
	l->v[l->n++] = s;
}

static void strlist_free(strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name, size_t name_len, const char *ext)
{
	size_t nd = strlen(dir), ne = strlen(ext);
	char *p = malloc(nd + 1 + name_len + ne + 1);
	if (p)
		sprintf(p, "%s/%.*s%s", dir, (int)name_len, name, ext);
	return p;
}

static int is_file(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Every prefix in dir with both .bin and .idx, sorted by name (merge_datasets.py). A .bin or
 * .idx without its partner is an error, as Megatron asserts. */
static mgt_status list_dir(const char *dir, strlist *out)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return mgt_err(MGT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	strlist found = {0};
	struct dirent *e;
	mgt_status st = MGT_OK;
	while (!st && (e = readdir(dp))) {
		const char *name = e->d_name;
		int idx = has_suffix(name, ".idx"), bin = has_suffix(name, ".bin");
		char *self = join(dir, name, strlen(name), "");
		if ((idx || bin) && self && is_file(self)) {
			size_t stem = strlen(name) - 4;
			char *pair = join(dir, name, stem, idx ? ".bin" : ".idx");
			if (pair && !is_file(pair))
				st = mgt_err(MGT_ERR_FORMAT, "%s: no matching %s (expected both .bin and .idx)",
					self, idx ? ".bin" : ".idx");
			else if (idx)
				strlist_add(&found, join(dir, name, stem, ""));
			free(pair);
		}
		free(self);
	}
	closedir(dp);
	if (!st) {
		if (found.n)
			qsort(found.v, found.n, sizeof *found.v, cmp_str);
		for (size_t i = 0; i < found.n; i++)
			strlist_add(out, found.v[i]);
		free(found.v);
	} else {
		strlist_free(&found);
	}
	return st;
}

static void add_input(strlist *prefixes, const char *arg)
{
	struct stat sb;
	char idx[4096];
	snprintf(idx, sizeof idx, "%s.idx", arg);
	/* PREFIX.idx wins over a directory named PREFIX (where mgt-train and Megatron keep the
	 * index cache: PREFIX/cache/GPTDataset_indices). */
	if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode) && access(idx, F_OK) != 0) {
		size_t before = prefixes->n;
		mgt_status st = list_dir(arg, prefixes);
		if (st)
			mgt_cli_fail(PROG, st);
		if (prefixes->n == before)
			fprintf(stderr, "%s: warning: %s: no datasets (.bin/.idx pairs) in this directory\n",
				PROG, arg);
		return;
	}
	strlist_add(prefixes, prefix_of(arg));
}

static mgt_status merge_all(const char *out, int overwrite, const strlist *in)
{
	mgt_idx *d = NULL;
	mgt_idx_writer *w = NULL;
	mgt_status st = mgt_idx_open(&d, in->v[0]);
	if (!st)
		st = mgt_idx_writer_open(&w, out, (mgt_dtype)mgt_idx_dtype(d), overwrite);
	for (size_t i = 0; !st && i < in->n; i++) {
		if (i > 0 && (st = mgt_idx_open(&d, in->v[i])))
			break;
		st = mgt_idx_verify_bin(d); /* a damaged input is not merged into a new, checksummed one */
		if (!st)
			st = mgt_idx_writer_add_dataset(w, d);
		mgt_idx_close(d);
		d = NULL;
	}
	mgt_idx_close(d);
	if (st) {
		mgt_idx_writer_abort(w);
		return st;
	}
	char b1[32], b2[32];
	mgt_fmt_count(b1, mgt_idx_writer_num_documents(w));
	mgt_fmt_count(b2, mgt_idx_writer_num_tokens(w));
	st = mgt_idx_writer_finish(w);
	if (!st)
		fprintf(stderr, "%s: merged %zu datasets into %s: %s documents, %s tokens\n", PROG, in->n,
			out, b1, b2);
	return st;
}

static int cmd_merge(int argc, char **argv)
{
	enum { OPT_OUT = CLI_FIRST_FREE, OPT_INPUT, OPT_OVERWRITE };
	static const struct option opts[] = {
		{"output-prefix", required_argument, 0, OPT_OUT}, {"input", required_argument, 0, OPT_INPUT},
		{"overwrite", no_argument, 0, OPT_OVERWRITE}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	int c, overwrite = 0;
	/* static: reachable (not reported as leaks by LeakSanitizer) when a usage error exits */
	static strlist inputs, prefixes;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_OUT: out = optarg; break;
		case OPT_INPUT: strlist_add(&inputs, mgt_strdup(optarg)); break;
		case OPT_OVERWRITE: overwrite = 1; break;
		case 'h': help(help_merge, NULL); break;
		default: bad_option("merge", c, argv);
		}
	}
	if (!out)
		usage_error("merge", "merge: --output-prefix is required");
	for (int i = optind; i < argc; i++)
		strlist_add(&inputs, mgt_strdup(argv[i]));
	if (inputs.n == 0)
		usage_error("merge", "merge: no INPUT given");
	for (size_t i = 0; i < inputs.n; i++)
		add_input(&prefixes, inputs.v[i]);
	if (prefixes.n == 0)
		usage_error("merge", "merge: the inputs hold no datasets");
	mgt_status st = merge_all(out, overwrite, &prefixes);
	strlist_free(&inputs);
	strlist_free(&prefixes);
	if (st)
		mgt_cli_fail(PROG, st);
	return 0;
}

/* ---- dump -------------------------------------------------------------------------------------- */

typedef struct {
	int ids, strip_eod;
	const char *key;
	uint64_t first, end;
	mgt_tok *tok;
} dump_opts;

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

/* Append ids as decimal numbers separated by spaces, and a newline. */
static void print_ids(mgt_buf *line, const int32_t *ids, size_t n)
{
	line->n = 0;
	if (mgt_buf_reserve(line, 12 * n + 1))
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	char *p = line->p;
	for (size_t i = 0; i < n; i++) {
		char tmp[12];
		int k = 0;
		int64_t v = ids[i];
		int neg = v < 0;
		uint64_t u = (uint64_t)(neg ? -v : v);
		do
			tmp[k++] = (char)('0' + u % 10);
		while ((u /= 10) > 0);
		if (i)
			*p++ = ' ';
		if (neg)
			*p++ = '-';
		while (k)
			*p++ = tmp[--k];
	}
	*p++ = '\n';
	fwrite(line->p, 1, (size_t)(p - line->p), stdout);
}

/* Append the UTF-8 for code point cp. */
static void put_utf8(mgt_buf *o, uint32_t cp)
{
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | cp >> 6);
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 2;
	} else {
		b[0] = (unsigned char)(0xE0 | cp >> 12);
		b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 3;
	}
	mgt_buf_add(o, b, n);
}

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0; *bad = bytes of its maximal invalid
 * subpart (what one U+FFFD replaces, as Python's bytes.decode(errors="replace") does). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned c = s[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xBF;
	*bad = 1;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
	else
		return 0;
	for (size_t i = 1; i < len; i++) {
		unsigned x = i < n ? s[i] : 0;
		if (i >= n || x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xBF)) {
			*bad = i;
			return 0;
		}
	}
	return len;
}

/* Replace invalid UTF-8 with U+FFFD. */
static void utf8_replace(const char *s, size_t n, mgt_buf *out)
{
	const unsigned char *p = (const unsigned char *)s;
	out->n = 0;
	for (size_t i = 0; i < n;) {
		size_t bad, k = utf8_seq(p + i, n - i, &bad);
		if (k) {
			mgt_buf_add(out, p + i, k);
			i += k;
		} else {
			put_utf8(out, 0xFFFD);
			i += bad;
		}
	}
}

static void print_text(const dump_opts *o, const mgt_buf *text, mgt_buf *fixed)
{
	json_t *s = json_stringn(text->p ? text->p : "", text->n);
	if (!s) {
		utf8_replace(text->p, text->n, fixed);
		s = json_stringn(fixed->p ? fixed->p : "", fixed->n);
	}
	json_t *obj = json_object();
	if (!s || !obj || json_object_set_new(obj, o->key, s) != 0) {
		mgt_err(MGT_ERR_NOMEM, "out of memory");
		mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	}
	json_dumpf(obj, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(obj);
}

/* Gather document k's ids (all its sequences) into doc. */
static mgt_status gather(const mgt_idx *d, uint64_t k, mgt_ids *doc, int32_t **seq, size_t *cap)
{
	doc->n = 0;
	for (int64_t s = mgt_idx_doc_index(d, k); s < mgt_idx_doc_index(d, k + 1); s++) {
		size_t n;
		mgt_status st = mgt_idx_get(d, (uint64_t)s, seq, &n, cap);
		for (size_t j = 0; !st && j < n; j++)
			st = mgt_ids_push(doc, (*seq)[j]);
		if (st)
			return st;
	}
	return MGT_OK;
}

static mgt_status dump_docs(const mgt_idx *d, const dump_opts *o)
{
	mgt_ids doc = {0};
	mgt_buf text = {0}, fixed = {0};
	int32_t *seq = NULL;
	size_t cap = 0;
	mgt_status st = MGT_OK;
	int32_t eod = o->tok ? mgt_tok_eod(o->tok) : -1;
	for (uint64_t k = o->first; !st && k < o->end; k++) {
		if ((st = gather(d, k, &doc, &seq, &cap)))
			break;
		if (o->strip_eod && doc.n > 0 && eod >= 0 && doc.v[doc.n - 1] == eod)
			doc.n--;
		if (o->ids) {
			print_ids(&text, doc.v, doc.n);
			continue;
		}
		text.n = 0;
		if ((st = mgt_tok_decode(o->tok, doc.v, doc.n, &text)))
			st = mgt_err_ctx(st, "%s: document %llu", mgt_idx_prefix(d), (unsigned long long)k);
		else
			print_text(o, &text, &fixed);
	}
	free(doc.v);
	free(text.p);
	free(fixed.p);
	free(seq);
	return st;
}

static int cmd_dump(int argc, char **argv)
{
	enum { OPT_IDS = CLI_FIRST_FREE, OPT_KEY, OPT_DOCS, OPT_STRIP };
	static const struct option opts[] = {
		{"ids", no_argument, 0, OPT_IDS}, {"json-key", required_argument, 0, OPT_KEY},
		{"documents", required_argument, 0, OPT_DOCS}, {"strip-eod", no_argument, 0, OPT_STRIP},
		{"help", no_argument, 0, 'h'}, MGT_CLI_TOK_LONGOPTS, {0, 0, 0, 0}};
	dump_opts o = {.key = "text"};
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
	mgt_status st = to.type ? mgt_tok_load(&o.tok, &to) : MGT_OK;
	if (!st)
		st = dump_docs(d, &o);
	mgt_tok_free(o.tok);
	mgt_idx_close(d);
	if (st)
		mgt_cli_fail(PROG, st);
	return finish_stdout();
}

/* ---- samples ----------------------------------------------------------------------------------- */

/* A minimal stand-in for the WordPiece tokenizer (until lib/tok has one): vocab.txt, one token
 * per line (trailing "\r\n" removed), id = line number; "##" marks subword pieces; for T5
 * <extra_id_0..N-1> appended at ids V.. as Megatron's BertWordPieceCase does, bos := [CLS],
 * eos = eod := [SEP]. */
typedef struct {
	mgt_masked_vocab v;
	uint8_t *subword;
	int32_t *sentinels;
} txt_vocab;

static int32_t find_token(char **tok, int64_t n, const char *s)
{
	for (int64_t i = 0; i < n; i++)
		if (!strcmp(tok[i], s))
			return (int32_t)i;
	return -1;
}

static mgt_status vocab_load(txt_vocab *tv, const char *path, int extra)
{
	char *text, **tok;
	size_t len;
	mgt_status st = mgt_file_read(path, &text, &len);
	if (st)
		return st;
	int64_t n = 0, cap = 1;
	for (size_t i = 0; i < len; i++)
		cap += text[i] == '\n';
	tok = calloc((size_t)cap, sizeof *tok);
	for (char *p = text, *e; tok && p < text + len; p = e + 1) {
		e = memchr(p, '\n', (size_t)(text + len - p));
		e = e ? e : text + len;
		*e = 0;
		if (e > p && e[-1] == '\r')
			e[-1] = 0;
		tok[n++] = p;
	}
	tv->subword = calloc((size_t)(n + extra + 1), 1);
	tv->sentinels = calloc((size_t)extra + 1, sizeof *tv->sentinels);
	if (!tok || !tv->subword || !tv->sentinels) {
		free(text);
		free(tok);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	for (int64_t i = 0; i < n; i++)
		tv->subword[i] = !strncmp(tok[i], "##", 2);
	for (int i = 0; i < extra; i++)
		tv->sentinels[i] = (int32_t)(n + i);
	mgt_masked_vocab *v = &tv->v;
	*v = (mgt_masked_vocab){ .size = n + extra, .is_subword = tv->subword, .cls = find_token(tok, n, "[CLS]"),
				 .sep = find_token(tok, n, "[SEP]"), .mask = find_token(tok, n, "[MASK]"),
				 .pad = find_token(tok, n, "[PAD]"), .sentinels = tv->sentinels, .n_sentinels = extra };
	v->bos = v->cls, v->eos = v->eod = v->sep;
	const char *missing = v->cls < 0 ? "[CLS]" : v->sep < 0 ? "[SEP]" : v->mask < 0 ? "[MASK]" : v->pad < 0 ? "[PAD]" : NULL;
	free(text);
	free(tok);
	if (missing)
		return mgt_err(MGT_ERR_VOCAB, "%s: no %s token (expected a WordPiece vocab.txt)", path, missing);
	return MGT_OK;
}

typedef struct {
	int index;
	uint64_t first, end;   /* --samples */
	bool have_samples;
} samples_opts;

static void print_array(const char *key, const int64_t *a, int64_t n)
{
	printf(",\"%s\":[", key);
	for (int64_t i = 0; i < n; i++)
		printf(i ? ",%lld" : "%lld", (long long)a[i]);
	putchar(']');
}

static mgt_status print_sample(const mgt_masked_data *d, const mgt_masked_config *c, mgt_split k, int64_t i,
			       int64_t *buf)
{
	int64_t S = c->seq_length, D = c->decoder_seq_length;
	mgt_status st;
	printf("{\"split\":\"%s\",\"idx\":%lld", mgt_split_name(k), (long long)i);
	if (c->kind == MGT_MASKED_BERT) {
		mgt_bert_sample b = { buf, buf + S, buf + 2 * S, buf + 3 * S, buf + 4 * S, 0, 0, 0, 0 };
		if ((st = mgt_masked_data_bert(d, k, i, &b)))
			return st;
		print_array("text", b.text, S);
		print_array("types", b.types, S);
		print_array("labels", b.labels, S);
		printf(",\"is_random\":%d", b.is_random);
		print_array("padding_mask", b.padding_mask, S);
		print_array("loss_mask", b.loss_mask, S);
		printf(",\"truncated\":%d}\n", b.truncated);
		return MGT_OK;
	}
	mgt_t5_sample t = { buf, buf + S, buf + 2 * S, buf + 2 * S + D, buf + 2 * S + 2 * D, buf + 2 * S + 3 * D,
			    0, 0, 0, 0 };
	if ((st = mgt_masked_data_t5(d, k, i, &t)))
		return st;
	print_array("text_enc", t.text_enc, S);
	print_array("text_dec", t.text_dec, D);
	print_array("labels", t.labels, D);
	print_array("loss_mask", t.loss_mask, D);
	printf(",\"truncated\":%d", t.truncated);
	print_array("enc_mask", t.enc_mask, S);
	print_array("dec_mask", t.dec_mask, D);
	printf("}\n");
	return MGT_OK;
}

static mgt_status print_split(const mgt_masked_data *d, const mgt_masked_config *c, mgt_split k,
			      const samples_opts *o)
{
	const mgt_masked_index *ix = mgt_masked_data_index(d, k);
	uint64_t beg, end;
	if (!ix)
		return MGT_OK;
	mgt_masked_data_docs(d, k, &beg, &end);
	printf("{\"split\":\"%s\",\"documents\":[%llu,%llu],\"samples\":%lld,\"epochs\":%d,\"dtype\":\"%s\"}\n",
	       mgt_split_name(k), (unsigned long long)beg, (unsigned long long)end, (long long)ix->n, ix->epochs,
	       ix->u64 ? "uint64" : "uint32");
	for (int64_t i = 0; o->index && i < ix->n; i++) {
		uint64_t r[3];
		mgt_masked_index_row(ix, i, r);
		printf("{\"split\":\"%s\",\"row\":%lld,\"index\":[%llu,%llu,%llu]}\n", mgt_split_name(k), (long long)i,
		       (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2]);
	}
	int64_t *buf = malloc((size_t)(6 * (c->seq_length + c->decoder_seq_length) + 1) * sizeof *buf);
	if (!buf)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	mgt_status st = MGT_OK;
	for (uint64_t i = o->first; !st && o->have_samples && i < o->end && (int64_t)i < ix->n; i++)
		st = print_sample(d, c, k, (int64_t)i, buf);
	free(buf);
	return st;
}

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

static int cmd_samples(int argc, char **argv)
{
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
	samples_opts o = {0};
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
		usage_error("samples", "samples: --dataset-type bert or t5 is required");
	if (!vocab)
		usage_error("samples", "samples: --vocab-file is required");
	c.kind = !strcmp(type, "t5") ? MGT_MASKED_T5 : MGT_MASKED_BERT;
	if (c.kind == MGT_MASKED_T5 && enc)
		c.seq_length = enc;
	if (range) {
		o.have_samples = true;
		parse_range_arg("samples", range, UINT64_MAX, &o.first, &o.end);
	}
	static txt_vocab tv;   /* static: reachable if a usage error exits */
	static char *prefix;
	prefix = prefix_of(argv[optind]);
	c.path = prefix;
	mgt_status st = vocab_load(&tv, vocab, c.kind == MGT_MASKED_T5 ? extra : 0);
	c.vocab = &tv.v;
	mgt_masked_data *d = NULL;
	if (!st)
		st = mgt_masked_data_open(&c, &d);
	if (!st && mgt_masked_data_note(d)[0])
		fprintf(stderr, "%s: note: %s\n", PROG, mgt_masked_data_note(d));
	for (int k = 0; k < 3 && !st; k++)
		st = print_split(d, &c, (mgt_split)k, &o);
	mgt_masked_data_close(d);
	free(tv.subword);
	free(tv.sentinels);
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
