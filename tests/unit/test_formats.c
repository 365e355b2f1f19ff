/* Unit tests for lib/ckpt's format code: 16-bit float encodings, safetensors reader and writer,
 * GGUF v3 writer and reader.  Prints "ok"/"not ok" per check and "N passed, M failed".
 *
 *   test_formats              run the unit tests (in a fresh directory under $TMPDIR or /tmp)
 *   test_formats --write DIR  write the known files tests/cli/t4010-formats.sh checks with
 *                             tests/cli/formats_check.py: DIR/single/model.safetensors,
 *                             DIR/sharded/ (3 shards + index), DIR/model.gguf; values value(k, i)
 *                             below (the script computes the same)
 *
 * References: the 16-bit encodings against an independent decoding (ldexp of the fields) over
 * all 65536 patterns and against rounding computed in double arithmetic (nearbyint of x over
 * the quantum) on a sweep of float32 patterns; Q8_0 against ggml's formula written out here. */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static int has_msg(const char *s) { return strstr(mgt_err_msg(), s) != NULL; }

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static int exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		abort();
}

/* entries of directory d other than . and .. (-1 if unreadable) */
static int count_files(const char *d)
{
	DIR *dp = opendir(d);
	if (!dp)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dp)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(dp);
	return n;
}

/* ---- known values (tests/cli/formats_check.py computes the same) --------------------------- */

/* value(k, i) = sin(0.37 * i + k) * 2^((i % 13) - 6): varied exponents, rounding cases */
static float value(int k, int64_t i)
{
	return (float)(sin(0.37 * (double)i + k) * ldexp(1.0, (int)(i % 13) - 6));
}

static float *values(int k, int64_t n)
{
	float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
	for (int64_t i = 0; i < n; i++)
		p[i] = value(k, i);
	return p;
}

/* ---- 16-bit floats -------------------------------------------------------------------------- */

/* independent decoding: ldexp of the fields */
static double ref_f16(uint16_t h)
{
	int s = h >> 15, e = h >> 10 & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

static double ref_bf16(uint16_t h)
{
	int s = h >> 15, e = h >> 7 & 255, m = h & 127;
	double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
	return s ? -v : v;
}

/* x rounded to p significant bits, exponent at least emin (subnormal quantum 2^(emin-p+1)),
 * ties to even (nearbyint in the default mode), overflow past max_exp to inf: in double. */
static double ref_round(float x, int p, int emin, double inf_at)
{
	if (isnan(x) || isinf(x) || x == 0)
		return x;
	int e;
	frexp(x, &e); /* x = f * 2^e, 0.5 <= |f| < 1: exponent e - 1 */
	int ex = e - 1 < emin ? emin : e - 1;
	double q = ldexp(1.0, ex - (p - 1));
	double r = nearbyint((double)x / q) * q;
	if (fabs(r) >= inf_at)
		return copysign(INFINITY, x);
	return r == 0 ? copysign(0.0, x) : r;
}

static int same_value(double a, float b)
{
	if (isnan(a))
		return isnan(b);
	return a == (double)b && !signbit(a) == !signbit(b);
}

static void test_dtypes(void)
{
	mgt_dt d;
	CHECK(strcmp(mgt_dt_name(MGT_ST_BF16), "BF16") == 0 && mgt_dt_size(MGT_ST_BF16) == 2 &&
	      mgt_dt_size(MGT_ST_F64) == 8 && mgt_dt_size(MGT_ST_BOOL) == 1 && !mgt_dt_name((mgt_dt)99) &&
	      mgt_dt_size((mgt_dt)99) == 0, "dtype names and sizes");
	CHECK(mgt_dt_parse("I16", &d) && d == MGT_ST_I16 && !mgt_dt_parse("f32", &d) &&
	      !mgt_dt_parse("F8_E4M3", &d), "dtype parse: exact spelling, unknown refused");

	int bad_f16 = 0, bad_rt16 = 0, bad_bf = 0, bad_rtbf = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = mgt_f16_to_f32((uint16_t)h), b = mgt_bf16_to_f32((uint16_t)h);
		bad_f16 += !same_value(ref_f16((uint16_t)h), f);
		bad_bf += !same_value(ref_bf16((uint16_t)h), b);
		uint16_t back = mgt_f32_to_f16(f), bb = mgt_f32_to_bf16(b);
		if (isnan(f))
			bad_rt16 += (back & 0x7c00) != 0x7c00 || !(back & 0x200) || (back & 0x8000) != (h & 0x8000);
		else
			bad_rt16 += back != h;
		if (isnan(b))
			bad_rtbf += (bb & 0x7f80) != 0x7f80 || !(bb & 0x40) || (bb & 0x8000) != (h & 0x8000) ||
				    ((h & 0x40) && bb != h); /* quiet NaNs keep their payload */
		else
			bad_rtbf += bb != h;
	}
	CHECK(bad_f16 == 0, "f16 -> f32 equals the ldexp decoding for all 65536 patterns (%d differ)", bad_f16);
	CHECK(bad_bf == 0, "bf16 -> f32 equals the ldexp decoding for all 65536 patterns (%d differ)", bad_bf);
	CHECK(bad_rt16 == 0, "f16 -> f32 -> f16 is the identity (NaN: a quiet NaN of the same sign) (%d)", bad_rt16);
	CHECK(bad_rtbf == 0, "bf16 -> f32 -> bf16 is the identity (NaN: quiet, same sign) (%d)", bad_rtbf);

	/* float32 -> 16 bits against rounding in double, on a sweep of float32 bit patterns plus
	 * the neighbourhoods of ties (patterns whose dropped bits are exactly half) */
	long n = 0, bad16 = 0, badb = 0;
	for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 4099) {
		for (int k = 0; k < 4; k++) {
			uint32_t v = (uint32_t)u;
			if (k == 1) v = (v & ~0xffffu) | 0x8000u;        /* bf16 tie */
			if (k == 2) v = (v & ~0x1fffu) | 0x1000u;        /* f16 tie (normal range) */
			if (k == 3) v = (v & ~0xffffu) | 0x7fffu;        /* just below a bf16 tie */
			float x = u2f(v);
			if (isnan(x))
				continue;
			n++;
			badb += !same_value(ref_round(x, 8, -126, 0x1p128), mgt_bf16_to_f32(mgt_f32_to_bf16(x)));
			bad16 += !same_value(ref_round(x, 11, -14, 65536.0), mgt_f16_to_f32(mgt_f32_to_f16(x)));
		}
	}
	CHECK(badb == 0, "f32 -> bf16 rounds as nearbyint in double does (%ld of %ld differ)", badb, n);
	CHECK(bad16 == 0, "f32 -> f16 rounds as nearbyint in double does (%ld of %ld differ)", bad16, n);
	/* f16 subnormal ties: every k * 2^-25 for odd k rounds to the even neighbour */
	int badsub = 0;
	for (int k = 0; k < 4096; k++) {
		float x = (float)ldexp(k, -25);
		badsub += !same_value(ref_round(x, 11, -14, 65536.0), mgt_f16_to_f32(mgt_f32_to_f16(x)));
	}
	CHECK(badsub == 0, "f16 subnormals and their ties (k * 2^-25) round as in double (%d)", badsub);
	CHECK(mgt_f32_to_f16(65519.0f) == 0x7bff && mgt_f32_to_f16(65520.0f) == 0x7c00 &&
	      mgt_f32_to_f16(-1e10f) == 0xfc00, "f16 overflow: 65519 -> max, 65520 -> inf, -1e10 -> -inf");
	CHECK(mgt_f32_to_bf16(u2f(0x7f800001u)) == 0x7fc0 && mgt_f32_to_bf16(u2f(0xff800001u)) == 0xffc0 &&
	      mgt_f32_to_f16(u2f(0x7f800001u)) == 0x7e00,
	      "NaN with a payload only in dropped bits stays NaN (quiet), not inf");
	CHECK(mgt_f32_to_bf16(-0.0f) == 0x8000 && mgt_f32_to_f16(-0.0f) == 0x8000 &&
	      mgt_f32_to_f16(-0x1p-26f) == 0x8000, "negative zero and underflow keep the sign");
	CHECK(mgt_f32_to_bf16(INFINITY) == 0x7f80 && mgt_f32_to_f16(-INFINITY) == 0xfc00, "inf");
}

