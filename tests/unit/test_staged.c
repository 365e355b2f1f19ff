/* Unit tests for lib/parallel/staged.c (parallel.h): the staged communicator on the CPU backend.
 *
 * Over the single-rank communicator: every collective, every dtype and size, in place and not,
 * results through the backend's download, bytes_sent and calls equal to what the single-rank
 * communicator counted; send/recv/bad broadcast root report host's error without counting.
 * Over a simulated host communicator of 3 ranks in which this process is rank 1 (the other
 * ranks' inputs are a known function, so results and parallel.h's byte counts for p > 1 can be
 * checked in one process; send/recv loop back): results, counters equal to the host's,
 * host only ever given the staging buffer, the bytes each operation downloads and uploads
 * (through a backend wrapper that counts them and can fail on demand), send from a buffer
 * overwritten right after, and the error prefix of a failed download/upload.
 * alltoallv (through mgt_comm_alltoallv) in every one of those settings: uneven and zero counts,
 * blocks out of rank order with gaps (left untouched), side by side (one download and one upload)
 * and in place, every element, the host given only staging memory and the right send blocks;
 * a host without alltoallv (MGT_ERR_USAGE).  mgt_parallel_to_device on the single state (the CPU
 * backend posing as a device): every group staged, edp_comm still dp_comm, freed once.
 * mgt_comm_nccl: the staged communicator when built without NCCL, MGT_ERR_USAGE for the CPU
 * backend when built with it.  With a GPU: the staged communicator and mgt_comm_nccl (one rank)
 * on the CUDA backend, every collective as above.
 */
#include "parallel/parallel.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "a2a_check.h"
#include "check.h"

static const mgt_comm_dtype dtypes[] = { MGT_DT_F32, MGT_DT_F64, MGT_DT_I32, MGT_DT_I64 };
static const char *dt_name[] = { "f32", "f64", "i32", "i64" };

static int has_msg(const char *s) { return strstr(mgt_err_msg(), s) != NULL; }

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "test_staged: out of memory\n");
		exit(1);
	}
	return p;
}

/* Element i of group rank r's input: small integers, exact in every dtype (as test_parallel.c). */
static int64_t val(int r, size_t i, mgt_comm_dtype dt)
{
	int64_t v = (int64_t)((r * 37 + (int64_t)(i % 1000003) * 11) % 101) - 50;
	return dt == MGT_DT_I64 ? v * ((int64_t)1 << 35) : v;
}

static void put(void *buf, mgt_comm_dtype dt, size_t i, int64_t v)
{
	switch (dt) {
	case MGT_DT_F32: ((float *)buf)[i] = (float)v; break;
	case MGT_DT_F64: ((double *)buf)[i] = (double)v; break;
	case MGT_DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case MGT_DT_I64: ((int64_t *)buf)[i] = v; break;
	case MGT_DT_BF16: ((uint16_t *)buf)[i] = mgt_f32_to_bf16((float)v); break;
	case MGT_DT_F16: ((uint16_t *)buf)[i] = mgt_f32_to_f16((float)v); break;
	}
}

static int64_t get(const void *buf, mgt_comm_dtype dt, size_t i)
{
	switch (dt) {
	case MGT_DT_F32: return (int64_t)((const float *)buf)[i];
	case MGT_DT_F64: return (int64_t)((const double *)buf)[i];
	case MGT_DT_I32: return ((const int32_t *)buf)[i];
	case MGT_DT_BF16: return (int64_t)mgt_bf16_to_f32(((const uint16_t *)buf)[i]);
	case MGT_DT_F16: return (int64_t)mgt_f16_to_f32(((const uint16_t *)buf)[i]);
	default: return ((const int64_t *)buf)[i];
	}
}

/* ---- a backend wrapper that counts transfers and fails on demand ---------------------------- */

static mgt_backend *real_be;
static mgt_backend_ops wrap_ops;
static mgt_backend wrap_be;
static size_t down_bytes, up_bytes; /* transferred since the last reset */
static size_t down_calls, up_calls; /* transfers */
static int fail_download, fail_upload;

static mgt_status wrap_download(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (fail_download) return mgt_err(MGT_ERR_IO, "device copy failed on purpose");
	down_bytes += bytes;
	down_calls++;
	return real_be->ops->download(real_be, dst, src, bytes);
}

static mgt_status wrap_upload(mgt_backend *be, void *dst, const void *src, size_t bytes)
{
	if (fail_upload) return mgt_err(MGT_ERR_IO, "device copy failed on purpose");
	up_bytes += bytes;
	up_calls++;
	return real_be->ops->upload(real_be, dst, src, bytes);
}

static mgt_backend *wrap(mgt_backend *be)
{
	real_be = be;
	wrap_ops = *be->ops;
	wrap_ops.download = wrap_download;
	wrap_ops.upload = wrap_upload;
	wrap_be = *be;
	wrap_be.ops = &wrap_ops;
	return &wrap_be;
}

/* ---- a simulated host communicator: rank SIM_R of SIM_P ------------------------------------ */

enum { SIM_P = 3, SIM_R = 1 };

typedef struct sim_msg {
	struct sim_msg *next;
	int peer, tag;
	size_t n;
	mgt_comm_dtype dt;
	char data[];
} sim_msg;

typedef struct {
	sim_msg *head;
	const void *last[2]; /* the buffers the last operation was given */
} sim_impl;

