/* cmd/eval_tasks.c: mgt-eval tasks (placeholder until its change lands: refuses to run). */
#include "eval_cmd.h"

int eval_cmd_tasks(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return eval_finish(mgt_err(MGT_ERR_USAGE, "tasks: not built yet"));
}
