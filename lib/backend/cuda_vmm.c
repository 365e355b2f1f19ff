/* lib/backend: the CUDA backend's reserved memory (backend.h reserve, commit, discard, unreserve),
 * through the driver's virtual memory management: a reservation is address space
 * (cuMemAddressReserve) whose granules (cuMemGetAllocationGranularity's minimum, 2 MiB on current
 * GPUs) are mapped one at a time to device memory of their own (cuMemCreate, cuMemMap,
 * cuMemSetAccess; the handle released at once, so that unmapping frees it) when committed and
 * unmapped when discarded.  Sources: the CUDA Driver API's "Virtual Memory Management" section
 * (cuda.h's comments on these calls); PyTorch's expandable segments map and unmap their pages the
 * same way (c10/cuda/CUDACachingAllocator.cpp, read for the facts: the handle may be released
 * once mapped, and unmapping must wait until the kernels queued before are done).
 *
 * mgt does not link libcuda: the driver's entry points come from the runtime
 * (cudaGetDriverEntryPointByVersion, CUDA 12.5 or later; cudaGetDriverEntryPoint with its query
 * result, CUDA 12.0 to 12.4: older toolkits are not supported here), once per backend.  When they
 * cannot be had (an old driver, a device without virtual memory management) reserve falls back
 * to a whole allocation (alloc), commit does nothing there and discard zeroes, as before this
 * file: FSDP then saves no device memory but runs.
 *
 * Ordering.  cuMemMap and cuMemUnmap act at once, not on the stream, while the kernels queued on
 * the stream run later.  Mapping is safe at once (nothing queued can use a granule before it was
 * committed).  Unmapping is not: discard zeroes the partial granules at its ends on the stream,
 * marks the whole granules inside as pending and records an event after the work queued so far;
 * the pending granules are unmapped when that event has completed: at the next commit that maps
 * memory (which waits for the event, so that the memory it takes back can be reused), at sync
 * (the stream is idle) and at unreserve.  A pending granule committed again before that is
 * zeroed on the stream and kept.  Each granule's state is two bits of its reservation: mapped,
 * and pending unmap. */
#include "backend/cuda_impl.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	char *base;     /* cuMemAddressReserve's address, or alloc's pointer when whole */
	size_t size;    /* the reserved bytes: reserve's rounded up to the granularity */
	size_t n;       /* granules */
	bool whole;     /* no virtual memory management: an ordinary allocation */
	uint64_t *mapped, *pend; /* a bit per granule */
} cuda_resv;

struct cuda_vmm {
	bool tried, ok;  /* entry points looked up; all found and the granularity known */
	size_t gran;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	PFN_cuMemAddressReserve_v10020 reserve;
	PFN_cuMemAddressFree_v10020 address_free;
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 release;
	PFN_cuMemMap_v10020 map;
	PFN_cuMemUnmap_v10020 unmap;
	PFN_cuMemSetAccess_v10020 set_access;
	PFN_cuMemGetAllocationGranularity_v10020 granularity;
	cudaEvent_t ev;  /* recorded by discard after the work queued before it */
	bool pending;    /* some granule is pending unmap */
	cuda_resv *r;
	int nr, cap;
};

static cuda_impl *impl(mgt_backend *be) { return be->impl; }

static bool bit(const uint64_t *w, size_t i) { return w[i / 64] >> (i % 64) & 1; }
static void set_bit(uint64_t *w, size_t i, bool v)
{
	if (v)
		w[i / 64] |= (uint64_t)1 << (i % 64);
	else
		w[i / 64] &= ~((uint64_t)1 << (i % 64));
}

static void count(mgt_backend *be, size_t add, size_t sub)
{
	be->bytes_in_use += add;
	be->bytes_in_use -= sub;
	if (be->bytes_in_use > be->bytes_peak)
		be->bytes_peak = be->bytes_in_use;
}

