/* lib/backend: the CPU backend's Mamba-2 selective scan (backend.h ssd_scan_fwd, ssd_scan_bwd).
 *
 * Forward: the chunked SSD algorithm (Dao & Gu 2024, "Transformers are SSMs", section 6; mamba_ssm
 * ops/triton/ssd_combined.py _mamba_chunk_scan_combined_fwd, whose five steps Megatron-Core runs:
 * chunk cumsum, chunk state, state passing, C B^T, chunk scan), one (sequence, head) per task, the
 * chunk's products through sgemm (single-threaded inside the parallel region, as attention's).  For
 * chunk positions r, s (s <= r) of one document, cum[r] = sum_{s' <= r in chunk} dt A:
 *   y_r  = sum_s (C_r . B_s) e^{cum[r] - cum[s]} dt_s x_s  +  e^{cum[r]} C_r . S_in  +  D x_r
 *   S_out = e^{cum[last]} S_in + sum_s e^{cum[last] - cum[s]} dt_s x_s (x) B_s
 * where the S_in terms exist only for rows whose document began before the chunk, and the sums run
 * only over positions of the row's document (seg_start): the state restarts at each document.
 * The cumulative sums are kept in double, so the decays e^{cum[r] - cum[s]} carry no cancellation
 * error; the state and every product are fp32.
 *
 * Backward: the sequential adjoint of the recurrence (megatron-hybrid-mamba.md section 3, derived),
 * chunks from the last, each chunk's states S_i recomputed by the recurrence from the state saved
 * at its start.  With R the adjoint carried from position i + 1 (already times a_{i+1}):
 *   dS = R + gy_i (x) C_i;  dC_i += S_i^T gy_i;  dx_i = D gy_i + dt_i dS B_i;
 *   dB_i += dt_i dS^T x_i;  da = <dS, S_{i-1}>;  d dt_i = x_i . (dS B_i) + da a_i A;
 *   dA += da a_i dt_i;  dD += gy_i . x_i;  R = a_i dS (0 at a document start).
 * A group's heads run in different tasks, so dB and dC go per head into scratch and are summed in
 * head order afterwards; the per-head scalars are summed in double over sequences in order.
 */
#include "backend/cpu_impl.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

enum { Q = MGT_SSD_CHUNK };

/* softplus with the kernels' threshold (ssd_chunk_state.py _chunk_cumsum_fwd_kernel) and its slope. */
CPU_INLINE float softplusf_(float v) { return v > 20.0f ? v : log1pf(expf(v)); }
CPU_INLINE float dsoftplusf_(float v) { return v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v)); }

/* One task's view: sequence j, head h (group gi); base pointers at position 0 of the sequence and
 * strides between consecutive positions. */
typedef struct {
	const mgt_ssd *d;
	int j, h, gi, nc;
	const float *x, *B, *C, *dtr;
	size_t sx, sbc, sdt;
	float A, dtb;
} ssd_view;

static ssd_view view_of(const mgt_ssd *d, int j, int h, const float *x, const float *B, const float *C,
			const float *dt_raw, const float *dt_bias, const float *A_log)
{
	ssd_view v = { .d = d, .j = j, .h = h, .gi = h / (d->nh / d->g), .nc = (d->L + Q - 1) / Q };
	v.x = x + (size_t)j * d->ld_x + (size_t)h * d->p;
	v.B = B + (size_t)j * d->ld_bc + (size_t)v.gi * d->n;
	v.C = C + (size_t)j * d->ld_bc + (size_t)v.gi * d->n;
	v.dtr = dt_raw + (size_t)j * d->ld_dt + h;
	v.sx = (size_t)d->b * d->ld_x;
	v.sbc = (size_t)d->b * d->ld_bc;
	v.sdt = (size_t)d->b * d->ld_dt;
	v.A = -expf(A_log[h]);
	v.dtb = dt_bias[h];
	return v;
}

