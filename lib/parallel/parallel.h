/* lib/parallel: the communicator interface and the parallel state.
 *
 * A communicator is one process group with a table of collectives (doc/design.md section 3,
 * "communication is a separate interface").  Implementations: single-rank (identity, this file),
 * MPI (host buffers, the CPU backend), and on backend memory the staged and NCCL ones (below).  The model calls these at
 * Megatron-Core's points (megatron/core/tensor_parallel/mappings.py, layers.py,
 * cross_entropy.py; pipeline_parallel/p2p_communication.py; distributed/param_and_grad_buffer.py)
 * so that parallelism adds implementations, not rewrites.
 *
 * Buffers are backend memory of the backend the communicator was made for.  Every operation
 * adds to comm->bytes_sent the bytes this rank sends under the bandwidth-optimal (ring)
 * algorithm, whatever the library really does (the convention of nccl-tests' bus bandwidth), so
 * the count is an analytic, layout-checkable figure: with p = size, B = n * element size,
 *   allreduce       2 (p-1)/p * B          reduce_scatter  (p-1) * B   (B: this rank's output)
 *   allgather       (p-1) * B  (B: this rank's input)    broadcast   B on the root, 0 elsewhere
 *   send            B                      recv, barrier   0
 *   alltoallv       sum over r != rank of scount[r] * element size   (what leaves this rank;
 *                   the block a rank keeps for itself is not counted)
 * and nothing at all when p == 1.  comm->calls counts the operations.
 * Errors: MGT_ERR_IO with a message naming the group and the peer.
 */
#ifndef MGT_DIST_H
#define MGT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* Element types (util.h mgt_elem_type).  MGT_DT_BF16 and MGT_DT_F16 move as 2-byte elements; their
 * reductions (allreduce sum and max, reduce_scatter) combine two values at a time in fp32 and round
 * each result to the 16-bit type to nearest even: NCCL's native bf16/fp16 reductions, and over MPI
 * user operations on 2-byte elements that compute the same (lib/parallel/mpi.c; the order in which
 * more than two ranks' values combine is the library's, fixed for a group size). */
typedef mgt_elem_type mgt_comm_dtype;
typedef enum { MGT_RED_SUM, MGT_RED_MAX } mgt_redop;

size_t mgt_comm_dtype_size(mgt_comm_dtype dt);

typedef struct mgt_comm mgt_comm;
typedef struct mgt_comm_ops {
	/* In place over n elements. */
	mgt_status (*allreduce)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, mgt_redop op);
	/* dst [size * n] = concat over ranks of src [n] (rank order); src may be dst + rank * n. */
	mgt_status (*allgather)(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt);
	/* dst [n] = sum over ranks of src[rank * n : (rank + 1) * n]; dst may be src + rank * n. */
	mgt_status (*reduce_scatter)(mgt_comm *c, void *dst, const void *src, size_t n, mgt_comm_dtype dt);
	mgt_status (*broadcast)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int root);
	/* Point to point (group ranks).  send returns as soon as buf may be reused and never waits
	 * for the receiver (the MPI implementation sends from a copy with MPI_Isend and completes
	 * it later), so a pipeline schedule cannot deadlock on send order.  Messages from one rank
	 * to another with the same tag arrive in the order sent; recv blocks until its message is
	 * in.  tag >= 0.  barrier and destroy first wait until this rank's sends are delivered (so
	 * a message must be received before its receiver enters the barrier); a send that fails
	 * after returning is reported by the next operation on the communicator. */
	mgt_status (*send)(mgt_comm *c, const void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag);
	mgt_status (*recv)(mgt_comm *c, void *buf, size_t n, mgt_comm_dtype dt, int peer, int tag);
	mgt_status (*barrier)(mgt_comm *c);
	void (*destroy)(mgt_comm *c);
	/* Optional (NULL: operations complete in order with the backend's work, as MPI's, the
	 * staged and single ones do): make the backend's later work wait for this communicator's
	 * queued operations.  Call through mgt_comm_wait. */
	mgt_status (*wait)(mgt_comm *c);
	/* All-to-all with per-peer counts (MPI_Alltoallv; Megatron's token dispatcher's
	 * all_to_all with input/output splits, megatron/core/tensor_parallel/mappings.py).  Call
	 * through mgt_comm_alltoallv (which reports a communicator without it); see there. */
	mgt_status (*alltoallv)(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
				const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt);
} mgt_comm_ops;

