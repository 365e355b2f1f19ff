/* lib/model/layer_moe.c: the MoE layer kind ('E' in the chunk's pattern; Megatron's MoELayer,
 * megatron/core/transformer/moe/moe_layer.py, in transformer_layer.py's MLP place):
 * pre_mlp_layernorm, moe.c's router and experts, the TP reduction and bias-dropout-add, and
 * their backward.  The dense MLP kind ('-') is layer_mlp.c's. */
#include "model_impl.h"

size_t mgt_layer_moe_numel(const mgt_model *m, int li, int k)
{
	/* the norm's output and statistics as a dense layer's; the expert activations are moe.c's */
	return k == LA_FC1 || k == LA_ACT ? 0 : mgt_layer_mlp_numel(m, li, k);
}

mgt_status mgt_layer_moe_fwd(mgt_model *m, int li, bool train, void *out)
{
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer;
	mgt_elem_type lt;
	void *ln = mgt_sublayer_norm_dst(m, li, a->ln2, &lt);
	mgt_status st = mgt_sublayer_norm_gather(m, ln, lt, a->mean2, a->rstd2, a->x_mid, T_(m, l, MGT_T_LN2_W),
						 T_(m, l, MGT_T_LN2_B));
	if (st || (st = mgt_moe_forward(m, li, train, a->ln2, m->scratch.dtmp_h)) || !out) return st;
	return mgt_sublayer_reduce_bda(m, out, a->x_mid, NULL, train, mgt_sublayer_site_key(m, l, 3), m->prec.act_t);
}

mgt_status mgt_layer_moe_bwd(mgt_model *m, int li, bool train)
{
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer;
	void *dxl;
	mgt_status st = mgt_sublayer_bda_bwd_gather(m, T_(m, l, MGT_T_FC2_B), train, mgt_sublayer_site_key(m, l, 3), m->prec.act_t);
	if (st || (st = mgt_moe_backward(m, li, train, a->ln2, m->scratch.dtmp_h, &dxl))) return st;
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, a->x_mid, T_(m, l, MGT_T_LN2_W), T_(m, l, MGT_T_LN2_B),
					    a->mean2, a->rstd2, dxl);
}
