/* lib/tok/wordpiece.c: Megatron's BertWordPieceLowerCase and BertWordPieceCase as Megatron HEAD
 * builds them (megatron/core/tokenizers/utils/build_tokenizer.py: Hugging Face AutoTokenizer
 * "bert-large-(un)cased" with --vocab-file, fast by default; huggingface_tokenizer.py:
 * text_to_ids = tokenizer(text).input_ids, bos := cls, eos := sep).  The pipeline is Hugging
 * Face tokenizers' BertNormalizer (normalizers/bert.rs: clean text, CJK spacing, strip accents
 * then lower-case), BertPreTokenizer (pre_tokenizers/bert.rs), WordPiece (models/wordpiece:
 * greedy longest match, "##", max_input_chars_per_word 100) and the WordPiece decoder with
 * cleanup (decoders/wordpiece.rs).  Facts only; see tok.h for the behaviour in one place. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define WP_MAX_CHARS 100 /* max_input_chars_per_word */

/* ---- character classes (Unicode data from utf8proc) ------------------------------------- */

/* Rust char::is_whitespace (the White_Space property). */
static int wp_space(int32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

/* Dropped by clean_text: NUL, U+FFFD, and "other" characters except \t \n \r.  Hugging Face
 * tests char::is_other (unicode_categories): Cc, Cf, Co (private use) are dropped; unassigned
 * code points are kept (checked against tokenizers 0.23: U+E000 dropped, U+0378 kept). */
static int wp_dropped(int32_t c)
{
	if (c == 0 || c == 0xfffd)
		return 1;
	if (c == '\t' || c == '\n' || c == '\r')
		return 0;
	utf8proc_category_t k = utf8proc_category(c);
	return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
	       k == UTF8PROC_CATEGORY_CS;
}

/* The CJK Unified Ideograph blocks BertNormalizer pads with spaces. */
static int wp_cjk(int32_t c)
{
	return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
	       (c >= 0x2a700 && c <= 0x2b73f) || (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b820 && c <= 0x2ceaf) ||
	       (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* BertPreTokenizer's punctuation: ASCII punctuation or a P* character. */
static int wp_punct(int32_t c)
{
	if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
		return 1;
	utf8proc_category_t k = utf8proc_category(c);
	return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---- normalizer ------------------------------------------------------------------------- */

static mgt_status put_cp(mgt_buf *b, int32_t c)
{
	utf8proc_uint8_t u[4];
	utf8proc_ssize_t n = utf8proc_encode_char(c, u);
	return mgt_buf_add(b, u, (size_t)n) ? MGT_ERR_NOMEM : MGT_OK;
}

/* clean_text and handle_chinese_chars: s (valid UTF-8) into sc->norm. */
static mgt_status wp_clean(tok_wp_scratch *sc, const char *s, size_t n)
{
	sc->norm.n = 0;
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < n && !st;) {
		utf8proc_int32_t c;
		i += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
		if (wp_dropped(c))
			continue;
		if (wp_space(c))
			st = put_cp(&sc->norm, ' ');
		else if (wp_cjk(c))
			st = mgt_buf_add(&sc->norm, " ", 1) || put_cp(&sc->norm, c) || mgt_buf_add(&sc->norm, " ", 1) ? MGT_ERR_NOMEM : MGT_OK;
		else
			st = put_cp(&sc->norm, c);
	}
	return st;
}

/* strip_accents then lowercase (BertNormalizer's order): NFD of the whole text, Mn dropped, each
 * remaining character lower-cased (simple mapping: Rust's full mapping differs only for U+0130,
 * which NFD has already taken apart). sc->norm in and out. */
static mgt_status wp_lower(tok_wp_scratch *sc)
{
	utf8proc_ssize_t need = utf8proc_decompose((const utf8proc_uint8_t *)sc->norm.p, (utf8proc_ssize_t)sc->norm.n,
						   sc->cps, (utf8proc_ssize_t)sc->cps_cap, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
	if (need > (utf8proc_ssize_t)sc->cps_cap) {
		int32_t *v = mgt_realloc(sc->cps, (size_t)need * sizeof *v);
		if (!v)
			return MGT_ERR_NOMEM;
		sc->cps = v;
		sc->cps_cap = (size_t)need;
		need = utf8proc_decompose((const utf8proc_uint8_t *)sc->norm.p, (utf8proc_ssize_t)sc->norm.n, sc->cps,
					  (utf8proc_ssize_t)sc->cps_cap, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
	}
	if (need < 0)
		return mgt_err(MGT_ERR_INPUT, "NFD normalization failed: %s", utf8proc_errmsg(need));
	sc->norm.n = 0;
	for (utf8proc_ssize_t i = 0; i < need; i++)
		if (utf8proc_category(sc->cps[i]) != UTF8PROC_CATEGORY_MN && put_cp(&sc->norm, utf8proc_tolower(sc->cps[i])))
			return MGT_ERR_NOMEM;
	return MGT_OK;
}

/* ---- WordPiece -------------------------------------------------------------------------- */

/* One word of nc characters (byte offsets of each character in at[0..nc], at[nc] = its length). */
static mgt_status wp_word(const mgt_tok *t, const char *w, const uint32_t *at, size_t nc, mgt_ids *out)
{
	if (nc > WP_MAX_CHARS)
		return mgt_ids_push(out, t->unk);
	size_t mark = out->n;
	char piece[2 + 4 * WP_MAX_CHARS];
	for (size_t start = 0; start < nc;) {
		int32_t id = -1;
		size_t end = nc;
		for (; end > start; end--) {
			size_t len = at[end] - at[start];
			if (start == 0) {
				id = tok_vmap_find(t, w, len);
			} else {
				memcpy(piece, "##", 2);
				memcpy(piece + 2, w + at[start], len);
				id = tok_vmap_find(t, piece, len + 2);
			}
			if (id >= 0)
				break;
		}
		if (id < 0) { /* a position nothing matches: the whole word is [UNK] */
			out->n = mark;
			return mgt_ids_push(out, t->unk);
		}
		if (mgt_ids_push(out, id))
			return MGT_ERR_NOMEM;
		start = end;
	}
	return MGT_OK;
}

/* BertPreTokenizer over sc->norm: words end at spaces; punctuation characters are words. */
static mgt_status wp_words(const mgt_tok *t, tok_wp_scratch *sc, mgt_ids *out)
{
	const char *s = sc->norm.p;
	size_t n = sc->norm.n, start = 0, nc = 0;
	uint32_t at[WP_MAX_CHARS + 2];
	mgt_status st = MGT_OK;
	for (size_t i = 0; i <= n && !st;) {
		utf8proc_int32_t c = ' ';
		utf8proc_ssize_t l = i < n ? utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c) : 1;
		int sp = c == ' ' || wp_space(c), pu = !sp && wp_punct(c);
		if ((sp || pu) && nc) {
			at[nc < WP_MAX_CHARS + 1 ? nc : WP_MAX_CHARS + 1] = (uint32_t)(i - start);
			st = wp_word(t, s + start, at, nc, out);
			nc = 0;
		}
		if (pu && !st) {
			at[0] = 0, at[1] = (uint32_t)l;
			st = wp_word(t, s + i, at, 1, out);
		}
		i += (size_t)l;
		if (!sp && !pu) {
			if (nc == 0)
				start = i - (size_t)l;
			if (nc <= WP_MAX_CHARS)
				at[nc] = (uint32_t)(i - (size_t)l - start);
			nc++;
		}
	}
	return st;
}

mgt_status tok_wp_encode(const mgt_tok *t, tok_wp_scratch *sc, const char *s, size_t n, mgt_ids *out)
{
	mgt_status st = wp_clean(sc, s, n);
	if (!st && t->wp_lower)
		st = wp_lower(sc);
	return st ? st : wp_words(t, sc, out);
}

void tok_wp_scratch_free(tok_wp_scratch *sc)
{
	free(sc->norm.p), free(sc->piece.p), free(sc->cps);
	*sc = (tok_wp_scratch){0};
}

/* ---- decoder ---------------------------------------------------------------------------- */

/* The WordPiece decoder's cleanup, applied to one token (with its leading space) in order. */
static mgt_status wp_cleanup(mgt_buf *tok, mgt_buf *tmp)
{
	static const char *rep[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
				       {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
				       {" 've", "'ve"}, {" 're", "'re"}};
	for (size_t r = 0; r < sizeof rep / sizeof *rep; r++) {
		size_t fl = strlen(rep[r][0]), tl = strlen(rep[r][1]);
		if (tok->n < fl)
			continue;
		tmp->n = 0;
		for (size_t i = 0; i < tok->n;) {
			int hit = i + fl <= tok->n && !memcmp(tok->p + i, rep[r][0], fl);
			if (mgt_buf_add(tmp, hit ? rep[r][1] : tok->p + i, hit ? tl : 1))
				return MGT_ERR_NOMEM;
			i += hit ? fl : 1;
		}
		mgt_buf x = *tok;
		*tok = *tmp;
		*tmp = x;
	}
	return MGT_OK;
}

mgt_status tok_wp_decode(const mgt_tok *t, const int32_t *ids, size_t n, mgt_buf *out)
{
	mgt_buf tok = {0}, tmp = {0};
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < n && !st; i++) {
		size_t len;
		const char *p = mgt_tok_token_bytes(t, ids[i], &len);
		if (!p) {
			st = mgt_err(MGT_ERR_INPUT, "token id %d at position %zu is outside the vocabulary (0..%lld)", ids[i], i,
				     (long long)t->vocab_size - 1);
			break;
		}
		tok.n = 0;
		int cont = i > 0 && len >= 2 && !memcmp(p, "##", 2);
		if ((i > 0 && !cont && mgt_buf_add(&tok, " ", 1)) || mgt_buf_add(&tok, p + 2 * cont, len - 2 * (size_t)cont))
			st = MGT_ERR_NOMEM;
		if (!st)
			st = wp_cleanup(&tok, &tmp);
		if (!st && mgt_buf_add(out, tok.p, tok.n))
			st = MGT_ERR_NOMEM;
	}
	free(tok.p), free(tmp.p);
	return st;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* Lines of vocab.txt into the pool, id = line - 1; *count = the number of lines. With t == NULL
 * only counts.  strict (a tokenizer's vocabulary): an empty line, invalid UTF-8 or no line at all
 * is an error; otherwise (mgt_tok_load_wordpiece_vocab) any line is a token, the empty one too. */
static mgt_status wp_read_lines(mgt_tok *t, const char *file, const char *text, size_t len, int32_t *count,
				int strict)
{
	int32_t id = 0;
	for (const char *p = text, *end; p < text + len; p = end + 1, id++) {
		end = memchr(p, '\n', (size_t)(text + len - p));
		if (!end)
			end = text + len;
		size_t n = (size_t)(end - p);
		if (n && p[n - 1] == '\r')
			n--;
		if (strict && n == 0)
			return mgt_err(MGT_ERR_VOCAB, "%s:%d: empty line (a BERT vocab.txt has one token on each line)", file, id + 1);
		if (id == INT32_MAX / 4)
			return mgt_err(MGT_ERR_VOCAB, "%s: too many lines", file);
		if (strict && tok_utf8_valid_prefix(p, n) != n)
			return mgt_err(MGT_ERR_VOCAB, "%s:%d: invalid UTF-8", file, id + 1);
		if (t && tok_pool_add(t, id, p, n))
			return MGT_ERR_NOMEM;
	}
	*count = id;
	return id || !strict ? MGT_OK : mgt_err(MGT_ERR_VOCAB, "%s: no tokens", file);
}

/* A token on two lines: an error naming both (Hugging Face would silently map it to the later
 * line, leaving the earlier id unreachable). */
static mgt_status wp_check_duplicates(const mgt_tok *t, int32_t v, const char *file)
{
	size_t cap = 16;
	while (cap < 2 * (size_t)v)
		cap <<= 1;
	int32_t *slot = malloc(cap * sizeof *slot);
	if (!slot)
		return MGT_ERR_NOMEM;
	memset(slot, 0xff, cap * sizeof *slot);
	mgt_status st = MGT_OK;
	for (int32_t id = 0; id < v && !st; id++) {
		const char *p = t->pool.p + t->tok_off[id];
		size_t n = t->tok_len[id], i = tok_hash_bytes(p, n) & (cap - 1);
		for (; slot[i] >= 0 && !st; i = (i + 1) & (cap - 1))
			if (t->tok_len[slot[i]] == n && !memcmp(t->pool.p + t->tok_off[slot[i]], p, n))
				st = mgt_err(MGT_ERR_VOCAB, "%s:%d: token '%.*s' repeats line %d", file, id + 1,
					     (int)(n < 60 ? n : 60), p, slot[i] + 1);
		slot[i] = id;
	}
	free(slot);
	return st;
}

/* The five BERT specials: looked up by their text, added as special tokens matched in the raw
 * text (Hugging Face added tokens with normalized = false). */
static mgt_status wp_specials(mgt_tok *t, const char *file)
{
	static const char *name[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
	int32_t *dst[] = {&t->pad, &t->unk, &t->cls, &t->sep, &t->mask};
	for (int k = 0; k < 5; k++)
		if ((*dst[k] = tok_vmap_find(t, name[k], strlen(name[k]))) < 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: no %s token (a BERT vocab.txt has [PAD] [UNK] [CLS] [SEP] [MASK])", file,
				       name[k]);
	tok_added flags = {.special = 1};
	mgt_status st = MGT_OK;
	for (int k = 0; k < 5 && !st; k++)
		st = tok_add_added(t, name[k], *dst[k], &flags);
	return st;
}

/* BertWordPieceCase: <extra_id_0..99> (Megatron HEAD always adds them) at V.. unless present. */
static mgt_status wp_sentinels(mgt_tok *t, int32_t v)
{
	if (!(t->sentinels = malloc(100 * sizeof *t->sentinels)))
		return MGT_ERR_NOMEM;
	tok_added flags = {.special = 1};
	int32_t next = v;
	mgt_status st = MGT_OK;
	for (int i = 0; i < 100 && !st; i++) {
		char s[24];
		snprintf(s, sizeof s, "<extra_id_%d>", i);
		int32_t id = tok_vmap_find(t, s, strlen(s));
		if (id < 0)
			id = next++;
		t->sentinels[t->n_sentinels++] = id;
		st = tok_add_added(t, s, id, &flags);
	}
	t->vocab_size = next;
	return st;
}

mgt_status tok_load_wordpiece(mgt_tok *t, const mgt_tok_opts *o)
{
	int cased = !strcmp(t->type_name, "BertWordPieceCase");
	if (!o->vocab_file)
		return mgt_err(MGT_ERR_USAGE, "%s needs --vocab-file (a BERT vocab.txt)", t->type_name);
	char *text;
	size_t len;
	mgt_status st = mgt_file_read(o->vocab_file, &text, &len);
	if (st)
		return st;
	int32_t v = 0;
	st = wp_read_lines(NULL, o->vocab_file, text, len, &v, 1);
	if (!st)
		st = tok_alloc_ids(t, (int64_t)v + (cased ? 100 : 0));
	if (!st)
		st = wp_read_lines(t, o->vocab_file, text, len, &v, 1);
	free(text);
	t->vocab_size = v; /* the extra ids come later */
	if (!st)
		st = wp_check_duplicates(t, v, o->vocab_file);
	if (!st)
		st = tok_vmap_build(t, o->vocab_file);
	if (!st)
		st = wp_specials(t, o->vocab_file);
	if (!st && cased)
		st = wp_sentinels(t, v);
	if (st)
		return st;
	t->wp_lower = !cased;
	t->bos = t->cls;
	t->eod = t->sep;
	if (!o->hf_no_special_tokens) {
		t->prefix_ids[t->n_prefix++] = t->cls;
		t->suffix_ids[t->n_suffix++] = t->sep;
	}
	tok_added_index(t);
	return MGT_OK;
}

/* The first id whose line is s, or -1 (a vocabulary read without the duplicate check). */
static int32_t wp_first(const mgt_tok *t, int32_t v, const char *s)
{
	size_t n = strlen(s);
	for (int32_t id = 0; id < v; id++)
		if (t->tok_len[id] == n && !memcmp(t->pool.p + t->tok_off[id], s, n))
			return id;
	return -1;
}

mgt_status mgt_tok_load_wordpiece_vocab(mgt_tok **out, const char *path, int extra_ids)
{
	char *text;
	size_t len;
	int32_t v = 0;
	mgt_status st = mgt_file_read(path, &text, &len);
	if (st)
		return st;
	mgt_tok *t = calloc(1, sizeof *t);
	if (!t) {
		free(text);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	t->kind = TOK_VOCAB;
	t->type_name = "vocab.txt";
	t->eod = t->bos = t->pad = t->unk = t->cls = t->sep = t->mask = -1;
	st = wp_read_lines(NULL, path, text, len, &v, 0);
	if (!st && v > 0)
		st = tok_alloc_ids(t, (int64_t)v + extra_ids);
	if (!st && v > 0)
		st = wp_read_lines(t, path, text, len, &v, 0);
	free(text);
	if (!st && extra_ids > 0 && !(t->sentinels = malloc((size_t)extra_ids * sizeof *t->sentinels)))
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int i = 0; !st && i < extra_ids; i++)
		t->sentinels[t->n_sentinels++] = v + i;
	static const char *name[] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]"};
	int32_t *dst[] = {&t->cls, &t->sep, &t->mask, &t->pad};
	for (int k = 0; k < 4 && !st; k++)
		if ((*dst[k] = v > 0 ? wp_first(t, v, name[k]) : -1) < 0)
			st = mgt_err(MGT_ERR_VOCAB, "%s: no %s token (expected a WordPiece vocab.txt)", path, name[k]);
	if (st) {
		mgt_tok_free(t);
		return st;
	}
	t->bos = t->cls;
	t->eod = t->sep;
	*out = t;
	return MGT_OK;
}
