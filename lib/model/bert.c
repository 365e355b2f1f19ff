/* lib/model/bert.c: the heads and losses of Megatron-Core's BertModel
 * (megatron/core/models/bert/{bert_model,bert_lm_head,pooler}.py,
 * examples/bert/pretrain_bert.py loss_func) on the last pipeline stage of a "bert" chunk, and
 * BERT's own tensor table rows (mgt_bert_rows_embedding, mgt_bert_rows_heads).
 *
 * From the encoder's final LayerNorm output lnf [T, h] (gathered over TP under sequence
 * parallelism, as the GPT head's):
 *   LM head   hd = lnf Wd^T, hg = gelu_erf(hd + bd), hl = LayerNorm(hg)  [T, h], on every TP
 *             rank alike (get_linear_layer: replicated weights), then the vocab-parallel logits
 *             hl E^T + output bias and Megatron's vocab-parallel cross entropy;
 *             lm = sum_t ce_t mask_t / sum_t mask_t over the micro-batch (mask: loss_mask).
 *   Pooler    pooled_j = tanh(Wp lnf[CLS of sequence j] + bp) (position 0: rows 0..b-1 of the
 *             sequence-first layout), binary head logits_j = Wb pooled_j + bb [b, 2];
 *             sop = the mean over the sequences with is_random >= 0 of CE(logits_j, is_random_j)
 *             (ignore_index -1), 0 when there is none.
 * The micro-batch's loss is lm + sop (a mean: Megatron divides each micro-batch's loss by the
 * number of micro-batches, not by tokens).  The pooler and binary head (b x h, a few sequences)
 * run on the host in fp32 from the downloaded [CLS] rows and parameters; their gradients are
 * uploaded and added.  The gradient of lnf is whole on every TP rank (the output layer's partial
 * input gradient is all-reduced first), so the final LayerNorm's backward takes this rank's rows
 * of it without a further reduction.
 */
#include "model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per slot: the LM head's activations (backend, act_t; statistics fp32) and the host side of the
 * pooler for the micro-batch in flight. */
struct bert_act {
	void *hd, *hg, *hl;
	float *meanh, *rstdh;
	double *x, *pooled, *logits; /* host: [CLS] rows [b, h], pooled [b, h], binary logits [b, 2] */
	int32_t *is_random;         /* host [b] */
	double lm_den, lm, sop;
	int n_sop;
	int64_t n_masked, n_correct; /* evaluation: masked tokens, those whose label has the top logit */
};

struct bert_state {
	struct bert_act *act;  /* [slots] */
	void *dh;              /* backend [T, h] act_t: the LM head's gradient scratch */
	void *up;              /* backend [max(b h, 2 h + 2 + h h + h)] floats: uploads */
	float *w;              /* host copies of the pooler's and binary head's parameters */
	/* host scratch made once: the heads' gradients in double [h h + 3 h + 2 + b h + h], their
	 * upload in float [max(h h + 3 h + 2, b h)], the accuracy's mx, tgt, mask [3 T] */
	double *g;
	float *uph, *acc;
};

static float elem(const void *x, mgt_elem_type t, size_t i)
{
	if (t == MGT_DT_BF16) return mgt_bf16_to_f32(((const uint16_t *)x)[i]);
	if (t == MGT_DT_F16) return mgt_f16_to_f32(((const uint16_t *)x)[i]);
	return ((const float *)x)[i];
}

static void put(void *x, mgt_elem_type t, size_t i, float v)
{
	if (t == MGT_DT_BF16) ((uint16_t *)x)[i] = mgt_f32_to_bf16(v);
	else if (t == MGT_DT_F16) ((uint16_t *)x)[i] = mgt_f32_to_f16(v);
	else ((float *)x)[i] = v;
}

