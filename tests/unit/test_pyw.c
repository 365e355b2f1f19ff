/* Unit tests for lib/ckpt/torchwrite.c, the torch.save writer (mgt_pyw_*).  Prints "ok"/"not ok"
 * per check and "N passed, M failed"; exits 1 on failure.
 *
 * Each case is a value described in JSON (the spec language below), driven through the writer
 * call by call, saved to DIR/<name>.pt (or, for one case, to memory and copied to offset 1000 of
 * a bigger file), with its tensors' bytes dumped to DIR/<name>.<k>.bin and the specs listed in
 * DIR/manifest.json.  Then tests/unit/pyw_check.py, under Debian's /usr/bin/python3 and its
 * python3-torch, loads every file with torch.load (the tensor-free one also with pickle.loads of
 * data.pkl), compares each value with its spec, checks the zip's structure (stored entries, the
 * record names, data 64-byte aligned by an FB field) and compares one case's data.pkl byte for byte
 * with what torch.save writes for the same value (that part is skipped, with a message, without
 * python3-torch).  The zip's local headers are also walked here, in C: every record stored, its
 * data 64-byte aligned by an FB field.  MGT_TEST_FULL=1 adds a record of 4 GiB + 1 byte (libzip's
 * zip64 field in its local header, a record after it past 4 GiB).  Then the error statuses.
 *
 * Spec language: JSON null, true, false, integers, reals, strings and arrays stand for None, bool,
 * int, float, str and list; objects with "t": {"t":"tuple","v":[...]}, {"t":"dict","v":[k, v,
 * ...]}, {"t":"odict","v":[...]}, {"t":"bits","hex":"<16 hex digits>"} (a float by its IEEE bits),
 * {"t":"bytes","hex":"..."} or {"t":"bytes","range":[a,b]} (bytes(range(a, b))), {"t":"global",
 * "m":M,"n":N}, {"t":"obj","m":M,"n":N[,"state":S]}, {"t":"reduce","m":M,"n":N,"args":[...]},
 * {"t":"tensor","dtype":"BF16","shape":[...]} (bytes from a fixed generator), {"t":"seq","n":N}
 * (list(range(N))), {"t":"seqdict","n":N} ({i: -i for i < N}), {"t":"seqodict","n":N} (the same
 * as an OrderedDict).  Single quotes in the specs below
 * stand for double quotes. */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static int has_msg(const char *s) { return strstr(mgt_err_msg(), s) != NULL; }

/* ---- driving the writer from a spec -------------------------------------------------------- */

typedef struct {
	const char *name; /* case name: tensor dumps are <name>.<k>.bin */
	void **keep;      /* tensor buffers, alive until the save */
	int nkeep;
	json_t *files;    /* the dump file names, in tensor order */
} driver;

static uint64_t lcg = 88172645463325252ull;
static unsigned char next_byte(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned char)(lcg >> 56);
}

static int tensor(mgt_pyw *w, driver *d, json_t *s)
{
	mgt_dt dt;
	json_t *shape = json_object_get(s, "shape");
	if (!mgt_dt_parse(json_string_value(json_object_get(s, "dtype")), &dt) || !json_is_array(shape))
		return -1;
	int64_t size[8], numel = 1;
	int nd = (int)json_array_size(shape);
	for (int i = 0; i < nd && i < 8; i++)
		numel *= size[i] = json_integer_value(json_array_get(shape, (size_t)i));
	size_t nb = (size_t)numel * mgt_dt_size(dt);
	unsigned char *p = malloc(nb ? nb : 1);
	for (size_t i = 0; i < nb; i++)
		p[i] = dt == MGT_ST_BOOL ? next_byte() & 1 : next_byte();
	char fn[128];
	snprintf(fn, sizeof fn, "%s.%d.bin", d->name, d->nkeep);
	FILE *f = fopen(path_in(fn), "wb");
	if (!f || fwrite(p, 1, nb, f) != nb || fclose(f))
		return -1;
	d->keep = realloc(d->keep, (size_t)(d->nkeep + 1) * sizeof *d->keep);
	d->keep[d->nkeep++] = p;
	json_array_append_new(d->files, json_string(fn));
	mgt_pyw_tensor(w, dt, nd, size, p);
	return 0;
}

static int emit(mgt_pyw *w, driver *d, json_t *s);

