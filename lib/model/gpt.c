/* lib/model/gpt.c: GPT forward and backward over backend ops (megatron/core/transformer/
 * transformer_layer.py, attention.py, mlp.py; megatron/core/models/gpt/gpt_model.py).
 *
 * Activations are sequence-first [T, .] with T = s*b.  Per layer the forward keeps what the
 * backward needs: the layer input (residual stream), both norm outputs and statistics, the fused
 * QKV after RoPE, the attention output and its log-sum-exp, the residual after attention, fc1
 * output and the activation.  Dropout masks are recomputed from Philox keys, never stored.
 * Activation recomputation (mgt_model_layout.recompute, model.h) keeps less and reruns part of
 * the forward in the backward; the aliases into its scratch are set up once, at allocation, so
 * the layer forward and backward functions below do not depend on it.
 */
#include "model_impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation ---- */

void *mgt_model_balloc(mgt_model *m, size_t bytes, size_t *acct, mgt_status *st)
{
	static float dry_dummy;
	if (*st) return NULL;
	*acct += m->dry ? bytes : 0;
	if (m->dry) return &dry_dummy;
	void *p = m->be->ops->alloc(m->be, bytes ? bytes : 4);
	if (!p) *st = MGT_ERR_NOMEM;
	*acct += bytes;
	return p;
}
#define AF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->act_bytes, &st)
/* n elements of type t */
#define AT(n, t) (float *)mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(t), &m->act_bytes, &st)
#define WF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->work_bytes, &st)
#define WK(n, t) (float *)mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(t), &m->work_bytes, &st)

/* Elements of layer buffer k (LA_*) of local layer li (-1: a dense layer's), 0 for one the model
 * does not have (an MoE layer's expert activations are moe.c's). */
static size_t la_numel(const mgt_model *m, int li, int k)
{
	if ((k == LA_FC1 || k == LA_ACT) && li >= 0 && mgt_moe_is_layer(&m->c, m->first_layer + li)) return 0;
	size_t T = (size_t)m->T, Th = (size_t)m->Th, h = (size_t)m->h, rows = T * (size_t)m->ng_l;
	switch (k) {
	case LA_X_IN: case LA_X_MID: return Th * h;
	case LA_LN1: case LA_LN2: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * h; /* fp8: the cast keeps x */
	case LA_MEAN1: case LA_RSTD1: case LA_MEAN2: case LA_RSTD2: return Th;
	case LA_QKV: return T * (size_t)m->qkv_l;
	case LA_CTX: return T * (size_t)(m->nq_l * m->d);
	case LA_LSE: return (size_t)m->b * (size_t)m->nq_l * (size_t)m->s;
	case LA_FC1: return T * (size_t)m->fc1_l;
	case LA_ACT: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * (size_t)m->ffn_l; /* fp8: x8 kept */
	case LA_QKV_PRE: return m->qkln ? T * (size_t)m->qkv_l : 0;
	case LA_QMEAN: case LA_QRSTD: return m->qkln ? rows * (size_t)m->r : 0;
	case LA_KMEAN: case LA_KRSTD: return m->qkln ? rows : 0;
	default: return 0;
	}
}

/* The element type of layer buffer k (mgt_model.act_t, fc1_t, res_t). */
static mgt_elem_type la_type(const mgt_model *m, int k)
{
	switch (k) {
	case LA_LN1: case LA_LN2: case LA_ACT: case LA_QKV: case LA_CTX: return m->act_t;
	case LA_FC1: return m->fc1_t;
	case LA_X_IN: case LA_X_MID: return m->res_t;
	default: return MGT_DT_F32;
	}
}

#define LA_BIT(k) (1u << (k))
#define LA_ALL ((1u << LA_N) - 1)

/* ---- activation recomputation (Korthikanti et al. 2022; megatron/core/recompute.py) ----
 * FULL: a recomputed layer keeps only the input of its group (the slot's x_in of the group's
 * first layer); everything else it needs lives in the scratch m->rc and is recomputed by
 * rerunning the group's forward before its backward.  Groups: uniform, layers [g, g + n) for g a
 * multiple of n = recompute num_layers (the last group shorter); block, each of the chunk's first
 * n layers alone; the other layers of the chunk keep everything.  SELECTIVE: every layer keeps
 * everything but core attention's outputs (ctx, lse), which are recomputed from the kept qkv. */

static bool rc_full(const mgt_model *m, int li)
{
	const mgt_recompute *r = &m->L.recompute;
	return r->granularity == MGT_RECOMPUTE_FULL && (r->method == MGT_RECOMPUTE_UNIFORM || li < r->num_layers);
}

/* The recompute group [*g0, *g1) of a layer with rc_full. */
static void rc_group(const mgt_model *m, int li, int *g0, int *g1)
{
	int n = m->L.recompute.num_layers;
	if (m->L.recompute.method == MGT_RECOMPUTE_BLOCK) n = 1;
	*g0 = li - li % n;
	*g1 = *g0 + n < m->n_layers ? *g0 + n : m->n_layers;
}

/* Buffers that layer li of a slot allocates for itself (the rest alias m->rc). */
static unsigned la_own(const mgt_model *m, int li)
{
	if (rc_full(m, li)) {
		int g0, g1;
		rc_group(m, li, &g0, &g1);
		return li == g0 ? LA_BIT(LA_X_IN) : 0;
	}
	if (m->L.recompute.granularity == MGT_RECOMPUTE_SELECTIVE) return LA_ALL & ~(LA_BIT(LA_CTX) | LA_BIT(LA_LSE));
	return LA_ALL;
}

/* Allocate the buffers of a named by own (those the model has) and record them in a->own. */
static mgt_status alloc_layer(mgt_model *m, int li, layer_act *a, unsigned own)
{
	mgt_status st = MGT_OK;
	for (int k = 0; k < LA_N; k++)
		if ((own & LA_BIT(k)) && la_numel(m, li, k)) {
			*la_buf(a, k) = AT(la_numel(m, li, k), la_type(m, k));
			a->own |= LA_BIT(k);
		}
	return st;
}

static void free_layer(mgt_model *m, layer_act *a)
{
	for (int k = 0; k < LA_N; k++)
		if (a->own & LA_BIT(k)) m->be->ops->free(m->be, *la_buf(a, k));
}

/* The scratch of the recomputed layers, shared by the slots: FULL, one set of layer buffers per
 * position in the largest group (its first layer's input excepted: that is the slot's own);
 * SELECTIVE, one layer's ctx and lse. */
static mgt_status alloc_recompute(mgt_model *m)
{
	const mgt_recompute *r = &m->L.recompute;
	if (r->granularity == MGT_RECOMPUTE_NONE || !m->n_layers) return MGT_OK;
	int n = 1;
	if (r->granularity == MGT_RECOMPUTE_FULL && r->method == MGT_RECOMPUTE_UNIFORM)
		n = r->num_layers < m->n_layers ? r->num_layers : m->n_layers;
	if (!(m->rc = mgt_malloc((size_t)n * sizeof *m->rc))) return MGT_ERR_NOMEM;
	memset(m->rc, 0, (size_t)n * sizeof *m->rc);
	m->rc_n = n;
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < n; k++)
		st = alloc_layer(m, -1, &m->rc[k], r->granularity == MGT_RECOMPUTE_SELECTIVE ? LA_BIT(LA_CTX) | LA_BIT(LA_LSE) :
					       k == 0 ? LA_ALL & ~LA_BIT(LA_X_IN) : LA_ALL);
	return st;
}

