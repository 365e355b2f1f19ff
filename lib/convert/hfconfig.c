/* lib/convert/hfconfig.c: config.json <-> mgt arguments, as data (mgt-hf(5) "CONFIG KEYS").
 *
 * Key names: transformers' GPT2Config, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
 * MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig; Megatron's flags for those models:
 * tools/checkpoint/loader_llama_mistral.py, loader_mixtral_hf.py, Megatron-Bridge's model bridges
 * (src/megatron/bridge/models/{qwen,mixtral}) (Mixtral: top-k of the logits then softmax, as
 * transformers' softmax, top-k, renormalize; Qwen-MoE: --moe-router-pre-softmax = not
 * norm_topk_prob, as Megatron-Bridge; the sigmoid-gated shared expert of Qwen2-MoE =
 * --moe-shared-expert-intermediate-size with --moe-shared-expert-gate); MegatronBertConfig
 * (transformers' configuration_megatron_bert.py and modeling_megatron_bert.py: hidden_act is
 * applied in the MLP and in the LM head's transform); NemotronHConfig and Mamba2Config (transformers'
 * configuration_nemotron_h.py, configuration_mamba2.py; Megatron-Bridge's nemotron_h_bridge.py
 * CONFIG_MAPPING) for hybrid models. */
#include "convert_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

enum {
	G = 1 << MGT_HF_GPT2, MIX = 1 << MGT_HF_MIXTRAL, Q2M = 1 << MGT_HF_QWEN2_MOE, Q3M = 1 << MGT_HF_QWEN3_MOE,
	QM = Q2M | Q3M, M = MIX | QM,
	L = (1 << MGT_HF_LLAMA) | (1 << MGT_HF_MISTRAL) | (1 << MGT_HF_QWEN2) | (1 << MGT_HF_QWEN3) | M,
	BB = 1 << MGT_HF_MEGATRON_BERT, NH = 1 << MGT_HF_NEMOTRON_H, MB = 1 << MGT_HF_MAMBA2,
};

/* config.json's key for the number of experts (Mixtral's num_local_experts, Qwen-MoE's num_experts). */
static const char *experts_key(const mgt_hf_spec *s)
{
	return s->moe == MGT_HF_MOE_MIXTRAL ? "num_local_experts" : "num_experts";
}

static bool is_moe(mgt_hf_family f) { return mgt_hf_spec_of(f)->moe != MGT_HF_MOE_NONE; }

/* config.json key -> argument (JSON dest).  required: the key must be present and not null. */
static const struct cfg_row {
	unsigned fam;
	const char *hf, *arg;
	bool required;
} rows[] = {
	{G, "n_layer", "num_layers", true},
	{G, "n_embd", "hidden_size", true},
	{G, "n_head", "num_attention_heads", true},
	{G, "n_positions", "max_position_embeddings", true},
	{G, "n_inner", "ffn_hidden_size", false},
	{G, "layer_norm_epsilon", "norm_epsilon", false},
	{G, "resid_pdrop", "hidden_dropout", false},
	{G, "attn_pdrop", "attention_dropout", false},
	{L | BB, "num_hidden_layers", "num_layers", true},
	{L | BB, "hidden_size", "hidden_size", true},
	{L | BB, "intermediate_size", "ffn_hidden_size", true},
	{L | BB, "num_attention_heads", "num_attention_heads", true},
	{L, "num_key_value_heads", "num_query_groups", false},
	{L, "head_dim", "kv_channels", false},
	{L | BB, "max_position_embeddings", "max_position_embeddings", true},
	{L, "rms_norm_eps", "norm_epsilon", true},
	{L, "rope_theta", "rotary_base", false},
	{L, "attention_dropout", "attention_dropout", false},
	{G | L | BB | NH | MB, "initializer_range", "init_method_std", false},
	{NH | MB, "num_hidden_layers", "num_layers", true},
	{NH | MB, "hidden_size", "hidden_size", true},
	{NH | MB, "layer_norm_epsilon", "norm_epsilon", false},
	{NH, "num_attention_heads", "num_attention_heads", true},
	{NH, "num_key_value_heads", "num_query_groups", false},
	{NH, "head_dim", "kv_channels", false},
	{NH, "intermediate_size", "ffn_hidden_size", false},
	{NH, "max_position_embeddings", "max_position_embeddings", false},
	{NH, "mamba_num_heads", "mamba_num_heads", true},
	{NH, "mamba_head_dim", "mamba_head_dim", true},
	{NH, "ssm_state_size", "mamba_state_dim", true},
	{MB, "num_heads", "mamba_num_heads", true},
	{MB, "head_dim", "mamba_head_dim", true},
	{MB, "state_size", "mamba_state_dim", true},
	{MB, "n_groups", "mamba_num_groups", true},
	{BB, "layer_norm_eps", "norm_epsilon", false},
	{BB, "hidden_dropout_prob", "hidden_dropout", false},
	{BB, "attention_probs_dropout_prob", "attention_dropout", false},
	{MIX, "num_local_experts", "num_experts", true},
	{QM, "num_experts", "num_experts", true},
	{M, "num_experts_per_tok", "moe_router_topk", true},
	{MIX, "intermediate_size", "moe_ffn_hidden_size", true}, /* Mixtral's experts; no dense layers */
	{QM, "moe_intermediate_size", "moe_ffn_hidden_size", true},
	{Q2M, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", true},
	{M, "router_aux_loss_coef", "moe_aux_loss_coeff", false},
};

/* Arguments every model of a family has. */
static const struct fixed_row {
	unsigned fam;
	const char *arg, *value;
} fixed[] = {
	{G, "position_embedding_type", "learned_absolute"}, {G, "normalization", "LayerNorm"},
	{G, "swiglu", "false"}, {G, "add_bias_linear", "true"}, {G, "ffn_hidden_size", "0"},
	{G, "untie_embeddings_and_output_weights", "false"},
	{L, "position_embedding_type", "rope"}, {L, "normalization", "RMSNorm"}, {L, "swiglu", "true"},
	{L, "add_bias_linear", "false"}, {L, "hidden_dropout", "0"}, {L, "attention_dropout", "0"},
	{1 << MGT_HF_QWEN2, "add_qkv_bias", "true"}, {1 << MGT_HF_QWEN3, "qk_layernorm", "true"},
	{M, "moe_router_load_balancing_type", "aux_loss"}, {Q2M, "moe_shared_expert_gate", "true"},
	{Q3M, "qk_layernorm", "true"},
	{BB, "position_embedding_type", "learned_absolute"}, {BB, "normalization", "LayerNorm"}, {BB, "swiglu", "false"},
	{BB, "add_bias_linear", "true"}, {BB, "norm_epsilon", "1e-12"}, /* MegatronBertConfig's default */
	/* the Bridge's position_embedding_type none and RMSNorm; NemotronHConfig's and Mamba2Config's defaults */
	{NH | MB, "family", "hybrid"}, {NH | MB, "position_embedding_type", "none"}, {NH | MB, "normalization", "RMSNorm"},
	{NH | MB, "swiglu", "false"}, {NH | MB, "add_bias_linear", "false"}, {NH | MB, "hidden_dropout", "0"},
	{NH | MB, "attention_dropout", "0"}, {NH | MB, "norm_epsilon", "1e-5"}, {NH, "max_position_embeddings", "4096"},
	{MB, "num_attention_heads", "1"}, {MB, "max_position_embeddings", "4096"},
};

static mgt_status set_num(mgt_args *a, const char *file, const char *key, const char *arg, json_t *v)
{
	char buf[64];
	if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v)) snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
	else return mgt_err(MGT_ERR_INPUT, "%s: \"%s\": expected a number", file, key);
	mgt_status st = mgt_args_set(a, arg, buf);
	return st ? mgt_err_ctx(MGT_ERR_INPUT, "%s: \"%s\"", file, key) : MGT_OK;
}

