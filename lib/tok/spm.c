/* lib/tok/spm.c: Megatron's SentencePiece tokenizers on libsentencepiece (through spm_shim.cc).
 * Facts from Megatron-LM megatron/training/tokenizer/tokenizer.py: _SentencePieceTokenizer
 * (_initalize: the special tokens and their order; tokenize: split on special strings, earliest
 * first; detokenize: " TEXT " around special ids) and _Llama2Tokenizer (tokenize = [bos] + encode,
 * eod = eos, detokenize = decode_ids); llama.cpp convert_hf_to_gguf.py _create_vocab_sentencepiece
 * for the GGUF view. */
#include "tok_impl.h"
#include "spm_shim.h"

#include <stdlib.h>
#include <string.h>

static mgt_status spm_status(int r, const char *what, const char *err)
{
	if (r == TOK_SPM_NOMEM)
		return mgt_err(MGT_ERR_NOMEM, "out of memory in SentencePiece");
	return mgt_err(what ? MGT_ERR_VOCAB : MGT_ERR_INPUT, "%s%sSentencePiece: %s", what ? what : "", what ? ": " : "",
		       err);
}

/* Add a Megatron special token unless its text is a piece already; either way it is split out
 * of the text (in this order of precedence). */
static mgt_status add_megatron_special(mgt_tok *t, const char *text, int32_t *id_out)
{
	size_t n = strlen(text);
	int32_t id = -1;
	for (int32_t i = 0; i < t->vocab_size && id < 0; i++)
		if (t->tok_len[i] != UINT32_MAX && i < t->spm_size) {
			size_t pl;
			const char *p = tok_spm_piece(t->spm, i, &pl);
			if (pl == n && !memcmp(p, text, n))
				id = i;
		}
	for (size_t a = 0; a < t->n_added && id < 0; a++)
		if (t->added[a].len == n && !memcmp(t->pool.p + t->added[a].off, text, n))
			id = t->added[a].id; /* a repeated special: the first entry stays */
	if (id < 0)
		id = (int32_t)t->vocab_size;
	*id_out = id;
	for (size_t a = 0; a < t->n_added; a++)
		if (t->added[a].id == id)
			return MGT_OK; /* dict key already present: keeps its place */
	tok_added *v = mgt_realloc(t->added, (t->n_added + 1) * sizeof *v);
	if (!v)
		return MGT_ERR_NOMEM;
	t->added = v;
	if (id == t->vocab_size) {
		uint32_t *off = mgt_realloc(t->tok_off, (size_t)(id + 1) * sizeof *off);
		if (off)
			t->tok_off = off;
		uint32_t *len = off ? mgt_realloc(t->tok_len, (size_t)(id + 1) * sizeof *len) : NULL;
		if (!len)
			return MGT_ERR_NOMEM;
		t->tok_len = len;
		t->vocab_size++;
		mgt_status st = tok_pool_add(t, id, text, n);
		if (st)
			return st;
	}
	/* the token's text (a piece keeps its piece text here: the special string to find) */
	size_t off = t->pool.n;
	if (mgt_buf_add(&t->pool, text, n))
		return MGT_ERR_NOMEM;
	t->added[t->n_added++] = (tok_added){id, (uint32_t)off, (uint32_t)n, 0, 0, 0, 1, 0};
	return MGT_OK;
}

/* Bytes of every piece for mgt_tok_token_bytes: U+2581 -> ' ', <0xNN> -> the byte. */
static mgt_status piece_bytes(mgt_tok *t, int32_t id)
{
	size_t n;
	const char *p = tok_spm_piece(t->spm, id, &n);
	int kind = tok_spm_kind(t->spm, id);
	if (kind == TOK_SPM_BYTE && n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>') {
		char c = (char)strtol(p + 3, NULL, 16);
		return tok_pool_add(t, id, &c, 1);
	}
	if (kind == TOK_SPM_CONTROL || kind == TOK_SPM_UNKNOWN)
		return tok_pool_add(t, id, p, n);
	size_t off = t->pool.n;
	for (size_t i = 0; i < n; i++) {
		int sp = i + 3 <= n && !memcmp(p + i, "\xe2\x96\x81", 3);
		if (mgt_buf_add(&t->pool, sp ? " " : p + i, 1))
			return MGT_ERR_NOMEM;
		i += sp ? 2 : 0;
	}
	t->tok_off[id] = (uint32_t)off;
	t->tok_len[id] = (uint32_t)(t->pool.n - off);
	return MGT_OK;
}

