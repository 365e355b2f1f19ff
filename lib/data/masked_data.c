/* BERTMaskedWordPieceDataset / T5MaskedWordPieceDataset over one sentence-level indexed dataset
 * (megatron/core/datasets/masked_dataset.py): the document split, the per-split sample index with
 * Megatron's cache (masked_dataset.py::_build_sample_index, megatron_dataset.py's
 * unique_description and its md5) and the sample fetch.
 * Sources: megatron/core/datasets/{masked_dataset.py, bert_dataset.py, t5_dataset.py,
 * megatron_dataset.py, blended_megatron_dataset_builder.py, blended_megatron_dataset_config.py}. */
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_SPLIT "969, 30, 1"   /* arguments.py: --data-path without --split */

typedef struct {
	bool present;
	uint64_t beg, end;         /* documents [beg, end) */
	mgt_masked_index ix;
	char *desc;
} masked_split;

struct mgt_masked_data {
	mgt_masked_config cfg;
	mgt_masked_params params;
	char *split_str;
	mgt_gpt_split split;
	mgt_idx *idx;
	int32_t *sizes;            /* every sentence length */
	masked_split sp[3];
	char note[512];
};

/* ---- json.dumps(indent=4) of the description (Python's json module, ensure_ascii) ----------- */

typedef struct { mgt_buf b; mgt_status st; } pyjson;

static void pj_raw(pyjson *j, const char *s, size_t n)
{
	if (!j->st)
		j->st = mgt_buf_add(&j->b, s, n);
}

static void pj_str(pyjson *j, const char *s) { pj_raw(j, s, strlen(s)); }

/* Next code point of UTF-8 text, U+FFFD for a bad byte. */
static uint32_t utf8_next(const unsigned char **p)
{
	const unsigned char *s = *p;
	int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
	uint32_t cp = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			n = 0;
		else
			cp = cp << 6 | (s[i] & 0x3Fu);
	}
	*p = s + (n ? n : 1);
	return n ? cp : 0xFFFD;
}

/* A JSON string as json.dumps writes it (ensure_ascii: \uXXXX in lower case, surrogate pairs). */
static void pj_string(pyjson *j, const char *s)
{
	char e[16];
	pj_raw(j, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		uint32_t c = utf8_next(&p);
		const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" :
				  c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
		if (esc) {
			pj_str(j, esc);
		} else if (c >= 0x20 && c < 0x7F) {
			e[0] = (char)c;
			pj_raw(j, e, 1);
		} else if (c < 0x10000) {
			snprintf(e, sizeof e, "\\u%04x", c);
			pj_str(j, e);
		} else {
			c -= 0x10000;
			snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
			pj_str(j, e);
		}
	}
	pj_raw(j, "\"", 1);
}

/* float.__repr__: the shortest digits that read back, fixed notation for -4 < decpt <= 16 (".0"
 * on whole numbers), else d.ddde+XX. */
static void pj_float(pyjson *j, double v)
{
	char s[40], d[24], out[64];
	if (v == 0) {
		pj_str(j, signbit(v) ? "-0.0" : "0.0");
		return;
	}
	int prec = 1;
	for (; prec < 17; prec++) {
		snprintf(s, sizeof s, "%.*e", prec - 1, v);
		if (strtod(s, NULL) == v)
			break;
	}
	snprintf(s, sizeof s, "%.*e", prec - 1, fabs(v));
	int nd = 0, e10 = atoi(strchr(s, 'e') + 1), decpt = e10 + 1, n = 0;
	for (const char *c = s; *c != 'e'; c++)
		if (*c != '.')
			d[nd++] = *c;
	if (v < 0)
		out[n++] = '-';
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			out[n++] = '0', out[n++] = '.';
			for (int i = 0; i < -decpt; i++)
				out[n++] = '0';
		}
		for (int i = 0; i < nd || i < decpt; i++) {
			if (i == decpt && decpt > 0)
				out[n++] = '.';
			out[n++] = i < nd ? d[i] : '0';
		}
		if (decpt >= nd)
			out[n++] = '.', out[n++] = '0';
		out[n] = 0;
	} else {
		out[n++] = d[0];
		if (nd > 1)
			out[n++] = '.';
		for (int i = 1; i < nd; i++)
			out[n++] = d[i];
		snprintf(out + n, sizeof out - (size_t)n, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
	}
	pj_str(j, out);
}