/* Positions i0 .. i0+q-1 of the view: dt, the document starts lo (0 without seg_start) and, when
 * cum != NULL, the inclusive cumulative sums of dt A in double. */
static void chunk_dt(const ssd_view *v, int i0, int q, float *dt, int *lo, double *cum)
{
	const mgt_ssd *d = v->d;
	double acc = 0;
	for (int r = 0; r < q; r++) {
		const int i = i0 + r;
		dt[r] = softplusf_(v->dtr[(size_t)i * v->sdt] + v->dtb);
		lo[r] = d->seg_start ? d->seg_start[(size_t)i * d->b + v->j] : 0;
		acc += (double)dt[r] * v->A;
		if (cum)
			cum[r] = acc;
	}
}

/* Forward scratch per thread, in floats: cum (2Q, doubles), dt, lo (Q each), CB [Q, Q],
 * W [Q, n], Y, Yo [Q, p], S [p, n]. */
static size_t fwd_scratch_s(const mgt_ssd *d)
{
	return 4 * (size_t)Q + (size_t)Q * Q + (size_t)Q * d->n + 2 * (size_t)Q * d->p;
}

/* ... rounded up to 16 floats, so that every thread's cum is aligned for doubles. */
static size_t fwd_scratch(const mgt_ssd *d)
{
	return (fwd_scratch_s(d) + (size_t)d->p * d->n + 15) / 16 * 16;
}

/* One chunk of the forward: y rows written, S advanced to the chunk's end state (skipped for the
 * last chunk). */
static void fwd_chunk(const ssd_view *v, float *y, float *S, int c, float *scr, const float *Dv)
{
	const mgt_ssd *d = v->d;
	const int P = d->p, N = d->n, i0 = c * Q, q = d->L - i0 < Q ? d->L - i0 : Q;
	double *cum = (double *)scr;
	float *dt = scr + 2 * Q, *CB = scr + 4 * Q, *W = CB + (size_t)Q * Q, *Y = W + (size_t)Q * N,
	      *Yo = Y + (size_t)Q * P;
	int *lo = (int *)(scr + 3 * Q);
	chunk_dt(v, i0, q, dt, lo, cum);
	const float *X = v->x + (size_t)i0 * v->sx, *Bc = v->B + (size_t)i0 * v->sbc, *Cc = v->C + (size_t)i0 * v->sbc;
	/* intra-chunk: (C B^T masked by decay and document) times dt-weighted... as M X with M[r][s] */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, q, N, 1.0f, Cc, (int)v->sbc, Bc, (int)v->sbc, 0.0f,
		    CB, Q);
	for (int r = 0; r < q; r++) {
		float *row = CB + (size_t)r * Q;
		for (int s = 0; s < q; s++)
			row[s] = s <= r && i0 + s >= lo[r] ? row[s] * (float)(exp(cum[r] - cum[s]) * dt[s]) : 0.0f;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q, P, q, 1.0f, CB, Q, X, (int)v->sx, 0.0f, Y, P);
	/* inter-chunk: rows whose document began before the chunk read the carried state */
	if (c > 0 && lo[0] < i0) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, P, N, 1.0f, Cc, (int)v->sbc, S, N, 0.0f, Yo, P);
		for (int r = 0; r < q && lo[r] < i0; r++) {
			const float e = (float)exp(cum[r]);
			for (int p = 0; p < P; p++)
				Y[(size_t)r * P + p] += e * Yo[(size_t)r * P + p];
		}
	}
	const float Dh = Dv[v->h];
	for (int r = 0; r < q; r++) {
		float *yr = y + ((size_t)(i0 + r) * d->b + v->j) * ((size_t)d->nh * P) + (size_t)v->h * P;
		const float *xr = X + (size_t)r * v->sx;
		for (int p = 0; p < P; p++)
			yr[p] = Y[(size_t)r * P + p] + Dh * xr[p];
	}
	if (c == v->nc - 1)
		return;
	/* state passing: S = e^{cum[last]} S (0 when the last document starts in the chunk) + X^T W */
	const int last = q - 1;
	for (int s = 0; s < q; s++) {
		const float w = i0 + s >= lo[last] ? (float)(exp(cum[last] - cum[s]) * dt[s]) : 0.0f;
		const float *br = Bc + (size_t)s * v->sbc;
		for (int n = 0; n < N; n++)
			W[(size_t)s * N + n] = w * br[n];
	}
	if (lo[last] < i0) {
		const float e = (float)exp(cum[last]);
		for (size_t k = 0; k < (size_t)P * N; k++)
			S[k] *= e;
	} else {
		memset(S, 0, (size_t)P * N * sizeof *S);
	}
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, P, N, q, 1.0f, X, (int)v->sx, W, N, 1.0f, S, N);
}

