/* lib/model/moe_route.c: the MoE router's math on the host, in double precision (Megatron-Core
 * megatron/core/transformer/moe/router.py TopKRouter.routing, moe_utils.py
 * topk_routing_with_score_function, group_limited_topk, compute_routing_scores_for_aux_loss,
 * switch_load_balancing_loss_func, z_loss_func, apply_router_token_dropping).  Forward:
 * probabilities, chosen experts, token dropping, the auxiliary and z losses and tokens per expert.
 * Backward: the gradient of the router logits from the gradient of the routed probabilities plus
 * the auxiliary and z losses. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Indices of the k largest of v[0..n) (n <= MGT_MOE_MAX_EXPERTS), in descending order of value;
 * ties go to the lower index (torch.topk leaves them unspecified). */
static void topk(const double *v, int n, int k, int *idx)
{
	char taken[MGT_MOE_MAX_EXPERTS];
	memset(taken, 0, (size_t)n);
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++)
			if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
		idx[j] = best;
		taken[best] = 1;
	}
}

static void softmax(const double *x, int n, double *y)
{
	double mx = -INFINITY, s = 0;
	for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++) s += (y[i] = exp(x[i] - mx));
	for (int i = 0; i < n; i++) y[i] /= s;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Top-k of scores [E] with group-limited routing (DeepSeek): the groups with the largest sums of
 * their top k/group_topk scores are kept, the others masked out.  work: [E] doubles. */
static void select_topk(const mgt_model_config *c, const double *scores, int E, int k, int *idx, double *work)
{
	int G = (int)c->moe_router_num_groups, gk = (int)c->moe_router_group_topk;
	if (G <= 1 || gk <= 0) {
		topk(scores, E, k, idx);
		return;
	}
	int per = E / G, kk = k / gk, gsel[MGT_MOE_MAX_EXPERTS], tmp[MGT_MOE_MAX_TOPK];
	double gs[MGT_MOE_MAX_EXPERTS];
	for (int g = 0; g < G; g++) {
		topk(scores + g * per, per, kk, tmp);
		gs[g] = 0;
		for (int q = 0; q < kk; q++) gs[g] += scores[g * per + tmp[q]];
	}
	topk(gs, G, gk, gsel);
	for (int i = 0; i < E; i++) work[i] = -INFINITY;
	for (int q = 0; q < gk; q++)
		for (int i = gsel[q] * per; i < (gsel[q] + 1) * per; i++) work[i] = scores[i];
	topk(work, E, k, idx);
}

/* Route one token: logits L [E] -> chosen experts sel [k] (descending order) and probs [k]. */
static void route_token(const mgt_model_config *c, const double *L, const float *bias, int E, int k, int *sel,
			double *prob, double *work)
{
	double *s = work, *w2 = work + E;
	double sf = c->moe_router_topk_scaling_factor > 0 ? c->moe_router_topk_scaling_factor : 1.0;
	if (!strcmp(c->moe_router_score_function, "sigmoid")) {
		for (int i = 0; i < E; i++) s[i] = sigmoid(L[i]);
		double *r = w2 + E;
		for (int i = 0; i < E; i++) r[i] = s[i] + (bias ? (double)bias[i] : 0.0);
		select_topk(c, r, E, k, sel, w2);
		double z = 0;
		for (int j = 0; j < k; j++) z += s[sel[j]];
		for (int j = 0; j < k; j++) prob[j] = (k > 1 ? s[sel[j]] / (z + 1e-20) : s[sel[j]]) * sf;
	} else if (c->moe_router_pre_softmax) {
		softmax(L, E, s);
		select_topk(c, s, E, k, sel, w2);
		for (int j = 0; j < k; j++) prob[j] = s[sel[j]] * sf;
	} else {
		select_topk(c, L, E, k, sel, w2);
		double v[MGT_MOE_MAX_TOPK];
		for (int j = 0; j < k; j++) v[j] = L[sel[j]];
		softmax(v, k, prob);
		for (int j = 0; j < k; j++) prob[j] *= sf;
	}
}

/* The scores of the auxiliary loss (compute_routing_scores_for_aux_loss): softmax over E, or
 * sigmoid normalized over E; and their top-k (no groups, no bias). */
