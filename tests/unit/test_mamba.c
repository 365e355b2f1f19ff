/* tests/unit/test_mamba.c: the CPU backend's Mamba-2 mixer ops (backend.h mamba_conv_fwd/bwd,
 * ssd_scan_fwd/bwd, mamba_gated_norm_fwd/bwd) against float64 references written here from the
 * math alone (megatron-hybrid-mamba.md sections 2 and 3): the causal conv1d + SiLU as its sum, the
 * scan as the plain sequential recurrence (not the chunked form the op runs), the gated norm
 * row by row, and their backwards as hand-derived float64 adjoints, themselves checked against
 * central finite differences of the float64 forwards.
 *
 * Tolerances come from fp32 rounding (eps = FLT_EPSILON = 2^-23, unit roundoff u = eps/2): an fp32
 * sum of m terms is within m*eps of the exact sum, relative to the sum of the terms' absolute
 * values (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1, gamma_m ~ m u, doubled
 * here for the products feeding it).  So every reference is computed twice, once as the math and
 * once with every input and constant replaced by its absolute value (the "magnitude" of each
 * result: the sum of the absolute values of its terms), and each check is
 *     |op - ref| <= c * eps * magnitude
 * with c the length of the longest chain of fp32 roundings behind that result, given at each
 * check.  The finite differences are float64 fourth-order central ones, (f(-2h) - 8 f(-h) + 8 f(h)
 * - f(2h)) / 12h with h = 1e-4 relative: truncation h^4 f^(5) / 30 (f^(5) up to |A|^5 ~ 1e6 through
 * the decays) plus rounding 1e-16 |f| / h, both below 1e-9 of the magnitudes here, against which
 * the float64 adjoints are held to 1e-7 (and the ops to their fp32 bounds).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/util.h"
#include "check.h"

#define EPS ((double)FLT_EPSILON)

static mgt_backend *be;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double unif(double lo, double hi)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * ((double)(rng >> 11) / 9007199254740992.0);
}

static void *zalloc(size_t n) { return calloc(n ? n : 1, 1); }

/* Fill f [n] with U(lo, hi) values and d with the same values in double. */
static void fill(float *f, double *d, size_t n, double lo, double hi)
{
	for (size_t k = 0; k < n; k++) {
		f[k] = (float)unif(lo, hi);
		if (d)
			d[k] = f[k];
	}
}

/* Packed documents (seg_start, as mgt_attn.seg_start): sequence j cuts its L positions into
 * documents of lengths {1, 3, 200} repeated (j % 3 == 0), {200, 1, 3} (j % 3 == 1), or keeps one
 * document (j % 3 == 2).  NULL when docs is false. */
static int32_t *make_seg(int L, int b, bool docs)
{
	if (!docs)
		return NULL;
	static const int lens[2][3] = { { 1, 3, 200 }, { 200, 1, 3 } };
	int32_t *seg = zalloc(sizeof *seg * (size_t)L * b);
	for (int j = 0; j < b; j++) {
		for (int pos = 0, k = 0; pos < L; k++) {
			const int len = j % 3 == 2 ? L : lens[j % 3][k % 3];
			for (int i = pos; i < pos + len && i < L; i++)
				seg[(size_t)i * b + j] = pos;
			pos += len;
		}
	}
	return seg;
}

static int lo_of(const int32_t *seg, int i, int b, int j) { return seg ? seg[(size_t)i * b + j] : 0; }

/* The largest |op - ref| / (eps * mag) over n elements of stride 1, and the largest |ref|. */
typedef struct {
	double worst, refmax;
} errstat;

static void err_acc(errstat *e, double op, double ref, double mag)
{
	const double r = fabs(op - ref) / (EPS * mag + 1e-300);
	if (r > e->worst || isnan(r))
		e->worst = isnan(r) ? INFINITY : r;
	if (fabs(ref) > e->refmax)
		e->refmax = fabs(ref);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }
static double silu(double v) { return v * sigm(v); }
static double dsilu(double v) { return sigm(v) * (1.0 + v * (1.0 - sigm(v))); }
/* The magnitude of silu'(v)'s terms, s (1 + |v| (1 - s)): silu' crosses 0 (near v = -1.28), where
 * its fp32 value keeps only this absolute accuracy. */
static double dsilu_mag(double v) { return sigm(v) * (1.0 + fabs(v) * (1.0 - sigm(v))); }

/* ======================= causal conv1d + SiLU ======================= */

typedef struct {
	int L, b, CD, K, ld;
	const int32_t *seg;
} conv_geom;

/* u[t, c] (pre-activation) and its magnitude, then y = silu(u) (ymag: |u| + umag bounds it). */
static void ref_conv_pre(const conv_geom *g, double *u, double *umag, const double *x, const double *w,
			 const double *bias)
{
	for (int t = 0; t < g->L * g->b; t++) {
		const int i = t / g->b, j = t % g->b;
		for (int c = 0; c < g->CD; c++) {
			double s = bias[c], m = fabs(bias[c]);
			for (int k = 0; k < g->K; k++) {
				const int ip = i - (g->K - 1) + k;
				if (ip < lo_of(g->seg, i, g->b, j))
					continue;
				const double xv = x[((size_t)ip * g->b + j) * g->ld + c];
				s += w[c * g->K + k] * xv;
				m += fabs(w[c * g->K + k] * xv);
			}
			u[(size_t)t * g->CD + c] = s;
			umag[(size_t)t * g->CD + c] = m;
		}
	}
}

/* Gradients of f = sum dy * silu(u) (dx [T, ld], dw [CD, K], db [CD], all +=) and, with
 * mag, the same sums of absolute values with g's magnitude covering the error of u (at most
 * (K + 1) eps umag, times |silu''| <= 0.5): gmag = |dy| (dsilu_mag(u) + 0.5 umag). */
static void ref_conv_bwd(const conv_geom *g, double *dx, double *dw, double *db, const double *dy, const double *x,
			 const double *w, const double *u, const double *umag, bool mag)
{
	for (int t = 0; t < g->L * g->b; t++) {
		const int i = t / g->b, j = t % g->b;
		for (int c = 0; c < g->CD; c++) {
			const size_t o = (size_t)t * g->CD + c;
			double gg = dy[o] * dsilu(u[o]);
			if (mag)
				gg = fabs(dy[o]) * (dsilu_mag(u[o]) + 0.5 * umag[o]);
			db[c] += gg;
			for (int k = 0; k < g->K; k++) {
				const int ip = i - (g->K - 1) + k;
				if (ip < lo_of(g->seg, i, g->b, j))
					continue;
				const size_t xo = ((size_t)ip * g->b + j) * g->ld + c;
				dw[c * g->K + k] += gg * (mag ? fabs(x[xo]) : x[xo]);
				dx[xo] += (mag ? fabs(w[c * g->K + k]) : w[c * g->K + k]) * gg;
			}
		}
	}
}

static double conv_loss(const conv_geom *g, const double *x, const double *w, const double *bias, const double *wy,
			double *u, double *um)
{
	ref_conv_pre(g, u, um, x, w, bias);
	double f = 0;
	for (size_t k = 0; k < (size_t)g->L * g->b * g->CD; k++)
		f += wy[k] * silu(u[k]);
	return f;
}

/* Central difference of conv_loss in v[k]. */
/* The fourth-order central difference of loss(ctx) in v[k]: steps -2h, -h, h, 2h with
 * h = 1e-4 max(1, |v[k]|); v[k] restored.  The three ops' FD checks below share it. */
static double fd5(double *v, size_t k, double (*loss)(const void *ctx), const void *ctx)
{
	const double keep = v[k], h = 1e-4 * fmax(1.0, fabs(keep));
	double f[4];
	for (int q = 0; q < 4; q++) {
		v[k] = keep + (q < 2 ? q - 2 : q - 1) * h; /* -2h, -h, h, 2h */
		f[q] = loss(ctx);
	}
	v[k] = keep;
	return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
}

typedef struct {
	const conv_geom *g;
	const double *x, *w, *bias, *wy;
	double *u, *um;
} conv_args;
static double conv_call(const void *c)
{
	const conv_args *a = c;
	return conv_loss(a->g, a->x, a->w, a->bias, a->wy, a->u, a->um);
}

static double conv_fd(const conv_geom *g, double *v, size_t k, double *x, double *w, double *bias, const double *wy,
		      double *u, double *um)
{
	const conv_args a = { g, x, w, bias, wy, u, um };
	return fd5(v, k, conv_call, &a);
}

