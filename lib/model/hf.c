/* lib/model/hf.c: the Hugging Face names and layouts of the tensor table's rows (mgt-hf(5)).
 *
 * Each row of the table (lib/model/table.c) maps to one, two or three Hugging Face tensors by a
 * rule: its role, its layer and the family.  The layouts are Megatron's
 * (tools/checkpoint/loader_llama_mistral.py, saver_mcore.py): linear_qkv interleaved per query
 * group, SwiGLU fc1 as [gate; up], vocabulary rows padded, GPT-2's Conv1D weights transposed.
 * Megatron-Core's BERT maps onto transformers' MegatronBert classes (transformers'
 * models/megatron_bert/modeling_megatron_bert.py: the pre-LN layout and its names).  Hybrid
 * models map onto NemotronH and Mamba2 (transformers' models/nemotron_h/modeling_nemotron_h.py,
 * models/mamba2/modeling_mamba2.py; Megatron-Bridge's nemotron_h_bridge.py mapping_registry):
 * backbone.layers.N.norm is the layer's fused pre-norm, backbone.layers.N.mixer its one mixer. */
#include "model.h"

#include <stdio.h>
#include <string.h>

/* ---- names ---- */

typedef struct {
	mgt_tensor_role role;
	const char *gpt2, *llama; /* per-layer suffix or global name; NULL: not in that family */
} name_row;

/* GPT-2's names carry the caller's prefix ("transformer." or ""); Llama's are fixed. */
static const name_row names[] = {
	{MGT_T_WORD_EMB, "wte.weight", "model.embed_tokens.weight"},
	{MGT_T_POS_EMB, "wpe.weight", NULL},
	{MGT_T_LN1_W, "ln_1.weight", "input_layernorm.weight"},
	{MGT_T_LN1_B, "ln_1.bias", NULL},
	{MGT_T_PROJ_W, "attn.c_proj.weight", "self_attn.o_proj.weight"},
	{MGT_T_PROJ_B, "attn.c_proj.bias", NULL},
	{MGT_T_QNORM_W, NULL, "self_attn.q_norm.weight"},
	{MGT_T_KNORM_W, NULL, "self_attn.k_norm.weight"},
	{MGT_T_LN2_W, "ln_2.weight", "post_attention_layernorm.weight"},
	{MGT_T_LN2_B, "ln_2.bias", NULL},
	{MGT_T_FC2_W, "mlp.c_proj.weight", "mlp.down_proj.weight"},
	{MGT_T_FC2_B, "mlp.c_proj.bias", NULL},
	{MGT_T_FINAL_LN_W, "ln_f.weight", "model.norm.weight"},
	{MGT_T_FINAL_LN_B, "ln_f.bias", NULL},
	{MGT_T_OUTPUT_W, NULL, "lm_head.weight"},
};

static void set_src(mgt_hf_map *m, int k, const char *prefix, int layer, const char *suffix, int ndim,
		    int64_t r, int64_t c)
{
	if (layer >= 0 && (prefix[0] == 'm' || !strcmp(prefix, "backbone."))) /* "model.", "backbone." */
		snprintf(m->name[k], sizeof m->name[k], "%slayers.%d.%s", prefix, layer, suffix);
	else if (layer >= 0 && prefix[0] == 'b') /* "bert.encoder." */
		snprintf(m->name[k], sizeof m->name[k], "%slayer.%d.%s", prefix, layer, suffix);
	else if (layer >= 0)
		snprintf(m->name[k], sizeof m->name[k], "%sh.%d.%s", prefix, layer, suffix);
	else
		snprintf(m->name[k], sizeof m->name[k], "%s%s", prefix, suffix);
	m->ndim[k] = ndim;
	m->shape[k][0] = r;
	m->shape[k][1] = c;
	if (k + 1 > m->n) m->n = k + 1;
}

static mgt_status unmapped(const mgt_tensor *t, mgt_hf_family f)
{
	return mgt_err(MGT_ERR_USAGE, "tensor %s has no Hugging Face %s counterpart", t->name, mgt_hf_model_type(f));
}

