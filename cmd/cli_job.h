/* cmd/cli_job.h: the error exit of a program that may run under mpirun (mgt-train, mgt-eval
 * loss).  A header of its own: cmd/cli.c, linked into every program, must not pull lib/parallel in
 * (with CUDA, that loads cuBLASLt, some 200 MB resident, into programs that never use it). */
#ifndef MGT_CLI_JOB_H
#define MGT_CLI_JOB_H

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "parallel/parallel.h"

/* mgt_cli_fail after mgt_parallel_runtime_init: errors every rank reaches together (usage, interrupt) are
 * printed once by rank 0 and every rank exits with the code; any other error is printed by the
 * rank that met it, naming itself, and takes the whole job down (MPI_Abort).  Temporaries (a
 * checkpoint directory being written) are removed first. */
static inline _Noreturn void mgt_cli_fail_job(const char *prog, mgt_status st)
{
	mgt_tmp_remove_all();
	int rank = mgt_parallel_world_rank(), n = mgt_parallel_world_size(), code = mgt_exit_code(st);
	if (n == 1) {
		if (st == MGT_ERR_USAGE) mgt_cli_usage_error(prog, "%s", mgt_err_msg());
		mgt_cli_fail(prog, st);
	}
	if (st == MGT_ERR_USAGE || st == MGT_ERR_INTR) {
		if (rank == 0) fprintf(stderr, "%s: error: %s\n", prog, mgt_err_msg());
		mgt_parallel_finalize();
		exit(code);
	}
	fprintf(stderr, "%s: rank %d of %d: error: %s\n", prog, rank, n, mgt_err_msg());
	fflush(stderr);
	mgt_parallel_abort(code);
	exit(code);
}

#endif
