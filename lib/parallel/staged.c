/* lib/parallel/staged.c: the staged communicator (parallel.h): device buffers staged through host
 * memory around a host communicator's operations.
 *
 * Every operation: download what it reads into one host staging buffer, run host's operation
 * on the staging buffer, upload what it writes.  Counters: the difference of host's counters
 * across the operation, so they are host's formulas by construction.
 */
#include "parallel/parallel.h"
#include "parallel/parallel_impl.h"

#include <stdint.h>
#include <stdlib.h>

#include "backend/backend.h"

typedef struct {
	mgt_comm *host;
	mgt_backend *be;
	char *stage;
	size_t cap;
} staged_impl;

/* The staging buffer with room for at least bytes (contents not kept); NULL on MGT_ERR_NOMEM. */
static char *stage_for(staged_impl *im, size_t bytes)
{
	if (bytes <= im->cap && im->stage) return im->stage;
	size_t cap = bytes < 256 ? 256 : bytes;
	free(im->stage);
	im->cap = 0;
	if (!(im->stage = mgt_malloc(cap))) return NULL;
	im->cap = cap;
	return im->stage;
}

/* k * n elements of dt in bytes into *out; MGT_ERR_NOMEM when that does not fit a size_t. */
static mgt_status bytes_of(const mgt_comm *c, const char *what, size_t k, size_t n, mgt_comm_dtype dt,
			   size_t *out)
{
	size_t es = mgt_comm_dtype_size(dt);
	if (n && k > SIZE_MAX / es / n)
		return mgt_err(MGT_ERR_NOMEM, "%s group: staged %s of %zu x %zu elements: too large", c->name, what,
			       k, n);
	*out = k * n * es;
	return MGT_OK;
}

static mgt_status download(mgt_comm *c, const char *what, void *host_dst, const void *src, size_t bytes)
{
	staged_impl *im = c->impl;
	if (!bytes) return MGT_OK;
	mgt_status st = im->be->ops->download(im->be, host_dst, src, bytes);
	return st ? mgt_err_ctx(st, "%s group: staged %s", c->name, what) : MGT_OK;
}

static mgt_status upload(mgt_comm *c, const char *what, void *dst, const void *host_src, size_t bytes)
{
	staged_impl *im = c->impl;
	if (!bytes) return MGT_OK;
	mgt_status st = im->be->ops->upload(im->be, dst, host_src, bytes);
	return st ? mgt_err_ctx(st, "%s group: staged %s", c->name, what) : MGT_OK;
}

/* Host's counters before an operation; add_counts adds what host counted since. */
typedef struct {
	double bytes;
	uint64_t calls;
} counters;

static counters host_counters(const mgt_comm *c)
{
	const mgt_comm *h = ((const staged_impl *)c->impl)->host;
	return (counters){ h->bytes_sent, h->calls };
}

static void add_counts(mgt_comm *c, counters before)
{
	const mgt_comm *h = ((const staged_impl *)c->impl)->host;
	c->bytes_sent += h->bytes_sent - before.bytes;
	c->calls += h->calls - before.calls;
}

/* ---- the operations ----------------------------------------------------------------------- */

static mgt_status staged_allreduce(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op)
{
	staged_impl *im = c->impl;
	size_t bytes = 0;
	mgt_status st = bytes_of(c, "allreduce", 1, n, dt, &bytes);
	char *s = st ? NULL : stage_for(im, bytes);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	if ((st = download(c, "allreduce", s, buf, bytes))) return st;
	counters k = host_counters(c);
	st = im->host->ops->allreduce(im->host, s, n, dt, op);
	add_counts(c, k);
	return st ? st : upload(c, "allreduce", buf, s, bytes);
}

/* Staged as host's in-place allgather: src goes to this rank's piece of the staging buffer. */
static mgt_status staged_allgather(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	staged_impl *im = c->impl;
	size_t bytes = 0, all = 0;
	mgt_status st = bytes_of(c, "allgather", 1, n, dt, &bytes);
	if (!st) st = bytes_of(c, "allgather", (size_t)c->size, n, dt, &all);
	char *s = st ? NULL : stage_for(im, all);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	char *mine = s + (size_t)c->rank * bytes;
	if ((st = download(c, "allgather", mine, src, bytes))) return st;
	counters k = host_counters(c);
	st = im->host->ops->allgather(im->host, s, mine, n, dt);
	add_counts(c, k);
	return st ? st : upload(c, "allgather", dst, s, all);
}

/* Staging buffer: [size * n] input, then [n] output (so host needs no copy of its own). */
static mgt_status staged_reduce_scatter(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	staged_impl *im = c->impl;
	size_t bytes = 0, all = 0;
	mgt_status st = bytes_of(c, "reduce_scatter", (size_t)c->size + 1, n, dt, &all);
	if (!st) st = bytes_of(c, "reduce_scatter", 1, n, dt, &bytes);
	char *s = st ? NULL : stage_for(im, all);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	char *out = s + (all - bytes);
	if ((st = download(c, "reduce_scatter", s, src, all - bytes))) return st;
	counters k = host_counters(c);
	st = im->host->ops->reduce_scatter(im->host, out, s, n, dt);
	add_counts(c, k);
	return st ? st : upload(c, "reduce_scatter", dst, out, bytes);
}

/* Only the root's buffer is read. */
static mgt_status staged_broadcast(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root)
{
	staged_impl *im = c->impl;
	size_t bytes = 0;
	mgt_status st = bytes_of(c, "broadcast", 1, n, dt, &bytes);
	char *s = st ? NULL : stage_for(im, bytes);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	if (c->rank == root && (st = download(c, "broadcast", s, buf, bytes))) return st;
	counters k = host_counters(c);
	st = im->host->ops->broadcast(im->host, s, n, dt, root);
	add_counts(c, k);
	return st ? st : upload(c, "broadcast", buf, s, bytes);
}