struct mgt_comm {
	const mgt_comm_ops *ops;
	const char *name; /* "world", "tensor", "data", "pipeline", "model", "embedding", "expert",
			   * "expert-data", "context", "data-context"; for messages */
	int rank, size;
	double bytes_sent; /* see above; not an integer for p > 2 */
	uint64_t calls;
	void *impl;
};

/* A one-process group: collectives are identities (allgather/reduce_scatter copy), send/recv
 * report MGT_ERR_IO (there is no peer).  Buffers must be host-addressable (CPU backend).
 * Returns NULL on MGT_ERR_NOMEM. */
mgt_comm *mgt_comm_single(const char *name);
void mgt_comm_destroy(mgt_comm *c);
/* All-to-all with per-peer counts over group c of p = c->size ranks: this rank sends
 * scount[r] elements of dt from src + sdispl[r] to group rank r and receives rcount[r]
 * elements from group rank r into dst + rdispl[r], for every r (itself included: its own block
 * is copied).  scount, sdispl, rcount, rdispl: host arrays of p counts and displacements in
 * elements of dt (not bytes), each >= 0; blocks may lie in any order and leave gaps (dst's gaps
 * are left as they were).  rcount[r] must equal what rank r gives as its scount[this rank]
 * (the caller exchanges the counts first, as Megatron's dispatcher does with an allgather of the
 * per-expert token counts); scount[rank] must equal rcount[rank].  Every rank of the group calls
 * it, in the same order as the group's other collectives.  src and dst: the communicator's
 * memory (host for single and MPI, backend memory for staged and NCCL); they may overlap (the
 * input is read as it was before the call).  Zero counts are fine (nothing moves; the call
 * still counts).  Counting: parallel.h's alltoallv formula.
 * Errors: MGT_ERR_IO naming the group: a negative count or displacement, scount[rank] !=
 * rcount[rank], a block beyond the address space (checked on this rank before anything is
 * sent: the other ranks may then wait in the operation, so treat it as fatal: mgt_parallel_abort),
 * the library's errors (a peer sending more than rcount says included, where MPI detects it);
 * MGT_ERR_USAGE when c's implementation has no alltoallv (ops->alltoallv NULL); MGT_ERR_NOMEM.
 * Implementations: single-rank: a copy.  MPI: one MPI_Alltoallw (the alltoallv of MPI-3 with
 * per-peer datatypes), so that counts beyond INT_MAX elements and byte offsets beyond INT_MAX
 * still make ONE collective on every rank whatever its own counts are (a peer's block of more
 * than INT_MAX elements, or starting beyond INT_MAX bytes into the buffer, is described by a
 * derived datatype); staged and NCCL: below. */
mgt_status mgt_comm_alltoallv(mgt_comm *c, void *dst, const int64_t *rcount, const int64_t *rdispl,
			      const void *src, const int64_t *scount, const int64_t *sdispl, mgt_comm_dtype dt);

/* Make the backend's later work wait for c's queued operations (only communicators with their
 * own stream queue any: mgt_comm_nccl with own_stream); MGT_OK at once otherwise.  Errors: those
 * of the queued operations (MGT_ERR_IO). */
mgt_status mgt_comm_wait(mgt_comm *c);

