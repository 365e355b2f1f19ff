/* Unit tests for lib/ckpt: sharded save, resharded reads, error cases, atomicity, dumps, the
 * virtual index; and lib/train's checkpoint I/O of table rows with experts (one [E, rows, cols]
 * dataset per expert tensor, resharded across expert-parallel sizes).  Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on failure.
 *
 *   test_ckpt               run the unit tests (in a fresh directory under $TMPDIR or /tmp)
 *   test_ckpt --write DIR   write the known checkpoint of tests/cli/t4000-ckpt-h5py.sh to DIR:
 *                           iteration 7, four shards, values value(name, flat index) below, and
 *                           DIR/expected.h5 (a dump of the whole tensors under "expected/")
 *   test_ckpt --write-moe DIR   the Mixture-of-Experts checkpoint of t4000 (write_moe below)
 */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "train/train.h"

static int exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

static char *slurp(const char *path)
{
	char *p = NULL;
	size_t n;
	if (mgt_file_read(path, &p, &n))
		return NULL;
	return p;
}

static int has_msg(const char *s) { return strstr(mgt_err_msg(), s) != NULL; }

/* ---- tensors with known values ------------------------------------------------------------- */

/* value(name, i) for flat global index i; tests/cli/t4000-ckpt-h5py.sh computes the same. */
static int64_t key_of(const char *name, int salt)
{
	int64_t k = salt;
	for (const unsigned char *s = (const unsigned char *)name; *s; s++)
		k += *s;
	return k % 997;
}

static void fill(void *buf, mgt_ckpt_dtype dt, const char *name, int salt, int64_t n)
{
	int64_t k = key_of(name, salt);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = (k * 131 + i * 7919) % 65521;
		if (dt == MGT_CKPT_F32)
			((float *)buf)[i] = (float)((double)v / 65521.0 - 0.5);
		else if (dt == MGT_CKPT_F64)
			((double *)buf)[i] = (double)v / 65521.0 - 0.5;
		else
			((int32_t *)buf)[i] = (int32_t)(v - 30000);
	}
}

/* A tensor and how it is saved: a grid of n0 parts along dim d0 by n1 along d1 (d = -1: not
 * split), piece k going to shard k % nshards; repl: the whole tensor in every shard. */
typedef struct {
	const char *name;
	int ndim;
	int64_t gs[4];
	mgt_ckpt_dtype dt;
	int d0, n0, d1, n1, repl;
} tspec;

static int64_t numel(int nd, const int64_t *s)
{
	int64_t n = 1;
	for (int d = 0; d < nd; d++)
		n *= s[d];
	return n;
}

static void *whole_of(const tspec *t, int salt)
{
	int64_t n = numel(t->ndim, t->gs);
	void *p = malloc((size_t)n * mgt_ckpt_dtype_size(t->dt));
	fill(p, t->dt, t->name, salt, n);
	return p;
}

/* Copy the box [off, off + sh) of a row-major tensor of global shape gs into dst. */
static void box_copy(const void *src, const int64_t *gs, int nd, const int64_t *off,
		     const int64_t *sh, size_t esz, void *dst)
{
	int64_t idx[4] = {0}, total = numel(nd, sh);
	for (int64_t k = 0; k < total; k++) {
		int64_t g = 0;
		for (int d = 0; d < nd; d++)
			g = g * gs[d] + off[d] + idx[d];
		memcpy((char *)dst + k * (int64_t)esz, (const char *)src + g * (int64_t)esz, esz);
		for (int d = nd - 1; d >= 0 && ++idx[d] == sh[d]; d--)
			idx[d] = 0;
	}
}

/* Part i of n of a length: [i*len/n, (i+1)*len/n). */
static void part(int64_t len, int i, int n, int64_t *off, int64_t *sz)
{
	*off = len * i / n;
	*sz = len * (i + 1) / n - *off;
}

/* Piece k of t's grid (data malloc'd from whole). */
static mgt_ckpt_piece piece_of(const tspec *t, int k, const void *whole)
{
	mgt_ckpt_piece p = {.name = t->name, .ndim = t->ndim, .dtype = t->dt};
	for (int d = 0; d < t->ndim; d++)
		p.global_shape[d] = p.shape[d] = t->gs[d];
	if (t->d0 >= 0)
		part(t->gs[t->d0], t->repl ? 0 : k / t->n1, t->repl ? 1 : t->n0, &p.offset[t->d0],
		     &p.shape[t->d0]);
	if (t->d1 >= 0)
		part(t->gs[t->d1], t->repl ? 0 : k % t->n1, t->repl ? 1 : t->n1, &p.offset[t->d1],
		     &p.shape[t->d1]);
	size_t esz = mgt_ckpt_dtype_size(t->dt);
	void *data = malloc((size_t)numel(t->ndim, p.shape) * esz);
	box_copy(whole, t->gs, t->ndim, p.offset, p.shape, esz, data);
	p.data = data;
	return p;
}

/* Write shard s of the tensors (names "s<s>.h5" or fmt). */
static mgt_status write_shard(const char *save, int64_t it, const char *shard, const tspec *t,
			      size_t nt, int s, int nshards, int salt)
{
	mgt_ckpt_piece p[32] = {0};
	size_t n = 0;
	for (size_t i = 0; i < nt; i++) {
		int npieces = t[i].repl ? nshards : t[i].n0 * t[i].n1;
		void *whole = whole_of(&t[i], salt);
		for (int k = s; k < npieces; k += nshards)
			p[n++] = piece_of(&t[i], k, whole);
		free(whole);
	}
	mgt_status st = mgt_ckpt_write_shard(save, it, shard, p, n);
	for (size_t i = 0; i < n; i++)
		free((void *)p[i].data);
	return st;
}

static mgt_status save_all(const char *save, int64_t it, const tspec *t, size_t nt, int nshards,
			   int salt, const char *meta)
{
	mgt_status st = mgt_ckpt_begin(save, it);
	for (int s = 0; !st && s < nshards; s++) {
		char name[64];
		snprintf(name, sizeof name, "model_tp%02d_pp000_dp000.h5", s);
		st = write_shard(save, it, name, t, nt, s, nshards, salt);
	}
	return st ? st : mgt_ckpt_commit(save, it, meta);
}

static const tspec T[] = {
	{"decoder.layers.0.self_attention.linear_qkv.weight", 2, {12, 6}, MGT_CKPT_F32, 0, 2, -1, 1, 0},
	{"decoder.layers.0.self_attention.linear_proj.weight", 2, {6, 10}, MGT_CKPT_F32, 1, 2, -1, 1, 0},
	{"decoder.final_layernorm.weight", 1, {6}, MGT_CKPT_F32, -1, 1, -1, 1, 0},
	{"decoder.final_layernorm.bias", 1, {6}, MGT_CKPT_F32, -1, 1, -1, 1, 1},
	{"optimizer.state.exp_avg.x", 2, {4, 3}, MGT_CKPT_F64, 0, 2, -1, 1, 0},
	{"scalars.step", 1, {5}, MGT_CKPT_I32, 0, 2, -1, 1, 0},
	{"decoder.layers.self_attention.linear_qkv.weight", 3, {3, 4, 5}, MGT_CKPT_F32, 1, 2, -1, 1, 0},
};
#define NT (sizeof T / sizeof T[0])
static const char *META = "{\"format\": \"mgt-ckpt\", \"format_version\": 1, \"iteration\": 10}";

/* Read box (off, sh) of t from c and compare with the values saved with salt. */
static int box_ok(mgt_ckpt *c, const tspec *t, const int64_t *off, const int64_t *sh, int salt)
{
	size_t esz = mgt_ckpt_dtype_size(t->dt), n = (size_t)numel(t->ndim, sh);
	void *whole = whole_of(t, salt), *want = malloc(n * esz + 1), *got = malloc(n * esz + 1);
	box_copy(whole, t->gs, t->ndim, off, sh, esz, want);
	memset(got, 0x55, n * esz);
	int ok = mgt_ckpt_read(c, t->name, t->ndim, t->gs, off, sh, t->dt, got) == MGT_OK &&
		 memcmp(got, want, n * esz) == 0;
	free(whole);
	free(want);
	free(got);
	return ok;
}

static int whole_ok(mgt_ckpt *c, const tspec *t, int salt)
{
	int64_t off[4] = {0};
	return box_ok(c, t, off, t->gs, salt);
}

