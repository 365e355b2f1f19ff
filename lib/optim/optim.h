/* lib/optim: the learning-rate schedule, gradient clipping and AdamW over the tensor table.
 *
 * Sources: megatron/core/optimizer_param_scheduler.py (the schedule, counted in samples),
 * megatron/core/optimizer/clip_grads.py (global L2 norm, clip coefficient clip/(norm + 1e-6)),
 * megatron/core/optimizer/__init__.py (no weight decay for biases and 1-D parameters),
 * torch.optim.AdamW (the update's arithmetic; backend op adamw).
 */
#ifndef MGT_OPTIM_H
#define MGT_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "dist/dist.h"
#include "model/model.h"

/* Megatron's OptimizerParamScheduler for the learning rate.  Steps are samples:
 * warmup_steps = --lr-warmup-iters * global batch (or --lr-warmup-samples, or
 * --lr-warmup-fraction * decay_steps), decay_steps = (--lr-decay-iters or --train-iters) * GBS. */
typedef struct mgt_lr_sched {
	double max_lr, min_lr, init_lr;      /* --lr, --min-lr, --lr-warmup-init */
	int64_t warmup_steps, decay_steps, wsd_decay_steps;
	char style[24];                      /* constant linear cosine inverse-square-root WSD */
	char wsd_style[16];                  /* exponential linear cosine minus_sqrt */
	int64_t num_steps;                   /* samples of successful iterations so far */
} mgt_lr_sched;

/* Check style names and step counts.  Errors: MGT_ERR_USAGE naming the flag. */
mgt_status mgt_lr_sched_check(const mgt_lr_sched *s);
/* The learning rate at s->num_steps (megatron-reference.md section 5.4). */
double mgt_lr_get(const mgt_lr_sched *s);

/* AdamW state: first and second moments (backend memory, fp32, [n]) and the step count. */
typedef struct mgt_adamw {
	mgt_backend *be;
	float *m, *v;
	size_t n;
	int64_t step;                        /* successful steps taken (bias correction) */
	double beta1, beta2, eps, weight_decay, clip_grad;
} mgt_adamw;

/* Allocate zeroed moments for n parameters.  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_adamw_init(mgt_adamw *a, mgt_backend *be, size_t n);
void mgt_adamw_free(mgt_adamw *a);

/* Global L2 norm of the gradients (sqrt of the sum of squares in double, summed over the given
 * model-parallel group, NULL for none).  NaN or Inf when a gradient is. */
mgt_status mgt_grad_norm(mgt_backend *be, const float *grads, size_t n, mgt_comm *mp, double *norm);

/* One optimizer step given the gradient norm: clip (when clip_grad > 0 and
 * clip_grad / (norm + 1e-6) < 1), then AdamW tensor by tensor with weight decay only where the
 * table says so.  Returns false (no update, nothing changed) when norm is not finite: the caller
 * counts a skipped iteration. */
bool mgt_adamw_step(mgt_adamw *a, const mgt_tensor_table *tt, float *params, float *grads,
		    double lr, double norm);

#endif