/* Parallel state: sizes and ranks in Megatron's order tp-cp-ep-dp-pp (tp fastest),
 * rank = tp + TP*(cp + CP*(dp + DP*pp)) (megatron/core/parallel_state.py), and one
 * communicator per group (megatron/core/parallel_state.py):
 *   tp_comm   ranks with the same (cp, dp, pp), ordered by tp_rank
 *   dp_comm   same (tp, cp, pp), ordered by dp_rank
 *   pp_comm   same (tp, cp, dp), ordered by pp_rank
 *   mp_comm   model-parallel group: same (cp, dp), ordered by world rank (tp + TP*pp)
 *   cp_comm   context-parallel group: same (tp, dp, pp), ordered by cp_rank (the ring of context
 *             parallelism's attention; a one-process group when CP = 1)
 *   dpcp_comm data-parallel group with context parallelism (Megatron's
 *             get_data_parallel_group(with_context_parallel=True)): same (tp, pp), ordered by
 *             cp_rank + CP*dp_rank; gradients are reduced and the distributed optimizer sharded
 *             over it.  When CP = 1 it IS dp_comm (the same pointer, as edp_comm below)
 *   emb_comm  embedding group: pipeline ranks 0 and PP-1 of this rank's pipeline (same tp, cp,
 *             dp), size 2 when PP > 1; on a rank that is neither it is a one-process group
 *   world     all ranks
 * Expert layers use a second grid over the same ranks (megatron/core/transformer/moe/moe_layer.py,
 * parallel_state.py's expert RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP, cp=1), order
 * tp-cp-ep-dp-pp): rank = tp + TP*(ep + EP*(edp + EDP*pp)) with the expert tensor-parallel size
 * ETP = TP (Megatron's default) and EDP = world / (TP*EP*PP) = CP*DP/EP; context parallelism is
 * folded into EP x EDP ("MoE parallel folding"), so that ep_rank + EP*edp_rank =
 * cp_rank + CP*dp_rank, and with CP = 1: dp_rank = ep_rank + EP*edp_rank (EP consecutive
 * data-parallel ranks form an expert-parallel group).
 *   ep_comm   expert-parallel group, the ranks that exchange tokens (alltoallv): same (tp, edp,
 *             pp), ordered by ep_rank; a one-process group when EP = 1
 *   edp_comm  expert data-parallel group, over which expert gradients are reduced: same (tp, ep,
 *             pp), ordered by edp_rank.  When EP = 1 and CP = 1 its ranks are dp_comm's and
 *             edp_comm IS dp_comm (the same pointer: no second MPI/NCCL communicator; its counters
 *             are dp_comm's, so a sum of counters over the groups must skip edp_comm when
 *             edp_comm == dp_comm); otherwise a communicator of its own.
 * Distributed-optimizer instances (--num-distributed-optimizer-instances N, hybrid sharding;
 * megatron/core/parallel_state.py initialize_model_parallel): the data x context group of
 * DPC = DP*CP ranks, in its order q = cp_rank + CP*dp_rank, is cut into N instances of
 * I = DPC/N consecutive ranks (instance q / I, place q % I in it), and the expert-data group of
 * EDP ranks likewise into N instances of EDP/N consecutive ranks.  The distributed optimizer
 * shards over an instance and the instances are replicas:
 *   idp_comm  Megatron's intra_partial_data_parallel_group_with_cp: same (tp, pp, q / I),
 *             ordered by q; gradients are reduce-scattered and parameters all-gathered over it
 *   iedp_comm Megatron's intra_partial_expert_data_parallel_group: same (tp, ep, pp,
 *             edp_rank / (EDP/N)), ordered by edp_rank; the same for expert rows
 *   odp_comm  Megatron's inter_distributed_optimizer_instance_group (one for dense and expert
 *             rows, as there: the expert grid's level-1 hierarchical group, which holds the same
 *             ranks): same (tp, pp, q % I), ordered by q / I; each owned gradient shard is
 *             all-reduced over it after the reduce-scatter.  NULL when N = 1
 *   inst_comm Megatron's intra_distributed_optimizer_instance_group: every rank of instance q / I
 *             (all TP and PP ranks with it), ordered by world rank; the gradient norm's sum goes
 *             over it (a host communicator, as world)
 * With N = 1, idp_comm IS dpcp_comm, iedp_comm IS edp_comm and inst_comm IS world (the same
 * pointers); inst = 1, inst_rank = 0.
 * The single-process state has every size 1 (edp_comm == dpcp_comm == dp_comm). */
typedef struct mgt_parallel {
	int world_size, world_rank;
	int tp, pp, dp, cp, ep, edp;        /* sizes */
	int tp_rank, pp_rank, dp_rank, cp_rank, ep_rank, edp_rank;
	int inst, inst_rank;                /* distributed-optimizer instances, this rank's */
	mgt_comm *world, *tp_comm, *pp_comm, *dp_comm, *mp_comm, *emb_comm, *ep_comm, *edp_comm;
	mgt_comm *cp_comm, *dpcp_comm;
	mgt_comm *idp_comm, *iedp_comm, *odp_comm, *inst_comm;
	/* after mgt_parallel_to_device: the host communicators the device ones wrap (host_edp ==
	 * host_dp when edp_comm == dp_comm) */
	mgt_comm *host_tp, *host_pp, *host_dp, *host_emb, *host_ep, *host_edp, *host_cp, *host_dpcp;
	mgt_comm *host_idp, *host_iedp, *host_odp;
} mgt_parallel;