static void sim_count(mgt_comm *c, double bytes, const void *a, const void *b)
{
	sim_impl *im = c->impl;
	c->calls++;
	c->bytes_sent += bytes;
	im->last[0] = a;
	im->last[1] = b;
}

static mgt_status sim_allreduce(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op)
{
	for (size_t i = 0; i < n; i++) {
		int64_t e = get(buf, dt, i);
		for (int r = 0; r < SIM_P; r++) {
			if (r == SIM_R) continue;
			int64_t v = val(r, i, dt);
			e = op == MGT_RED_SUM ? e + v : v > e ? v : e;
		}
		put(buf, dt, i, e);
	}
	sim_count(c, 2.0 * (SIM_P - 1) / SIM_P * (double)(n * mgt_comm_dtype_size(dt)), buf, NULL);
	return MGT_OK;
}

static mgt_status sim_allgather(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt);
	memmove((char *)dst + SIM_R * n * es, src, n * es);
	for (int r = 0; r < SIM_P; r++)
		for (size_t i = 0; i < n && r != SIM_R; i++) put(dst, dt, (size_t)r * n + i, val(r, i, dt));
	sim_count(c, (double)(SIM_P - 1) * (double)(n * es), dst, src);
	return MGT_OK;
}

/* Rank r's input element SIM_R * n + i is val(r, SIM_R * n + i) for the other ranks. */
static mgt_status sim_reduce_scatter(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	for (size_t i = 0; i < n; i++) {
		size_t k = SIM_R * n + i;
		int64_t e = get(src, dt, k);
		for (int r = 0; r < SIM_P; r++)
			if (r != SIM_R) e += val(r, k, dt);
		put(dst, dt, i, e);
	}
	sim_count(c, (double)(SIM_P - 1) * (double)(n * mgt_comm_dtype_size(dt)), dst, src);
	return MGT_OK;
}

static mgt_status sim_broadcast(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root)
{
	if (root < 0 || root >= SIM_P) return mgt_err(MGT_ERR_IO, "%s group: broadcast from rank %d", c->name, root);
	for (size_t i = 0; i < n && root != SIM_R; i++) put(buf, dt, i, val(root, i, dt));
	sim_count(c, root == SIM_R ? (double)(n * mgt_comm_dtype_size(dt)) : 0, buf, NULL);
	return MGT_OK;
}

/* Sends to a peer come back from it (loopback), in order per tag. */
static mgt_status sim_send(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	sim_impl *im = c->impl;
	size_t bytes = n * mgt_comm_dtype_size(dt);
	if (peer < 0 || peer >= SIM_P) return mgt_err(MGT_ERR_IO, "%s group: send to rank %d", c->name, peer);
	sim_msg *m = xmalloc(sizeof *m + bytes), **tail = &im->head;
	*m = (sim_msg){ .peer = peer, .tag = tag, .n = n, .dt = dt };
	memcpy(m->data, buf, bytes);
	while (*tail) tail = &(*tail)->next;
	*tail = m;
	sim_count(c, (double)bytes, buf, NULL);
	return MGT_OK;
}

static mgt_status sim_recv(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	sim_impl *im = c->impl;
	sim_msg **p = &im->head;
	while (*p && ((*p)->peer != peer || (*p)->tag != tag)) p = &(*p)->next;
	if (!*p) return mgt_err(MGT_ERR_IO, "%s group: receive from rank %d (tag %d): nothing sent", c->name, peer, tag);
	sim_msg *m = *p;
	if (m->n != n || m->dt != dt)
		return mgt_err(MGT_ERR_IO, "%s group: receive from rank %d (tag %d): %zu elements arrived, expected %zu",
			       c->name, peer, tag, m->n, n);
	*p = m->next;
	memcpy(buf, m->data, n * mgt_comm_dtype_size(dt));
	free(m);
	sim_count(c, 0, buf, NULL);
	return MGT_OK;
}

/* This rank's blocks for the others must hold aval(SIM_R, r, .) (what the caller wrote: checks
 * that the staged communicator downloaded the right bytes); the others' blocks for this rank
 * arrive as aval(r, SIM_R, .); the own block is copied. */
static mgt_status sim_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt);
	double bytes = 0;
	for (int r = 0; r < SIM_P; r++) {
		if (r == SIM_R) continue;
		for (int64_t i = 0; i < scount[r]; i++)
			if (get(src, dt, (size_t)(sdispl[r] + i)) != aval(SIM_R, r, (size_t)i, dt))
				return mgt_err(MGT_ERR_IO, "%s group: alltoallv: element %" PRId64 " for rank %d is wrong",
					       c->name, i, r);
		bytes += (double)scount[r] * (double)es;
	}
	if (scount[SIM_R] != rcount[SIM_R]) return mgt_err(MGT_ERR_IO, "%s group: alltoallv: own block", c->name);
	memmove((char *)dst + (size_t)rdispl[SIM_R] * es, (const char *)src + (size_t)sdispl[SIM_R] * es,
		(size_t)scount[SIM_R] * es);
	for (int r = 0; r < SIM_P; r++)
		for (int64_t i = 0; i < rcount[r] && r != SIM_R; i++)
			put(dst, dt, (size_t)(rdispl[r] + i), aval(r, SIM_R, (size_t)i, dt));
	sim_count(c, bytes, dst, src);
	return MGT_OK;
}

