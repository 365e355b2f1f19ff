/* lib/model/table.c: model configuration checks and the tensor table: its row builder (mgt_rows_add,
 * mgt_rows_norm), the GPT and BERT stacks' assembly over the layer kinds' rows (mgt_rows_layer; the
 * kinds' rows are in their files, BERT's and T5's in bert.c and t5.c), the flat buffer layout, its
 * boxes and initialization. */
#include "model_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mgt_status cfg_err(const char *fmt, int64_t a, int64_t b)
{
	return mgt_err(MGT_ERR_USAGE, fmt, (long long)a, (long long)b);
}

/* Every size a product of them can reach stays far inside int64 and size_t: each dimension is
 * bounded here, naming the flag, and the parameter count is checked in double precision. */
static mgt_status config_bounds(const mgt_model_config *c)
{
	const struct { const char *flag; int64_t v, max; } dims[] = {
		{ "--num-layers", c->num_layers, 1 << 16 }, { "--hidden-size", c->hidden_size, 1 << 24 },
		{ "--ffn-hidden-size", c->ffn_hidden_size, 1 << 26 }, { "--num-attention-heads", c->num_attention_heads, 1 << 20 },
		{ "--kv-channels", c->kv_channels, 1 << 20 }, { "--num-query-groups", c->num_query_groups, 1 << 20 },
		{ "--seq-length", c->seq_length, INT32_MAX / 4 }, { "--max-position-embeddings", c->max_position_embeddings, 1 << 29 },
		{ "vocabulary size (--vocab-size or the tokenizer's)", c->vocab_size, INT32_MAX },
	};
	for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
		if (dims[i].v > dims[i].max)
			return mgt_err(MGT_ERR_USAGE, "%s %lld: more than the %lld mgt supports", dims[i].flag,
				       (long long)dims[i].v, (long long)dims[i].max);
	double h = (double)c->hidden_size, q = (double)c->num_attention_heads * (double)c->kv_channels;
	double layer = h * (q + 2.0 * (double)c->num_query_groups * (double)c->kv_channels) + q * h +
		       3.0 * h * (double)c->ffn_hidden_size;
	if ((double)c->num_layers * layer > 0x1p50)
		return mgt_err(MGT_ERR_USAGE, "--num-layers %lld x %.3g parameters a layer (--hidden-size %lld, "
			       "--ffn-hidden-size %lld): more than the 2^50 parameters mgt supports",
			       (long long)c->num_layers, layer, (long long)c->hidden_size, (long long)c->ffn_hidden_size);
	return MGT_OK;
}

/* A hybrid model's layers from its pattern, and the Mamba-2 mixer's sizes (mamba_mixer.py
 * MambaMixer.__init__: d_inner 2 h / head dim heads unless --mamba-num-heads; its asserts). */
static mgt_status hybrid_derive(mgt_model_config *c, int tp)
{
	bool hybrid = !strcmp(c->family, "hybrid");
	if (!hybrid && c->hybrid_layer_pattern[0])
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern with model family '%s': hybrid layers need "
			       "--model-family hybrid", c->family[0] ? c->family : "gpt");
	if (!hybrid) return MGT_OK;
	if (!c->hybrid_layer_pattern[0])
		return mgt_err(MGT_ERR_USAGE, "--model-family hybrid needs --hybrid-layer-pattern (or --hybrid-attention-ratio "
			       "and --hybrid-mlp-ratio over --num-layers)");
	int segs;
	mgt_status st = mgt_hybrid_pattern_check(c->hybrid_layer_pattern, 1, &c->num_layers, &segs);
	if (st || !strchr(c->hybrid_layer_pattern, MGT_LAYER_MAMBA)) return st;
	int64_t P = c->mamba_head_dim, G = c->mamba_num_groups, N = c->mamba_state_dim;
	if (P < 1 || G < 1 || N < 1)
		return mgt_err(MGT_ERR_USAGE, "--mamba-head-dim %lld, --mamba-num-groups %lld, --mamba-state-dim %lld: expected "
			       "positive sizes", (long long)P, (long long)G, (long long)N);
	if (!c->mamba_num_heads && (2 * c->hidden_size) % P)
		return cfg_err("--mamba-head-dim %lld does not divide the Mamba layers' d_inner 2 x --hidden-size = %lld "
			       "(or give --mamba-num-heads)", P, 2 * c->hidden_size);
	if (!c->mamba_num_heads) c->mamba_num_heads = 2 * c->hidden_size / P;
	int64_t NH = c->mamba_num_heads;
	if (NH % G)
		return cfg_err("--mamba-num-groups %lld does not divide the %lld Mamba heads", G, NH);
	if (NH % tp || G % tp)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size %d must divide the %lld Mamba heads and "
			       "--mamba-num-groups %lld", tp, (long long)NH, (long long)G);
	if (NH > 1 << 20 || P > 1 << 16 || N > 1 << 16 || NH * P > 1 << 24)
		return mgt_err(MGT_ERR_USAGE, "Mamba sizes %lld heads x --mamba-head-dim %lld, --mamba-state-dim %lld: more "
			       "than mgt supports", (long long)NH, (long long)P, (long long)N);
	return MGT_OK;
}

