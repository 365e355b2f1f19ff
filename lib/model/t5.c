/* lib/model/t5.c: Megatron-Core's T5Model (megatron/core/models/T5/t5_model.py,
 * t5_spec.py) over the layer kinds (layer_attn.c, layer_mlp.c) and sublayer.c's pieces, and its
 * tensor table rows (mgt_t5_rows).
 *
 * One embedding (word + learned absolute positions) serves both stacks.  The encoder (layers
 * [0, L) of the table) is a stack of pre-LN layers under the key padding mask, then
 * encoder.final_layernorm: its output H [Te, h] (gathered over TP under sequence parallelism) feeds
 * every decoder layer's cross-attention.  A decoder layer (layers [L, 2L)) runs causal
 * self-attention, pre_cross_attn_layernorm, cross-attention (linear_q over the layer's stream,
 * linear_kv over H, the encoder's key padding mask, linear_proj, bias-dropout-add) and the MLP;
 * then decoder.final_layernorm and the LM head (the tied word embedding plus a vocabulary bias) as
 * GPT's head.  The backward sums the gradient of H over the decoder's cross-attentions (in the
 * activations' type, as autograd sums the uses of a bf16 tensor) before the TP reduction and the
 * encoder's final norm.
 *
 * The chunk's s, T, Th, r0 are those of the stack being run (mgt_t5_dims), so that the layer kinds
 * run unchanged on either: Te = seq_length * b rows for the encoder, Td = decoder_seq_length * b
 * for the decoder.  Dropout sites: the layer kinds' per layer (1 attention, 2 after linear_proj, 3 after
 * the MLP), 4 the cross-attention's probabilities, 5 after its linear_proj; the embedding's
 * dropout is site (-1, 0) for the encoder's and (-1, 1) for the decoder's.
 */
#include "model_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int mgt_t5_relative_bucket(int64_t rel, bool bidirectional, int num_buckets, int max_distance)
{
	int ret = 0, nb = num_buckets;
	int64_t n;
	if (bidirectional) {
		nb /= 2;
		ret = rel > 0 ? nb : 0;
		n = rel < 0 ? -rel : rel;
	} else {
		n = rel < 0 ? -rel : 0;
	}
	const int max_exact = nb / 2;
	if (n < max_exact) return ret + (int)n;
	/* torch: a float32 tensor's log and its ops with Python scalars in float32, then .to(long) */
	float x = logf((float)n / (float)max_exact) / (float)log((double)max_distance / (double)max_exact) *
		  (float)(nb - max_exact);
	int64_t large = max_exact + (int64_t)x;
	return ret + (int)(large < nb - 1 ? large : nb - 1);
}

/* A decoder layer's cross-attention activations in one slot: ln3 [Td, h] (pre_cross_attn_layernorm's
 * output, gathered), q [Td, nq_l d], kv [Te, ng_l, 2, d], ctx [Td, nq_l d] (act_t), lse
 * [b, nq_l, sd], the norm's statistics [Tdh] and x_sa [Tdh, h] (res_t: the stream after
 * self-attention, the cross-attention block's input). */
typedef struct {
	void *ln3, *q, *kv, *ctx, *x_sa;
	float *mean3, *rstd3, *lse;
} t5_xlayer;

/* A slot's T5 buffers: the stacks' tokens and positions (backend int32), the encoder's key mask
 * [Te], the encoder's last layer output eout [Teh, h] (res_t), its final norm's statistics and
 * output H [Te, h] (act_t), the gradient of H dH [Te, h] (act_t), the decoder layers' x. */
typedef struct {
	t5_xlayer *x;
	int32_t *etok, *epos, *dtok, *dpos;
	uint8_t *ekm;
	void *eout, *H, *dH;
	float *meane, *rstde;
} t5_slot;

