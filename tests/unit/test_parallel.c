/* Unit tests for lib/parallel: the one-process communicator and parallel state, the runtime, and,
 * when started by mpirun (tests/cli/t1500-parallel.sh runs it as 1, 2, 4 and 8 processes), the MPI
 * communicator and groups: every collective against a locally computed result (dtypes, sizes,
 * SUM and MAX, in place, split into many MPI calls), send/recv (interleaved tags, many sends
 * before the first receive, errors), bytes_sent and calls after every operation (the parallel.h
 * formulas), alltoallv (uneven, zero and in-place blocks out of rank order with gaps, every
 * element, bytes_sent = the bytes sent to other ranks; blocks and offsets as derived MPI types;
 * refused arguments), the groups of every layout that divides the world (Megatron's rank formula,
 * members checked by an allgather of world ranks inside each group), and the expert groups of
 * every (tp, pp, cp, ep) layout against Megatron's expert grid enumerated (ep, edp ranks and
 * members; edp_comm is dp_comm exactly when ep = cp = 1; bad --expert-model-parallel-size).  Prints "ok"/"not ok" per
 * check (rank 0 prints passing checks, every rank its failures) and rank 0 the job's
 * "N passed, M failed"; every rank exits 1 when any rank failed.
 *
 *   test_parallel                   the checks for this world size (1 without mpirun)
 *   test_parallel --have-mpi        exit 0 when built with MPI, 1 when not
 *   test_parallel --die-on-rank R   rank R prints "test_parallel: rank R ... fails on purpose" and calls
 *                               mgt_parallel_abort(3) while the others wait in a barrier
 *   test_parallel --exit-on-rank R  the same, but rank R exits 2 without telling MPI
 */
#include "parallel/parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2a_check.h"
#include "check.h"

#ifdef MGT_HAVE_MPI
extern size_t mgt_parallel_max_count; /* lib/parallel/mpi.c: the most elements per MPI call */
extern size_t mgt_parallel_max_offset; /* lib/parallel/mpi.c: the furthest plain alltoallv displacement */
#endif

static int me; /* world rank */

/* CHECK that prints passing checks on rank 0 only and failures on every rank. */
#define RCHECK(cond, ...)                                                   \
	do {                                                                \
		int ok_ = (cond);                                           \
		if (ok_ && me) {                                            \
			passed++;                                           \
		} else {                                                    \
			if (me) printf("[rank %d] ", me);                  \
			check_(ok_, #cond, __LINE__, __VA_ARGS__);          \
		}                                                           \
	} while (0)

static const mgt_comm_dtype dtypes[] = { MGT_DT_F32, MGT_DT_F64, MGT_DT_I32, MGT_DT_I64, MGT_DT_BF16, MGT_DT_F16 };
static const char *dt_name[] = { "f32", "f64", "i32", "i64", "bf16", "f16" };

static int has_msg(const char *s) { return strstr(mgt_err_msg(), s) != NULL; }

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "test_parallel: out of memory\n");
		exit(1);
	}
	return p;
}

/* Element i of group rank r's input: small integers (exact in every dtype; sums over up to 8
 * ranks stay exact: within +-120 for the 16-bit floats, whose 8-bit significand (bf16) holds
 * every integer up to 256), scaled beyond 32 bits for i64. */
static int64_t val(int r, size_t i, mgt_comm_dtype dt)
{
	int64_t v = (int64_t)((r * 37 + (int64_t)(i % 1000003) * 11) % 101) - 50;
	if (dt == MGT_DT_BF16 || dt == MGT_DT_F16) return v % 16;
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

/* The operation just done added bytes to bytes_sent (no rounding worth the name) and one call. */
static int counted(const mgt_comm *c, double bytes0, uint64_t calls0, double bytes)
{
	double d = c->bytes_sent - bytes0;
	return fabs(d - bytes) <= 1e-9 * (bytes + 1) && c->calls == calls0 + 1;
}

/* ---- collectives -------------------------------------------------------------------------- */

static int try_allreduce(mgt_comm *c, mgt_comm_dtype dt, size_t n, mgt_redop op)
{
	size_t es = mgt_comm_dtype_size(dt);
	void *buf = xmalloc(n * es);
	for (size_t i = 0; i < n; i++) put(buf, dt, i, val(c->rank, i, dt));
	double b0 = c->bytes_sent;
	uint64_t k0 = c->calls;
	int ok = c->ops->allreduce(c, buf, n, dt, op) == MGT_OK;
	ok = ok && counted(c, b0, k0, c->size > 1 ? 2.0 * (c->size - 1) / c->size * (double)(n * es) : 0);
	for (size_t i = 0; i < n && ok; i++) {
		int64_t e = val(0, i, dt);
		for (int r = 1; r < c->size; r++) {
			int64_t v = val(r, i, dt);
			e = op == MGT_RED_SUM ? e + v : v > e ? v : e;
		}
		ok = get(buf, dt, i) == e;
	}
	free(buf);
	return ok;
}

/* in_place: src is dst's own piece, dst + rank * n. */
static int try_allgather(mgt_comm *c, mgt_comm_dtype dt, size_t n, int in_place)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size;
	char *dst = xmalloc(p * n * es), *own = xmalloc(n * es);
	char *src = in_place ? dst + (size_t)c->rank * n * es : own;
	for (size_t i = 0; i < p * n; i++) put(dst, dt, i, -7);
	for (size_t i = 0; i < n; i++) put(src, dt, i, val(c->rank, i, dt));
	double b0 = c->bytes_sent;
	uint64_t k0 = c->calls;
	int ok = c->ops->allgather(c, dst, src, n, dt) == MGT_OK;
	ok = ok && counted(c, b0, k0, (double)(p - 1) * (double)(n * es));
	for (size_t r = 0; r < p && ok; r++)
		for (size_t i = 0; i < n && ok; i++) ok = get(dst, dt, r * n + i) == val((int)r, i, dt);
	free(dst);
	free(own);
	return ok;
}

/* dst[i] = sum over ranks of their src[rank * n + i]; in_place: dst = src + rank * n. */
static int try_reduce_scatter(mgt_comm *c, mgt_comm_dtype dt, size_t n, int in_place)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size;
	char *src = xmalloc(p * n * es), *own = xmalloc(n * es);
	char *dst = in_place ? src + (size_t)c->rank * n * es : own;
	for (size_t i = 0; i < p * n; i++) put(src, dt, i, val(c->rank, i, dt));
	double b0 = c->bytes_sent;
	uint64_t k0 = c->calls;
	int ok = c->ops->reduce_scatter(c, dst, src, n, dt) == MGT_OK;
	ok = ok && counted(c, b0, k0, (double)(p - 1) * (double)(n * es));
	for (size_t i = 0; i < n && ok; i++) {
		int64_t e = 0;
		for (int r = 0; r < c->size; r++) e += val(r, (size_t)c->rank * n + i, dt);
		ok = get(dst, dt, i) == e;
	}
	free(src);
	free(own);
	return ok;
}

