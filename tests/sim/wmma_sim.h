/* tests/sim/: host stand-in for the subset of nvcuda::wmma (<mma.h>) that kernels/attn_tc.cuh uses,
 * for the CPU simulator of CUDA (tests/sim/cuda_sim.h includes this after defining __nv_bfloat16,
 * __half and their float conversions __bfloat162float / __half2float).
 *
 * In the simulator every lane of a warp runs the kernel code, so a fragment is a thread-local copy
 * of the whole 16 x 16 tile, in row-major order of the tile (matrix_a: M x K, matrix_b: K x N,
 * accumulator: M x N), that all 32 lanes compute identically: load_matrix_sync reads the whole tile
 * in each lane, mma_sync computes the whole product in each lane (products exact in fp32, summed in
 * fp32 in k order onto C), store_matrix_sync writes the whole tile from each lane (the same values:
 * benign), fill_fragment fills.  Only m16n16k16 shapes; element types __nv_bfloat16, __half and
 * float (float operands exist only for host tests that run the kernels unrounded).  Kernels must not
 * depend on a fragment's element order (real hardware distributes it over the lanes).
 *
 * Speed: these functions are not instrumented (WMMA_SIM_FAST): the fragments are registers on a
 * GPU, and 32 lanes each copying and multiplying whole tiles through the per-access checks made
 * most of check-sim's time.  Loads and stores check each of a tile's 16 rows (or columns) of
 * memory once instead, through mgt_sim_mem_span (sim_mem.cc: the same bounds and race checks). */
#ifndef MGT_TESTS_SIM_WMMA_SIM_H
#define MGT_TESTS_SIM_WMMA_SIM_H

#include <type_traits>

static inline float wmma_sim_tof(float v) { return v; }
static inline float wmma_sim_tof(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float wmma_sim_tof(__half v) { return __half2float(v); }

#define WMMA_SIM_FAST __attribute__((no_sanitize_address)) static inline

/* The tile's 16 runs of 16 elements at p, ldm apart (rows, or columns when column-major), checked
 * as the instrumented accesses would be. */
template <typename T> WMMA_SIM_FAST void wmma_sim_span(const T *p, unsigned ldm, bool write)
{
	for (int r = 0; r < 16; r++)
		mgt_sim_mem_span(p + (size_t)r * ldm, 16 * sizeof(T), write);
}

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
	static_assert(M == 16 && N == 16 && K == 16, "wmma_sim: only m16n16k16");
	static_assert(std::is_same<Use, accumulator>::value == std::is_same<Layout, void>::value,
		      "wmma_sim: operands need a layout, accumulators none");
	enum { num_elements = 256 };
	typedef T element_type;
	T x[256]; /* row-major 16 x 16 tile */
};

template <typename Use, typename T, typename L>
WMMA_SIM_FAST void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f,
				 const typename std::common_type<T>::type &v)
{
	for (int e = 0; e < 256; e++)
		f.x[e] = v;
}

/* matrix_a / matrix_b: element (row, col) of the fragment's matrix at p[row * ldm + col]
 * (row_major) or p[row + col * ldm] (col_major). */
template <typename Use, typename T, typename L>
WMMA_SIM_FAST void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
	static_assert(!std::is_same<Use, accumulator>::value, "wmma_sim: accumulators need a layout_t");
	const bool col = std::is_same<L, col_major>::value;
	wmma_sim_span(p, ldm, false);
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++)
			f.x[i * 16 + j] = col ? p[i + (size_t)j * ldm] : p[(size_t)i * ldm + j];
}

template <typename T>
WMMA_SIM_FAST void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm,
				    layout_t layout)
{
	wmma_sim_span(p, ldm, false);
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++)
			f.x[i * 16 + j] =
				layout == mem_col_major ? p[i + (size_t)j * ldm] : p[(size_t)i * ldm + j];
}

template <typename T>
WMMA_SIM_FAST void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm,
				     layout_t layout)
{
	wmma_sim_span(p, ldm, true);
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			if (layout == mem_col_major)
				p[i + (size_t)j * ldm] = f.x[i * 16 + j];
			else
				p[(size_t)i * ldm + j] = f.x[i * 16 + j];
		}
}

/* d = a b + c (d may be c). */
template <typename Ta, typename La, typename Tb, typename Lb>
WMMA_SIM_FAST void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
			    const fragment<matrix_a, 16, 16, 16, Ta, La> &a,
			    const fragment<matrix_b, 16, 16, 16, Tb, Lb> &b,
			    const fragment<accumulator, 16, 16, 16, float> &c)
{
	float af[256], bf[256], t[256];
	for (int e = 0; e < 256; e++) {
		af[e] = wmma_sim_tof(a.x[e]);
		bf[e] = wmma_sim_tof(b.x[e]);
	}
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float acc = c.x[i * 16 + j];
			for (int k = 0; k < 16; k++)
				acc += af[i * 16 + k] * bf[k * 16 + j];
			t[i * 16 + j] = acc;
		}
	for (int e = 0; e < 256; e++)
		d.x[e] = t[e];
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif
