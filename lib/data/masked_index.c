/* The sample index of Megatron's masked datasets: helpers.cpp build_mapping as
 * masked_dataset.py::_build_sample_index calls it (megatron/core/datasets/helpers.cpp build_mapping).
 *
 * Samples are runs of whole sentences inside one document. A document is used when it has at
 * least min_num_sent sentences and, if it has more than one, none longer than 512 tokens. Each
 * sample gets a target length (max_seq_length, or with probability about short_seq_prob a
 * shorter one drawn from std::mt19937(seed)); sentences are added until the target is reached
 * while more than one sentence remains, or until the document ends. Whole epochs are emitted
 * until max_num_samples is reached, then the rows are shuffled with std::mt19937_64(seed + 1).
 */
#include "data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* get_target_sample_len: one draw per call when the ratio is not 0. */
static int32_t target_len(int32_t ratio, int32_t max, mgt_mt19937 *r)
{
	if (ratio == 0)
		return max;
	uint32_t x = mgt_mt19937_next32(r);
	if (x % (uint32_t)ratio == 0)
		return 2 + (int32_t)(x % (uint32_t)(max - 1));
	return max;
}

typedef struct {
	const mgt_masked_mapping *m;
	int32_t ratio;
	mgt_mt19937 rand32;
	void *rows;      /* NULL in the counting pass */
	bool u64;
	uint64_t k;      /* rows so far */
} mapping_state;

static void put_row(mapping_state *s, int64_t beg, int64_t end, int32_t tgt)
{
	if (!s->rows)
		return;
	if (s->u64) {
		uint64_t *r = (uint64_t *)s->rows + 3 * s->k;
		r[0] = (uint64_t)beg, r[1] = (uint64_t)end, r[2] = (uint64_t)tgt;
	} else {
		uint32_t *r = (uint32_t *)s->rows + 3 * s->k;
		r[0] = (uint32_t)beg, r[1] = (uint32_t)end, r[2] = (uint32_t)tgt;
	}
}

/* A document with more than one sentence and one over LONG_SENTENCE_LEN tokens is skipped. */
static bool has_long_sentence(const int32_t *sizes, int64_t first, int64_t last)
{
	if (last - first <= 1)
		return false;
	for (int64_t s = first; s < last; s++)
		if (sizes[s] > MGT_MASKED_LONG_SENTENCE)
			return true;
	return false;
}

static void mapping_doc(mapping_state *s, int64_t doc)
{
	const mgt_masked_mapping *m = s->m;
	int64_t first = m->docs[doc], last = m->docs[doc + 1], remain = last - first;
	if (remain < m->min_num_sent || has_long_sentence(m->sizes, first, last))
		return;
	int64_t seq_len = 0, prev = first;
	int32_t num_sent = 0, tgt = target_len(s->ratio, m->max_seq_length, &s->rand32);
	for (int64_t i = first; i < last; i++) {
		seq_len += m->sizes[i];
		num_sent++;
		remain--;
		if ((seq_len >= tgt && remain > 1 && num_sent >= m->min_num_sent) || remain == 0) {
			put_row(s, prev, i + 1, tgt);
			s->k++;
			prev = i + 1;
			tgt = target_len(s->ratio, m->max_seq_length, &s->rand32);
			seq_len = 0;
			num_sent = 0;
		}
	}
}

static mgt_status check_mapping(const mgt_masked_mapping *m)
{
	if (m->max_seq_length < 2)
		return mgt_err(MGT_ERR_USAGE, "sample index: maximum sequence length %d (expected at least 2)",
			       m->max_seq_length);
	if (!(m->short_seq_prob >= 0.0 && m->short_seq_prob <= 1.0))
		return mgt_err(MGT_ERR_USAGE, "--short-seq-prob %g: expected a probability in [0, 1]",
			       m->short_seq_prob);
	if (m->seed < 1 || m->seed > INT32_MAX - 1)
		return mgt_err(MGT_ERR_USAGE, "--seed %d: the sample index needs a seed in [1, %d]", m->seed,
			       INT32_MAX - 1);
	if (m->min_num_sent < 1 || m->n_docs < 0)
		return mgt_err(MGT_ERR_USAGE, "sample index: min_num_sent %d, %lld documents", m->min_num_sent,
			       (long long)m->n_docs);
	for (int64_t d = 0; d <= m->n_docs; d++)
		if (m->docs[d] < 0 || (uint64_t)m->docs[d] > m->n_sizes || (d > 0 && m->docs[d] < m->docs[d - 1]))
			return mgt_err(MGT_ERR_FORMAT, "sample index: document index %lld = %lld is outside the "
				       "%llu sentences or decreasing", (long long)d, (long long)m->docs[d],
				       (unsigned long long)m->n_sizes);
	return MGT_OK;
}

