/* lib/data: what mgt-dataset shows of a dataset: the sequence length statistics of `info`, the
 * documents of `dump` (as JSON text lines or ids) and the masked datasets' index rows and samples
 * of `samples`, each written to a caller's stream.  See mgt-dataset(1). */
#include "data.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The k-th smallest sequence length (0-based), exactly, in O(1) memory: a histogram of the high
 * 16 bits picks the bucket, a second pass over that bucket's low 16 bits picks the value. */
static int32_t kth_length(const mgt_idx *d, uint64_t k)
{
	static uint64_t hist[1 << 16];
	uint64_t n = mgt_idx_num_sequences(d);
	memset(hist, 0, sizeof hist);
	for (uint64_t i = 0; i < n; i++)
		hist[(uint32_t)mgt_idx_seq_length(d, i) >> 16]++;
	uint32_t hi = 0;
	while (k >= hist[hi])
		k -= hist[hi++];
	memset(hist, 0, sizeof hist);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)mgt_idx_seq_length(d, i);
		if (v >> 16 == hi)
			hist[v & 0xFFFF]++;
	}
	uint32_t lo = 0;
	while (k >= hist[lo])
		k -= hist[lo++];
	return (int32_t)(hi << 16 | lo);
}

/* numpy.percentile(lengths, q), method "linear": numpy's virtual index and _lerp. */
static double percentile(const mgt_idx *d, double q)
{
	uint64_t n = mgt_idx_num_sequences(d);
	double vi = (double)(n - 1) * (q / 100.0);
	uint64_t below = (uint64_t)vi, above = below + 1 < n ? below + 1 : n - 1;
	double gamma = vi - (double)below;
	double a = kth_length(d, below), b = above == below ? a : kth_length(d, above);
	double diff = b - a;
	return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

/* numpy.median: the middle value, or the mean of the two middle values. */
static double median(const mgt_idx *d)
{
	uint64_t n = mgt_idx_num_sequences(d);
	if (n % 2)
		return kth_length(d, n / 2);
	return ((double)kth_length(d, n / 2 - 1) + (double)kth_length(d, n / 2)) / 2.0;
}

void mgt_idx_info_get(const mgt_idx *d, mgt_idx_info *out)
{
	mgt_idx_info s = {0};
	uint64_t n = mgt_idx_num_sequences(d), docs = mgt_idx_num_documents(d);
	for (uint64_t k = 0; k < docs; k++)
		s.empty_docs += mgt_idx_doc_index(d, k) == mgt_idx_doc_index(d, k + 1);
	if (n == 0) {
		*out = s;
		return;
	}
	s.min = INT32_MAX;
	for (uint64_t i = 0; i < n; i++) {
		int32_t len = mgt_idx_seq_length(d, i);
		s.min = len < s.min ? len : s.min;
		s.max = len > s.max ? len : s.max;
	}
	s.mean = (double)mgt_idx_num_tokens(d) / (double)n;
	s.median = median(d);
	s.p99 = percentile(d, 99.0);
	*out = s;
}

static json_t *stats_json(const mgt_idx *d, const mgt_idx_info *s)
{
	size_t bin_size;
	mgt_idx_bin(d, &bin_size);
	json_t *o = json_object(), *len = json_null();
	json_object_set_new(o, "prefix", json_string(mgt_idx_prefix(d)));
	json_object_set_new(o, "dtype", json_string(mgt_dtype_name(mgt_idx_dtype(d))));
	json_object_set_new(o, "dtype_code", json_integer(mgt_idx_dtype(d)));
	json_object_set_new(o, "sequences", json_integer((json_int_t)mgt_idx_num_sequences(d)));
	json_object_set_new(o, "documents", json_integer((json_int_t)mgt_idx_num_documents(d)));
	json_object_set_new(o, "empty_documents", json_integer((json_int_t)s->empty_docs));
	json_object_set_new(o, "tokens", json_integer((json_int_t)mgt_idx_num_tokens(d)));
	json_object_set_new(o, "bin_bytes", json_integer((json_int_t)bin_size));
	if (mgt_idx_num_sequences(d) > 0) {
		json_decref(len);
		len = json_object();
		json_object_set_new(len, "min", json_integer(s->min));
		json_object_set_new(len, "mean", json_real(s->mean));
		json_object_set_new(len, "median", json_real(s->median));
		json_object_set_new(len, "p99", json_real(s->p99));
		json_object_set_new(len, "max", json_integer(s->max));
	}
	json_object_set_new(o, "sequence_length", len);
	return o;
}

static void info_text(FILE *out, const mgt_idx *d, const mgt_idx_info *s)
{
	char b[32];
	size_t bin_size;
	mgt_idx_bin(d, &bin_size);
	fprintf(out, "prefix:           %s\n", mgt_idx_prefix(d));
	fprintf(out, "dtype:            %s (code %d)\n", mgt_dtype_name(mgt_idx_dtype(d)), mgt_idx_dtype(d));
	fprintf(out, "sequences:        %s\n", mgt_fmt_count(b, mgt_idx_num_sequences(d)));
	fprintf(out, "documents:        %s\n", mgt_fmt_count(b, mgt_idx_num_documents(d)));
	fprintf(out, "empty documents:  %s\n", mgt_fmt_count(b, s->empty_docs));
	fprintf(out, "tokens:           %s\n", mgt_fmt_count(b, mgt_idx_num_tokens(d)));
	fprintf(out, ".bin bytes:       %s\n", mgt_fmt_count(b, bin_size));
	if (mgt_idx_num_sequences(d) == 0) {
		fprintf(out, "sequence length:  - (no sequences)\n");
		return;
	}
	fprintf(out, "sequence length:  min %d, mean %.2f, median %.6g, p99 %.6g, max %d\n", s->min, s->mean,
		s->median, s->p99, s->max);
}

void mgt_idx_info_write(FILE *out, const mgt_idx *d, const mgt_idx_info *s, bool json)
{
	if (!json) {
		info_text(out, d, s);
		return;
	}
	json_t *o = stats_json(d, s);
	json_dumpf(o, out, JSON_COMPACT);
	fputc('\n', out);
	json_decref(o);
}

/* Append ids as decimal numbers separated by spaces, and a newline. */
static mgt_status print_ids(FILE *out, mgt_buf *line, const int32_t *ids, size_t n)
{
	line->n = 0;
	if (mgt_buf_reserve(line, 12 * n + 1))
		return MGT_ERR_NOMEM;
	char *p = line->p;
	for (size_t i = 0; i < n; i++) {
		char tmp[12];
		int k = 0;
		int64_t v = ids[i];
		int neg = v < 0;
		uint64_t u = (uint64_t)(neg ? -v : v);
		do
			tmp[k++] = (char)('0' + u % 10);
		while ((u /= 10) > 0);
		if (i)
			*p++ = ' ';
		if (neg)
			*p++ = '-';
		while (k)
			*p++ = tmp[--k];
	}
	*p++ = '\n';
	fwrite(line->p, 1, (size_t)(p - line->p), out);
	return MGT_OK;
}

/* Append the UTF-8 for code point cp. */
static void put_utf8(mgt_buf *o, uint32_t cp)
{
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | cp >> 6);
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 2;
	} else {
		b[0] = (unsigned char)(0xE0 | cp >> 12);
		b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 3;
	}
	mgt_buf_add(o, b, n);
}

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0; *bad = bytes of its maximal invalid
 * subpart (what one U+FFFD replaces, as Python's bytes.decode(errors="replace") does). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned c = s[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xBF;
	*bad = 1;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
	else
		return 0;
	for (size_t i = 1; i < len; i++) {
		unsigned x = i < n ? s[i] : 0;
		if (i >= n || x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xBF)) {
			*bad = i;
			return 0;
		}
	}
	return len;
}

