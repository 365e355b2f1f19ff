/* lib/data: JSONL input streams, Megatron indexed datasets (.bin/.idx, MMIDIDX v1) and the
 * preprocessing pipeline that writes them from JSONL.
 *
 * Format: megatron/core/datasets/indexed_dataset.py; spec in man/man5/mgt-dataset.5 and
 * megatron/core/datasets/indexed_dataset.py.  A dataset is a path prefix P with files P.bin and P.idx.
 * All functions return mgt_status and record a message naming the file (util.h).
 */
#ifndef MGT_DATA_H
#define MGT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../tok/tok.h"
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

/* DType codes (megatron/core/datasets/indexed_dataset.py). */
typedef enum {
	MGT_DT_UINT8 = 1, MGT_DT_INT8 = 2, MGT_DT_INT16 = 3, MGT_DT_INT32 = 4,
	MGT_DT_INT64 = 5, MGT_DT_FLOAT64 = 6, MGT_DT_FLOAT32 = 7, MGT_DT_UINT16 = 8,
} mgt_dtype;

/* Bytes per item, 0 for an unknown code. */
size_t mgt_dtype_size(int code);
const char *mgt_dtype_name(int code);
/* DType.optimal_dtype: uint16 if vocab_size < 65500, else int32. */
mgt_dtype mgt_dtype_optimal(int64_t vocab_size);

/* The side file of a dataset's checksums, PREFIX.checksums.json (mgt-dataset(5) CHECKSUMS):
 * {"algorithm": "xxh3_64", "idx": HEX, "bin": HEX, "idx_bytes": N, "bin_bytes": N}, the
 * XXH3-64 of each whole file as 16 hex digits.  Megatron reads the .bin and .idx alone. */
#define MGT_IDX_SUMS_SUFFIX ".checksums.json"

/* Writer: .bin and .idx are written under temporary names and renamed by finish, then their
 * checksums as PREFIX.checksums.json (an older one removed first); abort (or a failure
 * anywhere) leaves no file under the final names. Memory is O(1) in the dataset size:
 * lengths and document indices are spooled to temporary files. */
typedef struct mgt_idx_writer mgt_idx_writer;

/* Errors: MGT_ERR_EXISTS (P.bin or P.idx exists and !overwrite), MGT_ERR_IO. */
mgt_status mgt_idx_writer_open(mgt_idx_writer **out, const char *prefix, mgt_dtype dtype, int overwrite);
/* Append one document of n ids as one sequence (n == 0: an empty document, zero sequences, as
 * Megatron's add_document does). Errors: MGT_ERR_INPUT (id does not fit the dtype), MGT_ERR_IO. */
mgt_status mgt_idx_writer_add_document(mgt_idx_writer *w, const int32_t *ids, size_t n);
/* Append one document of k sequences (Megatron's add_document(tokens, lengths): sentences, for
 * mgt-preprocess --split-sentences): lens[i] ids each, ids holding their sum back to back; k == 0
 * is an empty document.  Errors: as mgt_idx_writer_add_document (a zero or negative length is
 * MGT_ERR_INPUT). */
mgt_status mgt_idx_writer_add_sequences(mgt_idx_writer *w, const int32_t *ids, const int32_t *lens, size_t k);
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
 * size; with PREFIX.checksums.json, the recorded sizes and the .idx's checksum (the .bin's is
 * checked by mgt_idx_verify_bin, which reads it all). Errors: MGT_ERR_IO (cannot open),
 * MGT_ERR_FORMAT (naming the file and field; a damaged checksum file or .idx). */
typedef struct mgt_idx mgt_idx;
mgt_status mgt_idx_open(mgt_idx **out, const char *prefix);
/* Whether the dataset has checksums (PREFIX.checksums.json was read). */
bool mgt_idx_has_sums(const mgt_idx *d);
/* The whole .bin read and checked against its checksum (nothing without one). Errors:
 * MGT_ERR_FORMAT naming the .bin. */
mgt_status mgt_idx_verify_bin(const mgt_idx *d);
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

/* ---- preprocessing: JSONL to indexed datasets (preprocess.c) ------------------------------
 *
 * Megatron's tools/preprocess_data.py: each JSON line's string under each key is tokenized into
 * one document of dataset PREFIX_KEY_document (or, with split, PREFIX_KEY_sentence: one sequence
 * per sentence), documents in input order.  A reader thread, `workers` tokenizing threads and the
 * calling thread (the writer); memory is bounded by the batches in flight (2 * workers + 2 of
 * at most 256 KiB or 4096 lines), not by the input. */
#define MGT_PREPROCESS_MAX_KEYS 16
typedef struct {
	char **inputs;              /* paths, "-" for stdin (mgt_input_expand); read in this order */
	size_t n_inputs;
	const char *keys[MGT_PREPROCESS_MAX_KEYS];  /* JSON keys, one dataset each */
	int n_keys;
	const char *output_prefix;
	const mgt_tok *tok;         /* shared by the workers (each encodes through its own mgt_tok_enc) */
	int append_eod;             /* the tokenizer's eod after each non-empty document (caller checks it has one) */
	int split, keep_newlines;   /* --split-sentences: a list of strings is the sentences, a string
	                             * is split by mgt_tok_sent (lang); --keep-newlines */
	const char *lang;           /* mgt_tok_sent_new's lang */
	int workers;                /* tokenizing threads, 1 to 256 */
	int overwrite;              /* replace existing outputs (else MGT_ERR_EXISTS) */
	int skip_bad;               /* a line with MGT_ERR_INPUT (bad JSON, missing key, non-string
	                             * value, invalid UTF-8) is skipped and counted, and the first of
	                             * each batch is warned about on log */
	int quiet;                  /* no progress lines, no warnings */
	long log_interval;          /* >= 1: a progress line every N documents when log is not a
	                             * terminal (at most one a second); on a terminal one line redrawn
	                             * every 0.25 s, ended when the run succeeds */
	FILE *log;                  /* progress and warnings ("PROG: warning: FILE:LINE: MSG (skipped)") */
	const char *prog;           /* the warnings' prefix */
} mgt_preprocess_config;
/* Totals of a run, for the caller's summary. */
typedef struct {
	uint64_t documents, tokens, skipped, blank, lines;
	uint64_t unk;               /* tokens that are the tokenizer's unknown token (mgt_tok_special_id
	                             * "unk"; 0 for one without, such as byte-level BPE) */
	uint64_t bytes_out;         /* JSONL text bytes (decompressed) */
	double seconds;             /* wall time of the run */
} mgt_preprocess_stats;
/* Run the pipeline; the outputs' dtype is mgt_dtype_optimal(vocab size).  On failure every
 * output is aborted (no file under the final names).  Errors: MGT_ERR_EXISTS (an output exists,
 * !overwrite), MGT_ERR_INPUT ("FILE:LINE: MSG": bad JSON, missing key, wrong type, invalid
 * UTF-8, an id the dtype cannot hold), mgt_jsonl's and mgt_idx_writer's MGT_ERR_IO, the
 * tokenizer's and sentence splitter's errors, MGT_ERR_INTR (stopped), MGT_ERR_NOMEM.  *out is
 * filled on success. */
