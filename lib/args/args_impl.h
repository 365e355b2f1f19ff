/* lib/args: what args.c and finalize.c share (internal). */
#ifndef MGT_ARGS_IMPL_H
#define MGT_ARGS_IMPL_H

#include "args.h"

/* Add "--name: why\n" to a->ignored_flags (a Megatron flag accepted without effect).
 * Errors: MGT_ERR_NOMEM. */
mgt_status args_note_ignored(mgt_args *a, const char *name, const char *why);

#endif