static mgt_status alloc_slot(mgt_model *m, slot_act *sa)
{
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, Th = (size_t)m->Th, h = (size_t)m->h;
	if (!(sa->la = mgt_malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *sa->la))) return MGT_ERR_NOMEM;
	memset(sa->la, 0, (size_t)(m->n_layers ? m->n_layers : 1) * sizeof *sa->la);
	for (int l = 0; !st && l < m->n_layers; l++) {
		layer_act *a = &sa->la[l];
		unsigned own = la_own(m, l);
		if (m->t5) mgt_t5_dims(m, l < m->n_layers / 2 ? T5_ENC : T5_DEC); /* the layer's stack */
		st = alloc_layer(m, l, a, own);
		if (own == LA_ALL) continue;
		int g0 = l, g1;
		if (rc_full(m, l)) rc_group(m, l, &g0, &g1);
		const layer_act *s = &m->rc[l - g0];
		for (int k = 0; k < LA_N; k++)
			if (!(own & LA_BIT(k))) *la_buf(a, k) = *la_buf((layer_act *)s, k);
	}
	if (m->t5) mgt_t5_dims(m, T5_DEC); /* the head's and the labels' */
	if (m->t5) T = (size_t)m->T, Th = (size_t)m->Th;
	sa->res_out = AT(Th * h, m->res_t);
	if (m->last) {
		sa->lnf = AT(T * h, m->act_t); sa->meanf = AF(Th); sa->rstdf = AF(Th);
		sa->logits = AT(T * (size_t)m->V_l, m->act_t);
		sa->mx = AF(T); sa->sumexp = AF(T); sa->tgt = AF(T); sa->loss = AF(T);
	}
	sa->mask = AF(T);
	sa->labels = (int32_t *)AF(T);
	if (!m->t5) sa->tokens = (int32_t *)AF(T), sa->pos = (int32_t *)AF(T); /* T5: the stacks' own (t5.c) */
	if (mgt_model_is_bert(&m->c)) {
		sa->kmask = (uint8_t *)mgt_model_balloc(m, T, &m->act_bytes, &st);
		if (m->c.bert_binary_head) sa->types = (int32_t *)AF(T);
	}
	return st;
}

static mgt_status alloc_activations(mgt_model *m)
{
	mgt_status st = alloc_recompute(m);
	if (st) return st;
	if (m->t5) mgt_t5_dims(m, T5_MAX); /* the shared scratch serves both stacks */
	size_t T = (size_t)m->T, Th = (size_t)m->Th, h = (size_t)m->h;
	if (!(m->sa = mgt_malloc((size_t)m->L.slots * sizeof *m->sa))) return MGT_ERR_NOMEM;
	memset(m->sa, 0, (size_t)m->L.slots * sizeof *m->sa);
	for (int k = 0; !st && k < m->L.slots; k++) st = alloc_slot(m, &m->sa[k]);
	m->cur = &m->sa[0];
	if (m->first) m->emb = AF(T * h);
	if (m->sp) { m->lnl = AF(Th * h); m->dloc = WF(Th * h); }
	size_t big = (size_t)(m->qkv_l > m->fc1_l ? m->qkv_l : m->fc1_l);
	/* the gradient scratch in the gradients' types (dloc above stays fp32: it also takes the
	 * embedding's fp32 output under SP) */
	m->dres = WK(Th * h, m->res_t); m->dtmp_h = WK(T * h, m->act_t); m->dbig = WK(T * big, m->act_t);
	m->dctx = WK(T * (size_t)(m->nq_l * m->d), m->act_t); m->dact = WK(T * (size_t)m->ffn_l, m->act_t);
	if (m->rope && m->n_layers) m->inv_freq = WF(m->rot_dim / 2);
	if (!st) st = mgt_cp_alloc(m);
	if (!st) st = mgt_model_fp8_alloc(m);
	if (!st) st = mgt_bert_alloc(m);
	if (!st && mgt_model_is_bert(&m->c) && !m->dry && !(m->kmask_h = mgt_malloc((size_t)m->T))) st = MGT_ERR_NOMEM;
	if (!st) st = mgt_t5_alloc(m);
	if (m->t5) mgt_t5_dims(m, T5_DEC);
	return st ? st : mgt_moe_alloc(m);
}

static mgt_status index_roles(mgt_model *m)
{
	m->first_layer = -1;
	for (int i = 0; i < m->tt.n; i++) {
		int l = m->tt.t[i].layer;
		if (l >= 0 && m->first_layer < 0) m->first_layer = l;
		if (l >= 0) m->n_layers = l - m->first_layer + 1;
	}
	if (m->first_layer < 0) m->first_layer = 0;
	m->by_role = mgt_malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *m->by_role);
	if (!m->by_role) return MGT_ERR_NOMEM;
	memset(m->by_role, 0, (size_t)(m->n_layers ? m->n_layers : 1) * sizeof *m->by_role);
	for (int i = 0; i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		if (t->layer >= 0) m->by_role[t->layer - m->first_layer][t->role] = t;
		else m->glob[t->role] = t;
	}
	return MGT_OK;
}

static void set_dims(mgt_model *m)
{
	const mgt_model_config *c = &m->c;
	int tp = m->ps->tp;
	m->cp = m->ps->cp > 1 ? m->ps->cp : 1;
	m->cp_rank = m->cp > 1 ? m->ps->cp_rank : 0;
	m->s = (int)(c->seq_length / m->cp);
	m->cp_C = m->s / 2;
	m->b = m->L.mbs;
	m->T = m->s * m->b;
	m->sp = m->L.sequence_parallel && tp > 1;
	m->Th = m->sp ? m->T / tp : m->T;
	m->r0 = m->sp ? (int64_t)m->Th * m->ps->tp_rank : 0;
	m->first = m->L.stage == 0;
	m->last = m->L.stage == m->L.num_stages - 1;
	m->h = c->hidden_size;
	m->d = c->kv_channels;
	m->nq_l = c->num_attention_heads / tp;
	m->ng_l = c->num_query_groups / tp;
	m->r = c->num_attention_heads / c->num_query_groups;
	m->qkv_l = (m->nq_l + 2 * m->ng_l) * m->d;
	m->ffn_l = c->ffn_hidden_size / tp;
	m->fc1_l = c->swiglu ? 2 * m->ffn_l : m->ffn_l;
	m->V_l = c->padded_vocab_size / tp;
	m->v0 = m->V_l * m->ps->tp_rank;
	m->layernorm = !strcmp(c->normalization, "LayerNorm");
	m->norm = m->layernorm ? MGT_NORM_LAYERNORM : MGT_NORM_RMSNORM;
	m->rope = !strcmp(c->position_embedding_type, "rope");
	m->rot_dim = m->rope ? (int)(m->d * c->rotary_percent) : 0;
	m->qkln = c->qk_layernorm;
	/* BERT and T5: Megatron's bias-GELU fusion (on by default with biases) is the tanh approximation */
	bool tanh = c->openai_gelu ||
		    ((mgt_model_is_bert(c) || mgt_model_is_t5(c)) && c->add_bias_linear && !c->no_bias_gelu_fusion);
	m->act = c->swiglu ? MGT_ACT_SWIGLU : tanh ? MGT_ACT_GELU_TANH : MGT_ACT_GELU;
}

static mgt_status check_layout(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps)
{
	if (ps->cp > 1 && c->seq_length % (2 * ps->cp))
		return mgt_err(MGT_ERR_USAGE, "--seq-length %lld is not divisible by 2 x --context-parallel-size %d "
			       "(each sequence is cut into 2 x CP chunks)", (long long)c->seq_length, ps->cp);
	if (ps->cp > 1 && L->cp_comm == MGT_CP_A2A && (c->num_query_groups / ps->tp) % ps->cp)
		return mgt_err(MGT_ERR_USAGE, "--cp-comm-type a2a: the %lld query groups per tensor-parallel rank "
			       "(--num-query-groups / --tensor-model-parallel-size) are not divisible by "
			       "--context-parallel-size %d", (long long)(c->num_query_groups / ps->tp), ps->cp);
	if (ps->cp > 1 && c->num_experts > 0 && c->moe_expert_capacity_factor > 0)
		return mgt_err(MGT_ERR_USAGE, "--moe-expert-capacity-factor with --context-parallel-size %d: token dropping "
			       "under context parallelism is not implemented in this version", ps->cp);
	if (c->seq_length > INT32_MAX / 4)
		return mgt_err(MGT_ERR_USAGE, "--seq-length %lld: more than the %d tokens a micro-batch can hold",
			       (long long)c->seq_length, INT32_MAX / 4);
	if (L->mbs <= 0 || (int64_t)L->mbs * c->seq_length > INT32_MAX / 4)
		return mgt_err(MGT_ERR_USAGE, "--micro-batch-size %d x --seq-length %lld: more than the %d tokens a "
			       "micro-batch can hold", L->mbs, (long long)c->seq_length, INT32_MAX / 4);
	if (L->num_stages < 1 || L->stage < 0 || L->stage >= L->num_stages || L->slots < 1)
		return mgt_err(MGT_ERR_USAGE, "pipeline stage %d of %d: out of range", L->stage, L->num_stages);
	int64_t first, n;
	mgt_status st = mgt_stage_layers(c, L->num_stages, L->stage, &first, &n);
	if (st) return st;
	const mgt_recompute *r = &L->recompute;
	if (r->granularity == MGT_RECOMPUTE_FULL && (r->num_layers < 1 ||
	    (r->method != MGT_RECOMPUTE_UNIFORM && r->method != MGT_RECOMPUTE_BLOCK)))
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity full needs --recompute-method uniform or block and "
			       "--recompute-num-layers >= 1 (got %d)", r->num_layers);
	if (r->granularity != MGT_RECOMPUTE_NONE && r->granularity != MGT_RECOMPUTE_SELECTIVE &&
	    r->granularity != MGT_RECOMPUTE_FULL)
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity: expected full or selective");
	if (c->num_experts > 0 && r->granularity == MGT_RECOMPUTE_FULL)
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity full with --num-experts: not supported in this "
			       "version (selective recomputation is)");
	if (c->num_experts > 0 && ps->tp > 1 && !L->sequence_parallel)
		return mgt_err(MGT_ERR_USAGE, "--num-experts with --tensor-model-parallel-size %d needs "
			       "--sequence-parallel (as Megatron-Core's MoE layer)", ps->tp);
	int cp = ps->cp > 1 ? ps->cp : 1;
	if (L->sequence_parallel && ps->tp > 1 && (c->seq_length / cp * L->mbs) % ps->tp)
		return mgt_err(MGT_ERR_USAGE, "--sequence-parallel: --seq-length %lld / --context-parallel-size %d x "
			       "--micro-batch-size %d is not divisible by --tensor-model-parallel-size %d",
			       (long long)c->seq_length, cp, L->mbs, ps->tp);
	return MGT_OK;
}

