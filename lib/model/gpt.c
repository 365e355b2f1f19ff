/* lib/model/gpt.c: GPT forward and backward over backend ops (megatron-reference.md section 8).
 *
 * Activations are sequence-first [T, .] with T = s*b.  Per layer the forward keeps what the
 * backward needs: the layer input (residual stream), both norm outputs and statistics, the fused
 * QKV after RoPE, the attention output and its log-sum-exp, the residual after attention, fc1
 * output and the activation.  Dropout masks are recomputed from Philox keys, never stored.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	float *x_in, *ln1, *mean1, *rstd1, *qkv, *ctx, *lse, *x_mid, *ln2, *mean2, *rstd2, *fc1, *act;
} layer_act;

struct mgt_model {
	mgt_model_config c;
	mgt_tensor_table tt;
	mgt_backend *be;
	const mgt_parallel *ps;
	int s, b, T;
	int64_t h, nq_l, ng_l, r, d, qkv_l, ffn_l, fc1_l, V_l, v0;
	mgt_norm_kind norm;
	bool layernorm, rope;
	float *params, *grads;
	/* tensors by role and local layer; NULL when absent */
	const mgt_tensor *(*by_role)[MGT_T_NROLES];
	const mgt_tensor *glob[MGT_T_NROLES];
	int first_layer, n_layers;
	/* activations */
	layer_act *la;
	float *emb, *res_out, *lnf, *meanf, *rstdf, *logits, *mx, *sumexp, *tgt, *loss;
	int32_t *tokens, *labels, *pos;
	float *mask;
	/* backward scratch */
	float *dres, *dtmp_h, *dbig, *dctx, *dact;
	size_t act_bytes, work_bytes;
	uint64_t drop_key;
	double t_fwd, t_bwd;
};

static float *P(mgt_model *m, const mgt_tensor *t) { return t ? m->params + t->offset : NULL; }
static float *G(mgt_model *m, const mgt_tensor *t) { return t ? m->grads + t->offset : NULL; }

static const mgt_tensor *T_(const mgt_model *m, int l, mgt_tensor_role role)
{
	return l < 0 ? m->glob[role] : m->by_role[l - m->first_layer][role];
}

/* ---- allocation ---- */

static void *balloc(mgt_model *m, size_t bytes, size_t *acct, mgt_status *st)
{
	if (*st) return NULL;
	void *p = m->be->ops->alloc(m->be, bytes ? bytes : 4);
	if (!p) *st = MGT_ERR_NOMEM;
	*acct += bytes;
	return p;
}
#define AF(n) (float *)balloc(m, (size_t)(n) * sizeof(float), &m->act_bytes, &st)
#define WF(n) (float *)balloc(m, (size_t)(n) * sizeof(float), &m->work_bytes, &st)

