/* kernels/: elementwise launchers: cast, scale, add, AdamW, bias + activation, bias-dropout-add,
 * RoPE.  The math of each is backend.h's op of the same name, computed as lib/backend/cpu.c does
 * (same operation order; nvcc may contract a*b+c into an FMA where the CPU build rounds twice).
 * Flat ops run a grid-stride loop over groups of 4 elements; row ops one block per row. */
#include "common.cuh"

/* ---- casts ---- */

template <typename D, typename S>
static __global__ void cast_k(D *dst, const S *src, size_t n, bool vec)
{
	const size_t ng = (n + 3) / 4;
	for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < ng;
	     g += (size_t)gridDim.x * blockDim.x) {
		float v[4];
		mgt_ld4(src, g, n, vec, v);
		mgt_st4(dst, g, n, vec, v);
	}
}

template <typename D, typename S>
static void cast_launch(cudaStream_t st, void *dst, const void *src, size_t n)
{
	const bool vec = mgt_al16(dst) && mgt_al16(src);
	MGT_LAUNCH((cast_k<D, S>), mgt_grid(mgt_cdiv(n, 4), 256), 256, 0, st, (D *)dst, (const S *)src,
		   n, vec);
}

static size_t dtype_bytes(mgt_k_dtype t) { return t == MGT_K_F32 ? 4 : 2; }

/* fp32 <-> bf16 / fp16 and bf16 <-> fp16 (through fp32, exact, then one rounding). */
extern "C" int mgt_k_cast(mgt_k_stream s, void *dst, mgt_k_dtype dst_t, const void *src,
			  mgt_k_dtype src_t, size_t n)
{
	cudaStream_t st = mgt_st(s);
	if (n == 0)
		return 0;
	if (dst_t == src_t) {
		if (dst == src)
			return 0;
		cudaError_t e = cudaMemcpyAsync(dst, src, n * dtype_bytes(dst_t), cudaMemcpyDeviceToDevice, st);
		int rc = mgt_k_rc();
		return e != cudaSuccess ? (int)e : rc;
	}
	typedef __nv_bfloat16 bf;
	if (src_t == MGT_K_F32)
		dst_t == MGT_K_BF16 ? cast_launch<bf, float>(st, dst, src, n)
				    : cast_launch<__half, float>(st, dst, src, n);
	else if (src_t == MGT_K_BF16)
		dst_t == MGT_K_F32 ? cast_launch<float, bf>(st, dst, src, n)
				   : cast_launch<__half, bf>(st, dst, src, n);
	else
		dst_t == MGT_K_F32 ? cast_launch<float, __half>(st, dst, src, n)
				   : cast_launch<bf, __half>(st, dst, src, n);
	return mgt_k_rc();
}

/* ---- scale, add ---- */

static __global__ void scale_k(float *x, size_t n, float alpha, bool vec)
{
	const size_t ng = (n + 3) / 4;
	for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < ng;
	     g += (size_t)gridDim.x * blockDim.x) {
		float v[4];
		mgt_ld4(x, g, n, vec, v);
#pragma unroll
		for (int k = 0; k < 4; k++)
			v[k] *= alpha;
		mgt_st4(x, g, n, vec, v);
	}
}

extern "C" int mgt_k_scale(mgt_k_stream s, float *x, size_t n, float alpha)
{
	if (n == 0)
		return 0;
	MGT_LAUNCH(scale_k, mgt_grid(mgt_cdiv(n, 4), 256), 256, 0, mgt_st(s), x, n, alpha, mgt_al16(x));
	return mgt_k_rc();
}

template <typename E>
static __global__ void add_k(E *y, const E *x, size_t n, bool vec)
{
	const size_t ng = (n + 3) / 4;
	for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < ng;
	     g += (size_t)gridDim.x * blockDim.x) {
		float a[4], b[4];
		mgt_ld4(y, g, n, vec, a);
		mgt_ld4(x, g, n, vec, b);
#pragma unroll
		for (int k = 0; k < 4; k++)
			a[k] += b[k];
		mgt_st4(y, g, n, vec, a);
	}
}

extern "C" int mgt_k_add(mgt_k_stream s, void *y, const void *x, mgt_k_dtype t, size_t n)
{
	if (n == 0)
		return 0;
	return mgt_k_typed(t, [&](auto e) {
		typedef typename decltype(e)::type E;
		MGT_LAUNCH((add_k<E>), mgt_grid(mgt_cdiv(n, 4), 256), 256, 0, mgt_st(s), (E *)y, (const E *)x, n,
			   mgt_al16(y) && mgt_al16(x));
		return mgt_k_rc();
	});
}

