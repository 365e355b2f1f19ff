/* lib/tok/sent.c: sentence splitting for mgt-preprocess --split-sentences, on ICU's sentence
 * break iterator (Unicode UAX #29 with CLDR's per-locale abbreviation suppressions, the
 * "ss=standard" locale keyword).  Megatron's tools/preprocess_data.py uses NLTK punkt
 * (nltk.load("tokenizers/punkt/LANG.pickle"), CustomLanguageVars for --keep-newlines, text cut
 * in pieces of 1,000,000 characters); punkt is a learned model that Debian does not ship, so
 * this is a stand-in with the same interface, not the same splits (mgt-preprocess(1) says where
 * they differ).  Facts from the ICU 72 C API (ubrk.h, utext.h) and punkt's punkt.py. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/ubrk.h>
#include <unicode/utext.h>
#include <utf8proc.h>

#define SENT_CHUNK_CHARS 1000000 /* Encoder.split's max_len */

struct mgt_tok_sent {
	UBreakIterator *bi;
	int keep_newlines;
	mgt_buf text; /* the chunk with line breaks as same-length spaces */
};

/* NLTK punkt's pickles (nltk_data tokenizers/punkt) and their ISO 639-1 codes. */
static const struct { const char *lang, *locale; } punkt_langs[] = {
	{"czech", "cs"}, {"danish", "da"}, {"dutch", "nl"}, {"english", "en"}, {"estonian", "et"},
	{"finnish", "fi"}, {"french", "fr"}, {"german", "de"}, {"greek", "el"}, {"italian", "it"},
	{"malayalam", "ml"}, {"norwegian", "nb"}, {"polish", "pl"}, {"portuguese", "pt"}, {"russian", "ru"},
	{"slovene", "sl"}, {"spanish", "es"}, {"swedish", "sv"}, {"turkish", "tr"},
};

static int looks_like_locale(const char *s)
{
	size_t n = 0;
	while (s[n] >= 'a' && s[n] <= 'z')
		n++;
	if (n < 2 || n > 3)
		return 0;
	if (!s[n])
		return 1;
	return s[n] == '_' && strlen(s + n + 1) == 2 && s[n + 1] >= 'A' && s[n + 1] <= 'Z' && s[n + 2] >= 'A' &&
	       s[n + 2] <= 'Z';
}

const char *mgt_tok_sent_locale(const char *lang)
{
	for (size_t i = 0; i < sizeof punkt_langs / sizeof *punkt_langs; i++)
		if (!strcmp(punkt_langs[i].lang, lang))
			return punkt_langs[i].locale;
	return looks_like_locale(lang) ? lang : NULL;
}

mgt_status mgt_tok_sent_new(mgt_tok_sent **out, const char *lang, int keep_newlines)
{
	const char *loc = mgt_tok_sent_locale(lang);
	if (!loc)
		return mgt_err(MGT_ERR_USAGE, "--lang %s: unknown (expected an NLTK punkt language such as english, german, "
			       "french, spanish, or a locale code such as en or pt_BR)", lang);
	char full[64];
	snprintf(full, sizeof full, "%s@ss=standard", loc);
	mgt_tok_sent *s = calloc(1, sizeof *s);
	if (!s)
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	UErrorCode err = U_ZERO_ERROR;
	s->bi = ubrk_open(UBRK_SENTENCE, full, NULL, 0, &err);
	if (U_FAILURE(err)) {
		free(s);
		return mgt_err(MGT_ERR_IO, "ICU sentence break iterator for %s: %s", full, u_errorName(err));
	}
	s->keep_newlines = keep_newlines;
	*out = s;
	return MGT_OK;
}

void mgt_tok_sent_free(mgt_tok_sent *s)
{
	if (!s)
		return;
	ubrk_close(s->bi);
	free(s->text.p);
	free(s);
}

/* Copy of s with CR, LF, VT, FF, NEL, U+2028 and U+2029 (ICU's paragraph separators) replaced by
 * spaces of the same UTF-8 length (' ', U+00A0, U+3000), so offsets stay byte offsets of s. */
