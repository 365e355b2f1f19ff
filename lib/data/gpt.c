/* GPTDataset / BlendedDataset as the training loop sees them (megatron/core/datasets/gpt_dataset.py):
 * open the low-level datasets (indexed or mock), check token ids, build or load the per-split
 * indices and the blend, and fetch samples.
 * Sources: megatron/core/datasets/{gpt_dataset.py, blended_dataset.py,
 * blended_megatron_dataset_builder.py}. */
#include "data.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { EXTRA = 1, PAD = -1 };   /* add_extra_token_to_sequence; gpt_dataset._PAD_TOKEN_ID */
#define SURPLUS 0.005           /* mid_level_dataset_surplus */

/* One low-level dataset: an indexed dataset or MockGPTLowLevelDataset. */
typedef struct {
	mgt_idx *idx;            /* NULL: mock */
	const char *prefix;      /* idx prefix or "mock" */
	const unsigned char *bin;
	int dtype;
	size_t itemsize;
	uint64_t n_seq;
	int32_t *lengths;        /* [n_seq]; for an idx only while opening */
	int64_t mock_vocab;      /* mock ids 1 + j % (mock_vocab - 1); 0: j + 1 */
	int32_t eod;
} gpt_src;

/* One GPTDataset (a source and a split). */
typedef struct {
	bool present;
	uint64_t beg, end;       /* the split's sequence ids */
	mgt_gpt_index ix;
	char *desc;              /* its JSON description, NULL for mock data */
} gpt_ds;

/* One BlendedDataset split. */
typedef struct {
	int64_t len;
	int16_t *di;             /* dataset_index [len] */
	int64_t *dsi;            /* dataset_sample_index [len] */
	mgt_npy_array map[2];    /* when loaded from the cache */
} gpt_blend;

struct mgt_gpt_data {
	int S;
	uint32_t seed;
	int32_t eod;
	int64_t vocab;
	bool eod_mask_loss, reset_position_ids, keep_partial_valid, mock;
	char *split_str, *cache_path;
	mgt_gpt_split split;
	int n;
	gpt_src *src;            /* [n] */
	gpt_ds (*ds)[3];         /* [n][3] */
	bool blended;
	gpt_blend blend[3];
	char note[512];
};

