/* tests/sim/sim_mem.cc: device memory of the CUDA simulator, and the checks on every access the
 * kernels make to it (make check-sim; tests/sim/README).
 *
 * Device memory is an arena of address space reserved once (mmap, PROT_NONE until used).  Each
 * allocation gets a slot of whole pages: GUARD bytes of poison (0xFD), the buffer (256-byte
 * aligned, as cudaMalloc's, filled with 0xFF bytes, i.e. NaN floats), then poison to the end of
 * the slot (at least GUARD bytes).  A page table maps every arena page to its slot, so finding
 * the buffer of an address is two loads.  A freed slot is poisoned, kept out of use for the
 * next QUARANTINE frees (a use after free then names the freed buffer), then reused for an
 * allocation of the same number of pages.  The block's dynamic shared memory is a slot too.
 *
 * Access checks.  The kernels are compiled with -fsanitize=kernel-address and
 * asan-instrumentation-with-call-threshold=0, so that every load and store they make calls
 * __asan_{load,store}{1,2,4,8,16,N}_noabort below (the kernel's own runtime is not linked: these
 * functions are it).  An access outside the arena (the stack, static shared memory, kernel
 * arguments) is not checked.  An access inside it must lie inside one live buffer; anything else
 * (a guard, a freed buffer, the unused arena) is reported with the kernel, block, thread, the
 * buffer and the byte offset, and makes the device fail as a GPU does after an illegal address
 * (sim_runtime.cc: every later call returns cudaErrorIllegalAddress).
 *
 * Races between blocks.  Blocks of one launch run in no fixed order on a GPU and, without
 * atomics (mgt's kernels have none), cannot exchange data within the launch: the contract of
 * every kernel is that the words one block writes are neither written nor read by another block
 * of the same launch.  A shadow word per 2-byte unit of the arena (the smallest store of mgt's
 * kernels: a bf16 or fp16 element; rows of 16-bit outputs written by different blocks may meet
 * inside a 4-byte word, which a GPU's byte-addressed stores allow) records, for the current
 * launch, the block that wrote it and the block that read it (or "several"); a write of a word
 * another block read or wrote, or a read of a word another block wrote, is a conflict, reported
 * with the kernel name and both block indices.  The check works whatever order the blocks run
 * in (cuda_sim.cc runs them forward, reversed or shuffled).  Dynamic shared memory is per block
 * and not tracked.  MGT_SIM_RACE=0 turns the conflict check off (the bounds checks stay).
 *
 * Guards are also compared with their poison after every launch and every copy or memset, which
 * finds writes that bypass the instrumented code (the cuBLASLt stand-in, a copy of the wrong
 * length).  Under AddressSanitizer (MGT_SIM_ASAN: the kernels then carry ASan's own checks, not
 * the callbacks) the guards and freed buffers are also poisoned for ASan. */
#include "cuda_sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <vector>

#ifdef MGT_SIM_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace {

const size_t PAGE = 4096, GUARD = 256, ARENA = (size_t)16 << 30; /* the simulated device's 16 GB */
const size_t GRAN = 2; /* bytes of arena per shadow entry */
const size_t QUARANTINE = 64, MAX_REPORTS = 4, GUARD_SCAN = 4096;
const unsigned char POISON_BYTE = 0xFD;
const size_t VM_GRAN = PAGE; /* the simulated cuMemGetAllocationGranularity (a GPU's: 2 MiB) */

struct slot {
	uintptr_t start;     /* page-aligned */
	size_t pages;
	uintptr_t user;      /* start + GUARD */
	size_t bytes;        /* the buffer's size */
	unsigned id;         /* allocation number, from 1 */
	bool live, smem;     /* smem: the launch's dynamic shared memory */
	std::vector<uint8_t> vm; /* a reservation (cuMemAddressReserve): per VM_GRAN granule, mapped;
				  * empty for cudaMalloc's buffers */
};

