/* lib/model/fp8lin.c: the fp8 linear layers of a model chunk, as Megatron runs them through
 * Transformer Engine (transformer_engine/pytorch/fp8.py's DelayedScaling
 * recipe, module/linear.py's GEMMs; megatron/core/fp8_utils.py).
 *
 * Linear j (FP8_QKV, FP8_PROJ, FP8_FC1, FP8_FC2) of local layer li is linear k = 4 li + j.  Its
 * delayed-scaling state is TE's: forward slots 3k (input x), 3k + 1 (weight), 3k + 2 (output,
 * unused: the output is 16-bit) of the chunk's forward meta, backward slots 2k (grad_output), 2k
 * + 1 (grad_input, unused) of its backward meta, kept on the host (lib/fp8) with the scales,
 * their reciprocals and the amaxes being recorded in backend memory, where the casts read and
 * write them.  The forward of a micro-batch casts x with its slot's scale (keeping the bytes and
 * their scale_inv for the wgrad), casts the 16-bit weight on the first micro-batch of a pass only
 * (TE's is_first_microbatch: later ones reuse the cached bytes and their scale_inv), and runs the
 * fp8 GEMM; the backward casts dy, runs dgrad and wgrad with the transposed copies.  After a
 * training forward (and after a backward) the amaxes recorded since the last update are reduced
 * with MAX over TP x DP x CP (Megatron's amax reduction group) and every slot is updated with
 * TE's rules (mgt_fp8_meta_update).  Evaluation forwards record amaxes but update nothing.
 * Under tensorwise (current) scaling each cast first takes its tensor's amax (reduced over TP
 * for the inputs gathered under sequence parallelism) and its scale from it, with no history.
 */
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

enum { FP8_QKV, FP8_PROJ, FP8_FC1, FP8_FC2, FP8_NLIN };

struct fp8_state {
	mgt_fp8_recipe rc;
	int n;                  /* linears: FP8_NLIN per local layer */
	mgt_fp8_meta fwd, bwd;  /* host state (fwd 3n slots, bwd 2n) */
	float *last_fwd, *last_bwd; /* the reduced amax rows the last updates used (host) */
	float *stage;           /* host [6n]: a meta's scales and their reciprocals on their way up */
	/* backend floats: scale [5n] (fwd 3n, then bwd 2n), sinv [5n], amax [5n], winv [n] */
	float *scale, *sinv, *amax, *winv;
	uint8_t *w8, *w8t;      /* cached weight bytes and their transposes, at woff[k] */
	size_t *woff, *xoff;    /* per linear: offsets in w8/w8t and in a slot's x8 */
	uint8_t **x8;           /* per slot: the inputs' bytes, at xoff[k] */
	float **xinv;           /* per slot: their scale_inv [n] (backend) */
	int *wgen;              /* per linear: the pass its weight cache was made in */
	int gen;                /* the pass (mgt_model_fp8_first_microbatch increments it) */
	float *ln32;            /* [T, h] fp32: a norm's output before its cast */
	uint8_t *dy8, *dy8t, *x8t; /* scratch: [T, out], [out, T], [in, T] at the largest */
	/* --fp8-param-gather: params (the weight bytes come from mgt_model_fp8_gather_params, never
	 * from a cast in the forward), wk (per tensor of the table: its fp8 linear or -1), pk (per
	 * bucket: the bytes of a rank's packed shard, padded to the largest and to 4), snd and rcv
	 * (backend buffers of the largest bucket's pk and DP x pk bytes) */
	bool params;
	int *wk;
	size_t *pk;
	uint8_t *snd, *rcv;
	/* under FSDP's optim_grads_params (units): the layer buckets' packed shards stay on their
	 * rank after the step, in own (pk[b] bytes at uoff[b]), and are all-gathered per layer into
	 * urcv (DP x pk[b] at DP x uoff[b]), whose pages are given back once unpacked */
	bool units;
	size_t *uoff;
	uint8_t *own, *urcv;
};

/* in and out features of linear k (j = k % FP8_NLIN of local layer k / FP8_NLIN): a GPT layer's
 * four; in a hybrid model a layer's own symbol's (a Mamba layer's in_proj and out_proj are its
 * linears 0 and 1), 0 x 0 for the slots its kind does not use. */