/* Fill *ps for one process (all sizes 1, single-rank communicators).  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_parallel_init_single(mgt_parallel *ps);
/* Free every communicator (device ones first; a communicator held in two fields, edp_comm ==
 * dp_comm, once); collective, as MPI_Comm_free and NCCL's finalize are: every rank calls it.
 * Free the parallel state before the backend. */
void mgt_parallel_free(mgt_parallel *ps);

/* ---- the process runtime (lib/parallel/mpi.c) ---- */

/* The MPI reduce_scatter works in pieces whose pack buffer holds at most this many bytes (every
 * rank's part of a piece side by side), so that OpenMPI's own temporaries stay bounded too. */
#define MGT_MPI_PACK_BYTES ((size_t)32 << 20)
/* Host bytes a collective over `size` MPI ranks may hold besides the caller's buffers, at most:
 * the pack and OpenMPI's temporaries for one piece (its basic linear reduce_scatter_block and
 * pipelined reduce each allocate a piece on the root: measured with heaptrack, OpenMPI 4.1 on
 * Debian 12), three packs; 0 for one rank.  mgt-train and mgt-plan count it as communication
 * memory of context parallelism's all-gather on the CPU backend (the data-parallel group's is
 * mgt_comm_mpi_pack_bytes). */
size_t mgt_comm_mpi_scratch_bytes(int size);
/* Host bytes of the pack buffer mgt's MPI reduce_scatter allocates for the duration of a call
 * over `size` ranks giving each `part` elements of es bytes: size x m0 x es with m0 = part, or
 * at most MGT_MPI_PACK_BYTES / es / size (mpi.c scatter_chunks; the 2^31-element limit of a
 * piece can only make it smaller); 0 for one rank.  mgt-train and mgt-plan count the largest
 * over the buckets the gradients are reduce-scattered in as the data-parallel group's
 * communication memory on the CPU backend (its all-reduce and the in-place all-gathers allocate
 * nothing of mgt's; OpenMPI's own temporaries, which heaptrack shows on the root of a
 * reduce_scatter_block, did not raise the measured peak RSS: tests/bench/fsdp_memory.sh). */
size_t mgt_comm_mpi_pack_bytes(int size, size_t part, size_t es);

/* Start the multi-process runtime when this process was launched by mpirun/srun (OpenMPI's
 * OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, Slurm's SLURM_NTASKS > 1 or PMI_SIZE in the
 * environment) and mgt was built with MPI: MPI_Init_thread (MPI_THREAD_FUNNELED), errors
 * returned rather than fatal.  Otherwise (and when called again) it does nothing and the world
 * is one process.  Errors: MGT_ERR_USAGE (launched by mpirun with more than one process but
 * built without MPI), MGT_ERR_IO (MPI_Init failed). */
mgt_status mgt_parallel_runtime_init(int *argc, char ***argv);
/* Processes of this job on this machine (OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's
 * SLURM_NTASKS_PER_NODE), 1 when unknown. */
int mgt_parallel_local_size(void);
/* Whether mgt_parallel_runtime_init started MPI; world size and rank (1 and 0 without it). */
int mgt_parallel_active(void);
int mgt_parallel_world_size(void);
int mgt_parallel_world_rank(void);
/* Every rank, together: rank 0's st (a check only rank 0 makes, such as a preflight of the
 * file system) becomes that of every rank whose own st is MGT_OK, so that all exit with it
 * instead of the others waiting in their next collective until the launcher kills them; their
 * message says rank 0 refused.  A rank's own failure is returned as it is.  Returns st
 * unchanged without MPI.  Errors: st, rank 0's; MGT_ERR_IO when the broadcast fails. */
mgt_status mgt_parallel_agree_root(mgt_status st);
/* Take every rank of the job down with exit status code (MPI_Abort) after the caller printed
 * its message; returns only without MPI (the caller then exits itself). */
