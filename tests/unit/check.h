/* tests/unit/check.h: the TAP-style check helper the C unit tests share (one test program per
 * lib module; each prints "ok"/"not ok" lines and a "N passed, M failed" summary). */
#ifndef MGT_TEST_CHECK_H
#define MGT_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

static int passed, failed;
/* Scratch directory of the test (set by the test's main); path_in names files in it. */
static char dir[256] __attribute__((unused));

#define CHECK(cond, ...) check_((cond), #cond, __LINE__, __VA_ARGS__)
static void check_(int ok, const char *expr, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void check_(int ok, const char *expr, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - ", ok ? "ok" : "not ok");
	vprintf(fmt, ap);
	va_end(ap);
	if (!ok)
		printf("  (line %d: %s; last error: %s)", line, expr, mgt_err_msg());
	printf("\n");
	ok ? passed++ : failed++;
	const char *ff = getenv("MGT_TEST_FAILFAST"); /* stop at the first failure (mutation tests) */
	if (!ok && ff && *ff && *ff != '0') {
		printf("# MGT_TEST_FAILFAST: stopping at the first failure\n%d passed, %d failed\n", passed, failed);
		exit(1);
	}
}

/* dir/name in one of 8 rotating buffers. */
static __attribute__((unused)) char *path_in(const char *name)
{
	static char buf[8][512];
	static int k;
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

/* Print the summary, remove dir when every check passed (keep it for inspection otherwise) and
 * return the exit status. */
static __attribute__((unused)) int check_finish(void)
{
	printf("%d passed, %d failed\n", passed, failed);
	if (failed && dir[0])
		printf("# test files kept in %s\n", dir);
	else if (dir[0]) {
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", dir);
	}
	return failed ? 1 : 0;
}

#endif
