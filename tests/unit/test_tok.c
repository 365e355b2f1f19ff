/* Unit tests for lib/tok: the heap-based BPE against a naive quadratic reference, encode/decode
 * round trips on random UTF-8, the UTF-8 validator, the \s rewrite, and error reporting.
 * Run from the repository root (uses share/mgt/tokenizers). Prints "N passed, M failed". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok/tok_impl.h"

static int passed, failed;

static void check(int ok, int line, const char *fmt, ...)
{
	if (ok) {
		passed++;
		return;
	}
	failed++;
	va_list ap;
	va_start(ap, fmt);
	printf("not ok (line %d): ", line);
	vprintf(fmt, ap);
	printf("  [%s]\n", mgt_err_msg());
	va_end(ap);
}
#define CHECK(c, ...) check(!!(c), __LINE__, __VA_ARGS__)

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* ---- naive BPE: scan all adjacent pairs, merge the lowest rank, leftmost ---------------------- */

/* The merge table as a sorted array, searched by bisection: deliberately not the hash path. */
typedef struct { uint64_t key; int32_t rank, merged; } pair_row;
static pair_row *rows;
static size_t n_rows;

static int row_cmp(const void *a, const void *b)
{
	uint64_t x = ((const pair_row *)a)->key, y = ((const pair_row *)b)->key;
	return x < y ? -1 : x > y;
}

static void rows_build(const tok_pair_map *m)
{
	free(rows);
	rows = malloc((m->n + 1) * sizeof *rows);
	n_rows = 0;
	for (size_t i = 0; i <= m->mask; i++)
		if (m->keys[i] != UINT64_MAX)
			rows[n_rows++] = (pair_row){m->keys[i], m->rank[i], m->merged[i]};
	qsort(rows, n_rows, sizeof *rows, row_cmp);
}

static int pair_lookup(int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
	pair_row k = {(uint64_t)(uint32_t)a << 32 | (uint32_t)b, 0, 0};
	pair_row *r = bsearch(&k, rows, n_rows, sizeof *rows, row_cmp);
	if (r)
		*rank = r->rank, *merged = r->merged;
	return r != NULL;
}

static size_t naive_bpe(const mgt_tok *t, const char *s, size_t n, int32_t *out)
{
	size_t k = n;
	for (size_t i = 0; i < n; i++)
		out[i] = t->byte_id[(uint8_t)s[i]];
	for (;;) {
		int32_t best = INT32_MAX, best_m = -1, r, m;
		size_t at = 0;
		for (size_t i = 0; i + 1 < k; i++)
			if (pair_lookup(out[i], out[i + 1], &r, &m) && r < best)
				best = r, best_m = m, at = i;
		if (best_m < 0)
			return k;
		out[at] = best_m;
		memmove(out + at + 1, out + at + 2, (k - at - 2) * sizeof *out);
		k--;
	}
}

static mgt_tok *load(const char *type, const char *a, const char *b)
{
	mgt_tok_opts o = {.type = type, .tiktoken_num_special = 1000, .null_eod_id = -1};
	if (!strcmp(type, "GPT2BPETokenizer"))
		o.vocab_file = a, o.merge_file = b;
	else
		o.model = a;
	mgt_tok *t = NULL;
	mgt_status st = mgt_tok_load(&t, &o);
	CHECK(st == MGT_OK, "load %s %s", type, a);
	return t;
}

/* A random single word of letters (one pre-token for these patterns), ASCII and accented. */
static size_t random_word(char *buf, size_t max)
{
	static const char *extra[] = {"\xc3\xa9", "\xc3\xb6", "\xc3\x9f", "\xd0\xb6", "\xce\xbb"};
	size_t n = 0, len = 3 + rnd((uint32_t)max / 2 - 3);
	while (n + 2 < len)
		if (rnd(8) == 0) {
			memcpy(buf + n, extra[rnd(5)], 2);
			n += 2;
		} else
			buf[n++] = (char)(rnd(3) ? 'a' + rnd(26) : 'A' + rnd(26));
	return n;
}

