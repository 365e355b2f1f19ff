/* lib/model/infer.c: the inference forward with a key/value cache (model.h, "inference").
 *
 * The same backend ops as the training forward (embed_head.c, layer_attn.c, layer_mlp.c:
 * embedding, norms, fused QKV, head norms, RoPE, bias-activation, bias-add residual), in place
 * on one residual buffer, with attention through the attn_decode op against the cache.  No
 * dropout.  Activations are [T, .] rows of the tokens fed by one call; nothing of a call
 * survives it but the cache.
 */
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

/* Whether m is an encoder-decoder (T5: the cache serves the decoder's layers, which also attend
 * to the encoder's output). */
static bool enc_dec(const mgt_model *m) { return m->fam->recipe == MGT_STACK_ENCODER_DECODER; }

/* Scratch activations of one call, for up to cap tokens and rcap logits rows. */
typedef struct {
	float *x, *ln, *mean, *rstd, *qkv, *qkv_pre, *qmean, *qrstd, *kmean, *krstd, *ctx, *tmp, *fc1, *act, *xs;
	float *lse;            /* T5: [T nq_l] the encoder's and the cross-attention's log-sum-exp */
	/* Mamba layers: in_proj's output [T, w_l], the conv's [T, cd_l], the scan's and the gated
	 * norm's [T, di_l], its statistics [T, g_l] (NULL without 'M' layers) */
	float *mzx, *mu, *my, *mnorm, *mrstd;
	int32_t *tok, *seq, *pos;
} scratch;

struct mgt_kv_cache {
	mgt_model *m;
	int B, S, cap, rcap;
	float **k, **v;        /* per attention layer [B, ng, S, d] (NULL for the others) */
	/* per Mamba layer its conv state [B, K-1, cd_l] and SSM state [B, nh_l, p, n] (backend.h
	 * mamba_step; NULL for the others) */
	float **cs, **ss;
	scratch w;
	float *logits;         /* [rcap, V] */
	int32_t *len;          /* host: filled positions per sequence */
	int32_t *last;         /* host: last position fed per sequence in the current call */
	size_t bytes, wbytes;
	/* T5 (mgt_model_encode): the encoded length Se (0: nothing encoded), the encoder's key mask
	 * [Se B] (backend uint8) and per decoder layer its cross-attention keys and values
	 * [Se B, ng, 2, d] (linear_kv of the encoder output), for up to secap positions */
	int Se, secap;
	uint8_t *ekm;
	float **xk;
	/* --position-embedding-type relative: the encoder's bias for Se positions [2 secap - 1, heads],
	 * the decoder's for the cache's S [2 S - 1, heads] (attn_decode's s = S), and their bucket
	 * indices' scratch [2 max(secap, S) - 1] (backend int32); NULL otherwise */
	float *ebias, *dbias;
	int32_t *ridx;
};

mgt_status mgt_model_create_infer(mgt_model **out, const mgt_model_config *c, mgt_backend *be,
				  const mgt_parallel *ps)
{
	*out = NULL;
	if (ps->tp != 1) return mgt_err(MGT_ERR_USAGE, "inference model: tensor parallelism %d (must be 1)", ps->tp);
	mgt_model_layout L = { .mbs = 1, .stage = 0, .num_stages = 1, .slots = 1, .dp = 1 };
	mgt_model *m;
	mgt_status st = mgt_model_new_chunk(&m, c, &L, be, ps, false);
	if (st) return st;
	m->infer = true;
	st = mgt_model_alloc_params(m, false);
	if (!st && m->rope && m->n_layers) st = mgt_model_upload_inv_freq(m);
	if (st) {
		mgt_model_free(m);
		return st;
	}
	*out = m;
	return MGT_OK;
}

static void *kv_alloc(mgt_kv_cache *kv, size_t bytes, size_t *acct, mgt_status *st)
{
	if (*st) return NULL;
	void *p = kv->m->be->ops->alloc(kv->m->be, bytes ? bytes : 4);
	if (!p) *st = MGT_ERR_NOMEM;
	else *acct += bytes;
	return p;
}

