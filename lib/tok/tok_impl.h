/* lib/tok internals shared by bpe.c, load.c and pretok.c. Not a public header. */
#ifndef MGT_TOK_IMPL_H
#define MGT_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok.h"

/* Token bytes -> id: open addressing over ids, keys are the token's bytes in the pool. */
typedef struct {
	int32_t *slots; /* -1 = empty */
	size_t mask;
} tok_vocab_map;

/* (left id, right id) -> (rank, merged id). */
typedef struct {
	uint64_t *keys; /* UINT64_MAX = empty */
	int32_t *rank, *merged;
	size_t mask, n;
} tok_pair_map;

typedef struct {
	int32_t id;
	uint32_t off, len; /* content in the byte pool */
	uint8_t lstrip, rstrip, single_word, special, normalized;
} tok_added;

/* One pre-tokenizer step: split each piece by a regex (Isolated or Removed behaviour), or
 * ByteLevel's prefix space. */
enum { PRE_SPLIT_ISOLATED, PRE_SPLIT_REMOVED };
typedef struct {
	pcre2_code *re;
	int behavior;
	int add_prefix_space; /* ByteLevel add_prefix_space (applied before splitting) */
	char *pattern;        /* the pattern as the tokenizer files spell it (GGUF pre name), or NULL */
} tok_pre_step;

/* TOK_VOCAB: a vocabulary without an encoder (mgt_tok_load_wordpiece_vocab). */
enum { TOK_GPT2, TOK_HF, TOK_TIKTOKEN, TOK_MEGATRON_TIKTOKEN, TOK_NULL, TOK_SPM, TOK_LLAMA2, TOK_WORDPIECE, TOK_VOCAB };

/* A WordPiece encoder's scratch (per thread): the normalized text, code points, a piece. */
typedef struct {
	mgt_buf norm, piece;
	int32_t *cps;
	size_t cps_cap;
} tok_wp_scratch;

struct tok_spm;

struct mgt_tok {
	int kind;
	int64_t vocab_size;   /* max id + 1 */
	int32_t eod;
	/* id -> bytes */
	mgt_buf pool;                /* the bytes of every token, back to back */
	uint32_t *tok_off, *tok_len; /* [vocab_size]; tok_len = UINT32_MAX for an unused id */
	tok_vocab_map vmap;          /* BPE tokens only (not added tokens) */
	tok_pair_map pairs;
	int32_t byte_id[256];
	int ignore_merges;           /* a piece that is a whole token is emitted as it is */
	tok_added *added;
	size_t n_added;
	uint8_t added_first[256];    /* a byte that starts some added token */
	int added_first_only;        /* the one byte all added tokens start with, or -1 */
	int nfc;                     /* normalizer: NFC */
	tok_pre_step pre[4];
	int n_pre;
	int32_t prefix_ids[4], suffix_ids[4]; /* post-processor template */
	int n_prefix, n_suffix;
	const char *type_name;
	/* GGUF view: bos/pad from tokenizer_config.json (HF), -1 when none */
	int32_t bos, pad;
	/* SentencePiece (spm.c): the processor; Megatron's special tokens are in added[] (in
	 * _SentencePieceTokenizer's insertion order), the model's pieces are ids 0..spm_size-1 */
	struct tok_spm *spm;
	int32_t spm_size, spm_eos, spm_unk;
	/* BERT WordPiece (wordpiece.c): lower-case + strip accents; the special ids (-1 = none) */
	int wp_lower;
	int32_t unk, cls, sep, mask;
	/* <extra_id_0..N-1> in order (mgt_tok_sentinels), owned */
	int32_t *sentinels;
	size_t n_sentinels;
};

/* bpe.c */
uint64_t tok_hash_bytes(const char *p, size_t n);
mgt_status tok_pool_add(mgt_tok *t, int32_t id, const char *p, size_t n);
mgt_status tok_alloc_ids(mgt_tok *t, int64_t vocab_size);
mgt_status tok_vmap_build(mgt_tok *t, const char *file);
int32_t tok_vmap_find(const mgt_tok *t, const char *p, size_t n);
mgt_status tok_pair_put(tok_pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
mgt_status tok_pairs_from_ranks(mgt_tok *t);
mgt_status tok_finish_bytes(mgt_tok *t, const char *file);
/* pretok.c */
mgt_status tok_regex_compile(pcre2_code **out, const char *pattern, const char *what);
size_t tok_utf8_valid_prefix(const char *s, size_t n);
/* load.c */
struct json_t;
mgt_status tok_json_load(const char *path, struct json_t **out);
mgt_status tok_load_vocab_json(mgt_tok *t, const char *file, struct json_t *vocab, int64_t min_size);
mgt_status tok_add_merge(mgt_tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t rank,
			 const char *file, size_t line);
mgt_status tok_add_pre_regex(mgt_tok *t, const char *pattern, int behavior, int prefix_space, const char *what);
mgt_status tok_add_added(mgt_tok *t, const char *text, int32_t id, const tok_added *flags);
int32_t tok_added_id(const mgt_tok *t, const char *text);
const char *tok_gpt2_pattern(void);
/* gpt2, cl100k_base, o200k_base, llama3, v1, v2; NULL if unknown */
const char *tok_builtin_pattern(const char *name);
/* bpe.c: the first-byte index of the added tokens (split_added's fast path) */
void tok_added_index(mgt_tok *t);
/* wordpiece.c */
mgt_status tok_load_wordpiece(mgt_tok *t, const mgt_tok_opts *o);
/* Encode a stretch of raw text free of added tokens (normalize, pre-tokenize, WordPiece). */
mgt_status tok_wp_encode(const mgt_tok *t, tok_wp_scratch *sc, const char *s, size_t n, mgt_ids *out);
mgt_status tok_wp_decode(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out);
void tok_wp_scratch_free(tok_wp_scratch *sc);
/* hf.c */
mgt_status tok_load_hf(mgt_tok *t, const mgt_tok_opts *o);
/* spm.c */
mgt_status tok_load_spm(mgt_tok *t, const mgt_tok_opts *o);
mgt_status tok_spm_encode_text(const mgt_tok *t, const char *text, size_t len, mgt_ids *out);
mgt_status tok_spm_decode_ids(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out);
void tok_spm_free(mgt_tok *t);
mgt_status tok_spm_vocab(const mgt_tok *t, mgt_tok_vocab *v);
/* vocab.c */
mgt_status tok_vocab_alloc(mgt_tok_vocab *v, size_t n, int scores);
mgt_status tok_vocab_set(mgt_tok_vocab *v, size_t id, const char *s, size_t len, int32_t type);
/* GPT-2's bytes_to_unicode: byte -> code point, and the inverse (-1 if not a byte char). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);
/* Decode a GPT-2 byte-level string (UTF-8 of mapped code points) to raw bytes into out. */
mgt_status tok_bytelevel_decode(const char *s, size_t n, mgt_buf *out, const char *file, const char *what);

#endif
