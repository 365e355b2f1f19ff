/* lib/train/train.c: the training loop (megatron/training/training.py: pretrain, train,
 * train_step): one iteration, its counters and --comm-log, validation and saves at their
 * intervals. */
#include "train_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool at(int64_t it, int64_t interval) { return interval > 0 && it % interval == 0; }

static void count_iteration(trainer *t, double loss, double lr, double gnorm, bool skipped)
{
	t->iteration++;
	t->consumed_train += t->a->global_batch_size;
	t->flops_so_far += mgt_model_flops(&t->a->model, t->a->global_batch_size);
	if (skipped) {
		t->skipped_iters++;
		if (!isfinite(loss)) t->nan_iters++;
	}
	if (t->dump.on) {
		int64_t i = t->dump.iters - 1;
		t->dump.lm_loss[i] = loss; t->dump.lr[i] = lr; t->dump.grad_norm[i] = gnorm; t->dump.sop_loss[i] = t->sop_loss;
		t->dump.moe_lb[i] = t->moe.lb; t->dump.moe_zl[i] = t->moe.zl;
	}
}

/* The communicators in --comm-log order, with their JSON names. */
#define COMM_GROUPS 14
static int comm_list(trainer *t, mgt_comm **c, const char **names)
{
	mgt_comm *all[] = { t->ps.tp_comm, t->ps.dp_comm, t->ps.pp_comm, t->ps.emb_comm, t->ps.mp_comm, t->ps.world,
			    t->ps.ep_comm, t->ps.edp_comm, t->ps.cp_comm, t->ps.dpcp_comm,
			    t->ps.idp_comm, t->ps.iedp_comm, t->ps.odp_comm, t->ps.inst_comm };
	const char *nm[] = { "tensor", "data", "pipeline", "embedding", "model", "world", "expert", "expert-data",
			     "context", "data-context", "data-intra", "expert-data-intra", "data-inter", "instance" };
	int n = 0;
	for (int i = 0; i < COMM_GROUPS; i++) {
		/* the expert groups with expert parallelism only (with ep 1 expert-data is the data group),
		 * the context groups with context parallelism only (with cp 1 data-context is the data group),
		 * the instance groups with more than one distributed-optimizer instance */
		if ((i == 6 || i == 7 || i == 11) && t->ps.ep <= 1) continue;
		if ((i == 8 || i == 9) && t->ps.cp <= 1) continue;
		if (i >= 10 && t->ps.inst <= 1) continue;
		c[n] = all[i];
		names[n++] = nm[i];
	}
	return n;
}

/* --comm-log: bytes each group sent during one training iteration (parallel.h's ring convention). */
static void log_comm(trainer *t, const double *before, const uint64_t *calls_before)
{
	mgt_comm *c[COMM_GROUPS];
	const char *nm[COMM_GROUPS];
	int n = comm_list(t, c, nm);
	if (!t->out.comm_log) return;
	fprintf(t->out.comm_log, "{\"iteration\": %lld, \"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
		"\"cp_rank\": %d, \"bytes\": {", (long long)t->iteration, t->ps.world_rank, t->ps.tp_rank, t->ps.pp_rank,
		t->ps.dp_rank, t->ps.cp_rank);
	for (int i = 0; i < n; i++) fprintf(t->out.comm_log, "%s\"%s\": %.17g", i ? ", " : "", nm[i], c[i]->bytes_sent - before[i]);
	fprintf(t->out.comm_log, "}, \"calls\": {");
	for (int i = 0; i < n; i++)
		fprintf(t->out.comm_log, "%s\"%s\": %llu", i ? ", " : "", nm[i], (unsigned long long)(c[i]->calls - calls_before[i]));
	fprintf(t->out.comm_log, "}");
	if (t->ps.ep > 1) { /* the routed rows behind the expert group's bytes (mgt_model_moe_dispatch_counts) */
		double d[3] = { 0, 0, 0 };
		for (int k = 0; k < t->V; k++) {
			double x[3];
			mgt_model_moe_dispatch_counts(t->chunk[k], x);
			for (int i = 0; i < 3; i++) d[i] += x[i];
		}
		fprintf(t->out.comm_log, ", \"moe_rows\": {\"sent\": %.17g, \"received\": %.17g, \"dispatches\": %.17g}",
			d[0] - t->moe.disp[0], d[1] - t->moe.disp[1], d[2] - t->moe.disp[2]);
		memcpy(t->moe.disp, d, sizeof d);
	}
	fprintf(t->out.comm_log, "}\n");
	fflush(t->out.comm_log);
}

static void comm_snapshot(trainer *t, double *bytes, uint64_t *calls)
{
	mgt_comm *c[COMM_GROUPS];
	const char *nm[COMM_GROUPS];
	int n = comm_list(t, c, nm);
	for (int i = 0; i < n; i++) {
		bytes[i] = c[i]->bytes_sent;
		calls[i] = c[i]->calls;
	}
}