/* A driver failure recorded as the backend's (MGT_ERR_NOMEM for out of memory). */
static mgt_status drv_fail(mgt_backend *be, const char *call, CUresult r)
{
	mgt_status code = r == CUDA_ERROR_OUT_OF_MEMORY ? MGT_ERR_NOMEM : MGT_ERR_IO;
	mgt_cuda_fail(be, code, "cuda backend: %s: CUresult %d%s", call, (int)r,
		      r == CUDA_ERROR_OUT_OF_MEMORY ? " (out of device memory)" : "");
	return code;
}

/* ---- the driver's entry points ---- */

static bool entry(const char *sym, void **fn)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
	cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q);
#else
	cudaError_t e = cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, &q);
#endif
	if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
		cudaGetLastError();
		*fn = NULL;
		return false;
	}
	return true;
}

static bool vmm_entries(struct cuda_vmm *v)
{
	return entry("cuMemAddressReserve", (void **)&v->reserve) &&
	       entry("cuMemAddressFree", (void **)&v->address_free) && entry("cuMemCreate", (void **)&v->create) &&
	       entry("cuMemRelease", (void **)&v->release) && entry("cuMemMap", (void **)&v->map) &&
	       entry("cuMemUnmap", (void **)&v->unmap) && entry("cuMemSetAccess", (void **)&v->set_access) &&
	       entry("cuMemGetAllocationGranularity", (void **)&v->granularity);
}

/* The entry points, the allocation properties (pinned device memory of this device, read and
 * write access from it) and the granularity; v->ok when all were had. */
