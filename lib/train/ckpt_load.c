/* lib/train/ckpt_load.c: resuming the trainer from a checkpoint through lib/ckpt (format:
 * mgt-ckpt(5)), --use-checkpoint-args; saving is checkpointing.c. */
#include "train_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "convert/convert.h"

/* Arguments that fix the tensors' meaning: a checkpoint must agree on all of them. */
static const char *const shape_keys[] = {
	"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels",
	"num_query_groups", "position_embedding_type", "normalization", "swiglu", "add_bias_linear",
	"add_qkv_bias", "untie_embeddings_and_output_weights", "padded_vocab_size", "rotary_base",
	"rotary_percent", "max_position_embeddings", "qk_layernorm", "use_rope_scaling", "rope_scaling_factor",
	"rope_scaling_low_freq_factor", "rope_scaling_high_freq_factor",
	"rope_scaling_original_max_position_embeddings", "openai_gelu", "apply_layernorm_1p", "family", "bert_binary_head",
	"no_bias_gelu_fusion", "squared_relu", NULL,
};
/* Those of Mixture of Experts (newer than most checkpoints: absent means no experts), compared
 * when the checkpoint or the run has experts. */
static const char *const moe_keys[] = {
	"num_experts", "moe_ffn_hidden_size", "moe_layer_freq", "moe_shared_expert_intermediate_size",
	"moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_latent_size", NULL,
};

/* Whether the checkpoint holds dataset name with global shape gs[nd]. */
static bool ckpt_has(const mgt_source *c, const char *name, int nd, const int64_t *gs)
{
	for (size_t i = 0; i < mgt_source_count(c); i++) {
		int n;
		int64_t g[8];
		mgt_ckpt_dtype dt;
		if (strcmp(mgt_source_tensor(c, i, &n, g, &dt), name)) continue;
		bool same = n == nd;
		for (int d = 0; same && d < nd; d++) same = g[d] == gs[d];
		return same;
	}
	return false;
}

/* The fp8 state of every chunk from the checkpoint; one that has none of this shape (saved
 * without fp8, or with another --fp8-amax-history-len) leaves the state fresh, saying so. */
static mgt_status read_fp8(trainer *t, mgt_source *c)
{
	mgt_status st = MGT_OK;
	for (int ch = 0; !st && ch < t->V; ch++) {
		mgt_model_fp8_state v;
		if ((st = mgt_model_fp8_view(t->chunk[ch], &v)) || !v.fwd) continue;
		bool all = true;
		for (int k = 0; all && k < 4; k++) {
			int64_t gs[2], off[2], shape[2];
			float *dst;
			int nd = trainer_fp8_box(t, &v, k, gs, off, shape, &dst);
			all = ckpt_has(c, trainer_fp8_names[k], nd, gs);
		}
		if (!all) {
			if (t->io->log && ch == 0)
				fprintf(t->io->log, "  %s: no fp8 scaling state for --fp8-amax-history-len %lld: the scales "
					"start at 1\n", mgt_source_dir(c), (long long)t->a->fp8_amax_history_len);
			continue;
		}
		for (int k = 0; !st && k < 4; k++) {
			int64_t gs[2], off[2], shape[2];
			float *dst;
			int nd = trainer_fp8_box(t, &v, k, gs, off, shape, &dst);
			st = mgt_source_read(c, trainer_fp8_names[k], nd, gs, off, shape, MGT_CKPT_F32, dst);
		}
		if (!st) st = mgt_model_fp8_restore(t->chunk[ch]);
	}
	return st;
}



/* Whether y is the default of a shape key that checkpoints before it existed lack. */
static bool older_default(const char *key, json_t *y, bool newer)
{
	mgt_args def;
	if (!newer || mgt_args_init(&def)) return false;
	json_t *d = mgt_args_to_json(&def);
	bool same = d && json_equal(json_object_get(d, key), y);
	json_decref(d);
	mgt_args_free(&def);
	return same;
}

/* What to give for the padded vocabulary of a checkpoint saved under another TP: Megatron pads
 * the vocabulary to a multiple of --make-vocab-size-divisible-by x TP, so the checkpoint's multiple
 * over this run's TP, when that divides. */
