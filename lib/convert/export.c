/* lib/convert/export.c: an mgt checkpoint or a Hugging Face directory to GGUF v3 as llama.cpp
 * reads it (mgt-export(1)).  Names and metadata keys: llama.cpp's gguf-py (constants.py
 * TENSOR_NAMES, Keys) and convert_hf_to_gguf.py; layout: ggml docs/gguf.md. */
#include "convert_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tok/tok.h"

/* The model being exported, from either source. */
typedef struct {
	const mgt_export_opts *o;
	mgt_convert_opts co;
	hf_out out;               /* the model source (mgt checkpoint or Hugging Face directory) */
	bool opened;
	const mgt_model_config *c;
	mgt_hf_family f;
	const char *prefix;
	const mgt_tensor_table *full;
	mgt_gguf_writer *w;
	mgt_tok_vocab voc;
	bool have_voc;
	const char *arch;         /* general.architecture */
	const mgt_tensor *cur;    /* the row each_tensor is at */
} exporter;

static bool hybrid(const exporter *e) { return mgt_hf_spec_of(e->f)->names == MGT_HF_NAMES_BACKBONE; }

/* What llama.cpp's nemotron_h_moe cannot compute of hybrid MoE model c (mgt-train's flag), or NULL.
 * Its MoE layer (llama_model_nemotron_h graph build_ffn_layer; build_moe_ffn): sigmoid scores of
 * ffn_gate_inp (the gating function is fixed), the top-k of scores + exp_probs_b (after keeping the
 * expert_group_used_count groups of the largest sums of their top 2, -inf elsewhere), weights the
 * scores of the chosen, normalized when expert_weights_norm, times expert_weights_scale; experts
 * and the shared expert up, squared ReLU, down (no gate); every MLP layer of a file with experts is
 * an MoE layer, and the shared expert is required.  (What NemotronH cannot hold is refused before,
 * exit 3: softmax routers, no expert bias, SwiGLU or gated shared experts; mgt-ckpt-convert(1).) */
static const char *moe_unexportable(const mgt_model_config *c)
{
	if (strcmp(c->moe_router_score_function, "sigmoid"))
		return "--moe-router-score-function softmax (llama.cpp's nemotron_h_moe routes by sigmoid scores)";
	if (c->swiglu) return "--swiglu (llama.cpp's nemotron_h_moe experts have no gate)";
	if (!c->squared_relu) return "GELU experts (llama.cpp's nemotron_h_moe experts compute squared ReLU: --squared-relu)";
	if (!c->moe_shared_expert_intermediate_size)
		return "no shared expert (llama.cpp's nemotron_h_moe requires one: --moe-shared-expert-intermediate-size)";
	if (c->moe_shared_expert_gate) return "--moe-shared-expert-gate (llama.cpp's nemotron_h_moe shared expert has no gate)";
	if (c->moe_expert_capacity_factor > 0)
		return "--moe-expert-capacity-factor (token dropping; llama.cpp's nemotron_h_moe drops no tokens)";
	if (c->moe_router_num_groups > 1 && c->moe_router_group_topk > 0 && c->moe_router_group_topk < c->moe_router_num_groups &&
	    c->moe_router_topk / c->moe_router_group_topk != 2)
		return "--moe-router-group-topk with --moe-router-topk / --moe-router-group-topk other than 2 (llama.cpp "
		       "scores a group by its top 2 scores, Megatron by its top topk / group-topk)";
	if (strchr(c->hybrid_layer_pattern, '-'))
		return "MLP layers ('-') beside MoE layers (llama.cpp's nemotron_h_moe makes every MLP layer of a file "
		       "with experts an MoE layer)";
	return NULL;
}

/* A hybrid model's GGUF architecture: mamba2 when every layer is a Mamba layer (llama.cpp's
 * grouped gated norm, whatever the groups), nemotron_h_moe when it has MoE layers (moe_unexportable
 * says what that refuses), else nemotron_h, whose MLP layers compute squared ReLU (llama.cpp's
 * llm_build_nemotron_h build_ffn_layer, LLM_FFN_RELU_SQR): a model whose MLP layers compute GELU is
 * refused, one trained with --squared-relu exported. */
