/* Unit tests for the GPTDataset sample order (lib/data/gpt*.c, megatron/core/datasets/gpt_dataset.py).
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on any failure.
 *
 * With arguments it is the C side of tests/cli/t2000-gptdataset.sh instead:
 *   test_gptdataset --dump KEY=VALUE...
 * keys: data="w1 p1 ..." (the --data-path words) | mock=1, split=, seq=, seed=, train=, valid=,
 * test= (a number or "none"), cache=DIR, eod=, vocab=, eodmask=1, resetpos=1, keeppartial=1,
 * samples=K. Prints "len SPLIT N" per split, "index SPLIT DATASET epochs E separate 0|1" per
 * GPTDataset, then for K evenly spaced samples and the last of each split
 * "SPLIT IDX DATASET DATASET_IDX | tokens | labels | loss_mask | position_ids"; the note (if
 * any) and errors go to stderr; exit status mgt_exit_code(). */
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* ---- RNG ---------------------------------------------------------------------------------- */

static void test_mt19937(void)
{
	mgt_mt19937 r;
	mgt_mt19937_seed(&r, 5489);
	uint32_t first = mgt_mt19937_next32(&r), v = first;
	for (int i = 1; i < 10000; i++)
		v = mgt_mt19937_next32(&r);
	CHECK(first == 3499211612u, "mt19937 seed 5489: first output 3499211612 (got %u)", first);
	CHECK(v == 4123659995u, "mt19937 seed 5489: 10000th output 4123659995 (got %u)", v);
	CHECK(mgt_mt19937_interval(&r, 0) == 0, "random_interval(0) = 0");
	int in_range = 1;
	for (int i = 0; i < 1000; i++)
		in_range &= mgt_mt19937_interval(&r, 5) <= 5 && mgt_mt19937_interval(&r, 1ull << 40) <= 1ull << 40;
	CHECK(in_range, "random_interval stays in [0, max] (32- and 64-bit paths)");
	uint32_t a[100];
	for (int i = 0; i < 100; i++)
		a[i] = (uint32_t)i;
	mgt_mt19937_seed(&r, 1);
	mgt_mt19937_shuffle(&r, a, 100, 4);
	int seen[100] = { 0 }, perm = 1, moved = 0;
	for (int i = 0; i < 100; i++) {
		perm &= a[i] < 100 && !seen[a[i]]++;
		moved += a[i] != (uint32_t)i;
	}
	CHECK(perm && moved > 50, "shuffle is a permutation that moves most items");
}

/* ---- §3.5 test vectors ---------------------------------------------------------------------- */

static const int32_t vec_lengths[10] = { 5, 3, 9, 1, 7, 4, 6, 2, 8, 10 };