static mgt_status train_step(trainer *t, double *loss, double *lr, double *gnorm, bool *skipped, bool *intr)
{
	trainer_fsdp_zero_grads(t);
	for (int c = 0; c < t->V; c++) /* Megatron's MoEAuxLossAutoScaler scale: loss scale / micro-batches */
		mgt_model_set_aux_scale(t->chunk[c], (float)(t->scaler.scale / (double)t->a->num_microbatches));
	trainer_pass ps = { .split = MGT_SPLIT_TRAIN, .base = t->consumed_train, .train = true };
	mgt_status st = trainer_run_pass(t, t->acts, t->n_acts, &ps, intr);
	*loss = ps.num / (ps.den > 0 ? ps.den : 1);
	t->sop_loss = ps.sop / (ps.den > 0 ? ps.den : 1);
	t->t_fwd = t->t_bwd = 0;
	for (int c = 0; c < t->V; c++) {
		double f, b;
		mgt_model_take_times(t->chunk[c], &f, &b);
		t->t_fwd += f;
		t->t_bwd += b;
	}
	if (!st) st = trainer_reduce_grads(t);
	if (!st && t->moe.n) st = trainer_moe_step(t);
	if (!st) trainer_unscale_grads(t, ps.den);
	if (!st) st = trainer_global_norm(t, false, gnorm);
	if (!st && t->dump.on && t->dump.iters == 1)
		st = t->be->ops->download(t->be, t->dump.grads, mgt_model_grads(t->model),
					  mgt_model_tensors(t->model)->buf_numel * sizeof(float));
	if (st) return st;
	double t0 = mgt_now();
	*lr = mgt_lr_get(&t->sched);
	*skipped = !isfinite(*loss) || !trainer_optimizer_step(t, *lr, *gnorm);
	/* an inf/NaN gradient anywhere makes the norm (summed over the job) inf/NaN on every rank */
	mgt_loss_scaler_update(&t->scaler, !isfinite(*gnorm));
	for (int c = 0; !st && !*skipped && c < t->V; c++) st = trainer_gather_params(t, t->chunk[c], false);
	if (!st) st = trainer_wait_dp(t);
	t->be->ops->sync(t->be);
	t->t_opt = mgt_now() - t0;
	if (!*skipped) t->sched.num_steps += t->a->global_batch_size;
	return st;
}

static mgt_status train_loop(trainer *t)
{
	mgt_args *a = t->a;
	t->interval.t0 = mgt_now();
	while (t->iteration < a->train_iters) {
		double loss = 0, lr = 0, gnorm = 0, t0 = mgt_now();
		bool skipped = false, intr = false;
		double bytes[COMM_GROUPS];
		uint64_t calls[COMM_GROUPS];
		comm_snapshot(t, bytes, calls);
		mgt_status st = train_step(t, &loss, &lr, &gnorm, &skipped, &intr);
		if (st) return st;
		count_iteration(t, loss, lr, gnorm, skipped);
		log_comm(t, bytes, calls);
		if (t->async_all_done && (st = trainer_save_wait(t))) return st;
		if (a->log_params_norm && trainer_log_due(t) && (st = trainer_global_norm(t, true, &t->params_norm))) return st;
		trainer_log_iteration(t, loss, lr, gnorm, skipped, mgt_now() - t0);
		trainer_plan_iteration(t, mgt_now() - t0);
		if (at(t->iteration, a->eval_interval) && (st = trainer_validate(t, MGT_SPLIT_VALID, NULL))) return st;
		bool stop = intr || t->out_of_time || at(t->iteration, a->exit_interval);
		if (a->save && (at(t->iteration, a->save_interval) || stop) && (st = trainer_save(t))) return st;
		if (stop && (st = trainer_save_wait(t))) return st;
		if (intr) return mgt_err(MGT_ERR_INTR, "interrupted at iteration %lld%s", (long long)t->iteration,
					 a->save ? " (checkpoint saved)" : "");
		if (t->out_of_time && t->io->log)
			fprintf(t->io->log, "exiting program after %.2f minutes (--exit-duration-in-mins %g)\n",
				(mgt_now() - t->io->start_time) / 60.0, a->exit_duration_in_mins);
		if (stop) return MGT_OK;
	}
	if (a->save && !at(t->iteration, a->save_interval)) {
		mgt_status st = trainer_save(t);
		if (st) return st;
	}
	mgt_status st = trainer_save_wait(t);
	if (!st && a->eval_interval) st = trainer_validate(t, MGT_SPLIT_VALID, "on validation set");
	if (!st && a->eval_interval) st = trainer_validate(t, MGT_SPLIT_TEST, "on test set");
	return st;
}

mgt_status mgt_train_run(mgt_args *a, const mgt_train_io *io)
{
	trainer t = { .a = a, .io = io };
	mgt_status st = trainer_setup(&t);
	if (!st) st = trainer_log_recompute(&t);
	if (!st) {
		trainer_log_memory(&t, "before training");
		t.dump.on = a->debug_dump != NULL;
		st = train_loop(&t);
		mgt_status st2 = t.dump.on ? trainer_dump_write(&t) : MGT_OK;
		if (!st) st = st2;
		trainer_log_memory(&t, "after training");
	}
	mgt_status st_tb = trainer_log_end(&t);
	if (!st) st = st_tb;
	trainer_teardown(&t);
	return st;
}