static mgt_status hybrid_arch(exporter *e)
{
	const char *p = e->c->hybrid_layer_pattern;
	bool mamba_only = true;
	for (const char *q = p; *q; q++) mamba_only &= *q == 'M' || *q == '|';
	e->arch = mamba_only ? "mamba2" : strchr(p, 'E') ? "nemotron_h_moe" : "nemotron_h";
	const char *why = strchr(p, 'E') ? moe_unexportable(e->c) : NULL;
	if (why)
		return mgt_err(MGT_ERR_USAGE, "%s: the hybrid model has MoE layers (pattern %s) trained with %s: not exported "
			       "to GGUF (llama.cpp's nemotron_h_moe cannot compute it)", e->o->load_dir, p, why);
	if (!strchr(p, 'M'))
		return mgt_err(MGT_ERR_USAGE, "%s: the hybrid model has no Mamba layer (pattern %s): llama.cpp's nemotron_h "
			       "aborts loading such a file (no recurrent state; seen with node-llama-cpp 3.22.1), so it is "
			       "not exported to GGUF", e->o->load_dir, p);
	if (strchr(p, '-') && !e->c->squared_relu)
		return mgt_err(MGT_ERR_USAGE, "%s: the hybrid model has MLP layers ('-' in its pattern %s), which llama.cpp's "
			       "nemotron_h computes with squared ReLU while this model's use GELU (a model trained with "
			       "--squared-relu exports): not exported to GGUF (mgt-ckpt-convert writes it as a nemotron_h "
			       "Hugging Face directory)", e->o->load_dir, p);
	return MGT_OK;
}

static mgt_status open_source(exporter *e)
{
	e->co = (mgt_convert_opts){.load_dir = e->o->load_dir, .tp = 1, .pp = 1, .ckpt_step = e->o->ckpt_step,
				   .family = e->o->family};
	e->out.o = &e->co;
	e->opened = true;
	mgt_status st = cv_mgt_open(&e->out, true);
	e->c = &e->out.a.model, e->f = e->out.f, e->prefix = e->out.prefix, e->full = &e->out.full;
	if (!st && !hybrid(e)) st = cv_no_experts(&e->out); /* Mixtral, Qwen-MoE: not exported */
	if (!st) e->arch = mgt_hf_spec_of(e->f)->gguf_arch;
	if (!st && hybrid(e)) st = hybrid_arch(e);
	if (!st && !mgt_hf_spec_of(e->f)->gguf_arch)
		st = mgt_err(MGT_ERR_USAGE, "%s: a BERT (%s), which is not exported to GGUF (only decoder models are; "
			     "mgt-ckpt-convert writes it as a Hugging Face directory)", e->o->load_dir, mgt_hf_model_type(e->f));
	return st;
}

/* A tokenizer file path as recorded: absolute, relative to the checkpoint directory (the
 * converter's hf/...), or relative to the working directory. */
static char *resolve(const char *dir, const char *p)
{
	if (!p || !*p) return NULL;
	struct stat sb;
	size_t n = strlen(dir) + strlen(p) + 2;
	char *q = mgt_malloc(n);
	if (!q) return NULL;
	snprintf(q, n, "%s/%s", dir, p);
	if (p[0] != '/' && stat(q, &sb) == 0) return q;
	snprintf(q, n, "%s", p);
	return q;
}

/* The tokenizer: the source's arguments (a checkpoint's own copies, a Hugging Face directory's
 * files), else the converter's record. */