static void lin_dims(const mgt_model *m, int k, int *in, int *out)
{
	const int h = (int)m->h, nd = (int)(m->nq_l * m->d), j = k % FP8_NLIN;
	const int ins[FP8_NLIN] = { h, nd, h, (int)m->ffn_l }, outs[FP8_NLIN] = { (int)m->qkv_l, h, (int)m->fc1_l, h };
	*in = ins[j];
	*out = outs[j];
	if (!m->c.hybrid_layer_pattern[0]) return;
	const char kind = m->pattern[m->k0[k / FP8_NLIN]];
	const bool mamba = kind == MGT_LAYER_MAMBA, used = mamba ? j < 2 : kind == MGT_LAYER_ATTENTION ? j < 2 : j >= 2;
	if (mamba) {
		const int mi[2] = { h, (int)m->mamba.di_l }, mo[2] = { (int)m->mamba.w_l, h };
		*in = j < 2 ? mi[j] : 0;
		*out = j < 2 ? mo[j] : 0;
	}
	if (!used) *in = *out = 0;
}

bool mgt_model_fp8_layer(const mgt_model *m, int li)
{
	const mgt_fp8_recipe *r = &m->L.fp8;
	if (r->format == MGT_FP8_OFF) return false;
	const int l = m->first_layer + li, L = (int)m->c.num_layers;
	return l >= r->bf16_start && l < L - r->bf16_end;
}

mgt_status mgt_model_fp8_check(const mgt_model_config *c, const mgt_model_layout *L, int T, int64_t dims[4][2])
{
	const mgt_fp8_recipe *r = &L->fp8;
	if (r->format == MGT_FP8_OFF) return MGT_OK;
	if (c->num_experts > 0)
		return mgt_err(MGT_ERR_USAGE, "--fp8-format: fp8 MoE layers (grouped fp8 GEMMs) are not implemented; "
			       "train MoE models in --bf16");
	if (L->recompute.granularity == MGT_RECOMPUTE_FULL)
		return mgt_err(MGT_ERR_USAGE, "--fp8-format with --recompute-granularity full is not implemented (the "
			       "recomputed forward would need TE's stashed scales); use selective recomputation");
	if (T % 16)
		return mgt_err(MGT_ERR_USAGE, "--fp8-format: the fp8 GEMMs need the tokens of a micro-batch (--seq-length "
			       "x --micro-batch-size / --context-parallel-size = %d) to be a multiple of 16", T);
	static const char *const what[FP8_NLIN] = { "linear_qkv (--hidden-size, and --num-attention-heads x --kv-channels "
						    "with the query groups)",
						    "linear_proj (--num-attention-heads x --kv-channels, --hidden-size)",
						    "linear_fc1 (--hidden-size, --ffn-hidden-size)",
						    "linear_fc2 (--ffn-hidden-size, --hidden-size)" };
	for (int j = 0; j < FP8_NLIN; j++)
		if (dims[j][0] % 16 || dims[j][1] % 16)
			return mgt_err(MGT_ERR_USAGE, "--fp8-format: the fp8 GEMMs need in and out features that are "
				       "multiples of 16 on each tensor-parallel rank; %s has %lld x %lld: change %s",
				       what[j], (long long)dims[j][0], (long long)dims[j][1], what[j]);
	return MGT_OK;
}

/* Offsets of the weight caches and of a slot's inputs; returns the totals. */
static void layout_bytes(mgt_model *m, struct fp8_state *f, size_t *wbytes, size_t *xbytes, size_t *big)
{
	*wbytes = *xbytes = *big = 0;
	for (int k = 0; k < f->n; k++) {
		int in, out;
		lin_dims(m, k, &in, &out);
		f->woff[k] = *wbytes;
		f->xoff[k] = *xbytes;
		if (!mgt_model_fp8_layer(m, k / FP8_NLIN)) continue;
		*wbytes += (size_t)in * out;
		*xbytes += (size_t)m->T * in;
		size_t b = (size_t)m->T * (size_t)(in > out ? in : out);
		if (b > *big) *big = b;
	}
}

/* The scales of meta (backend slots from i0) and their reciprocals to the backend. */
static mgt_status upload_meta(mgt_model *m, const mgt_fp8_meta *meta, int i0)
{
	struct fp8_state *f = m->fp8;
	const size_t n = (size_t)meta->slots;
	for (size_t j = 0; j < n; j++) f->stage[n + j] = mgt_fp8_scale_inv(meta->scale[j]);
	mgt_status st = m->be->ops->upload(m->be, f->scale + i0, meta->scale, n * sizeof(float));
	return st ? st : m->be->ops->upload(m->be, f->sinv + i0, f->stage + n, n * sizeof(float));
}

