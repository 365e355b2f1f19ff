/* Mixed precision on the CPU: bf16/fp16 rounding (lib/util), the emulated low-precision GEMM
 * operands of the CPU backend (the reference for the CUDA backend's --bf16/--fp16), and the fp16
 * loss scaler (lib/optim, Megatron's DynamicGradScaler rules).
 *
 * References are independent of the code under test: rounding is checked against a second
 * method (frexp/ldexp and nearbyint in double, no bit tricks) over a million random bit patterns
 * plus hand-derived IEEE cases; the GEMM against a double-precision product of operands rounded
 * by that second method; the scaler against sequences worked out by hand from
 * megatron/core/optimizer/grad_scaler.py. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "attn_calls.h"
#include "check.h"
#include "optim/optim.h"

/* Round x to `bits` significant bits with exponent floor emin (subnormal quantum 2^(emin-bits+1))
 * and largest finite value maxv (larger magnitudes past the rounding midpoint give inf), ties to
 * even, in double. */
static float ref_round(float x, int bits, int emin, double maxv)
{
	if (isnan(x) || isinf(x) || x == 0) return x;
	int e;
	frexp((double)x, &e); /* |x| in [2^(e-1), 2^e) */
	int q = (e - 1 < emin ? emin : e - 1) - (bits - 1); /* quantum 2^q */
	double r = nearbyint(ldexp((double)x, -q));
	double v = ldexp(r, q);
	double ulp_max = ldexp(1.0, (int)floor(log2(maxv)) - (bits - 1));
	if (fabs(v) > maxv) return fabs(v) >= maxv + ulp_max ? (float)copysign(INFINITY, x) : (float)copysign(maxv, x);
	return (float)v;
}

static float ref_fp16(float x) { return ref_round(x, 11, -14, 65504.0); }
static float ref_bf16(float x) { return ref_round(x, 8, -126, 3.3895313892515355e38); }

