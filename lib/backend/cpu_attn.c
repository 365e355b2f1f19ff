/* lib/backend: GQA self-attention for the CPU backend, causal or under a key padding mask
 * (backend.h attn_forward, MGT_ATTN_SELF), and cross-attention (MGT_ATTN_CROSS), flash-attention style (Dao et al. 2022, "FlashAttention", algorithms 1
 * and 2 with the backward's D = rowsum(dO * O)).
 *
 * Everything is one block code (backend.h MGT_ATTN_BLOCK): the queries of sq positions against the
 * keys of sk positions, placed by their global positions qoff and koff, so that query i sees key
 * i' iff i' <= i + (qoff - koff).  The whole-sequence attn_fwd and attn_bwd are the block
 * sq = sk = s, qoff = koff = 0 with the keys and values read from the fused qkv itself (head slots
 * r and r + 1 of r + 2); the context-parallel blocks read them from a packed kv (slots 0 and 1
 * of 2).  Cross-attention is the block sq x sk with the queries read from q [sq*b, ng*r, d] (r
 * slots a group, not r + 2), keys and values from kv, no causal limit (delta = sk) and the dropout
 * index of its two lengths (dsq, dsk; s and s for the others).  The backward writes dQ, dK, dV for
 * the whole sequence and cross-attention, and accumulates them for a block.
 * Under a key padding mask (whole sequence only) every query may see every key: delta is s, so the
 * causal limits cover all keys, and each tile's additive mask (vf: 0 or -inf a key) zeroes the
 * masked probabilities, so the masked loops are the unmasked ones plus one vector add.
 *
 * Nothing O(s^2) is stored.  Queries go in blocks of CPU_AQ rows, keys in tiles of CPU_AK
 * columns up to the causal limit (all of them under a mask); scores and probabilities live in a
 * per-thread CPU_AQ x CPU_AK scratch tile.  All products are sgemm calls made inside the parallel region (single-threaded
 * OpenBLAS) that read q, k, v straight out of the strided activations: consecutive positions of
 * one sequence are b*ng*(r+2)*d floats apart in qkv, b*ng*2*d in kv.
 *
 * Forward: one task per (query block, sequence, head), heaviest blocks first; online softmax over
 * the key tiles, with the running output kept (unnormalized) in `out` itself.  A row that sees no
 * key gets out 0 and lse -inf (and in the backward P = 0, so its gradients are 0).
 * Backward: one task per (sequence, query group), so the group's r query heads accumulate into
 * their shared dK, dV without races; per tile it recomputes P = exp(S - lse) and does
 * dV += Pd^T dO, dPd = dO V^T, dS = P * (dPd * mask - D), dQ += dS K * scale,
 * dK += dS^T Q * scale, where Pd is P with dropout applied.
 * Merging blocks (attn_merge) rescales by the log-sum-exps; attn_kv_copy packs and unpacks kv.
 */
#include "backend/cpu_impl.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

/* One block's geometry (attn.h mgt_attn) with the strides of its tensors. */
typedef struct {
	int sq, sk, b, ng, r, d, H;
	int qoff, koff, delta;      /* delta = qoff - koff: query i sees key i' iff i' <= i + delta */
	int dsq, dsk;               /* the query and key lengths of the dropout index (s, s; sq, sk) */
	int qslots;                 /* head slots per group of the query tensor (r + 2, or r) */
	int kslots, kslot;          /* head slots per group of the K/V tensor, and the key's slot */
	size_t ldq, ldk, ldo, ldl;  /* floats between positions i and i+1 of one sequence in q, kv,
				     * out; between (sequence, head) rows of lse */
	float p;
	uint64_t key;
	int head0, heads_total;
	const uint8_t *km;          /* key padding mask [sk*b] (key i' of sequence j: km[i'*b + j]);
				     * NULL: causal */
	const int32_t *seg;         /* packed sequences (whole sequence, causal): query i of sequence j
				     * sees keys seg[i*b + j] <= i' <= i only; NULL: all i' <= i */
	/* position bias (backend.h mgt_attn.bias; whole sequence only): bias [2 s - 1,
	 * heads_total], score (i, i') of head n += bias[(i' - i + s - 1) heads_total + head0 + n];
	 * the backward accumulates dS into dbias likewise.  NULL: none */
	const float *bias;
	float *dbias;
} geom;

static geom geom_blk(const mgt_attn *g, int kslots, int kslot)
{
	geom G = {g->sq, g->sk, g->b, g->ng, g->r, g->d, g->ng * g->r, g->qoff, g->koff,
		  g->qoff - g->koff, g->s, g->s, g->r + 2, kslots, kslot, 0, 0, 0, (size_t)g->ld_lse, g->p,
		  g->key, g->head0, g->heads_total, NULL, NULL, NULL, NULL};
	G.ldq = (size_t)g->b * g->ng * (g->r + 2) * g->d;
	G.ldk = (size_t)g->b * g->ng * kslots * g->d;
	G.ldo = (size_t)g->b * g->ng * g->r * g->d;
	return G;
}