void mgt_cpu_ssd_scan_fwd(mgt_backend *be, const mgt_ssd *d, float *y, float *states, const float *x, const float *B,
			  const float *C, const float *dt_raw, const float *dt_bias, const float *A_log, const float *D)
{
	if (d->L <= 0 || d->b <= 0 || d->nh <= 0 || d->p <= 0 || d->n <= 0)
		return;
	const size_t per = fwd_scratch(d), PN = (size_t)d->p * d->n;
	float *scr = cpu_row_bufs(be, per);
	if (!scr)
		return;
	const int tasks = d->b * d->nh, nc = (d->L + Q - 1) / Q;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)d->L * tasks * PN > CPU_PAR_MIN && tasks > 1)
	for (int k = 0; k < tasks; k++) {
		const int j = k / d->nh, h = k % d->nh;
		ssd_view v = view_of(d, j, h, x, B, C, dt_raw, dt_bias, A_log);
		float *my = scr + (size_t)omp_get_thread_num() * per;
		float *S = my + fwd_scratch_s(d);
		memset(S, 0, PN * sizeof *S);
		for (int c = 0; c < nc; c++) {
			memcpy(states + (((size_t)j * nc + c) * d->nh + h) * PN, S, PN * sizeof *S);
			fwd_chunk(&v, y, S, c, my, D);
		}
	}
}

/* ---- backward ---- */

/* Backward scratch per thread, in floats: states S_{i0-1} .. S_{i0+q-1} [(Q+1), p, n], the adjoint
 * R [p, n], dB and dC accumulators [n] each, dt, a, lo [Q] each. */
static size_t bwd_scratch(const mgt_ssd *d)
{
	return ((size_t)Q + 2) * d->p * d->n + 2 * (size_t)d->n + 3 * (size_t)Q + 16;
}

typedef struct {
	float *R, *Sall, *bacc, *cacc, *dt, *a;
	int *lo;
	float rs;            /* the factor of R at the next position handled: a_{i+1}, or 0 */
	double dA, dbias, dD; /* this task's sums */
} bwd_state;

/* The chunk's states by the recurrence from the saved one: Sall[r + 1] = S at position i0 + r. */
static void bwd_recompute(const ssd_view *v, bwd_state *st, const float *S0, int i0, int q)
{
	const int P = v->d->p, N = v->d->n;
	const size_t PN = (size_t)P * N;
	memcpy(st->Sall, S0, PN * sizeof *S0);
	for (int r = 0; r < q; r++) {
		const int i = i0 + r;
		const float a = st->lo[r] == i ? 0.0f : st->a[r], dt = st->dt[r];
		const float *xr = v->x + (size_t)i * v->sx, *br = v->B + (size_t)i * v->sbc;
		const float *sp = st->Sall + (size_t)r * PN;
		float *sn = st->Sall + (size_t)(r + 1) * PN;
		for (int p = 0; p < P; p++) {
			const float u = dt * xr[p];
#pragma omp simd
			for (int n = 0; n < N; n++)
				sn[(size_t)p * N + n] = a * sp[(size_t)p * N + n] + u * br[n];
		}
	}
}