mgt_status mgt_preprocess_run(const mgt_preprocess_config *cfg, mgt_preprocess_stats *out);
/* PREFIX_KEY_document or PREFIX_KEY_sentence of key k (malloc'd; NULL when out of memory). */
char *mgt_preprocess_output_name(const mgt_preprocess_config *cfg, int k);

/* ---- inspecting and merging datasets (inspect.c, merge.c; mgt-dataset) -------------------- */

/* "data/x", or "data/x.idx" / "data/x.bin" when that file exists, as the prefix "data/x"
 * (malloc'd; NULL when out of memory, recorded). */
char *mgt_idx_prefix_of(const char *arg);

/* The counts and sequence length statistics of mgt-dataset info.  median and p99 as
 * numpy.median and numpy.percentile (method "linear") compute them, exactly, in O(1) memory
 * (two histogram passes per order statistic); all 0 without sequences. */
typedef struct {
	uint64_t empty_docs;         /* documents with no sequence */
	int32_t min, max;
	double mean, median, p99;
} mgt_idx_info;
void mgt_idx_info_get(const mgt_idx *d, mgt_idx_info *out);
/* Write them as text lines, or as one compact JSON object and a newline (keys prefix, dtype,
 * dtype_code, sequences, documents, empty_documents, tokens, bin_bytes, sequence_length {min,
 * mean, median, p99, max} or null).  Write errors are left in out's error flag. */
void mgt_idx_info_write(FILE *out, const mgt_idx *d, const mgt_idx_info *s, bool json);

/* mgt-dataset dump: documents [first, end) of d, each as one line: its ids separated by spaces
 * (ids), or the decoded text as the JSON object {key: TEXT} (invalid UTF-8 replaced by U+FFFD
 * as Python's errors="replace" does: one per maximal invalid subpart).  strip_eod drops a final
 * eod id (tok's) from each document.  Errors: MGT_ERR_FORMAT (a bad id in the .bin),
 * mgt_tok_decode's naming "PREFIX: document K", MGT_ERR_NOMEM. */
typedef struct {
	int ids, strip_eod;
	const char *key;
	uint64_t first, end;
	const mgt_tok *tok;          /* needed unless ids && !strip_eod */
} mgt_idx_dump_opts;
mgt_status mgt_idx_dump(FILE *out, const mgt_idx *d, const mgt_idx_dump_opts *o);

/* The prefixes of a merge, in order; free with mgt_idx_inputs_free. */
typedef struct { char **v; size_t n, cap; } mgt_idx_inputs;
/* Append arg: a directory (with no arg.idx beside it) as every PREFIX in it with both PREFIX.bin
 * and PREFIX.idx, sorted by name (*empty_dir true when it holds none), else mgt_idx_prefix_of(arg).
 * Errors: MGT_ERR_IO (cannot open the directory), MGT_ERR_FORMAT (a .bin or .idx without its
 * partner, as merge_datasets.py asserts), MGT_ERR_NOMEM. */
mgt_status mgt_idx_inputs_add(mgt_idx_inputs *l, const char *arg, bool *empty_dir);
void mgt_idx_inputs_free(mgt_idx_inputs *l);
/* Concatenate in->v[0..n) (n >= 1) into the dataset out, each input's .bin checked against its
 * checksum first; *documents and *tokens: the totals written.  On failure out is not created.
 * Errors: mgt_idx_open's, mgt_idx_verify_bin's, mgt_idx_writer_*'s (MGT_ERR_FORMAT for a dtype
 * that differs from the first input's, MGT_ERR_EXISTS). */
mgt_status mgt_idx_merge(const char *out, int overwrite, const mgt_idx_inputs *in, uint64_t *documents,
			 uint64_t *tokens);

/* ==== GPTDataset sample order (lib/data/gpt*.c) =============================================
 *
 * Megatron's GPTDataset and BlendedDataset, megatron/core/datasets/gpt_dataset.py: the split of a dataset's
 * sequences, the document/sample/shuffle indices (numpy RandomState MT19937 shuffles), blending by
 * weights, the .npy index cache and the sample fetch. Sources: megatron/core/datasets/
 * {gpt_dataset.py, helpers.cpp, blended_dataset.py, blended_megatron_dataset_builder.py, utils.py,
 * blended_megatron_dataset_config.py}, megatron/training/{training.py, utils.py}.
 * Same arrays as Megatron bit for bit; what differs is listed at mgt_gpt_data_open. */
#include <stdbool.h>

/* -- MT19937 as numpy.random.RandomState (legacy seeding, random_interval, shuffle) -- */
typedef struct { uint32_t key[624]; int pos; } mgt_mt19937;
/* init_genrand(seed): RandomState(seed) for an int seed (numpy accepts 0..2^32-1). */
void mgt_mt19937_seed(mgt_mt19937 *rs, uint32_t seed);
/* Next tempered 32-bit output (genrand_int32). */
uint32_t mgt_mt19937_next32(mgt_mt19937 *rs);
/* Uniform integer in [0, max]: smallest all-ones mask >= max, draw & mask until <= max; 32-bit
 * draws when max <= 0xffffffff, else (next32 << 32 | next32). numpy random_interval. */