static mgt_status load_vocab(exporter *e)
{
	const char *dir = e->o->load_dir;
	json_t *tk = json_incref(json_object_get(e->out.meta, "tokenizer"));
	const mgt_args *a = &e->out.a;
	static const char *const keys[4] = {"tokenizer_type", "vocab_file", "merge_file", "tokenizer_model"};
	const char *from_args[4] = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
	char *v[4] = {0};
	for (int i = 0; i < 4; i++) {
		const char *x = from_args[i] ? from_args[i] : json_string_value(json_object_get(tk, keys[i]));
		v[i] = !x ? NULL : i ? resolve(dir, x) : mgt_strdup(x);
	}
	json_decref(tk);
	mgt_tok_opts to = {.type = v[0], .vocab_file = v[1], .merge_file = v[2], .model = v[3],
			   .tiktoken_num_special = 1000, .null_eod_id = -1};
	if (e->o->tok) mgt_tok_opts_apply(&to, e->o->tok);
	mgt_status st = to.type ? MGT_OK : mgt_err(MGT_ERR_VOCAB, "%s: no tokenizer recorded or found (a GGUF embeds "
						   "one): give --tokenizer-type and its files", dir);
	mgt_tok *t = NULL;
	if (!st) st = mgt_tok_load(&t, &to);
	if (!st) st = mgt_tok_vocab_get(t, &e->voc);
	e->have_voc = !st;
	mgt_tok_free(t);
	for (int i = 0; i < 4; i++) free(v[i]);
	return st;
}

/* ---- metadata ---- */

#define TRY(x) do { if (!st) st = (x); } while (0)

static mgt_status kv_u32(exporter *e, const char *key, int64_t v)
{
	char k[96];
	snprintf(k, sizeof k, "%s.%s", e->arch, key);
	return mgt_gguf_set_u32(e->w, k, (uint32_t)v);
}

static mgt_status kv_f32(exporter *e, const char *key, double v)
{
	char k[96];
	snprintf(k, sizeof k, "%s.%s", e->arch, key);
	return mgt_gguf_set_f32(e->w, k, (float)v);
}

/* llama.cpp's file_type numbers (LLAMA_FTYPE_*): ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32. */
static uint32_t file_type(mgt_ggml_type t)
{
	return t == MGT_GGML_F16 ? 1 : t == MGT_GGML_Q8_0 ? 7 : t == MGT_GGML_BF16 ? 32 : 0;
}

/* A per-layer array {arch}.key: v_attn on attention layers ('*'), v_mlp on MLP layers ('-'), v_moe
 * on MoE layers ('E'), 0 on Mamba layers (llama.cpp's nemotron_h: a layer is recurrent iff
 * head_count_kv and feed_forward_length are both 0 there; conversion/nemotron.py). */
static mgt_status kv_layers(exporter *e, const char *key, int64_t v_attn, int64_t v_mlp, int64_t v_moe)
{
	char k[96];
	int32_t v[sizeof e->c->hybrid_layer_pattern];
	size_t n = 0;
	for (const char *p = e->c->hybrid_layer_pattern; *p; p++)
		if (*p != '|') v[n++] = (int32_t)(*p == '*' ? v_attn : *p == '-' ? v_mlp : *p == 'E' ? v_moe : 0);
	snprintf(k, sizeof k, "%s.%s", e->arch, key);
	return mgt_gguf_set_arr_i32(e->w, k, v, n);
}

/* NemotronH's MoE as llama.cpp's nemotron_h_moe reads it (conversion/nemotron.py NemotronHModel
 * set_gguf_parameters; llama_model_nemotron_h::load_arch_hparams; llama-model.cpp load_hparams for
 * the counts and groups): expert_count E, expert_used_count k, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_shared_count 1, expert_weights_norm (Megatron
 * normalizes the chosen sigmoid scores exactly when k > 1), expert_weights_scale (the top-k scaling
 * factor, 1 when unset), expert_gating_func 2 (sigmoid; nemotron_h_moe fixes it anyway),
 * moe_latent_size with --moe-latent-size (llama.cpp: the experts' width, ffn_latent_down before
 * them, ffn_latent_up after, router and shared expert on the full hidden state); with
 * group-limited routing that masks groups, expert_group_count and expert_group_used_count (llama.cpp
 * asserts used < count: routing that keeps every group is written as none). */
