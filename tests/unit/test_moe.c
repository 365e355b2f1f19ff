/* tests/unit/test_moe.c: the MoE router's host math (lib/model/moe_route.c) against finite
 * differences: for every router type, the gradient of the logits mgt_moe_route_backward gives
 * equals the central difference of f(L) = sum_{t,j kept} g_tj prob_tj(L) + s (c_a aux(L) + c_z z(L))
 * (selection held fixed: logits are drawn far from ties), in double; and the routing itself
 * against properties any correct router has (probabilities sum to the scaling factor for
 * softmax and normalized sigmoid, the chosen experts are the top-k of the selection scores,
 * capacity respected, groups respected). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/moe.h"

static mgt_model_config router(const char *score, bool pre, int E, int k)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	c.num_experts = E;
	c.moe_router_topk = k;
	snprintf(c.moe_router_score_function, sizeof c.moe_router_score_function, "%s", score);
	c.moe_router_pre_softmax = pre;
	snprintf(c.moe_router_load_balancing_type, sizeof c.moe_router_load_balancing_type, "aux_loss");
	snprintf(c.moe_token_drop_policy, sizeof c.moe_token_drop_policy, "probs");
	c.moe_aux_loss_coeff = 1e-2;
	c.moe_z_loss_coeff = 1e-3;
	return c;
}

static double lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(*s >> 11) / 9007199254740992.0;
}

/* f(L) for fixed upstream gradients g [T, k] */
static double objective(const mgt_model_config *c, mgt_moe_route *r, const float *bias, int blocks, const double *g,
			double s)
{
	mgt_moe_route_forward(c, r, bias, blocks);
	double f = 0;
	for (int q = 0; q < r->T * r->k; q++) f += r->keep[q] ? g[q] * r->prob[q] : 0;
	bool aux = strcmp(c->moe_router_load_balancing_type, "none") != 0;
	return f + s * ((aux ? c->moe_aux_loss_coeff * r->aux : 0) + c->moe_z_loss_coeff * r->z);
}

