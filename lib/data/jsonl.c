/* lib/data: JSONL line reader over plain or zstd-compressed input, and --input expansion.
 *
 * Input is read with read(2) in 1 MiB chunks. Plain input goes straight into the line buffer;
 * zstd input (detected by the frame magic 28 B5 2F FD, or a skippable frame's) goes through
 * ZSTD_decompressStream, which also handles concatenated and skippable frames. The line buffer
 * is compacted before it is refilled, so it grows only when one line does not fit: memory is
 * bounded by the longest line.
 */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define CHUNK ((size_t)1 << 20)

struct mgt_jsonl {
	char *path;
	int fd, own_fd;
	ZSTD_DCtx *dctx;          /* NULL for plain input */
	size_t zret;              /* last ZSTD_decompressStream result: 0 = at a frame boundary */
	unsigned char *in;        /* raw input chunk (zstd; for plain input only the sniffed head) */
	size_t in_pos, in_len;
	int in_eof;               /* read(2) returned 0 */
	char *buf;                /* text: [beg, end) not yet returned; scan = bytes known '\n'-free */
	size_t beg, end, scan, cap;
	int out_eof;              /* no more text will come */
	uint64_t lineno, bytes_read, bytes_out;
	int64_t file_size;
};

/* read(2) retrying on EINTR; records MGT_ERR_IO naming the file. */
static mgt_status raw_read(mgt_jsonl *r, void *p, size_t n, size_t *got)
{
	ssize_t k;
	do
		k = read(r->fd, p, n);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return mgt_err(MGT_ERR_IO, "%s: read failed: %s", r->path, strerror(errno));
	*got = (size_t)k;
	r->bytes_read += (uint64_t)k;
	if (k == 0)
		r->in_eof = 1;
	return MGT_OK;
}

/* Read the head of the input (at least 4 bytes unless the input is shorter) and pick the codec:
 * zstd when it starts with a zstd frame or a skippable frame (magic 0x184D2A5?). */
static mgt_status sniff(mgt_jsonl *r)
{
	static const unsigned char magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
	while (r->in_len < 4 && !r->in_eof) {
		size_t got;
		mgt_status st = raw_read(r, r->in + r->in_len, CHUNK - r->in_len, &got);
		if (st)
			return st;
		r->in_len += got;
	}
	const unsigned char *h = r->in;
	int skippable = r->in_len >= 4 && (h[0] & 0xF0) == 0x50 && h[1] == 0x2A && h[2] == 0x4D &&
		h[3] == 0x18;
	if (skippable || (r->in_len >= 4 && memcmp(h, magic, 4) == 0)) {
		r->dctx = ZSTD_createDCtx();
		if (!r->dctx)
			return mgt_err(MGT_ERR_NOMEM, "%s: cannot create a zstd context", r->path);
		r->zret = 1;
	}
	return MGT_OK;
}