static void vmm_start(mgt_backend *be, struct cuda_vmm *v)
{
	v->tried = true;
	if (!vmm_entries(v))
		return;
	v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	v->prop.location.id = impl(be)->device;
	v->access.location = v->prop.location;
	v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (v->granularity(&v->gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !v->gran)
		return;
	if (cudaEventCreateWithFlags(&v->ev, cudaEventDisableTiming) != cudaSuccess) {
		cudaGetLastError();
		return;
	}
	v->ok = true;
}

static struct cuda_vmm *vmm(mgt_backend *be)
{
	cuda_impl *im = impl(be);
	if (!im->vmm && !(im->vmm = calloc(1, sizeof *im->vmm)))
		return NULL;
	if (!im->vmm->tried)
		vmm_start(be, im->vmm);
	return im->vmm;
}

/* The reservation holding [p, p + bytes), or NULL (alloc's memory). */
static cuda_resv *find(mgt_backend *be, const void *p, size_t bytes)
{
	struct cuda_vmm *v = impl(be)->vmm;
	for (int i = 0; v && p && i < v->nr; i++) {
		cuda_resv *r = &v->r[i];
		if ((const char *)p >= r->base && (size_t)((const char *)p - r->base) + bytes <= r->size)
			return r;
	}
	return NULL;
}

/* ---- granules ---- */

static CUdeviceptr at(const cuda_resv *r, size_t g, size_t gran) { return (CUdeviceptr)(uintptr_t)(r->base + g * gran); }

static mgt_status map_one(mgt_backend *be, struct cuda_vmm *v, cuda_resv *r, size_t g)
{
	CUmemGenericAllocationHandle h;
	CUresult e = v->create(&h, v->gran, &v->prop, 0);
	if (e != CUDA_SUCCESS)
		return drv_fail(be, "commit: cuMemCreate", e);
	e = v->map(at(r, g, v->gran), v->gran, 0, h, 0);
	if (e == CUDA_SUCCESS && (e = v->set_access(at(r, g, v->gran), v->gran, &v->access, 1)) != CUDA_SUCCESS)
		v->unmap(at(r, g, v->gran), v->gran);
	v->release(h); /* the mapping holds the memory from here on */
	if (e != CUDA_SUCCESS)
		return drv_fail(be, "commit: cuMemMap", e);
	set_bit(r->mapped, g, true);
	count(be, v->gran, 0);
	return MGT_OK;
}

static void unmap_one(mgt_backend *be, struct cuda_vmm *v, cuda_resv *r, size_t g)
{
	CUresult e = v->unmap(at(r, g, v->gran), v->gran);
	if (e != CUDA_SUCCESS)
		drv_fail(be, "discard: cuMemUnmap", e);
	set_bit(r->mapped, g, false);
	set_bit(r->pend, g, false);
	count(be, 0, v->gran);
}

void mgt_cuda_vmm_flush(mgt_backend *be, bool idle)
{
	struct cuda_vmm *v = impl(be)->vmm;
	if (!v || !v->pending)
		return;
	if (!idle && !mgt_cuda_ok(be, "discard: cudaEventSynchronize", cudaEventSynchronize(v->ev)))
		return;
	for (int i = 0; i < v->nr; i++)
		for (size_t g = 0; g < v->r[i].n; g++)
			if (bit(v->r[i].pend, g))
				unmap_one(be, v, &v->r[i], g);
	v->pending = false;
}

/* Zero [p, p + bytes) on the stream where it lies in mapped granules not pending unmap (those
 * read as zeros already, and a memset queued after the event recorded for them could run after
 * they are unmapped). */
static void zero_mapped(mgt_backend *be, cuda_resv *r, size_t gran, char *p, size_t bytes)
{
	while (bytes) {
		size_t g = (size_t)(p - r->base) / gran, n = r->base + (g + 1) * gran - p;
		if (n > bytes)
			n = bytes;
		if (bit(r->mapped, g) && !bit(r->pend, g))
			mgt_cuda_zero(be, p, n);
		p += n, bytes -= n;
	}
}

/* ---- the ops ---- */

static mgt_status add_resv(mgt_backend *be, struct cuda_vmm *v, cuda_resv r)
{
	if (v->nr == v->cap) {
		int cap = v->cap ? 2 * v->cap : 8;
		cuda_resv *n = realloc(v->r, (size_t)cap * sizeof *n);
		if (!n)
			return mgt_err(MGT_ERR_NOMEM, "cuda backend: reserve: out of host memory");
		v->r = n, v->cap = cap;
	}
	(void)be;
	v->r[v->nr++] = r;
	return MGT_OK;
}

/* Address space of r->size bytes with its bitmaps. */
static mgt_status reserve_space(mgt_backend *be, struct cuda_vmm *v, cuda_resv *r)
{
	size_t words = (r->n + 63) / 64;
	r->mapped = calloc(words ? words : 1, sizeof *r->mapped);
	r->pend = calloc(words ? words : 1, sizeof *r->pend);
	if (!r->mapped || !r->pend)
		return mgt_err(MGT_ERR_NOMEM, "cuda backend: reserve: out of host memory");
	CUdeviceptr d = 0;
	CUresult e = v->reserve(&d, r->size, 0, 0, 0);
	if (e != CUDA_SUCCESS)
		return mgt_err(e == CUDA_ERROR_OUT_OF_MEMORY ? MGT_ERR_NOMEM : MGT_ERR_IO,
			       "cuda backend: reserve: cuMemAddressReserve of %zu bytes: CUresult %d", r->size, (int)e);
	r->base = (char *)(uintptr_t)d;
	return MGT_OK;
}

void *mgt_cuda_reserve(mgt_backend *be, size_t bytes)
{
	struct cuda_vmm *v = vmm(be);
	if (!v) {
		mgt_err(MGT_ERR_NOMEM, "cuda backend: reserve: out of host memory");
		return NULL;
	}
	cuda_resv r = { 0 };
	r.whole = !v->ok;
	r.size = r.whole ? bytes : (bytes ? bytes + v->gran - 1 : v->gran) / v->gran * v->gran;
	r.n = r.whole ? 0 : r.size / v->gran;
	mgt_status st = r.whole ? ((r.base = mgt_cuda_alloc(be, bytes)) ? MGT_OK : MGT_ERR_NOMEM)
				: reserve_space(be, v, &r);
	if (!st && (st = add_resv(be, v, r)) != MGT_OK && !r.whole)
		v->address_free((CUdeviceptr)(uintptr_t)r.base, r.size);
	if (st) {
		if (r.whole)
			mgt_cuda_free(be, r.base);
		free(r.mapped), free(r.pend);
		return NULL;
	}
	return r.base;
}

mgt_status mgt_cuda_commit(mgt_backend *be, void *p, size_t bytes)
{
	cuda_impl *im = impl(be);
	cuda_resv *r = find(be, p, bytes);
	if (im->err != MGT_OK)
		return mgt_err(im->err, "%s", im->msg);
	if (!r || r->whole || !bytes)
		return MGT_OK;
	struct cuda_vmm *v = im->vmm;
	size_t g0 = (size_t)((char *)p - r->base) / v->gran, g1 = ((size_t)((char *)p - r->base) + bytes - 1) / v->gran;
	for (size_t g = g0; g <= g1; g++) {
		if (bit(r->pend, g)) { /* given back but still mapped: zeroed and kept */
			set_bit(r->pend, g, false);
			mgt_cuda_zero(be, r->base + g * v->gran, v->gran);
			continue;
		}
		if (bit(r->mapped, g))
			continue;
		mgt_cuda_vmm_flush(be, false); /* the memory discard gave back first */
		mgt_status st = map_one(be, v, r, g);
		if (st)
			return st;
		mgt_cuda_zero(be, r->base + g * v->gran, v->gran);
	}
	return im->err;
}

void mgt_cuda_discard(mgt_backend *be, void *p, size_t bytes)
{
	cuda_resv *r = find(be, p, bytes);
	if (!r || r->whole) {
		mgt_cuda_zero(be, p, bytes);
		return;
	}
	struct cuda_vmm *v = impl(be)->vmm;
	size_t off = (size_t)((char *)p - r->base);
	size_t lo = (off + v->gran - 1) / v->gran, hi = (off + bytes) / v->gran; /* whole granules [lo, hi) */
	if (hi <= lo) {
		zero_mapped(be, r, v->gran, p, bytes);
		return;
	}
	zero_mapped(be, r, v->gran, p, lo * v->gran - off);
	zero_mapped(be, r, v->gran, r->base + hi * v->gran, off + bytes - hi * v->gran);
	bool any = false;
	for (size_t g = lo; g < hi; g++)
		if (bit(r->mapped, g) && !bit(r->pend, g))
			set_bit(r->pend, g, true), any = true;
	if (any && mgt_cuda_ok(be, "discard: cudaEventRecord", cudaEventRecord(v->ev, impl(be)->stream)))
		v->pending = true;
}

/* Unmaps r's granules (the stream waited for) and frees its address space. */
static void release_resv(mgt_backend *be, struct cuda_vmm *v, cuda_resv *r)
{
	if (r->whole) {
		mgt_cuda_free(be, r->base);
	} else {
		for (size_t g = 0; g < r->n; g++)
			if (bit(r->mapped, g))
				unmap_one(be, v, r, g);
		CUresult e = v->address_free((CUdeviceptr)(uintptr_t)r->base, r->size);
		if (e != CUDA_SUCCESS)
			drv_fail(be, "unreserve: cuMemAddressFree", e);
	}
	free(r->mapped), free(r->pend);
}

void mgt_cuda_unreserve(mgt_backend *be, void *p, size_t bytes)
{
	(void)bytes;
	cuda_resv *r = p ? find(be, p, 0) : NULL;
	if (!r || r->base != p)
		return;
	struct cuda_vmm *v = impl(be)->vmm;
	if (!r->whole && !mgt_cuda_ok(be, "unreserve", cudaStreamSynchronize(impl(be)->stream)))
		return;
	release_resv(be, v, r);
	*r = v->r[--v->nr];
	v->pending = false;
	for (int i = 0; i < v->nr; i++)
		for (size_t w = 0; w < (v->r[i].n + 63) / 64; w++)
			v->pending |= v->r[i].pend[w] != 0;
}

/* Before the allocation map's buffers are freed: a fallback reservation is one of them. */
void mgt_cuda_vmm_free_all(mgt_backend *be)
{
	struct cuda_vmm *v = impl(be)->vmm;
	if (!v)
		return;
	while (v->nr)
		release_resv(be, v, &v->r[--v->nr]);
	if (v->ok)
		cudaEventDestroy(v->ev);
	free(v->r);
	free(v);
	impl(be)->vmm = NULL;
}