static mgt_status sim_barrier(mgt_comm *c)
{
	sim_count(c, 0, NULL, NULL);
	return MGT_OK;
}

static void sim_destroy(mgt_comm *c)
{
	sim_impl *im = c->impl;
	while (im->head) {
		sim_msg *m = im->head;
		im->head = m->next;
		free(m);
	}
}

static const mgt_comm_ops sim_ops = {
	.allreduce = sim_allreduce,
	.allgather = sim_allgather,
	.reduce_scatter = sim_reduce_scatter,
	.broadcast = sim_broadcast,
	.send = sim_send,
	.recv = sim_recv,
	.barrier = sim_barrier,
	.destroy = sim_destroy,
	.alltoallv = sim_alltoallv,
};

/* ---- helpers on backend memory --------------------------------------------------------------- */

static mgt_backend *be; /* the backend of the communicator under test */

static void *dev_alloc(size_t bytes)
{
	void *p = be->ops->alloc(be, bytes ? bytes : 1);
	if (!p) {
		fprintf(stderr, "test_staged: backend out of memory\n");
		exit(1);
	}
	return p;
}

/* Upload the host array to backend memory, and back. */
static void to_dev(void *d, const void *h, size_t bytes)
{
	if (bytes && be->ops->upload(be, d, h, bytes)) exit(1);
}

static void from_dev(void *h, const void *d, size_t bytes)
{
	if (bytes && be->ops->download(be, h, d, bytes)) exit(1);
}

/* c and host both advanced by exactly the same bytes and calls since (b0, k0, hb0, hk0), the
 * bytes being expect and the calls one. */
typedef struct {
	double b, hb;
	uint64_t k, hk;
	size_t down, up, ndown, nup;
} snap;

static mgt_comm *host_of; /* host of the staged communicator under test; NULL for NCCL's */

static snap take(const mgt_comm *c)
{
	const mgt_comm *h = host_of ? host_of : c;
	return (snap){ c->bytes_sent, h->bytes_sent, c->calls, h->calls, down_bytes, up_bytes, down_calls, up_calls };
}

/* c counted bytes and calls since s, and so did host (when there is one). */
static int counted(const mgt_comm *c, snap s, double bytes, uint64_t calls)
{
	double d = c->bytes_sent - s.b;
	int ok = fabs(d - bytes) <= 1e-9 * (bytes + 1) && c->calls == s.k + calls;
	return ok && (!host_of || (host_of->bytes_sent - s.hb == d && host_of->calls - s.hk == calls));
}

/* Downloaded and uploaded exactly these bytes since s (checked only through the wrapper). */
static int moved(snap s, size_t down, size_t up)
{
	return be != &wrap_be || (down_bytes - s.down == down && up_bytes - s.up == up);
}

/* Host was given no backend buffer in the range [d, d + bytes) (it works on staging memory). */
static int staged_only(const void *a, const void *b, const void *d, size_t bytes)
{
	const char *x = d;
	for (int k = 0; k < 2; k++) {
		const char *p = k ? b : a;
		if (p && p >= x && p < x + (bytes ? bytes : 1)) return 0;
	}
	return 1;
}

static int sim_saw_staging(const mgt_comm *c, const void *d, size_t bytes)
{
	if (!host_of || host_of->ops != &sim_ops) return 1;
	const sim_impl *im = host_of->impl;
	return staged_only(im->last[0], im->last[1], d, bytes);
}

/* ---- collectives ------------------------------------------------------------------------------ */

static int try_allreduce(mgt_comm *c, mgt_comm_dtype dt, size_t n, mgt_redop op)
{
	size_t es = mgt_comm_dtype_size(dt), B = n * es;
	char *h = xmalloc(B), *d = dev_alloc(B);
	for (size_t i = 0; i < n; i++) put(h, dt, i, val(c->rank, i, dt));
	to_dev(d, h, B);
	snap s = take(c);
	int ok = c->ops->allreduce(c, d, n, dt, op) == MGT_OK;
	ok = ok && counted(c, s, c->size > 1 ? 2.0 * (c->size - 1) / c->size * (double)B : 0, 1);
	ok = ok && moved(s, B, B) && sim_saw_staging(c, d, B);
	memset(h, 0, B);
	from_dev(h, d, B);
	for (size_t i = 0; i < n && ok; i++) {
		int64_t e = val(0, i, dt);
		for (int r = 1; r < c->size; r++) {
			int64_t v = val(r, i, dt);
			e = op == MGT_RED_SUM ? e + v : v > e ? v : e;
		}
		ok = get(h, dt, i) == e;
	}
	be->ops->free(be, d);
	free(h);
	return ok;
}

/* in_place: src is dst + rank * n. */
static int try_allgather(mgt_comm *c, mgt_comm_dtype dt, size_t n, int in_place)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size, B = n * es;
	char *h = xmalloc(p * B), *dst = dev_alloc(p * B), *own = dev_alloc(B);
	char *src = in_place ? dst + (size_t)c->rank * B : own;
	for (size_t i = 0; i < p * n; i++) put(h, dt, i, -7);
	to_dev(dst, h, p * B);
	for (size_t i = 0; i < n; i++) put(h, dt, i, val(c->rank, i, dt));
	to_dev(src, h, B);
	snap s = take(c);
	int ok = c->ops->allgather(c, dst, src, n, dt) == MGT_OK;
	ok = ok && counted(c, s, (double)(p - 1) * (double)B, 1) && moved(s, B, p * B);
	ok = ok && sim_saw_staging(c, dst, p * B) && sim_saw_staging(c, own, B);
	from_dev(h, dst, p * B);
	for (size_t r = 0; r < p && ok; r++)
		for (size_t i = 0; i < n && ok; i++) ok = get(h, dt, r * n + i) == val((int)r, i, dt);
	be->ops->free(be, dst);
	be->ops->free(be, own);
	free(h);
	return ok;
}

