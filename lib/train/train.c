/* lib/train/train.c: setup and the training loop (megatron/training/training.py: pretrain,
 * train, train_step, evaluate). */
#include "train_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- setup ---- */

static mgt_status setup_tokenizer(trainer *t)
{
	mgt_args *a = t->a;
	if (!a->tokenizer_type) {
		if (!a->mock_data)
			return mgt_err(MGT_ERR_USAGE, "--tokenizer-type is required with --data-path");
		a->model.vocab_size = a->vocab_size ? a->vocab_size : 50257; /* GPT-2's, for mock data */
		t->eod = (int32_t)(a->model.vocab_size - 1);
		return MGT_OK;
	}
	mgt_tok_opts o = {
		.type = a->tokenizer_type, .vocab_file = a->vocab_file, .merge_file = a->merge_file,
		.model = a->tokenizer_model, .tiktoken_pattern = a->tiktoken_pattern,
		.tiktoken_num_special = (int)a->tiktoken_num_special_tokens, .vocab_size = a->vocab_size,
		.null_eod_id = a->null_tokenizer_eod_id,
	};
	mgt_status st = mgt_tok_load(&t->tok, &o);
	if (st) return st;
	a->model.vocab_size = mgt_tok_vocab_size(t->tok);
	t->eod = mgt_tok_eod(t->tok);
	return MGT_OK;
}

static mgt_status setup_schedule(trainer *t)
{
	mgt_args *a = t->a;
	mgt_lr_sched *s = &t->sched;
	int64_t gbs = a->global_batch_size;
	memset(s, 0, sizeof *s);
	s->max_lr = a->lr;
	s->min_lr = a->min_lr;
	s->init_lr = a->lr_warmup_init;
	s->decay_steps = a->lr_decay_samples ? a->lr_decay_samples
			 : (a->lr_decay_iters ? a->lr_decay_iters : a->train_iters) * gbs;
	if (a->lr_warmup_fraction >= 0) s->warmup_steps = (int64_t)(a->lr_warmup_fraction * (double)s->decay_steps);
	else s->warmup_steps = a->lr_warmup_samples ? a->lr_warmup_samples : a->lr_warmup_iters * gbs;
	s->wsd_decay_steps = a->lr_wsd_decay_iters * gbs;
	snprintf(s->style, sizeof s->style, "%s", a->lr_decay_style ? a->lr_decay_style : "linear");
	snprintf(s->wsd_style, sizeof s->wsd_style, "%s", a->lr_wsd_decay_style ? a->lr_wsd_decay_style : "exponential");
	mgt_status st = mgt_lr_sched_check(s);
	if (st) return st;
	if ((st = mgt_adamw_init(&t->opt, t->be, mgt_model_tensors(t->model)->numel))) return st;
	t->opt.beta1 = a->adam_beta1;
	t->opt.beta2 = a->adam_beta2;
	t->opt.eps = a->adam_eps;
	t->opt.weight_decay = a->weight_decay;
	t->opt.clip_grad = a->clip_grad;
	return MGT_OK;
}

/* --data-path is kept as one space-separated string (mgt_args); split it into words. */
static mgt_status parse_data_path(const char *s, int *n_paths, char ***paths, double **weights)
{
	char *copy = mgt_strdup(s), *save = NULL;
	int n = 0, cap = 1;
	for (const char *p = s; *p; p++) cap += *p == ' ';
	const char **words = copy ? mgt_malloc((size_t)cap * sizeof *words) : NULL;
	mgt_status st = words ? MGT_OK : MGT_ERR_NOMEM;
	for (char *w = words ? strtok_r(copy, " ", &save) : NULL; w; w = strtok_r(NULL, " ", &save)) words[n++] = w;
	if (!st) st = mgt_gpt_parse_data_path(n, words, n_paths, paths, weights);
	free(words);
	free(copy);
	return st;
}