static void test_bpe_vs_naive(const mgt_tok *t, const char *name)
{
	mgt_tok_enc *e;
	CHECK(mgt_tok_enc_new(&e, t) == MGT_OK, "encoder");
	char word[400];
	int32_t ref[400];
	int bad = 0;
	rows_build(&t->pairs);
	for (int trial = 0; trial < 300 && !bad; trial++) {
		size_t n = random_word(word, sizeof word);
		mgt_ids ids = {0};
		mgt_status st = mgt_tok_encode(e, word, n, &ids);
		size_t k = naive_bpe(t, word, n, ref);
		int same = !st && ids.n == k && !memcmp(ids.v, ref, k * sizeof *ref);
		/* tiktoken emits a word that is itself a token as that token */
		int32_t whole = tok_vmap_find(t, word, n);
		if (t->ignore_merges && whole >= 0)
			same = !st && ids.n == 1 && ids.v[0] == whole;
		if (!same)
			bad = 1, printf("# %s: '%.*s' differs from the naive BPE\n", name, (int)n, word);
		free(ids.v);
	}
	CHECK(!bad, "%s: heap BPE = naive BPE on 300 random words", name);
	mgt_tok_enc_free(e);
}

/* Random valid UTF-8 text with spaces, newlines, punctuation, digits, emoji. */
static size_t random_text(char *buf, size_t max)
{
	static const char *pieces[] = {" ", "  ", "\n", "\r\n", "\t", ".", ",", "'s", "'LL", "123", "4567",
				       "\xe2\x80\x8b", "\xc2\xa0", "\xf0\x9f\x98\x80", "\xe4\xb8\xad\xe6\x96\x87",
				       "\xd9\x85\xd8\xb1", "e\xcc\x81", "<|endoftext|>", "Hello", "world", "x"};
	size_t n = 0;
	while (n + 16 < max && rnd(60))
		n += (size_t)sprintf(buf + n, "%s", pieces[rnd(sizeof pieces / sizeof *pieces)]);
	return n;
}

static void test_round_trip(const mgt_tok *t, const char *name)
{
	mgt_tok_enc *e;
	CHECK(mgt_tok_enc_new(&e, t) == MGT_OK, "encoder");
	char text[2048];
	int bad = 0;
	for (int trial = 0; trial < 300 && !bad; trial++) {
		size_t n = random_text(text, sizeof text);
		mgt_ids ids = {0};
		mgt_buf out = {0};
		mgt_status st = mgt_tok_encode(e, text, n, &ids);
		if (!st)
			st = mgt_tok_decode(t, ids.v, ids.n, &out);
		if (st || out.n != n || (n && memcmp(out.p, text, n)))
			bad = 1, printf("# %s: round trip failed for '%.*s'\n", name, (int)n, text);
		free(ids.v), free(out.p);
	}
	CHECK(!bad, "%s: decode(encode(x)) == x on 300 random texts", name);
	mgt_tok_enc_free(e);
}

/* encode(text) == want[0..n) */
static int encodes_to(const mgt_tok *t, const char *text, const int32_t *want, size_t n)
{
	mgt_tok_enc *e = NULL;
	mgt_ids ids = {0};
	int same = mgt_tok_enc_new(&e, t) == MGT_OK && mgt_tok_encode(e, text, strlen(text), &ids) == MGT_OK &&
		   ids.n == n && !memcmp(ids.v, want, n * sizeof *want);
	mgt_tok_enc_free(e);
	free(ids.v);
	return same;
}

/* "<|endoftext|>" in a text: GPT2BPETokenizer (Megatron's) encodes it as text and still decodes
 * its eod id to the string; a tiktoken rank file matches it as the special token. */
