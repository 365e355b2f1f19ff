/* lib/backend: causal GQA self-attention for the CPU backend, flash-attention style
 * (Dao et al. 2022, "FlashAttention", algorithms 1 and 2 with the backward's D = rowsum(dO * O)).
 *
 * Nothing O(s^2) is stored.  Queries go in blocks of CPU_AQ rows, keys in tiles of CPU_AK
 * columns up to the causal limit; scores and probabilities live in a per-thread CPU_AQ x CPU_AK
 * scratch tile.  All products are sgemm calls made inside the parallel region (single-threaded
 * OpenBLAS) that read q, k, v straight out of the strided qkv activation: consecutive positions of
 * one sequence are b*ng*(r+2)*d floats apart.
 *
 * Forward: one task per (query block, sequence, head), heaviest blocks first; online softmax over
 * the key tiles, with the running output kept (unnormalized) in `out` itself.
 * Backward: one task per (sequence, query group), so the group's r query heads accumulate into
 * their shared dK, dV without races; per tile it recomputes P = exp(S - lse) and does
 * dV += Pd^T dO, dPd = dO V^T, dS = P * (dPd * mask - D), dQ += dS K * scale,
 * dK += dS^T Q * scale, where Pd is P with dropout applied.
 */
#include "backend/cpu_impl.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

typedef struct {
	int s, b, ng, r, d, H;
	size_t ldq, ldo; /* floats between positions i and i+1 of one sequence in qkv and out */
} geom;

static geom geom_make(int s, int b, int ng, int r, int d)
{
	geom g = {s, b, ng, r, d, ng * r, 0, 0};
	g.ldq = (size_t)b * ng * (r + 2) * d;
	g.ldo = (size_t)b * ng * r * d;
	return g;
}

/* Head slot m (0..r-1 queries, r key, r+1 value) of group grp, position 0 of sequence j. */
static size_t qkv_off(const geom *g, int j, int grp, int m)
{
	return ((size_t)j * g->ng + grp) * (size_t)(g->r + 2) * g->d + (size_t)m * g->d;
}

static size_t out_off(const geom *g, int j, int n)
{
	return ((size_t)j * g->H + n) * (size_t)g->d;
}

/* Dropout on a row of n <= CPU_AK probabilities: pr[c] *= keep(e0 + c) / (1 - p), and with mk
 * the 0/1 mask kept there. */
CPU_INLINE void drop_row(float *pr, uint8_t *mk, int n, uint64_t key, uint64_t e0, float p, float ks)
{
	uint32_t w[CPU_AK];
	mgt_cpu_philox_row(w, key, e0, n);
	if (mk) {
#pragma omp simd
		for (int c = 0; c < n; c++) {
			float keep = cpu_keep_w(w[c], p);
			mk[c] = (uint8_t)keep;
			pr[c] *= keep * ks;
		}
	} else {
#pragma omp simd
		for (int c = 0; c < n; c++)
			pr[c] *= cpu_keep_w(w[c], p) * ks;
	}
}

/* Number of keys of tile [k0, k0 + kn) that query i may see. */
static inline int causal_lim(int i, int k0, int kn) { return i - k0 + 1 < kn ? i - k0 + 1 : kn; }

/* Forward, one score tile S [M, kn] of query rows i0.. against keys k0..: turns it into
 * (dropped-out) unnormalized probabilities under the running row max mrun, updates the running
 * sums lrun, and rescales the output rows accumulated so far. */
CPU_CLONES static void fwd_tile(float *S, int M, int kn, int i0, int k0, float *mrun, float *lrun,
				float *O, size_t ldo, int d, float p, float ks, uint64_t key,
				uint64_t rowbase, int s)
{
	for (int rr = 0; rr < M; rr++) {
		const int i = i0 + rr, lim = causal_lim(i, k0, kn);
		float *sr = S + (size_t)rr * CPU_AK;
		float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
		for (int c = 0; c < lim; c++)
			mx = sr[c] > mx ? sr[c] : mx;
		const float mnew = k0 == 0 || mx > mrun[rr] ? mx : mrun[rr];
		float sum = 0;
#pragma omp simd reduction(+ : sum)
		for (int c = 0; c < lim; c++) {
			float e = cpu_expf(sr[c] - mnew);
			sr[c] = e;
			sum += e;
		}
		for (int c = lim; c < kn; c++)
			sr[c] = 0.0f;
		if (k0 == 0) {
			lrun[rr] = sum;
		} else {
			const float alpha = cpu_expf(mrun[rr] - mnew);
			lrun[rr] = lrun[rr] * alpha + sum;
			float *o = O + (size_t)rr * ldo;
#pragma omp simd
			for (int c = 0; c < d; c++)
				o[c] *= alpha;
		}
		mrun[rr] = mnew;
		if (p > 0)
			drop_row(sr, NULL, lim, key, (rowbase + i) * s + k0, p, ks);
	}
}

