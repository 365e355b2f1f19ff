/* lib/model/moe_config.c: checks of the Mixture-of-Experts configuration (Megatron's
 * megatron/training/arguments.py validate_args, transformer_config.py __post_init__ and
 * models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec), with mgt's own limits of this
 * version (no linear biases with experts; softmax and sigmoid scores; aux_loss, seq_aux_loss
 * and none balancing), and of the latent projections (--moe-latent-size). */
#include "model.h"
#include "moe.h"

#include <string.h>

#define LL(x) ((long long)(x))

static mgt_status check_router(const mgt_model_config *c)
{
	const char *sf = c->moe_router_score_function, *lb = c->moe_router_load_balancing_type;
	int64_t E = c->num_experts, k = c->moe_router_topk, G = c->moe_router_num_groups, g = c->moe_router_group_topk;
	if (!strcmp(sf, "sqrtsoftplus"))
		return mgt_err(MGT_ERR_USAGE, "--moe-router-score-function sqrtsoftplus is not implemented (softmax and "
			       "sigmoid are)");
	if (strcmp(sf, "softmax") && strcmp(sf, "sigmoid"))
		return mgt_err(MGT_ERR_USAGE, "--moe-router-score-function %s: expected softmax or sigmoid", sf);
	if (!strcmp(lb, "sinkhorn") || !strcmp(lb, "global_aux_loss") || !strcmp(lb, "quantile_balancing"))
		return mgt_err(MGT_ERR_USAGE, "--moe-router-load-balancing-type %s is not implemented (aux_loss, "
			       "seq_aux_loss and none are; --moe-router-enable-expert-bias gives aux-loss-free balancing)", lb);
	if (strcmp(lb, "aux_loss") && strcmp(lb, "seq_aux_loss") && strcmp(lb, "none"))
		return mgt_err(MGT_ERR_USAGE, "--moe-router-load-balancing-type %s: expected aux_loss, seq_aux_loss or none", lb);
	if (k < 1 || k > E)
		return mgt_err(MGT_ERR_USAGE, "--moe-router-topk %lld must be in 1..--num-experts %lld", LL(k), LL(E));
	/* transformer_config.py: softmax over one selected logit has a zero gradient */
	if (k == 1 && !strcmp(sf, "softmax") && !c->moe_router_pre_softmax)
		return mgt_err(MGT_ERR_USAGE, "--moe-router-topk 1 with --moe-router-score-function softmax needs "
			       "--moe-router-pre-softmax (a softmax over one logit has no gradient)");
	if (c->moe_router_enable_expert_bias && strcmp(sf, "sigmoid"))
		return mgt_err(MGT_ERR_USAGE, "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid "
			       "(aux-loss-free routing, as Megatron), not %s", sf);
	/* Group-limited routing is on when --moe-router-group-topk is set (transformer_config.py);
	 * the group score sums the top floor(k / group-topk) scores of each group
	 * (moe_utils.py group_limited_topk), and the chosen groups must hold k experts. */
	if (g) {
		if (!G)
			return mgt_err(MGT_ERR_USAGE, "--moe-router-group-topk %lld needs --moe-router-num-groups "
				       "(group-limited routing)", LL(g));
		if (E % G)
			return mgt_err(MGT_ERR_USAGE, "--moe-router-num-groups %lld must divide --num-experts %lld", LL(G), LL(E));
		if (g > G)
			return mgt_err(MGT_ERR_USAGE, "--moe-router-group-topk %lld must be at most --moe-router-num-groups "
				       "%lld", LL(g), LL(G));
		if (g > k)
			return mgt_err(MGT_ERR_USAGE, "--moe-router-group-topk %lld must be at most --moe-router-topk %lld "
				       "(each chosen group is scored by its top k / group-topk experts)", LL(g), LL(k));
		if (k > g * (E / G))
			return mgt_err(MGT_ERR_USAGE, "--moe-router-topk %lld is more than the %lld experts of "
				       "--moe-router-group-topk %lld groups of %lld (--num-experts %lld / "
				       "--moe-router-num-groups %lld)", LL(k), LL(g * (E / G)), LL(g), LL(E / G), LL(E), LL(G));
	}
	return MGT_OK;
}

