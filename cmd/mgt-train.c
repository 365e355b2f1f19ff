/* mgt-train: pretrain a GPT-2- or Llama-style model (Megatron-LM's pretrain_gpt.py, on CPU).
 *
 *   mgt-train [--model PRESET|FILE.json] [Megatron flags]...
 *
 * Manual: man/man1/mgt-train.1; checkpoints: man/man5/mgt-ckpt.5.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dist/dist.h"
#include "train/train.h"

static const char PROG[] = "mgt-train";

static void usage(void)
{
	printf("Usage: mgt-train [--model PRESET|FILE.json] [OPTION]...\n"
	       "Pretrain a GPT model the way Megatron-LM's pretrain_gpt.py does, with Megatron's flags\n"
	       "and defaults. A preset (share/mgt/models/NAME.json) sets the model shape; flags override it.\n"
	       "Logs go to stderr: Megatron's iteration line every --log-interval iterations.\n");
	mgt_args_help(stdout);
	printf("\nOther Megatron-LM flags are accepted without effect (said once in the log) or refused with\n"
	       "the reason.  --megatron-flags reads flag names on stdin, one a line, and prints how each is\n"
	       "treated: implemented, ignored (accepted without effect), refused or unknown.\n");
	printf("\nExit status: 0 ok, 1 runtime error, 2 usage error, 3 bad data, 4 bad tokenizer files,\n"
	       "6 checkpoint that does not match or is damaged, 130 interrupted (after saving with --save).\n"
	       "See mgt-train(1), mgt-ckpt(5).\n");
}

/* Exit after an error.  Under mpirun, errors every rank reaches together (usage, interrupt) are
 * printed once by rank 0 and every rank exits with the code; any other error is printed by the
 * rank that met it, naming itself, and takes the whole job down (MPI_Abort). */
static void fail(mgt_status st)
{
	int rank = mgt_dist_world_rank(), n = mgt_dist_world_size(), code = mgt_exit_code(st);
	if (n == 1) {
		if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
		mgt_cli_fail(PROG, st);
	}
	if (st == MGT_ERR_USAGE || st == MGT_ERR_INTR) {
		if (rank == 0) fprintf(stderr, "%s: error: %s\n", PROG, mgt_err_msg());
		mgt_dist_finalize();
		exit(code);
	}
	fprintf(stderr, "%s: rank %d of %d: error: %s\n", PROG, rank, n, mgt_err_msg());
	fflush(stderr);
	mgt_dist_abort(code);
	exit(code);
}

/* --megatron-flags: "FLAG CLASS[: REASON]" for every flag name on stdin ('#' lines skipped). */
static int classify_flags(void)
{
	char buf[512];
	while (fgets(buf, sizeof buf, stdin)) {
		char *line = buf + strspn(buf, " \t");
		line[strcspn(line, " \t\r\n")] = 0;
		if (!line[0] || line[0] == '#') continue;
		const char *cls, *why;
		mgt_args_classify(line, &cls, &why);
		printf("%s %s%s%s\n", line, cls, *why ? ": " : "", why);
	}
	return ferror(stdout) || fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage();
			return 0;
		}
		if (!strcmp(argv[i], "--megatron-flags")) return classify_flags();
	}
	double start = mgt_now();
	mgt_status st = mgt_dist_init(&argc, &argv);
	if (st) fail(st);
	mgt_args a;
	st = mgt_args_init(&a);
	if (!st) st = mgt_args_parse_argv(&a, argc, argv);
	if (st) {
		mgt_args_free(&a);
		fail(st);
	}
	mgt_signals_install_graceful();
	/* one rank logs: the last, as Megatron's training_log */
	bool logs = mgt_dist_world_rank() == mgt_dist_world_size() - 1;
	mgt_train_io io = { .log = logs ? stderr : NULL, .prog = PROG, .start_time = start };
	st = mgt_train_run(&a, &io);
	mgt_args_free(&a);
	if (st) fail(st);
	mgt_dist_finalize();
	return 0;
}
