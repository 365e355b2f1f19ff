/* lib/backend: the op interface every backend implements, and the CPU reference backend.
 *
 * All training math goes through this table of ops (doc/design.md section 3, "one backend interface,
 * two implementations").  The model code never calls BLAS or CUDA directly.  A backend is a struct
 * of function pointers behind an opaque handle, in the manner of ggml's backends; the ops are one
 * list (MGT_BACKEND_OPS, an X-macro) from which the struct, each backend's declarations and its
 * table are made, and each op takes its buffers' element types as arguments (one op for fp32,
 * bf16 and fp16 storage, not one per type).
 *
 * Conventions for every op below:
 *  - Pointers are backend memory (host memory for the CPU backend, device memory for CUDA),
 *    allocated with be->ops->alloc.  Row-major, contiguous.
 *  - Activations are sequence-first as in Megatron-Core: a micro-batch of s positions and b
 *    sequences is T = s*b tokens, token t = i*b + j for position i of sequence j.  "[T, h]" means
 *    T rows of h floats.
 *  - dtype is fp32 unless stated; ids are int32.
 *  - "accumulates" means the op adds into the output (gradient accumulation across micro-batches
 *    and the residual stream); "writes" means it overwrites.
 *  - Ops do not fail: shapes are checked by the model before any op runs.  Only alloc, reserve,
 *    commit, upload and download report errors (mgt_status, message via mgt_err).
 *  - Results are deterministic: the same inputs and thread count give the same bits (no atomics
 *    in reductions), which bitwise-exact resume relies on.
 *  - Dropout draws from Philox (mgt_philox in lib/util): element e of a dropout site keyed `key`
 *    is kept when mgt_u32_to_unit(philox(key, 0, e)[0]) >= p (attention's probabilities: the word
 *    mgt_attn_drop_word picks), and kept values are scaled by 1/(1-p).  e is the element's index in the *global* (unsharded) tensor, so tensor or sequence
 *    parallelism draws the same mask; ops take the offset of their local piece where it matters.
 *    p == 0 means no dropout and draws nothing.
 *
 * Sources of the math: Megatron-Core megatron/core/transformer/{attention,mlp,transformer_layer}.py,
 * megatron/core/fusions/, megatron/core/tensor_parallel/cross_entropy.py; LayerNorm (Ba et al.
 * 2016), RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021, non-interleaved "rotate_half"
 * form), SwiGLU (Shazeer 2020), GELU erf form and its tanh approximation (Hendrycks & Gimpel 2016), AdamW (Loshchilov &
 * Hutter 2019, in torch.optim.AdamW's arithmetic order).
 */
#ifndef MGT_BACKEND_H
#define MGT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef struct mgt_backend mgt_backend;

typedef enum { MGT_NORM_LAYERNORM, MGT_NORM_RMSNORM } mgt_norm_kind;
/* MGT_ACT_GELU: erf form; MGT_ACT_GELU_TANH: the tanh approximation (Megatron --openai-gelu,
 * megatron/legacy/model/utils.py openai_gelu; HF gelu_new); MGT_ACT_SWIGLU: silu(gate) * up;
 * MGT_ACT_SQUARED_RELU: relu(z)^2 (Megatron --squared-relu, megatron/core/activations.py
 * squared_relu; Nemotron-H's relu2), gradient 2 relu(z). */
typedef enum { MGT_ACT_GELU, MGT_ACT_SWIGLU, MGT_ACT_GELU_TANH, MGT_ACT_SQUARED_RELU } mgt_act_kind;
/* Precision of the linear layers' GEMM operands (--bf16, --fp16; fp32 is the reference).  With
 * MGT_PREC_BF16 or MGT_PREC_FP16, linear_fwd and linear_bwd round their two operands (x and w,
 * dy and w, dy and x) to that type, round to nearest even (fp16: overflow to +-inf, as a real
 * fp16 tensor would), multiply exactly and accumulate in fp32 into fp32 outputs: what a tensor
 * core GEMM with fp32 accumulation computes, up to summation order (Megatron's mixed precision:
 * low-precision operands, fp32 main parameters, fp32 gradient accumulation).  The CPU backend
 * emulates it bit for bit per product, so it is the reference for the CUDA backend's GEMMs in
 * every mode.  The CUDA backend also runs attention on tensor cores in these modes (Q, K, V, the
 * probabilities and dS rounded to the type, fp32 softmax and accumulation: kernels/attn_tc.cu);
 * the CPU's attention stays fp32.
 *
 * Storage: an activation whose only readers are GEMMs may be kept in the 16-bit type (the model
 * does so for the norms' outputs and the MLP activation): norm_fwd and bias_act_fwd write it
 * rounded, the linear ops read it as it is; a GEMM rounding its fp32 operand would have seen the
 * same bits.  So is fc1's output, which the GEMM writes rounded and bias_act_fwd / bias_act_bwd
 * read as fp32 values (Megatron's bf16 fc1: GELU / SwiGLU of the rounded value).  The output
 * layer's logits are 16-bit too (linear_fwd writes them rounded, the
 * cross-entropy ops read them and xent_bwd writes their gradient in place in that type), as
 * Megatron's bf16 output layer does: that changes the loss by the logits' rounding.  So are
 * the fused QKV activation and the attention output (rope and attn_forward / attn_backward take them with
 * their type): linear_fwd writes qkv rounded, rope rounds its rotated values, attention reads
 * them and writes its output rounded (Megatron's bf16 core attention).  So are the row-parallel
 * outputs (linear_proj, linear_fc2: linear_fwd writes them rounded, the TP reduction sums them
 * in 16 bits, bda_fwd reads them), and the activation gradients of the [T, h] stream: the
 * residual's gradient (norm_bwd accumulates into it, of the residual's type; bda_bwd reads it),
 * the gradient of each row-parallel output (bda_bwd writes it rounded) and of each norm output
 * (linear_bwd writes dx rounded; norm_bwd and embedding_bwd read it): what Megatron's bf16
 * autograd stores and its TP and PP communication moves.  So are the gradients inside attention
 * and the MLP (of the attention output, the fused QKV, the MLP activation and fc1's output:
 * attn_backward and bias_act_bwd take them with their type).  So are the MoE layers' tokens,
 * expert activations and their gradients (the row ops and grouped linears take their type; the
 * expert-parallel all-to-all moves them in 16 bits), as Megatron's bf16 experts; the router's
 * logits, the probabilities and their gradients stay fp32.  So are the gradients through
 * --qk-layernorm's head norms (head_norm_bwd takes their type; linear_qkv's output, which it
 * reads, stays fp32).  Context parallelism's blocks compute in fp32 in this version.
 *
 * Weights may come already in the 16-bit type (the model's 16-bit copy of its parameters, which
 * it refreshes with the cast op after every change of its fp32 main parameters, as Megatron's
 * Float16OptimizerWithFloat16Params copies main parameters to the model's bf16/fp16 ones after
 * each step): the linear ops take w with its type wt, MGT_DT_F32 (rounded by the op, as above) or
 * mgt_precision_dtype(precision) (used as it is: no cast).  Both give the same bits. */
typedef enum { MGT_PREC_FP32, MGT_PREC_BF16, MGT_PREC_FP16 } mgt_precision;

/* The GEMM operand type of a precision: MGT_DT_BF16, MGT_DT_F16, or MGT_DT_F32 for MGT_PREC_FP32. */
static inline mgt_elem_type mgt_precision_dtype(mgt_precision p)
{
	return p == MGT_PREC_BF16 ? MGT_DT_BF16 : p == MGT_PREC_FP16 ? MGT_DT_F16 : MGT_DT_F32;
}

