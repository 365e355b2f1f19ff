/* lib/util: see util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Registry of open temporaries, so a signal can remove them. */
#define MAX_TMPS 64
static char *volatile tmp_registry[MAX_TMPS];

static void registry_set(char *tmp, char *replace)
{
	for (int i = 0; i < MAX_TMPS; i++)
		if (tmp_registry[i] == replace) {
			tmp_registry[i] = tmp;
			return;
		}
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
	snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || !(af->f = fdopen(fd, "wb"))) {
		mgt_status e = mgt_err(MGT_ERR_IO, "%s: cannot create: %s", af->tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		free(af->path);
		free(af->tmp);
		memset(af, 0, sizeof *af);
		return e;
	}
	registry_set(af->tmp, NULL);
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
	registry_set(NULL, af->tmp);
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
		registry_set(NULL, af->tmp);
	}
	free(af->tmp);
	free(af->path);
	memset(af, 0, sizeof *af);
}

void mgt_afile_abort_all_signal(void)
{
	for (int i = 0; i < MAX_TMPS; i++)
		if (tmp_registry[i])
			unlink(tmp_registry[i]);
}

double mgt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

volatile int mgt_interrupted;

static void on_signal(int sig)
{
	mgt_interrupted = 1;
	mgt_afile_abort_all_signal();
	signal(sig, SIG_DFL);
	_exit(128 + sig);
}

static void on_signal_graceful(int sig)
{
	if (mgt_interrupted) on_signal(sig);
	mgt_interrupted = sig;
}

static void install(void (*handler)(int), bool hup)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (hup) sigaction(SIGHUP, &sa, NULL);
}

void mgt_signals_install_graceful(void)
{
	install(on_signal_graceful, false);
}

void mgt_signals_install(void)
{
	install(on_signal, true);
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

uint64_t mgt_hash64(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}
