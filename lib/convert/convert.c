/* lib/convert/convert.c: Hugging Face directories <-> mgt checkpoints, tensor by tensor: the file
 * helpers of both ways and mgt -> Hugging Face (Hugging Face -> mgt is hf_in.c). */
#include "convert_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "tok/tok.h"

/* Files of a Hugging Face directory that travel with the model (besides the weights). */
static const char *const side_files[] = {
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
	"special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "vocab.txt", NULL,
};

char *cv_join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = mgt_malloc(n);
	if (p) snprintf(p, n, "%s/%s", a, b);
	return p;
}

bool cv_exists(const char *dir, const char *name)
{
	char *p = cv_join(dir, name);
	struct stat sb;
	bool ok = p && stat(p, &sb) == 0;
	free(p);
	return ok;
}

mgt_status mgt_convert_detect(const char *dir, int *kind)
{
	struct stat sb;
	if (stat(dir, &sb)) return mgt_err(MGT_ERR_IO, "%s: %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode)) return mgt_err(MGT_ERR_USAGE, "%s: not a directory", dir);
	if (cv_exists(dir, "config.json")) *kind = 1;
	else if (cv_mg_detect(dir)) *kind = 3;
	else if (cv_exists(dir, MGT_CKPT_TRACKER)) *kind = 2;
	else return mgt_err(MGT_ERR_USAGE, "%s: neither a Hugging Face model directory (config.json), an mgt "
			    "checkpoint directory (%s) nor a Megatron-LM one (iter_N/mp_rank_* or iter_N/.metadata)", dir,
			    MGT_CKPT_TRACKER);
	return MGT_OK;
}

/* ---- the output directory: built under OUT.tmp.PID, renamed when whole ---- */

mgt_status cv_out_begin(const char *out, char **tmp)
{
	struct stat sb;
	*tmp = NULL;
	if (stat(out, &sb) == 0) return mgt_err(MGT_ERR_EXISTS, "%s: already exists (refusing to overwrite)", out);
	size_t n = strlen(out) + 32;
	if (!(*tmp = mgt_malloc(n))) return MGT_ERR_NOMEM;
	snprintf(*tmp, n, "%s.tmp.%ld", out, (long)getpid());
	if (mkdir(*tmp, 0777)) {
		mgt_status st = mgt_err(MGT_ERR_IO, "%s: %s", *tmp, strerror(errno));
		free(*tmp);
		*tmp = NULL;
		return st;
	}
	return MGT_OK;
}

mgt_status cv_out_end(char *tmp, const char *out, mgt_status st)
{
	if (!tmp) return st;
	if (!st && rename(tmp, out)) st = mgt_err(MGT_ERR_IO, "rename %s to %s: %s", tmp, out, strerror(errno));
	if (st) mgt_ckpt_remove_tree(tmp);
	free(tmp);
	return st;
}

mgt_status cv_write_text(const char *dir, const char *name, const char *text)
{
	char *p = cv_join(dir, name);
	if (!p) return MGT_ERR_NOMEM;
	mgt_afile af;
	mgt_status st = mgt_afile_open(&af, p, 0);
	if (!st) st = mgt_afile_write(&af, text, strlen(text));
	if (!st) st = mgt_afile_write(&af, "\n", 1);
	if (!st) st = mgt_afile_commit(&af);
	else mgt_afile_abort(&af);
	free(p);
	return st;
}

static mgt_status write_json(const char *dir, const char *name, json_t *o)
{
	char *txt = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
	if (!txt) return MGT_ERR_NOMEM;
	mgt_status st = cv_write_text(dir, name, txt);
	free(txt);
	return st;
}

/* Copy the file at src to dir/name. */
static mgt_status copy_file_as(const char *src, const char *dir, const char *name)
{
	char *data = NULL, *dst = NULL;
	size_t n = 0;
	mgt_status st = mgt_file_read(src, &data, &n);
	mgt_afile af;
	if (!st && !(dst = cv_join(dir, name))) st = MGT_ERR_NOMEM;
	if (!st) st = mgt_afile_open(&af, dst, 0);
	if (!st) {
		st = mgt_afile_write(&af, data, n);
		if (st) mgt_afile_abort(&af);
		else st = mgt_afile_commit(&af);
	}
	free(dst);
	free(data);
	return st;
}

static mgt_status copy_file(const char *from_dir, const char *to_dir, const char *name)
{
	char *src = cv_join(from_dir, name);
	mgt_status st = src ? copy_file_as(src, to_dir, name) : MGT_ERR_NOMEM;
	free(src);
	return st;
}

/* Copy the side files of from_dir present there into to_dir, but config.json and
 * generation_config.json when skip_configs. */
mgt_status cv_copy_side_files(const char *from_dir, const char *to_dir, bool skip_configs)
{
	mgt_status st = MGT_OK;
	for (const char *const *f = side_files; !st && *f; f++) {
		if (skip_configs && (!strcmp(*f, "config.json") || !strcmp(*f, "generation_config.json"))) continue;
		if (cv_exists(from_dir, *f)) st = copy_file(from_dir, to_dir, *f);
	}
	return st;
}

json_t *cv_read_json(const char *dir, const char *name, bool required, mgt_status *st)
{
	char *p = cv_join(dir, name);
	json_error_t e;
	json_t *o = NULL;
	if (!p) *st = MGT_ERR_NOMEM;
	else if (!cv_exists(dir, name)) {
		if (required) *st = mgt_err(MGT_ERR_INPUT, "%s: missing", p);
	} else if (!(o = json_load_file(p, 0, &e)) || !json_is_object(o)) {
		*st = mgt_err(MGT_ERR_INPUT, "%s:%d: %s", p, e.line, o ? "expected a JSON object" : e.text);
		json_decref(o);
		o = NULL;
	}
	free(p);
	return o;
}

/* ---- values ---- */

mgt_status cv_check_finite(const float *x, size_t n, const char *file, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return mgt_err(MGT_ERR_INPUT, "%s: tensor %s: element %zu is %s", file, name, i,
				       isnan(x[i]) ? "NaN" : "infinite");
	return MGT_OK;
}

size_t cv_map_numel(const mgt_hf_map *m, int k)
{
	size_t n = 1;
	for (int d = 0; d < m->ndim[k]; d++) n *= (size_t)m->shape[k][d];
	return n;
}

size_t cv_row_numel(const mgt_tensor *t) { return (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1); }

/* Room for the largest row (its sources together are never bigger than the row) and, with
 * datasets, for the largest expert dataset. */
mgt_status cv_scratch_alloc(scratch *b, const mgt_tensor_table *full, bool datasets)
{
	size_t most = 1, whole = 1;
	for (int i = 0; i < full->n; i++) {
		const mgt_tensor *t = &full->t[i];
		size_t n = cv_row_numel(t), d = datasets && t->num_experts > 0 ? n * (size_t)t->num_experts : n;
		if (n > most) most = n;
		if (d > whole) whole = d;
	}
	b->src = mgt_malloc(most * sizeof(float));
	b->whole = b->src ? mgt_malloc(whole * sizeof(float)) : NULL;
	return b->whole ? MGT_OK : MGT_ERR_NOMEM;
}

void cv_scratch_free(scratch *b)
{
	free(b->src);
	free(b->whole);
	free(b->piece);
}

static void buffer_name(const hf_out *h, int layer, int b, char *out, size_t n)
{
	snprintf(out, n, "%sh.%d.%s", h->prefix, layer, cv_gpt2_buffers[b]);
}

/* The recorded GPT-2 buffers: declared (data NULL) or written. */
static mgt_status put_buffers(hf_out *h, bool declare, float *scratch_buf)
{
	json_t *arr = json_object_get(h->hf, "gpt2_buffers");
	int64_t P = h->a.model.max_position_embeddings, shape[4] = {1, 1, P, P};
	mgt_status st = MGT_OK;
	for (int b = 0; b < 2; b++) {
		bool want = false;
		for (size_t i = 0; i < json_array_size(arr); i++)
			want |= !strcmp(json_string_value(json_array_get(arr, i)) ? json_string_value(json_array_get(arr, i)) : "",
					cv_gpt2_buffers[b]);
		if (!want) continue;
		if (!declare && b == 0)
			for (int64_t r = 0; r < P; r++)
				for (int64_t c = 0; c < P; c++) scratch_buf[r * P + c] = c <= r ? 1.0f : 0.0f;
		if (!declare && b == 1) scratch_buf[0] = -1e4f;
		for (int64_t l = 0; !st && l < h->a.model.num_layers; l++) {
			char name[96];
			buffer_name(h, (int)l, b, name, sizeof name);
			st = declare ? mgt_st_writer_add(h->w, name, h->dt, b ? 0 : 4, shape)
				     : mgt_st_writer_put_f32(h->w, name, scratch_buf);
		}
	}
	return st;
}

/* Take them out of args (before the table merges the rest) and into c once merged: bert_args_apply. */
typedef struct {
	bool bert, binary, erf, t5, hybrid;
} bert_keys;

static void bert_args_take(json_t *args, bert_keys *k)
{
	const char *fam = json_string_value(json_object_get(args, "family"));
	k->bert = fam && !strcmp(fam, "bert");
	k->t5 = fam && !strcmp(fam, "t5");
	k->hybrid = fam && !strcmp(fam, "hybrid");
	k->binary = !json_is_false(json_object_get(args, "bert_binary_head"));
	k->erf = json_is_true(json_object_get(args, "no_bias_gelu_fusion"));
	json_object_del(args, "family");
	json_object_del(args, "bert_binary_head");
	json_object_del(args, "no_bias_gelu_fusion");
}

static void bert_args_apply(const bert_keys *k, mgt_model_config *c)
{
	if (k->t5) snprintf(c->family, sizeof c->family, "t5"); /* refused by the family checks */
	if (k->hybrid) snprintf(c->family, sizeof c->family, "hybrid");
	if (!k->bert) return;
	snprintf(c->family, sizeof c->family, "bert");
	c->bert_binary_head = k->binary;
	c->no_bias_gelu_fusion = k->erf;
}


/* ---- mgt -> Hugging Face ---- */


/* The unpadded vocabulary: recorded by the converter, config.json's, or the tokenizer's. */
static mgt_status vocab_size(hf_out *h, int64_t *v)
{
	json_t *tk = json_object_get(h->meta, "tokenizer");
	json_t *x = json_object_get(tk, "vocab_size");
	if (!json_is_integer(x)) x = json_object_get(json_object_get(h->hf, "config"), "vocab_size");
	if (json_is_integer(x)) {
		*v = json_integer_value(x);
		return MGT_OK;
	}
	if (h->a.vocab_size > 0 && h->a.tokenizer_type && !strcmp(h->a.tokenizer_type, "NullTokenizer")) {
		*v = h->a.vocab_size;
		return MGT_OK;
	}
	mgt_tok_opts to = {.type = h->a.tokenizer_type, .vocab_file = h->a.vocab_file, .merge_file = h->a.merge_file,
			   .model = h->a.tokenizer_model, .tiktoken_pattern = h->a.tiktoken_pattern,
			   .tiktoken_num_special = (int)h->a.tiktoken_num_special_tokens, .vocab_size = h->a.vocab_size,
			   .null_eod_id = h->a.null_tokenizer_eod_id};
	mgt_tok *t;
	mgt_status st = mgt_tok_load(&t, &to);
	if (st) return mgt_err_ctx(st, "%s: the vocabulary size is not recorded and the checkpoint's tokenizer "
				   "does not load", mgt_source_dir(h->src));
	*v = mgt_tok_vocab_size(t);
	mgt_tok_free(t);
	return MGT_OK;
}

/* The command line's tokenizer flags over the checkpoint's arguments (mgt_tok_opts_apply). */
static mgt_status apply_tok_flags(mgt_args *a, const mgt_tok_opts *over)
{
	mgt_tok_opts t = {.type = a->tokenizer_type, .vocab_file = a->vocab_file, .merge_file = a->merge_file,
			  .model = a->tokenizer_model};
	mgt_tok_opts_apply(&t, over);
	const char *src[4] = {t.type, t.vocab_file, t.merge_file, t.model};
	char **fields[4] = {&a->tokenizer_type, &a->vocab_file, &a->merge_file, &a->tokenizer_model}, *vals[4];
	bool nomem = false;
	for (int i = 0; i < 4; i++) { /* copied first: t's pointers may be a's own strings */
		vals[i] = src[i] ? mgt_strdup(src[i]) : NULL;
		if (src[i] && !vals[i]) nomem = true;
	}
	for (int i = 0; i < 4; i++) {
		if (nomem) {
			free(vals[i]);
			continue;
		}
		free(*fields[i]);
		*fields[i] = vals[i];
	}
	return nomem ? MGT_ERR_NOMEM : MGT_OK;
}

static mgt_status read_args(hf_out *h)
{
	json_error_t e;
	h->meta = json_loads(mgt_source_metadata(h->src), 0, &e);
	json_t *args = json_deep_copy(json_object_get(h->meta, "args"));
	if (!json_is_object(args)) {
		json_decref(args);
		return mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: not an mgt checkpoint (no \"args\")", mgt_source_dir(h->src));
	}
	json_t *pv = json_object_get(args, "padded_vocab_size");
	int64_t padded = json_integer_value(pv);
	static const char *const derived[] = {"padded_vocab_size", "num_microbatches", "data_parallel_size", "world_size"};
	for (size_t i = 0; i < sizeof derived / sizeof derived[0]; i++) json_object_del(args, derived[i]);
	h->hf = json_object_get(h->meta, "hf");
	bert_keys bk;
	bert_args_take(args, &bk);
	mgt_status st = mgt_args_init(&h->a);
	if (!st) st = mgt_args_merge_json(&h->a, args, "metadata.json args");
	bert_args_apply(&bk, &h->a.model);
	if (!st) st = mgt_args_tok_files_use(&h->a, h->meta, mgt_source_dir(h->src)); /* the checkpoint's own copies */
	if (!st && h->o->tok) st = apply_tok_flags(&h->a, h->o->tok);
	json_decref(args);
	int64_t v = 0;
	if (!st) st = vocab_size(h, &v);
	h->a.model.vocab_size = v;
	if (!st) st = mgt_model_config_finalize(&h->a.model, 1);
	if (!st && padded) h->a.model.padded_vocab_size = padded; /* the padding it was saved with */
	if (!st && v > h->a.model.padded_vocab_size)
		st = mgt_err(MGT_ERR_INPUT, "%s: the vocabulary has %lld tokens (recorded, or the tokenizer's) but the "
			     "checkpoint's embedding only %lld rows", mgt_source_dir(h->src), (long long)v,
			     (long long)h->a.model.padded_vocab_size);
	return st;
}

/* The Hugging Face family of the output and its check; none for a Megatron-LM output (--save-format
 * torch or torch_dist), whose names are Megatron's own: a model no Hugging Face family holds (one
 * trained with --moe-latent-size as a GPT MoE) is still written there. */
static mgt_status pick_family(hf_out *h)
{
	const char *mt = json_string_value(json_object_get(json_object_get(h->hf, "config"), "model_type"));
	const char *sf = h->o->save_format;
	if (sf && (!strcmp(sf, "torch") || !strcmp(sf, "torch_dist"))) return MGT_OK;
	mgt_status st = MGT_OK;
	if (h->o->family) st = mgt_hf_family_parse(h->o->family, &h->f);
	else if (mt) st = mgt_hf_family_parse(mt, &h->f);
	else st = cv_family_infer(&h->a.model, &h->f);
	if (!st) st = cv_family_check(&h->a.model, h->f);
	h->prefix = json_string_value(json_object_get(h->hf, "gpt2_prefix"));
	if (!h->prefix) h->prefix = "transformer.";
	return st;
}

static const char *dt_torch(mgt_dt dt) { return dt == MGT_ST_BF16 ? "bfloat16" : dt == MGT_ST_F16 ? "float16" : "float32"; }

static mgt_status pick_dtype(hf_out *h)
{
	const char *d = h->o->dtype;
	if (!d) {
		const char *td = json_string_value(json_object_get(json_object_get(h->hf, "config"), "torch_dtype"));
		h->dt = cv_torch_dtype_dt(td);
		return MGT_OK;
	}
	if (!strcmp(d, "bf16")) h->dt = MGT_ST_BF16;
	else if (!strcmp(d, "fp16")) h->dt = MGT_ST_F16;
	else if (!strcmp(d, "fp32")) h->dt = MGT_ST_F32;
	else return mgt_err(MGT_ERR_USAGE, "--dtype %s: expected bf16, fp16 or fp32", d);
	return MGT_OK;
}

/* MegatronBertForMaskedLM's token-type embeddings for a BERT without the binary head: zeros
 * (see bert_token_types_in), [the recorded config.json's type_vocab_size, else 2; h]. */
static mgt_status bert_token_types_out(hf_out *h, bool declare)
{
	const mgt_model_config *c = &h->a.model;
	if (mgt_hf_spec_of(h->f)->names != MGT_HF_NAMES_BERT || c->bert_binary_head) return MGT_OK;
	int64_t shape[2] = {cv_bert_type_vocab(json_object_get(h->hf, "config")), c->hidden_size};
	if (declare) return mgt_st_writer_add(h->w, BERT_TOKTYPE, h->dt, 2, shape);
	float *z = calloc((size_t)(shape[0] * shape[1]), sizeof(float));
	mgt_status st = z ? mgt_st_writer_put_f32(h->w, BERT_TOKTYPE, z) : mgt_err(MGT_ERR_NOMEM, "out of memory");
	free(z);
	return st;
}

static mgt_status declare(hf_out *h)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < h->full.n; i++) {
		mgt_hf_map m;
		st = mgt_hf_map_tensor(&h->a.model, h->f, h->prefix, &h->full.t[i], &m);
		for (int k = 0; !st && k < m.n; k++) st = mgt_st_writer_add(h->w, m.name[k], h->dt, m.ndim[k], m.shape[k]);
	}
	if (!st && gpt2_names(h->f)) st = put_buffers(h, true, NULL);
	if (!st) st = bert_token_types_out(h, true);
	return st ? st : mgt_st_writer_begin(h->w);
}

