/* tests/sim/sim_runtime.cc: the CUDA runtime and cuBLASLt functions that lib/backend/cuda.c,
 * cuda_gemm.c and the kernels call, simulated on the host for make check-sim (linked instead of
 * libcudart and libcublasLt; the toolkit's headers give the types and prototypes).
 *
 * Runtime: one device (properties of a plausible sm_90 part; cudaMemGetInfo: 16 GB, 15 free less
 * the live buffers and mapped granules; MGT_SIM_CC=8.0, say, makes it report
 * that compute capability, for mgt_backend_cuda_fp8_supported's refusal); device memory is sim_mem.cc's
 * guarded arena (256-byte aligned, filled with 0xFF bytes, i.e. NaN floats, so that reading
 * memory nobody wrote shows): cudaMemcpy and cudaMemset check that their ranges lie inside live
 * allocations on the side(s) their kind says are the device's, and that host sides are not
 * device memory, and every guard is checked after them; cudaFree checks its pointer.  Streams
 * are tokens: all work, kernels included, runs synchronously at the call.  Errors:
 * cudaGetLastError returns and clears the last error of a call or launch; a fault (an access
 * outside the buffers, a race between blocks, a touched guard) is sticky as on a GPU: every
 * later call returns cudaErrorIllegalAddress (cuBLASLt: CUBLAS_STATUS_EXECUTION_FAILED).
 *
 * cuBLASLt: descriptors, layouts and preferences record their attributes (an attribute this file
 * does not know, or a value of the wrong size, is CUBLAS_STATUS_INVALID_VALUE with a message);
 * the heuristic returns one algorithm, valid for the alignments the preference promised;
 * cublasLtMatmul checks the shapes (op(A) m x k, op(B) k x n, C and D m x n, leading dimensions)
 * and types (A and B CUDA_R_32F, 16BF or 16F alike; C and D CUDA_R_32F or A's type, D rounded to
 * nearest even; compute 32F; an fp32 bias) and the
 * pointers' alignment against the algorithm's, then computes column-major, as cuBLASLt defines
 * it: D = alpha op(A) op(B) + beta C (+ bias[i] per row with the BIAS epilogue), each dot
 * product a sequential fp32 FMA chain; C is not read when beta == 0.  fp8 operands (CUDA_R_8F_E4M3
 * or E5M2, not both E5M2) as Hopper takes them: "TN" only (A transposed, B not), lda and ldb
 * multiples of 16, no epilogue, C = D of type fp32, bf16 or fp16; bytes decoded here from their
 * fields (not lib/util's tables), the exact products summed by the same fp32 chain, then
 * D = alpha sa sb acc (+ beta C) with sa, sb the A_SCALE_POINTER / B_SCALE_POINTER floats (1
 * when unset) multiplied in double, then rounded to fp32; FAST_ACCUM is accepted and changes
 * nothing.  Not simulated: other epilogues, batched or strided layouts, row-major orders, scale
 * modes, D and C scale pointers, fp8 D, tensor-core rounding.  cublasLtGetVersion: the header's
 * CUBLAS_VERSION, or MGT_SIM_LT_VERSION. */
#include "cuda_sim.h"

#include <cublasLt.h>
#include <cuda.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <map>

namespace {

thread_local cudaError_t last_err = cudaSuccess;
std::atomic<int> sticky{0}; /* the first fault's cudaError_t, for good */
int cur_device = 0;

cudaError_t fail(cudaError_t e, const char *fn, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
cudaError_t fail(cudaError_t e, const char *fn, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "cuda sim: %s: ", fn);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	last_err = e;
	return e;
}

bool is_device(const void *p, size_t n) { return mgt_sim_mem_inside(p, n); }

/* Why a range is not device memory, when it is a reservation's (else ""). */
const char *unmapped(const void *p, size_t n)
{
	return mgt_sim_mem_unmapped(p, n) ? " (a reservation: a granule not mapped, never committed or given back)" : "";
}

/* Does the pointer fall inside device memory at all (for host sides that must not)? */
bool touches_device(const void *p) { return mgt_sim_mem_touches(p); }

/* The sticky fault, or e. */
cudaError_t faulted(cudaError_t e = cudaSuccess)
{
	const int f = sticky.load();
	return f ? (cudaError_t)f : e;
}

bool stream_ok(cudaStream_t s);

} // namespace

