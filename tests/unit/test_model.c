/* tests/unit/test_model.c: the tensor table's flat-buffer layout (Megatron's DDP buffer,
 * megatron/core/distributed/param_and_grad_buffer.py) and the boxes that map local element ranges to the global
 * tensor (checkpoint pieces of any TP rank and any distributed-optimizer shard). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

static mgt_model_config config(bool swiglu)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	c.num_layers = 2;
	c.hidden_size = 64;
	c.num_attention_heads = 8;
	c.group_query_attention = swiglu;
	c.num_query_groups = swiglu ? 4 : 0;
	c.seq_length = 16;
	c.max_position_embeddings = 16;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, swiglu ? "rope" : "learned_absolute");
	snprintf(c.normalization, sizeof c.normalization, swiglu ? "RMSNorm" : "LayerNorm");
	c.rotary_base = 10000;
	c.rotary_percent = 1.0;
	c.norm_epsilon = 1e-5;
	c.swiglu = swiglu;
	c.add_bias_linear = true;
	c.untie_embeddings_and_output_weights = swiglu;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.02;
	c.vocab_size = 1000;
	return c;
}

/* Global flat index of local element (r, k) of x, written from the shard rules (section 6.3). */
static int64_t global_index(const mgt_tensor *x, int tp, int tp_rank, int64_t r, int64_t k)
{
	int64_t C = x->ndim == 2 ? x->shape[1] : 1, R = x->shape[0];
	switch (x->shard) {
	case MGT_SHARD_ROW:
	case MGT_SHARD_VOCAB: return (tp_rank * R / tp + r) * C + k;
	case MGT_SHARD_COL: return r * C + tp_rank * (C / tp) + k;
	case MGT_SHARD_ROW_BLOCKS: { /* block by block: this rank's rows of each block in turn */
		int64_t lo = 0, go = 0;
		for (int b = 0; b < x->nblocks; b++) {
			int64_t lr = x->blocks[b] / tp;
			if (r < lo + lr) return (go + tp_rank * lr + r - lo) * C + k;
			lo += lr;
			go += x->blocks[b];
		}
		return -1;
	}
	case MGT_SHARD_ROW_GLU: {
		int64_t half = R / 2 / tp; /* local rows per half */
		int64_t g = r < half ? tp_rank * half + r : R / 2 + tp_rank * half + (r - half);
		return g * C + k;
	}
	default: return r * C + k;
	}
}

/* Boxes of [lo, hi) of x: every local element once, at the global index the rules give. */
static int boxes_ok(const mgt_tensor *x, int tp, int tp_rank, size_t lo, size_t hi)
{
	int64_t off[MGT_TENSOR_MAX_BOXES][2], shape[MGT_TENSOR_MAX_BOXES][2];
	size_t first[MGT_TENSOR_MAX_BOXES], seen = 0;
	int nb = mgt_tensor_boxes(x, lo, hi, off, shape, first);
	int64_t Cl = x->ndim == 2 ? x->local_shape[1] : 1, Cg = x->ndim == 2 ? x->shape[1] : 1;
	size_t expect_next = lo;
	for (int b = 0; b < nb; b++) {
		int64_t rows = shape[b][0], cols = x->ndim == 2 ? shape[b][1] : 1;
		if (first[b] != expect_next) return 0;
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++) {
				int64_t local = (int64_t)first[b] + (rows > 1 ? i * Cl : 0) + j;
				int64_t g = (off[b][0] + i) * Cg + (x->ndim == 2 ? off[b][1] : 0) + j;
				if (rows > 1 && cols != Cl) return 0; /* multi-row boxes are whole local rows */
				if (local < (int64_t)lo || local >= (int64_t)hi) return 0;
				if (g != global_index(x, tp, tp_rank, local / Cl, local % Cl)) return 0;
				seen++;
			}
		expect_next = first[b] + (size_t)(rows * cols);
	}
	return seen == hi - lo && nb <= MGT_TENSOR_MAX_BOXES;
}