static void test_special_strings(const mgt_tok *gpt2, const mgt_tok *cl100k)
{
	static const int32_t g[] = {64, 27, 91, 437, 1659, 5239, 91, 29, 65}, c[] = {64, 100257, 65};
	CHECK(encodes_to(gpt2, "a<|endoftext|>b", g, 9), "gpt2: <|endoftext|> in text is ordinary text");
	CHECK(encodes_to(cl100k, "a<|endoftext|>b", c, 3), "cl100k_base: <|endoftext|> in text is 100257");
	int32_t eod = mgt_tok_eod(gpt2);
	mgt_buf out = {0};
	CHECK(mgt_tok_decode(gpt2, &eod, 1, &out) == MGT_OK && out.n == 13 && !memcmp(out.p, "<|endoftext|>", 13),
	      "gpt2: eod decodes to <|endoftext|>");
	free(out.p);
}

static void test_utf8(void)
{
	static const struct { const char *s; size_t valid; } cases[] = {
		{"abc", 3}, {"\xc3\xa9", 2}, {"\xe2\x82\xac", 3}, {"\xf4\x8f\xbf\xbf", 4}, {"\xf0\x9f\x98\x80!", 5},
		{"\xc0\x80", 0}, {"\xc1\xbf", 0}, {"\xe0\x80\x80", 0}, {"\xed\xa0\x80", 0}, {"\xf4\x90\x80\x80", 0},
		{"\xf5\x80\x80\x80", 0}, {"a\x80", 1}, {"ab\xe2\x82", 2}, {"abcdefgh\xff", 8}, {"\xef\xbf\xbf", 3},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		CHECK(tok_utf8_valid_prefix(cases[i].s, strlen(cases[i].s)) == cases[i].valid, "utf8 case %zu", i);
}

static void test_whitespace_rewrite(void)
{
	pcre2_code *re;
	CHECK(tok_regex_compile(&re, "^\\s+$", "test") == MGT_OK, "compile \\s");
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	static const struct { const char *s; int match; } cases[] = {
		{" \t\n\v\f\r", 1}, {"\xc2\x85", 1}, {"\xc2\xa0", 1}, {"\xe3\x80\x80", 1}, {"\xe2\x80\xa8", 1},
		{"\xe1\xa0\x8e", 0 /* U+180E is not White_Space */}, {"\xe2\x80\x8b", 0 /* U+200B */}, {"x", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		CHECK((pcre2_match(re, (PCRE2_SPTR)cases[i].s, strlen(cases[i].s), 0, 0, md, NULL) >= 0) == cases[i].match,
		      "\\s case %zu", i);
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	CHECK(tok_regex_compile(&re, "[^\\s\\p{L}]+|\\S", "test") == MGT_OK, "compile class with \\s and \\S");
	pcre2_code_free(re);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

static void test_errors(const char *dir)
{
	char vocab[512], merges[512], ranks[512];
	snprintf(vocab, sizeof vocab, "%s/gpt2/vocab.json", dir);
	snprintf(merges, sizeof merges, "/tmp/mgt-test-merges-%d.txt", (int)getpid());
	snprintf(ranks, sizeof ranks, "/tmp/mgt-test-ranks-%d.tiktoken", (int)getpid());
	write_file(merges, "#version: 0.2\n\xc4\xa0 t\nh e x\n");
	mgt_tok_opts o = {.type = "GPT2BPETokenizer", .vocab_file = vocab, .merge_file = merges};
	mgt_tok *t = NULL;
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), ":3:"), "merges: bad line 3 is named");
	write_file(merges, "#version: 0.2\n\xc4\xa0 zzzzqqqq\n");
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "not in the vocabulary"), "merges: unknown token");
	o.merge_file = "/nonexistent/merges.txt";
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "/nonexistent/merges.txt"), "missing file named, exit 4");
	write_file(ranks, "IQ== 0\nnot*base64 1\n");
	mgt_tok_opts r = {.type = "TikTokenizer", .model = ranks, .tiktoken_pattern = "cl100k_base"};
	CHECK(mgt_tok_load(&t, &r) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), ":2:"), "rank file: bad line 2 is named");
	write_file(ranks, "IQ== 0\n");
	CHECK(mgt_tok_load(&t, &r) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "byte 0x00"), "rank file: missing bytes");
	unlink(merges);
	unlink(ranks);
	mgt_tok_opts bad = {.type = "SentencePieceTokenizer"};
	CHECK(mgt_tok_load(&t, &bad) == MGT_ERR_USAGE, "unknown type is a usage error");
	mgt_tok_opts null = {.type = "NullTokenizer", .vocab_size = 10, .null_eod_id = -1};
	CHECK(mgt_tok_load(&t, &null) == MGT_OK && mgt_tok_eod(t) == 9, "NullTokenizer eod = vocab_size - 1");
	mgt_tok_enc *e;
	mgt_ids ids = {0};
	CHECK(mgt_tok_enc_new(&e, t) == MGT_OK && mgt_tok_encode(e, "1 2 9", 5, &ids) == MGT_OK && ids.n == 3 &&
	      ids.v[2] == 9, "NullTokenizer encodes");
	CHECK(mgt_tok_encode(e, "1 10", 4, &ids) == MGT_ERR_INPUT, "NullTokenizer rejects an id beyond the vocabulary");
	CHECK(mgt_tok_encode(e, "1  2", 4, &ids) == MGT_ERR_INPUT, "NullTokenizer rejects an empty field");
	CHECK(mgt_tok_encode(e, "\xff", 1, &ids) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "UTF-8"), "invalid UTF-8 rejected");
	free(ids.v);
	mgt_tok_enc_free(e);
	mgt_tok_free(t);
}