/* dst[i] = sum over ranks of their src[rank * n + i]; in_place: dst = src + rank * n. */
static int try_reduce_scatter(mgt_comm *c, mgt_comm_dtype dt, size_t n, int in_place)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size, B = n * es;
	char *h = xmalloc(p * B), *src = dev_alloc(p * B), *own = dev_alloc(B);
	char *dst = in_place ? src + (size_t)c->rank * B : own;
	for (size_t i = 0; i < p * n; i++) put(h, dt, i, val(c->rank, i, dt));
	to_dev(src, h, p * B);
	snap s = take(c);
	int ok = c->ops->reduce_scatter(c, dst, src, n, dt) == MGT_OK;
	ok = ok && counted(c, s, (double)(p - 1) * (double)B, 1) && moved(s, p * B, B);
	ok = ok && sim_saw_staging(c, src, p * B) && sim_saw_staging(c, own, B);
	from_dev(h, dst, B);
	for (size_t i = 0; i < n && ok; i++) {
		int64_t e = 0;
		for (int r = 0; r < c->size; r++) e += val(r, (size_t)c->rank * n + i, dt);
		ok = get(h, dt, i) == e;
	}
	if (in_place && ok && p > 1) { /* the other ranks' pieces of src are left as they were */
		char *all = xmalloc(p * B);
		from_dev(all, src, p * B);
		for (size_t i = 0; i < p * n && ok; i++)
			ok = i / (n ? n : 1) == (size_t)c->rank || get(all, dt, i) == val(c->rank, i, dt);
		free(all);
	}
	be->ops->free(be, src);
	be->ops->free(be, own);
	free(h);
	return ok;
}

static int try_broadcast(mgt_comm *c, mgt_comm_dtype dt, size_t n, int root)
{
	size_t es = mgt_comm_dtype_size(dt), B = n * es;
	char *h = xmalloc(B), *d = dev_alloc(B);
	for (size_t i = 0; i < n; i++) put(h, dt, i, c->rank == root ? val(root, i, dt) : -9);
	to_dev(d, h, B);
	snap s = take(c);
	int ok = c->ops->broadcast(c, d, n, dt, root) == MGT_OK;
	ok = ok && counted(c, s, c->rank == root && c->size > 1 ? (double)B : 0, 1);
	ok = ok && moved(s, c->rank == root ? B : 0, B) && sim_saw_staging(c, d, B);
	memset(h, 0, B);
	from_dev(h, d, B);
	for (size_t i = 0; i < n && ok; i++) ok = get(h, dt, i) == val(root, i, dt);
	be->ops->free(be, d);
	free(h);
	return ok;
}

/* Non-empty blocks of count not adjacent to the previous non-empty one in the buffer (the
 * transfers the staged communicator should make). */
static size_t runs(int p, const int64_t *count, const int64_t *displ)
{
	size_t n = 0;
	int64_t end = -1;
	for (int r = 0; r < p; r++) {
		if (!count[r]) continue;
		n += displ[r] != end;
		end = displ[r] + count[r];
	}
	return n;
}

/* One alltoallv on c over backend memory (as test_parallel.c's on host memory): every element of
 * dst and its gaps, the counters (as host's), the bytes and transfers (through the wrapper:
 * every send block downloaded, every receive block uploaded, adjacent blocks in one transfer). */
static int try_alltoallv(mgt_comm *c, mgt_comm_dtype dt, int seed, size_t unit, int gaps, int in_place)
{
	int p = c->size, q = c->rank;
	size_t es = mgt_comm_dtype_size(dt), pp = (size_t)p;
	int64_t *sc = xmalloc(4 * pp * sizeof *sc), *sd = sc + p, *rc = sc + 2 * p, *rd = sc + 3 * p;
	for (int r = 0; r < p; r++) {
		sc[r] = (int64_t)a2a_count(q, r, seed, unit, in_place);
		rc[r] = (int64_t)a2a_count(r, q, seed, unit, in_place);
	}
	size_t sn = a2a_layout(p, sc, sd, gaps, 0), rn = a2a_layout(p, rc, rd, gaps, !in_place);
	if (in_place) { /* symmetric counts: the same blocks */
		memcpy(rd, sd, pp * sizeof *rd);
		rn = sn;
	}
	char *h = xmalloc((sn > rn ? sn : rn) * es), *src = dev_alloc(sn * es), *dst = in_place ? src : dev_alloc(rn * es);
	size_t sbytes = 0, rbytes = 0;
	double bytes = 0;
	for (size_t i = 0; i < sn; i++) put(h, dt, i, SENTINEL);
	for (int r = 0; r < p; r++) {
		for (size_t i = 0; i < (size_t)sc[r]; i++) put(h, dt, (size_t)sd[r] + i, aval(q, r, i, dt));
		if (r != q) bytes += (double)sc[r] * (double)es;
		sbytes += (size_t)sc[r] * es;
		rbytes += (size_t)rc[r] * es;
	}
	to_dev(src, h, sn * es);
	if (!in_place) {
		for (size_t i = 0; i < rn; i++) put(h, dt, i, SENTINEL);
		to_dev(dst, h, rn * es);
	}
	snap s = take(c);
	int ok = mgt_comm_alltoallv(c, dst, rc, rd, src, sc, sd, dt) == MGT_OK;
	ok = ok && counted(c, s, p > 1 ? bytes : 0, 1) && moved(s, sbytes, rbytes);
	ok = ok && (be != &wrap_be || (down_calls - s.ndown == runs(p, sc, sd) && up_calls - s.nup == runs(p, rc, rd)));
	ok = ok && sim_saw_staging(c, src, sn * es) && sim_saw_staging(c, dst, rn * es);
	from_dev(h, dst, rn * es);
	for (size_t i = 0; i < rn && ok; i++) {
		int64_t e = SENTINEL;
		for (int r = 0; r < p; r++)
			if (i >= (size_t)rd[r] && i < (size_t)(rd[r] + rc[r])) e = aval(r, q, i - (size_t)rd[r], dt);
		ok = get(h, dt, i) == e;
	}
	be->ops->free(be, src);
	if (!in_place) be->ops->free(be, dst);
	free(h);
	free(sc);
	return ok;
}