struct t5_state {
	t5_slot *sl;
	int L;                    /* layers of each stack */
	int se, sd;               /* encoder and decoder sequence lengths */
	const mgt_tensor *efw, *efb; /* encoder.final_layernorm */
	void *dkv;                /* [Te, ng_l, 2, d] act_t: a cross-attention's key/value gradient */
	uint8_t *kmh;             /* host staging of the encoder's key mask [Te] */
	int cur;                  /* the stack the chunk's dims are set to (T5_ENC, T5_DEC, T5_MAX) */
	/* --position-embedding-type relative, per stack k (0 encoder, bidirectional; 1 decoder,
	 * causal): its table rtab [buckets, heads]; the bucket of each distance i' - i + s - 1 (bidx
	 * [2 s - 1], backend int32); the bias gathered from the table (bias [2 s - 1, heads], once a
	 * forward, every layer of the stack adds it) and its gradient's accumulator (dbias, likewise,
	 * scattered into the table's gradient once a backward) */
	bool rel;
	const mgt_tensor *rtab[2];
	int32_t *bidx[2];
	float *bias[2], *dbias[2];
};

mgt_status mgt_t5_setup(mgt_model *m)
{
	const mgt_model_config *c = &m->c;
	if (mgt_model_family(c)->recipe != MGT_STACK_ENCODER_DECODER) return MGT_OK;
	if (m->cp.size > 1)
		return mgt_err(MGT_ERR_USAGE, "--context-parallel-size %d with a T5 model: context parallelism is not "
			       "supported for T5 (as Megatron's T5 refuses it)", m->cp.size);
	if (m->L.recompute.granularity != MGT_RECOMPUTE_NONE)
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity with a T5 model: activation recomputation is not "
			       "implemented for T5 in this version");
	if (m->L.fp8.format != MGT_FP8_OFF)
		return mgt_err(MGT_ERR_USAGE, "--fp8-format with a T5 model: fp8 is not implemented for T5 in this version");
	if (c->num_query_groups != c->num_attention_heads)
		return mgt_err(MGT_ERR_USAGE, "--num-query-groups %lld with a T5 model: T5's attention has one key and "
			       "value head per query head (--num-attention-heads %lld)", (long long)c->num_query_groups,
			       (long long)c->num_attention_heads);
	const mgt_tensor *pe = m->glob[MGT_T_POS_EMB];
	if (c->decoder_seq_length < 1 || (pe && c->decoder_seq_length > pe->shape[0]))
		return mgt_err(MGT_ERR_USAGE, "--decoder-seq-length %lld: expected 1 to --max-position-embeddings %lld",
			       (long long)c->decoder_seq_length, (long long)(pe ? pe->shape[0] : INT32_MAX));
	int tp = m->ps->tp;
	if (m->L.sequence_parallel && tp > 1 && (c->decoder_seq_length * m->L.mbs) % tp)
		return mgt_err(MGT_ERR_USAGE, "--sequence-parallel: --decoder-seq-length %lld x --micro-batch-size %d is "
			       "not divisible by --tensor-model-parallel-size %d", (long long)c->decoder_seq_length,
			       m->L.mbs, tp);
	struct t5_state *t = mgt_malloc(sizeof *t);
	if (!t) return MGT_ERR_NOMEM;
	memset(t, 0, sizeof *t);
	m->t5 = t;
	t->L = m->n_layers / 2;
	t->se = (int)c->seq_length;
	t->sd = (int)c->decoder_seq_length;
	t->rel = !strcmp(c->position_embedding_type, "relative");
	t->rtab[0] = m->glob[MGT_T_REL_ENC];
	t->rtab[1] = m->glob[MGT_T_REL_DEC];
	t->efw = m->glob[MGT_T_ENC_FINAL_LN_W];
	t->efb = m->glob[MGT_T_ENC_FINAL_LN_B];
	if (!t->efw) return mgt_err(MGT_ERR_USAGE, "a T5 chunk without encoder.final_layernorm.weight");
	mgt_t5_dims(m, T5_DEC);
	return MGT_OK;
}

int mgt_t5_enc_len(const mgt_model *m) { return m->t5->se; }
const mgt_tensor *mgt_t5_enc_norm(const mgt_model *m, bool bias) { return bias ? m->t5->efb : m->t5->efw; }

