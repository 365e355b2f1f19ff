/* tests/unit/test_t5.c: T5's encoder-decoder (lib/model family "t5", t5.c, infer.c) on the CPU in
 * fp32, with learned absolute positions and with relative ones (the encoder's bias in attn_forward,
 * the decoder's in attn_decode):
 *   - the inference path (mgt_model_encode once, then the decoder against a key/value cache and the
 *     cross-attention keys and values) fed the batch's decoder input whole gives the training
 *     forward's logits (1e-5 of their largest);
 *   - greedy generation with the caches, one token a sequence a call, equals recomputing the whole
 *     decoder prefix in one call after a fresh encoding at every step: the same tokens, logits
 *     within 1e-5;
 *   - the encoder's padded positions change nothing (their keys are masked in both attentions),
 *     its real tokens do;
 *   - misuse refused: a decoder feed before an encoding, tokens that are not rows of every
 *     sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

enum { S = 12, SD = 6, B = 2, TE = S * B, TD = SD * B, H = 32, V = 100 };

static mgt_model_config config(const char *pe)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	snprintf(c.family, sizeof c.family, "t5");
	c.num_layers = 2;
	c.hidden_size = H;
	c.num_attention_heads = 4;
	c.num_query_groups = 4;
	c.seq_length = S;
	c.decoder_seq_length = SD;
	c.max_position_embeddings = S;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "%s", pe);
	snprintf(c.normalization, sizeof c.normalization, "LayerNorm");
	c.norm_epsilon = 1e-5;
	c.add_bias_linear = true;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.2;
	c.vocab_size = V;
	c.relative_attention_num_buckets = 8; /* small: distances up to 11 fall in several log buckets */
	c.relative_attention_max_distance = 16;
	return c;
}

typedef struct {
	int32_t enc[TE], epos[TE], dec[TD], dpos[TD], labels[TD];
	int64_t pad[TE];
	uint8_t mask[TE];
	float lmask[TD];
} batch;

/* Sequence j has S - 3j real encoder tokens, then padding; decoder input and labels whole. */
static void make_batch(batch *bt)
{
	for (int i = 0; i < S; i++)
		for (int j = 0; j < B; j++) {
			int t = i * B + j;
			bool real = i < S - 3 * j;
			bt->enc[t] = real ? (int32_t)((7 * i + 13 * j + 5) % V) : 0;
			bt->epos[t] = i;
			bt->pad[t] = real;
			bt->mask[t] = real;
		}
	for (int i = 0; i < SD; i++)
		for (int j = 0; j < B; j++) {
			int t = i * B + j;
			bt->dec[t] = (int32_t)((5 * i + 17 * j + 3) % V);
			bt->dpos[t] = i;
			bt->labels[t] = (int32_t)((3 * i + 11 * j + 1) % V);
			bt->lmask[t] = 1;
		}
}

/* Largest |a - b| over the largest |b|. */
static double maxrel(const float *a, const float *b, size_t n)
{
	double d = 0, mx = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		mx = fmax(mx, fabs((double)b[i]));
	}
	return d / (mx > 0 ? mx : 1);
}

static int32_t argmax(const float *x, int n)
{
	int best = 0;
	for (int v = 1; v < n; v++)
		if (x[v] > x[best]) best = v;
	return best;
}

/* Encode, then feed n rows of decoder tokens (toks [n B]) in one call: the last row's logits. */
static mgt_status prefix_logits(mgt_model *m, mgt_kv_cache *kv, const batch *bt, const int32_t *toks, int n, int Vp,
				float *out)
{
	int32_t seq[TD], pos[TD], rows[B];
	for (int t = 0; t < n * B; t++) seq[t] = t % B, pos[t] = t / B;
	for (int j = 0; j < B; j++) rows[j] = (n - 1) * B + j;
	(void)Vp;
	mgt_status st = mgt_model_encode(m, kv, S, bt->enc, bt->mask);
	return st ? st : mgt_model_infer(m, kv, n * B, toks, seq, pos, B, rows, out);
}

