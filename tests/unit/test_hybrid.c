/* Unit tests for lib/model/hybrid.c: Megatron's hybrid layer allocation from ratios against the
 * patterns its code gives (the facts sheet's derived examples: (10, 0.2, 0) and the 56-layer
 * 8B pattern of Megatron's examples/mamba/train.sh from (56, 0.08, 0.5)), Python's round-half-
 * even counts, and --hybrid-layer-pattern's checks.  And the hybrid model (one symbol per layer;
 * lib/model/layer_mamba.c): a "*-" hybrid equals a 1-layer GPT with the same weights bit for bit
 * (loss and every gradient); the Mamba layer's gradients against central differences of the
 * loss; the pipeline segments; the parameter count; the refusals.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on failure. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

static int64_t count(const char *p, char c)
{
	int64_t n = 0;
	for (; *p; p++) n += *p == c;
	return n;
}

static void t_ratios(void)
{
	char p[128];
	CHECK(!mgt_hybrid_pattern_from_ratios(10, 0.2, 0.0, p) && !strcmp(p, "MMM*MM*MMM"), "(10, 0.2, 0): %s", p);
	const char *nemotron8b = "M-M-M--M-M*-M-M-M-M--M*-M-M-M-M-M*--M-M-M-M-M*-M--M-M-M-";
	CHECK(!mgt_hybrid_pattern_from_ratios(56, 0.08, 0.5, p) && !strcmp(p, nemotron8b), "(56, 0.08, 0.5): %s", p);
	/* 10 x 0.25 = 2.5: Python's round gives 2 (ties to even), C's round() 3 */
	CHECK(!mgt_hybrid_pattern_from_ratios(10, 0.25, 0.0, p) && count(p, '*') == 2, "(10, 0.25, 0): 2 attention layers: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(14, 0.25, 0.0, p) && count(p, '*') == 4, "(14, 0.25, 0): 3.5 rounds to 4: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(8, 0.0, 0.0, p) && !strcmp(p, "MMMMMMMM"), "no ratios: all Mamba: %s", p);
	CHECK(!mgt_hybrid_pattern_from_ratios(24, 0.125, 0.25, p) && count(p, '*') == 3 && count(p, '-') == 6 &&
	      count(p, 'M') == 15 && strlen(p) == 24, "(24, 0.125, 0.25): 3 attention, 6 MLP, 15 Mamba: %s", p);
	CHECK(mgt_hybrid_pattern_from_ratios(8, 0.6, 0.6, p) == MGT_ERR_USAGE, "ratios summing past 1 refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_from_ratios(0, 0.1, 0.0, p) == MGT_ERR_USAGE, "no layers refused");
}

static void t_check(void)
{
	int64_t n = 0;
	int seg = 0;
	CHECK(!mgt_hybrid_pattern_check("M*-E", 1, &n, &seg) && n == 4 && seg == 1, "M*-E: 4 layers, 1 segment");
	CHECK(!mgt_hybrid_pattern_check("M*|M-|ME|M*", 2, &n, &seg) && n == 8 && seg == 4,
	      "4 segments over PP 2 (virtual stages): 8 layers");
	CHECK(mgt_hybrid_pattern_check("M*|M-|ME", 2, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "3 pipeline"),
	      "3 segments over PP 2 refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("M*G-", 1, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "character 3"),
	      "G refused naming the character: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("M*M*/MM/MM", 1, &n, &seg) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "multi-token"),
	      "the MTP suffix refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_pattern_check("||", 1, &n, &seg) == MGT_ERR_USAGE, "no layer refused: %s", mgt_err_msg());
}

/* A tiny decoder: h 32, 4 heads (2 query groups), RMSNorm, no positions, no biases, untied;
 * hybrid with pattern p (NULL: GPT of `layers` layers), Mamba head dim 8, state 8, 2 groups. */
static mgt_model_config tiny(const char *p, int64_t layers)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	c.num_layers = layers;
	c.hidden_size = 32;
	c.ffn_hidden_size = 64;
	c.num_attention_heads = 4;
	c.group_query_attention = true;
	c.num_query_groups = 2;
	c.seq_length = c.max_position_embeddings = 24;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "none");
	snprintf(c.normalization, sizeof c.normalization, "RMSNorm");
	c.rotary_percent = 1.0;
	c.norm_epsilon = 1e-5;
	c.untie_embeddings_and_output_weights = true;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.02;
	c.vocab_size = 61;
	c.mamba_head_dim = c.mamba_state_dim = 8;
	c.mamba_num_groups = 2;
	if (p) {
		snprintf(c.family, sizeof c.family, "hybrid");
		snprintf(c.hybrid_layer_pattern, sizeof c.hybrid_layer_pattern, "%s", p);
	}
	return c;
}

