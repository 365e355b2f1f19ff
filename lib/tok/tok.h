/* lib/tok: the tokenizers Megatron-LM builds (--tokenizer-type): byte-level BPE, BERT WordPiece,
 * and SentencePiece through Debian's libsentencepiece; and the sentence splitter of
 * mgt-preprocess --split-sentences (ICU).
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
 *   SentencePieceTokenizer  a SentencePiece tokenizer.model (Megatron _SentencePieceTokenizer): ids
 *                         are the model's pieces, then <CLS> <SEP> <EOD> <MASK>, the pad, bos and eos
 *                         pieces (<PAD> <BOS> <EOS> when the model has none) and <extra_id_0..N-1>
 *                         (vocab_extra_ids), each appended only if not already a piece; eod = <EOD>.
 *                         Those special strings in the text are split out first (earliest match,
 *                         ties to the earlier-added token) and each stretch between them encoded
 *                         by SentencePiece on its own; no BOS is added. Decode is Megatron's
 *                         detokenize: a special id becomes " TEXT " between SentencePiece decodes.
 *   Llama2Tokenizer       a SentencePiece tokenizer.model (Megatron _Llama2Tokenizer): ids = pieces;
 *                         encode = [bos] + SentencePiece Encode (no EOS; special strings are text);
 *                         eod = eos; decode = SentencePiece Decode (control pieces vanish).
 *                         SentencePiece decoding of byte-fallback pieces gives their bytes (a run of
 *                         them that is not valid UTF-8 decodes to U+FFFD, as SentencePiece does).
 *   BertWordPieceLowerCase, BertWordPieceCase  a BERT vocab.txt (one token a line, id = line - 1)
 *                         as Megatron HEAD uses it: Hugging Face's fast BertTokenizer (tokenizers'
 *                         BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing).  Text:
 *                         [PAD] [UNK] [CLS] [SEP] [MASK] (and, Case only, <extra_id_0..99>) are
 *                         split out of the raw text first (added tokens, not normalized); the rest
 *                         is cleaned (code point 0, U+FFFD and Cc/Cf/Co characters other than
 *                         \t\n\r dropped, White_Space -> ' '), CJK ideographs get spaces around
 *                         them, LowerCase also strips accents (NFD, Mn dropped) then lower-cases;
 *                         words split at spaces, every punctuation character (ASCII 33-47, 58-64,
 *                         91-96, 123-126, or P*) a word of its own; each word WordPiece'd: greedy
 *                         longest match from the left, later pieces as "##" + rest; a word of more
 *                         than 100 characters, or with a position nothing matches, is [UNK].
 *                         encode = [CLS] ids [SEP] unless hf_no_special_tokens (then plain ids).
 *                         vocab_size = V (LowerCase) or V + 100: Case appends <extra_id_0..99> at
 *                         V.. (HEAD build_tokenizer.py; those already in the vocab keep their id).
 *                         eod = eos = [SEP], bos = [CLS].  Decode is the WordPiece decoder: tokens
 *                         joined by spaces, "##" pieces glued on, " ." " ," " ?" " !" glued on.
 *                         mgt_tok_token_bytes gives the vocab string ("##s").
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
	const char *vocab_file;        /* --vocab-file (GPT2BPETokenizer vocab.json, BertWordPiece* vocab.txt) */
	const char *merge_file;        /* --merge-file (GPT2BPETokenizer) */
	const char *model;             /* --tokenizer-model (HF file/dir, tiktoken file) */
	const char *tiktoken_pattern;  /* --tiktoken-pattern: v1, v2, cl100k_base, o200k_base, llama3, or NULL = from sidecar */
	int tiktoken_num_special;      /* --tiktoken-num-special-tokens (Megatron JSON vocab only); default 1000 */
	int64_t vocab_size;            /* --vocab-size (NullTokenizer) */
	int64_t null_eod_id;           /* --null-tokenizer-eod-id; -1 = vocab_size - 1 */
	int hf_no_special_tokens;      /* --tokenizer-hf-no-include-special-tokens */
	int vocab_extra_ids;           /* --vocab-extra-ids (SentencePieceTokenizer): <extra_id_N> tokens */
} mgt_tok_opts;

/* A stored tokenizer (a checkpoint's) with a command line's flags applied, in place: given
 * over->type, over replaces t whole; otherwise over's vocab_file, merge_file and model replace
 * t's paths where set (the files moved), hf_no_special_tokens and vocab_extra_ids are over's,
 * and a t without a type but with both BPE files becomes GPT2BPETokenizer.  Pointers are
 * copied, not the strings. */
void mgt_tok_opts_apply(mgt_tok_opts *t, const mgt_tok_opts *over);

