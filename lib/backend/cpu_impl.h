/* lib/backend: internals shared by the CPU backend's files (cpu.c: the table, setup and shared
 * helpers; cpu_linear.c, cpu_embedding.c, cpu_norm.c, cpu_elementwise.c, cpu_reduce.c, cpu_fp8.c,
 * cpu_attn.c, cpu_moe.c, cpu_philox.c, cpu_mamba.c, cpu_ssd.c).
 * Not public.
 *
 * The inline math below is branch-free so that loops over it vectorize under `omp simd` at the
 * project's -O2 (GCC's default -O2 cost model vectorizes almost nothing on its own).
 */
#ifndef MGT_BACKEND_CPU_IMPL_H
#define MGT_BACKEND_CPU_IMPL_H

/* Let GCC if-convert floating-point selects (clamps in cpu_expf, dropout multipliers) and inline
 * sqrtf, so the loops vectorize; no value changes (this is not -ffast-math: no reassociation, no
 * contraction, IEEE results), only no errno and no care for FP exception flags. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#elif defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed" /* an `omp simd` loop clang cannot vectorize */
#endif

#include <stdint.h>
#include <string.h>

#include "backend/backend.h"

/* Attention tiles: query rows per block, key columns per tile.  CPU_AK is a multiple of CPU_AQ,
 * so a tile that starts below a query block's end starts at or before the block's first row. */
enum { CPU_AQ = 64, CPU_AK = 256 };

enum { CPU_ROUND_BUFS = 7 };

typedef struct {
	int threads;
	/* Per-thread attention scratch, allocated at create: two CPU_AQ x CPU_AK float tiles and a
	 * CPU_AQ x CPU_AK byte mask each, cpu_scratch_bytes apart. */
	unsigned char *scratch;
	/* Rounded or widened GEMM operands (0, 1), per-thread rows of ops with 16-bit inputs or
	 * outputs and the fp32 row blocks of a linear layer's 16-bit output (2), the backward's
	 * converted x (3), the fp32 results of ops with a whole 16-bit output (4: out32) and a
	 * second widened input (5), the Mamba-2 ops' fp32 copies of 16-bit operands (6: cpu_mamba16.c);
	 * grown on demand, freed at destroy (CPU_ROUND_BUFS). */
	float *round_buf[CPU_ROUND_BUFS];
	size_t round_cap[CPU_ROUND_BUFS];
} cpu_impl;

/* Work (elements touched) below which an op runs on the calling thread only. */
enum { CPU_PAR_MIN = 32768 };

enum { cpu_scratch_bytes = 2 * CPU_AQ * CPU_AK * 4 + CPU_AQ * CPU_AK + 64 * 4 };

/* Hot row kernels are compiled three times (AVX-512, AVX2+FMA, baseline x86-64) and picked at load
 * time by the CPU: the project builds for baseline x86-64, which would leave exp, erf and Philox
 * loops at 4 lanes.  Same arithmetic in each (no contraction), so only the lane count of
 * reductions differs; results are deterministic on a given machine. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif
#define CPU_INLINE static inline __attribute__((always_inline))

static inline int cpu_threads(const mgt_backend *be) { return ((const cpu_impl *)be->impl)->threads; }

static inline unsigned char *cpu_scratch(mgt_backend *be, int tid)
{
	return ((cpu_impl *)be->impl)->scratch + (size_t)tid * cpu_scratch_bytes;
}

/* Element i of x, of type t, as fp32 (exact), and v stored into element i of y of type t
 * (rounded to nearest even when 16-bit, as cpu_store_row below): for ops whose rows are short or
 * gathered, where a per-element type test costs nothing next to the memory traffic. */
static inline float cpu_ld(const void *x, mgt_elem_type t, size_t i)
{
	if (t == MGT_DT_F32)
		return ((const float *)x)[i];
	const uint16_t u = ((const uint16_t *)x)[i];
	return t == MGT_DT_BF16 ? mgt_bf16_to_f32(u) : mgt_f16_to_f32(u);
}

