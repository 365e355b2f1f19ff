/* lib/eval/eval.c: a checkpoint's model for inference (see eval.h). */
#include "eval_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>



static int64_t recorded_vocab(const mgt_eval *ev);

static int64_t jint(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* The iteration to open: ckpt_step, or the tracker's. */
static mgt_status pick(const char *dir, int64_t step, int64_t *it)
{
	struct stat sb;
	if (stat(dir, &sb))
		return mgt_err(errno == ENOENT ? MGT_ERR_FORMAT : MGT_ERR_IO, "--load %s: %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return mgt_err(MGT_ERR_USAGE, "--load %s: not a directory (a checkpoint directory holds %s and "
			       "iter_NNNNNNN/, mgt-ckpt(5))", dir, MGT_CKPT_TRACKER);
	if (step > 0) {
		*it = step;
		return MGT_OK;
	}
	mgt_status st = mgt_ckpt_latest(dir, it);
	if (st == MGT_ERR_IO)
		return mgt_err(MGT_ERR_FORMAT, "--load %s: no %s: not a checkpoint directory, or no iteration "
			       "finished saving (pass --ckpt-step N to load iter_N)", dir, MGT_CKPT_TRACKER);
	return st;
}

/* metadata.json: args, padded vocabulary, unpadded vocabulary when recorded. */
static mgt_status read_meta(mgt_eval *ev)
{
	json_error_t e;
	json_t *meta = json_loads(ev->src ? mgt_source_metadata(ev->src) : mgt_ckpt_metadata(ev->ck), 0, &e);
	json_t *args = meta ? json_object_get(meta, "args") : NULL;
	mgt_status st = MGT_OK;
	char what[4200];
	snprintf(what, sizeof what, "%s/metadata.json: args", ev->dir);
	if (!json_is_object(args))
		st = mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: not an mgt checkpoint (no \"args\" object)", ev->dir);
	if (!st) st = mgt_args_merge_json(&ev->a, args, what);
	if (st == MGT_ERR_INPUT || st == MGT_ERR_USAGE) st = MGT_ERR_FORMAT;
	if (!st) st = mgt_args_tok_files_use(&ev->a, meta, ev->dir); /* the checkpoint's own copies */
	json_t *tok = meta ? json_object_get(meta, "tokenizer") : NULL;
	if (!st) {
		ev->padded_vocab = jint(args, "padded_vocab_size");
		if (!ev->padded_vocab) ev->padded_vocab = jint(tok, "padded_vocab_size");
		ev->meta_vocab = jint(tok, "vocab_size");
		if (ev->padded_vocab <= 0)
			st = mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: args: padded_vocab_size: expected a positive integer",
				     ev->dir);
	}
	json_decref(meta);
	return st;
}

/* Tokenizer files recorded relative to the save directory (mgt-ckpt-convert's hf/NAME) are found
 * there when they are not found relative to the working directory. */
static mgt_status resolve_tok_paths(mgt_eval *ev, const char *load_dir)
{
	static const char *const keys[3] = {"vocab_file", "merge_file", "tokenizer_model"};
	char *const vals[3] = {ev->a.vocab_file, ev->a.merge_file, ev->a.tokenizer_model};
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < 3; i++) {
		if (!vals[i] || vals[i][0] == '/' || access(vals[i], F_OK) == 0) continue;
		size_t n = strlen(load_dir) + strlen(vals[i]) + 2;
		char *p = mgt_malloc(n);
		if (!p) return MGT_ERR_NOMEM;
		snprintf(p, n, "%s/%s", load_dir, vals[i]);
		if (access(p, F_OK) == 0) st = mgt_args_set(&ev->a, keys[i], p);
		free(p);
	}
	return st;
}