static int same_i32(const int32_t *a, const int32_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

static int same_u32(const uint32_t *a, const int32_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if ((int32_t)a[i] != b[i])
			return 0;
	return 1;
}

static void test_vector(int64_t num_samples, const int32_t *doc, int64_t n_doc, const int32_t *rows,
			int64_t n_rows, const int32_t *shuf, bool sep)
{
	mgt_gpt_split sp;
	uint64_t beg, end;
	mgt_gpt_split_parse("8,1,1", &sp);
	mgt_gpt_split_range(&sp, MGT_SPLIT_TRAIN, 10, &beg, &end);
	CHECK(beg == 0 && end == 8, "§3.5 split 8,1,1 of 10 sequences: train is [0, 8)");
	mgt_gpt_index ix;
	mgt_status st = mgt_gpt_index_build(vec_lengths, 10, beg, end, num_samples, 4, 1234, true, &ix);
	CHECK(st == MGT_OK, "§3.5 num_samples=%lld: built", (long long)num_samples);
	if (st)
		return;
	CHECK(ix.num_epochs == (sep ? 2 : 1) && ix.separate_final_epoch == sep,
	      "§3.5 num_samples=%lld: %d epochs, separate final epoch %d", (long long)num_samples,
	      ix.num_epochs, ix.separate_final_epoch);
	CHECK(ix.n_docs == n_doc && same_i32(ix.document_index, doc, n_doc),
	      "§3.5 num_samples=%lld: document_index", (long long)num_samples);
	CHECK(!ix.sample_i64 && ix.n_samples + 1 == n_rows && same_i32(ix.sample_index, rows, 2 * n_rows),
	      "§3.5 num_samples=%lld: sample_index", (long long)num_samples);
	CHECK(!ix.shuffle_i64 && same_u32(ix.shuffle_index, shuf, n_rows - 1),
	      "§3.5 num_samples=%lld: shuffle_index", (long long)num_samples);
	mgt_gpt_index_free(&ix);
}

static void test_vectors(void)
{
	static const int32_t doc1[] = { 2, 1, 6, 0, 4, 5, 3, 7 };
	static const int32_t rows1[] = { 0, 0, 0, 4, 0, 8, 2, 0, 2, 4, 3, 2, 4, 1, 4, 5, 5, 2, 7, 1 };
	static const int32_t shuf1[] = { 6, 4, 0, 5, 3, 2, 8, 7, 1 };
	static const int32_t doc2[] = { 2, 1, 6, 0, 4, 5, 3, 7, 5, 0, 3, 4, 2, 6, 1, 7 };
	static const int32_t rows2[] = { 0, 0, 0, 4, 0, 8, 2, 0, 2, 4, 3, 2, 4, 1, 4, 5, 5, 2, 7, 1,
					 8, 3, 9, 3, 11, 1, 11, 5, 12, 2, 12, 6, 13, 1, 13, 5, 15, 0 };
	static const int32_t shuf2[] = { 7, 3, 5, 1, 4, 8, 0, 2, 6, 16, 13, 10, 14, 12, 9, 11, 17, 15 };
	test_vector(MGT_GPT_NONE, doc1, 8, rows1, 10, shuf1, false);
	test_vector(5, doc1, 8, rows1, 10, shuf1, false);
	test_vector(12, doc2, 16, rows2, 19, shuf2, true);
}

/* helpers.cpp counts a kept partial sample with a float ceil: 2^24 + 1 tokens round to 2^24. */
static void test_float_ceil(void)
{
	int32_t len[1] = { (1 << 24) + 2 };
	mgt_gpt_index a = { 0 }, b = { 0 };
	int64_t tokens = len[0] - 1;
	CHECK(!mgt_gpt_index_plan(len, 1, 0, 1, MGT_GPT_NONE, 1, false, &a) &&
	      a.n_samples == (int64_t)ceilf((float)tokens / 1.0f) && a.n_samples != tokens,
	      "drop_last off: ceil in float, %lld samples of 2^24 + 1 tokens", (long long)a.n_samples);
	CHECK(!mgt_gpt_index_plan(len, 1, 0, 1, MGT_GPT_NONE, 1, true, &b) && b.n_samples == tokens,
	      "drop_last on: integer division");
}

/* ---- split, flags, blending ------------------------------------------------------------------ */

static void test_split(void)
{
	mgt_gpt_split sp;
	uint64_t b, e;
	CHECK(!mgt_gpt_split_parse("969,30,1", &sp) && sp.present[0] && sp.present[1] && sp.present[2] &&
	      sp.frac[0] == 969.0 / 1000 && sp.end[1] == 0.969 + 0.03, "split 969,30,1: normalized, cumulative");
	mgt_gpt_split_range(&sp, MGT_SPLIT_TEST, 1189, &b, &e);
	CHECK(b == 1188 && e == 1189, "split 969,30,1 of 1189: test is [1188, 1189) (got [%llu, %llu))",
	      (unsigned long long)b, (unsigned long long)e);
	CHECK(!mgt_gpt_split_parse(NULL, &sp) && sp.present[0] && !sp.present[1] && !sp.present[2],
	      "no split = 1,0,0: valid and test absent");
	CHECK(!mgt_gpt_split_parse("100", &sp) && sp.frac[0] == 1 && !sp.present[1], "one number pads with 0");
	CHECK(!mgt_gpt_split_parse("1 / 1", &sp) && sp.present[0] && sp.present[1] && !sp.present[2],
	      "any separator: '1 / 1' is 0.5, 0.5");
	mgt_gpt_split_range(&sp, MGT_SPLIT_TRAIN, 5, &b, &e);
	CHECK(e == 2, "round half to even: 0.5 * 5 = 2.5 -> 2 (got %llu)", (unsigned long long)e);
	mgt_gpt_split_range(&sp, MGT_SPLIT_TRAIN, 7, &b, &e);
	CHECK(e == 4, "round half to even: 0.5 * 7 = 3.5 -> 4 (got %llu)", (unsigned long long)e);
	mgt_gpt_split_range(&sp, MGT_SPLIT_TEST, 7, &b, &e);
	CHECK(b == 0 && e == 0, "absent split: empty range");
	CHECK(!mgt_gpt_split_parse(".5,.25,.25", &sp) && sp.frac[1] == 0.25, "numbers like .5");
	CHECK(mgt_gpt_split_parse("1,2,3,4", &sp) == MGT_ERR_USAGE, "four numbers refused");
	CHECK(mgt_gpt_split_parse("1.2.3,1", &sp) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "1.2.3"),
	      "'1.2.3' is not a number: %s", mgt_err_msg());
	CHECK(mgt_gpt_split_parse("0,0,0", &sp) == MGT_ERR_USAGE, "all zero refused");
	CHECK(mgt_gpt_split_parse("abc", &sp) == MGT_ERR_USAGE, "no number refused");
}

