/* lib/convert/mg_in.c: a Megatron-LM checkpoint (mgt_source kind 3, megatron.c) converted to an mgt
 * checkpoint at any tensor / pipeline / expert layout, at the iteration it was saved: the weights
 * (the optimizer's fp32 main weights where it has them), the Adam moments when it has them, and
 * the progress (iteration, consumed samples, scheduler) in metadata.json, so that mgt-train
 * --load goes on from it as from Megatron's own directory. */
#include "convert_impl.h"

#include <stdlib.h>
#include <string.h>

/* The arguments of the source's metadata, at the target layout; the padded vocabulary it was
 * saved with (its rows must split over the target TP). */
static mgt_status target_args(hf_in *h, json_t *meta)
{
	const mgt_convert_opts *o = h->o;
	json_t *args = json_deep_copy(json_object_get(meta, "args"));
	int64_t padded = json_integer_value(json_object_get(args, "padded_vocab_size"));
	static const char *const derived[] = {"padded_vocab_size", "num_microbatches", "data_parallel_size", "world_size"};
	for (size_t i = 0; i < sizeof derived / sizeof derived[0]; i++) json_object_del(args, derived[i]);
	mgt_status st = mgt_args_init(&h->a);
	if (!st) st = mgt_args_merge_json(&h->a, args, "the Megatron checkpoint's args");
	json_decref(args);
	h->ep = o->ep > 1 ? o->ep : 1;
	h->nranks = o->tp * o->pp * h->ep;
	h->a.tensor_model_parallel_size = o->tp;
	h->a.pipeline_model_parallel_size = o->pp;
	if (!st && h->ep > 1 && h->a.model.num_experts < 1)
		st = mgt_err(MGT_ERR_USAGE, "--target-expert-parallel-size %d: %s is a dense model (no experts)", h->ep, o->load_dir);
	if (!st && h->a.model.num_experts > 0 && h->a.model.num_experts % h->ep)
		st = mgt_err(MGT_ERR_USAGE, "--target-expert-parallel-size %d does not divide the %lld experts", h->ep,
			     (long long)h->a.model.num_experts);
	if (!st && h->a.model.num_experts > 0) h->a.expert_model_parallel_size = h->ep;
	int64_t v = json_integer_value(json_object_get(json_object_get(meta, "tokenizer"), "vocab_size"));
	h->a.model.vocab_size = v > 0 ? v : padded;
	if (!st) st = mgt_model_config_finalize(&h->a.model, 1);
	if (!st) h->a.model.padded_vocab_size = padded;
	if (!st && padded % o->tp)
		st = mgt_err(MGT_ERR_USAGE, "--target-tensor-parallel-size %d does not divide the checkpoint's %lld vocabulary "
			     "rows (padded by Megatron to a multiple of --make-vocab-size-divisible-by x its TP)", o->tp,
			     (long long)padded);
	for (int s = 0; !st && s < o->pp; s++) {
		int64_t first, n;
		st = mgt_stage_layers(&h->a.model, o->pp, s, &first, &n);
	}
	return st;
}

static mgt_status tables(hf_in *h)
{
	mgt_status st = mgt_tensor_table_build(&h->full, &h->a.model, 1, 0, 1, 0);
	int nr = h->nranks;
	if (!st && (!(h->ranks = calloc((size_t)nr, sizeof *h->ranks)) ||
		    !(h->shards = calloc((size_t)nr * MGT_TENSOR_MAX_BOXES, sizeof *h->shards))))
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int r = 0; !st && r < nr; r++)
		st = mgt_tensor_table_build_ep(&h->ranks[r], &h->a.model, h->o->tp, cv_rank_tp(h, r), h->o->pp, cv_rank_pp(h, r),
					       h->ep, cv_rank_ep(h, r));
	return st;
}

/* metadata.json: the source's, as an mgt checkpoint at the target layout. */
static char *target_meta(hf_in *h, json_t *meta)
{
	json_t *m = json_deep_copy(meta);
	json_t *args = mgt_args_to_json(&h->a), *lay = json_object_get(m, "layout");
	json_object_set_new(m, "args", args);
	json_object_set_new(m, "format", json_string("mgt-ckpt"));
	json_object_set_new(m, "converted_from", json_string(h->o->load_dir));
	json_object_set_new(lay, "tensor_model_parallel_size", json_integer(h->o->tp));
	json_object_set_new(lay, "pipeline_model_parallel_size", json_integer(h->o->pp));
	json_object_set_new(lay, "expert_model_parallel_size", json_integer(h->ep));
	json_object_set_new(lay, "virtual_pipeline_model_parallel_size", json_integer(1));
	json_object_set_new(lay, "data_parallel_size", json_integer(h->ep));
	json_object_set_new(lay, "use_distributed_optimizer", json_false());
	json_object_set_new(lay, "world_size", json_integer(h->nranks));
	char *txt = json_dumps(m, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_decref(m);
	return txt;
}

static mgt_status mg_convert(hf_in *h, json_t **meta)
{
	const mgt_convert_opts *o = h->o;
	mgt_status st = mgt_source_open(o->load_dir, o->ckpt_step, &h->src);
	json_error_t e;
	if (!st && !(*meta = json_loads(mgt_source_metadata(h->src), 0, &e))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = target_args(h, *meta);
	if (!st) st = tables(h);
	h->iteration = st ? 0 : mgt_source_iteration(h->src);
	if (!st) st = cv_out_begin(o->save_dir, &h->tmp);
	if (!st) st = mgt_ckpt_begin(h->tmp, h->iteration);
	scratch b = {0};
	bool moments = json_object_get(*meta, "optimizer") != NULL;
	static const char *const prefix[3] = {"", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq."};
	for (int k = 0; !st && k < (moments ? 3 : 1); k++) {
		h->kprefix = prefix[k];
		st = cv_write_rows(h, &b);
	}
	cv_scratch_free(&b);
	if (!st) st = cv_close_shards(h);
	char *txt = st ? NULL : target_meta(h, *meta);
	if (!st && !txt) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = mgt_ckpt_commit(h->tmp, h->iteration, txt);
	free(txt);
	if (h->tmp) {
		if (st) mgt_ckpt_abort(h->tmp, h->iteration);
		st = cv_out_end(h->tmp, o->save_dir, st);
		h->tmp = NULL;
	}
	return st;
}

mgt_status mgt_convert_megatron_to_mgt(const mgt_convert_opts *o)
{
	if (o->tp < 1 || o->pp < 1) return mgt_err(MGT_ERR_USAGE, "tensor and pipeline parallel sizes must be >= 1");
	hf_in h = {.o = o};
	json_t *meta = NULL;
	double t0 = mgt_now();
	mgt_status st = mg_convert(&h, &meta);
	if (!st && o->log)
		fprintf(o->log, "converted %s (a Megatron-LM %s checkpoint, iteration %lld, %d tensors%s) to %s: TP %d, PP %d%s%.0d, "
			"%.1f s\n", o->load_dir, json_string_value(json_object_get(json_object_get(meta, "megatron"), "ckpt_format")),
			(long long)h.iteration, h.full.n, json_object_get(meta, "optimizer") ? " with Adam moments" : "",
			o->save_dir, o->tp, o->pp, h.a.model.num_experts > 0 ? ", EP " : "", h.a.model.num_experts > 0 ? h.ep : 0,
			mgt_now() - t0);
	json_decref(meta);
	cv_hf_close(&h);
	return st;
}
