/* lib/dist/dist_impl.h: helpers shared by the communicator implementations in lib/dist (not
 * public: include only from the .c files of lib/dist).

 */
#ifndef MGT_DIST_IMPL_H
#define MGT_DIST_IMPL_H

#include <stddef.h>

#include "dist/dist.h"

/* One operation done on c: calls + 1, and bytes (dist.h's formula for it) added to bytes_sent
 * when c->size > 1 (a one-process group sends nothing). */
void mgt_comm_count(mgt_comm *c, double bytes);

/* Whether byte ranges [a, a + na) and [b, b + nb) share a byte (never when one is empty). */
int mgt_comm_overlaps(const void *a, size_t na, const void *b, size_t nb);

#endif
