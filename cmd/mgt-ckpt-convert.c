/* mgt-ckpt-convert: Hugging Face model directories to and from mgt checkpoints, any TP/PP (and EP
 * for Mixture-of-Experts models).
 *
 *   mgt-ckpt-convert --load-dir IN --save-dir OUT [OPTION]...
 *
 * Manual: man/man1/mgt-ckpt-convert.1; names and layouts: man/man5/mgt-hf.5.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "convert/convert.h"

static const char PROG[] = "mgt-ckpt-convert";

enum { OPT_LOAD = CLI_FIRST_FREE, OPT_SAVE, OPT_TP, OPT_PP, OPT_EP, OPT_DIV, OPT_DTYPE, OPT_FAMILY, OPT_STEP, OPT_SHARD,
       OPT_FORMAT, OPT_DISTOPT, OPT_QUIET, OPT_HELP };

static void usage(void)
{
	printf("Usage: mgt-ckpt-convert --load-dir IN --save-dir OUT [OPTION]...\n"
	       "Convert a Hugging Face model directory (config.json, *.safetensors) to an mgt checkpoint, an\n"
	       "mgt checkpoint to a Hugging Face directory, or a Megatron-LM checkpoint (its format torch,\n"
	       "torch_dist or fsdp_dtensor) to an mgt checkpoint or a Hugging Face directory; the direction\n"
	       "follows from IN and --save-format. Tensor by tensor, bit for bit; OUT must not exist and\n"
	       "appears only when complete.\n\n"
	       "  --load-dir IN                       Hugging Face directory, mgt or Megatron-LM save directory\n"
	       "  --save-dir OUT                      output directory (must not exist)\n"
	       "  --save-format mgt|hf|torch|torch_dist  what to write: an mgt checkpoint, a Hugging Face directory,\n"
	       "                                      or a Megatron-LM checkpoint, torch or torch_dist [mgt from\n"
	       "                                      Hugging Face and Megatron-LM, hf from mgt]\n"
	       "  --use-distributed-optimizer         to torch: Adam's state as the distributed optimizer's\n"
	       "                                      (distrib_optim.pt), for runs with that flag\n"
	       "  --target-tensor-parallel-size N     to mgt: tensor-parallel layout to write [1]\n"
	       "  --target-pipeline-parallel-size N   to mgt: pipeline-parallel layout to write [1]\n"
	       "  --target-expert-parallel-size N     to mgt: expert-parallel layout of an MoE model [1]\n"
	       "  --make-vocab-size-divisible-by N    HF to mgt: vocabulary padding multiple (times TP) [128]\n"
	       "  --dtype bf16|fp16|fp32              mgt to HF: tensor type [config.json's torch_dtype, else fp32]\n"
	       "  --family NAME                       mgt to HF: gpt2, llama, mistral, qwen2, qwen3, mixtral,\n"
	       "                                      qwen2_moe, qwen3_moe, megatron-bert, nemotron_h or\n"
	       "                                      mamba2 [recorded, else inferred from the model's\n"
	       "                                      arguments]\n"
	       "  --ckpt-step N                       from mgt or Megatron-LM: iteration to convert [the tracker's]\n"
	       "  --max-shard-size BYTES              mgt to HF: safetensors shard size [5000000000]\n"
	       "  --quiet                             no summary line\n"
	       "  --help\n\n"
	       "Exit status: 0 ok, 1 runtime error (I/O, disk full, not enough memory), 2 usage error or a model\n"
	       "mgt does not implement, 3 bad input (config.json, a missing, unexpected, misshapen or non-finite\n"
	       "tensor), 4 unreadable tokenizer files, 5 output exists, 6 malformed safetensors or damaged checkpoint (mgt or\n"
	       "Megatron-LM), 130 interrupted.\n"
	       "See mgt-ckpt-convert(1), mgt-hf(5), mgt-megatron(5), mgt-ckpt(5).\n");
}

static const struct option longopts[] = {
	{"load-dir", required_argument, 0, OPT_LOAD},
	{"save-dir", required_argument, 0, OPT_SAVE},
	{"target-tensor-parallel-size", required_argument, 0, OPT_TP},
	{"target-pipeline-parallel-size", required_argument, 0, OPT_PP},
	{"target-expert-parallel-size", required_argument, 0, OPT_EP},
	{"make-vocab-size-divisible-by", required_argument, 0, OPT_DIV},
	{"dtype", required_argument, 0, OPT_DTYPE},
	{"family", required_argument, 0, OPT_FAMILY},
	{"ckpt-step", required_argument, 0, OPT_STEP},
	{"max-shard-size", required_argument, 0, OPT_SHARD},
	{"save-format", required_argument, 0, OPT_FORMAT},
	{"use-distributed-optimizer", no_argument, 0, OPT_DISTOPT},
	{"quiet", no_argument, 0, OPT_QUIET},
	{"help", no_argument, 0, OPT_HELP},
	{0, 0, 0, 0},
};

static int positive(const char *flag, const char *arg)
{
	long long v = mgt_cli_int(PROG, flag, arg);
	if (v < 1 || v > 1 << 20) mgt_cli_usage_error(PROG, "%s %s: expected a positive integer", flag, arg);
	return (int)v;
}

static const char *save_format;

static void parse(int argc, char **argv, mgt_convert_opts *o)
{
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LOAD: o->load_dir = optarg; break;
		case OPT_SAVE: o->save_dir = optarg; break;
		case OPT_TP: o->tp = positive("--target-tensor-parallel-size", optarg); break;
		case OPT_PP: o->pp = positive("--target-pipeline-parallel-size", optarg); break;
		case OPT_EP: o->ep = positive("--target-expert-parallel-size", optarg); break;
		case OPT_DIV: o->make_vocab_size_divisible_by = positive("--make-vocab-size-divisible-by", optarg); break;
		case OPT_DTYPE:
			if (strcmp(optarg, "bf16") && strcmp(optarg, "fp16") && strcmp(optarg, "fp32"))
				mgt_cli_usage_error(PROG, "--dtype %s: expected bf16, fp16 or fp32", optarg);
			o->dtype = optarg;
			break;
		case OPT_FAMILY: o->family = optarg; break;
		case OPT_STEP: o->ckpt_step = mgt_cli_int(PROG, "--ckpt-step", optarg); break;
		case OPT_SHARD:
			o->max_shard_bytes = (uint64_t)mgt_cli_int(PROG, "--max-shard-size", optarg);
			if (!o->max_shard_bytes) mgt_cli_usage_error(PROG, "--max-shard-size: expected a positive byte count");
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "mgt") && strcmp(optarg, "hf") && strcmp(optarg, "torch") && strcmp(optarg, "torch_dist"))
				mgt_cli_usage_error(PROG, "--save-format %s: expected mgt, hf, torch or torch_dist", optarg);
			save_format = optarg;
			break;
		case OPT_DISTOPT: o->distopt = true; break;
		case OPT_QUIET: o->log = NULL; break;
		case OPT_HELP: usage(); exit(0);
		default: mgt_cli_usage_error(PROG, "unknown option");
		}
	}
	if (optind < argc) mgt_cli_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
	if (!o->load_dir || !o->save_dir) mgt_cli_usage_error(PROG, "--load-dir and --save-dir are required");
}

int main(int argc, char **argv)
{
	mgt_convert_opts o = {.tp = 1, .pp = 1, .ep = 1, .ckpt_step = -1, .log = stderr};
	parse(argc, argv, &o);
	mgt_signals_install();
	int kind;
	mgt_status st = mgt_convert_detect(o.load_dir, &kind);
	const char *to = save_format ? save_format : kind == 2 ? "hf" : "mgt";
	bool megatron = !strcmp(to, "torch") || !strcmp(to, "torch_dist");
	if (!st && ((kind == 1 && !strcmp(to, "hf")) || (kind == 2 && !strcmp(to, "mgt")) || (kind == 3 && megatron)))
		mgt_cli_usage_error(PROG, "--save-format %s: %s is already %s", to, o.load_dir,
				    kind == 1 ? "a Hugging Face directory" : kind == 2 ? "an mgt checkpoint" : "a Megatron-LM checkpoint");
	if (!st && o.distopt && strcmp(to, "torch"))
		mgt_cli_usage_error(PROG, "--use-distributed-optimizer applies to --save-format torch");
	if (!st && megatron) {
		if (o.family || o.max_shard_bytes || o.make_vocab_size_divisible_by)
			mgt_cli_usage_error(PROG, "--family, --max-shard-size and --make-vocab-size-divisible-by do not apply to "
					    "--save-format %s", to);
		o.save_format = to;
		st = mgt_convert_to_megatron(&o);
	} else if (!st && kind == 1) {
		if (o.dtype || o.family || o.ckpt_step >= 0 || o.max_shard_bytes)
			mgt_cli_usage_error(PROG, "--dtype, --family, --ckpt-step and --max-shard-size apply to mgt to "
					    "Hugging Face conversion; %s is a Hugging Face directory", o.load_dir);
		st = mgt_convert_hf_to_mgt(&o);
	} else if (!st && kind == 3 && !strcmp(to, "mgt")) {
		if (o.dtype || o.family || o.max_shard_bytes)
			mgt_cli_usage_error(PROG, "--dtype, --family and --max-shard-size apply to Hugging Face output; "
					    "--save-format is mgt");
		if (o.make_vocab_size_divisible_by)
			mgt_cli_usage_error(PROG, "--make-vocab-size-divisible-by: a Megatron-LM checkpoint keeps the "
					    "vocabulary padding it was saved with");
		st = mgt_convert_megatron_to_mgt(&o);
	} else if (!st) {
		if (o.tp != 1 || o.pp != 1 || o.ep != 1 || o.make_vocab_size_divisible_by)
			mgt_cli_usage_error(PROG, "--target-* and --make-vocab-size-divisible-by apply to Hugging Face to "
					    "mgt conversion; %s is an mgt checkpoint", o.load_dir);
		st = mgt_convert_mgt_to_hf(&o);
	}
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	return 0;
}