/* Split "--data-path" words into prefixes and optional weights (megatron-reference 3.2). */
static mgt_status open_data(trainer *t)
{
	mgt_args *a = t->a;
	if (!a->mock_data && !a->data_path)
		return mgt_err(MGT_ERR_USAGE, "--data-path (or --mock-data) is required");
	uint64_t n[3] = { 0, 0, 0 };
	mgt_status st = mgt_gpt_num_samples(0, a->train_iters, a->global_batch_size, 0,
					    a->eval_interval ? a->eval_interval : 1, a->eval_iters, n);
	if (st) return st;
	if (!a->eval_interval) n[1] = n[2] = 0;
	mgt_gpt_data_config dc = {
		.split = a->split, .seq_length = (int)a->model.seq_length, .seed = (uint64_t)a->seed,
		.cache_path = a->data_cache_path, .eod_id = t->eod, .vocab_size = a->model.vocab_size,
		.eod_mask_loss = a->eod_mask_loss, .reset_position_ids = a->reset_position_ids,
		.mock = a->mock_data,
	};
	memcpy(dc.num_samples, n, sizeof n);
	char **paths = NULL;
	double *weights = NULL;
	if (!a->mock_data) st = parse_data_path(a->data_path, &dc.n_paths, &paths, &weights);
	dc.paths = (const char *const *)paths;
	dc.weights = weights;
	if (!st) st = mgt_gpt_data_open(&dc, &t->data);
	if (!st && *mgt_gpt_data_note(t->data) && t->io->log) fprintf(t->io->log, "%s\n", mgt_gpt_data_note(t->data));
	for (int i = 0; paths && i < dc.n_paths; i++) free(paths[i]);
	free(paths);
	free(weights);
	return st;
}

static mgt_status alloc_batch(trainer *t)
{
	size_t S = (size_t)t->a->model.seq_length, T = S * (size_t)t->a->micro_batch_size;
	t->mb_tokens = mgt_malloc(T * 4); t->mb_labels = mgt_malloc(T * 4); t->mb_pos = mgt_malloc(T * 4);
	t->mb_mask = mgt_malloc(T * 4);
	t->s_tokens = mgt_malloc(S * 4); t->s_labels = mgt_malloc(S * 4); t->s_pos = mgt_malloc(S * 4);
	t->s_mask = mgt_malloc(S * 4);
	bool ok = t->mb_tokens && t->mb_labels && t->mb_pos && t->mb_mask && t->s_tokens && t->s_labels &&
		  t->s_pos && t->s_mask;
	return ok ? MGT_OK : MGT_ERR_NOMEM;
}

static void free_batch(trainer *t)
{
	void *p[] = { t->mb_tokens, t->mb_labels, t->mb_pos, t->mb_mask, t->s_tokens, t->s_labels, t->s_pos, t->s_mask };
	for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

/* Fill micro-batch k of the global batch starting at sample `base` of split sp, sequence-first
 * (megatron-reference 3.7: micro-batch step k covers mbs*dp samples, of which DP rank r takes
 * [r*mbs, (r+1)*mbs)).  Validation cycles through its split. */
static mgt_status load_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k)
{
	int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	int64_t first = base + (k * t->a->data_parallel_size + t->ps.dp_rank) * b;
	int64_t n = mgt_gpt_data_len(t->data, sp);
	if (n <= 0) return mgt_err(MGT_ERR_INPUT, "the %s split has no samples", sp == MGT_SPLIT_TRAIN ? "train" : "validation");
	for (int j = 0; j < b; j++) {
		int64_t idx = first + j;
		mgt_status st = mgt_gpt_data_sample(t->data, sp, idx % n, t->s_tokens, t->s_labels, t->s_mask, t->s_pos);
		if (st) return st;
		for (int i = 0; i < S; i++) {
			size_t tt = (size_t)i * (size_t)b + (size_t)j;
			t->mb_tokens[tt] = t->s_tokens[i];
			t->mb_labels[tt] = t->s_labels[i];
			t->mb_mask[tt] = t->s_mask[i];
			t->mb_pos[tt] = t->s_pos[i];
		}
	}
	return MGT_OK;
}

