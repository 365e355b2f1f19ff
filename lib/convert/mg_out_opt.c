/* lib/convert/mg_out_opt.c: the optimizer and scheduler state of a legacy-format Megatron
 * checkpoint written from an mgt checkpoint's (mgt-megatron(5) WRITING): the non-distributed
 * optimizer as megatron/core/optimizer/optimizer.py saves it, FP32Optimizer's torch.optim.Adam
 * state_dict in fp32 runs, Float16OptimizerWithFloat16Params' {"optimizer", "fp32_from_fp16_params"
 * (, "grad_scaler")} in bf16 / fp16 runs.  The groups (optimizer/__init__.py _get_param_groups):
 * the weight-decayed parameters first, then the rest (biases and 1-D tensors, wd_mult 0), each in
 * model.parameters() order (mg_param_order); state ids count through both groups.  The fp32 main
 * weights are mgt's weights; the moments mgt's exp_avg and exp_avg_sq; "step" the optimizer's
 * step.  opt_param_scheduler is OptimizerParamScheduler.state_dict (optimizer_param_scheduler.py). */
#include "megatron_impl.h"

#include <stdlib.h>
#include <string.h>

/* Row x's local elements under prefix (a moment's, or "" for the fp32 weights), kept in o->bufs. */
static mgt_status row_f32(mg_out *o, const mgt_tensor *x, const char *prefix, const float **out)
{
	float *f = malloc((x->numel ? x->numel : 1) * sizeof(float));
	if (!f) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	o->bufs[o->nbufs++] = f;
	*out = f;
	return mgt_source_row_read(o->h.src, prefix, x, 0, x->numel, f);
}

static void put_f32(mgt_pyw *w, const mgt_tensor *x, const float *data)
{
	int64_t shape[2] = {x->local_shape[0], x->local_shape[1]};
	mgt_pyw_tensor(w, MGT_ST_F32, x->ndim, shape, data);
}

/* One param group's dict (torch.optim.Adam's keys, Megatron's additions); params first .. first +
 * n - 1, none with n < 0. */
void mg_put_group(mg_out *o, mgt_pyw *w, bool wd, int first, int n)
{
	const mgt_args *a = &o->h.a;
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "lr");
	mgt_pyw_float(w, a->lr);
	mgt_pyw_str(w, "betas");
	mgt_pyw_tuple_begin(w);
	mgt_pyw_float(w, a->adam_beta1);
	mgt_pyw_float(w, a->adam_beta2);
	mgt_pyw_tuple_end(w);
	mgt_pyw_str(w, "eps");
	mgt_pyw_float(w, a->adam_eps);
	mgt_pyw_str(w, "weight_decay");
	mgt_pyw_float(w, wd ? a->weight_decay : 0.0);
	static const char *const off[] = {"amsgrad", "maximize", "capturable", "differentiable", "is_expert_parallel",
					  "is_decoupled_lr"};
	for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
		mgt_pyw_str(w, off[i]);
		mgt_pyw_bool(w, false);
	}
	mgt_pyw_str(w, "foreach");
	mgt_pyw_none(w);
	mgt_pyw_str(w, "fused");
	mgt_pyw_none(w);
	mgt_pyw_str(w, "default_config");
	mgt_pyw_bool(w, true);
	mgt_pyw_str(w, "wd_mult");
	mgt_pyw_float(w, wd ? 1.0 : 0.0);
	mgt_pyw_str(w, "lr_mult");
	mgt_pyw_float(w, 1.0);
	mgt_pyw_str(w, "max_lr");
	mgt_pyw_float(w, a->lr);
	mgt_pyw_str(w, "min_lr");
	mgt_pyw_float(w, a->min_lr);
	if (n >= 0) { /* torch_dist keeps the groups without their params (optim_state_to_sharding_state) */
		mgt_pyw_str(w, "params");
		mgt_pyw_list_begin(w);
		for (int i = 0; i < n; i++) mgt_pyw_int(w, first + i);
		mgt_pyw_list_end(w);
	}
	mgt_pyw_dict_end(w);
}

/* The rows of chunk c in group order: weight-decayed ones first, each in Megatron's order. */
static int group_order(mg_out *o, mg_chunk *c, int *order, int *nwd)
{
	int *tmp = order + c->tt.n;
	int n = mg_param_order(&o->m, c, tmp), k = 0;
	for (int pass = 1; pass >= 0; pass--)
		for (int j = 0; j < n; j++)
			if (c->tt.t[tmp[j]].weight_decay == (pass == 1)) order[k++] = tmp[j];
	*nwd = 0;
	for (int j = 0; j < n; j++) *nwd += c->tt.t[tmp[j]].weight_decay;
	return n;
}

