/* lib/train/train.c: setup and the training loop (megatron/training/training.py: pretrain,
 * train, train_step, evaluate). */
#include "train_impl.h"

#include "ckpt/ckpt.h"

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- setup ---- */

static mgt_status setup_tokenizer(trainer *t)
{
	mgt_args *a = t->a;
	if (!a->tokenizer_type && a->vocab_file && a->merge_file) {
		/* Megatron's GPT example passes only the vocabulary and merges files */
		if (!(a->tokenizer_type = mgt_strdup("GPT2BPETokenizer"))) return MGT_ERR_NOMEM;
		if (t->io->log) fprintf(t->io->log, "WARNING: no --tokenizer-type: GPT2BPETokenizer, from --vocab-file and --merge-file\n");
	}
	if (!a->tokenizer_type && a->vocab_file && mgt_model_is_bert(&a->model)) {
		/* pretrain_bert.py's default --tokenizer-type */
		if (!(a->tokenizer_type = mgt_strdup("BertWordPieceLowerCase"))) return MGT_ERR_NOMEM;
		if (t->io->log) fprintf(t->io->log, "WARNING: no --tokenizer-type: BertWordPieceLowerCase, pretrain_bert.py's default\n");
	}
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
	return mgt_lr_sched_check(s);
}

/* The host communicator of a group (the device one wraps it after mgt_parallel_to_device). */
static mgt_comm *host_comm(mgt_comm *c, mgt_comm *host) { return host ? host : c; }

/* The data-parallel group of a bucket: the expert-data-parallel one for expert rows. */
static mgt_comm *bucket_comm(const trainer *t, const mgt_bucket *b)
{
	return b->expert ? t->ps.edp_comm : t->ps.dpcp_comm;
}

/* The size of the group dense gradients are reduced over: data x context parallel. */
static int dpcp(const trainer *t) { return t->ps.dpcp_comm->size; }

/* One AdamW state per range this rank steps: each chunk's whole buffer, or with the distributed
 * optimizer its shard of every bucket (megatron-reference.md section 10). */
static mgt_status setup_optimizer(trainer *t)
{
	mgt_args *a = t->a;
	int n = 0;
	for (int c = 0; c < t->V; c++) n += a->use_distributed_optimizer ? mgt_model_tensors(t->chunk[c])->nbuckets : 1;
	if (!(t->shard = mgt_malloc((size_t)n * sizeof *t->shard))) return MGT_ERR_NOMEM;
	memset(t->shard, 0, (size_t)n * sizeof *t->shard);
	for (int c = 0; c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		for (int b = 0; b < (a->use_distributed_optimizer ? tt->nbuckets : 1); b++) {
			opt_shard *s = &t->shard[t->nshard++];
			const mgt_comm *g = a->use_distributed_optimizer ? bucket_comm(t, &tt->buckets[b]) : NULL;
			int dp = g ? g->size : 1, d = g ? g->rank : 0;
			size_t per = a->use_distributed_optimizer ? tt->buckets[b].numel / (size_t)dp : tt->buf_numel;
			s->chunk = c;
			s->lo = a->use_distributed_optimizer ? tt->buckets[b].offset + (size_t)d * per : 0;
			s->hi = s->lo + per;
			mgt_status st = mgt_adamw_init(&s->opt, t->be, per);
			if (st) return st;
			s->opt.beta1 = a->adam_beta1;
			s->opt.beta2 = a->adam_beta2;
			s->opt.eps = a->adam_eps;
			s->opt.weight_decay = a->weight_decay;
			s->opt.clip_grad = a->clip_grad;
		}
	}
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
	if (trainer_masked(t)) return trainer_masked_open(t, n);
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

/* Samples of split sp (GPT's or BERT's dataset). */
static int64_t data_len(const trainer *t, mgt_split sp)
{
	return trainer_masked(t) ? trainer_masked_len(t, sp) : mgt_gpt_data_len(t->data, sp);
}

static mgt_status alloc_batch(trainer *t)
{
	if (trainer_masked(t)) {
		mgt_status st = trainer_masked_alloc(t);
		if (st) return st;
	}
	size_t S = (size_t)t->a->model.seq_length, T = S * (size_t)t->a->micro_batch_size;
	if (trainer_t5(t) && t->a->model.decoder_seq_length > t->a->model.seq_length) /* labels and mask: the decoder's */
		S = (size_t)t->a->model.decoder_seq_length, T = S * (size_t)t->a->micro_batch_size;
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

/* Context parallelism: keep the rows of this rank's chunks cp_rank and 2CP-1-cp_rank of the
 * sequence (of 2CP chunks), in that order, at the front of the micro-batch arrays
 * (Megatron-Core's get_batch_on_this_cp_rank; in place: a row never moves down). */
static void cp_slice(trainer *t)
{
	int CP = t->ps.cp, r = t->ps.cp_rank, b = (int)t->a->micro_batch_size;
	if (CP <= 1) return;
	int64_t cb = t->a->model.seq_length / (2 * CP) * b;
	for (int64_t i = 0; i < 2 * cb; i++) {
		int64_t g = mgt_cp_row(cb, CP, r, i);
		t->mb_tokens[i] = t->mb_tokens[g];
		t->mb_labels[i] = t->mb_labels[g];
		t->mb_mask[i] = t->mb_mask[g];
		t->mb_pos[i] = t->mb_pos[g];
	}
}

/* Fill micro-batch k of the global batch starting at sample `base` of split sp, sequence-first
 * (megatron-reference 3.7: micro-batch step k covers mbs*dp samples, of which DP rank r takes
 * [r*mbs, (r+1)*mbs)).  Validation cycles through its split. */
static mgt_status load_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k)
{
	if (trainer_masked(t)) return trainer_masked_microbatch(t, sp, base, k);
	int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	int64_t first = base + (k * t->a->data_parallel_size + t->ps.dp_rank) * b;
	int64_t n = mgt_gpt_data_len(t->data, sp);
	if (n <= 0) return mgt_err(MGT_ERR_INPUT, "the %s split has no samples", sp == MGT_SPLIT_TRAIN ? "train" : "validation");
	t->mb_tokens_full = 0;
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
			t->mb_tokens_full += t->s_mask[i];
		}
	}
	cp_slice(t);
	return MGT_OK;
}

