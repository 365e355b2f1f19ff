/* lib/backend: the CUDA backend's linear layers through cuBLASLt.
 *
 * Layout: cuBLASLt is column-major, mgt row-major.  A row-major [r, c] matrix is the column-major
 * [c, r] matrix with leading dimension c, so each product is computed transposed:
 *   y = x.w^T  (y[T,out])   as  y^T[out,T]  = op_T(w)[out,in] . x^T[in,T]     m=out n=T   k=in
 *   dx = dy.w  (dx[T,in])   as  dx^T[in,T]  = w^T[in,out] . dy^T[out,T]        m=in  n=T   k=out
 *   dw += dy^T.x (dw[out,in]) as dw^T[in,out] += x^T[in,T] . op_T(dy^T)[T,out]  m=in  n=out k=T
 * where "w^T[in,out]" etc. are just the row-major buffers read column-major (no copies).
 *
 * Precision (backend.h, mgt_precision): fp32 operands in CUBLAS_COMPUTE_32F (true fp32, no TF32);
 * bf16/fp16: both operands cast by mgt_k_cast into the backend's scratch (an operand given in the
 * 16-bit type, the model's weight copy or a 16-bit activation, is read as it is), C and D fp32,
 * compute 32F.  The bias epilogue's vector has D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
 * "Bias vector elements are the same type as the elements of output matrix (Dtype)", exceptions
 * only for int8 IMMA and fp8), so it is fp32 in every mode.  Bias gradients are not taken from the
 * BGRAD epilogues (they overwrite; db accumulates) but from mgt_k_colsum.
 *
 * fp8 (gemm_fp8, at the end): cuBLASLt's "TN" product on the fp8 bytes as they are, the operands'
 * scale_inv as A_SCALE_POINTER / B_SCALE_POINTER (device floats, read by cuBLASLt), COMPUTE_32F,
 * FAST_ACCUM as asked; D bf16/fp16 (C the same, beta 0) or fp32 (beta 1 to accumulate).  A bias
 * goes through fp32 blocks and bda_fwd's kernel (t + bias, + D, rounded once), not the BIAS
 * epilogue: with fp8 operands and a 16-bit D its vector has D's type (cublasLt.h,
 * CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), which would round the fp32 bias.
 *
 * Plans: descriptors, layouts and the heuristic's first algorithm are built once per
 * cuda_plan_key and kept in a small table (round-robin replacement), so repeated shapes skip the
 * heuristic.  The bias and scale pointers are set on the descriptor at each call.  One algorithm
 * per key, one stream, a fixed workspace: the same inputs give the same bits.
 */
#include "backend/cuda_impl.h"

#include <stdlib.h>
#include <string.h>

/* Operand bytes in 16-bit, rounded up to 256 so buffers carved from the scratch stay aligned. */
static size_t lp_bytes(size_t n) { return (n * 2 + 255) / 256 * 256; }

/* Least power-of-two alignment of p, capped at 256 (cuBLASLt's default assumption). */
static int64_t ptr_align(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	if (!a)
		return 256;
	a &= ~a + 1;
	return a >= 256 ? 256 : (int64_t)a;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static bool lt_ok(mgt_backend *be, const char *op, cublasStatus_t s)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return true;
	if (((cuda_impl *)be->impl)->lt_quiet)
		return false;
	mgt_cuda_fail(be, MGT_ERR_IO, "cuda backend: %s: cuBLASLt: %s", op, cublasLtGetStatusString(s));
	return false;
}

static void plan_free(cuda_plan *pl)
{
	if (pl->desc)
		cublasLtMatmulDescDestroy(pl->desc);
	if (pl->la)
		cublasLtMatrixLayoutDestroy(pl->la);
	if (pl->lb)
		cublasLtMatrixLayoutDestroy(pl->lb);
	if (pl->lc)
		cublasLtMatrixLayoutDestroy(pl->lc);
	memset(pl, 0, sizeof *pl);
}