/* Every tensor read back whole, in 3 parts along each dim, and in a 3x3 grid. */
static void test_reshard(mgt_ckpt *c)
{
	for (size_t i = 0; i < NT; i++) {
		const tspec *t = &T[i];
		CHECK(whole_ok(c, t, 0), "%s: whole tensor round trip", t->name);
		int ok = 1;
		for (int d = 0; d < t->ndim; d++)
			for (int k = 0; k < 3; k++) {
				int64_t off[4] = {0}, sh[4];
				memcpy(sh, t->gs, sizeof sh);
				part(t->gs[d], k, 3, &off[d], &sh[d]);
				ok &= box_ok(c, t, off, sh, 0);
			}
		CHECK(ok, "%s: 3-way splits along every dim", t->name);
		if (t->ndim < 2)
			continue;
		ok = 1;
		for (int k = 0; k < 9; k++) {
			int64_t off[4] = {0}, sh[4];
			memcpy(sh, t->gs, sizeof sh);
			part(t->gs[0], k / 3, 3, &off[0], &sh[0]);
			part(t->gs[1], k % 3, 3, &off[1], &sh[1]);
			ok &= box_ok(c, t, off, sh, 0);
		}
		CHECK(ok, "%s: 3x3 grid", t->name);
	}
	int64_t o1[] = {3, 1}, s1[] = {7, 4}, o2[] = {1, 3}, s2[] = {4, 5};
	int64_t o3[] = {1, 1, 2}, s3[] = {2, 3, 3}, o4[] = {2, 1}, s4[] = {1, 1};
	CHECK(box_ok(c, &T[0], o1, s1, 0), "odd box across the dim-0 split");
	CHECK(box_ok(c, &T[1], o2, s2, 0), "odd box across the dim-1 split");
	CHECK(box_ok(c, &T[6], o3, s3, 0), "odd 3-d box across the split");
	CHECK(box_ok(c, &T[4], o4, s4, 0), "one float64 element");
}

static void test_roundtrip(void)
{
	char *save = path_in("a/b/save");
	CHECK(save_all(save, 10, T, NT, 2, 0, META) == MGT_OK, "save two shards (parents created)");
	char *tr = slurp(path_in("a/b/save/latest_checkpointed_iteration.txt"));
	CHECK(tr && strcmp(tr, "10") == 0, "tracker says \"10\"");
	free(tr);
	CHECK(exists(path_in("a/b/save/iter_0000010/metadata.json")) &&
	      exists(path_in("a/b/save/iter_0000010/model.h5")) &&
	      exists(path_in("a/b/save/iter_0000010/model_tp01_pp000_dp000.h5")) &&
	      !exists(path_in("a/b/save/iter_0000010.tmp")), "iteration directory, no .tmp left");
	int64_t it = -1;
	CHECK(mgt_ckpt_latest(save, &it) == MGT_OK && it == 10, "latest");
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_OK, "open latest");
	if (!c)
		return;
	CHECK(mgt_ckpt_iteration(c) == 10 && strcmp(mgt_ckpt_metadata(c), META) == 0,
	      "iteration and metadata.json");
	int nd;
	int64_t gs[4];
	mgt_ckpt_dtype dt;
	const char *n0 = mgt_ckpt_tensor(c, 0, &nd, gs, &dt);
	CHECK(mgt_ckpt_count(c) == NT && strcmp(n0, "decoder.final_layernorm.bias") == 0 &&
	      nd == 1 && gs[0] == 6 && dt == MGT_CKPT_F32, "tensor list, sorted");
	CHECK(mgt_ckpt_has(c, T[3].name) && !mgt_ckpt_has(c, "decoder.final_layernorm"), "has");
	test_reshard(c);
	mgt_ckpt_close(c);
}

/* ---- incremental shards (mgt_ckpt_shard_*) ------------------------------------------------- */

/* Shard s written piece by piece, each piece's data freed (and its memory scribbled over) right
 * after its put: what the file holds cannot come from buffers kept by the writer. */
static mgt_status stream_shard(const char *save, int64_t it, const char *shard, int s, int nshards)
{
	mgt_ckpt_shard *sh;
	mgt_status st = mgt_ckpt_shard_open(save, it, shard, &sh);
	for (size_t i = 0; !st && i < NT; i++) {
		int npieces = T[i].repl ? nshards : T[i].n0 * T[i].n1;
		void *whole = whole_of(&T[i], 0);
		for (int k = s; !st && k < npieces; k += nshards) {
			mgt_ckpt_piece p = piece_of(&T[i], k, whole);
			st = mgt_ckpt_shard_put(sh, &p);
			memset((void *)p.data, 0x77, (size_t)numel(p.ndim, p.shape) * mgt_ckpt_dtype_size(p.dtype));
			free((void *)p.data);
		}
		free(whole);
	}
	if (st) {
		mgt_ckpt_shard_discard(sh);
		return st;
	}
	return mgt_ckpt_shard_close(sh);
}

static void test_incremental(void)
{
	char save[512];
	snprintf(save, sizeof save, "%s", path_in("inc"));
	mgt_status st = mgt_ckpt_begin(save, 3);
	for (int s = 0; !st && s < 3; s++) {
		char name[64];
		snprintf(name, sizeof name, "model_tp%02d_pp000_dp000.h5", s);
		st = stream_shard(save, 3, name, s, 3);
	}
	CHECK(st == MGT_OK, "three shards written piece by piece");
	CHECK(mgt_ckpt_commit(save, 3, META) == MGT_OK, "commit");
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, 3, &c) == MGT_OK && mgt_ckpt_check(c) == MGT_OK, "opens whole");
	int ok = c && mgt_ckpt_count(c) == NT;
	for (size_t i = 0; ok && i < NT; i++)
		ok = whole_ok(c, &T[i], 0);
	CHECK(ok, "every tensor reads back with the values put");
	mgt_ckpt_close(c);

	/* failures: a spoiled shard is removed by close; discard removes; EXISTS on reopen */
	char tmpdir[512];
	snprintf(tmpdir, sizeof tmpdir, "%s", path_in("inc/iter_0000004.tmp"));
	CHECK(mgt_ckpt_begin(save, 4) == MGT_OK, "begin 4");
	mgt_ckpt_shard *sh = NULL;
	float v[6] = {1, 2, 3, 4, 5, 6};
	mgt_ckpt_piece p = {.name = "w", .ndim = 1, .global_shape = {6}, .shape = {6}, .dtype = MGT_CKPT_F32,
			    .data = v};
	CHECK(mgt_ckpt_shard_open(save, 4, "model.h5", &sh) == MGT_ERR_USAGE && !sh, "open: model.h5 refused");
	CHECK(mgt_ckpt_shard_open(save, 4, "a.h5", &sh) == MGT_OK && mgt_ckpt_shard_put(sh, &p) == MGT_OK,
	      "open and put");
	mgt_ckpt_shard *sh2 = NULL;
	CHECK(mgt_ckpt_shard_open(save, 4, "a.h5", &sh2) == MGT_ERR_EXISTS && !sh2, "a second open: EXISTS");
	CHECK(mgt_ckpt_shard_put(sh, &p) == MGT_ERR_USAGE && has_msg("written twice"),
	      "the same name twice refused");
	p.name = "other";
	CHECK(mgt_ckpt_shard_put(sh, &p) == MGT_ERR_USAGE, "a spoiled shard refuses later puts");
	CHECK(mgt_ckpt_shard_close(sh) == MGT_ERR_USAGE, "close returns the put's error");
	char *f = path_in("inc/iter_0000004.tmp/a.h5");
	CHECK(!exists(f), "and removes the partial file");
	CHECK(mgt_ckpt_shard_open(save, 4, "b.h5", &sh) == MGT_OK && mgt_ckpt_shard_put(sh, &p) == MGT_OK &&
	      exists(path_in("inc/iter_0000004.tmp/b.h5")), "another shard");
	mgt_ckpt_shard_discard(sh);
	mgt_ckpt_shard_discard(NULL);
	CHECK(!exists(path_in("inc/iter_0000004.tmp/b.h5")), "discard removes it");
	mgt_ckpt_abort(save, 4);
	CHECK(!exists(tmpdir), "abort");
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_read_errors(void)
{
	char *save = path_in("a/b/save");
	mgt_ckpt *c = NULL;
	if (mgt_ckpt_open(save, 10, &c))
		return;
	float buf[200];
	int64_t off[] = {0, 0}, bad[] = {12, 7}, sh[] = {12, 6}, big[] = {13, 6};
	CHECK(mgt_ckpt_read(c, T[0].name, 2, bad, off, sh, MGT_CKPT_F32, buf) == MGT_ERR_FORMAT &&
	      has_msg("[12, 6]") && has_msg("[12, 7]") && has_msg(T[0].name),
	      "global shape mismatch names both shapes: %s", mgt_err_msg());
	CHECK(mgt_ckpt_read(c, T[0].name, 1, bad, off, sh, MGT_CKPT_F32, buf) == MGT_ERR_FORMAT,
	      "rank mismatch");
	CHECK(mgt_ckpt_read(c, T[0].name, 2, T[0].gs, off, sh, MGT_CKPT_F64, buf) == MGT_ERR_FORMAT &&
	      has_msg("float32"), "dtype mismatch: %s", mgt_err_msg());
	CHECK(mgt_ckpt_read(c, "no.such.weight", 2, T[0].gs, off, sh, MGT_CKPT_F32, buf) ==
	      MGT_ERR_FORMAT && has_msg("no.such.weight") && has_msg("iter_0000010"),
	      "missing tensor names it and the directory: %s", mgt_err_msg());
	CHECK(mgt_ckpt_read(c, T[0].name, 2, T[0].gs, off, big, MGT_CKPT_F32, buf) == MGT_ERR_USAGE,
	      "box outside the tensor");
	mgt_ckpt_close(c);
}