static int try_broadcast(mgt_comm *c, mgt_comm_dtype dt, size_t n, int root)
{
	size_t es = mgt_comm_dtype_size(dt);
	void *buf = xmalloc(n * es);
	for (size_t i = 0; i < n; i++) put(buf, dt, i, c->rank == root ? val(root, i, dt) : -9);
	double b0 = c->bytes_sent;
	uint64_t k0 = c->calls;
	int ok = c->ops->broadcast(c, buf, n, dt, root) == MGT_OK;
	ok = ok && counted(c, b0, k0, c->rank == root && c->size > 1 ? (double)(n * es) : 0);
	for (size_t i = 0; i < n && ok; i++) ok = get(buf, dt, i) == val(root, i, dt);
	free(buf);
	return ok;
}

/* Sums of 16-bit floats that the type cannot hold, over a group of 2 (where the order of the two
 * operands does not matter): every element of allreduce and reduce_scatter is the fp32 sum of
 * the two ranks' values rounded once to nearest even (rank 1's values have bits below rank 0's
 * last place: most sums are inexact, some halfway between two 16-bit values), and a max is exact. */
static int try_round16(mgt_comm *c, mgt_comm_dtype dt, mgt_redop op, int scatter)
{
	enum { N = 4096 };
	int bf = dt == MGT_DT_BF16, ok;
	uint16_t buf[2 * N], in[2][2 * N], out[N];
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < 2 * N; i++) { /* rank 0: 1 + k ulp; rank 1: small values with low bits */
			float v = r == 0 ? 1.0f + (float)(i % 128) / (bf ? 128.0f : 1024.0f)
					 : (float)((i * 7) % 64 - 32) / (bf ? 4096.0f : 32768.0f);
			in[r][i] = bf ? mgt_f32_to_bf16(v) : mgt_f32_to_f16(v);
		}
	memcpy(buf, in[c->rank], sizeof buf);
	if (scatter) ok = c->ops->reduce_scatter(c, out, buf, N, dt) == MGT_OK;
	else ok = c->ops->allreduce(c, buf, 2 * N, dt, op) == MGT_OK;
	for (int i = 0; i < (scatter ? N : 2 * N) && ok; i++) {
		int j = scatter ? c->rank * N + i : i;
		float a = bf ? mgt_bf16_to_f32(in[0][j]) : mgt_f16_to_f32(in[0][j]);
		float b = bf ? mgt_bf16_to_f32(in[1][j]) : mgt_f16_to_f32(in[1][j]);
		float e = op == MGT_RED_MAX ? (a > b ? a : b) : a + b;
		ok = (scatter ? out[i] : buf[i]) == (bf ? mgt_f32_to_bf16(e) : mgt_f32_to_f16(e));
	}
	return ok;
}