static inline void cpu_st(void *y, mgt_elem_type t, size_t i, float v)
{
	if (t == MGT_DT_F32)
		((float *)y)[i] = v;
	else
		((uint16_t *)y)[i] = t == MGT_DT_BF16 ? mgt_f32_to_bf16(v) : mgt_f32_to_f16(v);
}

static inline uint32_t cpu_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float cpu_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* e^x in fp32 within about 2 ulp; exactly 0 for x < -87 (including -inf), NaN propagates.
 * Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2 (ln2 split in a short high part and a
 * correction), degree-7 Taylor polynomial for e^r (truncation below 1e-8 relative), 2^n built in
 * the exponent bits.  Rounding to nearest n adds 1.5 * 2^23 so that n lands in the low mantissa
 * bits (no float-to-int conversion, so no undefined behaviour on NaN). */
static inline __attribute__((always_inline)) float cpu_expf(float x)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23 */
	float xc = x > 88.0f ? 88.0f : x;
	xc = xc < -87.0f ? -87.0f : xc;
	float nm = xc * 1.44269504088896341f + magic;
	float n = nm - magic;
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440054690583e-4f;
	float q = 1.0f / 5040.0f;
	q = q * r + 1.0f / 720.0f;
	q = q * r + 1.0f / 120.0f;
	q = q * r + 1.0f / 24.0f;
	q = q * r + 1.0f / 6.0f;
	q = q * r + 0.5f;
	q = q * r + 1.0f;
	q = q * r + 1.0f;
	uint32_t e = (cpu_f2u(nm) - cpu_f2u(magic) + 127u) << 23;
	float y = q * cpu_u2f(e);
	return x < -87.0f ? 0.0f : y;
}

/* erf(x) by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), with cpu_expf. */
static inline __attribute__((always_inline)) float cpu_erff(float x)
{
	float a = x < 0 ? -x : x;
	float t = 1.0f / (1.0f + 0.3275911f * a);
	float q = 1.061405429f;
	q = q * t - 1.453152027f;
	q = q * t + 1.421413741f;
	q = q * t - 0.284496736f;
	q = q * t + 0.254829592f;
	float y = 1.0f - q * t * cpu_expf(-a * a);
	return x < 0 ? -y : y;
}

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = e^(-2|x|) with cpu_expf: absolute error about 2e-7
 * (relative error larger only near 0, where the GELU adds it to 1). */
static inline __attribute__((always_inline)) float cpu_tanhf(float x)
{
	float a = x < 0 ? -x : x;
	float e = cpu_expf(-2.0f * a);
	float y = (1.0f - e) / (1.0f + e);
	return x < 0 ? -y : y;
}

/* Word 0 of mgt_philox(key, 0, e0 + c) for c < n, into w (cpu_philox.c: AVX-512 or AVX2 when the
 * CPU has them).  Rows of dropout go through here in chunks of CPU_PH elements. */
void mgt_cpu_philox_row(uint32_t *w, uint64_t key, uint64_t e0, int n);
/* Words 2 hi and 2 hi + 1 of mgt_philox(key, 0, e0 + (t >> 3) * 16 + (t & 7)) into wa[t] and wb[t]
 * for t < n: the attention dropout's counters (mgt_attn_drop_word) of the 16-column blocks from
 * e0 on, for a query row with bit 3 equal to hi. */
void mgt_cpu_philox_pairs(uint32_t *wa, uint32_t *wb, uint64_t key, uint64_t e0, int n, int hi);
enum { CPU_PH = 256 };

/* Dropout multiplier of a drawn word: 1 when kept (unit draw >= p), 0 when dropped. */
static inline __attribute__((always_inline)) float cpu_keep_w(uint32_t w, float p)
{
	return mgt_u32_to_unit(w) >= p ? 1.0f : 0.0f;
}

/* backend.h attn_forward / attn_backward of a MGT_ATTN_SELF descriptor (its key_mask, seg_start,
 * bias and dbias) on fp32 values (cpu_attn.c); a->t and a->gt are not read. */
void mgt_cpu_attn_fwd32(mgt_backend *be, const mgt_attn *a, float *out, float *lse, const float *qkv);
void mgt_cpu_attn_bwd32(mgt_backend *be, const mgt_attn *a, float *dqkv, const float *dout, const float *qkv,
			const float *out, const float *lse);

