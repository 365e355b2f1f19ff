/* lib/backend/attn_blk.h: the shape of one block of context-parallel attention, shared by the op
 * interface (backend.h attn_blk_*) and the CUDA kernels' C ABI (kernels/kernels.h, which
 * includes nothing else of lib/).  Not a public header of its own: include backend.h. */
#ifndef MGT_ATTN_BLK_H
#define MGT_ATTN_BLK_H

#include <stdint.h>

typedef struct mgt_attn_blk {
	int sq, sk;       /* query positions and key positions in the block */
	int b, ng, r, d;  /* sequences, query groups, query heads per group, head channels */
	int qoff, koff;   /* global positions of the block's query 0 and key 0 */
	int s;            /* the full sequence length (dropout index) */
	int ld_lse;       /* stride of lse between consecutive (sequence, head) rows, >= sq */
	float p;          /* attention dropout probability (0: none) */
	uint64_t key;     /* dropout key (attn_fwd's) */
	int head0, heads_total; /* global index of local head 0; global head count */
} mgt_attn_blk;

#endif