uint64_t mgt_mt19937_interval(mgt_mt19937 *rs, uint64_t max);
/* RandomState.shuffle of a 1-D array of n items of itemsize 1, 2, 4 or 8 bytes (Fisher-Yates from
 * n-1 down to 1, j = interval(i)); the state carries over to the next call. */
void mgt_mt19937_shuffle(mgt_mt19937 *rs, void *items, uint64_t n, size_t itemsize);

/* -- --split (utils.parse_and_normalize_split, convert_split_vector_to_split_matrix) -- */
typedef enum { MGT_SPLIT_TRAIN, MGT_SPLIT_VALID, MGT_SPLIT_TEST } mgt_split;
/* split name: "train", "valid", "test" (Megatron's Split enum names). */
const char *mgt_split_name(mgt_split s);
typedef struct {
	double frac[3];     /* normalized weights v / sum(v), float64 */
	double beg[3], end[3]; /* split_matrix rows: cumulative sums (left to right double adds) */
	bool present[3];    /* false where Megatron's split_matrix has None (end <= beg) */
} mgt_gpt_split;
/* Numbers matching [.0-9]+ in split (NULL = "1,0,0"), padded with 0 to three. Errors:
 * MGT_ERR_USAGE ("split: ..."): a match that is not a number, more than three, all zero. */
mgt_status mgt_gpt_split_parse(const char *split, mgt_gpt_split *out);
/* Sequence ids [*beg, *end) of split s over n sequences: rint(frac * n), round half to even as
 * Python's round(). Both 0 when the split is absent. */
void mgt_gpt_split_range(const mgt_gpt_split *sp, mgt_split s, uint64_t n, uint64_t *beg, uint64_t *end);

/* -- per-dataset indices (GPTDataset._build_document_sample_shuffle_indices, helpers.cpp) -- */
#define MGT_GPT_NONE (-1)   /* num_samples None: one epoch */
typedef struct mgt_gpt_index {
	int64_t tokens_per_epoch;     /* sum of the split's sequence lengths */
	int num_epochs;
	bool separate_final_epoch;
	int64_t n_docs;               /* num_epochs * split sequences */
	int32_t *document_index;      /* [n_docs] sequence ids, int32 */
	int64_t n_samples;            /* len(GPTDataset) = sample_index rows - 1 */
	bool sample_i64;              /* sample_index is int64 (else int32) */
	void *sample_index;           /* [n_samples + 1][2]: (position in document_index, token offset) */
	bool shuffle_i64;             /* shuffle_index is int64 (else uint32) */
	void *shuffle_index;          /* [n_samples] */
	void *map_[3];                /* private: mmaps of cached arrays (NULL: malloc'd) */
	size_t map_size_[3];
} mgt_gpt_index;
/* Build the three indices of the split [beg, end) of a file whose sequence lengths are
 * lengths[n_lengths] (int32, tokens), for num_samples samples (MGT_GPT_NONE: one epoch) of
 * seq_length + 1 tokens (add_extra_token_to_sequence = 1), with RandomState(seed): document index
 * shuffle(s) first, then shuffle index shuffle(s). drop_last false keeps a last partial sample
 * (helpers.cpp's float ceil). Errors: MGT_ERR_INPUT (samples requested from a split without
 * tokens, seq_length < 1), MGT_ERR_NOMEM. Free with mgt_gpt_index_free (also on a zeroed struct). */
mgt_status mgt_gpt_index_build(const int32_t *lengths, uint64_t n_lengths, uint64_t beg, uint64_t end,
			       int64_t num_samples, int seq_length, uint32_t seed, bool drop_last,
			       mgt_gpt_index *out);
/* The scalars and dtypes mgt_gpt_index_build would produce (arrays NULL), in O(n_lengths): what a
 * cached index must match. Same errors. */
mgt_status mgt_gpt_index_plan(const int32_t *lengths, uint64_t n_lengths, uint64_t beg, uint64_t end,
			      int64_t num_samples, int seq_length, bool drop_last, mgt_gpt_index *out);
void mgt_gpt_index_free(mgt_gpt_index *ix);
/* Row k of sample_index, shuffle_index[i]. */
static inline void mgt_gpt_index_row(const mgt_gpt_index *ix, int64_t k, int64_t *doc, int64_t *off)
{
	if (ix->sample_i64) {
		*doc = ((const int64_t *)ix->sample_index)[2 * k];
		*off = ((const int64_t *)ix->sample_index)[2 * k + 1];
	} else {
		*doc = ((const int32_t *)ix->sample_index)[2 * k];
		*off = ((const int32_t *)ix->sample_index)[2 * k + 1];
	}
}
static inline int64_t mgt_gpt_index_shuffle(const mgt_gpt_index *ix, int64_t i)
{
	return ix->shuffle_i64 ? ((const int64_t *)ix->shuffle_index)[i]
			       : (int64_t)((const uint32_t *)ix->shuffle_index)[i];
}

/* -- blending (utils.normalize, helpers.cpp build_blending_indices) -- */
/* numpy: w / numpy.sum(w) in float64 (numpy's pairwise sum). */
void mgt_gpt_normalize(const double *w, int n, double *out);
/* For s in [0, size): d = argmax_d (w[d] * max(s, 1) - count[d]) (first wins ties),
 * dataset_index[s] = d, dataset_sample_index[s] = count[d]++. weights normalized, n < 32767. */
void mgt_gpt_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
			   int64_t *dataset_sample_index);
/* build_exhaustive_blending_indices: the same greedy over datasets not yet exhausted, weights
 * sizes / total; dataset d contributes exactly sizes[d]. Arrays hold sum(sizes) items. */
void mgt_gpt_blend_indices_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
				      int64_t *dataset_sample_index);

/* -- flags -- */
/* --data-path words (get_blend_from_list): an odd count or any weight that is not a float means
 * all words are prefixes (*weights = NULL); else "w1 p1 w2 p2 ...". Prefixes are stripped.
 * Errors: MGT_ERR_USAGE (no words, a weight <= 0, Megatron's assertion on mixed weights).
 * Caller frees each (*paths)[i], *paths and *weights (raw, not normalized). */
mgt_status mgt_gpt_parse_data_path(int n_words, const char *const *words, int *n_paths, char ***paths,
				   double **weights);
