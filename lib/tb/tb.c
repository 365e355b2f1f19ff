/* lib/tb/tb.c: TensorBoard event files (tb.h): TFRecord framing with masked CRC32C, Event and
 * Summary protocol buffers encoded by hand. */
#include "tb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_SECS 120.0 /* torch.utils.tensorboard's flush_secs */

struct mgt_tb {
	int fd;
	char *path;
	mgt_buf pending;      /* framed records not yet written */
	int64_t npending, queue;
	double oldest;        /* mgt_now() of the first pending record */
	int err;              /* errno of the first failed write or close, 0 if none */
};

/* ---- CRC32C and the TFRecord mask ---- */

uint32_t mgt_tb_crc32c(uint32_t crc, const void *p, size_t n)
{
	const unsigned char *s = p;
	crc = ~crc;
	for (size_t i = 0; i < n; i++) {
		crc ^= s[i];
		for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

uint32_t mgt_tb_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protocol buffer encoding (wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) ---- */

static mgt_status pb_varint(mgt_buf *b, uint64_t v)
{
	unsigned char t[10];
	size_t n = 0;
	do {
		t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return mgt_buf_add(b, t, n);
}

static mgt_status pb_key(mgt_buf *b, int field, int wire)
{
	return pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static mgt_status pb_bytes(mgt_buf *b, int field, const void *p, size_t n)
{
	mgt_status st = pb_key(b, field, 2);
	if (!st) st = pb_varint(b, n);
	return st ? st : mgt_buf_add(b, p, n);
}

static mgt_status pb_string(mgt_buf *b, int field, const char *s)
{
	return pb_bytes(b, field, s, strlen(s));
}

/* Little-endian fixed-width value of n bytes (4 or 8). */
static mgt_status pb_fixed(mgt_buf *b, int field, uint64_t bits, int n)
{
	unsigned char t[8];
	for (int i = 0; i < n; i++) t[i] = (unsigned char)(bits >> (8 * i));
	mgt_status st = pb_key(b, field, n == 8 ? 1 : 5);
	return st ? st : mgt_buf_add(b, t, (size_t)n);
}

static mgt_status pb_double(mgt_buf *b, int field, double x)
{
	uint64_t u;
	memcpy(&u, &x, sizeof u);
	return pb_fixed(b, field, u, 8);
}

static mgt_status pb_float(mgt_buf *b, int field, float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return pb_fixed(b, field, u, 4);
}

/* ---- records ---- */

static mgt_status write_failed(const mgt_tb *w)
{
	return mgt_err(MGT_ERR_IO, "%s: write failed: %s", w->path, strerror(w->err));
}

mgt_status mgt_tb_flush(mgt_tb *w)
{
	if (w->err) return write_failed(w);
	for (size_t off = 0; off < w->pending.n;) {
		ssize_t k = write(w->fd, w->pending.p + off, w->pending.n - off);
		if (k < 0 && errno == EINTR) continue;
		if (k <= 0) {
			w->err = k < 0 ? errno : EIO;
			return write_failed(w);
		}
		off += (size_t)k;
	}
	w->pending.n = 0;
	w->npending = 0;
	return MGT_OK;
}

/* Frame one Event (its encoded bytes) into the pending records; flush when due. */
static mgt_status add_record(mgt_tb *w, const mgt_buf *ev)
{
	if (w->err) return write_failed(w);
	unsigned char head[12], tail[4];
	uint64_t len = ev->n;
	for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
	uint32_t c = mgt_tb_mask(mgt_tb_crc32c(0, head, 8)), d = mgt_tb_mask(mgt_tb_crc32c(0, ev->p, ev->n));
	for (int i = 0; i < 4; i++) {
		head[8 + i] = (unsigned char)(c >> (8 * i));
		tail[i] = (unsigned char)(d >> (8 * i));
	}
	mgt_status st = mgt_buf_add(&w->pending, head, sizeof head);
	if (!st) st = mgt_buf_add(&w->pending, ev->p, ev->n);
	if (!st) st = mgt_buf_add(&w->pending, tail, sizeof tail);
	if (st) return st;
	double now = mgt_now();
	if (w->npending++ == 0) w->oldest = now;
	if (w->npending >= w->queue || now - w->oldest >= FLUSH_SECS) return mgt_tb_flush(w);
	return MGT_OK;
}

static double wall_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An Event {wall_time, step, summary {value {v}}} around the encoded Value v, queued. */
static mgt_status add_summary(mgt_tb *w, const mgt_buf *v, int64_t step)
{
	mgt_buf sum = { 0 }, ev = { 0 };
	mgt_status st = pb_bytes(&sum, 1, v->p, v->n);
	if (!st) st = pb_double(&ev, 1, wall_time());
	if (!st) st = pb_key(&ev, 2, 0);
	if (!st) st = pb_varint(&ev, (uint64_t)step);
	if (!st) st = pb_bytes(&ev, 5, sum.p, sum.n);
	if (!st) st = add_record(w, &ev);
	free(sum.p);
	free(ev.p);
	return st;
}

mgt_status mgt_tb_scalar(mgt_tb *w, const char *tag, double value, int64_t step)
{
	if (w->err) return write_failed(w);
	mgt_buf v = { 0 };
	mgt_status st = pb_string(&v, 1, tag);
	if (!st) st = pb_float(&v, 2, (float)value);
	if (!st) st = add_summary(w, &v, step);
	free(v.p);
	return st;
}

/* TensorProto {dtype DT_STRING, tensor_shape {dim {size 1}}, string_val text} and
 * SummaryMetadata {plugin_data {plugin_name "text"}} of a text Value. */
static mgt_status text_parts(mgt_buf *tensor, mgt_buf *meta, const char *text)
{
	mgt_buf dim = { 0 }, shape = { 0 }, plugin = { 0 };
	mgt_status st = pb_key(&dim, 1, 0);
	if (!st) st = pb_varint(&dim, 1);
	if (!st) st = pb_bytes(&shape, 2, dim.p, dim.n);
	if (!st) st = pb_key(tensor, 1, 0);
	if (!st) st = pb_varint(tensor, 7); /* DT_STRING (types.proto) */
	if (!st) st = pb_bytes(tensor, 2, shape.p, shape.n);
	if (!st) st = pb_string(tensor, 8, text);
	if (!st) st = pb_string(&plugin, 1, "text");
	if (!st) st = pb_bytes(meta, 1, plugin.p, plugin.n);
	free(dim.p);
	free(shape.p);
	free(plugin.p);
	return st;
}

mgt_status mgt_tb_text(mgt_tb *w, const char *tag, const char *text, int64_t step)
{
	if (w->err) return write_failed(w);
	mgt_buf tensor = { 0 }, meta = { 0 }, v = { 0 };
	mgt_status st = text_parts(&tensor, &meta, text);
	if (!st) st = pb_string(&v, 1, tag);
	if (!st) st = pb_bytes(&v, 8, tensor.p, tensor.n);
	if (!st) st = pb_bytes(&v, 9, meta.p, meta.n);
	if (!st) st = add_summary(w, &v, step);
	free(tensor.p);
	free(meta.p);
	free(v.p);
	return st;
}

/* ---- opening and closing ---- */

/* DIR/events.out.tfevents.<secs>.<host>.<pid>.<n>.<prog>, malloc'd. */
static char *event_path(const char *dir, const char *prog)
{
	static atomic_int counter;
	char host[256] = "localhost", name[128];
	if (gethostname(host, sizeof host - 1)) strcpy(host, "localhost");
	host[sizeof host - 1] = 0;
	snprintf(name, sizeof name, "%s", prog && *prog ? prog : "mgt");
	for (char *p = name; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", *p)) *p = '_';
	size_t n = strlen(dir) + strlen(host) + strlen(name) + 96;
	char *path = mgt_malloc(n);
	if (path)
		snprintf(path, n, "%s/events.out.tfevents.%lld.%s.%ld.%d.%s", dir, (long long)time(NULL), host,
			 (long)getpid(), atomic_fetch_add(&counter, 1), name);
	return path;
}

/* The first record: Event {wall_time, file_version "brain.Event:2"}. */
static mgt_status add_version(mgt_tb *w)
{
	mgt_buf ev = { 0 };
	mgt_status st = pb_double(&ev, 1, wall_time());
	if (!st) st = pb_string(&ev, 3, "brain.Event:2");
	if (!st) st = add_record(w, &ev);
	free(ev.p);
	return st;
}

mgt_status mgt_tb_open(mgt_tb **out, const char *dir, const char *prog)
{
	*out = NULL;
	if (!dir || !*dir) return mgt_err(MGT_ERR_IO, "empty TensorBoard directory name");
	mgt_tb *w = mgt_malloc(sizeof *w);
	if (!w) return MGT_ERR_NOMEM;
	*w = (mgt_tb){ .fd = -1, .queue = 1000 };
	mgt_status st = mgt_mkdirs(dir);
	if (!st && !(w->path = event_path(dir, prog))) st = MGT_ERR_NOMEM;
	if (!st && (w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0)
		st = mgt_err(MGT_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
	if (!st) st = add_version(w);
	if (st) {
		if (w->fd >= 0) {
			close(w->fd);
			unlink(w->path);
		}
		free(w->path);
		free(w);
		return st;
	}
	*out = w;
	return MGT_OK;
}

void mgt_tb_set_queue(mgt_tb *w, int64_t records)
{
	w->queue = records > 0 ? records : 1;
}

const char *mgt_tb_path(const mgt_tb *w)
{
	return w->path;
}

mgt_status mgt_tb_close(mgt_tb *w)
{
	if (!w) return MGT_OK;
	mgt_status st = mgt_tb_flush(w);
	if (close(w->fd) != 0 && !st) {
		w->err = errno;
		st = write_failed(w);
	}
	free(w->pending.p);
	free(w->path);
	free(w);
	return st;
}
