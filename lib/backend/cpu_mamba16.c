/* lib/backend: the CPU backend's Mamba-2 mixer ops on any storage type (backend.h
 * mamba_conv_*, ssd_scan_*, mamba_gated_norm_*, argument t).  fp32 activations go straight to the
 * fp32 ops (cpu_mamba.c, cpu_ssd.c: bit for bit what they were); bf16 and fp16 ones are the
 * reference of "fp32 math, 16-bit storage": each 16-bit input block widened exactly into an fp32
 * copy [rows, cols] (its row stride dropped), the fp32 op run on the copies, and each output block
 * rounded to nearest even once into its strided destination (only its columns written).  The
 * copies live in rounding buffer 6 (cpu_impl.h), carved in order; an op whose buffer cannot grow
 * records the failure and writes nothing.
 *
 * mamba_gated_norm_bwd does not stage: it widens row by row inside the op
 * (mgt_cpu_mamba_gated_norm_bwd_16, cpu_mamba.c), with the same arithmetic, so its outputs are
 * the staged computation's bit for bit (tests/unit/test_mamba.c test16_norm).  Measured (perf
 * samples of a bf16 training step, mgt-train --model mamba2-130m, sequence 256, micro-batch 1,
 * one thread, on a shared 2-core x86 machine): the staging copies and their conversions were
 * 5.4% of the step, spread over the six ops (0.7% to 1.2% each), the most in gated_norm_bwd
 * (1.2%; the op 5.4% of the step, 4.5% row by row with inline bf16 conversions; alone at
 * T 256, d_inner 1536: 11.5 ms staged, 7.9 ms row by row, the fp32 math 5.9 ms, minima of 200);
 * for tiny-hybrid 0.45% of its step.  The other five stay staged: at most 0.9% of the step each,
 * most of it the widening and rounding that any version does. */
#include "backend/cpu_impl.h"

/* A block of an op's operand: rows x cols elements of type t at p, row stride ld. */
typedef struct {
	const void *p;
	int ld, cols;
} blk;

/* The fp32 copies of n blocks of `rows` rows each, carved from rounding buffer 6 in order into
 * f[0..n); the first `in` blocks widened from their sources.  False (failure recorded) when the
 * buffer cannot grow. */
static bool stage(mgt_backend *be, mgt_elem_type t, int rows, const blk *b, int n, int in, float **f)
{
	size_t tot = 0;
	for (int k = 0; k < n; k++)
		tot += (size_t)rows * (size_t)b[k].cols;
	float *a = mgt_cpu_round_buf(be, 6, tot ? tot : 1);
	if (!a)
		return false;
	for (int k = 0; k < n; k++) {
		f[k] = a;
		a += (size_t)rows * (size_t)b[k].cols;
	}
	for (int k = 0; k < in; k++)
		for (int r = 0; r < rows; r++)
			for (int c = 0; c < b[k].cols; c++)
				f[k][(size_t)r * b[k].cols + c] = cpu_ld(b[k].p, t, (size_t)r * b[k].ld + c);
	return true;
}

/* Block b (its p a destination) of type t = the fp32 copy f, rounded to nearest even. */
static void unstage(mgt_elem_type t, int rows, blk b, const float *f)
{
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < b.cols; c++)
			cpu_st((void *)b.p, t, (size_t)r * b.ld + c, f[(size_t)r * b.cols + c]);
}

void mgt_cpu_mamba_conv_fwd(mgt_backend *be, void *y, const void *x, int ld_x, const float *w, const float *bias,
			    const int32_t *seg_start, int L, int b, int CD, int K, mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_mamba_conv_fwd_f32(be, y, x, ld_x, w, bias, seg_start, L, b, CD, K);
		return;
	}
	const int T = L * b;
	const blk bl[] = { { x, ld_x, CD }, { y, CD, CD } };
	float *f[2];
	if (T <= 0 || CD <= 0 || !stage(be, t, T, bl, 2, 1, f))
		return;
	mgt_cpu_mamba_conv_fwd_f32(be, f[1], f[0], CD, w, bias, seg_start, L, b, CD, K);
	unstage(t, T, bl[1], f[1]);
}

void mgt_cpu_mamba_conv_bwd(mgt_backend *be, void *dx, float *dw, float *db, const void *dy, const void *x, int ld_x,
			    const float *w, const float *bias, const int32_t *seg_start, int L, int b, int CD, int K,
			    mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_mamba_conv_bwd_f32(be, dx, dw, db, dy, x, ld_x, w, bias, seg_start, L, b, CD, K);
		return;
	}
	const int T = L * b;
	const blk bl[] = { { dy, CD, CD }, { x, ld_x, CD }, { dx, ld_x, CD } };
	float *f[3];
	if (T <= 0 || CD <= 0 || !stage(be, t, T, bl, 3, 2, f))
		return;
	mgt_cpu_mamba_conv_bwd_f32(be, f[2], dw, db, f[0], f[1], CD, w, bias, seg_start, L, b, CD, K);
	unstage(t, T, bl[2], f[2]);
}

