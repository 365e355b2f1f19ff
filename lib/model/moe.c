/* lib/model/moe.c: the MoE layer's MLP (Megatron-Core megatron/core/transformer/moe/moe_layer.py
 * MoELayer.forward, router.py, token_dispatcher.py, experts.py, shared_experts.py) over backend
 * ops.
 *
 * Order of operations (forward), on the [T, h] output of pre_mlp_layernorm (gathered over TP
 * under sequence parallelism):
 *  1. shared expert (when configured): an MLP of the shared width, times sigmoid(x . gate) with
 *     --moe-shared-expert-gate;
 *  2. router: logits = x . W^T on this rank's rows (Megatron routes the sequence-parallel
 *     tokens), gathered over TP, routed on the host (moe_route.c);
 *  3. dispatch: rows gathered expert by expert (tokens in order within an expert: Megatron's
 *     permute);
 *  4. experts: fc1 -> activation -> times the token's probability (before fc2, as Megatron's
 *     experts apply it) -> fc2, one grouped call over the local experts each;
 *  5. combine: each token's copies summed back (unpermute), plus the shared expert's output.
 * With --moe-latent-size (moe_layer.py preprocess / postprocess) steps 3-5 run in the latent
 * width: fc1_latent_proj takes the [T, h] input to [T, latent] before the dispatch and
 * fc2_latent_proj the combined [T, latent] back to [T, h] before the shared expert's output is
 * added; the router and the shared expert see the [T, h] input.  Both projections are whole on
 * every rank: fc1's output is the same on every TP rank, fc2's input (the experts' combined
 * output) is partial over TP, so fc2's output is partial as the experts' output is, and both
 * weight gradients are partial over TP, completed by mgt_model_finish_grads' TP all-reduce of
 * replicated weights (Megatron's sequence-parallel gradient reduction: TP > 1 with experts
 * needs --sequence-parallel).
 * The result is the partial [T, h] sum of the expert tensor-parallel ranks (experts split over TP
 * as the dense MLP: expert tensor parallelism = TP), reduced by the caller with the residual's
 * bias-dropout-add.  The auxiliary and z losses add their gradients to the router logits in
 * the backward with the main loss's scale (mgt_model_set_aux_scale), and are not part of the lm
 * loss.
 */
#include "model_impl.h"
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct moe_act { /* one MoE layer of one slot */
	mgt_moe_route r;
	int N;           /* rows for the local experts */
	int *rows;       /* [El] rows per local expert */
	int32_t *perm;   /* backend [Nmax]: the token of each row */
	int32_t *slot;   /* backend [T k]: the row of each routed copy, -1 dropped */
	int32_t *hslot;  /* host [T k]: the same (the router's backward reads it) */
	float *w;        /* backend [Nmax]: the probability of each row */
	/* the activations, of the model's act_t (as every row of tokens and its gradient here) */
	void *fc1, *act; /* backend [Nmax, fc1e], [Nmax, ffe] */
	void *xl, *yl;   /* --moe-latent-size: fc1_latent_proj's output [T, lat] and fc2_latent_proj's input */
	void *sfc1, *sact, *sout; /* shared expert: [T, shfc1], [T, sh], [T, h] */
	double *gate;    /* host [T]: sigmoid of the shared expert's gate */
	/* expert parallelism (ep > 1): rows sent (Nsend, rows of perm/slot) and received (N);
	 * re[i]: the received row (source-major) of expert-major row i, inv its inverse; the
	 * received input xe [Nmax, eh] kept for the backward; rows to and from each rank */
	int Nsend;
	int32_t *re, *inv;
	void *xe;
	int64_t *sc, *rc;
};

struct moe_state {
	int E, El, e0, k, ffe, fc1e, sh, shfc1, Nmax;
	int lat, eh, hx; /* the latent width (0: none), the experts' hidden side (lat or h), max(h, eh) */
	const mgt_tensor **w1, **w2; /* [n_layers * El] the local experts' weights (NULL rows: dense layer) */
	struct moe_act *acts;        /* [slots * n_layers] */
	/* backend scratch shared by the slots: rows of act_t (jitter: xj the router input [Th, h];
	 * dl [T, lat]: the gradient of the latent combined output, then of fc1_latent_proj's) */
	void *xe, *ye, *acts_s, *dacts, *dfc1, *dxr, *dxg, *dsh, *dsact, *dsfc1, *xj, *dl;
	/* and fp32: probabilities, router logits and their gradients, the jitter noise */
	float *dprob, *logits_l, *logits, *dlog, *gw, *gl_l, *gl, *wsend, *wrecv, *noise;
	/* host scratch */
	float *hf;        /* [max(T E, Nmax, T)] */
	int32_t *hperm, *hslot;
	double *hdprob, *hdL, *hdgl; /* hdgl [T]: the gate logits' gradient */
	float *hnoise;               /* [Th h] jitter noise (--moe-input-jitter-eps) */
	const void **pw1, **pw2; /* [El] backend pointers for the grouped calls: weights (in WT), */
	float **pg1, **pg2;       /* and their gradients */
	int64_t *allc, *cnt_d, *cd, *cc;   /* ep > 1: [ep E] counts of every rank; [ep] displacements and counts */
	int ep, cap; /* cap: tokens the buffers hold (mgt_moe_reserve, inference) */
	double disp[3];                    /* since creation: rows sent to and received from other EP ranks, dispatches */
	/* statistics since mgt_model_moe_take_stats, per local layer */
	double *aux_sum, *z_sum, *tok; /* [n_layers], [n_layers], [n_layers * E] */
	float aux_scale;
	/* context parallelism (cp > 1): the whole micro-batch's routing [cp T tokens], every rank's
	 * router logits [cp T E] as all-gathered (rank order), and the whole's row of each of this
	 * rank's tokens [T] */
	mgt_moe_route rf;
	float *hall;
	int64_t *rows;
};

bool mgt_moe_layer(const mgt_model *m, int li) { return m->moe && m->pattern[m->k0[li + 1] - 1] == MGT_LAYER_MOE; }

/* ---- setup ---- */