/* The Mixture-of-Experts rows (transformers' modeling_mixtral.py MixtralSparseMoeBlock:
 * block_sparse_moe.gate, experts.E.w1 (gate), w3 (up), w2 (down); modeling_qwen2_moe.py /
 * modeling_qwen3_moe.py SparseMoeBlock: mlp.gate, mlp.experts.E.{gate,up,down}_proj,
 * Qwen2-MoE's mlp.shared_expert.* and mlp.shared_expert_gate [1, h]).  Megatron's expert fc1 is
 * [gate; up] as the dense one (loader_mixtral_hf.py). */
static mgt_status map_moe(mgt_hf_family f, const char *pre, const mgt_tensor *t, mgt_hf_map *m)
{
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	bool mix = s->moe == MGT_HF_MOE_MIXTRAL, moe = s->moe != MGT_HF_MOE_NONE;
	int64_t r = t->shape[0], cl = t->ndim == 2 ? t->shape[1] : 0;
	char a[96], b[96];
	if (!moe) return unmapped(t, f);
	switch (t->role) {
	case MGT_T_ROUTER_W:
		m->op = MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, mix ? "block_sparse_moe.gate.weight" : "mlp.gate.weight", 2, r, cl);
		return MGT_OK;
	case MGT_T_EXP_FC1_W:
		if (r % 2) return unmapped(t, f); /* SwiGLU experts only */
		snprintf(a, sizeof a, mix ? "block_sparse_moe.experts.%d.w1.weight" : "mlp.experts.%d.gate_proj.weight", t->expert);
		snprintf(b, sizeof b, mix ? "block_sparse_moe.experts.%d.w3.weight" : "mlp.experts.%d.up_proj.weight", t->expert);
		m->op = MGT_HF_GLU;
		set_src(m, 0, pre, t->layer, a, 2, r / 2, cl);
		set_src(m, 1, pre, t->layer, b, 2, r / 2, cl);
		return MGT_OK;
	case MGT_T_EXP_FC2_W:
		snprintf(a, sizeof a, mix ? "block_sparse_moe.experts.%d.w2.weight" : "mlp.experts.%d.down_proj.weight", t->expert);
		m->op = MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, a, 2, r, cl);
		return MGT_OK;
	case MGT_T_SH_FC1_W:
		if (!s->shared_expert || r % 2) return unmapped(t, f);
		m->op = MGT_HF_GLU;
		set_src(m, 0, pre, t->layer, "mlp.shared_expert.gate_proj.weight", 2, r / 2, cl);
		set_src(m, 1, pre, t->layer, "mlp.shared_expert.up_proj.weight", 2, r / 2, cl);
		return MGT_OK;
	case MGT_T_SH_FC2_W:
	case MGT_T_SH_GATE_W:
		if (!s->shared_expert) return unmapped(t, f);
		m->op = MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, t->role == MGT_T_SH_GATE_W ? "mlp.shared_expert_gate.weight"
					     : "mlp.shared_expert.down_proj.weight", 2, r, cl);
		return MGT_OK;
	default: /* the router's bias and expert bias: no Hugging Face counterpart */
		return unmapped(t, f);
	}
}

/* The fused QKV weight or bias. */
static mgt_status map_qkv(const mgt_model_config *c, mgt_hf_family f, const char *pre, const mgt_tensor *t,
			  mgt_hf_map *m)
{
	bool w = t->role == MGT_T_QKV_W;
	int64_t h = c->hidden_size, d = c->kv_channels, nq = c->num_attention_heads, ng = c->num_query_groups;
	mgt_hf_names scheme = mgt_hf_spec_of(f)->names;
	if (scheme == MGT_HF_NAMES_GPT2) {
		m->op = MGT_HF_QKV_GPT2;
		set_src(m, 0, pre, t->layer, w ? "attn.c_attn.weight" : "attn.c_attn.bias", w ? 2 : 1, w ? h : 3 * h,
			w ? 3 * h : 0);
		return MGT_OK;
	}
	static const char *const proj[2][3] = {{"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."},
					       {"attention.self.query.", "attention.self.key.", "attention.self.value."}};
	m->op = MGT_HF_QKV; /* BERT: one query group per head, [q_n; k_n; v_n] per head */
	for (int k = 0; k < 3; k++) {
		char suffix[64];
		snprintf(suffix, sizeof suffix, "%s%s", proj[scheme == MGT_HF_NAMES_BERT][k], w ? "weight" : "bias");
		set_src(m, k, pre, t->layer, suffix, w ? 2 : 1, (k ? ng : nq) * d, w ? h : 0);
	}
	return MGT_OK;
}

