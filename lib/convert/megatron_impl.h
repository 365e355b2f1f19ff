/* lib/convert internals: a Megatron-LM checkpoint read in place (megatron.c: the legacy `torch`
 * format; megatron_dist.c: `torch_dist`), shared by those files (not a public header). */
#ifndef MGT_MEGATRON_IMPL_H
#define MGT_MEGATRON_IMPL_H

#include "convert_impl.h"

/* One model chunk of one rank of the saved layout: tensor-parallel rank tp, pipeline rank pp,
 * virtual stage vs (model chunk "model" or "model<vs>"), expert-parallel rank ep; its table at
 * that layout (mgt_tensor_table_build_ep over pp x vp stages) and its first global layer. */
typedef struct {
	int tp, pp, vs, ep;
	int file;                  /* torch: index into mg_src.files */
	int64_t first;             /* first global layer of the chunk */
	mgt_tensor_table tt;
	/* the optimizer's place of each row (megatron_opt.c; NULL until first needed, -1 none):
	 * plain Adam, the state id (group in grp); distributed, the element offset in the file's
	 * concatenated buckets of buffer gbuf */
	int64_t *where;
	int *grp, *gidx;
	int gbuf;
	int64_t ends[2];           /* distributed: the dense and the expert buffer's length (mg_dist_map) */
} mg_chunk;

/* A legacy-format rank file: iter_N/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt, and its
 * distributed-optimizer state beside it (opened when first needed). */
typedef struct {
	char *path, *dopt_path;
	mgt_torch *t, *dopt;
} mg_file;

struct mg_src {
	int format;                /* 1 torch, 2 torch_dist (and fsdp_dtensor: dtensor) */
	bool dtensor;              /* Megatron-FSDP's fsdp_dtensor (megatron_dist.c, .metadata without
				    * Megatron's common state) */
	char *save_dir, *iter_dir;
	int64_t iteration;
	int tp, pp, vp, ep, dp;
	bool distopt;
	bool chained;              /* a ChainedOptimizer: [dense, expert] (Mixture of Experts) */
	int edp;                   /* the expert-data-parallel size */
	int optim;                 /* optimizer state: 0 none, 1 fp32 Adam, 2 16-bit params with fp32 copies, 3 distributed */
	mgt_args a;
	mgt_tensor_table full;
	mg_chunk *chunks;
	int nchunks;
	mg_file *files;
	int nfiles;
	mgt_torch *root;           /* the file of the common state: rank 0's model_optim_rng.pt (torch),
				    * common.pt or the common_state item (torch_dist) */
	const mgt_py *common;      /* the common state dict (args, iteration, opt_param_scheduler, ...);
				    * NULL for fsdp_dtensor, whose items are separate (mg_common) */
	const mgt_py *ns;          /* its args */
	const char *no_optim;      /* why there is no optimizer state mgt reads, or NULL */
	char *meta;                /* the metadata.json text an mgt checkpoint of it records */
	int *list;                 /* rows of full listed (a dataset at its first expert row) */
	size_t nlist;
	int nkinds;                /* 1 (weights) or 3 (and the two moments) */
	float *whole, *piece;      /* one tensor made whole, and a rank's piece of it */
	size_t whole_n, piece_n;
	char cached[200];
	char (*names)[200];        /* the listed names, [nlist * nkinds] */
	void *dist;                /* megatron_dist.c's state */
};
typedef struct mg_src mg_src;

/* The Megatron key of table row x of chunk c (local layer and expert indices; alt 0 Transformer
 * Engine names, 1 the local spec's norms, 2 grouped-GEMM experts linear_fc1.weight<j>) into out;
 * false when alt does not apply to x. */
bool mg_key(const mg_src *m, const mg_chunk *c, const mgt_tensor *x, int alt, char *out, size_t n);
/* Whether row x is a later pipeline stage's copy of the tied word embedding: Megatron's
 * output_layer.weight on the last stage (a parameter after the final norm). */
bool mg_is_tied_copy(const mgt_tensor *x);
/* The rows of c's table in Megatron-Core's model.parameters() order (frozen rows left out), into
 * order (room for c->tt.n); returns their count. */
int mg_param_order(const mg_src *m, const mg_chunk *c, int *order);

/* megatron_opt.c: the optimizer state of a legacy-format checkpoint: which kind m->optim is
 * (from rank 0's file), and row x of chunk c's local elements of kind k (0 the fp32 main weights,
 * 1 exp_avg, 2 exp_avg_sq) into dst. */
mgt_status mg_optim_detect(mg_src *m);
mgt_status mg_optim_local(mg_src *m, const mg_chunk *c, const mgt_tensor *x, int k, float *dst, bool *absent);
/* The distributed optimizer's buffer layout of chunk c: c->where[i] the offset of row i in the
 * concatenation of the buffer's buckets, each without its end padding (-1: not a parameter);
 * c->ends[0 dense, 1 expert] that concatenation's length; c->gbuf the buffer's index. */