static mgt_status moe_index(mgt_model *m, struct moe_state *S)
{
	size_t n = (size_t)(m->n_layers ? m->n_layers : 1) * (size_t)S->El;
	S->w1 = mgt_malloc(n * sizeof *S->w1);
	S->w2 = mgt_malloc(n * sizeof *S->w2);
	if (!S->w1 || !S->w2) return MGT_ERR_NOMEM;
	memset(S->w1, 0, n * sizeof *S->w1);
	memset(S->w2, 0, n * sizeof *S->w2);
	for (int i = 0; i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		if (t->num_experts <= 0) continue;
		size_t q = (size_t)(t->layer - m->first_layer) * (size_t)S->El + (size_t)(t->expert - S->e0);
		if (t->role == MGT_T_EXP_FC1_W) S->w1[q] = t;
		else S->w2[q] = t;
	}
	return MGT_OK;
}

mgt_status mgt_moe_setup(mgt_model *m)
{
	const mgt_model_config *c = &m->c;
	bool any = false;
	for (int li = 0; li < m->n_layers; li++) any |= mgt_moe_is_layer(c, m->first_layer + li);
	if (!any) return MGT_OK;
	struct moe_state *S = mgt_malloc(sizeof *S);
	if (!S) return MGT_ERR_NOMEM;
	memset(S, 0, sizeof *S);
	m->moe = S;
	int tp = m->ps->tp, ep = m->ep.size;
	S->E = (int)c->num_experts;
	S->El = S->E / ep;
	S->e0 = S->El * m->ep.rank;
	S->k = (int)c->moe_router_topk;
	S->ffe = (int)(c->moe_ffn_hidden_size / tp);
	S->fc1e = c->swiglu ? 2 * S->ffe : S->ffe;
	S->sh = (int)(c->moe_shared_expert_intermediate_size / tp);
	S->shfc1 = c->swiglu ? 2 * S->sh : S->sh;
	S->lat = (int)c->moe_latent_size;
	S->eh = S->lat ? S->lat : (int)m->h;
	S->hx = S->eh > (int)m->h ? S->eh : (int)m->h;
	/* rows an expert-parallel rank can receive: every copy of every rank of its group */
	S->Nmax = m->T * S->k * ep;
	S->ep = ep;
	S->aux_scale = 1.0f;
	return moe_index(m, S);
}

#define AF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.act_bytes, &st)
#define WF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.work_bytes, &st)
/* the same in elements of the model's act_t */
#define AX(n) mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(m->prec.act_t), &m->mem.act_bytes, &st)
#define WX(n) mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(m->prec.act_t), &m->mem.work_bytes, &st)

static mgt_status alloc_act(mgt_model *m, struct moe_act *a)
{
	struct moe_state *S = m->moe;
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, N = (size_t)S->Nmax;
	a->perm = (int32_t *)AF(N);
	a->slot = (int32_t *)AF(T * (size_t)S->k);
	a->w = AF(N);
	a->fc1 = AX(N * (size_t)S->fc1e);
	a->act = AX(N * (size_t)S->ffe);
	if (S->sh) {
		a->sfc1 = AX(T * (size_t)S->shfc1);
		a->sact = AX(T * (size_t)S->sh);
		if (m->c.moe_shared_expert_gate) a->sout = AX(T * (size_t)m->h);
	}
	if (S->lat) {
		a->xl = AX(T * (size_t)S->lat);
		a->yl = AX(T * (size_t)S->lat);
	}
	if (S->ep > 1) {
		a->xe = AX(N * (size_t)S->eh);
		a->re = (int32_t *)AF(N);
		a->inv = (int32_t *)AF(N);
	}
	if (st || m->mem.dry) return st;
	a->rows = mgt_malloc((size_t)S->El * sizeof *a->rows);
	a->gate = mgt_malloc(T * sizeof *a->gate);
	a->sc = mgt_malloc((size_t)S->ep * sizeof *a->sc);
	a->rc = mgt_malloc((size_t)S->ep * sizeof *a->rc);
	a->hslot = mgt_malloc(T * (size_t)S->k * sizeof *a->hslot);
	if (!a->rows || !a->gate || !a->sc || !a->rc || !a->hslot) return MGT_ERR_NOMEM;
	return mgt_moe_route_alloc(&a->r, m->T, S->E, S->k, m->b);
}

/* Context parallelism: the whole micro-batch's routing and the map of this rank's rows into it. */
static mgt_status alloc_cp(mgt_model *m)
{
	struct moe_state *S = m->moe;
	size_t T = (size_t)m->T, all = T * (size_t)m->cp.size;
	mgt_status st = mgt_moe_route_alloc(&S->rf, (int)all, S->E, S->k, m->b);
	S->hall = mgt_malloc(all * (size_t)S->E * sizeof *S->hall);
	S->rows = mgt_malloc(T * sizeof *S->rows);
	if (st || !S->hall || !S->rows) return MGT_ERR_NOMEM;
	for (size_t t = 0; t < T; t++) S->rows[t] = mgt_cp_global_row(m, (int64_t)t);
	return MGT_OK;
}

