/* lib/backend: the CPU backend's embedding ops (backend.h embedding_fwd, embedding_bwd); CUDA twin
 * kernels/embedding.cu.  The backward's column-split sums make its bits independent of the thread count.
 */
#include "backend/cpu_impl.h"

#include <omp.h>
#include <string.h>

#define PAR_MIN CPU_PAR_MIN
#define COLCH CPU_COLCH

/* ---- embedding ---- */

void mgt_cpu_embedding_fwd(mgt_backend *be, float *y, const int32_t *ids, const float *table,
			      int64_t row0, int64_t rows, int T, int h, bool accumulate)
{
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(static) if ((size_t)T * h > PAR_MIN)
	for (int t = 0; t < T; t++) {
		float *yt = y + (size_t)t * h;
		int64_t id = ids[t];
		if (id >= row0 && id < row0 + rows) {
			const float *src = table + (size_t)(id - row0) * h;
			if (accumulate) {
#pragma omp simd
				for (int c = 0; c < h; c++)
					yt[c] += src[c];
			} else {
				memcpy(yt, src, (size_t)h * sizeof *yt);
			}
		} else if (!accumulate) {
			memset(yt, 0, (size_t)h * sizeof *yt);
		}
	}
}

void mgt_cpu_embedding_bwd(mgt_backend *be, float *dtable, const void *dy16, mgt_elem_type dyt,
			      const int32_t *ids, int64_t row0, int64_t rows, int T, int h)
{
	const float *dy = T > 0 && h > 0 ? cpu_widen(be, 5, dy16, dyt, (size_t)T * (size_t)h) : NULL;
	if (!dy)
		return;
	int nch = (h + COLCH - 1) / COLCH;
#pragma omp parallel for num_threads(cpu_threads(be)) schedule(dynamic, 1) \
	if ((size_t)T * h > PAR_MIN && nch > 1)
	for (int ch = 0; ch < nch; ch++) {
		int c0 = ch * COLCH, cn = h - c0 < COLCH ? h - c0 : COLCH;
		for (int t = 0; t < T; t++) {
			int64_t id = ids[t];
			if (id < row0 || id >= row0 + rows)
				continue;
			float *dst = dtable + (size_t)(id - row0) * h + c0;
			const float *src = dy + (size_t)t * h + c0;
#pragma omp simd
			for (int c = 0; c < cn; c++)
				dst[c] += src[c];
		}
	}
}