static mgt_status upload_scales(mgt_model *m)
{
	mgt_status st = upload_meta(m, &m->fp8->fwd, 0);
	return st ? st : upload_meta(m, &m->fp8->bwd, 3 * m->fp8->n);
}

/* ---- --fp8-param-gather: the packed form of a flat-buffer range ----
 * The elements of [lo, hi) tensor by tensor in table order: an fp8 linear's weight as its E4M3
 * bytes (one a element), any other tensor's as fp32 (four); the bucket padding between tensors
 * is left out. */

/* The fp8 linear whose weight t is, or -1. */
static int weight_linear(const mgt_model *m, const mgt_tensor *t)
{
	static const mgt_tensor_role roles[FP8_NLIN] = { MGT_T_QKV_W, MGT_T_PROJ_W, MGT_T_FC1_W, MGT_T_FC2_W };
	static const mgt_tensor_role mamba[2] = { MGT_T_M_IN_W, MGT_T_M_OUT_W }; /* a Mamba layer's linears 0, 1 */
	const int li = t->layer - m->first_layer;
	if (t->layer < 0 || li < 0 || li >= m->n_layers || !mgt_model_fp8_layer(m, li)) return -1;
	for (int j = 0; j < FP8_NLIN; j++)
		if (t->role == roles[j] || (j < 2 && t->role == mamba[j])) return FP8_NLIN * li + j;
	return -1;
}

static size_t packed_bytes(const mgt_model *m, const int *wk, size_t lo, size_t hi)
{
	size_t n = 0, a, b;
	for (int i = 0; i < m->tt.n; i++)
		if (mgt_tensor_overlap(&m->tt.t[i], lo, hi, &a, &b)) n += (b - a) * (wk[i] >= 0 ? 1 : 4);
	return n;
}

/* Rank r's shard of bucket b (the distributed optimizer's: numel / DP elements each). */
static void shard_range(const mgt_model *m, int b, int r, size_t *lo, size_t *hi)
{
	const mgt_bucket *bk = &m->tt.buckets[b];
	size_t part = bk->numel / (size_t)m->L.dp;
	*lo = bk->offset + (size_t)r * part;
	*hi = *lo + part;
}

/* Under optim_grads_params with DP > 1 (the layer units sharded, lib/model/shard.c): own and
 * urcv for the layer buckets' packed shards. */
static mgt_status units_alloc(mgt_model *m, struct fp8_state *f)
{
	f->units = m->unit && m->L.sharding >= MGT_DP_OPTIM_GRADS_PARAMS && m->L.dp > 1;
	if (!f->units) return MGT_OK;
	if (!(f->uoff = mgt_malloc(((size_t)m->tt.nbuckets + 1) * sizeof *f->uoff))) return MGT_ERR_NOMEM;
	size_t n = 0;
	for (int b = 0; b < m->tt.nbuckets; b++) {
		f->uoff[b] = n;
		if (mgt_model_bucket_unit(m, b) >= 0) n += f->pk[b];
	}
	mgt_status st = MGT_OK;
	f->own = mgt_model_balloc(m, n, &m->mem.work_bytes, &st);
	f->urcv = mgt_model_balloc(m, n * (size_t)m->L.dp, &m->mem.work_bytes, &st);
	return st;
}

static mgt_status gather_alloc(mgt_model *m, struct fp8_state *f)
{
	f->wk = mgt_malloc(((size_t)m->tt.n + 1) * sizeof *f->wk);
	f->pk = mgt_malloc(((size_t)m->tt.nbuckets + 1) * sizeof *f->pk);
	if (!f->wk || !f->pk) return MGT_ERR_NOMEM;
	for (int i = 0; i < m->tt.n; i++) f->wk[i] = weight_linear(m, &m->tt.t[i]);
	size_t most = 0, lo, hi;
	for (int b = 0; b < m->tt.nbuckets; b++) {
		f->pk[b] = 0;
		for (int r = 0; r < m->L.dp; r++) {
			shard_range(m, b, r, &lo, &hi);
			size_t n = packed_bytes(m, f->wk, lo, hi);
			if (n > f->pk[b]) f->pk[b] = n;
		}
		f->pk[b] = (f->pk[b] + 3) / 4 * 4;
		if (f->pk[b] > most) most = f->pk[b];
	}
	mgt_status st = MGT_OK;
	f->snd = mgt_model_balloc(m, most, &m->mem.work_bytes, &st);
	f->rcv = mgt_model_balloc(m, most * (size_t)m->L.dp, &m->mem.work_bytes, &st);
	return st ? st : units_alloc(m, f);
}

