/* lib/args: Megatron's argument table (flags, JSON keys, defaults, help), its parser, the derived
 * values and cross-checks of mgt_args_finalize, and the compatibility classes of Megatron-LM flags
 * mgt does not implement.  Below lib/train, lib/eval, lib/convert and lib/plan: each takes an
 * mgt_args without depending on the training loop.
 *
 * Arguments carry Megatron's names and defaults (megatron/training/arguments.py): the JSON key is
 * the argparse dest (num_layers), the flag its dashed form (--num-layers).  A model preset
 * (share/mgt/models/NAME.json) is a JSON object of such keys; flags override it.
 */
#ifndef MGT_ARGS_H
#define MGT_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "util/util.h"

typedef struct mgt_args {
	mgt_model_config model;
	char *model_name;
	/* tokenizer (same flags as mgt-preprocess) */
	char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model, *tiktoken_pattern;
	int64_t tiktoken_num_special_tokens, vocab_size, null_tokenizer_eod_id;
	/* data */
	char *data_path, *split, *data_cache_path;
	bool mock_data, eod_mask_loss, reset_position_ids, reset_attention_mask, sft;
	char *sft_tokenizer_prompt_format;
	double mask_prob, short_seq_prob;
	int64_t vocab_extra_ids; /* accepted, no effect */
	/* Megatron's encoder flags: num_layers and seq_length when those are not given;
	 * decoder_num_layers accepted and ignored (the decoder is as deep as the encoder) */
	int64_t encoder_num_layers, decoder_num_layers, encoder_seq_length;
	/* hybrid models without --hybrid-layer-pattern: the attention and MLP shares of --num-layers
	 * (Megatron's older allocation; the rest are Mamba layers) */
	double hybrid_attention_ratio, hybrid_mlp_ratio;
	/* batch and run length */
	int64_t micro_batch_size, global_batch_size, train_iters, train_samples, exit_interval;
	/* optimizer and schedule */
	double lr, min_lr, lr_warmup_init, lr_warmup_fraction, weight_decay;
	/* --decoupled-lr, --decoupled-min-lr: the word embedding's and output layer's own peak and
	 * final rates (0: None, the others'); --calculate-per-token-loss: the gradient of the global
	 * batch's token mean (Megatron's num_tokens scaling) instead of the micro-batches' mean */
	double decoupled_lr, decoupled_min_lr;
	bool calculate_per_token_loss;
	double adam_beta1, adam_beta2, adam_eps, clip_grad;
	char *lr_decay_style, *lr_wsd_decay_style;
	int64_t lr_decay_iters, lr_decay_samples, lr_warmup_iters, lr_warmup_samples, lr_wsd_decay_iters;
	/* evaluation and logging */
	int64_t eval_interval, eval_iters, log_interval, seed;
	bool log_throughput, log_params_norm;
	bool moe_per_layer_logging;               /* --moe-per-layer-logging (TensorBoard moe/NAME_layer_L) */
	/* TensorBoard (Megatron's flags; lib/tb) */
	char *tensorboard_dir;
	int64_t tensorboard_log_interval, tensorboard_queue_size;
	bool log_timers_to_tensorboard, log_loss_scale_to_tensorboard, log_learning_rate_to_tensorboard;
	bool log_validation_ppl_to_tensorboard, log_memory_to_tensorboard, log_world_size_to_tensorboard;
	/* checkpoints */
	char *save, *load;
	char *pretrained_checkpoint; /* Megatron's: fine-tune from it (weights only) when --load holds none */
	int64_t save_interval;
	bool no_save_optim, no_load_optim, finetune, no_load_rng, no_save_rng, async_save, use_checkpoint_args;
	bool exit_on_missing_checkpoint, overwrite_save;
	int64_t ckpt_step;
	char *ckpt_format;
	/* stopping */
	bool exit_signal_handler;
	char *exit_signal;
	double exit_duration_in_mins;
	/* parallelism */
	int64_t tensor_model_parallel_size, pipeline_model_parallel_size, context_parallel_size;
	char *cp_comm_type;       /* --cp-comm-type as given (words); cp_comm: derived from it */
	mgt_cp_comm cp_comm;
	int64_t num_layers_per_virtual_pipeline_stage, virtual_pipeline_model_parallel_size;
	int64_t num_virtual_stages_per_pipeline_rank;
	int64_t microbatch_group_size_per_vp_stage, ddp_bucket_size;
	/* --num-distributed-optimizer-instances: the data x context group split into this many
	 * replicas of the distributed optimizer, each sharding over its own ranks (hybrid sharding;
	 * Megatron's num_distributed_optimizer_instances, default 1) */
	int64_t num_distributed_optimizer_instances;
	bool sequence_parallel, use_distributed_optimizer, overlap_grad_reduce;
	/* FSDP (Megatron's flags, megatron/training/arguments.py _add_distributed_args): as given; the
	 * sharding they mean, with --use-distributed-optimizer's, is dp_sharding (derived) */
	bool use_megatron_fsdp, use_torch_fsdp2, torch_fsdp2_no_reshard_after_forward;
	char *data_parallel_sharding_strategy;
	char *megatron_fsdp_grad_comm_dtype; /* auto, fp32, bf16 or fp16: grad_comm_t (derived) */
	/* Mixture of Experts, run level (the model's moe_* fields are in model): expert-parallel
	 * size; expert tensor-parallel size (0: None, which means --tensor-model-parallel-size, the
	 * only value this version accepts); the token dispatcher ("allgather" | "alltoall");
	 * --moe-router-dtype as given (NULL: None; "fp32" | "fp64", which set
	 * model.moe_router_dtype_fp32) */
	int64_t expert_model_parallel_size, expert_tensor_parallel_size;
	char moe_token_dispatcher_type[16];
	char *moe_router_dtype;
	/* activation recomputation (Megatron's flags; recompute_num_layers 0: None) */
	char *recompute_granularity, *recompute_method;
	int64_t recompute_num_layers;
	bool recompute_activations;
	/* mixed precision */
	bool bf16, fp16;
	bool fp32_residual_connection; /* the residual stream in fp32 under bf16/fp16 (Megatron's flag) */
	bool grad_reduce_in_bf16; /* bf16 main_grad: gradients rounded to bf16 and reduced in bf16 (--bf16 only) */
	double loss_scale, initial_loss_scale, min_loss_scale;
	int64_t loss_scale_window, hysteresis;
	/* fp8 (Megatron's flags, megatron/training/arguments.py
	 * _add_transformer_engine_args): --fp8-format as given (NULL: None,
	 * no fp8), --fp8-recipe, --fp8-amax-compute-algo, the other values; fp8 derived from them by
	 * mgt_args_finalize.  fp8_trace: mgt's JSONL log of the delayed-scaling state (NULL: none) */
	char *fp8_format, *fp8_trace;
	char fp8_recipe[16], fp8_amax_compute_algo[16];
	int64_t fp8_margin, fp8_amax_history_len, num_layers_at_start_in_bf16, num_layers_at_end_in_bf16;
	bool fp8_param_gather, first_last_layers_bf16;
	mgt_fp8_recipe fp8;
	/* mgt's own */
	char *device;                        /* "auto", "cpu", "cuda" */
	int64_t threads;
	char *metrics_file, *debug_dump, *comm_log;
	double peak_tflops;
	/* Megatron flags given that have no effect: "--flag: why\n" lines, owned (NULL: none) */
	char *ignored_flags;
	/* set by the caller before mgt_args_finalize: processes in the job (0 means 1) */
	int64_t world_size;
	/* derived by mgt_args_finalize */
	int64_t num_microbatches, data_parallel_size;
	int64_t expert_data_parallel_size; /* world / (ETP x EP x PP): expert gradients' group */
	mgt_recompute recompute;   /* from the recompute flags, checked by Megatron's rules */
	mgt_dp_sharding dp_sharding; /* what data parallelism shards (model.h): optim with
				      * --use-distributed-optimizer, the FSDP strategy with FSDP */
	mgt_elem_type grad_comm_t;   /* the data-parallel gradient reduction's type: MGT_DT_F32, or
				      * with --megatron-fsdp-grad-comm-dtype bf16 / fp16 MGT_DT_BF16 /
				      * MGT_DT_F16 (--grad-reduce-in-bf16: MGT_DT_BF16) */
} mgt_args;

