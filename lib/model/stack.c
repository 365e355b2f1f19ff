/* lib/model/stack.c: the dispatch: a micro-batch's upload, the forward and backward over the
 * chunk's stack of layers (megatron/core/transformer/transformer_block.py) by the family's recipe,
 * activation recomputation's reruns (megatron/core/tensor_parallel/random.py CheckpointFunction),
 * the gradient hook and the finishing reductions, and the outputs. */
#include "model_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* BERT's key mask from the padding mask (attended where >= 0.5, as Megatron's mask < 0.5). */
static mgt_status upload_kmask(mgt_model *m, const int64_t *padding_mask)
{
	for (int t = 0; t < m->T; t++) m->kmask_h[t] = padding_mask[t] >= 1;
	return m->be->ops->upload(m->be, m->cur->kmask, m->kmask_h, (size_t)m->T);
}

/* The micro-batch of a one-stack chunk (GPT, BERT) into the current slot. */
static mgt_status upload_batch(mgt_model *m, const mgt_microbatch *mb)
{
	const mgt_backend_ops *o = m->be->ops;
	slot_act *sa = m->cur;
	size_t n = (size_t)m->T * 4;
	mgt_status st = o->upload(m->be, sa->tokens, mb->tokens, n);
	if (!st) st = o->upload(m->be, sa->labels, mb->labels, n);
	const int32_t *pos = m->rope && mb->rope_position_ids ? mb->rope_position_ids : mb->position_ids;
	if (!st) st = o->upload(m->be, sa->pos, pos, n);
	if (!st) st = o->upload(m->be, sa->mask, mb->loss_mask, n);
	for (int t = 0; !st && sa->types && t < m->T; t++)
		if (mb->tokentype_ids[t] < 0 || mb->tokentype_ids[t] > 1)
			st = mgt_err(MGT_ERR_INPUT, "token %d of the micro-batch has token type %d: BERT's token-type "
				     "embedding has types 0 and 1", t, (int)mb->tokentype_ids[t]);
	if (!st && sa->types) st = o->upload(m->be, sa->types, mb->tokentype_ids, n);
	if (!st && sa->kmask) st = upload_kmask(m, mb->padding_mask);
	if (!st && sa->seg && !mb->seg_start)
		st = mgt_err(MGT_ERR_USAGE, "a packed-sequence model's micro-batch needs seg_start");
	if (!st && sa->seg) st = o->upload(m->be, sa->seg, mb->seg_start, n * (size_t)m->cp.size);
	if (!st && sa->cp_rows) st = mgt_cp_set_rows(m, mb->cp_rows);
	if (!st && m->fam->lm_head && m->last) mgt_bert_set_batch(m, mb); /* BERT's heads (bert.c) */
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

static const mgt_layer_kind_ops *kind_of(const mgt_model *m, int k) { return mgt_layer_kind_of(m->pattern[k]); }

/* Where symbol k of local layer li writes in the current slot: the input of the next symbol (its
 * layer's x_mid, or layer li + 1's x_in) or, after the last symbol of layer g1 - 1, last. */
static void *kind_out(mgt_model *m, int li, int k, int g1, void *last)
{
	if (k + 1 < m->k0[li + 1]) return m->cur->la[li].x_mid;
	return li + 1 < g1 ? (void *)m->cur->la[li + 1].x_in : last;
}

/* The forward of a one-stack chunk: the embedding (first stage), the layers' kinds in the
 * pattern's order (the caller runs the head). */
static mgt_status layers_fwd(mgt_model *m, bool train)
{
	mgt_status st = MGT_OK;
	if (m->first)
		st = mgt_model_embed_fwd(m, train, m->n_layers ? (void *)m->cur->la[0].x_in : (void *)m->cur->res_out,
					 mgt_sublayer_site_key(m, -1, 0));
	for (int li = 0; !st && li < m->n_layers; li++) {
		st = mgt_model_param_use(m, li, MGT_PARAM_NEED);
		if (!st) st = mgt_model_param_use(m, li + 1, MGT_PARAM_PREFETCH);
		for (int k = m->k0[li]; !st && k < m->k0[li + 1]; k++)
			st = kind_of(m, k)->fwd(m, li, train, kind_out(m, li, k, m->n_layers, m->cur->res_out));
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
	}
	return st;
}

static mgt_status layers_bwd(mgt_model *m, bool train, float grad_scale);

/* How each stack recipe (mgt_family.recipe, families.c) runs a micro-batch: its upload into the
 * current slot, its forward up to the head (run by mgt_model_forward on the last stage) and its
 * backward, the head's included.  GPT's decoder and BERT's encoder are one stack of layers (the
 * key mask and the heads set them apart); T5's two stacks and cross-attention are t5.c's. */
typedef struct {
	mgt_status (*upload)(mgt_model *m, const mgt_microbatch *mb);
	mgt_status (*forward)(mgt_model *m, bool train);
	mgt_status (*backward)(mgt_model *m, bool train, float grad_scale);
} stack_recipe;

static const stack_recipe recipes[] = {
	[MGT_STACK_DECODER] = { upload_batch, layers_fwd, layers_bwd },
	[MGT_STACK_ENCODER] = { upload_batch, layers_fwd, layers_bwd },
	[MGT_STACK_ENCODER_DECODER] = { mgt_t5_upload, mgt_t5_forward, mgt_t5_backward },
};

static const stack_recipe *recipe_of(const mgt_model *m) { return &recipes[m->fam->recipe]; }

mgt_status mgt_model_forward(mgt_model *m, int slot, const mgt_microbatch *mb, bool train, double *loss_sum)
{
	double t0 = mgt_now();
	*loss_sum = 0;
	mgt_status st = use_slot(m, slot);
	if (!st) st = recipe_of(m)->upload(m, mb);
	if (st) return st;
	mgt_model_lp_refresh(m);
	m->run.drop_key = m->cur->drop_key = m->run.next_key;
	st = recipe_of(m)->forward(m, train);
	if (!st && train) st = mgt_model_fp8_update(m, false); /* TE: at the exit of the block's fp8 autocast */
	if (!st && m->last) st = mgt_model_head_fwd(m, train, loss_sum);
	m->be->ops->sync(m->be);
	m->run.t_fwd += mgt_now() - t0;
	return st;
}

/* Rerun the forward of layers [g0, g1) from the input the slot kept, into the recomputation
 * scratch, with the slot's dropout key: the same values bit for bit.  The last symbol stops
 * before its output (out NULL: the backward does not need it; the MLP stops at its activation). */
static mgt_status recompute_group(mgt_model *m, int g0, int g1, bool train)
{
	mgt_status st = MGT_OK;
	for (int li = g0; !st && li < g1; li++) st = mgt_model_param_use(m, li, MGT_PARAM_NEED);
	for (int li = g0; !st && li < g1; li++)
		for (int k = m->k0[li]; !st && k < m->k0[li + 1]; k++)
			st = kind_of(m, k)->fwd(m, li, train, kind_out(m, li, k, g1, NULL));
	return st;
}

mgt_status mgt_model_backward(mgt_model *m, int slot, bool train, float grad_scale)
{
	double t0 = mgt_now();
	mgt_status st = use_slot(m, slot);
	if (st) return st;
	m->run.drop_key = m->cur->drop_key;
	/* FSDP: the units outside layers written (T5's backward: every unit) */
	st = mgt_model_commit_unit(m, MGT_BUF_GRADS, m->fam->recipe == MGT_STACK_ENCODER_DECODER ? INT_MIN : -1);
	if (!st) st = recipe_of(m)->backward(m, train, grad_scale); /* T5: gradients complete at the hook's INT_MIN only */
	if (!st && m->run.hook) st = m->run.hook(m->run.hook_ctx, m, INT_MIN);
	m->be->ops->sync(m->be);
	m->run.t_bwd += mgt_now() - t0;
	return st;
}

/* The backward of a GPT or BERT chunk: the head (last stage), the layers' kinds in the pattern's
 * reverse order (a recomputed group rerun first; under selective recomputation a kind's rerun
 * before its backward; the gradient hook after each layer), the embedding (first stage). */
static mgt_status layers_bwd(mgt_model *m, bool train, float grad_scale)
{
	mgt_status st = MGT_OK;
	if (m->last) st = mgt_model_head_bwd(m, grad_scale);
	if (!st && m->last && m->run.hook) st = m->run.hook(m->run.hook_ctx, m, INT_MAX);
	bool selective = m->L.recompute.granularity == MGT_RECOMPUTE_SELECTIVE;
	for (int li = m->n_layers - 1; !st && li >= 0; li--) {
		int g0, g1;
		if (mgt_model_rc_full(m, li) && (mgt_model_rc_group(m, li, &g0, &g1), li == g1 - 1))
			st = recompute_group(m, g0, g1, train);
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_NEED);
		if (!st) st = mgt_model_param_use(m, li - 1, MGT_PARAM_PREFETCH);
		if (!st) st = mgt_model_commit_unit(m, MGT_BUF_GRADS, li);
		for (int k = m->k0[li + 1] - 1; !st && k >= m->k0[li]; k--) {
			const mgt_layer_kind_ops *K = kind_of(m, k);
			if (selective && K->rerun) st = K->rerun(m, li, train);
			if (!st) st = K->bwd(m, li, train);
		}
		if (!st) st = mgt_model_param_use(m, li, MGT_PARAM_RELEASE);
		if (!st && m->run.hook) st = m->run.hook(m->run.hook_ctx, m, m->first_layer + li);
	}
	if (!st && train) st = mgt_model_fp8_update(m, true); /* TE: after the first fp8 module's backward */
	if (!st && m->first) st = mgt_model_embed_bwd(m, train, mgt_sublayer_site_key(m, -1, 0));
	return st;
}