static void vocab_hint(json_t *ck, json_t *mine, char *out, size_t n)
{
	json_int_t div = json_integer_value(json_object_get(ck, "make_vocab_size_divisible_by"));
	json_int_t tp = json_integer_value(json_object_get(ck, "tensor_model_parallel_size"));
	json_int_t tp_now = json_integer_value(json_object_get(mine, "tensor_model_parallel_size"));
	if (div > 0 && tp > 0 && tp_now > 0 && div * tp % tp_now == 0)
		snprintf(out, n, " (the vocabulary is padded to a multiple of --make-vocab-size-divisible-by x "
			 "--tensor-model-parallel-size: give --make-vocab-size-divisible-by %lld with TP %lld)",
			 (long long)(div * tp / tp_now), (long long)tp_now);
	else
		snprintf(out, n, " (the vocabulary is padded to a multiple of --make-vocab-size-divisible-by x "
			 "--tensor-model-parallel-size: choose them so that it pads to the checkpoint's)");
}

static mgt_status check_key(json_t *ck_args, json_t *mine, const char *key, bool newer, const char *dir)
{
	json_t *x = json_object_get(ck_args, key), *y = json_object_get(mine, key);
	/* keys newer than the checkpoint: absent means mgt's default (the feature off) */
	if (!x && older_default(key, y, newer)) return MGT_OK;
	if (x && json_equal(x, y)) return MGT_OK;
	char *xs = x ? json_dumps(x, JSON_ENCODE_ANY) : NULL, *ys = y ? json_dumps(y, JSON_ENCODE_ANY) : NULL;
	char hint[256] = "";
	if (!strcmp(key, "padded_vocab_size")) vocab_hint(ck_args, mine, hint, sizeof hint);
	mgt_status st = mgt_err(MGT_ERR_FORMAT, "%s: checkpoint has %s = %s but the model has %s%s", dir, key,
				xs ? xs : "nothing", ys ? ys : "nothing", hint);
	free(xs);
	free(ys);
	return st;
}

static mgt_status check_args(json_t *ck_args, const mgt_args *a, const char *dir)
{
	json_t *mine = mgt_args_to_json(a);
	mgt_status st = MGT_OK;
	for (const char *const *k = shape_keys; !st && *k; k++) {
		bool newer = !strcmp(*k, "qk_layernorm") || !strcmp(*k, "openai_gelu") || !strncmp(*k, "rope_scaling", 12) ||
			     !strcmp(*k, "use_rope_scaling") || !strcmp(*k, "family") || !strcmp(*k, "bert_binary_head") ||
			     !strcmp(*k, "no_bias_gelu_fusion") || !strcmp(*k, "squared_relu");
		st = check_key(ck_args, mine, *k, newer, dir);
	}
	bool moe = json_integer_value(json_object_get(ck_args, "num_experts")) > 0 || a->model.num_experts > 0;
	for (const char *const *k = moe_keys; !st && moe && *k; k++) st = check_key(ck_args, mine, *k, true, dir);
	json_decref(mine);
	return st;
}

/* A host buffer to fill and then upload to dst (dst itself for host-memory backends). */
static float *staging(trainer *t, float *dst, size_t n)
{
	if (t->be->host_memory) return dst;
	float *h = mgt_malloc((n ? n : 1) * sizeof(float));
	if (h) memset(h, 0, n * sizeof(float));
	return h;
}

static mgt_status unstage(trainer *t, float *dst, float *host, size_t n, mgt_status st)
{
	if (t->be->host_memory) return st;
	if (!st) st = t->be->ops->upload(t->be, dst, host, n * sizeof(float));
	free(host);
	return st;
}

static mgt_status read_params(trainer *t, mgt_source *c)
{
	mgt_status st = MGT_OK;
	for (int ch = 0; !st && ch < t->V; ch++) {
		mgt_model *m = t->chunk[ch];
		const mgt_tensor_table *tt = mgt_model_tensors(m);
		float *h = staging(t, mgt_model_params(m), tt->buf_numel);
		if (!h) return MGT_ERR_NOMEM;
		for (int i = 0; !st && i < tt->n; i++)
			st = mgt_source_row_read(c, "", &tt->t[i], 0, tt->t[i].numel, h + tt->t[i].offset);
		/* optim_grads_params on a device: only the ranges this rank keeps (trainer_fsdp_shard_params
		 * gives back the rest at once on the host) */
		if (!st && !t->be->host_memory && trainer_fsdp_params(t)) st = trainer_fsdp_upload_params(t, m, h), free(h);
		else st = unstage(t, mgt_model_params(m), h, tt->buf_numel, st);
	}
	return st;
}