/* The layout's fp8 against the chunk's dimensions (fp8lin.c). */
static mgt_status fp8_check(const mgt_model *m)
{
	int64_t dims[4][2] = { { m->h, m->qkv_l }, { m->nq_l * m->d, m->h }, { m->h, m->fc1_l }, { m->ffn_l, m->h } };
	return mgt_model_fp8_check(&m->c, &m->L, m->T, dims);
}

/* The chunk without its buffers: dimensions, tensor table and flat-buffer layout. */
mgt_status mgt_model_new_chunk(mgt_model **out, const mgt_model_config *c, const mgt_model_layout *L,
			    mgt_backend *be, const mgt_parallel *ps, bool dry)
{
	*out = NULL;
	mgt_status st = check_layout(c, L, ps);
	if (!st && !dry && ps->cp > 1 && !be->ops->attn_merge)
		st = mgt_err(MGT_ERR_USAGE, "--context-parallel-size %d: the %s backend has no context-parallel attention "
			     "in this build", ps->cp, be->ops->name);
	if (st) return st;
	mgt_model *m = mgt_malloc(sizeof *m);
	if (!m) return MGT_ERR_NOMEM;
	memset(m, 0, sizeof *m);
	m->c = *c;
	m->L = *L;
	m->be = be;
	m->ps = ps;
	m->dry = dry;
	set_dims(m);
	m->ep = ps->ep > 0 ? ps->ep : 1;
	m->ep_rank = ps->ep > 0 ? ps->ep_rank : 0;
	st = mgt_tensor_table_build_ep(&m->tt, c, ps->tp, ps->tp_rank, L->num_stages, L->stage, m->ep, m->ep_rank);
	bool shared = !c->untie_embeddings_and_output_weights && ps->pp > 1;
	if (!st) st = mgt_tensor_table_layout(&m->tt, L->dp, L->distributed_optimizer, L->bucket_size, shared);
	if (!st) st = index_roles(m);
	if (!st) st = mgt_moe_setup(m);
	if (!st) st = mgt_t5_setup(m);
	if (!st) st = fp8_check(m);
	m->act_t = mgt_precision_dtype(L->precision);
	m->fc1_t = m->act_t;
	m->res_t = L->fp32_residual_connection ? MGT_DT_F32 : m->act_t;
	if (st) mgt_model_free(m);
	else *out = m;
	return st;
}

size_t mgt_model_lp_bytes(const mgt_model *m)
{
	return m->infer || m->L.precision == MGT_PREC_FP32 ? 0 : m->tt.buf_numel * 2;
}

/* --apply-layernorm-1p: the offsets of the norm weights in m->nw1, the buffer and its ones. */
static mgt_status alloc_nw1(mgt_model *m)
{
	if (!m->c.apply_layernorm_1p) return MGT_OK;
	size_t n = 0, most = 1;
	if (!(m->nw_off = mgt_malloc((size_t)(m->tt.n ? m->tt.n : 1) * sizeof *m->nw_off))) return MGT_ERR_NOMEM;
	for (int i = 0; i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		if (!mgt_tensor_is_norm_weight(t)) continue;
		m->nw_off[i] = n;
		n += t->numel;
		if (t->numel > most) most = t->numel;
	}
	float *one = mgt_malloc(most * sizeof *one);
	m->nw1 = m->be->ops->alloc(m->be, (n ? n : 1) * sizeof(float));
	m->ones = m->be->ops->alloc(m->be, most * sizeof(float));
	mgt_status st = one && m->nw1 && m->ones ? MGT_OK : MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < most; i++) one[i] = 1.0f;
	if (!st) st = m->be->ops->upload(m->be, m->ones, one, most * sizeof(float));
	free(one);
	return st;
}

mgt_status mgt_model_alloc_params(mgt_model *m, bool grads)
{
	mgt_backend *be = m->be;
	size_t bytes = m->tt.buf_numel * sizeof(float), lpb = grads ? mgt_model_lp_bytes(m) : 0;
	m->params = be->ops->alloc(be, bytes);
	if (grads) m->grads = be->ops->alloc(be, bytes);
	if (lpb) m->lp = be->ops->alloc(be, lpb);
	if (!m->params || (grads && !m->grads) || (lpb && !m->lp) || alloc_nw1(m)) return MGT_ERR_NOMEM;
	be->ops->zero(be, m->params, bytes);
	if (grads) be->ops->zero(be, m->grads, bytes);
	m->lp_t = mgt_precision_dtype(m->L.precision);
	m->lp_stale = true;
	return MGT_OK;
}

void mgt_model_lp_refresh(mgt_model *m)
{
	if (!m->lp_stale) return;
	if (m->lp) m->be->ops->cast(m->be, m->lp, m->lp_t, m->params, m->tt.buf_numel);
	for (int i = 0; m->nw1 && i < m->tt.n; i++) { /* 1 + w, in fp32 */
		const mgt_tensor *t = &m->tt.t[i];
		if (!mgt_tensor_is_norm_weight(t)) continue;
		m->be->ops->copy(m->be, m->nw1 + m->nw_off[i], P(m, t), t->numel * sizeof(float));
		m->be->ops->add(m->be, m->nw1 + m->nw_off[i], m->ones, MGT_DT_F32, t->numel);
	}
	m->lp_stale = false;
}

mgt_status mgt_model_upload_inv_freq(mgt_model *m)
{
	size_t bytes = (size_t)(m->rot_dim / 2) * sizeof(float);
	if (!m->inv_freq && !(m->inv_freq = m->be->ops->alloc(m->be, bytes))) return MGT_ERR_NOMEM;
	float *f = mgt_malloc(bytes ? bytes : 4);
	if (!f) return MGT_ERR_NOMEM;
	mgt_model_rope_inv_freq(&m->c, f);
	mgt_status st = m->be->ops->upload(m->be, m->inv_freq, f, bytes);
	free(f);
	return st;
}

mgt_status mgt_model_create(mgt_model **out, const mgt_model_config *c, const mgt_model_layout *L,
			    mgt_backend *be, const mgt_parallel *ps)
{
	mgt_model *m;
	mgt_status st = mgt_model_new_chunk(&m, c, L, be, ps, false);
	if (st) return st;
	st = mgt_model_alloc_params(m, true);
	if (!st) st = alloc_activations(m);
	if (!st && m->inv_freq) st = mgt_model_upload_inv_freq(m);
	if (st) {
		mgt_model_free(m);
		return st;
	}
	*out = m;
	return MGT_OK;
}

