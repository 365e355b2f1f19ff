/* lib/ckpt: saving a checkpoint (begin, shards, commit) and single-file dumps (see ckpt.h). */
#include "ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A crash between the two renames of a replacement without RENAME_EXCHANGE leaves iter_N.old
 * and no iter_N: put it back.  With both present, .old is a leftover: remove it. */
static mgt_status recover_old(const char *save_dir, int64_t it)
{
	char *fin = ck_iter_dir(save_dir, it, ""), *old = ck_iter_dir(save_dir, it, ".old");
	mgt_status st = fin && old ? MGT_OK : MGT_ERR_NOMEM;
	if (!st && ck_exists(old)) {
		if (ck_exists(fin))
			st = ck_remove_tree(old);
		else if (rename(old, fin) != 0)
			st = mgt_err(MGT_ERR_IO, "%s: cannot rename to %s: %s", old, fin, strerror(errno));
	}
	free(fin);
	free(old);
	return st;
}

mgt_status mgt_ckpt_begin(const char *save_dir, int64_t iteration)
{
	if (iteration < 0)
		return mgt_err(MGT_ERR_USAGE, "checkpoint iteration %lld is negative", (long long)iteration);
	mgt_status st = mgt_mkdirs(save_dir);
	if (!st)
		ck_clean_once(save_dir);
	if (!st)
		st = recover_old(save_dir, iteration);
	char *tmp = st ? NULL : ck_iter_dir(save_dir, iteration, ".tmp");
	if (!st && !tmp)
		st = MGT_ERR_NOMEM;
	if (!st)
		st = ck_remove_tree(tmp);
	if (!st && mkdir(tmp, 0755) != 0)
		st = mgt_err(MGT_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
	if (!st)
		mgt_tmp_add_dir(tmp); /* removed by a signal or an error exit until committed */
	if (!st)
		st = ck_fsync_path(save_dir);
	free(tmp);
	return st;
}

void mgt_ckpt_abort(const char *save_dir, int64_t iteration)
{
	char *tmp = iteration < 0 ? NULL : ck_iter_dir(save_dir, iteration, ".tmp");
	if (tmp) {
		ck_remove_tree(tmp);
		mgt_tmp_forget(tmp);
	}
	free(tmp);
}

/* ---- shards --------------------------------------------------------------------------------- */

static mgt_status check_pieces(const mgt_ckpt_piece *p, size_t n, bool dump)
{
	for (size_t i = 0; i < n; i++) {
		mgt_status st = ck_piece_check(&p[i], dump);
		if (st)
			return st;
	}
	return MGT_OK;
}

/* Create path (must not exist) and write the pieces; the file is closed and fsynced, or
 * removed on error. */
static mgt_status write_h5(const char *path, const mgt_ckpt_piece *p, size_t n, bool attrs,
			   const char *json_attr, const char *msg_path)
{
	hid_t fapl = ck_h5_fapl();
	hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	if (f < 0)
		mgt_err(MGT_ERR_IO, "%s: cannot create: %s", msg_path, ck_h5_why());
	H5Pclose(fapl);
	if (f < 0)
		return MGT_ERR_IO;
	mgt_status st = json_attr ? ck_h5_put_string_attr(f, msg_path, "metadata", json_attr) : 0;
	for (size_t i = 0; !st && i < n; i++)
		st = ck_h5_put(f, msg_path, p[i].name, &p[i], attrs);
	return ck_h5_finish(f, path, msg_path, st);
}

struct mgt_ckpt_shard {
	hid_t f;
	char *path;     /* SAVE/iter_NNNNNNN.tmp/<shard_name> */
	mgt_status st;  /* the first failed put's error */
};

mgt_status mgt_ckpt_shard_open(const char *save_dir, int64_t iteration, const char *shard_name,
			       mgt_ckpt_shard **out)
{
	*out = NULL;
	ck_h5_quiet();
	if (!shard_name || !ck_is_shard_name(shard_name))
		return mgt_err(MGT_ERR_USAGE, "'%s': bad shard file name (expected NAME.h5, not %s)",
			       shard_name ? shard_name : "(null)", MGT_CKPT_INDEX_FILE);
	if (iteration < 0)
		return mgt_err(MGT_ERR_USAGE, "checkpoint iteration %lld is negative", (long long)iteration);
	char *tmp = ck_iter_dir(save_dir, iteration, ".tmp");
	char *path = tmp ? ck_join(tmp, shard_name) : NULL;
	mgt_ckpt_shard *sh = path ? calloc(1, sizeof *sh) : NULL;
	mgt_status st = sh ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st)
		st = mgt_mkdirs(tmp);
	if (!st && ck_exists(path))
		st = mgt_err(MGT_ERR_EXISTS, "%s: shard already written", path);
	if (!st) {
		hid_t fapl = ck_h5_fapl();
		sh->f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
		H5Pclose(fapl);
		if (sh->f < 0)
			st = mgt_err(MGT_ERR_IO, "%s: cannot create: %s", path, ck_h5_why());
	}
	free(tmp);
	if (st) {
		free(path);
		free(sh);
		return st;
	}
	sh->path = path;
	*out = sh;
	return MGT_OK;
}