/* One conv case: forward elementwise (c = K + 8: K + 1 terms, the SiLU's exp, division and
 * rounding); backward (c = K + 16: the dy silu' product, K + 1 terms of dx, dw and db summed in
 * double) against the float64 adjoint, and with fd the adjoint and the op against finite
 * differences in every element. */
static void test_conv(int L, int b, int CD, int K, bool docs, bool fd)
{
	conv_geom g = { L, b, CD, K, CD + 5, make_seg(L, b, docs) };
	const size_t T = (size_t)L * b, nx = T * g.ld, ny = T * CD;
	float *xf = zalloc(nx * 4), *wf = zalloc((size_t)CD * K * 4), *bf = zalloc((size_t)CD * 4), *yf = zalloc(ny * 4);
	float *dyf = zalloc(ny * 4), *dxf = zalloc(nx * 4), *dwf = zalloc((size_t)CD * K * 4), *dbf = zalloc((size_t)CD * 4);
	double *x = zalloc(nx * 8), *w = zalloc((size_t)CD * K * 8), *bias = zalloc((size_t)CD * 8), *dy = zalloc(ny * 8);
	fill(xf, x, nx, -2, 2);
	fill(wf, w, (size_t)CD * K, -0.5, 0.5);
	fill(bf, bias, CD, -0.5, 0.5);
	fill(dyf, dy, ny, -1, 1);
	for (size_t k = 0; k < nx; k++)
		dxf[k] = 7.0f; /* columns beyond CD must stay */
	for (int k = 0; k < CD * K; k++)
		dwf[k] = 0.25f; /* accumulated into */
	for (int k = 0; k < CD; k++)
		dbf[k] = -0.5f;
	be->ops->mamba_conv_fwd(be, yf, xf, g.ld, wf, bf, g.seg, L, b, CD, K, MGT_DT_F32);
	be->ops->mamba_conv_bwd(be, dxf, dwf, dbf, dyf, xf, g.ld, wf, bf, g.seg, L, b, CD, K, MGT_DT_F32);
	double *u = zalloc(ny * 8), *um = zalloc(ny * 8);
	ref_conv_pre(&g, u, um, x, w, bias);
	errstat ef = { 0 }, ex = { 0 }, ew = { 0 }, eb = { 0 };
	for (size_t k = 0; k < ny; k++)
		err_acc(&ef, yf[k], silu(u[k]), fabs(silu(u[k])) + 1.1 * um[k]);
	double *dx = zalloc(nx * 8), *dw = zalloc((size_t)CD * K * 8), *db = zalloc((size_t)CD * 8);
	double *mx = zalloc(nx * 8), *mw = zalloc((size_t)CD * K * 8), *mb = zalloc((size_t)CD * 8);
	ref_conv_bwd(&g, dx, dw, db, dy, x, w, u, um, false);
	ref_conv_bwd(&g, mx, mw, mb, dy, x, w, u, um, true);
	bool untouched = true;
	for (size_t t = 0; t < T; t++)
		for (int c = 0; c < g.ld; c++) {
			const size_t k = t * g.ld + c;
			if (c < CD)
				err_acc(&ex, dxf[k], dx[k], mx[k]);
			else
				untouched &= dxf[k] == 7.0f;
		}
	for (int k = 0; k < CD * K; k++)
		err_acc(&ew, (double)dwf[k] - 0.25, dw[k], mw[k] + 1.0);
	for (int k = 0; k < CD; k++)
		err_acc(&eb, (double)dbf[k] + 0.5, db[k], mb[k] + 1.0);
	const double cf = K + 8, cb = K + 16;
	CHECK(ef.worst <= cf, "conv L=%d b=%d CD=%d K=%d%s: forward within %.0f eps of the float64 sum (max %.2f)", L,
	      b, CD, K, docs ? " docs" : "", cf, ef.worst);
	CHECK(ex.worst <= cb && ew.worst <= cb && eb.worst <= cb && untouched,
	      "conv L=%d b=%d%s: dx, dw, db (accumulated) within %.0f eps of the float64 adjoint (max %.2f, %.2f, %.2f), "
	      "dx's other columns untouched",
	      L, b, docs ? " docs" : "", cb, ex.worst, ew.worst, eb.worst);
	if (fd) {
		double *wy = dy;
		errstat ax = { 0 }, ox = { 0 };
		for (size_t t = 0; t < T; t++)
			for (int c = 0; c < CD; c++) {
				const size_t k = t * g.ld + c;
				const double f = conv_fd(&g, x, k, x, w, bias, wy, u, um);
				err_acc(&ax, dx[k], f, (mx[k] + 1e-3) * 1e-7 / EPS);
				err_acc(&ox, dxf[k], f, mx[k] + 1e-3);
			}
		for (int k = 0; k < CD * K; k++) {
			const double f = conv_fd(&g, w, k, x, w, bias, wy, u, um);
			err_acc(&ax, dw[k], f, (mw[k] + 1e-3) * 1e-7 / EPS);
			err_acc(&ox, (double)dwf[k] - 0.25, f, mw[k] + 1.0);
		}
		for (int k = 0; k < CD; k++) {
			const double f = conv_fd(&g, bias, k, x, w, bias, wy, u, um);
			err_acc(&ax, db[k], f, (mb[k] + 1e-3) * 1e-7 / EPS);
			err_acc(&ox, (double)dbf[k] + 0.5, f, mb[k] + 1.0);
		}
		CHECK(ax.worst <= 1 && ox.worst <= cb,
		      "conv L=%d b=%d%s: every gradient element against central differences: float64 adjoint within 1e-7 "
		      "(max %.3g of it), op within %.0f eps (max %.2f)",
		      L, b, docs ? " docs" : "", ax.worst, cb, ox.worst);
	}
	free(u), free(um), free(dx), free(dw), free(db), free(mx), free(mw), free(mb);
	free(xf), free(wf), free(bf), free(yf), free(dyf), free(dxf), free(dwf), free(dbf);
	free(x), free(w), free(bias), free(dy), free((void *)g.seg);
}

/* ======================= gated RMSNorm over groups ======================= */

typedef struct {
	int T, di, g;
} norm_geom;

/* out = v r w, v = y silu(z), per group r = 1/sqrt(mean v^2 + 1e-5); returns r [T, g] too. */
static void ref_norm_fwd(const norm_geom *n, double *out, double *r, const double *y, const double *z, const double *w)
{
	const int gs = n->di / n->g;
	for (int t = 0; t < n->T; t++)
		for (int gi = 0; gi < n->g; gi++) {
			const size_t o = (size_t)t * n->di + (size_t)gi * gs;
			double ss = 0;
			for (int c = 0; c < gs; c++)
				ss += pow(y[o + c] * silu(z[o + c]), 2);
			const double rr = 1.0 / sqrt(ss / gs + 1e-5);
			r[(size_t)t * n->g + gi] = rr;
			for (int c = 0; c < gs; c++)
				out[o + c] = y[o + c] * silu(z[o + c]) * rr * w[gi * gs + c];
		}
}

/* Gradients of f = sum dout * out (dy, dz written; dw +=), and with mag the magnitudes:
 * dv = r (gg - vh m) with gg = dout w, vh = v r, m = mean(gg vh) -> r (|gg| + |vh| mean|gg vh|). */
static void ref_norm_bwd(const norm_geom *n, double *dy, double *dz, double *dw, const double *dout, const double *y,
			 const double *z, const double *w, const double *r, bool mag)
{
	const int gs = n->di / n->g;
	for (int t = 0; t < n->T; t++)
		for (int gi = 0; gi < n->g; gi++) {
			const size_t o = (size_t)t * n->di + (size_t)gi * gs;
			const double rr = r[(size_t)t * n->g + gi];
			double m = 0;
			for (int c = 0; c < gs; c++) {
				const double a = dout[o + c] * w[gi * gs + c] * y[o + c] * silu(z[o + c]) * rr;
				m += mag ? fabs(a) : a;
			}
			m /= gs;
			for (int c = 0; c < gs; c++) {
				const double v = y[o + c] * silu(z[o + c]), gg = dout[o + c] * w[gi * gs + c];
				double dv = rr * (gg - v * rr * m);
				if (mag)
					dv = rr * (fabs(gg) + fabs(v) * rr * m);
				dw[gi * gs + c] += mag ? fabs(dout[o + c] * v * rr) : dout[o + c] * v * rr;
				dy[o + c] = dv * (mag ? fabs(silu(z[o + c])) : silu(z[o + c]));
				dz[o + c] = dv * (mag ? fabs(y[o + c]) * dsilu_mag(z[o + c]) : y[o + c] * dsilu(z[o + c]));
			}
		}
}