/* Pointers of the backward's outputs (dB and dC: this task's per-head scratch rows). */
typedef struct {
	float *dx, *ddt, *pb, *pc; /* pb, pc: [L, n] of this (sequence, head) */
	const float *dy, *D;
} bwd_out;

/* The adjoint step at position i = i0 + r. */
static void bwd_step(const ssd_view *v, bwd_state *st, const bwd_out *o, int i0, int r)
{
	const mgt_ssd *d = v->d;
	const int P = d->p, N = d->n, i = i0 + r;
	const size_t PN = (size_t)P * N, t = (size_t)i * d->b + v->j;
	const float *gy = o->dy + t * ((size_t)d->nh * P) + (size_t)v->h * P, *xr = v->x + (size_t)i * v->sx;
	const float *br = v->B + (size_t)i * v->sbc, *cr = v->C + (size_t)i * v->sbc;
	const bool reset = st->lo[r] == i;
	const float *Si = st->Sall + (size_t)(r + 1) * PN, *Sp = st->Sall + (size_t)r * PN;
	const float rs = st->rs, dt = st->dt[r], a = st->a[r], Dh = o->D[v->h];
	float *bacc = st->bacc, *cacc = st->cacc, *dxr = o->dx + (size_t)i * v->sx;
	for (int n = 0; n < N; n++)
		bacc[n] = cacc[n] = 0.0f;
	double da = 0, ddx = 0, dD = 0;
	for (int p = 0; p < P; p++) {
		float *Rp = st->R + (size_t)p * N;
		const float g = gy[p], xv = xr[p], *sip = Si + (size_t)p * N, *spp = Sp + (size_t)p * N;
		float qp = 0, dap = 0; /* n-term sums in fp32 (lane-split by simd), gathered in double */
#pragma omp simd reduction(+ : qp, dap)
		for (int n = 0; n < N; n++) {
			const float ds = rs * Rp[n] + g * cr[n];
			qp += ds * br[n];
			bacc[n] += ds * xv;
			dap += ds * spp[n];
			cacc[n] += sip[n] * g;
			Rp[n] = ds;
		}
		if (!reset)
			da += dap;
		dxr[p] = Dh * g + dt * qp;
		ddx += (double)xv * qp;
		dD += (double)g * xv;
	}
	float *pb = o->pb + (size_t)i * N, *pc = o->pc + (size_t)i * N;
	for (int n = 0; n < N; n++) {
		pb[n] = dt * bacc[n];
		pc[n] = cacc[n];
	}
	const double ddt = ddx + da * a * v->A;
	const float gdt = (float)ddt * dsoftplusf_(v->dtr[(size_t)i * v->sdt] + v->dtb);
	o->ddt[(size_t)i * v->sdt] = gdt;
	st->dbias += gdt;
	st->dA += da * a * dt;
	st->dD += dD;
	st->rs = reset ? 0.0f : a;
}

/* One (sequence, head): chunks from the last, positions from the last. */
static void bwd_task(const ssd_view *v, bwd_state *st, const bwd_out *o, const float *states)
{
	const mgt_ssd *d = v->d;
	const size_t PN = (size_t)d->p * d->n;
	memset(st->R, 0, PN * sizeof *st->R);
	st->rs = 0.0f;
	for (int c = v->nc - 1; c >= 0; c--) {
		const int i0 = c * Q, q = d->L - i0 < Q ? d->L - i0 : Q;
		chunk_dt(v, i0, q, st->dt, st->lo, NULL);
		for (int r = 0; r < q; r++)
			st->a[r] = expf(st->dt[r] * v->A);
		bwd_recompute(v, st, states + (((size_t)v->j * v->nc + c) * d->nh + v->h) * PN, i0, q);
		for (int r = q - 1; r >= 0; r--)
			bwd_step(v, st, o, i0, r);
	}
}

