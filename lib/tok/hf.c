/* lib/tok/hf.c: Hugging Face tokenizer.json (byte-level BPE models only).
 * Facts from the tokenizers crate's serialization: model (BPE: vocab, merges, ignore_merges),
 * added_tokens (content, id, lstrip, rstrip, single_word, special), normalizer (NFC),
 * pre_tokenizer (ByteLevel, Split, Digits, Sequence), post_processor (TemplateProcessing,
 * RobertaProcessing, BertProcessing, ByteLevel, Sequence). */
#include "tok_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct { mgt_tok *t; const mgt_tok_opts *o; const char *file; json_t *root; } hf_ctx;

typedef mgt_status (*hf_step)(hf_ctx *c, json_t *x);

/* Apply fn to each element of a "Sequence" list, stopping at the first error. */
static mgt_status hf_each(hf_ctx *c, json_t *list, hf_step fn)
{
	size_t i;
	json_t *x;
	json_array_foreach(list, i, x) {
		mgt_status st = fn(c, x);
		if (st)
			return st;
	}
	return MGT_OK;
}

static const char *jstr(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static mgt_status unsupported(hf_ctx *c, const char *what, const char *type)
{
	return mgt_err(MGT_ERR_VOCAB, "%s: %s '%s' is not supported (byte-level BPE tokenizers only)", c->file, what,
		       type ? type : "(missing type)");
}

static mgt_status hf_model(hf_ctx *c, json_t *model, int64_t min_size)
{
	const char *type = jstr(model, "type");
	json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
	if (type && strcmp(type, "BPE"))
		return unsupported(c, "model type", type);
	if (json_is_true(json_object_get(model, "byte_fallback")))
		return unsupported(c, "model option", "byte_fallback");
	const char *cs = jstr(model, "continuing_subword_prefix"), *ew = jstr(model, "end_of_word_suffix");
	if ((cs && *cs) || (ew && *ew))
		return unsupported(c, "model option", cs && *cs ? "continuing_subword_prefix" : "end_of_word_suffix");
	if (!json_is_object(vocab) || !json_is_array(merges))
		return mgt_err(MGT_ERR_VOCAB, "%s: model.vocab (object) and model.merges (list) are required", c->file);
	c->t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
	return tok_load_vocab_json(c->t, c->file, vocab, min_size);
}

static mgt_status hf_merges(hf_ctx *c, json_t *merges)
{
	size_t i;
	json_t *m;
	json_array_foreach(merges, i, m) {
		const char *a, *b;
		size_t na, nb;
		if (json_is_string(m)) {
			a = json_string_value(m);
			const char *sp = strchr(a, ' ');
			if (!sp || strchr(sp + 1, ' '))
				return mgt_err(MGT_ERR_VOCAB, "%s: model.merges[%zu]: expected 'A B'", c->file, i);
			na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
		} else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
			   json_is_string(json_array_get(m, 1))) {
			a = json_string_value(json_array_get(m, 0)), na = json_string_length(json_array_get(m, 0));
			b = json_string_value(json_array_get(m, 1)), nb = json_string_length(json_array_get(m, 1));
		} else
			return mgt_err(MGT_ERR_VOCAB, "%s: model.merges[%zu]: expected 'A B' or [A, B]", c->file, i);
		mgt_status st = tok_add_merge(c->t, a, na, b, nb, (int32_t)i, c->file, i + 1);
		if (st)
			return st;
	}
	return MGT_OK;
}

static int64_t added_end(json_t *added)
{
	int64_t end = 0;
	size_t i;
	json_t *a;
	json_array_foreach(added, i, a) {
		json_int_t id = json_integer_value(json_object_get(a, "id"));
		if (id + 1 > end)
			end = id + 1;
	}
	return end;
}

static mgt_status hf_added(hf_ctx *c, json_t *added)
{
	size_t i;
	json_t *a;
	json_array_foreach(added, i, a) {
		json_t *id = json_object_get(a, "id");
		const char *content = jstr(a, "content");
		if (!json_is_integer(id) || json_integer_value(id) < 0 || !content || !*content)
			return mgt_err(MGT_ERR_VOCAB, "%s: added_tokens[%zu]: expected a non-empty content and an id", c->file, i);
		tok_added flags = {
			.lstrip = json_is_true(json_object_get(a, "lstrip")), .rstrip = json_is_true(json_object_get(a, "rstrip")),
			.single_word = json_is_true(json_object_get(a, "single_word")),
			.special = json_is_true(json_object_get(a, "special")),
			.normalized = !json_is_false(json_object_get(a, "normalized")), /* tokenizers' default: !special */
		};
		if (!json_object_get(a, "normalized"))
			flags.normalized = !flags.special;
		mgt_status st = tok_add_added(c->t, content, (int32_t)json_integer_value(id), &flags);
		if (st)
			return st;
	}
	return MGT_OK;
}

