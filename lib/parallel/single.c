/* lib/parallel/single.c: the one-process communicator and parallel state. */
#include "parallel.h"
#include "backend/backend.h"
#include "parallel_impl.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t mgt_comm_dtype_size(mgt_comm_dtype dt)
{
	return mgt_elem_size(dt);
}

/* Every operation of a one-process group counts as a call and sends nothing. */
static mgt_status single_allreduce(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op)
{
	c->calls++;
	return MGT_OK;
}

static mgt_status single_copy(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt)
{
	if (dst != src && n) memmove(dst, src, n * mgt_comm_dtype_size(dt));
	c->calls++;
	return MGT_OK;
}

static mgt_status single_broadcast(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root)
{
	if (root != 0)
		return mgt_err(MGT_ERR_IO, "%s group: broadcast from rank %d in a one-process group",
			       c->name, root);
	c->calls++;
	return MGT_OK;
}

static mgt_status single_send(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer,
			      int tag)
{
	return mgt_err(MGT_ERR_IO, "%s group: send to rank %d in a one-process group", c->name, peer);
}

static mgt_status single_recv(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag)
{
	return mgt_err(MGT_ERR_IO, "%s group: receive from rank %d in a one-process group", c->name, peer);
}

/* The own block copied (the only one). */
static mgt_status single_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				   const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	size_t es = mgt_comm_dtype_size(dt), send_end, recv_end;
	double sent;
	mgt_status st = mgt_comm_alltoallv_check(c, rcount, rdispl, scount, sdispl, es, &sent, &send_end, &recv_end);
	if (st) return st;
	if (scount[0])
		memmove((char *)dst + (size_t)rdispl[0] * es, (const char *)src + (size_t)sdispl[0] * es,
			(size_t)scount[0] * es);
	c->calls++;
	return MGT_OK;
}

static mgt_status single_barrier(mgt_comm *c)
{
	c->calls++;
	return MGT_OK;
}

static void single_destroy(mgt_comm *c)
{
	free(c);
}

static const mgt_comm_ops single_ops = {
	.allreduce = single_allreduce,
	.allgather = single_copy,
	.reduce_scatter = single_copy,
	.broadcast = single_broadcast,
	.send = single_send,
	.recv = single_recv,
	.barrier = single_barrier,
	.destroy = single_destroy,
	.alltoallv = single_alltoallv,
};

mgt_comm *mgt_comm_single(const char *name)
{
	mgt_comm *c = mgt_malloc(sizeof *c);
	if (!c) return NULL;
	*c = (mgt_comm){ .ops = &single_ops, .name = name, .rank = 0, .size = 1 };
	return c;
}

void mgt_comm_destroy(mgt_comm *c)
{
	if (c) c->ops->destroy(c);
}

mgt_status mgt_parallel_init_single(mgt_parallel *ps)
{
	*ps = (mgt_parallel){ .world_size = 1, .tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .edp = 1, .inst = 1 };
	mgt_comm **slots[] = { &ps->world, &ps->tp_comm, &ps->pp_comm, &ps->dp_comm, &ps->mp_comm,
			       &ps->emb_comm, &ps->ep_comm, &ps->cp_comm };
	const char *names[] = { "world", "tensor", "pipeline", "data", "model", "embedding", "expert", "context" };
	for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
		*slots[i] = mgt_comm_single(names[i]);
		if (!*slots[i]) {
			mgt_parallel_free(ps);
			return MGT_ERR_NOMEM;
		}
	}
	ps->edp_comm = ps->dpcp_comm = ps->dp_comm; /* EP = CP = 1: the same ranks (parallel.h) */
	ps->idp_comm = ps->iedp_comm = ps->dp_comm; /* one instance */
	ps->inst_comm = ps->world;
	return MGT_OK;
}

/* One group onto device memory: *c becomes the device communicator, *host keeps the old one. */
static mgt_status to_device(mgt_comm **c, mgt_comm **host, mgt_backend *be, bool nccl, bool own_stream)
{
	mgt_status st = MGT_OK;
	mgt_comm *d = nccl && (*c)->size > 1 ? mgt_comm_nccl(*c, be, own_stream, &st) : mgt_comm_staged(*c, be, &st);
	if (!d) return st ? st : MGT_ERR_NOMEM;
	*host = *c;
	*c = d;
	return MGT_OK;
}