/* Requested samples per split (training.py get_train_valid_test_num_samples):
 * train = train_samples or train_iters * gbs; valid = (train_iters / eval_interval + 1) *
 * eval_iters * eval_gbs; test = eval_iters * eval_gbs; eval_gbs 0 = gbs. With train_samples pass
 * train_iters = train_samples / gbs (update_train_iters without rampup).
 * Errors: MGT_ERR_USAGE (eval_interval < 1 with eval_iters > 0, negative numbers). */
mgt_status mgt_gpt_num_samples(int64_t train_samples, int64_t train_iters, int64_t gbs, int64_t eval_gbs,
			       int64_t eval_interval, int64_t eval_iters, uint64_t out[3]);

/* -- .npy and md5 (the index cache) -- */
/* numpy format v1.0 header of a C-order array ('<i4', '<u4', '<i8', '<i2'; ndim 1 or 2), as
 * numpy.save writes it (growth-axis spaces, '\n', total a multiple of 64). Returns its length, 0 if
 * it does not fit cap (256 always does). */
size_t mgt_npy_header(char *buf, size_t cap, const char *descr, int ndim, const int64_t *shape);
/* Header + data to path, atomically (mgt_afile). Errors: MGT_ERR_IO naming the path. */
mgt_status mgt_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape,
			 const void *data, size_t nbytes);
/* RFC 1321 md5 of n bytes as 32 lowercase hex digits + NUL. */
void mgt_md5_hex(const void *data, size_t n, char hex[33]);
/* One array of a cache entry DIR/BASE-{affix}: dtype descr, shape (expected on load) and data. */
typedef struct {
	const char *affix;            /* "document_index.npy" */
	const char *descr;            /* "<i4" */
	int ndim;                     /* 1 or 2 */
	int64_t shape[2];
	const void *data;             /* save: the items; load: points into map */
	void *map;                    /* load: the file's mmap (munmap(map, map_size)) */
	size_t map_size;
} mgt_npy_array;
/* Save a cache entry: the arrays, then DIR/BASE-description.txt last (so a torn write is a miss).
 * Each file is written atomically. Errors: MGT_ERR_IO naming the file. */
mgt_status mgt_npy_cache_save(const char *dir, const char *base, const char *description,
			      const mgt_npy_array *arrays, int n);
/* Load a cache entry written by mgt_npy_cache_save or numpy.save: the description file must equal
 * description and every array have exactly the given descr and shape (v1.0, C order). On success
 * each arrays[i].data points into its read-only map (unmap with mgt_npy_cache_unmap).
 * Errors: MGT_ERR_IO (a file missing), MGT_ERR_FORMAT (anything that does not match, naming it);
 * nothing stays mapped on error. */
mgt_status mgt_npy_cache_load(const char *dir, const char *base, const char *description,
			      mgt_npy_array *arrays, int n);
void mgt_npy_cache_unmap(mgt_npy_array *arrays, int n);

/* -- MockGPTLowLevelDataset (--mock-data) -- */
#define MGT_GPT_MOCK_SEQUENCES 100000
#define MGT_GPT_MOCK_MAX_LENGTH 4096
/* Its sequence lengths, [100000] int32 in [1, 4095]: numpy.random.default_rng(0).integers(1, 4096,
 * 100000, dtype=int32) (SeedSequence, PCG64, Lemire). Sequence i holds ids j + 1 for j < len - 1,
 * then eod. */
void mgt_gpt_mock_lengths(int32_t *lengths);

/* -- the dataset the training loop reads -- */
#define MGT_GPT_ALL UINT64_MAX   /* num_samples None: one epoch / exhaustive blend */
typedef struct mgt_gpt_data_config {
	int n_paths;                  /* dataset prefixes (P.bin, P.idx) */
	const char *const *paths;
	const double *weights;        /* [n_paths] raw weights, or NULL (one dataset or unweighted) */
	const char *split;            /* --split "969,30,1"; NULL = "1,0,0" */
	int seq_length;               /* S */
	uint64_t seed;                /* --seed (0..2^32-1; Megatron's default 1234) */
	const char *cache_path;       /* --data-cache-path or NULL */
	uint64_t num_samples[3];      /* requested train/valid/test samples (mgt_gpt_num_samples);
				       * 0 is Megatron's size 0, MGT_GPT_ALL its None */
	int32_t eod_id;               /* tokenizer eod */
	int64_t vocab_size;           /* ids must be in [0, vocab_size); 0 = no check */
	bool eod_mask_loss, reset_position_ids;
	bool keep_partial_valid;      /* !drop_last_partial_validation_sequence (default false) */
	bool mock;                    /* --mock-data: ignore paths, MockGPTLowLevelDataset */
} mgt_gpt_data_config;
typedef struct mgt_gpt_data mgt_gpt_data;
/* Open the datasets, build or load the indices of every present split, check token ids.
 * One prefix without weights: a GPTDataset per split. Weights (or several prefixes): a
 * BlendedDataset per split over GPTDatasets asked for ceil(ceil(n * w) * 1.005) samples, or, unweighted,
 * one epoch each blended by their lengths. Cache: cache_path or P/cache/GPTDataset_indices/
 * ({H}-GPTDataset-{split}-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy};
 * blends {H}-BlendedDataset-{split}-... only under cache_path), H = md5 of a JSON description of
 * the parameters; a cache whose description or arrays do not match is rebuilt; a cache that cannot
 * be written is skipped (see mgt_gpt_data_note). Mock data is never cached. Concurrent opens are
 * safe (atomic renames) but, as in Megatron, let one rank build first and the others open after a
 * barrier. Token ids are checked over the present splits' sequences (OpenMP) when vocab_size > 0.
 * Differs from Megatron: H (the description is mgt's own, so Megatron's cache files are not
 * reused nor ours by Megatron); pad id always -1; with --mock-data and vocab_size < 4096 the ids
 * are 1 + j % (vocab_size - 1) instead of j + 1; a split with sequences but no tokens and samples
 * requested is an error (Megatron loops forever).
 * Errors: MGT_ERR_IO (missing or unreadable prefix, naming it), MGT_ERR_FORMAT (bad .idx/.bin,
 * float dtype), MGT_ERR_INPUT (token id outside [0, vocab_size): file, document, sequence, id;
 * samples requested from an empty split; a blend that oversamples a dataset), MGT_ERR_USAGE (bad
 * split, seq_length < 1, seed > 2^32-1, weights), MGT_ERR_NOMEM. Caller owns *out. */