void mgt_t5_dims(mgt_model *m, int which)
{
	struct t5_state *t = m->t5;
	if (!t) return; /* not a T5 chunk */
	const int s = which == T5_ENC ? t->se : which == T5_DEC ? t->sd : t->se > t->sd ? t->se : t->sd;
	const int tp = m->ps->tp;
	t->cur = which;
	/* the stack's relative position bias for self-attention (layer_attn.c) */
	m->attn_bias = t->rel && which != T5_MAX ? t->bias[which] : NULL;
	m->attn_dbias = t->rel && which != T5_MAX ? t->dbias[which] : NULL;
	m->s = s;
	m->T = s * m->b;
	m->Th = m->sp ? m->T / tp : m->T;
	m->r0 = m->sp ? (int64_t)m->Th * m->ps->tp_rank : 0;
	if (!m->sa || !t->sl || which == T5_MAX) return;
	t5_slot *ts = &t->sl[m->cur - m->sa];
	m->cur->tokens = which == T5_ENC ? ts->etok : ts->dtok;
	m->cur->pos = which == T5_ENC ? ts->epos : ts->dpos;
	m->cur->kmask = which == T5_ENC ? ts->ekm : NULL;
}

#define A(n, t) mgt_model_balloc(m, (size_t)(n) * mgt_elem_size(t), &m->mem.act_bytes, &st)

static mgt_status alloc_slot(mgt_model *m, t5_slot *ts)
{
	const struct t5_state *t = m->t5;
	mgt_status st = MGT_OK;
	const size_t b = (size_t)m->b, h = (size_t)m->h, Te = (size_t)t->se * b, Td = (size_t)t->sd * b;
	const size_t tp = m->sp ? (size_t)m->ps->tp : 1, Teh = Te / tp, Tdh = Td / tp, nd = (size_t)(m->nq_l * m->d);
	if (!(ts->x = mgt_malloc((size_t)t->L * sizeof *ts->x))) return MGT_ERR_NOMEM;
	memset(ts->x, 0, (size_t)t->L * sizeof *ts->x);
	ts->etok = A(Te, MGT_DT_I32); ts->epos = A(Te, MGT_DT_I32); ts->dtok = A(Td, MGT_DT_I32); ts->dpos = A(Td, MGT_DT_I32);
	ts->ekm = mgt_model_balloc(m, Te, &m->mem.act_bytes, &st); /* a byte a token */
	ts->eout = A(Teh * h, m->prec.res_t); ts->H = A(Te * h, m->prec.act_t); ts->dH = A(Te * h, m->prec.act_t);
	ts->meane = A(Teh, MGT_DT_F32); ts->rstde = A(Teh, MGT_DT_F32);
	for (int i = 0; i < t->L; i++) {
		t5_xlayer *x = &ts->x[i];
		x->ln3 = A(Td * h, m->prec.act_t); x->q = A(Td * nd, m->prec.act_t); x->ctx = A(Td * nd, m->prec.act_t);
		x->kv = A(Te * 2 * (size_t)(m->ng_l * m->d), m->prec.act_t); x->x_sa = A(Tdh * h, m->prec.res_t);
		x->mean3 = A(Tdh, MGT_DT_F32); x->rstd3 = A(Tdh, MGT_DT_F32); x->lse = A(b * (size_t)m->nq_l * (size_t)t->sd, MGT_DT_F32);
	}
	return st;
}

/* Stack k's bucket of each distance x - (s - 1), x < 2 s - 1, uploaded into idx (backend int32)
 * (megatron/core/models/common/embeddings/relative_pos_embedding.py: bidirectional for the
 * encoder, causal for the decoder). */
static mgt_status rel_buckets(mgt_model *m, int k, int s, int32_t *idx)
{
	const int nd = 2 * s - 1;
	int32_t *b = mgt_malloc((size_t)nd * sizeof *b);
	if (!b) return MGT_ERR_NOMEM;
	for (int x = 0; x < nd; x++)
		b[x] = mgt_t5_relative_bucket(x - (s - 1), k == 0, (int)m->c.relative_attention_num_buckets,
					      (int)m->c.relative_attention_max_distance);
	mgt_status st = m->be->ops->upload(m->be, idx, b, (size_t)nd * 4);
	free(b);
	return st;
}

