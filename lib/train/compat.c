/* lib/train/compat.c: Megatron-LM flags that mgt-train knows but does not implement.
 *
 * Every flag of megatron/training/arguments.py (and of the config dataclasses it turns into
 * flags) is one of: implemented (args.c's table), accepted without effect because mgt has no such
 * switch (the run computes what Megatron's would, or the flag only tunes speed or logging
 * elsewhere), or refused with the reason.  Rows are looked up by exact name, then by prefix
 * (rows whose name ends in '-').  A row with `only` accepts that one value (a no-op there) and
 * refuses any other with the reason.
 */
#include "train.h"

#include <string.h>

typedef struct {
	const char *flag;  /* without the leading dashes; a trailing '-' makes it a prefix */
	char cls;          /* 'i' accepted without effect, 'r' refused, 'a' alias: why is "dest=value", or
			    * "dest=" for another name of a flag with a value (nargs '1') */
	char nargs;        /* '0' none, '1' one value, '+' every word up to the next --flag */
	const char *only;  /* with 'i': the one value accepted; other values are refused */
	const char *why;
} compat_row;

/* Reasons shared by many rows. */
#define FUSED "mgt's kernels are fused where it pays; there is no switch"
#define WANDB "Weights & Biases is not built in; --metrics-file writes the figures as JSONL"
#define PROF "mgt has no built-in profiler switch: run it under nsys, ncu or perf"
#define FP8 "fp8 and fp4 training are not implemented (--bf16 and --fp16 are)"
#define FLEX "the flex token dispatcher (DeepEP, HybridEP, NCCL-EP) is not implemented: use --moe-token-dispatcher-type alltoall or allgather"
#define NOFLEX "used by the flex token dispatcher only, which is not implemented"
#define TEGROUP "Transformer Engine is not used; mgt keeps each expert's weights apart and runs the local experts as one grouped GEMM"
#define EPOVERLAP "expert-parallel communication is not overlapped with computation (same results)"
#define UPCYCLE "upcycling a dense checkpoint into an MoE model is not implemented"
#define FSDP "FSDP is not implemented; --use-distributed-optimizer shards the optimizer state"
#define INFER "inference and text generation are not part of mgt-train"
#define RL "reinforcement learning is not part of mgt-train"
#define NOTGPT "mgt-train pretrains GPT models (pretrain_gpt.py) only"
#define OFFLOAD "optimizer offloading is not implemented"
#define DISTCKPT "mgt writes HDF5 checkpoints (mgt-ckpt(5)); torch_dist and torch checkpoints are Megatron's own, and a converter to them (mgt-ckpt-convert) is planned"
#define TELEMETRY "NVIDIA's telemetry and fault-tolerance packages are not used"
#define MLA "multi-latent attention is not implemented"
#define NOTIMPL "not implemented"
#define NOTUSED "mgt has no such switch"