static void pj_indent(pyjson *j, int level)
{
	pj_raw(j, "\n", 1);
	for (int i = 0; i < level; i++)
		pj_raw(j, "    ", 4);
}

static void pj_key(pyjson *j, const char *key, bool first, int level)
{
	if (!first)
		pj_raw(j, ",", 1);
	pj_indent(j, level);
	pj_string(j, key);
	pj_raw(j, ": ", 2);
}

static void pj_int(pyjson *j, long long v)
{
	char s[32];
	snprintf(s, sizeof s, "%lld", v);
	pj_str(j, s);
}

/* config.split_matrix: (beg, end) pairs or null; the first beg is the int 0 of functools.reduce. */
static void pj_split_matrix(pyjson *j, const mgt_gpt_split *sp)
{
	pj_raw(j, "[", 1);
	for (int i = 0; i < 3; i++) {
		if (i)
			pj_raw(j, ",", 1);
		pj_indent(j, 2);
		if (!sp->present[i]) {
			pj_str(j, "null");
			continue;
		}
		pj_raw(j, "[", 1);
		pj_indent(j, 3);
		if (i == 0)
			pj_int(j, 0);
		else
			pj_float(j, sp->beg[i]);
		pj_raw(j, ",", 1);
		pj_indent(j, 3);
		pj_float(j, sp->end[i]);
		pj_indent(j, 2);
		pj_raw(j, "]", 1);
	}
	pj_indent(j, 1);
	pj_raw(j, "]", 1);
}

static void pj_tokenizer(pyjson *j, const mgt_masked_config *c)
{
	if (c->n_tokenizer_ids == 0) {
		pj_str(j, "null");
		return;
	}
	pj_raw(j, "{", 1);
	for (int i = 0; i < c->n_tokenizer_ids; i++) {
		pj_key(j, c->tokenizer_ids[2 * i], i == 0, 2);
		if (c->tokenizer_ids[2 * i + 1])
			pj_string(j, c->tokenizer_ids[2 * i + 1]);
		else
			pj_str(j, "null");
	}
	pj_indent(j, 1);
	pj_raw(j, "}", 1);
}

/* masked_dataset.py's unique_description of split k (MegatronDataset.__init__, json.dumps
 * indent=4 of unique_identifiers in their order). */
static char *description(const mgt_masked_data *d, mgt_split k)
{
	const mgt_masked_config *c = &d->cfg;
	bool t5 = c->kind == MGT_MASKED_T5;
	pyjson j = { { 0 }, MGT_OK };
	pj_raw(&j, "{", 1);
	pj_key(&j, "class", true, 1);
	pj_string(&j, mgt_masked_class(c->kind));
	pj_key(&j, "dataset_path", false, 1);
	pj_string(&j, c->path);
	pj_key(&j, "num_samples", false, 1);
	if (c->num_samples[k] == MGT_GPT_ALL)
		pj_str(&j, "null");
	else
		pj_int(&j, (long long)c->num_samples[k]);
	pj_key(&j, "index_split", false, 1);
	pj_string(&j, mgt_split_name(k));
	pj_key(&j, "random_seed", false, 1);
	pj_int(&j, c->seed);
	pj_key(&j, "sequence_length", false, 1);
	pj_int(&j, c->seq_length);
	pj_key(&j, "split", false, 1);
	pj_string(&j, d->split_str);
	pj_key(&j, "split_matrix", false, 1);
	pj_split_matrix(&j, &d->split);
	pj_key(&j, "tokenizer", false, 1);
	pj_tokenizer(&j, c);
	pj_key(&j, "masking_probability", false, 1);
	pj_float(&j, c->mask_prob);
	pj_key(&j, "short_sequence_probability", false, 1);
	pj_float(&j, c->short_seq_prob);
	pj_key(&j, "masking_max_ngram", false, 1);
	pj_int(&j, t5 ? 10 : 3);
	pj_key(&j, "masking_do_full_word", false, 1);
	pj_str(&j, "true");
	pj_key(&j, "masking_do_permutation", false, 1);
	pj_str(&j, "false");
	pj_key(&j, "masking_use_longer_ngrams", false, 1);
	pj_str(&j, "false");
	pj_key(&j, "masking_use_geometric_distribution", false, 1);
	pj_str(&j, t5 ? "true" : "false");
	pj_key(&j, t5 ? "sequence_length_decoder" : "classification_head", false, 1);
	if (t5)
		pj_int(&j, c->decoder_seq_length);
	else
		pj_str(&j, c->binary_head ? "true" : "false");
	pj_indent(&j, 0);
	pj_raw(&j, "}", 2);   /* with the NUL */
	if (j.st) {
		free(j.b.p);
		return NULL;
	}
	return j.b.p;
}

