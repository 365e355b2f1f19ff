/* lib/ckpt internals shared by its files (not a public header). */
#ifndef MGT_CKPT_IMPL_H
#define MGT_CKPT_IMPL_H

#include <hdf5.h>
#include <jansson.h>

#include "ckpt/ckpt.h"

/* ---- fs.c: paths and durable file-system steps ---------------------------------------------- */

/* malloc'd "a/b" (b may be NULL: a copy of a); NULL after recording MGT_ERR_NOMEM. */
char *ck_join(const char *a, const char *b);
/* malloc'd "SAVE/iter_%07d" followed by suffix ("" or ".tmp" or ".old"). */
char *ck_iter_dir(const char *save_dir, int64_t iteration, const char *suffix);
/* rm -rf; a missing path is fine. Errors: MGT_ERR_IO naming the entry. */
mgt_status ck_remove_tree(const char *path);
/* fsync a file or directory by path. Errors: MGT_ERR_IO naming it. */
mgt_status ck_fsync_path(const char *path);
/* Create (truncate) path with n bytes of data and fsync it. Errors: MGT_ERR_IO. */
mgt_status ck_write_file(const char *path, const void *data, size_t n);
bool ck_exists(const char *path);
bool ck_is_dir(const char *path);
/* *out = the element count of shape[0..ndim) (safetensors.c); false when a dim is negative or the
 * count passes 2^62. */
bool ck_shape_numel(int ndim, const int64_t *shape, uint64_t *out);

/* ---- dir.c ---------------------------------------------------------------------------------- */

/* The first time this process saves into save_dir (mgt_ckpt_begin, rank 0): remove the
 * iter_N.tmp directories, iter_N.old leftovers and tracker temporaries of killed runs. */
void ck_clean_once(const char *save_dir);

/* ---- h5.c: HDF5 helpers --------------------------------------------------------------------- */

/* Replace HDF5's error printing by a handler that only records the innermost description of
 * the failed call's error stack (idempotent). */
void ck_h5_quiet(void);
/* The description recorded for the last failed HDF5 call ("HDF5 error" if none), then forget
 * it; the returned buffer is thread-local and valid until the next call. */
const char *ck_h5_why(void);
/* File and memory types of a dtype; 0 for an invalid one. */
hid_t ck_h5_file_type(mgt_ckpt_dtype dt);
hid_t ck_h5_mem_type(mgt_ckpt_dtype dt);
/* New file access list: libver bounds v1.8 .. latest (checksummed metadata). */
hid_t ck_h5_fapl(void);
/* Validate a piece: name (with dump, "/"-separated group paths allowed), ndim, dtype, shape
 * and (without dump) the box inside global_shape.
 * Errors: MGT_ERR_USAGE naming the piece. */
mgt_status ck_piece_check(const mgt_ckpt_piece *p, bool dump);
/* The dataset attribute holding a piece's XXH3-64 (uint64 scalar; sums.c). */
#define CK_HASH_ATTR "xxh3_64"
/* Bytes of a box of shape[0..ndim) of dt. */
size_t ck_piece_bytes(int ndim, const int64_t *shape, mgt_ckpt_dtype dt);
/* Transfer the whole dataset ds (shape[0..ndim), type dt) to or from the contiguous row-major
 * buf in slabs of whole rows, one row of chunks each (about 4 MiB; 4 MiB of rows for a dataset
 * that is not chunked), each slab added to h (may be NULL) while it is in the cache: before it
 * is written, after it is read.  Returns HDF5's status. */
herr_t ck_h5_rows(hid_t ds, int ndim, const int64_t *shape, mgt_ckpt_dtype dt, void *buf, bool write,
		  mgt_xxh3 *h);
/* Create dataset dsname under loc holding p's data (shape p->shape, chunked, Fletcher-32).
 * With attrs, add global_shape, global_offset and CK_HASH_ATTR. file: for messages.
 * Errors: MGT_ERR_USAGE (name exists), MGT_ERR_IO. */
mgt_status ck_h5_put(hid_t loc, const char *file, const char *dsname, const mgt_ckpt_piece *p,
		     bool attrs);
/* Finish the new file f at path (msg_path: its name in messages) whose writing so far returned
 * st: flush, close and fsync it, or on any failure discard it (closed, unlinked) and return
 * the error.  Always consumes f. */
mgt_status ck_h5_finish(hid_t f, const char *path, const char *msg_path, mgt_status st);
/* Set a scalar variable-length UTF-8 string attribute on loc. Errors: MGT_ERR_IO. */
mgt_status ck_h5_put_string_attr(hid_t loc, const char *file, const char *name, const char *s);

