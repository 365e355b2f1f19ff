/* tests/sim/pool_test.cc (make check-sim): the simulator's launch machinery (tests/sim/cuda_sim.cc)
 * alone.  (1) Many back-to-back launches whose block sizes alternate between one warp and 1024
 * threads: each launch must run every thread of every block exactly once, with the block and
 * thread indices it was given (each writes its own tag to its slot).  (2) Barriers: a kernel
 * whose threads meet at __syncthreads and exchange through shared memory gets the values the
 * other threads wrote before the barrier, in whichever order the fibers run.  (3) A divergent
 * barrier (lane 0 at __syncthreads while its warp waits at a shuffle) ends the process with the
 * simulator's report naming both places, in a child, at once instead of hanging.
 * Prints "ok - ..." / "not ok - ..."; exits 1 on a failure. */
#include "cuda_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

namespace {

std::atomic<unsigned> writes{0};

void tag_k(unsigned *slot, unsigned tag)
{
	const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
	slot[t] = tag;
	writes.fetch_add(1, std::memory_order_relaxed);
}

/* out[t] = the value thread (t + 1) % n stored, read after a barrier, three rounds. */
void ring_k(unsigned *out)
{
	__shared__ unsigned sm[1024];
	const unsigned n = blockDim.x, t = threadIdx.x;
	unsigned v = t;
	for (int round = 0; round < 3; round++) {
		sm[t] = v * 7 + blockIdx.x;
		__syncthreads();
		v = sm[(t + 1) % n];
		__syncthreads();
	}
	out[blockIdx.x * n + t] = v;
}

void divergent_k(unsigned *out)
{
	if (threadIdx.x == 0)
		__syncthreads();
	else
		out[threadIdx.x] = __shfl_sync(0xffffffffu, threadIdx.x, 0);
}

int fail = 0;

void ok(bool c, const char *what)
{
	printf("%sok - %s\n", c ? "" : "not ", what);
	fail += !c;
}

void launches(unsigned n)
{
	const unsigned big = 1024, grid = 2;
	std::vector<unsigned> slot(grid * big, 0);
	unsigned bad = 0;
	for (unsigned i = 1; i <= n && !bad; i++) {
		const unsigned nt = i % 2 ? 32 : big, before = writes.load();
		mgt_sim_launch("tag_k", tag_k, dim3(grid), dim3(nt), 0, (cudaStream_t)0, slot.data(), i);
		if (writes.load() - before != grid * nt)
			bad = i, fprintf(stderr, "# launch %u: %u writes, expected %u\n", i, writes.load() - before, grid * nt);
		for (unsigned t = 0; t < grid * nt && !bad; t++)
			if (slot[t] != i)
				bad = i, fprintf(stderr, "# launch %u: slot %u holds %u\n", i, t, slot[t]);
	}
	char what[160];
	snprintf(what, sizeof what, "%u launches alternating 32 and %u threads a block, each ran once over its own threads",
		 n, big);
	ok(!bad, what);
}

void barriers(void)
{
	const unsigned n = 96, grid = 5;
	std::vector<unsigned> out(grid * n, 0);
	unsigned bad = 0;
	for (int rep = 0; rep < 4; rep++) {
		mgt_sim_launch("ring_k", ring_k, dim3(grid), dim3(n), 0, (cudaStream_t)0, out.data());
		for (unsigned b = 0; b < grid; b++)
			for (unsigned t = 0; t < n; t++) {
				/* round r reads what thread t + 1 stored, from thread t + 2 in round r - 1 ... */
				unsigned w = (t + 3) % n;
				w = w * 7 + b, w = w * 7 + b, w = w * 7 + b;
				bad += out[b * n + t] != w;
			}
	}
	ok(bad == 0, "threads meeting at __syncthreads read what the others stored before it (4 launches, both orders)");
}

void divergence(void)
{
	fflush(stdout);
	int fd[2];
	if (pipe(fd) != 0)
		return ok(false, "pipe");
	const pid_t pid = fork();
	if (pid == 0) {
		dup2(fd[1], 2);
		std::vector<unsigned> out(32);
		mgt_sim_launch("divergent_k", divergent_k, dim3(1), dim3(32), 0, (cudaStream_t)0, out.data());
		_exit(0);
	}
	close(fd[1]);
	std::string err;
	char buf[512];
	ssize_t k;
	while ((k = read(fd[0], buf, sizeof buf)) > 0)
		err.append(buf, (size_t)k);
	close(fd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	const bool died = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
	const bool named = err.find("__syncthreads") != std::string::npos &&
			   err.find("__shfl_sync") != std::string::npos && err.find("divergent") != std::string::npos;
	ok(died && named, "a divergent barrier is reported at once, naming __syncthreads and __shfl_sync");
	if (!(died && named))
		fprintf(stderr, "# child status %#x, stderr:\n%s", st, err.c_str());
}

} // namespace

int main(int argc, char **argv)
{
	launches(argc > 1 ? (unsigned)atoi(argv[1]) : 2000);
	barriers();
	divergence();
	return fail ? 1 : 0;
}