static mgt_status moe_kv(exporter *e)
{
	const mgt_model_config *c = e->c;
	char k[96];
	mgt_status st = kv_u32(e, "expert_count", c->num_experts);
	TRY(kv_u32(e, "expert_used_count", c->moe_router_topk));
	TRY(kv_u32(e, "expert_feed_forward_length", c->moe_ffn_hidden_size));
	TRY(kv_u32(e, "expert_shared_feed_forward_length", c->moe_shared_expert_intermediate_size));
	TRY(kv_u32(e, "expert_shared_count", 1));
	snprintf(k, sizeof k, "%s.expert_weights_norm", e->arch);
	TRY(mgt_gguf_set_bool(e->w, k, c->moe_router_topk > 1));
	TRY(kv_f32(e, "expert_weights_scale", c->moe_router_topk_scaling_factor > 0 ? c->moe_router_topk_scaling_factor : 1.0));
	TRY(kv_u32(e, "expert_gating_func", 2));
	if (c->moe_latent_size) TRY(kv_u32(e, "moe_latent_size", c->moe_latent_size)); /* ffn_latent_down / _up */
	if (c->moe_router_num_groups > 1 && c->moe_router_group_topk > 0 && c->moe_router_group_topk < c->moe_router_num_groups) {
		TRY(kv_u32(e, "expert_group_count", c->moe_router_num_groups));
		TRY(kv_u32(e, "expert_group_used_count", c->moe_router_group_topk));
	}
	return st;
}

/* Mamba2 and NemotronH (llama.cpp's conversion/mamba.py Mamba2Model and conversion/nemotron.py
 * set_gguf_parameters; Keys.SSM): ssm.conv_kernel 4, inner_size DI, state_size N, time_step_rank NH,
 * group_count G; mamba2 has no attention or MLP (head_count and feed_forward_length 0), nemotron_h
 * per-layer head_count_kv and feed_forward_length, key/value length head_dim, no RoPE. */
static mgt_status hybrid_kv(exporter *e)
{
	const mgt_model_config *c = e->c;
	bool m2 = !strcmp(e->arch, "mamba2");
	mgt_status st = kv_u32(e, "context_length", c->max_position_embeddings);
	TRY(kv_u32(e, "embedding_length", c->hidden_size));
	TRY(kv_u32(e, "block_count", c->num_layers));
	TRY(kv_u32(e, "vocab_size", c->vocab_size));
	TRY(kv_f32(e, "attention.layer_norm_rms_epsilon", c->norm_epsilon));
	/* llama.cpp releases that read nemotron_h's eps under this key too (node-llama-cpp 3.22.1's) */
	if (!m2) TRY(kv_f32(e, "attention.layer_norm_epsilon", c->norm_epsilon));
	TRY(kv_u32(e, "ssm.conv_kernel", 4));
	TRY(kv_u32(e, "ssm.inner_size", c->mamba_num_heads * c->mamba_head_dim));
	TRY(kv_u32(e, "ssm.state_size", c->mamba_state_dim));
	TRY(kv_u32(e, "ssm.time_step_rank", c->mamba_num_heads));
	TRY(kv_u32(e, "ssm.group_count", c->mamba_num_groups));
	if (m2) {
		TRY(kv_u32(e, "attention.head_count", 0));
		TRY(kv_u32(e, "feed_forward_length", 0));
		return st;
	}
	TRY(kv_u32(e, "attention.head_count", c->num_attention_heads));
	TRY(kv_layers(e, "attention.head_count_kv", c->num_query_groups, 0, 0));
	TRY(kv_layers(e, "feed_forward_length", 0, c->ffn_hidden_size, c->moe_ffn_hidden_size));
	TRY(kv_u32(e, "attention.key_length", c->kv_channels));
	TRY(kv_u32(e, "attention.value_length", c->kv_channels));
	if (!st && strchr(c->hybrid_layer_pattern, 'E')) st = moe_kv(e);
	return st;
}

