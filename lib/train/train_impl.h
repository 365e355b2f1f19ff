/* lib/train internal: the trainer state and the functions its files share (setup.c, batch.c,
 * preflight.c, pipeline.c, grads.c, moe.c, evaluate.c, train.c, checkpointing.c, ckpt_load.c,
 * log.c, masked.c, plan_apply.c). */
#ifndef MGT_TRAIN_IMPL_H
#define MGT_TRAIN_IMPL_H

#include "backend/backend.h"
#include "data/data.h"
#include "parallel/parallel.h"
#include "model/model.h"
#include "optim/optim.h"
#include "tok/tok.h"
#include "train.h"

typedef struct dump_state {
	float *params, *grads, *logits, *loss;       /* host copies for --debug-dump */
	int32_t *tokens, *labels, *pos;              /* [iters, gbs, s] */
	float *mask;
	double *lm_loss, *lr, *grad_norm;            /* [iters] */
	double *moe_lb, *moe_zl;                     /* [iters] (MoE) */
	int32_t *types, *pad, *isr;                  /* BERT: [iters, gbs, s] token types, padding mask; [iters, gbs] is_random */
	double *sop_loss;                            /* BERT: [iters] */
	int32_t *moe_exp;                            /* [n_moe, T, k] iteration 1, micro-batch 0 (MoE) */
	float *moe_prob;
	int64_t iters, cap;
	bool on;                                     /* --debug-dump: dumping during this run */
} dump_state;

/* Optimizer state for the flat-buffer range [lo, hi) of one chunk: the whole buffer, or with the
 * distributed optimizer this data-parallel rank's shard of one bucket. */
typedef struct opt_shard {
	int chunk;
	size_t lo, hi;
	mgt_adamw opt;
} opt_shard;

struct async_save;