static void copy_tree(const char *from, const char *to)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -R '%s' '%s'", to, from, to);
	if (system(cmd) != 0)
		exit(1);
}

static herr_t drop_hash_attr(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	(void)info, (void)data;
	H5Adelete_by_name(g, name, "xxh3_64", H5P_DEFAULT);
	return 0;
}

/* Make dir a checkpoint from before the checksums: no checksums.json, no xxh3_64 attributes. */
static void strip_checksums(const char *dir)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/checksums.json", dir);
	unlink(path);
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 4 || strcmp(e->d_name + n - 3, ".h5") || !strcmp(e->d_name, "model.h5"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
		H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, drop_hash_attr, NULL);
		H5Fclose(f);
	}
	if (d)
		closedir(d);
}

static void test_missing_coverage(void)
{
	char *save = path_in("cov");
	copy_tree(path_in("a/b/save"), save);
	unlink(path_in("cov/iter_0000010/model_tp01_pp000_dp000.h5"));
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("model_tp01_pp000_dp000.h5: shard file listed "
	      "in checksums.json is missing"), "a shard missing: refused at open: %s", mgt_err_msg());
	/* without the manifest the pieces' checksum attributes alone refuse it */
	unlink(path_in("cov/iter_0000010/checksums.json"));
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("checksums.json is missing"),
	      "checksums.json missing: refused: %s", mgt_err_msg());
	/* a checkpoint from before the checksums: the coverage checks remain */
	strip_checksums(path_in("cov/iter_0000010"));
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_OK, "open with a shard missing (no checksums)");
	if (!c)
		return;
	float buf[200];
	int64_t off[] = {0, 0}, top[] = {6, 6};
	CHECK(mgt_ckpt_read(c, T[0].name, 2, T[0].gs, off, T[0].gs, MGT_CKPT_F32, buf) ==
	      MGT_ERR_FORMAT && has_msg("36 of 72"), "uncovered part refused: %s", mgt_err_msg());
	CHECK(box_ok(c, &T[0], off, top, 0), "the covered half still reads");
	CHECK(mgt_ckpt_read(c, T[1].name, 2, T[1].gs, off, T[1].gs, MGT_CKPT_F32, buf) ==
	      MGT_ERR_FORMAT, "dim-1 split with a piece missing refused");
	CHECK(whole_ok(c, &T[3], 0), "replicated tensor still whole");
	mgt_ckpt_close(c);
}

static void test_truncated(void)
{
	char *save = path_in("trunc");
	copy_tree(path_in("a/b/save"), save);
	char *shard = path_in("trunc/iter_0000010/model_tp01_pp000_dp000.h5");
	struct stat sb;
	stat(shard, &sb);
	CHECK(truncate(shard, sb.st_size / 2) == 0, "truncate a shard");
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("model_tp01_pp000_dp000.h5"),
	      "truncated shard refused, naming the file: %s", mgt_err_msg());
	mgt_ckpt_close(c);
	truncate(shard, 100);
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("model_tp01_pp000_dp000.h5"),
	      "100-byte shard refused: %s", mgt_err_msg());
	mgt_ckpt_close(c);
}

/* Flip bytes inside the stored data of the first piece of T[0]: the checksum catches it. */
static void test_corrupt(void)
{
	char *save = path_in("corrupt");
	copy_tree(path_in("a/b/save"), save);
	char *shard = path_in("corrupt/iter_0000010/model_tp00_pp000_dp000.h5");
	size_t n;
	char *b = NULL;
	mgt_file_read(shard, &b, &n);
	float *whole = whole_of(&T[0], 0);
	char *at = b ? memmem(b, n, whole + 6, 6 * sizeof(float)) : NULL;
	free(whole);
	CHECK(at != NULL, "found the data of a piece in the shard");
	if (!at) {
		free(b);
		return;
	}
	at[5] ^= 0x40;
	FILE *f = fopen(shard, "wb");
	fwrite(b, 1, n, f);
	fclose(f);
	free(b);
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_OK, "open (metadata intact)");
	float buf[200];
	int64_t off[] = {0, 0};
	CHECK(c && mgt_ckpt_read(c, T[0].name, 2, T[0].gs, off, T[0].gs, MGT_CKPT_F32, buf) ==
	      MGT_ERR_FORMAT && has_msg("model_tp00_pp000_dp000.h5"),
	      "corrupt data refused, naming the file: %s", mgt_err_msg());
	mgt_ckpt_close(c);
}

/* Rewrite one element of dataset name in file through HDF5 (so its Fletcher-32 checksums are
 * recomputed: only the XXH3-64 checksum can tell). */
static int rewrite_element(const char *file, const char *name, float v)
{
	hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT), ds = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
	hid_t sp = ds < 0 ? -1 : H5Dget_space(ds), ms;
	hsize_t at[2] = {1, 2}, one[2] = {1, 1};
	int ok = sp >= 0 && H5Sselect_hyperslab(sp, H5S_SELECT_SET, at, NULL, one, NULL) >= 0 &&
		 (ms = H5Screate_simple(2, one, NULL)) >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, &v) >= 0;
	if (ok)
		H5Sclose(ms);
	if (sp >= 0)
		H5Sclose(sp);
	if (ds >= 0)
		H5Dclose(ds);
	if (f >= 0)
		H5Fclose(f);
	return ok;
}

/* Data changed behind the format's back: refused when read whole, when a box of it is read
 * (the piece verified whole first), by mgt_ckpt_check_data and mgt_ckpt_verify; the other
 * tensors still read.  checksums.json itself damaged: refused at open. */
static void test_checksums(void)
{
	char save[512];
	snprintf(save, sizeof save, "%s", path_in("sums"));
	copy_tree(path_in("a/b/save"), save);
	CHECK(mgt_ckpt_verify(save, 10) == MGT_OK, "checksums: a saved checkpoint verifies whole");
	CHECK(rewrite_element(path_in("sums/iter_0000010/model_tp01_pp000_dp000.h5"), T[0].name, 123.0f),
	      "checksums: one element rewritten through HDF5");
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_OK, "checksums: opens (the structure is intact)");
	if (!c)
		return;
	float buf[200];
	int64_t off[] = {0, 0}, top[] = {6, 6}, low_off[] = {6, 0}, low[] = {2, 6};
	CHECK(box_ok(c, &T[0], off, top, 0), "checksums: the other piece still reads");
	CHECK(mgt_ckpt_read(c, T[0].name, 2, T[0].gs, low_off, low, MGT_CKPT_F32, buf) == MGT_ERR_FORMAT &&
	      has_msg("model_tp01_pp000_dp000.h5: tensor decoder.layers.0.self_attention.linear_qkv.weight: the data "
		      "read back have checksum"), "checksums: a box of the piece refused: %s", mgt_err_msg());
	CHECK(mgt_ckpt_read(c, T[0].name, 2, T[0].gs, off, T[0].gs, MGT_CKPT_F32, buf) == MGT_ERR_FORMAT,
	      "checksums: the whole tensor refused");
	CHECK(whole_ok(c, &T[1], 0), "checksums: another tensor of that shard still reads");
	CHECK(mgt_ckpt_check_data(c) == MGT_ERR_FORMAT && has_msg("linear_qkv.weight"),
	      "checksums: check_data refuses: %s", mgt_err_msg());
	mgt_ckpt_close(c);
	int64_t found = 0;
	CHECK(mgt_ckpt_verify(save, 10) == MGT_ERR_FORMAT, "checksums: verify refuses");
	CHECK(mgt_ckpt_newest_whole(save, -1, &found) == MGT_OK && found == -1,
	      "checksums: no whole iteration (%lld)", (long long)found);
	/* a digit of a piece's checksum in checksums.json changed */
	copy_tree(path_in("a/b/save"), save);
	char *text = NULL, *sums = path_in("sums/iter_0000010/checksums.json");
	size_t n;
	mgt_file_read(sums, &text, &n);
	char *h = text ? strstr(text, "\"xxh3_64\": \"") : NULL;
	CHECK(h != NULL, "checksums: checksums.json lists xxh3_64 values");
	if (h) {
		h += 12;
		*h = *h == '0' ? '1' : '0';
		FILE *f = fopen(sums, "w");
		fwrite(text, 1, n, f);
		fclose(f);
		CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("differs from checksums.json"),
		      "checksums: a changed checksum refused at open: %s", mgt_err_msg());
		f = fopen(sums, "w");
		fwrite(text, 1, n / 2, f);
		fclose(f);
		CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("checksums.json: not valid JSON"),
		      "checksums: a truncated checksums.json refused: %s", mgt_err_msg());
	}
	free(text);
}