mgt_status mgt_model_measure(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
			     mgt_model_mem *mem, size_t *buf_numel)
{
	mgt_model *m;
	mgt_status st = mgt_model_new_chunk(&m, c, L, NULL, ps, true);
	if (st) return st;
	st = alloc_activations(m);
	if (!st) {
		*mem = mgt_model_memory(m);
		*buf_numel = m->tt.buf_numel;
	}
	mgt_model_free(m);
	return st;
}

static void free_slot(mgt_model *m, slot_act *sa)
{
	mgt_backend *be = m->be;
	for (int l = 0; sa->la && l < m->n_layers; l++) free_layer(m, &sa->la[l]);
	free(sa->la);
	float *bufs[] = { sa->res_out, sa->lnf, sa->meanf, sa->rstdf, sa->logits, sa->mx, sa->sumexp, sa->tgt,
			  sa->loss, sa->mask, (float *)sa->tokens, (float *)sa->labels, (float *)sa->pos,
			  (float *)sa->types, (float *)sa->kmask };
	for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) be->ops->free(be, bufs[k]);
}

void mgt_model_free(mgt_model *m)
{
	if (!m) return;
	mgt_backend *be = m->be;
	for (int k = 0; m->sa && k < m->L.slots; k++) {
		if (m->t5) m->sa[k].tokens = NULL, m->sa[k].pos = NULL, m->sa[k].kmask = NULL; /* t5.c's */
		if (m->dry) free(m->sa[k].la);
		else free_slot(m, &m->sa[k]);
	}
	mgt_t5_free(m);
	free(m->sa);
	for (int k = 0; m->rc && !m->dry && k < m->rc_n; k++) free_layer(m, &m->rc[k]);
	free(m->rc);
	void *bufs[] = { m->params, m->grads, m->lp, m->nw1, m->ones, m->emb, m->lnl, m->dres, m->dtmp_h, m->dloc, m->dbig, m->dctx,
			 m->dact, m->inv_freq };
	for (size_t k = 0; !m->dry && k < sizeof bufs / sizeof *bufs; k++) be->ops->free(be, bufs[k]);
	mgt_moe_free(m);
	mgt_cp_free(m);
	mgt_model_fp8_free(m);
	mgt_bert_free(m);
	free(m->kmask_h);
	free(m->by_role);
	free(m->nw_off);
	mgt_tensor_table_free(&m->tt);
	free(m);
}

const mgt_tensor_table *mgt_model_tensors(const mgt_model *m) { return &m->tt; }
float *mgt_model_params(mgt_model *m)
{
	m->lp_stale = true;
	return m->params;
}
float *mgt_model_grads(mgt_model *m) { return m->grads; }
void *mgt_model_hidden_in(mgt_model *m, int slot) { return m->n_layers ? m->sa[slot].la[0].x_in : m->sa[slot].res_out; }
void *mgt_model_hidden_out(mgt_model *m, int slot) { return m->sa[slot].res_out; }
mgt_elem_type mgt_model_hidden_type(const mgt_model *m) { return m->res_t; }
void *mgt_model_hidden_grad(mgt_model *m) { return m->dres; }
size_t mgt_model_hidden_numel(const mgt_model *m) { return (size_t)m->Th * (size_t)m->h; }
bool mgt_model_is_first_stage(const mgt_model *m) { return m->first; }
bool mgt_model_is_last_stage(const mgt_model *m) { return m->last; }

mgt_model_mem mgt_model_memory(const mgt_model *m)
{
	size_t pb = m->tt.buf_numel * sizeof(float);
	return (mgt_model_mem){ .params = pb + mgt_model_lp_bytes(m), .grads = m->infer ? 0 : pb,
				.activations = m->act_bytes,
				.workspace = m->work_bytes };
}

mgt_status mgt_model_init_params(mgt_model *m, uint64_t seed)
{
	size_t bytes = m->tt.buf_numel * sizeof(float);
	float *host = m->be->host_memory ? m->params : mgt_malloc(bytes);
	if (!host) return MGT_ERR_NOMEM;
	memset(host, 0, bytes);
	mgt_tensor_table_init(&m->tt, host, seed);
	m->lp_stale = true;
	if (m->be->host_memory) return MGT_OK;
	mgt_status st = m->be->ops->upload(m->be, m->params, host, bytes);
	free(host);
	return st;
}

void mgt_model_set_dropout_key(mgt_model *m, uint64_t seed, int64_t iteration, int64_t microbatch)
{
	uint32_t w[4];
	mgt_philox(seed ^ 0xD1B54A32D192ED03ull, (uint64_t)iteration, (uint64_t)microbatch, w);
	m->next_key = ((uint64_t)w[1] << 32) | w[0];
}

/* Key of dropout site `site` of layer l (l = -1: embedding). */
uint64_t mgt_gpt_site_key(const mgt_model *m, int l, int site)
{
	return m->drop_key + (uint64_t)(l + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)site * 0xC2B2AE3D27D4EB4Full;
}

/* ---- tensor-parallel communication (megatron/core/tensor_parallel/mappings.py) ---- */

/* In place over TP: n elements of x of type t. */
static mgt_status tp_allreduce_t(mgt_model *m, void *x, size_t n, mgt_elem_type t, mgt_redop op)
{
	mgt_comm *c = m->ps->tp_comm;
	return c->size > 1 ? c->ops->allreduce(c, x, n, t, op) : MGT_OK;
}

static mgt_status tp_allreduce(mgt_model *m, float *x, size_t n, mgt_redop op)
{
	return tp_allreduce_t(m, x, n, MGT_DT_F32, op);
}

/* Sum the partial [T, h] results in `full` (elements of type t; a 16-bit type sums in 16 bits, as
 * Megatron's bf16 all-reduce and reduce-scatter do) over TP: all-reduce in place (*out = full)
 * or, under sequence parallelism, reduce-scatter this rank's rows into dloc (*out = dloc). */
mgt_status mgt_gpt_tp_reduce(mgt_model *m, void *full, mgt_elem_type t, void **out)
{
	size_t n = (size_t)m->Th * (size_t)m->h;
	mgt_comm *c = m->ps->tp_comm;
	*out = m->sp ? m->dloc : full;
	if (!m->sp) return tp_allreduce_t(m, full, n, t, MGT_RED_SUM);
	return c->ops->reduce_scatter(c, m->dloc, full, n, t);
}

/* Under sequence parallelism gather the rows [Th, h] (of type t) of every TP rank into full [T, h]. */
static mgt_status tp_gather(mgt_model *m, void *full, const void *part, mgt_elem_type t)
{
	if (!m->sp) return MGT_OK;
	mgt_comm *c = m->ps->tp_comm;
	return c->ops->allgather(c, full, part, (size_t)m->Th * (size_t)m->h, t);
}

/* The buffer a norm writes its [Th, h] output to before tp_gather into full. */
static void *norm_out(mgt_model *m, void *full) { return m->sp ? (void *)m->lnl : full; }
/* The buffer a [Th, h] gradient goes to before tp_gather into dtmp_h. */
static void *grad_part(mgt_model *m) { return m->sp ? m->dloc : m->dtmp_h; }

/* ---- forward ---- */

static float drop(const mgt_model *m, bool train, double p) { return train ? (float)p : 0.0f; }

/* The pieces of this rank's residual rows [r0, r0 + Th) whose global rows are consecutive: one,
 * or two under context parallelism when the rows straddle the local chunks.  Writes the
 * pieces' first local rows and lengths; returns their number. */
static int row_pieces(const mgt_model *m, int64_t t0[2], int64_t n[2])
{
	int64_t a = m->r0, e = m->r0 + m->Th, cb = (int64_t)m->cp_C * m->b;
	if (m->cp <= 1 || a >= cb || e <= cb) {
		t0[0] = a, n[0] = m->Th;
		return 1;
	}
	t0[0] = a, n[0] = cb - a, t0[1] = cb, n[1] = e - cb;
	return 2;
}

/* bda_fwd on this rank's residual rows (out, resid of mgt_model.res_t; y of type yt), each
 * dropout element indexed by its global row. */