static mgt_status config_derive(mgt_model_config *c, int tp)
{
	mgt_status hs = hybrid_derive(c, tp);
	if (hs) return hs;
	if (c->num_layers <= 0 || c->hidden_size <= 0 || c->num_attention_heads <= 0)
		return mgt_err(MGT_ERR_USAGE, "--num-layers, --hidden-size and --num-attention-heads "
			       "must be given (a --model preset or flags) and positive");
	if (!c->kv_channels) {
		if (c->hidden_size % c->num_attention_heads)
			return cfg_err("--num-attention-heads %lld does not divide --hidden-size %lld",
				       c->num_attention_heads, c->hidden_size);
		c->kv_channels = c->hidden_size / c->num_attention_heads;
	}
	if (!c->ffn_hidden_size)
		c->ffn_hidden_size = c->swiglu ? (int64_t)((4.0 * c->hidden_size * 2 / 3) / 64) * 64
					       : 4 * c->hidden_size;
	if (c->num_experts > 0 && !c->moe_ffn_hidden_size) c->moe_ffn_hidden_size = c->ffn_hidden_size;
	if (!c->group_query_attention) c->num_query_groups = c->num_attention_heads;
	/* RoPE and no positions need no table: default it to the sequence length */
	if (!c->max_position_embeddings && strcmp(c->position_embedding_type, "learned_absolute"))
		c->max_position_embeddings = c->seq_length;
	if (c->num_query_groups <= 0 || c->num_attention_heads % c->num_query_groups)
		return cfg_err("--num-query-groups %lld does not divide --num-attention-heads %lld",
			       c->num_query_groups, c->num_attention_heads);
	int64_t div = c->make_vocab_size_divisible_by * tp;
	if (div <= 0)
		return mgt_err(MGT_ERR_USAGE, "--make-vocab-size-divisible-by %lld must be positive",
			       (long long)c->make_vocab_size_divisible_by);
	mgt_status st = config_bounds(c);
	if (st) return st;
	c->padded_vocab_size = (c->vocab_size + div - 1) / div * div;
	return MGT_OK;
}