/* The descriptor of an attention call (attn_forward, attn_backward, attn_decode, attn_merge
 * below): mgt_attn. */
#include "backend/attn.h"

/* The geometry of a Mamba-2 selective state-space scan (ssd_scan_fwd, ssd_scan_bwd below): T = L*b
 * rows, sequence-first (row i*b + j: position i of sequence j); nh heads of p channels, g groups of
 * n state channels, head h reading group h / (nh/g) (nh % g == 0).  x, B, C and dt_raw are column
 * blocks of wider activations (the conv's output [T, CD], in_proj's output), so each comes with its
 * row stride in elements: x [T, ld_x] (columns h*p .. h*p+p-1 of row t), B and C [T, ld_bc]
 * (columns gi*n .. gi*n+n-1 for group gi), dt_raw [T, ld_dt] (column h).  seg_start [T] int32
 * (NULL: one document per sequence): as mgt_attn.seg_start, the first position of the document
 * that row i*b + j belongs to; the state restarts from zero at each document start (Megatron's
 * seq_idx, packed_seq_params.py; mamba_ssm's chunk kernels reset the carried state when seq_idx
 * changes). */
typedef struct mgt_ssd {
	int L, b;              /* positions, sequences */
	int nh, p, g, n;       /* heads, head dim, groups, state dim */
	int ld_x, ld_bc, ld_dt; /* row strides of x, of B and C, of dt_raw (elements) */
	const int32_t *seg_start;
} mgt_ssd;

/* The chunk length of ssd_scan_fwd's chunked algorithm (Megatron's MambaMixer chunk_size). */
enum { MGT_SSD_CHUNK = 128 };

/* Floats of ssd_scan_fwd's saved states (its `states` argument, read by ssd_scan_bwd): the state
 * [p, n] of every head of every sequence at the start of every chunk,
 * b * ceil(L / MGT_SSD_CHUNK) * nh * p * n. */
static inline size_t mgt_ssd_states_floats(const mgt_ssd *s)
{
	const size_t nc = ((size_t)s->L + MGT_SSD_CHUNK - 1) / MGT_SSD_CHUNK;
	return (size_t)s->b * nc * (size_t)s->nh * (size_t)s->p * (size_t)s->n;
}

/* The op table as data: X(return type, name, (parameters)) for each op, in table order, each
 * entry after the comment that gives its contract.  mgt_backend_ops has one function pointer per
 * entry; each backend implements op n as mgt_<backend>_n (cpu_impl.h and cuda_impl.h declare
 * them from this list and build their tables from it).  The Mamba-2 mixer's ops are listed apart
 * (MGT_BACKEND_MAMBA_OPS: mamba_step fp32 only, mgt_backend_supports refuses it other types), and
 * MGT_BACKEND_OPS_BY(X, XC) applies XC instead of X to the ops only the CPU backend has
 * (MGT_BACKEND_CPU_ONLY_OPS, empty at present): the CUDA backend leaves them NULL, so
 * mgt_backend_supports refuses them there. */
