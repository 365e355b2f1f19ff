/* lib/model/arena.c: the chunk's backend memory, counted in the dry pass (mgt_model_measure)
 * before any of it is allocated.  The lowest file of lib/model: chunk.c, t5.c, bert.c, moe.c,
 * cp.c and fp8lin.c allocate through it and it calls none of them. */
#include "model_impl.h"

void *mgt_model_balloc(mgt_model *m, size_t bytes, size_t *acct, mgt_status *st)
{
	static float dry_dummy;
	if (*st) return NULL;
	*acct += m->mem.dry ? bytes : 0;
	if (m->mem.dry) return &dry_dummy;
	void *p = m->be->ops->alloc(m->be, bytes ? bytes : 4);
	if (!p) *st = MGT_ERR_NOMEM;
	*acct += bytes;
	return p;
}