static mgt_status read_moments(trainer *t, mgt_source *c)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < t->nshard; i++) {
		opt_shard *s = &t->shard[i];
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[s->chunk]);
		for (int k = 0; !st && k < 2; k++) {
			float *dst = k ? s->opt.v : s->opt.m, *h = staging(t, dst, s->hi - s->lo);
			if (!h) return MGT_ERR_NOMEM;
			for (int j = 0; !st && j < tt->n; j++) {
				const mgt_tensor *x = &tt->t[j];
				size_t a, b;
				if (mgt_tensor_overlap(x, s->lo, s->hi, &a, &b))
					st = mgt_source_row_read(c, trainer_moment_prefix[k], x, a - x->offset, b - x->offset, h + (a - s->lo));
			}
			st = unstage(t, dst, h, s->hi - s->lo, st);
		}
	}
	return st;
}

/* Every parameter in the checkpoint must be one of the model's. */
static mgt_status check_extra(trainer *t, mgt_source *c)
{
	mgt_tensor_table full;
	mgt_status st = trainer_ckpt_full_table(t, &full);
	for (size_t i = 0; !st && i < mgt_source_count(c); i++) {
		int nd;
		int64_t gs[8];
		mgt_ckpt_dtype dt;
		const char *name = mgt_source_tensor(c, i, &nd, gs, &dt);
		if (strncmp(name, "optimizer.", 10) && strncmp(name, "fp8.", 4) && !mgt_ckpt_row_known(&full, name))
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor %s is not part of this model", mgt_source_dir(c), name);
	}
	mgt_tensor_table_free(&full);
	return st;
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
	for (int i = 0; i < t->nshard; i++) t->shard[i].opt.step = jint(json_object_get(meta, "optimizer"), "step");
	/* the dynamic fp16 scaler goes on where it was (a constant one, or none, keeps its own) */
	json_t *gs = json_object_get(meta, "grad_scaler");
	if (t->scaler.dynamic && gs && !t->a->no_load_optim) {
		t->scaler.scale = json_number_value(json_object_get(gs, "scale"));
		t->scaler.growth_tracker = jint(gs, "growth_tracker");
		t->scaler.hysteresis_tracker = jint(gs, "hysteresis_tracker");
	}
	return MGT_OK;
}

/* The checkpoint's dropout seed (metadata "rng"), unless --finetune or --no-load-rng: dropout goes
 * on with the streams of the run that saved it; the data order stays keyed by --seed. */
static void restore_rng(trainer *t, json_t *meta)
{
	json_t *seed = json_object_get(json_object_get(meta, "rng"), "seed");
	if (t->a->finetune || t->a->no_load_rng || !json_is_integer(seed)) return;
	uint64_t s = (uint64_t)json_integer_value(seed);
	if (s != t->dropout_seed && t->io->log)
		fprintf(t->io->log, "  dropout keyed by the checkpoint's seed %llu, not --seed %lld (--no-load-rng to use --seed)\n",
			(unsigned long long)s, (long long)t->a->seed);
	t->dropout_seed = s;
}

/* *damaged: the failure is the checkpoint's (unreadable data), not a mismatch with the run. */
static mgt_status load_from(trainer *t, mgt_source *c, bool *damaged)
{
	json_error_t e;
	json_t *meta = json_loads(mgt_source_metadata(c), 0, &e);
	*damaged = false;
	if (!meta || !json_is_object(json_object_get(meta, "args"))) {
		json_decref(meta);
		return mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: not an mgt checkpoint (no \"args\")", mgt_source_dir(c));
	}
	mgt_status st = check_args(json_object_get(meta, "args"), t->a, mgt_source_dir(c));
	if (!st) st = check_extra(t, c);
	if (!st) *damaged = (st = read_params(t, c)) == MGT_ERR_FORMAT;
	if (!st) *damaged = (st = read_fp8(t, c)) == MGT_ERR_FORMAT;
	if (!st && !t->a->no_load_optim && !t->a->finetune) *damaged = (st = read_moments(t, c)) == MGT_ERR_FORMAT;
	if (!st) st = restore_progress(t, meta);
	if (!st) restore_rng(t, meta);
	json_t *hf = json_object_get(meta, "hf"); /* where a converted model came from: mgt-ckpt-convert's way back */
	if (!st && json_is_object(hf)) t->hf_meta = json_incref(hf);
	json_decref(meta);
	return st;
}

