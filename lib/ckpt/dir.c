/* lib/ckpt: the iterations of a save directory, their wholeness, and the writer's cleanup of
 * what killed runs left (see ckpt.h). */
#include "ckpt/ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "iter_" followed by 1 to 18 digits and then exactly suffix: the iteration, else -1. */
static int64_t iter_name(const char *s, const char *suffix)
{
	if (strncmp(s, "iter_", 5))
		return -1;
	s += 5;
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n > 18 || strcmp(s + n, suffix))
		return -1;
	int64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v = 10 * v + (s[i] - '0');
	return v;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

mgt_status mgt_ckpt_iterations(const char *dir, int64_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return mgt_err(MGT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	mgt_status st = MGT_OK;
	size_t cap = 0;
	for (struct dirent *e; !st && (e = readdir(d));) {
		int64_t it = iter_name(e->d_name, "");
		char *path = it < 0 ? NULL : ck_join(dir, e->d_name);
		if (it < 0)
			continue;
		if (!path) {
			st = MGT_ERR_NOMEM;
			break;
		}
		bool is_dir = ck_is_dir(path);
		free(path);
		if (!is_dir)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *p = mgt_realloc(*out, cap * sizeof *p);
			if (!p) {
				st = MGT_ERR_NOMEM;
				break;
			}
			*out = p;
		}
		(*out)[(*n)++] = it;
	}
	closedir(d);
	if (st) {
		free(*out);
		*out = NULL;
		*n = 0;
		return st;
	}
	if (*n > 1) /* none found leaves *out NULL, which qsort must not be given even with 0 */
		qsort(*out, *n, sizeof **out, cmp_i64);
	return MGT_OK;
}

mgt_status mgt_ckpt_verify(const char *load_dir, int64_t iteration)
{
	mgt_ckpt *c = NULL;
	mgt_status st = mgt_ckpt_open(load_dir, iteration, &c);
	if (!st)
		st = mgt_ckpt_check(c);
	if (!st)
		st = mgt_ckpt_check_data(c);
	mgt_ckpt_close(c);
	return st;
}

mgt_status mgt_ckpt_newest_whole(const char *load_dir, int64_t except, int64_t *found)
{
	*found = -1;
	int64_t *its;
	size_t n;
	char keep[1024];
	snprintf(keep, sizeof keep, "%s", mgt_err_msg()); /* the caller's message survives */
	mgt_status st = mgt_ckpt_iterations(load_dir, &its, &n);
	for (size_t i = n; !st && i-- > 0;) {
		if (its[i] == except)
			continue;
		mgt_status v = mgt_ckpt_verify(load_dir, its[i]);
		if (v == MGT_ERR_NOMEM)
			st = v;
		else if (!v) {
			*found = its[i];
			break;
		}
	}
	free(its);
	if (!st)
		mgt_err(MGT_OK, "%s", keep);
	return st;
}

mgt_status mgt_ckpt_suggest(const char *load_dir, int64_t bad, mgt_status st)
{
	int64_t good;
	mgt_status s2 = mgt_ckpt_newest_whole(load_dir, bad, &good);
	char msg[1024];
	snprintf(msg, sizeof msg, "%s", mgt_err_msg());
	if (s2)
		return mgt_err(st, "%s (and listing %s failed)", msg, load_dir);
	if (good < 0)
		return mgt_err(st, "%s; %s iteration of %s is whole: remove %s, or --load another directory "
			       "to start from random", msg, bad < 0 ? "no" : "no other", load_dir,
			       bad < 0 ? "them" : "the damaged ones");
	return mgt_err(st, "%s; the newest whole iteration is %lld: pass --ckpt-step %lld to load it", msg,
		       (long long)good, (long long)good);
}

/* ---- the writer's cleanup ------------------------------------------------------------------- */

static pthread_mutex_t clean_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cleaned; /* the save directory already cleaned by this process */

/* Remove what killed writers left in save_dir: iter_N.tmp directories, iter_N.old twins (put
 * back when iter_N is missing), tracker temporaries of dead writers.  Best effort: a leftover
 * that cannot be removed does not stop a save. */
static void clean_dir(const char *save_dir)
{
	DIR *d = opendir(save_dir);
	if (!d)
		return;
	for (struct dirent *e; (e = readdir(d));) {
		int64_t tmp = iter_name(e->d_name, ".tmp"), old = iter_name(e->d_name, ".old");
		if (tmp < 0 && old < 0)
			continue;
		char *path = ck_join(save_dir, e->d_name), *fin = old >= 0 ? ck_iter_dir(save_dir, old, "") : NULL;
		if (path && ck_is_dir(path)) {
			if (tmp >= 0 || (fin && ck_exists(fin)))
				ck_remove_tree(path);
			else if (fin)
				rename(path, fin);
		}
		free(path);
		free(fin);
	}
	closedir(d);
	char *tracker = ck_join(save_dir, MGT_CKPT_TRACKER);
	if (tracker)
		mgt_tmp_clean_stale(tracker);
	free(tracker);
}

void ck_clean_once(const char *save_dir)
{
	pthread_mutex_lock(&clean_lock);
	if (!cleaned || strcmp(cleaned, save_dir)) {
		clean_dir(save_dir);
		free(cleaned);
		cleaned = mgt_strdup(save_dir);
	}
	pthread_mutex_unlock(&clean_lock);
}
