/* lib/plan: choosing a parallel layout (TP, PP, virtual stages, DP, micro-batch size,
 * recomputation, data-parallel sharding: the distributed optimizer or FSDP, sequence
 * parallelism) for a model, a cluster and a
 * batch: the memory each GPU needs and a predicted iteration time (mgt-plan(1), mgt-plan(5)).
 *
 * Memory is not modelled: it is what mgt-train allocates, asked of the allocator's own sizing
 * code -- mgt_model_measure (lib/model: parameters, gradients, activations of every slot,
 * workspaces, with layout.recompute) for each model chunk of the most loaded pipeline ranks
 * (the first and the last), the activation slots from mgt-train's schedule
 * (mgt_parallel_sched_slots), and the Adam moments as lib/train sizes them (2 fp32 values per
 * element of the flat buffer, or of its 1/DP shard with the distributed optimizer and FSDP; mgt
 * keeps its parameters in fp32, so there is no separate main copy).  FSDP's layouts (optim_grads,
 * optim_grads_params) are measured as mgt-train lays them out: one bucket a layer, the sharded
 * gradients and parameters as lib/model/shard.c counts them.  To that a measured per-process
 * constant is added (the cluster's overhead_bytes: CUDA context and allocator slack on a GPU,
 * the process's baseline RSS on the CPU backend).
 *
 * Time is a model of a Megatron-class implementation (bf16 GEMMs at the measured ceiling,
 * fused element-wise kernels, flash attention), built from physical quantities only:
 *   GEMM      t = 2mnk / gemm_tflops + bytes(A, B, C) / memory_bandwidth, per GEMM of the layer
 *             at its shape (forward, data-gradient and weight-gradient GEMMs), so that thin
 *             GEMMs (small TP shards, small hidden sizes) run below the ceiling; with fp8 the
 *             decoder layers' linears at fp8_gemm_tflops with 1-byte A and B, plus the casts
 *             (read the input, write a byte) and the transposed copies (a byte each way);
 *   attention causal flash attention, Megatron's FLOPs (halved for causality) at
 *             attention_fwd/bwd_efficiency of the dense peak;
 *   element-wise  bytes per token and layer (norms, bias-dropout-add, activation, RoPE; a Mamba
 *             layer's mixer: conv, scan and gated norm) and per logit (cross entropy), at
 *             memory_bandwidth, 2 bytes an element under bf16/fp16 and 4 under fp32 (split by TP,
 *             the norms and dropout by sequence parallelism too);
 *   TP/SP     all-gathers and reduce-scatters of [s b h] per layer (all-reduces without SP) over
 *             the intra-node link, hidden behind the GEMMs with --tp-comm-overlap;
 *   CP        (fixed --context-parallel-size) each rank s / CP tokens of every sequence; per
 *             attention layer the keys and values (p2p ring, all-gather) or qkv and the output
 *             (a2a), per Mamba layer two all-to-alls each way (x, B, C, dt out and y back; dy out
 *             and their gradients back), in the training precision's bytes, the volumes of
 *             tests/cli/comm_volume.py (what mgt-train moves); the all-to-alls exposed, the
 *             ring's and all-gather's under the attention block's compute, each leaving at least
 *             1/CP of itself; recomputation sends the recomputed forwards' exchanges again;
 *   DP        reduce-scatter of fp32 gradients and all-gather of bf16 parameters (all-reduce
 *             without the distributed optimizer), ring bus bandwidth min(intra, k x inter) for a
 *             group with k GPUs a node spanning nodes; overlapped with the last micro-batch's
 *             backward (--overlap-grad-reduce) and the first one's forward
 *             (--overlap-param-gather) as Megatron's DDP does, the last bucket exposed; FSDP:
 *             a reduce-scatter every micro-batch (and with optim_grads_params two all-gathers of
 *             the layers' parameters), exposed per micro-batch the same way (plan.c fsdp_time);
 *   PP        point-to-point sends of [s b h] (/TP with SP) per micro-batch and stage boundary
 *             (hidden by the interleaved schedule's overlap), and the bubble: the pipeline takes
 *             (m + (p - 1) / v) times the slowest rank's micro-batch time;
 *   kernels   kernel_overhead for each kernel a layer launches (12 forward, 24 backward);
 *   recompute the forward of core attention (selective) or of whole layers (full) again;
 *   optimizer a memory-bound pass over the optimizer's shard.
 * Every constant is a field of the cluster (mgt-plan(5) gives the sources); nothing is fitted
 * to the published throughputs it is checked against (tests/bench/plan_weak_scaling.sh).
 */
#ifndef MGT_PLAN_H
#define MGT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "util/util.h"

