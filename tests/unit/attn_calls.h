/* tests/unit/attn_calls.h: the attention checks' calls with their arguments spelled out, each
 * building backend.h's descriptor (lib/backend/attn.h mgt_attn) and calling attn_forward,
 * attn_backward, attn_merge or attn_decode; shared by tests/unit/test_backend.c,
 * tests/unit/test_precision.c, tests/gpu/test_cuda_ops.c and tests/bench/.  Each at_<name> is the
 * descriptor of one kind: at_attn_* MGT_ATTN_SELF (bias NULL: none), at_xattn_* MGT_ATTN_CROSS,
 * at_attn_blk_* MGT_ATTN_BLOCK (the caller's block geometry), at_attn_kv the cached decode. */
#ifndef MGT_TESTS_ATTN_CALLS_H
#define MGT_TESTS_ATTN_CALLS_H

#include "backend/backend.h"

static inline mgt_attn at_self(mgt_elem_type t, mgt_elem_type gt, int s, int b, int ng, int r, int d, float p,
			      uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const float *bias,
			      float *dbias)
{
	return (mgt_attn){ .kind = MGT_ATTN_SELF, .sq = s, .sk = s, .s = s, .ld_lse = s, .b = b, .ng = ng, .r = r,
			   .d = d, .p = p, .key = key, .head0 = head0, .heads_total = heads_total, .t = t, .gt = gt,
			   .key_mask = key_mask, .bias = bias, .dbias = dbias };
}

static inline void at_attn_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b,
			      int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			      const uint8_t *key_mask)
{
	const mgt_attn a = at_self(t, t, s, b, ng, r, d, p, key, head0, heads_total, key_mask, NULL, NULL);
	be->ops->attn_forward(be, &a, out, lse, qkv, NULL);
}

static inline void at_attn_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
			      const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d,
			      float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	const mgt_attn a = at_self(t, gt, s, b, ng, r, d, p, key, head0, heads_total, key_mask, NULL, NULL);
	be->ops->attn_backward(be, &a, dqkv, NULL, dout, qkv, NULL, out, lse);
}

static inline void at_attn_bias_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s,
				   int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
				   const uint8_t *key_mask, const float *bias)
{
	const mgt_attn a = at_self(t, t, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias, NULL);
	be->ops->attn_forward(be, &a, out, lse, qkv, NULL);
}

static inline void at_attn_bias_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
				   const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d,
				   float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
				   const float *bias, float *dbias)
{
	const mgt_attn a = at_self(t, gt, s, b, ng, r, d, p, key, head0, heads_total, key_mask, bias, dbias);
	be->ops->attn_backward(be, &a, dqkv, NULL, dout, qkv, NULL, out, lse);
}

static inline mgt_attn at_cross(mgt_elem_type t, mgt_elem_type gt, int sq, int sk, int b, int ng, int r, int d,
			       float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	return (mgt_attn){ .kind = MGT_ATTN_CROSS, .sq = sq, .sk = sk, .s = sq, .ld_lse = sq, .b = b, .ng = ng,
			   .r = r, .d = d, .p = p, .key = key, .head0 = head0, .heads_total = heads_total, .t = t,
			   .gt = gt, .key_mask = key_mask };
}

static inline void at_xattn_fwd(mgt_backend *be, void *out, float *lse, const void *q, const void *kv, mgt_elem_type t,
			       int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0,
			       int heads_total, const uint8_t *key_mask)
{
	const mgt_attn a = at_cross(t, t, sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	be->ops->attn_forward(be, &a, out, lse, q, kv);
}

static inline void at_xattn_bwd(mgt_backend *be, void *dq, void *dkv, const void *dout, mgt_elem_type gt, const void *q,
			       const void *kv, const void *out, mgt_elem_type t, const float *lse, int sq, int sk, int b,
			       int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			       const uint8_t *key_mask)
{
	const mgt_attn a = at_cross(t, gt, sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	be->ops->attn_backward(be, &a, dq, dkv, dout, q, kv, out, lse);
}

/* g: a block's geometry (kind, types and the rest set here). */
static inline mgt_attn at_block(const mgt_attn *g)
{
	mgt_attn a = *g;
	a.kind = MGT_ATTN_BLOCK, a.t = a.gt = MGT_DT_F32, a.key_mask = NULL, a.bias = NULL, a.dbias = NULL;
	return a;
}

static inline void at_attn_blk_fwd(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *q,
				  const float *kv)
{
	const mgt_attn a = at_block(g);
	be->ops->attn_forward(be, &a, out, lse, q, kv);
}

static inline void at_attn_blk_merge(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *ob,
				    const float *lb)
{
	const mgt_attn a = at_block(g);
	be->ops->attn_merge(be, &a, out, lse, ob, lb);
}

static inline void at_attn_blk_bwd(mgt_backend *be, const mgt_attn *g, float *dq, float *dkv, const float *dout,
				  const float *q, const float *kv, const float *out, const float *lse)
{
	const mgt_attn a = at_block(g);
	be->ops->attn_backward(be, &a, dq, dkv, dout, q, kv, out, lse);
}

static inline void at_attn_kv(mgt_backend *be, float *out, float *kc, float *vc, const float *qkv, const int32_t *seq,
			     const int32_t *pos, int T, int ng, int r, int d, int S, const float *bias, int bs)
{
	const mgt_attn a = { .kind = MGT_ATTN_SELF, .sq = T, .sk = S, .s = bs, .ng = ng, .r = r, .d = d,
			     .heads_total = ng * r, .t = MGT_DT_F32, .gt = MGT_DT_F32, .bias = bias };
	be->ops->attn_decode(be, &a, out, kc, vc, qkv, seq, pos);
}

#endif