static void add_note(mgt_gpt_data *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(mgt_gpt_data *d, const char *fmt, ...)
{
	if (d->note[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->note, sizeof d->note, fmt, ap);
	va_end(ap);
}

/* ---- token ids ----------------------------------------------------------------------------- */

static int64_t item_at(const unsigned char *p, int dtype)
{
	switch (dtype) {
	case MGT_DT_UINT8: return p[0];
	case MGT_DT_INT8: return (int8_t)p[0];
	case MGT_DT_UINT16: return (int64_t)p[0] | (int64_t)p[1] << 8;
	case MGT_DT_INT16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
	case MGT_DT_INT32: return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
					   (uint32_t)p[3] << 24);
	default: {
		uint64_t v = 0;
		for (int k = 7; k >= 0; k--)
			v = v << 8 | p[k];
		return (int64_t)v;
	}
	}
}

static int64_t src_len(const gpt_src *s, uint64_t seq)
{
	return s->idx ? mgt_idx_seq_length(s->idx, seq) : s->lengths[seq];
}

/* Bytes of sequence seq in the .bin. */
static const unsigned char *seq_bytes(const gpt_src *s, uint64_t seq)
{
	return s->bin + mgt_idx_seq_pointer(s->idx, seq);
}

/* Token j of sequence seq; p = seq_bytes(s, seq) for an indexed dataset. */
static int64_t src_id(const gpt_src *s, const unsigned char *p, uint64_t seq, int64_t j)
{
	if (s->idx)
		return item_at(p + (size_t)j * s->itemsize, s->dtype);
	if (j == s->lengths[seq] - 1)
		return s->eod;
	if (s->mock_vocab == 1)
		return 0;
	return s->mock_vocab ? 1 + j % (s->mock_vocab - 1) : j + 1;
}

/* First position in sequence seq whose id is outside [0, vocab), or -1. */
static int64_t bad_position(const gpt_src *s, uint64_t seq, int64_t vocab)
{
	int64_t n = src_len(s, seq);
	const unsigned char *p = seq_bytes(s, seq);
	if (s->dtype == MGT_DT_UINT16) {
		for (int64_t j = 0; j < n; j++)
			if (((int64_t)p[2 * j] | (int64_t)p[2 * j + 1] << 8) >= vocab)
				return j;
		return -1;
	}
	for (int64_t j = 0; j < n; j++) {
		int64_t v = src_id(s, p, seq, j);
		if (v < 0 || v >= vocab)
			return j;
	}
	return -1;
}

/* Document holding sequence seq (document_indices[k] <= seq < document_indices[k+1]). */
static uint64_t document_of(const mgt_idx *x, uint64_t seq)
{
	uint64_t lo = 0, hi = mgt_idx_num_documents(x);
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if ((uint64_t)mgt_idx_doc_index(x, mid) <= seq)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static mgt_status check_range(const gpt_src *s, uint64_t beg, uint64_t end, int64_t vocab)
{
	uint64_t bad = UINT64_MAX;
#pragma omp parallel for schedule(dynamic, 64) reduction(min : bad)
	for (uint64_t i = beg; i < end; i++)
		if (i < bad && bad_position(s, i, vocab) >= 0)
			bad = i;
	if (bad == UINT64_MAX)
		return MGT_OK;
	int64_t j = bad_position(s, bad, vocab);
	return mgt_err(MGT_ERR_INPUT,
		       "%s.bin: document %llu (sequence %llu), token %lld: id %lld is beyond the vocabulary "
		       "(ids must be in [0, %lld))", s->prefix, (unsigned long long)document_of(s->idx, bad),
		       (unsigned long long)bad, (long long)j, (long long)src_id(s, seq_bytes(s, bad), bad, j),
		       (long long)vocab);
}

/* The token ids of every sequence a present split uses must be < vocab. */
static mgt_status check_vocab(const mgt_gpt_data *d, const gpt_src *s)
{
	if (d->vocab <= 0)
		return MGT_OK;
	if (!s->idx) {
		if (s->eod < 0 || s->eod >= d->vocab)
			return mgt_err(MGT_ERR_INPUT, "mock data: eod id %d is beyond the vocabulary (size %lld)",
				       s->eod, (long long)d->vocab);
		return MGT_OK;
	}
	if (s->dtype == MGT_DT_UINT16 && d->vocab > 65535)
		return MGT_OK;
	for (int k = 0; k < 3; k++) {
		uint64_t beg, end;
		mgt_gpt_split_range(&d->split, (mgt_split)k, s->n_seq, &beg, &end);
		mgt_status st = check_range(s, beg, end, d->vocab);
		if (st)
			return st;
	}
	return MGT_OK;
}

/* ---- sources ------------------------------------------------------------------------------- */

static mgt_status src_open_idx(gpt_src *s, const char *prefix)
{
	mgt_status st = mgt_idx_open(&s->idx, prefix);
	size_t n = strlen(prefix);
	const char *ext = n > 4 ? prefix + n - 4 : "";
	if (st && (!strcmp(ext, ".bin") || !strcmp(ext, ".idx"))) { /* a file named instead of the prefix */
		char why[512];
		snprintf(why, sizeof why, "%s", mgt_err_msg());
		return mgt_err(st, "data prefix %s: %s (a prefix names the .bin and .idx pair: give %.*s, without %s)",
			       prefix, why, (int)(n - 4), prefix, ext);
	}
	if (!st)
		st = mgt_idx_verify_bin(s->idx); /* read whole, as the vocabulary check reads it anyway */
	if (st)
		return mgt_err_ctx(st, "data prefix %s", prefix);
	s->prefix = mgt_idx_prefix(s->idx);
	s->dtype = mgt_idx_dtype(s->idx);
	if (s->dtype == MGT_DT_FLOAT32 || s->dtype == MGT_DT_FLOAT64)
		return mgt_err(MGT_ERR_FORMAT, "%s.idx: dtype %s: token ids must be integers", prefix,
			       mgt_dtype_name(s->dtype));
	s->itemsize = mgt_dtype_size(s->dtype);
	size_t size;
	s->bin = mgt_idx_bin(s->idx, &size);
	s->n_seq = mgt_idx_num_sequences(s->idx);
	if (!(s->lengths = mgt_malloc(s->n_seq * sizeof *s->lengths + 4)))
		return MGT_ERR_NOMEM;
	for (uint64_t i = 0; i < s->n_seq; i++)
		s->lengths[i] = mgt_idx_seq_length(s->idx, i);
	return MGT_OK;
}

static mgt_status src_open_mock(gpt_src *s, const mgt_gpt_data_config *cfg)
{
	s->prefix = "mock";
	s->n_seq = MGT_GPT_MOCK_SEQUENCES;
	if (!(s->lengths = mgt_malloc(MGT_GPT_MOCK_SEQUENCES * sizeof *s->lengths)))
		return MGT_ERR_NOMEM;
	mgt_gpt_mock_lengths(s->lengths);
	s->mock_vocab = cfg->vocab_size > 0 && cfg->vocab_size < MGT_GPT_MOCK_MAX_LENGTH ? cfg->vocab_size : 0;
	s->eod = cfg->eod_id;
	return MGT_OK;
}

/* ---- descriptions (the cache key) ---------------------------------------------------------- */

static json_t *split_matrix_json(const mgt_gpt_split *sp)
{
	json_t *m = json_array();
	for (int i = 0; i < 3; i++)
		json_array_append_new(m, sp->present[i] ? json_pack("[f, f]", sp->beg[i], sp->end[i]) : json_null());
	return m;
}

static char *dump_json(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_INDENT(4) | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	return s;
}

/* mgt's description of a GPTDataset: Megatron's keys (without the tokenizer) plus the file's
 * sequence and token counts. NULL when it cannot be made (e.g. a non-UTF-8 path): no cache. */
static char *gpt_description(const mgt_gpt_data *d, const gpt_src *s, mgt_split k, int64_t ns)
{
	json_t *path = json_string(s->prefix);
	if (!path)
		return NULL;
	json_t *o = json_pack("{s:s, s:o, s:o, s:s, s:I, s:i, s:s, s:o, s:b, s:b, s:I, s:I, s:s}",
			      "class", "GPTDataset", "dataset_path", path,
			      "num_samples", ns == MGT_GPT_NONE ? json_null() : json_integer(ns),
			      "index_split", mgt_split_name(k), "random_seed", (json_int_t)d->seed,
			      "sequence_length", d->S, "split", d->split_str,
			      "split_matrix", split_matrix_json(&d->split), "add_extra_token_to_sequence", 1,
			      "drop_last_partial_sequence", !(k == MGT_SPLIT_VALID && d->keep_partial_valid),
			      "num_sequences", (json_int_t)s->n_seq,
			      "num_tokens", (json_int_t)mgt_idx_num_tokens(s->idx),
			      "generator", "mgt (Megatron's arrays; description and hash are mgt's)");
	return dump_json(o);
}

static char *blend_description(const mgt_gpt_data *d, mgt_split k, const double *w, int64_t size)
{
	json_t *ds = json_array(), *ws = json_array();
	for (int i = 0; i < d->n; i++) {
		if (!d->ds[i][k].desc) {
			json_decref(ds);
			json_decref(ws);
			return NULL;
		}
		json_array_append_new(ds, json_loads(d->ds[i][k].desc, 0, NULL));
		json_array_append_new(ws, json_real(w[i]));
	}
	json_t *o = json_pack("{s:s, s:o, s:s, s:o, s:o}", "class", "BlendedDataset", "datasets", ds,
			      "split", mgt_split_name(k), "weights", ws,
			      "size", size < 0 ? json_null() : json_integer(size));
	return dump_json(o);
}

/* ---- the cache directory ------------------------------------------------------------------- */

/* Cache directory of source s: --data-cache-path or PREFIX/cache/GPTDataset_indices. */
static char *cache_dir(const mgt_gpt_data *d, const gpt_src *s)
{
	if (d->cache_path)
		return mgt_strdup(d->cache_path);
	size_t n = strlen(s->prefix) + 32;
	char *p = mgt_malloc(n);
	if (p)
		snprintf(p, n, "%s/cache/GPTDataset_indices", s->prefix);
	return p;
}

static void cache_base(char *base, size_t cap, const char *desc, const char *cls, mgt_split k)
{
	char h[33];
	mgt_md5_hex(desc, strlen(desc), h);
	snprintf(base, cap, "%s-%s-%s", h, cls, mgt_split_name(k));
}

/* Create dir and save there; on failure only a note (the arrays are in memory). */
static void cache_store(mgt_gpt_data *d, const char *dir, const char *base, const char *desc,
			const mgt_npy_array *a, int n)
{
	if (mgt_mkdirs(dir)) {
		add_note(d, "cache directory %s; indices kept in memory only", mgt_err_msg());
		return;
	}
	if (mgt_npy_cache_save(dir, base, desc, a, n))
		add_note(d, "%s; indices kept in memory only", mgt_err_msg());
}

/* ---- one GPTDataset ------------------------------------------------------------------------ */

static void index_arrays(const mgt_gpt_index *ix, mgt_npy_array a[3])
{
	a[0] = (mgt_npy_array){ "document_index.npy", "<i4", 1, { ix->n_docs, 0 }, ix->document_index, 0, 0 };
	a[1] = (mgt_npy_array){ "sample_index.npy", ix->sample_i64 ? "<i8" : "<i4", 2,
				{ ix->n_samples + 1, 2 }, ix->sample_index, 0, 0 };
	a[2] = (mgt_npy_array){ "shuffle_index.npy", ix->shuffle_i64 ? "<i8" : "<u4", 1,
				{ ix->n_samples, 0 }, ix->shuffle_index, 0, 0 };
}

/* Values of a loaded index point inside the data: document ids in the split, rows inside the
 * document index and its documents, shuffle entries below n_samples. */
static bool index_sane(const gpt_ds *ds, const int32_t *lengths)
{
	const mgt_gpt_index *ix = &ds->ix;
	for (int64_t i = 0; i < ix->n_docs; i++)
		if ((uint64_t)ix->document_index[i] < ds->beg || (uint64_t)ix->document_index[i] >= ds->end)
			return false;
	for (int64_t k = 0; k <= ix->n_samples; k++) {
		int64_t doc, off;
		mgt_gpt_index_row(ix, k, &doc, &off);
		if (ix->n_docs == 0 ? doc != 0 || off != 0
				    : doc < 0 || doc >= ix->n_docs || off < 0 ||
				      off > lengths[ix->document_index[doc]])
			return false;
	}
	for (int64_t i = 0; i < ix->n_samples; i++)
		if (mgt_gpt_index_shuffle(ix, i) < 0 || mgt_gpt_index_shuffle(ix, i) >= ix->n_samples)
			return false;
	return true;
}

static bool ds_load(gpt_ds *ds, const char *dir, const char *base, const int32_t *lengths)
{
	mgt_npy_array a[3];
	index_arrays(&ds->ix, a);
	if (mgt_npy_cache_load(dir, base, ds->desc, a, 3))
		return false;
	ds->ix.document_index = (int32_t *)a[0].data;
	ds->ix.sample_index = (void *)a[1].data;
	ds->ix.shuffle_index = (void *)a[2].data;
	for (int i = 0; i < 3; i++) {
		ds->ix.map_[i] = a[i].map;
		ds->ix.map_size_[i] = a[i].map_size;
	}
	if (index_sane(ds, lengths))
		return true;
	mgt_gpt_index_free(&ds->ix);   /* corrupt: the caller rebuilds */
	return false;
}

/* GPTDataset k of split sp: load from the cache or build (and cache). */
static mgt_status ds_open(mgt_gpt_data *d, int k, mgt_split sp, int64_t ns)
{
	gpt_src *s = &d->src[k];
	gpt_ds *ds = &d->ds[k][sp];
	bool drop_last = !(sp == MGT_SPLIT_VALID && d->keep_partial_valid);
	mgt_gpt_split_range(&d->split, sp, s->n_seq, &ds->beg, &ds->end);
	ds->present = true;
	mgt_status st = mgt_gpt_index_plan(s->lengths, s->n_seq, ds->beg, ds->end, ns, d->S, drop_last, &ds->ix);
	if (st && ds->beg == ds->end) { /* what to do about it */
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", mgt_err_msg());
		return mgt_err(st, "%s, %s split (sequences [%llu, %llu) of %llu): %s: the split's share of the "
			       "%llu documents rounds to none: give it a larger share in --split, or use more data%s",
			       s->prefix, mgt_split_name(sp), (unsigned long long)ds->beg, (unsigned long long)ds->end,
			       (unsigned long long)s->n_seq, msg, (unsigned long long)s->n_seq,
			       sp == MGT_SPLIT_TRAIN ? "" : sp == MGT_SPLIT_VALID ? " (or --eval-iters 0: no validation)" :
			       " (the test split is evaluated at the end unless --eval-iters is 0)");
	}
	if (st)
		return mgt_err_ctx(st, "%s, %s split (sequences [%llu, %llu) of %llu)", s->prefix,
				   mgt_split_name(sp), (unsigned long long)ds->beg, (unsigned long long)ds->end,
				   (unsigned long long)s->n_seq);
	char *dir = NULL, base[128];
	if (s->idx && (ds->desc = gpt_description(d, s, sp, ns)) && (dir = cache_dir(d, s))) {
		cache_base(base, sizeof base, ds->desc, "GPTDataset", sp);
		if (ds_load(ds, dir, base, s->lengths)) {
			free(dir);
			return MGT_OK;
		}
	}
	st = mgt_gpt_index_build(s->lengths, s->n_seq, ds->beg, ds->end, ns, d->S, d->seed, drop_last, &ds->ix);
	if (!st && dir) {
		mgt_npy_array a[3];
		index_arrays(&ds->ix, a);
		cache_store(d, dir, base, ds->desc, a, 3);
	}
	free(dir);
	return st;
}

/* ---- blends -------------------------------------------------------------------------------- */

static int64_t ds_len(const mgt_gpt_data *d, int k, mgt_split sp)
{
	return d->ds[k][sp].present ? d->ds[k][sp].ix.n_samples : 0;
}

/* No dataset is asked for more samples than it has (builder.py's oversampling check). */
static mgt_status blend_check(const mgt_gpt_data *d, mgt_split sp, const gpt_blend *b)
{
	for (int64_t s = 0; s < b->len; s++) {
		int k = b->di[s];
		if (k < 0 || k >= d->n || b->dsi[s] < 0 || b->dsi[s] >= ds_len(d, k, sp))
			return mgt_err(MGT_ERR_INPUT, "the %s blend oversamples %s: sample %lld of %lld",
				       mgt_split_name(sp), k >= 0 && k < d->n ? d->src[k].prefix : "?",
				       (long long)b->dsi[s], (long long)(k >= 0 && k < d->n ? ds_len(d, k, sp) : 0));
	}
	return MGT_OK;
}

static bool blend_load(mgt_gpt_data *d, mgt_split sp, gpt_blend *b, const char *desc, const char *base)
{
	mgt_npy_array *a = b->map;
	a[0] = (mgt_npy_array){ "dataset_index.npy", "<i2", 1, { b->len, 0 }, NULL, 0, 0 };
	a[1] = (mgt_npy_array){ "dataset_sample_index.npy", "<i8", 1, { b->len, 0 }, NULL, 0, 0 };
	if (mgt_npy_cache_load(d->cache_path, base, desc, a, 2))
		return false;
	b->di = (int16_t *)a[0].data;
	b->dsi = (int64_t *)a[1].data;
	if (blend_check(d, sp, b) == MGT_OK)
		return true;
	mgt_npy_cache_unmap(a, 2);
	b->di = NULL;
	b->dsi = NULL;
	return false;
}

/* Build (or load with --data-cache-path) the blend of split sp: weights w (normalized again, as
 * BlendedDataset does), size samples, or exhaustive over sizes when size < 0. */
static mgt_status blend_make(mgt_gpt_data *d, mgt_split sp, const double *w, int64_t size, const int64_t *sizes)
{
	gpt_blend *b = &d->blend[sp];
	double *w2 = mgt_malloc(sizeof *w2 * (size_t)d->n);
	if (!w2)
		return MGT_ERR_NOMEM;
	b->len = size < 0 ? 0 : size;
	for (int k = 0; size < 0 && k < d->n; k++)
		b->len += sizes[k];
	if (size >= 0)
		mgt_gpt_normalize(w, d->n, w2);
	char *desc = d->cache_path ? blend_description(d, sp, size < 0 ? w : w2, size) : NULL, base[128];
	if (desc)
		cache_base(base, sizeof base, desc, "BlendedDataset", sp);
	mgt_status st = MGT_OK;
	if (!desc || !blend_load(d, sp, b, desc, base)) {
		b->di = mgt_malloc((size_t)b->len * sizeof *b->di + 2);
		b->dsi = mgt_malloc((size_t)b->len * sizeof *b->dsi + 8);
		if (!b->di || !b->dsi)
			st = MGT_ERR_NOMEM;
		else if (size < 0)
			mgt_gpt_blend_indices_exhaustive(sizes, d->n, b->di, b->dsi);
		else
			mgt_gpt_blend_indices(w2, d->n, size, b->di, b->dsi);
		if (!st)
			st = blend_check(d, sp, b);
		if (!st && desc) {
			mgt_npy_array a[2] = {
				{ "dataset_index.npy", "<i2", 1, { b->len, 0 }, b->di, 0, 0 },
				{ "dataset_sample_index.npy", "<i8", 1, { b->len, 0 }, b->dsi, 0, 0 },
			};
			cache_store(d, d->cache_path, base, desc, a, 2);
		}
	}
	free(desc);
	free(w2);
	return st;
}

/* Weighted: each dataset asked for ceil(ceil(n * w) * 1.005) samples, the blend holds
 * sum(ceil(n * w)) (builder.py _get_size_per_split_per_dataset). */
static mgt_status blend_weighted(mgt_gpt_data *d, mgt_split sp, const double *w, uint64_t n)
{
	if (n == MGT_GPT_ALL)
		return mgt_err(MGT_ERR_USAGE, "%s split: blending by weights needs a sample count", mgt_split_name(sp));
	int64_t size = 0;
	for (int k = 0; k < d->n; k++) {
		double target = ceil((double)n * w[k]);
		mgt_status st = ds_open(d, k, sp, (int64_t)ceil(target * (1.0 + SURPLUS)));
		if (st)
			return st;
		size += (int64_t)target;
	}
	return blend_make(d, sp, w, size, NULL);
}

/* Unweighted: one epoch of each, blended by their lengths (up to n samples, or all). */
static mgt_status blend_unweighted(mgt_gpt_data *d, mgt_split sp, uint64_t n)
{
	int64_t *len = mgt_malloc(sizeof *len * (size_t)d->n), total = 0;
	double *w = mgt_malloc(sizeof *w * (size_t)d->n);
	mgt_status st = !len || !w ? MGT_ERR_NOMEM : MGT_OK;
	for (int k = 0; k < d->n && !st; k++) {
		if ((st = ds_open(d, k, sp, MGT_GPT_NONE)))
			break;
		len[k] = ds_len(d, k, sp);
		w[k] = (double)len[k];
		total += len[k];
		if (!len[k])
			st = mgt_err(MGT_ERR_INPUT, "%s: the %s split has no samples to blend", d->src[k].prefix,
				     mgt_split_name(sp));
	}
	if (!st)
		st = blend_make(d, sp, w, n == MGT_GPT_ALL ? -1 : (int64_t)(n < (uint64_t)total ? n : (uint64_t)total), len);
	free(len);
	free(w);
	return st;
}

/* ---- open / close -------------------------------------------------------------------------- */

static mgt_status check_config(const mgt_gpt_data_config *cfg)
{
	if (cfg->seq_length < 1)
		return mgt_err(MGT_ERR_USAGE, "seq length %d: expected at least 1", cfg->seq_length);
	if (cfg->seed > UINT32_MAX)
		return mgt_err(MGT_ERR_USAGE, "seed %llu: numpy RandomState takes 0 to 2^32-1",
			       (unsigned long long)cfg->seed);
	if (!cfg->mock && (cfg->n_paths < 1 || !cfg->paths))
		return mgt_err(MGT_ERR_USAGE, "data path: no dataset prefix (or --mock-data)");
	if (!cfg->mock && cfg->n_paths >= 32767)
		return mgt_err(MGT_ERR_USAGE, "data path: %d datasets (at most 32766)", cfg->n_paths);
	for (int k = 0; cfg->weights && !cfg->mock && k < cfg->n_paths; k++)
		if (!(cfg->weights[k] > 0))
			return mgt_err(MGT_ERR_USAGE, "data path: weight %g of %s must be > 0", cfg->weights[k],
				       cfg->paths[k]);
	return MGT_OK;
}

static mgt_status data_alloc(const mgt_gpt_data_config *cfg, mgt_gpt_data **out)
{
	mgt_gpt_data *d = calloc(1, sizeof *d);
	if (!d)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	*out = d;
	d->S = cfg->seq_length;
	d->seed = (uint32_t)cfg->seed;
	d->eod = cfg->eod_id;
	d->vocab = cfg->vocab_size;
	d->eod_mask_loss = cfg->eod_mask_loss;
	d->reset_position_ids = cfg->reset_position_ids;
	d->keep_partial_valid = cfg->keep_partial_valid;
	d->mock = cfg->mock;
	d->n = cfg->mock ? 1 : cfg->n_paths;
	d->blended = !cfg->mock && (cfg->n_paths > 1 || cfg->weights);
	d->split_str = mgt_strdup(cfg->split ? cfg->split : "1,0,0");
	d->cache_path = cfg->cache_path ? mgt_strdup(cfg->cache_path) : NULL;
	d->src = calloc((size_t)d->n, sizeof *d->src);
	d->ds = calloc((size_t)d->n, sizeof *d->ds);
	if (!d->split_str || (cfg->cache_path && !d->cache_path) || !d->src || !d->ds)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	return mgt_gpt_split_parse(d->split_str, &d->split);
}

static mgt_status open_splits(mgt_gpt_data *d, const mgt_gpt_data_config *cfg)
{
	double *w = NULL;
	if (cfg->weights && !(w = mgt_malloc(sizeof *w * (size_t)d->n)))
		return MGT_ERR_NOMEM;
	if (w)
		mgt_gpt_normalize(cfg->weights, d->n, w);
	mgt_status st = MGT_OK;
	for (int k = 0; k < 3 && !st; k++) {
		uint64_t n = cfg->num_samples[k];
		if (!d->split.present[k])
			continue;
		if (!d->blended)
			st = ds_open(d, 0, (mgt_split)k, n == MGT_GPT_ALL ? MGT_GPT_NONE : (int64_t)n);
		else if (w)
			st = blend_weighted(d, (mgt_split)k, w, n);
		else
			st = blend_unweighted(d, (mgt_split)k, n);
	}
	free(w);
	return st;
}

mgt_status mgt_gpt_data_open(const mgt_gpt_data_config *cfg, mgt_gpt_data **out)
{
	*out = NULL;
	mgt_gpt_data *d = NULL;
	mgt_status st = check_config(cfg);
	if (!st)
		st = data_alloc(cfg, &d);
	for (int k = 0; !st && k < d->n; k++) {
		st = d->mock ? src_open_mock(&d->src[k], cfg) : src_open_idx(&d->src[k], cfg->paths[k]);
		if (!st)
			st = check_vocab(d, &d->src[k]);
	}
	if (!st)
		st = open_splits(d, cfg);
	for (int k = 0; d && !st && k < d->n; k++)
		if (d->src[k].idx) {   /* lengths are read from the .idx from now on */
			free(d->src[k].lengths);
			d->src[k].lengths = NULL;
		}
	if (st) {
		mgt_gpt_data_close(d);
		return st;
	}
	*out = d;
	return MGT_OK;
}

void mgt_gpt_data_close(mgt_gpt_data *d)
{
	if (!d)
		return;
	for (int k = 0; d->ds && k < d->n; k++)
		for (int s = 0; s < 3; s++) {
			mgt_gpt_index_free(&d->ds[k][s].ix);
			free(d->ds[k][s].desc);
		}
	for (int k = 0; d->src && k < d->n; k++) {
		mgt_idx_close(d->src[k].idx);
		free(d->src[k].lengths);
	}
	for (int s = 0; s < 3; s++) {
		if (d->blend[s].map[0].map) {
			mgt_npy_cache_unmap(d->blend[s].map, 2);
		} else {
			free(d->blend[s].di);
			free(d->blend[s].dsi);
		}
	}
	free(d->src);
	free(d->ds);
	free(d->split_str);
	free(d->cache_path);
	free(d);
}

/* ---- queries and samples ------------------------------------------------------------------- */

int64_t mgt_gpt_data_len(const mgt_gpt_data *d, mgt_split split)
{
	if ((unsigned)split > 2 || !d->split.present[split])
		return 0;
	return d->blended ? d->blend[split].len : ds_len(d, 0, split);
}

const mgt_gpt_index *mgt_gpt_data_index(const mgt_gpt_data *d, int k, mgt_split split)
{
	if (k < 0 || k >= d->n || (unsigned)split > 2 || !d->ds[k][split].present)
		return NULL;
	return &d->ds[k][split].ix;
}

const char *mgt_gpt_data_note(const mgt_gpt_data *d) { return d->note; }

mgt_status mgt_gpt_data_locate(const mgt_gpt_data *d, mgt_split split, int64_t idx, int *dataset,
			       int64_t *dataset_idx)
{
	int64_t len = mgt_gpt_data_len(d, split);
	if (idx < 0 || idx >= len)
		return mgt_err(MGT_ERR_INPUT, "sample %lld of the %s split: out of range (%lld samples)",
			       (long long)idx, mgt_split_name(split), (long long)len);
	*dataset = d->blended ? d->blend[split].di[idx] : 0;
	*dataset_idx = d->blended ? d->blend[split].dsi[idx] : idx;
	return MGT_OK;
}

/* Copy ids [a, b) of sequence seq to text positions pos..: tokens[< S], *last (position S). */
static void put_ids(const gpt_src *s, uint64_t seq, int64_t a, int64_t b, int64_t pos, int S,
		    int32_t *tokens, int32_t *last)
{
	const unsigned char *p = s->idx ? seq_bytes(s, seq) : NULL;
	if (s->idx && s->dtype == MGT_DT_UINT16)   /* the common case, without a switch per id */
		for (; a < b && pos < S; a++, pos++)
			tokens[pos] = (int32_t)p[2 * a] | (int32_t)p[2 * a + 1] << 8;
	for (int64_t j = a; j < b; j++, pos++) {
		int32_t v = (int32_t)src_id(s, p, seq, j);
		if (pos < S)
			tokens[pos] = v;
		else
			*last = v;
	}
}

/* The S + 1 ids of sample j (_query_document_sample_shuffle_indices); *n = how many (rest padding). */
static mgt_status gather(const gpt_src *s, const mgt_gpt_index *ix, int64_t j, int S, int32_t *tokens,
			 int32_t *last, int64_t *n)
{
	int64_t i = mgt_gpt_index_shuffle(ix, j), d0, o0, d1, o1;
	*n = 0;
	if (i < 0 || i >= ix->n_samples)
		return mgt_err(MGT_ERR_FORMAT, "%s: shuffle index entry %lld out of range", s->prefix, (long long)j);
	mgt_gpt_index_row(ix, i, &d0, &o0);
	mgt_gpt_index_row(ix, i + 1, &d1, &o1);
	if (d0 < 0 || d0 > d1 || d1 >= ix->n_docs)
		return mgt_err(MGT_ERR_FORMAT, "%s: sample index row %lld out of range", s->prefix, (long long)i);
	for (int64_t p = d0; p <= d1; p++) {
		uint64_t seq = (uint64_t)ix->document_index[p];
		int64_t len = src_len(s, seq), a = p == d0 ? o0 : 0, b = p == d1 ? o1 + EXTRA : len;
		if (a < 0 || a > b || b > len || *n + (b - a) > S + EXTRA)
			return mgt_err(MGT_ERR_FORMAT, "%s: sample %lld reaches outside sequence %llu",
				       s->prefix, (long long)i, (unsigned long long)seq);
		put_ids(s, seq, a, b, *n, S, tokens, last);
		*n += b - a;
	}
	return MGT_OK;
}

/* GPTDataset.__getitem__ after the text: masks, positions, padding ids to 0. */
static void finish_sample(const mgt_gpt_data *d, int32_t *restrict tokens, int32_t *restrict labels,
			  float *restrict loss_mask, int32_t *restrict position_ids)
{
	const int S = d->S;
	const int32_t eod = d->eod, mask_eod = d->eod_mask_loss;
	for (int q = 0; q < S; q++)
		loss_mask[q] = (mask_eod && tokens[q] == eod) || labels[q] == PAD ? 0.0f : 1.0f;
	for (int q = 0; q < S; q++)
		position_ids[q] = q;
	for (int q = 0, prev = 0; d->reset_position_ids && q < S; q++) {
		position_ids[q] = q - prev;
		prev = tokens[q] == eod ? q + 1 : prev;
	}
	for (int q = 0; q < S; q++) {
		tokens[q] = tokens[q] == PAD ? 0 : tokens[q];
		labels[q] = labels[q] == PAD ? 0 : labels[q];
	}
}

void mgt_gpt_doc_starts(const int32_t *tokens, int S, int32_t eod, int32_t *start)
{
	for (int q = 0, st = 0; q < S; q++) {
		start[q] = st;
		st = tokens[q] == eod ? q + 1 : st;
	}
}

mgt_status mgt_gpt_data_sample(const mgt_gpt_data *d, mgt_split split, int64_t idx, int32_t *tokens,
			       int32_t *labels, float *loss_mask, int32_t *position_ids)
{
	int k;
	int64_t j, n;
	mgt_status st = mgt_gpt_data_locate(d, split, idx, &k, &j);
	if (st)
		return st;
	int S = d->S;
	int32_t last = PAD;
	if ((st = gather(&d->src[k], &d->ds[k][split].ix, j, S, tokens, &last, &n)))
		return st;
	for (int64_t q = n; q < S; q++)
		tokens[q] = PAD;
	memmove(labels, tokens + 1, (size_t)(S - 1) * sizeof *labels);
	labels[S - 1] = last;
	finish_sample(d, tokens, labels, loss_mask, position_ids);
	return MGT_OK;
}
