/* lib/model/model_impl.h: the model chunk's internals, shared by lib/model's files.  Not a public
 * header.  A file calls only files of the levels below its own (tests/golden/house.sh: no call
 * circle):
 *   stack.c (dispatch: upload, forward and backward by recipe, recomputation, outputs), infer.c
 *   chunk.c (dimensions, layout checks, buffers sized in the dry pass, accessors, free)
 *   table.c (the tensor table: config checks, the GPT and BERT stacks' assembly, layout, boxes)
 *   t5.c (the encoder-decoder recipe: two stacks and cross-attention; its rows)
 *   kinds.c (the layer kinds by symbol: rows, forward, backward, rerun)
 *   embed_head.c (embedding, heads), layer_attn.c, layer_mlp.c, layer_moe.c (the layer kinds)
 *   bert.c (BERT's heads and rows), moe.c, moe_route.c (MoE layers)
 *   sublayer.c (TP reductions and gathers, norms, bias-dropout-add, linears, cross entropy)
 *   cp.c (context-parallel attention), fp8lin.c (fp8 linears)
 *   arena.c (backend memory, counted in the dry pass), rows.c (the row builder, the layer
 *   symbols, row overlaps), families.c, moe_config.c */
#ifndef MGT_MODEL_IMPL_H
#define MGT_MODEL_IMPL_H

#include "model.h"

#include <stddef.h>

/* Per layer and slot.  x_in, x_mid, mean*, rstd*: [Th] rows (this rank's part of the sequence
 * under sequence parallelism); ln1, ln2: [T, h] (gathered over TP under SP); the rest [T, .].
 * ln1, ln2 and act hold elements of mgt_model.prec.act_t, fc1 of mgt_model.prec.fc1_t,
 * qkv and ctx of mgt_model.prec.act_t (with --qk-layernorm linear_qkv's output qkv_pre stays fp32:
 * the head norms' backward reads it), x_in and x_mid of mgt_model.prec.res_t (16-bit under a 16-bit layout precision: the float pointer is then only a handle, never indexed
 * as floats).
 * Under activation recomputation (mgt_model_layout.recompute) some pointers are aliases of the
 * chunk's shared recomputation scratch (mgt_model.rc): bit k of `own` says whether buffer k (in
 * declaration order, LA_* below) was allocated for this layer and slot. */
typedef struct {
	float *x_in, *ln1, *mean1, *rstd1, *qkv, *ctx, *lse, *x_mid, *ln2, *mean2, *rstd2, *fc1, *act;
	/* --qk-layernorm: linear_qkv's output before the head norms [T, qkv_l], and the norms'
	 * statistics [T*ng*r] (queries) and [T*ng] (keys); NULL without */
	float *qkv_pre, *qmean, *qrstd, *kmean, *krstd;
	/* A Mamba-2 layer (layer_mamba.c; its pre-norm is ln1, mean1, rstd1): in_proj's output
	 * zx [T, W] (W = 2 DI + 2 G N + NH per rank: z, x, B, C, dt), the conv's output conv [T, CD],
	 * the scan's output y [T, DI] and its chunk states (mgt_ssd_states_floats), the gated norm's
	 * output norm [T, DI] and its statistics nrstd [T, G]; NULL in other layers.  zx, conv, y and
	 * norm of mgt_layer_mamba_t (16-bit under a 16-bit precision), the states and nrstd fp32 */
	float *mzx, *mconv, *my, *mstates, *mnorm, *mrstd;
	/* under context parallelism: x, B, C and dt of the rank's head block over the whole
	 * sequence [cp T, wx / cp] in mgt_layer_mamba_t (mamba_cp.c; mconv then holds its conv's three
	 * regions) */
	float *mzxg;
	unsigned own;
} layer_act;

/* The buffers of layer_act by index (the order of its fields). */
enum { LA_X_IN, LA_LN1, LA_MEAN1, LA_RSTD1, LA_QKV, LA_CTX, LA_LSE, LA_X_MID, LA_LN2, LA_MEAN2, LA_RSTD2,
       LA_FC1, LA_ACT, LA_QKV_PRE, LA_QMEAN, LA_QRSTD, LA_KMEAN, LA_KRSTD, LA_M_ZX, LA_M_CONV, LA_M_Y,
       LA_M_STATES, LA_M_NORM, LA_M_RSTD, LA_M_ZXG, LA_N };
_Static_assert(offsetof(layer_act, own) == LA_N * sizeof(float *), "layer_act: LA_* names every buffer");
static inline float **la_buf(layer_act *a, int k) { return (float **)a + k; }

/* One micro-batch in flight: its layers' activations, the head's, its batch and dropout key. */
typedef struct {
	layer_act *la;
	float *res_out, *lnf, *meanf, *rstdf, *logits, *mx, *sumexp, *tgt, *loss, *mask;
	int32_t *tokens, *labels, *pos;
	int32_t *types;    /* BERT with the binary head: token types [T] (NULL otherwise) */
	uint8_t *kmask;    /* BERT: the attention's key mask [T] (1 = attend; NULL otherwise) */
	int32_t *seg;      /* packed documents: their starts [T * cp.size] (mgt_attn.seg_start: under
			    * context parallelism the whole micro-batch's); NULL otherwise */
	int32_t *cp_rows;  /* packed documents under context parallelism: the micro-batch's
			    * mgt_microbatch.cp_rows [cp.size * T] (host memory); NULL otherwise */
	uint64_t cp_ver;   /* which micro-batch cp_rows holds (cp.ver when it came) */
	uint64_t drop_key;
} slot_act;

/* A model chunk.  Fields of one concern are grouped in a named member (m->prec, m->scratch,
 * m->mem, m->rc, m->run, m->ep, m->cp) or behind a module's state pointer (moe, fp8, bert,
 * t5).  What stays at the top level is what nearly every file reads on nearly every line: the
 * configuration, layout, table, backend and parallel state, the chunk's dimensions (s, b, T,
 * Th, h, nq_l, ...; T5 switches some per stack: mgt_t5_dims), the tensors by role, the layer
 * pattern, the parameters and the slots; a group for them would only lengthen every expression.
 * The few fields left beside a module's pointer (kmask_h by bert, attn_bias by t5) are read
 * outside that module, where its state may be NULL. */