static mgt_status config_check(const mgt_model_config *c, int tp)
{
	bool learned = !strcmp(c->position_embedding_type, "learned_absolute");
	bool rope = !strcmp(c->position_embedding_type, "rope");
	const mgt_family *fam = mgt_family_find(c->family);
	bool rel_ok = fam && fam->relative_positions, relative = rel_ok && !strcmp(c->position_embedding_type, "relative");
	if (!learned && !rope && !relative && strcmp(c->position_embedding_type, "none"))
		return mgt_err(MGT_ERR_USAGE, "--position-embedding-type %s: expected learned_absolute, rope or none%s",
			       c->position_embedding_type, rel_ok ? " or relative" : " (relative: T5 only)");
	if (strcmp(c->normalization, "LayerNorm") && strcmp(c->normalization, "RMSNorm"))
		return mgt_err(MGT_ERR_USAGE, "--normalization %s: expected LayerNorm or RMSNorm",
			       c->normalization);
	if (!fam) return mgt_err(MGT_ERR_USAGE, "model family '%s': expected %s", c->family, mgt_model_family_names());
	if (!fam->moe && c->num_experts > 0)
		return mgt_err(MGT_ERR_USAGE, "--num-experts with a %s model: MoE layers are not implemented there",
			       fam->title);
	if (c->seq_length <= 0) return mgt_err(MGT_ERR_USAGE, "--seq-length must be given and positive");
	if (c->seq_length > c->max_position_embeddings)
		return cfg_err("--seq-length %lld is longer than --max-position-embeddings %lld",
			       c->seq_length, c->max_position_embeddings);
	int rot = (int)(c->kv_channels * c->rotary_percent);
	if (rope && (rot <= 0 || rot % 2 || rot > c->kv_channels))
		return cfg_err("rotary dimension %lld (kv channels x --rotary-percent) must be even and "
			       "in 2..%lld", rot, c->kv_channels);
	if (c->use_rope_scaling && !rope)
		return mgt_err(MGT_ERR_USAGE, "--use-rope-scaling needs --position-embedding-type rope (not %s)",
			       c->position_embedding_type);
	if (c->use_rope_scaling &&
	    (!(c->rope_scaling_factor > 0) || !(c->rope_scaling_low_freq_factor > 0) ||
	     !(c->rope_scaling_high_freq_factor > c->rope_scaling_low_freq_factor) ||
	     c->rope_scaling_original_max_position_embeddings <= 0))
		return mgt_err(MGT_ERR_USAGE, "--rope-scaling-factor %g, --rope-scaling-low-freq-factor %g, "
			       "--rope-scaling-high-freq-factor %g, --rope-scaling-original-max-position-embeddings "
			       "%lld: expected a positive factor, 0 < low < high and a positive length",
			       c->rope_scaling_factor, c->rope_scaling_low_freq_factor,
			       c->rope_scaling_high_freq_factor,
			       (long long)c->rope_scaling_original_max_position_embeddings);
	if (c->vocab_size <= 0)
		return mgt_err(MGT_ERR_USAGE, "vocabulary size %lld must be positive", (long long)c->vocab_size);
	if (c->num_attention_heads % tp || c->num_query_groups % tp)
		return cfg_err("--tensor-model-parallel-size %lld must divide the attention heads and query "
			       "groups (%lld)", tp, c->num_query_groups);
	if (c->ffn_hidden_size % tp)
		return cfg_err("--tensor-model-parallel-size %lld must divide --ffn-hidden-size %lld", tp,
			       c->ffn_hidden_size);
	if (c->squared_relu && (c->swiglu || c->openai_gelu))
		return mgt_err(MGT_ERR_USAGE, "--squared-relu with --%s: the MLP has one activation",
			       c->swiglu ? "swiglu" : "openai-gelu");
	if (c->hidden_dropout < 0 || c->hidden_dropout >= 1 || c->attention_dropout < 0 ||
	    c->attention_dropout >= 1)
		return mgt_err(MGT_ERR_USAGE, "--hidden-dropout and --attention-dropout must be in [0, 1)");
	return MGT_OK;
}

int64_t mgt_model_padding_params(const mgt_model_config *c)
{
	int64_t rows = c->padded_vocab_size > c->vocab_size ? c->padded_vocab_size - c->vocab_size : 0;
	/* BERT's output_layer.bias has a padding row per padded vocabulary row too */
	return rows * (c->hidden_size * (c->untie_embeddings_and_output_weights ? 2 : 1) + (mgt_model_family(c)->lm_head ? 1 : 0));
}

mgt_status mgt_model_config_finalize(mgt_model_config *c, int tp)
{
	mgt_status st = config_derive(c, tp);
	if (!st) st = config_check(c, tp);
	return st ? st : mgt_moe_config_check(c, tp);
}

/* ---- the table ---- */

/* A hybrid pattern with '|': pipeline stage `stage` is its segment of that index. */
static mgt_status segment_layers(const mgt_model_config *c, int nstages, int stage, int64_t *first, int64_t *n)
{
	int segs = 1;
	for (const char *p = c->hybrid_layer_pattern; *p; p++) segs += *p == '|';
	if (segs != nstages)
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern '%s': %d pipeline segments ('|'), not one per pipeline "
			       "stage (%d: --pipeline-model-parallel-size x virtual stages)", c->hybrid_layer_pattern, segs, nstages);
	if (c->decoder_first_pipeline_num_layers > 0 || c->decoder_last_pipeline_num_layers > 0)
		return mgt_err(MGT_ERR_USAGE, "--decoder-first/last-pipeline-num-layers with a --hybrid-layer-pattern that has "
			       "'|': the segments already split the pipeline");
	*first = 0;
	for (int s = 0; s < stage; s++) *first += mgt_hybrid_segment_layers(c, s);
	*n = mgt_hybrid_segment_layers(c, stage);
	return MGT_OK;
}