static const char *str(json_t *cfg, const char *key)
{
	return json_string_value(json_object_get(cfg, key));
}

static bool truthy(json_t *cfg, const char *key) { return json_is_true(json_object_get(cfg, key)); }

/* Llama 3 rope scaling (rope_type "llama3"); "default" or null: none. */
static mgt_status rope_scaling(mgt_args *a, json_t *cfg, const char *file)
{
	json_t *rs = json_object_get(cfg, "rope_scaling");
	if (!rs || json_is_null(rs)) return MGT_OK;
	const char *type = json_string_value(json_object_get(rs, "rope_type"));
	if (!type) type = json_string_value(json_object_get(rs, "type"));
	if (type && !strcmp(type, "default")) return MGT_OK;
	if (!type || strcmp(type, "llama3"))
		return mgt_err(MGT_ERR_INPUT, "%s: rope_scaling type \"%s\" is not supported (llama3 is; Megatron's "
			       "--use-rope-scaling)", file, type ? type : "(none)");
	static const char *const keys[][2] = {
		{"factor", "rope_scaling_factor"}, {"low_freq_factor", "rope_scaling_low_freq_factor"},
		{"high_freq_factor", "rope_scaling_high_freq_factor"},
		{"original_max_position_embeddings", "rope_scaling_original_max_position_embeddings"},
	};
	mgt_status st = mgt_args_set(a, "use_rope_scaling", "true");
	for (size_t i = 0; !st && i < sizeof keys / sizeof keys[0]; i++) {
		json_t *v = json_object_get(rs, keys[i][0]);
		if (!v) return mgt_err(MGT_ERR_INPUT, "%s: rope_scaling has no \"%s\"", file, keys[i][0]);
		st = set_num(a, file, keys[i][0], keys[i][1], v);
	}
	return st;
}

/* Whether a megatron-bert config.json is MegatronBertForMaskedLM's (no pooler, no binary head). */
static bool bert_mlm(json_t *cfg)
{
	const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
	return arch && !strcmp(arch, MGT_HF_BERT_MLM_CLASS);
}

/* The tanh approximations of GELU among transformers' activations (ACT2FN). */
static bool tanh_gelu(const char *act)
{
	return !strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_fast") ||
	       !strcmp(act, "gelu_python_tanh");
}

/* What no Megatron-Core BERT computes, refused naming the key. */
static mgt_status bert_refusals(json_t *cfg, const char *file)
{
	const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
	if (arch && strcmp(arch, "MegatronBertForPreTraining") && strcmp(arch, MGT_HF_BERT_MLM_CLASS))
		return mgt_err(MGT_ERR_INPUT, "%s: architectures \"%s\" is not converted (MegatronBertForPreTraining, or "
			       "%s for a BERT without the binary head)", file, arch, MGT_HF_BERT_MLM_CLASS);
	const char *act = str(cfg, "hidden_act");
	if (act && tanh_gelu(act))
		return mgt_err(MGT_ERR_INPUT, "%s: hidden_act \"%s\" (the tanh approximation of GELU) has no exact Megatron "
			       "counterpart: transformers applies it in the MLP and in the LM head (cls.predictions.transform), "
			       "but Megatron's BERT LM head always uses erf GELU; hidden_act \"gelu\" (erf in both, Megatron's "
			       "--no-bias-gelu-fusion) converts exactly", file, act);
	if (act && strcmp(act, "gelu"))
		return mgt_err(MGT_ERR_INPUT, "%s: hidden_act \"%s\" is not supported (gelu)", file, act);
	json_t *tv = json_object_get(cfg, "type_vocab_size");
	if (tv && !(json_is_integer(tv) && (json_integer_value(tv) == 2 || (bert_mlm(cfg) && json_integer_value(tv) >= 1))))
		return mgt_err(MGT_ERR_INPUT, "%s: \"type_vocab_size\": expected 2 (Megatron's BERT has 2 token types, "
			       "num_tokentypes, with the binary head)", file);
	const char *pos = str(cfg, "position_embedding_type");
	if (pos && strcmp(pos, "absolute"))
		return mgt_err(MGT_ERR_INPUT, "%s: position_embedding_type \"%s\" is not supported (absolute: Megatron's "
			       "learned positions)", file, pos);
	if (truthy(cfg, "is_decoder") || truthy(cfg, "add_cross_attention"))
		return mgt_err(MGT_ERR_INPUT, "%s: is_decoder / add_cross_attention true is not supported (Megatron's BERT "
			       "is a bidirectional encoder)", file);
	return MGT_OK;
}

/* What mgt does not implement, refused by name. */
static mgt_status refusals(json_t *cfg, mgt_hf_family f, const char *file)
{
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	if (s->names == MGT_HF_NAMES_BERT) return bert_refusals(cfg, file);
	if (s->names == MGT_HF_NAMES_BACKBONE) return MGT_OK; /* hybrid_in */
	if (s->names == MGT_HF_NAMES_GPT2) {
		const char *act = str(cfg, "activation_function");
		if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu"))
			return mgt_err(MGT_ERR_INPUT, "%s: activation_function \"%s\" is not supported (gelu_new or gelu)", file, act);
		if (truthy(cfg, "scale_attn_by_inverse_layer_idx") || truthy(cfg, "reorder_and_upcast_attn"))
			return mgt_err(MGT_ERR_INPUT, "%s: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported", file);
		return MGT_OK;
	}
	const char *act = str(cfg, "hidden_act");
	if (act && strcmp(act, "silu"))
		return mgt_err(MGT_ERR_INPUT, "%s: hidden_act \"%s\" is not supported (silu)", file, act);
	if (s->qkv_bias == MGT_HF_QKV_BIAS_NONE && truthy(cfg, "attention_bias"))
		return mgt_err(MGT_ERR_INPUT, "%s: attention_bias true is not supported for %s (q/k/v/o biases)", file,
			       mgt_hf_model_type(f));
	if (truthy(cfg, "mlp_bias")) return mgt_err(MGT_ERR_INPUT, "%s: mlp_bias true is not supported", file);
	return MGT_OK;
}

static mgt_status bad_key(const char *file, const char *key, const char *want)
{
	return mgt_err(MGT_ERR_INPUT, "%s: \"%s\": expected %s", file, key, want);
}

/* Qwen-MoE's layers: layer l has experts when it is not in mlp_only_layers and
 * (l + 1) % decoder_sparse_step == 0 (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer), else the
 * dense MLP of intermediate_size: --moe-layer-freq 1 when every layer has experts, else the
 * list.  Routing: norm_topk_prob (default false) renormalizes the top-k of the softmax over
 * all experts, which is the softmax over the top-k logits, Megatron's default; without it the
 * top-k of the softmax stay as they are: --moe-router-pre-softmax.  Qwen2-MoE's q/k/v biases
 * follow qkv_bias (default true). */
