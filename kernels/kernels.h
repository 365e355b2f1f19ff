/* kernels/: CUDA C kernels behind a C ABI (doc/design.md section 2: CUDA C kernels (.cu) behind a C
 * ABI header; host-side launch code stays in lib/).  lib/backend/cuda.c calls these launchers;
 * nothing else does.
 *
 * Every launcher below is the device twin of the CPU backend op of the same name in
 * lib/backend/backend.h, with the same shapes, layouts, dtypes and semantics ("writes" /
 * "accumulates", dropout indexing by Philox element index), which the header there documents and
 * tests/gpu/test_cuda_ops.c checks op by op against the CPU backend.  Differences:
 *  - All pointers are device memory.  Launchers only enqueue work on `stream` (no host
 *    synchronization, no allocation); results that the CPU op returns as a double are written to
 *    a device double instead.
 *  - Reductions are deterministic: fixed grid and block sizes, per-block partial results reduced
 *    in a fixed order, no floating-point atomics.  The same inputs give the same bits on the same
 *    GPU (the bitwise-identical-losses check of make check-gpu relies on it).  Results may differ
 *    from the CPU op by rounding (different summation order); tolerances in the test.
 *  - Some launchers need scratch device memory `ws` of at least the bytes that their *_ws_bytes
 *    function returns for the same shape; the caller owns it.
 *  - Return value: cudaSuccess (0) or the error of the launch (cudaGetLastError after it), as an
 *    int so that this header needs no CUDA header.
 *
 * Philox4x32-10 on the device must stay bit-identical to mgt_philox in lib/util (same rounds,
 * constants and word order); dropout keeps element e of a site keyed `key` when
 * (philox(key, 0, e)[0] >> 8) * 2^-24 >= p and scales kept values by 1/(1-p).
 */
#ifndef MGT_KERNELS_H
#define MGT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *mgt_k_stream; /* = cudaStream_t */

/* Storage dtypes of the cast kernels (and of GEMM operands in lib/backend/cuda.c). */
typedef enum { MGT_K_F32 = 0, MGT_K_BF16 = 1, MGT_K_F16 = 2 } mgt_k_dtype;

/* ---- casts and elementwise ---- */
/* dst[i] = src[i] converted, round to nearest even; fp32 -> fp16 overflows to +-inf (no
 * saturation: the fp16 loss scaler must see the overflow), NaN stays NaN.  n elements. */
int mgt_k_cast(mgt_k_stream s, void *dst, mgt_k_dtype dst_t, const void *src, mgt_k_dtype src_t,
	       size_t n);
int mgt_k_scale(mgt_k_stream s, float *x, size_t n, float alpha);
/* fp8's cast (kernels/fp8.cu; lib/fp8 mgt_fp8_quantize bit for bit): q[i] = the E4M3 (e5m2 0) or
 * E5M2 byte of fl32(x[i] * scale[0]) (q NULL: none written), amax[0] = fmaxf(amax[0], max |x[i]|);
 * x of type xt (fp32, bf16, fp16); scale and amax device pointers; ws of
 * mgt_k_fp8_quantize_ws_bytes() (the blocks' maxima). */
size_t mgt_k_fp8_quantize_ws_bytes(void);
int mgt_k_fp8_quantize(mgt_k_stream s, uint8_t *q, const void *x, mgt_k_dtype xt, size_t n, const float *scale,
		       int e5m2, float *amax, void *ws);
/* Current scaling (kernels/fp8.cu; backend.h fp8_scale, lib/fp8 bit for bit): scale[0] and
 * scale_inv[0] from amax[0] and the format's largest value, all in device memory. */
int mgt_k_fp8_scale(mgt_k_stream s, float *scale, float *scale_inv, const float *amax, float fp8_max);
/* dst [cols, rows] = src [rows, cols] transposed, fp8 bytes (kernels/fp8.cu; backend.h fp8_transpose). */
int mgt_k_fp8_transpose(mgt_k_stream s, uint8_t *dst, const uint8_t *src, int rows, int cols);
/* y += x, n elements of type t (fp32 sum, rounded once when 16-bit). */
int mgt_k_add(mgt_k_stream s, void *y, const void *x, mgt_k_dtype t, size_t n);
/* out[0] = sum x[i]^2 in double, deterministic; NaN/Inf propagate. */
size_t mgt_k_sumsq_ws_bytes(size_t n);
int mgt_k_sumsq(mgt_k_stream s, double *out, const float *x, size_t n, void *ws);
/* AdamW, backend.h's arithmetic in the CPU op's order (adamw_chunk in lib/backend/cpu.c): the
 * caller computes, as cpu_adamw does, step_size = (float)(lr / (1 - b1^step)),
 * bc2_sqrt = (float)sqrt(1 - b2^step) and decay = (float)(1 - lr*wd) (all in double, then fp32). */