/* ---- AdamW ---- */

struct adamw_c {
	float b1, b2, ob1, ob2, eps, step_size, bc2_sqrt, decay;
};

static __global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, adamw_c c,
			       bool vec)
{
	const size_t ng = (n + 3) / 4;
	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < ng;
	     q += (size_t)gridDim.x * blockDim.x) {
		float pp[4], gg[4], mm[4], vv[4];
		mgt_ld4(p, q, n, vec, pp);
		mgt_ld4(g, q, n, vec, gg);
		mgt_ld4(m, q, n, vec, mm);
		mgt_ld4(v, q, n, vec, vv);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			float gi = gg[k];
			float mi = c.b1 * mm[k] + c.ob1 * gi;
			float vi = c.b2 * vv[k] + c.ob2 * gi * gi;
			float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
			mm[k] = mi;
			vv[k] = vi;
			pp[k] = pp[k] * c.decay - c.step_size * (mi / denom);
		}
		mgt_st4(m, q, n, vec, mm);
		mgt_st4(v, q, n, vec, vv);
		mgt_st4(p, q, n, vec, pp);
	}
}

/* adamw_chunk in lib/backend/cpu.c, element by element (the caller supplies the scalars). */
extern "C" int mgt_k_adamw(mgt_k_stream s, float *p, const float *g, float *m, float *v, size_t n,
			   float b1, float b2, float eps, float step_size, float bc2_sqrt, float decay)
{
	if (n == 0)
		return 0;
	adamw_c c = {b1, b2, 1.0f - b1, 1.0f - b2, eps, step_size, bc2_sqrt, decay};
	const bool vec = mgt_al16(p) && mgt_al16(g) && mgt_al16(m) && mgt_al16(v);
	MGT_LAUNCH(adamw_k, mgt_grid(mgt_cdiv(n, 4), 256), 256, 0, mgt_st(s), p, g, m, v, n, c, vec);
	return mgt_k_rc();
}

/* ---- bias + activation (GELU erf form, SwiGLU) ---- */

static __device__ __forceinline__ float gelu_f(float z)
{
	return 0.5f * z * (1.0f + mgt_erff(z * 0.70710678118654752f));
}

static __device__ __forceinline__ float gelu_grad(float z)
{
	return 0.5f * (1.0f + mgt_erff(z * 0.70710678118654752f)) +
	       z * 0.39894228040143268f * mgt_expf(-0.5f * z * z);
}

static __device__ __forceinline__ float sigmoid_f(float a) { return 1.0f / (1.0f + mgt_expf(-a)); }

/* tanh-approximation GELU (act 2; cpu.c's gelu_tanh_f / gelu_tanh_grad, same order). */
static __device__ __forceinline__ float gelu_tanh_f(float z)
{
	float t = mgt_tanhf(0.79788456080286536f * z * (1.0f + 0.044715f * z * z));
	return 0.5f * z * (1.0f + t);
}

static __device__ __forceinline__ float gelu_tanh_grad(float z)
{
	float t = mgt_tanhf(0.79788456080286536f * z * (1.0f + 0.044715f * z * z));
	return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * (0.79788456080286536f * (1.0f + 0.134145f * z * z));
}

/* Group g of x (4 elements), plus the same group of b when b is given (the bias of the
 * bias-activation fusion: x + b, or x itself without a bias). */
template <typename X>
static __device__ __forceinline__ void ld4_biased(const X *x, const float *b, size_t g, size_t n, bool vec,
						  float v[4])
{
	mgt_ld4(x, g, n, vec, v);
	if (!b)
		return;
	float bb[4];
	mgt_ld4(b, g, n, vec, bb);
#pragma unroll
	for (int k = 0; k < 4; k++)
		v[k] += bb[k];
}

/* Squared ReLU (act 3; cpu_elementwise.c's relu2_f / relu2_grad). */
static __device__ __forceinline__ float relu2_f(float z) { return z > 0.0f ? z * z : 0.0f; }
static __device__ __forceinline__ float relu2_grad(float z) { return z > 0.0f ? 2.0f * z : 0.0f; }

/* Row t: GELU y = gelu(x + b) over f columns (act 0 erf, 2 tanh), squared ReLU (act 3); SwiGLU
 * (act 1) y = silu(gate + b) * (up + b), x = [gate | up]. */
