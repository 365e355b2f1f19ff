/* kernels/: embedding lookup and its deterministic backward (backend.h's embedding_fwd /
 * embedding_bwd; cpu_embedding_fwd / cpu_embedding_bwd in lib/backend/cpu.c).
 *
 * Backward: tokens are sorted by (table row, token index) with a bitonic sort of 64-bit keys in
 * ws, so the tokens of one row form a run in token order; then one block per run adds the run's
 * gradient rows to the table row in token order: acc = dtable[row]; acc += dy[t] for each t.
 * That is the CPU's arithmetic exactly (dst += src in token order), so the result is bitwise
 * the CPU's, independent of the GPU.  Trade-off: the sort is O(T log^2 T) small launches (a few
 * dozen for T = 1M), and a row used by many tokens is summed by one block serially (h/1024
 * columns per thread step, a run of n tokens takes n dependent steps), against atomics which
 * would be faster but not deterministic.  The column-owner alternative (each block owns columns
 * and walks all T tokens) has only h/1024 blocks of parallelism. */
#include "common.cuh"

/* ---- forward ---- */

/* Row t: y = table[ids[t] - row0] (or += when accumulate) when in range, else 0 (or nothing). */
static __global__ void emb_fwd_k(float *y, const int32_t *ids, const float *table, int64_t row0,
				 int64_t rows, int h, int accumulate, bool vec)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4;
	const int64_t id = ids[t];
	const bool in = id >= row0 && id < row0 + rows;
	if (!in && accumulate)
		return;
	float *yt = y + t * nh;
	const float *src = in ? table + (size_t)(id - row0) * nh : NULL;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4] = {0, 0, 0, 0};
		if (in)
			mgt_ld4(src, g, nh, vec, v);
		if (accumulate) {
			float a[4];
			mgt_ld4(yt, g, nh, vec, a);
#pragma unroll
			for (int k = 0; k < 4; k++)
				v[k] += a[k];
		}
		mgt_st4(yt, g, nh, vec, v);
	}
}

extern "C" int mgt_k_embedding_fwd(mgt_k_stream s, float *y, const int32_t *ids, const float *table,
				   int64_t row0, int64_t rows, int T, int h, int accumulate)
{
	if (T <= 0 || h <= 0)
		return 0;
	const bool vec = h % 4 == 0 && mgt_al16(y) && mgt_al16(table);
	MGT_LAUNCH(emb_fwd_k, T, MGT_ROW_THREADS, 0, mgt_st(s), y, ids, table, row0, rows, h, accumulate,
		   vec);
	return mgt_k_rc();
}

/* ---- backward: bitonic sort of keys (row << 32 | token) ---- */

/* Keys sort ascending; tokens outside [row0, row0 + rows) get row NONE and sort after all real
 * rows (rows < 2^31), padding up to the power of two P sorts last of all. */
static constexpr uint32_t NONE = 0xFFFFFFFFu;
static constexpr unsigned SORT_LOCAL = 2048; /* keys per block in shared memory */

/* Keys in a sort of P >= 2 entries (a power of two). */
static size_t sort_len(int T)
{
	size_t P = 2;
	while (P < (size_t)T)
		P <<= 1;
	return P;
}

static __global__ void emb_keys_k(uint64_t *key, const int32_t *ids, int64_t row0, int64_t rows, int T,
				  unsigned P)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < P; i += gridDim.x * blockDim.x) {
		uint64_t k = ~(uint64_t)0;
		if (i < (unsigned)T) {
			int64_t id = ids[i];
			uint64_t row = id >= row0 && id < row0 + rows ? (uint64_t)(id - row0) : NONE;
			k = row << 32 | i;
		}
		key[i] = k;
	}
}

/* Compare-exchange of a[i] and a[i + j] for the q-th pair of stage (k, j): ascending where bit k
 * of the (global) index i is clear. */
static __device__ __forceinline__ void bitonic_cx(uint64_t *a, unsigned q, unsigned j, unsigned k,
						  unsigned base)
{
	const unsigned i = 2 * j * (q / j) + q % j, l = i + j;
	const bool up = ((base + i) & k) == 0;
	const uint64_t x = a[i], y = a[l];
	if ((x > y) == up) {
		a[i] = y;
		a[l] = x;
	}
}

/* Every stage k <= n, j < k of a block's n keys (n = min(P, SORT_LOCAL)), in shared memory;
 * n / 2 threads. */
static __global__ void sort_local_k(uint64_t *key, unsigned n)
{
	__shared__ uint64_t sm[SORT_LOCAL];
	const unsigned base = blockIdx.x * n;
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
		sm[i] = key[base + i];
	for (unsigned k = 2; k <= n; k <<= 1)
		for (unsigned j = k >> 1; j > 0; j >>= 1) {
			__syncthreads();
			bitonic_cx(sm, threadIdx.x, j, k, base);
		}
	__syncthreads();
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
		key[base + i] = sm[i];
}