mgt_status mgt_bert_alloc(mgt_model *m)
{
	if (!mgt_model_family(&m->c)->lm_head || !m->last) return MGT_OK;
	struct bert_state *s = mgt_malloc(sizeof *s);
	if (!s) return MGT_ERR_NOMEM;
	memset(s, 0, sizeof *s);
	m->bert = s;
	const size_t T = (size_t)m->T, h = (size_t)m->h, b = (size_t)m->b, es = mgt_elem_size(m->prec.act_t);
	mgt_status st = MGT_OK;
	if (!(s->act = mgt_malloc((size_t)m->L.slots * sizeof *s->act))) return MGT_ERR_NOMEM;
	memset(s->act, 0, (size_t)m->L.slots * sizeof *s->act);
	for (int k = 0; !st && k < m->L.slots; k++) {
		struct bert_act *a = &s->act[k];
		a->hd = mgt_model_balloc(m, T * h * es, &m->mem.act_bytes, &st);
		a->hg = mgt_model_balloc(m, T * h * es, &m->mem.act_bytes, &st);
		a->hl = mgt_model_balloc(m, T * h * es, &m->mem.act_bytes, &st);
		a->meanh = mgt_model_balloc(m, T * 4, &m->mem.act_bytes, &st);
		a->rstdh = mgt_model_balloc(m, T * 4, &m->mem.act_bytes, &st);
		a->x = mgt_malloc(b * h * 8);
		a->pooled = mgt_malloc(b * h * 8);
		a->logits = mgt_malloc(b * 2 * 8);
		a->is_random = mgt_malloc(b * 4);
		if (!st && (!a->x || !a->pooled || !a->logits || !a->is_random)) st = MGT_ERR_NOMEM;
	}
	const size_t n = h * h + 3 * h + 2, up = n > b * h ? n : b * h;
	s->dh = mgt_model_balloc(m, T * h * es, &m->mem.work_bytes, &st);
	s->up = mgt_model_balloc(m, up * 4, &m->mem.work_bytes, &st);
	s->w = mgt_malloc(n * sizeof *s->w);
	s->g = mgt_malloc((n + b * h + h) * sizeof *s->g);
	s->uph = mgt_malloc(up * sizeof *s->uph);
	s->acc = mgt_malloc(3 * T * sizeof *s->acc);
	if (!st && (!s->w || !s->g || !s->uph || !s->acc)) st = MGT_ERR_NOMEM;
	return st;
}

void mgt_bert_free(mgt_model *m)
{
	struct bert_state *s = m->bert;
	if (!s) return;
	for (int k = 0; s->act && k < m->L.slots; k++) {
		struct bert_act *a = &s->act[k];
		if (!m->mem.dry) {
			void *bufs[] = { a->hd, a->hg, a->hl, a->meanh, a->rstdh };
			for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) m->be->ops->free(m->be, bufs[i]);
		}
		free(a->x); free(a->pooled); free(a->logits); free(a->is_random);
	}
	if (!m->mem.dry) {
		m->be->ops->free(m->be, s->dh);
		m->be->ops->free(m->be, s->up);
	}
	free(s->act);
	free(s->w); free(s->g); free(s->uph); free(s->acc);
	free(s);
	m->bert = NULL;
}

static struct bert_act *cur(mgt_model *m) { return &m->bert->act[m->cur - m->sa]; }

void mgt_bert_set_batch(mgt_model *m, const mgt_microbatch *mb)
{
	struct bert_act *a = cur(m);
	double den = 0;
	for (int t = 0; t < m->T; t++) den += mb->loss_mask[t];
	a->lm_den = den;
	memcpy(a->is_random, mb->is_random, (size_t)m->b * sizeof *a->is_random);
}

bool mgt_bert_whole_grad(mgt_tensor_role r)
{
	return r == MGT_T_LMH_W || r == MGT_T_LMH_B || r == MGT_T_LMH_LN_W || r == MGT_T_LMH_LN_B || r == MGT_T_POOL_W ||
	       r == MGT_T_POOL_B || r == MGT_T_BIN_W || r == MGT_T_BIN_B;
}

/* The host parameters of the pooler (Wp [h, h], bp [h]) and binary head (Wb [2, h], bb [2]),
 * back to back in s->w. */
static mgt_status download_head(mgt_model *m)
{
	const mgt_tensor *t[4] = { m->glob[MGT_T_POOL_W], m->glob[MGT_T_POOL_B], m->glob[MGT_T_BIN_W],
				   m->glob[MGT_T_BIN_B] };
	float *w = m->bert->w;
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < 4; i++) {
		st = m->be->ops->download(m->be, w, P(m, t[i]), t[i]->numel * sizeof(float));
		w += t[i]->numel;
	}
	return st;
}