static mgt_status hf_normalizer(hf_ctx *c, json_t *n)
{
	if (!n || json_is_null(n))
		return MGT_OK;
	const char *type = jstr(n, "type");
	if (type && !strcmp(type, "NFC")) {
		c->t->nfc = 1;
		return MGT_OK;
	}
	if (type && !strcmp(type, "Sequence"))
		return hf_each(c, json_object_get(n, "normalizers"), hf_normalizer);
	return unsupported(c, "normalizer", type);
}

/* A Split pattern given as a plain string: escape ASCII punctuation for PCRE2. */
static char *escape_literal(const char *s)
{
	size_t n = strlen(s);
	char *out = mgt_malloc(2 * n + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x80 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
			*o++ = '\\';
		*o++ = *s;
	}
	*o = 0;
	return out;
}

static mgt_status hf_split(hf_ctx *c, json_t *p)
{
	json_t *pat = json_object_get(p, "pattern");
	const char *behavior = jstr(p, "behavior"), *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
	if (json_is_true(json_object_get(p, "invert")))
		return unsupported(c, "Split option", "invert");
	int b = behavior && !strcmp(behavior, "Isolated") ? PRE_SPLIT_ISOLATED
		: behavior && !strcmp(behavior, "Removed") ? PRE_SPLIT_REMOVED : -1;
	if (b < 0)
		return unsupported(c, "Split behavior", behavior);
	if (!re && !lit)
		return mgt_err(MGT_ERR_VOCAB, "%s: pre_tokenizer Split: pattern needs Regex or String", c->file);
	char *esc = lit ? escape_literal(lit) : NULL;
	if (lit && !esc)
		return MGT_ERR_NOMEM;
	mgt_status st = tok_add_pre_regex(c->t, re ? re : esc, b, 0, c->file);
	free(esc);
	return st;
}

static mgt_status hf_pre(hf_ctx *c, json_t *p)
{
	if (!p || json_is_null(p))
		return MGT_OK;
	const char *type = jstr(p, "type");
	if (type && !strcmp(type, "ByteLevel")) {
		json_t *ur = json_object_get(p, "use_regex");
		int use_regex = !ur || json_is_true(ur), prefix = json_is_true(json_object_get(p, "add_prefix_space"));
		if (!use_regex && !prefix)
			return MGT_OK; /* byte mapping only: our BPE works on bytes already */
		return tok_add_pre_regex(c->t, use_regex ? tok_gpt2_pattern() : NULL, PRE_SPLIT_ISOLATED, prefix, c->file);
	}
	if (type && !strcmp(type, "Split"))
		return hf_split(c, p);
	if (type && !strcmp(type, "Digits"))
		return tok_add_pre_regex(c->t, json_is_true(json_object_get(p, "individual_digits")) ? "\\p{N}" : "\\p{N}+",
					 PRE_SPLIT_ISOLATED, 0, c->file);
	if (type && !strcmp(type, "Sequence"))
		return hf_each(c, json_object_get(p, "pretokenizers"), hf_pre);
	return unsupported(c, "pre_tokenizer", type);
}

static mgt_status push_template_id(hf_ctx *c, int suffix, int32_t id)
{
	int *n = suffix ? &c->t->n_suffix : &c->t->n_prefix;
	if (*n == 4)
		return mgt_err(MGT_ERR_VOCAB, "%s: post_processor adds more than 4 tokens", c->file);
	(suffix ? c->t->suffix_ids : c->t->prefix_ids)[(*n)++] = id;
	return MGT_OK;
}

static mgt_status hf_template(hf_ctx *c, json_t *p)
{
	json_t *specials = json_object_get(p, "special_tokens"), *item;
	int after = 0;
	size_t i;
	json_array_foreach(json_object_get(p, "single"), i, item) {
		json_t *sp = json_object_get(item, "SpecialToken");
		if (json_object_get(item, "Sequence")) {
			after = 1;
			continue;
		}
		json_t *ids = json_object_get(json_object_get(specials, jstr(sp, "id")), "ids"), *x;
		if (!json_is_array(ids))
			return mgt_err(MGT_ERR_VOCAB, "%s: post_processor: special token '%s' has no ids", c->file,
				       jstr(sp, "id") ? jstr(sp, "id") : "?");
		size_t k;
		json_array_foreach(ids, k, x) {
			mgt_status st = push_template_id(c, after, (int32_t)json_integer_value(x));
			if (st)
				return st;
		}
	}
	return MGT_OK;
}