static mgt_status alloc_activations(mgt_model *m)
{
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, h = (size_t)m->h;
	m->la = mgt_malloc((size_t)m->n_layers * sizeof *m->la);
	if (!m->la) return MGT_ERR_NOMEM;
	memset(m->la, 0, (size_t)m->n_layers * sizeof *m->la);
	for (int l = 0; l < m->n_layers; l++) {
		layer_act *a = &m->la[l];
		a->x_in = AF(T * h); a->ln1 = AF(T * h); a->mean1 = AF(T); a->rstd1 = AF(T);
		a->qkv = AF(T * (size_t)m->qkv_l); a->ctx = AF(T * (size_t)(m->nq_l * m->d));
		a->lse = AF((size_t)m->b * (size_t)m->nq_l * (size_t)m->s);
		a->x_mid = AF(T * h); a->ln2 = AF(T * h); a->mean2 = AF(T); a->rstd2 = AF(T);
		a->fc1 = AF(T * (size_t)m->fc1_l); a->act = AF(T * (size_t)m->ffn_l);
	}
	m->emb = AF(T * h); m->res_out = AF(T * h); m->lnf = AF(T * h); m->meanf = AF(T); m->rstdf = AF(T);
	m->logits = AF(T * (size_t)m->V_l);
	m->mx = AF(T); m->sumexp = AF(T); m->tgt = AF(T); m->loss = AF(T); m->mask = AF(T);
	m->tokens = (int32_t *)AF(T); m->labels = (int32_t *)AF(T); m->pos = (int32_t *)AF(T);
	size_t big = (size_t)(m->qkv_l > m->fc1_l ? m->qkv_l : m->fc1_l);
	m->dres = WF(T * h); m->dtmp_h = WF(T * h); m->dbig = WF(T * big);
	m->dctx = WF(T * (size_t)(m->nq_l * m->d)); m->dact = WF(T * (size_t)m->ffn_l);
	return st;
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

static void set_dims(mgt_model *m, int mbs)
{
	const mgt_model_config *c = &m->c;
	int tp = m->ps->tp;
	m->s = (int)c->seq_length;
	m->b = mbs;
	m->T = m->s * m->b;
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
}

mgt_status mgt_model_create(mgt_model **out, const mgt_model_config *c, int mbs, mgt_backend *be,
			    const mgt_parallel *ps)
{
	*out = NULL;
	if (ps->tp != 1 || ps->pp != 1 || ps->cp != 1)
		return mgt_err(MGT_ERR_USAGE, "tensor, pipeline and context parallelism are not "
			       "implemented yet (sizes must be 1)");
	if (mbs <= 0 || (int64_t)mbs * c->seq_length > INT32_MAX / 4)
		return mgt_err(MGT_ERR_USAGE, "--micro-batch-size %d: out of range", mbs);
	mgt_model *m = mgt_malloc(sizeof *m);
	if (!m) return MGT_ERR_NOMEM;
	memset(m, 0, sizeof *m);
	m->c = *c;
	m->be = be;
	m->ps = ps;
	set_dims(m, mbs);
	mgt_status st = mgt_tensor_table_build(&m->tt, c, ps->tp, ps->tp_rank, ps->pp, ps->pp_rank);
	if (!st) st = index_roles(m);
	if (!st) {
		size_t bytes = m->tt.numel * sizeof(float);
		m->params = be->ops->alloc(be, bytes);
		m->grads = be->ops->alloc(be, bytes);
		if (!m->params || !m->grads) st = MGT_ERR_NOMEM;
	}
	if (!st) st = alloc_activations(m);
	if (st) {
		mgt_model_free(m);
		return st;
	}
	*out = m;
	return MGT_OK;
}

void mgt_model_free(mgt_model *m)
{
	if (!m) return;
	mgt_backend *be = m->be;
	if (m->la)
		for (int l = 0; l < m->n_layers; l++) {
			float **f = (float **)&m->la[l];
			for (size_t k = 0; k < sizeof(layer_act) / sizeof(float *); k++) be->ops->free(be, f[k]);
		}
	float *bufs[] = { m->params, m->grads, m->emb, m->res_out, m->lnf, m->meanf, m->rstdf, m->logits,
			  m->mx, m->sumexp, m->tgt, m->loss, m->mask, (float *)m->tokens, (float *)m->labels,
			  (float *)m->pos, m->dres, m->dtmp_h, m->dbig, m->dctx, m->dact };
	for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) be->ops->free(be, bufs[k]);
	free(m->la);
	free(m->by_role);
	mgt_tensor_table_free(&m->tt);
	free(m);
}

const mgt_tensor_table *mgt_model_tensors(const mgt_model *m) { return &m->tt; }
float *mgt_model_params(mgt_model *m) { return m->params; }
float *mgt_model_grads(mgt_model *m) { return m->grads; }

mgt_model_mem mgt_model_memory(const mgt_model *m)
{
	size_t pb = m->tt.numel * sizeof(float);
	return (mgt_model_mem){ .params = pb, .grads = pb, .activations = m->act_bytes,
				.workspace = m->work_bytes };
}

mgt_status mgt_model_init_params(mgt_model *m, uint64_t seed)
{
	if (m->be->host_memory) {
		mgt_tensor_table_init(&m->tt, m->params, seed);
		return MGT_OK;
	}
	float *host = mgt_malloc(m->tt.numel * sizeof(float));
	if (!host) return MGT_ERR_NOMEM;
	mgt_tensor_table_init(&m->tt, host, seed);
	mgt_status st = m->be->ops->upload(m->be, m->params, host, m->tt.numel * sizeof(float));
	free(host);
	return st;
}

void mgt_model_set_dropout_key(mgt_model *m, uint64_t seed, int64_t iteration, int64_t microbatch)
{
	uint32_t w[4];
	mgt_philox(seed ^ 0xD1B54A32D192ED03ull, (uint64_t)iteration, (uint64_t)microbatch, w);
	m->drop_key = ((uint64_t)w[1] << 32) | w[0];
}

/* Key of dropout site `site` of layer l (l = -1: embedding). */
static uint64_t site_key(const mgt_model *m, int l, int site)
{
	return m->drop_key + (uint64_t)(l + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)site * 0xC2B2AE3D27D4EB4Full;
}

/* ---- forward ---- */

