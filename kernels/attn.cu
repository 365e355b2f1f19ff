/* kernels/: launchers of GQA self-attention in fp32 (kernels.h mgt_k_attn_fwd / _bwd: causal, or
 * under a key padding mask through the kernels' MASK instances; with a position bias,
 * mgt_k_attn_bias_fwd / _bwd, through their BIAS instances and dbias_kernel), of its blocks for context
 * parallelism (mgt_k_attn_blk_fwd / _bwd; the same kernels on a block geometry) and of
 * cross-attention (mgt_k_xattn_fwd / _bwd: the same kernels on make_xgeom's geometry); the algorithm, tiling, determinism and ws layout are described in kernels/attn.cuh.
 *
 * Head dimensions: d <= 128, any value (tiles are padded to DM = 16, 32, 64 or 128 columns; the
 * presets use 16, 32, 64 and 128).  Tiles: forward 64 x 64 for every DM; backward 64 x 64 for
 * DM <= 64 and 32 x 32 for DM = 128 (shared memory stays under 99 KB, the per-block limit of
 * every sm_8x/sm_9x part; above 48 KB it is opted into with cudaFuncSetAttribute). */
#include <cuda_runtime.h>

#include "attn.cuh"
#include "common.cuh"
#include "kernels.h"

using namespace mgt_attn_k;

/* Opts a kernel into `bytes` of dynamic shared memory when that is over the default 48 KB. */
template <typename F> static cudaError_t allow_smem(F *kern, size_t bytes)
{
	if (bytes <= 48 * 1024)
		return cudaSuccess;
	return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Column padding of head dimension d; 0 when unsupported. */
static int pad_dim(int d)
{
	return d <= 0 ? 0 : d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 0;
}

/* Nothing to do (the CPU backend returns on the same shapes). */
static bool empty_shape(int s, int b, int ng, int r, int d)
{
	return s <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0;
}

template <int DM, int BQ, int BK, bool MASK, bool BIAS, bool SEG>
static int fwd_launch(cudaStream_t st, float *out, float *lse, const float *q, const float *kv,
		      const geom &G)
{
	const size_t sm = fwd_smem(DM, BQ, BK);
	const cudaError_t e = allow_smem(fwd_kernel<DM, BQ, BK, MASK, BIAS, SEG>, sm);
	if (e != cudaSuccess)
		return (int)e;
	const dim3 grid((unsigned)(G.b * G.H), (unsigned)((G.sq + BQ - 1) / BQ));
	MGT_LAUNCH((fwd_kernel<DM, BQ, BK, MASK, BIAS, SEG>), grid, NT, sm, st, G, out, lse, q, kv);
	return (int)cudaGetLastError();
}

template <bool MASK, bool BIAS, bool SEG = false>
static int fwd_dim(cudaStream_t st, float *out, float *lse, const float *q, const float *kv, const geom &G)
{
	switch (pad_dim(G.d)) {
	case 16: return fwd_launch<16, 64, 64, MASK, BIAS, SEG>(st, out, lse, q, kv, G);
	case 32: return fwd_launch<32, 64, 64, MASK, BIAS, SEG>(st, out, lse, q, kv, G);
	case 64: return fwd_launch<64, 64, 64, MASK, BIAS, SEG>(st, out, lse, q, kv, G);
	case 128: return fwd_launch<128, 64, 64, MASK, BIAS, SEG>(st, out, lse, q, kv, G);
	default: return (int)cudaErrorInvalidValue;
	}
}

/* The forward of geometry G (whole sequence or block), queries from q, keys and values from kv;
 * with G.bias the BIAS kernels. */
static int fwd_geom(cudaStream_t st, float *out, float *lse, const float *q, const float *kv,
		    const geom &G)
{
	if (G.bias)
		return G.km ? fwd_dim<true, true>(st, out, lse, q, kv, G)
			    : fwd_dim<false, true>(st, out, lse, q, kv, G);
	if (G.seg) /* packed documents: causal, no mask (cuda_attn.c refuses the others) */
		return fwd_dim<false, false, true>(st, out, lse, q, kv, G);
	return G.km ? fwd_dim<true, false>(st, out, lse, q, kv, G) : fwd_dim<false, false>(st, out, lse, q, kv, G);
}

extern "C" int mgt_k_attn_fwd(mgt_k_stream s, float *out, float *lse, const float *qkv, int seq,
			      int b, int ng, int r, int d, float p, uint64_t key, int head0,
			      int heads_total, const uint8_t *key_mask, const int32_t *seg)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.seg = key_mask ? nullptr : seg;
	return fwd_geom((cudaStream_t)s, out, lse, qkv, qkv, G);
}