static mgt_status qwen_moe(json_t *cfg, mgt_hf_family f, const char *file, mgt_args *a)
{
	mgt_model_config *c = &a->model;
	json_t *v = json_object_get(cfg, "decoder_sparse_step"), *only = json_object_get(cfg, "mlp_only_layers");
	int64_t step = 1, L = c->num_layers;
	if (v && !json_is_null(v) && (!json_is_integer(v) || (step = json_integer_value(v)) < 1))
		return bad_key(file, "decoder_sparse_step", "a positive integer");
	if (only && !json_is_null(only) && !json_is_array(only)) return bad_key(file, "mlp_only_layers", "a list of layer indices");
	enum { MAXL = sizeof c->moe_layer_pattern - 1 };
	if (L < 1 || L > MAXL)
		return mgt_err(MGT_ERR_USAGE, "%s: %lld layers: mgt's MoE layer pattern (mgt-train's --moe-layer-freq) holds 1 to %d", file, (long long)L,
			       (int)MAXL);
	char pat[MAXL * 2 + 3];
	size_t k = 0;
	bool all = true;
	pat[k++] = '[';
	for (int64_t l = 0; l < L; l++) {
		bool moe = (l + 1) % step == 0;
		for (size_t i = 0; i < json_array_size(only); i++) {
			json_t *x = json_array_get(only, i);
			if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= L)
				return bad_key(file, "mlp_only_layers", "layer indices below num_hidden_layers");
			if (json_integer_value(x) == l) moe = false;
		}
		all &= moe;
		if (l) pat[k++] = ',';
		pat[k++] = moe ? '1' : '0';
	}
	pat[k++] = ']';
	pat[k] = 0;
	mgt_status st = mgt_args_set(a, "moe_layer_freq", all ? "1" : pat);
	json_t *norm = json_object_get(cfg, "norm_topk_prob");
	if (!st && norm && !json_is_null(norm) && !json_is_boolean(norm)) st = bad_key(file, "norm_topk_prob", "true or false");
	if (!st) c->moe_router_pre_softmax = !json_is_true(norm);
	json_t *qb = json_object_get(cfg, "qkv_bias");
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	if (!st && s->qkv_bias == MGT_HF_QKV_BIAS_KEY) {
		if (qb && !json_is_null(qb) && !json_is_boolean(qb)) st = bad_key(file, "qkv_bias", "true or false");
		c->add_qkv_bias = !json_is_false(qb);
	}
	if (!st && s->shared_expert && c->moe_shared_expert_intermediate_size < 1)
		st = bad_key(file, "shared_expert_intermediate_size", "a positive size");
	return st ? mgt_err_ctx(st, "%s", file) : MGT_OK;
}

/* A config.json key that must have one value (or be absent): Megatron's MambaMixer hard-codes
 * d_conv 4, conv_bias true, bias false, SiLU, the gated RMSNorm after the gate. */
static mgt_status key_is(json_t *cfg, const char *file, const char *key, const char *want, const char *why)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v)) return MGT_OK;
	char *got = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	bool ok = got && !strcmp(got, want);
	mgt_status st = ok ? MGT_OK : mgt_err(MGT_ERR_INPUT, "%s: \"%s\": %s is not supported (%s: %s)", file, key,
						got ? got : "?", want, why);
	free(got);
	return st;
}

/* NemotronH's layers: hybrid_override_pattern (M Mamba-2, * attention, - MLP, E MoE) or the list
 * layers_block_type (mamba, attention, mlp, moe); Mamba2: num_hidden_layers Mamba layers. */
static mgt_status hybrid_pattern(json_t *cfg, mgt_hf_family f, const char *file, mgt_model_config *c)
{
	char *p = c->hybrid_layer_pattern;
	size_t cap = sizeof c->hybrid_layer_pattern - 1, n = 0;
	if (f == MGT_HF_MAMBA2) {
		if (c->num_layers < 1 || (size_t)c->num_layers > cap)
			return mgt_err(MGT_ERR_INPUT, "%s: \"num_hidden_layers\": expected 1 to %zu", file, cap);
		memset(p, 'M', (size_t)c->num_layers);
		p[c->num_layers] = 0;
		return MGT_OK;
	}
	const char *pat = str(cfg, "hybrid_override_pattern"), *key = "hybrid_override_pattern";
	json_t *list = json_object_get(cfg, "layers_block_type");
	if (pat) {
		for (n = 0; pat[n] && n < cap; n++) p[n] = pat[n];
		if (pat[n]) return mgt_err(MGT_ERR_INPUT, "%s: \"%s\": more than %zu layers", file, key, cap);
	} else if (json_is_array(list)) {
		static const struct { const char *name; char sym; } kinds[] = {
			{"mamba", 'M'}, {"attention", '*'}, {"mlp", '-'}, {"moe", 'E'},
		};
		key = "layers_block_type";
		for (n = 0; n < json_array_size(list); n++) {
			const char *k = json_string_value(json_array_get(list, n));
			char sym = 0;
			for (size_t i = 0; k && i < sizeof kinds / sizeof kinds[0]; i++)
				if (!strcmp(k, kinds[i].name)) sym = kinds[i].sym;
			if (!sym || n >= cap)
				return bad_key(file, key, "a list of \"mamba\", \"attention\", \"mlp\" and \"moe\"");
			p[n] = sym;
		}
	} else {
		return mgt_err(MGT_ERR_INPUT, "%s: no \"hybrid_override_pattern\" (or \"layers_block_type\"): a nemotron_h "
			       "config names its layers", file);
	}
	p[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (p[i] != 'M' && p[i] != '*' && p[i] != '-' && (p[i] != 'E' || f != MGT_HF_NEMOTRON_H))
			return mgt_err(MGT_ERR_INPUT, "%s: \"%s\": symbol '%c' (layer %zu) is not a layer kind (M Mamba-2, * "
				       "attention, - MLP, E MoE)", file, key, p[i], i);
	if (!n) return mgt_err(MGT_ERR_INPUT, "%s: \"%s\": no layers", file, key);
	if ((int64_t)n != c->num_layers)
		return mgt_err(MGT_ERR_INPUT, "%s: \"%s\" has %zu layers but \"num_hidden_layers\" is %lld", file, key, n,
			       (long long)c->num_layers);
	return MGT_OK;
}

/* NemotronH's MoE layers (NemotronHMoE; its router is DeepSeek-V3's, transformers'
 * DeepseekV3TopkRouter): sigmoid scores, the top-k of scores + e_score_correction_bias, weights the
 * scores of the chosen (normalized when norm_topk_prob) times routed_scaling_factor, plus shared
 * experts; experts and shared experts up_proj, act, down_proj.  Megatron: --moe-router-score-function
 * sigmoid, --moe-router-enable-expert-bias, --moe-router-topk-scaling-factor, a shared expert without
 * gate; Megatron normalizes the chosen sigmoid scores exactly when top-k > 1, so norm_topk_prob must
 * say the same.  Router groups (n_group > 1) are Megatron's group-limited routing
 * (--moe-router-num-groups n_group, --moe-router-group-topk topk_group): both keep the topk_group
 * groups of the largest group scores and mask the others' choice scores with -inf, but transformers
 * scores a group by its top 2 choice scores and Megatron (moe_utils.py group_limited_topk) by its top
 * k / topk_group, so they convert when k / topk_group is 2 (or topk_group is n_group: no group is
 * masked).  A latent projection (moe_latent_size: NemotronHMoE's fc1_latent_proj /
 * fc2_latent_proj around the routed experts, the router and shared experts on the full hidden
 * state) is Megatron-Core's --moe-latent-size.  Refused: no shared experts. */
static mgt_status nemotron_moe_in(json_t *cfg, const char *file, mgt_args *a)
{
	static const char *const keys[][2] = {
		{"n_routed_experts", "num_experts"}, {"num_experts_per_tok", "moe_router_topk"},
		{"moe_intermediate_size", "moe_ffn_hidden_size"},
		{"moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"},
	};
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < sizeof keys / sizeof keys[0]; i++) {
		json_t *v = json_object_get(cfg, keys[i][0]);
		if (!v || json_is_null(v))
			return mgt_err(MGT_ERR_INPUT, "%s: no \"%s\" (the pattern has MoE layers)", file, keys[i][0]);
		st = set_num(a, file, keys[i][0], keys[i][1], v);
	}
	json_t *sf = json_object_get(cfg, "routed_scaling_factor");
	if (!st && sf && !json_is_null(sf)) st = set_num(a, file, "routed_scaling_factor", "moe_router_topk_scaling_factor", sf);
	if (!st) st = mgt_args_set(a, "moe_router_score_function", "sigmoid");
	if (!st) st = mgt_args_set(a, "moe_router_enable_expert_bias", "true");
	if (!st) st = mgt_args_set(a, "moe_router_load_balancing_type", "none");
	if (st) return st;
	mgt_model_config *c = &a->model;
	json_t *ng = json_object_get(cfg, "n_group"), *tg = json_object_get(cfg, "topk_group");
	json_t *lat = json_object_get(cfg, "moe_latent_size");
	if (ng && !json_is_null(ng) && !json_is_integer(ng)) return bad_key(file, "n_group", "an integer");
	if (json_is_integer(ng) && json_integer_value(ng) > 1) {
		long long G = json_integer_value(ng), g = json_is_integer(tg) ? json_integer_value(tg) : 0;
		long long k = c->moe_router_topk;
		if (g < 1 || g > G) return bad_key(file, "topk_group", "an integer from 1 to \"n_group\"");
		if (g < G && k / g != 2)
			return mgt_err(MGT_ERR_INPUT, "%s: \"n_group\" %lld, \"topk_group\" %lld with top-%lld: transformers "
				       "scores a group by its top 2 choice scores, Megatron's group-limited routing "
				       "(--moe-router-group-topk) by its top k / topk_group = %lld, so only "
				       "num_experts_per_tok / topk_group = 2 converts exactly", file, G, g, k, k / g);
		st = set_num(a, file, "n_group", "moe_router_num_groups", ng);
		if (!st) st = set_num(a, file, "topk_group", "moe_router_group_topk", tg);
		if (st) return st;
	}
	if (lat && !json_is_null(lat) && (!json_is_integer(lat) || json_integer_value(lat) < 1))
		return bad_key(file, "moe_latent_size", "a positive size or null");
	if (lat && !json_is_null(lat) && (st = set_num(a, file, "moe_latent_size", "moe_latent_size", lat))) return st;
	bool norm = json_is_true(json_object_get(cfg, "norm_topk_prob"));
	if (norm != (c->moe_router_topk > 1))
		return mgt_err(MGT_ERR_INPUT, "%s: \"norm_topk_prob\" %s with top-%lld: Megatron's sigmoid router normalizes the "
			       "chosen scores exactly when top-k > 1", file, norm ? "true" : "false", (long long)c->moe_router_topk);
	if (c->moe_shared_expert_intermediate_size < 1) return bad_key(file, "moe_shared_expert_intermediate_size", "a positive size");
	return MGT_OK;
}

