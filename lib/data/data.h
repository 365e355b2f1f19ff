/* lib/data: JSONL input streams and Megatron indexed datasets (.bin/.idx, MMIDIDX v1).
 *
 * Format: megatron/core/datasets/indexed_dataset.py; spec in man/man5/mgt-dataset.5 and
 * megatron-reference.md §1. A dataset is a path prefix P with files P.bin and P.idx.
 * All functions return mgt_status and record a message naming the file (util.h).
 */
#ifndef MGT_DATA_H
#define MGT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* ---- JSONL input ---------------------------------------------------------------------- */

/* A line reader over a plain or zstd-compressed file (detected by the zstd frame magic, not by
 * the name), or stdin for "-". Memory is bounded by the longest line. */
typedef struct mgt_jsonl mgt_jsonl;

/* Errors: MGT_ERR_IO (cannot open). Caller owns *out (mgt_jsonl_close). */
mgt_status mgt_jsonl_open(mgt_jsonl **out, const char *path);
/* Next line without its '\n' (a trailing '\r' is kept; JSON treats it as whitespace).
 * *line points into the reader's buffer, valid until the next call; *line == NULL at end of input.
 * A last line without '\n' is returned. Errors: MGT_ERR_IO (read error), MGT_ERR_INPUT (corrupt or
 * truncated zstd frame), naming the file. */
mgt_status mgt_jsonl_next(mgt_jsonl *r, const char **line, size_t *len);
/* 1-based number of the line last returned. */
uint64_t mgt_jsonl_lineno(const mgt_jsonl *r);
/* Bytes of the (possibly compressed) file consumed so far, and its size (-1 when unknown: stdin, pipe). */
uint64_t mgt_jsonl_bytes_read(const mgt_jsonl *r);
int64_t mgt_jsonl_file_size(const mgt_jsonl *r);
/* Decompressed bytes returned so far (the text size for MB/s). */
uint64_t mgt_jsonl_bytes_out(const mgt_jsonl *r);
const char *mgt_jsonl_path(const mgt_jsonl *r);
void mgt_jsonl_close(mgt_jsonl *r);

/* Expand --input: "-", a path, or a glob (sorted). Errors: MGT_ERR_USAGE when nothing matches.
 * Caller frees each string and the array. */
mgt_status mgt_input_expand(const char *pattern, char ***paths, size_t *n);

/* ---- indexed dataset ------------------------------------------------------------------- */

/* DType codes (megatron-reference.md §1.3). */
typedef enum {
	MGT_DT_UINT8 = 1, MGT_DT_INT8 = 2, MGT_DT_INT16 = 3, MGT_DT_INT32 = 4,
	MGT_DT_INT64 = 5, MGT_DT_FLOAT64 = 6, MGT_DT_FLOAT32 = 7, MGT_DT_UINT16 = 8,
} mgt_dtype;

/* Bytes per item, 0 for an unknown code. */
size_t mgt_dtype_size(int code);
const char *mgt_dtype_name(int code);
/* DType.optimal_dtype: uint16 if vocab_size < 65500, else int32. */
mgt_dtype mgt_dtype_optimal(int64_t vocab_size);

/* Writer: .bin and .idx are written under temporary names and renamed by finish; abort (or a
 * failure anywhere) leaves no file under the final names. Memory is O(1) in the dataset size:
 * lengths and document indices are spooled to temporary files. */
typedef struct mgt_idx_writer mgt_idx_writer;

/* Errors: MGT_ERR_EXISTS (P.bin or P.idx exists and !overwrite), MGT_ERR_IO. */
mgt_status mgt_idx_writer_open(mgt_idx_writer **out, const char *prefix, mgt_dtype dtype, int overwrite);
/* Append one document of n ids as one sequence (n == 0: an empty document, zero sequences, as
 * Megatron's add_document does). Errors: MGT_ERR_INPUT (id does not fit the dtype), MGT_ERR_IO. */
mgt_status mgt_idx_writer_add_document(mgt_idx_writer *w, const int32_t *ids, size_t n);
/* Append a whole dataset (IndexedDatasetBuilder.add_index): its dtype must equal the writer's.
 * Errors: MGT_ERR_FORMAT (dtype mismatch, naming the prefix), MGT_ERR_IO. */
struct mgt_idx;
mgt_status mgt_idx_writer_add_dataset(mgt_idx_writer *w, const struct mgt_idx *d);
/* Totals so far. */
uint64_t mgt_idx_writer_num_tokens(const mgt_idx_writer *w);
uint64_t mgt_idx_writer_num_documents(const mgt_idx_writer *w);
/* Write the .idx, fsync and rename both files. Frees w in every case. */
mgt_status mgt_idx_writer_finish(mgt_idx_writer *w);
/* Remove the temporaries; frees w. Safe with NULL. */
void mgt_idx_writer_abort(mgt_idx_writer *w);

/* Reader over mmap'd files. Validates magic, version 1, dtype code, sizes, document indices
 * (start 0, non-decreasing, end N), pointers (= running sum of lengths*itemsize) and the .bin
 * size. Errors: MGT_ERR_IO (cannot open), MGT_ERR_FORMAT (naming the file and field). */
typedef struct mgt_idx mgt_idx;
mgt_status mgt_idx_open(mgt_idx **out, const char *prefix);
void mgt_idx_close(mgt_idx *d);
/* The prefix it was opened with. */
const char *mgt_idx_prefix(const mgt_idx *d);
int mgt_idx_dtype(const mgt_idx *d);
uint64_t mgt_idx_num_sequences(const mgt_idx *d);
/* Documents = document_count - 1. */
uint64_t mgt_idx_num_documents(const mgt_idx *d);
uint64_t mgt_idx_num_tokens(const mgt_idx *d);
int32_t mgt_idx_seq_length(const mgt_idx *d, uint64_t i);
int64_t mgt_idx_seq_pointer(const mgt_idx *d, uint64_t i);
/* document_indices[k], k in [0, documents]. */
int64_t mgt_idx_doc_index(const mgt_idx *d, uint64_t k);
/* Raw bytes of the .bin (for merging) and its size. */
const void *mgt_idx_bin(const mgt_idx *d, size_t *size);
/* Copy the ids of sequence i into out (resized), converted to int32. Errors: MGT_ERR_FORMAT
 * (an id that does not fit int32), MGT_ERR_NOMEM. */
mgt_status mgt_idx_get(const mgt_idx *d, uint64_t i, int32_t **out, size_t *n, size_t *cap);

#endif