/* ---- configuration --------------------------------------------------------------------------- */

static mgt_status check_config(const mgt_masked_config *c)
{
	bool t5 = c->kind == MGT_MASKED_T5;
	int reserved = t5 ? 2 : 3;
	if (!c->path || !c->vocab || c->vocab->size < 1 || !c->vocab->is_subword)
		return mgt_err(MGT_ERR_USAGE, "masked dataset: a data prefix and a vocabulary are required");
	if (c->seq_length < reserved + 2)
		return mgt_err(MGT_ERR_USAGE, "%s %d: expected at least %d (%d positions are [CLS]/[SEP] or "
			       "bos/eos, and a target needs 2)", t5 ? "--encoder-seq-length" : "--seq-length",
			       c->seq_length, reserved + 2, reserved);
	if (t5 && c->decoder_seq_length < 1)
		return mgt_err(MGT_ERR_USAGE, "--decoder-seq-length %d: expected a positive length",
			       c->decoder_seq_length);
	if (!(c->mask_prob > 0 && c->mask_prob < 1))
		return mgt_err(MGT_ERR_USAGE, "--mask-prob %g: expected a probability in (0, 1)", c->mask_prob);
	if (!(c->short_seq_prob >= 0 && c->short_seq_prob <= 1))
		return mgt_err(MGT_ERR_USAGE, "--short-seq-prob %g: expected a probability in [0, 1]",
			       c->short_seq_prob);
	if (c->seed < 1 || c->seed > INT32_MAX - 1)
		return mgt_err(MGT_ERR_USAGE, "--seed %u: the masked datasets' sample index needs a seed in "
			       "[1, %d] (helpers.cpp build_mapping takes an int32 seed > 0)", c->seed, INT32_MAX - 1);
	if (t5 && c->vocab->n_sentinels < 1)
		return mgt_err(MGT_ERR_USAGE, "T5 needs sentinel tokens (additional_special_tokens_ids, e.g. "
			       "<extra_id_0>...); the vocabulary has none");
	for (int i = 0; i < c->vocab->n_sentinels; i++)
		if (c->vocab->sentinels[i] < 0 || c->vocab->sentinels[i] >= c->vocab->size)
			return mgt_err(MGT_ERR_USAGE, "sentinel %d: id %d is outside the vocabulary (size %lld)", i,
				       c->vocab->sentinels[i], (long long)c->vocab->size);
	return MGT_OK;
}