/* Stack k's relative-position buffers, its buckets computed. */
static mgt_status alloc_rel(mgt_model *m, int k)
{
	struct t5_state *t = m->t5;
	const int s = k ? t->sd : t->se, nd = 2 * s - 1;
	const size_t nh = (size_t)m->c.num_attention_heads;
	mgt_status st = MGT_OK;
	t->bidx[k] = mgt_model_balloc(m, (size_t)nd * 4, &m->mem.work_bytes, &st);
	t->bias[k] = mgt_model_balloc(m, (size_t)nd * nh * 4, &m->mem.work_bytes, &st);
	t->dbias[k] = mgt_model_balloc(m, (size_t)nd * nh * 4, &m->mem.work_bytes, &st);
	if (st || m->mem.dry) return st;
	return rel_buckets(m, k, s, t->bidx[k]);
}

bool mgt_t5_relative(const mgt_model *m)
{
	const struct t5_state *t = m->t5;
	return t && t->rel;
}

/* bias [nd, heads] = stack k's table rows at the buckets idx [nd]. */
static void rel_gather(mgt_model *m, int k, int nd, float *bias, const int32_t *idx)
{
	m->be->ops->embedding_fwd(m->be, bias, idx, P(m, m->t5->rtab[k]), 0, m->c.relative_attention_num_buckets, nd,
				  (int)m->c.num_attention_heads, false);
}

mgt_status mgt_t5_rel_bias(mgt_model *m, int k, int s, float *bias, int32_t *idx)
{
	mgt_status st = rel_buckets(m, k, s, idx);
	if (!st) rel_gather(m, k, 2 * s - 1, bias, idx);
	return st;
}

/* Stack k's bias from its table (forward), or its accumulated gradient into the table's (backward). */
static void rel_table(mgt_model *m, int k, bool backward)
{
	const struct t5_state *t = m->t5;
	const int s = k ? t->sd : t->se, nd = 2 * s - 1, nh = (int)m->c.num_attention_heads;
	const int64_t nb = m->c.relative_attention_num_buckets;
	if (!t->rel) return;
	if (backward) m->be->ops->embedding_bwd(m->be, G(m, t->rtab[k]), t->dbias[k], MGT_DT_F32, t->bidx[k], 0, nb, nd, nh);
	else rel_gather(m, k, nd, t->bias[k], t->bidx[k]);
}

/* Zero stack k's bias gradient before its layers' backward. */
static void rel_zero(mgt_model *m, int k)
{
	const struct t5_state *t = m->t5;
	if (t->rel)
		m->be->ops->zero(m->be, t->dbias[k], (size_t)(2 * (k ? t->sd : t->se) - 1) *
				 (size_t)m->c.num_attention_heads * sizeof(float));
}

mgt_status mgt_t5_alloc(mgt_model *m)
{
	struct t5_state *t = m->t5;
	if (!t) return MGT_OK;
	if (!(t->sl = mgt_malloc((size_t)m->L.slots * sizeof *t->sl))) return MGT_ERR_NOMEM;
	memset(t->sl, 0, (size_t)m->L.slots * sizeof *t->sl);
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < m->L.slots; k++) st = alloc_slot(m, &t->sl[k]);
	const size_t Te = (size_t)t->se * (size_t)m->b;
	if (!st) t->dkv = mgt_model_balloc(m, Te * 2 * (size_t)(m->ng_l * m->d) * mgt_elem_size(m->prec.act_t), &m->mem.work_bytes, &st);
	if (!st && !m->mem.dry && !(t->kmh = mgt_malloc(Te))) st = MGT_ERR_NOMEM;
	for (int k = 0; !st && t->rel && k < 2; k++) st = alloc_rel(m, k);
	return st;
}

static void bfree(mgt_model *m, void *p)
{
	if (p && !m->mem.dry) m->be->ops->free(m->be, p);
}