/* ---- BERT WordPiece on a hand-made vocab (ids worked out by hand from tok.h's rules) -------- */

static const char wp_vocab[] =
	"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"           /* 0-4 */
	"hello\nworld\n,\n!\nun\n##aff\n##able\n"          /* 5-11 */
	"cafe\n\xe4\xb8\xad\na\n##a\n[\n]\nmask\nx\ny\n"   /* 12-20: 13 = U+4E2D */
	"\xc3\xa9\nHello\n##s\ncat\ni\n<\n>\n";            /* 21-27: 21 = e-acute */

static int wp_ids(mgt_tok_enc *e, const char *text, size_t len, const int32_t *want, size_t n)
{
	mgt_ids ids = {0};
	int ok = mgt_tok_encode(e, text, len, &ids) == MGT_OK && ids.n == n;
	for (size_t i = 0; ok && i < n; i++)
		ok = ids.v[i] == want[i];
	if (!ok) {
		printf("# '%.*s' ->", (int)len, text);
		for (size_t i = 0; i < ids.n; i++)
			printf(" %d", ids.v[i]);
		printf("\n");
	}
	free(ids.v);
	return ok;
}
#define WP(e, text, ...) wp_ids(e, text, sizeof text - 1, (const int32_t[]){__VA_ARGS__}, \
				sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

static mgt_tok *wp_load(const char *type, const char *file, int plain)
{
	mgt_tok_opts o = {.type = type, .vocab_file = file, .hf_no_special_tokens = plain};
	mgt_tok *t = NULL;
	return mgt_tok_load(&t, &o) == MGT_OK ? t : NULL;
}