mgt_status mgt_ckpt_shard_put(mgt_ckpt_shard *sh, const mgt_ckpt_piece *p)
{
	if (sh->st)
		return sh->st;
	mgt_status st = ck_piece_check(p, false);
	if (!st)
		st = ck_h5_put(sh->f, sh->path, p->name, p, true);
	return sh->st = st;
}

mgt_status mgt_ckpt_shard_close(mgt_ckpt_shard *sh)
{
	mgt_status st = ck_h5_finish(sh->f, sh->path, sh->path, sh->st);
	free(sh->path);
	free(sh);
	return st;
}

void mgt_ckpt_shard_discard(mgt_ckpt_shard *sh)
{
	if (!sh)
		return;
	/* a failed status makes ck_h5_finish close the file without flushing and unlink it
	 * (it records no message) */
	ck_h5_finish(sh->f, sh->path, sh->path, MGT_ERR_IO);
	free(sh->path);
	free(sh);
}

mgt_status mgt_ckpt_write_shard(const char *save_dir, int64_t iteration, const char *shard_name,
				const mgt_ckpt_piece *p, size_t n)
{
	mgt_status st = check_pieces(p, n, false); /* bad arguments: no file made */
	mgt_ckpt_shard *sh = NULL;
	if (!st)
		st = mgt_ckpt_shard_open(save_dir, iteration, shard_name, &sh);
	for (size_t i = 0; !st && i < n; i++)
		st = mgt_ckpt_shard_put(sh, &p[i]);
	if (sh) {
		mgt_status cs = mgt_ckpt_shard_close(sh);
		st = st ? st : cs;
	}
	return st;
}

/* ---- side files --------------------------------------------------------------------------- */

mgt_status mgt_ckpt_add_file(const char *save_dir, int64_t iteration, const char *rel, const char *src)
{
	if (iteration < 0 || !rel || !rel[0] || rel[0] == '/' || strstr(rel, "..") || ck_is_shard_name(rel) ||
	    !strcmp(rel, "metadata.json") || !strcmp(rel, MGT_CKPT_SUMS_FILE))
		return mgt_err(MGT_ERR_USAGE, "checkpoint side file '%s': bad name (a relative path, not a shard, "
			       "metadata.json or %s)", rel ? rel : "(null)", MGT_CKPT_SUMS_FILE);
	char *tmp = ck_iter_dir(save_dir, iteration, ".tmp"), *dst = tmp ? ck_join(tmp, rel) : NULL, *data = NULL;
	size_t n = 0;
	mgt_status st = dst ? mgt_file_read(src, &data, &n) : MGT_ERR_NOMEM;
	char *slash = st ? NULL : strrchr(dst, '/');
	if (!st && !ck_is_dir(tmp))
		st = mgt_err(MGT_ERR_IO, "%s: no checkpoint being written (mgt_ckpt_begin not called?)", tmp);
	if (!st && slash) {
		*slash = 0;
		st = mgt_mkdirs(dst);
		*slash = '/';
	}
	if (!st)
		st = ck_write_file(dst, data, n);
	free(data);
	free(dst);
	free(tmp);
	return st;
}

/* ---- commit --------------------------------------------------------------------------------- */

static mgt_status check_json(const char *json)
{
	json_error_t e;
	json_t *j = json ? json_loads(json, 0, &e) : NULL;
	bool obj = j && json_is_object(j);
	json_decref(j);
	if (!obj)
		return mgt_err(MGT_ERR_USAGE, "checkpoint metadata is not a JSON object%s%s",
			       j ? "" : ": ", j ? "" : json ? e.text : "(null)");
	return MGT_OK;
}

/* metadata.json, the index file, checksums.json (the checksums of every piece, of the other
 * files and of both) and the directory itself, all fsynced. */
static mgt_status finish_tmp(const char *tmp, const char *json)
{
	ck_index ix;
	json_t *sums = ck_sums_new();
	mgt_status st = sums ? ck_scan(tmp, &ix, NULL, sums) : MGT_ERR_NOMEM;
	if (st) {
		json_decref(sums);
		return st;
	}
	char *meta = ck_join(tmp, "metadata.json");
	st = meta ? ck_check_coverage(&ix) : MGT_ERR_NOMEM;
	if (!st)
		st = ck_write_file(meta, json, strlen(json));
	if (!st)
		st = ck_write_index(&ix, json);
	if (!st)
		st = ck_sums_add_files(sums, tmp);
	if (!st)
		st = ck_sums_write(sums, tmp);
	if (!st)
		st = ck_fsync_path(tmp);
	free(meta);
	json_decref(sums);
	ck_index_free(&ix);
	return st;
}

