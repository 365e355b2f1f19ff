/* lib/model/layer_attn.c: the self-attention layer kind (megatron/core/transformer/
 * attention.py, transformer_layer.py): input_layernorm, linear_qkv, the head norms
 * (--qk-layernorm), RoPE, core attention (or cp.c's context-parallel attention), linear_proj and
 * the bias-dropout-add into the residual stream, and their backward; its table rows
 * (mgt_layer_attn_rows, the '*' symbol's).  Buffers: layer_act (model_impl.h), sized in chunk.c. */
#include "model_impl.h"

#include <math.h>
#include <string.h>

size_t mgt_layer_attn_numel(const mgt_model *m, int li, int k)
{
	size_t T = (size_t)m->T, rows = T * (size_t)m->ng_l;
	switch (k) {
	case LA_LN1: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * (size_t)m->h; /* fp8: the cast keeps x */
	case LA_MEAN1: case LA_RSTD1: return (size_t)m->Th;
	case LA_QKV: return T * (size_t)m->qkv_l;
	case LA_CTX: return T * (size_t)(m->nq_l * m->d);
	case LA_LSE: return (size_t)m->b * (size_t)m->nq_l * (size_t)m->s;
	case LA_QKV_PRE: return m->qkln ? T * (size_t)m->qkv_l : 0;
	case LA_QMEAN: case LA_QRSTD: return m->qkln ? rows * (size_t)m->r : 0;
	case LA_KMEAN: case LA_KRSTD: return m->qkln ? rows : 0;
	default: return 0;
	}
}

/* The descriptor of layer attention over the whole local sequence (backend.h attn_forward,
 * MGT_ATTN_SELF): causal, or under the micro-batch's key mask (BERT, T5's encoder), with T5's
 * position bias pb and its gradient db when given. */
static mgt_attn self_attn(const mgt_model *m, float p, uint64_t key, const float *pb, float *db)
{
	const int s = m->s;
	return (mgt_attn){ .sq = s, .sk = s, .b = m->b, .ng = (int)m->ng_l, .r = (int)m->r, .d = (int)m->d, .s = s,
			   .ld_lse = s, .p = p, .key = key, .head0 = (int)(m->nq_l * m->ps->tp_rank),
			   .heads_total = (int)m->c.num_attention_heads, .kind = MGT_ATTN_SELF, .t = m->prec.act_t,
			   .gt = m->prec.act_t, .key_mask = m->cur->kmask, .seg_start = m->cur->seg, .bias = pb,
			   .dbias = db };
}

/* Core attention of layer li: ctx and lse from qkv (the part --recompute-granularity selective
 * reruns in the backward; its dropout mask comes from the same key). */
mgt_status mgt_layer_attn_core_fwd(mgt_model *m, int li, bool train)
{
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer;
	float p = drop_p(train, m->c.attention_dropout);
	if (m->cp.size > 1) return mgt_cp_attn_fwd(m, a, p, mgt_sublayer_site_key(m, l, 1));
	const mgt_attn at = self_attn(m, p, mgt_sublayer_site_key(m, l, 1), m->attn_bias, NULL);
	m->be->ops->attn_forward(m->be, &at, a->ctx, a->lse, a->qkv, NULL);
	return MGT_OK;
}

