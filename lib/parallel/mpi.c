/* lib/parallel/mpi.c: the process runtime and the MPI communicator (host buffers, the CPU backend).
 *
 * Built with MPI (make MPI=1 defines MGT_HAVE_MPI): mgt_parallel_runtime_init starts MPI only when a launcher
 * started this process, so a plain run never touches MPI.  Groups are MPI_Comm_split of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN; operations larger than INT_MAX elements are split into
 * several MPI calls.  Built without MPI: the world is one process and the runtime functions are
 * the trivial ones.
 */
#include "parallel.h"
#include "parallel_impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of environment variable name, or -1 when unset or not a number. */
static long env_long(const char *name)
{
	const char *s = getenv(name);
	char *end;
	if (!s || !*s) return -1;
	long v = strtol(s, &end, 10);
	return *end ? -1 : v;
}

/* Whether a launcher (mpirun, mpiexec, srun) started this process: 0 if not, else the number of
 * processes it says the job has (1 when it does not say; a lower bound for PMIx). */
static long launched_size(void)
{
	long n;
	if ((n = env_long("OMPI_COMM_WORLD_SIZE")) >= 1) return n;
	if ((n = env_long("PMI_SIZE")) >= 1) return n;
	if ((n = env_long("SLURM_NTASKS")) > 1) return n;
	if (getenv("PMIX_RANK")) return env_long("PMIX_RANK") > 0 ? 2 : 1;
	return 0;
}

/* MGT_ERR_USAGE unless the sizes are at least 1 and tp*pp*cp divides the world size. */
static mgt_status check_layout(int world, int tp, int pp, int cp, const char *hint)
{
	const char *flag[] = { "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
			       "--context-parallel-size" };
	int size[] = { tp, pp, cp };
	for (int i = 0; i < 3; i++)
		if (size[i] < 1)
			return mgt_err(MGT_ERR_USAGE, "%s must be at least 1 (got %d)", flag[i], size[i]);
	long long prod = (long long)tp * pp * cp;
	if (world % prod == 0) return MGT_OK;
	char cps[64] = "";
	if (cp != 1) snprintf(cps, sizeof cps, " x %s %d", flag[2], cp);
	return mgt_err(MGT_ERR_USAGE, "world size %d is not divisible by %s %d x %s %d%s%s", world, flag[0],
		       tp, flag[1], pp, cps, hint);
}

/* MGT_ERR_USAGE unless ep >= 1 divides the data-parallel size times cp (Megatron's
 * world % (ETP*EP*PP) == 0 with ETP = TP).  After check_layout. */
static mgt_status check_ep(int world, int tp, int pp, int cp, int ep)
{
	if (ep < 1) return mgt_err(MGT_ERR_USAGE, "--expert-model-parallel-size must be at least 1 (got %d)", ep);
	int dp = world / (tp * pp * cp);
	if ((dp * cp) % ep == 0) return MGT_OK;
	if (cp == 1)
		return mgt_err(MGT_ERR_USAGE, "--expert-model-parallel-size %d does not divide the data-parallel size %d "
			       "(world size %d / (--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d))",
			       ep, dp, world, tp, pp);
	return mgt_err(MGT_ERR_USAGE, "--expert-model-parallel-size %d does not divide the data-parallel size %d x "
		       "--context-parallel-size %d (world size %d / (--tensor-model-parallel-size %d x "
		       "--pipeline-model-parallel-size %d x --context-parallel-size %d))", ep, dp, cp, world, tp, pp, cp);
}

/* MGT_ERR_USAGE unless instances >= 1 divides the data x context-parallel size and the
 * expert-data-parallel size (megatron/core/parallel_state.py: "Data parallel size should be
 * divisible by partial DistOpt shard factor", the same for expert data).  After check_ep. */
static mgt_status check_instances(int world, int tp, int pp, int cp, int ep, int n)
{
	const char *f = "--num-distributed-optimizer-instances";
	if (n < 1) return mgt_err(MGT_ERR_USAGE, "%s must be at least 1 (got %d)", f, n);
	int dpc = world / (tp * pp), edp = dpc / ep;
	if (dpc % n)
		return mgt_err(MGT_ERR_USAGE, "%s %d does not divide the data-parallel size %d (world size %d / "
			       "(--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d), times "
			       "--context-parallel-size)", f, n, dpc, world, tp, pp);
	if (edp % n)
		return mgt_err(MGT_ERR_USAGE, "%s %d does not divide the expert-data-parallel size %d (the data-parallel "
			       "size %d / --expert-model-parallel-size %d)", f, n, edp, dpc, ep);
	return MGT_OK;
}

