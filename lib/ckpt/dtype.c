/* lib/ckpt: element types at format boundaries (see ckpt.h; the 16-bit float encodings are lib/util's). */
#include "ckpt/ckpt.h"

#include <math.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/ckpt's safetensors and GGUF code assumes a little-endian host"
#endif

static const struct {
	const char *name;
	size_t size;
} dts[MGT_ST_COUNT] = {
	[MGT_ST_F32] = {"F32", 4}, [MGT_ST_F16] = {"F16", 2}, [MGT_ST_BF16] = {"BF16", 2},
	[MGT_ST_F64] = {"F64", 8}, [MGT_ST_I64] = {"I64", 8}, [MGT_ST_I32] = {"I32", 4},
	[MGT_ST_I16] = {"I16", 2}, [MGT_ST_I8] = {"I8", 1},   [MGT_ST_U8] = {"U8", 1},
	[MGT_ST_BOOL] = {"BOOL", 1},
};

const char *mgt_dt_name(mgt_dt dt) { return (unsigned)dt < MGT_ST_COUNT ? dts[dt].name : NULL; }

size_t mgt_dt_size(mgt_dt dt) { return (unsigned)dt < MGT_ST_COUNT ? dts[dt].size : 0; }

bool mgt_dt_parse(const char *name, mgt_dt *out)
{
	for (int i = 0; i < MGT_ST_COUNT; i++)
		if (strcmp(name, dts[i].name) == 0) {
			*out = (mgt_dt)i;
			return true;
		}
	return false;
}

