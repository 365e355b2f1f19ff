/* lib/convert/hf_in.c: reading a Hugging Face directory (config.json, safetensors) and writing it as
 * an mgt checkpoint, tensor by tensor (see convert.h). */
#include "convert_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "tok/tok.h"

/* ---- Hugging Face -> mgt ---- */


mgt_dt cv_torch_dtype_dt(const char *s)
{
	if (!s) return MGT_ST_F32;
	return !strcmp(s, "bfloat16") ? MGT_ST_BF16 : !strcmp(s, "float16") ? MGT_ST_F16 : MGT_ST_F32;
}

/* Read HF source k of map m into buf after checking it against config.json. */
static mgt_status cv_hf_read(hf_in *h, const mgt_hf_map *m, int k, float *buf)
{
	const mgt_st_tensor *x = mgt_st_find(h->st, m->name[k]);
	if (!x) return mgt_err(MGT_ERR_INPUT, "%s: tensor %s is missing (config.json describes a %s model that has it)",
			       h->o->load_dir, m->name[k], mgt_hf_model_type(h->f));
	for (size_t i = 0; i < mgt_st_count(h->st); i++)
		if (mgt_st_at(h->st, i) == x) h->used[i] = true;
	bool shape_ok = x->ndim == m->ndim[k];
	for (int d = 0; shape_ok && d < x->ndim; d++) shape_ok = x->shape[d] == m->shape[k][d];
	if (!shape_ok) {
		char want[80] = "", got[80] = "";
		for (int d = 0; d < m->ndim[k]; d++)
			snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "[", (long long)m->shape[k][d]);
		for (int d = 0; d < x->ndim && strlen(got) < 48; d++)
			snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "[", (long long)x->shape[d]);
		return mgt_err(MGT_ERR_INPUT, "%s: tensor %s has shape %s]; config.json implies %s]", x->file, x->name,
			       got[0] ? got : "[", want);
	}
	if (x->dtype != MGT_ST_F32 && x->dtype != MGT_ST_F16 && x->dtype != MGT_ST_BF16)
		return mgt_err(MGT_ERR_INPUT, "%s: tensor %s has dtype %s (expected F32, F16 or BF16)", x->file, x->name,
			       mgt_dt_name(x->dtype));
	if (h->torch_dtype && x->dtype != cv_torch_dtype_dt(h->torch_dtype))
		return mgt_err(MGT_ERR_INPUT, "%s: tensor %s is %s but config.json's torch_dtype is %s", x->file, x->name,
			       mgt_dt_name(x->dtype), h->torch_dtype);
	mgt_status st = mgt_st_read_f32(h->st, x, buf);
	return st ? st : cv_check_finite(buf, cv_map_numel(m, k), x->file, x->name);
}

/* Rank r of the tp x pp x ep layout: its tensor, pipeline and expert parallel ranks. */
int cv_rank_tp(const hf_in *h, int r) { return r % h->o->tp; }
int cv_rank_pp(const hf_in *h, int r) { return r / h->o->tp % h->o->pp; }
int cv_rank_ep(const hf_in *h, int r) { return r / (h->o->tp * h->o->pp); }

/* The shard file of box `box` of rank r: model_tpTT_ppPPP_dpDDD[_box].h5, DDD the expert-parallel
 * rank (its data-parallel rank in a run whose data parallelism holds expert parallelism). */
static mgt_status shard_for(hf_in *h, int rank, int box, mgt_ckpt_shard **out)
{
	mgt_ckpt_shard **sh = &h->shards[rank * MGT_TENSOR_MAX_BOXES + box];
	if (!*sh) {
		char name[64];
		int len = snprintf(name, sizeof name, "model_tp%02d_pp%03d_dp%03d", cv_rank_tp(h, rank), cv_rank_pp(h, rank),
				   cv_rank_ep(h, rank));
		snprintf(name + len, sizeof name - (size_t)len, box ? "_%d.h5" : ".h5", box);
		mgt_status st = mgt_ckpt_shard_open(h->tmp, h->iteration, name, sh);
		if (st) return st;
	}
	*out = *sh;
	return MGT_OK;
}

/* The box [off, off + shape) of the whole tensor g as a contiguous buffer: whole itself when the
 * box is the whole tensor. */