static void test_data_path(void)
{
	int n;
	char **p;
	double *w;
	const char *one[] = { "data/a" };
	CHECK(!mgt_gpt_parse_data_path(1, one, &n, &p, &w) && n == 1 && !w && !strcmp(p[0], "data/a"),
	      "one prefix, no weights");
	free(p[0]);
	free(p);
	const char *two[] = { "0.3", " a ", "0.7", "b" };
	CHECK(!mgt_gpt_parse_data_path(4, two, &n, &p, &w) && n == 2 && w && w[0] == 0.3 && w[1] == 0.7 &&
	      !strcmp(p[0], "a") && !strcmp(p[1], "b"), "weights and stripped prefixes");
	for (int i = 0; i < n; i++)
		free(p[i]);
	free(p);
	free(w);
	const char *pre[] = { "a", "b" };
	CHECK(!mgt_gpt_parse_data_path(2, pre, &n, &p, &w) && n == 2 && !w, "even count of prefixes: unweighted");
	for (int i = 0; i < n; i++)
		free(p[i]);
	free(p);
	const char *odd[] = { "1", "a", "b" };
	CHECK(!mgt_gpt_parse_data_path(3, odd, &n, &p, &w) && n == 3 && !w && !strcmp(p[0], "1"),
	      "odd count: all prefixes");
	for (int i = 0; i < n; i++)
		free(p[i]);
	free(p);
	const char *mixed[] = { "a", "b", "0.3", "c" };
	CHECK(mgt_gpt_parse_data_path(4, mixed, &n, &p, &w) == MGT_ERR_USAGE, "a weight after a prefix: refused");
	const char *zero[] = { "0", "a", "1", "b" };
	CHECK(mgt_gpt_parse_data_path(4, zero, &n, &p, &w) == MGT_ERR_USAGE, "weight 0 refused");
}

static void test_num_samples(void)
{
	uint64_t s[3];
	CHECK(!mgt_gpt_num_samples(0, 100, 8, 0, 10, 5, s) && s[0] == 800 && s[1] == (100 / 10 + 1) * 5 * 8 &&
	      s[2] == 40, "train_iters*gbs, (iters//interval+1)*eval_iters*gbs, eval_iters*gbs");
	CHECK(!mgt_gpt_num_samples(1000, 125, 8, 4, 50, 2, s) && s[0] == 1000 && s[1] == 3 * 2 * 4 && s[2] == 8,
	      "train_samples and an eval batch size");
	CHECK(mgt_gpt_num_samples(0, 10, 8, 0, 0, 5, s) == MGT_ERR_USAGE, "eval interval 0 refused");
}

static void test_blend(void)
{
	double w[3] = { 0.5, 0.3, 0.2 };
	int16_t di[1000];
	int64_t dsi[1000], count[3] = { 0 };
	mgt_gpt_blend_indices(w, 3, 1000, di, dsi);
	int consecutive = 1, close = 1;
	for (int s = 0; s < 1000; s++) {
		consecutive &= dsi[s] == count[di[s]]++;
		for (int k = 0; k < 3; k++)
			close &= (double)count[k] - w[k] * (s + 1) < 1.0 + 1e-9 && w[k] * (s + 1) - (double)count[k] < 1.0 + 1e-9;
	}
	CHECK(consecutive && close && di[0] == 0, "blend: per-dataset samples in order, counts within 1 of weights");
	int64_t sizes[3] = { 5, 0, 12 };
	int16_t xdi[17];
	int64_t xdsi[17], xc[3] = { 0 };
	mgt_gpt_blend_indices_exhaustive(sizes, 3, xdi, xdsi);
	int ok = 1;
	for (int s = 0; s < 17; s++)
		ok &= xdi[s] >= 0 && xdi[s] < 3 && xdsi[s] == xc[xdi[s]]++;
	CHECK(ok && xc[0] == 5 && xc[1] == 0 && xc[2] == 12, "exhaustive blend: each dataset exactly its size");
	double raw[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, nw[9], sum = 0;
	mgt_gpt_normalize(raw, 9, nw);
	for (int i = 0; i < 9; i++)
		sum += nw[i];
	CHECK(nw[0] == 1.0 / 45 && sum > 0.999999 && sum < 1.000001, "normalize (9 weights: pairwise sum)");
}

/* ---- .npy and md5 --------------------------------------------------------------------------- */

static void test_npy_md5(void)
{
	char h[256], want[129];
	int64_t shape[2] = { 8, 0 };
	size_t n = mgt_npy_header(h, sizeof h, "<i4", 1, shape);
	const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }";
	memset(want, ' ', 128);
	memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
	memcpy(want + 10, dict, strlen(dict));
	want[127] = '\n';
	CHECK(n == 128 && !memcmp(h, want, 128), "npy header (8,) <i4: 128 bytes as numpy.save writes it");
	int64_t s2[2] = { 10, 2 };
	n = mgt_npy_header(h, sizeof h, "<i8", 2, s2);
	CHECK(n == 128 && strstr(h + 10, "'shape': (10, 2), }") && h[127] == '\n' && h[8] == 118,
	      "npy header (10, 2) <i8");
	int64_t big[2] = { 123456789012345LL, 0 };
	n = mgt_npy_header(h, sizeof h, "<u4", 1, big);
	CHECK(n % 64 == 0 && h[n - 1] == '\n' && (size_t)(h[8] & 0xff) + 10 == n, "npy header: a multiple of 64");
	char hex[33];
	mgt_md5_hex("", 0, hex);
	CHECK(!strcmp(hex, "d41d8cd98f00b204e9800998ecf8427e"), "md5('') (RFC 1321)");
	mgt_md5_hex("abc", 3, hex);
	CHECK(!strcmp(hex, "900150983cd24fb0d6963f7d28e17f72"), "md5('abc') (RFC 1321)");
	const char *m = "12345678901234567890123456789012345678901234567890123456789012345678901234567890";
	mgt_md5_hex(m, strlen(m), hex);
	CHECK(!strcmp(hex, "57edf4a22be3c955ac49da2e2107b67a"), "md5 of 80 digits (RFC 1321)");
	int32_t data[3] = { 7, -1, 9 };
	int64_t s3[2] = { 3, 0 };
	mgt_npy_array a = { "x.npy", "<i4", 1, { 3, 0 }, data, 0, 0 };
	CHECK(!mgt_npy_cache_save(dir, "h-T-train", "desc", &a, 1), "npy cache save");
	(void)s3;
	mgt_npy_array b = { "x.npy", "<i4", 1, { 3, 0 }, NULL, 0, 0 };
	CHECK(!mgt_npy_cache_load(dir, "h-T-train", "desc", &b, 1) && !memcmp(b.data, data, 12), "npy cache load");
	mgt_npy_cache_unmap(&b, 1);
	CHECK(mgt_npy_cache_load(dir, "h-T-train", "other", &b, 1) == MGT_ERR_FORMAT, "other description: miss");
	b.shape[0] = 4;
	CHECK(mgt_npy_cache_load(dir, "h-T-train", "desc", &b, 1) == MGT_ERR_FORMAT, "other shape: miss");
}