static void fwd_block(const geom *G, float *out, float *lse, const float *qkv, int j, int n,
		      int i0, float p, uint64_t key, int head0, int heads_total, float *S)
{
	const int d = G->d, grp = n / G->r, m = n % G->r;
	const int M = G->s - i0 < CPU_AQ ? G->s - i0 : CPU_AQ, i1 = i0 + M;
	const float scale = 1.0f / sqrtf((float)d), ks = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
	const float *Q = qkv + qkv_off(G, j, grp, m) + (size_t)i0 * G->ldq;
	const float *K = qkv + qkv_off(G, j, grp, G->r), *V = qkv + qkv_off(G, j, grp, G->r + 1);
	float *O = out + out_off(G, j, n) + (size_t)i0 * G->ldo;
	float mrun[CPU_AQ], lrun[CPU_AQ];
	const uint64_t rowbase = ((uint64_t)j * heads_total + head0 + n) * (uint64_t)G->s;

	for (int k0 = 0; k0 < i1; k0 += CPU_AK) {
		const int kn = i1 - k0 < CPU_AK ? i1 - k0 : CPU_AK;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, scale, Q, (int)G->ldq,
			    K + (size_t)k0 * G->ldq, (int)G->ldq, 0.0f, S, CPU_AK);
		fwd_tile(S, M, kn, i0, k0, mrun, lrun, O, G->ldo, d, p, ks, key, rowbase, G->s);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, d, kn, 1.0f, S, CPU_AK,
			    V + (size_t)k0 * G->ldq, (int)G->ldq, k0 == 0 ? 0.0f : 1.0f, O, (int)G->ldo);
	}
	float *L = lse + ((size_t)j * G->H + n) * G->s;
	for (int rr = 0; rr < M; rr++) {
		const float inv = 1.0f / lrun[rr];
		float *o = O + (size_t)rr * G->ldo;
#pragma omp simd
		for (int c = 0; c < d; c++)
			o[c] *= inv;
		L[i0 + rr] = mrun[rr] + logf(lrun[rr]);
	}
}

