/* lib/ckpt: the index file model.h5, one HDF5 virtual dataset per tensor (see ckpt_impl.h). */
#include "ckpt/ckpt_impl.h"

#include <stdlib.h>
#include <string.h>

/* Source file and dataset names of H5Pset_virtual are printf-like patterns: '%' -> "%%". */
static char *escape_pct(const char *s)
{
	size_t n = strlen(s), k = 0;
	char *e = mgt_malloc(2 * n + 1);
	if (!e)
		return NULL;
	for (; *s; s++) {
		if (*s == '%')
			e[k++] = '%';
		e[k++] = *s;
	}
	e[k] = 0;
	return e;
}

static herr_t map_piece(hid_t dcpl, hid_t vspace, const ck_index *ix, const ck_piece *p)
{
	hsize_t start[MGT_CKPT_MAX_DIM], count[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < p->ndim; d++)
		start[d] = (hsize_t)p->off[d], count[d] = (hsize_t)p->shape[d];
	char *file = escape_pct(ix->files[p->file]), *name = escape_pct(p->name);
	hid_t src = H5Screate_simple(p->ndim, count, NULL);
	herr_t r = !file || !name || src < 0 ? -1 :
		   H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start, NULL, count, NULL);
	if (r >= 0)
		r = H5Pset_virtual(dcpl, vspace, file, name, src);
	if (src >= 0)
		H5Sclose(src);
	free(file);
	free(name);
	return r;
}

static herr_t put_virtual(hid_t f, const ck_index *ix, size_t t)
{
	const ck_piece *p0 = &ix->pieces[ix->tensors[t]];
	hsize_t gdims[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < p0->ndim; d++)
		gdims[d] = (hsize_t)p0->gshape[d];
	hid_t vspace = H5Screate_simple(p0->ndim, gdims, NULL);
	hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
	herr_t r = vspace < 0 || dcpl < 0 ? -1 : 0;
	for (size_t i = 0; r >= 0 && i < ck_tensor_pieces(ix, t); i++)
		r = map_piece(dcpl, vspace, ix, p0 + i);
	if (r >= 0)
		r = H5Sselect_all(vspace);
	hid_t ds = r < 0 ? -1 : H5Dcreate2(f, p0->name, ck_h5_file_type(p0->dtype), vspace,
					   H5P_DEFAULT, dcpl, H5P_DEFAULT);
	if (ds >= 0)
		H5Dclose(ds);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (vspace >= 0)
		H5Sclose(vspace);
	return ds < 0 ? -1 : 0;
}

mgt_status ck_write_index(const ck_index *ix, const char *metadata)
{
	char *path = ck_join(ix->dir, MGT_CKPT_INDEX_FILE);
	if (!path)
		return MGT_ERR_NOMEM;
	hid_t fapl = ck_h5_fapl();
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	mgt_status st = f < 0 ? mgt_err(MGT_ERR_IO, "%s: cannot create: %s", path, ck_h5_why()) : 0;
	H5Pclose(fapl);
	if (!st)
		st = ck_h5_put_string_attr(f, path, "metadata", metadata);
	for (size_t t = 0; !st && t < ix->ntensors; t++)
		if (put_virtual(f, ix, t) < 0)
			st = mgt_err(MGT_ERR_IO, "%s: %s: cannot create virtual dataset: %s", path,
				     ix->pieces[ix->tensors[t]].name, ck_h5_why());
	if (f >= 0)
		st = ck_h5_finish(f, path, path, st);
	free(path);
	return st;
}