static mgt_status alloc_scratch(mgt_model *m)
{
	struct moe_state *S = m->moe;
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, Th = (size_t)m->Th, h = (size_t)m->h, N = (size_t)S->Nmax, E = (size_t)S->E;
	size_t NT = N > T ? N : T;
	S->xe = WX(NT * (size_t)S->hx); S->ye = WX(NT * (size_t)S->hx);
	if (S->lat) S->dl = WX(T * (size_t)S->lat);
	S->acts_s = WX(N * (size_t)S->ffe); S->dacts = WX(N * (size_t)S->ffe); S->dfc1 = WX(N * (size_t)S->fc1e);
	S->dprob = WF(N); S->logits_l = WF(Th * E); S->logits = WF(T * E); S->dlog = WF(Th * E);
	S->dxr = WX(Th * h); S->dxg = WX(Th * h); S->dsh = WX(T * h);
	if (S->sh) { S->dsact = WX(T * (size_t)S->sh); S->dsfc1 = WX(T * (size_t)S->shfc1); }
	S->gw = WF(T); S->gl_l = WF(Th); S->gl = WF(T);
	if (S->ep > 1) { S->wsend = WF(T * (size_t)S->k); S->wrecv = WF(N); }
	if (m->c.moe_input_jitter_eps > 0) { S->xj = WX(Th * h); S->noise = AF(Th * h * (size_t)m->L.slots * (size_t)m->n_layers); }
	if (st || m->mem.dry) return st;
	size_t ne = (size_t)S->ep * E;
	S->allc = mgt_malloc(ne * sizeof *S->allc);
	S->cnt_d = mgt_malloc(E * sizeof *S->cnt_d);
	S->cd = mgt_malloc((size_t)S->ep * 4 * sizeof *S->cd);
	S->cc = S->cd ? S->cd + 2 * S->ep : NULL;
	if (!S->allc || !S->cnt_d || !S->cd) return MGT_ERR_NOMEM;
	size_t nf = T * E > NT ? T * E : NT;
	S->hf = mgt_malloc(nf * sizeof *S->hf);
	S->hperm = mgt_malloc(N * sizeof *S->hperm);
	S->hslot = mgt_malloc((N > T * (size_t)S->k ? N : T * (size_t)S->k) * sizeof *S->hslot);
	S->hdprob = mgt_malloc(T * (size_t)S->k * sizeof *S->hdprob);
	S->hdL = mgt_malloc(T * E * sizeof *S->hdL);
	S->hdgl = mgt_malloc(T * sizeof *S->hdgl);
	S->hnoise = m->c.moe_input_jitter_eps > 0 ? mgt_malloc(Th * h * sizeof *S->hnoise) : NULL;
	if (m->c.moe_input_jitter_eps > 0 && !S->hnoise) return MGT_ERR_NOMEM;
	size_t El = (size_t)S->El;
	S->pw1 = mgt_malloc(El * sizeof *S->pw1); S->pw2 = mgt_malloc(El * sizeof *S->pw2);
	S->pg1 = mgt_malloc(El * sizeof *S->pg1); S->pg2 = mgt_malloc(El * sizeof *S->pg2);
	size_t nl = (size_t)m->n_layers;
	S->aux_sum = mgt_malloc(nl * sizeof(double)); S->z_sum = mgt_malloc(nl * sizeof(double));
	S->tok = mgt_malloc(nl * E * sizeof(double));
	if (!S->hf || !S->hperm || !S->hslot || !S->hdprob || !S->hdL || !S->hdgl || !S->pw1 || !S->pw2 || !S->pg1 || !S->pg2 ||
	    !S->aux_sum || !S->z_sum || !S->tok)
		return MGT_ERR_NOMEM;
	memset(S->aux_sum, 0, nl * sizeof(double));
	memset(S->z_sum, 0, nl * sizeof(double));
	memset(S->tok, 0, nl * E * sizeof(double));
	return m->cp.size > 1 ? alloc_cp(m) : MGT_OK;
}

mgt_status mgt_moe_alloc(mgt_model *m)
{
	struct moe_state *S = m->moe;
	if (!S) return MGT_OK;
	size_t n = (size_t)m->L.slots * (size_t)m->n_layers;
	if (!(S->acts = mgt_malloc(n * sizeof *S->acts))) return MGT_ERR_NOMEM;
	memset(S->acts, 0, n * sizeof *S->acts);
	mgt_status st = MGT_OK;
	for (int s = 0; !st && s < m->L.slots; s++)
		for (int li = 0; !st && li < m->n_layers; li++)
			if (mgt_moe_layer(m, li)) st = alloc_act(m, &S->acts[(size_t)s * m->n_layers + li]);
	return st ? st : alloc_scratch(m);
}

/* Free the activations and scratch (the index of expert tensors stays). */
static void moe_release(mgt_model *m)
{
	struct moe_state *S = m->moe;
	mgt_backend *be = m->be;
	for (size_t i = 0; S->acts && i < (size_t)m->L.slots * (size_t)m->n_layers; i++) {
		struct moe_act *a = &S->acts[i];
		void *b[] = { a->perm, a->slot, a->w, a->fc1, a->act, a->xl, a->yl, a->sfc1, a->sact, a->sout, a->xe, a->re, a->inv };
		for (size_t q = 0; !m->mem.dry && q < sizeof b / sizeof *b; q++) if (b[q]) be->ops->free(be, b[q]);
		free(a->rows);
		free(a->gate);
		free(a->sc);
		free(a->rc);
		free(a->hslot);
		mgt_moe_route_free(&a->r);
	}
	void *b[] = { S->xe, S->ye, S->acts_s, S->dacts, S->dfc1, S->dprob, S->logits_l, S->logits, S->dlog, S->dxr,
		      S->dxg, S->dsh, S->dsact, S->dsfc1, S->gw, S->gl_l, S->gl, S->wsend, S->wrecv, S->xj, S->noise, S->dl };
	for (size_t q = 0; !m->mem.dry && q < sizeof b / sizeof *b; q++) if (b[q]) be->ops->free(be, b[q]);
	void *h[] = { S->acts, S->hf, S->hperm, S->hslot, S->hdprob, S->hdL, S->hdgl, S->hnoise, S->pw1, S->pw2, S->pg1, S->pg2,
		      S->aux_sum, S->z_sum, S->tok, S->allc, S->cnt_d, S->cd, S->hall, S->rows };
	mgt_moe_route_free(&S->rf);
	for (size_t q = 0; q < sizeof h / sizeof *h; q++) free(h[q]);
	const mgt_tensor **w1 = S->w1, **w2 = S->w2;
	struct moe_state keep = { .E = S->E, .El = S->El, .e0 = S->e0, .k = S->k, .ffe = S->ffe, .fc1e = S->fc1e,
				  .sh = S->sh, .shfc1 = S->shfc1, .Nmax = S->Nmax, .ep = S->ep, .aux_scale = S->aux_scale,
				  .lat = S->lat, .eh = S->eh, .hx = S->hx };
	memcpy(keep.disp, S->disp, sizeof keep.disp);
	*S = keep;
	S->w1 = w1;
	S->w2 = w2;
}

void mgt_moe_free(mgt_model *m)
{
	struct moe_state *S = m->moe;
	if (!S) return;
	moe_release(m);
	free(S->w1);
	free(S->w2);
	free(S);
	m->moe = NULL;
}

mgt_status mgt_moe_reserve(mgt_model *m, int T)
{
	struct moe_state *S = m->moe;
	if (!S) return MGT_OK;
	m->T = m->Th = T;
	m->b = 1;
	if (S->acts && T <= S->cap) return MGT_OK;
	moe_release(m);
	S->Nmax = T * S->k * S->ep;
	mgt_status st = mgt_moe_alloc(m);
	S->cap = st ? 0 : T;
	return st;
}