mgt_status mgt_jsonl_open(mgt_jsonl **out, const char *path)
{
	*out = NULL;
	mgt_jsonl *r = calloc(1, sizeof *r);
	if (!r)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	r->file_size = -1;
	r->path = mgt_strdup(path);
	r->in = malloc(CHUNK);
	r->buf = malloc(CHUNK);
	r->cap = CHUNK;
	if (!r->path || !r->in || !r->buf) {
		mgt_jsonl_close(r);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	if (strcmp(path, "-") == 0) {
		r->fd = 0;
	} else {
		r->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (r->fd < 0) {
			mgt_status e = mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
			mgt_jsonl_close(r);
			return e;
		}
		r->own_fd = 1;
	}
	struct stat sb;
	if (fstat(r->fd, &sb) == 0 && S_ISREG(sb.st_mode))
		r->file_size = (int64_t)sb.st_size;
	mgt_status st = sniff(r);
	if (st) {
		mgt_jsonl_close(r);
		return st;
	}
	*out = r;
	return MGT_OK;
}

/* Plain input: the sniffed head first, then read(2) straight into the text buffer. */
static mgt_status fill_plain(mgt_jsonl *r)
{
	if (r->in_pos < r->in_len) {
		size_t n = r->in_len - r->in_pos;
		if (n > r->cap - r->end)
			n = r->cap - r->end;
		memcpy(r->buf + r->end, r->in + r->in_pos, n);
		r->in_pos += n;
		r->end += n;
		return MGT_OK;
	}
	if (r->in_eof) {
		r->out_eof = 1;
		return MGT_OK;
	}
	size_t got;
	mgt_status st = raw_read(r, r->buf + r->end, r->cap - r->end, &got);
	if (st)
		return st;
	r->end += got;
	if (got == 0)
		r->out_eof = 1;
	return MGT_OK;
}

/* zstd input: decompress until some text is produced or the input ends. */
static mgt_status fill_zstd(mgt_jsonl *r)
{
	ZSTD_outBuffer ob = {r->buf + r->end, r->cap - r->end, 0};
	while (ob.pos == 0) {
		if (r->in_pos == r->in_len && !r->in_eof) {
			size_t got;
			mgt_status st = raw_read(r, r->in, CHUNK, &got);
			if (st)
				return st;
			r->in_pos = 0;
			r->in_len = got;
		}
		int at_end = r->in_pos == r->in_len && r->in_eof;
		if (at_end && r->zret == 0) {
			r->out_eof = 1;
			break;
		}
		ZSTD_inBuffer ib = {r->in, r->in_len, r->in_pos};
		size_t ret = ZSTD_decompressStream(r->dctx, &ob, &ib);
		if (ZSTD_isError(ret))
			return mgt_err(MGT_ERR_INPUT, "%s: corrupt zstd data: %s", r->path,
				ZSTD_getErrorName(ret));
		r->in_pos = ib.pos;
		r->zret = ret;
		if (at_end && ob.pos == 0 && ret != 0)
			return mgt_err(MGT_ERR_INPUT, "%s: truncated zstd frame", r->path);
	}
	r->end += ob.pos;
	return MGT_OK;
}

/* Make room after the unreturned text: move it to the front, grow when one line fills it all. */
static mgt_status make_room(mgt_jsonl *r)
{
	if (r->beg > 0) {
		memmove(r->buf, r->buf + r->beg, r->end - r->beg);
		r->end -= r->beg;
		r->beg = 0;
	}
	if (r->end < r->cap)
		return MGT_OK;
	size_t cap = r->cap * 2;
	char *p = realloc(r->buf, cap);
	if (!p)
		return mgt_err(MGT_ERR_NOMEM, "%s: line %llu: out of memory (line longer than %zu bytes)",
			r->path, (unsigned long long)r->lineno + 1, r->cap);
	r->buf = p;
	r->cap = cap;
	return MGT_OK;
}

static void take_line(mgt_jsonl *r, size_t stop, size_t next, const char **line, size_t *len)
{
	*line = r->buf + r->beg;
	*len = stop - r->beg;
	r->bytes_out += next - r->beg;
	r->beg = next;
	r->scan = 0;
	r->lineno++;
}

mgt_status mgt_jsonl_next(mgt_jsonl *r, const char **line, size_t *len)
{
	*line = NULL;
	*len = 0;
	for (;;) {
		size_t from = r->beg + r->scan;
		char *nl = memchr(r->buf + from, '\n', r->end - from);
		if (nl) {
			size_t stop = (size_t)(nl - r->buf);
			take_line(r, stop, stop + 1, line, len);
			return MGT_OK;
		}
		r->scan = r->end - r->beg;
		if (r->out_eof) {
			if (r->end > r->beg)
				take_line(r, r->end, r->end, line, len);
			return MGT_OK;
		}
		mgt_status st = make_room(r);
		if (!st)
			st = r->dctx ? fill_zstd(r) : fill_plain(r);
		if (st)
			return st;
	}
}

uint64_t mgt_jsonl_lineno(const mgt_jsonl *r) { return r->lineno; }
uint64_t mgt_jsonl_bytes_read(const mgt_jsonl *r) { return r->bytes_read; }
int64_t mgt_jsonl_file_size(const mgt_jsonl *r) { return r->file_size; }
uint64_t mgt_jsonl_bytes_out(const mgt_jsonl *r) { return r->bytes_out; }
const char *mgt_jsonl_path(const mgt_jsonl *r) { return r->path; }

void mgt_jsonl_close(mgt_jsonl *r)
{
	if (!r)
		return;
	if (r->own_fd)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	free(r->in);
	free(r->buf);
	free(r->path);
	free(r);
}

/* ---- --input expansion ------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static mgt_status one_path(const char *path, char ***paths, size_t *n)
{
	char **v = mgt_malloc(sizeof *v);
	if (!v)
		return MGT_ERR_NOMEM;
	if (!(v[0] = mgt_strdup(path))) {
		free(v);
		return MGT_ERR_NOMEM;
	}
	*paths = v;
	*n = 1;
	return MGT_OK;
}

static mgt_status copy_glob(const glob_t *g, char ***paths, size_t *n)
{
	char **v = mgt_malloc(g->gl_pathc * sizeof *v);
	if (!v)
		return MGT_ERR_NOMEM;
	for (size_t i = 0; i < g->gl_pathc; i++)
		if (!(v[i] = mgt_strdup(g->gl_pathv[i]))) {
			while (i > 0)
				free(v[--i]);
			free(v);
			return MGT_ERR_NOMEM;
		}
	qsort(v, g->gl_pathc, sizeof *v, cmp_str);
	*paths = v;
	*n = g->gl_pathc;
	return MGT_OK;
}

mgt_status mgt_input_expand(const char *pattern, char ***paths, size_t *n)
{
	*paths = NULL;
	*n = 0;
	struct stat sb;
	if (strcmp(pattern, "-") == 0 || stat(pattern, &sb) == 0)
		return one_path(pattern, paths, n);
	glob_t g;
	int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
	if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
		if (rc == 0)
			globfree(&g);
		return mgt_err(MGT_ERR_USAGE, "%s: no such file (and no file matches it as a pattern)",
			pattern);
	}
	if (rc != 0)
		return mgt_err(rc == GLOB_NOSPACE ? MGT_ERR_NOMEM : MGT_ERR_IO,
			"%s: cannot expand the pattern", pattern);
	mgt_status st = copy_glob(&g, paths, n);
	globfree(&g);
	return st;
}
