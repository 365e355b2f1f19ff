/* lib/train: the training arguments (one table: flags, JSON keys, defaults, help) and the
 * training loop (schedule, evaluation, logging, checkpoints, signals).
 *
 * Arguments carry Megatron's names and defaults (megatron-reference.md section 5): the JSON key is
 * the argparse dest (num_layers), the flag its dashed form (--num-layers).  A model preset
 * (share/mgt/models/NAME.json) is a JSON object of such keys; flags override it.
 */
#ifndef MGT_TRAIN_H
#define MGT_TRAIN_H

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
	bool mock_data, eod_mask_loss, reset_position_ids;
	double mask_prob, short_seq_prob;
	int64_t vocab_extra_ids; /* accepted, no effect */
	/* Megatron's encoder flags: num_layers and seq_length when those are not given;
	 * decoder_num_layers accepted and ignored (the decoder is as deep as the encoder) */
	int64_t encoder_num_layers, decoder_num_layers, encoder_seq_length;
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
	bool sequence_parallel, use_distributed_optimizer, overlap_grad_reduce;
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
	/* fp8 (Megatron's flags, ../shared/docs/fp8.md section 1): --fp8-format as given (NULL: None,
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
} mgt_args;

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

/* A Megatron-LM flag that mgt-train knows but does not implement (lib/train/compat.c).  flag is
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

/* The "tensors" list of a checkpoint's metadata.json (mgt-ckpt(5)): [{"name", "shape", "dtype"}]
 * of table tt (build it for TP 1 and PP 1: the whole model).  A new jansson json_t *; NULL when out
 * of memory. */
void *mgt_train_tensor_list(const mgt_tensor_table *tt);

/* ---- tokenizer files inside checkpoints (lib/train/tokfiles.c; mgt-ckpt(5) TOKENIZER FILES) ----
 * The files of a's tokenizer that are readable: --vocab-file, --merge-file and
 * --tokenizer-model (a file, or a Hugging Face directory: its tokenizer.json), each with the
 * tokenizer_config.json and special_tokens_map.json found beside a tokenizer model, stored in
 * the iteration directory as tokenizer/NAME (their own names; another file of the same name
 * as tokenizer/ROLE-NAME). */
/* {"vocab_file": "tokenizer/vocab.json", ...}: each flag's copy, relative to the iteration
 * directory, for metadata.json's "tokenizer" object ("files").  A new jansson json_t *; NULL
 * when out of memory. */
void *mgt_train_tok_files_json(const mgt_args *a);
/* Rank 0, between mgt_ckpt_begin and mgt_ckpt_commit: copy the files into the iteration.
 * Errors: mgt_ckpt_add_file's. */
mgt_status mgt_train_tok_files_save(const mgt_args *a, const char *save_dir, int64_t iteration);
/* Loading: each flag that metadata's (a jansson json_t *) "tokenizer"."files" names, whose copy
 * is under iter_dir, is set in a to that copy's path; others stay as they are.
 * Errors: MGT_ERR_NOMEM. */
mgt_status mgt_train_tok_files_use(mgt_args *a, const void *meta, const char *iter_dir);

/* ---- checkpoint I/O of table rows (lib/train/checkpointing.c; mgt-ckpt(5)) ----
 * Row x with prefix ("" for the parameters, "optimizer.state.exp_avg." or
 * "optimizer.state.exp_avg_sq." for Adam's moments) is stored in one dataset: prefix + x->name
 * of x's global shape, or, for an expert row (num_experts > 0), prefix + x->dataset of global
 * shape [num_experts, shape...] holding x at index x->expert of its first dimension (all
 * experts of one tensor in one dataset, so that checkpoints reshard across expert-parallel
 * sizes).  Inside it x's tensor-parallel piece lies as for a dense row (mgt_tensor_boxes). */

/* The dataset of x under prefix into name[n] (truncated to fit) and its global shape into
 * gshape; returns its ndim (x->ndim, plus one for an expert row). */
int mgt_train_ckpt_dataset(const mgt_tensor *x, const char *prefix, char *name, size_t n, int64_t gshape[3]);
/* mgt_tensor_boxes of the local elements [lo, hi) of x in its dataset's index space: for an
 * expert row each box gets the expert index as its first dimension (offset x->expert, size
 * 1).  Returns the number of boxes (at most 6). */
int mgt_train_ckpt_boxes(const mgt_tensor *x, size_t lo, size_t hi, int64_t off[6][3], int64_t shape[6][3],
			 size_t first[6]);