/* Every collective on c for every dtype and the sizes given; one check per operation and dtype. */
static void test_collectives(mgt_comm *c, const char *what, const size_t *sizes, int nsizes)
{
	for (int d = 0; d < 6; d++) {
		mgt_comm_dtype dt = dtypes[d];
		int ok[7] = { 1, 1, 1, 1, 1, 1, 1 };
		for (int k = 0; k < nsizes; k++) {
			size_t n = sizes[k];
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
			RCHECK(ok[i], "%s (%s group of %d): %s of %s, %d sizes up to %zu: results, bytes_sent, calls",
			       what, c->name, c->size, op[i], dt_name[d], nsizes, sizes[nsizes - 1]);
		if (c->size == 2 && d >= 4)
			RCHECK(try_round16(c, dt, MGT_RED_SUM, 0) && try_round16(c, dt, MGT_RED_MAX, 0) &&
				       try_round16(c, dt, MGT_RED_SUM, 1),
			       "%s (%s group of 2): allreduce sum and max, reduce_scatter of %s: each sum rounded once "
			       "to nearest even", what, c->name, dt_name[d]);
	}
}

/* ---- point to point ----------------------------------------------------------------------- */

/* Message j from rank r: tag 1 (i64, small) or 2 (f32, every other one 1 MiB, beyond the eager
 * limit); element i = r * 100000 + j * 1000 + i (exact in f32 up to 2^24). */
enum { NMSG = 24 };
static int msg_tag(int j) { return 1 + j % 2; }
static mgt_comm_dtype msg_dt(int j) { return j % 2 ? MGT_DT_F32 : MGT_DT_I64; }
static size_t big_n = (size_t)1 << 18; /* smaller when operations are split into tiny MPI calls */
static size_t msg_n(int j) { return j % 4 == 3 ? big_n : (size_t)(3 + j); }
static int64_t msg_val(int r, int j, size_t i) { return r * 100000 + j * 1000 + (int64_t)(i % 1000); }

/* Every rank sends NMSG messages to the next rank before receiving any from the previous one
 * (a send that waited for its receiver would deadlock here), overwriting each buffer right after
 * the send; then receives the tag-2 messages first, then the tag-1 ones, each in send order. */
static void test_ring(mgt_comm *c)
{
	int p = c->size, q = c->rank, next = (q + 1) % p, prev = (q + p - 1) % p, ok = 1, okb = 1;
	double b0 = c->bytes_sent, sent = 0;
	uint64_t k0 = c->calls;
	for (int j = 0; j < NMSG && ok; j++) {
		size_t n = msg_n(j), es = mgt_comm_dtype_size(msg_dt(j));
		void *buf = xmalloc(n * es);
		for (size_t i = 0; i < n; i++) put(buf, msg_dt(j), i, msg_val(q, j, i));
		ok = c->ops->send(c, buf, n, msg_dt(j), next, msg_tag(j)) == MGT_OK;
		memset(buf, 0xff, n * es);
		sent += (double)(n * es);
		okb &= fabs(c->bytes_sent - b0 - sent) < 1e-6 && c->calls == k0 + (uint64_t)j + 1;
		free(buf);
	}
	RCHECK(ok && okb, "send: %d messages to rank %d with no receive posted return at once; bytes_sent "
	       "adds each message, calls each send", NMSG, next);
	for (int pass = 0; pass < 2 && ok; pass++) {
		for (int j = pass ? 0 : 1; j < NMSG && ok; j += 2) {
			size_t n = msg_n(j);
			void *buf = xmalloc(n * mgt_comm_dtype_size(msg_dt(j)));
			double b1 = c->bytes_sent;
			uint64_t k1 = c->calls;
			ok = c->ops->recv(c, buf, n, msg_dt(j), prev, msg_tag(j)) == MGT_OK && counted(c, b1, k1, 0);
			for (size_t i = 0; i < n && ok; i++) ok = get(buf, msg_dt(j), i) == msg_val(prev, j, i);
			free(buf);
		}
	}
	RCHECK(ok, "recv: tag 2 messages first, then tag 1, each in send order with the sent content; "
	       "recv adds no bytes");
	uint64_t k1 = c->calls;
	double b1 = c->bytes_sent;
	RCHECK(c->ops->barrier(c) == MGT_OK && counted(c, b1, k1, 0), "barrier after the ring: no bytes, one call");
}

/* Errors: a peer outside the group, a negative tag, and messages of the wrong length. */
static void test_p2p_errors(mgt_comm *c)
{
	int p = c->size, q = c->rank, next = (q + 1) % p, prev = (q + p - 1) % p;
	int64_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[8];
	uint64_t k0 = c->calls;
	mgt_status st = c->ops->send(c, a, 8, MGT_DT_I64, p, 0);
	RCHECK(st == MGT_ERR_IO && has_msg(c->name) && c->calls == k0, "send to rank %d of %d: MGT_ERR_IO naming the group (%s)",
	       p, p, mgt_err_msg());
	st = c->ops->recv(c, b, 8, MGT_DT_I64, prev, -1);
	RCHECK(st == MGT_ERR_IO && has_msg("tag -1"), "recv with tag -1: MGT_ERR_IO (%s)", mgt_err_msg());
	st = c->ops->send(c, a, 5, MGT_DT_I64, next, 7);
	if (!st) st = c->ops->send(c, a, 8, MGT_DT_I64, next, 8);
	RCHECK(st == MGT_OK, "send 5 elements with tag 7 and 8 with tag 8");
	st = c->ops->recv(c, b, 8, MGT_DT_I64, prev, 7);
	RCHECK(st == MGT_ERR_IO && has_msg("5 elements arrived, expected 8") && has_msg(c->name),
	       "recv of 8 elements when 5 come: MGT_ERR_IO (%s)", mgt_err_msg());
	st = c->ops->recv(c, b, 5, MGT_DT_I64, prev, 8);
	RCHECK(st == MGT_ERR_IO && has_msg("receive from rank") && has_msg(c->name),
	       "recv of 5 elements when 8 come: MGT_ERR_IO (%s)", mgt_err_msg());
	a[0] = 40 + q;
	st = c->ops->send(c, a, 1, MGT_DT_I64, q, 3);
	if (!st) st = c->ops->recv(c, b, 1, MGT_DT_I64, q, 3);
	RCHECK(st == MGT_OK && b[0] == 40 + q, "send to itself, then recv");
	RCHECK(c->ops->barrier(c) == MGT_OK, "barrier after the errors");
}

/* ---- alltoallv ------------------------------------------------------------------------------ */

/* One alltoallv on c with a2a_count's counts: every received element and every gap of dst
 * checked, bytes_sent = sum over r != rank of scount[r] * element size, one call.
 * in_place: src and dst the same buffer (sym counts, the same displacements). */
static int try_alltoallv(mgt_comm *c, mgt_comm_dtype dt, int seed, size_t unit, int gaps, int in_place)
{
	int p = c->size, me_g = c->rank;
	size_t es = mgt_comm_dtype_size(dt), pp = (size_t)p;
	int64_t *sc = xmalloc(4 * pp * sizeof *sc), *sd = sc + p, *rc = sc + 2 * p, *rd = sc + 3 * p;
	for (int r = 0; r < p; r++) {
		sc[r] = (int64_t)a2a_count(me_g, r, seed, unit, in_place);
		rc[r] = (int64_t)a2a_count(r, me_g, seed, unit, in_place);
	}
	size_t sn = a2a_layout(p, sc, sd, gaps, 0), rn = a2a_layout(p, rc, rd, gaps, !in_place);
	if (in_place) { /* the counts are symmetric: the same blocks */
		memcpy(rd, sd, pp * sizeof *rd);
		rn = sn;
	}
	char *src = xmalloc(sn * es), *dst = in_place ? src : xmalloc(rn * es);
	for (size_t i = 0; i < rn; i++) put(dst, dt, i, SENTINEL);
	for (size_t i = 0; i < sn; i++) put(src, dt, i, SENTINEL);
	double bytes = 0;
	for (int r = 0; r < p; r++) {
		for (size_t i = 0; i < (size_t)sc[r]; i++) put(src, dt, (size_t)sd[r] + i, aval(me_g, r, i, dt));
		if (r != me_g) bytes += (double)sc[r] * (double)es;
	}
	double b0 = c->bytes_sent;
	uint64_t k0 = c->calls;
	int ok = mgt_comm_alltoallv(c, dst, rc, rd, src, sc, sd, dt) == MGT_OK;
	ok = ok && counted(c, b0, k0, p > 1 ? bytes : 0);
	/* every element of dst: in block r the elements rank r sent, elsewhere the sentinel */
	for (size_t i = 0; i < rn && ok; i++) {
		int64_t e = SENTINEL;
		for (int r = 0; r < p; r++)
			if (i >= (size_t)rd[r] && i < (size_t)(rd[r] + rc[r])) e = aval(r, me_g, i - (size_t)rd[r], dt);
		ok = get(dst, dt, i) == e;
	}
	if (!in_place) {
		for (int r = 0; r < p && ok; r++) /* src is read only */
			for (size_t i = 0; i < (size_t)sc[r] && ok; i++) ok = get(src, dt, (size_t)sd[r] + i) == aval(me_g, r, i, dt);
		free(dst);
	}
	free(src);
	free(sc);
	return ok;
}

/* alltoallv on c for every dtype: uneven and zero counts, gaps and side by side, in place;
 * units up to big. */
static void test_alltoallv(mgt_comm *c, const char *what, size_t big)
{
	const size_t units[] = { 0, 1, 5, big };
	for (int d = 0; d < 4; d++) {
		int ok[3] = { 1, 1, 1 };
		for (size_t u = 0; u < sizeof units / sizeof *units; u++)
			for (int seed = 0; seed < 4; seed++) {
				ok[0] &= try_alltoallv(c, dtypes[d], seed, units[u], 1, 0);
				ok[1] &= try_alltoallv(c, dtypes[d], seed, units[u], 0, 0);
				ok[2] &= try_alltoallv(c, dtypes[d], seed, units[u], 1, 1);
			}
		const char *how[] = { "blocks out of rank order with gaps", "blocks side by side", "src == dst" };
		for (int i = 0; i < 3; i++)
			RCHECK(ok[i], "%s (%s group of %d): alltoallv of %s, %s, uneven and zero counts up to %zu: every "
			       "element, gaps untouched, bytes_sent, calls", what, c->name, c->size, dt_name[d], how[i],
			       3 * big + 2);
	}
}

/* Bad arguments: refused on every rank before anything is sent (all ranks pass the same
 * mistake, so nobody waits), nothing counted. */
static void test_alltoallv_errors(mgt_comm *c)
{
	int p = c->size, q = c->rank;
	int64_t *sc = xmalloc(4 * (size_t)p * sizeof *sc), *sd = sc + p, *rc = sc + 2 * p, *rd = sc + 3 * p;
	int32_t buf[4] = { 0 };
	for (int r = 0; r < 4 * p; r++) sc[r] = 0;
	uint64_t k0 = c->calls;
	sc[(q + 1) % p] = -2;
	mgt_status st = mgt_comm_alltoallv(c, buf, rc, rd, buf, sc, sd, MGT_DT_I32);
	RCHECK(st == MGT_ERR_IO && has_msg("send count -2") && has_msg(c->name) && c->calls == k0,
	       "alltoallv with a negative count: MGT_ERR_IO naming the group, not counted (%s)", mgt_err_msg());
	sc[(q + 1) % p] = 0;
	rd[q] = -1;
	st = mgt_comm_alltoallv(c, buf, rc, rd, buf, sc, sd, MGT_DT_I32);
	RCHECK(st == MGT_ERR_IO && has_msg("receive displacement -1"), "alltoallv with a negative displacement: "
	       "MGT_ERR_IO (%s)", mgt_err_msg());
	rd[q] = 0;
	sc[q] = 2;
	rc[q] = 1;
	st = mgt_comm_alltoallv(c, buf, rc, rd, buf, sc, sd, MGT_DT_I32);
	RCHECK(st == MGT_ERR_IO && has_msg("sends itself 2 elements but receives 1"),
	       "alltoallv with scount[rank] != rcount[rank]: MGT_ERR_IO (%s)", mgt_err_msg());
	sd[q] = INT64_MAX;
	st = mgt_comm_alltoallv(c, buf, rc, rd, buf, sc, sd, MGT_DT_I32);
	RCHECK(st == MGT_ERR_IO && has_msg("beyond the address space"), "alltoallv with a block beyond the address "
	       "space: MGT_ERR_IO (%s)", mgt_err_msg());
	free(sc);
	RCHECK(c->calls == k0 && c->ops->barrier(c) == MGT_OK, "after the refused alltoallv calls: nothing counted, "
	       "the group still works");
}

/* ---- groups ------------------------------------------------------------------------------- */

static int rank_of(const mgt_parallel *ps, int t, int c, int d, int p)
{
	return t + ps->tp * (c + ps->cp * (d + ps->dp * p));
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* The world ranks of group g (0 world, 1 tensor, 2 data, 3 pipeline, 4 model, 5 embedding,
 * 6 context, 7 data-context) of this rank, in group order; returns how many. */
static int members(const mgt_parallel *ps, int g, int *out)
{
	int n = 0, t = ps->tp_rank, c = ps->cp_rank, d = ps->dp_rank, p = ps->pp_rank;
	switch (g) {
	case 0: for (int r = 0; r < ps->world_size; r++) out[n++] = r; break;
	case 1: for (int i = 0; i < ps->tp; i++) out[n++] = rank_of(ps, i, c, d, p); break;
	case 2: for (int i = 0; i < ps->dp; i++) out[n++] = rank_of(ps, t, c, i, p); break;
	case 3: for (int i = 0; i < ps->pp; i++) out[n++] = rank_of(ps, t, c, d, i); break;
	case 6: for (int i = 0; i < ps->cp; i++) out[n++] = rank_of(ps, t, i, d, p); break;
	case 7: /* ordered by cp + CP * dp */
		for (int i = 0; i < ps->dp; i++)
			for (int k = 0; k < ps->cp; k++) out[n++] = rank_of(ps, t, k, i, p);
		break;
	case 4:
		for (int i = 0; i < ps->pp; i++)
			for (int k = 0; k < ps->tp; k++) out[n++] = rank_of(ps, k, c, d, i);
		qsort(out, (size_t)n, sizeof *out, cmp_int);
		break;
	default:
		if (ps->pp > 1 && (p == 0 || p == ps->pp - 1)) {
			out[n++] = rank_of(ps, t, c, d, 0);
			out[n++] = rank_of(ps, t, c, d, ps->pp - 1);
		} else {
			out[n++] = ps->world_rank;
		}
	}
	return n;
}

/* c has the expected name and members (an allgather of world ranks inside it, done whatever the
 * other checks say so that a wrong group fails instead of hanging its other members). */
static int group_ok(mgt_comm *c, const char *name, const int *expect, int n, int world_rank)
{
	if (!c) return 0;
	int32_t mine = world_rank, *got = xmalloc((size_t)c->size * sizeof *got);
	int ok = c->ops->allgather(c, got, &mine, 1, MGT_DT_I32) == MGT_OK && !strcmp(c->name, name) &&
		 c->size == n && c->rank >= 0 && c->rank < n && got[c->rank] == world_rank;
	for (int i = 0; i < n && ok; i++) ok = got[i] == expect[i];
	free(got);
	return ok;
}

static void test_layout(int tp, int pp, int cp)
{
	int W = mgt_parallel_world_size(), DP = W / (tp * pp * cp);
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init(&ps, tp, pp, cp);
	RCHECK(st == MGT_OK, "layout tp %d pp %d cp %d over %d: mgt_parallel_init", tp, pp, cp, W);
	if (st) return;
	int r = ps.world_rank;
	RCHECK(ps.world_size == W && r == me && ps.tp == tp && ps.pp == pp && ps.cp == cp && ps.dp == DP &&
	       r == ps.tp_rank + tp * (ps.cp_rank + cp * (ps.dp_rank + DP * ps.pp_rank)) &&
	       ps.tp_rank < tp && ps.pp_rank < pp && ps.cp_rank < cp && ps.dp_rank < DP,
	       "layout tp %d pp %d cp %d: dp %d, rank %d = tp %d + TP*(cp %d + CP*(dp %d + DP*pp %d))", tp, pp,
	       cp, DP, r, ps.tp_rank, ps.cp_rank, ps.dp_rank, ps.pp_rank);
	mgt_comm *cs[] = { ps.world, ps.tp_comm, ps.dp_comm, ps.pp_comm, ps.mp_comm, ps.emb_comm, ps.cp_comm,
			   ps.dpcp_comm };
	const char *names[] = { "world", "tensor", "data", "pipeline", "model", "embedding", "context",
				cp == 1 ? "data" : "data-context" };
	int *expect = xmalloc((size_t)W * sizeof *expect);
	RCHECK((cp == 1) == (ps.dpcp_comm == ps.dp_comm), "layout tp %d pp %d cp %d: dpcp_comm is dp_comm exactly "
	       "when cp = 1", tp, pp, cp);
	for (int g = 0; g < 8; g++) {
		int n = members(&ps, g, expect);
		RCHECK(group_ok(cs[g], names[g], expect, n, r), "layout tp %d pp %d cp %d: %s group of %d, members "
		       "from an allgather inside it", tp, pp, cp, names[g], n);
	}
	RCHECK(ps.tp_comm->rank == ps.tp_rank && ps.dp_comm->rank == ps.dp_rank &&
	       ps.pp_comm->rank == ps.pp_rank && ps.cp_comm->rank == ps.cp_rank &&
	       ps.dpcp_comm->rank == ps.cp_rank + cp * ps.dp_rank,
	       "layout tp %d pp %d cp %d: group ranks are tp_rank, dp_rank, pp_rank, cp_rank, cp_rank + CP*dp_rank",
	       tp, pp, cp);
	if (tp == 2 && pp == 1 && cp == 1 && DP > 1) {
		static const size_t sizes[] = { 1, 33 };
		test_collectives(ps.dp_comm, "tp 2", sizes, 2);
	}
	if (pp == 2 && W > 2) {
		test_ring(ps.pp_comm);
		test_p2p_errors(ps.pp_comm);
	}
	free(expect);
	mgt_parallel_free(&ps);
	RCHECK(!ps.world && !ps.tp_comm && !ps.emb_comm && !ps.mp_comm, "mgt_parallel_free clears the state");
}

static void test_bad_layout(int tp, int pp, int cp, const char *msg)
{
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init(&ps, tp, pp, cp);
	RCHECK(st == MGT_ERR_USAGE && has_msg(msg) && !ps.world, "layout tp %d pp %d cp %d over %d: MGT_ERR_USAGE (%s)",
	       tp, pp, cp, mgt_parallel_world_size(), mgt_err_msg());
	if (!st) mgt_parallel_free(&ps);
}

static void test_layouts(void)
{
	static const int layouts[][3] = { { 1, 1, 1 }, { 2, 1, 1 }, { 1, 2, 1 }, { 2, 2, 1 }, { 2, 4, 1 },
					  { 4, 2, 1 }, { 1, 8, 1 }, { 8, 1, 1 }, { 4, 1, 1 }, { 1, 4, 1 },
					  { 2, 1, 2 }, { 1, 2, 2 }, { 2, 2, 2 }, { 1, 1, 2 }, { 1, 1, 8 } };
	int W = mgt_parallel_world_size();
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		const int *l = layouts[i];
		if (W % (l[0] * l[1] * l[2]) == 0)
			test_layout(l[0], l[1], l[2]);
		else
			test_bad_layout(l[0], l[1], l[2], "is not divisible by --tensor-model-parallel-size");
	}
	char msg[200];
	snprintf(msg, sizeof msg, "world size %d is not divisible by --tensor-model-parallel-size 3 x "
		 "--pipeline-model-parallel-size 1", W);
	test_bad_layout(3, 1, 1, msg);
	test_bad_layout(1, 1, 3, "x --context-parallel-size 3");
	test_bad_layout(2 * W, 1, 1, "is not divisible");
	test_bad_layout(1, 0, 1, "--pipeline-model-parallel-size must be at least 1 (got 0)");
}

/* ---- expert-parallel groups ---------------------------------------------------------------- */

/* Megatron's expert grid (RankGenerator(tp=TP, ep=EP, dp=EDP, pp=PP, cp=1), order
 * tp-cp-ep-dp-pp): the world rank of coordinates (t, e, d, p). */
static int erank(int TP, int EP, int EDP, int t, int e, int d, int p)
{
	return t + TP * (e + EP * (d + EDP * p));
}

static void test_layout_ep(int tp, int pp, int cp, int ep)
{
	int W = mgt_parallel_world_size(), EDP = W / (tp * pp * ep);
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init_ep(&ps, tp, pp, cp, ep);
	RCHECK(st == MGT_OK, "layout tp %d pp %d cp %d ep %d over %d: mgt_parallel_init_ep (%s)", tp, pp, cp, ep, W,
	       st ? mgt_err_msg() : "");
	if (st) return;
	int r = ps.world_rank, T = -1, E = -1, D = -1, P = -1, hits = 0;
	/* this rank's expert coordinates by search over the whole grid, not by division */
	for (int p = 0; p < pp; p++)
		for (int d = 0; d < EDP; d++)
			for (int e = 0; e < ep; e++)
				for (int t = 0; t < tp; t++)
					if (erank(tp, ep, EDP, t, e, d, p) == r) T = t, E = e, D = d, P = p, hits++;
	RCHECK(hits == 1 && ps.ep == ep && ps.edp == EDP && ps.ep_rank == E && ps.edp_rank == D && ps.tp_rank == T &&
	       ps.pp_rank == P && ps.cp_rank + cp * ps.dp_rank == ps.ep_rank + ep * ps.edp_rank &&
	       (cp > 1 || ps.dp_rank == ps.ep_rank + ep * ps.edp_rank),
	       "layout tp %d pp %d cp %d ep %d: edp %d, rank %d = tp %d + TP*(ep %d + EP*(edp %d + EDP*pp %d)) as "
	       "Megatron's expert grid says (tp %d, ep %d, edp %d, pp %d); cp %d + CP*dp %d = ep + EP*edp",
	       tp, pp, cp, ep, ps.edp, r, ps.tp_rank, ps.ep_rank, ps.edp_rank, ps.pp_rank, T, E, D, P, ps.cp_rank,
	       ps.dp_rank);
	int *expect = xmalloc((size_t)W * sizeof *expect), n;
	mgt_comm *cs[] = { ps.world, ps.tp_comm, ps.dp_comm, ps.pp_comm, ps.mp_comm, ps.emb_comm };
	const char *names[] = { "world", "tensor", "data", "pipeline", "model", "embedding" };
	int dense_ok = 1;
	for (int g = 0; g < 6; g++) {
		n = members(&ps, g, expect);
		dense_ok &= group_ok(cs[g], names[g], expect, n, r);
	}
	RCHECK(dense_ok, "layout tp %d pp %d cp %d ep %d: the six dense groups as without ep", tp, pp, cp, ep);
	n = 0;
	for (int e = 0; e < ep; e++) expect[n++] = erank(tp, ep, EDP, T, e, D, P);
	RCHECK(group_ok(ps.ep_comm, "expert", expect, n, r) && ps.ep_comm->rank == E,
	       "layout tp %d pp %d cp %d ep %d: expert group of %d (same tp, edp, pp; by ep_rank), members from an "
	       "allgather inside it", tp, pp, cp, ep, n);
	n = 0;
	for (int d = 0; d < EDP; d++) expect[n++] = erank(tp, ep, EDP, T, E, d, P);
	int alias = ps.edp_comm == ps.dp_comm;
	RCHECK(group_ok(ps.edp_comm, alias ? "data" : "expert-data", expect, n, r) && ps.edp_comm->rank == D &&
	       alias == (ep == 1 && cp == 1),
	       "layout tp %d pp %d cp %d ep %d: expert data group of %d (same tp, ep, pp; by edp_rank)%s", tp, pp, cp,
	       ep, n, alias ? ", the data group itself" : ", a communicator of its own");
	if (tp * pp * cp <= 2) test_alltoallv(ps.ep_comm, "expert group", 33);
	free(expect);
	mgt_parallel_free(&ps);
	RCHECK(!ps.ep_comm && !ps.edp_comm && !ps.dp_comm && !ps.world, "mgt_parallel_free clears the state (ep %d)", ep);
}

static void test_bad_ep(int tp, int pp, int cp, int ep, const char *msg)
{
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init_ep(&ps, tp, pp, cp, ep);
	RCHECK(st == MGT_ERR_USAGE && has_msg(msg) && !ps.world && !ps.ep_comm,
	       "layout tp %d pp %d cp %d ep %d over %d: MGT_ERR_USAGE (%s)", tp, pp, cp, ep, mgt_parallel_world_size(),
	       mgt_err_msg());
	if (!st) mgt_parallel_free(&ps);
}

static void test_layouts_ep(void)
{
	static const int layouts[][4] = { { 1, 1, 1, 1 }, { 1, 1, 1, 2 }, { 1, 1, 1, 4 }, { 1, 1, 1, 8 },
					  { 2, 1, 1, 2 }, { 2, 1, 1, 4 }, { 1, 2, 1, 2 }, { 1, 2, 1, 4 },
					  { 2, 2, 1, 2 }, { 4, 1, 1, 2 }, { 1, 4, 1, 2 }, { 2, 2, 1, 1 },
					  { 1, 1, 2, 1 }, { 1, 1, 2, 2 }, { 1, 1, 2, 4 }, { 2, 1, 2, 2 },
					  { 1, 2, 2, 2 }, { 1, 1, 4, 2 } };
	int W = mgt_parallel_world_size();
	char msg[300];
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		const int *l = layouts[i];
		int tpc = l[0] * l[1] * l[2];
		if (W % tpc) continue; /* the dense layout fails: test_layouts */
		int dp = W / tpc;
		if (dp * l[2] % l[3] == 0) {
			test_layout_ep(l[0], l[1], l[2], l[3]);
		} else if (l[2] == 1) {
			snprintf(msg, sizeof msg, "--expert-model-parallel-size %d does not divide the data-parallel size %d "
				 "(world size %d / (--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d))",
				 l[3], dp, W, l[0], l[1]);
			test_bad_ep(l[0], l[1], l[2], l[3], msg);
		} else {
			snprintf(msg, sizeof msg, "--expert-model-parallel-size %d does not divide the data-parallel size %d x "
				 "--context-parallel-size %d (world size %d", l[3], dp, l[2], W);
			test_bad_ep(l[0], l[1], l[2], l[3], msg);
		}
	}
	snprintf(msg, sizeof msg, "--expert-model-parallel-size 3 does not divide the data-parallel size %d", W);
	test_bad_ep(1, 1, 1, 3, msg);
	test_bad_ep(1, 1, 1, 2 * W, "does not divide the data-parallel size");
	test_bad_ep(1, 1, 1, 0, "--expert-model-parallel-size must be at least 1 (got 0)");
	test_bad_ep(3, 1, 1, 1, "is not divisible by --tensor-model-parallel-size 3");
	if (W >= 2) test_bad_ep(W, 1, 1, 2, "does not divide the data-parallel size 1 (world size");
}

