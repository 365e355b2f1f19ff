/* lib/dist/single.c: the one-process communicator and parallel state. */
#include "dist.h"
#include "backend/backend.h"
#include "dist_impl.h"

#include <stdlib.h>
#include <string.h>

size_t mgt_comm_dtype_size(mgt_comm_dtype dt)
{
	return dt == MGT_DT_F64 || dt == MGT_DT_I64 ? 8 : 4;
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
	*ps = (mgt_parallel){ .world_size = 1, .tp = 1, .pp = 1, .dp = 1, .cp = 1 };
	mgt_comm **slots[] = { &ps->world, &ps->tp_comm, &ps->pp_comm, &ps->dp_comm, &ps->mp_comm,
			       &ps->emb_comm };
	const char *names[] = { "world", "tensor", "pipeline", "data", "model", "embedding" };
	for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
		*slots[i] = mgt_comm_single(names[i]);
		if (!*slots[i]) {
			mgt_parallel_free(ps);
			return MGT_ERR_NOMEM;
		}
	}
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

mgt_status mgt_parallel_to_device(mgt_parallel *ps, mgt_backend *be, bool overlap_dp)
{
	if (be->host_memory || ps->host_tp) return MGT_OK;
	mgt_status st = to_device(&ps->tp_comm, &ps->host_tp, be, true, false);
	if (!st) st = to_device(&ps->dp_comm, &ps->host_dp, be, true, overlap_dp);
	if (!st) st = to_device(&ps->emb_comm, &ps->host_emb, be, true, false);
	if (!st) st = to_device(&ps->pp_comm, &ps->host_pp, be, false, false);
	return st;
}

mgt_status mgt_comm_wait(mgt_comm *c)
{
	return c->ops->wait ? c->ops->wait(c) : MGT_OK;
}

void mgt_parallel_free(mgt_parallel *ps)
{
	mgt_comm *cs[] = { ps->tp_comm, ps->pp_comm, ps->dp_comm, ps->emb_comm, ps->host_tp, ps->host_pp,
			   ps->host_dp, ps->host_emb, ps->world, ps->mp_comm };
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) mgt_comm_destroy(cs[i]);
	memset(ps, 0, sizeof *ps);
}

void mgt_comm_count(mgt_comm *c, double bytes)
{
	c->calls++;
	if (c->size > 1) c->bytes_sent += bytes;
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
