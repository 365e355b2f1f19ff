/* lib/backend: the CUDA backend's attention ops (backend.h attn_forward, attn_backward, attn_merge,
 * attn_decode on the descriptor mgt_attn, and attn_kv_copy), glue to the kernels of
 * kernels/attn.cu (fp32 CUDA cores), kernels/attn_tc.cu (tensor cores), kernels/attn_cp.cu (the
 * context-parallel merge and kv copies) and kernels/attn_kv.cu (the cached decode).  Built with
 * CUDA=1 only.
 */
#include "backend/cuda_impl.h"

#include <stdlib.h>
#include <string.h>

static mgt_k_stream stream(mgt_backend *be) { return ((cuda_impl *)be->impl)->stream; }

/* Attention on tensor cores (kernels/attn_tc.cu: 16-bit qkv and out, P and dS rounded to bf16/fp16,
 * fp32 softmax and accumulation) under --bf16/--fp16 when the head dimension suits it; the fp32
 * CUDA-core kernel (kernels/attn.cu, the reference) otherwise.  The tensor-core kernel shares
 * the fp32 one's workspace layout.  Its kernels are the mma.sync ones unless the environment has
 * MGT_ATTN_KERNEL=mma-nocp (the same without their cp.async prefetch of K and V) or mma-mb2 (the
 * causal head-dimension-64 kernels at 2 blocks per SM, no register spills): A/B variants,
 * mgt-train(1), ENVIRONMENT; read at each call.  key_mask and seg (device memory) go to the
 * kernels as they are: NULL causal, else the key padding mask of backend.h attn_forward or the
 * packed documents' starts (mgt_attn.seg_start), on the same kernels as the unpacked call. */
static int attn_tc_impl(void)
{
	const char *v = getenv("MGT_ATTN_KERNEL");
	return !v ? MGT_K_ATTN_MMA : !strcmp(v, "mma-nocp") ? MGT_K_ATTN_MMA_NOCP
		  : !strcmp(v, "mma-mb2") ? MGT_K_ATTN_MMA_MB2 : MGT_K_ATTN_MMA;
}

static int attn_tc_dtype(const mgt_backend *be, int d)
{
	if (be->precision == MGT_PREC_FP32 || !mgt_k_attn_tc_supported(d)) return -1;
	return be->precision == MGT_PREC_BF16 ? MGT_K_BF16 : MGT_K_F16;
}

static size_t al256(size_t n) { return (n + 255) / 256 * 256; }

/* The kernel's element type for qkv and out (kt) and, when the caller's type t differs, the
 * scratch bytes of the converted qkv [nq] and out [no] (*conv; 0 when used as they are). */
static mgt_k_dtype attn_types(int tc, mgt_elem_type t, size_t nq, size_t no, size_t *conv)
{
	const mgt_k_dtype kt = tc >= 0 ? (mgt_k_dtype)tc : MGT_K_F32;
	const size_t es = kt == MGT_K_F32 ? 4 : 2;
	*conv = kt == mgt_cuda_kt(t) ? 0 : al256(nq * es) + al256(no * es);
	return kt;
}

/* Self-attention's forward (MGT_ATTN_SELF) on the kernels tc chooses (attn_tc_dtype: a 16-bit type the tensor-core ones, -1 the
 * fp32 ones), with position bias `bias` (mgt_attn.bias; NULL none: then any tc). */
static void attn_fwd_on(mgt_backend *be, const char *op, int tc, void *out, float *lse, const void *qkv,
			mgt_elem_type t, int s, int b, int ng, int r, int d, float p, uint64_t key, int head0,
			int heads_total, const uint8_t *key_mask, const float *bias, const int32_t *seg)
{
	if (s <= 0 || b <= 0) return;
	const size_t T = (size_t)s * b, nq = T * ng * (r + 2) * d, no = T * ng * r * d;
	size_t conv;
	const mgt_k_dtype kt = attn_types(tc, t, nq, no, &conv), it = mgt_cuda_kt(t);
	const void *q = qkv;
	void *o = out;
	if (conv) { /* through scratch in the kernel's type */
		char *ws = mgt_cuda_scratch(be, op, conv);
		if (!ws || !mgt_cuda_ok(be, op, mgt_k_cast(stream(be), ws, kt, qkv, it, nq))) return;
		q = ws;
		o = ws + conv - al256(no * (kt == MGT_K_F32 ? 4 : 2));
	}
	const int rc = tc >= 0 ? mgt_k_attn_tc_fwd(stream(be), tc, o, lse, q, s, b, ng, r, d, p, key, head0,
						  heads_total, key_mask, seg, attn_tc_impl())
		       : bias ? mgt_k_attn_bias_fwd(stream(be), o, lse, q, s, b, ng, r, d, p, key, head0, heads_total,
						    key_mask, bias)
			      : mgt_k_attn_fwd(stream(be), o, lse, q, s, b, ng, r, d, p, key, head0, heads_total,
					       key_mask, seg);
	if (mgt_cuda_ok(be, op, rc) && conv)
		mgt_cuda_ok(be, op, mgt_k_cast(stream(be), out, it, o, kt, no));
}