static mgt_status put_inner(mg_out *o, mgt_pyw *w, mg_chunk *c, const int *order, int n, int nwd)
{
	mgt_status st = MGT_OK;
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "state");
	mgt_pyw_dict_begin(w);
	for (int j = 0; !st && j < n; j++) {
		const mgt_tensor *x = &c->tt.t[order[j]];
		const float *m1 = NULL, *m2 = NULL;
		st = row_f32(o, x, "optimizer.state.exp_avg.", &m1);
		if (!st) st = row_f32(o, x, "optimizer.state.exp_avg_sq.", &m2);
		if (st) break;
		mgt_pyw_int(w, j);
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "step");
		mgt_pyw_tensor(w, MGT_ST_F32, 0, NULL, &o->step_f);
		mgt_pyw_str(w, "exp_avg");
		put_f32(w, x, m1);
		mgt_pyw_str(w, "exp_avg_sq");
		put_f32(w, x, m2);
		mgt_pyw_dict_end(w);
	}
	mgt_pyw_dict_end(w);
	mgt_pyw_str(w, "param_groups");
	mgt_pyw_list_begin(w);
	mg_put_group(o, w, true, 0, nwd);
	mg_put_group(o, w, false, nwd, n - nwd);
	mgt_pyw_list_end(w);
	mgt_pyw_dict_end(w);
	return st;
}

mgt_status mg_put_optimizer(mg_out *o, mgt_pyw *w, mg_chunk *c, json_t *meta)
{
	int *order = malloc(((size_t)c->tt.n * 2 + 1) * sizeof *order), nwd = 0;
	if (!order) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	int n = group_order(o, c, order, &nwd);
	int64_t step = (int64_t)json_integer_value(json_object_get(json_object_get(meta, "optimizer"), "step"));
	o->step_f = (float)step;
	mgt_status st = MGT_OK;
	if (o->dt == MGT_ST_F32) st = put_inner(o, w, c, order, n, nwd); /* FP32Optimizer */
	else {
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "optimizer");
		st = put_inner(o, w, c, order, n, nwd);
		mgt_pyw_str(w, "fp32_from_fp16_params");
		mgt_pyw_list_begin(w);
		for (int g = 0; !st && g < 2; g++) {
			mgt_pyw_list_begin(w);
			for (int j = g ? nwd : 0; !st && j < (g ? n : nwd); j++) {
				const float *p = NULL;
				st = row_f32(o, &c->tt.t[order[j]], "", &p);
				if (!st) put_f32(w, &c->tt.t[order[j]], p);
			}
			mgt_pyw_list_end(w);
		}
		mgt_pyw_list_end(w);
		if (o->dt == MGT_ST_F16) { /* DynamicGradScaler.state_dict (optimizer/grad_scaler.py) */
			json_t *gs = json_object_get(meta, "grad_scaler");
			o->scale_f = (float)json_number_value(json_object_get(gs, "scale"));
			mgt_pyw_str(w, "grad_scaler");
			mgt_pyw_dict_begin(w);
			mgt_pyw_str(w, "scale");
			mgt_pyw_tensor(w, MGT_ST_F32, 0, NULL, &o->scale_f);
			mgt_pyw_str(w, "growth_tracker");
			mgt_pyw_int(w, (int64_t)json_integer_value(json_object_get(gs, "growth_tracker")));
			mgt_pyw_str(w, "hysteresis_tracker");
			mgt_pyw_int(w, (int64_t)json_integer_value(json_object_get(gs, "hysteresis_tracker")));
			mgt_pyw_dict_end(w);
		}
		mgt_pyw_dict_end(w);
	}
	free(order);
	return st;
}

