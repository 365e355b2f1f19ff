/* lib/parallel/nccl.c: the NCCL communicator (parallel.h), built with NCCL (-DMGT_HAVE_NCCL; without
 * it lib/parallel/nonccl.c defines mgt_comm_nccl).
 *
 * Collectives are NCCL's, queued on the CUDA backend's stream, so they order with the backend's
 * ops without host synchronization.  Point to point goes through a staged communicator over the
 * host communicator (MPI): NCCL's send/recv on the one stream would block the stream until the
 * peer posts the matching call, which a pipeline schedule with sends ahead of receives would
 * deadlock on; MPI sends from a copy and never waits.
 */
#ifdef MGT_HAVE_NCCL
#include "parallel/parallel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
/* nccl.h declares ncclGroupStart() and friends without (void), which DEVELOPER=1's
 * -Wstrict-prototypes turns into errors. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "backend/backend.h"
#include "parallel/parallel_impl.h"

_Static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "ncclUniqueId is broadcast as int32 words");

typedef struct {
	ncclComm_t comm;
	cudaStream_t stream;    /* where the collectives queue: the backend's, or side */
	cudaStream_t compute;   /* the backend's stream */
	cudaStream_t side;      /* own_stream: the communicator's own stream, else NULL */
	cudaEvent_t ready, done; /* own_stream: compute -> side before a collective, side -> compute in wait */
	bool pending;           /* own_stream: collectives queued on side since the last wait */
	mgt_backend *be;
	mgt_comm *staged; /* send, recv, barrier and the odd overlapping collective */
} nccl_impl;

/* own_stream: order a collective after the backend's work queued so far. */
static mgt_status enter_side(mgt_comm *c, const char *what)
{
	nccl_impl *im = c->impl;
	if (!im->side) return MGT_OK;
	cudaError_t e = cudaEventRecord(im->ready, im->compute);
	if (e == cudaSuccess) e = cudaStreamWaitEvent(im->side, im->ready, 0);
	if (e != cudaSuccess) return mgt_err(MGT_ERR_IO, "nccl: %s: %s: ordering after the backend: %s", c->name, what, cudaGetErrorString(e));
	im->pending = true;
	return MGT_OK;
}

static mgt_status nccl_wait(mgt_comm *c)
{
	nccl_impl *im = c->impl;
	if (!im->side || !im->pending) return MGT_OK;
	cudaError_t e = cudaEventRecord(im->done, im->side);
	if (e == cudaSuccess) e = cudaStreamWaitEvent(im->compute, im->done, 0);
	if (e != cudaSuccess) return mgt_err(MGT_ERR_IO, "nccl: %s: wait: %s", c->name, cudaGetErrorString(e));
	im->pending = false;
	return MGT_OK;
}

static ncclDataType_t nccl_type(mgt_comm_dtype dt)
{
	switch (dt) {
	case MGT_DT_F32: return ncclFloat32;
	case MGT_DT_F64: return ncclFloat64;
	case MGT_DT_I32: return ncclInt32;
	case MGT_DT_BF16: return ncclBfloat16;
	case MGT_DT_F16: return ncclFloat16;
	default: return ncclInt64;
	}
}

/* MGT_ERR_IO "nccl: <group>: <what>: <NCCL's string>", with NCCL's last message when it has one. */
static mgt_status nccl_fail(const char *group, const char *what, ncclResult_t rc, ncclComm_t comm)
{
	const char *more = NULL;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
	more = ncclGetLastError(comm);
#endif
	if (more && *more)
		return mgt_err(MGT_ERR_IO, "nccl: %s: %s: %s; %s", group, what, ncclGetErrorString(rc), more);
	return mgt_err(MGT_ERR_IO, "nccl: %s: %s: %s", group, what, ncclGetErrorString(rc));
}

/* An error of an operation queued earlier (NCCL reports those asynchronously).  Does not wait. */
static mgt_status check_async(mgt_comm *c, const char *what)
{
	nccl_impl *im = c->impl;
	ncclResult_t err = ncclSuccess, rc = ncclCommGetAsyncError(im->comm, &err);
	if (rc != ncclSuccess) return nccl_fail(c->name, what, rc, im->comm);
	if (err != ncclSuccess && err != ncclInProgress) {
		char msg[96];
		snprintf(msg, sizeof msg, "%s: an earlier operation failed", what);
		return nccl_fail(c->name, msg, err, im->comm);
	}
	return MGT_OK;
}

