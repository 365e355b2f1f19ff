/* lib/model/chunk.c: a model chunk's life: dimensions, layout checks, the tensor table, the
 * parameter buffers and the activations sized in the dry pass (mgt_model_measure) and allocated
 * (mgt_model_create), the accessors and mgt_model_free.
 *
 * Activations are sequence-first [T, .] with T = s*b.  Per layer the forward keeps what the
 * backward needs: the layer input (residual stream), both norm outputs and statistics, the fused
 * QKV after RoPE, the attention output and its log-sum-exp, the residual after attention, fc1
 * output and the activation.  Dropout masks are recomputed from Philox keys, never stored.
 * Activation recomputation (mgt_model_layout.recompute, model.h) keeps less and reruns part of
 * the forward in the backward (stack.c); the aliases into its scratch are set up once, here, so
 * the layer forward and backward functions (layer_attn.c, layer_mlp.c) do not depend on it.
 */
#include "model_impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation ---- */

#define AF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.act_bytes, &st)
/* n elements of type t */
#define AT(n, t) (float *)mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(t), &m->mem.act_bytes, &st)
#define WF(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.work_bytes, &st)
#define WK(n, t) (float *)mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(t), &m->mem.work_bytes, &st)

/* Elements of layer buffer k (LA_*) of local layer li (-1: the recomputation scratch's, a dense
 * layer's, or in a hybrid model the most any of the chunk's layers needs), 0 for one the model
 * does not have: the residual stream's here (x_mid only between two symbols of a layer), the
 * rest by the layer kinds that use them. */
static size_t la_numel(const mgt_model *m, int li, int k)
{
	if (li < 0 && m->c.hybrid_layer_pattern[0]) {
		size_t most = 0;
		for (int j = 0; j < m->n_layers; j++) {
			size_t n = la_numel(m, j, k);
			most = n > most ? n : most;
		}
		return most;
	}
	int nk = li < 0 ? 2 : m->k0[li + 1] - m->k0[li];
	if (k == LA_X_IN || (k == LA_X_MID && nk > 1)) return (size_t)m->Th * (size_t)m->h;
	if (li < 0) return mgt_layer_attn_numel(m, li, k) + mgt_layer_mlp_numel(m, li, k);
	size_t n = 0;
	for (int j = m->k0[li]; j < m->k0[li + 1]; j++) n += mgt_layer_kind_of(m->pattern[j])->numel(m, li, k);
	return n;
}

/* The element type of layer buffer k (mgt_model.prec.act_t, fc1_t, res_t). */
static mgt_elem_type la_type(const mgt_model *m, int k)
{
	switch (k) {
	case LA_LN1: case LA_LN2: case LA_ACT: case LA_QKV: case LA_CTX: return m->prec.act_t;
	case LA_FC1: return m->prec.fc1_t;
	case LA_X_IN: case LA_X_MID: return m->prec.res_t;
	case LA_M_ZX: case LA_M_CONV: case LA_M_Y: case LA_M_NORM: case LA_M_ZXG: return mgt_layer_mamba_t(m);
	default: return MGT_DT_F32;
	}
}

#define LA_BIT(k) (1u << (k))
#define LA_ALL ((1u << LA_N) - 1)

/* ---- activation recomputation (Korthikanti et al. 2022; megatron/core/recompute.py) ----
 * FULL: a recomputed layer keeps only the input of its group (the slot's x_in of the group's
 * first layer); everything else it needs lives in the scratch m->rc.layers and is recomputed by
 * rerunning the group's forward before its backward.  Groups: uniform, layers [g, g + n) for g a
 * multiple of n = recompute num_layers (the last group shorter); block, each of the chunk's first
 * n layers alone; the other layers of the chunk keep everything.  SELECTIVE: every layer keeps
 * everything but core attention's outputs (ctx, lse), which are recomputed from the kept qkv. */

bool mgt_model_rc_full(const mgt_model *m, int li)
{
	const mgt_recompute *r = &m->L.recompute;
	return r->granularity == MGT_RECOMPUTE_FULL && (r->method == MGT_RECOMPUTE_UNIFORM || li < r->num_layers);
}