/* The loss-mask sum of this rank's rows of the micro-batch (its chunks under context parallelism). */
static double mask_sum(const trainer *t)
{
	double n = 0;
	const int64_t S = trainer_t5(t) ? t->a->model.decoder_seq_length : t->a->model.seq_length; /* the labels' */
	size_t T = (size_t)S * (size_t)t->a->micro_batch_size / (size_t)t->ps.cp;
	for (size_t i = 0; i < T; i++) n += t->mb_mask[i];
	return n;
}

/* ---- pipeline execution ---- */

enum { TAG_FWD = 1, TAG_BWD = 2 };

typedef struct {
	mgt_split split;
	int64_t base;       /* first sample of the global batch */
	bool train;
	double num, den;    /* loss sum and tokens on the last stage (BERT: lm loss sum and micro-batches) */
	double sop;         /* BERT: the sentence-order loss sum */
	double masked, correct; /* BERT evaluation: masked tokens, top-1 correct */
} pass;

static bool first_vstage(const trainer *t, int c) { return c == 0 && t->ps.pp_rank == 0; }
static bool last_vstage(const trainer *t, int c) { return c == t->V - 1 && t->ps.pp_rank == t->ps.pp - 1; }

/* BERT (pretrain_bert.py): each micro-batch's mean losses, averaged over the micro-batches; in
 * evaluation also the masked-token accuracy's counts. */
static void account_bert(trainer *t, mgt_model *m, int slot, int mb, pass *ps)
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

static mgt_status run_forward(trainer *t, const mgt_parallel_sched_action *x, pass *ps)
{
	mgt_model *m = t->chunk[x->chunk];
	mgt_comm *pp = t->ps.pp_comm;
	int slot = x->mb % t->slots[x->chunk], P = t->ps.pp, r = t->ps.pp_rank;
	size_t n = mgt_model_hidden_numel(m);
	const mgt_elem_type ht = mgt_model_hidden_type(m); /* the residual stream's storage */
	mgt_status st = load_microbatch(t, ps->split, ps->base, x->mb);
	if (!st && t->dumping && x->chunk == 0) st = trainer_dump_batch(t, x->mb);
	if (!st && !first_vstage(t, x->chunk)) st = pp->ops->recv(pp, mgt_model_hidden_in(m, slot), n, ht, (r + P - 1) % P, TAG_FWD);
	if (st) return st;
	/* keyed by the micro-batch's place in the global batch, so the data-parallel split does not matter */
	if (ps->train) mgt_model_set_dropout_key(m, t->dropout_seed, t->iteration + 1, (int64_t)x->mb * t->ps.dp + t->ps.dp_rank);
	double lsum = 0;
	mgt_microbatch mb = { .tokens = t->mb_tokens, .labels = t->mb_labels, .position_ids = t->mb_pos, .loss_mask = t->mb_mask,
			      .tokentype_ids = t->mb_types, .padding_mask = t->mb_pad, .is_random = t->mb_isr,
			      .dec_tokens = t->mb_dtok, .dec_position_ids = t->mb_dpos };
	if ((st = mgt_model_forward(m, slot, &mb, ps->train, &lsum))) return st;
	if (t->fp8_trace && ps->train && (st = trainer_fp8_trace(t, x->chunk, x->mb, false))) return st;
	if (!last_vstage(t, x->chunk)) return pp->ops->send(pp, mgt_model_hidden_out(m, slot), n, ht, (r + 1) % P, TAG_FWD);
	if (trainer_bert(t)) account_bert(t, m, slot, x->mb, ps);
	else {
		/* the loss of the micro-batch is the sum over all its tokens (every context-parallel
		 * rank's) divided by their count: each rank scales its part by the whole count, and the
		 * gradients are summed over the context-parallel ranks (Megatron's loss_func with CP) */
		double ntok = t->mb_tokens_full;
		ps->num += lsum;
		ps->den += mask_sum(t);
		/* --calculate-per-token-loss: the loss sum, the gradients divided by the global batch's tokens later */
		t->mb_scale[x->mb] = t->a->calculate_per_token_loss ? 1.0f
					: (float)(1.0 / ((ntok > 1 ? ntok : 1) * (double)t->a->num_microbatches));
	}
	if (t->dumping && t->dump.iters == 1 && x->mb == 0) st = mgt_model_outputs(m, slot, t->dump.logits, t->dump.loss);
	if (!st && t->dumping && t->dump.iters == 1 && x->mb == 0 && t->n_moe) st = trainer_dump_moe(t, slot);
	return st;
}

static mgt_status grad_ready(void *ctx, mgt_model *m, int done_from_layer);
static void round_grads(trainer *t, int c);

static mgt_status run_backward(trainer *t, const mgt_parallel_sched_action *x)
{
	mgt_model *m = t->chunk[x->chunk];
	mgt_comm *pp = t->ps.pp_comm;
	int P = t->ps.pp, r = t->ps.pp_rank;
	size_t n = mgt_model_hidden_numel(m);
	bool last = last_vstage(t, x->chunk);
	/* --overlap-grad-reduce: the chunk's last backward of the iteration reduces buckets as they complete */
	bool hook = t->last_bwd && x == &t->acts[t->last_bwd[x->chunk]];
	mgt_status st = last ? MGT_OK : pp->ops->recv(pp, mgt_model_hidden_grad(m), n, mgt_model_hidden_type(m), (r + 1) % P,
							   TAG_BWD);
	float scale = last ? (float)(t->mb_scale[x->mb] * t->scaler.scale) : 0.0f;
	if (hook) mgt_model_set_grad_hook(m, grad_ready, t);
	if (!st) st = mgt_model_backward(m, x->mb % t->slots[x->chunk], true, scale);
	if (!st && t->fp8_trace) st = trainer_fp8_trace(t, x->chunk, x->mb, true);
	if (hook) mgt_model_set_grad_hook(m, NULL, NULL);
	/* a bf16 main_grad: rounded now, unless the reduction that follows the last micro-batch rounds it */
	if (!st && t->g16 && (x->mb + 1 < t->a->num_microbatches || dpcp(t) == 1)) round_grads(t, x->chunk);
	if (!st && !first_vstage(t, x->chunk))
		st = pp->ops->send(pp, mgt_model_hidden_grad(m), n, mgt_model_hidden_type(m), (r + P - 1) % P, TAG_BWD);
	return st;
}

