/* lib/train/checkpointing.c: saving the trainer through lib/ckpt (format: mgt-ckpt(5)); the table
 * pieces each rank saves; resuming is ckpt_load.c. */
#include "train_impl.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"

/* The expert-parallel size tt was built for: num_experts over the experts it lists of one
 * dataset (1 without experts). */
static int table_ep(const mgt_tensor_table *tt)
{
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		if (x->num_experts <= 0) continue;
		int local = 0;
		for (int j = i; j < tt->n && tt->t[j].layer == x->layer; j++)
			local += tt->t[j].num_experts > 0 && !strcmp(tt->t[j].dataset, x->dataset);
		return x->num_experts / local;
	}
	return 1;
}

static char *metadata_json(trainer *t, const mgt_tensor_table *full)
{
	mgt_args *a = t->a;
	const mgt_lr_sched *s = &t->sched;
	json_t *o = json_pack(
		"{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:{s:s?, s:s?, s:s?, s:s?, s:I, s:I}, "
		"s:{s:i, s:i, s:I, s:b, s:i, s:I, s:b}, s:o, s:{s:f, s:f, s:f, s:I, s:I, s:I, s:s, s:s, s:I}, "
		"s:{s:I}, s:{s:I}}",
		"format", "mgt-ckpt", "format_version", 1, "iteration", (json_int_t)t->iteration,
		"consumed_train_samples", (json_int_t)t->consumed_train,
		"consumed_valid_samples", (json_int_t)t->consumed_valid,
		"skipped_iterations", (json_int_t)t->skipped_iters, "nan_iterations", (json_int_t)t->nan_iters,
		"num_floating_point_operations_so_far", t->flops_so_far, "args", mgt_args_to_json(a),
		"tokenizer", "tokenizer_type", a->tokenizer_type, "vocab_file", a->vocab_file,
		"merge_file", a->merge_file, "tokenizer_model", a->tokenizer_model,
		"padded_vocab_size", (json_int_t)a->model.padded_vocab_size, "vocab_size", (json_int_t)a->model.vocab_size,
		"layout", "tensor_model_parallel_size", t->ps.tp, "pipeline_model_parallel_size", t->ps.pp,
		"data_parallel_size", (json_int_t)a->data_parallel_size, "use_distributed_optimizer",
		a->use_distributed_optimizer, "world_size", t->ps.world_size, "virtual_pipeline_model_parallel_size",
		(json_int_t)t->V, "sequence_parallel", a->sequence_parallel,
		"tensors", (json_t *)mgt_ckpt_tensors_json(full),
		"opt_param_scheduler", "max_lr", s->max_lr, "min_lr", s->min_lr, "lr_warmup_init", s->init_lr,
		"lr_warmup_steps", (json_int_t)s->warmup_steps, "lr_decay_steps", (json_int_t)s->decay_steps,
		"wsd_decay_steps", (json_int_t)s->wsd_decay_steps, "lr_decay_style", s->style,
		"lr_wsd_decay_style", s->wsd_style, "num_steps", (json_int_t)s->num_steps,
		"optimizer", "step", (json_int_t)t->shard[0].opt.step, "rng", "seed", (json_int_t)t->dropout_seed);
	const mgt_loss_scaler *ls = &t->scaler;
	if (o && json_object_set_new(o, "grad_scaler", json_pack("{s:f, s:I, s:I}", "scale", ls->scale,
			"growth_tracker", (json_int_t)ls->growth_tracker, "hysteresis_tracker",
			(json_int_t)ls->hysteresis_tracker))) {
		json_decref(o);
		o = NULL;
	}
	json_t *tf = o ? mgt_train_tok_files_json(a) : NULL;
	if (o && (!tf || json_object_set_new(json_object_get(o, "tokenizer"), "files", tf))) {
		json_decref(o);
		o = NULL;
	}
	json_t *lay = o ? json_object_get(o, "layout") : NULL;
	if (lay) json_object_set_new(lay, "expert_model_parallel_size", json_integer(table_ep(mgt_model_tensors(t->model))));
	if (o && a->no_save_rng) json_object_del(o, "rng");
	if (o && t->hf_meta) json_object_set(o, "hf", (json_t *)t->hf_meta);
	char *txt = o ? json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_decref(o);
	return txt;
}