static mgt_status export_row(hf_out *h, const mgt_tensor *g, scratch *b)
{
	mgt_hf_map m;
	mgt_status st = mgt_hf_map_tensor(&h->a.model, h->f, h->prefix, g, &m);
	if (!st) st = cv_mgt_read(h, g, b->whole);
	if (st) return st;
	float *dst[3] = {b->src, NULL, NULL};
	for (int k = 1; k < m.n; k++) dst[k] = dst[k - 1] + cv_map_numel(&m, k - 1);
	mgt_hf_from_mgt(&h->a.model, &m, g, b->whole, dst);
	for (int k = 0; !st && k < m.n; k++) st = mgt_st_writer_put_f32(h->w, m.name[k], dst[k]);
	return st;
}

/* BertTokenizer's tokenizer_config.json for the WordPiece tokenizer of a: do_lower_case, and the
 * tokens the tokenizer adds after vocab.txt's lines (BertWordPieceCase's <extra_id_0..99>, ids
 * V..V+99) as transformers reads added tokens: added_tokens_decoder (id -> special token) and
 * additional_special_tokens in tokenizer_config.json, and added_tokens.json (token -> id; the
 * older files' form), so that the directory's tokenizer has config.json's vocab_size. */
static mgt_status write_wordpiece_config(hf_out *h)
{
	const mgt_args *a = &h->a;
	mgt_tok_opts to = {.type = a->tokenizer_type, .vocab_file = a->vocab_file, .null_eod_id = -1};
	mgt_tok *t = NULL;
	mgt_status st = mgt_tok_load(&t, &to);
	char *text = NULL;
	size_t n = 0, lines = 0;
	if (!st) st = mgt_file_read(a->vocab_file, &text, &n);
	for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
	if (n && text[n - 1] != '\n') lines++;
	free(text);
	json_t *cfg = json_pack("{s:s, s:b}", "tokenizer_class", "BertTokenizer", "do_lower_case",
				strcmp(a->tokenizer_type, "BertWordPieceCase") != 0);
	json_t *dec = json_object(), *names = json_array(), *ids = json_object();
	for (int32_t id = (int32_t)lines; !st && id < mgt_tok_vocab_size(t); id++) {
		size_t len;
		const char *b = mgt_tok_token_bytes(t, id, &len);
		char key[16], *tok = b ? mgt_malloc(len + 1) : NULL;
		if (tok) memcpy(tok, b, len), tok[len] = 0;
		if (!tok) {
			st = mgt_err(MGT_ERR_NOMEM, "out of memory");
			break;
		}
		snprintf(key, sizeof key, "%d", id);
		json_object_set_new(dec, key, json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", tok, "lstrip", 0,
							"normalized", 0, "rstrip", 0, "single_word", 0, "special", 1));
		json_array_append_new(names, json_string(tok));
		json_object_set_new(ids, tok, json_integer(id));
		free(tok);
	}
	if (!st && json_array_size(names)) {
		json_object_set(cfg, "added_tokens_decoder", dec);
		json_object_set(cfg, "additional_special_tokens", names);
		st = write_json(h->tmp, "added_tokens.json", ids);
	}
	if (!st) st = write_json(h->tmp, "tokenizer_config.json", cfg);
	json_decref(cfg);
	json_decref(dec);
	json_decref(names);
	json_decref(ids);
	mgt_tok_free(t);
	return st;
}

