/* lib/train/grads.c: gradients and the optimizer step: the data-parallel buckets (overlapped with
 * the backward or not, bf16 or fp32), the global gradient and parameter norms, the fp16 loss scale
 * unscaling and the AdamW step (megatron/core/distributed/, megatron/core/optimizer/). */
#include "train_impl.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum { DP_ALLREDUCE_GRADS, DP_REDUCE_SCATTER_GRADS, DP_ALLGATHER_PARAMS } dp_op;

/* --grad-reduce-in-bf16: the chunk's gradients rounded to bf16 (through its bf16 copy), as a
 * bf16 main_grad accumulates them: after each micro-batch's backward that no reduction follows
 * (the reduction rounds them itself). */
void trainer_round_grads(trainer *t, int c)
{
	mgt_model *m = t->chunk[c];
	size_t n = mgt_model_tensors(m)->buf_numel;
	t->be->ops->cast(t->be, t->ddp.g16[c], MGT_DT_BF16, mgt_model_grads(m), n);
	t->be->ops->widen(t->be, mgt_model_grads(m), t->ddp.g16[c], MGT_DT_BF16, n);
}

/* The 16-bit part of a gradient bucket's reduction: back into the fp32 buffer (the whole bucket
 * after an all-reduce, this rank's shard after a reduce-scatter), once the reduction is done. */
static void widen_bucket(trainer *t, int c, int b)
{
	mgt_model *m = t->chunk[c];
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	mgt_comm *dp = trainer_bucket_comm(t, &tt->buckets[b]);
	size_t n = tt->buckets[b].numel, lo = tt->buckets[b].offset;
	if (t->a->use_distributed_optimizer) lo += (size_t)dp->rank * (n / (size_t)dp->size), n /= (size_t)dp->size;
	t->be->ops->widen(t->be, mgt_model_grads(m) + lo, (const uint16_t *)t->ddp.g16[c] + lo, t->a->grad_comm_t, n);
}

/* With distributed-optimizer instances, after the reduce-scatter inside the instance (group dp):
 * the owned shard, n elements of gt, all-reduced (summed) over the instances, as Megatron's
 * start_grad_sync does (megatron/core/distributed/param_and_grad_buffer.py: reduce-scatter over
 * the intra-instance group, then all_reduce over inter_distributed_optimizer_instance_group; the
 * 1/DP scaling was applied to the whole bucket before); under FSDP's sharded gradients once,
 * in the last micro-batch's backward (Megatron-FSDP's HSDP).  The inter group's stream waits
 * for the reduce-scatter through the backend's stream (mgt_comm_wait on dp first). */
static mgt_status across_instances(trainer *t, mgt_model *m, mgt_comm *dp, void *shard, size_t n, mgt_elem_type gt)
{
	mgt_comm *o = t->ps.odp_comm;
	if (!o || !trainer_fsdp_last_backward(t, trainer_chunk_of(t, m))) return MGT_OK;
	mgt_status st = mgt_comm_wait(dp);
	return st ? st : o->ops->allreduce(o, shard, n, gt, MGT_RED_SUM);
}

/* One data-parallel collective over every bucket of a chunk's flat buffer (in place: this
 * rank's shard of a bucket of Nb elements is [offset + rank*Nb/DP, offset + (rank+1)*Nb/DP)):
 * the averaged gradient all-reduce, the distributed optimizer's gradient reduce-scatter (each
 * rank keeps its shard, averaged) or its parameter all-gather after the step.  With
 * --grad-reduce-in-bf16 the gradients are reduced in the chunk's bf16 copy (widen_bucket brings
 * them back after wait_dp). */