/* Return the result of an operation on the staged communicator, counting on c what it counted. */
#define RETURN_VIA_STAGED(c, call)                                                   \
	do {                                                                         \
		mgt_comm *s_ = ((nccl_impl *)(c)->impl)->staged;                     \
		double b_ = s_->bytes_sent;                                          \
		uint64_t k_ = s_->calls;                                             \
		mgt_status st_ = nccl_wait(c); /* staging reads after side work */  \
		if (!st_) st_ = s_->ops->call;                                       \
		(c)->bytes_sent += s_->bytes_sent - b_;                              \
		(c)->calls += s_->calls - k_;                                        \
		return st_;                                                          \
	} while (0)

static void free_side(nccl_impl *im)
{
	if (im->side) cudaStreamDestroy(im->side);
	if (im->ready) cudaEventDestroy(im->ready);
	if (im->done) cudaEventDestroy(im->done);
}

/* own_stream: a non-blocking stream (never implicitly synchronized with the legacy default
 * stream) and two events without timing. */
static mgt_status make_side(nccl_impl *im, const char *group)
{
	cudaError_t e = cudaStreamCreateWithFlags(&im->side, cudaStreamNonBlocking);
	if (e == cudaSuccess) e = cudaEventCreateWithFlags(&im->ready, cudaEventDisableTiming);
	if (e == cudaSuccess) e = cudaEventCreateWithFlags(&im->done, cudaEventDisableTiming);
	if (e != cudaSuccess) return mgt_err(MGT_ERR_IO, "nccl: %s: own stream: %s", group, cudaGetErrorString(e));
	im->stream = im->side;
	return MGT_OK;
}

/* ---- collectives -------------------------------------------------------------------------- */

static mgt_status nccl_allreduce(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op)
{
	nccl_impl *im = c->impl;
	mgt_status st = check_async(c, "allreduce");
	if (!st) st = enter_side(c, "allreduce");
	if (st) return st;
	if (n) {
		ncclResult_t rc = ncclAllReduce(buf, buf, n, nccl_type(dt), op == MGT_RED_MAX ? ncclMax : ncclSum,
						im->comm, im->stream);
		if (rc != ncclSuccess) return nccl_fail(c->name, "allreduce", rc, im->comm);
	}
	mgt_comm_count(c, 2.0 * (c->size - 1) / c->size * (double)(n * mgt_comm_dtype_size(dt)));
	return MGT_OK;
}

static mgt_status nccl_allgather(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	nccl_impl *im = c->impl;
	size_t bytes = n * mgt_comm_dtype_size(dt);
	char *d = dst;
	const char *s = src;
	/* NCCL's in-place allgather is exactly src == dst + rank * n; other overlaps are staged. */
	if (s != d + (size_t)c->rank * bytes && mgt_comm_overlaps(d, (size_t)c->size * bytes, s, bytes))
		RETURN_VIA_STAGED(c, allgather(s_, dst, src, n, dt));
	mgt_status st = check_async(c, "allgather");
	if (!st) st = enter_side(c, "allgather");
	if (st) return st;
	if (n) {
		ncclResult_t rc = ncclAllGather(src, dst, n, nccl_type(dt), im->comm, im->stream);
		if (rc != ncclSuccess) return nccl_fail(c->name, "allgather", rc, im->comm);
	}
	mgt_comm_count(c, (double)(c->size - 1) * (double)bytes);
	return MGT_OK;
}

static mgt_status nccl_reduce_scatter(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	nccl_impl *im = c->impl;
	size_t bytes = n * mgt_comm_dtype_size(dt);
	char *d = dst;
	const char *s = src;
	/* NCCL's in-place reduce-scatter is exactly dst == src + rank * n; other overlaps are staged. */
	if (d != s + (size_t)c->rank * bytes && mgt_comm_overlaps(d, bytes, s, (size_t)c->size * bytes))
		RETURN_VIA_STAGED(c, reduce_scatter(s_, dst, src, n, dt));
	mgt_status st = check_async(c, "reduce_scatter");
	if (!st) st = enter_side(c, "reduce_scatter");
	if (st) return st;
	if (n) {
		ncclResult_t rc = ncclReduceScatter(src, dst, n, nccl_type(dt), ncclSum, im->comm, im->stream);
		if (rc != ncclSuccess) return nccl_fail(c->name, "reduce_scatter", rc, im->comm);
	}
	mgt_comm_count(c, (double)(c->size - 1) * (double)bytes);
	return MGT_OK;
}

