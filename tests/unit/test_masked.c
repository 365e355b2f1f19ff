/* Unit tests for the masked datasets' primitives (lib/data/masked*.c, megatron/core/datasets/helpers.cpp build_mapping,
 * §1.5, §1.6): numpy's legacy RandomState draws against golden values that
 * tests/unit/masked_rng_ref.py prints with /usr/bin/python3's numpy at test time (crafted MT
 * states for the boundary uniforms included); std::mt19937 and std::mt19937_64 against a small
 * C++ <random> program compiled with g++ at test time and the C++ standard's 10000th outputs;
 * properties and errors of the sample index and the samples. The comparison of whole sample
 * indices and samples with an independent reference is tests/cli/t2100-maskeddataset.sh.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on any failure. */
#include "data/data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* ---- numpy golden values ------------------------------------------------------------------- */

/* A state whose next random() is k / 2^53: key[0..1] untempered, pos 0 (as the reference). */
static uint32_t untemper(uint32_t y)
{
	y ^= y >> 18;
	y ^= (y << 15) & 0xEFC60000u;
	uint32_t x = y;
	for (int i = 0; i < 5; i++)
		x = y ^ ((x << 7) & 0x9D2C5680u);
	y = x;
	for (int i = 0; i < 3; i++)
		x = y ^ (x >> 11);
	return x;
}

static void crafted(mgt_mt19937 *rs, uint64_t k53)
{
	memset(rs, 0, sizeof *rs);
	rs->key[0] = untemper((uint32_t)(k53 >> 26) << 5);
	rs->key[1] = untemper((uint32_t)(k53 & ((1u << 26) - 1)) << 6);
	rs->pos = 0;
}

static void put_hex(char *out, size_t cap, double v)
{
	snprintf(out, cap, "%a", v);
}

/* The C side of one reference line's left-hand side, written into out. */
static int compute(const char *name, const char *args, char *out, size_t cap)
{
	mgt_mt19937 rs;
	unsigned long long seed = 0, a = 0;
	double pr = 0;
	char buf[64];
	size_t n = 0;
	out[0] = 0;
	if (!strcmp(name, "raw") || !strcmp(name, "random") || !strcmp(name, "shuffle")) {
		sscanf(args, "%llu %llu", &seed, &a);
		mgt_mt19937_seed(&rs, (uint32_t)seed);
		if (!strcmp(name, "shuffle")) {
			int32_t x[64];
			for (unsigned i = 0; i < a; i++)
				x[i] = (int32_t)i;
			mgt_mt19937_shuffle(&rs, x, a, 4);
			for (unsigned i = 0; i < a; i++)
				n += (size_t)snprintf(out + n, cap - n, "%s%d", i ? " " : "", x[i]);
			return 1;
		}
		for (int i = 0; i < 5; i++) {
			if (!strcmp(name, "raw"))
				snprintf(buf, sizeof buf, "%u", mgt_mt19937_next32(&rs));
			else
				put_hex(buf, sizeof buf, mgt_mt19937_random(&rs));
			n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", buf);
		}
		return 1;
	}
	if (!strcmp(name, "randint")) {
		sscanf(args, "%llu %llu", &seed, &a);
		mgt_mt19937_seed(&rs, (uint32_t)seed);
		static mgt_mt19937 keep;   /* the reference draws all bounds (from 1 up) from one state */
		if (a == 1)
			keep = rs;
		for (int i = 0; i < 4; i++)
			n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? " " : "",
					      mgt_mt19937_randint(&keep, 0, (int64_t)a));
		return 1;
	}
	if (!strcmp(name, "choice") || !strcmp(name, "geometric")) {
		sscanf(args, "%llu %lf", &seed, &pr);
		mgt_mt19937_seed(&rs, (uint32_t)seed);
		double p[MGT_CHOICE_MAX];
		int max = (int)pr;
		if (!strcmp(name, "choice"))
			mgt_masked_ngram_probs(max, p);
		for (int i = 0; i < 20; i++)
			n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? " " : "",
					      !strcmp(name, "choice") ? 1 + mgt_mt19937_choice(&rs, p, max)
								      : mgt_mt19937_geometric(&rs, pr));
		return 1;
	}
	if (!strcmp(name, "sum") || !strcmp(name, "ngram_p")) {
		sscanf(args, "%llu", &a);
		double w[MGT_CHOICE_MAX];
		if (!strcmp(name, "sum")) {
			for (unsigned i = 0; i < a; i++)
				w[i] = 1.0 / (double)(i + 1);
			put_hex(out, cap, mgt_numpy_sum(w, (int)a));
			return 1;
		}
		mgt_masked_ngram_probs((int)a, w);
		for (unsigned i = 0; i < a; i++) {
			put_hex(buf, sizeof buf, w[i]);
			n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", buf);
		}
		return 1;
	}
	if (!strcmp(name, "choice_at") || !strcmp(name, "geometric_at")) {
		sscanf(args, "%llu", &a);
		crafted(&rs, a);
		double p[3];
		mgt_masked_ngram_probs(3, p);
		snprintf(out, cap, "%" PRId64, !strcmp(name, "choice_at") ? 1 + mgt_mt19937_choice(&rs, p, 3)
									 : mgt_mt19937_geometric(&rs, 0.2));
		return 1;
	}
	return 0;
}

