/* lib/train/fsdp.c: fully sharded data parallelism as Megatron-FSDP runs it
 * (megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py, param_and_grad_buffer.py;
 * --data-parallel-sharding-strategy).  The chunk's flat buffers are laid out in units (one bucket
 * per decoder layer, lib/model/shard.c) and sharded as the distributed optimizer shards them:
 * rank r of a bucket's group owns elements [offset + r n/DP, offset + (r+1) n/DP).
 *  - optim_grads (ZeRO-2): after every micro-batch's backward of a unit, its gradients are
 *    reduce-scattered into the owned shard and the rest of the unit is zeroed and its pages given
 *    back (backend discard).  The owned shard accumulates across micro-batches: before each later
 *    backward it is multiplied by DP, so that the 1/DP the reduction applies to the whole bucket
 *    leaves the sum of the earlier micro-batches as it was (Megatron adds each reduce-scatter's
 *    result into the shard; the sums are the same, rounded in another order).
 *  - optim_grads_params (ZeRO-3): besides, the fp32 parameters of each layer unit are held as the
 *    owned shard only; the parameter hook all-gathers a unit before the layer's forward and
 *    again before its backward (its 16-bit copy cast from the gathered unit), and gives back all
 *    but the shard after each.  The next layer's gather is queued as a layer starts (prefetch),
 *    and a unit's gradients are given back at the next layer's hook, so that on GPUs both
 *    collectives run on the group's stream beside the compute (Megatron-FSDP's prefetch and
 *    overlapped reduce-scatter).  The units outside layers are gathered after every step and kept
 *    whole, as Megatron-FSDP keeps the modules outside its units.  With --fp8-param-gather the
 *    layer units' gathers move each rank's packed shard instead, cast to fp8 after the step
 *    (lib/model/fp8lin.c, mgt_model_fp8_unit_gather: Megatron-FSDP's fp8 model weights).  T5's
 *    encoder and decoder layers are one run of units (lib/model/t5.c).
 * The optimizer steps the owned shards as the distributed optimizer does (setup.c), and every
 * collective goes through the bucket's data-parallel group (the expert one for expert rows).
 * With distributed-optimizer instances (hybrid sharding, --outer-dp-sharding-strategy no_shard)
 * that group is the instance's: units are sharded, reduce-scattered and gathered inside the
 * instance, and the accumulated shards are all-reduced across the instances during the last
 * micro-batch's backward (grads.c, trainer_fsdp_last_backward). */
#include "train_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

bool trainer_fsdp_grads(const trainer *t) { return t->a->dp_sharding >= MGT_DP_OPTIM_GRADS && trainer_dpcp(t) > 1; }
bool trainer_fsdp_params(const trainer *t)
{
	return t->a->dp_sharding >= MGT_DP_OPTIM_GRADS_PARAMS && trainer_dpcp(t) > 1;
}

/* Megatron-FSDP's HSDP (megatron_fsdp.py: outer_fsdp_group_grad_reduce on the last micro-batch
 * only): the shards accumulate the instance's reduce-scatters, and the sum goes across the
 * instances once.  nbwd counts the chunk's backwards begun (before_backward). */
bool trainer_fsdp_last_backward(const trainer *t, int c)
{
	return !trainer_fsdp_grads(t) || t->fsdp.nbwd[c] >= t->a->num_microbatches;
}

/* This rank's shard [*own, *own + *part) of bucket b, relative to the bucket's offset. */
static void shard_of(const trainer *t, const mgt_bucket *k, size_t *own, size_t *part)
{
	mgt_comm *dp = trainer_bucket_comm(t, k);
	*part = k->numel / (size_t)dp->size;
	*own = (size_t)dp->rank * *part;
}

/* Zero bucket k of buffer x (elements of esize bytes) outside this rank's shard and give its
 * pages back. */
static void drop_outside(trainer *t, const mgt_bucket *k, void *x, size_t esize)
{
	size_t own, part;
	shard_of(t, k, &own, &part);
	char *p = (char *)x + k->offset * esize;
	t->be->ops->discard(t->be, p, own * esize);
	t->be->ops->discard(t->be, p + (own + part) * esize, (k->numel - own - part) * esize);
}

static void drop_grads(trainer *t, mgt_model *m, int from, int to)
{
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	for (int b = from; b < to; b++) drop_outside(t, &tt->buckets[b], mgt_model_grads(m), sizeof(float));
}

/* A 16-bit gradient reduction (--megatron-fsdp-grad-comm-dtype): each chunk's side buffer,
 * reserved whole and committed at the owned shards. */