mgt_status mgt_gpt_data_open(const mgt_gpt_data_config *cfg, mgt_gpt_data **out);
/* Samples in split (0 when the split is absent). */
int64_t mgt_gpt_data_len(const mgt_gpt_data *d, mgt_split split);
/* Sample idx (0 <= idx < len; no wrap, as Megatron) of split: tokens[S], labels[S] (int32; text =
 * S + 1 ids, tokens = text[:-1], labels = text[1:], pad -1 replaced by 0), loss_mask[S] (1, 0 where
 * the label is padding and, with eod_mask_loss, where the TOKEN is eod, as gpt_dataset.py
 * _get_ltor_masks_and_position_ids), position_ids[S] (0..S-1, restarting after each eod token with
 * reset_position_ids). int64 datasets' ids are cast to int32 (vocab_size > 0 checks them at open).
 * Thread-safe (read-only). Errors: MGT_ERR_INPUT (idx out of range), MGT_ERR_FORMAT (an index entry
 * that points outside the data). */
mgt_status mgt_gpt_data_sample(const mgt_gpt_data *d, mgt_split split, int64_t idx, int32_t *tokens,
			       int32_t *labels, float *loss_mask, int32_t *position_ids);
/* The document starts of a sample for --reset-attention-mask (gpt_dataset.py
 * _get_ltor_masks_and_position_ids: for an eod token at index i, attention_mask[i+1:, :i+1] = 0):
 * start[q] = 1 + the index of the last eod among tokens[0..q-1] (0 when none), so token q
 * attends to tokens start[q] <= k <= q and an eod belongs to the document it ends; the layout of
 * mgt_attn.seg_start.  tokens[S] as mgt_gpt_data_sample writes them (padding 0: the same as
 * Megatron's, which reads the pad id -1, unless eod is 0), start[S]. */
void mgt_gpt_doc_starts(const int32_t *tokens, int S, int32_t eod, int32_t *start);
/* Which GPTDataset a sample comes from (0 unless blended) and its index there. */
mgt_status mgt_gpt_data_locate(const mgt_gpt_data *d, mgt_split split, int64_t idx, int *dataset,
			       int64_t *dataset_idx);
/* GPTDataset indices of dataset k for split (NULL when absent), for inspection and tests. */
const mgt_gpt_index *mgt_gpt_data_index(const mgt_gpt_data *d, int k, mgt_split split);
/* "" or a one-line remark for the log (e.g. the cache directory could not be written). */
const char *mgt_gpt_data_note(const mgt_gpt_data *d);
void mgt_gpt_data_close(mgt_gpt_data *d);

/* ==== Supervised fine-tuning: Megatron's SFTDataset (lib/data/sft.c) ==========================
 *
 * --sft (megatron/training/datasets/sft_dataset.py, main): a JSONL file, one sample a line, read
 * whole into memory (as datasets.load_dataset holds it), lines kept in file order.  A line is
 *   {"messages": [{"role", "content"}...]}                  as is (SFTLowLevelDataset), or
 *   {"conversations": [{"from", "value"}...]}               ShareGPT (from: human|user -> user,
 *       gpt|assistant|model|chatgpt|bing|bard -> assistant, system, tool|function|observation ->
 *       tool, other -> user; an empty system turn first unless the first speaker is system), or
 *   Alpaca/Dolly: the first non-empty of instruction|prompt|query|question and of
 *       output|response|completion|answer (optional input|context joined by "\n\n") as
 *       [system "", user, assistant]
 * (the converters of megatron/training/datasets/varlen_dataset.py).  The messages split into
 * conversations at every role "system"; each is rendered by the prompt format
 * (sft_tokenizer.py's templates: nemotron-h-aligned, nemotron-nano-v2, identity) and encoded
 * without special tokens added; targets are the tokens with every system, user and tool turn
 * (re-rendered and encoded alone, which must give the same tokens: Megatron's assertion) and
 * nemotron-nano-v2's 3-token assistant prefix replaced by -100.  Packing as SFTDataset.__getitem__:
 * conversations appended (positions restarting at 0), each padded with pad to a multiple of 2 cp
 * when cp > 1 (positions continuing), its end pushed to cu_seqlens; once the pack holds S + 1
 * tokens it is cut there, its last token and target set to pad, cu_seqlens' last entry S, and the
 * line's later conversations dropped; else padded to S + 1 (positions continuing, the padding in
 * the last segment).  pad: the id of <SPECIAL_233> (nemotron-h-aligned) or <unk> (the others). */
typedef enum { MGT_SFT_NEMOTRON_H_ALIGNED, MGT_SFT_NEMOTRON_NANO_V2, MGT_SFT_IDENTITY, MGT_SFT_DEFAULT } mgt_sft_format;
/* --sft-tokenizer-prompt-format's name.  default: the tokenizer's own chat_template renders each
 * conversation (mgt_chat_render, the line's message objects as they are), every token is a
 * target (no turn masked or checked), pad = pad_token, else eos_token, of tokenizer_config.json.
 * Errors: MGT_ERR_USAGE (unknown). */
mgt_status mgt_sft_format_parse(const char *name, mgt_sft_format *out);

typedef struct mgt_sft_data mgt_sft_data;
typedef struct {
	const char *path;       /* the JSONL file (plain or zstd) */
	const mgt_tok *tok;     /* the tokenizer (borrowed; keep it open): HuggingFaceTokenizer as Megatron's
				 * SFTTokenizer; loaded with hf_no_special_tokens (apply_chat_template encodes
				 * with add_special_tokens=False) */
	mgt_sft_format format;
	int seq_length, cp;     /* S; the context-parallel size (S % (2 cp) == 0 when cp > 1) */
	const mgt_chat_config *chat; /* default format: the template and special tokens (borrowed) */
	const char *date;       /* default format: strftime_now's date (NULL: now) */
} mgt_sft_config;
/* One packed sample: caller's arrays tokens, labels, position_ids [S] int32 (labels -100 where
 * the target is masked, as Megatron's), loss_mask [S] fp32 (0 where the label is pad or -100),
 * cu_seqlens [S + 1] int32 (n_cu real entries, then S repeated, as Megatron's fixed-length
 * padding), max_seqlen the longest segment (padding included). */