#ifdef MGT_HAVE_MPI
#include <mpi.h>

/* The most elements one MPI call moves; larger operations take several calls.  A variable so
 * that tests can make it small (tests/unit/test_parallel.c); values outside 1..INT_MAX mean INT_MAX. */
size_t mgt_parallel_max_count = INT_MAX;
/* The furthest byte offset into a buffer an MPI_Alltoallw block may start at as a plain
 * displacement (an int); beyond it a derived datatype carries the offset.  A variable so that
 * tests can make it small; values above INT_MAX mean INT_MAX. */
size_t mgt_parallel_max_offset = INT_MAX;

typedef struct {
	int active, owned, finalized, size, rank, tag_ub;
	MPI_Op op16[2][2]; /* [bf16, f16][sum, max]: user reductions of 16-bit floats (op16_make) */
} runtime;
static runtime rt = { .size = 1, .tag_ub = 32767 };

/* ---- reductions of 16-bit floats ---------------------------------------------------------
 * MPI has no bf16 or fp16 type, so these move as MPI_UINT16_T and reduce with user operations:
 * each combination widens both operands to fp32 (exactly), adds them (or takes the larger) in fp32
 * and rounds the result to the 16-bit type to nearest even (mgt_f32_to_bf16 / mgt_f32_to_f16):
 * what a 16-bit NCCL reduction computes, one rounding per combination.  A NaN operand makes NaN
 * (max included), so an overflow anywhere still reaches every rank. */
static inline float op16_max(float a, float b) { return a != a || b != b ? a + b : a > b ? a : b; }

#define OP16(name, wid, nar, comb)                                                                \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt)                       \
	{                                                                                         \
		(void)dt;                                                                         \
		const uint16_t *a = in;                                                           \
		uint16_t *b = inout;                                                              \
		for (int i = 0; i < *len; i++) b[i] = nar(comb(wid(a[i]), wid(b[i])));             \
	}
#define OP16_SUM(a, b) ((a) + (b))
OP16(op16_bf16_sum, mgt_bf16_to_f32, mgt_f32_to_bf16, OP16_SUM)
OP16(op16_bf16_max, mgt_bf16_to_f32, mgt_f32_to_bf16, op16_max)
OP16(op16_f16_sum, mgt_f16_to_f32, mgt_f32_to_f16, OP16_SUM)
OP16(op16_f16_max, mgt_f16_to_f32, mgt_f32_to_f16, op16_max)

static int op16_make(void)
{
	MPI_User_function *f[2][2] = { { op16_bf16_sum, op16_bf16_max }, { op16_f16_sum, op16_f16_max } };
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 2; o++) {
			int rc = MPI_Op_create(f[t][o], 1, &rt.op16[t][o]);
			if (rc != MPI_SUCCESS) return rc;
		}
	return MPI_SUCCESS;
}

static void op16_free(void)
{
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 2; o++)
			if (rt.op16[t][o] != MPI_OP_NULL) MPI_Op_free(&rt.op16[t][o]);
}

/* The MPI operation reducing elements of dt with op. */
static MPI_Op mpi_op(mgt_comm_dtype dt, mgt_redop op)
{
	int o = op == MGT_RED_MAX;
	if (dt == MGT_DT_BF16 || dt == MGT_DT_F16) return rt.op16[dt == MGT_DT_F16][o];
	return o ? MPI_MAX : MPI_SUM;
}

/* A send in flight: MPI_Isend's request, the copy it sends from and its peer, for messages. */
typedef struct {
	MPI_Request req;
	void *buf;
	int peer, tag;
} pending_send;

typedef struct {
	MPI_Comm comm;
	pending_send *pend;
	size_t npend, cap;
} mpi_impl;

static MPI_Datatype mpi_type(mgt_comm_dtype dt)
{
	switch (dt) {
	case MGT_DT_F32: return MPI_FLOAT;
	case MGT_DT_F64: return MPI_DOUBLE;
	case MGT_DT_I32: return MPI_INT32_T;
	case MGT_DT_BF16: case MGT_DT_F16: return MPI_UINT16_T; /* reduced with mpi_op's user operations */
	default: return MPI_INT64_T;
	}
}

static MPI_Comm comm_of(const mgt_comm *c)
{
	return ((const mpi_impl *)c->impl)->comm;
}

static const char *mpi_errstr(int rc, char *buf)
{
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
	return buf;
}