mgt_status mgt_layer_attn_fwd(mgt_model *m, int li, bool train, void *out)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	layer_act *a = &sa->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	mgt_elem_type lt;
	void *ln = mgt_sublayer_norm_dst(m, li, a->ln1, &lt);
	mgt_status st = mgt_sublayer_norm_gather(m, ln, lt, a->mean1, a->rstd1, a->x_in, T_(m, l, MGT_T_LN1_W),
						 T_(m, l, MGT_T_LN1_B));
	if (!st)
		st = mgt_sublayer_lin_fwd(m, li, 0, m->qkln ? a->qkv_pre : a->qkv, m->qkln ? MGT_DT_F32 : m->prec.act_t, ln,
					  lt, T_(m, l, MGT_T_QKV_W), T_(m, l, MGT_T_QKV_B), h, (int)m->qkv_l);
	if (st) return st;
	int ng = (int)m->ng_l, r = (int)m->r, d = (int)m->d;
	if (m->qkln) { /* q_layernorm / k_layernorm on the heads; values copied through */
		float eps = (float)m->c.norm_epsilon;
		const size_t n = (size_t)T * (size_t)m->qkv_l;
		if (m->prec.act_t == MGT_DT_F32) o->copy(m->be, a->qkv, a->qkv_pre, n * sizeof(float));
		else o->cast(m->be, a->qkv, m->prec.act_t, a->qkv_pre, n); /* the value heads as linear_qkv's rounded output */
		o->head_norm_fwd(m->be, m->norm, a->qkv, m->prec.act_t, a->qmean, a->qrstd, a->qkv_pre, NW(m, T_(m, l, MGT_T_QNORM_W)),
				 P(m, T_(m, l, MGT_T_QNORM_B)), T, ng, r, d, false, eps);
		o->head_norm_fwd(m->be, m->norm, a->qkv, m->prec.act_t, a->kmean, a->krstd, a->qkv_pre, NW(m, T_(m, l, MGT_T_KNORM_W)),
				 P(m, T_(m, l, MGT_T_KNORM_B)), T, ng, r, d, true, eps);
	}
	if (m->rope) o->rope(m->be, a->qkv, m->prec.act_t, sa->pos, m->inv_freq, T, ng, r, d, m->rot_dim, false);
	st = mgt_layer_attn_core_fwd(m, li, train);
	if (st || !out) return st; /* recomputation: the backward reads nothing past ctx and lse */
	st = mgt_sublayer_lin_fwd(m, li, 1, m->scratch.dtmp_h, m->prec.act_t, a->ctx, m->prec.act_t, T_(m, l, MGT_T_PROJ_W), NULL,
					  (int)(m->nq_l * m->d), h);
	if (st) return st;
	return mgt_sublayer_reduce_bda(m, out, a->x_in, T_(m, l, MGT_T_PROJ_B), train, mgt_sublayer_site_key(m, l, 2),
				       m->prec.act_t);
}

mgt_status mgt_layer_attn_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	layer_act *a = &sa->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h, nd = (int)(m->nq_l * m->d);
	mgt_status st = mgt_sublayer_bda_bwd_gather(m, T_(m, l, MGT_T_PROJ_B), train, mgt_sublayer_site_key(m, l, 2),
						    m->prec.act_t);
	if (st) return st;
	if ((st = mgt_sublayer_lin_bwd(m, li, 1, m->scratch.dctx, m->prec.act_t, T_(m, l, MGT_T_PROJ_W), NULL, m->scratch.dtmp_h, m->prec.act_t,
				       a->ctx, m->prec.act_t, nd, h)))
		return st;
	float p = drop_p(train, m->c.attention_dropout);
	if (m->cp.size > 1) st = mgt_cp_attn_bwd(m, a, m->scratch.dbig, m->scratch.dctx, m->prec.act_t, p, mgt_sublayer_site_key(m, l, 1));
	else {
		const mgt_attn at = self_attn(m, p, mgt_sublayer_site_key(m, l, 1), m->attn_bias, m->attn_dbias);
		o->attn_backward(m->be, &at, m->scratch.dbig, NULL, m->scratch.dctx, a->qkv, NULL, a->ctx, a->lse);
	}
	if (st) return st;
	int ng = (int)m->ng_l, r = (int)m->r, d = (int)m->d;
	if (m->rope) o->rope(m->be, m->scratch.dbig, m->prec.act_t, sa->pos, m->inv_freq, T, ng, r, d, m->rot_dim, true);
	if (m->qkln) { /* in place: the head rows of dbig become d(linear_qkv output) */
		o->head_norm_bwd(m->be, m->norm, m->scratch.dbig, G(m, T_(m, l, MGT_T_QNORM_W)), G(m, T_(m, l, MGT_T_QNORM_B)),
				 m->scratch.dbig, m->prec.act_t, a->qkv_pre, NW(m, T_(m, l, MGT_T_QNORM_W)), a->qmean, a->qrstd, T, ng, r, d, false);
		o->head_norm_bwd(m->be, m->norm, m->scratch.dbig, G(m, T_(m, l, MGT_T_KNORM_W)), G(m, T_(m, l, MGT_T_KNORM_B)),
				 m->scratch.dbig, m->prec.act_t, a->qkv_pre, NW(m, T_(m, l, MGT_T_KNORM_W)), a->kmean, a->krstd, T, ng, r, d, true);
	}
	st = mgt_sublayer_lin_bwd(m, li, 0, m->scratch.dtmp_h, m->prec.act_t, T_(m, l, MGT_T_QKV_W), T_(m, l, MGT_T_QKV_B), m->scratch.dbig,
				  m->prec.act_t, a->ln1, m->prec.act_t, h, (int)m->qkv_l);
	if (st) return st;
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, a->x_in, T_(m, l, MGT_T_LN1_W), T_(m, l, MGT_T_LN1_B),
					    a->mean1, a->rstd1, NULL);
}