void mgt_cpu_attn_fwd(mgt_backend *be, float *out, float *lse, const float *qkv, int s, int b,
		      int ng, int r, int d, float p, uint64_t key, int head0, int heads_total)
{
	if (s <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const geom G = geom_make(s, b, ng, r, d);
	const int nqb = (s + CPU_AQ - 1) / CPU_AQ, per = b * G.H;
	const long ntask = (long)nqb * per;
#pragma omp parallel num_threads(cpu_threads(be)) if (ntask > 1 && (long)s * s * d * per > 200000)
	{
		float *S = (float *)cpu_scratch(be, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
		for (long task = 0; task < ntask; task++) {
			const int qb = nqb - 1 - (int)(task / per), rem = (int)(task % per);
			fwd_block(&G, out, lse, qkv, rem / G.H, rem % G.H, qb * CPU_AQ, p, key, head0,
				  heads_total, S);
		}
	}
}

/* Backward, one tile: A [M, kn] holds the scores; make it P = exp(S - lse) (0 past the causal
 * limit) and, with dropout, B = P * mask / (1 - p) and the mask in mk. */
CPU_CLONES static void bwd_tile_p(float *A, float *B, uint8_t *mk, int M, int kn, int i0, int k0,
				  const float *L, float p, float ks, uint64_t key, uint64_t rowbase,
				  int s)
{
	for (int rr = 0; rr < M; rr++) {
		const int i = i0 + rr, lim = causal_lim(i, k0, kn);
		float *ar = A + (size_t)rr * CPU_AK;
		const float l = L[rr];
#pragma omp simd
		for (int c = 0; c < lim; c++)
			ar[c] = cpu_expf(ar[c] - l);
		for (int c = lim; c < kn; c++)
			ar[c] = 0.0f;
		if (p > 0) {
			float *br = B + (size_t)rr * CPU_AK;
			memcpy(br, ar, (size_t)kn * sizeof *br);
			drop_row(br, mk + (size_t)rr * CPU_AK, lim, key, (rowbase + i) * s + k0, p, ks);
		}
	}
}

/* dS = P * (dPd * mask / (1 - p) - D) into A, from P in A and dPd in B. */
CPU_CLONES static void bwd_tile_ds(float *A, const float *B, const uint8_t *mk, int M, int kn,
				   int i0, int k0, const float *D, float p, float ks)
{
	for (int rr = 0; rr < M; rr++) {
		const int lim = causal_lim(i0 + rr, k0, kn);
		float *ar = A + (size_t)rr * CPU_AK;
		const float *br = B + (size_t)rr * CPU_AK;
		const float dr = D[rr];
		if (p > 0) {
			const uint8_t *mr = mk + (size_t)rr * CPU_AK;
#pragma omp simd
			for (int c = 0; c < lim; c++)
				ar[c] = ar[c] * (br[c] * ((float)mr[c] * ks) - dr);
		} else {
#pragma omp simd
			for (int c = 0; c < lim; c++)
				ar[c] = ar[c] * (br[c] - dr);
		}
	}
}

/* One query block of head n (group grp, slot m) against all its key tiles. */
static void bwd_block(const geom *G, float *dqkv, const float *dout, const float *qkv,
		      const float *out, const float *lse, int j, int grp, int m, int i0, float p,
		      uint64_t key, int head0, int heads_total, unsigned char *scratch)
{
	const int d = G->d, n = grp * G->r + m;
	const int M = G->s - i0 < CPU_AQ ? G->s - i0 : CPU_AQ, i1 = i0 + M;
	const float scale = 1.0f / sqrtf((float)d), ks = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
	float *A = (float *)scratch, *B = A + CPU_AQ * CPU_AK;
	uint8_t *mk = (uint8_t *)(B + CPU_AQ * CPU_AK);
	float *D = (float *)(mk + CPU_AQ * CPU_AK);
	const size_t qo = qkv_off(G, j, grp, m) + (size_t)i0 * G->ldq;
	const size_t ko = qkv_off(G, j, grp, G->r), vo = qkv_off(G, j, grp, G->r + 1);
	const float *Q = qkv + qo, *K = qkv + ko, *V = qkv + vo;
	float *dQ = dqkv + qo, *dK = dqkv + ko, *dV = dqkv + vo;
	const size_t oo = out_off(G, j, n) + (size_t)i0 * G->ldo;
	const float *dO = dout + oo, *O = out + oo;
	const float *L = lse + ((size_t)j * G->H + n) * G->s + i0;
	const uint64_t rowbase = ((uint64_t)j * heads_total + head0 + n) * (uint64_t)G->s;
	const int ldq = (int)G->ldq, ldo = (int)G->ldo;

	for (int rr = 0; rr < M; rr++) {
		const float *a = dO + (size_t)rr * G->ldo, *o = O + (size_t)rr * G->ldo;
		double acc = 0;
#pragma omp simd reduction(+ : acc)
		for (int c = 0; c < d; c++)
			acc += (double)a[c] * o[c];
		D[rr] = (float)acc;
	}
	for (int k0 = 0; k0 < i1; k0 += CPU_AK) {
		const int kn = i1 - k0 < CPU_AK ? i1 - k0 : CPU_AK;
		const size_t kr = (size_t)k0 * G->ldq;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, scale, Q, ldq, K + kr, ldq,
			    0.0f, A, CPU_AK);
		bwd_tile_p(A, B, mk, M, kn, i0, k0, L, p, ks, key, rowbase, G->s);
		/* dV[tile] += Pd^T dO */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d, M, 1.0f, p > 0 ? B : A,
			    CPU_AK, dO, ldo, 1.0f, dV + kr, ldq);
		/* dPd = dO V^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, 1.0f, dO, ldo, V + kr,
			    ldq, 0.0f, B, CPU_AK);
		bwd_tile_ds(A, B, mk, M, kn, i0, k0, D, p, ks);
		/* dQ (+)= dS K * scale;  dK[tile] += dS^T Q * scale */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, d, kn, scale, A, CPU_AK, K + kr,
			    ldq, k0 == 0 ? 0.0f : 1.0f, dQ, ldq);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d, M, scale, A, CPU_AK, Q, ldq,
			    1.0f, dK + kr, ldq);
	}
}