/* MGT_ERR_IO naming the group, the operation, the peer (peer < 0: none) and MPI's message. */
static mgt_status mpi_fail(const mgt_comm *c, int rc, const char *what, int peer, int tag)
{
	char msg[MPI_MAX_ERROR_STRING], who[64] = "";
	if (peer >= 0) snprintf(who, sizeof who, " rank %d (tag %d)", peer, tag);
	return mgt_err(MGT_ERR_IO, "%s group: %s%s failed on rank %d of %d: %s", c->name, what, who, c->rank,
		       c->size, mpi_errstr(rc, msg));
}

static size_t chunk_of(size_t left)
{
	size_t lim = mgt_parallel_max_count;
	if (lim < 1 || lim > INT_MAX) lim = INT_MAX;
	return left < lim ? left : lim;
}

/* A piece of a collective: at most chunk_of's count, and at most MGT_MPI_PACK_BYTES over all
 * `ranks` parts of elements of es bytes (OpenMPI's algorithms for large messages allocate
 * temporaries as large as the message they are given). */
static size_t piece_of(size_t left, size_t es, size_t ranks)
{
	size_t lim = MGT_MPI_PACK_BYTES / es / (ranks ? ranks : 1);
	size_t m = chunk_of(left);
	return m < lim ? m : lim ? lim : 1;
}


/* ---- sends in flight ---------------------------------------------------------------------- */

/* Complete sends that are done (wait: all of them); the first failure is returned. */
static mgt_status settle(mgt_comm *c, int wait)
{
	mpi_impl *im = c->impl;
	mgt_status st = MGT_OK;
	size_t k = 0;
	for (size_t i = 0; i < im->npend; i++) {
		pending_send *p = &im->pend[i];
		int done = 1, rc = wait ? MPI_Wait(&p->req, MPI_STATUS_IGNORE)
					: MPI_Test(&p->req, &done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS && !st) st = mpi_fail(c, rc, "send to", p->peer, p->tag);
		if (done || rc != MPI_SUCCESS)
			free(p->buf);
		else
			im->pend[k++] = *p;
	}
	im->npend = k;
	return st;
}

/* MPI_Isend of m elements at buf from a copy, which stays in the pending list until sent. */
static mgt_status send_chunk(mgt_comm *c, const void *buf, size_t m, mgt_comm_dtype dt, int peer, int tag)
{
	mpi_impl *im = c->impl;
	size_t bytes = m * mgt_comm_dtype_size(dt);
	if (im->npend == im->cap) {
		size_t cap = im->cap ? 2 * im->cap : 16;
		pending_send *p = mgt_realloc(im->pend, cap * sizeof *p);
		if (!p) return MGT_ERR_NOMEM;
		im->pend = p;
		im->cap = cap;
	}
	pending_send *p = &im->pend[im->npend];
	if (!(p->buf = mgt_malloc(bytes ? bytes : 1))) return MGT_ERR_NOMEM;
	if (bytes) memcpy(p->buf, buf, bytes);
	int rc = MPI_Isend(p->buf, (int)m, mpi_type(dt), peer, tag, im->comm, &p->req);
	if (rc != MPI_SUCCESS) {
		free(p->buf);
		return mpi_fail(c, rc, "send to", peer, tag);
	}
	p->peer = peer;
	p->tag = tag;
	im->npend++;
	return MGT_OK;
}

/* ---- the operations ----------------------------------------------------------------------- */

static mgt_status mpi_allreduce(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op)
{
	size_t es = mgt_comm_dtype_size(dt);
	mgt_status st = settle(c, 0);
	if (st) return st;
	for (size_t off = 0, m; off < n; off += m) {
		m = piece_of(n - off, es, 1);
		int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)m, mpi_type(dt), mpi_op(dt, op),
				       comm_of(c));
		if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "allreduce", -1, 0);
	}
	mgt_comm_count(c, 2.0 * (c->size - 1) / c->size * (double)(n * es));
	return MGT_OK;
}

/* One MPI_Allgather of elements [off, off + m) of every rank's n: rank i's piece lands at
 * d + i * n (a receive type of m elements with the extent of n). */
static int gather_chunk(MPI_Comm comm, char *d, const void *s, size_t m, size_t n, mgt_comm_dtype dt)
{
	MPI_Datatype t = mpi_type(dt), blk, spaced;
	if (m == n) return MPI_Allgather(s, (int)m, t, d, (int)m, t, comm);
	int rc = MPI_Type_contiguous((int)m, t, &blk);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Type_create_resized(blk, 0, (MPI_Aint)(n * mgt_comm_dtype_size(dt)), &spaced);
	MPI_Type_free(&blk);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Type_commit(&spaced);
	if (rc == MPI_SUCCESS) rc = MPI_Allgather(s, (int)m, t, d, 1, spaced, comm);
	MPI_Type_free(&spaced);
	return rc;
}

