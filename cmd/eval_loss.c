/* cmd/eval_loss.c: mgt-eval loss: Megatron's validation (lm loss and PPL) of a checkpoint on a
 * split of its dataset, with mgt-train's own evaluation code (mgt_train_evaluate), in one
 * process or under mpirun with any tensor/pipeline layout.  See mgt-eval(1). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_job.h"
#include "parallel/parallel.h"
#include "eval_cmd.h"
#include "train/train.h"

#define PROG EVAL_PROG

static void usage(void)
{
	printf("Usage: mgt-eval loss (--load DIR | --hf DIR) [OPTION]... [MGT-TRAIN FLAG]...\n"
	       "Megatron's validation of a checkpoint: the token-weighted lm loss and its PPL on --eval-iters\n"
	       "global batches of the validation (or test) split, computed by mgt-train's own evaluation:\n"
	       "the same samples, micro-batches, layout and precision give the same loss bit for bit.\n"
	       "Runs in one process or under mpirun (tensor and pipeline parallel: the checkpoint's layout\n"
	       "unless --tensor-model-parallel-size / --pipeline-model-parallel-size say otherwise).\n\n"
	       "  --load DIR             checkpoint directory (the iteration its tracker names)\n"
	       "  --ckpt-step N          load iteration N instead\n"
	       "  --hf DIR               a Hugging Face directory, read in place (no temporary checkpoint)\n"
	       "                         (give --data-path or --mock-data and the batch flags)\n"
	       "  --eval-split S         valid or test [valid]\n"
	       "  --eval-from-sample N   first sample of the split to evaluate [valid: the samples of the\n"
	       "                         checkpoint's last validation; test: 0]\n"
	       "  --output FILE.json     also write the result as JSON (written under a temporary name)\n"
	       "  --help\n\n"
	       "Every other flag is mgt-train's (mgt-train(1)) and replaces the value the checkpoint saved,\n"
	       "e.g. --data-path, --split, --eval-iters, --micro-batch-size, --global-batch-size,\n"
	       "--tensor-model-parallel-size, --pipeline-model-parallel-size, --device, --threads, --bf16.\n\n"
	       "Output (stdout, one rank): Megatron's block, \" validation loss at iteration N on validation\n"
	       "set | lm loss value: X | lm loss PPL: Y | \" (test set with --eval-split test); a BERT's\n"
	       "also \"sop loss value: S | sop loss PPL: exp(S) | \" and a line \"masked-token accuracy: A (C of\n"
	       "N masked tokens)\" (the masked tokens whose label has the largest logit).\n\n%s"
	       "See mgt-eval(1), mgt-train(1).\n", eval_exit_help);
}

typedef struct {
	const char *load, *hf, *output;
	long long step, from;
	bool test;
	int argc;             /* the flags left for mgt-train's parser, argv[0] the command */
	char **argv;
} lopts;

/* The value of --name or --name=value at argv[*i] (advancing *i), or NULL when argv[*i] is not it. */
static const char *flag_value(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);
	if (strncmp(argv[*i], name, n)) return NULL;
	if (argv[*i][n] == '=') return argv[*i] + n + 1;
	if (argv[*i][n]) return NULL;
	if (*i + 1 >= argc) mgt_cli_usage_error(PROG, "%s needs a value", name);
	return argv[++*i];
}