static mgt_status model_kv(exporter *e, mgt_ggml_type type, const char *name)
{
	const mgt_model_config *c = e->c;
	mgt_status st = mgt_gguf_set_str(e->w, "general.architecture", e->arch);
	TRY(mgt_gguf_set_str(e->w, "general.name", name));
	TRY(mgt_gguf_set_u32(e->w, "general.file_type", file_type(type)));
	if (type == MGT_GGML_Q8_0) TRY(mgt_gguf_set_u32(e->w, "general.quantization_version", 2));
	if (hybrid(e)) return st ? st : hybrid_kv(e);
	TRY(kv_u32(e, "context_length", c->max_position_embeddings));
	TRY(kv_u32(e, "embedding_length", c->hidden_size));
	TRY(kv_u32(e, "feed_forward_length", c->ffn_hidden_size));
	TRY(kv_u32(e, "block_count", c->num_layers));
	TRY(kv_u32(e, "attention.head_count", c->num_attention_heads));
	if (mgt_hf_spec_of(e->f)->names == MGT_HF_NAMES_GPT2) {
		TRY(kv_f32(e, "attention.layer_norm_epsilon", c->norm_epsilon));
		return st;
	}
	TRY(kv_u32(e, "attention.head_count_kv", c->num_query_groups));
	TRY(kv_f32(e, "attention.layer_norm_rms_epsilon", c->norm_epsilon));
	TRY(kv_u32(e, "rope.dimension_count", (int64_t)((double)c->kv_channels * c->rotary_percent)));
	TRY(kv_f32(e, "rope.freq_base", c->rotary_base));
	TRY(kv_u32(e, "vocab_size", c->vocab_size));
	if (c->kv_channels * c->num_attention_heads != c->hidden_size) {
		TRY(kv_u32(e, "attention.key_length", c->kv_channels));
		TRY(kv_u32(e, "attention.value_length", c->kv_channels));
	}
	return st;
}

static mgt_status set_merges(exporter *e)
{
	size_t *len = mgt_malloc(e->voc.nmerges * sizeof *len);
	if (!len) return MGT_ERR_NOMEM;
	for (size_t i = 0; i < e->voc.nmerges; i++) len[i] = strlen(e->voc.merges[i]);
	mgt_status st = mgt_gguf_set_arr_str(e->w, "tokenizer.ggml.merges", (const char *const *)e->voc.merges, len,
					     e->voc.nmerges);
	free(len);
	return st;
}

/* The vocabulary: as many tokens as the embedding has rows, padded with unused "[PADn]". */
static mgt_status tokenizer_kv(exporter *e)
{
	mgt_tok_vocab *v = &e->voc;
	size_t n = (size_t)e->c->vocab_size;
	if (v->n > n)
		return mgt_err(MGT_ERR_VOCAB, "the tokenizer has %zu tokens but the model's embedding %zu rows", v->n, n);
	char **tok = mgt_malloc(n * sizeof *tok);
	size_t *len = tok ? mgt_malloc(n * sizeof *len) : NULL;
	int32_t *type = len ? mgt_malloc(n * sizeof *type) : NULL;
	float *score = type ? mgt_malloc(n * sizeof *score) : NULL;
	char *pads = score && n > v->n ? mgt_malloc((n - v->n) * 24) : NULL;
	mgt_status st = score && (n == v->n || pads) ? MGT_OK : MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < n; i++) {
		if (i < v->n) {
			tok[i] = v->tokens[i], len[i] = v->token_len[i], type[i] = v->types[i];
			score[i] = v->scores ? v->scores[i] : 0;
			continue;
		}
		tok[i] = pads + (i - v->n) * 24;
		len[i] = (size_t)snprintf(tok[i], 24, "[PAD%zu]", i);
		type[i] = 5, score[i] = -1000;
	}
	TRY(mgt_gguf_set_str(e->w, "tokenizer.ggml.model", v->model));
	if (v->pre) TRY(mgt_gguf_set_str(e->w, "tokenizer.ggml.pre", v->pre));
	TRY(mgt_gguf_set_arr_str(e->w, "tokenizer.ggml.tokens", (const char *const *)tok, len, n));
	TRY(mgt_gguf_set_arr_i32(e->w, "tokenizer.ggml.token_type", type, n));
	if (v->scores) TRY(mgt_gguf_set_arr_f32(e->w, "tokenizer.ggml.scores", score, n));
	if (v->nmerges) TRY(set_merges(e));
	static const char *const ids[4] = {"bos", "eos", "unknown", "padding"};
	int32_t id[4] = {v->bos, v->eos, v->unk, v->pad};
	for (int i = 0; i < 4; i++) {
		char k[64];
		snprintf(k, sizeof k, "tokenizer.ggml.%s_token_id", ids[i]);
		if (id[i] >= 0) TRY(mgt_gguf_set_u32(e->w, k, (uint32_t)id[i]));
	}
	TRY(mgt_gguf_set_bool(e->w, "tokenizer.ggml.add_bos_token", v->add_bos != 0));
	free(tok), free(len), free(type), free(score), free(pads);
	return st;
}