static double norm_loss(const norm_geom *n, const double *y, const double *z, const double *w, const double *wo,
			double *out, double *r)
{
	ref_norm_fwd(n, out, r, y, z, w);
	double f = 0;
	for (size_t k = 0; k < (size_t)n->T * n->di; k++)
		f += wo[k] * out[k];
	return f;
}

typedef struct {
	const norm_geom *n;
	const double *y, *z, *w, *wo;
	double *out, *r;
} norm_args;
static double norm_call(const void *c)
{
	const norm_args *a = c;
	return norm_loss(a->n, a->y, a->z, a->w, a->wo, a->out, a->r);
}

static double norm_fd(const norm_geom *n, double *v, size_t k, const double *y, const double *z, const double *w,
		      const double *wo, double *out, double *r)
{
	const norm_args a = { n, y, z, w, wo, out, r };
	return fd5(v, k, norm_call, &a);
}

/* One norm case: forward (c = 12: v's two roundings and the SiLU's, r's sqrt and division, two
 * products), backward (c = gs + 24: r's error, the group mean of gs products, the SiLU' terms)
 * against the float64 adjoint and, with fd, against central differences in every element. */
static void test_norm(int T, int di, int g, bool fd)
{
	norm_geom n = { T, di, g };
	const size_t m = (size_t)T * di;
	const int gs = di / g;
	float *yf = zalloc(m * 4), *zf = zalloc(m * 4), *wf = zalloc((size_t)di * 4), *of = zalloc(m * 4);
	float *rf = zalloc((size_t)T * g * 4), *dof = zalloc(m * 4), *dyf = zalloc(m * 4), *dzf = zalloc(m * 4);
	float *dwf = zalloc((size_t)di * 4);
	double *y = zalloc(m * 8), *z = zalloc(m * 8), *w = zalloc((size_t)di * 8), *dout = zalloc(m * 8);
	fill(yf, y, m, -2, 2);
	fill(zf, z, m, -4, 4);
	fill(wf, w, di, 0.5, 1.5);
	fill(dof, dout, m, -1, 1);
	for (int c = 0; c < di; c++)
		dwf[c] = 1.0f;
	be->ops->mamba_gated_norm_fwd(be, of, rf, yf, zf, di, wf, T, di, g, 1e-5f, MGT_DT_F32);
	be->ops->mamba_gated_norm_bwd(be, dyf, dzf, dwf, dof, yf, zf, di, wf, rf, T, di, g, MGT_DT_F32);
	double *out = zalloc(m * 8), *r = zalloc((size_t)T * g * 8);
	ref_norm_fwd(&n, out, r, y, z, w);
	errstat eo = { 0 }, er = { 0 }, ey = { 0 }, ez = { 0 }, ew = { 0 };
	for (size_t k = 0; k < m; k++)
		err_acc(&eo, of[k], out[k], fabs(out[k]));
	for (size_t k = 0; k < (size_t)T * g; k++)
		err_acc(&er, rf[k], r[k], r[k]);
	double *dy = zalloc(m * 8), *dz = zalloc(m * 8), *dw = zalloc((size_t)di * 8);
	double *my = zalloc(m * 8), *mz = zalloc(m * 8), *mw = zalloc((size_t)di * 8);
	ref_norm_bwd(&n, dy, dz, dw, dout, y, z, w, r, false);
	ref_norm_bwd(&n, my, mz, mw, dout, y, z, w, r, true);
	for (size_t k = 0; k < m; k++) {
		err_acc(&ey, dyf[k], dy[k], my[k]);
		err_acc(&ez, dzf[k], dz[k], mz[k]);
	}
	for (int c = 0; c < di; c++)
		err_acc(&ew, (double)dwf[c] - 1.0, dw[c], mw[c] + 2.0);
	const double cf = 12, cb = gs + 24;
	CHECK(eo.worst <= cf && er.worst <= cf,
	      "gated norm T=%d di=%d g=%d: out and rstd within %.0f eps of float64 (max %.2f, %.2f)", T, di, g, cf,
	      eo.worst, er.worst);
	CHECK(ey.worst <= cb && ez.worst <= cb && ew.worst <= cb,
	      "gated norm T=%d di=%d g=%d: dy, dz, dw (accumulated) within %.0f eps of the float64 adjoint (max %.2f, "
	      "%.2f, %.2f)",
	      T, di, g, cb, ey.worst, ez.worst, ew.worst);
	if (fd) {
		errstat ax = { 0 }, ox = { 0 };
		for (size_t k = 0; k < m; k++) {
			double f = norm_fd(&n, y, k, y, z, w, dout, out, r);
			err_acc(&ax, dy[k], f, (my[k] + 1e-3) * 1e-7 / EPS);
			err_acc(&ox, dyf[k], f, my[k] + 1e-3);
			f = norm_fd(&n, z, k, y, z, w, dout, out, r);
			err_acc(&ax, dz[k], f, (mz[k] + 1e-3) * 1e-7 / EPS);
			err_acc(&ox, dzf[k], f, mz[k] + 1e-3);
		}
		for (int c = 0; c < di; c++) {
			const double f = norm_fd(&n, w, c, y, z, w, dout, out, r);
			err_acc(&ax, dw[c], f, (mw[c] + 1e-3) * 1e-7 / EPS);
			err_acc(&ox, (double)dwf[c] - 1.0, f, mw[c] + 2.0);
		}
		CHECK(ax.worst <= 1 && ox.worst <= cb,
		      "gated norm T=%d di=%d g=%d: every gradient element against central differences: float64 adjoint "
		      "within 1e-7 (max %.3g of it), op within %.0f eps (max %.2f)",
		      T, di, g, ax.worst, cb, ox.worst);
	}
	free(out), free(r), free(dy), free(dz), free(dw), free(my), free(mz), free(mw);
	free(yf), free(zf), free(wf), free(of), free(rf), free(dof), free(dyf), free(dzf), free(dwf);
	free(y), free(z), free(w), free(dout);
}

/* ======================= the selective scan ======================= */

/* A scan's inputs: xbc [T, ldc] holding x (nh*p columns), B, C (g*n each) then 3 unused columns;
 * dt_raw at columns off .. off+nh-1 of dtr [T, ld_dt]; fp32 for the op, float64 copies for the
 * references (the same values). */
typedef struct {
	mgt_ssd d;
	int CD, ldc, off;
	size_t T;
	float *xbc, *dtr, *dtb, *alog, *D;
	double *xd, *dtrd, *dtbd, *alogd, *Dd;
} scan_in;

static void scan_setup(scan_in *s, int L, int b, int nh, int g, int p, int n, bool docs, bool bigdt)
{
	memset(s, 0, sizeof *s);
	s->CD = nh * p + 2 * g * n;
	s->ldc = s->CD + 3;
	s->off = 2;
	s->T = (size_t)L * b;
	s->d = (mgt_ssd){ .L = L, .b = b, .nh = nh, .p = p, .g = g, .n = n, .ld_x = s->ldc, .ld_bc = s->ldc,
			  .ld_dt = nh + 5, .seg_start = make_seg(L, b, docs) };
	const size_t nx = s->T * s->ldc, nd = s->T * s->d.ld_dt;
	s->xbc = zalloc(nx * 4), s->dtr = zalloc(nd * 4), s->dtb = zalloc((size_t)nh * 4);
	s->alog = zalloc((size_t)nh * 4), s->D = zalloc((size_t)nh * 4);
	s->xd = zalloc(nx * 8), s->dtrd = zalloc(nd * 8), s->dtbd = zalloc((size_t)nh * 8);
	s->alogd = zalloc((size_t)nh * 8), s->Dd = zalloc((size_t)nh * 8);
	fill(s->xbc, s->xd, nx, -1, 1);
	fill(s->dtr, s->dtrd, nd, -2, 2);
	for (int h = 0; h < nh; h++) {
		const bool big = bigdt && h % 3 == 2; /* softplus's v > 20 branch: dt = v */
		s->dtb[h] = (float)(big ? unif(-0.5, 0.5) : unif(-3, -1));
		s->alog[h] = (float)log(unif(1, 16)); /* Megatron's A_log init */
		s->D[h] = (float)unif(0.5, 1.5);
		s->dtbd[h] = s->dtb[h], s->alogd[h] = s->alog[h], s->Dd[h] = s->D[h];
		for (size_t t = 0; big && t < s->T; t++) {
			float *v = &s->dtr[t * s->d.ld_dt + s->off + h];
			*v = (float)unif(21, 24);
			s->dtrd[t * s->d.ld_dt + s->off + h] = *v;
		}
	}
}

static void scan_free(scan_in *s)
{
	free(s->xbc), free(s->dtr), free(s->dtb), free(s->alog), free(s->D);
	free(s->xd), free(s->dtrd), free(s->dtbd), free(s->alogd), free(s->Dd);
	free((void *)s->d.seg_start);
}