/* Packed sequences (seg, mgt_attn.seg_start) run where unpacked ones do: the tensor-core kernels
 * under --bf16/--fp16 when d suits them, else the fp32 ones (both skip the key tiles before the
 * documents and mask per element inside the tiles). */
static void self_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b,
			int ng, int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
			const int32_t *seg)
{
	attn_fwd_on(be, "attn_fwd", attn_tc_dtype(be, d), out, lse, qkv, t, s, b, ng, r, d, p, key, head0,
		    heads_total, key_mask, NULL, seg);
}

/* The position bias (T5's relative positions) runs on the fp32 CUDA-core kernels in every
 * precision (kernels/attn.cu's BIAS instances: no tensor cores, slower than attn_fwd under
 * --bf16/--fp16; a 16-bit qkv, out, dout and dqkv go through scratch as fp32, as the CPU widens
 * them).  The backward's scratch holds dS [b, ng*r, s, s] fp32 besides what attn_bwd's holds
 * (kernels.h mgt_k_attn_bias_bwd_ws_bytes). */
static void self_bias_fwd(mgt_backend *be, void *out, float *lse, const void *qkv, mgt_elem_type t, int s, int b,
			    int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			    const uint8_t *key_mask, const float *bias)
{
	attn_fwd_on(be, "attn_bias_fwd", -1, out, lse, qkv, t, s, b, ng, r, d, p, key, head0, heads_total, key_mask,
		    bias, NULL);
}

/* attn_bwd on the kernels tc chooses, with position bias `bias` and its gradient dbias (attn_bias_bwd;
 * NULL none).  The kernels read and write fp32 gradients: a 16-bit dout is widened into scratch, a
 * 16-bit dqkv written there and rounded into place (a step for when a GPU measures kernels that take
 * them).  One scratch request holds [dqkv | dout fp32 | qkv, out converted | the kernels' ws]. */
static void attn_bwd_on(mgt_backend *be, const char *op, int tc, void *dqkv, const void *dout, mgt_elem_type gt,
			const void *qkv, const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng,
			int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
			const float *bias, float *dbias, const int32_t *seg)
{
	if (s <= 0 || b <= 0) return;
	const size_t T = (size_t)s * b, nq = T * ng * (r + 2) * d, no = T * ng * r * d;
	size_t conv;
	const mgt_k_dtype kt = attn_types(tc, t, nq, no, &conv), it = mgt_cuda_kt(t);
	const size_t wsb = tc >= 0 ? mgt_k_attn_tc_bwd_ws_bytes(s, b, ng, r, d)
			   : bias  ? mgt_k_attn_bias_bwd_ws_bytes(s, b, ng, r, d)
				   : mgt_k_attn_bwd_ws_bytes(s, b, ng, r, d);
	const size_t g32 = gt == MGT_DT_F32 ? 0 : al256(nq * 4) + al256(no * 4); /* [dqkv | dout] fp32 */
	char *ws = mgt_cuda_scratch(be, op, g32 + conv + wsb);
	if (!ws) return;
	float *dq = dqkv;
	const float *dO = dout;
	if (g32) {
		dq = (float *)ws, dO = (const float *)(ws + al256(nq * 4));
		if (!mgt_cuda_ok(be, op, mgt_k_cast(stream(be), (float *)dO, MGT_K_F32, dout, mgt_cuda_kt(gt), no)))
			return;
		ws += g32;
	}
	const void *q = qkv, *o = out;
	if (conv) { /* qkv and out converted into scratch, the kernel's workspace after them */
		char *o2 = ws + conv - al256(no * (kt == MGT_K_F32 ? 4 : 2));
		if (!mgt_cuda_ok(be, op, mgt_k_cast(stream(be), ws, kt, qkv, it, nq)) ||
		    !mgt_cuda_ok(be, op, mgt_k_cast(stream(be), o2, kt, out, it, no)))
			return;
		q = ws;
		o = o2;
	}
	const int rc = tc >= 0 ? mgt_k_attn_tc_bwd(stream(be), tc, dq, dO, q, o, lse, s, b, ng, r, d, p, key, head0,
						   heads_total, key_mask, seg, ws + conv, attn_tc_impl())
		       : bias ? mgt_k_attn_bias_bwd(stream(be), dq, dO, q, o, lse, s, b, ng, r, d, p, key, head0,
						    heads_total, key_mask, bias, dbias, ws + conv)
			      : mgt_k_attn_bwd(stream(be), dq, dO, q, o, lse, s, b, ng, r, d, p, key, head0, heads_total,
					       key_mask, seg, ws + conv);
	if (mgt_cuda_ok(be, op, rc) && g32)
		mgt_cuda_ok(be, op, mgt_k_cast(stream(be), dqkv, mgt_cuda_kt(gt), dq, MGT_K_F32, nq));
}