/* ---- distributed-optimizer instances -------------------------------------------------------- */

/* The place of world rank w in its data x context group (cp + CP * dp, from Megatron's
 * tp-cp-dp-pp order). */
static int dpc_place(const mgt_parallel *ps, int w)
{
	int c = w / ps->tp % ps->cp, d = w / (ps->tp * ps->cp) % ps->dp;
	return c + ps->cp * d;
}

/* Megatron's instance groups (parallel_state.py initialize_model_parallel), from its recipe and
 * not from mgt's colors: the data x context ranks of this rank (members 7) cut into N slices
 * (intra: the slice holding this rank; inter: ranks_with_cp[j::I], j this rank's place in its
 * slice), the expert-data ranks likewise (create_hierarchical_groups level 0), and the world
 * ranks whose place lies in this rank's slice (the intra_dist_opt instance group). */
static void test_layout_hsdp(int tp, int pp, int cp, int ep, int N)
{
	int W = mgt_parallel_world_size(), EDP = W / (tp * pp * ep);
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init_hsdp(&ps, tp, pp, cp, ep, N);
	RCHECK(st == MGT_OK, "tp %d pp %d cp %d ep %d, %d instances over %d: mgt_parallel_init_hsdp (%s)", tp, pp, cp, ep,
	       N, W, st ? mgt_err_msg() : "");
	if (st) return;
	int r = ps.world_rank, *all = xmalloc((size_t)W * sizeof *all), *expect = xmalloc((size_t)W * sizeof *expect);
	int G = members(&ps, 7, all), I = G / N, pos = 0, n = 0;
	while (all[pos] != r) pos++;
	for (int i = pos / I * I; i < pos / I * I + I; i++) expect[n++] = all[i];
	RCHECK(ps.inst == N && ps.inst_rank == pos / I && group_ok(ps.idp_comm, N > 1 ? "data-intra" : ps.dpcp_comm->name,
	       expect, n, r), "tp %d pp %d cp %d ep %d, %d instances: intra group = slice %d of the data x context group",
	       tp, pp, cp, ep, N, pos / I);
	n = 0;
	for (int i = pos % I; i < G; i += I) expect[n++] = all[i];
	RCHECK(N == 1 ? !ps.odp_comm : group_ok(ps.odp_comm, "data-inter", expect, n, r),
	       "tp %d pp %d cp %d ep %d, %d instances: inter group = every %d-th data x context rank from place %d", tp,
	       pp, cp, ep, N, I, pos % I);
	n = 0;
	for (int w = 0; w < W; w++) if (dpc_place(&ps, w) / I == pos / I) expect[n++] = w;
	RCHECK(group_ok(ps.inst_comm, N > 1 ? "instance" : "world", expect, n, r),
	       "tp %d pp %d cp %d ep %d, %d instances: instance group = the %d world ranks of instance %d", tp, pp, cp,
	       ep, N, n, pos / I);
	int Ie = EDP / N, e0 = ps.edp_rank / Ie * Ie;
	n = 0;
	for (int d = e0; d < e0 + Ie; d++) expect[n++] = erank(tp, ep, EDP, ps.tp_rank, ps.ep_rank, d, ps.pp_rank);
	RCHECK(group_ok(ps.iedp_comm, N > 1 ? "expert-data-intra" : ps.edp_comm->name, expect, n, r) &&
	       ps.edp_rank / Ie == ps.inst_rank,
	       "tp %d pp %d cp %d ep %d, %d instances: expert intra group = expert-data ranks %d..%d, in the same "
	       "instance as the dense rows", tp, pp, cp, ep, N, e0, e0 + Ie - 1);
	free(all);
	free(expect);
	mgt_parallel_free(&ps);
	RCHECK(!ps.idp_comm && !ps.odp_comm && !ps.inst_comm, "mgt_parallel_free clears the instance groups");
}