static const float *box_data(const mgt_tensor *g, const float *whole, const int64_t off[2], const int64_t shape[2],
			     scratch *b)
{
	int64_t cols = g->ndim == 2 ? g->shape[1] : 1, bc = g->ndim == 2 ? shape[1] : 1;
	size_t n = (size_t)(shape[0] * bc);
	if (n == cv_row_numel(g)) return whole;
	if (n > b->piece_n) {
		float *p = mgt_realloc(b->piece, n * sizeof(float));
		if (!p) return NULL;
		b->piece = p;
		b->piece_n = n;
	}
	for (int64_t i = 0; i < shape[0]; i++)
		memcpy(b->piece + i * bc, whole + (off[0] + i) * cols + (g->ndim == 2 ? off[1] : 0), (size_t)bc * sizeof(float));
	return b->piece;
}

/* Write each rank's pieces of the global tensor g (row of the full table, whole [g->shape]):
 * the dense rows on expert-parallel rank 0 only; never the last stage's tied word embeddings. */
static mgt_status scatter(hf_in *h, const mgt_tensor *g, const float *whole, scratch *b)
{
	char name[240];
	snprintf(name, sizeof name, "%s%s", h->kprefix ? h->kprefix : "", g->name);
	for (int r = 0; r < h->nranks; r++) {
		const mgt_tensor *x = mgt_tensor_table_find(&h->ranks[r], g->name);
		if (!x || cv_rank_ep(h, r) || (x->role == MGT_T_WORD_EMB && cv_rank_pp(h, r))) continue;
		int64_t off[MGT_TENSOR_MAX_BOXES][2], shape[MGT_TENSOR_MAX_BOXES][2];
		size_t first[MGT_TENSOR_MAX_BOXES];
		int nb = mgt_tensor_boxes(x, 0, x->numel, off, shape, first);
		for (int k = 0; k < nb; k++) {
			mgt_ckpt_piece p = {.name = name, .ndim = g->ndim, .dtype = MGT_CKPT_F32,
					    .data = box_data(g, whole, off[k], shape[k], b)};
			if (!p.data) return MGT_ERR_NOMEM;
			for (int d = 0; d < g->ndim; d++) {
				p.global_shape[d] = g->shape[d];
				p.offset[d] = off[k][d];
				p.shape[d] = shape[k][d];
			}
			mgt_ckpt_shard *sh;
			mgt_status st = shard_for(h, r, k, &sh);
			if (!st) st = mgt_ckpt_shard_put(sh, &p);
			if (st) return st;
		}
	}
	return MGT_OK;
}

/* Row g of the table from its Hugging Face sources into dst ([g->shape]). */
mgt_status cv_hf_row(hf_in *h, const mgt_tensor *g, scratch *b, float *dst)
{
	mgt_hf_map m;
	mgt_status st = mgt_hf_map_tensor(&h->a.model, h->f, h->prefix, g, &m);
	const float *src[3] = {0};
	size_t at = 0;
	for (int k = 0; !st && k < m.n; k++) {
		src[k] = b->src + at;
		st = cv_hf_read(h, &m, k, b->src + at);
		at += cv_map_numel(&m, k);
	}
	if (!st) mgt_hf_to_mgt(&h->a.model, &m, g, src, dst);
	return st;
}

/* Row g made whole from its Hugging Face sources (the source, cv_source_whole), then scattered. */
static mgt_status convert_row(hf_in *h, const mgt_tensor *g, scratch *b)
{
	const float *whole;
	char name[240];
	snprintf(name, sizeof name, "%s%s", h->kprefix ? h->kprefix : "", g->name);
	mgt_status st = cv_source_whole(h->src, name, &whole);
	return st ? st : scatter(h, g, whole, b);
}

/* The expert dataset of expert row i0 of the full table (its first row), made whole by the source
 * ([E, rows, cols], expert e at e * rows * cols; cv_source_whole), then each rank's experts
 * e0 .. e0 + k - 1 written as one piece [k, box] per box of its tensor-parallel part
 * (mgt-ckpt(5) EXPERT DATASETS: the pieces mgt-train's saver writes). */
