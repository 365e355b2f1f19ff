/* lib/model/embed_head.c: the embedding (word, learned positions, BERT's token types; megatron/
 * core/models/common/embeddings/language_model_embedding.py) and the head (final norm, output
 * layer and vocabulary-parallel cross entropy, or BERT's heads in bert.c; megatron/core/models/
 * gpt/gpt_model.py), forward and backward. */
#include "model_impl.h"

mgt_status mgt_model_embed_fwd(mgt_model *m, bool train, void *x0, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	slot_act *sa = m->cur;
	int T = m->T, Th = m->Th, h = (int)m->h;
	void *x;
	o->embedding_fwd(m->be, m->scratch.emb, sa->tokens, P(m, we), we->local_offset[0], we->local_shape[0], T, h, false);
	mgt_status st = mgt_sublayer_tp_reduce(m, m->scratch.emb, MGT_DT_F32, &x);
	if (st) return st;
	if (pe) o->embedding_fwd(m->be, x, sa->pos + m->r0, P(m, pe), 0, pe->shape[0], Th, h, true);
	const mgt_tensor *te = m->glob[MGT_T_TOKTYPE_EMB];
	if (te) o->embedding_fwd(m->be, x, sa->types + m->r0, P(m, te), 0, 2, Th, h, true);
	mgt_sublayer_bda_fwd(m, x0, NULL, x, MGT_DT_F32, NULL, drop_p(train, m->c.hidden_dropout), key);
	return MGT_OK;
}

mgt_status mgt_model_head_fwd(mgt_model *m, bool train, double *loss_sum)
{
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	mgt_status st = mgt_sublayer_norm_gather(m, sa->lnf, m->prec.act_t, sa->meanf, sa->rstdf, sa->res_out,
						 m->glob[MGT_T_FINAL_LN_W], m->glob[MGT_T_FINAL_LN_B]);
	if (st) return st;
	if (m->fam->lm_head) return mgt_bert_head_fwd(m, sa->lnf, train, loss_sum);
	m->be->ops->linear_fwd(m->be, sa->logits, m->prec.act_t, sa->lnf, m->prec.act_t, W(m, mgt_model_output_weight(m)), WT(m),
			       P(m, m->glob[MGT_T_OUTPUT_B]), T, h, V); /* T5's vocabulary bias (NULL for GPT) */
	return mgt_model_xent(m, loss_sum);
}

/* BERT: the gradient of the final norm's output is whole on every TP rank (bert.c): this rank's
 * rows of it go through the norm's backward without a reduction. */
static mgt_status bert_head_bwd(mgt_model *m, float scale)
{
	slot_act *sa = m->cur;
	mgt_status st = mgt_bert_head_bwd(m, sa->lnf, m->scratch.dtmp_h, scale);
	if (st) return st;
	size_t rows = (size_t)m->Th * (size_t)m->h;
	const char *dy = (const char *)m->scratch.dtmp_h + (size_t)m->r0 * (size_t)m->h * mgt_elem_size(m->prec.act_t);
	m->be->ops->zero(m->be, m->scratch.dres, rows * mgt_elem_size(m->prec.res_t));
	m->be->ops->norm_bwd(m->be, m->norm, m->scratch.dres, G(m, m->glob[MGT_T_FINAL_LN_W]), G(m, m->glob[MGT_T_FINAL_LN_B]), dy,
			     m->prec.act_t, sa->res_out, m->prec.res_t, NW(m, m->glob[MGT_T_FINAL_LN_W]), sa->meanf, sa->rstdf, m->Th,
			     (int)m->h);
	return MGT_OK;
}

mgt_status mgt_model_head_bwd(mgt_model *m, float scale)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h, V = (int)m->V_l;
	const mgt_tensor *w = mgt_model_output_weight(m);
	if (m->fam->lm_head) return bert_head_bwd(m, scale);
	o->xent_bwd(m->be, sa->logits, sa->logits, m->prec.act_t, sa->labels, sa->mx, sa->sumexp, sa->mask, scale, m->v0, T, V);
	o->linear_bwd(m->be, m->scratch.dtmp_h, m->prec.act_t, G(m, w), G(m, m->glob[MGT_T_OUTPUT_B]), sa->logits, m->prec.act_t, sa->lnf,
		      m->prec.act_t, W(m, w), WT(m), T, h, V);
	o->zero(m->be, m->scratch.dres, (size_t)m->Th * (size_t)h * mgt_elem_size(m->prec.res_t));
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, sa->res_out, m->glob[MGT_T_FINAL_LN_W],
					    m->glob[MGT_T_FINAL_LN_B], sa->meanf, sa->rstdf, NULL);
}

mgt_status mgt_model_embed_bwd(mgt_model *m, bool train, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB], *pe = m->glob[MGT_T_POS_EMB];
	slot_act *sa = m->cur;
	int T = m->T, h = (int)m->h;
	void *part = mgt_sublayer_grad_part(m);
	mgt_sublayer_bda_bwd(m, part, m->prec.act_t, NULL, drop_p(train, m->c.hidden_dropout), key);
	if (pe) o->embedding_bwd(m->be, G(m, pe), part, m->prec.act_t, sa->pos + m->r0, 0, pe->shape[0], m->Th, h);
	const mgt_tensor *te = m->glob[MGT_T_TOKTYPE_EMB];
	if (te) o->embedding_bwd(m->be, G(m, te), part, m->prec.act_t, sa->types + m->r0, 0, 2, m->Th, h);
	mgt_status st = mgt_sublayer_tp_gather(m, m->scratch.dtmp_h, part, m->prec.act_t);
	if (!st)
		o->embedding_bwd(m->be, G(m, we), m->scratch.dtmp_h, m->prec.act_t, sa->tokens, we->local_offset[0], we->local_shape[0],
				 T, h);
	return st;
}

