/* lib/model/moe_config.c: checks of the Mixture-of-Experts configuration (Megatron's
 * megatron/training/arguments.py validate_args and transformer_config.py __post_init__). */
#include "model.h"

#include <string.h>

mgt_status mgt_moe_config_check(const mgt_model_config *c, int tp)
{
	if (c->num_experts <= 0) return MGT_OK;
	if (c->moe_router_topk < 1 || c->moe_router_topk > c->num_experts)
		return mgt_err(MGT_ERR_USAGE, "--moe-router-topk %lld must be in 1..--num-experts %lld",
			       (long long)c->moe_router_topk, (long long)c->num_experts);
	if (c->moe_ffn_hidden_size % tp || c->moe_shared_expert_intermediate_size % tp)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size %d must divide --moe-ffn-hidden-size %lld "
			       "and --moe-shared-expert-intermediate-size %lld", tp, (long long)c->moe_ffn_hidden_size,
			       (long long)c->moe_shared_expert_intermediate_size);
	return MGT_OK;
}
