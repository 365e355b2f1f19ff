/* lib/tok/pretok.c: pre-tokenizer regexes (PCRE2) and UTF-8 validation.
 *
 * The split patterns come from Rust regex (tiktoken) and Oniguruma (Hugging Face tokenizers),
 * where \s is Unicode White_Space. PCRE2's UCP \s also matches U+180E, so \s and \S are
 * rewritten to the explicit White_Space set before compiling. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

#define WS_SET "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* Rewrite \s and \S; copies everything else. Errors: MGT_ERR_VOCAB for \S inside a class. */
static mgt_status rewrite_ws(const char *pat, mgt_buf *out, const char *what)
{
	int in_class = 0;
	mgt_status st = MGT_OK;
	for (size_t i = 0; pat[i] && !st; i++) {
		char c = pat[i];
		if (c == '\\' && pat[i + 1]) {
			char d = pat[++i];
			if (d == 's')
				st = mgt_buf_add(out, in_class ? WS_SET : "[" WS_SET "]", strlen(WS_SET) + (in_class ? 0 : 2));
			else if (d == 'S' && !in_class)
				st = mgt_buf_add(out, "[^" WS_SET "]", strlen(WS_SET) + 3);
			else if (d == 'S')
				return mgt_err(MGT_ERR_VOCAB, "%s: \\S inside a character class is not supported", what);
			else
				st = mgt_buf_add(out, pat + i - 1, 2);
			continue;
		}
		if (c == '[' && !in_class) {
			in_class = 1;
			st = mgt_buf_add(out, pat + i, 1);
			if (pat[i + 1] == '^')
				st = st ? st : mgt_buf_add(out, pat + ++i, 1);
			if (pat[i + 1] == ']') /* a leading ']' is literal */
				st = st ? st : mgt_buf_add(out, pat + ++i, 1);
			continue;
		}
		if (c == ']' && in_class)
			in_class = 0;
		st = mgt_buf_add(out, pat + i, 1);
	}
	return st ? st : mgt_buf_add(out, "", 1);
}

mgt_status tok_regex_compile(pcre2_code **out, const char *pattern, const char *what)
{
	mgt_buf b = {0};
	mgt_status st = rewrite_ws(pattern, &b, what);
	if (st) {
		free(b.p);
		return st;
	}
	int err;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
	free(b.p);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof msg);
		return mgt_err(MGT_ERR_VOCAB, "%s: bad split pattern: %s", what, (const char *)msg);
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
	*out = re;
	return MGT_OK;
}

/* Length of the longest valid UTF-8 prefix (RFC 3629: no overlongs, surrogates, or > U+10FFFF). */
size_t tok_utf8_valid_prefix(const char *str, size_t n)
{
	const uint8_t *s = (const uint8_t *)str;
	size_t i = 0;
	while (i < n) {
		if (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ULL)) {
				i += 8;
				continue;
			}
		}
		uint8_t c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		uint8_t lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			len = 2;
		else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			if (c == 0xe0)
				lo = 0xa0;
			if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			if (c == 0xf0)
				lo = 0x90;
			if (c == 0xf4)
				hi = 0x8f;
		} else
			return i;
		if (i + len > n || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k < len; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		i += len;
	}
	return n;
}

size_t mgt_tok_utf8_valid(const char *s, size_t n) { return tok_utf8_valid_prefix(s, n); }

mgt_status mgt_tok_utf8_lossy(const char *s, size_t n, mgt_buf *out)
{
	while (n) {
		size_t ok = tok_utf8_valid_prefix(s, n);
		mgt_status st = mgt_buf_add(out, s, ok);
		if (!st && ok < n)
			st = mgt_buf_add(out, "\xef\xbf\xbd", 3);
		if (st)
			return st;
		ok += ok < n;
		s += ok, n -= ok;
	}
	return MGT_OK;
}