/* The --data-parallel-sharding-strategy word of s ("no_shard", "optim", ...); static. */
const char *mgt_args_sharding_name(mgt_dp_sharding s);

/* Defaults for every argument (Megatron's).  Strings are owned by the struct: mgt_args_free. */
mgt_status mgt_args_init(mgt_args *a);
void mgt_args_free(mgt_args *a);

/* Set one argument by JSON key (num_layers) or flag name without dashes (num-layers).  value is
 * the text form ("true"/"false" for booleans).  Errors: MGT_ERR_USAGE naming the argument. */
mgt_status mgt_args_set(mgt_args *a, const char *key, const char *value);

/* Merge a JSON object of arguments (a model preset or a checkpoint's "args") into *a.  Keys
 * starting with '_' are comments.  Errors: MGT_ERR_IO (file), MGT_ERR_INPUT (file: key: what was
 * expected). */
mgt_status mgt_args_load_json(mgt_args *a, const char *path);
mgt_status mgt_args_merge_json(mgt_args *a, const void *json_object, const char *what);

/* Parse argv[1..argc): --model NAME|FILE first (a preset found under share/mgt/models, next to
 * the executable's ../share/mgt, or a path), then every flag in order.  "--flag=value" and
 * "--flag value" both work; --data-path takes every following word up to the next "--" flag.
 * Errors: MGT_ERR_USAGE (unknown flag, missing or bad value), preset errors as load_json. */
