/* lib/backend/attn.h: mgt_attn, the descriptor of one attention call (backend.h attn_forward,
 * attn_backward, attn_decode, attn_merge), shared by the op interface and the CUDA kernels' C ABI
 * (kernels/kernels.h, which includes nothing else of lib/ but this header and util/util.h's types:
 * the block kernels read the geometry fields through it).  Not a public header of its own:
 * include backend.h.
 *
 * The math is Megatron-Core's core attention (megatron/core/transformer/dot_product_attention.py:
 * softmax(scale * Q K^T + bias, masked) V with scale = 1/sqrt(d) and dropout on the
 * probabilities), computed flash-attention style (Dao et al. 2022: lse saved, nothing O(s^2)
 * stored); backend.h gives each op's contract.
 */
#ifndef MGT_ATTN_H
#define MGT_ATTN_H

#include <stdint.h>

#include "util/util.h" /* mgt_elem_type */

/* Where the queries, keys and values come from (backend.h "attention"):
 *   MGT_ATTN_SELF   q is the fused QKV activation [s*b, ng, r + 2, d] (Megatron-Core linear_qkv's
 *                   output, query-group interleaved), kv unused (NULL); sq = sk = s.
 *   MGT_ATTN_CROSS  q [sq*b, ng*r, d] (linear_q of the decoder), kv [sk*b, ng, 2, d] (linear_kv
 *                   of the encoder's output: per group its key head then its value head); no
 *                   causal limit (Megatron-Core's CrossAttention).
 *   MGT_ATTN_BLOCK  one block of context-parallel attention: q the fused QKV activation at the
 *                   block's first row (only its r query slots read), kv [sk*b, ng, 2, d]; causal
 *                   by global positions qoff + i, koff + i' (TransformerEngine's
 *                   AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention.py). */
typedef enum { MGT_ATTN_SELF, MGT_ATTN_CROSS, MGT_ATTN_BLOCK } mgt_attn_kind;

typedef struct mgt_attn {
	/* ---- the geometry (the fields the kernels' block launchers read; this order) ---- */
	int sq, sk;       /* query positions and key positions (SELF: both s; decode: sq the new
			   * tokens T, sk the caches' positions S) */
	int b, ng, r, d;  /* sequences, query groups, query heads per group, head channels */
	int qoff, koff;   /* BLOCK: global positions of the block's query 0 and key 0 (else 0) */
	int s;            /* the full sequence length: dropout index (SELF, BLOCK) and the position
			   * bias's layout [2 s - 1, heads_total] (SELF; decode: the bias's positions bs) */
	int ld_lse;       /* stride of lse between consecutive (sequence, head) rows, >= sq (BLOCK and
			   * merge; SELF and CROSS use sq) */
	float p;          /* attention dropout probability (0: none; decode: 0) */
	uint64_t key;     /* dropout key (Philox, mgt_attn_drop_word) */
	int head0, heads_total; /* global index of local head 0 (tensor parallelism); global head count */
	/* ---- the rest of the call ---- */
	mgt_attn_kind kind;
	mgt_elem_type t;  /* q, kv and out elements: fp32, or bf16/fp16 storage (SELF and CROSS;
			   * BLOCK and decode: fp32) */
	mgt_elem_type gt; /* dout, dq and dkv elements in attn_backward (SELF and CROSS; BLOCK: fp32) */
	const uint8_t *key_mask; /* key padding mask [sk*b] uint8 in backend memory, element i'*b + j:
				  * 1 visible, 0 masked (SELF, CROSS); NULL: SELF causal, CROSS every
				  * key visible.  BLOCK and decode: NULL (causal) */
	const int32_t *seg_start; /* packed sequences (SELF without key_mask): [s*b] int32 in backend
				   * memory, element i*b + j = the first position of the document that
				   * position i of sequence j belongs to; query i sees keys
				   * seg_start[i*b + j] <= i' <= i (Megatron's THD cu_seqlens and
				   * --reset-attention-mask).  Starts never decrease along a sequence
				   * and seg_start[i*b + j] <= i.  NULL: plain causal */
	const float *bias;       /* position bias added to the scaled scores, [2 s - 1, heads_total]
				  * fp32 in backend memory (T5's relative position bias: SELF and
				  * decode; NULL none) */
	float *dbias;            /* attn_backward with bias: ACCUMULATES the scores' gradient, bias's
				  * layout (only this rank's heads' columns) */
} mgt_attn;

#endif