mgt_status mgt_eval_open(mgt_eval **out, const char *load_dir, int64_t ckpt_step)
{
	*out = NULL;
	mgt_eval *ev = mgt_malloc(sizeof *ev);
	if (!ev) return MGT_ERR_NOMEM;
	memset(ev, 0, sizeof *ev);
	mgt_status st = mgt_args_init(&ev->a);
	ev->args_ok = !st;
	int64_t it = 0;
	int kind = 0;
	bool megatron = false; /* a Megatron-LM checkpoint, read in place (mgt_source) */
	if (!st && !(megatron = !mgt_convert_detect(load_dir, &kind) && kind == 3)) mgt_err(MGT_OK, "%s", "");
	if (megatron) st = mgt_source_open(load_dir, ckpt_step, &ev->src);
	else if (!st) st = pick(load_dir, ckpt_step, &it);
	if (!st && !megatron) {
		st = mgt_ckpt_open(load_dir, it, &ev->ck);
		if (st == MGT_ERR_IO) st = MGT_ERR_FORMAT; /* the iteration directory is missing */
		if (!st) st = mgt_ckpt_check(ev->ck);
		if (st && ckpt_step > 0) mgt_err_ctx(st, "--ckpt-step %lld", (long long)ckpt_step);
		else if (st) mgt_err_ctx(st, "%s/%s names iteration %lld", load_dir, MGT_CKPT_TRACKER, (long long)it);
		if (st == MGT_ERR_FORMAT) st = mgt_ckpt_suggest(load_dir, it, st);
	}
	if (!st && !(ev->load_dir = mgt_strdup(load_dir))) st = MGT_ERR_NOMEM;
	if (!st && !(ev->dir = mgt_strdup(megatron ? mgt_source_dir(ev->src) : mgt_ckpt_dir(ev->ck)))) st = MGT_ERR_NOMEM;
	if (!st) {
		ev->iteration = megatron ? mgt_source_iteration(ev->src) : mgt_ckpt_iteration(ev->ck);
		st = read_meta(ev);
	}
	if (!st) st = resolve_tok_paths(ev, load_dir);
	if (!st) ev->vocab = recorded_vocab(ev);
	if (st) {
		mgt_eval_free(ev);
		return st;
	}
	*out = ev;
	return MGT_OK;
}

mgt_status mgt_eval_open_hf(mgt_eval **out, const char *dir)
{
	*out = NULL;
	mgt_eval *ev = mgt_malloc(sizeof *ev);
	if (!ev) return MGT_ERR_NOMEM;
	memset(ev, 0, sizeof *ev);
	mgt_status st = mgt_args_init(&ev->a);
	ev->args_ok = !st;
	ev->hf = true;
	if (!st) st = mgt_source_open(dir, 0, &ev->src);
	if (!st && mgt_source_kind(ev->src) != 1)
		st = mgt_err(MGT_ERR_USAGE, "--hf %s: not a Hugging Face directory (no config.json); an mgt checkpoint "
			     "is opened with --load", dir);
	if (!st && (!(ev->load_dir = mgt_strdup(dir)) || !(ev->dir = mgt_strdup(dir)))) st = MGT_ERR_NOMEM;
	if (!st) st = read_meta(ev);
	if (!st) st = resolve_tok_paths(ev, dir);
	if (!st) ev->vocab = recorded_vocab(ev);
	if (st) {
		mgt_eval_free(ev);
		return st;
	}
	*out = ev;
	return MGT_OK;
}

const mgt_args *mgt_eval_args(const mgt_eval *ev) { return &ev->a; }
int64_t mgt_eval_iteration(const mgt_eval *ev) { return ev->iteration; }
const char *mgt_eval_dir(const mgt_eval *ev) { return ev->dir; }
int64_t mgt_eval_vocab_size(const mgt_eval *ev) { return ev->vocab; }
int64_t mgt_eval_padded_vocab_size(const mgt_eval *ev) { return ev->padded_vocab; }
int64_t mgt_eval_seq_length(const mgt_eval *ev) { return ev->s; }

void mgt_eval_tok_opts(const mgt_eval *ev, mgt_tok_opts *o)
{
	mgt_eval_args_tok_opts(&ev->a, o);
}

void mgt_eval_args_tok_opts(const mgt_args *a, mgt_tok_opts *o)
{
	*o = (mgt_tok_opts){
		.type = a->tokenizer_type, .vocab_file = a->vocab_file, .merge_file = a->merge_file,
		.model = a->tokenizer_model, .tiktoken_pattern = a->tiktoken_pattern,
		.tiktoken_num_special = (int)a->tiktoken_num_special_tokens, .vocab_size = a->vocab_size,
		.null_eod_id = a->null_tokenizer_eod_id,
	};
	if (!o->type && a->vocab_file && a->merge_file) o->type = "GPT2BPETokenizer"; /* as mgt-train */
}

mgt_status mgt_eval_supports(const mgt_eval *ev, mgt_eval_use use, const char *what)
{
	const mgt_family *f = mgt_model_family(&ev->a.model);
	if (f->recipe == MGT_STACK_ENCODER)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s is a %s checkpoint (--model-family %s), a bidirectional encoder "
			       "that fills masked tokens: it has no next-token distribution to %s (%s); evaluate a %s "
			       "with 'mgt-eval loss' (masked-token loss and accuracy)", what, ev->dir, f->title, f->name,
			       use == MGT_EVAL_USE_GENERATE ? "generate from" : "score text with",
			       use == MGT_EVAL_USE_GENERATE ? "generation runs GPT and T5 checkpoints"
							    : "scoring runs causal decoders: GPT", f->title);
	if (f->recipe == MGT_STACK_ENCODER_DECODER && use == MGT_EVAL_USE_NEXT_TOKEN)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s is a %s checkpoint (--model-family %s), an encoder-decoder: "
			       "%s scores one sequence with a causal decoder's next-token logits, which mgt-eval does "
			       "not compute for an encoder-decoder (the decoder's given the encoder's input is not "
			       "implemented); evaluate a %s with 'mgt-eval loss' (span-corruption loss) or "
			       "'mgt-eval generate'", what, ev->dir, f->title, f->name, what, f->title);
	return MGT_OK;
}