static void scratch_free(mgt_kv_cache *kv)
{
	mgt_backend *be = kv->m->be;
	float **f = (float **)&kv->w;
	for (size_t k = 0; k < sizeof(scratch) / sizeof(float *); k++) be->ops->free(be, f[k]);
	memset(&kv->w, 0, sizeof kv->w);
	kv->bytes -= kv->wbytes;
	kv->wbytes = 0;
	kv->cap = 0;
}

/* Scratch for T tokens (grown, never shrunk). */
static mgt_status scratch_reserve(mgt_kv_cache *kv, int T)
{
	if (T <= kv->cap) return MGT_OK;
	scratch_free(kv);
	const mgt_model *m = kv->m;
	mgt_status st = MGT_OK;
	scratch *w = &kv->w;
	size_t t = (size_t)T, h = (size_t)m->h, rows = t * (size_t)m->ng_l, *a = &kv->wbytes;
#define SF(n) (float *)kv_alloc(kv, (size_t)(n) * sizeof(float), a, &st)
	w->x = SF(t * h); w->ln = SF(t * h); w->xs = SF(t * h); w->mean = SF(t); w->rstd = SF(t);
	w->qkv = SF(t * (size_t)m->qkv_l); w->ctx = SF(t * (size_t)(m->nq_l * m->d)); w->tmp = SF(t * h);
	w->fc1 = SF(t * (size_t)m->fc1_l); w->act = SF(t * (size_t)m->ffn_l);
	if (m->qkln) {
		w->qkv_pre = SF(t * (size_t)m->qkv_l);
		w->qmean = SF(rows * (size_t)m->r); w->qrstd = SF(rows * (size_t)m->r);
		w->kmean = SF(rows); w->krstd = SF(rows);
	}
	w->tok = (int32_t *)SF(t); w->seq = (int32_t *)SF(t); w->pos = (int32_t *)SF(t);
	if (enc_dec(m)) w->lse = SF(t * (size_t)m->nq_l);
	if (strchr(m->pattern, MGT_LAYER_MAMBA)) {
		w->mzx = SF(t * (size_t)m->mamba.w_l); w->mu = SF(t * (size_t)m->mamba.cd_l);
		w->my = SF(t * (size_t)m->mamba.di_l); w->mnorm = SF(t * (size_t)m->mamba.di_l);
		w->mrstd = SF(t * (size_t)m->mamba.g_l);
	}
#undef SF
	kv->bytes += kv->wbytes;
	if (!st) kv->cap = T;
	return st;
}

static mgt_status logits_reserve(mgt_kv_cache *kv, int R)
{
	if (R <= kv->rcap) return MGT_OK;
	mgt_backend *be = kv->m->be;
	size_t old = (size_t)kv->rcap * (size_t)kv->m->V_l * sizeof(float), bytes = (size_t)R * (size_t)kv->m->V_l * 4;
	be->ops->free(be, kv->logits);
	kv->bytes -= old;
	kv->rcap = 0;
	mgt_status st = MGT_OK;
	kv->logits = kv_alloc(kv, bytes, &kv->bytes, &st);
	if (!st) kv->rcap = R;
	return st;
}

/* Layer l's cache: keys and values of its attention, or a Mamba layer's states. */
static mgt_status layer_cache_alloc(mgt_kv_cache *kv, int l)
{
	const mgt_model *m = kv->m;
	mgt_status st = MGT_OK;
	const size_t B = (size_t)kv->B;
	for (int k = m->k0[l]; k < m->k0[l + 1]; k++) {
		if (m->pattern[k] == MGT_LAYER_ATTENTION) {
			size_t per = B * (size_t)m->ng_l * (size_t)kv->S * (size_t)m->d * sizeof(float);
			kv->k[l] = kv_alloc(kv, per, &kv->bytes, &st);
			kv->v[l] = kv_alloc(kv, per, &kv->bytes, &st);
		} else if (m->pattern[k] == MGT_LAYER_MAMBA) {
			size_t c = B * (MGT_MAMBA_CONV_K - 1) * (size_t)m->mamba.cd_l * sizeof(float);
			size_t s = B * (size_t)(m->mamba.nh_l * m->mamba.p * m->mamba.n) * sizeof(float);
			kv->cs[l] = kv_alloc(kv, c, &kv->bytes, &st);
			kv->ss[l] = kv_alloc(kv, s, &kv->bytes, &st);
		}
	}
	return st;
}