static mgt_status side_alloc(trainer *t)
{
	if (t->a->grad_comm_t == MGT_DT_F32) return MGT_OK;
	if (!(t->fsdp.side = mgt_malloc((size_t)t->V * sizeof *t->fsdp.side))) return MGT_ERR_NOMEM;
	memset(t->fsdp.side, 0, (size_t)t->V * sizeof *t->fsdp.side);
	for (int c = 0; c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		size_t n = tt->buf_numel;
		if (!(t->fsdp.side[c] = t->be->ops->reserve(t->be, (n ? n : 1) * sizeof(float)))) return MGT_ERR_NOMEM;
		for (int b = 0; b < tt->nbuckets; b++) { /* only the owned shards are ever written */
			size_t own, part;
			shard_of(t, &tt->buckets[b], &own, &part);
			mgt_status st = t->be->ops->commit(t->be, t->fsdp.side[c] + tt->buckets[b].offset + own, part * sizeof(float));
			if (st) return st;
		}
	}
	return MGT_OK;
}

/* The reserved buffers (mgt_model_commit) this rank writes whole: all of them when nothing is
 * sharded (one rank), the parameters and their 16-bit copy when only the gradients are, and the
 * units outside layers (kept whole) of both under optim_grads_params. */
static mgt_status commit_whole(trainer *t)
{
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < t->V; c++) {
		mgt_model *m = t->chunk[c];
		int u = trainer_fsdp_params(t) ? -1 : INT_MIN;
		st = mgt_model_commit_unit(m, MGT_BUF_PARAMS, u);
		if (!st) st = mgt_model_commit_unit(m, MGT_BUF_LP, u);
		if (!st && !trainer_fsdp_grads(t)) st = mgt_model_commit_unit(m, MGT_BUF_GRADS, INT_MIN);
	}
	return st;
}

mgt_status trainer_fsdp_setup(trainer *t)
{
	mgt_status st = commit_whole(t);
	if (st || !trainer_fsdp_grads(t)) return st;
	int V = t->V;
	if (!(t->fsdp.nbwd = mgt_malloc((size_t)V * sizeof *t->fsdp.nbwd)) ||
	    !(t->fsdp.pending = mgt_malloc((size_t)V * sizeof *t->fsdp.pending)) ||
	    !(t->fsdp.gathered = mgt_malloc((size_t)V * sizeof *t->fsdp.gathered)))
		return MGT_ERR_NOMEM;
	memset(t->fsdp.gathered, 0, (size_t)V * sizeof *t->fsdp.gathered);
	st = side_alloc(t);
	for (int c = 0; !st && c < V; c++) {
		mgt_model *m = t->chunk[c];
		int nb = mgt_model_tensors(m)->nbuckets;
		t->fsdp.nbwd[c] = t->fsdp.pending[c] = 0;
		if (!trainer_fsdp_params(t)) continue;
		if (!(t->fsdp.gathered[c] = mgt_malloc((size_t)(nb ? nb : 1)))) return MGT_ERR_NOMEM;
		memset(t->fsdp.gathered[c], 0, (size_t)(nb ? nb : 1));
		mgt_model_set_param_hook(m, trainer_fsdp_param_hook, t);
	}
	return st;
}

void trainer_fsdp_free(trainer *t)
{
	for (int c = 0; t->fsdp.gathered && c < t->V; c++) free(t->fsdp.gathered[c]);
	for (int c = 0; t->fsdp.side && c < t->V; c++) {
		size_t n = mgt_model_tensors(t->chunk[c])->buf_numel;
		t->be->ops->unreserve(t->be, t->fsdp.side[c], (n ? n : 1) * sizeof(float));
	}
	free(t->fsdp.side);
	free(t->fsdp.gathered);
	free(t->fsdp.nbwd);
	free(t->fsdp.pending);
}

/* ---- gradients ---- */

/* The buffer given back whole: each unit is committed again before its backward writes it
 * (mgt_model_commit_unit), owned shard included, before the reductions and the optimizer read it. */
void trainer_fsdp_zero_grads(trainer *t)
{
	for (int c = 0; c < t->V; c++) {
		mgt_model *m = t->chunk[c];
		size_t bytes = mgt_model_tensors(m)->buf_numel * sizeof(float);
		if (trainer_fsdp_grads(t)) t->be->ops->discard(t->be, mgt_model_grads(m), bytes), t->fsdp.nbwd[c] = 0;
		else t->be->ops->zero(t->be, mgt_model_grads(m), bytes);
	}
}

/* Before a chunk's second and later backward of an iteration: the owned shards times DP, or
 * with a 16-bit reduction (t->fsdp.side) set aside and zeroed: the micro-batch's gradient alone
 * is rounded and reduced, then added to them in fp32 (take_shards), as Megatron-FSDP adds each
 * reduce-scatter's result into its main gradient shard. */