void mgt_cpu_attn_bwd(mgt_backend *be, float *dqkv, const float *dout, const float *qkv,
		      const float *out, const float *lse, int s, int b, int ng, int r, int d, float p,
		      uint64_t key, int head0, int heads_total)
{
	if (s <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const geom G = geom_make(s, b, ng, r, d);
	const int ntask = b * ng;
#pragma omp parallel num_threads(cpu_threads(be)) if (ntask > 1 && (long)s * s * d * b * G.H > 200000)
	{
		unsigned char *scratch = cpu_scratch(be, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
		for (int task = 0; task < ntask; task++) {
			const int j = task / ng, grp = task % ng;
			for (int i = 0; i < s; i++) { /* this group's dK, dV rows accumulate from 0 */
				float *dk = dqkv + qkv_off(&G, j, grp, r) + (size_t)i * G.ldq;
				memset(dk, 0, 2 * (size_t)d * sizeof *dk);
			}
			for (int m = 0; m < r; m++)
				for (int i0 = 0; i0 < s; i0 += CPU_AQ)
					bwd_block(&G, dqkv, dout, qkv, out, lse, j, grp, m, i0, p, key,
						  head0, heads_total, scratch);
		}
	}
}

/* ---- attention against a key/value cache (backend.h attn_kv) ----
 * One task per (token, query head): online softmax over the sequence's cached keys in chunks of
 * CPU_AK, the output accumulated unnormalized and divided by the sum at the end. */

static void kv_store(float *kc, float *vc, const float *qkv, const int32_t *seq, const int32_t *pos, int T,
		     int ng, int r, int d, int S)
{
	const size_t hd = (size_t)(r + 2) * d;
	for (int t = 0; t < T; t++)
		for (int g = 0; g < ng; g++) {
			const float *src = qkv + ((size_t)t * ng + g) * hd + (size_t)r * d;
			size_t dst = (((size_t)seq[t] * ng + g) * S + (size_t)pos[t]) * d;
			memcpy(kc + dst, src, (size_t)d * sizeof(float));
			memcpy(vc + dst, src + d, (size_t)d * sizeof(float));
		}
}

/* o[d] = softmax(scale q.K[i], i < np) . V, K and V [np, d]. */
static void kv_head(float *o, const float *q, const float *K, const float *V, int np, int d, float scale)
{
	float sc[CPU_AK], mrun = -INFINITY, lrun = 0.0f;
	for (int c = 0; c < d; c++) o[c] = 0.0f;
	for (int k0 = 0; k0 < np; k0 += CPU_AK) {
		int kn = np - k0 < CPU_AK ? np - k0 : CPU_AK;
		float mx = mrun;
		for (int i = 0; i < kn; i++) {
			const float *k = K + (size_t)(k0 + i) * d;
			float s = 0.0f;
#pragma omp simd reduction(+ : s)
			for (int c = 0; c < d; c++) s += q[c] * k[c];
			sc[i] = s * scale;
			mx = sc[i] > mx ? sc[i] : mx;
		}
		float corr = cpu_expf(mrun - mx);
		lrun *= corr;
		for (int c = 0; c < d; c++) o[c] *= corr;
		for (int i = 0; i < kn; i++) {
			const float *v = V + (size_t)(k0 + i) * d;
			float pr = cpu_expf(sc[i] - mx);
			lrun += pr;
			for (int c = 0; c < d; c++) o[c] += pr * v[c];
		}
		mrun = mx;
	}
	for (int c = 0; c < d; c++) o[c] /= lrun;
}

void mgt_cpu_attn_kv(mgt_backend *be, float *out, float *kc, float *vc, const float *qkv, const int32_t *seq,
		     const int32_t *pos, int T, int ng, int r, int d, int S)
{
	if (T <= 0 || ng <= 0 || r <= 0 || d <= 0) return;
	kv_store(kc, vc, qkv, seq, pos, T, ng, r, d, S);
	const int H = ng * r;
	const long ntask = (long)T * H;
	const size_t hd = (size_t)(r + 2) * d;
	const float scale = 1.0f / sqrtf((float)d);
	long work = 0;
	for (int t = 0; t < T; t++) work += (long)(pos[t] + 1) * H * d;
#pragma omp parallel for schedule(dynamic, 4) num_threads(cpu_threads(be)) if (ntask > 1 && work > 200000)
	for (long task = 0; task < ntask; task++) {
		const int t = (int)(task / H), n = (int)(task % H), g = n / r;
		const size_t kv0 = ((size_t)seq[t] * ng + g) * (size_t)S * d;
		kv_head(out + (size_t)task * d, qkv + ((size_t)t * ng + g) * hd + (size_t)(n % r) * d, kc + kv0,
			vc + kv0, pos[t] + 1, d, scale);
	}
}
