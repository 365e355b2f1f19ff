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
 * (cum restarts at each document start: only differences within a document and sums from the
 * chunk's start are used.)
 *
 * Backward: the same chunks in reverse, each from the forward's saved state entering it and the
 * gradient dSo of the state leaving it (carried from the chunk after), the chunk's products again
 * through sgemm (bwd_intra, bwd_inter, bwd_state_out, bwd_dt below give the formulas; the
 * sequential adjoint of megatron-hybrid-mamba.md section 3 is the float64 reference of
 * tests/unit/test_mamba.c, which this equals to fp32 rounding).
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
 * cum != NULL, the inclusive cumulative sums of dt A in double, restarted at each document start
 * (only differences within a document and sums from the chunk's start are used, so each
 * document's values depend on its own dt alone). */
static void chunk_dt(const ssd_view *v, int i0, int q, float *dt, int *lo, double *cum)
{
	const mgt_ssd *d = v->d;
	double acc = 0;
	for (int r = 0; r < q; r++) {
		const int i = i0 + r;
		dt[r] = softplusf_(v->dtr[(size_t)i * v->sdt] + v->dtb);
		lo[r] = d->seg_start ? d->seg_start[(size_t)i * d->b + v->j] : 0;
		if (lo[r] == i)
			acc = 0;
		acc += (double)dt[r] * v->A;
		if (cum)
			cum[r] = acc;
	}
}

/* e[s] = e^{cum[r] - cum[s]} for s0 <= s <= r (row r's own document), 0 for the other s < q: the
 * exponential of the double difference, rounded once (cpu_expf on the rounded difference measured
 * no faster here: the chunk's GEMMs dominate). */
static void decay_row(float *e, const double *cum, int r, int s0, int q)
{
	const double cr = cum[r];
	for (int s = 0; s < q; s++) {
		const bool in = s >= s0 && s <= r;
		e[s] = in ? (float)exp(cr - cum[s]) : 0.0f;
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
		decay_row(Yo, cum, r, lo[r] > i0 ? lo[r] - i0 : 0, q);
		for (int s = 0; s < q; s++)
			row[s] = Yo[s] != 0.0f ? row[s] * (Yo[s] * dt[s]) : 0.0f;
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

void mgt_cpu_ssd_scan_fwd_f32(mgt_backend *be, const mgt_ssd *d, float *y, float *states, const float *x, const float *B,
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

/* The backward of one chunk, given gy and dSo = dL/dS_out (the state leaving the chunk; 0 for the
 * last chunk).  With E[r][s] = e^{cum[r] - cum[s]} on the document mask, M = (C B^T) E dt:
 *   intra:  dx = M^T gy;  dM = gy X^T;  dCB = dM E dt: dC = dCB B, dB = dCB^T C;
 *           dt_s (explicit) += sum_r dM CB E;  dcum[r] += dM M, dcum[s] -= dM M
 *   inter (rows reading S_in, ex_r = e^{cum[r]}):  dC_r += ex_r S_in^T gy_r;
 *           dS_in = sum_r ex_r gy_r (x) C_r;  dcum[r] += ex_r gy_r . S_in C_r
 *   state (F_s = e^{cum[last] - cum[s]} dt_s on the last document):  dx_s += F_s dSo B_s;
 *           dB_s += F_s dSo^T x_s;  dt_s (explicit) += e^{..} k_s, k_s = <dSo, x_s (x) B_s>;
 *           dcum[last] += F_s k_s, dcum[s] -= F_s k_s;  when S_in reaches S_out:
 *           dS_in += e^{cum[last]} dSo, dcum[last] += e^{cum[last]} <dSo, S_in>
 *   dt:     g_s = sum_{r >= s} dcum[r] (cum is the inclusive sum of dt A):  d dt_s = explicit + A g_s,
 *           dA += dt_s g_s;  d dt_raw = d dt softplus'(dt_raw + dt_bias). */
typedef struct {
	double *cum, *dcum, *dde;     /* [Q] each: cumulative dt A, dL/dcum, explicit dL/d dt */
	float *dt;                    /* [Q] */
	int *lo;                      /* [Q] */
	float *CB, *E, *M, *dM;       /* [Q, Q] */
	float *Z, *U, *V;             /* [Q, n], [Q, n], [Q, p] */
	float *dSi, *dSo;             /* [p, n] */
	double dA, dbias, dD;         /* this task's sums */
} bwd_state;

/* Scratch per thread, in floats (the doubles first), rounded up to 16 floats. */
static size_t bwd_scratch(const mgt_ssd *d)
{
	const size_t f = 6 * (size_t)Q + 2 * (size_t)Q + 4 * (size_t)Q * Q + 2 * (size_t)Q * d->n + (size_t)Q * d->p +
			 2 * (size_t)d->p * d->n;
	return (f + 15) / 16 * 16;
}

static void bwd_bind(bwd_state *st, float *my, const mgt_ssd *d)
{
	memset(st, 0, sizeof *st);
	st->cum = (double *)my, st->dcum = st->cum + Q, st->dde = st->dcum + Q;
	float *f = my + 6 * Q;
	st->dt = f, st->lo = (int *)(f + Q);
	st->CB = f + 2 * Q, st->E = st->CB + (size_t)Q * Q, st->M = st->E + (size_t)Q * Q, st->dM = st->M + (size_t)Q * Q;
	st->Z = st->dM + (size_t)Q * Q, st->U = st->Z + (size_t)Q * d->n, st->V = st->U + (size_t)Q * d->n;
	st->dSi = st->V + (size_t)Q * d->p, st->dSo = st->dSi + (size_t)d->p * d->n;
}

/* One task's chunk: its rows of every input and output. */
typedef struct {
	int c, i0, q;
	const float *X, *Bc, *Cc, *G, *Sin; /* row strides v->sx, v->sbc, v->sbc, sg; S_in [p, n] */
	float *DX, *PB, *PC;                /* strides v->sx, n, n */
	size_t sg;
} bwd_chunk;

static void bwd_intra(const ssd_view *v, bwd_state *st, const bwd_chunk *k)
{
	const int N = v->d->n, P = v->d->p, q = k->q;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, q, N, 1.0f, k->Cc, (int)v->sbc, k->Bc, (int)v->sbc, 0.0f,
		    st->CB, Q);
	for (int r = 0; r < q; r++) {
		const size_t o = (size_t)r * Q;
		decay_row(st->E + o, st->cum, r, st->lo[r] > k->i0 ? st->lo[r] - k->i0 : 0, q);
		for (int s = 0; s < q; s++)
			st->M[o + s] = st->CB[o + s] * (st->E[o + s] * st->dt[s]);
	}
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q, P, q, 1.0f, st->M, Q, k->G, (int)k->sg, 0.0f, k->DX,
		    (int)v->sx);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, q, P, 1.0f, k->G, (int)k->sg, k->X, (int)v->sx, 0.0f,
		    st->dM, Q);
	for (int r = 0; r < q; r++)
		for (int s = 0; s < q; s++) { /* E is 0 off the mask: so is dCB there */
			const size_t o = (size_t)r * Q + s;
			const float e = st->dM[o] * st->E[o], t = e * st->CB[o];
			st->dde[s] += t;
			st->dcum[r] += (double)t * st->dt[s];
			st->dcum[s] -= (double)t * st->dt[s];
			st->dM[o] = e * st->dt[s];
		}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q, N, q, 1.0f, st->dM, Q, k->Bc, (int)v->sbc, 0.0f, k->PC,
		    N);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q, N, q, 1.0f, st->dM, Q, k->Cc, (int)v->sbc, 0.0f, k->PB, N);
}

