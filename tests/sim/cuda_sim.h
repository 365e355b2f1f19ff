/* tests/sim/cuda_sim.h: enough of CUDA C++ to compile the kernels/ .cu files as host C++ and run the kernels
 * on the CPU (make check-sim; tests/sim/README).  Used as
 *   g++ -std=c++17 -x c++ -include tests/sim/cuda_sim.h -DMGT_CUDA_SIM -isystem $CUDA_HOME/include
 * kernels/common.cuh then turns MGT_LAUNCH into mgt_sim_launch and MGT_DYN_SHARED into a pointer
 * to the launch's dynamic shared memory.
 *
 * What is simulated (tests/sim/cuda_sim.cc, sim_mem.cc):
 *  - A launch runs its blocks one after the other, in an order chosen per launch: forward,
 *    reversed or shuffled (MGT_SIM_ORDER=forward|reverse|shuffle|mixed, default mixed: one of the
 *    three per launch; MGT_SIM_SEED=N repeats the choices and shuffles, and the seed is printed at
 *    the first launch).  The threads of a block are fibers on the launching host thread: each
 *    runs until it waits at a barrier or returns, then the lowest-numbered runnable thread runs
 *    (the highest in a block run in reverse: forward or reverse under those modes, a coin flip a
 *    block otherwise), so that early warps run ahead of the later ones as far as the barriers
 *    allow.  A missing __syncthreads then shows up as a wrong result (a thread reads shared
 *    memory that later threads have not written yet, NaN in dynamic shared memory, or writes it
 *    again before they have read it), and a divergent barrier (or a shuffle that not every lane
 *    of the warp reaches) is reported at once, naming where the stuck threads wait.
 *  - Every load and store of a kernel to device memory is checked (sim_mem.cc): it must lie inside
 *    one live allocation (guards of poison surround each one, a freed one stays poisoned), and no
 *    two blocks of one launch may touch the same word when one of them writes it (a race on a
 *    GPU, where blocks run in no fixed order).  A violation is reported with the kernel, block,
 *    thread, buffer and byte offset, and the device then fails as after an illegal address.
 *  - __syncthreads is a barrier over the block's threads that have not returned (as on sm_70+).
 *  - Warp shuffles (__shfl_sync, _up, _down, _xor, with width) exchange values among the 32 lanes
 *    of a warp through a barrier over the warp; a shuffle with a mask other than the full warp, or
 *    in a warp where a lane has returned, is reported as an error (undefined on the GPU).
 *    __syncwarp is that barrier alone; ldmatrix, mma.sync and cp.async are tests/sim/mma_sim.h.
 *  - __shared__ arrays are function statics (one block at a time makes that correct; in the
 *    section mgt_sim_shared, where the access profile, sim_prof.cc, tells them apart); dynamic
 *    shared memory is a guarded buffer of exactly the launch's size, filled with NaN before every
 *    block (a read of an element no thread wrote shows up as NaN).
 *  - Launch checks as the runtime makes them: block size 1..1024 threads, grid y and z <= 65535,
 *    dynamic shared memory <= 48 KB unless cudaFuncSetAttribute raised the kernel's limit (up to
 *    99 KB, the least opt-in limit of the sm_8x/sm_9x parts); a bad launch does not run and sets
 *    the error that cudaGetLastError returns.
 *  - fp16 / bf16 conversions with IEEE round to nearest even, overflow to inf, NaN kept.
 * What is not: warp-synchronous execution (lanes of a warp do not run in lockstep, so code that
 * relies on it without __syncwarp would fail here although it might pass on a GPU, and code
 * that races within a warp may pass here), races between the threads of one block beyond the
 * two orders above (a race that neither order exposes passes), the memory model (no caches, no weak ordering
 * beyond the host's), atomics, streams and events (all work is synchronous), timing, occupancy
 * and register limits, device-side printf and traps, the device's math library (host libm is
 * used: 1-ulp differences in expf, sinf etc.), FMA contraction (the host compiler decides),
 * host access to device pointers outside the kernels' objects (device memory is host memory;
 * the runtime checks the ranges of cudaMemcpy and cudaMemset), and static __shared__ sizes (not
 * counted in the limit).
 */
#ifndef MGT_TESTS_CUDA_SIM_H
#define MGT_TESTS_CUDA_SIM_H

#ifndef __cplusplus
#error "cuda_sim.h is for the kernels compiled as C++"
#endif

/* The toolkit's device headers stay out: the types below replace them. */
#define __CUDA_RUNTIME_H__
#define __CUDA_FP16_H__
#define __CUDA_BF16_H__
#include <cuda_runtime_api.h> /* cudaError_t, cudaStream_t, dim3, float4 ... and the C API */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* blocks run one at a time; the section lets the access profile (sim_prof.cc) tell shared memory */
#define __shared__ static __attribute__((section("mgt_sim_shared")))

/* ---- thread and block indices ---- */
extern uint3 threadIdx; /* the running thread's (the threads of a block are fibers) */
extern uint3 blockIdx; /* one block runs at a time: shared by its threads */
extern dim3 blockDim, gridDim;
enum { warpSize = 32 };

