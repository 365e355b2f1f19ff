/* tests/sim/cuda_sim.cc: the execution side of the CUDA simulator (tests/sim/cuda_sim.h says what
 * is simulated and what is not): launches, the block order, the threads of a block, __syncthreads,
 * warp shuffles, dynamic shared memory, cudaFuncSetAttribute, the fp16/bf16 conversions.
 *
 * A launch runs the grid's blocks one at a time in the launch's order (forward, reversed or a
 * seeded shuffle), on the launching host thread.  The threads of a block are fibers: each has its
 * own stack and runs until it waits at a barrier (__syncthreads, a warp shuffle or __syncwarp) or
 * returns, then the lowest-numbered runnable thread runs (the highest, in blocks chosen to run in
 * reverse), so the first warps run as far ahead as the barriers let them; the last thread to
 * arrive at a barrier makes the threads waiting there runnable again.  No runnable thread while
 * some have not returned is a divergent barrier, reported at once.  Switching fibers costs a few
 * nanoseconds (the x86-64 switch below; ucontext elsewhere), where a pool of OS threads meeting
 * at futexes cost microseconds a barrier (check-sim's op checks took 11.7 minutes that way, with
 * 12.7 minutes of system time over the two cores). */
#include "cuda_sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif
/* MGT_SIM_UCONTEXT=1 (a -D flag) takes the ucontext path on x86-64 too, to test it there */
#if defined(__x86_64__) && !defined(MGT_SIM_UCONTEXT)
#define MGT_SIM_SWITCH 1
#else
#include <ucontext.h>
#endif

uint3 threadIdx; /* the running fiber's (one host thread runs every thread of a block) */
uint3 blockIdx;
dim3 blockDim, gridDim;

#ifdef MGT_SIM_SWITCH
/* mgt_sim_switch(&save, to): saves the callee-saved registers, the x87 control word and MXCSR on
 * the current stack, stores its stack pointer in save, and resumes the context whose stack
 * pointer is `to` (System V AMD64 ABI: rbx, rbp, r12-r15 and those two control words are the
 * state a call preserves).  mgt_sim_fiber_start is where a new fiber's first switch returns to:
 * it calls the function in r13 on a 16-byte aligned stack. */
extern "C" void mgt_sim_switch(void **save, void *to);
extern "C" void mgt_sim_fiber_start(void);
asm(R"(
	.text
	.p2align 4
	.globl mgt_sim_switch
	.type mgt_sim_switch, @function
mgt_sim_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $16, %rsp
	stmxcsr 8(%rsp)
	fnstcw (%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	fldcw (%rsp)
	ldmxcsr 8(%rsp)
	addq $16, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size mgt_sim_switch, .-mgt_sim_switch
	.p2align 4
	.globl mgt_sim_fiber_start
	.type mgt_sim_fiber_start, @function
mgt_sim_fiber_start:
	callq *%r13
	ud2
	.size mgt_sim_fiber_start, .-mgt_sim_fiber_start
)");
#endif

namespace {

const int MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32;
const size_t SMEM_DEFAULT = 48 * 1024, SMEM_OPTIN = 99 * 1024;
#ifdef __SANITIZE_ADDRESS__
const size_t STACK = 1 << 20; /* a fiber's stack (ASan's redzones make frames larger) */
#else
const size_t STACK = 256 << 10;
#endif

/* ---- contexts: a suspended fiber or the scheduler ---- */

struct ctx {
#ifdef MGT_SIM_SWITCH
	void *sp;
#else
	ucontext_t uc;
#endif
};

/* c starts fn() on [stack, stack + size) at its first ctx_swap into it. */
void ctx_make(ctx &c, char *stack, size_t size, void (*fn)(void))
{
#ifdef MGT_SIM_SWITCH
	uint64_t *top = (uint64_t *)(((uintptr_t)(stack + size) & ~(uintptr_t)15) - 64);
	unsigned short cw;
	unsigned mx;
	asm volatile("fnstcw %0" : "=m"(cw));
	asm volatile("stmxcsr %0" : "=m"(mx));
	top[-1] = (uint64_t)(uintptr_t)mgt_sim_fiber_start; /* mgt_sim_switch's ret */
	top[-2] = 0;                                         /* rbp */
	top[-3] = 0;                                         /* rbx */
	top[-4] = 0;                                         /* r12 */
	top[-5] = (uint64_t)(uintptr_t)fn;                   /* r13: mgt_sim_fiber_start calls it */
	top[-6] = 0;                                         /* r14 */
	top[-7] = 0;                                         /* r15 */
	top[-8] = mx;                                        /* 8(%rsp): MXCSR */
	top[-9] = cw;                                        /* (%rsp): the x87 control word */
	c.sp = top - 9;
#else
	getcontext(&c.uc);
	c.uc.uc_stack.ss_sp = stack;
	c.uc.uc_stack.ss_size = size;
	c.uc.uc_link = NULL;
	makecontext(&c.uc, fn, 0);
#endif
}

void ctx_swap(ctx &from, ctx &to)
{
#ifdef MGT_SIM_SWITCH
	mgt_sim_switch(&from.sp, to.sp);
#else
	swapcontext(&from.uc, &to.uc);
#endif
}

/* AddressSanitizer's fiber annotations (no-ops without it) */
void asan_start(void **fake, const void *bottom, size_t size)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(fake, bottom, size);
#else
	(void)fake, (void)bottom, (void)size;
#endif
}

void asan_finish(void *fake, const void **bottom, size_t *size)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(fake, bottom, size);
#else
	(void)fake, (void)bottom, (void)size;
#endif
}