/* Rows whose document began before the chunk read S_in: their dC, dcum and dS_in. */
static void bwd_inter(const ssd_view *v, bwd_state *st, const bwd_chunk *k)
{
	const int N = v->d->n, P = v->d->p;
	int nr = 0;
	while (k->c > 0 && nr < k->q && st->lo[nr] < k->i0)
		nr++;
	if (nr == 0) {
		memset(st->dSi, 0, (size_t)P * N * sizeof *st->dSi);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, N, P, 1.0f, k->G, (int)k->sg, k->Sin, N, 0.0f, st->Z, N);
	for (int r = 0; r < nr; r++) {
		const float ex = (float)exp(st->cum[r]), *z = st->Z + (size_t)r * N, *cr = k->Cc + (size_t)r * v->sbc;
		float *pc = k->PC + (size_t)r * N, *gs = st->V + (size_t)r * P;
		const float *g = k->G + (size_t)r * k->sg;
		double zc = 0;
		for (int n = 0; n < N; n++) {
			pc[n] += ex * z[n];
			zc += (double)z[n] * cr[n];
		}
		st->dcum[r] += ex * zc;
		for (int p = 0; p < P; p++)
			gs[p] = ex * g[p];
	}
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, P, N, nr, 1.0f, st->V, P, k->Cc, (int)v->sbc, 0.0f, st->dSi, N);
}