static mgt_status mpi_allgather(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt), bytes = n * es;
	char *d = dst;
	const char *s = src;
	int in_place = s == d + (size_t)c->rank * bytes;
	void *copy = NULL;
	mgt_status st = settle(c, 0);
	if (st) return st;
	if (!in_place && mgt_comm_overlaps(d, (size_t)c->size * bytes, s, bytes)) {
		if (!(copy = mgt_malloc(bytes))) return MGT_ERR_NOMEM;
		s = memcpy(copy, s, bytes);
	}
	for (size_t off = 0, m; off < n; off += m) {
		m = piece_of(n - off, es, (size_t)c->size);
		int rc = gather_chunk(comm_of(c), d + off * es, in_place ? MPI_IN_PLACE : s + off * es, m, n, dt);
		if (rc != MPI_SUCCESS) {
			free(copy);
			return mpi_fail(c, rc, "allgather", -1, 0);
		}
	}
	free(copy);
	mgt_comm_count(c, (double)(c->size - 1) * (double)bytes);
	return MGT_OK;
}

/* Reduce-scatter in pieces: [off, off + m) of every rank's block packed side by side, one
 * MPI_Reduce_scatter_block each, the pack buffer at most MGT_MPI_PACK_BYTES.  Always so, also
 * when one call could take the whole message: OpenMPI's reduce_scatter_block gathers the whole
 * message into temporaries on one rank (measured: two copies of a gradient buffer), which
 * piecewise stays within a few packs (mgt_comm_mpi_scratch_bytes). */
static mgt_status scatter_chunks(mgt_comm *c, char *out, const char *src, size_t n, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size;
	size_t m0 = piece_of(n, es, p);
	char *pack = mgt_malloc(p * m0 * es);
	if (!pack) return MGT_ERR_NOMEM;
	int rc = MPI_SUCCESS;
	for (size_t off = 0, m; off < n && rc == MPI_SUCCESS; off += m) {
		m = n - off < m0 ? n - off : m0;
		for (size_t i = 0; i < p; i++) memcpy(pack + i * m * es, src + (i * n + off) * es, m * es);
		rc = MPI_Reduce_scatter_block(pack, out + off * es, (int)m, mpi_type(dt), mpi_op(dt, MGT_RED_SUM),
					      comm_of(c));
	}
	free(pack);
	return rc == MPI_SUCCESS ? MGT_OK : mpi_fail(c, rc, "reduce_scatter", -1, 0);
}

static mgt_status mpi_reduce_scatter(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt), bytes = n * es;
	char *out = dst, *copy = NULL;
	mgt_status st = settle(c, 0);
	if (st) return st;
	/* dst as this rank's own block of src needs no copy: scatter_chunks packs every piece of
	 * src before it writes that piece of the result, and a piece of the result lies in the
	 * piece of the own block just packed */
	bool own = (const char *)dst == (const char *)src + (size_t)c->rank * bytes;
	if (!own && mgt_comm_overlaps(dst, bytes, src, (size_t)c->size * bytes) && !(out = copy = mgt_malloc(bytes)))
		return MGT_ERR_NOMEM;
	if (n) st = scatter_chunks(c, out, src, n, dt);
	if (copy && !st) memcpy(dst, copy, bytes);
	free(copy);
	if (!st) mgt_comm_count(c, (double)(c->size - 1) * (double)bytes);
	return st;
}

static mgt_status check_peer(const mgt_comm *c, const char *what, int peer, int tag)
{
	if (peer < 0 || peer >= c->size)
		return mgt_err(MGT_ERR_IO, "%s group: %s rank %d, which is not in the group (size %d)", c->name,
			       what, peer, c->size);
	if (tag < 0 || tag > rt.tag_ub)
		return mgt_err(MGT_ERR_IO, "%s group: %s rank %d with tag %d (MPI allows 0 to %d)", c->name, what,
			       peer, tag, rt.tag_ub);
	return MGT_OK;
}

static mgt_status mpi_broadcast(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root)
{
	size_t es = mgt_comm_dtype_size(dt);
	mgt_status st = check_peer(c, "broadcast from", root, 0);
	if (!st) st = settle(c, 0);
	if (st) return st;
	for (size_t off = 0, m; off < n; off += m) {
		m = chunk_of(n - off);
		int rc = MPI_Bcast((char *)buf + off * es, (int)m, mpi_type(dt), root, comm_of(c));
		if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "broadcast from", root, 0);
	}
	mgt_comm_count(c, c->rank == root ? (double)(n * es) : 0);
	return MGT_OK;
}

