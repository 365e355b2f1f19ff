/* tests/sim/prof_test.cc (make check-sim): the access profile (tests/sim/sim_prof.cc) on kernels
 * whose sectors and bank conflicts follow from their indexing.  One warp of 32 lanes each:
 *   copy_k     lane l reads in[l], writes out[l] (4 bytes, consecutive): 128 bytes = 4 sectors a
 *              request, the ideal;
 *   stride_k   lane l reads in[32 l] (128 bytes apart): a sector each, 32 a request, 8 x the
 *              ideal (128 bytes touched = 4 sectors);
 *   vec_k      lane l reads the float4 in[l]: 512 bytes = 16 sectors, the ideal (one 16-byte
 *              access a lane, as on a GPU: the kernels are built with -fno-tree-sra);
 *   bank_k     shared float s[32 * 33]: lane l writes s[32 l] (every word in bank 0: 32
 *              wavefronts where 1 would do, 31 extra), then s[33 l] (padded: banks l, none extra)
 *              and reads s[l] and s[l / 32] (word 0 for all: a broadcast, none extra); 31 extra over 4
 *              accesses = 7.75 a shared access.
 * The figures per kernel cover its loads and stores together (expect() below).
 * Then the bounds check: a bound of 4 sectors/request on stride_k must fail, naming it. */
#include "cuda_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

namespace {

void copy_k(float *out, const float *in) { out[threadIdx.x] = in[threadIdx.x]; }

void stride_k(float *out, const float *in) { out[threadIdx.x] = in[32 * threadIdx.x]; }

void vec_k(float *out, const float4 *in)
{
	const float4 v = in[threadIdx.x];
	out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

void bank_k(float *out)
{
	__shared__ float s[32 * 33];
	const unsigned l = threadIdx.x;
	s[32 * l] = (float)l;
	s[33 * l] = (float)l;
	__syncthreads();
	out[l] = s[l] + s[l / 32]; /* s[l / 32]: word 0 for every lane, not a constant index */
}

int fail = 0;

void ok(bool c, const char *what)
{
	printf("%sok - %s\n", c ? "" : "not ", what);
	fail += !c;
}

void expect(const char *k, double spr, double spi, double xpa)
{
	double s = -1, i = -1, x = -1;
	const bool seen = mgt_sim_prof_kernel(k, &s, &i, &x);
	char what[256];
	snprintf(what, sizeof what, "profile of %s: %.2f sectors/request (%.2f), %.2f x the ideal (%.2f), %.3f extra "
		 "wavefronts a shared access (%.3f)", k, s, spr, i, spi, x, xpa);
	ok(seen && s == spr && i == spi && x == xpa, what);
}

/* A bound below stride_k's pattern fails, naming the kernel; copy_k's holds. */
void bounds(void)
{
	char path[] = "/tmp/mgt-prof-test-XXXXXX";
	const int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f)
		return ok(false, "a temporary bounds file");
	fprintf(f, "# kernel, sectors/request, sectors/ideal, extra/access\ncopy_k\t4\t1\t0\nstride_k\t4\t1\t0\n");
	fclose(f);
	printf("# expected: stride_k over its bound\n");
	const int over = mgt_sim_prof_check(path);
	unlink(path);
	ok(over == 1, "the bounds check fails for stride_k (18 sectors/request over a bound of 4) and only it");
}

} // namespace

int main(void)
{
	mgt_sim_prof_enable();
	float *in = (float *)mgt_sim_mem_alloc(32 * 32 * sizeof(float)), *out = (float *)mgt_sim_mem_alloc(32 * sizeof(float));
	for (int i = 0; i < 32 * 32; i++)
		in[i] = (float)i;
	const cudaStream_t st = 0;
	mgt_sim_launch("copy_k", copy_k, dim3(1), dim3(32), 0, st, out, (const float *)in);
	mgt_sim_launch("stride_k", stride_k, dim3(1), dim3(32), 0, st, out, (const float *)in);
	mgt_sim_launch("vec_k", vec_k, dim3(1), dim3(32), 0, st, out, (const float4 *)in);
	mgt_sim_launch("bank_k", bank_k, dim3(1), dim3(32), 0, st, out);
	/* loads and stores together: (4 + 4) / 2 requests, 8 sectors of 8 ideal */
	expect("copy_k", 4, 1, 0);
	/* (32 + 4) / 2, 36 of 4 + 4 ideal */
	expect("stride_k", 18, 4.5, 0);
	/* (16 + 4) / 2, 20 of 16 + 4 */
	expect("vec_k", 10, 1, 0);
	/* the global store alone: 4, 1 */
	expect("bank_k", 4, 1, 31.0 / 4);
	bounds();
	return fail ? 1 : 0;
}