/* The float64 references read these (the scan_in's copies, or perturbed ones). */
typedef struct {
	const double *x, *dtr, *dtb, *alog, *D;
} scan_vals;

static scan_vals vals_of(const scan_in *s) { return (scan_vals){ s->xd, s->dtrd, s->dtbd, s->alogd, s->Dd }; }

static double softplus(double v) { return v > 20 ? v : log1p(exp(v)); }

/* One position's dt and decay for head h. */
static void ref_dt(const scan_in *s, const scan_vals *v, size_t t, int h, double *dt, double *a, double *A, double *vv)
{
	*vv = v->dtr[t * s->d.ld_dt + s->off + h] + v->dtb[h];
	*dt = softplus(*vv);
	*A = -exp(v->alog[h]);
	*a = exp(*dt * *A);
}

/* The plain recurrence, per sequence j and head h: S = a S + dt x (x) B (0 at each document
 * start), y = S . C + D x.  mag: every x, B, C, D by its absolute value (the decays as they are),
 * giving the magnitudes.  Writes y [T, nh*p] and, when st != NULL, every state
 * st[((j nh + h) L + i) p n ..]. */
static void ref_scan_fwd(const scan_in *s, const scan_vals *v, double *y, double *st, bool mag)
{
	const mgt_ssd *d = &s->d;
	const int P = d->p, N = d->n, hpg = d->nh / d->g;
	double *S = zalloc((size_t)P * N * 8);
	for (int j = 0; j < d->b; j++)
		for (int h = 0; h < d->nh; h++) {
			const int gi = h / hpg;
			for (int i = 0; i < d->L; i++) {
				const size_t t = (size_t)i * d->b + j;
				const double *x = v->x + t * s->ldc + h * P, *B = v->x + t * s->ldc + d->nh * P + gi * N;
				const double *C = B + d->g * N;
				double dt, a, A, vv;
				ref_dt(s, v, t, h, &dt, &a, &A, &vv);
				if (lo_of(d->seg_start, i, d->b, j) == i)
					memset(S, 0, (size_t)P * N * 8);
				for (int p = 0; p < P; p++) {
					double acc = (mag ? fabs(v->D[h] * x[p]) : v->D[h] * x[p]);
					for (int q = 0; q < N; q++) {
						double *sv = &S[p * N + q];
						*sv = a * *sv + dt * (mag ? fabs(x[p] * B[q]) : x[p] * B[q]);
						acc += mag ? *sv * fabs(C[q]) : *sv * C[q];
					}
					y[t * d->nh * P + h * P + p] = acc;
				}
				if (st)
					memcpy(st + (((size_t)j * d->nh + h) * d->L + i) * P * N, S, (size_t)P * N * 8);
			}
		}
	free(S);
}

/* Gradients of the scan (section 3's sequential adjoint, in float64): gx [T, ldc] (x columns
 * written, B and C +=), gdtr [T, ld_dt] (written), gdtb, galog, gD (+=), from gy [T, nh*p] and the
 * forward's states st.  mag: the magnitudes (absolute values of every term; st from the mag
 * forward). */
typedef struct {
	double *gx, *gdtr, *gdtb, *galog, *gD;
} scan_grads;

static void ref_scan_bwd_head(const scan_in *s, const scan_vals *v, const double *gy, const double *st,
			      const scan_grads *o, int j, int h, bool mag)
{
	const mgt_ssd *d = &s->d;
	const int P = d->p, N = d->n, gi = h / (d->nh / d->g);
	double *R = zalloc((size_t)P * N * 8), *dS = zalloc((size_t)P * N * 8), dA = 0;
#define M(e) (mag ? fabs(e) : (e))
	for (int i = d->L - 1; i >= 0; i--) {
		const size_t t = (size_t)i * d->b + j;
		const double *x = v->x + t * s->ldc + h * P, *B = v->x + t * s->ldc + d->nh * P + gi * N;
		const double *C = B + d->g * N, *g = gy + t * d->nh * P + h * P;
		const bool reset = lo_of(d->seg_start, i, d->b, j) == i;
		const double *Si = st + (((size_t)j * d->nh + h) * d->L + i) * P * N, *Sp = reset ? NULL : Si - P * N;
		double *gB = o->gx + t * s->ldc + d->nh * P + gi * N, *gC = gB + d->g * N, *gxr = o->gx + t * s->ldc + h * P;
		double dt, a, A, vv, da = 0, ddt = 0;
		ref_dt(s, v, t, h, &dt, &a, &A, &vv);
		for (int p = 0; p < P; p++) {
			double sb = 0;
			for (int q = 0; q < N; q++) {
				const double ds = R[p * N + q] + M(g[p] * C[q]);
				dS[p * N + q] = ds;
				gC[q] += M(Si[p * N + q] * g[p]);
				gB[q] += dt * ds * M(x[p]);
				sb += ds * M(B[q]);
				da += Sp ? ds * Sp[p * N + q] : 0;
				ddt += ds * M(x[p] * B[q]);
			}
			gxr[p] = M(v->D[h] * g[p]) + dt * sb;
			o->gD[h] += M(g[p] * x[p]);
		}
		ddt += da * a * M(A);
		dA += da * a * dt;
		for (int k = 0; k < P * N; k++)
			R[k] = reset ? 0 : a * dS[k];
		const double gd = ddt * (vv > 20 ? 1 : sigm(vv));
		o->gdtr[t * d->ld_dt + s->off + h] = gd;
		o->gdtb[h] += gd;
	}
	o->galog[h] += dA * M(-exp(v->alog[h]));
#undef M
	free(R), free(dS);
}

static void ref_scan_bwd(const scan_in *s, const scan_vals *v, const double *gy, const double *st,
			 const scan_grads *o, bool mag)
{
	for (int j = 0; j < s->d.b; j++)
		for (int h = 0; h < s->d.nh; h++)
			ref_scan_bwd_head(s, v, gy, st, o, j, h, mag);
}

/* The op's outputs for one scan; gradient buffers prefilled (7: must stay where not written,
 * 0.5: accumulated into). */
typedef struct {
	float *y, *st, *gx, *gdtr, *gdtb, *galog, *gD;
} scan_out;

static void op_scan(mgt_backend *bk, const scan_in *s, const float *gy, scan_out *o)
{
	const mgt_ssd *d = &s->d;
	const size_t nx = s->T * s->ldc, nd = s->T * d->ld_dt, dc = (size_t)d->nh * d->p, bc = dc + (size_t)d->g * d->n;
	o->y = zalloc(s->T * dc * 4), o->st = zalloc(mgt_ssd_states_floats(d) * 4);
	o->gx = zalloc(nx * 4), o->gdtr = zalloc(nd * 4);
	o->gdtb = zalloc((size_t)d->nh * 4), o->galog = zalloc((size_t)d->nh * 4), o->gD = zalloc((size_t)d->nh * 4);
	for (size_t k = 0; k < nx; k++)
		o->gx[k] = 7.0f;
	for (size_t k = 0; k < nd; k++)
		o->gdtr[k] = 7.0f;
	for (int h = 0; h < d->nh; h++)
		o->gdtb[h] = o->galog[h] = o->gD[h] = 0.5f;
	bk->ops->ssd_scan_fwd(bk, d, o->y, o->st, s->xbc, s->xbc + dc, s->xbc + bc, s->dtr + s->off, s->dtb, s->alog,
			      s->D, MGT_DT_F32);
	bk->ops->ssd_scan_bwd(bk, d, o->gx, o->gx + dc, o->gx + bc, o->gdtr + s->off, o->gdtb, o->galog, o->gD, gy, o->st,
			      s->xbc, s->xbc + dc, s->xbc + bc, s->dtr + s->off, s->dtb, s->alog, s->D, MGT_DT_F32);
}

static void out_free(scan_out *o)
{
	free(o->y), free(o->st), free(o->gx), free(o->gdtr), free(o->gdtb), free(o->galog), free(o->gD);
}

static double scan_loss(const scan_in *s, const double *gy, double *y)
{
	scan_vals v = vals_of(s);
	ref_scan_fwd(s, &v, y, NULL, false);
	double f = 0;
	for (size_t k = 0; k < s->T * s->d.nh * s->d.p; k++)
		f += gy[k] * y[k];
	return f;
}

typedef struct {
	const scan_in *s;
	const double *gy;
	double *y;
} scan_args;
static double scan_call(const void *c)
{
	const scan_args *a = c;
	return scan_loss(a->s, a->gy, a->y);
}