typedef struct trainer {
	mgt_args *a;
	const mgt_train_io *io;
	bool eval_only;                              /* mgt_train_evaluate: no optimizer, no banner */
	mgt_backend *be;
	mgt_parallel ps;
	mgt_tok *tok;
	mgt_gpt_data *data;
	mgt_model *model;                            /* chunk[0] */
	mgt_model **chunk;                           /* virtual pipeline chunks of this rank [V] */
	int V, *slots;
	opt_shard *shard;
	int nshard;
	mgt_parallel_sched_action *acts, *eval_acts;                /* this rank's actions for one global batch */
	int n_acts, n_eval_acts;
	float *mb_scale;                             /* [num_microbatches] loss scale per micro-batch */
	/* the data-parallel gradient buckets (grads.c; megatron/core/distributed/) */
	struct {
		/* --overlap-grad-reduce: per chunk, the index in acts of its last backward, the buckets
		 * reduced so far this iteration and, per bucket, the layer from which it is complete */
		int *last_bwd, *buckets_done, **bucket_ready;
		/* --grad-reduce-in-bf16: per chunk, the bf16 copy of its gradient buffer (Megatron's bf16
		 * main_grad; backend memory, buf_numel elements) that rounds it and that the
		 * data-parallel reduction moves; with --megatron-fsdp-grad-comm-dtype bf16 or fp16 the
		 * copy (of that type, a->grad_comm_t) the reduction moves, rounding nothing else */
		void **g16;
	} ddp;
	/* FSDP (fsdp.c): per chunk, its backwards so far this iteration and, with
	 * optim_grads_params, per bucket whether its parameters are gathered now */
	struct {
		int *nbwd, *pending;   /* pending: buckets [pending, buckets_done) reduced, not given back */
		char **gathered;
		/* a 16-bit --megatron-fsdp-grad-comm-dtype from optim_grads on: per chunk, the owned
		 * shards' sum of the earlier micro-batches (fp32, buf_numel reserved, the shards
		 * written), set aside while the next one is reduced */
		float **side;
	} fsdp;
	mgt_lr_sched sched;
	mgt_loss_scaler scaler;                      /* scale 1 and static unless --fp16 */
	int32_t eod;
	/* progress (saved in checkpoints) */
	int64_t iteration, consumed_train, consumed_valid, skipped_iters, nan_iters;
	double flops_so_far;
	uint64_t dropout_seed;                       /* --seed, or the loaded checkpoint's (trainer_load) */
	void *hf_meta;                               /* the loaded checkpoint's "hf" record (json_t), kept in saves */
	/* one micro-batch, sequence-first host arrays [s * mbs], and one sample [s] */
	int32_t *mb_tokens, *mb_labels, *mb_pos, *s_tokens, *s_labels, *s_pos;
	float *mb_mask, *s_mask;
	int32_t *mb_seg, *s_seg; /* --reset-attention-mask: document starts (mgt_gpt_doc_starts); else NULL */
	int32_t *mb_rpos;        /* --reset-position-ids: RoPE's positions, the row's (mgt_microbatch); else NULL */
	int32_t *mb_cprows;      /* --sft under context parallelism: every context rank's rows of the
				  * micro-batch [cp][seq_length/cp * mbs] (mgt_microbatch.cp_rows); else NULL */
	double mb_tokens_full; /* loss-mask sum of the whole micro-batch (all context-parallel ranks) */
	/* BERT (--model-family bert; masked.c): the masked dataset and the vocabulary it draws from
	 * (its is_subword array owned here), the micro-batch's token types, padding mask [s * mbs]
	 * and sentence-order labels [mbs], one sample's int64 arrays (5 x s), and the pass's
	 * sentence-order loss sum */
	struct mgt_masked_data *mdata;
	struct trainer_sft *sft; /* --sft: the SFT dataset and its splits (sft.c); NULL otherwise */
	mgt_masked_vocab mvocab;
	uint8_t *mv_sub;
	int32_t *mb_types, *mb_isr;
	int32_t *mb_dtok, *mb_dpos; /* T5: the decoder's tokens and positions [decoder_seq_length * mbs] */
	int64_t *mb_pad, *s_i64;
	/* log interval accumulators: loss sum, start time, BERT's sentence-order loss sum, iterations,
	 * skipped and NaN iterations */
	struct {
		double loss, t0, sop;
		int64_t iters, skipped, nan;
	} interval;
	double sop_loss;                             /* BERT: the last iteration's sentence-order loss */
	double eval_masked, eval_correct;            /* BERT: the last evaluation's masked tokens, top-1 correct */
	double t_fwd, t_bwd, t_opt;                  /* last iteration, seconds */
	/* MoE (moe.c, trainer_moe_step): the model's MoE layers (global count), this iteration's
	 * per-layer unscaled aux and z losses ([n], averaged over micro-batches and data-parallel
	 * ranks) and tokens per expert ([n * E], the global batch's), their layer averages, and the
	 * log interval's sums of those */
	struct {
		int n, *first;                       /* first [V]: each chunk's first MoE layer's ordinal */
		double *aux, *z, *tok, lb, zl, int_lb, int_zl; /* aux, z, tok: one buffer, in this order */
		double disp[3];                      /* --comm-log: dispatch counts at the last line */
	} moe;
	double params_norm;                          /* --log-params-norm: after the last step */
	bool out_of_time;                            /* --exit-duration-in-mins passed (on every rank) */
	struct async_save *async;                    /* --async-save: the save being written, or NULL */
	bool async_all_done;                         /* every rank has written its shards */
	struct {
		FILE *metrics, *comm_log, *fp8_trace;  /* --metrics-file, --comm-log, --fp8-trace; or NULL */
	} out;
	struct {
		struct mgt_tb *w;                     /* --tensorboard-dir (the last rank), or NULL */
		bool args_written, warned;            /* the arguments' texts; a write error reported */
	} tb;
	dump_state dump;
	size_t rss_baseline;                         /* peak RSS before the model allocates */
	size_t dev_free0;                            /* device backends: cudaMemGetInfo's free bytes then */
	double plan_t1;                              /* --plan: mgt_now() after iteration 1 */
} trainer;

/* ---- the files of the training loop (pure C over the trainer; see each definition's comment) ---- */