void mgt_sim_set_error(cudaError_t e) { last_err = e; }

void mgt_sim_fault(cudaError_t e)
{
	int none = 0;
	sticky.compare_exchange_strong(none, (int)e);
}

/* ---- device and errors ---- */

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
	if (d != 0)
		return fail(cudaErrorInvalidDevice, "cudaSetDevice", "no device %d", d);
	cur_device = d;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
	*d = cur_device;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
	if (d != 0)
		return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties", "no device %d", d);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "mgt CUDA simulator");
	p->totalGlobalMem = (size_t)16 << 30;
	p->sharedMemPerBlock = 48 * 1024;
	p->sharedMemPerBlockOptin = 99 * 1024;
	p->regsPerBlock = 65536;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
	p->maxThreadsDim[2] = 64;
	p->maxGridSize[0] = 2147483647;
	p->maxGridSize[1] = p->maxGridSize[2] = 65535;
	const char *cc = getenv("MGT_SIM_CC");
	if (!cc || sscanf(cc, "%d.%d", &p->major, &p->minor) != 2)
		p->major = 9, p->minor = 0;
	p->multiProcessorCount = 2;
	p->maxThreadsPerMultiProcessor = 2048;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return faulted(); }

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_err;
	last_err = cudaSuccess;
	return faulted(e);
}

cudaError_t cudaPeekAtLastError(void) { return faulted(last_err); }

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error (simulated)";
	case cudaErrorInvalidValue: return "invalid argument (simulated)";
	case cudaErrorMemoryAllocation: return "out of memory (simulated)";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument (simulated)";
	case cudaErrorInvalidDevice: return "invalid device ordinal (simulated)";
	case cudaErrorInvalidDevicePointer: return "invalid device pointer (simulated)";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle (simulated)";
	case cudaErrorInvalidDeviceFunction: return "invalid device function (simulated)";
	case cudaErrorIllegalAddress:
		return "an illegal memory access was encountered (simulated: see the cuda sim report above)";
	default: return "CUDA error (simulated)";
	}
}

const char *cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	*p = NULL;
	if (faulted())
		return faulted();
	if (bytes == 0)
		return cudaSuccess;
	void *q = mgt_sim_mem_alloc(bytes);
	if (!q)
		return fail(cudaErrorMemoryAllocation, "cudaMalloc", "%zu bytes", bytes);
	*p = q;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	if (!p)
		return cudaSuccess;
	if (!mgt_sim_mem_free(p))
		return fail(cudaErrorInvalidDevicePointer, "cudaFree", "%p is not an allocation", p);
	return faulted();
}

/* 16 GB, of which 1 GB is taken (the context's) and the live buffers and mapped granules. */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
	const size_t used = mgt_sim_mem_used();
	*total = (size_t)16 << 30;
	*free_b = ((size_t)15 << 30) > used ? ((size_t)15 << 30) - used : 0;
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	if (!stream_ok(s))
		return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync", "bad stream");
	if (n && !is_device(p, n))
		return fail(cudaErrorInvalidValue, "cudaMemsetAsync",
			    "[%p, +%zu) is not inside one device allocation%s", p, n, unmapped(p, n));
	if (faulted())
		return faulted();
	memset(p, v, n);
	mgt_sim_mem_check("cudaMemset");
	return faulted();
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
			    cudaStream_t s)
{
	static const char fn[] = "cudaMemcpyAsync";
	if (!stream_ok(s))
		return fail(cudaErrorInvalidResourceHandle, fn, "bad stream");
	if (!n)
		return cudaSuccess;
	const bool dd = k == cudaMemcpyDeviceToDevice || k == cudaMemcpyHostToDevice;
	const bool sd = k == cudaMemcpyDeviceToDevice || k == cudaMemcpyDeviceToHost;
	if (k == cudaMemcpyDefault || k == cudaMemcpyHostToHost)
		return fail(cudaErrorInvalidValue, fn, "kind %d not simulated", (int)k);
	if (dd ? !is_device(dst, n) : touches_device(dst))
		return fail(cudaErrorInvalidValue, fn, "destination [%p, +%zu) is %s device memory (kind %d)%s",
			    dst, n, dd ? "not inside" : "", (int)k, unmapped(dst, n));
	if (sd ? !is_device(src, n) : touches_device(src))
		return fail(cudaErrorInvalidValue, fn, "source [%p, +%zu) is %s device memory (kind %d)%s", src,
			    n, sd ? "not inside" : "", (int)k, unmapped(src, n));
	if (faulted())
		return faulted();
	memmove(dst, src, n);
	mgt_sim_mem_check("cudaMemcpy");
	return faulted();
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
	return cudaMemcpyAsync(dst, src, n, k, 0);
}