/* ---- datasets -------------------------------------------------------------------------------- */

#define EOD 1
#define VOCAB 1000

static uint32_t lcg = 12345;
static uint32_t rnd(uint32_t n)
{
	lcg = lcg * 1103515245u + 12345u;
	return (lcg >> 16) % n;
}

/* A dataset of n documents of 1..maxlen tokens each: ids 2 + (doc * 37 + j) % 997, eod last. */
static void make_dataset(const char *prefix, int n, int maxlen, mgt_dtype dt)
{
	mgt_idx_writer *w;
	int32_t ids[64];
	if (mgt_idx_writer_open(&w, prefix, dt, 1)) {
		printf("cannot write %s: %s\n", prefix, mgt_err_msg());
		exit(1);
	}
	for (int d = 0; d < n; d++) {
		int len = 1 + (int)rnd((uint32_t)maxlen);
		for (int j = 0; j < len - 1; j++)
			ids[j] = 2 + (d * 37 + j) % 997;
		ids[len - 1] = EOD;
		mgt_idx_writer_add_document(w, ids, (size_t)len);
	}
	if (mgt_idx_writer_finish(w)) {
		printf("cannot finish %s: %s\n", prefix, mgt_err_msg());
		exit(1);
	}
}

static mgt_gpt_data_config base_config(const char *const *paths)
{
	mgt_gpt_data_config c = { 0 };
	c.n_paths = 1;
	c.paths = paths;
	c.split = "8,1,1";
	c.seq_length = 7;
	c.seed = 1234;
	c.eod_id = EOD;
	c.vocab_size = VOCAB;
	return c;
}

/* Expected sample from the flattened stream of the document index (a formulation independent of
 * the piecewise fetch): text = stream[start(row) : start(row) + S + 1], padded with -1. */
static int sample_matches(const mgt_gpt_data *d, const mgt_idx *x, mgt_split sp, int64_t i,
			  const mgt_gpt_data_config *c, int *padded)
{
	int32_t tok[64], lab[64], pos[64], want[65], *seq = NULL;
	float mask[64];
	size_t n, cap = 0;
	const mgt_gpt_index *ix = mgt_gpt_data_index(d, 0, sp);
	int S = c->seq_length;
	if (mgt_gpt_data_sample(d, sp, i, tok, lab, mask, pos))
		return 0;
	int64_t j = mgt_gpt_index_shuffle(ix, i), doc, off, at = 0, start = -1;
	mgt_gpt_index_row(ix, j, &doc, &off);
	for (int k = 0; k < S + 1; k++)
		want[k] = -1;
	for (int64_t p = 0; p < ix->n_docs; p++) {
		mgt_idx_get(x, (uint64_t)ix->document_index[p], &seq, &n, &cap);
		if (p == doc)
			start = at + off;
		for (size_t t = 0; t < n; t++, at++)
			if (start >= 0 && at >= start && at < start + S + 1)
				want[at - start] = seq[t];
	}
	free(seq);
	int ok = 1, prev = 0;
	for (int q = 0; q < S; q++) {
		float m = (c->eod_mask_loss && want[q] == EOD) || want[q + 1] == -1 ? 0.0f : 1.0f;
		ok &= tok[q] == (want[q] < 0 ? 0 : want[q]) && lab[q] == (want[q + 1] < 0 ? 0 : want[q + 1]);
		ok &= mask[q] == m && pos[q] == (c->reset_position_ids ? q - prev : q);
		if (want[q] == EOD)
			prev = q + 1;
	}
	*padded |= want[S] == -1;
	return ok;
}