/* backend.h attn_forward / attn_backward of kind MGT_ATTN_CROSS on fp32 values (cpu_attn.c). */
void mgt_cpu_xattn_fwd32(mgt_backend *be, float *out, float *lse, const float *q, const float *kv, int sq,
			 int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask);
void mgt_cpu_xattn_bwd32(mgt_backend *be, float *dq, float *dkv, const float *dout, const float *q,
			 const float *kv, const float *out, const float *lse, int sq, int sk, int b, int ng,
			 int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask);

/* The ops of backend.h, mgt_cpu_<op> (the cpu*.c files), declared from its list. */
#define MGT_CPU_OP_DECL(ret, n, params) ret mgt_cpu_##n params;
MGT_BACKEND_OPS(MGT_CPU_OP_DECL)

/* ---- helpers shared by the CPU backend's files (cpu.c defines the functions) ---- */

/* Columns per task in column-split reductions. */
enum { CPU_COLCH = 128 };

static inline size_t cpu_zmax(size_t a, size_t b) { return a > b ? a : b; }

/* db[c] += sum_t x[t, c] over x [T, n], summed in double in row order (column-split tasks). */
void mgt_cpu_colsum_acc(mgt_backend *be, float *db, const float *x, int T, int n);

/* The k-th rounding buffer (cpu_impl.round_buf) grown to n floats; NULL after recording the
 * failure (ops cannot fail).  Buffers: 0 and 1 the converted GEMM operands (cpu_linear.c
 * operand_block: products of two rounded values are exact in fp32, so sgemm on the copies is the
 * mixed-precision GEMM up to summation order) and widened 16-bit inputs (cpu_widen), 2 the row
 * buffers of 16-bit outputs, 3 the backward's x. */
float *mgt_cpu_round_buf(mgt_backend *be, int k, size_t n);

/* OpenBLAS's thread count is process-wide: set it to this backend's before top-level sgemm calls
 * (only when it changes, so one backend pays nothing).  cpu_linear.c. */
void mgt_cpu_blas_threads(mgt_backend *be);

/* Row buffers for ops that write 16-bit outputs: `per` floats for each thread, in rounding buffer
 * 2; NULL (failure recorded) when it cannot grow.  Call outside parallel regions. */
static inline float *cpu_row_bufs(mgt_backend *be, size_t per)
{
	return mgt_cpu_round_buf(be, 2, per * (size_t)cpu_threads(be));
}

/* Store row v [n] fp32 at element off of y, of type yt: copied (fp32) or rounded to nearest even
 * (bf16, fp16: mgt_f32_to_bf16 / mgt_f32_to_f16, the GPU's __float2bfloat16_rn / __float2half_rn). */
static inline void cpu_store_row(void *y, mgt_elem_type yt, size_t off, const float *v, int n)
{
	if (yt == MGT_DT_F32) {
		memcpy((float *)y + off, v, (size_t)n * sizeof *v);
		return;
	}
	uint16_t *h = (uint16_t *)y + off;
	if (yt == MGT_DT_BF16)
		for (int c = 0; c < n; c++)
			h[c] = mgt_f32_to_bf16(v[c]);
	else
		for (int c = 0; c < n; c++)
			h[c] = mgt_f32_to_f16(v[c]);
}

/* r[0..n) = the 16-bit elements h[0..n) of type t as fp32 (exact). */
static inline void cpu_load_row(float *r, const uint16_t *h, mgt_elem_type t, size_t n)
{
	if (t == MGT_DT_BF16)
		for (size_t c = 0; c < n; c++)
			r[c] = mgt_bf16_to_f32(h[c]);
	else
		for (size_t c = 0; c < n; c++)
			r[c] = mgt_f16_to_f32(h[c]);
}

/* x [n] of type t as fp32: x itself when fp32, else widened exactly into the k-th rounding buffer
 * (NULL, the failure recorded, when it cannot grow). */
static inline const float *cpu_widen(mgt_backend *be, int k, const void *x, mgt_elem_type t, size_t n)
{
	if (t == MGT_DT_F32)
		return x;
	float *r = mgt_cpu_round_buf(be, k, n);
	if (r)
		mgt_cpu_widen(be, r, x, t, n);
	return r;
}