/* ---- streams: tokens ---- */

struct CUstream_st {
	unsigned magic;
};

namespace {
const unsigned STREAM_MAGIC = 0x5717EA4u;
bool stream_ok(cudaStream_t s) { return !s || s->magic == STREAM_MAGIC; }
} // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = new CUstream_st{STREAM_MAGIC};
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (!s || !stream_ok(s))
		return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy", "bad stream");
	s->magic = 0;
	delete s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	if (!stream_ok(s))
		return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize", "bad stream");
	return faulted();
}

/* ---- events: every call has run when it returns, so an event is always complete ---- */

struct CUevent_st {
	unsigned magic;
};

namespace {
const unsigned EVENT_MAGIC = 0xE7E47u;
bool event_ok(cudaEvent_t e) { return e && e->magic == EVENT_MAGIC; }
} // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	*e = new CUevent_st{EVENT_MAGIC};
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (!event_ok(e))
		return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy", "bad event");
	e->magic = 0;
	delete e;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!event_ok(e) || !stream_ok(s))
		return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord", "bad event or stream");
	return faulted();
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	if (!event_ok(e))
		return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize", "bad event");
	return faulted();
}

/* ---- the driver's virtual memory management, through cudaGetDriverEntryPoint(ByVersion) ----
 * cuMemGetAllocationGranularity: sim_mem.cc's granularity (a page, so that a tiny model's shards
 * span several granules; a GPU's is 2 MiB).  cuMemAddressReserve: a reservation of sim_mem.cc
 * (size a multiple of the granularity, no fixed address or alignment asked).  cuMemCreate: a handle
 * (pinned device memory of device 0, size a multiple of the granularity); cuMemMap maps all of a
 * live handle at offset 0 onto unmapped granules; cuMemSetAccess needs the range mapped and
 * read-write access from device 0; cuMemRelease drops the handle (the mapping stays); cuMemUnmap
 * needs the range mapped; cuMemAddressFree needs the whole reservation with nothing mapped.  Any
 * other use: CUDA_ERROR_INVALID_VALUE with a message.  MGT_SIM_VMM=0: the entry points are not
 * found (a driver without them), for the backend's fallback. */

namespace {
std::map<unsigned long long, size_t> handles; /* live cuMemCreate handles -> size */
unsigned long long next_handle = 1;

CUresult drv_fail(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
CUresult drv_fail(const char *fn, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "cuda sim: %s: ", fn);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return CUDA_ERROR_INVALID_VALUE;
}

void *dp(CUdeviceptr p) { return (void *)(uintptr_t)p; }

CUresult CUDAAPI sim_granularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags o)
{
	(void)o;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    prop->location.id != 0)
		return drv_fail("cuMemGetAllocationGranularity", "not pinned memory of device 0");
	*g = mgt_sim_mem_granularity();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
	if (align || addr || flags)
		return drv_fail("cuMemAddressReserve", "alignment, address or flags asked (not simulated)");
	void *q = mgt_sim_mem_reserve(size);
	if (!q)
		return size % mgt_sim_mem_granularity() ? drv_fail("cuMemAddressReserve", "%zu bytes: not granules", size)
							: CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)q;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_address_free(CUdeviceptr p, size_t size)
{
	return mgt_sim_mem_address_free(dp(p), size) ? CUDA_SUCCESS
		: drv_fail("cuMemAddressFree", "[%p, +%zu) is not a whole reservation with nothing mapped", dp(p), size);
}

