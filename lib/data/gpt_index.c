/* GPTDataset and BlendedDataset index arithmetic (megatron/core/datasets/gpt_dataset.py):
 * --split (utils.py, blended_megatron_dataset_config.py), the document/sample/shuffle indices
 * (gpt_dataset.py _build_document_sample_shuffle_indices, helpers.cpp build_sample_idx), blending
 * (helpers.cpp build_blending_indices, build_exhaustive_blending_indices), --data-path
 * (training/utils.py get_blend_from_list) and the requested sizes (training.py). */
#include "data.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { EXTRA = 1 };   /* add_extra_token_to_sequence */

const char *mgt_split_name(mgt_split s)
{
	static const char *const names[] = { "train", "valid", "test" };
	return (unsigned)s < 3 ? names[s] : "?";
}

/* ---- --split ------------------------------------------------------------------------------- */

/* Python float() of one [.0-9]+ match. */
static mgt_status split_number(const char *split, const char *p, size_t n, double *v)
{
	char buf[64], *end;
	if (n >= sizeof buf)
		return mgt_err(MGT_ERR_USAGE, "split '%s': number too long", split);
	memcpy(buf, p, n);
	buf[n] = 0;
	*v = strtod(buf, &end);
	if (end != buf + n || n == 0)
		return mgt_err(MGT_ERR_USAGE, "split '%s': '%s' is not a number", split, buf);
	return MGT_OK;
}

mgt_status mgt_gpt_split_parse(const char *split, mgt_gpt_split *out)
{
	const char *s = split ? split : "1,0,0";
	double v[3] = { 0, 0, 0 };
	int k = 0;
	for (const char *p = s; *p;) {
		size_t n = strspn(p, ".0123456789");
		if (!n) {
			p++;
			continue;
		}
		if (k == 3)
			return mgt_err(MGT_ERR_USAGE, "split '%s': more than three numbers", s);
		mgt_status st = split_number(s, p, n, &v[k++]);
		if (st)
			return st;
		p += n;
	}
	mgt_gpt_normalize(v, 3, out->frac);
	if (!(v[0] + v[1] + v[2] > 0))
		return mgt_err(MGT_ERR_USAGE, "split '%s': the numbers sum to 0", s);
	double cum = 0;
	for (int i = 0; i < 3; i++) {
		out->beg[i] = cum;
		cum = cum + out->frac[i];
		out->end[i] = cum;
		out->present[i] = out->end[i] > out->beg[i];
	}
	return MGT_OK;
}

void mgt_gpt_split_range(const mgt_gpt_split *sp, mgt_split s, uint64_t n, uint64_t *beg, uint64_t *end)
{
	*beg = *end = 0;
	if (!sp->present[s])
		return;
	*beg = (uint64_t)rint(sp->beg[s] * (double)n);
	*end = (uint64_t)rint(sp->end[s] * (double)n);
}

/* ---- per-dataset indices ------------------------------------------------------------------- */

/* Samples in ne epochs of T tokens (helpers.cpp: C++ integer division truncates toward zero; the
 * partial-sample count is a float ceil). */
static int64_t count_samples(int64_t ne, int64_t T, int S, bool drop_last)
{
	int64_t tokens = ne * T - EXTRA;
	if (drop_last)
		return tokens / S;
	return (int64_t)ceilf((float)tokens / (float)S);
}

/* _get_num_epochs and the separate-final-epoch rule. */
static mgt_status plan_epochs(mgt_gpt_index *ix, int64_t num_samples, int S)
{
	int64_t T = ix->tokens_per_epoch, ne = 1;
	ix->separate_final_epoch = false;
	if (num_samples != MGT_GPT_NONE) {
		if (num_samples > (INT64_MAX - EXTRA) / S)
			return mgt_err(MGT_ERR_INPUT, "%lld samples of %d tokens: too many", (long long)num_samples, S);
		int64_t want = num_samples * S + EXTRA;
		if (T == 0 && num_samples > 0)
			return mgt_err(MGT_ERR_INPUT, "%lld samples requested from a split without tokens",
				       (long long)num_samples);
		if (T > 0 && want > T)
			ne = (want + T - 1) / T;
	}
	if (ne > INT32_MAX || ne > INT64_MAX / (T > 0 ? T : 1))
		return mgt_err(MGT_ERR_INPUT, "%lld epochs needed: too many", (long long)ne);
	ix->num_epochs = (int)ne;
	if (ne > 1) {
		int64_t sans = ((ne - 1) * T - EXTRA) / S, per_epoch = (T - EXTRA) / S;
		ix->separate_final_epoch = num_samples - sans < (int64_t)(0.80 * (double)per_epoch);
	}
	return MGT_OK;
}