/* ---- tensors ---- */

/* The type a tensor is stored as: 1-D tensors stay f32 (as llama.cpp's converter keeps them);
 * q8_0 needs rows that are a multiple of 32 (else f16). */
static mgt_ggml_type tensor_type(mgt_ggml_type want, int ndim, int64_t inner, mgt_gguf_fix fix)
{
	/* llama.cpp's converter keeps the conv, A, D and the norm f32 (its ssm_conv and ssm_scan read f32) */
	if (ndim < 2 || fix >= MGT_GGUF_SQUEEZE) return MGT_GGML_F32;
	if (want == MGT_GGML_Q8_0 && inner % 32) return MGT_GGML_F16;
	return want;
}

/* Llama 3 rope scaling as llama.cpp reads it: rope_freqs.weight [rot_dim / 2] holding the factor
 * each frequency is divided by (Megatron RotaryEmbedding._apply_scaling; convert_hf_to_gguf.py
 * LlamaModel.generate_extra_tensors). */
static void rope_factors(const mgt_model_config *c, float *out, int64_t n)
{
	double lo = c->rope_scaling_low_freq_factor, hi = c->rope_scaling_high_freq_factor;
	double orig = (double)c->rope_scaling_original_max_position_embeddings, f = c->rope_scaling_factor;
	for (int64_t i = 0; i < n; i++) {
		double freq = pow(c->rotary_base, -(double)(2 * i) / (double)(2 * n)), wavelen = 2 * M_PI / freq;
		if (wavelen < orig / hi) out[i] = 1.0f;
		else if (wavelen > orig / lo) out[i] = (float)f;
		else {
			double smooth = (orig / wavelen - lo) / (hi - lo);
			out[i] = (float)(1.0 / ((1 - smooth) / f + smooth));
		}
	}
}

static int64_t rot_half(const mgt_model_config *c) { return (int64_t)((double)c->kv_channels * c->rotary_percent) / 2; }

/* Call fn for every GGUF tensor of row g: its name, fix, shape (PyTorch order) and source k. */
typedef mgt_status (*tensor_fn)(exporter *e, const mgt_hf_map *m, int k, const char *name, mgt_gguf_fix fix,
				int ndim, const int64_t *shape, void *ctx);

static mgt_status each_tensor(exporter *e, const mgt_tensor *g, tensor_fn fn, void *ctx)
{
	mgt_hf_map m;
	mgt_status st = mgt_hf_map_tensor(e->c, e->f, e->prefix, g, &m);
	for (int k = 0; !st && k < m.n; k++) {
		char name[128];
		mgt_gguf_fix fix;
		st = mgt_hf_gguf_name(e->f, e->prefix, m.name[k], name, sizeof name, &fix);
		int64_t shape[3] = {m.shape[k][0], m.shape[k][1], m.shape[k][2]};
		int ndim = m.ndim[k];
		if (fix == MGT_GGUF_TRANSPOSE) shape[0] = m.shape[k][1], shape[1] = m.shape[k][0];
		if (fix == MGT_GGUF_SQUEEZE) ndim = 2, shape[1] = m.shape[k][2]; /* [CD, 1, 4] -> [CD, 4] */
		if (fix == MGT_GGUF_NEG_EXP || fix == MGT_GGUF_COLUMN) ndim = 2, shape[1] = 1; /* [NH] -> [NH, 1] */
		if (fix == MGT_GGUF_GROUPS) /* [DI] -> [G, DI / G] */
			ndim = 2, shape[0] = e->c->mamba_num_groups, shape[1] = m.shape[k][0] / e->c->mamba_num_groups;
		if (fix == MGT_GGUF_EXPERTS) /* expert g->expert's [rows, cols] of the stacked [E, rows, cols] */
			ndim = 3, shape[0] = e->c->num_experts, shape[1] = m.shape[k][0], shape[2] = m.shape[k][1];
		e->cur = g;
		if (!st) st = fn(e, &m, k, name, fix, ndim, shape, ctx);
	}
	return st;
}