/* The whole model's table (all layers, TP 1): names and global shapes for the metadata and checks. */
mgt_status trainer_ckpt_full_table(trainer *t, mgt_tensor_table *full)
{
	return mgt_tensor_table_build(full, &t->a->model, 1, 0, 1, 0);
}

/* ---- the pieces a rank saves ---- */

/* Pieces p[i] go to shard file file[i]: the j-th piece of a dataset to file j (lib/ckpt keeps one
 * piece per tensor per file). */
struct mgt_train_pieces {
	mgt_ckpt_piece *p;
	int *file;
	size_t n, cap;
	int nfiles;
	void **owned;      /* piece names, merged data, host copies of backend buffers */
	size_t nowned, owned_cap;
};

/* Let pl free q (freed at once when that fails). */
static mgt_status pl_own(mgt_train_pieces *pl, void *q)
{
	if (pl->nowned == pl->owned_cap) {
		size_t cap = pl->owned_cap ? 2 * pl->owned_cap : 64;
		void **o = mgt_realloc(pl->owned, cap * sizeof *o);
		if (!o) {
			free(q);
			return MGT_ERR_NOMEM;
		}
		pl->owned = o;
		pl->owned_cap = cap;
	}
	pl->owned[pl->nowned++] = q;
	return MGT_OK;
}

static mgt_status pl_add(mgt_train_pieces *pl, const char *name, int nd, const int64_t *gs, const int64_t *off,
			 const int64_t *shape, const float *data)
{
	if (pl->n == pl->cap) {
		size_t cap = pl->cap ? 2 * pl->cap : 64;
		mgt_ckpt_piece *p = mgt_realloc(pl->p, cap * sizeof *p);
		if (p) pl->p = p;
		int *f = p ? mgt_realloc(pl->file, cap * sizeof *f) : NULL;
		if (!f) return MGT_ERR_NOMEM;
		pl->file = f;
		pl->cap = cap;
	}
	int file = 0;
	for (size_t i = 0; i < pl->n; i++) file += !strcmp(pl->p[i].name, name);
	char *nm = mgt_strdup(name);
	if (!nm || pl_own(pl, nm)) return MGT_ERR_NOMEM;
	mgt_ckpt_piece *p = &pl->p[pl->n];
	*p = (mgt_ckpt_piece){ .name = nm, .ndim = nd, .dtype = MGT_CKPT_F32, .data = data };
	for (int d = 0; d < nd; d++) {
		p->global_shape[d] = gs[d];
		p->offset[d] = off[d];
		p->shape[d] = shape[d];
	}
	pl->file[pl->n++] = file;
	if (file + 1 > pl->nfiles) pl->nfiles = file + 1;
	return MGT_OK;
}

/* A box of one expert: its offset and shape in the dataset (expert index first), its data. */
typedef struct {
	int64_t off[3], shape[3];
	const float *src;
} expert_box;

/* By offset and shape outside the expert dimension, then by expert. */
static int cmp_expert_box(const void *pa, const void *pb)
{
	const expert_box *a = pa, *b = pb;
	for (int d = 1; d < 3; d++) {
		if (a->off[d] != b->off[d]) return a->off[d] < b->off[d] ? -1 : 1;
		if (a->shape[d] != b->shape[d]) return a->shape[d] < b->shape[d] ? -1 : 1;
	}
	return (a->off[0] > b->off[0]) - (a->off[0] < b->off[0]);
}

/* The pieces of the dataset of expert row i0 (its first row in the table) in [lo, hi): runs of
 * consecutive experts whose boxes agree outside the expert dimension become one piece. */