#define MGT_BACKEND_OPS(X) MGT_BACKEND_OPS_BY(X, X)
#define MGT_BACKEND_OPS_BY(X, XC) \
	/* ---- memory ---- */ \
	/* Zero-filled allocation of bytes; NULL and MGT_ERR_NOMEM on failure.  free(NULL) is a no-op. */ \
	X(void *, alloc, (mgt_backend *be, size_t bytes)) \
	X(void, free, (mgt_backend *be, void *p)) \
	/* Host <-> backend copies and fills.  Errors: MGT_ERR_IO (device failure). */ \
	X(mgt_status, upload, (mgt_backend *be, void *dst, const void *host_src, size_t bytes)) \
	X(mgt_status, download, (mgt_backend *be, void *host_dst, const void *src, size_t bytes)) \
	X(void, zero, (mgt_backend *be, void *p, size_t bytes)) \
	/* Memory that FSDP shards (lib/train/fsdp.c), for buffers of which a rank holds only some \
	 * ranges at a time.  reserve(bytes): address space for bytes (NULL and MGT_ERR_NOMEM when it \
	 * cannot be had; MGT_ERR_IO for another device failure), owned by the caller until unreserve; \
	 * it reads as zeros and holds memory only where committed.  commit(p, bytes): makes \
	 * [p, p + bytes) of a reservation writable and readable, holding memory: the CPU's pages are \
	 * backed when first written, so there it does nothing; CUDA maps device memory (cuMemCreate, \
	 * cuMemMap) for every granule (cuMemGetAllocationGranularity's, 2 MiB on current GPUs) of the \
	 * range not mapped yet and zero-fills it on the stream, so a range reads as zeros until written \
	 * whatever was discarded before.  Every write into a reservation and every read of it must lie \
	 * in committed ranges (on a GPU an uncommitted granule is not mapped: an illegal address; the \
	 * simulator, tests/sim, reports it).  On alloc's memory commit does nothing.  Errors: \
	 * MGT_ERR_NOMEM (cuMemCreate had no device memory), MGT_ERR_IO (another driver failure); both \
	 * also recorded as the backend's failure.  discard(p, bytes): [p, p + bytes) of reserve's or \
	 * alloc's memory reads as zeros afterwards and the granules (host pages) wholly inside are given \
	 * back (host: madvise MADV_DONTNEED; CUDA: unmapped once the work queued on the backend's \
	 * stream before the discard has run, at the next commit that maps memory, sync or unreserve: \
	 * work of another stream that uses the range, a collective's, must have been made to wait for \
	 * first; the partial granules at the ends are zeroed; a reservation's granules given back must \
	 * be committed again before use). \
	 * unreserve(p, bytes): frees reserve's memory, committed or not (NULL: no-op); bytes as given \
	 * to reserve.  Memory accounting (bytes_in_use): CUDA counts committed granules. */ \
	X(void *, reserve, (mgt_backend *be, size_t bytes)) \
	X(mgt_status, commit, (mgt_backend *be, void *p, size_t bytes)) \
	X(void, unreserve, (mgt_backend *be, void *p, size_t bytes)) \
	X(void, discard, (mgt_backend *be, void *p, size_t bytes)) \
	/* Wait for queued work (no-op on CPU). */ \
	X(void, sync, (mgt_backend *be)) \
	/* Free the backend's own state and be itself (mgt_backend_destroy calls it). */ \
	X(void, destroy, (mgt_backend *be)) \
	\
	/* ---- linear layers (GEMM) ---- */ \
	/* y[T, out] = x[T, in] . w[out, in]^T (+ b[out] when b != NULL).  Writes y, of type yt: fp32, \
	 * or bf16/fp16 (the fp32 result, bias included, rounded to nearest even as the cast op \
	 * rounds).  x's elements are of type xt, w's of type wt: each MGT_DT_F32 or \
	 * mgt_precision_dtype(be->precision) (see mgt_precision; under MGT_PREC_FP32 a 16-bit operand \
	 * is widened exactly). */ \
	X(void, linear_fwd, (mgt_backend *be, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt, \
		const void *w, mgt_elem_type wt, const float *b, int T, int in, int out)) \
	/* Backward of linear_fwd given dy[T, out]: \
	 *   dx[T, in]   = dy . w          writes (skipped when dx == NULL) \
	 *   dw[out, in] += dy^T . x       accumulates (fp32) \
	 *   db[out]     += sum_t dy[t]    accumulates (skipped when db == NULL) \
	 * dy of type dyt, x of type xt and w of type wt, each as linear_fwd's x (db sums dy's values \
	 * in fp32 whatever its type); dx of type dxt as linear_fwd's y (the fp32 sum rounded once). */ \
	X(void, linear_bwd, (mgt_backend *be, void *dx, mgt_elem_type dxt, float *dw, float *db, \
		const void *dy, mgt_elem_type dyt, const void *x, mgt_elem_type xt, const void *w, \
		mgt_elem_type wt, int T, int in, int out)) \
	\
	/* ---- embedding ---- */ \
	/* Row lookup in a table holding rows [row0, row0+rows) of a larger (possibly vocab-parallel) \
	 * table: y[t] (=|+=) table[ids[t] - row0] when row0 <= ids[t] < row0+rows, else 0 (=) or \
	 * nothing (+=).  accumulate == false writes y, true adds into y.  table [rows, h], y [T, h]. */ \
	X(void, embedding_fwd, (mgt_backend *be, float *y, const int32_t *ids, const float *table, \
		int64_t row0, int64_t rows, int T, int h, bool accumulate)) \
	/* dtable[ids[t] - row0] += dy[t] for ids in range.  Accumulates in fp32; deterministic.  dy's \
	 * elements are of type dyt (fp32, or bf16/fp16 read as their fp32 values). */ \
	X(void, embedding_bwd, (mgt_backend *be, float *dtable, const void *dy, mgt_elem_type dyt, \
		const int32_t *ids, int64_t row0, int64_t rows, int T, int h)) \
	\
	/* ---- normalization ---- */ \
	/* LayerNorm: y = (x - mean) * rstd * w + b;  RMSNorm: y = x * rstd * w with \
	 * rstd = 1/sqrt(mean(x^2) + eps) (mean is written as 0 for RMSNorm).  b may be NULL (adds \
	 * nothing; RMSNorm always has none).  x, y [T, h]; w, b [h]; mean, rstd [T] saved for the \
	 * backward.  Statistics accumulate in double.  Writes y, mean, rstd.  y's elements are of type \
	 * yt: fp32, or bf16/fp16 (each fp32 result rounded to nearest even, as the cast op rounds); \
	 * x's of type xt: fp32, or bf16/fp16 read as their fp32 values (a 16-bit residual stream). */ \
	X(void, norm_fwd, (mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, float *mean, \
		float *rstd, const void *x, mgt_elem_type xt, const float *w, const float *b, int T, int h, \
		float eps)) \
	/* Backward: dx[T, h] += d/dx (accumulates, so the residual stream's gradient passes through), \
	 * dw[h] += ..., db[h] += ... (db skipped when NULL); x of type xt as the forward's, dx of the \
	 * same type (the residual stream and its gradient: a 16-bit dx is read as its fp32 values and \
	 * the fp32 sum rounded once to nearest even), dy of type dyt (fp32, or 16-bit read as fp32). */ \
	X(void, norm_bwd, (mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, \
		const void *dy, mgt_elem_type dyt, const void *x, mgt_elem_type xt, const float *w, \
		const float *mean, const float *rstd, int T, int h)) \
	\
	/* Norm of attention heads inside the fused QKV activation (Megatron-Core's q_layernorm / \
	 * k_layernorm, megatron/core/transformer/attention.py): x, y [T, ng, r + 2, d] laid out as \
	 * rope's qkv below.  key == false normalizes the r query heads of every group (n = T*ng*r \
	 * rows of d, in memory order), key == true the key head of every group (n = T*ng rows); each \
	 * row as norm_fwd does with w, b [d] (b may be NULL).  Writes those rows of y (no other \
	 * element of y) and mean, rstd [n].  y may alias x when both are fp32.  y's elements are of \
	 * type yt (fp32, or bf16/fp16 rounded as norm_fwd's y); x is fp32. */ \
	X(void, head_norm_fwd, (mgt_backend *be, mgt_norm_kind kind, void *y, mgt_elem_type yt, \
		float *mean, float *rstd, const float *x, const float *w, const float *b, int T, int ng, \
		int r, int d, bool key, float eps)) \
	/* Backward of head_norm_fwd: the selected rows of dx [T, ng, r + 2, d] are WRITTEN (not \
	 * accumulated; other elements untouched) from the same rows of dy; dx may alias dy (in \
	 * place).  dx and dy of type gt (fp32, or bf16/fp16: dy read as fp32, each dx the fp32 \
	 * result rounded once); x fp32 (linear_qkv's output).  dw[d] += ..., db[d] += ... (db \
	 * skipped when NULL), as norm_bwd. */ \
	X(void, head_norm_bwd, (mgt_backend *be, mgt_norm_kind kind, void *dx, float *dw, float *db, \
		const void *dy, mgt_elem_type gt, const float *x, const float *w, const float *mean, \
		const float *rstd, int T, int ng, int r, int d, bool key)) \
	\
	/* ---- rotary position embedding ---- */ \
	/* In place on the fused QKV activation qkv[T, ng, r + 2, d] (query-group interleaved as in \
	 * Megatron-Core linear_qkv: per group r query heads, then one key head, then one value head; \
	 * r = heads / query groups, d = kv channels).  Rotates the query and key heads, not values, \
	 * over their first rot_dim (even) channels, non-interleaved ("rotate_half"): \
	 *   theta = pos[t] * inv_freq[k] (fp32), \
	 *   (x1, x2) = (x[k], x[k + rot_dim/2]) -> (x1 cos - x2 sin, x2 cos + x1 sin)  for k < rot_dim/2. \
	 * inv_freq [rot_dim/2] fp32 backend memory: the model's frequencies (mgt_model_rope_inv_freq \
	 * in lib/model: 1 / base^(2k / rot_dim), with Llama 3.1 scaling when asked).  inverse == true \
	 * rotates by -theta (the backward: apply to dqkv).  pos [T] int32.  qkv's elements are of type \
	 * qt: fp32, or bf16/fp16 (read as fp32, rotated in fp32, each result rounded to nearest even \
	 * as the cast op rounds). */ \
	X(void, rope, (mgt_backend *be, void *qkv, mgt_elem_type qt, const int32_t *pos, \
		const float *inv_freq, int T, int ng, int r, int d, int rot_dim, bool inverse)) \
	\
	/* ---- attention: four ops behind one descriptor, mgt_attn (attn.h) ---- \
	 * Megatron-Core's core attention (megatron/core/transformer/dot_product_attention.py): for \
	 * query head n (0 <= n < ng*r) of group g = n / r (GQA: key/value head g) and sequence j, \
	 *   out[i, n, :] = sum_{i' in V(i, j)} softmax_i'(scale * q_i.k_i' + bias) * v_i',  scale = 1/sqrt(d) \
	 * over the keys V(i, j) that query i sees; rows are sequence-first (row i*b + j: position i of \
	 * sequence j).  a->kind gives the layouts (attn.h mgt_attn_kind) and V: \
	 *   SELF, key_mask NULL: causal, V = {i' <= i} (Megatron's AttnMaskType.causal, GPT); with \
	 *     a->seg_start (packed sequences) V = {seg_start[i*b + j] <= i' <= i}: block-diagonal \
	 *     causal over the row's documents (Megatron's THD cu_seqlens, TransformerEngine's \
	 *     padding_causal; --reset-attention-mask, --sft).  The CUDA backend runs it on its fp32 \
	 *     CUDA-core kernels in every precision (as the position bias). \
	 *   SELF or CROSS, key_mask set: key padding, V = {i' : key_mask[i'*b + j] != 0}, no causal \
	 *     limit (Megatron-Core TEDotProductAttention with AttnMaskType.padding, BERT's \
	 *     bidirectional attention and T5's encoder; the mask [b, 1, 1, s] masks keys only; \
	 *     Megatron's padding mask is the opposite: True = masked).  Padded queries are computed \
	 *     like the others. \
	 *   CROSS, key_mask NULL: every key (Megatron-Core's CrossAttention, T5's decoder over the \
	 *     encoder's output; ng = heads, r = 1 there, r > 1 is GQA). \
	 *   BLOCK: the queries of sq consecutive positions against the keys of sk, placed by their \
	 *     global positions in the sequence of length s: query i at qoff + i, key i' at koff + i', \
	 *     visible iff koff + i' <= qoff + i (the causal diagonal when qoff == koff, unmasked when \
	 *     koff + sk <= qoff + 1, empty when koff > qoff + sq - 1): context parallelism. \
	 * A query that sees no key gets out 0 and lse -inf, and the backward gives it and through it \
	 * 0 gradients (no NaN anywhere).  lse [b, ng*r, sq] fp32 (element (j, n, i) at \
	 * (j*ng*r + n)*ld + i, ld = sq, or a->ld_lse for BLOCK): the log-sum-exp of each softmax row \
	 * (the backward recomputes the probabilities: nothing O(s^2) is stored). \
	 * Position bias (a->bias, SELF only; T5's relative position bias, Transformer Engine's \
	 * post_scale_bias): [2 s - 1, heads_total] fp32, score (i, i') of global head head0 + n gains \
	 * bias[(i' - i + s - 1) heads_total + head0 + n]; the backward ACCUMULATES the scores' \
	 * gradient dS (of the softmax's input, dropout included; 0 for keys not seen) into a->dbias, \
	 * same layout, only this rank's heads' columns, summed over sequences and query positions in \
	 * a fixed order.  The CUDA backend runs biased attention on its fp32 CUDA-core kernels in \
	 * every precision, and its backward holds dS [b, ng*r, s, s] fp32 in scratch (O(b h s^2), as \
	 * Transformer Engine's unfused attention, which Megatron-Core runs for a bias with a gradient). \
	 * Dropout p on the probabilities: element (j, n, i, i') is kept by the Philox word \
	 * mgt_attn_drop_word(key, j*heads_total + head0 + n, S_q, S_k, i, i') (lib/util: one counter \
	 * serves the four elements {i, i + 8} x {i', i' + 8} of 16 x 16 squares), with S_q = S_k = s \
	 * (SELF), S_q = sq, S_k = sk (CROSS), and for BLOCK s, s and the global positions qoff + i, \
	 * koff + i', so that blocks covering a sequence draw exactly the mask SELF draws.  head0 is \
	 * the global index of local head 0 (tensor parallelism), heads_total the global head count. \
	 * Types: q, kv and out of type a->t (SELF, CROSS: fp32, or bf16/fp16 storage of a 16-bit \
	 * training precision, read as fp32, out written rounded to nearest even; BLOCK: fp32); \
	 * softmax and accumulation fp32.  Under a 16-bit precision the CUDA backend's tensor-core \
	 * kernels (kernels/attn_tc.cu) read 16-bit q and kv and write 16-bit out directly for SELF \
	 * without bias and CROSS (an fp32 input is rounded, and its fp32 out holds the rounded \
	 * values); the CPU widens 16-bit inputs, computes in fp32 and rounds out.  Counts of 0 (sq, \
	 * sk, b) do nothing.  Ring attention (TransformerEngine's AttnFuncWithCPAndKVP2P) runs \
	 * attn_forward on every visible BLOCK and merges the partial results with attn_merge; its \
	 * backward runs attn_backward on every visible block with the merged out and lse. */ \
	/* Forward: writes out [sq*b, ng*r, d] and lse.  q and kv as a->kind says (SELF: q the fused \
	 * qkv, kv NULL).  BLOCK: out normalized over this block's visible keys, lse their \
	 * log-sum-exp (all sq*b rows, its sq entries of every (j, n) row). */ \
	X(void, attn_forward, (mgt_backend *be, const mgt_attn *a, void *out, float *lse, const void *q, \
		const void *kv)) \
	/* Backward (Dao et al. 2022, algorithm 2: P = exp(S - lse), D = rowsum(dO * O), dS = P (dP - D)) \
	 * from dout [sq*b, ng*r, d] given the forward's q, kv, out and lse (BLOCK: the rows' final, \
	 * merged out and lse) and the same descriptor.  SELF: WRITES dq [s*b, ng, r + 2, d] (all three \
	 * slots; dkv NULL).  CROSS: WRITES dq [sq*b, ng*r, d] and dkv [sk*b, ng, 2, d].  BLOCK: dq's \
	 * query slots ACCUMULATE dS K scale (its key and value slots untouched), dkv accumulates the \
	 * block's dK and dV.  dout, dq and dkv of type a->gt (fp32, or bf16/fp16: dout read as fp32, \
	 * the gradients computed in fp32 and rounded to nearest even; BLOCK fp32); the CUDA kernels \
	 * read and write fp32 gradients, 16-bit ones go through scratch. */ \
	X(void, attn_backward, (mgt_backend *be, const mgt_attn *a, void *dq, void *dkv, const void *dout, \
		const void *q, const void *kv, const void *out, const float *lse)) \
	/* The context-parallel merge (TransformerEngine's context_parallel, AttnFuncWithCPAndKVP2P's \
	 * flash_attn_fwd_out_correction): a block's (ob, lb) into the running (out, lse), both laid \
	 * out as BLOCK's with a->sq rows and a->ld_lse: lse' = log(exp(lse) + exp(lb)), \
	 * out' = out exp(lse - lse') + ob exp(lb - lse'); rows where both are -inf stay (0, -inf). \
	 * Uses a's b, ng, r, d, sq, ld_lse.  Updates out and lse (fp32). */ \
	X(void, attn_merge, (mgt_backend *be, const mgt_attn *a, float *out, float *lse, const float *ob, \
		const float *lb)) \
	/* Attention against a key/value cache (inference; no dropout, no backward): qkv [T, ng, r + 2, d] \
	 * holds T = a->sq new tokens laid out as SELF's q (after RoPE and the head norms); token t \
	 * belongs to cache sequence seq[t] at position pos[t] (0 <= pos[t] < a->sk = S).  The caches \
	 * kc, vc [B, ng, S, d] (one layer's keys and values) first receive every new token's key and \
	 * value head: kc[seq[t], g, pos[t], :] = k_g(t), likewise vc; then query head n of group \
	 * g = n / r of token t attends causally over its sequence: \
	 *   out[t, n, :] = sum_{i <= pos[t]} softmax_i(scale * q_n(t).kc[seq[t], g, i]) vc[seq[t], g, i] \
	 * (megatron/core/transformer/dot_product_attention.py; the inference key/value memory of \
	 * megatron/core/inference/ and megatron/core/transformer/attention.py \
	 * _adjust_key_value_for_inference).  Positions 0..pos[t] of the sequence must hold keys: from \
	 * this call or an earlier one.  No two tokens of one call may share (seq, pos).  Writes out \
	 * [T, ng*r, d] and those cache rows; seq, pos [T] int32; all fp32.  Softmax sums in fp32, max \
	 * first.  a->bias (NULL: none): SELF's position bias laid out for a->s = bs positions (pos[t] \
	 * < bs) over heads_total = ng*r, head0 = 0: the score of query head n of token t against \
	 * cached position i gains bias[(i - pos[t] + bs - 1) ng*r + n].  Uses a's sq, sk, ng, r, d, s \
	 * and bias. */ \
	X(void, attn_decode, (mgt_backend *be, const mgt_attn *a, float *out, float *kc, float *vc, \
		const float *qkv, const int32_t *seq, const int32_t *pos)) \
	/* Not attention math: copy between the key/value slots of qkv [T, ng, r + 2, d] and kv \
	 * [T, ng, 2, d] (context parallelism's exchanged blocks): to_kv true writes kv from qkv, false \
	 * writes qkv's key and value slots from kv (its query slots untouched). */ \
	X(void, attn_kv_copy, (mgt_backend *be, float *qkv, float *kv, int T, int ng, int r, int d, \
		bool to_kv)) \
	\
	/* ---- MLP activation with the fc1 bias (Megatron's bias-activation fusion) ---- */ \
	/* GELU (erf form) or GELU_TANH: x [T, f], y = gelu(x + b), y [T, f]; the tanh form is \
	 *   0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). \
	 * SwiGLU: x [T, 2f] = [gate | up] along each row (first f columns gate, next f up), b [2f], \
	 *   y[t, c] = silu(x[t, c] + b[c]) * (x[t, f + c] + b[f + c]), y [T, f]. \
	 * b may be NULL.  Writes y, of type yt as norm_fwd's y; x's elements are of type xt (fp32, or \
	 * bf16/fp16 read as their fp32 values). */ \
	X(void, bias_act_fwd, (mgt_backend *be, mgt_act_kind act, void *y, mgt_elem_type yt, const void *x, \
		mgt_elem_type xt, const float *b, int T, int f)) \
	/* Backward: dx [T, f] or [T, 2f] writes; db accumulates (skipped when NULL: the column sums of \
	 * dx's stored values); x of type xt as the forward's; dy and dx of type gt (fp32, or bf16/fp16: \
	 * dy read as its fp32 values, dx computed in fp32 and rounded to nearest even). */ \
	X(void, bias_act_bwd, (mgt_backend *be, mgt_act_kind act, void *dx, float *db, const void *dy, \
		mgt_elem_type gt, const void *x, mgt_elem_type xt, const float *b, int T, int f)) \
	\
	/* ---- bias-dropout-add (residual) ---- */ \
	/* out[T, h] = resid + dropout(y + b), or dropout(y + b) when resid == NULL; b may be NULL. \
	 * Dropout element index = e0 + t*h + c (e0: global index of this piece's first element). \
	 * out may alias resid.  Writes out.  out and resid are of type rt (the residual stream's \
	 * storage): fp32, or bf16/fp16 (resid read as its fp32 values, the fp32 sum rounded to nearest \
	 * even); y of type yt (fp32, or 16-bit read as its fp32 values: a 16-bit row-parallel output); \
	 * b is fp32. */ \
	X(void, bda_fwd, (mgt_backend *be, void *out, const void *resid, mgt_elem_type rt, const void *y, \
		mgt_elem_type yt, const float *b, int T, int h, float p, uint64_t key, uint64_t e0)) \
	/* Backward: dy[T, h] = dropout mask * dout (writes; may alias dout when dyt == dot), db[h] += \
	 * sum_t dy[t] (skipped when NULL; the sum of dy's stored values, in fp32).  dout of type dot, \
	 * dy of type dyt (each fp32, or bf16/fp16: read as fp32, the product rounded to nearest even). \
	 * The residual's gradient is dout itself. */ \
	X(void, bda_bwd, (mgt_backend *be, void *dy, mgt_elem_type dyt, float *db, const void *dout, \
		mgt_elem_type dot, int T, int h, float p, uint64_t key, uint64_t e0)) \
	\
	/* ---- vocab-parallel softmax cross-entropy (megatron/core/tensor_parallel/cross_entropy.py) \
	 * logits [T, V] hold vocabulary columns [v0, v0 + V) of the padded vocabulary.  The model \
	 * calls: xent_max -> all-reduce(max) over TP -> xent_stats -> all-reduce(sum) of sumexp and \
	 * target over TP -> xent_loss; backward xent_bwd.  Nothing [T, V] is written except by \
	 * xent_bwd, which may overwrite the logits in place.  The logits (and dlogits) are of type lt: \
	 * fp32, or bf16/fp16 read as their exact fp32 values (Megatron's logits.float() before the \
	 * cross entropy); statistics and losses are fp32 in every case. */ \
	/* mx[t] = max_c logits[t, c].  Writes mx [T]. */ \
	X(void, xent_max, (mgt_backend *be, float *mx, const void *logits, mgt_elem_type lt, int T, int V)) \
	/* sumexp[t] = sum_c exp(logits[t,c] - mx[t]);  tgt[t] = logits[t, labels[t] - v0] when \
	 * v0 <= labels[t] < v0 + V, else 0.  Writes sumexp, tgt [T] (sumexp accumulated in double). */ \
	X(void, xent_stats, (mgt_backend *be, float *sumexp, float *tgt, const void *logits, \
		mgt_elem_type lt, const int32_t *labels, const float *mx, int64_t v0, int T, int V)) \
	/* loss[t] = log(sumexp[t]) + mx[t] - tgt[t] (writes loss [T]); returns \
	 * sum_t loss[t] * mask[t] in double (mask [T] fp32, 0 or 1). */ \
	X(double, xent_loss, (mgt_backend *be, float *loss, const float *mx, const float *sumexp, \
		const float *tgt, const float *mask, int T)) \
	/* dlogits[t, c] = (exp(logits[t,c] - mx[t]) / sumexp[t] - [c + v0 == labels[t]]) \
	 *                 * mask[t] * scale.   dlogits may alias logits.  Writes, in type lt (each \
	 * fp32 value rounded to nearest even for bf16/fp16). */ \
	X(void, xent_bwd, (mgt_backend *be, void *dlogits, const void *logits, mgt_elem_type lt, \
		const int32_t *labels, const float *mx, const float *sumexp, const float *mask, \
		float scale, int64_t v0, int T, int V)) \
	\
	/* ---- Mixture of Experts (lib/model/moe.c; megatron/core/transformer/moe/moe_utils.py \
	 * permute / unpermute, experts.py) ---- \
	 * Tokens routed to experts are "permuted": row i of the [N, .] expert input is token idx[i] \
	 * of the [T, .] layer input, rows grouped by expert; slot[t*k + j] is the row of token t's \
	 * j-th routed copy (-1: dropped or absent).  The rows are of one element type t (fp32, or the \
	 * training's bf16/fp16 storage: Megatron permutes, runs the experts on and unpermutes bf16 \
	 * tokens); each op computes in fp32 and rounds a 16-bit result once, to nearest even. */ \
	/* dst[i] = src[idx[i]] for i < N (rows of h elements of type t, copied).  Writes dst [N, h]. */ \
	X(void, rows_gather, (mgt_backend *be, void *dst, const void *src, mgt_elem_type t, \
		const int32_t *idx, int N, int h)) \
	/* dst[t] = sum over j < k with slot[t*k + j] >= 0 of src[slot[t*k + j]], added in fp32 in j order \
	 * (a zero row when there is none), rounded once to t.  Writes dst [T, h].  The combine \
	 * (unpermute) of the experts' outputs, and the backward of rows_gather. */ \
	X(void, rows_combine, (mgt_backend *be, void *dst, const void *src, mgt_elem_type t, \
		const int32_t *slot, int T, int k, int h)) \
	/* y[i, c] = w[i] * x[i, c] for i < N, c < f (w fp32; x and y of type t, the product rounded \
	 * once); y may alias x.  Writes y [N, f]. */ \
	X(void, rows_scale, (mgt_backend *be, void *y, const void *x, mgt_elem_type t, const float *w, \
		int N, int f)) \
	/* out[i] = sum_c a[i, c] * b[i, c] (a, b of type t, read as fp32), accumulated in double and \
	 * rounded once.  Writes out [N] fp32. */ \
	X(void, rows_dot, (mgt_backend *be, float *out, const void *a, const void *b, mgt_elem_type t, \
		int N, int f)) \
	/* Grouped linear layers, one call for G experts: rows [r_g, r_g + rows[g]) of x and y \
	 * (r_g = rows[0] + ... + rows[g-1]) go through expert g's weight w[g] [out, in]: \
	 *   y[r_g + i] = x[r_g + i] . w[g]^T     (writes y [sum rows, out]; no bias) \
	 * x and y of type t, w a HOST array of G backend pointers to elements of type wt (as \
	 * linear_fwd's); rows[g] may be 0.  Precision and rounding as linear_fwd's, group by group. */ \
	X(void, linear_fwd_grouped, (mgt_backend *be, void *y, const void *x, mgt_elem_type t, \
		const void *const *w, mgt_elem_type wt, const int *rows, int G, int in, int out)) \
	/* Its backward given dy [sum rows, out]: dx (writes; skipped when NULL) and \
	 * dw[g] [out, in] += dy_g^T . x_g (accumulates fp32; dw a host array of G backend pointers); \
	 * dx, dy and x of type t, as linear_bwd's. */ \
	X(void, linear_bwd_grouped, (mgt_backend *be, void *dx, float *const *dw, const void *dy, \
		const void *x, mgt_elem_type t, const void *const *w, mgt_elem_type wt, const int *rows, \
		int G, int in, int out)) \
	\
	/* ---- optimizer and reductions ---- */ \
	/* AdamW on n elements, torch.optim.AdamW's single-tensor arithmetic: \
	 *   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g; \
	 *   p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps) \
	 * step counts from 1.  Updates p, m, v in place; g is read only.  (torch writes the m update \
	 * as m.lerp_(g, 1-b1): the same up to rounding.  Bias corrections are computed in double and \
	 * rounded to fp32 as torch's Python scalars are.) */ \
	X(void, adamw, (mgt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, \
		float b1, float b2, float eps, float wd, int64_t step)) \
	/* sum of x[i]^2 in double (deterministic order).  NaN/Inf propagate. */ \
	X(double, sumsq, (mgt_backend *be, const float *x, size_t n)) \
	/* dst = src, bytes bytes (backend memory, not overlapping). */ \
	X(void, copy, (mgt_backend *be, void *dst, const void *src, size_t bytes)) \
	/* dst[i] = src[i] (n fp32 elements) rounded to type dt, MGT_DT_BF16 or MGT_DT_F16, to nearest \
	 * even (fp16: overflow to +-inf, NaN stays NaN), as mgt_f32_to_bf16 / mgt_f32_to_f16 encode it \
	 * (lib/util).  Writes dst [n] 2-byte elements; dst and src do not overlap. */ \
	X(void, cast, (mgt_backend *be, void *dst, mgt_elem_type dt, const float *src, size_t n)) \
	/* dst[i] = the exact fp32 value of src[i], n 2-byte elements of type st (MGT_DT_BF16 or \
	 * MGT_DT_F16; every such value is a float), as mgt_bf16_to_f32 / mgt_f16_to_f32 decode it. \
	 * Writes dst [n]; dst and src do not overlap. */ \
	X(void, widen, (mgt_backend *be, float *dst, const void *src, mgt_elem_type st, size_t n)) \
	/* x *= alpha over n elements. */ \
	X(void, scale, (mgt_backend *be, float *x, size_t n, float alpha)) \
	/* fp8's quantizing cast (lib/fp8 mgt_fp8_quantize, bit for bit; Transformer Engine's \
	 * cast_to_fp8): q[i] = the byte of format fmt (lib/util mgt_f32_to_fp8) of fl32(x[i] * \
	 * scale[0]) for n elements x of type xt (fp32, or bf16/fp16 widened exactly), and amax[0] = \
	 * fmaxf(amax[0], |x[i]|) over them (NaN ignored, +Inf kept).  scale and amax are one float \
	 * each in the backend's memory, read and written there (no host sync on a GPU); q may be \
	 * NULL (the amax alone). */ \
	X(void, fp8_quantize, (mgt_backend *be, uint8_t *q, const void *x, mgt_elem_type xt, size_t n, \
		const float *scale, mgt_fp8_format fmt, float *amax)) \
	/* Current (tensorwise) scaling from a tensor's amax (lib/fp8 mgt_fp8_current_scale with eps \
	 * 0, then mgt_fp8_scale_inv; Transformer Engine's Float8CurrentScaling recipe, \
	 * transformer_engine/common/recipe/__init__.py): \
	 * scale[0] = 1 when amax[0] is 0, Inf or NaN, else fl32(fp8_max / amax[0]) (+Inf becomes \
	 * FLT_MAX), and scale_inv[0] = 1 / scale[0] rounded to nearest.  One float each in backend \
	 * memory (no host sync on a GPU). */ \
	X(void, fp8_scale, (mgt_backend *be, float *scale, float *scale_inv, const float *amax, float fp8_max)) \
	/* dst[c, r] = src[r, c]: the transposed copy of a [rows, cols] matrix of fp8 bytes (the \
	 * "columnwise" copy Transformer Engine keeps because Hopper runs only TN fp8 GEMMs; the same \
	 * bytes, so the same scale_inv).  Writes dst [cols, rows]; no overlap. */ \
	X(void, fp8_transpose, (mgt_backend *be, uint8_t *dst, const uint8_t *src, int rows, int cols)) \
	/* The fp8 GEMM of a Transformer Engine linear on Hopper \
	 * (transformer_engine/common/gemm/cublaslt_gemm.cu: cuBLASLt "TN", A_SCALE_POINTER / \
	 * B_SCALE_POINTER the operands' scale_inv, COMPUTE_32F): \
	 *   acc[j, i] = sum_{k' < k} A[i, k'] * B[j, k']      (fp8 values, each product exact in fp32, \
	 *                                                     summed in fp32 in some order) \
	 *   v[j, i]   = acc[j, i] * fl32(a_inv[0] * b_inv[0]) (+ bias[i] when bias != NULL) \
	 * for i < m, j < n: A [m, k] bytes of format af, B [n, k] bytes of format bf (both row-major, k \
	 * contiguous: cuBLASLt's transposed A and non-transposed B), a_inv and b_inv one float each in \
	 * backend memory (the scale_inv of each operand; read there, no host sync).  D [n, m] row-major \
	 * (cuBLASLt's column-major m x n) of type dt: bf16 or fp16 written as v rounded to nearest even, \
	 * or fp32, written (accumulate false) or added to (accumulate true: D += v, the wgrad into the \
	 * fp32 main gradient).  accumulate needs dt fp32.  fast_accum: cuBLASLt's FAST_ACCUM (TE's \
	 * forward; dgrad and wgrad use the split accumulator): a speed hint that may lower the GPU's \
	 * accumulation precision; the CPU sums in fp32 either way (the reference; sums are not bit \
	 * for bit the GPU's, whose order and fast accumulation are undocumented).  The model's three \
	 * GEMMs of a linear y[T, out] = x[T, in] . w[out, in]^T: forward A = w8 (m out), B = x8 (n T), \
	 * k in; dgrad dx[T, in]: A = w8^T [in, out] (m in), B = dy8 [T, out] (n T), k out; wgrad \
	 * dw[out, in] +=: A = x8^T [in, T] (m in), B = dy8^T [out, T] (n out), k T.  The caller \
	 * ensures m, n, k are multiples of 16 and not both formats E5M2 (what cuBLASLt accepts). */ \
	X(void, gemm_fp8, (mgt_backend *be, void *d, mgt_elem_type dt, bool accumulate, const float *bias, \
		const uint8_t *a, mgt_fp8_format af, const float *a_inv, const uint8_t *b, mgt_fp8_format bf, \
		const float *b_inv, int m, int n, int k, bool fast_accum)) \
	/* y += x over n elements of type t (fp32, or bf16/fp16: the fp32 sum rounded to nearest even, \
	 * as a 16-bit tensor addition rounds). */ \
	X(void, add, (mgt_backend *be, void *y, const void *x, mgt_elem_type t, size_t n)) \
	MGT_BACKEND_MAMBA_OPS(X) \
	MGT_BACKEND_CPU_ONLY_OPS(XC)