struct mgt_model {
	mgt_model_config c;
	const mgt_family *fam;     /* c.family's row (families.c): recipe, heads; the chunk tests its fields */
	mgt_model_layout L;
	mgt_tensor_table tt;
	mgt_backend *be;
	const mgt_parallel *ps;
	int s, b, T, Th;           /* Th: rows of the residual stream here (T, or T/tp with SP) */
	int64_t h, nq_l, ng_l, r, d, qkv_l, ffn_l, fc1_l, V_l, v0, r0;
	mgt_norm_kind norm;
	mgt_act_kind act;
	bool layernorm, rope, qkln, sp, first, last;
	int rot_dim;
	float *inv_freq;           /* RoPE frequencies [rot_dim/2] (backend memory) */
	float *params, *grads;
	/* Precision: how parameters and activations are stored */
	struct {
		/* the 16-bit copy of params (mgt_model_layout.precision; NULL under fp32) of type lp_t,
		 * refreshed by the next forward when lp_stale */
		void *lp;
		mgt_elem_type lp_t;
		bool lp_stale;
		/* --apply-layernorm-1p: the norm weights as applied, 1 + w (backend fp32, refreshed with
		 * lp), at nw_off[i] for tensor i (a norm weight), and a row of ones to add; NULL without */
		float *nw1, *ones;
		size_t *nw_off;
		/* Storage of the activations only GEMMs read (backend.h, "Storage"): act_t for ln1, the
		 * MLP activation, the final norm's output and the logits, ln2 (which the MoE router and
		 * experts read too), fc1_t for the dense MLP's fc1 output; the 16-bit type of a 16-bit
		 * layout precision, else fp32.  Those layer_act and slot_act pointers then point at 2-byte
		 * elements. */
		mgt_elem_type act_t, fc1_t;
		/* the residual stream (layer_act x_in, x_mid; slot_act res_out; the hidden states between
		 * stages): act_t unless mgt_model_layout.fp32_residual_connection */
		mgt_elem_type res_t;
	} prec;
	/* tensors by role and local layer; NULL when absent */
	const mgt_tensor *(*by_role)[MGT_T_NROLES];
	const mgt_tensor *glob[MGT_T_NROLES];
	int first_layer, n_layers;
	/* the layer kinds (mgt_model_layer_pattern): local layer li's symbols are pattern[k0[li],
	 * k0[li + 1]) ("*-" or "*E": its attention then its MLP or MoE; one symbol in a hybrid
	 * model); pattern NUL-terminated, k0 [n_layers + 1]; set by chunk.c's index_roles */
	char *pattern;
	int *k0;
	slot_act *sa, *cur;
	/* Activation recomputation scratch, shared by the slots (chunk.c alloc_recompute): FULL n
	 * layers' buffers (the largest recompute group; x_in of its first layer is the slot's);
	 * SELECTIVE one layer's ctx and lse; NULL and 0 without recomputation */
	struct {
		layer_act *layers;
		int n;
	} rc;
	/* Scratch shared by the slots, each of the type it holds (under a 16-bit precision the float
	 * pointer of a 16-bit buffer is only a handle): dres of res_t (the residual's gradient);
	 * dtmp_h, dctx, dbig and dact of act_t (row-parallel and MoE outputs, the gradients of
	 * row-parallel and norm outputs, of the attention output and fused QKV, of the MLP activation
	 * and fc1's output); dloc (this rank's rows under SP: gradients of act_t, and the embedding's
	 * fp32 output), emb and lnl sized in fp32 */
	struct {
		float *emb, *lnl, *dres, *dtmp_h, *dloc, *dbig, *dctx, *dact;
	} scratch;
	/* Backend memory as mgt_model_balloc (arena.c) counts it (mgt_model_memory's activations and
	 * workspace): act_bytes of the activation buffers (the slots', the recomputation scratch, emb,
	 * lnl), work_bytes of the workspace (the other scratch, the modules' buffers); dry for
	 * mgt_model_measure: count the bytes, allocate nothing */
	struct {
		size_t act_bytes, work_bytes;
		bool dry;
	} mem;
	bool infer;                /* mgt_model_create_infer: parameters only, no gradients or slots */
	/* The running passes (stack.c): next_key, the dropout key of the next forward
	 * (mgt_model_set_dropout_key), and drop_key, the current slot's (its forward's, kept in
	 * slot_act for the backward; mgt_sublayer_site_key derives each site's from it); t_fwd and t_bwd,
	 * the seconds of the forwards and backwards since mgt_model_take_times; the gradient hook and
	 * its ctx (mgt_model_set_grad_hook; NULL without) */
	struct {
		uint64_t next_key, drop_key;
		double t_fwd, t_bwd;
		mgt_grad_hook hook;
		void *hook_ctx;
		/* FSDP's parameter hook (mgt_model_set_param_hook; NULL without) */
		mgt_param_hook phook;
		void *phook_ctx;
	} run;
	/* FSDP (shard.c): per bucket of a per-layer layout, its unit (the local layer of its tensors,
	 * -1 outside layers; NULL otherwise); lazy: the parameter and gradient buffers are reserved
	 * (backend reserve) rather than allocated: grads from optim_grads on, params and the 16-bit
	 * copy with optim_grads_params */
	int *unit;
	bool lazy_grads, lazy_params;
	/* Mamba-2 layers (layer_mamba.c): the mixer's sizes per TP rank (head dim p, state n, heads
	 * nh_l, groups g_l, d_inner di_l = nh_l p, conv channels cd_l = di_l + 2 g_l n, in_proj rows
	 * w_l = di_l + cd_l + nh_l) and the backward's fp32 scratch shared by the layers: dzx [T, w_l],
	 * dconv [T, cd_l], dy and dnorm [T, di_l] (NULL without 'M' layers) */
	struct {
		int64_t p, n, nh_l, g_l, di_l, cd_l, w_l;
		float *dzx, *dconv, *dy, *dnorm;
		/* context parallelism (mamba_cp.c): the unit of the column maps, the maps (backend int32:
		 * send_map [T wx / cpu], asm_map [T w_l / cpu]) and the exchanges' scratch in
		 * mgt_layer_mamba_t: snd, rcv (then dz: [T, w_l] rows, z's columns), yg (y or dy of the
		 * whole sequence), dzxg, dconvg */
		int64_t cpu;
		int32_t *send_map, *asm_map;
		void *snd, *rcv, *yg, *dzxg, *dconvg;
	} mamba;
	/* Mixture of Experts (moe.c): NULL when no layer of the chunk is an MoE layer */
	struct moe_state *moe;
	/* expert parallelism: size and this rank's rank of the expert-parallel group (its experts:
	 * [rank E/size, (rank + 1) E/size)); size = 1 without */
	struct {
		int size, rank;
	} ep;
	/* Context parallelism (cp.c): size and rank of the context-parallel group, chunk length
	 * C = s/2 (s = seq_length/size local positions: global chunks rank and 2 size-1-rank); size = 1
	 * without. */
	struct {
		int size, rank, C;
		/* scratch shared by the slots and layers: the local keys and values and their gradient
		 * kv, dkv [T, ng_l, 2, d]; p2p: one block's output ob [C*b, nq_l*d] and log-sum-exp lb
		 * (laid out as a layer's lse); allgather: all, glob, dglob [size * T, ng_l, 2, d] (rank
		 * order, position order, and the gradient in position order).  Under a 16-bit act_t: the
		 * fp32 copies the blocks run on, q32 [T, qkv_l], o32 and g32 [T, nq_l*d] (ctx, dctx) and
		 * dq32 [T, qkv_l], and the 16-bit keys and values that move, kv16 [T, ng_l, 2, d] and
		 * (allgather) all16 [size * T, ng_l, 2, d] */
		struct { float *kv, *dkv, *ob, *lb, *all, *glob, *dglob, *q32, *o32, *g32, *dq32; void *kv16, *all16; } buf;
		/* a2a: send and receive buffers, the layer's qkv, ctx, dctx and dqkv of the whole sequence
		 * for this rank's ng_l/size query groups (rows in position order), and the row maps
		 * (backend int32 [T size]: pack, unpack, to_glob, from_glob; host: their host copy) */
		struct { float *snd, *rcv, *q, *o, *dq, *dout; int32_t *idx[4], *host; int64_t *cnt; } a2a;
		/* packed documents: the row maps of a2a.idx are those of slot maps_slot's micro-batch
		 * maps_ver (NULL: the fixed zigzag); ver counts the micro-batches uploaded */
		const slot_act *maps_slot;
		uint64_t maps_ver, ver;
	} cp;
	/* fp8 linear layers (fp8lin.c): NULL without fp8 (mgt_model_layout.fp8) */
	struct fp8_state *fp8;
	/* BERT's heads (bert.c): NULL but on a BERT chunk's last stage; kmask_h: BERT's host
	 * staging of a micro-batch's key mask [T] (NULL otherwise) */
	struct bert_state *bert;
	uint8_t *kmask_h;
	/* T5's encoder-decoder (t5.c): NULL but for a T5 chunk.  Then layers [0, n_layers/2) are the
	 * encoder's, the rest the decoder's; s, T, Th and r0 above (and the slot's tokens, pos and
	 * kmask) are the current stack's, switched by mgt_t5_dims */
	struct t5_state *t5;
	/* the self-attention's relative position bias [2 s - 1, heads] (mgt_attn.bias) of the current
	 * stack and its gradient's accumulator, set by t5.c's mgt_t5_dims; NULL without */
	const float *attn_bias;
	float *attn_dbias;
};