/* A cluster (mgt-plan(5) CLUSTER FILES): units are bytes, GB/s (1e9 bytes), TFLOP/s (1e12),
 * microseconds.  Bandwidths are per GPU and direction. */
typedef struct mgt_cluster {
	char name[64];
	int gpus_per_node, nodes;
	double gpu_memory;                  /* bytes a process may use */
	double peak_tflops;                 /* dense bf16/fp16 peak per GPU (the MFU denominator) */
	double gemm_tflops;                 /* compute-side rate of large bf16/fp16 GEMMs */
	double fp32_tflops;                 /* the same for fp32 GEMMs */
	double fp8_gemm_tflops;             /* the same for fp8 GEMMs (cuBLASLt, e4m3, fast accumulation);
					     * 0: the GPU has none (optional key) */
	double memory_bandwidth;            /* GB/s achieved by streaming kernels */
	double intra_bandwidth, inter_bandwidth; /* GB/s: NVLink (within a node), network (between) */
	double intra_latency, inter_latency;     /* microseconds per collective step */
	double attention_fwd_efficiency, attention_bwd_efficiency; /* of peak_tflops */
	double kernel_overhead;             /* microseconds a kernel: launch, ramp-up and tail */
	double efficiency;                  /* sustained fraction of the rates above over a whole run
					     * (clocks under the power limit, imperfect fusion): 1 in
					     * the presets; optional key, default 1 */
	double overhead_bytes;              /* per process: CUDA context + allocator, or baseline RSS */
	bool host_memory;                   /* the CPU backend: memory is the host's */
} mgt_cluster;

/* Read a cluster file, or a preset NAME (share/mgt/clusters/NAME.json beside the executable's
 * ../share/mgt, or $MGT_SHARE/clusters).  Keys starting with '_' are comments.  Errors:
 * MGT_ERR_USAGE (no such preset, naming where it looked), MGT_ERR_INPUT (malformed JSON, a
 * missing, unknown or out-of-range key, naming the file and key). */
mgt_status mgt_cluster_load(const char *name_or_path, mgt_cluster *c);

/* Calibrate gemm_tflops and memory_bandwidth from a GEMM-ceiling benchmark result file
 * (tests/bench/gpu.sh output: the lines "gemm bf16 8192^3: X TFLOP/s (median of N, T ms" and
 * "add 1 GiB (...): B GB/s"): memory_bandwidth = B, and gemm_tflops from the 8192^3 time less
 * the memory traffic of the GEMM and of the benchmark's fp32-to-bf16 operand casts at B; and,
 * when the file has the line "gemm fp8 8192^3: X TFLOP/s (median of N, T ms" (e4m3, bf16 D),
 * fp8_gemm_tflops from its time less its traffic (1-byte operands, a 2-byte result).
 * *check (may be NULL) gets the other shapes' measured / predicted TFLOP/s ratios as text.
 * Errors: MGT_ERR_IO (unreadable), MGT_ERR_INPUT (the lines are missing, naming the file). */
mgt_status mgt_cluster_calibrate(mgt_cluster *c, const char *bench_file, char *check, size_t n);

typedef enum { MGT_PLAN_FP32, MGT_PLAN_BF16, MGT_PLAN_FP16 } mgt_plan_precision;

/* What to plan for.  model: shape with vocab_size and seq_length set (not finalized: the
 * planner finalizes a copy per TP).  Layout fields: 0 (or -1 for the booleans) = search. */
typedef struct mgt_plan_request {
	mgt_model_config model;
	mgt_cluster cluster;
	int64_t global_batch_size;
	mgt_plan_precision precision;
	bool fp32_residual_connection;      /* --fp32-residual-connection: the residual stream fp32 */
	bool grad_reduce_in_bf16;           /* --grad-reduce-in-bf16 (bf16 only): gradients reduced in bf16,
					     * their bf16 copy counted with the gradients */
	mgt_fp8_mode fp8;                   /* --fp8-format: the decoder layers' linears in fp8 (delayed
					     * scaling): their GEMMs at fp8_gemm_tflops with 1-byte operands,
					     * the casts and transposes as memory traffic, the fp8 buffers in
					     * the memory (mgt_model_measure) */
	int tp, pp, vp, mbs;                /* fixed sizes (vp: virtual stages per pipeline rank) */
	int cp;                             /* --context-parallel-size: fixed, never searched (0 or 1:
					     * none); DP = GPUs / (TP x PP x CP), gradients over DP x CP */
	mgt_cp_comm cp_comm;                /* --cp-comm-type of the attention layers under CP > 1 */
	int max_tp, max_pp, max_mbs;        /* bounds of the search (0: gpus_per_node, layers, 16) */
	int recompute;                      /* -1 search, else mgt_recompute_granularity */
	int distopt, sp;                    /* -1 search, 0 off, 1 on (distopt 1: optim, 0: no_shard) */
	int sharding;                       /* -1 search (within distopt), else the mgt_dp_sharding
					     * fixed (--use-megatron-fsdp --data-parallel-sharding-strategy) */
	int instances;                      /* --num-distributed-optimizer-instances (0 or 1: one): the
					     * optimizer state (with FSDP also gradients and parameters)
					     * sharded over DP / instances ranks; layouts whose DP it does
					     * not divide and no_shard are left out.  Memory only: the time
					     * model does not count the all-reduce across instances */
	bool overlap_grad_reduce, overlap_param_gather, tp_comm_overlap;
	double headroom;                    /* fraction of gpu_memory left free */
	bool ignore_memory;                 /* rank layouts that do not fit too (time only) */
	int top;                            /* plans to keep (0: 10) */
	/* for the plans' mgt-train flags (mgt_plan_train_args): the --model value (a preset or
	 * model JSON; NULL for a config.json, whose shape mgt-train cannot take from --model) and
	 * --vocab-size (0: the model's own) */
	const char *model_arg;
	int64_t vocab_arg;
} mgt_plan_request;