struct arena_t {
	uintptr_t lo = 0;
	uint64_t *shadow = NULL;   /* one entry per GRAN bytes of the arena */
	slot **page = NULL;        /* arena page -> slot */
	size_t used = 0;           /* bump pointer, bytes */
	unsigned next_id = 1;
	std::set<slot *> live;
	std::multimap<size_t, slot *> spare; /* freed slots by pages, out of quarantine */
	std::deque<slot *> quarantine;
	slot *smem = NULL;
};

arena_t &arena = *new arena_t; /* never destroyed: kernels may run from other exit paths */
inline arena_t &A() { return arena; }

/* ---- the launch being checked ---- */

struct launch_t {
	const char *name = NULL;
	bool active = false, race = true;
	uint32_t epoch = 0;                  /* 24 bits, 0 = never */
	std::atomic<unsigned> reports{0};
	bool smem = false;                   /* the launch has dynamic shared memory */
	std::vector<std::pair<int, uintptr_t>> args; /* kernel argument index, pointer */
};
launch_t L;
unsigned cur_block;                          /* linear index of the running block */

/* Shadow entry: epoch (24 bits) | writer block + 1 (20 bits) | reader block + 1 (20 bits);
 * reader all ones: several blocks read the word. */
const uint64_t BMASK = (1u << 20) - 1, MANY = BMASK;
inline uint64_t sh_make(uint64_t ep, uint64_t w, uint64_t r) { return ep << 40 | w << 20 | r; }

bool env_on(const char *name, bool dflt)
{
	const char *e = getenv(name);
	return e && *e ? strcmp(e, "0") != 0 : dflt;
}

void *map(size_t n, int prot)
{
	void *p = mmap(NULL, n, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "cuda sim: cannot reserve %zu bytes of address space for device memory\n", n);
		abort();
	}
	return p;
}

/* Before main (early_init): everything below uses the arena without checking for it. */
void init()
{
	arena_t &a = A();
	a.lo = (uintptr_t)map(ARENA, PROT_NONE);
	a.shadow = (uint64_t *)map(ARENA / GRAN * sizeof(uint64_t), PROT_READ | PROT_WRITE);
	a.page = (slot **)map(ARENA / PAGE * sizeof(slot *), PROT_READ | PROT_WRITE);
	L.race = env_on("MGT_SIM_RACE", true);
	mgt_sim_prof_init();
}

struct early_init {
	early_init() { init(); }
} early;

inline slot *slot_of(uintptr_t p)
{
	const arena_t &a = A();
	const uintptr_t off = p - a.lo;
	return off < ARENA ? a.page[off / PAGE] : NULL;
}

inline bool in_arena(uintptr_t p) { return p - A().lo < ARENA; }

void fill_poison(uintptr_t from, uintptr_t to)
{
	UNPOISON((void *)from, to - from);
	memset((void *)from, POISON_BYTE, to - from);
	POISON((void *)from, to - from);
}

/* The slot's guards poisoned, the buffer [user, user + bytes) open. */
void set_guards(slot *s)
{
	const uintptr_t end = s->start + s->pages * PAGE;
	fill_poison(s->start, s->user);
	fill_poison(s->user + s->bytes, end);
	UNPOISON((void *)s->user, s->bytes);
}

void release_shadow(uintptr_t start, size_t n)
{
	arena_t &a = A();
	madvise(&a.shadow[(start - a.lo) / GRAN], n / GRAN * sizeof(uint64_t), MADV_DONTNEED);
}

slot *new_slot(size_t bytes)
{
	arena_t &a = A();
	const size_t pages = (GUARD + bytes + GUARD + PAGE - 1) / PAGE;
	auto it = a.spare.find(pages);
	if (it != a.spare.end()) {
		slot *s = it->second;
		a.spare.erase(it);
		return s;
	}
	if (a.used + pages * PAGE > ARENA)
		return NULL;
	slot *s = new slot();
	s->start = a.lo + a.used;
	s->pages = pages;
	a.used += pages * PAGE;
	if (mprotect((void *)s->start, pages * PAGE, PROT_READ | PROT_WRITE) != 0) {
		delete s;
		return NULL;
	}
	for (size_t i = 0; i < pages; i++)
		a.page[(s->start - a.lo) / PAGE + i] = s;
	return s;
}