static void test_alltoallv(mgt_comm *c, const char *what)
{
	static const size_t units[] = { 0, 1, 5, 1000 };
	for (int k = 0; k < 4; k++) {
		int ok[3] = { 1, 1, 1 };
		for (size_t u = 0; u < sizeof units / sizeof *units; u++)
			for (int seed = 0; seed < 4; seed++) {
				ok[0] &= try_alltoallv(c, dtypes[k], seed, units[u], 1, 0);
				ok[1] &= try_alltoallv(c, dtypes[k], seed, units[u], 0, 0);
				ok[2] &= try_alltoallv(c, dtypes[k], seed, units[u], 1, 1);
			}
		const char *how[] = { "blocks out of rank order with gaps", "blocks side by side", "src == dst" };
		for (int i = 0; i < 3; i++)
			CHECK(ok[i], "%s: alltoallv of %s, %s, uneven and zero counts: every element, gaps untouched, "
			      "bytes_sent and calls%s%s", what, dt_name[k], how[i], host_of ? " as host's" : "",
			      be == &wrap_be ? ", bytes and transfers (adjacent blocks in one)" : "");
	}
}

static void test_collectives(mgt_comm *c, const char *what)
{
	test_alltoallv(c, what);
	static const size_t sizes[] = { 0, 1, 7, 1000, 70001 };
	for (int k = 0; k < 4; k++) {
		mgt_comm_dtype dt = dtypes[k];
		int ok[7] = { 1, 1, 1, 1, 1, 1, 1 };
		for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
			size_t n = sizes[j];
			ok[0] &= try_allreduce(c, dt, n, MGT_RED_SUM);
			ok[1] &= try_allreduce(c, dt, n, MGT_RED_MAX);
			ok[2] &= try_allgather(c, dt, n, 0);
			ok[3] &= try_allgather(c, dt, n, 1);
			ok[4] &= try_reduce_scatter(c, dt, n, 0);
			ok[5] &= try_reduce_scatter(c, dt, n, 1);
			for (int root = 0; root < c->size; root++) ok[6] &= try_broadcast(c, dt, n, root);
		}
		const char *op[] = { "allreduce sum", "allreduce max", "allgather", "allgather in place",
				     "reduce_scatter", "reduce_scatter in place", "broadcast from every root" };
		for (int i = 0; i < 7; i++)
			CHECK(ok[i], "%s: %s of %s, sizes 0 to 70001: results, bytes_sent and calls%s%s", what, op[i],
			      dt_name[k], host_of ? " as host's" : "",
			      be == &wrap_be ? ", bytes downloaded and uploaded" : "");
	}
}

/* ---- over the single-rank communicator ------------------------------------------------------ */

static void test_over_single(mgt_backend *cpu)
{
	be = cpu;
	mgt_comm *host = mgt_comm_single("pipeline");
	mgt_status st = MGT_ERR_IO;
	mgt_comm *c = host ? mgt_comm_staged(host, be, &st) : NULL;
	CHECK(c && st == MGT_OK && !strcmp(c->name, "pipeline") && c->rank == 0 && c->size == 1 &&
	      c->bytes_sent == 0 && c->calls == 0, "mgt_comm_staged over the single comm: its name, rank, size; "
	      "nothing counted yet");
	if (!c) {
		mgt_comm_destroy(host);
		return;
	}
	host_of = host;
	test_collectives(c, "staged over single");

	float h[3] = { 1, 2, 3 };
	float *d = dev_alloc(sizeof h);
	to_dev(d, h, sizeof h);
	snap s = take(c);
	st = c->ops->send(c, d, 3, MGT_DT_F32, 0, 0);
	CHECK(st == MGT_ERR_IO && has_msg("pipeline group") && counted(c, s, 0, 0),
	      "send: the single comm's MGT_ERR_IO naming the group, nothing counted (%s)", mgt_err_msg());
	st = c->ops->recv(c, d, 3, MGT_DT_F32, 0, 1);
	CHECK(st == MGT_ERR_IO && has_msg("receive from rank 0") && counted(c, s, 0, 0),
	      "recv: the single comm's MGT_ERR_IO, nothing counted (%s)", mgt_err_msg());
	st = c->ops->broadcast(c, d, 3, MGT_DT_F32, 1);
	float back[3] = { 0 };
	from_dev(back, d, sizeof back);
	CHECK(st == MGT_ERR_IO && has_msg("broadcast from rank 1") && counted(c, s, 0, 0) && back[1] == 2,
	      "broadcast from rank 1: MGT_ERR_IO, buffer untouched, nothing counted (%s)", mgt_err_msg());
	CHECK(c->ops->barrier(c) == MGT_OK && counted(c, s, 0, 1), "barrier: one call, no bytes");
	be->ops->free(be, d);
	mgt_comm_destroy(c);
	/* host outlives the staged communicator: still usable */
	CHECK(host->ops->barrier(host) == MGT_OK && host->calls == s.hk + 2,
	      "destroying the staged comm leaves host alive");
	mgt_comm_destroy(host);
}

