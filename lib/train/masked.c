/* lib/train/masked.c: BERT's data in mgt-train: Megatron's BERTMaskedWordPieceDataset
 * (lib/data masked*.c) over the sentence-level dataset of --data-path, read by the same
 * consumed-samples order as GPT's (megatron/training/datasets/data_samplers.py
 * MegatronPretrainingSampler), into sequence-first
 * micro-batches (examples/bert/pretrain_bert.py get_batch: tokens, types, labels, loss_mask,
 * padding_mask, is_random). */
#include "train_impl.h"

#include <stdlib.h>
#include <string.h>

/* The family's recipe picks the dataset: BERT's (encoder) or T5's (encoder-decoder). */
bool trainer_bert(const trainer *t) { return mgt_model_family(&t->a->model)->recipe == MGT_STACK_ENCODER; }
bool trainer_t5(const trainer *t) { return mgt_model_family(&t->a->model)->recipe == MGT_STACK_ENCODER_DECODER; }
bool trainer_masked(const trainer *t) { return trainer_bert(t) || trainer_t5(t); }

/* What the dataset needs of the tokenizer (mgt_masked_vocab_from_tok): every id, "##" pieces, specials. */
static mgt_status make_vocab(trainer *t)
{
	const mgt_tok *tok = t->tok;
	mgt_masked_vocab *v = &t->mvocab;
	const char *fam = trainer_t5(t) ? "t5" : "bert";
	if (!tok)
		return mgt_err(MGT_ERR_USAGE, "--model-family %s needs a WordPiece tokenizer (--tokenizer-type "
			       "BertWordPieceLowerCase or BertWordPieceCase with --vocab-file)", fam);
	mgt_status st = mgt_masked_vocab_from_tok(tok, v, &t->mv_sub);
	if (st == MGT_ERR_VOCAB)
		return mgt_err(MGT_ERR_USAGE, "--tokenizer-type %s has no [CLS], [SEP] or [MASK]: BERT needs a WordPiece "
			       "tokenizer (BertWordPieceLowerCase or BertWordPieceCase)", mgt_tok_type_name(tok));
	if (st) return st;
	if (trainer_t5(t) && v->n_sentinels <= 0)
		return mgt_err(MGT_ERR_USAGE, "--tokenizer-type %s has no sentinel tokens (<extra_id_N>): T5's span "
			       "corruption needs them; use BertWordPieceCase, which adds <extra_id_0..99> (Megatron asserts "
			       "the same)", mgt_tok_type_name(tok));
	return MGT_OK;
}

mgt_status trainer_masked_open(trainer *t, const uint64_t n[3])
{
	mgt_args *a = t->a; /* mock data is refused with the arguments (lib/args/finalize.c check_bert) */
	if (strchr(a->data_path, ' '))
		return mgt_err(MGT_ERR_USAGE, "--data-path '%s': %s takes one dataset prefix (blends are not "
			       "implemented for it)", a->data_path, trainer_t5(t) ? "T5" : "BERT");
	mgt_status st = make_vocab(t);
	if (st) return st;
	mgt_masked_config c = {
		.kind = trainer_t5(t) ? MGT_MASKED_T5 : MGT_MASKED_BERT, .path = a->data_path, .split = a->split,
		.seq_length = (int)a->model.seq_length, .decoder_seq_length = (int)a->model.decoder_seq_length,
		.binary_head = a->model.bert_binary_head && !trainer_t5(t),
		.mask_prob = a->mask_prob, .short_seq_prob = a->short_seq_prob, .seed = (uint32_t)a->seed,
		.cache_path = a->data_cache_path, .vocab = &t->mvocab,
	};
	memcpy(c.num_samples, n, sizeof c.num_samples);
	st = mgt_masked_data_open(&c, &t->mdata);
	if (!st && *mgt_masked_data_note(t->mdata) && t->io->log) fprintf(t->io->log, "%s\n", mgt_masked_data_note(t->mdata));
	return st;
}

mgt_status trainer_masked_alloc(trainer *t)
{
	size_t S = (size_t)t->a->model.seq_length, b = (size_t)t->a->micro_batch_size, T = S * b;
	size_t Sd = (size_t)t->a->model.decoder_seq_length, Td = Sd * b;
	t->mb_types = mgt_malloc(T * 4);
	t->mb_isr = mgt_malloc(b * 4);
	t->mb_pad = mgt_malloc(T * 8);
	t->s_i64 = mgt_malloc((5 * S + 6 * Sd) * 8);
	if (trainer_t5(t)) t->mb_dtok = mgt_malloc(Td * 4), t->mb_dpos = mgt_malloc(Td * 4);
	bool t5ok = !trainer_t5(t) || (t->mb_dtok && t->mb_dpos);
	return t->mb_types && t->mb_isr && t->mb_pad && t->s_i64 && t5ok ? MGT_OK : MGT_ERR_NOMEM;
}