mgt_status tok_load_spm(mgt_tok *t, const mgt_tok_opts *o)
{
	int llama2 = t->kind == TOK_LLAMA2;
	if (!o->model)
		return mgt_err(MGT_ERR_USAGE, "%s needs --tokenizer-model (a SentencePiece tokenizer.model)", t->type_name);
	if (o->vocab_extra_ids < 0 || o->vocab_extra_ids > 100000 || (llama2 && o->vocab_extra_ids))
		return mgt_err(MGT_ERR_USAGE, "--vocab-extra-ids %d: %s", o->vocab_extra_ids,
			       llama2 ? "Llama2Tokenizer takes none (Megatron passes 0)" : "expected 0..100000");
	char err[512];
	int r = tok_spm_open(o->model, &t->spm, err, sizeof err);
	if (r)
		return spm_status(r, o->model, err);
	t->spm_size = tok_spm_size(t->spm);
	int32_t bos, eos, unk, pad;
	tok_spm_specials(t->spm, &bos, &eos, &unk, &pad);
	t->spm_unk = unk;
	mgt_status st = tok_alloc_ids(t, t->spm_size);
	for (int32_t id = 0; id < t->spm_size && !st; id++)
		st = piece_bytes(t, id);
	if (st)
		return st;
	if (llama2) { /* _Llama2Tokenizer._initalize: the model's ids as they are */
		if (bos < 0 || eos < 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: Llama2Tokenizer needs a model with bos and eos pieces (bos_id %d, eos_id %d)",
				       o->model, bos, eos);
		t->bos = bos, t->pad = pad, t->spm_eos = eos, t->eod = eos;
		return MGT_OK;
	}
	/* _SentencePieceTokenizer._initalize */
	static const char *first[] = {"<CLS>", "<SEP>", "<EOD>", "<MASK>"};
	int32_t id, eod = -1;
	for (int i = 0; i < 4 && !st; i++)
		if (!(st = add_megatron_special(t, first[i], &id)) && i == 2)
			eod = id;
	const struct { int32_t piece; const char *fallback; int32_t *dst; } sp[] = {
		{pad, "<PAD>", &t->pad}, {bos, "<BOS>", &t->bos}, {eos, "<EOS>", &t->spm_eos}};
	for (int i = 0; i < 3 && !st; i++) {
		size_t n = 0;
		const char *p = sp[i].piece >= 0 && sp[i].piece < t->spm_size ? tok_spm_piece(t->spm, sp[i].piece, &n) : NULL;
		char buf[256];
		if (p && n >= sizeof buf)
			return mgt_err(MGT_ERR_VOCAB, "%s: special piece %d is too long", o->model, sp[i].piece);
		if (p)
			memcpy(buf, p, n), buf[n] = 0;
		st = add_megatron_special(t, p ? buf : sp[i].fallback, sp[i].dst);
	}
	for (int i = 0; i < o->vocab_extra_ids && !st; i++) {
		char buf[32];
		snprintf(buf, sizeof buf, "<extra_id_%d>", i);
		st = add_megatron_special(t, buf, &id);
	}
	t->eod = eod;
	return st;
}

void tok_spm_free(mgt_tok *t)
{
	if (t->spm)
		tok_spm_close(t->spm);
	t->spm = NULL;
}

static mgt_status encode_piece(const mgt_tok *t, const char *s, size_t n, mgt_ids *out)
{
	int32_t *ids = NULL;
	size_t k = 0;
	char err[512];
	int r = tok_spm_encode(t->spm, s, n, &ids, &k, err, sizeof err);
	mgt_status st = r ? spm_status(r, NULL, err) : MGT_OK;
	for (size_t i = 0; i < k && !st; i++)
		st = mgt_ids_push(out, ids[i]);
	free(ids);
	return st;
}

