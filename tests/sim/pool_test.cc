/* tests/sim/pool_test.cc (make check-sim): the simulator's launch machinery (tests/sim/cuda_sim.cc)
 * under many back-to-back launches whose block sizes alternate between one warp and the whole
 * pool, the pattern in which a pool thread that sits out one launch wakes late, while the next
 * launch is being set up (a race there once left a launch that never finished: mgt-train's CP
 * ranks hung in CI).  Each launch writes its own tag to every thread's slot; the check is that
 * every launch finishes and writes exactly its threads' slots once, with the block indices it
 * was given.  A hang ends in the simulator's own report after MGT_SIM_HANG seconds (the test
 * sets 30 unless the environment says otherwise) or in make's time.
 * Prints "ok - ..." / "not ok - ..."; exits 1 on a failure. */
#include "cuda_sim.h"

#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <vector>

namespace {

std::atomic<unsigned> writes{0};

void tag_k(unsigned *slot, unsigned tag)
{
	const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
	slot[t] = tag;
	writes.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

int main(int argc, char **argv)
{
	const unsigned launches = argc > 1 ? (unsigned)atoi(argv[1]) : 3000, big = 1024, grid = 2;
	setenv("MGT_SIM_HANG", "30", 0);
	std::vector<unsigned> slot(grid * big, 0);
	unsigned bad = 0;
	for (unsigned i = 1; i <= launches && !bad; i++) {
		const unsigned nt = i % 2 ? 32 : big, before = writes.load();
		mgt_sim_launch("tag_k", tag_k, dim3(grid), dim3(nt), 0, (cudaStream_t)0, slot.data(), i);
		if (writes.load() - before != grid * nt)
			bad = i, fprintf(stderr, "# launch %u: %u writes, expected %u\n", i, writes.load() - before, grid * nt);
		for (unsigned t = 0; t < grid * nt && !bad; t++)
			if (slot[t] != i)
				bad = i, fprintf(stderr, "# launch %u: slot %u holds %u\n", i, t, slot[t]);
	}
	printf("%sok - %u launches alternating 32 and %u threads a block, each ran once over its own threads\n",
	       bad ? "not " : "", launches, big);
	return bad ? 1 : 0;
}
