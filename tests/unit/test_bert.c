/* tests/unit/test_bert.c: the BERT model (lib/model family "bert", bert.c) on the CPU in fp32:
 *   - the initial losses: lm near ln(padded vocab), sop near ln 2 (megatron/core/models/bert/bert_model.py);
 *   - the backward against central finite differences of the forward's loss (lm + sop) for
 *     entries of every head tensor, the token-type embedding and a layer weight;
 *   - the loss does not depend on masked-out labels (loss_mask 0), nor on the tokens at padded
 *     positions (their keys are masked), but does on the real tokens'.
 * The forward's loss is a double from fp32 activations: differences of 2e-3 steps on O(0.1)
 * gradients leave about 1e-3 of noise, so entries are compared where |g| > 2e-3 to 5%. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

enum { S = 8, B = 2, T = S * B, H = 32, V = 100 };

static mgt_model_config config(bool binary)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	snprintf(c.family, sizeof c.family, "bert");
	c.bert_binary_head = binary;
	c.num_layers = 2;
	c.hidden_size = H;
	c.num_attention_heads = 4;
	c.seq_length = S;
	c.max_position_embeddings = S;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "learned_absolute");
	snprintf(c.normalization, sizeof c.normalization, "LayerNorm");
	c.norm_epsilon = 1e-5;
	c.add_bias_linear = true;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.2;
	c.vocab_size = V;
	return c;
}

typedef struct {
	int32_t tokens[T], labels[T], pos[T], types[T], is_random[B];
	float mask[T];
	int64_t pad[T];
} batch;

/* Sequence j has 8 - 2j real tokens, then padding (padding_mask 0); a few positions masked for
 * the LM loss; sequence 0 is_random 1, sequence 1 ignored (-1) or 0. */
static void make_batch(batch *bt, bool ignore_second)
{
	for (int i = 0; i < S; i++)
		for (int j = 0; j < B; j++) {
			int t = i * B + j;
			bool real = i < S - 2 * j;
			bt->tokens[t] = real ? (int32_t)((7 * i + 13 * j + 5) % V) : 0;
			bt->pos[t] = i;
			bt->types[t] = i >= 4;
			bt->pad[t] = real;
			bt->mask[t] = real && (i % 3 == 1);
			bt->labels[t] = bt->mask[t] > 0 ? (int32_t)((11 * i + 3 * j) % V) : -1;
		}
	bt->is_random[0] = 1;
	bt->is_random[1] = ignore_second ? -1 : 0;
}

static mgt_microbatch view(const batch *bt)
{
	mgt_microbatch mb = { .tokens = bt->tokens, .labels = bt->labels, .position_ids = bt->pos,
			      .loss_mask = bt->mask, .tokentype_ids = bt->types, .padding_mask = bt->pad,
			      .is_random = bt->is_random };
	return mb;
}

static double loss_of(mgt_model *m, const batch *bt)
{
	mgt_microbatch mb = view(bt);
	double l = NAN;
	if (mgt_model_forward(m, 0, &mb, false, &l)) return NAN;
	return l;
}