static mgt_status mpi_send(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	size_t es = mgt_comm_dtype_size(dt), off = 0;
	mgt_status st = check_peer(c, "send to", peer, tag);
	if (!st) st = settle(c, 0);
	if (st) return st;
	do { /* at least one message, also for n == 0 */
		size_t m = chunk_of(n - off);
		if ((st = send_chunk(c, (const char *)buf + off * es, m, dt, peer, tag))) return st;
		off += m;
	} while (off < n);
	mgt_comm_count(c, (double)(n * es));
	return MGT_OK;
}

static mgt_status mpi_recv(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	size_t es = mgt_comm_dtype_size(dt), off = 0;
	mgt_status st = check_peer(c, "receive from", peer, tag);
	if (!st) st = settle(c, 0);
	if (st) return st;
	for (;;) { /* at least one message, also for n == 0 */
		size_t m = chunk_of(n - off);
		MPI_Status status;
		int got = -1, rc = MPI_Recv((char *)buf + off * es, (int)m, mpi_type(dt), peer, tag, comm_of(c), &status);
		if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "receive from", peer, tag);
		MPI_Get_count(&status, mpi_type(dt), &got);
		if (got != (int)m)
			return mgt_err(MGT_ERR_IO, "%s group: receive from rank %d (tag %d): %d elements arrived, "
				       "expected %zu", c->name, peer, tag, got, m);
		if ((off += m) >= n) break;
	}
	mgt_comm_count(c, 0);
	return MGT_OK;
}

static mgt_status mpi_barrier(mgt_comm *c)
{
	mgt_status st = settle(c, 1);
	if (st) return st;
	int rc = MPI_Barrier(comm_of(c));
	if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "barrier", -1, 0);
	mgt_comm_count(c, 0);
	return MGT_OK;
}

static void mpi_destroy(mgt_comm *c)
{
	mpi_impl *im = c->impl;
	int done = 0;
	MPI_Finalized(&done);
	if (!done) {
		settle(c, 1);
		MPI_Comm_free(&im->comm);
	}
	for (size_t i = 0; i < im->npend; i++) free(im->pend[i].buf);
	free(im->pend);
	free(im);
	free(c);
}

/* Peer r's block of n elements of t (es bytes) at byte offset off of the buffer, as MPI_Alltoallw
 * takes it: *count elements of *type at *displ bytes.  A block of at most chunk_of's count
 * (INT_MAX, or mgt_parallel_max_count) starting within INT_MAX bytes (or mgt_parallel_max_offset) is
 * the basic type itself; any
 * other a derived type at off (count 1, displacement 0; *made: free it) of whole chunks of
 * chunk_of's size and the rest.  The type signature is n elements of t either way, so peers
 * that describe the same block differently still match. */
static int block_type(size_t n, size_t off, MPI_Datatype t, size_t es, int *count, int *displ, MPI_Datatype *type,
		      int *made)
{
	size_t m = chunk_of(n), lim = mgt_parallel_max_offset < INT_MAX ? mgt_parallel_max_offset : INT_MAX;
	*made = 0;
	*type = t;
	if (!n || (m == n && off <= lim)) {
		*count = (int)n;
		*displ = n ? (int)off : 0;
		return MPI_SUCCESS;
	}
	size_t k = n / m, rest = n % m;
	if (k > INT_MAX) return MPI_ERR_COUNT;
	MPI_Datatype chunk, types[2];
	MPI_Aint disps[2];
	int lens[2], nb = 0, rc = MPI_Type_contiguous((int)m, t, &chunk);
	if (rc != MPI_SUCCESS) return rc;
	lens[nb] = (int)k;
	disps[nb] = (MPI_Aint)off;
	types[nb++] = chunk;
	if (rest) {
		lens[nb] = (int)rest;
		disps[nb] = (MPI_Aint)(off + k * m * es);
		types[nb++] = t;
	}
	rc = MPI_Type_create_struct(nb, lens, disps, types, type);
	MPI_Type_free(&chunk);
	if (rc != MPI_SUCCESS) return rc;
	if ((rc = MPI_Type_commit(type)) != MPI_SUCCESS) {
		MPI_Type_free(type);
		return rc;
	}
	*made = 1;
	*count = 1;
	*displ = 0;
	return MPI_SUCCESS;
}

/* One MPI_Alltoallw on every rank whatever its counts (parallel.h): per-peer counts, byte
 * displacements and types from block_type.  src overlapping the dst blocks is copied first.
 * A one-process group copies its block itself: OpenMPI's coll/self alltoallw (4.1) scales the
 * byte displacements by the type's extent, as alltoallv's, and writes out of bounds. */