mgt_status mgt_kv_cache_create(mgt_kv_cache **out, mgt_model *m, int B, int S)
{
	*out = NULL;
	if (!m->first || !m->last || m->ps->tp != 1)
		return mgt_err(MGT_ERR_USAGE, "key/value cache: the model must be one stage with tensor parallelism 1");
	if (B < 1 || S < 1) return mgt_err(MGT_ERR_USAGE, "key/value cache of %d sequences of %d positions", B, S);
	if (m->glob[MGT_T_POS_EMB] && S > m->glob[MGT_T_POS_EMB]->shape[0])
		return mgt_err(MGT_ERR_USAGE, "key/value cache of %d positions: more than the %lld learned position "
			       "embeddings (max_position_embeddings)", S, (long long)m->glob[MGT_T_POS_EMB]->shape[0]);
	mgt_kv_cache *kv = mgt_malloc(sizeof *kv);
	if (!kv) return MGT_ERR_NOMEM;
	memset(kv, 0, sizeof *kv);
	kv->m = m;
	kv->B = B;
	kv->S = S;
	size_t nl = (size_t)(m->n_layers ? m->n_layers : 1);
	kv->k = mgt_malloc(nl * sizeof *kv->k);
	kv->v = mgt_malloc(nl * sizeof *kv->v);
	kv->cs = mgt_malloc(nl * sizeof *kv->cs);
	kv->ss = mgt_malloc(nl * sizeof *kv->ss);
	kv->len = mgt_malloc((size_t)B * sizeof *kv->len);
	kv->last = mgt_malloc((size_t)B * sizeof *kv->last);
	mgt_status st = kv->k && kv->v && kv->cs && kv->ss && kv->len && kv->last ? MGT_OK : MGT_ERR_NOMEM;
	if (!st) {
		memset(kv->k, 0, nl * sizeof *kv->k);
		memset(kv->v, 0, nl * sizeof *kv->v);
		memset(kv->cs, 0, nl * sizeof *kv->cs);
		memset(kv->ss, 0, nl * sizeof *kv->ss);
		memset(kv->len, 0, (size_t)B * sizeof *kv->len);
	}
	for (int l = enc_dec(m) ? m->n_layers / 2 : 0; !st && l < m->n_layers; l++) /* T5: the decoder's */
		st = layer_cache_alloc(kv, l);
	if (!st && enc_dec(m) && !(kv->xk = mgt_malloc(nl * sizeof *kv->xk))) st = MGT_ERR_NOMEM;
	if (!st && enc_dec(m)) memset(kv->xk, 0, nl * sizeof *kv->xk);
	if (st) {
		mgt_kv_cache_free(kv);
		return st;
	}
	*out = kv;
	return MGT_OK;
}

void mgt_kv_cache_free(mgt_kv_cache *kv)
{
	if (!kv) return;
	mgt_backend *be = kv->m->be;
	for (int l = 0; kv->k && l < kv->m->n_layers; l++) {
		be->ops->free(be, kv->k[l]);
		be->ops->free(be, kv->v[l]);
		if (kv->cs) be->ops->free(be, kv->cs[l]), be->ops->free(be, kv->ss[l]);
		if (kv->xk) be->ops->free(be, kv->xk[l]);
	}
	free(kv->cs);
	free(kv->ss);
	be->ops->free(be, kv->ekm);
	be->ops->free(be, kv->ebias), be->ops->free(be, kv->dbias), be->ops->free(be, kv->ridx);
	free(kv->xk);
	scratch_free(kv);
	be->ops->free(be, kv->logits);
	free(kv->k);
	free(kv->v);
	free(kv->len);
	free(kv->last);
	free(kv);
}

size_t mgt_kv_cache_bytes(const mgt_kv_cache *kv) { return kv->bytes; }