/* ---- the table rows ---- */

/* q_layernorm / k_layernorm: [kv_channels], replicated over TP; weight decay only with
 * apply_wd_to_qk_layernorm (Megatron's optimizer param groups exempt 1-D tensors otherwise). */
static void head_norm_rows(mgt_rows *bd, int layer, mgt_tensor_role w, const char *name_w, const char *name_b)
{
	const mgt_model_config *c = bd->c;
	int n0 = bd->tt->n;
	mgt_rows_add(bd, layer, w, name_w, c->kv_channels, 0, MGT_SHARD_NONE,
		     c->apply_layernorm_1p ? MGT_INIT_ZERO : MGT_INIT_ONE, 0);
	if (!strcmp(c->normalization, "LayerNorm"))
		mgt_rows_add(bd, layer, w + 1, name_b, c->kv_channels, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
	for (int k = n0; !bd->st && k < bd->tt->n; k++) bd->tt->t[k].weight_decay = c->apply_wd_to_qk_layernorm;
}

void mgt_layer_attn_rows(mgt_rows *bd, int i)
{
	const mgt_model_config *c = bd->c;
	int64_t h = c->hidden_size, d = c->kv_channels, nq = c->num_attention_heads;
	int64_t qkv = (nq + 2 * c->num_query_groups) * d;
	double std = c->init_method_std, out_std = mgt_model_out_std(c);
	bool bias = c->add_bias_linear;
	/* Megatron-Core's parameter order (it decides the DDP buffer layout): Attention builds
	 * linear_proj before SelfAttention builds linear_qkv; TE's LayerNormLinear registers the
	 * norm's parameters before its own. */
	mgt_rows_add(bd, i, MGT_T_PROJ_W, "self_attention.linear_proj.weight", h, nq * d, MGT_SHARD_COL,
		     MGT_INIT_NORMAL, out_std);
	if (bias) mgt_rows_add(bd, i, MGT_T_PROJ_B, "self_attention.linear_proj.bias", h, 0, MGT_SHARD_NONE,
			       MGT_INIT_ZERO, 0);
	mgt_rows_norm(bd, i, MGT_T_LN1_W, "self_attention.linear_qkv.layer_norm_weight",
		      "self_attention.linear_qkv.layer_norm_bias");
	mgt_rows_add(bd, i, MGT_T_QKV_W, "self_attention.linear_qkv.weight", qkv, h, MGT_SHARD_ROW,
		     MGT_INIT_NORMAL, std);
	if (bias || c->add_qkv_bias)
		mgt_rows_add(bd, i, MGT_T_QKV_B, "self_attention.linear_qkv.bias", qkv, 0, MGT_SHARD_ROW,
			     MGT_INIT_ZERO, 0);
	/* SelfAttention registers q_layernorm and k_layernorm after linear_qkv (attention.py) */
	if (c->qk_layernorm) {
		head_norm_rows(bd, i, MGT_T_QNORM_W, "self_attention.q_layernorm.weight", "self_attention.q_layernorm.bias");
		head_norm_rows(bd, i, MGT_T_KNORM_W, "self_attention.k_layernorm.weight", "self_attention.k_layernorm.bias");
	}
}