static void self_bias_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
			    const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d,
			    float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
			    const float *bias, float *dbias)
{
	attn_bwd_on(be, "attn_bias_bwd", -1, dqkv, dout, gt, qkv, out, t, lse, s, b, ng, r, d, p, key, head0,
		    heads_total, key_mask, bias, dbias, NULL);
}

static void self_bwd(mgt_backend *be, void *dqkv, const void *dout, mgt_elem_type gt, const void *qkv,
			const void *out, mgt_elem_type t, const float *lse, int s, int b, int ng, int r, int d, float p,
			uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const int32_t *seg)
{
	attn_bwd_on(be, "attn_bwd", attn_tc_dtype(be, d), dqkv, dout, gt, qkv, out, t, lse, s, b, ng, r, d,
		    p, key, head0, heads_total, key_mask, NULL, NULL, seg);
}

/* ---- cross-attention (backend.h MGT_ATTN_CROSS): self-attention's choice of kernels (the
 * tensor-core ones under --bf16/--fp16 when d suits them, else the fp32 ones); q, kv and out of
 * another type than the kernel's go through scratch [q | kv | out] in the kernel's type. ---- */

/* Scratch bytes of q and out [no] and kv [nk] in the kernel's type kt; 0 when t is kt. */
static size_t xattn_conv(mgt_k_dtype kt, mgt_elem_type t, size_t no, size_t nk)
{
	const size_t es = kt == MGT_K_F32 ? 4 : 2;
	return kt == mgt_cuda_kt(t) ? 0 : 2 * al256(no * es) + al256(nk * es);
}

/* q (and out when out != NULL) and kv cast to kt into ws [q | kv | out]; their pointers in *qc,
 * *kc, *oc.  false when a cast failed (recorded). */
static bool xattn_stage(mgt_backend *be, const char *op, char *ws, mgt_k_dtype kt, mgt_elem_type t, const void *q,
			const void *kv, const void *out, size_t no, size_t nk, const void **qc, const void **kc, void **oc)
{
	const size_t es = kt == MGT_K_F32 ? 4 : 2;
	char *k = ws + al256(no * es), *o = k + al256(nk * es);
	const mgt_k_dtype it = mgt_cuda_kt(t);
	if (!mgt_cuda_ok(be, op, mgt_k_cast(stream(be), ws, kt, q, it, no)) ||
	    !mgt_cuda_ok(be, op, mgt_k_cast(stream(be), k, kt, kv, it, nk)) ||
	    (out && !mgt_cuda_ok(be, op, mgt_k_cast(stream(be), o, kt, out, it, no))))
		return false;
	*qc = ws, *kc = k, *oc = o;
	return true;
}