/* The Mamba-2 mixer's ops between its two GEMMs (Megatron-Core megatron/core/ssm/mamba_mixer.py
 * MambaMixer; mamba_ssm's mamba_split_conv1d_scan_combined and RMSNormGated; the SSD algorithm of
 * Dao & Gu 2024, "Transformers are SSMs", section 6 and listing 1); rows sequence-first as
 * everywhere; and the one-token step of inference (mamba_step).  Both backends (CUDA:
 * kernels/mamba.cu and kernels/ssd.cu).  Element types: every op but mamba_step takes a last
 * argument t (fp32, bf16 or fp16), the storage type of its activations and their gradients (the
 * void pointers: x, y, B, C, dt_raw, z, out and their d*); the parameters, their gradients, the
 * saved states and rstd stay fp32.  The math is fp32 (the sums named double stay double) on the
 * 16-bit inputs widened exactly, and each 16-bit output is the fp32 result rounded to nearest even
 * once (no intermediate is stored in 16 bits): with t = fp32 the ops are the fp32 ops bit for
 * bit.  mamba_step is fp32 only. */
#define MGT_BACKEND_MAMBA_OPS(X) \
	/* Causal depthwise conv1d + SiLU over xBC (MambaMixer's conv1d_weight [CD, 1, K], conv1d_bias; \
	 * causal_conv1d_fn with activation "silu"): \
	 *   y[i*b + j, c] = silu(bias[c] + sum_{k<K} w[c*K + k] * x[(i - (K-1) + k)*b + j, c]) \
	 * with x taken as 0 at positions before 0 and, when seg_start != NULL (packed sequences, \
	 * layout as mgt_attn.seg_start: [L*b] int32, each row's document start), before \
	 * seg_start[i*b + j]: the history restarts at every document (Megatron's seq_idx).  w[c*K + K-1] \
	 * multiplies the current token.  x [L*b, ld_x] (columns 0..CD-1 read: in_proj's xBC block), \
	 * w [CD, K], bias [CD], y [L*b, CD] written. */ \
	X(void, mamba_conv_fwd, (mgt_backend *be, void *y, const void *x, int ld_x, const float *w, \
		const float *bias, const int32_t *seg_start, int L, int b, int CD, int K, mgt_elem_type t)) \
	/* Its backward from dy [L*b, CD]: dx [L*b, ld_x] (columns 0..CD-1) WRITTEN; dw [CD, K] and \
	 * db [CD] ACCUMULATED (+=, summed in double over rows in row order: deterministic).  The \
	 * pre-activation is recomputed from x, w, bias. */ \
	X(void, mamba_conv_bwd, (mgt_backend *be, void *dx, float *dw, float *db, const void *dy, \
		const void *x, int ld_x, const float *w, const float *bias, const int32_t *seg_start, \
		int L, int b, int CD, int K, mgt_elem_type t)) \
	/* The selective scan of Mamba-2 (mamba_ssm ops/triton/ssd_combined.py \
	 * _mamba_chunk_scan_combined_fwd with dt_softplus, no z, no dt_limit; Megatron's decode \
	 * fallback MambaMixer.ssm_decode is its one-step form), for head h of group gi = h/(nh/g): \
	 *   dt_t = softplus(dt_raw[t, h] + dt_bias[h])   (softplus(v) = v if v > 20 else log1p(e^v)) \
	 *   A = -exp(A_log[h]),  a_t = exp(dt_t A) \
	 *   S_t[p', n'] = a_t S_{t-1}[p', n'] + dt_t x_t[h, p'] B_t[gi, n']   (S_{-1} = 0; also 0 before \
	 *                                        each document start when d->seg_start is set) \
	 *   y[t, h*p + p'] = sum_n' S_t[p', n'] C_t[gi, n'] + D[h] x_t[h, p'] \
	 * along each sequence (t = i*b + j, i = 0..L-1).  Computed by the chunked SSD algorithm \
	 * (chunks of MGT_SSD_CHUNK positions: intra-chunk C B^T masked by the decays, chunk states, \
	 * state passing, inter-chunk output), fp32 states, decays' cumulative sums in double: equal \
	 * to the recurrence up to fp32 rounding.  Geometry and strides in *d (mgt_ssd above). \
	 * Writes y [L*b, nh*p] (contiguous) and states [mgt_ssd_states_floats(d)] (the state \
	 * entering every chunk, layout [b][chunk][nh][p][n], for the backward); dt_bias, A_log, D \
	 * [nh] fp32. */ \
	X(void, ssd_scan_fwd, (mgt_backend *be, const mgt_ssd *d, void *y, float *states, const void *x, \
		const void *B, const void *C, const void *dt_raw, const float *dt_bias, const float *A_log, \
		const float *D, mgt_elem_type t)) \
	/* Its backward from dy [L*b, nh*p] given the forward's inputs and saved states: dx, dB, dC, \
	 * ddt_raw WRITTEN, laid out as x, B, C, dt_raw (same row strides d->ld_x, ld_bc, ld_dt; only \
	 * their columns are touched); ddt_bias, dA_log, dD [nh] ACCUMULATED.  The chunked form of \
	 * the forward's gradient (the chunks in reverse from the saved states, the state's gradient \
	 * carried between them; equal to the recurrence's sequential adjoint, megatron-hybrid-mamba.md \
	 * section 3, up to fp32 rounding), per-head scalar sums in double, dB and dC summed over a \
	 * group's heads in head order (deterministic).  Scratch held by the backend: 2 L b nh n \
	 * floats (per-head dB, dC) plus about 4 Q^2 + 2 Q n + Q p + 2 p n floats per thread \
	 * (Q = MGT_SSD_CHUNK); on CUDA the same per-head rows, the chunks' state gradients (as many \
	 * floats as states) and 3 Q^2 + 2 Q n + Q p floats for each of at most 128 chunks at a time. */ \
	X(void, ssd_scan_bwd, (mgt_backend *be, const mgt_ssd *d, void *dx, void *dB, void *dC, \
		void *ddt_raw, float *ddt_bias, float *dA_log, float *dD, const void *dy, \
		const float *states, const void *x, const void *B, const void *C, const void *dt_raw, \
		const float *dt_bias, const float *A_log, const float *D, mgt_elem_type t)) \
	/* Gated RMSNorm over groups (mamba_ssm ops/triton/layernorm_gated.py RMSNormGated with \
	 * norm_before_gate=False, group_size = di/g; Megatron's MambaMixer.norm): \
	 *   v = y * silu(z);  r[t, gi] = 1/sqrt(mean over group gi's di/g channels of v^2 + eps); \
	 *   out[t, c] = v[t, c] * r[t, c / (di/g)] * w[c] \
	 * y, out [T, di]; z [T, ld_z] (columns 0..di-1 read: in_proj's z block); w [di]; writes out \
	 * and rstd [T, g] (r, for the backward).  Sums of squares in double. */ \
	X(void, mamba_gated_norm_fwd, (mgt_backend *be, void *out, float *rstd, const void *y, \
		const void *z, int ld_z, const float *w, int T, int di, int g, float eps, mgt_elem_type t)) \
	/* Its backward from dout [T, di]: dy [T, di] and dz [T, ld_z] (columns 0..di-1) WRITTEN, dw \
	 * [di] ACCUMULATED (summed in double over rows in row order). */ \
	X(void, mamba_gated_norm_bwd, (mgt_backend *be, void *dy, void *dz, float *dw, const void *dout, \
		const void *y, const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g, \
		mgt_elem_type t)) \
	/* T tokens one at a time, for inference with state caches (Megatron's MambaMixer.ssm_decode, \
	 * mamba_ssm's selective_state_update; the recurrence of ssd_scan_fwd above with the conv \
	 * of mamba_conv_fwd): rows t = 0..T-1 in order, row t a token of cache sequence seq[t] at \
	 * position pos[t] (int32 [T], backend memory).  A token at position 0 first zeroes its \
	 * sequence's states.  conv_state [B, K-1, CD]: the sequence's last K-1 pre-conv xBC rows \
	 * (oldest first); ssm_state [B, nh, p, n]: S.  For row t: u[t] = silu(conv_b + the conv of \
	 * conv_w [CD, K] over the K-1 kept rows and xBC_t, in_proj's columns 0..CD-1 of xbc [T, ld]); \
	 * the kept rows shift by one; then with x, B, C the blocks of u[t] (d's geometry: nh heads \
	 * of p, g groups of n) and dt_raw [T, d->ld_dt]: S = exp(dt A) S + dt x B^T and \
	 * y[t, h*p + p'] = S C + D x.  Writes u [T, CD] and y [T, nh*p]; updates the states in \
	 * place.  fp32; of d only nh, p, g, n and ld_dt are read. */ \
	X(void, mamba_step, (mgt_backend *be, const mgt_ssd *d, int T, float *y, float *u, float *conv_state, \
		float *ssm_state, const float *xbc, int ld, const float *dt_raw, const int32_t *seq, \
		const int32_t *pos, const float *conv_w, const float *conv_b, int K, const float *dt_bias, \
		const float *A_log, const float *D))

