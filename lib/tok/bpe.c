/* lib/tok/bpe.c: vocabulary tables, the BPE merge loop, encode and decode.
 *
 * Merge rule (Hugging Face tokenizers' Word::merge_all and tiktoken's byte_pair_merge agree):
 * start from single bytes; repeatedly merge the adjacent pair with the lowest rank, the leftmost
 * among equals, until no adjacent pair has a rank. A binary heap of candidate pairs with lazy
 * invalidation keeps this O(n log n) in the piece length. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- hashing and tables ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t tok_hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
	for (; n >= 8; p += 8, n -= 8) {
		memcpy(&w, p, 8);
		h = mix64(h ^ w);
	}
	w = 0;
	memcpy(&w, p, n);
	return mix64(h ^ w ^ ((uint64_t)n << 56));
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

mgt_status tok_alloc_ids(mgt_tok *t, int64_t vocab_size)
{
	if (vocab_size <= 0 || vocab_size > INT32_MAX / 2)
		return mgt_err(MGT_ERR_VOCAB, "vocabulary size %lld out of range", (long long)vocab_size);
	t->vocab_size = vocab_size;
	t->tok_off = calloc((size_t)vocab_size, sizeof *t->tok_off);
	t->tok_len = malloc((size_t)vocab_size * sizeof *t->tok_len);
	if (!t->tok_off || !t->tok_len)
		return mgt_err(MGT_ERR_NOMEM, "out of memory for %lld tokens", (long long)vocab_size);
	memset(t->tok_len, 0xff, (size_t)vocab_size * sizeof *t->tok_len);
	return MGT_OK;
}

mgt_status tok_pool_add(mgt_tok *t, int32_t id, const char *p, size_t n)
{
	size_t off = t->pool.n;
	if (mgt_buf_add(&t->pool, p, n))
		return MGT_ERR_NOMEM;
	t->tok_off[id] = (uint32_t)off;
	t->tok_len[id] = (uint32_t)n;
	return MGT_OK;
}

/* Insert every id that has bytes and is not an added token into the bytes -> id map.
 * A duplicate token string is an inconsistent vocabulary. */