static int emit_items(mgt_pyw *w, driver *d, json_t *a)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v)
		if (emit(w, d, v))
			return -1;
	return 0;
}

static int emit_bytes(mgt_pyw *w, json_t *s)
{
	unsigned char b[4096];
	size_t n = 0;
	json_t *r = json_object_get(s, "range");
	const char *hex = json_string_value(json_object_get(s, "hex"));
	if (r)
		for (json_int_t i = json_integer_value(json_array_get(r, 0)); i < json_integer_value(json_array_get(r, 1)); i++)
			b[n++] = (unsigned char)i;
	for (; hex && hex[2 * n] && n < sizeof b; n++) {
		unsigned v;
		if (sscanf(hex + 2 * n, "%2x", &v) != 1)
			return -1;
		b[n] = (unsigned char)v;
	}
	mgt_pyw_bytes(w, b, n);
	return 0;
}

static int emit_obj(mgt_pyw *w, driver *d, json_t *s, const char *t)
{
	const char *m = json_string_value(json_object_get(s, "m")), *n = json_string_value(json_object_get(s, "n"));
	if (strcmp(t, "global") == 0) {
		mgt_pyw_global(w, m, n);
		return 0;
	}
	if (strcmp(t, "obj") == 0) {
		mgt_pyw_obj_begin(w, m, n);
		json_t *st = json_object_get(s, "state");
		if (st && emit(w, d, st))
			return -1;
		mgt_pyw_obj_end(w);
		return 0;
	}
	mgt_pyw_reduce_begin(w, m, n);
	if (emit_items(w, d, json_object_get(s, "args")))
		return -1;
	mgt_pyw_reduce_end(w);
	return 0;
}

static int emit_tagged(mgt_pyw *w, driver *d, json_t *s)
{
	const char *t = json_string_value(json_object_get(s, "t"));
	json_t *v = json_object_get(s, "v");
	json_int_t n = json_integer_value(json_object_get(s, "n"));
	if (!t)
		return -1;
	if (strcmp(t, "tuple") == 0 || strcmp(t, "dict") == 0 || strcmp(t, "odict") == 0) {
		void (*b)(mgt_pyw *) = t[0] == 't' ? mgt_pyw_tuple_begin : t[0] == 'd' ? mgt_pyw_dict_begin : mgt_pyw_odict_begin;
		void (*e)(mgt_pyw *) = t[0] == 't' ? mgt_pyw_tuple_end : t[0] == 'd' ? mgt_pyw_dict_end : mgt_pyw_odict_end;
		b(w);
		if (emit_items(w, d, v))
			return -1;
		e(w);
	} else if (strcmp(t, "bits") == 0) {
		uint64_t u = strtoull(json_string_value(json_object_get(s, "hex")), NULL, 16);
		double f;
		memcpy(&f, &u, 8);
		mgt_pyw_float(w, f);
	} else if (strcmp(t, "bytes") == 0) {
		return emit_bytes(w, s);
	} else if (strcmp(t, "tensor") == 0) {
		return tensor(w, d, s);
	} else if (strncmp(t, "seq", 3) == 0) {
		int k = t[3] == 'd' ? 1 : t[3] == 'o' ? 2 : 0;
		(k == 1 ? mgt_pyw_dict_begin : k == 2 ? mgt_pyw_odict_begin : mgt_pyw_list_begin)(w);
		for (json_int_t i = 0; i < n; i++) {
			mgt_pyw_int(w, i);
			if (k)
				mgt_pyw_int(w, -i);
		}
		(k == 1 ? mgt_pyw_dict_end : k == 2 ? mgt_pyw_odict_end : mgt_pyw_list_end)(w);
	} else {
		return emit_obj(w, d, s, t);
	}
	return 0;
}

static int emit(mgt_pyw *w, driver *d, json_t *s)
{
	switch (json_typeof(s)) {
	case JSON_NULL: mgt_pyw_none(w); return 0;
	case JSON_TRUE: mgt_pyw_bool(w, true); return 0;
	case JSON_FALSE: mgt_pyw_bool(w, false); return 0;
	case JSON_INTEGER: mgt_pyw_int(w, json_integer_value(s)); return 0;
	case JSON_REAL: mgt_pyw_float(w, json_real_value(s)); return 0;
	case JSON_STRING: mgt_pyw_str(w, json_string_value(s)); return 0;
	case JSON_ARRAY:
		mgt_pyw_list_begin(w);
		if (emit_items(w, d, s))
			return -1;
		mgt_pyw_list_end(w);
		return 0;
	default: return emit_tagged(w, d, s);
	}
}