/* The whole sequence of a (MGT_ATTN_SELF): keys and values in qkv's slots r and r + 1; causal
 * (within a->seg_start's documents when set), or with key mask km (no causal limit: delta = s);
 * with its position bias and the bias's gradient. */
static geom geom_seq(const mgt_attn *a)
{
	const mgt_attn g = { .sq = a->s, .sk = a->s, .b = a->b, .ng = a->ng, .r = a->r, .d = a->d, .s = a->s,
			     .ld_lse = a->s, .p = a->p, .key = a->key, .head0 = a->head0,
			     .heads_total = a->heads_total };
	geom G = geom_blk(&g, a->r + 2, a->r);
	if (a->key_mask)
		G.km = a->key_mask, G.delta = a->s;
	G.seg = a->key_mask ? NULL : a->seg_start;
	G.bias = a->bias, G.dbias = a->bias ? a->dbias : NULL;
	return G;
}

/* Keys before column lo(i) of a packed row's tile k0..: sr[c] = -inf for c < lo, lo = the start
 * of query i's document minus k0, at most lim (G->seg NULL: nothing). */
CPU_INLINE void cut_seg(const geom *g, float *sr, int j, int i, int k0, int lim)
{
	if (!g->seg)
		return;
	const int lo = g->seg[(size_t)i * g->b + j] - k0;
	for (int c = 0; c < lo && c < lim; c++)
		sr[c] = -INFINITY;
}

/* The first key tile that rows i0.. of sequence j may see: 0, or for packed rows the tile holding
 * the start of row i0's document (starts do not decrease along a row). */
static int key_begin(const geom *g, int j, int i0)
{
	return g->seg ? g->seg[(size_t)i0 * g->b + j] / CPU_AK * CPU_AK : 0;
}

/* The key mask of keys k0..k0+kn-1 of sequence j as scores to add into vf (0 visible, -inf
 * masked: x + 0 is x, so visible scores keep their bits); NULL when causal. */
static const float *tile_vis(const geom *g, float *vf, int j, int k0, int kn)
{
	if (!g->km)
		return NULL;
	for (int c = 0; c < kn; c++)
		vf[c] = g->km[(size_t)(k0 + c) * g->b + j] ? 0.0f : -INFINITY;
	return vf;
}

/* sr[c] += vf[c] for c < lim (vf NULL: nothing). */
CPU_INLINE void add_vis(float *sr, const float *vf, int lim)
{
	if (!vf)
		return;
#pragma omp simd
	for (int c = 0; c < lim; c++)
		sr[c] += vf[c];
}

/* The position bias of query row i of head n against keys k0.. (element c at [c * heads_total]),
 * or NULL without one. */
static const float *bias_row(const geom *g, const float *bias, int n, int i, int k0)
{
	if (!bias)
		return NULL;
	return bias + (size_t)(g->koff + k0 - g->qoff - i + g->dsq - 1) * (size_t)g->heads_total + (size_t)(g->head0 + n);
}

/* sr[c] += br[c * ht] for c < lim (br NULL: nothing). */
CPU_INLINE void add_bias(float *sr, const float *br, int lim, int ht)
{
	if (!br)
		return;
#pragma omp simd
	for (int c = 0; c < lim; c++)
		sr[c] += br[(size_t)c * (size_t)ht];
}

/* Query slot m of group grp, position 0 of sequence j, in q. */
static size_t q_off(const geom *g, int j, int grp, int m)
{
	return ((size_t)j * g->ng + grp) * (size_t)g->qslots * g->d + (size_t)m * g->d;
}

/* The key head of group grp, position 0 of sequence j, in kv (the value head follows). */
static size_t k_off(const geom *g, int j, int grp)
{
	return (((size_t)j * g->ng + grp) * (size_t)g->kslots + (size_t)g->kslot) * g->d;
}

static size_t out_off(const geom *g, int j, int n)
{
	return ((size_t)j * g->H + n) * (size_t)g->d;
}

/* Keys [0, kend) seen by some query of rows [i0, i1): kend <= 0 when none. */
static int key_end(const geom *g, int i1) { return i1 + g->delta < g->sk ? i1 + g->delta : g->sk; }

/* Dropout on a row of n <= CPU_AK probabilities of query row i against keys k0..k0+n-1 (block
 * positions) of the score plane starting at rowbase: pr[c] *= keep / (1 - p) by the word
 * mgt_attn_drop_word gives (global positions qoff + i, koff + k0 + c), and with mk the 0/1 mask
 * kept there.  The row's 16-column blocks take 8 Philox counters each, two words of each used. */