/* MegatronBertForPreTraining (transformers' modeling_megatron_bert.py): per layer under
 * bert.encoder.layer.N. (attention.ln is linear_qkv's fused LayerNorm, ln linear_fc1's), the rest
 * global; the output layer's bias is cls.predictions.bias and its weight, when untied,
 * cls.predictions.decoder.weight, both over the unpadded vocabulary. */
static const struct {
	mgt_tensor_role role;
	const char *name;
} bert_names[] = {
	{MGT_T_WORD_EMB, "bert.embeddings.word_embeddings.weight"},
	{MGT_T_POS_EMB, "bert.embeddings.position_embeddings.weight"},
	{MGT_T_TOKTYPE_EMB, "bert.embeddings.token_type_embeddings.weight"},
	{MGT_T_LN1_W, "attention.ln.weight"}, {MGT_T_LN1_B, "attention.ln.bias"},
	{MGT_T_PROJ_W, "attention.output.dense.weight"}, {MGT_T_PROJ_B, "attention.output.dense.bias"},
	{MGT_T_LN2_W, "ln.weight"}, {MGT_T_LN2_B, "ln.bias"},
	{MGT_T_FC1_W, "intermediate.dense.weight"}, {MGT_T_FC1_B, "intermediate.dense.bias"},
	{MGT_T_FC2_W, "output.dense.weight"}, {MGT_T_FC2_B, "output.dense.bias"},
	{MGT_T_FINAL_LN_W, "bert.encoder.ln.weight"}, {MGT_T_FINAL_LN_B, "bert.encoder.ln.bias"},
	{MGT_T_POOL_W, "bert.pooler.dense.weight"}, {MGT_T_POOL_B, "bert.pooler.dense.bias"},
	{MGT_T_LMH_W, "cls.predictions.transform.dense.weight"},
	{MGT_T_LMH_B, "cls.predictions.transform.dense.bias"},
	{MGT_T_LMH_LN_W, "cls.predictions.transform.LayerNorm.weight"},
	{MGT_T_LMH_LN_B, "cls.predictions.transform.LayerNorm.bias"},
	{MGT_T_OUTPUT_W, "cls.predictions.decoder.weight"}, {MGT_T_OUTPUT_B, "cls.predictions.bias"},
	{MGT_T_BIN_W, "cls.seq_relationship.weight"}, {MGT_T_BIN_B, "cls.seq_relationship.bias"},
};

static mgt_status map_bert(const mgt_model_config *c, mgt_hf_family f, const mgt_tensor *t, mgt_hf_map *m)
{
	const char *pre = t->layer >= 0 ? "bert.encoder." : "";
	if (t->role == MGT_T_QKV_W || t->role == MGT_T_QKV_B) return map_qkv(c, f, pre, t, m);
	for (size_t i = 0; i < sizeof bert_names / sizeof bert_names[0]; i++) {
		if (bert_names[i].role != t->role) continue;
		bool pad = t->role == MGT_T_WORD_EMB || t->role == MGT_T_OUTPUT_W || t->role == MGT_T_OUTPUT_B;
		m->op = pad ? MGT_HF_PAD_ROWS : MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, bert_names[i].name, t->ndim, pad ? c->vocab_size : t->shape[0],
			t->ndim == 2 ? t->shape[1] : 0);
		return MGT_OK;
	}
	return unmapped(t, f);
}