CUresult CUDAAPI sim_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	size_t g = 1;
	if (flags || sim_granularity(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !size || size % g)
		return drv_fail("cuMemCreate", "%zu bytes, flags %llu", size, flags);
	*h = next_handle++;
	handles[*h] = size;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_release(CUmemGenericAllocationHandle h)
{
	return handles.erase(h) ? CUDA_SUCCESS : drv_fail("cuMemRelease", "no handle %llu", h);
}

CUresult CUDAAPI sim_map(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
			 unsigned long long flags)
{
	auto it = handles.find(h);
	if (it == handles.end() || it->second != size || off || flags)
		return drv_fail("cuMemMap", "handle %llu, %zu bytes at offset %zu", h, size, off);
	return mgt_sim_mem_map(dp(p), size, true) ? CUDA_SUCCESS
		: drv_fail("cuMemMap", "[%p, +%zu): not unmapped granules of one reservation", dp(p), size);
}

CUresult CUDAAPI sim_unmap(CUdeviceptr p, size_t size)
{
	return mgt_sim_mem_map(dp(p), size, false) ? CUDA_SUCCESS
		: drv_fail("cuMemUnmap", "[%p, +%zu): not mapped granules of one reservation", dp(p), size);
}

CUresult CUDAAPI sim_set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
	if (n != 1 || d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id != 0 ||
	    d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return drv_fail("cuMemSetAccess", "not read-write access from device 0");
	return mgt_sim_mem_mapped(dp(p), size) ? CUDA_SUCCESS
		: drv_fail("cuMemSetAccess", "[%p, +%zu) is not mapped", dp(p), size);
}

struct entry_t {
	const char *name;
	void *fn;
};
const entry_t entries[] = {
	{"cuMemGetAllocationGranularity", (void *)sim_granularity}, {"cuMemAddressReserve", (void *)sim_reserve},
	{"cuMemAddressFree", (void *)sim_address_free}, {"cuMemCreate", (void *)sim_create},
	{"cuMemRelease", (void *)sim_release}, {"cuMemMap", (void *)sim_map}, {"cuMemUnmap", (void *)sim_unmap},
	{"cuMemSetAccess", (void *)sim_set_access},
};

cudaError_t entry_point(const char *sym, void **fn, cudaDriverEntryPointQueryResult *q)
{
	*fn = NULL;
	const char *e = getenv("MGT_SIM_VMM");
	for (const entry_t &x : entries)
		if (!strcmp(sym, x.name) && !(e && !strcmp(e, "0")))
			*fn = x.fn;
	if (q)
		*q = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}
} // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int v, unsigned long long flags,
					     cudaDriverEntryPointQueryResult *q)
{
	(void)v, (void)flags;
	return entry_point(sym, fn, q);
}

/* ================= cuBLASLt ================= */

