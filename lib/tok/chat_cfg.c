/* lib/tok/chat_cfg.c: a Hugging Face tokenizer's chat template and special tokens from its
 * tokenizer_config.json (transformers' PreTrainedTokenizerBase.get_chat_template and
 * apply_chat_template's template variables), and a conversation rendered with them
 * (tok.h mgt_chat_config_*, mgt_chat_render). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tok.h"

/* path: the file name beside (or in, for a directory) the --tokenizer-model path model */
static void beside(const char *model, const char *name, char *path, size_t cap)
{
	struct stat sb;
	if (!stat(model, &sb) && S_ISDIR(sb.st_mode)) {
		snprintf(path, cap, "%s/%s", model, name);
	} else {
		const char *slash = strrchr(model, '/');
		snprintf(path, cap, "%.*s%s", slash ? (int)(slash - model) + 1 : 0, model, name);
	}
}

/* tokenizer_config.json beside (or in, for a directory) the --tokenizer-model path; NULL if none */
static json_t *load_tok_config(const char *model, char *path, size_t cap)
{
	if (!model)
		return NULL;
	beside(model, "tokenizer_config.json", path, cap);
	return json_load_file(path, 0, NULL);
}

/* the special tokens' strings (bos_token, eos_token, ...: a string or an AddedToken object) */
static json_t *config_specials(const json_t *cfg)
{
	static const char *const keys[] = { "bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
					    "cls_token", "mask_token", NULL };
	json_t *o = json_object();
	for (int i = 0; keys[i]; i++) {
		json_t *v = json_object_get(cfg, keys[i]);
		if (json_is_object(v))
			v = json_object_get(v, "content");
		if (json_is_string(v))
			json_object_set(o, keys[i], v);
	}
	json_t *extra = json_object_get(cfg, "additional_special_tokens");
	if (json_is_array(extra)) {
		json_t *a = json_array(), *x;
		size_t i;
		json_array_foreach(extra, i, x) {
			json_t *c = json_is_object(x) ? json_object_get(x, "content") : x;
			if (json_is_string(c))
				json_array_append(a, c);
		}
		json_object_set_new(o, "additional_special_tokens", a);
	}
	return o;
}

/* tokenizer_config.json's chat_template: a string, or a list of {"name", "template"} from which
 * transformers (get_chat_template) takes "tool_use" when tools are given and "default" otherwise */
static mgt_status config_templates(mgt_chat_config *ch, const json_t *t, const char *cfgpath)
{
	if (json_is_string(t))
		return mgt_chat_template_parse(json_string_value(t), json_string_length(t), cfgpath, &ch->t);
	if (!json_is_array(t))
		return mgt_err(MGT_ERR_VOCAB, "%s: \"chat_template\" %s", cfgpath, t ? "is neither a string nor a list" : "is missing");
	size_t i;
	json_t *x;
	mgt_status st = MGT_OK;
	json_array_foreach(t, i, x) {
		const char *name = json_string_value(json_object_get(x, "name"));
		json_t *src = json_object_get(x, "template");
		if (!name || !json_is_string(src))
			return mgt_err(MGT_ERR_VOCAB, "%s: chat_template[%zu]: expected {\"name\": ..., \"template\": ...}", cfgpath, i);
		mgt_chat_template **slot = !strcmp(name, "default") ? &ch->t : !strcmp(name, "tool_use") ? &ch->tool_use : NULL;
		if (!slot || *slot)
			continue;
		char label[4200];
		snprintf(label, sizeof label, "%s[%s]", cfgpath, name);
		if ((st = mgt_chat_template_parse(json_string_value(src), json_string_length(src), label, slot)))
			return st;
	}
	if (!ch->t)
		return mgt_err(MGT_ERR_VOCAB, "%s: the chat_template list has no \"default\" template (use --chat-template)", cfgpath);
	return MGT_OK;
}

