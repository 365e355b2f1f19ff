/* The CPU backend's Mamba-2 scan (backend.h ssd_scan_fwd, ssd_scan_bwd) at one layer's shape, for
 * tests/bench/mamba_scan.sh (which builds and runs it).  Not a test.
 *
 *   mamba_scan THREADS L B NH P G N REPS DUMP
 *
 * Inputs as a Megatron MambaMixer layer holds them: x, B, C column blocks of the conv's output
 * xBC [T, NH*P + 2*G*N], dt_raw a column of in_proj's output [T, 2*NH*P + 2*G*N + NH]; dt_bias
 * from Megatron's init (inverse softplus of dt log-uniform in [1e-3, 1e-1]), A_log = log U(1, 16),
 * D = 1.  Prints the best of REPS wall times of the forward and of the backward, in ms, and writes
 * the inputs, dy and every output to DUMP (float32 arrays, contiguous, after a header of six
 * int32: L B NH P G N) so that the PyTorch side can check them. */
#include "backend/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t z = 12345;
static double unif(double lo, double hi)
{
	z = z * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * ((double)(z >> 11) / 9007199254740992.0);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *fbuf(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof *p);
	if (!p) {
		fprintf(stderr, "mamba_scan: out of memory\n");
		exit(1);
	}
	return p;
}

/* Write rows [T] of w columns at column c0 of a [T, ld] array, contiguously. */
static void put(FILE *f, const float *a, size_t T, int ld, int c0, int w)
{
	for (size_t t = 0; t < T; t++)
		fwrite(a + t * ld + c0, sizeof *a, (size_t)w, f);
}

int main(int argc, char **argv)
{
	if (argc != 10) {
		fprintf(stderr, "usage: mamba_scan THREADS L B NH P G N REPS DUMP\n");
		return 2;
	}
	const int th = atoi(argv[1]), L = atoi(argv[2]), b = atoi(argv[3]), nh = atoi(argv[4]), P = atoi(argv[5]);
	const int G = atoi(argv[6]), N = atoi(argv[7]), reps = atoi(argv[8]);
	const int DI = nh * P, CD = DI + 2 * G * N, W = 2 * DI + 2 * G * N + nh, dto = 2 * DI + 2 * G * N;
	const size_t T = (size_t)L * b;
	mgt_backend *be = mgt_backend_cpu_create(th);
	if (!be)
		return 1;
	float *xbc = fbuf(T * CD), *zx = fbuf(T * W), *dtb = fbuf(nh), *alog = fbuf(nh), *D = fbuf(nh);
	float *dy = fbuf(T * DI), *y = fbuf(T * DI), *dxbc = fbuf(T * CD), *dzx = fbuf(T * W);
	float *gdtb = fbuf(nh), *galog = fbuf(nh), *gD = fbuf(nh);
	for (size_t k = 0; k < T * CD; k++)
		xbc[k] = (float)unif(-1, 1);
	for (size_t k = 0; k < T * W; k++)
		zx[k] = (float)unif(-1, 1);
	for (size_t k = 0; k < T * DI; k++)
		dy[k] = (float)unif(-1, 1);
	for (int h = 0; h < nh; h++) {
		const double dt = fmax(exp(unif(0, 1) * (log(0.1) - log(0.001)) + log(0.001)), 1e-4);
		dtb[h] = (float)(dt + log(-expm1(-dt)));
		alog[h] = (float)log(unif(1, 16));
		D[h] = 1.0f;
	}
	mgt_ssd d = { .L = L, .b = b, .nh = nh, .p = P, .g = G, .n = N, .ld_x = CD, .ld_bc = CD, .ld_dt = W };
	float *st = fbuf(mgt_ssd_states_floats(&d));
	double best_f = 1e30, best_b = 1e30;
	for (int r = 0; r < reps + 1; r++) { /* the first is a warm-up */
		double t0 = now();
		be->ops->ssd_scan_fwd(be, &d, y, st, xbc, xbc + DI, xbc + DI + G * N, zx + dto, dtb, alog, D, MGT_DT_F32);
		double t1 = now();
		memset(gdtb, 0, nh * 4), memset(galog, 0, nh * 4), memset(gD, 0, nh * 4);
		be->ops->ssd_scan_bwd(be, &d, dxbc, dxbc + DI, dxbc + DI + G * N, dzx + dto, gdtb, galog, gD, dy, st, xbc,
				      xbc + DI, xbc + DI + G * N, zx + dto, dtb, alog, D, MGT_DT_F32);
		double t2 = now();
		if (r > 0) {
			best_f = fmin(best_f, t1 - t0);
			best_b = fmin(best_b, t2 - t1);
		}
	}
	printf("mgt cpu ssd_scan_fwd %.1f ms, ssd_scan_bwd %.1f ms, total %.1f ms (best of %d, %d threads)\n",
	       best_f * 1e3, best_b * 1e3, (best_f + best_b) * 1e3, reps, th);
	FILE *f = fopen(argv[9], "wb");
	if (!f)
		return 1;
	const int32_t hdr[6] = { L, b, nh, P, G, N };
	fwrite(hdr, 4, 6, f);
	put(f, xbc, T, CD, 0, DI), put(f, xbc, T, CD, DI, G * N), put(f, xbc, T, CD, DI + G * N, G * N);
	put(f, zx, T, W, dto, nh);
	fwrite(dtb, 4, nh, f), fwrite(alog, 4, nh, f), fwrite(D, 4, nh, f);
	fwrite(dy, 4, T * DI, f), fwrite(y, 4, T * DI, f);
	put(f, dxbc, T, CD, 0, DI), put(f, dxbc, T, CD, DI, G * N), put(f, dxbc, T, CD, DI + G * N, G * N);
	put(f, dzx, T, W, dto, nh);
	fwrite(gdtb, 4, nh, f), fwrite(galog, 4, nh, f), fwrite(gD, 4, nh, f);
	fclose(f);
	mgt_backend_destroy(be);
	return 0;
}