mgt_status mgt_stage_layers(const mgt_model_config *c, int nstages, int stage, int64_t *first, int64_t *n)
{
	if (strchr(c->hybrid_layer_pattern, '|')) return segment_layers(c, nstages, stage, first, n);
	int64_t L = c->num_layers, F = c->decoder_first_pipeline_num_layers, E = c->decoder_last_pipeline_num_layers;
	bool uneven = F > 0 || E > 0;
	int mid = nstages - (F > 0) - (E > 0);
	int64_t rest = L - F - E;
	*first = *n = 0;
	if (uneven && (nstages < 2 || rest < 0 || (mid > 0 && (rest % mid || rest == 0)) || (mid == 0 && rest)))
		return mgt_err(MGT_ERR_USAGE, "--decoder-first-pipeline-num-layers %lld and --decoder-last-pipeline-num-layers "
			       "%lld leave %lld of --num-layers %lld for %d middle pipeline stages: they must divide evenly "
			       "(and there must be 2 or more stages)", (long long)F, (long long)E, (long long)rest,
			       (long long)L, mid);
	if (!uneven && L % nstages)
		return mgt_err(MGT_ERR_USAGE, "--num-layers %lld is not divisible by the %d pipeline stages (pipeline "
			       "size x virtual stages)", (long long)L, nstages);
	int64_t per = uneven ? (mid ? rest / mid : 0) : L / nstages;
	int64_t head = F > 0 ? F : per;
	*first = stage == 0 ? 0 : head + (int64_t)(stage - 1) * per;
	*n = stage == 0 ? head : (E > 0 && stage == nstages - 1) ? E : per;
	return MGT_OK;
}

static int stage_of_layer(const mgt_rows *bd, int layer)
{
	for (int s = 0; s < bd->pp; s++) {
		int64_t f, n;
		if (mgt_stage_layers(bd->c, bd->pp, s, &f, &n)) break;
		if (layer < f + n) return s;
	}
	return bd->pp - 1;
}

bool mgt_tensor_is_norm_weight(const mgt_tensor *t)
{
	return t->role == MGT_T_LN1_W || t->role == MGT_T_LN2_W || t->role == MGT_T_FINAL_LN_W || t->role == MGT_T_QNORM_W ||
	       t->role == MGT_T_KNORM_W || t->role == MGT_T_LMH_LN_W || t->role == MGT_T_XLN_W ||
	       t->role == MGT_T_ENC_FINAL_LN_W;
}

mgt_status mgt_tensor_table_build(mgt_tensor_table *tt, const mgt_model_config *c, int tp,
				  int tp_rank, int pp, int pp_rank)
{
	return mgt_tensor_table_build_ep(tt, c, tp, tp_rank, pp, pp_rank, 1, 0);
}