/* Run a schedule; then sum the loss and token counts of the last stage over the job (one TP
 * rank of each last stage contributes) together with the interrupt flags, so every rank sees
 * the same loss and the same decision to stop. */
static mgt_status run_pass(trainer *t, const mgt_parallel_sched_action *acts, int n, pass *ps, bool *interrupted)
{
	mgt_status st = MGT_OK;
	for (int c = 0; c < t->V; c++) mgt_model_fp8_first_microbatch(t->chunk[c]); /* weights cast again */
	for (int i = 0; !st && i < n; i++) st = acts[i].fwd ? run_forward(t, &acts[i], ps) : run_backward(t, &acts[i]);
	if (st) return st;
	bool mine = t->ps.pp_rank == t->ps.pp - 1 && t->ps.tp_rank == 0;
	double mins = (mgt_now() - t->io->start_time) / 60.0, limit = t->a->exit_duration_in_mins;
	double v[8] = { mine ? ps->num : 0, mine ? ps->den : 0, mgt_interrupted ? 1 : 0, limit > 0 && mins > limit,
			trainer_async_running(t), mine ? ps->sop : 0, mine ? ps->masked : 0, mine ? ps->correct : 0 };
	mgt_comm *w = t->ps.world;
	/* BERT's sop loss and accuracy counts ride along (GPT's 5 values as before) */
	if (w->size > 1 && (st = w->ops->allreduce(w, v, trainer_bert(t) ? 8 : 5, MGT_DT_F64, MGT_RED_SUM))) return st;
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

/* ---- gradients and the optimizer step (megatron-reference.md section 10) ---- */

typedef enum { DP_ALLREDUCE_GRADS, DP_REDUCE_SCATTER_GRADS, DP_ALLGATHER_PARAMS } dp_op;

static int chunk_of(const trainer *t, const mgt_model *m)
{
	int c = 0;
	while (t->chunk[c] != m) c++;
	return c;
}

/* --grad-reduce-in-bf16: the chunk's gradients rounded to bf16 (through its bf16 copy), as a
 * bf16 main_grad accumulates them: after each micro-batch's backward that no reduction follows
 * (the reduction rounds them itself). */
static void round_grads(trainer *t, int c)
{
	mgt_model *m = t->chunk[c];
	size_t n = mgt_model_tensors(m)->buf_numel;
	t->be->ops->cast(t->be, t->g16[c], MGT_DT_BF16, mgt_model_grads(m), n);
	t->be->ops->widen(t->be, mgt_model_grads(m), t->g16[c], MGT_DT_BF16, n);
}

/* The 16-bit part of a gradient bucket's reduction: back into the fp32 buffer (the whole bucket
 * after an all-reduce, this rank's shard after a reduce-scatter), once the reduction is done. */
static void widen_bucket(trainer *t, int c, int b)
{
	mgt_model *m = t->chunk[c];
	const mgt_tensor_table *tt = mgt_model_tensors(m);
	mgt_comm *dp = bucket_comm(t, &tt->buckets[b]);
	size_t n = tt->buckets[b].numel, lo = tt->buckets[b].offset;
	if (t->a->use_distributed_optimizer) lo += (size_t)dp->rank * (n / (size_t)dp->size), n /= (size_t)dp->size;
	t->be->ops->widen(t->be, mgt_model_grads(m) + lo, (const uint16_t *)t->g16[c] + lo, MGT_DT_BF16, n);
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
	mgt_comm *dp = bucket_comm(t, &tt->buckets[b]);
	float *x = (op == DP_ALLGATHER_PARAMS ? mgt_model_params(m) : mgt_model_grads(m)) + tt->buckets[b].offset;
	size_t n = tt->buckets[b].numel, part = n / (size_t)dp->size, own = (size_t)dp->rank * part;
	if (op == DP_ALLGATHER_PARAMS) return dp->ops->allgather(dp, x, x + own, part, MGT_DT_F32);
	/* averaged over data parallelism: expert gradients are summed over the expert-data-parallel
	 * group and scaled by 1 / DP (Megatron: edp/dp, then the EDP average) */
	if (!t->a->calculate_per_token_loss) t->be->ops->scale(t->be, x, n, 1.0f / (float)t->ps.dp);
	void *g = x;
	mgt_elem_type gt = MGT_DT_F32;
	if (t->g16) {
		g = (uint16_t *)t->g16[chunk_of(t, m)] + tt->buckets[b].offset, gt = MGT_DT_BF16;
		t->be->ops->cast(t->be, g, gt, x, n);
	}
	if (op == DP_ALLREDUCE_GRADS) return dp->ops->allreduce(dp, g, n, gt, MGT_RED_SUM);
	return dp->ops->reduce_scatter(dp, (char *)g + own * mgt_elem_size(gt), g, part, gt);
}

/* Buckets [from, nbuckets) of a chunk's flat buffer. */
static mgt_status dp_buckets(trainer *t, mgt_model *m, dp_op op, int from)
{
	mgt_status st = MGT_OK;
	for (int b = from; !st && b < mgt_model_tensors(m)->nbuckets; b++) st = dp_bucket(t, m, b, op);
	return st;
}

/* Wait for the gradient groups' queued operations (NCCL on its own stream). */
static mgt_status wait_dp(trainer *t)
{
	mgt_comm *g[] = { t->ps.dp_comm, t->ps.dpcp_comm, t->ps.edp_comm };
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < 3; i++)
		if (i == 0 || (g[i] != g[0] && (i < 2 || g[i] != g[1]))) st = mgt_comm_wait(g[i]);
	return st;
}

static dp_op grad_op(const trainer *t)
{
	return t->a->use_distributed_optimizer ? DP_REDUCE_SCATTER_GRADS : DP_ALLREDUCE_GRADS;
}

/* The layer from which each bucket's gradients are complete during the backward (see
 * mgt_grad_hook): the lowest decoder layer among its tensors; INT_MAX for the output layer and
 * final norm, INT_MIN when it holds an embedding. */