static mgt_status check_capacity(const mgt_model_config *c)
{
	const char *dp = c->moe_token_drop_policy;
	if (strcmp(dp, "probs") && strcmp(dp, "position"))
		return mgt_err(MGT_ERR_USAGE, "--moe-token-drop-policy %s: expected probs or position", dp);
	if (c->moe_expert_capacity_factor < 0)
		return mgt_err(MGT_ERR_USAGE, "--moe-expert-capacity-factor %g: expected a number > 0 (or none: dropless)",
			       c->moe_expert_capacity_factor);
	if (c->moe_pad_expert_input_to_capacity && c->moe_expert_capacity_factor <= 0)
		return mgt_err(MGT_ERR_USAGE, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
	return MGT_OK;
}

/* Sizes whose products stay inside int64 and size_t (as table.c config_bounds): each bounded,
 * naming its flag, and the experts' parameters checked in double precision. */
static mgt_status check_bounds(const mgt_model_config *c)
{
	const struct { const char *flag; int64_t v, max; } dims[] = {
		{ "--num-experts", c->num_experts, MGT_MOE_MAX_EXPERTS }, { "--moe-router-topk", c->moe_router_topk, MGT_MOE_MAX_TOPK },
		{ "--moe-ffn-hidden-size", c->moe_ffn_hidden_size, 1 << 26 },
		{ "--moe-shared-expert-intermediate-size", c->moe_shared_expert_intermediate_size, 1 << 26 },
	};
	for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
		if (dims[i].v > dims[i].max)
			return mgt_err(MGT_ERR_USAGE, "%s %lld: more than the %lld mgt supports", dims[i].flag, LL(dims[i].v),
				       LL(dims[i].max));
	double eh = (double)(c->moe_latent_size ? c->moe_latent_size : c->hidden_size);
	double experts = 3.0 * (eh * (double)c->num_experts * (double)c->moe_ffn_hidden_size +
				(double)c->hidden_size * (double)c->moe_shared_expert_intermediate_size) +
			 2.0 * (double)c->hidden_size * (double)c->moe_latent_size;
	if ((double)c->num_layers * experts > 0x1p50)
		return mgt_err(MGT_ERR_USAGE, "--num-layers %lld x %.3g expert parameters a layer (--num-experts %lld, "
			       "--moe-ffn-hidden-size %lld, --hidden-size %lld): more than the 2^50 parameters mgt supports",
			       LL(c->num_layers), experts, LL(c->num_experts), LL(c->moe_ffn_hidden_size), LL(c->hidden_size));
	return MGT_OK;
}

/* --moe-latent-size (arguments.py validate_args: > 0, and only with --num-experts).  The
 * projections are duplicated over TP (moe_layer.py: TELinear parallel_mode="duplicated") and the
 * experts' fc1 / fc2 split their F side, so the latent width needs no divisibility by TP. */
static mgt_status check_latent(const mgt_model_config *c)
{
	int64_t lat = c->moe_latent_size;
	if (lat < 0) return mgt_err(MGT_ERR_USAGE, "--moe-latent-size %lld: expected a size > 0 (or None)", LL(lat));
	if (lat && c->num_experts <= 0)
		return mgt_err(MGT_ERR_USAGE, "--moe-latent-size %lld needs --num-experts (MoE latent projections are "
			       "applicable only for MoE models)", LL(lat));
	if (lat > 1 << 26)
		return mgt_err(MGT_ERR_USAGE, "--moe-latent-size %lld: more than the %lld mgt supports", LL(lat), LL(1 << 26));
	return MGT_OK;
}

mgt_status mgt_moe_config_check(const mgt_model_config *c, int tp)
{
	mgt_status lst = check_latent(c);
	if (lst || c->num_experts <= 0) return lst;
	mgt_status st = check_bounds(c);
	if (st) return st;
	if (c->add_bias_linear)
		return mgt_err(MGT_ERR_USAGE, "--num-experts %lld: biases in the linear layers of an MoE model are not "
			       "implemented in this version: add --disable-bias-linear (Mixtral, Qwen-MoE and DeepSeek have "
			       "none; --add-qkv-bias still adds the attention's)", LL(c->num_experts));
	size_t n = strlen(c->moe_layer_pattern);
	if (n && (int64_t)n != c->num_layers)
		return mgt_err(MGT_ERR_USAGE, "--moe-layer-freq lists %lld layers but --num-layers is %lld", LL(n),
			       LL(c->num_layers));
	if (!n && c->moe_layer_freq < 1)
		return mgt_err(MGT_ERR_USAGE, "--moe-layer-freq %lld: expected an integer >= 1", LL(c->moe_layer_freq));
	st = check_router(c);
	if (!st) st = check_capacity(c);
	if (st) return st;
	if (c->moe_ffn_hidden_size <= 0 || c->moe_shared_expert_intermediate_size < 0)
		return mgt_err(MGT_ERR_USAGE, "--moe-ffn-hidden-size %lld and --moe-shared-expert-intermediate-size %lld "
			       "must be positive", LL(c->moe_ffn_hidden_size), LL(c->moe_shared_expert_intermediate_size));
	if (c->moe_ffn_hidden_size % tp || c->moe_shared_expert_intermediate_size % tp)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size %d must divide --moe-ffn-hidden-size %lld "
			       "and --moe-shared-expert-intermediate-size %lld", tp, LL(c->moe_ffn_hidden_size),
			       LL(c->moe_shared_expert_intermediate_size));
	return MGT_OK;
}