/* The ops only the CPU backend has (fp32 only, as the Mamba ops above): none at present.  The
 * mechanism stays for the next such op: list it here as X(ret, name, (params)), and the CUDA
 * table leaves it NULL (cuda.c CUDA_OP_ABSENT). */
#define MGT_BACKEND_CPU_ONLY_OPS(X)

#define MGT_BACKEND_OP_FIELD(ret, name, params) ret(*name) params;
#define MGT_BACKEND_OP_ID(ret, name, params) MGT_OP_##name,
#define MGT_BACKEND_OP_NAME(ret, name, params) #name,

/* The ops' identifiers, MGT_OP_<name> in table order (mgt_backend_supports), and their count. */
typedef enum { MGT_BACKEND_OPS(MGT_BACKEND_OP_ID) MGT_OP_COUNT } mgt_backend_op;

typedef struct mgt_backend_ops {
	const char *name; /* "cpu", "cuda" */
	MGT_BACKEND_OPS(MGT_BACKEND_OP_FIELD)
} mgt_backend_ops;

/* The grouped linears of any backend (lib/backend/grouped.c): linear_fwd / linear_bwd through
 * be->ops once per group with rows, on that group's rows of x, y, dy, dx, so the result is bitwise
 * the per-group calls' (groups without rows are skipped: they add nothing to dw).  Each backend's
 * linear_fwd_grouped / linear_bwd_grouped op is these; arguments as the ops'. */
