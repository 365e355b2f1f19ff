/* kernels/: launchers of GQA self-attention on tensor cores (kernels.h mgt_k_attn_tc_fwd, mgt_k_xattn_tc_fwd; the backward is kernels/attn_tc_bwd.cu; causal,
 * block-diagonal causal over packed documents (seg, the causal kernels with geom seg set), or
 * under a key padding mask through the kernels' MASK instances):
 * the mma.sync kernels of kernels/attn_mma.cuh, with (impl MGT_K_ATTN_MMA) or without
 * (MGT_K_ATTN_MMA_NOCP) their cp.async prefetch of K and V; kernels/attn_tc.cuh has the function,
 * numerics and staging they share.
 *
 * Head dimensions d % 16 == 0 up to 128, padded to DM = 16, 32, 64 or 128 columns (zeros).
 * Blocks of 128 threads (4 warps).  Tiles: forward 64 queries x 64 keys; dK/dV 64 keys x BQ
 * queries and dQ 64 queries x BK keys with BQ = BK = 64 for DM <= 64 and 32 for DM = 128.  Shared
 * memory (attn_mma.cuh fwd_smem, bwd_smem, dq_smem): the operand tiles, K and V twice in the
 * forward and dQ kernels; above 48 KB it is opted into with cudaFuncSetAttribute.  Registers:
 * attn_mma.cuh fwd_blocks, bwd_blocks.
 * ws: D = rowsum(dO * O) as floats [b, H, s] (attn.cuh rowdot_kernel, as mgt_k_attn_bwd). */
#include "attn_tc_host.cuh"

extern "C" int mgt_k_attn_tc_supported(int d) { return tc_pad_dim(d) != 0; }

/* Queries from q, keys and values from kv (both qkv for self-attention), on geometry G. */
/* MBX: the kernel's minimum blocks per SM (launch bounds), 0: fwd_blocks(DM). */
template <typename T, int DM, bool MASK, bool SEG, int MBX = 0>
static int tc_fwd_run(cudaStream_t st, int impl, T *out, float *lse, const T *q, const T *kv, const geom &G,
		      int vec)
{
	constexpr int MB = MBX ? MBX : mgt_attn_mma::fwd_blocks(DM);
	const size_t sm = mgt_attn_mma::fwd_smem(DM, (int)sizeof(T));
	const cudaError_t e = tc_allow_smem(mgt_attn_mma::fwd_mma_kernel<T, DM, MB, MASK, SEG>, sm);
	if (e != cudaSuccess)
		return (int)e;
	const dim3 grid((unsigned)(G.b * G.H), (unsigned)((G.sq + 63) / 64));
	MGT_LAUNCH((mgt_attn_mma::fwd_mma_kernel<T, DM, MB, MASK, SEG>), grid, NTC, sm, st, G, out, lse, q, kv, vec,
		   impl != MGT_K_ATTN_MMA_NOCP && tc_async(kv, G, DM));
	return (int)cudaGetLastError();
}

/* The causal (or unmasked cross-attention) kernel, the key-mask one when G has a mask, the
 * packed-documents one when G has document starts. */
template <typename T, int DM>
static int tc_fwd_launch(cudaStream_t st, int impl, T *out, float *lse, const T *q, const T *kv, const geom &G,
			 int vec)
{
	if constexpr (DM == 64) /* the A/B variant MGT_K_ATTN_MMA_MB2: the causal kernel at 2 blocks per SM */
		if (impl == MGT_K_ATTN_MMA_MB2 && !G.km && !G.seg)
			return tc_fwd_run<T, DM, false, false, 2>(st, impl, out, lse, q, kv, G, vec);
	return G.km ? tc_fwd_run<T, DM, true, false>(st, impl, out, lse, q, kv, G, vec)
	       : G.seg ? tc_fwd_run<T, DM, false, true>(st, impl, out, lse, q, kv, G, vec)
		       : tc_fwd_run<T, DM, false, false>(st, impl, out, lse, q, kv, G, vec);
}

template <typename T>
static int tc_fwd_dim(cudaStream_t st, int impl, int dm, void *out_, float *lse, const void *q_, const void *kv_,
		      const geom &G, int vec)
{
	T *out = (T *)out_;
	const T *q = (const T *)q_, *kv = (const T *)kv_;
	switch (dm) {
	case 16: return tc_fwd_launch<T, 16>(st, impl, out, lse, q, kv, G, vec);
	case 32: return tc_fwd_launch<T, 32>(st, impl, out, lse, q, kv, G, vec);
	case 64: return tc_fwd_launch<T, 64>(st, impl, out, lse, q, kv, G, vec);
	default: return tc_fwd_launch<T, 128>(st, impl, out, lse, q, kv, G, vec);
	}
}

/* The forward of geometry G (self- or cross-attention). */
static int tc_fwd_geom(cudaStream_t st, int dtype, int impl, void *out, float *lse, const void *q, const void *kv,
		       const geom &G)
{
	const int dm = tc_pad_dim(G.d);
	const int vec = G.d % 4 == 0 && mgt_al16(out) && mgt_al16(q) && mgt_al16(kv);
	if (dtype == MGT_K_BF16)
		return tc_fwd_dim<__nv_bfloat16>(st, impl, dm, out, lse, q, kv, G, vec);
	return tc_fwd_dim<__half>(st, impl, dm, out, lse, q, kv, G, vec);
}

extern "C" int mgt_k_attn_tc_fwd(mgt_k_stream s, int dtype, void *out, float *lse,
				 const void *qkv, int seq, int b, int ng, int r, int d, float p,
				 uint64_t key, int head0, int heads_total, const uint8_t *key_mask, const int32_t *seg,
				 int impl)
{
	if (tc_empty(seq, b, ng, r, d))
		return (int)cudaSuccess;
	if (tc_refuse(dtype, d, impl))
		return tc_refuse(dtype, d, impl);
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.seg = key_mask ? nullptr : seg;
	return tc_fwd_geom((cudaStream_t)s, dtype, impl, out, lse, qkv, qkv, G);
}

extern "C" int mgt_k_xattn_tc_fwd(mgt_k_stream s, int dtype, void *out, float *lse, const void *q, const void *kv,
				  int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0,
				  int heads_total, const uint8_t *key_mask, int impl)
{
	if (sk <= 0 || tc_empty(sq, b, ng, r, d))
		return (int)cudaSuccess;
	if (tc_refuse(dtype, d, impl))
		return tc_refuse(dtype, d, impl);
	const geom G = make_xgeom(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	return tc_fwd_geom((cudaStream_t)s, dtype, impl, out, lse, q, kv, G);
}

extern "C" int mgt_k_mma_probe(mgt_k_stream s, int dtype, const float *x, const float *y, float *c1, float *c2,
			       uint32_t *frag)
{
	const cudaStream_t st = (cudaStream_t)s;
	if (dtype == MGT_K_BF16)
		MGT_LAUNCH(mgt_attn_mma::mma_probe_kernel<__nv_bfloat16>, 1, 32, mgt_attn_mma::probe_smem, st, x, y, c1, c2, frag);
	else if (dtype == MGT_K_F16)
		MGT_LAUNCH(mgt_attn_mma::mma_probe_kernel<__half>, 1, 32, mgt_attn_mma::probe_smem, st, x, y, c1, c2, frag);
	else
		return (int)cudaErrorInvalidValue;
	return (int)cudaGetLastError();
}