/* The unpadded vocabulary the checkpoint records (see mgt_eval_build), 0 when unknown. */
static int64_t recorded_vocab(const mgt_eval *ev)
{
	const mgt_args *a = &ev->a;
	mgt_tok_opts o;
	mgt_eval_tok_opts(ev, &o);
	return ev->meta_vocab > 0 ? ev->meta_vocab : a->vocab_size > 0 ? a->vocab_size
	       : a->mock_data && !o.type ? 50257 : 0;
}

/* "TYPE (FILE)" of tokenizer flags o, into buf. */
static const char *tok_name(const mgt_tok_opts *o, char *buf, size_t n)
{
	const char *f = o->vocab_file ? o->vocab_file : o->model ? o->model : NULL;
	snprintf(buf, n, "%s%s%s%s", o->type ? o->type : "(none)", f ? " (" : "", f ? f : "", f ? ")" : "");
	return buf;
}

mgt_status mgt_eval_check_tok(const mgt_eval *ev, const mgt_tok *tok, const mgt_tok_opts *given)
{
	int64_t rec = recorded_vocab(ev), n = mgt_tok_vocab_size(tok);
	if (!rec || n == rec || (ev->hf && n < rec)) return MGT_OK; /* HF: rows, maybe padded */
	mgt_tok_opts mine;
	mgt_eval_tok_opts(ev, &mine);
	char a[1200], b[1200];
	return mgt_err(MGT_ERR_VOCAB, "the tokenizer given, %s, has %lld tokens but the checkpoint's, %s, has %lld "
		       "(%s): the model was trained with another tokenizer (without the tokenizer flags the "
		       "checkpoint's own is used)", tok_name(given, a, sizeof a), (long long)n, tok_name(&mine, b, sizeof b),
		       (long long)rec, ev->meta_vocab > 0 ? "metadata.json \"tokenizer\": \"vocab_size\"" : "its vocab_size");
}

static mgt_status pick_vocab(mgt_eval *ev, int64_t given)
{
	ev->vocab = given > 0 ? given : recorded_vocab(ev);
	if (!ev->vocab)
		return mgt_err(MGT_ERR_VOCAB, "%s: the vocabulary size is not recorded in metadata.json (no "
			       "\"tokenizer\": {\"vocab_size\"}): the tokenizer files are needed to know it", ev->dir);
	if (ev->vocab > ev->padded_vocab)
		return mgt_err(MGT_ERR_FORMAT, "%s: vocabulary size %lld is larger than the checkpoint's padded "
			       "vocabulary %lld (embedding rows)", ev->dir, (long long)ev->vocab, (long long)ev->padded_vocab);
	return MGT_OK;
}

/* The model configuration of one process and seq_length positions. */
static mgt_status make_config(mgt_eval *ev, int64_t s)
{
	mgt_model_config *c = &ev->a.model;
	if (s <= 0) return mgt_err(MGT_ERR_USAGE, "sequence length %lld: expected at least 1 token", (long long)s);
	bool learned = !strcmp(c->position_embedding_type, "learned_absolute");
	if (learned && s > c->max_position_embeddings)
		return mgt_err(MGT_ERR_USAGE, "%lld positions: more than the %lld learned position embeddings of the "
			       "checkpoint (max_position_embeddings)", (long long)s, (long long)c->max_position_embeddings);
	if (!learned && s > c->max_position_embeddings) c->max_position_embeddings = s; /* no table */
	c->seq_length = s;
	c->vocab_size = ev->vocab;
	/* one stage: the pipeline split the checkpoint was saved with does not matter */
	c->decoder_first_pipeline_num_layers = c->decoder_last_pipeline_num_layers = 0;
	mgt_status st = mgt_model_config_finalize(c, 1);
	if (st) return mgt_err(MGT_ERR_FORMAT, "%s/metadata.json: args do not make a model: %s", ev->dir, mgt_err_msg());
	c->padded_vocab_size = ev->padded_vocab; /* what was saved (TP x divisor padding) */
	return MGT_OK;
}