static void test_layouts_hsdp(void)
{
	static const int layouts[][5] = { { 1, 1, 1, 1, 1 }, { 1, 1, 1, 1, 2 }, { 1, 1, 1, 1, 4 }, { 2, 1, 1, 1, 2 },
					  { 1, 2, 1, 1, 2 }, { 1, 1, 2, 1, 2 }, { 1, 1, 1, 2, 2 }, { 2, 1, 2, 1, 2 },
					  { 1, 1, 2, 2, 2 }, { 1, 1, 1, 8, 2 } };
	int W = mgt_parallel_world_size();
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		const int *l = layouts[i];
		int tpc = l[0] * l[1] * l[2];
		if (W % tpc || (W / (l[0] * l[1])) % (l[3] * l[4]) || W / (l[0] * l[1]) < l[3]) continue;
		test_layout_hsdp(l[0], l[1], l[2], l[3], l[4]);
	}
	char msg[200];
	snprintf(msg, sizeof msg, "--num-distributed-optimizer-instances 3 does not divide the data-parallel size %d", W);
	mgt_parallel ps;
	if (W % 3) {
		mgt_status st = mgt_parallel_init_hsdp(&ps, 1, 1, 1, 1, 3);
		RCHECK(st == MGT_ERR_USAGE && has_msg(msg) && !ps.world, "3 instances over %d: MGT_ERR_USAGE (%s)", W,
		       mgt_err_msg());
		if (!st) mgt_parallel_free(&ps);
	}
	if (W >= 2 && W % 2 == 0) {
		mgt_status st = mgt_parallel_init_hsdp(&ps, 1, 1, 1, W, 2);
		RCHECK(st == MGT_ERR_USAGE && has_msg("does not divide the expert-data-parallel size 1") && !ps.world,
		       "2 instances with EP %d over %d: MGT_ERR_USAGE (%s)", W, W, mgt_err_msg());
		if (!st) mgt_parallel_free(&ps);
	}
}

