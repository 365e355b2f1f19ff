/* lib/convert internals shared by its files (not a public header). */
#ifndef MGT_CONVERT_IMPL_H
#define MGT_CONVERT_IMPL_H

#include <jansson.h>

#include "convert.h"
#include "model/model.h"
#include "args/args.h"

#include "ckpt/ckpt.h"

/* A Hugging Face directory being read (convert.c). */
typedef struct {
	const mgt_convert_opts *o;
	mgt_st *st;
	json_t *cfg, *gen;
	mgt_hf_family f;
	const char *prefix;        /* GPT-2 names: "transformer." or "" */
	const char *torch_dtype;   /* config.json's, or NULL */
	mgt_args a;
	bool *used;                /* per safetensors tensor: consumed */
	int ep, nranks;            /* expert-parallel size (1 without experts), tp * pp * ep */
	mgt_tensor_table full, *ranks; /* ranks[(ep_rank * pp + pp_rank) * tp + tp_rank] */
	mgt_ckpt_shard **shards;   /* [rank * 2 + box] */
	char *tmp;                 /* OUT.tmp.PID */
	unsigned buffers;          /* GPT-2 mask buffers seen: bit 0 attn.bias, bit 1 attn.masked_bias */
	bool in_place;             /* read in place (mgt_source): tokenizer files as the directory's own */
	mgt_source *src;           /* Hugging Face -> mgt: the tensors, read through cv_source_over_hf */
	int64_t iteration;         /* the iteration written (0 from Hugging Face) */
	const char *kprefix;       /* cv_write_rows: the datasets' prefix ("" weights, an optimizer moment's) */
} hf_in;

typedef struct {
	const mgt_convert_opts *o;
	mgt_source *src;           /* an mgt checkpoint, or a Hugging Face directory read in place */
	json_t *meta, *hf;         /* metadata.json, its "hf" (or NULL) */
	mgt_args a;
	mgt_hf_family f;
	const char *prefix;
	mgt_dt dt;
	mgt_tensor_table full;
	mgt_st_writer *w;
	char *tmp;
} hf_out;

/* Conversion scratch: the sources (one buffer, carved), the whole tensor, and a piece buffer that grows. */
typedef struct {
	float *src, *whole, *piece;
	size_t piece_n;
} scratch;


/* Reading a Hugging Face directory: config.json to arguments (h->o->tp, pp: the layout to shard
 * for), the safetensors, the whole-model table and the per-rank tables.  Errors: as
 * mgt_convert_hf_to_mgt.  cv_hf_close frees (after a failed open too). */
mgt_status cv_hf_open(hf_in *h);
void cv_hf_close(hf_in *h);
/* Row g of the whole-model table made from its Hugging Face sources into dst ([g->shape] fp32;
 * b->src the sources' room).  cv_hf_metadata: the metadata.json text an mgt checkpoint of the
 * directory records (malloc'd; NULL: out of memory). */
mgt_status cv_hf_row(hf_in *h, const mgt_tensor *g, scratch *b, float *dst);
char *cv_hf_metadata(hf_in *h);

/* hf_in.c: every row of h->full (an expert dataset once) made whole by the source h->src under
 * h->kprefix + its name (cv_source_whole) and written to the per-rank shards of h->ranks (opened
 * in h->tmp, iteration 0 or the one begun); cv_close_shards closes them (the first error);
 * cv_rank_*: rank r's tensor, pipeline and expert parallel ranks. */
mgt_status cv_write_rows(hf_in *h, scratch *b);
mgt_status cv_close_shards(hf_in *h);
int cv_rank_tp(const hf_in *h, int r);
int cv_rank_pp(const hf_in *h, int r);
int cv_rank_ep(const hf_in *h, int r);

/* source.c: a model source over the open directory h (kind 1; h stays the caller's and must
 * outlive s; no metadata text), and the whole tensor name (a row [g->shape], or an expert
 * dataset [E, rows, cols]) made from its sources: float32, owned by s, valid until the next read
 * of another tensor.  Errors: those of mgt_source_open and mgt_source_read. */
mgt_status cv_source_over_hf(hf_in *h, mgt_source **out);
mgt_status cv_source_whole(mgt_source *s, const char *name, const float **out);
/* dst (row-major [shape]) := the box [off, off + shape) of whole (row-major [gs], nd 1..3). */
void cv_copy_box(const float *whole, int nd, const int64_t *gs, const int64_t *off, const int64_t *shape, float *dst);

/* Reading a model source (h->o->load_dir: an mgt checkpoint at ckpt_step, or a Hugging Face
 * directory read in place, mgt_source): metadata, arguments, family, whole-model table; experts
 * false refuses a Mixture-of-Experts model first (MGT_ERR_USAGE naming the checkpoint's first
 * expert, router or shared-expert dataset, or the Hugging Face family).  cv_mgt_read reads row g
 * whole ([g->shape] fp32; an expert row from its expert dataset) and checks it is finite; a norm
 * weight of a checkpoint with apply_layernorm_1p comes as the model applies it, 1 + w. */
mgt_status cv_mgt_open(hf_out *h, bool experts);
/* That refusal alone, for a source opened with experts true (mgt-export: GGUF of hybrid MoE
 * models only): MGT_OK for a dense model. */