static double scan_fd(const scan_in *s, double *v, size_t k, const double *gy, double *y)
{
	const scan_args a = { s, gy, y };
	return fd5(v, k, scan_call, &a);
}

/* The float64 gradients and their magnitudes. */
typedef struct {
	scan_grads g, m;
} scan_ref;

static void grads_alloc(scan_grads *g, const scan_in *s)
{
	g->gx = zalloc(s->T * s->ldc * 8), g->gdtr = zalloc(s->T * s->d.ld_dt * 8);
	g->gdtb = zalloc((size_t)s->d.nh * 8), g->galog = zalloc((size_t)s->d.nh * 8), g->gD = zalloc((size_t)s->d.nh * 8);
}

static void grads_free(scan_grads *g) { free(g->gx), free(g->gdtr), free(g->gdtb), free(g->galog), free(g->gD); }

/* Every gradient element of the op against ref (and, fd, both against central differences):
 * worst ratios into e (op vs ref), fa (float64 adjoint vs fd, units of 1e-7), fo (op vs fd). */
typedef struct {
	errstat e, fa, fo;
	bool untouched;
} scan_gcmp;

static void cmp_one(scan_gcmp *c, double op, double ref, double mag, const double *fd)
{
	err_acc(&c->e, op, ref, mag);
	if (fd) {
		err_acc(&c->fa, ref, *fd, (mag + 1e-3) * 1e-7 / EPS);
		err_acc(&c->fo, op, *fd, mag + 1e-3);
	}
}

static void scan_cmp_grads(scan_gcmp *c, scan_in *s, const scan_out *o, const scan_ref *r, const double *gy, bool fd)
{
	const mgt_ssd *d = &s->d;
	double *y = zalloc(s->T * d->nh * d->p * 8), f;
	c->untouched = true;
	for (size_t k = 0; k < s->T * s->ldc; k++) {
		if ((int)(k % s->ldc) >= s->CD) {
			c->untouched &= o->gx[k] == 7.0f;
			continue;
		}
		if (fd)
			f = scan_fd(s, s->xd, k, gy, y);
		cmp_one(c, o->gx[k], r->g.gx[k], r->m.gx[k], fd ? &f : NULL);
	}
	for (size_t k = 0; k < s->T * d->ld_dt; k++) {
		const int col = (int)(k % d->ld_dt) - s->off;
		if (col < 0 || col >= d->nh) {
			c->untouched &= o->gdtr[k] == 7.0f;
			continue;
		}
		if (fd)
			f = scan_fd(s, s->dtrd, k, gy, y);
		cmp_one(c, o->gdtr[k], r->g.gdtr[k], r->m.gdtr[k], fd ? &f : NULL);
	}
	for (int h = 0; h < d->nh; h++) {
		/* accumulated into 0.5: the op's sum is rounded once more, at 0.5 + ... (the +1 below) */
		if (fd)
			f = scan_fd(s, s->dtbd, h, gy, y);
		cmp_one(c, (double)o->gdtb[h] - 0.5, r->g.gdtb[h], r->m.gdtb[h] + 1, fd ? &f : NULL);
		if (fd)
			f = scan_fd(s, s->alogd, h, gy, y);
		cmp_one(c, (double)o->galog[h] - 0.5, r->g.galog[h], r->m.galog[h] + 1, fd ? &f : NULL);
		if (fd)
			f = scan_fd(s, s->Dd, h, gy, y);
		cmp_one(c, (double)o->gD[h] - 0.5, r->g.gD[h], r->m.gD[h] + 1, fd ? &f : NULL);
	}
	free(y);
}

/* One scan case.  Forward: c_f = nc (Q + n + 8) + n + 16 -- within a chunk the longest fp32
 * chain is C.B (n terms), its decay and dt factors, the Q-term intra-chunk sum and the inter-chunk
 * C.S (n terms), and the carried state gathers one chunk sum (Q terms) and a scaling per chunk
 * crossed (nc chunks); decays enter as exp of float64 sums, rounded once.  Backward (the op's
 * chunked gradient): c_b = 3 L + c_f + p + n + 16 -- each chunk's gradients are fp32 sums of q
 * (the chunk), n (C.B, dSo.B) and p (gy.x) terms, the state's gradient is carried over the nc
 * chunks gathering one chunk sum each (together below 3 L for these shapes), on top of the
 * forward's saved-state error c_f. */
static void test_scan(int L, int b, int nh, int g, int p, int n, bool docs, bool bigdt, bool fd)
{
	scan_in s;
	scan_setup(&s, L, b, nh, g, p, n, docs, bigdt);
	const size_t ny = s.T * nh * p;
	const int nc = (L + MGT_SSD_CHUNK - 1) / MGT_SSD_CHUNK;
	float *gyf = zalloc(ny * 4);
	double *gy = zalloc(ny * 8);
	fill(gyf, gy, ny, -1, 1);
	scan_out o;
	op_scan(be, &s, gyf, &o);
	double *y = zalloc(ny * 8), *ym = zalloc(ny * 8);
	double *st = zalloc(s.T * nh * p * n * 8), *stm = zalloc(s.T * nh * p * n * 8);
	scan_vals v = vals_of(&s);
	ref_scan_fwd(&s, &v, y, st, false);
	ref_scan_fwd(&s, &v, ym, stm, true);
	errstat ef = { 0 };
	for (size_t k = 0; k < ny; k++)
		err_acc(&ef, o.y[k], y[k], ym[k]);
	scan_ref r;
	grads_alloc(&r.g, &s);
	grads_alloc(&r.m, &s);
	ref_scan_bwd(&s, &v, gy, st, &r.g, false);
	ref_scan_bwd(&s, &v, gy, stm, &r.m, true);
	scan_gcmp c = { 0 };
	scan_cmp_grads(&c, &s, &o, &r, gy, fd);
	const double cf = nc * (MGT_SSD_CHUNK + n + 8) + n + 16, cb = 3.0 * L + cf + p + n + 16;
	char what[160];
	snprintf(what, sizeof what, "scan L=%d b=%d nh=%d g=%d p=%d n=%d%s%s", L, b, nh, g, p, n, docs ? " docs" : "",
		 bigdt ? " dt>20" : "");
	CHECK(ef.worst <= cf, "%s: chunked forward within %.0f eps of the float64 recurrence (max %.2f; |y| up to %.3g)",
	      what, cf, ef.worst, ef.refmax);
	CHECK(c.e.worst <= cb && c.untouched,
	      "%s: dx, dB, dC, ddt_raw, and ddt_bias, dA_log, dD accumulated, within %.0f eps of the float64 adjoint "
	      "(max %.2f), other columns untouched",
	      what, cb, c.e.worst);
	if (fd)
		CHECK(c.fa.worst <= 1 && c.fo.worst <= cb,
		      "%s: every input's gradient against central differences: float64 adjoint within 1e-7 (max %.3g of "
		      "it), op within %.0f eps (max %.2f)",
		      what, c.fa.worst, cb, c.fo.worst);
	grads_free(&r.g), grads_free(&r.m);
	free(y), free(ym), free(st), free(stm), free(gy), free(gyf);
	out_free(&o);
	scan_free(&s);
}

/* ======================= packed documents, threads, the table ======================= */

/* Rows (i, j) outside [i0, i1] x {j0} of a [L*b, w] array (leading dimension ld, columns c0..c0+w-1)
 * that differ bitwise between a and b; and whether any inside differ. */
static size_t diff_outside(const float *a, const float *b, int L, int nb, int ld, int c0, int w, int j0, int i0,
			   int i1, bool *inside)
{
	size_t bad = 0;
	for (int i = 0; i < L; i++)
		for (int j = 0; j < nb; j++)
			for (int c = c0; c < c0 + w; c++) {
				const size_t k = ((size_t)i * nb + j) * ld + c;
				const bool same = memcmp(&a[k], &b[k], 4) == 0;
				if (j == j0 && i >= i0 && i <= i1)
					*inside |= !same;
				else
					bad += !same;
			}
	return bad;
}

/* Changing every input of one document (sequence 0, positions 4..203: it crosses the chunk
 * boundary at 128) changes no output and no activation gradient outside it, bit for bit: the
 * scan's state and the conv's history restart at every document start. */
