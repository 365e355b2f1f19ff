/* ckpt_sweep: damage one shard of a checkpoint in every way of a sweep and count what loading
 * it does (issue 29's corruption sweep; tests/bench/ckpt_corruption.sh runs it).
 *
 *   ckpt_sweep LOAD_DIR SHARD STRIDE TRUNC_STEP SCRATCH [FIRST]
 *
 * LOAD_DIR: a checkpoint directory (its tracker's iteration is used); SHARD: the file name of one
 * of its shards.  For every byte offset FIRST, FIRST + STRIDE, ... of the shard, a copy of the
 * iteration is made under SCRATCH with that byte flipped (XOR 0xff) and loaded in a child
 * process as every program loads one (lib/ckpt: mgt_ckpt_open, mgt_ckpt_check, then every
 * tensor read whole); then the same for the shard truncated to every multiple of TRUNC_STEP
 * bytes below its size (TRUNC_STEP 0: none).  Each case is one of: refused (a checkpoint
 * error, which the programs report with exit status 6), identical (every tensor's bytes equal
 * the undamaged checkpoint's), silent (loaded with different bytes: the failure this exists to
 * find), crashed (killed by a signal) or hung (no answer in 20 s).  Prints one line per case
 * that is not refused or identical and a summary line:
 *   cases N refused N identical N silent N crashed N hung N
 * Exit status: 0 when no case was silent, crashed or hung, 1 otherwise, 2 on bad usage. */
#include "ckpt/ckpt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
	size_t n;
	char **name;
	void **data;
	size_t *bytes;
} baseline;

enum { REFUSED, IDENTICAL, SILENT, CRASHED, HUNG, NKIND };
static const char *kind_name[NKIND] = {"refused", "identical", "silent", "crashed", "hung"};

static size_t tensor_bytes(const mgt_ckpt *c, size_t i, int *nd, int64_t *gs, mgt_ckpt_dtype *dt)
{
	mgt_ckpt_tensor(c, i, nd, gs, dt);
	size_t b = mgt_ckpt_dtype_size(*dt);
	for (int d = 0; d < *nd; d++)
		b *= (size_t)gs[d];
	return b;
}

/* Load dir as a program does; 0 identical to base, 1 different, 6 refused. */
static int load_all(const char *dir, const baseline *base)
{
	mgt_ckpt *c = NULL;
	if (mgt_ckpt_open(dir, -1, &c) || mgt_ckpt_check(c))
		return 6;
	int r = mgt_ckpt_count(c) == base->n ? 0 : 1;
	for (size_t i = 0; !r && i < base->n; i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM], off[MGT_CKPT_MAX_DIM] = {0};
		mgt_ckpt_dtype dt;
		size_t b = tensor_bytes(c, i, &nd, gs, &dt);
		void *buf = malloc(b ? b : 1);
		if (strcmp(mgt_ckpt_tensor(c, i, &nd, gs, &dt), base->name[i]) || b != base->bytes[i])
			r = 1;
		else if (mgt_ckpt_read(c, base->name[i], nd, gs, off, gs, dt, buf))
			r = 6;
		else if (memcmp(buf, base->data[i], b))
			r = 1;
		free(buf);
	}
	mgt_ckpt_close(c);
	return r;
}

static int read_baseline(const char *dir, baseline *base)
{
	mgt_ckpt *c = NULL;
	if (mgt_ckpt_open(dir, -1, &c) || mgt_ckpt_check(c) || mgt_ckpt_check_data(c)) {
		fprintf(stderr, "ckpt_sweep: %s: %s\n", dir, mgt_err_msg());
		mgt_ckpt_close(c);
		return -1;
	}
	base->n = mgt_ckpt_count(c);
	base->name = calloc(base->n, sizeof *base->name);
	base->data = calloc(base->n, sizeof *base->data);
	base->bytes = calloc(base->n, sizeof *base->bytes);
	for (size_t i = 0; i < base->n; i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM], off[MGT_CKPT_MAX_DIM] = {0};
		mgt_ckpt_dtype dt;
		base->bytes[i] = tensor_bytes(c, i, &nd, gs, &dt);
		base->name[i] = strdup(mgt_ckpt_tensor(c, i, &nd, gs, &dt));
		base->data[i] = malloc(base->bytes[i] ? base->bytes[i] : 1);
		if (mgt_ckpt_read(c, base->name[i], nd, gs, off, gs, dt, base->data[i])) {
			fprintf(stderr, "ckpt_sweep: %s\n", mgt_err_msg());
			return -1;
		}
	}
	mgt_ckpt_close(c);
	return 0;
}

