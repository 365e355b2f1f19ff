/* lib/train/batch.c: the data: --data-path's datasets opened, and the micro-batches filled from
 * them (megatron/training/training.py: get_batch; megatron/core/utils.py:
 * get_batch_on_this_cp_rank). */
#include "train_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Split "--data-path" words into prefixes and optional weights (megatron/training/utils.py:
 * get_blend_from_list). */
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
	if (trainer_sft(t)) return trainer_sft_open(t);
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

/* Rank 0 builds the data index caches first; the others then read them. */
mgt_status trainer_open_data(trainer *t)
{
	mgt_comm *w = t->ps.world;
	mgt_status st = w->rank == 0 ? open_data(t) : MGT_OK;
	if (w->size == 1) return st;
	if (!st) st = w->ops->barrier(w);
	if (!st && w->rank != 0) st = open_data(t);
	return st;
}

/* Samples of split sp (GPT's or BERT's dataset). */
int64_t trainer_data_len(const trainer *t, mgt_split sp)
{
	if (trainer_sft(t)) return trainer_sft_len(t, sp);
	return trainer_masked(t) ? trainer_masked_len(t, sp) : mgt_gpt_data_len(t->data, sp);
}

mgt_status trainer_alloc_batch(trainer *t)
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
	if (ok && (t->a->reset_attention_mask || t->a->sft)) {
		t->mb_seg = mgt_malloc(T * 4), t->s_seg = mgt_malloc(S * 4);
		ok = t->mb_seg && t->s_seg;
	}
	if (ok && t->a->reset_position_ids && !trainer_masked(t)) ok = (t->mb_rpos = mgt_malloc(T * 4)) != NULL;
	if (ok && t->a->sft && t->ps.cp > 1) ok = (t->mb_cprows = mgt_malloc(T * 4)) != NULL; /* cp x T/cp */
	return ok ? MGT_OK : MGT_ERR_NOMEM;
}

void trainer_free_batch(trainer *t)
{
	void *p[] = { t->mb_tokens, t->mb_labels, t->mb_pos, t->mb_mask, t->s_tokens, t->s_labels, t->s_pos, t->s_mask,
		      t->mb_seg, t->s_seg, t->mb_rpos, t->mb_cprows };
	for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

void trainer_cp_slice(trainer *t, const int32_t *rows)
{
	int CP = t->ps.cp, r = t->ps.cp_rank, b = (int)t->a->micro_batch_size;
	if (CP <= 1) return;
	int64_t cb = t->a->model.seq_length / (2 * CP) * b;
	for (int64_t i = 0; i < 2 * cb; i++) {
		int64_t g = rows ? rows[i] : mgt_cp_row(cb, CP, r, i);
		t->mb_tokens[i] = t->mb_tokens[g];
		t->mb_labels[i] = t->mb_labels[g];
		t->mb_mask[i] = t->mb_mask[g];
		t->mb_pos[i] = t->mb_pos[g];
		if (t->mb_rpos) t->mb_rpos[i] = t->mb_rpos[g];
	}
}

/* Fill micro-batch k of the global batch starting at sample `base` of split sp, sequence-first
 * (megatron/training/datasets/data_samplers.py: micro-batch step k covers mbs*dp samples, of
 * which DP rank r takes [r*mbs, (r+1)*mbs)).  Validation cycles through its split. */
mgt_status trainer_load_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k)
{
	if (trainer_masked(t)) return trainer_masked_microbatch(t, sp, base, k);
	if (trainer_sft(t)) return trainer_sft_microbatch(t, sp, base, k);
	int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	int64_t first = base + (k * t->a->data_parallel_size + t->ps.dp_rank) * b;
	int64_t n = mgt_gpt_data_len(t->data, sp);
	if (n <= 0) return mgt_err(MGT_ERR_INPUT, "the %s split has no samples", sp == MGT_SPLIT_TRAIN ? "train" : "validation");
	t->mb_tokens_full = 0;
	for (int j = 0; j < b; j++) {
		int64_t idx = first + j;
		mgt_status st = mgt_gpt_data_sample(t->data, sp, idx % n, t->s_tokens, t->s_labels, t->s_mask, t->s_pos);
		if (st) return st;
		if (t->mb_seg) mgt_gpt_doc_starts(t->s_tokens, S, t->eod, t->s_seg);
		for (int i = 0; i < S; i++) {
			size_t tt = (size_t)i * (size_t)b + (size_t)j;
			if (t->mb_seg) t->mb_seg[tt] = t->s_seg[i];
			if (t->mb_rpos) t->mb_rpos[tt] = i;
			t->mb_tokens[tt] = t->s_tokens[i];
			t->mb_labels[tt] = t->s_labels[i];
			t->mb_mask[tt] = t->s_mask[i];
			t->mb_pos[tt] = t->s_pos[i];
			t->mb_tokens_full += t->s_mask[i];
		}
	}
	trainer_cp_slice(t, NULL);
	return MGT_OK;
}

/* The loss-mask sum of this rank's rows of the micro-batch (its chunks under context parallelism). */
double trainer_mask_sum(const trainer *t)
{
	double n = 0;
	const int64_t S = trainer_t5(t) ? t->a->model.decoder_seq_length : t->a->model.seq_length; /* the labels' */
	size_t T = (size_t)S * (size_t)t->a->micro_batch_size / (size_t)t->ps.cp;
	for (size_t i = 0; i < T; i++) n += t->mb_mask[i];
	return n;
}