enum { MB = 2, S = 24, TT = MB * S };
typedef struct { int32_t tok[TT], lab[TT], pos[TT]; float mask[TT]; } batch;

static mgt_microbatch make_batch(batch *bt)
{
	for (int t = 0; t < TT; t++) {
		bt->tok[t] = (int32_t)((t * 7 + 3) % 61);
		bt->lab[t] = (int32_t)((t * 11 + 5) % 61);
		bt->pos[t] = t / MB;
		bt->mask[t] = t % 5 ? 1.0f : 0.0f;
	}
	return (mgt_microbatch){ .tokens = bt->tok, .labels = bt->lab, .position_ids = bt->pos, .loss_mask = bt->mask };
}

static mgt_status make_model(mgt_model **m, mgt_model_config *c, mgt_backend *be, mgt_parallel *ps)
{
	mgt_model_layout L;
	memset(&L, 0, sizeof L);
	L.mbs = MB;
	L.num_stages = 1;
	L.slots = 1;
	L.dp = 1;
	mgt_status st = mgt_model_config_finalize(c, 1);
	if (!st) st = mgt_model_create(m, c, &L, be, ps);
	return st ? st : mgt_model_init_params(*m, 1234);
}

/* GPT's name of hybrid tensor name: layer 0's attention and layer 1's MLP are GPT layer 0's;
 * HybridStack's final_norm is TransformerBlock's final_layernorm. */
static void gpt_name(const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s", name);
	if (!strncmp(name, "decoder.layers.1.", 17)) snprintf(out, n, "decoder.layers.0.%s", name + 17);
	if (!strncmp(name, "decoder.final_norm.", 19)) snprintf(out, n, "decoder.final_layernorm.%s", name + 19);
}

static void t_gpt_equal(void)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_model *g = NULL, *hy = NULL;
	mgt_model_config cg = tiny(NULL, 1), ch = tiny("*-", 0);
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = make_model(&g, &cg, be, &ps);
	if (!st) st = make_model(&hy, &ch, be, &ps);
	CHECK(!st, "a 1-layer GPT and a \"*-\" hybrid: %s", st ? mgt_err_msg() : "made");
	if (st) goto out;
	CHECK(!strcmp(mgt_model_layer_pattern(hy), "*-") && mgt_model_tensors(hy)->n == mgt_model_tensors(g)->n,
	      "the hybrid's layers: %s, %d tensors (GPT's %d)", mgt_model_layer_pattern(hy), mgt_model_tensors(hy)->n,
	      mgt_model_tensors(g)->n);
	const mgt_tensor_table *th = mgt_model_tensors(hy), *tg = mgt_model_tensors(g);
	int moved = 0;
	for (int i = 0; i < th->n; i++) {
		char nm[128];
		gpt_name(th->t[i].name, nm, sizeof nm);
		const mgt_tensor *x = mgt_tensor_table_find(tg, nm);
		if (!x || x->numel != th->t[i].numel) continue;
		memcpy(mgt_model_params(hy) + th->t[i].offset, mgt_model_params(g) + x->offset, x->numel * sizeof(float));
		moved++;
	}
	CHECK(moved == th->n, "every hybrid tensor has its GPT tensor by name: %d of %d", moved, th->n);
	batch bt;
	mgt_microbatch mb = make_batch(&bt);
	double lg = 0, lh = 0;
	st = mgt_model_step(g, &mb, true, 1.0f, &lg, NULL, NULL);
	if (!st) st = mgt_model_step(hy, &mb, true, 1.0f, &lh, NULL, NULL);
	CHECK(!st && lg == lh, "the same loss bit for bit: %.17g and %.17g", lg, lh);
	int same = 0;
	for (int i = 0; !st && i < th->n; i++) {
		char nm[128];
		gpt_name(th->t[i].name, nm, sizeof nm);
		const mgt_tensor *x = mgt_tensor_table_find(tg, nm);
		same += x && !memcmp(mgt_model_grads(hy) + th->t[i].offset, mgt_model_grads(g) + x->offset, x->numel * sizeof(float));
	}
	CHECK(same == th->n, "every gradient bit for bit: %d of %d tensors", same, th->n);