static double mask_sum(const trainer *t)
{
	double n = 0;
	size_t T = (size_t)t->a->model.seq_length * (size_t)t->a->micro_batch_size;
	for (size_t i = 0; i < T; i++) n += t->mb_mask[i];
	return n;
}

/* ---- one iteration ---- */

/* Forward and backward over all micro-batches of the global batch; *loss = token-weighted mean. */
static mgt_status forward_backward(trainer *t, double *loss)
{
	mgt_args *a = t->a;
	double num = 0, den = 0;
	t->t_fwd = t->t_bwd = 0;
	for (int64_t k = 0; k < a->num_microbatches; k++) {
		mgt_status st = load_microbatch(t, MGT_SPLIT_TRAIN, t->consumed_train, k);
		if (!st && t->dumping) st = trainer_dump_batch(t, k);
		if (st) return st;
		double ntok = mask_sum(t), lsum = 0, f, b;
		float scale = (float)(1.0 / ((ntok > 1 ? ntok : 1) * (double)a->num_microbatches));
		mgt_model_set_dropout_key(t->model, (uint64_t)a->seed, t->iteration + 1, k);
		mgt_microbatch mb = { t->mb_tokens, t->mb_labels, t->mb_pos, t->mb_mask };
		bool first = t->dumping && t->dump.iters == 1 && k == 0;
		st = mgt_model_step(t->model, &mb, true, scale, &lsum, first ? t->dump.logits : NULL,
				    first ? t->dump.loss : NULL);
		if (st) return st;
		mgt_model_last_times(t->model, &f, &b);
		t->t_fwd += f;
		t->t_bwd += b;
		num += lsum;
		den += ntok;
	}
	*loss = num / (den > 0 ? den : 1);
	return MGT_OK;
}

static mgt_status train_step(trainer *t, double *loss, double *lr, double *gnorm, bool *skipped)
{
	mgt_model *m = t->model;
	size_t n = mgt_model_tensors(m)->numel;
	t->be->ops->zero(t->be, mgt_model_grads(m), n * sizeof(float));
	mgt_status st = forward_backward(t, loss);
	if (!st) st = mgt_grad_norm(t->be, mgt_model_grads(m), n, NULL, gnorm);
	if (st) return st;
	if (t->dumping && t->dump.iters == 1)
		st = t->be->ops->download(t->be, t->dump.grads, mgt_model_grads(m), n * sizeof(float));
	double t0 = mgt_now();
	*lr = mgt_lr_get(&t->sched);
	*skipped = !isfinite(*loss) ||
		   !mgt_adamw_step(&t->opt, mgt_model_tensors(m), mgt_model_params(m), mgt_model_grads(m), *lr, *gnorm);
	t->be->ops->sync(t->be);
	t->t_opt = mgt_now() - t0;
	if (!*skipped) t->sched.num_steps += t->a->global_batch_size;
	return st;
}

/* ---- evaluation ---- */

static mgt_status evaluate(trainer *t, double *loss)
{
	mgt_args *a = t->a;
	double num = 0, den = 0;
	for (int64_t it = 0; it < a->eval_iters; it++) {
		for (int64_t k = 0; k < a->num_microbatches; k++) {
			mgt_status st = load_microbatch(t, MGT_SPLIT_VALID, t->consumed_valid, k);
			if (st) return st;
			double lsum = 0;
			mgt_microbatch mb = { t->mb_tokens, t->mb_labels, t->mb_pos, t->mb_mask };
			if ((st = mgt_model_step(t->model, &mb, false, 0.0f, &lsum, NULL, NULL))) return st;
			num += lsum;
			den += mask_sum(t);
		}
		t->consumed_valid += a->global_batch_size;
	}
	*loss = num / (den > 0 ? den : 1);
	return MGT_OK;
}

static mgt_status validate(trainer *t, const char *what)
{
	if (!t->a->eval_iters || mgt_gpt_data_len(t->data, MGT_SPLIT_VALID) <= 0) return MGT_OK;
	double loss;
	mgt_status st = evaluate(t, &loss);
	if (!st) trainer_log_validation(t, what, loss);
	return st;
}

