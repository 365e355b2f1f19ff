/* lib/model/shard.c: what a chunk does for fully sharded data parallelism (Megatron-FSDP,
 * megatron/core/distributed/fsdp/src/megatron_fsdp/): its units (one per decoder layer, the
 * tensors outside layers at each end), the parameter hook the passes call around each layer, the
 * 16-bit copy refreshed per unit, initialization of a range, and the sharded memory count.  The
 * collectives and which pages a rank keeps are the trainer's (lib/train/fsdp.c). */
#include "model_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

mgt_status mgt_model_shard_setup(mgt_model *m)
{
	if (m->L.bucket_size != MGT_BUCKETS_PER_LAYER) return MGT_OK;
	const mgt_tensor_table *tt = &m->tt;
	if (!(m->unit = mgt_malloc((size_t)(tt->nbuckets ? tt->nbuckets : 1) * sizeof *m->unit))) return MGT_ERR_NOMEM;
	for (int b = 0; b < tt->nbuckets; b++) {
		m->unit[b] = -1;
		for (int i = 0; i < tt->n; i++) {
			size_t a, e;
			if (tt->t[i].layer >= 0 && mgt_tensor_overlap(&tt->t[i], tt->buckets[b].offset,
								   tt->buckets[b].offset + tt->buckets[b].numel, &a, &e))
				m->unit[b] = (int)(tt->t[i].layer - m->first_layer);
		}
	}
	return MGT_OK;
}

int mgt_model_bucket_unit(const mgt_model *m, int b) { return m->unit ? m->unit[b] : -1; }

void mgt_model_set_param_hook(mgt_model *m, mgt_param_hook hook, void *ctx)
{
	m->run.phook = hook;
	m->run.phook_ctx = ctx;
}

mgt_status mgt_model_param_use(mgt_model *m, int li, mgt_param_use use)
{
	if (!m->run.phook || li < 0 || li >= m->n_layers) return MGT_OK;
	return m->run.phook(m->run.phook_ctx, m, li, use);
}

void mgt_model_lp_refresh_range(mgt_model *m, size_t lo, size_t hi)
{
	if (m->prec.lp && hi > lo)
		m->be->ops->cast(m->be, (uint16_t *)m->prec.lp + lo, m->prec.lp_t, m->params + lo, hi - lo);
	for (int i = 0; m->prec.nw1 && i < m->tt.n; i++) { /* 1 + w, in fp32 */
		const mgt_tensor *t = &m->tt.t[i];
		size_t a, b;
		if (!mgt_tensor_is_norm_weight(t) || !mgt_tensor_overlap(t, lo, hi, &a, &b)) continue;
		float *d = m->prec.nw1 + m->prec.nw_off[i] + (a - t->offset);
		m->be->ops->copy(m->be, d, m->params + a, (b - a) * sizeof(float));
		m->be->ops->add(m->be, d, m->prec.ones, MGT_DT_F32, b - a);
	}
}

void mgt_model_lp_refresh(mgt_model *m)
{
	if (!m->prec.lp_stale) return;
	/* under the parameter hook, the layers' units are refreshed as they are gathered */
	for (int b = 0; m->run.phook && b < m->tt.nbuckets; b++)
		if (mgt_model_bucket_unit(m, b) < 0)
			mgt_model_lp_refresh_range(m, m->tt.buckets[b].offset, m->tt.buckets[b].offset + m->tt.buckets[b].numel);
	if (!m->run.phook) mgt_model_lp_refresh_range(m, 0, m->tt.buf_numel);
	m->prec.lp_stale = false;
}

void *mgt_model_params_lp(mgt_model *m) { return m->prec.lp; }

mgt_status mgt_model_commit(mgt_model *m, mgt_model_buf which, size_t lo, size_t hi)
{
	bool lazy = which == MGT_BUF_GRADS ? m->lazy_grads : m->lazy_params;
	void *base = which == MGT_BUF_PARAMS ? (void *)m->params : which == MGT_BUF_GRADS ? (void *)m->grads : m->prec.lp;
	size_t es = which == MGT_BUF_LP ? 2 : sizeof(float);
	if (!lazy || !base || hi <= lo) return MGT_OK;
	return m->be->ops->commit(m->be, (char *)base + lo * es, (hi - lo) * es);
}

mgt_status mgt_model_commit_unit(mgt_model *m, mgt_model_buf which, int u)
{
	mgt_status st = MGT_OK;
	if (!m->unit || u == INT_MIN) return mgt_model_commit(m, which, 0, m->tt.buf_numel);
	for (int b = 0; !st && b < m->tt.nbuckets; b++)
		if (m->unit[b] == u)
			st = mgt_model_commit(m, which, m->tt.buckets[b].offset, m->tt.buckets[b].offset + m->tt.buckets[b].numel);
	return st;
}

mgt_status mgt_model_init_params_range(mgt_model *m, uint64_t seed, size_t lo, size_t hi)
{
	if (hi <= lo) return MGT_OK;
	m->prec.lp_stale = true;
	size_t bytes = (hi - lo) * sizeof(float);
	mgt_status cst = mgt_model_commit(m, MGT_BUF_PARAMS, lo, hi);
	if (cst) return cst;
	float *host = m->be->host_memory ? m->params + lo : mgt_malloc(bytes);
	if (!host) return MGT_ERR_NOMEM;
	memset(host, 0, bytes); /* padding between tensors stays zero */
	mgt_tensor_table_init_range(&m->tt, host, seed, lo, hi);
	if (m->be->host_memory) return MGT_OK;
	mgt_status st = m->be->ops->upload(m->be, m->params + lo, host, bytes);
	free(host);
	return st;
}