static mgt_status add_experts(mgt_train_pieces *pl, const char *prefix, const mgt_tensor_table *tt, int i0, size_t lo,
			      size_t hi, const float *data)
{
	const mgt_tensor *x0 = &tt->t[i0];
	int rows = 0;
	for (int j = i0; j < tt->n && tt->t[j].layer == x0->layer; j++) rows++;
	expert_box *b = mgt_malloc((size_t)rows * 6 * sizeof *b);
	if (!b) return MGT_ERR_NOMEM;
	memset(b, 0, (size_t)rows * 6 * sizeof *b); /* dims past the dataset's compare equal */
	char name[160];
	int64_t gs[3];
	int nd = mgt_ckpt_row_dataset(x0, prefix, name, sizeof name, gs), n = 0;
	for (int j = i0; j < i0 + rows; j++) {
		const mgt_tensor *x = &tt->t[j];
		size_t a, e;
		if (x->num_experts <= 0 || strcmp(x->dataset, x0->dataset) || !mgt_tensor_overlap(x, lo, hi, &a, &e)) continue;
		int64_t off[MGT_CKPT_MAX_BOXES][3], shape[MGT_CKPT_MAX_BOXES][3];
		size_t first[MGT_CKPT_MAX_BOXES];
		int nb = mgt_ckpt_row_boxes(x, a - x->offset, e - x->offset, off, shape, first);
		for (int k = 0; k < nb; k++, n++) {
			memcpy(b[n].off, off[k], (size_t)nd * sizeof(int64_t));
			memcpy(b[n].shape, shape[k], (size_t)nd * sizeof(int64_t));
			b[n].src = data + (x->offset + first[k] - lo);
		}
	}
	if (n > 1) qsort(b, (size_t)n, sizeof *b, cmp_expert_box);
	mgt_status st = MGT_OK;
	for (int i = 0, r; !st && i < n; i = r) {
		for (r = i + 1; r < n && b[r].off[0] == b[r - 1].off[0] + 1; r++)
			if (memcmp(b[r].off + 1, b[i].off + 1, 2 * sizeof(int64_t)) ||
			    memcmp(b[r].shape + 1, b[i].shape + 1, 2 * sizeof(int64_t)))
				break;
		size_t per = 1;
		for (int d = 1; d < nd; d++) per *= (size_t)b[i].shape[d];
		int64_t shape[3];
		memcpy(shape, b[i].shape, sizeof shape);
		shape[0] = r - i;
		const float *src = b[i].src;
		if (r - i > 1) { /* the experts' boxes lie apart in the buffer: one copy side by side */
			float *m = mgt_malloc((size_t)(r - i) * per * sizeof *m);
			if (!m || pl_own(pl, m)) {
				st = MGT_ERR_NOMEM;
				break;
			}
			for (int q = i; q < r; q++) memcpy(m + (size_t)(q - i) * per, b[q].src, per * sizeof *m);
			src = m;
		}
		st = pl_add(pl, name, nd, gs, b[i].off, shape, src);
	}
	free(b);
	return st;
}

mgt_status mgt_train_pieces_new(mgt_train_pieces **out)
{
	*out = mgt_malloc(sizeof **out);
	if (!*out) return MGT_ERR_NOMEM;
	memset(*out, 0, sizeof **out);
	return MGT_OK;
}

mgt_status mgt_train_pieces_add(mgt_train_pieces *pl, const char *prefix, const mgt_tensor_table *tt, size_t lo,
				size_t hi, const float *data, unsigned which)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		if (x->num_experts > 0) {
			if ((which & MGT_TRAIN_PIECES_EXPERT) && !mgt_ckpt_row_seen(tt, i))
				st = add_experts(pl, prefix, tt, i, lo, hi, data);
			continue;
		}
		size_t a, b;
		if (!(which & MGT_TRAIN_PIECES_DENSE) || ((which & MGT_TRAIN_PIECES_NO_WORD_EMB) && x->role == MGT_T_WORD_EMB) ||
		    !mgt_tensor_overlap(x, lo, hi, &a, &b))
			continue;
		char name[160];
		int64_t gs[3], off[MGT_CKPT_MAX_BOXES][3], shape[MGT_CKPT_MAX_BOXES][3];
		size_t first[MGT_CKPT_MAX_BOXES];
		int nd = mgt_ckpt_row_dataset(x, prefix, name, sizeof name, gs);
		int nb = mgt_ckpt_row_boxes(x, a - x->offset, b - x->offset, off, shape, first);
		for (int k = 0; !st && k < nb; k++)
			st = pl_add(pl, name, nd, gs, off[k], shape[k], data + (x->offset + first[k] - lo));
	}
	return st;
}

