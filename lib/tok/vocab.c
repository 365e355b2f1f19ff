/* lib/tok/vocab.c: the GGUF vocabulary view (mgt_tok_vocab_get) of the byte-level BPE tokenizers;
 * SentencePiece's is in spm.c. Facts from llama.cpp convert_hf_to_gguf.py (get_vocab_base: added
 * tokens typed control or user defined, holes "[PAD<id>]" unused; does_token_look_special),
 * gguf-py constants (TokenType) and llama-vocab.cpp (the pre-tokenizer names). */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

mgt_status tok_vocab_alloc(mgt_tok_vocab *v, size_t n, int scores)
{
	v->n = n;
	v->tokens = calloc(n ? n : 1, sizeof *v->tokens);
	v->token_len = calloc(n ? n : 1, sizeof *v->token_len);
	v->types = calloc(n ? n : 1, sizeof *v->types);
	v->scores = scores ? calloc(n ? n : 1, sizeof *v->scores) : NULL;
	if (!v->tokens || !v->token_len || !v->types || (scores && !v->scores))
		return mgt_err(MGT_ERR_NOMEM, "out of memory for a vocabulary of %zu tokens", n);
	return MGT_OK;
}

mgt_status tok_vocab_set(mgt_tok_vocab *v, size_t id, const char *s, size_t len, int32_t type)
{
	char *p = malloc(len + 1);
	if (!p)
		return mgt_err(MGT_ERR_NOMEM, "out of memory for the vocabulary");
	memcpy(p, s, len);
	p[len] = 0;
	free(v->tokens[id]);
	v->tokens[id] = p, v->token_len[id] = len, v->types[id] = type;
	return MGT_OK;
}

void mgt_tok_vocab_free(mgt_tok_vocab *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->tokens && i < v->n; i++)
		free(v->tokens[i]);
	for (size_t i = 0; v->merges && i < v->nmerges; i++)
		free(v->merges[i]);
	free(v->tokens), free(v->token_len), free(v->types), free(v->scores), free(v->merges);
	memset(v, 0, sizeof *v);
}

/* Raw bytes -> GPT-2 byte-level unicode string (the vocab.json spelling). */
static mgt_status bytelevel(const char *s, size_t n, mgt_buf *out)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t cp = tok_byte_to_cp((uint8_t)s[i]);
		char u[2];
		size_t k = 1;
		if (cp < 0x80)
			u[0] = (char)cp;
		else
			u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
		if (mgt_buf_add(out, u, k))
			return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}

/* llama.cpp's does_token_look_special */
static int looks_special(const char *s, size_t n)
{
	static const char *names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (strlen(names[i]) == n && !memcmp(s, names[i], n))
			return 1;
	if (n >= 4 && !memcmp(s, "<|", 2) && !memcmp(s + n - 2, "|>", 2))
		return 1;
	if (n >= 8 && !memcmp(s, "<\xef\xbd\x9c", 4) && !memcmp(s + n - 4, "\xef\xbd\x9c>", 4)) /* <｜...｜> */
		return 1;
	return n >= 8 && !memcmp(s, "<unused", 7) && s[n - 1] == '>';
}

/* A user-defined added token: U+2581 written as a space (llama.cpp pre-normalizes them). */
static mgt_status unspace(const char *s, size_t n, mgt_buf *out)
{
	for (size_t i = 0; i < n; i++) {
		int sp = i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3);
		if (mgt_buf_add(out, sp ? " " : s + i, 1))
			return MGT_ERR_NOMEM;
		i += sp ? 2 : 0;
	}
	return MGT_OK;
}

static const tok_added *added_of(const mgt_tok *t, int32_t id)
{
	for (size_t a = 0; a < t->n_added; a++)
		if (t->added[a].id == id)
			return &t->added[a];
	return NULL;
}

static mgt_status bpe_tokens(const mgt_tok *t, mgt_tok_vocab *v)
{
	mgt_status st = tok_vocab_alloc(v, (size_t)t->vocab_size, 0);
	mgt_buf b = {0};
	for (int32_t id = 0; id < t->vocab_size && !st; id++) {
		const char *p = t->pool.p + t->tok_off[id];
		size_t n = t->tok_len[id];
		const tok_added *a = t->kind == TOK_HF ? added_of(t, id) : NULL;
		int32_t type = 1;
		b.n = 0;
		if (n == UINT32_MAX) {
			char pad[32];
			int k = snprintf(pad, sizeof pad, "[PAD%d]", id);
			st = mgt_buf_add(&b, pad, (size_t)k) ? MGT_ERR_NOMEM : MGT_OK;
			type = 5;
		} else if (a && (a->special || looks_special(p, n))) {
			st = mgt_buf_add(&b, p, n) ? MGT_ERR_NOMEM : MGT_OK;
			type = 3;
		} else if (a) {
			st = unspace(p, n, &b);
			type = 4;
		} else
			st = bytelevel(p, n, &b);
		if (!st)
			st = tok_vocab_set(v, (size_t)id, b.p ? b.p : "", b.n, type);
	}
	free(b.p);
	return st;
}

typedef struct { int32_t rank, a, b; } merge_row;