/* A bucket's data-parallel size: the expert one for expert rows. */
static size_t bucket_dp(const mgt_model *m, const mgt_bucket *k)
{
	int dp = k->expert && m->L.edp > 0 ? m->L.edp : m->L.dp;
	return (size_t)(dp > 0 ? dp : 1);
}

/* The k largest layer units (the working set gathered or written at once): *whole their
 * elements, *beyond those outside this rank's shards (the shards are counted once, apart). */
static void largest_units(const mgt_model *m, int k, size_t *whole, size_t *beyond)
{
	size_t *u = mgt_malloc((size_t)(m->n_layers + 1) * 2 * sizeof *u);
	*whole = *beyond = 0;
	if (!u) return;
	size_t *x = u + m->n_layers + 1;
	memset(u, 0, (size_t)(m->n_layers + 1) * 2 * sizeof *u);
	for (int b = 0; b < m->tt.nbuckets; b++) {
		const mgt_bucket *bk = &m->tt.buckets[b];
		if (m->unit[b] < 0) continue;
		u[m->unit[b]] += bk->numel;
		x[m->unit[b]] += bk->numel - bk->numel / bucket_dp(m, bk);
	}
	for (int j = 0; j < k && j < m->n_layers; j++) {
		int best = 0;
		for (int l = 1; l < m->n_layers; l++) if (u[l] > u[best]) best = l;
		*whole += u[best], *beyond += x[best], u[best] = 0;
	}
	free(u);
}

/* Megatron-FSDP's memory (megatron_fsdp.md, the buffer table of param_and_grad_buffer.py): a
 * rank keeps 1/DP of each sharded bucket (1/EDP of an expert bucket), in elements `shards`;
 * `outside` the elements of the units outside layers beyond their shards, `beyond(k)` those of
 * the k largest layer units beyond their shards.
 *  - Gradients from optim_grads on (fp32, 4 bytes an element): shards + outside + beyond(2).
 *    The units outside layers are written whole during the whole backward: stack.c commits them
 *    at its start, the output layer (the tied word embedding's gradient with it) writes them
 *    first, and the bucket holding an embedding is reduced after the embedding's backward only
 *    (grads.c trainer_plan_overlap: ready at INT_MIN).  Two layer units are written at once: the
 *    layer whose backward runs and the one whose reduce-scatter runs beside it (fsdp.c
 *    drop_pending).  T5: every unit (t5.c: complete at the end of the backward).
 *  - Parameters with optim_grads_params: fp32 shards + outside (kept whole) + beyond(g + 1),
 *    the gathered units: the one in use and the one prefetched, or a fully recomputed group of g
 *    and one more; the 16-bit copy (2 bytes, when there is one) of the units outside layers and
 *    of the gathered units whole (it has no layer shards: it is cast from the gathered fp32
 *    unit).
 * Untied models are counted the same.  On a GPU that is at most one layer unit above the peak:
 * both their output layer's and embedding's units are committed at the backward's start, the
 * output layer's given back after the last layer's backward.  On the CPU, where a page is
 * resident once written, the untied embedding's unit holds its shard and the rows the tokens
 * touched only, so the count is above the peak RSS by up to that unit less its shard (gpt2-124m
 * untied, optim_grads, seq 256: measured / computed 0.968 at DP 2, 0.929 at DP 4). */
void mgt_model_shard_memory(const mgt_model *m, size_t *params, size_t *grads)
{
	const mgt_tensor_table *tt = &m->tt;
	size_t shards = 0, outside = 0, lpw = mgt_model_lp_bytes(m) ? 2 : 0, whole, beyond;
	if (m->L.dp <= 1) return; /* one rank: nothing is sharded (lib/train/fsdp.c), every page is written */
	for (int b = 0; b < tt->nbuckets; b++) {
		size_t part = tt->buckets[b].numel / bucket_dp(m, &tt->buckets[b]);
		shards += part;
		if (m->unit[b] < 0) outside += tt->buckets[b].numel - part;
	}
	/* T5's gradients are complete at the end of the backward only (t5.c): every unit written at once */
	int written = m->t5 ? m->n_layers : 2;
	largest_units(m, written, &whole, &beyond);
	if (m->L.sharding >= MGT_DP_OPTIM_GRADS) *grads = (shards + outside + beyond) * sizeof(float);
	if (m->L.sharding < MGT_DP_OPTIM_GRADS_PARAMS) return;
	int g = m->L.recompute.granularity == MGT_RECOMPUTE_FULL ? m->L.recompute.num_layers : 1;
	largest_units(m, (g < m->n_layers ? g : m->n_layers) + 1, &whole, &beyond);
	size_t lp_whole = mgt_model_shard_outside_numel(m);
	*params = (shards + outside + beyond) * sizeof(float) + (lp_whole + whole) * lpw;
}

size_t mgt_model_shard_outside_numel(const mgt_model *m)
{
	size_t n = 0;
	for (int b = 0; m->unit && b < m->tt.nbuckets; b++) n += m->unit[b] < 0 ? m->tt.buckets[b].numel : 0;
	return n;
}