/* A checkpoint without SAVE/hf/ (trained by mgt, or saved by a run that loaded a converted one):
 * the tokenizer files its arguments name, as vocab.json, merges.txt and the tokenizer model's
 * own name, with tokenizer_config.json and special_tokens_map.json from beside it. */
static mgt_status copy_tokenizer_args(hf_out *h)
{
	const mgt_args *a = &h->a;
	mgt_status st = MGT_OK;
	bool wordpiece = a->tokenizer_type && !strncmp(a->tokenizer_type, "BertWordPiece", 13);
	if (wordpiece && a->vocab_file && !access(a->vocab_file, R_OK)) { /* BertTokenizer's files */
		st = copy_file_as(a->vocab_file, h->tmp, "vocab.txt");
		return st ? st : write_wordpiece_config(h);
	}
	if (a->vocab_file && a->merge_file && !access(a->vocab_file, R_OK) && !access(a->merge_file, R_OK)) {
		st = copy_file_as(a->vocab_file, h->tmp, "vocab.json");
		if (!st) st = copy_file_as(a->merge_file, h->tmp, "merges.txt");
	}
	const char *m = a->tokenizer_model;
	if (st || !m || access(m, R_OK)) return st;
	const char *slash = strrchr(m, '/');
	st = copy_file_as(m, h->tmp, slash ? slash + 1 : m);
	char *dir = slash ? mgt_strdup(m) : mgt_strdup(".");
	if (dir && slash) dir[slash - m] = 0;
	static const char *const extra[] = {"tokenizer_config.json", "special_tokens_map.json"};
	for (int i = 0; dir && !st && i < 2; i++)
		if (cv_exists(dir, extra[i])) st = copy_file(dir, h->tmp, extra[i]);
	free(dir);
	return st;
}