static void pl_clear(mgt_train_pieces *pl)
{
	for (size_t i = 0; i < pl->nowned; i++) free(pl->owned[i]);
	free(pl->p);
	free(pl->file);
	free(pl->owned);
	memset(pl, 0, sizeof *pl);
}

void mgt_train_pieces_free(mgt_train_pieces *pl)
{
	if (!pl) return;
	pl_clear(pl);
	free(pl);
}

mgt_status mgt_train_pieces_write(const mgt_train_pieces *pl, const char *dir, int64_t it, int tp, int pp, int dp)
{
	mgt_status st = MGT_OK;
	mgt_ckpt_piece *sel = !pl->n ? NULL : mgt_malloc(pl->n * sizeof *sel);
	if (pl->n && !sel) st = MGT_ERR_NOMEM;
	for (int f = 0; !st && f < pl->nfiles; f++) {
		size_t n = 0;
		for (size_t i = 0; i < pl->n; i++)
			if (pl->file[i] == f) sel[n++] = pl->p[i];
		char shard[80];
		int len = snprintf(shard, sizeof shard, "model_tp%02d_pp%03d_dp%03d", tp, pp, dp);
		snprintf(shard + len, sizeof shard - (size_t)len, f ? "_%d.h5" : ".h5", f);
		st = mgt_ckpt_write_shard(dir, it, shard, sel, n);
	}
	free(sel);
	return st;
}

/* This rank's place in the data x context parallel group (cp_rank + CP x dp_rank): its shard
 * file's "dp" number, and the rank of the gradient group that shards the distributed optimizer. */
static int dpcp_rank(const trainer *t) { return t->ps.cp_rank + t->ps.cp * t->ps.dp_rank; }

/* The rows of chunk m this rank saves where one copy of each is wanted: the dense rows on
 * data-parallel (x context-parallel) rank 0, the expert rows on the first rank of each expert-data-parallel group,
 * i.e. on the data-parallel ranks below EP (Megatron's expert ranks with the expert tensor
 * parallel size TP and no context parallelism: dp_rank = ep_rank + EP * edp_rank); never the
 * last stage's copy of tied word embeddings (the first stage's is the tensor). */
static unsigned saved_rows(const trainer *t, const mgt_model *m)
{
	unsigned w = mgt_model_is_first_stage(m) ? 0 : MGT_TRAIN_PIECES_NO_WORD_EMB;
	int r = dpcp_rank(t);
	if (r == 0) w |= MGT_TRAIN_PIECES_DENSE;
	if (r < table_ep(mgt_model_tensors(m))) w |= MGT_TRAIN_PIECES_EXPERT;
	return w;
}

/* A host view of n floats of backend memory (downloaded and kept in pl when the backend's memory
 * is not host memory). */
static mgt_status host_view(trainer *t, mgt_train_pieces *pl, const float *buf, size_t n, const float **out)
{
	*out = buf;
	if (t->be->host_memory) return MGT_OK;
	float *h = mgt_malloc((n ? n : 1) * sizeof(float));
	if (!h || pl_own(pl, h)) return MGT_ERR_NOMEM;
	*out = h;
	return t->be->ops->download(t->be, h, buf, n * sizeof(float));
}

const char *const trainer_moment_prefix[2] = { "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq." };

/* What each optimizer shard of this rank holds of the parameters (k -1) or of Adam's moment k:
 * with the distributed optimizer every rank of the first instance saves its own shards (the
 * other instances hold the same values: --num-distributed-optimizer-instances); otherwise one
 * copy of the replicated state, as the parameters (saved_rows). */