static void fd_case(const char *label, mgt_model_config c, int T, int B, int blocks, bool with_bias)
{
	int E = (int)c.num_experts, k = (int)c.moe_router_topk;
	mgt_moe_route r;
	CHECK(mgt_moe_route_alloc(&r, T, E, k, B) == MGT_OK, "%s: alloc", label);
	uint64_t seed = 42;
	double *L0 = mgt_malloc(sizeof(double) * (size_t)T * E), *g = mgt_malloc(sizeof(double) * (size_t)T * k);
	double *dL = mgt_malloc(sizeof(double) * (size_t)T * E);
	float bias[64];
	for (int e = 0; e < E; e++) bias[e] = (float)(0.1 * (lcg(&seed) - 0.5));
	/* logits on a grid spaced 0.05 apart plus a small jitter: no two within 1e-3, so the
	 * finite difference (h = 1e-6) never crosses a tie */
	for (int t = 0; t < T; t++) {
		int perm[64];
		for (int e = 0; e < E; e++) perm[e] = e;
		for (int e = E - 1; e > 0; e--) {
			int j = (int)(lcg(&seed) * (e + 1)), x = perm[e];
			perm[e] = perm[j], perm[j] = x;
		}
		for (int e = 0; e < E; e++) L0[t * E + e] = 0.05 * perm[e] * 3 - 1.0 + 0.002 * lcg(&seed);
	}
	for (int q = 0; q < T * k; q++) g[q] = lcg(&seed) - 0.5;
	const float *bp = with_bias ? bias : NULL;
	double s = 0.37;
	memcpy(r.L, L0, sizeof(double) * (size_t)T * E);
	objective(&c, &r, bp, blocks, g, s);
	CHECK(mgt_moe_route_backward(&c, &r, g, s, dL) == MGT_OK, "%s: backward", label);
	double err = 0, ref = 0, h = 1e-6;
	for (int i = 0; i < T * E; i++) {
		memcpy(r.L, L0, sizeof(double) * (size_t)T * E);
		r.L[i] += h;
		double fp = objective(&c, &r, bp, blocks, g, s);
		memcpy(r.L, L0, sizeof(double) * (size_t)T * E);
		r.L[i] -= h;
		double fm = objective(&c, &r, bp, blocks, g, s);
		double fd = (fp - fm) / (2 * h);
		err = fmax(err, fabs(fd - dL[i]));
		ref = fmax(ref, fabs(fd));
	}
	CHECK(err <= 1e-7 * fmax(ref, 1e-3), "%s: d logits = finite differences (max |diff| %.2e, max |grad| %.2e)",
	      label, err, ref);
	/* properties of the routing at L0 */
	memcpy(r.L, L0, sizeof(double) * (size_t)T * E);
	mgt_moe_route_forward(&c, &r, bp, blocks);
	double sf = c.moe_router_topk_scaling_factor > 0 ? c.moe_router_topk_scaling_factor : 1;
	bool sums = true, distinct = true;
	for (int t = 0; t < T; t++) {
		double sum = 0;
		for (int j = 0; j < k; j++) {
			sum += r.prob[t * k + j];
			for (int q = 0; q < j; q++) distinct &= r.sel[t * k + j] != r.sel[t * k + q];
		}
		if (!c.moe_router_pre_softmax && k > 1) sums &= fabs(sum - sf) < 1e-12;
	}
	CHECK(sums && distinct, "%s: k distinct experts a token, probabilities summing to the scaling factor", label);
	if (c.moe_expert_capacity_factor > 0) {
		int cap = (int)ceil((double)(T / blocks) * k / E * c.moe_expert_capacity_factor), worst = 0;
		for (int b = 0; b < blocks; b++)
			for (int e = 0; e < E; e++) {
				int n = 0;
				for (int t = b * (T / blocks); t < (b + 1) * (T / blocks); t++)
					for (int j = 0; j < k; j++) n += r.keep[t * k + j] && r.sel[t * k + j] == e;
				worst = n > worst ? n : worst;
			}
		CHECK(worst <= cap, "%s: at most capacity %d copies an expert a block (most %d)", label, cap, worst);
	}
	if (c.moe_router_num_groups > 1) {
		int per = E / (int)c.moe_router_num_groups;
		bool ok = true;
		for (int t = 0; t < T; t++) {
			int groups[64] = { 0 }, n = 0;
			for (int j = 0; j < k; j++) groups[r.sel[t * k + j] / per] = 1;
			for (int q = 0; q < 64; q++) n += groups[q];
			ok &= n <= c.moe_router_group_topk;
		}
		CHECK(ok, "%s: every token's experts in at most %lld groups", label, (long long)c.moe_router_group_topk);
	}
	free(L0); free(g); free(dL);
	mgt_moe_route_free(&r);
}

int main(void)
{
	mgt_model_config c = router("softmax", false, 8, 2);
	fd_case("softmax top-2 of 8, aux + z", c, 24, 3, 1, false);
	c = router("softmax", true, 8, 3);
	fd_case("pre-softmax top-3", c, 24, 3, 1, false);
	snprintf(c.moe_router_load_balancing_type, sizeof c.moe_router_load_balancing_type, "seq_aux_loss");
	fd_case("pre-softmax top-3, seq_aux_loss", c, 24, 3, 1, false);
	c = router("sigmoid", false, 16, 4);
	c.moe_router_enable_expert_bias = true;
	c.moe_router_num_groups = 4;
	c.moe_router_group_topk = 2;
	c.moe_router_topk_scaling_factor = 2.5;
	fd_case("sigmoid + expert bias + 4 groups (2 kept) + scaling 2.5", c, 24, 2, 1, true);
	c = router("sigmoid", false, 8, 1);
	fd_case("sigmoid top-1", c, 16, 2, 1, false);
	c = router("softmax", false, 4, 2);
	c.moe_expert_capacity_factor = 0.5;
	fd_case("capacity 0.5, policy probs, 2 blocks", c, 32, 4, 2, false);
	snprintf(c.moe_token_drop_policy, sizeof c.moe_token_drop_policy, "position");
	fd_case("capacity 0.5, policy position", c, 32, 4, 1, false);
	c = router("softmax", false, 6, 2);
	snprintf(c.moe_router_load_balancing_type, sizeof c.moe_router_load_balancing_type, "none");
	c.moe_z_loss_coeff = 0;
	fd_case("no aux loss, no z loss", c, 12, 2, 1, false);
	return check_finish();
}
