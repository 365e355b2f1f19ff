/* Micro-benchmark of the CPU backend's ops at GPT-2 124M shapes (s=1024, b=1, h=768, 12 heads).
 *
 *   make -j2 && cc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -Ilib $(pkg-config --cflags openblas) \
 *       tests/bench/ops_cpu.c build/libmgt.a $(pkg-config --libs openblas) -lm -o build/bench/ops_cpu
 *   build/bench/ops_cpu [threads (2)] [s (1024)] [only ops whose name contains this]
 *
 * Prints one line per op: milliseconds per call (best of a few) and GFLOP/s where that means
 * something (GEMM FLOPs; attention counts the causal half: 4*s*s*d/2 forward, twice that plus the
 * recomputed scores backward, i.e. 10*s*s*d/2). */
#include "backend/backend.h"
#include "../unit/attn_calls.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *buf(mgt_backend *be, size_t n, float scale)
{
	float *p = be->ops->alloc(be, n * sizeof *p);
	if (!p) {
		fprintf(stderr, "ops_cpu: out of memory\n");
		exit(1);
	}
	uint64_t z = 12345;
	for (size_t i = 0; i < n; i++) {
		z = z * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = scale * ((float)(z >> 40) / 16777216.0f - 0.5f);
	}
	return p;
}

static const char *filter; /* run only the ops whose label contains this */

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Best wall time of reps calls, and the process CPU time of that call (on a busy machine, CPU
 * time / threads is the better estimate of the wall time an idle machine would give). */