/* Python prints floats as float.hex() ("0x1.1745d1745d174p-1"); C's %a may differ in form:
 * compare such tokens as numbers. */
static int same_values(const char *a, const char *b)
{
	char x[2048], y[2048];
	snprintf(x, sizeof x, "%s", a);
	snprintf(y, sizeof y, "%s", b);
	char *sa, *sb, *p = strtok_r(x, " ", &sa), *q = strtok_r(y, " ", &sb);
	for (; p && q; p = strtok_r(NULL, " ", &sa), q = strtok_r(NULL, " ", &sb))
		if (strchr(p, 'x') ? strtod(p, NULL) != strtod(q, NULL) : strcmp(p, q) != 0)
			return 0;
	return !p && !q;
}

static void test_numpy_golden(void)
{
	if (access("/usr/bin/python3", X_OK) != 0) {
		printf("# skip: no /usr/bin/python3 for tests/unit/masked_rng_ref.py\n");
		return;
	}
	FILE *f = popen("/usr/bin/python3 tests/unit/masked_rng_ref.py 2>&1", "r");
	char line[4096], mine[2048];
	int lines = 0, bad = 0, boundary = 0;
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *eq = strstr(line, " = "), *sp = strchr(line, ' ');
		if (!eq || !sp || sp > eq) {
			CHECK(0, "reference line: %s", line);
			continue;
		}
		*eq = 0;
		*sp = 0;
		lines++;
		boundary += strstr(line, "_at") != NULL;
		if (!compute(line, sp + 1, mine, sizeof mine) || !same_values(mine, eq + 3)) {
			if (bad++ < 5)
				printf("# %s %s: numpy %s, mgt %s\n", line, sp + 1, eq + 3, mine);
		}
	}
	int rc = f ? pclose(f) : -1;
	CHECK(rc == 0 && lines >= 100, "numpy golden values: %d lines from masked_rng_ref.py (exit %d)", lines, rc);
	CHECK(bad == 0, "random/randint/choice/geometric/shuffle/sum equal numpy 1.24 on 5 seeds and %d crafted "
	      "boundary uniforms (%d mismatches)", boundary, bad);
}

/* §1.6 figures that need no reference. */
static void test_known(void)
{
	mgt_mt19937 rs;
	mgt_mt19937_seed(&rs, 1234);
	uint32_t a = mgt_mt19937_next32(&rs), b = mgt_mt19937_next32(&rs), c = mgt_mt19937_next32(&rs);
	CHECK(a == 822569775u && b == 2137449171u && c == 2671936806u, "RandomState(1234) raw outputs (§1.6)");
	mgt_mt19937_64 g;
	mgt_mt19937_64_seed(&g, 1235);
	uint64_t first = mgt_mt19937_64_next(&g);
	CHECK(first == 12475983374653888083ull, "std::mt19937_64(1235) first output (got %" PRIu64 ")", first);
	mgt_mt19937_64_seed(&g, 5489);
	uint64_t v = 0;
	for (int i = 0; i < 10000; i++)
		v = mgt_mt19937_64_next(&g);
	CHECK(v == 9981545732273789042ull, "std::mt19937_64 default seed: 10000th output (C++ [rand.predef])");
	crafted(&rs, 3242591731706757ull);
	CHECK(mgt_mt19937_geometric(&rs, 0.2) == 3, "geometric(0.2) at u = 3242591731706757/2^53 is 3 (log(1-p))");
}

