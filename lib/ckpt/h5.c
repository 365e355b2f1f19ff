/* lib/ckpt: HDF5 helpers (see ckpt_impl.h). */
#include "ckpt/ckpt_impl.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* Target bytes per chunk: big enough for fast streaming, small enough that a resharding read
 * of a few rows touches little more than it needs. */
#define CK_CHUNK_BYTES ((size_t)4 << 20)

size_t mgt_ckpt_dtype_size(mgt_ckpt_dtype dt) { return dt == MGT_CKPT_F64 ? 8 : 4; }

const char *mgt_ckpt_dtype_name(mgt_ckpt_dtype dt)
{
	switch (dt) {
	case MGT_CKPT_F32: return "float32";
	case MGT_CKPT_F64: return "float64";
	case MGT_CKPT_I32: return "int32";
	}
	return "?";
}

static _Thread_local char why_buf[256];

/* Keep the first (innermost) description; of a system call's failure only its strerror text. */
static herr_t why_cb(unsigned n, const H5E_error2_t *e, void *data)
{
	char *buf = data;
	if (buf[0] || !e->desc || !e->desc[0])
		return 0;
	const char *m = strstr(e->desc, "error message = '");
	if (m)
		snprintf(buf, sizeof why_buf, "%.*s", (int)strcspn(m + 17, "'"), m + 17);
	else
		snprintf(buf, sizeof why_buf, "%s", e->desc);
	return 0;
}

/* HDF5 calls this instead of printing when an API call fails, with the stack still whole:
 * keep the innermost description for ck_h5_why. */
static herr_t on_error(hid_t stack, void *data)
{
	(void)data;
	why_buf[0] = 0;
	H5Ewalk2(stack, H5E_WALK_UPWARD, why_cb, why_buf);
	return 0;
}

/* HDF5 1.10 leaks blocks of its free lists when it fails to decode the metadata of a corrupt
 * file (nothing of ours stays open: H5Fget_obj_count is 0 after H5Fclose), and at exit its
 * H5_term_library then prints "HDF5: infinite loop closing library" to stderr whenever an
 * automatic error function is set.  So the recording function is taken away just before that:
 * handlers registered with atexit run in reverse order, and ours is registered after the
 * library's (H5Eset_auto2 has initialised it). */
static void quiet_at_exit(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* No H5_term_library at exit at all where we are first to use the library: it only frees memory
 * (our files are closed when each call returns), and it is what prints, or crashes on a file
 * whose close failed.  Where the library was started before (H5dont_atexit then fails), the
 * error function is taken away before it runs. */
static void quiet_once(void)
{
	H5dont_atexit(); /* fails, harmlessly, when the library was started before */
	H5Eset_auto2(H5E_DEFAULT, on_error, NULL);
	atexit(quiet_at_exit);
}

void ck_h5_quiet(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, quiet_once);
	H5Eset_auto2(H5E_DEFAULT, on_error, NULL);
}

const char *ck_h5_why(void)
{
	static _Thread_local char out[sizeof why_buf];
	snprintf(out, sizeof out, "%s", why_buf[0] ? why_buf : "HDF5 error");
	why_buf[0] = 0;
	return out;
}

hid_t ck_h5_file_type(mgt_ckpt_dtype dt)
{
	switch (dt) {
	case MGT_CKPT_F32: return H5T_IEEE_F32LE;
	case MGT_CKPT_F64: return H5T_IEEE_F64LE;
	case MGT_CKPT_I32: return H5T_STD_I32LE;
	}
	return 0;
}

hid_t ck_h5_mem_type(mgt_ckpt_dtype dt)
{
	switch (dt) {
	case MGT_CKPT_F32: return H5T_NATIVE_FLOAT;
	case MGT_CKPT_F64: return H5T_NATIVE_DOUBLE;
	case MGT_CKPT_I32: return H5T_NATIVE_INT32;
	}
	return 0;
}

hid_t ck_h5_fapl(void)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl >= 0)
		H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
	return fapl;
}

/* Non-empty, not "." or ".."; with groups, every '/'-separated component so, else no '/'. */
static bool name_ok(const char *s, bool groups)
{
	if (!s)
		return false;
	for (;;) {
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		if (!s[n])
			return true;
		if (!groups)
			return false;
		s += n + 1;
	}
}

mgt_status ck_piece_check(const mgt_ckpt_piece *p, bool dump)
{
	const char *nm = p->name ? p->name : "(null)";
	if (!name_ok(p->name, dump))
		return mgt_err(MGT_ERR_USAGE, "'%s': bad tensor name", nm);
	if (p->ndim < 1 || p->ndim > MGT_CKPT_MAX_DIM)
		return mgt_err(MGT_ERR_USAGE, "%s: ndim %d (expected 1 to %d)", nm, p->ndim,
			       MGT_CKPT_MAX_DIM);
	if (!ck_h5_file_type(p->dtype) || !p->data)
		return mgt_err(MGT_ERR_USAGE, "%s: bad dtype or no data", nm);
	for (int d = 0; d < p->ndim; d++)
		if (p->shape[d] < 1 || (!dump && (p->offset[d] < 0 ||
		    p->offset[d] + p->shape[d] > p->global_shape[d])))
			return mgt_err(MGT_ERR_USAGE, "%s: piece offset %lld shape %lld outside global "
				       "size %lld along dim %d", nm, (long long)p->offset[d],
				       (long long)p->shape[d], (long long)p->global_shape[d], d);
	return MGT_OK;
}