/* dB, dC [t, gi*n ..] = the sum of the group's heads' rows, in head order. */
static void bwd_sum_groups(mgt_backend *be, const mgt_ssd *d, float *dB, float *dC, const float *part)
{
	const int T = d->L * d->b, hpg = d->nh / d->g, N = d->n;
	const size_t half = (size_t)d->b * d->nh * d->L * N;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * d->nh * N > CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		const int i = t / d->b, j = t % d->b;
		for (int gi = 0; gi < d->g; gi++) {
			float *ob = dB + (size_t)t * d->ld_bc + (size_t)gi * N, *oc = dC + (size_t)t * d->ld_bc + (size_t)gi * N;
			for (int n = 0; n < N; n++)
				ob[n] = oc[n] = 0.0f;
			for (int h = gi * hpg; h < (gi + 1) * hpg; h++) {
				const float *pb = part + (((size_t)j * d->nh + h) * d->L + i) * N;
				for (int n = 0; n < N; n++) {
					ob[n] += pb[n];
					oc[n] += pb[half + n];
				}
			}
		}
	}
}

void mgt_cpu_ssd_scan_bwd(mgt_backend *be, const mgt_ssd *d, float *dx, float *dB, float *dC, float *ddt_raw,
			  float *ddt_bias, float *dA_log, float *dD, const float *dy, const float *states,
			  const float *x, const float *B, const float *C, const float *dt_raw, const float *dt_bias,
			  const float *A_log, const float *D)
{
	if (d->L <= 0 || d->b <= 0 || d->nh <= 0 || d->p <= 0 || d->n <= 0)
		return;
	const int tasks = d->b * d->nh;
	const size_t half = (size_t)tasks * d->L * d->n, per = bwd_scratch(d);
	/* rounding buffer 4: the per-task scalar sums (3 doubles each), then dB's and dC's per-head rows */
	float *part = mgt_cpu_round_buf(be, 4, 6 * (size_t)tasks + 2 * half);
	float *scr = part ? cpu_row_bufs(be, per) : NULL;
	if (!scr)
		return;
	double *sums = (double *)part;
	float *pbc = part + 6 * (size_t)tasks;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)d->L * tasks * d->p * d->n > CPU_PAR_MIN && tasks > 1)
	for (int k = 0; k < tasks; k++) {
		const int j = k / d->nh, h = k % d->nh;
		ssd_view v = view_of(d, j, h, x, B, C, dt_raw, dt_bias, A_log);
		float *my = scr + (size_t)omp_get_thread_num() * per;
		const size_t PN = (size_t)d->p * d->n;
		bwd_state st = { .Sall = my, .R = my + ((size_t)Q + 1) * PN };
		st.bacc = st.R + PN;
		st.cacc = st.bacc + d->n;
		st.dt = st.cacc + d->n;
		st.a = st.dt + Q;
		st.lo = (int *)(st.a + Q);
		bwd_out o = { .dx = dx + (size_t)j * d->ld_x + (size_t)h * d->p, .ddt = ddt_raw + (size_t)j * d->ld_dt + h,
			      .pb = pbc + (size_t)k * d->L * d->n, .dy = dy, .D = D };
		o.pc = o.pb + half;
		bwd_task(&v, &st, &o, states);
		sums[3 * k] = st.dA;
		sums[3 * k + 1] = st.dbias;
		sums[3 * k + 2] = st.dD;
	}
	for (int h = 0; h < d->nh; h++) {
		double sa = 0, sb = 0, sd = 0;
		for (int j = 0; j < d->b; j++) {
			const double *s = sums + 3 * ((size_t)j * d->nh + h);
			sa += s[0];
			sb += s[1];
			sd += s[2];
		}
		dA_log[h] += (float)(sa * -exp((double)A_log[h]));
		ddt_bias[h] += (float)sb;
		dD[h] += (float)sd;
	}
	bwd_sum_groups(be, d, dB, dC, pbc);
}