mgt_status mgt_chat_config_open(mgt_chat_config *ch, const char *tmpl_file, const char *model)
{
	char cfgpath[4096];
	memset(ch, 0, sizeof *ch);
	json_t *cfg = load_tok_config(model, cfgpath, sizeof cfgpath);
	ch->specials = cfg ? config_specials(cfg) : json_object();
	mgt_status st = MGT_OK;
	if (tmpl_file) {
		char *src;
		size_t n;
		if (!(st = mgt_file_read(tmpl_file, &src, &n))) {
			st = mgt_chat_template_parse(src, n, tmpl_file, &ch->t);
			free(src);
		}
	} else if (!cfg) {
		st = mgt_err(MGT_ERR_USAGE, "no chat template: %s has no tokenizer_config.json beside it (with a "
			     "chat_template); give a template file (--chat-template FILE)", model ? model : "no --tokenizer-model");
	} else {
		st = config_templates(ch, json_object_get(cfg, "chat_template"), cfgpath);
	}
	json_decref(cfg);
	return st;
}

void mgt_chat_config_close(mgt_chat_config *c)
{
	mgt_chat_template_free(c->t);
	mgt_chat_template_free(c->tool_use);
	json_decref(c->specials);
	memset(c, 0, sizeof *c);
}

mgt_status mgt_chat_render(const mgt_chat_config *c, const json_t *kwargs, const char *date, mgt_buf *out)
{
	/* transformers: template_kwargs = {**special_tokens_map, **kwargs} */
	json_t *vars = json_copy(c->specials);
	if (!vars) return MGT_ERR_NOMEM;
	json_object_update(vars, (json_t *)kwargs);
	/* apply_chat_template renders with tools=None, documents=None, add_generation_prompt=False
	 * when they are not given: defined, and none */
	if (!json_object_get(vars, "add_generation_prompt"))
		json_object_set_new(vars, "add_generation_prompt", json_false());
	if (!json_object_get(vars, "tools"))
		json_object_set_new(vars, "tools", json_null());
	if (!json_object_get(vars, "documents"))
		json_object_set_new(vars, "documents", json_null());
	const mgt_chat_template *t = c->tool_use && !json_is_null(json_object_get(vars, "tools")) ? c->tool_use : c->t;
	mgt_status st = mgt_chat_template_render(t, vars, date, out);
	json_decref(vars);
	return st;
}

/* id into out unless there already */
static mgt_status push_once(mgt_ids *out, int32_t id)
{
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i] == id)
			return MGT_OK;
	return mgt_ids_push(out, id);
}

/* generation_config.json's eos_token_id (transformers' GenerationConfig: an int or a list) */
static mgt_status generation_eos(const mgt_tok *tok, const char *model, mgt_ids *out)
{
	char path[4096];
	beside(model, "generation_config.json", path, sizeof path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return MGT_OK;
	json_error_t e;
	json_t *g = json_loadf(f, 0, &e), *ids = json_object_get(g, "eos_token_id"), *x;
	fclose(f);
	if (json_is_null(ids))
		ids = NULL; /* none */
	mgt_status st = g ? MGT_OK : mgt_err(MGT_ERR_VOCAB, "%s: line %d: %s", path, e.line, e.text);
	json_t *one = json_is_integer(ids) ? json_pack("[O]", ids) : json_incref(ids);
	size_t i;
	json_array_foreach(one, i, x) {
		json_int_t v = json_integer_value(x);
		if (st)
			break;
		if (!json_is_integer(x) || v < 0 || v >= mgt_tok_vocab_size(tok))
			st = mgt_err(MGT_ERR_VOCAB, "%s: eos_token_id: expected ids in [0, %lld), the tokenizer's vocabulary",
				     path, (long long)mgt_tok_vocab_size(tok));
		else
			st = push_once(out, (int32_t)v);
	}
	if (!st && ids && !json_is_array(one))
		st = mgt_err(MGT_ERR_VOCAB, "%s: eos_token_id: expected an id or a list of ids", path);
	json_decref(one);
	json_decref(g);
	return st;
}

mgt_status mgt_chat_end_ids(const mgt_chat_config *c, const mgt_tok *tok, const char *model, mgt_ids *out)
{
	mgt_status st = model ? generation_eos(tok, model, out) : MGT_OK;
	json_t *eos = json_object_get(c->specials, "eos_token");
	mgt_tok_enc *enc = NULL;
	mgt_ids ids = { 0 };
	if (!st && json_is_string(eos) && !(st = mgt_tok_enc_new(&enc, tok)))
		st = mgt_tok_encode(enc, json_string_value(eos), json_string_length(eos), &ids);
	if (!st && ids.n == 1)
		st = push_once(out, ids.v[0]);
	free(ids.v);
	mgt_tok_enc_free(enc);
	return st;
}