static void test_boxes_of(mgt_model_config c, int tp, const char *what)
{
	CHECK(mgt_model_config_finalize(&c, tp) == MGT_OK, "%s config finalizes for TP %d", what, tp);
	uint64_t rng = 12345;
	for (int r = 0; r < tp; r++) {
		mgt_tensor_table tt;
		CHECK(mgt_tensor_table_build(&tt, &c, tp, r, 1, 0) == MGT_OK, "table for TP rank %d of %d", r, tp);
		int bad = 0, n = 0;
		for (int i = 0; i < tt.n; i++) {
			const mgt_tensor *x = &tt.t[i];
			bad += !boxes_ok(x, tp, r, 0, x->numel);
			for (int k = 0; k < 20; k++, n++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				size_t a = (size_t)(rng >> 33) % x->numel, b = a + 1 + (size_t)(rng >> 13) % (x->numel - a);
				bad += !boxes_ok(x, tp, r, a, b);
			}
		}
		CHECK(bad == 0, "%s TP rank %d/%d: boxes of %d random ranges map every element to its global index",
		      what, r, tp, n);
		mgt_tensor_table_free(&tt);
	}
}

/* The GPT configs, and a hybrid one whose Mamba in_proj and conv are row blocks (8 heads of 16,
 * 4 groups of state 8: every block divides over TP 4). */
static void test_boxes(bool swiglu, int tp)
{
	test_boxes_of(config(swiglu), tp, swiglu ? "SwiGLU/GQA" : "GELU");
	if (swiglu) return;
	mgt_model_config c = config(true);
	snprintf(c.family, sizeof c.family, "hybrid");
	snprintf(c.hybrid_layer_pattern, sizeof c.hybrid_layer_pattern, "M*-M");
	c.mamba_head_dim = 16;
	c.mamba_state_dim = 8;
	c.mamba_num_groups = 4;
	test_boxes_of(c, tp, "hybrid M*-M");
}

static size_t lcm128(size_t dp)
{
	size_t a = dp, b = 128;
	while (b) { size_t t = a % b; a = b; b = t; }
	return dp * 128 / a;
}

/* Reverse order, no overlap, padding as Megatron's distributed optimizer wants. */
static void test_layout(int dp, bool distopt, int64_t bucket_size, bool shared)
{
	mgt_model_config c = config(false);
	mgt_model_config_finalize(&c, 1);
	mgt_tensor_table tt;
	mgt_tensor_table_build(&tt, &c, 1, 0, 1, 0);
	CHECK(mgt_tensor_table_layout(&tt, dp, distopt, bucket_size, shared) == MGT_OK, "layout dp %d", dp);
	int bad = 0;
	for (int i = 0; i + 1 < tt.n; i++) {
		const mgt_tensor *x = &tt.t[i], *y = &tt.t[i + 1]; /* y precedes x in the buffer */
		bad += y->offset + y->numel > x->offset;
		bad += distopt && x->offset % 64;
		bad += !distopt && !shared && !bucket_size && y->offset + y->numel != x->offset;
	}
	size_t covered = 0;
	for (int b = 0; b < tt.nbuckets; b++) {
		bad += tt.buckets[b].offset != covered;
		bad += distopt && tt.buckets[b].numel % lcm128((size_t)dp);
		covered += tt.buckets[b].numel;
		if (bucket_size && b + 1 < tt.nbuckets && !shared) bad += tt.buckets[b].numel < (size_t)bucket_size;
	}
	bad += covered != tt.buf_numel || tt.buf_numel < tt.numel;
	bad += tt.t[tt.n - 1].offset != 0; /* the last tensor comes first */
	if (shared) {
		const mgt_tensor *we = mgt_tensor_table_find(&tt, "embedding.word_embeddings.weight");
		int own = 0;
		for (int b = 0; b < tt.nbuckets; b++)
			own += tt.buckets[b].offset == we->offset && tt.buckets[b].numel - we->numel < lcm128((size_t)dp);
		bad += own != 1;
	}
	CHECK(bad == 0, "layout dp %d distopt %d bucket %lld shared %d: reverse order, padding, %d buckets", dp,
	      distopt, (long long)bucket_size, shared, tt.nbuckets);
	mgt_tensor_table_free(&tt);
}