void mgt_t5_free(mgt_model *m)
{
	struct t5_state *t = m->t5;
	if (!t) return;
	for (int k = 0; t->sl && k < m->L.slots; k++) {
		t5_slot *ts = &t->sl[k];
		if (m->sa) m->sa[k].tokens = NULL, m->sa[k].pos = NULL, m->sa[k].kmask = NULL; /* ours (mgt_t5_dims) */
		void *p[] = { ts->etok, ts->epos, ts->dtok, ts->dpos, ts->ekm, ts->eout, ts->H, ts->dH, ts->meane, ts->rstde };
		for (size_t i = 0; i < sizeof p / sizeof *p; i++) bfree(m, p[i]);
		for (int i = 0; ts->x && i < t->L; i++) {
			t5_xlayer *x = &ts->x[i];
			void *q[] = { x->ln3, x->q, x->kv, x->ctx, x->x_sa, x->mean3, x->rstd3, x->lse };
			for (size_t j = 0; j < sizeof q / sizeof *q; j++) bfree(m, q[j]);
		}
		free(ts->x);
	}
	bfree(m, t->dkv);
	for (int k = 0; k < 2; k++) bfree(m, t->bidx[k]), bfree(m, t->bias[k]), bfree(m, t->dbias[k]);
	free(t->sl);
	free(t->kmh);
	free(t);
	m->t5 = NULL;
}

mgt_status mgt_t5_upload(mgt_model *m, const mgt_microbatch *mb)
{
	struct t5_state *t = m->t5;
	t5_slot *ts = &t->sl[m->cur - m->sa];
	const mgt_backend_ops *o = m->be->ops;
	const size_t Te = (size_t)t->se * (size_t)m->b, Td = (size_t)t->sd * (size_t)m->b;
	if (!mb->dec_tokens || !mb->dec_position_ids || !mb->padding_mask)
		return mgt_err(MGT_ERR_USAGE, "a T5 micro-batch needs the decoder's tokens and positions and the encoder's "
			       "padding mask");
	mgt_status st = o->upload(m->be, ts->etok, mb->tokens, Te * 4);
	if (!st) st = o->upload(m->be, ts->epos, mb->position_ids, Te * 4);
	if (!st) st = o->upload(m->be, ts->dtok, mb->dec_tokens, Td * 4);
	if (!st) st = o->upload(m->be, ts->dpos, mb->dec_position_ids, Td * 4);
	if (!st) st = o->upload(m->be, m->cur->labels, mb->labels, Td * 4);
	if (!st) st = o->upload(m->be, m->cur->mask, mb->loss_mask, Td * 4);
	for (size_t i = 0; i < Te; i++) t->kmh[i] = mb->padding_mask[i] >= 1;
	if (!st) st = o->upload(m->be, ts->ekm, t->kmh, Te);
	return st;
}

/* The decoder's cross-attention over the encoder's output (backend.h attn_forward, MGT_ATTN_CROSS):
 * sd decoder positions against se encoder positions under the encoder's key mask, types act_t. */
static mgt_attn cross_attn(const mgt_model *m, const t5_slot *ts, float p, uint64_t key)
{
	const struct t5_state *t = m->t5;
	return (mgt_attn){ .kind = MGT_ATTN_CROSS, .sq = t->sd, .sk = t->se, .s = t->sd, .ld_lse = t->sd, .b = m->b,
			   .ng = (int)m->ng_l, .r = (int)m->r, .d = (int)m->d, .p = p, .key = key,
			   .head0 = (int)(m->nq_l * m->ps->tp_rank), .heads_total = (int)m->c.num_attention_heads,
			   .t = m->prec.act_t, .gt = m->prec.act_t, .key_mask = ts->ekm };
}

/* Decoder layer li's cross-attention block: x_sa -> pre_cross_attn_layernorm -> linear_q; H ->
 * linear_kv; attention under the encoder's key mask; linear_proj; bias-dropout-add into x_mid. */