int mgt_parallel_local_size(void)
{
	const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (!v) v = getenv("SLURM_NTASKS_PER_NODE");
	int n = v ? atoi(v) : 1;
	return n > 0 ? n : 1;
}

/* Whether some machine of the job runs more ranks than it has GPUs (agreed over the world). */
static mgt_status gpus_shared(mgt_parallel *ps, bool *shared)
{
	int n = mgt_backend_cuda_devices();
	double f = n > 0 && mgt_parallel_local_size() > n;
	mgt_comm *w = ps->world;
	mgt_status st = w->size > 1 ? w->ops->allreduce(w, &f, 1, MGT_DT_F64, MGT_RED_MAX) : MGT_OK;
	*shared = f > 0;
	return st;
}

/* The instance groups (parallel.h): with one instance the aliases follow the groups they are;
 * otherwise the intra groups as the data groups, the inter group on a stream of its own. */
static mgt_status instances_to_device(mgt_parallel *ps, mgt_backend *be, bool nccl, bool overlap_dp)
{
	if (ps->inst <= 1) {
		ps->idp_comm = ps->dpcp_comm, ps->host_idp = ps->host_dpcp;
		ps->iedp_comm = ps->edp_comm, ps->host_iedp = ps->host_edp;
		return MGT_OK;
	}
	mgt_status st = to_device(&ps->idp_comm, &ps->host_idp, be, nccl, overlap_dp);
	if (!st) st = to_device(&ps->iedp_comm, &ps->host_iedp, be, nccl, overlap_dp);
	if (!st) st = to_device(&ps->odp_comm, &ps->host_odp, be, nccl, true);
	return st;
}

mgt_status mgt_parallel_to_device(mgt_parallel *ps, mgt_backend *be, bool overlap_dp)
{
	if (be->host_memory || ps->host_tp) return MGT_OK;
	bool shared;
	mgt_status sst = gpus_shared(ps, &shared);
	if (sst) return sst;
	bool nccl = !shared;
	bool edp_is_dp = ps->edp_comm == ps->dp_comm, dpcp_is_dp = ps->dpcp_comm == ps->dp_comm;
	mgt_status st = to_device(&ps->tp_comm, &ps->host_tp, be, nccl, false);
	if (!st) st = to_device(&ps->dp_comm, &ps->host_dp, be, nccl, overlap_dp);
	if (!st && edp_is_dp) {
		ps->edp_comm = ps->dp_comm;
		ps->host_edp = ps->host_dp;
	}
	if (!st && dpcp_is_dp) {
		ps->dpcp_comm = ps->dp_comm;
		ps->host_dpcp = ps->host_dp;
	}
	if (!st && ps->cp_comm) st = to_device(&ps->cp_comm, &ps->host_cp, be, nccl, false);
	if (!st && ps->dpcp_comm && !dpcp_is_dp) st = to_device(&ps->dpcp_comm, &ps->host_dpcp, be, nccl, overlap_dp);
	if (!st) st = to_device(&ps->emb_comm, &ps->host_emb, be, nccl, false);
	if (!st && ps->ep_comm) st = to_device(&ps->ep_comm, &ps->host_ep, be, nccl, false);
	if (!st && ps->edp_comm && !edp_is_dp) st = to_device(&ps->edp_comm, &ps->host_edp, be, nccl, overlap_dp);
	if (!st) st = to_device(&ps->pp_comm, &ps->host_pp, be, false, false);
	return st ? st : instances_to_device(ps, be, nccl, overlap_dp);
}

mgt_status mgt_comm_wait(mgt_comm *c)
{
	return c->ops->wait ? c->ops->wait(c) : MGT_OK;
}

/* The device communicators first (they wrap the host ones), each communicator once (edp_comm
 * and dpcp_comm may be dp_comm, host_edp and host_dpcp host_dp); the order is the same on every rank, as MPI_Comm_free and
 * ncclCommFinalize want. */