out:
	mgt_model_free(g);
	mgt_model_free(hy);
	mgt_backend_destroy(be);
	mgt_parallel_free(&ps);
}

/* Tensor name's gradient g against the central difference of the loss sum along it: moving the
 * whole tensor by eps g/|g| changes the loss by eps |g| to first order.  One direction per tensor
 * gathers every element's signal, far above the fp32 loss's rounding (about 1e-5 of the sum). */
static void fd_check(mgt_model *m, const mgt_microbatch *mb, const char *name, double eps)
{
	const mgt_tensor *t = mgt_tensor_table_find(mgt_model_tensors(m), name);
	if (!t) {
		CHECK(0, "%s: no such tensor", name);
		return;
	}
	float *p = mgt_model_params(m) + t->offset, *g = mgt_model_grads(m) + t->offset, *p0 = malloc(t->numel * sizeof *p0);
	double norm = 0, lp = 0, lm = 0;
	for (size_t i = 0; i < t->numel; i++) norm += (double)g[i] * g[i];
	norm = sqrt(norm);
	memcpy(p0, p, t->numel * sizeof *p0);
	for (size_t i = 0; i < t->numel; i++) p[i] = (float)(p0[i] + eps * g[i] / norm);
	mgt_status st = mgt_model_step(m, mb, false, 0.0f, &lp, NULL, NULL);
	for (size_t i = 0; !st && i < t->numel; i++) p[i] = (float)(p0[i] - eps * g[i] / norm);
	if (!st) st = mgt_model_step(m, mb, false, 0.0f, &lm, NULL, NULL);
	memcpy(p, p0, t->numel * sizeof *p0);
	free(p0);
	double fd = (lp - lm) / (2.0 * eps);
	CHECK(!st && fabs(fd - norm) <= 1e-2 * norm, "%s: |gradient| %.6g, central difference along it %.6g (%.1e)", name, norm,
	      fd, fabs(fd - norm) / norm);
}

static void t_mamba_grads(void)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_model *m = NULL;
	mgt_model_config c = tiny("M*M-", 0);
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = make_model(&m, &c, be, &ps);
	CHECK(!st && !strcmp(mgt_model_layer_pattern(m), "M*M-") && c.num_layers == 4 && c.mamba_num_heads == 8,
	      "hybrid M*M-: 4 layers, 8 Mamba heads of 8 (d_inner 2h): %s", st ? mgt_err_msg() : "made");
	if (st) goto out;
	/* the parameter count: per M layer norm h + in_proj (2 DI + 2 G N + NH) h + conv CD 4 + CD
	 * + 3 NH + norm DI + out_proj h DI (megatron-hybrid-mamba.md's M*- split, without biases) */
	int64_t h = 32, DI = 64, GN = 16, NH = 8, CD = DI + 2 * GN;
	int64_t mlayer = h + (2 * DI + 2 * GN + NH) * h + CD * 4 + CD + 3 * NH + DI + h * DI;
	int64_t want = 2 * mlayer + (h + 64 * h + h * 32) + (h + 64 * h + h * 64) + 2 * 64 * h + h;
	CHECK(mgt_model_tensors(m)->global_numel == want, "parameters %lld (expected %lld)",
	      (long long)mgt_model_tensors(m)->global_numel, (long long)want);
	batch bt;
	mgt_microbatch mb = make_batch(&bt);
	double loss = 0;
	st = mgt_model_step(m, &mb, true, 1.0f, &loss, NULL, NULL);
	CHECK(!st && isfinite(loss), "forward and backward: loss sum %.4f", loss);
	if (st) goto out;
	static const char *const names[] = { "A_log", "D", "dt_bias", "conv1d_weight", "conv1d_bias", "norm.weight",
					     "in_proj.weight", "in_proj.layer_norm_weight", "out_proj.weight" };
	for (int l = 0; l <= 2; l += 2)
		for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
			char nm[96];
			snprintf(nm, sizeof nm, "decoder.layers.%d.mixer.%s", l, names[i]);
			/* A_log and dt_bias move the loss little: a longer step lifts the difference
			 * above the loss's rounding (their curvature stays small at it) */
			fd_check(m, &mb, nm, i < 3 && i != 1 ? 0.2 : 1e-2);
		}
	fd_check(m, &mb, "decoder.layers.1.self_attention.linear_qkv.weight", 1e-2);
	fd_check(m, &mb, "decoder.layers.3.mlp.linear_fc1.weight", 1e-2);
	fd_check(m, &mb, "embedding.word_embeddings.weight", 1e-2);