/* ---- forward ---- */

/* The slot of the running pass (0 for an inference model, which has no slots). */
static size_t slot_of(const mgt_model *m) { return m->sa ? (size_t)(m->cur - m->sa) : 0; }

static struct moe_act *act_of(mgt_model *m, int li)
{
	return &m->moe->acts[slot_of(m) * (size_t)m->n_layers + (size_t)li];
}

/* A linear layer of the router (or the shared expert's gate) in fp32 with --moe-router-dtype. */
static void router_linear(mgt_model *m, float *y, const void *x, const mgt_tensor *w, const mgt_tensor *b, int T, int out)
{
	mgt_precision p = m->be->precision;
	if (m->c.moe_router_dtype_fp32) m->be->precision = MGT_PREC_FP32;
	m->be->ops->linear_fwd(m->be, y, MGT_DT_F32, x, m->prec.act_t, W(m, w), WT(m), P(m, b), T, (int)m->h, out);
	m->be->precision = p;
}

/* [Th, n] rows of every TP rank gathered into [T, n] (under SP), then downloaded to host. */
static mgt_status gather_rows_host(mgt_model *m, float *full, float *part, int n, float *host)
{
	mgt_comm *c = m->ps->tp_comm;
	mgt_status st = MGT_OK;
	if (m->sp) st = c->ops->allgather(c, full, part, (size_t)m->Th * (size_t)n, MGT_DT_F32);
	else full = part;
	return st ? st : m->be->ops->download(m->be, host, full, (size_t)m->T * (size_t)n * sizeof(float));
}

/* --moe-input-jitter-eps (router.py apply_input_jitter, training only): the router's input is
 * x times noise from Uniform(1 - eps, 1 + eps), drawn from Philox keyed by the micro-batch's
 * dropout key and the layer, element e of the layer's global [T, h] input counting (the same
 * noise under any layout).  The noise of this slot and layer is kept for the backward; returns
 * the jittered input (S->xj), or x_loc when off. */
static float *jitter_noise(mgt_model *m, int li)
{
	return m->moe->noise + (slot_of(m) * (size_t)m->n_layers + (size_t)li) * (size_t)m->Th * (size_t)m->h;
}

static mgt_status jitter(mgt_model *m, int li, const void *x_loc, bool train, const void **xr)
{
	struct moe_state *S = m->moe;
	double eps = m->c.moe_input_jitter_eps;
	*xr = x_loc;
	if (!(eps > 0) || !train) return MGT_OK;
	size_t h = (size_t)m->h, n = (size_t)m->Th * h;
	float *u = S->hnoise;
	uint64_t key = m->run.drop_key ^ (0x6A09E667F3BCC909ull * (uint64_t)(li + m->first_layer + 1));
	for (int64_t t = 0; t < m->Th; t++) { /* elements by their global row */
		size_t e0 = (size_t)mgt_cp_global_row(m, m->r0 + t) * h;
		for (size_t c = 0; c < h; c++) {
			uint32_t w[4];
			mgt_philox(key, 0, (uint64_t)(e0 + c), w);
			u[(size_t)t * h + c] = (float)(1.0 - eps + 2.0 * eps * (double)mgt_u32_to_unit(w[0]));
		}
	}
	mgt_status st = m->be->ops->upload(m->be, jitter_noise(m, li), u, n * sizeof *u);
	if (st) return st;
	/* the elementwise product: rows_scale over n rows of one element */
	m->be->ops->rows_scale(m->be, S->xj, x_loc, m->prec.act_t, jitter_noise(m, li), (int)n, 1);
	*xr = S->xj;
	return MGT_OK;
}

/* Context parallelism: the router logits of every rank's tokens (a->r.L, this rank's)
 * all-gathered over the context group and placed in the micro-batch's token order, routed whole
 * (the losses and statistics of the whole micro-batch, as one process computes them), and this
 * rank's rows taken back into a->r. */
static mgt_status route_whole(mgt_model *m, struct moe_act *a, const float *bias)
{
	struct moe_state *S = m->moe;
	mgt_comm *c = m->ps->host_cp ? m->ps->host_cp : m->ps->cp_comm;
	size_t n = (size_t)m->T * (size_t)S->E, half = n / 2;
	mgt_status st = c->ops->allgather(c, S->hall, S->hf, n, MGT_DT_F32);
	for (int q = 0; !st && q < m->cp.size; q++)
		for (int h = 0; h < 2; h++) {
			const float *src = S->hall + (size_t)q * n + (size_t)h * half;
			double *dst = S->rf.L + (size_t)(h ? 2 * m->cp.size - 1 - q : q) * half;
			for (size_t i = 0; i < half; i++) dst[i] = src[i];
		}
	if (!st) st = mgt_moe_route_forward(&m->c, &S->rf, bias, 1);
	if (!st) mgt_moe_route_part(&S->rf, &a->r, S->rows);
	return st;
}

static mgt_status route(mgt_model *m, int li, struct moe_act *a, const void *x_loc, bool train)
{
	struct moe_state *S = m->moe;
	int l = li + m->first_layer, T = m->T, E = S->E;
	const void *xr;
	a->r.T = a->r.Tg = T; /* an inference call may route fewer tokens than the buffers hold */
	a->r.B = m->b;
	mgt_status jst = jitter(m, li, x_loc, train, &xr);
	if (jst) return jst;
	router_linear(m, S->logits_l, xr, T_(m, l, MGT_T_ROUTER_W), T_(m, l, MGT_T_ROUTER_B), m->Th, E);
	mgt_status st = gather_rows_host(m, S->logits, S->logits_l, E, S->hf);
	if (st) return st;
	for (size_t i = 0; m->cp.size <= 1 && i < (size_t)T * E; i++) a->r.L[i] = S->hf[i]; /* route_whole's otherwise */
	const mgt_tensor *eb = T_(m, l, MGT_T_EXPERT_BIAS);
	float bias[MGT_MOE_MAX_EXPERTS];
	if (eb && (st = m->be->ops->download(m->be, bias, P(m, eb), (size_t)E * sizeof(float)))) return st;
	if (m->cp.size > 1) st = route_whole(m, a, eb ? bias : NULL);
	else st = mgt_moe_route_forward(&m->c, &a->r, eb ? bias : NULL, m->sp ? m->ps->tp : 1);
	if (st) return st;
	if (train) {
		S->aux_sum[li] += a->r.aux;
		S->z_sum[li] += a->r.z;
		for (int e = 0; e < E; e++) S->tok[(size_t)li * E + e] += a->r.tokens[e];
	}
	return MGT_OK;
}

