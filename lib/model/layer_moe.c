/* lib/model/layer_moe.c: the MoE layer kind ('E' in the chunk's pattern; Megatron's MoELayer,
 * megatron/core/transformer/moe/moe_layer.py, in transformer_layer.py's MLP place):
 * pre_mlp_layernorm, moe.c's router and experts, the TP reduction and bias-dropout-add, and
 * their backward, and the table rows of the router, experts and shared expert (mgt_layer_moe_rows).
 * The dense MLP kind ('-') is layer_mlp.c's. */
#include "model_impl.h"

#include <math.h>
#include <stdio.h>

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

/* ---- the table rows ---- */

/* The row just added is expert e of layer i: its checkpoint dataset and index. */
static void expert_row(mgt_rows *bd, int i, int e, const char *what)
{
	if (bd->st) return;
	mgt_tensor *t = &bd->tt->t[bd->tt->n - 1];
	t->expert = e;
	t->num_experts = (int)bd->c->num_experts;
	snprintf(t->dataset, sizeof t->dataset, "decoder.layers.%d.mlp.experts.%s", i, what);
}

/* An MoE layer's MLP part, in Megatron-Core's registration order (TransformerLayer
 * pre_mlp_layernorm, then MoELayer: router, fc1_latent_proj and fc2_latent_proj with
 * --moe-latent-size, experts, shared_experts).  Experts are split over the expert-parallel group
 * (this rank holds experts [ep_rank E/ep, (ep_rank + 1) E/ep)) and each over TP as the dense MLP
 * (expert tensor parallelism = TP); with a latent width their hidden side is the latent width.
 * The latent projections are dense parameters, whole on every TP and EP rank (moe_layer.py:
 * parallel_mode="duplicated", is_expert=False), initialized as Megatron's (fc1 init_method,
 * fc2 output_layer_init_method). */
void mgt_layer_moe_rows(mgt_rows *bd, int i)
{
	const mgt_model_config *c = bd->c;
	double std = c->init_method_std, out_std = mgt_model_out_std(c);
	int64_t hid = c->hidden_size, E = c->num_experts, F = c->moe_ffn_hidden_size, lat = c->moe_latent_size;
	int64_t h = lat ? lat : hid; /* the experts' hidden side */
	int64_t S = c->moe_shared_expert_intermediate_size;
	mgt_shard_rule fc1 = c->swiglu ? MGT_SHARD_ROW_GLU : MGT_SHARD_ROW;
	int64_t gl = c->swiglu ? 2 : 1;
	mgt_rows_norm(bd, i, MGT_T_LN2_W, "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias");
	mgt_rows_add(bd, i, MGT_T_ROUTER_W, "mlp.router.weight", E, hid, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	if (c->add_bias_linear) mgt_rows_add(bd, i, MGT_T_ROUTER_B, "mlp.router.bias", E, 0, MGT_SHARD_NONE,
					     MGT_INIT_ZERO, 0);
	if (c->moe_router_enable_expert_bias) {
		mgt_rows_add(bd, i, MGT_T_EXPERT_BIAS, "mlp.router.expert_bias", E, 0, MGT_SHARD_NONE,
			     MGT_INIT_ZERO, 0);
		if (!bd->st) bd->tt->t[bd->tt->n - 1].frozen = true;
	}
	if (lat) {
		mgt_rows_add(bd, i, MGT_T_LAT_FC1_W, "mlp.fc1_latent_proj.weight", lat, hid, MGT_SHARD_NONE,
			     MGT_INIT_NORMAL, std);
		mgt_rows_add(bd, i, MGT_T_LAT_FC2_W, "mlp.fc2_latent_proj.weight", hid, lat, MGT_SHARD_NONE,
			     MGT_INIT_NORMAL, out_std);
	}
	int64_t per = E / bd->ep, e0 = per * bd->ep_rank;
	for (int64_t e = e0; e < e0 + per; e++) {
		char n1[96], n2[96];
		snprintf(n1, sizeof n1, "mlp.experts.local_experts.%lld.linear_fc1.weight", (long long)e);
		snprintf(n2, sizeof n2, "mlp.experts.local_experts.%lld.linear_fc2.weight", (long long)e);
		mgt_rows_add(bd, i, MGT_T_EXP_FC1_W, n1, gl * F, h, fc1, MGT_INIT_NORMAL, std);
		expert_row(bd, i, (int)e, "linear_fc1.weight");
		mgt_rows_add(bd, i, MGT_T_EXP_FC2_W, n2, h, F, MGT_SHARD_COL, MGT_INIT_NORMAL, out_std);
		expert_row(bd, i, (int)e, "linear_fc2.weight");
	}
	if (S) {
		mgt_rows_add(bd, i, MGT_T_SH_FC1_W, "mlp.shared_experts.linear_fc1.weight", gl * S, hid, fc1,
			     MGT_INIT_NORMAL, std);
		mgt_rows_add(bd, i, MGT_T_SH_FC2_W, "mlp.shared_experts.linear_fc2.weight", hid, S, MGT_SHARD_COL,
			     MGT_INIT_NORMAL, out_std);
		if (c->moe_shared_expert_gate)
			mgt_rows_add(bd, i, MGT_T_SH_GATE_W, "mlp.shared_experts.gate_weight", 1, hid, MGT_SHARD_NONE,
				     MGT_INIT_NORMAL, std);
	}
}