CPU_INLINE void drop_row(float *pr, uint8_t *mk, int n, const geom *G, uint64_t rowbase, int i, int k0, float ks)
{
	enum { NW2 = CPU_AK / 2 + 16 };
	uint32_t wa[NW2], wb[NW2], w[2 * NW2];
	const uint64_t q = (uint64_t)(G->qoff + i);
	const int kg = G->koff + k0, b0 = kg >> 4, nb = ((kg + n - 1) >> 4) - b0 + 1;
	const float p = G->p;
	mgt_cpu_philox_pairs(wa, wb, G->key, (rowbase + (q & ~(uint64_t)8)) * (uint64_t)G->dsk + (uint64_t)b0 * 16,
			     nb * 8, (int)(q >> 3) & 1);
	for (int t = 0; t < nb; t++) /* key (b0 + t) * 16 + c takes w[16 t + c]: wa's 8 words, then wb's */
		memcpy(w + 16 * t, wa + 8 * t, 8 * sizeof *w), memcpy(w + 16 * t + 8, wb + 8 * t, 8 * sizeof *w);
	const uint32_t *wr = w + (kg & 15);
	if (mk) {
#pragma omp simd
		for (int c = 0; c < n; c++) {
			const float keep = cpu_keep_w(wr[c], p);
			mk[c] = (uint8_t)keep;
			pr[c] *= keep * ks;
		}
	} else {
#pragma omp simd
		for (int c = 0; c < n; c++)
			pr[c] *= cpu_keep_w(wr[c], p) * ks;
	}
}

/* Number of keys of tile [k0, k0 + kn) that query i may see (0 to kn). */
static inline int causal_lim(const geom *g, int i, int k0, int kn)
{
	const int lim = i + g->delta - k0 + 1;
	return lim < 0 ? 0 : lim < kn ? lim : kn;
}


/* The max of scores sr[0..lim); -inf when none (or all -inf: masked). */
CPU_INLINE float row_max(const float *sr, int lim)
{
	float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
	for (int c = 0; c < lim; c++)
		mx = sr[c] > mx ? sr[c] : mx;
	return mx;
}

/* sr[c] = exp(sr[c] - m) for c < lim (0 for the -inf of masked keys; m finite); returns their
 * sum. */
CPU_INLINE float row_exp(float *sr, int lim, float m)
{
	float sum = 0;
#pragma omp simd reduction(+ : sum)
	for (int c = 0; c < lim; c++) {
		float e = cpu_expf(sr[c] - m);
		sr[c] = e;
		sum += e;
	}
	return sum;
}

/* Forward, one score tile S [M, kn] of query rows i0.. against keys k0.. (vf: their additive
 * mask, tile_vis; NULL when causal): turns it into (dropped-out) unnormalized probabilities under the running row max
 * mrun, updates the running sums lrun, and rescales the output rows accumulated so far.  Rows that
 * saw no key yet keep mrun -inf and lrun 0. */
CPU_CLONES static void fwd_tile(const geom *G, float *S, const float *vf, int M, int kn, int i0, int k0,
				bool first, float *mrun, float *lrun, float *O, float ks, uint64_t rowbase, int n, int j)
{
	for (int rr = 0; rr < M; rr++) {
		const int i = i0 + rr, lim = causal_lim(G, i, k0, kn);
		float *sr = S + (size_t)rr * CPU_AK;
		add_bias(sr, bias_row(G, G->bias, n, i, k0), lim, G->heads_total);
		add_vis(sr, vf, lim);
		cut_seg(G, sr, j, i, k0, lim);
		const float mx = row_max(sr, lim);
		const float mnew = first || mx > mrun[rr] ? mx : mrun[rr];
		const float sum = mnew > -INFINITY ? row_exp(sr, lim, mnew) : 0.0f;
		for (int c = mnew > -INFINITY ? lim : 0; c < kn; c++) /* past the limit; all when none seen */
			sr[c] = 0.0f;
		if (first) {
			lrun[rr] = sum;
		} else if (mnew > -INFINITY) {
			const float alpha = cpu_expf(mrun[rr] - mnew);
			lrun[rr] = lrun[rr] * alpha + sum;
			float *o = O + (size_t)rr * G->ldo;
#pragma omp simd
			for (int c = 0; c < G->d; c++)
				o[c] *= alpha;
		}
		mrun[rr] = mnew;
		if (G->p > 0 && lim > 0)
			drop_row(sr, NULL, lim, G, rowbase, i, k0, ks);
	}
}