static mgt_status mpi_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt), p = (size_t)c->size, send_end, recv_end;
	double sent;
	mgt_status st = mgt_comm_alltoallv_check(c, rcount, rdispl, scount, sdispl, es, &sent, &send_end, &recv_end);
	if (!st) st = settle(c, 0);
	if (st) return st;
	if (p == 1) {
		if (scount[0])
			memmove((char *)dst + (size_t)rdispl[0] * es, (const char *)src + (size_t)sdispl[0] * es,
				(size_t)scount[0] * es);
		mgt_comm_count(c, 0);
		return MGT_OK;
	}
	/* counts, displacements and "made" flags: send side [0, 3p), receive side [3p, 6p) */
	int *ints = mgt_malloc(p * 6 * sizeof *ints), overlap = mgt_comm_overlaps(dst, recv_end, src, send_end);
	MPI_Datatype *types = mgt_malloc(p * 2 * sizeof *types);
	void *copy = overlap ? mgt_malloc(send_end) : NULL;
	if (!ints || !types || (overlap && !copy)) {
		free(ints);
		free(types);
		free(copy);
		return MGT_ERR_NOMEM;
	}
	if (copy) src = memcpy(copy, src, send_end);
	int *scnt = ints, *sdsp = ints + p, *smade = ints + 2 * p;
	int *rcnt = ints + 3 * p, *rdsp = ints + 4 * p, *rmade = ints + 5 * p;
	MPI_Datatype *stype = types, *rtype = types + p, t = mpi_type(dt);
	memset(ints, 0, p * 6 * sizeof *ints);
	int rc = MPI_SUCCESS;
	for (size_t r = 0; r < p && rc == MPI_SUCCESS; r++) {
		rc = block_type((size_t)scount[r], (size_t)sdispl[r] * es, t, es, &scnt[r], &sdsp[r], &stype[r], &smade[r]);
		if (rc == MPI_SUCCESS)
			rc = block_type((size_t)rcount[r], (size_t)rdispl[r] * es, t, es, &rcnt[r], &rdsp[r], &rtype[r],
					&rmade[r]);
	}
	if (rc == MPI_SUCCESS) rc = MPI_Alltoallw(src, scnt, sdsp, stype, dst, rcnt, rdsp, rtype, comm_of(c));
	for (size_t r = 0; r < p; r++) {
		if (smade[r]) MPI_Type_free(&stype[r]);
		if (rmade[r]) MPI_Type_free(&rtype[r]);
	}
	free(ints);
	free(types);
	free(copy);
	if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "alltoallv", -1, 0);
	mgt_comm_count(c, sent);
	return MGT_OK;
}

static const mgt_comm_ops mpi_ops = {
	.allreduce = mpi_allreduce,
	.allgather = mpi_allgather,
	.reduce_scatter = mpi_reduce_scatter,
	.broadcast = mpi_broadcast,
	.send = mpi_send,
	.recv = mpi_recv,
	.barrier = mpi_barrier,
	.destroy = mpi_destroy,
	.alltoallv = mpi_alltoallv,
};

/* ---- groups ------------------------------------------------------------------------------- */

/* MPI_Comm_split of the world into the group of this rank's color, ordered by key, as *out. */
static mgt_status comm_split(int color, int key, const char *name, mgt_comm **out)
{
	char msg[MPI_MAX_ERROR_STRING];
	MPI_Comm mc;
	int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &mc);
	if (rc != MPI_SUCCESS) return mgt_err(MGT_ERR_IO, "cannot create the %s group: %s", name, mpi_errstr(rc, msg));
	mpi_impl *im = mgt_malloc(sizeof *im);
	mgt_comm *c = im ? mgt_malloc(sizeof *c) : NULL;
	if (!c) {
		free(im);
		MPI_Comm_free(&mc);
		return MGT_ERR_NOMEM;
	}
	MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
	MPI_Comm_set_name(mc, name);
	*im = (mpi_impl){ .comm = mc };
	*c = (mgt_comm){ .ops = &mpi_ops, .name = name, .impl = im };
	MPI_Comm_rank(mc, &c->rank);
	MPI_Comm_size(mc, &c->size);
	*out = c;
	return MGT_OK;
}

/* Sizes and ranks: rank = tp + TP*(cp + CP*(dp + DP*pp)), and on the expert grid
 * rank = tp + TP*(ep + EP*(edp + EDP*pp)) (parallel.h). */