void mgt_cpu_mamba_gated_norm_fwd(mgt_backend *be, void *out, float *rstd, const void *y, const void *z, int ld_z,
				  const float *w, int T, int di, int g, float eps, mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_mamba_gated_norm_fwd_f32(be, out, rstd, y, z, ld_z, w, T, di, g, eps);
		return;
	}
	const blk bl[] = { { y, di, di }, { z, ld_z, di }, { out, di, di } };
	float *f[3];
	if (T <= 0 || di <= 0 || g <= 0 || !stage(be, t, T, bl, 3, 2, f))
		return;
	mgt_cpu_mamba_gated_norm_fwd_f32(be, f[2], rstd, f[0], f[1], di, w, T, di, g, eps);
	unstage(t, T, bl[2], f[2]);
}

void mgt_cpu_mamba_gated_norm_bwd(mgt_backend *be, void *dy, void *dz, float *dw, const void *dout, const void *y,
				  const void *z, int ld_z, const float *w, const float *rstd, int T, int di, int g,
				  mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_mamba_gated_norm_bwd_f32(be, dy, dz, dw, dout, y, z, ld_z, w, rstd, T, di, g);
		return;
	}
	if (T <= 0 || di <= 0 || g <= 0)
		return;
	mgt_cpu_mamba_gated_norm_bwd_16(be, dy, dz, dw, dout, y, z, ld_z, w, rstd, T, di, g, t);
}

/* The scan's geometry over the compact copies: x [T, nh p], B and C [T, g n], dt_raw [T, nh]. */
static mgt_ssd compact(const mgt_ssd *d)
{
	mgt_ssd c = *d;
	c.ld_x = d->nh * d->p;
	c.ld_bc = d->g * d->n;
	c.ld_dt = d->nh;
	return c;
}

static bool ssd_empty(const mgt_ssd *d) { return d->L <= 0 || d->b <= 0 || d->nh <= 0 || d->p <= 0 || d->n <= 0; }

void mgt_cpu_ssd_scan_fwd(mgt_backend *be, const mgt_ssd *d, void *y, float *states, const void *x, const void *B,
			  const void *C, const void *dt_raw, const float *dt_bias, const float *A_log, const float *D,
			  mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_ssd_scan_fwd_f32(be, d, y, states, x, B, C, dt_raw, dt_bias, A_log, D);
		return;
	}
	const mgt_ssd c = compact(d);
	const blk bl[] = { { x, d->ld_x, c.ld_x }, { B, d->ld_bc, c.ld_bc }, { C, d->ld_bc, c.ld_bc },
			   { dt_raw, d->ld_dt, c.ld_dt }, { y, c.ld_x, c.ld_x } };
	float *f[5];
	if (ssd_empty(d) || !stage(be, t, d->L * d->b, bl, 5, 4, f))
		return;
	mgt_cpu_ssd_scan_fwd_f32(be, &c, f[4], states, f[0], f[1], f[2], f[3], dt_bias, A_log, D);
	unstage(t, d->L * d->b, bl[4], f[4]);
}

void mgt_cpu_ssd_scan_bwd(mgt_backend *be, const mgt_ssd *d, void *dx, void *dB, void *dC, void *ddt_raw,
			  float *ddt_bias, float *dA_log, float *dD, const void *dy, const float *states, const void *x,
			  const void *B, const void *C, const void *dt_raw, const float *dt_bias, const float *A_log,
			  const float *D, mgt_elem_type t)
{
	if (t == MGT_DT_F32) {
		mgt_cpu_ssd_scan_bwd_f32(be, d, dx, dB, dC, ddt_raw, ddt_bias, dA_log, dD, dy, states, x, B, C, dt_raw,
					 dt_bias, A_log, D);
		return;
	}
	const mgt_ssd c = compact(d);
	const blk bl[] = { { dy, c.ld_x, c.ld_x },	 { x, d->ld_x, c.ld_x },	  { B, d->ld_bc, c.ld_bc },
			   { C, d->ld_bc, c.ld_bc },	 { dt_raw, d->ld_dt, c.ld_dt },	  { dx, d->ld_x, c.ld_x },
			   { dB, d->ld_bc, c.ld_bc },	 { dC, d->ld_bc, c.ld_bc },	  { ddt_raw, d->ld_dt, c.ld_dt } };
	float *f[9];
	const int T = d->L * d->b;
	if (ssd_empty(d) || !stage(be, t, T, bl, 9, 5, f))
		return;
	mgt_cpu_ssd_scan_bwd_f32(be, &c, f[5], f[6], f[7], f[8], ddt_bias, dA_log, dD, f[0], states, f[1], f[2], f[3],
				 f[4], dt_bias, A_log, D);
	for (int k = 5; k < 9; k++)
		unstage(t, T, bl[k], f[k]);
}