extern "C" int mgt_k_attn_bias_fwd(mgt_k_stream s, float *out, float *lse, const float *qkv, int seq,
				   int b, int ng, int r, int d, float p, uint64_t key, int head0,
				   int heads_total, const uint8_t *key_mask, const float *bias)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.bias = bias;
	return fwd_geom((cudaStream_t)s, out, lse, qkv, qkv, G);
}

/* Nothing to do for a block with a count of 0 (backend.h). */
static bool empty_blk(const mgt_k_attn_blk *g)
{
	return g->sq <= 0 || g->sk <= 0 || empty_shape(g->sq, g->b, g->ng, g->r, g->d);
}

extern "C" int mgt_k_attn_blk_fwd(mgt_k_stream s, const mgt_k_attn_blk *g, float *out, float *lse,
				  const float *q, const float *kv)
{
	if (empty_blk(g))
		return (int)cudaSuccess;
	return fwd_geom((cudaStream_t)s, out, lse, q, kv, make_blk_geom(g));
}

extern "C" size_t mgt_k_attn_bwd_ws_bytes(int seq, int b, int ng, int r, int d)
{
	(void)d;
	return ws_bytes(seq, b, ng, r);
}

template <int DM, int BQ, int BK, bool MASK, bool BIAS, bool SEG>
static int bwd_launch(cudaStream_t st, float *dq, float *dkv, const float *dout, const float *q,
		      const float *kv, const float *lse, const float *D, const geom &G)
{
	const size_t sm = bwd_smem(DM, BQ, BK);
	cudaError_t e = allow_smem(dkdv_kernel<DM, BQ, BK, MASK, BIAS, SEG>, sm);
	if (e == cudaSuccess)
		e = allow_smem(dq_kernel<DM, BQ, BK, MASK, BIAS, SEG>, sm);
	if (e != cudaSuccess)
		return (int)e;
	/* keys past the last query's last visible key get nothing (the whole sequence: none) */
	const int kvis = G.sq + G.dlt < G.sk ? G.sq + G.dlt : G.sk;
	const dim3 gkv((unsigned)(G.b * G.ng), (unsigned)((kvis + BK - 1) / BK));
	const dim3 gq((unsigned)(G.b * G.H), (unsigned)((G.sq + BQ - 1) / BQ));
	if (kvis > 0)
		MGT_LAUNCH((dkdv_kernel<DM, BQ, BK, MASK, BIAS, SEG>), gkv, NT, sm, st, G, dkv, dout, q, kv, lse, D);
	MGT_LAUNCH((dq_kernel<DM, BQ, BK, MASK, BIAS, SEG>), gq, NT, sm, st, G, dq, dout, q, kv, lse, D);
	return (int)cudaGetLastError();
}

template <bool MASK, bool BIAS, bool SEG = false>
static int bwd_dim(cudaStream_t st, int dm, float *dq, float *dkv, const float *dout, const float *q,
		   const float *kv, const float *lse, const float *D, const geom &G)
{
	switch (dm) {
	case 16: return bwd_launch<16, 64, 64, MASK, BIAS, SEG>(st, dq, dkv, dout, q, kv, lse, D, G);
	case 32: return bwd_launch<32, 64, 64, MASK, BIAS, SEG>(st, dq, dkv, dout, q, kv, lse, D, G);
	case 64: return bwd_launch<64, 64, 64, MASK, BIAS, SEG>(st, dq, dkv, dout, q, kv, lse, D, G);
	default: return bwd_launch<128, 32, 32, MASK, BIAS, SEG>(st, dq, dkv, dout, q, kv, lse, D, G);
	}
}

/* The sum of G.ds by distance into dbias (dbias_kernel), after the BIAS backward kernels. */
static int dbias_launch(cudaStream_t st, const geom &G, float *dbias)
{
	const long long nt = (long long)G.H * (2 * G.sq - 1);
	const unsigned nb = (unsigned)((nt + NT - 1) / NT);
	if (G.km)
		MGT_LAUNCH(dbias_kernel<true>, nb, NT, 0, st, G, dbias, G.ds);
	else
		MGT_LAUNCH(dbias_kernel<false>, nb, NT, 0, st, G, dbias, G.ds);
	return (int)cudaGetLastError();
}

/* The backward of geometry G: D into ws, then dK/dV into dkv and dQ into dq; with G.bias (the
 * whole sequence) the BIAS kernels, dS into G.ds, and its sums by distance added into dbias. */