int mgt_k_adamw(mgt_k_stream s, float *p, const float *g, float *m, float *v, size_t n, float b1,
		float b2, float eps, float step_size, float bc2_sqrt, float decay);

/* ---- embedding ---- */
int mgt_k_embedding_fwd(mgt_k_stream s, float *y, const int32_t *ids, const float *table,
			int64_t row0, int64_t rows, int T, int h, int accumulate);
/* Deterministic: each (row, column) of dtable receives its tokens' gradients in token order. */
size_t mgt_k_embedding_bwd_ws_bytes(int T);
int mgt_k_embedding_bwd(mgt_k_stream s, float *dtable, const void *dy, mgt_k_dtype dyt, const int32_t *ids,
			int64_t row0, int64_t rows, int T, int h, void *ws);

/* ---- normalization (kind: 0 LayerNorm, 1 RMSNorm; backend.h's mgt_norm_kind) ---- */
/* y of type yt: fp32, or each fp32 result rounded to bf16 / fp16 (nearest even). */
/* x of type xt (fp32, or 16-bit read as its fp32 values), y of type yt (rounded when 16-bit). */
int mgt_k_norm_fwd(mgt_k_stream s, int kind, void *y, mgt_k_dtype yt, float *mean, float *rstd, const void *x,
		   mgt_k_dtype xt, const float *w, const float *b, int T, int h, float eps);
size_t mgt_k_norm_bwd_ws_bytes(int T, int h);
/* dx of x's type xt (accumulated: a 16-bit dx read, the sum rounded), dy of type dyt. */
int mgt_k_norm_bwd(mgt_k_stream s, int kind, void *dx, float *dw, float *db, const void *dy, mgt_k_dtype dyt,
		   const void *x, mgt_k_dtype xt, const float *w, const float *mean, const float *rstd, int T,
		   int h, void *ws);

/* Query (key == 0) or key (key == 1) heads of qkv [T, ng, r + 2, d] (backend.h's head_norm_*):
 * the backward writes dx (may alias dy). */
int mgt_k_head_norm_fwd(mgt_k_stream s, int kind, void *y, mgt_k_dtype yt, float *mean, float *rstd, const float *x,
			const float *w, const float *b, int T, int ng, int r, int d, int key, float eps);
size_t mgt_k_head_norm_bwd_ws_bytes(int T, int ng, int r, int d, int key);
int mgt_k_head_norm_bwd(mgt_k_stream s, int kind, void *dx, float *dw, float *db, const void *dy, mgt_k_dtype gt,
			const float *x, const float *w, const float *mean, const float *rstd, int T, int ng, int r, int d,
			int key, void *ws);

/* ---- RoPE, in place on qkv [T, ng, r + 2, d] of elements of type qt (fp32, or bf16 / fp16:
 * read as fp32, rotated in fp32, rounded to nearest even); inv_freq [rot_dim / 2] device memory ---- */
int mgt_k_rope(mgt_k_stream s, void *qkv, mgt_k_dtype qt, const int32_t *pos, const float *inv_freq, int T, int ng,
	       int r, int d, int rot_dim, int inverse);

/* ---- attention with GQA (flash-style: lse saved, nothing O(s^2) stored), backend.h attn_forward /
 * attn_backward, MGT_ATTN_SELF: causal when key_mask is NULL, else bidirectional over the keys key_mask [seq*b]
 * (device memory, uint8, element i*b + j for position i of sequence j; 1 visible, 0 masked)
 * leaves visible; a query with no visible key gets out 0, lse -inf and 0 gradients.  seg (without
 * key_mask; NULL none): packed sequences, backend.h mgt_attn.seg_start [seq*b] int32 device memory,
 * query i of sequence j sees keys seg[i*b + j] <= k <= i only (block-diagonal causal) ---- */
int mgt_k_attn_fwd(mgt_k_stream s, float *out, float *lse, const float *qkv, int seq, int b,
		   int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
		   const uint8_t *key_mask, const int32_t *seg);