void mgt_backend_grouped_fwd(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const void *const *w,
			     mgt_elem_type wt, const int *rows, int G, int in, int out);
void mgt_backend_grouped_bwd(mgt_backend *be, void *dx, float *const *dw, const void *dy, const void *x,
			     mgt_elem_type t, const void *const *w, mgt_elem_type wt, const int *rows, int G, int in,
			     int out);

struct mgt_backend {
	const mgt_backend_ops *ops;
	int threads; /* CPU threads used by ops and BLAS (read only: set by create) */
	mgt_precision precision; /* GEMM operand precision (see mgt_precision); set after create */
	size_t bytes_in_use, bytes_peak; /* device memory held by alloc and by committed granules of
					  * reserve now and at most, in bytes (CUDA backend; 0 on the
					  * CPU, which reports RSS) */
	bool host_memory; /* backend memory is ordinary host memory (CPU): callers may read and
			   * write it directly instead of staging copies through upload/download */
	void *impl;
};

/* The CPU reference backend: fp32, OpenBLAS sgemm for linear layers, OpenMP threads for the
 * rest.  threads <= 0 means all online CPUs.  Returns NULL with MGT_ERR_NOMEM.  Free with
 * mgt_backend_destroy.  Sets OpenBLAS's (process-wide) thread count, and when OpenBLAS did not
 * recognize the CPU and fell back to its slow generic kernels, makes it use its AVX-512 or AVX2
 * ones (unless OPENBLAS_CORETYPE is set).  Ops on one backend must not run concurrently. */