static void bda_fwd_rows(mgt_model *m, void *out, const void *resid, const void *y, mgt_elem_type yt, const float *b,
			 float p, uint64_t key)
{
	int64_t t0[2], n[2], h = m->h;
	const size_t es = mgt_elem_size(m->res_t), ys = mgt_elem_size(yt);
	for (int k = 0, np = row_pieces(m, t0, n); k < np; k++) {
		size_t o = (size_t)((t0[k] - m->r0) * h);
		m->be->ops->bda_fwd(m->be, (char *)out + o * es, resid ? (const char *)resid + o * es : NULL, m->res_t,
				    (const char *)y + o * ys, yt, b, (int)n[k], (int)h, p, key,
				    (uint64_t)(mgt_cp_global_row(m, t0[k]) * h));
	}
}

/* bda_bwd likewise: dy (of type dyt) from the residual's gradient dres. */
static void bda_bwd_rows(mgt_model *m, void *dy, mgt_elem_type dyt, float *db, float p, uint64_t key)
{
	int64_t t0[2], n[2], h = m->h;
	const size_t es = mgt_elem_size(m->res_t), ys = mgt_elem_size(dyt);
	for (int k = 0, np = row_pieces(m, t0, n); k < np; k++) {
		size_t o = (size_t)((t0[k] - m->r0) * h);
		m->be->ops->bda_bwd(m->be, (char *)dy + o * ys, dyt, db, (const char *)m->dres + o * es, m->res_t, (int)n[k],
				    (int)h, p, key, (uint64_t)(mgt_cp_global_row(m, t0[k]) * h));
	}
}

mgt_status mgt_gpt_embed_fwd(mgt_model *m, bool train, void *x0, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	slot_act *sa = m->cur;
	int T = m->T, Th = m->Th, h = (int)m->h;
	void *x;
	o->embedding_fwd(m->be, m->emb, sa->tokens, P(m, we), we->local_offset[0], we->local_shape[0], T, h, false);
	mgt_status st = mgt_gpt_tp_reduce(m, m->emb, MGT_DT_F32, &x);
	if (st) return st;
	if (pe) o->embedding_fwd(m->be, x, sa->pos + m->r0, P(m, pe), 0, pe->shape[0], Th, h, true);
	const mgt_tensor *te = m->glob[MGT_T_TOKTYPE_EMB];
	if (te) o->embedding_fwd(m->be, x, sa->types + m->r0, P(m, te), 0, 2, Th, h, true);
	bda_fwd_rows(m, x0, NULL, x, MGT_DT_F32, NULL, drop(m, train, m->c.hidden_dropout), key);
	return MGT_OK;
}

/* The norm of this rank's residual rows x (of res_t) into full [T, h] of type t (gathered over TP
 * under SP). */
mgt_status mgt_gpt_norm_gather(mgt_model *m, void *full, mgt_elem_type t, float *mean, float *rstd, const void *x,
			      const mgt_tensor *w, const mgt_tensor *b)
{
	void *out = norm_out(m, full);
	m->be->ops->norm_fwd(m->be, m->norm, out, t, mean, rstd, x, m->res_t, NW(m, w), P(m, b), m->Th, (int)m->h,
			     (float)m->c.norm_epsilon);
	return tp_gather(m, full, out, t);
}

/* out = resid + dropout(reduce_TP(dtmp_h) + bias): the row-parallel output (of type yt) and its bda. */
mgt_status mgt_gpt_reduce_bda(mgt_model *m, void *out, const void *resid, const mgt_tensor *bias, bool train,
			     uint64_t key, mgt_elem_type yt)
{
	void *y;
	mgt_status st = mgt_gpt_tp_reduce(m, m->dtmp_h, yt, &y);
	if (st) return st;
	bda_fwd_rows(m, out, resid, y, yt, P(m, bias), drop(m, train, m->c.hidden_dropout), key);
	return MGT_OK;
}

/* Core attention of layer li: ctx and lse from qkv (the part --recompute-granularity selective
 * reruns in the backward; its dropout mask comes from the same key). */
/* The descriptor of layer attention over the whole local sequence (backend.h attn_forward,
 * MGT_ATTN_SELF): causal, or under the micro-batch's key mask (BERT, T5's encoder), with T5's
 * position bias pb and its gradient db when given. */
static mgt_attn self_attn(const mgt_model *m, float p, uint64_t key, const float *pb, float *db)
{
	const int s = m->s;
	return (mgt_attn){ .sq = s, .sk = s, .b = m->b, .ng = (int)m->ng_l, .r = (int)m->r, .d = (int)m->d, .s = s,
			   .ld_lse = s, .p = p, .key = key, .head0 = (int)(m->nq_l * m->ps->tp_rank),
			   .heads_total = (int)m->c.num_attention_heads, .kind = MGT_ATTN_SELF, .t = m->act_t,
			   .gt = m->act_t, .key_mask = m->cur->kmask, .bias = pb, .dbias = db };
}

static mgt_status core_attn_fwd(mgt_model *m, int li, bool train)
{
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer;
	float p = drop(m, train, m->c.attention_dropout);
	if (m->cp > 1) return mgt_cp_attn_fwd(m, a, p, mgt_gpt_site_key(m, l, 1));
	float *db = NULL;
	const float *pb = m->t5 ? mgt_t5_attn_bias(m, &db) : NULL; /* T5's relative position bias */
	const mgt_attn at = self_attn(m, p, mgt_gpt_site_key(m, l, 1), pb, NULL);
	m->be->ops->attn_forward(m->be, &at, a->ctx, a->lse, a->qkv, NULL);
	return MGT_OK;
}

/* Linear j (0 qkv, 1 proj, 2 fc1, 3 fc2) of local layer li: y[T, out] = x[T, in] . w^T (+ b), in
 * fp8 (fp8lin.c) or by the backend's linear_fwd. */
static mgt_status lin_fwd(mgt_model *m, int li, int j, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt,
			  const mgt_tensor *w, const mgt_tensor *b, int in, int out)
{
	if (mgt_model_fp8_layer(m, li)) return mgt_model_fp8_fwd(m, li, j, y, yt, x, xt, W(m, w), WT(m), P(m, b));
	m->be->ops->linear_fwd(m->be, y, yt, x, xt, W(m, w), WT(m), P(m, b), m->T, in, out);
	return MGT_OK;
}

/* Its backward: dx (type dxt) written, the gradients of w and b accumulated. */
static mgt_status lin_bwd(mgt_model *m, int li, int j, void *dx, mgt_elem_type dxt, const mgt_tensor *w,
			  const mgt_tensor *b, const void *dy, mgt_elem_type dyt, const void *x, mgt_elem_type xt, int in,
			  int out)
{
	if (mgt_model_fp8_layer(m, li)) return mgt_model_fp8_bwd(m, li, j, dx, dxt, G(m, w), G(m, b), dy, dyt);
	m->be->ops->linear_bwd(m->be, dx, dxt, G(m, w), G(m, b), dy, dyt, x, xt, W(m, w), WT(m), m->T, in, out);
	return MGT_OK;
}

/* Where a norm feeding linear_qkv or linear_fc1 writes, and in what type: the layer's 16-bit
 * buffer, or under fp8 the fp32 scratch the cast reads (TE quantizes the fp32 norm output). */
static void *norm_dst(mgt_model *m, int li, void *buf, mgt_elem_type *t)
{
	bool f8 = mgt_model_fp8_layer(m, li);
	*t = f8 ? MGT_DT_F32 : m->act_t;
	return f8 ? mgt_model_fp8_norm_out(m) : buf;
}

