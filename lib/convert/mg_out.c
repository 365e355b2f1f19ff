/* lib/convert/mg_out.c: an mgt checkpoint (or a Hugging Face directory read in place) written as a
 * Megatron-LM checkpoint in the legacy format (`--ckpt-format torch`, mgt-megatron(5)) at any
 * tensor / pipeline / expert layout, as Megatron's own tools/checkpoint saver (saver_core.py)
 * writes one: per rank, iter_%07d/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt = torch.save({"args":
 * argparse.Namespace, "checkpoint_version": 3.0, "iteration": N, "model": OrderedDict of the
 * rank's Megatron-Core state dict, and with the checkpoint's Adam state "optimizer" and
 * "opt_param_scheduler" (mg_out_opt.c)}) (megatron/training/checkpointing.py generate_state_dict),
 * the tracker last; no RNG state (Megatron loads it with --no-load-rng, or --finetune).  Transformer Engine modules' _extra_state is written as an empty uint8 tensor
 * (FP8 off: transformer_engine.py _encode_extra_state / TE's set_extra_state). */
#include "megatron_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A Namespace value from an mgt argument (JSON). */
static void put_json(mgt_pyw *w, json_t *v)
{
	if (json_is_true(v) || json_is_false(v)) mgt_pyw_bool(w, json_is_true(v));
	else if (json_is_integer(v)) mgt_pyw_int(w, (int64_t)json_integer_value(v));
	else if (json_is_real(v)) mgt_pyw_float(w, json_real_value(v));
	else if (json_is_string(v)) mgt_pyw_str(w, json_string_value(v));
	else if (json_is_array(v)) {
		mgt_pyw_list_begin(w);
		for (size_t i = 0; i < json_array_size(v); i++) put_json(w, json_array_get(v, i));
		mgt_pyw_list_end(w);
	} else mgt_pyw_none(w);
}

/* args: mgt's arguments (Megatron's names) with the written layout and what Megatron derives. */
void mg_put_args(mg_out *o, mgt_pyw *w, int64_t it, json_t *meta)
{
	json_t *a = mgt_args_to_json(&o->h.a);
	json_t *fix = json_pack("{s:i, s:i, s:i, s:n, s:I, s:i, s:i, s:s, s:b, s:s, s:b, s:b, s:I, s:I, s:b}",
				"tensor_model_parallel_size", o->m.tp, "pipeline_model_parallel_size", o->m.pp,
				"expert_model_parallel_size", o->m.ep, "virtual_pipeline_model_parallel_size",
				"padded_vocab_size", (json_int_t)o->h.a.model.padded_vocab_size, "data_parallel_size", 1,
				"world_size", o->m.tp * o->m.pp * o->m.ep, "ckpt_format", o->dist ? "torch_dist" : "torch",
				"use_distributed_optimizer", o->optim && o->distopt,
				"transformer_impl", "transformer_engine", "no_save_optim", !o->optim, "no_save_rng", 1,
				"consumed_train_samples", (json_int_t)json_integer_value(json_object_get(meta, "consumed_train_samples")),
				"consumed_valid_samples", (json_int_t)json_integer_value(json_object_get(meta, "consumed_valid_samples")),
				"bf16", o->dt == MGT_ST_BF16);
	json_object_update(a, fix);
	json_object_set_new(a, "fp16", json_boolean(o->dt == MGT_ST_F16));
	json_object_set_new(a, "iteration", json_integer(it));
	mgt_pyw_obj_begin(w, "argparse", "Namespace");
	mgt_pyw_dict_begin(w);
	const char *k;
	json_t *v;
	json_object_foreach(a, k, v) {
		if (json_is_object(v)) continue;
		mgt_pyw_str(w, k);
		put_json(w, v);
	}
	mgt_pyw_str(w, "params_dtype");
	mgt_pyw_global(w, "torch", o->dt == MGT_ST_BF16 ? "bfloat16" : o->dt == MGT_ST_F16 ? "float16" : "float32");
	mgt_pyw_dict_end(w);
	mgt_pyw_obj_end(w);
	json_decref(fix);
	json_decref(a);
}