mgt_status mgt_model_fp8_alloc(mgt_model *m)
{
	if (m->L.fp8.format == MGT_FP8_OFF || !m->n_layers) return MGT_OK;
	struct fp8_state *f = mgt_malloc(sizeof *f);
	if (!f) return MGT_ERR_NOMEM;
	memset(f, 0, sizeof *f);
	m->fp8 = f;
	f->rc = m->L.fp8;
	f->n = FP8_NLIN * m->n_layers;
	const int n = f->n, S = m->L.slots, hl = f->rc.recipe == MGT_FP8_DELAYED ? f->rc.history_len : 1;
	mgt_status st = mgt_fp8_meta_init(&f->fwd, hl, 3 * n);
	if (!st) st = mgt_fp8_meta_init(&f->bwd, hl, 2 * n);
	f->woff = mgt_malloc((size_t)n * sizeof *f->woff);
	f->xoff = mgt_malloc((size_t)n * sizeof *f->xoff);
	f->wgen = mgt_malloc((size_t)n * sizeof *f->wgen);
	f->x8 = mgt_malloc((size_t)S * sizeof *f->x8);
	f->xinv = mgt_malloc((size_t)S * sizeof *f->xinv);
	f->last_fwd = mgt_malloc((size_t)3 * n * sizeof(float));
	f->last_bwd = mgt_malloc((size_t)2 * n * sizeof(float));
	f->stage = mgt_malloc((size_t)6 * n * sizeof(float));
	if (st || !f->woff || !f->xoff || !f->wgen || !f->x8 || !f->xinv || !f->last_fwd || !f->last_bwd || !f->stage)
		return st ? st : MGT_ERR_NOMEM;
	memset(f->x8, 0, (size_t)S * sizeof *f->x8);
	memset(f->xinv, 0, (size_t)S * sizeof *f->xinv);
	memset(f->last_fwd, 0, (size_t)3 * n * sizeof(float));
	memset(f->last_bwd, 0, (size_t)2 * n * sizeof(float));
	for (int k = 0; k < n; k++) f->wgen[k] = -1;
	size_t wb, xb, big;
	layout_bytes(m, f, &wb, &xb, &big);
	f->scale = (float *)mgt_model_balloc(m, (size_t)5 * n * 4, &m->mem.work_bytes, &st);
	f->sinv = (float *)mgt_model_balloc(m, (size_t)5 * n * 4, &m->mem.work_bytes, &st);
	f->amax = (float *)mgt_model_balloc(m, (size_t)5 * n * 4, &m->mem.work_bytes, &st);
	f->winv = (float *)mgt_model_balloc(m, (size_t)n * 4, &m->mem.work_bytes, &st);
	f->w8 = mgt_model_balloc(m, wb, &m->mem.work_bytes, &st);
	f->w8t = mgt_model_balloc(m, wb, &m->mem.work_bytes, &st);
	for (int s = 0; s < S; s++) {
		f->x8[s] = mgt_model_balloc(m, xb, &m->mem.act_bytes, &st);
		f->xinv[s] = (float *)mgt_model_balloc(m, (size_t)n * 4, &m->mem.act_bytes, &st);
	}
	f->ln32 = (float *)mgt_model_balloc(m, (size_t)m->T * (size_t)m->h * 4, &m->mem.work_bytes, &st);
	f->dy8 = mgt_model_balloc(m, big, &m->mem.work_bytes, &st);
	f->dy8t = mgt_model_balloc(m, big, &m->mem.work_bytes, &st);
	f->x8t = mgt_model_balloc(m, big, &m->mem.work_bytes, &st);
	if (!st && f->rc.param_gather) st = gather_alloc(m, f);
	if (!st && !m->mem.dry) st = upload_scales(m);
	return st;
}

void mgt_model_fp8_free(mgt_model *m)
{
	struct fp8_state *f = m->fp8;
	if (!f) return;
	if (!m->mem.dry) {
		void *bufs[] = { f->scale, f->sinv, f->amax, f->winv, f->w8, f->w8t, f->ln32, f->dy8, f->dy8t, f->x8t,
				 f->snd, f->rcv, f->own, f->urcv };
		for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) m->be->ops->free(m->be, bufs[i]);
		for (int s = 0; f->x8 && s < m->L.slots; s++) {
			m->be->ops->free(m->be, f->x8[s]);
			m->be->ops->free(m->be, f->xinv[s]);
		}
	}
	mgt_fp8_meta_free(&f->fwd);
	mgt_fp8_meta_free(&f->bwd);
	free(f->woff); free(f->xoff); free(f->wgen); free(f->x8); free(f->xinv); free(f->last_fwd); free(f->last_bwd); free(f->uoff);
	free(f->stage); free(f->wk); free(f->pk);
	free(f);
	m->fp8 = NULL;
}

