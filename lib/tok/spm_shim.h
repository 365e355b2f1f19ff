/* lib/tok/spm_shim.h: the C face of spm_shim.cc, a thin wrapper over Debian's libsentencepiece
 * (C++ API, sentencepiece_processor.h). Not a public header: lib/tok/spm.c builds the Megatron
 * tokenizers (SentencePieceTokenizer, Llama2Tokenizer) on it.
 *
 * Plain C types only, so that this header compiles as C11 and C++17. No function throws: C++
 * exceptions and sentencepiece's util::Status become a return value of TOK_SPM_OK, TOK_SPM_ERR
 * (message in err, NUL-terminated, truncated to errlen) or TOK_SPM_NOMEM.
 * A tok_spm is immutable after tok_spm_open; encode and decode may run on several threads
 * (SentencePieceProcessor's Encode/Decode are const). */
#ifndef MGT_TOK_SPM_SHIM_H
#define MGT_TOK_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TOK_SPM_OK = 0, TOK_SPM_ERR = 1, TOK_SPM_NOMEM = 2 };

/* Piece kinds, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp llama_token_type). */
enum { TOK_SPM_NORMAL = 1, TOK_SPM_UNKNOWN = 2, TOK_SPM_CONTROL = 3, TOK_SPM_USER = 4, TOK_SPM_UNUSED = 5, TOK_SPM_BYTE = 6 };

typedef struct tok_spm tok_spm;

/* Load a serialized ModelProto (tokenizer.model). On success the caller owns *out (tok_spm_close). */
int tok_spm_open(const char *path, tok_spm **out, char *err, size_t errlen);
void tok_spm_close(tok_spm *s);

/* Number of pieces (GetPieceSize). */
int32_t tok_spm_size(const tok_spm *s);
/* Piece text of id (0 <= id < size): UTF-8 with U+2581 for spaces, "<0xNN>" for byte pieces.
 * Points into the model; valid until tok_spm_close. */
const char *tok_spm_piece(const tok_spm *s, int32_t id, size_t *len);
float tok_spm_score(const tok_spm *s, int32_t id);
/* TOK_SPM_* kind of id, from IsUnknown, IsControl, IsUnused, IsByte, in that order of precedence,
 * else normal (user-defined pieces included: the C++ API does not tell them apart, and
 * llama.cpp's converter, which asks the same four questions, types them normal too). */
int tok_spm_kind(const tok_spm *s, int32_t id);
/* bos_id(), eos_id(), unk_id(), pad_id(): -1 when the model has none. */
void tok_spm_specials(const tok_spm *s, int32_t *bos, int32_t *eos, int32_t *unk, int32_t *pad);

/* Encode len bytes of UTF-8 (Encode(input, &ids)); *ids is malloc'd (caller frees), *n ids. */
int tok_spm_encode(const tok_spm *s, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);
/* Decode ids (0 <= id < size; Decode(ids, &text)); *text is malloc'd (caller frees), *len bytes. */
int tok_spm_decode(const tok_spm *s, const int32_t *ids, size_t n, char **text, size_t *len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
