/* lib/train/pipeline.c: pipeline execution: the forward and backward actions of a schedule
 * (lib/parallel's mgt_parallel_sched_build) over the model chunks, with the stage-to-stage sends
 * (megatron/core/pipeline_parallel/schedules.py). */
#include "train_impl.h"

#include <stdio.h>

enum { TAG_FWD = 1, TAG_BWD = 2 };

static bool first_vstage(const trainer *t, int c) { return c == 0 && t->ps.pp_rank == 0; }
static bool last_vstage(const trainer *t, int c) { return c == t->V - 1 && t->ps.pp_rank == t->ps.pp - 1; }

/* BERT (pretrain_bert.py): each micro-batch's mean losses, averaged over the micro-batches; in
 * evaluation also the masked-token accuracy's counts. */
static void account_bert(trainer *t, mgt_model *m, int slot, int mb, trainer_pass *ps)
{
	double lm, sop;
	mgt_model_bert_losses(m, slot, &lm, &sop);
	if (!ps->train) {
		int64_t n, c;
		mgt_model_bert_accuracy(m, slot, &n, &c);
		ps->masked += (double)n;
		ps->correct += (double)c;
	}
	ps->num += lm;
	ps->sop += sop;
	ps->den += 1;
	t->mb_scale[mb] = (float)(1.0 / (double)t->a->num_microbatches);
}

static mgt_status run_forward(trainer *t, const mgt_parallel_sched_action *x, trainer_pass *ps)
{
	mgt_model *m = t->chunk[x->chunk];
	mgt_comm *pp = t->ps.pp_comm;
	int slot = x->mb % t->slots[x->chunk], P = t->ps.pp, r = t->ps.pp_rank;
	size_t n = mgt_model_hidden_numel(m);
	const mgt_elem_type ht = mgt_model_hidden_type(m); /* the residual stream's storage */
	mgt_status st = trainer_load_microbatch(t, ps->split, ps->base, x->mb);
	if (!st && t->dump.on && x->chunk == 0) st = trainer_dump_batch(t, x->mb);
	if (!st && !first_vstage(t, x->chunk)) st = pp->ops->recv(pp, mgt_model_hidden_in(m, slot), n, ht, (r + P - 1) % P, TAG_FWD);
	if (st) return st;
	/* keyed by the micro-batch's place in the global batch, so the data-parallel split does not matter */
	if (ps->train) mgt_model_set_dropout_key(m, t->dropout_seed, t->iteration + 1, (int64_t)x->mb * t->ps.dp + t->ps.dp_rank);
	double lsum = 0;
	mgt_microbatch mb = { .tokens = t->mb_tokens, .labels = t->mb_labels, .position_ids = t->mb_pos, .loss_mask = t->mb_mask,
			      .seg_start = t->mb_seg, .rope_position_ids = t->mb_rpos, .cp_rows = t->mb_cprows,
			      .tokentype_ids = t->mb_types, .padding_mask = t->mb_pad, .is_random = t->mb_isr,
			      .dec_tokens = t->mb_dtok, .dec_position_ids = t->mb_dpos };
	if ((st = mgt_model_forward(m, slot, &mb, ps->train, &lsum))) return st;
	if (t->out.fp8_trace && ps->train && (st = trainer_fp8_trace(t, x->chunk, x->mb, false))) return st;
	if (!last_vstage(t, x->chunk)) return pp->ops->send(pp, mgt_model_hidden_out(m, slot), n, ht, (r + 1) % P, TAG_FWD);
	if (trainer_bert(t)) account_bert(t, m, slot, x->mb, ps);
	else {
		/* the loss of the micro-batch is the sum over all its tokens (every context-parallel
		 * rank's) divided by their count: each rank scales its part by the whole count, and the
		 * gradients are summed over the context-parallel ranks (Megatron's loss_func with CP) */
		double ntok = t->mb_tokens_full, mine = trainer_mask_sum(t);
		ps->num += lsum;
		ps->den += mine;
		ps->mbm += lsum / (mine > 1 ? mine : 1); /* --sft's evaluation: the micro-batch's mean */
		ps->nmb += 1;
		/* --calculate-per-token-loss: the loss sum, the gradients divided by the global batch's tokens later */
		t->mb_scale[x->mb] = t->a->calculate_per_token_loss ? 1.0f
					: (float)(1.0 / ((ntok > 1 ? ntok : 1) * (double)t->a->num_microbatches));
	}
	if (t->dump.on && t->dump.iters == 1 && x->mb == 0) st = mgt_model_outputs(m, slot, t->dump.logits, t->dump.loss);
	if (!st && t->dump.on && t->dump.iters == 1 && x->mb == 0 && t->moe.n) st = trainer_dump_moe(t, slot);
	return st;
}