const char *what(const slot *s) { return s->smem ? "dynamic shared memory" : s->vm.empty() ? "buffer" : "reservation"; }

/* Every granule of [p, p + n) of reservation s mapped (p, n inside it). */
bool vm_mapped(const slot *s, uintptr_t p, size_t n)
{
	for (size_t g = (p - s->user) / VM_GRAN; n && g <= (p - s->user + n - 1) / VM_GRAN; g++)
		if (!s->vm[g])
			return false;
	return true;
}

/* "buffer #7 (4000 bytes; kernel argument 2 points at its offset 0)" */
void describe(char *buf, size_t n, const slot *s)
{
	int k = snprintf(buf, n, "%s #%u (%zu bytes", what(s), s->id, s->bytes);
	for (auto &a : L.args)
		if (slot_of(a.second) == s && k > 0 && (size_t)k < n)
			k += snprintf(buf + k, n - k, "; kernel argument %d points at its offset %lld", a.first,
				      (long long)(a.second - s->user));
	if (k > 0 && (size_t)k < n)
		snprintf(buf + k, n - k, ")");
}

void fault(void)
{
	mgt_sim_fault(cudaErrorIllegalAddress);
}

void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char *fmt, ...)
{
	if (L.reports.fetch_add(1) >= MAX_REPORTS)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "cuda sim: %s\n", msg);
}

void block_name(char *buf, size_t n, unsigned b)
{
	snprintf(buf, n, "(%u,%u,%u)", b % gridDim.x, b / gridDim.x % gridDim.y, b / gridDim.x / gridDim.y);
}

/* An access of n bytes at p that is not inside a live buffer. */
void bad_access(uintptr_t p, size_t n, bool write)
{
	char where[512], blk[64];
	slot *s = slot_of(p);
	if (!s)
		snprintf(where, sizeof where, "device memory no allocation ever covered");
	else {
		char d[400];
		describe(d, sizeof d, s);
		const long long off = (long long)(p - s->user);
		const bool inside = s->live && off >= 0 && (size_t)off + n <= s->bytes;
		snprintf(where, sizeof where, "byte offset %lld of %s%s: %s", off, s->live ? "" : "freed ", d,
			 !s->live ? "used after cudaFree" : off < 0 ? "before its start"
			 : inside ? "a granule not mapped (reserved, never committed or given back: cuMemMap)"
				  : "past its end");
	}
	block_name(blk, sizeof blk, cur_block);
	if (L.active)
		report("kernel %s, block %s, thread (%u,%u,%u): %s %zu bytes at %s", L.name, blk, threadIdx.x,
		       threadIdx.y, threadIdx.z, write ? "writes" : "reads", n, where);
	else
		report("host code %s %zu bytes of device memory at %s", write ? "writes" : "reads", n, where);
	fault();
}

void conflict(uintptr_t p, unsigned other, bool other_wrote, bool write)
{
	char d[400], b1[64], b2[64];
	slot *s = slot_of(p);
	describe(d, sizeof d, s);
	block_name(b1, sizeof b1, cur_block);
	if (other == MANY - 1)
		snprintf(b2, sizeof b2, "several other blocks");
	else {
		char t[48];
		block_name(t, sizeof t, other);
		snprintf(b2, sizeof b2, "block %s", t);
	}
	report("kernel %s: block %s %s byte offset %lld of %s, which %s %s in the same launch (blocks "
	       "run in no fixed order: a race)", L.name, b1, write ? "writes" : "reads",
	       (long long)(p - s->user), d, b2, other_wrote ? "wrote" : "read");
	fault();
}