static void aux_scores(const mgt_model_config *c, const double *L, int E, double *p)
{
	if (!strcmp(c->moe_router_score_function, "sigmoid")) {
		double z = 0;
		for (int i = 0; i < E; i++) z += (p[i] = sigmoid(L[i]));
		for (int i = 0; i < E; i++) p[i] /= z + 1e-20;
	} else {
		softmax(L, E, p);
	}
}

/* Token dropping of tokens [t0, t0 + n) (one TP rank's rows under SP, as Megatron drops on its
 * local tokens): capacity ceil(n k / E * factor) per expert, keeping the copies with the largest
 * probs (policy probs; ties: the earlier token) or the first tokens (position).  Dropped copies
 * get keep 0. */
typedef struct { double p; int t, q; } copy_ref;
static int by_prob(const void *a, const void *b)
{
	const copy_ref *x = a, *y = b;
	if (x->p != y->p) return x->p > y->p ? -1 : 1;
	return (x->t > y->t) - (x->t < y->t);
}

static void drop_tokens(const mgt_model_config *c, mgt_moe_route *r, int t0, int n)
{
	int E = r->E, k = r->k;
	int cap = (int)ceil((double)n * k / E * c->moe_expert_capacity_factor);
	bool by_pos = !strcmp(c->moe_token_drop_policy, "position");
	copy_ref *v = r->copies;
	for (int e = 0; e < E; e++) {
		int m = 0;
		for (int t = t0; t < t0 + n; t++)
			for (int j = 0; j < k; j++) {
				int q = t * k + j;
				if (r->sel[q] == e) v[m++] = (copy_ref){ r->prob[q], t, q };
			}
		if (!by_pos) qsort(v, (size_t)m, sizeof *v, by_prob);
		for (int i = cap; i < m; i++) r->keep[v[i].q] = 0;
	}
}

/* Counts of tokens whose aux-score top-k includes expert e, over tokens t = i*B + b of sequence
 * b (seq_aux_loss) or all tokens (b < 0), into cnt [E]; also the aux scores into p [T, E]. */
static void aux_counts(const mgt_model_config *c, const mgt_moe_route *r, int b, double *cnt, int *tmp)
{
	int E = r->E, k = r->k;
	memset(cnt, 0, (size_t)E * sizeof *cnt);
	for (int t = 0; t < r->T; t++) {
		if (b >= 0 && t % r->B != b) continue;
		topk(r->ps + (size_t)t * E, E, k, tmp);
		for (int j = 0; j < k; j++) cnt[tmp[j]] += 1;
	}
	(void)c;
}

