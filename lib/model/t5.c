/* lib/model/t5.c: pieces of Megatron-Core's T5Model (megatron-bert-t5.md section 3.3). */
#include "model.h"

#include <math.h>

int mgt_t5_relative_bucket(int64_t rel, bool bidirectional, int num_buckets, int max_distance)
{
	int ret = 0, nb = num_buckets;
	int64_t n;
	if (bidirectional) {
		nb /= 2;
		ret = rel > 0 ? nb : 0;
		n = rel < 0 ? -rel : rel;
	} else {
		n = rel < 0 ? -rel : 0;
	}
	const int max_exact = nb / 2;
	if (n < max_exact) return ret + (int)n;
	/* torch: a float32 tensor's log and its ops with Python scalars in float32, then .to(long) */
	float x = logf((float)n / (float)max_exact) / (float)log((double)max_distance / (double)max_exact) *
		  (float)(nb - max_exact);
	int64_t large = max_exact + (int64_t)x;
	return ret + (int)(large < nb - 1 ? large : nb - 1);
}
