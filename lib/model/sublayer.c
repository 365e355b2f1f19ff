/* lib/model/sublayer.c: the pieces every layer kind and head shares (megatron/core/
 * tensor_parallel/mappings.py, layers.py; megatron/core/fusions/fused_bias_dropout.py): the
 * tensor-parallel reductions and gathers, a norm gathered over TP, the row-parallel output's
 * bias-dropout-add and their backwards, the linear wrappers (fp8 or the backend's), the dropout
 * keys and the vocabulary-parallel cross entropy.  It calls cp.c and fp8lin.c below it and no
 * layer, head or family file of lib/model. */
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

/* Key of dropout site `site` of layer l (l = -1: embedding). */
uint64_t mgt_sublayer_site_key(const mgt_model *m, int l, int site)
{
	return m->run.drop_key + (uint64_t)(l + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)site * 0xC2B2AE3D27D4EB4Full;
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
mgt_status mgt_sublayer_tp_reduce(mgt_model *m, void *full, mgt_elem_type t, void **out)
{
	size_t n = (size_t)m->Th * (size_t)m->h;
	mgt_comm *c = m->ps->tp_comm;
	*out = m->sp ? m->scratch.dloc : full;
	if (!m->sp) return tp_allreduce_t(m, full, n, t, MGT_RED_SUM);
	return c->ops->reduce_scatter(c, m->scratch.dloc, full, n, t);
}

/* Under sequence parallelism gather the rows [Th, h] (of type t) of every TP rank into full [T, h]. */
mgt_status mgt_sublayer_tp_gather(mgt_model *m, void *full, const void *part, mgt_elem_type t)
{
	if (!m->sp) return MGT_OK;
	mgt_comm *c = m->ps->tp_comm;
	return c->ops->allgather(c, full, part, (size_t)m->Th * (size_t)m->h, t);
}

/* The buffer a norm writes its [Th, h] output to before mgt_sublayer_tp_gather into full. */
static void *norm_out(mgt_model *m, void *full) { return m->sp ? (void *)m->scratch.lnl : full; }
/* The buffer a [Th, h] gradient goes to before mgt_sublayer_tp_gather into dtmp_h. */
void *mgt_sublayer_grad_part(mgt_model *m) { return m->sp ? m->scratch.dloc : m->scratch.dtmp_h; }

/* ---- forward ---- */

/* The piece of this rank's residual rows from local row t on (r0 <= t < r0 + Th) whose global
 * rows are consecutive: all of them without context parallelism; under it up to the end of a
 * chunk (or, packed documents, of a document's piece in a row: mgt_cp_global_row).  Returns
 * its length. */
static int64_t piece_len(const mgt_model *m, int64_t t)
{
	int64_t e = m->r0 + m->Th, g = mgt_cp_global_row(m, t), n = 1;
	if (m->cp.size <= 1) return e - t;
	while (t + n < e && mgt_cp_global_row(m, t + n) == g + n) n++;
	return n;
}

/* bda_fwd on this rank's residual rows (out, resid of mgt_model.prec.res_t; y of type yt), each
 * dropout element indexed by its global row. */
void mgt_sublayer_bda_fwd(mgt_model *m, void *out, const void *resid, const void *y, mgt_elem_type yt, const float *b,
			  float p, uint64_t key)
{
	int64_t h = m->h;
	const size_t es = mgt_elem_size(m->prec.res_t), ys = mgt_elem_size(yt);
	for (int64_t t = m->r0, n; t < m->r0 + m->Th; t += n) {
		size_t o = (size_t)((t - m->r0) * h);
		n = piece_len(m, t);
		m->be->ops->bda_fwd(m->be, (char *)out + o * es, resid ? (const char *)resid + o * es : NULL, m->prec.res_t,
				    (const char *)y + o * ys, yt, b, (int)n, (int)h, p, key,
				    (uint64_t)(mgt_cp_global_row(m, t) * h));
	}
}

/* bda_bwd likewise: dy (of type dyt) from the residual's gradient dres. */
void mgt_sublayer_bda_bwd(mgt_model *m, void *dy, mgt_elem_type dyt, float *db, float p, uint64_t key)
{
	int64_t h = m->h;
	const size_t es = mgt_elem_size(m->prec.res_t), ys = mgt_elem_size(dyt);
	for (int64_t t = m->r0, n; t < m->r0 + m->Th; t += n) {
		size_t o = (size_t)((t - m->r0) * h);
		n = piece_len(m, t);
		m->be->ops->bda_bwd(m->be, (char *)dy + o * ys, dyt, db, (const char *)m->scratch.dres + o * es, m->prec.res_t, (int)n,
				    (int)h, p, key, (uint64_t)(mgt_cp_global_row(m, t) * h));
	}
}

/* The norm of this rank's residual rows x (of res_t) into full [T, h] of type t (gathered over TP
 * under SP). */
mgt_status mgt_sublayer_norm_gather(mgt_model *m, void *full, mgt_elem_type t, float *mean, float *rstd, const void *x,
				    const mgt_tensor *w, const mgt_tensor *b)
{
	void *out = norm_out(m, full);
	m->be->ops->norm_fwd(m->be, m->norm, out, t, mean, rstd, x, m->prec.res_t, NW(m, w), P(m, b), m->Th, (int)m->h,
			     (float)m->c.norm_epsilon);
	return mgt_sublayer_tp_gather(m, full, out, t);
}

/* out = resid + dropout(reduce_TP(dtmp_h) + bias): the row-parallel output (of type yt) and its bda. */
mgt_status mgt_sublayer_reduce_bda(mgt_model *m, void *out, const void *resid, const mgt_tensor *bias, bool train,
				   uint64_t key, mgt_elem_type yt)
{
	void *y;
	mgt_status st = mgt_sublayer_tp_reduce(m, m->scratch.dtmp_h, yt, &y);
	if (st) return st;
	mgt_sublayer_bda_fwd(m, out, resid, y, yt, P(m, bias), drop_p(train, m->c.hidden_dropout), key);
	return MGT_OK;
}

/* Linear j (0 qkv, 1 proj, 2 fc1, 3 fc2) of local layer li: y[T, out] = x[T, in] . w^T (+ b), in
 * fp8 (fp8lin.c) or by the backend's linear_fwd. */
mgt_status mgt_sublayer_lin_fwd(mgt_model *m, int li, int j, void *y, mgt_elem_type yt, const void *x, mgt_elem_type xt,
				const mgt_tensor *w, const mgt_tensor *b, int in, int out)
{
	if (mgt_model_fp8_layer(m, li)) return mgt_model_fp8_fwd(m, li, j, y, yt, x, xt, W(m, w), WT(m), P(m, b));
	m->be->ops->linear_fwd(m->be, y, yt, x, xt, W(m, w), WT(m), P(m, b), m->T, in, out);
	return MGT_OK;
}

/* Its backward: dx (type dxt) written, the gradients of w and b accumulated. */
mgt_status mgt_sublayer_lin_bwd(mgt_model *m, int li, int j, void *dx, mgt_elem_type dxt, const mgt_tensor *w,
				const mgt_tensor *b, const void *dy, mgt_elem_type dyt, const void *x, mgt_elem_type xt,
				int in, int out)
{
	if (mgt_model_fp8_layer(m, li)) return mgt_model_fp8_bwd(m, li, j, dx, dxt, G(m, w), G(m, b), dy, dyt);
	m->be->ops->linear_bwd(m->be, dx, dxt, G(m, w), G(m, b), dy, dyt, x, xt, W(m, w), WT(m), m->T, in, out);
	return MGT_OK;
}

/* Where a norm feeding linear_qkv or linear_fc1 writes, and in what type: the layer's 16-bit
 * buffer, or under fp8 the fp32 scratch the cast reads (TE quantizes the fp32 norm output). */
void *mgt_sublayer_norm_dst(mgt_model *m, int li, void *buf, mgt_elem_type *t)
{
	bool f8 = mgt_model_fp8_layer(m, li);
	*t = f8 ? MGT_DT_F32 : m->prec.act_t;
	return f8 ? mgt_model_fp8_norm_out(m) : buf;
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
	o->xent_max(m->be, sa->mx, sa->logits, m->prec.act_t, T, V);
	if ((st = tp_allreduce(m, sa->mx, (size_t)T, MGT_RED_MAX))) return st;
	o->xent_stats(m->be, sa->sumexp, sa->tgt, sa->logits, m->prec.act_t, sa->labels, sa->mx, m->v0, T, V);
	if ((st = tp_allreduce(m, sa->sumexp, (size_t)T, MGT_RED_SUM))) return st;
	if ((st = tp_allreduce(m, sa->tgt, (size_t)T, MGT_RED_SUM))) return st;
	*sum = o->xent_loss(m->be, sa->loss, sa->mx, sa->sumexp, sa->tgt, sa->mask, T);
	return MGT_OK;
}

/* ---- backward ---- */

/* dres += d(norm input) from the [T, h] partial gradient in src (of type act_t) of a norm's
 * output (plus, when extra is not NULL, this rank's [Th, h] rows of a gradient of the same type
 * computed on them alone: the MoE router's, added after the reduction, rounded as Megatron's
 * bf16 autograd sums the two). */
mgt_status mgt_sublayer_reduce_norm_bwd(mgt_model *m, void *src, const void *x, const mgt_tensor *w,
					const mgt_tensor *b, const float *mean, const float *rstd, const void *extra)
{
	void *dy;
	mgt_status st = mgt_sublayer_tp_reduce(m, src, m->prec.act_t, &dy);
	if (st) return st;
	if (extra) m->be->ops->add(m->be, dy, extra, m->prec.act_t, (size_t)m->Th * (size_t)m->h);
	m->be->ops->norm_bwd(m->be, m->norm, m->scratch.dres, G(m, w), G(m, b), dy, m->prec.act_t, x, m->prec.res_t, NW(m, w), mean, rstd,
			     m->Th, (int)m->h);
	return MGT_OK;
}

/* dtmp_h [T, h] (of type t) = the gradient of a row-parallel output (before its bda), gathered
 * under SP. */
mgt_status mgt_sublayer_bda_bwd_gather(mgt_model *m, const mgt_tensor *bias, bool train, uint64_t key, mgt_elem_type t)
{
	void *part = mgt_sublayer_grad_part(m);
	mgt_sublayer_bda_bwd(m, part, t, G(m, bias), drop_p(train, m->c.hidden_dropout), key);
	return mgt_sublayer_tp_gather(m, m->scratch.dtmp_h, part, t);
}