/* ---- the simulator (cuda_sim.cc) ---- */
typedef void (*mgt_sim_body)(void *ctx);
/* Runs body(ctx) on every thread of every block (after the launch checks); args[i] is kernel
 * argument i when it is a pointer, else NULL (named in reports). */
void mgt_sim_run(const char *name, const void *kern, dim3 grid, dim3 block, size_t smem,
		 cudaStream_t st, mgt_sim_body body, void *ctx, const void *const *args, int nargs);
/* The error that cudaGetLastError returns next (sim_runtime.cc), for a launch that fails. */
void mgt_sim_set_error(cudaError_t e);
/* A fault the device does not recover from (an illegal address): every later runtime call
 * returns e, as a GPU's sticky errors (sim_runtime.cc). */
void mgt_sim_fault(cudaError_t e);

/* ---- device memory and its checks (sim_mem.cc) ---- */
void *mgt_sim_mem_alloc(size_t bytes);               /* NULL when the arena is full */
bool mgt_sim_mem_free(void *p);                      /* false: p is not a live allocation */
bool mgt_sim_mem_inside(const void *p, size_t n);    /* [p, p + n) inside one live allocation */
bool mgt_sim_mem_touches(const void *p);             /* p anywhere in device memory */
size_t mgt_sim_mem_used(void);                       /* bytes of live buffers and mapped granules */
int mgt_sim_mem_check(const char *after);            /* guards touched (reported, a fault) */
/* Reservations (the driver's virtual memory management, sim_runtime.cc): the granularity; a
 * reservation of bytes (a multiple of it; NULL when the arena is full); map (true) or unmap
 * [p, p + n) of one (granule-aligned; false when a granule is already so or the range is not
 * one reservation's); every granule of [p, p + n) mapped; free a reservation with nothing
 * mapped (false otherwise).  Accesses to unmapped granules are reported as outside accesses. */
size_t mgt_sim_mem_granularity(void);
void *mgt_sim_mem_reserve(size_t bytes);
bool mgt_sim_mem_map(void *p, size_t n, bool map);
bool mgt_sim_mem_mapped(const void *p, size_t n);
bool mgt_sim_mem_unmapped(const void *p, size_t n); /* inside a reservation, a granule not mapped */
bool mgt_sim_mem_address_free(void *p, size_t n);
void mgt_sim_mem_launch(const char *name);           /* a launch starts */
void mgt_sim_mem_arg(int i, const void *p);          /* its argument i is the pointer p */
void *mgt_sim_mem_smem(size_t bytes);                /* its dynamic shared memory (bytes > 0) */
void mgt_sim_mem_block(unsigned b, bool start);      /* block b (linear index) runs / none */
void mgt_sim_mem_launch_end(void);                   /* the launch ended: guards checked */
/* A kernel's access to [p, p + n), checked as an instrumented load or store is (bounds, races);
 * for the stand-ins that run uninstrumented (mma_sim.h's cp.async). */
void mgt_sim_mem_span(const void *p, size_t n, bool write);
/* ---- the access profile (sim_prof.cc; MGT_SIM_PROFILE=FILE) ---- */
extern bool mgt_sim_prof_on;                         /* MGT_SIM_PROFILE is set */
void mgt_sim_prof_init(void);                        /* reads the environment (sim_mem.cc's init) */
void mgt_sim_prof_access(uintptr_t p, size_t n, bool write, bool shared, const void *site);
void mgt_sim_prof_launch(const char *name, dim3 grid, dim3 block, size_t smem);
void mgt_sim_prof_block_end(void);
void mgt_sim_prof_launch_end(void);
void mgt_sim_prof_flops(double f);                   /* FLOPs of the running launch */
void mgt_sim_prof_matmul(uint64_t m, uint64_t n, uint64_t k, double rd, double wr);
void mgt_sim_prof_enable(void);                      /* on without a file (tests/sim/prof_test.cc) */
int mgt_sim_prof_check(const char *bounds);          /* kernels over the file's bounds (reported) */
/* A kernel's worst sectors/request, sectors/ideal, extra wavefronts/shared access so far. */
bool mgt_sim_prof_kernel(const char *kernel, double *spr, double *spi, double *xpa);
/* The current block's dynamic shared memory. */
void *mgt_sim_dyn_smem(void);
void __syncthreads(void);
/* Waits for every lane of the calling warp that has not returned (__syncwarp). */
void mgt_sim_warp_sync(const char *what);
/* Lane `src` of the calling warp's values v (one per lane), after every lane gave its own. */
uint64_t mgt_sim_shfl(unsigned mask, uint64_t v, int src, const char *what);
/* Every lane's `bytes` (<= MGT_SIM_XALL) at `mine`, after every lane of the calling warp gave its
 * own, into all[lane * bytes ...] (a full warp only): the warp-collective instructions of
 * tests/sim/mma_sim.h (ldmatrix, mma.sync) exchange their operands through it. */