static void test_fetch(bool eod_mask, bool reset, bool partial)
{
	const char *paths[] = { path_in("fetch") };
	mgt_gpt_data_config c = base_config(paths);
	c.num_samples[0] = 60;
	c.num_samples[1] = 3;
	c.eod_mask_loss = eod_mask;
	c.reset_position_ids = reset;
	c.keep_partial_valid = partial;
	c.cache_path = path_in("cache-fetch");
	mgt_gpt_data *d;
	mgt_idx *x;
	mgt_status st = mgt_gpt_data_open(&c, &d);
	CHECK(st == MGT_OK, "open (eod mask %d, reset positions %d, partial valid %d)", eod_mask, reset, partial);
	if (st || mgt_idx_open(&x, paths[0]))
		return;
	mgt_split sp = partial ? MGT_SPLIT_VALID : MGT_SPLIT_TRAIN;
	const mgt_gpt_index *ix = mgt_gpt_data_index(d, 0, sp);
	int ok = 1, padded = 0;
	for (int64_t i = 0; i < mgt_gpt_data_len(d, sp); i++)
		ok &= sample_matches(d, x, sp, i, &c, &padded);
	CHECK(ok && mgt_gpt_data_len(d, sp) > 0, "%s: all %lld samples equal the flattened document stream",
	      mgt_split_name(sp), (long long)mgt_gpt_data_len(d, sp));
	if (partial) {
		int64_t tokens = ix->num_epochs * ix->tokens_per_epoch - 1;
		CHECK(tokens % c.seq_length != 0 && padded, "valid with drop_last off: the partial last sample is padded");
	} else {
		CHECK(ix->num_epochs > 1 && !padded, "train: several epochs, no padding");
	}
	int32_t t[7], l[7], p[7];
	float m[7];
	CHECK(mgt_gpt_data_sample(d, sp, mgt_gpt_data_len(d, sp), t, l, m, p) == MGT_ERR_INPUT &&
	      strstr(mgt_err_msg(), "out of range"), "sample past the end: error, no wrap");
	CHECK(mgt_gpt_data_len(d, MGT_SPLIT_TEST) >= 0 && mgt_gpt_data_index(d, 1, sp) == NULL, "bad dataset index: NULL");
	mgt_idx_close(x);
	mgt_gpt_data_close(d);
}

/* ---- threads ---------------------------------------------------------------------------------- */

typedef struct {
	const mgt_gpt_data *d;
	int32_t *out;
	int64_t n;
} job;

static void *fetch_all(void *arg)
{
	job *j = arg;
	int32_t t[7], l[7], p[7];
	float m[7];
	for (int64_t i = 0; i < j->n; i++) {
		if (mgt_gpt_data_sample(j->d, MGT_SPLIT_TRAIN, i, t, l, m, p))
			return NULL;
		memcpy(j->out + 14 * i, t, sizeof t);
		memcpy(j->out + 14 * i + 7, l, sizeof l);
	}
	return j;
}

static void test_threads(void)
{
	const char *paths[] = { path_in("fetch") };
	mgt_gpt_data_config c = base_config(paths);
	c.num_samples[0] = 500;
	c.cache_path = path_in("cache-fetch");
	mgt_gpt_data *d;
	if (mgt_gpt_data_open(&c, &d)) {
		CHECK(0, "open for threads");
		return;
	}
	int64_t n = mgt_gpt_data_len(d, MGT_SPLIT_TRAIN);
	job jobs[5];
	pthread_t th[4];
	for (int k = 0; k < 5; k++)
		jobs[k] = (job){ d, calloc((size_t)n * 14, 4), n };
	int ok = fetch_all(&jobs[4]) != NULL;
	for (int k = 0; k < 4; k++)
		pthread_create(&th[k], NULL, fetch_all, &jobs[k]);
	for (int k = 0; k < 4; k++) {
		void *r;
		pthread_join(th[k], &r);
		ok &= r != NULL && !memcmp(jobs[k].out, jobs[4].out, (size_t)n * 14 * 4);
	}
	CHECK(ok, "4 threads fetch the same %lld samples as one", (long long)n);
	for (int k = 0; k < 5; k++)
		free(jobs[k].out);
	mgt_gpt_data_close(d);
}

/* ---- cache -------------------------------------------------------------------------------------- */