/* Take mgt-eval's own flags out of argv; the rest go to mgt-train's parser. */
static void parse(int argc, char **argv, lopts *o)
{
	o->from = -1;
	o->argv = mgt_malloc((size_t)(argc + 1) * sizeof *o->argv);
	if (!o->argv) mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	o->argv[o->argc++] = argv[0];
	for (int i = 1; i < argc; i++) {
		const char *v;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage();
			exit(0);
		}
		if ((v = flag_value(argc, argv, &i, "--load"))) o->load = v;
		else if ((v = flag_value(argc, argv, &i, "--hf"))) o->hf = v;
		else if ((v = flag_value(argc, argv, &i, "--ckpt-step"))) o->step = mgt_cli_int(PROG, "--ckpt-step", v);
		else if ((v = flag_value(argc, argv, &i, "--eval-from-sample"))) o->from = mgt_cli_int(PROG, "--eval-from-sample", v);
		else if ((v = flag_value(argc, argv, &i, "--output"))) o->output = v;
		else if ((v = flag_value(argc, argv, &i, "--eval-split"))) {
			if (strcmp(v, "valid") && strcmp(v, "test"))
				mgt_cli_usage_error(PROG, "--eval-split: expected valid or test, got '%s'", v);
			o->test = !strcmp(v, "test");
		} else o->argv[o->argc++] = argv[i];
	}
	o->argv[o->argc] = NULL;
	if (!o->load == !o->hf) mgt_cli_usage_error(PROG, "give one of --load DIR and --hf DIR");
}

/* Arguments of the run that saved the checkpoint that describe that run, not its evaluation:
 * back to their defaults. */
static mgt_status reset_run_keys(mgt_args *a)
{
	static const char *const keys[] = {"save", "load", "ckpt_step", "metrics_file", "debug_dump", "comm_log",
		"exit_interval", "exit_duration_in_mins", "exit_signal_handler", "use_checkpoint_args", "finetune",
		"async_save", "tensorboard_dir", "no_load_rng", NULL};
	mgt_args def;
	mgt_status st = mgt_args_init(&def);
	bool def_ok = !st;
	json_t *d = st ? NULL : mgt_args_to_json(&def), *o = json_object();
	for (const char *const *k = keys; d && o && *k; k++) {
		json_t *v = json_object_get(d, *k);
		if (v) json_object_set(o, *k, v);
	}
	if (!st && (!d || !o)) st = MGT_ERR_NOMEM;
	if (!st) st = mgt_args_merge_json(a, o, "defaults");
	json_decref(o);
	json_decref(d);
	if (def_ok) mgt_args_free(&def);
	return st;
}

/* Another tensor-parallel size pads the vocabulary to another multiple (divisor x TP): unless
 * --make-vocab-size-divisible-by is given, scale the divisor so that the embedding keeps the
 * checkpoint's rows (Megatron's _vocab_size_with_padding). */
static mgt_status keep_padded_vocab(const lopts *o, mgt_args *a, int64_t ck_tp, int64_t ck_div)
{
	for (int i = 1; i < o->argc; i++)
		if (!strncmp(o->argv[i], "--make-vocab-size-divisible-by", 30)) return MGT_OK;
	int64_t tp = a->tensor_model_parallel_size, m = ck_tp * ck_div;
	if (tp == ck_tp || tp <= 0 || m % tp) return MGT_OK; /* the loader names a mismatch */
	char v[32];
	snprintf(v, sizeof v, "%lld", (long long)(m / tp));
	return mgt_args_set(a, "make_vocab_size_divisible_by", v);
}

/* Whether the command line gives one of flags (NULL-terminated), as --flag or --flag=VALUE. */
static bool given(const lopts *o, const char *const *flags)
{
	for (int i = 1; i < o->argc; i++)
		for (const char *const *f = flags; *f; f++) {
			size_t n = strlen(*f);
			if (!strncmp(o->argv[i], *f, n) && (!o->argv[i][n] || o->argv[i][n] == '=')) return true;
		}
	return false;
}

/* A Hugging Face directory records no training run: without --train-iters or --train-samples,
 * one iteration (what mgt-train's arguments need; the evaluation does not train). */
static mgt_status default_train_iters(const lopts *o, mgt_args *a)
{
	static const char *const flags[] = {"--train-iters", "--train-samples", NULL};
	if (a->train_iters > 0 || a->train_samples > 0 || given(o, flags)) return MGT_OK;
	return mgt_args_set(a, "train_iters", "1");
}

