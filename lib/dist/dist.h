/* lib/dist: the communicator interface and the parallel state.
 *
 * A communicator is one process group with a table of collectives (DESIGN.md section 3,
 * "communication is a separate interface").  Implementations: single-rank (identity, this file),
 * MPI (host buffers, the CPU backend) and NCCL (device buffers) later.  The model calls these at
 * Megatron-Core's points (megatron/core/tensor_parallel/mappings.py, layers.py,
 * cross_entropy.py; pipeline_parallel/p2p_communication.py; distributed/param_and_grad_buffer.py)
 * so that parallelism adds implementations, not rewrites.
 *
 * Buffers are backend memory of the backend the communicator was made for.  Every collective
 * counts the bytes it sends in comm->bytes_sent (the analytic communication-volume check).
 * Errors: MGT_ERR_IO with a message naming the group and the peer.
 */
#ifndef MGT_DIST_H
#define MGT_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef enum { MGT_DT_F32, MGT_DT_F64, MGT_DT_I32, MGT_DT_I64 } mgt_comm_dtype;
typedef enum { MGT_RED_SUM, MGT_RED_MAX } mgt_redop;

size_t mgt_comm_dtype_size(mgt_comm_dtype dt);

typedef struct mgt_comm mgt_comm;
typedef struct mgt_comm_ops {
	/* In place over n elements. */
	mgt_status (*allreduce)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op);
	/* dst [size * n] = concat over ranks of src [n] (rank order). */
	mgt_status (*allgather)(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt);
	/* dst [n] = sum over ranks of src[rank * n : (rank + 1) * n]. */
	mgt_status (*reduce_scatter)(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt);
	mgt_status (*broadcast)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root);
	mgt_status (*send)(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer);
	mgt_status (*recv)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer);
	mgt_status (*barrier)(mgt_comm *c);
	void (*destroy)(mgt_comm *c);
} mgt_comm_ops;

struct mgt_comm {
	const mgt_comm_ops *ops;
	const char *name; /* "world", "tp", "dp", "pp", "emb" ... for messages */
	int rank, size;
	uint64_t bytes_sent;
	void *impl;
};

/* A one-process group: collectives are identities (allgather/reduce_scatter copy), send/recv
 * report MGT_ERR_IO (there is no peer).  Buffers must be host-addressable (CPU backend).
 * Returns NULL on MGT_ERR_NOMEM. */
mgt_comm *mgt_comm_single(const char *name);
void mgt_comm_destroy(mgt_comm *c);

/* Parallel state: sizes and ranks in Megatron's order tp-cp-ep-dp-pp (tp fastest),
 * rank = tp + TP*(cp + CP*(dp + DP*pp)) (megatron-reference.md section 5.2), and one
 * communicator per group.  The single-process state has every size 1. */
typedef struct mgt_parallel {
	int world_size, world_rank;
	int tp, pp, dp, cp;                 /* sizes */
	int tp_rank, pp_rank, dp_rank, cp_rank;
	mgt_comm *world, *tp_comm, *pp_comm, *dp_comm, *emb_comm; /* emb: first and last PP stage */
} mgt_parallel;

/* Fill *ps for one process (all sizes 1, single-rank communicators).  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_parallel_init_single(mgt_parallel *ps);
void mgt_parallel_free(mgt_parallel *ps);

#endif