mgt_backend *mgt_backend_cpu_create(int threads);
void mgt_backend_destroy(mgt_backend *be);

/* The CUDA backend (lib/backend/cuda.c, kernels/): the same ops on device memory of GPU `device`,
 * on one stream, GEMMs through cuBLASLt (fp32 operands computed in true fp32, not TF32), attention
 * and everything else through kernels/.  Returns NULL with the reason in *st: MGT_ERR_USAGE
 * (mgt built without CUDA, or no such device), MGT_ERR_IO (CUDA or cuBLASLt failed to start),
 * MGT_ERR_NOMEM.  Free with mgt_backend_destroy.  Ops are asynchronous on the stream; download,
 * sumsq and xent_loss (which return values) and sync wait for it. */
mgt_backend *mgt_backend_cuda_create(int device, mgt_status *st);
/* Bytes this backend can still allocate, and where the figure comes from (what, n bytes: e.g.
 * "MemAvailable", "cgroup memory.max", "cudaMemGetInfo on GPU 0").  Host memory: the smaller of
 * /proc/meminfo's MemAvailable and the cgroup's limit less its usage (v2 memory.max, or v1
 * memory.limit_in_bytes); the GPU: cudaMemGetInfo's free bytes.  SIZE_MAX when unknown. */
size_t mgt_backend_mem_available(mgt_backend *be, char *what, size_t n);
/* The GPU part of mgt_backend_mem_available (SIZE_MAX in a build without CUDA). */
size_t mgt_backend_cuda_mem_available(mgt_backend *be, char *what, size_t n);