/* ---- the cases ------------------------------------------------------------------------------ */

static const char *const spec_scalars =
	"{'t':'dict','v':["
	" 'none', null, 'true', true, 'false', false,"
	" 'ints', [0, 1, 255, 256, 65535, 65536, -1, -128, -129, -255, -256, 2147483647, -2147483648,"
	"  2147483648, -2147483649, 4294967295, 4294967296, -549755813888, 1099511627776,"
	"  9223372036854775807, -9223372036854775807, -9223372036854775808],"
	" 'floats', [0.0, 1.0, -2.5, 0.1, 1e308, 5e-324, 3.141592653589793,"
	"  {'t':'bits','hex':'8000000000000000'}, {'t':'bits','hex':'7ff0000000000000'},"
	"  {'t':'bits','hex':'fff0000000000000'}, {'t':'bits','hex':'7ff8000000000000'}],"
	" 'strs', ['', 'a', 'plain ascii', 'caf\u00e9', '\u65e5\u672c\u8a9e', '\U0001F600 emoji', 'tab\\tnewline\\n'],"
	" 'bytes', [{'t':'bytes','hex':''}, {'t':'bytes','hex':'00'}, {'t':'bytes','range':[0,256]},"
	"  {'t':'bytes','hex':'ff80417f'}],"
	" 'nested', {'t':'dict','v':['a', {'t':'odict','v':['x', {'t':'tuple','v':[1, [2, {'t':'tuple','v':[]}],"
	"  {'t':'tuple','v':[3]}, {'t':'tuple','v':[4, 5]}, {'t':'tuple','v':[6, 7, 8]}, {'t':'tuple','v':[9, 10, 11, 12]}]}]},"
	"  'empty', [[], {'t':'dict','v':[]}, {'t':'odict','v':[]}, {'t':'tuple','v':[]}]]},"
	" 7, 'int key', {'t':'tuple','v':[1, 'two']}, 'tuple key', null, 'none value',"
	" 'args', {'t':'obj','m':'argparse','n':'Namespace','state':{'t':'dict','v':['num_layers', 2,"
	"  'hidden_size', 64, 'params_dtype', {'t':'global','m':'torch','n':'bfloat16'}, 'swiglu', true,"
	"  'norm_epsilon', 1e-05, 'save', '/tmp/x', 'moe_layer_freq', 1]}},"
	" 'frozen', {'t':'obj','m':'__main__','n':'FrozenPoint','state':{'t':'dict','v':['x', 1, 'y', 'two']}},"
	" 'tuple_state', {'t':'obj','m':'__main__','n':'TupleState','state':{'t':'tuple','v':[1, 'b', null, 2.5, false]}},"
	" 'no_state', {'t':'obj','m':'__main__','n':'Empty'},"
	" 'enum', {'t':'reduce','m':'__main__','n':'Color','args':[2]},"
	" 'size', {'t':'reduce','m':'torch','n':'Size','args':[{'t':'tuple','v':[2, 3, 4]}]},"
	" 'size0', {'t':'reduce','m':'torch','n':'Size','args':[{'t':'tuple','v':[]}]},"
	" 'globals', [{'t':'global','m':'torch','n':'bfloat16'}, {'t':'global','m':'torch','n':'float32'},"
	"  {'t':'global','m':'torch','n':'bfloat16'}, {'t':'global','m':'builtins','n':'range'},"
	"  {'t':'global','m':'builtins','n':'set'}, {'t':'global','m':'collections','n':'OrderedDict'},"
	"  {'t':'global','m':'__main__','n':'Outer.Inner'}, {'t':'global','m':'copyreg','n':'_reconstructor'}],"
	" 'batches', [{'t':'seq','n':1}, {'t':'seq','n':999}, {'t':'seq','n':1000}, {'t':'seq','n':1001},"
	"  {'t':'seq','n':2500}, {'t':'seqdict','n':1}, {'t':'seqdict','n':1000}, {'t':'seqdict','n':1001},"
	"  {'t':'seqdict','n':2001}, {'t':'seqodict','n':1001}]"
	"]}";