typedef struct {
	int32_t *tokens, *labels, *position_ids, *cu_seqlens;
	float *loss_mask;
	int n_cu, max_seqlen;
} mgt_sft_sample;
/* Errors: MGT_ERR_IO (the file), MGT_ERR_INPUT (no lines), MGT_ERR_USAGE (seq_length, cp; a
 * tokenizer without the format's pad token), MGT_ERR_NOMEM.  Caller owns *out (mgt_sft_close). */
mgt_status mgt_sft_open(const mgt_sft_config *c, mgt_sft_data **out);
int64_t mgt_sft_lines(const mgt_sft_data *d);
int32_t mgt_sft_pad(const mgt_sft_data *d);
/* Line `line` (0-based) as a packed sample.  Not thread-safe (one encoder and scratch a dataset).
 * Errors: MGT_ERR_INPUT naming the file, line and message: bad JSON, no known layout, a
 * non-string role or content, no messages, an empty assistant turn, an assistant turn not after
 * a user or tool turn, an unknown role, a turn whose tokens alone differ from its tokens in the
 * conversation; MGT_ERR_NOMEM. */
mgt_status mgt_sft_get(mgt_sft_data *d, int64_t line, mgt_sft_sample *s);
void mgt_sft_close(mgt_sft_data *d);
/* Context parallelism's per-document split of a packed row (Megatron's
 * _get_batch_on_this_cp_rank_per_document_balancing through Transformer Engine's
 * thd_get_partitioned_indices, transformer_engine/common/fused_attn/thd_utils.cu
 * thd_partition_indices_kernel): each segment [cu[k], cu[k+1]) of the n_cu entries of cu_seqlens
 * (the last S) is cut into 2 cp chunks, of which context rank `rank` keeps chunks rank and
 * 2 cp - 1 - rank, in segment order.  Writes the S / cp positions of the row it keeps into idx
 * (ascending).  Errors: MGT_ERR_INPUT when a segment's length is not a multiple of 2 cp (the
 * dataset pads every conversation to one) or the segments do not end at S. */
mgt_status mgt_sft_cp_indices(const int32_t *cu_seqlens, int n_cu, int S, int cp, int rank, int32_t *idx);
/* Lines [first, end) as JSON lines {"line", "tokens", "labels", "position_ids", "loss_mask" (0/1),
 * "cu_seqlens" (the n_cu real entries, without Megatron's padding to S + 1), "max_seqlen"}, and
 * with cp > 1 "cp_indices": [[rank 0's positions], ...] (mgt_sft_cp_indices)
 * (mgt-dataset samples --dataset-type sft).  Errors: mgt_sft_get's, MGT_ERR_NOMEM. */
mgt_status mgt_sft_write(FILE *f, mgt_sft_data *d, int64_t first, int64_t end);

/* ==== Masked WordPiece datasets: BERT and T5 (lib/data/masked*.c) ============================
 *
 * Megatron's BERTMaskedWordPieceDataset and T5MaskedWordPieceDataset, megatron/core/datasets/masked_dataset.py:
 * the sample index of helpers.cpp build_mapping over a sentence-level dataset (sequences =
 * sentences, documents = groups of sentences), cached as Megatron caches it, and the samples of
 * bert_dataset.py / t5_dataset.py with masked_dataset.py's masking. Same arrays, bit for bit. */

/* -- numpy legacy RandomState draws on mgt_mt19937 (masked_rng.c; numpy mtrand.pyx,
 *    distributions.c, legacy-distributions.c) -- */
/* random_sample(): two draws a, b; ((a >> 5) * 2^26 + (b >> 6)) / 2^53, in [0, 1). */
double mgt_mt19937_random(mgt_mt19937 *rs);
/* randint(lo, hi) (int64, hi > lo): lo + interval(hi - 1 - lo); no draw when hi - lo == 1. */
int64_t mgt_mt19937_randint(mgt_mt19937 *rs, int64_t lo, int64_t hi);
/* choice(a, p=p) for n <= MGT_CHOICE_MAX weights: cdf = cumsum(p), cdf /= cdf[-1], u = random();
 * returns the first i with cdf[i] > u (the index into a). p is used as given (callers
 * normalise as numpy code does). One draw. */
#define MGT_CHOICE_MAX 64
int mgt_mt19937_choice(mgt_mt19937 *rs, const double *p, int n);
/* geometric(p), 0 < p < 1: for p < 1/3 ceil(log1p(-u) / log(1 - p)) (legacy inversion), else
 * the legacy search (count terms of the pmf until their sum reaches u). One draw. */
int64_t mgt_mt19937_geometric(mgt_mt19937 *rs, double p);
/* ndarray.sum() of n float64 (numpy's pairwise summation: 8 accumulators, blocks of 128). */
double mgt_numpy_sum(const double *a, int n);
/* The n-gram length probabilities of the masking (megatron/core/datasets/masked_dataset.py): p[n-1] ∝ 1/n for
 * n = 1..max (max <= MGT_CHOICE_MAX) normalised with numpy's sum, then normalised again, as
 * masked_dataset.py does before each draw. Writes p[max]. */
void mgt_masked_ngram_probs(int max, double *p);

/* -- std::mt19937_64 (C++11; helpers.cpp build_mapping's shuffle) -- */
typedef struct { uint64_t key[312]; int pos; } mgt_mt19937_64;
void mgt_mt19937_64_seed(mgt_mt19937_64 *g, uint64_t seed);
uint64_t mgt_mt19937_64_next(mgt_mt19937_64 *g);

