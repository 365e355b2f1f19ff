/* kernels/: launchers of the backward of GQA self- and cross-attention on tensor cores (kernels.h
 * mgt_k_attn_tc_bwd, mgt_k_xattn_tc_bwd; self-attention causal, over packed documents or under a
 * key padding mask): D = rowsum(dO * O) into ws (attn.cuh rowdot_kernel), then
 * the mma.sync dK/dV and dQ kernels of kernels/attn_mma.cuh.  Tiles, shared memory and the head
 * dimensions they take: kernels/attn_tc.cu, whose forward this is the backward of. */
#include "attn_tc_host.cuh"

extern "C" size_t mgt_k_attn_tc_bwd_ws_bytes(int seq, int b, int ng, int r, int d)
{
	(void)d;
	return mgt_attn_k::ws_bytes(seq, b, ng, r);
}

/* The backward's tensors: dq, dkv written (both dqkv for self-attention), q and kv read (qkv). */
template <typename T> struct tc_bwd_args {
	float *dq, *dkv;
	const float *dout;
	const T *q, *kv;
	const float *lse, *D;
};

/* TB: the backward's inner tile (BQ of dK/dV, BK of dQ); MBX: the kernels' minimum blocks per SM
 * (launch bounds), 0: bwd_blocks(DM). */
template <typename T, int DM, int TB, bool MASK, bool SEG, int MBX = 0>
static int tc_bwd_run(cudaStream_t st, int impl, const tc_bwd_args<T> &a, const geom &G, int vec)
{
	constexpr int MB = MBX ? MBX : mgt_attn_mma::bwd_blocks(DM);
	const size_t sm = mgt_attn_mma::bwd_smem(DM, TB, (int)sizeof(T), SEG);
	const size_t sq = mgt_attn_mma::dq_smem(DM, TB, (int)sizeof(T));
	cudaError_t e = tc_allow_smem(mgt_attn_mma::dkdv_mma_kernel<T, DM, TB, MB, MASK, SEG>, sm);
	if (e == cudaSuccess)
		e = tc_allow_smem(mgt_attn_mma::dq_mma_kernel<T, DM, TB, MB, MASK, SEG>, sq);
	if (e != cudaSuccess)
		return (int)e;
	const dim3 gkv((unsigned)(G.b * G.ng), (unsigned)((G.sk + 63) / 64));
	const dim3 gq((unsigned)(G.b * G.H), (unsigned)((G.sq + 63) / 64));
	MGT_LAUNCH((mgt_attn_mma::dkdv_mma_kernel<T, DM, TB, MB, MASK, SEG>), gkv, NTC, sm, st, G, a.dkv, a.dout, a.q, a.kv,
		   a.lse, a.D, vec);
	MGT_LAUNCH((mgt_attn_mma::dq_mma_kernel<T, DM, TB, MB, MASK, SEG>), gq, NTC, sq, st, G, a.dq, a.dout, a.q, a.kv,
		   a.lse, a.D, vec, impl != MGT_K_ATTN_MMA_NOCP && tc_async(a.kv, G, DM));
	return (int)cudaGetLastError();
}

/* The causal (or unmasked cross-attention) kernels, the key-mask ones when G has a mask, the
 * packed-documents ones when G has document starts. */
template <typename T, int DM, int TB>
static int tc_bwd_launch(cudaStream_t st, int impl, const tc_bwd_args<T> &a, const geom &G, int vec)
{
	if constexpr (DM == 64) /* the A/B variant MGT_K_ATTN_MMA_MB2: the causal kernels at 2 blocks per SM */
		if (impl == MGT_K_ATTN_MMA_MB2 && !G.km && !G.seg)
			return tc_bwd_run<T, DM, TB, false, false, 2>(st, impl, a, G, vec);
	return G.km ? tc_bwd_run<T, DM, TB, true, false>(st, impl, a, G, vec)
	       : G.seg ? tc_bwd_run<T, DM, TB, false, true>(st, impl, a, G, vec)
		       : tc_bwd_run<T, DM, TB, false, false>(st, impl, a, G, vec);
}

/* D = rowsum(dO * O) into ws, then the kernels of head dimension d. */
template <typename T>
static int tc_bwd_dim(cudaStream_t st, int impl, float *dq, float *dkv, const float *dout, const void *q,
		      const void *kv, const void *out, const float *lse, void *ws, const geom &G, int vec)
{
	const tc_bwd_args<T> a = {dq, dkv, dout, (const T *)q, (const T *)kv, lse, (const float *)ws};
	const long long rows = (long long)G.sq * G.b * G.H;
	const unsigned nb = (unsigned)((rows + mgt_attn_k::NT / 32 - 1) / (mgt_attn_k::NT / 32));
	MGT_LAUNCH(mgt_attn_k::rowdot_kernel<T>, nb, mgt_attn_k::NT, 0, st, G, (float *)ws, dout, (const T *)out);
	switch (tc_pad_dim(G.d)) {
	case 16: return tc_bwd_launch<T, 16, 64>(st, impl, a, G, vec);
	case 32: return tc_bwd_launch<T, 32, 64>(st, impl, a, G, vec);
	case 64: return tc_bwd_launch<T, 64, 64>(st, impl, a, G, vec);
	default: return tc_bwd_launch<T, 128, 32>(st, impl, a, G, vec);
	}
}

/* The backward of geometry G (self- or cross-attention). */
static int tc_bwd_geom(cudaStream_t st, int dtype, int impl, float *dq, float *dkv, const float *dout,
		       const void *q, const void *kv, const void *out, const float *lse, void *ws, const geom &G)
{
	const int vec = G.d % 4 == 0 && mgt_al16(dq) && mgt_al16(dkv) && mgt_al16(dout) && mgt_al16(q) && mgt_al16(kv);
	if (dtype == MGT_K_BF16)
		return tc_bwd_dim<__nv_bfloat16>(st, impl, dq, dkv, dout, q, kv, out, lse, ws, G, vec);
	return tc_bwd_dim<__half>(st, impl, dq, dkv, dout, q, kv, out, lse, ws, G, vec);
}

extern "C" int mgt_k_attn_tc_bwd(mgt_k_stream s, int dtype, float *dqkv, const float *dout,
				 const void *qkv, const void *out, const float *lse, int seq,
				 int b, int ng, int r, int d, float p, uint64_t key, int head0,
				 int heads_total, const uint8_t *key_mask, const int32_t *seg, void *ws, int impl)
{
	if (tc_empty(seq, b, ng, r, d))
		return (int)cudaSuccess;
	if (tc_refuse(dtype, d, impl))
		return tc_refuse(dtype, d, impl);
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.seg = key_mask ? nullptr : seg;
	return tc_bwd_geom((cudaStream_t)s, dtype, impl, dqkv, dqkv, dout, qkv, qkv, out, lse, ws, G);
}

extern "C" int mgt_k_xattn_tc_bwd(mgt_k_stream s, int dtype, float *dq, float *dkv, const float *dout, const void *q,
				  const void *kv, const void *out, const float *lse, int sq, int sk, int b, int ng,
				  int r, int d, float p, uint64_t key, int head0, int heads_total,
				  const uint8_t *key_mask, void *ws, int impl)
{
	if (sk <= 0 || tc_empty(sq, b, ng, r, d))
		return (int)cudaSuccess;
	if (tc_refuse(dtype, d, impl))
		return tc_refuse(dtype, d, impl);
	const geom G = make_xgeom(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	return tc_bwd_geom((cudaStream_t)s, dtype, impl, dq, dkv, dout, q, kv, out, lse, ws, G);
}
