/* lib/backend: the CUDA backend's entry points in a build without CUDA (make CUDA=0): no devices,
 * and create refuses with a message saying how to get one. */
#include "backend/backend.h"

#include <stdint.h>
#include <stdio.h>

mgt_backend *mgt_backend_cuda_create(int device, mgt_status *st)
{
	mgt_status code = mgt_err(MGT_ERR_USAGE, "this mgt was built without CUDA (rebuild with make "
						 "CUDA=1, which needs nvcc)");
	if (st)
		*st = code;
	return NULL;
}

int mgt_backend_cuda_devices(void) { return 0; }

void *mgt_backend_cuda_stream(mgt_backend *be) { return NULL; }

size_t mgt_backend_cuda_mem_available(mgt_backend *be, char *what, size_t n)
{
	snprintf(what, n, "unknown");
	return SIZE_MAX;
}

bool mgt_backend_cuda_supports(mgt_backend *be, mgt_backend_op op, mgt_elem_type t, char *why, size_t n)
{
	snprintf(why, n, "this mgt was built without CUDA");
	return false;
}