/* NemotronH / Mamba2: each layer's one norm (the fused pre-norm of in_proj, linear_qkv or linear_fc1,
 * an MoE layer's pre_mlp_layernorm) is backbone.layers.N.norm, its mixer backbone.layers.N.mixer
 * (Mamba-2's in_proj, conv1d [CD, 1, 4], dt_bias, A_log, D, norm, out_proj; attention's
 * q/k/v/o_proj; the MLP's up_proj and down_proj; the MoE's gate, experts.E and shared_experts). */
static const struct {
	mgt_tensor_role role;
	const char *name;
} backbone_names[] = {
	{MGT_T_WORD_EMB, "backbone.embeddings.weight"}, {MGT_T_FINAL_LN_W, "backbone.norm_f.weight"},
	{MGT_T_OUTPUT_W, "lm_head.weight"}, {MGT_T_LN1_W, "norm.weight"}, {MGT_T_LN2_W, "norm.weight"},
	{MGT_T_PROJ_W, "mixer.o_proj.weight"}, {MGT_T_FC1_W, "mixer.up_proj.weight"},
	{MGT_T_FC2_W, "mixer.down_proj.weight"}, {MGT_T_M_IN_W, "mixer.in_proj.weight"},
	{MGT_T_M_CONV_W, "mixer.conv1d.weight"}, {MGT_T_M_CONV_B, "mixer.conv1d.bias"},
	{MGT_T_M_DT_B, "mixer.dt_bias"}, {MGT_T_M_A_LOG, "mixer.A_log"}, {MGT_T_M_D, "mixer.D"},
	{MGT_T_M_NORM_W, "mixer.norm.weight"}, {MGT_T_M_OUT_W, "mixer.out_proj.weight"},
	/* NemotronH's MoE (NemotronHMoE: the DeepSeek-V3 router gate with e_score_correction_bias,
	 * experts and shared_experts of up_proj and down_proj; Megatron-Bridge's mapping) */
	{MGT_T_ROUTER_W, "mixer.gate.weight"}, {MGT_T_EXPERT_BIAS, "mixer.gate.e_score_correction_bias"},
	{MGT_T_SH_FC1_W, "mixer.shared_experts.up_proj.weight"}, {MGT_T_SH_FC2_W, "mixer.shared_experts.down_proj.weight"},
	/* its latent projections (moe_latent_size; NemotronHMoE fc1_latent_proj, fc2_latent_proj) */
	{MGT_T_LAT_FC1_W, "mixer.fc1_latent_proj.weight"}, {MGT_T_LAT_FC2_W, "mixer.fc2_latent_proj.weight"},
};

static mgt_status map_backbone(const mgt_model_config *c, mgt_hf_family f, const mgt_tensor *t, mgt_hf_map *m)
{
	const char *pre = t->layer >= 0 ? "backbone." : "";
	if (t->role == MGT_T_QKV_W) { /* q/k/v_proj under mixer. */
		static const char *const proj[3] = {"mixer.q_proj.weight", "mixer.k_proj.weight", "mixer.v_proj.weight"};
		m->op = MGT_HF_QKV;
		for (int k = 0; k < 3; k++)
			set_src(m, k, pre, t->layer, proj[k], 2, (k ? c->num_query_groups : c->num_attention_heads) * c->kv_channels,
				c->hidden_size);
		return MGT_OK;
	}
	if ((t->role == MGT_T_FC1_W || t->role == MGT_T_EXP_FC1_W || t->role == MGT_T_SH_FC1_W) && c->swiglu)
		return unmapped(t, f); /* NemotronH's MLPs have no gate */
	char ex[96];
	if (t->role == MGT_T_EXP_FC1_W || t->role == MGT_T_EXP_FC2_W) { /* NemotronH's MoE: mixer.experts.E.* */
		bool fc1 = t->role == MGT_T_EXP_FC1_W;
		snprintf(ex, sizeof ex, fc1 ? "mixer.experts.%d.up_proj.weight" : "mixer.experts.%d.down_proj.weight", t->expert);
		m->op = MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, ex, 2, t->shape[0], t->shape[1]);
		return MGT_OK;
	}
	for (size_t i = 0; i < sizeof backbone_names / sizeof backbone_names[0]; i++) {
		if (backbone_names[i].role != t->role) continue;
		bool pad = t->role == MGT_T_WORD_EMB || t->role == MGT_T_OUTPUT_W;
		m->op = pad ? MGT_HF_PAD_ROWS : MGT_HF_COPY;
		set_src(m, 0, pre, t->layer, backbone_names[i].name, t->ndim, pad ? c->vocab_size : t->shape[0],
			t->ndim == 2 ? t->shape[1] : 0);
		if (t->role == MGT_T_M_CONV_W) { /* [CD, 4] -> [CD, 1, 4] */
			m->ndim[0] = 3;
			m->shape[0][2] = m->shape[0][1];
			m->shape[0][1] = 1;
		}
		return MGT_OK;
	}
	return unmapped(t, f);
}