/* The tokens, sequences and positions of a call, against the cache's state (updated). */
static mgt_status check_feed(mgt_kv_cache *kv, int T, const int32_t *tokens, const int32_t *seq, const int32_t *pos)
{
	const int64_t V = kv->m->c.padded_vocab_size;
	for (int b = 0; b < kv->B; b++) kv->last[b] = -1;
	for (int t = 0; t < T; t++) {
		if (tokens[t] < 0 || tokens[t] >= V)
			return mgt_err(MGT_ERR_INPUT, "token %d (index %d) is outside the vocabulary [0, %lld)", tokens[t], t,
				       (long long)V);
		if (seq[t] < 0 || seq[t] >= kv->B)
			return mgt_err(MGT_ERR_INPUT, "token index %d: sequence %d outside the cache's [0, %d)", t, seq[t], kv->B);
		int b = seq[t];
		if (pos[t] < 0 || pos[t] >= kv->S || pos[t] <= kv->last[b] || pos[t] > kv->len[b])
			return mgt_err(MGT_ERR_INPUT, "token index %d: position %d of sequence %d: expected %d to %d (after "
				       "%d filled positions, of the cache's %d)", t, pos[t], b, kv->last[b] + 1,
				       kv->len[b] < kv->S - 1 ? kv->len[b] : kv->S - 1, kv->len[b], kv->S);
		if (kv->cs && strchr(kv->m->pattern, MGT_LAYER_MAMBA) && pos[t] && pos[t] != kv->len[b])
			return mgt_err(MGT_ERR_INPUT, "token index %d: position %d of sequence %d: a Mamba layer's state cannot go "
				       "back to an earlier position (expected %d, or 0 to restart the sequence)", t, pos[t], b,
				       kv->len[b]);
		kv->last[b] = kv->len[b] = pos[t];
		kv->len[b]++;
	}
	return MGT_OK;
}

static void infer_attn(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	int l = li + m->first_layer, h = (int)m->h, ng = (int)m->ng_l, r = (int)m->r, d = (int)m->d;
	float eps = (float)m->c.norm_epsilon;
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, w->x, MGT_DT_F32, NW(m, T_(m, l, MGT_T_LN1_W)), P(m, T_(m, l, MGT_T_LN1_B)),
		    T, h, eps);
	o->linear_fwd(m->be, m->qkln ? w->qkv_pre : w->qkv, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_QKV_W)), WT(m),
		      P(m, T_(m, l, MGT_T_QKV_B)), T, h, (int)m->qkv_l);
	if (m->qkln) {
		o->copy(m->be, w->qkv, w->qkv_pre, (size_t)T * (size_t)m->qkv_l * sizeof(float));
		o->head_norm_fwd(m->be, m->norm, w->qkv, MGT_DT_F32, w->qmean, w->qrstd, w->qkv_pre, NW(m, T_(m, l, MGT_T_QNORM_W)),
				 P(m, T_(m, l, MGT_T_QNORM_B)), T, ng, r, d, false, eps);
		o->head_norm_fwd(m->be, m->norm, w->qkv, MGT_DT_F32, w->kmean, w->krstd, w->qkv_pre, NW(m, T_(m, l, MGT_T_KNORM_W)),
				 P(m, T_(m, l, MGT_T_KNORM_B)), T, ng, r, d, true, eps);
	}
	if (m->rope) o->rope(m->be, w->qkv, MGT_DT_F32, w->pos, m->inv_freq, T, ng, r, d, m->rot_dim, false);
	const mgt_attn at = { .sq = T, .sk = kv->S, .ng = ng, .r = r, .d = d, .s = kv->S, .head0 = 0,
			      .heads_total = ng * r, .kind = MGT_ATTN_SELF, .t = MGT_DT_F32, .gt = MGT_DT_F32,
			      .bias = kv->dbias };
	o->attn_decode(m->be, &at, w->ctx, kv->k[li], kv->v[li], w->qkv, w->seq, w->pos);
	o->linear_fwd(m->be, w->tmp, MGT_DT_F32, w->ctx, MGT_DT_F32, W(m, T_(m, l, MGT_T_PROJ_W)), WT(m), NULL, T, (int)(m->nq_l * m->d), h);
	o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, P(m, T_(m, l, MGT_T_PROJ_B)), T, h, 0.0f, 0, 0);
}