/* memmem from pos, or SIZE_MAX */
static size_t find_from(const char *s, size_t n, size_t pos, const char *needle, size_t m)
{
	const char *p = pos <= n ? memmem(s + pos, n - pos, needle, m) : NULL;
	return p ? (size_t)(p - s) : SIZE_MAX;
}

mgt_status tok_spm_encode_text(const mgt_tok *t, const char *text, size_t len, mgt_ids *out)
{
	if (t->kind == TOK_LLAMA2) {
		mgt_status st = mgt_ids_push(out, t->bos);
		return st ? st : encode_piece(t, text, len, out);
	}
	/* next[a]: where special a next occurs at or after idx (cached: positions only move on) */
	size_t na = t->n_added, idx = 0, stack[64], *next = na <= 64 ? stack : mgt_malloc(na * sizeof *next);
	if (!next)
		return MGT_ERR_NOMEM;
	for (size_t a = 0; a < na; a++)
		next[a] = find_from(text, len, 0, t->pool.p + t->added[a].off, t->added[a].len);
	mgt_status st = MGT_OK;
	while (!st) {
		size_t best = SIZE_MAX, at = SIZE_MAX;
		for (size_t a = 0; a < na; a++) {
			if (next[a] != SIZE_MAX && next[a] < idx)
				next[a] = find_from(text, len, idx, t->pool.p + t->added[a].off, t->added[a].len);
			if (next[a] < at) /* strict: a tie goes to the earlier-added token */
				at = next[a], best = a;
		}
		if (best == SIZE_MAX)
			break;
		st = encode_piece(t, text + idx, at - idx, out);
		if (!st)
			st = mgt_ids_push(out, t->added[best].id);
		idx = at + t->added[best].len;
	}
	if (!st)
		st = encode_piece(t, text + idx, len - idx, out);
	if (next != stack)
		free(next);
	return st;
}

static mgt_status decode_run(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out)
{
	char *s = NULL, err[512];
	size_t len = 0;
	int r = tok_spm_decode(t->spm, ids, n, &s, &len, err, sizeof err);
	mgt_status st = r ? spm_status(r, NULL, err) : mgt_buf_add(out, s, len) ? MGT_ERR_NOMEM : MGT_OK;
	free(s);
	return st;
}

static const tok_added *special_of(const mgt_tok *t, int32_t id)
{
	for (size_t a = 0; a < t->n_added; a++)
		if (t->added[a].id == id)
			return &t->added[a];
	return NULL;
}

mgt_status tok_spm_decode_ids(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= t->vocab_size)
			return mgt_err(MGT_ERR_INPUT, "token id %d at position %zu is outside the vocabulary (0..%lld)", ids[i], i,
				       (long long)t->vocab_size - 1);
	if (t->kind == TOK_LLAMA2)
		return decode_run(t, ids, n, out);
	size_t last = 0;
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < n && !st; i++) {
		const tok_added *a = special_of(t, ids[i]);
		if (!a)
			continue;
		st = decode_run(t, ids + last, i - last, out);
		if (!st && (mgt_buf_add(out, " ", 1) || mgt_buf_add(out, t->pool.p + a->off, a->len) || mgt_buf_add(out, " ", 1)))
			st = MGT_ERR_NOMEM;
		last = i + 1;
	}
	return st ? st : decode_run(t, ids + last, n - last, out);
}

mgt_status tok_spm_vocab(const mgt_tok *t, mgt_tok_vocab *v)
{
	mgt_status st = tok_vocab_alloc(v, (size_t)t->vocab_size, 1);
	for (int32_t id = 0; id < t->vocab_size && !st; id++) {
		const tok_added *a = id >= t->spm_size ? special_of(t, id) : NULL;
		size_t n = 0;
		const char *p = a ? t->pool.p + a->off : tok_spm_piece(t->spm, id, &n);
		st = tok_vocab_set(v, (size_t)id, p, a ? a->len : n, a ? 3 : tok_spm_kind(t->spm, id));
		v->scores[id] = a ? -1000.0f : tok_spm_score(t->spm, id);
	}
	if (st)
		return st;
	v->model = "llama";
	v->pre = NULL;
	v->bos = t->bos, v->eos = t->eod, v->unk = t->spm_unk, v->pad = t->pad;
	v->add_bos = t->kind == TOK_LLAMA2;
	return MGT_OK;
}