size_t mgt_k_attn_bwd_ws_bytes(int seq, int b, int ng, int r, int d);
int mgt_k_attn_bwd(mgt_k_stream s, float *dqkv, const float *dout, const float *qkv,
		   const float *out, const float *lse, int seq, int b, int ng, int r, int d, float p,
		   uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const int32_t *seg,
		   void *ws);
/* The same with T5's position bias (backend.h attn_forward / attn_backward with mgt_attn.bias; kernels/attn.cuh,
 * BIAS): bias [2 seq - 1, heads_total] fp32 device memory, score (i, i') of local head n gains
 * bias[(i' - i + seq - 1) heads_total + head0 + n] after the scaling; the backward ADDS dS summed
 * by distance into dbias (same layout, only columns head0..head0 + ng*r - 1; deterministic) and
 * needs ws of mgt_k_attn_bias_bwd_ws_bytes: D and the scores' gradient dS [b, ng*r, seq, seq]
 * fp32 (O(b h seq^2)). */
int mgt_k_attn_bias_fwd(mgt_k_stream s, float *out, float *lse, const float *qkv, int seq, int b,
			int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			const uint8_t *key_mask, const float *bias);
size_t mgt_k_attn_bias_bwd_ws_bytes(int seq, int b, int ng, int r, int d);
int mgt_k_attn_bias_bwd(mgt_k_stream s, float *dqkv, const float *dout, const float *qkv,
			const float *out, const float *lse, int seq, int b, int ng, int r, int d, float p,
			uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
			const float *bias, float *dbias, void *ws);

/* ---- attention blocks for context parallelism (backend.h attn_forward / attn_backward of kind MGT_ATTN_BLOCK, attn_merge, attn_kv_copy; the block
 * forward and backward are kernels/attn.cu's kernels on a block geometry, fp32 on CUDA cores;
 * merge and copy in kernels/attn_cp.cu).  mgt_k_attn_blk is backend.h's descriptor mgt_attn (from
 * lib/backend/attn.h, which brings util/util.h's types; the one lib/ header included here); the launchers read it on the host.  The
 * backward accumulates into dq's query slots and into dkv with fixed summation orders (no
 * atomics), and needs ws for D = rowsum(dout * out), laid out as lse. ---- */
#include "backend/attn.h" /* mgt_attn: the descriptor of backend.h, and of its C ABI here */
typedef mgt_attn mgt_k_attn_blk;
int mgt_k_attn_blk_fwd(mgt_k_stream s, const mgt_k_attn_blk *g, float *out, float *lse,
		       const float *q, const float *kv);
int mgt_k_attn_blk_merge(mgt_k_stream s, const mgt_k_attn_blk *g, float *out, float *lse,
			 const float *ob, const float *lb);
size_t mgt_k_attn_blk_bwd_ws_bytes(const mgt_k_attn_blk *g);
int mgt_k_attn_blk_bwd(mgt_k_stream s, const mgt_k_attn_blk *g, float *dq, float *dkv,
		       const float *dout, const float *q, const float *kv, const float *out,
		       const float *lse, void *ws);
/* to_kv != 0: kv [T, ng, 2, d] from the key and value slots of qkv [T, ng, r + 2, d]; else the
 * other way (qkv's query slots untouched).  Exact copies. */
int mgt_k_attn_kv_copy(mgt_k_stream s, float *qkv, float *kv, int T, int ng, int r, int d, int to_kv);

/* Attention of T new tokens against a key/value cache (kernels/attn_kv.cu), the CPU op attn_decode:
 * stores their keys and values in kc, vc [B, ng, S, d], then writes out [T, ng*r, d], with the
 * position bias [2 bs - 1, ng*r] added to the scores when bias is not NULL.  d <= 256 and
 * ng*r <= 65535 (cudaErrorInvalidValue otherwise). */
int mgt_k_attn_kv(mgt_k_stream s, float *out, float *kc, float *vc, const float *qkv, const int32_t *seq,
		  const int32_t *pos, int T, int ng, int r, int d, int S, const float *bias, int bs);