static ino_t inode_of(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

/* Path of the one file in dir ending with suffix. */
static const char *find_file(const char *d, const char *suffix)
{
	static char out[700];
	char cmd[700];
	snprintf(cmd, sizeof cmd, "ls '%s' | grep -- '%s$'", d, suffix);
	FILE *p = popen(cmd, "r");
	char name[300] = "";
	if (!p || !fgets(name, sizeof name, p))
		name[0] = 0;
	if (p)
		pclose(p);
	name[strcspn(name, "\n")] = 0;
	snprintf(out, sizeof out, "%s/%s", d, name);
	return out;
}

static int same_index(const mgt_gpt_index *a, const mgt_gpt_index *b)
{
	return a && b && a->n_docs == b->n_docs && a->n_samples == b->n_samples &&
	       !memcmp(a->document_index, b->document_index, (size_t)a->n_docs * 4) &&
	       !memcmp(a->sample_index, b->sample_index, (size_t)(a->n_samples + 1) * 8) &&
	       !memcmp(a->shuffle_index, b->shuffle_index, (size_t)a->n_samples * 4);
}

static void test_cache(void)
{
	const char *paths[] = { path_in("fetch") };
	mgt_gpt_data_config c = base_config(paths);
	c.num_samples[0] = 40;
	c.cache_path = path_in("cache-c");
	mgt_gpt_data *d1, *d2, *d3;
	CHECK(!mgt_gpt_data_open(&c, &d1) && !*mgt_gpt_data_note(d1), "open with --data-cache-path");
	char desc[700], shuf[700];
	snprintf(desc, sizeof desc, "%s", find_file(c.cache_path, "-GPTDataset-train-description.txt"));
	snprintf(shuf, sizeof shuf, "%s", find_file(c.cache_path, "-GPTDataset-train-shuffle_index.npy"));
	ino_t ino = inode_of(desc);
	CHECK(ino && inode_of(shuf), "cache files {H}-GPTDataset-train-*: %s", desc);
	CHECK(!mgt_gpt_data_open(&c, &d2) && inode_of(desc) == ino, "second open reuses the cache (not rewritten)");
	CHECK(same_index(mgt_gpt_data_index(d1, 0, MGT_SPLIT_TRAIN), mgt_gpt_data_index(d2, 0, MGT_SPLIT_TRAIN)),
	      "cached arrays equal the built ones");
	CHECK(truncate(shuf, 100) == 0, "corrupt the shuffle index");
	CHECK(!mgt_gpt_data_open(&c, &d3) &&
	      same_index(mgt_gpt_data_index(d1, 0, MGT_SPLIT_TRAIN), mgt_gpt_data_index(d3, 0, MGT_SPLIT_TRAIN)),
	      "a corrupt cache is rebuilt");
	struct stat sb;
	CHECK(stat(shuf, &sb) == 0 && sb.st_size > 100, "and rewritten");
	mgt_gpt_data_close(d1);
	mgt_gpt_data_close(d2);
	mgt_gpt_data_close(d3);

	FILE *f = fopen(path_in("plainfile"), "w");
	fclose(f);
	c.cache_path = path_in("plainfile/sub");
	mgt_status st = mgt_gpt_data_open(&c, &d1);
	CHECK(!st && strstr(mgt_gpt_data_note(d1), "memory") && mgt_gpt_data_len(d1, MGT_SPLIT_TRAIN) >= 40,
	      "cache directory not creatable: built in memory (%s)", st ? "" : mgt_gpt_data_note(d1));
	if (!st)
		mgt_gpt_data_close(d1);
	c.cache_path = NULL;
	CHECK(!mgt_gpt_data_open(&c, &d1), "open without --data-cache-path");
	char def[600];
	snprintf(def, sizeof def, "%s/cache/GPTDataset_indices", paths[0]);
	CHECK(stat(find_file(def, "-GPTDataset-valid-sample_index.npy"), &sb) == 0,
	      "default cache directory PREFIX/cache/GPTDataset_indices");
	mgt_gpt_data_close(d1);
}

/* ---- blends and mock data -------------------------------------------------------------------- */

static void test_blend_open(void)
{
	const char *paths[] = { path_in("fetch"), path_in("other") };
	double w[2] = { 1, 3 };
	mgt_gpt_data_config c = base_config(paths);
	c.n_paths = 2;
	c.weights = w;
	c.num_samples[0] = 100;
	c.num_samples[1] = 10;
	c.cache_path = path_in("cache-blend");
	mgt_gpt_data *d;
	mgt_status st = mgt_gpt_data_open(&c, &d);
	CHECK(st == MGT_OK, "blend of 2 datasets, weights 1 3");
	if (st)
		return;
	CHECK(mgt_gpt_data_len(d, MGT_SPLIT_TRAIN) == 25 + 75 &&
	      mgt_gpt_data_index(d, 1, MGT_SPLIT_TRAIN)->n_samples >= 76,
	      "size = sum(ceil(n*w)); datasets asked for ceil(ceil(n*w)*1.005)");
	int k, counts[2] = { 0 }, ok = 1;
	int64_t j;
	for (int64_t i = 0; i < 100; i++) {
		ok &= !mgt_gpt_data_locate(d, MGT_SPLIT_TRAIN, i, &k, &j) && j == counts[k]++;
	}
	CHECK(ok && counts[0] == 25 && counts[1] == 75, "blend locate: 25 and 75 samples, each in order");
	CHECK(!strcmp(find_file(c.cache_path, "-BlendedDataset-train-dataset_index.npy") + strlen(c.cache_path) + 33,
		      "-BlendedDataset-train-dataset_index.npy"), "blend cached under --data-cache-path");
	mgt_gpt_data_close(d);
	c.weights = NULL;
	c.num_samples[0] = MGT_GPT_ALL;
	CHECK(!mgt_gpt_data_open(&c, &d) && mgt_gpt_data_len(d, MGT_SPLIT_TRAIN) ==
	      mgt_gpt_data_index(d, 0, MGT_SPLIT_TRAIN)->n_samples + mgt_gpt_data_index(d, 1, MGT_SPLIT_TRAIN)->n_samples,
	      "unweighted, no size: exhaustive blend of one epoch each");
	mgt_gpt_data_close(d);
	c.weights = w;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_USAGE, "weights without a size: refused");
}

