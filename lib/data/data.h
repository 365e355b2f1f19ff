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

/* ==== GPTDataset sample order (lib/data/gpt*.c) =============================================
 *
 * Megatron's GPTDataset and BlendedDataset, megatron-reference.md §3: the split of a dataset's
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
/* Which GPTDataset a sample comes from (0 unless blended) and its index there. */
mgt_status mgt_gpt_data_locate(const mgt_gpt_data *d, mgt_split split, int64_t idx, int *dataset,
			       int64_t *dataset_idx);
/* GPTDataset indices of dataset k for split (NULL when absent), for inspection and tests. */
const mgt_gpt_index *mgt_gpt_data_index(const mgt_gpt_data *d, int k, mgt_split split);
/* "" or a one-line remark for the log (e.g. the cache directory could not be written). */
const char *mgt_gpt_data_note(const mgt_gpt_data *d);
void mgt_gpt_data_close(mgt_gpt_data *d);

#endif