static void test_wordpiece_lower(mgt_tok *t, mgt_tok *tt)
{
	mgt_tok_enc *e, *ee;
	if (mgt_tok_enc_new(&e, t) || mgt_tok_enc_new(&ee, tt))
		return;
	CHECK(WP(e, "Hello, World!", 5, 7, 6, 8), "lower: case folded, punctuation split");
	CHECK(WP(ee, "Hello, World!", 2, 5, 7, 6, 8, 3), "lower: [CLS] ... [SEP] template");
	CHECK(WP(ee, "", 2, 3) && WP(ee, " \t\n ", 2, 3), "lower: empty and blank text give [CLS] [SEP]");
	CHECK(WP(e, "unaffable", 9, 10, 11), "greedy longest match with ## pieces");
	CHECK(WP(e, "catz", 1) && WP(e, "cats", 24, 23), "an unmatched position makes the whole word [UNK]");
	CHECK(WP(e, "Caf\xc3\xa9 CAFE\xcc\x81", 12, 12), "accents stripped (precomposed and NFD input)");
	CHECK(WP(e, "\xc4\xb0", 25), "U+0130 -> i (strip accents, then lower-case)");
	CHECK(WP(e, "x\xe4\xb8\xady", 19, 13, 20), "CJK ideograph gets spaces around it");
	CHECK(WP(e, "cat\x07s ca\0t cat\xc2\xads cat\xee\x80\x80s c\xef\xbf\xbd" "at", 24, 23, 24, 24, 23, 24, 23, 24),
	      "NUL, Cc, Cf (soft hyphen), Co (private use) and U+FFFD dropped, joining the word");
	CHECK(WP(e, "x\ty\xe2\x80\xa8x\xc2\xa0y", 19, 20, 19, 20), "tab, U+2028, no-break space split words");
	CHECK(WP(e, "x\xcd\xb8y", 1), "an unassigned code point (U+0378) is kept (-> [UNK])");
	CHECK(WP(e, "x$y x\xe2\x80\x94y", 19, 1, 20, 19, 1, 20), "ASCII $ and Unicode Pd are punctuation");
	CHECK(WP(e, "x\xc3\x97y", 1), "U+00D7 (Sm) is not punctuation: one word, [UNK]");
	char a100[101], a101[102], u101[203];
	memset(a100, 'a', 100), memset(a101, 'a', 101);
	for (int i = 0; i < 101; i++)
		memcpy(u101 + 2 * i, "\xc3\xa1", 2); /* a-acute: 101 characters, 101 'a' after stripping */
	mgt_ids ids = {0};
	CHECK(mgt_tok_encode(e, a100, 100, &ids) == MGT_OK && ids.n == 100 && ids.v[0] == 14 && ids.v[99] == 15,
	      "a 100-character word is WordPiece'd (a ##a x99)");
	ids.n = 0;
	CHECK(mgt_tok_encode(e, a101, 101, &ids) == MGT_OK && ids.n == 1 && ids.v[0] == 1, "a 101-character word is [UNK]");
	ids.n = 0;
	CHECK(mgt_tok_encode(e, u101, 202, &ids) == MGT_OK && ids.n == 1 && ids.v[0] == 1 &&
	      mgt_tok_encode(e, u101, 200, &ids) == MGT_OK && ids.n == 101, "the limit counts normalized characters");
	free(ids.v);
	CHECK(WP(e, "x[MASK]y [mask] [CLS][SEP]", 19, 4, 20, 16, 18, 17, 2, 3),
	      "literal special tokens match the raw text only");
	CHECK(WP(e, "<extra_id_0>", 26, 1, 1, 1, 1, 1, 27), "no sentinels in the lower-case tokenizer");
	mgt_tok_enc_free(e), mgt_tok_enc_free(ee);
}

static void test_wordpiece_case(mgt_tok *t)
{
	mgt_tok_enc *e;
	if (mgt_tok_enc_new(&e, t))
		return;
	CHECK(WP(e, "Hello hello, World!", 2, 22, 5, 7, 1, 8, 3), "cased: no lower-casing");
	CHECK(WP(e, "\xc3\xa9 e\xcc\x81", 2, 21, 1, 3), "cased: accents kept, no NFC");
	CHECK(WP(e, "x<extra_id_3>y<extra_id_100>", 2, 19, 31, 20, 26, 1, 1, 1, 1, 1, 27, 3), "cased: <extra_id_N> are special tokens");
	const int32_t *s;
	CHECK(mgt_tok_sentinels(t, &s) == 100 && s[0] == 28 && s[99] == 127 && mgt_tok_vocab_size(t) == 128,
	      "cased: 100 sentinels at V.., vocab_size V + 100");
	size_t len;
	const char *p = mgt_tok_token_bytes(t, 28, &len);
	CHECK(p && len == 12 && !memcmp(p, "<extra_id_0>", 12), "sentinel text");
	mgt_tok_enc_free(e);
}