static mgt_status cross_fwd(mgt_model *m, int li, bool train, t5_slot *ts, t5_xlayer *x)
{
	const mgt_backend_ops *o = m->be->ops;
	const struct t5_state *t = m->t5;
	const int l = li + m->first_layer, h = (int)m->h, nd = (int)(m->nq_l * m->d), kvn = (int)(2 * m->ng_l * m->d);
	mgt_status st = mgt_sublayer_norm_gather(m, x->ln3, m->prec.act_t, x->mean3, x->rstd3, x->x_sa,
						 T_(m, l, MGT_T_XLN_W), T_(m, l, MGT_T_XLN_B));
	if (st) return st;
	o->linear_fwd(m->be, x->q, m->prec.act_t, x->ln3, m->prec.act_t, W(m, T_(m, l, MGT_T_XQ_W)), WT(m), P(m, T_(m, l, MGT_T_XQ_B)),
		      m->T, h, nd);
	o->linear_fwd(m->be, x->kv, m->prec.act_t, ts->H, m->prec.act_t, W(m, T_(m, l, MGT_T_XKV_W)), WT(m),
		      P(m, T_(m, l, MGT_T_XKV_B)), t->se * m->b, h, kvn);
	const mgt_attn xa = cross_attn(m, ts, drop_p(train, m->c.attention_dropout), mgt_sublayer_site_key(m, l, 4));
	o->attn_forward(m->be, &xa, x->ctx, x->lse, x->q, x->kv);
	o->linear_fwd(m->be, m->scratch.dtmp_h, m->prec.act_t, x->ctx, m->prec.act_t, W(m, T_(m, l, MGT_T_XPROJ_W)), WT(m), NULL, m->T, nd, h);
	return mgt_sublayer_reduce_bda(m, m->cur->la[li].x_mid, x->x_sa, T_(m, l, MGT_T_XPROJ_B), train,
				       mgt_sublayer_site_key(m, l, 5), m->prec.act_t);
}

/* Its backward: dres (the gradient of x_mid) becomes x_sa's; H's gradient added into dH (written
 * by the first call of a backward, first = true). */
static mgt_status cross_bwd(mgt_model *m, int li, bool train, t5_slot *ts, t5_xlayer *x, bool first)
{
	const mgt_backend_ops *o = m->be->ops;
	const struct t5_state *t = m->t5;
	const int l = li + m->first_layer, h = (int)m->h, nd = (int)(m->nq_l * m->d), kvn = (int)(2 * m->ng_l * m->d);
	const int Te = t->se * m->b;
	const mgt_elem_type at = m->prec.act_t;
	const float p = drop_p(train, m->c.attention_dropout);
	mgt_status st = mgt_sublayer_bda_bwd_gather(m, T_(m, l, MGT_T_XPROJ_B), train, mgt_sublayer_site_key(m, l, 5), at);
	if (st) return st;
	const mgt_tensor *pw = T_(m, l, MGT_T_XPROJ_W), *qw = T_(m, l, MGT_T_XQ_W), *kw = T_(m, l, MGT_T_XKV_W);
	o->linear_bwd(m->be, m->scratch.dctx, at, G(m, pw), NULL, m->scratch.dtmp_h, at, x->ctx, at, W(m, pw), WT(m), m->T, nd, h);
	const mgt_attn xa = cross_attn(m, ts, p, mgt_sublayer_site_key(m, l, 4));
	o->attn_backward(m->be, &xa, m->scratch.dbig, t->dkv, m->scratch.dctx, x->q, x->kv, x->ctx, x->lse);
	o->linear_bwd(m->be, first ? ts->dH : m->scratch.dtmp_h, at, G(m, kw), G(m, T_(m, l, MGT_T_XKV_B)), t->dkv, at, ts->H, at,
		      W(m, kw), WT(m), Te, h, kvn);
	if (!first) o->add(m->be, ts->dH, m->scratch.dtmp_h, at, (size_t)Te * (size_t)h);
	o->linear_bwd(m->be, m->scratch.dtmp_h, at, G(m, qw), G(m, T_(m, l, MGT_T_XQ_B)), m->scratch.dbig, at, x->ln3, at, W(m, qw), WT(m),
		      m->T, h, nd);
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, x->x_sa, T_(m, l, MGT_T_XLN_W), T_(m, l, MGT_T_XLN_B),
					    x->mean3, x->rstd3, NULL);
}

/* Under FSDP's optim_grads_params (lib/model/shard.c's parameter hook): layer li's unit
 * gathered before it runs, the next one's gather queued (the decoder's first after the encoder's
 * last, forward; the encoder's last after the decoder's first, backward).  The two stacks are
 * one run of units, 0 to 2L - 1, as their layers are numbered. */