static const compat_row rows[] = {
	/* model implementation and kernels */
	{ "use-mcore-models", 'i', '0', NULL, "mgt has one model implementation, with Megatron-Core's tensor layout" },
	{ "apply-query-key-layer-scaling", 'i', '0', NULL, "mgt's attention scales Q.K^T once and takes the softmax in fp32: Megatron's scaling by the layer number and its undoing cancel" },
	{ "use-mp-args-from-checkpoint-args", 'i', '0', NULL, "mgt loads a checkpoint under any parallel layout (resharding on load): the layout is the command line's, with the same results" },
	{ "local-rank", 'i', '1', NULL, "mgt takes the rank and its GPU from the launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), not from torch.distributed.launch's --local-rank" },
	{ "use-legacy-models", 'r', '0', NULL, "mgt implements Megatron-Core's models only" },
	{ "transformer-impl", 'i', '1', NULL, "mgt has one transformer implementation" },
	{ "attention-backend", 'i', '1', NULL, "mgt picks its own fused attention kernel" },
	{ "use-flash-attn", 'i', '0', NULL, "mgt's attention is a fused (flash-style) kernel already" },
	{ "no-masked-softmax-fusion", 'i', '0', NULL, FUSED },
	{ "masked-softmax-fusion", 'i', '0', NULL, FUSED },
	{ "no-bias-gelu-fusion", 'i', '0', NULL, FUSED },
	{ "no-bias-swiglu-fusion", 'i', '0', NULL, FUSED },
	{ "no-bias-dropout-fusion", 'i', '0', NULL, FUSED },
	{ "no-rope-fusion", 'i', '0', NULL, FUSED },
	{ "no-persist-layer-norm", 'i', '0', NULL, FUSED },
	{ "no-gradient-accumulation-fusion", 'i', '0', NULL, FUSED },
	{ "cross-entropy-loss-fusion", 'i', '0', NULL, FUSED },
	{ "cross-entropy-fusion-impl", 'i', '1', NULL, FUSED },
	{ "no-gradient-reduce-div-fusion", 'i', '0', NULL, FUSED },
	{ "attention-softmax-in-fp32", 'i', '0', NULL, "mgt's softmax is always computed in fp32" },
	{ "accumulate-allreduce-grads-in-fp32", 'i', '0', NULL, "gradients are accumulated and reduced in fp32 unless --grad-reduce-in-bf16" },
	{ "fp16-lm-cross-entropy", 'i', '0', NULL, "the cross entropy is always computed in fp32; needs --fp16" },
	{ "output-logit-dtype", 'i', '1', NULL, "logits are stored in the training precision (fp32, or 16 bits under --bf16/--fp16)" },
	{ "onnx-safe", 'i', '1', NULL, NOTUSED },
	{ "no-position-embedding", 'i', '0', NULL, "Megatron-Core takes positions from --position-embedding-type only" },
	{ "use-rotary-position-embeddings", 'a', '0', NULL, "position_embedding_type=rope" },
	{ "use-cpu-initialization", 'i', '0', NULL, "initial values come from a counter-based RNG and are the same on any device" },
	{ "no-initialization", 'i', '0', NULL, "initialization costs nothing worth skipping" },
	{ "deterministic-mode", 'i', '0', NULL, "mgt's runs are deterministic already" },
	{ "no-async-tensor-model-parallel-allreduce", 'i', '0', NULL, NOTUSED },
	{ "tp-comm-overlap", 'i', '0', NULL, "tensor-parallel communication is not overlapped (same results)" },
	{ "tp-comm-overlap-cfg", 'i', '1', NULL, "tensor-parallel communication is not overlapped (same results)" },
	{ "defer-embedding-wgrad-compute", 'i', '0', NULL, NOTUSED },
	{ "cuda-graph-", 'i', '1', NULL, "CUDA graphs are not used (same results)" },
	{ "cuda-graph-scope", 'i', '+', NULL, "CUDA graphs are not used (same results)" },
	{ "cuda-graph-modules", 'i', '+', NULL, "CUDA graphs are not used (same results)" },
	{ "enable-cuda-graph", 'i', '0', NULL, "CUDA graphs are not used (same results)" },
	{ "squared-relu", 'r', '0', NULL, "only GELU and SwiGLU MLPs are implemented" },
	{ "quick-geglu", 'r', '0', NULL, "only GELU and SwiGLU MLPs are implemented" },
	{ "init-method-xavier-uniform", 'r', '0', NULL, "only N(0, --init-method-std) initialization is implemented" },
	{ "apply-layernorm-1p", 'r', '0', NULL, "zero-centred norm weights are not implemented yet" },
	{ "rotary-interleaved", 'r', '0', NULL, "interleaved RoPE is not implemented (the rotate-half form is)" },
	{ "window-size", 'r', '1', NULL, "sliding-window attention is not implemented" },
	{ "window-attn-skip-freq", 'r', '1', NULL, "sliding-window attention is not implemented" },
	{ "rotary-seq-len-interpolation-factor", 'r', '1', NULL, "RoPE scaling is not implemented yet" },
	{ "rope-type", 'r', '1', NULL, NOTIMPL },
	{ "no-rope-freq", 'r', '1', NULL, NOTIMPL },
	{ "yarn-", 'r', '1', NULL, "YaRN position embeddings are not implemented" },
	{ "no-yarn-correction-range-round-to-int", 'r', '0', NULL, "YaRN position embeddings are not implemented" },
	{ "relative-attention-", 'r', '1', NULL, "relative position embeddings are not implemented" },
	{ "encoder-num-layers", 'r', '1', NULL, "GPT models have no encoder: use --num-layers" },
	{ "decoder-num-layers", 'r', '1', NULL, "use --num-layers" },
	{ "encoder-seq-length", 'r', '1', NULL, "use --seq-length" },
	{ "decoder-seq-length", 'r', '1', NULL, "use --seq-length" },
	{ "linear-attention-freq", 'r', '1', NULL, NOTIMPL },
	{ "heterogeneous-layers-config-", 'r', '1', NULL, NOTIMPL },
	{ "enable-experimental", 'r', '0', NULL, NOTIMPL },
	{ "spec", 'r', '+', NULL, "custom layer specs are not implemented" },
	{ "hybrid-", 'r', '1', NULL, "hybrid (Mamba) models are not implemented" },
	{ "hybrid-context-parallel", 'r', '0', NULL, "hybrid data and context parallelism (sequences of mixed lengths spread over DP x CP ranks) is not implemented" },
	{ "mamba-", 'r', '1', NULL, "hybrid (Mamba) models are not implemented" },
	{ "yaml-cfg", 'r', '1', NULL, "give the flags on the command line, or a model JSON with --model" },
	{ "kitchen-", 'r', '1', NULL, NOTIMPL },
	{ "multi-latent-attention", 'r', '0', NULL, MLA },
	{ "mtp-", 'r', '1', NULL, "multi-token prediction is not implemented" },
	{ "account-for-embedding-in-pipeline-split", 'r', '0', NULL, "use --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers" },
	{ "account-for-loss-in-pipeline-split", 'r', '0', NULL, "use --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers" },
	{ "te-rng-tracker", 'i', '0', NULL, "dropout draws from a counter-based RNG keyed by seed, iteration and site" },
	{ "init-model-with-meta-device", 'i', '0', NULL, NOTUSED },
	{ "use-te-", 'i', '0', NULL, "Transformer Engine is not used" },
	{ "embedding-init-method-std", 'r', '1', NULL, "every weight is initialized with --init-method-std (scaled for the output projections)" },
	{ "q-lora-rank", 'r', '1', NULL, MLA }, { "kv-lora-rank", 'r', '1', NULL, MLA },
	{ "qk-head-dim", 'r', '1', NULL, MLA }, { "qk-pos-emb-head-dim", 'r', '1', NULL, MLA },
	{ "v-head-dim", 'r', '1', NULL, MLA }, { "rotary-scaling-factor", 'r', '1', NULL, MLA },
	{ "mscale", 'r', '1', NULL, MLA }, { "mscale-all-dim", 'r', '1', NULL, MLA },
	{ "cache-mla-latents", 'r', '0', NULL, MLA }, { "mla-down-proj-fusion", 'r', '0', NULL, MLA },
	/* precision */
	{ "fp8-", 'r', '1', NULL, FP8 }, { "fp4-", 'r', '1', NULL, FP8 },
	{ "first-last-layers-bf16", 'r', '0', NULL, FP8 },
	{ "num-layers-at-start-in-bf16", 'r', '1', NULL, FP8 },
	{ "num-layers-at-end-in-bf16", 'r', '1', NULL, FP8 },
	{ "te-precision-config-file", 'r', '1', NULL, FP8 },
	{ "reuse-grad-buf-for-mxfp8-param-ag", 'r', '0', NULL, FP8 },
	{ "keep-fp8-transpose-cache", 'r', '0', NULL, FP8 },
	{ "use-precision-aware-optimizer", 'r', '0', NULL, "the optimizer keeps fp32 main parameters and moments" },
	{ "main-grads-dtype", 'i', '1', "fp32", "main gradients are fp32" },
	{ "main-params-dtype", 'i', '1', "fp32", "main parameters are fp32" },
	{ "exp-avg-dtype", 'i', '1', "fp32", "Adam moments are fp32" },
	{ "exp-avg-sq-dtype", 'i', '1', "fp32", "Adam moments are fp32" },
	/* MoE, context and expert parallelism */
	{ "moe-grouped-gemm", 'i', '0', NULL, "mgt always runs the local experts as one grouped GEMM" },
	{ "moe-permute-fusion", 'i', '0', NULL, FUSED },
	{ "moe-router-fusion", 'i', '0', NULL, FUSED },
	{ "moe-shared-expert-overlap", 'i', '0', NULL, "the shared expert runs before the router, not overlapped with the token dispatch (the same results up to the order of a gradient sum)" },
	{ "use-grouped-gemm-for-shared-expert", 'i', '0', NULL, NOTUSED },
	{ "moe-use-grouped-tensor", 'i', '0', NULL, TEGROUP },
	{ "moe-single-grouped-weight", 'i', '0', NULL, TEGROUP },
	{ "moe-single-grouped-bias", 'r', '0', NULL, "biases in the linear layers of an MoE model are not implemented" },
	{ "overlap-moe-expert-parallel-comm", 'i', '0', NULL, EPOVERLAP },
	{ "overlap-dispatch-backward-with-experts-wgrad", 'i', '0', NULL, EPOVERLAP },
	{ "moe-router-quantile-balancing-ema", 'i', '1', NULL, "used by --moe-router-load-balancing-type quantile_balancing only, which is not implemented" },
	{ "moe-flex-dispatcher-backend", 'i', '1', "deepep", NOFLEX },
	{ "moe-flex-dispatcher-num-sms", 'i', '1', NULL, NOFLEX },
	{ "moe-deepep-num-sms", 'i', '1', NULL, NOFLEX },
	{ "moe-hybridep-", 'i', '1', NULL, NOFLEX },
	{ "moe-hybridep-pad-uneven-dispatch-inputs", 'i', '0', NULL, NOFLEX },
	{ "moe-permute-fusion-into-hybridep", 'i', '0', NULL, NOFLEX },
	{ "moe-ncclep-zero-copy", 'i', '0', NULL, NOFLEX },
	{ "moe-dispatch-fwd-dtype", 'i', '1', "bf16", "mxfp8 dispatch needs the flex dispatcher, which is not implemented" },
	{ "moe-combine-bwd-dtype", 'i', '1', "bf16", "mxfp8 combine needs the flex dispatcher, which is not implemented" },
	{ "moe-enable-deepep", 'r', '0', NULL, FLEX },
	{ "moe-expert-rank-capacity-factor", 'r', '1', NULL, FLEX },
	{ "moe-use-upcycling", 'r', '0', NULL, UPCYCLE },
	{ "moe-upcycling-granularity", 'r', '1', NULL, UPCYCLE },
	{ "moe-enable-routing-replay", 'r', '0', NULL, "routing replay is not implemented" },
	{ "moe-router-topk-limited-devices", 'r', '1', NULL, "deprecated in Megatron-LM: use --moe-router-num-groups and --moe-router-group-topk" },
	{ "moe-router-padding-for-quantization", 'r', '0', NULL, FP8 },
	{ "moe-router-padding-for-fp8", 'r', '0', NULL, FP8 },
	{ "moe-router-force-load-balancing", 'r', '0', NULL, "forced balanced routing (a benchmarking aid) is not implemented" },
	{ "moe-router-force-biased", 'r', '1', NULL, "forced biased routing (a benchmarking aid) is not implemented" },
	{ "moe-token-dropping", 'r', '0', NULL, "Megatron's moe_token_dropping is not implemented: use --moe-expert-capacity-factor" },
	{ "moe-layer-recompute", 'r', '0', NULL, "recomputing MoE layers is not implemented" },
	{ "moe-apply-probs-on-input", 'r', '0', NULL, "the routing probabilities are applied after the experts' activation only" },
	{ "moe-latent-size", 'r', '1', NULL, "MoE latent projections are not implemented" },
	{ "moe-mlp-glu-interleave-size", 'r', '1', NULL, "interleaved GLU weights are not implemented (fc1 is [gate; up])" },
	{ "moe-shared-expert-glu-interleave-size", 'r', '1', NULL, "interleaved GLU weights are not implemented (fc1 is [gate; up])" },
	{ "moe-pad-experts-for-cuda-graph-inference", 'r', '0', NULL, INFER },
	{ "moe-paged-stash", 'r', '0', NULL, "paged activation stashing is not implemented" },
	{ "moe-paged-stash-", 'r', '1', NULL, "paged activation stashing is not implemented" },
	{ "expert-tensor-parallel-num-weight-shards", 'r', '1', NULL, NOTIMPL },
	/* optimizer */
	{ "optimizer", 'i', '1', "adam", "only Adam (AdamW: decoupled weight decay, Megatron's adam) is implemented" },
	{ "sgd-momentum", 'r', '1', NULL, "only Adam is implemented" },
	{ "muon-", 'r', '1', NULL, "only Adam is implemented" },
	{ "lion-", 'r', '1', NULL, "only Adam is implemented" },
	{ "no-weight-decay-cond-type", 'r', '1', NULL, "weight decay applies to every matrix, never to biases or norms" },
	{ "decoupled-lr", 'r', '1', NULL, "a separate learning rate for the embedding and output layer is not implemented" },
	{ "decoupled-min-lr", 'r', '1', NULL, "a separate learning rate for the embedding and output layer is not implemented" },
	{ "start-weight-decay", 'r', '1', NULL, "weight-decay schedules are not implemented" },
	{ "end-weight-decay", 'r', '1', NULL, "weight-decay schedules are not implemented" },
	{ "weight-decay-incr-style", 'i', '1', "constant", "weight-decay schedules are not implemented" },
	{ "head-lr-mult", 'r', '1', NULL, NOTIMPL },
	{ "freeze-all-layers", 'r', '0', NULL, NOTIMPL },
	{ "optimizer-cpu-offload", 'r', '0', NULL, OFFLOAD },
	{ "optimizer-offload-fraction", 'r', '1', NULL, OFFLOAD },
	{ "use-torch-optimizer-for-cpu-offload", 'r', '0', NULL, OFFLOAD },
	{ "overlap-cpu-optimizer-d2h-h2d", 'r', '0', NULL, OFFLOAD },
	{ "optimizer-cuda-graph", 'i', '0', NULL, "CUDA graphs are not used (same results)" },
	{ "no-pin-cpu-grads", 'i', '0', NULL, NOTUSED },
	{ "no-pin-cpu-params", 'i', '0', NULL, NOTUSED },
	{ "dump-param-to-param-group-map", 'i', '1', NULL, NOTUSED },
	{ "override-opt_param-scheduler", 'i', '0', NULL, "mgt's schedule always follows the flags (and the checkpoint's step count)" },
	{ "override-opt-param-scheduler", 'i', '0', NULL, "mgt's schedule always follows the flags (and the checkpoint's step count)" },
	{ "use-checkpoint-opt_param-scheduler", 'r', '0', NULL, "the schedule follows the flags; give the run's flags again" },
	{ "use-checkpoint-opt-param-scheduler", 'r', '0', NULL, "the schedule follows the flags; give the run's flags again" },
	{ "no-check-for-nan-in-loss-and-grad", 'i', '0', NULL, "an inf/NaN loss or gradient always skips the step and is counted" },
	{ "check-for-large-grads", 'i', '0', NULL, NOTUSED },
	{ "check-for-spiky-loss", 'i', '0', NULL, NOTUSED },
	{ "result-rejected-tracker-filename", 'i', '1', NULL, NOTUSED },
	{ "rerun-mode", 'i', '1', "disabled", "the rerun state machine is not implemented" },
	/* batch */
	{ "batch-size", 'r', '1', NULL, "removed from Megatron-LM: use --micro-batch-size" },
	{ "warmup", 'r', '1', NULL, "removed from Megatron-LM: use --lr-warmup-iters, --lr-warmup-samples or --lr-warmup-fraction" },
	{ "model-parallel-size", 'r', '1', NULL, "removed from Megatron-LM: use --tensor-model-parallel-size" },
	{ "rampup-batch-size", 'i', '+', NULL, "deprecated in Megatron-LM, which accepts it with a warning and no effect" },
	{ "step-batch-size-schedule", 'r', '1', NULL, "batch-size schedules are not implemented yet: give one --global-batch-size" },
	{ "calculate-per-token-loss", 'r', '0', NULL, "the loss is averaged per micro-batch, then over micro-batches (Megatron's default); per-token averaging over the global batch is not implemented yet" },
	{ "phase-transition-iterations", 'r', '1', NULL, NOTIMPL },
	/* recompute */
	{ "checkpoint-activations", 'r', '0', NULL, "no longer valid in Megatron-LM: use --recompute-activations, or, for more control, --recompute-granularity and --recompute-method" },
	{ "recompute-modules", 'i', '+', "core_attn", "selective recomputation recomputes core attention (core_attn, Megatron's default); other modules are not implemented" },
	{ "distribute-saved-activations", 'i', '0', NULL, "the layer inputs kept for recomputation are not split over tensor-parallel ranks (same results, more memory)" },
	/* parallelism and communication */
	{ "distributed-backend", 'i', '1', NULL, "mgt talks MPI on the CPU and NCCL on GPUs, chosen by --device" },
	{ "distributed-timeout-minutes", 'i', '1', NULL, "collectives have no timeout" },
	{ "overlap-param-gather", 'i', '0', NULL, "the distributed optimizer gathers parameters after the step, not overlapped with the next forward (same results)" },
	{ "overlap-param-gather-with-optimizer-step", 'i', '0', NULL, "parameters are gathered after the step (same results)" },
	{ "no-align-param-gather", 'i', '0', NULL, NOTUSED },
	{ "no-overlap-p2p-communication", 'i', '0', NULL, "pipeline sends are not overlapped (same results)" },
	{ "overlap-p2p-communication", 'i', '0', NULL, "pipeline sends are not overlapped (same results)" },
	{ "overlap-p2p-communication-warmup-flush", 'i', '0', NULL, "pipeline sends are not overlapped (same results)" },
	{ "pipeline-model-parallel-layout", 'r', '1', NULL, "use --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers" },
	{ "use-tp-pp-dp-mapping", 'r', '0', NULL, "ranks are laid out in Megatron's default order (tp-cp-ep-dp-pp)" },
	{ "ddp-num-buckets", 'r', '1', NULL, "use --ddp-bucket-size" },
	{ "ddp-pad-buckets-for-high-nccl-busbw", 'i', '0', NULL, NOTUSED },
	{ "ddp-reduce-scatter-with-fp32-accumulation", 'i', '0', NULL, "gradients are always reduced in fp32" },
	{ "ddp-param-name-patterns-for-fp32-local-accumulation", 'i', '+', NULL, "gradients are always accumulated in fp32" },
	{ "ddp-average-in-collective", 'i', '0', NULL, "gradients are scaled by 1/DP before a summing reduction, as Megatron's default" },
	{ "gtp-", 'r', '0', NULL, NOTIMPL },
	{ "use-nccl-ub", 'i', '0', NULL, NOTUSED },
	{ "disable-symmetric-registration", 'i', '0', NULL, NOTUSED },
	{ "num-distributed-optimizer-instances", 'i', '1', "1", "one distributed-optimizer instance only" },
	{ "megatron-fsdp-", 'r', '1', NULL, FSDP }, { "fsdp-", 'r', '0', NULL, FSDP },
	{ "use-torch-fsdp2", 'r', '0', NULL, FSDP }, { "use-megatron-fsdp", 'r', '0', NULL, FSDP },
	{ "use-custom-fsdp", 'r', '0', NULL, FSDP },
	{ "torch-fsdp2-no-reshard-after-forward", 'r', '0', NULL, FSDP },
	{ "no-use-layer-wise-param-layout", 'r', '0', NULL, FSDP },
	{ "data-parallel-sharding-strategy", 'i', '1', "no_shard", FSDP },
	{ "outer-dp-sharding-strategy", 'i', '1', "no_shard", FSDP },
	{ "create-all-gather-group", 'i', '0', NULL, NOTUSED },
	{ "suggested-communication-unit-size", 'i', '1', NULL, NOTUSED },
	{ "enable-full-sharding-in-hsdp", 'r', '0', NULL, FSDP },
	{ "fake-process-group", 'r', '0', NULL, NOTIMPL },
	/* data */
	{ "num-workers", 'i', '1', NULL, "samples are read in the training process from memory-mapped files" },
	{ "no-mmap-bin-files", 'i', '0', NULL, "datasets are always memory-mapped" },
	{ "mmap-bin-files", 'i', '0', NULL, "datasets are always memory-mapped" },
	{ "no-create-attention-mask-in-dataloader", 'i', '0', NULL, "the causal mask is implicit in the attention kernel" },
	{ "create-attention-mask-in-dataloader", 'i', '0', NULL, "the causal mask is implicit in the attention kernel" },
	{ "dataloader-type", 'i', '1', "single", "only Megatron's default sampler (single) is implemented" },
	{ "num-dataset-builder-threads", 'i', '1', NULL, "rank 0 builds the index caches" },
	{ "dataloader-fast-cache-load", 'i', '0', NULL, NOTUSED },
	{ "dataloader-defer-npy-index-mmap", 'i', '0', NULL, NOTUSED },
	{ "object-storage-cache-path", 'r', '1', NULL, "object storage is not supported: give local paths" },
	{ "mid-level-dataset-surplus", 'i', '1', NULL, NOTUSED },
	{ "allow-ambiguous-pad-tokens", 'i', '0', NULL, NOTUSED },
	{ "train-data-path", 'r', '+', NULL, "per-split data paths are not implemented: use --data-path with --split" },
	{ "valid-data-path", 'r', '+', NULL, "per-split data paths are not implemented: use --data-path with --split" },
	{ "test-data-path", 'r', '+', NULL, "per-split data paths are not implemented: use --data-path with --split" },
	{ "data-args-path", 'r', '1', NULL, "give --data-path on the command line" },
	{ "per-split-data-args-path", 'r', '1', NULL, "per-split data paths are not implemented: use --data-path with --split" },
	{ "per-dataset-sequences-path", 'r', '1', NULL, NOTIMPL },
	{ "reset-attention-mask", 'r', '0', NULL, "document-level attention masks are not implemented" },
	{ "dataloader-inter-document-masking", 'r', '0', NULL, "document-level attention masks are not implemented" },
	{ "sample-rate", 'r', '1', NULL, NOTIMPL },
	{ "mask-prob", 'r', '1', NULL, NOTGPT }, { "short-seq-prob", 'r', '1', NULL, NOTGPT },
	{ "fim-", 'r', '1', NULL, "fill-in-the-middle datasets are not implemented" },
	{ "sft", 'r', '0', NULL, "supervised fine-tuning datasets are not implemented" },
	{ "sft-", 'r', '1', NULL, "supervised fine-tuning datasets are not implemented" },
	{ "vocab-extra-ids", 'r', '1', NULL, NOTGPT },
	{ "legacy-tokenizer", 'i', '0', NULL, NOTUSED },
	{ "tokenizer-prompt-format", 'r', '1', NULL, "supervised fine-tuning datasets are not implemented" },
	/* checkpoints */
	{ "use-dist-ckpt", 'r', '0', NULL, DISTCKPT },
	{ "dist-ckpt-format", 'r', '1', NULL, DISTCKPT },
	{ "dist-ckpt-strictness", 'i', '1', NULL, "checkpoints are always checked whole" },
	{ "dist-ckpt-workers", 'i', '1', NULL, "every rank writes its own shards" },
	{ "ckpt-fully-parallel-save", 'i', '0', NULL, "every rank writes its own shards" },
	{ "no-ckpt-fully-parallel-save", 'i', '0', NULL, "every rank writes its own shards" },
	{ "ckpt-fully-parallel-load", 'i', '0', NULL, "every rank reads what it needs" },
	{ "ckpt-assume-constant-structure", 'i', '0', NULL, NOTUSED },
	{ "ckpt-drop-redundant-extra-state", 'i', '0', NULL, NOTUSED },
	{ "dist-ckpt-optim-fully-reshardable", 'i', '0', NULL, "mgt checkpoints always reshard on load" },
	{ "persistent-save-interval", 'a', '1', NULL, "save_interval=" },
	{ "override-ckpt-iteration", 'r', '1', NULL, "use --ckpt-step" },
	{ "save-retain-interval", 'r', '1', NULL, NOTIMPL },
	{ "non-persistent-save-interval", 'r', '1', NULL, NOTIMPL },
	{ "non-persistent-ckpt-type", 'r', '1', NULL, NOTIMPL },
	{ "auto-detect-ckpt-format", 'i', '0', NULL, "mgt reads its own format only" },
	{ "ckpt-convert-", 'r', '1', NULL, DISTCKPT },
	{ "save-tokenizer-assets", 'i', '0', NULL, NOTUSED },
	/* logging */
	{ "log-loss-scale-to-tensorboard", 'a', '0', NULL, "log_loss_scale_to_tensorboard=true" },
	{ "disable-log-loss-scale-to-tensorboard", 'a', '0', NULL, "log_loss_scale_to_tensorboard=false" },
	{ "log-learning-rate-to-tensorboard", 'a', '0', NULL, "log_learning_rate_to_tensorboard=true" },
	{ "no-log-learning-rate-to-tensorboard", 'a', '0', NULL, "log_learning_rate_to_tensorboard=false" },
	{ "log-batch-size-to-tensorboard", 'i', '0', NULL, "the batch size is always written to TensorBoard, as Megatron-LM has done since it removed this flag (2024)" },
	{ "wandb-", 'i', '1', NULL, WANDB },
	{ "profile", 'i', '0', NULL, PROF },
	{ "profile-step-start", 'i', '1', NULL, PROF },
	{ "profile-step-end", 'i', '1', NULL, PROF },
	{ "profile-ranks", 'i', '+', NULL, PROF },
	{ "use-pytorch-profiler", 'i', '0', NULL, PROF },
	{ "record-memory-history", 'i', '0', NULL, PROF },
	{ "timing-log-level", 'i', '1', NULL, "--metrics-file has the forward, backward and optimizer times" },
	{ "timing-log-option", 'i', '1', NULL, "--metrics-file has the forward, backward and optimizer times" },
	{ "log-num-zeros-in-grad", 'i', '0', NULL, "not reported" },
	{ "log-energy", 'i', '0', NULL, "not reported" },
	{ "log-progress", 'i', '0', NULL, "not written: --metrics-file has the progress" },
	{ "log-straggler", 'i', '0', NULL, "not reported" },
	{ "manual-gc", 'i', '0', NULL, "C has no garbage collector" },
	{ "manual-gc-interval", 'i', '1', NULL, "C has no garbage collector" },
	{ "no-manual-gc-eval", 'i', '0', NULL, "C has no garbage collector" },
	{ "empty-unused-memory-level", 'i', '1', NULL, "mgt allocates once before training: nothing to empty" },
	{ "one-logger-", 'i', '1', NULL, TELEMETRY }, { "no-one-logger", 'i', '0', NULL, TELEMETRY },
	{ "one-logger-async", 'i', '0', NULL, TELEMETRY }, { "otel-enabled", 'i', '0', NULL, TELEMETRY },
	{ "app-tag-", 'i', '1', NULL, TELEMETRY }, { "otel-", 'i', '1', NULL, TELEMETRY },
	{ "enable-ft-package", 'i', '0', NULL, TELEMETRY }, { "calc-ft-timeouts", 'i', '0', NULL, TELEMETRY },
	{ "ft-num-warmup-iters", 'i', '1', NULL, TELEMETRY },
	{ "run-workload-inspector-server", 'i', '0', NULL, TELEMETRY },
	{ "adlr-autoresume", 'i', '0', NULL, "mgt-train resumes from --load when restarted" },
	{ "adlr-autoresume-interval", 'i', '1', NULL, "mgt-train resumes from --load when restarted" },
	{ "inprocess-", 'r', '1', NULL, "in-process restart is not implemented: mgt-train resumes from --load when restarted" },
	{ "enable-msc", 'i', '0', NULL, "object storage is not supported" },
	{ "disable-msc", 'i', '0', NULL, "object storage is not supported" },
	{ "no-shared-storage", 'i', '0', NULL, "ranks are expected to share the checkpoint directory" },
	/* other models and workloads */
	{ "inference-", 'r', '1', NULL, INFER }, { "use-legacy-static-engine", 'r', '0', NULL, INFER },
	{ "max-tokens-to-oom", 'r', '1', NULL, INFER }, { "decode-only-cuda-graphs", 'r', '0', NULL, INFER },
	{ "enable-chunked-prefill", 'r', '0', NULL, INFER }, { "num-speculative-tokens", 'r', '1', NULL, INFER },
	{ "use-same-sampling-seed-across-dp-ranks", 'r', '0', NULL, INFER },
	{ "rl-", 'r', '1', NULL, RL }, { "grpo-", 'r', '1', NULL, RL }, { "perform-rl-step", 'r', '0', NULL, RL },
	{ "langrl-env-config", 'r', '1', NULL, RL }, { "refit-method", 'r', '1', NULL, RL },
	{ "logits-", 'r', '1', NULL, "logit distillation is not implemented" },
	{ "output-bert-embeddings", 'r', '0', NULL, NOTGPT }, { "bert-", 'r', '1', NULL, NOTGPT },
	{ "ict-", 'r', '1', NULL, NOTGPT }, { "biencoder-", 'r', '1', NULL, NOTGPT },
	{ "titles-data-path", 'r', '1', NULL, NOTGPT }, { "query-in-block-prob", 'r', '1', NULL, NOTGPT },
	{ "use-one-sent-docs", 'r', '0', NULL, NOTGPT }, { "evidence-data-path", 'r', '1', NULL, NOTGPT },
	{ "retriever-", 'r', '1', NULL, NOTGPT }, { "block-data-path", 'r', '1', NULL, NOTGPT },
	{ "embedding-path", 'r', '1', NULL, NOTGPT }, { "indexer-", 'r', '1', NULL, NOTGPT },
	{ "retro-", 'r', '1', NULL, NOTGPT },
	{ "num-classes", 'r', '1', NULL, NOTGPT }, { "img-", 'r', '1', NULL, NOTGPT },
	{ "num-channels", 'r', '1', NULL, NOTGPT }, { "patch-dim", 'r', '1', NULL, NOTGPT },
	{ "classes-fraction", 'r', '1', NULL, NOTGPT }, { "data-per-class-fraction", 'r', '1', NULL, NOTGPT },
	{ "no-data-sharding", 'r', '0', NULL, NOTGPT }, { "vision-", 'r', '1', NULL, NOTGPT },
	{ "swin-backbone-type", 'r', '1', NULL, NOTGPT }, { "mask-type", 'r', '1', NULL, NOTGPT },
	{ "mask-factor", 'r', '1', NULL, NOTGPT }, { "iter-per-epoch", 'r', '1', NULL, NOTGPT },
	{ "dino-", 'r', '1', NULL, NOTGPT },
};