static mgt_status collect_shards(trainer *t, mgt_train_pieces *pl, int k)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < t->nshard; i++) {
		opt_shard *s = &t->shard[i];
		mgt_model *m = t->chunk[s->chunk];
		unsigned w = saved_rows(t, m);
		if (t->a->use_distributed_optimizer && t->ps.inst_rank == 0) w |= MGT_TRAIN_PIECES_DENSE | MGT_TRAIN_PIECES_EXPERT;
		if (!(w & (MGT_TRAIN_PIECES_DENSE | MGT_TRAIN_PIECES_EXPERT))) continue;
		const float *src = k < 0 ? mgt_model_params(m) + s->lo : k ? s->opt.v : s->opt.m, *p;
		st = host_view(t, pl, src, s->hi - s->lo, &p);
		if (!st) st = mgt_train_pieces_add(pl, k < 0 ? "" : trainer_moment_prefix[k], mgt_model_tensors(m), s->lo, s->hi, p, w);
	}
	return st;
}

/* Parameters: one copy of each tensor (saved_rows), for all the rank's chunks; under
 * --fp8-param-gather and FSDP's optim_grads_params from the optimizer's shards (elsewhere the fp8
 * weights' fp32 copies, or the layer units outside this rank's shards, are
 * stale: mgt_model_fp8_gather_params). */
static mgt_status collect_params(trainer *t, mgt_train_pieces *pl)
{
	if (t->a->fp8.param_gather || trainer_fsdp_params(t)) return collect_shards(t, pl, -1);
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < t->V; c++) {
		mgt_model *m = t->chunk[c];
		const mgt_tensor_table *tt = mgt_model_tensors(m);
		unsigned w = saved_rows(t, m);
		if (!(w & (MGT_TRAIN_PIECES_DENSE | MGT_TRAIN_PIECES_EXPERT))) continue;
		const float *p;
		st = host_view(t, pl, mgt_model_params(m), tt->buf_numel, &p);
		if (!st) st = mgt_train_pieces_add(pl, "", tt, 0, tt->buf_numel, p, w);
	}
	return st;
}

/* Adam moments, from the shards this rank steps. */
static mgt_status collect_moments(trainer *t, mgt_train_pieces *pl)
{
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < 2; k++) st = collect_shards(t, pl, k);
	return st;
}

/* ---- fp8 scaling state (Transformer Engine's _extra_state of each linear; mgt-ckpt(5)) ----
 * Datasets fp8.forward.amax_history [len, 12 L], fp8.forward.scale [12 L],
 * fp8.backward.amax_history [len, 8 L] and fp8.backward.scale [8 L] for L decoder layers: linear
 * j (0 qkv, 1 proj, 2 fc1, 3 fc2) of global layer l has forward slots 12 l + 3 j + {0 input,
 * 1 weight, 2 output} and backward slots 8 l + 2 j + {0 grad_output, 1 grad_input} (the model's
 * order, mgt_model_fp8_view).  Equal on every TP, DP and CP rank after the reductions: saved by
 * the first of them, each pipeline stage its layers. */
const char *const trainer_fp8_names[4] = { "fp8.forward.amax_history", "fp8.forward.scale",
					  "fp8.backward.amax_history", "fp8.backward.scale" };

/* Dataset k's global shape, and the box of chunk state v in it; the host data it comes from. */
int trainer_fp8_box(const trainer *t, const mgt_model_fp8_state *v, int k, int64_t gs[2], int64_t off[2],
		   int64_t shape[2], float **data)
{
	const mgt_fp8_meta *mt = k < 2 ? v->fwd : v->bwd;
	const int64_t per = k < 2 ? 12 : 8, all = t->a->model.num_layers * per, at = v->first_layer * per;
	*data = k % 2 ? mt->scale : mt->history;
	if (k % 2) {
		gs[0] = all, off[0] = at, shape[0] = mt->slots;
		return 1;
	}
	gs[0] = mt->len, gs[1] = all, off[0] = 0, off[1] = at, shape[0] = mt->len, shape[1] = mt->slots;
	return 2;
}