static void test_open_errors(void)
{
	char save[512]; /* path_in's buffers are reused */
	snprintf(save, sizeof save, "%s", path_in("openerr"));
	copy_tree(path_in("a/b/save"), save);
	mgt_ckpt *c = NULL;
	CHECK(mgt_ckpt_open(save, 11, &c) == MGT_ERR_IO && has_msg("iter_0000011"),
	      "missing iteration: %s", mgt_err_msg());
	FILE *f = fopen(path_in("openerr/latest_checkpointed_iteration.txt"), "w");
	fputs("20\n", f);
	fclose(f);
	CHECK(mgt_ckpt_open(save, -1, &c) == MGT_ERR_FORMAT && has_msg("iteration 20") &&
	      has_msg("iter_0000020"), "tracker naming a missing iteration: %s", mgt_err_msg());
	f = fopen(path_in("openerr/latest_checkpointed_iteration.txt"), "w");
	fputs("ten", f);
	fclose(f);
	int64_t it;
	CHECK(mgt_ckpt_latest(save, &it) == MGT_ERR_FORMAT, "garbage tracker: %s", mgt_err_msg());
	unlink(path_in("openerr/latest_checkpointed_iteration.txt"));
	CHECK(mgt_ckpt_latest(save, &it) == MGT_ERR_IO, "no tracker");
	unlink(path_in("openerr/iter_0000010/metadata.json"));
	CHECK(mgt_ckpt_open(save, 10, &c) == MGT_ERR_FORMAT && has_msg("metadata.json"),
	      "missing metadata.json: %s", mgt_err_msg());
	f = fopen(path_in("openerr/iter_0000010/metadata.json"), "w");
	fputs("{}", f);
	fclose(f);
	CHECK(mgt_ckpt_open(save, 10, &c) == MGT_ERR_FORMAT && has_msg("metadata.json: its checksum differs"),
	      "a changed metadata.json is refused: %s", mgt_err_msg());
	strip_checksums(path_in("openerr/iter_0000010"));
	f = fopen(path_in("openerr/iter_0000010/zz.h5"), "w");
	fputs("not hdf5", f);
	fclose(f);
	CHECK(mgt_ckpt_open(save, 10, &c) == MGT_ERR_FORMAT && has_msg("zz.h5"),
	      "a non-HDF5 shard is refused: %s", mgt_err_msg());
	CHECK(c == NULL, "no handle on error");
}

/* ---- atomicity ---------------------------------------------------------------------------- */

static int ckpt_intact(const char *save, int64_t it, int salt)
{
	mgt_ckpt *c = NULL;
	int64_t got = -1;
	int ok = mgt_ckpt_latest(save, &got) == MGT_OK && got == it &&
		 mgt_ckpt_open(save, -1, &c) == MGT_OK;
	for (size_t i = 0; ok && i < NT; i++)
		ok = whole_ok(c, &T[i], salt);
	mgt_ckpt_close(c);
	return ok;
}

/* In a child (HDF5 also fails to write its cleanup to the memory file under the limit, which
 * real disk-full errors do not, so the child leaves with _exit): a file size limit makes the
 * HDF5 writes fail with EFBIG. */
static int shard_write_efbig(const char *save)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit lim = {2000, 2000};
		signal(SIGXFSZ, SIG_IGN);
		setrlimit(RLIMIT_FSIZE, &lim);
		mgt_status st = write_shard(save, 20, "a.h5", T, NT, 0, 2, 1);
		int ok = st == MGT_ERR_IO && has_msg("File too large") &&
			 !exists(path_in("atom/iter_0000020.tmp/a.h5"));
		if (!ok)
			printf("# status %d: %s\n", st, mgt_err_msg());
		fflush(stdout);
		_exit(ok ? 0 : 1);
	}
	int ws = 0;
	return pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static void test_failed_writes(void)
{
	char *save = path_in("atom");
	CHECK(save_all(save, 10, T, NT, 2, 0, META) == MGT_OK, "save iteration 10");
	/* the .tmp directory replaced by a file: the shard cannot be created */
	CHECK(mgt_ckpt_begin(save, 20) == MGT_OK, "begin 20");
	char *tmp = path_in("atom/iter_0000020.tmp");
	rmdir(tmp);
	fclose(fopen(tmp, "w"));
	CHECK(write_shard(save, 20, "a.h5", T, NT, 0, 2, 1) == MGT_ERR_IO, "shard write fails: %s",
	      mgt_err_msg());
	CHECK(mgt_ckpt_commit(save, 20, META) == MGT_ERR_IO, "commit without a .tmp directory fails");
	CHECK(ckpt_intact(save, 10, 0) && !exists(path_in("atom/iter_0000020")),
	      "previous checkpoint and tracker untouched");
	/* file size limit: the HDF5 write itself fails (works as root too) */
	CHECK(mgt_ckpt_begin(save, 20) == MGT_OK && !exists(path_in("atom/iter_0000020.tmp/a.h5")),
	      "begin replaces a stale .tmp file");
	CHECK(shard_write_efbig(save), "write failing with EFBIG: error, partial shard removed");
	/* commit failing after the shards: metadata.json cannot be written */
	CHECK(write_shard(save, 20, "a.h5", T, NT, 0, 2, 1) == MGT_OK &&
	      write_shard(save, 20, "b.h5", T, NT, 1, 2, 1) == MGT_OK, "shards of 20");
	mkdir(path_in("atom/iter_0000020.tmp/metadata.json"), 0755);
	CHECK(mgt_ckpt_commit(save, 20, META) == MGT_ERR_IO, "commit fails: %s", mgt_err_msg());
	CHECK(ckpt_intact(save, 10, 0) && !exists(path_in("atom/iter_0000020")),
	      "previous checkpoint and tracker untouched");
	CHECK(mgt_ckpt_commit(save, 20, "[1, 2]") == MGT_ERR_USAGE &&
	      mgt_ckpt_commit(save, 20, "{\"a\": ") == MGT_ERR_USAGE, "metadata must be a JSON object");
	if (geteuid() != 0) {
		chmod(save, 0555);
		CHECK(mgt_ckpt_begin(save, 30) == MGT_ERR_IO, "unwritable directory: %s", mgt_err_msg());
		chmod(save, 0755);
		CHECK(ckpt_intact(save, 10, 0), "previous checkpoint untouched");
	}
}

static void test_replace(void)
{
	char *save = path_in("atom");
	CHECK(mgt_ckpt_begin(save, 10) == MGT_OK && write_shard(save, 10, "x.h5", T, NT, 0, 2, 5) ==
	      MGT_OK && write_shard(save, 10, "y.h5", T, NT, 1, 2, 5) == MGT_OK,
	      "write iteration 10 again, other values");
	CHECK(ckpt_intact(save, 10, 0), "before commit the old iteration 10 is read");
	CHECK(mgt_ckpt_commit(save, 10, META) == MGT_OK, "commit replaces it");
	CHECK(ckpt_intact(save, 10, 5) && !exists(path_in("atom/iter_0000010.tmp")) &&
	      !exists(path_in("atom/iter_0000010.old")) &&
	      !exists(path_in("atom/iter_0000010/model_tp00_pp000_dp000.h5")),
	      "new values, no leftovers");
	/* a crash between the two renames of the fallback path */
	rename(path_in("atom/iter_0000010"), path_in("atom/iter_0000010.old"));
	CHECK(ckpt_intact(save, 10, 5), "iter_N.old is read when iter_N is missing");
	CHECK(mgt_ckpt_begin(save, 10) == MGT_OK && exists(path_in("atom/iter_0000010/x.h5")) &&
	      !exists(path_in("atom/iter_0000010.old")), "begin puts iter_N.old back");
}

static void test_stale_tmp(void)
{
	char *save = path_in("atom");
	mkdir(path_in("atom/iter_0000030.tmp"), 0755);
	FILE *f = fopen(path_in("atom/iter_0000030.tmp/junk.h5"), "w");
	fputs("killed mid-write", f);
	fclose(f);
	CHECK(mgt_ckpt_begin(save, 30) == MGT_OK && !exists(path_in("atom/iter_0000030.tmp/junk.h5")),
	      "begin removes a stale .tmp directory");
	CHECK(write_shard(save, 30, "a.h5", T, NT, 0, 2, 3) == MGT_OK &&
	      write_shard(save, 30, "b.h5", T, NT, 1, 2, 3) == MGT_OK &&
	      mgt_ckpt_commit(save, 30, META) == MGT_OK && ckpt_intact(save, 30, 3), "save 30");
}

/* Which iterations are whole, the newest whole one, and the cleanup of a killed run's leftovers
 * at a process's first save into a directory. */
static mgt_status save_meta(const char *save, int64_t it, const char *meta)
{
	mgt_status st = mgt_ckpt_begin(save, it);
	if (!st)
		st = write_shard(save, it, "a.h5", T, NT, 0, 2, 0);
	if (!st)
		st = write_shard(save, it, "b.h5", T, NT, 1, 2, 0);
	return st ? st : mgt_ckpt_commit(save, it, meta);
}