mgt_status mgt_gpt_attn_fwd(mgt_model *m, int li, bool train, void *out)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	layer_act *a = &sa->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	mgt_elem_type lt;
	void *ln = norm_dst(m, li, a->ln1, &lt);
	mgt_status st = mgt_gpt_norm_gather(m, ln, lt, a->mean1, a->rstd1, a->x_in, T_(m, l, MGT_T_LN1_W), T_(m, l, MGT_T_LN1_B));
	if (!st)
		st = lin_fwd(m, li, 0, m->qkln ? a->qkv_pre : a->qkv, m->qkln ? MGT_DT_F32 : m->act_t, ln, lt,
			     T_(m, l, MGT_T_QKV_W), T_(m, l, MGT_T_QKV_B), h, (int)m->qkv_l);
	if (st) return st;
	int ng = (int)m->ng_l, r = (int)m->r, d = (int)m->d;
	if (m->qkln) { /* q_layernorm / k_layernorm on the heads; values copied through */
		float eps = (float)m->c.norm_epsilon;
		const size_t n = (size_t)T * (size_t)m->qkv_l;
		if (m->act_t == MGT_DT_F32) o->copy(m->be, a->qkv, a->qkv_pre, n * sizeof(float));
		else o->cast(m->be, a->qkv, m->act_t, a->qkv_pre, n); /* the value heads as linear_qkv's rounded output */
		o->head_norm_fwd(m->be, m->norm, a->qkv, m->act_t, a->qmean, a->qrstd, a->qkv_pre, NW(m, T_(m, l, MGT_T_QNORM_W)),
				 P(m, T_(m, l, MGT_T_QNORM_B)), T, ng, r, d, false, eps);
		o->head_norm_fwd(m->be, m->norm, a->qkv, m->act_t, a->kmean, a->krstd, a->qkv_pre, NW(m, T_(m, l, MGT_T_KNORM_W)),
				 P(m, T_(m, l, MGT_T_KNORM_B)), T, ng, r, d, true, eps);
	}
	if (m->rope) o->rope(m->be, a->qkv, m->act_t, sa->pos, m->inv_freq, T, ng, r, d, m->rot_dim, false);
	st = core_attn_fwd(m, li, train);
	if (!st)
		st = lin_fwd(m, li, 1, m->dtmp_h, m->act_t, a->ctx, m->act_t, T_(m, l, MGT_T_PROJ_W), NULL,
			     (int)(m->nq_l * m->d), h);
	if (st) return st;
	return mgt_gpt_reduce_bda(m, out, a->x_in, T_(m, l, MGT_T_PROJ_B), train, mgt_gpt_site_key(m, l, 2), m->act_t);
}

mgt_status mgt_gpt_mlp_fwd(mgt_model *m, int li, bool train, void *out)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	mgt_elem_type lt;
	void *ln = norm_dst(m, li, a->ln2, &lt);
	mgt_status st = mgt_gpt_norm_gather(m, ln, lt, a->mean2, a->rstd2, a->x_mid, T_(m, l, MGT_T_LN2_W), T_(m, l, MGT_T_LN2_B));
	if (st) return st;
	if (mgt_moe_layer(m, li)) {
		if ((st = mgt_moe_forward(m, li, train, a->ln2, m->dtmp_h)) || !out) return st;
		return mgt_gpt_reduce_bda(m, out, a->x_mid, NULL, train, mgt_gpt_site_key(m, l, 3), m->act_t);
	}
	if ((st = lin_fwd(m, li, 2, a->fc1, m->fc1_t, ln, lt, T_(m, l, MGT_T_FC1_W), NULL, h, (int)m->fc1_l))) return st;
	/* an fp8 layer keeps fc2's input as its cast bytes only: the activation goes through dact's
	 * scratch (free in the forward) */
	void *act = mgt_model_fp8_layer(m, li) ? (void *)m->dact : (void *)a->act;
	o->bias_act_fwd(m->be, m->act, act, m->act_t, a->fc1, m->fc1_t, P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	if (!out) return MGT_OK; /* recomputation: the backward reads nothing past the activation */
	if ((st = lin_fwd(m, li, 3, m->dtmp_h, m->act_t, act, m->act_t, T_(m, l, MGT_T_FC2_W), NULL, (int)m->ffn_l, h)))
		return st;
	return mgt_gpt_reduce_bda(m, out, a->x_mid, T_(m, l, MGT_T_FC2_B), train, mgt_gpt_site_key(m, l, 3), m->act_t);
}

const mgt_tensor *mgt_model_output_weight(const mgt_model *m)
{
	return m->glob[MGT_T_OUTPUT_W] ? m->glob[MGT_T_OUTPUT_W] : m->glob[MGT_T_WORD_EMB];
}

mgt_status mgt_model_tp_allreduce(mgt_model *m, void *x, size_t n, mgt_elem_type t)
{
	return tp_allreduce_t(m, x, n, t, MGT_RED_SUM);
}

mgt_status mgt_model_xent(mgt_model *m, double *sum)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	int T = m->T, V = (int)m->V_l;
	mgt_status st;
	o->xent_max(m->be, sa->mx, sa->logits, m->act_t, T, V);
	if ((st = tp_allreduce(m, sa->mx, (size_t)T, MGT_RED_MAX))) return st;
	o->xent_stats(m->be, sa->sumexp, sa->tgt, sa->logits, m->act_t, sa->labels, sa->mx, m->v0, T, V);
	if ((st = tp_allreduce(m, sa->sumexp, (size_t)T, MGT_RED_SUM))) return st;
	if ((st = tp_allreduce(m, sa->tgt, (size_t)T, MGT_RED_SUM))) return st;
	*sum = o->xent_loss(m->be, sa->loss, sa->mx, sa->sumexp, sa->tgt, sa->mask, T);
	return MGT_OK;
}

mgt_status mgt_gpt_head_fwd(mgt_model *m, bool train, double *loss_sum)
{
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	mgt_status st = mgt_gpt_norm_gather(m, sa->lnf, m->act_t, sa->meanf, sa->rstdf, sa->res_out, m->glob[MGT_T_FINAL_LN_W],
				    m->glob[MGT_T_FINAL_LN_B]);
	if (st) return st;
	if (m->bert) return mgt_bert_head_fwd(m, sa->lnf, train, loss_sum);
	m->be->ops->linear_fwd(m->be, sa->logits, m->act_t, sa->lnf, m->act_t, W(m, mgt_model_output_weight(m)), WT(m),
			       P(m, m->glob[MGT_T_OUTPUT_B]), T, h, V); /* T5's vocabulary bias (NULL for GPT) */
	return mgt_model_xent(m, loss_sum);
}

/* ---- backward ---- */

/* dres += d(norm input) from the [T, h] partial gradient in dtmp_h (of type act_t) of a norm's
 * output (plus, when extra is not NULL, this rank's [Th, h] rows of a gradient of the same type
 * computed on them alone: the MoE router's, added after the reduction, rounded as Megatron's
 * bf16 autograd sums the two). */
static mgt_status reduce_norm_bwd_plus(mgt_model *m, const void *x, const mgt_tensor *w, const mgt_tensor *b,
				       const float *mean, const float *rstd, const void *extra)
{
	return mgt_gpt_reduce_norm_bwd_src(m, m->dtmp_h, x, w, b, mean, rstd, extra);
}

mgt_status mgt_gpt_reduce_norm_bwd_src(mgt_model *m, void *src, const void *x, const mgt_tensor *w, const mgt_tensor *b,
				       const float *mean, const float *rstd, const void *extra)
{
	void *dy;
	mgt_status st = mgt_gpt_tp_reduce(m, src, m->act_t, &dy);
	if (st) return st;
	if (extra) m->be->ops->add(m->be, dy, extra, m->act_t, (size_t)m->Th * (size_t)m->h);
	m->be->ops->norm_bwd(m->be, m->norm, m->dres, G(m, w), G(m, b), dy, m->act_t, x, m->res_t, NW(m, w), mean, rstd,
			     m->Th, (int)m->h);
	return MGT_OK;
}

/* The same without an extra gradient. */
static mgt_status reduce_norm_bwd(mgt_model *m, const void *x, const mgt_tensor *w, const mgt_tensor *b,
				  const float *mean, const float *rstd)
{
	return reduce_norm_bwd_plus(m, x, w, b, mean, rstd, NULL);
}

/* dtmp_h [T, h] (of type t) = the gradient of a row-parallel output (before its bda), gathered
 * under SP. */
mgt_status mgt_gpt_bda_bwd_gather(mgt_model *m, const mgt_tensor *bias, bool train, uint64_t key, mgt_elem_type t)
{
	void *part = grad_part(m);
	bda_bwd_rows(m, part, t, G(m, bias), drop(m, train, m->c.hidden_dropout), key);
	return tp_gather(m, m->dtmp_h, part, t);
}

/* BERT: the gradient of the final norm's output is whole on every TP rank (bert.c): this rank's
 * rows of it go through the norm's backward without a reduction. */
