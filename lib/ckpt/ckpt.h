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
 * Saving (doc/design.md section 3, "Formats are promises"): rank 0 calls mgt_ckpt_begin, then every
 * rank writes its shard(s) with mgt_ckpt_write_shard into SAVE/iter_NNNNNNN.tmp/, then (after the
 * caller's barrier) rank 0 calls mgt_ckpt_commit, which writes metadata.json, model.h5 and
 * checksums.json, fsyncs, renames the directory into place and updates the tracker last.  A crash at any point
 * leaves the previous checkpoint and tracker whole.
 *
 * Loading reshards: mgt_ckpt_read fills any box of a tensor's global index space from the
 * overlapping parts of whatever pieces were saved, so a run with another tensor/pipeline/data
 * parallel layout can load the checkpoint (Megatron's torch_dist rule,
 * megatron/core/dist_checkpointing/strategies/torch.py).
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
/* The iteration directory's manifest of XXH3-64 checksums (lib/ckpt/sums.c, mgt-ckpt(5)). */
#define MGT_CKPT_SUMS_FILE "checksums.json"

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

/* Remove path and everything under it (a failed converter's output directory).  Errors:
 * MGT_ERR_IO naming the first path that could not be removed. */
mgt_status mgt_ckpt_remove_tree(const char *path);

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

/* The same, one piece at a time (a rank streams its pieces out without holding them all):
 * mgt_ckpt_shard_open creates SAVE/iter_NNNNNNN.tmp/<shard_name> (rules and errors of
 * mgt_ckpt_write_shard: MGT_ERR_USAGE for a bad name or iteration, MGT_ERR_EXISTS, MGT_ERR_IO);
 * *out is owned by the caller until mgt_ckpt_shard_close or mgt_ckpt_shard_discard.
 * mgt_ckpt_shard_put writes piece p as one dataset now (p->data is not kept; the caller may
 * reuse it on return).  Errors: MGT_ERR_USAGE (bad name, dims or dtype, or a name already in
 * this shard), MGT_ERR_IO; after a failed put the shard is spoiled: every later put returns the
 * same status and close removes the file.
 * mgt_ckpt_shard_close flushes, closes and fsyncs the file, frees sh and returns MGT_OK, or
 * (after a failed put, or when the flush fails) removes the partial file and returns the error.
 * mgt_ckpt_shard_discard closes and removes the partial file and frees sh (NULL is fine). */
typedef struct mgt_ckpt_shard mgt_ckpt_shard;
mgt_status mgt_ckpt_shard_open(const char *save_dir, int64_t iteration, const char *shard_name,
			       mgt_ckpt_shard **out);
mgt_status mgt_ckpt_shard_put(mgt_ckpt_shard *sh, const mgt_ckpt_piece *p);
mgt_status mgt_ckpt_shard_close(mgt_ckpt_shard *sh);
void mgt_ckpt_shard_discard(mgt_ckpt_shard *sh);

/* Rank 0, between mgt_ckpt_begin and mgt_ckpt_commit: copy the file src into the iteration
 * being written as rel (a relative path inside it, such as "tokenizer/vocab.json"; its
 * directories made), fsynced.  Such side files are listed with their checksums in
 * checksums.json and checked at every open.  Errors: MGT_ERR_USAGE (rel absolute, with "..",
 * a shard name, metadata.json or checksums.json), MGT_ERR_IO (src unreadable, naming it; no
 * iteration being written; a write failure), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_add_file(const char *save_dir, int64_t iteration, const char *rel, const char *src);

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
 * checksums.json, check the checksums of every file but the shards (metadata.json, model.h5,
 * the tokenizer files), and scan every shard's pieces, each of which must be in checksums.json
 * with the same dtype, shape, place and checksum attribute, as every shard file it lists must
 * be there.  A checkpoint without checksums.json (saved before mgt had them) opens when none
 * of its pieces has a checksum attribute; its data are then not verified.  *out is owned by
 * the caller (mgt_ckpt_close).
 * Errors: MGT_ERR_IO (no tracker, iteration directory missing), MGT_ERR_FORMAT (tracker names a
 * missing iteration, metadata.json missing, no shard, a shard not valid HDF5 or truncated, a
 * piece without valid global_shape/global_offset attributes, pieces of one tensor disagreeing on
 * global shape or dtype, or overlapping without being identical, checksums.json damaged, a
 * file's checksum, a piece, a shard file or checksums.json itself missing or differing; each
 * names the file, and the tensor where there is one), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_open(const char *load_dir, int64_t iteration, mgt_ckpt **out);

/* Whether the opened checkpoint is whole: metadata.json a JSON object, every tensor wholly
 * covered by its pieces, and every tensor its "tensors" array lists (objects {"name", "shape"},
 * mgt-ckpt(5); optional) present with that global shape.  The data themselves are checked
 * (Fletcher-32 and XXH3-64) only when read (mgt_ckpt_read, mgt_ckpt_check_data).  Errors: MGT_ERR_FORMAT naming the directory and the tensor. */
mgt_status mgt_ckpt_check(const mgt_ckpt *c);

/* Read every piece of the opened checkpoint whole (about 8 MiB at a time) and check its data
 * against its checksum (pieces already verified by mgt_ckpt_read are skipped; without
 * checksums.json nothing is checked).  Errors: MGT_ERR_FORMAT (unreadable or checksum
 * mismatch, naming the file and tensor), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_check_data(mgt_ckpt *c);

/* mgt_ckpt_open, mgt_ckpt_check and mgt_ckpt_check_data of load_dir/iter_NNNNNNN (iteration
 * >= 0), then close.  Errors: those of the three (MGT_ERR_IO when the directory is missing). */
mgt_status mgt_ckpt_verify(const char *load_dir, int64_t iteration);

/* The iterations of dir: the numbers N of its directories named iter_N (digits only, so not
 * .tmp or .old), ascending; *out malloc'd (NULL when *n is 0).
 * Errors: MGT_ERR_IO (dir unreadable), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_iterations(const char *dir, int64_t **out, size_t *n);

/* The newest iteration of load_dir other than except that mgt_ckpt_verify accepts, or -1 in
 * *found.  The calling thread's error message is kept.  Errors: MGT_ERR_IO (load_dir
 * unreadable), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_newest_whole(const char *load_dir, int64_t except, int64_t *found);

/* After a failure st (whose message is the current one) to load iteration bad of load_dir
 * (bad < 0: the tracker's was unusable): append which iteration can be loaded instead and how,
 * "...; the newest whole iteration is N: pass --ckpt-step N to load it" (mgt_ckpt_newest_whole,
 * which reads and checks all of each candidate's data), or that none is whole.  Returns st. */
mgt_status mgt_ckpt_suggest(const char *load_dir, int64_t bad, mgt_status st);

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
 * Every piece the box touches is verified against its XXH3-64 checksum the first time it is
 * read (mgt-ckpt(5)): from dst itself when the box is the whole piece (no extra reading), else
 * by reading the piece whole first, 8 MiB at a time.
 * Errors: MGT_ERR_FORMAT (tensor missing, naming it and the directory; global shape or dtype
 * mismatch, naming both; part of the box not covered by any piece; a shard unreadable or its
 * data corrupt (Fletcher-32 or XXH3-64 checksum), naming the file and tensor), MGT_ERR_USAGE (box outside the global
 * shape, bad ndim), MGT_ERR_NOMEM. */
mgt_status mgt_ckpt_read(mgt_ckpt *c, const char *name, int ndim, const int64_t *global_shape,
			 const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst);

/* Close the checkpoint and free it; NULL is fine. */
void mgt_ckpt_close(mgt_ckpt *c);

/* ---- the rows of a model's tensor table (lib/ckpt/rows.c; model/model.h; mgt-ckpt(5)) ---------
 * Row x with prefix ("" for the parameters, "optimizer.state.exp_avg." or
 * "optimizer.state.exp_avg_sq." for Adam's moments) is stored in one dataset: prefix + x->name
 * of x's global shape, or, for an expert row (num_experts > 0), prefix + x->dataset of global
 * shape [num_experts, shape...] holding x at index x->expert of its first dimension (all
 * experts of one tensor in one dataset, so that checkpoints reshard across expert-parallel
 * sizes).  Inside it x's tensor-parallel piece lies as for a dense row (mgt_tensor_boxes). */
struct mgt_tensor;
struct mgt_tensor_table;

/* The dataset of x under prefix into name[n] (truncated to fit) and its global shape into
 * gshape; returns its ndim (x->ndim, plus one for an expert row). */
int mgt_ckpt_row_dataset(const struct mgt_tensor *x, const char *prefix, char *name, size_t n, int64_t gshape[3]);
/* The most boxes of one row piece (model.h MGT_TENSOR_MAX_BOXES). */
enum { MGT_CKPT_MAX_BOXES = 15 };
/* mgt_tensor_boxes of the local elements [lo, hi) of x in its dataset's index space: for an
 * expert row each box gets the expert index as its first dimension (offset x->expert, size
 * 1).  Returns the number of boxes (at most MGT_CKPT_MAX_BOXES). */
int mgt_ckpt_row_boxes(const struct mgt_tensor *x, size_t lo, size_t hi, int64_t off[MGT_CKPT_MAX_BOXES][3],
		       int64_t shape[MGT_CKPT_MAX_BOXES][3], size_t first[MGT_CKPT_MAX_BOXES]);
/* Whether an earlier row of row i's layer in tt (rows of a layer are consecutive, as
 * mgt_tensor_table_build makes them) is an expert row of the same dataset: the dataset is
 * handled at its first row. */
bool mgt_ckpt_row_seen(const struct mgt_tensor_table *tt, int i);
/* A reader of boxes with mgt_ckpt_read's arguments and errors (src: an mgt_ckpt *, or another
 * source of the same datasets, e.g. lib/convert's mgt_source). */
typedef mgt_status (*mgt_ckpt_box_reader)(void *src, const char *name, int ndim, const int64_t *global_shape,
					  const int64_t *offset, const int64_t *shape, mgt_ckpt_dtype dt, void *dst);
/* Read the local elements [lo, hi) of x under prefix into dst (float32; element lo at dst[0])
 * box by box (mgt_ckpt_row_boxes) through rd from src.  Errors: rd's. */
mgt_status mgt_ckpt_row_read_from(mgt_ckpt_box_reader rd, void *src, const char *prefix, const struct mgt_tensor *x,
				  size_t lo, size_t hi, float *dst);
/* The same from checkpoint c, from whatever pieces were saved.  Errors: those of mgt_ckpt_read,
 * naming the dataset (MGT_ERR_FORMAT: missing, or of another global shape, e.g. another number
 * of experts). */
mgt_status mgt_ckpt_row_read(mgt_ckpt *c, const char *prefix, const struct mgt_tensor *x, size_t lo, size_t hi,
			     float *dst);
/* Whether checkpoint dataset name (without an optimizer prefix) holds rows of table tt: a dense
 * row's name or an expert row's dataset. */
bool mgt_ckpt_row_known(const struct mgt_tensor_table *tt, const char *name);
/* The "tensors" list of a checkpoint's metadata.json (mgt-ckpt(5)): [{"name", "shape", "dtype"}]
 * of table tt (build it for TP 1 and PP 1: the whole model).  A new jansson json_t *; NULL when out
 * of memory. */
void *mgt_ckpt_tensors_json(const struct mgt_tensor_table *tt);

/* ---- debugging dumps ------------------------------------------------------------------------ */

/* Write pieces p[0..n) as whole datasets of shape p[i].shape (global_shape and offset are
 * ignored) to the HDF5 file path, atomically (path.tmp.PID, fsync, rename; an existing path is
 * replaced).  Names may contain '/': the groups are created as needed ("grads/layer.0.w").
 * json_attr, if not NULL, is stored as the root attribute "metadata" (variable-length UTF-8
 * string).  Errors: MGT_ERR_USAGE (bad name, dims or duplicate name), MGT_ERR_IO naming path. */
mgt_status mgt_ckpt_dump_write(const char *path, const mgt_ckpt_piece *p, size_t n,
			       const char *json_attr);

/* ---- element types at format boundaries (lib/ckpt/dtype.c) ---------------------------------- */

/* The element types of safetensors files (and the float types of GGUF).  (The plan's names
 * MGT_DT_F32, ... are lib/parallel's mgt_comm_dtype constants already, hence MGT_ST_.)  Values are stored
 * little-endian in files; memory buffers are the host's (little-endian hosts only). */
typedef enum {
	MGT_ST_F32, MGT_ST_F16, MGT_ST_BF16, MGT_ST_F64, MGT_ST_I64, MGT_ST_I32, MGT_ST_I16,
	MGT_ST_I8, MGT_ST_U8, MGT_ST_BOOL
} mgt_dt;
#define MGT_ST_COUNT 10

/* The safetensors spelling ("F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8",
 * "BOOL"; safetensors' README / safetensors/src/tensor.rs Dtype), NULL for a value outside the
 * enum; and the size in bytes of one element (4, 2, 2, 8, 8, 4, 2, 1, 1, 1), 0 outside it. */
const char *mgt_dt_name(mgt_dt dt);
size_t mgt_dt_size(mgt_dt dt);
/* The type spelled name (exact, case-sensitive); false when none is. */
bool mgt_dt_parse(const char *name, mgt_dt *out);

/* float32 <-> bfloat16 and binary16 bit patterns: mgt_f32_to_bf16 and friends, lib/util. */

/* ---- safetensors reader (lib/ckpt/safetensors.c) ------------------------------------------- */

/* Format (huggingface/safetensors README): u64 little-endian header size N, N bytes of a UTF-8
 * JSON object {NAME: {"dtype": "F32", "shape": [d0, ...], "data_offsets": [BEGIN, END]}, ...,
 * "__metadata__": {KEY: STRING, ...}} (optional), then the byte buffer; offsets are relative to
 * the buffer's start (byte 8 + N of the file), data row-major little-endian.
 * A tensor: name (owned by the reader), dtype, ndim (0..8; 0 is a scalar, one element), shape
 * (PyTorch order, entries past ndim 0), file (the path of the file holding it, owned by the
 * reader), offset (absolute byte offset in that file) and nbytes (numel * mgt_dt_size). */
#define MGT_ST_MAX_DIM 8
typedef struct {
	const char *name;
	mgt_dt dtype;
	int ndim;
	int64_t shape[MGT_ST_MAX_DIM];
	const char *file;
	uint64_t offset, nbytes;
} mgt_st_tensor;
typedef struct mgt_st mgt_st;

/* Open a .safetensors file, or a Hugging Face model directory holding model.safetensors (used
 * when present) or model.safetensors.index.json ({"weight_map": {NAME: FILE, ...}, ...}) and
 * the shard files it names (plain names in the directory: no '/', not "." or "..").
 * The headers are read (at most 100 MB each) and checked before any use: header size within
 * the file, JSON an object, every entry an object with a known dtype, a shape of at most 8
 * non-negative dims whose element count does not overflow, data_offsets two integers with
 * BEGIN <= END <= buffer size and END - BEGIN = numel * dtype size, ranges of one file not
 * overlapping, names non-empty and unique (within and across files), __metadata__ an object of
 * strings; for a directory, every tensor the index lists present in the file it names and every
 * tensor of those files listed for it.  Files stay open until mgt_st_close; *out is owned by
 * the caller.  Errors: MGT_ERR_IO (path or a shard unreadable, naming it), MGT_ERR_FORMAT
 * (naming the file and, where it applies, the tensor), MGT_ERR_NOMEM. */
mgt_status mgt_st_open(const char *path, mgt_st **out);
/* Number of tensors and tensor i (0 <= i < count, sorted by name, strcmp); NULL past the end.
 * mgt_st_find: the tensor named name, or NULL.  Pointers live until mgt_st_close. */
size_t mgt_st_count(const mgt_st *s);
const mgt_st_tensor *mgt_st_at(const mgt_st *s, size_t i);
const mgt_st_tensor *mgt_st_find(const mgt_st *s, const char *name);
/* Read tensor t (one of s's) as float32 into dst (caller-owned, numel floats, row-major):
 * F32 as is, F16 and BF16 exactly, F64 rounded to nearest (exact where representable; beyond
 * float's range +-inf).  Reads with pread in pieces: memory beyond dst is a fixed 64 KiB.
 * Errors: MGT_ERR_FORMAT (t of an integer or bool dtype, naming it), MGT_ERR_IO (read failure
 * or the file shrank, naming the file and tensor), MGT_ERR_USAGE (t not from s). */
mgt_status mgt_st_read_f32(mgt_st *s, const mgt_st_tensor *t, float *dst);
/* Read tensor t's bytes as stored (t->nbytes, little-endian) into dst.  Errors: as above. */
mgt_status mgt_st_read_raw(mgt_st *s, const mgt_st_tensor *t, void *dst);
/* The __metadata__ value of key (for a directory: the first shard, in index order, that has
 * key), or NULL.  Owned by s. */
const char *mgt_st_metadata(const mgt_st *s, const char *key);
/* Close the files and free s; NULL is fine. */
void mgt_st_close(mgt_st *s);

/* ---- safetensors writer (lib/ckpt/safetensors.c) ------------------------------------------- */

/* Write a model into the existing directory dir, as Hugging Face's save_pretrained does:
 * model.safetensors, or, when the tensors do not fit in one shard of max_shard_bytes,
 * model-00001-of-0000N.safetensors ... (shards filled in declaration order; a tensor larger than
 * the limit gets a shard of its own) and model.safetensors.index.json
 * {"metadata": {"total_size": BYTES}, "weight_map": {NAME: FILE, ...}} (keys sorted), where
 * BYTES is the sum of the tensors' sizes.  Each file's header is {"__metadata__": {"format":
 * "pt"}, NAME: {...}, ...} in declaration order, padded with spaces to a multiple of 8 bytes;
 * tensors are laid out in declaration order with no gaps.
 * Use: mgt_st_writer_new (max_shard_bytes 0: no limit), mgt_st_writer_add each tensor (name
 * non-empty, unique; ndim 0..8; shape PyTorch order, entries >= 0), mgt_st_writer_begin
 * (creates the files as "<file>.tmp.<pid>", registered with mgt_tmp_add_file, at their full
 * size), then mgt_st_writer_put_f32 / _put_raw each tensor once, in any order (written with
 * pwrite at its offset, memory beyond src a fixed 64 KiB), then mgt_st_writer_finish (every
 * tensor put, files fsynced and renamed into place, the index last, dir fsynced).
 * mgt_st_writer_free frees w; when finish has not succeeded it removes every file w created.
 * Errors: MGT_ERR_USAGE (call out of order, bad or duplicate name, bad shape, unknown tensor,
 * tensor put twice or not put at finish, put_f32 to an integer dtype), MGT_ERR_EXISTS (begin:
 * one of the output files is already in dir), MGT_ERR_IO (naming the file), MGT_ERR_NOMEM.
 * After an error from begin, put or finish the writer is spoiled: only free is allowed. */
typedef struct mgt_st_writer mgt_st_writer;
mgt_status mgt_st_writer_new(mgt_st_writer **out, const char *dir, uint64_t max_shard_bytes);
mgt_status mgt_st_writer_add(mgt_st_writer *w, const char *name, mgt_dt dt, int ndim,
			     const int64_t *shape);
mgt_status mgt_st_writer_begin(mgt_st_writer *w);
/* src: numel float32 values, converted to the declared dtype (F16/BF16 by round to nearest
 * even, mgt_f32_to_f16/bf16; F64 exactly). */
mgt_status mgt_st_writer_put_f32(mgt_st_writer *w, const char *name, const float *src);
/* src: the tensor's nbytes, stored as is (little-endian values of the declared dtype). */
mgt_status mgt_st_writer_put_raw(mgt_st_writer *w, const char *name, const void *src);
mgt_status mgt_st_writer_finish(mgt_st_writer *w);
void mgt_st_writer_free(mgt_st_writer *w);

/* ---- Python pickles and torch.save files (lib/ckpt/pickle.c, torchfile.c) -------------------
 *
 * Read without running Python (issue 49; facts: the pickle VM of CPython's Lib/pickle.py, PyTorch's
 * torch/serialization.py _save/_load and caffe2/serialize/inline_container.cc).  mgt_pickle_load
 * runs the opcodes of protocols 2 to 5 that torch.save (protocol 2) and
 * torch.distributed.checkpoint's .metadata (protocol 4 or 5) write: PROTO FRAME STOP MARK POP
 * POP_MARK DUP NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 LONG4 BINFLOAT BINUNICODE
 * SHORT_BINUNICODE BINUNICODE8 BINBYTES SHORT_BINBYTES BINBYTES8 BYTEARRAY8 EMPTY_TUPLE TUPLE
 * TUPLE1-3 EMPTY_LIST APPEND APPENDS LIST EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET ADDITEMS
 * FROZENSET GLOBAL STACK_GLOBAL REDUCE NEWOBJ NEWOBJ_EX BUILD BINPERSID PUT BINPUT LONG_BINPUT GET
 * BINGET LONG_BINGET MEMOIZE, and the text INT, LONG, FLOAT, STRING, UNICODE (and BINSTRING,
 * SHORT_BINSTRING: STR of the bytes as they are) where protocol 0/1 writers left them; a PROTO
 * above 5 is refused.  GLOBAL module names __builtin__ and copy_reg read as builtins and copyreg
 * (fix_imports).  Nothing is ever called: REDUCE / NEWOBJ (NEWOBJ_EX: its keyword arguments
 * dropped) of a class it knows is evaluated natively, everything else becomes a generic object:
 *   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, meta])
 *   and _rebuild_tensor_v3(..., dtype[, meta]) -> TENSOR; torch._utils._rebuild_parameter(data,
 *   ...) and torch._tensor._rebuild_from_type_v2(func, type, args, state) -> the tensor inside;
 *   collections.OrderedDict() -> DICT; torch.Size(tuple) -> TUPLE; _codecs.encode(str, "latin1")
 *   -> BYTES (code points 0..255); builtins (or __builtin__) set / frozenset / bytearray -> LIST /
 *   LIST / BYTES (set items are not deduplicated: Python writes none twice); builtins.getattr(GLOBAL
 *   m.name, "attr") -> the GLOBAL m.name.attr (Python >= 3.11 pickles an enum member so; older ones
 *   write REDUCE(cls, (value,)), an OBJ); copyreg._reconstructor(cls, base, state) and
 *   copyreg.__newobj__ -> OBJ of cls (args NULL for _reconstructor).  torch.storage._load_from_bytes
 *   stays an OBJ: its args[0] is the BYTES of a nested torch.save (mgt_torch_open_mem).  BUILD sets
 *   the state of whatever value it is given (an OrderedDict state_dict's {'_metadata': ...} too).
 * BINPERSID takes ('storage', <torch.XStorage GLOBAL or torch.storage.UntypedStorage>, key,
 * location, numel) to a STORAGE (numel: elements of typed storages, bytes of UntypedStorage, whose
 * dtype the tensor rebuilt over it gives: _rebuild_tensor_v3's dtype argument; until then its
 * dtype_name is "uint8"); one STORAGE per key (tied weights share it; the first class given wins,
 * as torch's persistent_load keeps it); any other persistent id is MGT_ERR_FORMAT.
 *
 * Values live in the mgt_pickle (or mgt_torch) that made them until it is freed; they may be
 * shared (the memo) and, in a hostile file, cyclic: walk them with a depth bound.  Limits, each
 * MGT_ERR_FORMAT naming the input and byte offset: a value count above 16 per input byte + 1024,
 * a string or bytes beyond the input, a stack or memo reference out of range, an unknown opcode
 * (named in hex), NEXT_BUFFER / READONLY_BUFFER (out-of-band buffers), no STOP (bytes after it are
 * ignored, as pickle.load leaves them), a STOP with other than one value
 * on the stack, a tensor of more than MGT_PY_MAX_DIM dims or negative sizes, strides or offset. */
typedef enum {
	MGT_PY_NONE, MGT_PY_BOOL, MGT_PY_INT, MGT_PY_FLOAT, MGT_PY_STR, MGT_PY_BYTES, MGT_PY_TUPLE,
	MGT_PY_LIST, MGT_PY_DICT, MGT_PY_GLOBAL, MGT_PY_OBJ, MGT_PY_STORAGE, MGT_PY_TENSOR
} mgt_py_kind;

#define MGT_PY_MAX_DIM 8
typedef struct mgt_py mgt_py;
struct mgt_py {
	mgt_py_kind kind;
	int64_t i;           /* BOOL 0/1; INT when !big; STORAGE: its ordinal (0, 1, ... in order of
			      * first appearance) */
	bool big;            /* INT outside int64: little-endian two's complement bytes in s, len (the
			      * fewest, as pickle.encode_long writes them) */
	double f;            /* FLOAT */
	const char *s;       /* STR: UTF-8 as pickled (NUL-terminated, len bytes); BYTES: len bytes
			      * (NUL-terminated too); GLOBAL: the module; STORAGE: its record key */
	size_t len;
	const char *name;    /* GLOBAL: the qualified name ("OrderedDict", "Namespace", "Color.RED");
			      * STORAGE: its class's name ("FloatStorage", "UntypedStorage") */
	mgt_py **v;          /* TUPLE, LIST: v[0..n); DICT: key v[2k], value v[2k+1] for k < n, in
			      * insertion order (a key set again keeps its place, takes the new value;
			      * keys compare by kind and content for NONE BOOL INT FLOAT STR BYTES,
			      * element-wise for TUPLE, by identity otherwise); OBJ: the items that
			      * APPEND(S) (kv false) or SETITEM(S) (kv true, pairs as in DICT) gave it */
	size_t n;
	bool kv;
	mgt_py *cls;         /* OBJ: its class (a GLOBAL for every pickle Python writes) */
	mgt_py *args;        /* OBJ: the REDUCE / NEWOBJ arguments (a TUPLE), or NULL */
	mgt_py *state;       /* OBJ: BUILD's argument (a DICT of attributes, or a TUPLE such as
			      * (dict, slots) or TensorProperties' 5-tuple), or NULL */
	/* STORAGE, TENSOR */
	mgt_dt dtype;        /* valid when dtype_ok */
	bool dtype_ok;       /* false: a torch dtype mgt_dt lacks (complex, quantized, float8, uint16..64) */
	const char *dtype_name; /* torch's name: "float32", "bfloat16", "int64", "float8_e4m3fn", ... */
	int64_t numel;       /* STORAGE: elements of dtype (bytes for an UntypedStorage until a tensor gives it a dtype) */
	mgt_py *storage;     /* TENSOR: its STORAGE */
	int64_t offset;      /* TENSOR: storage offset, elements */
	int ndim;            /* TENSOR: 0..MGT_PY_MAX_DIM (0: a scalar, one element) */
	int64_t size[MGT_PY_MAX_DIM], stride[MGT_PY_MAX_DIM]; /* TENSOR: elements */
};

typedef struct mgt_pickle mgt_pickle;
/* Unpickle buf[0..n) (what: names it in messages, e.g. "ckpt/.metadata").  *out owned by the
 * caller (mgt_pickle_free).  Errors: MGT_ERR_FORMAT (above), MGT_ERR_NOMEM. */
mgt_status mgt_pickle_load(const void *buf, size_t n, const char *what, mgt_pickle **out);
const mgt_py *mgt_pickle_root(const mgt_pickle *p);
void mgt_pickle_free(mgt_pickle *p);

/* The value of string key in d: a DICT, or an OBJ's attributes (its state when a DICT, or the
 * DICT first in a state TUPLE, else its kv items); NULL when absent or d is neither. */
const mgt_py *mgt_py_get(const mgt_py *d, const char *key);
/* Whether v is a GLOBAL, or an OBJ whose cls is a GLOBAL, of that name and (module not NULL)
 * module. */
bool mgt_py_is(const mgt_py *v, const char *module, const char *name);
/* v as an int64 (INT or BOOL), a double (FLOAT or INT) or a string (STR); false / NULL otherwise
 * (a big INT gives false for both). */
bool mgt_py_int(const mgt_py *v, int64_t *out);
bool mgt_py_float(const mgt_py *v, double *out);
const char *mgt_py_str(const mgt_py *v);
/* A TENSOR's element count (product of its sizes; 1 for 0 dims; INT64_MAX when the product
 * overflows; 0 for a value that is not a TENSOR). */
int64_t mgt_py_numel(const mgt_py *t);

/* A torch.save file (PyTorch >= 1.6: a zip of stored entries; Megatron's model_optim_rng.pt,
 * distrib_optim.pt, common.pt, and each item of a .distcp file) read through libzip: the records
 * <arch>/data.pkl, <arch>/byteorder (absent = little) and <arch>/data/<key>, arch being the first
 * entry's directory (inline_container.cc PyTorchStreamReader::init).  At open every tensor's
 * extent (offset + sum (size-1) * stride, for non-empty tensors) must lie inside its storage and
 * every storage's record must exist, be stored uncompressed (as torch.save writes them), hold at
 * least numel x element size bytes and be readable to its end; data.pkl and byteorder must match
 * their CRC-32 (storages' CRCs are not checked: that would read every byte at open). */
typedef struct mgt_torch mgt_torch;
/* Open the file at bytes [offset, offset + length) of path (length 0: to the end), read and
 * unpickle data.pkl.  *out owned by the caller.  Errors: MGT_ERR_IO (path unreadable),
 * MGT_ERR_FORMAT (not a zip: "not a torch.save zip (PyTorch < 1.6's format is not read)"; no
 * data.pkl; byteorder "big"; the pickle's errors; a storage record missing or short, a tensor
 * outside its storage: naming path and the record or key), MGT_ERR_NOMEM. */
mgt_status mgt_torch_open(const char *path, uint64_t offset, uint64_t length, mgt_torch **out);
/* The same over buf[0..n) in memory (a nested torch.save, e.g. BYTES): buf must outlive t. */
mgt_status mgt_torch_open_mem(const void *buf, size_t n, const char *what, mgt_torch **out);
const mgt_py *mgt_torch_root(const mgt_torch *t);
/* The file's name in messages: "path" or "path[@offset]" or what. */
const char *mgt_torch_name(const mgt_torch *t);
/* Read TENSOR x of t's tree (or a view of one: a copy with another offset, sizes and strides
 * inside the same storage), row-major over x->size, honouring its offset and strides, into dst
 * (caller-owned): as float32 (numel floats: F32 as is, F16/BF16 exactly, F64 rounded to nearest,
 * integer types and BOOL converted exactly while |value| <= 2^24, else refused, dst then partly
 * written), or its elements' bytes as stored (numel x mgt_dt_size).  A contiguous tensor is read
 * straight from its record (in chunks of 2^18 elements when converting); a strided one is gathered
 * from its whole storage, read once and kept (one storage: the last) until the next strided read
 * of another storage or mgt_torch_close.  Errors: MGT_ERR_FORMAT (a dtype it cannot give, naming it; x not of t),
 * MGT_ERR_IO, MGT_ERR_NOMEM. */
mgt_status mgt_torch_read_f32(mgt_torch *t, const mgt_py *x, float *dst);
mgt_status mgt_torch_read_raw(mgt_torch *t, const mgt_py *x, void *dst);
void mgt_torch_close(mgt_torch *t);

/* Writing torch.save files (lib/ckpt/torchwrite.c): a pickle of protocol 2 as torch.save writes
 * it through CPython's C pickler (GLOBALs with protocol 2's module names (fix_imports: builtins ->
 * __builtin__, ...) and a dotted name as getattr(parent, 'last'), ints as BININT* / LONG1, floats
 * BINFLOAT, strings BINUNICODE, bytes (empty ones too) as _codecs.encode(latin-1 str, 'latin1'),
 * memoised with BINPUT as pickle does: str, non-empty tuples, containers, objects, a GLOBAL once
 * and BINGET after; the constants 'storage', 'cpu', 'latin1' once; lists and dicts in batches
 * of 1000 as Modules/_pickle.c writes them), built by calls in the order of the value's
 * serialisation, then stored as a zip of stored entries (libzip; no zip64 records below 4 GiB):
 * <arch>/data.pkl, <arch>/byteorder ("little"), <arch>/data/<key> (each storage, key "0", "1",
 * ...; data 64-byte aligned with an FB extra field of 'Z's as inline_container.cc does),
 * <arch>/version ("3\n"), which python3-torch's torch.load reads; data.pkl equals torch.save's
 * byte for byte for the same value unless Python shares an object in it (a tensor or container
 * referenced twice, a repeated one-character string: BINGET) (tests/unit/test_pyw.c).
 * Containers: *_begin pushes a mark, the calls between give the items (a dict: key then value,
 * pairs), *_end closes it.  Errors stick: the first
 * failing call's status (and message) is returned again by mgt_pyw_save / _to_mem (MGT_ERR_USAGE
 * for calls out of order: an end without its begin or closing another kind, a dict with an odd
 * item count, an object with two states, save with open containers or not exactly one value, a
 * value after a save; a string that is not UTF-8, a global whose names are empty, not ASCII or
 * hold a newline, a bad tensor (dtype, ndim outside 0..8, a negative size, NULL data), an arch
 * that is empty, not ASCII or holds '/'; MGT_ERR_IO naming the path; MGT_ERR_NOMEM).  A writer
 * may be saved more than once (to a file and to memory). */
typedef struct mgt_pyw mgt_pyw;
mgt_status mgt_pyw_new(mgt_pyw **out);
void mgt_pyw_none(mgt_pyw *w);
void mgt_pyw_bool(mgt_pyw *w, bool v);
void mgt_pyw_int(mgt_pyw *w, int64_t v);
void mgt_pyw_float(mgt_pyw *w, double v);
void mgt_pyw_str(mgt_pyw *w, const char *s);            /* UTF-8, NUL-terminated */
void mgt_pyw_bytes(mgt_pyw *w, const void *p, size_t n);
void mgt_pyw_global(mgt_pyw *w, const char *module, const char *name); /* e.g. torch bfloat16 */
void mgt_pyw_tuple_begin(mgt_pyw *w);
void mgt_pyw_tuple_end(mgt_pyw *w);
void mgt_pyw_list_begin(mgt_pyw *w);
void mgt_pyw_list_end(mgt_pyw *w);
void mgt_pyw_dict_begin(mgt_pyw *w);
void mgt_pyw_dict_end(mgt_pyw *w);
/* collections.OrderedDict: REDUCE(OrderedDict, ()) then SETITEMS, as pickle writes one. */
void mgt_pyw_odict_begin(mgt_pyw *w);
void mgt_pyw_odict_end(mgt_pyw *w);
/* An object of class module.name made as copyreg.__newobj__ makes it (NEWOBJ with no arguments),
 * then BUILD with the value given between begin and end (an attribute dict for argparse.Namespace
 * and dataclasses, a tuple for classes whose __getstate__ returns one; no value: no BUILD, as
 * pickle writes an object whose state is None). */
void mgt_pyw_obj_begin(mgt_pyw *w, const char *module, const char *name);
void mgt_pyw_obj_end(mgt_pyw *w);
/* REDUCE(module.name, args): the args tuple's items between begin and end (an enum member:
 * REDUCE(cls, (value,)) as Python <= 3.10 pickles it, or REDUCE(builtins.getattr, (cls, 'NAME'))
 * as 3.11 does; torch.Size((...))). */
void mgt_pyw_reduce_begin(mgt_pyw *w, const char *module, const char *name);
void mgt_pyw_reduce_end(mgt_pyw *w);
/* A contiguous tensor of dtype dt and shape size[0..ndim) (ndim 0..8) over a storage of its own:
 * _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()), the storage a
 * ('storage', torch.<X>Storage, key, 'cpu', numel) persistent id.  data: numel x mgt_dt_size
 * bytes, little-endian, kept by reference until the save (the caller keeps it alive). */
void mgt_pyw_tensor(mgt_pyw *w, mgt_dt dt, int ndim, const int64_t *size, const void *data);
/* Write the zip to path (created or replaced as written: the caller picks a temporary name and
 * removes it after a failure, which may leave it partly written), records under arch/
 * ("model_optim_rng" for a file saved to model_optim_rng.pt, "archive" for a stream), fsynced;
 * or into a malloc'd buffer (*buf, *n; the caller frees; NULL, 0 on failure).  Tensor data is
 * streamed from the callers' buffers (the pickle is held in memory; _to_mem holds the whole zip). */
mgt_status mgt_pyw_save(mgt_pyw *w, const char *path, const char *arch);
mgt_status mgt_pyw_to_mem(mgt_pyw *w, const char *arch, void **buf, size_t *n);
/* The pickle alone (pickle.dump's bytes, as torch.distributed.checkpoint writes .metadata) into a
 * malloc'd buffer (*buf, *n; the caller frees); w must hold no tensor.  Errors: those of
 * mgt_pyw_save, MGT_ERR_USAGE for a tensor. */
mgt_status mgt_pyw_pickle(mgt_pyw *w, void **buf, size_t *n);
void mgt_pyw_free(mgt_pyw *w);

/* ---- GGUF v3 (lib/ckpt/gguf.c) ------------------------------------------------------------- */

/* Format: ggml's docs/gguf.md.  Little-endian: "GGUF", u32
 * version 3, u64 tensor count, u64 kv count; kv pairs (gguf string key: u64 length + bytes; u32
 * value type; value; arrays: u32 element type, u64 count, elements); tensor infos (name string,
 * u32 n_dims, u64 ne[n_dims] innermost first, i.e. the reverse of PyTorch's shape, u32 ggml
 * type, u64 offset relative to the data section, a multiple of the alignment); zero padding to
 * the alignment; the data section, each tensor padded to the alignment.  The alignment is the
 * u32 kv general.alignment (a power of two), 32 when absent.
 * Tensor types: F32, F16 (IEEE binary16), BF16, and Q8_0: blocks of 32 values along ne[0]
 * stored as {f16 d; int8 q[32]} (34 bytes) with d = max|x| / 127 and q = roundf(x * (1 / d))
 * (0 when d is 0), value f16(d) * q (ggml-quants.c quantize_row_q8_0_ref, dequantize_row_q8_0);
 * ne[0] must be a multiple of 32.  (Non-finite inputs give unspecified but defined bytes.) */
typedef enum { MGT_GGML_F32 = 0, MGT_GGML_F16 = 1, MGT_GGML_Q8_0 = 8, MGT_GGML_BF16 = 30 } mgt_ggml_type;
/* GGUF value types (gguf.md gguf_metadata_value_type). */
typedef enum {
	MGT_GGUF_U8 = 0, MGT_GGUF_I8 = 1, MGT_GGUF_U16 = 2, MGT_GGUF_I16 = 3, MGT_GGUF_U32 = 4,
	MGT_GGUF_I32 = 5, MGT_GGUF_F32 = 6, MGT_GGUF_BOOL = 7, MGT_GGUF_STR = 8, MGT_GGUF_ARR = 9,
	MGT_GGUF_U64 = 10, MGT_GGUF_I64 = 11, MGT_GGUF_F64 = 12
} mgt_gguf_vtype;
#define MGT_GGUF_MAX_DIM 4
#define MGT_GGUF_MAX_NAME 63 /* tensor name bytes (GGML_MAX_NAME 64 with the NUL) */
#define MGT_GGUF_DEFAULT_ALIGNMENT 32

/* Bytes of n values of type t (n a multiple of 32 for Q8_0); 0 for an unknown type. */
uint64_t mgt_ggml_nbytes(mgt_ggml_type t, uint64_t n);
/* Encode n float32 values (n a multiple of 32) as Q8_0 blocks into dst (n / 32 * 34 bytes),
 * and back (dst: n floats). */
void mgt_ggml_quantize_q8_0(const float *src, uint64_t n, void *dst);
void mgt_ggml_dequantize_q8_0(const void *src, uint64_t n, float *dst);

/* Writer.  Set the kv pairs (kept in call order) and declare the tensors (kept in declaration
 * order), then mgt_gguf_writer_open(path) writes path's temporary (mgt_afile: path.tmp.<pid>,
 * an existing path is replaced at finish) with the header, kv pairs and tensor infos, whose
 * offsets follow from the declarations; then mgt_gguf_put_f32 each tensor in declaration order
 * (converted to its type: F16/BF16 by round to nearest even, Q8_0 as above, then padded with
 * zeros to the alignment); mgt_gguf_writer_finish fsyncs and renames into place.
 * Keys: non-empty, at most 65535 bytes, unique ("general.alignment" must be a u32 power of two
 * and sets the alignment).  Strings are byte strings of the given length (set_str: strlen).
 * Tensor names: 1..63 bytes, unique; ndim 1..4; shape in PyTorch order (written reversed as ne),
 * entries >= 1; Q8_0 needs shape[ndim-1] % 32 == 0.
 * Errors: MGT_ERR_USAGE (bad or duplicate key or name, bad shape or type, a setter after open,
 * put out of declaration order, finish with tensors not put), MGT_ERR_IO (naming path),
 * MGT_ERR_NOMEM.  After an error from open, put or finish the writer is spoiled: only free.
 * mgt_gguf_writer_free frees w and, unless finish succeeded, removes the temporary. */
typedef struct mgt_gguf_writer mgt_gguf_writer;
mgt_status mgt_gguf_writer_new(mgt_gguf_writer **out);
mgt_status mgt_gguf_set_u32(mgt_gguf_writer *w, const char *key, uint32_t v);
mgt_status mgt_gguf_set_i32(mgt_gguf_writer *w, const char *key, int32_t v);
mgt_status mgt_gguf_set_u64(mgt_gguf_writer *w, const char *key, uint64_t v);
mgt_status mgt_gguf_set_f32(mgt_gguf_writer *w, const char *key, float v);
mgt_status mgt_gguf_set_bool(mgt_gguf_writer *w, const char *key, bool v);
mgt_status mgt_gguf_set_str(mgt_gguf_writer *w, const char *key, const char *s);
/* n strings s[i] of len[i] bytes (len NULL: strlen of each). */
mgt_status mgt_gguf_set_arr_str(mgt_gguf_writer *w, const char *key, const char *const *s,
				const size_t *len, size_t n);
mgt_status mgt_gguf_set_arr_i32(mgt_gguf_writer *w, const char *key, const int32_t *v, size_t n);
mgt_status mgt_gguf_set_arr_f32(mgt_gguf_writer *w, const char *key, const float *v, size_t n);
mgt_status mgt_gguf_add_tensor(mgt_gguf_writer *w, const char *name, mgt_ggml_type t, int ndim,
			       const int64_t *shape);
mgt_status mgt_gguf_writer_open(mgt_gguf_writer *w, const char *path);
/* src: numel float32 values, row-major in PyTorch order (= ggml's, ne[0] fastest). */
mgt_status mgt_gguf_put_f32(mgt_gguf_writer *w, const char *name, const float *src);
mgt_status mgt_gguf_writer_finish(mgt_gguf_writer *w);
void mgt_gguf_writer_free(mgt_gguf_writer *w);

/* Reader.  A kv pair: key; type; scalars widened into u (U8..U64, BOOL), i (I8..I64) or f
 * (F32, F64); strings: str (NUL-terminated copy; n = its length in bytes, which may include NUL
 * bytes); arrays: arr_type, n elements, numeric ones in arr (n packed little-endian values of
 * arr_type), string arrays in strs / lens.  Nested arrays are refused.  All owned by the reader. */
typedef struct {
	const char *key;
	mgt_gguf_vtype type, arr_type;
	uint64_t n;
	uint64_t u;
	int64_t i;
	double f;
	const char *str;
	const void *arr;
	const char *const *strs;
	const uint64_t *lens;
} mgt_gguf_kv;
/* A tensor: name, type, ndim, ne (ggml order: ne[0] innermost; PyTorch's shape is ne reversed;
 * entries past ndim are 1), offset (absolute in the file) and nbytes. */
typedef struct {
	const char *name;
	mgt_ggml_type type;
	int ndim;
	int64_t ne[MGT_GGUF_MAX_DIM];
	uint64_t offset, nbytes;
} mgt_gguf_tensor;
typedef struct mgt_gguf mgt_gguf;

/* Open and check a GGUF v3 file: magic, version 3, every length and count within the file
 * before anything is allocated, value types known, arrays not nested, keys unique,
 * general.alignment (if present) a u32 power of two, tensor names 1..63 bytes and unique, n_dims
 * 1..4, ne >= 0 with a product that does not overflow, types F32/F16/BF16/Q8_0 (Q8_0: ne[0] %
 * 32 == 0), offsets aligned, data within the file and not overlapping.  The header is parsed
 * into memory; the file stays open for mgt_gguf_read_f32 until mgt_gguf_close.
 * Errors: MGT_ERR_IO (unreadable, naming path), MGT_ERR_FORMAT (naming path and the key or
 * tensor), MGT_ERR_NOMEM. */
mgt_status mgt_gguf_open(const char *path, mgt_gguf **out);
void mgt_gguf_close(mgt_gguf *g);
uint32_t mgt_gguf_alignment(const mgt_gguf *g);
/* kv pairs and tensors in file order; NULL past the end.  find: by key / name, or NULL. */
size_t mgt_gguf_kv_count(const mgt_gguf *g);
const mgt_gguf_kv *mgt_gguf_kv_at(const mgt_gguf *g, size_t i);
const mgt_gguf_kv *mgt_gguf_kv_find(const mgt_gguf *g, const char *key);
size_t mgt_gguf_tensor_count(const mgt_gguf *g);
const mgt_gguf_tensor *mgt_gguf_tensor_at(const mgt_gguf *g, size_t i);
const mgt_gguf_tensor *mgt_gguf_tensor_find(const mgt_gguf *g, const char *name);
/* Read tensor t (one of g's) into dst (caller-owned, numel floats): F32 as is, F16 and BF16
 * exactly, Q8_0 dequantized (d * q).  Errors: MGT_ERR_IO (read failure, naming the file and
 * tensor), MGT_ERR_USAGE (t not from g). */
mgt_status mgt_gguf_read_f32(mgt_gguf *g, const mgt_gguf_tensor *t, float *dst);

#endif