static mgt_status open_source(mgt_masked_data *d)
{
	const char *prefix = d->cfg.path;
	mgt_status st = mgt_idx_open(&d->idx, prefix);
	if (!st)
		st = mgt_idx_verify_bin(d->idx);
	if (st)
		return mgt_err_ctx(st, "data prefix %s", prefix);
	int dt = mgt_idx_dtype(d->idx);
	if (dt == MGT_DT_FLOAT32 || dt == MGT_DT_FLOAT64)
		return mgt_err(MGT_ERR_FORMAT, "%s.idx: dtype %s: token ids must be integers", prefix, mgt_dtype_name(dt));
	uint64_t n = mgt_idx_num_sequences(d->idx);
	if (!(d->sizes = mgt_malloc(n * sizeof *d->sizes + 4)))
		return MGT_ERR_NOMEM;
	for (uint64_t i = 0; i < n; i++)
		d->sizes[i] = mgt_idx_seq_length(d->idx, i);
	return MGT_OK;
}

/* ---- one split: the sample index, cached ----------------------------------------------------- */

static void add_note(mgt_masked_data *d, const char *msg)
{
	if (!d->note[0])
		snprintf(d->note, sizeof d->note, "%s; sample index kept in memory only", msg);
}

static char *cache_dir(const mgt_masked_data *d)
{
	const char *cls = mgt_masked_class(d->cfg.kind);
	if (d->cfg.cache_path)
		return mgt_strdup(d->cfg.cache_path);
	size_t n = strlen(d->cfg.path) + strlen(cls) + 32;
	char *p = mgt_malloc(n);
	if (p)
		snprintf(p, n, "%s/cache/%s_indices", d->cfg.path, cls);
	return p;
}

/* Rows of a loaded index inside the split's sentences, targets in [2, max]. */
static bool rows_sane(const mgt_masked_index *ix, const mgt_masked_mapping *m)
{
	for (int64_t k = 0; k < ix->n; k++) {
		uint64_t r[3];
		mgt_masked_index_row(ix, k, r);
		if (r[0] >= r[1] || r[0] < (uint64_t)m->docs[0] || r[1] > (uint64_t)m->docs[m->n_docs] || r[2] < 2 ||
		    r[2] > (uint64_t)m->max_seq_length)
			return false;
	}
	return true;
}

static mgt_npy_array index_array(const mgt_masked_index *ix)
{
	return (mgt_npy_array){ "sample_index.npy", ix->u64 ? "<u8" : "<u4", 2, { ix->n, 3 }, ix->rows, 0, 0 };
}

static bool index_load(masked_split *s, const char *dir, const char *base, const mgt_masked_mapping *m)
{
	mgt_npy_array a = index_array(&s->ix);
	if (mgt_npy_cache_load(dir, base, s->desc, &a, 1))
		return false;
	s->ix.rows = (void *)a.data;
	s->ix.map_ = a.map;
	s->ix.map_size_ = a.map_size;
	if (rows_sane(&s->ix, m))
		return true;
	munmap(a.map, a.map_size);
	s->ix.rows = s->ix.map_ = NULL;
	return false;
}

static void index_store(mgt_masked_data *d, masked_split *s, const char *dir, const char *base)
{
	mgt_npy_array a = index_array(&s->ix);
	if (mgt_mkdirs(dir) || mgt_npy_cache_save(dir, base, s->desc, &a, 1))
		add_note(d, mgt_err_msg());
}

static mgt_status index_error(const mgt_masked_data *d, mgt_split k, const masked_split *s, mgt_status st)
{
	uint64_t n = mgt_idx_num_documents(d->idx);
	if (st == MGT_ERR_INPUT && d->cfg.kind == MGT_MASKED_BERT && d->cfg.binary_head)
		return mgt_err_ctx(st, "%s, %s split (documents [%llu, %llu) of %llu): the binary head needs documents "
				   "of two or more sentences: preprocess with --split-sentences, or train with "
				   "--bert-no-binary-head", d->cfg.path, mgt_split_name(k), (unsigned long long)s->beg,
				   (unsigned long long)s->end, (unsigned long long)n);
	return mgt_err_ctx(st, "%s, %s split (documents [%llu, %llu) of %llu)", d->cfg.path, mgt_split_name(k),
			   (unsigned long long)s->beg, (unsigned long long)s->end, (unsigned long long)n);
}