mgt_status mgt_tensor_table_build_ep(mgt_tensor_table *tt, const mgt_model_config *c, int tp, int tp_rank, int pp,
				     int pp_rank, int ep, int ep_rank)
{
	memset(tt, 0, sizeof *tt);
	mgt_rows bd = { .tt = tt, .c = c, .fam = mgt_model_family(c), .tp = tp, .tp_rank = tp_rank, .pp = pp,
		       .pp_rank = pp_rank, .ep = ep, .ep_rank = ep_rank };
	if (c->num_experts && (ep < 1 || c->num_experts % ep))
		return mgt_err(MGT_ERR_USAGE, "--expert-model-parallel-size %d does not divide --num-experts %lld", ep,
			       (long long)c->num_experts);
	int64_t h = c->hidden_size, V = c->padded_vocab_size;
	double std = c->init_method_std;
	bool first = pp_rank == 0, last = pp_rank == pp - 1, bert = bd.fam->lm_head;
	if (bd.fam->recipe == MGT_STACK_ENCODER_DECODER) {
		if (pp > 1)
			return mgt_err(MGT_ERR_USAGE, "--pipeline-model-parallel-size %d with a T5 model: pipeline "
				       "parallelism is not supported for T5 (as pretrain_t5.py refuses it)", pp);
		mgt_t5_rows(&bd);
		if (!bd.st) bd.st = mgt_tensor_table_layout(tt, 1, false, 0, false);
		if (bd.st) mgt_tensor_table_free(tt);
		return bd.st;
	}
	if (first || (last && !c->untie_embeddings_and_output_weights))
		mgt_rows_add(&bd, -1, MGT_T_WORD_EMB, "embedding.word_embeddings.weight", V, h, MGT_SHARD_VOCAB,
			     MGT_INIT_NORMAL, std);
	if (first && !strcmp(c->position_embedding_type, "learned_absolute"))
		mgt_rows_add(&bd, -1, MGT_T_POS_EMB, "embedding.position_embeddings.weight", c->max_position_embeddings,
			     h, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	if (first && bert) mgt_bert_rows_embedding(&bd);
	for (int i = 0; i < c->num_layers; i++)
		if (stage_of_layer(&bd, i) == pp_rank) mgt_rows_layer(&bd, i);
	if (last && bert) mgt_bert_rows_heads(&bd);
	else if (last) {
		/* HybridStack names it final_norm (megatron/core/models/hybrid/hybrid_block.py) */
		bool hy = c->hybrid_layer_pattern[0];
		mgt_rows_norm(&bd, -1, MGT_T_FINAL_LN_W, hy ? "decoder.final_norm.weight" : "decoder.final_layernorm.weight",
			      hy ? "decoder.final_norm.bias" : "decoder.final_layernorm.bias");
		if (c->untie_embeddings_and_output_weights)
			mgt_rows_add(&bd, -1, MGT_T_OUTPUT_W, "output_layer.weight", V, h, MGT_SHARD_VOCAB,
				     MGT_INIT_NORMAL, std);
	}
	for (int i = 0; i < tt->n; i++)
		tt->t[i].pp_stage = tt->t[i].layer >= 0 ? stage_of_layer(&bd, tt->t[i].layer) : pp_rank;
	if (!bd.st) bd.st = mgt_tensor_table_layout(tt, 1, false, 0, false);
	if (bd.st) mgt_tensor_table_free(tt);
	return bd.st;
}

void mgt_tensor_table_free(mgt_tensor_table *tt)
{
	free(tt->t);
	free(tt->buckets);
	memset(tt, 0, sizeof *tt);
}

/* ---- the flat buffer layout ---- */

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t gcd(size_t a, size_t b) { return b ? gcd(b, a % b) : a; }

typedef struct {
	mgt_tensor_table *tt;
	size_t start, bucket_start, pad;
	int cap;
	bool expert; /* the open bucket holds expert rows */
	mgt_status st;
} layout_state;

/* Close the bucket [bucket_start, end), padded; the next one starts after it. */
static void close_bucket(layout_state *ls, size_t end)
{
	mgt_tensor_table *tt = ls->tt;
	if (ls->st || end == ls->bucket_start) return;
	if (tt->nbuckets == ls->cap) {
		ls->cap = ls->cap ? 2 * ls->cap : 4;
		mgt_bucket *b = mgt_realloc(tt->buckets, (size_t)ls->cap * sizeof *b);
		if (!b) { ls->st = MGT_ERR_NOMEM; return; }
		tt->buckets = b;
	}
	size_t padded = round_up(end, ls->pad);
	tt->buckets[tt->nbuckets++] = (mgt_bucket){ ls->bucket_start, padded - ls->bucket_start, ls->expert };
	ls->start = ls->bucket_start = padded;
}

mgt_status mgt_tensor_table_layout(mgt_tensor_table *tt, int dp, bool distopt, int64_t bucket_size,
				   bool shared_embedding)
{
	free(tt->buckets);
	tt->buckets = NULL;
	tt->nbuckets = 0;
	bool units = bucket_size == MGT_BUCKETS_PER_LAYER;
	layout_state ls = { .tt = tt, .pad = units ? (size_t)dp * MGT_PAGE_FLOATS
					       : distopt ? (size_t)dp * 128 / gcd((size_t)dp, 128) : 1 };
	for (int i = tt->n - 1; i >= 0; i--) {
		mgt_tensor *t = &tt->t[i];
		bool shared = shared_embedding && t->role == MGT_T_WORD_EMB, expert = t->num_experts > 0;
		bool unit = units && i < tt->n - 1 && t->layer != tt->t[i + 1].layer;
		if (distopt) ls.start = round_up(ls.start, 64);
		/* expert rows go to buckets of their own (reduced over the expert-data-parallel group) */
		if (shared || unit || (expert != ls.expert && ls.start > ls.bucket_start)) close_bucket(&ls, ls.start);
		ls.expert = expert;
		t->offset = ls.start;
		size_t end = ls.start + t->numel;
		if ((bucket_size > 0 && end - ls.bucket_start >= (size_t)bucket_size) || shared) close_bucket(&ls, end);
		else ls.start = end;
	}
	close_bucket(&ls, ls.start);
	tt->buf_numel = ls.start;
	return ls.st;
}

/* Local rows [a[k], b[k]) of t that map to consecutive global rows starting at g0[k] (segment
 * k; returns their count): one, ROW_GLU's two halves or ROW_BLOCKS's blocks, each piece rank
 * local_offset[0] / local rows of its block. */
static int segments(const mgt_tensor *t, int64_t a[MGT_TENSOR_MAX_BLOCKS], int64_t b[MGT_TENSOR_MAX_BLOCKS],
		    int64_t g0[MGT_TENSOR_MAX_BLOCKS])
{
	int64_t R = t->local_shape[0], two[2] = { t->shape[0] / 2, t->shape[0] / 2 };
	if (t->shard != MGT_SHARD_ROW_GLU && t->shard != MGT_SHARD_ROW_BLOCKS) {
		a[0] = 0; b[0] = R; g0[0] = t->local_offset[0];
		return 1;
	}
	const int64_t *blk = t->shard == MGT_SHARD_ROW_GLU ? two : t->blocks;
	int n = t->shard == MGT_SHARD_ROW_GLU ? 2 : t->nblocks;
	int64_t tp = R ? t->shape[0] / R : 1, rank = R ? t->local_offset[0] / R : 0, la = 0, ga = 0;
	for (int k = 0; k < n; k++) {
		int64_t lr = blk[k] / tp;
		a[k] = la; b[k] = la + lr; g0[k] = ga + lr * rank;
		la += lr;
		ga += blk[k];
	}
	return n;
}

static void put_box(const mgt_tensor *t, int64_t grow, int64_t col, int64_t rows, int64_t cols, size_t first,
		    int64_t off[2], int64_t shape[2], size_t *f)
{
	off[0] = grow;
	shape[0] = rows;
	if (t->ndim == 2) {
		off[1] = t->local_offset[1] + col;
		shape[1] = cols;
	}
	*f = first;
}

int mgt_tensor_boxes(const mgt_tensor *t, size_t lo, size_t hi, int64_t off[MGT_TENSOR_MAX_BOXES][2],
		     int64_t shape[MGT_TENSOR_MAX_BOXES][2], size_t first[MGT_TENSOR_MAX_BOXES])
{
	int64_t a[MGT_TENSOR_MAX_BLOCKS], b[MGT_TENSOR_MAX_BLOCKS], g0[MGT_TENSOR_MAX_BLOCKS];
	int64_t C = t->ndim == 2 ? t->local_shape[1] : 1;
	int ns = segments(t, a, b, g0), n = 0;
	for (int k = 0; k < ns; k++) {
		int64_t x = (int64_t)lo > a[k] * C ? (int64_t)lo : a[k] * C;
		int64_t y = (int64_t)hi < b[k] * C ? (int64_t)hi : b[k] * C;
		if (x >= y) continue;
		int64_t rs = x / C, cs = x % C, re = (y - 1) / C, ce = (y - 1) % C + 1, base = g0[k] - a[k];
		if (rs == re) {
			put_box(t, base + rs, cs, 1, ce - cs, (size_t)x, off[n], shape[n], &first[n]);
			n++;
			continue;
		}
		if (cs > 0) {
			put_box(t, base + rs, cs, 1, C - cs, (size_t)x, off[n], shape[n], &first[n]);
			n++;
			rs++;
		}
		int64_t full_end = ce < C ? re : re + 1;
		if (full_end > rs) {
			put_box(t, base + rs, 0, full_end - rs, C, (size_t)(rs * C), off[n], shape[n], &first[n]);
			n++;
		}
		if (ce < C) {
			put_box(t, base + re, 0, 1, ce, (size_t)(re * C), off[n], shape[n], &first[n]);
			n++;
		}
	}
	return n;
}

const mgt_tensor *mgt_tensor_table_find(const mgt_tensor_table *tt, const char *name)
{
	for (int i = 0; i < tt->n; i++)
		if (!strcmp(tt->t[i].name, name)) return &tt->t[i];
	return NULL;
}

/* Global row of local row r: ROW_GLU keeps [gate_r; up_r] locally (section 6.3), ROW_BLOCKS
 * its blocks' pieces in order. */
static int64_t global_row(const mgt_tensor *t, int64_t r)
{
	int64_t a[MGT_TENSOR_MAX_BLOCKS], b[MGT_TENSOR_MAX_BLOCKS], g0[MGT_TENSOR_MAX_BLOCKS];
	int n = segments(t, a, b, g0);
	for (int k = 0; k < n; k++)
		if (r < b[k]) return g0[k] + r - a[k];
	return g0[n - 1] + r - a[n - 1];
}

/* Element e of global tensor t under its initializer (model.h mgt_init_kind), drawn from
 * Philox(key, e): the normal deviate, or a uniform u in (0, 1). */
static float init_value(const mgt_tensor *t, uint64_t key, uint64_t e)
{
	uint32_t w[4];
	double u = 0;
	switch (t->init) {
	case MGT_INIT_ZERO: return 0.0f;
	case MGT_INIT_ONE: return 1.0f;
	case MGT_INIT_NORMAL: return (float)(mgt_philox_normal(key, e) * t->init_std);
	default: break;
	}
	mgt_philox(key, 0, e, w);
	u = ((double)w[0] + 0.5) * 0x1p-32;
	if (t->init == MGT_INIT_UNIFORM) return (float)((2.0 * u - 1.0) * t->init_std);
	if (t->init == MGT_INIT_A_LOG) return (float)log(1.0 + 15.0 * u);
	double dt = exp(u * (log(0.1) - log(0.001)) + log(0.001)); /* MGT_INIT_DT_BIAS */
	dt = dt < 1e-4 ? 1e-4 : dt;
	return (float)(dt + log(-expm1(-dt)));
}

void mgt_tensor_table_init_range(const mgt_tensor_table *tt, float *params, uint64_t seed, size_t lo, size_t hi)
{
	uint64_t skey = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *t = &tt->t[i];
		size_t a, b;
		if (!mgt_tensor_overlap(t, lo, hi, &a, &b)) continue;
		int64_t cols = t->ndim == 2 ? t->local_shape[1] : 1, gcols = t->ndim == 2 ? t->shape[1] : 1;
		int64_t r0 = (int64_t)((a - t->offset) / (size_t)cols), r1 = (int64_t)((b - t->offset + (size_t)cols - 1) / (size_t)cols);
		uint64_t key = mgt_hash64(t->name) ^ skey;
		/* each element is a pure function of (key, index): threads cannot change the values */
#pragma omp parallel for schedule(static) if (b - a > 65536)
		for (int64_t r = r0; r < r1; r++) {
			int64_t gr = global_row(t, r);
			for (int64_t k = 0; k < cols; k++) {
				size_t e = t->offset + (size_t)(r * cols + k);
				if (e >= a && e < b) params[e - lo] = init_value(t, key, (uint64_t)(gr * gcols + t->local_offset[1] + k));
			}
		}
	}
}