void mgt_cuda_plans_free(cuda_impl *im)
{
	for (int i = 0; i < CUDA_PLANS; i++)
		plan_free(&im->plans[i]);
}

static bool desc_set(mgt_backend *be, const char *op, cublasLtMatmulDesc_t d,
		     cublasLtMatmulDescAttributes_t a, const void *v, size_t n)
{
	return lt_ok(be, op, cublasLtMatmulDescSetAttribute(d, a, v, n));
}

static bool is_fp8(int64_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

/* Descriptor and layouts for key k (A stored k x m or m x k as transposed, B likewise, C = D
 * m x n of type k->dt; leading dimension = stored rows; fp8: FAST_ACCUM). */
static bool plan_describe(mgt_backend *be, const char *op, cuda_plan *pl, const cuda_plan_key *k)
{
	const cudaDataType ab = (cudaDataType)k->ab;
	const int8_t fast = k->fast != 0;
	const int32_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	const uint32_t epi = (uint32_t)k->epi;
	const int32_t bias_t = CUDA_R_32F;
	const uint64_t ar = (uint64_t)(k->ta ? k->k : k->m), ac = (uint64_t)(k->ta ? k->m : k->k);
	const uint64_t br = (uint64_t)(k->tb ? k->n : k->k), bc = (uint64_t)(k->tb ? k->k : k->n);
	return lt_ok(be, op, cublasLtMatmulDescCreate(&pl->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
	       desc_set(be, op, pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) &&
	       desc_set(be, op, pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) &&
	       desc_set(be, op, pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) &&
	       (epi != CUBLASLT_EPILOGUE_BIAS ||
		desc_set(be, op, pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t)) &&
	       (!is_fp8(ab) || desc_set(be, op, pl->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast)) &&
	       lt_ok(be, op, cublasLtMatrixLayoutCreate(&pl->la, ab, ar, ac, (int64_t)ar)) &&
	       lt_ok(be, op, cublasLtMatrixLayoutCreate(&pl->lb, (cudaDataType)k->bt, br, bc, (int64_t)br)) &&
	       lt_ok(be, op, cublasLtMatrixLayoutCreate(&pl->lc, (cudaDataType)k->dt, (uint64_t)k->m,
							(uint64_t)k->n, k->m));
}

/* The heuristic's best algorithm for the plan's descriptors (bias pointer already set). */
static bool plan_choose(mgt_backend *be, const char *op, cuda_plan *pl, const cuda_plan_key *k)
{
	cuda_impl *im = be->impl;
	cublasLtMatmulPreference_t pref = NULL;
	if (!lt_ok(be, op, cublasLtMatmulPreferenceCreate(&pref)))
		return false;
	const uint64_t wsb = CUDA_LT_WS_BYTES;
	const uint32_t al = (uint32_t)k->align;
	const cublasLtMatmulPreferenceAttributes_t aligns[] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	bool ok = lt_ok(be, op, cublasLtMatmulPreferenceSetAttribute(
					pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
	for (int i = 0; ok && i < 4; i++)
		ok = lt_ok(be, op, cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
	cublasLtMatmulHeuristicResult_t res;
	int nres = 0;
	memset(&res, 0, sizeof res);
	ok = ok && lt_ok(be, op, cublasLtMatmulAlgoGetHeuristic(im->lt, pl->desc, pl->la, pl->lb, pl->lc,
								pl->lc, pref, 1, &res, &nres));
	cublasLtMatmulPreferenceDestroy(pref);
	if (ok && nres < 1) {
		if (im->lt_quiet)
			return false;
		mgt_cuda_fail(be, MGT_ERR_IO,
			      "cuda backend: %s: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld", op,
			      (long long)k->m, (long long)k->n, (long long)k->k);
		return false;
	}
	pl->algo = res.algo;
	return ok;
}

/* The pointers set on a plan's descriptor at each call (NULL: not set): the bias, and fp8's
 * scale_inv of A and B. */
typedef struct {
	const float *bias, *a_inv, *b_inv;
} lt_ptrs;

static bool desc_ptrs(mgt_backend *be, const char *op, cublasLtMatmulDesc_t d, const lt_ptrs *p)
{
	return (!p->bias || desc_set(be, op, d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias)) &&
	       (!p->a_inv || desc_set(be, op, d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->a_inv, sizeof p->a_inv)) &&
	       (!p->b_inv || desc_set(be, op, d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->b_inv, sizeof p->b_inv));
}

/* The cached plan for k, built (and cached) on first sight with the pointers p set for the
 * heuristic; NULL after recording a failure. */
static cuda_plan *plan_get(mgt_backend *be, const char *op, const cuda_plan_key *k, const lt_ptrs *p)
{
	cuda_impl *im = be->impl;
	for (int i = 0; i < CUDA_PLANS; i++)
		if (im->plans[i].used && !memcmp(&im->plans[i].key, k, sizeof *k))
			return &im->plans[i];
	cuda_plan *pl = &im->plans[im->plan_next];
	im->plan_next = (im->plan_next + 1) % CUDA_PLANS;
	plan_free(pl);
	if (!plan_describe(be, op, pl, k) || !desc_ptrs(be, op, pl->desc, p) || !plan_choose(be, op, pl, k)) {
		plan_free(pl);
		return NULL;
	}
	pl->key = *k;
	pl->used = true;
	return pl;
}

/* One cublasLtMatmul with the cached plan for key and the pointers p: D = op(A) . op(B) (+ bias)
 * + beta * D, C = D, alpha 1.  False when cuBLASLt refused (recorded as the backend's failure
 * unless im->lt_quiet). */
static bool lt_run(mgt_backend *be, const char *op, const cuda_plan_key *key, const lt_ptrs *p, const void *A,
		   const void *B, void *D, float beta)
{
	cuda_impl *im = be->impl;
	cuda_plan *pl = plan_get(be, op, key, p);
	if (!pl || !desc_ptrs(be, op, pl->desc, p))
		return false;
	const float alpha = 1.0f;
	return lt_ok(be, op, cublasLtMatmul(im->lt, pl->desc, &alpha, A, pl->la, B, pl->lb, &beta, D, pl->lc, D,
					    pl->lc, &pl->algo, im->lt_ws, CUDA_LT_WS_BYTES, im->stream));
}

/* D[m,n] = op(A) . op(B) (+ bias[m]) + beta * D, column-major, D of type dt (CUDA_R_32F, or
 * ab's 16-bit type: the fp32 result rounded by cuBLASLt); A and B of type ab.  False when
 * cuBLASLt refused (recorded as the backend's failure unless im->lt_quiet). */
static bool gemm_t(mgt_backend *be, const char *op, bool ta, bool tb, int m, int n, int k, cudaDataType ab,
		   const void *A, const void *B, void *D, cudaDataType dt, float beta, const float *bias)
{
	int64_t align = min64(min64(ptr_align(A), ptr_align(B)), min64(ptr_align(D), ptr_align(bias)));
	const cuda_plan_key key = {ta, tb, m, n, k, ab, dt,
				   bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, beta != 0.0f,
				   align, ab, 0};
	const lt_ptrs p = {bias, NULL, NULL};
	return lt_run(be, op, &key, &p, A, B, D, beta);
}

/* gemm_t with an fp32 D. */
static void gemm(mgt_backend *be, const char *op, bool ta, bool tb, int m, int n, int k,
		 cudaDataType ab, const void *A, const void *B, float *D, float beta, const float *bias)
{
	gemm_t(be, op, ta, tb, m, n, k, ab, A, B, D, CUDA_R_32F, beta, bias);
}

/* GEMM operand type for the backend's precision, and the cast kernels' name for it. */
static cudaDataType op_type(const mgt_backend *be)
{
	return be->precision == MGT_PREC_BF16 ? CUDA_R_16BF
	       : be->precision == MGT_PREC_FP16 ? CUDA_R_16F
						: CUDA_R_32F;
}

static mgt_k_dtype k_type(cudaDataType t)
{
	return t == CUDA_R_16BF ? MGT_K_BF16 : t == CUDA_R_16F ? MGT_K_F16 : MGT_K_F32;
}

/* Scratch bytes that an operand of n elements of type t needs to become type ab (0: it is of
 * that type and is used as it is), rounded up to 256 so that carved buffers stay aligned. */
static size_t operand_bytes(mgt_elem_type t, cudaDataType ab, size_t n)
{
	if (mgt_cuda_kt(t) == k_type(ab))
		return 0;
	return ab == CUDA_R_32F ? (n * 4 + 255) / 256 * 256 : lp_bytes(n);
}

/* Operand p (n elements of type t) as type ab: p itself, or converted by mgt_k_cast (rounded to
 * nearest even, or widened exactly) into the scratch at *ws, which advances. */
static const void *operand(mgt_backend *be, const char *op, char **ws, const void *p, mgt_elem_type t, size_t n,
			   cudaDataType ab)
{
	cuda_impl *im = be->impl;
	size_t nb = operand_bytes(t, ab, n);
	if (!nb)
		return p;
	char *d = *ws;
	*ws += nb;
	mgt_cuda_ok(be, op, mgt_k_cast(im->stream, d, k_type(ab), p, mgt_cuda_kt(t), n));
	return d;
}

/* y = b broadcast over T rows (or 0): linear_fwd with in == 0, as dropout-free bda of zeros. */
static void fwd_no_input(mgt_backend *be, float *y, const float *b, int T, int out)
{
	cuda_impl *im = be->impl;
	const size_t bytes = (size_t)T * out * sizeof(float);
	if (!b) {
		mgt_cuda_ok(be, "linear_fwd", cudaMemsetAsync(y, 0, bytes, im->stream));
		return;
	}
	float *zeros = mgt_cuda_scratch(be, "linear_fwd", bytes);
	if (zeros && mgt_cuda_ok(be, "linear_fwd", cudaMemsetAsync(zeros, 0, bytes, im->stream)))
		mgt_cuda_ok(be, "linear_fwd",
			    mgt_k_bda_fwd(im->stream, y, NULL, MGT_K_F32, zeros, MGT_K_F32, b, T, out, 0.0f, 0, 0));
}

/* Rows of a 16-bit output computed at once in fp32 (a block of about 16M floats, 64 MiB of
 * scratch), where cuBLASLt does not write the 16-bit D itself (a bias, MGT_GEMM_D16=0: gemm_rows). */
static int out_block_rows(int T, int out)
{
	size_t r = ((size_t)16 << 20) / (size_t)(out > 0 ? out : 1);
	return r < 1 ? 1 : r > (size_t)T ? T : (int)r;
}

/* How a 16-bit output of a product without bias is written, by MGT_GEMM_D16 in the environment
 * (read at each call, as MGT_ATTN_KERNEL): unset or 1, by cuBLASLt itself (D of the operands'
 * type, the fp32 result rounded once), falling back to fp32 blocks cast by mgt_k_cast for good
 * where cuBLASLt refuses; 2 the same with a refusal recorded as the op's failure (the op checks);
 * 0 always the blocks.  On an H200 (cuBLASLt 13.0) the 16-bit D was bitwise the rounded fp32
 * output and the products 1.07-1.75x faster (tests/bench/results/gpu-nvidia-h200-20261127-*.txt). */
static int gemm_d16(void)
{
	const char *v = getenv("MGT_GEMM_D16");
	return !v ? 1 : strcmp(v, "0") == 0 ? 0 : strcmp(v, "2") == 0 ? 2 : 1;
}

/* Bytes of fp32 scratch that gemm_rows needs for R rows of n outputs of type dt (0 for fp32). */
static size_t rows_bytes(mgt_elem_type dt, int R, int n)
{
	return dt == MGT_DT_F32 ? 0 : ((size_t)R * n * 4 + 255) / 256 * 256;
}

/* D [T, n] (row-major, of type dt) = B . op(A) for B [T, k] row-major of type ab (the GEMM's
 * column-major D [n, T] = op(A) . B^T, op(A) [n, k]), plus bias [n] when not NULL: one GEMM into
 * an fp32 D; for a 16-bit D blocks of R rows into the fp32 scratch blk, each cast (rounded). */
static void gemm_rows(mgt_backend *be, const char *op, bool ta, int n, int T, int k, cudaDataType ab, const void *A,
		      const void *B, void *D, mgt_elem_type dt, float *blk, int R, const float *bias)
{
	cuda_impl *im = be->impl;
	const bool d16 = dt != MGT_DT_F32;
	const size_t bs = ab == CUDA_R_32F ? 4 : 2;
	/* not with a bias: an H200's cuBLASLt 13.0 refused the BIAS epilogue's fp32 vector with a bf16
	 * D ("an unsupported value or parameter", 2026-11-27), and a 16-bit bias would round it */
	const int mode = d16 && !bias && k_type(ab) == mgt_cuda_kt(dt) ? gemm_d16() : 0;
	if (mode == 2 || (mode == 1 && !im->d16_refused)) { /* cuBLASLt rounds D */
		im->lt_quiet = mode == 1;
		const bool ok = gemm_t(be, op, ta, false, n, T, k, ab, A, B, D, ab, 0.0f, bias);
		im->lt_quiet = false;
		if (ok || mode == 2)
			return;
		im->d16_refused = true; /* (the bias type with a 16-bit D, say): the blocks from now on */
	}
	if (!d16)
		R = T;
	for (int t0 = 0; t0 < T; t0 += R) {
		const int r = T - t0 < R ? T - t0 : R;
		float *yo = d16 ? blk : (float *)D + (size_t)t0 * n;
		gemm(be, op, ta, false, n, r, k, ab, A, (const char *)B + (size_t)t0 * k * bs, yo, 0.0f, bias);
		if (d16)
			mgt_cuda_ok(be, op, mgt_k_cast(im->stream, (uint16_t *)D + (size_t)t0 * n, mgt_cuda_kt(dt), yo, MGT_K_F32,
						       (size_t)r * n));
	}
}

void mgt_cuda_linear_fwd(mgt_backend *be, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt, const void *w,
			 mgt_elem_type wt, const float *b, int T, int in, int out)
{
	static const char op[] = "linear_fwd";
	cuda_impl *im = be->impl;
	if (T <= 0 || out <= 0)
		return;
	const bool y16 = yt != MGT_DT_F32;
	if (in <= 0) { /* y = b (or 0); a 16-bit y through a temporary fp32 one (fwd_no_input uses the scratch) */
		float *t32 = y16 ? be->ops->alloc(be, (size_t)T * out * 4) : y;
		if (!t32)
			return;
		fwd_no_input(be, t32, b, T, out);
		if (y16) {
			mgt_cuda_ok(be, op, mgt_k_cast(im->stream, y, mgt_cuda_kt(yt), t32, MGT_K_F32, (size_t)T * out));
			be->ops->free(be, t32);
		}
		return;
	}
	/* a 16-bit y: blocks of R rows into fp32 scratch (after the operands), each cast into y */
	const int R = out_block_rows(T, out);
	const size_t yb = rows_bytes(yt, R, out);
	const cudaDataType ab = op_type(be);
	const size_t nx = (size_t)T * in, nw = (size_t)out * in;
	const size_t ob = operand_bytes(xt, ab, nx) + operand_bytes(wt, ab, nw);
	char *ws = ob + yb ? mgt_cuda_scratch(be, op, ob + yb) : NULL;
	if (ob + yb && !ws)
		return;
	float *blk = y16 ? (float *)(ws + ob) : NULL;
	const void *xa = operand(be, op, &ws, x, xt, nx, ab), *wa = operand(be, op, &ws, w, wt, nw, ab);
	gemm_rows(be, op, true, out, T, in, ab, wa, xa, y, yt, blk, R, b);
}

/* linear_bwd's degenerate shapes, as the CPU backend treats them: dx = 0, db += colsum(dy). */
static void bwd_degenerate(mgt_backend *be, void *dx, mgt_elem_type dxt, float *db, const void *dy,
			   mgt_elem_type dyt, int T, int in, int out, void *ws)
{
	cuda_impl *im = be->impl;
	if (dx && T > 0 && in > 0)
		mgt_cuda_ok(be, "linear_bwd", cudaMemsetAsync(dx, 0, (size_t)T * in * mgt_elem_size(dxt), im->stream));
	if (db && T > 0 && out > 0)
		mgt_cuda_ok(be, "linear_bwd", mgt_k_colsum(im->stream, db, dy, mgt_cuda_kt(dyt), T, out, ws));
}

void mgt_cuda_linear_bwd(mgt_backend *be, void *dx, mgt_elem_type dxt, float *dw, float *db, const void *dy,
			 mgt_elem_type dyt, const void *x, mgt_elem_type xt, const void *w, mgt_elem_type wt, int T, int in,
			 int out)
{
	static const char op[] = "linear_bwd";
	cuda_impl *im = be->impl;
	const cudaDataType ab = op_type(be);
	const size_t ndy = (size_t)T * out, nx = (size_t)T * in, nw = (size_t)out * in;
	const bool gemms = T > 0 && in > 0 && out > 0;
	/* scratch: [colsum ws | dy | x | w | dx rows], the operands only where they are not of type ab,
	 * the fp32 rows of a 16-bit dx (blocks of R rows) only with dx */
	const int R = out_block_rows(T, in);
	const size_t cs = db ? (mgt_k_colsum_ws_bytes(T, out) + 255) / 256 * 256 : 0;
	const size_t ob = gemms ? operand_bytes(dyt, ab, ndy) + (dw ? operand_bytes(xt, ab, nx) : 0) +
					  (dx ? operand_bytes(wt, ab, nw) : 0)
				: 0;
	const size_t xb = gemms && dx ? rows_bytes(dxt, R, in) : 0;
	char *ws = cs + ob + xb ? mgt_cuda_scratch(be, op, cs + ob + xb) : NULL;
	if (cs + ob + xb && !ws)
		return;
	if (!gemms) {
		bwd_degenerate(be, dx, dxt, db, dy, dyt, T, in, out, ws);
		return;
	}
	char *c = ws + cs;
	const void *dya = operand(be, op, &c, dy, dyt, ndy, ab);
	const void *xa = dw ? operand(be, op, &c, x, xt, nx, ab) : x;
	const void *wa = dx ? operand(be, op, &c, w, wt, nw, ab) : w;
	if (dx)
		gemm_rows(be, op, false, in, T, out, ab, wa, dya, dx, dxt, xb ? (float *)(ws + cs + ob) : NULL, R, NULL);
	if (dw)
		gemm(be, op, false, true, in, out, T, ab, xa, dya, dw, 1.0f, NULL);
	if (db) /* the bias gradient sums dy's values in fp32 */
		mgt_cuda_ok(be, op, mgt_k_colsum(im->stream, db, dy, mgt_cuda_kt(dyt), T, out, ws));
}

/* ---- grouped linears: lib/backend/grouped.c's, through this backend's linear ops ---- */

void mgt_cuda_linear_fwd_grouped(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const void *const *w,
				 mgt_elem_type wt, const int *rows, int G, int in, int out)
{
	mgt_backend_grouped_fwd(be, y, x, t, w, wt, rows, G, in, out);
}

void mgt_cuda_linear_bwd_grouped(mgt_backend *be, void *dx, float *const *dw, const void *dy, const void *x,
				 mgt_elem_type t, const void *const *w, mgt_elem_type wt, const int *rows, int G, int in,
				 int out)
{
	mgt_backend_grouped_bwd(be, dx, dw, dy, x, t, w, wt, rows, G, in, out);
}

/* ---- fp8 (backend.h gemm_fp8) ---- */

/* An fp8 operand: its bytes (row-major, k contiguous), format and scale_inv (one device float). */
typedef struct {
	const uint8_t *p;
	mgt_fp8_format f;
	const float *inv;
} fp8_operand;

static cudaDataType fp8_type(mgt_fp8_format f) { return f == MGT_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; }

/* D [m, n] column-major of type dt = a.inv[0] b.inv[0] A^T B (+ beta D): cuBLASLt's fp8 "TN"
 * product of A [m, k] and B [n, k] row-major (column-major k x m and k x n, lda = ldb = k).
 * False when cuBLASLt refused (recorded). */
static bool fp8_lt(mgt_backend *be, fp8_operand a, fp8_operand b, int m, int n, int k, void *D, cudaDataType dt,
		   float beta, bool fast)
{
	const cuda_plan_key key = {true, false, m, n, k, fp8_type(a.f), dt, CUBLASLT_EPILOGUE_DEFAULT, beta != 0.0f,
				   min64(min64(ptr_align(a.p), ptr_align(b.p)), ptr_align(D)), fp8_type(b.f), fast};
	const lt_ptrs p = {NULL, a.inv, b.inv};
	return lt_run(be, "gemm_fp8", &key, &p, a.p, b.p, D, beta);
}

/* With a bias (or k = 0): blocks of R columns of D (rows of B) scaled into fp32 scratch t, then
 * D = t + bias (accumulate: D + (t + bias)) rounded to dt, by bda_fwd's kernel without dropout. */
static void fp8_bias_blocks(mgt_backend *be, void *d, mgt_elem_type dt, bool accumulate, const float *bias,
			    fp8_operand a, fp8_operand b, int m, int n, int k, bool fast)
{
	static const char op[] = "gemm_fp8";
	cuda_impl *im = be->impl;
	const int R = out_block_rows(n, m);
	float *t = mgt_cuda_scratch(be, op, (size_t)R * m * sizeof(float));
	for (int j0 = 0; t && j0 < n; j0 += R) {
		const int r = n - j0 < R ? n - j0 : R;
		const size_t o = (size_t)j0 * m;
		fp8_operand bj = b;
		bj.p += (size_t)j0 * k;
		const bool ok = k > 0 ? fp8_lt(be, a, bj, m, r, k, t, CUDA_R_32F, 0.0f, fast)
				      : mgt_cuda_ok(be, op, cudaMemsetAsync(t, 0, (size_t)r * m * sizeof(float), im->stream));
		void *dj = (char *)d + o * mgt_elem_size(dt);
		if (!ok || !mgt_cuda_ok(be, op, mgt_k_bda_fwd(im->stream, dj, accumulate ? dj : NULL, mgt_cuda_kt(dt), t,
							      MGT_K_F32, bias, r, m, 0.0f, 0, 0)))
			return;
	}
}

void mgt_cuda_gemm_fp8(mgt_backend *be, void *d, mgt_elem_type dt, bool accumulate, const float *bias, const uint8_t *a,
		       mgt_fp8_format af, const float *a_inv, const uint8_t *b, mgt_fp8_format bf, const float *b_inv,
		       int m, int n, int k, bool fast_accum)
{
	if (m <= 0 || n <= 0)
		return;
	if (accumulate && dt != MGT_DT_F32) {
		mgt_cuda_fail(be, MGT_ERR_USAGE, "cuda backend: gemm_fp8: accumulate needs an fp32 D");
		return;
	}
	const fp8_operand A = {a, af, a_inv}, B = {b, bf, b_inv};
	if (bias || k <= 0) {
		fp8_bias_blocks(be, d, dt, accumulate, bias, A, B, m, n, k, fast_accum);
		return;
	}
	/* cuBLASLt writes D (a 16-bit one rounded from its fp32 result) or accumulates into it */
	const cudaDataType t = dt == MGT_DT_BF16 ? CUDA_R_16BF : dt == MGT_DT_F16 ? CUDA_R_16F : CUDA_R_32F;
	fp8_lt(be, A, B, m, n, k, d, t, accumulate ? 1.0f : 0.0f, fast_accum);
}