mgt_status mgt_hf_map_tensor(const mgt_model_config *c, mgt_hf_family f, const char *gpt2_prefix,
			     const mgt_tensor *t, mgt_hf_map *m)
{
	memset(m, 0, sizeof *m);
	mgt_hf_names scheme = mgt_hf_spec_of(f)->names;
	if (scheme == MGT_HF_NAMES_BERT) return map_bert(c, f, t, m);
	if (scheme == MGT_HF_NAMES_BACKBONE) return map_backbone(c, f, t, m);
	bool gpt2 = scheme == MGT_HF_NAMES_GPT2;
	const char *pre = gpt2 ? gpt2_prefix : t->layer >= 0 ? "model." : "";
	int64_t h = c->hidden_size, ffn = c->ffn_hidden_size;
	switch (t->role) {
	case MGT_T_QKV_W:
	case MGT_T_QKV_B:
		return map_qkv(c, f, pre, t, m);
	case MGT_T_ROUTER_W:
	case MGT_T_ROUTER_B:
	case MGT_T_EXPERT_BIAS:
	case MGT_T_EXP_FC1_W:
	case MGT_T_EXP_FC2_W:
	case MGT_T_SH_FC1_W:
	case MGT_T_SH_FC2_W:
	case MGT_T_SH_GATE_W:
		return map_moe(f, pre, t, m);
	case MGT_T_FC1_W:
	case MGT_T_FC1_B: {
		bool w = t->role == MGT_T_FC1_W;
		if (gpt2) {
			m->op = w ? MGT_HF_TRANSPOSE : MGT_HF_COPY;
			set_src(m, 0, pre, t->layer, w ? "mlp.c_fc.weight" : "mlp.c_fc.bias", w ? 2 : 1, w ? h : ffn, w ? ffn : 0);
			return MGT_OK;
		}
		if (!w || !c->swiglu) return unmapped(t, f);
		m->op = MGT_HF_GLU;
		set_src(m, 0, pre, t->layer, "mlp.gate_proj.weight", 2, ffn, h);
		set_src(m, 1, pre, t->layer, "mlp.up_proj.weight", 2, ffn, h);
		return MGT_OK;
	}
	default:
		break;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (names[i].role != t->role) continue;
		const char *n = gpt2 ? names[i].gpt2 : names[i].llama;
		if (!n) return unmapped(t, f);
		bool conv1d = gpt2 && t->ndim == 2 && (t->role == MGT_T_PROJ_W || t->role == MGT_T_FC2_W);
		m->op = conv1d ? MGT_HF_TRANSPOSE : t->role == MGT_T_WORD_EMB || t->role == MGT_T_OUTPUT_W
			? MGT_HF_PAD_ROWS : MGT_HF_COPY;
		int64_t r = t->shape[0], cl = t->ndim == 2 ? t->shape[1] : 0;
		if (conv1d) { int64_t x = r; r = cl; cl = x; }
		if (m->op == MGT_HF_PAD_ROWS) r = c->vocab_size;
		/* Llama's global names carry no prefix; GPT-2's do (except lm_head) */
		set_src(m, 0, t->layer >= 0 || gpt2 ? pre : "", t->layer, n, t->ndim, r, cl);
		return MGT_OK;
	}
	return unmapped(t, f);
}