void mgt_model_fp8_first_microbatch(mgt_model *m)
{
	if (m->fp8) m->fp8->gen++;
}

float *mgt_model_fp8_norm_out(mgt_model *m) { return m->fp8->ln32; }

/* Slot i's scale, amax and scale_inv in backend memory (fwd slots first, then bwd). */
static float *sc(struct fp8_state *f, int i) { return f->scale + i; }
static float *am(struct fp8_state *f, int i) { return f->amax + i; }
static float *si(struct fp8_state *f, int i) { return f->sinv + i; }
static int bwd_slot(const struct fp8_state *f, int k) { return 3 * f->n + 2 * k; }

/* Current scaling of slot i for n elements x of type xt: the tensor's amax into slot i (reduced
 * over TP when reduce), then its scale and reciprocal from it (the fp8_scale op), all on the
 * backend. */
static mgt_status current_scale(mgt_model *m, int i, const void *x, mgt_elem_type xt, size_t n, mgt_fp8_format fmt,
				bool reduce)
{
	struct fp8_state *f = m->fp8;
	const mgt_backend_ops *o = m->be->ops;
	o->zero(m->be, am(f, i), sizeof(float));
	o->fp8_quantize(m->be, NULL, x, xt, n, sc(f, i), fmt, am(f, i));
	mgt_comm *tp = m->ps->tp_comm;
	if (reduce && tp->size > 1) {
		mgt_status st = tp->ops->allreduce(tp, am(f, i), 1, MGT_DT_F32, MGT_RED_MAX);
		if (st) return st;
	}
	o->fp8_scale(m->be, sc(f, i), si(f, i), am(f, i), mgt_fp8_max(fmt));
	return MGT_OK;
}

/* q = the cast of x [n] with slot i's scale, amax recorded (tensorwise: the scale from x first). */
static mgt_status cast(mgt_model *m, int i, uint8_t *q, const void *x, mgt_elem_type xt, size_t n, mgt_fp8_format fmt,
		       bool reduce)
{
	struct fp8_state *f = m->fp8;
	if (f->rc.recipe == MGT_FP8_TENSORWISE) {
		mgt_status st = current_scale(m, i, x, xt, n, fmt, reduce);
		if (st) return st;
	}
	m->be->ops->fp8_quantize(m->be, q, x, xt, n, sc(f, i), fmt, am(f, i));
	return MGT_OK;
}

/* The weight of linear k as bytes and their transpose, cast on the pass's first use. */
static mgt_status weight_bytes(mgt_model *m, int k, const void *w, mgt_elem_type wt, int in, int out)
{
	struct fp8_state *f = m->fp8;
	if (f->params || f->wgen[k] == f->gen) return MGT_OK;
	const mgt_backend_ops *o = m->be->ops;
	mgt_status st = cast(m, 3 * k + 1, f->w8 + f->woff[k], w, wt, (size_t)in * out, MGT_FP8_E4M3, false);
	if (st) return st;
	o->fp8_transpose(m->be, f->w8t + f->woff[k], f->w8 + f->woff[k], out, in);
	o->copy(m->be, f->winv + k, si(f, 3 * k + 1), sizeof(float));
	f->wgen[k] = f->gen;
	return MGT_OK;
}

/* The source of the weight's cast for n elements at flat offset a, as the forward's cast reads
 * it: the 16-bit copy (rounded there now from the fp32 parameters: Megatron's double rounding of
 * an fp8 GEMM's bf16 weight)
 * while the linears read that copy, else the fp32 parameters. */
static const void *weight_src(mgt_model *m, size_t a, size_t n, mgt_elem_type *xt)
{
	*xt = WT(m);
	if (*xt == MGT_DT_F32) return m->params + a;
	void *d = (uint16_t *)m->prec.lp + a;
	m->be->ops->cast(m->be, d, *xt, m->params + a, n);
	return d;
}

/* Tensorwise scaling: each weight's amax over the shards of every rank of g (MAX), then its
 * scale and reciprocal (the cast of the whole tensor would have taken the same). */