static mgt_status run_backward(trainer *t, const mgt_parallel_sched_action *x)
{
	mgt_model *m = t->chunk[x->chunk];
	mgt_comm *pp = t->ps.pp_comm;
	int P = t->ps.pp, r = t->ps.pp_rank;
	size_t n = mgt_model_hidden_numel(m);
	bool last = last_vstage(t, x->chunk);
	/* --overlap-grad-reduce: the chunk's last backward of the iteration reduces buckets as they complete */
	bool fsdp = trainer_fsdp_grads(t), hook = fsdp || (t->ddp.last_bwd && x == &t->acts[t->ddp.last_bwd[x->chunk]]);
	mgt_status st = last ? MGT_OK : pp->ops->recv(pp, mgt_model_hidden_grad(m), n, mgt_model_hidden_type(m), (r + 1) % P,
							   TAG_BWD);
	float scale = last ? (float)(t->mb_scale[x->mb] * t->scaler.scale) : 0.0f;
	if (hook) mgt_model_set_grad_hook(m, fsdp ? trainer_fsdp_grad_ready : trainer_grad_ready, t);
	trainer_fsdp_before_backward(t, x->chunk);
	if (!st) st = mgt_model_backward(m, x->mb % t->slots[x->chunk], true, scale);
	if (!st && t->out.fp8_trace) st = trainer_fp8_trace(t, x->chunk, x->mb, true);
	if (hook) mgt_model_set_grad_hook(m, NULL, NULL);
	/* a bf16 main_grad: rounded now, unless the reduction that follows the last micro-batch rounds it */
	if (!st && t->a->grad_reduce_in_bf16 && (x->mb + 1 < t->a->num_microbatches || trainer_dpcp(t) == 1)) trainer_round_grads(t, x->chunk);
	if (!st && !first_vstage(t, x->chunk))
		st = pp->ops->send(pp, mgt_model_hidden_grad(m), n, mgt_model_hidden_type(m), (r + P - 1) % P, TAG_BWD);
	return st;
}

/* Run a schedule; then sum the loss and token counts of the last stage over the job (one TP
 * rank of each last stage contributes) together with the interrupt flags, so every rank sees
 * the same loss and the same decision to stop. */
mgt_status trainer_run_pass(trainer *t, const mgt_parallel_sched_action *acts, int n, trainer_pass *ps, bool *interrupted)
{
	mgt_status st = MGT_OK;
	for (int c = 0; c < t->V; c++) mgt_model_fp8_first_microbatch(t->chunk[c]); /* weights cast again */
	for (int i = 0; !st && i < n; i++) st = acts[i].fwd ? run_forward(t, &acts[i], ps) : run_backward(t, &acts[i]);
	if (st) return st;
	bool mine = t->ps.pp_rank == t->ps.pp - 1 && t->ps.tp_rank == 0;
	double mins = (mgt_now() - t->io->start_time) / 60.0, limit = t->a->exit_duration_in_mins;
	double v[10] = { mine ? ps->num : 0, mine ? ps->den : 0, mgt_interrupted ? 1 : 0, limit > 0 && mins > limit,
			 trainer_async_running(t), mine ? ps->sop : 0, mine ? ps->masked : 0, mine ? ps->correct : 0,
			 mine ? ps->mbm : 0, mine ? ps->nmb : 0 };
	mgt_comm *w = t->ps.world;
	/* BERT's sop loss and accuracy counts, --sft's micro-batch means ride along (GPT's 5 values as before) */
	const int nv = trainer_sft(t) ? 10 : trainer_bert(t) ? 8 : 5;
	if (w->size > 1 && (st = w->ops->allreduce(w, v, nv, MGT_DT_F64, MGT_RED_SUM))) return st;
	ps->mbm = v[8];
	ps->nmb = v[9];
	ps->masked = v[6];
	ps->correct = v[7];
	t->async_all_done = t->async && v[4] == 0;
	ps->num = v[0];
	ps->den = v[1];
	ps->sop = v[5];
	if (interrupted) *interrupted = v[2] > 0;
	t->out_of_time = v[3] > 0;
	return MGT_OK;
}