/* ---- one process ---------------------------------------------------------------------------- */

static void test_single_comm(void)
{
	mgt_comm *c = mgt_comm_single("solo");
	RCHECK(c && c->size == 1 && c->rank == 0 && !strcmp(c->name, "solo") && c->bytes_sent == 0 && c->calls == 0,
	       "mgt_comm_single: one rank, nothing counted yet");
	if (!c) return;
	float a[3] = { 1, 2, 3 }, g[3] = { 0 };
	int ok = c->ops->allreduce(c, a, 3, MGT_DT_F32, MGT_RED_SUM) == MGT_OK && a[0] == 1 && a[2] == 3;
	ok = ok && c->ops->allgather(c, g, a, 3, MGT_DT_F32) == MGT_OK && g[1] == 2;
	g[1] = 0;
	ok = ok && c->ops->reduce_scatter(c, g, a, 3, MGT_DT_F32) == MGT_OK && g[1] == 2;
	ok = ok && c->ops->broadcast(c, a, 3, MGT_DT_F32, 0) == MGT_OK && a[1] == 2;
	ok = ok && c->ops->barrier(c) == MGT_OK;
	RCHECK(ok && c->calls == 5 && c->bytes_sent == 0,
	       "single: identities and copies, 5 calls counted, no bytes");
	RCHECK(c->ops->send(c, a, 3, MGT_DT_F32, 0, 0) == MGT_ERR_IO && has_msg("solo group") &&
	       c->ops->recv(c, a, 3, MGT_DT_F32, 0, 1) == MGT_ERR_IO && c->calls == 5,
	       "single: send and recv are MGT_ERR_IO naming the group (%s)", mgt_err_msg());
	test_alltoallv(c, "single", 1000);
	test_alltoallv_errors(c);
	mgt_comm_destroy(c);
	mgt_comm_destroy(NULL);
}