enum { MGT_SIM_XALL = 32 };
void mgt_sim_warp_all(const void *mine, void *all, size_t bytes, const char *what);

template <typename T> static inline const void *mgt_sim_ptr(const T &x)
{
	if constexpr (std::is_pointer<T>::value)
		return (const void *)x;
	else
		return nullptr;
}

/* kern<<<grid, block, smem, st>>>(args...): the arguments are converted to the kernel's parameter
 * types once, on the host, and every thread gets its own copy, as CUDA passes them. */
template <typename... P, typename... A>
static inline void mgt_sim_launch(const char *name, void (*kern)(P...), dim3 grid, dim3 block,
				  size_t smem, cudaStream_t st, A &&...args)
{
	static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
	struct ctx_t {
		void (*k)(P...);
		std::tuple<typename std::decay<P>::type...> a;
	} ctx{kern, std::tuple<typename std::decay<P>::type...>(std::forward<A>(args)...)};
	const void *ptrs[sizeof...(P) + 1] = {};
	int i = 0;
	std::apply([&](const auto &...x) { ((ptrs[i++] = mgt_sim_ptr(x)), ...); }, ctx.a);
	mgt_sim_run(name, reinterpret_cast<const void *>(kern), grid, block, smem, st,
		    [](void *c) {
			    ctx_t *x = static_cast<ctx_t *>(c);
			    std::tuple<typename std::decay<P>::type...> mine = x->a;
			    std::apply(x->k, mine);
		    },
		    &ctx, ptrs, (int)sizeof...(P));
}

template <typename T> static inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute a, int v)
{
	return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), a, v);
}

/* ---- warp shuffles ---- */
static inline int mgt_sim_lane(void)
{
	unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	return (int)(t % 32);
}

template <typename T> static inline T mgt_sim_shfl_t(unsigned mask, T v, int src, const char *what)
{
	static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled type");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	b = mgt_sim_shfl(mask, b, src, what);
	T r;
	memcpy(&r, &b, sizeof r);
	return r;
}

/* Source lanes as the CUDA C++ Programming Guide defines them for width w (a power of 2 <= 32):
 * a lane outside the caller's segment (xor, up, down) means the caller's own value. */
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int w = 32)
{
	const int l = mgt_sim_lane();
	return mgt_sim_shfl_t(mask, v, (l / w) * w + ((src % w) + w) % w, "__shfl_sync");
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int w = 32)
{
	const int l = mgt_sim_lane();
	return mgt_sim_shfl_t(mask, v, l % w >= (int)d ? l - (int)d : l, "__shfl_up_sync");
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int w = 32)
{
	const int l = mgt_sim_lane();
	return mgt_sim_shfl_t(mask, v, l % w + (int)d < w ? l + (int)d : l, "__shfl_down_sync");
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int w = 32)
{
	const int l = mgt_sim_lane(), s = l ^ m;
	return mgt_sim_shfl_t(mask, v, s / w <= l / w ? s : l, "__shfl_xor_sync");
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	if (mask != 0xffffffffu)
		mgt_sim_shfl(mask, 0, 0, "__syncwarp"); /* reports the partial mask */
	mgt_sim_warp_sync("__syncwarp");
}

/* ---- integer and float intrinsics ---- */
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
static inline unsigned __float_as_uint(float x)
{
	unsigned u;
	memcpy(&u, &x, 4);
	return u;
}
static inline float __uint_as_float(unsigned u)
{
	float x;
	memcpy(&x, &u, 4);
	return x;
}
static inline int __float_as_int(float x) { return (int)__float_as_uint(x); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
/* __expf, __logf: glibc has them (the exact functions) */
static inline float __fdividef(float a, float b) { return a / b; }
/* rounded operations that nvcc never contracts into an FMA (g++ -std=c++17 does not contract) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x > 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }

static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
	return uint4{x, y, z, w};
}

/* ---- fp16 and bf16: storage types and the conversions the kernels use ---- */
struct __half {
	uint16_t x;
};
struct __align__(4) __half2 {
	__half x, y;
};
struct __nv_bfloat16 {
	uint16_t x;
};
struct __align__(4) __nv_bfloat162 {
	__nv_bfloat16 x, y;
};

uint16_t mgt_sim_f2h(float f);  /* round to nearest even, overflow to inf, NaN quiet */
float mgt_sim_h2f(uint16_t h);
uint16_t mgt_sim_f2bf(float f); /* round to nearest even, NaN quiet */

static inline __half __float2half_rn(float f) { return __half{mgt_sim_f2h(f)}; }
static inline float __half2float(__half h) { return mgt_sim_h2f(h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{mgt_sim_f2bf(f)}; }
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((unsigned)b.x << 16); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b)
{
	return __nv_bfloat162{a, b};
}
static inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
static inline float2 __bfloat1622float2(__nv_bfloat162 b)
{
	return float2{__bfloat162float(b.x), __bfloat162float(b.y)};
}

#include "mma_sim.h"  /* kernels/mma.cuh's ldmatrix and mma.sync */

#endif