/* Whether dir is one iteration of a checkpoint (mgt-ckpt(5): iter_NNNNNNN/ holding metadata.json),
 * which --load does not take: starting from random there would save beside the saved run. */
static bool iteration_dir(const char *dir)
{
	size_t len = strlen(dir) + sizeof "/metadata.json";
	char *p = mgt_malloc(len);
	struct stat sb;
	bool yes = p && (snprintf(p, len, "%s/metadata.json", dir), stat(p, &sb) == 0);
	free(p);
	return yes;
}

/* Which iteration of dir to load (--ckpt-step, else the tracker's), or -1 to start from random:
 * dir missing, or holding neither a tracker nor any iteration (Megatron's behaviour).
 * Iterations without a tracker are refused: starting afresh would save over them and move the
 * tracker to the new run. */
static mgt_status pick_iteration(trainer *t, const char *dir, int64_t *it)
{
	*it = -1;
	struct stat sb;
	int serr = stat(dir, &sb) ? errno : 0;
	if (serr == ENOENT) {
		if (t->a->ckpt_step)
			return mgt_err(MGT_ERR_FORMAT, "--ckpt-step %lld: %s does not exist", (long long)t->a->ckpt_step, dir);
		if (t->io->log) fprintf(t->io->log, "WARNING: could not find the metadata file %s/%s; "
					"will not load any checkpoints and will start from random\n", dir, MGT_CKPT_TRACKER);
		return MGT_OK;
	}
	if (serr) return mgt_err(MGT_ERR_IO, "--load %s: %s", dir, strerror(serr));
	if (!S_ISDIR(sb.st_mode))
		return mgt_err(MGT_ERR_USAGE, "--load %s: not a directory (a checkpoint directory holds %s and "
			       "iter_NNNNNNN/, mgt-ckpt(5))", dir, MGT_CKPT_TRACKER);
	if (t->a->ckpt_step) {
		*it = t->a->ckpt_step;
		return MGT_OK;
	}
	size_t len = strlen(dir) + sizeof MGT_CKPT_TRACKER + 1;
	char *tracker = mgt_malloc(len);
	if (!tracker) return MGT_ERR_NOMEM;
	snprintf(tracker, len, "%s/%s", dir, MGT_CKPT_TRACKER);
	bool have = lstat(tracker, &sb) == 0;
	free(tracker);
	if (have) {
		mgt_status st = mgt_ckpt_latest(dir, it);
		return st == MGT_ERR_FORMAT ? mgt_ckpt_suggest(dir, -1, st) : st;
	}
	int64_t *its;
	size_t n;
	mgt_status st = mgt_ckpt_iterations(dir, &its, &n);
	free(its);
	if (st) return st;
	if (n == 0 && iteration_dir(dir))
		return mgt_err(MGT_ERR_FORMAT, "--load %s: an iteration directory, not a checkpoint directory: pass --load "
			       "with the directory that holds it (and --ckpt-step N for iteration N), as mgt-eval and "
			       "mgt-ckpt-convert take it", dir);
	if (n == 0) {
		if (t->io->log) fprintf(t->io->log, "WARNING: could not find the metadata file %s/%s; "
					"will not load any checkpoints and will start from random\n", dir, MGT_CKPT_TRACKER);
		return MGT_OK;
	}
	mgt_err(MGT_ERR_FORMAT, "%s holds %zu iteration director%s but no %s, so which to load is not known "
		"(refusing to start from random beside them)", dir, n, n == 1 ? "y" : "ies", MGT_CKPT_TRACKER);
	return mgt_ckpt_suggest(dir, -1, MGT_ERR_FORMAT);
}

/* Megatron's line after a load, then its load-checkpoint timer (this rank's time in both; t0 when
 * the load began). */