mgt_status mgt_moe_route_alloc(mgt_moe_route *r, int T, int E, int k, int B)
{
	memset(r, 0, sizeof *r);
	r->T = r->Tg = T, r->E = E, r->k = k, r->B = B;
	size_t tk = (size_t)T * (size_t)k, te = (size_t)T * (size_t)E;
	r->L = mgt_malloc(te * sizeof *r->L);
	r->ps = mgt_malloc(te * sizeof *r->ps);
	r->sel = mgt_malloc(tk * sizeof *r->sel);
	r->keep = mgt_malloc(tk * sizeof *r->keep);
	r->prob = mgt_malloc(tk * sizeof *r->prob);
	r->cnt = mgt_malloc((size_t)E * (size_t)(B + 1) * sizeof *r->cnt);
	r->tokens = mgt_malloc((size_t)E * sizeof *r->tokens);
	r->work = mgt_malloc((size_t)E * 4 * sizeof *r->work);
	r->copies = mgt_malloc(tk * sizeof(copy_ref));
	if (!r->L || !r->ps || !r->sel || !r->keep || !r->prob || !r->cnt || !r->tokens || !r->work || !r->copies) {
		mgt_moe_route_free(r);
		return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}

void mgt_moe_route_free(mgt_moe_route *r)
{
	free(r->L); free(r->ps); free(r->sel); free(r->keep); free(r->prob); free(r->cnt); free(r->tokens);
	free(r->work); free(r->copies);
	memset(r, 0, sizeof *r);
}

mgt_status mgt_moe_route_forward(const mgt_model_config *c, mgt_moe_route *r, const float *bias, int blocks)
{
	int T = r->T, E = r->E, k = r->k;
	double *work = r->work;
	int tmp[MGT_MOE_MAX_TOPK];
	for (int t = 0; t < T; t++) {
		route_token(c, r->L + (size_t)t * E, bias, E, k, r->sel + (size_t)t * k, r->prob + (size_t)t * k, work);
		for (int j = 0; j < k; j++) r->keep[(size_t)t * k + j] = 1;
		aux_scores(c, r->L + (size_t)t * E, E, r->ps + (size_t)t * E);
	}
	if (c->moe_expert_capacity_factor > 0)
		for (int b = 0; b < blocks; b++) drop_tokens(c, r, b * (T / blocks), T / blocks);
	memset(r->tokens, 0, (size_t)E * sizeof *r->tokens);
	for (size_t q = 0; q < (size_t)T * k; q++)
		if (r->keep[q]) r->tokens[r->sel[q]] += 1;
	if (c->moe_expert_capacity_factor > 0 && c->moe_pad_expert_input_to_capacity) {
		/* the routing map is then the capacity mask: every expert holds its capacity (or all the
		 * block's tokens when fewer), padding rows included (apply_router_token_dropping) */
		int n = T / blocks, cap = (int)ceil((double)n * k / E * c->moe_expert_capacity_factor);
		for (int e = 0; e < E; e++) r->tokens[e] = (double)blocks * (cap < n ? cap : n);
	}
	/* auxiliary loss (unscaled: aux / coeff) and z loss (unscaled: mean lse^2) */
	bool seq = !strcmp(c->moe_router_load_balancing_type, "seq_aux_loss");
	bool aux = seq || !strcmp(c->moe_router_load_balancing_type, "aux_loss");
	r->aux = 0;
	if (aux) {
		int nb = seq ? r->B : 1, S = seq ? T / r->B : T;
		for (int b = 0; b < nb; b++) {
			double *cnt = r->cnt + (size_t)b * E;
			aux_counts(c, r, seq ? b : -1, cnt, tmp);
			for (int e = 0; e < E; e++) {
				double ps = 0;
				for (int t = 0; t < T; t++)
					if (!seq || t % r->B == b) ps += r->ps[(size_t)t * E + e];
				r->aux += ps * cnt[e] * E / ((double)k * S * S) / nb;
			}
		}
	}
	r->z = 0;
	for (int t = 0; t < T; t++) {
		const double *L = r->L + (size_t)t * E;
		double mx = -INFINITY, s = 0;
		for (int i = 0; i < E; i++) mx = L[i] > mx ? L[i] : mx;
		for (int i = 0; i < E; i++) s += exp(L[i] - mx);
		r->z += (mx + log(s)) * (mx + log(s)) / T;
	}
	return MGT_OK;
}

/* d(prob) of one token -> d(logits) [E] (added into dL). */
static void token_bwd(const mgt_model_config *c, const double *L, const int *sel, const double *dprob, int E, int k,
		      double *dL, double *work)
{
	double sf = c->moe_router_topk_scaling_factor > 0 ? c->moe_router_topk_scaling_factor : 1.0;
	double dp[MGT_MOE_MAX_TOPK];
	for (int j = 0; j < k; j++) dp[j] = dprob[j] * sf;
	if (!strcmp(c->moe_router_score_function, "sigmoid")) {
		double s[MGT_MOE_MAX_TOPK], z = 0, dot = 0;
		for (int j = 0; j < k; j++) z += (s[j] = sigmoid(L[sel[j]]));
		z += 1e-20;
		for (int j = 0; j < k; j++) dot += dp[j] * s[j];
		for (int j = 0; j < k; j++) {
			double ds = k > 1 ? dp[j] / z - dot / (z * z) : dp[j];
			dL[sel[j]] += ds * s[j] * (1 - s[j]);
		}
	} else if (c->moe_router_pre_softmax) {
		double *s = work, dot = 0;
		softmax(L, E, s);
		for (int j = 0; j < k; j++) dot += dp[j] * s[sel[j]];
		for (int i = 0; i < E; i++) dL[i] -= s[i] * dot;
		for (int j = 0; j < k; j++) dL[sel[j]] += s[sel[j]] * dp[j];
	} else {
		double v[MGT_MOE_MAX_TOPK], p[MGT_MOE_MAX_TOPK], dot = 0;
		for (int j = 0; j < k; j++) v[j] = L[sel[j]];
		softmax(v, k, p);
		for (int j = 0; j < k; j++) dot += dp[j] * p[j];
		for (int j = 0; j < k; j++) dL[sel[j]] += p[j] * (dp[j] - dot);
	}
}

/* d(aux scores) dq [E] of one token -> d(logits), added into dL. */
static void aux_bwd(const mgt_model_config *c, const double *L, const double *q, const double *dq, int E, double *dL)
{
	if (!strcmp(c->moe_router_score_function, "sigmoid")) {
		double z = 1e-20, dot = 0;
		for (int i = 0; i < E; i++) z += sigmoid(L[i]);
		for (int i = 0; i < E; i++) dot += dq[i] * q[i];
		for (int i = 0; i < E; i++) {
			double s = sigmoid(L[i]);
			dL[i] += (dq[i] / z - dot / z) * s * (1 - s);
		}
	} else {
		double dot = 0;
		for (int i = 0; i < E; i++) dot += dq[i] * q[i];
		for (int i = 0; i < E; i++) dL[i] += q[i] * (dq[i] - dot);
	}
}

mgt_status mgt_moe_route_backward(const mgt_model_config *c, const mgt_moe_route *r, const double *dprob,
				  double aux_scale, double *dL)
{
	int T = r->T, E = r->E, k = r->k, Tg = r->Tg;
	double *work = r->work;
	memset(dL, 0, (size_t)T * E * sizeof *dL);
	bool seq = !strcmp(c->moe_router_load_balancing_type, "seq_aux_loss");
	bool aux = (seq || !strcmp(c->moe_router_load_balancing_type, "aux_loss")) && c->moe_aux_loss_coeff != 0;
	int S = seq ? Tg / r->B : Tg, nb = seq ? r->B : 1;
	double ca = aux_scale * c->moe_aux_loss_coeff * E / ((double)k * S * S) / nb;
	double cz = aux_scale * c->moe_z_loss_coeff;
	for (int t = 0; t < T; t++) {
		const double *L = r->L + (size_t)t * E;
		double *d = dL + (size_t)t * E, dp[MGT_MOE_MAX_TOPK];
		for (int j = 0; j < k; j++) dp[j] = r->keep[(size_t)t * k + j] ? dprob[(size_t)t * k + j] : 0.0;
		token_bwd(c, L, r->sel + (size_t)t * k, dp, E, k, d, work);
		if (aux) {
			const double *cnt = r->cnt + (size_t)(seq ? t % r->B : 0) * E;
			for (int i = 0; i < E; i++) work[i] = ca * cnt[i];
			aux_bwd(c, L, r->ps + (size_t)t * E, work, E, d);
		}
		if (cz != 0) {
			double mx = -INFINITY, s = 0;
			for (int i = 0; i < E; i++) mx = L[i] > mx ? L[i] : mx;
			for (int i = 0; i < E; i++) s += exp(L[i] - mx);
			double lse = mx + log(s);
			for (int i = 0; i < E; i++) d[i] += cz * 2 * lse / Tg * exp(L[i] - lse);
		}
	}
	return MGT_OK;
}

void mgt_moe_route_part(const mgt_moe_route *w, mgt_moe_route *p, const int64_t *rows)
{
	size_t E = (size_t)w->E, k = (size_t)w->k;
	for (int i = 0; i < p->T; i++) {
		size_t g = (size_t)rows[i];
		memcpy(p->L + i * E, w->L + g * E, E * sizeof *p->L);
		memcpy(p->ps + i * E, w->ps + g * E, E * sizeof *p->ps);
		memcpy(p->sel + i * k, w->sel + g * k, k * sizeof *p->sel);
		memcpy(p->keep + i * k, w->keep + g * k, k * sizeof *p->keep);
		memcpy(p->prob + i * k, w->prob + g * k, k * sizeof *p->prob);
	}
	memcpy(p->cnt, w->cnt, E * (size_t)(w->B + 1) * sizeof *p->cnt);
	memcpy(p->tokens, w->tokens, E * sizeof *p->tokens);
	p->aux = w->aux;
	p->z = w->z;
	p->Tg = w->T;
}