static void test_wordpiece_ids_decode(mgt_tok *t)
{
	const char *names[] = {"pad", "unk", "cls", "sep", "mask", "bos", "eos", "eod", "nope"};
	int32_t want[] = {0, 1, 2, 3, 4, 2, 3, 3, -1};
	int ok = mgt_tok_eod(t) == 3;
	for (int i = 0; i < 9; i++)
		ok = ok && mgt_tok_special_id(t, names[i]) == want[i];
	CHECK(ok, "special ids by name (bos = cls, eos = eod = sep)");
	const int32_t *s;
	CHECK(mgt_tok_sentinels(t, &s) == 0 && !s && mgt_tok_vocab_size(t) == 28, "lower-case: no sentinels, vocab_size V");
	size_t len;
	const char *p = mgt_tok_token_bytes(t, 10, &len);
	CHECK(p && len == 5 && !memcmp(p, "##aff", 5), "token bytes keep ##");
	mgt_buf out = {0};
	int32_t ids[] = {2, 5, 7, 6, 8, 9, 10, 11, 23, 3};
	const char *want1 = "[CLS] hello, world! unaffables [SEP]", *want2 = "##affables [SEP]";
	CHECK(mgt_tok_decode(t, ids, 10, &out) == MGT_OK && out.n == strlen(want1) && !memcmp(out.p, want1, out.n),
	      "decode: spaces between words, ## pieces glued, ' ,' and ' !' cleaned up");
	out.n = 0;
	CHECK(mgt_tok_decode(t, ids + 6, 4, &out) == MGT_OK && out.n == strlen(want2) && !memcmp(out.p, want2, out.n),
	      "decode: a leading ## piece keeps its ##");
	int32_t bad = 28;
	CHECK(mgt_tok_decode(t, &bad, 1, &out) == MGT_ERR_INPUT, "decode: id beyond the vocabulary");
	free(out.p);
}

static void test_wordpiece_errors(const char *path)
{
	mgt_tok *t;
	mgt_tok_opts o = {.type = "BertWordPieceLowerCase", .vocab_file = path};
	write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\ny\nx\n");
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), ":8:") && strstr(mgt_err_msg(), "repeats line 6"),
	      "vocab: a duplicate token names both lines");
	write_file(path, "[PAD]\n[UNK]\n[CLS]\n\n[SEP]\n[MASK]\n");
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), ":4: empty line"), "vocab: an empty line is named");
	write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\n");
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "no [MASK]"), "vocab: a missing special is named");
	write_file(path, "");
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "no tokens"), "vocab: empty file");
	o.vocab_file = NULL;
	CHECK(mgt_tok_load(&t, &o) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "--vocab-file"), "vocab: --vocab-file required");
	unlink(path);
}

/* mgt_tok_load_wordpiece_vocab: lenient lines (empty, duplicate, "\r\n", no [UNK]), specials by
 * their first line, sentinels at V.., no encoder. */