/* -- the sample index (masked_index.c; helpers.cpp build_mapping, masked_dataset.py) -- */
#define MGT_MASKED_LONG_SENTENCE 512   /* LONG_SENTENCE_LEN */
typedef struct {
	int64_t n;        /* rows N = len(dataset) (all whole epochs; may exceed max_num_samples) */
	int epochs;       /* whole epochs emitted */
	bool u64;         /* rows are uint64 (the file has more than 2^32 - 1 sentences), else uint32 */
	void *rows;       /* [n][3]: start sentence, end sentence (exclusive), target length */
	void *map_;       /* private: the cache file's mmap (NULL: malloc'd) */
	size_t map_size_;
} mgt_masked_index;
/* Parameters of build_mapping. docs[n_docs + 1]: document_indices[beg..end] of the split (absolute
 * sentence ids, non-decreasing); sizes[n_sizes]: every sentence length of the file (int32);
 * max_num_samples: the requested count (whole epochs until it is reached), or MGT_GPT_ALL for
 * one epoch (Megatron's None, which its pybind call rejects); max_seq_length > 1: BERT
 * seq_length - 3, T5 encoder_seq_length - 2; short_seq_prob in [0, 1]; seed in [1, 2^31 - 2]
 * (std::mt19937(seed) for target lengths, std::mt19937_64(seed + 1) for the shuffle);
 * min_num_sent: 2 for BERT with the binary head, else 1. */
typedef struct {
	const int64_t *docs;
	int64_t n_docs;
	const int32_t *sizes;
	uint64_t n_sizes;
	uint64_t max_num_samples;
	int32_t max_seq_length;
	double short_seq_prob;
	int32_t seed;
	int32_t min_num_sent;
} mgt_masked_mapping;
/* The counting pass alone: rows and epochs (out->rows NULL). Errors: MGT_ERR_USAGE (a parameter
 * outside the ranges above), MGT_ERR_INPUT (samples requested but an epoch yields none: no
 * document has min_num_sent sentences without a sentence over 512 tokens; Megatron loops for
 * 2^31 epochs), MGT_ERR_FORMAT (a document index outside sizes). */
mgt_status mgt_masked_index_count(const mgt_masked_mapping *m, mgt_masked_index *out);
/* Count, fill and shuffle (rows swapped as j = rand64() % (i + 1) for i = N-1..1). Same errors
 * and MGT_ERR_NOMEM. Free with mgt_masked_index_free (also on a zeroed struct). */
mgt_status mgt_masked_index_build(const mgt_masked_mapping *m, mgt_masked_index *out);
void mgt_masked_index_free(mgt_masked_index *ix);
/* Row k: start, end (exclusive), target length. */
static inline void mgt_masked_index_row(const mgt_masked_index *ix, int64_t k, uint64_t r[3])
{
	for (int j = 0; j < 3; j++)
		r[j] = ix->u64 ? ((const uint64_t *)ix->rows)[3 * k + j] : ((const uint32_t *)ix->rows)[3 * k + j];
}

/* -- the vocabulary and the samples (masked.c; masked_dataset.py, bert_dataset.py, t5_dataset.py) -- */
/* What the datasets need of a WordPiece tokenizer. Ids are 0..size-1 (inv_vocab's keys, so
 * BERT's random replacement draws lookup[randint(0, size)] = that id). is_subword[id] = 1 where
 * the token string starts with "##". pad < 0: the tokenizer has no pad. specials: the values of
 * tokenizer.special_tokens_dict other than pad_token (n_specials 0: none, then eos and eod are
 * checked, as megatron_dataset.py does); sentinels: additional_special_tokens_ids in order (T5).
 * Borrowed: the dataset keeps the pointers. */
typedef struct {
	int64_t size;
	const uint8_t *is_subword;   /* [size] */
	int32_t cls, sep, mask, pad, bos, eos, eod;
	const int32_t *specials;
	int n_specials;
	const int32_t *sentinels;
	int n_sentinels;
} mgt_masked_vocab;
/* The view of a loaded tokenizer (mgt-train's --tokenizer-type, or mgt-dataset samples'
 * mgt_tok_load_wordpiece_vocab): size = mgt_tok_vocab_size, is_subword from the token bytes,
 * cls sep mask pad bos eos eod = mgt_tok_special_id, sentinels = mgt_tok_sentinels (borrowed from
 * tok: keep it alive), no specials list.  *subword: the is_subword array, the caller's to free
 * (also on error).  Errors: MGT_ERR_VOCAB "TYPE: no [CLS], [SEP] or [MASK]" (callers word their
 * own message), MGT_ERR_NOMEM. */
mgt_status mgt_masked_vocab_from_tok(const mgt_tok *tok, mgt_masked_vocab *v, uint8_t **subword);
/* The pad id P the samples use (megatron_dataset.py): vocab->pad, or -1 (_PAD_TOKEN_ID) when
 * there is none or it equals one of the specials (eos or eod when there are no specials) and
 * !allow_ambiguous (--allow-ambiguous-pad-tokens). */
int64_t mgt_masked_pad_id(const mgt_masked_vocab *v, bool allow_ambiguous);

typedef enum { MGT_MASKED_BERT, MGT_MASKED_T5 } mgt_masked_kind;
/* Megatron's class name: "BERTMaskedWordPieceDataset" or "T5MaskedWordPieceDataset". */
const char *mgt_masked_class(mgt_masked_kind kind);
/* What a sample depends on besides its sentences (megatron/core/datasets/masked_dataset.py). */
typedef struct {
	mgt_masked_kind kind;
	int seq_length;          /* BERT --seq-length; T5 --encoder-seq-length */
	int decoder_seq_length;  /* T5 --decoder-seq-length */
	bool binary_head;        /* BERT classification_head (no --bert-no-binary-head) */
	double mask_prob;        /* --mask-prob, in (0, 1) */
	uint32_t seed;           /* --seed: sample idx draws from RandomState((seed + idx) % 2^32) */
	const mgt_masked_vocab *vocab;
	int64_t pad;             /* mgt_masked_pad_id */
} mgt_masked_params;
/* One BERT sample: caller's arrays of seq_length int64 each. */
typedef struct {
	int64_t *text, *types, *labels, *padding_mask, *loss_mask;
	int is_random, truncated;
	double n_maskings;       /* the masking budget (§1.5b), for checks */
	int64_t n_masked;        /* masked positions (= sum of loss_mask) */
} mgt_bert_sample;
/* One T5 sample: text_enc, enc_mask [seq_length]; text_dec, dec_mask, labels, loss_mask
 * [decoder_seq_length]; caller's int64 arrays. */