/* Without RENAME_EXCHANGE: fin -> old, tmp -> fin (old put back if that fails). */
static mgt_status install_by_rename(const char *tmp, const char *fin, const char *old)
{
	mgt_status st = ck_remove_tree(old);
	if (st)
		return st;
	if (rename(fin, old) != 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot rename to %s: %s", fin, old, strerror(errno));
	if (rename(tmp, fin) == 0)
		return MGT_OK;
	st = mgt_err(MGT_ERR_IO, "%s: cannot rename to %s: %s", tmp, fin, strerror(errno));
	rename(old, fin);
	return st;
}

/* Move tmp to fin.  An existing fin is swapped out atomically (RENAME_EXCHANGE) into tmp, or,
 * where the file system cannot, renamed to old first; *aside names what to delete after. */
static mgt_status install(const char *tmp, const char *fin, const char *old, const char **aside)
{
	*aside = NULL;
	if (!ck_exists(fin)) {
		if (rename(tmp, fin) == 0)
			return MGT_OK;
	} else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) == 0) {
		*aside = tmp;
		return MGT_OK;
	} else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
		*aside = old;
		return install_by_rename(tmp, fin, old);
	}
	return mgt_err(MGT_ERR_IO, "%s: cannot rename to %s: %s", tmp, fin, strerror(errno));
}

static mgt_status write_tracker(const char *save_dir, int64_t iteration)
{
	char *path = ck_join(save_dir, MGT_CKPT_TRACKER), text[32];
	if (!path)
		return MGT_ERR_NOMEM;
	int len = snprintf(text, sizeof text, "%lld", (long long)iteration);
	mgt_afile af;
	mgt_status st = mgt_afile_open(&af, path, 1);
	if (!st && (st = mgt_afile_write(&af, text, (size_t)len)))
		mgt_afile_abort(&af);
	else if (!st)
		st = mgt_afile_commit(&af);
	if (!st)
		st = ck_fsync_path(save_dir);
	free(path);
	return st;
}

mgt_status mgt_ckpt_commit(const char *save_dir, int64_t iteration, const char *metadata_json)
{
	ck_h5_quiet();
	if (iteration < 0)
		return mgt_err(MGT_ERR_USAGE, "checkpoint iteration %lld is negative", (long long)iteration);
	mgt_status st = check_json(metadata_json);
	if (st)
		return st;
	char *tmp = ck_iter_dir(save_dir, iteration, ".tmp"), *fin = ck_iter_dir(save_dir, iteration, "");
	char *old = ck_iter_dir(save_dir, iteration, ".old");
	const char *aside = NULL;
	if (!tmp || !fin || !old)
		st = MGT_ERR_NOMEM;
	else if (!ck_is_dir(tmp))
		st = mgt_err(MGT_ERR_IO, "%s: no checkpoint being written (mgt_ckpt_begin not called?)",
			     tmp);
	if (!st)
		st = finish_tmp(tmp, metadata_json);
	if (!st)
		st = install(tmp, fin, old, &aside);
	if (!st && aside != tmp)
		mgt_tmp_forget(tmp); /* in place (after an exchange, tmp holds the old copy) */
	if (!st)
		st = ck_fsync_path(save_dir);
	if (!st)
		st = write_tracker(save_dir, iteration);
	if (!st && aside)
		ck_remove_tree(aside); /* best effort: mgt_ckpt_begin removes leftovers */
	if (!st && aside == tmp)
		mgt_tmp_forget(tmp);
	free(tmp);
	free(fin);
	free(old);
	return st;
}

/* ---- dumps ---------------------------------------------------------------------------------- */

static mgt_status fsync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return ck_fsync_path(".");
	if (slash == path)
		return ck_fsync_path("/");
	char *dir = mgt_strdup(path);
	if (!dir)
		return MGT_ERR_NOMEM;
	dir[slash - path] = 0;
	mgt_status st = ck_fsync_path(dir);
	free(dir);
	return st;
}

mgt_status mgt_ckpt_dump_write(const char *path, const mgt_ckpt_piece *p, size_t n,
			       const char *json_attr)
{
	ck_h5_quiet();
	mgt_status st = check_pieces(p, n, true);
	if (st)
		return st;
	size_t len = strlen(path) + 32;
	char *tmp = mgt_malloc(len);
	if (!tmp)
		return MGT_ERR_NOMEM;
	snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
	mgt_tmp_clean_stale(path); /* HDF5 flocks the files it writes, as mgt_afile does */
	unlink(tmp);
	mgt_tmp_add_file(tmp);
	st = write_h5(tmp, p, n, false, json_attr, path);
	if (!st && rename(tmp, path) != 0) {
		st = mgt_err(MGT_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
		unlink(tmp);
	}
	mgt_tmp_forget(tmp);
	if (!st)
		st = fsync_parent(path);
	free(tmp);
	return st;
}