/* The recompute group [*g0, *g1) of a layer with mgt_model_rc_full. */
void mgt_model_rc_group(const mgt_model *m, int li, int *g0, int *g1)
{
	int n = m->L.recompute.num_layers;
	if (m->L.recompute.method == MGT_RECOMPUTE_BLOCK) n = 1;
	*g0 = li - li % n;
	*g1 = *g0 + n < m->n_layers ? *g0 + n : m->n_layers;
}

/* Buffers that layer li of a slot allocates for itself (the rest alias m->rc.layers). */
static unsigned la_own(const mgt_model *m, int li)
{
	if (mgt_model_rc_full(m, li)) {
		int g0, g1;
		mgt_model_rc_group(m, li, &g0, &g1);
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
	if (!(m->rc.layers = mgt_malloc((size_t)n * sizeof *m->rc.layers))) return MGT_ERR_NOMEM;
	memset(m->rc.layers, 0, (size_t)n * sizeof *m->rc.layers);
	m->rc.n = n;
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < n; k++)
		st = alloc_layer(m, -1, &m->rc.layers[k], r->granularity == MGT_RECOMPUTE_SELECTIVE ? LA_BIT(LA_CTX) | LA_BIT(LA_LSE) :
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
		mgt_t5_dims(m, l < m->n_layers / 2 ? T5_ENC : T5_DEC); /* T5: the layer's stack */
		st = alloc_layer(m, l, a, own);
		if (own != LA_ALL) {
			int g0 = l, g1;
			if (mgt_model_rc_full(m, l)) mgt_model_rc_group(m, l, &g0, &g1);
			const layer_act *s = &m->rc.layers[l - g0];
			for (int k = 0; k < LA_N; k++)
				if (!(own & LA_BIT(k))) *la_buf(a, k) = *la_buf((layer_act *)s, k);
		}
		if (m->k0[l + 1] - m->k0[l] == 1) a->x_mid = a->x_in; /* one symbol: its kind reads x_mid as x_in */
	}
	mgt_t5_dims(m, T5_DEC); /* T5: the head's and the labels' */
	T = (size_t)m->T, Th = (size_t)m->Th;
	sa->res_out = AT(Th * h, m->prec.res_t);
	if (m->last) {
		sa->lnf = AT(T * h, m->prec.act_t); sa->meanf = AF(Th); sa->rstdf = AF(Th);
		sa->logits = AT(T * (size_t)m->V_l, m->prec.act_t);
		sa->mx = AF(T); sa->sumexp = AF(T); sa->tgt = AF(T); sa->loss = AF(T);
	}
	sa->mask = AF(T);
	sa->labels = (int32_t *)AF(T);
	if (m->fam->recipe != MGT_STACK_ENCODER_DECODER) /* T5: the stacks' own (t5.c) */
		sa->tokens = (int32_t *)AF(T), sa->pos = (int32_t *)AF(T);
	if (m->L.packed_sequences) sa->seg = (int32_t *)AF(T * (size_t)m->cp.size);
	if (m->L.packed_sequences && m->cp.size > 1 && !m->mem.dry && !(sa->cp_rows = mgt_malloc(T * (size_t)m->cp.size * 4)))
		st = MGT_ERR_NOMEM;
	if (m->fam->recipe == MGT_STACK_ENCODER) { /* BERT: the padding mask's keys */
		sa->kmask = (uint8_t *)mgt_model_balloc(m, T, &m->mem.act_bytes, &st);
		if (m->c.bert_binary_head) sa->types = (int32_t *)AF(T);
	}
	return st;
}