static void test_single_state(void)
{
	mgt_parallel ps;
	RCHECK(mgt_parallel_init_single(&ps) == MGT_OK, "mgt_parallel_init_single");
	mgt_comm *cs[] = { ps.world, ps.tp_comm, ps.dp_comm, ps.pp_comm, ps.mp_comm, ps.emb_comm };
	const char *names[] = { "world", "tensor", "data", "pipeline", "model", "embedding" };
	int ok = ps.world_size == 1 && ps.world_rank == 0 && ps.tp == 1 && ps.pp == 1 && ps.dp == 1 &&
		 ps.cp == 1 && !ps.tp_rank && !ps.pp_rank && !ps.dp_rank && !ps.cp_rank;
	for (int g = 0; g < 6; g++)
		ok = ok && cs[g] && cs[g]->size == 1 && cs[g]->rank == 0 && !strcmp(cs[g]->name, names[g]);
	RCHECK(ok, "single state: sizes 1, ranks 0, six one-process groups with their names");
	RCHECK(ps.ep == 1 && ps.edp == 1 && !ps.ep_rank && !ps.edp_rank && ps.ep_comm && ps.ep_comm->size == 1 &&
	       !strcmp(ps.ep_comm->name, "expert") && ps.edp_comm == ps.dp_comm,
	       "single state: ep = edp = 1, a one-process expert group, edp_comm is dp_comm");
	if (ps.ep_comm) test_alltoallv(ps.ep_comm, "single state", 100);
	mgt_parallel_free(&ps);
	RCHECK(!ps.world && !ps.mp_comm && !ps.emb_comm, "mgt_parallel_free clears the single state");
}