static void test_mock(void)
{
	mgt_gpt_data_config c = { 0 };
	c.mock = true;
	c.seq_length = 128;
	c.seed = 1234;
	c.num_samples[0] = 1000;
	c.split = "99,1,0";
	c.eod_id = 999;
	c.vocab_size = 1000;
	mgt_gpt_data *d;
	mgt_status st = mgt_gpt_data_open(&c, &d);
	CHECK(st == MGT_OK, "mock data opens");
	if (st)
		return;
	int32_t t[128], l[128], p[128];
	float m[128];
	int ok = 1;
	for (int64_t i = 0; i < 50; i++) {
		ok &= !mgt_gpt_data_sample(d, MGT_SPLIT_TRAIN, i, t, l, m, p);
		for (int q = 0; q < 128; q++)
			ok &= t[q] >= 0 && t[q] < 1000 && l[q] >= 0 && l[q] < 1000;
	}
	CHECK(ok && mgt_gpt_data_len(d, MGT_SPLIT_TRAIN) > 1000, "mock samples: ids below the vocabulary");
	int32_t *len = malloc(sizeof *len * MGT_GPT_MOCK_SEQUENCES);
	mgt_gpt_mock_lengths(len);
	int in_range = 1;
	for (int i = 0; i < MGT_GPT_MOCK_SEQUENCES; i++)
		in_range &= len[i] >= 1 && len[i] < MGT_GPT_MOCK_MAX_LENGTH;
	CHECK(in_range && len[0] != len[1], "mock lengths in [1, 4096) (numpy's values: t2000)");
	free(len);
	mgt_gpt_data_close(d);
	c.eod_id = 1000;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_INPUT, "mock: eod beyond the vocabulary refused");
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void test_errors(void)
{
	const char *missing[] = { path_in("nope") };
	mgt_gpt_data_config c = base_config(missing);
	mgt_gpt_data *d;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_IO && strstr(mgt_err_msg(), "nope") && !d,
	      "missing prefix: %s", mgt_err_msg());

	mgt_idx_writer *w;
	int32_t a[] = { 5, 6, EOD }, b[] = { 7, 5000, EOD };
	mgt_idx_writer_open(&w, path_in("badvocab"), MGT_DT_INT32, 1);
	mgt_idx_writer_add_document(w, a, 3);
	mgt_idx_writer_add_document(w, a, 3);
	mgt_idx_writer_add_document(w, b, 3);
	mgt_idx_writer_finish(w);
	const char *bad[] = { path_in("badvocab") };
	c = base_config(bad);
	c.split = "1,0,0";
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "badvocab.bin: document 2") &&
	      strstr(mgt_err_msg(), "id 5000 is beyond the vocabulary"), "token id >= vocab: %s", mgt_err_msg());
	c.vocab_size = 5001;
	CHECK(!mgt_gpt_data_open(&c, &d), "the same ids fit a vocabulary of 5001");
	mgt_gpt_data_close(d);

	const char *paths[] = { path_in("fetch") };
	c = base_config(paths);
	c.vocab_size = 500;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "beyond the vocabulary"),
	      "ids up to 998, vocabulary 500: refused");
	make_dataset(path_in("ten"), 10, 20, MGT_DT_UINT16);
	const char *ten[] = { path_in("ten") };
	c = base_config(ten);
	c.split = "969,30,1";
	c.num_samples[2] = 5;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "test split") &&
	      strstr(mgt_err_msg(), "without tokens"), "samples from an empty split: %s", mgt_err_msg());
	c.num_samples[2] = 0;
	CHECK(!mgt_gpt_data_open(&c, &d) && mgt_gpt_data_len(d, MGT_SPLIT_TEST) == 0, "no samples from it: fine");
	mgt_gpt_data_close(d);
	c.seed = 1ull << 32;
	CHECK(mgt_gpt_data_open(&c, &d) == MGT_ERR_USAGE, "seed 2^32 refused as numpy does");
}

/* ---- --dump ------------------------------------------------------------------------------------ */

static const char *arg(int argc, char **argv, const char *key, const char *dflt)
{
	size_t n = strlen(key);
	for (int i = 2; i < argc; i++)
		if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
			return argv[i] + n + 1;
	return dflt;
}

static uint64_t count_arg(const char *v)
{
	return !strcmp(v, "none") ? MGT_GPT_ALL : strtoull(v, NULL, 10);
}