static mgt_status dp_bucket(trainer *t, mgt_model *m, int b, dp_op op)
{
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	mgt_comm *dp = trainer_bucket_comm(t, &tt->buckets[b]);
	float *x = (op == DP_ALLGATHER_PARAMS ? mgt_model_params(m) : mgt_model_grads(m)) + tt->buckets[b].offset;
	size_t n = tt->buckets[b].numel, part = n / (size_t)dp->size, own = (size_t)dp->rank * part;
	if (op == DP_ALLGATHER_PARAMS) return dp->ops->allgather(dp, x, x + own, part, MGT_DT_F32);
	/* averaged over data parallelism: expert gradients are summed over the expert-data-parallel
	 * group and scaled by 1 / DP (Megatron: edp/dp, then the EDP average) */
	if (!t->a->calculate_per_token_loss) t->be->ops->scale(t->be, x, n, 1.0f / (float)t->ps.dp);
	void *g = x;
	mgt_elem_type gt = MGT_DT_F32;
	if (t->ddp.g16) {
		g = (uint16_t *)t->ddp.g16[trainer_chunk_of(t, m)] + tt->buckets[b].offset, gt = t->a->grad_comm_t;
		t->be->ops->cast(t->be, g, gt, x, n);
	}
	if (op == DP_ALLREDUCE_GRADS) return dp->ops->allreduce(dp, g, n, gt, MGT_RED_SUM);
	void *shard = (char *)g + own * mgt_elem_size(gt);
	mgt_status st = dp->ops->reduce_scatter(dp, shard, g, part, gt);
	return st ? st : across_instances(t, m, dp, shard, part, gt);
}

/* Buckets [from, nbuckets) of a chunk's flat buffer. */
static mgt_status dp_buckets(trainer *t, mgt_model *m, dp_op op, int from)
{
	mgt_status st = MGT_OK;
	for (int b = from; !st && b < mgt_model_tensors(m)->nbuckets; b++) st = dp_bucket(t, m, b, op);
	return st;
}

/* Wait for the gradient groups' queued operations (NCCL on its own stream). */
mgt_status trainer_wait_dp(trainer *t)
{
	mgt_comm *g[] = { t->ps.dp_comm, t->ps.dpcp_comm, t->ps.edp_comm, t->ps.idp_comm, t->ps.iedp_comm, t->ps.odp_comm };
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < 6; i++) {
		int j = 0;
		while (j < i && g[j] != g[i]) j++; /* each communicator once */
		if (j == i && g[i]) st = mgt_comm_wait(g[i]);
	}
	return st;
}

static dp_op grad_op(const trainer *t)
{
	return t->a->use_distributed_optimizer ? DP_REDUCE_SCATTER_GRADS : DP_ALLREDUCE_GRADS;
}

/* The layer from which each bucket's gradients are complete during the backward (see
 * mgt_grad_hook): the lowest decoder layer among its tensors; INT_MAX for the output layer and
 * final norm, INT_MIN when it holds an embedding. */
mgt_status trainer_plan_overlap(trainer *t)
{
	if ((!t->a->overlap_grad_reduce && !trainer_fsdp_grads(t)) || trainer_dpcp(t) == 1) return MGT_OK;
	t->ddp.last_bwd = mgt_malloc((size_t)t->V * sizeof *t->ddp.last_bwd);
	t->ddp.buckets_done = mgt_malloc((size_t)t->V * sizeof *t->ddp.buckets_done);
	t->ddp.bucket_ready = mgt_malloc((size_t)t->V * sizeof *t->ddp.bucket_ready);
	if (!t->ddp.last_bwd || !t->ddp.buckets_done || !t->ddp.bucket_ready) return MGT_ERR_NOMEM;
	memset(t->ddp.bucket_ready, 0, (size_t)t->V * sizeof *t->ddp.bucket_ready);
	for (int i = 0; i < t->n_acts; i++) if (!t->acts[i].fwd) t->ddp.last_bwd[t->acts[i].chunk] = i;
	for (int c = 0; c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		int *ready = t->ddp.bucket_ready[c] = mgt_malloc((size_t)tt->nbuckets * sizeof *ready);
		if (!ready) return MGT_ERR_NOMEM;
		t->ddp.buckets_done[c] = 0;
		for (int b = 0; b < tt->nbuckets; b++) {
			ready[b] = INT_MAX;
			for (int i = 0; i < tt->n; i++) {
				const mgt_tensor *x = &tt->t[i];
				size_t lo = tt->buckets[b].offset, hi = lo + tt->buckets[b].numel;
				if (x->offset >= hi || x->offset + x->numel <= lo) continue;
				int r = x->layer >= 0 ? x->layer : x->role == MGT_T_WORD_EMB || x->role == MGT_T_POS_EMB ? INT_MIN : INT_MAX;
				if (r < ready[b]) ready[b] = r;
			}
		}
	}
	return MGT_OK;
}

/* mgt_grad_hook: reduce the chunk's buckets, in buffer order, as far as they are complete. */
mgt_status trainer_grad_ready(void *ctx, mgt_model *m, int done_from_layer)
{
	trainer *t = ctx;
	int c = trainer_chunk_of(t, m);
	int nb = mgt_model_tensors(m)->nbuckets, *done = &t->ddp.buckets_done[c];
	mgt_status st = MGT_OK;
	while (!st && *done < nb && done_from_layer <= t->ddp.bucket_ready[c][*done]) st = dp_bucket(t, m, (*done)++, grad_op(t));
	return st;
}