template <typename Y, typename X>
static __global__ void bias_act_fwd_k(int act, Y *y, const X *x, const float *b, int f, bool vec)
{
	const size_t t = blockIdx.x, nf = (size_t)f, ng = (nf + 3) / 4;
	const X *xt = x + t * (act == 1 ? 2 * nf : nf);
	Y *yt = y + t * nf;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float a[4], o[4];
		ld4_biased(xt, b, g, nf, vec, a);
		if (act == 0) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = gelu_f(a[k]);
		} else if (act == 2) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = gelu_tanh_f(a[k]);
		} else if (act == 3) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = relu2_f(a[k]);
		} else {
			float u[4];
			ld4_biased(xt + nf, b ? b + nf : NULL, g, nf, vec, u);
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = a[k] * sigmoid_f(a[k]) * u[k];
		}
		mgt_st4(yt, g, nf, vec, o);
	}
}

template <typename Y, typename X>
static void bias_act_fwd_launch(mgt_k_stream s, int act, void *y, const void *x, const float *b, int T, int f, bool vec)
{
	MGT_LAUNCH((bias_act_fwd_k<Y, X>), T, MGT_ROW_THREADS, 0, mgt_st(s), act, (Y *)y, (const X *)x, b, f, vec);
}

/* The launch for y's type Y and x's type xt. */
template <typename Y>
static void bias_act_fwd_x(mgt_k_stream s, int act, void *y, const void *x, mgt_k_dtype xt, const float *b, int T,
			   int f, bool vec)
{
	if (xt == MGT_K_BF16)
		bias_act_fwd_launch<Y, __nv_bfloat16>(s, act, y, x, b, T, f, vec);
	else if (xt == MGT_K_F16)
		bias_act_fwd_launch<Y, __half>(s, act, y, x, b, T, f, vec);
	else
		bias_act_fwd_launch<Y, float>(s, act, y, x, b, T, f, vec);
}

extern "C" int mgt_k_bias_act_fwd(mgt_k_stream s, int act, void *y, mgt_k_dtype yt, const void *x, mgt_k_dtype xt,
				  const float *b, int T, int f)
{
	if (T <= 0 || f <= 0)
		return 0;
	const bool vec = f % 4 == 0 && mgt_al16(y) && mgt_al16(x) && mgt_al16(b);
	if (yt == MGT_K_BF16)
		bias_act_fwd_x<__nv_bfloat16>(s, act, y, x, xt, b, T, f, vec);
	else if (yt == MGT_K_F16)
		bias_act_fwd_x<__half>(s, act, y, x, xt, b, T, f, vec);
	else
		bias_act_fwd_x<float>(s, act, y, x, xt, b, T, f, vec);
	return mgt_k_rc();
}

/* dx of row t (act_bwd_row_ in cpu.c); x of type X, dy and dx of type G (read as fp32, dx
 * rounded to nearest even when 16-bit). */
template <typename X, typename G>
static __global__ void bias_act_bwd_k(int act, G *dx, const G *dy, const X *x, const float *b, int f, bool vec)
{
	const size_t t = blockIdx.x, nf = (size_t)f, ng = (nf + 3) / 4, xw = act == 1 ? 2 * nf : nf;
	const X *xt = x + t * xw;
	const G *gt = dy + t * nf;
	G *dxt = dx + t * xw;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float a[4], gg[4], o[4];
		ld4_biased(xt, b, g, nf, vec, a);
		mgt_ld4(gt, g, nf, vec, gg);
		if (act == 0) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = gg[k] * gelu_grad(a[k]);
		} else if (act == 2) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = gg[k] * gelu_tanh_grad(a[k]);
		} else if (act == 3) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				o[k] = gg[k] * relu2_grad(a[k]);
		} else {
			float u[4], o2[4];
			ld4_biased(xt + nf, b ? b + nf : NULL, g, nf, vec, u);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				float sg = sigmoid_f(a[k]), silu = a[k] * sg;
				o[k] = gg[k] * u[k] * (sg * (1.0f + a[k] * (1.0f - sg)));
				o2[k] = gg[k] * silu;
			}
			mgt_st4(dxt + nf, g, nf, vec, o2);
		}
		mgt_st4(dxt, g, nf, vec, o);
	}
}

extern "C" size_t mgt_k_bias_act_bwd_ws_bytes(int act, int T, int f)
{
	return mgt_k_colsum_ws_bytes(T, act == 1 ? 2 * f : f);
}

