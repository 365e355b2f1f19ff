/* Fuzz target: the MMIDIDX .idx reader (lib/data/idx.c).
 *
 * The input is written as an .idx. A .bin is written beside it with the size the input's own
 * lengths imply (when they can be read at all), so inputs that pass the header checks also reach
 * the sequence, document and .bin checks and, when the dataset is valid, the readers and the
 * merging writer. Invariants that must hold for any dataset the reader accepts abort on failure. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static void need(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_idx: invariant failed: %s\n", what);
		abort();
	}
}

static void cleanup(void)
{
	static const char *names[] = {"in.idx", "in.bin", "out.idx", "out.bin"};
	char path[320];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

/* One scratch directory per process, removed at exit. */
static void setup(void)
{
	if (dir[0])
		return;
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-fuzz-idx.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	need(mkdtemp(dir) != NULL, "mkdtemp");
	atexit(cleanup);
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The .bin size a consistent header and lengths would need; 16 when they cannot say. */
static size_t implied_bin_size(const uint8_t *d, size_t n)
{
	if (n < 34 || !mgt_dtype_size(d[17]))
		return 16;
	uint64_t seqs = rd64(d + 18), total = 0;
	if (seqs > (n - 34) / 4)
		return 16;
	for (uint64_t i = 0; i < seqs; i++) {
		const uint8_t *p = d + 34 + 4 * i;
		int32_t len = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			(uint32_t)p[3] << 24);
		total += len > 0 ? (uint64_t)len : 0;
	}
	total *= mgt_dtype_size(d[17]);
	return total <= (4u << 20) ? (size_t)total : 16;
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	need(f && fwrite(p, 1, n, f) == n && fclose(f) == 0, "write input file");
}

/* Walk every accessor of an accepted dataset and check the invariants the reader promises. */
static void walk(const mgt_idx *d)
{
	uint64_t n = mgt_idx_num_sequences(d), docs = mgt_idx_num_documents(d), tokens = 0;
	int32_t *ids = NULL;
	size_t cap = 0, got;
	for (uint64_t i = 0; i < n; i++) {
		need(mgt_idx_seq_length(d, i) >= 0, "length >= 0");
		need(mgt_idx_seq_pointer(d, i) == (int64_t)(tokens * mgt_dtype_size(mgt_idx_dtype(d))),
			"pointer = running sum");
		if (mgt_idx_get(d, i, &ids, &got, &cap) == MGT_OK)
			need(got == (size_t)mgt_idx_seq_length(d, i), "get returns length ids");
		tokens += (uint64_t)mgt_idx_seq_length(d, i);
	}
	free(ids);
	need(tokens == mgt_idx_num_tokens(d), "tokens = sum of lengths");
	need(mgt_idx_doc_index(d, 0) == 0 && (uint64_t)mgt_idx_doc_index(d, docs) == n, "document ends");
	for (uint64_t k = 0; k < docs; k++)
		need(mgt_idx_doc_index(d, k) <= mgt_idx_doc_index(d, k + 1), "documents non-decreasing");
	size_t bin_size;
	mgt_idx_bin(d, &bin_size);
	need(bin_size == tokens * mgt_dtype_size(mgt_idx_dtype(d)), "bin size");
}

/* Merge the dataset with itself; the result must read back with doubled counts. */
static void merge_twice(const mgt_idx *d, const char *out)
{
	mgt_idx_writer *w;
	need(mgt_idx_writer_open(&w, out, (mgt_dtype)mgt_idx_dtype(d), 1) == MGT_OK, "writer open");
	need(mgt_idx_writer_add_dataset(w, d) == MGT_OK, "add_dataset");
	need(mgt_idx_writer_add_dataset(w, d) == MGT_OK, "add_dataset again");
	need(mgt_idx_writer_finish(w) == MGT_OK, "writer finish");
	mgt_idx *m;
	need(mgt_idx_open(&m, out) == MGT_OK, "merged dataset reads back");
	need(mgt_idx_num_sequences(m) == 2 * mgt_idx_num_sequences(d) &&
		mgt_idx_num_documents(m) == 2 * mgt_idx_num_documents(d) &&
		mgt_idx_num_tokens(m) == 2 * mgt_idx_num_tokens(d), "merged counts");
	mgt_idx_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	char prefix[300], path[320], out[300];
	snprintf(prefix, sizeof prefix, "%s/in", dir);
	snprintf(out, sizeof out, "%s/out", dir);
	snprintf(path, sizeof path, "%s.idx", prefix);
	write_file(path, data, size);
	size_t bn = implied_bin_size(data, size);
	uint8_t *bin = calloc(1, bn ? bn : 1);
	for (size_t i = 0; i < bn; i++)
		bin[i] = (uint8_t)(i * 131 + 7);
	snprintf(path, sizeof path, "%s.bin", prefix);
	write_file(path, bin, bn);
	free(bin);

	mgt_idx *d = NULL;
	mgt_status st = mgt_idx_open(&d, prefix);
	need(st == MGT_OK || st == MGT_ERR_FORMAT, "only FORMAT errors for bad bytes");
	need((st == MGT_OK) == (d != NULL), "handle iff success");
	need(st == MGT_OK || strstr(mgt_err_msg(), "in.") != NULL, "message names the file");
	if (d) {
		walk(d);
		merge_twice(d, out);
		mgt_idx_close(d);
	}
	return 0;
}