static mgt_status convert_dataset(hf_in *h, int i0, scratch *b)
{
	const mgt_tensor *g0 = &h->full.t[i0];
	size_t n = cv_row_numel(g0);
	const float *whole;
	char name[240];
	snprintf(name, sizeof name, "%s%s", h->kprefix ? h->kprefix : "", g0->dataset);
	mgt_status st = cv_source_whole(h->src, name, &whole);
	int64_t cols = g0->ndim == 2 ? g0->shape[1] : 1;
	for (int r = 0; !st && r < h->nranks; r++) {
		const mgt_tensor_table *tt = &h->ranks[r];
		const mgt_tensor *x = NULL;
		int k = 0;
		for (int j = 0; j < tt->n; j++)
			if (tt->t[j].num_experts > 0 && !strcmp(tt->t[j].dataset, g0->dataset)) {
				if (!x) x = &tt->t[j];
				k++;
			}
		if (!x) continue; /* another pipeline stage's layer */
		int64_t off[MGT_TENSOR_MAX_BOXES][2], shape[MGT_TENSOR_MAX_BOXES][2];
		size_t first[MGT_TENSOR_MAX_BOXES];
		int nb = mgt_tensor_boxes(x, 0, x->numel, off, shape, first);
		for (int q = 0; !st && q < nb; q++) {
			int64_t bc = g0->ndim == 2 ? shape[q][1] : 1;
			size_t per = (size_t)(shape[q][0] * bc), need = per * (size_t)k;
			const float *data = whole; /* the whole dataset (one rank holds it all) as it is */
			if (per != n || k != g0->num_experts) {
				if (need > b->piece_n) {
					float *p = mgt_realloc(b->piece, need * sizeof(float));
					if (!p) return MGT_ERR_NOMEM;
					b->piece = p;
					b->piece_n = need;
				}
				for (int e = 0; e < k; e++) {
					const float *w = whole + (size_t)(x->expert + e) * n;
					for (int64_t i = 0; i < shape[q][0]; i++)
						memcpy(b->piece + (size_t)e * per + (size_t)(i * bc),
						       w + (off[q][0] + i) * cols + (g0->ndim == 2 ? off[q][1] : 0),
						       (size_t)bc * sizeof(float));
				}
				data = b->piece;
			}
			mgt_ckpt_piece p = {.name = name, .ndim = g0->ndim + 1, .dtype = MGT_CKPT_F32, .data = data};
			p.global_shape[0] = g0->num_experts;
			p.offset[0] = x->expert;
			p.shape[0] = k;
			for (int d = 0; d < g0->ndim; d++) {
				p.global_shape[d + 1] = g0->shape[d];
				p.offset[d + 1] = off[q][d];
				p.shape[d + 1] = shape[q][d];
			}
			mgt_ckpt_shard *sh;
			st = shard_for(h, r, q, &sh);
			if (!st) st = mgt_ckpt_shard_put(sh, &p);
		}
	}
	return st;
}

mgt_status cv_write_rows(hf_in *h, scratch *b)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < h->full.n; i++)
		if (h->full.t[i].num_experts <= 0) st = convert_row(h, &h->full.t[i], b);
		else if (!mgt_ckpt_row_seen(&h->full, i)) st = convert_dataset(h, i, b);
	return st;
}

/* GPT-2's causal-mask buffers (h.N.attn.bias [1, 1, P, P] lower-triangular ones, and the older
 * h.N.attn.masked_bias, a scalar -1e4): not parameters, skipped on the way in, recorded, and made
 * again on the way out so that the files round-trip. */
const char *const cv_gpt2_buffers[2] = {"attn.bias", "attn.masked_bias"};

static int gpt2_buffer(const char *name)
{
	const char *p = name;
	int layer, used = 0;
	if (!strncmp(p, "transformer.", 12)) p += 12;
	if (sscanf(p, "h.%d.%n", &layer, &used) != 1 || !used) return -1;
	for (int i = 0; i < 2; i++)
		if (!strcmp(p + used, cv_gpt2_buffers[i])) return i;
	return -1;
}

/* MegatronBert's tensors that are no parameters of their own: the position_ids buffer
 * (arange, saved by older transformers) and, tied, cls.predictions.decoder.weight and .bias, the
 * word embeddings' and cls.predictions.bias's bytes again (safetensors files keep one name of a
 * shared tensor, older files both): accepted when they are the same bytes.  *skip: x is one. */
