/* lib/model/moe.h: the Mixture-of-Experts internals of lib/model (not a public header; the
 * public interface is in model.h).  moe_route.c: the router's math on the host; moe.c: the MoE
 * layer's forward and backward over backend ops. */
#ifndef MGT_MOE_H
#define MGT_MOE_H

#include "model.h"

/* Limits of this version (mgt_moe_config_check refuses more). */
#define MGT_MOE_MAX_EXPERTS 1024
#define MGT_MOE_MAX_TOPK 64

/* The routing of one micro-batch of T tokens (sequence-first, t = i*B + j) over E experts, top k.
 * Host memory, double precision (Megatron computes it in the router dtype: fp32 with
 * --moe-router-dtype fp32; double here is at least as exact). */
typedef struct mgt_moe_route {
	int T, E, k, B;
	double *L;      /* [T, E] router logits (filled by the caller) */
	double *ps;     /* [T, E] scores of the auxiliary loss: softmax over E, or sigmoid / sum */
	int *sel;       /* [T, k] chosen experts, in descending order of their routing score */
	char *keep;     /* [T, k] 1: the copy goes to its expert; 0: dropped (capacity) */
	double *prob;   /* [T, k] routed probabilities (the top-k scaling factor applied) */
	double *cnt;    /* [(B or 1), E] tokens per expert of the aux loss's top-k (per sequence for seq_aux_loss) */
	double *tokens; /* [E] copies kept per expert (the expert-bias update's counts) */
	double aux;     /* the unscaled auxiliary loss (aux / coeff): ~1 for balanced routing */
	double z;       /* the unscaled z loss: mean over tokens of logsumexp(logits)^2 */
	int Tg;         /* tokens the losses average over: T, except for a rank's part of a micro-batch
			 * routed whole under context parallelism (mgt_moe_route_part): its T rows are
			 * the rank's tokens, while cnt, tokens, aux and z are the whole micro-batch's */
	double *work;   /* scratch: [4 E] doubles, and [T k] copies of capacity dropping */
	void *copies;
} mgt_moe_route;

/* Allocate the arrays (scratch included: routing allocates nothing) for T tokens in B sequences
 * (T % B == 0), E experts, top k.  Errors: NOMEM. */
mgt_status mgt_moe_route_alloc(mgt_moe_route *r, int T, int E, int k, int B);
void mgt_moe_route_free(mgt_moe_route *r);

/* From r->L: route every token (score function, pre-softmax, expert bias (sigmoid only; NULL for
 * none), groups, scaling factor; moe_utils.py topk_routing_with_score_function), drop tokens over
 * capacity in each of `blocks` equal blocks of tokens (the TP ranks' rows under SP), count tokens
 * per expert, and compute the unscaled aux (aux_loss or seq_aux_loss) and z losses.  Returns
 * MGT_OK. */
mgt_status mgt_moe_route_forward(const mgt_model_config *c, mgt_moe_route *r, const float *bias, int blocks);
/* Context parallelism: part (allocated for part->T tokens in the same B sequences, E, k) gets
 * rows rows[i] (0 <= i < part->T) of the routed whole (L, ps, sel, keep, prob), the whole's
 * cnt, tokens, aux and z, and Tg = whole->T, so that mgt_moe_route_backward on the part gives
 * those rows of the whole's gradient. */
void mgt_moe_route_part(const mgt_moe_route *whole, mgt_moe_route *part, const int64_t *rows);

/* dL [T, E] (written) = d(loss)/d(logits) from dprob [T, k] (the gradient of the routed
 * probabilities; dropped copies ignored) plus aux_scale times the gradients of
 * coeff x aux and coeff x z (Megatron's MoEAuxLossAutoScaler: the losses' gradient is the main
 * loss's scale, loss scale / micro-batches).  Returns MGT_OK. */
mgt_status mgt_moe_route_backward(const mgt_model_config *c, const mgt_moe_route *r, const double *dprob,
				  double aux_scale, double *dL);

#endif