static void log_loaded(const trainer *t, const char *dir, const mgt_source *c, double t0)
{
	if (!t->io->log) return;
	double ms = 1000 * (mgt_now() - t0);
	fprintf(t->io->log, "  successfully loaded checkpoint from %s [ iteration %lld ]\n", dir,
		(long long)mgt_source_iteration(c));
	fprintf(t->io->log, "(min, max) time across ranks (ms):\n    load-checkpoint ................................: "
		"(%.2f, %.2f)\n", ms, ms);
}

/* Load the model source dir opens (its iteration step, <= 0: the tracker's): weights, and the
 * optimizer's state and progress unless --finetune; Megatron's line and timer after it.  A
 * Megatron-LM checkpoint's PyTorch RNG states do not carry over: said in one line on a resume. */
static mgt_status load_source(trainer *t, const char *dir, int64_t step, bool *loaded)
{
	mgt_source *c = NULL;
	bool damaged = false;
	double t0 = mgt_now();
	mgt_status st = mgt_source_open(dir, step, &c);
	if (st == MGT_ERR_IO || st == MGT_ERR_INPUT) st = MGT_ERR_FORMAT;
	if (!st) st = load_from(t, c, &damaged);
	if (!st && t->io->log && mgt_source_kind(c) == 3 && !t->a->finetune)
		fprintf(t->io->log, "  %s: a Megatron-LM checkpoint; its PyTorch RNG states (rng_state) do not carry over: "
			"dropout is keyed by the checkpoint's --seed %lld\n", mgt_source_dir(c), (long long)t->dropout_seed);
	if (!st) log_loaded(t, dir, c, t0);
	mgt_source_close(c);
	*loaded = !st;
	return st;
}

/* --pretrained-checkpoint DIR when --load holds no checkpoint (megatron/training/checkpointing.py
 * load_checkpoint: "attempting to finetune with checkpoint in", then args.finetune = True): the
 * weights of an mgt checkpoint (its tracker's iteration), a Megatron-LM checkpoint or a Hugging
 * Face directory read in place (mgt_source), resharded to this run's layout; no optimizer state, iteration, consumed
 * samples or dropout seed. */
static mgt_status load_pretrained(trainer *t, bool *loaded)
{
	const char *dir = t->a->pretrained_checkpoint;
	if (t->io->log && t->a->load)
		fprintf(t->io->log, "Checkpoint file not found in load directory %s attempting to finetune with checkpoint in "
			"%s\n", t->a->load, dir);
	t->a->finetune = true;
	mgt_status st = load_source(t, dir, 0, loaded);
	return st ? mgt_err_ctx(st, "--pretrained-checkpoint %s", dir) : MGT_OK;
}

mgt_status trainer_load(trainer *t, bool *loaded)
{
	*loaded = false;
	t->dropout_seed = (uint64_t)t->a->seed;
	const char *dir = t->a->load;
	int kind = 0;
	if (dir && !mgt_convert_detect(dir, &kind) && kind == 3) { /* a Megatron-LM checkpoint (mgt-megatron(5)) */
		mgt_status st = load_source(t, dir, t->a->ckpt_step, loaded);
		return st ? mgt_err_ctx(st, "loading checkpoint") : MGT_OK;
	}
	mgt_err(MGT_OK, "%s", "");
	int64_t it = -1;
	mgt_status st = dir ? pick_iteration(t, dir, &it) : MGT_OK; /* no --load: --ckpt-step is refused */
	if (!st && it < 0 && t->a->pretrained_checkpoint) /* Megatron's load_checkpoint: fine-tune from it */
		return load_pretrained(t, loaded);
	if (!dir) return MGT_OK;
	if (!st && it < 0 && t->a->exit_on_missing_checkpoint) { /* Megatron's load_checkpoint, which exits 0 */
		if (t->io->log) fprintf(t->io->log, ">> '--exit-on-missing-checkpoint' set ... exiting. <<\n");
		return mgt_err(MGT_ERR_FORMAT, "--load %s: no checkpoint there (no %s) and --exit-on-missing-checkpoint", dir,
			       MGT_CKPT_TRACKER);
	}
	if (st || it < 0) return st ? mgt_err_ctx(st, "loading checkpoint") : MGT_OK;
	mgt_source *c = NULL;
	mgt_ckpt *ck = NULL;
	bool damaged = false;
	double t0 = mgt_now();
	st = mgt_ckpt_open(dir, it, &ck);
	if (!st) st = mgt_ckpt_check(ck);
	if (st) mgt_ckpt_close(ck);
	else st = mgt_source_from_ckpt(ck, &c);
	if (st) {
		/* a missing iteration directory is MGT_ERR_IO from mgt_ckpt_open: the same refusal */
		damaged = st == MGT_ERR_FORMAT || st == MGT_ERR_IO;
		if (st == MGT_ERR_IO) st = MGT_ERR_FORMAT;
		if (t->a->ckpt_step) mgt_err_ctx(st, "--ckpt-step %lld", (long long)it);
		else mgt_err_ctx(st, "%s/%s names iteration %lld", dir, MGT_CKPT_TRACKER, (long long)it);
	}
	if (!st) st = load_from(t, c, &damaged);
	if (!st) log_loaded(t, dir, c, t0);
	mgt_source_close(c);
	if (st && damaged) st = mgt_ckpt_suggest(dir, it, st);
	*loaded = !st;
	return st ? mgt_err_ctx(st, "loading checkpoint") : MGT_OK;
}