static mgt_status gather_scales(mgt_model *m, mgt_comm *g)
{
	struct fp8_state *f = m->fp8;
	const mgt_backend_ops *o = m->be->ops;
	for (int k = 0; k < f->n; k++) o->zero(m->be, am(f, 3 * k + 1), sizeof(float));
	size_t lo, hi, a, b;
	for (int bk = 0; bk < m->tt.nbuckets; bk++) {
		shard_range(m, bk, g->rank, &lo, &hi);
		for (int i = 0; i < m->tt.n; i++) {
			int k = f->wk[i];
			if (k < 0 || !mgt_tensor_overlap(&m->tt.t[i], lo, hi, &a, &b)) continue;
			mgt_elem_type xt;
			const void *x = weight_src(m, a, b - a, &xt);
			o->fp8_quantize(m->be, NULL, x, xt, b - a, sc(f, 3 * k + 1), MGT_FP8_E4M3, am(f, 3 * k + 1));
		}
	}
	mgt_status st = g->size > 1 ? g->ops->allreduce(g, f->amax, (size_t)3 * f->n, MGT_DT_F32, MGT_RED_MAX) : MGT_OK;
	for (int k = 0; !st && k < f->n; k++)
		if (mgt_model_fp8_layer(m, k / FP8_NLIN))
			o->fp8_scale(m->be, sc(f, 3 * k + 1), si(f, 3 * k + 1), am(f, 3 * k + 1), mgt_fp8_max(MGT_FP8_E4M3));
	return st;
}

/* [lo, hi) packed into dst: the fp8 weights cast with their slots' scales (amaxes recorded),
 * the rest copied. */
static void pack(mgt_model *m, size_t lo, size_t hi, uint8_t *dst)
{
	struct fp8_state *f = m->fp8;
	const mgt_backend_ops *o = m->be->ops;
	size_t a, b;
	for (int i = 0; i < m->tt.n; i++) {
		int k = f->wk[i];
		if (!mgt_tensor_overlap(&m->tt.t[i], lo, hi, &a, &b)) continue;
		if (k < 0) {
			o->copy(m->be, dst, m->params + a, (b - a) * sizeof(float));
			dst += (b - a) * sizeof(float);
			continue;
		}
		mgt_elem_type xt;
		const void *x = weight_src(m, a, b - a, &xt);
		o->fp8_quantize(m->be, dst, x, xt, b - a, sc(f, 3 * k + 1), MGT_FP8_E4M3, am(f, 3 * k + 1));
		dst += b - a;
	}
}

/* The packed [lo, hi) from src into the weight bytes and the fp32 parameters. */
static void unpack(mgt_model *m, size_t lo, size_t hi, const uint8_t *src)
{
	struct fp8_state *f = m->fp8;
	size_t a, b;
	for (int i = 0; i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		int k = f->wk[i];
		if (!mgt_tensor_overlap(t, lo, hi, &a, &b)) continue;
		size_t bytes = (b - a) * (k < 0 ? sizeof(float) : 1);
		void *dst = k < 0 ? (void *)(m->params + a) : (void *)(f->w8 + f->woff[k] + (a - t->offset));
		m->be->ops->copy(m->be, dst, src, bytes);
		src += bytes;
	}
}

/* Linear k's transposed weight bytes (the backward's dgrad operand) from its gathered ones
 * (Transformer Engine's post_all_gather_processing: the columnwise copy made after the gather). */
static void transpose_weight(mgt_model *m, int k)
{
	struct fp8_state *f = m->fp8;
	int in, out;
	lin_dims(m, k, &in, &out);
	m->be->ops->fp8_transpose(m->be, f->w8t + f->woff[k], f->w8 + f->woff[k], out, in);
}

mgt_status mgt_model_fp8_gather_params(mgt_model *m, bool *done)
{
	struct fp8_state *f = m->fp8;
	*done = f && f->rc.param_gather;
	if (!*done) return MGT_OK;
	mgt_comm *g = m->ps->dpcp_comm;
	const mgt_backend_ops *o = m->be->ops;
	mgt_status st = f->rc.recipe == MGT_FP8_TENSORWISE ? gather_scales(m, g) : MGT_OK;
	for (int b = 0; !st && b < m->tt.nbuckets; b++) {
		size_t lo, hi, pk = f->pk[b];
		shard_range(m, b, g->rank, &lo, &hi);
		if (f->units && mgt_model_bucket_unit(m, b) >= 0) { /* gathered per layer */
			pack(m, lo, hi, f->own + f->uoff[b]);
			continue;
		}
		pack(m, lo, hi, f->snd);
		st = g->ops->allgather(g, f->rcv, f->snd, pk / 4, MGT_DT_I32);
		if (!st) st = mgt_comm_wait(g);
		for (int r = 0; !st && r < g->size; r++) {
			shard_range(m, b, r, &lo, &hi);
			unpack(m, lo, hi, f->rcv + (size_t)r * pk);
		}
	}
	for (int k = 0; !st && k < f->n; k++) {
		if (!mgt_model_fp8_layer(m, k / FP8_NLIN)) continue;
		if (!f->units) transpose_weight(m, k);
		o->copy(m->be, f->winv + k, si(f, 3 * k + 1), sizeof(float));
	}
	if (!st) f->params = true;
	return st;
}