/* std::mt19937 / std::mt19937_64 from g++ against mgt, several seeds, 1000 outputs each. */
static void test_cpp_random(void)
{
	char src[600], bin[600], cmd[1400];
	snprintf(src, sizeof src, "%s", path_in("mt.cc"));
	snprintf(bin, sizeof bin, "%s", path_in("mt"));
	FILE *f = fopen(src, "w");
	if (!f)
		return;
	fputs("#include <random>\n#include <cstdio>\nint main(){unsigned long long s[]={1,1235,2,4294967296ull,"
	      "18446744073709551615ull};\nfor(auto x:s){std::mt19937 a((unsigned)x);std::mt19937_64 b(x);"
	      "for(int i=0;i<1000;i++){unsigned long long u=a(),v=b();if(i%97==0||i==999)std::printf(\"%llu %d %llu %llu\\n\","
	      "x,i,u,v);}}}\n", f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "g++ -O1 -o '%s' '%s' 2>/dev/null", bin, src);
	if (system(cmd) != 0) {
		printf("# skip: g++ cannot build the std::mt19937_64 reference\n");
		return;
	}
	FILE *p = popen(bin, "r");
	unsigned long long seed, u, v;
	int i, lines = 0, bad = 0;
	while (p && fscanf(p, "%llu %d %llu %llu", &seed, &i, &u, &v) == 4) {
		mgt_mt19937 a;
		mgt_mt19937_64 b;
		mgt_mt19937_seed(&a, (uint32_t)seed);
		mgt_mt19937_64_seed(&b, seed);
		uint32_t x = 0;
		uint64_t y = 0;
		for (int k = 0; k <= i; k++)
			x = mgt_mt19937_next32(&a), y = mgt_mt19937_64_next(&b);
		bad += x != u || y != v;
		lines++;
	}
	if (p)
		pclose(p);
	CHECK(lines == 5 * 12 && bad == 0, "std::mt19937 and std::mt19937_64 (g++ <random>): %d outputs of 5 "
	      "seeds, %d differ", lines, bad);
}

/* ---- the sample index ---------------------------------------------------------------------- */

/* 6 documents: sentence lengths below; doc 2 is empty, doc 3 one sentence, doc 4 has a
 * 600-token sentence (long), doc 5 a single 700-token sentence (never long). */
static const int32_t sizes[] = { 10, 20, 5, 40, 3, 3, 30, /* doc 1 */ 7, 9, 11, 13,
				 /* doc 3 */ 50, /* doc 4 */ 4, 600, 4, /* doc 5 */ 700 };
static const int64_t docs[] = { 0, 7, 11, 11, 12, 15, 16 };

static mgt_masked_mapping mapping(uint64_t max_samples, int min_sent, double short_p)
{
	return (mgt_masked_mapping){ .docs = docs, .n_docs = 6, .sizes = sizes, .n_sizes = 16,
				     .max_num_samples = max_samples, .max_seq_length = 29,
				     .short_seq_prob = short_p, .seed = 1234, .min_num_sent = min_sent };
}

/* Every row is a run of sentences inside one used document; each used document is covered
 * exactly once per epoch. */
static int rows_cover(const mgt_masked_index *ix, int min_sent)
{
	int cover[16] = { 0 };
	for (int64_t k = 0; k < ix->n; k++) {
		uint64_t r[3];
		mgt_masked_index_row(ix, k, r);
		int d = 0;
		while (docs[d + 1] <= (int64_t)r[0])
			d++;
		if (r[1] <= r[0] || (int64_t)r[1] > docs[d + 1] || r[2] < 2 || r[2] > 29 ||
		    (int64_t)(r[1] - r[0]) < (min_sent == 2 && docs[d + 1] - docs[d] >= 2 ? 2 : 1))
			return 0;
		for (uint64_t s = r[0]; s < r[1]; s++)
			cover[s]++;
	}
	for (int s = 0; s < 16; s++) {
		bool used = !(s >= 12 && s < 15) && !(min_sent == 2 && (s == 11 || s == 15));
		if (cover[s] != (used ? ix->epochs : 0))
			return 0;
	}
	return 1;
}