/* Whether backend be runs op (MGT_OP_<name>, an entry of MGT_BACKEND_OPS) on elements of type t
 * (the op's storage type: fp32, bf16 or fp16; for gemm_fp8 its output D's).  False, with the
 * reason in why[n], when be has no such op, t is not one of those three, or the device cannot:
 * gemm_fp8 on CUDA needs compute capability 8.9 or higher (Ada, Hopper and later: Transformer
 * Engine's rule, transformer_engine/pytorch/utils.py check_fp8_support) and a cuBLASLt with fp8
 * (CUDA 12.1 or later); the reason names the GPU (its name and compute capability).  The CPU runs
 * every op it has (fp8 by emulation), mamba_step (of MGT_BACKEND_MAMBA_OPS) on fp32 only (both backends). */
bool mgt_backend_supports(mgt_backend *be, mgt_backend_op op, mgt_elem_type t, char *why, size_t n);
/* The CUDA part of it, for a CUDA backend (false with the reason in a build without CUDA). */
bool mgt_backend_cuda_supports(mgt_backend *be, mgt_backend_op op, mgt_elem_type t, char *why, size_t n);

/* Number of CUDA devices usable by this process (0 when built without CUDA, without a driver or
 * without a GPU).  Never fails. */
int mgt_backend_cuda_devices(void);
/* The CUDA stream (a cudaStream_t) the backend's ops are queued on, for communicators that must
 * queue on the same stream (NCCL); NULL for the CPU backend or a build without CUDA. */
void *mgt_backend_cuda_stream(mgt_backend *be);

#endif