void mg_put_head(mg_out *o, mgt_pyw *w, int64_t it, json_t *meta)
{
	mgt_pyw_str(w, "args");
	mg_put_args(o, w, it, meta);
	mgt_pyw_str(w, "checkpoint_version");
	mgt_pyw_float(w, 3.0);
	mgt_pyw_str(w, "iteration");
	mgt_pyw_int(w, it);
}

/* Whether row x is the weight of a Transformer Engine module that carries _extra_state, and its
 * module prefix (the key without ".weight"). */
static bool te_module(const mgt_tensor *x, const char *key, char *mod, size_t n)
{
	static const mgt_tensor_role r[] = {MGT_T_QKV_W, MGT_T_PROJ_W, MGT_T_FC1_W, MGT_T_FC2_W, MGT_T_LAT_FC1_W, MGT_T_LAT_FC2_W};
	for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
		if (x->role == r[i]) {
			size_t l = strlen(key);
			snprintf(mod, n, "%.*s", (int)(l > 7 ? l - 7 : 0), key);
			return true;
		}
	return false;
}

static void put_extra(mgt_pyw *w, const char *mod, const char *sub)
{
	char k[260];
	int64_t zero = 0;
	snprintf(k, sizeof k, "%s%s._extra_state", mod, sub);
	mgt_pyw_str(w, k);
	mgt_pyw_tensor(w, MGT_ST_U8, 1, &zero, "");
}

/* One row's local elements in the written dtype, kept in o->bufs. */
mgt_status mg_row_data(mg_out *o, const mgt_tensor *x, const void **out)
{
	float *f = malloc((x->numel ? x->numel : 1) * sizeof(float));
	if (!f) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	o->bufs[o->nbufs++] = f;
	mgt_status st = mgt_source_row_read(o->h.src, "", x, 0, x->numel, f);
	if (!st) st = cv_check_finite(f, x->numel, mgt_source_dir(o->h.src), x->name);
	*out = f;
	if (st || o->dt == MGT_ST_F32 || x->frozen) return st;
	uint16_t *h = malloc((x->numel ? x->numel : 1) * sizeof *h);
	if (!h) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < x->numel; i++) h[i] = o->dt == MGT_ST_BF16 ? mgt_f32_to_bf16(f[i]) : mgt_f32_to_f16(f[i]);
	free(f);
	o->bufs[o->nbufs - 1] = h;
	*out = h;
	return MGT_OK;
}

/* The model state dict of chunk c (one rank). */
static mgt_status put_model(mg_out *o, mgt_pyw *w, mg_chunk *c)
{
	int *order = malloc(((size_t)c->tt.n + 1) * sizeof *order);
	if (!order) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	int n = mg_param_order(&o->m, c, order);
	mgt_status st = MGT_OK;
	mgt_pyw_odict_begin(w);
	/* the parameters in Megatron's order, then the frozen rows (the router's expert_bias buffer) */
	for (int i = 0; i < c->tt.n; i++)
		if (c->tt.t[i].frozen) order[n++] = i;
	for (int j = 0; !st && j < n; j++) {
		const mgt_tensor *x = &c->tt.t[order[j]];
		char key[200], mod[200];
		mg_key(&o->m, c, x, 0, key, sizeof key);
		const void *data = NULL;
		st = mg_row_data(o, x, &data);
		if (st) break;
		mgt_pyw_str(w, key);
		int64_t shape[2] = {x->local_shape[0], x->local_shape[1]};
		mgt_pyw_tensor(w, x->frozen ? MGT_ST_F32 : o->dt, x->ndim, shape, data);
		if (te_module(x, key, mod, sizeof mod)) {
			put_extra(w, mod, "");
			if (x->role == MGT_T_QKV_W) { /* TEDotProductAttention beside it */
				char *q = strstr(mod, ".linear_qkv");
				if (q) *q = 0;
				put_extra(w, mod, ".core_attention");
			}
		}
	}
	mgt_pyw_odict_end(w);
	free(order);
	return st;
}

