/* lib/ckpt: element types at format boundaries and the 16-bit float encodings (see ckpt.h). */
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

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The rounding itself is lib/util's (mgt_round_bf16 / mgt_round_fp16): its result is exactly
 * representable in the 16-bit type, so what is left here is the encoding of that value. */

uint16_t mgt_f32_to_bf16(float x)
{
	uint32_t u = f2u(x);
	if (isnan(x)) /* keep sign and leading payload, set the quiet bit (a payload only in the
			 low 16 bits would otherwise truncate to inf) */
		return (uint16_t)(u >> 16 | 0x0040u);
	return (uint16_t)(f2u(mgt_round_bf16(x)) >> 16);
}

float mgt_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mgt_f32_to_f16(float x)
{
	uint32_t u = f2u(x);
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
	if (isnan(x)) /* quiet NaN with the payload's leading 9 bits */
		return (uint16_t)(sign | 0x7e00u | (u >> 13 & 0x01ffu));
	float r = fabsf(mgt_round_fp16(x)); /* exactly a binary16 value, or inf */
	if (isinf(r))
		return (uint16_t)(sign | 0x7c00u);
	if (r < 0x1p-14f) /* subnormal (or zero): an integer multiple of 2^-24 */
		return (uint16_t)(sign | (uint16_t)(r * 0x1p24f));
	uint32_t ru = f2u(r);
	uint32_t e = (ru >> 23) - 127 + 15, m = (ru & 0x7fffffu) >> 13;
	return (uint16_t)(sign | e << 10 | m);
}

float mgt_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f) /* inf, NaN (payload kept in the leading bits) */
		return u2f(sign | 0x7f800000u | m << 13);
	if (e == 0) { /* zero, subnormal: m * 2^-24 exactly */
		float v = (float)m * 0x1p-24f;
		return sign ? -v : v;
	}
	return u2f(sign | (e - 15 + 127) << 23 | m << 13);
}