/* The state of every fp8 chunk (the amaxes recorded since the last update folded in first: a
 * collective, so every rank calls it), saved by the first TP and DP x CP rank. */
static mgt_status collect_fp8(trainer *t, mgt_train_pieces *pl)
{
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < t->V; c++) {
		mgt_model_fp8_state v;
		if ((st = mgt_model_fp8_pending(t->chunk[c])) || (st = mgt_model_fp8_view(t->chunk[c], &v))) break;
		for (int k = 0; !st && v.fwd && !t->ps.tp_rank && !dpcp_rank(t) && k < 4; k++) {
			int64_t gs[2], off[2], shape[2];
			float *src, *cp;
			int nd = trainer_fp8_box(t, &v, k, gs, off, shape, &src);
			size_t n = (size_t)shape[0] * (size_t)(nd > 1 ? shape[1] : 1);
			if (!(cp = mgt_malloc(n * sizeof *cp)) || pl_own(pl, cp)) return MGT_ERR_NOMEM;
			memcpy(cp, src, n * sizeof *cp);
			st = pl_add(pl, trainer_fp8_names[k], nd, gs, off, shape, cp);
		}
	}
	return st;
}

/* Every piece this rank saves, in pl. */
static mgt_status collect_pieces(trainer *t, mgt_train_pieces *pl)
{
	mgt_status st = collect_params(t, pl);
	if (!st) st = collect_fp8(t, pl);
	if (!st && !t->a->no_save_optim) st = collect_moments(t, pl);
	return st;
}

static mgt_status world_barrier(trainer *t)
{
	mgt_comm *w = t->ps.world;
	return w->size > 1 ? w->ops->barrier(w) : MGT_OK;
}

/* Rank 0's metadata.json text for the current iteration (malloc'd). */
static mgt_status make_metadata(trainer *t, char **meta)
{
	mgt_tensor_table full = { 0 };
	mgt_status st = trainer_ckpt_full_table(t, &full);
	if (!st && !(*meta = metadata_json(t, &full))) st = MGT_ERR_NOMEM;
	mgt_tensor_table_free(&full);
	return st;
}

static void log_saved(trainer *t, int64_t it, double t0)
{
	if (t->io->log)
		fprintf(t->io->log, "  successfully saved checkpoint from iteration %7lld to %s [ t %.1f s ]\n",
			(long long)it, t->a->save, mgt_now() - t0);
}

/* ---- --async-save: the shards are written on a thread; rank 0 commits once every rank is done
 * (Megatron's async save, finalized from the training loop) ---- */

struct async_save {
	pthread_t thread;
	mgt_train_pieces pl;  /* pieces with data copied at save time */
	char *meta;           /* rank 0: metadata.json as of the save */
	int64_t iteration;
	double t0;
	mgt_status st;        /* the thread's result */
	char err[512];        /* and its message (mgt_err's buffer is per thread) */
	atomic_int done;
};

static void *async_main(void *arg)
{
	trainer *t = arg;
	struct async_save *as = t->async;
	as->st = mgt_train_pieces_write(&as->pl, t->a->save, as->iteration, t->ps.tp_rank, t->ps.pp_rank, dpcp_rank(t));
	if (as->st) snprintf(as->err, sizeof as->err, "%s", mgt_err_msg());
	atomic_store(&as->done, 1);
	return NULL;
}

/* Give every piece its own copy of the data, so training can go on changing the buffers. */
static mgt_status own_data(mgt_train_pieces *pl)
{
	for (size_t i = 0; i < pl->n; i++) {
		mgt_ckpt_piece *p = &pl->p[i];
		size_t n = 1;
		for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
		float *c = mgt_malloc(n * sizeof *c);
		if (!c || pl_own(pl, c)) return MGT_ERR_NOMEM;
		memcpy(c, p->data, n * sizeof *c);
		p->data = c;
	}
	return MGT_OK;
}

static void async_free(trainer *t)
{
	pl_clear(&t->async->pl);
	free(t->async->meta);
	free(t->async);
	t->async = NULL;
}

