/* lib/train/ckpt.c: saving and resuming the trainer through lib/ckpt (format: mgt-ckpt(5)). */
#include "train_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

/* Arguments that fix the tensors' meaning: a checkpoint must agree on all of them. */
static const char *const shape_keys[] = {
	"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels",
	"num_query_groups", "position_embedding_type", "normalization", "swiglu", "add_bias_linear",
	"add_qkv_bias", "untie_embeddings_and_output_weights", "padded_vocab_size", "rotary_base",
	"rotary_percent", "max_position_embeddings", NULL,
};

static json_t *tensor_list(const mgt_tensor_table *tt)
{
	json_t *arr = json_array();
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		json_t *shape = json_array();
		for (int d = 0; d < x->ndim; d++) json_array_append_new(shape, json_integer(x->shape[d]));
		json_array_append_new(arr, json_pack("{s:s, s:o, s:s}", "name", x->name, "shape", shape,
						     "dtype", "float32"));
	}
	return arr;
}

static char *metadata_json(trainer *t)
{
	mgt_args *a = t->a;
	const mgt_lr_sched *s = &t->sched;
	json_t *o = json_pack(
		"{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:{s:s?, s:s?, s:s?, s:s?, s:I}, "
		"s:{s:i, s:i, s:I, s:b, s:i}, s:o, s:{s:f, s:f, s:f, s:I, s:I, s:I, s:s, s:s, s:I}, "
		"s:{s:I}, s:{s:I}}",
		"format", "mgt-ckpt", "format_version", 1, "iteration", (json_int_t)t->iteration,
		"consumed_train_samples", (json_int_t)t->consumed_train,
		"consumed_valid_samples", (json_int_t)t->consumed_valid,
		"skipped_iterations", (json_int_t)t->skipped_iters, "nan_iterations", (json_int_t)t->nan_iters,
		"num_floating_point_operations_so_far", t->flops_so_far, "args", mgt_args_to_json(a),
		"tokenizer", "tokenizer_type", a->tokenizer_type, "vocab_file", a->vocab_file,
		"merge_file", a->merge_file, "tokenizer_model", a->tokenizer_model,
		"padded_vocab_size", (json_int_t)a->model.padded_vocab_size,
		"layout", "tensor_model_parallel_size", t->ps.tp, "pipeline_model_parallel_size", t->ps.pp,
		"data_parallel_size", (json_int_t)a->data_parallel_size, "use_distributed_optimizer", 0,
		"world_size", t->ps.world_size,
		"tensors", tensor_list(mgt_model_tensors(t->model)),
		"opt_param_scheduler", "max_lr", s->max_lr, "min_lr", s->min_lr, "lr_warmup_init", s->init_lr,
		"lr_warmup_steps", (json_int_t)s->warmup_steps, "lr_decay_steps", (json_int_t)s->decay_steps,
		"wsd_decay_steps", (json_int_t)s->wsd_decay_steps, "lr_decay_style", s->style,
		"lr_wsd_decay_style", s->wsd_style, "num_steps", (json_int_t)s->num_steps,
		"optimizer", "step", (json_int_t)t->opt.step, "rng", "seed", (json_int_t)a->seed);
	char *txt = o ? json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_decref(o);
	return txt;
}

/* The pieces of one flat buffer (params or a moment), named prefix + tensor name. */
static mgt_status add_pieces(mgt_ckpt_piece *p, char **names, const mgt_tensor_table *tt,
			     const float *host, const char *prefix)
{
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		size_t n = strlen(prefix) + strlen(x->name) + 1;
		if (!(names[i] = mgt_malloc(n))) return MGT_ERR_NOMEM;
		snprintf(names[i], n, "%s%s", prefix, x->name);
		p[i] = (mgt_ckpt_piece){ .name = names[i], .ndim = x->ndim, .dtype = MGT_CKPT_F32,
					 .data = host + x->offset };
		for (int d = 0; d < x->ndim; d++) {
			p[i].global_shape[d] = x->shape[d];
			p[i].offset[d] = x->local_offset[d];
			p[i].shape[d] = x->local_shape[d];
		}
	}
	return MGT_OK;
}