static inline float *P(mgt_model *m, const mgt_tensor *t) { return t ? m->params + t->offset : NULL; }
static inline float *G(mgt_model *m, const mgt_tensor *t) { return t ? m->grads + t->offset : NULL; }

/* The type in which the linear ops get weights now: the 16-bit copy's while the backend computes
 * in it, else fp32 (the op rounds); W is the weight of t in that type (NULL for no tensor). */
static inline mgt_elem_type WT(const mgt_model *m)
{
	return m->prec.lp && mgt_precision_dtype(m->be->precision) == m->prec.lp_t ? m->prec.lp_t : MGT_DT_F32;
}
static inline const void *W(mgt_model *m, const mgt_tensor *t)
{
	if (!t) return NULL;
	return WT(m) == MGT_DT_F32 ? (const void *)P(m, t) : (const void *)((const uint16_t *)m->prec.lp + t->offset);
}

/* The weight a norm applies: its parameter, or under --apply-layernorm-1p 1 + it (NULL for no
 * tensor). */
static inline const float *NW(mgt_model *m, const mgt_tensor *t)
{
	if (!t || !m->prec.nw1) return P(m, t);
	return m->prec.nw1 + m->prec.nw_off[t - m->tt.t];
}

/* A dropout probability as applied: p in training, 0 otherwise. */
static inline float drop_p(bool train, double p) { return train ? (float)p : 0.0f; }

static inline const mgt_tensor *T_(const mgt_model *m, int l, mgt_tensor_role role)
{
	return l < 0 ? m->glob[role] : m->by_role[l - m->first_layer][role];
}

/* Backend memory of `bytes` for the chunk, counted in *acct (nothing allocated for a dry chunk:
 * mgt_model_measure); after a failure (*st set) returns NULL and does nothing. */
void *mgt_model_balloc(mgt_model *m, size_t bytes, size_t *acct, mgt_status *st);