/* Records block cur_block's access to the GRAN bytes at p; reports a conflict with another. */
inline void track(uintptr_t p, bool write)
{
	arena_t &a = A();
	uint64_t *e = &a.shadow[(p - a.lo) / GRAN];
	const uint64_t me = cur_block + 1, ep = L.epoch;
	uint64_t old = __atomic_load_n(e, __ATOMIC_RELAXED), nw;
	for (;;) {
		uint64_t w = 0, r = 0;
		if (old >> 40 == ep)
			w = old >> 20 & BMASK, r = old & BMASK;
		const bool ww = write && w && w != me, rw = write && r && r != me, wr = !write && w && w != me;
		if (ww || rw || wr) {
			conflict(p, (unsigned)((ww || wr ? w : r) - 1), ww || wr, write);
			return;
		}
		if (write)
			w = me;
		else
			r = !r || r == me ? me : MANY;
		nw = sh_make(ep, w, r);
		if (nw == old || __atomic_compare_exchange_n(e, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return;
	}
}

/* static __shared__ arrays (cuda_sim.h); weak: a program may have none */
extern "C" char __start_mgt_sim_shared[] __attribute__((weak)), __stop_mgt_sim_shared[] __attribute__((weak));

inline bool static_shared(uintptr_t p)
{
	return p >= (uintptr_t)__start_mgt_sim_shared && p < (uintptr_t)__stop_mgt_sim_shared;
}

/* An access of n bytes at ptr by the instruction at site (for the profile). */
inline void access(const void *ptr, size_t n, bool write, const void *site)
{
	const uintptr_t p = (uintptr_t)ptr;
	if (!in_arena(p) || n == 0) {
		if (mgt_sim_prof_on && L.active && static_shared(p))
			mgt_sim_prof_access(p, n, write, true, site);
		return;
	}
	const slot *s = slot_of(p);
	if (!s || !s->live || p < s->user || n > s->bytes || p - s->user > s->bytes - n ||
	    (!s->vm.empty() && !vm_mapped(s, p, n))) {
		bad_access(p, n, write);
		return;
	}
	if (mgt_sim_prof_on && L.active)
		mgt_sim_prof_access(p, n, write, s->smem, site);
	if (!L.active || !L.race || s->smem || cur_block + 1 >= MANY - 1)
		return;
	for (uintptr_t q = p & ~(uintptr_t)(GRAN - 1); q < p + n; q += GRAN)
		track(q, write);
}

/* Compares a slot's guards with the poison; reports and re-poisons a touched one. */
#ifdef MGT_SIM_ASAN
__attribute__((no_sanitize_address))
#endif
bool guards_ok(slot *s, const char *after)
{
	const uintptr_t end = s->start + s->pages * PAGE, tail = s->user + s->bytes;
	const uintptr_t tend = end - tail > GUARD_SCAN ? tail + GUARD_SCAN : end;
	const unsigned char *c;
	for (c = (const unsigned char *)s->start; c < (const unsigned char *)s->user; c++)
		if (*c != POISON_BYTE)
			break;
	long long off = 0;
	if (c < (const unsigned char *)s->user)
		off = (long long)((uintptr_t)c - s->user);
	else {
		for (c = (const unsigned char *)tail; c < (const unsigned char *)tend; c++)
			if (*c != POISON_BYTE)
				break;
		if (c == (const unsigned char *)tend)
			return true;
		off = (long long)((uintptr_t)c - s->user);
	}
	char d[400];
	describe(d, sizeof d, s);
	report("%s: the guard %s %s was written (first changed byte at offset %lld)", after,
	       off < 0 ? "before" : "after", d, off);
	set_guards(s);
	fault();
	return false;
}

} // namespace

/* ---- the runtime's side (sim_runtime.cc) ---- */

void *mgt_sim_mem_alloc(size_t bytes)
{
	slot *s = new_slot(bytes);
	if (!s)
		return NULL;
	arena_t &a = A();
	s->user = s->start + GUARD;
	s->bytes = bytes;
	s->id = a.next_id++;
	s->live = true;
	s->smem = false;
	set_guards(s);
	memset((void *)s->user, 0xFF, bytes);
	a.live.insert(s);
	return (void *)s->user;
}

bool mgt_sim_mem_free(void *p)
{
	arena_t &a = A();
	slot *s = slot_of((uintptr_t)p);
	if (!s || !s->live || s->smem || s->user != (uintptr_t)p || !s->vm.empty())
		return false;
	guards_ok(s, "cudaFree");
	s->live = false;
	a.live.erase(s);
	fill_poison(s->user, s->user + s->bytes);
	release_shadow(s->start, s->pages * PAGE);
	a.quarantine.push_back(s);
	if (a.quarantine.size() > QUARANTINE) {
		slot *q = a.quarantine.front();
		a.quarantine.pop_front();
		a.spare.insert({q->pages, q});
	}
	return true;
}

bool mgt_sim_mem_inside(const void *p, size_t n)
{
	const slot *s = slot_of((uintptr_t)p);
	const uintptr_t q = (uintptr_t)p;
	return s && s->live && !s->smem && q >= s->user && n <= s->bytes && q - s->user <= s->bytes - n &&
	       (s->vm.empty() || vm_mapped(s, q, n));
}

/* ---- reservations (sim_runtime.cc's cuMemAddressReserve, cuMemMap, cuMemUnmap, cuMemAddressFree) ----
 * A reservation is a slot whose buffer starts a page in (granule-aligned, the page before it a
 * guard) and ends at the slot's end; its unmapped granules hold poison and any access to them is
 * reported as an access outside the buffers; a mapped granule starts as 0xFF bytes (undefined, as
 * cuMemCreate's memory). */

size_t mgt_sim_mem_granularity(void) { return VM_GRAN; }

void *mgt_sim_mem_reserve(size_t bytes)
{
	if (!bytes || bytes % VM_GRAN)
		return NULL;
	slot *s = new_slot(bytes + PAGE - 2 * GUARD); /* bytes / PAGE + 1 pages */
	if (!s)
		return NULL;
	arena_t &a = A();
	s->user = s->start + PAGE;
	s->bytes = bytes;
	s->id = a.next_id++;
	s->live = true;
	s->smem = false;
	s->vm.assign(bytes / VM_GRAN, 0);
	set_guards(s);
	fill_poison(s->user, s->user + bytes);
	a.live.insert(s);
	return (void *)s->user;
}

/* The reservation holding [p, p + n), p and n granule-aligned; NULL if none. */
static slot *vm_slot(const void *p, size_t n)
{
	slot *s = slot_of((uintptr_t)p);
	const uintptr_t q = (uintptr_t)p;
	if (!s || !s->live || s->vm.empty() || q < s->user || n > s->bytes || q - s->user > s->bytes - n ||
	    (q - s->user) % VM_GRAN || n % VM_GRAN || !n)
		return NULL;
	return s;
}

bool mgt_sim_mem_map(void *p, size_t n, bool map)
{
	slot *s = vm_slot(p, n);
	const size_t g0 = s ? ((uintptr_t)p - s->user) / VM_GRAN : 0;
	for (size_t g = g0; s && g < g0 + n / VM_GRAN; g++)
		if (s->vm[g] == map)
			return false; /* mapping a mapped granule, or unmapping an unmapped one */
	if (!s)
		return false;
	for (size_t g = g0; g < g0 + n / VM_GRAN; g++)
		s->vm[g] = map;
	if (map) {
		UNPOISON(p, n);
		memset(p, 0xFF, n);
	} else {
		fill_poison((uintptr_t)p, (uintptr_t)p + n);
	}
	return true;
}

bool mgt_sim_mem_unmapped(const void *p, size_t n)
{
	const slot *s = slot_of((uintptr_t)p);
	const uintptr_t q = (uintptr_t)p;
	return s && s->live && !s->vm.empty() && q >= s->user && n <= s->bytes && q - s->user <= s->bytes - n &&
	       !vm_mapped(s, q, n);
}

bool mgt_sim_mem_mapped(const void *p, size_t n)
{
	const slot *s = vm_slot(p, n);
	return s && vm_mapped(s, (uintptr_t)p, n);
}

bool mgt_sim_mem_address_free(void *p, size_t n)
{
	arena_t &a = A();
	slot *s = vm_slot(p, n);
	if (!s || s->user != (uintptr_t)p || s->bytes != n)
		return false;
	for (uint8_t m : s->vm)
		if (m)
			return false; /* still mapped */
	guards_ok(s, "cuMemAddressFree");
	s->vm.clear();
	s->live = false;
	a.live.erase(s);
	release_shadow(s->start, s->pages * PAGE);
	a.quarantine.push_back(s);
	if (a.quarantine.size() > QUARANTINE) {
		slot *q = a.quarantine.front();
		a.quarantine.pop_front();
		a.spare.insert({q->pages, q});
	}
	return true;
}

bool mgt_sim_mem_touches(const void *p) { return in_arena((uintptr_t)p); }

size_t mgt_sim_mem_used(void)
{
	size_t n = 0;
	for (const slot *s : A().live) {
		if (s->vm.empty())
			n += s->bytes;
		for (uint8_t m : s->vm)
			n += m ? VM_GRAN : 0;
	}
	return n;
}

int mgt_sim_mem_check(const char *after)
{
	int bad = 0;
	for (slot *s : A().live)
		bad += !guards_ok(s, after);
	return bad;
}

/* ---- the launch's side (cuda_sim.cc) ---- */

void mgt_sim_mem_launch(const char *name)
{
	L.name = name;
	L.args.clear();
	L.reports = 0;
	L.smem = false;
	if (++L.epoch >= (1u << 24)) { /* wrapped: forget every launch */
		release_shadow(A().lo, A().used);
		L.epoch = 1;
	}
}

void mgt_sim_mem_arg(int i, const void *p)
{
	if (in_arena((uintptr_t)p))
		L.args.push_back({i, (uintptr_t)p});
}

void *mgt_sim_mem_smem(size_t bytes)
{
	arena_t &a = A();
	if (!a.smem) {
		a.smem = new_slot(128 * 1024);
		a.smem->user = a.smem->start + GUARD;
		a.smem->id = 0;
		a.smem->smem = true;
		a.smem->live = true;
	}
	a.smem->bytes = bytes;
	set_guards(a.smem);
	L.smem = true;
	return (void *)a.smem->user;
}

void mgt_sim_mem_block(unsigned b, bool start)
{
	cur_block = b;
	L.active = start;
}

void mgt_sim_mem_launch_end(void)
{
	L.active = false;
	mgt_sim_mem_check(L.name);
	if (L.smem)
		guards_ok(A().smem, L.name);
	const unsigned r = L.reports.load();
	if (r > MAX_REPORTS)
		fprintf(stderr, "cuda sim: kernel %s: %u more reports not shown\n", L.name, r - (unsigned)MAX_REPORTS);
}

void mgt_sim_mem_span(const void *p, size_t n, bool write) { access(p, n, write, __builtin_return_address(0)); }

/* ---- the instrumentation's entry points (-fsanitize=kernel-address) ---- */

#ifndef MGT_SIM_ASAN
#define MGT_SIM_CB(n)                                                                               \
	extern "C" void __asan_load##n##_noabort(void *p) { access(p, n, false, __builtin_return_address(0)); } \
	extern "C" void __asan_store##n##_noabort(void *p) { access(p, n, true, __builtin_return_address(0)); }
MGT_SIM_CB(1)
MGT_SIM_CB(2)
MGT_SIM_CB(4)
MGT_SIM_CB(8)
MGT_SIM_CB(16)
extern "C" void __asan_loadN_noabort(void *p, size_t n) { access(p, n, false, __builtin_return_address(0)); }
extern "C" void __asan_storeN_noabort(void *p, size_t n) { access(p, n, true, __builtin_return_address(0)); }
extern "C" void __asan_handle_no_return(void) {}
#endif
