/* The samples of Megatron's masked datasets (megatron/core/datasets/masked_dataset.py):
 * masked_dataset.py::_create_masked_lm_predictions (whole-word n-gram masking),
 * bert_dataset.py::__getitem__ (sentence-order pairs, truncation, [CLS]/[SEP], 80/10/10, padding)
 * and t5_dataset.py::__getitem__ (spans replaced by sentinels, decoder input and labels).
 * Every draw comes from numpy's legacy RandomState((seed + idx) % 2^32), in Megatron's order.
 */
#include "data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BERT_MAX_NGRAM = 3, T5_MAX_NGRAM = 10 };
#define T5_GEOMETRIC_P 0.2

const char *mgt_masked_class(mgt_masked_kind kind)
{
	return kind == MGT_MASKED_T5 ? "T5MaskedWordPieceDataset" : "BERTMaskedWordPieceDataset";
}

static bool in_list(int64_t id, const int32_t *v, int n)
{
	for (int i = 0; i < n; i++)
		if (v[i] == id)
			return true;
	return false;
}

int64_t mgt_masked_pad_id(const mgt_masked_vocab *v, bool allow_ambiguous)
{
	if (v->pad < 0)
		return -1;
	bool collides = v->n_specials > 0 ? in_list(v->pad, v->specials, v->n_specials)
					  : v->pad == v->eos || v->pad == v->eod;
	return collides && !allow_ambiguous ? -1 : v->pad;
}

mgt_status mgt_masked_vocab_from_tok(const mgt_tok *tok, mgt_masked_vocab *v, uint8_t **subword)
{
	*subword = NULL;
	memset(v, 0, sizeof *v);
	static const char *const names[] = { "cls", "sep", "mask", "pad", "bos", "eos", "eod" };
	int32_t *ids[] = { &v->cls, &v->sep, &v->mask, &v->pad, &v->bos, &v->eos, &v->eod };
	for (int i = 0; i < 7; i++)
		*ids[i] = mgt_tok_special_id(tok, names[i]);
	if (v->cls < 0 || v->sep < 0 || v->mask < 0)
		return mgt_err(MGT_ERR_VOCAB, "%s: no [CLS], [SEP] or [MASK]", mgt_tok_type_name(tok));
	v->size = mgt_tok_vocab_size(tok);
	if (!(*subword = mgt_malloc((size_t)v->size)))
		return MGT_ERR_NOMEM;
	for (int64_t id = 0; id < v->size; id++) {
		size_t n = 0;
		const char *s = mgt_tok_token_bytes(tok, (int32_t)id, &n);
		(*subword)[id] = s && n >= 2 && s[0] == '#' && s[1] == '#';
	}
	v->is_subword = *subword;
	const int32_t *sent = NULL;
	v->n_sentinels = (int)mgt_tok_sentinels(tok, &sent);
	v->sentinels = sent;
	return MGT_OK;
}

/* ---- masking ----------------------------------------------------------------------------------- */

/* Workspace and result of one masking over n tokens (every array has room for n items). */
typedef struct {
	int64_t *flat;      /* candidate token positions in order */
	int64_t *cstart;    /* [C + 1]: candidate k is flat[cstart[k] .. cstart[k + 1]) */
	int64_t C;
	uint64_t *order;    /* the shuffled candidate n-gram entries */
	uint8_t *is_masked; /* per position */
	int64_t *pos, *lab; /* masked positions and original ids, in masking order */
	int64_t n_masked;
	int64_t *span_first, *span_beg, *span_len; /* per span: first position; its items in pos/lab */
	int64_t n_spans;
	double n_maskings;
} masking;

static void *masking_alloc(masking *m, int64_t n)
{
	size_t k = (size_t)n + 1;
	char *mem = mgt_malloc(k * (7 * sizeof(int64_t) + sizeof(uint64_t) + 1));
	if (!mem)
		return NULL;
	int64_t *p = (int64_t *)mem;
	m->flat = p, m->cstart = p + k, m->pos = p + 2 * k, m->lab = p + 3 * k;
	m->span_first = p + 4 * k, m->span_beg = p + 5 * k, m->span_len = p + 6 * k;
	m->order = (uint64_t *)(p + 7 * k);
	m->is_masked = (uint8_t *)(m->order + k);
	memset(m->is_masked, 0, k);
	return mem;
}