static mgt_status write_configs(hf_out *h)
{
	json_t *cfg = json_deep_copy(json_object_get(h->hf, "config"));
	if (!cfg) cfg = cv_args_to_config(&h->a.model, h->f, dt_torch(h->dt));
	else json_object_set_new(cfg, "torch_dtype", json_string(dt_torch(h->dt)));
	mgt_status st = cfg ? write_json(h->tmp, "config.json", cfg) : MGT_ERR_NOMEM;
	json_decref(cfg);
	json_t *gen = json_object_get(h->hf, "generation_config");
	if (!st && json_is_object(gen)) st = write_json(h->tmp, "generation_config.json", gen);
	char *side = cv_join(h->o->load_dir, "hf");
	if (!st && side && cv_exists(h->o->load_dir, "hf")) st = cv_copy_side_files(side, h->tmp, true);
	else if (!st) st = copy_tokenizer_args(h);
	free(side);
	return st;
}

static mgt_status out_convert(hf_out *h)
{
	const mgt_convert_opts *o = h->o;
	scratch b = {0};
	double t0 = mgt_now();
	mgt_status st = cv_mgt_open(h, true);
	if (!st) st = pick_dtype(h);
	if (!st) st = cv_out_begin(o->save_dir, &h->tmp);
	if (!st) st = mgt_st_writer_new(&h->w, h->tmp, o->max_shard_bytes ? o->max_shard_bytes : 5000000000ull);
	if (!st) st = declare(h);
	if (!st) st = cv_scratch_alloc(&b, &h->full, false);
	for (int i = 0; !st && i < h->full.n; i++) st = export_row(h, &h->full.t[i], &b);
	int64_t P = h->a.model.max_position_embeddings;
	float *mask = !st && gpt2_names(h->f) ? mgt_malloc((size_t)(P * P) * sizeof(float)) : NULL;
	if (mask) st = put_buffers(h, false, mask);
	else if (!st && gpt2_names(h->f)) st = MGT_ERR_NOMEM;
	free(mask);
	if (!st) st = bert_token_types_out(h, false);
	cv_scratch_free(&b);
	if (!st) st = mgt_st_writer_finish(h->w);
	if (!st) st = write_configs(h);
	st = cv_out_end(h->tmp, o->save_dir, st);
	h->tmp = NULL;
	if (!st && o->log)
		fprintf(o->log, "converted %s (iteration %lld) to %s: %s, %s, %d tensors, %lld parameters (the "
			"checkpoint's %lld less %lld of vocabulary padding), %.1f s\n", o->load_dir,
			(long long)mgt_source_iteration(h->src), o->save_dir, mgt_hf_model_type(h->f), mgt_dt_name(h->dt), h->full.n,
			(long long)(h->full.global_numel - mgt_model_padding_params(&h->a.model)),
			(long long)h->full.global_numel, (long long)mgt_model_padding_params(&h->a.model), mgt_now() - t0);
	return st;
}