static int bwd_geom(cudaStream_t st, float *dq, float *dkv, const float *dout, const float *q,
		    const float *kv, const float *out, const float *lse, const geom &G, void *ws,
		    float *dbias = nullptr)
{
	const int dm = pad_dim(G.d);
	if (dm == 0)
		return (int)cudaErrorInvalidValue;
	float *D = (float *)ws;
	const long long rows = (long long)G.sq * G.b * G.H;
	MGT_LAUNCH(rowdot_kernel<float>, (unsigned)((rows + NT / 32 - 1) / (NT / 32)), NT, 0, st, G, D, dout,
		   out);
	if (G.seg) /* packed documents: causal, no mask, no bias */
		return bwd_dim<false, false, true>(st, dm, dq, dkv, dout, q, kv, lse, D, G);
	if (!G.bias)
		return G.km ? bwd_dim<true, false>(st, dm, dq, dkv, dout, q, kv, lse, D, G)
			    : bwd_dim<false, false>(st, dm, dq, dkv, dout, q, kv, lse, D, G);
	const int rc = G.km ? bwd_dim<true, true>(st, dm, dq, dkv, dout, q, kv, lse, D, G)
			    : bwd_dim<false, true>(st, dm, dq, dkv, dout, q, kv, lse, D, G);
	return rc != (int)cudaSuccess ? rc : dbias_launch(st, G, dbias);
}

extern "C" int mgt_k_attn_bwd(mgt_k_stream s, float *dqkv, const float *dout, const float *qkv,
			      const float *out, const float *lse, int seq, int b, int ng, int r,
			      int d, float p, uint64_t key, int head0, int heads_total,
			      const uint8_t *key_mask, const int32_t *seg, void *ws)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.seg = key_mask ? nullptr : seg;
	return bwd_geom((cudaStream_t)s, dqkv, dqkv, dout, qkv, qkv, out, lse, G, ws);
}

extern "C" size_t mgt_k_attn_bias_bwd_ws_bytes(int seq, int b, int ng, int r, int d)
{
	(void)d;
	return bias_ws_bytes(seq, b, ng, r);
}

extern "C" int mgt_k_attn_bias_bwd(mgt_k_stream s, float *dqkv, const float *dout, const float *qkv,
				   const float *out, const float *lse, int seq, int b, int ng, int r,
				   int d, float p, uint64_t key, int head0, int heads_total,
				   const uint8_t *key_mask, const float *bias, float *dbias, void *ws)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total, key_mask);
	G.bias = bias;
	G.ds = (float *)((char *)ws + bias_ds_offset(seq, b, ng, r));
	return bwd_geom((cudaStream_t)s, dqkv, dqkv, dout, qkv, qkv, out, lse, G, ws, dbias);
}

extern "C" size_t mgt_k_attn_blk_bwd_ws_bytes(const mgt_k_attn_blk *g)
{
	return empty_blk(g) ? 0 : blk_ws_bytes(g);
}

extern "C" int mgt_k_attn_blk_bwd(mgt_k_stream s, const mgt_k_attn_blk *g, float *dq, float *dkv,
				  const float *dout, const float *q, const float *kv,
				  const float *out, const float *lse, void *ws)
{
	/* nothing visible: nothing to add */
	if (empty_blk(g) || g->koff > g->qoff + g->sq - 1)
		return (int)cudaSuccess;
	return bwd_geom((cudaStream_t)s, dq, dkv, dout, q, kv, out, lse, make_blk_geom(g), ws);
}

extern "C" int mgt_k_xattn_fwd(mgt_k_stream s, float *out, float *lse, const float *q, const float *kv, int sq,
			       int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0,
			       int heads_total, const uint8_t *key_mask)
{
	if (sk <= 0 || empty_shape(sq, b, ng, r, d))
		return (int)cudaSuccess;
	const geom G = make_xgeom(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	return fwd_geom((cudaStream_t)s, out, lse, q, kv, G);
}

extern "C" size_t mgt_k_xattn_bwd_ws_bytes(int sq, int b, int ng, int r)
{
	return ws_bytes(sq, b, ng, r);
}

extern "C" int mgt_k_xattn_bwd(mgt_k_stream s, float *dq, float *dkv, const float *dout, const float *q,
			       const float *kv, const float *out, const float *lse, int sq, int sk, int b,
			       int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			       const uint8_t *key_mask, void *ws)
{
	if (sk <= 0 || empty_shape(sq, b, ng, r, d))
		return (int)cudaSuccess;
	const geom G = make_xgeom(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	return bwd_geom((cudaStream_t)s, dq, dkv, dout, q, kv, out, lse, G, ws);
}