static mgt_status nccl_broadcast(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root)
{
	nccl_impl *im = c->impl;
	if (root < 0 || root >= c->size)
		return mgt_err(MGT_ERR_IO, "nccl: %s: broadcast from rank %d, which is not in the group (size %d)",
			       c->name, root, c->size);
	mgt_status st = check_async(c, "broadcast");
	if (!st) st = enter_side(c, "broadcast");
	if (st) return st;
	if (n) {
		ncclResult_t rc = ncclBroadcast(buf, buf, n, nccl_type(dt), root, im->comm, im->stream);
		if (rc != ncclSuccess) return nccl_fail(c->name, "broadcast", rc, im->comm);
	}
	mgt_comm_count(c, c->rank == root ? (double)(n * mgt_comm_dtype_size(dt)) : 0);
	return MGT_OK;
}

/* ncclSend/ncclRecv of every non-empty block in one group (NCCL's alltoallv recipe), so that
 * NCCL schedules all of them at once; src overlapping the dst blocks is staged. */
static mgt_status nccl_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				 const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	nccl_impl *im = c->impl;
	size_t es = mgt_comm_dtype_size(dt), send_end, recv_end;
	double sent;
	mgt_status st = mgt_comm_alltoallv_check(c, rcount, rdispl, scount, sdispl, es, &sent, &send_end, &recv_end);
	if (st) return st;
	if (mgt_comm_overlaps(dst, recv_end, src, send_end))
		RETURN_VIA_STAGED(c, alltoallv(s_, dst, rcount, rdispl, src, scount, sdispl, dt));
	st = check_async(c, "alltoallv");
	if (!st) st = enter_side(c, "alltoallv");
	if (st) return st;
	ncclDataType_t t = nccl_type(dt);
	ncclResult_t rc = ncclGroupStart(), rc2;
	for (int r = 0; r < c->size && rc == ncclSuccess; r++) {
		if (scount[r])
			rc = ncclSend((const char *)src + (size_t)sdispl[r] * es, (size_t)scount[r], t, r, im->comm, im->stream);
		if (rc == ncclSuccess && rcount[r])
			rc = ncclRecv((char *)dst + (size_t)rdispl[r] * es, (size_t)rcount[r], t, r, im->comm, im->stream);
	}
	rc2 = ncclGroupEnd(); /* also after a failure: the group must be closed */
	if (rc == ncclSuccess) rc = rc2;
	if (rc != ncclSuccess) return nccl_fail(c->name, "alltoallv", rc, im->comm);
	mgt_comm_count(c, sent);
	return MGT_OK;
}

/* ---- point to point and barrier: the staged communicator ----------------------------------- */

static mgt_status nccl_send(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	mgt_status st = check_async(c, "send");
	if (st) return st;
	RETURN_VIA_STAGED(c, send(s_, buf, n, dt, peer, tag));
}

static mgt_status nccl_recv(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	mgt_status st = check_async(c, "recv");
	if (st) return st;
	RETURN_VIA_STAGED(c, recv(s_, buf, n, dt, peer, tag));
}

/* Waits for this rank's queued collectives too, and reports their errors. */
static mgt_status nccl_barrier(mgt_comm *c)
{
	nccl_impl *im = c->impl;
	im->be->ops->sync(im->be);
	if (im->side) cudaStreamSynchronize(im->side);
	mgt_status st = check_async(c, "barrier");
	if (st) return st;
	RETURN_VIA_STAGED(c, barrier(s_));
}

static void nccl_destroy(mgt_comm *c)
{
	nccl_impl *im = c->impl;
	im->be->ops->sync(im->be);
	if (im->side) cudaStreamSynchronize(im->side);
	ncclResult_t rc = ncclSuccess;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
	rc = ncclCommFinalize(im->comm);
#endif
	if (rc == ncclSuccess)
		ncclCommDestroy(im->comm);
	else
		ncclCommAbort(im->comm);
	free_side(im);
	mgt_comm_destroy(im->staged);
	free(im);
	free(c);
}