void mg_put_scheduler(mg_out *o, mgt_pyw *w, json_t *meta)
{
	json_t *s = json_object_get(meta, "opt_param_scheduler");
	const mgt_args *a = &o->h.a;
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "max_lr");
	mgt_pyw_float(w, json_number_value(json_object_get(s, "max_lr")));
	mgt_pyw_str(w, "lr_warmup_steps");
	mgt_pyw_int(w, (int64_t)json_integer_value(json_object_get(s, "lr_warmup_steps")));
	mgt_pyw_str(w, "num_steps");
	mgt_pyw_int(w, (int64_t)json_integer_value(json_object_get(s, "num_steps")));
	mgt_pyw_str(w, "lr_decay_style");
	mgt_pyw_str(w, json_string_value(json_object_get(s, "lr_decay_style")) ? json_string_value(json_object_get(s, "lr_decay_style")) : "linear");
	mgt_pyw_str(w, "lr_decay_steps");
	mgt_pyw_int(w, (int64_t)json_integer_value(json_object_get(s, "lr_decay_steps")));
	mgt_pyw_str(w, "min_lr");
	mgt_pyw_float(w, json_number_value(json_object_get(s, "min_lr")));
	mgt_pyw_str(w, "start_wd");
	mgt_pyw_float(w, a->weight_decay);
	mgt_pyw_str(w, "end_wd");
	mgt_pyw_float(w, a->weight_decay);
	mgt_pyw_str(w, "wd_incr_style");
	mgt_pyw_str(w, "constant");
	mgt_pyw_str(w, "wd_incr_steps");
	mgt_pyw_int(w, 0);
	mgt_pyw_dict_end(w);
}

/* ---- the distributed optimizer (--use-distributed-optimizer) ---- */

/* The (param_dtype, grad_dtype) key of the buffer (distrib_optimizer.py; bf16 params reduce fp32
 * gradients, fp16 ones fp16). */
static void put_dtype_key(mg_out *o, mgt_pyw *w)
{
	const char *p = o->dt == MGT_ST_BF16 ? "bfloat16" : o->dt == MGT_ST_F16 ? "float16" : "float32";
	mgt_pyw_tuple_begin(w);
	mgt_pyw_global(w, "torch", p);
	mgt_pyw_global(w, "torch", o->dt == MGT_ST_F16 ? "float16" : "float32");
	mgt_pyw_tuple_end(w);
}

/* The .pt's "optimizer": DistributedOptimizer.state_dict, param_groups without params with "step". */
void mg_put_dist_optimizer(mg_out *o, mgt_pyw *w, json_t *meta)
{
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "optimizer");
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "param_groups");
	mgt_pyw_list_begin(w);
	for (int g = 0; g < 2; g++) mg_put_group(o, w, g == 0, 0, -1);
	mgt_pyw_list_end(w);
	mgt_pyw_dict_end(w);
	mgt_pyw_dict_end(w);
	(void)meta;
}

/* distrib_optim.pt of chunk c (one model chunk: buffer 0): {"buckets_coalesced": True, 0:
 * {(param, grad dtype): {"param", "exp_avg", "exp_avg_sq", "numel_unpadded"}}}, each row's fp32
 * weights and moments at its offset in Megatron's buffer (mg_dist_map; the 64-element gaps zero). */
mgt_status mg_write_distrib_optim(mg_out *o, mg_chunk *c, const char *path)
{
	mgt_status st = mg_dist_map(&o->m, c);
	int64_t total = st ? 0 : c->ends[0];
	float *buf[3] = {0};
	for (int k = 0; !st && k < 3; k++)
		if (!(buf[k] = calloc((size_t)total + 1, sizeof(float)))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	static const char *const pre[3] = {"", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq."};
	for (int i = 0; !st && i < c->tt.n; i++) {
		const mgt_tensor *x = &c->tt.t[i];
		for (int k = 0; !st && c->where[i] >= 0 && k < 3; k++)
			st = mgt_source_row_read(o->h.src, pre[k], x, 0, x->numel, buf[k] + c->where[i]);
	}
	mgt_pyw *w = NULL;
	if (!st) st = mgt_pyw_new(&w);
	if (!st) {
		static const char *const names[3] = {"param", "exp_avg", "exp_avg_sq"};
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "buckets_coalesced");
		mgt_pyw_bool(w, true);
		mgt_pyw_int(w, 0);
		mgt_pyw_dict_begin(w);
		put_dtype_key(o, w);
		mgt_pyw_dict_begin(w);
		for (int k = 0; k < 3; k++) {
			mgt_pyw_str(w, names[k]);
			mgt_pyw_tensor(w, MGT_ST_F32, 1, &total, buf[k]);
		}
		mgt_pyw_str(w, "numel_unpadded");
		mgt_pyw_int(w, total);
		mgt_pyw_dict_end(w);
		mgt_pyw_dict_end(w);
		mgt_pyw_dict_end(w);
		st = mgt_pyw_save(w, path, "distrib_optim");
	}
	mgt_pyw_free(w);
	for (int k = 0; k < 3; k++) free(buf[k]);
	return st;
}
