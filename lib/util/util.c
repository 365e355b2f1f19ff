/* lib/util: see util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char err_msg[1024];

static mgt_status err_vset(mgt_status code, const char *fmt, va_list ap)
{
	vsnprintf(err_msg, sizeof err_msg, fmt, ap);
	return code;
}

mgt_status mgt_err(mgt_status code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(code, fmt, ap);
	va_end(ap);
	return code;
}

mgt_status mgt_err_ctx(mgt_status code, const char *fmt, ...)
{
	char prefix[512], old[sizeof err_msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, err_msg, sizeof old);
	size_t n = strlen(prefix);
	if (n + 2 < sizeof err_msg) {
		memcpy(err_msg, prefix, n);
		memcpy(err_msg + n, ": ", 2);
		size_t room = sizeof err_msg - n - 3, m = strlen(old);
		memcpy(err_msg + n + 2, old, m < room ? m : room);
		err_msg[n + 2 + (m < room ? m : room)] = 0;
	}
	return code;
}

const char *mgt_err_msg(void) { return err_msg; }

int mgt_exit_code(mgt_status s)
{
	switch (s) {
	case MGT_OK: return 0;
	case MGT_ERR_IO: case MGT_ERR_NOMEM: return 1;
	case MGT_ERR_USAGE: return 2;
	case MGT_ERR_INPUT: return 3;
	case MGT_ERR_VOCAB: return 4;
	case MGT_ERR_EXISTS: return 5;
	case MGT_ERR_FORMAT: return 6;
	case MGT_ERR_INTR: return 130;
	}
	return 1;
}

void *mgt_malloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		mgt_err(MGT_ERR_NOMEM, "out of memory allocating %zu bytes", n);
	return p;
}

void *mgt_realloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		mgt_err(MGT_ERR_NOMEM, "out of memory allocating %zu bytes", n);
	return q;
}

char *mgt_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = mgt_malloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

mgt_status mgt_buf_reserve(mgt_buf *b, size_t extra)
{
	if (b->n + extra <= b->cap)
		return MGT_OK;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->n + extra)
		cap *= 2;
	char *p = mgt_realloc(b->p, cap);
	if (!p)
		return MGT_ERR_NOMEM;
	b->p = p;
	b->cap = cap;
	return MGT_OK;
}

mgt_status mgt_buf_add(mgt_buf *b, const void *data, size_t n)
{
	if (n == 0)
		return MGT_OK;
	mgt_status st = mgt_buf_reserve(b, n);
	if (st)
		return st;
	memcpy(b->p + b->n, data, n);
	b->n += n;
	return MGT_OK;
}

/* ---- temporaries ---------------------------------------------------------------------------
 * A fixed table of the temporaries still being written, so that a fatal signal or an error exit
 * can remove them.  Each entry is a malloc'd copy "f<path>" (a file) or "d<path>" (a directory of
 * plain files), claimed and released with atomic compare-and-swap, so threads may register
 * concurrently and a signal handler may read the table at any time. */
#define MAX_TMPS 256
static char *tmp_table[MAX_TMPS];