/* ---- Mixture of Experts (moe.c) ----
 * mgt_moe_setup (after the table is indexed) makes m->moe when the chunk has MoE layers;
 * mgt_moe_alloc allocates its activations (per slot) and scratch through mgt_model_balloc;
 * mgt_moe_free frees both.  mgt_moe_layer: whether local layer li is an MoE layer ('E' in m->pattern).
 * mgt_moe_forward: from the pre_mlp_layernorm output x [T, h] (gathered over TP), out [T, h]
 * (both of act_t, as every MoE activation and gradient; router logits and probabilities fp32)
 * the partial MoE output (before the TP reduction and bias-dropout-add), routing statistics
 * counted when train.  mgt_moe_backward: from dY [T, h] (the gradient of the MoE output,
 * gathered), overwrites dY with the partial gradient of x (to be reduced over TP like the dense
 * MLP's) and sets *dx_loc to this rank's [Th, h] rows of the router's (and gate's) part of it,
 * to add after the reduction.  Errors: NOMEM, IO (communicator, upload/download). */
mgt_status mgt_moe_setup(mgt_model *m);
mgt_status mgt_moe_alloc(mgt_model *m);
/* Inference (infer.c): MoE buffers for calls of up to T tokens (grown, never shrunk), and the
 * chunk's token count set to T for the next forward (one sequence: the seq_aux statistics are
 * not used there).  Errors: NOMEM. */
mgt_status mgt_moe_reserve(mgt_model *m, int T);
void mgt_moe_free(mgt_model *m);
bool mgt_moe_layer(const mgt_model *m, int li);
mgt_status mgt_moe_forward(mgt_model *m, int li, bool train, const void *x, void *out);
mgt_status mgt_moe_backward(mgt_model *m, int li, bool train, const void *x, void *dY, void **dx_loc);

/* ---- context parallelism (cp.c) ----
 * mgt_cp_alloc: the scratch above through mgt_model_balloc (nothing when cp.size = 1); mgt_cp_free.
 * mgt_cp_attn_fwd: a->ctx and a->lse from a->qkv (after RoPE) over the whole sequence, by the
 * layout's --cp-comm-type, with attention dropout p under key (global positions: the masks of
 * the single-process run); qkv and ctx of type act_t.  mgt_cp_attn_bwd: dqkv [T, qkv_l] written
 * from dctx [T, nq_l*d] (both of type gt) and the layer's qkv, ctx, lse.  Both communicate over ps->cp_comm; every rank of the group calls
 * them in the same order.  Errors: the communicator's (MGT_ERR_IO).
 * mgt_cp_global_row: the row of the whole sequence's [S*b, .] activation that local row t
 * (t = i*b + j) is (t itself when cp.size = 1; with packed documents the current slot's
 * cp_rows): dropout elements are indexed by it.
 * mgt_cp_set_rows: the current slot's micro-batch's cp_rows [cp.size * T] (copied; NULL is
 * MGT_ERR_USAGE: a packed chunk under context parallelism needs them).
 * The all-to-all's pieces, for the Mamba layers' exchanges too (mamba_cp.c): mgt_cp_maps_alloc
 * the row maps m->cp.a2a.idx (indexed by the enum below: PACK[q T + t] = t cp + q, the rank's row
 * t block q to the send order; UNPACK its inverse; TO_GLOB received rows to position order;
 * FROM_GLOB position order to the send order) for the fixed zigzag, once; mgt_cp_use_maps those
 * of the current slot's packed micro-batch; mgt_cp_a2a_move one all-to-all over the context group
 * of T rows of w elements of type t per rank pair (block q to and from rank q).  Errors: NOMEM,
 * the communicator's (MGT_ERR_IO). */
enum { PACK, UNPACK, TO_GLOB, FROM_GLOB };
mgt_status mgt_cp_maps_alloc(mgt_model *m);
mgt_status mgt_cp_use_maps(mgt_model *m);
mgt_status mgt_cp_a2a_move(mgt_model *m, void *dst, const void *src, size_t w, mgt_elem_type t);
mgt_status mgt_cp_alloc(mgt_model *m);
void mgt_cp_free(mgt_model *m);
mgt_status mgt_cp_attn_fwd(mgt_model *m, layer_act *a, float p, uint64_t key);
mgt_status mgt_cp_attn_bwd(mgt_model *m, layer_act *a, void *dqkv, const void *dctx, mgt_elem_type gt, float p,
			   uint64_t key);
int64_t mgt_cp_global_row(const mgt_model *m, int64_t t);
mgt_status mgt_cp_set_rows(mgt_model *m, const int32_t *cp_rows);

/* ---- fp8 linear layers (fp8lin.c; Transformer Engine's module/linear.py) ----
 * mgt_model_fp8_layer: whether local layer li's four linears run in fp8 (the layout asks for fp8
 * and the layer is not one of --num-layers-at-start/end-in-bf16).  mgt_model_fp8_check: the
 * layout's fp8 against the model (no MoE, no full recomputation, T tokens and dims[j] = {in, out}
 * of linear_qkv, linear_proj, linear_fc1, linear_fc2 on this TP rank multiples of 16); USAGE
 * naming the flag to change.  mgt_model_fp8_alloc / _free: the state and its buffers through
 * mgt_model_balloc (nothing without fp8).  mgt_model_fp8_norm_out: the [T, h] fp32 scratch a norm
 * writes an fp8 linear's input into (TE quantizes the fp32 norm output).  mgt_model_fp8_fwd:
 * linear j (0 qkv, 1 proj, 2 fc1, 3 fc2) of local layer li of the current slot, y [T, out] of
 * type yt (+ b) from x [T, in] of type xt and the weight w of type wt; mgt_model_fp8_bwd: its
 * dgrad dx (of type dxt; skipped when NULL), wgrad dw (fp32, accumulated) and db (accumulated,
 * the column sums of dy; skipped when NULL) from dy [T, out] of type dyt.
 * mgt_model_fp8_update: the delayed-scaling update of the forward (backward false) or backward
 * slots, after a training forward or a backward.  Errors: NOMEM, IO (communicators, copies). */