/* ---- attention on tensor cores (kernels/attn_tc.cu forward, kernels/attn_tc_bwd.cu backward),
 * causal, over packed documents (seg) or under a key padding mask: impl
 * MGT_K_ATTN_MMA, mma.sync with the softmax in registers (kernels/attn_mma.cuh, the default), or
 * MGT_K_ATTN_MMA_NOCP, the same without the cp.async prefetch of K and V (an A/B variant), or
 * MGT_K_ATTN_MMA_MB2, the default with the causal head-dimension-64 kernels bounded to 2 blocks
 * per SM instead of 4 (forward) and 3 (backward): up to 255 registers, where the default bounds
 * spill (make kernel-report), at half the warps (an A/B variant; other shapes as the default);
 * kernels/attn_tc.cuh documents the function and staging they share; bf16 / fp16 operands, fp32
 * accumulation and softmax.  Same contracts as mgt_k_attn_* above (key_mask and seg included,
 * and the same workspace), returning cudaErrorInvalidValue for an unsupported dtype, head dimension or
 * impl, with two differences: qkv and out hold elements of dtype (MGT_K_BF16 or MGT_K_F16; out
 * written rounded to nearest even), dout, dqkv and lse stay fp32; and the operands of the matrix
 * products (Q K^T, P V, dO V^T, dS K, dS^T Q, P^T dO) are of dtype, P and dS rounded to it;
 * statistics, exponentials, dropout and accumulation are fp32. ---- */
enum { MGT_K_ATTN_MMA = 0, MGT_K_ATTN_MMA_NOCP = 1, MGT_K_ATTN_MMA_MB2 = 2 };
/* 1 when these kernels handle head dimension d (d % 16 == 0, 16 <= d <= 128), else 0. */
int mgt_k_attn_tc_supported(int d);
int mgt_k_attn_tc_fwd(mgt_k_stream s, int dtype, void *out, float *lse, const void *qkv, int seq,
		      int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
		      const uint8_t *key_mask, const int32_t *seg, int impl);
size_t mgt_k_attn_tc_bwd_ws_bytes(int seq, int b, int ng, int r, int d);
int mgt_k_attn_tc_bwd(mgt_k_stream s, int dtype, float *dqkv, const float *dout, const void *qkv,
		      const void *out, const float *lse, int seq, int b, int ng, int r, int d,
		      float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask,
		      const int32_t *seg, void *ws, int impl);
/* ---- cross-attention (backend.h attn_forward / attn_backward, MGT_ATTN_CROSS): q [sq*b, ng*r, d], kv [sk*b, ng, 2, d],
 * out and dout [sq*b, ng*r, d], lse [b, ng*r, sq], key_mask [sk*b] (device memory) or NULL (every
 * key visible); no causal bound; the backward writes dq and dkv and needs ws of
 * mgt_k_xattn_bwd_ws_bytes (D, laid out as lse).  mgt_k_xattn_*: fp32 on CUDA cores (kernels/attn.cu);
 * mgt_k_xattn_tc_*: the tensor-core kernels (kernels/attn_tc.cu) with q, kv, out of dtype, the
 * contracts of mgt_k_attn_tc_* above.  Counts of 0 do nothing. ---- */
int mgt_k_xattn_fwd(mgt_k_stream s, float *out, float *lse, const float *q, const float *kv, int sq, int sk, int b,
		    int ng, int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask);
size_t mgt_k_xattn_bwd_ws_bytes(int sq, int b, int ng, int r);
int mgt_k_xattn_bwd(mgt_k_stream s, float *dq, float *dkv, const float *dout, const float *q, const float *kv,
		    const float *out, const float *lse, int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key,
		    int head0, int heads_total, const uint8_t *key_mask, void *ws);
int mgt_k_xattn_tc_fwd(mgt_k_stream s, int dtype, void *out, float *lse, const void *q, const void *kv, int sq, int sk,
		       int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
		       const uint8_t *key_mask, int impl);
int mgt_k_xattn_tc_bwd(mgt_k_stream s, int dtype, float *dq, float *dkv, const float *dout, const void *q,
		       const void *kv, const void *out, const float *lse, int sq, int sk, int b, int ng, int r, int d,
		       float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask, void *ws, int impl);