/* ---- over the simulated 3-rank communicator -------------------------------------------------- */

static void test_over_sim(mgt_backend *wrapped)
{
	be = wrapped;
	sim_impl si = { 0 };
	mgt_comm host = { .ops = &sim_ops, .name = "tensor", .rank = SIM_R, .size = SIM_P, .impl = &si };
	mgt_status st;
	mgt_comm *c = mgt_comm_staged(&host, be, &st);
	CHECK(c && st == MGT_OK && c->rank == SIM_R && c->size == SIM_P && !strcmp(c->name, "tensor"),
	      "mgt_comm_staged over a 3-rank host: rank %d of %d", SIM_R, SIM_P);
	if (!c) return;
	host_of = &host;
	test_collectives(c, "staged over rank 1 of 3");

	/* send from a device buffer overwritten at once; then recv the loopback */
	enum { N = 1000 };
	int64_t h[N];
	int64_t *d = dev_alloc(sizeof h);
	for (int i = 0; i < N; i++) h[i] = (int64_t)i * 3 - 7;
	to_dev(d, h, sizeof h);
	snap s = take(c);
	st = c->ops->send(c, d, N, MGT_DT_I64, 2, 5);
	int ok = st == MGT_OK && counted(c, s, sizeof h, 1) && moved(s, sizeof h, 0) && sim_saw_staging(c, d, sizeof h);
	memset(h, 0, sizeof h);
	to_dev(d, h, sizeof h);
	s = take(c);
	ok = ok && c->ops->send(c, d, 2, MGT_DT_I64, 2, 6) == MGT_OK && counted(c, s, 16, 1);
	CHECK(ok, "send: downloads the buffer, counts its bytes as host did; the buffer may be reused at once");
	s = take(c);
	st = c->ops->recv(c, d, N, MGT_DT_I64, 2, 5);
	ok = st == MGT_OK && counted(c, s, 0, 1) && moved(s, 0, sizeof h) && sim_saw_staging(c, d, sizeof h);
	from_dev(h, d, sizeof h);
	for (int i = 0; i < N && ok; i++) ok = h[i] == (int64_t)i * 3 - 7;
	CHECK(ok, "recv: uploads what was sent before the buffer was overwritten; no bytes, one call");
	s = take(c);
	st = c->ops->recv(c, d, 3, MGT_DT_I64, 2, 6);
	CHECK(st == MGT_ERR_IO && has_msg("2 elements arrived, expected 3") && counted(c, s, 0, 0) && moved(s, 0, 0),
	      "recv of the wrong length: host's MGT_ERR_IO, nothing uploaded or counted (%s)", mgt_err_msg());
	st = c->ops->recv(c, d, 2, MGT_DT_I64, 2, 6);
	CHECK(st == MGT_OK, "recv of the right length afterwards");
	s = take(c);
	st = c->ops->send(c, d, 0, MGT_DT_F32, 0, 1);
	if (!st) st = c->ops->recv(c, d, 0, MGT_DT_F32, 0, 1);
	CHECK(st == MGT_OK && counted(c, s, 0, 2) && moved(s, 0, 0), "send and recv of 0 elements: two calls, "
	      "nothing transferred");

	/* failed transfers: prefixed message, host not called */
	to_dev(d, h, sizeof h);
	s = take(c);
	fail_download = 1;
	st = c->ops->allreduce(c, d, 4, MGT_DT_I64, MGT_RED_SUM);
	fail_download = 0;
	CHECK(st == MGT_ERR_IO && has_msg("tensor group: staged allreduce: device copy failed on purpose") &&
	      counted(c, s, 0, 0), "a failed download: MGT_ERR_IO with the group and op prefixed, host not called "
	      "(%s)", mgt_err_msg());
	fail_upload = 1;
	st = c->ops->recv(c, d, 1, MGT_DT_I64, 0, 9);
	CHECK(st == MGT_ERR_IO && has_msg("nothing sent"), "recv when host fails: host's error (%s)", mgt_err_msg());
	st = c->ops->allgather(c, d, d, 1, MGT_DT_I64);
	fail_upload = 0;
	CHECK(st == MGT_ERR_IO && has_msg("tensor group: staged allgather: device copy failed") && counted(c, s, 2.0 * 8, 1),
	      "a failed upload after host's allgather: MGT_ERR_IO prefixed, host's count kept (%s)", mgt_err_msg());
	s = take(c);
	CHECK(c->ops->barrier(c) == MGT_OK && counted(c, s, 0, 1) && moved(s, 0, 0), "barrier: host's barrier, one call");

	/* alltoallv: a failed download, a failed upload, a host without alltoallv */
	int64_t cnt[SIM_P] = { 1, 2, 1 }, dsp[SIM_P] = { 0, 1, 3 };
	s = take(c);
	fail_download = 1;
	st = mgt_comm_alltoallv(c, d + 8, cnt, dsp, d, cnt, dsp, MGT_DT_I64);
	fail_download = 0;
	CHECK(st == MGT_ERR_IO && has_msg("tensor group: staged alltoallv: device copy failed on purpose") &&
	      counted(c, s, 0, 0), "alltoallv: a failed download: MGT_ERR_IO prefixed, host not called (%s)", mgt_err_msg());
	for (int i = 0; i < 4; i++) h[i] = aval(SIM_R, i == 0 ? 0 : i < 3 ? 1 : 2, i == 2 ? 1 : 0, MGT_DT_I64);
	to_dev(d, h, 4 * sizeof *h);
	fail_upload = 1;
	st = mgt_comm_alltoallv(c, d + 8, cnt, dsp, d, cnt, dsp, MGT_DT_I64);
	fail_upload = 0;
	CHECK(st == MGT_ERR_IO && has_msg("tensor group: staged alltoallv: device copy failed") && counted(c, s, 2.0 * 8, 1),
	      "alltoallv: a failed upload after host's alltoallv: MGT_ERR_IO prefixed, host's count kept (%s)",
	      mgt_err_msg());
	mgt_comm_ops no_a2a = sim_ops;
	no_a2a.alltoallv = NULL;
	mgt_comm host2 = { .ops = &no_a2a, .name = "odd", .rank = SIM_R, .size = SIM_P, .impl = &si };
	mgt_comm *c2 = mgt_comm_staged(&host2, be, NULL);
	st = c2 ? mgt_comm_alltoallv(c2, d + 8, cnt, dsp, d, cnt, dsp, MGT_DT_I64) : MGT_OK;
	CHECK(st == MGT_ERR_USAGE && has_msg("odd group: this communicator has no alltoallv") && c2 && c2->calls == 0,
	      "alltoallv over a host without it: MGT_ERR_USAGE (%s)", mgt_err_msg());
	st = mgt_comm_alltoallv(&host2, d + 8, cnt, dsp, d, cnt, dsp, MGT_DT_I64);
	CHECK(st == MGT_ERR_USAGE && has_msg("odd group: this communicator has no alltoallv"),
	      "mgt_comm_alltoallv on a communicator without it: MGT_ERR_USAGE (%s)", mgt_err_msg());
	mgt_comm_destroy(c2);
	be->ops->free(be, d);
	mgt_comm_destroy(c);
	sim_destroy(&host);
}