int64_t trainer_masked_len(const trainer *t, mgt_split sp) { return t->mdata ? mgt_masked_data_len(t->mdata, sp) : 0; }

/* Sample idx of split sp into column j of the micro-batch (row t = i b + j). */
static mgt_status put_sample(trainer *t, mgt_split sp, int64_t idx, int j)
{
	const int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	int64_t *x = t->s_i64;
	mgt_bert_sample s = { .text = x, .types = x + S, .labels = x + 2 * S, .padding_mask = x + 3 * S,
			      .loss_mask = x + 4 * S };
	mgt_status st = mgt_masked_data_bert(t->mdata, sp, idx, &s);
	if (st) return st;
	for (int i = 0; i < S; i++) {
		size_t r = (size_t)i * (size_t)b + (size_t)j;
		t->mb_tokens[r] = (int32_t)s.text[i];
		t->mb_labels[r] = s.loss_mask[i] ? (int32_t)s.labels[i] : -1;
		t->mb_mask[r] = (float)s.loss_mask[i];
		t->mb_pos[r] = i;
		t->mb_types[r] = (int32_t)s.types[i];
		t->mb_pad[r] = s.padding_mask[i];
		t->mb_tokens_full += (double)s.loss_mask[i];
	}
	t->mb_isr[j] = s.is_random;
	return MGT_OK;
}

/* T5: sample idx of split sp into column j: the encoder's tokens, positions and padding mask
 * [S b], the decoder's tokens, positions, labels and loss mask [Sd b] (pretrain_t5.py get_batch;
 * the labels -1 where the loss mask is 0). */
static mgt_status put_t5_sample(trainer *t, mgt_split sp, int64_t idx, int j)
{
	const int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	const int Sd = (int)t->a->model.decoder_seq_length;
	int64_t *x = t->s_i64;
	mgt_t5_sample s = { .text_enc = x, .enc_mask = x + S, .text_dec = x + 2 * S, .dec_mask = x + 2 * S + Sd,
			    .labels = x + 2 * S + 2 * Sd, .loss_mask = x + 2 * S + 3 * Sd };
	mgt_status st = mgt_masked_data_t5(t->mdata, sp, idx, &s);
	if (st) return st;
	for (int i = 0; i < S; i++) {
		size_t r = (size_t)i * (size_t)b + (size_t)j;
		t->mb_tokens[r] = (int32_t)s.text_enc[i];
		t->mb_pos[r] = i;
		t->mb_pad[r] = s.enc_mask[i];
	}
	for (int i = 0; i < Sd; i++) {
		size_t r = (size_t)i * (size_t)b + (size_t)j;
		t->mb_dtok[r] = (int32_t)s.text_dec[i];
		t->mb_dpos[r] = i;
		t->mb_labels[r] = s.loss_mask[i] ? (int32_t)s.labels[i] : -1;
		t->mb_mask[r] = (float)s.loss_mask[i];
		t->mb_tokens_full += (double)s.loss_mask[i];
	}
	return MGT_OK;
}

mgt_status trainer_masked_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k)
{
	int b = (int)t->a->micro_batch_size;
	int64_t first = base + (k * t->a->data_parallel_size + t->ps.dp_rank) * b;
	int64_t n = trainer_masked_len(t, sp);
	if (n <= 0) return mgt_err(MGT_ERR_INPUT, "the %s split has no samples", mgt_split_name(sp));
	t->mb_tokens_full = 0;
	mgt_status st = MGT_OK;
	for (int j = 0; !st && j < b; j++)
		st = trainer_t5(t) ? put_t5_sample(t, sp, (first + j) % n, j) : put_sample(t, sp, (first + j) % n, j);
	return st;
}

void trainer_masked_free(trainer *t)
{
	mgt_masked_data_close(t->mdata);
	t->mdata = NULL;
	free(t->mv_sub); free(t->mb_types); free(t->mb_isr); free(t->mb_pad); free(t->s_i64);
	free(t->mb_dtok); free(t->mb_dpos);
}