static mgt_status use_layer(mgt_model *m, int li, int next)
{
	mgt_status st = mgt_model_param_use(m, li, MGT_PARAM_NEED);
	return st ? st : mgt_model_param_use(m, next, MGT_PARAM_PREFETCH);
}

mgt_status mgt_t5_forward(mgt_model *m, bool train)
{
	const struct t5_state *t = m->t5;
	t5_slot *ts = &t->sl[m->cur - m->sa];
	slot_act *sa = m->cur;
	const int L = t->L;
	mgt_t5_dims(m, T5_ENC);
	rel_table(m, 0, false);
	rel_table(m, 1, false);
	mgt_status st = mgt_model_embed_fwd(m, train, sa->la[0].x_in, mgt_sublayer_site_key(m, -1, 0));
	for (int li = 0; !st && li < L; li++) {
		st = use_layer(m, li, li + 1);
		if (!st) st = mgt_layer_attn_fwd(m, li, train, sa->la[li].x_mid);
		if (!st) st = mgt_layer_mlp_fwd(m, li, train, li + 1 < L ? sa->la[li + 1].x_in : ts->eout);
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
	}
	if (!st) st = mgt_sublayer_norm_gather(m, ts->H, m->prec.act_t, ts->meane, ts->rstde, ts->eout, t->efw, t->efb);
	mgt_t5_dims(m, T5_DEC);
	if (!st) st = mgt_model_embed_fwd(m, train, sa->la[L].x_in, mgt_sublayer_site_key(m, -1, 1));
	for (int li = L; !st && li < 2 * L; li++) {
		t5_xlayer *x = &ts->x[li - L];
		st = use_layer(m, li, li + 1);
		if (!st) st = mgt_layer_attn_fwd(m, li, train, x->x_sa);
		if (!st) st = cross_fwd(m, li, train, ts, x);
		if (!st) st = mgt_layer_mlp_fwd(m, li, train, li + 1 < 2 * L ? sa->la[li + 1].x_in : sa->res_out);
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
	}
	return st;
}

mgt_status mgt_t5_backward(mgt_model *m, bool train, float scale)
{
	const struct t5_state *t = m->t5;
	t5_slot *ts = &t->sl[m->cur - m->sa];
	const int L = t->L;
	mgt_t5_dims(m, T5_DEC);
	rel_zero(m, 1);
	mgt_status st = mgt_model_head_bwd(m, scale);
	for (int li = 2 * L - 1; !st && li >= L; li--) {
		st = use_layer(m, li, li - 1);
		if (!st) st = mgt_layer_mlp_bwd(m, li, train);
		if (!st) st = cross_bwd(m, li, train, ts, &ts->x[li - L], li == 2 * L - 1);
		if (!st) st = mgt_layer_attn_bwd(m, li, train);
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
	}
	if (!st) st = mgt_model_embed_bwd(m, train, mgt_sublayer_site_key(m, -1, 1));
	if (!st) rel_table(m, 1, true);
	mgt_t5_dims(m, T5_ENC);
	rel_zero(m, 0);
	if (!st) {
		m->be->ops->zero(m->be, m->scratch.dres, (size_t)m->Th * (size_t)m->h * mgt_elem_size(m->prec.res_t));
		st = mgt_sublayer_reduce_norm_bwd(m, ts->dH, ts->eout, t->efw, t->efb, ts->meane, ts->rstde, NULL);
	}
	for (int li = L - 1; !st && li >= 0; li--) {
		st = use_layer(m, li, li - 1);
		if (!st) st = mgt_layer_mlp_bwd(m, li, train);
		if (!st) st = mgt_layer_attn_bwd(m, li, train);
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
	}
	if (!st) st = mgt_model_embed_bwd(m, train, mgt_sublayer_site_key(m, -1, 0));
	if (!st) rel_table(m, 0, true);
	mgt_t5_dims(m, T5_DEC);
	return st;
}

/* ---- the table rows ---- */

/* A T5 decoder layer (megatron/core/models/T5/t5_spec.py, transformer_layer.py registration
 * order): self-attention as an encoder layer's, pre_cross_attn_layernorm, cross_attention
 * (linear_proj, then CrossAttention's linear_q and linear_kv), then the MLP. */