/* The host communicator of a group (the device one wraps it after mgt_parallel_to_device). */
static inline mgt_comm *trainer_host_comm(mgt_comm *c, mgt_comm *host) { return host ? host : c; }
/* The group a bucket is sharded and reduced over: the data x context group, the expert-data one
 * for expert rows; with distributed-optimizer instances (--num-distributed-optimizer-instances)
 * their part in this rank's instance (lib/parallel/parallel.h idp_comm, iedp_comm), the same
 * pointers with one instance. */
static inline mgt_comm *trainer_bucket_comm(const trainer *t, const mgt_bucket *b)
{
	return b->expert ? t->ps.iedp_comm : t->ps.idp_comm;
}
/* The index of chunk m among this rank's chunks (t->chunk). */
static inline int trainer_chunk_of(const trainer *t, const mgt_model *m)
{
	int c = 0;
	while (t->chunk[c] != m) c++;
	return c;
}
/* The size of the group dense gradients are reduced over: data x context parallel. */
static inline int trainer_dpcp(const trainer *t) { return t->ps.dpcp_comm->size; }

/* setup.c: trainer_setup builds everything mgt_train_run and mgt_train_evaluate need (tokenizer,
 * backend, chunks and schedules, optimizer, parameters loaded or initialized, data, output files);
 * trainer_teardown frees it all (also after a failed setup).  trainer_chunk_layout: chunk c's
 * mgt_model_layout. */
mgt_status trainer_setup(trainer *t);
void trainer_teardown(trainer *t);
mgt_model_layout trainer_chunk_layout(const trainer *t, int c);

/* batch.c: trainer_open_data opens --data-path's datasets (rank 0 first: it builds the index
 * caches); trainer_data_len: the samples of split sp; trainer_alloc_batch / trainer_free_batch:
 * the micro-batch arrays; trainer_load_microbatch fills micro-batch k of the global batch from
 * sample base of split sp (sequence-first, this rank's context-parallel rows first);
 * trainer_mask_sum: the loss-mask sum of this rank's rows of it. */
mgt_status trainer_open_data(trainer *t);
int64_t trainer_data_len(const trainer *t, mgt_split sp);
mgt_status trainer_alloc_batch(trainer *t);
void trainer_free_batch(trainer *t);
mgt_status trainer_load_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k);
double trainer_mask_sum(const trainer *t);
/* Context parallelism: this rank's rows of the micro-batch's tokens, labels, loss mask and
 * positions (and RoPE positions) moved to the front of those arrays, in place.  rows [S/CP * mbs]:
 * the global row of each local row (--sft's per-document split, mgt_sft_cp_indices); NULL: the
 * fixed zigzag, chunks cp_rank and 2CP-1-cp_rank (Megatron-Core's get_batch_on_this_cp_rank).
 * Either way a rank's i-th row is global row i or later, so a row never moves down.  The
 * document starts (mb_seg) stay whole.  Nothing without context parallelism. */
void trainer_cp_slice(trainer *t, const int32_t *rows);

/* preflight.c: trainer_check_memory (MGT_ERR_NOMEM with the breakdown when the chunks and the
 * Adam moments do not fit), trainer_default_split (--data-path without --split), trainer_preflight
 * (rank 0: --save and the output directories), trainer_log_recompute (the recomputation line). */
mgt_status trainer_check_memory(trainer *t);
mgt_status trainer_default_split(trainer *t);
mgt_status trainer_preflight(const mgt_args *a);
mgt_status trainer_log_recompute(trainer *t);

/* pipeline.c: one pass of a schedule over a global batch (training or evaluation): its split
 * and first sample, and what the last stage sums. */
typedef struct {
	mgt_split split;
	int64_t base;       /* first sample of the global batch */
	bool train;
	double num, den;    /* loss sum and tokens on the last stage (BERT: lm loss sum and micro-batches) */
	double sop;         /* BERT: the sentence-order loss sum */
	double masked, correct; /* BERT evaluation: masked tokens, top-1 correct */
	double mbm, nmb;    /* --sft: the sum of the micro-batches' mean losses, and their count */
} trainer_pass;
/* Run the n actions acts, then sum the losses and the stop flags over the job (every rank sees
 * the same); interrupted may be NULL.  Errors: the model's, communication. */
mgt_status trainer_run_pass(trainer *t, const mgt_parallel_sched_action *acts, int n, trainer_pass *ps,
			    bool *interrupted);