/* The permutation of the routed copies to the local experts' rows (expert by expert, tokens in
 * order), uploaded: perm, slot, w; a->rows and a->N. */
static mgt_status permute(mgt_model *m, struct moe_act *a)
{
	struct moe_state *S = m->moe;
	const mgt_moe_route *r = &a->r;
	int T = m->T, k = S->k, N = 0;
	/* the local experts' rows, or (ep > 1) the rows to send: every expert, in rank order */
	int e0 = S->ep > 1 ? 0 : S->e0, ne = S->ep > 1 ? S->E : S->El;
	for (size_t q = 0; q < (size_t)T * k; q++) a->hslot[q] = -1;
	for (int e = 0; e < ne; e++) {
		int n0 = N;
		for (int t = 0; t < T; t++)
			for (int j = 0; j < k; j++) {
				size_t q = (size_t)t * k + j;
				if (!r->keep[q] || r->sel[q] != e0 + e) continue;
				S->hperm[N] = t;
				S->hf[N] = (float)r->prob[q];
				a->hslot[q] = N++;
			}
		if (S->ep > 1) S->cnt_d[e] = N - n0;
		else a->rows[e] = N - n0;
		if (S->ep > 1 && e / S->El != m->ep.rank) S->disp[0] += N - n0; /* counted from the routing */
	}
	a->N = a->Nsend = N;
	const mgt_backend_ops *o = m->be->ops;
	mgt_status st = o->upload(m->be, a->perm, S->hperm, (size_t)N * 4);
	if (!st) st = o->upload(m->be, S->ep > 1 ? S->wsend : a->w, S->hf, (size_t)N * 4);
	if (!st) st = o->upload(m->be, a->slot, a->hslot, (size_t)T * k * 4);
	return st;
}

/* ---- expert parallelism: the alltoall token dispatcher (token_dispatcher.py
 * MoEAlltoAllTokenDispatcher): every rank sends each expert's rows to the rank holding it, rows
 * arrive source by source and are reordered expert by expert (sort_chunks_by_idxs) ---- */

static mgt_comm *ep_host(const mgt_model *m) { return m->ps->host_ep ? m->ps->host_ep : m->ps->ep_comm; }

/* Exchange the per-expert counts (all-gathered over the EP group, as Megatron's dispatcher
 * does for its output splits), set a->sc / a->rc, a->rows and a->N, and the reordering. */
static mgt_status ep_plan(mgt_model *m, struct moe_act *a)
{
	struct moe_state *S = m->moe;
	mgt_comm *c = ep_host(m);
	int E = S->E, El = S->El, P = S->ep;
	mgt_status st = c->ops->allgather(c, S->allc, S->cnt_d, (size_t)E, MGT_DT_I64);
	if (st) return st;
	int64_t N = 0;
	for (int r = 0; r < P; r++) {
		a->sc[r] = a->rc[r] = 0;
		for (int e = 0; e < El; e++) {
			a->sc[r] += S->cnt_d[r * El + e];
			a->rc[r] += S->allc[(size_t)r * E + S->e0 + e];
		}
		N += a->rc[r];
		if (r != m->ep.rank) S->disp[1] += (double)a->rc[r];
	}
	S->disp[2] += 1;
	if (N > S->Nmax) return mgt_err(MGT_ERR_IO, "expert parallelism: %lld rows received, more than %d", (long long)N, S->Nmax);
	a->N = (int)N;
	int i = 0;
	for (int e = 0; e < El; e++) { /* expert-major row i <- source-major received row */
		a->rows[e] = 0;
		int64_t base = 0;
		for (int r = 0; r < P; r++) {
			int64_t off = base;
			for (int q = 0; q < e; q++) off += S->allc[(size_t)r * E + S->e0 + q];
			int64_t n = S->allc[(size_t)r * E + S->e0 + e];
			for (int64_t x = 0; x < n; x++) S->hperm[i++] = (int32_t)(off + x);
			a->rows[e] += (int)n;
			base += a->rc[r];
		}
	}
	const mgt_backend_ops *o = m->be->ops;
	st = o->upload(m->be, a->re, S->hperm, (size_t)N * 4);
	for (int q = 0; q < (int)N; q++) S->hslot[S->hperm[q]] = q; /* the inverse, in host scratch */
	if (!st) st = o->upload(m->be, a->inv, S->hslot, (size_t)N * 4);
	return st;
}

/* alltoallv over the EP group of rows of n elements of type t: send counts a->sc (rows), receive
 * a->rc, or the reverse (back).  Tokens and their gradients move in act_t (16 bits under a 16-bit
 * precision, as Megatron's dispatcher moves bf16 hidden states), probabilities in fp32. */
static mgt_status ep_exchange(mgt_model *m, struct moe_act *a, void *dst, const void *src, int n, mgt_elem_type t,
			      bool back)
{
	struct moe_state *S = m->moe;
	int P = S->ep;
	int64_t *sc = S->cd, *sd = S->cd + P, *rc = S->cc, *rd = S->cc + P, so = 0, ro = 0;
	for (int r = 0; r < P; r++) {
		sc[r] = (back ? a->rc[r] : a->sc[r]) * n;
		rc[r] = (back ? a->sc[r] : a->rc[r]) * n;
		sd[r] = so, so += sc[r];
		rd[r] = ro, ro += rc[r];
	}
	return mgt_comm_alltoallv(m->ps->ep_comm, dst, rc, rd, src, sc, sd, t);
}

/* ep > 1: the sent rows S->xe [Nsend, eh] and probabilities S->wsend -> the expert-major input
 * a->xe [N, eh] and a->w [N]. */
