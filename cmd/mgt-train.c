/* mgt-train: pretrain a GPT-2- or Llama-style model (Megatron-LM's pretrain_gpt.py, on CPU).
 *
 *   mgt-train [--model PRESET|FILE.json] [Megatron flags]...
 *
 * Manual: man/man1/mgt-train.1; checkpoints: man/man5/mgt-ckpt.5.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "train/train.h"

static const char PROG[] = "mgt-train";

static void usage(void)
{
	printf("Usage: mgt-train [--model PRESET|FILE.json] [OPTION]...\n"
	       "Pretrain a GPT model the way Megatron-LM's pretrain_gpt.py does, with Megatron's flags\n"
	       "and defaults. A preset (share/mgt/models/NAME.json) sets the model shape; flags override it.\n"
	       "Logs go to stderr: Megatron's iteration line every --log-interval iterations.\n");
	mgt_args_help(stdout);
	printf("\nExit status: 0 ok, 1 runtime error, 2 usage error, 3 bad data, 4 bad tokenizer files,\n"
	       "6 checkpoint that does not match or is damaged, 130 interrupted (after saving with --save).\n"
	       "See mgt-train(1), mgt-ckpt(5).\n");
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage();
			return 0;
		}
	mgt_args a;
	mgt_status st = mgt_args_init(&a);
	if (!st) st = mgt_args_parse_argv(&a, argc, argv);
	if (st == MGT_ERR_USAGE) {
		mgt_args_free(&a);
		mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	}
	mgt_signals_install_graceful();
	mgt_train_io io = { .log = stderr, .prog = PROG };
	if (!st) st = mgt_train_run(&a, &io);
	mgt_args_free(&a);
	if (st) mgt_cli_fail(PROG, st);
	return 0;
}
