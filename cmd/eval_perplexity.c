/* cmd/eval_perplexity.c: mgt-eval perplexity (placeholder until its change lands: refuses to run). */
#include "eval_cmd.h"

int eval_cmd_perplexity(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return eval_finish(mgt_err(MGT_ERR_USAGE, "perplexity: not built yet"));
}