#ifdef MGT_HAVE_MPI
/* Whether a launcher started us (the environment mgt_parallel_runtime_init looks at). */
static int launched(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE") ||
	       atoi(getenv("SLURM_NTASKS") ? getenv("SLURM_NTASKS") : "0") > 1;
}
#endif

static void test_runtime(int argc, char **argv)
{
	int W = mgt_parallel_world_size();
	RCHECK(mgt_parallel_runtime_init(&argc, &argv) == MGT_OK && mgt_parallel_world_size() == W && mgt_parallel_world_rank() == me,
	       "mgt_parallel_runtime_init again does nothing");
	RCHECK(W >= 1 && me >= 0 && me < W, "world rank %d of %d", me, W);
#ifdef MGT_HAVE_MPI
	RCHECK(mgt_parallel_active() == launched(), "MPI started exactly when a launcher started us (active %d)",
	       mgt_parallel_active());
#else
	RCHECK(!mgt_parallel_active() && W == 1, "without MPI: one process, not active");
#endif
	if (!mgt_parallel_active()) {
		mgt_parallel_abort(5);
		RCHECK(1, "mgt_parallel_abort returns when MPI is not active");
	}
}

/* ---- failure modes ------------------------------------------------------------------------ */

/* Rank r fails (abort: mgt_parallel_abort(3); else exit(2) without MPI knowing) while the others
 * wait in a barrier that never completes: mpirun must end the job. */
static int fail_on(int r, int abort_it)
{
	mgt_parallel ps;
	if (mgt_parallel_init(&ps, 1, 1, 1)) {
		fprintf(stderr, "test_parallel: %s\n", mgt_err_msg());
		return 1;
	}
	if (me == r) {
		fprintf(stderr, "test_parallel: rank %d of %d fails on purpose\n", me, ps.world_size);
		if (abort_it) mgt_parallel_abort(3);
		exit(abort_it ? 3 : 2);
	}
	ps.world->ops->barrier(ps.world);
	fprintf(stderr, "test_parallel: rank %d: the barrier returned\n", me);
	mgt_parallel_free(&ps);
	mgt_parallel_finalize();
	return 0;
}

/* ---- main ----------------------------------------------------------------------------------- */

/* The job's totals on every rank; rank 0 prints them. */
static int finish(mgt_comm *world)
{
	int64_t t[2] = { passed, failed };
	if (world && world->ops->allreduce(world, t, 2, MGT_DT_I64, MGT_RED_SUM) != MGT_OK) t[1]++;
	passed = (int)t[0];
	failed = (int)t[1];
	if (me == 0) return check_finish();
	return failed ? 1 : 0;
}

/* mgt_comm_mpi_pack_bytes: the pack scatter_chunks allocates, every rank's part side by side,
 * capped at MGT_MPI_PACK_BYTES (and within it for any group size and element size); nothing
 * for one rank. */
static void test_pack_bytes(void)
{
	size_t cap = MGT_MPI_PACK_BYTES;
	RCHECK(mgt_comm_mpi_pack_bytes(1, 1000, 4) == 0 && mgt_comm_mpi_pack_bytes(0, 1000, 4) == 0,
	      "pack bytes: 0 for one rank");
	RCHECK(mgt_comm_mpi_pack_bytes(2, 1000, 4) == 8000 && mgt_comm_mpi_pack_bytes(4, 1000, 2) == 8000,
	      "pack bytes: ranks x part x element size below the cap");
	RCHECK(mgt_comm_mpi_pack_bytes(4, cap, 4) == cap && mgt_comm_mpi_pack_bytes(2, cap / 8, 4) == cap,
	      "pack bytes: the cap for a part of the cap's size, and for one just reaching it");
	int ok = 1;
	for (int p = 2; p <= 7; p++)
		for (size_t es = 1; es <= 8; es *= 2) {
			size_t x = mgt_comm_mpi_pack_bytes(p, (size_t)1 << 30, es);
			ok &= x <= cap && x > cap - (size_t)p * es;
		}
	RCHECK(ok, "pack bytes: a part over the cap packs within (cap - ranks x element size, cap] for 2 to 7 ranks");
}

int main(int argc, char **argv)
{
	int die = -1, quit = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--have-mpi")) {
#ifdef MGT_HAVE_MPI
			return 0;
#else
			return 1;
#endif
		}
		if (!strcmp(argv[i], "--die-on-rank") && i + 1 < argc) die = atoi(argv[++i]);
		if (!strcmp(argv[i], "--exit-on-rank") && i + 1 < argc) quit = atoi(argv[++i]);
	}
	if (mgt_parallel_runtime_init(&argc, &argv)) {
		fprintf(stderr, "test_parallel: %s\n", mgt_err_msg());
		return 1;
	}
	me = mgt_parallel_world_rank();
	if (die >= 0 || quit >= 0) return fail_on(die >= 0 ? die : quit, die >= 0);

	test_runtime(argc, argv);
	test_single_comm();
	test_pack_bytes();
	test_single_state();
	mgt_parallel ps;
	mgt_status st = mgt_parallel_init(&ps, 1, 1, 1);
	RCHECK(st == MGT_OK, "mgt_parallel_init(1, 1, 1)");
	if (!st) {
		static const size_t sizes[] = { 0, 1, 7, 1000, 70001 };
		test_collectives(ps.world, "world", sizes, 5);
		test_alltoallv(ps.world, "world", 3000);
		test_alltoallv_errors(ps.world);
		if (ps.world_size > 1) {
			test_ring(ps.world);
			test_p2p_errors(ps.world);
		}
#ifdef MGT_HAVE_MPI
		static const size_t small[] = { 0, 1, 3, 7, 20 };
		mgt_parallel_max_count = 3; /* every operation split into MPI calls of at most 3 elements */
		test_collectives(ps.world, "world, 3 elements per MPI call", small, 5);
		test_alltoallv(ps.world, "world, blocks over 3 elements as derived types", 20);
		big_n = 50;
		if (ps.world_size > 1) test_ring(ps.world);
		mgt_parallel_max_count = (size_t)-1;
		mgt_parallel_max_offset = 16; /* blocks from byte 17 on: the offset in a derived type */
		test_alltoallv(ps.world, "world, offsets over 16 bytes in derived types", 20);
		mgt_parallel_max_count = 3;
		test_alltoallv(ps.world, "world, both", 20);
		mgt_parallel_max_count = (size_t)-1;
		mgt_parallel_max_offset = (size_t)-1;
#endif
	}
	test_layouts();
	test_layouts_ep();
	test_layouts_hsdp();
	int rc = finish(ps.world);
	if (!st) mgt_parallel_free(&ps);
	mgt_parallel_finalize();
	return rc;
}