static void test_whole(void)
{
	char *save = strdup(path_in("whole"));
	copy_tree(path_in("a/b/save"), save);
	int64_t *its = NULL, found = -2;
	size_t n = 0;
	CHECK(save_all(save, 20, T, NT, 2, 1, META) == MGT_OK && save_all(save, 30, T, NT, 2, 2, META) == MGT_OK,
	      "iterations 10, 20, 30");
	mkdir(path_in("whole/iter_0000040.tmp"), 0755);
	mkdir(path_in("whole/iter_x"), 0755);
	fclose(fopen(path_in("whole/iter_0000050"), "w")); /* a file, not a directory */
	CHECK(mgt_ckpt_iterations(save, &its, &n) == MGT_OK && n == 3 && its[0] == 10 && its[1] == 20 &&
	      its[2] == 30, "iterations: the iter_N directories, ascending (%zu)", n);
	free(its);
	/* a directory without iterations (say --load DIR holding only --tensorboard-dir DIR/tb) */
	mkdir(path_in("noiter"), 0755);
	mkdir(path_in("noiter/tb"), 0755);
	its = (int64_t *)&found;
	n = 7;
	CHECK(mgt_ckpt_iterations(path_in("noiter"), &its, &n) == MGT_OK && n == 0 && !its,
	      "iterations: none in a directory without iter_N (%zu)", n);
	CHECK(mgt_ckpt_verify(save, 30) == MGT_OK && mgt_ckpt_verify(save, 10) == MGT_OK, "whole iterations verify");
	unlink(path_in("whole/iter_0000030/model_tp01_pp000_dp000.h5"));
	CHECK(mgt_ckpt_verify(save, 30) == MGT_ERR_FORMAT && has_msg("listed in checksums.json is missing"),
	      "a missing shard: %s", mgt_err_msg());
	mgt_err(MGT_ERR_FORMAT, "the caller's message");
	CHECK(mgt_ckpt_newest_whole(save, -1, &found) == MGT_OK && found == 20 && has_msg("the caller's message"),
	      "newest whole: 20 (%lld), the message kept", (long long)found);
	CHECK(mgt_ckpt_newest_whole(save, 20, &found) == MGT_OK && found == 10, "except 20: 10");
	CHECK(mgt_ckpt_verify(save, 25) == MGT_ERR_IO, "a missing iteration");
	/* metadata.json's "tensors" must all be in the shards */
	CHECK(save_meta(save, 60, "{\"tensors\": [{\"name\": \"decoder.final_layernorm.bias\", \"shape\": [6]}, "
			      "{\"name\": \"output_layer.weight\", \"shape\": [8, 6]}]}") == MGT_OK, "save 60");
	CHECK(mgt_ckpt_verify(save, 60) == MGT_ERR_FORMAT && has_msg("output_layer.weight of metadata.json is in no shard"),
	      "a listed tensor in no shard: %s", mgt_err_msg());
	CHECK(save_meta(save, 61, "{\"tensors\": [{\"name\": \"decoder.final_layernorm.bias\", \"shape\": [7]}]}") == MGT_OK,
	      "save 61");
	CHECK(mgt_ckpt_verify(save, 61) == MGT_ERR_FORMAT && has_msg("differs from metadata.json"),
	      "a listed tensor of another shape: %s", mgt_err_msg());
	/* the iteration directory being written is registered: an error exit removes it */
	CHECK(mgt_ckpt_begin(save, 70) == MGT_OK && exists(path_in("whole/iter_0000070.tmp")), "begin 70");
	CHECK(write_shard(save, 70, "a.h5", T, NT, 0, 2, 0) == MGT_OK, "a shard of 70");
	mgt_tmp_remove_all();
	CHECK(!exists(path_in("whole/iter_0000070.tmp")), "an error exit removes iter_N.tmp");
	CHECK(mgt_ckpt_begin(save, 71) == MGT_OK, "begin 71");
	mgt_ckpt_abort(save, 71);
	CHECK(!exists(path_in("whole/iter_0000071.tmp")), "mgt_ckpt_abort removes it");
	mgt_tmp_remove_all();
	CHECK(exists(path_in("whole/iter_0000060")), "a committed iteration is not registered");
	/* a killed run's leftovers, removed by the first save of this process into the directory */
	char *k = strdup(path_in("killed"));
	copy_tree(path_in("a/b/save"), k);
	mkdir(path_in("killed/iter_0000015.tmp"), 0755);
	fclose(fopen(path_in("killed/iter_0000015.tmp/a.h5"), "w"));
	copy_tree(path_in("killed/iter_0000010"), path_in("killed/iter_0000010.old"));
	copy_tree(path_in("killed/iter_0000010"), path_in("killed/iter_0000005.old"));
	fclose(fopen(path_in("killed/latest_checkpointed_iteration.txt.tmp.999999999"), "w"));
	CHECK(save_all(k, 20, T, NT, 2, 0, META) == MGT_OK, "a save into it");
	CHECK(!exists(path_in("killed/iter_0000015.tmp")) && !exists(path_in("killed/iter_0000010.old")) &&
	      exists(path_in("killed/iter_0000005")) && !exists(path_in("killed/iter_0000005.old")) &&
	      !exists(path_in("killed/latest_checkpointed_iteration.txt.tmp.999999999")),
	      "removed iter_N.tmp, a leftover iter_N.old and a dead writer's tracker temporary; put back "
	      "an iter_N.old without iter_N");
	mkdir(path_in("killed/iter_0000016.tmp"), 0755);
	CHECK(save_all(k, 30, T, NT, 2, 0, META) == MGT_OK && exists(path_in("killed/iter_0000016.tmp")),
	      "only the first save of the process cleans (an --async-save may be writing)");
	free(k);
	free(save);
}

static void test_write_errors(void)
{
	char *save = path_in("werr");
	float x[4] = {1, 2, 3, 4};
	mgt_ckpt_piece p = {"w", 1, {4}, {0}, {4}, MGT_CKPT_F32, x};
	CHECK(mgt_ckpt_begin(save, 1) == MGT_OK, "begin");
	CHECK(mgt_ckpt_write_shard(save, 1, "model.h5", &p, 1) == MGT_ERR_USAGE &&
	      mgt_ckpt_write_shard(save, 1, "a/b.h5", &p, 1) == MGT_ERR_USAGE &&
	      mgt_ckpt_write_shard(save, 1, "a.bin", &p, 1) == MGT_ERR_USAGE, "bad shard names");
	mgt_ckpt_piece q = p;
	q.name = "a/b";
	CHECK(mgt_ckpt_write_shard(save, 1, "a.h5", &q, 1) == MGT_ERR_USAGE, "tensor name with '/'");
	q = p;
	q.offset[0] = 1;
	CHECK(mgt_ckpt_write_shard(save, 1, "a.h5", &q, 1) == MGT_ERR_USAGE, "piece outside");
	mgt_ckpt_piece two[2] = {p, p};
	CHECK(mgt_ckpt_write_shard(save, 1, "a.h5", two, 2) == MGT_ERR_USAGE &&
	      !exists(path_in("werr/iter_0000001.tmp/a.h5")), "same tensor twice in a shard");
	CHECK(mgt_ckpt_write_shard(save, 1, "a.h5", &p, 1) == MGT_OK &&
	      mgt_ckpt_write_shard(save, 1, "a.h5", &p, 1) == MGT_ERR_EXISTS, "shard written twice");
	/* overlapping pieces in two shards */
	q = p;
	q.global_shape[0] = 6;
	q.offset[0] = 2;
	mgt_ckpt_piece r = q;
	r.offset[0] = 0;
	CHECK(mgt_ckpt_write_shard(save, 1, "b.h5", &q, 1) == MGT_OK &&
	      mgt_ckpt_write_shard(save, 1, "c.h5", &r, 1) == MGT_OK, "write overlapping pieces");
	CHECK(mgt_ckpt_commit(save, 1, "{}") == MGT_ERR_FORMAT, "global shapes disagree: %s",
	      mgt_err_msg());
	p.global_shape[0] = 6;
	unlink(path_in("werr/iter_0000001.tmp/a.h5"));
	CHECK(mgt_ckpt_write_shard(save, 1, "a.h5", &p, 1) == MGT_OK &&
	      mgt_ckpt_commit(save, 1, "{}") == MGT_ERR_FORMAT && has_msg("overlap"),
	      "overlapping pieces refused: %s", mgt_err_msg());
	/* incomplete tensor */
	CHECK(mgt_ckpt_begin(save, 2) == MGT_OK && mgt_ckpt_write_shard(save, 2, "b.h5", &q, 1) ==
	      MGT_OK && mgt_ckpt_commit(save, 2, "{}") == MGT_ERR_FORMAT && has_msg("4 of the 6"),
	      "commit refuses a tensor not wholly saved: %s", mgt_err_msg());
	CHECK(!exists(path_in("werr/iter_0000002")) && !exists(path_in("werr/" MGT_CKPT_TRACKER)),
	      "nothing committed");
}

/* ---- the virtual index and dumps ---------------------------------------------------------- */