/* The backend: CUDA for "cuda" (or "auto" with a GPU present), else the CPU; fp32 GEMMs. */
static mgt_status make_backend(mgt_eval *ev, const char *dev, int threads)
{
	if (!dev) dev = "auto";
	if (strcmp(dev, "auto") && strcmp(dev, "cpu") && strcmp(dev, "cuda"))
		return mgt_err(MGT_ERR_USAGE, "--device: expected cpu, cuda or auto, got '%s'", dev);
	int ndev = strcmp(dev, "cpu") ? mgt_backend_cuda_devices() : 0;
	mgt_status st = MGT_OK;
	if (!strcmp(dev, "cuda") && ndev == 0) {
		ev->be = mgt_backend_cuda_create(0, &st); /* says why: no CUDA build, no GPU */
		if (!ev->be && !st) st = mgt_err(MGT_ERR_USAGE, "--device cuda: no CUDA device");
	} else if (ndev > 0) {
		ev->be = mgt_backend_cuda_create(0, &st);
	} else if (!(ev->be = mgt_backend_cpu_create(threads))) {
		st = MGT_ERR_NOMEM;
	}
	if (st || !ev->be) return st ? st : MGT_ERR_NOMEM;
	ev->be->precision = MGT_PREC_FP32;
	return MGT_OK;
}

/* Every parameter of the model, read whole from the checkpoint; no other parameter there. */
static mgt_status read_params(mgt_eval *ev)
{
	const mgt_tensor_table *tt = mgt_model_tensors(ev->m);
	float *params = mgt_model_params(ev->m);
	float *h = ev->be->host_memory ? params : mgt_malloc((tt->buf_numel ? tt->buf_numel : 1) * sizeof *h);
	if (!h) return MGT_ERR_NOMEM;
	if (!ev->be->host_memory) memset(h, 0, tt->buf_numel * sizeof *h);
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		if (ev->src) st = mgt_source_row_read(ev->src, "", x, 0, x->numel, h + x->offset);
		else st = mgt_ckpt_row_read(ev->ck, "", x, 0, x->numel, h + x->offset); /* expert rows too */
	}
	size_t n = ev->src ? mgt_source_count(ev->src) : mgt_ckpt_count(ev->ck);
	for (size_t i = 0; !st && i < n; i++) {
		int nd;
		int64_t gs[MGT_CKPT_MAX_DIM];
		mgt_ckpt_dtype dt;
		const char *name = ev->src ? mgt_source_tensor(ev->src, i, &nd, gs, &dt) : mgt_ckpt_tensor(ev->ck, i, &nd, gs, &dt);
		if (strncmp(name, "optimizer.", 10) && !mgt_ckpt_row_known(tt, name))
			st = mgt_err(MGT_ERR_FORMAT, "%s: tensor %s is not part of the model its arguments describe",
				     ev->dir, name);
	}
	if (!ev->be->host_memory) {
		if (!st) st = ev->be->ops->upload(ev->be, params, h, tt->buf_numel * sizeof *h);
		free(h);
	}
	return st;
}

mgt_status mgt_eval_build(mgt_eval *ev, const mgt_eval_build_opts *o)
{
	if (ev->m || (!ev->ck && !ev->src)) return mgt_err(MGT_ERR_USAGE, "mgt_eval_build: called twice");
	mgt_status st = pick_vocab(ev, o->vocab_size);
	if (!st) st = make_config(ev, o->seq_length);
	if (!st) st = mgt_parallel_init_single(&ev->ps);
	ev->ps_ok = !st;
	if (!st) st = make_backend(ev, o->device, o->threads);
	if (!st) st = mgt_parallel_to_device(&ev->ps, ev->be, false);
	if (st) return st;
	ev->s = o->seq_length;
	st = mgt_model_create_infer(&ev->m, &ev->a.model, ev->be, &ev->ps);
	if (!st) st = read_params(ev);
	if (st) mgt_err_ctx(st, "loading %s", ev->dir);
	if (st == MGT_ERR_FORMAT && !ev->src) st = mgt_ckpt_suggest(ev->load_dir, ev->iteration, st);
	if (st) return st;
	mgt_ckpt_close(ev->ck);
	ev->ck = NULL;
	mgt_source_close(ev->src);
	ev->src = NULL;
	if (ev->s > INT32_MAX / 4) return mgt_err(MGT_ERR_USAGE, "sequence length %lld: too long", (long long)ev->s);
	size_t s = (size_t)ev->s;
	ev->seq = mgt_malloc(s * sizeof *ev->seq);
	ev->pos = mgt_malloc(s * sizeof *ev->pos);
	ev->full = mgt_malloc(s * (size_t)ev->padded_vocab * sizeof *ev->full);
	if (!ev->seq || !ev->pos || !ev->full) return MGT_ERR_NOMEM;
	for (size_t i = 0; i < s; i++) {
		ev->seq[i] = 0;
		ev->pos[i] = (int32_t)i;
	}
	return MGT_OK;
}

