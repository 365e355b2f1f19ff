/* lib/ckpt: sharded HDF5 checkpoints (man/man5/mgt-ckpt.5) and single-file HDF5 dumps.
 *
 * A checkpoint is a directory SAVE/iter_NNNNNNN/ ('iter_%07d', Megatron's name) holding
 * metadata.json (a JSON text chosen by the caller), one or more HDF5 shard files (any name ending
 * in .h5 other than model.h5) and the index file model.h5; SAVE/latest_checkpointed_iteration.txt
 * names the newest complete one.  Each tensor is stored as one or more pieces: an HDF5 dataset at
 * the root of a shard, named by the tensor's name (Megatron-Core names, dots, no '/'), holding a
 * contiguous row-major box of the global tensor, with int64 attributes global_shape and
 * global_offset.  model.h5 holds one HDF5 virtual dataset per tensor that maps the pieces, so
 * h5py/h5dump see whole tensors.
 *
 * Saving (DESIGN.md section 3, "formats are promises"): rank 0 calls mgt_ckpt_begin, then every
 * rank writes its shard(s) with mgt_ckpt_write_shard into SAVE/iter_NNNNNNN.tmp/, then (after the
 * caller's barrier) rank 0 calls mgt_ckpt_commit, which writes metadata.json and model.h5,
 * fsyncs, renames the directory into place and updates the tracker last.  A crash at any point
 * leaves the previous checkpoint and tracker whole.
 *
 * Loading reshards: mgt_ckpt_read fills any box of a tensor's global index space from the
 * overlapping parts of whatever pieces were saved, so a run with another tensor/pipeline/data
 * parallel layout can load the checkpoint (Megatron's torch_dist rule, megatron-reference.md
 * section 6.3).
 *
 * Dtypes: float32, float64 and int32, stored little-endian (H5T_IEEE_F32LE, H5T_IEEE_F64LE,
 * H5T_STD_I32LE); memory buffers are in the host's native layout.  Tensors have 1 to 4 dims.
 *
 * HDF5 (serial build) is not thread-safe: call these functions from one thread at a time.  They
 * turn HDF5's automatic error printing off for the process (H5Eset_auto2) and report failures
 * as mgt_status values with a message naming the file (mgt_err_msg); they never print.
 */
#ifndef MGT_CKPT_H
#define MGT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define MGT_CKPT_MAX_DIM 4
/* Name of the index file of virtual datasets inside an iteration directory. */
#define MGT_CKPT_INDEX_FILE "model.h5"
#define MGT_CKPT_TRACKER "latest_checkpointed_iteration.txt"

typedef enum { MGT_CKPT_F32, MGT_CKPT_F64, MGT_CKPT_I32 } mgt_ckpt_dtype;

/* Bytes per element (4, 8, 4) and the numpy name ("float32", "float64", "int32"). */
size_t mgt_ckpt_dtype_size(mgt_ckpt_dtype dt);
const char *mgt_ckpt_dtype_name(mgt_ckpt_dtype dt);

/* One piece of a tensor: the box [offset, offset + shape) of a tensor of global_shape, for
 * every dim d < ndim (1..4): 0 <= offset[d], 1 <= shape[d], offset[d] + shape[d] <=
 * global_shape[d].  data: host memory, contiguous row-major [shape[0], ..., shape[ndim-1]] of
 * dtype; the caller keeps ownership.  A whole tensor is offset 0 and shape == global_shape. */
typedef struct {
	const char *name;
	int ndim;
	int64_t global_shape[MGT_CKPT_MAX_DIM];
	int64_t offset[MGT_CKPT_MAX_DIM];
	int64_t shape[MGT_CKPT_MAX_DIM];
	mgt_ckpt_dtype dtype;
	const void *data;
} mgt_ckpt_piece;

/* ---- saving --------------------------------------------------------------------------------- */