void trainer_fsdp_before_backward(trainer *t, int c)
{
	if (!trainer_fsdp_grads(t) || t->fsdp.nbwd[c]++ == 0 || (!t->fsdp.side && t->a->calculate_per_token_loss)) return;
	mgt_model *m = t->chunk[c];
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	for (int b = 0; b < tt->nbuckets; b++) {
		size_t own, part, at = tt->buckets[b].offset;
		shard_of(t, &tt->buckets[b], &own, &part);
		float *g = mgt_model_grads(m) + at + own;
		if (!t->fsdp.side) {
			t->be->ops->scale(t->be, g, part, (float)t->ps.dp);
			continue;
		}
		t->be->ops->copy(t->be, t->fsdp.side[c] + at + own, g, part * sizeof(float));
		t->be->ops->zero(t->be, g, part * sizeof(float));
	}
}

/* A 16-bit reduction's buckets [from, to) of chunk c, reduced: the owned shards widened into the
 * fp32 buffer, plus the earlier micro-batches' sum, and the 16-bit copy given back. */
static void take_shards(trainer *t, int c, int from, int to)
{
	mgt_model *m = t->chunk[c];
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	for (int b = from; t->fsdp.side && b < to; b++) {
		size_t own, part, at = tt->buckets[b].offset;
		shard_of(t, &tt->buckets[b], &own, &part);
		float *g = mgt_model_grads(m) + at + own;
		uint16_t *h = (uint16_t *)t->ddp.g16[c] + at;
		t->be->ops->widen(t->be, g, h + own, t->a->grad_comm_t, part);
		if (t->fsdp.nbwd[c] > 1) t->be->ops->add(t->be, g, t->fsdp.side[c] + at + own, MGT_DT_F32, part);
		t->be->ops->discard(t->be, h, tt->buckets[b].numel * sizeof *h);
	}
}

/* Buckets whose reduce-scatter was queued and that are not given back yet: the compute stream
 * waits for the group's, then all but the owned shards go. */
static mgt_status drop_pending(trainer *t, int c)
{
	mgt_model *m = t->chunk[c];
	if (t->fsdp.pending[c] == t->ddp.buckets_done[c]) return MGT_OK;
	mgt_status st = trainer_wait_dp(t);
	if (!st) take_shards(t, c, t->fsdp.pending[c], t->ddp.buckets_done[c]);
	if (!st) drop_grads(t, m, t->fsdp.pending[c], t->ddp.buckets_done[c]);
	t->fsdp.pending[c] = t->ddp.buckets_done[c];
	return st;
}

/* The gradient hook of every backward: the buckets reduced at the previous call given back (their
 * reduce-scatters ran beside the layer's backward since), then the units now complete queued
 * (grads.c); at the end of the backward every bucket given back, and the next backward starts
 * again at the first. */
mgt_status trainer_fsdp_grad_ready(void *ctx, mgt_model *m, int done_from_layer)
{
	trainer *t = ctx;
	int c = trainer_chunk_of(t, m);
	mgt_status st = drop_pending(t, c);
	if (!st) st = trainer_grad_ready(ctx, m, done_from_layer);
	if (!st && done_from_layer == INT_MIN) st = drop_pending(t, c);
	if (done_from_layer == INT_MIN) t->ddp.buckets_done[c] = t->fsdp.pending[c] = 0;
	return st;
}

/* After the finishing all-reduces (sequence-parallel norms, the tied embedding), which write
 * whole tensors: the rest of each bucket given back again. */
void trainer_fsdp_after_finish(trainer *t)
{
	for (int c = 0; trainer_fsdp_grads(t) && c < t->V; c++)
		drop_grads(t, t->chunk[c], 0, mgt_model_tensors(t->chunk[c])->nbuckets);
}

/* ---- parameters (optim_grads_params) ---- */

/* A bucket's parameters: released (its shard only), being gathered (the all-gather queued on the
 * group's stream), or gathered (waited for, its 16-bit copy cast). */
enum { RELEASED, IN_FLIGHT, GATHERED };

/* Queue the all-gather of bucket b's fp32 parameters (--fp8-param-gather: its packed shards, the
 * fp8 weights as bytes). */
static mgt_status start_gather(trainer *t, mgt_model *m, int b)
{
	const mgt_bucket *k = &mgt_model_tensors(m)->buckets[b];
	mgt_comm *dp = trainer_bucket_comm(t, k);
	if (mgt_model_fp8_units(m)) return mgt_model_fp8_unit_gather(m, b, dp);
	size_t own, part;
	shard_of(t, k, &own, &part);
	float *x = mgt_model_params(m) + k->offset;
	mgt_status st = mgt_model_commit(m, MGT_BUF_PARAMS, k->offset, k->offset + k->numel);
	return st ? st : dp->ops->allgather(dp, x, x + own, part, MGT_DT_F32);
}

/* Wait for bucket b's all-gather (the compute stream waits for the group's), then (fp8: unpack
 * it) cast its 16-bit copy. */
