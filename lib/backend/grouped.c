/* lib/backend/grouped.c: the grouped linear layers of a Mixture-of-Experts layer's experts
 * (backend.h's linear_fwd_grouped / linear_bwd_grouped; megatron/core/transformer/moe/experts.py),
 * for every backend: its own linear_fwd / linear_bwd once per group with rows.  On CUDA the
 * groups' casts and GEMMs run one after another on the one stream, so a group's 16-bit operand
 * copies in the scratch are read before the next group's casts overwrite them. */
#include "backend/backend.h"

void mgt_backend_grouped_fwd(mgt_backend *be, void *y, const void *x, mgt_elem_type t, const void *const *w,
			     mgt_elem_type wt, const int *rows, int G, int in, int out)
{
	const size_t es = mgt_elem_size(t);
	size_t r = 0;
	for (int g = 0; g < G; g++) {
		if (rows[g] <= 0)
			continue;
		be->ops->linear_fwd(be, (char *)y + r * out * es, t, (const char *)x + r * in * es, t, w[g], wt, NULL,
				    rows[g], in, out);
		r += (size_t)rows[g];
	}
}

void mgt_backend_grouped_bwd(mgt_backend *be, void *dx, float *const *dw, const void *dy, const void *x,
			     mgt_elem_type t, const void *const *w, mgt_elem_type wt, const int *rows, int G, int in,
			     int out)
{
	const size_t es = mgt_elem_size(t);
	size_t r = 0;
	for (int g = 0; g < G; g++) {
		if (rows[g] <= 0)
			continue;
		be->ops->linear_bwd(be, dx ? (char *)dx + r * in * es : NULL, t, dw[g], NULL, (const char *)dy + r * out * es,
				    t, (const char *)x + r * in * es, t, w[g], wt, rows[g], in, out);
		r += (size_t)rows[g];
	}
}