/* dx written, then db += column sums of dx's stored values (as cpu_bias_act_bwd). */
extern "C" int mgt_k_bias_act_bwd(mgt_k_stream s, int act, void *dx, float *db, const void *dy, mgt_k_dtype gt,
				  const void *x, mgt_k_dtype xt, const float *b, int T, int f, void *ws)
{
	if (T <= 0 || f <= 0)
		return 0;
	const bool vec = f % 4 == 0 && mgt_al16(dx) && mgt_al16(dy) && mgt_al16(x) && mgt_al16(b);
	int rc = mgt_k_typed(xt, [&](auto ex) {
		return mgt_k_typed(gt, [&](auto eg) {
			typedef typename decltype(ex)::type X;
			typedef typename decltype(eg)::type G;
			MGT_LAUNCH((bias_act_bwd_k<X, G>), T, MGT_ROW_THREADS, 0, mgt_st(s), act, (G *)dx, (const G *)dy,
				   (const X *)x, b, f, vec);
			return mgt_k_rc();
		});
	});
	if (rc || !db)
		return rc;
	return mgt_k_colsum(s, db, dx, gt, T, act == 1 ? 2 * f : f, ws);
}

/* ---- bias-dropout-add ---- */

/* Row t: out = resid + dropout(y + b); element (t, c) draws Philox index e0 + t*h + c.  out and
 * resid of type R, y of type Y (read as fp32; the sum rounded to nearest even when 16-bit). */
template <typename R, typename Y>
static __global__ void bda_fwd_k(R *out, const R *resid, const Y *y, const float *b, int h, float p, float ks,
				 uint64_t key, uint64_t e0, bool vec)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4;
	const Y *yt = y + t * nh;
	const R *rt = resid ? resid + t * nh : NULL;
	R *ot = out + t * nh;
	const uint64_t et = e0 + (uint64_t)t * nh;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4], bb[4] = {0, 0, 0, 0}, rr[4] = {0, 0, 0, 0};
		mgt_ld4(yt, g, nh, vec, v);
		if (b)
			mgt_ld4(b, g, nh, vec, bb);
		if (rt)
			mgt_ld4(rt, g, nh, vec, rr);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			float a = b ? v[k] + bb[k] : v[k];
			if (p > 0)
				a *= mgt_dropout_mult(key, et + g * 4 + k, p, ks);
			v[k] = rt ? rr[k] + a : a;
		}
		mgt_st4(ot, g, nh, vec, v);
	}
}

extern "C" int mgt_k_bda_fwd(mgt_k_stream s, void *out, const void *resid, mgt_k_dtype rt, const void *y,
			     mgt_k_dtype yt, const float *b, int T, int h, float p, uint64_t key, uint64_t e0)
{
	if (T <= 0 || h <= 0)
		return 0;
	const float ks = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
	const bool vec = h % 4 == 0 && mgt_al16(out) && mgt_al16(resid) && mgt_al16(y) && mgt_al16(b);
	return mgt_k_typed(rt, [&](auto r) {
		return mgt_k_typed(yt, [&](auto e) {
			typedef typename decltype(r)::type R;
			typedef typename decltype(e)::type Y;
			MGT_LAUNCH((bda_fwd_k<R, Y>), T, MGT_ROW_THREADS, 0, mgt_st(s), (R *)out, (const R *)resid,
				   (const Y *)y, b, h, p, ks, key, e0, vec);
			return mgt_k_rc();
		});
	});
}

/* Row t: dy = dout * dropout multiplier (p > 0), dy of type D and dout of type O (read as fp32,
 * the product rounded to nearest even when 16-bit). */
template <typename D, typename O>
static __global__ void drop_mul_k(D *dy, const O *dout, int h, float p, float ks, uint64_t key, uint64_t e0,
				  bool vec)
{
	const size_t t = blockIdx.x, nh = (size_t)h, ng = (nh + 3) / 4;
	const O *gt = dout + t * nh;
	D *dt = dy + t * nh;
	const uint64_t et = e0 + (uint64_t)t * nh;
	for (size_t g = threadIdx.x; g < ng; g += blockDim.x) {
		float v[4];
		mgt_ld4(gt, g, nh, vec, v);
#pragma unroll
		for (int k = 0; k < 4; k++)
			v[k] *= mgt_dropout_mult(key, et + g * 4 + k, p, ks);
		mgt_st4(dt, g, nh, vec, v);
	}
}

extern "C" size_t mgt_k_bda_bwd_ws_bytes(int T, int h) { return mgt_k_colsum_ws_bytes(T, h); }