/* A checkpoint trained without --eval-interval: mgt-train sizes no validation or test samples
 * then (lib/train/train.c open_data), which GPT's dataset reads as one epoch but the masked
 * datasets of BERT and T5 (lib/data/masked_data.c: num_samples rows) as none.  Their splits are
 * sized as Megatron sizes them for one evaluation (megatron/training/training.py
 * get_train_valid_test_num_samples: eval_iters x global batch, the interval past the last
 * iteration): --eval-interval train_iters + 1.  GPT's are left as they are. */
static mgt_status size_eval_splits(mgt_args *a)
{
	if (a->eval_interval > 0 || mgt_model_family(&a->model)->recipe == MGT_STACK_DECODER) return MGT_OK;
	char v[32];
	snprintf(v, sizeof v, "%lld", (long long)(a->train_iters > 0 ? a->train_iters + 1 : 1));
	return mgt_args_set(a, "eval_interval", v);
}

static bool str_same(const char *x, const char *y) { return x == y || (x && y && !strcmp(x, y)); }

/* A tokenizer the command line names instead of the checkpoint's must have its vocabulary
 * (mgt_eval_check_tok), which otherwise mgt-train's loader reports as a padded_vocab_size
 * mismatch with advice on the padding.  A tokenizer that does not load is left to it (it says
 * why). */
static mgt_status check_tokenizer(const mgt_args *a, const eval_model *em)
{
	mgt_tok_opts t, c;
	mgt_eval_args_tok_opts(a, &t);
	mgt_eval_tok_opts(em->ev, &c);
	if (!t.type || (str_same(t.type, c.type) && str_same(t.vocab_file, c.vocab_file) &&
			str_same(t.merge_file, c.merge_file) && str_same(t.model, c.model)))
		return MGT_OK;
	mgt_tok *tok = NULL;
	if (mgt_tok_load(&tok, &t)) return MGT_OK;
	mgt_status st = mgt_eval_check_tok(em->ev, tok, &t);
	mgt_tok_free(tok);
	return st;
}

/* The layout (the checkpoint's, unless the command line changed it) must divide the processes
 * this runs as: say how to run it, or how to evaluate in fewer processes. */
static mgt_status check_world(const mgt_args *a)
{
	int64_t n = a->tensor_model_parallel_size * a->pipeline_model_parallel_size * a->context_parallel_size;
	int64_t w = mgt_parallel_world_size();
	if (n < 1 || w % n == 0) return MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "the layout is --tensor-model-parallel-size %lld x --pipeline-model-parallel-size %lld "
		       "x --context-parallel-size %lld (the checkpoint's unless given), %lld processes, and this runs as %lld: "
		       "run it under mpirun with a multiple of %lld processes, or give sizes whose product divides %lld "
		       "(the checkpoint reshards on load: --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
		       "--context-parallel-size 1 in one process)", (long long)a->tensor_model_parallel_size,
		       (long long)a->pipeline_model_parallel_size, (long long)a->context_parallel_size, (long long)n,
		       (long long)w, (long long)n, (long long)w);
}

/* The checkpoint's arguments (tokenizer files found relative to it, as mgt_eval_open finds them),
 * then the command line's. */
static mgt_status make_args(const lopts *o, eval_model *em, mgt_args *a)
{
	eval_model_opts mo;
	eval_model_defaults(&mo);
	mo.load = o->load;
	mo.hf = o->hf;
	mo.step = o->step;
	mgt_status st = eval_model_open(&mo, false, em);
	if (st == MGT_ERR_VOCAB && em->ev) st = MGT_OK; /* the trainer loads the tokenizer and says why */
	json_t *j = st ? NULL : mgt_args_to_json(mgt_eval_args(em->ev));
	if (!st && !j) st = MGT_ERR_NOMEM;
	if (!st) st = mgt_args_merge_json(a, j, "checkpoint arguments");
	json_decref(j);
	if (!st) st = reset_run_keys(a);
	char step[32];
	snprintf(step, sizeof step, "%lld", o->step);
	if (!st) st = mgt_args_set(a, o->hf ? "pretrained_checkpoint" : "load", o->hf ? o->hf : o->load); /* --hf in place */
	if (!st) st = mgt_args_set(a, "ckpt_step", step);
	int64_t tp = a->tensor_model_parallel_size, div = a->model.make_vocab_size_divisible_by;
	if (!st) st = default_train_iters(o, a);
	if (!st) st = mgt_args_parse_argv(a, o->argc, o->argv);
	if (!st) st = size_eval_splits(a);
	if (!st) st = check_tokenizer(a, em);
	if (!st) st = keep_padded_vocab(o, a, tp, div);
	if (!st) st = check_world(a);
	return st;
}