static mgt_status bert_unused(hf_in *h, const mgt_st_tensor *x, bool *skip)
{
	const char *twin = NULL;
	*skip = !strcmp(x->name, "bert.embeddings.position_ids");
	if (!strcmp(x->name, "cls.predictions.decoder.bias")) twin = "cls.predictions.bias";
	if (!strcmp(x->name, "cls.predictions.decoder.weight") && !h->a.model.untie_embeddings_and_output_weights)
		twin = "bert.embeddings.word_embeddings.weight";
	const mgt_st_tensor *y = twin ? mgt_st_find(h->st, twin) : NULL;
	if (!y) return MGT_OK;
	bool same = x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes &&
		    !memcmp(x->shape, y->shape, sizeof x->shape);
	char *a = same ? mgt_malloc(2 * x->nbytes + 1) : NULL;
	mgt_status st = same && !a ? MGT_ERR_NOMEM : MGT_OK;
	if (a && !(st = mgt_st_read_raw(h->st, x, a)) && !(st = mgt_st_read_raw(h->st, y, a + x->nbytes)))
		same = !memcmp(a, a + x->nbytes, x->nbytes);
	free(a);
	if (!st && !same)
		st = mgt_err(MGT_ERR_INPUT, "%s: tensor %s differs from %s, which it is tied to (config.json's "
			     "tie_word_embeddings is not false)", x->file, x->name, twin);
	*skip = !st;
	return st;
}

/* HF tensors nobody asked for: GPT-2's buffers (noted in h->buffers), rotary inv_freq buffers, a
 * tied lm_head, MegatronBert's (bert_unused); anything else is an error naming it. */
static mgt_status check_unused(hf_in *h)
{
	for (size_t i = 0; i < mgt_st_count(h->st); i++) {
		if (h->used[i]) continue;
		const mgt_st_tensor *x = mgt_st_at(h->st, i);
		bool skip = false;
		mgt_status st = mgt_hf_spec_of(h->f)->names == MGT_HF_NAMES_BERT ? bert_unused(h, x, &skip) : MGT_OK;
		if (st) return st;
		if (skip) continue;
		const char *dot = strrchr(x->name, '.');
		int b = gpt2_names(h->f) ? gpt2_buffer(x->name) : -1;
		if (b >= 0) {
			h->buffers |= 1u << b;
			continue;
		}
		if (dot && !strcmp(dot, ".inv_freq")) continue;
		if (!strcmp(x->name, "lm_head.weight") && !h->a.model.untie_embeddings_and_output_weights) continue;
		return mgt_err(MGT_ERR_INPUT, "%s: unexpected tensor %s (not part of a %s model as config.json describes it)",
			       x->file, x->name, mgt_hf_model_type(h->f));
	}
	return MGT_OK;
}

/* MegatronBertForMaskedLM's token-type embeddings [type_vocab_size, h]: Megatron's BERT without
 * the binary head has none (num_tokentypes 0), which the class computes exactly when they are
 * zero: checked, nothing converted. */

int64_t cv_bert_type_vocab(json_t *cfg)
{
	json_t *v = json_object_get(cfg, "type_vocab_size");
	return json_is_integer(v) ? json_integer_value(v) : 2; /* MegatronBertConfig's default */
}

static mgt_status bert_token_types_in(hf_in *h)
{
	const mgt_model_config *c = &h->a.model;
	if (mgt_hf_spec_of(h->f)->names != MGT_HF_NAMES_BERT || c->bert_binary_head) return MGT_OK;
	mgt_hf_map m = {.op = MGT_HF_COPY, .n = 1, .ndim = {2}, .shape = {{cv_bert_type_vocab(h->cfg), c->hidden_size}}};
	snprintf(m.name[0], sizeof m.name[0], BERT_TOKTYPE);
	float *x = mgt_malloc(cv_map_numel(&m, 0) * sizeof(float));
	mgt_status st = x ? cv_hf_read(h, &m, 0, x) : MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < cv_map_numel(&m, 0); i++)
		if (x[i] != 0)
			st = mgt_err(MGT_ERR_INPUT, "%s: tensor %s: element %zu is not zero: a %s with token types has no "
				     "Megatron counterpart (Megatron's BERT has token-type embeddings only with the binary "
				     "head: MegatronBertForPreTraining)", h->o->load_dir, BERT_TOKTYPE, i, MGT_HF_BERT_MLM_CLASS);
	free(x);
	return st;
}