static void fwd_block(const geom *G, float *out, float *lse, const float *q, const float *kv, int j, int n,
		      int i0, float *S)
{
	const int d = G->d, grp = n / G->r, m = n % G->r;
	const int M = G->sq - i0 < CPU_AQ ? G->sq - i0 : CPU_AQ, kend = key_end(G, i0 + M);
	const float scale = 1.0f / sqrtf((float)d), ks = G->p > 0 ? 1.0f / (1.0f - G->p) : 1.0f;
	const float *Q = q + q_off(G, j, grp, m) + (size_t)i0 * G->ldq;
	const float *K = kv + k_off(G, j, grp), *V = K + d;
	float *O = out + out_off(G, j, n) + (size_t)i0 * G->ldo;
	float mrun[CPU_AQ], lrun[CPU_AQ];
	float vf[CPU_AK];
	const uint64_t rowbase = ((uint64_t)j * G->heads_total + G->head0 + n) * (uint64_t)G->dsq;

	const int kbeg = key_begin(G, j, i0);
	for (int rr = 0; rr < M; rr++)
		mrun[rr] = -INFINITY, lrun[rr] = 0.0f;
	for (int k0 = kbeg; k0 < kend; k0 += CPU_AK) {
		const int kn = kend - k0 < CPU_AK ? kend - k0 : CPU_AK;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, scale, Q, (int)G->ldq,
			    K + (size_t)k0 * G->ldk, (int)G->ldk, 0.0f, S, CPU_AK);
		fwd_tile(G, S, tile_vis(G, vf, j, k0, kn), M, kn, i0, k0, k0 == kbeg, mrun, lrun, O, ks, rowbase, n,
			 j);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, d, kn, 1.0f, S, CPU_AK,
			    V + (size_t)k0 * G->ldk, (int)G->ldk, k0 == kbeg ? 0.0f : 1.0f, O, (int)G->ldo);
	}
	float *L = lse + ((size_t)j * G->H + n) * G->ldl + i0;
	for (int rr = 0; rr < M; rr++) {
		float *o = O + (size_t)rr * G->ldo;
		if (lrun[rr] > 0) {
			const float inv = 1.0f / lrun[rr];
#pragma omp simd
			for (int c = 0; c < d; c++)
				o[c] *= inv;
			L[rr] = mrun[rr] + logf(lrun[rr]);
		} else { /* no visible key */
			memset(o, 0, (size_t)d * sizeof *o);
			L[rr] = -INFINITY;
		}
	}
}