/* FSDP's units (MGT_BUCKETS_PER_LAYER): each bucket holds one decoder layer's tensors or only
 * tensors outside layers, every shard of DP starts on a page (ends rounded to DP x 1024), the
 * buckets tile the buffer, and there is one bucket per layer plus one at each end (the output
 * layer and final norm first, the embeddings last). */
static void test_layout_units(int dp)
{
	mgt_model_config c = config(false);
	mgt_model_config_finalize(&c, 1);
	mgt_tensor_table tt;
	mgt_tensor_table_build(&tt, &c, 1, 0, 1, 0);
	CHECK(mgt_tensor_table_layout(&tt, dp, true, MGT_BUCKETS_PER_LAYER, false) == MGT_OK, "units dp %d", dp);
	int bad = 0;
	size_t covered = 0;
	for (int b = 0; b < tt.nbuckets; b++) {
		size_t lo = tt.buckets[b].offset, hi = lo + tt.buckets[b].numel, a, e;
		int64_t layer = -2;
		for (int i = 0; i < tt.n; i++) {
			if (!mgt_tensor_overlap(&tt.t[i], lo, hi, &a, &e)) continue;
			bad += a != tt.t[i].offset || e != tt.t[i].offset + tt.t[i].numel; /* whole tensors */
			bad += layer != -2 && layer != tt.t[i].layer;
			layer = tt.t[i].layer;
		}
		bad += lo != covered || tt.buckets[b].numel % ((size_t)dp * MGT_PAGE_FLOATS);
		covered = hi;
	}
	bad += covered != tt.buf_numel || tt.nbuckets != (int)c.num_layers + 2;
	CHECK(bad == 0, "units dp %d: one layer a bucket, page-aligned shards, %d buckets for %lld layers", dp,
	      tt.nbuckets, (long long)c.num_layers);
	mgt_tensor_table_free(&tt);
}

/* Stages tile the layers in order; uneven counts land on the first / last stage. */
static void test_stages(int64_t L, int P, int64_t F, int64_t E, bool valid)
{
	mgt_model_config c = config(false);
	c.num_layers = L;
	c.decoder_first_pipeline_num_layers = F;
	c.decoder_last_pipeline_num_layers = E;
	int64_t next = 0, first, n;
	int bad = 0, err = 0;
	for (int s = 0; s < P; s++) {
		if (mgt_stage_layers(&c, P, s, &first, &n)) { err++; continue; }
		bad += first != next || n <= 0;
		bad += (s == 0 && F && n != F) || (s == P - 1 && E && n != E);
		next = first + n;
	}
	if (valid) CHECK(!err && !bad && next == L, "%lld layers on %d stages (first %lld, last %lld) tile in order",
			 (long long)L, P, (long long)F, (long long)E);
	else CHECK(err == P, "%lld layers on %d stages (first %lld, last %lld) refused: %s", (long long)L, P,
		   (long long)F, (long long)E, mgt_err_msg());
}

/* RoPE frequencies against the Llama 3.1 formula (transformers' modeling_rope_utils.py, tools/checkpoint/) in double:
 * every frequency within 2e-6 relative (fp32 evaluation), each of the three bands present. */