/* The fp8 linear whose weight is tensor i, when that tensor lies in bucket b; -1 otherwise. */
static int bucket_linear(const mgt_model *m, int i, int b)
{
	const mgt_bucket *k = &m->tt.buckets[b];
	size_t a, e;
	int j = m->fp8->wk[i];
	return j >= 0 && mgt_tensor_overlap(&m->tt.t[i], k->offset, k->offset + k->numel, &a, &e) ? j : -1;
}

bool mgt_model_fp8_units(const mgt_model *m) { return m->fp8 && m->fp8->units; }

mgt_status mgt_model_fp8_unit_gather(mgt_model *m, int b, mgt_comm *g)
{
	struct fp8_state *f = m->fp8;
	return g->ops->allgather(g, f->urcv + f->uoff[b] * (size_t)g->size, f->own + f->uoff[b], f->pk[b] / 4, MGT_DT_I32);
}

void mgt_model_fp8_unit_gathered(mgt_model *m, int b)
{
	struct fp8_state *f = m->fp8;
	uint8_t *src = f->urcv + f->uoff[b] * (size_t)m->L.dp;
	size_t lo, hi;
	for (int r = 0; r < m->L.dp; r++) {
		shard_range(m, b, r, &lo, &hi);
		unpack(m, lo, hi, src + (size_t)r * f->pk[b]);
	}
	m->be->ops->discard(m->be, src, f->pk[b] * (size_t)m->L.dp);
	for (int i = 0, j; i < m->tt.n; i++)
		if ((j = bucket_linear(m, i, b)) >= 0) transpose_weight(m, j);
}

void mgt_model_fp8_unit_release(mgt_model *m, int b)
{
	struct fp8_state *f = m->fp8;
	for (int i = 0; i < m->tt.n; i++) {
		int j = bucket_linear(m, i, b);
		if (j < 0) continue;
		int in, out;
		lin_dims(m, j, &in, &out);
		m->be->ops->discard(m->be, f->w8 + f->woff[j], (size_t)in * out);
		m->be->ops->discard(m->be, f->w8t + f->woff[j], (size_t)in * out);
	}
}

mgt_status mgt_model_fp8_fwd(mgt_model *m, int li, int j, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt,
			     const void *w, mgt_elem_type wt, const float *b)
{
	struct fp8_state *f = m->fp8;
	const int k = FP8_NLIN * li + j, slot = (int)(m->cur - m->sa), T = m->T;
	int in, out;
	lin_dims(m, k, &in, &out);
	uint8_t *q = f->x8[slot] + f->xoff[k];
	float *xinv = f->xinv[slot] + k;
	/* the inputs gathered under sequence parallelism (the norm outputs) reduce a tensorwise amax over TP */
	const bool gathered = m->sp && (j == FP8_QKV || j == FP8_FC1);
	mgt_status st = cast(m, 3 * k, q, x, xt, (size_t)T * in, MGT_FP8_E4M3, gathered);
	if (!st) st = weight_bytes(m, k, w, wt, in, out);
	if (st) return st;
	m->be->ops->copy(m->be, xinv, si(f, 3 * k), sizeof(float));
	m->be->ops->gemm_fp8(m->be, y, yt, false, b, f->w8 + f->woff[k], MGT_FP8_E4M3, f->winv + k, q, MGT_FP8_E4M3,
			     xinv, out, T, in, true);
	return MGT_OK;
}