static void xattn_fwd(mgt_backend *be, void *out, float *lse, const void *q, const void *kv, mgt_elem_type t,
			 int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0) return;
	const int tc = attn_tc_dtype(be, d);
	const mgt_k_dtype kt = tc >= 0 ? (mgt_k_dtype)tc : MGT_K_F32;
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d, conv = xattn_conv(kt, t, no, nk);
	const void *qc = q, *kc = kv;
	void *o = out;
	if (conv) {
		char *ws = mgt_cuda_scratch(be, "xattn_fwd", conv);
		if (!ws || !xattn_stage(be, "xattn_fwd", ws, kt, t, q, kv, NULL, no, nk, &qc, &kc, &o)) return;
	}
	const int rc = tc >= 0 ? mgt_k_xattn_tc_fwd(stream(be), tc, o, lse, qc, kc, sq, sk, b, ng, r, d, p, key, head0,
						    heads_total, key_mask, attn_tc_impl())
			       : mgt_k_xattn_fwd(stream(be), o, lse, qc, kc, sq, sk, b, ng, r, d, p, key, head0,
						 heads_total, key_mask);
	if (mgt_cuda_ok(be, "xattn_fwd", rc) && conv)
		mgt_cuda_ok(be, "xattn_fwd", mgt_k_cast(stream(be), out, mgt_cuda_kt(t), o, kt, no));
}

/* The kernels read and write fp32 gradients: 16-bit ones go through scratch [dq | dkv | dout] fp32. */
static void xattn_bwd(mgt_backend *be, void *dq, void *dkv, const void *dout, mgt_elem_type gt, const void *q,
			 const void *kv, const void *out, mgt_elem_type t, const float *lse, int sq, int sk, int b,
			 int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0) return;
	const int tc = attn_tc_dtype(be, d);
	const mgt_k_dtype kt = tc >= 0 ? (mgt_k_dtype)tc : MGT_K_F32, gk = mgt_cuda_kt(gt);
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d, conv = xattn_conv(kt, t, no, nk);
	const size_t g32 = gt == MGT_DT_F32 ? 0 : 2 * al256(no * 4) + al256(nk * 4);
	char *ws = mgt_cuda_scratch(be, "xattn_bwd", g32 + conv + mgt_k_xattn_bwd_ws_bytes(sq, b, ng, r));
	if (!ws) return;
	float *dq32 = dq, *dkv32 = dkv;
	const float *dO = dout;
	if (g32) {
		dq32 = (float *)ws, dkv32 = (float *)(ws + al256(no * 4)), dO = (const float *)(ws + g32 - al256(no * 4));
		if (!mgt_cuda_ok(be, "xattn_bwd", mgt_k_cast(stream(be), (float *)dO, MGT_K_F32, dout, gk, no))) return;
		ws += g32;
	}
	const void *qc = q, *kc = kv, *oc = out;
	void *o2 = NULL;
	if (conv && !xattn_stage(be, "xattn_bwd", ws, kt, t, q, kv, out, no, nk, &qc, &kc, &o2)) return;
	if (conv) oc = o2;
	const int rc = tc >= 0 ? mgt_k_xattn_tc_bwd(stream(be), tc, dq32, dkv32, dO, qc, kc, oc, lse, sq, sk, b, ng, r, d,
						    p, key, head0, heads_total, key_mask, ws + conv, attn_tc_impl())
			       : mgt_k_xattn_bwd(stream(be), dq32, dkv32, dO, qc, kc, oc, lse, sq, sk, b, ng, r, d, p,
						 key, head0, heads_total, key_mask, ws + conv);
	if (mgt_cuda_ok(be, "xattn_bwd", rc) && g32 &&
	    mgt_cuda_ok(be, "xattn_bwd", mgt_k_cast(stream(be), dq, gk, dq32, MGT_K_F32, no)))
		mgt_cuda_ok(be, "xattn_bwd", mgt_k_cast(stream(be), dkv, gk, dkv32, MGT_K_F32, nk));
}

/* Context-parallel attention blocks: the fp32 CUDA-core kernels (kernels/attn.cu on a block
 * geometry, kernels/attn_cp.cu) in every precision. */
static void blk_fwd(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *q,
			    const float *kv)
{
	if (g->sq > 0 && g->sk > 0 && g->b > 0)
		mgt_cuda_ok(be, "attn_blk_fwd", mgt_k_attn_blk_fwd(stream(be), g, out, lse, q, kv));
}

void mgt_cuda_attn_merge(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *ob,
			      const float *lb)
{
	if (g->sq > 0 && g->b > 0)
		mgt_cuda_ok(be, "attn_blk_merge", mgt_k_attn_blk_merge(stream(be), g, out, lse, ob, lb));
}

static void blk_bwd(mgt_backend *be, const mgt_attn *g, float *dq, float *dkv, const float *dout,
			    const float *q, const float *kv, const float *out, const float *lse)
{
	if (g->sq > 0 && g->sk > 0 && g->b > 0 && g->koff <= g->qoff + g->sq - 1)
		WITH_WS("attn_blk_bwd", mgt_k_attn_blk_bwd_ws_bytes(g),
			mgt_k_attn_blk_bwd(stream(be), g, dq, dkv, dout, q, kv, out, lse, ws));
}