/* Read the local elements [lo, hi) of x under prefix from checkpoint c into dst (element lo at
 * dst[0]), from whatever pieces were saved.  Errors: those of mgt_ckpt_read, naming the
 * dataset (MGT_ERR_FORMAT: missing, or of another global shape, e.g. another number of
 * experts). */
struct mgt_ckpt;
mgt_status mgt_train_ckpt_read(struct mgt_ckpt *c, const char *prefix, const mgt_tensor *x, size_t lo, size_t hi,
			       float *dst);
/* Whether checkpoint dataset name (without an optimizer prefix) holds rows of table tt: a dense
 * row's name or an expert row's dataset. */
bool mgt_train_ckpt_known(const mgt_tensor_table *tt, const char *name);

/* The pieces one rank saves (mgt-ckpt(5) WHO WRITES WHAT).  mgt_train_pieces_add adds the rows
 * of tt (a rank's table; the rows of one layer consecutive, as mgt_tensor_table_build makes
 * them) that overlap the flat-buffer range [lo, hi), whose data lies at data (buffer element lo
 * at data[0]; kept, not copied, except where pieces are merged), under prefix; which:
 * MGT_TRAIN_PIECES_DENSE and/or MGT_TRAIN_PIECES_EXPERT select the rows, and
 * MGT_TRAIN_PIECES_NO_WORD_EMB leaves the word embedding out (a tied copy).  The boxes of the
 * local experts of one dataset that have the same offset and shape (whole local tensors, one
 * tensor-parallel piece) are merged into one piece [k, rows, cols] of consecutive experts.
 * mgt_train_pieces_write writes them as rank (tp, pp, dp): the j-th piece of a dataset goes to
 * file j, model_tpTT_ppPPP_dpDDD.h5 for j = 0, model_tpTT_ppPPP_dpDDD_J.h5 after.
 * Errors: MGT_ERR_NOMEM; write: those of mgt_ckpt_write_shard. */
typedef struct mgt_train_pieces mgt_train_pieces;
enum { MGT_TRAIN_PIECES_DENSE = 1, MGT_TRAIN_PIECES_EXPERT = 2, MGT_TRAIN_PIECES_NO_WORD_EMB = 4 };
mgt_status mgt_train_pieces_new(mgt_train_pieces **out);
mgt_status mgt_train_pieces_add(mgt_train_pieces *pl, const char *prefix, const mgt_tensor_table *tt, size_t lo,
				size_t hi, const float *data, unsigned which);
mgt_status mgt_train_pieces_write(const mgt_train_pieces *pl, const char *save_dir, int64_t iteration, int tp,
				  int pp, int dp);
void mgt_train_pieces_free(mgt_train_pieces *pl);

/* Activation slots of pipeline rank r of P under mgt-train's schedule for M micro-batches, V
 * virtual stages (chunks) per rank, groups of G micro-batches (Megatron's
 * --microbatch-group-size-per-vp-stage; G = P by default): slots[c] (c < V) gets the most
 * micro-batches chunk c holds forwarded and not yet backwarded -- min(P - r, M) under 1F1B
 * (V = 1), Megatron's interleaved warm-up count otherwise (schedules.py
 * forward_backward_pipelining_with_interleaving).  The same schedule and count mgt-train uses
 * (lib/train/sched.c), for planners.  Errors: MGT_ERR_USAGE (the interleaving constraints on
 * P, M, G, naming the flags), MGT_ERR_NOMEM. */
mgt_status mgt_train_sched_slots(int P, int r, int M, int V, int G, int *slots);

/* --ddp-bucket-size under --overlap-grad-reduce when not given: max(4e7, 1e6 x dp) elements
 * (resolve_ddp_bucket_size in megatron/training/training.py). */
int64_t mgt_train_ddp_bucket_size(int64_t dp);

/* Help text: every flag with its default, grouped. */
void mgt_args_help(FILE *f);

/* ---- the training loop ---- */

/* mgt-train --plan FILE[:N]: plan N (its "rank"; 1 when absent) of a file written by mgt-plan
 * (mgt-plan(5)): its mgt-train flags and what it predicts (bytes per GPU or process, with the
 * measured-constant overhead part; seconds per iteration; model TFLOP/s per GPU). */
typedef struct mgt_train_plan {
	char *file;
	int rank, gpus;
	double memory_bytes, overhead_bytes, iteration_s, tflops_per_gpu;
	char **args;            /* [nargs], NULL-terminated */
	int nargs;
} mgt_train_plan;