static void test_inv_freq(bool scaling, double base, int d, double factor, double lo, double hi, int64_t orig)
{
	mgt_model_config c = config(true);
	c.rotary_base = base;
	c.kv_channels = d;
	c.use_rope_scaling = scaling;
	c.rope_scaling_factor = factor;
	c.rope_scaling_low_freq_factor = lo;
	c.rope_scaling_high_freq_factor = hi;
	c.rope_scaling_original_max_position_embeddings = orig;
	float f[512];
	mgt_model_rope_inv_freq(&c, f);
	double worst = 0;
	int bands[3] = {0, 0, 0};
	for (int k = 0; k < d / 2; k++) {
		double inv = pow(base, -2.0 * k / d), want = inv;
		if (scaling) {
			double wl = 2 * M_PI / inv;
			if (wl > orig / lo) want = inv / factor, bands[0]++;
			else if (wl < orig / hi) want = inv, bands[2]++;
			else {
				double sm = (orig / wl - lo) / (hi - lo);
				want = (1 - sm) * inv / factor + sm * inv;
				bands[1]++;
			}
		}
		worst = fmax(worst, fabs(f[k] - want) / want);
	}
	CHECK(worst < 2e-6 && (!scaling || (bands[0] && bands[1] && bands[2])),
	      "rope inv_freq base %g d %d scaling %d (factor %g, %g..%g, %lld): worst rel err %.2e, bands %d/%d/%d",
	      base, d, scaling, factor, lo, hi, (long long)orig, worst, bands[0], bands[1], bands[2]);
}

/* --qk-layernorm rows: after linear_qkv's weight/bias, [kv_channels], replicated, no weight decay
 * unless asked; LayerNorm adds biases. */
static void test_qk_rows(bool layernorm, bool wd, int tp)
{
	mgt_model_config c = config(!layernorm);
	c.qk_layernorm = true;
	c.apply_wd_to_qk_layernorm = wd;
	c.kv_channels = 12;
	mgt_status st = mgt_model_config_finalize(&c, tp);
	mgt_tensor_table tt;
	if (!st) st = mgt_tensor_table_build(&tt, &c, tp, tp - 1, 1, 0);
	if (st) {
		CHECK(0, "qk rows: %s", mgt_err_msg());
		return;
	}
	const char *want[] = { "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
			       "self_attention.q_layernorm.weight", "self_attention.q_layernorm.bias",
			       "self_attention.k_layernorm.weight", "self_attention.k_layernorm.bias" };
	int ok = 1, i0 = -1;
	for (int i = 0; i < tt.n; i++)
		if (!strcmp(tt.t[i].name, "decoder.layers.1.self_attention.linear_qkv.weight")) i0 = i;
	int k = 0;
	for (int j = 0; j < 6 && i0 >= 0; j++) {
		if (!layernorm && strstr(want[j], "layernorm.bias")) continue;
		const mgt_tensor *t = &tt.t[i0 + k++];
		char name[96];
		snprintf(name, sizeof name, "decoder.layers.1.%s", want[j]);
		if (strcmp(t->name, name)) ok = 0;
		if (strstr(want[j], "layernorm") && (t->ndim != 1 || t->shape[0] != 12 || t->local_shape[0] != 12 ||
						    t->shard != MGT_SHARD_NONE || t->weight_decay != wd))
			ok = 0;
		if (strstr(want[j], "layernorm.weight") && t->init != MGT_INIT_ONE) ok = 0;
	}
	CHECK(i0 >= 0 && ok, "qk_layernorm rows (%s, wd %d, tp %d): order, shape [kv_channels], replicated",
	      layernorm ? "LayerNorm" : "RMSNorm", wd, tp);
	mgt_tensor_table_free(&tt);
}

/* BERT's rows (megatron/core/models/bert/bert_model.py, TE spec names): the set of names, with and
 * without the binary head, their global shapes and TP shard rules. */