/* ---- safetensors ---------------------------------------------------------------------------- */

typedef struct {
	const char *name;
	mgt_dt dt;
	int ndim;
	int64_t shape[8];
} tdef;

static const tdef TS[] = {
	{"model.embed_tokens.weight", MGT_ST_F32, 2, {37, 16}},
	{"model.layers.0.self_attn.q_proj.weight", MGT_ST_BF16, 2, {16, 16}},
	{"model.layers.0.mlp.up_proj.weight", MGT_ST_F16, 2, {48, 16}},
	{"model.norm.weight", MGT_ST_F64, 1, {16}},
	{"lm_head.weight", MGT_ST_F32, 2, {37, 16}},
	{"scalar", MGT_ST_F32, 0, {0}},
	{"empty", MGT_ST_BF16, 2, {0, 5}},
	{"position_ids", MGT_ST_I64, 2, {1, 7}},
	{"big.4d", MGT_ST_BF16, 4, {2, 3, 4, 5}},
};
#define NTS (sizeof TS / sizeof TS[0])

static int64_t numel_of(const tdef *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* what read_f32 must give back: the value rounded through the dtype */
static float through(mgt_dt dt, float x)
{
	switch (dt) {
	case MGT_ST_F16: return mgt_f16_to_f32(mgt_f32_to_f16(x));
	case MGT_ST_BF16: return mgt_bf16_to_f32(mgt_f32_to_bf16(x));
	default: return x;
	}
}

static mgt_status write_model(const char *d, uint64_t max_shard)
{
	mgt_st_writer *w;
	mgt_status st = mgt_st_writer_new(&w, d, max_shard);
	for (size_t i = 0; !st && i < NTS; i++)
		st = mgt_st_writer_add(w, TS[i].name, TS[i].dt, TS[i].ndim, TS[i].shape);
	if (!st)
		st = mgt_st_writer_begin(w);
	for (size_t i = NTS; !st && i-- > 0;) { /* any order: backwards */
		int64_t n = numel_of(&TS[i]);
		if (TS[i].dt == MGT_ST_I64) {
			int64_t *v = malloc((size_t)n * 8);
			for (int64_t j = 0; j < n; j++)
				v[j] = j * 1000003 - 5;
			st = mgt_st_writer_put_raw(w, TS[i].name, v);
			free(v);
		} else {
			float *v = values((int)i, n);
			st = mgt_st_writer_put_f32(w, TS[i].name, v);
			free(v);
		}
	}
	if (!st)
		st = mgt_st_writer_finish(w);
	mgt_st_writer_free(w);
	return st;
}

static int check_model(const char *path)
{
	mgt_st *s;
	if (mgt_st_open(path, &s))
		return 0;
	int ok = mgt_st_count(s) == NTS;
	for (size_t i = 0; ok && i < NTS; i++) {
		const mgt_st_tensor *t = mgt_st_find(s, TS[i].name);
		ok = t && t->dtype == TS[i].dt && t->ndim == TS[i].ndim;
		for (int d = 0; ok && d < t->ndim; d++)
			ok = t->shape[d] == TS[i].shape[d];
		int64_t n = numel_of(&TS[i]);
		if (!ok)
			break;
		ok = t->nbytes == (uint64_t)n * mgt_dt_size(t->dtype);
		if (TS[i].dt == MGT_ST_I64) {
			int64_t *v = malloc((size_t)n * 8);
			ok = ok && mgt_st_read_raw(s, t, v) == MGT_OK;
			for (int64_t j = 0; ok && j < n; j++)
				ok = v[j] == j * 1000003 - 5;
			ok = ok && mgt_st_read_f32(s, t, (float *)v) == MGT_ERR_FORMAT;
			free(v);
			continue;
		}
		float *v = malloc((size_t)(n ? n : 1) * 4);
		ok = ok && mgt_st_read_f32(s, t, v) == MGT_OK;
		for (int64_t j = 0; ok && j < n; j++)
			ok = v[j] == through(TS[i].dt, value((int)i, j));
		free(v);
	}
	for (size_t i = 1; ok && i < mgt_st_count(s); i++)
		ok = strcmp(mgt_st_at(s, i - 1)->name, mgt_st_at(s, i)->name) < 0;
	ok = ok && !mgt_st_at(s, NTS) && !mgt_st_find(s, "nope");
	ok = ok && mgt_st_metadata(s, "format") && strcmp(mgt_st_metadata(s, "format"), "pt") == 0 &&
	     !mgt_st_metadata(s, "other");
	mgt_st_close(s);
	return ok;
}

static void test_st_roundtrip(void)
{
	char d1[512], d2[512];
	snprintf(d1, sizeof d1, "%s", path_in("st1"));
	snprintf(d2, sizeof d2, "%s", path_in("st2"));
	mkdir(d1, 0755);
	mkdir(d2, 0755);
	CHECK(write_model(d1, 0) == MGT_OK, "safetensors writer: one file");
	CHECK(exists(path_in("st1/model.safetensors")) && !exists(path_in("st1/model.safetensors.index.json")) &&
	      count_files(d1) == 1, "one file: model.safetensors, no index, nothing else");
	CHECK(check_model(d1), "reader gives back names, dtypes, shapes and values (directory)");
	CHECK(check_model(path_in("st1/model.safetensors")), "the same through the file's path");

	/* 37*16*4 = 2368 bytes for embed and lm_head: 3000-byte shards force several */
	CHECK(write_model(d2, 3000) == MGT_OK, "safetensors writer: sharded");
	CHECK(exists(path_in("st2/model.safetensors.index.json")) &&
	      exists(path_in("st2/model-00001-of-00003.safetensors")) &&
	      exists(path_in("st2/model-00003-of-00003.safetensors")) &&
	      !exists(path_in("st2/model.safetensors")) && count_files(d2) == 4,
	      "sharded: model-0000K-of-00003.safetensors and the index");
	CHECK(check_model(d2), "reader gives back the sharded model through the index");
	mgt_st *s;
	if (mgt_st_open(d2, &s) == MGT_OK) {
		const mgt_st_tensor *t = mgt_st_find(s, "lm_head.weight");
		CHECK(t && strstr(t->file, "model-00003-of-00003.safetensors") && t->offset % 8 == 0,
		      "a tensor's file is its shard, its offset after the 8-aligned header");
		mgt_st_close(s);
	}
	/* the header: 8-byte aligned, spaces, __metadata__ */
	char *txt = NULL;
	size_t len = 0;
	if (mgt_file_read(path_in("st1/model.safetensors"), &txt, &len) == MGT_OK && len > 8) {
		uint64_t h;
		memcpy(&h, txt, 8);
		CHECK(h % 8 == 0 && h + 8 <= len && txt[8] == '{' &&
		      strstr(txt + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL,
		      "header length a multiple of 8, JSON with __metadata__ {\"format\":\"pt\"}");
	}
	free(txt);
	if (mgt_file_read(path_in("st2/model.safetensors.index.json"), &txt, &len) == MGT_OK) {
		uint64_t total = 0;
		for (size_t i = 0; i < NTS; i++)
			total += (uint64_t)numel_of(&TS[i]) * mgt_dt_size(TS[i].dt);
		char want[64];
		snprintf(want, sizeof want, "\"total_size\": %llu", (unsigned long long)total);
		char *a = strstr(txt, "\"big.4d\""), *b = strstr(txt, "\"empty\""), *c = strstr(txt, "\"scalar\"");
		CHECK(strstr(txt, want) && a && b && c && a < b && b < c, "index: total_size, sorted weight_map");
	}
	free(txt);
}

static void test_st_writer_errors(void)
{
	char d[512];
	snprintf(d, sizeof d, "%s", path_in("stw"));
	mkdir(d, 0755);
	mgt_st_writer *w;
	int64_t sh[2] = {2, 3}, neg[1] = {-1};
	float v[6] = {1, 2, 3, 4, 5, 6};
	mgt_st_writer_new(&w, d, 0);
	CHECK(mgt_st_writer_add(w, "a", MGT_ST_F32, 2, sh) == MGT_OK &&
	      mgt_st_writer_add(w, "a", MGT_ST_F32, 2, sh) == MGT_ERR_USAGE && has_msg("'a' declared twice"),
	      "writer: duplicate name refused");
	CHECK(mgt_st_writer_add(w, "n", MGT_ST_F32, 1, neg) == MGT_ERR_USAGE &&
	      mgt_st_writer_add(w, "", MGT_ST_F32, 1, sh) == MGT_ERR_USAGE &&
	      mgt_st_writer_add(w, "x", MGT_ST_F32, 9, sh) == MGT_ERR_USAGE, "writer: bad shape or name refused");
	CHECK(mgt_st_writer_put_f32(w, "a", v) == MGT_ERR_USAGE, "writer: put before begin refused");
	mgt_st_writer_add(w, "b", MGT_ST_I32, 2, sh);
	CHECK(mgt_st_writer_begin(w) == MGT_OK && count_files(d) == 1, "writer: begin makes the temporary");
	CHECK(mgt_st_writer_put_f32(w, "a", v) == MGT_OK, "writer: put");
	CHECK(mgt_st_writer_finish(w) == MGT_ERR_USAGE && has_msg("'b' was declared but not put"),
	      "writer: finish with a tensor missing refused, naming it");
	mgt_st_writer_free(w);
	CHECK(count_files(d) == 0, "writer: free after a failure removes its files");

	mgt_st_writer_new(&w, d, 0);
	mgt_st_writer_add(w, "b", MGT_ST_I32, 2, sh);
	mgt_st_writer_begin(w);
	CHECK(mgt_st_writer_put_f32(w, "b", v) == MGT_ERR_USAGE, "writer: put_f32 into an I32 tensor refused");
	mgt_st_writer_free(w);
	CHECK(count_files(d) == 0, "writer: nothing left");

	write_bytes(path_in("stw/model.safetensors"), "x", 1);
	mgt_st_writer_new(&w, d, 0);
	mgt_st_writer_add(w, "a", MGT_ST_F32, 2, sh);
	CHECK(mgt_st_writer_begin(w) == MGT_ERR_EXISTS, "writer: an existing model.safetensors is refused");
	mgt_st_writer_free(w);
	CHECK(count_files(d) == 1, "writer: the existing file is left alone");
	unlink(path_in("stw/model.safetensors"));
}

/* a safetensors file from a header text and a data size */
static void st_file(const char *path, const char *hdr, size_t data)
{
	size_t n = strlen(hdr);
	unsigned char *b = calloc(1, 8 + n + data);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)n >> (8 * i));
	memcpy(b + 8, hdr, n);
	write_bytes(path, b, 8 + n + data);
	free(b);
}