/* The chunk's end state's gradient dSo into dx, dB, dt, dcum and dS_in. */
static void bwd_state_out(const ssd_view *v, bwd_state *st, const bwd_chunk *k)
{
	const int N = v->d->n, P = v->d->p, q = k->q, last = q - 1;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, P, N, 1.0f, k->Bc, (int)v->sbc, st->dSo, N, 0.0f, st->V, P);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q, N, P, 1.0f, k->X, (int)v->sx, st->dSo, N, 0.0f, st->U, N);
	for (int s = 0; s < q; s++) {
		if (k->i0 + s < st->lo[last])
			continue;
		const double e = exp(st->cum[last] - st->cum[s]);
		const float F = (float)(e * st->dt[s]), *x = k->X + (size_t)s * v->sx, *vs = st->V + (size_t)s * P;
		const float *us = st->U + (size_t)s * N;
		float *dx = k->DX + (size_t)s * v->sx, *pb = k->PB + (size_t)s * N;
		double ks = 0;
		for (int p = 0; p < P; p++) {
			ks += (double)x[p] * vs[p];
			dx[p] += F * vs[p];
		}
		for (int n = 0; n < N; n++)
			pb[n] += F * us[n];
		st->dde[s] += e * ks;
		st->dcum[last] += F * ks;
		st->dcum[s] -= F * ks;
	}
	if (st->lo[last] < k->i0) {
		const float el = (float)exp(st->cum[last]);
		double dot = 0;
		for (size_t o = 0; o < (size_t)P * N; o++) {
			dot += (double)st->dSo[o] * k->Sin[o];
			st->dSi[o] += el * st->dSo[o];
		}
		st->dcum[last] += el * dot;
	}
}

/* Pointers of the backward's outputs (dB and dC: this task's per-head scratch rows). */
typedef struct {
	float *dx, *ddt, *pb, *pc; /* pb, pc: [L, n] of this (sequence, head) */
	const float *dy, *D;
} bwd_out;

/* D's terms, then dt from the explicit terms and the reverse cumulative sum of dcum. */
static void bwd_dt(const ssd_view *v, bwd_state *st, const bwd_chunk *k, const bwd_out *o, float Dh)
{
	const int P = v->d->p;
	double g = 0;
	for (int r = k->q - 1; r >= 0; r--) {
		const float *gy = k->G + (size_t)r * k->sg, *x = k->X + (size_t)r * v->sx;
		float *dx = k->DX + (size_t)r * v->sx;
		for (int p = 0; p < P; p++) {
			dx[p] += Dh * gy[p];
			st->dD += (double)gy[p] * x[p];
		}
		g += st->dcum[r];
		const int i = k->i0 + r;
		const double ddt = st->dde[r] + (double)v->A * g;
		st->dA += st->dt[r] * g;
		const float gdt = (float)ddt * dsoftplusf_(v->dtr[(size_t)i * v->sdt] + v->dtb);
		o->ddt[(size_t)i * v->sdt] = gdt;
		st->dbias += gdt;
		if (st->lo[r] == i) /* the cumulative sums restart here */
			g = 0;
	}
}

/* One (sequence, head): chunks from the last, carrying dSo. */
static void bwd_task(const ssd_view *v, bwd_state *st, const bwd_out *o, const float *states)
{
	const mgt_ssd *d = v->d;
	const size_t PN = (size_t)d->p * d->n;
	memset(st->dSo, 0, PN * sizeof *st->dSo);
	for (int c = v->nc - 1; c >= 0; c--) {
		bwd_chunk k = { .c = c, .i0 = c * Q, .sg = (size_t)d->b * d->nh * d->p };
		k.q = d->L - k.i0 < Q ? d->L - k.i0 : Q;
		chunk_dt(v, k.i0, k.q, st->dt, st->lo, st->cum);
		memset(st->dcum, 0, Q * sizeof *st->dcum);
		memset(st->dde, 0, Q * sizeof *st->dde);
		k.X = v->x + (size_t)k.i0 * v->sx, k.Bc = v->B + (size_t)k.i0 * v->sbc, k.Cc = v->C + (size_t)k.i0 * v->sbc;
		k.G = o->dy + ((size_t)k.i0 * d->b + v->j) * ((size_t)d->nh * d->p) + (size_t)v->h * d->p;
		k.Sin = states + (((size_t)v->j * v->nc + c) * d->nh + v->h) * PN;
		k.DX = o->dx + (size_t)k.i0 * v->sx, k.PB = o->pb + (size_t)k.i0 * d->n, k.PC = o->pc + (size_t)k.i0 * d->n;
		bwd_intra(v, st, &k);
		bwd_inter(v, st, &k);
		if (c < v->nc - 1)
			bwd_state_out(v, st, &k);
		bwd_dt(v, st, &k, o, o->D[v->h]);
		memcpy(st->dSo, st->dSi, PN * sizeof *st->dSo);
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

void mgt_cpu_ssd_scan_bwd_f32(mgt_backend *be, const mgt_ssd *d, float *dx, float *dB, float *dC, float *ddt_raw,
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
		bwd_state st;
		bwd_bind(&st, my, d);
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