/* One layout and its predictions.  Memory: bytes on the most loaded GPU (mem_stage: its
 * pipeline rank).  Times: seconds per iteration, the parts of the critical path. */
typedef struct mgt_plan {
	int tp, pp, vp, dp, mbs, num_microbatches, gpus;
	int cp;                             /* context-parallel size (1: none); set from the request */
	bool sp;
	mgt_dp_sharding sharding;           /* optim: the distributed optimizer; optim_grads and
					     * optim_grads_params: Megatron-FSDP (--use-megatron-fsdp) */
	mgt_recompute recompute;
	int64_t bucket_size;                /* mgt-train's --ddp-bucket-size for this layout
					     * (MGT_BUCKETS_PER_LAYER under FSDP) */
	/* communication: the MPI collectives' host scratch on a host-memory cluster (the
	 * data-parallel reduce-scatter's pack, mgt_comm_mpi_pack_bytes), as mgt-train counts it */
	struct { double params, grads, optimizer, activations, workspace, communication, overhead, total, limit; } mem;
	int mem_stage;
	bool fits;
	struct {
		double compute, recompute, tp_comm, cp_comm, pp_comm, bubble, dp_comm, optimizer, iteration;
	} time;
	/* bytes the slowest pipeline rank sends over the context group an iteration (attention's
	 * ring, all-gather or all-to-all; the Mamba layers' all-to-alls): what mgt-train's --comm-log
	 * counts as "context" (tests/cli/comm_volume.py); 0 without CP */
	double cp_bytes;
	double model_flops, tflops_per_gpu, mfu;
} mgt_plan;

/* Counts of the search. */
typedef struct mgt_plan_stats {
	int64_t candidates, fitting;
	double seconds;
} mgt_plan_stats;

/* Predict one layout: p->tp, pp, vp, mbs, sp, sharding, recompute set by the caller; dp from the
 * cluster's GPUs.  Errors: MGT_ERR_USAGE naming what does not divide (layers by stages, the
 * batch by micro-batches, heads by TP, the interleaving constraints), NOMEM. */
mgt_status mgt_plan_evaluate(const mgt_plan_request *r, mgt_plan *p);

/* Search every layout the request allows on all the cluster's GPUs; *plans (malloc'd, caller
 * frees) gets the fastest ones that fit, best first, at most r->top.  *n == 0 when none fits
 * (*why then says why: what the smallest layout still needs); a layout that divides nothing
 * (no TP x PP x DP equals the GPUs) is MGT_ERR_USAGE.  Errors: MGT_ERR_USAGE (contradictory
 * constraints), MGT_ERR_NOMEM. */
mgt_status mgt_plan_search(const mgt_plan_request *r, mgt_plan **plans, int *n, mgt_plan_stats *st,
			   char *why, size_t why_n);

/* The smallest number of nodes (a power of two times r->cluster.nodes, up to 65536 GPUs) on
 * which some layout fits; 0 when none.  Errors: NOMEM. */
mgt_status mgt_plan_smallest_cluster(const mgt_plan_request *r, int *nodes);

/* The fp8 GEMM rate (TFLOP/s) plans use on cluster c: fp8_gemm_tflops, or on a host-memory
 * cluster (the CPU backend's emulation: the fp8 values through sgemm) gemm_tflops; 0 when the
 * GPU has no fp8. */
double mgt_plan_fp8_tflops(const mgt_cluster *c);

/* The mgt-train flags of a plan (NULL-terminated array of strings in one malloc'd block). */
char **mgt_plan_train_args(const mgt_plan_request *r, const mgt_plan *p);

#endif
