/* Unit tests for lib/tb: CRC32C known values (RFC 3720 section B.4 and the "123456789" check
 * value), the TFRecord mask, the framing of the records written (lengths and masked CRCs read
 * back), the queue, and the errors: a directory that cannot be made, a write past the file size
 * limit.  Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on failure. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tb/tb.h"

static void test_crc(void)
{
	unsigned char b[32];
	CHECK(mgt_tb_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(\"123456789\") = 0xE3069283");
	memset(b, 0, sizeof b);
	CHECK(mgt_tb_crc32c(0, b, 32) == 0x8A9136AAu, "crc32c(32 zero bytes) = 0x8A9136AA (RFC 3720)");
	memset(b, 0xff, sizeof b);
	CHECK(mgt_tb_crc32c(0, b, 32) == 0x62A8AB43u, "crc32c(32 0xFF bytes) = 0x62A8AB43 (RFC 3720)");
	for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
	CHECK(mgt_tb_crc32c(0, b, 32) == 0x46DD794Eu, "crc32c(0..31) = 0x46DD794E (RFC 3720)");
	CHECK(mgt_tb_crc32c(mgt_tb_crc32c(0, b, 5), b + 5, 27) == 0x46DD794Eu, "continued in two parts");
	CHECK(mgt_tb_mask(0) == 0xa282ead8u && mgt_tb_mask(0x8000u) == 0xa282ead9u, "mask: rotate right 15, add 0xa282ead8");
}

static size_t file_size(const char *p)
{
	struct stat sb;
	return stat(p, &sb) ? 0 : (size_t)sb.st_size;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
	return v;
}

/* Records of the file whose framing checks out; -1 at the first bad length or CRC. */
static int count_records(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char head[12], data[4096], tail[4];
	int n = 0;
	while (f && fread(head, 1, 12, f) == 12) {
		uint64_t len = le(head, 8);
		if (len > sizeof data || le(head + 8, 4) != mgt_tb_mask(mgt_tb_crc32c(0, head, 8)) ||
		    fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4 ||
		    le(tail, 4) != mgt_tb_mask(mgt_tb_crc32c(0, data, len))) {
			n = -1;
			break;
		}
		n++;
	}
	if (f) fclose(f);
	return n;
}

static void test_write(void)
{
	mgt_tb *w;
	mgt_status st = mgt_tb_open(&w, path_in("runs/a/b"), "test tb");
	CHECK(!st, "open creates the directories");
	if (st) return;
	const char *p = mgt_tb_path(w);
	if (!p) p = "";
	CHECK(strstr(p, "/runs/a/b/events.out.tfevents.") && strstr(p, ".test_tb"), "file name '%s'", p);
	mgt_tb_set_queue(w, 3);
	st = mgt_tb_scalar(w, "lm loss", 2.5, 1);
	CHECK(!st && file_size(p) == 0, "records are queued");
	st = mgt_tb_text(w, "note", "hello", 1);
	CHECK(!st && count_records(p) == 3, "written when the queue is full: 3 records, framing and CRCs good");
	st = mgt_tb_scalar(w, "lm loss", 2.25, 2);
	if (!st) st = mgt_tb_flush(w);
	CHECK(!st && count_records(p) == 4, "flush writes the rest");
	st = mgt_tb_scalar(w, "lm loss", 2.0, 3);
	char keep[512];
	snprintf(keep, sizeof keep, "%s", p);
	st = st ? st : mgt_tb_close(w);
	CHECK(!st && count_records(keep) == 5, "close writes the rest");
	mgt_tb *w2;
	st = mgt_tb_open(&w2, path_in("runs/a/b"), "test tb");
	CHECK(!st && strcmp(mgt_tb_path(w2), keep), "a second writer gets another file");
	if (!st) mgt_tb_close(w2);
}

static void test_errors(void)
{
	FILE *f = fopen(path_in("plain"), "w");
	if (f) fclose(f);
	mgt_tb *w;
	mgt_status st = mgt_tb_open(&w, path_in("plain/tb"), "t");
	CHECK(st == MGT_ERR_IO && strstr(mgt_err_msg(), "plain/tb: cannot create directory: ") &&
		    strstr(mgt_err_msg(), "/plain: Not a directory"),
	      "a directory under a file: error naming it (%s)", mgt_err_msg());
	st = mgt_tb_open(&w, path_in("plain"), "t");
	CHECK(st == MGT_ERR_IO && strstr(mgt_err_msg(), "plain: cannot create directory: Not a directory"),
	      "a file as the directory: error naming it (%s)", mgt_err_msg());
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit lim = { 2000, 2000 };
		setrlimit(RLIMIT_FSIZE, &lim);
		st = mgt_tb_open(&w, path_in("full"), "t");
		mgt_tb_set_queue(w, 1);
		for (int i = 0; !st && i < 100; i++) st = mgt_tb_scalar(w, "x", i, i);
		int first = st == MGT_ERR_IO && strstr(mgt_err_msg(), "full/events.out.tfevents.") &&
			    strstr(mgt_err_msg(), ": write failed: File too large");
		int again = mgt_tb_scalar(w, "x", 0, 0) == MGT_ERR_IO && mgt_tb_close(w) == MGT_ERR_IO;
		_exit(first && again ? 0 : 1);
	}
	int ws = 0;
	waitpid(p, &ws, 0);
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "past the file size limit: an error naming the file, "
	      "and again at every later call and at close (status %d)", ws);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-tb.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_crc();
	test_write();
	test_errors();
	return check_finish();
}