/* Growable id array. Zero-initialize; free with free(a->v). */
typedef struct { int32_t *v; size_t n, cap; } mgt_ids;
mgt_status mgt_ids_push(mgt_ids *a, int32_t id);

/* A WordPiece vocabulary without an encoder, for what needs only the ids (mgt-dataset samples'
 * masked datasets): vocab.txt read leniently, every line a token (an empty one too, a trailing
 * '\r' removed), id = line - 1, V lines; [CLS] [SEP] [MASK] [PAD] looked up by their first
 * line; then extra_ids >= 0 sentinels <extra_id_0..extra_ids-1> at ids V.., vocab size
 * V + extra_ids (as BertWordPieceCase appends them, but with no bytes, and never found in the
 * vocabulary).  bos = [CLS], eos = eod = [SEP], no unk (mgt_tok_special_id); token bytes the
 * lines; mgt_tok_encode refuses (MGT_ERR_USAGE); decode gives the tokens' bytes back to back.
 * Errors: mgt_file_read's MGT_ERR_IO, MGT_ERR_VOCAB "PATH: no [MASK] token (expected a WordPiece
 * vocab.txt)" for the first of the four missing, MGT_ERR_NOMEM.  Caller owns *out (mgt_tok_free). */
mgt_status mgt_tok_load_wordpiece_vocab(mgt_tok **out, const char *path, int extra_ids);

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
 * WordPiece: Hugging Face's WordPiece decoder with cleanup (see the types above).
 * Errors: MGT_ERR_INPUT (id outside the vocabulary), MGT_ERR_NOMEM. */
mgt_status mgt_tok_decode(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out);

/* Length of the longest valid UTF-8 prefix of s (RFC 3629). */
size_t mgt_tok_utf8_valid(const char *s, size_t n);
/* Append s to out with each invalid UTF-8 byte replaced by U+FFFD (what decoders show for ids
 * that split a character). Errors: MGT_ERR_NOMEM. */
mgt_status mgt_tok_utf8_lossy(const char *s, size_t n, mgt_buf *out);

/* The token's bytes (special tokens: their text); NULL if id is out of range. SentencePiece:
 * the piece with U+2581 as a space, a byte piece <0xNN> as that byte, control and unknown pieces
 * as their text.  WordPiece: the vocab.txt line ("##s" for a continuation piece). */
const char *mgt_tok_token_bytes(const mgt_tok *t, int32_t id, size_t *len);

/* A named special id: "pad", "unk", "cls", "sep", "mask", "bos", "eos" or "eod"; -1 when the
 * tokenizer has none (or the name is unknown).  BERT WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK]
 * as looked up in the vocab, bos = cls, eos = eod = sep (Megatron HEAD huggingface_tokenizer.py).
 * SentencePieceTokenizer: <CLS> <SEP> <MASK> <PAD> <BOS> <EOS> as _SentencePieceTokenizer adds
 * them, unk = the model's.  Others: bos, pad and eod where the tokenizer defines them, eos = eod. */
int32_t mgt_tok_special_id(const mgt_tok *t, const char *name);

/* The sentinel ids (Megatron's additional_special_tokens_ids: <extra_id_0>, <extra_id_1>, ... in
 * that order, as many as the tokenizer has): *ids points into t (valid while t lives); returns
 * the count (0 and *ids = NULL when none: BertWordPieceLowerCase, SentencePieceTokenizer
 * without --vocab-extra-ids). */
size_t mgt_tok_sentinels(const mgt_tok *t, const int32_t **ids);

/* ---- sentence splitting (mgt-preprocess --split-sentences) ---------------------------------- */

typedef struct mgt_tok_sent mgt_tok_sent;
/* A byte span of a text. */
typedef struct { size_t off, len; } mgt_span;
typedef struct { mgt_span *v; size_t n, cap; } mgt_spans;

/* The ICU locale for a Megatron/NLTK --lang name ("english" -> "en", "german" -> "de", the 18
 * punkt languages); a name that already looks like a locale (2-3 letters, optionally _REGION) is
 * returned as it is; NULL otherwise. */
const char *mgt_tok_sent_locale(const char *lang);
/* A sentence splitter: ICU's sentence break iterator (UAX #29 with the locale's CLDR
 * abbreviation suppressions, "LOCALE@ss=standard") standing in for NLTK punkt.  keep_newlines:
 * Megatron's --keep-newlines (whitespace after a sentence stays with it).  One per thread.
 * Errors: MGT_ERR_USAGE (unknown lang, naming it), MGT_ERR_NOMEM, MGT_ERR_IO (ICU failed,
 * with its error name).  The caller owns *out (mgt_tok_sent_free). */
