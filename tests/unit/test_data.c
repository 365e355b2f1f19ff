/* Unit tests for lib/data: indexed dataset writer/reader/merge, validation, JSONL reading.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on any failure. */
#include "data/data.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "check.h"

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

static unsigned char *read_all(const char *path, size_t *n)
{
	char *p;
	if (mgt_file_read(path, &p, n)) {
		printf("cannot read %s: %s\n", path, mgt_err_msg());
		exit(1);
	}
	return (unsigned char *)p;
}

static int exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

/* Number of entries in the test directory whose name starts with stem. */
static int count_files(const char *stem)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)))
		n += strncmp(e->d_name, stem, strlen(stem)) == 0;
	closedir(d);
	return n;
}

/* ---- writer / reader ---------------------------------------------------------------------- */

static const int32_t doc0[] = {1, 2, 3}, doc2[] = {4}, doc4[] = {65535, 0, 7, 300};
static const int32_t *docs[] = {doc0, NULL, doc2, NULL, doc4};
static const size_t doc_len[] = {3, 0, 1, 0, 4};
#define NDOCS 5

static mgt_status write_docs(const char *prefix, mgt_dtype dt, int overwrite)
{
	mgt_idx_writer *w = NULL;
	mgt_status st = mgt_idx_writer_open(&w, prefix, dt, overwrite);
	if (st)
		return st;
	for (int i = 0; i < NDOCS; i++)
		if ((st = mgt_idx_writer_add_document(w, docs[i], doc_len[i]))) {
			mgt_idx_writer_abort(w);
			return st;
		}
	return mgt_idx_writer_finish(w);
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* The .idx Megatron's _IndexWriter writes for the docs above, built independently. */
static size_t expected_idx(unsigned char *b, int dtype, size_t itemsize)
{
	static const int32_t lens[] = {3, 1, 4};
	static const int64_t dix[] = {0, 1, 1, 2, 2, 3};
	memcpy(b, "MMIDIDX\0\0", 9);
	put64(b + 9, 1);
	b[17] = (unsigned char)dtype;
	put64(b + 18, 3);
	put64(b + 26, 6);
	size_t o = 34;
	for (int i = 0; i < 3; i++, o += 4)
		put32(b + o, (uint32_t)lens[i]);
	int64_t ptr = 0;
	for (int i = 0; i < 3; i++, o += 8) {
		put64(b + o, (uint64_t)ptr);
		ptr += lens[i] * (int64_t)itemsize;
	}
	for (int i = 0; i < 6; i++, o += 8)
		put64(b + o, (uint64_t)dix[i]);
	return o;
}

static void test_roundtrip(mgt_dtype dt)
{
	const char *name = mgt_dtype_name(dt);
	char *prefix = path_in(name);
	CHECK(write_docs(prefix, dt, 0) == MGT_OK, "%s: write", name);
	CHECK(write_docs(prefix, dt, 0) == MGT_ERR_EXISTS, "%s: second write without overwrite", name);
	CHECK(write_docs(prefix, dt, 1) == MGT_OK, "%s: overwrite", name);

	unsigned char want[256];
	size_t wn = expected_idx(want, dt, mgt_dtype_size(dt)), n;
	unsigned char *got = read_all(path_in(name[0] == 'u' ? "uint16.idx" : "int32.idx"), &n);
	CHECK(n == wn && memcmp(got, want, n) == 0, "%s: .idx bytes match Megatron's layout", name);
	free(got);

	mgt_idx *d = NULL;
	CHECK(mgt_idx_open(&d, prefix) == MGT_OK, "%s: open", name);
	if (!d)
		return;
	size_t bsz;
	mgt_idx_bin(d, &bsz);
	CHECK(mgt_idx_dtype(d) == (int)dt && mgt_idx_num_sequences(d) == 3 &&
		mgt_idx_num_documents(d) == 5 && mgt_idx_num_tokens(d) == 8 &&
		bsz == 8 * mgt_dtype_size(dt), "%s: counts", name);
	CHECK(mgt_idx_doc_index(d, 0) == 0 && mgt_idx_doc_index(d, 2) == 1 &&
		mgt_idx_doc_index(d, 5) == 3, "%s: document indices", name);
	CHECK(mgt_idx_seq_length(d, 2) == 4 && mgt_idx_seq_pointer(d, 2) == 4 * (int64_t)mgt_dtype_size(dt),
		"%s: length and pointer", name);
	int32_t *ids = NULL;
	size_t cap = 0, len = 0;
	int same = 1;
	for (uint64_t s = 0, k = 0; s < 3; s++, k++) {
		while (doc_len[k] == 0)
			k++;
		same &= mgt_idx_get(d, s, &ids, &len, &cap) == MGT_OK && len == doc_len[k] &&
			memcmp(ids, docs[k], len * 4) == 0;
	}
	CHECK(same, "%s: ids round trip", name);
	free(ids);
	mgt_idx_close(d);
}

static void test_dtypes(void)
{
	CHECK(mgt_dtype_optimal(50257) == MGT_DT_UINT16 && mgt_dtype_optimal(65500) == MGT_DT_INT32 &&
		mgt_dtype_optimal(65499) == MGT_DT_UINT16 && mgt_dtype_optimal(128256) == MGT_DT_INT32,
		"optimal dtype");
	CHECK(mgt_dtype_size(6) == 8 && mgt_dtype_size(8) == 2 && mgt_dtype_size(0) == 0 &&
		mgt_dtype_size(9) == 0, "dtype sizes");
	CHECK(strcmp(mgt_dtype_name(7), "float32") == 0, "dtype names");
}

/* Every dtype: small ids survive writing and reading as int32. */
static void test_all_dtypes(void)
{
	static const int32_t v[] = {0, 1, 100, 127};
	for (int code = 1; code <= 8; code++) {
		char *prefix = path_in("alltypes");
		mgt_idx_writer *w = NULL;
		mgt_idx *d = NULL;
		int32_t *ids = NULL;
		size_t n = 0, cap = 0;
		int ok = mgt_idx_writer_open(&w, prefix, (mgt_dtype)code, 1) == MGT_OK &&
			mgt_idx_writer_add_document(w, v, 4) == MGT_OK && mgt_idx_writer_finish(w) == MGT_OK &&
			mgt_idx_open(&d, prefix) == MGT_OK && mgt_idx_get(d, 0, &ids, &n, &cap) == MGT_OK &&
			n == 4 && memcmp(ids, v, sizeof v) == 0;
		CHECK(ok, "dtype %s round trip", mgt_dtype_name(code));
		free(ids);
		mgt_idx_close(d);
	}
}

static void test_id_range(void)
{
	mgt_idx_writer *w = NULL;
	int32_t big = 70000, neg = -1, ok = 65535;
	CHECK(mgt_idx_writer_open(&w, path_in("range"), MGT_DT_UINT16, 0) == MGT_OK, "range: open");
	CHECK(mgt_idx_writer_add_document(w, &ok, 1) == MGT_OK, "range: 65535 fits uint16");
	CHECK(mgt_idx_writer_add_document(w, &big, 1) == MGT_ERR_INPUT, "range: 70000 refused");
	CHECK(strstr(mgt_err_msg(), "range.bin") != NULL, "range: message names the file");
	CHECK(mgt_idx_writer_add_document(w, &neg, 1) == MGT_ERR_INPUT, "range: -1 refused");
	CHECK(mgt_idx_writer_num_documents(w) == 1 && mgt_idx_writer_num_tokens(w) == 1,
		"range: refused documents not counted");
	mgt_idx_writer_abort(w);
	CHECK(count_files("range") == 0, "range: abort leaves no files");
}

static void test_empty(void)
{
	mgt_idx_writer *w = NULL;
	mgt_idx *d = NULL;
	char *prefix = path_in("empty");
	CHECK(mgt_idx_writer_open(&w, prefix, MGT_DT_UINT16, 0) == MGT_OK &&
		mgt_idx_writer_finish(w) == MGT_OK, "empty: write a dataset with no documents");
	size_t n;
	unsigned char *b = read_all(path_in("empty.idx"), &n);
	CHECK(n == 42 && b[17] == 8 && b[34] == 0, "empty: .idx is 42 bytes");
	free(b);
	CHECK(mgt_idx_open(&d, prefix) == MGT_OK && mgt_idx_num_sequences(d) == 0 &&
		mgt_idx_num_documents(d) == 0, "empty: reads back");
	mgt_idx_close(d);

	prefix = path_in("emptydocs");
	CHECK(mgt_idx_writer_open(&w, prefix, MGT_DT_INT32, 0) == MGT_OK &&
		mgt_idx_writer_add_document(w, NULL, 0) == MGT_OK &&
		mgt_idx_writer_add_document(w, NULL, 0) == MGT_OK &&
		mgt_idx_writer_finish(w) == MGT_OK, "empty docs: write two empty documents");
	CHECK(mgt_idx_open(&d, prefix) == MGT_OK && mgt_idx_num_sequences(d) == 0 &&
		mgt_idx_num_documents(d) == 2 && mgt_idx_doc_index(d, 2) == 0, "empty docs: reads back");
	mgt_idx_close(d);
}

static void test_abort(void)
{
	mgt_idx_writer *w = NULL;
	CHECK(mgt_idx_writer_open(&w, path_in("aborted"), MGT_DT_INT32, 0) == MGT_OK, "abort: open");
	mgt_idx_writer_add_document(w, doc0, 3);
	CHECK(count_files("aborted") == 1, "abort: one temporary while writing (spools are unlinked)");
	mgt_idx_writer_abort(w);
	mgt_idx_writer_abort(NULL);
	CHECK(count_files("aborted") == 0 && !exists(path_in("aborted.bin")), "abort: nothing left");
	CHECK(mgt_idx_writer_open(&w, "/nonexistent-dir/x", MGT_DT_INT32, 0) == MGT_ERR_IO,
		"writer: missing directory is an io error");
}

static void test_merge(void)
{
	mgt_idx *a = NULL, *b = NULL, *c = NULL, *m = NULL;
	mgt_idx_writer *w = NULL;
	CHECK(write_docs(path_in("ma"), MGT_DT_UINT16, 0) == MGT_OK &&
		write_docs(path_in("mb"), MGT_DT_UINT16, 0) == MGT_OK &&
		write_docs(path_in("mc"), MGT_DT_INT32, 0) == MGT_OK, "merge: inputs");
	CHECK(mgt_idx_open(&a, path_in("ma")) == MGT_OK && mgt_idx_open(&b, path_in("mb")) == MGT_OK &&
		mgt_idx_open(&c, path_in("mc")) == MGT_OK, "merge: open inputs");
	if (!a || !b || !c) {
		mgt_idx_close(a);
		mgt_idx_close(b);
		mgt_idx_close(c);
		return;
	}
	CHECK(mgt_idx_writer_open(&w, path_in("merged"), MGT_DT_UINT16, 0) == MGT_OK, "merge: open output");
	CHECK(mgt_idx_writer_add_dataset(w, a) == MGT_OK, "merge: add first");
	int32_t extra[] = {9, 9};
	CHECK(mgt_idx_writer_add_document(w, extra, 2) == MGT_OK, "merge: add a document between");
	CHECK(mgt_idx_writer_add_dataset(w, b) == MGT_OK, "merge: add second");
	CHECK(mgt_idx_writer_add_dataset(w, c) == MGT_ERR_FORMAT, "merge: dtype mismatch refused");
	CHECK(strstr(mgt_err_msg(), "mc: dtype is int32 (expected uint16") != NULL, "merge: message (%s)",
		mgt_err_msg());
	CHECK(mgt_idx_writer_finish(w) == MGT_OK, "merge: finish");
	CHECK(mgt_idx_open(&m, path_in("merged")) == MGT_OK, "merge: open result");
	if (m) {
		CHECK(mgt_idx_num_sequences(m) == 7 && mgt_idx_num_documents(m) == 11 &&
			mgt_idx_num_tokens(m) == 18, "merge: counts");
		CHECK(mgt_idx_doc_index(m, 5) == 3 && mgt_idx_doc_index(m, 6) == 4 &&
			mgt_idx_doc_index(m, 7) == 5 && mgt_idx_doc_index(m, 11) == 7, "merge: shifted document indices");
		int32_t *ids = NULL;
		size_t n = 0, cap = 0;
		CHECK(mgt_idx_get(m, 3, &ids, &n, &cap) == MGT_OK && n == 2 && ids[0] == 9 &&
			mgt_idx_get(m, 6, &ids, &n, &cap) == MGT_OK && n == 4 && ids[0] == 65535 &&
			mgt_idx_seq_pointer(m, 6) == 2 * 14, "merge: ids and pointers");
		free(ids);
	}
	mgt_idx_close(a);
	mgt_idx_close(b);
	mgt_idx_close(c);
	mgt_idx_close(m);
}

/* ---- validation ----------------------------------------------------------------------------- */

/* Write a copy of the uint16 dataset's .idx/.bin, let edit() corrupt it, open, expect FORMAT. */
static void expect_bad(const char *what, const char *needle, void (*edit)(unsigned char *b, size_t *n,
	size_t *bin_n))
{
	size_t n, bn;
	unsigned char *b = read_all(path_in("uint16.idx"), &n), *bin = read_all(path_in("uint16.bin"), &bn);
	unsigned char *big = calloc(1, n + 64);
	memcpy(big, b, n);
	edit(big, &n, &bn);
	write_file(path_in("bad.idx"), big, n);
	write_file(path_in("bad.bin"), bin, bn);
	mgt_idx *d = NULL;
	mgt_status st = mgt_idx_open(&d, path_in("bad"));
	CHECK(st == MGT_ERR_FORMAT && d == NULL, "invalid .idx refused: %s", what);
	CHECK(strstr(mgt_err_msg(), needle) != NULL && strstr(mgt_err_msg(), "bad.") != NULL,
		"message for %s names '%s': %s", what, needle, mgt_err_msg());
	free(b);
	free(bin);
	free(big);
}

/* uint16 dataset: N = 3, D1 = 6; lengths at 34, pointers at 46, document_indices at 70. */
static void e_magic(unsigned char *b, size_t *n, size_t *bn) { b[3] = 'X'; }
static void e_version(unsigned char *b, size_t *n, size_t *bn) { b[9] = 2; }
static void e_dtype(unsigned char *b, size_t *n, size_t *bn) { b[17] = 9; }
static void e_dtype0(unsigned char *b, size_t *n, size_t *bn) { b[17] = 0; }
static void e_short(unsigned char *b, size_t *n, size_t *bn) { *n = 20; }
static void e_trunc(unsigned char *b, size_t *n, size_t *bn) { *n -= 1; }
static void e_long(unsigned char *b, size_t *n, size_t *bn) { *n += 1; }
static void e_count(unsigned char *b, size_t *n, size_t *bn) { put64(b + 18, UINT64_MAX / 4); }
static void e_d1zero(unsigned char *b, size_t *n, size_t *bn) { put64(b + 26, 0); }
static void e_docend(unsigned char *b, size_t *n, size_t *bn) { put64(b + 70 + 40, 2); }
static void e_docfirst(unsigned char *b, size_t *n, size_t *bn) { put64(b + 70, 1); }
static void e_docdown(unsigned char *b, size_t *n, size_t *bn) { put64(b + 70 + 16, 0); }
static void e_docbig(unsigned char *b, size_t *n, size_t *bn) { put64(b + 70 + 32, 4); }
static void e_ptr(unsigned char *b, size_t *n, size_t *bn) { put64(b + 46 + 8, 7); }
static void e_neglen(unsigned char *b, size_t *n, size_t *bn) { put32(b + 34, 0xFFFFFFFFu); }
static void e_bin(unsigned char *b, size_t *n, size_t *bn) { *bn -= 2; }

static void test_validation(void)
{
	expect_bad("bad magic", "bad magic (expected MMIDIDX)", e_magic);
	expect_bad("version 2", "version is 2 (expected 1)", e_version);
	expect_bad("dtype 9", "dtype code is 9", e_dtype);
	expect_bad("dtype 0", "dtype code is 0", e_dtype0);
	expect_bad("shorter than the header", "too short for the 34-byte header", e_short);
	expect_bad("truncated", "file is 117 bytes, header says 118", e_trunc);
	expect_bad("trailing byte", "file is 119 bytes, header says 118", e_long);
	expect_bad("huge sequence_count", "sequence_count", e_count);
	expect_bad("document_count 0", "document_count is 0", e_d1zero);
	expect_bad("document indices not ending at N", "document_indices ends at 2 (expected sequence_count 3)",
		e_docend);
	expect_bad("document_indices[0] != 0", "document_indices[0] is 1", e_docfirst);
	expect_bad("decreasing document indices", "document_indices[2] is 0", e_docdown);
	expect_bad("document index above N", "document_indices[4] is 4", e_docbig);
	expect_bad("pointer mismatch", "sequence_pointers[1] is 7 (expected 6", e_ptr);
	expect_bad("negative length", "sequence_lengths[0] is -1", e_neglen);
	expect_bad(".bin size", "bad.bin: file is 14 bytes, ", e_bin);

	mgt_idx *d = NULL;
	CHECK(mgt_idx_open(&d, path_in("missing")) == MGT_ERR_IO, "missing dataset is an io error");
	size_t n, bn;
	unsigned char *b = read_all(path_in("uint16.idx"), &n), *bin = read_all(path_in("uint16.bin"), &bn);
	unsigned char *mm = calloc(1, n + 3);
	memcpy(mm, b, n);
	write_file(path_in("modes.idx"), mm, n + 3);
	write_file(path_in("modes.bin"), bin, bn);
	CHECK(mgt_idx_open(&d, path_in("modes")) == MGT_OK && mgt_idx_num_sequences(d) == 3,
		"multimodal .idx (trailing sequence_modes) accepted");
	mgt_idx_close(d);
	free(b);
	free(bin);
	free(mm);
}

/* ---- JSONL ---------------------------------------------------------------------------------- */

/* Read every line of path into one string, lines joined by '|'. */
static mgt_status read_lines(const char *path, mgt_buf *out, uint64_t *nlines)
{
	mgt_jsonl *r;
	mgt_status st = mgt_jsonl_open(&r, path);
	if (st)
		return st;
	out->n = 0;
	const char *line;
	size_t len;
	while (!(st = mgt_jsonl_next(r, &line, &len)) && line) {
		mgt_buf_add(out, line, len);
		mgt_buf_add(out, "|", 1);
	}
	*nlines = mgt_jsonl_lineno(r);
	mgt_buf_add(out, "", 1);
	mgt_jsonl_close(r);
	return st;
}

static void test_jsonl_plain(void)
{
	mgt_buf b = {0};
	uint64_t n;
	const char *text = "{\"a\":1}\r\n\n{\"b\":2}\nlast";
	write_file(path_in("p.jsonl"), text, strlen(text));
	CHECK(read_lines(path_in("p.jsonl"), &b, &n) == MGT_OK && n == 4 &&
		strcmp(b.p, "{\"a\":1}\r||{\"b\":2}|last|") == 0, "jsonl: CRLF, empty line, no final newline");
	write_file(path_in("e.jsonl"), "", 0);
	CHECK(read_lines(path_in("e.jsonl"), &b, &n) == MGT_OK && n == 0, "jsonl: empty file");
	write_file(path_in("z.jsonl"), "ab", 2);
	CHECK(read_lines(path_in("z.jsonl"), &b, &n) == MGT_OK && n == 1 && strcmp(b.p, "ab|") == 0,
		"jsonl: two-byte file");
	mgt_jsonl *r;
	CHECK(mgt_jsonl_open(&r, path_in("nope.jsonl")) == MGT_ERR_IO, "jsonl: missing file is an io error");
	free(b.p);
}

/* Lines longer than the 1 MiB buffer, and many lines across buffer boundaries. */
static void test_jsonl_long(void)
{
	size_t big = (3u << 20) + 17, total = big + 1 + 200000 * 4;
	char *t = malloc(total);
	memset(t, 'x', big);
	t[big] = '\n';
	for (size_t i = 0; i < 200000; i++)
		memcpy(t + big + 1 + 4 * i, "abc\n", 4);
	write_file(path_in("long.jsonl"), t, total);
	mgt_jsonl *r;
	const char *line;
	size_t len, lines = 0, good = 0, first = 0;
	mgt_jsonl_open(&r, path_in("long.jsonl"));
	while (mgt_jsonl_next(r, &line, &len) == MGT_OK && line) {
		if (lines++ == 0)
			first = len;
		else
			good += len == 3 && memcmp(line, "abc", 3) == 0;
	}
	CHECK(first == big && good == 200000 && mgt_jsonl_bytes_out(r) == total &&
		mgt_jsonl_bytes_read(r) == total && mgt_jsonl_file_size(r) == (int64_t)total,
		"jsonl: 3 MiB line and 200000 short lines");
	mgt_jsonl_close(r);
	free(t);
}

static size_t zcompress(void *dst, size_t cap, const char *s, size_t n)
{
	size_t z = ZSTD_compress(dst, cap, s, n, 3);
	if (ZSTD_isError(z)) {
		printf("zstd: %s\n", ZSTD_getErrorName(z));
		exit(1);
	}
	return z;
}

static void test_jsonl_zstd(void)
{
	const char *a = "{\"text\":\"one\"}\n{\"text\":\"two\"}\n", *c = "{\"text\":\"three\"}";
	unsigned char z[4096];
	size_t za = zcompress(z, sizeof z, a, strlen(a));
	size_t zc = zcompress(z + za, sizeof z - za, c, strlen(c));
	mgt_buf b = {0};
	uint64_t n;
	write_file(path_in("a.jsonl.zst"), z, za);
	CHECK(read_lines(path_in("a.jsonl.zst"), &b, &n) == MGT_OK && n == 2 &&
		strcmp(b.p, "{\"text\":\"one\"}|{\"text\":\"two\"}|") == 0, "zstd: one frame");
	write_file(path_in("ac.data"), z, za + zc);
	CHECK(read_lines(path_in("ac.data"), &b, &n) == MGT_OK && n == 3 &&
		strstr(b.p, "two\"}|{\"text\":\"three\"}|") != NULL, "zstd: concatenated frames, any name");
	/* an empty frame, a skippable frame, then the two frames */
	unsigned char sk[8192];
	size_t ze = zcompress(sk, sizeof sk, "", 0);
	static const unsigned char skip[] = {0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'};
	memcpy(sk + ze, skip, sizeof skip);
	memcpy(sk + ze + sizeof skip, z, za + zc);
	write_file(path_in("skip.zst"), sk, ze + sizeof skip + za + zc);
	CHECK(read_lines(path_in("skip.zst"), &b, &n) == MGT_OK && n == 3 &&
		strstr(b.p, "{\"text\":\"one\"}|") == b.p, "zstd: empty and skippable frames first");
	memcpy(sk, skip, sizeof skip);
	memcpy(sk + sizeof skip, z, za);
	write_file(path_in("skipfirst.zst"), sk, sizeof skip + za);
	CHECK(read_lines(path_in("skipfirst.zst"), &b, &n) == MGT_OK && n == 2, "zstd: skippable frame first");
	write_file(path_in("trunc.zst"), z, za - 3);
	CHECK(read_lines(path_in("trunc.zst"), &b, &n) == MGT_ERR_INPUT &&
		strstr(mgt_err_msg(), "trunc.zst: truncated zstd frame") != NULL, "zstd: truncated frame (%s)",
		mgt_err_msg());
	write_file(path_in("magic.zst"), z, 4);
	CHECK(read_lines(path_in("magic.zst"), &b, &n) == MGT_ERR_INPUT, "zstd: magic only");
	unsigned char bad[4096];
	memcpy(bad, z, za);
	memset(bad + 6, 0xAA, za - 6);
	write_file(path_in("corrupt.zst"), bad, za);
	CHECK(read_lines(path_in("corrupt.zst"), &b, &n) == MGT_ERR_INPUT &&
		strstr(mgt_err_msg(), "corrupt.zst: ") != NULL, "zstd: corrupt frame (%s)", mgt_err_msg());
	memcpy(bad, z, za);
	memcpy(bad + za, "garbage!", 8);
	write_file(path_in("trail.zst"), bad, za + 8);
	CHECK(read_lines(path_in("trail.zst"), &b, &n) == MGT_ERR_INPUT, "zstd: trailing garbage");
	free(b.p);
}

/* A large zstd stream whose text spans many output buffers. */
static void test_jsonl_zstd_big(void)
{
	size_t lines = 300000, total = lines * 10;
	char *t = malloc(total);
	for (size_t i = 0; i < lines; i++) {
		char one[16];
		snprintf(one, sizeof one, "%09zu\n", i);
		memcpy(t + 10 * i, one, 10);
	}
	size_t cap = ZSTD_compressBound(total);
	void *z = malloc(cap);
	size_t zn = zcompress(z, cap, t, total);
	write_file(path_in("big.zst"), z, zn);
	mgt_jsonl *r;
	const char *line;
	size_t len, good = 0, k = 0;
	mgt_jsonl_open(&r, path_in("big.zst"));
	while (mgt_jsonl_next(r, &line, &len) == MGT_OK && line) {
		char want[16];
		snprintf(want, sizeof want, "%09zu", k++);
		good += len == 9 && memcmp(line, want, 9) == 0;
	}
	CHECK(good == lines && mgt_jsonl_bytes_out(r) == total && mgt_jsonl_bytes_read(r) == zn,
		"zstd: 300000 lines through the stream decoder");
	mgt_jsonl_close(r);
	free(t);
	free(z);
}

/* "-" reads standard input (here a zstd file put on fd 0). */
static void test_jsonl_stdin(void)
{
	const char *a = "{\"text\":\"x\"}\r\n{\"text\":\"y\"}";
	unsigned char z[512];
	size_t zn = zcompress(z, sizeof z, a, strlen(a));
	write_file(path_in("stdin.zst"), z, zn);
	int saved = dup(0), fd = open(path_in("stdin.zst"), O_RDONLY);
	dup2(fd, 0);
	close(fd);
	mgt_buf b = {0};
	uint64_t n;
	CHECK(read_lines("-", &b, &n) == MGT_OK && n == 2 && strcmp(b.p, "{\"text\":\"x\"}\r|{\"text\":\"y\"}|") == 0,
		"jsonl: '-' reads standard input");
	dup2(saved, 0);
	close(saved);
	free(b.p);
}

static void test_expand(void)
{
	write_file(path_in("g-b.jsonl"), "", 0);
	write_file(path_in("g-a.jsonl"), "", 0);
	write_file(path_in("g-c.txt"), "", 0);
	char **v;
	size_t n;
	char pat[512];
	snprintf(pat, sizeof pat, "%s/g-*.jsonl", dir);
	CHECK(mgt_input_expand(pat, &v, &n) == MGT_OK && n == 2 && strstr(v[0], "g-a") &&
		strstr(v[1], "g-b"), "expand: glob, sorted");
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	CHECK(mgt_input_expand("-", &v, &n) == MGT_OK && n == 1 && strcmp(v[0], "-") == 0, "expand: stdin");
	free(v[0]);
	free(v);
	snprintf(pat, sizeof pat, "%s/nothing-*.json", dir);
	CHECK(mgt_input_expand(pat, &v, &n) == MGT_ERR_USAGE && strstr(mgt_err_msg(), pat) != NULL,
		"expand: no match is a usage error naming the pattern");
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_dtypes();
	test_roundtrip(MGT_DT_UINT16);
	test_roundtrip(MGT_DT_INT32);
	test_all_dtypes();
	test_id_range();
	test_empty();
	test_abort();
	test_merge();
	test_validation();
	test_jsonl_plain();
	test_jsonl_long();
	test_jsonl_zstd();
	test_jsonl_zstd_big();
	test_jsonl_stdin();
	test_expand();
	return check_finish();
}