static mgt_status flatten_lines(mgt_buf *b, const char *s, size_t n)
{
	b->n = 0;
	if (mgt_buf_add(b, s, n))
		return MGT_ERR_NOMEM;
	unsigned char *p = (unsigned char *)b->p;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n' || p[i] == '\r' || p[i] == '\v' || p[i] == '\f')
			p[i] = ' ';
		else if (p[i] == 0xc2 && i + 1 < n && p[i + 1] == 0x85)
			p[i + 1] = 0xa0;
		else if (p[i] == 0xe2 && i + 2 < n && p[i + 1] == 0x80 && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9))
			memcpy(p + i, "\xe3\x80\x80", 3);
	}
	return MGT_OK;
}

static size_t ws_len(const char *s, size_t n, int back)
{
	size_t k = 0;
	while (k < n) {
		size_t i = back ? n - 1 - k : k;
		size_t l = 1;
		if (back)
			while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80 && l < 4)
				i--, l++;
		utf8proc_int32_t c;
		utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
		if (m <= 0 || !(c == ' ' || (c >= 9 && c <= 13) || utf8proc_category(c) == UTF8PROC_CATEGORY_ZS ||
				 c == 0x85 || c == 0x2028 || c == 0x2029))
			break;
		k += (size_t)m;
	}
	return k;
}

static mgt_status push_span(mgt_spans *out, size_t off, size_t len)
{
	if (out->n == out->cap) {
		size_t cap = out->cap ? 2 * out->cap : 64;
		mgt_span *v = mgt_realloc(out->v, cap * sizeof *v);
		if (!v)
			return MGT_ERR_NOMEM;
		out->v = v;
		out->cap = cap;
	}
	out->v[out->n++] = (mgt_span){off, len};
	return MGT_OK;
}

/* One sentence [a, b) of the chunk at base: trimmed (or, keeping newlines, only the chunk's last
 * one right-trimmed, as punkt's final slice is), dropped when only whitespace. */
static mgt_status add_sentence(const mgt_tok_sent *s, const char *text, size_t base, size_t a, size_t b, int last,
			       mgt_spans *out)
{
	const char *p = text + base + a;
	size_t n = b - a, lead = ws_len(p, n, 0);
	if (lead == n)
		return MGT_OK;
	size_t trail = !s->keep_newlines || last ? ws_len(p, n, 1) : 0;
	if (!s->keep_newlines)
		p += lead, n -= lead;
	return push_span(out, (size_t)(p - text), n - trail);
}

static mgt_status split_chunk(mgt_tok_sent *s, const char *text, size_t base, size_t n, mgt_spans *out)
{
	mgt_status st = flatten_lines(&s->text, text + base, n);
	if (st)
		return st;
	UErrorCode err = U_ZERO_ERROR;
	UText *ut = utext_openUTF8(NULL, s->text.p, (int64_t)n, &err);
	if (!U_FAILURE(err))
		ubrk_setUText(s->bi, ut, &err);
	if (U_FAILURE(err)) {
		utext_close(ut);
		return mgt_err(MGT_ERR_INPUT, "ICU sentence splitting failed: %s", u_errorName(err));
	}
	int32_t a = ubrk_first(s->bi);
	for (int32_t b = ubrk_next(s->bi); b != UBRK_DONE && !st; a = b, b = ubrk_next(s->bi))
		st = add_sentence(s, text, base, (size_t)a, (size_t)b, (size_t)b == n, out);
	utext_close(ut);
	return st;
}

mgt_status mgt_tok_sent_split(mgt_tok_sent *s, const char *text, size_t len, mgt_spans *out)
{
	mgt_status st = MGT_OK;
	for (size_t at = 0; at < len && !st;) {
		size_t end = at, chars = 0;
		while (end < len && chars < SENT_CHUNK_CHARS) {
			end++, chars++;
			while (end < len && ((unsigned char)text[end] & 0xc0) == 0x80)
				end++;
		}
		st = split_chunk(s, text, at, end - at, out);
		at = end;
	}
	return st;
}