/* Refusing Mixture-of-Experts models (expert datasets [E, rows, cols], routers, shared
 * experts; mgt-ckpt(5)) where they are not converted (GGUF): naming the first such dataset of a
 * checkpoint, or the Hugging Face family. */
mgt_status cv_no_experts(const hf_out *h)
{
	if (mgt_source_kind(h->src) == 1)
		return h->a.model.num_experts <= 0 ? MGT_OK
			: mgt_err(MGT_ERR_USAGE, "%s: a Mixture-of-Experts model (%s), which is not exported to GGUF "
				  "(only dense models are)", h->o->load_dir, mgt_hf_model_type(h->f));
	for (size_t i = 0; i < mgt_source_count(h->src); i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM];
		mgt_ckpt_dtype dt;
		const char *name = mgt_source_tensor(h->src, i, &nd, gs, &dt);
		if (strstr(name, ".mlp.experts.") || strstr(name, ".mlp.router.") || strstr(name, ".mlp.shared_experts."))
			return mgt_err(MGT_ERR_USAGE, "%s: %s: a Mixture-of-Experts checkpoint, which is not exported to "
				       "GGUF (only dense models are)", mgt_source_dir(h->src), name);
	}
	return MGT_OK;
}

/* The source: a Hugging Face directory in place, or the checkpoint opened and checked as before
 * (mgt_ckpt_suggest naming the newest whole iteration on damage). */