static mgt_status declare_one(exporter *e, const mgt_hf_map *m, int k, const char *name, mgt_gguf_fix fix, int ndim,
			      const int64_t *shape, void *ctx)
{
	(void)m, (void)k;
	mgt_ggml_type want = *(mgt_ggml_type *)ctx;
	/* one stacked tensor, declared (and written) at the last expert */
	if (fix == MGT_GGUF_EXPERTS && e->cur->expert != e->c->num_experts - 1) return MGT_OK;
	return mgt_gguf_add_tensor(e->w, name, tensor_type(want, ndim, shape[ndim - 1], fix), ndim, shape);
}

/* Per row: the Hugging Face tensors (carved from s->src) and a buffer for the fixed one (s->whole). */
typedef struct {
	scratch *s;
	float *fixed;
	float *src[3];
	float *stack[2]; /* the experts' up and down weights of one layer, [E, rows, cols] each */
} row_data;

static mgt_status put_one(exporter *e, const mgt_hf_map *m, int k, const char *name, mgt_gguf_fix fix, int ndim,
			  const int64_t *shape, void *ctx)
{
	row_data *r = ctx;
	const float *x = r->src[k];
	int64_t rows = m->shape[k][0], cols = m->ndim[k] == 2 ? m->shape[k][1] : 1;
	(void)ndim, (void)shape;
	if (fix == MGT_GGUF_TRANSPOSE) {
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++) r->fixed[j * rows + i] = x[i * cols + j];
		x = r->fixed;
	} else if (fix == MGT_GGUF_NEG_EXP) { /* A = -exp(A_log) (Mamba2Model.modify_tensors) */
		for (int64_t i = 0; i < rows; i++) r->fixed[i] = -expf(x[i]);
		x = r->fixed;
	} else if (fix == MGT_GGUF_EXPERTS) { /* stacked; written with the last expert */
		float *st = r->stack[e->cur->role == MGT_T_EXP_FC2_W];
		memcpy(st + (size_t)e->cur->expert * (size_t)(rows * cols), x, (size_t)(rows * cols) * sizeof *x);
		if (e->cur->expert != e->c->num_experts - 1) return MGT_OK;
		x = st;
	} else if (fix == MGT_GGUF_PERMUTE_Q || fix == MGT_GGUF_PERMUTE_K) {
		mgt_gguf_permute(x, r->fixed, rows, cols, fix == MGT_GGUF_PERMUTE_Q ? e->c->num_attention_heads
									     : e->c->num_query_groups);
		x = r->fixed;
	}
	return mgt_gguf_put_f32(e->w, name, x);
}

/* The Hugging Face tensors of row g into r->src. */
static mgt_status row_sources(exporter *e, const mgt_tensor *g, row_data *r)
{
	mgt_hf_map m;
	mgt_status st = mgt_hf_map_tensor(e->c, e->f, e->prefix, g, &m);
	size_t at = 0;
	for (int k = 0; !st && k < m.n; k++) {
		r->src[k] = r->s->src + at;
		at += cv_map_numel(&m, k);
	}
	if (!st) st = cv_mgt_read(&e->out, g, r->s->whole);
	if (!st) mgt_hf_from_mgt(e->c, &m, g, r->s->whole, r->src);
	return st;
}