/* The pooler, binary head and sentence-order loss of the current slot, on the host. */
static mgt_status sop_fwd(mgt_model *m, const void *lnf)
{
	struct bert_act *a = cur(m);
	const int b = m->b, h = (int)m->h;
	const size_t es = mgt_elem_size(m->prec.act_t);
	a->sop = 0;
	a->n_sop = 0;
	if (!m->c.bert_binary_head) return MGT_OK;
	void *raw = a->pooled; /* the [CLS] rows as stored, widened into x below */
	mgt_status st = m->be->ops->download(m->be, raw, lnf, (size_t)b * h * es);
	if (!st) st = download_head(m);
	if (st) return st;
	for (size_t i = (size_t)b * h; i-- > 0;) a->x[i] = elem(raw, m->prec.act_t, i); /* backwards: raw is a->pooled */
	const float *Wp = m->bert->w, *bp = Wp + (size_t)h * h, *Wb = bp + h, *bb = Wb + 2 * (size_t)h;
	for (int j = 0; j < b; j++) {
		const double *x = a->x + (size_t)j * h;
		double *p = a->pooled + (size_t)j * h;
		for (int o = 0; o < h; o++) {
			double acc = bp[o];
			for (int i = 0; i < h; i++) acc += (double)Wp[(size_t)o * h + i] * x[i];
			p[o] = tanh(acc);
		}
		for (int c = 0; c < 2; c++) {
			double acc = bb[c];
			for (int i = 0; i < h; i++) acc += (double)Wb[(size_t)c * h + i] * p[i];
			a->logits[2 * j + c] = acc;
		}
		int y = a->is_random[j];
		if (y < 0) continue;
		double l0 = a->logits[2 * j], l1 = a->logits[2 * j + 1], mx = l0 > l1 ? l0 : l1;
		a->sop += log(exp(l0 - mx) + exp(l1 - mx)) + mx - (y ? l1 : l0);
		a->n_sop++;
	}
	if (a->n_sop) a->sop /= a->n_sop;
	return MGT_OK;
}

/* Masked tokens whose label's logit is the largest of the padded vocabulary (ties count): the
 * target logit (summed over TP) against the row's maximum (max-reduced over TP). */
static mgt_status accuracy(mgt_model *m)
{
	struct bert_act *a = cur(m);
	slot_act *sa = m->cur;
	const size_t T = (size_t)m->T;
	float *h = m->bert->acc;
	mgt_status st = m->be->ops->download(m->be, h, sa->mx, T * sizeof *h);
	if (!st) st = m->be->ops->download(m->be, h + T, sa->tgt, T * sizeof *h);
	if (!st) st = m->be->ops->download(m->be, h + 2 * T, sa->mask, T * sizeof *h);
	a->n_masked = a->n_correct = 0;
	for (size_t t = 0; !st && t < T; t++) {
		if (h[2 * T + t] == 0) continue;
		a->n_masked++;
		a->n_correct += h[T + t] >= h[t];
	}
	return st;
}

mgt_status mgt_bert_head_fwd(mgt_model *m, const void *lnf, bool train, double *loss)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	struct bert_act *a = cur(m);
	const int T = m->T, h = (int)m->h, V = (int)m->V_l;
	o->linear_fwd(m->be, a->hd, m->prec.act_t, lnf, m->prec.act_t, W(m, m->glob[MGT_T_LMH_W]), WT(m), NULL, T, h, h);
	o->bias_act_fwd(m->be, MGT_ACT_GELU, a->hg, m->prec.act_t, a->hd, m->prec.act_t, P(m, m->glob[MGT_T_LMH_B]), T, h);
	o->norm_fwd(m->be, MGT_NORM_LAYERNORM, a->hl, m->prec.act_t, a->meanh, a->rstdh, a->hg, m->prec.act_t,
		    NW(m, m->glob[MGT_T_LMH_LN_W]), P(m, m->glob[MGT_T_LMH_LN_B]), T, h, (float)m->c.norm_epsilon);
	o->linear_fwd(m->be, sa->logits, m->prec.act_t, a->hl, m->prec.act_t, W(m, mgt_model_output_weight(m)), WT(m),
		      P(m, m->glob[MGT_T_OUTPUT_B]), T, h, V);
	double ce;
	mgt_status st = mgt_model_xent(m, &ce);
	if (!st && !train) st = accuracy(m);
	if (!st) st = sop_fwd(m, lnf);
	a->lm = a->lm_den > 0 ? ce / a->lm_den : 0;
	*loss = a->lm + a->sop;
	return st;
}