void mgt_tensor_table_init(const mgt_tensor_table *tt, float *params, uint64_t seed)
{
	mgt_tensor_table_init_range(tt, params, seed, 0, tt->buf_numel);
}

void mgt_model_rope_inv_freq(const mgt_model_config *c, float *out)
{
	int rot = (int)(c->kv_channels * c->rotary_percent), half = rot / 2;
	float base = (float)c->rotary_base;
	/* torch.pow(scalar, fp32 tensor) and Python float / fp32 tensor work in fp32 with the
	 * scalar rounded to fp32; "x / t" of a scalar x is t.reciprocal() * x (Tensor.__rtruediv__) */
	float factor = (float)c->rope_scaling_factor, low = (float)c->rope_scaling_low_freq_factor;
	double orig = (double)c->rope_scaling_original_max_position_embeddings;
	float lo_wl = (float)(orig / c->rope_scaling_low_freq_factor);
	float hi_wl = (float)(orig / c->rope_scaling_high_freq_factor);
	float span = (float)(c->rope_scaling_high_freq_factor - c->rope_scaling_low_freq_factor);
	for (int k = 0; k < half; k++) {
		float f = 1.0f / powf(base, (float)(2 * k) / (float)rot);
		if (c->use_rope_scaling) {
			float wavelen = (1.0f / f) * (float)(2.0 * M_PI);
			float il = wavelen > lo_wl ? f / factor : f;
			float sm = ((1.0f / wavelen) * (float)orig - low) / span;
			float smoothed = (1.0f - sm) * il / factor + sm * il;
			bool medium = !(wavelen < hi_wl) && !(wavelen > lo_wl);
			f = medium ? smoothed : il;
		}
		out[k] = f;
	}
}