/* ---- layouts ---- */

static int64_t numel(const mgt_hf_map *m, int k)
{
	int64_t n = 1;
	for (int d = 0; d < m->ndim[k]; d++) n *= m->shape[k][d];
	return n;
}

/* Row j of mgt's fused QKV [(nq + 2 ng) d, .]: which source (0 q, 1 k, 2 v) and row there. */
static void qkv_row(const mgt_model_config *c, bool gpt2, int64_t j, int *src, int64_t *row)
{
	int64_t d = c->kv_channels, ng = c->num_query_groups, qpg = c->num_attention_heads / ng;
	int64_t g = j / ((qpg + 2) * d), in = j % ((qpg + 2) * d), slot = in / d, e = in % d;
	if (slot < qpg) {
		*src = 0;
		*row = (g * qpg + slot) * d + e;
	} else {
		*src = (int)(slot - qpg + 1);
		*row = g * d + e;
	}
	if (gpt2) { /* one source: [Q_all; K_all; V_all] after the transpose */
		*row += *src * c->num_attention_heads * d;
		*src = 0;
	}
}

/* dst[r, c] <-> src[c, r] for an [R, C] destination. */
static void transpose(const float *src, float *dst, int64_t R, int64_t C)
{
	for (int64_t r = 0; r < R; r++)
		for (int64_t x = 0; x < C; x++) dst[r * C + x] = src[x * R + r];
}

/* The fused QKV row by row between mgt's layout (mg) and the Hugging Face sources (hf), either
 * way: to_mgt copies hf into mg, else mg into hf (the source side is only read). */
static void qkv_move(const mgt_model_config *c, const mgt_hf_map *m, const mgt_tensor *t, float *mg,
		     float *const hf[3], bool to_mgt)
{
	int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
	bool gpt2 = m->op == MGT_HF_QKV_GPT2, conv1d = gpt2 && t->ndim == 2;
	for (int64_t j = 0; j < rows; j++) {
		int s;
		int64_t r;
		qkv_row(c, gpt2, j, &s, &r);
		if (conv1d) { /* c_attn [h, 3h]: mgt row j is column r */
			for (int64_t x = 0; x < cols; x++) {
				float *a = &mg[j * cols + x], *b = &hf[0][x * rows + r];
				if (to_mgt) *a = *b;
				else *b = *a;
			}
		} else if (to_mgt) {
			memcpy(mg + j * cols, hf[s] + r * cols, (size_t)cols * sizeof(float));
		} else {
			memcpy(hf[s] + r * cols, mg + j * cols, (size_t)cols * sizeof(float));
		}
	}
}

void mgt_hf_to_mgt(const mgt_model_config *c, const mgt_hf_map *m, const mgt_tensor *t, const float *const src[3],
		   float *dst)
{
	int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
	switch (m->op) {
	case MGT_HF_COPY:
		memcpy(dst, src[0], (size_t)(rows * cols) * sizeof(float));
		break;
	case MGT_HF_PAD_ROWS:
		memcpy(dst, src[0], (size_t)numel(m, 0) * sizeof(float));
		memset(dst + numel(m, 0), 0, (size_t)(rows * cols - numel(m, 0)) * sizeof(float));
		break;
	case MGT_HF_TRANSPOSE:
		transpose(src[0], dst, rows, cols);
		break;
	case MGT_HF_GLU:
		memcpy(dst, src[0], (size_t)numel(m, 0) * sizeof(float));
		memcpy(dst + numel(m, 0), src[1], (size_t)numel(m, 1) * sizeof(float));
		break;
	case MGT_HF_QKV:
	case MGT_HF_QKV_GPT2:
		qkv_move(c, m, t, dst, (float *const *)src, true);
		break;
	}
}

