/* lib/parallel/nonccl.c: mgt_comm_nccl in a build without NCCL (no -DMGT_HAVE_NCCL): the staged
 * communicator instead (parallel.h), so that callers need no #ifdef.  lib/parallel/nccl.c holds the
 * NCCL build's definitions. */
#ifndef MGT_HAVE_NCCL
#include "parallel/parallel.h"

mgt_comm *mgt_comm_nccl(mgt_comm *host, mgt_backend *be, bool own_stream, mgt_status *st)
{
	return mgt_comm_staged(host, be, st);
}

int mgt_parallel_have_nccl(void)
{
	return 0;
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int mgt_nonccl_unused;
#endif