/* grads.c: --grad-reduce-in-bf16's rounding of chunk c's gradients; the mgt_grad_hook of
 * --overlap-grad-reduce (ctx: the trainer) and its plan; the bf16 gradient copies; the
 * reduction of every bucket (finalize_model_grads), the wait for it, the fp16 unscaling, the
 * global norm of gradients (params false) or parameters; the AdamW step of every shard (false:
 * a non-finite gradient, step skipped); the parameter all-gather after it (init: fp8's first
 * cast only).  Errors: communication, backend, NOMEM. */
void trainer_round_grads(trainer *t, int c);
mgt_status trainer_grad_ready(void *ctx, mgt_model *m, int done_from_layer);
mgt_status trainer_plan_overlap(trainer *t);
mgt_status trainer_alloc_grad16(trainer *t);
mgt_status trainer_reduce_grads(trainer *t);
mgt_status trainer_wait_dp(trainer *t);
void trainer_unscale_grads(trainer *t, double tokens);
mgt_status trainer_global_norm(trainer *t, bool params, double *norm);
bool trainer_optimizer_step(trainer *t, double lr, double gnorm);
mgt_status trainer_gather_params(trainer *t, mgt_model *m, bool init);

/* evaluate.c: --eval-iters global batches of split sp from sample *consumed on (advanced): the
 * token-weighted mean loss (tokens may be NULL); trainer_validate: the same, logged (what NULL
 * during training, else "on validation set" / "on test set"). */
mgt_status trainer_evaluate(trainer *t, mgt_split sp, int64_t *consumed, double *loss, double *tokens);
mgt_status trainer_validate(trainer *t, mgt_split sp, const char *what);

/* masked.c (BERT): trainer_bert: the family is bert.  trainer_masked_open: the vocabulary from the
 * tokenizer and the sentence-level dataset of --data-path (one prefix) with Megatron's
 * BERTMaskedWordPieceDataset for the splits' sample counts n.  trainer_masked_alloc: the
 * micro-batch arrays.  trainer_masked_microbatch: micro-batch k of the global batch from sample
 * base of split sp into the trainer's arrays (tokens, labels (-1 where not masked), loss mask,
 * positions, types, padding mask, is_random), as load_microbatch does for GPT.
 * trainer_masked_free.  Errors: the dataset's, USAGE (a tokenizer without WordPiece specials,
 * mock data, a blend), NOMEM. */
bool trainer_bert(const trainer *t);
/* trainer_t5: the family is t5 (T5MaskedWordPieceDataset through the same masked.c);
 * trainer_masked: bert or t5. */
bool trainer_t5(const trainer *t);
bool trainer_masked(const trainer *t);
mgt_status trainer_masked_open(trainer *t, const uint64_t n[3]);
mgt_status trainer_masked_alloc(trainer *t);
mgt_status trainer_masked_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k);
int64_t trainer_masked_len(const trainer *t, mgt_split sp);
void trainer_masked_free(trainer *t);

/* sft.c (--sft): trainer_sft_open: the JSONL --data-path as Megatron's SFTDataset with the
 * tokenizer and --sft-tokenizer-prompt-format, the --split ranges of its lines;
 * trainer_sft_microbatch: micro-batch k of the global batch from sample base of split sp into
 * the trainer's arrays (mb_seg the conversations' starts); trainer_sft_len: the split's lines;
 * trainer_sft_free.  Errors: the dataset's, USAGE, NOMEM. */
typedef struct trainer_sft trainer_sft_data;
bool trainer_sft(const trainer *t);
mgt_status trainer_sft_open(trainer *t);
mgt_status trainer_sft_microbatch(trainer *t, mgt_split sp, int64_t base, int64_t k);
int64_t trainer_sft_len(const trainer *t, mgt_split sp);
void trainer_sft_free(trainer *t);

/* checkpointing.c: the whole model's table (all layers, TP 1; names and global shapes for the
 * metadata and checks); the name prefixes of Adam's two moments; the fp8 state datasets and the
 * box of chunk state v in dataset k (its global shape gs, offset and shape; *data the host
 * buffer it comes from; returns the number of dims). */