static void test_virtual(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	hid_t f = H5Fopen(path_in("a/b/save/iter_0000010/model.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
	CHECK(f >= 0, "open model.h5");
	if (f < 0)
		return;
	int ok = 1;
	for (size_t i = 0; i < NT; i++) {
		size_t esz = mgt_ckpt_dtype_size(T[i].dt), n = (size_t)numel(T[i].ndim, T[i].gs);
		void *want = whole_of(&T[i], 0), *got = malloc(n * esz);
		hid_t ds = H5Dopen2(f, T[i].name, H5P_DEFAULT);
		hid_t mt = T[i].dt == MGT_CKPT_F32 ? H5T_NATIVE_FLOAT :
			   T[i].dt == MGT_CKPT_F64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT32;
		ok &= ds >= 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0 &&
		      memcmp(got, want, n * esz) == 0;
		if (ds >= 0)
			H5Dclose(ds);
		free(want);
		free(got);
	}
	CHECK(ok, "virtual datasets present every tensor whole");
	H5Fclose(f);
}

static int dump_read(hid_t f, const char *name, hid_t mt, void *buf)
{
	hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
	int ok = ds >= 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
	if (ds >= 0)
		H5Dclose(ds);
	return ok;
}

static void test_dump(void)
{
	float a[6] = {1, 2, 3, 4, 5, 6}, ga[6];
	int32_t b[3] = {-1, 0, 7}, gb[3];
	mgt_ckpt_piece p[] = {
		{"grads/decoder.layers.0.mlp.linear_fc1.weight", 2, {0}, {0}, {2, 3}, MGT_CKPT_F32, a},
		{"grads/sub/steps", 1, {0}, {0}, {3}, MGT_CKPT_I32, b},
		{"top", 1, {0}, {0}, {6}, MGT_CKPT_F32, a},
	};
	char *path = path_in("dump.h5");
	CHECK(mgt_ckpt_dump_write(path, p, 3, "{\"x\": 1}") == MGT_OK, "dump");
	CHECK(mgt_ckpt_dump_write(path, p, 2, NULL) == MGT_OK, "dump replaces the file");
	CHECK(mgt_ckpt_dump_write(path, p, 3, "{\"x\": 2}") == MGT_OK, "dump again");
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	CHECK(f >= 0 && dump_read(f, p[0].name, H5T_NATIVE_FLOAT, ga) && !memcmp(a, ga, sizeof a) &&
	      dump_read(f, p[1].name, H5T_NATIVE_INT32, gb) && !memcmp(b, gb, sizeof b) &&
	      dump_read(f, "top", H5T_NATIVE_FLOAT, ga), "dumped datasets, groups created");
	char *s = NULL;
	hid_t at = f < 0 ? -1 : H5Aopen(f, "metadata", H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	CHECK(at >= 0 && H5Aread(at, t, &s) >= 0 && s && strcmp(s, "{\"x\": 2}") == 0,
	      "JSON attribute");
	if (s)
		H5free_memory(s);
	if (at >= 0)
		H5Aclose(at);
	H5Tclose(t);
	if (f >= 0)
		H5Fclose(f);
	char tmp[600];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	CHECK(!exists(tmp), "no temporary left");
	p[2].name = "a//b";
	CHECK(mgt_ckpt_dump_write(path, p, 3, NULL) == MGT_ERR_USAGE, "empty group name refused");
	p[2].name = "grads/sub/steps";
	CHECK(mgt_ckpt_dump_write(path, p, 3, NULL) == MGT_ERR_USAGE, "duplicate refused: %s",
	      mgt_err_msg());
	CHECK(mgt_ckpt_dump_write(path_in("nodir/x.h5"), p, 1, NULL) == MGT_ERR_IO,
	      "missing directory: %s", mgt_err_msg());
}

/* ---- --write DIR: the checkpoint of tests/cli/t4000-ckpt-h5py.sh -------------------------- */

static const tspec W[] = {
	{"embedding.word_embeddings.weight", 2, {10, 6}, MGT_CKPT_F32, 0, 2, -1, 1, 0},
	{"embedding.position_embeddings.weight", 2, {8, 6}, MGT_CKPT_F32, -1, 1, -1, 1, 1},
	{"decoder.layers.self_attention.linear_qkv.weight", 3, {2, 18, 6}, MGT_CKPT_F32, 0, 2, 1, 2, 0},
	{"decoder.layers.self_attention.linear_qkv.bias", 2, {2, 18}, MGT_CKPT_F32, 0, 2, 1, 2, 0},
	{"decoder.layers.self_attention.linear_proj.weight", 3, {2, 6, 6}, MGT_CKPT_F32, 0, 2, 2, 2, 0},
	{"decoder.layers.mlp.linear_fc1.weight", 3, {2, 16, 6}, MGT_CKPT_F32, 0, 2, 1, 2, 0},
	{"decoder.layers.mlp.linear_fc2.weight", 3, {2, 6, 8}, MGT_CKPT_F32, 0, 2, 2, 2, 0},
	{"decoder.final_layernorm.weight", 1, {6}, MGT_CKPT_F32, -1, 1, -1, 1, 0},
	{"output_layer.weight", 2, {10, 6}, MGT_CKPT_F32, 0, 3, -1, 1, 0},
	{"optimizer.state.exp_avg.output_layer.weight", 2, {10, 6}, MGT_CKPT_F64, 1, 4, -1, 1, 0},
	{"rng.counters", 1, {5}, MGT_CKPT_I32, 0, 2, -1, 1, 0},
};
#define NW (sizeof W / sizeof W[0])

static int write_known(const char *save)
{
	static const char *meta = "{\"format\": \"mgt-ckpt\", \"format_version\": 1, \"iteration\": 7,"
		" \"args\": {\"num_layers\": 2, \"hidden_size\": 6}, \"layout\": "
		"{\"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 2}}";
	mgt_status st = mgt_ckpt_begin(save, 7);
	for (int s = 0; !st && s < 4; s++) {
		char name[64];
		snprintf(name, sizeof name, "model_tp%02d_pp%03d_dp000.h5", s % 2, s / 2);
		st = write_shard(save, 7, name, W, NW, s, 4, 0);
	}
	if (!st)
		st = mgt_ckpt_commit(save, 7, meta);
	mgt_ckpt_piece p[NW];
	char names[NW][128];
	for (size_t i = 0; !st && i < NW; i++) {
		snprintf(names[i], sizeof names[i], "expected/%s", W[i].name);
		p[i] = (mgt_ckpt_piece){names[i], W[i].ndim, {0}, {0}, {0}, W[i].dt, whole_of(&W[i], 0)};
		memcpy(p[i].shape, W[i].gs, sizeof p[i].shape);
	}
	char *exp = st ? NULL : malloc(strlen(save) + 16);
	if (exp) {
		sprintf(exp, "%s/expected.h5", save);
		st = mgt_ckpt_dump_write(exp, p, NW, "{\"what\": \"expected\"}");
		for (size_t i = 0; i < NW; i++)
			free((void *)p[i].data);
		free(exp);
	}
	if (st)
		fprintf(stderr, "test_ckpt --write: %s\n", mgt_err_msg());
	return st ? 1 : 0;
}

/* ---- expert rows (lib/train/checkpointing.c): one [E, rows, cols] dataset per expert tensor --------- */

/* Two layers, both MoE: E SwiGLU experts of 8 (fc1 [16, 8], fc2 [8, 8]), a router with the
 * frozen expert bias, a gated shared expert. */
static mgt_model_config moe_config(int64_t E)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	c.num_layers = 2;
	c.hidden_size = 8;
	c.num_attention_heads = 2;
	c.ffn_hidden_size = 16;
	c.seq_length = 8;
	c.max_position_embeddings = 8;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "rope");
	snprintf(c.normalization, sizeof c.normalization, "RMSNorm");
	c.rotary_base = 10000;
	c.rotary_percent = 1.0;
	c.norm_epsilon = 1e-5;
	c.swiglu = true;
	c.untie_embeddings_and_output_weights = true;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.02;
	c.vocab_size = 40;
	c.num_experts = E;
	c.moe_router_topk = 2;
	c.moe_layer_freq = 1;
	c.moe_ffn_hidden_size = 8;
	snprintf(c.moe_router_score_function, sizeof c.moe_router_score_function, "sigmoid");
	c.moe_router_enable_expert_bias = true;
	c.moe_shared_expert_intermediate_size = 8;
	c.moe_shared_expert_gate = true;
	snprintf(c.moe_router_load_balancing_type, sizeof c.moe_router_load_balancing_type, "aux_loss");
	snprintf(c.moe_token_drop_policy, sizeof c.moe_token_drop_policy, "probs");
	c.moe_router_bias_update_rate = 1e-3;
	return c;
}

/* One rank's table and buffers: w[0] the parameters, w[1] and w[2] Adam's moments, every row
 * (zero- and one-initialized ones too) drawn by mgt_tensor_table_init, whose values do not
 * depend on the layout, with seeds 100, 101, 102 (fill) or zero. */
typedef struct {
	mgt_tensor_table tt;
	float *w[3];
} moe_rank;

static const char *const moe_prefix[3] = {"", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq."};

static int moe_rank_make(moe_rank *r, const mgt_model_config *c, int tp, int tp_rank, int ep, int ep_rank, int fill)
{
	memset(r, 0, sizeof *r);
	if (mgt_tensor_table_build_ep(&r->tt, c, tp, tp_rank, 1, 0, ep, ep_rank))
		return 0;
	for (int i = 0; i < r->tt.n; i++) {
		r->tt.t[i].init = MGT_INIT_NORMAL;
		r->tt.t[i].init_std = 1.0;
	}
	for (int k = 0; k < 3; k++) {
		r->w[k] = calloc(r->tt.buf_numel + 1, sizeof(float));
		if (fill)
			mgt_tensor_table_init(&r->tt, r->w[k], 100 + (uint64_t)k);
	}
	return 1;
}

static void moe_rank_free(moe_rank *r)
{
	for (int k = 0; k < 3; k++)
		free(r->w[k]);
	mgt_tensor_table_free(&r->tt);
}

/* Save config c as TP x EP ranks write it (EP carved out of data parallelism: expert-parallel
 * rank e is data-parallel rank e, and rank 0 alone writes the dense rows), the moments as a
 * distributed optimizer's two shards [0, mid) and [mid, end) of the buffer, mid inside an expert
 * row (partial rows);
 * with experts false no expert rows at all. */
static mgt_status moe_save(const char *save, int64_t it, const mgt_model_config *c, int tp, int ep, int experts)
{
	mgt_status st = mgt_ckpt_begin(save, it);
	for (int tr = 0; !st && tr < tp; tr++)
		for (int er = 0; !st && er < ep; er++) {
			moe_rank r;
			mgt_train_pieces *pl = NULL;
			if (!moe_rank_make(&r, c, tp, tr, ep, er, 1))
				return MGT_ERR_USAGE;
			unsigned which = (er == 0 ? MGT_TRAIN_PIECES_DENSE : 0) |
					 (experts ? MGT_TRAIN_PIECES_EXPERT : 0);
			size_t end = r.tt.buf_numel, mid = end / 2 + 3;
			for (int i = 0, e = 0; i < r.tt.n; i++) /* inside the 4th expert row, mid-row */
				if (r.tt.t[i].num_experts > 0 && e++ == 3)
					mid = r.tt.t[i].offset + r.tt.t[i].numel / 2 + 3;
			st = mgt_train_pieces_new(&pl);
			if (!st)
				st = mgt_train_pieces_add(pl, "", &r.tt, 0, end, r.w[0], which);
			for (int k = 1; !st && k < 3; k++) {
				st = mgt_train_pieces_add(pl, moe_prefix[k], &r.tt, 0, mid, r.w[k], which);
				if (!st)
					st = mgt_train_pieces_add(pl, moe_prefix[k], &r.tt, mid, end, r.w[k] + mid, which);
			}
			if (!st)
				st = mgt_train_pieces_write(pl, save, it, tr, 0, er);
			mgt_train_pieces_free(pl);
			moe_rank_free(&r);
		}
	mgt_tensor_table full;
	if (!st)
		st = mgt_tensor_table_build_ep(&full, c, 1, 0, 1, 0, 1, 0);
	if (st)
		return st;
	json_t *m = json_pack("{s:s, s:i, s:I, s:o}", "format", "mgt-ckpt", "format_version", 1, "iteration",
			      (json_int_t)it, "tensors", (json_t *)mgt_ckpt_tensors_json(&full));
	char *meta = json_dumps(m, 0);
	st = mgt_ckpt_commit(save, it, meta);
	free(meta);
	json_decref(m);
	mgt_tensor_table_free(&full);
	return st;
}

/* Every rank of TP x EP reads its rows (the parameters whole, the moments in the two shards
 * [0, end/3) and [end/3, end) of another distributed optimizer) and finds the saved values
 * bit for bit.  *frozen counts the expert-bias rows checked. */
static int moe_load_ok(const char *save, const mgt_model_config *c, int tp, int ep, int *frozen)
{
	mgt_ckpt *ck = NULL;
	int ok = mgt_ckpt_open(save, -1, &ck) == MGT_OK && mgt_ckpt_check(ck) == MGT_OK;
	for (int tr = 0; ok && tr < tp; tr++)
		for (int er = 0; ok && er < ep; er++) {
			moe_rank want, got;
			ok = moe_rank_make(&want, c, tp, tr, ep, er, 1) && moe_rank_make(&got, c, tp, tr, ep, er, 0);
			size_t end = want.tt.buf_numel, cut[3] = {0, end / 3, end};
			for (int i = 0; ok && i < want.tt.n; i++) {
				const mgt_tensor *x = &want.tt.t[i];
				ok = mgt_ckpt_row_read(ck, "", x, 0, x->numel, got.w[0] + x->offset) == MGT_OK;
				for (int k = 1; ok && k < 3; k++)
					for (int s = 0; ok && s < 2; s++) {
						size_t a, b;
						if (mgt_tensor_overlap(x, cut[s], cut[s + 1], &a, &b))
							ok = mgt_ckpt_row_read(ck, moe_prefix[k], x, a - x->offset, b - x->offset,
										 got.w[k] + a) == MGT_OK;
					}
				for (int k = 0; ok && k < 3; k++)
					ok = memcmp(got.w[k] + x->offset, want.w[k] + x->offset, x->numel * sizeof(float)) == 0;
				*frozen += ok && x->frozen;
			}
			moe_rank_free(&want);
			moe_rank_free(&got);
		}
	mgt_ckpt_close(ck);
	return ok;
}

/* The global shape of tensor name in the checkpoint at save, as "[a, b, c]" (or "missing"). */
static const char *moe_shape(const char *save, const char *name, char *buf)
{
	mgt_ckpt *ck = NULL;
	snprintf(buf, 96, "missing");
	if (mgt_ckpt_open(save, -1, &ck))
		return buf;
	for (size_t i = 0; i < mgt_ckpt_count(ck); i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM];
		mgt_ckpt_dtype dt;
		if (!strcmp(mgt_ckpt_tensor(ck, i, &nd, gs, &dt), name)) {
			size_t k = (size_t)snprintf(buf, 96, "[");
			for (int d = 0; d < nd; d++)
				k += (size_t)snprintf(buf + k, 96 - k, "%s%lld", d ? ", " : "", (long long)gs[d]);
			snprintf(buf + k, 96 - k, "]");
		}
	}
	mgt_ckpt_close(ck);
	return buf;
}

/* Names of the checkpoint at save that contain s. */
static int moe_count_names(const char *save, const char *s)
{
	mgt_ckpt *ck = NULL;
	int n = 0;
	if (mgt_ckpt_open(save, -1, &ck))
		return -1;
	for (size_t i = 0; i < mgt_ckpt_count(ck); i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM];
		mgt_ckpt_dtype dt;
		n += strstr(mgt_ckpt_tensor(ck, i, &nd, gs, &dt), s) != NULL;
	}
	mgt_ckpt_close(ck);
	return n;
}