static mgt_status write_json(const char *path, const mgt_train_eval_result *r, bool test, const char *load)
{
	json_t *j = json_pack("{s:s, s:I, s:s, s:I, s:I, s:I, s:f, s:f}", "load", load, "iteration",
			      (json_int_t)r->iteration, "split", test ? "test" : "valid", "first_sample",
			      (json_int_t)r->first_sample, "samples", (json_int_t)r->samples, "tokens",
			      (json_int_t)r->tokens, "lm_loss", r->loss, "ppl", exp(fmin(20.0, r->loss)));
	if (j && r->bert) { /* the loss is the masked tokens' (lm loss); tokens counts micro-batches there */
		json_object_del(j, "tokens");
		json_object_set_new(j, "microbatches", json_integer((json_int_t)r->tokens));
		if (r->binary_head) json_object_set_new(j, "sop_loss", json_real(r->sop_loss));
		json_object_set_new(j, "masked_tokens", json_integer((json_int_t)r->masked));
		json_object_set_new(j, "masked_token_accuracy", json_real(r->masked ? (double)r->correct / (double)r->masked : 0));
	}
	char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
	json_decref(j);
	if (!text) return MGT_ERR_NOMEM;
	mgt_afile f;
	mgt_status st = mgt_afile_open(&f, path, 1);
	if (!st) st = mgt_afile_write(&f, text, strlen(text));
	if (!st) st = mgt_afile_write(&f, "\n", 1);
	if (!st) st = mgt_afile_commit(&f);
	else mgt_afile_abort(&f);
	free(text);
	return st ? mgt_err_ctx(st, "--output %s", path) : MGT_OK;
}

/* Megatron's evaluate_and_print_results block. */
static void print_result(const mgt_train_eval_result *r, bool test)
{
	char head[160];
	snprintf(head, sizeof head, " validation loss at iteration %lld on %s set | ", (long long)r->iteration,
		 test ? "test" : "validation");
	mgt_train_print_losses(stdout, head, r->loss, r->bert && r->binary_head ? r->sop_loss : NAN);
	if (r->bert)
		printf("masked-token accuracy: %.6f (%lld of %lld masked tokens)\n",
		       r->masked ? (double)r->correct / (double)r->masked : 0.0, (long long)r->correct, (long long)r->masked);
}

int eval_cmd_loss(int argc, char **argv)
{
	lopts o = { 0 };
	parse(argc, argv, &o);
	mgt_status st = mgt_parallel_runtime_init(&argc, &argv);
	if (st) mgt_cli_fail_job(PROG, st);
	mgt_args a;
	eval_model em = { 0 };
	mgt_train_eval_result r;
	st = mgt_args_init(&a);
	if (!st) st = make_args(&o, &em, &a);
	bool logs = mgt_parallel_world_rank() == mgt_parallel_world_size() - 1;
	mgt_train_io io = { .log = logs ? stderr : NULL, .prog = PROG, .start_time = mgt_now() };
	mgt_train_eval_opts eo = { .test = o.test, .from_sample = o.from };
	if (!st) st = mgt_train_evaluate(&a, &io, &eo, &r);
	if (!st && logs) print_result(&r, o.test);
	if (!st && logs && o.output) st = write_json(o.output, &r, o.test, o.load ? o.load : o.hf);
	mgt_args_free(&a);
	eval_model_close(&em);
	free(o.argv);
	if (!st && fflush(stdout)) st = mgt_err(MGT_ERR_IO, "standard output: write failed");
	if (st) mgt_cli_fail_job(PROG, st);
	mgt_parallel_finalize();
	return 0;
}