mgt_status mgt_tok_sent_new(mgt_tok_sent **out, const char *lang, int keep_newlines);
void mgt_tok_sent_free(mgt_tok_sent *s);
/* Split len bytes of valid UTF-8 into sentences, appending spans (into text) to out (zero it
 * first; free out->v).  As Megatron's Encoder.split: the text is cut into pieces of 1,000,000
 * code points, each split on its own.  Line breaks count as spaces (punkt does not end a
 * sentence at a newline).  Without keep_newlines each span excludes the whitespace around the
 * sentence; whitespace-only stretches give no span.  With it, a sentence keeps the whitespace
 * after it (and the text's leading whitespace stays with the first).
 * Errors: MGT_ERR_NOMEM, MGT_ERR_INPUT (ICU rejected the text, with its error name). */
mgt_status mgt_tok_sent_split(mgt_tok_sent *s, const char *text, size_t len, mgt_spans *out);

/* ---- GGUF vocabulary view (llama.cpp's tokenizer.ggml.* keys) ------------------------------- */

/* What mgt-export writes as tokenizer.ggml.*; facts from llama.cpp convert_hf_to_gguf.py
 * (get_vocab_base, _create_vocab_sentencepiece, does_token_look_special) and gguf-py
 * (TokenType). Everything is owned by the struct (mgt_tok_vocab_free). */
typedef struct {
	const char *model;        /* GGUF tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece) */
	const char *pre;          /* tokenizer.ggml.pre: "gpt-2", "llama-bpe", "qwen2", ... or NULL */
	size_t n;                 /* ids = mgt_tok_vocab_size */
	char **tokens; size_t *token_len;  /* GGUF token strings (NUL-terminated too): byte-level unicode form / SentencePiece pieces */
	float *scores;            /* n entries or NULL */
	int32_t *types;           /* 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte */
	char **merges; size_t nmerges;     /* "a b" (gpt2 model only) */
	int32_t bos, eos, unk, pad;        /* -1 when none */
	int add_bos;                       /* the tokenizer prepends BOS when encoding */
} mgt_tok_vocab;

/* Fill *out (zeroed first) with t's vocabulary in GGUF form:
 *  GPT2BPETokenizer: model "gpt2", pre "gpt-2", tokens = vocab.json keys (byte-level unicode form),
 *    types normal, merges = merges.txt in rank order, bos = eos = <|endoftext|>, add_bos 0.
 *  HuggingFaceTokenizer (byte-level BPE): model "gpt2"; pre from the pre-tokenizer's one regex:
 *    GPT-2's "gpt-2", Llama 3's "llama-bpe", Qwen2's "qwen2"; tokens from model.vocab (byte-level
 *    form) and added_tokens (their content; type control if "special" or looks special as
 *    llama.cpp decides (<|...|>, <pad>, <mask>, ...), else user defined with U+2581 as a space);
 *    ids without a token "[PAD<id>]" typed unused; merges from the json in rank order; eos = eod;
 *    bos and pad from tokenizer_config.json beside the file (bos else the post-processor's first
 *    token, else eod); add_bos = the post-processor prepends bos (and special tokens are on).
 *  SentencePieceTokenizer / Llama2Tokenizer: model "llama", pre NULL; tokens = pieces (U+2581,
 *    "<0xNN>"), scores = piece scores, types from IsUnknown/IsControl/IsUnused/IsByte (else
 *    normal); Megatron's appended specials typed control with score -1000 (llama.cpp's added
 *    tokens); bos, unk, pad as the tokenizer's; eos = the tokenizer's eod (Llama2: the model's
 *    eos; SentencePieceTokenizer: <EOD>, the id that ends documents in training);
 *    add_bos 1 for Llama2Tokenizer, else 0.
 * Errors: MGT_ERR_USAGE for TikTokenizer and NullTokenizer (no GGUF form: message says what to
 * use instead), MGT_ERR_VOCAB for a tokenizer.json pre-tokenizer llama.cpp has no name for
 * (the message names the pattern), MGT_ERR_NOMEM. On error *out holds nothing to free. */
mgt_status mgt_tok_vocab_get(const mgt_tok *t, mgt_tok_vocab *out);
void mgt_tok_vocab_free(mgt_tok_vocab *v);

/* ---- chat templates (Hugging Face tokenizer_config.json "chat_template", Jinja2) ------------- */