bool mgt_model_fp8_layer(const mgt_model *m, int li);
mgt_status mgt_model_fp8_check(const mgt_model_config *c, const mgt_model_layout *L, int T, int64_t dims[4][2]);
mgt_status mgt_model_fp8_alloc(mgt_model *m);
void mgt_model_fp8_free(mgt_model *m);
float *mgt_model_fp8_norm_out(mgt_model *m);
mgt_status mgt_model_fp8_fwd(mgt_model *m, int li, int j, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt,
			     const void *w, mgt_elem_type wt, const float *b);
mgt_status mgt_model_fp8_bwd(mgt_model *m, int li, int j, void *dx, mgt_elem_type dxt, float *dw, float *db,
			     const void *dy, mgt_elem_type dyt);
mgt_status mgt_model_fp8_update(mgt_model *m, bool backward);

/* ---- BERT (bert.c; megatron/core/models/bert/bert_model.py) ----
 * mgt_bert_alloc / _free: the LM head's activations per slot and the pooler's host buffers
 * (nothing but on a BERT chunk's last stage).  mgt_bert_set_batch: the current slot's loss
 * normalizer (sum of loss_mask) and is_random.  mgt_bert_head_fwd: from the final norm's output
 * lnf [T, h] (act_t, whole on every TP rank) the LM head, logits and cross entropy, the pooler,
 * binary head and sentence-order loss; *loss = lm + sop of the micro-batch; not train: also the
 * masked-token accuracy's counts.  mgt_bert_head_bwd:
 * their gradients (the losses' scaled by scale), the gradient of lnf written to dlnf [T, h]
 * (act_t; whole, equal on every TP rank).  mgt_bert_losses: slot's last lm and sop.
 * Errors: NOMEM, IO (copies, the TP all-reduce). */
mgt_status mgt_bert_alloc(mgt_model *m);
/* Whether tensor role r is one of BERT's heads, which every TP rank computes on the whole
 * (gathered) sequence: their gradients are whole, with no sequence-parallel all-reduce. */
bool mgt_bert_whole_grad(mgt_tensor_role r);
void mgt_bert_free(mgt_model *m);
void mgt_bert_set_batch(mgt_model *m, const mgt_microbatch *mb);
mgt_status mgt_bert_head_fwd(mgt_model *m, const void *lnf, bool train, double *loss);
mgt_status mgt_bert_head_bwd(mgt_model *m, const void *lnf, void *dlnf, float scale);
/* sublayer.c for bert.c and the head: the vocab-parallel cross entropy of the current slot's logits against its
 * labels and mask (xent_max, the TP max, xent_stats, the TP sums, xent_loss: *sum = the masked
 * sum); an in-place TP all-reduce (sum) of n elements of type t. */
mgt_status mgt_model_xent(mgt_model *m, double *sum);
mgt_status mgt_model_tp_allreduce(mgt_model *m, void *x, size_t n, mgt_elem_type t);

/* ---- T5 (t5.c; megatron/core/models/T5/t5_model.py) ----
 * mgt_t5_setup: the encoder-decoder's state (dimensions of both stacks, the encoder's final norm)
 * on a T5 chunk, nothing otherwise; USAGE for a layout T5 does not run under (naming the flag).
 * mgt_t5_dims: the chunk's s, T, Th, r0 (and the current slot's tokens, positions and key mask)
 * set to the encoder's (T5_ENC), the decoder's (T5_DEC) or the larger of each (T5_MAX: what the
 * shared scratch is sized by; nothing on a chunk that is not T5).  mgt_t5_alloc / _free: the per-slot buffers (both stacks' inputs,
 * the encoder output and its gradient, the decoder layers' cross-attention activations) through
 * mgt_model_balloc.  mgt_t5_upload: the micro-batch's encoder and decoder arrays into the current
 * slot.  mgt_t5_forward: the encoder, its final norm, the decoder's layers (the caller runs the
 * head on the decoder's dims); mgt_t5_backward: the head's backward and both stacks', with the
 * encoder output's gradient summed over the decoder's cross-attentions.  Errors: NOMEM, IO. */
enum { T5_ENC, T5_DEC, T5_MAX };
mgt_status mgt_t5_setup(mgt_model *m);
void mgt_t5_dims(mgt_model *m, int which);
mgt_status mgt_t5_alloc(mgt_model *m);
void mgt_t5_free(mgt_model *m);
mgt_status mgt_t5_upload(mgt_model *m, const mgt_microbatch *mb);
mgt_status mgt_t5_forward(mgt_model *m, bool train);
mgt_status mgt_t5_backward(mgt_model *m, bool train, float scale);
/* Whether m is a T5 chunk with --position-embedding-type relative. */
bool mgt_t5_relative(const mgt_model *m);
/* Stack k's (0 encoder, 1 decoder) relative position bias for attention over s positions (the
 * inference's lengths): bias [2 s - 1, heads] fp32 (backend memory, written: element (x, n) is
 * head n's table entry of the bucket of distance x - (s - 1)), gathered through idx [2 s - 1]
 * (backend int32 scratch, overwritten).  MGT_ERR_NOMEM, or the upload's error. */
mgt_status mgt_t5_rel_bias(mgt_model *m, int k, int s, float *bias, int32_t *idx);
/* The encoder's sequence length; encoder.final_layernorm's weight (bias: its bias). */
int mgt_t5_enc_len(const mgt_model *m);
const mgt_tensor *mgt_t5_enc_norm(const mgt_model *m, bool bias);