void mg_free_bufs(mg_out *o)
{
	for (int i = 0; i < o->nbufs; i++) free(o->bufs[i]);
	free(o->bufs);
	o->bufs = NULL;
	o->nbufs = 0;
}

static mgt_status write_rank(mg_out *o, mg_chunk *c, int64_t it, json_t *meta)
{
	char name[64];
	int len = snprintf(name, sizeof name, "mp_rank_%02d", c->tp);
	if (o->m.pp > 1) len += snprintf(name + len, sizeof name - (size_t)len, "_%03d", c->pp);
	if (o->m.ep > 1) snprintf(name + len, sizeof name - (size_t)len, "_%03d", c->ep);
	char *dir = cv_join(o->iter, name), *path = dir ? cv_join(dir, "model_optim_rng.pt") : NULL;
	mgt_pyw *w = NULL;
	mgt_status st = path ? mgt_mkdirs(dir) : MGT_ERR_NOMEM;
	o->nbufs = 0; /* a row's weights, fp32 copy and moments: 4 a row at most */
	if (!st && !(o->bufs = calloc((size_t)c->tt.n * 4 + 1, sizeof *o->bufs))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = mgt_pyw_new(&w);
	if (!st) {
		mgt_pyw_dict_begin(w);
		mg_put_head(o, w, it, meta);
		mgt_pyw_str(w, "model");
		st = put_model(o, w, c);
		if (!st && o->optim) {
			mgt_pyw_str(w, "optimizer");
			if (o->distopt) mg_put_dist_optimizer(o, w, meta);
			else st = mg_put_optimizer(o, w, c, meta);
			mgt_pyw_str(w, "opt_param_scheduler");
			mg_put_scheduler(o, w, meta);
		}
		mgt_pyw_dict_end(w);
	}
	if (!st) st = mgt_pyw_save(w, path, "model_optim_rng");
	mgt_pyw_free(w);
	char *dopt = !st && o->optim && o->distopt ? cv_join(dir, "distrib_optim.pt") : NULL;
	if (dopt) st = mg_write_distrib_optim(o, c, dopt);
	free(dopt);
	mg_free_bufs(o);
	free(path);
	free(dir);
	return st;
}

static mgt_status layout(mg_out *o, const mgt_convert_opts *co)
{
	mg_src *m = &o->m;
	m->tp = co->tp;
	m->pp = co->pp;
	m->vp = 1;
	m->ep = co->ep > 1 ? co->ep : 1;
	m->dp = m->edp = 1; /* one bucket (Megatron's default, no --overlap-grad-reduce): no DP padding inside */
	m->a = o->h.a; /* shared, not owned */
	if (m->ep > 1 && (o->h.a.model.num_experts < 1 || o->h.a.model.num_experts % m->ep))
		return mgt_err(MGT_ERR_USAGE, "--target-expert-parallel-size %d: the model has %lld experts", m->ep,
			       (long long)o->h.a.model.num_experts);
	if (o->h.a.model.padded_vocab_size % m->tp)
		return mgt_err(MGT_ERR_USAGE, "--target-tensor-parallel-size %d does not divide the %lld vocabulary rows", m->tp,
			       (long long)o->h.a.model.padded_vocab_size);
	int n = m->tp * m->pp * m->ep;
	if (!(m->chunks = calloc((size_t)n, sizeof *m->chunks))) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < n; i++) {
		mg_chunk *c = &m->chunks[m->nchunks++];
		c->tp = i % m->tp;
		c->pp = i / m->tp % m->pp;
		c->ep = i / (m->tp * m->pp);
		int64_t nl;
		st = mgt_stage_layers(&o->h.a.model, m->pp, c->pp, &c->first, &nl);
		if (!st) st = mgt_tensor_table_build_ep(&c->tt, &o->h.a.model, m->tp, c->tp, m->pp, c->pp, m->ep, c->ep);
	}
	return st;
}

