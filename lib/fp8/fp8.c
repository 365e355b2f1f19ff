/* lib/fp8: fp8 scaling (fp8.h; Transformer Engine's transformer_engine/common/recipe/delayed_scaling.cu). */
#include "fp8/fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mgt_fp8_quantize(uint8_t *q, const float *x, size_t n, float scale, mgt_fp8_format f, float *amax)
{
	float a = *amax;
	for (size_t i = 0; i < n; i++) {
		a = fmaxf(a, fabsf(x[i]));
		if (q) {
			const float v = x[i] * scale; /* one fp32 multiply, rounded */
			q[i] = mgt_f32_to_fp8(v, f);
		}
	}
	*amax = a;
}

float mgt_fp8_scale_inv(float scale) { return 1.0f / scale; }

mgt_status mgt_fp8_meta_init(mgt_fp8_meta *m, int len, int slots)
{
	memset(m, 0, sizeof *m);
	if (len < 1 || slots < 1)
		return mgt_err(MGT_ERR_USAGE, "fp8 scaling state: history length %d and slots %d must be at least 1", len,
			       slots);
	m->history = calloc((size_t)len * slots, sizeof *m->history);
	m->scale = malloc((size_t)slots * sizeof *m->scale);
	if (!m->history || !m->scale) {
		mgt_fp8_meta_free(m);
		return mgt_err(MGT_ERR_NOMEM, "fp8 scaling state: out of memory");
	}
	for (int j = 0; j < slots; j++)
		m->scale[j] = 1.0f;
	m->len = len, m->slots = slots;
	return MGT_OK;
}

void mgt_fp8_meta_free(mgt_fp8_meta *m)
{
	free(m->history);
	free(m->scale);
	memset(m, 0, sizeof *m);
}

/* One slot's history (column j, stride `slots`): rolled around `last`; the fmaxf of last and the
 * earlier rows (0 to start: NaN never wins). */
static float roll(float *h, int len, int slots, float last)
{
	float a = fmaxf(0.0f, last);
	for (int i = 0; i < len - 1; i++) {
		const float v = h[(size_t)(i + 1) * slots];
		a = fmaxf(a, v);
		h[(size_t)i * slots] = i > 0 ? v : 0.0f;
	}
	h[(size_t)(len - 1) * slots] = len > 1 ? last : 0.0f;
	return a;
}

void mgt_fp8_meta_update(mgt_fp8_meta *m, const float *reduced, float fp8_max, int margin, mgt_fp8_amax_algo algo)
{
	const float scaled_max = fp8_max * powf(2.0f, (float)-margin);
	for (int j = 0; j < m->slots; j++) {
		float *h = m->history + j;
		const float last = reduced && reduced[j] != 0.0f ? reduced[j] : h[0];
		if (last == 0.0f)
			continue; /* an unused slot: no roll, the scale stays */
		const float a = roll(h, m->len, m->slots, last);
		const float amax = algo == MGT_FP8_AMAX_MOST_RECENT ? last : a;
		if (isfinite(amax) && amax > 0.0f) {
			const float s = scaled_max / amax;
			m->scale[j] = isinf(s) ? FLT_MAX : s;
		}
	}
}

float mgt_fp8_current_scale(float amax, float fp8_max, float eps)
{
	if (amax < eps)
		amax = eps;
	if (!(amax > 0.0f) || !isfinite(amax))
		return 1.0f;
	const float s = fp8_max / amax;
	return isinf(s) ? FLT_MAX : s;
}