/* Chunks are whole trailing dims with leading dims halved until under CK_CHUNK_BYTES. */
static hid_t chunked_dcpl(const mgt_ckpt_piece *p)
{
	hsize_t ch[MGT_CKPT_MAX_DIM];
	size_t bytes = mgt_ckpt_dtype_size(p->dtype);
	for (int d = 0; d < p->ndim; d++)
		bytes *= (size_t)(ch[d] = (hsize_t)p->shape[d]);
	for (int d = 0; d < p->ndim && bytes > CK_CHUNK_BYTES; d++)
		while (ch[d] > 1 && bytes > CK_CHUNK_BYTES) {
			bytes = bytes / ch[d] * ((ch[d] + 1) / 2);
			ch[d] = (ch[d] + 1) / 2;
		}
	hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
	if (dcpl < 0 || H5Pset_chunk(dcpl, p->ndim, ch) < 0 || H5Pset_fletcher32(dcpl) < 0 ||
	    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0) {
		H5Pclose(dcpl);
		return -1;
	}
	return dcpl;
}

static mgt_status put_i64_attr(hid_t ds, const char *name, int n, const int64_t *v)
{
	hsize_t dim = (hsize_t)n;
	hid_t sp = H5Screate_simple(1, &dim, NULL);
	hid_t a = sp < 0 ? -1 : H5Acreate2(ds, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
	herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, v);
	if (a >= 0 && H5Aclose(a) < 0)
		r = -1;
	if (sp >= 0)
		H5Sclose(sp);
	return r < 0 ? MGT_ERR_IO : MGT_OK;
}

static mgt_status put_u64_attr(hid_t ds, const char *name, uint64_t v)
{
	hid_t sp = H5Screate(H5S_SCALAR);
	hid_t a = sp < 0 ? -1 : H5Acreate2(ds, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
	herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_UINT64, &v);
	if (a >= 0 && H5Aclose(a) < 0)
		r = -1;
	if (sp >= 0)
		H5Sclose(sp);
	return r < 0 ? MGT_ERR_IO : MGT_OK;
}

size_t ck_piece_bytes(int ndim, const int64_t *shape, mgt_ckpt_dtype dt)
{
	size_t n = mgt_ckpt_dtype_size(dt);
	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	return n;
}

herr_t ck_h5_rows(hid_t ds, int ndim, const int64_t *shape, mgt_ckpt_dtype dt, void *buf, bool write,
		  mgt_xxh3 *h)
{
	size_t row = ck_piece_bytes(ndim - 1, shape + 1, dt);
	int64_t k = row ? (int64_t)(CK_CHUNK_BYTES / row) : shape[0];
	hsize_t ch[MGT_CKPT_MAX_DIM];
	hid_t dcpl = H5Dget_create_plist(ds);
	if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, ndim, ch) == ndim)
		k = (int64_t)ch[0]; /* whole chunks per slab: no chunk is written or read twice */
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (k < 1)
		k = 1;
	hsize_t start[MGT_CKPT_MAX_DIM] = {0}, cnt[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < ndim; d++)
		cnt[d] = (hsize_t)shape[d];
	hid_t fsp = H5Dget_space(ds);
	herr_t e = fsp < 0 ? -1 : 0;
	for (int64_t r = 0; e >= 0 && r < shape[0]; r += k) {
		start[0] = (hsize_t)r;
		cnt[0] = (hsize_t)(shape[0] - r < k ? shape[0] - r : k);
		unsigned char *at = (unsigned char *)buf + (size_t)r * row;
		hid_t msp = H5Screate_simple(ndim, cnt, NULL);
		e = msp < 0 ? -1 : H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, cnt, NULL);
		if (e >= 0 && write && h)
			mgt_xxh3_add(h, at, (size_t)cnt[0] * row); /* then written while in the cache */
		if (e >= 0)
			e = write ? H5Dwrite(ds, ck_h5_mem_type(dt), msp, fsp, H5P_DEFAULT, at) :
				    H5Dread(ds, ck_h5_mem_type(dt), msp, fsp, H5P_DEFAULT, at);
		if (e >= 0 && !write && h)
			mgt_xxh3_add(h, at, (size_t)cnt[0] * row); /* hashed while still in the cache */
		if (msp >= 0)
			H5Sclose(msp);
	}
	if (fsp >= 0)
		H5Sclose(fsp);
	return e;
}