static void test_grads(bool binary)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_model_config c = config(binary);
	mgt_model_layout L;
	memset(&L, 0, sizeof L);
	L.mbs = B;
	L.num_stages = 1;
	L.slots = 1;
	L.dp = 1;
	mgt_model *m = NULL;
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = mgt_model_config_finalize(&c, 1);
	if (!st) st = mgt_model_create(&m, &c, &L, be, &ps);
	if (!st) st = mgt_model_init_params(m, 1234);
	CHECK(!st, "tiny BERT (binary head %d) on the CPU: %s", binary, st ? mgt_err_msg() : "created");
	if (st) goto out;
	batch bt;
	make_batch(&bt, !binary);
	mgt_microbatch mb = view(&bt);
	double l0;
	st = mgt_model_forward(m, 0, &mb, true, &l0);
	if (!st) st = mgt_model_backward(m, 0, true, 1.0f);
	CHECK(!st && isfinite(l0), "forward and backward: loss %.4f", l0);
	if (st) goto out;
	double ln_v = log((double)c.padded_vocab_size), want = ln_v + (binary ? log(2.0) : 0);
	CHECK(fabs(l0 - want) < 1.5, "initial loss %.3f near ln(%lld)%s = %.3f", l0, (long long)c.padded_vocab_size,
	      binary ? " + ln 2" : "", want);
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	const char *names[] = { "lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight",
				"output_layer.bias", "embedding.word_embeddings.weight", "embedding.tokentype_embeddings.weight",
				"pooler.dense.weight", "binary_head.weight", "binary_head.bias",
				"encoder.layers.0.self_attention.linear_qkv.weight", "encoder.final_layernorm.weight",
				"encoder.layers.1.mlp.linear_fc1.weight" };
	float *p = mgt_model_params(m), *g = mgt_model_grads(m);
	int checked = 0, bad = 0;
	double worst = 0;
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		const mgt_tensor *x = mgt_tensor_table_find(tt, names[k]);
		if (!x) continue;
		for (size_t e = 0; e < x->numel; e += x->numel / 7 + 1) {
			size_t i = x->offset + e;
			float keep = p[i];
			const float eps = 2e-3f;
			p[i] = keep + eps;
			double up = loss_of(m, &bt);
			p[i] = keep - eps;
			double dn = loss_of(m, &bt);
			p[i] = keep;
			mgt_model_params(m);
			double fd = (up - dn) / (2.0 * eps), an = g[i];
			if (fabs(fd) < 2e-3 && fabs(an) < 2e-3) continue;
			double rel = fabs(fd - an) / fmax(fabs(fd), fabs(an));
			if (rel > worst) worst = rel;
			bad += rel > 0.05;
			checked++;
		}
	}
	CHECK(checked >= 20 && !bad, "gradients = central differences of the loss: %d entries, %d off by more than "
	      "5%% (worst %.2e)", checked, bad, worst);
	batch other = bt;
	for (int t = 0; t < T; t++)
		if (other.mask[t] == 0) other.labels[t] = (other.labels[t] + 37) % V;
	CHECK(loss_of(m, &other) == loss_of(m, &bt), "labels outside loss_mask change nothing");
	batch padded = bt, real = bt;
	for (int t = 0; t < T; t++) {
		if (!bt.pad[t]) padded.tokens[t] = (padded.tokens[t] + 11) % V; /* padding: keys masked, no loss */
		if (bt.pad[t] && t >= B && !bt.mask[t]) real.tokens[t] = (real.tokens[t] + 11) % V;
	}
	CHECK(loss_of(m, &padded) == loss_of(m, &bt), "tokens at padded positions change nothing (keys masked)");
	batch wrong = bt;
	wrong.types[3] = 2;
	mgt_microbatch wb = view(&wrong);
	double lw;
	mgt_status sw = mgt_model_forward(m, 0, &wb, false, &lw);
	CHECK(!binary || (sw == MGT_ERR_INPUT && strstr(mgt_err_msg(), "token 3") && strstr(mgt_err_msg(), "type 2")),
	      "an unknown token type refused naming the token (%s)", binary ? mgt_err_msg() : "no token types");
	double lm0, sop0, lm1, sop1;
	loss_of(m, &bt);
	mgt_model_bert_losses(m, 0, &lm0, &sop0);
	loss_of(m, &real);
	mgt_model_bert_losses(m, 0, &lm1, &sop1);
	CHECK(lm1 != lm0 && (!binary || sop1 != sop0), "the real tokens after [CLS] change the lm loss and the [CLS] "
	      "row's sop loss (%.17g -> %.17g): attention is bidirectional", sop0, sop1);
out:
	mgt_model_free(m);
	mgt_parallel_free(&ps);
	mgt_backend_destroy(be);
}

int main(void)
{
	test_grads(true);
	test_grads(false);
	return check_finish();
}