/* One pass over the epochs (counting when s->rows is NULL). */
static mgt_status mapping_pass(mapping_state *s, int *epochs)
{
	const mgt_masked_mapping *m = s->m;
	bool one_epoch = m->max_num_samples == MGT_GPT_ALL;
	int32_t num_epochs = one_epoch ? 1 : INT32_MAX - 1;
	mgt_mt19937_seed(&s->rand32, (uint32_t)m->seed);
	s->k = 0;
	int e = 0;
	for (; e < num_epochs && (one_epoch || s->k < m->max_num_samples); e++) {
		for (int64_t d = 0; d < m->n_docs; d++)
			mapping_doc(s, d);
		if (s->k == 0 && !one_epoch)
			return mgt_err(MGT_ERR_INPUT, "sample index: the %lld documents give no sample (none has %d "
				       "or more sentences without one over %d tokens)", (long long)m->n_docs,
				       m->min_num_sent, MGT_MASKED_LONG_SENTENCE);
	}
	*epochs = e;
	return MGT_OK;
}

static mgt_status index_count(const mgt_masked_mapping *m, mapping_state *s, mgt_masked_index *out)
{
	memset(out, 0, sizeof *out);
	mgt_status st = check_mapping(m);
	if (st)
		return st;
	*s = (mapping_state){ .m = m, .u64 = m->n_sizes > UINT32_MAX };
	if (m->short_seq_prob > 0)
		s->ratio = (int32_t)round(1.0 / m->short_seq_prob);
	st = mapping_pass(s, &out->epochs);
	out->n = (int64_t)s->k;
	out->u64 = s->u64;
	return st;
}

mgt_status mgt_masked_index_count(const mgt_masked_mapping *m, mgt_masked_index *out)
{
	mapping_state s;
	return index_count(m, &s, out);
}

/* Swap rows i and j = rand64() % (i + 1) for i from N - 1 down to 1. */
static void shuffle_rows(mgt_masked_index *ix, int32_t seed)
{
	mgt_mt19937_64 g;
	mgt_mt19937_64_seed(&g, (uint64_t)((int64_t)seed + 1));
	size_t w = ix->u64 ? 8 : 4;
	unsigned char *r = ix->rows, t[24];
	for (int64_t i = ix->n - 1; i > 0; i--) {
		uint64_t j = mgt_mt19937_64_next(&g) % (uint64_t)(i + 1);
		memcpy(t, r + 3 * w * (uint64_t)i, 3 * w);
		memcpy(r + 3 * w * (uint64_t)i, r + 3 * w * j, 3 * w);
		memcpy(r + 3 * w * j, t, 3 * w);
	}
}

mgt_status mgt_masked_index_build(const mgt_masked_mapping *m, mgt_masked_index *out)
{
	mapping_state s;
	int epochs;
	mgt_status st = index_count(m, &s, out);
	if (st)
		return st;
	if (!(out->rows = mgt_malloc(3 * (size_t)out->n * (out->u64 ? 8 : 4) + 1)))
		return MGT_ERR_NOMEM;
	s.rows = out->rows;
	if ((st = mapping_pass(&s, &epochs))) {
		mgt_masked_index_free(out);
		return st;
	}
	shuffle_rows(out, m->seed);
	return MGT_OK;
}

void mgt_masked_index_free(mgt_masked_index *ix)
{
	if (ix->map_)
		munmap(ix->map_, ix->map_size_);
	else
		free(ix->rows);
	memset(ix, 0, sizeof *ix);
}