#define N_ROWS (sizeof rows / sizeof *rows)

static const compat_row *find(const char *flag)
{
	const compat_row *best = NULL;
	size_t best_len = 0;
	for (size_t i = 0; i < N_ROWS; i++) {
		const char *f = rows[i].flag;
		size_t n = strlen(f);
		if (f[n - 1] != '-') {
			if (!strcmp(flag, f)) return &rows[i];
		} else if (!strncmp(flag, f, n) && n > best_len) {
			best = &rows[i];
			best_len = n;
		}
	}
	return best;
}

mgt_status mgt_args_compat(const char *flag, const char *value, mgt_compat *out)
{
	const compat_row *r = find(flag);
	if (!r) return mgt_err(MGT_ERR_USAGE, "unknown flag '--%s'", flag);
	*out = (mgt_compat){ .nargs = r->nargs, .why = r->why, .alias = r->cls == 'a' ? r->why : NULL,
			     .ignored = r->cls == 'i' };
	if (r->cls == 'r') return mgt_err(MGT_ERR_USAGE, "--%s is not supported by mgt-train: %s", flag, r->why);
	if (r->only && value && strcmp(value, r->only))
		return mgt_err(MGT_ERR_USAGE, "--%s %s is not supported by mgt-train (only %s): %s", flag, value, r->only,
			       r->why);
	return MGT_OK;
}
