/* kernels/: the host side shared by the tensor-core attention launchers, kernels/attn_tc.cu (forward,
 * kernels.h mgt_k_attn_tc_fwd, mgt_k_xattn_tc_fwd) and kernels/attn_tc_bwd.cu (backward): the
 * head-dimension padding, the argument checks, the shared-memory opt-in and the cp.async test.
 * Two translation units so that nvcc compiles the forward's and the backward's template instances
 * in parallel (the one file took 146 s of a 2-core machine's 3.5-minute build, issue 46). */
#ifndef MGT_KERNELS_ATTN_TC_HOST_CUH
#define MGT_KERNELS_ATTN_TC_HOST_CUH
#include <cuda_runtime.h>

#include "attn_mma.cuh"
#include "attn_tc.cuh"
#include "common.cuh"
#include "kernels.h"

#ifndef MGT_LAUNCH
#define MGT_LAUNCH(kern, grid, block, smem, stream, ...) \
	kern<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

using mgt_attn_k::geom;
using mgt_attn_k::make_geom;
using mgt_attn_k::make_xgeom;
using namespace mgt_attn_tc;

/* Opts a kernel into `bytes` of dynamic shared memory when that is over the default 48 KB. */
template <typename F> static cudaError_t tc_allow_smem(F *kern, size_t bytes)
{
	if (bytes <= 48 * 1024)
		return cudaSuccess;
	return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

static int tc_pad_dim(int d)
{
	if (d <= 0 || d > 128 || d % 16 != 0)
		return 0;
	return d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : 128;
}

static bool tc_empty(int s, int b, int ng, int r, int d)
{
	return s <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0;
}

/* The mma.sync kernels prefetch K and V with cp.async (kernels/attn_mma.cuh stage_kv) when the
 * rows are whole 16-byte pieces: d == DM, kv (qkv for self-attention) and its row stride 16-byte
 * aligned. */
template <typename T> static int tc_async(const T *kv, const geom &G, int DM)
{
	return G.d == DM && DM % 8 == 0 && mgt_al16(kv) && G.ldk % 8 == 0;
}

/* cudaErrorInvalidValue for an unsupported dtype, head dimension or impl (0: supported). */
static int tc_refuse(int dtype, int d, int impl)
{
	if (tc_pad_dim(d) == 0 || (dtype != MGT_K_BF16 && dtype != MGT_K_F16) ||
	    (impl != MGT_K_ATTN_MMA && impl != MGT_K_ATTN_MMA_NOCP && impl != MGT_K_ATTN_MMA_MB2))
		return (int)cudaErrorInvalidValue;
	return 0;
}

#endif