/* ---- the launch, its threads and their barriers ---- */

/* The launch being run. */
struct launch {
	const char *name;
	mgt_sim_body body;
	void *ctx;
	unsigned nthreads, nblocks;
	size_t smem;
	float *dyn;
	std::vector<unsigned> order; /* linear block indices in the order they run */
};

enum tstate : unsigned char { RUNNABLE, AT_BLOCK, AT_WARP, RETURNED };

/* A barrier over the threads of a block or a warp that have not returned. */
struct group {
	unsigned expected, arrived;
};

struct fiber {
	char *stack;
	ctx c;
	void *fake; /* ASan's fake stack while suspended */
};

struct sim {
	std::mutex mu; /* one launch at a time */
	std::map<const void *, size_t> smem_max;
	launch L;
	std::vector<fiber> f; /* one a thread of the largest block so far, stacks kept */
	ctx sched;            /* the launching host thread, while a fiber runs */
	void *sched_fake = NULL;
	const void *sched_bottom = NULL;
	size_t sched_size = 0;
	unsigned cur, alive; /* the running thread; threads of the block that have not returned */
	tstate st[MAX_THREADS];
	uint64_t runnable[MAX_THREADS / 64]; /* bit t: st[t] == RUNNABLE */
	const char *at[MAX_THREADS]; /* where a waiting thread waits */
	unsigned phase[MAX_THREADS]; /* its shuffle count (the exchange buffers' parity) */
	group block, warp[MAX_WARPS];
	uint64_t xchg[MAX_WARPS][2][32]; /* shuffle values, double-buffered */
	alignas(8) unsigned char xall[MAX_WARPS][2][32][MGT_SIM_XALL]; /* mgt_sim_warp_all's */
};

sim &S()
{
	static sim s;
	return s;
}

thread_local bool in_kernel; /* this host thread runs a launch's fibers */

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...)
{
	va_list ap;
	sim &s = S();
	fprintf(stderr, "cuda sim: kernel %s, block (%u,%u,%u) of (%u,%u,%u), thread %u: ",
		s.L.name ? s.L.name : "?", blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z,
		s.cur);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

unsigned warp_lanes(unsigned w, unsigned n) { return n - 32 * w < 32 ? n - 32 * w : 32; }

fiber new_fiber()
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *m = mmap(NULL, STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED) {
		perror("cuda sim: a fiber's stack");
		abort();
	}
	mprotect(m, page, PROT_NONE); /* an overflow faults instead of running into the next stack */
	return fiber{(char *)m + page, ctx{}, NULL};
}

/* The scheduler resumes thread t until it waits or returns. */
void resume(sim &s, unsigned t)
{
	s.cur = t;
	threadIdx.x = t % blockDim.x;
	threadIdx.y = t / blockDim.x % blockDim.y;
	threadIdx.z = t / blockDim.x / blockDim.y;
	asan_start(&s.sched_fake, s.f[t].stack, STACK);
	ctx_swap(s.sched, s.f[t].c);
	asan_finish(s.sched_fake, NULL, NULL);
}

/* The running thread hands the host thread back to the scheduler (for good once it returned). */
void suspend(sim &s, bool returned)
{
	fiber &me = s.f[s.cur];
	asan_start(returned ? NULL : &me.fake, s.sched_bottom, s.sched_size);
	ctx_swap(me.c, s.sched);
	asan_finish(me.fake, &s.sched_bottom, &s.sched_size);
}

/* Thread t's state, and its runnable bit. */
void set_state(sim &s, unsigned t, tstate v)
{
	s.st[t] = v;
	if (v == RUNNABLE)
		s.runnable[t / 64] |= 1ull << (t % 64);
	else
		s.runnable[t / 64] &= ~(1ull << (t % 64));
}