static void layout(mgt_parallel *ps, int world, int rank, int tp, int pp, int cp, int ep)
{
	*ps = (mgt_parallel){ .world_size = world, .world_rank = rank, .tp = tp, .pp = pp, .cp = cp,
			      .dp = world / (tp * pp * cp), .ep = ep, .edp = world / (tp * pp * ep) };
	ps->tp_rank = rank % tp;
	ps->cp_rank = rank / tp % cp;
	ps->dp_rank = rank / (tp * cp) % ps->dp;
	ps->pp_rank = rank / (tp * cp * ps->dp);
	ps->ep_rank = rank / tp % ep;
	ps->edp_rank = rank / (tp * ep) % ps->edp;
}

/* The groups of parallel.h: colors select the group, keys order it. */
static mgt_status make_groups(mgt_parallel *ps)
{
	int r = ps->world_rank, TP = ps->tp, CP = ps->cp;
	int pipe = ps->tp_rank + TP * (ps->cp_rank + CP * ps->dp_rank); /* this rank's pipeline */
	int ends = ps->pp > 1 && (ps->pp_rank == 0 || ps->pp_rank == ps->pp - 1);
	struct {
		mgt_comm **slot;
		int color, key;
		const char *name;
	} g[] = {
		{ &ps->world, 0, r, "world" },
		{ &ps->tp_comm, r / TP, ps->tp_rank, "tensor" },
		{ &ps->dp_comm, ps->tp_rank + TP * (ps->cp_rank + CP * ps->pp_rank), ps->dp_rank, "data" },
		{ &ps->pp_comm, pipe, ps->pp_rank, "pipeline" },
		{ &ps->mp_comm, ps->cp_rank + CP * ps->dp_rank, r, "model" },
		{ &ps->emb_comm, ends ? pipe : ps->world_size + r, ps->pp_rank, "embedding" },
		{ &ps->ep_comm, ps->tp_rank + TP * (ps->edp_rank + ps->edp * ps->pp_rank), ps->ep_rank, "expert" },
		{ &ps->cp_comm, ps->tp_rank + TP * (ps->dp_rank + ps->dp * ps->pp_rank), ps->cp_rank, "context" },
		{ &ps->dpcp_comm, ps->tp_rank + TP * ps->pp_rank, ps->cp_rank + CP * ps->dp_rank, "data-context" },
		{ &ps->edp_comm, ps->tp_rank + TP * (ps->ep_rank + ps->ep * ps->pp_rank), ps->edp_rank, "expert-data" },
	};
	int n = sizeof g / sizeof *g;
	for (int i = 0; i < n; i++) {
		if (CP == 1 && g[i].slot == &ps->dpcp_comm) continue;              /* dp_comm (parallel.h) */
		if (ps->ep == 1 && CP == 1 && g[i].slot == &ps->edp_comm) continue; /* dp_comm (parallel.h) */
		mgt_status st = comm_split(g[i].color, g[i].key, g[i].name, g[i].slot);
		if (st) return st;
	}
	if (CP == 1) ps->dpcp_comm = ps->dp_comm;
	if (ps->ep == 1 && CP == 1) ps->edp_comm = ps->dp_comm;
	return MGT_OK;
}

/* The distributed-optimizer instance groups of parallel.h (N = ps->inst > 1): q is this rank's
 * place in the data x context group, I the ranks of an instance there, Ie in the expert-data
 * group. */
static mgt_status make_instance_groups(mgt_parallel *ps)
{
	int TP = ps->tp, PP = ps->pp, N = ps->inst, q = ps->cp_rank + ps->cp * ps->dp_rank;
	int I = ps->dp * ps->cp / N, Ie = ps->edp / N, mp = ps->tp_rank + TP * ps->pp_rank;
	ps->inst_rank = q / I;
	mgt_status st = comm_split(mp + TP * PP * (q / I), q, "data-intra", &ps->idp_comm);
	if (!st) st = comm_split(ps->tp_rank + TP * (ps->ep_rank + ps->ep * (ps->pp_rank + PP * (ps->edp_rank / Ie))),
				 ps->edp_rank, "expert-data-intra", &ps->iedp_comm);
	if (!st) st = comm_split(mp + TP * PP * (q % I), q / I, "data-inter", &ps->odp_comm);
	if (!st) st = comm_split(q / I, ps->world_rank, "instance", &ps->inst_comm);
	return st;
}

mgt_status mgt_parallel_init_hsdp(mgt_parallel *ps, int tp, int pp, int cp, int ep, int instances)
{
	memset(ps, 0, sizeof *ps);
	mgt_status st = check_layout(rt.size, tp, pp, cp, rt.active ? "" : " (one process: start it with mpirun)");
	if (!st) st = check_ep(rt.size, tp, pp, cp, ep);
	if (!st) st = check_instances(rt.size, tp, pp, cp, ep, instances);
	if (st) return st;
	if (!rt.active) return mgt_parallel_init_single(ps);
	layout(ps, rt.size, rt.rank, tp, pp, cp, ep);
	ps->inst = instances;
	st = make_groups(ps);
	if (!st && instances > 1) st = make_instance_groups(ps);
	if (!st && instances == 1) ps->idp_comm = ps->dpcp_comm, ps->iedp_comm = ps->edp_comm, ps->inst_comm = ps->world;
	if (st) mgt_parallel_free(ps);
	return st;
}