mgt_status mg_dist_map(mg_src *m, mg_chunk *c);
/* megatron.c: rank file f's model_optim_rng.pt or (dopt) distrib_optim.pt, opened once. */
mgt_status mg_file_open(mg_src *m, int f, bool dopt, mgt_torch **out);
/* A DICT's value under an integer key, or NULL. */
const mgt_py *mg_py_at(const mgt_py *d, int64_t key);

/* Whether tensor v of file t holds floating-point values (F32, BF16, F16, F64); else
 * MGT_ERR_FORMAT naming the file, what and the dtype. */
mgt_status mg_check_float(const mgt_torch *t, const mgt_py *v, const char *what);

/* megatron_dist.c: the torch_dist format.  mg_dist_open: m->iter_dir holds .metadata; reads the
 * index and the common state into m->root / m->common / m->ns, and sets m->optim (0, or 4: the
 * fully reshardable or non-distributed optimizer's per-tensor keys).  mg_dist_whole: full-table
 * row g (an expert dataset's first row) of kind k (0 weights: the fp32 main weights where saved,
 * 1 exp_avg, 2 exp_avg_sq) whole into dst ([g->shape], or [E, rows, cols]). */
mgt_status mg_dist_open(mg_src *m);
/* The common state's value key (sub: its field, or NULL): m->common's, or fsdp_dtensor's BYTE_IO
 * item "key.sub" (torch.save(value), opened once and kept until mg_dist_close); NULL when absent
 * or unreadable. */
const mgt_py *mg_common(mg_src *m, const char *key, const char *sub);
mgt_status mg_dist_whole(mg_src *m, const mgt_tensor *g, int k, float *dst);
/* Every model key of .metadata (optimizer, RNG, common state and _extra_state aside) is a row of
 * the whole-model table, per layer or stacked: else MGT_ERR_FORMAT naming it. */
mgt_status mg_dist_check_keys(mg_src *m);
/* With the distributed optimizer's dp_reshardable buckets (m->optim 5): row x of chunk c, kind k
 * (0 the fp32 main weights, 1 exp_avg, 2 exp_avg_sq), local elements into dst. */
mgt_status mg_dist_opt_local(mg_src *m, mg_chunk *c, const mgt_tensor *x, int k, float *dst);
void mg_dist_close(mg_src *m);

/* mg_out.c, mg_out_dist.c: an mgt checkpoint (or Hugging Face directory) written as a Megatron
 * checkpoint.  mg_put_args: the args Namespace; mg_row_data: row x's local elements in the written
 * dtype (kept in o->bufs until mg_free_bufs); mg_write_dist: the torch_dist iteration directory
 * o->iter (whole tensors, stacked decoder keys). */
typedef struct {
	hf_out h;                  /* the source, its arguments and whole-model table */
	mg_src m;                  /* the target layout (tp, pp, ep) and its chunks (keys, order) */
	mgt_dt dt;                 /* the weights' dtype */
	bool dist;                 /* torch_dist, else torch */
	bool optim;                /* writing the optimizer's state (mg_out_opt.c) */
	bool distopt;              /* as the distributed optimizer's (distrib_optim.pt) */
	float step_f, scale_f;     /* the optimizer's step and the fp16 loss scale, kept for the writer */
	char *tmp, *iter;
	void **bufs;               /* one rank's tensors, kept until its file is written */
	int nbufs;
} mg_out;
void mg_put_args(mg_out *o, mgt_pyw *w, int64_t it, json_t *meta);
/* The first items of a rank file's or common.pt's dict: args, checkpoint_version 3.0, iteration
 * (checkpointing.py generate_state_dict). */
void mg_put_head(mg_out *o, mgt_pyw *w, int64_t it, json_t *meta);
mgt_status mg_row_data(mg_out *o, const mgt_tensor *x, const void **out);
void mg_free_bufs(mg_out *o);
mgt_status mg_write_dist(mg_out *o, int64_t it, json_t *meta);
/* mg_out_opt.c: chunk c's "optimizer" value (FP32Optimizer's or Float16OptimizerWithFloat16Params'
 * state dict from the source's moments and fp32 weights, meta's step) and "opt_param_scheduler". */
mgt_status mg_put_optimizer(mg_out *o, mgt_pyw *w, mg_chunk *c, json_t *meta);
void mg_put_scheduler(mg_out *o, mgt_pyw *w, json_t *meta);
/* A param group's dict (weight-decayed or not) with params first .. first + n - 1 (none: n < 0). */
void mg_put_group(mg_out *o, mgt_pyw *w, bool wd, int first, int n);
/* The distributed optimizer's: the rank file's "optimizer" (param groups without params), and
 * distrib_optim.pt of chunk c written to path (Megatron's buffer of one bucket, the run's DP
 * padding stripped as Megatron strips it). */
void mg_put_dist_optimizer(mg_out *o, mgt_pyw *w, json_t *meta);
mgt_status mg_write_distrib_optim(mg_out *o, mg_chunk *c, const char *path);

#endif