mgt_status tok_vmap_build(mgt_tok *t, const char *file)
{
	size_t cap = pow2_at_least((size_t)t->vocab_size * 2);
	t->vmap.slots = malloc(cap * sizeof(int32_t));
	if (!t->vmap.slots)
		return mgt_err(MGT_ERR_NOMEM, "out of memory for the vocabulary map");
	memset(t->vmap.slots, 0xff, cap * sizeof(int32_t));
	t->vmap.mask = cap - 1;
	for (int32_t id = 0; id < t->vocab_size; id++) {
		if (t->tok_len[id] == UINT32_MAX)
			continue;
		int skip = 0;
		for (size_t a = 0; a < t->n_added && !skip; a++)
			skip = t->added[a].id == id;
		if (skip)
			continue;
		const char *p = t->pool.p + t->tok_off[id];
		size_t n = t->tok_len[id];
		int32_t old = tok_vmap_find(t, p, n);
		if (old >= 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: tokens %d and %d have the same bytes", file, old, id);
		size_t i = tok_hash_bytes(p, n) & t->vmap.mask;
		while (t->vmap.slots[i] >= 0)
			i = (i + 1) & t->vmap.mask;
		t->vmap.slots[i] = id;
	}
	return MGT_OK;
}

int32_t tok_vmap_find(const mgt_tok *t, const char *p, size_t n)
{
	size_t i = tok_hash_bytes(p, n) & t->vmap.mask;
	for (int32_t id; (id = t->vmap.slots[i]) >= 0; i = (i + 1) & t->vmap.mask)
		if (t->tok_len[id] == n && memcmp(t->pool.p + t->tok_off[id], p, n) == 0)
			return id;
	return -1;
}

static mgt_status pair_grow(tok_pair_map *m)
{
	tok_pair_map g = {0};
	size_t cap = m->mask ? (m->mask + 1) * 2 : 1 << 16;
	g.keys = malloc(cap * sizeof *g.keys);
	g.rank = malloc(cap * sizeof *g.rank);
	g.merged = malloc(cap * sizeof *g.merged);
	if (!g.keys || !g.rank || !g.merged) {
		free(g.keys), free(g.rank), free(g.merged);
		return mgt_err(MGT_ERR_NOMEM, "out of memory for the merge table");
	}
	memset(g.keys, 0xff, cap * sizeof *g.keys);
	g.mask = cap - 1;
	for (size_t i = 0; m->mask && i <= m->mask; i++)
		if (m->keys[i] != UINT64_MAX)
			tok_pair_put(&g, (int32_t)(m->keys[i] >> 32), (int32_t)(uint32_t)m->keys[i], m->rank[i], m->merged[i]);
	free(m->keys), free(m->rank), free(m->merged);
	*m = g;
	return MGT_OK;
}

/* Insert (a, b) unless present (the first, lowest-ranked definition wins). */
mgt_status tok_pair_put(tok_pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
	if ((m->n + 1) * 2 > m->mask + 1 || !m->mask) {
		mgt_status st = pair_grow(m);
		if (st)
			return st;
	}
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & m->mask;
	while (m->keys[i] != UINT64_MAX) {
		if (m->keys[i] == key)
			return MGT_OK;
		i = (i + 1) & m->mask;
	}
	m->keys[i] = key;
	m->rank[i] = rank;
	m->merged[i] = merged;
	m->n++;
	return MGT_OK;
}

static inline int pair_get(const tok_pair_map *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & m->mask;
	for (; m->keys[i] != UINT64_MAX; i = (i + 1) & m->mask)
		if (m->keys[i] == key) {
			*rank = m->rank[i];
			*merged = m->merged[i];
			return 1;
		}
	return 0;
}

/* tiktoken ranks: every split of a token into two tokens is a pair whose merge rank is the
 * token's rank (= its id): exactly tiktoken's "lowest rank of the concatenation" rule. */
mgt_status tok_pairs_from_ranks(mgt_tok *t)
{
	for (int32_t id = 0; id < t->vocab_size; id++) {
		uint32_t n = t->tok_len[id];
		if (n == UINT32_MAX || n < 2)
			continue;
		const char *p = t->pool.p + t->tok_off[id];
		for (uint32_t k = 1; k < n; k++) {
			int32_t a = tok_vmap_find(t, p, k), b = a >= 0 ? tok_vmap_find(t, p + k, n - k) : -1;
			if (b >= 0) {
				mgt_status st = tok_pair_put(&t->pairs, a, b, id, id);
				if (st)
					return st;
			}
		}
	}
	return MGT_OK;
}

/* Every byte must be a token (byte-level BPE); fills byte_id. */
mgt_status tok_finish_bytes(mgt_tok *t, const char *file)
{
	for (int b = 0; b < 256; b++) {
		char c = (char)b;
		t->byte_id[b] = tok_vmap_find(t, &c, 1);
		if (t->byte_id[b] < 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: byte 0x%02x has no token (not a byte-level BPE vocabulary)", file, b);
	}
	tok_added_index(t);
	return MGT_OK;
}

void tok_added_index(mgt_tok *t)
{
	memset(t->added_first, 0, sizeof t->added_first);
	t->added_first_only = t->n_added ? (uint8_t)t->pool.p[t->added[0].off] : -1;
	for (size_t a = 0; a < t->n_added; a++) {
		uint8_t c = (uint8_t)t->pool.p[t->added[a].off];
		t->added_first[c] = 1;
		if (c != t->added_first_only)
			t->added_first_only = -1;
	}
}

/* ---- per-thread encoder ----------------------------------------------------------------- */

typedef struct { int32_t rank; uint32_t pos, right; int32_t lid, rid; } heap_ent;

typedef struct { uint64_t hash; uint32_t key_off, key_len, ids_off, ids_n; } cache_ent;
#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_KEY 64

struct mgt_tok_enc {
	const mgt_tok *t;
	pcre2_match_data *md[4];
	mgt_buf prefixed[4];  /* per pre-tokenizer step: the piece with ByteLevel's prefix space */
	int32_t *id;
	uint32_t *next, *prev;
	heap_ent *heap;
	size_t cap, heap_cap;
	cache_ent *cache;
	size_t cache_used;
	mgt_buf cache_keys;
	mgt_ids cache_ids;
	tok_wp_scratch wp;
};

mgt_status mgt_ids_push(mgt_ids *a, int32_t id)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		int32_t *v = mgt_realloc(a->v, cap * sizeof *v);
		if (!v)
			return MGT_ERR_NOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = id;
	return MGT_OK;
}

mgt_status mgt_tok_enc_new(mgt_tok_enc **out, const mgt_tok *t)
{
	mgt_tok_enc *e = calloc(1, sizeof *e);
	if (!e)
		return mgt_err(MGT_ERR_NOMEM, "out of memory for an encoder");
	e->t = t;
	e->cache = calloc(CACHE_SLOTS, sizeof *e->cache);
	int bad = !e->cache;
	for (int k = 0; k < t->n_pre && !bad; k++)
		if (t->pre[k].re && !(e->md[k] = pcre2_match_data_create_from_pattern(t->pre[k].re, NULL)))
			bad = 1;
	if (bad) {
		mgt_tok_enc_free(e);
		return mgt_err(MGT_ERR_NOMEM, "out of memory for an encoder");
	}
	*out = e;
	return MGT_OK;
}

void mgt_tok_enc_free(mgt_tok_enc *e)
{
	if (!e)
		return;
	for (int k = 0; k < 4; k++) {
		if (e->md[k])
			pcre2_match_data_free(e->md[k]);
		free(e->prefixed[k].p);
	}
	free(e->id), free(e->next), free(e->prev), free(e->heap);
	free(e->cache), free(e->cache_keys.p), free(e->cache_ids.v);
	tok_wp_scratch_free(&e->wp);
	free(e);
}

static mgt_status enc_reserve(mgt_tok_enc *e, size_t n)
{
	if (n <= e->cap)
		return MGT_OK;
	size_t cap = pow2_at_least(n);
	int32_t *id = realloc(e->id, cap * sizeof *id);
	if (id)
		e->id = id;
	uint32_t *nx = realloc(e->next, cap * sizeof *nx);
	if (nx)
		e->next = nx;
	uint32_t *pv = realloc(e->prev, cap * sizeof *pv);
	if (pv)
		e->prev = pv;
	/* the heap holds at most n - 1 + (merges) <= 2n - 2 candidates: each pop of a valid pair
	 * pushes at most two */
	heap_ent *h = realloc(e->heap, 2 * cap * sizeof *h);
	if (h)
		e->heap = h;
	if (!id || !nx || !pv || !h)
		return mgt_err(MGT_ERR_NOMEM, "out of memory for a %zu-byte word", n);
	e->cap = cap;
	e->heap_cap = 2 * cap;
	return MGT_OK;
}

static inline int heap_less(const heap_ent *a, const heap_ent *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent x)
{
	size_t i = (*n)++;
	while (i && heap_less(&x, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = x;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
	heap_ent top = h[0], x = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
			c++;
		if (!heap_less(&h[c], &x))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = x;
	return top;
}

static void candidate(mgt_tok_enc *e, size_t *hn, uint32_t pos, uint32_t right)
{
	int32_t rank, merged;
	if (pair_get(&e->t->pairs, e->id[pos], e->id[right], &rank, &merged) && *hn < e->heap_cap)
		heap_push(e->heap, hn, (heap_ent){rank, pos, right, e->id[pos], e->id[right]});
}

/* BPE over n >= 2 bytes; appends the ids to out. */
static mgt_status bpe_merge(mgt_tok_enc *e, const uint8_t *s, uint32_t n, mgt_ids *out)
{
	mgt_status st = enc_reserve(e, n);
	if (st)
		return st;
	const mgt_tok *t = e->t;
	for (uint32_t i = 0; i < n; i++) {
		e->id[i] = t->byte_id[s[i]];
		e->next[i] = i + 1;
		e->prev[i] = i - 1;
	}
	size_t hn = 0;
	for (uint32_t i = 0; i + 1 < n; i++)
		candidate(e, &hn, i, i + 1);
	while (hn) {
		heap_ent c = heap_pop(e->heap, &hn);
		if (e->id[c.pos] != c.lid || e->next[c.pos] != c.right || c.right >= n || e->id[c.right] != c.rid)
			continue;
		int32_t rank, merged = -1;
		pair_get(&t->pairs, c.lid, c.rid, &rank, &merged);
		e->id[c.pos] = merged;
		e->id[c.right] = -1;
		uint32_t nn = e->next[c.right];
		e->next[c.pos] = nn;
		if (nn < n)
			e->prev[nn] = c.pos;
		if (c.pos > 0)
			candidate(e, &hn, e->prev[c.pos], c.pos);
		if (nn < n)
			candidate(e, &hn, c.pos, nn);
	}
	for (uint32_t i = 0; i < n; i = e->next[i])
		if ((st = mgt_ids_push(out, e->id[i])))
			return st;
	return MGT_OK;
}

static cache_ent *cache_find(mgt_tok_enc *e, const char *s, size_t n, uint64_t h)
{
	size_t i = h & (CACHE_SLOTS - 1);
	for (cache_ent *c; (c = &e->cache[i])->key_len; i = (i + 1) & (CACHE_SLOTS - 1))
		if (c->hash == h && c->key_len == n && memcmp(e->cache_keys.p + c->key_off, s, n) == 0)
			return c;
	return &e->cache[i];
}

static void cache_clear(mgt_tok_enc *e)
{
	memset(e->cache, 0, CACHE_SLOTS * sizeof *e->cache);
	e->cache_used = 0;
	e->cache_keys.n = 0;
	e->cache_ids.n = 0;
}

static mgt_status cache_store(mgt_tok_enc *e, cache_ent *c, const char *s, size_t n, uint64_t h,
			      const int32_t *ids, size_t k)
{
	if (mgt_buf_add(&e->cache_keys, s, n))
		return MGT_ERR_NOMEM;
	*c = (cache_ent){h, (uint32_t)(e->cache_keys.n - n), (uint32_t)n, (uint32_t)e->cache_ids.n, (uint32_t)k};
	for (size_t i = 0; i < k; i++)
		if (mgt_ids_push(&e->cache_ids, ids[i]))
			return MGT_ERR_NOMEM;
	e->cache_used++;
	return MGT_OK;
}

/* A piece's ids when the merge loop can be skipped: ignore_merges and the piece is a token. */
static int whole_token(const mgt_tok *t, const char *s, size_t n, int32_t *id)
{
	return t->ignore_merges && (*id = tok_vmap_find(t, s, n)) >= 0;
}

/* Encode one pre-tokenized piece: the word cache first, then a whole-token hit, then BPE. */
static mgt_status bpe_piece(mgt_tok_enc *e, const char *s, size_t n, mgt_ids *out)
{
	const mgt_tok *t = e->t;
	int32_t id;
	if (n == 1)
		return mgt_ids_push(out, t->byte_id[(uint8_t)s[0]]);
	if (n > UINT32_MAX / 2)
		return mgt_err(MGT_ERR_INPUT, "a %zu-byte word is too long", n);
	if (n > CACHE_MAX_KEY)
		return whole_token(t, s, n, &id) ? mgt_ids_push(out, id) : bpe_merge(e, (const uint8_t *)s, (uint32_t)n, out);
	uint64_t h = tok_hash_bytes(s, n);
	cache_ent *c = cache_find(e, s, n, h);
	if (c->key_len) {
		for (uint32_t i = 0; i < c->ids_n; i++)
			if (mgt_ids_push(out, e->cache_ids.v[c->ids_off + i]))
				return MGT_ERR_NOMEM;
		return MGT_OK;
	}
	size_t start = out->n;
	mgt_status st = whole_token(t, s, n, &id) ? mgt_ids_push(out, id) : bpe_merge(e, (const uint8_t *)s, (uint32_t)n, out);
	if (st)
		return st;
	if (e->cache_used * 2 >= CACHE_SLOTS) {
		cache_clear(e);
		c = cache_find(e, s, n, h);
	}
	return cache_store(e, c, s, n, h, out->v + start, out->n - start);
}

/* ---- pre-tokenization pipeline --------------------------------------------------------- */

static mgt_status pre_apply(mgt_tok_enc *e, int k, const char *s, size_t n, mgt_ids *out);

/* Step k's piece with a space in front, in step k's own buffer: deeper steps use theirs, and
 * step k takes its next piece only after this one is fully encoded. */
static mgt_status pre_with_prefix_space(mgt_tok_enc *e, int k, const char *s, size_t n, mgt_ids *out)
{
	mgt_buf *b = &e->prefixed[k];
	b->n = 0;
	if (mgt_buf_add(b, " ", 1) || mgt_buf_add(b, s, n))
		return MGT_ERR_NOMEM;
	return pre_apply(e, -(k + 1), b->p, b->n, out); /* negative: prefix already added */
}

static size_t utf8_char_len(const char *s, size_t n)
{
	uint8_t c = (uint8_t)s[0];
	size_t l = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	return l < n ? l : n;
}

/* Split [s, s+n) with step k's regex and run each piece through step k+1. */
static mgt_status pre_split(mgt_tok_enc *e, int k, const char *s, size_t n, mgt_ids *out)
{
	const tok_pre_step *p = &e->t->pre[k];
	pcre2_match_data *md = e->md[k];
	size_t pos = 0, from = 0;
	mgt_status st;
	while (from < n) {
		int rc = pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_JIT_BADOPTION)
			rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return mgt_err(MGT_ERR_INPUT, "pre-tokenizer regex failed (pcre2 error %d)", rc);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (ov[1] == ov[0]) { /* empty match: move on by one character */
			from = ov[0] + utf8_char_len(s + ov[0], n - ov[0]);
			continue;
		}
		if (ov[0] > pos && (st = pre_apply(e, k + 1, s + pos, ov[0] - pos, out)))
			return st;
		if (p->behavior == PRE_SPLIT_ISOLATED && (st = pre_apply(e, k + 1, s + ov[0], ov[1] - ov[0], out)))
			return st;
		pos = from = ov[1];
	}
	return pos < n ? pre_apply(e, k + 1, s + pos, n - pos, out) : MGT_OK;
}

/* Apply pre-tokenizer steps k.. to a piece; past the last step, BPE it. A negative k means
 * step -k-1 with its prefix space already added. */
static mgt_status pre_apply(mgt_tok_enc *e, int k, const char *s, size_t n, mgt_ids *out)
{
	int prefixed = k < 0;
	if (prefixed)
		k = -k - 1;
	if (n == 0)
		return MGT_OK;
	if (k >= e->t->n_pre)
		return bpe_piece(e, s, n, out);
	const tok_pre_step *p = &e->t->pre[k];
	if (p->add_prefix_space && !prefixed && s[0] != ' ')
		return pre_with_prefix_space(e, k, s, n, out);
	return p->re ? pre_split(e, k, s, n, out) : pre_apply(e, k + 1, s, n, out);
}

static mgt_status split_added(mgt_tok_enc *e, const char *text, size_t len, mgt_ids *out, int normalized);

/* NFC-normalize a segment of raw text, then split out the added tokens that match normalized
 * text (Hugging Face's AddedVocabulary: normalized=false tokens match the raw text first). */
static mgt_status encode_normalized(mgt_tok_enc *e, const char *s, size_t n, mgt_ids *out)
{
	utf8proc_uint8_t *norm = NULL;
	utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
					  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
	if (m < 0)
		return mgt_err(MGT_ERR_INPUT, "NFC normalization failed: %s", utf8proc_errmsg(m));
	mgt_status st = split_added(e, (const char *)norm, (size_t)m, out, 1);
	free(norm);
	return st;
}

/* A segment free of the added tokens of this phase. */
static mgt_status encode_segment(mgt_tok_enc *e, const char *s, size_t n, mgt_ids *out, int normalized)
{
	if (n == 0)
		return MGT_OK;
	if (e->t->kind == TOK_WORDPIECE)
		return tok_wp_encode(e->t, &e->wp, s, n, out);
	return e->t->nfc && !normalized ? encode_normalized(e, s, n, out) : pre_apply(e, 0, s, n, out);
}

/* ---- added tokens ---------------------------------------------------------------------- */

static int is_white_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

/* Length of the whitespace run starting at s (forward) or ending at s+n (backward). */
static size_t ws_forward(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		utf8proc_int32_t c;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
		if (l <= 0 || !is_white_space((uint32_t)c))
			break;
		i += (size_t)l;
	}
	return i;
}

static size_t ws_backward(const char *s, size_t n)
{
	size_t i = n;
	while (i > 0) {
		size_t j = i - 1;
		while (j > 0 && ((uint8_t)s[j] & 0xc0) == 0x80)
			j--;
		if (ws_forward(s + j, i - j) != i - j)
			break;
		i = j;
	}
	return n - i;
}

static int is_word_char(const char *s, size_t n, int before)
{
	size_t j = 0;
	if (before) { /* the character ending at s + n */
		j = n - 1;
		while (j > 0 && ((uint8_t)s[j] & 0xc0) == 0x80)
			j--;
	}
	utf8proc_int32_t c;
	if (utf8proc_iterate((const utf8proc_uint8_t *)s + j, (utf8proc_ssize_t)(n - j), &c) <= 0)
		return 0;
	utf8proc_category_t cat = utf8proc_category(c);
	return c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
	       (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

/* Longest added token of this phase matching at text[pos]; -1 if none. With a normalizer,
 * phase 0 (raw text) matches normalized=false tokens and phase 1 the others. */
static long added_match(const mgt_tok *t, const char *text, size_t len, size_t pos, int normalized)
{
	long best = -1;
	size_t best_len = 0;
	for (size_t a = 0; a < t->n_added; a++) {
		const tok_added *x = &t->added[a];
		if ((t->nfc && x->normalized != normalized) || x->len > len - pos || x->len <= best_len ||
		    memcmp(t->pool.p + x->off, text + pos, x->len))
			continue;
		if (x->single_word && ((pos > 0 && is_word_char(text, pos, 1)) ||
				       (pos + x->len < len && is_word_char(text + pos + x->len, len - pos - x->len, 0))))
			continue;
		best = (long)a;
		best_len = x->len;
	}
	return best;
}

static mgt_status split_added(mgt_tok_enc *e, const char *text, size_t len, mgt_ids *out, int normalized)
{
	const mgt_tok *t = e->t;
	size_t seg = 0;
	mgt_status st;
	for (size_t pos = 0; pos < len && t->n_added; pos++) {
		if (t->added_first_only >= 0) { /* all added tokens start with one byte (often '<') */
			const char *q = memchr(text + pos, t->added_first_only, len - pos);
			if (!q)
				break;
			pos = (size_t)(q - text);
		} else if (!t->added_first[(uint8_t)text[pos]])
			continue;
		long a = added_match(t, text, len, pos, normalized);
		if (a < 0)
			continue;
		const tok_added *x = &t->added[a];
		size_t end = pos;
		if (x->lstrip)
			end -= ws_backward(text + seg, pos - seg);
		if ((st = encode_segment(e, text + seg, end - seg, out, normalized)) || (st = mgt_ids_push(out, x->id)))
			return st;
		seg = pos + x->len;
		if (x->rstrip)
			seg += ws_forward(text + seg, len - seg);
		pos = seg - 1;
	}
	return encode_segment(e, text + seg, len - seg, out, normalized);
}

/* ---- public encode/decode -------------------------------------------------------------- */

static mgt_status null_encode(const mgt_tok *t, const char *s, size_t n, mgt_ids *out)
{
	if (n == 0)
		return MGT_OK;
	for (size_t i = 0;;) {
		size_t j = i;
		while (j < n && s[j] != ' ')
			j++;
		char field[32];
		size_t fl = j - i;
		char *end = NULL;
		long long v = -1;
		if (fl > 0 && fl < sizeof field) {
			memcpy(field, s + i, fl);
			field[fl] = 0;
			v = strtoll(field, &end, 10);
			while (end && (*end == '\t' || *end == '\n' || *end == '\r'))
				end++;
		}
		if (!end || *end || end == field || v < 0 || v >= t->vocab_size)
			return mgt_err(MGT_ERR_INPUT, "NullTokenizer: field '%.*s' at byte %zu is not an id in [0, %lld)",
				       (int)(fl < 40 ? fl : 40), s + i, i, (long long)t->vocab_size);
		mgt_status st = mgt_ids_push(out, (int32_t)v);
		if (st)
			return st;
		if (j == n)
			return MGT_OK;
		i = j + 1;
	}
}

static mgt_status push_all(mgt_ids *out, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (mgt_ids_push(out, ids[i]))
			return MGT_ERR_NOMEM;
	return MGT_OK;
}

mgt_status mgt_tok_encode(mgt_tok_enc *e, const char *text, size_t len, mgt_ids *out)
{
	const mgt_tok *t = e->t;
	size_t ok = tok_utf8_valid_prefix(text, len);
	if (t->kind == TOK_VOCAB)
		return mgt_err(MGT_ERR_USAGE, "%s: a vocabulary without an encoder", t->type_name);
	if (ok != len)
		return mgt_err(MGT_ERR_INPUT, "invalid UTF-8 at byte %zu", ok);
	if (t->kind == TOK_NULL)
		return null_encode(t, text, len, out);
	if (t->kind == TOK_SPM || t->kind == TOK_LLAMA2)
		return tok_spm_encode_text(t, text, len, out);
	mgt_status st = push_all(out, t->prefix_ids, t->n_prefix);
	if (!st)
		st = split_added(e, text, len, out, 0);
	if (!st)
		st = push_all(out, t->suffix_ids, t->n_suffix);
	return st;
}

const char *mgt_tok_token_bytes(const mgt_tok *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->vocab_size || !t->tok_len || t->tok_len[id] == UINT32_MAX) /* NullTokenizer: no bytes */
		return NULL;
	*len = t->tok_len[id];
	return t->pool.p + t->tok_off[id];
}

mgt_status mgt_tok_decode(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out)
{
	if (t->kind == TOK_SPM || t->kind == TOK_LLAMA2)
		return tok_spm_decode_ids(t, ids, n, out);
	if (t->kind == TOK_WORDPIECE)
		return tok_wp_decode(t, ids, n, out);
	for (size_t i = 0; i < n; i++) {
		if (t->kind == TOK_NULL) {
			char num[16];
			int l = snprintf(num, sizeof num, "%s%d", i ? " " : "", ids[i]);
			if (mgt_buf_add(out, num, (size_t)l))
				return MGT_ERR_NOMEM;
			continue;
		}
		size_t len;
		const char *p = mgt_tok_token_bytes(t, ids[i], &len);
		if (!p)
			return mgt_err(MGT_ERR_INPUT, "token id %d at position %zu is outside the vocabulary (0..%lld)",
				       ids[i], i, (long long)t->vocab_size - 1);
		if (mgt_buf_add(out, p, len))
			return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}