/* Scalars and dtypes of the indices, without building them. */
static mgt_status index_plan(const int32_t *lengths, uint64_t n_lengths, uint64_t beg, uint64_t end,
			     int64_t num_samples, int S, bool drop_last, mgt_gpt_index *ix)
{
	memset(ix, 0, sizeof *ix);
	if (S < 1)
		return mgt_err(MGT_ERR_INPUT, "sequence length %d: expected at least 1", S);
	if (beg > end || end > n_lengths || end - beg > (uint64_t)INT32_MAX + 1)
		return mgt_err(MGT_ERR_INPUT, "split [%llu, %llu) outside the %llu sequences",
			       (unsigned long long)beg, (unsigned long long)end, (unsigned long long)n_lengths);
	int32_t max_len = 0;
	for (uint64_t i = 0; i < n_lengths; i++)
		max_len = lengths[i] > max_len ? lengths[i] : max_len;
	for (uint64_t i = beg; i < end; i++)
		ix->tokens_per_epoch += lengths[i];
	mgt_status st = plan_epochs(ix, num_samples, S);
	if (st)
		return st;
	ix->n_docs = ix->num_epochs * (int64_t)(end - beg);
	ix->n_samples = count_samples(ix->num_epochs, ix->tokens_per_epoch, S, drop_last);
	if (ix->n_samples < 0)
		ix->n_samples = 0;
	ix->sample_i64 = (ix->n_docs > max_len ? ix->n_docs : max_len) > INT32_MAX;
	ix->shuffle_i64 = ix->n_samples >= (int64_t)UINT32_MAX - 1;
	return MGT_OK;
}

/* _build_document_index: tile the split's ids over ne epochs and shuffle; with a separate final
 * epoch, shuffle the first ne-1 epochs and the last one apart. */
static void build_document_index(int32_t *out, uint64_t beg, uint64_t end, int ne, bool sep, mgt_mt19937 *rs)
{
	uint64_t n = end - beg;
	for (int e = 0; e < ne; e++)
		for (uint64_t i = 0; i < n; i++)
			out[(uint64_t)e * n + i] = (int32_t)(beg + i);
	if (!sep || ne == 1) {
		mgt_mt19937_shuffle(rs, out, (uint64_t)ne * n, 4);
		return;
	}
	mgt_mt19937_shuffle(rs, out, (uint64_t)(ne - 1) * n, 4);
	mgt_mt19937_shuffle(rs, out + (uint64_t)(ne - 1) * n, n, 4);
}

static void put_row(mgt_gpt_index *ix, int64_t k, int64_t doc, int64_t off)
{
	if (ix->sample_i64) {
		((int64_t *)ix->sample_index)[2 * k] = doc;
		((int64_t *)ix->sample_index)[2 * k + 1] = off;
	} else {
		((int32_t *)ix->sample_index)[2 * k] = (int32_t)doc;
		((int32_t *)ix->sample_index)[2 * k + 1] = (int32_t)off;
	}
}

/* helpers.cpp build_sample_idx: row k = (position in document_index, offset) where sample k starts. */
static void build_sample_index(mgt_gpt_index *ix, const int32_t *lengths, int S)
{
	const int32_t *di = ix->document_index;
	int64_t doc = 0, off = 0;
	put_row(ix, 0, 0, 0);
	for (int64_t k = 1; k <= ix->n_samples; k++) {
		int64_t rem = S + EXTRA;
		while (rem != 0) {
			int64_t dl = lengths[di[doc]] - off;
			rem -= dl;
			if (rem <= 0) {
				off += rem + dl - EXTRA;
				rem = 0;
			} else if (doc == ix->n_docs - 1) {
				off = lengths[di[doc]] - EXTRA;   /* the last, partial sample */
				break;
			} else {
				doc++;
				off = 0;
			}
		}
		put_row(ix, k, doc, off);
	}
}

/* _build_shuffle_index: [0, first) shuffled, then [first, total) shuffled. */
static void build_shuffle_index(mgt_gpt_index *ix, int64_t first, mgt_mt19937 *rs)
{
	int64_t total = ix->n_samples;
	size_t w = ix->shuffle_i64 ? 8 : 4;
	for (int64_t i = 0; i < total; i++) {
		if (ix->shuffle_i64)
			((int64_t *)ix->shuffle_index)[i] = i;
		else
			((uint32_t *)ix->shuffle_index)[i] = (uint32_t)i;
	}
	mgt_mt19937_shuffle(rs, ix->shuffle_index, (uint64_t)first, w);
	if (first < total)
		mgt_mt19937_shuffle(rs, (char *)ix->shuffle_index + (size_t)first * w, (uint64_t)(total - first), w);
}

