/* lib/fp8: the scaling of fp8 training as Megatron-LM runs it through Transformer Engine
 * (Transformer Engine's transformer_engine/common/recipe/delayed_scaling.cu kernel_bulk,
 * common/util/vectorized_pointwise.h, common/recipe/recipe_common.cuh): the quantizing cast of a
 * tensor with its amax, the delayed-scaling state of a group of tensors (amax history and scale per
 * slot) and its update, and current (tensorwise) scaling.  The fp8 byte formats are lib/util's
 * (mgt_fp8_format, mgt_f32_to_fp8).  Everything here is exact fp32 arithmetic, the reference the
 * CUDA path must reproduce bit for bit. */
#ifndef MGT_FP8_H
#define MGT_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* The cast of n values x (fp32; host memory) with a delayed or current scale (Transformer Engine's
 * "Cast of one tensor"): q[i] = mgt_f32_to_fp8(fl32(x[i] * scale), f), and *amax =
 * fmaxf(*amax, |x[i]|) over the pre-scale values (fmaxf: a NaN is ignored, +Inf is kept).  q may
 * be NULL (the amax alone).  No errors. */
void mgt_fp8_quantize(uint8_t *q, const float *x, size_t n, float scale, mgt_fp8_format f, float *amax);

/* The reciprocal a cast writes beside its bytes: 1 / scale rounded to nearest (__frcp_rn). */
float mgt_fp8_scale_inv(float scale);

/* How the history turns into the amax a scale is computed from (--fp8-amax-compute-algo). */
typedef enum { MGT_FP8_AMAX_MOST_RECENT, MGT_FP8_AMAX_MAX } mgt_fp8_amax_algo;

/* The delayed-scaling state of `slots` tensors (TE's DelayedScalingRecipeState: a module's forward
 * slots are input, weight, output per GEMM, its backward slots grad_output, grad_input):
 * history [len, slots] row-major, row 0 the amaxes recorded since the last update (the casts
 * fmaxf into it), rows 1..len-1 the earlier ones, oldest first; scale [slots].  Owned by the
 * struct (mgt_fp8_meta_free). */
typedef struct {
	int len, slots;
	float *history;
	float *scale;
} mgt_fp8_meta;

/* History zeros, scales 1 (the first iteration casts with scale 1).  len >= 1, slots >= 1, else
 * MGT_ERR_USAGE; MGT_ERR_NOMEM. */
mgt_status mgt_fp8_meta_init(mgt_fp8_meta *m, int len, int slots);
void mgt_fp8_meta_free(mgt_fp8_meta *m);

/* The update of every slot after a pass (kernel_bulk, "Scale and history
 * update"): reduced, when not NULL, is row 0 all-reduced with MAX over the amax group (TP x DP x
 * CP), else row 0 is used as it is.  Per slot j: last = reduced[j] if that is not 0, else
 * history[0][j]; if last != 0 the history rolls (row 0 <- 0, rows 1..len-2 <- rows 2..len-1,
 * row len-1 <- last) and amax = last (MGT_FP8_AMAX_MOST_RECENT) or the fmaxf of last and rows
 * 1..len-1 before the roll (MGT_FP8_AMAX_MAX); with len 1 the history becomes [0]; if last == 0
 * nothing rolls and the scale stays.  scale = fl32(fl32(fp8_max * 2^-margin) / amax) when amax is
 * finite and > 0 (+Inf becomes FLT_MAX), else the scale stays.  No errors. */
void mgt_fp8_meta_update(mgt_fp8_meta *m, const float *reduced, float fp8_max, int margin, mgt_fp8_amax_algo algo);

/* Current (tensorwise) scaling of a tensor of amax `amax` (Transformer Engine's Float8CurrentScaling, "Current scaling";
 * recipe_common.cuh): amax below eps becomes eps; amax 0, Inf or NaN give 1; else
 * fl32(fp8_max / amax), +Inf becoming FLT_MAX. */
float mgt_fp8_current_scale(float amax, float fp8_max, float eps);

/* fp8 training as configured by Megatron's flags (megatron/core/transformer/transformer_config.py
 * fp8*; megatron/core/fp8_utils.py): format MGT_FP8_OFF (no fp8), E4M3 (--fp8-format e4m3: every tensor
 * e4m3) or HYBRID (--fp8-format hybrid: e4m3 forward, e5m2 gradients); recipe delayed
 * (--fp8-recipe delayed: TE's DelayedScaling, the history of margin, history_len and algo) or
 * tensorwise (Float8CurrentScaling); bf16_start, bf16_end: decoder layers at the start and the end
 * of the model kept in the training's 16-bit precision (--first-last-layers-bf16, tensorwise
 * only), 0 when not asked; param_gather: --fp8-param-gather (Megatron's fp8_param: the
 * distributed optimizer casts its shards of the fp8 linears' weights and all-gathers the bytes). */
typedef enum { MGT_FP8_OFF, MGT_FP8_FMT_E4M3, MGT_FP8_FMT_HYBRID } mgt_fp8_mode;
typedef enum { MGT_FP8_DELAYED, MGT_FP8_TENSORWISE } mgt_fp8_recipe_kind;
typedef struct {
	mgt_fp8_mode format;
	mgt_fp8_recipe_kind recipe;
	int margin, history_len;
	mgt_fp8_amax_algo algo;
	int bf16_start, bf16_end;
	bool param_gather;
} mgt_fp8_recipe;

/* The format of the gradients (grad_output) under a recipe: E5M2 under HYBRID, else E4M3. */
static inline mgt_fp8_format mgt_fp8_grad_format(const mgt_fp8_recipe *r)
{
	return r->format == MGT_FP8_FMT_HYBRID ? MGT_FP8_E5M2 : MGT_FP8_E4M3;
}

#endif