static void print_sample(const mgt_gpt_data *d, mgt_split s, int64_t i, int S, int32_t *buf, float *m)
{
	int k;
	int64_t j;
	mgt_status st = mgt_gpt_data_locate(d, s, i, &k, &j);
	if (!st)
		st = mgt_gpt_data_sample(d, s, i, buf, buf + S, m, buf + 2 * S);
	if (st) {
		printf("%s %lld error %s\n", mgt_split_name(s), (long long)i, mgt_err_msg());
		return;
	}
	printf("%s %lld %d %lld |", mgt_split_name(s), (long long)i, k, (long long)j);
	for (int q = 0; q < S; q++)
		printf(" %d", buf[q]);
	printf(" |");
	for (int q = 0; q < S; q++)
		printf(" %d", buf[S + q]);
	printf(" |");
	for (int q = 0; q < S; q++)
		printf(" %d", (int)m[q]);
	printf(" |");
	for (int q = 0; q < S; q++)
		printf(" %d", buf[2 * S + q]);
	printf("\n");
}

static int dump(int argc, char **argv)
{
	char *words[256], *copy = strdup(arg(argc, argv, "data", ""));
	int nw = 0;
	for (char *t = strtok(copy, " \t"); t && nw < 256; t = strtok(NULL, " \t"))
		words[nw++] = t;
	mgt_gpt_data_config c = { 0 };
	char **paths = NULL;
	double *w = NULL;
	c.mock = atoi(arg(argc, argv, "mock", "0"));
	mgt_status st = c.mock ? MGT_OK : mgt_gpt_parse_data_path(nw, (const char *const *)words, &c.n_paths, &paths, &w);
	c.paths = (const char *const *)paths;
	c.weights = w;
	c.split = arg(argc, argv, "split", NULL);
	c.seq_length = atoi(arg(argc, argv, "seq", "8"));
	c.seed = strtoull(arg(argc, argv, "seed", "1234"), NULL, 10);
	c.cache_path = arg(argc, argv, "cache", NULL);
	c.num_samples[0] = count_arg(arg(argc, argv, "train", "0"));
	c.num_samples[1] = count_arg(arg(argc, argv, "valid", "0"));
	c.num_samples[2] = count_arg(arg(argc, argv, "test", "0"));
	c.eod_id = atoi(arg(argc, argv, "eod", "0"));
	c.vocab_size = atoll(arg(argc, argv, "vocab", "0"));
	c.eod_mask_loss = atoi(arg(argc, argv, "eodmask", "0"));
	c.reset_position_ids = atoi(arg(argc, argv, "resetpos", "0"));
	c.keep_partial_valid = atoi(arg(argc, argv, "keeppartial", "0"));
	int64_t K = atoll(arg(argc, argv, "samples", "20"));
	mgt_gpt_data *d = NULL;
	if (!st)
		st = mgt_gpt_data_open(&c, &d);
	if (st) {
		fprintf(stderr, "test_gptdataset: error: %s\n", mgt_err_msg());
	} else {
		if (*mgt_gpt_data_note(d))
			fprintf(stderr, "test_gptdataset: note: %s\n", mgt_gpt_data_note(d));
		int32_t *buf = malloc(sizeof *buf * 3 * (size_t)c.seq_length);
		float *m = malloc(sizeof *m * (size_t)c.seq_length);
		for (int s = 0; s < 3; s++)
			printf("len %s %lld\n", mgt_split_name((mgt_split)s), (long long)mgt_gpt_data_len(d, (mgt_split)s));
		for (int s = 0; s < 3; s++)
			for (int k = 0; mgt_gpt_data_index(d, k, (mgt_split)s) || k < c.n_paths; k++) {
				const mgt_gpt_index *ix = mgt_gpt_data_index(d, k, (mgt_split)s);
				if (ix)
					printf("index %s %d epochs %d separate %d\n", mgt_split_name((mgt_split)s), k,
					       ix->num_epochs, ix->separate_final_epoch);
			}
		for (int s = 0; s < 3; s++) {
			int64_t L = mgt_gpt_data_len(d, (mgt_split)s), last = -1;
			for (int64_t t = 0; L > 0 && t <= K; t++) {
				int64_t i = t < K ? t * L / K : L - 1;
				if (i > last)
					print_sample(d, (mgt_split)s, i, c.seq_length, buf, m);
				last = i > last ? i : last;
			}
		}
		free(buf);
		free(m);
		mgt_gpt_data_close(d);
	}
	for (int i = 0; i < c.n_paths; i++)
		free(paths[i]);
	free(paths);
	free(w);
	free(copy);
	return mgt_exit_code(st);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--dump"))
		return dump(argc, argv);
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-gptdataset.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	make_dataset(path_in("fetch"), 30, 20, MGT_DT_UINT16);
	make_dataset(path_in("other"), 50, 30, MGT_DT_INT32);
	test_mt19937();
	test_vectors();
	test_float_ceil();
	test_split();
	test_data_path();
	test_num_samples();
	test_blend();
	test_npy_md5();
	test_fetch(false, false, false);
	test_fetch(true, true, false);
	test_fetch(true, false, true);
	test_threads();
	test_cache();
	test_blend_open();
	test_mock();
	test_errors();
	return check_finish();
}