#define TIME(label, flops, reps, stmt)                                                       \
	do {                                                                                 \
		double best = 1e30, bcpu = 0;                                                \
		if (filter && !strstr(label, filter))                                        \
			break;                                                               \
		stmt; /* warm up */                                                          \
		for (int r_ = 0; r_ < (reps); r_++) {                                        \
			double t0 = mgt_now(), c0 = cpu_seconds();                           \
			stmt;                                                                \
			double t = mgt_now() - t0, c = cpu_seconds() - c0;                   \
			if (t < best)                                                        \
				best = t, bcpu = c;                                          \
		}                                                                            \
		printf("%-34s %9.3f ms (cpu %9.3f ms)", label, best * 1e3, bcpu * 1e3);      \
		if ((flops) > 0)                                                             \
			printf("  %7.1f GFLOP/s", (double)(flops) / best * 1e-9);            \
		printf("\n");                                                                \
	} while (0)

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2, s = argc > 2 ? atoi(argv[2]) : 1024;
	filter = argc > 3 ? argv[3] : NULL;
	const int b = 1, T = s * b, h = 768, H = 12, d = 64, f = 4 * h, V = 50304;
	mgt_backend *be = mgt_backend_cpu_create(threads);
	if (!be)
		return 1;
	const mgt_backend_ops *O = be->ops;
	printf("cpu backend, %d threads, OpenBLAS %s, T=%d h=%d heads=%d d=%d V=%d\n", threads,
	       openblas_get_corename(), T, h, H, d, V);

	float *x = buf(be, (size_t)T * f, 1), *y = buf(be, (size_t)T * 2 * f, 1);
	float *w = buf(be, (size_t)f * h * 2, 0.05f), *bias = buf(be, 2 * f, 0.1f);
	float *dx = buf(be, (size_t)T * 2 * f, 1), *dw = buf(be, (size_t)f * h * 2, 1);
	float *db = buf(be, 2 * f, 1), *dy = buf(be, (size_t)T * 2 * f, 1);
	double gemm = 2.0 * T * h * 3 * h;
	TIME("linear_fwd 768->2304 (qkv)", gemm, 5, O->linear_fwd(be, y, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, bias, T, h, 3 * h));
	TIME("linear_bwd 768->2304", 2 * gemm, 5, O->linear_bwd(be, dx, MGT_DT_F32, dw, db, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, h, 3 * h));
	gemm = 2.0 * T * h * f;
	TIME("linear_fwd 768->3072 (fc1)", gemm, 5, O->linear_fwd(be, y, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, bias, T, h, f));
	TIME("linear_fwd 3072->768 (fc2)", gemm, 5, O->linear_fwd(be, y, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, bias, T, f, h));
	TIME("linear_bwd 3072->768", 2 * gemm, 5, O->linear_bwd(be, dx, MGT_DT_F32, dw, db, dy, MGT_DT_F32, x, MGT_DT_F32, w, MGT_DT_F32, T, f, h));

	float *qkv = buf(be, (size_t)T * 3 * h, 1), *out = buf(be, (size_t)T * h, 1);
	float *lse = buf(be, (size_t)b * H * s, 1), *dqkv = buf(be, (size_t)T * 3 * h, 1);
	double af = 4.0 * s * s * d / 2 * H * b;
	TIME("attn_fwd", af, 3, at_attn_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, H, 1, d, 0, 1, 0, H, NULL));
	TIME("attn_bwd", 2.5 * af, 3,
	     at_attn_bwd(be, dqkv, out, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, H, 1, d, 0, 1, 0, H, NULL));
	TIME("attn_fwd+bwd", 3.5 * af, 3,
	     (at_attn_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, H, 1, d, 0, 1, 0, H, NULL),
	      at_attn_bwd(be, dqkv, out, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, H, 1, d, 0, 1, 0, H, NULL)));
	TIME("attn_fwd+bwd dropout 0.1", 3.5 * af, 3,
	     (at_attn_fwd(be, out, lse, qkv, MGT_DT_F32, s, b, H, 1, d, 0.1f, 1, 0, H, NULL),
	      at_attn_bwd(be, dqkv, out, MGT_DT_F32, qkv, out, MGT_DT_F32, lse, s, b, H, 1, d, 0.1f, 1, 0, H, NULL)));
	float *inv = buf(be, (size_t)d / 2, 1e-2);
	TIME("rope (q,k; rot 64) fwd", 0, 5, O->rope(be, qkv, MGT_DT_F32, (const int32_t *)lse, inv, T, H, 1, d, d, false));

	float *mean = buf(be, T, 1), *rstd = buf(be, T, 1);
	TIME("norm_fwd layernorm", 0, 10, O->norm_fwd(be, MGT_NORM_LAYERNORM, y, MGT_DT_F32, mean, rstd, x, MGT_DT_F32, w, bias, T, h, 1e-5f));
	TIME("norm_bwd layernorm", 0, 10,
	     O->norm_bwd(be, MGT_NORM_LAYERNORM, dx, dw, db, dy, MGT_DT_F32, x, MGT_DT_F32, w, mean, rstd, T, h));
	TIME("bias_act_fwd gelu", 0, 10, O->bias_act_fwd(be, MGT_ACT_GELU, y, MGT_DT_F32, x, MGT_DT_F32, bias, T, f));
	TIME("bias_act_bwd gelu", 0, 10, O->bias_act_bwd(be, MGT_ACT_GELU, dx, db, dy, MGT_DT_F32, x, MGT_DT_F32, bias, T, f));
	TIME("bias_act_fwd swiglu", 0, 10, O->bias_act_fwd(be, MGT_ACT_SWIGLU, y, MGT_DT_F32, x, MGT_DT_F32, bias, T, f / 2));
	TIME("bda_fwd p=0", 0, 10, O->bda_fwd(be, y, x, MGT_DT_F32, dy, MGT_DT_F32, bias, T, h, 0, 1, 0));
	TIME("bda_fwd p=0.1", 0, 10, O->bda_fwd(be, y, x, MGT_DT_F32, dy, MGT_DT_F32, bias, T, h, 0.1f, 1, 0));
	TIME("bda_bwd p=0.1", 0, 10, O->bda_bwd(be, dx, MGT_DT_F32, db, dy, MGT_DT_F32, T, h, 0.1f, 1, 0));

	/* Mixture of Experts: top-2 of 8 experts, SwiGLU experts of F = h (fc1 h -> 2F, fc2 F -> h) */
	{
		enum { E = 8, K = 2 };
		const int N = K * T, F = h;
		int rows[E];
		for (int g = 0; g < E; g++)
			rows[g] = N / E + (g == E - 1 ? N % E : 0);
		int32_t *idx = (int32_t *)buf(be, N, 0), *slot = (int32_t *)buf(be, N, 0);
		for (int i = 0; i < N; i++)
			idx[i] = (int32_t)(((int64_t)i * 7919) % T), slot[i] = (int32_t)(((int64_t)i * 104729) % N);
		float *xe = buf(be, (size_t)N * 2 * F, 1), *he = buf(be, (size_t)N * 2 * F, 1), *pr = buf(be, N, 1);
		float *we = buf(be, (size_t)E * 2 * F * h, 0.05f), *dwe = buf(be, (size_t)E * 2 * F * h, 1);
		const void *wp[E];
		float *dwp[E];
		for (int g = 0; g < E; g++)
			wp[g] = we + (size_t)g * 2 * F * h, dwp[g] = dwe + (size_t)g * 2 * F * h;
		TIME("moe rows_gather top-2", 0, 10, O->rows_gather(be, xe, x, MGT_DT_F32, idx, N, h));
		TIME("moe rows_combine top-2", 0, 10, O->rows_combine(be, y, xe, MGT_DT_F32, slot, T, K, h));
		TIME("moe rows_scale", 0, 10, O->rows_scale(be, xe, xe, MGT_DT_F32, pr, N, h));
		TIME("moe rows_dot", 0, 10, O->rows_dot(be, pr, xe, he, MGT_DT_F32, N, h));
		gemm = 2.0 * N * h * 2 * F;
		TIME("moe linear_fwd_grouped 8x 768->1536", gemm, 3,
		     O->linear_fwd_grouped(be, he, xe, MGT_DT_F32, wp, MGT_DT_F32, rows, E, h, 2 * F));
		TIME("moe linear_bwd_grouped 8x 768->1536", 2 * gemm, 3,
		     O->linear_bwd_grouped(be, dx, dwp, he, xe, MGT_DT_F32, wp, MGT_DT_F32, rows, E, h, 2 * F));
		O->free(be, idx), O->free(be, slot), O->free(be, xe), O->free(be, he), O->free(be, we), O->free(be, dwe), O->free(be, pr);
	}

	float *logits = buf(be, (size_t)T * V, 4), *mx = buf(be, T, 1), *se = buf(be, T, 1);
	float *tg = buf(be, T, 1), *loss = buf(be, T, 1), *mask = buf(be, T, 0);
	int32_t *labels = (int32_t *)buf(be, T, 0);
	for (int t = 0; t < T; t++)
		mask[t] = 1, labels[t] = (t * 7919) % V;
	TIME("xent_max+stats+loss V=50304", 0, 5,
	     (O->xent_max(be, mx, logits, MGT_DT_F32, T, V), O->xent_stats(be, se, tg, logits, MGT_DT_F32, labels, mx, 0, T, V),
	      O->xent_loss(be, loss, mx, se, tg, mask, T)));
	TIME("xent_bwd V=50304", 0, 5, O->xent_bwd(be, logits, logits, MGT_DT_F32, labels, mx, se, mask, 1.0f, 0, T, V));
	float *wl = buf(be, (size_t)V * h, 0.05f);
	TIME("lm head linear_fwd 768->50304", 2.0 * T * h * V, 2, O->linear_fwd(be, logits, MGT_DT_F32, x, MGT_DT_F32, wl, MGT_DT_F32, NULL, T, h, V));

	size_t n = (size_t)T * f;
	TIME("adamw (3.1M params)", 0, 5, O->adamw(be, x, y, dx, dy, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3));
	TIME("sumsq (3.1M)", 0, 5, O->sumsq(be, x, n));
	mgt_backend_destroy(be);
	return 0;
}
