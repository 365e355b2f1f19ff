/* lib/tok: byte-level BPE tokenizers as Megatron-LM builds them (--tokenizer-type).
 *
 * Types (Megatron names):
 *   GPT2BPETokenizer      vocab.json + merges.txt (OpenAI GPT-2 files); eod = <|endoftext|>.  As in
 *                         Megatron (gpt2_tokenization.py) special-token strings in the text are
 *                         ordinary text: "<|endoftext|>" there is BPE-encoded (7 ids), never the eod.
 *   HuggingFaceTokenizer  tokenizer.json (file, or directory holding one) whose model is byte-level
 *                         BPE: GPT-2, Llama 3, Qwen2, Mistral-Nemo style.  Added tokens are split out
 *                         first (longest match, lstrip/rstrip honoured), normalizer (NFC) and
 *                         pre-tokenizer (ByteLevel, Split, Sequence) applied to the rest, and the
 *                         post-processor's template (e.g. Llama 3's <|begin_of_text|>) added unless
 *                         hf_no_special_tokens.  Same ids as Hugging Face tokenizers' encode():
 *                         GPT-2's tokenizer.json maps "<|endoftext|>" in the text to 50256.
 *   TikTokenizer          tiktoken rank file (base64 token, space, rank per line: cl100k_base,
 *                         o200k_base, Llama 3 tokenizer.model) with its split pattern and special
 *                         tokens, or Megatron's own JSON vocabulary with --tiktoken-pattern v1|v2 and
 *                         --tiktoken-num-special-tokens (ids = rank + num_special_tokens).
 *   NullTokenizer         text is space-separated integers; vocab_size given; eod = vocab_size - 1.
 * Pre-tokenization regexes run through PCRE2 in UTF + UCP mode with JIT.
 *
 * Token ids are int32_t. Text is UTF-8 bytes (not NUL-terminated; embedded NULs allowed).
 * A mgt_tok is immutable after loading and may be shared by threads; each thread encodes through
 * its own mgt_tok_enc (scratch buffers, match data and a word cache).
 * Math: Sennrich et al. 2016 (BPE), Radford et al. 2019 §2.2 (byte-level BPE); merge order is
 * "lowest rank first, leftmost first", as Hugging Face tokenizers and tiktoken apply it.
 */
#ifndef MGT_TOK_H
#define MGT_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

typedef struct mgt_tok mgt_tok;
typedef struct mgt_tok_enc mgt_tok_enc;

typedef struct {
	const char *type;              /* Megatron --tokenizer-type */
	const char *vocab_file;        /* --vocab-file (GPT2BPETokenizer) */
	const char *merge_file;        /* --merge-file (GPT2BPETokenizer) */
	const char *model;             /* --tokenizer-model (HF file/dir, tiktoken file) */
	const char *tiktoken_pattern;  /* --tiktoken-pattern: v1, v2, cl100k_base, o200k_base, llama3, or NULL = from sidecar */
	int tiktoken_num_special;      /* --tiktoken-num-special-tokens (Megatron JSON vocab only); default 1000 */
	int64_t vocab_size;            /* --vocab-size (NullTokenizer) */
	int64_t null_eod_id;           /* --null-tokenizer-eod-id; -1 = vocab_size - 1 */
	int hf_no_special_tokens;      /* --tokenizer-hf-no-include-special-tokens */
} mgt_tok_opts;

/* Growable id array. Zero-initialize; free with free(a->v). */
typedef struct { int32_t *v; size_t n, cap; } mgt_ids;
mgt_status mgt_ids_push(mgt_ids *a, int32_t id);

/* Load a tokenizer. Errors: MGT_ERR_USAGE (unknown type, missing file flag), MGT_ERR_VOCAB
 * (missing, unreadable, malformed, inconsistent or unsupported tokenizer files, naming the file
 * and line or field), MGT_ERR_NOMEM. On success the caller owns *out (mgt_tok_free). */
mgt_status mgt_tok_load(mgt_tok **out, const mgt_tok_opts *o);
void mgt_tok_free(mgt_tok *t);

/* Number of ids (including added/special tokens): Megatron's tokenizer.vocab_size. */
int64_t mgt_tok_vocab_size(const mgt_tok *t);
/* End-of-document id (tokenizer.eod), or -1 when the tokenizer has none. */
int32_t mgt_tok_eod(const mgt_tok *t);
/* Canonical Megatron type name. */
const char *mgt_tok_type_name(const mgt_tok *t);

/* Per-thread encoder. Errors: MGT_ERR_NOMEM. */
mgt_status mgt_tok_enc_new(mgt_tok_enc **out, const mgt_tok *t);
void mgt_tok_enc_free(mgt_tok_enc *e);

/* Encode len bytes of UTF-8 text, appending ids to out (Megatron tokenizer.tokenize(text)).
 * Errors: MGT_ERR_INPUT (invalid UTF-8 at byte offset N; NullTokenizer: a non-integer field or an
 * id outside the vocabulary), MGT_ERR_NOMEM. On error out may hold a partial result. */
mgt_status mgt_tok_encode(mgt_tok_enc *e, const char *text, size_t len, mgt_ids *out);

/* Decode ids to bytes, appending to out (no NUL added). Special tokens decode to their text.
 * Errors: MGT_ERR_INPUT (id outside the vocabulary), MGT_ERR_NOMEM. */
mgt_status mgt_tok_decode(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out);

/* Length of the longest valid UTF-8 prefix of s (RFC 3629). */
size_t mgt_tok_utf8_valid(const char *s, size_t n);
/* Append s to out with each invalid UTF-8 byte replaced by U+FFFD (what decoders show for ids
 * that split a character). Errors: MGT_ERR_NOMEM. */
mgt_status mgt_tok_utf8_lossy(const char *s, size_t n, mgt_buf *out);

/* The token's bytes (special tokens: their text); NULL if id is out of range. */
const char *mgt_tok_token_bytes(const mgt_tok *t, int32_t id, size_t *len);

#endif