static mgt_status put_data(hid_t loc, const char *dsname, const mgt_ckpt_piece *p, bool attrs)
{
	hsize_t dims[MGT_CKPT_MAX_DIM];
	for (int d = 0; d < p->ndim; d++)
		dims[d] = (hsize_t)p->shape[d];
	hid_t sp = H5Screate_simple(p->ndim, dims, NULL), dcpl = chunked_dcpl(p);
	hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
	H5Pset_create_intermediate_group(lcpl, 1);
	hid_t ds = sp < 0 || dcpl < 0 ? -1 :
		   H5Dcreate2(loc, dsname, ck_h5_file_type(p->dtype), sp, lcpl, dcpl, H5P_DEFAULT);
	mgt_status st = ds < 0 ? MGT_ERR_IO : MGT_OK;
	mgt_xxh3 *h = !st && attrs ? mgt_xxh3_new() : NULL;
	if (!st && attrs && !h)
		st = MGT_ERR_NOMEM;
	/* the bytes as stored (little-endian, which the host is: ckpt.h), hashed slab by slab */
	if (!st && ck_h5_rows(ds, p->ndim, p->shape, p->dtype, (void *)p->data, true, h) < 0)
		st = MGT_ERR_IO;
	if (!st && attrs)
		st = put_i64_attr(ds, "global_shape", p->ndim, p->global_shape);
	if (!st && attrs)
		st = put_i64_attr(ds, "global_offset", p->ndim, p->offset);
	if (!st && attrs)
		st = put_u64_attr(ds, CK_HASH_ATTR, mgt_xxh3_digest(h));
	mgt_xxh3_free(h);
	if (ds >= 0 && H5Dclose(ds) < 0) /* flushes the chunk cache: may be where a write fails */
		st = MGT_ERR_IO;
	H5Pclose(lcpl);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (sp >= 0)
		H5Sclose(sp);
	return st;
}

mgt_status ck_h5_put(hid_t loc, const char *file, const char *dsname, const mgt_ckpt_piece *p,
		     bool attrs)
{
	htri_t there = H5Lexists(loc, dsname, H5P_DEFAULT);
	if (there > 0)
		return mgt_err(MGT_ERR_USAGE, "%s: %s: tensor written twice", file, dsname);
	if (put_data(loc, dsname, p, attrs))
		return mgt_err(MGT_ERR_IO, "%s: %s: cannot write: %s", file, dsname, ck_h5_why());
	return MGT_OK;
}

mgt_status ck_h5_put_string_attr(hid_t loc, const char *file, const char *name, const char *s)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	hid_t sp = H5Screate(H5S_SCALAR);
	hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
	herr_t r = a < 0 ? -1 : H5Awrite(a, t, &s);
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
	if (r < 0)
		return mgt_err(MGT_ERR_IO, "%s: cannot write attribute %s: %s", file, name, ck_h5_why());
	return MGT_OK;
}

/* HDF5 1.10 cannot close a file whose writes failed (disk full): H5Fclose fails, leaves the
 * file in its table, and the library crashes closing it again at exit.  So point the file's
 * descriptor (the sec2 driver's int) at an anonymous memory file, where the remaining writes
 * of the close succeed; the caller unlinks the partial file.  A file size limit (`ulimit -f`)
 * applies to the memory file too: the soft limit is lifted to the hard one for the close, and
 * where the hard one is as low, /dev/null takes the writes instead (it cannot be truncated,
 * which a close may need; ck_h5_quiet's H5dont_atexit keeps a close that still fails from
 * crashing the exit). */
static void abandon(hid_t f)
{
	void *h = NULL;
	struct rlimit lim, saved;
	bool limited = getrlimit(RLIMIT_FSIZE, &saved) == 0 && saved.rlim_cur != RLIM_INFINITY, lifted = false;
	if (limited && saved.rlim_cur < saved.rlim_max) {
		lim = saved;
		lim.rlim_cur = lim.rlim_max;
		lifted = setrlimit(RLIMIT_FSIZE, &lim) == 0;
		limited = lim.rlim_max != RLIM_INFINITY;
	}
	if (H5Fget_vfd_handle(f, H5P_DEFAULT, &h) >= 0 && h) {
		int m = limited ? open("/dev/null", O_WRONLY | O_CLOEXEC) :
				  memfd_create("mgt-ckpt-abandoned", MFD_CLOEXEC);
		if (m >= 0) {
			dup2(m, *(int *)h);
			close(m);
		}
	}
	H5Fclose(f);
	if (lifted)
		setrlimit(RLIMIT_FSIZE, &saved);
}

mgt_status ck_h5_finish(hid_t f, const char *path, const char *msg_path, mgt_status st)
{
	if (!st && H5Fflush(f, H5F_SCOPE_GLOBAL) < 0)
		st = mgt_err(MGT_ERR_IO, "%s: cannot write: %s", msg_path, ck_h5_why());
	if (st) {
		abandon(f);
		unlink(path);
		return st;
	}
	if (H5Fclose(f) < 0)
		st = mgt_err(MGT_ERR_IO, "%s: cannot write: %s", msg_path, ck_h5_why());
	if (!st)
		st = ck_fsync_path(path);
	if (st)
		unlink(path);
	return st;
}