typedef struct { int tp_rank; bool first; int experts; } count_ctx; /* experts: -1 none, 1 only, 0 all */

/* Count each gradient element once in the norm: TP-replicated tensors on TP rank 0 only, the
 * tied word embedding on the first stage only (megatron/core/optimizer/clip_grads.py). */
static bool counts(const mgt_tensor *x, const void *ctx)
{
	const count_ctx *c = ctx;
	if (x->shard == MGT_SHARD_NONE && c->tp_rank != 0) return false;
	if (c->experts && (x->num_experts > 0) != (c->experts > 0)) return false;
	if (x->frozen) return false;
	return !(x->role == MGT_T_WORD_EMB && !c->first);
}

/* The global L2 norm of the gradients (params false) or of the parameters (true), each element
 * counted once: this rank's optimizer ranges, summed over the job (Megatron's
 * get_grad_norm_fp32 and calc_params_l2_norm). */
mgt_status trainer_global_norm(trainer *t, bool params, double *norm)
{
	/* shards of the distributed optimizer partition everything over the world (experts over
	 * EP x EDP), or with instances over the instance (whose gradients the others replicate:
	 * Megatron's grad_stats_parallel_group is the intra_dist_opt_group); otherwise the
	 * data-parallel replicas agree, except that expert rows differ between expert-parallel
	 * ranks: those sums also go over the EP group */
	bool distopt = t->a->use_distributed_optimizer, ep = t->ps.ep > 1 && !distopt;
	double ss[2] = { 0, 0 };
	for (int i = 0; i < t->nshard; i++) {
		opt_shard *s = &t->shard[i];
		mgt_model *m = t->chunk[s->chunk];
		for (int k = 0; k < (ep ? 2 : 1); k++) {
			count_ctx cc = { t->ps.tp_rank, mgt_model_is_first_stage(m), ep ? (k ? 1 : -1) : 0 };
			ss[k] += mgt_grad_sumsq(t->be, mgt_model_tensors(m), params ? mgt_model_params(m) : mgt_model_grads(m),
						s->lo, s->hi, counts, &cc);
		}
	}
	mgt_comm *g = distopt ? t->ps.inst_comm : t->ps.mp_comm, *e = trainer_host_comm(t->ps.ep_comm, t->ps.host_ep);
	mgt_status st = ep ? e->ops->allreduce(e, &ss[1], 1, MGT_DT_F64, MGT_RED_SUM) : MGT_OK;
	ss[0] += ss[1];
	if (!st && g->size > 1) st = g->ops->allreduce(g, ss, 1, MGT_DT_F64, MGT_RED_SUM);
	*norm = sqrt(ss[0]);
	return st;
}

/* fp16: divide this rank's gradient shards by the loss scale (a power of two: exact unless a
 * value under- or overflows), as Megatron's _unscale_main_grads_and_check_for_nan. */
void trainer_unscale_grads(trainer *t, double tokens)
{
	/* --calculate-per-token-loss: Megatron's finalize_model_grads scales by 1 / num_tokens (the
	 * global batch's, summed over data parallelism) */
	double f = 1.0 / t->scaler.scale;
	if (t->a->calculate_per_token_loss) f /= tokens > 0 ? tokens : 1;
	if (f == 1.0) return;
	for (int i = 0; i < t->nshard; i++) {
		opt_shard *s = &t->shard[i];
		float *g = mgt_model_grads(t->chunk[s->chunk]);
		t->be->ops->scale(t->be, g + s->lo, s->hi - s->lo, (float)f);
	}
}

/* Megatron's finalize_model_grads: the data-parallel reduction of every bucket (already issued
 * during the backward with --overlap-grad-reduce: buckets_done), waited for, then the
 * sequence-parallel and tied-embedding all-reduces (mgt_model_finish_grads).  Sums commute, so
 * the order matters for rounding only; with the distributed optimizer the later all-reduces
 * also sum stale non-owned parts of the buffer, which nothing reads. */