static void blk_fwd(mgt_backend *be, const geom *G, float *out, float *lse, const float *q, const float *kv)
{
	if (G->sq <= 0 || G->sk <= 0 || G->b <= 0 || G->ng <= 0 || G->r <= 0 || G->d <= 0)
		return;
	const int nqb = (G->sq + CPU_AQ - 1) / CPU_AQ, per = G->b * G->H;
	const long ntask = (long)nqb * per;
#pragma omp parallel num_threads(cpu_threads(be)) if (ntask > 1 && (long)G->sq * G->sk * G->d * per > 200000)
	{
		float *S = (float *)cpu_scratch(be, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
		for (long task = 0; task < ntask; task++) {
			const int qb = nqb - 1 - (int)(task / per), rem = (int)(task % per);
			fwd_block(G, out, lse, q, kv, rem / G->H, rem % G->H, qb * CPU_AQ, S);
		}
	}
}

void mgt_cpu_attn_fwd32(mgt_backend *be, const mgt_attn *a, float *out, float *lse, const float *qkv)
{
	const geom G = geom_seq(a);
	blk_fwd(be, &G, out, lse, qkv, qkv);
}

static void blk_fwd_op(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *q,
			  const float *kv)
{
	const geom G = geom_blk(g, 2, 0);
	blk_fwd(be, &G, out, lse, q, kv);
}

void mgt_cpu_attn_merge(mgt_backend *be, const mgt_attn *g, float *out, float *lse, const float *ob,
			    const float *lb)
{
	if (g->sq <= 0 || g->b <= 0 || g->ng <= 0 || g->r <= 0 || g->d <= 0)
		return;
	const int H = g->ng * g->r, d = g->d, sq = g->sq, b = g->b;
	const long nrow = (long)b * H;
#pragma omp parallel for num_threads(cpu_threads(be)) if (nrow > 1 && nrow * sq * d > CPU_PAR_MIN)
	for (long jn = 0; jn < nrow; jn++) {
		float *L = lse + (size_t)jn * g->ld_lse;
		const float *Lb = lb + (size_t)jn * g->ld_lse;
		const int j = (int)(jn / H), n = (int)(jn % H);
		for (int i = 0; i < sq; i++) {
			const float la = L[i], lc = Lb[i];
			const float hi = la > lc ? la : lc, lo = la > lc ? lc : la;
			if (!(hi > -INFINITY))
				continue; /* both -inf: nothing to add */
			const float l = hi + log1pf(expf(lo - hi)), wa = expf(la - l), wb = expf(lc - l);
			const size_t oo = (((size_t)i * b + j) * H + n) * (size_t)d;
			float *o = out + oo;
			const float *oc = ob + oo;
#pragma omp simd
			for (int c = 0; c < d; c++)
				o[c] = o[c] * wa + oc[c] * wb;
			L[i] = l;
		}
	}
}

/* Backward, one tile: A [M, kn] holds the scores; make it P = exp(S - lse) (0 past the causal
 * limit and for the keys vf masks; a row whose lse is -inf, which sees no key, all 0) and, with dropout, B = P * mask / (1 - p)
 * and the mask in mk. */
CPU_CLONES static void bwd_tile_p(const geom *G, float *A, float *B, uint8_t *mk, const float *vf, int M,
				  int kn, int i0, int k0, const float *L, float ks, uint64_t rowbase, int n, int j)
{
	for (int rr = 0; rr < M; rr++) {
		const int i = i0 + rr, lim = causal_lim(G, i, k0, kn);
		float *ar = A + (size_t)rr * CPU_AK;
		const float l = L[rr];
		const int live = l > -INFINITY ? lim : 0; /* lse -inf: no visible key in the row */
		add_bias(ar, bias_row(G, G->bias, n, i, k0), live, G->heads_total);
		add_vis(ar, vf, live);
		cut_seg(G, ar, j, i, k0, live);
#pragma omp simd
		for (int c = 0; c < live; c++)
			ar[c] = cpu_expf(ar[c] - l);
		for (int c = live; c < kn; c++)
			ar[c] = 0.0f;
		if (G->p > 0) {
			float *br = B + (size_t)rr * CPU_AK;
			memcpy(br, ar, (size_t)kn * sizeof *br);
			if (lim > 0)
				drop_row(br, mk + (size_t)rr * CPU_AK, lim, G, rowbase, i, k0, ks);
		}
	}
}

/* dS = P * (dPd * mask / (1 - p) - D) into A, from P in A and dPd in B. */
CPU_CLONES static void bwd_tile_ds(const geom *G, float *A, const float *B, const uint8_t *mk, int M, int kn,
				   int i0, int k0, const float *D, float ks)
{
	for (int rr = 0; rr < M; rr++) {
		const int lim = causal_lim(G, i0 + rr, k0, kn);
		float *ar = A + (size_t)rr * CPU_AK;
		const float *br = B + (size_t)rr * CPU_AK;
		const float dr = D[rr];
		if (G->p > 0) {
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

/* The tensors of a backward. */
typedef struct {
	float *dq, *dkv;
	const float *dout, *q, *kv, *out, *lse;
	bool acc; /* dQ accumulates (else the first key tile writes it) */
} bwd_args;

/* One query block of head n (group grp, slot m) against all its key tiles; with a position bias,
 * dS summed by distance into G->dbias's column of the head (owned by the caller's task). */
static void bwd_block(const geom *G, const bwd_args *a, int j, int grp, int m, int i0, unsigned char *scratch)
{
	const int d = G->d, n = grp * G->r + m;
	const int M = G->sq - i0 < CPU_AQ ? G->sq - i0 : CPU_AQ, kend = key_end(G, i0 + M);
	if (kend <= 0)
		return;
	const float scale = 1.0f / sqrtf((float)d), ks = G->p > 0 ? 1.0f / (1.0f - G->p) : 1.0f;
	float *A = (float *)scratch, *B = A + CPU_AQ * CPU_AK;
	uint8_t *mk = (uint8_t *)(B + CPU_AQ * CPU_AK);
	float *D = (float *)(mk + CPU_AQ * CPU_AK);
	float vf[CPU_AK];
	const size_t qo = q_off(G, j, grp, m) + (size_t)i0 * G->ldq, ko = k_off(G, j, grp);
	const float *Q = a->q + qo, *K = a->kv + ko, *V = K + d;
	float *dQ = a->dq + qo, *dK = a->dkv + ko, *dV = dK + d;
	const size_t oo = out_off(G, j, n) + (size_t)i0 * G->ldo;
	const float *dO = a->dout + oo, *O = a->out + oo;
	const float *L = a->lse + ((size_t)j * G->H + n) * G->ldl + i0;
	const uint64_t rowbase = ((uint64_t)j * G->heads_total + G->head0 + n) * (uint64_t)G->dsq;
	const int ldq = (int)G->ldq, ldk = (int)G->ldk, ldo = (int)G->ldo;

	for (int rr = 0; rr < M; rr++) {
		const float *x = dO + (size_t)rr * G->ldo, *o = O + (size_t)rr * G->ldo;
		double acc = 0;
#pragma omp simd reduction(+ : acc)
		for (int c = 0; c < d; c++)
			acc += (double)x[c] * o[c];
		D[rr] = (float)acc;
	}
	const int kbeg = key_begin(G, j, i0);
	for (int k0 = kbeg; k0 < kend; k0 += CPU_AK) {
		const int kn = kend - k0 < CPU_AK ? kend - k0 : CPU_AK;
		const size_t kr = (size_t)k0 * G->ldk;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, scale, Q, ldq, K + kr, ldk,
			    0.0f, A, CPU_AK);
		bwd_tile_p(G, A, B, mk, tile_vis(G, vf, j, k0, kn), M, kn, i0, k0, L, ks, rowbase, n, j);
		/* dV[tile] += Pd^T dO */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d, M, 1.0f, G->p > 0 ? B : A,
			    CPU_AK, dO, ldo, 1.0f, dV + kr, ldk);
		/* dPd = dO V^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kn, d, 1.0f, dO, ldo, V + kr,
			    ldk, 0.0f, B, CPU_AK);
		bwd_tile_ds(G, A, B, mk, M, kn, i0, k0, D, ks);
		float *db = G->dbias ? G->dbias + G->head0 + n : NULL;
		for (int rr = 0; db && rr < M; rr++) /* the position bias's gradient: dS by distance */
			for (int c = 0, lim = causal_lim(G, i0 + rr, k0, kn); c < lim; c++)
				db[(size_t)(k0 + c - (i0 + rr) + G->dsq - 1) * (size_t)G->heads_total] +=
					A[(size_t)rr * CPU_AK + c];
		/* dQ (+)= dS K * scale;  dK[tile] += dS^T Q * scale */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, d, kn, scale, A, CPU_AK, K + kr,
			    ldk, k0 == kbeg && !a->acc ? 0.0f : 1.0f, dQ, ldq);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d, M, scale, A, CPU_AK, Q, ldq,
			    1.0f, dK + kr, ldk);
	}
}