void mgt_model_set_grad_hook(mgt_model *m, mgt_grad_hook hook, void *ctx)
{
	m->run.hook = hook;
	m->run.hook_ctx = ctx;
}

mgt_status mgt_model_finish_grads(mgt_model *m)
{
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < m->tt.n; i++) {
		const mgt_tensor *t = &m->tt.t[i];
		/* the head norms, and T5's relative position tables (each TP rank's columns: its heads) */
		bool qk = t->role == MGT_T_QNORM_W || t->role == MGT_T_QNORM_B || t->role == MGT_T_KNORM_W ||
			  t->role == MGT_T_KNORM_B || t->role == MGT_T_REL_ENC || t->role == MGT_T_REL_DEC;
		if (t->shard == MGT_SHARD_NONE && (m->sp || qk) && !mgt_bert_whole_grad(t->role) &&
		    !(st = mgt_model_commit(m, MGT_BUF_GRADS, t->offset, t->offset + t->numel)))
			st = mgt_model_tp_allreduce(m, G(m, t), t->numel, MGT_DT_F32);
	}
	const mgt_tensor *we = m->glob[MGT_T_WORD_EMB];
	mgt_comm *e = m->ps->emb_comm;
	bool tied = we && !m->c.untie_embeddings_and_output_weights && m->ps->pp > 1 && (m->first || m->last);
	if (!st && tied && e->size > 1) st = mgt_model_commit(m, MGT_BUF_GRADS, we->offset, we->offset + we->numel);
	if (!st && tied && e->size > 1) st = e->ops->allreduce(e, G(m, we), we->numel, MGT_DT_F32, MGT_RED_SUM);
	return st;
}

void mgt_model_take_times(mgt_model *m, double *fwd_s, double *bwd_s)
{
	*fwd_s = m->run.t_fwd;
	*bwd_s = m->run.t_bwd;
	m->run.t_fwd = m->run.t_bwd = 0;
}

/* The current slot's logits as fp32 (16-bit ones widened exactly, in place from the back: the
 * 2-byte elements fill the first half of out and element i moves only to a later place). */
static mgt_status download_logits(mgt_model *m, float *out)
{
	const size_t n = (size_t)m->T * (size_t)m->V_l;
	mgt_status st = m->be->ops->download(m->be, out, m->cur->logits, n * mgt_elem_size(m->prec.act_t));
	if (st || m->prec.act_t == MGT_DT_F32) return st;
	const uint16_t *h = (const uint16_t *)out;
	for (size_t i = n; i-- > 0;) {
		uint16_t v = h[i];
		out[i] = m->prec.act_t == MGT_DT_BF16 ? mgt_bf16_to_f32(v) : mgt_f16_to_f32(v);
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