static mgt_status bert_head_bwd(mgt_model *m, float scale)
{
	slot_act *sa = m->cur;
	mgt_status st = mgt_bert_head_bwd(m, sa->lnf, m->dtmp_h, scale);
	if (st) return st;
	size_t rows = (size_t)m->Th * (size_t)m->h;
	const char *dy = (const char *)m->dtmp_h + (size_t)m->r0 * (size_t)m->h * mgt_elem_size(m->act_t);
	m->be->ops->zero(m->be, m->dres, rows * mgt_elem_size(m->res_t));
	m->be->ops->norm_bwd(m->be, m->norm, m->dres, G(m, m->glob[MGT_T_FINAL_LN_W]), G(m, m->glob[MGT_T_FINAL_LN_B]), dy,
			     m->act_t, sa->res_out, m->res_t, NW(m, m->glob[MGT_T_FINAL_LN_W]), sa->meanf, sa->rstdf, m->Th,
			     (int)m->h);
	return MGT_OK;
}

mgt_status mgt_gpt_head_bwd(mgt_model *m, float scale)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	const mgt_tensor *w = mgt_model_output_weight(m);
	if (m->bert) return bert_head_bwd(m, scale);
	o->xent_bwd(m->be, sa->logits, sa->logits, m->act_t, sa->labels, sa->mx, sa->sumexp, sa->mask, scale, m->v0, T, V);
	o->linear_bwd(m->be, m->dtmp_h, m->act_t, G(m, w), G(m, m->glob[MGT_T_OUTPUT_B]), sa->logits, m->act_t, sa->lnf,
		      m->act_t, W(m, w), WT(m), T, h, V);
	o->zero(m->be, m->dres, (size_t)m->Th * (size_t)h * mgt_elem_size(m->res_t));
	return reduce_norm_bwd(m, sa->res_out, m->glob[MGT_T_FINAL_LN_W], m->glob[MGT_T_FINAL_LN_B], sa->meanf, sa->rstdf);
}

mgt_status mgt_gpt_mlp_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	const bool moe = mgt_moe_layer(m, li);
	mgt_status st = mgt_gpt_bda_bwd_gather(m, T_(m, l, MGT_T_FC2_B), train, mgt_gpt_site_key(m, l, 3), m->act_t);
	if (st) return st;
	if (moe) {
		void *dxl;
		if ((st = mgt_moe_backward(m, li, train, a->ln2, m->dtmp_h, &dxl))) return st;
		return reduce_norm_bwd_plus(m, a->x_mid, T_(m, l, MGT_T_LN2_W), T_(m, l, MGT_T_LN2_B), a->mean2, a->rstd2,
					    dxl);
	}
	st = lin_bwd(m, li, 3, m->dact, m->act_t, T_(m, l, MGT_T_FC2_W), NULL, m->dtmp_h, m->act_t, a->act, m->act_t,
		     (int)m->ffn_l, h);
	if (st) return st;
	o->bias_act_bwd(m->be, m->act, m->dbig, G(m, T_(m, l, MGT_T_FC1_B)), m->dact, m->act_t, a->fc1, m->fc1_t,
			P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	st = lin_bwd(m, li, 2, m->dtmp_h, m->act_t, T_(m, l, MGT_T_FC1_W), NULL, m->dbig, m->act_t, a->ln2, m->act_t, h,
		     (int)m->fc1_l);
	if (st) return st;
	return reduce_norm_bwd(m, a->x_mid, T_(m, l, MGT_T_LN2_W), T_(m, l, MGT_T_LN2_B), a->mean2, a->rstd2);
}

mgt_status mgt_gpt_attn_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	layer_act *a = &sa->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h, nd = (int)(m->nq_l * m->d);
	mgt_status st = mgt_gpt_bda_bwd_gather(m, T_(m, l, MGT_T_PROJ_B), train, mgt_gpt_site_key(m, l, 2), m->act_t);
	if (st) return st;
	if ((st = lin_bwd(m, li, 1, m->dctx, m->act_t, T_(m, l, MGT_T_PROJ_W), NULL, m->dtmp_h, m->act_t, a->ctx, m->act_t,
			  nd, h)))
		return st;
	float p = drop(m, train, m->c.attention_dropout);
	float *db = NULL;
	const float *pb = m->t5 ? mgt_t5_attn_bias(m, &db) : NULL; /* T5's relative position bias */
	if (m->cp > 1) st = mgt_cp_attn_bwd(m, a, m->dbig, m->dctx, m->act_t, p, mgt_gpt_site_key(m, l, 1));
	else {
		const mgt_attn at = self_attn(m, p, mgt_gpt_site_key(m, l, 1), pb, db);
		o->attn_backward(m->be, &at, m->dbig, NULL, m->dctx, a->qkv, NULL, a->ctx, a->lse);
	}
	if (st) return st;
	int ng = (int)m->ng_l, r = (int)m->r, d = (int)m->d;
	if (m->rope) o->rope(m->be, m->dbig, m->act_t, sa->pos, m->inv_freq, T, ng, r, d, m->rot_dim, true);
	if (m->qkln) { /* in place: the head rows of dbig become d(linear_qkv output) */
		o->head_norm_bwd(m->be, m->norm, m->dbig, G(m, T_(m, l, MGT_T_QNORM_W)), G(m, T_(m, l, MGT_T_QNORM_B)),
				 m->dbig, m->act_t, a->qkv_pre, NW(m, T_(m, l, MGT_T_QNORM_W)), a->qmean, a->qrstd, T, ng, r, d, false);
		o->head_norm_bwd(m->be, m->norm, m->dbig, G(m, T_(m, l, MGT_T_KNORM_W)), G(m, T_(m, l, MGT_T_KNORM_B)),
				 m->dbig, m->act_t, a->qkv_pre, NW(m, T_(m, l, MGT_T_KNORM_W)), a->kmean, a->krstd, T, ng, r, d, true);
	}
	st = lin_bwd(m, li, 0, m->dtmp_h, m->act_t, T_(m, l, MGT_T_QKV_W), T_(m, l, MGT_T_QKV_B), m->dbig, m->act_t, a->ln1,
		     m->act_t, h, (int)m->qkv_l);
	if (st) return st;
	return reduce_norm_bwd(m, a->x_in, T_(m, l, MGT_T_LN1_W), T_(m, l, MGT_T_LN1_B), a->mean1, a->rstd1);
}

mgt_status mgt_gpt_embed_bwd(mgt_model *m, bool train, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h;
	void *part = grad_part(m);
	bda_bwd_rows(m, part, m->act_t, NULL, drop(m, train, m->c.hidden_dropout), key);
	if (pe) o->embedding_bwd(m->be, G(m, pe), part, m->act_t, sa->pos + m->r0, 0, pe->shape[0], m->Th, h);
	const mgt_tensor *te = m->glob[MGT_T_TOKTYPE_EMB];
	if (te) o->embedding_bwd(m->be, G(m, te), part, m->act_t, sa->types + m->r0, 0, 2, m->Th, h);
	mgt_status st = tp_gather(m, m->dtmp_h, part, m->act_t);
	if (!st)
		o->embedding_bwd(m->be, G(m, we), m->dtmp_h, m->act_t, sa->tokens, we->local_offset[0], we->local_shape[0],
				 T, h);
	return st;
}

/* BERT's key mask from the padding mask (attended where >= 0.5, as Megatron's mask < 0.5). */
static mgt_status upload_kmask(mgt_model *m, const int64_t *padding_mask)
{
	for (int t = 0; t < m->T; t++) m->kmask_h[t] = padding_mask[t] >= 1;
	return m->be->ops->upload(m->be, m->cur->kmask, m->kmask_h, (size_t)m->T);
}

static mgt_status upload_batch(mgt_model *m, const mgt_microbatch *mb)
{
	if (m->t5) return mgt_t5_upload(m, mb);
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	size_t n = (size_t)m->T * 4;
	mgt_status st = o->upload(m->be, sa->tokens, mb->tokens, n);
	if (!st) st = o->upload(m->be, sa->labels, mb->labels, n);
	if (!st) st = o->upload(m->be, sa->pos, mb->position_ids, n);
	if (!st) st = o->upload(m->be, sa->mask, mb->loss_mask, n);
	for (int t = 0; !st && sa->types && t < m->T; t++)
		if (mb->tokentype_ids[t] < 0 || mb->tokentype_ids[t] > 1)
			st = mgt_err(MGT_ERR_INPUT, "token %d of the micro-batch has token type %d: BERT's token-type "
				     "embedding has types 0 and 1", t, (int)mb->tokentype_ids[t]);
	if (!st && sa->types) st = o->upload(m->be, sa->types, mb->tokentype_ids, n);
	if (!st && sa->kmask) st = upload_kmask(m, mb->padding_mask);
	if (!st && m->bert) mgt_bert_set_batch(m, mb);
	return st;
}