/* ---- sublayer.c: the pieces the layer kinds, heads and recipes share ----
 * mgt_sublayer_site_key: the dropout key of site `site` of layer l (l = -1: the embedding).
 * mgt_sublayer_tp_reduce: sum the partial [T, h] results in full (of type t) over TP: all-reduce
 * in place (*out = full) or, under SP, reduce-scatter this rank's rows into dloc (*out = dloc).
 * mgt_sublayer_tp_gather: under SP, gather every TP rank's rows [Th, h] (of type t) into full
 * [T, h].  mgt_sublayer_grad_part: where a [Th, h] gradient goes before that gather into dtmp_h.
 * mgt_sublayer_bda_fwd / _bda_bwd: bias-dropout-add on this rank's residual rows (out, resid and
 * dres of res_t; y and dy of type yt / dyt), each dropout element indexed by its global row.
 * mgt_sublayer_norm_gather: the norm of this rank's rows x (res_t) into full [T, h] of type t,
 * gathered under SP.  mgt_sublayer_reduce_bda: out = resid + dropout(reduce_TP(dtmp_h) + bias), the
 * row-parallel output (type yt) and its bda.  mgt_sublayer_bda_bwd_gather: dtmp_h [T, h] (type t)
 * = the gradient of a row-parallel output before its bda, gathered under SP.
 * mgt_sublayer_reduce_norm_bwd: dres += d(norm input) from the partial [T, h] gradient in src (act_t)
 * of the norm's output, reduced over TP (plus, when not NULL, extra: this rank's [Th, h] rows of a
 * gradient computed on them alone, the MoE router's).  mgt_sublayer_lin_fwd: linear j (0 qkv,
 * 1 proj, 2 fc1, 3 fc2) of local layer li, y [T, out] = x [T, in] . w^T (+ b), in fp8 (fp8lin.c)
 * or by the backend; mgt_sublayer_lin_bwd: its backward (dx written, dw and db accumulated).
 * mgt_sublayer_norm_dst: where a norm feeding linear_qkv or linear_fc1 writes (buf, or under fp8
 * fp8lin.c's fp32 scratch) and its type *t.  Errors: the communicators' (MGT_ERR_IO). */
uint64_t mgt_sublayer_site_key(const mgt_model *m, int l, int site);
mgt_status mgt_sublayer_tp_reduce(mgt_model *m, void *full, mgt_elem_type t, void **out);
mgt_status mgt_sublayer_tp_gather(mgt_model *m, void *full, const void *part, mgt_elem_type t);
void *mgt_sublayer_grad_part(mgt_model *m);
void mgt_sublayer_bda_fwd(mgt_model *m, void *out, const void *resid, const void *y, mgt_elem_type yt, const float *b,
			  float p, uint64_t key);
void mgt_sublayer_bda_bwd(mgt_model *m, void *dy, mgt_elem_type dyt, float *db, float p, uint64_t key);
mgt_status mgt_sublayer_norm_gather(mgt_model *m, void *full, mgt_elem_type t, float *mean, float *rstd, const void *x,
				    const mgt_tensor *w, const mgt_tensor *b);
mgt_status mgt_sublayer_reduce_bda(mgt_model *m, void *out, const void *resid, const mgt_tensor *bias, bool train,
				   uint64_t key, mgt_elem_type yt);
mgt_status mgt_sublayer_bda_bwd_gather(mgt_model *m, const mgt_tensor *bias, bool train, uint64_t key, mgt_elem_type t);
mgt_status mgt_sublayer_reduce_norm_bwd(mgt_model *m, void *src, const void *x, const mgt_tensor *w, const mgt_tensor *b,
					const float *mean, const float *rstd, const void *extra);
mgt_status mgt_sublayer_lin_fwd(mgt_model *m, int li, int j, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt,
				const mgt_tensor *w, const mgt_tensor *b, int in, int out);
mgt_status mgt_sublayer_lin_bwd(mgt_model *m, int li, int j, void *dx, mgt_elem_type dxt, const mgt_tensor *w,
				const mgt_tensor *b, const void *dy, mgt_elem_type dyt, const void *x, mgt_elem_type xt,
				int in, int out);
void *mgt_sublayer_norm_dst(mgt_model *m, int li, void *buf, mgt_elem_type *t);

/* ---- the layer kinds (layer_attn.c '*', layer_mlp.c '-', layer_moe.c 'E': the symbols of
 * mgt_model.pattern, which stack.c dispatches on) ----
 * Local layer li of the current slot.  mgt_layer_attn_fwd: the self-attention block from x_in,
 * its output (the residual after attention) to out; mgt_layer_attn_core_fwd: its core attention
 * alone (ctx and lse from the kept qkv: what selective recomputation reruns).  mgt_layer_mlp_fwd:
 * the dense MLP block from x_mid, its output to out (NULL: stop after the activation, for
 * recomputation); mgt_layer_moe_fwd: the MoE block (moe.c) in its place (NULL: stop after the
 * experts).  The backwards take dres (the gradient of the block's output) to the gradient
 * of its input, accumulating the parameters' gradients.  mgt_layer_attn_numel / _mlp_numel /
 * _moe_numel: the elements of the layer buffer k (LA_*) the kind keeps for local layer li (-1: a
 * dense layer's in the recomputation scratch), 0 for a buffer it does not use or does not have
 * here (under fp8 the cast keeps the norm output and the activation; an MoE layer's expert
 * activations are moe.c's); chunk.c sizes the slots with them. */
