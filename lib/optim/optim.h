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
#include "parallel/parallel.h"
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
/* The learning rate at s->num_steps (megatron/core/optimizer_param_scheduler.py). */
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
/* Bytes mgt_adamw_init allocates for n parameters (the two fp32 moments), for memory planning. */
size_t mgt_adamw_bytes(size_t n);
void mgt_adamw_free(mgt_adamw *a);

/* Sum of squares, in double, of the gradients in the flat-buffer range [lo, hi) that belong to
 * tensors for which count(t, ctx) is true (NULL: all).  The caller sums this over its ranks and
 * takes the square root: the global L2 norm of megatron/core/optimizer/clip_grads.py, where
 * tensors replicated across tensor-parallel ranks and the shared embedding copy on the last
 * pipeline stage are counted once. */
double mgt_grad_sumsq(mgt_backend *be, const mgt_tensor_table *tt, const float *grads, size_t lo, size_t hi,
		      bool (*count)(const mgt_tensor *t, const void *ctx), const void *ctx);

/* One optimizer step on the flat-buffer range [lo, hi) (hi - lo == a->n; the moments are
 * indexed from lo) given the global gradient norm: clip (when clip_grad > 0 and
 * clip_grad / (norm + 1e-6) < 1), then AdamW on each tensor's part of the range, with weight
 * decay only where the table says so (megatron/core/optimizer/distrib_optimizer.py: each
 * data-parallel rank steps the shard it owns), at rate lr, or lr_emb for the word embedding and
 * the output layer's weight (Megatron's is_embedding_or_output_parameter, --decoupled-lr:
 * megatron/core/optimizer/__init__.py).  Returns false (no update, nothing changed) when norm is
 * not finite: the caller counts a skipped iteration. */
bool mgt_adamw_step(mgt_adamw *a, const mgt_tensor_table *tt, float *params, float *grads, size_t lo,
		    size_t hi, double lr, double lr_emb, double norm);

/* Megatron's fp16 loss scaler (megatron/core/optimizer/grad_scaler.py).  The backward runs on loss * scale; the trainer unscales the gradients by 1/scale
 * before the norm and the step, skips the step when any gradient is inf or NaN, and then calls
 * mgt_loss_scaler_update.  Dynamic (--loss-scale unset): on an inf/NaN iteration the growth
 * counter restarts, the hysteresis counter drops, and once it reaches 0 the scale halves (not
 * below --min-loss-scale); after --loss-scale-window clean iterations in a row the scale doubles
 * and the hysteresis counter refills.  Constant (--loss-scale S): scale stays S, steps with
 * inf/NaN are still skipped.  Without --fp16 the scale is 1 and never changes (bf16 and fp32
 * need none).  The state is saved in checkpoints (mgt-ckpt(5)). */
typedef struct mgt_loss_scaler {
	double scale, min_scale;
	int64_t window, hysteresis;          /* --loss-scale-window, --hysteresis */
	int64_t growth_tracker, hysteresis_tracker;
	bool dynamic;
} mgt_loss_scaler;

/* Set up: dynamic with initial scale `initial` when constant_scale <= 0, else constant.
 * Errors: MGT_ERR_USAGE naming the flag (scales not positive and finite, window < 1,
 * hysteresis < 1, min above initial). */
mgt_status mgt_loss_scaler_init(mgt_loss_scaler *ls, double constant_scale, double initial,
				double min_scale, int64_t window, int64_t hysteresis);
/* Account one iteration: found_inf says whether any gradient was inf or NaN. */
void mgt_loss_scaler_update(mgt_loss_scaler *ls, bool found_inf);

#endif