/* A hybrid model's FLOPs (megatron/training/training.py num_floating_point_operations,
 * hybrid_flops): per symbol, attention 4 B s h p (h + h g / nh + s / 2) with p = kv nh / h, MLP
 * 4 (ffn / h) (3/2 with SwiGLU) B s h^2, MoE the top-k experts' and the shared expert's 4 B s h
 * F (x 3/2 with SwiGLU), Mamba 2 B s h (2 d_in + 2 G N + NH) + 7 B s d_in N + 2 B s d_in h with
 * Megatron's d_in = 2 h; the logits 2 B s h V; all x 3 (forward and backward). */
static double hybrid_flops(const mgt_model_config *c, int64_t gbs)
{
	double B = (double)gbs, s = (double)c->seq_length, h = (double)c->hidden_size, nh = (double)c->num_attention_heads;
	double p = (double)c->kv_channels * nh / h, glu = c->swiglu ? 1.5 : 1.0, din = 2 * h, N = (double)c->mamba_state_dim;
	double attn = 4 * B * s * h * p * (h + h * (double)c->num_query_groups / nh + s / 2);
	double mlp = 4 * ((double)c->ffn_hidden_size / h) * glu * B * s * h * h;
	/* the routed experts run in the latent width, plus the projections' 4 B s h latent
	 * (training.py moe_layer_flops) */
	double lat = (double)c->moe_latent_size, eh = lat > 0 ? lat : h;
	double moe = 4 * B * s * glu * (eh * (double)c->moe_ffn_hidden_size * (double)c->moe_router_topk +
					h * (double)c->moe_shared_expert_intermediate_size) + 4 * B * s * h * lat;
	double mamba = 2 * B * s * h * (2 * din + 2 * (double)c->mamba_num_groups * N + (double)c->mamba_num_heads) +
		       7 * B * s * din * N + 2 * B * s * din * h;
	double f = 2 * B * s * h * (double)c->padded_vocab_size;
	for (const char *k = c->hybrid_layer_pattern; *k; k++)
		f += *k == MGT_LAYER_ATTENTION ? attn : *k == MGT_LAYER_MLP ? mlp : *k == MGT_LAYER_MOE ? moe
		   : *k == MGT_LAYER_MAMBA ? mamba : 0;
	return 3 * f;
}