size_t mgt_layer_attn_numel(const mgt_model *m, int li, int k);
size_t mgt_layer_mlp_numel(const mgt_model *m, int li, int k);
size_t mgt_layer_moe_numel(const mgt_model *m, int li, int k);
size_t mgt_layer_mamba_numel(const mgt_model *m, int li, int k);
mgt_status mgt_layer_attn_fwd(mgt_model *m, int li, bool train, void *out);
mgt_status mgt_layer_attn_core_fwd(mgt_model *m, int li, bool train);
mgt_status mgt_layer_attn_bwd(mgt_model *m, int li, bool train);
mgt_status mgt_layer_mlp_fwd(mgt_model *m, int li, bool train, void *out);
mgt_status mgt_layer_mlp_bwd(mgt_model *m, int li, bool train);
mgt_status mgt_layer_moe_fwd(mgt_model *m, int li, bool train, void *out);
mgt_status mgt_layer_moe_bwd(mgt_model *m, int li, bool train);
/* The Mamba-2 kind (layer_mamba.c; 'M'): mgt_layer_mamba_fwd from x_in (out NULL: stop after the
 * gated norm, for recomputation), mgt_layer_mamba_bwd.  mgt_layer_mamba_dims sets m->mamba's
 * sizes from the config and TP; mgt_layer_mamba_alloc allocates its backward's scratch when the
 * chunk has 'M' layers (through mgt_model_balloc: NOMEM; chunk.c frees it). */
/* The mixer's conv kernel width (MambaMixer d_conv) and its gated norm's epsilon (RMSNormGated's
 * eps: 1e-5 whatever --norm-epsilon says); layer_mamba.c and infer.c use them. */
enum { MGT_MAMBA_CONV_K = 4 };
#define MGT_MAMBA_GATED_EPS 1e-5f
mgt_status mgt_layer_mamba_fwd(mgt_model *m, int li, bool train, void *out);
mgt_status mgt_layer_mamba_bwd(mgt_model *m, int li, bool train);
void mgt_layer_mamba_dims(mgt_model *m);
mgt_status mgt_layer_mamba_alloc(mgt_model *m);
/* The storage type of a Mamba-2 layer's activations and their gradients (mzx, mconv, my, mnorm,
 * under context parallelism mzxg and mamba_cp.c's exchanges, and the backward's dzx, dconv, dy,
 * dnorm): the run's activation type (mgt_model.prec.act_t). */
mgt_elem_type mgt_layer_mamba_t(const mgt_model *m);
/* Context parallelism of the Mamba layers (mamba_cp.c): mgt_mamba_cp_alloc its maps and scratch
 * (NOMEM; upload errors); mgt_mamba_cp_states the floats of a layer's chunk states over the whole
 * sequence of the rank's head block; mgt_mamba_cp_fwd from a->mzx (in_proj's output, local
 * tokens) a->mzxg, a->mconv, a->mstates and a->my (local tokens, every head of the rank);
 * mgt_mamba_cp_bwd from m->mamba.dy and the local dz (at mgt_mamba_cp_dz: [T, w_l] rows, written
 * by the gated norm's backward in their first di_l columns) m->mamba.dzx, accumulating the conv's, dt_bias', A_log's and D's
 * gradients of the rank's block.  Both exchange over ps->cp_comm (MGT_ERR_IO). */
mgt_status mgt_mamba_cp_alloc(mgt_model *m);
size_t mgt_mamba_cp_states(const mgt_model *m);
/* the elements of a layer's exchanged rows over the whole sequence (a->mzxg), or with conv its conv
 * output (a->mconv): more than without context parallelism when B and C are replicated */
size_t mgt_mamba_cp_numel(const mgt_model *m, bool conv);
mgt_status mgt_mamba_cp_fwd(mgt_model *m, layer_act *a, int l);
mgt_status mgt_mamba_cp_bwd(mgt_model *m, layer_act *a, int l);
void *mgt_mamba_cp_dz(const mgt_model *m);

/* ---- embedding and head (embed_head.c) ----
 * mgt_model_embed_fwd: the embedding of the current slot's tokens (positions, token types) into
 * x0 (this rank's rows, res_t) with its dropout under key; mgt_model_embed_bwd: its backward from
 * dres.  mgt_model_head_fwd: the final norm and the head (the LM head and cross entropy, or
 * BERT's heads), *loss_sum the micro-batch's; mgt_model_head_bwd: their backward (losses scaled by
 * scale) into dres. */
mgt_status mgt_model_embed_fwd(mgt_model *m, bool train, void *x0, uint64_t key);
mgt_status mgt_model_embed_bwd(mgt_model *m, bool train, uint64_t key);
mgt_status mgt_model_head_fwd(mgt_model *m, bool train, double *loss_sum);
mgt_status mgt_model_head_bwd(mgt_model *m, float scale);

/* ---- activation recomputation groups (chunk.c) ----
 * mgt_model_rc_full: whether local layer li is recomputed whole (--recompute-granularity full);
 * mgt_model_rc_group: its group [*g0, *g1). */
bool mgt_model_rc_full(const mgt_model *m, int li);
void mgt_model_rc_group(const mgt_model *m, int li, int *g0, int *g1);

/* A chunk with its tensor table, roles and dimensions but no buffers (chunk.c). */
mgt_status mgt_model_new_chunk(mgt_model **out, const mgt_model_config *c, const mgt_model_layout *L,
			       mgt_backend *be, const mgt_parallel *ps, bool dry);
/* Allocate the zeroed parameter buffer (and with grads the gradient buffer, and under a 16-bit
 * layout precision the 16-bit copy).  Errors: NOMEM. */
mgt_status mgt_model_alloc_params(mgt_model *m, bool grads);
/* Bytes of the 16-bit parameter copy the chunk keeps (0 under fp32 and for inference). */
size_t mgt_model_lp_bytes(const mgt_model *m);
/* Refresh the 16-bit copy from the fp32 parameters when stale (forwards call it first). */
void mgt_model_lp_refresh(mgt_model *m);
/* shard.c: the units of a per-layer layout (m->unit); called by mgt_model_create after the layout. */
mgt_status mgt_model_shard_setup(mgt_model *m);
/* Run the parameter hook for local layer li (mgt_model_set_param_hook); OK without one or for a
 * layer outside [0, n_layers). */
mgt_status mgt_model_param_use(mgt_model *m, int li, mgt_param_use use);
/* Sharded bytes of the parameter and gradient buffers (mgt_model_memory under FSDP): the owned
 * shards, the units outside layers beyond their shards (gradients: written whole through the
 * backward; parameters: kept whole), and the layer units gathered or written at once beyond
 * their shards (shard.c gives each term's source). */