static mgt_status alloc_activations(mgt_model *m)
{
	mgt_status st = alloc_recompute(m);
	if (st) return st;
	mgt_t5_dims(m, T5_MAX); /* T5: the shared scratch serves both stacks */
	size_t T = (size_t)m->T, Th = (size_t)m->Th, h = (size_t)m->h;
	if (!(m->sa = mgt_malloc((size_t)m->L.slots * sizeof *m->sa))) return MGT_ERR_NOMEM;
	memset(m->sa, 0, (size_t)m->L.slots * sizeof *m->sa);
	for (int k = 0; !st && k < m->L.slots; k++) st = alloc_slot(m, &m->sa[k]);
	m->cur = &m->sa[0];
	if (m->first) m->scratch.emb = AF(T * h);
	if (m->sp) { m->scratch.lnl = AF(Th * h); m->scratch.dloc = WF(Th * h); }
	size_t big = (size_t)(m->qkv_l > m->fc1_l ? m->qkv_l : m->fc1_l);
	/* the gradient scratch in the gradients' types (dloc above stays fp32: it also takes the
	 * embedding's fp32 output under SP) */
	m->scratch.dres = WK(Th * h, m->prec.res_t); m->scratch.dtmp_h = WK(T * h, m->prec.act_t); m->scratch.dbig = WK(T * big, m->prec.act_t);
	m->scratch.dctx = WK(T * (size_t)(m->nq_l * m->d), m->prec.act_t); m->scratch.dact = WK(T * (size_t)m->ffn_l, m->prec.act_t);
	if (m->rope && m->n_layers) m->inv_freq = WF(m->rot_dim / 2);
	if (!st) st = mgt_cp_alloc(m);
	if (!st) st = mgt_model_fp8_alloc(m);
	if (!st) st = mgt_bert_alloc(m);
	if (!st && m->fam->recipe == MGT_STACK_ENCODER && !m->mem.dry && !(m->kmask_h = mgt_malloc((size_t)m->T)))
		st = MGT_ERR_NOMEM;
	if (!st) st = mgt_t5_alloc(m);
	mgt_t5_dims(m, T5_DEC);
	if (!st) st = mgt_layer_mamba_alloc(m);
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
	if (!(m->pattern = mgt_malloc(2 * (size_t)m->n_layers + 1)) || !(m->k0 = mgt_malloc(((size_t)m->n_layers + 1) * sizeof *m->k0)))
		return MGT_ERR_NOMEM;
	m->k0[0] = 0;
	for (int li = 0; li < m->n_layers; li++) { /* the table's rule */
		const char *k = mgt_layer_symbols(&m->c, m->first_layer + li);
		m->k0[li + 1] = m->k0[li] + (int)strlen(k);
		memcpy(m->pattern + m->k0[li], k, strlen(k));
	}
	m->pattern[m->k0[m->n_layers]] = '\0';
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
	m->cp.size = m->ps->cp > 1 ? m->ps->cp : 1;
	m->cp.rank = m->cp.size > 1 ? m->ps->cp_rank : 0;
	m->s = (int)(c->seq_length / m->cp.size);
	m->cp.C = m->s / 2;
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
	bool tanh = c->openai_gelu || (m->fam->bias_gelu_tanh && c->add_bias_linear && !c->no_bias_gelu_fusion);
	m->act = c->swiglu ? MGT_ACT_SWIGLU : c->squared_relu ? MGT_ACT_SQUARED_RELU : tanh ? MGT_ACT_GELU_TANH : MGT_ACT_GELU;
	mgt_layer_mamba_dims(m);
}