mgt_status mgt_gpt_index_build(const int32_t *lengths, uint64_t n_lengths, uint64_t beg, uint64_t end,
			       int64_t num_samples, int seq_length, uint32_t seed, bool drop_last,
			       mgt_gpt_index *out)
{
	mgt_gpt_index *ix = out;
	mgt_status st = index_plan(lengths, n_lengths, beg, end, num_samples, seq_length, drop_last, ix);
	if (st)
		return st;
	ix->document_index = mgt_malloc((size_t)ix->n_docs * 4 + 4);
	ix->sample_index = mgt_malloc((size_t)(ix->n_samples + 1) * 2 * (ix->sample_i64 ? 8 : 4));
	ix->shuffle_index = mgt_malloc((size_t)ix->n_samples * (ix->shuffle_i64 ? 8 : 4) + 8);
	if (!ix->document_index || !ix->sample_index || !ix->shuffle_index) {
		mgt_gpt_index_free(ix);
		return MGT_ERR_NOMEM;
	}
	mgt_mt19937 rs;
	mgt_mt19937_seed(&rs, seed);
	build_document_index(ix->document_index, beg, end, ix->num_epochs, ix->separate_final_epoch, &rs);
	build_sample_index(ix, lengths, seq_length);
	int64_t first = ix->n_samples;
	if (ix->separate_final_epoch)
		first = ((int64_t)(ix->num_epochs - 1) * ix->tokens_per_epoch - EXTRA) / seq_length;
	build_shuffle_index(ix, first, &rs);
	return MGT_OK;
}

mgt_status mgt_gpt_index_plan(const int32_t *lengths, uint64_t n_lengths, uint64_t beg, uint64_t end,
			      int64_t num_samples, int seq_length, bool drop_last, mgt_gpt_index *out)
{
	return index_plan(lengths, n_lengths, beg, end, num_samples, seq_length, drop_last, out);
}

void mgt_gpt_index_free(mgt_gpt_index *ix)
{
	mgt_npy_array a[3];
	for (int i = 0; i < 3; i++)
		a[i] = (mgt_npy_array){ .map = ix->map_[i], .map_size = ix->map_size_[i] };
	if (ix->map_[0]) {
		mgt_npy_cache_unmap(a, 3);
	} else {
		free(ix->document_index);
		free(ix->sample_index);
		free(ix->shuffle_index);
	}
	memset(ix, 0, sizeof *ix);
}

/* ---- blending ------------------------------------------------------------------------------ */

/* numpy's pairwise summation (umath loops_utils pairwise_sum) of a contiguous float64 array. */
static double pairwise_sum(const double *a, int n)
{
	if (n < 8) {
		double r = 0.;
		for (int i = 0; i < n; i++)
			r += a[i];
		return r;
	}
	if (n <= 128) {
		double r[8], res;
		int i;
		for (int k = 0; k < 8; k++)
			r[k] = a[k];
		for (i = 8; i < n - (n % 8); i += 8)
			for (int k = 0; k < 8; k++)
				r[k] += a[i + k];
		res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			res += a[i];
		return res;
	}
	int n2 = n / 2;
	n2 -= n2 % 8;
	return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

void mgt_gpt_normalize(const double *w, int n, double *out)
{
	double sum = pairwise_sum(w, n);
	for (int i = 0; i < n; i++)
		out[i] = w[i] / sum;
}

void mgt_gpt_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
			   int64_t *dataset_sample_index)
{
	int64_t *count = calloc((size_t)n, sizeof *count);
	if (!count)
		abort();   /* n < 32767 counters: not worth an error path */
	for (int64_t s = 0; s < size; s++) {
		double x = fmax((double)s, 1.0), best = weights[0] * x - (double)count[0];
		int d = 0;
		for (int k = 1; k < n; k++) {
			double e = weights[k] * x - (double)count[k];
			if (e > best) {
				best = e;
				d = k;
			}
		}
		dataset_index[s] = (int16_t)d;
		dataset_sample_index[s] = count[d]++;
	}
	free(count);
}

