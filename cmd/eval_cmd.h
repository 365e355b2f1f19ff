/* cmd/eval_*: the commands of mgt-eval(1), one file a command, and what they share: how the
 * model is named (--load DIR or --hf DIR), built and its tokenizer loaded.  Not part of libmgt. */
#ifndef MGT_EVAL_CMD_H
#define MGT_EVAL_CMD_H

#include <stdbool.h>

#include "cli.h"
#include "eval/eval.h"

#define EVAL_PROG "mgt-eval"

/* The model options every command takes. */
typedef struct eval_model_opts {
	const char *load;      /* --load DIR: an mgt checkpoint directory */
	const char *hf;        /* --hf DIR: a Hugging Face directory, read in place */
	const char *device;    /* --device cpu|cuda|auto */
	long long step;        /* --ckpt-step N (0: the tracker's) */
	long long threads;     /* --threads N (0: all) */
	mgt_tok_opts tok;      /* tokenizer flags given */
	const char *command;   /* the command, "mgt-eval logits": eval_model_open refuses a family that
				* cannot do use (mgt_eval_supports); NULL: no check (loss) */
	mgt_eval_use use;
} eval_model_opts;

/* getopt_long values of the model options (commands number theirs from EVAL_OPT_FIRST_FREE). */
enum { EVAL_OPT_LOAD = CLI_FIRST_FREE, EVAL_OPT_HF, EVAL_OPT_STEP, EVAL_OPT_DEVICE, EVAL_OPT_THREADS,
       EVAL_OPT_HELP, EVAL_OPT_FIRST_FREE };

#define EVAL_MODEL_LONGOPTS \
	MGT_CLI_TOK_LONGOPTS, \
	{"load", required_argument, 0, EVAL_OPT_LOAD}, {"hf", required_argument, 0, EVAL_OPT_HF}, \
	{"ckpt-step", required_argument, 0, EVAL_OPT_STEP}, {"device", required_argument, 0, EVAL_OPT_DEVICE}, \
	{"threads", required_argument, 0, EVAL_OPT_THREADS}, {"help", no_argument, 0, EVAL_OPT_HELP}

/* Help lines of the model options and of the tokenizer flags (ends with a newline). */
extern const char eval_model_help[];
/* The exit-status paragraph every command's help ends with. */
extern const char eval_exit_help[];

/* Defaults (device auto, tokenizer defaults). */
void eval_model_defaults(eval_model_opts *o);
/* Handle one getopt_long result if it is a model option: 1 handled, 0 not ours; exits 2 on a
 * bad value.  EVAL_OPT_HELP is not handled (the command prints its own help). */
int eval_model_option(int c, const char *arg, eval_model_opts *o);
/* Exit 2 unless exactly one of --load and --hf is given and the tokenizer flags agree. */
void eval_model_check(const eval_model_opts *o);

/* The opened model: the checkpoint (for --hf the Hugging Face directory read in place,
 * mgt_eval_open_hf) and its tokenizer (NULL when the checkpoint
 * records none and none was given). */
typedef struct eval_model {
	mgt_eval *ev;
	mgt_tok *tok;
	const char *tok_model; /* the tokenizer's --tokenizer-model path (NULL: none), owned by ev or the
				* options: where its tokenizer_config.json is looked for */
} eval_model;

/* Open --load (or --hf in place), check that its family can do o->use (o->command), and load the
 * tokenizer: the checkpoint's, with the command line's flags applied (a --tokenizer-type
 * replaces it; file flags alone replace its files' paths).  need_tok: a checkpoint without a
 * tokenizer is an error (MGT_ERR_VOCAB).  The model is not built (mgt_eval_build).
 * Errors: those of mgt_eval_open, mgt_eval_open_hf, mgt_eval_supports and mgt_tok_load. */
mgt_status eval_model_open(const eval_model_opts *o, bool need_tok, eval_model *m);
/* Build it for sequences of up to seq_length tokens with the tokenizer's vocabulary. */
mgt_status eval_model_build(const eval_model_opts *o, eval_model *m, int64_t seq_length);
void eval_model_close(eval_model *m);

/* "getopt state reset": commands parse argv[0..argc) with argv[0] the command's name. */
void eval_getopt_reset(void);

/* Parse a command's argv[0..argc) with getopt_long over longopts (EVAL_MODEL_LONGOPTS first):
 * model options into *m, every other option to own(c, optarg, ctx), which returns 0 for one it
 * does not know.  --help (-h) prints help() and exits 0; an unknown option, a missing value or
 * an argument that is not an option exit 2. */
void eval_parse(int argc, char **argv, const struct option *longopts, eval_model_opts *m,
		int (*own)(int c, const char *arg, void *ctx), void *ctx, void (*help)(void));

/* What the tokenizer makes of the empty text (a WordPiece tokenizer's [CLS] [SEP]; nothing for
 * most): *out (caller frees out->v).  A prompt that encodes to the same has no tokens of its own
 * (eval_ids_same).  Errors: those of mgt_tok_encode. */
mgt_status eval_encode_empty(mgt_tok_enc *enc, mgt_ids *out);
bool eval_ids_same(const mgt_ids *a, const mgt_ids *b);

/* Finish a command: flush stdout, print the error and exit with its status, or return 0. */
int eval_finish(mgt_status st);

/* The commands (argv[0] is the command's name). */
int eval_cmd_logits(int argc, char **argv);
int eval_cmd_loss(int argc, char **argv);
int eval_cmd_perplexity(int argc, char **argv);
int eval_cmd_generate(int argc, char **argv);
int eval_cmd_tasks(int argc, char **argv);

#endif
