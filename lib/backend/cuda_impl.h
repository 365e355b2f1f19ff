/* lib/backend: internals shared by the CUDA backend's host files (cuda.c: memory, errors, the op
 * table and the ops' glue to kernels/; cuda_attn.c: attention's; cuda_gemm.c: the linear layers and
 * the fp8 GEMM through cuBLASLt).  Not public.  Built
 * with CUDA=1 only.
 *
 * Errors: ops do not return errors (backend.h), so the first failure of an op (a CUDA or cuBLASLt
 * error, or scratch memory that could not be had) is recorded here and reported, again and again,
 * by every later upload and download: a backend that failed stays failed.
 */
#ifndef MGT_BACKEND_CUDA_IMPL_H
#define MGT_BACKEND_CUDA_IMPL_H

/* cublasLt.h declares a function without a prototype: keep DEVELOPER=1's warning for our code */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "kernels.h"

/* cuBLASLt workspace, and the number of cached GEMM plans (shapes seen by the linear layers). */
#define CUDA_LT_WS_BYTES ((size_t)32 << 20)
enum { CUDA_PLANS = 128 };

/* What a cached GEMM plan was built for: every field that changes the descriptors, layouts or
 * the heuristic's choice.  All int64_t so the struct has no padding and compares with memcmp. */
typedef struct {
	int64_t ta, tb;   /* A, B transposed (cuBLAS column-major view) */
	int64_t m, n, k;
	int64_t ab;       /* cudaDataType of A, and of B unless bt says otherwise (the bias is CUDA_R_32F) */
	int64_t dt;       /* cudaDataType of C and D: CUDA_R_32F, or a 16-bit type (ab's: MGT_GEMM_D16;
			   * bf16 or fp16 with fp8 operands: gemm_fp8) */
	int64_t epi;      /* cublasLtEpilogue_t: DEFAULT or BIAS */
	int64_t acc;      /* beta != 0 (C = D is read) */
	int64_t align;    /* least alignment in bytes of the pointers (<= 256), for the heuristic */
	int64_t bt;       /* cudaDataType of B: ab, or fp8's other format (E4M3 x E5M2) */
	int64_t fast;     /* fp8 operands (their scale pointers set at each call): FAST_ACCUM; else 0 */
} cuda_plan_key;

typedef struct {
	bool used;
	cuda_plan_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc; /* lc serves for C and D */
	cublasLtMatmulAlgo_t algo;
} cuda_plan;

/* One entry of the allocation map (open addressing; p == NULL empty, CUDA_TOMB deleted). */
typedef struct {
	void *p;
	size_t bytes;
} cuda_slot;

typedef struct {
	int device;
	cudaStream_t stream;
	cublasLtHandle_t lt;
	void *lt_ws;           /* CUDA_LT_WS_BYTES for cublasLtMatmul */
	void *scratch;         /* the launchers' ws and the GEMMs' 16-bit operand copies */
	size_t scratch_bytes;
	double *dres;          /* device result of sumsq and xent_loss */
	cuda_slot *slots;      /* pointer -> size of every live alloc */
	size_t cap, live, tombs;
	cuda_plan plans[CUDA_PLANS];
	int plan_next;         /* next plan slot to (re)use, round robin */
	bool d16_refused;      /* cuBLASLt refused a 16-bit D (MGT_GEMM_D16): fp32 blocks from then on */
	bool lt_quiet;         /* a cuBLASLt refusal returns false without recording a failure */
	struct cuda_vmm *vmm;  /* reserve's address ranges (cuda_vmm.c); NULL until the first */
	mgt_status err;        /* first failure of an op, MGT_OK if none */
	char msg[256];
} cuda_impl;

/* cuda.c */
/* The kernels' name of an element type (fp32, bf16, fp16). */
static inline mgt_k_dtype mgt_cuda_kt(mgt_elem_type t)
{
	return t == MGT_DT_BF16 ? MGT_K_BF16 : t == MGT_DT_F16 ? MGT_K_F16 : MGT_K_F32;
}

/* Record a failure: mgt_err(code, ...) now, and the backend's first failure for later reports. */
void mgt_cuda_fail(mgt_backend *be, mgt_status code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Record rc (a cudaError_t from a call or launcher) when it is not cudaSuccess; true if it is. */
bool mgt_cuda_ok(mgt_backend *be, const char *op, int rc);
/* The scratch buffer, grown to at least bytes (synchronizing); NULL after recording a failure. */
void *mgt_cuda_scratch(mgt_backend *be, const char *op, size_t bytes);

/* In an op of backend be: call the launcher `call` (which uses `ws`) when the scratch for `bytes` could be had. */
#define WITH_WS(op, bytes, call)                                          \
	do {                                                              \
		void *ws = mgt_cuda_scratch(be, op, bytes);               \
		if (ws)                                                   \
			mgt_cuda_ok(be, op, call);                        \
	} while (0)

/* cuda_vmm.c: unmap the granules discard gave back once the work queued before it has run
 * (idle: the stream is known to be idle, nothing to wait for); free every reservation left
 * (destroy, before the allocation map's buffers: a fallback reservation is one of them). */
void mgt_cuda_vmm_flush(mgt_backend *be, bool idle);
void mgt_cuda_vmm_free_all(mgt_backend *be);

/* cuda_gemm.c: freeing the cached GEMM plans (the linear ops are there too). */
void mgt_cuda_plans_free(cuda_impl *im);

/* The ops of backend.h, mgt_cuda_<op> (cuda.c, cuda_attn.c, cuda_gemm.c), declared from its list. */
#define MGT_CUDA_OP_DECL(ret, n, params) ret mgt_cuda_##n params;
MGT_BACKEND_OPS(MGT_CUDA_OP_DECL)

#endif