/* The lowest runnable thread (the highest when rev), or -1. */
int next_runnable(const sim &s, bool rev)
{
	const int words = MAX_THREADS / 64;
	for (int i = 0; i < words; i++) {
		const int k = rev ? words - 1 - i : i;
		const uint64_t b = s.runnable[k];
		if (b)
			return 64 * k + (rev ? 63 - __builtin_clzll(b) : __builtin_ctzll(b));
	}
	return -1;
}

/* Every thread waiting in g (the block's barrier, or warp w's) may go on. */
void release(sim &s, group &g, tstate how, unsigned w)
{
	g.arrived = 0;
	const unsigned lo = how == AT_BLOCK ? 0 : 32 * w,
		       hi = how == AT_BLOCK ? s.L.nthreads : lo + warp_lanes(w, s.L.nthreads);
	for (unsigned t = lo; t < hi; t++)
		if (s.st[t] == how)
			set_state(s, t, RUNNABLE);
}

/* The running thread arrives at g; it waits unless it is the last of g's threads to arrive. */
void arrive(sim &s, group &g, tstate how, const char *what)
{
	if (++g.arrived == g.expected) {
		release(s, g, how, s.cur / 32);
		return;
	}
	set_state(s, s.cur, how);
	s.at[s.cur] = what;
	suspend(s, false);
}

/* The running thread returned: it leaves its block's barrier and its warp's (as on sm_70+). */
void leave(sim &s)
{
	const unsigned w = s.cur / 32;
	set_state(s, s.cur, RETURNED);
	s.alive--;
	if (--s.block.expected == s.block.arrived && s.block.arrived)
		release(s, s.block, AT_BLOCK, w);
	if (--s.warp[w].expected == s.warp[w].arrived && s.warp[w].arrived)
		release(s, s.warp[w], AT_WARP, w);
}

void fiber_main(void)
{
	sim &s = S();
	asan_finish(NULL, &s.sched_bottom, &s.sched_size);
	s.L.body(s.L.ctx);
	leave(s);
	suspend(s, true);
	abort(); /* a returned thread is not resumed */
}

/* No thread can go on: name where the first two waiting threads wait. */
[[noreturn]] void deadlock(sim &s)
{
	unsigned a = MAX_THREADS, b = MAX_THREADS;
	for (unsigned t = 0; t < s.L.nthreads; t++)
		if (s.st[t] != RETURNED && s.st[t] != RUNNABLE)
			(a == MAX_THREADS ? a : b == MAX_THREADS ? b : t) = t;
	s.cur = a;
	if (b == MAX_THREADS)
		die("waits at %s, where no other thread can arrive (a divergent barrier or shuffle, or "
		    "a lane that returned early?)", s.at[a]);
	die("waits at %s while thread %u waits at %s, and no thread can go on (a divergent barrier "
	    "or shuffle, or a lane that returned early?)", s.at[a], b, s.at[b]);
}

/* Runs block b (linear index): always the lowest runnable thread next (the highest when rev),
 * so that the first warps run as far ahead of the others as the barriers let them (a barrier
 * missing between two uses of shared memory then shows: a thread of an early warp writes it
 * again before the later warps have read it, or reads it before they have written it). */
