/* Unit tests for lib/util's temporaries and signals: the registry of temporaries removed on an
 * error exit or a signal, stale "PATH.tmp.PID" files of dead writers, mgt_afile's cleanup and
 * lock, writes past a file size limit, signal names and exit statuses.
 * Prints "ok"/"not ok" per check and "N passed, M failed"; exits 1 on failure. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int exists(const char *path)
{
	struct stat sb;
	return lstat(path, &sb) == 0;
}

static void touch(const char *path)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs("x", f);
		fclose(f);
	}
}

/* A pid that is not alive: a child that has exited and been reaped. */
static long dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (long)p;
}

static void test_registry(void)
{
	char *f = path_in("reg.tmp.1"), *d = path_in("regdir.tmp");
	touch(f);
	mkdir(d, 0755);
	touch(path_in("regdir.tmp/a.h5"));
	touch(path_in("regdir.tmp/b.h5"));
	char *kept = path_in("kept.tmp.1");
	touch(kept);
	mgt_tmp_add_file(f);
	mgt_tmp_add_dir(d);
	mgt_tmp_add_file(kept);
	mgt_tmp_forget(kept);
	mgt_tmp_forget(path_in("never-registered"));
	mgt_tmp_remove_all();
	CHECK(!exists(f) && !exists(d), "registered file and directory of files removed");
	CHECK(exists(kept), "a forgotten temporary is left alone");
	touch(f);
	mgt_tmp_remove_all();
	CHECK(exists(f), "entries are forgotten once removed");
	/* more temporaries than the table holds: registering never fails visibly */
	for (int i = 0; i < 300; i++) {
		char name[64];
		snprintf(name, sizeof name, "many.tmp.%d", i);
		mgt_tmp_add_file(path_in(name));
	}
	mgt_tmp_remove_all();
	CHECK(1, "a full table is not an error");
}

static void test_stale(void)
{
	char *out = path_in("data.bin");
	char name[600];
	long dead = dead_pid(), me = (long)getpid(), parent = (long)getppid();
	snprintf(name, sizeof name, "%s.tmp.%ld", out, dead);
	touch(name);
	char dead_path[600], mine[600], live[600], odd[600], locked[600];
	snprintf(dead_path, sizeof dead_path, "%s", name);
	snprintf(mine, sizeof mine, "%s.tmp.%ld", out, me);
	snprintf(live, sizeof live, "%s.tmp.%ld", out, parent);
	snprintf(odd, sizeof odd, "%s.tmp.12ab", out);
	touch(mine);
	touch(live);
	touch(odd);
	/* a writer on another host: its pid means nothing here, but it holds the lock */
	long dead2 = dead_pid();
	snprintf(locked, sizeof locked, "%s.tmp.%ld", out, dead2);
	int lfd = open(locked, O_WRONLY | O_CREAT, 0644);
	CHECK(lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0, "lock a temporary");
	CHECK(mgt_tmp_clean_stale(out) == 1, "one stale temporary removed");
	CHECK(!exists(dead_path), "the dead writer's temporary is gone");
	CHECK(exists(mine) && exists(live) && exists(odd) && exists(locked),
	      "ours, a live process's, a locked one and other names are kept");
	close(lfd);
	CHECK(mgt_tmp_clean_stale(out) == 1 && !exists(locked), "unlocked, the dead writer's goes");
	CHECK(mgt_tmp_clean_stale(path_in("nodir/x.bin")) == 0, "a missing directory is not an error");
	unlink(mine);
	unlink(live);
	unlink(odd);
}

static void test_afile(void)
{
	char *out = path_in("af.idx");
	char stale[600];
	snprintf(stale, sizeof stale, "%s.tmp.%ld", out, dead_pid());
	touch(stale);
	mgt_afile af;
	CHECK(mgt_afile_open(&af, out, 0) == MGT_OK, "open");
	CHECK(!exists(stale), "open removed a dead writer's temporary of the same output");
	int fd = open(af.tmp, O_RDONLY);
	CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK,
	      "the temporary is locked while open");
	if (fd >= 0)
		close(fd);
	char tmp[600];
	snprintf(tmp, sizeof tmp, "%s", af.tmp);
	mgt_tmp_remove_all(); /* an error exit: the open temporary goes */
	CHECK(!exists(tmp), "an open afile's temporary is registered");
	mgt_afile_abort(&af);
	CHECK(mgt_afile_open(&af, out, 0) == MGT_OK && mgt_afile_write(&af, "abc", 3) == MGT_OK &&
	      mgt_afile_commit(&af) == MGT_OK && exists(out), "write and commit");
	touch(tmp);
	mgt_tmp_remove_all();
	CHECK(exists(tmp), "a committed afile is no longer registered");
	unlink(tmp);
}

/* mgt_dir_writable: a writable directory passes and keeps nothing of the probe; missing
 * directories are made for the probe and removed again; a path under a regular file fails. */
static void test_dir_writable(void)
{
	char keep[600], made[600], sub[700];
	snprintf(keep, sizeof keep, "%s", path_in("w"));
	snprintf(made, sizeof made, "%s", path_in("n1"));
	snprintf(sub, sizeof sub, "%s/n2/n3/", made);
	CHECK(mkdir(keep, 0777) == 0 && mgt_dir_writable(keep, "--save") == MGT_OK, "an existing directory is writable");
	DIR *d = opendir(keep);
	int left = 0;
	for (struct dirent *e; d && (e = readdir(d));) left += e->d_name[0] != '.' || strstr(e->d_name, "probe") != NULL;
	if (d) closedir(d);
	CHECK(d && left == 0, "... and the probe file is gone (%d entries left)", left);
	CHECK(mgt_dir_writable(sub, "--save") == MGT_OK && !exists(made), "missing directories made for the probe are removed again");
	char *file = path_in("plain");
	touch(file);
	char under[700];
	snprintf(under, sizeof under, "%s/ck", file);
	CHECK(mgt_dir_writable(under, "--save") == MGT_ERR_IO && strstr(mgt_err_msg(), "--save: ") &&
	      strstr(mgt_err_msg(), "cannot create directory"), "a directory under a regular file: an io error naming the flag (%s)",
	      mgt_err_msg());
	rmdir(keep);
	unlink(file);
}

