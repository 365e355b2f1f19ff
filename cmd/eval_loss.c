/* cmd/eval_loss.c: mgt-eval loss (placeholder until its change lands: refuses to run). */
#include "eval_cmd.h"

int eval_cmd_loss(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return eval_finish(mgt_err(MGT_ERR_USAGE, "loss: not built yet"));
}
