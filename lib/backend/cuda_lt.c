/* lib/backend/cuda_lt.c: cuBLASLt opened at its first use, not at every program start.
 *
 * Linked as a shared library, libcublasLt runs its constructors when a program starts: about
 * 125 ms on the 2-core dev machine (10 starts of an empty program linked against it took 1.26 s,
 * 0.01 s without; NCCL, HDF5 and MPI together cost 11 ms), paid by every start of every mgt
 * program, including the many that never touch a GPU (--help, a refused flag, mgt-tokenize in a
 * shell loop, each rank of a CPU job).  This file defines the cuBLASLt functions the CUDA backend
 * calls (lib/backend/cuda.c, cuda_gemm.c) with cublasLt.h's prototypes; the first call of any of
 * them opens libcublasLt.so.CUBLAS_VER_MAJOR with dlopen, found as the linked library was (the
 * programs' rpath to $(CUDA_HOME)/lib64, then LD_LIBRARY_PATH), and resolves them all.  When the
 * library or one of the functions is missing, every function returns
 * CUBLAS_STATUS_NOT_INITIALIZED (cublasLtGetVersion: 0) and cublasLtGetStatusString says what was
 * missing and why (the backend's error message then carries it: "cuda backend: device 0:
 * cublasLtCreate: ...").
 * Thread-safe (pthread_once); the library stays open until exit.  The simulator (tests/sim/)
 * links its own stand-ins instead of this file. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

/* X(name, parameters, arguments): every function with a cublasStatus_t result */
#define LT_FUNCS(X)                                                                                   \
	X(cublasLtCreate, (cublasLtHandle_t * h), (h))                                                \
	X(cublasLtDestroy, (cublasLtHandle_t h), (h))                                                 \
	X(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t s), \
	  (d, c, s))                                                                                  \
	X(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                                   \
	X(cublasLtMatmulDescSetAttribute,                                                             \
	  (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *b, size_t n), (d, a, b, n)) \
	X(cublasLtMatrixLayoutCreate,                                                                 \
	  (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld), (l, t, r, c, ld)) \
	X(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))                               \
	X(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))                      \
	X(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))                       \
	X(cublasLtMatmulPreferenceSetAttribute,                                                       \
	  (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *b, size_t n), \
	  (p, a, b, n))                                                                               \
	X(cublasLtMatmulAlgoGetHeuristic,                                                             \
	  (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, \
	   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int n,   \
	   cublasLtMatmulHeuristicResult_t r[], int *got),                                            \
	  (h, d, a, b, c, dd, p, n, r, got))                                                          \
	X(cublasLtMatmul,                                                                             \
	  (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,              \
	   cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,     \
	   const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,              \
	   const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn, cudaStream_t st),                  \
	  (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsn, st))

#define LT_PTR(name, params, args) cublasStatus_t(*name) params;
static struct {
	LT_FUNCS(LT_PTR)
	const char *(*cublasLtGetStatusString)(cublasStatus_t);
	size_t (*cublasLtGetVersion)(void);
} lt;
static int lt_ok;
static char lt_why[512];
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

/* dlsym's object pointer stored into a function pointer (POSIX's idiom for the conversion) */
static int lt_resolve(void *h, void *slot, const char *name)
{
	void *p = dlsym(h, name);
	if (!p) {
		snprintf(lt_why, sizeof lt_why, "%s lacks %s", LT_SONAME, name);
		return 0;
	}
	*(void **)slot = p;
	return 1;
}

static void lt_open(void)
{
	void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(lt_why, sizeof lt_why, "cannot open %s (%s)", LT_SONAME, dlerror());
		return;
	}
#define LT_GET(name, params, args) &&lt_resolve(h, &lt.name, #name)
	lt_ok = 1 LT_FUNCS(LT_GET) && lt_resolve(h, &lt.cublasLtGetStatusString, "cublasLtGetStatusString") &&
		lt_resolve(h, &lt.cublasLtGetVersion, "cublasLtGetVersion");
}

static int lt_load(void)
{
	pthread_once(&lt_once, lt_open);
	return lt_ok;
}

#define LT_DEF(name, params, args)                                                                    \
	cublasStatus_t name params                                                                    \
	{                                                                                             \
		return lt_load() ? lt.name args : CUBLAS_STATUS_NOT_INITIALIZED;                      \
	}
LT_FUNCS(LT_DEF)

const char *cublasLtGetStatusString(cublasStatus_t s)
{
	return lt_load() ? lt.cublasLtGetStatusString(s) : lt_why;
}

/* 0 when the library could not be opened (then no version is new enough) */
size_t cublasLtGetVersion(void)
{
	return lt_load() ? lt.cublasLtGetVersion() : 0;
}