static mgt_status infer_mlp(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	int l = li + m->first_layer, h = (int)m->h;
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, w->x, MGT_DT_F32, NW(m, T_(m, l, MGT_T_LN2_W)), P(m, T_(m, l, MGT_T_LN2_B)),
		    T, h, (float)m->c.norm_epsilon);
	if (mgt_moe_layer(m, li)) { /* the training path's MoE forward, without dropout or statistics */
		mgt_status st = mgt_moe_forward(m, li, false, w->ln, w->tmp);
		if (!st) o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, NULL, T, h, 0.0f, 0, 0);
		return st;
	}
	o->linear_fwd(m->be, w->fc1, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_FC1_W)), WT(m), NULL, T, h, (int)m->fc1_l);
	o->bias_act_fwd(m->be, m->act, w->act, MGT_DT_F32, w->fc1, MGT_DT_F32, P(m, T_(m, l, MGT_T_FC1_B)), T, (int)m->ffn_l);
	o->linear_fwd(m->be, w->tmp, MGT_DT_F32, w->act, MGT_DT_F32, W(m, T_(m, l, MGT_T_FC2_W)), WT(m), NULL, T, (int)m->ffn_l, h);
	o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, P(m, T_(m, l, MGT_T_FC2_B)), T, h, 0.0f, 0, 0);
	return MGT_OK;
}

/* Mamba layer li on the call's rows: its norm, in_proj, the conv and scan one token at a time
 * from the cache's states (backend.h mamba_step), the gated norm, out_proj, the residual. */
static void infer_mamba(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	const int l = li + m->first_layer, h = (int)m->h, wl = (int)m->mamba.w_l, di = (int)m->mamba.di_l;
	const int cd = (int)m->mamba.cd_l;
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, w->x, MGT_DT_F32, NW(m, T_(m, l, MGT_T_LN1_W)),
		    P(m, T_(m, l, MGT_T_LN1_B)), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, w->mzx, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_M_IN_W)), WT(m), NULL, T, h, wl);
	const mgt_ssd d = { .nh = (int)m->mamba.nh_l, .p = (int)m->mamba.p, .g = (int)m->mamba.g_l, .n = (int)m->mamba.n,
			    .ld_x = cd, .ld_bc = cd, .ld_dt = wl };
	o->mamba_step(m->be, &d, T, w->my, w->mu, kv->cs[li], kv->ss[li], w->mzx + di, wl, w->mzx + di + cd, w->seq, w->pos,
		      P(m, T_(m, l, MGT_T_M_CONV_W)), P(m, T_(m, l, MGT_T_M_CONV_B)), MGT_MAMBA_CONV_K,
		      P(m, T_(m, l, MGT_T_M_DT_B)), P(m, T_(m, l, MGT_T_M_A_LOG)), P(m, T_(m, l, MGT_T_M_D)));
	o->mamba_gated_norm_fwd(m->be, w->mnorm, w->mrstd, w->my, w->mzx, wl, P(m, T_(m, l, MGT_T_M_NORM_W)), T, di,
				(int)m->mamba.g_l, MGT_MAMBA_GATED_EPS, MGT_DT_F32);
	o->linear_fwd(m->be, w->tmp, MGT_DT_F32, w->mnorm, MGT_DT_F32, W(m, T_(m, l, MGT_T_M_OUT_W)), WT(m), NULL, T, di, h);
	o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, NULL, T, h, 0.0f, 0, 0);
}

/* Layer li of a one-stack model: its symbols' kinds in turn. */
static mgt_status infer_layer(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	mgt_status st = MGT_OK;
	for (int k = m->k0[li]; !st && k < m->k0[li + 1]; k++) {
		if (m->pattern[k] == MGT_LAYER_ATTENTION) infer_attn(m, kv, li, T);
		else if (m->pattern[k] == MGT_LAYER_MAMBA) infer_mamba(m, kv, li, T);
		else st = infer_mlp(m, kv, li, T);
	}
	return st;
}

/* Final norm and output layer on the rows asked for; logits downloaded. */
static mgt_status infer_head(mgt_model *m, mgt_kv_cache *kv, int T, int nrows, const int32_t *rows, float *logits)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	size_t hb = (size_t)m->h * sizeof(float);
	bool all = nrows == T;
	for (int k = 0; all && k < nrows; k++) all = rows[k] == k;
	const float *x = w->x;
	if (!all) {
		for (int k = 0; k < nrows; k++) o->copy(m->be, (char *)w->xs + (size_t)k * hb, (char *)w->x + (size_t)rows[k] * hb, hb);
		x = w->xs;
	}
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, x, MGT_DT_F32, NW(m, m->glob[MGT_T_FINAL_LN_W]),
		    P(m, m->glob[MGT_T_FINAL_LN_B]), nrows, (int)m->h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, kv->logits, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, mgt_model_output_weight(m)), WT(m),
		      P(m, m->glob[MGT_T_OUTPUT_B]), nrows, (int)m->h, (int)m->V_l); /* T5's vocabulary bias */
	return o->download(m->be, logits, kv->logits, (size_t)nrows * (size_t)m->V_l * sizeof(float));
}