/* ---- the parallel state on "device" memory ---------------------------------------------------- */

/* mgt_parallel_to_device on the single state with the CPU backend posing as a device one: every
 * group staged (one-process groups are, NCCL build or not) with its host kept, edp_comm still
 * dp_comm, an alltoallv over the expert group, and mgt_parallel_free freeing each once (the
 * sanitizer builds catch a double free or a leak). */
static void test_to_device(mgt_backend *cpu)
{
	mgt_backend dev = *cpu;
	dev.host_memory = false;
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init_single(&ps);
	CHECK(st == MGT_OK, "mgt_parallel_init_single");
	if (st) return;
	mgt_comm *world = ps.world, *mp = ps.mp_comm, *tp = ps.tp_comm, *dp = ps.dp_comm, *ep = ps.ep_comm;
	st = mgt_parallel_to_device(&ps, &dev, true);
	CHECK(st == MGT_OK && ps.host_tp == tp && ps.host_dp == dp && ps.host_ep == ep && ps.host_pp && ps.host_emb &&
	      ps.tp_comm != tp && ps.dp_comm != dp && ps.ep_comm != ep && ps.world == world && ps.mp_comm == mp,
	      "mgt_parallel_to_device: tensor, data, expert, pipeline, embedding groups wrapped, hosts kept; world "
	      "and model stay (%s)", st ? mgt_err_msg() : "");
	CHECK(ps.edp_comm == ps.dp_comm && ps.host_edp == ps.host_dp && !strcmp(ps.ep_comm->name, "expert") &&
	      ps.ep_comm->size == 1, "mgt_parallel_to_device: edp_comm stays dp_comm (host_edp host_dp)");
	CHECK(ps.inst == 1 && ps.idp_comm == ps.dp_comm && ps.iedp_comm == ps.dp_comm && ps.host_idp == ps.host_dp &&
	      ps.host_iedp == ps.host_dp && !ps.odp_comm && ps.inst_comm == world,
	      "mgt_parallel_to_device with one distributed-optimizer instance: the intra groups follow the data "
	      "group, no inter group, the instance group is the world");
	CHECK(mgt_parallel_to_device(&ps, &dev, true) == MGT_OK && ps.host_dp == dp, "mgt_parallel_to_device again: "
	      "nothing to do");
	be = &dev;
	host_of = ps.host_ep;
	if (!st) test_alltoallv(ps.ep_comm, "staged expert group of the single state");
	host_of = NULL;
	mgt_parallel_free(&ps);
	CHECK(!ps.ep_comm && !ps.edp_comm && !ps.host_edp, "mgt_parallel_free after mgt_parallel_to_device");
}