/* ---- the loop ---- */

static bool at(int64_t it, int64_t interval) { return interval > 0 && it % interval == 0; }

static mgt_status train_loop(trainer *t)
{
	mgt_args *a = t->a;
	t->int_t0 = mgt_now();
	while (t->iteration < a->train_iters) {
		double loss = 0, lr = 0, gnorm = 0, t0 = mgt_now();
		bool skipped = false;
		mgt_status st = train_step(t, &loss, &lr, &gnorm, &skipped);
		if (st) return st;
		t->iteration++;
		t->consumed_train += a->global_batch_size;
		t->flops_so_far += mgt_model_flops(&a->model, a->global_batch_size);
		if (skipped) {
			t->skipped_iters++;
			if (!isfinite(loss) || !isfinite(gnorm)) t->nan_iters++;
		}
		if (t->dumping) {
			int64_t i = t->dump.iters - 1;
			t->dump.lm_loss[i] = loss; t->dump.lr[i] = lr; t->dump.grad_norm[i] = gnorm;
		}
		trainer_log_iteration(t, loss, lr, gnorm, skipped, mgt_now() - t0);
		if (at(t->iteration, a->eval_interval) && (st = validate(t, NULL))) return st;
		bool stop = mgt_interrupted || at(t->iteration, a->exit_interval);
		if (a->save && (at(t->iteration, a->save_interval) || stop) && (st = trainer_save(t))) return st;
		if (mgt_interrupted) return mgt_err(MGT_ERR_INTR, "interrupted at iteration %lld%s", (long long)t->iteration,
						    a->save ? " (checkpoint saved)" : "");
		if (stop) return MGT_OK;
	}
	if (a->save && !at(t->iteration, a->save_interval)) {
		mgt_status st = trainer_save(t);
		if (st) return st;
	}
	return a->eval_interval ? validate(t, "on validation set") : MGT_OK;
}

static mgt_status setup(trainer *t)
{
	mgt_args *a = t->a;
	mgt_status st = setup_tokenizer(t);
	if (!st) st = mgt_args_finalize(a);
	if (!st) st = mgt_parallel_init_single(&t->ps);
	if (st) return st;
	if (!(t->be = mgt_backend_cpu_create((int)a->threads))) return MGT_ERR_NOMEM;
	t->rss_baseline = trainer_peak_rss();
	st = mgt_model_create(&t->model, &a->model, (int)a->micro_batch_size, t->be, &t->ps);
	if (!st) st = setup_schedule(t);
	bool loaded = false;
	if (!st) st = trainer_load(t, &loaded);
	if (!st && !loaded) st = mgt_model_init_params(t->model, (uint64_t)a->seed);
	if (!st) st = open_data(t);
	if (!st) st = alloc_batch(t);
	if (!st && a->metrics_file && !(t->metrics = fopen(a->metrics_file, t->iteration ? "a" : "w")))
		st = mgt_err(MGT_ERR_IO, "%s: cannot open for writing", a->metrics_file);
	return st;
}

static void teardown(trainer *t)
{
	if (t->metrics) fclose(t->metrics);
	trainer_dump_free(t);
	free_batch(t);
	mgt_adamw_free(&t->opt);
	mgt_model_free(t->model);
	mgt_gpt_data_close(t->data);
	if (t->be) mgt_backend_destroy(t->be);
	if (t->ps.world) mgt_parallel_free(&t->ps);
	mgt_tok_free(t->tok);
}

mgt_status mgt_train_run(mgt_args *a, const mgt_train_io *io)
{
	trainer t = { .a = a, .io = io };
	mgt_status st = setup(&t);
	if (!st) {
		trainer_log_memory(&t, "before training");
		t.dumping = a->debug_dump != NULL;
		st = train_loop(&t);
		mgt_status st2 = t.dumping ? trainer_dump_write(&t) : MGT_OK;
		if (!st) st = st2;
		trainer_log_memory(&t, "after training");
	}
	teardown(&t);
	return st;
}