mgt_status trainer_reduce_grads(trainer *t)
{
	mgt_status st = MGT_OK;
	/* FSDP's sharded gradients were reduced by every backward (fsdp.c) */
	for (int c = 0; !st && trainer_dpcp(t) > 1 && !trainer_fsdp_grads(t) && c < t->V; c++) {
		st = dp_buckets(t, t->chunk[c], grad_op(t), t->ddp.buckets_done ? t->ddp.buckets_done[c] : 0);
		if (t->ddp.buckets_done) t->ddp.buckets_done[c] = 0;
	}
	if (!st) st = trainer_wait_dp(t);
	/* (FSDP's shards were widened as each reduce-scatter finished: fsdp.c) */
	for (int c = 0; !st && t->ddp.g16 && trainer_dpcp(t) > 1 && !trainer_fsdp_grads(t) && c < t->V; c++)
		for (int b = 0; b < mgt_model_tensors(t->chunk[c])->nbuckets; b++) widen_bucket(t, c, b);
	for (int c = 0; !st && c < t->V; c++) st = mgt_model_finish_grads(t->chunk[c]);
	if (!st) trainer_fsdp_after_finish(t);
	return st;
}

/* --grad-reduce-in-bf16 (Megatron's bf16 main_grad buffer, megatron/core/distributed/
 * distributed_data_parallel.py with grad_reduce_in_fp32 off): a bf16 copy of each chunk's
 * gradient buffer.  The gradients still accumulate in the fp32 buffer, rounded to bf16 after each
 * micro-batch (round_grads), and the data-parallel reduction moves the bf16 copy.  A 16-bit
 * --megatron-fsdp-grad-comm-dtype (Megatron-FSDP's grad_comm_dtype) only has the reduction move
 * the copy, in its type (none with one data-parallel rank). */
mgt_status trainer_alloc_grad16(trainer *t)
{
	bool comm16 = t->a->grad_comm_t != MGT_DT_F32 && trainer_dpcp(t) > 1; /* also --megatron-fsdp-grad-comm-dtype */
	if (!(t->a->grad_reduce_in_bf16 || comm16) || t->eval_only) return MGT_OK;
	if (!(t->ddp.g16 = mgt_malloc((size_t)t->V * sizeof *t->ddp.g16))) return MGT_ERR_NOMEM;
	memset(t->ddp.g16, 0, (size_t)t->V * sizeof *t->ddp.g16);
	for (int c = 0; c < t->V; c++) {
		size_t n = mgt_model_tensors(t->chunk[c])->buf_numel;
		if (!(t->ddp.g16[c] = t->be->ops->alloc(t->be, (n ? n : 1) * 2))) return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}

/* The learning rate of the word embedding and output layer now: --decoupled-lr's schedule (the
 * same warmup and decay, its own peak and, with --decoupled-min-lr, final rate), else lr. */
static double decoupled_lr(const trainer *t, double lr)
{
	if (!(t->a->decoupled_lr > 0)) return lr;
	mgt_lr_sched s = t->sched;
	s.max_lr = t->a->decoupled_lr;
	if (t->a->decoupled_min_lr > 0) s.min_lr = t->a->decoupled_min_lr;
	return mgt_lr_get(&s);
}

bool trainer_optimizer_step(trainer *t, double lr, double gnorm)
{
	bool ok = true;
	const double lr_emb = decoupled_lr(t, lr);
	for (int i = 0; ok && i < t->nshard; i++) {
		opt_shard *s = &t->shard[i];
		mgt_model *m = t->chunk[s->chunk];
		ok = mgt_adamw_step(&s->opt, mgt_model_tensors(m), mgt_model_params(m), mgt_model_grads(m), s->lo, s->hi,
				    lr, lr_emb, gnorm);
	}
	return ok;
}

/* The distributed optimizer's parameter all-gather after a step (init: the fp8 weights' first
 * cast only, before the first forward): --fp8-param-gather's packed fp8 weights, else the fp32
 * buffer. */
mgt_status trainer_gather_params(trainer *t, mgt_model *m, bool init)
{
	bool done = false;
	mgt_status st = t->a->fp8.param_gather ? mgt_model_fp8_gather_params(m, &done) : MGT_OK;
	if (st || done || init || !t->a->use_distributed_optimizer || trainer_dpcp(t) == 1) return st;
	for (int b = 0; !st && b < mgt_model_tensors(m)->nbuckets; b++)
		if (trainer_fsdp_gathers_after_step(t, m, b)) st = dp_bucket(t, m, b, DP_ALLGATHER_PARAMS);
	return st;
}
