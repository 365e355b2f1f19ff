/* tests/sim/: host stand-ins for the warp-level instructions of kernels/mma.cuh, for the CPU
 * simulator of CUDA (tests/sim/cuda_sim.h includes this after the 16-bit types):
 *   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 and
 *   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32.
 * Both are warp-collective: every lane gives its operands (row addresses, or its A and B registers)
 * through mgt_sim_warp_all and then computes its own part of the result from the lanes' copies,
 * with the fragment layouts of the PTX ISA ("Warp-level matrix load instruction: ldmatrix" and
 * "Matrix Fragments for mma.m16n8k16 with floating point type"); groupID = lane / 4,
 * threadID_in_group = lane % 4:
 *   ldmatrix: lanes 8m..8m+7 give the row addresses of matrix m (8 rows of 8 16-bit elements);
 *     register m of lane t holds row t/4, columns 2(t%4) and 2(t%4)+1 of matrix m (low half
 *     first), or with .trans column t/4, rows 2(t%4) and 2(t%4)+1.
 *   mma A (16 x 16, row): a[0] rows gid, columns 2tig, 2tig+1; a[1] rows gid+8; a[2] rows gid,
 *     columns + 8; a[3] rows gid+8, columns + 8.  B (16 x 8, col): b[0] rows (k) 2tig, 2tig+1,
 *     column gid; b[1] rows + 8.  C, D (16 x 8 fp32): c[0], c[1] row gid, columns 2tig, 2tig+1;
 *     c[2], c[3] row gid+8.
 * Products are exact in fp32 and summed in fp32 onto C in k order (a GPU's tensor-core sums are
 * not bitwise those). */
#ifndef MGT_TESTS_SIM_MMA_SIM_H
#define MGT_TESTS_SIM_MMA_SIM_H

#include <stdio.h>

/* cp.async (kernels/mma.cuh mgt_cp_async16/_commit/_wait): a thread's copies are queued, not done,
 * and happen (bounds- and race-checked through mgt_sim_mem_span) only at a wait_group that covers
 * their group, so a kernel that reads the tile before its wait and barrier reads stale bytes and
 * fails its checks, as it may on a GPU.  Copies left unwaited when the thread's block changes, or
 * more than MGT_SIM_CPA in flight, are reported (a fault). */
enum { MGT_SIM_CPA = 64, MGT_SIM_CPA_THREADS = 1024 };
struct mgt_sim_cpa_q {
	struct {
		void *dst;
		const void *src;
		bool full;
		int group;
	} q[MGT_SIM_CPA];
	int n, committed;
	uint3 block;
};
static inline mgt_sim_cpa_q &mgt_sim_cpa_mine(void)
{
	static mgt_sim_cpa_q qs[MGT_SIM_CPA_THREADS];
	const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	mgt_sim_cpa_q &q = qs[t % MGT_SIM_CPA_THREADS];
	if (q.block.x != blockIdx.x || q.block.y != blockIdx.y || q.block.z != blockIdx.z) {
		if (q.n) {
			fprintf(stderr, "cuda sim: %d cp.async copies of thread %u never waited for\n", q.n, t);
			mgt_sim_fault(cudaErrorIllegalAddress);
		}
		q.n = q.committed = 0;
		q.block = blockIdx;
	}
	return q;
}
static inline void mgt_sim_cp_async16(void *dst, const void *src, bool full)
{
	mgt_sim_cpa_q &q = mgt_sim_cpa_mine();
	if (q.n == MGT_SIM_CPA) {
		fprintf(stderr, "cuda sim: more than %d cp.async copies in flight\n", MGT_SIM_CPA);
		mgt_sim_fault(cudaErrorIllegalAddress);
		return;
	}
	q.q[q.n].dst = dst, q.q[q.n].src = src, q.q[q.n].full = full, q.q[q.n].group = q.committed;
	q.n++;
}
static inline void mgt_sim_cp_async_commit(void) { mgt_sim_cpa_mine().committed++; }
/* The copies of every committed group but the newest n, in the order issued.  The spans check
 * (and profile) each copy once; the memcpy and memset are not instrumented. */
__attribute__((no_sanitize_address)) static inline void mgt_sim_cp_async_wait(int n)
{
	mgt_sim_cpa_q &q = mgt_sim_cpa_mine();
	int k = 0;
	for (int i = 0; i < q.n; i++) {
		if (q.q[i].group < q.committed - n) {
			if (q.q[i].full)
				mgt_sim_mem_span(q.q[i].src, 16, false);
			mgt_sim_mem_span(q.q[i].dst, 16, true);
			if (q.q[i].full)
				memcpy(q.q[i].dst, q.q[i].src, 16);
			else
				memset(q.q[i].dst, 0, 16);
		} else {
			q.q[k++] = q.q[i];
		}
	}
	q.n = k;
}

static inline float mma_sim_f(uint16_t h, bool bf)
{
	return bf ? __uint_as_float((unsigned)h << 16) : mgt_sim_h2f(h);
}

/* r[m] of matrix m = 0..3 from the lanes' row addresses (see above).  Each lane's 16-byte row is
 * checked (and profiled) as one access, as the instruction reads it; the element reads below are
 * not instrumented. */
__attribute__((no_sanitize_address)) static inline void mgt_sim_ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
	const void *rows[32];
	mgt_sim_mem_span(row, 16, false);
	mgt_sim_warp_all(&row, rows, sizeof row, trans ? "ldmatrix.trans" : "ldmatrix");
	const int t = mgt_sim_lane();
	for (int m = 0; m < 4; m++) {
		uint16_t h[2];
		for (int e = 0; e < 2; e++) {
			const uint16_t *p = (const uint16_t *)rows[8 * m + (trans ? 2 * (t % 4) + e : t / 4)];
			h[e] = trans ? p[t / 4] : p[2 * (t % 4) + e];
		}
		r[m] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
	}
}

/* d += A B for the warp's 16 x 8 tile (bf: bf16 operands, else fp16).  Registers only: not
 * instrumented (the per-access checks would only slow it). */
__attribute__((no_sanitize_address)) static inline void mgt_sim_mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf)
{
	struct ops {
		uint32_t a[4], b[2];
	} mine, all[32];
	memcpy(mine.a, a, sizeof mine.a);
	memcpy(mine.b, b, sizeof mine.b);
	mgt_sim_warp_all(&mine, all, sizeof mine, "mma.sync");
	const int t = mgt_sim_lane(), gid = t / 4, tig = t % 4;
	if (mgt_sim_prof_on && t == 0)
		mgt_sim_prof_flops(2.0 * 16 * 8 * 16);
	for (int e = 0; e < 4; e++) {
		const int row = gid + 8 * (e / 2), col = 2 * tig + e % 2;
		float acc = d[e];
		for (int k = 0; k < 16; k++) {
			const uint32_t ar = all[(row % 8) * 4 + (k % 8) / 2].a[row / 8 + 2 * (k / 8)];
			const uint32_t br = all[col * 4 + (k % 8) / 2].b[k / 8];
			const uint16_t ah = (uint16_t)(ar >> 16 * (k % 2)), bh = (uint16_t)(br >> 16 * (k % 2));
			acc += mma_sim_f(ah, bf) * mma_sim_f(bh, bf);
		}
		d[e] = acc;
	}
}

#endif