static mgt_status split_open(mgt_masked_data *d, mgt_split k)
{
	masked_split *s = &d->sp[k];
	const mgt_masked_config *c = &d->cfg;
	uint64_t n = mgt_idx_num_documents(d->idx);
	mgt_gpt_split_range(&d->split, k, n, &s->beg, &s->end);
	s->present = true;
	if (s->beg == s->end)
		return mgt_err(MGT_ERR_INPUT, "%s, %s split: its share of the %llu documents rounds to none (documents "
			       "[%llu, %llu); Megatron fails with an IndexError): give it a larger share in --split, "
			       "or use more data", c->path, mgt_split_name(k), (unsigned long long)n,
			       (unsigned long long)s->beg, (unsigned long long)s->end);
	int64_t *docs = mgt_malloc((size_t)(s->end - s->beg + 1) * sizeof *docs);
	if (!docs)
		return MGT_ERR_NOMEM;
	for (uint64_t i = s->beg; i <= s->end; i++)
		docs[i - s->beg] = mgt_idx_doc_index(d->idx, i);
	bool t5 = c->kind == MGT_MASKED_T5;
	mgt_masked_mapping m = { docs, (int64_t)(s->end - s->beg), d->sizes, mgt_idx_num_sequences(d->idx),
				 c->num_samples[k], c->seq_length - (t5 ? 2 : 3), c->short_seq_prob,
				 (int32_t)c->seed, !t5 && c->binary_head ? 2 : 1 };
	char *dir = NULL, base[160];
	mgt_status st = mgt_masked_index_count(&m, &s->ix);
	if (!st && !(s->desc = description(d, k)))
		st = MGT_ERR_NOMEM;
	if (!st && (dir = cache_dir(d))) {
		char h[33];
		mgt_md5_hex(s->desc, strlen(s->desc), h);
		snprintf(base, sizeof base, "%s-%s", h, mgt_masked_class(c->kind));
		if (index_load(s, dir, base, &m)) {
			free(dir);
			free(docs);
			return MGT_OK;
		}
	}
	if (!st)
		st = mgt_masked_index_build(&m, &s->ix);
	if (!st && dir)
		index_store(d, s, dir, base);
	free(dir);
	free(docs);
	return st ? index_error(d, k, s, st) : MGT_OK;
}

/* ---- the dataset ------------------------------------------------------------------------------- */

mgt_status mgt_masked_data_open(const mgt_masked_config *cfg, mgt_masked_data **out)
{
	*out = NULL;
	mgt_status st = check_config(cfg);
	if (st)
		return st;
	mgt_masked_data *d = calloc(1, sizeof *d);
	if (!d)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	d->cfg = *cfg;
	d->split_str = mgt_strdup(cfg->split ? cfg->split : DEFAULT_SPLIT);
	if (!d->split_str)
		st = MGT_ERR_NOMEM;
	if (!st)
		st = mgt_gpt_split_parse(d->split_str, &d->split);
	if (!st)
		st = open_source(d);
	d->params = (mgt_masked_params){ cfg->kind, cfg->seq_length, cfg->decoder_seq_length, cfg->binary_head,
					 cfg->mask_prob, cfg->seed, cfg->vocab,
					 mgt_masked_pad_id(cfg->vocab, cfg->allow_ambiguous_pad) };
	for (int k = 0; k < 3 && !st; k++)
		if (d->split.present[k])
			st = split_open(d, (mgt_split)k);
	if (st) {
		mgt_masked_data_close(d);
		return st;
	}
	*out = d;
	return MGT_OK;
}

void mgt_masked_data_close(mgt_masked_data *d)
{
	if (!d)
		return;
	for (int k = 0; k < 3; k++) {
		mgt_masked_index_free(&d->sp[k].ix);
		free(d->sp[k].desc);
	}
	mgt_idx_close(d->idx);
	free(d->sizes);
	free(d->split_str);
	free(d);
}

int64_t mgt_masked_data_len(const mgt_masked_data *d, mgt_split split)
{
	return d->sp[split].present ? d->sp[split].ix.n : 0;
}