static void test_index(void)
{
	mgt_masked_index ix;
	mgt_masked_mapping m = mapping(MGT_GPT_ALL, 2, 0.1);
	mgt_status st = mgt_masked_index_build(&m, &ix);
	CHECK(!st && ix.epochs == 1 && !ix.u64 && ix.n > 0 && rows_cover(&ix, 2),
	      "binary head: one epoch covers docs 0 and 1 only (empty, one-sentence, long skipped): %lld rows",
	      (long long)ix.n);
	mgt_masked_index_free(&ix);
	m = mapping(MGT_GPT_ALL, 1, 0.1);
	st = mgt_masked_index_build(&m, &ix);
	CHECK(!st && rows_cover(&ix, 1), "no binary head: one-sentence docs too: %lld rows", (long long)ix.n);
	mgt_masked_index_free(&ix);
	m = mapping(40, 1, 0.5);
	mgt_masked_index cnt, more;
	st = mgt_masked_index_count(&m, &cnt);
	st = st ? st : mgt_masked_index_build(&m, &ix);
	CHECK(!st && cnt.n == ix.n && cnt.epochs == ix.epochs && ix.n >= 40 && ix.epochs > 1 && rows_cover(&ix, 1),
	      "whole epochs until 40 samples: %lld rows in %d epochs", (long long)ix.n, ix.epochs);
	m.max_num_samples = (uint64_t)ix.n;
	st = mgt_masked_index_count(&m, &cnt);
	m.max_num_samples = (uint64_t)ix.n + 1;
	st = st ? st : mgt_masked_index_count(&m, &more);
	CHECK(!st && cnt.n == ix.n && cnt.epochs == ix.epochs && more.epochs == ix.epochs + 1,
	      "asking for exactly those rows gives them; one more adds an epoch (%d)", more.epochs);
	mgt_masked_index_free(&ix);
	m = mapping(0, 1, 0.1);
	CHECK(!mgt_masked_index_build(&m, &ix) && ix.n == 0 && ix.epochs == 0, "0 samples requested: 0 rows");
	mgt_masked_index_free(&ix);
	static const int64_t lone[] = { 11, 12, 15, 16 };
	m = mapping(10, 2, 0.1);
	m.docs = lone, m.n_docs = 3;
	CHECK(mgt_masked_index_build(&m, &ix) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "give no sample"),
	      "no document can give a sample: an error, not 2^31 epochs (%s)", mgt_err_msg());
	m = mapping(10, 2, 0.1);
	m.seed = 0;
	CHECK(mgt_masked_index_build(&m, &ix) == MGT_ERR_USAGE, "seed 0 refused (build_mapping asserts seed > 0)");
	m = mapping(10, 2, 1.5);
	CHECK(mgt_masked_index_build(&m, &ix) == MGT_ERR_USAGE, "short_seq_prob 1.5 refused");
}

/* ---- samples ------------------------------------------------------------------------------- */

/* A 12-token vocabulary: 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK], 4-7 words, 8-9 "##" pieces,
 * 10-11 sentinels. */
static const uint8_t subword[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0 };
static const int32_t sentinels[2] = { 10, 11 };
static const mgt_masked_vocab vocab = { .size = 12, .is_subword = subword, .cls = 1, .sep = 2, .mask = 3,
					.pad = 0, .bos = 1, .eos = 2, .eod = 2, .sentinels = sentinels,
					.n_sentinels = 2 };

