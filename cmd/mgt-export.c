/* mgt-export: an mgt checkpoint (or a Hugging Face directory) to GGUF for llama.cpp, or to
 * safetensors for transformers and vLLM.
 *
 *   mgt-export --load-dir DIR --output FILE.gguf [--outtype f32|f16|bf16|q8_0]
 *
 * Manual: man/man1/mgt-export.1.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "convert/convert.h"

static const char PROG[] = "mgt-export";

enum { OPT_LOAD = CLI_FIRST_FREE, OPT_OUT, OPT_FORMAT, OPT_OUTTYPE, OPT_NAME, OPT_FAMILY, OPT_STEP, OPT_QUIET, OPT_HELP };

static void usage(void)
{
	printf("Usage: mgt-export --load-dir DIR --output OUT [OPTION]...\n"
	       "Export an mgt checkpoint (or a Hugging Face directory) as one GGUF v3 file that llama.cpp\n"
	       "runs (architectures gpt2, llama, qwen2, qwen3; tokenizer embedded), or as a Hugging Face\n"
	       "safetensors directory (--format safetensors, as mgt-ckpt-convert).\n\n"
	       "  --load-dir DIR                 mgt save directory or Hugging Face directory\n"
	       "  --output OUT                   GGUF file, or directory for safetensors (must not exist)\n"
	       "  --format gguf|safetensors      output format [gguf]\n"
	       "  --outtype f32|f16|bf16|q8_0    GGUF type of 2-D tensors [f16]; 1-D tensors stay f32\n"
	       "  --dtype bf16|fp16|fp32         safetensors type [recorded torch_dtype, else fp32]\n"
	       "  --name NAME                    GGUF general.name [the directory's name]\n"
	       "  --family NAME                  gpt2, llama, mistral, qwen2, qwen3, nemotron_h or mamba2\n"
	       "                                 [recorded or inferred]\n"
	       "  --ckpt-step N                  iteration to export [the tracker's]\n"
	       "  --quiet                        no summary line\n"
	       "  --help\n"
	       "Tokenizer: the checkpoint's (its own copy of the files, else metadata.json's paths) or the\n"
	       "Hugging Face directory's.  Given --tokenizer-type, these flags replace it; without,\n"
	       "--vocab-file, --merge-file and --tokenizer-model replace its files' paths.\n"
	       "%s\n"
	       "Exit status: 0 ok, 1 runtime error (I/O, disk full, not enough memory), 2 usage error, 3 bad\n"
	       "input (config.json, tensors), 4 no tokenizer or unreadable tokenizer files, 5 output exists,\n"
	       "6 damaged checkpoint or malformed safetensors, 130 interrupted.\n"
	       "See mgt-export(1), mgt-hf(5), mgt-ckpt-convert(1).\n", mgt_cli_tok_help);
}

static const struct option longopts[] = {
	{"load-dir", required_argument, 0, OPT_LOAD},
	{"output", required_argument, 0, OPT_OUT},
	{"format", required_argument, 0, OPT_FORMAT},
	{"outtype", required_argument, 0, OPT_OUTTYPE},
	{"dtype", required_argument, 0, OPT_OUTTYPE + 100},
	{"name", required_argument, 0, OPT_NAME},
	{"family", required_argument, 0, OPT_FAMILY},
	{"ckpt-step", required_argument, 0, OPT_STEP},
	{"quiet", no_argument, 0, OPT_QUIET},
	{"help", no_argument, 0, OPT_HELP},
	MGT_CLI_TOK_LONGOPTS,
	{0, 0, 0, 0},
};

int main(int argc, char **argv)
{
	mgt_tok_opts tok;
	mgt_cli_tok_defaults(&tok);
	mgt_export_opts o = {.ckpt_step = -1, .log = stderr, .tok = &tok};
	const char *format = "gguf", *dtype = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (mgt_cli_tok_option(PROG, c, optarg, &tok)) continue;
		switch (c) {
		case OPT_LOAD: o.load_dir = optarg; break;
		case OPT_OUT: o.output = optarg; break;
		case OPT_FORMAT: format = optarg; break;
		case OPT_OUTTYPE: o.outtype = optarg; break;
		case OPT_OUTTYPE + 100: dtype = optarg; break;
		case OPT_NAME: o.name = optarg; break;
		case OPT_FAMILY: o.family = optarg; break;
		case OPT_STEP: o.ckpt_step = mgt_cli_int(PROG, "--ckpt-step", optarg); break;
		case OPT_QUIET: o.log = NULL; break;
		case OPT_HELP: usage(); return 0;
		default: mgt_cli_usage_error(PROG, "unknown option");
		}
	}
	if (optind < argc) mgt_cli_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
	if (!o.load_dir || !o.output) mgt_cli_usage_error(PROG, "--load-dir and --output are required");
	mgt_cli_tok_check_override(PROG, &tok);
	bool gguf = !strcmp(format, "gguf");
	if (!gguf && strcmp(format, "safetensors")) mgt_cli_usage_error(PROG, "--format %s: expected gguf or safetensors", format);
	if (gguf && dtype) mgt_cli_usage_error(PROG, "--dtype applies to --format safetensors (GGUF: --outtype)");
	if (!gguf && (o.outtype || o.name)) mgt_cli_usage_error(PROG, "--outtype and --name apply to --format gguf");
	mgt_signals_install();
	mgt_status st;
	if (gguf) {
		st = mgt_export_gguf(&o);
	} else {
		int kind;
		st = mgt_convert_detect(o.load_dir, &kind);
		if (!st && kind != 2) mgt_cli_usage_error(PROG, "%s is a Hugging Face directory already", o.load_dir);
		mgt_convert_opts co = {.load_dir = o.load_dir, .save_dir = o.output, .tp = 1, .pp = 1, .dtype = dtype,
				       .family = o.family, .ckpt_step = o.ckpt_step, .tok = &tok, .log = o.log};
		if (!st) st = mgt_convert_mgt_to_hf(&co);
	}
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	return 0;
}