static mgt_status open_src(hf_out *h)
{
	int kind;
	mgt_status st = mgt_convert_detect(h->o->load_dir, &kind);
	if (!st && kind == 1) return mgt_source_open(h->o->load_dir, 0, &h->src);
	if (!st && kind == 3) return mgt_source_open(h->o->load_dir, h->o->ckpt_step, &h->src);
	mgt_ckpt *ck = NULL;
	st = mgt_ckpt_open(h->o->load_dir, h->o->ckpt_step, &ck);
	if (!st) st = mgt_ckpt_check(ck);
	if (st == MGT_ERR_FORMAT) st = mgt_ckpt_suggest(h->o->load_dir, h->o->ckpt_step, st);
	if (st) {
		mgt_ckpt_close(ck);
		return st;
	}
	return mgt_source_from_ckpt(ck, &h->src);
}

mgt_status cv_mgt_open(hf_out *h, bool experts)
{
	mgt_status st = open_src(h);
	if (!st && !experts && mgt_source_kind(h->src) == 2) st = cv_no_experts(h);
	if (!st) st = read_args(h);
	if (!st) st = pick_family(h);
	if (!st && !experts && mgt_source_kind(h->src) == 1) st = cv_no_experts(h);
	if (!st) st = mgt_tensor_table_build(&h->full, &h->a.model, 1, 0, 1, 0);
	return st;
}