static void test_docs_isolated(void)
{
	scan_in s;
	scan_setup(&s, 300, 2, 4, 1, 8, 8, true, true);
	const mgt_ssd *d = &s.d;
	const int i0 = d->seg_start[150 * d->b], i1 = 203, dc = d->nh * d->p;
	CHECK(i0 == 4, "the document around position 150 of sequence 0 starts at 4 (%d)", i0);
	const size_t ny = s.T * dc;
	float *gy = zalloc(ny * 4);
	fill(gy, NULL, ny, -1, 1);
	scan_out a, b2;
	op_scan(be, &s, gy, &a);
	/* conv over the same xbc rows, with K = 4 */
	const int CD = s.CD, K = 4;
	float *w = zalloc((size_t)CD * K * 4), *bias = zalloc((size_t)CD * 4), *dy = zalloc(s.T * CD * 4);
	fill(w, NULL, (size_t)CD * K, -0.5, 0.5), fill(bias, NULL, CD, -0.5, 0.5), fill(dy, NULL, s.T * CD, -1, 1);
	float *cy[2], *cdx[2], *dw = zalloc((size_t)CD * K * 4), *db = zalloc((size_t)CD * 4);
	for (int k = 0; k < 2; k++) {
		cy[k] = zalloc(s.T * CD * 4), cdx[k] = zalloc(s.T * s.ldc * 4);
		if (k == 1) { /* new values for the document's rows */
			for (int i = i0; i <= i1; i++) {
				fill(s.xbc + (size_t)i * d->b * s.ldc, NULL, (size_t)CD, -1, 1);
				fill(s.dtr + (size_t)i * d->b * d->ld_dt + s.off, NULL, (size_t)d->nh, -2, 2);
			}
			op_scan(be, &s, gy, &b2);
		}
		be->ops->mamba_conv_fwd(be, cy[k], s.xbc, s.ldc, w, bias, d->seg_start, d->L, d->b, CD, K, MGT_DT_F32);
		be->ops->mamba_conv_bwd(be, cdx[k], dw, db, dy, s.xbc, s.ldc, w, bias, d->seg_start, d->L, d->b, CD, K, MGT_DT_F32);
	}
	bool in_y = false, in_g = false, in_c = false;
	size_t bad = diff_outside(a.y, b2.y, d->L, d->b, dc, 0, dc, 0, i0, i1, &in_y);
	bad += diff_outside(a.gx, b2.gx, d->L, d->b, s.ldc, 0, CD, 0, i0, i1, &in_g);
	bad += diff_outside(a.gdtr, b2.gdtr, d->L, d->b, d->ld_dt, s.off, d->nh, 0, i0, i1, &in_g);
	CHECK(bad == 0 && in_y && in_g,
	      "scan: new inputs in one document (positions %d..%d) change its y and gradients and nothing outside it "
	      "(%zu elements differ outside)",
	      i0, i1, bad);
	bad = diff_outside(cy[0], cy[1], d->L, d->b, CD, 0, CD, 0, i0, i1, &in_c);
	bad += diff_outside(cdx[0], cdx[1], d->L, d->b, s.ldc, 0, CD, 0, i0, i1, &in_c);
	CHECK(bad == 0 && in_c, "conv: the same for its output and dx (%zu elements differ outside)", bad);
	for (int k = 0; k < 2; k++)
		free(cy[k]), free(cdx[k]);
	free(w), free(bias), free(dy), free(dw), free(db), free(gy);
	out_free(&a), out_free(&b2);
	scan_free(&s);
}

static bool same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* 1 and 3 threads give the same bits for every output of the scan (tasks are whole heads, sums in
 * fixed order), the conv and the norm (column-split weight gradients). */
static void test_threads(void)
{
	mgt_backend *b1 = mgt_backend_cpu_create(1), *b3 = mgt_backend_cpu_create(3);
	scan_in s;
	scan_setup(&s, 300, 3, 8, 2, 8, 16, true, true);
	const mgt_ssd *d = &s.d;
	const size_t ny = s.T * d->nh * d->p, nx = s.T * s.ldc, nh = (size_t)d->nh;
	float *gy = zalloc(ny * 4);
	fill(gy, NULL, ny, -1, 1);
	scan_out o1, o3;
	op_scan(b1, &s, gy, &o1);
	op_scan(b3, &s, gy, &o3);
	CHECK(same(o1.y, o3.y, ny * 4) && same(o1.st, o3.st, mgt_ssd_states_floats(d) * 4) && same(o1.gx, o3.gx, nx * 4) &&
		      same(o1.gdtr, o3.gdtr, s.T * d->ld_dt * 4) && same(o1.gdtb, o3.gdtb, nh * 4) &&
		      same(o1.galog, o3.galog, nh * 4) && same(o1.gD, o3.gD, nh * 4),
	      "scan: 1 and 3 threads give the same bits (y, states, every gradient)");
	const int CD = s.CD, K = 4;
	float *w = zalloc((size_t)CD * K * 4), *bias = zalloc((size_t)CD * 4), *dy = zalloc(s.T * CD * 4);
	fill(w, NULL, (size_t)CD * K, -0.5, 0.5), fill(bias, NULL, CD, -0.5, 0.5), fill(dy, NULL, s.T * CD, -1, 1);
	float *y[2], *dx[2], *dw[2], *db[2], *no[2], *nr[2], *ndy[2], *ndz[2], *ndw[2];
	mgt_backend *bk[2] = { b1, b3 };
	const int T = (int)s.T, di = d->nh * d->p;
	for (int k = 0; k < 2; k++) {
		y[k] = zalloc(s.T * CD * 4), dx[k] = zalloc(nx * 4), dw[k] = zalloc((size_t)CD * K * 4), db[k] = zalloc((size_t)CD * 4);
		bk[k]->ops->mamba_conv_fwd(bk[k], y[k], s.xbc, s.ldc, w, bias, d->seg_start, d->L, d->b, CD, K, MGT_DT_F32);
		bk[k]->ops->mamba_conv_bwd(bk[k], dx[k], dw[k], db[k], dy, s.xbc, s.ldc, w, bias, d->seg_start, d->L, d->b, CD, K, MGT_DT_F32);
		no[k] = zalloc(ny * 4), nr[k] = zalloc(s.T * 2 * 4), ndy[k] = zalloc(ny * 4), ndz[k] = zalloc(ny * 4);
		ndw[k] = zalloc((size_t)di * 4);
		bk[k]->ops->mamba_gated_norm_fwd(bk[k], no[k], nr[k], o1.y, gy, di, w, T, di, 2, 1e-5f, MGT_DT_F32);
		bk[k]->ops->mamba_gated_norm_bwd(bk[k], ndy[k], ndz[k], ndw[k], gy, o1.y, gy, di, w, nr[k], T, di, 2, MGT_DT_F32);
	}
	CHECK(same(y[0], y[1], s.T * CD * 4) && same(dx[0], dx[1], nx * 4) && same(dw[0], dw[1], (size_t)CD * K * 4) &&
		      same(db[0], db[1], (size_t)CD * 4),
	      "conv: 1 and 3 threads give the same bits");
	CHECK(same(no[0], no[1], ny * 4) && same(nr[0], nr[1], s.T * 8) && same(ndy[0], ndy[1], ny * 4) &&
		      same(ndz[0], ndz[1], ny * 4) && same(ndw[0], ndw[1], (size_t)di * 4),
	      "gated norm: 1 and 3 threads give the same bits");
	for (int k = 0; k < 2; k++)
		free(y[k]), free(dx[k]), free(dw[k]), free(db[k]), free(no[k]), free(nr[k]), free(ndy[k]), free(ndz[k]),
			free(ndw[k]);
	free(w), free(bias), free(dy), free(gy);
	out_free(&o1), out_free(&o3);
	scan_free(&s);
	mgt_backend_destroy(b1);
	mgt_backend_destroy(b3);
}

/* The CPU has the six ops, for fp32, bf16 and fp16 storage, and mamba_step for fp32 only; a table
 * without them (as the CUDA backend's) is refused by name. */
static void test_supports(void)
{
	char why[256] = "";
	const mgt_backend_op ops[] = { MGT_OP_mamba_conv_fwd, MGT_OP_mamba_conv_bwd, MGT_OP_ssd_scan_fwd,
				       MGT_OP_ssd_scan_bwd, MGT_OP_mamba_gated_norm_fwd, MGT_OP_mamba_gated_norm_bwd };
	const mgt_elem_type ts[] = { MGT_DT_F32, MGT_DT_BF16, MGT_DT_F16 };
	bool all = true;
	for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
		for (size_t i = 0; i < 3; i++)
			all &= mgt_backend_supports(be, ops[k], ts[i], why, sizeof why);
	CHECK(all, "the CPU backend supports the six Mamba ops on fp32, bf16 and fp16");
	CHECK(!mgt_backend_supports(be, MGT_OP_mamba_step, MGT_DT_BF16, why, sizeof why) && strstr(why, "fp32"),
	      "mamba_step on fp32 only: %s", why);
	mgt_backend_ops t = *be->ops;
	t.ssd_scan_bwd = NULL;
	mgt_backend fake = *be;
	fake.ops = &t;
	CHECK(!mgt_backend_supports(&fake, MGT_OP_ssd_scan_bwd, MGT_DT_F32, why, sizeof why) && strstr(why, "ssd_scan_bwd"),
	      "a table without ssd_scan_bwd refuses it: %s", why);
}