static void test_samples(void)
{
	mgt_masked_vocab v = vocab;
	CHECK(mgt_masked_pad_id(&v, false) == 0, "pad 0 does not collide with eos/eod 2");
	v.pad = 2;
	CHECK(mgt_masked_pad_id(&v, false) == -1 && mgt_masked_pad_id(&v, true) == 2,
	      "pad = eod: -1 unless ambiguous pads are allowed");
	int32_t sp[] = { 0, 5, 4 };
	v.specials = sp, v.n_specials = 3, v.pad = 4;
	CHECK(mgt_masked_pad_id(&v, false) == -1, "pad in special_tokens_dict: -1");
	v.pad = 2;
	CHECK(mgt_masked_pad_id(&v, false) == 2, "specials given: eos/eod not checked");

	int32_t ids[40];
	for (int i = 0; i < 40; i++)
		ids[i] = 4 + (i * 7) % 6;  /* words and ## pieces */
	int64_t sl[3] = { 15, 10, 15 };
	int64_t text[64], types[64], labels[64], pm[64], lm[64];
	mgt_bert_sample b = { text, types, labels, pm, lm, 0, 0, 0, 0 };
	mgt_masked_params p = { MGT_MASKED_BERT, 64, 0, true, 0.15, 1234, &vocab, 0 };
	int ok = 1;
	for (int64_t idx = 0; idx < 50 && ok; idx++) {
		ok &= !mgt_masked_bert_make(&p, idx, ids, 40, sl, 3, 20 + idx % 30, &b);
		int64_t sum = 0;
		for (int i = 0; i < 64; i++)
			sum += lm[i];
		ok &= sum == b.n_masked && b.n_masked <= b.n_maskings && b.n_masked >= b.n_maskings - 3;
	}
	CHECK(ok, "BERT: sum(loss_mask) = masked <= n_maskings, within one 3-gram of it (50 samples)");
	CHECK(mgt_masked_bert_make(&p, 0, ids, 15, sl, 1, 20, &b) == MGT_ERR_INPUT &&
	      strstr(mgt_err_msg(), "--bert-no-binary-head"), "BERT: one sentence with the binary head: an error naming "
	      "--bert-no-binary-head");
	ids[3] = 12;
	CHECK(mgt_masked_bert_make(&p, 0, ids, 40, sl, 3, 20, &b) == MGT_ERR_INPUT && strstr(mgt_err_msg(), "id 12"),
	      "an id outside the vocabulary is an error naming it");
	ids[3] = 4;

	int64_t enc[64], em[64], dec[8], dm[8], lab[8], lmask[8];
	mgt_t5_sample t = { enc, em, dec, dm, lab, lmask, 0, 0, 0, 0 };
	mgt_masked_params q = { MGT_MASKED_T5, 64, 8, false, 0.15, 7, &vocab, 0 };
	mgt_status st = MGT_OK;
	int64_t idx = 0;
	for (; idx < 200 && !(st = mgt_masked_t5_make(&q, idx, ids, 40, 40, &t)); idx++)
		;
	CHECK(st == MGT_ERR_INPUT && (strstr(mgt_err_msg(), "--decoder-seq-length") || strstr(mgt_err_msg(), "sentinel")),
	      "T5: a decoder input longer than --decoder-seq-length (8) or too few sentinels is an error: %s",
	      mgt_err_msg());
	int64_t dec2[64], dm2[64], lab2[64], lm2[64];
	mgt_t5_sample t2 = { enc, em, dec2, dm2, lab2, lm2, 0, 0, 0, 0 };
	q.decoder_seq_length = 64;
	ok = 1;
	int spans = 0;
	for (idx = 0; idx < 50 && ok; idx++) {
		if ((st = mgt_masked_t5_make(&q, idx, ids, 40, 10 + idx % 40, &t2)))
			ok = st == MGT_ERR_INPUT && strstr(mgt_err_msg(), "sentinel");
		int n_sent = 0, n_lab = 0;
		for (int i = 0; i < 64 && !st; i++)
			n_sent += enc[i] >= 10, n_lab += lm2[i];
		if (!st)
			ok &= n_sent == t2.n_spans && n_lab == 1 + t2.n_spans + t2.n_masked && lab2[n_lab - 1] == vocab.eos;
		spans += st ? 0 : (int)t2.n_spans;
	}
	CHECK(ok && spans > 0, "T5: one sentinel per span in the encoder, loss on 1 + spans + masked, labels end "
	      "in eos (%d spans)", spans);
}

/* mgt_masked_vocab_from_tok over a vocabulary-only WordPiece tokenizer: size with the sentinels,
 * "##" pieces, the specials (bos = [CLS], eos = eod = [SEP]), no specials list. */
static void test_vocab_from_tok(void)
{
	FILE *f = fopen(path_in("vocab.txt"), "w");
	if (f) {
		fputs("[PAD]\n[CLS]\n[SEP]\n[MASK]\na\n##b\n#c\n", f);
		fclose(f);
	}
	mgt_tok *tok = NULL;
	mgt_masked_vocab v;
	uint8_t *sub = NULL;
	mgt_status st = mgt_tok_load_wordpiece_vocab(&tok, path_in("vocab.txt"), 2);
	CHECK(!st && mgt_masked_vocab_from_tok(tok, &v, &sub) == MGT_OK, "vocab view: built");
	if (!st && sub) {
		CHECK(v.size == 9 && v.is_subword == sub && !sub[4] && sub[5] && !sub[6] && !sub[7] && !sub[8],
		      "vocab view: size 7 + 2 sentinels, only ## pieces are subwords");
		CHECK(v.cls == 1 && v.sep == 2 && v.mask == 3 && v.pad == 0 && v.bos == 1 && v.eos == 2 && v.eod == 2 &&
		      v.n_specials == 0 && v.n_sentinels == 2 && v.sentinels[0] == 7 && v.sentinels[1] == 8,
		      "vocab view: specials and sentinels");
		CHECK(mgt_masked_pad_id(&v, false) == 0, "vocab view: [PAD] is the pad");
	}
	free(sub);
	mgt_tok_free(tok);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-masked.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_known();
	test_numpy_golden();
	test_cpp_random();
	test_index();
	test_samples();
	test_vocab_from_tok();
	return check_finish();
}