static void test_bert_rows(bool binary, int tp)
{
	mgt_model_config c = config(false);
	snprintf(c.family, sizeof c.family, "bert");
	c.bert_binary_head = binary;
	mgt_status st = mgt_model_config_finalize(&c, tp);
	mgt_tensor_table tt;
	if (!st) st = mgt_tensor_table_build(&tt, &c, tp, tp - 1, 1, 0);
	if (st) {
		CHECK(0, "bert rows: %s", mgt_err_msg());
		return;
	}
	const int64_t h = 64, V = c.padded_vocab_size, f = 256, q = 192;
	const struct { const char *name; int64_t r, k; mgt_shard_rule sh; bool binary_only; } want[] = {
		{ "embedding.word_embeddings.weight", V, h, MGT_SHARD_VOCAB, false },
		{ "embedding.position_embeddings.weight", 16, h, MGT_SHARD_NONE, false },
		{ "embedding.tokentype_embeddings.weight", 2, h, MGT_SHARD_NONE, true },
		{ "encoder.layers.1.self_attention.linear_qkv.layer_norm_weight", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.layers.1.self_attention.linear_qkv.layer_norm_bias", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.layers.1.self_attention.linear_qkv.weight", q, h, MGT_SHARD_ROW, false },
		{ "encoder.layers.1.self_attention.linear_qkv.bias", q, 0, MGT_SHARD_ROW, false },
		{ "encoder.layers.1.self_attention.linear_proj.weight", h, h, MGT_SHARD_COL, false },
		{ "encoder.layers.1.self_attention.linear_proj.bias", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.layers.1.mlp.linear_fc1.layer_norm_weight", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.layers.1.mlp.linear_fc1.layer_norm_bias", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.layers.1.mlp.linear_fc1.weight", f, h, MGT_SHARD_ROW, false },
		{ "encoder.layers.1.mlp.linear_fc1.bias", f, 0, MGT_SHARD_ROW, false },
		{ "encoder.layers.1.mlp.linear_fc2.weight", h, f, MGT_SHARD_COL, false },
		{ "encoder.layers.1.mlp.linear_fc2.bias", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.final_layernorm.weight", h, 0, MGT_SHARD_NONE, false },
		{ "encoder.final_layernorm.bias", h, 0, MGT_SHARD_NONE, false },
		{ "pooler.dense.weight", h, h, MGT_SHARD_NONE, true },
		{ "pooler.dense.bias", h, 0, MGT_SHARD_NONE, true },
		{ "binary_head.weight", 2, h, MGT_SHARD_NONE, true },
		{ "binary_head.bias", 2, 0, MGT_SHARD_NONE, true },
		{ "lm_head.dense.weight", h, h, MGT_SHARD_NONE, false },
		{ "lm_head.dense.bias", h, 0, MGT_SHARD_NONE, false },
		{ "lm_head.layer_norm.weight", h, 0, MGT_SHARD_NONE, false },
		{ "lm_head.layer_norm.bias", h, 0, MGT_SHARD_NONE, false },
		{ "output_layer.bias", V, 0, MGT_SHARD_VOCAB, false },
	};
	int n = 0, bad = 0;
	for (size_t j = 0; j < sizeof want / sizeof *want; j++) {
		if (want[j].binary_only && !binary) continue;
		n += strstr(want[j].name, "layers.1.") ? 2 : 1; /* layer 0 has the same rows */
		const mgt_tensor *t = mgt_tensor_table_find(&tt, want[j].name);
		if (!t || t->shape[0] != want[j].r || (want[j].k && t->shape[1] != want[j].k) || t->ndim != (want[j].k ? 2 : 1) ||
		    t->shard != want[j].sh)
			bad++;
	}
	const mgt_tensor *ob = mgt_tensor_table_find(&tt, "output_layer.bias");
	CHECK(!bad && tt.n == n && ob && ob->init == MGT_INIT_ZERO,
	      "BERT rows (binary head %d, tp %d): %d of %d as section 3.2 names them", binary, tp, tt.n - bad, n);
	mgt_tensor_table_free(&tt);
}

/* T5's rows (megatron/core/models/T5/t5_model.py, t5_spec.py): encoder and decoder
 * stacks of num_layers each, the decoder's cross-attention, the shared embedding, the LM head's
 * vocabulary bias (tied) and, with relative positions, the two bias tables; PP refused. */
static void test_t5_rows(bool relative, int tp)
{
	mgt_model_config c = config(false);
	snprintf(c.family, sizeof c.family, "t5");
	c.kv_channels = 16;
	c.relative_attention_num_buckets = 32;
	c.relative_attention_max_distance = 128;
	if (relative) snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "relative");
	mgt_status st = mgt_model_config_finalize(&c, tp);
	mgt_tensor_table tt;
	if (!st) st = mgt_tensor_table_build(&tt, &c, tp, 0, 1, 0);
	if (st) {
		CHECK(0, "t5 rows: %s", mgt_err_msg());
		return;
	}
	const int64_t h = 64, V = c.padded_vocab_size, f = 256, q = 8 * 16;
	const struct { const char *name; int64_t r, k; mgt_shard_rule sh; int per_layer; } want[] = {
		{ "embedding.word_embeddings.weight", V, h, MGT_SHARD_VOCAB, 0 },
		{ "embedding.position_embeddings.weight", 16, h, MGT_SHARD_NONE, 0 },
		{ "encoder_relative_pos_emb.relative_attention_bias.weight", 32, 8, MGT_SHARD_NONE, 0 },
		{ "decoder_relative_pos_emb.relative_attention_bias.weight", 32, 8, MGT_SHARD_NONE, 0 },
		{ "encoder.layers.1.self_attention.linear_qkv.weight", 3 * q, h, MGT_SHARD_ROW, 1 },
		{ "encoder.layers.1.self_attention.linear_qkv.layer_norm_weight", h, 0, MGT_SHARD_NONE, 1 },
		{ "encoder.layers.1.self_attention.linear_proj.weight", h, q, MGT_SHARD_COL, 1 },
		{ "encoder.layers.1.mlp.linear_fc1.weight", f, h, MGT_SHARD_ROW, 1 },
		{ "encoder.layers.1.mlp.linear_fc2.bias", h, 0, MGT_SHARD_NONE, 1 },
		{ "encoder.final_layernorm.weight", h, 0, MGT_SHARD_NONE, 0 },
		{ "decoder.layers.1.self_attention.linear_qkv.bias", 3 * q, 0, MGT_SHARD_ROW, 1 },
		{ "decoder.layers.1.pre_cross_attn_layernorm.weight", h, 0, MGT_SHARD_NONE, 1 },
		{ "decoder.layers.1.pre_cross_attn_layernorm.bias", h, 0, MGT_SHARD_NONE, 1 },
		{ "decoder.layers.1.cross_attention.linear_q.weight", q, h, MGT_SHARD_ROW, 1 },
		{ "decoder.layers.1.cross_attention.linear_q.bias", q, 0, MGT_SHARD_ROW, 1 },
		{ "decoder.layers.1.cross_attention.linear_kv.weight", 2 * q, h, MGT_SHARD_ROW, 1 },
		{ "decoder.layers.1.cross_attention.linear_kv.bias", 2 * q, 0, MGT_SHARD_ROW, 1 },
		{ "decoder.layers.1.cross_attention.linear_proj.weight", h, q, MGT_SHARD_COL, 1 },
		{ "decoder.layers.1.cross_attention.linear_proj.bias", h, 0, MGT_SHARD_NONE, 1 },
		{ "decoder.layers.1.mlp.linear_fc1.layer_norm_bias", h, 0, MGT_SHARD_NONE, 1 },
		{ "decoder.final_layernorm.bias", h, 0, MGT_SHARD_NONE, 0 },
		{ "lm_head.output_layer.bias", V, 0, MGT_SHARD_VOCAB, 0 },
	};
	int bad = 0, found = 0;
	for (size_t j = 0; j < sizeof want / sizeof *want; j++) {
		const mgt_tensor *t = mgt_tensor_table_find(&tt, want[j].name);
		bool rel = strstr(want[j].name, "relative") != NULL;
		if (rel && !relative) {
			bad += t != NULL;
			continue;
		}
		if (!strcmp(want[j].name, "embedding.position_embeddings.weight") && relative) {
			bad += t != NULL;
			continue;
		}
		found++;
		if (!t || t->shape[0] != want[j].r || (want[j].k && t->shape[1] != want[j].k) || t->shard != want[j].sh)
			bad++;
	}
	/* rows: 12 + 2 per encoder layer... counted from the parts: self-attention 6, MLP 6, cross 8 */
	int64_t n = 2 * (6 + 6) + 2 * (6 + 8 + 6) + 2 + 2 + 1 + 1 + (relative ? 2 : 1);
	CHECK(!bad && tt.n == n, "T5 rows (%s positions, tp %d): %d named rows as section 3.3 names them, %d rows "
	      "(expected %lld)", relative ? "relative" : "learned", tp, found - bad, tt.n, (long long)n);
	mgt_tensor_table_free(&tt);
	mgt_tensor_table t2;
	CHECK(mgt_tensor_table_build(&t2, &c, 1, 0, 2, 0) == MGT_ERR_USAGE && strstr(mgt_err_msg(), "not supported for T5"),
	      "T5 with pipeline parallelism refused (%s)", mgt_err_msg());
}

/* T5's relative buckets: megatron/core/models/common/embeddings/relative_pos_embedding.py (bidirectional, 32 buckets, max
 * 128: rel 0 -> 0, +1 -> 17, -1 -> 1), the exact region, the last bucket beyond max_distance,
 * the decoder's (unidirectional) future at 0, monotone in |rel| within each half. */
static void test_t5_buckets(void)
{
	CHECK(mgt_t5_relative_bucket(0, true, 32, 128) == 0 && mgt_t5_relative_bucket(1, true, 32, 128) == 17 &&
	      mgt_t5_relative_bucket(-1, true, 32, 128) == 1, "T5 buckets: 0 -> 0, +1 -> 17, -1 -> 1 (bidirectional)");
	int bad = 0, prev = -1;
	for (int r = 0; r < 400; r++) {
		int b = mgt_t5_relative_bucket(-r, true, 32, 128), u = mgt_t5_relative_bucket(-r, false, 32, 128);
		bad += b < prev || b > 15 || (r < 8 && b != r) || (r >= 128 && b != 15);
		bad += u < 0 || u > 31 || (r < 16 && u != r) || (r >= 128 && u != 31);
		bad += mgt_t5_relative_bucket(r, false, 32, 128) != 0 || (r > 0 && mgt_t5_relative_bucket(r, true, 32, 128) != 16 + b);
		prev = b;
	}
	CHECK(!bad, "T5 buckets: exact below max_exact, monotone, last bucket from max_distance, decoder's future 0 "
	      "(%d violations)", bad);
}

/* The chunk's layer pattern (mgt_model_layer_pattern, Megatron's hybrid symbols of
 * megatron/core/ssm/mamba_hybrid_layer_allocation.py: '*' attention, '-' MLP, 'E' MoE) of a
 * 6-layer model on stage `stage` of `stages`, against want, written out by hand from the MoE
 * rule (megatron/training/arguments.py moe_layer_freq: an integer N makes every N-th layer from 0
 * an MoE layer; a list gives one 0/1 per layer): E experts (0: dense), --moe-layer-freq freq or
 * the expanded list lst. */
static void test_pattern(int64_t E, int64_t freq, const char *lst, int stages, int stage, const char *want)
{
	mgt_model_config c = config(true);
	c.num_layers = 6;
	if (E) {
		c.add_bias_linear = false; /* no linear biases with experts */
		c.num_experts = E;
		c.moe_router_topk = 2;
		c.moe_layer_freq = freq;
		c.moe_ffn_hidden_size = 32;
		snprintf(c.moe_layer_pattern, sizeof c.moe_layer_pattern, "%s", lst ? lst : "");
		snprintf(c.moe_router_score_function, sizeof c.moe_router_score_function, "softmax");
		snprintf(c.moe_router_load_balancing_type, sizeof c.moe_router_load_balancing_type, "aux_loss");
		snprintf(c.moe_token_drop_policy, sizeof c.moe_token_drop_policy, "probs");
	}
	mgt_model_layout L;
	memset(&L, 0, sizeof L);
	L.mbs = 1;
	L.num_stages = stages;
	L.stage = stage;
	L.slots = 1;
	L.dp = 1;
	mgt_parallel ps;
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_model *m = NULL;
	mgt_status st = mgt_parallel_init_single(&ps);
	if (!st) st = mgt_model_config_finalize(&c, 1);
	if (!st) st = mgt_model_create(&m, &c, &L, be, &ps);
	const char *got = m ? mgt_model_layer_pattern(m) : NULL;
	CHECK(!st && got && !strcmp(got, want), "layer pattern, %lld experts, --moe-layer-freq %lld, list '%s', "
	      "stage %d of %d: %s (expected %s)", (long long)E, (long long)freq, lst ? lst : "", stage, stages,
	      got ? got : "none", want);
	mgt_model_free(m);
	mgt_backend_destroy(be);
	mgt_parallel_free(&ps);
}

int main(void)
{
	test_pattern(0, 0, NULL, 1, 0, "*-*-*-*-*-*-");      /* dense GPT / Llama */
	test_pattern(4, 1, NULL, 1, 0, "*E*E*E*E*E*E");      /* every layer MoE (tiny-moe) */
	test_pattern(4, 2, NULL, 1, 0, "*E*-*E*-*E*-");
	test_pattern(4, 3, NULL, 1, 0, "*E*-*-*E*-*-");
	test_pattern(4, 3, NULL, 2, 1, "*E*-*-");            /* layers 3..5 of 6 */
	test_pattern(0, 0, NULL, 3, 2, "*-*-");
	test_pattern(4, 0, "011001", 1, 0, "*-*E*E*-*-*E");  /* --moe-layer-freq [0,1,1,0,0,1] */
	test_pattern(4, 0, "011001", 2, 0, "*-*E*E");
	test_inv_freq(false, 10000, 64, 8, 1, 4, 8192);
	test_inv_freq(true, 500000, 128, 8, 1, 4, 8192);
	test_inv_freq(true, 500000, 64, 32, 1, 4, 8192);
	test_inv_freq(true, 10000, 64, 4, 2, 8, 64); /* small original length: all bands */
	test_qk_rows(true, false, 1);
	test_qk_rows(false, true, 2);
	test_qk_rows(true, false, 4);
	test_bert_rows(true, 1);
	test_bert_rows(false, 2);
	test_t5_rows(false, 1);
	test_t5_rows(true, 2);
	test_t5_buckets();
	test_stages(8, 4, 0, 0, true);
	test_stages(8, 2, 0, 1, true);
	test_stages(8, 3, 2, 0, true);
	test_stages(9, 4, 1, 2, true);
	test_stages(8, 2, 3, 5, true);
	test_stages(8, 3, 0, 0, false);
	test_stages(8, 4, 3, 0, false);
	test_stages(8, 4, 2, 0, true);
	test_stages(8, 2, 3, 4, false);
	test_stages(4, 1, 0, 1, false);
	for (int tp = 1; tp <= 4; tp *= 2) {
		test_boxes(false, tp);
		test_boxes(true, tp);
	}
	test_layout(1, false, 0, false);
	test_layout(2, true, 0, false);
	test_layout(3, true, 0, false);
	test_layout(4, true, 5000, false);
	test_layout(2, false, 5000, false);
	test_layout(8, true, 0, true);
	test_layout_units(1);
	test_layout_units(3);
	test_layout_units(4);
	return check_finish();
}