/* The fragment-layout probe of the mma.sync kernels (kernels/attn_mma.cuh), for the op checks
 * (tests/gpu/test_cuda_ops.c): one warp runs the kernels' own helpers on 16 x 16 row-major fp32
 * tiles x and y (device pointers), rounded to dtype (MGT_K_BF16 or MGT_K_F16):
 *   c1 = X Y^T (16 x 16 fp32; frag_a, frag_bt, mma.sync), c2 = round(c1) Y (pack_a, frag_b);
 *   frag [3][32 lanes][4] the registers frag_a, frag_bt and frag_b load from a tile whose element
 *   (i, j) holds the 16-bit integer 16 i + j, to compare with the PTX ISA's m16n8k16 A and B
 *   fragments (kernels/mma.cuh).
 * Returns a cudaError_t (cudaErrorInvalidValue for another dtype); asynchronous on s. */
int mgt_k_mma_probe(mgt_k_stream s, int dtype, const float *x, const float *y, float *c1, float *c2,
		    uint32_t *frag);

/* ---- MLP activation with bias (act: 0 GELU, 1 SwiGLU, 2 GELU tanh; backend.h's mgt_act_kind) ---- */
/* y of type yt as mgt_k_norm_fwd's; x of type xt (fp32, or 16-bit read as fp32 values). */
int mgt_k_bias_act_fwd(mgt_k_stream s, int act, void *y, mgt_k_dtype yt, const void *x, mgt_k_dtype xt,
		       const float *b, int T, int f);
size_t mgt_k_bias_act_bwd_ws_bytes(int act, int T, int f);
int mgt_k_bias_act_bwd(mgt_k_stream s, int act, void *dx, float *db, const void *dy, mgt_k_dtype gt,
		       const void *x, mgt_k_dtype xt, const float *b, int T, int f, void *ws);

/* ---- bias-dropout-add ---- */
/* out and resid of type rt (the residual stream's storage: fp32, or 16-bit, the sum rounded), y of
 * type yt.  The backward: dy of type dyt, dout of type dot; db sums dy's stored values. */
int mgt_k_bda_fwd(mgt_k_stream s, void *out, const void *resid, mgt_k_dtype rt, const void *y, mgt_k_dtype yt,
		  const float *b, int T, int h, float p, uint64_t key, uint64_t e0);
size_t mgt_k_bda_bwd_ws_bytes(int T, int h);
int mgt_k_bda_bwd(mgt_k_stream s, void *dy, mgt_k_dtype dyt, float *db, const void *dout, mgt_k_dtype dot, int T,
		  int h, float p, uint64_t key, uint64_t e0, void *ws);

/* Column sums: db[c] += sum_t dy[t, c] over dy [T, n], deterministic (the linear layers' bias
 * gradient when the GEMM epilogue does not give it). */
size_t mgt_k_colsum_ws_bytes(int T, int n);
int mgt_k_colsum(mgt_k_stream s, float *db, const void *dy, mgt_k_dtype dt, int T, int n, void *ws);

/* ---- Mixture of Experts (kernels/moe.cu): backend.h's rows_gather, rows_combine, rows_scale,
 * rows_dot, one block per row, rows of type t (16-bit: read as fp32, results rounded once).
 * rows_combine adds a token's copies (slot >= 0) into a zero row
 * in j order, in fp32 as the CPU does (the same bits); rows_dot sums in double and rounds once.
 * idx and slot are device int32 arrays. ---- */
int mgt_k_rows_gather(mgt_k_stream s, void *dst, const void *src, mgt_k_dtype t, const int32_t *idx, int N,
		      int h);
int mgt_k_rows_combine(mgt_k_stream s, void *dst, const void *src, mgt_k_dtype t, const int32_t *slot, int T, int k,
		       int h);
int mgt_k_rows_scale(mgt_k_stream s, void *y, const void *x, mgt_k_dtype t, const float *w, int N, int f);
int mgt_k_rows_dot(mgt_k_stream s, float *out, const void *a, const void *b, mgt_k_dtype t, int N, int f);

/* ---- vocab-parallel softmax cross-entropy ---- */
/* The logits (and xent_bwd's dlogits) of type lt: fp32, or bf16 / fp16 read exactly as fp32
 * (dlogits rounded on the store). */
int mgt_k_xent_max(mgt_k_stream s, float *mx, const void *logits, mgt_k_dtype lt, int T, int V);
int mgt_k_xent_stats(mgt_k_stream s, float *sumexp, float *tgt, const void *logits, mgt_k_dtype lt,
		     const int32_t *labels, const float *mx, int64_t v0, int T, int V);