/* §1.5a: [CLS]/[SEP] are skipped; a "##" piece joins the last candidate (if any). */
static void find_candidates(masking *m, const mgt_masked_vocab *v, const int64_t *t, int64_t n)
{
	int64_t nf = 0;
	m->C = 0;
	for (int64_t i = 0; i < n; i++) {
		if (t[i] == v->cls || t[i] == v->sep)
			continue;
		if (!v->is_subword[t[i]] || m->C == 0)
			m->cstart[m->C++] = nf;
		m->flat[nf++] = i;
	}
	m->cstart[m->C] = nf;
}

void mgt_masked_ngram_probs(int max, double *p)
{
	double w[MGT_CHOICE_MAX] = { 0 };
	for (int i = 0; i < max; i++)
		w[i] = 1.0 / (double)(i + 1);
	double s = mgt_numpy_sum(w, max);
	for (int i = 0; i < max; i++)
		w[i] /= s;
	s = mgt_numpy_sum(w, max);
	for (int i = 0; i < max; i++)
		p[i] = w[i] / s;
}

/* BERT _get_token_mask: [MASK] (80%), a random id (10%), the original (10%). */
static int64_t bert_token_mask(mgt_mt19937 *rs, const mgt_masked_vocab *v, int64_t orig)
{
	if (mgt_mt19937_random(rs) < 0.8)
		return v->mask;
	if (mgt_mt19937_random(rs) >= 0.5)
		return mgt_mt19937_randint(rs, 0, v->size);
	return orig;
}

/* The n-gram of entry e: first chosen n, shortened until it fits the budget; -1 to skip it. */
static int64_t pick_ngram(const masking *m, int64_t e, int64_t n, int64_t *len)
{
	for (;;) {
		int64_t end = e + n < m->C ? e + n : m->C;
		*len = m->cstart[end] - m->cstart[e];
		n--;
		if (m->n_maskings >= (double)(m->n_masked + *len))
			return m->cstart[e];
		if (n == 0)
			return -1;
	}
}

static bool any_masked(const masking *m, int64_t beg, int64_t len)
{
	for (int64_t i = beg; i < beg + len; i++)
		if (m->is_masked[m->flat[i]])
			return true;
	return false;
}