mgt_status trainer_ckpt_full_table(trainer *t, mgt_tensor_table *full);
extern const char *const trainer_moment_prefix[2];
extern const char *const trainer_fp8_names[4];
int trainer_fp8_box(const trainer *t, const mgt_model_fp8_state *v, int k, int64_t gs[2], int64_t off[2],
		    int64_t shape[2], float **data);

/* ckpt_load.c (trainer_save and the --async-save functions below: checkpointing.c) */
mgt_status trainer_load(trainer *t, bool *loaded);
/* Before anything is computed (rank 0): --save must not hold iterations or a tracker of another
 * run, one this run does not resume (--load naming the same directory), unless
 * --overwrite-save.  Errors: MGT_ERR_USAGE saying what to pass. */
mgt_status trainer_save_guard(const mgt_args *a);
/* Rank 0, before training, with --save: the file system holding it has room for one
 * checkpoint of params parameters (fp32 weights, and Adam's two fp32 moments unless
 * --no-save-optim: HDF5's own overhead aside); logs both figures.  Errors: MGT_ERR_IO saying
 * how much is free and needed. */
mgt_status trainer_save_room(trainer *t, double params);
/* --use-checkpoint-args (Megatron's load_args_from_checkpoint): the model-shape arguments (the
 * checkpoint shape keys, norm_epsilon, group_query_attention, make_vocab_size_divisible_by), the
 * sequence length when not given, and the tokenizer when --tokenizer-type is not given (files
 * recorded relative to the save directory found there), from the --load checkpoint's
 * metadata.json.  No checkpoint to load: nothing changes.  Errors: MGT_ERR_FORMAT (unreadable
 * metadata), MGT_ERR_USAGE (without --load). */
mgt_status trainer_checkpoint_args(mgt_args *a);
mgt_status trainer_save(trainer *t);
/* --async-save: whether this rank's writer thread is still running; trainer_save_wait (every
 * rank together) waits for the writes and commits, trainer_save_abandon (on an error path) waits
 * and drops the save, leaving its temporary directory for the next save to remove. */
bool trainer_async_running(const trainer *t);
mgt_status trainer_save_wait(trainer *t);
void trainer_save_abandon(trainer *t);

/* moe.c: after an iteration's backwards, the MoE statistics of every chunk gathered over
 * pipeline and data-parallel ranks into t->moe, and the expert biases updated (once per
 * global batch).  Errors: IO (communicators, backend). */
mgt_status trainer_moe_step(trainer *t);
/* log.c: --debug-dump's copy of iteration 1's first micro-batch's routing (every MoE layer of
 * the single chunk, slot slot).  Errors: NOMEM, USAGE. */
mgt_status trainer_dump_moe(trainer *t, int slot);

/* log.c */
/* lr: the rate the step used (metrics "lr"); the log line prints the rate after the scheduler
 * step, as Megatron's training_log does. */
void trainer_log_iteration(trainer *t, double loss, double lr, double gnorm, bool skipped,
			   double iter_s);
/* Whether this iteration prints the log line (every --log-interval, and the first). */
bool trainer_log_due(const trainer *t);
/* what: NULL during training ("validation loss at iteration N"), else "on validation set" or
 * "on test set" after it; test: the metrics key is test_loss instead of valid_loss. */
void trainer_log_validation(trainer *t, const char *what, bool test, double loss);
void trainer_log_memory(trainer *t, const char *when);
/* Bytes the trainer computed for this rank: the chunks' (mgt_model_memory) and the optimizer
 * state's, as trainer_log_memory prints them. */
double trainer_computed_memory(const trainer *t);
/* Host scratch of the MPI collectives on the CPU backend, part of the computed memory: the
 * data-parallel group's reduce-scatter pack (mgt_comm_mpi_pack_bytes of the largest bucket)
 * and context parallelism's; 0 on a device. */
size_t trainer_comm_memory(const trainer *t);
/* Device backends: the driver's free bytes (cudaMemGetInfo) before the model allocated less
 * those now, what[n] naming the source; -1 when unknown. */
double trainer_device_in_use(const trainer *t, char *what, size_t n);

