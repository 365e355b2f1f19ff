/* Fuzz target: the GGUF v3 reader (lib/ckpt/gguf.c).
 *
 * The input is written as a .gguf file and opened.  Every accepted file is walked: each kv's
 * strings and arrays touched, find returning the first pair of each key, tensors inside the
 * file at aligned offsets with nbytes matching ne and type, each read as float32 (dequantized).
 * A refusal must be MGT_ERR_FORMAT naming the file; never a crash, leak or sanitizer report. */
#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[300];

static void need(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_gguf: invariant failed: %s (%s)\n", what, mgt_err_msg());
		abort();
	}
}

static void cleanup(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0]) {
		const char *tmp = getenv("TMPDIR");
		snprintf(path, sizeof path, "%s/mgt-fuzz-gguf-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
		atexit(cleanup);
	}
	FILE *f = fopen(path, "wb");
	need(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "write the input file");
	mgt_gguf *g = NULL;
	mgt_status st = mgt_gguf_open(path, &g);
	need(st == MGT_OK || st == MGT_ERR_FORMAT, "only FORMAT errors for bad bytes");
	need((st == MGT_OK) == (g != NULL), "handle iff success");
	need(st == MGT_OK || strstr(mgt_err_msg(), path) != NULL, "message names the file");
	if (!g)
		return 0;
	uint32_t al = mgt_gguf_alignment(g);
	need(al && !(al & (al - 1)), "alignment a power of two");
	volatile unsigned sum = 0;
	for (size_t i = 0; i < mgt_gguf_kv_count(g); i++) {
		const mgt_gguf_kv *kv = mgt_gguf_kv_at(g, i);
		need(mgt_gguf_kv_find(g, kv->key) == kv, "keys unique");
		if (kv->type == MGT_GGUF_STR)
			sum += kv->n ? (unsigned char)kv->str[kv->n - 1] : 0;
		if (kv->type == MGT_GGUF_ARR && kv->arr_type == MGT_GGUF_STR)
			for (uint64_t k = 0; k < kv->n; k++)
				sum += kv->lens[k] ? (unsigned char)kv->strs[k][kv->lens[k] - 1] : 0;
		else if (kv->type == MGT_GGUF_ARR && kv->n)
			sum += ((const unsigned char *)kv->arr)[0];
	}
	for (size_t i = 0; i < mgt_gguf_tensor_count(g); i++) {
		const mgt_gguf_tensor *t = mgt_gguf_tensor_at(g, i);
		need(mgt_gguf_tensor_find(g, t->name) == t, "names unique");
		need(strlen(t->name) >= 1 && strlen(t->name) <= MGT_GGUF_MAX_NAME, "name length");
		need(t->offset % al == 0 && t->offset + t->nbytes <= size, "data aligned, inside the file");
		uint64_t n = 1;
		for (int d = 0; d < MGT_GGUF_MAX_DIM; d++)
			n *= (uint64_t)t->ne[d];
		need(mgt_ggml_nbytes(t->type, n) == t->nbytes, "nbytes from ne and type");
		float *x = malloc(n ? n * sizeof *x : 1);
		need(x != NULL, "malloc");
		need(mgt_gguf_read_f32(g, t, x) == MGT_OK, "read_f32");
		free(x);
	}
	mgt_gguf_close(g);
	return 0;
}
