/* lib/model/hybrid.c: Megatron-Core's hybrid layer patterns (model.h mgt_hybrid_*): the layer list
 * of --hybrid-layer-pattern checked and counted, and the older allocation from an attention and an
 * MLP ratio (megatron/core/models/hybrid/hybrid_layer_allocation.py pattern_from_ratios, the same
 * as the earlier megatron/core/ssm/mamba_hybrid_layer_allocation.py _allocate_auto).  Issue 48:
 * not yet used by a model (the Mamba layer kind is still to come). */
#include <math.h>
#include <string.h>

#include "model.h"

/* Python's round() of a double: to nearest, ties to even (rint in the default rounding mode). */
static int64_t py_round(double v) { return (int64_t)nearbyint(v); }

/* Fill every `fill` symbol of t[0..n) in turn with `sym` where the running budget x (starting at
 * step, +step after a placement, -1 after a skip) is below one half: the evenly spread placement
 * of pattern_from_ratios. */
static void spread(char *t, int64_t n, char fill, char sym, double step)
{
	double x = step;
	for (int64_t i = 0; i < n; i++) {
		if (t[i] != fill) continue;
		if (x < 0.5) {
			t[i] = sym;
			x += step;
		} else {
			x -= 1.0;
		}
	}
}

mgt_status mgt_hybrid_pattern_from_ratios(int64_t n, double attention_ratio, double mlp_ratio, char *out)
{
	if (n < 1 || !(attention_ratio >= 0 && attention_ratio <= 1) || !(mlp_ratio >= 0 && mlp_ratio <= 1) ||
	    attention_ratio + mlp_ratio > 1)
		return mgt_err(MGT_ERR_USAGE, "hybrid layer ratios: %lld layers, attention %g, MLP %g: expected at least "
			       "one layer and ratios in [0, 1] summing to at most 1", (long long)n, attention_ratio, mlp_ratio);
	const int64_t attn = py_round((double)n * attention_ratio), mlp = py_round((double)n * mlp_ratio);
	int64_t mamba = n - attn;
	memset(out, MGT_LAYER_MAMBA, (size_t)n);
	out[n] = '\0';
	spread(out, n, MGT_LAYER_MAMBA, MGT_LAYER_ATTENTION, (double)mamba / (double)(attn + 1));
	if (mlp > 0) {
		mamba -= mlp;
		spread(out, n, MGT_LAYER_MAMBA, MGT_LAYER_MLP, (double)mamba / (double)mlp);
	}
	return MGT_OK;
}

mgt_status mgt_hybrid_pattern_check(const char *p, int pp, int64_t *layers, int *segments)
{
	int64_t n = 0;
	int seg = 1;
	for (const char *c = p; *c; c++) {
		if (*c == '|') seg++;
		else if (*c == '/')
			return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern '%s': multi-token prediction layers ('/' at "
				       "character %d) are not implemented", p, (int)(c - p) + 1);
		else if (*c == MGT_LAYER_MAMBA || *c == MGT_LAYER_ATTENTION || *c == MGT_LAYER_MLP || *c == MGT_LAYER_MOE) n++;
		else
			return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern '%s': character %d, '%c': expected M (Mamba), "
				       "* (attention), - (MLP), E (MoE) or | (a pipeline stage's end)%s", p, (int)(c - p) + 1,
				       *c, *c == 'G' || *c == 'D' || *c == '+' ? "; Megatron's G, D and + layers are not implemented"
									      : "");
	}
	if (n == 0) return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern '%s': no layer", p);
	if (seg > 1 && seg % pp)
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern '%s': %d pipeline segments ('|'), not a multiple of "
			       "--pipeline-model-parallel-size %d", p, seg, pp);
	*layers = n;
	*segments = seg;
	return MGT_OK;
}

char mgt_hybrid_symbol(const mgt_model_config *c, int64_t l)
{
	for (const char *p = c->hybrid_layer_pattern; *p && l >= 0; p++)
		if (*p != '|' && l-- == 0) return *p;
	return 0;
}

int mgt_hybrid_segment_layers(const mgt_model_config *c, int segment)
{
	int n = 0;
	for (const char *p = c->hybrid_layer_pattern; *p; p++) {
		if (*p == '|') segment--;
		else if (segment == 0) n++;
	}
	return n;
}

double mgt_model_out_std(const mgt_model_config *c)
{
	return c->init_method_std / sqrt((strcmp(c->family, "hybrid") ? 2.0 : 1.0) * (double)c->num_layers);
}