mgt_status mgt_model_fp8_bwd(mgt_model *m, int li, int j, void *dx, mgt_elem_type dxt, float *dw, float *db,
			     const void *dy, mgt_elem_type dyt)
{
	struct fp8_state *f = m->fp8;
	const mgt_backend_ops *o = m->be->ops;
	const int k = FP8_NLIN * li + j, slot = (int)(m->cur - m->sa), T = m->T, i = bwd_slot(f, k);
	int in, out;
	lin_dims(m, k, &in, &out);
	const mgt_fp8_format gf = mgt_fp8_grad_format(&f->rc);
	if (db) o->bda_bwd(m->be, (void *)dy, dyt, db, dy, dyt, T, out, 0.0f, 0, 0); /* db += column sums of dy */
	mgt_status st = cast(m, i, f->dy8, dy, dyt, (size_t)T * out, gf, false);
	if (st) return st;
	o->fp8_transpose(m->be, f->dy8t, f->dy8, T, out);
	if (dx)
		o->gemm_fp8(m->be, dx, dxt, false, NULL, f->w8t + f->woff[k], MGT_FP8_E4M3, f->winv + k, f->dy8, gf,
			    si(f, i), in, T, out, false);
	o->fp8_transpose(m->be, f->x8t, f->x8[slot] + f->xoff[k], T, in);
	o->gemm_fp8(m->be, dw, MGT_DT_F32, true, NULL, f->x8t, MGT_FP8_E4M3, f->xinv[slot] + k, f->dy8t, gf, si(f, i), in,
		    out, T, false);
	return MGT_OK;
}

/* The recorded amaxes of n slots from slot i0 all-reduced over TP x DP x CP with MAX (in place)
 * and copied into host row `row`. */
static mgt_status reduce_amax(mgt_model *m, int i0, int n, float *row)
{
	struct fp8_state *f = m->fp8;
	mgt_comm *g[2] = { m->ps->tp_comm, m->ps->dpcp_comm };
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < 2; c++)
		if (g[c] && g[c]->size > 1) st = g[c]->ops->allreduce(g[c], am(f, i0), (size_t)n, MGT_DT_F32, MGT_RED_MAX);
	return st ? st : m->be->ops->download(m->be, row, am(f, i0), (size_t)n * sizeof *row);
}

/* The same, then zeroed on the backend (the update consumes them). */
static mgt_status take_amax(mgt_model *m, int i0, int n, float *row)
{
	mgt_status st = reduce_amax(m, i0, n, row);
	if (!st) m->be->ops->zero(m->be, am(m->fp8, i0), (size_t)n * sizeof *row);
	return st;
}

mgt_status mgt_model_fp8_update(mgt_model *m, bool backward)
{
	struct fp8_state *f = m->fp8;
	if (!f || f->rc.recipe != MGT_FP8_DELAYED) return MGT_OK;
	mgt_fp8_meta *meta = backward ? &f->bwd : &f->fwd;
	const int i0 = backward ? 3 * f->n : 0, n = meta->slots;
	mgt_status st = take_amax(m, i0, n, meta->history);
	if (st) return st;
	memcpy(backward ? f->last_bwd : f->last_fwd, meta->history, (size_t)n * sizeof(float));
	const float mx = mgt_fp8_max(backward ? mgt_fp8_grad_format(&f->rc) : MGT_FP8_E4M3);
	mgt_fp8_meta_update(meta, NULL, mx, f->rc.margin, f->rc.algo);
	return upload_meta(m, meta, i0);
}

mgt_status mgt_model_fp8_view(mgt_model *m, mgt_model_fp8_state *v)
{
	struct fp8_state *f = m->fp8;
	memset(v, 0, sizeof *v);
	if (!f) return MGT_OK;
	v->fwd = &f->fwd;
	v->bwd = &f->bwd;
	v->last_fwd = f->last_fwd;
	v->last_bwd = f->last_bwd;
	v->linears = f->n;
	v->first_layer = m->first_layer;
	return MGT_OK;
}

mgt_status mgt_model_fp8_pending(mgt_model *m)
{
	struct fp8_state *f = m->fp8;
	if (!f) return MGT_OK;
	mgt_status st = reduce_amax(m, 0, 3 * f->n, f->fwd.history);
	return st ? st : reduce_amax(m, 3 * f->n, 2 * f->n, f->bwd.history);
}

mgt_status mgt_model_fp8_restore(mgt_model *m)
{
	struct fp8_state *f = m->fp8;
	if (!f) return MGT_OK;
	mgt_status st = m->be->ops->upload(m->be, f->amax, f->fwd.history, (size_t)3 * f->n * sizeof(float));
	if (!st) st = m->be->ops->upload(m->be, f->amax + 3 * f->n, f->bwd.history, (size_t)2 * f->n * sizeof(float));
	return st ? st : upload_scales(m);
}