static int cmp_first(const void *a, const void *b)
{
	const int64_t *x = a, *y = b;
	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Spans by their first position (masked_spans sorted by x[0][0]). Positions need no sorting:
 * labels and loss_mask are written by position, and a span's positions ascend. */
static mgt_status sort_spans(masking *m)
{
	int64_t *tmp = mgt_malloc(3 * (size_t)(m->n_spans + 1) * sizeof *tmp);
	if (!tmp)
		return MGT_ERR_NOMEM;
	for (int64_t i = 0; i < m->n_spans; i++)
		tmp[3 * i] = m->span_first[i], tmp[3 * i + 1] = m->span_beg[i], tmp[3 * i + 2] = m->span_len[i];
	qsort(tmp, (size_t)m->n_spans, 3 * sizeof *tmp, cmp_first);
	for (int64_t i = 0; i < m->n_spans; i++)
		m->span_first[i] = tmp[3 * i], m->span_beg[i] = tmp[3 * i + 1], m->span_len[i] = tmp[3 * i + 2];
	free(tmp);
	return MGT_OK;
}

/* Mask the candidate positions flat[beg .. beg + len) of t in place; record them and the span
 * (the span's originals are lab[span_beg .. span_beg + span_len), in masking order). */
static void mask_ngram(masking *m, mgt_masked_kind kind, const mgt_masked_vocab *v, mgt_mt19937 *rs,
		       int64_t *t, int64_t beg, int64_t len)
{
	m->span_first[m->n_spans] = m->flat[beg];
	m->span_beg[m->n_spans] = m->n_masked;
	m->span_len[m->n_spans++] = len;
	for (int64_t i = beg; i < beg + len; i++) {
		int64_t at = m->flat[i], orig = t[at];
		m->is_masked[at] = 1;
		t[at] = kind == MGT_MASKED_T5 ? v->mask : bert_token_mask(rs, v, orig);
		m->pos[m->n_masked] = at;
		m->lab[m->n_masked++] = orig;
	}
}

/* _create_masked_lm_predictions over t[n] (masked in place), target length tgt. */
static mgt_status create_masked(masking *m, const mgt_masked_params *p, mgt_mt19937 *rs, int64_t *t, int64_t n,
				int64_t tgt)
{
	const mgt_masked_vocab *v = p->vocab;
	int max = p->kind == MGT_MASKED_T5 ? T5_MAX_NGRAM : BERT_MAX_NGRAM;
	double probs[MGT_CHOICE_MAX];
	mgt_masked_ngram_probs(max, probs);
	find_candidates(m, v, t, n);
	double by_len = rint((double)n * p->mask_prob);
	m->n_maskings = fmin(p->mask_prob * (double)tgt, by_len > 1 ? by_len : 1);
	m->n_masked = m->n_spans = 0;
	for (int64_t k = 0; k < m->C; k++)
		m->order[k] = (uint64_t)k;
	mgt_mt19937_shuffle(rs, m->order, (uint64_t)m->C, sizeof *m->order);
	for (int64_t k = 0; k < m->C && (double)m->n_masked < m->n_maskings; k++) {
		int64_t e = (int64_t)m->order[k], len;
		int64_t ng = p->kind == MGT_MASKED_T5 ? mgt_mt19937_geometric(rs, T5_GEOMETRIC_P)
						      : 1 + mgt_mt19937_choice(rs, probs, max);
		int64_t beg = pick_ngram(m, e, ng < max ? ng : max, &len);
		if (beg < 0 || any_masked(m, beg, len))
			continue;
		mask_ngram(m, p->kind, v, rs, t, beg, len);
	}
	/* the second shuffle of candidate_ngrams only moves the generator, which nothing reads after */
	return sort_spans(m);
}

/* ---- token checks ------------------------------------------------------------------------------ */

static mgt_status check_ids(const mgt_masked_vocab *v, const int32_t *ids, int64_t n, int64_t idx)
{
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v->size)
			return mgt_err(MGT_ERR_INPUT, "sample %lld, token %lld: id %d is outside the vocabulary "
				       "(ids must be in [0, %lld))", (long long)idx, (long long)i, ids[i],
				       (long long)v->size);
	return MGT_OK;
}

static void seed_for(mgt_mt19937 *rs, const mgt_masked_params *p, int64_t idx)
{
	mgt_mt19937_seed(rs, (uint32_t)(p->seed + (uint64_t)idx));
}

/* ---- BERT -------------------------------------------------------------------------------------- */

/* A contiguous window [beg, end) of the sample's ids. */
typedef struct { int64_t beg, end; } span;

/* §1.3.2: the SOP pair (draws pivot and is_random with the binary head). */
static void bert_pair(const mgt_masked_params *p, mgt_mt19937 *rs, const int64_t *sent_len, int n_sent,
		      int64_t n_ids, span *a, span *b, int *is_random)
{
	int pivot = n_sent;
	*is_random = 0;
	if (p->binary_head) {
		pivot = n_sent >= 3 ? (int)mgt_mt19937_randint(rs, 1, n_sent) : 1;
		*is_random = mgt_mt19937_random(rs) < 0.5;
	}
	int64_t cut = 0;
	for (int i = 0; i < pivot; i++)
		cut += sent_len[i];
	*a = (span){ 0, cut };
	*b = (span){ cut, n_ids };
	if (*is_random) {
		span t = *a;
		*a = *b;
		*b = t;
	}
}

/* §1.3.3: drop the first or last token of the longer side (B on a tie) until they fit tgt. */
static int bert_truncate(mgt_mt19937 *rs, span *a, span *b, int64_t tgt)
{
	int truncated = 0;
	while ((a->end - a->beg) + (b->end - b->beg) > tgt) {
		span *v = a->end - a->beg > b->end - b->beg ? a : b;
		if (mgt_mt19937_random(rs) < 0.5)
			v->beg++;
		else
			v->end--;
		truncated = 1;
	}
	return truncated;
}

