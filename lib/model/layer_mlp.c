/* lib/model/layer_mlp.c: the dense MLP layer kind ('-' in the chunk's pattern;
 * megatron/core/transformer/mlp.py, transformer_layer.py): pre_mlp_layernorm, linear_fc1, the
 * activation, linear_fc2 and the bias-dropout-add, their backward, and their table rows
 * (mgt_layer_mlp_rows).  The MoE kind ('E') is layer_moe.c's. */
#include "model_impl.h"

#include <math.h>

size_t mgt_layer_mlp_numel(const mgt_model *m, int li, int k)
{
	size_t T = (size_t)m->T;
	switch (k) {
	case LA_LN2: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * (size_t)m->h; /* fp8: the cast keeps x */
	case LA_MEAN2: case LA_RSTD2: return (size_t)m->Th;
	case LA_FC1: return T * (size_t)m->fc1_l;
	case LA_ACT: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * (size_t)m->ffn_l; /* fp8: x8 kept */
	default: return 0;
	}
}

mgt_status mgt_layer_mlp_fwd(mgt_model *m, int li, bool train, void *out)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	mgt_elem_type lt;
	void *ln = mgt_sublayer_norm_dst(m, li, a->ln2, &lt);
	mgt_status st = mgt_sublayer_norm_gather(m, ln, lt, a->mean2, a->rstd2, a->x_mid, T_(m, l, MGT_T_LN2_W),
						 T_(m, l, MGT_T_LN2_B));
	if (st || (st = mgt_sublayer_lin_fwd(m, li, 2, a->fc1, m->prec.fc1_t, ln, lt, T_(m, l, MGT_T_FC1_W), NULL, h,
					     (int)m->fc1_l)))
		return st;
	/* an fp8 layer keeps fc2's input as its cast bytes only: the activation goes through dact's
	 * scratch (free in the forward) */
	void *act = mgt_model_fp8_layer(m, li) ? (void *)m->scratch.dact : (void *)a->act;
	o->bias_act_fwd(m->be, m->act, act, m->prec.act_t, a->fc1, m->prec.fc1_t, P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	if (!out) return MGT_OK; /* recomputation: the backward reads nothing past the activation */
	if ((st = mgt_sublayer_lin_fwd(m, li, 3, m->scratch.dtmp_h, m->prec.act_t, act, m->prec.act_t, T_(m, l, MGT_T_FC2_W), NULL,
				       (int)m->ffn_l, h)))
		return st;
	return mgt_sublayer_reduce_bda(m, out, a->x_mid, T_(m, l, MGT_T_FC2_B), train, mgt_sublayer_site_key(m, l, 3),
				       m->prec.act_t);
}

mgt_status mgt_layer_mlp_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	mgt_status st = mgt_sublayer_bda_bwd_gather(m, T_(m, l, MGT_T_FC2_B), train, mgt_sublayer_site_key(m, l, 3), m->prec.act_t);
	if (st) return st;
	st = mgt_sublayer_lin_bwd(m, li, 3, m->scratch.dact, m->prec.act_t, T_(m, l, MGT_T_FC2_W), NULL, m->scratch.dtmp_h, m->prec.act_t, a->act,
				  m->prec.act_t, (int)m->ffn_l, h);
	if (st) return st;
	o->bias_act_bwd(m->be, m->act, m->scratch.dbig, G(m, T_(m, l, MGT_T_FC1_B)), m->scratch.dact, m->prec.act_t, a->fc1, m->prec.fc1_t,
			P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	st = mgt_sublayer_lin_bwd(m, li, 2, m->scratch.dtmp_h, m->prec.act_t, T_(m, l, MGT_T_FC1_W), NULL, m->scratch.dbig, m->prec.act_t, a->ln2,
				  m->prec.act_t, h, (int)m->fc1_l);
	if (st) return st;
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, a->x_mid, T_(m, l, MGT_T_LN2_W), T_(m, l, MGT_T_LN2_B),
					    a->mean2, a->rstd2, NULL);
}

/* ---- the table rows ---- */

void mgt_layer_mlp_rows(mgt_rows *bd, int i)
{
	const mgt_model_config *c = bd->c;
	int64_t h = c->hidden_size, ffn = c->ffn_hidden_size;
	double std = c->init_method_std, out_std = mgt_model_out_std(c);
	bool bias = c->add_bias_linear;
	mgt_rows_norm(bd, i, MGT_T_LN2_W, "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias");
	mgt_shard_rule fc1 = c->swiglu ? MGT_SHARD_ROW_GLU : MGT_SHARD_ROW;
	int64_t fc1_rows = c->swiglu ? 2 * ffn : ffn;
	mgt_rows_add(bd, i, MGT_T_FC1_W, "mlp.linear_fc1.weight", fc1_rows, h, fc1, MGT_INIT_NORMAL, std);
	if (bias) mgt_rows_add(bd, i, MGT_T_FC1_B, "mlp.linear_fc1.bias", fc1_rows, 0, fc1, MGT_INIT_ZERO, 0);
	mgt_rows_add(bd, i, MGT_T_FC2_W, "mlp.linear_fc2.weight", h, ffn, MGT_SHARD_COL, MGT_INIT_NORMAL, out_std);
	if (bias) mgt_rows_add(bd, i, MGT_T_FC2_B, "mlp.linear_fc2.bias", h, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
}