void mgt_parallel_abort(int code);
/* MPI_Finalize when MPI is active (after every communicator is freed). */
void mgt_parallel_finalize(void);

/* Fill *ps for the whole job with tensor-parallel size tp, pipeline size pp and context size
 * cp (data-parallel size = world / (tp*pp*cp)), creating the groups above; one process (no
 * MPI) gives the single state when tp = pp = cp = 1.  Every rank must call it with the same
 * sizes.  Errors: MGT_ERR_USAGE (world size not divisible by tp*pp*cp, naming the flags and the
 * numbers; the same on every rank, so every rank can exit with it), MGT_ERR_NOMEM,
 * MGT_ERR_IO (MPI group creation failed). */
mgt_status mgt_parallel_init(mgt_parallel *ps, int tp, int pp, int cp);
/* mgt_parallel_init with expert-parallel size ep (--expert-model-parallel-size), making the
 * expert groups above; mgt_parallel_init is the ep = 1 case.  Every rank must call it with the
 * same sizes.  Errors: those of mgt_parallel_init, and MGT_ERR_USAGE when ep < 1 or ep does not
 * divide the data-parallel size (times the context-parallel size when cp > 1: Megatron's
 * world % (ETP*EP*PP) == 0), naming --expert-model-parallel-size, the data-parallel size and
 * the world size (the same on every rank). */
mgt_status mgt_parallel_init_ep(mgt_parallel *ps, int tp, int pp, int cp, int ep);
/* mgt_parallel_init_ep with `instances` distributed-optimizer instances (the groups above;
 * megatron/core/parallel_state.py, num_distributed_optimizer_instances); mgt_parallel_init_ep is
 * the instances = 1 case.  Every rank must call it with the same sizes.  Errors: those of
 * mgt_parallel_init_ep, and MGT_ERR_USAGE when instances < 1 or it does not divide the data x
 * context-parallel size or the expert-data-parallel size (Megatron's assertions), naming
 * --num-distributed-optimizer-instances and the size (the same on every rank). */
mgt_status mgt_parallel_init_hsdp(mgt_parallel *ps, int tp, int pp, int cp, int ep, int instances);

/* ---- communicators on backend (device) memory ----
 *
 * Both communicators wrap a host communicator `host` (the MPI one of a group from
 * mgt_parallel_init, or mgt_comm_single) spanning the same ranks, and take buffers in memory of
 * the backend `be` (be->ops->alloc).  Their name, rank and size are host's.  Both are freed with
 * mgt_comm_destroy, which does NOT free host or be: the caller owns both, keeps them alive while
 * the communicator lives and destroys the communicator first (then host, then be).
 *
 * Byte counting follows parallel.h exactly: comm->bytes_sent and comm->calls of the device
 * communicator advance by what the host communicator's formulas give for the same operation
 * (nothing when size == 1).  Operations done through host also advance host's own counters, so
 * sum the counters of either host or the device communicator, never both.
 */

#ifndef MGT_BACKEND_H
typedef struct mgt_backend mgt_backend;
#endif

/* The staged communicator (lib/parallel/staged.c): every operation downloads the device buffer(s)
 * into a host staging buffer, runs host's operation on it and uploads the result (only the
 * buffers the operation reads are downloaded and only those it writes are uploaded; broadcast
 * downloads on the root only).  Works with any backend and any host communicator: the
 * pipeline's send/recv under CUDA (send keeps host's "never waits for the receiver": the data
 * is downloaded, which waits for the backend's queued work, then sent as host sends), and every
 * collective when NCCL is missing.  Operations are synchronous: when one returns, its result is
 * in backend memory (upload returned).
 *   Buffers: as parallel.h (in place allgather and reduce_scatter included; since the input is
 *   downloaded before anything is uploaded, any other overlap of src and dst works as well).
 *   alltoallv downloads each non-empty send block (blocks adjacent in src in rank order in one
 *   transfer) into the staging buffer side by side, runs host's alltoallv there and uploads
 *   each receive block the same way (dst's gaps untouched); host must have alltoallv.
 *   The staging buffer is host memory grown to the largest operation seen (allgather and
 *   reduce_scatter: (size + 1) * n elements at most; alltoallv: its send plus receive counts)
 *   and held until destroy.
 *   Errors: host's (MGT_ERR_IO naming the group and the peer, as parallel.h), MGT_ERR_NOMEM (staging
 *   buffer), the backend's upload/download errors (MGT_ERR_IO) prefixed with
 *   "<group> group: staged <op>: ".  On failure the device buffer may be unchanged or partly
 *   written; counters hold whatever host counted.
 *   Counting: bytes_sent and calls add the difference of host's counters across the operation.
 * Returns NULL with the reason in *st (st may be NULL): MGT_ERR_USAGE (host or be NULL),
 * MGT_ERR_NOMEM. */