static mgt_status write_shard(trainer *t, float *host)
{
	const mgt_tensor_table *tt = mgt_model_tensors(t->model);
	bool optim = !t->a->no_save_optim;
	size_t nb = optim ? 3 : 1, n = (size_t)tt->n * nb, numel = tt->numel;
	const float *bufs[3] = { mgt_model_params(t->model), t->opt.m, t->opt.v };
	const char *prefixes[3] = { "", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq." };
	mgt_ckpt_piece *p = mgt_malloc(n * sizeof *p);
	char **names = mgt_malloc(n * sizeof *names);
	mgt_status st = p && names ? MGT_OK : MGT_ERR_NOMEM;
	if (names) memset(names, 0, n * sizeof *names);
	for (size_t b = 0; !st && b < nb; b++) {
		const float *src = bufs[b];
		if (!t->be->host_memory) {
			st = t->be->ops->download(t->be, host + b * numel, bufs[b], numel * sizeof(float));
			src = host + b * numel;
		}
		if (!st) st = add_pieces(p + b * (size_t)tt->n, names + b * (size_t)tt->n, tt, src, prefixes[b]);
	}
	char shard[64];
	snprintf(shard, sizeof shard, "model_tp%02d_pp%03d_dp%03d.h5", t->ps.tp_rank, t->ps.pp_rank, t->ps.dp_rank);
	if (!st) st = mgt_ckpt_write_shard(t->a->save, t->iteration, shard, p, n);
	for (size_t i = 0; names && i < n; i++) free(names[i]);
	free(names);
	free(p);
	return st;
}

mgt_status trainer_save(trainer *t)
{
	double t0 = mgt_now();
	const mgt_tensor_table *tt = mgt_model_tensors(t->model);
	float *host = t->be->host_memory ? NULL : mgt_malloc(3 * tt->numel * sizeof(float));
	if (!t->be->host_memory && !host) return MGT_ERR_NOMEM;
	mgt_status st = mgt_ckpt_begin(t->a->save, t->iteration);
	if (!st) st = write_shard(t, host);
	free(host);
	char *meta = st ? NULL : metadata_json(t);
	if (!st && !meta) st = MGT_ERR_NOMEM;
	if (!st) st = mgt_ckpt_commit(t->a->save, t->iteration, meta);
	free(meta);
	if (!st && t->io->log)
		fprintf(t->io->log, "  successfully saved checkpoint from iteration %7lld to %s [ t %.1f s ]\n",
			(long long)t->iteration, t->a->save, mgt_now() - t0);
	return st ? mgt_err_ctx(st, "saving checkpoint") : MGT_OK;
}

/* ---- loading ---- */

static mgt_status check_args(json_t *ck_args, const mgt_args *a, const char *dir)
{
	json_t *mine = mgt_args_to_json(a);
	mgt_status st = MGT_OK;
	for (const char *const *k = shape_keys; !st && *k; k++) {
		json_t *x = json_object_get(ck_args, *k), *y = json_object_get(mine, *k);
		if (!x || !json_equal(x, y)) {
			char *xs = x ? json_dumps(x, JSON_ENCODE_ANY) : NULL, *ys = json_dumps(y, JSON_ENCODE_ANY);
			st = mgt_err(MGT_ERR_FORMAT, "%s: checkpoint has %s = %s but the model has %s", dir, *k,
				     xs ? xs : "nothing", ys ? ys : "?");
			free(xs);
			free(ys);
		}
	}
	json_decref(mine);
	return st;
}

static mgt_status read_buffer(trainer *t, mgt_ckpt *c, const char *prefix, float *dst, float *host)
{
	const mgt_tensor_table *tt = mgt_model_tensors(t->model);
	if (t->be->host_memory) host = dst;
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		char name[160];
		snprintf(name, sizeof name, "%s%s", prefix, x->name);
		mgt_status st = mgt_ckpt_read(c, name, x->ndim, x->shape, x->local_offset, x->local_shape,
					      MGT_CKPT_F32, host + x->offset);
		if (st) return st;
	}
	return t->be->host_memory ? MGT_OK : t->be->ops->upload(t->be, dst, host, tt->numel * sizeof(float));
}

