/* cmd/eval_generate.c: mgt-eval generate (placeholder until its change lands: refuses to run). */
#include "eval_cmd.h"

int eval_cmd_generate(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return eval_finish(mgt_err(MGT_ERR_USAGE, "generate: not built yet"));
}