/* mamba_step (inference: one token at a time with conv and state caches) against the training
 * path's mamba_conv_fwd + ssd_scan_fwd on the same in_proj output: all rows in one call, then in
 * calls of `split` rows carrying the states, then sequence 0 restarted at position 0 (its states
 * zeroed: the same outputs again).  Rows i*b + j: position i of sequence j. */
static void test_step(int L, int b, int nh, int g, int p, int n, int split)
{
	scan_in s;
	scan_setup(&s, L, b, nh, g, p, n, false, true);
	const int CD = s.CD, K = 4, di = nh * p;
	const size_t T = s.T;
	float *w = zalloc((size_t)CD * K * 4), *bias = zalloc((size_t)CD * 4), *u0 = zalloc(T * CD * 4), *y0 = zalloc(T * di * 4);
	float *u1 = zalloc(T * CD * 4), *y1 = zalloc(T * di * 4), *st = zalloc(mgt_ssd_states_floats(&s.d) * 4);
	float *cs = zalloc((size_t)b * (K - 1) * CD * 4), *ss = zalloc((size_t)b * nh * p * n * 4);
	int32_t *seq = zalloc(T * 4), *pos = zalloc(T * 4);
	for (size_t i = 0; i < (size_t)CD * K; i++) w[i] = (float)unif(-0.5, 0.5);
	for (int c = 0; c < CD; c++) bias[c] = (float)unif(-0.5, 0.5);
	for (size_t t = 0; t < T; t++) seq[t] = (int32_t)(t % b), pos[t] = (int32_t)(t / b);
	be->ops->mamba_conv_fwd(be, u0, s.xbc, s.ldc, w, bias, NULL, L, b, CD, K, MGT_DT_F32);
	mgt_ssd d = s.d;
	d.ld_x = d.ld_bc = CD;
	d.seg_start = NULL;
	be->ops->ssd_scan_fwd(be, &d, y0, st, u0, u0 + di, u0 + di + g * n, s.dtr + s.off, s.dtb, s.alog, s.D, MGT_DT_F32);
	double eu = 0, ey = 0, my = 0, er = 0;
	for (size_t t0 = 0; t0 < T; t0 += (size_t)split) {
		const int nt = (int)(T - t0 < (size_t)split ? T - t0 : (size_t)split);
		be->ops->mamba_step(be, &d, nt, y1 + t0 * di, u1 + t0 * CD, cs, ss, s.xbc + t0 * s.ldc, s.ldc,
				    s.dtr + s.off + t0 * d.ld_dt, seq + t0, pos + t0, w, bias, K, s.dtb, s.alog, s.D);
	}
	for (size_t i = 0; i < T * CD; i++) eu = fmax(eu, fabs((double)u1[i] - u0[i]));
	for (size_t i = 0; i < T * di; i++) ey = fmax(ey, fabs((double)y1[i] - y0[i])), my = fmax(my, fabs(y0[i]));
	/* sequence 0 again from position 0: rows t % b == 0 */
	for (size_t t = 0; t < T; t += (size_t)b) {
		float yr[256];
		be->ops->mamba_step(be, &d, 1, yr, u1, cs, ss, s.xbc + t * s.ldc, s.ldc, s.dtr + s.off + t * d.ld_dt, seq + t,
				    pos + t, w, bias, K, s.dtb, s.alog, s.D);
		for (int c = 0; c < di && c < 256; c++) er = fmax(er, fabs((double)yr[c] - y1[t * di + c]));
	}
	CHECK(eu == 0 && ey <= 2e-5 * my && er == 0, "mamba_step L %d b %d nh %d g %d p %d n %d in calls of %d: conv %.1e (bit "
	      "for bit), y %.2e of max %.3g against the chunked scan; a restart at 0 repeats the outputs (%.1e)", L, b, nh, g, p,
	      n, split, eu, ey / my, my, er);
	free(w), free(bias), free(u0), free(y0), free(u1), free(y1), free(st), free(cs), free(ss), free(seq), free(pos);
	scan_free(&s);
}

/* ---- 16-bit storage (backend.h's t = bf16, fp16) ----
 * The ops compute in fp32 on the 16-bit inputs widened and round each output once, so each 16-bit
 * output is the fp32 op's on the widened inputs, rounded, bit for bit (the reference is that
 * staged computation: the fp32 op run here on the widened copies; gated_norm_bwd widens row by
 * row inside the op, the others through whole fp32 copies, cpu_mamba16.c); the columns an op must not
 * write keep their bits; the fp32 outputs (weight gradients, states, rstd) are the fp32 op's bit
 * for bit. */
static uint16_t to16(float v, mgt_elem_type t) { return t == MGT_DT_BF16 ? mgt_f32_to_bf16(v) : mgt_f32_to_f16(v); }
static float from16(uint16_t u, mgt_elem_type t) { return t == MGT_DT_BF16 ? mgt_bf16_to_f32(u) : mgt_f16_to_f32(u); }

/* n uniform values in (-a, a) rounded to t: the 16-bit copy *h and the widened fp32 values. */
static float *rnd16(size_t n, double a, mgt_elem_type t, uint16_t **h)
{
	float *f = zalloc(n * 4);
	*h = zalloc(n * 2);
	for (size_t k = 0; k < n; k++) {
		(*h)[k] = to16((float)unif(-a, a), t);
		f[k] = from16((*h)[k], t);
	}
	return f;
}

/* Elements of the 16-bit h [n] that are not f [n] rounded. */
static size_t ndiff16(const uint16_t *h, const float *f, size_t n, mgt_elem_type t)
{
	size_t d = 0;
	for (size_t k = 0; k < n; k++)
		d += h[k] != to16(f[k], t);
	return d;
}

static float *copyf(const float *f, size_t n) { float *c = zalloc(n * 4); memcpy(c, f, n * 4); return c; }

static void test16_conv(mgt_elem_type t, int L, int b, int CD, int K, int ld, bool docs)
{
	const size_t T = (size_t)L * b, nx = T * ld, ny = T * CD, nw = (size_t)CD * K;
	int32_t *seg = make_seg(L, b, docs);
	uint16_t *x16, *dy16, *dx16, *y16 = zalloc(ny * 2);
	float *x = rnd16(nx, 2, t, &x16), *dy = rnd16(ny, 1, t, &dy16), *dx = rnd16(nx, 1, t, &dx16), *y = zalloc(ny * 4);
	float *w = zalloc(nw * 4), *bias = zalloc(CD * 4), *dw = zalloc(nw * 4), *db = zalloc(CD * 4);
	fill(w, NULL, nw, -0.5, 0.5), fill(bias, NULL, CD, -0.5, 0.5), fill(dw, NULL, nw, -1, 1), fill(db, NULL, CD, -1, 1);
	float *dw16 = copyf(dw, nw), *db16 = copyf(db, CD);
	be->ops->mamba_conv_fwd(be, y, x, ld, w, bias, seg, L, b, CD, K, MGT_DT_F32);
	be->ops->mamba_conv_bwd(be, dx, dw, db, dy, x, ld, w, bias, seg, L, b, CD, K, MGT_DT_F32);
	be->ops->mamba_conv_fwd(be, y16, x16, ld, w, bias, seg, L, b, CD, K, t);
	be->ops->mamba_conv_bwd(be, dx16, dw16, db16, dy16, x16, ld, w, bias, seg, L, b, CD, K, t);
	const size_t d = ndiff16(y16, y, ny, t) + ndiff16(dx16, dx, nx, t);
	CHECK(d == 0 && !memcmp(dw, dw16, nw * 4) && !memcmp(db, db16, CD * 4),
	      "conv %s L=%d b=%d CD=%d ld=%d: y, dx the fp32 op's rounded (%zu differ), dw, db its bits",
	      t == MGT_DT_BF16 ? "bf16" : "fp16", L, b, CD, ld, d);
	free(seg), free(x16), free(dy16), free(dx16), free(y16), free(x), free(dy), free(dx), free(y), free(w), free(bias);
	free(dw), free(db), free(dw16), free(db16);
}

