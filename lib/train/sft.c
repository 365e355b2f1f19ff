/* lib/train/sft.c: --sft's data (Megatron's SFTDataset, lib/data/sft.c) in the trainer: the
 * splits as contiguous line ranges of the JSONL file (BlendedMegatronDatasetBuilder's
 * arange(round(lo N), round(hi N)) over lines, unshuffled), sample k of a split its line
 * k % length (SFTDataset.__getitem__ wraps), and the micro-batch's arrays: tokens, labels (-100
 * read as 0: no loss there), loss mask, positions restarting at every conversation (RoPE too, as
 * the THD path takes them), and document starts from cu_seqlens for the attention.  Under
 * context parallelism each rank keeps its rows of every conversation (Megatron's per-document
 * split, mgt_sft_cp_indices), the document starts stay the whole micro-batch's, and every rank's
 * rows go to the model (mgt_microbatch.cp_rows). */
#include "train_impl.h"

#include <stdlib.h>
#include <string.h>

struct trainer_sft {
	mgt_sft_data *d;
	mgt_chat_config chat; /* --sft-tokenizer-prompt-format default: the tokenizer's chat template */
	uint64_t beg[3], end[3];
	int32_t *a;     /* one sample: tokens, labels, positions [S] each, cu_seqlens [S + 1], and under
			 * context parallelism a rank's positions [S / cp] */
	float *mask;    /* [S] */
};

bool trainer_sft(const trainer *t) { return t->a->sft; }

mgt_status trainer_sft_open(trainer *t)
{
	const mgt_args *a = t->a;
	const int S = (int)a->model.seq_length;
	trainer_sft_data *s = calloc(1, sizeof *s);
	if (!s) return MGT_ERR_NOMEM;
	t->sft = s;
	mgt_sft_config c = { .path = a->data_path, .tok = t->tok, .seq_length = S, .cp = (int)a->context_parallel_size };
	mgt_gpt_split sp;
	mgt_status st = mgt_sft_format_parse(a->sft_tokenizer_prompt_format, &c.format);
	if (!st) st = mgt_gpt_split_parse(a->split, &sp);
	if (!st && c.format == MGT_SFT_DEFAULT) st = mgt_chat_config_open(&s->chat, NULL, a->tokenizer_model);
	c.chat = &s->chat;
	if (!st) st = mgt_sft_open(&c, &s->d);
	for (int k = 0; !st && k < 3; k++) mgt_gpt_split_range(&sp, (mgt_split)k, (uint64_t)mgt_sft_lines(s->d), &s->beg[k], &s->end[k]);
	if (!st && !(s->a = malloc((5 * (size_t)S + 1) * sizeof *s->a))) st = MGT_ERR_NOMEM;
	if (!st && !(s->mask = malloc((size_t)S * sizeof *s->mask))) st = MGT_ERR_NOMEM;
	return st;
}

int64_t trainer_sft_len(const trainer *t, mgt_split sp)
{
	return t->sft ? (int64_t)(t->sft->end[sp] - t->sft->beg[sp]) : 0;
}

/* Context parallelism: every rank's rows of sample x, row j of the micro-batch, into mb_cprows
 * (rank q's local row i*b + j is global row idx[i]*b + j). */
static mgt_status cp_rows(trainer *t, const mgt_sft_sample *x, int j)
{
	const int S = (int)t->a->model.seq_length, b = (int)t->a->micro_batch_size, cp = t->ps.cp;
	const size_t Tl = (size_t)(S / cp) * (size_t)b;
	int32_t *idx = t->sft->a + 4 * S + 1;
	mgt_status st = MGT_OK;
	for (int q = 0; !st && cp > 1 && q < cp; q++) {
		st = mgt_sft_cp_indices(x->cu_seqlens, x->n_cu, S, cp, q, idx);
		for (int i = 0; !st && i < S / cp; i++) t->mb_cprows[q * Tl + (size_t)i * b + j] = idx[i] * b + j;
	}
	return st;
}

/* Row j of the micro-batch from line `line`. */
static mgt_status sft_row(trainer *t, int64_t line, int j)
{
	trainer_sft_data *s = t->sft;
	const int S = (int)t->a->model.seq_length, b = (int)t->a->micro_batch_size;
	mgt_sft_sample x = { s->a, s->a + S, s->a + 2 * S, s->a + 3 * S, s->mask, 0, 0 };
	mgt_status st = mgt_sft_get(s->d, line, &x);
	if (st) return st;
	for (int i = 0, k = 0; i < S; i++) {
		const size_t tt = (size_t)i * (size_t)b + (size_t)j;
		while (k + 1 < x.n_cu && x.cu_seqlens[k + 1] <= i) k++;
		t->mb_tokens[tt] = x.tokens[i];
		t->mb_labels[tt] = x.labels[i] < 0 ? 0 : x.labels[i];
		t->mb_mask[tt] = x.loss_mask[i];
		t->mb_pos[tt] = x.position_ids[i];
		t->mb_seg[tt] = x.cu_seqlens[k];
		t->mb_tokens_full += x.loss_mask[i];
	}
	return cp_rows(t, &x, j);
}

mgt_status trainer_sft_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k)
{
	const int b = (int)t->a->micro_batch_size;
	const int64_t first = base + (k * t->a->data_parallel_size + t->ps.dp_rank) * b, n = trainer_sft_len(t, sp);
	if (n <= 0) return mgt_err(MGT_ERR_INPUT, "the %s split of %s has no lines", mgt_split_name(sp), t->a->data_path);
	t->mb_tokens_full = 0;
	mgt_status st = MGT_OK;
	for (int j = 0; !st && j < b; j++) st = sft_row(t, (int64_t)t->sft->beg[sp] + (first + j) % n, j);
	const size_t Tl = (size_t)t->a->model.seq_length / (size_t)t->ps.cp * (size_t)b;
	if (!st && t->mb_cprows) trainer_cp_slice(t, t->mb_cprows + (size_t)t->ps.cp_rank * Tl);
	return st;
}

void trainer_sft_free(trainer *t)
{
	if (!t->sft) return;
	mgt_sft_close(t->sft->d);
	mgt_chat_config_close(&t->sft->chat);
	free(t->sft->a), free(t->sft->mask), free(t->sft);
	t->sft = NULL;
}