/* Whether a and b name the same existing directory. */
static bool same_dir(const char *a, const char *b)
{
	struct stat x, y;
	return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

mgt_status trainer_save_guard(const mgt_args *a)
{
	struct stat sb;
	if (!a->save || a->overwrite_save || stat(a->save, &sb) || !S_ISDIR(sb.st_mode) ||
	    (a->load && same_dir(a->load, a->save)))
		return MGT_OK;
	int64_t *its = NULL, latest = -1;
	size_t n = 0;
	mgt_status st = mgt_ckpt_iterations(a->save, &its, &n);
	if (st) return mgt_err_ctx(st, "--save");
	char tracked[64] = "";
	if (mgt_ckpt_latest(a->save, &latest) == MGT_OK)
		snprintf(tracked, sizeof tracked, ", its tracker at %lld", (long long)latest);
	mgt_err(MGT_OK, "%s", ""); /* no tracker: not an error here */
	char range[64] = "";
	if (n == 1) snprintf(range, sizeof range, "iteration %lld", (long long)its[0]);
	if (n > 1) snprintf(range, sizeof range, "iterations %lld to %lld", (long long)its[0], (long long)its[n - 1]);
	free(its);
	if (!n && !tracked[0]) return MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "--save %s holds the checkpoints of another run (%s%s) that this run would save over "
		       "and whose tracker it would move%s: pass --load %s to resume that run, or --overwrite-save to start a "
		       "new run there on purpose", a->save, n ? range : "no iteration", tracked,
		       a->load ? " (--load names another directory)" : "", a->save);
}

/* bytes as "N.N MiB" below 10 GiB, else "N.N GiB", into buf [32]. */
static const char *size_str(char *buf, double bytes)
{
	double mib = bytes / (1024.0 * 1024.0);
	if (mib < 10240) snprintf(buf, 32, "%.1f MiB", mib);
	else snprintf(buf, 32, "%.1f GiB", mib / 1024.0);
	return buf;
}

mgt_status trainer_save_room(trainer *t, double params)
{
	const mgt_args *a = t->a;
	if (!a->save || t->eval_only) return MGT_OK;
	uint64_t free_b = 0;
	mgt_status st = mgt_free_bytes(a->save, &free_b);
	if (st) return mgt_err_ctx(st, "--save");
	double need = params * (a->no_save_optim ? 4.0 : 12.0);
	char n[32], f[32];
	if (t->io->log)
		fprintf(t->io->log, " > checkpoint size: about %s (fp32 weights%s); %s free for --save %s\n", size_str(n, need),
			a->no_save_optim ? "" : " and Adam moments", size_str(f, (double)free_b), a->save);
	if ((double)free_b >= need) return MGT_OK;
	return mgt_err(MGT_ERR_IO, "--save %s: %s free on its file system, and one checkpoint of this run takes about %s: "
		       "free some space, --save elsewhere%s", a->save, size_str(f, (double)free_b), size_str(n, need),
		       a->no_save_optim ? "" : ", or --no-save-optim (weights only, a third of it)");
}

