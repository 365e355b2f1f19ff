/* lib/train: the training loop (schedule, evaluation, logging, checkpoints, signals) over the
 * arguments of lib/args (args/args.h).
 */
#ifndef MGT_TRAIN_H
#define MGT_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "util/util.h"

#include "args/args.h"

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
/* Loading them back: mgt_args_tok_files_use (args/args.h). */

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