/* Rank 0, before the barrier that precedes the writes: create save_dir (and its parents) if
 * needed, remove a stale SAVE/iter_NNNNNNN.tmp/ left by a killed run and create it afresh,
 * registered with mgt_tmp_add_dir (removed by a signal or an error exit until committed).
 * Also finishes an interrupted replacement (see mgt_ckpt_commit).  The first call of the
 * process for a save_dir also removes every other iter_N.tmp/, iter_N.old/ leftover (put back
 * as iter_N when that is missing) and tracker temporary of dead writers: the writer's own
 * temporaries, so no other job may be saving into save_dir.  iteration >= 0.
 * Errors: MGT_ERR_USAGE (negative iteration), MGT_ERR_IO naming the path. */
mgt_status mgt_ckpt_begin(const char *save_dir, int64_t iteration);

/* Rank 0, after a failed save: remove SAVE/iter_NNNNNNN.tmp/ (best effort; the previous
 * checkpoint and the tracker are untouched). */
void mgt_ckpt_abort(const char *save_dir, int64_t iteration);

/* Any rank: write pieces p[0..n) into the new shard file SAVE/iter_NNNNNNN.tmp/<shard_name>
 * (created if mgt_ckpt_begin has not run yet on this file system view), fsynced before return.
 * shard_name: a plain file name ending in ".h5", not "model.h5" (e.g.
 * "model_tp00_pp000_dp000.h5"), unique per writer.  A shard holds at most one piece per tensor
 * name; a rank with several pieces of one tensor writes several shards.  Piece names: non-empty,
 * no '/', not "." or "..".  On error the partial shard file is removed.
 * Errors: MGT_ERR_USAGE (bad name, dims, dtype or duplicate name), MGT_ERR_EXISTS (the shard
 * was already written), MGT_ERR_IO (file system or HDF5 write failure, naming the file). */
mgt_status mgt_ckpt_write_shard(const char *save_dir, int64_t iteration, const char *shard_name,
				const mgt_ckpt_piece *p, size_t n);

/* Rank 0, once, after every writer finished: check the shards (as mgt_ckpt_open does), write
 * metadata.json (metadata_json, which must be a JSON object) and the virtual index model.h5
 * into SAVE/iter_NNNNNNN.tmp/, fsync, move the directory to SAVE/iter_NNNNNNN (an existing
 * directory of that iteration is swapped out atomically at this point and then deleted), fsync
 * SAVE, and write SAVE/latest_checkpointed_iteration.txt ("N", no newline) atomically.
 * Errors: MGT_ERR_USAGE (metadata not a JSON object), MGT_ERR_IO (no .tmp directory, write or
 * rename failure), MGT_ERR_FORMAT (a shard is unreadable or inconsistent, naming it).
 * On error the previous checkpoint and tracker are untouched. */
mgt_status mgt_ckpt_commit(const char *save_dir, int64_t iteration, const char *metadata_json);

/* ---- loading -------------------------------------------------------------------------------- */

/* Read the tracker load_dir/latest_checkpointed_iteration.txt into *iteration.
 * Errors: MGT_ERR_IO (no tracker), MGT_ERR_FORMAT (not a non-negative decimal integer; Megatron's
 * "release" is refused). */
mgt_status mgt_ckpt_latest(const char *load_dir, int64_t *iteration);

typedef struct mgt_ckpt mgt_ckpt;

/* Open load_dir/iter_NNNNNNN (iteration < 0: the tracker's iteration): read metadata.json and
 * scan every shard's pieces.  *out is owned by the caller (mgt_ckpt_close).
 * Errors: MGT_ERR_IO (no tracker, iteration directory missing), MGT_ERR_FORMAT (tracker names a
 * missing iteration, metadata.json missing, no shard, a shard not valid HDF5 or truncated, a
 * piece without valid global_shape/global_offset attributes, pieces of one tensor disagreeing on
 * global shape or dtype, or overlapping without being identical; each names the file),
 * MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_open(const char *load_dir, int64_t iteration, mgt_ckpt **out);

/* Whether the opened checkpoint is whole: metadata.json a JSON object, every tensor wholly
 * covered by its pieces, and every tensor its "tensors" array lists (objects {"name", "shape"},
 * mgt-ckpt(5); optional) present with that global shape.  The data themselves are checked
 * (Fletcher-32) only when read.  Errors: MGT_ERR_FORMAT naming the directory and the tensor. */