const mgt_masked_index *mgt_masked_data_index(const mgt_masked_data *d, mgt_split split)
{
	return d->sp[split].present ? &d->sp[split].ix : NULL;
}

void mgt_masked_data_docs(const mgt_masked_data *d, mgt_split split, uint64_t *beg, uint64_t *end)
{
	*beg = d->sp[split].beg;
	*end = d->sp[split].end;
}

const char *mgt_masked_data_description(const mgt_masked_data *d, mgt_split split)
{
	return d->sp[split].present ? d->sp[split].desc : NULL;
}

const char *mgt_masked_data_note(const mgt_masked_data *d)
{
	return d->note;
}

/* ---- samples ----------------------------------------------------------------------------------- */

/* The sentences of row idx: ids concatenated, their lengths, the target. Caller frees. */
static mgt_status gather(const mgt_masked_data *d, mgt_split split, int64_t idx, mgt_masked_kind kind,
			 int32_t **ids, int64_t *n, int64_t **sl, int *n_sent, int64_t *tgt)
{
	if (d->cfg.kind != kind)
		return mgt_err(MGT_ERR_INPUT, "the dataset is a %s", mgt_masked_class(d->cfg.kind));
	if (idx < 0 || idx >= mgt_masked_data_len(d, split))
		return mgt_err(MGT_ERR_INPUT, "%s split: sample %lld is out of range (%lld samples)",
			       mgt_split_name(split), (long long)idx, (long long)mgt_masked_data_len(d, split));
	uint64_t r[3];
	mgt_masked_index_row(&d->sp[split].ix, idx, r);
	*tgt = (int64_t)r[2];
	*n_sent = (int)(r[1] - r[0]);
	int64_t total = 0;
	for (uint64_t s = r[0]; s < r[1]; s++)
		total += d->sizes[s];
	*ids = mgt_malloc((size_t)(total + 1) * sizeof **ids);
	*sl = mgt_malloc((size_t)(*n_sent + 1) * sizeof **sl);
	int32_t *seq = NULL;
	size_t cap = 0, len;
	mgt_status st = *ids && *sl ? MGT_OK : MGT_ERR_NOMEM;
	*n = 0;
	for (uint64_t s = r[0]; !st && s < r[1]; s++) {
		if (!(st = mgt_idx_get(d->idx, s, &seq, &len, &cap))) {
			memcpy(*ids + *n, seq, len * sizeof *seq);
			(*sl)[s - r[0]] = (int64_t)len;
			*n += (int64_t)len;
		}
	}
	free(seq);
	return st;
}

mgt_status mgt_masked_data_bert(const mgt_masked_data *d, mgt_split split, int64_t idx, mgt_bert_sample *out)
{
	int32_t *ids = NULL;
	int64_t *sl = NULL, n, tgt;
	int n_sent;
	mgt_status st = gather(d, split, idx, MGT_MASKED_BERT, &ids, &n, &sl, &n_sent, &tgt);
	if (!st)
		st = mgt_masked_bert_make(&d->params, idx, ids, n, sl, n_sent, tgt, out);
	free(ids);
	free(sl);
	return st ? mgt_err_ctx(st, "%s, %s split", d->cfg.path, mgt_split_name(split)) : MGT_OK;
}

mgt_status mgt_masked_data_t5(const mgt_masked_data *d, mgt_split split, int64_t idx, mgt_t5_sample *out)
{
	int32_t *ids = NULL;
	int64_t *sl = NULL, n, tgt;
	int n_sent;
	mgt_status st = gather(d, split, idx, MGT_MASKED_T5, &ids, &n, &sl, &n_sent, &tgt);
	if (!st)
		st = mgt_masked_t5_make(&d->params, idx, ids, n, tgt, out);
	free(ids);
	free(sl);
	return st ? mgt_err_ctx(st, "%s, %s split", d->cfg.path, mgt_split_name(split)) : MGT_OK;
}