struct cublasLtContext {
	unsigned magic;
};
struct cublasLtMatmulDescOpaque_st_sim {
	cublasComputeType_t compute;
	cudaDataType_t scale;
	int32_t ta, tb;
	uint32_t epi;
	const void *bias;
	int32_t bias_t; /* -1: D's type */
	const void *sptr[2];  /* A_SCALE_POINTER, B_SCALE_POINTER (device floats; NULL: 1) */
	int8_t fast;          /* FAST_ACCUM */
};
struct cublasLtMatrixLayoutOpaque_st_sim {
	cudaDataType_t t;
	uint64_t rows, cols;
	int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_st_sim {
	uint64_t ws;
	uint32_t align[4]; /* A, B, C, D */
};

namespace {

typedef cublasLtMatmulDescOpaque_st_sim desc_t;
typedef cublasLtMatrixLayoutOpaque_st_sim layout_t;
typedef cublasLtMatmulPreferenceOpaque_st_sim pref_t;

/* The opaque structs of cublasLt.h are fixed-size buffers: ours live in them. */
static_assert(sizeof(desc_t) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");
static_assert(sizeof(layout_t) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
static_assert(sizeof(pref_t) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref fits");

desc_t *D_(cublasLtMatmulDesc_t d) { return reinterpret_cast<desc_t *>(d); }
layout_t *L_(cublasLtMatrixLayout_t l) { return reinterpret_cast<layout_t *>(l); }
pref_t *P_(cublasLtMatmulPreference_t p) { return reinterpret_cast<pref_t *>(p); }

/* The algorithm: cublasLtMatmulAlgo_t's data holds a tag and the alignments it assumes. */
const uint64_t ALGO_TAG = 0x6d67742d73696dull;

cublasStatus_t lt_fail(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t lt_fail(const char *fn, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "cuda sim: %s: ", fn);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return CUBLAS_STATUS_INVALID_VALUE;
}

template <typename T> cublasStatus_t get_attr(const char *fn, T *dst, const void *v, size_t n, int a)
{
	if (n != sizeof *dst || !v)
		return lt_fail(fn, "attribute %d: %zu bytes given, %zu expected", a, n, sizeof *dst);
	memcpy(dst, v, sizeof *dst);
	return CUBLAS_STATUS_SUCCESS;
}

bool ab_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }
bool fp8_type(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : fp8_type(t) ? 1 : 2; }

/* The value of fp8 byte v from its fields: E4M3 bias 7, 3 mantissa bits, no Inf, S.1111.111 NaN;
 * E5M2 bias 15, 2 mantissa bits, exponent 31 Inf (mantissa 0) or NaN; exponent 0 subnormal. */
float fp8_value(uint8_t v, bool e5m2)
{
	const int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
	const int e = (v & 0x7f) >> mb, f = v & ((1 << mb) - 1);
	const float sign = (v & 0x80) ? -1.0f : 1.0f;
	if (e5m2 && e == 31)
		return f ? NAN : sign * INFINITY;
	if (!e5m2 && e == 15 && f == 7)
		return NAN;
	return sign * ldexpf((float)(e ? f + (1 << mb) : f), (e ? e : 1) - bias - mb);
}

float load(const void *p, cudaDataType_t t, size_t i)
{
	if (t == CUDA_R_32F)
		return static_cast<const float *>(p)[i];
	if (fp8_type(t))
		return fp8_value(static_cast<const uint8_t *>(p)[i], t == CUDA_R_8F_E5M2);
	const uint16_t h = static_cast<const uint16_t *>(p)[i];
	return t == CUDA_R_16BF ? __uint_as_float((uint32_t)h << 16) : mgt_sim_h2f(h);
}

/* p[i] = v as type t (16-bit types rounded to nearest even, as cuBLASLt's epilogue rounds D) */
void store(void *p, cudaDataType_t t, size_t i, float v)
{
	if (t == CUDA_R_32F)
		static_cast<float *>(p)[i] = v;
	else
		static_cast<uint16_t *>(p)[i] = t == CUDA_R_16BF ? mgt_sim_f2bf(v) : mgt_sim_f2h(v);
}

/* The types of an fp8 product (A, B fp8 and not both E5M2, "TN", lda and ldb multiples of 16, no
 * epilogue, C = D of type fp32, bf16 or fp16), or of one without fp8 (no scale pointers). */
cublasStatus_t check_fp8(const char *fn, const desc_t *d, const layout_t *a, const layout_t *b,
			 const layout_t *dd)
{
	if (!fp8_type(a->t) && !fp8_type(b->t))
		return d->sptr[0] || d->sptr[1]
			       ? lt_fail(fn, "A/B scale pointers without fp8 operands not simulated")
			       : CUBLAS_STATUS_SUCCESS;
	if (!fp8_type(a->t) || !fp8_type(b->t) || (a->t == CUDA_R_8F_E5M2 && b->t == CUDA_R_8F_E5M2))
		return lt_fail(fn, "fp8 types A %d B %d not supported", (int)a->t, (int)b->t);
	if (!d->ta || d->tb)
		return lt_fail(fn, "fp8 needs A transposed and B not (\"TN\"); got ta %d tb %d", d->ta, d->tb);
	if (a->ld % 16 || b->ld % 16)
		return lt_fail(fn, "fp8 leading dimensions %lld, %lld not multiples of 16", (long long)a->ld,
			       (long long)b->ld);
	if (d->epi != CUBLASLT_EPILOGUE_DEFAULT)
		return lt_fail(fn, "epilogue %u with fp8 operands not simulated", d->epi);
	if (!ab_type(dd->t))
		return lt_fail(fn, "D type %d with fp8 operands not simulated", (int)dd->t);
	return CUBLAS_STATUS_SUCCESS;
}

/* Shapes and types of a product; m, n, k out. */
cublasStatus_t check_shapes(const char *fn, const desc_t *d, const layout_t *a, const layout_t *b,
			    const layout_t *c, const layout_t *dd, uint64_t *m, uint64_t *n,
			    uint64_t *k)
{
	if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
		return lt_fail(fn, "compute type %d / scale type %d not simulated", (int)d->compute,
			       (int)d->scale);
	const bool f8 = fp8_type(a->t) || fp8_type(b->t);
	cublasStatus_t s = check_fp8(fn, d, a, b, dd);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	if ((!f8 && (!ab_type(a->t) || a->t != b->t)) || c->t != dd->t ||
	    (!f8 && dd->t != CUDA_R_32F && dd->t != a->t))
		return lt_fail(fn, "types A %d B %d C %d D %d not simulated", (int)a->t, (int)b->t,
			       (int)c->t, (int)dd->t);
	if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS)
		return lt_fail(fn, "epilogue %u not simulated", d->epi);
	if (d->epi == CUBLASLT_EPILOGUE_BIAS && d->bias_t != -1 && d->bias_t != CUDA_R_32F)
		return lt_fail(fn, "bias type %d not simulated (fp32 only)", d->bias_t);
	*m = dd->rows;
	*n = dd->cols;
	*k = d->ta ? a->rows : a->cols;
	const uint64_t am = d->ta ? a->cols : a->rows;
	const uint64_t bk = d->tb ? b->cols : b->rows, bn = d->tb ? b->rows : b->cols;
	if (am != *m || bk != *k || bn != *n || c->rows != *m || c->cols != *n)
		return lt_fail(fn,
			       "shapes disagree: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, "
			       "D %llu x %llu",
			       (unsigned long long)am, (unsigned long long)*k, (unsigned long long)bk,
			       (unsigned long long)bn, (unsigned long long)c->rows,
			       (unsigned long long)c->cols, (unsigned long long)*m,
			       (unsigned long long)*n);
	return CUBLAS_STATUS_SUCCESS;
}

bool aligned(const void *p, uint32_t a) { return !p || a <= 1 || (uintptr_t)p % a == 0; }

/* Column-major matrix l at p lies inside one device allocation. */
size_t span(const layout_t *l) { return ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * type_bytes(l->t); }

bool inside(const void *p, const layout_t *l)
{
	if (!l->rows || !l->cols)
		return true;
	return is_device(p, span(l));
}

/* unmapped()'s note for the first of A, B, D in a reservation's unmapped granules */
const char *vm_note(const void *a, const layout_t *la, const void *b, const layout_t *lb, const void *d,
		    const layout_t *ld)
{
	const void *p[3] = {a, b, d};
	const layout_t *l[3] = {la, lb, ld};
	for (int i = 0; i < 3; i++)
		if (l[i]->rows && l[i]->cols && *unmapped(p[i], span(l[i])))
			return unmapped(p[i], span(l[i]));
	return "";
}

} // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	*h = new cublasLtContext{0x17};
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS (simulated)";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (simulated)";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (simulated)";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (simulated)";
	default: return "cuBLAS error (simulated)";
	}
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
					cudaDataType_t st)
{
	desc_t *x = new desc_t();
	x->compute = ct;
	x->scale = st;
	x->ta = x->tb = CUBLAS_OP_N;
	x->epi = CUBLASLT_EPILOGUE_DEFAULT;
	x->bias = NULL;
	x->bias_t = -1;
	x->sptr[0] = x->sptr[1] = NULL;
	x->fast = 0;
	*d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	delete D_(d);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
					      cublasLtMatmulDescAttributes_t a, const void *v,
					      size_t n)
{
	static const char fn[] = "cublasLtMatmulDescSetAttribute";
	desc_t *x = D_(d);
	cublasStatus_t s;
	switch (a) {
	case CUBLASLT_MATMUL_DESC_TRANSA:
	case CUBLASLT_MATMUL_DESC_TRANSB: {
		int32_t op = 0;
		if ((s = get_attr(fn, &op, v, n, a)) != CUBLAS_STATUS_SUCCESS)
			return s;
		if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
			return lt_fail(fn, "operation %d not simulated", op);
		(a == CUBLASLT_MATMUL_DESC_TRANSA ? x->ta : x->tb) = op == CUBLAS_OP_T;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_EPILOGUE: return get_attr(fn, &x->epi, v, n, a);
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get_attr(fn, &x->bias, v, n, a);
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return get_attr(fn, &x->bias_t, v, n, a);
	case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return get_attr(fn, &x->sptr[0], v, n, a);
	case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return get_attr(fn, &x->sptr[1], v, n, a);
	case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return get_attr(fn, &x->fast, v, n, a);
	default: return lt_fail(fn, "attribute %d not simulated", (int)a);
	}
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
					  uint64_t cols, int64_t ld)
{
	if (ld < 1 || (uint64_t)ld < rows)
		return lt_fail("cublasLtMatrixLayoutCreate", "ld %lld < rows %llu", (long long)ld,
			       (unsigned long long)rows);
	layout_t *x = new layout_t{t, rows, cols, ld};
	*l = reinterpret_cast<cublasLtMatrixLayout_t>(x);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	delete L_(l);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	pref_t *x = new pref_t{0, {256, 256, 256, 256}};
	*p = reinterpret_cast<cublasLtMatmulPreference_t>(x);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	delete P_(p);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t a,
						    const void *v, size_t n)
{
	static const char fn[] = "cublasLtMatmulPreferenceSetAttribute";
	pref_t *x = P_(p);
	switch (a) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return get_attr(fn, &x->ws, v, n, a);
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return get_attr(fn, &x->align[0], v, n, a);
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return get_attr(fn, &x->align[1], v, n, a);
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return get_attr(fn, &x->align[2], v, n, a);
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return get_attr(fn, &x->align[3], v, n, a);
	default: return lt_fail(fn, "attribute %d not simulated", (int)a);
	}
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
					      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
					      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
					      cublasLtMatmulPreference_t p, int req,
					      cublasLtMatmulHeuristicResult_t res[], int *nres)
{
	uint64_t m, n, k;
	*nres = 0;
	if (!h || req < 1)
		return lt_fail("cublasLtMatmulAlgoGetHeuristic", "no handle or no room for results");
	cublasStatus_t s = check_shapes("cublasLtMatmulAlgoGetHeuristic", D_(d), L_(a), L_(b), L_(c),
					L_(dd), &m, &n, &k);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	memset(&res[0], 0, sizeof res[0]);
	uint64_t data[8] = {ALGO_TAG};
	memcpy(&data[1], P_(p)->align, sizeof P_(p)->align);
	static_assert(sizeof data <= sizeof res[0].algo.data, "algo data");
	memcpy(res[0].algo.data, data, sizeof data);
	res[0].workspaceSize = 0;
	res[0].state = CUBLAS_STATUS_SUCCESS;
	res[0].wavesCount = 1.0f;
	*nres = 1;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
			      const void *A, cublasLtMatrixLayout_t Ad, const void *B,
			      cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
			      cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
			      const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb,
			      cudaStream_t st)
{
	static const char fn[] = "cublasLtMatmul";
	const desc_t *d = D_(desc);
	const layout_t *la = L_(Ad), *lb = L_(Bd), *lc = L_(Cd), *ld = L_(Dd);
	uint64_t m, n, k, data[8];
	(void)ws, (void)wsb;
	if (!h || !stream_ok(st))
		return lt_fail(fn, "bad handle or stream");
	if (faulted())
		return CUBLAS_STATUS_EXECUTION_FAILED;
	cublasStatus_t s = check_shapes(fn, d, la, lb, lc, ld, &m, &n, &k);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	if (algo) {
		memcpy(data, algo->data, sizeof data);
		if (data[0] != ALGO_TAG)
			return lt_fail(fn, "the algorithm is not one the heuristic gave");
		const uint32_t *al = reinterpret_cast<const uint32_t *>(&data[1]);
		if (!aligned(A, al[0]) || !aligned(B, al[1]) || !aligned(C, al[2]) || !aligned(D, al[3]))
			return lt_fail(fn, "pointers A %p B %p C %p D %p less aligned than the algorithm's "
				       "%u %u %u %u bytes", A, B, C, D, al[0], al[1], al[2], al[3]);
	}
	const bool epi_bias = d->epi == CUBLASLT_EPILOGUE_BIAS;
	if (epi_bias && !d->bias)
		return lt_fail(fn, "BIAS epilogue without a bias pointer");
	if (!inside(A, la) || !inside(B, lb) || !inside(D, ld) ||
	    (epi_bias && !is_device(d->bias, m * sizeof(float))))
		return lt_fail(fn, "%s is not inside a device allocation%s", !inside(A, la) ? "A" : !inside(B, lb) ? "B"
			       : !inside(D, ld) ? "D" : "the bias", vm_note(A, la, B, lb, D, ld));
	const float be = *static_cast<const float *>(beta);
	if (be != 0.0f && !inside(C, lc))
		return lt_fail(fn, "C is not inside a device allocation");
	double sab = 1.0;
	for (int i = 0; i < 2; i++) {
		if (d->sptr[i] && !is_device(d->sptr[i], sizeof(float)))
			return lt_fail(fn, "the %c scale pointer is not inside a device allocation", "AB"[i]);
		sab *= d->sptr[i] ? *static_cast<const float *>(d->sptr[i]) : 1.0;
	}
	const bool scaled = d->sptr[0] || d->sptr[1];
	const float al = *static_cast<const float *>(alpha);
	const double als = (double)al * sab;
	const float *bias = static_cast<const float *>(d->bias);
	for (uint64_t j = 0; j < n; j++)
		for (uint64_t i = 0; i < m; i++) {
			float acc = 0.0f;
			for (uint64_t q = 0; q < k; q++) {
				const size_t ai = d->ta ? i * la->ld + q : q * la->ld + i;
				const size_t bi = d->tb ? q * lb->ld + j : j * lb->ld + q;
				acc = fmaf(load(A, la->t, ai), load(B, lb->t, bi), acc);
			}
			float v = scaled ? (float)(als * acc) : al * acc;
			if (be != 0.0f)
				v += be * load(C, lc->t, j * lc->ld + i);
			if (epi_bias)
				v += bias[i];
			store(D, ld->t, j * ld->ld + i, v);
		}
	if (mgt_sim_prof_on) /* each operand once: A, B, C when read, the bias; D */
		mgt_sim_prof_matmul(m, n, k, (double)(m * k * type_bytes(la->t) + k * n * type_bytes(lb->t) +
			(be != 0.0f ? m * n * type_bytes(lc->t) : 0) + (epi_bias ? m * 4 : 0)),
			(double)(m * n * type_bytes(ld->t)));
	return mgt_sim_mem_check("cublasLtMatmul") ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void)
{
	const char *v = getenv("MGT_SIM_LT_VERSION");
	return v && *v ? (size_t)strtoull(v, NULL, 10) : (size_t)CUBLAS_VERSION;
}