/* plan_apply.c (--plan): MGT_ERR_USAGE when the plan is for another number of processes; after
 * each iteration (step_s: its seconds), the report once iteration 5 (or the last) is done (every
 * rank takes part). */
mgt_status trainer_plan_check(const trainer *t);
void trainer_plan_iteration(trainer *t, double step_s);
/* Close the TensorBoard file (--tensorboard-dir), writing what is queued; safe to call twice.
 * Errors: MGT_ERR_IO naming the file (this or an earlier write failed). */
mgt_status trainer_log_end(trainer *t);
/* --tensorboard-dir: open the writer on the last rank (trainer_log_start calls it).  Errors: those
 * of mgt_tb_open, naming the flag. */
mgt_status trainer_log_tb_open(trainer *t);
/* At the start: the arguments as Megatron's _print_args, a warning for each Megatron flag given
 * that has no effect, the parameter count of every (TP, PP) position (a collective: every rank
 * calls it), then on the last rank the TensorBoard file of --tensorboard-dir opened.  Errors:
 * communication, NOMEM, MGT_ERR_IO (the TensorBoard directory or file, named). */
mgt_status trainer_log_start(trainer *t);
mgt_status trainer_dump_batch(trainer *t, int64_t k);
/* --fp8-trace (world rank 0, which opened t->out.fp8_trace): one JSON line with chunk c's
 * delayed-scaling state after the update that followed the forward (backward true: backward) of
 * micro-batch mb: iteration, micro-batch, chunk, pass, first_layer, linears, the reduced amax row
 * the update used ("amax"), the scales and the history rows (row 0 first).  Errors: IO. */
mgt_status trainer_fp8_trace(trainer *t, int c, int mb, bool backward);
mgt_status trainer_dump_write(trainer *t);
void trainer_dump_free(trainer *t);
/* Peak resident set size of this process in bytes (VmHWM), 0 if unknown. */
size_t trainer_peak_rss(void);


/* fsdp.c: fully sharded data parallelism (--use-megatron-fsdp; see the file's comment).
 * trainer_fsdp_grads / _params: whether this run shards gradients / parameters (a strategy from
 * optim_grads / optim_grads_params on, over a data x context group of more than one rank).
 * setup: the per-chunk state and the parameter hooks (after the chunks and trainer_plan_overlap);
 * zero_grads: every chunk's gradients zeroed at an iteration's start (the sharded buffers given
 * back); before_backward: the owned shards scaled before a chunk's later backwards; grad_ready:
 * the gradient hook of every backward; after_finish: after mgt_model_finish_grads;
 * param_hook: the models' parameter hook; init_params: this rank's parameters initialized;
 * shard_params: after a load; upload_params: a loaded host copy of the whole buffer [buf_numel]
 * to this rank's ranges of it (the device's, under optim_grads_params; errors of upload and
 * commit); gathers_after_step: whether bucket b is all-gathered after the
 * step (not a layer unit under optim_grads_params); last_backward: whether chunk c's backward
 * now running is its last of the iteration (always true without sharded gradients), when
 * hybrid sharding all-reduces the shards across the instances (grads.c). */
bool trainer_fsdp_grads(const trainer *t);
bool trainer_fsdp_last_backward(const trainer *t, int c);
bool trainer_fsdp_params(const trainer *t);
mgt_status trainer_fsdp_setup(trainer *t);
void trainer_fsdp_free(trainer *t);
void trainer_fsdp_zero_grads(trainer *t);
void trainer_fsdp_before_backward(trainer *t, int c);
mgt_status trainer_fsdp_grad_ready(void *ctx, mgt_model *m, int done_from_layer);
void trainer_fsdp_after_finish(trainer *t);
mgt_status trainer_fsdp_param_hook(void *ctx, mgt_model *m, int li, mgt_param_use use);
mgt_status trainer_fsdp_init_params(trainer *t, mgt_model *m, uint64_t seed);
void trainer_fsdp_shard_params(trainer *t);
mgt_status trainer_fsdp_upload_params(trainer *t, mgt_model *m, const float *host);
bool trainer_fsdp_gathers_after_step(const trainer *t, const mgt_model *m, int b);

#endif