/* What a chunk with Mamba-2 layers does not run yet (issue 48): named, before any allocation. */
static mgt_status mamba_check(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
			      const mgt_backend *be)
{
	if (!strchr(c->hybrid_layer_pattern, MGT_LAYER_MAMBA)) return MGT_OK;
	/* context parallelism splits each TP rank's heads and groups over the context ranks, or with
	 * fewer groups replicates B and C (mamba_context_parallel.py's constraints) */
	const int64_t nh_r = c->mamba_num_heads / ps->tp, g_r = c->mamba_num_groups / ps->tp;
	if (ps->cp > 1 && (nh_r % ps->cp || (g_r >= ps->cp ? g_r % ps->cp : ps->cp % g_r)))
		return mgt_err(MGT_ERR_USAGE, "--context-parallel-size %d with Mamba layers: the %lld Mamba heads per "
			       "tensor-parallel rank must be divisible by it, and the %lld groups divisible by it or dividing it",
			       ps->cp, (long long)nh_r, (long long)g_r);
	/* fp8 in_proj and out_proj (Transformer Engine's, as Megatron asserts: features multiples of 16) */
	const int64_t tp = ps->tp, di = c->mamba_num_heads * c->mamba_head_dim;
	const int64_t w = 2 * di + 2 * c->mamba_num_groups * c->mamba_state_dim + c->mamba_num_heads;
	if (L->fp8.format && ((w / tp) % 16 || (di / tp) % 16))
		return mgt_err(MGT_ERR_USAGE, "--fp8-format with Mamba layers: in_proj's %lld outputs (2 d_inner + 2 groups x "
			       "state + heads) and d_inner %lld per tensor-parallel rank must be multiples of 16",
			       (long long)(w / tp), (long long)(di / tp));
	return MGT_OK;
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

static size_t gcd_z(size_t a, size_t b) { return b ? gcd_z(b, a % b) : a; }

/* The group size the layout pads buckets for: with per-layer units, lcm(dp, edp) so that dense
 * and expert buckets both split into page-aligned shards. */
static int layout_dp(const mgt_model_layout *L)
{
	size_t dp = (size_t)(L->dp > 0 ? L->dp : 1), edp = (size_t)(L->edp > 0 ? L->edp : (int)dp);
	return L->bucket_size == MGT_BUCKETS_PER_LAYER ? (int)(dp / gcd_z(dp, edp) * edp) : L->dp;
}

/* The chunk without its buffers: dimensions, tensor table and flat-buffer layout. */
mgt_status mgt_model_new_chunk(mgt_model **out, const mgt_model_config *c, const mgt_model_layout *L,
			    mgt_backend *be, const mgt_parallel *ps, bool dry)
{
	*out = NULL;
	mgt_status st = check_layout(c, L, ps);
	if (!st) st = mamba_check(c, L, ps, dry ? NULL : be);
	if (!st && !dry && ps->cp > 1 && !be->ops->attn_merge)
		st = mgt_err(MGT_ERR_USAGE, "--context-parallel-size %d: the %s backend has no context-parallel attention "
			     "in this build", ps->cp, be->ops->name);
	if (st) return st;
	mgt_model *m = mgt_malloc(sizeof *m);
	if (!m) return MGT_ERR_NOMEM;
	memset(m, 0, sizeof *m);
	m->c = *c;
	m->fam = mgt_model_family(c);
	m->L = *L;
	m->be = be;
	m->ps = ps;
	m->mem.dry = dry;
	set_dims(m);
	m->ep.size = ps->ep > 0 ? ps->ep : 1;
	m->ep.rank = ps->ep > 0 ? ps->ep_rank : 0;
	st = mgt_tensor_table_build_ep(&m->tt, c, ps->tp, ps->tp_rank, L->num_stages, L->stage, m->ep.size, m->ep.rank);
	bool shared = !c->untie_embeddings_and_output_weights && ps->pp > 1;
	if (!st) st = mgt_tensor_table_layout(&m->tt, layout_dp(L), L->distributed_optimizer, L->bucket_size, shared);
	if (!st) st = index_roles(m);
	if (!st) st = mgt_model_shard_setup(m);
	if (!st) st = mgt_moe_setup(m);
	if (!st) st = mgt_t5_setup(m);
	if (!st) st = fp8_check(m);
	m->prec.act_t = mgt_precision_dtype(L->precision);
	m->prec.fc1_t = m->prec.act_t;
	m->prec.res_t = L->fp32_residual_connection ? MGT_DT_F32 : m->prec.act_t;
	if (st) mgt_model_free(m);
	else *out = m;
	return st;
}

size_t mgt_model_lp_bytes(const mgt_model *m)
{
	return m->infer || m->L.precision == MGT_PREC_FP32 ? 0 : m->tt.buf_numel * 2;
}

/* --apply-layernorm-1p: the offsets of the norm weights in m->prec.nw1, the buffer and its ones. */
static mgt_status alloc_nw1(mgt_model *m)
{
	if (!m->c.apply_layernorm_1p) return MGT_OK;
	size_t n = 0, most = 1;
	if (!(m->prec.nw_off = mgt_malloc((size_t)(m->tt.n ? m->tt.n : 1) * sizeof *m->prec.nw_off))) return MGT_ERR_NOMEM;
	for (int i = 0; i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		if (!mgt_tensor_is_norm_weight(t)) continue;
		m->prec.nw_off[i] = n;
		n += t->numel;
		if (t->numel > most) most = t->numel;
	}
	float *one = mgt_malloc(most * sizeof *one);
	m->prec.nw1 = m->be->ops->alloc(m->be, (n ? n : 1) * sizeof(float));
	m->prec.ones = m->be->ops->alloc(m->be, most * sizeof(float));
	mgt_status st = one && m->prec.nw1 && m->prec.ones ? MGT_OK : MGT_ERR_NOMEM;
	for (size_t i = 0; !st && i < most; i++) one[i] = 1.0f;
	if (!st) st = m->be->ops->upload(m->be, m->prec.ones, one, most * sizeof(float));
	free(one);
	return st;
}

mgt_status mgt_model_alloc_params(mgt_model *m, bool grads)
{
	mgt_backend *be = m->be;
	size_t bytes = m->tt.buf_numel * sizeof(float), lpb = grads ? mgt_model_lp_bytes(m) : 0;
	m->lazy_grads = grads && m->L.sharding >= MGT_DP_OPTIM_GRADS;
	m->lazy_params = grads && m->L.sharding >= MGT_DP_OPTIM_GRADS_PARAMS;
	m->params = m->lazy_params ? be->ops->reserve(be, bytes) : be->ops->alloc(be, bytes);
	if (grads) m->grads = m->lazy_grads ? be->ops->reserve(be, bytes) : be->ops->alloc(be, bytes);
	if (lpb) m->prec.lp = m->lazy_params ? be->ops->reserve(be, lpb) : be->ops->alloc(be, lpb);
	if (!m->params || (grads && !m->grads) || (lpb && !m->prec.lp) || alloc_nw1(m)) return MGT_ERR_NOMEM;
	if (!m->lazy_params) be->ops->zero(be, m->params, bytes);
	if (grads && !m->lazy_grads) be->ops->zero(be, m->grads, bytes);
	m->prec.lp_t = mgt_precision_dtype(m->L.precision);
	m->prec.lp_stale = true;
	return MGT_OK;
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

mgt_status mgt_model_measure_units(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
				   mgt_model_mem *mem, size_t *buf_numel, size_t *outside, size_t *largest)
{
	mgt_model *m;
	mgt_status st = mgt_model_new_chunk(&m, c, L, NULL, ps, true);
	if (st) return st;
	st = alloc_activations(m);
	if (!st) {
		*mem = mgt_model_memory(m);
		*buf_numel = m->tt.buf_numel;
		if (outside) *outside = mgt_model_shard_outside_numel(m);
		if (largest) *largest = 0;
		for (int b = 0; largest && b < m->tt.nbuckets; b++)
			if (m->tt.buckets[b].numel > *largest) *largest = m->tt.buckets[b].numel;
	}
	mgt_model_free(m);
	return st;
}

mgt_status mgt_model_measure(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
			     mgt_model_mem *mem, size_t *buf_numel)
{
	return mgt_model_measure_units(c, L, ps, mem, buf_numel, NULL, NULL);
}

static void free_slot(mgt_model *m, slot_act *sa)
{
	mgt_backend *be = m->be;
	for (int l = 0; sa->la && l < m->n_layers; l++) free_layer(m, &sa->la[l]);
	free(sa->la);
	float *bufs[] = { sa->res_out, sa->lnf, sa->meanf, sa->rstdf, sa->logits, sa->mx, sa->sumexp, sa->tgt,
			  sa->loss, sa->mask, (float *)sa->tokens, (float *)sa->labels, (float *)sa->pos,
			  (float *)sa->types, (float *)sa->kmask, (float *)sa->seg };
	for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) be->ops->free(be, bufs[k]);
	free(sa->cp_rows);
}

void mgt_model_free(mgt_model *m)
{
	if (!m) return;
	mgt_backend *be = m->be;
	mgt_t5_free(m); /* first: it takes back the slots' pointers into its buffers */
	for (int k = 0; m->sa && k < m->L.slots; k++) {
		if (m->mem.dry) free(m->sa[k].la);
		else free_slot(m, &m->sa[k]);
	}
	free(m->sa);
	for (int k = 0; m->rc.layers && !m->mem.dry && k < m->rc.n; k++) free_layer(m, &m->rc.layers[k]);
	free(m->rc.layers);
	size_t pb = m->tt.buf_numel * sizeof(float);
	if (!m->mem.dry && m->lazy_params) be->ops->unreserve(be, m->params, pb), m->params = NULL;
	if (!m->mem.dry && m->lazy_params) be->ops->unreserve(be, m->prec.lp, mgt_model_lp_bytes(m)), m->prec.lp = NULL;
	if (!m->mem.dry && m->lazy_grads) be->ops->unreserve(be, m->grads, pb), m->grads = NULL;
	free(m->unit);
	void *bufs[] = { m->params, m->grads, m->prec.lp, m->prec.nw1, m->prec.ones, m->scratch.emb, m->scratch.lnl, m->scratch.dres, m->scratch.dtmp_h, m->scratch.dloc,
			 m->scratch.dbig, m->scratch.dctx, m->scratch.dact, m->inv_freq, m->mamba.dzx, m->mamba.dconv, m->mamba.dy,
			 m->mamba.dnorm, m->mamba.send_map, m->mamba.asm_map, m->mamba.snd, m->mamba.rcv, m->mamba.yg,
			 m->mamba.dzxg, m->mamba.dconvg };
	for (size_t k = 0; !m->mem.dry && k < sizeof bufs / sizeof *bufs; k++) be->ops->free(be, bufs[k]);
	mgt_moe_free(m);
	mgt_cp_free(m);
	mgt_model_fp8_free(m);
	mgt_bert_free(m);
	free(m->kmask_h);
	free(m->by_role);
	free(m->pattern);
	free(m->k0);
	free(m->prec.nw_off);
	mgt_tensor_table_free(&m->tt);
	free(m);
}

const mgt_tensor_table *mgt_model_tensors(const mgt_model *m) { return &m->tt; }
const char *mgt_model_layer_pattern(const mgt_model *m) { return m->pattern; }
float *mgt_model_params(mgt_model *m)
{
	m->prec.lp_stale = true;
	return m->params;
}
float *mgt_model_grads(mgt_model *m) { return m->grads; }
void *mgt_model_hidden_in(mgt_model *m, int slot) { return m->n_layers ? m->sa[slot].la[0].x_in : m->sa[slot].res_out; }
void *mgt_model_hidden_out(mgt_model *m, int slot) { return m->sa[slot].res_out; }
mgt_elem_type mgt_model_hidden_type(const mgt_model *m) { return m->prec.res_t; }
void *mgt_model_hidden_grad(mgt_model *m) { return m->scratch.dres; }
size_t mgt_model_hidden_numel(const mgt_model *m) { return (size_t)m->Th * (size_t)m->h; }
bool mgt_model_is_first_stage(const mgt_model *m) { return m->first; }
bool mgt_model_is_last_stage(const mgt_model *m) { return m->last; }

mgt_model_mem mgt_model_memory(const mgt_model *m)
{
	size_t pb = m->tt.buf_numel * sizeof(float);
	mgt_model_mem r = { .params = pb + mgt_model_lp_bytes(m), .grads = m->infer ? 0 : pb,
			    .activations = m->mem.act_bytes, .workspace = m->mem.work_bytes };
	if (!m->infer && m->unit) mgt_model_shard_memory(m, &r.params, &r.grads);
	return r;
}

mgt_status mgt_model_init_params(mgt_model *m, uint64_t seed)
{
	return mgt_model_init_params_range(m, seed, 0, m->tt.buf_numel);
}

void mgt_model_set_dropout_key(mgt_model *m, uint64_t seed, int64_t iteration, int64_t microbatch)
{
	uint32_t w[4];
	mgt_philox(seed ^ 0xD1B54A32D192ED03ull, (uint64_t)iteration, (uint64_t)microbatch, w);
	m->run.next_key = ((uint64_t)w[1] << 32) | w[0];
}
