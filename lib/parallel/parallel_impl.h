/* lib/parallel/parallel_impl.h: helpers shared by the communicator implementations in lib/parallel (not
 * public: include only from the .c files of lib/parallel).

 */
#ifndef MGT_DIST_IMPL_H
#define MGT_DIST_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/parallel.h"

/* One operation done on c: calls + 1, and bytes (parallel.h's formula for it) added to bytes_sent
 * when c->size > 1 (a one-process group sends nothing). */
void mgt_comm_count(mgt_comm *c, double bytes);

/* Whether byte ranges [a, a + na) and [b, b + nb) share a byte (never when one is empty). */
int mgt_comm_overlaps(const void *a, size_t na, const void *b, size_t nb);

/* The arguments of an alltoallv on c (parallel.h's mgt_comm_alltoallv) checked on this rank, for
 * elements of es bytes: every count and displacement >= 0, scount[rank] == rcount[rank], every
 * block's end in bytes within a size_t.  Out: *sent the bytes sent to other ranks (parallel.h's
 * formula; 0 when c->size == 1), *send_end and *recv_end the bytes from src and dst up to the
 * end of the furthest non-empty block (0 when none; for overlap checks).  Errors: MGT_ERR_IO
 * "<group> group: alltoallv: ..." naming the rank and the value. */
mgt_status mgt_comm_alltoallv_check(const mgt_comm *c, const int64_t *rcount, const int64_t *rdispl,
				    const int64_t *scount, const int64_t *sdispl, size_t es, double *sent,
				    size_t *send_end, size_t *recv_end);

#endif