static mgt_status hf_post(hf_ctx *c, json_t *p)
{
	if (!p || json_is_null(p) || c->o->hf_no_special_tokens)
		return MGT_OK;
	const char *type = jstr(p, "type");
	if (type && !strcmp(type, "ByteLevel"))
		return MGT_OK;
	if (type && !strcmp(type, "TemplateProcessing"))
		return hf_template(c, p);
	if (type && (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))) {
		json_t *cls = json_array_get(json_object_get(p, "cls"), 1), *sep = json_array_get(json_object_get(p, "sep"), 1);
		mgt_status st = push_template_id(c, 0, (int32_t)json_integer_value(cls));
		return st ? st : push_template_id(c, 1, (int32_t)json_integer_value(sep));
	}
	if (type && !strcmp(type, "Sequence"))
		return hf_each(c, json_object_get(p, "processors"), hf_post);
	return unsupported(c, "post_processor", type);
}

static int32_t token_id(const mgt_tok *t, const char *s)
{
	int32_t id = tok_added_id(t, s);
	return id >= 0 ? id : tok_vmap_find(t, s, strlen(s));
}

/* The id of tokenizer_config.json's KEY (eos_token, bos_token, pad_token: a string or an
 * AddedToken object) beside the file, or -1. */
static int32_t hf_config_id(const char *file, const mgt_tok *t, const char *key)
{
	size_t n = strlen(file);
	const char *slash = strrchr(file, '/');
	size_t dir = slash ? (size_t)(slash - file) + 1 : 0;
	char *cfg = mgt_malloc(n + 32);
	int32_t id = -1;
	if (cfg) {
		memcpy(cfg, file, dir);
		strcpy(cfg + dir, "tokenizer_config.json");
		json_t *j = json_load_file(cfg, 0, NULL), *v = json_object_get(j, key);
		const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
		if (s)
			id = token_id(t, s);
		json_decref(j);
		free(cfg);
	}
	return id;
}

/* eod = the eos_token of tokenizer_config.json beside the file, else a well-known name. */
static int32_t hf_eod(const char *file, const mgt_tok *t)
{
	static const char *names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>"};
	int32_t id = hf_config_id(file, t, "eos_token");
	for (size_t i = 0; id < 0 && i < sizeof names / sizeof *names; i++)
		id = token_id(t, names[i]);
	return id;
}

static mgt_status hf_build(hf_ctx *c)
{
	json_t *r = c->root, *added = json_object_get(r, "added_tokens"), *model = json_object_get(r, "model");
	if (!json_is_object(model))
		return mgt_err(MGT_ERR_VOCAB, "%s: no model object (expected a tokenizers tokenizer.json)", c->file);
	mgt_status st = hf_model(c, model, added_end(added));
	if (!st) /* the model's vocabulary only: an added token may repeat a model token */
		st = tok_vmap_build(c->t, c->file);
	if (!st)
		st = hf_added(c, added);
	if (!st)
		st = hf_merges(c, json_object_get(model, "merges"));
	if (!st)
		st = tok_finish_bytes(c->t, c->file);
	if (!st)
		st = hf_normalizer(c, json_object_get(r, "normalizer"));
	if (!st)
		st = hf_pre(c, json_object_get(r, "pre_tokenizer"));
	if (!st)
		st = hf_post(c, json_object_get(r, "post_processor"));
	if (!st) {
		c->t->eod = hf_eod(c->file, c->t);
		c->t->bos = hf_config_id(c->file, c->t, "bos_token");
		c->t->pad = hf_config_id(c->file, c->t, "pad_token");
	}
	return st;
}

mgt_status tok_load_hf(mgt_tok *t, const mgt_tok_opts *o)
{
	if (!o->model)
		return mgt_err(MGT_ERR_USAGE, "HuggingFaceTokenizer needs --tokenizer-model (tokenizer.json or its directory)");
	struct stat sb;
	char *path = mgt_malloc(strlen(o->model) + 20);
	if (!path)
		return MGT_ERR_NOMEM;
	strcpy(path, o->model);
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		strcat(path, "/tokenizer.json");
	json_t *root;
	mgt_status st = tok_json_load(path, &root);
	if (!st) {
		hf_ctx c = {t, o, path, root};
		st = hf_build(&c);
	}
	json_decref(root);
	free(path);
	return st;
}