/* Replace invalid UTF-8 with U+FFFD. */
static void utf8_replace(const char *s, size_t n, mgt_buf *out)
{
	const unsigned char *p = (const unsigned char *)s;
	out->n = 0;
	for (size_t i = 0; i < n;) {
		size_t bad, k = utf8_seq(p + i, n - i, &bad);
		if (k) {
			mgt_buf_add(out, p + i, k);
			i += k;
		} else {
			put_utf8(out, 0xFFFD);
			i += bad;
		}
	}
}

static mgt_status print_text(FILE *out, const mgt_idx_dump_opts *o, const mgt_buf *text, mgt_buf *fixed)
{
	json_t *s = json_stringn(text->p ? text->p : "", text->n);
	if (!s) {
		utf8_replace(text->p, text->n, fixed);
		s = json_stringn(fixed->p ? fixed->p : "", fixed->n);
	}
	json_t *obj = json_object();
	if (!s || !obj || json_object_set_new(obj, o->key, s) != 0) {
		json_decref(obj);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	json_dumpf(obj, out, JSON_COMPACT);
	fputc('\n', out);
	json_decref(obj);
	return MGT_OK;
}

/* Gather document k's ids (all its sequences) into doc. */
static mgt_status gather(const mgt_idx *d, uint64_t k, mgt_ids *doc, int32_t **seq, size_t *cap)
{
	doc->n = 0;
	for (int64_t s = mgt_idx_doc_index(d, k); s < mgt_idx_doc_index(d, k + 1); s++) {
		size_t n;
		mgt_status st = mgt_idx_get(d, (uint64_t)s, seq, &n, cap);
		for (size_t j = 0; !st && j < n; j++)
			st = mgt_ids_push(doc, (*seq)[j]);
		if (st)
			return st;
	}
	return MGT_OK;
}

mgt_status mgt_idx_dump(FILE *out, const mgt_idx *d, const mgt_idx_dump_opts *o)
{
	mgt_ids doc = {0};
	mgt_buf text = {0}, fixed = {0};
	int32_t *seq = NULL;
	size_t cap = 0;
	mgt_status st = MGT_OK;
	int32_t eod = o->tok ? mgt_tok_eod(o->tok) : -1;
	for (uint64_t k = o->first; !st && k < o->end; k++) {
		if ((st = gather(d, k, &doc, &seq, &cap)))
			break;
		if (o->strip_eod && doc.n > 0 && eod >= 0 && doc.v[doc.n - 1] == eod)
			doc.n--;
		if (o->ids) {
			st = print_ids(out, &text, doc.v, doc.n);
			continue;
		}
		text.n = 0;
		if ((st = mgt_tok_decode(o->tok, doc.v, doc.n, &text)))
			st = mgt_err_ctx(st, "%s: document %llu", mgt_idx_prefix(d), (unsigned long long)k);
		else
			st = print_text(out, o, &text, &fixed);
	}
	free(doc.v);
	free(text.p);
	free(fixed.p);
	free(seq);
	return st;
}

static void print_array(FILE *out, const char *key, const int64_t *a, int64_t n)
{
	fprintf(out, ",\"%s\":[", key);
	for (int64_t i = 0; i < n; i++)
		fprintf(out, i ? ",%lld" : "%lld", (long long)a[i]);
	fputc(']', out);
}

static mgt_status print_sample(FILE *out, const mgt_masked_data *d, const mgt_masked_config *c, mgt_split k, int64_t i,
			       int64_t *buf)
{
	int64_t S = c->seq_length, D = c->decoder_seq_length;
	mgt_status st;
	fprintf(out, "{\"split\":\"%s\",\"idx\":%lld", mgt_split_name(k), (long long)i);
	if (c->kind == MGT_MASKED_BERT) {
		mgt_bert_sample b = { buf, buf + S, buf + 2 * S, buf + 3 * S, buf + 4 * S, 0, 0, 0, 0 };
		if ((st = mgt_masked_data_bert(d, k, i, &b)))
			return st;
		print_array(out, "text", b.text, S);
		print_array(out, "types", b.types, S);
		print_array(out, "labels", b.labels, S);
		fprintf(out, ",\"is_random\":%d", b.is_random);
		print_array(out, "padding_mask", b.padding_mask, S);
		print_array(out, "loss_mask", b.loss_mask, S);
		fprintf(out, ",\"truncated\":%d}\n", b.truncated);
		return MGT_OK;
	}
	mgt_t5_sample t = { buf, buf + S, buf + 2 * S, buf + 2 * S + D, buf + 2 * S + 2 * D, buf + 2 * S + 3 * D,
			    0, 0, 0, 0 };
	if ((st = mgt_masked_data_t5(d, k, i, &t)))
		return st;
	print_array(out, "text_enc", t.text_enc, S);
	print_array(out, "text_dec", t.text_dec, D);
	print_array(out, "labels", t.labels, D);
	print_array(out, "loss_mask", t.loss_mask, D);
	fprintf(out, ",\"truncated\":%d", t.truncated);
	print_array(out, "enc_mask", t.enc_mask, S);
	print_array(out, "dec_mask", t.dec_mask, D);
	fprintf(out, "}\n");
	return MGT_OK;
}

mgt_status mgt_masked_data_write(FILE *out, const mgt_masked_data *d, const mgt_masked_config *c, mgt_split k,
				  const mgt_masked_write_opts *o)
{
	const mgt_masked_index *ix = mgt_masked_data_index(d, k);
	uint64_t beg, end;
	if (!ix)
		return MGT_OK;
	mgt_masked_data_docs(d, k, &beg, &end);
	fprintf(out, "{\"split\":\"%s\",\"documents\":[%llu,%llu],\"samples\":%lld,\"epochs\":%d,\"dtype\":\"%s\"}\n",
	       mgt_split_name(k), (unsigned long long)beg, (unsigned long long)end, (long long)ix->n, ix->epochs,
	       ix->u64 ? "uint64" : "uint32");
	for (int64_t i = 0; o->index && i < ix->n; i++) {
		uint64_t r[3];
		mgt_masked_index_row(ix, i, r);
		fprintf(out, "{\"split\":\"%s\",\"row\":%lld,\"index\":[%llu,%llu,%llu]}\n", mgt_split_name(k), (long long)i,
		       (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2]);
	}
	int64_t *buf = malloc((size_t)(6 * (c->seq_length + c->decoder_seq_length) + 1) * sizeof *buf);
	if (!buf)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	mgt_status st = MGT_OK;
	for (uint64_t i = o->first; !st && o->have_samples && i < o->end && (int64_t)i < ix->n; i++)
		st = print_sample(out, d, c, k, (int64_t)i, buf);
	free(buf);
	return st;
}