static void test16_norm(mgt_elem_type t, int T, int di, int g, int ld_z)
{
	const size_t n = (size_t)T * di, nz = (size_t)T * ld_z, ng = (size_t)T * g;
	uint16_t *y16, *z16, *do16, *dz16, *o16 = zalloc(n * 2), *dy16 = zalloc(n * 2);
	float *y = rnd16(n, 2, t, &y16), *z = rnd16(nz, 3, t, &z16), *dout = rnd16(n, 1, t, &do16);
	float *dz = rnd16(nz, 1, t, &dz16), *o = zalloc(n * 4), *dy = zalloc(n * 4), *r = zalloc(ng * 4);
	float *r16 = zalloc(ng * 4), *w = zalloc(di * 4), *dw = zalloc(di * 4);
	fill(w, NULL, di, 0.5, 1.5), fill(dw, NULL, di, -1, 1);
	float *dw16 = copyf(dw, di);
	be->ops->mamba_gated_norm_fwd(be, o, r, y, z, ld_z, w, T, di, g, 1e-5f, MGT_DT_F32);
	be->ops->mamba_gated_norm_bwd(be, dy, dz, dw, dout, y, z, ld_z, w, r, T, di, g, MGT_DT_F32);
	be->ops->mamba_gated_norm_fwd(be, o16, r16, y16, z16, ld_z, w, T, di, g, 1e-5f, t);
	be->ops->mamba_gated_norm_bwd(be, dy16, dz16, dw16, do16, y16, z16, ld_z, w, r16, T, di, g, t);
	const size_t d = ndiff16(o16, o, n, t) + ndiff16(dy16, dy, n, t) + ndiff16(dz16, dz, nz, t);
	CHECK(d == 0 && !memcmp(r, r16, ng * 4) && !memcmp(dw, dw16, di * 4),
	      "gated norm %s T=%d di=%d g=%d ld_z=%d: out, dy, dz the fp32 op's rounded (%zu differ), rstd, dw its bits",
	      t == MGT_DT_BF16 ? "bf16" : "fp16", T, di, g, ld_z, d);
	free(y16), free(z16), free(do16), free(dz16), free(o16), free(dy16), free(y), free(z), free(dout), free(dz);
	free(o), free(dy), free(r), free(r16), free(w), free(dw), free(dw16);
}

/* x, B, C in xbc [T, ldc] (3 columns past them), dt_raw at column 2 of dtr [T, nh + 5]. */
static void test16_scan(mgt_elem_type t, int L, int b, int nh, int g, int p, int n, bool docs)
{
	const int di = nh * p, ldc = di + 2 * g * n + 3, lddt = nh + 5, bc = di, cc = di + g * n;
	const mgt_ssd d = { .L = L, .b = b, .nh = nh, .p = p, .g = g, .n = n, .ld_x = ldc, .ld_bc = ldc, .ld_dt = lddt,
			    .seg_start = make_seg(L, b, docs) };
	const size_t T = (size_t)L * b, nx = T * ldc, nd = T * lddt, ny = T * di, ns = mgt_ssd_states_floats(&d);
	uint16_t *x16, *dt16, *dy16, *gx16, *gd16, *y16 = zalloc(ny * 2);
	float *x = rnd16(nx, 1, t, &x16), *dtr = rnd16(nd, 2, t, &dt16), *dy = rnd16(ny, 1, t, &dy16);
	float *gx = rnd16(nx, 1, t, &gx16), *gd = rnd16(nd, 1, t, &gd16), *y = zalloc(ny * 4);
	float *st = zalloc(ns * 4), *st16 = zalloc(ns * 4), *prm = zalloc(6 * (size_t)nh * 4);
	for (int h = 0; h < nh; h++) /* dt_bias, A_log, D; then ddt_bias, dA_log, dD */
		prm[h] = (float)unif(-2, -1), prm[nh + h] = (float)unif(0, 2), prm[2 * nh + h] = (float)unif(0.5, 1.5);
	float *g32 = prm + 3 * nh, *g16 = copyf(g32, 3 * (size_t)nh);
	be->ops->ssd_scan_fwd(be, &d, y, st, x, x + bc, x + cc, dtr + 2, prm, prm + nh, prm + 2 * nh, MGT_DT_F32);
	be->ops->ssd_scan_bwd(be, &d, gx, gx + bc, gx + cc, gd + 2, g32, g32 + nh, g32 + 2 * nh, dy, st, x, x + bc, x + cc,
			      dtr + 2, prm, prm + nh, prm + 2 * nh, MGT_DT_F32);
	be->ops->ssd_scan_fwd(be, &d, y16, st16, x16, x16 + bc, x16 + cc, dt16 + 2, prm, prm + nh, prm + 2 * nh, t);
	be->ops->ssd_scan_bwd(be, &d, gx16, gx16 + bc, gx16 + cc, gd16 + 2, g16, g16 + nh, g16 + 2 * nh, dy16, st16, x16,
			      x16 + bc, x16 + cc, dt16 + 2, prm, prm + nh, prm + 2 * nh, t);
	const size_t nd16 = ndiff16(y16, y, ny, t) + ndiff16(gx16, gx, nx, t) + ndiff16(gd16, gd, nd, t);
	CHECK(nd16 == 0 && !memcmp(st, st16, ns * 4) && !memcmp(g32, g16, 3 * (size_t)nh * 4),
	      "scan %s L=%d b=%d nh=%d g=%d: y, dx/dB/dC, ddt_raw the fp32 op's rounded, other columns kept (%zu differ); "
	      "states, ddt_bias, dA_log, dD its bits", t == MGT_DT_BF16 ? "bf16" : "fp16", L, b, nh, g, nd16);
	free((void *)d.seg_start), free(x16), free(dt16), free(dy16), free(gx16), free(gd16), free(y16), free(x);
	free(dtr), free(dy), free(gx), free(gd), free(y), free(st), free(st16), free(prm), free(g16);
}

static void test_16bit(void)
{
	const mgt_elem_type ts[] = { MGT_DT_BF16, MGT_DT_F16 };
	for (int k = 0; k < 2; k++) {
		test16_conv(ts[k], 130, 3, 24, 4, 30, true);
		test16_conv(ts[k], 7, 1, 5, 4, 5, false);
		test16_norm(ts[k], 50, 96, 2, 136);
		test16_norm(ts[k], 7, 30, 3, 30);
		/* T di above the threads' threshold (CPU_PAR_MIN), 3 column chunks of dw: the row-wise
		 * 16-bit op's parallel paths */
		test16_norm(ts[k], 300, 320, 4, 330);
		test16_scan(ts[k], 150, 3, 4, 2, 8, 16, true);
		test16_scan(ts[k], 45, 1, 3, 3, 4, 4, false);
	}
}

int main(void)
{
	be = mgt_backend_cpu_create(2);
	CHECK(be != NULL, "cpu backend");
	if (!be)
		return check_finish();
	test_supports();
	test_16bit();
	/* conv: tiny shapes with finite differences in every element, then larger */
	test_conv(5, 2, 6, 4, true, true);
	test_conv(130, 1, 3, 4, true, true);
	test_conv(7, 3, 5, 3, false, true);
	test_conv(1, 1, 5, 4, false, false);
	test_conv(300, 3, 40, 4, true, false);
	test_conv(300, 3, 200, 4, false, false);
	/* gated norm */
	test_norm(3, 8, 2, true);
	test_norm(4, 12, 1, true);
	test_norm(1, 16, 1, false);
	test_norm(300, 64, 4, false);
	test_norm(50, 384, 3, false);
	/* scan: every element by finite differences on tiny shapes (the second crosses a chunk) */
	test_scan(5, 2, 4, 1, 2, 3, true, true, true);
	test_scan(5, 3, 4, 4, 3, 2, false, true, true);
	test_scan(130, 1, 3, 1, 2, 2, true, true, true);
	/* ... and against the float64 adjoint on larger ones */
	test_scan(1, 1, 1, 1, 4, 4, false, false, false);
	test_scan(1, 3, 4, 1, 4, 16, true, true, false);
	test_scan(5, 3, 4, 1, 8, 16, true, true, false);
	test_scan(130, 1, 4, 4, 16, 8, false, true, false);
	test_scan(130, 3, 8, 2, 16, 16, true, true, false);
	test_scan(256, 1, 4, 1, 8, 8, true, false, false);
	test_scan(300, 1, 4, 1, 16, 16, true, true, false);
	test_scan(300, 3, 8, 2, 4, 16, false, true, false);
	test_scan(300, 3, 4, 1, 8, 4, true, false, false);
	test_docs_isolated();
	test_threads();
	test_step(5, 2, 4, 2, 4, 4, 10);
	test_step(200, 3, 4, 2, 8, 16, 7);
	test_step(150, 1, 8, 8, 4, 8, 1);
	mgt_backend_destroy(be);
	return check_finish();
}
