/* lib/parallel/sched.c: pipeline schedules as action lists (megatron/core/pipeline_parallel/
 * schedules.py: forward_backward_pipelining_without_interleaving and _with_interleaving). */
#include "parallel.h"

#include <stdlib.h>
#include <string.h>

/* (micro-batch, chunk) of forward virtual step k of the interleaved schedule: micro-batches in
 * groups of G, each group running through all V chunks in turn. */
static void table_entry(int k, int M, int V, int G, int *mb, int *chunk)
{
	int per_group = G * V, g = k / per_group, in = k % per_group;
	int gsize = (g + 1) * G <= M ? G : M - g * G; /* the last group may be short */
	*chunk = in / gsize;
	*mb = g * G + in % gsize;
}

static void push(mgt_parallel_sched_action *a, int *n, bool fwd, int mb, int chunk)
{
	a[*n] = (mgt_parallel_sched_action){ .fwd = fwd, .mb = mb, .chunk = chunk };
	(*n)++;
}

static void entry(int k, bool fwd, int M, int V, int G, mgt_parallel_sched_action *a, int *n)
{
	int mb, c;
	if (V == 1) {
		push(a, n, fwd, k, 0);
		return;
	}
	table_entry(k, M, V, G, &mb, &c);
	push(a, n, fwd, mb, fwd ? c : V - 1 - c);
}

mgt_status mgt_parallel_sched_build(int P, int r, int M, int V, int G, bool forward_only, mgt_parallel_sched_action **out, int *n_out)
{
	int total = M * V, n = 0;
	mgt_parallel_sched_action *a = mgt_malloc((size_t)(2 * total) * sizeof *a);
	if (!a) return MGT_ERR_NOMEM;
	int W = V == 1 ? (P - r - 1 < M ? P - r - 1 : M) : (P - r - 1) * 2 + (V - 1) * G;
	if (forward_only || W > total) W = total;
	int R = total - W;
	for (int k = 0; k < W; k++) entry(k, true, M, V, G, a, &n);
	for (int k = 0; k < R && !forward_only; k++) {
		entry(W + k, true, M, V, G, a, &n);
		entry(k, false, M, V, G, a, &n);
	}
	for (int k = R; k < total && !forward_only; k++) entry(k, false, M, V, G, a, &n);
	*out = a;
	*n_out = n;
	return MGT_OK;
}

int mgt_parallel_sched_chunk_slots(const mgt_parallel_sched_action *a, int n, int chunk)
{
	int live = 0, most = 1;
	for (int i = 0; i < n; i++) {
		if (a[i].chunk != chunk) continue;
		live += a[i].fwd ? 1 : -1;
		if (live > most) most = live;
	}
	return most;
}

mgt_status mgt_parallel_sched_check(int P, int M, int V, int G)
{
	if (V == 1) return MGT_OK;
	if (P < 2) return mgt_err(MGT_ERR_USAGE, "virtual pipeline stages need --pipeline-model-parallel-size > 1");
	if (G < P || G > M)
		return mgt_err(MGT_ERR_USAGE, "interleaved schedule: --microbatch-group-size-per-virtual-pipeline-stage "
			       "%d must lie between the pipeline size %d and the number of micro-batches %d "
			       "(global batch / (micro batch x data-parallel size))", G, P, M);
	if (M % G && M % G < P)
		return mgt_err(MGT_ERR_USAGE, "interleaved schedule: %d micro-batches leave a last group of %d, fewer "
			       "than the pipeline size %d (Megatron requires M %% G == 0 or M %% G >= PP)", M, M % G, P);
	return MGT_OK;
}

mgt_status mgt_parallel_sched_slots(int P, int r, int M, int V, int G, int *slots)
{
	mgt_status st = mgt_parallel_sched_check(P, M, V, G);
	mgt_parallel_sched_action *a = NULL;
	int n = 0;
	if (!st) st = mgt_parallel_sched_build(P, r, M, V, G, false, &a, &n);
	for (int c = 0; !st && c < V; c++) slots[c] = mgt_parallel_sched_chunk_slots(a, n, c);
	free(a);
	return st;
}