/* The backward of a block; with a->acc false it writes dQ and dK, dV (for the whole sequence,
 * where every query sees key 0) instead of accumulating. */
static void blk_bwd(mgt_backend *be, const geom *G, const bwd_args *a)
{
	if (G->sq <= 0 || G->sk <= 0 || G->b <= 0 || G->ng <= 0 || G->r <= 0 || G->d <= 0)
		return;
	/* with a position bias, one task per query group over every sequence: the task owns its heads'
	 * columns of dbias and adds into them in a fixed order (sequence, head, query block, key tile) */
	const bool bygrp = G->dbias != NULL;
	const int ntask = bygrp ? G->ng : G->b * G->ng;
#pragma omp parallel num_threads(cpu_threads(be)) \
	if (ntask > 1 && (long)G->sq * G->sk * G->d * G->b * G->H > 200000)
	{
		unsigned char *scratch = cpu_scratch(be, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
		for (int task = 0; task < ntask; task++) {
			const int grp = task % G->ng, j0 = bygrp ? 0 : task / G->ng, j1 = bygrp ? G->b : j0 + 1;
			for (int j = j0; j < j1; j++) {
				for (int i = 0; !a->acc && i < G->sk; i++) /* dK, dV rows from 0 */
					memset(a->dkv + k_off(G, j, grp) + (size_t)i * G->ldk, 0,
					       2 * (size_t)G->d * sizeof(float));
				for (int m = 0; m < G->r; m++)
					for (int i0 = 0; i0 < G->sq; i0 += CPU_AQ)
						bwd_block(G, a, j, grp, m, i0, scratch);
			}
		}
	}
}

void mgt_cpu_attn_bwd32(mgt_backend *be, const mgt_attn *a, float *dqkv, const float *dout, const float *qkv,
			const float *out, const float *lse)
{
	const geom G = geom_seq(a);
	const bwd_args ar = {dqkv, dqkv, dout, qkv, qkv, out, lse, false};
	blk_bwd(be, &G, &ar);
}

static void blk_bwd_op(mgt_backend *be, const mgt_attn *g, float *dq, float *dkv, const float *dout,
			  const float *q, const float *kv, const float *out, const float *lse)
{
	const geom G = geom_blk(g, 2, 0);
	const bwd_args a = {dq, dkv, dout, q, kv, out, lse, true};
	blk_bwd(be, &G, &a);
}

/* Cross-attention (backend.h attn_forward / attn_backward, MGT_ATTN_CROSS): the block sq x sk with
 * queries from q [sq*b, ng*r, d] (r slots a group), keys and values from kv [sk*b, ng, 2, d], no causal limit
 * (delta = sk: every key is under it), key mask km or none, and the dropout index
 * ((j*heads_total + head0 + n)*sq + i)*sk + i'. */
static geom geom_x(int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0,
		   int heads_total, const uint8_t *km)
{
	const mgt_attn g = { .sq = sq, .sk = sk, .b = b, .ng = ng, .r = r, .d = d, .s = sq, .ld_lse = sq, .p = p,
			     .key = key, .head0 = head0, .heads_total = heads_total };
	geom G = geom_blk(&g, 2, 0);
	G.delta = sk, G.dsq = sq, G.dsk = sk, G.qslots = r, G.km = km;
	G.ldq = (size_t)b * ng * r * d;
	return G;
}

void mgt_cpu_xattn_fwd32(mgt_backend *be, float *out, float *lse, const float *q, const float *kv, int sq,
			 int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask)
{
	const geom G = geom_x(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	blk_fwd(be, &G, out, lse, q, kv);
}

void mgt_cpu_xattn_bwd32(mgt_backend *be, float *dq, float *dkv, const float *dout, const float *q,
			 const float *kv, const float *out, const float *lse, int sq, int sk, int b, int ng,
			 int r, int d, float p, uint64_t key, int head0, int heads_total,
			 const uint8_t *key_mask)
{
	const geom G = geom_x(sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	const bwd_args a = {dq, dkv, dout, q, kv, out, lse, false};
	blk_bwd(be, &G, &a);
}

void mgt_cpu_attn_kv_copy(mgt_backend *be, float *qkv, float *kv, int T, int ng, int r, int d, bool to_kv)
{
	if (T <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const long rows = (long)T * ng;
	const size_t w = 2 * (size_t)d;
#pragma omp parallel for num_threads(cpu_threads(be)) if (rows > 1 && rows * (long)w > CPU_PAR_MIN)
	for (long t = 0; t < rows; t++) {
		float *a = qkv + (size_t)t * (size_t)(r + 2) * d + (size_t)r * d, *c = kv + (size_t)t * w;
		if (to_kv)
			memcpy(c, a, w * sizeof *c);
		else
			memcpy(a, c, w * sizeof *a);
	}
}

/* ---- attention against a key/value cache (backend.h attn_decode) ----
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

/* o[d] = softmax(scale q.K[i] + br[i ht], i < np) . V, K and V [np, d] (br NULL: no bias). */
static void kv_head(float *o, const float *q, const float *K, const float *V, int np, int d, float scale,
		    const float *br, int ht)
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
			if (br)
				sc[i] += br[(size_t)(k0 + i) * (size_t)ht];
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

static void kv_decode(mgt_backend *be, float *out, float *kc, float *vc, const float *qkv, const int32_t *seq,
		     const int32_t *pos, int T, int ng, int r, int d, int S, const float *bias, int bs)
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
			vc + kv0, pos[t] + 1, d, scale,
			bias ? bias + (size_t)(bs - 1 - pos[t]) * (size_t)H + (size_t)n : NULL, H);
	}
}

/* ---- the ops: the code above on fp32 values (16-bit qkv and out widened, out rounded) ---- */

/* Self-attention (key mask, position bias, packed documents as a says). */
static void attn_fwd_b(mgt_backend *be, const mgt_attn *a, void *out, float *lse, const void *qkv)
{
	const mgt_elem_type t = a->t;
	if (t == MGT_DT_F32) {
		mgt_cpu_attn_fwd32(be, a, out, lse, qkv);
		return;
	}
	const size_t T = (size_t)a->s * a->b, no = T * a->ng * a->r * a->d;
	const float *q = cpu_widen(be, 0, qkv, t, T * a->ng * (a->r + 2) * a->d);
	float *o = mgt_cpu_round_buf(be, 1, no);
	if (!q || !o)
		return;
	mgt_cpu_attn_fwd32(be, a, o, lse, q);
	mgt_cpu_cast(be, out, t, o, no);
}

/* Self-attention's backward.  16-bit gradients: dout widened into rounding buffer 5, dqkv
 * computed in buffer 4 and rounded. */
static void attn_bwd_b(mgt_backend *be, const mgt_attn *a, void *dqkv, const void *dout, const void *qkv,
		       const void *out, const float *lse)
{
	const mgt_elem_type t = a->t, gt = a->gt;
	const size_t T = (size_t)a->s * a->b, nq = T * a->ng * (a->r + 2) * a->d, no = T * a->ng * a->r * a->d;
	if (!nq)
		return;
	const float *q = cpu_widen(be, 0, qkv, t, nq), *o = cpu_widen(be, 1, out, t, no), *g = cpu_widen(be, 5, dout, gt, no);
	float *dq = cpu_out32(be, dqkv, gt, nq);
	if (!q || !o || !g || !dq)
		return;
	mgt_cpu_attn_bwd32(be, a, dq, g, q, o, lse);
	cpu_narrow(be, dqkv, gt, dq, nq);
}

/* Cross-attention: q widened into rounding buffer 0, kv into 2, out computed in 1 and rounded. */
static void xattn_fwd(mgt_backend *be, void *out, float *lse, const void *q, const void *kv, mgt_elem_type t,
		       int sq, int sk, int b, int ng, int r, int d, float p, uint64_t key, int head0, int heads_total,
		       const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d;
	const float *q32 = cpu_widen(be, 0, q, t, no), *kv32 = cpu_widen(be, 2, kv, t, nk);
	float *o = t == MGT_DT_F32 ? out : mgt_cpu_round_buf(be, 1, no);
	if (!q32 || !kv32 || !o)
		return;
	mgt_cpu_xattn_fwd32(be, o, lse, q32, kv32, sq, sk, b, ng, r, d, p, key, head0, heads_total, key_mask);
	cpu_narrow(be, out, t, o, no);
}

/* 16-bit inputs widened (q 0, out 1, kv 2, dout 5), 16-bit gradients computed in 4 (dq) and 3 (dkv). */
static void xattn_bwd(mgt_backend *be, void *dq, void *dkv, const void *dout, mgt_elem_type gt, const void *q,
		       const void *kv, const void *out, mgt_elem_type t, const float *lse, int sq, int sk, int b, int ng,
		       int r, int d, float p, uint64_t key, int head0, int heads_total, const uint8_t *key_mask)
{
	if (sq <= 0 || sk <= 0 || b <= 0 || ng <= 0 || r <= 0 || d <= 0)
		return;
	const size_t no = (size_t)sq * b * ng * r * d, nk = (size_t)sk * b * ng * 2 * d;
	const float *q32 = cpu_widen(be, 0, q, t, no), *o32 = cpu_widen(be, 1, out, t, no), *kv32 = cpu_widen(be, 2, kv, t, nk);
	const float *g = cpu_widen(be, 5, dout, gt, no);
	float *dq32 = cpu_out32(be, dq, gt, no), *dkv32 = gt == MGT_DT_F32 ? dkv : mgt_cpu_round_buf(be, 3, nk);
	if (!q32 || !o32 || !kv32 || !g || !dq32 || !dkv32)
		return;
	mgt_cpu_xattn_bwd32(be, dq32, dkv32, g, q32, kv32, o32, lse, sq, sk, b, ng, r, d, p, key, head0, heads_total,
			    key_mask);
	cpu_narrow(be, dq, gt, dq32, no);
	cpu_narrow(be, dkv, gt, dkv32, nk);
}

/* ---- the ops of backend.h on the descriptor (attn.h mgt_attn) ---- */

void mgt_cpu_attn_forward(mgt_backend *be, const mgt_attn *a, void *out, float *lse, const void *q, const void *kv)
{
	switch (a->kind) {
	case MGT_ATTN_SELF:
		attn_fwd_b(be, a, out, lse, q);
		break;
	case MGT_ATTN_CROSS:
		xattn_fwd(be, out, lse, q, kv, a->t, a->sq, a->sk, a->b, a->ng, a->r, a->d, a->p, a->key, a->head0,
			  a->heads_total, a->key_mask);
		break;
	case MGT_ATTN_BLOCK:
		blk_fwd_op(be, a, out, lse, q, kv);
		break;
	}
}

void mgt_cpu_attn_backward(mgt_backend *be, const mgt_attn *a, void *dq, void *dkv, const void *dout, const void *q,
			   const void *kv, const void *out, const float *lse)
{
	switch (a->kind) {
	case MGT_ATTN_SELF:
		attn_bwd_b(be, a, dq, dout, q, out, lse);
		break;
	case MGT_ATTN_CROSS:
		xattn_bwd(be, dq, dkv, dout, a->gt, q, kv, out, a->t, lse, a->sq, a->sk, a->b, a->ng, a->r, a->d, a->p,
			  a->key, a->head0, a->heads_total, a->key_mask);
		break;
	case MGT_ATTN_BLOCK:
		blk_bwd_op(be, a, dq, dkv, dout, q, kv, out, lse);
		break;
	}
}

void mgt_cpu_attn_decode(mgt_backend *be, const mgt_attn *a, float *out, float *kc, float *vc, const float *qkv,
			 const int32_t *seq, const int32_t *pos)
{
	kv_decode(be, out, kc, vc, qkv, seq, pos, a->sq, a->ng, a->r, a->d, a->sk, a->bias, a->s);
}
