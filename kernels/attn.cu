/* kernels/: launchers of causal GQA self-attention in fp32 (kernels.h mgt_k_attn_*); the algorithm,
 * tiling, determinism and ws layout are described in kernels/attn.cuh.
 *
 * Head dimensions: d <= 128, any value (tiles are padded to DM = 16, 32, 64 or 128 columns; the
 * presets use 16, 32, 64 and 128).  Tiles: forward 64 x 64 for every DM; backward 64 x 64 for
 * DM <= 64 and 32 x 32 for DM = 128 (shared memory stays under 99 KB, the per-block limit of
 * every sm_8x/sm_9x part; above 48 KB it is opted into with cudaFuncSetAttribute). */
#include <cuda_runtime.h>

#include "attn.cuh"
#include "common.cuh"
#include "kernels.h"

using namespace mgt_attn;

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

template <int DM, int BQ, int BK>
static int fwd_launch(cudaStream_t st, float *out, float *lse, const float *qkv, const geom &G)
{
	const size_t sm = fwd_smem(DM, BQ, BK);
	const cudaError_t e = allow_smem(fwd_kernel<DM, BQ, BK>, sm);
	if (e != cudaSuccess)
		return (int)e;
	const dim3 grid((unsigned)(G.b * G.H), (unsigned)((G.s + BQ - 1) / BQ));
	MGT_LAUNCH((fwd_kernel<DM, BQ, BK>), grid, NT, sm, st, G, out, lse, qkv);
	return (int)cudaGetLastError();
}

extern "C" int mgt_k_attn_fwd(mgt_k_stream s, float *out, float *lse, const float *qkv, int seq,
			      int b, int ng, int r, int d, float p, uint64_t key, int head0,
			      int heads_total)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	const geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total);
	const cudaStream_t st = (cudaStream_t)s;
	switch (pad_dim(d)) {
	case 16: return fwd_launch<16, 64, 64>(st, out, lse, qkv, G);
	case 32: return fwd_launch<32, 64, 64>(st, out, lse, qkv, G);
	case 64: return fwd_launch<64, 64, 64>(st, out, lse, qkv, G);
	case 128: return fwd_launch<128, 64, 64>(st, out, lse, qkv, G);
	default: return (int)cudaErrorInvalidValue;
	}
}

extern "C" size_t mgt_k_attn_bwd_ws_bytes(int seq, int b, int ng, int r, int d)
{
	(void)d;
	return ws_bytes(seq, b, ng, r);
}

template <int DM, int BQ, int BK>
static int bwd_launch(cudaStream_t st, float *dqkv, const float *dout, const float *qkv,
		      const float *lse, const float *D, const geom &G)
{
	const size_t sm = bwd_smem(DM, BQ, BK);
	cudaError_t e = allow_smem(dkdv_kernel<DM, BQ, BK>, sm);
	if (e == cudaSuccess)
		e = allow_smem(dq_kernel<DM, BQ, BK>, sm);
	if (e != cudaSuccess)
		return (int)e;
	const dim3 gkv((unsigned)(G.b * G.ng), (unsigned)((G.s + BK - 1) / BK));
	const dim3 gq((unsigned)(G.b * G.H), (unsigned)((G.s + BQ - 1) / BQ));
	MGT_LAUNCH((dkdv_kernel<DM, BQ, BK>), gkv, NT, sm, st, G, dqkv, dout, qkv, lse, D);
	MGT_LAUNCH((dq_kernel<DM, BQ, BK>), gq, NT, sm, st, G, dqkv, dout, qkv, lse, D);
	return (int)cudaGetLastError();
}

extern "C" int mgt_k_attn_bwd(mgt_k_stream s, float *dqkv, const float *dout, const float *qkv,
			      const float *out, const float *lse, int seq, int b, int ng, int r,
			      int d, float p, uint64_t key, int head0, int heads_total, void *ws)
{
	if (empty_shape(seq, b, ng, r, d))
		return (int)cudaSuccess;
	const int dm = pad_dim(d);
	if (dm == 0)
		return (int)cudaErrorInvalidValue;
	const geom G = make_geom(seq, b, ng, r, d, p, key, head0, heads_total);
	const cudaStream_t st = (cudaStream_t)s;
	float *D = (float *)ws;
	const long long rows = (long long)seq * b * G.H;
	MGT_LAUNCH(rowdot_kernel, (unsigned)((rows + NT / 32 - 1) / (NT / 32)), NT, 0, st, G, D, dout,
		   out);
	switch (dm) {
	case 16: return bwd_launch<16, 64, 64>(st, dqkv, dout, qkv, lse, D, G);
	case 32: return bwd_launch<32, 64, 64>(st, dqkv, dout, qkv, lse, D, G);
	case 64: return bwd_launch<64, 64, 64>(st, dqkv, dout, qkv, lse, D, G);
	default: return bwd_launch<128, 32, 32>(st, dqkv, dout, qkv, lse, D, G);
	}
}
