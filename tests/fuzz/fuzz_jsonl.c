/* Fuzz target: the JSONL line reader (lib/data/jsonl.c) over plain and zstd input.
 * The input is written to a file and read line by line. Invariants: no line contains '\n'; the
 * lines plus their newlines add up to the decompressed size; plain input reproduces the bytes;
 * a failure is MGT_ERR_INPUT or MGT_ERR_IO, never a crash. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void need(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_jsonl: invariant failed: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/mgt-fuzz-jsonl-%d", (int)getpid());
	FILE *f = fopen(path, "wb");
	need(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "write the input file");
	int zstd = size >= 4 && !memcmp(data, "\x28\xb5\x2f\xfd", 4);
	mgt_jsonl *r;
	need(mgt_jsonl_open(&r, path) == MGT_OK, "open");
	const char *line;
	size_t n, total = 0, pos = 0;
	mgt_status st;
	while ((st = mgt_jsonl_next(r, &line, &n)) == MGT_OK && line) {
		need(!memchr(line, '\n', n), "no newline inside a line");
		if (!zstd) {
			need(pos + n <= size && !memcmp(line, data + pos, n), "plain lines are the input bytes");
			pos += n + 1;
		}
		total += n + 1;
	}
	need(st == MGT_OK || st == MGT_ERR_INPUT || st == MGT_ERR_IO, "errors are input or I/O errors");
	need(!zstd || st != MGT_OK || mgt_jsonl_bytes_out(r) + 1 >= total, "decompressed size accounts for the lines");
	need(zstd || st != MGT_OK || total == size || total == size + 1, "plain input: lines cover every byte");
	mgt_jsonl_close(r);
	unlink(path);
	return 0;
}