static mgt_status tp_allreduce(mgt_model *m, float *x, size_t n, mgt_redop op)
{
	mgt_comm *c = m->ps->tp_comm;
	return c->size > 1 ? c->ops->allreduce(c, x, n, MGT_DT_F32, op) : MGT_OK;
}

static mgt_status embed_fwd(mgt_model *m, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	int T = m->T, h = (int)m->h;
	o->embedding_fwd(m->be, m->emb, m->tokens, P(m, we), we->local_offset[0], we->local_shape[0], T, h, false);
	mgt_status st = tp_allreduce(m, m->emb, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	if (pe) o->embedding_fwd(m->be, m->emb, m->pos, P(m, pe), 0, pe->shape[0], T, h, true);
	float p = train ? (float)m->c.hidden_dropout : 0.0f;
	float *x0 = m->n_layers ? m->la[0].x_in : m->res_out;
	o->bda_fwd(m->be, x0, NULL, m->emb, NULL, T, h, p, site_key(m, -1, 0), 0);
	return MGT_OK;
}

static mgt_status attn_fwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	float eps = (float)m->c.norm_epsilon;
	o->norm_fwd(m->be, m->norm, a->ln1, a->mean1, a->rstd1, a->x_in, P(m, T_(m, l, MGT_T_LN1_W)),
		    P(m, T_(m, l, MGT_T_LN1_B)), T, h, eps);
	o->linear_fwd(m->be, a->qkv, a->ln1, P(m, T_(m, l, MGT_T_QKV_W)), P(m, T_(m, l, MGT_T_QKV_B)), T, h,
		      (int)m->qkv_l);
	if (m->rope)
		o->rope(m->be, a->qkv, m->pos, T, (int)m->ng_l, (int)m->r, (int)m->d,
			(int)(m->d * m->c.rotary_percent), (float)m->c.rotary_base, false);
	float pa = train ? (float)m->c.attention_dropout : 0.0f;
	o->attn_fwd(m->be, a->ctx, a->lse, a->qkv, m->s, m->b, (int)m->ng_l, (int)m->r, (int)m->d, pa,
		    site_key(m, l, 1), (int)(m->nq_l * m->ps->tp_rank), (int)m->c.num_attention_heads);
	o->linear_fwd(m->be, m->dtmp_h, a->ctx, P(m, T_(m, l, MGT_T_PROJ_W)), NULL, T, (int)(m->nq_l * m->d), h);
	mgt_status st = tp_allreduce(m, m->dtmp_h, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	float ph = train ? (float)m->c.hidden_dropout : 0.0f;
	o->bda_fwd(m->be, a->x_mid, a->x_in, m->dtmp_h, P(m, T_(m, l, MGT_T_PROJ_B)), T, h, ph, site_key(m, l, 2), 0);
	return MGT_OK;
}

static mgt_status mlp_fwd(mgt_model *m, int li, bool train, float *out)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	o->norm_fwd(m->be, m->norm, a->ln2, a->mean2, a->rstd2, a->x_mid, P(m, T_(m, l, MGT_T_LN2_W)),
		    P(m, T_(m, l, MGT_T_LN2_B)), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, a->fc1, a->ln2, P(m, T_(m, l, MGT_T_FC1_W)), NULL, T, h, (int)m->fc1_l);
	mgt_act_kind act = m->c.swiglu ? MGT_ACT_SWIGLU : MGT_ACT_GELU;
	o->bias_act_fwd(m->be, act, a->act, a->fc1, P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	o->linear_fwd(m->be, m->dtmp_h, a->act, P(m, T_(m, l, MGT_T_FC2_W)), NULL, T, (int)m->ffn_l, h);
	mgt_status st = tp_allreduce(m, m->dtmp_h, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	float ph = train ? (float)m->c.hidden_dropout : 0.0f;
	o->bda_fwd(m->be, out, a->x_mid, m->dtmp_h, P(m, T_(m, l, MGT_T_FC2_B)), T, h, ph, site_key(m, l, 3), 0);
	return MGT_OK;
}

static const mgt_tensor *output_weight(const mgt_model *m)
{
	return m->glob[MGT_T_OUTPUT_W] ? m->glob[MGT_T_OUTPUT_W] : m->glob[MGT_T_WORD_EMB];
}

static mgt_status head_fwd(mgt_model *m, double *loss_sum)
{
	const mgt_backend_ops *o = m->be->ops;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	o->norm_fwd(m->be, m->norm, m->lnf, m->meanf, m->rstdf, m->res_out, P(m, m->glob[MGT_T_FINAL_LN_W]),
		    P(m, m->glob[MGT_T_FINAL_LN_B]), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, m->logits, m->lnf, P(m, output_weight(m)), NULL, T, h, V);
	o->xent_max(m->be, m->mx, m->logits, T, V);
	mgt_status st = tp_allreduce(m, m->mx, (size_t)T, MGT_RED_MAX);
	if (st) return st;
	o->xent_stats(m->be, m->sumexp, m->tgt, m->logits, m->labels, m->mx, m->v0, T, V);
	if ((st = tp_allreduce(m, m->sumexp, (size_t)T, MGT_RED_SUM))) return st;
	if ((st = tp_allreduce(m, m->tgt, (size_t)T, MGT_RED_SUM))) return st;
	*loss_sum = o->xent_loss(m->be, m->loss, m->mx, m->sumexp, m->tgt, m->mask, T);
	return MGT_OK;
}

/* ---- backward ---- */

static mgt_status head_bwd(mgt_model *m, float scale)
{
	const mgt_backend_ops *o = m->be->ops;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	const mgt_tensor *w = output_weight(m);
	o->xent_bwd(m->be, m->logits, m->logits, m->labels, m->mx, m->sumexp, m->mask, scale, m->v0, T, V);
	o->linear_bwd(m->be, m->dtmp_h, G(m, w), NULL, m->logits, m->lnf, P(m, w), T, h, V);
	mgt_status st = tp_allreduce(m, m->dtmp_h, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	o->zero(m->be, m->dres, (size_t)T * (size_t)h * sizeof(float));
	o->norm_bwd(m->be, m->norm, m->dres, G(m, m->glob[MGT_T_FINAL_LN_W]), G(m, m->glob[MGT_T_FINAL_LN_B]),
		    m->dtmp_h, m->res_out, P(m, m->glob[MGT_T_FINAL_LN_W]), m->meanf, m->rstdf, T, h);
	return MGT_OK;
}

static mgt_status mlp_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h;
	float ph = train ? (float)m->c.hidden_dropout : 0.0f;
	o->bda_bwd(m->be, m->dtmp_h, G(m, T_(m, l, MGT_T_FC2_B)), m->dres, T, h, ph, site_key(m, l, 3), 0);
	o->linear_bwd(m->be, m->dact, G(m, T_(m, l, MGT_T_FC2_W)), NULL, m->dtmp_h, a->act,
		      P(m, T_(m, l, MGT_T_FC2_W)), T, (int)m->ffn_l, h);
	mgt_act_kind act = m->c.swiglu ? MGT_ACT_SWIGLU : MGT_ACT_GELU;
	o->bias_act_bwd(m->be, act, m->dbig, G(m, T_(m, l, MGT_T_FC1_B)), m->dact, a->fc1,
			P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	o->linear_bwd(m->be, m->dtmp_h, G(m, T_(m, l, MGT_T_FC1_W)), NULL, m->dbig, a->ln2,
		      P(m, T_(m, l, MGT_T_FC1_W)), T, h, (int)m->fc1_l);
	mgt_status st = tp_allreduce(m, m->dtmp_h, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	o->norm_bwd(m->be, m->norm, m->dres, G(m, T_(m, l, MGT_T_LN2_W)), G(m, T_(m, l, MGT_T_LN2_B)),
		    m->dtmp_h, a->x_mid, P(m, T_(m, l, MGT_T_LN2_W)), a->mean2, a->rstd2, T, h);
	return MGT_OK;
}

static mgt_status attn_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->la[li];
	int l = li + m->first_layer, T = m->T, h = (int)m->h, nd = (int)(m->nq_l * m->d);
	float ph = train ? (float)m->c.hidden_dropout : 0.0f, pa = train ? (float)m->c.attention_dropout : 0.0f;
	o->bda_bwd(m->be, m->dtmp_h, G(m, T_(m, l, MGT_T_PROJ_B)), m->dres, T, h, ph, site_key(m, l, 2), 0);
	o->linear_bwd(m->be, m->dctx, G(m, T_(m, l, MGT_T_PROJ_W)), NULL, m->dtmp_h, a->ctx,
		      P(m, T_(m, l, MGT_T_PROJ_W)), T, nd, h);
	o->attn_bwd(m->be, m->dbig, m->dctx, a->qkv, a->ctx, a->lse, m->s, m->b, (int)m->ng_l, (int)m->r,
		    (int)m->d, pa, site_key(m, l, 1), (int)(m->nq_l * m->ps->tp_rank),
		    (int)m->c.num_attention_heads);
	if (m->rope)
		o->rope(m->be, m->dbig, m->pos, T, (int)m->ng_l, (int)m->r, (int)m->d,
			(int)(m->d * m->c.rotary_percent), (float)m->c.rotary_base, true);
	o->linear_bwd(m->be, m->dtmp_h, G(m, T_(m, l, MGT_T_QKV_W)), G(m, T_(m, l, MGT_T_QKV_B)), m->dbig,
		      a->ln1, P(m, T_(m, l, MGT_T_QKV_W)), T, h, (int)m->qkv_l);
	mgt_status st = tp_allreduce(m, m->dtmp_h, (size_t)T * (size_t)h, MGT_RED_SUM);
	if (st) return st;
	o->norm_bwd(m->be, m->norm, m->dres, G(m, T_(m, l, MGT_T_LN1_W)), G(m, T_(m, l, MGT_T_LN1_B)),
		    m->dtmp_h, a->x_in, P(m, T_(m, l, MGT_T_LN1_W)), a->mean1, a->rstd1, T, h);
	return MGT_OK;
}

static void embed_bwd(mgt_model *m, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	int T = m->T, h = (int)m->h;
	float p = train ? (float)m->c.hidden_dropout : 0.0f;
	o->bda_bwd(m->be, m->dtmp_h, NULL, m->dres, T, h, p, site_key(m, -1, 0), 0);
	o->embedding_bwd(m->be, G(m, we), m->dtmp_h, m->tokens, we->local_offset[0], we->local_shape[0], T, h);
	if (pe) o->embedding_bwd(m->be, G(m, pe), m->dtmp_h, m->pos, 0, pe->shape[0], T, h);
}

static mgt_status upload_batch(mgt_model *m, const mgt_microbatch *mb)
{
	const mgt_backend_ops *o = m->be->ops;
	size_t n = (size_t)m->T * 4;
	mgt_status st = o->upload(m->be, m->tokens, mb->tokens, n);
	if (!st) st = o->upload(m->be, m->labels, mb->labels, n);
	if (!st) st = o->upload(m->be, m->pos, mb->position_ids, n);
	if (!st) st = o->upload(m->be, m->mask, mb->loss_mask, n);
	return st;
}

static mgt_status forward(mgt_model *m, bool train, double *loss_sum)
{
	mgt_status st = embed_fwd(m, train);
	for (int li = 0; !st && li < m->n_layers; li++) {
		float *out = li + 1 < m->n_layers ? m->la[li + 1].x_in : m->res_out;
		st = attn_fwd(m, li, train);
		if (!st) st = mlp_fwd(m, li, train, out);
	}
	return st ? st : head_fwd(m, loss_sum);
}

static mgt_status dump_outputs(mgt_model *m, float *logits_out, float *loss_out)
{
	const mgt_backend_ops *o = m->be->ops;
	mgt_status st = MGT_OK;
	if (logits_out)
		st = o->download(m->be, logits_out, m->logits, (size_t)m->T * (size_t)m->V_l * sizeof(float));
	if (!st && loss_out) st = o->download(m->be, loss_out, m->loss, (size_t)m->T * sizeof(float));
	return st;
}

static mgt_status backward(mgt_model *m, bool train, float grad_scale);

void mgt_model_last_times(const mgt_model *m, double *fwd_s, double *bwd_s)
{
	*fwd_s = m->t_fwd;
	*bwd_s = m->t_bwd;
}

mgt_status mgt_model_step(mgt_model *m, const mgt_microbatch *mb, bool train, float grad_scale,
			  double *loss_sum, float *logits_out, float *loss_out)
{
	double t0 = mgt_now();
	m->t_bwd = 0;
	mgt_status st = upload_batch(m, mb);
	if (!st) st = forward(m, train, loss_sum);
	m->be->ops->sync(m->be);
	m->t_fwd = mgt_now() - t0;
	if (!st) st = dump_outputs(m, logits_out, loss_out);
	if (st || grad_scale == 0.0f) return st;
	t0 = mgt_now();
	st = backward(m, train, grad_scale);
	m->be->ops->sync(m->be);
	m->t_bwd = mgt_now() - t0;
	return st;
}

static mgt_status backward(mgt_model *m, bool train, float grad_scale)
{
	mgt_status st;
	if ((st = head_bwd(m, grad_scale))) return st;
	for (int li = m->n_layers - 1; li >= 0; li--) {
		if ((st = mlp_bwd(m, li, train))) return st;
		if ((st = attn_bwd(m, li, train))) return st;
	}
	embed_bwd(m, train);
	return MGT_OK;
}