out:
	mgt_model_free(m);
	mgt_backend_destroy(be);
	mgt_parallel_free(&ps);
}

static double maxdiff(const float *a, const float *b, size_t n, double *mag)
{
	double e = 0;
	*mag = 0;
	for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), *mag = fmax(*mag, fabs(b[i]));
	return e;
}

/* Inference with the Mamba layers' state caches (lib/model/infer.c, backend.h mamba_step): a
 * whole-prompt call gives the training forward's logits (the chunked scan against the token by
 * token recurrence: fp32 rounding apart), one token per sequence per call gives the same, a
 * restart at position 0 repeats them, and going back to an earlier position is refused. */
static void t_infer(const char *pattern)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_model *m = NULL, *mi = NULL;
	mgt_kv_cache *kv = NULL;
	mgt_model_config c = tiny(pattern, 0);
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = make_model(&m, &c, be, &ps);
	if (!st) st = mgt_model_create_infer(&mi, &c, be, &ps);
	CHECK(!st, "%s: training and inference models: %s", pattern, st ? mgt_err_msg() : "made");
	if (st) goto out;
	memcpy(mgt_model_params(mi), mgt_model_params(m), mgt_model_tensors(m)->buf_numel * sizeof(float));
	const size_t V = (size_t)c.padded_vocab_size;
	float *lt = malloc(TT * V * 4), *l1 = malloc(TT * V * 4), *l2 = malloc(TT * V * 4);
	batch bt;
	mgt_microbatch mb = make_batch(&bt);
	double loss, mag = 0, e1, e2;
	st = mgt_model_step(m, &mb, false, 0.0f, &loss, lt, NULL);
	int32_t seq[TT], rows[TT];
	for (int t = 0; t < TT; t++) seq[t] = t % MB, rows[t] = t;
	if (!st) st = mgt_kv_cache_create(&kv, mi, MB, S);
	if (!st) st = mgt_model_infer(mi, kv, TT, bt.tok, seq, bt.pos, TT, rows, l1);
	e1 = st ? INFINITY : maxdiff(l1, lt, TT * V, &mag);
	CHECK(!st && e1 <= 1e-5 * mag, "%s: the prompt in one call = the training forward's logits: %.2e of %.3g (%s)", pattern,
	      e1, mag, st ? mgt_err_msg() : "ok");
	for (int i = 0; !st && i < S; i++) /* every sequence restarted at 0, then a token a call */
		st = mgt_model_infer(mi, kv, MB, bt.tok + i * MB, seq, bt.pos + i * MB, MB, rows, l2 + (size_t)i * MB * V);
	e2 = st ? INFINITY : maxdiff(l2, l1, TT * V, &mag);
	CHECK(!st && e2 <= 1e-5 * mag, "%s: restarted, one token a sequence a call: the same logits (%.2e; %s)", pattern, e2,
	      st ? mgt_err_msg() : "ok");
	int32_t back = 3;
	st = mgt_model_infer(mi, kv, 1, bt.tok, seq, &back, 0, NULL, NULL);
	if (strchr(pattern, 'M'))
		CHECK(st == MGT_ERR_INPUT && strstr(mgt_err_msg(), "cannot go back"), "%s: going back to position 3 refused: %s",
		      pattern, mgt_err_msg());
	else
		CHECK(!st, "%s: without Mamba layers the cache goes back to position 3 (%s)", pattern, st ? mgt_err_msg() : "ok");
	free(lt), free(l1), free(l2);
out:
	mgt_kv_cache_free(kv);
	mgt_model_free(m);
	mgt_model_free(mi);
	mgt_backend_destroy(be);
	mgt_parallel_free(&ps);
}

/* Megatron's tests/unit_tests/models/test_hybrid_model.py test_constructor: H 256, 4 heads,
 * vocabulary 100, pattern M*-, every other setting the config's default (LayerNorm, linear
 * biases, ffn 4H, untied, no position embedding; Mamba state 128, head dim 64, 8 groups) has
 * 1,774,872 parameters.  And Megatron's FLOPs: a "*-" hybrid's equal a 1-layer GPT's (two
 * formulas of training.py), a Mamba layer's the facts' in_proj + scan + out_proj. */