void mgt_model_shard_memory(const mgt_model *m, size_t *params, size_t *grads);
/* Elements of the buckets outside layers (unit -1) of a per-layer layout; 0 without units. */
size_t mgt_model_shard_outside_numel(const mgt_model *m);
/* Fill m->inv_freq (allocated here when NULL) with the RoPE frequencies.  Errors: NOMEM, IO. */
mgt_status mgt_model_upload_inv_freq(mgt_model *m);
/* The output layer's weight: output_layer.weight, or the word embedding when tied. */
const mgt_tensor *mgt_model_output_weight(const mgt_model *m);

/* ---- table rows: the builder the layer kinds and recipes add their rows through (rows.c) -----
 * mgt_tensor_table_build_ep builds this rank's table (tp_rank of tp, pp_rank of pp, ep_rank of ep)
 * in Megatron-Core's parameter registration order, which decides the flat buffer's layout: table.c
 * adds the GPT and BERT stacks' embedding, layers (by pipeline stage) and final rows; each layer
 * kind adds its own rows (layer_attn.c, layer_mlp.c, layer_moe.c), each recipe its own (bert.c,
 * t5.c).  The first failure (MGT_ERR_NOMEM) stays in st and makes every later call do nothing.
 * mgt_rows_add: a row of global shape [rows, cols] (cols 0: 1-D [rows]) named suffix (layer -1)
 * or "encoder|decoder.layers.N.suffix" for global layer `layer` (an encoder-decoder's layers
 * [L, 2L) are its decoder's 0..L-1), its local piece cut over TP by the shard rule, initialized
 * by init (std: MGT_INIT_NORMAL's), weight decay on 2-D rows only (Megatron's param groups).
 * mgt_rows_norm: a norm over hidden_size, its weight (role w: ones, zeros under
 * --apply-layernorm-1p) then with LayerNorm its bias (role w + 1: zeros), replicated.
 * Levels: table.c's assembly (mgt_tensor_table_build_ep) and t5.c call kinds.c's mgt_rows_layer
 * and the recipes' rows functions, which add rows through rows.c's builder (mgt_rows_add,
 * mgt_rows_norm) at the bottom. */
typedef struct mgt_rows {
	mgt_tensor_table *tt;
	const mgt_model_config *c;
	const mgt_family *fam;
	int tp, tp_rank, pp, pp_rank, ep, ep_rank, cap;
	mgt_status st;
} mgt_rows;
void mgt_rows_add(mgt_rows *bd, int layer, mgt_tensor_role role, const char *suffix, int64_t rows, int64_t cols,
		  mgt_shard_rule shard, mgt_init_kind init, double std);
void mgt_rows_norm(mgt_rows *bd, int layer, mgt_tensor_role w, const char *name_w, const char *name_b);
/* mgt_rows_add_blocks: a MGT_SHARD_ROW_BLOCKS row of nblocks (<= MGT_TENSOR_MAX_BLOCKS) row
 * blocks of global rows blocks[k], each divisible by TP, and cols columns (0: 1-D). */
void mgt_rows_add_blocks(mgt_rows *bd, int layer, mgt_tensor_role role, const char *suffix, const int64_t *blocks,
			 int nblocks, int64_t cols, mgt_init_kind init, double std);
/* mgt_layer_symbols: global layer l's symbols in the layer pattern (mgt_model_layer_pattern),
 * "*-" (self-attention, dense MLP) or "*E" (an MoE layer by mgt_moe_is_layer); a static string.
 * mgt_rows_layer: layer l's rows, each symbol's kind in turn.  mgt_layer_attn_rows (layer_attn.c),
 * mgt_layer_mlp_rows (layer_mlp.c), mgt_layer_moe_rows (layer_moe.c): one kind's rows of global
 * layer l, in Megatron-Core's registration order. */
const char *mgt_layer_symbols(const mgt_model_config *c, int64_t l);
void mgt_rows_layer(mgt_rows *bd, int l);
void mgt_layer_attn_rows(mgt_rows *bd, int l);
void mgt_layer_mlp_rows(mgt_rows *bd, int l);
void mgt_layer_moe_rows(mgt_rows *bd, int l);
void mgt_layer_mamba_rows(mgt_rows *bd, int l);
/* The recipes' own rows.  mgt_bert_rows_embedding (bert.c): the first stage's token-type
 * embedding (with the binary head); mgt_bert_rows_heads: the last stage's final norm, LM head,
 * output layer, binary head and pooler.  mgt_t5_rows (t5.c): a whole T5 table (one stage): the
 * shared embedding, relative position biases, the encoder, its final norm, the decoder with
 * cross-attention, its final norm and the LM head's output rows. */
void mgt_bert_rows_embedding(mgt_rows *bd);
void mgt_bert_rows_heads(mgt_rows *bd);
void mgt_t5_rows(mgt_rows *bd);

/* kinds.c: the layer kinds by symbol, one table: rows (the kind's tensor-table rows of global
 * layer l), numel (the elements of layer buffer k it keeps for local layer li, as
 * mgt_layer_attn_numel), fwd (from the kind's input to out), bwd (from dres), rerun (what selective
 * recomputation reruns before bwd; NULL: nothing).  mgt_layer_kind_of: the symbol's row (zeros
 * for a symbol no kind has).  mgt_rows_layer (above) walks mgt_layer_symbols through it. */
typedef struct {
	void (*rows)(mgt_rows *bd, int l);
	size_t (*numel)(const mgt_model *m, int li, int k);
	mgt_status (*fwd)(mgt_model *m, int li, bool train, void *out);
	mgt_status (*bwd)(mgt_model *m, int li, bool train);
	mgt_status (*rerun)(mgt_model *m, int li, bool train);
} mgt_layer_kind_ops;
const mgt_layer_kind_ops *mgt_layer_kind_of(char symbol);

#endif