mgt_status mgt_eval_check_ids(const mgt_eval *ev, const int32_t *tokens, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= ev->vocab)
			return mgt_err(MGT_ERR_INPUT, "token %lld (position %lld) is outside the vocabulary [0, %lld)",
				       (long long)tokens[i], (long long)i, (long long)ev->vocab);
	return MGT_OK;
}

/* Forward tokens[0..n) (positions 0..n-1, a fresh sequence in the cache, made at the first
 * call); ev->full gets the
 * padded logits of the n positions [n, padded_vocab]. */
static mgt_status forward_full(mgt_eval *ev, const int32_t *tokens, int64_t n)
{
	if (!ev->m) return mgt_err(MGT_ERR_USAGE, "mgt_eval_forward: the model is not built");
	if (n < 1 || n > ev->s)
		return mgt_err(MGT_ERR_USAGE, "%lld tokens: expected 1 to %lld (the sequence length the model was "
			       "built for)", (long long)n, (long long)ev->s);
	mgt_status st = mgt_eval_supports(ev, MGT_EVAL_USE_NEXT_TOKEN, "mgt_eval_forward");
	if (!st) st = mgt_eval_check_ids(ev, tokens, n);
	if (!st && !ev->kv) st = mgt_kv_cache_create(&ev->kv, ev->m, 1, (int)ev->s); /* first use */
	if (st) return st;
	return mgt_model_infer(ev->m, ev->kv, (int)n, tokens, ev->seq, ev->pos, (int)n, ev->pos, ev->full);
}

/* Rows [0, n) of ev->full without the padding columns. */
static void copy_logits(const mgt_eval *ev, int64_t n, float *logits)
{
	for (int64_t i = 0; i < n; i++)
		memcpy(logits + i * ev->vocab, ev->full + i * ev->padded_vocab, (size_t)ev->vocab * sizeof *logits);
}

mgt_status mgt_eval_forward(mgt_eval *ev, const int32_t *tokens, int64_t n, float *logits)
{
	mgt_status st = forward_full(ev, tokens, n);
	if (!st && logits) copy_logits(ev, n, logits);
	return st;
}

mgt_status mgt_eval_greedy(mgt_eval *ev, const int32_t *prompt, int64_t n, int64_t max_new, int32_t *out,
			   float *logits)
{
	if (max_new < 0 || (n >= 1 && n + max_new - 1 > ev->s))
		return mgt_err(MGT_ERR_USAGE, "%lld tokens and %lld new ones: more than the %lld positions the model "
			       "was built for", (long long)n, (long long)max_new, (long long)ev->s);
	if (!max_new) return mgt_eval_forward(ev, prompt, n, logits);
	if (n < 1) return forward_full(ev, prompt, n); /* the error */
	int32_t *seq = mgt_malloc((size_t)(n + max_new) * sizeof *seq);
	if (!seq) return MGT_ERR_NOMEM;
	memcpy(seq, prompt, (size_t)n * sizeof *seq);
	mgt_status st = MGT_OK;
	for (int64_t k = 0; !st && k < max_new; k++) {
		int64_t len = n + k;
		st = forward_full(ev, seq, len);
		if (st) break;
		const float *row = ev->full + (len - 1) * ev->padded_vocab;
		int32_t best = 0;
		for (int64_t v = 1; v < ev->vocab; v++)
			if (row[v] > row[best]) best = (int32_t)v; /* strict: ties keep the lowest id */
		seq[len] = out[k] = best;
	}
	if (!st && logits) copy_logits(ev, n + max_new - 1, logits);
	free(seq);
	return st;
}

void mgt_eval_free(mgt_eval *ev)
{
	if (!ev) return;
	mgt_ckpt_close(ev->ck);
	mgt_source_close(ev->src);
	mgt_kv_cache_free(ev->kv);
	mgt_model_free(ev->m);
	if (ev->ps_ok) mgt_parallel_free(&ev->ps); /* device communicators before the backend */
	if (ev->be) mgt_backend_destroy(ev->be);
	free(ev->seq);
	free(ev->pos);
	free(ev->full);
	free(ev->dir);
	free(ev->load_dir);
	if (ev->args_ok) mgt_args_free(&ev->a);
	free(ev);
}