/* Without dropout dy is dout's values: copied (one type) or cast. */
extern "C" int mgt_k_bda_bwd(mgt_k_stream s, void *dy, mgt_k_dtype dyt, float *db, const void *dout, mgt_k_dtype dot,
			     int T, int h, float p, uint64_t key, uint64_t e0, void *ws)
{
	if (T <= 0 || h <= 0)
		return 0;
	cudaStream_t st = mgt_st(s);
	const size_t n = (size_t)T * (size_t)h;
	int rc = 0;
	if (p > 0) {
		const float ks = 1.0f / (1.0f - p);
		const bool vec = h % 4 == 0 && mgt_al16(dy) && mgt_al16(dout);
		rc = mgt_k_typed(dyt, [&](auto d) {
			return mgt_k_typed(dot, [&](auto o) {
				typedef typename decltype(d)::type D;
				typedef typename decltype(o)::type O;
				MGT_LAUNCH((drop_mul_k<D, O>), T, MGT_ROW_THREADS, 0, st, (D *)dy, (const O *)dout, h, p, ks,
					   key, e0, vec);
				return mgt_k_rc();
			});
		});
	} else if (dyt != dot) {
		rc = mgt_k_cast(s, dy, dyt, dout, dot, n);
	} else if (dy != dout) {
		cudaError_t e = cudaMemcpyAsync(dy, dout, n * (dyt == MGT_K_F32 ? 4 : 2), cudaMemcpyDeviceToDevice, st);
		rc = mgt_k_rc();
		rc = e != cudaSuccess ? (int)e : rc;
	}
	if (rc || !db)
		return rc;
	return mgt_k_colsum(s, db, dy, dyt, T, h, ws);
}

/* ---- RoPE ---- */

/* Token t: cos/sin of theta = pos[t] * inv_freq[k] into shared memory (through double: correctly
 * rounded in practice, as glibc's cosf/sinf are), then every rotated pair (x[k], x[k + half]) of
 * the r query heads and the key head of each group.  inv_freq: the model's table (device memory). */
template <typename E>
static __global__ void rope_k(E *qkv, const int32_t *pos, const float *inv_freq, int ng, int r, int d,
			      int rot_dim, int inverse)
{
	MGT_DYN_SHARED(float, rope_sm);
	const int half = rot_dim / 2;
	float *cs = rope_sm, *sn = rope_sm + half;
	const size_t t = blockIdx.x;
	const float ps = (float)pos[t];
	for (int k = threadIdx.x; k < half; k += blockDim.x) {
		float th = ps * inv_freq[k];
		cs[k] = (float)cos((double)th);
		float sv = (float)sin((double)th);
		sn[k] = inverse ? -sv : sv;
	}
	__syncthreads();
	const int heads = ng * (r + 1);
	const int total = heads * half;
	for (int i = threadIdx.x; i < total; i += blockDim.x) {
		int hd = i / half, k = i - hd * half;
		int g = hd / (r + 1), m = hd - g * (r + 1);
		E *x = qkv + ((t * ng + g) * (size_t)(r + 2) + m) * d;
		const float a = mgt_ld1(x, (size_t)k), bb = mgt_ld1(x, (size_t)(half + k));
		/* products rounded, then summed (no FMA contraction), as the CPU computes them: the fp32
		 * value is the same whatever E is, so a 16-bit output is the fp32 one rounded (an H200
		 * showed 1-105 elements of 2048 x 16 x 64 one ulp apart when nvcc contracted differently
		 * per instantiation) */
		mgt_st1(x, (size_t)k, __fsub_rn(__fmul_rn(a, cs[k]), __fmul_rn(bb, sn[k])));
		mgt_st1(x, (size_t)(half + k), __fadd_rn(__fmul_rn(bb, cs[k]), __fmul_rn(a, sn[k])));
	}
}

/* cpu_rope in lib/backend/cpu.c (backend.h: non-interleaved rotate_half over rot_dim channels). */
extern "C" int mgt_k_rope(mgt_k_stream s, void *qkv, mgt_k_dtype qt, const int32_t *pos, const float *inv_freq, int T,
			  int ng, int r, int d, int rot_dim, int inverse)
{
	const int half = rot_dim / 2;
	if (T <= 0 || half <= 0 || ng <= 0 || r < 0)
		return 0;
	const size_t smem = 2 * (size_t)half * sizeof(float);
	if (qt == MGT_K_BF16)
		MGT_LAUNCH(rope_k<__nv_bfloat16>, T, 128, smem, mgt_st(s), (__nv_bfloat16 *)qkv, pos, inv_freq, ng, r, d,
			   rot_dim, inverse);
	else if (qt == MGT_K_F16)
		MGT_LAUNCH(rope_k<__half>, T, 128, smem, mgt_st(s), (__half *)qkv, pos, inv_freq, ng, r, d, rot_dim,
			   inverse);
	else
		MGT_LAUNCH(rope_k<float>, T, 128, smem, mgt_st(s), (float *)qkv, pos, inv_freq, ng, r, d, rot_dim,
			   inverse);
	return mgt_k_rc();
}
