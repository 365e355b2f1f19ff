/* cmd/cli: what the programs share: error exit, the tokenizer flags (Megatron names), help text.
 * Not part of libmgt: only cmd/ prints and exits. */
#ifndef MGT_CLI_H
#define MGT_CLI_H

#include <getopt.h>

#include "tok/tok.h"
#include "util/util.h"

enum {
	CLI_TOK_TYPE = 1000, CLI_TOK_VOCAB, CLI_TOK_MERGE, CLI_TOK_MODEL, CLI_TOK_PATTERN,
	CLI_TOK_NSPECIAL, CLI_TOK_VOCAB_SIZE, CLI_TOK_NULL_EOD, CLI_TOK_HF_NO_SPECIAL,
	CLI_TOK_EXTRA_IDS,
	CLI_FIRST_FREE = 1100 /* programs number their own long-only options from here */
};

/* The getopt_long entries of the tokenizer flags; splice into a program's table. */
#define MGT_CLI_TOK_LONGOPTS \
	{"tokenizer-type", required_argument, 0, CLI_TOK_TYPE}, \
	{"vocab-file", required_argument, 0, CLI_TOK_VOCAB}, \
	{"merge-file", required_argument, 0, CLI_TOK_MERGE}, \
	{"tokenizer-model", required_argument, 0, CLI_TOK_MODEL}, \
	{"tiktoken-pattern", required_argument, 0, CLI_TOK_PATTERN}, \
	{"tiktoken-num-special-tokens", required_argument, 0, CLI_TOK_NSPECIAL}, \
	{"vocab-size", required_argument, 0, CLI_TOK_VOCAB_SIZE}, \
	{"null-tokenizer-eod-id", required_argument, 0, CLI_TOK_NULL_EOD}, \
	{"tokenizer-hf-no-include-special-tokens", no_argument, 0, CLI_TOK_HF_NO_SPECIAL}, \
	{"vocab-extra-ids", required_argument, 0, CLI_TOK_EXTRA_IDS}

/* Help lines for those flags. */
extern const char mgt_cli_tok_help[];

/* Defaults: tiktoken_num_special 1000, null_eod_id -1. */
void mgt_cli_tok_defaults(mgt_tok_opts *o);
/* Handle one getopt_long result if it is a tokenizer flag: 1 handled, 0 not ours;
 * exits 2 with a message on a bad value. */
int mgt_cli_tok_option(const char *prog, int c, const char *arg, mgt_tok_opts *o);

/* The flags that only make sense with --tokenizer-type (a tokenizer replaced whole) given
 * without it, over a stored tokenizer: exit 2 saying so. */
void mgt_cli_tok_check_override(const char *prog, const mgt_tok_opts *t);

/* Print "PROG: error: MSG" (the thread's mgt_err_msg) and exit with mgt_exit_code(st). */
_Noreturn void mgt_cli_fail(const char *prog, mgt_status st);
/* Print "PROG: error: FMT..." plus "Try 'PROG --help'." and exit 2. */
_Noreturn void mgt_cli_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse a non-negative integer flag value or exit 2 naming the flag. */
long long mgt_cli_int(const char *prog, const char *flag, const char *arg);

#endif