/* Stages j < SORT_LOCAL of merge step k > SORT_LOCAL, in shared memory (SORT_LOCAL / 2 threads). */
static __global__ void sort_merge_local_k(uint64_t *key, unsigned k)
{
	__shared__ uint64_t sm[SORT_LOCAL];
	const unsigned base = blockIdx.x * SORT_LOCAL;
	for (unsigned i = threadIdx.x; i < SORT_LOCAL; i += blockDim.x)
		sm[i] = key[base + i];
	for (unsigned j = SORT_LOCAL >> 1; j > 0; j >>= 1) {
		__syncthreads();
		bitonic_cx(sm, threadIdx.x, j, k, base);
	}
	__syncthreads();
	for (unsigned i = threadIdx.x; i < SORT_LOCAL; i += blockDim.x)
		key[base + i] = sm[i];
}

/* One stage (k, j >= SORT_LOCAL) over all P / 2 pairs in global memory. */
static __global__ void sort_global_k(uint64_t *key, unsigned P, unsigned j, unsigned k)
{
	const unsigned q = blockIdx.x * blockDim.x + threadIdx.x;
	if (q < P / 2)
		bitonic_cx(key, q, j, k, 0);
}

static void sort_keys(cudaStream_t st, uint64_t *key, unsigned P)
{
	const unsigned n = P < SORT_LOCAL ? P : SORT_LOCAL;
	MGT_LAUNCH(sort_local_k, P / n, n / 2, 0, st, key, n);
	for (unsigned k = 2 * SORT_LOCAL; k <= P; k <<= 1) {
		for (unsigned j = k >> 1; j >= SORT_LOCAL; j >>= 1)
			MGT_LAUNCH(sort_global_k, P / 2 / 256, 256, 0, st, key, P, j, k);
		MGT_LAUNCH(sort_merge_local_k, P / SORT_LOCAL, SORT_LOCAL / 2, 0, st, key, k);
	}
}

/* Block i: when sorted key i starts a run of a real row, dtable[row] += dy of the run's tokens,
 * in token order, each element accumulated in a register from dtable's value. */
template <typename D>
static __global__ void emb_runs_k(float *dtable, const D *dy, const uint64_t *key, int T, int h, bool vec)
{
	const unsigned i = blockIdx.x;
	const uint32_t row = (uint32_t)(key[i] >> 32);
	if (row == NONE || (i > 0 && (uint32_t)(key[i - 1] >> 32) == row))
		return;
	const size_t nh = (size_t)h, ng = (nh + 3) / 4;
	float *dst = dtable + (size_t)row * nh;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float acc[4];
		mgt_ld4(dst, g, nh, vec, acc);
		for (unsigned j = i; j < (unsigned)T; j++) {
			const uint64_t kj = key[j];
			if ((uint32_t)(kj >> 32) != row)
				break;
			float v[4];
			mgt_ld4(dy + (size_t)(uint32_t)kj * nh, g, nh, vec, v);
#pragma unroll
			for (int k = 0; k < 4; k++)
				acc[k] += v[k];
		}
		mgt_st4(dst, g, nh, vec, acc);
	}
}

/* ws: the P keys (P = the power of two >= T, at least 2), 8 bytes each. */
extern "C" size_t mgt_k_embedding_bwd_ws_bytes(int T)
{
	return T <= 0 ? 0 : sort_len(T) * sizeof(uint64_t);
}

extern "C" int mgt_k_embedding_bwd(mgt_k_stream s, float *dtable, const void *dy, mgt_k_dtype dyt,
				   const int32_t *ids, int64_t row0, int64_t rows, int T, int h, void *ws)
{
	if (T <= 0 || h <= 0)
		return 0;
	cudaStream_t st = mgt_st(s);
	const unsigned P = (unsigned)sort_len(T);
	uint64_t *key = (uint64_t *)ws;
	MGT_LAUNCH(emb_keys_k, mgt_grid(P, 256), 256, 0, st, key, ids, row0, rows, T, P);
	sort_keys(st, key, P);
	const bool vec = h % 4 == 0 && mgt_al16(dtable) && mgt_al16(dy);
	return mgt_k_typed(dyt, [&](auto e) {
		typedef typename decltype(e)::type D;
		MGT_LAUNCH(emb_runs_k<D>, T, MGT_ROW_THREADS, 0, st, dtable, (const D *)dy, key, T, h, vec);
		return mgt_k_rc();
	});
}