void mgt_hf_from_mgt(const mgt_model_config *c, const mgt_hf_map *m, const mgt_tensor *t, const float *src,
		     float *const dst[3])
{
	int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
	switch (m->op) {
	case MGT_HF_COPY:
	case MGT_HF_PAD_ROWS: /* padded rows dropped (Megatron's saver keeps [:vocab_size]) */
		memcpy(dst[0], src, (size_t)numel(m, 0) * sizeof(float));
		break;
	case MGT_HF_TRANSPOSE:
		transpose(src, dst[0], cols, rows);
		break;
	case MGT_HF_GLU:
		memcpy(dst[0], src, (size_t)numel(m, 0) * sizeof(float));
		memcpy(dst[1], src + numel(m, 0), (size_t)numel(m, 1) * sizeof(float));
		break;
	case MGT_HF_QKV:
	case MGT_HF_QKV_GPT2:
		qkv_move(c, m, t, (float *)src, dst, false);
		break;
	}
}

/* ---- GGUF names (llama.cpp gguf-py TENSOR_NAMES; ggml's docs/gguf.md) ---- */

static const struct {
	const char *hf, *gguf; /* per-layer parts after "h.N." / "model.layers.N.", or global names */
} gguf_layer[] = {
	{"ln_1.", "attn_norm."}, {"attn.c_attn.", "attn_qkv."}, {"attn.c_proj.", "attn_output."},
	{"ln_2.", "ffn_norm."}, {"mlp.c_fc.", "ffn_up."}, {"mlp.c_proj.", "ffn_down."},
	{"input_layernorm.", "attn_norm."}, {"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."},
	{"self_attn.v_proj.", "attn_v."}, {"self_attn.o_proj.", "attn_output."}, {"self_attn.q_norm.", "attn_q_norm."},
	{"self_attn.k_norm.", "attn_k_norm."}, {"post_attention_layernorm.", "ffn_norm."},
	{"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."}, {"mlp.down_proj.", "ffn_down."},
	/* backbone.layers.N. (llama.cpp's MODEL_TENSORS[MAMBA2] and [NEMOTRON_H]; dt_bias is ssm_dt.bias,
	 * ssm_a and ssm_d have no suffix) */
	{"norm.", "attn_norm."}, {"mixer.in_proj.", "ssm_in."}, {"mixer.conv1d.", "ssm_conv1d."},
	{"mixer.dt_bias", "ssm_dt.bias"}, {"mixer.A_log", "ssm_a"}, {"mixer.D", "ssm_d"}, {"mixer.norm.", "ssm_norm."},
	{"mixer.out_proj.", "ssm_out."}, {"mixer.q_proj.", "attn_q."}, {"mixer.k_proj.", "attn_k."},
	{"mixer.v_proj.", "attn_v."}, {"mixer.o_proj.", "attn_output."}, {"mixer.up_proj.", "ffn_up."},
	{"mixer.down_proj.", "ffn_down."},
	/* NemotronH's MoE (llama.cpp's MODEL_TENSORS[NEMOTRON_H_MOE]; the experts: mgt_hf_gguf_name) */
	{"mixer.gate.e_score_correction_bias", "exp_probs_b.bias"}, {"mixer.gate.", "ffn_gate_inp."},
	{"mixer.shared_experts.up_proj.", "ffn_up_shexp."}, {"mixer.shared_experts.down_proj.", "ffn_down_shexp."},
	/* its latent projections (moe_latent_size; llama.cpp's LLM_TENSOR_FFN_LATENT_DOWN / _UP) */
	{"mixer.fc1_latent_proj.", "ffn_latent_down."}, {"mixer.fc2_latent_proj.", "ffn_latent_up."},
}, gguf_global[] = {
	{"wte.weight", "token_embd.weight"}, {"wpe.weight", "position_embd.weight"}, {"ln_f.weight", "output_norm.weight"},
	{"ln_f.bias", "output_norm.bias"}, {"model.embed_tokens.weight", "token_embd.weight"},
	{"model.norm.weight", "output_norm.weight"}, {"lm_head.weight", "output.weight"},
	{"backbone.embeddings.weight", "token_embd.weight"}, {"backbone.norm_f.weight", "output_norm.weight"},
};