static void test_t5(const char *pe)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_model_config c = config(pe);
	printf("# T5 with %s positions\n", pe);
	mgt_model_layout L;
	memset(&L, 0, sizeof L);
	L.mbs = B;
	L.num_stages = 1;
	L.slots = 1;
	L.dp = 1;
	mgt_model *m = NULL, *mi = NULL;
	mgt_kv_cache *kv = NULL;
	float *lt = NULL, *li = NULL, *inc = NULL, *re = NULL;
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = mgt_model_config_finalize(&c, 1);
	if (!st) st = mgt_model_create(&m, &c, &L, be, &ps);
	if (!st) st = mgt_model_init_params(m, 1234);
	if (!st) st = mgt_model_create_infer(&mi, &c, be, &ps);
	CHECK(!st, "tiny T5 on the CPU, training and inference models: %s", st ? mgt_err_msg() : "created");
	if (st) goto out;
	const int Vp = (int)c.padded_vocab_size;
	memcpy(mgt_model_params(mi), mgt_model_params(m), mgt_model_tensors(m)->buf_numel * sizeof(float));
	batch bt;
	make_batch(&bt);
	mgt_microbatch mb = { .tokens = bt.enc, .labels = bt.labels, .position_ids = bt.epos, .loss_mask = bt.lmask,
			      .padding_mask = bt.pad, .dec_tokens = bt.dec, .dec_position_ids = bt.dpos };
	lt = malloc((size_t)TD * Vp * sizeof *lt);
	li = malloc((size_t)TD * Vp * sizeof *li);
	inc = malloc((size_t)SD * B * Vp * sizeof *inc);
	re = malloc((size_t)B * Vp * sizeof *re);
	double loss;
	st = mgt_model_step(m, &mb, false, 0.0f, &loss, lt, NULL);
	CHECK(!st && isfinite(loss), "training forward: loss sum %.4f over %d labels", loss, TD);
	if (!st) st = mgt_kv_cache_create(&kv, mi, B, SD);
	if (st) goto out;

	int32_t seq[TD], rows[TD];
	for (int t = 0; t < TD; t++) seq[t] = t % B, rows[t] = t;
	int32_t one[1] = { 0 }, pos1[1] = { 0 }, rw[1] = { 0 };
	st = mgt_model_infer(mi, kv, 1, one, one, pos1, 1, rw, li);
	CHECK(st == MGT_ERR_USAGE && strstr(mgt_err_msg(), "mgt_model_encode"), "a decoder feed before an encoding refused: %s",
	      mgt_err_msg());
	st = mgt_model_encode(mi, kv, S, bt.enc, bt.mask);
	if (!st) st = mgt_model_infer(mi, kv, TD, bt.dec, seq, bt.dpos, TD, rows, li);
	double e = st ? INFINITY : maxrel(li, lt, (size_t)TD * Vp);
	CHECK(!st && e < 1e-5, "encode + the decoder input whole = the training forward's logits: %.2e (%s)", e,
	      st ? mgt_err_msg() : "ok");
	st = mgt_model_infer(mi, kv, 1, one, one, pos1, 1, rw, li);
	CHECK(st == MGT_ERR_USAGE && strstr(mgt_err_msg(), "rows of"), "a feed that is not rows of every sequence refused: %s",
	      mgt_err_msg());

	/* greedy, one token a sequence a call; the decoder input starts with token 1 */
	int32_t toks[TD], pos[B];
	st = mgt_model_encode(mi, kv, S, bt.enc, bt.mask);
	for (int j = 0; j < B; j++) toks[j] = 1;
	for (int k = 0; !st && k < SD; k++) {
		for (int j = 0; j < B; j++) pos[j] = k;
		st = mgt_model_infer(mi, kv, B, toks + k * B, seq, pos, B, rows, inc + (size_t)k * B * Vp);
		for (int j = 0; !st && k + 1 < SD && j < B; j++) toks[(k + 1) * B + j] = argmax(inc + ((size_t)k * B + j) * Vp, V);
	}
	int same = 0;
	double worst = 0;
	for (int k = 0; !st && k < SD; k++) {
		st = prefix_logits(mi, kv, &bt, toks, k + 1, Vp, re);
		if (st) break;
		worst = fmax(worst, maxrel(inc + (size_t)k * B * Vp, re, (size_t)B * Vp));
		for (int j = 0; j < B; j++) same += argmax(re + (size_t)j * Vp, V) == argmax(inc + ((size_t)k * B + j) * Vp, V);
	}
	CHECK(!st && same == SD * B && worst < 1e-5, "generation with the caches = recomputing the prefix: %d of %d tokens, "
	      "logits within %.2e (%s)", same, SD * B, worst, st ? mgt_err_msg() : "ok");

	/* the encoder's padding is invisible, its real tokens are not */
	batch padded = bt, real = bt;
	for (int t = 0; t < TE; t++)
		if (!bt.mask[t]) padded.enc[t] = (padded.enc[t] + 11) % V;
	real.enc[2 * B + 1] = (real.enc[2 * B + 1] + 11) % V;
	float *a = malloc((size_t)B * Vp * sizeof *a);
	st = prefix_logits(mi, kv, &bt, bt.dec, SD, Vp, re);
	if (!st) st = prefix_logits(mi, kv, &padded, bt.dec, SD, Vp, a);
	CHECK(!st && !memcmp(a, re, (size_t)B * Vp * sizeof *a), "the encoder's padded tokens change nothing");
	if (!st) st = prefix_logits(mi, kv, &real, bt.dec, SD, Vp, a);
	CHECK(!st && memcmp(a + Vp, re + Vp, (size_t)Vp * sizeof *a) && !memcmp(a, re, (size_t)Vp * sizeof *a),
	      "a real encoder token of sequence 1 changes its logits only");
	free(a);
out:
	free(lt), free(li), free(inc), free(re);
	mgt_kv_cache_free(kv);
	mgt_model_free(mi);
	mgt_model_free(m);
	mgt_parallel_free(&ps);
	mgt_backend_destroy(be);
}

int main(void)
{
	test_t5("learned_absolute");
	test_t5("relative");
	return check_finish();
}
