/* lib/ckpt: paths and durable file-system steps (see ckpt_impl.h). */
#include "ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *ck_join(const char *a, const char *b)
{
	size_t n = strlen(a) + (b ? strlen(b) : 0) + 2;
	char *p = mgt_malloc(n);
	if (p)
		snprintf(p, n, b ? "%s/%s" : "%s", a, b ? b : "");
	return p;
}

char *ck_iter_dir(const char *save_dir, int64_t iteration, const char *suffix)
{
	size_t n = strlen(save_dir) + strlen(suffix) + 40;
	char *p = mgt_malloc(n);
	if (p)
		snprintf(p, n, "%s/iter_%07lld%s", save_dir, (long long)iteration, suffix);
	return p;
}

bool ck_exists(const char *path)
{
	struct stat sb;
	return lstat(path, &sb) == 0;
}

bool ck_is_dir(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	if (remove(path) != 0) {
		mgt_err(MGT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
		return 1;
	}
	return 0;
}

mgt_status ck_remove_tree(const char *path)
{
	if (!ck_exists(path))
		return MGT_OK;
	int r = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	if (r < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
	return r ? MGT_ERR_IO : MGT_OK;
}

mgt_status ck_fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot open for fsync: %s", path, strerror(errno));
	int r = fsync(fd), e = errno;
	close(fd);
	if (r != 0 && e != EINVAL)
		return mgt_err(MGT_ERR_IO, "%s: fsync failed: %s", path, strerror(e));
	return MGT_OK;
}

mgt_status ck_write_file(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
	const char *p = data;
	int e = 0;
	while (n && !e) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno != EINTR)
			e = errno;
		else if (w > 0)
			p += w, n -= (size_t)w;
	}
	if (!e && fsync(fd) != 0)
		e = errno;
	if (close(fd) != 0 && !e)
		e = errno;
	if (e)
		return mgt_err(MGT_ERR_IO, "%s: write failed: %s", path, strerror(e));
	return MGT_OK;
}

mgt_status mgt_ckpt_remove_tree(const char *path)
{
	return ck_remove_tree(path);
}