static mgt_status out_convert(mg_out *o, const mgt_convert_opts *co)
{
	mgt_status st = cv_mgt_open(&o->h, true);
	json_t *meta = o->h.meta;
	int64_t it = st ? 0 : mgt_source_iteration(o->h.src);
	if (!st) st = layout(o, co);
	o->dt = !co->dtype ? (o->h.a.bf16 ? MGT_ST_BF16 : o->h.a.fp16 ? MGT_ST_F16 : MGT_ST_F32)
		: !strcmp(co->dtype, "bf16") ? MGT_ST_BF16 : !strcmp(co->dtype, "fp16") ? MGT_ST_F16 : MGT_ST_F32;
	/* the optimizer's state when the checkpoint has it (mgt checkpoints saved with it) and no
	 * expert-parallel optimizer (a chained one) to write */
	o->optim = !st && json_object_get(meta, "optimizer") && mgt_source_kind(o->h.src) == 2 &&
		   !(o->h.a.model.num_experts > 0 && o->m.ep > 1);
	if (!st) st = cv_out_begin(co->save_dir, &o->tmp);
	char name[32];
	snprintf(name, sizeof name, "iter_%07lld", (long long)it);
	if (!st && !(o->iter = cv_join(o->tmp, name))) st = MGT_ERR_NOMEM;
	if (!st && o->dist) st = mg_write_dist(o, it, meta);
	for (int i = 0; !st && !o->dist && i < o->m.nchunks; i++) st = write_rank(o, &o->m.chunks[i], it, meta);
	char itxt[32];
	snprintf(itxt, sizeof itxt, "%lld", (long long)it);
	if (!st) st = cv_write_text(o->tmp, MGT_CKPT_TRACKER, itxt);
	if (o->tmp) st = cv_out_end(o->tmp, co->save_dir, st);
	o->tmp = NULL;
	if (!st && co->log)
		fprintf(co->log, "converted %s (iteration %lld) to %s: a Megatron-LM checkpoint (--ckpt-format %s), TP %d, "
			"PP %d%s%.0d, %s weights%s; load it with %s (or --finetune)\n", co->load_dir,
			(long long)it, co->save_dir, o->dist ? "torch_dist" : "torch", o->m.tp, o->m.pp, o->m.ep > 1 ? ", EP " : "", o->m.ep > 1 ? o->m.ep : 0,
			o->dt == MGT_ST_BF16 ? "bf16" : o->dt == MGT_ST_F16 ? "fp16" : "fp32",
			o->optim ? (o->distopt ? " and Adam's state (the distributed optimizer's)" : " and Adam's state (the non-distributed "
				    "optimizer's)") : "",
			o->optim ? "--no-load-rng" : "--no-load-optim --no-load-rng");
	return st;
}

mgt_status mgt_convert_to_megatron(const mgt_convert_opts *co)
{
	if (co->tp < 1 || co->pp < 1) return mgt_err(MGT_ERR_USAGE, "tensor and pipeline parallel sizes must be >= 1");
	mg_out o = {.h = {.o = co}, .dist = co->save_format && !strcmp(co->save_format, "torch_dist"),
		    .distopt = co->distopt};
	mgt_status st = out_convert(&o, co);
	for (int c = 0; c < o.m.nchunks; c++) {
		mgt_tensor_table_free(&o.m.chunks[c].tt);
		free(o.m.chunks[c].where);
	}
	free(o.m.chunks);
	free(o.iter);
	mg_free_bufs(&o);
	cv_mgt_close(&o.h);
	return st;
}