static uint64_t rng = 88172645463325252ull;
static uint32_t next32(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (uint32_t)rng;
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

static void test_rounding_cases(void)
{
	CHECK(mgt_round_fp16(65504.0f) == 65504.0f, "fp16: 65504 is the largest finite value");
	CHECK(mgt_round_fp16(65519.99f) == 65504.0f, "fp16: below the midpoint 65520 rounds down");
	CHECK(isinf(mgt_round_fp16(65520.0f)), "fp16: the midpoint 65520 rounds to inf (even)");
	CHECK(mgt_round_fp16(-1e6f) == -INFINITY, "fp16: -1e6 overflows to -inf");
	CHECK(mgt_round_fp16(0x1p-24f) == 0x1p-24f, "fp16: 2^-24 is the smallest subnormal");
	CHECK(mgt_round_fp16(0x1p-25f) == 0.0f, "fp16: 2^-25 ties to even zero");
	CHECK(mgt_round_fp16(0x1.8p-25f) == 0x1p-24f, "fp16: 1.5*2^-25 rounds up to 2^-24");
	CHECK(mgt_round_fp16(1.0f + 0x1p-11f) == 1.0f, "fp16: 1+2^-11 ties to even 1");
	CHECK(mgt_round_fp16(1.0f + 0x1.8p-10f) == 1.0f + 0x1p-9f, "fp16: 1+1.5*2^-10 ties to even 1+2^-9");
	CHECK(mgt_round_bf16(1.0f + 0x1p-8f) == 1.0f, "bf16: 1+2^-8 ties to even 1");
	CHECK(mgt_round_bf16(1.0f + 0x1.8p-8f) == 1.0f + 0x1p-7f, "bf16: 1+1.5*2^-8 rounds up");
	CHECK(mgt_round_bf16(0x1.fep127f) == 0x1.fep127f, "bf16: its largest finite value stays");
	CHECK(isinf(mgt_round_bf16(0x1.fffffep127f)), "bf16: FLT_MAX rounds to inf");
	CHECK(isnan(mgt_round_bf16(NAN)) && isnan(mgt_round_fp16(NAN)), "NaN stays NaN");
	CHECK(mgt_round_bf16(-INFINITY) == -INFINITY && mgt_round_fp16(INFINITY) == INFINITY, "inf stays");
}

static void test_rounding_random(void)
{
	int bad16 = 0, bad_b = 0;
	for (int i = 0; i < 1000000; i++) {
		uint32_t u = next32();
		/* half the draws in fp16's range (|x| < 2^17), where the interesting cases are */
		if (i & 1) u = (u & 0x80000000u) | (0x30000000u + (u % 0x18000000u));
		float x;
		memcpy(&x, &u, 4);
		bad16 += !same(mgt_round_fp16(x), ref_fp16(x));
		bad_b += !same(mgt_round_bf16(x), ref_bf16(x));
	}
	CHECK(bad16 == 0, "fp16 rounding equals the frexp/nearbyint reference on 1e6 random floats (%d differ)", bad16);
	CHECK(bad_b == 0, "bf16 rounding equals the frexp/nearbyint reference on 1e6 random floats (%d differ)", bad_b);
}

/* linear_fwd under each precision against double products of reference-rounded operands. */
static void test_gemm_emulation(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 37, IN = 300, OUT = 23 };
	mgt_backend *be = mgt_backend_cpu_create(2);
	static float x[T * IN], w[OUT * IN], b[OUT], y[T * OUT], y32[T * OUT];
	for (int i = 0; i < T * IN; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 1.3e-4f;
	for (int i = 0; i < OUT * IN; i++) w[i] = (float)((int)(next32() % 20001) - 10000) * 0.7e-4f;
	for (int i = 0; i < OUT; i++) b[i] = (float)i * 0.01f;
	be->precision = prec;
	be->ops->linear_fwd(be, y, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, b, T, IN, OUT);
	be->precision = MGT_PREC_FP32;
	be->ops->linear_fwd(be, y32, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, b, T, IN, OUT);
	double err = 0, ref2 = 0, moved = 0;
	for (int t = 0; t < T; t++)
		for (int o = 0; o < OUT; o++) {
			double r = b[o];
			for (int k = 0; k < IN; k++) r += (double)round(x[t * IN + k]) * (double)round(w[o * IN + k]);
			err += (y[t * OUT + o] - r) * (y[t * OUT + o] - r);
			ref2 += r * r;
			moved += (y32[t * OUT + o] - r) * (y32[t * OUT + o] - r);
		}
	CHECK(sqrt(err / ref2) < 1e-6, "%s GEMM equals rounded operands with fp32 accumulation (rel %.2e)", name,
	      sqrt(err / ref2));
	CHECK(sqrt(moved / ref2) > 1e-5, "%s GEMM differs from the fp32 GEMM (rel %.2e): operands were rounded", name,
	      sqrt(moved / ref2));
	mgt_backend_destroy(be);
}

/* A 16-bit pattern decoded by arithmetic (no bit tricks on floats): bf16 is the top half of a
 * float32; binary16 is (-1)^s 2^(e-15) (1 + m/1024), subnormals m 2^-24. */
static float ref_decode(uint16_t h, int bf)
{
	int s = h >> 15, m = bf ? (h & 0x7f) : (h & 0x3ff), e = bf ? (h >> 7 & 0xff) : (h >> 10 & 0x1f);
	int emax = bf ? 255 : 31, mbits = bf ? 7 : 10, bias = bf ? 127 : 15;
	double v = e == emax ? (m ? NAN : INFINITY)
		   : e == 0 ? ldexp((double)m, 1 - bias - mbits) : ldexp((double)((1 << mbits) + m), e - bias - mbits);
	return (float)(s ? -v : v);
}

/* The model's 16-bit weight copy: the cast op writes the reference rounding's bits, and the linear
 * ops given the copy (wt 16-bit: no rounding in the op) give bit for bit what they give when they
 * round the fp32 weight themselves: forward, both backward GEMMs, the grouped forms. */
static void test_weight_copy(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 29, IN = 70, OUT = 41, NW = OUT * IN };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	static float x[T * IN], w[NW], dy[T * OUT], y1[T * OUT], y2[T * OUT], dx1[T * IN], dx2[T * IN];
	static float dw1[NW], dw2[NW];
	static uint16_t w16[NW];
	for (int i = 0; i < T * IN; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 1.3e-4f;
	for (int i = 0; i < NW; i++) w[i] = (float)((int)(next32() % 20001) - 10000) * 0.7e-4f;
	for (int i = 0; i < T * OUT; i++) dy[i] = (float)((int)(next32() % 20001) - 10000) * 0.9e-4f;
	w[0] = 7e4f, w[1] = -3e-8f, w[2] = 1.0f + 0x1p-11f, w[3] = NAN; /* fp16 overflow, subnormal, a tie */
	be->ops->cast(be, w16, dt, w, NW);
	int bad = 0;
	for (int i = 0; i < NW; i++) bad += !same(ref_decode(w16[i], bf), round(w[i]));
	CHECK(bad == 0, "%s cast: every element is the reference rounding (%d differ)", name, bad);
	w[0] = 0.5f, w[3] = -0.25f; /* finite outputs for the GEMMs below */
	be->ops->cast(be, w16, dt, w, NW);
	be->precision = prec;
	be->ops->linear_fwd(be, y1, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, NULL, T, IN, OUT);
	be->ops->linear_fwd(be, y2, MGT_DT_F32, x, MGT_DT_F32, w16, dt, NULL, T, IN, OUT);
	CHECK(!memcmp(y1, y2, sizeof y1), "%s linear_fwd: the 16-bit weight gives the rounded fp32 weight's bits", name);
	be->ops->linear_bwd(be, dx1, MGT_DT_F32, dw1, NULL, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, IN, OUT);
	be->ops->linear_bwd(be, dx2, MGT_DT_F32, dw2, NULL, dy, MGT_DT_F32, x, MGT_DT_F32, w16, dt, T, IN, OUT);
	CHECK(!memcmp(dx1, dx2, sizeof dx1) && !memcmp(dw1, dw2, sizeof dw1),
	      "%s linear_bwd: dx and dw the same bits with the 16-bit weight", name);
	const int rows[3] = { 11, 0, 18 };
	const void *wf[3] = { w, w, w + 7 }, *wh[3] = { w16, w16, w16 + 7 };
	be->ops->linear_fwd_grouped(be, y1, x, MGT_DT_F32, wf, MGT_DT_F32, rows, 3, IN, OUT - 7);
	be->ops->linear_fwd_grouped(be, y2, x, MGT_DT_F32, wh, dt, rows, 3, IN, OUT - 7);
	CHECK(!memcmp(y1, y2, (size_t)T * (OUT - 7) * sizeof *y1), "%s linear_fwd_grouped: the same bits", name);
	float *dwf[3] = { dw1, dw1 + 9, dw1 + 17 }, *dwh[3] = { dw2, dw2 + 9, dw2 + 17 };
	be->ops->linear_bwd_grouped(be, dx1, dwf, dy, x, MGT_DT_F32, wf, MGT_DT_F32, rows, 3, IN, OUT - 7);
	be->ops->linear_bwd_grouped(be, dx2, dwh, dy, x, MGT_DT_F32, wh, dt, rows, 3, IN, OUT - 7);
	CHECK(!memcmp(dx1, dx2, sizeof dx1) && !memcmp(dw1, dw2, sizeof dw1),
	      "%s linear_bwd_grouped: the same bits", name);
	w16[5] ^= 1; /* the op reads the copy: one changed bit moves the outputs of its row */
	be->ops->linear_fwd(be, y2, MGT_DT_F32, x, MGT_DT_F32, w16, dt, NULL, T, IN, OUT);
	be->ops->linear_fwd(be, y1, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, NULL, T, IN, OUT);
	CHECK(memcmp(y1, y2, sizeof y1) != 0, "%s linear_fwd reads the 16-bit weight it is given", name);
	mgt_backend_destroy(be);
}

/* 16-bit activations: norm_fwd and bias_act_fwd writing bf16/fp16 give the reference rounding of
 * what they write in fp32, element for element (row sizes beyond a vector width, odd ones too),
 * and a linear layer reading such an x gives the bits it gives when it rounds the fp32 x itself. */
static void test_storage(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 23, H = 131, F = 77 };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	static float x[T * 2 * F > T * H ? T * 2 * F : T * H], w[H], b[2 * F], y32[T * H], mean[T], rstd[T];
	static float ya[T * F], yb[T * F], wl[F * H];
	static uint16_t y16[T * H];
	for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 3e-4f;
	for (int i = 0; i < H; i++) w[i] = 1.0f + (float)((int)(next32() % 2001) - 1000) * 1e-4f;
	for (int i = 0; i < 2 * F; i++) b[i] = (float)((int)(next32() % 2001) - 1000) * 1e-3f;
	for (int i = 0; i < F * H; i++) wl[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int kind = 0; kind < 2; kind++) {
		mgt_norm_kind k = kind ? MGT_NORM_RMSNORM : MGT_NORM_LAYERNORM;
		be->ops->norm_fwd(be, k, y32, MGT_DT_F32, mean, rstd, x, MGT_DT_F32, w, kind ? NULL : b, T, H, 1e-5f);
		be->ops->norm_fwd(be, k, y16, dt, mean, rstd, x, MGT_DT_F32, w, kind ? NULL : b, T, H, 1e-5f);
		int bad = 0;
		for (int i = 0; i < T * H; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
		CHECK(bad == 0, "%s norm_fwd (%s) into 16 bits: the reference rounding of its fp32 output (%d differ)", name,
		      kind ? "RMSNorm" : "LayerNorm", bad);
		be->precision = prec;
		be->ops->linear_fwd(be, ya, MGT_DT_F32, y32, MGT_DT_F32, wl, MGT_DT_F32, NULL, T, H, F);
		be->ops->linear_fwd(be, yb, MGT_DT_F32, y16, dt, wl, MGT_DT_F32, NULL, T, H, F);
		be->precision = MGT_PREC_FP32;
		CHECK(!memcmp(ya, yb, (size_t)T * F * sizeof *ya), "%s linear_fwd of the 16-bit norm output: the same bits", name);
	}
	for (int act = 0; act < 3; act++) {
		be->ops->bias_act_fwd(be, (mgt_act_kind)act, y32, MGT_DT_F32, x, MGT_DT_F32, b, T, F);
		be->ops->bias_act_fwd(be, (mgt_act_kind)act, y16, dt, x, MGT_DT_F32, b, T, F);
		int bad = 0;
		for (int i = 0; i < T * F; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
		CHECK(bad == 0, "%s bias_act_fwd (act %d) into 16 bits: the reference rounding (%d differ)", name, act, bad);
		/* a 16-bit x (fc1's output): the bits of the fp32 x of the same values, forward and backward */
		const int xw = act == MGT_ACT_SWIGLU ? 2 * F : F;
		static uint16_t x16[T * 2 * F];
		static float xv[T * 2 * F], dy[T * F], d1[T * 2 * F], d2[T * 2 * F];
		be->ops->cast(be, x16, dt, x, (size_t)T * xw);
		for (int i = 0; i < T * xw; i++) xv[i] = ref_decode(x16[i], bf);
		for (int i = 0; i < T * F; i++) dy[i] = x[i] * 0.5f + 0.25f;
		be->ops->bias_act_fwd(be, (mgt_act_kind)act, y32, MGT_DT_F32, xv, MGT_DT_F32, b, T, F);
		be->ops->bias_act_fwd(be, (mgt_act_kind)act, y16, dt, x16, dt, b, T, F);
		bad = 0;
		for (int i = 0; i < T * F; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
		be->ops->bias_act_bwd(be, (mgt_act_kind)act, d1, NULL, dy, MGT_DT_F32, xv, MGT_DT_F32, b, T, F);
		be->ops->bias_act_bwd(be, (mgt_act_kind)act, d2, NULL, dy, MGT_DT_F32, x16, dt, b, T, F);
		CHECK(bad == 0 && !memcmp(d1, d2, (size_t)T * xw * sizeof *d1),
		      "%s bias_act (act %d) of a 16-bit x: the bits of its fp32 values, forward and backward (%d differ)", name,
		      act, bad);
	}
	mgt_backend_destroy(be);
}

/* 16-bit logits (the output layer in bf16/fp16): linear_fwd's 16-bit y is the reference rounding of
 * its fp32 y (over several of the CPU's row blocks); the cross-entropy ops on 16-bit logits give
 * the bits they give on the same values widened to fp32, xent_bwd's 16-bit gradient (in place) the
 * rounding of its fp32 one, and linear_bwd's results from that 16-bit dy those from its fp32
 * values. */
static void test_logits16(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 130, IN = 16, V = 70000 }; /* 4M floats a block: 59 rows, 3 blocks */
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	float *x = malloc((size_t)T * IN * 4), *w = malloc((size_t)V * IN * 4), *y32 = malloc((size_t)T * V * 4);
	uint16_t *y16 = malloc((size_t)T * V * 2);
	static float mx1[T], mx2[T], se1[T], se2[T], tg1[T], tg2[T], mask[T], dx1[T * IN], dx2[T * IN];
	static float dw1[V * IN], dw2[V * IN];
	static int32_t lab[T];
	for (int i = 0; i < T * IN; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int i = 0; i < V * IN; i++) w[i] = (float)((int)(next32() % 20001) - 10000) * 2e-4f;
	for (int t = 0; t < T; t++) lab[t] = (int32_t)(next32() % V), mask[t] = t % 7 ? 1.0f : 0.0f;
	be->precision = prec;
	/* one block (50 rows): bit for bit the rounding of the fp32 output; three blocks: OpenBLAS's
	 * sums for a block of rows may differ in the last fp32 bits from those of the whole, so within
	 * one 16-bit step of it (and of fp32 rounding where the sum cancels), and mostly equal */
	for (int rows = 50; rows <= T; rows += T - 50) {
		be->ops->linear_fwd(be, y32, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, NULL, rows, IN, V);
		be->ops->linear_fwd(be, y16, dt, x, MGT_DT_F32, w, MGT_DT_F32, NULL, rows, IN, V);
		size_t bad = 0, far = 0;
		for (size_t i = 0; i < (size_t)rows * V; i++) {
			float r = round(y32[i]), g = ref_decode(y16[i], bf);
			bad += !same(g, r);
			far += fabsf(g - r) > fabsf(r) * (bf ? 0x1p-7f : 0x1p-10f) + 1e-5f; /* + fp32 sums' cancellation */
		}
		if (rows < T)
			CHECK(bad == 0, "%s linear_fwd into 16 bits (one row block): the reference rounding of its fp32 output "
			      "(%zu differ)", name, bad);
		else
			CHECK(far == 0 && bad * 100 < (size_t)rows * V, "%s linear_fwd into 16 bits (3 row blocks): within one "
			      "16-bit step of the rounded fp32 output (%zu of %zu differ, %zu by more)", name, bad,
			      (size_t)rows * V, far);
	}
	size_t bad;
	for (size_t i = 0; i < (size_t)T * V; i++) y32[i] = ref_decode(y16[i], bf); /* the same values in fp32 */
	be->ops->xent_max(be, mx1, y32, MGT_DT_F32, T, V);
	be->ops->xent_max(be, mx2, y16, dt, T, V);
	be->ops->xent_stats(be, se1, tg1, y32, MGT_DT_F32, lab, mx1, 0, T, V);
	be->ops->xent_stats(be, se2, tg2, y16, dt, lab, mx2, 0, T, V);
	CHECK(!memcmp(mx1, mx2, sizeof mx1) && !memcmp(se1, se2, sizeof se1) && !memcmp(tg1, tg2, sizeof tg1),
	      "%s xent_max, xent_stats on 16-bit logits: the bits of the fp32 ops on their values", name);
	be->ops->xent_bwd(be, y32, y32, MGT_DT_F32, lab, mx1, se1, mask, 0.01f, 0, T, V);
	be->ops->xent_bwd(be, y16, y16, dt, lab, mx2, se2, mask, 0.01f, 0, T, V);
	bad = 0;
	for (size_t i = 0; i < (size_t)T * V; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
	CHECK(bad == 0, "%s xent_bwd in place on 16-bit logits: the rounding of its fp32 gradient (%zu differ)", name, bad);
	for (size_t i = 0; i < (size_t)T * V; i++) y32[i] = ref_decode(y16[i], bf);
	memset(dw1, 0, sizeof dw1), memset(dw2, 0, sizeof dw2);
	be->ops->linear_bwd(be, dx1, MGT_DT_F32, dw1, NULL, y32, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, IN, V);
	be->ops->linear_bwd(be, dx2, MGT_DT_F32, dw2, NULL, y16, dt, x, MGT_DT_F32, w, MGT_DT_F32, T, IN, V);
	CHECK(!memcmp(dx1, dx2, sizeof dx1) && !memcmp(dw1, dw2, sizeof dw1),
	      "%s linear_bwd from a 16-bit dy: the bits it gives from dy's fp32 values", name);
	free(x), free(w), free(y32), free(y16);
	mgt_backend_destroy(be);
}

/* The fused QKV activation and the attention output in 16 bits: rope on 16-bit qkv writes the
 * reference rounding of the fp32 rotation of its values (value heads and channels past rot_dim
 * keep their bits); attn_fwd reading 16-bit qkv gives lse bitwise and out the rounding of the
 * fp32 op on the same values; attn_bwd from 16-bit qkv and out the bits of the fp32 op on their
 * values (with dropout, GQA, a head dimension off the vector width). */
static void test_attn16(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { S = 37, B = 2, NG = 2, R = 2, D = 24, ROT = 16, T = S * B, NQ = T * NG * (R + 2) * D, NO = T * NG * R * D };
	enum { NL = B * NG * R * S };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	be->precision = prec;
	static float qkv[NQ], qv[NQ], rv[NQ], o32[NO], dout[NO], ov[NO], d1[NQ], d2[NQ], l1[NL], l2[NL], inv[ROT / 2];
	static uint16_t q16[NQ], r16[NQ], o16[NO];
	static int32_t pos[T];
	for (int i = 0; i < NQ; i++) qkv[i] = (float)((int)(next32() % 20001) - 10000) * 2e-4f;
	for (int i = 0; i < NO; i++) dout[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int t = 0; t < T; t++) pos[t] = t / B + 3;
	for (int k = 0; k < ROT / 2; k++) inv[k] = 1.0f / powf(10000.0f, (float)(2 * k) / (float)ROT);
	be->ops->cast(be, q16, dt, qkv, NQ);
	for (int i = 0; i < NQ; i++) qv[i] = rv[i] = ref_decode(q16[i], bf);
	memcpy(r16, q16, sizeof r16);
	be->ops->rope(be, rv, MGT_DT_F32, pos, inv, T, NG, R, D, ROT, false);
	be->ops->rope(be, r16, dt, pos, inv, T, NG, R, D, ROT, false);
	int bad = 0, moved = 0, kept = 0;
	for (int i = 0; i < NQ; i++) {
		const int k = i % D, m = i / D % (R + 2);
		bad += !same(ref_decode(r16[i], bf), round(rv[i]));
		moved += r16[i] != q16[i];
		kept += (m == R + 1 || k >= ROT) && r16[i] != q16[i];
	}
	CHECK(bad == 0 && kept == 0 && moved > NQ / 4,
	      "%s rope on 16-bit qkv: the rounding of the fp32 rotation (%d differ, %d values/tail moved, %d moved)", name,
	      bad, kept, moved);
	for (int p = 0; p < 2; p++) {
		const float drop = p ? 0.1f : 0.0f;
		at_attn_fwd(be, o32, l1, qv, MGT_DT_F32, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		at_attn_fwd(be, o16, l2, q16, dt, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		bad = 0;
		for (int i = 0; i < NO; i++) bad += !same(ref_decode(o16[i], bf), round(o32[i]));
		CHECK(bad == 0 && !memcmp(l1, l2, sizeof l1),
		      "%s attn_fwd (p %g) on 16-bit qkv: lse bitwise, out the rounding of the fp32 op's (%d differ)", name,
		      drop, bad);
		for (int i = 0; i < NO; i++) ov[i] = ref_decode(o16[i], bf);
		at_attn_bwd(be, d1, dout, MGT_DT_F32, qv, ov, MGT_DT_F32, l1, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		at_attn_bwd(be, d2, dout, MGT_DT_F32, q16, o16, dt, l2, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		CHECK(!memcmp(d1, d2, sizeof d1), "%s attn_bwd (p %g) from 16-bit qkv and out: the bits of their fp32 values",
		      name, drop);
		/* 16-bit dout and dqkv: the rounding of the fp32 dqkv from dout's values */
		static uint16_t g16[NO], dq16[NQ];
		static float gv[NO];
		be->ops->cast(be, g16, dt, dout, NO);
		for (int i = 0; i < NO; i++) gv[i] = ref_decode(g16[i], bf);
		at_attn_bwd(be, d1, gv, MGT_DT_F32, q16, o16, dt, l2, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		at_attn_bwd(be, dq16, g16, dt, q16, o16, dt, l2, S, B, NG, R, D, drop, 77, 1, 6, NULL);
		bad = 0;
		for (int i = 0; i < NQ; i++) bad += !same(ref_decode(dq16[i], bf), round(d1[i]));
		CHECK(bad == 0, "%s attn_bwd (p %g) with 16-bit dout and dqkv: the rounding of the fp32 dqkv (%d differ)", name,
		      drop, bad);
	}
	mgt_backend_destroy(be);
}

/* Activation gradients in 16 bits: linear_bwd writing a 16-bit dx, bda_fwd reading a 16-bit y,
 * bda_bwd between 16-bit dout and dy (with and without dropout, and a 16-bit dy from an fp32 dout),
 * embedding_bwd reading a 16-bit dy: each the reference rounding (or the exact bits) of the fp32
 * op on the widened values; db and dtable sum the stored values. */
static void test_grad16(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 23, IN = 37, OUT = 29 };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	be->precision = prec;
	static float x[T * IN], w[OUT * IN], dy[T * OUT], dx1[T * IN], dw1[OUT * IN], dw2[OUT * IN], v[T * OUT];
	static float o1[T * OUT], o2[T * OUT], db1[OUT], db2[OUT], tab1[5 * OUT], tab2[5 * OUT];
	static uint16_t dx2[T * IN], dy16[T * OUT], g16[T * OUT];
	static int32_t ids[T];
	for (int i = 0; i < T * IN; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 3e-4f;
	for (int i = 0; i < OUT * IN; i++) w[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int i = 0; i < T * OUT; i++) dy[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int t = 0; t < T; t++) ids[t] = (int32_t)(next32() % 5);
	be->ops->cast(be, dy16, dt, dy, T * OUT);
	for (int i = 0; i < T * OUT; i++) v[i] = ref_decode(dy16[i], bf);
	be->ops->linear_bwd(be, dx1, MGT_DT_F32, dw1, NULL, dy16, dt, x, MGT_DT_F32, w, MGT_DT_F32, T, IN, OUT);
	be->ops->linear_bwd(be, dx2, dt, dw2, NULL, dy16, dt, x, MGT_DT_F32, w, MGT_DT_F32, T, IN, OUT);
	int bad = 0;
	for (int i = 0; i < T * IN; i++) bad += !same(ref_decode(dx2[i], bf), round(dx1[i]));
	CHECK(bad == 0 && !memcmp(dw1, dw2, sizeof dw1), "%s linear_bwd into a 16-bit dx: the rounding of the fp32 dx (%d "
	      "differ), dw the same bits", name, bad);
	for (int drop = 0; drop < 2; drop++) {
		const float p = drop ? 0.25f : 0.0f;
		be->ops->bda_fwd(be, o1, x, MGT_DT_F32, v, MGT_DT_F32, w, T, OUT, p, 5, 77);
		be->ops->bda_fwd(be, o2, x, MGT_DT_F32, dy16, dt, w, T, OUT, p, 5, 77);
		CHECK(!memcmp(o1, o2, sizeof o1), "%s bda_fwd (p %g) of a 16-bit y: the bits of its fp32 values", name, p);
		memset(db1, 0, sizeof db1), memset(db2, 0, sizeof db2);
		be->ops->bda_bwd(be, o1, MGT_DT_F32, NULL, v, MGT_DT_F32, T, OUT, p, 5, 77);
		for (int i = 0; i < T * OUT; i++) o1[i] = round(o1[i]);
		be->ops->bda_bwd(be, o2, MGT_DT_F32, db1, o1, MGT_DT_F32, T, OUT, 0.0f, 0, 0); /* db1: sum of the rounded */
		be->ops->bda_bwd(be, g16, dt, db2, dy16, dt, T, OUT, p, 5, 77);
		bad = 0;
		for (int i = 0; i < T * OUT; i++) bad += !same(ref_decode(g16[i], bf), o1[i]);
		memcpy(g16, dy16, sizeof g16); /* in place */
		be->ops->bda_bwd(be, g16, dt, NULL, g16, dt, T, OUT, p, 5, 77);
		for (int i = 0; i < T * OUT; i++) bad += !same(ref_decode(g16[i], bf), o1[i]);
		be->ops->bda_bwd(be, g16, dt, NULL, v, MGT_DT_F32, T, OUT, p, 5, 77); /* fp32 dout, 16-bit dy */
		for (int i = 0; i < T * OUT; i++) bad += !same(ref_decode(g16[i], bf), o1[i]);
		CHECK(bad == 0 && !memcmp(db1, db2, sizeof db1), "%s bda_bwd (p %g) between 16-bit gradients: the rounding "
		      "of the fp32 op (%d differ), db the sum of the stored values", name, p, bad);
	}
	for (int act = 0; act < 3; act++) { /* bias_act_bwd: 16-bit dy and dx (OUT = f, x [T, 2f] for SwiGLU) */
		static float a1[T * 2 * OUT], a2[T * 2 * OUT], ab1[2 * OUT], ab2[2 * OUT], xa[T * 2 * OUT];
		static uint16_t a16[T * 2 * OUT];
		for (int i = 0; i < T * 2 * OUT; i++) xa[i] = (float)((int)(next32() % 20001) - 10000) * 3e-4f;
		const int xw = act == MGT_ACT_SWIGLU ? 2 * OUT : OUT;
		memset(ab1, 0, sizeof ab1), memset(ab2, 0, sizeof ab2);
		be->ops->bias_act_bwd(be, (mgt_act_kind)act, a1, NULL, v, MGT_DT_F32, xa, MGT_DT_F32, w, T, OUT);
		for (int i = 0; i < T * xw; i++) a1[i] = round(a1[i]);
		be->ops->bda_bwd(be, a2, MGT_DT_F32, ab1, a1, MGT_DT_F32, T, xw, 0.0f, 0, 0); /* ab1: sums of the rounded */
		be->ops->bias_act_bwd(be, (mgt_act_kind)act, a16, ab2, dy16, dt, xa, MGT_DT_F32, w, T, OUT);
		bad = 0;
		for (int i = 0; i < T * xw; i++) bad += !same(ref_decode(a16[i], bf), a1[i]);
		CHECK(bad == 0 && !memcmp(ab1, ab2, sizeof ab1), "%s bias_act_bwd (act %d) with 16-bit dy and dx: the "
		      "rounding of the fp32 dx (%d differ), db the sums of the stored dx", name, act, bad);
	}
	memset(tab1, 0, sizeof tab1), memset(tab2, 0, sizeof tab2);
	be->ops->embedding_bwd(be, tab1, v, MGT_DT_F32, ids, 0, 5, T, OUT);
	be->ops->embedding_bwd(be, tab2, dy16, dt, ids, 0, 5, T, OUT);
	CHECK(!memcmp(tab1, tab2, sizeof tab1), "%s embedding_bwd of a 16-bit dy: the bits of its fp32 values", name);
	mgt_backend_destroy(be);
}

/* The residual stream in 16 bits: norm_fwd and norm_bwd reading a 16-bit x give the bits they give
 * on its fp32 values (y, mean, rstd; dw, db; the 16-bit dx, read and accumulated, the rounding
 * of the fp32 op's on the widened dx, dy a 16-bit one too); bda_fwd writing a 16-bit out from a 16-bit
 * resid (in place too, with dropout) gives the reference rounding of the fp32 op on the widened
 * resid. */
static void test_residual16(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 19, H = 133 };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	static float x[T * H], xv[T * H], w[H], b[H], y1[T * H], y2[T * H], m1[T], m2[T], r1[T], r2[T], dy[T * H];
	static float dx1[T * H], dw1[H], dw2[H], db1[H], db2[H], o32[T * H], dyv[T * H];
	static uint16_t x16[T * H], o16[T * H], dx2[T * H], dy16[T * H];
	for (int i = 0; i < T * H; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 3e-4f;
	for (int i = 0; i < T * H; i++) dy[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int i = 0; i < H; i++) w[i] = 1.0f + (float)((int)(next32() % 2001) - 1000) * 1e-4f, b[i] = 0.01f * (float)(i % 7);
	be->ops->cast(be, x16, dt, x, T * H);
	be->ops->cast(be, dy16, dt, dy, T * H);
	for (int i = 0; i < T * H; i++) xv[i] = ref_decode(x16[i], bf), dyv[i] = ref_decode(dy16[i], bf);
	for (int kind = 0; kind < 2; kind++) {
		mgt_norm_kind k = kind ? MGT_NORM_RMSNORM : MGT_NORM_LAYERNORM;
		be->ops->norm_fwd(be, k, y1, MGT_DT_F32, m1, r1, xv, MGT_DT_F32, w, kind ? NULL : b, T, H, 1e-5f);
		be->ops->norm_fwd(be, k, y2, MGT_DT_F32, m2, r2, x16, dt, w, kind ? NULL : b, T, H, 1e-5f);
		memset(dw1, 0, sizeof dw1), memset(dw2, 0, sizeof dw2), memset(db1, 0, sizeof db1), memset(db2, 0, sizeof db2);
		memcpy(dx2, x16, sizeof dx2); /* a nonzero gradient to accumulate into */
		for (int i = 0; i < T * H; i++) dx1[i] = ref_decode(dx2[i], bf);
		be->ops->norm_bwd(be, k, dx1, dw1, db1, dyv, MGT_DT_F32, xv, MGT_DT_F32, w, m1, r1, T, H);
		be->ops->norm_bwd(be, k, dx2, dw2, db2, dy16, dt, x16, dt, w, m2, r2, T, H);
		int bad = 0;
		for (int i = 0; i < T * H; i++) bad += !same(ref_decode(dx2[i], bf), round(dx1[i]));
		CHECK(!memcmp(y1, y2, sizeof y1) && !memcmp(m1, m2, sizeof m1) && !memcmp(r1, r2, sizeof r1) && bad == 0 &&
		      !memcmp(dw1, dw2, sizeof dw1) && !memcmp(db1, db2, sizeof db1),
		      "%s norm (%s) of a 16-bit x: the bits of its fp32 values, forward and backward (16-bit dy and dx: "
		      "%d of dx differ from the rounding)", name, kind ? "RMSNorm" : "LayerNorm", bad);
	}
	/* head norms (--qk-layernorm) into a 16-bit qkv: the selected rows rounded, the others kept */
	enum { NG = 2, R = 3, D = 13 }; /* T * NG * (R + 2) * D <= T * H: x serves as qkv */
	static float q32[T * NG * (R + 2) * D], hm[T * NG * R], hr[T * NG * R];
	static uint16_t q16[T * NG * (R + 2) * D], q16b[T * NG * (R + 2) * D];
	const int nq = T * NG * (R + 2) * D;
	for (int key = 0; key < 2; key++) {
		memcpy(q32, x, sizeof q32);
		be->ops->cast(be, q16, dt, x, (size_t)nq);
		memcpy(q16b, q16, sizeof q16);
		be->ops->head_norm_fwd(be, MGT_NORM_RMSNORM, q32, MGT_DT_F32, hm, hr, x, w, NULL, T, NG, R, D, key, 1e-6f);
		be->ops->head_norm_fwd(be, MGT_NORM_RMSNORM, q16, dt, hm, hr, x, w, NULL, T, NG, R, D, key, 1e-6f);
		int bad = 0, kept = 0;
		for (int i = 0; i < nq; i++) {
			const int m = i / D % (R + 2);
			if (key ? m == R : m < R) bad += !same(ref_decode(q16[i], bf), round(q32[i]));
			else kept += q16[i] == q16b[i];
		}
		CHECK(bad == 0 && kept == nq - T * NG * (key ? 1 : R) * D,
		      "%s head_norm_fwd (%s heads) into 16 bits: the rounding of the fp32 rows (%d differ), other rows kept",
		      name, key ? "key" : "query", bad);
		/* the backward in place on a 16-bit gradient (dy's values, q16b's bits) */
		static float g32[T * NG * (R + 2) * D], hw1[D], hw2[D];
		for (int i = 0; i < nq; i++) g32[i] = ref_decode(q16b[i], bf);
		memcpy(q16, q16b, sizeof q16);
		memset(hw1, 0, sizeof hw1), memset(hw2, 0, sizeof hw2);
		be->ops->head_norm_bwd(be, MGT_NORM_RMSNORM, g32, hw1, NULL, g32, MGT_DT_F32, x, w, hm, hr, T, NG, R, D, key);
		be->ops->head_norm_bwd(be, MGT_NORM_RMSNORM, q16, hw2, NULL, q16, dt, x, w, hm, hr, T, NG, R, D, key);
		bad = 0, kept = 0;
		for (int i = 0; i < nq; i++) {
			const int m = i / D % (R + 2);
			if (key ? m == R : m < R) bad += !same(ref_decode(q16[i], bf), round(g32[i]));
			else kept += q16[i] == q16b[i];
		}
		CHECK(bad == 0 && kept == nq - T * NG * (key ? 1 : R) * D && !memcmp(hw1, hw2, sizeof hw1),
		      "%s head_norm_bwd (%s heads) in place on a 16-bit gradient: the rounding of the fp32 rows (%d differ), "
		      "other rows kept, dw the same bits", name, key ? "key" : "query", bad);
	}
	for (int drop = 0; drop < 2; drop++) {
		const float p = drop ? 0.2f : 0.0f;
		be->ops->bda_fwd(be, o32, xv, MGT_DT_F32, dy, MGT_DT_F32, b, T, H, p, 9, 1000);
		be->ops->bda_fwd(be, o16, x16, dt, dy, MGT_DT_F32, b, T, H, p, 9, 1000);
		int bad = 0;
		for (int i = 0; i < T * H; i++) bad += !same(ref_decode(o16[i], bf), round(o32[i]));
		memcpy(o16, x16, sizeof o16); /* in place: out aliasing resid */
		be->ops->bda_fwd(be, o16, o16, dt, dy, MGT_DT_F32, b, T, H, p, 9, 1000);
		for (int i = 0; i < T * H; i++) bad += !same(ref_decode(o16[i], bf), round(o32[i]));
		be->ops->bda_fwd(be, o16, NULL, dt, dy, MGT_DT_F32, NULL, T, H, p, 9, 1000);
		be->ops->bda_fwd(be, o32, NULL, MGT_DT_F32, dy, MGT_DT_F32, NULL, T, H, p, 9, 1000);
		for (int i = 0; i < T * H; i++) bad += !same(ref_decode(o16[i], bf), round(o32[i]));
		CHECK(bad == 0, "%s bda_fwd (p %g) into a 16-bit residual: the rounding of the fp32 sum (%d differ)", name, p,
		      bad);
	}
	mgt_backend_destroy(be);
}

/* The MoE ops on 16-bit rows (Megatron's bf16 experts): each gives the reference rounding of what
 * it computes in fp32 from the rows' fp32 values (the gather the very bits), and the grouped
 * linears reading and writing 16-bit rows give the rounding of their fp32 results. */
static void test_moe16(mgt_precision prec, const char *name, float (*round)(float))
{
	enum { T = 23, K = 2, H = 37, F = 29, N = T * K - 3, G = 3 };
	const int bf = prec == MGT_PREC_BF16;
	const mgt_elem_type dt = mgt_precision_dtype(prec);
	mgt_backend *be = mgt_backend_cpu_create(2);
	static float x[N * H], xv[N * H], w[N], y32[N * H], wt[F * H], dy[N * F], dyv[N * F], d32[N], d16[N];
	static float dx32[N * H], dw1[F * H], dw2[F * H];
	static uint16_t x16[N * H], y16[N * H], dy16[N * F], yo16[N * F], dx16[N * H];
	static int32_t idx[N], slot[T * K];
	for (int i = 0; i < N * H; i++) x[i] = (float)((int)(next32() % 20001) - 10000) * 3e-4f;
	for (int i = 0; i < N * F; i++) dy[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int i = 0; i < F * H; i++) wt[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f;
	for (int i = 0; i < N; i++) w[i] = (float)(next32() % 1000) * 1e-3f, idx[i] = (int32_t)(next32() % T);
	for (int i = 0; i < T * K; i++) slot[i] = i < N ? (int32_t)((i * 7) % N) : -1; /* the last token: no copies */
	be->ops->cast(be, x16, dt, x, N * H);
	be->ops->cast(be, dy16, dt, dy, N * F);
	for (int i = 0; i < N * H; i++) xv[i] = ref_decode(x16[i], bf);
	for (int i = 0; i < N * F; i++) dyv[i] = ref_decode(dy16[i], bf);
	int bad = 0;
	be->ops->rows_gather(be, y16, x16, dt, idx, N, H);
	for (int i = 0; i < N * H; i++) bad += y16[i] != x16[(size_t)idx[i / H] * H + i % H];
	CHECK(bad == 0, "%s rows_gather of 16-bit rows: the bits (%d differ)", name, bad);
	be->ops->rows_combine(be, y32, xv, MGT_DT_F32, slot, T, K, H);
	be->ops->rows_combine(be, y16, x16, dt, slot, T, K, H);
	for (int i = 0; i < T * H; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
	CHECK(bad == 0, "%s rows_combine into 16 bits: the rounding of the fp32 sum (%d differ)", name, bad);
	be->ops->rows_scale(be, y32, xv, MGT_DT_F32, w, N, H);
	be->ops->rows_scale(be, y16, x16, dt, w, N, H);
	for (int i = 0; i < N * H; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
	memcpy(y16, x16, sizeof y16);
	be->ops->rows_scale(be, y16, y16, dt, w, N, H); /* in place */
	for (int i = 0; i < N * H; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
	CHECK(bad == 0, "%s rows_scale of 16-bit rows (and in place): the rounding of the fp32 product (%d differ)", name,
	      bad);
	for (int i = 0; i < N * H; i++) y32[i] = ref_decode(y16[i], bf);
	be->ops->rows_dot(be, d32, xv, y32, MGT_DT_F32, N, H);
	be->ops->rows_dot(be, d16, x16, y16, dt, N, H);
	CHECK(!memcmp(d32, d16, sizeof d32), "%s rows_dot of 16-bit rows: the fp32 op's bits on their values", name);
	memcpy(y32, xv, sizeof y32);
	memcpy(y16, x16, sizeof y16);
	be->ops->add(be, y32, xv, MGT_DT_F32, N * H);
	be->ops->add(be, y16, x16, dt, N * H);
	for (int i = 0; i < N * H; i++) bad += !same(ref_decode(y16[i], bf), round(y32[i]));
	CHECK(bad == 0, "%s add of 16-bit tensors: the rounding of the fp32 sum (%d differ)", name, bad);
	/* grouped linears [N, H] -> [N, F] over 3 experts (one empty) with 16-bit rows */
	be->precision = prec;
	const int rows[G] = { 17, 0, N - 17 };
	const void *wg[G] = { wt, wt, wt + 5 };
	be->ops->linear_fwd_grouped(be, y32, xv, MGT_DT_F32, wg, MGT_DT_F32, rows, G, H, F - 5);
	be->ops->linear_fwd_grouped(be, yo16, x16, dt, wg, MGT_DT_F32, rows, G, H, F - 5);
	for (int i = 0; i < N * (F - 5); i++) bad += !same(ref_decode(yo16[i], bf), round(y32[i]));
	memset(dw1, 0, sizeof dw1), memset(dw2, 0, sizeof dw2);
	float *d1[G] = { dw1, dw1 + 3, dw1 + 9 }, *d2[G] = { dw2, dw2 + 3, dw2 + 9 };
	be->ops->linear_bwd_grouped(be, dx32, d1, dyv, xv, MGT_DT_F32, wg, MGT_DT_F32, rows, G, H, F - 5);
	be->ops->linear_bwd_grouped(be, dx16, d2, dy16, x16, dt, wg, MGT_DT_F32, rows, G, H, F - 5);
	for (int i = 0; i < N * H; i++) bad += !same(ref_decode(dx16[i], bf), round(dx32[i]));
	CHECK(bad == 0 && !memcmp(dw1, dw2, sizeof dw1),
	      "%s grouped linears on 16-bit rows: y and dx the rounding of the fp32 results, dw the same bits (%d differ)",
	      name, bad);
	mgt_backend_destroy(be);
}

static void test_scaler(void)
{
	mgt_loss_scaler ls;
	CHECK(mgt_loss_scaler_init(&ls, 0, 8, 1, 3, 2) == MGT_OK && ls.dynamic && ls.scale == 8, "dynamic scaler starts at 8");
	/* hysteresis 2: the first inf only spends hysteresis, the second halves, each further one halves */
	mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 8 && ls.hysteresis_tracker == 1, "first inf: scale kept (hysteresis 1 left)");
	mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 4, "second inf: halved to 4");
	mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 2, "third inf: halved to 2 (hysteresis not refilled)");
	mgt_loss_scaler_update(&ls, false);
	mgt_loss_scaler_update(&ls, false);
	CHECK(ls.scale == 2 && ls.growth_tracker == 2, "two clean iterations: no growth yet (window 3)");
	mgt_loss_scaler_update(&ls, false);
	CHECK(ls.scale == 4 && ls.growth_tracker == 0 && ls.hysteresis_tracker == 2, "third clean: doubled, hysteresis refilled");
	mgt_loss_scaler_update(&ls, false);
	mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 4 && ls.growth_tracker == 0, "an inf restarts the growth count");
	for (int i = 0; i < 10; i++) mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 1, "never below --min-loss-scale");
	CHECK(mgt_loss_scaler_init(&ls, 1024, 8, 1, 3, 2) == MGT_OK && !ls.dynamic && ls.scale == 1024, "constant scaler");
	mgt_loss_scaler_update(&ls, true);
	mgt_loss_scaler_update(&ls, true);
	CHECK(ls.scale == 1024, "constant scaler never changes");
	CHECK(mgt_loss_scaler_init(&ls, 0, 8, 16, 3, 2) == MGT_ERR_USAGE, "min above initial refused: %s", mgt_err_msg());
	CHECK(mgt_loss_scaler_init(&ls, 0, 8, 1, 0, 2) == MGT_ERR_USAGE, "window 0 refused: %s", mgt_err_msg());
	CHECK(mgt_loss_scaler_init(&ls, 0, INFINITY, 1, 3, 2) == MGT_ERR_USAGE, "infinite scale refused: %s", mgt_err_msg());
}


/* ---- fp8 (lib/util mgt_f32_to_fp8 / mgt_fp8_to_f32) ----
 * The reference is the OCP 8-bit Floating Point Specification v1.0 read directly: a byte is sign,
 * E exponent bits, M mantissa bits; E4M3 (bias 7) has no infinities and NaN only at S.1111.111,
 * E5M2 (bias 15) is IEEE-like (E all ones: Inf with M = 0, else NaN); E = 0 is subnormal,
 * M 2^(1 - bias - mbits).  Conversion to fp8 (CUDA's cuda_fp8.hpp __nv_cvt_float_to_fp8 with __NV_SATFINITE):
 * the nearest value of the table, ties to the even code, saturating at the largest finite value,
 * NaN -> 0x7F; the reference finds it by searching all 256 decoded values (no arithmetic shared
 * with the code under test, which snaps onto the grid with frexp/nearbyint). */
static double spec_fp8(unsigned v, int ebits, int mbits, int bias, bool ieee)
{
	const unsigned E = (v >> mbits) & ((1u << ebits) - 1), M = v & ((1u << mbits) - 1), top = (1u << ebits) - 1;
	const double sgn = v & 0x80 ? -1.0 : 1.0;
	if (ieee && E == top)
		return M ? NAN : sgn * INFINITY;
	if (!ieee && E == top && M == (1u << mbits) - 1)
		return NAN;
	if (E == 0)
		return sgn * M * pow(2.0, 1 - bias - mbits);
	return sgn * (1.0 + M / pow(2.0, mbits)) * pow(2.0, (double)E - bias);
}

/* The byte the reference rounding gives for x (table: the 256 decoded values). */
static unsigned ref_fp8(float x, const double *table, double maxv)
{
	if (isnan(x))
		return 0x7f;
	double a = fabs((double)x) > maxv ? copysign(maxv, x) : (double)x;
	unsigned best = 0;
	double bd = INFINITY;
	for (unsigned c = 0; c < 256; c++) {
		if (isnan(table[c]) || isinf(table[c]) || !signbit(table[c]) != !signbit(a))
			continue; /* candidates of x's sign (zero keeps its sign) */
		double d = fabs(a - table[c]);
		if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1))
			bd = d, best = c;
	}
	return best;
}

static void test_fp8_format(mgt_fp8_format f, const char *name, int ebits, int mbits, int bias, bool ieee, double maxv)
{
	double table[256];
	int nd = 0, nrt = 0;
	for (unsigned c = 0; c < 256; c++) {
		table[c] = spec_fp8(c, ebits, mbits, bias, ieee);
		const float g = mgt_fp8_to_f32((uint8_t)c, f);
		const bool same = isnan(table[c]) ? isnan(g) : (double)g == table[c] && !signbit(g) == !signbit(table[c]);
		nd += !same;
		if (!isnan(table[c]) && !isinf(table[c]))
			nrt += mgt_f32_to_fp8((float)table[c], f) != c;
	}
	CHECK(nd == 0, "%s: all 256 codes decode as the OCP specification says (%d differ)", name, nd);
	CHECK(nrt == 0, "%s: every finite code survives fp8 -> fp32 -> fp8 (%d do not)", name, nrt);
	/* the specification's landmarks */
	const unsigned cmax = f == MGT_FP8_E4M3 ? 0x7e : 0x7b;
	CHECK(mgt_fp8_to_f32((uint8_t)cmax, f) == (float)maxv && mgt_fp8_to_f32(0x01, f) == (float)ldexp(1.0, 1 - bias - mbits) &&
	      mgt_fp8_to_f32((uint8_t)(1u << mbits), f) == (float)ldexp(1.0, 1 - bias),
	      "%s: largest %g, smallest subnormal 2^%d, smallest normal 2^%d", name, maxv, 1 - bias - mbits, 1 - bias);
	CHECK(isnan(mgt_fp8_to_f32(0x7f, f)) && isnan(mgt_fp8_to_f32(0xff, f)) &&
	      (f == MGT_FP8_E4M3 ? !isinf(mgt_fp8_to_f32(0x7c, f)) : isinf(mgt_fp8_to_f32(0x7c, f)) && isnan(mgt_fp8_to_f32(0x7d, f))),
	      "%s: NaN and infinity codes", name);
	/* every rounding boundary: just below, at and just above the midpoint of each pair of
	 * neighbouring values, both signs */
	int nb = 0, nt = 0;
	for (unsigned c = 0; c < cmax; c++) {
		const double lo = table[c], hi = table[c + 1], mid = (lo + hi) / 2; /* exact in float */
		const float m = (float)mid, below = nextafterf(m, 0.0f), above = nextafterf(m, INFINITY);
		for (int sg = 0; sg < 2; sg++) {
			const float k = sg ? -1.0f : 1.0f;
			const unsigned sb = sg ? 0x80u : 0;
			nb += mgt_f32_to_fp8(k * below, f) != (c | sb);
			nb += mgt_f32_to_fp8(k * above, f) != ((c + 1) | sb);
			nt += mgt_f32_to_fp8(k * m, f) != ((c & 1 ? c + 1 : c) | sb);
		}
	}
	CHECK(nb == 0, "%s: values just below and above each of the %u midpoints round down and up (%d wrong)", name, cmax, nb);
	CHECK(nt == 0, "%s: each midpoint itself goes to the even code (%d wrong)", name, nt);
	/* saturation, NaN, zeros */
	const double ulp_max = maxv - table[cmax - 1];
	CHECK(mgt_f32_to_fp8(nextafterf((float)maxv, INFINITY), f) == cmax && mgt_f32_to_fp8((float)(maxv + ulp_max / 2), f) == cmax &&
	      mgt_f32_to_fp8(1e30f, f) == cmax && mgt_f32_to_fp8(INFINITY, f) == cmax && mgt_f32_to_fp8(-INFINITY, f) == (cmax | 0x80) &&
	      mgt_f32_to_fp8(-FLT_MAX, f) == (cmax | 0x80),
	      "%s: past the largest value (its tie, 1e30, +-inf, -FLT_MAX) saturates to +-%g", name, maxv);
	CHECK(mgt_f32_to_fp8(NAN, f) == 0x7f && mgt_f32_to_fp8(-NAN, f) == 0x7f, "%s: NaN of either sign -> 0x7F", name);
	const float half_min = (float)ldexp(1.0, -bias - mbits);
	CHECK(mgt_f32_to_fp8(half_min, f) == 0 && mgt_f32_to_fp8(-half_min, f) == 0x80 &&
	      mgt_f32_to_fp8(nextafterf(half_min, 1.0f), f) == 1 && mgt_f32_to_fp8(1e-30f, f) == 0 &&
	      mgt_f32_to_fp8(-0.0f, f) == 0x80 && mgt_f32_to_fp8(-1e-30f, f) == 0x80,
	      "%s: half the smallest subnormal (a tie) and below go to a zero of the input's sign", name);
	/* random floats over the whole range, against the table search */
	int nr = 0;
	for (int i = 0; i < 200000; i++) {
		uint32_t u = next32();
		float x;
		memcpy(&x, &u, 4);
		if (i % 2) /* half of them inside the format's range */
			x = (float)ldexp((double)(u & 0xffffff) / 16777216.0 + 0.5, (int)(u >> 24) % (2 * bias + 8) - bias - mbits - 2) *
			    (u & 1 ? -1.0f : 1.0f);
		nr += mgt_f32_to_fp8(x, f) != ref_fp8(x, table, maxv);
	}
	CHECK(nr == 0, "%s: 200000 random floats round as the table search says (%d differ)", name, nr);
}

static void test_fp8(void)
{
	test_fp8_format(MGT_FP8_E4M3, "fp8 e4m3", 4, 3, 7, false, 448.0);
	test_fp8_format(MGT_FP8_E5M2, "fp8 e5m2", 5, 2, 15, true, 57344.0);
}

int main(void)
{
	test_fp8();
	test_rounding_cases();
	test_rounding_random();
	test_gemm_emulation(MGT_PREC_BF16, "bf16", ref_bf16);
	test_gemm_emulation(MGT_PREC_FP16, "fp16", ref_fp16);
	test_weight_copy(MGT_PREC_BF16, "bf16", ref_bf16);
	test_weight_copy(MGT_PREC_FP16, "fp16", ref_fp16);
	test_storage(MGT_PREC_BF16, "bf16", ref_bf16);
	test_storage(MGT_PREC_FP16, "fp16", ref_fp16);
	test_logits16(MGT_PREC_BF16, "bf16", ref_bf16);
	test_logits16(MGT_PREC_FP16, "fp16", ref_fp16);
	test_attn16(MGT_PREC_BF16, "bf16", ref_bf16);
	test_attn16(MGT_PREC_FP16, "fp16", ref_fp16);
	test_residual16(MGT_PREC_BF16, "bf16", ref_bf16);
	test_residual16(MGT_PREC_FP16, "fp16", ref_fp16);
	test_grad16(MGT_PREC_BF16, "bf16", ref_bf16);
	test_grad16(MGT_PREC_FP16, "fp16", ref_fp16);
	test_moe16(MGT_PREC_BF16, "bf16", ref_bf16);
	test_moe16(MGT_PREC_FP16, "fp16", ref_fp16);
	test_scaler();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