/* ---- constructors ------------------------------------------------------------------------- */

static void test_create(mgt_backend *cpu)
{
	mgt_comm *host = mgt_comm_single("data");
	mgt_status st = MGT_OK;
	CHECK(!mgt_comm_staged(NULL, cpu, &st) && st == MGT_ERR_USAGE && has_msg("host communicator"),
	      "mgt_comm_staged without host: NULL, MGT_ERR_USAGE (%s)", mgt_err_msg());
	st = MGT_OK;
	CHECK(!mgt_comm_staged(host, NULL, &st) && st == MGT_ERR_USAGE && has_msg("backend"),
	      "mgt_comm_staged without backend: NULL, MGT_ERR_USAGE (%s)", mgt_err_msg());
	CHECK(!mgt_comm_staged(host, NULL, NULL), "mgt_comm_staged with st NULL");

	mgt_comm *c = mgt_comm_nccl(host, cpu, false, &st);
	if (mgt_parallel_have_nccl()) {
		CHECK(!c && st == MGT_ERR_USAGE && has_msg("not CUDA"),
		      "built with NCCL: mgt_comm_nccl on the CPU backend: MGT_ERR_USAGE (%s)", mgt_err_msg());
	} else {
		float h[2] = { 4, 5 };
		float *d = cpu->ops->alloc(cpu, sizeof h);
		int ok = c && st == MGT_OK && c->size == 1 && !strcmp(c->name, "data") && d;
		if (ok) {
			cpu->ops->upload(cpu, d, h, sizeof h);
			ok = c->ops->allreduce(c, d, 2, MGT_DT_F32, MGT_RED_SUM) == MGT_OK && c->calls == 1 &&
			     host->calls == 1;
			cpu->ops->download(cpu, h, d, sizeof h);
			ok = ok && h[0] == 4 && h[1] == 5;
		}
		CHECK(ok, "built without NCCL: mgt_comm_nccl gives a working staged communicator");
		cpu->ops->free(cpu, d);
	}
	mgt_comm_destroy(c);
	mgt_comm_destroy(host);
}

/* ---- on a GPU (skipped without one) ------------------------------------------------------- */

/* The staged communicator and mgt_comm_nccl (NCCL with one rank, or the staged fallback) on the
 * CUDA backend over a single-rank host. */
static void test_cuda(void)
{
	if (mgt_backend_cuda_devices() < 1) {
		printf("# no CUDA device: the CUDA checks are skipped\n");
		return;
	}
	mgt_status st;
	mgt_backend *cu = mgt_backend_cuda_create(0, &st);
	CHECK(cu != NULL, "mgt_backend_cuda_create(0)");
	if (!cu) return;
	mgt_comm *host = mgt_comm_single("gpu");
	mgt_comm *c = host ? mgt_comm_staged(host, cu, &st) : NULL;
	CHECK(c && st == MGT_OK, "mgt_comm_staged on the CUDA backend");
	be = cu;
	host_of = host;
	if (c) test_collectives(c, "staged on CUDA");
	mgt_comm_destroy(c);

	c = host ? mgt_comm_nccl(host, cu, false, &st) : NULL;
	CHECK(c && st == MGT_OK && c->rank == 0 && c->size == 1 && !strcmp(c->name, "gpu"),
	      "mgt_comm_nccl on the CUDA backend over one rank (%s)", mgt_parallel_have_nccl() ? "NCCL" : "staged");
	if (c) {
		host_of = mgt_parallel_have_nccl() ? NULL : host;
		test_collectives(c, mgt_parallel_have_nccl() ? "nccl, one rank" : "nccl fallback, one rank");
		float h[2] = { 1, 2 };
		float *d = dev_alloc(sizeof h);
		to_dev(d, h, sizeof h);
		snap s = take(c);
		st = c->ops->broadcast(c, d, 2, MGT_DT_F32, 1);
		CHECK(st == MGT_ERR_IO && has_msg("broadcast from rank 1") && counted(c, s, 0, 0),
		      "nccl: broadcast from rank 1 of 1: MGT_ERR_IO, not counted (%s)", mgt_err_msg());
		st = c->ops->send(c, d, 2, MGT_DT_F32, 0, 0);
		CHECK(st == MGT_ERR_IO && counted(c, s, 0, 0), "nccl: send in a one-rank group: the host's MGT_ERR_IO (%s)",
		      mgt_err_msg());
		CHECK(c->ops->barrier(c) == MGT_OK && counted(c, s, 0, 1), "nccl: barrier: one call");
		be->ops->free(be, d);
		mgt_comm_destroy(c);
	}
	host_of = NULL;
	mgt_comm_destroy(host);
	mgt_backend_destroy(cu);
}

int main(void)
{
	mgt_backend *cpu = mgt_backend_cpu_create(1);
	if (!cpu) {
		fprintf(stderr, "test_staged: %s\n", mgt_err_msg());
		return 1;
	}
	test_create(cpu);
	test_over_single(cpu);
	test_over_single(wrap(cpu));
	test_over_sim(wrap(cpu));
	test_to_device(cpu);
	mgt_backend_destroy(cpu);
	test_cuda();
	return check_finish();
}