/* NemotronH and Mamba2: the Mamba mixer as Megatron's (key_is), the MLP's activation
 * (NemotronH's default relu2 is --squared-relu; gelu erf GELU, gelu_new or gelu_pytorch_tanh
 * --openai-gelu), the layer pattern, the groups (NemotronH: n_groups or mamba_n_groups; Mamba2's gated
 * norm spans all of d_inner, Megatron's one group each: n_groups > 1 refused). */
static mgt_status hybrid_in(json_t *cfg, mgt_hf_family f, const char *file, mgt_args *a)
{
	mgt_model_config *c = &a->model;
	bool nh = f == MGT_HF_NEMOTRON_H;
	static const char *const mixer = "Megatron's MambaMixer";
	mgt_status st = key_is(cfg, file, "conv_kernel", "4", mixer);
	if (!st) st = key_is(cfg, file, "use_conv_bias", "true", mixer);
	if (!st) st = key_is(cfg, file, nh ? "mamba_hidden_act" : "hidden_act", "\"silu\"", mixer);
	if (!st) st = key_is(cfg, file, "use_bias", "false", "no linear biases");
	if (!st) st = key_is(cfg, file, nh ? "mamba_proj_bias" : "rms_norm", nh ? "false" : "true", mixer);
	if (!st) st = key_is(cfg, file, "norm_before_gate", "false", mixer);
	if (!st) st = key_is(cfg, file, "attention_bias", "false", "no q/k/v/o biases");
	if (!st) st = key_is(cfg, file, "mlp_bias", "false", "no MLP biases");
	if (!st) st = hybrid_pattern(cfg, f, file, c);
	if (st) return st;
	json_t *hd = json_object_get(cfg, "attention_head_dim"); /* older NemotronH configs' head_dim */
	if (nh && json_is_integer(hd) && !json_is_integer(json_object_get(cfg, "head_dim")))
		st = set_num(a, file, "attention_head_dim", "kv_channels", hd);
	if (st) return st;
	json_t *g = json_object_get(cfg, "n_groups");
	if (nh && (!g || json_is_null(g))) g = json_object_get(cfg, "mamba_n_groups");
	if (nh && (!g || json_is_null(g))) return mgt_err(MGT_ERR_INPUT, "%s: no \"n_groups\" (expected for nemotron_h)", file);
	if (nh) st = set_num(a, file, "n_groups", "mamba_num_groups", g);
	if (!st && !nh && c->mamba_num_groups != 1)
		return mgt_err(MGT_ERR_INPUT, "%s: \"n_groups\" %lld: transformers' Mamba2 normalizes the gated output over all "
			       "of d_inner, Megatron's Mamba-2 over each of the %lld groups, so only n_groups 1 converts exactly "
			       "(a nemotron_h directory holds grouped Mamba layers)", file, (long long)c->mamba_num_groups,
			       (long long)c->mamba_num_groups);
	json_t *ex = json_object_get(cfg, "expand");
	if (!st && !nh && json_is_number(ex) &&
	    json_number_value(ex) * (double)c->hidden_size != (double)(c->mamba_num_heads * c->mamba_head_dim))
		return mgt_err(MGT_ERR_INPUT, "%s: \"expand\" x \"hidden_size\" is not \"num_heads\" x \"head_dim\" (Mamba2's "
			       "d_inner is both)", file);
	if (!st && strchr(c->hybrid_layer_pattern, 'M') && c->norm_epsilon != 1e-5)
		return mgt_err(MGT_ERR_INPUT, "%s: \"layer_norm_epsilon\" %g: transformers' gated Mamba norm uses it, "
			       "Megatron's (RMSNormGated) always 1e-5, so only 1e-5 converts exactly", file, c->norm_epsilon);
	const char *act = nh ? str(cfg, "mlp_hidden_act") : NULL;
	if (!st && nh && (strchr(c->hybrid_layer_pattern, '-') || strchr(c->hybrid_layer_pattern, 'E'))) {
		if (!act) act = "relu2"; /* NemotronHConfig's default */
		if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) c->openai_gelu = true;
		else if (!strcmp(act, "relu2")) c->squared_relu = true;
		else if (strcmp(act, "gelu"))
			return mgt_err(MGT_ERR_INPUT, "%s: \"mlp_hidden_act\": \"%s\" is not supported: mgt's hybrid MLP layers "
				       "and experts compute relu2 (--squared-relu), gelu, or gelu_new / gelu_pytorch_tanh "
				       "(--openai-gelu)", file, act);
	}
	c->untie_embeddings_and_output_weights = !json_is_true(json_object_get(cfg, "tie_word_embeddings"));
	if (!st && !nh) c->ffn_hidden_size = 4 * c->hidden_size; /* no MLP layers: any valid size */
	if (!st && nh && !json_is_integer(json_object_get(cfg, "intermediate_size")) && strchr(c->hybrid_layer_pattern, '-'))
		return mgt_err(MGT_ERR_INPUT, "%s: no \"intermediate_size\" (the MLP layers' size)", file);
	if (!st && strchr(c->hybrid_layer_pattern, 'E')) st = nemotron_moe_in(cfg, file, a);
	return st;
}

