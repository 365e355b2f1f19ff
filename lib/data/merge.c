/* lib/data: the inputs of a merge and the merge itself (mgt-dataset merge, as Megatron's
 * tools/merge_datasets.py): a directory stands for every dataset in it, sorted by name; the
 * datasets are checked against their checksums and appended in order (IndexedDatasetBuilder
 * .add_index).  See mgt-dataset(1). */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && strcmp(s + n - k, suf) == 0;
}

char *mgt_idx_prefix_of(const char *arg)
{
	char *p = mgt_strdup(arg);
	struct stat sb;
	if (p && (has_suffix(p, ".idx") || has_suffix(p, ".bin")) && stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
		p[strlen(p) - 4] = 0;
	return p;
}

/* Append s (owned; NULL: out of memory, already recorded). */
static mgt_status list_add(mgt_idx_inputs *l, char *s)
{
	if (!s)
		return MGT_ERR_NOMEM;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		char **v = realloc(l->v, cap * sizeof *v);
		if (!v) {
			free(s);
			return mgt_err(MGT_ERR_NOMEM, "out of memory");
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	return MGT_OK;
}

void mgt_idx_inputs_free(mgt_idx_inputs *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	*l = (mgt_idx_inputs){0};
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name, size_t name_len, const char *ext)
{
	size_t nd = strlen(dir), ne = strlen(ext);
	char *p = malloc(nd + 1 + name_len + ne + 1);
	if (p)
		sprintf(p, "%s/%.*s%s", dir, (int)name_len, name, ext);
	return p;
}

static int is_file(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Every prefix in dir with both .bin and .idx, sorted by name (merge_datasets.py). A .bin or
 * .idx without its partner is an error, as Megatron asserts. */
static mgt_status list_dir(const char *dir, mgt_idx_inputs *out)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return mgt_err(MGT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	mgt_idx_inputs found = {0};
	struct dirent *e;
	mgt_status st = MGT_OK;
	while (!st && (e = readdir(dp))) {
		const char *name = e->d_name;
		int idx = has_suffix(name, ".idx"), bin = has_suffix(name, ".bin");
		char *self = join(dir, name, strlen(name), "");
		if ((idx || bin) && self && is_file(self)) {
			size_t stem = strlen(name) - 4;
			char *pair = join(dir, name, stem, idx ? ".bin" : ".idx");
			if (pair && !is_file(pair))
				st = mgt_err(MGT_ERR_FORMAT, "%s: no matching %s (expected both .bin and .idx)",
					self, idx ? ".bin" : ".idx");
			else if (idx)
				st = list_add(&found, join(dir, name, stem, ""));
			free(pair);
		}
		free(self);
	}
	closedir(dp);
	if (!st && found.n)
		qsort(found.v, found.n, sizeof *found.v, cmp_str);
	for (size_t i = 0; !st && i < found.n; i++) {
		st = list_add(out, found.v[i]);
		found.v[i] = NULL;
	}
	mgt_idx_inputs_free(&found);
	return st;
}

mgt_status mgt_idx_inputs_add(mgt_idx_inputs *l, const char *arg, bool *empty_dir)
{
	struct stat sb;
	char idx[4096];
	*empty_dir = false;
	snprintf(idx, sizeof idx, "%s.idx", arg);
	/* PREFIX.idx wins over a directory named PREFIX (where mgt-train and Megatron keep the
	 * index cache: PREFIX/cache/GPTDataset_indices). */
	if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode) && access(idx, F_OK) != 0) {
		size_t before = l->n;
		mgt_status st = list_dir(arg, l);
		*empty_dir = !st && l->n == before;
		return st;
	}
	return list_add(l, mgt_idx_prefix_of(arg));
}

mgt_status mgt_idx_merge(const char *out, int overwrite, const mgt_idx_inputs *in, uint64_t *documents,
			 uint64_t *tokens)
{
	mgt_idx *d = NULL;
	mgt_idx_writer *w = NULL;
	mgt_status st = mgt_idx_open(&d, in->v[0]);
	if (!st)
		st = mgt_idx_writer_open(&w, out, (mgt_dtype)mgt_idx_dtype(d), overwrite);
	for (size_t i = 0; !st && i < in->n; i++) {
		if (i > 0 && (st = mgt_idx_open(&d, in->v[i])))
			break;
		st = mgt_idx_verify_bin(d); /* a damaged input is not merged into a new, checksummed one */
		if (!st)
			st = mgt_idx_writer_add_dataset(w, d);
		mgt_idx_close(d);
		d = NULL;
	}
	mgt_idx_close(d);
	if (st) {
		mgt_idx_writer_abort(w);
		return st;
	}
	*documents = mgt_idx_writer_num_documents(w);
	*tokens = mgt_idx_writer_num_tokens(w);
	return mgt_idx_writer_finish(w);
}