static mgt_status ep_dispatch(mgt_model *m, struct moe_act *a)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	int h = S->eh;
	mgt_status st = ep_plan(m, a);
	if (!st) st = ep_exchange(m, a, S->ye, S->xe, h, m->prec.act_t, false);
	if (!st) st = ep_exchange(m, a, S->wrecv, S->wsend, 1, MGT_DT_F32, false);
	if (st) return st;
	o->rows_gather(m->be, a->xe, S->ye, m->prec.act_t, a->re, a->N, h);
	o->rows_gather(m->be, a->w, S->wrecv, MGT_DT_F32, a->re, a->N, 1);
	return MGT_OK;
}

/* ep > 1: expert-major rows y [N, n] of type t back to their senders, into dst [Nsend, n] (tmp
 * [N, n] scratch). */
static mgt_status ep_return(mgt_model *m, struct moe_act *a, void *dst, const void *y, void *tmp, int n,
			    mgt_elem_type t)
{
	m->be->ops->rows_gather(m->be, tmp, y, t, a->inv, a->N, n);
	return ep_exchange(m, a, dst, tmp, n, t, true);
}

static void expert_ptrs(mgt_model *m, int li)
{
	struct moe_state *S = m->moe;
	for (int e = 0; e < S->El; e++) {
		const mgt_tensor *t1 = S->w1[(size_t)li * S->El + e], *t2 = S->w2[(size_t)li * S->El + e];
		S->pw1[e] = W(m, t1); S->pw2[e] = W(m, t2);
		S->pg1[e] = G(m, t1); S->pg2[e] = G(m, t2);
	}
}

/* Element offset i of a buffer of the model's act_t. */
static const void *at_off(const mgt_model *m, const void *p, size_t i)
{
	return (const char *)p + i * mgt_elem_size(m->prec.act_t);
}

/* The shared expert's output into out [T, h] (partial over TP); with the gate, its unscaled
 * output is kept in a->sout and the gate's sigmoid in a->gate. */
static mgt_status shared_fwd(mgt_model *m, int li, struct moe_act *a, const void *x, const void *x_loc, void *out)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	const mgt_elem_type t = m->prec.act_t;
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	o->linear_fwd(m->be, a->sfc1, t, x, t, W(m, T_(m, l, MGT_T_SH_FC1_W)), WT(m), NULL, T, h, S->shfc1);
	o->bias_act_fwd(m->be, m->act, a->sact, t, a->sfc1, t, NULL, T, S->sh);
	const mgt_tensor *g = T_(m, l, MGT_T_SH_GATE_W);
	o->linear_fwd(m->be, g ? a->sout : out, t, a->sact, t, W(m, T_(m, l, MGT_T_SH_FC2_W)), WT(m), NULL, T, S->sh, h);
	if (!g) return MGT_OK;
	router_linear(m, S->gl_l, x_loc, g, NULL, m->Th, 1);
	mgt_status st = gather_rows_host(m, S->gl, S->gl_l, 1, S->hf);
	if (st) return st;
	for (int q = 0; q < T; q++) {
		a->gate[q] = 1.0 / (1.0 + exp(-(double)S->hf[q]));
		S->hf[q] = (float)a->gate[q];
	}
	if ((st = o->upload(m->be, S->gw, S->hf, (size_t)T * 4))) return st;
	o->rows_scale(m->be, out, a->sout, t, S->gw, T, h);
	return MGT_OK;
}

/* --moe-latent-size: fc1_latent_proj (in 0) or fc2_latent_proj (1) of layer li, else NULL. */
static const mgt_tensor *latent_w(mgt_model *m, int li, int which)
{
	return m->moe->lat ? T_(m, li + m->first_layer, which ? MGT_T_LAT_FC2_W : MGT_T_LAT_FC1_W) : NULL;
}

mgt_status mgt_moe_forward(mgt_model *m, int li, bool train, const void *x, void *out)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	const mgt_elem_type t = m->prec.act_t;
	struct moe_act *a = act_of(m, li);
	int T = m->T, h = (int)m->h, eh = S->eh;
	const void *x_loc = at_off(m, x, (size_t)m->r0 * (size_t)h);
	mgt_status st = MGT_OK;
	if (S->sh) st = shared_fwd(m, li, a, x, x_loc, S->dsh);
	if (!st) st = route(m, li, a, x_loc, train);
	if (!st) st = permute(m, a);
	if (st) return st;
	expert_ptrs(m, li);
	bool ep = S->ep > 1;
	const mgt_tensor *l1 = latent_w(m, li, 0), *l2 = latent_w(m, li, 1);
	if (l1) o->linear_fwd(m->be, a->xl, t, x, t, W(m, l1), WT(m), NULL, T, h, eh); /* fc1_latent_proj */
	o->rows_gather(m->be, S->xe, l1 ? a->xl : x, t, a->perm, a->Nsend, eh);
	if (ep && (st = ep_dispatch(m, a))) return st;
	void *xe = ep ? a->xe : S->xe;
	int N = a->N;
	o->linear_fwd_grouped(m->be, a->fc1, xe, t, (const void *const *)S->pw1, WT(m), a->rows, S->El, eh, S->fc1e);
	o->bias_act_fwd(m->be, m->act, a->act, t, a->fc1, t, NULL, N, S->ffe);
	o->rows_scale(m->be, S->acts_s, a->act, t, a->w, N, S->ffe);
	o->linear_fwd_grouped(m->be, S->ye, S->acts_s, t, (const void *const *)S->pw2, WT(m), a->rows, S->El, S->ffe, eh);
	if (ep && (st = ep_return(m, a, S->ye, S->ye, S->xe, eh, t))) return st;
	o->rows_combine(m->be, l2 ? a->yl : out, S->ye, t, a->slot, T, S->k, eh);
	if (l2) o->linear_fwd(m->be, out, t, a->yl, t, W(m, l2), WT(m), NULL, T, eh, h); /* fc2_latent_proj */
	if (S->sh) o->add(m->be, out, S->dsh, t, (size_t)T * (size_t)h);
	return MGT_OK;
}

/* ---- backward ---- */

/* The shared expert's backward from dY [T, h]: d(x) partial into S->dsh; with the gate, the
 * gradient of its logits into the host array dgl [T]. */