void mgt_model_bert_losses(mgt_model *m, int slot, double *lm, double *sop)
{
	const struct bert_act *a = &m->bert->act[slot];
	*lm = a->lm;
	*sop = a->sop;
}

void mgt_model_bert_accuracy(mgt_model *m, int slot, int64_t *masked, int64_t *correct)
{
	const struct bert_act *a = &m->bert->act[slot];
	*masked = a->n_masked;
	*correct = a->n_correct;
}

/* Gradients of the pooler and binary head (added to G) and of the [CLS] rows of lnf (added into
 * dlnf's first b rows, of act_t), the sentence-order loss scaled by scale / n. */
static mgt_status sop_bwd(mgt_model *m, void *dlnf, float scale)
{
	struct bert_act *a = cur(m);
	if (!m->c.bert_binary_head || !a->n_sop) return MGT_OK;
	const int b = m->b, h = (int)m->h;
	const size_t hh = (size_t)h * h, n = hh + 3 * (size_t)h + 2, all = n + (size_t)b * h + h;
	const float *Wp = m->bert->w, *Wb = Wp + hh + h;
	double *g = m->bert->g;
	float *up = m->bert->uph;
	memset(g, 0, all * sizeof *g);
	double *gWp = g, *gbp = g + hh, *gWb = gbp + h, *gbb = gWb + 2 * (size_t)h, *dx = g + n, *dp = dx + (size_t)b * h;
	const double s = (double)scale / a->n_sop;
	for (int j = 0; j < b; j++) {
		int y = a->is_random[j];
		if (y < 0) continue;
		const double *x = a->x + (size_t)j * h, *p = a->pooled + (size_t)j * h;
		double p1 = 1.0 / (1.0 + exp(a->logits[2 * j] - a->logits[2 * j + 1]));
		double dl[2] = { (1.0 - p1 - (y == 0)) * s, (p1 - (y == 1)) * s };
		for (int c = 0; c < 2; c++) gbb[c] += dl[c];
		for (int i = 0; i < h; i++) {
			gWb[i] += dl[0] * p[i];
			gWb[h + i] += dl[1] * p[i];
			dp[i] = (dl[0] * Wb[i] + dl[1] * Wb[h + i]) * (1.0 - p[i] * p[i]);
		}
		for (int o = 0; o < h; o++) {
			gbp[o] += dp[o];
			for (int i = 0; i < h; i++) {
				gWp[(size_t)o * h + i] += dp[o] * x[i];
				dx[(size_t)j * h + i] += dp[o] * Wp[(size_t)o * h + i];
			}
		}
	}
	const mgt_tensor *t[4] = { m->glob[MGT_T_POOL_W], m->glob[MGT_T_POOL_B], m->glob[MGT_T_BIN_W],
				   m->glob[MGT_T_BIN_B] };
	const mgt_backend_ops *o = m->be->ops;
	for (size_t i = 0; i < n; i++) up[i] = (float)g[i];
	mgt_status st = o->upload(m->be, m->bert->up, up, n * sizeof *up);
	for (int i = 0, off = 0; !st && i < 4; off += (int)t[i]->numel, i++)
		o->add(m->be, G(m, t[i]), (float *)m->bert->up + off, MGT_DT_F32, t[i]->numel);
	for (size_t i = 0; i < (size_t)b * h; i++) put(up, m->prec.act_t, i, (float)dx[i]); /* rounded as the sum below */
	if (!st) st = o->upload(m->be, m->bert->up, up, (size_t)b * h * mgt_elem_size(m->prec.act_t));
	if (!st) o->add(m->be, dlnf, m->bert->up, m->prec.act_t, (size_t)b * h);
	return st;
}