static void test_wordpiece_vocab(const char *path)
{
	mgt_tok *t = NULL;
	write_file(path, "[PAD]\n[CLS]\n\n[SEP]\r\n[MASK]\n##a\n[CLS]\nb");
	CHECK(mgt_tok_load_wordpiece_vocab(&t, path, 3) == MGT_OK, "vocab only: loads without [UNK], with an empty and a repeated line");
	if (t) {
		const int32_t *sent;
		size_t n, k = mgt_tok_sentinels(t, &sent);
		const char *s5 = mgt_tok_token_bytes(t, 5, &n);
		CHECK(mgt_tok_vocab_size(t) == 11 && k == 3 && sent[0] == 8 && sent[2] == 10, "vocab only: 8 lines, sentinels at 8..10");
		CHECK(mgt_tok_special_id(t, "cls") == 1 && mgt_tok_special_id(t, "sep") == 3 && mgt_tok_special_id(t, "mask") == 4 &&
		      mgt_tok_special_id(t, "pad") == 0 && mgt_tok_special_id(t, "bos") == 1 && mgt_tok_special_id(t, "eos") == 3 &&
		      mgt_tok_eod(t) == 3 && mgt_tok_special_id(t, "unk") == -1, "vocab only: specials by their first line, bos/eos/eod");
		CHECK(s5 && n == 3 && !memcmp(s5, "##a", 3) && mgt_tok_token_bytes(t, 2, &n) && n == 0 &&
		      !mgt_tok_token_bytes(t, 8, &n), "vocab only: token bytes are the lines (\\r dropped), sentinels have none");
		mgt_tok_enc *e = NULL;
		mgt_ids ids = {0};
		CHECK(mgt_tok_enc_new(&e, t) == MGT_OK && mgt_tok_encode(e, "b", 1, &ids) == MGT_ERR_USAGE, "vocab only: no encoder");
		mgt_tok_enc_free(e);
		free(ids.v);
	}
	mgt_tok_free(t);
	write_file(path, "[PAD]\n[CLS]\n[SEP]\n");
	CHECK(mgt_tok_load_wordpiece_vocab(&t, path, 0) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "no [MASK] token"),
	      "vocab only: a missing special is named");
	write_file(path, "");
	CHECK(mgt_tok_load_wordpiece_vocab(&t, path, 0) == MGT_ERR_VOCAB && strstr(mgt_err_msg(), "no [CLS] token"),
	      "vocab only: an empty file has no [CLS]");
	unlink(path);
}

static void test_wordpiece(void)
{
	char path[128];
	snprintf(path, sizeof path, "/tmp/mgt-test-wp-%d.txt", (int)getpid());
	write_file(path, wp_vocab);
	mgt_tok *plain = wp_load("BertWordPieceLowerCase", path, 1), *tmpl = wp_load("BertWordPieceLowerCase", path, 0),
		*cased = wp_load("BertWordPieceCase", path, 0);
	CHECK(plain && tmpl && cased, "WordPiece tokenizers load");
	if (plain && tmpl && cased) {
		test_wordpiece_lower(plain, tmpl);
		test_wordpiece_case(cased);
		test_wordpiece_ids_decode(tmpl);
	}
	mgt_tok_free(plain), mgt_tok_free(tmpl), mgt_tok_free(cased);
	test_wordpiece_errors(path);
	test_wordpiece_vocab(path);
}

int main(void)
{
	const char *dir = "share/mgt/tokenizers";
	char v[512], m[512], cl[512], o2[512];
	snprintf(v, sizeof v, "%s/gpt2/vocab.json", dir);
	snprintf(m, sizeof m, "%s/gpt2/merges.txt", dir);
	snprintf(cl, sizeof cl, "%s/tiktoken/cl100k_base.tiktoken", dir);
	snprintf(o2, sizeof o2, "%s/tiktoken/o200k_base.tiktoken", dir);
	mgt_tok *gpt2 = load("GPT2BPETokenizer", v, m), *cl100k = load("TikTokenizer", cl, NULL),
		*o200k = load("TikTokenizer", o2, NULL);
	if (gpt2 && cl100k && o200k) {
		test_bpe_vs_naive(gpt2, "gpt2");
		test_bpe_vs_naive(cl100k, "cl100k_base");
		test_round_trip(gpt2, "gpt2");
		test_round_trip(cl100k, "cl100k_base");
		test_round_trip(o200k, "o200k_base");
		test_special_strings(gpt2, cl100k);
		CHECK(mgt_tok_vocab_size(gpt2) == 50257 && mgt_tok_eod(gpt2) == 50256, "gpt2 sizes");
		CHECK(mgt_tok_vocab_size(cl100k) == 100277 && mgt_tok_eod(cl100k) == 100257, "cl100k sizes");
		CHECK(mgt_tok_vocab_size(o200k) == 200019 && mgt_tok_eod(o200k) == 199999, "o200k sizes");
	}
	mgt_tok_free(gpt2), mgt_tok_free(cl100k), mgt_tok_free(o200k);
	free(rows);
	test_utf8();
	test_whitespace_rewrite();
	test_errors(dir);
	test_wordpiece();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