void mgt_cuda_attn_kv_copy(mgt_backend *be, float *qkv, float *kv, int T, int ng, int r, int d, bool to_kv)
{
	if (T > 0)
		mgt_cuda_ok(be, "attn_kv_copy", mgt_k_attn_kv_copy(stream(be), qkv, kv, T, ng, r, d, to_kv));
}

static void kv_decode(mgt_backend *be, float *out, float *kc, float *vc, const float *qkv, const int32_t *seq,
		       const int32_t *pos, int T, int ng, int r, int d, int S, const float *bias, int bs)
{
	mgt_cuda_ok(be, "attn_kv", mgt_k_attn_kv(stream(be), out, kc, vc, qkv, seq, pos, T, ng, r, d, S, bias, bs));
}

/* ---- the ops of backend.h on the descriptor (attn.h mgt_attn): the same launchers with the same
 * arguments as the kinds' functions above ---- */

/* Packed sequences (seg_start) other than backend.h's: causal SELF without bias or key mask;
 * recorded as cudaErrorNotSupported. */
static bool packed_refused(mgt_backend *be, const mgt_attn *a, const char *op)
{
	if (!a->seg_start || (a->kind == MGT_ATTN_SELF && !a->bias && !a->key_mask))
		return false;
	mgt_cuda_ok(be, op, (int)cudaErrorNotSupported);
	return true;
}

void mgt_cuda_attn_forward(mgt_backend *be, const mgt_attn *a, void *out, float *lse, const void *q, const void *kv)
{
	if (packed_refused(be, a, "attn_forward (packed sequences)"))
		return;
	switch (a->kind) {
	case MGT_ATTN_SELF:
		if (a->bias)
			self_bias_fwd(be, out, lse, q, a->t, a->s, a->b, a->ng, a->r, a->d, a->p, a->key, a->head0,
				      a->heads_total, a->key_mask, a->bias);
		else
			self_fwd(be, out, lse, q, a->t, a->s, a->b, a->ng, a->r, a->d, a->p, a->key, a->head0,
				 a->heads_total, a->key_mask, a->seg_start);
		break;
	case MGT_ATTN_CROSS:
		xattn_fwd(be, out, lse, q, kv, a->t, a->sq, a->sk, a->b, a->ng, a->r, a->d, a->p, a->key, a->head0,
			  a->heads_total, a->key_mask);
		break;
	case MGT_ATTN_BLOCK:
		blk_fwd(be, a, out, lse, q, kv);
		break;
	}
}

void mgt_cuda_attn_backward(mgt_backend *be, const mgt_attn *a, void *dq, void *dkv, const void *dout,
			    const void *q, const void *kv, const void *out, const float *lse)
{
	if (packed_refused(be, a, "attn_backward (packed sequences)"))
		return;
	switch (a->kind) {
	case MGT_ATTN_SELF:
		if (a->bias)
			self_bias_bwd(be, dq, dout, a->gt, q, out, a->t, lse, a->s, a->b, a->ng, a->r, a->d, a->p, a->key,
				      a->head0, a->heads_total, a->key_mask, a->bias, a->dbias);
		else
			self_bwd(be, dq, dout, a->gt, q, out, a->t, lse, a->s, a->b, a->ng, a->r, a->d, a->p, a->key,
				 a->head0, a->heads_total, a->key_mask, a->seg_start);
		break;
	case MGT_ATTN_CROSS:
		xattn_bwd(be, dq, dkv, dout, a->gt, q, kv, out, a->t, lse, a->sq, a->sk, a->b, a->ng, a->r, a->d, a->p,
			  a->key, a->head0, a->heads_total, a->key_mask);
		break;
	case MGT_ATTN_BLOCK:
		blk_bwd(be, a, dq, dkv, dout, q, kv, out, lse);
		break;
	}
}

void mgt_cuda_attn_decode(mgt_backend *be, const mgt_attn *a, float *out, float *kc, float *vc, const float *qkv,
			  const int32_t *seq, const int32_t *pos)
{
	kv_decode(be, out, kc, vc, qkv, seq, pos, a->sq, a->ng, a->r, a->d, a->sk, a->bias, a->s);
}