static mgt_status finish_gather(trainer *t, mgt_model *m, int b)
{
	const mgt_bucket *k = &mgt_model_tensors(m)->buckets[b];
	mgt_status st = mgt_comm_wait(trainer_bucket_comm(t, k));
	if (!st) st = mgt_model_commit(m, MGT_BUF_LP, k->offset, k->offset + k->numel);
	if (!st && mgt_model_fp8_units(m)) mgt_model_fp8_unit_gathered(m, b);
	if (!st) mgt_model_lp_refresh_range(m, k->offset, k->offset + k->numel);
	return st;
}

static void release_bucket(trainer *t, mgt_model *m, int b)
{
	const mgt_bucket *k = &mgt_model_tensors(m)->buckets[b];
	drop_outside(t, k, mgt_model_params(m), sizeof(float));
	void *lp = mgt_model_params_lp(m);
	if (lp) t->be->ops->discard(t->be, (uint16_t *)lp + k->offset, k->numel * 2);
	if (mgt_model_fp8_units(m)) mgt_model_fp8_unit_release(m, b);
}

/* One bucket of the layer the hook names: PREFETCH queues its gather, NEED also waits for it,
 * RELEASE (after waiting for a gather still in flight) keeps the shard only. */
static mgt_status use_bucket(trainer *t, mgt_model *m, int b, char *g, mgt_param_use use)
{
	mgt_status st = MGT_OK;
	if (use != MGT_PARAM_RELEASE && *g == RELEASED && !(st = start_gather(t, m, b))) *g = IN_FLIGHT;
	if (!st && use != MGT_PARAM_PREFETCH && *g == IN_FLIGHT && !(st = finish_gather(t, m, b))) *g = GATHERED;
	/* a gather still in flight writes the unit: wait for it first */
	if (!st && use == MGT_PARAM_RELEASE && *g == IN_FLIGHT) st = mgt_comm_wait(trainer_bucket_comm(t, &mgt_model_tensors(m)->buckets[b]));
	if (!st && use == MGT_PARAM_RELEASE && *g != RELEASED) release_bucket(t, m, b), *g = RELEASED;
	return st;
}

mgt_status trainer_fsdp_param_hook(void *ctx, mgt_model *m, int li, mgt_param_use use)
{
	trainer *t = ctx;
	int c = trainer_chunk_of(t, m);
	mgt_status st = MGT_OK;
	for (int b = 0; !st && b < mgt_model_tensors(m)->nbuckets; b++)
		if (mgt_model_bucket_unit(m, b) == li) st = use_bucket(t, m, b, &t->fsdp.gathered[c][b], use);
	return st;
}

/* The parameters' first values on this rank: the owned shards of the layer units and the units
 * outside layers whole (the same values as initializing everything gives there). */
mgt_status trainer_fsdp_init_params(trainer *t, mgt_model *m, uint64_t seed)
{
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	mgt_status st = MGT_OK;
	for (int b = 0; !st && b < tt->nbuckets; b++) {
		const mgt_bucket *k = &tt->buckets[b];
		size_t own = 0, part = k->numel;
		if (mgt_model_bucket_unit(m, b) >= 0) shard_of(t, k, &own, &part);
		st = mgt_model_init_params_range(m, seed, k->offset + own, k->offset + own + part);
	}
	return st;
}

/* The host copy of a whole parameter buffer (a checkpoint's) to the device: the ranges
 * trainer_fsdp_init_params writes, each committed first. */
mgt_status trainer_fsdp_upload_params(trainer *t, mgt_model *m, const float *host)
{
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	mgt_status st = MGT_OK;
	for (int b = 0; !st && b < tt->nbuckets; b++) {
		const mgt_bucket *k = &tt->buckets[b];
		size_t own = 0, part = k->numel, lo;
		if (mgt_model_bucket_unit(m, b) >= 0) shard_of(t, k, &own, &part);
		lo = k->offset + own;
		st = mgt_model_commit(m, MGT_BUF_PARAMS, lo, lo + part);
		if (!st && part) st = t->be->ops->upload(t->be, mgt_model_params(m) + lo, host + lo, part * sizeof(float));
	}
	return st;
}

/* After loading whole parameters (a checkpoint): the layer units back to their shards. */
void trainer_fsdp_shard_params(trainer *t)
{
	for (int c = 0; trainer_fsdp_params(t) && c < t->V; c++) {
		mgt_model *m = t->chunk[c];
		for (int b = 0; b < mgt_model_tensors(m)->nbuckets; b++)
			if (mgt_model_bucket_unit(m, b) >= 0) release_bucket(t, m, b), t->fsdp.gathered[c][b] = 0;
	}
}

bool trainer_fsdp_gathers_after_step(const trainer *t, const mgt_model *m, int b)
{
	return !trainer_fsdp_params(t) || mgt_model_bucket_unit(m, b) < 0;
}
