/* lib/ckpt/rows.c: the datasets and boxes that the rows of a model's tensor table (model/model.h)
 * are stored in (ckpt.h "table rows"; mgt-ckpt(5)), read back from a checkpoint or any other
 * reader of boxes, and the "tensors" list of metadata.json. */
#include "ckpt/ckpt.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

bool mgt_ckpt_row_seen(const mgt_tensor_table *tt, int i)
{
	const mgt_tensor *x = &tt->t[i];
	for (int j = i - 1; j >= 0 && tt->t[j].layer == x->layer; j--)
		if (tt->t[j].num_experts > 0 && !strcmp(tt->t[j].dataset, x->dataset)) return true;
	return false;
}

int mgt_ckpt_row_dataset(const mgt_tensor *x, const char *prefix, char *name, size_t n, int64_t gshape[3])
{
	bool ex = x->num_experts > 0;
	snprintf(name, n, "%s%s", prefix, ex ? x->dataset : x->name);
	int nd = 0;
	if (ex) gshape[nd++] = x->num_experts;
	for (int d = 0; d < x->ndim; d++) gshape[nd++] = x->shape[d];
	return nd;
}

_Static_assert((int)MGT_CKPT_MAX_BOXES == (int)MGT_TENSOR_MAX_BOXES, "ckpt.h's box count is model.h's");

int mgt_ckpt_row_boxes(const mgt_tensor *x, size_t lo, size_t hi, int64_t off[MGT_CKPT_MAX_BOXES][3], int64_t shape[MGT_CKPT_MAX_BOXES][3],
		       size_t first[MGT_CKPT_MAX_BOXES])
{
	int64_t o2[MGT_TENSOR_MAX_BOXES][2], s2[MGT_TENSOR_MAX_BOXES][2];
	int nb = mgt_tensor_boxes(x, lo, hi, o2, s2, first), e = x->num_experts > 0;
	for (int k = 0; k < nb; k++) {
		if (e) {
			off[k][0] = x->expert;
			shape[k][0] = 1;
		}
		for (int d = 0; d < x->ndim; d++) {
			off[k][e + d] = o2[k][d];
			shape[k][e + d] = s2[k][d];
		}
	}
	return nb;
}

mgt_status mgt_ckpt_row_read_from(mgt_ckpt_box_reader rd, void *src, const char *prefix, const mgt_tensor *x,
				  size_t lo, size_t hi, float *dst)
{
	int64_t off[MGT_CKPT_MAX_BOXES][3], shape[MGT_CKPT_MAX_BOXES][3], gs[3];
	size_t first[MGT_CKPT_MAX_BOXES];
	char name[160];
	int nd = mgt_ckpt_row_dataset(x, prefix, name, sizeof name, gs);
	int nb = mgt_ckpt_row_boxes(x, lo, hi, off, shape, first);
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < nb; k++) st = rd(src, name, nd, gs, off[k], shape[k], MGT_CKPT_F32, dst + (first[k] - lo));
	return st;
}

static mgt_status ckpt_box(void *c, const char *name, int ndim, const int64_t *global_shape, const int64_t *offset,
			   const int64_t *shape, mgt_ckpt_dtype dt, void *dst)
{
	return mgt_ckpt_read(c, name, ndim, global_shape, offset, shape, dt, dst);
}

mgt_status mgt_ckpt_row_read(mgt_ckpt *c, const char *prefix, const mgt_tensor *x, size_t lo, size_t hi, float *dst)
{
	return mgt_ckpt_row_read_from(ckpt_box, c, prefix, x, lo, hi, dst);
}

bool mgt_ckpt_row_known(const mgt_tensor_table *tt, const char *name)
{
	for (int i = 0; i < tt->n; i++)
		if (!strcmp(tt->t[i].num_experts > 0 ? tt->t[i].dataset : tt->t[i].name, name)) return true;
	return false;
}

void *mgt_ckpt_tensors_json(const mgt_tensor_table *tt)
{
	json_t *arr = json_array();
	for (int i = 0; i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		if (x->num_experts > 0 && mgt_ckpt_row_seen(tt, i)) continue;
		char name[160];
		int64_t gs[3];
		int nd = mgt_ckpt_row_dataset(x, "", name, sizeof name, gs);
		json_t *shape = json_array();
		for (int d = 0; d < nd; d++) json_array_append_new(shape, json_integer(gs[d]));
		json_array_append_new(arr, json_pack("{s:s, s:o, s:s}", "name", name, "shape", shape, "dtype", "float32"));
	}
	return arr;
}