/* loss[t] written; out[0] = sum_t loss[t] * mask[t] in double. */
size_t mgt_k_xent_loss_ws_bytes(int T);
int mgt_k_xent_loss(mgt_k_stream s, double *out, float *loss, const float *mx,
		    const float *sumexp, const float *tgt, const float *mask, int T, void *ws);
int mgt_k_xent_bwd(mgt_k_stream s, void *dlogits, const void *logits, mgt_k_dtype lt, const int32_t *labels,
		   const float *mx, const float *sumexp, const float *mask, float scale, int64_t v0,
		   int T, int V);

/* ---- the Mamba-2 mixer (kernels/mamba.cu: backend.h mamba_conv_*, mamba_gated_norm_*, mamba_step; kernels/ssd.cu:
 * ssd_scan_*), the shapes and strides of the backend ops.  The conv, the gated norm and the scan
 * take their activations and gradients (the void pointers) in t (fp32, bf16, fp16; fp32 math,
 * each 16-bit output rounded once, so it is the fp32 op's on the widened inputs rounded), mamba_step
 * fp32 only.  The backward launchers and the scan's forward need ws of their *_ws_bytes (the same
 * for every t); weight gradients are accumulated (+=) from double partials summed in a fixed
 * order. ---- */
int mgt_k_mamba_conv_fwd(mgt_k_stream s, void *y, const void *x, int ld_x, const float *w, const float *bias,
			 const int32_t *seg_start, int L, int b, int CD, int K, mgt_k_dtype t);
size_t mgt_k_mamba_conv_bwd_ws_bytes(int L, int b, int CD, int K);
int mgt_k_mamba_conv_bwd(mgt_k_stream s, void *dx, float *dw, float *db, const void *dy, const void *x, int ld_x,
			 const float *w, const float *bias, const int32_t *seg_start, int L, int b, int CD, int K,
			 mgt_k_dtype t, void *ws);
int mgt_k_mamba_gated_norm_fwd(mgt_k_stream s, void *out, float *rstd, const void *y, const void *z, int ld_z,
			       const float *w, int T, int di, int g, float eps, mgt_k_dtype t);
size_t mgt_k_mamba_gated_norm_bwd_ws_bytes(int T, int di);
int mgt_k_mamba_gated_norm_bwd(mgt_k_stream s, void *dy, void *dz, float *dw, const void *dout, const void *y,
			       const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g,
			       mgt_k_dtype t, void *ws);
/* backend.h's mgt_ssd, field for field (lib/backend/cuda.c copies it; seg_start a device pointer). */
typedef struct mgt_k_ssd {
	int L, b, nh, p, g, n, ld_x, ld_bc, ld_dt;
	const int32_t *seg_start;
} mgt_k_ssd;
/* ws: the chunks' decays (forward); the backward's chunk partials, carried state gradients,
 * per-head dB/dC rows (2 L b nh n floats) and the Q x Q matrices of at most 128 chunks at a time. */
size_t mgt_k_ssd_scan_fwd_ws_bytes(const mgt_k_ssd *d);
int mgt_k_ssd_scan_fwd(mgt_k_stream s, const mgt_k_ssd *d, void *y, float *states, const void *x, const void *B,
		       const void *C, const void *dt_raw, const float *dt_bias, const float *A_log, const float *D,
		       mgt_k_dtype t, void *ws);
size_t mgt_k_ssd_scan_bwd_ws_bytes(const mgt_k_ssd *d);
int mgt_k_ssd_scan_bwd(mgt_k_stream s, const mgt_k_ssd *d, void *dx, void *dB, void *dC, void *ddt_raw,
		       float *ddt_bias, float *dA_log, float *dD, const void *dy, const float *states, const void *x,
		       const void *B, const void *C, const void *dt_raw, const float *dt_bias, const float *A_log,
		       const float *D, mgt_k_dtype t, void *ws);
/* backend.h mamba_step (kernels/mamba.cu): of d only nh, p, g, n and ld_dt are read; seq, pos
 * [T] device int32; the caches updated in place.  No ws. */
int mgt_k_mamba_step(mgt_k_stream s, const mgt_k_ssd *d, int T, float *y, float *u, float *conv_state,
		     float *ssm_state, const float *xbc, int ld, const float *dt_raw, const int32_t *seq,
		     const int32_t *pos, const float *conv_w, const float *conv_b, int K, const float *dt_bias,
		     const float *A_log, const float *D);

#ifdef __cplusplus
}
#endif
#endif
