/* mgt-eval: a trained or converted model's loss, perplexity, generations and task scores.
 * See mgt-eval(1).  The commands are cmd/eval_*.c; this file dispatches to them.
 *
 *   mgt-eval COMMAND (--load DIR | --hf DIR) [OPTION]...
 */
#include <stdio.h>
#include <string.h>

#include "eval_cmd.h"

static void usage(void)
{
	printf("Usage: mgt-eval COMMAND (--load DIR | --hf DIR) [OPTION]...\n"
	       "Evaluate a model: an mgt checkpoint saved under any layout, or a Hugging Face directory.\n\n"
	       "Commands:\n"
	       "  loss        Megatron's validation: lm loss and PPL on a dataset split (the samples\n"
	       "              mgt-train evaluates), one process or under mpirun with TP/PP\n"
	       "  perplexity  per-document and token-weighted perplexity of a JSONL file of texts\n"
	       "  generate    text from prompts: greedy or sampled, KV cache, batched, streamed\n"
	       "  tasks       zero-shot tasks scored as lm-evaluation-harness scores them (mgt-tasks(5))\n"
	       "  logits      the logits of one input and its greedy continuation (no KV cache)\n\n"
	       "Without a command, the options are those of logits.\n"
	       "Run 'mgt-eval COMMAND --help' for a command's options.\n\n%s"
	       "See mgt-eval(1), mgt-tasks(5), mgt-ckpt(5).\n", eval_exit_help);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int, char **);
	} cmds[] = {
		{"loss", eval_cmd_loss}, {"perplexity", eval_cmd_perplexity}, {"generate", eval_cmd_generate},
		{"tasks", eval_cmd_tasks}, {"logits", eval_cmd_logits},
	};
	mgt_signals_install();
	if (argc < 2) mgt_cli_usage_error(EVAL_PROG, "a command is required (loss, perplexity, generate, tasks, logits)");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return 0;
	}
	if (argv[1][0] == '-') return eval_cmd_logits(argc, argv); /* the options of logits */
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
		if (!strcmp(argv[1], cmds[i].name)) return cmds[i].run(argc - 1, argv + 1);
	mgt_cli_usage_error(EVAL_PROG, "unknown command '%s' (loss, perplexity, generate, tasks, logits)", argv[1]);
}
