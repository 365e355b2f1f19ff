/* kernels/: warp-level tensor-core instructions with known fragment layouts (PTX ISA, sm_80 and
 * later), for kernels that work on the accumulators in registers (kernels/attn_mma.cuh):
 *
 *   mgt_ldsm_x4(r, p) / mgt_ldsm_x4_t(r, p): ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16.
 *     Lanes 8m..8m+7 pass the shared-memory addresses (16-byte aligned) of the 8 rows of matrix m
 *     (8 16-bit elements each); r[m] of lane t then holds row t/4, columns 2(t%4), 2(t%4)+1 of
 *     matrix m (the lower column in the low half), or with _t column t/4, rows 2(t%4), 2(t%4)+1.
 *   mgt_mma16816<T>(d, a, b): mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32, d += A B with A
 *     16 x 16 and B 16 x 8 in T (__nv_bfloat16 or __half), d fp32.  With gid = lane / 4 and
 *     tig = lane % 4: a[0] = A[gid][2tig..2tig+1], a[1] = A[gid+8][2tig..], a[2] = A[gid][2tig+8..],
 *     a[3] = A[gid+8][2tig+8..]; b[0] = B[2tig..2tig+1][gid], b[1] = B[2tig+8..2tig+9][gid];
 *     d[0..1] = D[gid][2tig..2tig+1], d[2..3] = D[gid+8][2tig..].
 *   mgt_pack2(lo, hi): two T values in one register, lo in the low half.
 *   mgt_cp_async16(dst, src, full) / mgt_cp_async_commit() / mgt_cp_async_wait<N>(): cp.async.cg
 *     of 16 bytes from global src to shared dst (both 16-byte aligned), zeros instead when !full
 *     (src-size 0: src is not read); commit_group closes the thread's group of copies; wait_group
 *     N waits until at most N of its groups are in flight.  Other threads see the bytes only after
 *     the wait and a barrier (FlashAttention-2's K/V prefetch, Dao 2023, section 3.3).
 *
 * So a row-major 16 x 16 tile X in shared memory (row stride ld elements) is an A operand through
 * mgt_ldsm_x4 with lane l passing &X[l % 16][(l / 16) * 8]; the B operand X^T of two 8-column
 * tiles from row-major rows X[n][k] (n: the 16 output columns) is mgt_ldsm_x4 with lane l passing
 * &X[(l % 8) + (l / 16) * 8][((l / 8) % 2) * 8] (r[0..1]: columns 0..7, r[2..3]: 8..15); the B
 * operand X itself (X[k][n]) is mgt_ldsm_x4_t with &X[(l % 8) + ((l / 8) % 2) * 8][(l / 16) * 8].
 * Two adjacent accumulator tiles (columns 0..7 and 8..15), rounded to T and packed with mgt_pack2,
 * are the A operand of the next product: a[0] = pack(c0[0], c0[1]), a[1] = pack(c0[2], c0[3]),
 * a[2] = pack(c1[0], c1[1]), a[3] = pack(c1[2], c1[3]) (FlashAttention-2's P V).
 *
 * Under the CPU simulator (MGT_CUDA_SIM) these are tests/sim/mma_sim.h's, from the same layouts. */
#ifndef MGT_KERNELS_MMA_CUH
#define MGT_KERNELS_MMA_CUH

#include <stdint.h>

#include "common.cuh"

template <typename T> static __device__ __forceinline__ uint16_t mgt_bits16(T v);
#ifdef MGT_CUDA_SIM
template <> inline uint16_t mgt_bits16<__nv_bfloat16>(__nv_bfloat16 v) { return v.x; }
template <> inline uint16_t mgt_bits16<__half>(__half v) { return v.x; }
#else
template <> __device__ __forceinline__ uint16_t mgt_bits16<__nv_bfloat16>(__nv_bfloat16 v)
{
	return __bfloat16_as_ushort(v);
}
template <> __device__ __forceinline__ uint16_t mgt_bits16<__half>(__half v) { return __half_as_ushort(v); }
#endif

template <typename T> static __device__ __forceinline__ uint32_t mgt_pack2(T lo, T hi)
{
	return (uint32_t)mgt_bits16<T>(lo) | (uint32_t)mgt_bits16<T>(hi) << 16;
}

#ifdef MGT_CUDA_SIM
static inline void mgt_cp_async16(void *dst, const void *src, bool full) { mgt_sim_cp_async16(dst, src, full); }
static inline void mgt_cp_async_commit(void) { mgt_sim_cp_async_commit(); }
template <int N> static inline void mgt_cp_async_wait(void) { mgt_sim_cp_async_wait(N); }
static inline void mgt_ldsm_x4(uint32_t (&r)[4], const void *p) { mgt_sim_ldmatrix_x4(r, p, false); }
static inline void mgt_ldsm_x4_t(uint32_t (&r)[4], const void *p) { mgt_sim_ldmatrix_x4(r, p, true); }
template <typename T>
static inline void mgt_mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	const uint32_t b[2] = {b0, b1};
	mgt_sim_mma16816(d, a, b, std::is_same<T, __nv_bfloat16>::value);
}
#else
static __device__ __forceinline__ void mgt_cp_async16(void *dst, const void *src, bool full)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(full ? 16 : 0)
		     : "memory");
}
static __device__ __forceinline__ void mgt_cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void mgt_cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void mgt_ldsm_x4(uint32_t (&r)[4], const void *p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}
static __device__ __forceinline__ void mgt_ldsm_x4_t(uint32_t (&r)[4], const void *p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}
template <typename T>
static __device__ __forceinline__ void mgt_mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
						    uint32_t b1);
template <>
__device__ __forceinline__ void mgt_mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
							    uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
		     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mgt_mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
						     uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
		     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

#endif