static void decoder_layer_rows(mgt_rows *bd, int i)
{
	const mgt_model_config *c = bd->c;
	int64_t h = c->hidden_size, q = c->num_attention_heads * c->kv_channels;
	double std = c->init_method_std, out_std = std / sqrt(2.0 * (double)c->num_layers);
	mgt_layer_attn_rows(bd, i);
	mgt_rows_norm(bd, i, MGT_T_XLN_W, "pre_cross_attn_layernorm.weight", "pre_cross_attn_layernorm.bias");
	mgt_rows_add(bd, i, MGT_T_XPROJ_W, "cross_attention.linear_proj.weight", h, q, MGT_SHARD_COL,
		     MGT_INIT_NORMAL, out_std);
	mgt_rows_add(bd, i, MGT_T_XPROJ_B, "cross_attention.linear_proj.bias", h, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
	mgt_rows_add(bd, i, MGT_T_XQ_W, "cross_attention.linear_q.weight", q, h, MGT_SHARD_ROW, MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, i, MGT_T_XQ_B, "cross_attention.linear_q.bias", q, 0, MGT_SHARD_ROW, MGT_INIT_ZERO, 0);
	mgt_rows_add(bd, i, MGT_T_XKV_W, "cross_attention.linear_kv.weight", 2 * q, h, MGT_SHARD_ROW,
		     MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, i, MGT_T_XKV_B, "cross_attention.linear_kv.bias", 2 * q, 0, MGT_SHARD_ROW, MGT_INIT_ZERO, 0);
	/* T5 has no MoE layers (config_check: a family without moe refuses --num-experts) */
	mgt_layer_mlp_rows(bd, i);
}

/* Megatron-Core's T5Model on one stage (pipeline parallelism is refused, as pretrain_t5.py
 * refuses it): the shared embedding (word, learned positions), the relative position biases,
 * the encoder (L layers, final LayerNorm), the decoder (L layers, final LayerNorm), the LM head's
 * output layer (the tied word embedding with a vocabulary bias, or its own weight untied). */
void mgt_t5_rows(mgt_rows *bd)
{
	const mgt_model_config *c = bd->c;
	int64_t h = c->hidden_size, V = c->padded_vocab_size, L = c->num_layers;
	double std = c->init_method_std;
	mgt_rows_add(bd, -1, MGT_T_WORD_EMB, "embedding.word_embeddings.weight", V, h, MGT_SHARD_VOCAB,
		     MGT_INIT_NORMAL, std);
	if (!strcmp(c->position_embedding_type, "learned_absolute"))
		mgt_rows_add(bd, -1, MGT_T_POS_EMB, "embedding.position_embeddings.weight", c->max_position_embeddings,
			     h, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	if (!strcmp(c->position_embedding_type, "relative")) {
		int64_t nb = c->relative_attention_num_buckets, nh = c->num_attention_heads;
		mgt_rows_add(bd, -1, MGT_T_REL_ENC, "encoder_relative_pos_emb.relative_attention_bias.weight", nb, nh,
			     MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
		mgt_rows_add(bd, -1, MGT_T_REL_DEC, "decoder_relative_pos_emb.relative_attention_bias.weight", nb, nh,
			     MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	}
	for (int i = 0; i < L; i++) mgt_rows_layer(bd, i);
	mgt_rows_norm(bd, -1, MGT_T_ENC_FINAL_LN_W, "encoder.final_layernorm.weight", "encoder.final_layernorm.bias");
	for (int i = 0; i < L; i++) decoder_layer_rows(bd, (int)L + i);
	mgt_rows_norm(bd, -1, MGT_T_FINAL_LN_W, "decoder.final_layernorm.weight", "decoder.final_layernorm.bias");
	if (c->untie_embeddings_and_output_weights)
		mgt_rows_add(bd, -1, MGT_T_OUTPUT_W, "lm_head.output_layer.weight", V, h, MGT_SHARD_VOCAB,
			     MGT_INIT_NORMAL, std);
	else mgt_rows_add(bd, -1, MGT_T_OUTPUT_B, "lm_head.output_layer.bias", V, 0, MGT_SHARD_VOCAB, MGT_INIT_ZERO, 0);
}