typedef struct {
	int64_t *text_enc, *enc_mask, *text_dec, *dec_mask, *labels, *loss_mask;
	int truncated;
	double n_maskings;
	int64_t n_masked, n_spans;
} mgt_t5_sample;
/* The sample of index idx made from the sentences of its row: ids[n_ids] (the sentences
 * concatenated, int32), sent_len[n_sent] their lengths, target length tgt (<= the row's
 * max_seq_length). BERT: SOP pair with the binary head (n_sent >= 2), truncation, [CLS]/[SEP],
 * whole-word n-gram masking (max 3, 80/10/10), padding (§1.3, §1.5). T5: truncation to tgt,
 * masking (max 10, geometric(0.2) n-grams), sentinels, decoder input and labels (§1.4).
 * Errors: MGT_ERR_INPUT (a token id outside [0, vocab size), naming it; BERT binary head with
 * one sentence; T5: more spans than sentinels, or a decoder input longer than
 * decoder_seq_length: "raise --decoder-seq-length"), MGT_ERR_NOMEM. */
mgt_status mgt_masked_bert_make(const mgt_masked_params *p, int64_t idx, const int32_t *ids, int64_t n_ids,
				const int64_t *sent_len, int n_sent, int64_t tgt, mgt_bert_sample *out);
mgt_status mgt_masked_t5_make(const mgt_masked_params *p, int64_t idx, const int32_t *ids, int64_t n_ids,
			      int64_t tgt, mgt_t5_sample *out);

/* -- the dataset (masked_data.c; masked_dataset.py, blended_megatron_dataset_builder.py) -- */
typedef struct {
	mgt_masked_kind kind;
	const char *path;             /* one dataset prefix (P.bin, P.idx), sentence level */
	const char *split;            /* --split; NULL = "1,0,0" */
	int seq_length, decoder_seq_length;
	bool binary_head;
	double mask_prob, short_seq_prob;   /* --mask-prob 0.15, --short-seq-prob 0.1 */
	uint32_t seed;                /* --seed, in [1, 2^31 - 2] */
	const char *cache_path;       /* --data-cache-path or NULL */
	uint64_t num_samples[3];      /* per split; MGT_GPT_ALL: one epoch */
	const mgt_masked_vocab *vocab;
	bool allow_ambiguous_pad;     /* --allow-ambiguous-pad-tokens */
	/* The tokenizer's unique_identifiers for the cache description: n_tokenizer_ids key/value
	 * string pairs (a NULL value is JSON null); 0 pairs: "tokenizer": null. */
	const char *const *tokenizer_ids;
	int n_tokenizer_ids;
} mgt_masked_config;
typedef struct mgt_masked_data mgt_masked_data;
/* Open cfg->path, split its DOCUMENTS by --split, and build or load each present split's sample
 * index. Cache: cache_path or P/cache/{Class}_indices, files {H}-{Class}-description.txt and
 * {H}-{Class}-sample_index.npy ((N, 3) uint32 or uint64), H = md5 of the description, which is
 * masked_dataset.py's unique_description (json.dumps(indent=4) of class, dataset_path,
 * num_samples, index_split, random_seed, sequence_length, split, split_matrix, tokenizer, the
 * masking_* fields, then classification_head or sequence_length_decoder): with the tokenizer's
 * identifiers as Megatron's, the file names are Megatron's. A cache whose description or array
 * does not match is rebuilt; one that cannot be written is skipped (mgt_masked_data_note).
 * Errors: MGT_ERR_IO (missing prefix), MGT_ERR_FORMAT (bad .idx/.bin, float dtype),
 * MGT_ERR_INPUT (a present split with no documents; a split whose documents give no sample:
 * document-level data with the binary head, naming --split-sentences and --bert-no-binary-head),
 * MGT_ERR_USAGE (bad split, lengths, probabilities, seed, T5 without sentinels),
 * MGT_ERR_NOMEM. Caller owns *out. */
mgt_status mgt_masked_data_open(const mgt_masked_config *cfg, mgt_masked_data **out);
void mgt_masked_data_close(mgt_masked_data *d);
/* Samples of split (0 when absent); its index (NULL when absent); the split's documents. */
int64_t mgt_masked_data_len(const mgt_masked_data *d, mgt_split split);
const mgt_masked_index *mgt_masked_data_index(const mgt_masked_data *d, mgt_split split);
void mgt_masked_data_docs(const mgt_masked_data *d, mgt_split split, uint64_t *beg, uint64_t *end);
/* The cache description of split (NULL when absent), and "" or a one-line remark for the log. */
const char *mgt_masked_data_description(const mgt_masked_data *d, mgt_split split);
const char *mgt_masked_data_note(const mgt_masked_data *d);
/* Sample idx (0 <= idx < len) of split; thread-safe. Errors: mgt_masked_*_make's, MGT_ERR_INPUT
 * (idx out of range, wrong kind). */
mgt_status mgt_masked_data_bert(const mgt_masked_data *d, mgt_split split, int64_t idx, mgt_bert_sample *out);
mgt_status mgt_masked_data_t5(const mgt_masked_data *d, mgt_split split, int64_t idx, mgt_t5_sample *out);
/* mgt-dataset samples: split's summary as one JSON line {"split", "documents": [beg, end],
 * "samples", "epochs", "dtype"}, then with index every index row {"split", "row", "index": [start,
 * end, target]}, then with have_samples samples [first, end) (clipped to the split) as JSON lines
 * of their arrays (BERT: text, types, labels, is_random, padding_mask, loss_mask, truncated; T5:
 * text_enc, text_dec, labels, loss_mask, truncated, enc_mask, dec_mask).  Nothing for an absent
 * split.  c: the config d was opened with.  Errors: the samples' (mgt_masked_data_bert/t5),
 * MGT_ERR_NOMEM. */
typedef struct {
	bool index, have_samples;
	uint64_t first, end;
} mgt_masked_write_opts;
mgt_status mgt_masked_data_write(FILE *out, const mgt_masked_data *d, const mgt_masked_config *c, mgt_split k,
				 const mgt_masked_write_opts *o);

#endif