mgt_status mgt_args_parse_argv(mgt_args *a, int argc, char **argv);

/* Derived values and cross-checks: data-parallel size = world_size / (TP x PP x CP), virtual
 * pipeline stages, layers divisible by PP x V, global batch default and divisibility, train
 * iterations from samples, model config (mgt_model_config_finalize for TP, with vocab_size set
 * by the caller first: heads, query groups and ffn divisible by TP), and the activation
 * recomputation (a->recompute) under Megatron's rules: --recompute-activations sets the
 * granularity to selective; full needs --recompute-method and --recompute-num-layers >= 1;
 * selective takes neither; without a granularity the other two are noted in ignored_flags.
 * MoE (after the model's mgt_moe_config_check): the dispatcher allgather or alltoall, expert
 * tensor-parallel size unset or TP, --expert-model-parallel-size only with --num-experts and
 * dividing it, EP x ETP x PP dividing the world (a->expert_data_parallel_size is the quotient),
 * --sequence-parallel with TP > 1.
 * Every rank computes the same answer, so every rank can exit with it.  Errors: MGT_ERR_USAGE
 * naming the flags. */
mgt_status mgt_args_finalize(mgt_args *a);

/* All arguments as a JSON object (jansson json_t *, caller decrefs), Megatron dests as keys. */
void *mgt_args_to_json(const mgt_args *a);

/* A Megatron-LM flag that mgt-train knows but does not implement (lib/args/compat.c).  flag is
 * the name without dashes; value the value given, or NULL (before it is read).  *out gets how
 * many values the flag takes ('0', '1', or '+': every word up to the next --flag), the reason,
 * whether it is accepted without effect, and for an alias the "dest=value" it stands for ("dest=":
 * the value given).
 * Errors: MGT_ERR_USAGE when the flag is refused (the message names it and says why), when it
 * accepts one value only and another is given, or when mgt-train does not know it (*out is then
 * left as it was). */
typedef struct {
	char nargs;
	bool ignored;
	const char *why, *alias;
} mgt_compat;
mgt_status mgt_args_compat(const char *flag, const char *value, mgt_compat *out);

/* How mgt-train treats a Megatron-LM flag (name with or without leading dashes): *cls is
 * "implemented", "ignored" (accepted without effect), "refused" or "unknown"; *why the reason
 * (static; "" for implemented and unknown flags). */
void mgt_args_classify(const char *flag, const char **cls, const char **why);

/* --ddp-bucket-size under --overlap-grad-reduce when not given: max(4e7, 1e6 x dp) elements
 * (resolve_ddp_bucket_size in megatron/training/training.py). */
int64_t mgt_args_ddp_bucket_size(int64_t dp);

/* Help text: every flag with its default, grouped. */
void mgt_args_help(FILE *f);

/* A checkpoint's own tokenizer files (lib/args/tokfiles.c; mgt-ckpt(5) TOKENIZER FILES; written
 * by lib/train's mgt_train_tok_files_save): each of the flags vocab_file, merge_file and
 * tokenizer_model that metadata's (a jansson json_t *) "tokenizer"."files" names, whose copy is
 * under iter_dir (a relative path, no ".."), is set in a to that copy's path; others stay as they
 * are.  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_args_tok_files_use(mgt_args *a, const void *meta, const char *iter_dir);

#endif