static mgt_status use_slot(mgt_model *m, int slot)
{
	if (m->infer) return mgt_err(MGT_ERR_USAGE, "an inference model (mgt_model_create_infer) has no training forward");
	if (slot < 0 || slot >= m->L.slots)
		return mgt_err(MGT_ERR_USAGE, "activation slot %d out of range [0, %d)", slot, m->L.slots);
	m->cur = &m->sa[slot];
	return MGT_OK;
}

mgt_status mgt_model_forward(mgt_model *m, int slot, const mgt_microbatch *mb, bool train, double *loss_sum)
{
	double t0 = mgt_now();
	*loss_sum = 0;
	mgt_status st = use_slot(m, slot);
	if (!st) st = upload_batch(m, mb);
	if (st) return st;
	mgt_model_lp_refresh(m);
	m->drop_key = m->cur->drop_key = m->next_key;
	if (m->t5) st = mgt_t5_forward(m, train); /* the encoder, then the decoder's layers */
	else if (m->first)
		st = mgt_gpt_embed_fwd(m, train, m->n_layers ? (void *)m->cur->la[0].x_in : (void *)m->cur->res_out,
				       mgt_gpt_site_key(m, -1, 0));
	for (int li = 0; !st && !m->t5 && li < m->n_layers; li++) {
		void *out = li + 1 < m->n_layers ? (void *)m->cur->la[li + 1].x_in : (void *)m->cur->res_out;
		st = mgt_gpt_attn_fwd(m, li, train, m->cur->la[li].x_mid);
		if (!st) st = mgt_gpt_mlp_fwd(m, li, train, out);
	}
	if (!st && train) st = mgt_model_fp8_update(m, false); /* TE: at the exit of the block's fp8 autocast */
	if (!st && m->last) st = mgt_gpt_head_fwd(m, train, loss_sum);
	m->be->ops->sync(m->be);
	m->t_fwd += mgt_now() - t0;
	return st;
}

/* Rerun the forward of layers [g0, g1) from the input the slot kept, into the recomputation
 * scratch, with the slot's dropout key: the same values bit for bit.  The last layer stops at
 * its MLP activation (its output is not needed by the backward). */
static mgt_status recompute_group(mgt_model *m, int g0, int g1, bool train)
{
	mgt_status st = MGT_OK;
	for (int li = g0; !st && li < g1; li++) {
		st = mgt_gpt_attn_fwd(m, li, train, m->cur->la[li].x_mid);
		if (!st) st = mgt_gpt_mlp_fwd(m, li, train, li + 1 < g1 ? m->cur->la[li + 1].x_in : NULL);
	}
	return st;
}

static mgt_status layers_bwd(mgt_model *m, bool train, float grad_scale);

mgt_status mgt_model_backward(mgt_model *m, int slot, bool train, float grad_scale)
{
	double t0 = mgt_now();
	mgt_status st = use_slot(m, slot);
	if (st) return st;
	m->drop_key = m->cur->drop_key;
	if (m->t5) st = mgt_t5_backward(m, train, grad_scale); /* gradients complete at the hook's INT_MIN only */
	else st = layers_bwd(m, train, grad_scale);
	if (!st && m->hook) st = m->hook(m->hook_ctx, m, INT_MIN);
	m->be->ops->sync(m->be);
	m->t_bwd += mgt_now() - t0;
	return st;
}

/* The backward of a GPT or BERT chunk: the head (last stage), the layers, the embedding (first stage). */
static mgt_status layers_bwd(mgt_model *m, bool train, float grad_scale)
{
	mgt_status st = MGT_OK;
	if (m->last) st = mgt_gpt_head_bwd(m, grad_scale);
	if (!st && m->last && m->hook) st = m->hook(m->hook_ctx, m, INT_MAX);
	bool selective = m->L.recompute.granularity == MGT_RECOMPUTE_SELECTIVE;
	for (int li = m->n_layers - 1; !st && li >= 0; li--) {
		int g0, g1;
		if (rc_full(m, li) && (rc_group(m, li, &g0, &g1), li == g1 - 1)) st = recompute_group(m, g0, g1, train);
		if (!st) st = mgt_gpt_mlp_bwd(m, li, train);
		if (!st && selective) st = core_attn_fwd(m, li, train);
		if (!st) st = mgt_gpt_attn_bwd(m, li, train);
		if (!st && m->hook) st = m->hook(m->hook_ctx, m, m->first_layer + li);
	}
	if (!st && train) st = mgt_model_fp8_update(m, true); /* TE: after the first fp8 module's backward */
	if (!st && m->first) st = mgt_gpt_embed_bwd(m, train, mgt_gpt_site_key(m, -1, 0));
	return st;
}

void mgt_model_set_grad_hook(mgt_model *m, mgt_grad_hook hook, void *ctx)
{
	m->hook = hook;
	m->hook_ctx = ctx;
}

mgt_status mgt_model_finish_grads(mgt_model *m)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		/* the head norms, and T5's relative position tables (each TP rank's columns: its heads) */
		bool qk = t->role == MGT_T_QNORM_W || t->role == MGT_T_QNORM_B || t->role == MGT_T_KNORM_W ||
			  t->role == MGT_T_KNORM_B || t->role == MGT_T_REL_ENC || t->role == MGT_T_REL_DEC;
		if (t->shard == MGT_SHARD_NONE && (m->sp || qk) && !mgt_bert_whole_grad(t->role))
			st = tp_allreduce(m, G(m, t), t->numel, MGT_RED_SUM);
	}
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB];
	mgt_comm *e = m->ps->emb_comm;
	bool tied = we && !m->c.untie_embeddings_and_output_weights && m->ps->pp > 1 && (m->first || m->last);
	if (!st && tied && e->size > 1) st = e->ops->allreduce(e, G(m, we), we->numel, MGT_DT_F32, MGT_RED_SUM);
	return st;
}

void mgt_model_take_times(mgt_model *m, double *fwd_s, double *bwd_s)
{
	*fwd_s = m->t_fwd;
	*bwd_s = m->t_bwd;
	m->t_fwd = m->t_bwd = 0;
}

/* The current slot's logits as fp32 (16-bit ones widened exactly, in place from the back: the
 * 2-byte elements fill the first half of out and element i moves only to a later place). */
static mgt_status download_logits(mgt_model *m, float *out)
{
	const size_t n = (size_t)m->T * (size_t)m->V_l;
	mgt_status st = m->be->ops->download(m->be, out, m->cur->logits, n * mgt_elem_size(m->act_t));
	if (st || m->act_t == MGT_DT_F32) return st;
	const uint16_t *h = (const uint16_t *)out;
	for (size_t i = n; i-- > 0;) {
		uint16_t v = h[i];
		out[i] = m->act_t == MGT_DT_BF16 ? mgt_bf16_to_f32(v) : mgt_f16_to_f32(v);
	}
	return MGT_OK;
}

mgt_status mgt_model_outputs(mgt_model *m, int slot, float *logits_out, float *loss_out)
{
	const mgt_backend_ops *o = m->be->ops;
	mgt_status st = use_slot(m, slot);
	if (!st && !m->last) st = mgt_err(MGT_ERR_USAGE, "model outputs exist on the last pipeline stage only");
	if (!st && logits_out) st = download_logits(m, logits_out);
	if (!st && loss_out) st = o->download(m->be, loss_out, m->cur->loss, (size_t)m->T * sizeof(float));
	return st;
}

mgt_status mgt_model_step(mgt_model *m, const mgt_microbatch *mb, bool train, float grad_scale,
			  double *loss_sum, float *logits_out, float *loss_out)
{
	if (!m->first || !m->last) return mgt_err(MGT_ERR_USAGE, "mgt_model_step needs the whole model in one stage");
	mgt_status st = mgt_model_forward(m, 0, mb, train, loss_sum);
	if (!st && (logits_out || loss_out)) st = mgt_model_outputs(m, 0, logits_out, loss_out);
	if (st || grad_scale == 0.0f) return st;
	return mgt_model_backward(m, 0, train, grad_scale);
}
