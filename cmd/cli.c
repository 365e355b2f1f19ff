/* cmd/cli: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char mgt_cli_tok_help[] =
	"Tokenizer (Megatron flags):\n"
	"  --tokenizer-type T        GPT2BPETokenizer | HuggingFaceTokenizer | SentencePieceTokenizer |\n"
	"                            Llama2Tokenizer | BertWordPieceLowerCase | BertWordPieceCase |\n"
	"                            TikTokenizer | NullTokenizer\n"
	"  --vocab-file F            GPT-2 vocab.json (GPT2BPETokenizer); BERT vocab.txt (BertWordPiece*)\n"
	"  --merge-file F            GPT-2 merges.txt (GPT2BPETokenizer)\n"
	"  --tokenizer-model P       tokenizer.json or its directory (HuggingFaceTokenizer);\n"
	"                            SentencePiece tokenizer.model (SentencePieceTokenizer, Llama2Tokenizer);\n"
	"                            rank file or Megatron JSON vocabulary (TikTokenizer)\n"
	"  --tiktoken-pattern P      v1 | v2 (Megatron) | cl100k_base | o200k_base | llama3\n"
	"  --tiktoken-num-special-tokens N   Megatron TikTokenizer special ids (default 1000)\n"
	"  --vocab-size N            NullTokenizer vocabulary size\n"
	"  --null-tokenizer-eod-id N NullTokenizer eod (default vocab-size - 1)\n"
	"  --tokenizer-hf-no-include-special-tokens   do not add the post-processor's BOS/EOS\n"
	"                            (BertWordPiece*: no [CLS] ... [SEP]: plain ids)\n"
	"  --vocab-extra-ids N       SentencePieceTokenizer: add <extra_id_0> .. <extra_id_N-1>\n";

void mgt_cli_tok_defaults(mgt_tok_opts *o)
{
	*o = (mgt_tok_opts){0};
	o->tiktoken_num_special = 1000;
	o->null_eod_id = -1;
}

void mgt_cli_tok_check_override(const char *prog, const mgt_tok_opts *t)
{
	if (!t->type && (t->tiktoken_pattern || t->tiktoken_num_special != 1000 || t->vocab_size || t->null_eod_id != -1))
		mgt_cli_usage_error(prog, "--tiktoken-pattern, --tiktoken-num-special-tokens, --vocab-size and "
				    "--null-tokenizer-eod-id replace the checkpoint's tokenizer: give --tokenizer-type too");
}

long long mgt_cli_int(const char *prog, const char *flag, const char *arg)
{
	char *end;
	errno = 0;
	long long v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end || v < 0)
		mgt_cli_usage_error(prog, "%s: expected a non-negative integer, got '%s'", flag, arg);
	return v;
}

int mgt_cli_tok_option(const char *prog, int c, const char *arg, mgt_tok_opts *o)
{
	switch (c) {
	case CLI_TOK_TYPE: o->type = arg; return 1;
	case CLI_TOK_VOCAB: o->vocab_file = arg; return 1;
	case CLI_TOK_MERGE: o->merge_file = arg; return 1;
	case CLI_TOK_MODEL: o->model = arg; return 1;
	case CLI_TOK_PATTERN: o->tiktoken_pattern = arg; return 1;
	case CLI_TOK_NSPECIAL:
		o->tiktoken_num_special = (int)mgt_cli_int(prog, "--tiktoken-num-special-tokens", arg);
		return 1;
	case CLI_TOK_VOCAB_SIZE: o->vocab_size = mgt_cli_int(prog, "--vocab-size", arg); return 1;
	case CLI_TOK_NULL_EOD: o->null_eod_id = mgt_cli_int(prog, "--null-tokenizer-eod-id", arg); return 1;
	case CLI_TOK_HF_NO_SPECIAL: o->hf_no_special_tokens = 1; return 1;
	case CLI_TOK_EXTRA_IDS: {
		long long v = mgt_cli_int(prog, "--vocab-extra-ids", arg);
		o->vocab_extra_ids = v > 1000000 ? 1000000 : (int)v; /* mgt_tok_load refuses > 100000 */
		return 1;
	}
	}
	return 0;
}

_Noreturn void mgt_cli_fail(const char *prog, mgt_status st)
{
	mgt_tmp_remove_all(); /* temporaries an error path did not reach */
	fprintf(stderr, "%s: error: %s\n", prog, mgt_err_msg());
	exit(mgt_exit_code(st));
}

_Noreturn void mgt_cli_usage_error(const char *prog, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: error: ", prog);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", prog);
	exit(2);
}