static mgt_status write_tensors(exporter *e)
{
	scratch s = {0};
	mgt_status st = cv_scratch_alloc(&s, e->full, false);
	/* the fixed (transposed or permuted) tensor goes to s.whole, free once a row's Hugging Face
	 * tensors are made; it holds the largest row, so also rope_freqs [rot_dim / 2] */
	row_data r = {.s = &s, .fixed = s.whole};
	const mgt_model_config *c = e->c;
	int64_t eh = c->moe_latent_size ? c->moe_latent_size : c->hidden_size; /* the experts' hidden side */
	size_t ne = c->num_experts > 0 ? (size_t)(c->num_experts * c->moe_ffn_hidden_size * eh) : 0;
	for (int i = 0; !st && ne && i < 2; i++)
		if (!(r.stack[i] = mgt_malloc(ne * sizeof(float)))) st = MGT_ERR_NOMEM;
	if (!st && e->c->use_rope_scaling) {
		rope_factors(e->c, r.fixed, rot_half(e->c));
		st = mgt_gguf_put_f32(e->w, "rope_freqs.weight", r.fixed);
	}
	for (int i = 0; !st && i < e->full->n; i++) {
		st = row_sources(e, &e->full->t[i], &r);
		if (!st) st = each_tensor(e, &e->full->t[i], put_one, &r);
	}
	free(r.stack[0]), free(r.stack[1]);
	cv_scratch_free(&s);
	return st;
}

static mgt_status parse_outtype(const char *s, mgt_ggml_type *t)
{
	static const struct { const char *name; mgt_ggml_type t; } types[] = {
		{"f32", MGT_GGML_F32}, {"f16", MGT_GGML_F16}, {"bf16", MGT_GGML_BF16}, {"q8_0", MGT_GGML_Q8_0},
	};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (!strcmp(s ? s : "f16", types[i].name)) {
			*t = types[i].t;
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_USAGE, "--outtype %s: expected f32, f16, bf16 or q8_0", s);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	while (s && !s[1] && s > p) { /* trailing slash */
		const char *t = s - 1;
		while (t > p && *t != '/') t--;
		return *t == '/' ? t + 1 : t;
	}
	return s ? s + 1 : p;
}

static mgt_status run_export(exporter *e)
{
	const mgt_export_opts *o = e->o;
	mgt_ggml_type type;
	struct stat sb;
	double t0 = mgt_now();
	mgt_status st = parse_outtype(o->outtype, &type);
	if (!st && stat(o->output, &sb) == 0) st = mgt_err(MGT_ERR_EXISTS, "%s: already exists (refusing to overwrite)", o->output);
	TRY(open_source(e));
	TRY(load_vocab(e));
	TRY(mgt_gguf_writer_new(&e->w));
	TRY(model_kv(e, type, o->name ? o->name : base_name(o->load_dir)));
	TRY(tokenizer_kv(e));
	int64_t nf = st ? 0 : rot_half(e->c);
	if (!st && e->c->use_rope_scaling) st = mgt_gguf_add_tensor(e->w, "rope_freqs.weight", MGT_GGML_F32, 1, &nf);
	for (int i = 0; !st && i < e->full->n; i++) st = each_tensor(e, &e->full->t[i], declare_one, &type);
	TRY(mgt_gguf_writer_open(e->w, o->output));
	TRY(write_tensors(e));
	TRY(mgt_gguf_writer_finish(e->w));
	if (!st && o->log)
		fprintf(o->log, "exported %s (%s) to %s: GGUF v3, architecture %s, %s, %lld parameters, %.1f s\n", o->load_dir,
			mgt_hf_model_type(e->f), o->output, e->arch, o->outtype ? o->outtype : "f16",
			(long long)(e->full->global_numel - mgt_model_padding_params(e->c)), mgt_now() - t0);
	return st;
}

mgt_status mgt_export_gguf(const mgt_export_opts *o)
{
	exporter e = {.o = o};
	mgt_status st = run_export(&e);
	mgt_gguf_writer_free(e.w);
	if (e.have_voc) mgt_tok_vocab_free(&e.voc);
	if (e.opened) cv_mgt_close(&e.out);
	return st;
}