/* host's send returns once the staging buffer may be reused (the MPI communicator sends from a
 * copy of its own), so the next operation can overwrite it at once. */
static mgt_status staged_send(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	staged_impl *im = c->impl;
	size_t bytes = 0;
	mgt_status st = bytes_of(c, "send", 1, n, dt, &bytes);
	char *s = st ? NULL : stage_for(im, bytes);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	if ((st = download(c, "send", s, buf, bytes))) return st;
	counters k = host_counters(c);
	st = im->host->ops->send(im->host, s, n, dt, peer, tag);
	add_counts(c, k);
	return st;
}

static mgt_status staged_recv(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	staged_impl *im = c->impl;
	size_t bytes = 0;
	mgt_status st = bytes_of(c, "recv", 1, n, dt, &bytes);
	char *s = st ? NULL : stage_for(im, bytes);
	if (st || !s) return st ? st : MGT_ERR_NOMEM;
	counters k = host_counters(c);
	st = im->host->ops->recv(im->host, s, n, dt, peer, tag);
	add_counts(c, k);
	return st ? st : upload(c, "recv", buf, s, bytes);
}

/* The non-empty blocks of count/displ (elements of es bytes) between backend buffer dev and the
 * pack, where they lie side by side in rank order from pack: downloaded (up 0) or uploaded
 * (up 1), blocks adjacent in dev as well in one transfer. */
static mgt_status move_blocks(mgt_comm *c, int up, char *dev, char *pack, const int64_t *count, const int64_t *displ,
			      size_t es)
{
	size_t start = 0, len = 0, at = 0; /* the run: dev bytes [start, start + len) at pack + at */
	mgt_status st = MGT_OK;
	for (int r = 0; r <= c->size && !st; r++) {
		size_t d = r < c->size ? (size_t)displ[r] * es : 0, n = r < c->size ? (size_t)count[r] * es : 0;
		if (r < c->size && !n) continue;
		if (len && r < c->size && d == start + len) {
			len += n;
			continue;
		}
		if (len)
			st = up ? upload(c, "alltoallv", dev + start, pack + at, len)
				: download(c, "alltoallv", pack + at, dev + start, len);
		at += len;
		start = d;
		len = n;
	}
	return st;
}

/* Staging buffer: this rank's send blocks side by side in rank order, then its receive blocks
 * likewise; host's alltoallv runs on it with those displacements. */
static mgt_status staged_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				   const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	staged_impl *im = c->impl;
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size, send_end, recv_end, sn = 0, rn = 0;
	double sent;
	mgt_status st = mgt_comm_alltoallv_check(c, rcount, rdispl, scount, sdispl, es, &sent, &send_end, &recv_end);
	if (st) return st;
	int64_t *disp = mgt_malloc(2 * p * sizeof *disp); /* host's sdispl, then rdispl */
	if (!disp) return MGT_ERR_NOMEM;
	for (size_t r = 0; r < p && !st; r++) {
		size_t room = SIZE_MAX / es - sn - rn; /* elements the staging buffer may still grow by */
		if ((size_t)scount[r] > room || (size_t)rcount[r] > room - (size_t)scount[r])
			st = mgt_err(MGT_ERR_NOMEM, "%s group: staged alltoallv: too large", c->name);
		disp[r] = (int64_t)sn;
		disp[p + r] = (int64_t)rn;
		sn += (size_t)scount[r];
		rn += (size_t)rcount[r];
	}
	char *s = st ? NULL : stage_for(im, (sn + rn) * es);
	if (!st && !s) st = MGT_ERR_NOMEM;
	if (!st) st = move_blocks(c, 0, (char *)src, s, scount, sdispl, es);
	if (!st) {
		counters k = host_counters(c);
		st = mgt_comm_alltoallv(im->host, s + sn * es, rcount, disp + p, s, scount, disp, dt);
		add_counts(c, k);
	}
	if (!st) st = move_blocks(c, 1, dst, s + sn * es, rcount, rdispl, es);
	free(disp);
	return st;
}

static mgt_status staged_barrier(mgt_comm *c)
{
	staged_impl *im = c->impl;
	counters k = host_counters(c);
	mgt_status st = im->host->ops->barrier(im->host);
	add_counts(c, k);
	return st;
}

static void staged_destroy(mgt_comm *c)
{
	staged_impl *im = c->impl;
	free(im->stage);
	free(im);
	free(c);
}

static const mgt_comm_ops staged_ops = {
	.allreduce = staged_allreduce,
	.allgather = staged_allgather,
	.reduce_scatter = staged_reduce_scatter,
	.broadcast = staged_broadcast,
	.send = staged_send,
	.recv = staged_recv,
	.barrier = staged_barrier,
	.destroy = staged_destroy,
	.alltoallv = staged_alltoallv,
};

mgt_comm *mgt_comm_staged(mgt_comm *host, mgt_backend *be, mgt_status *st)
{
	mgt_status dummy;
	if (!st) st = &dummy;
	if (!host || !be) {
		*st = mgt_err(MGT_ERR_USAGE, "staged communicator: no %s", host ? "backend" : "host communicator");
		return NULL;
	}
	staged_impl *im = mgt_malloc(sizeof *im);
	mgt_comm *c = im ? mgt_malloc(sizeof *c) : NULL;
	if (!c) {
		free(im);
		*st = MGT_ERR_NOMEM;
		return NULL;
	}
	*im = (staged_impl){ .host = host, .be = be };
	*c = (mgt_comm){ .ops = &staged_ops, .name = host->name, .rank = host->rank, .size = host->size,
			 .impl = im };
	*st = MGT_OK;
	return c;
}
