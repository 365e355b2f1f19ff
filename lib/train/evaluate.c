/* lib/train/evaluate.c: evaluation: validation and test during and after training, and a
 * checkpoint's evaluation for mgt-eval (megatron/training/training.py: evaluate,
 * evaluate_and_print_results). */
#include "train_impl.h"

#include <string.h>

/* --eval-iters global batches of split sp from sample *consumed on (advanced), as Megatron's
 * evaluate: the token-weighted mean loss; with --sft the mean of the micro-batches' mean losses
 * ("normalize over micro batch instead of global", training.py evaluate). */
mgt_status trainer_evaluate(trainer *t, mgt_split sp, int64_t *consumed, double *loss, double *tokens)
{
	double num = 0, den = 0, sop = 0, mbm = 0, nmb = 0;
	t->eval_masked = t->eval_correct = 0;
	for (int64_t it = 0; it < t->a->eval_iters; it++) {
		trainer_pass ps = { .split = sp, .base = *consumed, .train = false };
		mgt_status st = trainer_run_pass(t, t->eval_acts, t->n_eval_acts, &ps, NULL);
		if (st) return st;
		num += ps.num;
		den += ps.den;
		mbm += ps.mbm;
		nmb += ps.nmb;
		sop += ps.sop;
		t->eval_masked += ps.masked;
		t->eval_correct += ps.correct;
		*consumed += t->a->global_batch_size;
	}
	for (int c = 0; c < t->V; c++) {
		double f, b;
		mgt_model_take_times(t->chunk[c], &f, &b);
	}
	*loss = trainer_sft(t) ? mbm / (nmb > 0 ? nmb : 1) : num / (den > 0 ? den : 1);
	t->sop_loss = sop / (den > 0 ? den : 1);
	if (tokens) *tokens = den;
	return MGT_OK;
}

/* Validation during training (what NULL) or at its end; the test split at the end, from its
 * first sample (Megatron's pretrain: "on validation set", then "on test set"). */
mgt_status trainer_validate(trainer *t, mgt_split sp, const char *what)
{
	if (!t->a->eval_iters || trainer_data_len(t, sp) <= 0) return MGT_OK;
	double loss;
	int64_t test_from = 0;
	mgt_status st = trainer_evaluate(t, sp, sp == MGT_SPLIT_TEST ? &test_from : &t->consumed_valid, &loss, NULL);
	if (!st) trainer_log_validation(t, what, sp == MGT_SPLIT_TEST, loss);
	return st;
}

mgt_status mgt_train_evaluate(mgt_args *a, const mgt_train_io *io, const mgt_train_eval_opts *o,
			      mgt_train_eval_result *r)
{
	trainer t = { .a = a, .io = io, .eval_only = true };
	memset(r, 0, sizeof *r);
	a->no_load_optim = true;
	a->save = NULL;
	mgt_status st = a->load || a->pretrained_checkpoint ? MGT_OK : mgt_err(MGT_ERR_USAGE, "--load DIR is required (the checkpoint to evaluate)");
	if (!st) st = trainer_setup(&t);
	mgt_split sp = o->test ? MGT_SPLIT_TEST : MGT_SPLIT_VALID;
	int64_t one = a->eval_iters * a->global_batch_size, from = o->from_sample;
	if (!st && from < 0) from = o->test ? 0 : t.consumed_valid >= one ? t.consumed_valid - one : 0;
	if (!st && trainer_data_len(&t, sp) <= 0)
		st = mgt_err(MGT_ERR_INPUT, "the %s split has no samples (--split %s, --eval-iters %lld, --eval-interval %lld): "
			     "give it a share in --split (say --split 949,50,1)%s", o->test ? "test" : "validation",
			     a->split ? a->split : "(none)", (long long)a->eval_iters, (long long)a->eval_interval,
			     o->test ? ", or evaluate --eval-split valid" : "");
	if (!st && a->eval_iters <= 0) st = mgt_err(MGT_ERR_USAGE, "--eval-iters %lld: nothing to evaluate", (long long)a->eval_iters);
	r->iteration = t.iteration;
	r->first_sample = from;
	double loss = 0, tokens = 0;
	if (!st) st = trainer_evaluate(&t, sp, &from, &loss, &tokens);
	r->samples = from - r->first_sample;
	r->loss = loss;
	r->tokens = (int64_t)tokens;
	r->bert = trainer_bert(&t);
	r->binary_head = a->model.bert_binary_head;
	r->sop_loss = t.sop_loss;
	r->masked = (int64_t)t.eval_masked;
	r->correct = (int64_t)t.eval_correct;
	if (!st) st = trainer_log_tb_open(&t);
	if (!st) { /* TensorBoard and --metrics-file as mgt-train's validation; the caller prints the block */
		mgt_train_io quiet = *io;
		quiet.log = NULL;
		t.io = &quiet;
		trainer_log_validation(&t, o->test ? "on test set" : "on validation set", o->test, loss);
		t.io = io;
	}
	mgt_status st_tb = trainer_log_end(&t);
	if (!st) st = st_tb;
	trainer_teardown(&t);
	return st;
}