static void t_megatron_counts(void)
{
	mgt_model_config c = tiny("M*-", 0);
	c.hidden_size = 256;
	c.ffn_hidden_size = 0;
	c.num_attention_heads = 4;
	c.group_query_attention = false;
	c.vocab_size = 100;
	c.make_vocab_size_divisible_by = 4;
	c.add_bias_linear = true;
	c.mamba_head_dim = 64;
	c.mamba_state_dim = 128;
	c.mamba_num_groups = 8;
	snprintf(c.normalization, sizeof c.normalization, "LayerNorm");
	mgt_tensor_table tt;
	mgt_status st = mgt_model_config_finalize(&c, 1);
	if (!st) st = mgt_tensor_table_build(&tt, &c, 1, 0, 1, 0);
	CHECK(!st && tt.global_numel == 1774872, "Megatron's test_hybrid_model M*- constructor: %lld parameters (1,774,872)",
	      st ? -1LL : (long long)tt.global_numel);
	if (!st) mgt_tensor_table_free(&tt);
	mgt_model_config g = tiny(NULL, 1), hy = tiny("*-", 0), m = tiny("M", 0);
	st = mgt_model_config_finalize(&g, 1);
	if (!st) st = mgt_model_config_finalize(&hy, 1);
	if (!st) st = mgt_model_config_finalize(&m, 1);
	double fg = mgt_model_flops(&g, 8), fh = mgt_model_flops(&hy, 8);
	CHECK(!st && fabs(fg - fh) <= 1e-12 * fg, "FLOPs of a \"*-\" hybrid %.6g = a 1-layer GPT's %.6g", fh, fg);
	double B = 8, s = 24, h = 32, din = 64, V = (double)m.padded_vocab_size;
	double want = 3 * (2 * B * s * h * (2 * din + 2 * 2 * 8 + 8) + 7 * B * s * din * 8 + 2 * B * s * din * h + 2 * B * s * h * V);
	CHECK(!st && fabs(mgt_model_flops(&m, 8) - want) <= 1e-12 * want, "FLOPs of one Mamba layer and the head: %.6g (%.6g)",
	      mgt_model_flops(&m, 8), want);
}

static void t_stages(void)
{
	mgt_model_config c = tiny("M*|M-|ME|M*", 0);
	int64_t f = -1, n = -1;
	mgt_status st = mgt_stage_layers(&c, 4, 2, &f, &n);
	CHECK(!st && f == 4 && n == 2, "segment 2 of 4: layers [%lld, +%lld)", (long long)f,
	      (long long)n);
	CHECK(mgt_stage_layers(&c, 2, 0, &f, &n) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "4 pipeline segments"),
	      "4 segments on 2 stages refused: %s", mgt_err_msg());
	CHECK(mgt_hybrid_symbol(&c, 5) == 'E' && mgt_hybrid_symbol(&c, 8) == 0, "symbol of layer 5 ('|' skipped): %c",
	      mgt_hybrid_symbol(&c, 5));
	mgt_model_config d = tiny("M*M-", 0);
	d.mamba_num_groups = 3;
	CHECK(mgt_model_config_finalize(&d, 1) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "--mamba-num-groups 3"),
	      "groups not dividing the heads refused: %s", mgt_err_msg());
	d = tiny("M*M-", 0);
	CHECK(mgt_model_config_finalize(&d, 16) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "Mamba heads"),
	      "TP 16 over 8 Mamba heads refused: %s", mgt_err_msg());
	d = tiny("M*M-", 0);
	d.mamba_head_dim = 10;
	CHECK(mgt_model_config_finalize(&d, 1) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "--mamba-head-dim 10"),
	      "a head dim not dividing 2h refused: %s", mgt_err_msg());
	d = tiny(NULL, 2);
	snprintf(d.hybrid_layer_pattern, sizeof d.hybrid_layer_pattern, "M*");
	CHECK(mgt_model_config_finalize(&d, 1) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "--model-family hybrid"),
	      "a pattern on a GPT refused: %s", mgt_err_msg());
}

int main(void)
{
	t_ratios();
	t_check();
	t_stages();
	t_megatron_counts();
	t_gpt_equal();
	t_mamba_grads();
	t_infer("M*-M");
	t_infer("*-");
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