mgt_status mgt_bert_head_bwd(mgt_model *m, const void *lnf, void *dlnf, float scale)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	struct bert_act *a = cur(m);
	const int T = m->T, h = (int)m->h, V = (int)m->V_l;
	const mgt_tensor *w = mgt_model_output_weight(m), *ln = m->glob[MGT_T_LMH_LN_W];
	void *dh = m->bert->dh;
	const float lm_scale = a->lm_den > 0 ? scale / (float)a->lm_den : 0.0f;
	o->xent_bwd(m->be, sa->logits, sa->logits, m->prec.act_t, sa->labels, sa->mx, sa->sumexp, sa->mask, lm_scale, m->v0, T,
		    V);
	o->linear_bwd(m->be, dlnf, m->prec.act_t, G(m, w), G(m, m->glob[MGT_T_OUTPUT_B]), sa->logits, m->prec.act_t, a->hl, m->prec.act_t,
		      W(m, w), WT(m), T, h, V);
	mgt_status st = mgt_model_tp_allreduce(m, dlnf, (size_t)T * h, m->prec.act_t); /* d hl, whole */
	if (st) return st;
	o->zero(m->be, dh, (size_t)T * h * mgt_elem_size(m->prec.act_t));
	o->norm_bwd(m->be, MGT_NORM_LAYERNORM, dh, G(m, ln), G(m, m->glob[MGT_T_LMH_LN_B]), dlnf, m->prec.act_t, a->hg,
		    m->prec.act_t, NW(m, ln), a->meanh, a->rstdh, T, h);
	o->bias_act_bwd(m->be, MGT_ACT_GELU, dlnf, G(m, m->glob[MGT_T_LMH_B]), dh, m->prec.act_t, a->hd, m->prec.act_t,
			P(m, m->glob[MGT_T_LMH_B]), T, h);
	o->linear_bwd(m->be, dh, m->prec.act_t, G(m, m->glob[MGT_T_LMH_W]), NULL, dlnf, m->prec.act_t, lnf, m->prec.act_t,
		      W(m, m->glob[MGT_T_LMH_W]), WT(m), T, h, h);
	o->copy(m->be, dlnf, dh, (size_t)T * h * mgt_elem_size(m->prec.act_t));
	return sop_bwd(m, dlnf, scale);
}

/* ---- the table rows ---- */

/* The embedding's token-type row (BERT with the binary head: two sentence types; bert_model.py
 * num_tokentypes = 2), after the word and position embeddings on the first stage. */
void mgt_bert_rows_embedding(mgt_rows *bd)
{
	const mgt_model_config *c = bd->c;
	if (c->bert_binary_head)
		mgt_rows_add(bd, -1, MGT_T_TOKTYPE_EMB, "embedding.tokentype_embeddings.weight", 2, c->hidden_size,
			     MGT_SHARD_NONE, MGT_INIT_NORMAL, c->init_method_std);
}

/* BertModel's last-stage tensors in its registration order (megatron/core/models/bert/
 * bert_model.py, bert_lm_head.py, pooler.py): the encoder's final LayerNorm, BertLMHead (dense
 * h x h with bias, then LayerNorm: get_linear_layer, replicated over TP), the output layer
 * (ColumnParallelLinear over the padded vocabulary: its weight only when untied, its bias
 * zero-initialized), then with the binary head binary_head (h -> 2) and the pooler's dense. */
void mgt_bert_rows_heads(mgt_rows *bd)
{
	const mgt_model_config *c = bd->c;
	int64_t h = c->hidden_size, V = c->padded_vocab_size;
	double std = c->init_method_std;
	mgt_rows_norm(bd, -1, MGT_T_FINAL_LN_W, "encoder.final_layernorm.weight", "encoder.final_layernorm.bias");
	mgt_rows_add(bd, -1, MGT_T_LMH_W, "lm_head.dense.weight", h, h, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, -1, MGT_T_LMH_B, "lm_head.dense.bias", h, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
	mgt_rows_norm(bd, -1, MGT_T_LMH_LN_W, "lm_head.layer_norm.weight", "lm_head.layer_norm.bias");
	if (c->untie_embeddings_and_output_weights)
		mgt_rows_add(bd, -1, MGT_T_OUTPUT_W, "output_layer.weight", V, h, MGT_SHARD_VOCAB,
			     MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, -1, MGT_T_OUTPUT_B, "output_layer.bias", V, 0, MGT_SHARD_VOCAB, MGT_INIT_ZERO, 0);
	if (!c->bert_binary_head) return;
	mgt_rows_add(bd, -1, MGT_T_BIN_W, "binary_head.weight", 2, h, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, -1, MGT_T_BIN_B, "binary_head.bias", 2, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
	mgt_rows_add(bd, -1, MGT_T_POOL_W, "pooler.dense.weight", h, h, MGT_SHARD_NONE, MGT_INIT_NORMAL, std);
	mgt_rows_add(bd, -1, MGT_T_POOL_B, "pooler.dense.bias", h, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
}