mgt_status cv_config_to_args(json_t *cfg, mgt_hf_family f, const char *file, mgt_args *a)
{
	unsigned bit = 1u << f;
	mgt_status st = refusals(cfg, f, file);
	for (size_t i = 0; !st && i < sizeof fixed / sizeof fixed[0]; i++)
		if (fixed[i].fam & bit) st = mgt_args_set(a, fixed[i].arg, fixed[i].value);
	for (size_t i = 0; !st && i < sizeof rows / sizeof rows[0]; i++) {
		if (!(rows[i].fam & bit)) continue;
		json_t *v = json_object_get(cfg, rows[i].hf);
		if (!v || json_is_null(v)) {
			if (rows[i].required) st = mgt_err(MGT_ERR_INPUT, "%s: no \"%s\" (expected for %s)", file, rows[i].hf,
							   mgt_hf_model_type(f));
			continue;
		}
		st = set_num(a, file, rows[i].hf, rows[i].arg, v);
	}
	if (st) return st;
	mgt_model_config *c = &a->model;
	json_t *kv = json_object_get(cfg, "num_key_value_heads");
	if (!kv || json_is_null(kv)) c->num_query_groups = c->num_attention_heads;
	c->group_query_attention = c->num_query_groups != c->num_attention_heads;
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	if (s->names == MGT_HF_NAMES_BACKBONE) {
		st = hybrid_in(cfg, f, file, a);
	} else if (s->names == MGT_HF_NAMES_GPT2) {
		c->openai_gelu = !str(cfg, "activation_function") || !strcmp(str(cfg, "activation_function"), "gelu_new");
	} else if (s->names == MGT_HF_NAMES_BERT) { /* erf GELU in the MLP: --no-bias-gelu-fusion; tied by default */
		snprintf(c->family, sizeof c->family, "bert");
		c->bert_binary_head = !bert_mlm(cfg);
		c->no_bias_gelu_fusion = true;
		c->untie_embeddings_and_output_weights = json_is_false(json_object_get(cfg, "tie_word_embeddings"));
	} else {
		json_t *tie = json_object_get(cfg, "tie_word_embeddings");
		c->untie_embeddings_and_output_weights = !json_is_true(tie); /* these configs default to false */
		st = rope_scaling(a, cfg, file);
	}
	if (!st && is_moe(f) && c->num_experts < 1) st = bad_key(file, experts_key(s), "a positive number of experts");
	if (!st && s->moe == MGT_HF_MOE_QWEN) st = qwen_moe(cfg, f, file, a);
	/* the sequence length mgt-train and mgt-eval default to; mgt-train's --seq-length overrides it */
	c->seq_length = c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096;
	json_t *vs = json_object_get(cfg, "vocab_size");
	if (!st && !json_is_integer(vs)) st = mgt_err(MGT_ERR_INPUT, "%s: no integer \"vocab_size\"", file);
	if (!st) c->vocab_size = a->vocab_size = json_integer_value(vs);
	return st;
}

/* ---- the way out: a config.json for a model that has none recorded ---- */

static void put_int(json_t *o, const char *k, int64_t v) { json_object_set_new(o, k, json_integer(v)); }
static void put_real(json_t *o, const char *k, double v) { json_object_set_new(o, k, json_real(v)); }

/* Megatron's T5 has no Hugging Face class (transformers' T5 is the original T5: relative
 * positions, RMSNorm without biases, ReLU). */
static mgt_status t5_refused(void)
{
	return mgt_err(MGT_ERR_INPUT, "a T5 checkpoint (--model-family t5): no Hugging Face class computes Megatron's T5 "
		       "(learned positions shared by encoder and decoder, LayerNorm with biases, GELU, an output bias; "
		       "T5ForConditionalGeneration has relative positions, RMSNorm, ReLU and no biases), so it is not "
		       "converted (the checkpoint stays an mgt one: mgt-eval and mgt-train read it)");
}

/* Whether every layer of a hybrid pattern is a Mamba layer ('|' aside). */
static bool all_mamba(const char *p)
{
	for (; *p; p++)
		if (*p != 'M' && *p != '|') return false;
	return true;
}

/* Whether hybrid model c routes by groups (Megatron: --moe-router-group-topk set, more than one group). */
static bool hybrid_groups(const mgt_model_config *c)
{
	return c->moe_router_num_groups > 1 && c->moe_router_group_topk > 0;
}

/* What NemotronH (or Mamba2) lacks for hybrid model c: mgt-train's flag, or NULL (the Bridge's
 * NemotronH mapping: RMSNorm, no positions, no biases, an MLP of up_proj and down_proj). */
static const char *hybrid_unmappable(const mgt_model_config *c, mgt_hf_family f)
{
	const char *p = c->hybrid_layer_pattern;
	if (strchr(p, 'E')) { /* NemotronH's MoE: see nemotron_moe_in */
		if (strcmp(c->moe_router_score_function, "sigmoid")) return "a softmax router (NemotronH's is sigmoid)";
		if (!c->moe_router_enable_expert_bias)
			return "no --moe-router-enable-expert-bias (NemotronH's router adds e_score_correction_bias)";
		if (hybrid_groups(c) && c->moe_router_group_topk < c->moe_router_num_groups &&
		    c->moe_router_topk / c->moe_router_group_topk != 2)
			return "--moe-router-group-topk with --moe-router-topk / --moe-router-group-topk other than 2 "
			       "(Megatron scores a group by its top topk / group-topk scores, NemotronH by its top 2)";
		if (!c->moe_shared_expert_intermediate_size || c->moe_shared_expert_gate)
			return "no shared expert or a gated one (NemotronH's MoE adds ungated shared experts)";
		if (c->swiglu) return "--swiglu (NemotronH's experts have no gate)";
	}
	if (strcmp(c->normalization, "RMSNorm")) return "--normalization LayerNorm (NemotronH's norms are RMSNorm)";
	if (strcmp(c->position_embedding_type, "none"))
		return "--position-embedding-type other than none (NemotronH's attention has no positions)";
	if (c->add_bias_linear || c->add_qkv_bias) return "linear biases (no --disable-bias-linear)";
	if (c->qk_layernorm) return "--qk-layernorm";
	if (c->swiglu && strchr(p, '-')) return "--swiglu (NemotronH's MLP has no gate: up_proj, activation, down_proj)";
	if (f == MGT_HF_MAMBA2 && !all_mamba(p)) return "attention or MLP layers in --hybrid-layer-pattern (Mamba2 has Mamba layers only)";
	if (strchr(p, 'M') && c->norm_epsilon != 1e-5)
		return "--norm-epsilon other than 1e-5 (Megatron's gated Mamba norm keeps 1e-5, transformers' uses "
		       "layer_norm_epsilon for it and the other norms)";
	return NULL;
}