static mgt_status shared_bwd(mgt_model *m, int li, struct moe_act *a, const void *x, const void *dY, double *dgl)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	const mgt_elem_type t = m->prec.act_t;
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	const mgt_tensor *g = T_(m, l, MGT_T_SH_GATE_W), *w1 = T_(m, l, MGT_T_SH_FC1_W), *w2 = T_(m, l, MGT_T_SH_FC2_W);
	const void *dout = dY;
	mgt_status st = MGT_OK;
	if (g) {
		o->rows_dot(m->be, S->gw, dY, a->sout, t, T, h);
		mgt_comm *c = m->ps->tp_comm;
		if (c->size > 1) st = c->ops->allreduce(c, S->gw, (size_t)T, MGT_DT_F32, MGT_RED_SUM);
		if (!st) st = o->download(m->be, S->hf, S->gw, (size_t)T * 4);
		if (st) return st;
		for (int q = 0; q < T; q++) {
			dgl[q] = (double)S->hf[q] * a->gate[q] * (1 - a->gate[q]);
			S->hf[q] = (float)a->gate[q];
		}
		if ((st = o->upload(m->be, S->gw, S->hf, (size_t)T * 4))) return st;
		o->rows_scale(m->be, S->ye, dY, t, S->gw, T, h);
		dout = S->ye;
	}
	o->linear_bwd(m->be, S->dsact, t, G(m, w2), NULL, dout, t, a->sact, t, W(m, w2), WT(m), T, S->sh, h);
	o->bias_act_bwd(m->be, m->act, S->dsfc1, NULL, S->dsact, t, a->sfc1, t, NULL, T, S->sh);
	o->linear_bwd(m->be, S->dsh, t, G(m, w1), NULL, S->dsfc1, t, x, t, W(m, w1), WT(m), T, h, S->shfc1);
	return MGT_OK;
}

/* The router's backward: the logits' gradient from the sent rows' dprob [Nsend] (backend, summed over TP)
 * plus the aux and z losses, through the gating GEMM on this rank's rows: router weight
 * gradient, and d(x_loc) into S->dxr (plus the gate's part). */
static mgt_status router_bwd(mgt_model *m, int li, struct moe_act *a, const void *x_loc, const double *dgl,
			     const float *dprob, bool train)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	const mgt_elem_type t = m->prec.act_t;
	int l = li + m->first_layer, T = m->T, E = S->E, k = S->k, Th = m->Th, h = (int)m->h;
	mgt_status st = o->download(m->be, S->hf, dprob, (size_t)a->Nsend * 4);
	if (st) return st;
	for (size_t q = 0; q < (size_t)T * k; q++) S->hdprob[q] = a->hslot[q] >= 0 ? S->hf[a->hslot[q]] : 0.0;
	if ((st = mgt_moe_route_backward(&m->c, &a->r, S->hdprob, S->aux_scale, S->hdL))) return st;
	for (size_t i = 0; i < (size_t)Th * E; i++) S->hf[i] = (float)S->hdL[(size_t)m->r0 * E + i];
	if ((st = o->upload(m->be, S->dlog, S->hf, (size_t)Th * E * 4))) return st;
	const mgt_tensor *w = T_(m, l, MGT_T_ROUTER_W), *b = T_(m, l, MGT_T_ROUTER_B), *g = T_(m, l, MGT_T_SH_GATE_W);
	mgt_precision p = m->be->precision;
	if (m->c.moe_router_dtype_fp32) m->be->precision = MGT_PREC_FP32;
	bool jit = m->c.moe_input_jitter_eps > 0 && train;
	if (jit) o->rows_scale(m->be, S->xj, x_loc, t, jitter_noise(m, li), Th * h, 1); /* the input the router saw */
	o->linear_bwd(m->be, S->dxr, t, G(m, w), G(m, b), S->dlog, MGT_DT_F32, jit ? S->xj : x_loc, t, W(m, w), WT(m), Th, h, E);
	if (jit) o->rows_scale(m->be, S->dxr, S->dxr, t, jitter_noise(m, li), Th * h, 1);
	if (g) {
		for (int q = 0; q < Th; q++) S->hf[q] = (float)dgl[m->r0 + q];
		st = o->upload(m->be, S->gl_l, S->hf, (size_t)Th * 4);
		if (!st) o->linear_bwd(m->be, S->dxg, t, G(m, g), NULL, S->gl_l, MGT_DT_F32, x_loc, t, W(m, g), WT(m), Th, h, 1);
		if (!st) o->add(m->be, S->dxr, S->dxg, t, (size_t)Th * (size_t)h);
	}
	m->be->precision = p;
	return st;
}