mgt_status mgt_ckpt_check(const mgt_ckpt *c);

/* mgt_ckpt_open and mgt_ckpt_check of load_dir/iter_NNNNNNN (iteration >= 0), then close.
 * Errors: those of both (MGT_ERR_IO when the directory is missing). */
mgt_status mgt_ckpt_verify(const char *load_dir, int64_t iteration);

/* The iterations of dir: the numbers N of its directories named iter_N (digits only, so not
 * .tmp or .old), ascending; *out malloc'd (NULL when *n is 0).
 * Errors: MGT_ERR_IO (dir unreadable), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_iterations(const char *dir, int64_t **out, size_t *n);

/* The newest iteration of load_dir other than except that mgt_ckpt_verify accepts, or -1 in
 * *found.  The calling thread's error message is kept.  Errors: MGT_ERR_IO (load_dir
 * unreadable), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_newest_whole(const char *load_dir, int64_t except, int64_t *found);

/* metadata.json's text (NUL-terminated, owned by c) and the iteration opened. */
const char *mgt_ckpt_metadata(const mgt_ckpt *c);
int64_t mgt_ckpt_iteration(const mgt_ckpt *c);
/* The iteration directory opened (owned by c). */
const char *mgt_ckpt_dir(const mgt_ckpt *c);

/* Whether a tensor is in the checkpoint. */
bool mgt_ckpt_has(const mgt_ckpt *c, const char *name);
/* Number of tensors, and tensor i (0 <= i < count, sorted by name): its name (owned by c),
 * ndim, global shape (global_shape: room for MGT_CKPT_MAX_DIM) and dtype. */
size_t mgt_ckpt_count(const mgt_ckpt *c);
const char *mgt_ckpt_tensor(const mgt_ckpt *c, size_t i, int *ndim, int64_t *global_shape,
			    mgt_ckpt_dtype *dtype);

/* Read the box [offset, offset + shape) of tensor name's global index space into dst
 * (row-major [shape[0], ..., shape[ndim-1]], dtype dt, native layout; caller-owned, at least
 * prod(shape) elements) from the overlapping parts of the saved pieces.  global_shape and dt
 * must equal the saved ones (no conversion).  On error dst is unspecified.
 * Errors: MGT_ERR_FORMAT (tensor missing, naming it and the directory; global shape or dtype
 * mismatch, naming both; part of the box not covered by any piece; a shard unreadable or its
 * data corrupt (Fletcher-32 checksum), naming the file), MGT_ERR_USAGE (box outside the global
 * shape, bad ndim), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_read(mgt_ckpt *c, const char *name, int ndim, const int64_t *global_shape,
			 const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst);

/* Close the checkpoint and free it; NULL is fine. */
void mgt_ckpt_close(mgt_ckpt *c);

/* ---- debugging dumps ------------------------------------------------------------------------ */

/* Write pieces p[0..n) as whole datasets of shape p[i].shape (global_shape and offset are
 * ignored) to the HDF5 file path, atomically (path.tmp.PID, fsync, rename; an existing path is
 * replaced).  Names may contain '/': the groups are created as needed ("grads/layer.0.w").
 * json_attr, if not NULL, is stored as the root attribute "metadata" (variable-length UTF-8
 * string).  Errors: MGT_ERR_USAGE (bad name, dims or duplicate name), MGT_ERR_IO naming path. */
mgt_status mgt_ckpt_dump_write(const char *path, const mgt_ckpt_piece *p, size_t n,
			       const char *json_attr);

#endif