mgt_status mgt_parallel_init_ep(mgt_parallel *ps, int tp, int pp, int cp, int ep)
{
	return mgt_parallel_init_hsdp(ps, tp, pp, cp, ep, 1);
}

mgt_status mgt_parallel_init(mgt_parallel *ps, int tp, int pp, int cp)
{
	return mgt_parallel_init_ep(ps, tp, pp, cp, 1);
}

/* ---- the runtime -------------------------------------------------------------------------- */

mgt_status mgt_parallel_runtime_init(int *argc, char ***argv)
{
	char msg[MPI_MAX_ERROR_STRING];
	int started = 0, provided;
	if (rt.active || rt.finalized || !launched_size()) return MGT_OK;
	MPI_Initialized(&started);
	if (!started) {
		int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS) return mgt_err(MGT_ERR_IO, "MPI_Init_thread failed: %s", mpi_errstr(rc, msg));
		rt.owned = 1;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_size(MPI_COMM_WORLD, &rt.size);
	MPI_Comm_rank(MPI_COMM_WORLD, &rt.rank);
	int *ub, flag = 0;
	if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag) rt.tag_ub = *ub;
	int rc = op16_make();
	if (rc != MPI_SUCCESS) return mgt_err(MGT_ERR_IO, "MPI_Op_create failed: %s", mpi_errstr(rc, msg));
	rt.active = 1;
	return MGT_OK;
}

int mgt_parallel_active(void)
{
	return rt.active;
}

int mgt_parallel_world_size(void)
{
	return rt.size;
}

int mgt_parallel_world_rank(void)
{
	return rt.rank;
}

mgt_status mgt_parallel_agree_root(mgt_status st)
{
	if (!rt.active) return st;
	int v = (int)st;
	if (MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
		return mgt_err(MGT_ERR_IO, "MPI_Bcast of rank 0's status failed");
	if (st != MGT_OK) /* this rank's own failure (rank 0's too) */
		return st;
	if (v != MGT_OK)
		return mgt_err((mgt_status)v, "rank 0 refused to start (its message says why)");
	return MGT_OK;
}

void mgt_parallel_abort(int code)
{
	if (!rt.active) return;
	fflush(NULL);
	MPI_Abort(MPI_COMM_WORLD, code);
}

void mgt_parallel_finalize(void)
{
	if (!rt.active) return;
	op16_free();
	if (rt.owned) MPI_Finalize();
	rt = (runtime){ .size = 1, .tag_ub = 32767, .finalized = 1 };
}

#else /* built without MPI: one process */

mgt_status mgt_parallel_runtime_init(int *argc, char ***argv)
{
	long n = launched_size();
	if (n > 1)
		return mgt_err(MGT_ERR_USAGE, "started as one of %ld processes (mpirun or srun), but mgt was built "
			       "without MPI (install libopenmpi-dev and rebuild with make MPI=1)", n);
	return MGT_OK;
}

int mgt_parallel_active(void)
{
	return 0;
}

int mgt_parallel_world_size(void)
{
	return 1;
}

int mgt_parallel_world_rank(void)
{
	return 0;
}

mgt_status mgt_parallel_agree_root(mgt_status st)
{
	return st;
}

void mgt_parallel_abort(int code)
{
}

void mgt_parallel_finalize(void)
{
}

mgt_status mgt_parallel_init_hsdp(mgt_parallel *ps, int tp, int pp, int cp, int ep, int instances)
{
	memset(ps, 0, sizeof *ps);
	mgt_status st = check_layout(1, tp, pp, cp, " (mgt was built without MPI)");
	if (!st) st = check_ep(1, tp, pp, cp, ep);
	if (!st) st = check_instances(1, tp, pp, cp, ep, instances);
	return st ? st : mgt_parallel_init_single(ps);
}

mgt_status mgt_parallel_init_ep(mgt_parallel *ps, int tp, int pp, int cp, int ep)
{
	return mgt_parallel_init_hsdp(ps, tp, pp, cp, ep, 1);
}

mgt_status mgt_parallel_init(mgt_parallel *ps, int tp, int pp, int cp)
{
	return mgt_parallel_init_ep(ps, tp, pp, cp, 1);
}

#endif