static mgt_status gpt2_prefix(hf_in *h)
{
	h->prefix = "";
	if (!gpt2_names(h->f)) return MGT_OK;
	if (mgt_st_find(h->st, "transformer.wte.weight")) h->prefix = "transformer.";
	else if (!mgt_st_find(h->st, "wte.weight"))
		return mgt_err(MGT_ERR_INPUT, "%s: no wte.weight or transformer.wte.weight (a GPT-2 model has one)", h->o->load_dir);
	return MGT_OK;
}

/* The tokenizer the copied files describe, Megatron's type names (paths relative to SAVE). */
static json_t *cv_hf_tokenizer(hf_in *h)
{
	const char *dir = h->o->load_dir, *type = NULL, *vocab = NULL, *merges = NULL, *model = NULL;
	bool bpe_files = cv_exists(dir, "vocab.json") && cv_exists(dir, "merges.txt");
	if (mgt_hf_spec_of(h->f)->names == MGT_HF_NAMES_BERT && cv_exists(dir, "vocab.txt")) { /* BertTokenizer: do_lower_case defaults to true */
		mgt_status st = MGT_OK;
		json_t *tc = cv_read_json(dir, "tokenizer_config.json", false, &st);
		type = json_is_false(json_object_get(tc, "do_lower_case")) ? "BertWordPieceCase" : "BertWordPieceLowerCase";
		vocab = "hf/vocab.txt";
		json_decref(tc);
	} else if (bpe_files && (gpt2_names(h->f) || (!cv_exists(dir, "tokenizer.json") && !cv_exists(dir, "tokenizer.model")))) {
		type = "GPT2BPETokenizer"; /* Megatron's GPT-2 tokenizer: <|endoftext|> in text is text */
		vocab = "hf/vocab.json";
		merges = "hf/merges.txt";
	} else if (cv_exists(dir, "tokenizer.json")) {
		type = "HuggingFaceTokenizer";
		model = "hf/tokenizer.json";
	} else if (cv_exists(dir, "tokenizer.model")) {
		type = "Llama2Tokenizer";
		model = "hf/tokenizer.model";
	}
	if (h->in_place) { /* the directory's own files, not SAVE/hf/'s copies */
		vocab = vocab ? vocab + 3 : NULL;
		merges = merges ? merges + 3 : NULL;
		model = model ? model + 3 : NULL;
	}
	return json_pack("{s:s?, s:s?, s:s?, s:s?, s:I, s:I}", "tokenizer_type", type, "vocab_file", vocab,
			 "merge_file", merges, "tokenizer_model", model, "vocab_size", (json_int_t)h->a.model.vocab_size,
			 "padded_vocab_size", (json_int_t)h->a.model.padded_vocab_size);
}

/* BERT's model arguments under Megatron's dests in a checkpoint's "args" (the argument table may not
 * list them): written here, read back by bert_args_take. */
static void bert_args_put(json_t *args, const mgt_model_config *c)
{
	if (mgt_model_family(c)->recipe != MGT_STACK_ENCODER) return;
	json_object_set_new(args, "family", json_string(c->family));
	json_object_set_new(args, "bert_binary_head", json_boolean(c->bert_binary_head));
	json_object_set_new(args, "no_bias_gelu_fusion", json_boolean(c->no_bias_gelu_fusion));
}