mgt_status mgt_moe_backward(mgt_model *m, int li, bool train, const void *x, void *dY, void **dx_loc)
{
	struct moe_state *S = m->moe;
	const mgt_backend_ops *o = m->be->ops;
	const mgt_elem_type t = m->prec.act_t;
	struct moe_act *a = act_of(m, li);
	int T = m->T, h = (int)m->h, N = a->N, eh = S->eh;
	const void *x_loc = at_off(m, x, (size_t)m->r0 * (size_t)h);
	mgt_status st = MGT_OK;
	if (S->sh) st = shared_bwd(m, li, a, x, dY, S->hdgl);
	if (st) return st;
	expert_ptrs(m, li);
	bool ep = S->ep > 1;
	void *dye = S->ye, *xin = S->xe;
	float *dprob = S->dprob;
	const mgt_tensor *l1 = latent_w(m, li, 0), *l2 = latent_w(m, li, 1);
	const void *dcomb = dY; /* the gradient of the combined output: [T, eh] */
	if (l2) { /* fc2_latent_proj: dl = dY . W2, dW2 += dY^T yl (partial over TP) */
		o->linear_bwd(m->be, S->dl, t, G(m, l2), NULL, dY, t, a->yl, t, W(m, l2), WT(m), T, eh, h);
		dcomb = S->dl;
	}
	if (ep) { /* the output gradient's rows travel as the rows did; the input was kept */
		o->rows_gather(m->be, S->xe, dcomb, t, a->perm, a->Nsend, eh);
		if (!st) st = ep_exchange(m, a, S->ye, S->xe, eh, t, false);
		o->rows_gather(m->be, S->xe, S->ye, t, a->re, N, eh);
		dye = S->xe, xin = a->xe;
	} else {
		o->rows_gather(m->be, S->ye, dcomb, t, a->perm, N, eh);
		o->rows_gather(m->be, S->xe, l1 ? a->xl : x, t, a->perm, N, eh);
	}
	o->rows_scale(m->be, S->acts_s, a->act, t, a->w, N, S->ffe);
	o->linear_bwd_grouped(m->be, S->dacts, S->pg2, dye, S->acts_s, t, (const void *const *)S->pw2, WT(m), a->rows,
			      S->El, S->ffe, eh);
	o->rows_dot(m->be, S->dprob, S->dacts, a->act, t, N, S->ffe);
	mgt_comm *c = m->ps->tp_comm;
	if (!st && c->size > 1 && N) st = c->ops->allreduce(c, S->dprob, (size_t)N, MGT_DT_F32, MGT_RED_SUM);
	o->rows_scale(m->be, S->dacts, S->dacts, t, a->w, N, S->ffe);
	o->bias_act_bwd(m->be, m->act, S->dfc1, NULL, S->dacts, t, a->fc1, t, NULL, N, S->ffe);
	o->linear_bwd_grouped(m->be, S->ye, S->pg1, S->dfc1, xin, t, (const void *const *)S->pw1, WT(m), a->rows, S->El,
			      eh, S->fc1e);
	if (ep && !st) st = ep_return(m, a, S->ye, S->ye, S->xe, eh, t);
	if (ep && !st) st = ep_return(m, a, S->wsend, S->dprob, S->wrecv, 1, MGT_DT_F32), dprob = S->wsend;
	o->rows_combine(m->be, l1 ? S->dl : dY, S->ye, t, a->slot, T, S->k, eh);
	/* fc1_latent_proj: d(x) = dl . W1 (partial over TP, as the experts' own), dW1 += dl^T x */
	if (l1) o->linear_bwd(m->be, dY, t, G(m, l1), NULL, S->dl, t, x, t, W(m, l1), WT(m), T, h, eh);
	if (S->sh) o->add(m->be, dY, S->dsh, t, (size_t)T * (size_t)h);
	if (!st) st = router_bwd(m, li, a, x_loc, S->hdgl, dprob, train);
	*dx_loc = S->dxr;
	return st;
}

/* ---- the public part (model.h) ---- */

void mgt_model_set_aux_scale(mgt_model *m, float scale)
{
	if (m->moe) m->moe->aux_scale = scale;
}

int mgt_model_moe_layers(const mgt_model *m, int *layers)
{
	int n = 0;
	for (int li = 0; li < m->n_layers; li++)
		if (mgt_moe_layer(m, li)) {
			if (layers) layers[n] = m->first_layer + li;
			n++;
		}
	return n;
}

int mgt_model_moe_take_stats(mgt_model *m, double *aux, double *z, double *tokens)
{
	struct moe_state *S = m->moe;
	if (!S) return 0;
	int n = 0;
	for (int li = 0; li < m->n_layers; li++) {
		if (!mgt_moe_layer(m, li)) continue;
		if (aux) aux[n] = S->aux_sum[li];
		if (z) z[n] = S->z_sum[li];
		if (tokens) memcpy(tokens + (size_t)n * S->E, S->tok + (size_t)li * S->E, (size_t)S->E * sizeof(double));
		S->aux_sum[li] = S->z_sum[li] = 0;
		memset(S->tok + (size_t)li * S->E, 0, (size_t)S->E * sizeof(double));
		n++;
	}
	return n;
}

mgt_status mgt_model_moe_update_bias(mgt_model *m, const double *tokens)
{
	struct moe_state *S = m->moe;
	if (!S || !m->c.moe_router_enable_expert_bias) return MGT_OK;
	int E = S->E, n = 0;
	float bias[MGT_MOE_MAX_EXPERTS];
	float rate = (float)m->c.moe_router_bias_update_rate;
	for (int li = 0; li < m->n_layers; li++) {
		if (!mgt_moe_layer(m, li)) continue;
		const double *cnt = tokens + (size_t)n++ * E;
		const mgt_tensor *t = T_(m, li + m->first_layer, MGT_T_EXPERT_BIAS);
		mgt_status st = m->be->ops->download(m->be, bias, P(m, t), (size_t)E * 4);
		if (st) return st;
		double mean = 0;
		for (int e = 0; e < E; e++) mean += cnt[e] / E;
		for (int e = 0; e < E; e++) {
			double off = mean - cnt[e];
			bias[e] = bias[e] + (float)((off > 0) - (off < 0)) * rate;
		}
		if ((st = m->be->ops->upload(m->be, P(m, t), bias, (size_t)E * 4))) return st;
	}
	return MGT_OK;
}

mgt_status mgt_model_moe_routing(mgt_model *m, int slot, int layer, int32_t *experts, float *probs)
{
	struct moe_state *S = m->moe;
	int li = layer - m->first_layer;
	if (!S || li < 0 || li >= m->n_layers || !mgt_moe_layer(m, li) || slot < 0 || slot >= m->L.slots)
		return mgt_err(MGT_ERR_USAGE, "layer %d is not an MoE layer of this model chunk", layer);
	const mgt_moe_route *r = &S->acts[(size_t)slot * m->n_layers + li].r;
	int k = S->k;
	for (int t = 0; t < r->T; t++) {
		int idx[MGT_MOE_MAX_TOPK];
		for (int j = 0; j < k; j++) idx[j] = j;
		for (int j = 1; j < k; j++) /* insertion sort by expert */
			for (int q = j; q > 0 && r->sel[(size_t)t * k + idx[q]] < r->sel[(size_t)t * k + idx[q - 1]]; q--) {
				int x = idx[q]; idx[q] = idx[q - 1]; idx[q - 1] = x;
			}
		for (int j = 0; j < k; j++) {
			size_t q = (size_t)t * k + idx[j];
			experts[(size_t)t * k + j] = r->keep[q] ? r->sel[q] : -1;
			probs[(size_t)t * k + j] = r->keep[q] ? (float)r->prob[q] : 0.0f;
		}
	}
	return MGT_OK;
}

void mgt_model_moe_dispatch_counts(const mgt_model *m, double out[3])
{
	for (int i = 0; i < 3; i++) out[i] = m->moe ? m->moe->disp[i] : 0;
}