void mgt_gpt_blend_indices_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
				      int64_t *dataset_sample_index)
{
	int64_t *count = calloc((size_t)n, sizeof *count), total = 0, s = 0;
	double *w = calloc((size_t)n, sizeof *w);
	if (!count || !w)
		abort();
	for (int k = 0; k < n; k++)
		total += sizes[k];
	for (int k = 0; k < n; k++)
		w[k] = (double)sizes[k] / (double)total;
	for (;; s++) {
		double x = fmax((double)s, 1.0), best = -INFINITY;
		int d = -1;
		for (int k = 0; k < n; k++) {
			double e = w[k] * x - (double)count[k];
			if (count[k] < sizes[k] && (d < 0 || e > best)) {
				best = e;
				d = k;
			}
		}
		if (d < 0)
			break;
		dataset_index[s] = (int16_t)d;
		dataset_sample_index[s] = count[d]++;
	}
	free(count);
	free(w);
}

/* ---- flags --------------------------------------------------------------------------------- */

/* Python float(s) for the usual spellings (no hex, no underscores). */
static bool py_float(const char *s, double *v)
{
	char *end;
	while (isspace((unsigned char)*s))
		s++;
	if (!*s || strchr(s, 'x') || strchr(s, 'X'))
		return false;
	*v = strtod(s, &end);
	while (isspace((unsigned char)*end))
		end++;
	return end != s && !*end;
}

static char *strip_dup(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	char *p = mgt_malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

/* Weights of "w1 p1 w2 p2 ...": 1 all floats, 0 prefixes only; Megatron's `any(is_none)` then
 * `all(is_none)` over one map iterator fails when a float follows the first non-float. */
static mgt_status blend_weights(int n_words, const char *const *words, double *w, int *weighted)
{
	int first_bad = -1;
	for (int i = 0; i < n_words / 2; i++) {
		bool ok = py_float(words[2 * i], &w[i]);
		if (!ok && first_bad < 0)
			first_bad = i;
		else if (ok && first_bad >= 0)
			return mgt_err(MGT_ERR_USAGE, "data path: '%s' is a weight but '%s' is not",
				       words[2 * i], words[2 * first_bad]);
	}
	*weighted = first_bad < 0;
	for (int i = 0; *weighted && i < n_words / 2; i++)
		if (!(w[i] > 0))
			return mgt_err(MGT_ERR_USAGE, "data path: weight '%s' must be > 0", words[2 * i]);
	return MGT_OK;
}

mgt_status mgt_gpt_parse_data_path(int n_words, const char *const *words, int *n_paths, char ***paths,
				   double **weights)
{
	*n_paths = 0;
	*paths = NULL;
	*weights = NULL;
	if (n_words < 1)
		return mgt_err(MGT_ERR_USAGE, "data path: no dataset prefix");
	int weighted = 0;
	double *w = mgt_malloc(sizeof *w * (size_t)(n_words / 2 + 1));
	if (!w)
		return MGT_ERR_NOMEM;
	mgt_status st = n_words % 2 ? MGT_OK : blend_weights(n_words, words, w, &weighted);
	int n = weighted ? n_words / 2 : n_words;
	char **p = st ? NULL : calloc((size_t)n, sizeof *p);
	if (!st && !p)
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int i = 0; !st && i < n; i++)
		if (!(p[i] = strip_dup(words[weighted ? 2 * i + 1 : i])))
			st = MGT_ERR_NOMEM;
	if (st) {
		for (int i = 0; p && i < n; i++)
			free(p[i]);
		free(p);
		free(w);
		return st;
	}
	if (!weighted) {
		free(w);
		w = NULL;
	}
	*n_paths = n;
	*paths = p;
	*weights = w;
	return MGT_OK;
}

mgt_status mgt_gpt_num_samples(int64_t train_samples, int64_t train_iters, int64_t gbs, int64_t eval_gbs,
			       int64_t eval_interval, int64_t eval_iters, uint64_t out[3])
{
	if (train_samples < 0 || train_iters < 0 || gbs < 0 || eval_gbs < 0 || eval_iters < 0)
		return mgt_err(MGT_ERR_USAGE, "sample counts: negative numbers");
	if (eval_iters > 0 && eval_interval < 1)
		return mgt_err(MGT_ERR_USAGE, "eval interval %lld: expected at least 1", (long long)eval_interval);
	int64_t egbs = eval_gbs ? eval_gbs : gbs;
	out[0] = (uint64_t)(train_samples ? train_samples : train_iters * gbs);
	out[1] = eval_iters ? (uint64_t)((train_iters / eval_interval + 1) * eval_iters * egbs) : 0;
	out[2] = (uint64_t)(eval_iters * egbs);
	return MGT_OK;
}