/* Every parameter in the checkpoint must be one of the model's. */
static mgt_status check_extra(trainer *t, mgt_ckpt *c)
{
	for (size_t i = 0; i < mgt_ckpt_count(c); i++) {
		int nd;
		int64_t gs[8];
		mgt_ckpt_dtype dt;
		const char *name = mgt_ckpt_tensor(c, i, &nd, gs, &dt);
		if (strncmp(name, "optimizer.", 10) && !mgt_tensor_table_find(mgt_model_tensors(t->model), name))
			return mgt_err(MGT_ERR_FORMAT, "%s: tensor %s is not part of this model", mgt_ckpt_dir(c), name);
	}
	return MGT_OK;
}

static int64_t jint(json_t *o, const char *k) { return (int64_t)json_integer_value(json_object_get(o, k)); }

static mgt_status restore_progress(trainer *t, json_t *meta)
{
	if (t->a->finetune) return MGT_OK;
	t->iteration = jint(meta, "iteration");
	t->consumed_train = jint(meta, "consumed_train_samples");
	t->consumed_valid = jint(meta, "consumed_valid_samples");
	t->skipped_iters = jint(meta, "skipped_iterations");
	t->nan_iters = jint(meta, "nan_iterations");
	t->flops_so_far = json_number_value(json_object_get(meta, "num_floating_point_operations_so_far"));
	t->sched.num_steps = jint(json_object_get(meta, "opt_param_scheduler"), "num_steps");
	t->opt.step = jint(json_object_get(meta, "optimizer"), "step");
	return MGT_OK;
}

static mgt_status load_from(trainer *t, mgt_ckpt *c)
{
	json_error_t e;
	json_t *meta = json_loads(mgt_ckpt_metadata(c), 0, &e);
	if (!meta || !json_is_object(json_object_get(meta, "args"))) {
		json_decref(meta);
		return mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: not an mgt checkpoint (no \"args\")", mgt_ckpt_dir(c));
	}
	mgt_status st = check_args(json_object_get(meta, "args"), t->a, mgt_ckpt_dir(c));
	if (!st) st = check_extra(t, c);
	const mgt_tensor_table *tt = mgt_model_tensors(t->model);
	float *host = st || t->be->host_memory ? NULL : mgt_malloc(tt->numel * sizeof(float));
	if (!st && !t->be->host_memory && !host) st = MGT_ERR_NOMEM;
	if (!st) st = read_buffer(t, c, "", mgt_model_params(t->model), host);
	bool optim = !t->a->no_load_optim && !t->a->finetune;
	if (!st && optim) st = read_buffer(t, c, "optimizer.state.exp_avg.", t->opt.m, host);
	if (!st && optim) st = read_buffer(t, c, "optimizer.state.exp_avg_sq.", t->opt.v, host);
	if (!st) st = restore_progress(t, meta);
	free(host);
	json_decref(meta);
	return st;
}

mgt_status trainer_load(trainer *t, bool *loaded)
{
	*loaded = false;
	const char *dir = t->a->load;
	int64_t it;
	if (!dir) return MGT_OK;
	if (mgt_ckpt_latest(dir, &it) == MGT_ERR_IO) {
		if (t->io->log) fprintf(t->io->log, "WARNING: could not find the metadata file %s/%s; "
					"will not load any checkpoints and will start from random\n", dir, MGT_CKPT_TRACKER);
		return MGT_OK;
	}
	mgt_ckpt *c = NULL;
	mgt_status st = mgt_ckpt_open(dir, -1, &c);
	if (!st) st = load_from(t, c);
	if (!st && t->io->log)
		fprintf(t->io->log, "  successfully loaded checkpoint from %s [ iteration %lld ]\n", dir,
			(long long)mgt_ckpt_iteration(c));
	mgt_ckpt_close(c);
	*loaded = !st;
	return st ? mgt_err_ctx(st, "loading checkpoint") : MGT_OK;
}