mgt_status cv_family_infer(const mgt_model_config *c, mgt_hf_family *f)
{
	int hf = mgt_model_family(c)->hf;
	if (hf == MGT_HF_NONE) return t5_refused();
	if (hf == MGT_HF_NEMOTRON_H) { /* any hybrid; --family mamba2 for an all-Mamba one of one group */
		*f = MGT_HF_NEMOTRON_H;
		return MGT_OK;
	}
	if (hf != MGT_HF_FROM_LAYERS) {
		*f = (mgt_hf_family)hf;
		return MGT_OK;
	}
	bool rope = !strcmp(c->position_embedding_type, "rope"), rms = !strcmp(c->normalization, "RMSNorm");
	mgt_hf_names names;
	if (!rope && !rms && !c->swiglu && c->add_bias_linear && !c->untie_embeddings_and_output_weights &&
	    !strcmp(c->position_embedding_type, "learned_absolute") && c->rotary_percent == 1.0 && !c->num_experts)
		names = MGT_HF_NAMES_GPT2;
	else if (rope && rms && c->swiglu && !c->add_bias_linear && c->rotary_percent == 1.0)
		names = MGT_HF_NAMES_LLAMA;
	else
		return mgt_err(MGT_ERR_USAGE, "the checkpoint's model is neither GPT-2-like (learned positions, LayerNorm, "
			       "GELU, biases, tied) nor Llama-like (RoPE, RMSNorm, SwiGLU, no linear biases): no Hugging Face family fits");
	/* the first row of the naming scheme, with or without experts, whose attention extras fit
	 * exactly; else the first whose q/k norm fits (cv_family_check then names what differs) */
	for (int exact = 1; exact >= 0; exact--)
		for (int i = 0; i < MGT_HF_NFAMILIES; i++) {
			const mgt_hf_spec *s = mgt_hf_spec_of((mgt_hf_family)i);
			if (s->names != names || is_moe((mgt_hf_family)i) != (c->num_experts > 0)) continue;
			if (names == MGT_HF_NAMES_LLAMA && s->qk_norm != c->qk_layernorm) continue;
			if (exact && names == MGT_HF_NAMES_LLAMA &&
			    (c->add_qkv_bias ? s->qkv_bias == MGT_HF_QKV_BIAS_NONE : s->qkv_bias == MGT_HF_QKV_BIAS_ALWAYS))
				continue;
			if (exact && c->moe_shared_expert_intermediate_size && !s->shared_expert) continue;
			*f = (mgt_hf_family)i;
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_USAGE, "no Hugging Face family fits the checkpoint's model");
}

/* Whether every layer of c is an MoE layer. */
static bool all_moe(const mgt_model_config *c)
{
	for (int64_t l = 0; l < c->num_layers; l++)
		if (!mgt_moe_is_layer(c, l)) return false;
	return true;
}

/* What none of transformers' MoE blocks computes (they route by a softmax over all experts, top-k,
 * optionally renormalized, and have no router bias): the flag, or NULL. */
static const char *moe_unmappable(const mgt_model_config *c)
{
	if (strcmp(c->moe_router_score_function, "softmax")) return "--moe-router-score-function sigmoid";
	if (c->moe_router_enable_expert_bias) return "--moe-router-enable-expert-bias";
	if (c->moe_router_num_groups > 1) return "--moe-router-num-groups";
	if (c->moe_router_topk_scaling_factor > 0 && c->moe_router_topk_scaling_factor != 1.0)
		return "--moe-router-topk-scaling-factor";
	return NULL;
}

/* What family f's MoE block lacks: the flag, or NULL. */
static const char *moe_not_in(const mgt_model_config *c, mgt_hf_family f)
{
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	bool mix = s->moe == MGT_HF_MOE_MIXTRAL;
	if (mix && c->moe_router_pre_softmax) return "--moe-router-pre-softmax (Mixtral renormalizes)";
	if (mix && !all_moe(c)) return "--moe-layer-freq with dense layers (Mixtral has experts in every layer)";
	if (mix && c->moe_ffn_hidden_size != c->ffn_hidden_size)
		return "--moe-ffn-hidden-size other than --ffn-hidden-size (Mixtral's intermediate_size is both)";
	if (s->shared_expert && (!c->moe_shared_expert_intermediate_size || !c->moe_shared_expert_gate))
		return "no gated shared expert (Qwen2-MoE has one: --moe-shared-expert-intermediate-size, --moe-shared-expert-gate)";
	if (!s->shared_expert && c->moe_shared_expert_intermediate_size) return "--moe-shared-expert-intermediate-size";
	if (c->moe_latent_size) return "--moe-latent-size (of the MoE families only NemotronH's has latent projections)";
	return NULL;
}

/* What MegatronBert's layers lack (biases everywhere, LayerNorm, learned positions, one GELU for the
 * MLP and the LM head, which Megatron's LM head fixes to erf): mgt-train's flag, or NULL. */
static const char *bert_unmappable(const mgt_model_config *c)
{
	if (!c->add_bias_linear) return "mgt-train's --disable-bias-linear (MegatronBert has a bias on every linear layer)";
	if (c->openai_gelu) return "mgt-train's --openai-gelu (tanh GELU in the MLP; Megatron's LM head keeps erf)";
	if (!c->no_bias_gelu_fusion)
		return "the default fused bias-GELU, the tanh approximation in the MLP while the LM head uses erf "
		       "(MegatronBert's hidden_act is one GELU for both; a run with mgt-train's --no-bias-gelu-fusion "
		       "converts exactly)";
	if (strcmp(c->normalization, "LayerNorm")) return "mgt-train's --normalization RMSNorm";
	if (strcmp(c->position_embedding_type, "learned_absolute"))
		return "mgt-train's --position-embedding-type other than learned_absolute";
	if (c->swiglu) return "mgt-train's --swiglu";
	if (c->num_query_groups != c->num_attention_heads) return "mgt-train's --group-query-attention";
	if (c->kv_channels * c->num_attention_heads != c->hidden_size) return "mgt-train's --kv-channels other than hidden / heads";
	if (c->qk_layernorm) return "mgt-train's --qk-layernorm";
	return NULL;
}

static mgt_status bert_check(const mgt_model_config *c, mgt_hf_family f)
{
	bool bert = mgt_model_family(c)->lm_head;
	if (!bert || mgt_hf_spec_of(f)->names != MGT_HF_NAMES_BERT)
		return mgt_err(MGT_ERR_USAGE, "--family %s cannot hold this model (it %s a BERT)", mgt_hf_model_type(f),
			       bert ? "is" : "is not");
	const char *why = bert_unmappable(c);
	return why ? mgt_err(MGT_ERR_INPUT, "no Hugging Face class computes this BERT exactly: it was trained with "
			     "%s (the checkpoint stays an mgt one: mgt-eval and mgt-train read it)", why) : MGT_OK;
}

