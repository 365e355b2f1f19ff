/* lib/tok/load.c: the tokenizer loaders (GPT-2 files, tiktoken ranks, Megatron TikTokenizer JSON,
 * NullTokenizer) and the shared byte-level helpers. Hugging Face tokenizer.json is in hf.c.
 * Facts from: OpenAI GPT-2 encoder.py (bytes_to_unicode), tiktoken load.py (rank files),
 * megatron/core/tokenizers (TikTokenizer, NullTokenizer), Meta llama3 tokenizer.py (specials). */
#include "tok_impl.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- patterns ---------------------------------------------------------------------------- */

#define CONTRACTIONS "'s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D"
#define UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"

static const struct { const char *name, *pattern; } builtin_patterns[] = {
	{"gpt2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
	{"cl100k_base", "(" CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{"o200k_base", "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+(" CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER
		       "*(" CONTRACTIONS ")?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{"llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{"v1", "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
	{"v2", "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER
	       "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

const char *tok_builtin_pattern(const char *name)
{
	for (size_t i = 0; i < sizeof builtin_patterns / sizeof *builtin_patterns; i++)
		if (!strcmp(builtin_patterns[i].name, name))
			return builtin_patterns[i].pattern;
	return NULL;
}

const char *tok_gpt2_pattern(void) { return builtin_patterns[0].pattern; }

/* ---- byte-level mapping (GPT-2 bytes_to_unicode) ------------------------------------------ */

static int printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

uint32_t tok_byte_to_cp(uint8_t b)
{
	if (printable_byte(b))
		return b;
	uint32_t k = 0;
	for (int x = 0; x < b; x++)
		k += !printable_byte(x);
	return 256 + k;
}

static int16_t cp_inverse[324];

static void cp_inverse_init(void)
{
	for (int i = 0; i < 324; i++)
		cp_inverse[i] = -1;
	for (int b = 0; b < 256; b++)
		cp_inverse[tok_byte_to_cp((uint8_t)b)] = (int16_t)b;
}

int tok_cp_to_byte(uint32_t cp)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, cp_inverse_init);
	return cp < 324 ? cp_inverse[cp] : -1;
}

mgt_status tok_bytelevel_decode(const char *s, size_t n, mgt_buf *out, const char *file, const char *what)
{
	out->n = 0;
	for (size_t i = 0; i < n;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		int b = l > 0 ? tok_cp_to_byte((uint32_t)cp) : -1;
		if (b < 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: %s '%.*s' is not byte-level encoded (GPT-2 bytes_to_unicode)",
				       file, what, (int)(n < 60 ? n : 60), s);
		char c = (char)b;
		if (mgt_buf_add(out, &c, 1))
			return MGT_ERR_NOMEM;
		i += (size_t)l;
	}
	return MGT_OK;
}

/* ---- shared pieces ------------------------------------------------------------------------ */

/* Parse a JSON file. Errors: MGT_ERR_VOCAB naming the file (and line when the JSON is bad). */
mgt_status tok_json_load(const char *path, json_t **out)
{
	json_error_t je;
	errno = 0;
	*out = json_load_file(path, JSON_ALLOW_NUL, &je);
	if (*out)
		return MGT_OK;
	if (json_error_code(&je) == json_error_cannot_open_file)
		return mgt_err(MGT_ERR_VOCAB, "%s: cannot open: %s", path, errno ? strerror(errno) : je.text);
	return mgt_err(MGT_ERR_VOCAB, "%s:%d: invalid JSON: %s", path, je.line, je.text);
}

static mgt_status add_special(mgt_tok *t, const char *text, int32_t id, int special)
{
	tok_added *a = mgt_realloc(t->added, (t->n_added + 1) * sizeof *a);
	if (!a)
		return MGT_ERR_NOMEM;
	t->added = a;
	size_t n = strlen(text);
	if (n == 0)
		return mgt_err(MGT_ERR_VOCAB, "added token %d is empty", id);
	mgt_status st = tok_pool_add(t, id, text, n);
	if (st)
		return st;
	a[t->n_added++] = (tok_added){id, t->tok_off[id], (uint32_t)n, 0, 0, 0, (uint8_t)special, 0};
	return MGT_OK;
}

/* An added token with Hugging Face's flags (lstrip, rstrip, single_word, special, normalized). */
mgt_status tok_add_added(mgt_tok *t, const char *text, int32_t id, const tok_added *flags)
{
	mgt_status st = add_special(t, text, id, flags->special);
	if (!st) {
		tok_added *a = &t->added[t->n_added - 1];
		a->lstrip = flags->lstrip, a->rstrip = flags->rstrip, a->single_word = flags->single_word;
		a->normalized = flags->normalized;
	}
	return st;
}

int32_t tok_added_id(const mgt_tok *t, const char *text)
{
	size_t n = strlen(text);
	for (size_t a = 0; a < t->n_added; a++)
		if (t->added[a].len == n && !memcmp(t->pool.p + t->added[a].off, text, n))
			return t->added[a].id;
	return -1;
}

mgt_status tok_add_pre_regex(mgt_tok *t, const char *pattern, int behavior, int prefix_space, const char *what)
{
	if (t->n_pre == 4)
		return mgt_err(MGT_ERR_VOCAB, "%s: more than 4 pre-tokenizer steps", what);
	tok_pre_step *p = &t->pre[t->n_pre];
	*p = (tok_pre_step){NULL, behavior, prefix_space, NULL};
	t->n_pre++; /* freed by mgt_tok_free from here on */
	if (!pattern)
		return MGT_OK;
	if (!(p->pattern = mgt_malloc(strlen(pattern) + 1)))
		return MGT_ERR_NOMEM;
	strcpy(p->pattern, pattern);
	return tok_regex_compile(&p->re, pattern, what);
}

/* ---- GPT2BPETokenizer ---------------------------------------------------------------------- */

mgt_status tok_load_vocab_json(mgt_tok *t, const char *file, struct json_t *vocab, int64_t min_size)
{
	int64_t max_id = min_size - 1;
	const char *key;
	json_t *v;
	json_object_foreach(vocab, key, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX / 4)
			return mgt_err(MGT_ERR_VOCAB, "%s: vocabulary entry '%.60s': expected a non-negative integer id", file, key);
		if (json_integer_value(v) > max_id)
			max_id = json_integer_value(v);
	}
	mgt_status st = t->tok_off ? MGT_OK : tok_alloc_ids(t, max_id + 1);
	mgt_buf raw = {0};
	json_object_foreach(vocab, key, v) {
		if (st)
			break;
		int32_t id = (int32_t)json_integer_value(v);
		if (t->tok_len[id] != UINT32_MAX) {
			st = mgt_err(MGT_ERR_VOCAB, "%s: id %d is used twice (again by '%.60s')", file, id, key);
			break;
		}
		st = tok_bytelevel_decode(key, strlen(key), &raw, file, "token");
		if (!st)
			st = tok_pool_add(t, id, raw.p ? raw.p : "", raw.n);
	}
	free(raw.p);
	return st;
}

/* Look up a merge's two halves and their concatenation; add it with this rank. */
mgt_status tok_add_merge(mgt_tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t rank,
			 const char *file, size_t line)
{
	mgt_buf ra = {0}, rb = {0};
	mgt_status st = tok_bytelevel_decode(a, na, &ra, file, "merge token");
	if (!st)
		st = tok_bytelevel_decode(b, nb, &rb, file, "merge token");
	if (!st && (st = mgt_buf_add(&ra, rb.p, rb.n)) == MGT_OK) {
		int32_t ia = tok_vmap_find(t, ra.p, ra.n - rb.n), ib = tok_vmap_find(t, rb.p, rb.n),
			im = tok_vmap_find(t, ra.p, ra.n);
		if (ia < 0 || ib < 0 || im < 0)
			st = mgt_err(MGT_ERR_VOCAB, "%s:%zu: merge '%.*s %.*s': %s is not in the vocabulary", file, line,
				     (int)na, a, (int)nb, b, ia < 0 ? "the first part" : ib < 0 ? "the second part" : "the merged token");
		else
			st = tok_pair_put(&t->pairs, ia, ib, rank, im);
	}
	free(ra.p);
	free(rb.p);
	return st;
}

static mgt_status load_merges_txt(mgt_tok *t, const char *file)
{
	char *text;
	size_t len;
	mgt_status st = mgt_file_read(file, &text, &len);
	if (st)
		return st;
	int32_t rank = 0;
	size_t line = 0;
	for (char *p = text, *end; p < text + len && !st; p = end + 1) {
		end = memchr(p, '\n', (size_t)(text + len - p));
		if (!end)
			end = text + len;
		line++;
		size_t n = (size_t)(end - p);
		if (n && p[n - 1] == '\r')
			n--;
		if (n == 0 || (line == 1 && !strncmp(p, "#version", 8)))
			continue;
		char *sp = memchr(p, ' ', n);
		if (!sp || sp == p || sp == p + n - 1 || memchr(sp + 1, ' ', (size_t)(p + n - sp - 1)))
			st = mgt_err(MGT_ERR_VOCAB, "%s:%zu: expected two tokens separated by one space", file, line);
		else
			st = tok_add_merge(t, p, (size_t)(sp - p), sp + 1, (size_t)(p + n - sp - 1), rank++, file, line);
	}
	free(text);
	return st;
}

/* The eod id is the vocabulary's <|endoftext|>. It is not an added token: like Megatron's
 * GPT2BPETokenizer (gpt2_tokenization.py, no special-token splitting), the string written in a
 * text is BPE-encoded as ordinary text; only --append-eod produces the id. */
static mgt_status gpt2_find_eod(mgt_tok *t, const char *file)
{
	for (int32_t id = 0; id < t->vocab_size; id++)
		if (t->tok_len[id] == 13 && !memcmp(t->pool.p + t->tok_off[id], "<|endoftext|>", 13)) {
			t->eod = id;
			return MGT_OK;
		}
	return mgt_err(MGT_ERR_VOCAB, "%s: no <|endoftext|> token", file);
}

static mgt_status load_gpt2(mgt_tok *t, const mgt_tok_opts *o)
{
	if (!o->vocab_file || !o->merge_file)
		return mgt_err(MGT_ERR_USAGE, "GPT2BPETokenizer needs --vocab-file and --merge-file");
	json_t *vocab;
	mgt_status st = tok_json_load(o->vocab_file, &vocab);
	if (st)
		return st;
	st = json_is_object(vocab) ? tok_load_vocab_json(t, o->vocab_file, vocab, 0)
					      : mgt_err(MGT_ERR_VOCAB, "%s: expected a JSON object of token -> id", o->vocab_file);
	json_decref(vocab);
	if (!st)
		st = gpt2_find_eod(t, o->vocab_file);
	if (!st)
		st = tok_vmap_build(t, o->vocab_file);
	if (!st)
		st = load_merges_txt(t, o->merge_file);
	if (!st)
		st = tok_finish_bytes(t, o->vocab_file);
	if (!st)
		st = tok_add_pre_regex(t, tok_gpt2_pattern(), PRE_SPLIT_ISOLATED, 0, o->vocab_file);
	return st;
}

/* ---- tiktoken rank files ------------------------------------------------------------------ */

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding; returns decoded length or -1. */
static long b64decode(const char *s, size_t n, char *out)
{
	if (n % 4)
		return -1;
	long o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;
		for (int k = 0; k < 4; k++) {
			v[k] = s[i + k] == '=' && i + 4 == n && k >= 2 ? (pad++, 0) : b64val((uint8_t)s[i + k]);
			if (v[k] < 0 || (pad && s[i + k] != '='))
				return -1;
		}
		uint32_t w = (uint32_t)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
		out[o++] = (char)(w >> 16);
		if (pad < 2)
			out[o++] = (char)(w >> 8);
		if (pad < 1)
			out[o++] = (char)w;
	}
	return o;
}

typedef struct { char *tok; size_t len; int64_t rank; } rank_ent;

/* Parse "BASE64 RANK" lines. The entries point into *text (decoded in place); the caller frees
 * *text and *out. */
static mgt_status parse_rank_file(const char *file, char **text, rank_ent **out, size_t *count, int64_t *max_rank)
{
	size_t len, n = 0, line = 0;
	mgt_status st = mgt_file_read(file, text, &len);
	if (st)
		return st;
	rank_ent *v = NULL;
	*max_rank = -1;
	for (char *p = *text, *end; p < *text + len && !st; p = end + 1) {
		end = memchr(p, '\n', (size_t)(*text + len - p));
		if (!end)
			end = *text + len;
		line++;
		if (end == p)
			continue;
		char *sp = memchr(p, ' ', (size_t)(end - p)), *rend = NULL;
		long long r = sp ? strtoll(sp + 1, &rend, 10) : -1;
		long bl = sp ? b64decode(p, (size_t)(sp - p), p) : -1; /* decodes in place: output is shorter */
		if (!sp || bl <= 0 || r < 0 || r > INT32_MAX / 4 || (rend != end && !(rend + 1 == end && *rend == '\r'))) {
			st = mgt_err(MGT_ERR_VOCAB, "%s:%zu: expected 'BASE64TOKEN RANK'", file, line);
			break;
		}
		if (n % 4096 == 0) {
			rank_ent *w = mgt_realloc(v, (n + 4096) * sizeof *v);
			if (!w) {
				st = MGT_ERR_NOMEM;
				break;
			}
			v = w;
		}
		v[n++] = (rank_ent){p, (size_t)bl, r};
		if (r > *max_rank)
			*max_rank = r;
	}
	if (!st && n == 0)
		st = mgt_err(MGT_ERR_VOCAB, "%s: no ranks", file);
	*out = v;
	*count = n;
	return st;
}

static mgt_status ranks_into_tok(mgt_tok *t, const char *file, rank_ent *v, size_t n, int32_t id_offset)
{
	mgt_status st = MGT_OK;
	for (size_t i = 0; i < n && !st; i++) {
		int32_t id = (int32_t)v[i].rank + id_offset;
		if (t->tok_len[id] != UINT32_MAX)
			return mgt_err(MGT_ERR_VOCAB, "%s: rank %lld appears twice", file, (long long)v[i].rank);
		st = tok_pool_add(t, id, v[i].tok, v[i].len);
	}
	return st;
}

/* Special tokens of the named encodings (tiktoken_ext/openai_public.py, llama3 tokenizer.py).
 * With t == NULL only returns the id just past the last one. */
static int64_t builtin_specials(mgt_tok *t, const char *name, int64_t n_ranks, mgt_status *st)
{
	static const char *cl100k[] = {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"};
	static const char *llama[] = {"<|begin_of_text|>", "<|end_of_text|>", NULL, NULL,
				      "<|finetune_right_pad_id|>", NULL, "<|start_header_id|>",
				      "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
	if (!strcmp(name, "cl100k_base")) {
		for (int i = 0; t && i < 4 && !*st; i++)
			*st = add_special(t, cl100k[i], 100257 + i, 1);
		if (t && !*st)
			*st = add_special(t, "<|endofprompt|>", 100276, 1);
		return 100277;
	}
	if (!strcmp(name, "o200k_base")) {
		if (t && !(*st = add_special(t, "<|endoftext|>", 199999, 1)))
			*st = add_special(t, "<|endofprompt|>", 200018, 1);
		return 200019;
	}
	if (!strcmp(name, "llama3")) {
		for (int i = 0, reserved = 0; t && i < 256 && !*st; i++) {
			char buf[48];
			const char *s = i < 11 ? llama[i] : NULL;
			if (!s) {
				snprintf(buf, sizeof buf, "<|reserved_special_token_%d|>", reserved++);
				s = buf;
			}
			*st = add_special(t, s, (int32_t)(n_ranks + i), 1);
		}
		return n_ranks + 256;
	}
	return 0;
}

static int64_t specials_end(json_t *specials)
{
	int64_t m = 0;
	const char *k;
	json_t *v;
	json_object_foreach(specials, k, v)
		if (json_is_integer(v) && json_integer_value(v) + 1 > m)
			m = json_integer_value(v) + 1;
	return m;
}

/* FILE.tiktoken -> FILE.json (pat_str, special_tokens), if present. *path is malloc'd. */
static json_t *load_sidecar(const char *file, char **path)
{
	size_t n = strlen(file);
	const char *dot = strrchr(file, '.'), *slash = strrchr(file, '/');
	size_t base = dot && (!slash || dot > slash) ? (size_t)(dot - file) : n;
	*path = mgt_malloc(base + 6);
	if (!*path)
		return NULL;
	memcpy(*path, file, base);
	memcpy(*path + base, ".json", 6);
	return json_load_file(*path, 0, NULL);
}

/* The encoding name implied by --tiktoken-pattern or the file name. */
static const char *tiktoken_name(const mgt_tok_opts *o)
{
	const char *base = strrchr(o->model, '/') ? strrchr(o->model, '/') + 1 : o->model;
	if (o->tiktoken_pattern)
		return o->tiktoken_pattern;
	if (!strcmp(base, "tokenizer.model"))
		return "llama3";
	return strstr(base, "o200k") ? "o200k_base" : strstr(base, "cl100k") ? "cl100k_base" : NULL;
}

static mgt_status add_json_specials(mgt_tok *t, json_t *specials, const char *file)
{
	const char *k;
	json_t *id;
	mgt_status st = MGT_OK;
	json_object_foreach(specials, k, id) {
		if (!json_is_integer(id) || json_integer_value(id) < 0)
			return mgt_err(MGT_ERR_VOCAB, "%s: special_tokens.%s: expected a non-negative integer", file, k);
		if ((st = add_special(t, k, (int32_t)json_integer_value(id), 1)))
			break;
	}
	return st;
}

static mgt_status load_tiktoken_ranks(mgt_tok *t, const mgt_tok_opts *o)
{
	char *text = NULL, *side_path = NULL;
	rank_ent *v = NULL;
	size_t n = 0;
	int64_t max_rank = -1;
	mgt_status st = parse_rank_file(o->model, &text, &v, &n, &max_rank);
	json_t *side = st || o->tiktoken_pattern ? NULL : load_sidecar(o->model, &side_path);
	json_t *pat = json_object_get(side, "pat_str"), *specials = json_object_get(side, "special_tokens");
	const char *name = tiktoken_name(o);
	const char *pattern = json_is_string(pat) ? json_string_value(pat) : name ? tok_builtin_pattern(name) : NULL;
	if (!st && !pattern)
		st = mgt_err(MGT_ERR_USAGE, "%s: unknown split pattern; pass --tiktoken-pattern cl100k_base|o200k_base|"
			     "llama3|v1|v2 or put pat_str in %s", o->model, side_path ? side_path : "a .json beside it");
	int64_t end = json_is_object(specials) ? specials_end(specials) : name ? builtin_specials(NULL, name, max_rank + 1, &st) : 0;
	if (!st)
		st = tok_alloc_ids(t, end > max_rank + 1 ? end : max_rank + 1);
	if (!st)
		st = ranks_into_tok(t, o->model, v, n, 0);
	if (!st && json_is_object(specials))
		st = add_json_specials(t, specials, side_path);
	else if (!st && name)
		builtin_specials(t, name, max_rank + 1, &st);
	if (!st)
		st = tok_add_pre_regex(t, pattern, PRE_SPLIT_ISOLATED, 0, o->model);
	free(text);
	free(v);
	json_decref(side);
	free(side_path);
	return st;
}

/* Megatron's TikTokenizer: a JSON list of {rank, token_bytes (base64), token_str}; ids are
 * rank + num_special_tokens; ids below are <unk> <s> </s> <mask> <pad> <cls> <sep> <SPECIAL_i>;
 * eod = </s>; special tokens are not matched in text (encode_ordinary). */
static mgt_status load_megatron_tiktoken(mgt_tok *t, const mgt_tok_opts *o, json_t *list)
{
	static const char *specials[] = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};
	int64_t vocab = o->vocab_size ? o->vocab_size : 131072, nsp = o->tiktoken_num_special;
	const char *pattern = tok_builtin_pattern(o->tiktoken_pattern ? o->tiktoken_pattern : "");
	if (!pattern || (strcmp(o->tiktoken_pattern, "v1") && strcmp(o->tiktoken_pattern, "v2")))
		return mgt_err(MGT_ERR_USAGE, "%s: a Megatron TikTokenizer vocabulary needs --tiktoken-pattern v1 or v2", o->model);
	if (nsp < 7 || nsp >= vocab)
		return mgt_err(MGT_ERR_USAGE, "--tiktoken-num-special-tokens %lld: expected 7 <= N < vocab size %lld",
			       (long long)nsp, (long long)vocab);
	mgt_status st = tok_alloc_ids(t, vocab);
	char *raw = NULL;
	for (size_t i = 0; !st && i < json_array_size(list) && (int64_t)i < vocab - nsp; i++) {
		json_t *e = json_array_get(list, i), *r = json_object_get(e, "rank"), *b = json_object_get(e, "token_bytes");
		const char *s = json_string_value(b);
		size_t sl = s ? strlen(s) : 0;
		char *q = s ? mgt_realloc(raw, sl + 1) : NULL;
		long bl = q ? b64decode(s, sl, raw = q) : -1;
		if (!json_is_integer(r) || json_integer_value(r) != (json_int_t)i || bl <= 0)
			st = mgt_err(MGT_ERR_VOCAB, "%s: entry %zu: expected {\"rank\": %zu, \"token_bytes\": BASE64, ...}", o->model, i, i);
		else
			st = tok_pool_add(t, (int32_t)(i + nsp), raw, (size_t)bl);
	}
	free(raw);
	for (int64_t i = 0; !st && i < nsp; i++) {
		char buf[32];
		if (i >= 7)
			snprintf(buf, sizeof buf, "<SPECIAL_%lld>", (long long)i);
		st = tok_pool_add(t, (int32_t)i, i < 7 ? specials[i] : buf, strlen(i < 7 ? specials[i] : buf));
	}
	t->eod = 2;
	t->kind = TOK_MEGATRON_TIKTOKEN;
	return st ? st : tok_add_pre_regex(t, pattern, PRE_SPLIT_ISOLATED, 0, o->model);
}

static mgt_status load_tiktoken(mgt_tok *t, const mgt_tok_opts *o)
{
	if (!o->model)
		return mgt_err(MGT_ERR_USAGE, "TikTokenizer needs --tokenizer-model");
	size_t n = strlen(o->model);
	mgt_status st;
	if (n > 5 && !strcmp(o->model + n - 5, ".json")) {
		json_t *list;
		if ((st = tok_json_load(o->model, &list)))
			return st;
		st = json_is_array(list) ? load_megatron_tiktoken(t, o, list)
					 : mgt_err(MGT_ERR_VOCAB, "%s: expected a JSON list of ranks", o->model);
		json_decref(list);
	} else {
		t->kind = TOK_TIKTOKEN;
		st = load_tiktoken_ranks(t, o);
		t->eod = tok_added_id(t, "<|endoftext|>");
		if (t->eod < 0)
			t->eod = tok_added_id(t, "<|end_of_text|>");
	}
	if (!st)
		st = tok_vmap_build(t, o->model);
	if (!st)
		st = tok_pairs_from_ranks(t);
	if (!st)
		st = tok_finish_bytes(t, o->model);
	t->ignore_merges = 1; /* tiktoken: a piece that is a token is that token */
	return st;
}

static mgt_status load_null(mgt_tok *t, const mgt_tok_opts *o)
{
	if (o->vocab_size <= 0)
		return mgt_err(MGT_ERR_USAGE, "NullTokenizer needs --vocab-size");
	t->kind = TOK_NULL;
	t->vocab_size = o->vocab_size;
	t->eod = (int32_t)(o->null_eod_id >= 0 ? o->null_eod_id : o->vocab_size - 1);
	if (t->eod >= o->vocab_size)
		return mgt_err(MGT_ERR_USAGE, "--null-tokenizer-eod-id %d: expected < --vocab-size", t->eod);
	return MGT_OK;
}

/* SentencePieceTokenizer: the <extra_id_N> of --vocab-extra-ids, in order. */
static mgt_status spm_sentinels(mgt_tok *t)
{
	for (int i = 0;; i++) {
		char s[24];
		snprintf(s, sizeof s, "<extra_id_%d>", i);
		int32_t id = tok_added_id(t, s);
		if (id < 0)
			return MGT_OK;
		int32_t *v = mgt_realloc(t->sentinels, (size_t)(i + 1) * sizeof *v);
		if (!v)
			return MGT_ERR_NOMEM;
		t->sentinels = v;
		v[t->n_sentinels++] = id;
	}
}

/* Megatron's SFTTokenizer (megatron/core/tokenizers/text/libraries/sft_tokenizer.py): a Hugging
 * Face tokenizer whose chat renderings are encoded with add_special_tokens=False. */
static mgt_status load_sft(mgt_tok *t, const mgt_tok_opts *o)
{
	mgt_tok_opts h = *o;
	h.hf_no_special_tokens = 1;
	return tok_load_hf(t, &h);
}

mgt_status mgt_tok_load(mgt_tok **out, const mgt_tok_opts *o)
{
	static const struct { const char *name; mgt_status (*load)(mgt_tok *, const mgt_tok_opts *); int kind; } types[] = {
		{"GPT2BPETokenizer", load_gpt2, TOK_GPT2},
		{"HuggingFaceTokenizer", tok_load_hf, TOK_HF},
		{"SFTTokenizer", load_sft, TOK_HF},
		{"TikTokenizer", load_tiktoken, TOK_TIKTOKEN},
		{"NullTokenizer", load_null, TOK_NULL},
		{"SentencePieceTokenizer", tok_load_spm, TOK_SPM},
		{"Llama2Tokenizer", tok_load_spm, TOK_LLAMA2},
		{"BertWordPieceLowerCase", tok_load_wordpiece, TOK_WORDPIECE},
		{"BertWordPieceCase", tok_load_wordpiece, TOK_WORDPIECE},
	};
	if (!o->type)
		return mgt_err(MGT_ERR_USAGE, "--tokenizer-type is required (GPT2BPETokenizer, HuggingFaceTokenizer, "
			       "SentencePieceTokenizer, Llama2Tokenizer, BertWordPieceLowerCase, BertWordPieceCase, "
			       "TikTokenizer or NullTokenizer)");
	for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
		if (strcmp(types[i].name, o->type))
			continue;
		mgt_tok *t = calloc(1, sizeof *t);
		if (!t)
			return mgt_err(MGT_ERR_NOMEM, "out of memory");
		t->kind = types[i].kind;
		t->type_name = types[i].name;
		t->eod = t->bos = t->pad = t->unk = t->cls = t->sep = t->mask = -1;
		mgt_status st = types[i].load(t, o);
		if (!st && t->kind == TOK_SPM)
			st = spm_sentinels(t);
		if (st == MGT_ERR_IO) /* a missing or unreadable tokenizer file is a tokenizer problem */
			st = MGT_ERR_VOCAB;
		if (st) {
			mgt_tok_free(t);
			return st;
		}
		*out = t;
		return MGT_OK;
	}
	if (!strcmp(o->type, "GPTSentencePieceTokenizer"))
		return mgt_err(MGT_ERR_USAGE, "--tokenizer-type GPTSentencePieceTokenizer: not implemented (use "
			       "SentencePieceTokenizer or Llama2Tokenizer)");
	return mgt_err(MGT_ERR_USAGE, "--tokenizer-type %s: unknown (expected GPT2BPETokenizer, HuggingFaceTokenizer, "
		       "SentencePieceTokenizer, Llama2Tokenizer, BertWordPieceLowerCase, BertWordPieceCase, TikTokenizer "
		       "or NullTokenizer)", o->type);
}

/* ---- registry ----------------------------------------------------------------------------- */

void mgt_tok_free(mgt_tok *t)
{
	if (!t)
		return;
	for (int k = 0; k < t->n_pre; k++)
		pcre2_code_free(t->pre[k].re), free(t->pre[k].pattern);
	tok_spm_free(t);
	free(t->pool.p), free(t->tok_off), free(t->tok_len), free(t->vmap.slots);
	free(t->pairs.keys), free(t->pairs.rank), free(t->pairs.merged), free(t->added);
	free(t->sentinels);
	free(t);
}

int64_t mgt_tok_vocab_size(const mgt_tok *t) { return t->vocab_size; }

int32_t mgt_tok_eod(const mgt_tok *t) { return t->eod; }
const char *mgt_tok_type_name(const mgt_tok *t) { return t->type_name; }

size_t mgt_tok_sentinels(const mgt_tok *t, const int32_t **ids)
{
	*ids = t->n_sentinels ? t->sentinels : NULL;
	return t->n_sentinels;
}

int32_t mgt_tok_special_id(const mgt_tok *t, const char *name)
{
	int spm = t->kind == TOK_SPM || t->kind == TOK_LLAMA2;
	int32_t unk = t->kind == TOK_WORDPIECE ? t->unk : spm ? t->spm_unk : -1;
	int32_t eos = t->kind == TOK_WORDPIECE ? t->sep : spm ? t->spm_eos : t->eod;
	const struct { const char *name; int32_t id; } v[] = {
		{"pad", t->pad}, {"unk", unk}, {"bos", t->bos}, {"eos", eos}, {"eod", t->eod},
		{"cls", t->kind == TOK_SPM ? tok_added_id(t, "<CLS>") : t->cls},
		{"sep", t->kind == TOK_SPM ? tok_added_id(t, "<SEP>") : t->sep},
		{"mask", t->kind == TOK_SPM ? tok_added_id(t, "<MASK>") : t->mask},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++)
		if (!strcmp(v[i].name, name))
			return v[i].id;
	return -1;
}

void mgt_tok_opts_apply(mgt_tok_opts *t, const mgt_tok_opts *over)
{
	if (over->type) {
		*t = *over;
		return;
	}
	if (over->vocab_file) t->vocab_file = over->vocab_file;
	if (over->merge_file) t->merge_file = over->merge_file;
	if (over->model) t->model = over->model;
	if (!t->type && t->vocab_file && t->merge_file) t->type = "GPT2BPETokenizer";
	t->hf_no_special_tokens = over->hf_no_special_tokens;
	t->vocab_extra_ids = over->vocab_extra_ids;
}