mgt_status mgt_hf_gguf_name(mgt_hf_family f, const char *gpt2_prefix, const char *hf, char *out, size_t n,
			    mgt_gguf_fix *fix)
{
	*fix = MGT_GGUF_AS_IS;
	const mgt_hf_spec *s = mgt_hf_spec_of(f);
	bool gpt2 = s->names == MGT_HF_NAMES_GPT2;
	size_t pl = strlen(gpt2_prefix);
	if (gpt2 && pl && !strncmp(hf, gpt2_prefix, pl)) hf += pl;
	int layer, used = 0;
	const char *rest = NULL;
	bool bb = s->names == MGT_HF_NAMES_BACKBONE;
	if (sscanf(hf, gpt2 ? "h.%d.%n" : bb ? "backbone.layers.%d.%n" : "model.layers.%d.%n", &layer, &used) == 1 && used > 0)
		rest = hf + used;
	int expert, eu = 0;
	if (rest && bb && sscanf(rest, "mixer.experts.%d.%n", &expert, &eu) == 1 && eu > 0 &&
	    (!strcmp(rest + eu, "up_proj.weight") || !strcmp(rest + eu, "down_proj.weight"))) {
		snprintf(out, n, "blk.%d.ffn_%s_exps.weight", layer, rest[eu] == 'u' ? "up" : "down");
		*fix = MGT_GGUF_EXPERTS;
		return MGT_OK;
	}
	for (size_t i = 0; rest && i < sizeof gguf_layer / sizeof gguf_layer[0]; i++) {
		size_t k = strlen(gguf_layer[i].hf);
		if (strncmp(rest, gguf_layer[i].hf, k)) continue;
		snprintf(out, n, "blk.%d.%s%s", layer, gguf_layer[i].gguf, rest + k);
		if (bb) {
			static const struct { const char *hf; mgt_gguf_fix fix; } mamba[] = {
				{"mixer.conv1d.weight", MGT_GGUF_SQUEEZE}, {"mixer.A_log", MGT_GGUF_NEG_EXP},
				{"mixer.D", MGT_GGUF_COLUMN}, {"mixer.norm.weight", MGT_GGUF_GROUPS},
			};
			for (size_t j = 0; j < sizeof mamba / sizeof mamba[0]; j++)
				if (!strcmp(rest, mamba[j].hf)) *fix = mamba[j].fix;
			return MGT_OK;
		}
		bool weight2d = !strcmp(rest + k, "weight");
		if (gpt2 && weight2d && strncmp(rest, "ln_", 3)) *fix = MGT_GGUF_TRANSPOSE;
		/* llama.cpp's "llama" architecture rotates adjacent pairs: q and k rows permuted */
		if (s->gguf_rope_permute) {
			if (!strncmp(rest, "self_attn.q_proj.", 17)) *fix = MGT_GGUF_PERMUTE_Q;
			if (!strncmp(rest, "self_attn.k_proj.", 17)) *fix = MGT_GGUF_PERMUTE_K;
		}
		return MGT_OK;
	}
	for (size_t i = 0; !rest && i < sizeof gguf_global / sizeof gguf_global[0]; i++)
		if (!strcmp(hf, gguf_global[i].hf)) {
			snprintf(out, n, "%s", gguf_global[i].gguf);
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_USAGE, "tensor %s has no GGUF name", hf);
}

void mgt_gguf_permute(const float *src, float *dst, int64_t rows, int64_t cols, int64_t heads)
{
	/* rows = heads x 2 x half: row (h, s, j) of the rotate_half layout goes to (h, j, s) */
	int64_t half = rows / heads / 2;
	for (int64_t h = 0; h < heads; h++)
		for (int64_t s = 0; s < 2; s++)
			for (int64_t j = 0; j < half; j++)
				memcpy(dst + ((h * half + j) * 2 + s) * cols, src + ((h * 2 + s) * half + j) * cols,
				       (size_t)cols * sizeof(float));
}
