/* lib/train/moe.c: the Mixture of Experts bookkeeping of an iteration: the routers' statistics
 * gathered and the expert biases updated (megatron/core/transformer/moe/moe_utils.py). */
#include "train_impl.h"

#include <stdlib.h>
#include <string.h>

/* The ordinal among the model's MoE layers of each chunk's first MoE layer (a chunk's MoE layers
 * are consecutive among the model's), into t->moe.first [V]. */
static mgt_status moe_first_ordinals(trainer *t)
{
	int *layers = mgt_malloc((size_t)t->a->model.num_layers * sizeof *layers);
	t->moe.first = mgt_malloc((size_t)t->V * sizeof *t->moe.first);
	if (!layers || !t->moe.first) {
		free(layers);
		return MGT_ERR_NOMEM;
	}
	for (int c = 0; c < t->V; c++) {
		int k = mgt_model_moe_layers(t->chunk[c], layers), o = 0;
		for (int l = 0; k && l < layers[0]; l++) o += mgt_moe_is_layer(&t->a->model, l);
		t->moe.first[c] = o;
	}
	free(layers);
	return MGT_OK;
}

mgt_status trainer_moe_step(trainer *t)
{
	int E = (int)t->a->model.num_experts, n = t->moe.n;
	size_t all = (size_t)n * (size_t)(2 + E); /* moe.aux, moe.z and moe.tok side by side */
	memset(t->moe.aux, 0, all * sizeof(double));
	mgt_status st = t->moe.first ? MGT_OK : moe_first_ordinals(t);
	for (int c = 0; !st && c < t->V; c++) {
		int o = t->moe.first[c];
		mgt_model_moe_take_stats(t->chunk[c], t->moe.aux + o, t->moe.z + o, t->moe.tok + (size_t)o * E);
	}
	mgt_comm *cs[] = { trainer_host_comm(t->ps.pp_comm, t->ps.host_pp), trainer_host_comm(t->ps.dp_comm, t->ps.host_dp) };
	for (int i = 0; !st && i < 2; i++)
		if (cs[i]->size > 1) st = cs[i]->ops->allreduce(cs[i], t->moe.aux, all, MGT_DT_F64, MGT_RED_SUM);
	for (int c = 0; !st && c < t->V; c++)
		st = mgt_model_moe_update_bias(t->chunk[c], t->moe.tok + (size_t)t->moe.first[c] * E);
	double per = 1.0 / ((double)t->a->num_microbatches * t->ps.dp);
	t->moe.lb = t->moe.zl = 0;
	for (int i = 0; i < n; i++) {
		t->moe.aux[i] *= per;
		t->moe.z[i] *= per;
		t->moe.lb += t->moe.aux[i] / n;
		t->moe.zl += t->moe.z[i] / n;
	}
	return st;
}