mgt_comm *mgt_comm_staged(mgt_comm *host, mgt_backend *be, mgt_status *st);

/* The NCCL communicator (lib/parallel/nccl.c, built with NCCL: -DMGT_HAVE_NCCL).  Collective over
 * host: every rank of host must call it, in the same order as its other collectives on host.
 * Rank 0 makes an ncclUniqueId, host's broadcast shares it and host's allreduce (max) of a
 * failure flag lets every rank fail together (both counted on host's counters only), then
 * ncclCommInitRank(host->size, id, host->rank) on the CUDA device current on the calling thread
 * (the one mgt_backend_cuda_create set).
 *   allreduce (sum, max), allgather, reduce_scatter, broadcast: NCCL collectives queued on the
 *   backend's stream (mgt_backend_cuda_stream(be)), in place as parallel.h allows (natively); a
 *   src/dst overlap other than the in-place ones falls back to the staged path.  They return
 *   once queued: the result is seen by later backend ops on that stream and by download (which
 *   waits for the stream), not by host code reading the memory otherwise.  n == 0 queues
 *   nothing but counts the call.
 *   alltoallv: ncclSend and ncclRecv of every non-empty block between ncclGroupStart and
 *   ncclGroupEnd on the same stream (queued, as the collectives); src overlapping dst's blocks
 *   falls back to the staged path.
 *   send, recv: through an internal staged communicator over host (never NCCL p2p, so send never
 *   waits for the receiver, and a pipeline schedule cannot deadlock on the one stream).
 *   barrier: waits for the backend's stream (be->ops->sync), checks NCCL's asynchronous error
 *   state, then host's barrier (which first completes this rank's sends).
 *   Errors: MGT_ERR_IO "nccl: <group>: <op>: <ncclGetErrorString>" (followed by
 *   "; <ncclGetLastError>" when NCCL says more), including errors of earlier queued operations
 *   (ncclCommGetAsyncError, checked before every operation: cheap, it does not wait); broadcast
 *   from a root outside the group: MGT_ERR_IO naming the group; send/recv/barrier: as the staged
 *   communicator.
 *   Counting: parallel.h's formulas (nothing when size == 1).
 *   destroy: waits for the backend's stream, ncclCommFinalize, ncclCommDestroy, destroys the
 *   internal staged communicator.  Like MPI_Comm_free, NCCL's finalize is collective: every rank
 *   destroys its NCCL communicators in the same order (mgt_parallel_free's).  Destroy it before
 *   be and host.
 * own_stream: queue the collectives on a stream of the communicator's own instead, after an
 * event that makes them wait for the work queued on the backend's stream so far; the backend's
 * later work runs concurrently with them until mgt_comm_wait (Megatron's overlapped gradient
 * reduction: buckets reduce while the backward goes on).  The caller must not touch a buffer
 * of a queued collective from backend ops before mgt_comm_wait.
 * A one-rank group works (an NCCL communicator of one rank).
 * Returns NULL with the reason in *st (st may be NULL): MGT_ERR_USAGE (host or be NULL, or be
 * is not a CUDA backend: mgt_backend_cuda_stream(be) is NULL), MGT_ERR_NOMEM, MGT_ERR_IO (NCCL or
 * CUDA failed, "nccl: <group>: ...").
 * A local failure before ncclCommInitRank (rank 0's ncclGetUniqueId included) reaches every
 * rank through that allreduce, so every rank returns an error instead of hanging; a failure
 * inside ncclCommInitRank on one rank may leave the others waiting in it (NCCL's behaviour).
 *
 * Built without NCCL (lib/parallel/nonccl.c): returns mgt_comm_staged(host, be, st) instead, so
 * callers need no #ifdef; the collectives are then staged through host (slower, same results
 * and counts).  mgt_parallel_have_nccl tells which one a build gives. */