/* Whether family f can hold this model exactly. */
mgt_status cv_family_check(const mgt_model_config *c, mgt_hf_family f)
{
	int hf = mgt_model_family(c)->hf;
	if (hf == MGT_HF_NONE) return t5_refused();
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	if ((hf == MGT_HF_NEMOTRON_H) != (s->names == MGT_HF_NAMES_BACKBONE))
		return mgt_err(MGT_ERR_USAGE, "--family %s cannot hold this model (it %s a hybrid model: nemotron_h or mamba2 "
			       "hold those)", mgt_hf_model_type(f), hf == MGT_HF_NEMOTRON_H ? "is" : "is not");
	if (hf == MGT_HF_NEMOTRON_H) {
		const char *why = hybrid_unmappable(c, f);
		if (why)
			return mgt_err(MGT_ERR_INPUT, "%s cannot hold this hybrid model, trained with mgt-train's %s (the checkpoint "
				       "stays an mgt one: mgt-train reads it)", mgt_hf_model_type(f), why);
		if (f == MGT_HF_MAMBA2 && c->mamba_num_groups != 1)
			return mgt_err(MGT_ERR_INPUT, "mamba2 cannot hold this model: its n_groups would be %lld (--mamba-num-groups), "
				       "and transformers' Mamba2 normalizes the gated output over all of d_inner where Megatron's "
				       "Mamba-2 normalizes each group: use --family nemotron_h (grouped, as Megatron)",
				       (long long)c->mamba_num_groups);
		return MGT_OK;
	}
	if (hf != MGT_HF_FROM_LAYERS || s->names == MGT_HF_NAMES_BERT) return bert_check(c, f);
	mgt_hf_family g;
	mgt_status st = cv_family_infer(c, &g);
	if (st) return st;
	bool gpt2 = s->names == MGT_HF_NAMES_GPT2;
	bool ok = gpt2 == (mgt_hf_spec_of(g)->names == MGT_HF_NAMES_GPT2) && is_moe(f) == is_moe(g);
	if (ok && !gpt2 && c->qk_layernorm != s->qk_norm) ok = false;
	if (ok && !gpt2 && c->add_qkv_bias && s->qkv_bias == MGT_HF_QKV_BIAS_NONE) ok = false;
	if (ok && s->qkv_bias == MGT_HF_QKV_BIAS_ALWAYS && !c->add_qkv_bias) ok = false;
	if (!ok) return mgt_err(MGT_ERR_USAGE, "--family %s cannot hold this model (it looks like %s)", mgt_hf_model_type(f),
				mgt_hf_model_type(g));
	const char *why = is_moe(f) ? moe_unmappable(c) : NULL;
	if (why)
		return mgt_err(MGT_ERR_INPUT, "no Hugging Face family computes this Mixture-of-Experts model: it was trained "
			       "with mgt-train's %s, which has no counterpart in transformers' routers (the checkpoint stays "
			       "an mgt one: mgt-eval and mgt-train read it)", why);
	why = is_moe(f) ? moe_not_in(c, f) : NULL;
	return why ? mgt_err(MGT_ERR_INPUT, "%s cannot hold this Mixture-of-Experts model, trained with mgt-train's %s "
			     "(--family names another family)", mgt_hf_model_type(f), why) : MGT_OK;
}

/* The MoE keys of a config.json for c (the inverse of cv_config_to_args; dense layers as
 * mlp_only_layers with decoder_sparse_step 1). */
static void moe_config(json_t *o, const mgt_model_config *c, mgt_hf_family f)
{
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	put_int(o, experts_key(s), c->num_experts);
	put_int(o, "num_experts_per_tok", c->moe_router_topk);
	put_real(o, "router_aux_loss_coef", c->moe_aux_loss_coeff);
	json_object_set_new(o, "output_router_logits", json_false());
	if (s->moe == MGT_HF_MOE_MIXTRAL) {
		put_real(o, "router_jitter_noise", 0.0);
		return;
	}
	put_int(o, "moe_intermediate_size", c->moe_ffn_hidden_size);
	json_object_set_new(o, "norm_topk_prob", json_boolean(!c->moe_router_pre_softmax));
	put_int(o, "decoder_sparse_step", 1);
	json_t *only = json_array();
	for (int64_t l = 0; l < c->num_layers; l++)
		if (!mgt_moe_is_layer(c, l)) json_array_append_new(only, json_integer(l));
	json_object_set_new(o, "mlp_only_layers", only);
	if (s->shared_expert) {
		put_int(o, "shared_expert_intermediate_size", c->moe_shared_expert_intermediate_size);
		json_object_set_new(o, "qkv_bias", json_boolean(c->add_qkv_bias));
	}
}

/* MegatronBertConfig's keys for c (the inverse of cv_config_to_args): the class with or without the
 * binary head, erf GELU, two token types. */
static void bert_config_json(json_t *o, const mgt_model_config *c)
{
	json_object_set_new(o, "architectures", json_pack("[s]", c->bert_binary_head ? mgt_hf_architecture(MGT_HF_MEGATRON_BERT)
										  : MGT_HF_BERT_MLM_CLASS));
	put_int(o, "num_hidden_layers", c->num_layers);
	put_int(o, "hidden_size", c->hidden_size);
	put_int(o, "intermediate_size", c->ffn_hidden_size);
	put_int(o, "num_attention_heads", c->num_attention_heads);
	put_int(o, "max_position_embeddings", c->max_position_embeddings);
	put_int(o, "type_vocab_size", 2);
	put_real(o, "layer_norm_eps", c->norm_epsilon);
	json_object_set_new(o, "hidden_act", json_string("gelu"));
	put_real(o, "hidden_dropout_prob", c->hidden_dropout);
	put_real(o, "attention_probs_dropout_prob", c->attention_dropout);
	json_object_set_new(o, "position_embedding_type", json_string("absolute"));
	json_object_set_new(o, "tie_word_embeddings", json_boolean(!c->untie_embeddings_and_output_weights));
	put_int(o, "pad_token_id", 0);
	json_object_set_new(o, "use_cache", json_true());
}

/* NemotronHConfig's or Mamba2Config's keys for hybrid model c (the inverse of hybrid_in): the
 * pattern without '|', Megatron's MambaMixer constants (d_conv 4, chunk 128, conv bias, SiLU),
 * expand = d_inner / hidden_size.  NemotronH's torch_forward clamps dt below at time_step_min,
 * which Megatron does not (dt_limit (0, inf)): written 0.0, so that the clamp is none
 * (time_step_min only initializes dt_bias otherwise). */
