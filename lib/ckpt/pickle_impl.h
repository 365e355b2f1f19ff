/* lib/ckpt internals shared by pickle.c and torchfile.c (not a public header). */
#ifndef MGT_PICKLE_IMPL_H
#define MGT_PICKLE_IMPL_H

#include "ckpt/ckpt.h"

/* An unpickled value tree: every value made (owned: freed with it), the storages in the order
 * BINPERSID first named them (storage k has i == k) and the tensors made. */
struct mgt_pickle {
	mgt_py **all;
	size_t n_all, cap_all;
	mgt_py **storages;
	size_t n_storages, cap_storages;
	mgt_py **tensors;
	size_t n_tensors, cap_tensors;
	mgt_py *root;
};

/* Bytes of one element of torch dtype name ("float32", "complex64", "qint8", ...); 0 unknown. */
size_t mgt_py_dtype_size(const char *dtype_name);

/* Return the status of x when it is not MGT_OK. */
#define TRY(x)                                                                                     \
	do {                                                                                       \
		mgt_status s_ = (x);                                                               \
		if (s_ != MGT_OK)                                                                  \
			return s_;                                                                 \
	} while (0)

#endif