/* [CLS] A [SEP] (B [SEP]) into t and types; returns the length. */
static int64_t bert_tokens(const mgt_masked_vocab *v, const int32_t *ids, span a, span b, int64_t *t,
			   int64_t *types)
{
	int64_t n = 0;
	t[n] = v->cls, types[n++] = 0;
	for (int64_t i = a.beg; i < a.end; i++)
		t[n] = ids[i], types[n++] = 0;
	t[n] = v->sep, types[n++] = 0;
	if (b.end > b.beg) {
		for (int64_t i = b.beg; i < b.end; i++)
			t[n] = ids[i], types[n++] = 1;
		t[n] = v->sep, types[n++] = 1;
	}
	return n;
}

/* §1.3.5: padding with P, the padding mask quirk, labels, loss mask, P -> 0. */
static void bert_outputs(const mgt_masked_params *p, const masking *m, int64_t n, mgt_bert_sample *o)
{
	int64_t P = p->pad, S = p->seq_length;
	for (int64_t i = n; i < S; i++)
		o->text[i] = P, o->types[i] = P;
	for (int64_t i = 0; i < S; i++) {
		o->padding_mask[i] = o->text[i] == P ? P : 1;
		o->labels[i] = -1;
		o->loss_mask[i] = 0;
	}
	for (int64_t k = 0; k < m->n_masked; k++) {
		o->labels[m->pos[k]] = m->lab[k];
		o->loss_mask[m->pos[k]] = 1;
	}
	for (int64_t i = 0; i < S; i++) {
		if (o->text[i] == P)
			o->text[i] = 0;
		if (o->labels[i] == P)
			o->labels[i] = 0;
	}
}

mgt_status mgt_masked_bert_make(const mgt_masked_params *p, int64_t idx, const int32_t *ids, int64_t n_ids,
				const int64_t *sent_len, int n_sent, int64_t tgt, mgt_bert_sample *out)
{
	mgt_status st = check_ids(p->vocab, ids, n_ids, idx);
	if (st)
		return st;
	if (p->binary_head && n_sent < 2)
		return mgt_err(MGT_ERR_INPUT, "sample %lld has %d sentence (the binary head needs two or more: "
			       "sentence-level data from --split-sentences, or --bert-no-binary-head)",
			       (long long)idx, n_sent);
	if (tgt > p->seq_length - 3 || tgt < 0)
		return mgt_err(MGT_ERR_INPUT, "sample %lld: target length %lld does not fit --seq-length %d",
			       (long long)idx, (long long)tgt, p->seq_length);
	mgt_mt19937 rs;
	seed_for(&rs, p, idx);
	span a, b;
	bert_pair(p, &rs, sent_len, n_sent, n_ids, &a, &b, &out->is_random);
	out->truncated = bert_truncate(&rs, &a, &b, tgt);
	int64_t n = bert_tokens(p->vocab, ids, a, b, out->text, out->types);
	masking m;
	void *mem = masking_alloc(&m, n);
	if (!mem)
		return MGT_ERR_NOMEM;
	st = create_masked(&m, p, &rs, out->text, n, tgt);
	if (!st) {
		bert_outputs(p, &m, n, out);
		out->n_maskings = m.n_maskings;
		out->n_masked = m.n_masked;
	}
	free(mem);
	return st;
}

/* ---- T5 ---------------------------------------------------------------------------------------- */