mgt_status cv_no_experts(const hf_out *h);
mgt_status cv_mgt_read(hf_out *h, const mgt_tensor *g, float *whole);
void cv_mgt_close(hf_out *h);

/* megatron.c: a Megatron-LM checkpoint read in place (mgt_source kind 3): cv_mg_detect, whether
 * dir is one (a save directory whose tracker's iteration holds mp_rank_* or .metadata, or such an
 * iteration directory); cv_mg_open opens its iteration step (<= 0: the tracker's; "release" is
 * iteration 0) and reads the arguments; then the mgt_source functions' equivalents.  Errors:
 * MGT_ERR_FORMAT (a file missing, damaged or disagreeing with the args, naming the file and key),
 * MGT_ERR_USAGE (what mgt does not read, naming the argument), MGT_ERR_IO, MGT_ERR_NOMEM. */
typedef struct mg_src mg_src;
bool cv_mg_detect(const char *dir);
mgt_status cv_mg_open(const char *dir, int64_t step, mg_src **out);
void cv_mg_close(mg_src *m);
const char *cv_mg_metadata(const mg_src *m);
const char *cv_mg_dir(const mg_src *m);
int64_t cv_mg_iteration(const mg_src *m);
size_t cv_mg_count(const mg_src *m);
const char *cv_mg_tensor(const mg_src *m, size_t i, int *ndim, int64_t *gs, mgt_ckpt_dtype *dt);
mgt_status cv_mg_read(mg_src *m, const char *name, int ndim, const int64_t *gs, const int64_t *off, const int64_t *shape,
		      mgt_ckpt_dtype dt, void *dst);
/* The listed tensor name made whole (float32, owned by m, valid until another is read). */
mgt_status cv_mg_whole(mg_src *m, const char *name, const float **out);

/* convert.c: file helpers of both ways.  cv_join: malloc'd "a/b" (NULL: out of memory, recorded);
 * cv_exists: whether dir/name exists; cv_out_begin / cv_out_end: build the output under
 * OUT.tmp.PID and rename it to OUT when st is MGT_OK (else remove it; returns st or the rename's
 * error); cv_copy_side_files: the tokenizer and config files of a Hugging Face directory
 * (skip_configs: not config.json and generation_config.json); cv_read_json: dir/name parsed (NULL
 * when absent and not required; *st set on an error). */
char *cv_join(const char *a, const char *b);
bool cv_exists(const char *dir, const char *name);
mgt_status cv_out_begin(const char *out, char **tmp);
mgt_status cv_out_end(char *tmp, const char *out, mgt_status st);
mgt_status cv_copy_side_files(const char *from_dir, const char *to_dir, bool skip_configs);
json_t *cv_read_json(const char *dir, const char *name, bool required, mgt_status *st);
/* dir/name := text and a newline, written atomically (mgt_afile; an existing file is refused). */
mgt_status cv_write_text(const char *dir, const char *name, const char *text);

/* hf_in.c: config.json's torch_dtype as a safetensors dtype (F32 when absent or other); GPT-2's
 * causal-mask buffer names (h.N.attn.bias, h.N.attn.masked_bias); MegatronBert's token-type
 * embeddings (name, and type_vocab_size: config.json's, else 2). */
mgt_dt cv_torch_dtype_dt(const char *s);
/* Whether family f names its tensors as GPT-2 does (transformer.h.N...; the causal-mask buffers). */
static inline bool gpt2_names(mgt_hf_family f) { return mgt_hf_spec_of(f)->names == MGT_HF_NAMES_GPT2; }
extern const char *const cv_gpt2_buffers[2];
#define BERT_TOKTYPE "bert.embeddings.token_type_embeddings.weight"
int64_t cv_bert_type_vocab(json_t *cfg);

/* src and whole hold the largest row; with datasets, whole holds the largest expert dataset too. */
mgt_status cv_scratch_alloc(scratch *b, const mgt_tensor_table *full, bool datasets);
void cv_scratch_free(scratch *b);
mgt_status cv_check_finite(const float *x, size_t n, const char *file, const char *name);
size_t cv_map_numel(const mgt_hf_map *m, int k);
size_t cv_row_numel(const mgt_tensor *t);

/* Set a's model arguments (and vocab_size) from config.json cfg of family f (file: for messages).
 * Errors: MGT_ERR_INPUT (missing or bad key), MGT_ERR_USAGE (what mgt does not implement). */
mgt_status cv_config_to_args(json_t *cfg, mgt_hf_family f, const char *file, mgt_args *a);
/* The family a model config looks like (a hybrid model: nemotron_h); whether family f holds it
 * exactly.  Errors: MGT_ERR_USAGE (f is of another kind: a hybrid family for a GPT, ...),
 * MGT_ERR_INPUT (f's kind, but a flag f cannot compute: the message names it, e.g. n_groups > 1 for
 * mamba2, MoE routers transformers lacks). */
mgt_status cv_family_infer(const mgt_model_config *c, mgt_hf_family *f);
mgt_status cv_family_check(const mgt_model_config *c, mgt_hf_family f);
/* A config.json for c as family f (new reference). */
json_t *cv_args_to_config(const mgt_model_config *c, mgt_hf_family f, const char *dtype);

#endif