static void tmp_add(const char *path, char kind)
{
	size_t n = strlen(path);
	char *e = malloc(n + 2);
	if (!e)
		return; /* not registered: only a signal or error exit would leave it */
	e[0] = kind;
	memcpy(e + 1, path, n + 1);
	for (int i = 0; i < MAX_TMPS; i++) {
		char *none = NULL;
		if (__atomic_compare_exchange_n(&tmp_table[i], &none, e, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return;
	}
	free(e);
}

void mgt_tmp_add_file(const char *path) { tmp_add(path, 'f'); }
void mgt_tmp_add_dir(const char *path) { tmp_add(path, 'd'); }

void mgt_tmp_forget(const char *path)
{
	for (int i = 0; i < MAX_TMPS; i++) {
		char *e = __atomic_load_n(&tmp_table[i], __ATOMIC_SEQ_CST);
		if (e && strcmp(e + 1, path) == 0 &&
		    __atomic_compare_exchange_n(&tmp_table[i], &e, NULL, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			free(e);
			return;
		}
	}
}

/* Remove the plain files of a directory and the directory itself, with system calls only
 * (async-signal-safe: no opendir, which allocates). */
static void remove_flat_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[4096] __attribute__((aligned(8)));
		for (int pass = 0; pass < 64; pass++) {
			long n = syscall(SYS_getdents64, fd, buf, sizeof buf), removed = 0;
			if (n <= 0)
				break;
			for (long off = 0; off < n;) {
				struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d =
					(void *)(buf + off);
				if (strcmp(d->name, ".") && strcmp(d->name, "..") && unlinkat(fd, d->name, 0) == 0)
					removed++;
				off += d->reclen;
			}
			if (!removed) /* nothing removable here: the directory is not flat; give up */
				break;
			lseek(fd, 0, SEEK_SET);
		}
		close(fd);
	}
	rmdir(path);
}

static void tmp_remove_all(bool free_entries)
{
	for (int i = 0; i < MAX_TMPS; i++) {
		char *e = __atomic_exchange_n(&tmp_table[i], NULL, __ATOMIC_SEQ_CST);
		if (!e)
			continue;
		if (e[0] == 'd')
			remove_flat_dir(e + 1);
		else
			unlink(e + 1);
		if (free_entries)
			free(e);
	}
}

void mgt_tmp_remove_all(void) { tmp_remove_all(true); }
void mgt_tmp_remove_all_signal(void) { tmp_remove_all(false); }

/* Whether the temporary dir/name, named after process pid, was left by a writer that is gone:
 * the pid is not alive here (kill(2): ESRCH) and nobody holds the file's lock (a writer on
 * another host of a shared file system holds it; the lock dies with its process). */
static bool stale(int dirfd, const char *name, long pid)
{
	if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return false;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	bool free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0 || (errno != EWOULDBLOCK && errno != EAGAIN);
	close(fd);
	return free_lock;
}

int mgt_tmp_clean_stale(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char dir[4096];
	size_t dn = slash ? (size_t)(slash - path) : 0;
	if (dn + 2 > sizeof dir)
		return 0;
	if (slash) {
		memcpy(dir, path, dn ? dn : 1); /* "/x": the root */
		dir[dn ? dn : 1] = 0;
	} else {
		strcpy(dir, ".");
	}
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	size_t bn = strlen(base);
	int removed = 0;
	for (struct dirent *e; (e = readdir(d));) {
		const char *s = e->d_name;
		if (strncmp(s, base, bn) || strncmp(s + bn, ".tmp.", 5))
			continue;
		s += bn + 5;
		size_t k = strspn(s, "0123456789");
		if (k == 0 || k > 9 || s[k])
			continue;
		if (stale(dirfd(d), e->d_name, atol(s)) && unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}

mgt_status mgt_afile_open(mgt_afile *af, const char *path, int overwrite)
{
	memset(af, 0, sizeof *af);
	struct stat st;
	if (!overwrite && stat(path, &st) == 0)
		return mgt_err(MGT_ERR_EXISTS, "%s: output already exists (remove it or pass --overwrite)", path);
	size_t n = strlen(path) + 32;
	af->path = mgt_strdup(path);
	af->tmp = mgt_malloc(n);
	if (!af->path || !af->tmp) {
		free(af->path);
		free(af->tmp);
		return MGT_ERR_NOMEM;
	}
	mgt_tmp_clean_stale(path);
	snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0)
		flock(fd, LOCK_EX | LOCK_NB); /* tells mgt_tmp_clean_stale elsewhere that we are alive */
	if (fd < 0 || !(af->f = fdopen(fd, "wb"))) {
		mgt_status e = mgt_err(MGT_ERR_IO, "%s: cannot create: %s", af->tmp, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(af->tmp);
		}
		free(af->path);
		free(af->tmp);
		memset(af, 0, sizeof *af);
		return e;
	}
	mgt_tmp_add_file(af->tmp);
	return MGT_OK;
}

mgt_status mgt_afile_write(mgt_afile *af, const void *p, size_t n)
{
	if (af->err)
		return MGT_ERR_IO;
	if (n && fwrite(p, 1, n, af->f) != n) {
		af->err = errno ? errno : EIO;
		return mgt_err(MGT_ERR_IO, "%s: write failed: %s", af->path, strerror(af->err));
	}
	return MGT_OK;
}

mgt_status mgt_afile_commit(mgt_afile *af)
{
	int e = af->err;
	if (!e && fflush(af->f) != 0)
		e = errno;
	if (!e && fsync(fileno(af->f)) != 0)
		e = errno;
	if (fclose(af->f) != 0 && !e)
		e = errno;
	af->f = NULL;
	if (!e && rename(af->tmp, af->path) != 0)
		e = errno;
	if (e) {
		mgt_status st = mgt_err(MGT_ERR_IO, "%s: write failed: %s", af->path, strerror(e));
		mgt_afile_abort(af);
		return st;
	}
	mgt_tmp_forget(af->tmp);
	free(af->tmp);
	free(af->path);
	memset(af, 0, sizeof *af);
	return MGT_OK;
}

void mgt_afile_abort(mgt_afile *af)
{
	if (af->f)
		fclose(af->f);
	if (af->tmp) {
		unlink(af->tmp);
		mgt_tmp_forget(af->tmp);
	}
	free(af->tmp);
	free(af->path);
	memset(af, 0, sizeof *af);
}

double mgt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- signals -------------------------------------------------------------------------------- */

volatile int mgt_interrupted;

static const struct { int sig; const char *name; } sig_names[] = {
	{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGHUP, "SIGHUP"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
};
#define N_SIGS ((int)(sizeof sig_names / sizeof sig_names[0]))

int mgt_signal_number(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < N_SIGS; i++)
		if (!strcmp(name, sig_names[i].name) || !strcmp(name, sig_names[i].name + 3))
			return sig_names[i].sig;
	return -1;
}

const char *mgt_signal_name(int sig)
{
	for (int i = 0; i < N_SIGS; i++)
		if (sig_names[i].sig == sig)
			return sig_names[i].name;
	return "signal";
}

static mgt_graceful_opts graceful;

/* write(2) the strings a[0..] (NULL-terminated) as one line on stderr: async-signal-safe. */
static void say(const char *const *a)
{
	char line[512];
	size_t n = 0;
	for (; *a; a++)
		for (const char *s = *a; *s && n < sizeof line - 1; s++)
			line[n++] = *s;
	line[n++] = '\n';
	ssize_t w = write(2, line, n);
	(void)w;
}

static void on_signal(int sig)
{
	mgt_interrupted = sig;
	mgt_tmp_remove_all_signal();
	_exit(128 + sig);
}

static void on_signal_graceful(int sig)
{
	const char *prog = graceful.prog ? graceful.prog : "mgt", *name = mgt_signal_name(sig);
	if (mgt_interrupted) {
		if (!graceful.quiet)
			say((const char *[]){prog, ": second ", name, ": exiting without saving", NULL});
		mgt_tmp_remove_all_signal();
		_exit(130);
	}
	mgt_interrupted = sig;
	if (graceful.quiet)
		return;
	if (graceful.saves)
		say((const char *[]){prog, ": ", name, ": saving a checkpoint after this iteration, then exiting "
				     "(send a second signal to exit at once without saving)", NULL});
	else
		say((const char *[]){prog, ": ", name, ": exiting after this iteration (no --save: nothing is "
				     "saved; a second signal exits at once)", NULL});
}

static void install(void (*handler)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < N_SIGS; i++)
		sigaddset(&sa.sa_mask, sig_names[i].sig); /* one handler at a time */
	for (int i = 0; i < N_SIGS; i++)
		sigaction(sig_names[i].sig, &sa, NULL);
	/* past `ulimit -f` a write fails with EFBIG, reported as "File too large" naming the file,
	 * instead of the default action (killed, core, no message, temporaries left) */
	signal(SIGXFSZ, SIG_IGN);
}

void mgt_signals_install(void)
{
	install(on_signal);
}

void mgt_signals_install_graceful(const mgt_graceful_opts *o)
{
	if (o)
		graceful = *o;
	install(on_signal_graceful);
}

mgt_status mgt_file_read(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return mgt_err(MGT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	mgt_buf b = {0};
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		if (mgt_buf_add(&b, tmp, n)) {
			fclose(f);
			free(b.p);
			return MGT_ERR_NOMEM;
		}
	int bad = ferror(f);
	fclose(f);
	if (bad || mgt_buf_add(&b, "", 1)) {
		free(b.p);
		return bad ? mgt_err(MGT_ERR_IO, "%s: read failed", path) : MGT_ERR_NOMEM;
	}
	*out = b.p;
	*len = b.n - 1;
	return MGT_OK;
}

const char *mgt_fmt_count(char *buf, uint64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), j = 0;
	for (int i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			buf[j++] = ',';
		buf[j++] = tmp[i];
	}
	buf[j] = 0;
	return buf;
}

void mgt_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
{
	uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
	uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
	uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
	for (int r = 0; r < 10; r++) {
		uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
		k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
	}
	out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

uint32_t mgt_attn_drop_word(uint64_t key, uint64_t plane, uint64_t dsq, uint64_t dsk, uint64_t q, uint64_t k)
{
	uint32_t w[4];
	mgt_philox(key, 0, (plane * dsq + (q & ~(uint64_t)8)) * dsk + (k & ~(uint64_t)8), w);
	return w[((q >> 3) & 1) * 2 + ((k >> 3) & 1)];
}

float mgt_philox_normal(uint64_t key, uint64_t i)
{
	uint32_t w[4];
	mgt_philox(key, 0, i, w);
	double u1 = ((double)w[0] + 1.0) / 4294967296.0; /* (0, 1] */
	double u2 = (double)w[1] / 4294967296.0;
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Round the fp32 significand to keep `drop` fewer low bits, ties to even, by integer addition on
 * the bits (a carry into the exponent is the correct rounding up to the next binade). */
static float round_bits(float x, int drop)
{
	uint32_t u = f2u(x), half = (1u << (drop - 1)) - 1u;
	if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
	u += half + ((u >> drop) & 1u);
	return u2f(u & ~((1u << drop) - 1u));
}

float mgt_round_bf16(float x) { return round_bits(x, 16); }

float mgt_round_fp16(float x)
{
	float a = fabsf(x);
	if (isnan(x) || isinf(x)) return x;
	if (a >= 65520.0f) return copysignf(INFINITY, x);
	/* fp16 subnormals (below 2^-14) have the fixed quantum 2^-24: scale (exactly), round to an
	 * integer under the default ties-to-even mode, scale back. */
	if (a < 0x1p-14f) return copysignf(nearbyintf(a * 0x1p24f) * 0x1p-24f, x);
	return round_bits(x, 13);
}

/* The rounding itself is lib/util's (mgt_round_bf16 / mgt_round_fp16): its result is exactly
 * representable in the 16-bit type, so what is left here is the encoding of that value. */

/* mgt_f32_to_bf16_inline (util.h): NaN keeps sign and leading payload with the quiet bit set (a
 * payload only in the low 16 bits would otherwise truncate to inf); the rounding of others is
 * mgt_round_bf16's (tests/unit: equal on every float32 bit pattern sampled and the specials). */
uint16_t mgt_f32_to_bf16(float x) { return mgt_f32_to_bf16_inline(x); }

float mgt_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mgt_f32_to_f16(float x)
{
	uint32_t u = f2u(x);
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
	if (isnan(x)) /* quiet NaN with the payload's leading 9 bits */
		return (uint16_t)(sign | 0x7e00u | (u >> 13 & 0x01ffu));
	float r = fabsf(mgt_round_fp16(x)); /* exactly a binary16 value, or inf */
	if (isinf(r))
		return (uint16_t)(sign | 0x7c00u);
	if (r < 0x1p-14f) /* subnormal (or zero): an integer multiple of 2^-24 */
		return (uint16_t)(sign | (uint16_t)(r * 0x1p24f));
	uint32_t ru = f2u(r);
	uint32_t e = (ru >> 23) - 127 + 15, m = (ru & 0x7fffffu) >> 13;
	return (uint16_t)(sign | e << 10 | m);
}

float mgt_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f) /* inf, NaN (payload kept in the leading bits) */
		return u2f(sign | 0x7f800000u | m << 13);
	if (e == 0) { /* zero, subnormal: m * 2^-24 exactly */
		float v = (float)m * 0x1p-24f;
		return sign ? -v : v;
	}
	return u2f(sign | (e - 15 + 127) << 23 | m << 13);
}

/* fp8: mantissa bits, exponent bias (util.h) */
static int fp8_mbits(mgt_fp8_format f) { return f == MGT_FP8_E4M3 ? 3 : 2; }
static int fp8_bias(mgt_fp8_format f) { return f == MGT_FP8_E4M3 ? 7 : 15; }
float mgt_fp8_max(mgt_fp8_format f) { return f == MGT_FP8_E4M3 ? 448.0f : 57344.0f; }

/* Clamp, then snap onto the grid (equivalent to CUDA's cuda_fp8.hpp host path, __nv_cvt_float_to_fp8; the
 * largest value is a grid point, so a clamped magnitude never rounds past it): the
 * quantum is 2^(e - mbits) for |x| in [2^e, 2^(e+1)), at least the subnormal quantum
 * 2^(1 - bias - mbits); x / quantum is exact in double and nearbyint rounds ties to even. */
uint8_t mgt_f32_to_fp8(float x, mgt_fp8_format f)
{
	if (isnan(x)) return 0x7f;
	const int mb = fp8_mbits(f), emin = 1 - fp8_bias(f);
	const uint8_t sign = signbit(x) ? 0x80 : 0;
	double a = fabs((double)x);
	if (a > mgt_fp8_max(f)) a = mgt_fp8_max(f); /* +inf too */
	int e = emin;
	if (a >= ldexp(1.0, emin)) {
		frexp(a, &e);
		e -= 1; /* a in [2^e, 2^(e+1)) */
	}
	const double r = ldexp(nearbyint(ldexp(a, mb - e)), e - mb);
	if (r < ldexp(1.0, emin)) /* zero or subnormal: a multiple of the subnormal quantum */
		return (uint8_t)(sign | (uint8_t)ldexp(r, mb - emin));
	frexp(r, &e);
	e -= 1;
	const unsigned m = (unsigned)(ldexp(r, mb - e) - ldexp(1.0, mb));
	return (uint8_t)(sign | (unsigned)(e + fp8_bias(f)) << mb | m);
}

float mgt_fp8_to_f32(uint8_t v, mgt_fp8_format f)
{
	const int mb = fp8_mbits(f), bias = fp8_bias(f), emax = f == MGT_FP8_E4M3 ? 15 : 31;
	const unsigned e = (v & 0x7fu) >> mb, m = v & ((1u << mb) - 1);
	double a;
	if (f == MGT_FP8_E4M3 && e == 15 && m == 7)
		a = NAN;
	else if (f == MGT_FP8_E5M2 && e == (unsigned)emax)
		a = m ? NAN : INFINITY;
	else if (e == 0)
		a = ldexp((double)m, 1 - bias - mb);
	else
		a = ldexp(1.0 + ldexp((double)m, -mb), (int)e - bias);
	return (float)(v & 0x80 ? -a : a);
}

uint64_t mgt_hash64(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

mgt_status mgt_mkdirs(const char *path)
{
	if (!*path) return mgt_err(MGT_ERR_IO, "empty directory name");
	char *dir = mgt_strdup(path);
	if (!dir) return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	struct stat sb;
	for (char *s = dir + 1;; s++) {
		if (*s && *s != '/') continue;
		char c = *s;
		*s = 0;
		int bad = mkdir(dir, 0777) != 0 && errno != EEXIST;
		int e = errno;
		if (!bad && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) bad = 1, e = ENOTDIR;
		if (bad && !c) st = mgt_err(MGT_ERR_IO, "%s: cannot create directory: %s", path, strerror(e));
		else if (bad) st = mgt_err(MGT_ERR_IO, "%s: cannot create directory: %s: %s", path, dir, strerror(e));
		*s = c;
		if (st || !c) break;
	}
	free(dir);
	return st;
}

/* Write and remove a probe file in the existing directory dir. */
static mgt_status probe_write(const char *dir, const char *what, const char *shown)
{
	char probe[4096];
	snprintf(probe, sizeof probe, "%s/.mgt-write-probe.%ld", dir, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
	int e = errno;
	if (fd >= 0) {
		bool ok = write(fd, "", 1) == 1;
		e = errno;
		ok = close(fd) == 0 && ok;
		unlink(probe);
		if (ok) return MGT_OK;
	}
	return mgt_err(MGT_ERR_IO, "%s %s: cannot write there: %s", what, shown, strerror(e));
}

mgt_status mgt_dir_writable(const char *dir, const char *what)
{
	char *made = mgt_strdup(dir); /* the first missing ancestor: removed again with what it holds */
	if (!made) return MGT_ERR_NOMEM;
	struct stat sb;
	size_t keep = strlen(made);
	while (keep > 0 && made[keep - 1] == '/') made[--keep] = 0;
	bool missing = stat(made, &sb) != 0 && errno == ENOENT;
	for (char *sl; missing && (sl = strrchr(made, '/')) && sl != made;) {
		*sl = 0;
		if (stat(made, &sb) == 0 || errno != ENOENT) {
			*sl = '/';
			break;
		}
	}
	mgt_status st = mgt_mkdirs(dir);
	if (st) st = mgt_err_ctx(st, "%s", what);
	else st = probe_write(dir, what, dir);
	/* the directories made for the probe go again (the run makes them when it saves): from dir
	 * (trimmed as made was) up to the first missing ancestor */
	char *p = missing ? mgt_strdup(dir) : NULL;
	for (size_t n = p ? strlen(p) : 0; p && n > 0 && p[n - 1] == '/';) p[--n] = 0;
	while (p && *p) {
		rmdir(p);
		char *sl = strlen(p) > strlen(made) ? strrchr(p, '/') : NULL;
		if (!sl) break;
		*sl = 0;
	}
	free(p);
	free(made);
	return st;
}

mgt_status mgt_free_bytes(const char *path, uint64_t *out)
{
	char *d = mgt_strdup(path[0] ? path : ".");
	if (!d) return MGT_ERR_NOMEM;
	struct statvfs v;
	int r;
	while ((r = statvfs(d, &v)) != 0 && errno == ENOENT && strcmp(d, ".") && strcmp(d, "/")) {
		char *sl = strrchr(d, '/');
		if (!sl) {
			snprintf(d, strlen(d) + 1, ".");
		} else if (sl == d) {
			sl[1] = 0;
		} else {
			*sl = 0;
		}
	}
	mgt_status st = r ? mgt_err(MGT_ERR_IO, "%s: cannot ask its file system for free space: %s", d, strerror(errno)) : MGT_OK;
	if (!r) *out = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
	free(d);
	return st;
}

bool mgt_share_preset(const char *kind, const char *name, char *out, size_t n, char *dir, size_t dn)
{
	if (!out || !n || !dir || !dn) return false;
	if (strchr(name, '/') || strstr(name, ".json")) {
		snprintf(out, n, "%s", name);
		return true;
	}
	char exe[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[k > 0 ? k : 0] = 0;
	char *slash = strrchr(exe, '/');
	if (slash) *slash = 0;
	snprintf(dir, dn, "%s/../share/mgt/%s", exe, kind);
	const char *env = getenv("MGT_SHARE");
	if (env) snprintf(out, n, "%s/%s/%s.json", env, kind, name);
	if (env && !access(out, R_OK)) return true;
	snprintf(out, n, "%s/%s.json", dir, name);
	return !access(out, R_OK);
}