static void hybrid_config_json(json_t *o, const mgt_model_config *c, mgt_hf_family f)
{
	bool nh = f == MGT_HF_NEMOTRON_H;
	char pat[sizeof c->hybrid_layer_pattern];
	size_t n = 0;
	for (const char *p = c->hybrid_layer_pattern; *p; p++)
		if (*p != '|') pat[n++] = *p;
	pat[n] = 0;
	int64_t di = c->mamba_num_heads * c->mamba_head_dim;
	put_int(o, "num_hidden_layers", (int64_t)n);
	put_int(o, "hidden_size", c->hidden_size);
	put_real(o, "layer_norm_epsilon", c->norm_epsilon);
	put_int(o, nh ? "mamba_num_heads" : "num_heads", c->mamba_num_heads);
	put_int(o, nh ? "mamba_head_dim" : "head_dim", c->mamba_head_dim);
	put_int(o, nh ? "ssm_state_size" : "state_size", c->mamba_state_dim);
	put_int(o, "n_groups", c->mamba_num_groups);
	if (di % c->hidden_size) put_real(o, "expand", (double)di / (double)c->hidden_size);
	else put_int(o, "expand", di / c->hidden_size);
	put_int(o, "conv_kernel", 4);
	put_int(o, "chunk_size", 128);
	json_object_set_new(o, "use_conv_bias", json_true());
	json_object_set_new(o, "use_bias", json_false());
	json_object_set_new(o, "residual_in_fp32", json_false());
	json_object_set_new(o, "tie_word_embeddings", json_boolean(!c->untie_embeddings_and_output_weights));
	put_real(o, "time_step_min", nh ? 0.0 : 0.001);
	put_real(o, "time_step_max", 0.1);
	put_real(o, "time_step_floor", 1e-4);
	if (!nh) {
		json_object_set_new(o, "hidden_act", json_string("silu"));
		json_object_set_new(o, "rms_norm", json_true());
		json_object_set_new(o, "norm_before_gate", json_false());
		return;
	}
	json_object_set_new(o, "hybrid_override_pattern", json_string(pat));
	json_object_set_new(o, "mamba_hidden_act", json_string("silu"));
	json_object_set_new(o, "mamba_proj_bias", json_false());
	json_object_set_new(o, "mlp_hidden_act", json_string(c->squared_relu ? "relu2" : c->openai_gelu ? "gelu_pytorch_tanh" : "gelu"));
	put_int(o, "num_attention_heads", c->num_attention_heads);
	put_int(o, "num_key_value_heads", c->num_query_groups);
	put_int(o, "head_dim", c->kv_channels);
	put_int(o, "intermediate_size", c->ffn_hidden_size);
	if (c->num_experts > 0) {
		put_int(o, "n_routed_experts", c->num_experts);
		put_int(o, "num_experts_per_tok", c->moe_router_topk);
		put_int(o, "moe_intermediate_size", c->moe_ffn_hidden_size);
		put_int(o, "moe_shared_expert_intermediate_size", c->moe_shared_expert_intermediate_size);
		put_real(o, "routed_scaling_factor", c->moe_router_topk_scaling_factor > 0 ? c->moe_router_topk_scaling_factor : 1.0);
		json_object_set_new(o, "norm_topk_prob", json_boolean(c->moe_router_topk > 1));
		put_int(o, "n_group", hybrid_groups(c) ? c->moe_router_num_groups : 1);
		put_int(o, "topk_group", hybrid_groups(c) ? c->moe_router_group_topk : 1);
		if (c->moe_latent_size) put_int(o, "moe_latent_size", c->moe_latent_size);
	}
	put_int(o, "max_position_embeddings", c->max_position_embeddings);
	json_object_set_new(o, "attention_bias", json_false());
	json_object_set_new(o, "mlp_bias", json_false());
	put_real(o, "attention_dropout", c->attention_dropout);
}

json_t *cv_args_to_config(const mgt_model_config *c, mgt_hf_family f, const char *dtype)
{
	json_t *o = json_object();
	json_object_set_new(o, "architectures", json_pack("[s]", mgt_hf_architecture(f)));
	json_object_set_new(o, "model_type", json_string(mgt_hf_model_type(f)));
	put_int(o, "vocab_size", c->vocab_size);
	put_real(o, "initializer_range", c->init_method_std);
	json_object_set_new(o, "torch_dtype", json_string(dtype));
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	if (s->names == MGT_HF_NAMES_BERT) {
		bert_config_json(o, c);
		return o;
	}
	if (s->names == MGT_HF_NAMES_BACKBONE) {
		hybrid_config_json(o, c, f);
		return o;
	}
	if (s->names == MGT_HF_NAMES_GPT2) {
		put_int(o, "n_layer", c->num_layers);
		put_int(o, "n_embd", c->hidden_size);
		put_int(o, "n_head", c->num_attention_heads);
		put_int(o, "n_positions", c->max_position_embeddings);
		put_int(o, "n_ctx", c->max_position_embeddings);
		put_int(o, "n_inner", c->ffn_hidden_size);
		put_real(o, "layer_norm_epsilon", c->norm_epsilon);
		json_object_set_new(o, "activation_function", json_string(c->openai_gelu ? "gelu_new" : "gelu"));
		put_real(o, "resid_pdrop", c->hidden_dropout);
		put_real(o, "embd_pdrop", c->hidden_dropout);
		put_real(o, "attn_pdrop", c->attention_dropout);
		json_object_set_new(o, "tie_word_embeddings", json_true());
		return o;
	}
	put_int(o, "num_hidden_layers", c->num_layers);
	put_int(o, "hidden_size", c->hidden_size);
	put_int(o, "intermediate_size", c->ffn_hidden_size);
	put_int(o, "num_attention_heads", c->num_attention_heads);
	put_int(o, "num_key_value_heads", c->num_query_groups);
	put_int(o, "head_dim", c->kv_channels);
	put_int(o, "max_position_embeddings", c->max_position_embeddings);
	put_real(o, "rms_norm_eps", c->norm_epsilon);
	put_real(o, "rope_theta", c->rotary_base);
	json_object_set_new(o, "hidden_act", json_string("silu"));
	json_object_set_new(o, "tie_word_embeddings", json_boolean(!c->untie_embeddings_and_output_weights));
	if (s->qkv_bias != MGT_HF_QKV_BIAS_KEY) json_object_set_new(o, "attention_bias", json_boolean(c->add_qkv_bias));
	put_real(o, "attention_dropout", c->attention_dropout);
	if (is_moe(f)) moe_config(o, c, f);
	if (c->use_rope_scaling)
		json_object_set_new(o, "rope_scaling", json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor",
			c->rope_scaling_factor, "low_freq_factor", c->rope_scaling_low_freq_factor, "high_freq_factor",
			c->rope_scaling_high_freq_factor, "original_max_position_embeddings",
			(json_int_t)c->rope_scaling_original_max_position_embeddings));
	return o;
}

/* ---- for planners: a config.json alone ---- */

mgt_status mgt_convert_hf_config(const char *path, mgt_args *a)
{
	char file[PATH_MAX];
	struct stat sb;
	if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) snprintf(file, sizeof file, "%s/config.json", path);
	else snprintf(file, sizeof file, "%s", path);
	json_error_t e;
	json_t *cfg = json_load_file(file, 0, &e);
	if (!cfg) return mgt_err(MGT_ERR_INPUT, "%s:%d: %s", file, e.line, e.text);
	mgt_hf_family f;
	mgt_status st = MGT_OK;
	if (!json_is_object(cfg)) st = mgt_err(MGT_ERR_INPUT, "%s: expected a JSON object", file);
	else if (mgt_hf_family_parse(json_string_value(json_object_get(cfg, "model_type")), &f))
		st = mgt_err_ctx(MGT_ERR_INPUT, "%s", file);
	if (!st) st = cv_config_to_args(cfg, f, file, a);
	json_decref(cfg);
	return st;
}