static mgt_status plan_overlap(trainer *t)
{
	if (!t->a->overlap_grad_reduce || dpcp(t) == 1) return MGT_OK;
	t->last_bwd = mgt_malloc((size_t)t->V * sizeof *t->last_bwd);
	t->buckets_done = mgt_malloc((size_t)t->V * sizeof *t->buckets_done);
	t->bucket_ready = mgt_malloc((size_t)t->V * sizeof *t->bucket_ready);
	if (!t->last_bwd || !t->buckets_done || !t->bucket_ready) return MGT_ERR_NOMEM;
	memset(t->bucket_ready, 0, (size_t)t->V * sizeof *t->bucket_ready);
	for (int i = 0; i < t->n_acts; i++) if (!t->acts[i].fwd) t->last_bwd[t->acts[i].chunk] = i;
	for (int c = 0; c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		int *ready = t->bucket_ready[c] = mgt_malloc((size_t)tt->nbuckets * sizeof *ready);
		if (!ready) return MGT_ERR_NOMEM;
		t->buckets_done[c] = 0;
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
static mgt_status grad_ready(void *ctx, mgt_model *m, int done_from_layer)
{
	trainer *t = ctx;
	int c = chunk_of(t, m);
	int nb = mgt_model_tensors(m)->nbuckets, *done = &t->buckets_done[c];
	mgt_status st = MGT_OK;
	while (!st && *done < nb && done_from_layer <= t->bucket_ready[c][*done]) st = dp_bucket(t, m, (*done)++, grad_op(t));
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
static mgt_status global_norm(trainer *t, bool params, double *norm)
{
	/* shards of the distributed optimizer partition everything over the world (experts over
	 * EP x EDP); otherwise the data-parallel replicas agree, except that expert rows differ
	 * between expert-parallel ranks: those sums also go over the EP group */
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
	mgt_comm *g = distopt ? t->ps.world : t->ps.mp_comm, *e = host_comm(t->ps.ep_comm, t->ps.host_ep);
	mgt_status st = ep ? e->ops->allreduce(e, &ss[1], 1, MGT_DT_F64, MGT_RED_SUM) : MGT_OK;
	ss[0] += ss[1];
	if (!st && g->size > 1) st = g->ops->allreduce(g, ss, 1, MGT_DT_F64, MGT_RED_SUM);
	*norm = sqrt(ss[0]);
	return st;
}

/* fp16: divide this rank's gradient shards by the loss scale (a power of two: exact unless a
 * value under- or overflows), as Megatron's _unscale_main_grads_and_check_for_nan. */
static void unscale_grads(trainer *t, double tokens)
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
static mgt_status reduce_grads(trainer *t)
{
	mgt_status st = MGT_OK;
	for (int c = 0; !st && dpcp(t) > 1 && c < t->V; c++) {
		st = dp_buckets(t, t->chunk[c], grad_op(t), t->buckets_done ? t->buckets_done[c] : 0);
		if (t->buckets_done) t->buckets_done[c] = 0;
	}
	if (!st) st = wait_dp(t);
	for (int c = 0; !st && t->g16 && dpcp(t) > 1 && c < t->V; c++)
		for (int b = 0; b < mgt_model_tensors(t->chunk[c])->nbuckets; b++) widen_bucket(t, c, b);
	for (int c = 0; !st && c < t->V; c++) st = mgt_model_finish_grads(t->chunk[c]);
	return st;
}

/* --grad-reduce-in-bf16 (Megatron's bf16 main_grad buffer, megatron/core/distributed/
 * distributed_data_parallel.py with grad_reduce_in_fp32 off): a bf16 copy of each chunk's
 * gradient buffer.  The gradients still accumulate in the fp32 buffer, rounded to bf16 after each
 * micro-batch (round_grads), and the data-parallel reduction moves the bf16 copy. */
static mgt_status alloc_grad16(trainer *t)
{
	if (!t->a->grad_reduce_in_bf16 || t->eval_only) return MGT_OK;
	if (!(t->g16 = mgt_malloc((size_t)t->V * sizeof *t->g16))) return MGT_ERR_NOMEM;
	memset(t->g16, 0, (size_t)t->V * sizeof *t->g16);
	for (int c = 0; c < t->V; c++) {
		size_t n = mgt_model_tensors(t->chunk[c])->buf_numel;
		if (!(t->g16[c] = t->be->ops->alloc(t->be, (n ? n : 1) * 2))) return MGT_ERR_NOMEM;
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

static bool optimizer_step(trainer *t, double lr, double gnorm)
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

/* ---- Mixture of Experts ---- */

/* The ordinal among the model's MoE layers of each chunk's first MoE layer (a chunk's MoE layers
 * are consecutive among the model's), into t->moe_first [V]. */
static mgt_status moe_first_ordinals(trainer *t)
{
	int *layers = mgt_malloc((size_t)t->a->model.num_layers * sizeof *layers);
	t->moe_first = mgt_malloc((size_t)t->V * sizeof *t->moe_first);
	if (!layers || !t->moe_first) {
		free(layers);
		return MGT_ERR_NOMEM;
	}
	for (int c = 0; c < t->V; c++) {
		int k = mgt_model_moe_layers(t->chunk[c], layers), o = 0;
		for (int l = 0; k && l < layers[0]; l++) o += mgt_moe_is_layer(&t->a->model, l);
		t->moe_first[c] = o;
	}
	free(layers);
	return MGT_OK;
}

mgt_status trainer_moe_step(trainer *t)
{
	int E = (int)t->a->model.num_experts, n = t->n_moe;
	size_t all = (size_t)n * (size_t)(2 + E); /* moe_aux, moe_z and moe_tok side by side */
	memset(t->moe_aux, 0, all * sizeof(double));
	mgt_status st = t->moe_first ? MGT_OK : moe_first_ordinals(t);
	for (int c = 0; !st && c < t->V; c++) {
		int o = t->moe_first[c];
		mgt_model_moe_take_stats(t->chunk[c], t->moe_aux + o, t->moe_z + o, t->moe_tok + (size_t)o * E);
	}
	mgt_comm *cs[] = { host_comm(t->ps.pp_comm, t->ps.host_pp), host_comm(t->ps.dp_comm, t->ps.host_dp) };
	for (int i = 0; !st && i < 2; i++)
		if (cs[i]->size > 1) st = cs[i]->ops->allreduce(cs[i], t->moe_aux, all, MGT_DT_F64, MGT_RED_SUM);
	for (int c = 0; !st && c < t->V; c++)
		st = mgt_model_moe_update_bias(t->chunk[c], t->moe_tok + (size_t)t->moe_first[c] * E);
	double per = 1.0 / ((double)t->a->num_microbatches * t->ps.dp);
	t->moe_lb = t->moe_zl = 0;
	for (int i = 0; i < n; i++) {
		t->moe_aux[i] *= per;
		t->moe_z[i] *= per;
		t->moe_lb += t->moe_aux[i] / n;
		t->moe_zl += t->moe_z[i] / n;
	}
	return st;
}

/* ---- one iteration ---- */

/* The distributed optimizer's parameter all-gather after a step (init: the fp8 weights' first
 * cast only, before the first forward): --fp8-param-gather's packed fp8 weights, else the fp32
 * buffer. */
static mgt_status gather_params(trainer *t, mgt_model *m, bool init)
{
	bool done = false;
	mgt_status st = t->a->fp8.param_gather ? mgt_model_fp8_gather_params(m, &done) : MGT_OK;
	if (st || done || init || !t->a->use_distributed_optimizer || dpcp(t) == 1) return st;
	return dp_buckets(t, m, DP_ALLGATHER_PARAMS, 0);
}

static mgt_status train_step(trainer *t, double *loss, double *lr, double *gnorm, bool *skipped, bool *intr)
{
	for (int c = 0; c < t->V; c++) {
		mgt_model *m = t->chunk[c];
		t->be->ops->zero(t->be, mgt_model_grads(m), mgt_model_tensors(m)->buf_numel * sizeof(float));
	}
	for (int c = 0; c < t->V; c++) /* Megatron's MoEAuxLossAutoScaler scale: loss scale / micro-batches */
		mgt_model_set_aux_scale(t->chunk[c], (float)(t->scaler.scale / (double)t->a->num_microbatches));
	pass ps = { .split = MGT_SPLIT_TRAIN, .base = t->consumed_train, .train = true };
	mgt_status st = run_pass(t, t->acts, t->n_acts, &ps, intr);
	*loss = ps.num / (ps.den > 0 ? ps.den : 1);
	t->sop_loss = ps.sop / (ps.den > 0 ? ps.den : 1);
	t->t_fwd = t->t_bwd = 0;
	for (int c = 0; c < t->V; c++) {
		double f, b;
		mgt_model_take_times(t->chunk[c], &f, &b);
		t->t_fwd += f;
		t->t_bwd += b;
	}
	if (!st) st = reduce_grads(t);
	if (!st && t->n_moe) st = trainer_moe_step(t);
	if (!st) unscale_grads(t, ps.den);
	if (!st) st = global_norm(t, false, gnorm);
	if (!st && t->dumping && t->dump.iters == 1)
		st = t->be->ops->download(t->be, t->dump.grads, mgt_model_grads(t->model),
					  mgt_model_tensors(t->model)->buf_numel * sizeof(float));
	if (st) return st;
	double t0 = mgt_now();
	*lr = mgt_lr_get(&t->sched);
	*skipped = !isfinite(*loss) || !optimizer_step(t, *lr, *gnorm);
	/* an inf/NaN gradient anywhere makes the norm (summed over the job) inf/NaN on every rank */
	mgt_loss_scaler_update(&t->scaler, !isfinite(*gnorm));
	for (int c = 0; !st && !*skipped && c < t->V; c++) st = gather_params(t, t->chunk[c], false);
	if (!st) st = wait_dp(t);
	t->be->ops->sync(t->be);
	t->t_opt = mgt_now() - t0;
	if (!*skipped) t->sched.num_steps += t->a->global_batch_size;
	return st;
}

/* ---- evaluation ---- */

/* --eval-iters global batches of split sp from sample *consumed on (advanced), as Megatron's
 * evaluate: the token-weighted mean loss. */
static mgt_status evaluate(trainer *t, mgt_split sp, int64_t *consumed, double *loss, double *tokens)
{
	double num = 0, den = 0, sop = 0;
	t->eval_masked = t->eval_correct = 0;
	for (int64_t it = 0; it < t->a->eval_iters; it++) {
		pass ps = { .split = sp, .base = *consumed, .train = false };
		mgt_status st = run_pass(t, t->eval_acts, t->n_eval_acts, &ps, NULL);
		if (st) return st;
		num += ps.num;
		den += ps.den;
		sop += ps.sop;
		t->eval_masked += ps.masked;
		t->eval_correct += ps.correct;
		*consumed += t->a->global_batch_size;
	}
	for (int c = 0; c < t->V; c++) {
		double f, b;
		mgt_model_take_times(t->chunk[c], &f, &b);
	}
	*loss = num / (den > 0 ? den : 1);
	t->sop_loss = sop / (den > 0 ? den : 1);
	if (tokens) *tokens = den;
	return MGT_OK;
}

/* Validation during training (what NULL) or at its end; the test split at the end, from its
 * first sample (Megatron's pretrain: "on validation set", then "on test set"). */
static mgt_status validate(trainer *t, mgt_split sp, const char *what)
{
	if (!t->a->eval_iters || data_len(t, sp) <= 0) return MGT_OK;
	double loss;
	int64_t test_from = 0;
	mgt_status st = evaluate(t, sp, sp == MGT_SPLIT_TEST ? &test_from : &t->consumed_valid, &loss, NULL);
	if (!st) trainer_log_validation(t, what, sp == MGT_SPLIT_TEST, loss);
	return st;
}

/* ---- the loop ---- */

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
	if (t->dumping) {
		int64_t i = t->dump.iters - 1;
		t->dump.lm_loss[i] = loss; t->dump.lr[i] = lr; t->dump.grad_norm[i] = gnorm; t->dump.sop_loss[i] = t->sop_loss;
		t->dump.moe_lb[i] = t->moe_lb; t->dump.moe_zl[i] = t->moe_zl;
	}
}

/* The communicators in --comm-log order, with their JSON names. */
static int comm_list(trainer *t, mgt_comm **c, const char **names)
{
	mgt_comm *all[] = { t->ps.tp_comm, t->ps.dp_comm, t->ps.pp_comm, t->ps.emb_comm, t->ps.mp_comm, t->ps.world,
			    t->ps.ep_comm, t->ps.edp_comm, t->ps.cp_comm, t->ps.dpcp_comm };
	const char *nm[] = { "tensor", "data", "pipeline", "embedding", "model", "world", "expert", "expert-data",
			     "context", "data-context" };
	int n = 0;
	for (int i = 0; i < 10; i++) {
		/* the expert groups with expert parallelism only (with ep 1 expert-data is the data group),
		 * the context groups with context parallelism only (with cp 1 data-context is the data group) */
		if ((i == 6 || i == 7) && t->ps.ep <= 1) continue;
		if (i >= 8 && t->ps.cp <= 1) continue;
		c[n] = all[i];
		names[n++] = nm[i];
	}
	return n;
}

/* --comm-log: bytes each group sent during one training iteration (parallel.h's ring convention). */
static void log_comm(trainer *t, const double *before, const uint64_t *calls_before)
{
	mgt_comm *c[10];
	const char *nm[10];
	int n = comm_list(t, c, nm);
	if (!t->comm_log) return;
	fprintf(t->comm_log, "{\"iteration\": %lld, \"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
		"\"cp_rank\": %d, \"bytes\": {", (long long)t->iteration, t->ps.world_rank, t->ps.tp_rank, t->ps.pp_rank,
		t->ps.dp_rank, t->ps.cp_rank);
	for (int i = 0; i < n; i++) fprintf(t->comm_log, "%s\"%s\": %.17g", i ? ", " : "", nm[i], c[i]->bytes_sent - before[i]);
	fprintf(t->comm_log, "}, \"calls\": {");
	for (int i = 0; i < n; i++)
		fprintf(t->comm_log, "%s\"%s\": %llu", i ? ", " : "", nm[i], (unsigned long long)(c[i]->calls - calls_before[i]));
	fprintf(t->comm_log, "}");
	if (t->ps.ep > 1) { /* the routed rows behind the expert group's bytes (mgt_model_moe_dispatch_counts) */
		double d[3] = { 0, 0, 0 };
		for (int k = 0; k < t->V; k++) {
			double x[3];
			mgt_model_moe_dispatch_counts(t->chunk[k], x);
			for (int i = 0; i < 3; i++) d[i] += x[i];
		}
		fprintf(t->comm_log, ", \"moe_rows\": {\"sent\": %.17g, \"received\": %.17g, \"dispatches\": %.17g}",
			d[0] - t->moe_disp[0], d[1] - t->moe_disp[1], d[2] - t->moe_disp[2]);
		memcpy(t->moe_disp, d, sizeof d);
	}
	fprintf(t->comm_log, "}\n");
	fflush(t->comm_log);
}

static void comm_snapshot(trainer *t, double *bytes, uint64_t *calls)
{
	mgt_comm *c[10];
	const char *nm[10];
	int n = comm_list(t, c, nm);
	for (int i = 0; i < n; i++) {
		bytes[i] = c[i]->bytes_sent;
		calls[i] = c[i]->calls;
	}
}

static mgt_status train_loop(trainer *t)
{
	mgt_args *a = t->a;
	t->int_t0 = mgt_now();
	while (t->iteration < a->train_iters) {
		double loss = 0, lr = 0, gnorm = 0, t0 = mgt_now();
		bool skipped = false, intr = false;
		double bytes[10];
		uint64_t calls[10];
		comm_snapshot(t, bytes, calls);
		mgt_status st = train_step(t, &loss, &lr, &gnorm, &skipped, &intr);
		if (st) return st;
		count_iteration(t, loss, lr, gnorm, skipped);
		log_comm(t, bytes, calls);
		if (t->async_all_done && (st = trainer_save_wait(t))) return st;
		if (a->log_params_norm && trainer_log_due(t) && (st = global_norm(t, true, &t->params_norm))) return st;
		trainer_log_iteration(t, loss, lr, gnorm, skipped, mgt_now() - t0);
		trainer_plan_iteration(t);
		if (at(t->iteration, a->eval_interval) && (st = validate(t, MGT_SPLIT_VALID, NULL))) return st;
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
	if (!st && a->eval_interval) st = validate(t, MGT_SPLIT_VALID, "on validation set");
	if (!st && a->eval_interval) st = validate(t, MGT_SPLIT_TEST, "on test set");
	return st;
}

static mgt_model_layout chunk_layout(const trainer *t, int c)
{
	const mgt_args *a = t->a;
	return (mgt_model_layout){
		.mbs = (int)a->micro_batch_size, .stage = c * t->ps.pp + t->ps.pp_rank, .num_stages = t->ps.pp * t->V,
		.slots = t->slots[c], .sequence_parallel = a->sequence_parallel,
		.distributed_optimizer = a->use_distributed_optimizer, .dp = dpcp(t), .bucket_size = a->ddp_bucket_size,
		.recompute = a->recompute, .cp_comm = a->cp_comm,
		.precision = a->bf16 ? MGT_PREC_BF16 : a->fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32,
		.fp32_residual_connection = a->fp32_residual_connection, .fp8 = a->fp8,
	};
}

/* The advice for the part of the memory that is largest. */
static const char *memory_advice(const trainer *t, const mgt_model_mem *m, size_t opt)
{
	size_t act = m->activations + m->workspace, par = m->params + m->grads;
	if (act >= opt && act >= par)
		return "lower --micro-batch-size or --seq-length, or raise --tensor-model-parallel-size (with "
		       "--sequence-parallel), --context-parallel-size or --pipeline-model-parallel-size";
	if (opt >= par && !t->a->use_distributed_optimizer && dpcp(t) > 1)
		return "add --use-distributed-optimizer, or raise --tensor-model-parallel-size or "
		       "--pipeline-model-parallel-size";
	return "raise --tensor-model-parallel-size or --pipeline-model-parallel-size";
}

/* Before anything large is allocated: what the chunks will take (mgt_model_measure, the
 * allocator's own sizes) plus the Adam moments, against what the backend can still allocate,
 * shared by the job's processes on this machine.  Error: MGT_ERR_NOMEM with the breakdown. */
static mgt_status check_memory(trainer *t)
{
	mgt_model_mem m = { 0 };
	size_t opt = 0;
	for (int c = 0; c < t->V; c++) {
		mgt_model_layout L = chunk_layout(t, c);
		mgt_model_mem x;
		size_t numel;
		mgt_status st = mgt_model_measure(&t->a->model, &L, &t->ps, &x, &numel);
		if (st) return st;
		m.params += x.params; m.grads += x.grads; m.activations += x.activations; m.workspace += x.workspace;
		opt += mgt_adamw_bytes(t->a->use_distributed_optimizer ? numel / (size_t)dpcp(t) : numel);
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

/* The model chunks of this rank and the schedules that drive them. */
static mgt_status setup_pipeline(trainer *t)
{
	mgt_args *a = t->a;
	int P = t->ps.pp, r = t->ps.pp_rank, M = (int)a->num_microbatches;
	int G = (int)a->microbatch_group_size_per_vp_stage;
	t->V = a->virtual_pipeline_model_parallel_size > 0 ? (int)a->virtual_pipeline_model_parallel_size : 1;
	mgt_status st = mgt_parallel_sched_check(P, M, t->V, G);
	if (!st) st = mgt_parallel_sched_build(P, r, M, t->V, G, false, &t->acts, &t->n_acts);
	if (!st) st = mgt_parallel_sched_build(P, r, M, t->V, G, true, &t->eval_acts, &t->n_eval_acts);
	if (st) return st;
	t->chunk = mgt_malloc((size_t)t->V * sizeof *t->chunk);
	t->slots = mgt_malloc((size_t)t->V * sizeof *t->slots);
	t->mb_scale = mgt_malloc((size_t)M * sizeof *t->mb_scale);
	if (!t->chunk || !t->slots || !t->mb_scale) return MGT_ERR_NOMEM;
	memset(t->chunk, 0, (size_t)t->V * sizeof *t->chunk);
	for (int64_t l = 0; l < a->model.num_layers; l++) t->n_moe += mgt_moe_is_layer(&a->model, l);
	if (t->n_moe) {
		size_t n = (size_t)t->n_moe;
		if (!(t->moe_aux = mgt_malloc(n * (size_t)(2 + a->model.num_experts) * sizeof(double)))) return MGT_ERR_NOMEM;
		t->moe_z = t->moe_aux + n; /* one buffer: the statistics are reduced in one call */
		t->moe_tok = t->moe_z + n;
	}
	for (int c = 0; c < t->V; c++) t->slots[c] = mgt_parallel_sched_chunk_slots(t->acts, t->n_acts, c);
	st = check_memory(t);
	for (int c = 0; !st && c < t->V; c++) {
		mgt_model_layout L = chunk_layout(t, c);
		st = mgt_model_create(&t->chunk[c], &a->model, &L, t->be, &t->ps);
	}
	t->model = t->chunk[0];
	return st;
}

static mgt_status init_params(trainer *t)
{
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < t->V; c++) st = mgt_model_init_params(t->chunk[c], (uint64_t)t->a->seed);
	return st;
}

/* Rank 0 builds the data index caches first; the others then read them. */
static mgt_status open_data_ordered(trainer *t)
{
	mgt_comm *w = t->ps.world;
	mgt_status st = w->rank == 0 ? open_data(t) : MGT_OK;
	if (w->size == 1) return st;
	if (!st) st = w->ops->barrier(w);
	if (!st && w->rank != 0) st = open_data(t);
	return st;
}

/* The GPU of this process: its rank on the node (OpenMPI, Slurm) modulo the GPUs it sees. */
static int local_device(const trainer *t, int ndev)
{
	const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	if (!v) v = getenv("SLURM_LOCALID");
	int r = v ? atoi(v) : t->ps.world_rank;
	return (r < 0 ? 0 : r) % ndev;
}

/* --device: the CUDA backend for cuda (or auto with a GPU present), else the CPU backend; the
 * GEMM precision from --bf16/--fp16; the fp16 loss scaler. */
static mgt_status setup_backend(trainer *t)
{
	mgt_args *a = t->a;
	const char *dev = a->device ? a->device : "auto";
	int ndev = strcmp(dev, "cpu") ? mgt_backend_cuda_devices() : 0;
	mgt_status st = MGT_OK;
	if (!strcmp(dev, "cuda") && ndev == 0) {
		t->be = mgt_backend_cuda_create(0, &st); /* says why: no CUDA build, no GPU */
		if (!t->be && !st) st = mgt_err(MGT_ERR_USAGE, "--device cuda: no CUDA device");
	} else if (ndev > 0) {
		t->be = mgt_backend_cuda_create(local_device(t, ndev), &st);
	} else if (!(t->be = mgt_backend_cpu_create((int)a->threads))) {
		st = MGT_ERR_NOMEM;
	}
	if (st || !t->be) return st ? st : MGT_ERR_NOMEM;
	t->be->precision = a->bf16 ? MGT_PREC_BF16 : a->fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32;
	char why[256];
	if (a->fp8.format != MGT_FP8_OFF && !mgt_backend_supports(t->be, MGT_OP_gemm_fp8, mgt_precision_dtype(t->be->precision), why, sizeof why))
		return mgt_err(MGT_ERR_USAGE, "--fp8-format %s: %s (or run on the CPU with --device cpu)", a->fp8_format, why);
	if (!a->fp16) return mgt_loss_scaler_init(&t->scaler, 1.0, 1.0, 1.0, 1, 1);
	return mgt_loss_scaler_init(&t->scaler, a->loss_scale, a->initial_loss_scale, a->min_loss_scale,
				    a->loss_scale_window, a->hysteresis);
}

/* Megatron's validate_args: --data-path without --split takes the legacy "969, 30, 1", saying so. */
static mgt_status default_split(trainer *t)
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
static mgt_status preflight(const mgt_args *a)
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

static mgt_status setup(trainer *t)
{
	mgt_args *a = t->a;
	a->world_size = mgt_parallel_world_size();
	mgt_status st = t->eval_only ? MGT_OK : trainer_plan_check(t);
	if (!st) st = trainer_checkpoint_args(a);
	if (!st) st = default_split(t);
	if (!st) st = setup_tokenizer(t);
	if (!st) st = mgt_args_finalize(a);
	if (!st && !t->eval_only && mgt_parallel_world_rank() == 0) st = preflight(a);
	if (!t->eval_only) st = mgt_parallel_agree_root(st); /* rank 0's refusal ends every rank alike */
	if (!st && a->debug_dump && a->world_size > 1)
		st = mgt_err(MGT_ERR_USAGE, "--debug-dump works with one process only");
	if (!st) st = mgt_parallel_init_ep(&t->ps, (int)a->tensor_model_parallel_size, (int)a->pipeline_model_parallel_size,
					   (int)a->context_parallel_size,
					   a->expert_model_parallel_size > 0 ? (int)a->expert_model_parallel_size : 1);
	if (st) return st;
	if ((st = setup_backend(t))) return st;
	if ((st = mgt_parallel_to_device(&t->ps, t->be, a->overlap_grad_reduce))) return st;
	t->rss_baseline = trainer_peak_rss();
	if (!t->be->host_memory) {
		char what[64];
		t->dev_free0 = mgt_backend_cuda_mem_available(t->be, what, sizeof what);
	}
	st = setup_pipeline(t);
	if (!st && !t->eval_only) st = trainer_log_start(t);
	if (!st) st = setup_schedule(t);
	if (!st) st = plan_overlap(t);
	if (!st) st = alloc_grad16(t);
	if (!st && !t->eval_only) st = setup_optimizer(t);
	bool loaded = false;
	if (!st) st = trainer_load(t, &loaded);
	if (!st && !loaded && t->eval_only)
		st = mgt_err(MGT_ERR_FORMAT, "--load %s: no checkpoint to evaluate (no %s, no iteration)",
			     a->load ? a->load : "(none)", MGT_CKPT_TRACKER);
	if (!st && !loaded) st = init_params(t);
	for (int c = 0; !st && !t->eval_only && c < t->V; c++) st = gather_params(t, t->chunk[c], true);
	if (!st) st = open_data_ordered(t);
	if (!st) st = alloc_batch(t);
	if (!st && a->metrics_file && t->io->log && !(t->metrics = fopen(a->metrics_file, t->iteration ? "a" : "w")))
		st = mgt_err(MGT_ERR_IO, "%s: cannot open for writing", a->metrics_file);
	if (!st && a->fp8_trace && t->ps.world_rank == 0 && !(t->fp8_trace = fopen(a->fp8_trace, t->iteration ? "a" : "w")))
		st = mgt_err(MGT_ERR_IO, "--fp8-trace %s: cannot open for writing", a->fp8_trace);
	if (!st && a->comm_log) {
		char path[4096];
		snprintf(path, sizeof path, "%s.rank%d.jsonl", a->comm_log, t->ps.world_rank);
		if (!(t->comm_log = fopen(path, t->iteration ? "a" : "w")))
			st = mgt_err(MGT_ERR_IO, "%s: cannot open for writing", path);
	}
	return st;
}

static void teardown(trainer *t)
{
	trainer_save_abandon(t);
	if (t->metrics) fclose(t->metrics);
	if (t->comm_log) fclose(t->comm_log);
	if (t->fp8_trace) fclose(t->fp8_trace);
	trainer_dump_free(t);
	free_batch(t);
	for (int i = 0; i < t->nshard; i++) mgt_adamw_free(&t->shard[i].opt);
	free(t->shard);
	json_decref((json_t *)t->hf_meta);
	for (int c = 0; t->chunk && c < t->V; c++) mgt_model_free(t->chunk[c]);
	free(t->chunk);
	free(t->slots);
	free(t->mb_scale);
	free(t->moe_aux); /* moe_z and moe_tok point into it */
	free(t->moe_first);
	for (int c = 0; t->bucket_ready && c < t->V; c++) free(t->bucket_ready[c]);
	free(t->bucket_ready);
	free(t->last_bwd);
	free(t->buckets_done);
	for (int c = 0; t->g16 && c < t->V; c++) t->be->ops->free(t->be, t->g16[c]);
	free(t->g16);
	free(t->acts);
	free(t->eval_acts);
	mgt_gpt_data_close(t->data);
	trainer_masked_free(t);
	if (t->ps.world) mgt_parallel_free(&t->ps); /* device communicators need the backend */
	if (t->be) mgt_backend_destroy(t->be);
	mgt_tok_free(t->tok);
}

/* With activation recomputation, one line on what it saves on this rank (the activation bytes
 * the chunks allocated, and what mgt_model_measure computes for the same layout without it). */
static mgt_status log_recompute(trainer *t)
{
	const mgt_recompute *r = &t->a->recompute;
	if (!t->io->log || r->granularity == MGT_RECOMPUTE_NONE) return MGT_OK;
	size_t with = 0, without = 0;
	for (int c = 0; c < t->V; c++) {
		mgt_model_layout L = chunk_layout(t, c);
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

mgt_status mgt_train_run(mgt_args *a, const mgt_train_io *io)
{
	trainer t = { .a = a, .io = io };
	mgt_status st = setup(&t);
	if (!st) st = log_recompute(&t);
	if (!st) {
		trainer_log_memory(&t, "before training");
		t.dumping = a->debug_dump != NULL;
		st = train_loop(&t);
		mgt_status st2 = t.dumping ? trainer_dump_write(&t) : MGT_OK;
		if (!st) st = st2;
		trainer_log_memory(&t, "after training");
	}
	mgt_status st_tb = trainer_log_end(&t);
	if (!st) st = st_tb;
	teardown(&t);
	return st;
}

/* ---- evaluation of a checkpoint (mgt-eval loss) ---- */

mgt_status mgt_train_evaluate(mgt_args *a, const mgt_train_io *io, const mgt_train_eval_opts *o,
			      mgt_train_eval_result *r)
{
	trainer t = { .a = a, .io = io, .eval_only = true };
	memset(r, 0, sizeof *r);
	a->no_load_optim = true;
	a->save = NULL;
	mgt_status st = a->load || a->pretrained_checkpoint ? MGT_OK : mgt_err(MGT_ERR_USAGE, "--load DIR is required (the checkpoint to evaluate)");
	if (!st) st = setup(&t);
	mgt_split sp = o->test ? MGT_SPLIT_TEST : MGT_SPLIT_VALID;
	int64_t one = a->eval_iters * a->global_batch_size, from = o->from_sample;
	if (!st && from < 0) from = o->test ? 0 : t.consumed_valid >= one ? t.consumed_valid - one : 0;
	if (!st && data_len(&t, sp) <= 0)
		st = mgt_err(MGT_ERR_INPUT, "the %s split has no samples (--split %s, --eval-iters %lld, --eval-interval %lld): "
			     "give it a share in --split (say --split 949,50,1)%s", o->test ? "test" : "validation",
			     a->split ? a->split : "(none)", (long long)a->eval_iters, (long long)a->eval_interval,
			     o->test ? ", or evaluate --eval-split valid" : "");
	if (!st && a->eval_iters <= 0) st = mgt_err(MGT_ERR_USAGE, "--eval-iters %lld: nothing to evaluate", (long long)a->eval_iters);
	r->iteration = t.iteration;
	r->first_sample = from;
	double loss = 0, tokens = 0;
	if (!st) st = evaluate(&t, sp, &from, &loss, &tokens);
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
	teardown(&t);
	return st;
}
