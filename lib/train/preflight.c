/* lib/train/preflight.c: the checks before training: the default split, the writable directories,
 * the memory a layout needs against what the backend has, and the recomputation line. */
#include "train_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The advice for the part of the memory that is largest. */
static const char *memory_advice(const trainer *t, const mgt_model_mem *m, size_t opt)
{
	size_t act = m->activations + m->workspace, par = m->params + m->grads;
	if (act >= opt && act >= par)
		return "lower --micro-batch-size or --seq-length, or raise --tensor-model-parallel-size (with "
		       "--sequence-parallel), --context-parallel-size or --pipeline-model-parallel-size";
	if (opt >= par && !t->a->use_distributed_optimizer && trainer_dpcp(t) > 1)
		return "add --use-distributed-optimizer, or raise --tensor-model-parallel-size or "
		       "--pipeline-model-parallel-size";
	return "raise --tensor-model-parallel-size or --pipeline-model-parallel-size";
}

/* Before anything large is allocated: what the chunks will take (mgt_model_measure, the
 * allocator's own sizes) plus the Adam moments, against what the backend can still allocate,
 * shared by the job's processes on this machine.  Error: MGT_ERR_NOMEM with the breakdown. */
mgt_status trainer_check_memory(trainer *t)
{
	mgt_model_mem m = { 0 };
	size_t opt = 0;
	for (int c = 0; c < t->V; c++) {
		mgt_model_layout L = trainer_chunk_layout(t, c);
		mgt_model_mem x;
		size_t numel;
		mgt_status st = mgt_model_measure(&t->a->model, &L, &t->ps, &x, &numel);
		if (st) return st;
		m.params += x.params; m.grads += x.grads; m.activations += x.activations; m.workspace += x.workspace;
		opt += mgt_adamw_bytes(t->a->use_distributed_optimizer ? numel / (size_t)t->ps.idp_comm->size : numel);
	}
	char what[96];
	size_t avail = mgt_backend_mem_available(t->be, what, sizeof what), share = 1;
	if (t->be->host_memory) share = (size_t)mgt_parallel_local_size();
	else if (mgt_backend_cuda_devices() > 0) share = ((size_t)mgt_parallel_local_size() + (size_t)mgt_backend_cuda_devices() - 1) / (size_t)mgt_backend_cuda_devices();
	double need = (double)m.params + (double)m.grads + (double)opt + (double)m.activations + (double)m.workspace;
	if (avail == SIZE_MAX || need * (double)share <= (double)avail) return MGT_OK;
	double g = 1024.0 * 1024.0 * 1024.0;
	return mgt_err(MGT_ERR_NOMEM, "rank %d needs %.2f GiB (parameters %.2f, gradients %.2f, optimizer %.2f, "
		       "activations %.2f, workspace %.2f) but %s has %.2f GiB free%s; %s", t->ps.world_rank, need / g,
		       (double)m.params / g, (double)m.grads / g, (double)opt / g, (double)m.activations / g,
		       (double)m.workspace / g, what, (double)avail / g,
		       share > 1 ? " for all the job's processes on this machine" : "", memory_advice(t, &m, opt));
}

/* Megatron's validate_args: --data-path without --split takes the legacy "969, 30, 1", saying so. */
mgt_status trainer_default_split(trainer *t)
{
	mgt_args *a = t->a;
	if (!a->data_path || a->mock_data || (a->split && *a->split)) return MGT_OK;
	free(a->split);
	if (!(a->split = mgt_strdup("969, 30, 1"))) return MGT_ERR_NOMEM;
	if (t->io->log)
		fprintf(t->io->log, "WARNING: Please specify --split when using --data-path. Using legacy default value of \"969, 30, 1\"\n");
	return MGT_OK;
}

/* Before anything is computed (rank 0): --save holds no other run's checkpoints, and every
 * directory the run writes into (--save, --tensorboard-dir, --data-cache-path, --metrics-file's)
 * can be made and written: found now, not after the training time is spent.  Rank 0 probes (it
 * makes and removes the directories it needs, which other ranks probing at once would race
 * with); its error ends the job. */
mgt_status trainer_preflight(const mgt_args *a)
{
	mgt_status st = trainer_save_guard(a);
	if (!st && a->save) st = mgt_dir_writable(a->save, "--save");
	if (!st && a->tensorboard_dir) st = mgt_dir_writable(a->tensorboard_dir, "--tensorboard-dir");
	if (!st && a->data_cache_path && !a->mock_data) st = mgt_dir_writable(a->data_cache_path, "--data-cache-path");
	if (!st && a->metrics_file) { /* its directory is not made: it must exist */
		char *dir = mgt_strdup(a->metrics_file), *sl = dir ? strrchr(dir, '/') : NULL;
		struct stat sb;
		if (!dir) return MGT_ERR_NOMEM;
		if (sl) sl[sl == dir] = 0;
		if (stat(sl ? dir : ".", &sb) || !S_ISDIR(sb.st_mode))
			st = mgt_err(MGT_ERR_IO, "--metrics-file %s: directory %s does not exist", a->metrics_file, dir);
		else
			st = mgt_dir_writable(sl ? dir : ".", "--metrics-file's directory");
		free(dir);
	}
	return st;
}

/* With activation recomputation, one line on what it saves on this rank (the activation bytes
 * the chunks allocated, and what mgt_model_measure computes for the same layout without it). */
mgt_status trainer_log_recompute(trainer *t)
{
	const mgt_recompute *r = &t->a->recompute;
	if (!t->io->log || r->granularity == MGT_RECOMPUTE_NONE) return MGT_OK;
	size_t with = 0, without = 0;
	for (int c = 0; c < t->V; c++) {
		mgt_model_layout L = trainer_chunk_layout(t, c);
		L.recompute = (mgt_recompute){ 0 };
		mgt_model_mem x;
		size_t numel;
		mgt_status st = mgt_model_measure(&t->a->model, &L, &t->ps, &x, &numel);
		if (st) return st;
		without += x.activations;
		with += mgt_model_memory(t->chunk[c]).activations;
	}
	char what[96];
	if (r->granularity == MGT_RECOMPUTE_SELECTIVE) snprintf(what, sizeof what, "selective (core attention)");
	else if (r->method == MGT_RECOMPUTE_UNIFORM) snprintf(what, sizeof what, "full, uniform, groups of %d layer%s", r->num_layers,
					r->num_layers > 1 ? "s" : "");
	else snprintf(what, sizeof what, "full, block, the first %d layer%s of each stage", r->num_layers,
		      r->num_layers > 1 ? "s" : "");
	fprintf(t->io->log, "activation recomputation %s: activations %zu bytes (%zu without recomputation, %zu saved)\n",
		what, with, without, without - with);
	return MGT_OK;
}