/* Dims and global_offset of dataset name in shard file path ("2x8x8 @2,0,0"). */
static const char *moe_piece(const char *path, const char *name, char *buf)
{
	snprintf(buf, 96, "none");
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t ds = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
	if (ds >= 0) {
		hsize_t d[4] = {0};
		int64_t off[4] = {0};
		hid_t sp = H5Dget_space(ds), a = H5Aopen(ds, "global_offset", H5P_DEFAULT);
		int nd = H5Sget_simple_extent_dims(sp, d, NULL);
		H5Aread(a, H5T_NATIVE_INT64, off);
		if (nd == 3)
			snprintf(buf, 96, "%llux%llux%llu @%lld,%lld,%lld", (unsigned long long)d[0], (unsigned long long)d[1],
				 (unsigned long long)d[2], (long long)off[0], (long long)off[1], (long long)off[2]);
		H5Aclose(a);
		H5Sclose(sp);
		H5Dclose(ds);
	}
	if (f >= 0)
		H5Fclose(f);
	return buf;
}

static void test_experts(void)
{
	mgt_model_config c = moe_config(4), c8 = moe_config(8);
	CHECK(mgt_model_config_finalize(&c, 1) == MGT_OK && mgt_model_config_finalize(&c8, 1) == MGT_OK,
	      "experts: MoE configurations finalize");
	const char *save = path_in("moe");
	CHECK(moe_save(save, 5, &c, 1, 2, 1) == MGT_OK, "experts: saved as TP 1 x EP 2 (two tables, one checkpoint)");
	CHECK(mgt_ckpt_verify(save, 5) == MGT_OK, "experts: the checkpoint is whole (metadata tensors list the "
	      "datasets with their [E, rows, cols] shapes)");
	char b[96];
	const char *fc1 = "decoder.layers.0.mlp.experts.linear_fc1.weight";
	CHECK(!strcmp(moe_shape(save, fc1, b), "[4, 16, 8]"), "experts: %s is one dataset [E, 2F, h]: %s", fc1, b);
	CHECK(!strcmp(moe_shape(save, "decoder.layers.1.mlp.experts.linear_fc2.weight", b), "[4, 8, 8]"),
	      "experts: linear_fc2 is one dataset [E, h, F]: %s", b);
	CHECK(!strcmp(moe_shape(save, "optimizer.state.exp_avg_sq.decoder.layers.1.mlp.experts.linear_fc1.weight", b),
		      "[4, 16, 8]"), "experts: Adam's moments have the same datasets: %s", b);
	CHECK(!strcmp(moe_shape(save, "decoder.layers.1.mlp.router.expert_bias", b), "[4]") &&
	      !strcmp(moe_shape(save, "optimizer.state.exp_avg.decoder.layers.1.mlp.router.expert_bias", b), "[4]"),
	      "experts: the frozen expert bias is saved like a parameter");
	CHECK(moe_count_names(save, "local_experts") == 0 && moe_count_names(save, ".mlp.experts.") == 12,
	      "experts: no per-expert datasets; 2 layers x 2 tensors x (weights, 2 moments) expert datasets");
	char sh[512];
	snprintf(sh, sizeof sh, "%s/iter_0000005/model_tp00_pp000_dp001.h5", save);
	CHECK(!strcmp(moe_piece(sh, fc1, b), "2x8x8 @2,0,0"),
	      "experts: EP rank 1 writes its two experts' gate rows as one piece [2, F, h] at expert 2: %s", b);
	snprintf(sh, sizeof sh, "%s/iter_0000005/model_tp00_pp000_dp001_1.h5", save);
	CHECK(!strcmp(moe_piece(sh, fc1, b), "2x8x8 @2,8,0"), "experts: ... and their up rows in its second file: %s", b);
	int frozen = 0;
	CHECK(moe_load_ok(save, &c, 1, 1, &frozen), "experts: loaded with EP 1: parameters and moments bit for bit");
	CHECK(frozen == 2, "experts: ... the expert bias of both layers among them (%d)", frozen);
	CHECK(moe_load_ok(save, &c, 1, 4, &frozen), "experts: loaded with EP 4, bit for bit");
	CHECK(moe_load_ok(save, &c, 2, 2, &frozen), "experts: loaded with TP 2 x EP 2, bit for bit");
	CHECK(moe_load_ok(save, &c, 2, 4, &frozen), "experts: loaded with TP 2 x EP 4, bit for bit");
	const char *save2 = path_in("moe-tp2");
	CHECK(moe_save(save2, 6, &c, 2, 4, 1) == MGT_OK && moe_load_ok(save2, &c, 1, 2, &frozen),
	      "experts: saved with TP 2 x EP 4, loaded with TP 1 x EP 2, bit for bit");

	/* a wrong number of experts: refused naming the dataset and both shapes */
	mgt_ckpt *ck = NULL;
	moe_rank r;
	mgt_status st = mgt_ckpt_open(save, -1, &ck);
	if (!st && moe_rank_make(&r, &c8, 1, 0, 2, 0, 0)) {
		const mgt_tensor *x = mgt_tensor_table_find(&r.tt, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight");
		st = x ? mgt_ckpt_row_read(ck, "", x, 0, x->numel, r.w[0] + x->offset) : MGT_ERR_USAGE;
		moe_rank_free(&r);
	}
	mgt_ckpt_close(ck);
	CHECK(st == MGT_ERR_FORMAT && has_msg(fc1) && has_msg("[4, 16, 8] in the checkpoint, expected [8, 16, 8]"),
	      "experts: 8 experts against a checkpoint of 4: refused naming the dataset");

	/* a checkpoint without the expert datasets */
	const char *save3 = path_in("moe-none");
	CHECK(moe_save(save3, 5, &c, 1, 2, 0) == MGT_OK, "experts: a checkpoint without the expert rows is written");
	CHECK(mgt_ckpt_verify(save3, 5) == MGT_ERR_FORMAT && has_msg(".mlp.experts.linear_fc") && has_msg("in no shard"),
	      "experts: ... mgt_ckpt_verify names the missing dataset its metadata lists");
	st = mgt_ckpt_open(save3, -1, &ck);
	if (!st && moe_rank_make(&r, &c, 1, 0, 1, 0, 0)) {
		st = MGT_OK;
		for (int i = 0; !st && i < r.tt.n; i++)
			st = mgt_ckpt_row_read(ck, "", &r.tt.t[i], 0, r.tt.t[i].numel, r.w[0] + r.tt.t[i].offset);
		moe_rank_free(&r);
	}
	mgt_ckpt_close(ck);
	CHECK(st == MGT_ERR_FORMAT && has_msg("no tensor decoder.layers.0.mlp.experts.linear_fc"),
	      "experts: ... reading an expert row names the missing dataset");

	/* the shards of EP rank 1 lost: half of every expert dataset is missing */
	const char *save4 = path_in("moe-half");
	copy_tree(save, save4);
	snprintf(sh, sizeof sh, "%s/iter_0000005/model_tp00_pp000_dp001.h5", save4);
	unlink(sh);
	snprintf(sh, sizeof sh, "%s/iter_0000005/model_tp00_pp000_dp001_1.h5", save4);
	unlink(sh);
	CHECK(mgt_ckpt_verify(save4, 5) == MGT_ERR_FORMAT && has_msg("model_tp00_pp000_dp001"),
	      "experts: an EP rank's shards lost: refused naming the shard: %s", mgt_err_msg());
	snprintf(sh, sizeof sh, "%s/iter_0000005", save4);
	strip_checksums(sh);
	CHECK(mgt_ckpt_verify(save4, 5) == MGT_ERR_FORMAT && has_msg(".mlp.experts.linear_fc"),
	      "experts: the same without checksums: refused naming an expert dataset: %s", mgt_err_msg());

	/* the table side: names known by dataset, not by per-expert name */
	mgt_tensor_table full;
	if (mgt_tensor_table_build_ep(&full, &c, 1, 0, 1, 0, 1, 0) == MGT_OK) {
		CHECK(mgt_ckpt_row_known(&full, fc1) &&
		      !mgt_ckpt_row_known(&full, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight") &&
		      mgt_ckpt_row_known(&full, "decoder.layers.0.mlp.router.weight"),
		      "experts: a checkpoint's datasets belong to the model by dataset name");
		json_t *list = mgt_ckpt_tensors_json(&full), *x;
		size_t i, n_fc1 = 0, n_expert = 0;
		json_array_foreach(list, i, x) {
			const char *nm = json_string_value(json_object_get(x, "name"));
			char *shape = json_dumps(json_object_get(x, "shape"), JSON_COMPACT);
			n_expert += strstr(nm, ".mlp.experts.") != NULL;
			n_fc1 += !strcmp(nm, fc1) && !strcmp(shape, "[4,16,8]");
			free(shape);
		}
		CHECK(n_fc1 == 1 && n_expert == 4, "experts: metadata's tensors list each expert dataset once with "
		      "its [E, rows, cols] shape (%zu, %zu)", n_fc1, n_expert);
		json_decref(list);
		mgt_tensor_table_free(&full);
	}
}

/* --write-moe DIR: the MoE checkpoint of tests/cli/t4000-ckpt-h5py.sh (iteration 5, TP 1 x EP 2)
 * and DIR/expected.h5 with its expert datasets whole under "expected/", from a one-rank table. */
static int write_moe(const char *save)
{
	mgt_model_config c = moe_config(4);
	mgt_status st = mgt_model_config_finalize(&c, 1);
	if (!st)
		st = moe_save(save, 5, &c, 1, 2, 1);
	moe_rank r;
	if (!st && !moe_rank_make(&r, &c, 1, 0, 1, 0, 1))
		st = MGT_ERR_USAGE;
	mgt_ckpt_piece p[64];
	size_t n = 0;
	for (int i = 0; !st && i < r.tt.n; i++) {
		const mgt_tensor *x = &r.tt.t[i];
		if (x->num_experts <= 0 || x->expert != 0)
			continue;
		for (int k = 0; k < 3 && n < 64; k++, n++) { /* the dataset whole, from experts 0..E-1 */
			char name[192], *nm = malloc(256);
			int64_t gs[3];
			int nd = mgt_ckpt_row_dataset(x, moe_prefix[k], name, sizeof name, gs);
			snprintf(nm, 256, "expected/%s", name);
			float *w = malloc((size_t)x->num_experts * x->numel * sizeof *w);
			for (int j = 0; j < r.tt.n; j++)
				if (r.tt.t[j].num_experts > 0 && !strcmp(r.tt.t[j].dataset, x->dataset))
					memcpy(w + (size_t)r.tt.t[j].expert * x->numel, r.w[k] + r.tt.t[j].offset,
					       x->numel * sizeof *w);
			p[n] = (mgt_ckpt_piece){nm, nd, {0}, {0}, {0}, MGT_CKPT_F32, w};
			memcpy(p[n].shape, gs, (size_t)nd * sizeof *gs);
		}
	}
	char *exp = st ? NULL : malloc(strlen(save) + 16);
	if (exp) {
		sprintf(exp, "%s/expected.h5", save);
		st = mgt_ckpt_dump_write(exp, p, n, "{\"what\": \"expected\", \"experts\": 4}");
		free(exp);
	}
	for (size_t i = 0; i < n; i++) {
		free((void *)p[i].name);
		free((void *)p[i].data);
	}
	if (r.tt.t)
		moe_rank_free(&r);
	if (st)
		fprintf(stderr, "test_ckpt --write-moe: %s\n", mgt_err_msg());
	return st ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--write") == 0)
		return write_known(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--write-moe") == 0)
		return write_moe(argv[2]);
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-ckpt.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_roundtrip();
	test_incremental();
	test_read_errors();
	test_missing_coverage();
	test_truncated();
	test_corrupt();
	test_checksums();
	test_open_errors();
	test_failed_writes();
	test_replace();
	test_stale_tmp();
	test_whole();
	test_write_errors();
	test_virtual();
	test_dump();
	test_experts();
	return check_finish();
}