static mgt_status upload_feed(mgt_model *m, mgt_kv_cache *kv, int T, const int32_t *tokens, const int32_t *seq,
			      const int32_t *pos)
{
	const mgt_backend_ops *o = m->be->ops;
	size_t n = (size_t)T * sizeof(int32_t);
	mgt_status st = o->upload(m->be, kv->w.tok, tokens, n);
	if (!st) st = o->upload(m->be, kv->w.seq, seq, n);
	if (!st) st = o->upload(m->be, kv->w.pos, pos, n);
	return st;
}

static void infer_embed(mgt_model *m, mgt_kv_cache *kv, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	o->embedding_fwd(m->be, kv->w.x, kv->w.tok, P(m, we), 0, we->local_shape[0], T, (int)m->h, false);
	if (pe) o->embedding_fwd(m->be, kv->w.x, kv->w.pos, P(m, pe), 0, pe->shape[0], T, (int)m->h, true);
}

/* ---- T5: the encoder once, then the decoder against its cross-attention keys and values ---- */

/* Encoder layer li's self-attention on the T = Se B rows of w->x, bidirectional under kv->ekm. */
static void enc_attn(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	int l = li + m->first_layer, h = (int)m->h, nd = (int)(m->nq_l * m->d);
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, w->x, MGT_DT_F32, NW(m, T_(m, l, MGT_T_LN1_W)),
		    P(m, T_(m, l, MGT_T_LN1_B)), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, w->qkv, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_QKV_W)), WT(m),
		      P(m, T_(m, l, MGT_T_QKV_B)), T, h, (int)m->qkv_l);
	if (m->rope) o->rope(m->be, w->qkv, MGT_DT_F32, w->pos, m->inv_freq, T, (int)m->ng_l, (int)m->r, (int)m->d, m->rot_dim, false);
	const mgt_attn at = { .sq = kv->Se, .sk = kv->Se, .s = kv->Se, .ld_lse = kv->Se, .b = kv->B, .ng = (int)m->ng_l,
			      .r = (int)m->r, .d = (int)m->d, .head0 = 0, .heads_total = (int)m->nq_l,
			      .kind = MGT_ATTN_SELF, .t = MGT_DT_F32, .gt = MGT_DT_F32, .key_mask = kv->ekm,
			      .bias = kv->ebias };
	o->attn_forward(m->be, &at, w->ctx, w->lse, w->qkv, NULL);
	o->linear_fwd(m->be, w->tmp, MGT_DT_F32, w->ctx, MGT_DT_F32, W(m, T_(m, l, MGT_T_PROJ_W)), WT(m), NULL, T, nd, h);
	o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, P(m, T_(m, l, MGT_T_PROJ_B)), T, h, 0.0f, 0, 0);
}

/* Decoder layer li's cross-attention block on T = sq B rows (position-major): queries from
 * pre_cross_attn_layernorm's output, keys and values from the cache's encoding. */
static void dec_cross(mgt_model *m, mgt_kv_cache *kv, int li, int T)
{
	const mgt_backend_ops *o = m->be->ops;
	scratch *w = &kv->w;
	int l = li + m->first_layer, h = (int)m->h, nd = (int)(m->nq_l * m->d);
	o->norm_fwd(m->be, m->norm, w->ln, MGT_DT_F32, w->mean, w->rstd, w->x, MGT_DT_F32, NW(m, T_(m, l, MGT_T_XLN_W)),
		    P(m, T_(m, l, MGT_T_XLN_B)), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, w->qkv, MGT_DT_F32, w->ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_XQ_W)), WT(m),
		      P(m, T_(m, l, MGT_T_XQ_B)), T, h, nd);
	const mgt_attn at = { .sq = T / kv->B, .sk = kv->Se, .s = T / kv->B, .ld_lse = T / kv->B, .b = kv->B,
			      .ng = (int)m->ng_l, .r = (int)m->r, .d = (int)m->d, .head0 = 0, .heads_total = (int)m->nq_l,
			      .kind = MGT_ATTN_CROSS, .t = MGT_DT_F32, .gt = MGT_DT_F32, .key_mask = kv->ekm };
	o->attn_forward(m->be, &at, w->ctx, w->lse, w->qkv, kv->xk[li]);
	o->linear_fwd(m->be, w->tmp, MGT_DT_F32, w->ctx, MGT_DT_F32, W(m, T_(m, l, MGT_T_XPROJ_W)), WT(m), NULL, T, nd, h);
	o->bda_fwd(m->be, w->x, w->x, MGT_DT_F32, w->tmp, MGT_DT_F32, P(m, T_(m, l, MGT_T_XPROJ_B)), T, h, 0.0f, 0, 0);
}