static const mgt_comm_ops nccl_ops = {
	.allreduce = nccl_allreduce,
	.allgather = nccl_allgather,
	.reduce_scatter = nccl_reduce_scatter,
	.broadcast = nccl_broadcast,
	.send = nccl_send,
	.recv = nccl_recv,
	.barrier = nccl_barrier,
	.destroy = nccl_destroy,
	.wait = nccl_wait,
	.alltoallv = nccl_alltoallv,
};

/* ---- creation ------------------------------------------------------------------------------- */

/* This rank's part before ncclCommInitRank: the device, and on rank 0 the unique id.  Only local
 * calls, so that a failure cannot leave other ranks waiting. */
static mgt_status prepare(mgt_comm *host, ncclUniqueId *id)
{
	int dev = -1;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce == cudaSuccess) ce = cudaSetDevice(dev);
	if (ce != cudaSuccess)
		return mgt_err(MGT_ERR_IO, "nccl: %s: cudaSetDevice(%d): %s", host->name, dev, cudaGetErrorString(ce));
	if (host->rank == 0) {
		ncclResult_t rc = ncclGetUniqueId(id);
		if (rc != ncclSuccess) return nccl_fail(host->name, "ncclGetUniqueId", rc, NULL);
	}
	return MGT_OK;
}

mgt_comm *mgt_comm_nccl(mgt_comm *host, mgt_backend *be, bool own_stream, mgt_status *st)
{
	mgt_status dummy;
	if (!st) st = &dummy;
	if (!host || !be) {
		*st = mgt_err(MGT_ERR_USAGE, "nccl communicator: no %s", host ? "backend" : "host communicator");
		return NULL;
	}
	void *stream = mgt_backend_cuda_stream(be);
	if (!stream) {
		*st = mgt_err(MGT_ERR_USAGE, "nccl: %s: the %s backend is not CUDA (NCCL needs device memory)",
			      host->name, be->ops->name);
		return NULL;
	}
	/* Local setup first; then every rank takes part in the broadcast of the id and in an
	 * allreduce of the failures, whatever happened here, so all ranks fail together. */
	nccl_impl *im = mgt_malloc(sizeof *im);
	mgt_comm *c = im ? mgt_malloc(sizeof *c) : NULL;
	if (im) *im = (nccl_impl){ .stream = (cudaStream_t)stream, .compute = (cudaStream_t)stream, .be = be };
	mgt_status lst = c ? MGT_OK : MGT_ERR_NOMEM;
	mgt_comm *staged = lst ? NULL : mgt_comm_staged(host, be, &lst);
	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	if (!lst) lst = prepare(host, &id);
	if (!lst && own_stream) lst = make_side(im, host->name);
	int32_t words[sizeof id / sizeof(int32_t)];
	memcpy(words, &id, sizeof id);
	mgt_status hst = host->ops->broadcast(host, words, sizeof words / sizeof *words, MGT_DT_I32, 0);
	int32_t fail = lst != MGT_OK || hst != MGT_OK;
	if (!hst) hst = host->ops->allreduce(host, &fail, 1, MGT_DT_I32, MGT_RED_MAX);
	if (lst || hst || fail) {
		if (lst)
			*st = lst;
		else if (hst)
			*st = mgt_err_ctx(hst, "nccl: %s: sharing the unique id", host->name);
		else
			*st = mgt_err(MGT_ERR_IO, "nccl: %s: init: another rank of the group failed to prepare "
				      "(see its message)", host->name);
		goto fail;
	}
	memcpy(&id, words, sizeof id);

	im->staged = staged;
	ncclResult_t rc = ncclCommInitRank(&im->comm, host->size, id, host->rank);
	if (rc != ncclSuccess) {
		*st = nccl_fail(host->name, "ncclCommInitRank", rc, NULL);
		goto fail;
	}
	*c = (mgt_comm){ .ops = &nccl_ops, .name = host->name, .rank = host->rank, .size = host->size, .impl = im };
	*st = MGT_OK;
	return c;
fail:
	if (im) free_side(im);
	mgt_comm_destroy(staged);
	free(im);
	free(c);
	return NULL;
}

int mgt_parallel_have_nccl(void)
{
	return 1;
}

#else
/* ISO C wants a translation unit to declare something. */
typedef int mgt_nccl_unused;
#endif