static int merge_cmp(const void *x, const void *y)
{
	int32_t p = ((const merge_row *)x)->rank, q = ((const merge_row *)y)->rank;
	return p < q ? -1 : p > q;
}

/* The merge table in rank order as "A B" in byte-level form. */
static mgt_status bpe_merges(const mgt_tok *t, mgt_tok_vocab *v)
{
	const tok_pair_map *m = &t->pairs;
	merge_row *rows = malloc((m->n ? m->n : 1) * sizeof *rows);
	v->merges = calloc(m->n ? m->n : 1, sizeof *v->merges);
	if (!rows || !v->merges) {
		free(rows);
		return mgt_err(MGT_ERR_NOMEM, "out of memory for %zu merges", m->n);
	}
	size_t n = 0;
	for (size_t i = 0; m->mask && i <= m->mask; i++)
		if (m->keys[i] != UINT64_MAX)
			rows[n++] = (merge_row){m->rank[i], (int32_t)(m->keys[i] >> 32), (int32_t)(uint32_t)m->keys[i]};
	qsort(rows, n, sizeof *rows, merge_cmp);
	mgt_buf b = {0};
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < n && !st; i++) {
		b.n = 0;
		st = bytelevel(t->pool.p + t->tok_off[rows[i].a], t->tok_len[rows[i].a], &b);
		if (!st && mgt_buf_add(&b, " ", 1))
			st = MGT_ERR_NOMEM;
		if (!st)
			st = bytelevel(t->pool.p + t->tok_off[rows[i].b], t->tok_len[rows[i].b], &b);
		if (!st && mgt_buf_add(&b, "", 1))
			st = MGT_ERR_NOMEM;
		if (!st && !(v->merges[i] = malloc(b.n)))
			st = mgt_err(MGT_ERR_NOMEM, "out of memory for the merges");
		if (!st)
			memcpy(v->merges[i], b.p, b.n), v->nmerges = i + 1;
	}
	free(b.p);
	free(rows);
	return st;
}

/* tokenizer.ggml.pre from the one regex of the pre-tokenizer (llama.cpp names). */
static mgt_status hf_pre_name(const mgt_tok *t, const char **out)
{
	static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
				    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
	const struct { const char *pattern, *name; } known[] = {
		{tok_gpt2_pattern(), "gpt-2"}, {tok_builtin_pattern("llama3"), "llama-bpe"}, {qwen2, "qwen2"}};
	const char *pat = NULL;
	int n = 0;
	for (int k = 0; k < t->n_pre; k++)
		if (t->pre[k].pattern)
			pat = t->pre[k].pattern, n++;
	if (n != 1)
		return mgt_err(MGT_ERR_VOCAB, "tokenizer.json: a pre-tokenizer with %d split patterns has no llama.cpp "
			       "pre-tokenizer name (known: one GPT-2, Llama 3 or Qwen2 pattern)", n);
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (!strcmp(pat, known[i].pattern)) {
			*out = known[i].name;
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_VOCAB, "tokenizer.json: pre-tokenizer pattern '%.300s' has no llama.cpp pre-tokenizer "
		       "name (known: the GPT-2, Llama 3 and Qwen2 patterns)", pat);
}

mgt_status mgt_tok_vocab_get(const mgt_tok *t, mgt_tok_vocab *out)
{
	memset(out, 0, sizeof *out);
	out->bos = out->eos = out->unk = out->pad = -1;
	mgt_status st;
	const char *pre = NULL;
	switch (t->kind) {
	case TOK_SPM:
	case TOK_LLAMA2:
		st = tok_spm_vocab(t, out);
		break;
	case TOK_GPT2:
	case TOK_HF:
		st = t->kind == TOK_HF ? hf_pre_name(t, &pre) : MGT_OK;
		if (!st)
			st = bpe_tokens(t, out);
		if (!st)
			st = bpe_merges(t, out);
		out->model = "gpt2";
		out->pre = t->kind == TOK_HF ? pre : "gpt-2";
		out->eos = t->eod;
		out->bos = t->kind == TOK_HF && t->bos >= 0 ? t->bos : t->kind == TOK_HF && t->n_prefix ? t->prefix_ids[0] : t->eod;
		out->pad = t->kind == TOK_HF ? t->pad : -1;
		out->add_bos = t->kind == TOK_HF && t->n_prefix > 0 && t->prefix_ids[0] == out->bos;
		break;
	case TOK_WORDPIECE:
	case TOK_VOCAB:
		return mgt_err(MGT_ERR_USAGE, "%s: BERT WordPiece vocabularies have no GGUF export here (GGUF export "
			       "covers the GPT-style models)", t->type_name);
	case TOK_NULL:
		return mgt_err(MGT_ERR_USAGE, "NullTokenizer has no vocabulary to put in a GGUF file (ids are numbers); "
			       "export a model trained with a text tokenizer");
	default:
		return mgt_err(MGT_ERR_USAGE, "TikTokenizer vocabularies have no GGUF form here (tiktoken ranks carry no merge "
			       "list); export with the model's tokenizer.json (--tokenizer-type HuggingFaceTokenizer)");
	}
	if (st)
		mgt_tok_vocab_free(out);
	return st;
}