/* Every dtype, 0-d, 1-d, 3-d and empty shapes. */
static json_t *spec_tensors(void)
{
	static const char *dts[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"};
	json_t *v = json_array();
	for (int i = 0; i < 10; i++) {
		const char *shapes[] = {"[]", "[7]", "[2,3,5]", "[0]", "[2,0,3]"};
		for (int k = 0; k < 5; k++) {
			char key[64], js[128];
			snprintf(key, sizeof key, "%s_%d", dts[i], k);
			snprintf(js, sizeof js, "{\"t\":\"tensor\",\"dtype\":\"%s\",\"shape\":%s}", dts[i], shapes[k]);
			json_array_append_new(v, json_string(key));
			json_array_append_new(v, json_loads(js, 0, NULL));
		}
	}
	json_t *o = json_pack("{s:s, s:o}", "t", "odict", "v", v);
	return o;
}

/* A model_optim_rng.pt-like value whose data.pkl must equal torch.save's byte for byte. */
static const char *const spec_megatron =
	"{'t':'dict','v':["
	" 'args', {'t':'obj','m':'argparse','n':'Namespace','state':{'t':'dict','v':['num_layers', 2,"
	"  'hidden_size', 64, 'params_dtype', {'t':'global','m':'torch','n':'bfloat16'}, 'bf16', true,"
	"  'fp16', false, 'norm_epsilon', 1e-05, 'seed', 1234, 'lr', 0.0003, 'load', null,"
	"  'data_path', ['data/a_text_document', 'data/b_text_document'], 'big', 4294967296,"
	"  'ints', [-1, -2147483648, -2147483649, -549755813888, 255, 256, 65535, 65536, 2147483647, 2147483648,"
	"   1099511627776, 9223372036854775807, -9223372036854775808]]}},"
	" 'checkpoint_version', 3.0, 'iteration', 700,"
	" 'model', {'t':'odict','v':["
	"  'embedding.word_embeddings.weight', {'t':'tensor','dtype':'BF16','shape':[16,8]},"
	"  'decoder.layers.0.self_attention.linear_qkv.weight', {'t':'tensor','dtype':'BF16','shape':[24,8]},"
	"  'decoder.layers.0.self_attention.linear_qkv._extra_state', null,"
	"  'decoder.final_layernorm.weight', {'t':'tensor','dtype':'F32','shape':[8]},"
	"  'scalar', {'t':'tensor','dtype':'F32','shape':[]},"
	"  'mask', {'t':'tensor','dtype':'BOOL','shape':[3,2]}]},"
	" 'rng_state', [{'t':'dict','v':['random_rng_state', {'t':'tuple','v':[3, {'t':'tuple','v':[2147483648, 4294967295, 12]}, null]},"
	"  'np_rng_state', {'t':'tuple','v':['MT19937', {'t':'tensor','dtype':'I64','shape':[4]}, 624, 0, 0.0]},"
	"  'torch_rng_state', {'t':'tensor','dtype':'U8','shape':[16]},"
	"  'blob', {'t':'bytes','hex':'00ff10'}, 'blob2', {'t':'bytes','hex':'8081'}]}],"
	" 'opt_param_scheduler', {'t':'dict','v':['max_lr', 0.0003, 'num_steps', 1400, 'decay_style', 'cosine']},"
	" 'sizes', {'t':'tuple','v':[{'t':'reduce','m':'torch','n':'Size','args':[{'t':'tuple','v':[4, 8]}]},"
	"  {'t':'global','m':'torch','n':'float32'}, {'t':'global','m':'torch','n':'bfloat16'},"
	"  {'t':'global','m':'builtins','n':'range'}, {'t':'global','m':'builtins','n':'set'},"
	"  {'t':'global','m':'__main__','n':'Outer.Inner'}, {'t':'global','m':'__main__','n':'Outer.Inner'},"
	"  {'t':'reduce','m':'builtins','n':'getattr','args':[{'t':'global','m':'__main__','n':'Color'}, 'RED']},"
	"  {'t':'obj','m':'__main__','n':'Empty'}]},"
	" 'batches', [{'t':'seq','n':1}, {'t':'seq','n':2}, {'t':'seq','n':1000}, {'t':'seq','n':1001},"
	"  {'t':'seq','n':2001}, {'t':'seqdict','n':1}, {'t':'seqdict','n':1000}, {'t':'seqdict','n':1001},"
	"  {'t':'seqdict','n':2000}, {'t':'seqodict','n':1}, {'t':'seqodict','n':1000}, {'t':'seqodict','n':1001},"
	"  {'t':'seqodict','n':2000}],"
	" 'num_floating_point_operations_so_far', 123456789012]}";

static json_t *quoted(const char *s)
{
	char *t = strdup(s);
	for (char *p = t; *p; p++)
		if (*p == '\'')
			*p = '"';
	json_error_t e;
	json_t *j = json_loads(t, 0, &e);
	if (!j)
		printf("# spec error: %s at %d\n", e.text, e.position);
	free(t);
	return j;
}

/* ---- the zip's layout, read here (without Python) -------------------------------------------- */

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Walk the local headers of the zip at offset base of path, entry after entry (the writer leaves
 * no gaps or data descriptors) until the central directory: each must be stored, carry an FB
 * field of 'Z's and start its data at a multiple of 64 from base.  Returns the entry count, -1
 * for a bad entry (named in *why). */
static int walk_zip(const char *path, uint64_t base, char *why, size_t wn)
{
	FILE *f = fopen(path, "rb");
	unsigned char h[30], ex[1024];
	uint64_t off = 0;
	int n = 0;
	snprintf(why, wn, "cannot read");
	while (f && fseeko(f, (off_t)(base + off), SEEK_SET) == 0 && fread(h, 1, 30, f) == 30 &&
	       memcmp(h, "PK\3\4", 4) == 0) {
		uint64_t csize = le(h + 18, 4), nlen = le(h + 26, 2), elen = le(h + 28, 2), start = off + 30 + nlen + elen;
		bool fb = false, z64 = csize != 0xffffffffu;
		if (le(h + 8, 2) != 0 || elen > sizeof ex || fseeko(f, (off_t)nlen, SEEK_CUR) ||
		    fread(ex, 1, elen, f) != elen)
			break;
		for (uint64_t e = 0; e + 4 <= elen; e += 4 + le(ex + e + 2, 2)) {
			uint64_t id = le(ex + e, 2), sz = le(ex + e + 2, 2);
			if (id == 1 && sz == 16) /* zip64: uncompressed, compressed size */
				csize = le(ex + e + 12, 8), z64 = true;
			bool z = e + 4 + sz <= elen;
			for (uint64_t i = 0; z && i < sz; i++)
				z = ex[e + 4 + i] == 'Z';
			fb |= id == 0x4246 && z;
		}
		if (!fb || !z64 || start % 64) {
			snprintf(why, wn, "entry %d: data at %llu, FB field %d", n, (unsigned long long)start, fb);
			n = -1;
			break;
		}
		off = start + csize;
		n++;
	}
	if (f)
		fclose(f);
	return n;
}

/* Drive spec into a new writer; save to DIR/<name>.pt with arch (mem: to memory, embedded at
 * offset 1000 of DIR/<name>.bin).  Adds the case to the manifest. */
static void run_case(json_t *man, const char *name, const char *arch, json_t *spec, bool mem, bool same)
{
	driver d = {.name = name, .files = json_array()};
	mgt_pyw *w = NULL;
	mgt_status st = mgt_pyw_new(&w);
	int r = st ? -1 : emit(w, &d, spec);
	char fn[128];
	snprintf(fn, sizeof fn, "%s.%s", name, mem ? "bin" : "pt");
	uint64_t off = 0;
	size_t n = 0;
	if (!r && !mem) {
		st = mgt_pyw_save(w, path_in(fn), arch);
	} else if (!r) {
		void *buf = NULL;
		st = mgt_pyw_to_mem(w, arch, &buf, &n);
		FILE *f = fopen(path_in(fn), "wb");
		static char junk[1000];
		memset(junk, 'j', sizeof junk);
		off = sizeof junk;
		if (!st && (!f || fwrite(junk, 1, off, f) != off || fwrite(buf, 1, n, f) != n || fwrite(junk, 1, 77, f) != 77))
			st = MGT_ERR_IO;
		if (f)
			fclose(f);
		free(buf);
	}
	CHECK(!r && !st, "%s: written (%s, %zu tensors)", name, mem ? "to memory" : fn, json_array_size(d.files));
	char why[128];
	int ne = walk_zip(path_in(fn), off, why, sizeof why);
	CHECK(ne == (int)json_array_size(d.files) + 3, "%s: %d stored entries, each with its data 64-byte aligned by an FB field (%s)",
	      name, ne, ne < 0 ? why : "ok");
	json_array_append_new(man, json_pack("{s:s, s:s, s:O, s:o, s:b, s:I, s:I, s:b}", "file", fn, "arch", arch,
					     "spec", spec, "tensors", d.files, "mem", mem, "offset", (json_int_t)off,
					     "length", (json_int_t)n, "same_as_torch", same));
	mgt_pyw_free(w);
	for (int i = 0; i < d.nkeep; i++)
		free(d.keep[i]);
	free(d.keep);
	json_decref(spec);
}

static void test_python(void)
{
	json_t *man = json_array();
	run_case(man, "scalars", "scalars", quoted(spec_scalars), false, false);
	run_case(man, "tensors", "model_optim_rng", spec_tensors(), false, false);
	run_case(man, "megatron", "megatron", quoted(spec_megatron), false, true);
	run_case(man, "item", "archive", quoted(spec_megatron), true, true);
	run_case(man, "single", "archive", quoted("{'t':'tensor','dtype':'F16','shape':[1000,3]}"), false, false);
	CHECK(json_dump_file(man, path_in("manifest.json"), JSON_INDENT(1)) == 0, "manifest written");
	json_decref(man);
	if (access("/usr/bin/python3", X_OK) != 0 ||
	    system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
		printf("# skip: no /usr/bin/python3 with python3-torch for tests/unit/pyw_check.py\n");
		return;
	}
	char cmd[600];
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/unit/pyw_check.py %s", dir);
	fflush(stdout); /* the checker's lines after ours */
	int rc = system(cmd);
	CHECK(rc == 0, "tests/unit/pyw_check.py: torch.load reads every file as specified (status %d)", rc);
}

/* Under MGT_TEST_FULL: a storage of 2^32 + 1 bytes (zero pages, mapped, not resident) between two
 * small ones: its local header gets libzip's zip64 field, and the record after it starts past
 * 4 GiB; all stay aligned.  Writes 4 GiB to DIR (about 13 s here). */
static void test_big(void)
{
	if (!getenv("MGT_TEST_FULL") || !*getenv("MGT_TEST_FULL") || *getenv("MGT_TEST_FULL") == '0') {
		printf("# skip: the 4 GiB record (MGT_TEST_FULL=1 runs it)\n");
		return;
	}
	int64_t big[1] = {((int64_t)1 << 32) + 1}, small[1] = {3};
	void *p = mmap(NULL, (size_t)big[0], PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	static const float x[3] = {1, 2, 3};
	mgt_pyw *w;
	mgt_pyw_new(&w);
	mgt_pyw_list_begin(w);
	mgt_pyw_tensor(w, MGT_ST_F32, 1, small, x);
	mgt_pyw_tensor(w, MGT_ST_U8, 1, big, p);
	mgt_pyw_tensor(w, MGT_ST_F32, 1, small, x);
	mgt_pyw_list_end(w);
	mgt_status st = p == MAP_FAILED ? MGT_ERR_NOMEM : mgt_pyw_save(w, path_in("big.pt"), "big");
	char why[128];
	int n = st ? -1 : walk_zip(path_in("big.pt"), 0, why, sizeof why);
	CHECK(!st && n == 6, "a 4 GiB + 1 byte record: %d entries aligned (%s)", n, st ? mgt_err_msg() : n < 0 ? why : "ok");
	mgt_pyw_free(w);
	if (p != MAP_FAILED)
		munmap(p, (size_t)big[0]);
	remove(path_in("big.pt"));
}

/* ---- errors ---------------------------------------------------------------------------------- */

static mgt_status saved(mgt_pyw *w)
{
	mgt_status st = mgt_pyw_save(w, path_in("err.pt"), "err");
	return st;
}

static void test_errors(void)
{
	mgt_pyw *w;
	mgt_pyw_new(&w);
	mgt_pyw_list_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("list_end without list_begin"), "end without begin: %s", mgt_err_msg());
	mgt_pyw_int(w, 1);
	mgt_err(MGT_ERR_IO, "something else");
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("list_end without"), "the error sticks, message kept: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_list_begin(w);
	mgt_pyw_dict_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("dict_end without"), "dict_end closing a list: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "k");
	mgt_pyw_dict_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("odd number"), "dict with odd item count: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_odict_begin(w);
	mgt_pyw_str(w, "k");
	mgt_pyw_int(w, 1);
	mgt_pyw_int(w, 2);
	mgt_pyw_odict_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("odd number"), "odict with odd item count: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_list_begin(w);
	mgt_pyw_tuple_begin(w);
	mgt_pyw_tuple_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("container still open"), "save with an open container: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("exactly one root"), "save with no value: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_int(w, 1);
	mgt_pyw_none(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("more than one root"), "save with two values: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_obj_begin(w, "argparse", "Namespace");
	mgt_pyw_none(w);
	mgt_pyw_none(w);
	mgt_pyw_obj_end(w);
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("one state"), "object with two states: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_str(w, "bad \xff utf-8");
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("UTF-8"), "invalid UTF-8 string: %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_global(w, "torch", "bad\nname");
	CHECK(saved(w) == MGT_ERR_USAGE && has_msg("global"), "global with a newline: %s", mgt_err_msg());
	mgt_pyw_free(w);

	int64_t bad[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, neg[2] = {2, -1};
	float x = 0;
	struct { int nd; const int64_t *sz; const void *data; mgt_dt dt; const char *why; } tc[] = {
		{9, bad, &x, MGT_ST_F32, "9 dims"}, {2, neg, &x, MGT_ST_F32, "negative size"},
		{1, bad, NULL, MGT_ST_F32, "NULL data"}, {1, bad, &x, (mgt_dt)MGT_ST_COUNT, "bad dtype"},
	};
	for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
		mgt_pyw_new(&w);
		mgt_pyw_tensor(w, tc[i].dt, tc[i].nd, tc[i].sz, tc[i].data);
		CHECK(saved(w) == MGT_ERR_USAGE && has_msg("tensor"), "tensor with %s: %s", tc[i].why, mgt_err_msg());
		mgt_pyw_free(w);
	}

	mgt_pyw_new(&w);
	mgt_pyw_int(w, 5);
	CHECK(mgt_pyw_save(w, "/nonexistent-mgt-dir/x.pt", "x") == MGT_ERR_IO && has_msg("/nonexistent-mgt-dir/x.pt"),
	      "unwritable path: %s", mgt_err_msg());
	CHECK(mgt_pyw_save(w, dir, "x") == MGT_ERR_IO && has_msg(dir), "a directory as the path: %s", mgt_err_msg());
	if (access("/dev/full", W_OK) == 0)
		CHECK(mgt_pyw_save(w, "/dev/full", "x") == MGT_ERR_IO && has_msg("/dev/full"), "a full device: %s", mgt_err_msg());
	CHECK(mgt_pyw_save(w, path_in("a/b"), "x") == MGT_ERR_IO, "missing directory: %s", mgt_err_msg());
	CHECK(mgt_pyw_save(w, path_in("x.pt"), "bad/arch") == MGT_ERR_USAGE && has_msg("archive name"), "arch with '/': %s", mgt_err_msg());
	mgt_pyw_free(w);

	mgt_pyw_new(&w);
	mgt_pyw_int(w, 5);
	void *buf = (void *)1;
	size_t n = 1;
	CHECK(mgt_pyw_to_mem(w, "archive", &buf, &n) == MGT_OK && buf && n > 0, "to_mem: %zu bytes", n);
	free(buf);
	CHECK(mgt_pyw_save(w, path_in("twice.pt"), "twice") == MGT_OK, "a second save of the same writer works");
	mgt_pyw_int(w, 6);
	CHECK(mgt_pyw_to_mem(w, "archive", &buf, &n) == MGT_ERR_USAGE && !buf && n == 0 && has_msg("after"),
	      "a value after the save: %s", mgt_err_msg());
	mgt_pyw_free(w);
	remove(path_in("twice.pt"));
	remove(path_in("x.pt"));
	mgt_pyw_free(NULL);
}

int main(void)
{
	snprintf(dir, sizeof dir, "%s/mgt-test-pyw.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		printf("not ok - cannot make a scratch directory\n");
		return 1;
	}
	test_errors();
	test_python();
	test_big();
	return check_finish();
}
