/* lib/optim/optim.c: learning-rate schedule and AdamW step. */
#include "optim.h"

#include <math.h>
#include <string.h>

static const char *const lr_styles[] = { "constant", "linear", "cosine", "inverse-square-root", "WSD", NULL };
static const char *const wsd_styles[] = { "exponential", "linear", "cosine", "minus_sqrt", NULL };

static bool one_of(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(s, *list)) return true;
	return false;
}

mgt_status mgt_lr_sched_check(const mgt_lr_sched *s)
{
	if (!one_of(s->style, lr_styles))
		return mgt_err(MGT_ERR_USAGE, "--lr-decay-style %s: expected constant, linear, cosine, "
			       "inverse-square-root or WSD", s->style);
	if (!strcmp(s->style, "WSD") && !one_of(s->wsd_style, wsd_styles))
		return mgt_err(MGT_ERR_USAGE, "--lr-wsd-decay-style %s: expected exponential, linear, "
			       "cosine or minus_sqrt", s->wsd_style);
	if (s->max_lr < 0 || s->min_lr < 0 || s->min_lr > s->max_lr)
		return mgt_err(MGT_ERR_USAGE, "--lr %g and --min-lr %g: expected 0 <= min-lr <= lr",
			       s->max_lr, s->min_lr);
	if (s->warmup_steps < 0 || s->decay_steps < 0 || s->warmup_steps > s->decay_steps)
		return mgt_err(MGT_ERR_USAGE, "learning-rate warmup (%lld samples) must not exceed "
			       "the decay steps (%lld samples)", (long long)s->warmup_steps,
			       (long long)s->decay_steps);
	return MGT_OK;
}

static double wsd_coeff(const mgt_lr_sched *s, double n)
{
	double anneal_start = (double)(s->decay_steps - s->wsd_decay_steps);
	if (n <= anneal_start) return 1.0;
	double r = (n - anneal_start) / (double)s->wsd_decay_steps;
	if (!strcmp(s->wsd_style, "linear")) return 1.0 - r;
	if (!strcmp(s->wsd_style, "cosine")) return 0.5 * (cos(M_PI * r) + 1.0);
	if (!strcmp(s->wsd_style, "minus_sqrt")) return 1.0 - sqrt(r);
	return 2.0 * pow(0.5, r) - 1.0;
}

double mgt_lr_get(const mgt_lr_sched *s)
{
	double n = (double)s->num_steps, w = (double)s->warmup_steps, dsteps = (double)s->decay_steps;
	double max = s->max_lr, min = s->min_lr;
	if (w > 0 && n <= w) return s->init_lr + (max - s->init_lr) * n / w;
	if (!strcmp(s->style, "constant")) return max;
	if (n > dsteps) return min;
	if (!strcmp(s->style, "inverse-square-root")) {
		double lr = max * sqrt(w > 1 ? w : 1) / sqrt(n > 1 ? n : 1);
		return lr > min ? lr : min;
	}
	double c;
	if (!strcmp(s->style, "WSD")) c = wsd_coeff(s, n);
	else {
		double r = (n - w) / (dsteps - w);
		c = !strcmp(s->style, "cosine") ? 0.5 * (cos(M_PI * r) + 1.0) : 1.0 - r;
	}
	return min + c * (max - min);
}

size_t mgt_adamw_bytes(size_t n) { return 2 * n * sizeof(float); }

mgt_status mgt_adamw_init(mgt_adamw *a, mgt_backend *be, size_t n)
{
	a->be = be;
	a->n = n;
	a->step = 0;
	a->m = be->ops->alloc(be, n * sizeof(float));
	a->v = be->ops->alloc(be, n * sizeof(float));
	if (!a->m || !a->v) {
		mgt_adamw_free(a);
		return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}

void mgt_adamw_free(mgt_adamw *a)
{
	if (!a->be) return;
	a->be->ops->free(a->be, a->m);
	a->be->ops->free(a->be, a->v);
	a->m = a->v = NULL;
}

double mgt_grad_sumsq(mgt_backend *be, const mgt_tensor_table *tt, const float *grads, size_t lo, size_t hi,
		      bool (*count)(const mgt_tensor *t, const void *ctx), const void *ctx)
{
	double ss = 0;
	for (int i = 0; i < tt->n; i++) {
		size_t x, y;
		const mgt_tensor *t = &tt->t[i];
		if ((!count || count(t, ctx)) && mgt_tensor_overlap(t, lo, hi, &x, &y)) ss += be->ops->sumsq(be, grads + x, y - x);
	}
	return ss;
}

bool mgt_adamw_step(mgt_adamw *a, const mgt_tensor_table *tt, float *params, float *grads, size_t lo,
		    size_t hi, double lr, double lr_emb, double norm)
{
	if (!isfinite(norm)) return false;
	mgt_backend *be = a->be;
	if (a->clip_grad > 0) {
		double coeff = a->clip_grad / (norm + 1e-6);
		if (coeff < 1.0) be->ops->scale(be, grads + lo, hi - lo, (float)coeff);
	}
	a->step++;
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *t = &tt->t[i];
		size_t x, y;
		if (!mgt_tensor_overlap(t, lo, hi, &x, &y)) continue;
		float wd = t->weight_decay ? (float)a->weight_decay : 0.0f;
		bool emb = t->role == MGT_T_WORD_EMB || t->role == MGT_T_OUTPUT_W;
		be->ops->adamw(be, params + x, grads + x, a->m + (x - lo), a->v + (x - lo), y - x, (float)(emb ? lr_emb : lr),
			       (float)a->beta1, (float)a->beta2, (float)a->eps, wd, a->step);
	}
	return true;
}

mgt_status mgt_loss_scaler_init(mgt_loss_scaler *ls, double constant_scale, double initial,
				double min_scale, int64_t window, int64_t hysteresis)
{
	bool dynamic = !(constant_scale > 0);
	double s0 = dynamic ? initial : constant_scale;
	if (!(s0 > 0) || isinf(s0))
		return mgt_err(MGT_ERR_USAGE, "%s: expected a positive finite loss scale, got %g",
			       dynamic ? "--initial-loss-scale" : "--loss-scale", s0);
	if (dynamic && (!(min_scale > 0) || min_scale > s0))
		return mgt_err(MGT_ERR_USAGE, "--min-loss-scale: expected a value in (0, %g], got %g", s0, min_scale);
	if (window < 1)
		return mgt_err(MGT_ERR_USAGE, "--loss-scale-window: expected at least 1, got %lld", (long long)window);
	if (hysteresis < 1)
		return mgt_err(MGT_ERR_USAGE, "--hysteresis: expected at least 1, got %lld", (long long)hysteresis);
	*ls = (mgt_loss_scaler){ .scale = s0, .min_scale = min_scale, .window = window, .hysteresis = hysteresis,
				 .growth_tracker = 0, .hysteresis_tracker = hysteresis, .dynamic = dynamic };
	return MGT_OK;
}

void mgt_loss_scaler_update(mgt_loss_scaler *ls, bool found_inf)
{
	if (!ls->dynamic)
		return;
	if (found_inf) {
		ls->growth_tracker = 0;
		if (--ls->hysteresis_tracker <= 0)
			ls->scale = fmax(ls->scale * 0.5, ls->min_scale);
		return;
	}
	if (++ls->growth_tracker == ls->window) {
		ls->growth_tracker = 0;
		ls->hysteresis_tracker = ls->hysteresis;
		ls->scale *= 2.0;
	}
}