char *cv_hf_metadata(hf_in *h)
{
	const mgt_convert_opts *o = h->o;
	json_t *tk = cv_hf_tokenizer(h);
	static const char *const keys[4] = {"tokenizer_type", "vocab_file", "merge_file", "tokenizer_model"};
	for (int i = 0; i < 4; i++) { /* the run's tokenizer arguments, relative to SAVE as recorded */
		const char *v = json_string_value(json_object_get(tk, keys[i]));
		if (v && mgt_args_set(&h->a, keys[i], v)) {
			json_decref(tk);
			return NULL;
		}
	}
	json_t *args = mgt_args_to_json(&h->a);
	bert_args_put(args, &h->a.model);
	json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:o, s:o, "
				 "s:{s:i, s:i, s:i, s:b, s:i, s:i, s:b}, s:o, s:{s:O, s:O?, s:s, s:s}}",
		"format", "mgt-ckpt", "format_version", 1, "iteration", 0, "consumed_train_samples", 0,
		"consumed_valid_samples", 0, "skipped_iterations", 0, "nan_iterations", 0,
		"num_floating_point_operations_so_far", 0.0, "args", args, "tokenizer", tk,
		"layout", "tensor_model_parallel_size", o->tp, "pipeline_model_parallel_size", o->pp,
		"data_parallel_size", h->ep, "use_distributed_optimizer", 0, "world_size", h->nranks,
		"virtual_pipeline_model_parallel_size", 1, "sequence_parallel", 0,
		"tensors", mgt_ckpt_tensors_json(&h->full),
		"hf", "config", h->cfg, "generation_config", h->gen, "gpt2_prefix", h->prefix, "converted_from", o->load_dir);
	json_t *bufs = json_array();
	for (int b = 0; b < 2; b++)
		if (h->buffers & (1u << b)) json_array_append_new(bufs, json_string(cv_gpt2_buffers[b]));
	json_object_set_new(json_object_get(meta, "hf"), "gpt2_buffers", bufs);
	if (h->a.model.num_experts > 0)
		json_object_set_new(json_object_get(meta, "layout"), "expert_model_parallel_size", json_integer(h->ep));
	char *txt = meta ? json_dumps(meta, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_decref(meta);
	return txt;
}

mgt_status cv_hf_open(hf_in *h)
{
	const mgt_convert_opts *o = h->o;
	mgt_status st = MGT_OK;
	h->cfg = cv_read_json(o->load_dir, "config.json", true, &st);
	if (!st) h->gen = cv_read_json(o->load_dir, "generation_config.json", false, &st);
	if (!st && mgt_hf_family_parse(json_string_value(json_object_get(h->cfg, "model_type")), &h->f))
		st = mgt_err_ctx(MGT_ERR_INPUT, "%s/config.json", o->load_dir);
	if (st) return st;
	h->torch_dtype = json_string_value(json_object_get(h->cfg, "torch_dtype"));
	if (!st) st = mgt_args_init(&h->a);
	if (!st) st = cv_config_to_args(h->cfg, h->f, "config.json", &h->a);
	if (st == MGT_ERR_INPUT) mgt_err_ctx(st, "%s", o->load_dir);
	h->a.tensor_model_parallel_size = o->tp;
	h->a.pipeline_model_parallel_size = o->pp;
	h->ep = o->ep > 1 ? o->ep : 1;
	h->nranks = o->tp * o->pp * h->ep;
	if (!st && h->ep > 1 && h->a.model.num_experts < 1)
		st = mgt_err(MGT_ERR_USAGE, "--target-expert-parallel-size %d: %s is a dense model (no experts)", h->ep,
			     mgt_hf_model_type(h->f));
	if (!st && h->a.model.num_experts % h->ep)
		st = mgt_err(MGT_ERR_USAGE, "--target-expert-parallel-size %d does not divide the %lld experts", h->ep,
			     (long long)h->a.model.num_experts);
	if (!st && h->a.model.num_experts > 0) h->a.expert_model_parallel_size = h->ep;
	if (o->make_vocab_size_divisible_by > 0) h->a.model.make_vocab_size_divisible_by = o->make_vocab_size_divisible_by;
	if (!st) st = mgt_model_config_finalize(&h->a.model, o->tp);
	for (int s = 0; !st && s < o->pp; s++) {
		int64_t first, n;
		st = mgt_stage_layers(&h->a.model, o->pp, s, &first, &n);
	}
	if (!st) st = mgt_st_open(o->load_dir, &h->st);
	if (!st) st = gpt2_prefix(h);
	if (!st && !(h->used = calloc(mgt_st_count(h->st) + 1, 1))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = mgt_tensor_table_build(&h->full, &h->a.model, 1, 0, 1, 0);
	int nr = h->nranks;
	if (!st && (!(h->ranks = calloc((size_t)nr, sizeof *h->ranks)) || !(h->shards = calloc((size_t)nr * MGT_TENSOR_MAX_BOXES, sizeof *h->shards))))
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int r = 0; !st && r < nr; r++)
		st = mgt_tensor_table_build_ep(&h->ranks[r], &h->a.model, o->tp, cv_rank_tp(h, r), o->pp, cv_rank_pp(h, r), h->ep,
					       cv_rank_ep(h, r));
	return st;
}