/* §1.4.3: encoder input with sentinels, decoder input and output; lengths via *ne, *nd. */
static mgt_status t5_sequences(const mgt_masked_params *p, const masking *m, const int64_t *t, int64_t n,
			       int64_t idx, int64_t *enc, int64_t *ne, int64_t *dec_in, int64_t *dec_out,
			       int64_t *nd)
{
	const mgt_masked_vocab *v = p->vocab;
	if (m->n_spans > v->n_sentinels)
		return mgt_err(MGT_ERR_INPUT, "sample %lld: %lld masked spans but %d sentinel tokens (Megatron "
			       "raises IndexError): lower --encoder-seq-length or --mask-prob, or add sentinels",
			       (long long)idx, (long long)m->n_spans, v->n_sentinels);
	int64_t D = p->decoder_seq_length, need = 1 + m->n_spans + m->n_masked;
	if (need > D)
		return mgt_err(MGT_ERR_INPUT, "sample %lld: the decoder input has %lld tokens (1 + %lld spans + "
			       "%lld masked) but --decoder-seq-length is %lld: raise --decoder-seq-length",
			       (long long)idx, (long long)need, (long long)m->n_spans, (long long)m->n_masked,
			       (long long)D);
	int64_t cur = 0, e = 0, d = 0;
	dec_in[d] = v->bos;
	for (int64_t k = 0; k < m->n_spans; k++) {
		int64_t s = v->sentinels[k], beg = m->span_beg[k], len = m->span_len[k];
		for (int64_t i = cur; i < m->span_first[k]; i++)
			enc[e++] = t[i];
		enc[e++] = s;
		dec_in[d + 1] = s, dec_out[d++] = s;
		for (int64_t i = 0; i < len; i++)
			dec_in[d + 1] = m->lab[beg + i], dec_out[d++] = m->lab[beg + i];
		cur = m->pos[beg + len - 1] + 1;
	}
	for (int64_t i = cur; i < n; i++)
		enc[e++] = t[i];
	dec_out[d++] = v->eos;
	*ne = e;
	*nd = d;
	if (e > p->seq_length)
		return mgt_err(MGT_ERR_INPUT, "sample %lld: the encoder input has %lld tokens, more than "
			       "--encoder-seq-length %d", (long long)idx, (long long)e, p->seq_length);
	return MGT_OK;
}

/* §1.4.4: padding, masks, loss mask, P -> 0. */
static void t5_outputs(const mgt_masked_params *p, int64_t ne, int64_t nd, mgt_t5_sample *o)
{
	int64_t P = p->pad, S = p->seq_length, D = p->decoder_seq_length;
	for (int64_t i = ne; i < S; i++)
		o->text_enc[i] = P;
	for (int64_t i = nd; i < D; i++)
		o->text_dec[i] = P, o->labels[i] = -1;
	for (int64_t i = 0; i < S; i++) {
		o->enc_mask[i] = o->text_enc[i] != P;
		if (o->text_enc[i] == P)
			o->text_enc[i] = 0;
	}
	for (int64_t i = 0; i < D; i++) {
		o->dec_mask[i] = o->text_dec[i] != P;
		o->loss_mask[i] = i < nd;
		if (o->text_dec[i] == P)
			o->text_dec[i] = 0;
		if (o->labels[i] == P)
			o->labels[i] = 0;
	}
}

mgt_status mgt_masked_t5_make(const mgt_masked_params *p, int64_t idx, const int32_t *ids, int64_t n_ids,
			      int64_t tgt, mgt_t5_sample *out)
{
	mgt_status st = check_ids(p->vocab, ids, n_ids, idx);
	if (st)
		return st;
	if (tgt > p->seq_length - 2 || tgt < 0)
		return mgt_err(MGT_ERR_INPUT, "sample %lld: target length %lld does not fit --encoder-seq-length %d",
			       (long long)idx, (long long)tgt, p->seq_length);
	mgt_mt19937 rs;
	seed_for(&rs, p, idx);
	out->truncated = n_ids > tgt;
	int64_t n = n_ids < tgt ? n_ids : tgt;
	masking m;
	char *mem = masking_alloc(&m, n);
	int64_t *t = mem ? mgt_malloc(((size_t)n + 1) * sizeof *t) : NULL;
	if (!t) {
		free(mem);
		return MGT_ERR_NOMEM;
	}
	for (int64_t i = 0; i < n; i++)
		t[i] = ids[i];
	st = create_masked(&m, p, &rs, t, n, tgt);
	int64_t ne = 0, nd = 0;
	if (!st)
		st = t5_sequences(p, &m, t, n, idx, out->text_enc, &ne, out->text_dec, out->labels, &nd);
	if (!st) {
		t5_outputs(p, ne, nd, out);
		out->n_maskings = m.n_maskings;
		out->n_masked = m.n_masked;
		out->n_spans = m.n_spans;
	}
	free(t);
	free(mem);
	return st;
}