/* Room for an encoding of Se positions: the key mask and the decoder layers' keys and values. */
static mgt_status xk_reserve(mgt_model *m, mgt_kv_cache *kv, int Se)
{
	if (Se <= kv->secap) return MGT_OK;
	mgt_backend *be = m->be;
	const size_t rows = (size_t)Se * (size_t)kv->B, per = rows * 2 * (size_t)(m->ng_l * m->d) * sizeof(float);
	mgt_status st = MGT_OK;
	be->ops->free(be, kv->ekm);
	kv->ekm = kv_alloc(kv, rows, &kv->bytes, &st);
	for (int l = m->n_layers / 2; l < m->n_layers; l++) {
		be->ops->free(be, kv->xk[l]);
		kv->xk[l] = kv_alloc(kv, per, &kv->bytes, &st);
	}
	if (mgt_t5_relative(m)) { /* the position biases (mgt_model_encode fills them) */
		const size_t nh = (size_t)m->c.num_attention_heads, nd = (size_t)(2 * (Se > kv->S ? Se : kv->S) - 1);
		be->ops->free(be, kv->ebias), be->ops->free(be, kv->ridx);
		kv->ebias = kv_alloc(kv, (size_t)(2 * Se - 1) * nh * 4, &kv->bytes, &st);
		kv->ridx = kv_alloc(kv, nd * 4, &kv->bytes, &st);
		if (!kv->dbias) kv->dbias = kv_alloc(kv, (size_t)(2 * kv->S - 1) * nh * 4, &kv->bytes, &st);
	}
	if (!st) kv->secap = Se;
	return st;
}

mgt_status mgt_model_encode(mgt_model *m, mgt_kv_cache *kv, int Se, const int32_t *tokens, const uint8_t *mask)
{
	if (!enc_dec(m) || kv->m != m) return mgt_err(MGT_ERR_USAGE, "mgt_model_encode: a T5 model and its own cache");
	const mgt_tensor *pe = m->glob[MGT_T_POS_EMB];
	if (Se < 1 || Se > mgt_t5_enc_len(m) || (pe && Se > pe->shape[0]))
		return mgt_err(MGT_ERR_USAGE, "mgt_model_encode: %d positions: expected 1 to the encoder's %d", Se, mgt_t5_enc_len(m));
	const int T = Se * kv->B, h = (int)m->h, L = m->n_layers / 2;
	const int64_t V = m->c.padded_vocab_size;
	for (int t = 0; t < T; t++)
		if (tokens[t] < 0 || tokens[t] >= V)
			return mgt_err(MGT_ERR_INPUT, "encoder token %d (index %d) is outside the vocabulary [0, %lld)", tokens[t], t,
				       (long long)V);
	int32_t *pos = mgt_malloc((size_t)T * sizeof *pos);
	if (!pos) return MGT_ERR_NOMEM;
	for (int t = 0; t < T; t++) pos[t] = t / kv->B;
	mgt_status st = scratch_reserve(kv, T);
	if (!st) st = xk_reserve(m, kv, Se);
	if (!st) st = m->be->ops->upload(m->be, kv->w.tok, tokens, (size_t)T * 4);
	if (!st) st = m->be->ops->upload(m->be, kv->w.pos, pos, (size_t)T * 4);
	if (!st) st = m->be->ops->upload(m->be, kv->ekm, mask, (size_t)T);
	free(pos);
	if (st) return st;
	if (kv->ebias) st = mgt_t5_rel_bias(m, 0, Se, kv->ebias, kv->ridx);
	if (!st && kv->dbias) st = mgt_t5_rel_bias(m, 1, kv->S, kv->dbias, kv->ridx);
	if (st) return st;
	kv->Se = Se;
	memset(kv->len, 0, (size_t)kv->B * sizeof *kv->len);
	mgt_model_lp_refresh(m);
	infer_embed(m, kv, T);
	for (int li = 0; !st && li < L; li++) {
		enc_attn(m, kv, li, T);
		st = infer_mlp(m, kv, li, T);
	}
	if (st) return st;
	const mgt_backend_ops *o = m->be->ops;
	o->norm_fwd(m->be, m->norm, kv->w.ln, MGT_DT_F32, kv->w.mean, kv->w.rstd, kv->w.x, MGT_DT_F32, NW(m, mgt_t5_enc_norm(m, false)),
		    P(m, mgt_t5_enc_norm(m, true)), T, h, (float)m->c.norm_epsilon); /* the encoder output H */
	for (int li = L; li < 2 * L; li++) {
		int l = li + m->first_layer;
		o->linear_fwd(m->be, kv->xk[li], MGT_DT_F32, kv->w.ln, MGT_DT_F32, W(m, T_(m, l, MGT_T_XKV_W)), WT(m),
			      P(m, T_(m, l, MGT_T_XKV_B)), T, h, (int)(2 * m->ng_l * m->d));
	}
	o->sync(m->be);
	return MGT_OK;
}