/* ---- --use-checkpoint-args ---- */

static mgt_status copy_arg(mgt_args *a, json_t *ck, const char *key, const char *load_dir)
{
	json_t *v = json_object_get(ck, key);
	if (!v || json_is_null(v)) return MGT_OK;
	char buf[4096];
	bool file = strstr(key, "_file") || !strcmp(key, "tokenizer_model");
	if (json_is_string(v) && !file)
		snprintf(buf, sizeof buf, "%s", json_string_value(v));
	else if (json_is_string(v)) { /* a file: as recorded, or relative to the save directory */
		struct stat sb;
		snprintf(buf, sizeof buf, "%s/%s", load_dir, json_string_value(v));
		if (json_string_value(v)[0] == '/' || stat(buf, &sb)) snprintf(buf, sizeof buf, "%s", json_string_value(v));
	} else if (json_is_boolean(v)) snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
	else if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v)) snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
	else return mgt_err(MGT_ERR_FORMAT, "%s: metadata.json args.%s: unexpected value", load_dir, key);
	mgt_status st = mgt_args_set(a, key, buf);
	return st ? mgt_err_ctx(MGT_ERR_FORMAT, "%s: metadata.json args.%s", load_dir, key) : MGT_OK;
}

mgt_status trainer_checkpoint_args(mgt_args *a)
{
	if (!a->use_checkpoint_args) return MGT_OK;
	if (!a->load) return mgt_err(MGT_ERR_USAGE, "--use-checkpoint-args needs --load");
	struct stat sb;
	if (stat(a->load, &sb)) return MGT_OK; /* nothing to load: start from random, as trainer_load */
	mgt_source *c = NULL;
	int kind = 0;
	mgt_status st = mgt_convert_detect(a->load, &kind);
	if (!st && kind == 3) st = mgt_source_open(a->load, a->ckpt_step, &c);
	else {
		mgt_ckpt *ck0 = NULL;
		st = mgt_ckpt_open(a->load, a->ckpt_step ? a->ckpt_step : -1, &ck0);
		if (!st) st = mgt_source_from_ckpt(ck0, &c);
	}
	json_error_t e;
	json_t *meta = st ? NULL : json_loads(mgt_source_metadata(c), 0, &e), *ck = json_object_get(meta, "args");
	if (!st && !json_is_object(ck)) st = mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: no \"args\"", mgt_source_dir(c));
	/* with Megatron's MoE routing keys (load_args_from_checkpoint, force=True), and the router's
	 * groups, which define the model's function as well; a hybrid model's pattern and Mamba sizes */
	static const char *const more[] = {"norm_epsilon", "group_query_attention", "make_vocab_size_divisible_by",
					   "moe_router_topk", "moe_router_pre_softmax", "moe_router_score_function",
					   "moe_router_topk_scaling_factor", "moe_router_num_groups", "moe_router_group_topk",
					   "hybrid_layer_pattern", "mamba_state_dim", "mamba_head_dim", "mamba_num_groups",
					   "mamba_num_heads", NULL};
	for (const char *const *k = shape_keys; !st && *k; k++)
		if (strcmp(*k, "padded_vocab_size")) st = copy_arg(a, ck, *k, a->load);
	for (const char *const *k = moe_keys; !st && *k; k++) st = copy_arg(a, ck, *k, a->load);
	for (const char *const *k = more; !st && *k; k++) st = copy_arg(a, ck, *k, a->load);
	if (!st && !a->model.seq_length) st = copy_arg(a, ck, "seq_length", a->load);
	static const char *const tok[] = {"tokenizer_type", "vocab_file", "merge_file", "tokenizer_model",
					  "tiktoken_pattern", "vocab_size", NULL};
	bool want_tok = !a->tokenizer_type;
	for (const char *const *k = tok; !st && want_tok && *k; k++) st = copy_arg(a, ck, *k, a->load);
	if (!st && want_tok) st = mgt_args_tok_files_use(a, meta, mgt_source_dir(c)); /* the checkpoint's own copies */
	json_decref(meta);
	mgt_source_close(c);
	return st ? mgt_err_ctx(st, "--use-checkpoint-args") : MGT_OK;
}