void cv_hf_close(hf_in *h)
{
	int nr = h->nranks;
	for (int r = 0; h->ranks && r < nr; r++) mgt_tensor_table_free(&h->ranks[r]);
	for (int i = 0; h->shards && i < MGT_TENSOR_MAX_BOXES * nr; i++) mgt_ckpt_shard_discard(h->shards[i]);
	free(h->ranks);
	free(h->shards);
	mgt_source_close(h->src);
	mgt_tensor_table_free(&h->full);
	free(h->used);
	mgt_st_close(h->st);
	json_decref(h->cfg);
	json_decref(h->gen);
	mgt_args_free(&h->a);
}

mgt_status cv_close_shards(hf_in *h)
{
	mgt_status st = MGT_OK;
	for (int i = 0; i < MGT_TENSOR_MAX_BOXES * h->nranks; i++) {
		if (!h->shards[i]) continue;
		mgt_status s2 = mgt_ckpt_shard_close(h->shards[i]);
		h->shards[i] = NULL;
		if (!st) st = s2;
	}
	return st;
}

static mgt_status hf_convert(hf_in *h)
{
	scratch b = {0};
	double t0 = mgt_now();
	mgt_status st = cv_hf_open(h);
	if (!st) st = cv_out_begin(h->o->save_dir, &h->tmp);
	if (!st) st = mgt_ckpt_begin(h->tmp, 0);
	if (!st) st = cv_source_over_hf(h, &h->src); /* b holds the pieces alone */
	if (!st) st = cv_write_rows(h, &b);
	cv_scratch_free(&b);
	if (!st) st = bert_token_types_in(h);
	if (!st) st = check_unused(h);
	if (!st) st = cv_close_shards(h);
	char *meta = st ? NULL : cv_hf_metadata(h);
	if (!st && !meta) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) st = mgt_ckpt_commit(h->tmp, 0, meta);
	free(meta);
	char *side = st ? NULL : cv_join(h->tmp, "hf");
	if (!st && (!side || mkdir(side, 0777))) st = mgt_err(MGT_ERR_IO, "%s/hf: %s", h->tmp, strerror(errno));
	if (!st) st = cv_copy_side_files(h->o->load_dir, side, false);
	free(side);
	if (h->tmp) {
		if (st) mgt_ckpt_abort(h->tmp, 0);
		st = cv_out_end(h->tmp, h->o->save_dir, st);
		h->tmp = NULL;
	}
	if (!st && h->o->log)
		fprintf(h->o->log, "converted %s (%s, %d tensors, %lld parameters) to %s: TP %d, PP %d%s%.0d, "
			"%lld parameters with %lld of vocabulary padding (to %lld rows: --make-vocab-size-divisible-by), "
			"%.1f s\n", h->o->load_dir, mgt_hf_model_type(h->f), h->full.n,
			(long long)(h->full.global_numel - mgt_model_padding_params(&h->a.model)), h->o->save_dir, h->o->tp,
			h->o->pp, h->a.model.num_experts > 0 ? ", EP " : "", h->a.model.num_experts > 0 ? h->ep : 0,
			(long long)h->full.global_numel, (long long)mgt_model_padding_params(&h->a.model),
			(long long)h->a.model.padded_vocab_size, mgt_now() - t0);
	return st;
}

mgt_status mgt_convert_hf_to_mgt(const mgt_convert_opts *o)
{
	if (o->tp < 1 || o->pp < 1) return mgt_err(MGT_ERR_USAGE, "tensor and pipeline parallel sizes must be >= 1");
	hf_in h = {.o = o};
	mgt_status st = hf_convert(&h);
	cv_hf_close(&h);
	return st;
}