/* A parsed chat template.  Semantics are Jinja2 3.1's as transformers runs chat templates
 * (src/transformers/utils/chat_template_utils.py::_cached_compile_jinja_template:
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols,
 * AssistantTracker]), keep_trailing_newline off, filter tojson = json.dumps(x, ensure_ascii=False),
 * globals raise_exception(msg) and strftime_now(fmt)).  Supported: text with {{ }} {% %} {# #}
 * and their -/+ whitespace controls; statements if/elif/else, for (else, tuple targets, inline
 * if, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem), set (name,
 * tuple, ns.attr on namespace(), block set), macro and macro calls, break, continue,
 * generation/endgeneration (body rendered as is); Python operators, comparisons, and/or/not,
 * in/not in, a if c else b, subscripts and slices, attribute access on dicts, list/dict/tuple
 * literals, keyword arguments; str methods strip lstrip rstrip upper lower title capitalize
 * startswith endswith split replace join, dict methods get items keys values; globals range,
 * namespace, dict, raise_exception, strftime_now; the filters and tests that jinja_filt.c lists.
 * Anything else (include, extends, import, call blocks, filter blocks, recursive loops, other
 * filters, tests, methods or globals) is refused with an error naming it and its line, never
 * rendered differently.  Immutable after parsing; may be shared by threads. */
typedef struct mgt_chat_template mgt_chat_template;
struct json_t;

/* Parse n bytes of template source; name (copied) labels errors ("NAME:LINE: ...").
 * Errors: MGT_ERR_VOCAB (syntax error or an unsupported construct; the message names it and
 * the template line), MGT_ERR_NOMEM.  The caller frees *out with mgt_chat_template_free. */
mgt_status mgt_chat_template_parse(const char *src, size_t n, const char *name, mgt_chat_template **out);

/* Render with the variables of the JSON object vars (messages, tools, documents,
 * add_generation_prompt, bos_token, eos_token, ..., as transformers' apply_chat_template passes
 * them: {**special_tokens_map, **kwargs}); vars may be NULL.  date pins strftime_now's clock
 * ("YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS", read as UTC) or is NULL for the local time now.
 * Appends the text to out (the caller owns and frees out->p); on error out is left as it was.
 * Errors: MGT_ERR_INPUT "NAME:LINE: MESSAGE" for what Jinja2 raises while rendering:
 * "raise_exception: MSG" for the template's own raise_exception(MSG) (MSG is transformers'
 * TemplateError message), "UndefinedError: 'x' is undefined", TypeError, ...; and for a value or
 * operation this engine does not support ("... is not supported by this engine");
 * MGT_ERR_USAGE when vars is not an object; MGT_ERR_NOMEM. */
mgt_status mgt_chat_template_render(const mgt_chat_template *t, const struct json_t *vars, const char *date,
				    mgt_buf *out);
void mgt_chat_template_free(mgt_chat_template *t);

/* A Hugging Face tokenizer's chat setup: t its chat template (the "default" one of a named list),
 * tool_use the list's "tool_use" template (NULL if none), specials the special tokens' strings
 * from tokenizer_config.json (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
 * mask_token: a string or an AddedToken's "content"; additional_special_tokens), an object. */
typedef struct {
	mgt_chat_template *t, *tool_use;
	struct json_t *specials;
} mgt_chat_config;
/* From template_file (a Jinja2 file; NULL: the "chat_template" of the tokenizer_config.json
 * beside, or for a directory in, model) and that config's special tokens (none without one).
 * Errors: MGT_ERR_USAGE (no template file and no tokenizer_config.json), MGT_ERR_VOCAB (a
 * chat_template that is missing, of another type, a list without "default", or that does not
 * parse), MGT_ERR_IO (the template file), MGT_ERR_NOMEM.  Close with mgt_chat_config_close. */
mgt_status mgt_chat_config_open(mgt_chat_config *c, const char *template_file, const char *model);
void mgt_chat_config_close(mgt_chat_config *c);
/* transformers' apply_chat_template(tokenize=False): the template rendered with the special
 * tokens and the keys of the JSON object kwargs (messages, tools, documents,
 * add_generation_prompt, ...; add_generation_prompt false, tools and documents none when
 * absent), the tool_use template when tools is given and there is one; date as
 * mgt_chat_template_render's.  Appends to out.  Errors: mgt_chat_template_render's, NOMEM. */
mgt_status mgt_chat_render(const mgt_chat_config *c, const struct json_t *kwargs, const char *date, mgt_buf *out);
/* The ids that end an assistant turn in generation, as transformers' generate stops a chat
 * model: generation_config.json's eos_token_id (an id or a list) beside (or in, for a directory)
 * model, and c's eos_token (tokenizer_config.json) when tok encodes it to one id; each id once,
 * in that order, appended to out (maybe none).  Errors: MGT_ERR_VOCAB (a generation_config.json
 * that is not JSON, or whose eos_token_id is not an id or a list of ids in [0, tok's vocabulary
 * size): naming the file), MGT_ERR_NOMEM. */
mgt_status mgt_chat_end_ids(const mgt_chat_config *c, const mgt_tok *tok, const char *model, mgt_ids *out);

#endif