mgt_status cv_mgt_read(hf_out *h, const mgt_tensor *g, float *whole)
{
	int64_t zero[2] = {0, 0};
	mgt_status st = g->num_experts > 0 ? mgt_source_row_read(h->src, "", g, 0, g->numel, whole) /* [1, rows, cols] at e */
		: mgt_source_read(h->src, g->name, g->ndim, g->shape, zero, g->shape, MGT_CKPT_F32, whole);
	if (st == MGT_ERR_FORMAT && mgt_source_kind(h->src) == 2)
		return mgt_ckpt_suggest(h->o->load_dir, mgt_source_iteration(h->src), st);
	if (!st) st = cv_check_finite(whole, cv_row_numel(g), mgt_source_dir(h->src), g->name);
	/* --apply-layernorm-1p: the weight the model applies, 1 + w (Hugging Face and GGUF store that) */
	for (size_t i = 0; !st && h->a.model.apply_layernorm_1p && mgt_tensor_is_norm_weight(g) && i < cv_row_numel(g); i++)
		whole[i] += 1.0f;
	return st;
}

void cv_mgt_close(hf_out *h)
{
	mgt_st_writer_free(h->w);
	mgt_tensor_table_free(&h->full);
	mgt_source_close(h->src);
	json_decref(h->meta);
	mgt_args_free(&h->a);
}

mgt_status mgt_convert_mgt_to_hf(const mgt_convert_opts *o)
{
	hf_out h = {.o = o};
	mgt_status st = out_convert(&h);
	cv_mgt_close(&h);
	return st;
}