/* mgt_free_bytes: a missing path asks its nearest existing ancestor, equal to statvfs's answer
 * there (give or take what other writers do meanwhile: within 64 MiB). */
static void test_free_bytes(void)
{
	char deep[700];
	snprintf(deep, sizeof deep, "%s/no/such/dir", path_in("x"));
	uint64_t a = 0, b = 0;
	struct statvfs v;
	CHECK(mgt_free_bytes(deep, &a) == MGT_OK && statvfs(dir, &v) == 0, "free bytes of a missing path: %s", mgt_err_msg());
	b = (uint64_t)v.f_bavail * v.f_frsize;
	CHECK(a > 0 && (a > b ? a - b : b - a) < ((uint64_t)64 << 20), "... its ancestor's statvfs (%llu, %llu)",
	      (unsigned long long)a, (unsigned long long)b);
	CHECK(mgt_free_bytes("relative/missing", &a) == MGT_OK && a > 0, "a relative missing path: the working directory's");
}

/* In a child under a 4 KiB file size limit with SIGXFSZ as mgt_signals_install leaves it. */
static void test_file_size_limit(void)
{
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		mgt_signals_install();
		struct rlimit lim = {4096, 4096};
		setrlimit(RLIMIT_FSIZE, &lim);
		mgt_afile af;
		char buf[1000] = {0};
		mgt_status st = mgt_afile_open(&af, path_in("big.bin"), 1);
		for (int i = 0; !st && i < 10; i++)
			st = mgt_afile_write(&af, buf, sizeof buf);
		if (!st)
			st = mgt_afile_commit(&af);
		else
			mgt_afile_abort(&af);
		_exit(st == MGT_ERR_IO && strstr(mgt_err_msg(), "big.bin: write failed: File too large") ? 0 : 1);
	}
	int ws = 0;
	waitpid(p, &ws, 0);
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "past the file size limit: an error naming the file "
	      "(status %d)", ws);
	CHECK(!exists(path_in("big.bin")), "and no output");
}

/* A child that installs the handlers, registers a temporary and waits for sig. */
static int killed_with(int sig, int graceful, int twice, int *tmp_left)
{
	char *t = path_in("sig.tmp");
	touch(t);
	fflush(stdout);
	int pfd[2];
	if (pipe(pfd) != 0)
		return -1;
	pid_t p = fork();
	if (p == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2); /* the graceful handler's lines */
		if (graceful) {
			mgt_graceful_opts g = {.prog = "test", .saves = true};
			mgt_signals_install_graceful(&g);
		} else {
			mgt_signals_install();
		}
		mgt_tmp_add_file(t);
		ssize_t w = write(pfd[1], "r", 1);
		(void)w;
		for (int i = 0; i < 500; i++) {
			if (mgt_interrupted && !twice)
				_exit(mgt_interrupted == sig ? 42 : 43);
			usleep(10000);
		}
		_exit(44);
	}
	char c;
	ssize_t r = read(pfd[0], &c, 1);
	(void)r;
	close(pfd[0]);
	close(pfd[1]);
	kill(p, sig);
	if (twice) {
		usleep(100000);
		kill(p, sig);
	}
	int ws = 0;
	waitpid(p, &ws, 0);
	*tmp_left = exists(t);
	unlink(t);
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1000 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

static void test_signals(void)
{
	CHECK(mgt_signal_number("SIGUSR1") == SIGUSR1 && mgt_signal_number("USR2") == SIGUSR2 &&
	      mgt_signal_number("SIGTERM") == SIGTERM && mgt_signal_number("SIGHUP") == SIGHUP &&
	      mgt_signal_number("SIGINT") == SIGINT, "signal names");
	CHECK(mgt_signal_number("SIGKILL") < 0 && mgt_signal_number("") < 0 && mgt_signal_number(NULL) < 0,
	      "other names refused");
	CHECK(!strcmp(mgt_signal_name(SIGHUP), "SIGHUP"), "names of numbers");
	int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
	for (int i = 0; i < 5; i++) {
		int left = 1, code = killed_with(sigs[i], 0, 0, &left);
		CHECK(code == 128 + sigs[i] && !left, "%s: exit %d, temporaries removed (exit %d)",
		      mgt_signal_name(sigs[i]), 128 + sigs[i], code);
		code = killed_with(sigs[i], 1, 0, &left);
		CHECK(code == 42 && left, "graceful %s: only the flag (child status %d)", mgt_signal_name(sigs[i]), code);
	}
	int left = 1, code = killed_with(SIGINT, 1, 1, &left);
	CHECK(code == 130 && !left, "graceful, a second SIGINT: exit 130, temporaries removed (%d)", code);
	code = killed_with(SIGTERM, 1, 1, &left);
	CHECK(code == 130 && !left, "graceful, a second SIGTERM: exit 130 too (%d)", code);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-util.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_registry();
	test_stale();
	test_afile();
	test_dir_writable();
	test_free_bytes();
	test_file_size_limit();
	test_signals();
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;
	return check_finish();
}