void run_block(sim &s, unsigned b, bool rev)
{
	launch &L = s.L;
	const unsigned nt = L.nthreads;
	mgt_sim_mem_block(b, true);
	blockIdx.x = b % gridDim.x;
	blockIdx.y = b / gridDim.x % gridDim.y;
	blockIdx.z = b / gridDim.x / gridDim.y;
	s.block = group{nt, 0};
	for (unsigned w = 0; w * 32 < nt; w++)
		s.warp[w] = group{warp_lanes(w, nt), 0};
	for (size_t i = 0; i < L.smem / sizeof(float); i++)
		L.dyn[i] = NAN;
	for (unsigned t = 0; t < nt; t++) {
		set_state(s, t, RUNNABLE);
		s.phase[t] = 0;
		ctx_make(s.f[t].c, s.f[t].stack, STACK, fiber_main);
	}
	s.alive = nt;
	for (;;) {
		const int t = next_runnable(s, rev);
		if (t < 0)
			break;
		resume(s, (unsigned)t);
	}
	if (s.alive)
		deadlock(s);
	if (mgt_sim_prof_on)
		mgt_sim_prof_block_end();
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

/* Whether the next block runs its threads in reverse order: never under forward, always under
 * reverse, a coin flip a block under shuffle and mixed. */
bool thread_order_reversed()
{
	order_state &o = order_init();
	return o.mode == REVERSE || (o.mode != FORWARD && (splitmix(&o.rng) & 1));
}

bool bad_launch(const char *name, const void *kern, dim3 g, dim3 b, size_t smem, cudaError_t *e)
{
	sim &s = S();
	const uint64_t nt = (uint64_t)b.x * b.y * b.z;
	const char *why = NULL;
	if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
		why = "grid dimensions out of range", *e = cudaErrorInvalidConfiguration;
	else if (!nt || nt > MAX_THREADS || b.z > 64)
		why = "block dimensions out of range", *e = cudaErrorInvalidConfiguration;
	else {
		auto it = s.smem_max.find(kern);
		size_t lim = it == s.smem_max.end() ? SMEM_DEFAULT : it->second;
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
	sim &s = S();
	cudaError_t e = cudaSuccess;
	if (in_kernel) {
		fprintf(stderr, "cuda sim: launch of %s from device code (not simulated)\n", name);
		abort();
	}
	std::lock_guard<std::mutex> lk(s.mu);
	if (bad_launch(name, kern, grid, block, smem, &e)) {
		mgt_sim_set_error(e);
		return;
	}
	const unsigned nt = block.x * block.y * block.z;
	while (s.f.size() < nt)
		s.f.push_back(new_fiber());
	launch &L = s.L;
	L.name = name;
	L.body = body;
	L.ctx = ctx;
	L.nthreads = nt;
	L.nblocks = grid.x * grid.y * grid.z;
	L.smem = smem;
	block_order(L.order, L.nblocks);
	mgt_sim_mem_launch(name);
	if (mgt_sim_prof_on)
		mgt_sim_prof_launch(name, grid, block, smem);
	for (int i = 0; i < nargs; i++)
		if (args[i])
			mgt_sim_mem_arg(i, args[i]);
	L.dyn = smem ? (float *)mgt_sim_mem_smem(smem) : NULL;
	gridDim = grid;
	blockDim = block;
	in_kernel = true;
	for (unsigned i = 0; i < L.nblocks; i++)
		run_block(s, L.order[i], thread_order_reversed());
	in_kernel = false;
	if (mgt_sim_prof_on)
		mgt_sim_prof_launch_end();
	mgt_sim_mem_launch_end();
	L.dyn = NULL;
}

void *mgt_sim_dyn_smem(void) { return S().L.dyn; }

void __syncthreads(void)
{
	sim &s = S();
	arrive(s, s.block, AT_BLOCK, "__syncthreads");
}

/* The calling lane's warp, which must be whole and have no returned lane. */
static group &full_warp(sim &s, const char *what)
{
	const unsigned w = s.cur / 32;
	if (warp_lanes(w, s.L.nthreads) != 32 || s.warp[w].expected != 32)
		die("%s in a warp with missing or returned lanes (undefined)", what);
	return s.warp[w];
}

uint64_t mgt_sim_shfl(unsigned mask, uint64_t v, int src, const char *what)
{
	sim &s = S();
	if (mask != 0xffffffffu)
		die("%s with mask %#x: only full-warp masks are simulated", what, mask);
	group &g = full_warp(s, what);
	uint64_t(*buf)[32] = s.xchg[s.cur / 32];
	const unsigned ph = s.phase[s.cur]++ & 1;
	buf[ph][s.cur % 32] = v;
	arrive(s, g, AT_WARP, what);
	return buf[ph][(unsigned)src % 32];
}

void mgt_sim_warp_sync(const char *what)
{
	sim &s = S();
	arrive(s, s.warp[s.cur / 32], AT_WARP, what);
}

/* As mgt_sim_shfl, with a bytes-long value and every lane's copy returned; the phase counter is
 * the shuffles' (each buffer is reused only after another warp barrier, which every lane reaches
 * after reading it). */
void mgt_sim_warp_all(const void *mine, void *all, size_t bytes, const char *what)
{
	sim &s = S();
	if (bytes > MGT_SIM_XALL)
		die("%s: %zu bytes a lane (at most %d are simulated)", what, bytes, MGT_SIM_XALL);
	group &g = full_warp(s, what);
	unsigned char(*buf)[32][MGT_SIM_XALL] = s.xall[s.cur / 32];
	const unsigned ph = s.phase[s.cur]++ & 1;
	memcpy(buf[ph][s.cur % 32], mine, bytes);
	arrive(s, g, AT_WARP, what);
	for (unsigned l = 0; l < 32; l++)
		memcpy((unsigned char *)all + l * bytes, buf[ph][l], bytes);
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	sim &s = S();
	std::lock_guard<std::mutex> lk(s.mu);
	if (!func)
		return cudaErrorInvalidDeviceFunction;
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		return cudaSuccess; /* carveout and the like: no effect here */
	if (value < 0 || (size_t)value > SMEM_OPTIN)
		return cudaErrorInvalidValue;
	s.smem_max[func] = (size_t)value;
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