bool trainer_async_running(const trainer *t)
{
	return t->async && !atomic_load(&t->async->done);
}

/* Every rank together: wait for this rank's writes, agree that all succeeded, rank 0 commits. */
mgt_status trainer_save_wait(trainer *t)
{
	struct async_save *as = t->async;
	if (!as) return MGT_OK;
	pthread_join(as->thread, NULL);
	double bad = as->st != MGT_OK;
	mgt_comm *w = t->ps.world;
	mgt_status st = w->size > 1 ? w->ops->allreduce(w, &bad, 1, MGT_DT_F64, MGT_RED_SUM) : MGT_OK;
	if (!st && as->st) st = mgt_err(as->st, "%s", as->err);
	else if (!st && bad > 0) st = mgt_err(MGT_ERR_IO, "another rank failed to write its shards");
	if (!st && t->ps.world_rank == 0) st = mgt_ckpt_commit(t->a->save, as->iteration, as->meta);
	if (!st) st = world_barrier(t);
	if (!st) log_saved(t, as->iteration, as->t0);
	async_free(t);
	return st ? mgt_err_ctx(st, "saving checkpoint (async)") : MGT_OK;
}

void trainer_save_abandon(trainer *t)
{
	if (!t->async) return;
	pthread_join(t->async->thread, NULL);
	async_free(t);
}

static mgt_status save_async(trainer *t, double t0)
{
	struct async_save *as = mgt_malloc(sizeof *as);
	if (!as) return MGT_ERR_NOMEM;
	memset(as, 0, sizeof *as);
	as->iteration = t->iteration;
	as->t0 = t0;
	mgt_status st = collect_pieces(t, &as->pl);
	/* pieces of a device backend point into host copies already (host_view); CPU ones into the
	 * live buffers, which training goes on changing */
	if (!st && t->be->host_memory) st = own_data(&as->pl);
	if (!st && t->ps.world_rank == 0) st = make_metadata(t, &as->meta);
	atomic_init(&as->done, 0);
	t->async = as;
	if (!st && pthread_create(&as->thread, NULL, async_main, t)) st = mgt_err(MGT_ERR_NOMEM, "cannot start a thread");
	if (st) {
		async_free(t);
		return st;
	}
	if (t->io->log)
		fprintf(t->io->log, "  scheduled an async checkpoint save at iteration %7lld to %s\n", (long long)t->iteration,
			t->a->save);
	return MGT_OK;
}

/* Rank 0 opens the iteration directory, every rank writes its shards (now, or on a thread with
 * --async-save), rank 0 commits. */
mgt_status trainer_save(trainer *t)
{
	double t0 = mgt_now();
	bool root = t->ps.world_rank == 0;
	mgt_status st = trainer_save_wait(t); /* the previous async save first */
	if (!st && root) st = mgt_ckpt_begin(t->a->save, t->iteration);
	bool began = !st && root;
	if (!st && root) st = mgt_train_tok_files_save(t->a, t->a->save, t->iteration);
	if (!st) st = world_barrier(t);
	if (!st && t->a->async_save) {
		st = save_async(t, t0);
		return st ? mgt_err_ctx(st, "saving checkpoint") : MGT_OK;
	}
	mgt_train_pieces pl = { 0 };
	if (!st) st = collect_pieces(t, &pl);
	if (!st) st = mgt_train_pieces_write(&pl, t->a->save, t->iteration, t->ps.tp_rank, t->ps.pp_rank, dpcp_rank(t));
	pl_clear(&pl);
	if (!st) st = world_barrier(t);
	char *meta = NULL;
	if (!st && root) st = make_metadata(t, &meta);
	if (!st && root) st = mgt_ckpt_commit(t->a->save, t->iteration, meta);
	free(meta);
	if (!st) st = world_barrier(t);
	if (!st) log_saved(t, t->iteration, t0);
	if (st && began) mgt_ckpt_abort(t->a->save, t->iteration); /* iter_N.tmp whole: shards, tokenizer copies */
	return st ? mgt_err_ctx(st, "saving checkpoint") : MGT_OK;
}

/* ---- loading ---- */