double mgt_model_flops(const mgt_model_config *c, int64_t gbs)
{
	if (c->hybrid_layer_pattern[0]) return hybrid_flops(c, gbs);
	double h = (double)c->hidden_size, s = (double)c->seq_length, L = (double)c->num_layers;
	double kv = (double)c->kv_channels, nq = (double)c->num_attention_heads;
	double ng = (double)c->num_query_groups, E = c->swiglu ? 3 : 2, ffn = (double)c->ffn_hidden_size;
	double q = kv * nq, k = kv * ng;
	double attn_lin = 6 * (h * (q + 2 * k) + q * h), attn_core = 6 * q;
	/* MoE (Megatron's num_floating_point_operations): a dense layer's MLP, or top-k experts of
	 * moe_ffn_hidden_size (in latent / h of the width and 2 latent for the projections with
	 * --moe-latent-size) plus the shared expert; the router's GEMM is not counted */
	double n_moe = 0;
	for (int64_t l = 0; l < c->num_layers; l++) n_moe += mgt_moe_is_layer(c, l);
	double lat = (double)c->moe_latent_size, routed = (double)c->moe_ffn_hidden_size * (double)c->moe_router_topk * E;
	double moe = (lat > 0 ? routed * lat / h + 2 * lat : routed) + (double)c->moe_shared_expert_intermediate_size * E;
	double mlp = 6 * h * (ffn * E * (L - n_moe) + moe * n_moe), logit = 6 * h * (double)c->padded_vocab_size;
	double tokens = (double)gbs * s;
	return tokens * (mlp + attn_lin * L + logit) + (double)gbs * s * s * attn_core * L;
}