/* A T5 decoder call: an encoding, and the tokens as [T / B, B] rows of every cache sequence. */
static mgt_status check_t5_feed(const mgt_kv_cache *kv, int T, const int32_t *seq)
{
	if (!kv->Se) return mgt_err(MGT_ERR_USAGE, "T5: mgt_model_encode before feeding the decoder");
	if (T % kv->B) return mgt_err(MGT_ERR_USAGE, "T5: %d decoder tokens are not rows of the cache's %d sequences", T, kv->B);
	for (int t = 0; t < T; t++)
		if (seq[t] != t % kv->B)
			return mgt_err(MGT_ERR_USAGE, "T5: decoder token %d belongs to sequence %d: expected %d (tokens in rows of "
				       "every sequence)", t, seq[t], t % kv->B);
	return MGT_OK;
}

mgt_status mgt_model_infer(mgt_model *m, mgt_kv_cache *kv, int T, const int32_t *tokens, const int32_t *seq,
			   const int32_t *pos, int nrows, const int32_t *rows, float *logits)
{
	if (kv->m != m) return mgt_err(MGT_ERR_USAGE, "mgt_model_infer: the cache belongs to another model");
	if (T < 1 || nrows < 0 || nrows > T || (nrows && (!rows || !logits)))
		return mgt_err(MGT_ERR_USAGE, "mgt_model_infer: %d tokens, %d logits rows", T, nrows);
	for (int k = 0; k < nrows; k++)
		if (rows[k] < 0 || rows[k] >= T)
			return mgt_err(MGT_ERR_USAGE, "mgt_model_infer: logits row %d outside the %d tokens", rows[k], T);
	double t0 = mgt_now();
	mgt_status st = enc_dec(m) ? check_t5_feed(kv, T, seq) : MGT_OK;
	if (!st) st = check_feed(kv, T, tokens, seq, pos);
	if (!st) st = scratch_reserve(kv, T);
	if (!st) st = logits_reserve(kv, nrows);
	if (!st) st = mgt_moe_reserve(m, T);
	if (!st) st = upload_feed(m, kv, T, tokens, seq, pos);
	if (st) return st;
	mgt_model_lp_refresh(m); /* --apply-layernorm-1p's 1 + w after a change of the parameters */
	infer_embed(m, kv, T);
	for (int li = enc_dec(m) ? m->n_layers / 2 : 0; !st && li < m->n_layers; li++) { /* T5: the decoder's */
		if (!enc_dec(m)) {
			st = infer_layer(m, kv, li, T);
			continue;
		}
		infer_attn(m, kv, li, T);
		dec_cross(m, kv, li, T);
		st = infer_mlp(m, kv, li, T);
	}
	if (nrows) st = infer_head(m, kv, T, nrows, rows, logits);
	m->be->ops->sync(m->be);
	m->run.t_fwd += mgt_now() - t0;
	return st;
}
