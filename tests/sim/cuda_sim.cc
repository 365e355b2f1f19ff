/* tests/sim/cuda_sim.cc: the execution side of the CUDA simulator (tests/sim/cuda_sim.h says what
 * is simulated and what is not): launches, the block order, the thread pool, __syncthreads, warp
 * shuffles, dynamic shared memory, cudaFuncSetAttribute, the fp16/bf16 conversions.
 *
 * A launch wakes blockDim threads of a persistent pool; they run the grid's blocks one at a time
 * in the launch's order (forward, reversed or a seeded shuffle), meeting at a gate between
 * blocks whose last arriver sets up the next block (blockIdx, the barriers, NaN in dynamic shared
 * memory, the block sim_mem.cc attributes accesses to).  Barriers are futexes on a generation counter (Linux;
 * elsewhere a yield loop) so that hundreds of threads on two cores do not spin; a thread that
 * returns from the kernel leaves the block's barrier and its warp's. */
#include "cuda_sim.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

__thread uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim, gridDim;

namespace {

const int MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32;
const size_t SMEM_DEFAULT = 48 * 1024, SMEM_OPTIN = 99 * 1024;

double now_s()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleep while *a == v, at most about 100 ms. */
void fwait(std::atomic<uint32_t> *a, uint32_t v)
{
#ifdef __linux__
	struct timespec ts = {0, 100 * 1000 * 1000};
	syscall(SYS_futex, reinterpret_cast<uint32_t *>(a), FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
#else
	(void)a, (void)v;
	std::this_thread::yield();
#endif
}

void fwake(std::atomic<uint32_t> *a)
{
#ifdef __linux__
	syscall(SYS_futex, reinterpret_cast<uint32_t *>(a), FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
	(void)a;
#endif
}

double hang_s()
{
	static const double lim = [] {
		const char *e = getenv("MGT_SIM_HANG");
		double s = e && *e ? atof(e) : 60.0;
		return s > 0 ? s : 60.0;
	}();
	return lim;
}

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A barrier over `expected` threads; drop() takes a thread out for good (until reset). */
struct barrier {
	std::atomic<uint64_t> state{0}; /* expected << 32 | arrived */
	std::atomic<uint32_t> gen{0};

	void reset(unsigned n) { state.store((uint64_t)n << 32); }
	unsigned expected() const { return (unsigned)(state.load() >> 32); }

	void release(uint64_t s)
	{
		state.store(s >> 32 << 32);
		gen.fetch_add(1, std::memory_order_release);
		fwake(&gen);
	}
	/* fn(arg), when given, runs in the last arriver before anyone leaves. */
	void wait(const char *what, void (*fn)(void *) = NULL, void *arg = NULL)
	{
		const uint32_t g = gen.load(std::memory_order_acquire);
		const uint64_t s = state.fetch_add(1) + 1;
		if ((uint32_t)s == (uint32_t)(s >> 32)) {
			if (fn)
				fn(arg);
			release(s);
			return;
		}
		const double t0 = now_s(), lim = hang_s();
		while (gen.load(std::memory_order_acquire) == g) {
			fwait(&gen, g);
			if (now_s() - t0 > lim)
				die("threads wait at %s for longer than MGT_SIM_HANG seconds (a divergent "
				    "barrier or shuffle, or a lane that returned early?)", what);
		}
	}
	void drop()
	{
		const uint64_t s = state.fetch_sub((uint64_t)1 << 32) - ((uint64_t)1 << 32);
		if ((uint32_t)s > 0 && (uint32_t)s == (uint32_t)(s >> 32))
			release(s);
	}
};

/* The launch being run. */
struct launch {
	const char *name;
	mgt_sim_body body;
	void *ctx;
	unsigned nthreads, nblocks, next_block;
	size_t smem;
	float *dyn;
	std::vector<unsigned> order; /* linear block indices in the order they run */
};

struct pool {
	std::vector<std::thread> threads;
	std::atomic<uint32_t> go{0}, done{0}; /* go: the launch generation, the futex word */
	std::atomic<uint64_t> ticket{0};       /* go << 32 | that launch's nthreads, stored first */
	std::atomic<bool> quit{false};
	launch L;
	barrier gate, block;
	barrier warp[MAX_WARPS];
	uint64_t xchg[MAX_WARPS][2][32]; /* shuffle values, double-buffered */
	alignas(8) unsigned char xall[MAX_WARPS][2][32][MGT_SIM_XALL]; /* mgt_sim_warp_all's */
	std::mutex mu;                   /* one launch at a time */
	std::map<const void *, size_t> smem_max;

	/* Starts launch generation go + 1 over its first nt threads (L is set up). */
	void publish(unsigned nt)
	{
		const uint32_t g = go.load() + 1;
		ticket.store((uint64_t)g << 32 | nt, std::memory_order_release);
		go.store(g, std::memory_order_release);
		fwake(&go);
	}
	~pool()
	{
		quit = true;
		publish(0);
		for (auto &t : threads)
			t.join();
	}
};

pool &P()
{
	static pool p;
	return p;
}

thread_local unsigned my_tid, my_phase;
thread_local bool in_kernel;

void die(const char *fmt, ...)
{
	va_list ap;
	launch &L = P().L;
	fprintf(stderr, "cuda sim: kernel %s, block (%u,%u,%u) of (%u,%u,%u), thread %u: ",
		L.name ? L.name : "?", blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z,
		my_tid);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

unsigned warp_lanes(unsigned w, unsigned n) { return n - 32 * w < 32 ? n - 32 * w : 32; }

/* Gate completion: the next block's indices, barriers and shared memory. */
void next_block(void *)
{
	pool &p = P();
	launch &L = p.L;
	const unsigned b = L.order[L.next_block++];
	mgt_sim_mem_block(b, true);
	blockIdx.x = b % gridDim.x;
	blockIdx.y = b / gridDim.x % gridDim.y;
	blockIdx.z = b / gridDim.x / gridDim.y;
	p.block.reset(L.nthreads);
	for (unsigned w = 0; w * 32 < L.nthreads; w++)
		p.warp[w].reset(warp_lanes(w, L.nthreads));
	for (size_t i = 0; i < L.smem / sizeof(float); i++)
		L.dyn[i] = NAN;
}

/* A pool thread: runs each launch it is one of the first nthreads of.  The generation and
 * nthreads come together from the ticket: a thread that wakes late for a launch it is not part of
 * must not read the next launch's nthreads from L while that launch is being set up (it would
 * join the gate before gate.reset, and the launch would never finish). */
void worker(unsigned tid)
{
	pool &p = P();
	uint32_t seen = 0;
	my_tid = tid;
	for (;;) {
		uint64_t t;
		while ((uint32_t)((t = p.ticket.load(std::memory_order_acquire)) >> 32) == seen)
			fwait(&p.go, seen);
		seen = (uint32_t)(t >> 32);
		if (p.quit)
			return;
		const unsigned nt = (uint32_t)t; /* L stays this launch's until done reaches nt */
		if (tid >= nt)
			continue;
		launch &L = p.L;
		threadIdx.x = tid % blockDim.x;
		threadIdx.y = tid / blockDim.x % blockDim.y;
		threadIdx.z = tid / blockDim.x / blockDim.y;
		for (unsigned b = 0; b < L.nblocks; b++) {
			p.gate.wait("the gate between blocks", next_block);
			my_phase = 0;
			in_kernel = true;
			L.body(L.ctx);
			in_kernel = false;
			p.block.drop();
			p.warp[tid / 32].drop();
		}
		if (p.done.fetch_add(1, std::memory_order_acq_rel) + 1 == nt)
			fwake(&p.done);
	}
}

/* ---- block order ---- */

enum order_mode { FORWARD, REVERSE, SHUFFLE, MIXED };
const char *const order_names[] = {"forward", "reverse", "shuffle", "mixed"};

struct order_state {
	order_mode mode = MIXED;
	uint64_t rng = 0;
	bool init = false;
};

uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ z >> 27) * 0x94D049BB133111EBull;
	return z ^ z >> 31;
}

/* MGT_SIM_ORDER and MGT_SIM_SEED, read and printed at the first launch. */
order_state &order_init()
{
	static order_state o;
	if (o.init)
		return o;
	o.init = true;
	const char *m = getenv("MGT_SIM_ORDER"), *sd = getenv("MGT_SIM_SEED");
	if (m && *m) {
		int k = 0;
		while (k < 4 && strcmp(m, order_names[k]) != 0)
			k++;
		if (k == 4) {
			fprintf(stderr, "cuda sim: MGT_SIM_ORDER=%s: expected forward, reverse, shuffle or mixed\n", m);
			abort();
		}
		o.mode = (order_mode)k;
	}
	const uint64_t seed = sd && *sd ? strtoull(sd, NULL, 0)
				       : ((uint64_t)time(NULL) << 20 ^ (uint64_t)getpid()) & 0xFFFFFFFFFFFFull;
	o.rng = seed;
	fprintf(stderr, "cuda sim: block order %s, seed %llu (MGT_SIM_ORDER=%s MGT_SIM_SEED=%llu repeat it)\n",
		order_names[o.mode], (unsigned long long)seed, order_names[o.mode], (unsigned long long)seed);
	return o;
}

/* The order of the next launch's n blocks. */
void block_order(std::vector<unsigned> &v, unsigned n)
{
	order_state &o = order_init();
	order_mode m = o.mode == MIXED ? (order_mode)(splitmix(&o.rng) % 3) : o.mode;
	v.resize(n);
	for (unsigned i = 0; i < n; i++)
		v[i] = m == REVERSE ? n - 1 - i : i;
	if (m == SHUFFLE)
		for (unsigned i = n; i > 1; i--)
			std::swap(v[i - 1], v[splitmix(&o.rng) % i]);
}

bool bad_launch(const char *name, const void *kern, dim3 g, dim3 b, size_t smem, cudaError_t *e)
{
	pool &p = P();
	const uint64_t nt = (uint64_t)b.x * b.y * b.z;
	const char *why = NULL;
	if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
		why = "grid dimensions out of range", *e = cudaErrorInvalidConfiguration;
	else if (!nt || nt > MAX_THREADS || b.z > 64)
		why = "block dimensions out of range", *e = cudaErrorInvalidConfiguration;
	else {
		auto it = p.smem_max.find(kern);
		size_t lim = it == p.smem_max.end() ? SMEM_DEFAULT : it->second;
		if (smem > lim)
			why = "too much dynamic shared memory (cudaFuncSetAttribute?)",
			*e = cudaErrorInvalidValue;
	}
	if (why)
		fprintf(stderr, "cuda sim: launch of %s <<<(%u,%u,%u), (%u,%u,%u), %zu>>> fails: %s\n", name,
			g.x, g.y, g.z, b.x, b.y, b.z, smem, why);
	return why != NULL;
}

} // namespace

void mgt_sim_run(const char *name, const void *kern, dim3 grid, dim3 block, size_t smem,
		 cudaStream_t st, mgt_sim_body body, void *ctx, const void *const *args, int nargs)
{
	(void)st;
	pool &p = P();
	cudaError_t e = cudaSuccess;
	if (in_kernel) {
		fprintf(stderr, "cuda sim: launch of %s from device code (not simulated)\n", name);
		abort();
	}
	std::lock_guard<std::mutex> lk(p.mu);
	if (bad_launch(name, kern, grid, block, smem, &e)) {
		mgt_sim_set_error(e);
		return;
	}
	const unsigned nt = block.x * block.y * block.z;
	while (p.threads.size() < nt)
		p.threads.emplace_back(worker, (unsigned)p.threads.size());
	launch &L = p.L;
	L.name = name;
	L.body = body;
	L.ctx = ctx;
	L.nthreads = nt;
	L.nblocks = grid.x * grid.y * grid.z;
	L.next_block = 0;
	L.smem = smem;
	block_order(L.order, L.nblocks);
	mgt_sim_mem_launch(name);
	for (int i = 0; i < nargs; i++)
		if (args[i])
			mgt_sim_mem_arg(i, args[i]);
	L.dyn = smem ? (float *)mgt_sim_mem_smem(smem) : NULL;
	gridDim = grid;
	blockDim = block;
	p.gate.reset(nt);
	p.done.store(0);
	p.publish(nt);
	uint32_t d;
	while ((d = p.done.load(std::memory_order_acquire)) != nt)
		fwait(&p.done, d);
	mgt_sim_mem_launch_end();
	L.dyn = NULL;
}

void *mgt_sim_dyn_smem(void) { return P().L.dyn; }

void __syncthreads(void) { P().block.wait("__syncthreads"); }

uint64_t mgt_sim_shfl(unsigned mask, uint64_t v, int src, const char *what)
{
	pool &p = P();
	const unsigned w = my_tid / 32, lane = my_tid % 32, n = warp_lanes(w, p.L.nthreads);
	if (mask != 0xffffffffu)
		die("%s with mask %#x: only full-warp masks are simulated", what, mask);
	if (n != 32 || p.warp[w].expected() != 32)
		die("%s: full mask in a warp with missing or returned lanes (undefined)", what);
	uint64_t(*buf)[32] = p.xchg[w];
	const unsigned ph = my_phase++ & 1;
	buf[ph][lane] = v;
	p.warp[w].wait(what);
	return buf[ph][(unsigned)src % 32];
}

void mgt_sim_warp_sync(const char *what) { P().warp[my_tid / 32].wait(what); }

/* As mgt_sim_shfl, with a bytes-long value and every lane's copy returned; the phase counter is
 * the shuffles' (each buffer is reused only after another warp barrier, which every lane reaches
 * after reading it). */
void mgt_sim_warp_all(const void *mine, void *all, size_t bytes, const char *what)
{
	pool &p = P();
	const unsigned w = my_tid / 32, lane = my_tid % 32, n = warp_lanes(w, p.L.nthreads);
	if (bytes > MGT_SIM_XALL)
		die("%s: %zu bytes a lane (at most %d are simulated)", what, bytes, MGT_SIM_XALL);
	if (n != 32 || p.warp[w].expected() != 32)
		die("%s: a warp with missing or returned lanes (undefined)", what);
	unsigned char(*buf)[32][MGT_SIM_XALL] = p.xall[w];
	const unsigned ph = my_phase++ & 1;
	memcpy(buf[ph][lane], mine, bytes);
	p.warp[w].wait(what);
	for (unsigned l = 0; l < 32; l++)
		memcpy((unsigned char *)all + l * bytes, buf[ph][l], bytes);
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	pool &p = P();
	std::lock_guard<std::mutex> lk(p.mu);
	if (!func)
		return cudaErrorInvalidDeviceFunction;
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		return cudaSuccess; /* carveout and the like: no effect here */
	if (value < 0 || (size_t)value > SMEM_OPTIN)
		return cudaErrorInvalidValue;
	p.smem_max[func] = (size_t)value;
	return cudaSuccess;
}

/* ---- fp16 / bf16 ---- */

uint16_t mgt_sim_f2h(float f)
{
	uint32_t x = __float_as_uint(f);
	const uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	x &= 0x7fffffffu;
	if (x > 0x7f800000u)
		return sign | 0x7e00; /* NaN */
	if (x >= 0x477ff000u)         /* >= 65520: rounds to inf (or is inf) */
		return sign | 0x7c00;
	if (x < 0x38800000u) /* below 2^-14: a subnormal (or zero), in units of 2^-24 */
		return sign | (uint16_t)nearbyintf(__uint_as_float(x) * 16777216.0f);
	uint32_t h = ((x >> 23) - 112) << 10 | (x >> 13 & 0x3ff), rest = x & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;
	return sign | (uint16_t)h;
}

float mgt_sim_h2f(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
	if (e == 0x1f)
		return __uint_as_float(sign | 0x7f800000u | m << 13);
	if (e == 0) {
		float v = (float)m * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	return __uint_as_float(sign | (e + 112) << 23 | m << 13);
}

uint16_t mgt_sim_f2bf(float f)
{
	uint32_t x = __float_as_uint(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)(x >> 16 | 0x40);
	x += 0x7fffu + (x >> 16 & 1);
	return (uint16_t)(x >> 16);
}