/* Read plan spec ("FILE" or "FILE:N") into *p (owned; mgt_train_plan_free).  Errors: MGT_ERR_IO
 * (unreadable), MGT_ERR_INPUT (not JSON, not an mgt-plan file, a missing or mistyped field,
 * named with the file), MGT_ERR_USAGE (no plan N), MGT_ERR_NOMEM. */
mgt_status mgt_train_plan_load(mgt_train_plan *p, const char *spec);
/* The argument vector to parse: argv[0], the plan's flags, then argv[1..] without --plan and its
 * value (later flags win, so the command line overrides the plan), in a new array *out_argv
 * [*out_argc + 1] whose strings belong to p and argv (free the array only).  A layout flag
 * (parallel sizes, micro- and global batch, sequence length, recompute) given on the command line
 * with another value than the plan's is MGT_ERR_USAGE; MGT_ERR_NOMEM. */
mgt_status mgt_train_plan_argv(const mgt_train_plan *p, int argc, char **argv, int *out_argc, char ***out_argv);
void mgt_train_plan_free(mgt_train_plan *p);

typedef struct mgt_train_io {
	FILE *log;              /* iteration lines, validation, summary (stderr in mgt-train) */
	const char *prog;       /* program name for messages */
	double start_time;      /* mgt_now() when the program started (--exit-duration-in-mins) */
	/* --plan: checked against the world size at setup; its predictions printed beside the
	 * measured figures after iteration 5 (or the last, when fewer); NULL without */
	const mgt_train_plan *plan;
} mgt_train_io;

/* Run pretraining as the arguments say (data, model, optimizer, checkpoints, evaluation).
 * Bad input is reported before anything is written: MGT_ERR_USAGE (arguments), MGT_ERR_INPUT /
 * MGT_ERR_IO (data), MGT_ERR_VOCAB (tokenizer), MGT_ERR_FORMAT (checkpoint that does not match).
 * MGT_ERR_INTR when stopped by SIGINT/SIGTERM (after saving a checkpoint when --save is set). */
mgt_status mgt_train_run(mgt_args *a, const mgt_train_io *io);

/* Megatron's evaluate_and_print_results block: head (" validation loss at iteration N | ",
 * ending in "| ") then "lm loss value: X | lm loss PPL: exp(X) | ", between two lines of dashes
 * as long as it; flushed. */
void mgt_train_print_loss(FILE *f, const char *head, double loss);
/* The same with BERT's "sop loss value: S | sop loss PPL: exp(S) | " after it (sop NaN: none). */
void mgt_train_print_losses(FILE *f, const char *head, double loss, double sop);

/* What mgt_train_evaluate evaluates: the test split instead of the validation split, and the
 * first sample (-1: for validation the samples of the last validation before the checkpoint
 * was saved, i.e. its consumed validation samples less one evaluation of --eval-iters x
 * --global-batch-size (the first ones when it had none); for test the first ones, as
 * mgt-train's evaluation on the test set at the end). */
typedef struct mgt_train_eval_opts {
	bool test;
	int64_t from_sample;
} mgt_train_eval_opts;

/* The result: the checkpoint's iteration, the samples evaluated ([first_sample, first_sample +
 * samples) of the split, cycling through it), the loss-mask tokens and the token-weighted mean
 * lm loss (nats per token; PPL = exp(loss)), the same on every rank. */
typedef struct mgt_train_eval_result {
	int64_t iteration, first_sample, samples, tokens;
	double loss;
	/* BERT: sop_loss (with binary_head), the masked tokens evaluated and those whose label has
	 * the largest logit (mgt_model_bert_accuracy); tokens counts micro-batches there */
	bool bert, binary_head;
	double sop_loss;
	int64_t masked, correct;
} mgt_train_eval_result;

/* Megatron's evaluate on the checkpoint a->load (a->ckpt_step, else the tracker's) with the
 * arguments in *a (normally the checkpoint's own, mgt-eval(1) loss): the same model, layout
 * code, data order, micro-batches and forward-only pipeline schedule as mgt-train's validation,
 * so the same flags give the same loss bit for bit.  No optimizer state is allocated or read;
 * nothing is saved (a->save is cleared, a->no_load_optim set).  Every rank of the job calls it.
 * Errors: those of mgt_train_run's setup; MGT_ERR_FORMAT (no checkpoint at a->load, or one that
 * does not match the arguments), MGT_ERR_INPUT (the split is empty), MGT_ERR_USAGE (no --load,
 * --eval-iters 0). */
mgt_status mgt_train_evaluate(mgt_args *a, const mgt_train_io *io, const mgt_train_eval_opts *o,
			      mgt_train_eval_result *r);

#endif