mgt_comm *mgt_comm_nccl(mgt_comm *host, mgt_backend *be, bool own_stream, mgt_status *st);

/* 1 when mgt was built with NCCL (mgt_comm_nccl makes NCCL communicators), 0 when
 * mgt_comm_nccl falls back to the staged communicator. */
int mgt_parallel_have_nccl(void);

/* Put the groups that carry tensors onto the memory of backend be (collective: every rank calls
 * it after mgt_parallel_init, with its own backend): tensor, data, context, data-context,
 * embedding, expert and expert data groups become NCCL communicators (mgt_comm_nccl; staged ones
 * for one-process groups; the data, data-context and expert data groups on their own streams when
 * overlap_dp, for --overlap-grad-reduce: mgt_comm_wait each; the context group's send and recv
 * are staged, as NCCL's are), the pipeline group a staged one (its send never waits for the
 * receiver).  edp_comm == dp_comm and dpcp_comm == dp_comm stay so (one device communicator);
 * with instances the intra-instance groups move as the data groups (their own streams when
 * overlap_dp) and the inter-instance group too, on its own stream (it waits for the backend's
 * stream: call mgt_comm_wait on the intra group before queuing on it); inst_comm stays a host one.  NCCL refuses two ranks of one
 * communicator on one GPU, so when a machine of the job runs more ranks than it has GPUs
 * (mgt_parallel_local_size against mgt_backend_cuda_devices, agreed over the world) every group is a
 * staged one instead.  world and mp_comm stay host
 * communicators: the trainer reduces host scalars over them (loss sums, the gradient norm).  The
 * host communicators are kept in host_* and freed by mgt_parallel_free.  Nothing to do when
 * be->host_memory.  Errors: those of mgt_comm_nccl and mgt_comm_staged; on error ps is as before
 * for the groups not yet moved, and mgt_parallel_free still frees everything. */
mgt_status mgt_parallel_to_device(mgt_parallel *ps, mgt_backend *be, bool overlap_dp);

/* ---- pipeline schedules (lib/parallel/sched.c; megatron/core/pipeline_parallel/schedules.py) ----
 * One step of a pipeline schedule: the forward or backward of micro-batch mb on model chunk. */
typedef struct mgt_parallel_sched_action {
	bool fwd;
	int mb, chunk;
} mgt_parallel_sched_action;

/* Pipeline rank r of P, M micro-batches, V chunks (virtual stages) per rank, groups of G
 * (--microbatch-group-size-per-vp-stage).  check: the interleaving constraints (MGT_ERR_USAGE
 * naming the flags).  build: this rank's actions for one global batch (1F1B for V = 1,
 * Megatron's interleaved schedule otherwise; forward_only: the forwards only), a new array
 * *out [*n] (free()); MGT_ERR_NOMEM.  chunk_slots: the activation slots chunk needs in a, the
 * most micro-batches forwarded and not yet backwarded. */
mgt_status mgt_parallel_sched_check(int P, int M, int V, int G);
mgt_status mgt_parallel_sched_build(int P, int r, int M, int V, int G, bool forward_only,
				    mgt_parallel_sched_action **out, int *n);
int mgt_parallel_sched_chunk_slots(const mgt_parallel_sched_action *a, int n, int chunk);

/* Activation slots of pipeline rank r of P under mgt-train's schedule for M micro-batches, V
 * virtual stages (chunks) per rank, groups of G micro-batches (Megatron's
 * --microbatch-group-size-per-vp-stage; G = P by default): slots[c] (c < V) gets the most
 * micro-batches chunk c holds forwarded and not yet backwarded -- min(P - r, M) under 1F1B
 * (V = 1), Megatron's interleaved warm-up count otherwise (schedules.py
 * forward_backward_pipelining_with_interleaving).  The same schedule and count mgt-train uses
 * (lib/parallel/sched.c), for planners.  Errors: MGT_ERR_USAGE (the interleaving constraints on
 * P, M, G, naming the flags), MGT_ERR_NOMEM. */
mgt_status mgt_parallel_sched_slots(int P, int r, int M, int V, int G, int *slots);

#endif