/* ---- scan.c: the pieces of a checkpoint directory ------------------------------------------- */

typedef struct {
	char *name;
	int file; /* index into ck_index.files */
	int ndim;
	int64_t gshape[MGT_CKPT_MAX_DIM], off[MGT_CKPT_MAX_DIM], shape[MGT_CKPT_MAX_DIM];
	mgt_ckpt_dtype dtype;
	uint64_t hash;  /* the CK_HASH_ATTR attribute, when has_hash */
	bool has_hash;
	bool verified;  /* the data read back once and found to have that checksum (read.c) */
} ck_piece;

typedef struct {
	char *dir;        /* the iteration directory */
	char **files;     /* shard file names (no directory), sorted */
	size_t nfiles;
	ck_piece *pieces; /* sorted by name, then file; exact duplicates removed */
	size_t npieces;
	size_t *tensors;  /* index of the first piece of each tensor */
	size_t ntensors;
} ck_index;

/* A shard file name: no '/', not hidden, ends in .h5, not model.h5. */
bool ck_is_shard_name(const char *s);
/* Scan every *.h5 file of dir except model.h5 (see mgt_ckpt_open for the checks and errors).
 * check (may be NULL): a checksums.json whose shard list every piece must match
 * (ck_sums_check_piece, ck_sums_check_shards); build (may be NULL): the manifest to which every
 * piece is added (ck_sums_add_piece; duplicates of replicated tensors included). */
mgt_status ck_scan(const char *dir, ck_index *ix, json_t *check, json_t *build);
void ck_index_free(ck_index *ix);
/* Every tensor is whole: its pieces (which do not overlap) add up to its global size.
 * Errors: MGT_ERR_FORMAT naming the directory and the tensor. */
mgt_status ck_check_coverage(const ck_index *ix);
/* Number of pieces of tensor t (t < ntensors). */
size_t ck_tensor_pieces(const ck_index *ix, size_t t);
/* Tensor index of name, or -1. */
long ck_find(const ck_index *ix, const char *name);
/* "[a, b, c]" of n dims into buf (at least 96 bytes); returns buf. */
const char *ck_shape_str(char *buf, int n, const int64_t *d);

/* ---- sums.c: checksums.json ----------------------------------------------------------------- */

/* A new manifest {"algorithm": "xxh3_64", "files": {}, "shards": {}}; NULL after recording
 * MGT_ERR_NOMEM. */
json_t *ck_sums_new(void);
/* Add piece p of shard file to the manifest.  Errors: MGT_ERR_NOMEM. */
mgt_status ck_sums_add_piece(json_t *sums, const char *file, const ck_piece *p);
/* Add the checksum of every file under dir but the shards and checksums.json to "files"
 * (names relative to dir, '/'-separated; hidden names skipped).
 * Errors: MGT_ERR_FORMAT or MGT_ERR_IO (unreadable), MGT_ERR_NOMEM. */
mgt_status ck_sums_add_files(json_t *sums, const char *dir);
/* Write dir/checksums.json (fsynced).  Errors: MGT_ERR_IO, MGT_ERR_NOMEM. */
mgt_status ck_sums_write(json_t *sums, const char *dir);
/* Read dir/checksums.json into *out (NULL when there is none: a checkpoint from before the
 * checksums).  Errors: MGT_ERR_FORMAT (not the manifest's shape), MGT_ERR_NOMEM. */
mgt_status ck_sums_read(const char *dir, json_t **out);
/* Piece p, scanned from dir/file, is in the manifest with its checksum attribute, dtype,
 * shape, global shape and offset.  Errors: MGT_ERR_FORMAT naming the file and tensor. */
mgt_status ck_sums_check_piece(json_t *sums, const char *dir, const char *file, const ck_piece *p);
/* The shard files of ix are those of the manifest, per_file[i] pieces in file i as listed. */
mgt_status ck_sums_check_shards(json_t *sums, const ck_index *ix, const size_t *per_file);
/* Every file of "files" present in dir with its checksum.  Errors: MGT_ERR_FORMAT. */
mgt_status ck_sums_check_files(json_t *sums, const char *dir);

/* ---- index.c: the virtual index file -------------------------------------------------------- */

/* Write dir/model.h5 presenting every tensor of ix whole; metadata as root attribute. */
mgt_status ck_write_index(const ck_index *ix, const char *metadata);

#endif