static int st_refused(const char *hdr, size_t data, const char *msg)
{
	char *p = path_in("bad.safetensors");
	st_file(p, hdr, data);
	mgt_st *s = NULL;
	mgt_status st = mgt_st_open(p, &s);
	mgt_st_close(s);
	return st == MGT_ERR_FORMAT && !s && has_msg("bad.safetensors") && (!msg || has_msg(msg));
}

static void test_st_reader_errors(void)
{
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL) == 0,
	      "a valid file opens (the control)");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "outside"),
	      "data_offsets past the end refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "expected 12"),
	      "size not numel * dtype size refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F8_E5M2\",\"shape\":[2],\"data_offsets\":[0,2]}}", 8, "unknown dtype"),
	      "unknown dtype refused, named");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"),
	      "negative dim refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 8, "at most 8"),
	      "9 dims refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 8,
			 "overflows"), "overflowing element count refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, "outside"),
	      "end < begin refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8, "two non-negative"),
	      "data_offsets of one integer refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"),
	      "overlapping tensors refused");
	CHECK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate"),
	      "duplicate names refused");
	CHECK(st_refused("[1,2]", 0, "not a JSON object"), "header not an object refused");
	CHECK(st_refused("{\"a\":", 0, "not valid JSON"), "invalid JSON refused");
	CHECK(st_refused("{\"__metadata__\":{\"k\":1}}", 0, "not a string"), "non-string metadata refused");
	CHECK(st_refused("{\"a\":7}", 0, "not a JSON object"), "entry not an object refused");
	unsigned char hb[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
	write_bytes(path_in("bad.safetensors"), hb, 16);
	mgt_st *s = NULL;
	CHECK(mgt_st_open(path_in("bad.safetensors"), &s) == MGT_ERR_FORMAT && has_msg("past the end"),
	      "header length beyond the file refused");
	write_bytes(path_in("bad.safetensors"), hb, 5);
	CHECK(mgt_st_open(path_in("bad.safetensors"), &s) == MGT_ERR_FORMAT && has_msg("too short"),
	      "a file shorter than 8 bytes refused");
	CHECK(mgt_st_open(path_in("none.safetensors"), &s) == MGT_ERR_IO, "a missing file: MGT_ERR_IO");

	/* directories with an index */
	char d[512];
	snprintf(d, sizeof d, "%s", path_in("idx"));
	mkdir(d, 0755);
	CHECK(mgt_st_open(d, &s) == MGT_ERR_IO && has_msg("neither"), "an empty directory refused");
	st_file(path_in("idx/a.safetensors"), "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	st_file(path_in("idx/b.safetensors"), "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	st_file(path_in("idx/c.safetensors"), "{\"p\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		"\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
	const char *good = "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}";
	write_bytes(path_in("idx/model.safetensors.index.json"), good, strlen(good));
	CHECK(mgt_st_open(d, &s) == MGT_OK && mgt_st_count(s) == 2, "an index of two files opens");
	mgt_st_close(s);
	s = NULL;
	struct { const char *json, *msg, *what; } bad[] = {
		{"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\",\"p\":\"c.safetensors\"}}",
		 "'q' of", "a tensor of a listed file not listed"},
		{"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\",\"z\":\"b.safetensors\"}}",
		 "'z' listed for b.safetensors", "a listed tensor missing"},
		{"{\"weight_map\":{\"x\":\"b.safetensors\",\"y\":\"a.safetensors\"}}", "the weight_map names",
		 "a tensor listed for the wrong file"},
		{"{\"weight_map\":{\"x\":\"../a.safetensors\",\"y\":\"b.safetensors\"}}", "plain file name",
		 "a file name with '/' or '..'"},
		{"{\"weight_map\":{\"x\":\"..\",\"y\":\"b.safetensors\"}}", "plain file name", "the file name '..'"},
		{"{\"metadata\":{}}", "weight_map", "no weight_map"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		write_bytes(path_in("idx/model.safetensors.index.json"), bad[i].json, strlen(bad[i].json));
		CHECK(mgt_st_open(d, &s) == MGT_ERR_FORMAT && has_msg(bad[i].msg), "index: %s refused", bad[i].what);
	}
	st_file(path_in("idx/b.safetensors"), "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		"\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
	write_bytes(path_in("idx/model.safetensors.index.json"), good, strlen(good));
	CHECK(mgt_st_open(d, &s) == MGT_ERR_FORMAT && has_msg("in both"), "a tensor in two files refused");
}

/* ---- GGUF ----------------------------------------------------------------------------------- */

typedef struct {
	const char *name;
	mgt_ggml_type type;
	int ndim;
	int64_t shape[4];
} gdef;

static const gdef GS[] = {
	{"token_embd.weight", MGT_GGML_F32, 2, {37, 64}},
	{"blk.0.attn_q.weight", MGT_GGML_F16, 2, {64, 64}},
	{"blk.0.ffn_up.weight", MGT_GGML_Q8_0, 2, {96, 64}},
	{"blk.0.attn_norm.weight", MGT_GGML_BF16, 1, {64}},
	{"t3", MGT_GGML_F32, 3, {3, 5, 7}},
	{"t4", MGT_GGML_Q8_0, 4, {2, 1, 3, 32}},
};
#define NGS (sizeof GS / sizeof GS[0])

static int64_t gnumel(const gdef *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* Q8_0 by ggml's quantize_row_q8_0_ref formula, written out independently of the library:
 * d = amax / 127, q = roundf(x * (1/d)); the value is f16(d) * q */
static void ref_q8_0(const float *x, int64_t n, float *out)
{
	for (int64_t b = 0; b < n; b += 32) {
		float amax = 0;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[b + j]));
		float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
		double dh = ref_f16(mgt_f32_to_f16(d)); /* the stored scale */
		for (int j = 0; j < 32; j++)
			out[b + j] = (float)(dh * (double)roundf(x[b + j] * id));
	}
}

static float gthrough(mgt_ggml_type t, float x)
{
	return t == MGT_GGML_F16 ? (float)ref_f16(mgt_f32_to_f16(x)) :
	       t == MGT_GGML_BF16 ? (float)ref_bf16(mgt_f32_to_bf16(x)) : x;
}

static mgt_status write_gguf(const char *path, uint32_t align)
{
	mgt_gguf_writer *w;
	mgt_status st = mgt_gguf_writer_new(&w);
	const char *toks[] = {"<s>", "a\0b", "\xc4\xa0the"};
	size_t lens[] = {3, 3, 5};
	int32_t iv[] = {1, -2, 3};
	float fv[] = {0.5f, -1.25f};
	if (!st) st = mgt_gguf_set_str(w, "general.architecture", "llama");
	if (!st && align) st = mgt_gguf_set_u32(w, "general.alignment", align);
	if (!st) st = mgt_gguf_set_u32(w, "llama.block_count", 1);
	if (!st) st = mgt_gguf_set_i32(w, "test.i32", -7);
	if (!st) st = mgt_gguf_set_u64(w, "test.u64", UINT64_C(1) << 40);
	if (!st) st = mgt_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	if (!st) st = mgt_gguf_set_bool(w, "test.bool", true);
	if (!st) st = mgt_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, 3);
	if (!st) st = mgt_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", iv, 3);
	if (!st) st = mgt_gguf_set_arr_f32(w, "tokenizer.ggml.scores", fv, 2);
	if (!st) st = mgt_gguf_set_arr_str(w, "test.empty", NULL, NULL, 0);
	for (size_t i = 0; !st && i < NGS; i++)
		st = mgt_gguf_add_tensor(w, GS[i].name, GS[i].type, GS[i].ndim, GS[i].shape);
	if (!st)
		st = mgt_gguf_writer_open(w, path);
	for (size_t i = 0; !st && i < NGS; i++) {
		float *v = values(100 + (int)i, gnumel(&GS[i]));
		st = mgt_gguf_put_f32(w, GS[i].name, v);
		free(v);
	}
	if (!st)
		st = mgt_gguf_writer_finish(w);
	mgt_gguf_writer_free(w);
	return st;
}

static int kv_ok(const mgt_gguf *g)
{
	const mgt_gguf_kv *k;
	int ok = (k = mgt_gguf_kv_find(g, "general.architecture")) && k->type == MGT_GGUF_STR &&
		 k->n == 5 && strcmp(k->str, "llama") == 0;
	ok = ok && (k = mgt_gguf_kv_find(g, "llama.block_count")) && k->type == MGT_GGUF_U32 && k->u == 1;
	ok = ok && (k = mgt_gguf_kv_find(g, "test.i32")) && k->type == MGT_GGUF_I32 && k->i == -7;
	ok = ok && (k = mgt_gguf_kv_find(g, "test.u64")) && k->type == MGT_GGUF_U64 && k->u == UINT64_C(1) << 40;
	ok = ok && (k = mgt_gguf_kv_find(g, "llama.attention.layer_norm_rms_epsilon")) &&
	     k->type == MGT_GGUF_F32 && k->f == (double)1e-5f;
	ok = ok && (k = mgt_gguf_kv_find(g, "test.bool")) && k->type == MGT_GGUF_BOOL && k->u == 1;
	ok = ok && (k = mgt_gguf_kv_find(g, "tokenizer.ggml.tokens")) && k->type == MGT_GGUF_ARR &&
	     k->arr_type == MGT_GGUF_STR && k->n == 3 && k->lens[1] == 3 && memcmp(k->strs[1], "a\0b", 3) == 0 &&
	     strcmp(k->strs[2], "\xc4\xa0the") == 0;
	ok = ok && (k = mgt_gguf_kv_find(g, "tokenizer.ggml.token_type")) && k->arr_type == MGT_GGUF_I32 &&
	     k->n == 3 && ((const int32_t *)k->arr)[1] == -2;
	ok = ok && (k = mgt_gguf_kv_find(g, "tokenizer.ggml.scores")) && k->arr_type == MGT_GGUF_F32 &&
	     k->n == 2 && ((const float *)k->arr)[1] == -1.25f;
	ok = ok && (k = mgt_gguf_kv_find(g, "test.empty")) && k->n == 0;
	ok = ok && !mgt_gguf_kv_find(g, "nope") && strcmp(mgt_gguf_kv_at(g, 0)->key, "general.architecture") == 0;
	return ok;
}

static void test_gguf_roundtrip(void)
{
	uint32_t aligns[] = {0, 64};
	for (int a = 0; a < 2; a++) {
		char p[512];
		snprintf(p, sizeof p, "%s", path_in(a ? "a64.gguf" : "a32.gguf"));
		CHECK(write_gguf(p, aligns[a]) == MGT_OK, "gguf writer (alignment %u)", aligns[a] ? aligns[a] : 32);
		mgt_gguf *g;
		if (mgt_gguf_open(p, &g) != MGT_OK) {
			CHECK(0, "gguf reader opens the writer's file");
			continue;
		}
		uint32_t al = aligns[a] ? aligns[a] : 32;
		CHECK(mgt_gguf_alignment(g) == al && mgt_gguf_kv_count(g) == (aligns[a] ? 11u : 10u),
		      "alignment and kv count");
		CHECK(kv_ok(g), "every kv pair reads back with its type and value");
		int shapes = mgt_gguf_tensor_count(g) == NGS, data = 1, aligned = 1;
		for (size_t i = 0; i < NGS && shapes; i++) {
			const mgt_gguf_tensor *t = mgt_gguf_tensor_at(g, i);
			shapes = t && strcmp(t->name, GS[i].name) == 0 && t->type == GS[i].type &&
				 t->ndim == GS[i].ndim && mgt_gguf_tensor_find(g, GS[i].name) == t;
			for (int d = 0; shapes && d < t->ndim; d++)
				shapes = t->ne[d] == GS[i].shape[GS[i].ndim - 1 - d];
			for (int d = t->ndim; shapes && d < 4; d++)
				shapes = t->ne[d] == 1;
			if (!shapes)
				break;
			/* data section = the aligned end of the tensor infos; each offset aligned */
			aligned &= t->offset % al == 0;
			int64_t n = gnumel(&GS[i]);
			float *x = values(100 + (int)i, n), *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
			if (GS[i].type == MGT_GGML_Q8_0)
				ref_q8_0(x, n, want);
			else
				for (int64_t j = 0; j < n; j++)
					want[j] = gthrough(GS[i].type, x[j]);
			int good = mgt_gguf_read_f32(g, t, got) == MGT_OK;
			for (int64_t j = 0; good && j < n; j++) /* == : q8_0's zeros are +0 (d * 0) */
				good = got[j] == want[j];
			if (!good)
				printf("# %s differs\n", t->name);
			data &= good;
			free(x);
			free(got);
			free(want);
		}
		CHECK(shapes, "tensors: names, types, ne = the PyTorch shape reversed");
		CHECK(aligned, "tensor offsets are multiples of the alignment");
		CHECK(data, "tensor data: f32 exact, f16/bf16 as decoded by ldexp, q8_0 as ggml's formula");
		mgt_gguf_close(g);
	}
	/* Q8_0 details: an all-zero block, a block with max 127 * 2^-3 */
	float x[64] = {0}, y[64];
	unsigned char q[68];
	for (int j = 32; j < 64; j++)
		x[j] = (float)(j - 48) / 8.0f;
	x[63] = -127.0f / 8.0f;
	mgt_ggml_quantize_q8_0(x, 64, q);
	mgt_ggml_dequantize_q8_0(q, 64, y);
	int zero = q[0] == 0 && q[1] == 0, exact = 1;
	for (int j = 0; j < 32; j++)
		zero &= q[2 + j] == 0 && y[j] == 0;
	for (int j = 32; j < 64; j++)
		exact &= y[j] == x[j];
	CHECK(zero, "q8_0: an all-zero block has d = 0 and q = 0");
	CHECK(exact && (int8_t)q[34 + 2 + 31] == -127, "q8_0: multiples of max/127 come back exactly, q = -127 at the max");
}

static void test_gguf_writer_errors(void)
{
	mgt_gguf_writer *w;
	int64_t sh[2] = {4, 33}, ok[2] = {4, 32};
	mgt_gguf_writer_new(&w);
	CHECK(mgt_gguf_set_u32(w, "a", 1) == MGT_OK && mgt_gguf_set_str(w, "a", "x") == MGT_ERR_USAGE,
	      "gguf writer: duplicate key refused");
	CHECK(mgt_gguf_set_u32(w, "general.alignment", 48) == MGT_ERR_USAGE &&
	      mgt_gguf_set_u64(w, "general.alignment", 64) == MGT_ERR_USAGE, "alignment: u32 power of two only");
	CHECK(mgt_gguf_add_tensor(w, "q", MGT_GGML_Q8_0, 2, sh) == MGT_ERR_USAGE && has_msg("multiple of 32"),
	      "q8_0 rows not a multiple of 32 refused");
	CHECK(mgt_gguf_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123",
				  MGT_GGML_F32, 2, ok) == MGT_ERR_USAGE, "a 64-byte tensor name refused");
	CHECK(mgt_gguf_add_tensor(w, "t", MGT_GGML_F32, 5, ok) == MGT_ERR_USAGE, "5 dims refused");
	CHECK(mgt_gguf_add_tensor(w, "t", (mgt_ggml_type)2, 2, ok) == MGT_ERR_USAGE, "unsupported type refused");
	mgt_gguf_add_tensor(w, "t1", MGT_GGML_F32, 2, ok);
	mgt_gguf_add_tensor(w, "t2", MGT_GGML_Q8_0, 2, ok);
	char p[512];
	snprintf(p, sizeof p, "%s", path_in("w.gguf"));
	float v[128] = {0};
	CHECK(mgt_gguf_writer_open(w, p) == MGT_OK && mgt_gguf_set_u32(w, "b", 1) == MGT_ERR_USAGE,
	      "a setter after open refused");
	CHECK(mgt_gguf_put_f32(w, "t2", v) == MGT_ERR_USAGE && has_msg("out of order"),
	      "a put out of declaration order refused");
	mgt_gguf_writer_free(w);
	CHECK(!exists(p) && count_files(dir) >= 0, "free of an unfinished writer leaves no file");
	char cmd[600];
	snprintf(cmd, sizeof cmd, "ls '%s' | grep -q 'w.gguf'", dir);
	CHECK(system(cmd) != 0, "nor its temporary");
}

/* every prefix of a valid file, and some damaged copies: refused with MGT_ERR_FORMAT */
static void test_gguf_reader_errors(void)
{
	char p[512], q[512];
	snprintf(p, sizeof p, "%s", path_in("a32.gguf"));
	snprintf(q, sizeof q, "%s", path_in("cut.gguf"));
	char *buf = NULL;
	size_t n = 0;
	if (mgt_file_read(p, &buf, &n) != MGT_OK) {
		CHECK(0, "read a32.gguf");
		return;
	}
	int bad = 0;
	mgt_gguf *g = NULL;
	for (size_t k = 0; k < n; k += (k < 2000 ? 1 : 97)) {
		write_bytes(q, buf, k);
		mgt_status st = mgt_gguf_open(q, &g);
		bad += st != MGT_ERR_FORMAT || g != NULL || !has_msg("cut.gguf");
		mgt_gguf_close(g);
		g = NULL;
	}
	CHECK(bad == 0, "every truncation of a valid file is refused with MGT_ERR_FORMAT naming it (%d not)", bad);
	char *c = malloc(n);
	struct { size_t at; uint64_t v; int w; const char *msg, *what; } dm[] = {
		{0, 0x46554746, 4, "magic", "bad magic"},
		{4, 2, 4, "version 2", "version 2"},
		{8, UINT64_C(1) << 60, 8, "tensor count", "a huge tensor count"},
		{16, UINT64_C(1) << 60, 8, "kv count", "a huge kv count"},
		{24, UINT64_C(1) << 62, 8, "string length", "a huge key length"},
	};
	for (size_t i = 0; i < sizeof dm / sizeof dm[0]; i++) {
		memcpy(c, buf, n);
		memcpy(c + dm[i].at, &dm[i].v, (size_t)dm[i].w);
		write_bytes(q, c, n);
		CHECK(mgt_gguf_open(q, &g) == MGT_ERR_FORMAT && has_msg(dm[i].msg), "gguf reader: %s refused",
		      dm[i].what);
	}
	/* duplicate key: rename the second key ("llama.block_count", 17 bytes) to the first's
	 * prefix of the same length is not possible; write a file by hand instead */
	{
		unsigned char f[256];
		size_t o = 0;
		uint32_t u4;
		uint64_t u8;
#define PUT(x, nb) (memcpy(f + o, (x), (nb)), o += (nb))
		PUT("GGUF", 4); u4 = 3; PUT(&u4, 4); u8 = 0; PUT(&u8, 8); u8 = 2; PUT(&u8, 8);
		for (int k = 0; k < 2; k++) {
			u8 = 1; PUT(&u8, 8); PUT("k", 1); u4 = MGT_GGUF_U8; PUT(&u4, 4); PUT("\x05", 1);
		}
		write_bytes(q, f, o);
		CHECK(mgt_gguf_open(q, &g) == MGT_ERR_FORMAT && has_msg("duplicate key 'k'"), "duplicate keys refused");
		o = 24 - 8;
		u8 = 1; PUT(&u8, 8);
		u8 = 1; PUT(&u8, 8); PUT("k", 1); u4 = MGT_GGUF_ARR; PUT(&u4, 4); u4 = MGT_GGUF_ARR; PUT(&u4, 4);
		u8 = 0; PUT(&u8, 8);
		write_bytes(q, f, o);
		CHECK(mgt_gguf_open(q, &g) == MGT_ERR_FORMAT && has_msg("nested"), "nested arrays refused");
		/* a tensor with an unaligned offset, and one past the end */
		o = 8;
		u8 = 1; PUT(&u8, 8); u8 = 0; PUT(&u8, 8);
		u8 = 1; PUT(&u8, 8); PUT("t", 1); u4 = 1; PUT(&u4, 4); u8 = 4; PUT(&u8, 8);
		u4 = 0; PUT(&u4, 4); u8 = 16; PUT(&u8, 8);
		size_t at_off = o - 8;
		while (o % 32) f[o++] = 0;
		memset(f + o, 0, 64); o += 64;
		write_bytes(q, f, o);
		CHECK(mgt_gguf_open(q, &g) == MGT_ERR_FORMAT && has_msg("not a multiple of the alignment"),
		      "an unaligned tensor offset refused");
		u8 = 64; memcpy(f + at_off, &u8, 8);
		write_bytes(q, f, o);
		CHECK(mgt_gguf_open(q, &g) == MGT_ERR_FORMAT && has_msg("past the end"), "tensor data past the end refused");
		u8 = 32; memcpy(f + at_off, &u8, 8);
		write_bytes(q, f, o);
		CHECK(mgt_gguf_open(q, &g) == MGT_OK, "the same file with offset 32 opens (control)");
		mgt_gguf_close(g);
		g = NULL;
#undef PUT
	}
	free(c);
	free(buf);
}

/* ---- --write DIR: files for tests/cli/t4010-formats.sh ------------------------------------- */

static int write_known(const char *d)
{
	char p[600];
	mkdir(d, 0755);
	snprintf(p, sizeof p, "%s/single", d);
	mkdir(p, 0755);
	if (write_model(p, 0))
		return 1;
	snprintf(p, sizeof p, "%s/sharded", d);
	mkdir(p, 0755);
	if (write_model(p, 3000))
		return 1;
	snprintf(p, sizeof p, "%s/model.gguf", d);
	return write_gguf(p, 0) != MGT_OK;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--write") == 0) {
		int r = write_known(argv[2]);
		if (r)
			fprintf(stderr, "test_formats: %s\n", mgt_err_msg());
		return r;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/mgt-test-formats.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_dtypes();
	test_st_roundtrip();
	test_st_writer_errors();
	test_st_reader_errors();
	test_gguf_roundtrip();
	test_gguf_writer_errors();
	test_gguf_reader_errors();
	return check_finish();
}
