/* Fuzz target: the safetensors reader (lib/ckpt/safetensors.c), and its writer on what it accepts.
 *
 * An input starting with '{' is taken as a model.safetensors.index.json in a directory holding
 * two valid shards a.safetensors (tensors "x", "y") and b.safetensors ("z"), so the index
 * checks are reached; any other input is written as a .safetensors file.  Every accepted model
 * is walked: tensors sorted and unique, data inside their files, every tensor readable (raw and,
 * for float types, as float32); then written again with mgt_st_writer (put_raw, in shards of
 * 64 bytes) and read back, which must give the same names, dtypes, shapes and bytes.
 * A refusal must be MGT_ERR_FORMAT (or MGT_ERR_IO for a missing shard) naming a file; never a
 * crash, leak or sanitizer report. */
#include "ckpt/ckpt.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static void need(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_safetensors: invariant failed: %s (%s)\n", what, mgt_err_msg());
		abort();
	}
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p) != 0;
}

/* rm -rf d (without a shell: fast enough for libFuzzer) */
static void rm_rf(const char *d)
{
	nftw(d, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void) { rm_rf(dir); }

static void setup(void)
{
	if (dir[0])
		return;
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-fuzz-st.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	need(mkdtemp(dir) != NULL, "mkdtemp");
	atexit(cleanup);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	need(f && fwrite(p, 1, n, f) == n && fclose(f) == 0, "write input file");
}

static void st_file(const char *path, const char *hdr, size_t data)
{
	size_t n = strlen(hdr);
	unsigned char *b = calloc(1, 8 + n + data);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)n >> (8 * i));
	memcpy(b + 8, hdr, n);
	for (size_t i = 0; i < data; i++)
		b[8 + n + i] = (unsigned char)(i * 37 + 11);
	write_file(path, b, 8 + n + data);
	free(b);
}

static uint64_t file_size(const char *p)
{
	struct stat sb;
	need(stat(p, &sb) == 0, "stat a tensor's file");
	return (uint64_t)sb.st_size;
}

/* Write s again through the writer into out/ and compare. */
static void rewrite(mgt_st *s, const char *out)
{
	rm_rf(out);
	need(mkdir(out, 0755) == 0, "mkdir out");
	mgt_st_writer *w;
	need(mgt_st_writer_new(&w, out, 64) == MGT_OK, "writer new");
	size_t n = mgt_st_count(s);
	for (size_t i = 0; i < n; i++) {
		const mgt_st_tensor *t = mgt_st_at(s, i);
		need(mgt_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape) == MGT_OK, "writer add");
	}
	need(mgt_st_writer_begin(w) == MGT_OK, "writer begin");
	for (size_t i = 0; i < n; i++) {
		const mgt_st_tensor *t = mgt_st_at(s, i);
		void *b = malloc(t->nbytes ? t->nbytes : 1);
		need(mgt_st_read_raw(s, t, b) == MGT_OK, "read raw");
		need(mgt_st_writer_put_raw(w, t->name, b) == MGT_OK, "writer put");
		free(b);
	}
	need(mgt_st_writer_finish(w) == MGT_OK, "writer finish");
	mgt_st_writer_free(w);
	mgt_st *r;
	need(mgt_st_open(out, &r) == MGT_OK, "the rewritten model opens");
	need(mgt_st_count(r) == n, "same count");
	for (size_t i = 0; i < n; i++) {
		const mgt_st_tensor *a = mgt_st_at(s, i), *b = mgt_st_at(r, i);
		need(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim &&
		     a->nbytes == b->nbytes && !memcmp(a->shape, b->shape, sizeof a->shape), "same tensor");
		void *x = malloc(a->nbytes + 1), *y = malloc(a->nbytes + 1);
		need(mgt_st_read_raw(s, a, x) == MGT_OK && mgt_st_read_raw(r, b, y) == MGT_OK &&
		     memcmp(x, y, a->nbytes) == 0, "same bytes");
		free(x);
		free(y);
	}
	mgt_st_close(r);
	rm_rf(out);
}

static void walk(mgt_st *s)
{
	size_t n = mgt_st_count(s);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		const mgt_st_tensor *t = mgt_st_at(s, i);
		need(t && mgt_st_find(s, t->name) == t, "find gives the tensor");
		need(i == 0 || strcmp(mgt_st_at(s, i - 1)->name, t->name) < 0, "sorted, unique");
		need(t->ndim >= 0 && t->ndim <= MGT_ST_MAX_DIM && mgt_dt_size(t->dtype), "ndim, dtype");
		uint64_t numel = 1;
		for (int d = 0; d < t->ndim; d++)
			numel *= (uint64_t)t->shape[d];
		need(numel * mgt_dt_size(t->dtype) == t->nbytes, "nbytes = numel * size");
		need(t->offset + t->nbytes <= file_size(t->file), "data inside the file");
		total += t->nbytes;
		void *b = malloc(t->nbytes ? t->nbytes : 1);
		need(mgt_st_read_raw(s, t, b) == MGT_OK, "read raw");
		free(b);
		float *f = malloc(numel ? numel * sizeof *f : 1);
		mgt_status st = mgt_st_read_f32(s, t, f);
		int fl = t->dtype == MGT_ST_F32 || t->dtype == MGT_ST_F16 || t->dtype == MGT_ST_BF16 ||
			 t->dtype == MGT_ST_F64;
		need(fl ? st == MGT_OK : st == MGT_ERR_FORMAT, "read_f32 of float types only");
		free(f);
	}
	mgt_st_metadata(s, "format");
	if (total <= (1u << 20) && n <= 256) {
		char out[300];
		snprintf(out, sizeof out, "%s/out", dir);
		rewrite(s, out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	char path[400], mdir[300];
	snprintf(mdir, sizeof mdir, "%s/m", dir);
	rm_rf(mdir);
	need(mkdir(mdir, 0755) == 0, "mkdir");
	int index = size > 0 && data[0] == '{';
	if (index) {
		snprintf(path, sizeof path, "%s/a.safetensors", mdir);
		st_file(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			"\"y\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}", 14);
		snprintf(path, sizeof path, "%s/b.safetensors", mdir);
		st_file(path, "{\"__metadata__\":{\"format\":\"pt\"},"
			"\"z\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[0,4]}}", 4);
		snprintf(path, sizeof path, "%s/model.safetensors.index.json", mdir);
	} else {
		snprintf(path, sizeof path, "%s/in.safetensors", mdir);
	}
	write_file(path, data, size);
	mgt_st *s = NULL;
	mgt_status st = mgt_st_open(index ? mdir : path, &s);
	need(st == MGT_OK || st == MGT_ERR_FORMAT || (index && st == MGT_ERR_IO), "only FORMAT errors");
	need((st == MGT_OK) == (s != NULL), "handle iff success");
	need(st == MGT_OK || strstr(mgt_err_msg(), dir) != NULL, "message names the file");
	if (s) {
		walk(s);
		mgt_st_close(s);
	}
	return 0;
}