/* Where an op computes its fp32 result [n] bound for dst of type t: dst itself when fp32, else
 * rounding buffer 4 (NULL, the failure recorded, when it cannot grow); cpu_narrow() then stores it. */
static inline float *cpu_out32(mgt_backend *be, void *dst, mgt_elem_type t, size_t n)
{
	return t == MGT_DT_F32 ? dst : mgt_cpu_round_buf(be, 4, n);
}

/* dst [n] of type t = r [n] (rounded to nearest even when 16-bit; nothing to do when dst is r). */
static inline void cpu_narrow(mgt_backend *be, void *dst, mgt_elem_type t, const float *r, size_t n)
{
	if (t != MGT_DT_F32)
		mgt_cpu_cast(be, dst, t, r, n);
	else if (dst != r)
		memcpy(dst, r, n * sizeof *r);
}

/* cpu_narrow() dst [T, w] from r, then (db not NULL) db[w] += the column sums of the values stored
 * (a 16-bit dst widened back into rounding buffer 4): the bias gradient of a 16-bit gradient. */
void mgt_cpu_narrow_colsum(mgt_backend *be, void *dst, mgt_elem_type t, const float *r, float *db, int T, int w);

/* The Mamba-2 ops on fp32 activations (cpu_mamba.c, cpu_ssd.c): backend.h's ops with t = fp32;
 * cpu_mamba16.c's ops call them directly for fp32, on fp32 copies for bf16 and fp16. */
void mgt_cpu_mamba_conv_fwd_f32(mgt_backend *be, float *y, const float *x, int ld_x, const float *w, const float *bias,
				const int32_t *seg_start, int L, int b, int CD, int K);
void mgt_cpu_mamba_conv_bwd_f32(mgt_backend *be, float *dx, float *dw, float *db, const float *dy, const float *x,
				int ld_x, const float *w, const float *bias, const int32_t *seg_start, int L, int b, int CD,
				int K);
void mgt_cpu_mamba_gated_norm_fwd_f32(mgt_backend *be, float *out, float *rstd, const float *y, const float *z,
				      int ld_z, const float *w, int T, int di, int g, float eps);
void mgt_cpu_mamba_gated_norm_bwd_f32(mgt_backend *be, float *dy, float *dz, float *dw, const float *dout,
				      const float *y, const float *z, int ld_z, const float *w, const float *rstd, int T,
				      int di, int g);
/* gated_norm_bwd on 16-bit storage (et bf16 or fp16) without fp32 copies of the operands: each
 * row's dout, y [T, di] and z [T, ld_z] (its first di columns) widened exactly into a thread's row
 * buffers (rounding buffer 2, 5 di floats a thread), the fp32 op's arithmetic run on them
 * (cpu_mamba.c gn_bwd_dw_row, gn_bwd_row: the same expressions in the same order), dy [T, di] and
 * dz's first di columns of each row rounded once to nearest even; dw [di] (fp32) accumulated as
 * the fp32 op does.  So every output is bit for bit the fp32 op's on the widened operands (the
 * staged reference, tests/unit/test_mamba.c test16_norm).  Writes nothing, the failure recorded,
 * when the row buffers cannot grow. */
void mgt_cpu_mamba_gated_norm_bwd_16(mgt_backend *be, void *dy, void *dz, float *dw, const void *dout, const void *y,
				     const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g,
				     mgt_elem_type et);
void mgt_cpu_ssd_scan_fwd_f32(mgt_backend *be, const mgt_ssd *d, float *y, float *states, const float *x,
			      const float *B, const float *C, const float *dt_raw, const float *dt_bias,
			      const float *A_log, const float *D);
void mgt_cpu_ssd_scan_bwd_f32(mgt_backend *be, const mgt_ssd *d, float *dx, float *dB, float *dC, float *ddt_raw,
			      float *ddt_bias, float *dA_log, float *dD, const float *dy, const float *states,
			      const float *x, const float *B, const float *C, const float *dt_raw,
			      const float *dt_bias, const float *A_log, const float *D);

#endif
