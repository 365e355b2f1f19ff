/* mgt-train: pretrain a GPT, BERT or T5 model (Megatron-LM's pretrain_gpt.py, pretrain_bert.py,
 * pretrain_t5.py; --model-family), on CPU or CUDA.
 *
 *   mgt-train [--model PRESET|FILE.json] [Megatron flags]...
 *
 * Manual: man/man1/mgt-train.1; checkpoints: man/man5/mgt-ckpt.5.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_job.h"
#include "parallel/parallel.h"
#include "train/train.h"

static const char PROG[] = "mgt-train";

static void usage(void)
{
	printf("Usage: mgt-train [--model PRESET|FILE.json] [OPTION]...\n"
	       "Pretrain a GPT, BERT, T5 or hybrid (Mamba) model (--model-family) the way Megatron-LM's\n"
	       "pretrain_gpt.py, pretrain_bert.py, pretrain_t5.py and pretrain_hybrid.py do, with Megatron's\n"
	       "flags and defaults.\n"
	       "A preset (share/mgt/models/NAME.json) sets the model shape; flags override it.\n"
	       "Logs go to stderr: Megatron's iteration line every --log-interval iterations.\n");
	mgt_args_help(stdout);
	printf("\nPlans (mgt-plan(1)):\n"
	       "  --plan FILE[:N]                          apply plan N (default 1) of an mgt-plan output: its flags\n"
	       "                                           first, the command line's after (a layout flag that differs\n"
	       "                                           is an error); predicted vs measured memory and iteration\n"
	       "                                           time printed after iteration 5\n");
	printf("\nOther Megatron-LM flags are accepted without effect (said once in the log) or refused with\n"
	       "the reason.  --megatron-flags reads flag names on stdin, one a line, and prints how each is\n"
	       "treated: implemented, ignored (accepted without effect), refused or unknown.\n");
	printf("\nSignals: SIGINT, SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2 finish the iteration, save (with --save)\n"
	       "and exit 130; with --exit-signal-handler, the --exit-signal does the same and exits 0.\n"
	       "A second signal exits 130 at once without saving. Writes past `ulimit -f` fail with exit 1.\n"
	       "\nExit status: 0 ok, 1 runtime error (I/O, disk full, file too large, not enough memory), 2 usage error, 3 bad\n"
	       "data, 4 bad tokenizer files, 6 checkpoint that does not match, is damaged or is ambiguous\n"
	       "(iterations without a tracker), 130 interrupted (after saving with --save).\n"
	       "See mgt-train(1), mgt-ckpt(5).\n");
}

static _Noreturn void fail(mgt_status st) { mgt_cli_fail_job(PROG, st); }

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

/* The signal --exit-signal names (mgt_args_parse_argv leaves signal names to the program). */
static mgt_status check_flags(const mgt_args *a, int *exit_sig)
{
	*exit_sig = mgt_signal_number(a->exit_signal);
	if (*exit_sig < 0)
		return mgt_err(MGT_ERR_USAGE, "--exit-signal: '%s' is not one of SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2",
			       a->exit_signal ? a->exit_signal : "");
	return MGT_OK;
}

/* --plan FILE[:N] or --plan=FILE[:N] (the last one given; "" when its value is missing), or
 * NULL. */
static const char *find_plan(int argc, char **argv)
{
	const char *spec = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--plan")) spec = i + 1 < argc ? argv[++i] : "";
		else if (!strncmp(argv[i], "--plan=", 7)) spec = argv[i] + 7;
	}
	return spec;
}

/* Megatron's last line after --exit-signal-handler saved (training.py prints it with the date). */
static void say_exiting(int sig)
{
	char when[64];
	time_t now = time(NULL);
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
	fprintf(stderr, "[%s] exiting program after receiving %s.\n", when, mgt_signal_name(sig));
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
	mgt_signals_install(); /* until the flags are read: nothing to save yet */
	mgt_status st = mgt_parallel_runtime_init(&argc, &argv);
	if (st) fail(st);
	mgt_args a;
	int exit_sig = -1;
	mgt_train_plan plan = { 0 };
	const char *plan_spec = find_plan(argc, argv);
	int pargc = argc;
	char **pargv = NULL;
	st = mgt_args_init(&a);
	if (!st && plan_spec) st = mgt_train_plan_load(&plan, plan_spec);
	if (!st && plan_spec) st = mgt_train_plan_argv(&plan, argc, argv, &pargc, &pargv);
	if (!st) st = mgt_args_parse_argv(&a, pargc, pargv ? pargv : argv);
	free(pargv);
	if (!st) st = check_flags(&a, &exit_sig);
	if (st) {
		mgt_args_free(&a);
		mgt_train_plan_free(&plan);
		fail(st);
	}
	/* one rank logs: the last, as Megatron's training_log; rank 0 says what a signal does, as
	 * it reports the interruption */
	int rank = mgt_parallel_world_rank();
	bool logs = rank == mgt_parallel_world_size() - 1, handler = a.exit_signal_handler;
	mgt_graceful_opts g = { .prog = PROG, .saves = a.save != NULL, .quiet = rank != 0 };
	mgt_signals_install_graceful(&g);
	mgt_train_io io = { .log = logs ? stderr : NULL, .prog = PROG, .start_time = start,
			    .plan = plan_spec ? &plan : NULL };
	st = mgt_train_run(&a, &io);
	mgt_args_free(&a);
	mgt_train_plan_free(&plan);
	/* --exit-signal-handler: the --exit-signal is a request to stop, answered as Megatron does
	 * (save, print, exit 0); any other signal is an interruption (130) */
	if (st == MGT_ERR_INTR && handler && mgt_interrupted == exit_sig) {
		if (logs) say_exiting(exit_sig);
		st = MGT_OK;
	}
	if (st) {
		/* under mpirun another rank's exit with the same error makes the launcher signal this
		 * one while it reports: say nothing of that signal (the error is the message) */
		g.quiet = true;
		mgt_signals_install_graceful(&g);
		fail(st);
	}
	mgt_parallel_finalize();
	return 0;
}