void mgt_parallel_free(mgt_parallel *ps)
{
	mgt_comm *cs[] = { ps->tp_comm, ps->pp_comm, ps->dp_comm, ps->emb_comm, ps->ep_comm, ps->edp_comm,
			   ps->cp_comm, ps->dpcp_comm, ps->idp_comm, ps->iedp_comm, ps->odp_comm,
			   ps->host_tp, ps->host_pp, ps->host_dp, ps->host_emb, ps->host_ep, ps->host_edp,
			   ps->host_cp, ps->host_dpcp, ps->host_idp, ps->host_iedp, ps->host_odp,
			   ps->world, ps->mp_comm, ps->inst_comm };
	size_t n = sizeof cs / sizeof *cs;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < i && cs[j] != cs[i]) j++;
		if (j == i) mgt_comm_destroy(cs[i]);
	}
	memset(ps, 0, sizeof *ps);
}

void mgt_comm_count(mgt_comm *c, double bytes)
{
	c->calls++;
	if (c->size > 1) c->bytes_sent += bytes;
}

mgt_status mgt_comm_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
			      const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt)
{
	if (!c->ops->alltoallv)
		return mgt_err(MGT_ERR_USAGE, "%s group: this communicator has no alltoallv", c->name);
	return c->ops->alltoallv(c, dst, rcount, rdispl, src, scount, sdispl, dt);
}

/* Whether block [d, d + n) of es-byte elements ends within a size_t; its end in bytes in *end. */
static int block_end(int64_t d, int64_t n, size_t es, size_t *end)
{
	if (d > INT64_MAX - n || (uint64_t)(d + n) > SIZE_MAX / es) return 0;
	*end = (size_t)(d + n) * es;
	return 1;
}

mgt_status mgt_comm_alltoallv_check(const mgt_comm *c, const int64_t *rcount, const int64_t *rdispl,
				    const int64_t *scount, const int64_t *sdispl, size_t es, double *sent,
				    size_t *send_end, size_t *recv_end)
{
	*sent = 0;
	*send_end = *recv_end = 0;
	for (int r = 0; r < c->size; r++) {
		const int64_t v[4] = { scount[r], sdispl[r], rcount[r], rdispl[r] };
		const char *what[4] = { "send count", "send displacement", "receive count", "receive displacement" };
		for (int k = 0; k < 4; k++)
			if (v[k] < 0)
				return mgt_err(MGT_ERR_IO, "%s group: alltoallv: %s %" PRId64 " for rank %d (rank %d of %d)",
					       c->name, what[k], v[k], r, c->rank, c->size);
		size_t se, re;
		if (!block_end(sdispl[r], scount[r], es, &se) || !block_end(rdispl[r], rcount[r], es, &re))
			return mgt_err(MGT_ERR_IO, "%s group: alltoallv: the block of rank %d (send %" PRId64 " at %"
				       PRId64 ", receive %" PRId64 " at %" PRId64 ") lies beyond the address space",
				       c->name, r, scount[r], sdispl[r], rcount[r], rdispl[r]);
		if (scount[r] && se > *send_end) *send_end = se;
		if (rcount[r] && re > *recv_end) *recv_end = re;
		if (r != c->rank) *sent += (double)scount[r] * (double)es;
	}
	if (scount[c->rank] != rcount[c->rank])
		return mgt_err(MGT_ERR_IO, "%s group: alltoallv: rank %d of %d sends itself %" PRId64 " elements but "
			       "receives %" PRId64 " from itself", c->name, c->rank, c->size, scount[c->rank],
			       rcount[c->rank]);
	if (c->size == 1) *sent = 0;
	return MGT_OK;
}

int mgt_comm_overlaps(const void *a, size_t na, const void *b, size_t nb)
{
	const char *x = a, *y = b;
	return na && nb && x < y + nb && y < x + na;
}

size_t mgt_comm_mpi_scratch_bytes(int size)
{
	return size > 1 ? 3 * MGT_MPI_PACK_BYTES : 0;
}

size_t mgt_comm_mpi_pack_bytes(int size, size_t part, size_t es)
{
	if (size <= 1 || !es) return 0;
	size_t lim = MGT_MPI_PACK_BYTES / es / (size_t)size, m0 = part < lim ? part : lim ? lim : 1;
	return (size_t)size * m0 * es;
}