/* Run load_all in a child with a 20 s limit and classify. */
static int one_case(const char *dir, const baseline *base)
{
	pid_t pid = fork();
	if (pid == 0) {
		alarm(20);
		_exit(load_all(dir, base));
	}
	int ws;
	if (pid < 0 || waitpid(pid, &ws, 0) < 0)
		return CRASHED;
	if (WIFSIGNALED(ws))
		return WTERMSIG(ws) == SIGALRM ? HUNG : CRASHED;
	return WEXITSTATUS(ws) == 6 ? REFUSED : WEXITSTATUS(ws) == 0 ? IDENTICAL : SILENT;
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(p, 1, n, f) == n;
	return (f && fclose(f) == 0 && ok) ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc < 6 || argc > 7) {
		fprintf(stderr, "usage: ckpt_sweep LOAD_DIR SHARD STRIDE TRUNC_STEP SCRATCH [FIRST]\n");
		return 2;
	}
	const char *load = argv[1], *shard = argv[2], *scratch = argv[5];
	long stride = atol(argv[3]), tstep = atol(argv[4]), first = argc > 6 ? atol(argv[6]) : 0;
	int64_t it;
	baseline base = {0};
	if (stride < 1 || tstep < 0 || mgt_ckpt_latest(load, &it) || read_baseline(load, &base))
		return 2;
	/* scratch/ck: the tracker and iter_N/ with symlinks to every file but the damaged shard */
	char cmd[16384], iter[2048], path[4096], src[4096];
	snprintf(iter, sizeof iter, "%s/ck/iter_%07lld", scratch, (long long)it);
	snprintf(cmd, sizeof cmd, "rm -rf '%s/ck' && mkdir -p '%s' && cp '%s/%s' '%s/ck/' && "
		 "for f in '%s'/iter_%07lld/*; do ln -s \"$(realpath \"$f\")\" '%s'/; done && rm '%s/%s'",
		 scratch, iter, load, MGT_CKPT_TRACKER, scratch, load, (long long)it, iter, iter, shard);
	if (system(cmd) != 0)
		return 2;
	snprintf(src, sizeof src, "%s/iter_%07lld/%s", load, (long long)it, shard);
	snprintf(path, sizeof path, "%s/%s", iter, shard);
	char *bytes = NULL;
	size_t n;
	if (mgt_file_read(src, &bytes, &n)) {
		fprintf(stderr, "ckpt_sweep: %s\n", mgt_err_msg());
		return 2;
	}
	snprintf(cmd, sizeof cmd, "%s/ck", scratch);
	long count[NKIND] = {0}, cases = 0;
	for (size_t off = (size_t)first; off < n; off += (size_t)stride, cases++) {
		bytes[off] ^= (char)0xff;
		int k = write_file(path, bytes, n) ? CRASHED : one_case(cmd, &base);
		bytes[off] ^= (char)0xff;
		count[k]++;
		if (k >= SILENT)
			printf("flip at byte %zu: %s\n", off, kind_name[k]);
	}
	for (size_t len = 0; tstep && len < n; len += (size_t)tstep, cases++) {
		int k = write_file(path, bytes, len) ? CRASHED : one_case(cmd, &base);
		count[k]++;
		if (k >= SILENT)
			printf("truncated to %zu bytes: %s\n", len, kind_name[k]);
	}
	printf("shard %s: %zu bytes; cases %ld", shard, n, cases);
	for (int k = 0; k < NKIND; k++)
		printf(" %s %ld", kind_name[k], count[k]);
	printf("\n");
	free(bytes);
	for (size_t i = 0; i < base.n; i++) {
		free(base.name[i]);
		free(base.data[i]);
	}
	free(base.name);
	free(base.data);
	free(base.bytes);
	return count[SILENT] + count[CRASHED] + count[HUNG] ? 1 : 0;
}
