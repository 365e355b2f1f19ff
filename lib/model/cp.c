/* lib/model/cp.c: core attention under context parallelism (Transformer Engine's
 * transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, which
 * Megatron-Core's --context-parallel-size runs).
 *
 * With context-parallel size c each sequence of S positions is cut into 2c chunks of C = S/(2c)
 * and rank r of the context-parallel group keeps chunks r and 2c-1-r (Megatron-Core's
 * get_batch_on_this_cp_rank: the causal work is balanced).  Everything but core attention runs
 * on the local s = 2C positions unchanged; core attention needs every earlier position's keys
 * and values, which live on the other ranks.  Two ways to bring them (TransformerEngine's
 * context_parallel.py, --cp-comm-type):
 *
 *   p2p (ring): the local keys and values [s*b, ng, 2, d] go around the ring (send to r+1,
 *     receive from r-1) in c steps; at step i this rank holds rank (r-i)'s chunks and runs the
 *     visible (query chunk, key chunk) blocks, merging the partial outputs by log-sum-exp.  The
 *     send of step i is posted before its blocks are computed (the MPI communicator sends from a
 *     copy without waiting), the receive waits after them.  The backward sends the keys and
 *     values around again with their gradient dK, dV, which every rank adds to; after c steps
 *     the gradient is one hop short of its owner and takes that hop.
 *   allgather: the keys and values of the whole sequence are all-gathered (and reordered into
 *     position order); each local query chunk attends to all earlier positions in one block.
 *     The backward all-gathers them again and reduce-scatters dK, dV (Llama 3 section 3.3.2).
 *
 *   a2a (Ulysses; DeepSpeed-Ulysses, Jacobs et al. 2023): an all-to-all gives each rank the whole
 *     sequence of ng/c of its query groups (every head of a group stays together, so grouped-query
 *     attention works as is), core attention runs there as in one process (attn_forward over the
 *     whole sequence: the same kernel, positions and dropout indices), and a second all-to-all
 *     returns the output to the ranks that hold the tokens.  The backward does the same with the
 *     gradients, redoing the forward's exchanges of qkv and ctx (nothing of the whole sequence is
 *     kept between the forward and the backward).
 *
 * Packed documents (--sft: Megatron's THD batches) are split per document instead
 * (_get_batch_on_this_cp_rank_per_document_balancing, Transformer Engine's
 * thd_get_partitioned_indices): every conversation, padded to a multiple of 2c, is cut into 2c
 * chunks and rank r keeps chunks r and 2c-1-r of each.  The trainer gives each micro-batch's rows
 * of every rank (mgt_microbatch.cp_rows) and the whole micro-batch's document starts; a2a runs
 * them as one process does (its row maps rebuilt for the micro-batch, the attention over the
 * whole sequence within the documents).  p2p and allgather, whose blocks take whole chunks of
 * the row, refuse packed documents.
 *
 * Under --bf16/--fp16 qkv and ctx (and the gradients of ctx and qkv) are 16-bit as without
 * context parallelism.  p2p and allgather run their fp32 blocks on fp32 copies (qkv and ctx
 * widened, the merged output rounded into ctx once, dqkv rounded once) and move the keys and
 * values in 16 bits: exactly their values, since they come from the 16-bit qkv.  The gradient
 * dK, dV, summed along the ring or by the reduce-scatter, stays fp32.  a2a moves 16-bit rows and
 * runs attn_forward / attn_backward on them as one process does.
 *
 * Bytes each rank sends per layer and micro-batch, with B = s*b*ng*2*d*e (its local keys and
 * values, e = 4 in fp32, 2 in 16 bits) and B4 the same at 4 bytes: p2p forward (c-1) B,
 * backward (c-1) B + c B4; allgather forward (c-1) B, backward (c-1) B + (c-1) B4.  a2a, with
 * Q = s*b*ng*(r+2)*d*e and O = s*b*ng*r*d*e (the rank's qkv and ctx): forward (c-1)/c (Q + O),
 * backward (c-1)/c (2Q + 2O).  Selective recomputation repeats the forward's.
 */
#include "model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_KV = 21, TAG_DKV = 22 };

/* Global chunk of local chunk h (0: the first half of the local positions). */
static int gchunk(const mgt_model *m, int h) { return h ? 2 * m->cp.size - 1 - m->cp.rank : m->cp.rank; }

static size_t kv_numel(const mgt_model *m) { return (size_t)m->T * (size_t)m->ng_l * 2 * (size_t)m->d; }

/* Elements of one chunk of C positions in a [rows, width] activation. */
static size_t chunk_numel(const mgt_model *m, int64_t width) { return (size_t)m->cp.C * (size_t)m->b * (size_t)width; }

int64_t mgt_cp_row(int64_t chunk_rows, int cp, int q, int64_t t)
{
	return t < chunk_rows ? t + q * chunk_rows : t - chunk_rows + (int64_t)(2 * cp - 1 - q) * chunk_rows;
}

/* The global row of local row t of context rank q: rows[q T + t] (packed documents: the
 * micro-batch's per-document split), else the fixed zigzag. */
static int64_t grow_of(const mgt_model *m, const int32_t *rows, int q, int64_t t)
{
	return rows ? rows[(int64_t)q * m->T + t] : mgt_cp_row((int64_t)m->cp.C * m->b, m->cp.size, q, t);
}

/* a2a: the row maps over n = cp T rows of one block of ng/cp query groups, of the global rows
 * `rows` (grow_of): pack[q T + t] = t cp + q (the rank's qkv or ctx, group block q of row t, to
 * the send order), unpack its inverse, to_glob[G(q, t)] = q T + t (received rows to position
 * order), from_glob[q T + t] = G(q, t) (position order to the send order). */
static mgt_status a2a_maps(mgt_model *m, const int32_t *rows)
{
	size_t T = (size_t)m->T, c = (size_t)m->cp.size;
	int32_t *h = m->cp.a2a.host, *pack = h, *unpack = h + c * T, *to = h + 2 * c * T, *from = h + 3 * c * T;
	for (size_t q = 0; q < c; q++)
		for (size_t t = 0; t < T; t++) {
			size_t i = q * T + t, g = (size_t)grow_of(m, rows, (int)q, (int64_t)t);
			pack[i] = (int32_t)(t * c + q);
			unpack[t * c + q] = (int32_t)i;
			to[g] = (int32_t)i;
			from[i] = (int32_t)g;
		}
	mgt_status st = MGT_OK;
	for (int k = 0; !st && k < 4; k++) st = m->be->ops->upload(m->be, m->cp.a2a.idx[k], h + (size_t)k * c * T, c * T * 4);
	return st;
}

/* The row maps (the host copy too: packed documents rebuild them per micro-batch) with the fixed
 * zigzag's, once: a2a's attention and the Mamba layers' exchanges use them. */
mgt_status mgt_cp_maps_alloc(mgt_model *m)
{
	if (m->cp.a2a.idx[0]) return MGT_OK;
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, c = (size_t)m->cp.size;
	for (int k = 0; k < 4; k++)
		m->cp.a2a.idx[k] = (int32_t *)mgt_model_balloc(m, c * T * sizeof(int32_t), &m->mem.work_bytes, &st);
	if (st || m->mem.dry) return st;
	m->cp.a2a.cnt = mgt_malloc(4 * c * sizeof *m->cp.a2a.cnt);
	m->cp.a2a.host = mgt_malloc(4 * c * T * sizeof *m->cp.a2a.host);
	if (!m->cp.a2a.cnt || !m->cp.a2a.host) return MGT_ERR_NOMEM;
	return a2a_maps(m, NULL);
}

/* a2a: the buffers and the row maps. */
static mgt_status a2a_alloc(mgt_model *m)
{
	mgt_status st = MGT_OK;
	size_t T = (size_t)m->T, nq = T * (size_t)m->qkv_l, no = T * (size_t)(m->nq_l * m->d);
#define W(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.work_bytes, &st)
	m->cp.a2a.snd = W(nq); m->cp.a2a.rcv = W(nq); m->cp.a2a.q = W(nq); m->cp.a2a.dq = W(nq);
	m->cp.a2a.o = W(no); m->cp.a2a.dout = W(no);
#undef W
	return st ? st : mgt_cp_maps_alloc(m);
}

/* a2a with packed documents: the row maps of the current slot's micro-batch (rebuilt when
 * another micro-batch's are in place). */
mgt_status mgt_cp_use_maps(mgt_model *m)
{
	const slot_act *sa = m->cur;
	if (!sa->cp_rows || (m->cp.maps_slot == sa && m->cp.maps_ver == sa->cp_ver)) return MGT_OK;
	mgt_status st = a2a_maps(m, sa->cp_rows);
	m->cp.maps_slot = st ? NULL : sa;
	m->cp.maps_ver = sa->cp_ver;
	return st;
}

mgt_status mgt_cp_set_rows(mgt_model *m, const int32_t *rows)
{
	if (!rows) return mgt_err(MGT_ERR_USAGE, "a packed-sequence micro-batch under context parallelism needs cp_rows");
	memcpy(m->cur->cp_rows, rows, (size_t)m->cp.size * (size_t)m->T * sizeof *rows);
	m->cur->cp_ver = ++m->cp.ver;
	return MGT_OK;
}

/* qkv and ctx in 16 bits (act_t): the p2p and allgather blocks then run on fp32 copies. */
static bool lp(const mgt_model *m) { return m->prec.act_t != MGT_DT_F32; }

mgt_status mgt_cp_alloc(mgt_model *m)
{
	if (m->cp.size <= 1 || !m->n_layers) return MGT_OK;
	if (m->L.cp_comm == MGT_CP_A2A) return a2a_alloc(m);
	mgt_status st = MGT_OK;
	size_t kv = kv_numel(m), c = (size_t)m->cp.size, nq = (size_t)m->T * (size_t)m->qkv_l;
	size_t no = (size_t)m->T * (size_t)(m->nq_l * m->d);
#define W(n) (float *)mgt_model_balloc(m, (size_t)(n) * sizeof(float), &m->mem.work_bytes, &st)
	m->cp.buf.kv = W(kv);
	m->cp.buf.dkv = W(kv);
	if (m->L.cp_comm == MGT_CP_P2P) {
		m->cp.buf.ob = W(chunk_numel(m, m->nq_l * m->d));
		m->cp.buf.lb = W((size_t)m->b * (size_t)m->nq_l * (size_t)m->s);
	} else {
		m->cp.buf.all = W(c * kv);
		m->cp.buf.glob = W(c * kv);
		m->cp.buf.dglob = W(c * kv);
	}
	if (lp(m)) {
		m->cp.buf.q32 = W(nq); m->cp.buf.dq32 = W(nq); m->cp.buf.o32 = W(no); m->cp.buf.g32 = W(no);
		m->cp.buf.kv16 = W(kv / 2 + 1);
		if (m->L.cp_comm != MGT_CP_P2P) m->cp.buf.all16 = W(c * kv / 2 + 1);
	}
#undef W
	return st;
}

void mgt_cp_free(mgt_model *m)
{
	void *b[] = { m->cp.buf.kv, m->cp.buf.dkv, m->cp.buf.ob, m->cp.buf.lb, m->cp.buf.all, m->cp.buf.glob, m->cp.buf.dglob, m->cp.buf.q32,
		      m->cp.buf.dq32, m->cp.buf.o32, m->cp.buf.g32, m->cp.buf.kv16, m->cp.buf.all16, m->cp.a2a.snd,
		      m->cp.a2a.rcv, m->cp.a2a.q, m->cp.a2a.o, m->cp.a2a.dq, m->cp.a2a.dout, m->cp.a2a.idx[0], m->cp.a2a.idx[1],
		      m->cp.a2a.idx[2], m->cp.a2a.idx[3] };
	for (size_t i = 0; !m->mem.dry && i < sizeof b / sizeof *b; i++)
		if (b[i]) m->be->ops->free(m->be, b[i]);
	free(m->cp.a2a.cnt);
	free(m->cp.a2a.host);
	memset(&m->cp.buf, 0, sizeof m->cp.buf);
	memset(&m->cp.a2a, 0, sizeof m->cp.a2a);
}

/* A block of local query chunk hq against sk key positions from global position koff. */
static mgt_attn block(const mgt_model *m, int hq, int sk, int koff, float p, uint64_t key)
{
	return (mgt_attn){ .kind = MGT_ATTN_BLOCK, .sq = m->cp.C, .sk = sk, .b = m->b, .ng = (int)m->ng_l, .r = (int)m->r, .d = (int)m->d,
			       .qoff = gchunk(m, hq) * m->cp.C, .koff = koff, .s = m->cp.C * 2 * m->cp.size, .ld_lse = m->s,
			       .p = p, .key = key, .head0 = (int)(m->nq_l * m->ps->tp_rank),
			       .heads_total = (int)m->c.num_attention_heads, .t = MGT_DT_F32,
			   .gt = MGT_DT_F32 };
}

/* Pointers to local chunk h of the qkv-shaped, ctx-shaped and lse buffers. */
static float *q_at(const mgt_model *m, float *qkv, int h) { return qkv + h * chunk_numel(m, m->qkv_l); }
static float *o_at(const mgt_model *m, float *ctx, int h) { return ctx + h * chunk_numel(m, m->nq_l * m->d); }
static float *kv_at(const mgt_model *m, float *kv, int h) { return kv + h * chunk_numel(m, m->ng_l * 2 * m->d); }

/* Ring step: send `buf` on to the next rank (returns at once: parallel.h) or receive into it from
 * the previous one.  The keys and values (TAG_KV) move in 16 bits under a 16-bit act_t (through
 * kv16: exact), their gradient in fp32. */
static mgt_status ring(const mgt_model *m, float *buf, int tag, bool send)
{
	mgt_comm *c = m->ps->cp_comm;
	int n = c->size, r = c->rank;
	const mgt_backend_ops *o = m->be->ops;
	const bool h = tag == TAG_KV && lp(m);
	void *x = h ? m->cp.buf.kv16 : (void *)buf;
	const mgt_elem_type t = h ? m->prec.act_t : MGT_DT_F32;
	if (send) {
		if (h) o->cast(m->be, x, t, buf, kv_numel(m));
		return c->ops->send(c, x, kv_numel(m), t, (r + 1) % n, tag);
	}
	mgt_status st = c->ops->recv(c, x, kv_numel(m), t, (r + n - 1) % n, tag);
	if (!st && h) o->widen(m->be, buf, x, t, kv_numel(m));
	return st;
}

/* The p2p forward's blocks against the chunks of rank src held in cp.buf.kv.  At step 0 (src is
 * this rank) the diagonal blocks come first: they initialize ctx and lse; every other visible
 * block is unmasked and merged in. */
static void p2p_fwd_step(mgt_model *m, layer_act *a, int src, float p, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	int c2 = 2 * m->cp.size - 1;
	for (int h = 0; src == m->cp.rank && h < 2; h++) {
		mgt_attn g = block(m, h, m->cp.C, gchunk(m, h) * m->cp.C, p, key);
		o->attn_forward(m->be, &g, o_at(m, a->ctx, h), a->lse + h * m->cp.C, q_at(m, a->qkv, h),
				kv_at(m, m->cp.buf.kv, h));
	}
	for (int hq = 0; hq < 2; hq++)
		for (int hk = 0; hk < 2; hk++) {
			int gk = hk ? c2 - src : src;
			if (gk >= gchunk(m, hq)) continue;
			mgt_attn g = block(m, hq, m->cp.C, gk * m->cp.C, p, key);
			float *lb = m->cp.buf.lb + hq * m->cp.C;
			o->attn_forward(m->be, &g, m->cp.buf.ob, lb, q_at(m, a->qkv, hq), kv_at(m, m->cp.buf.kv, hk));
			o->attn_merge(m->be, &g, o_at(m, a->ctx, hq), a->lse + hq * m->cp.C, m->cp.buf.ob, lb);
		}
}

static mgt_status p2p_fwd(mgt_model *m, layer_act *a, float p, uint64_t key)
{
	int c = m->cp.size;
	mgt_status st = MGT_OK;
	m->be->ops->attn_kv_copy(m->be, a->qkv, m->cp.buf.kv, m->T, (int)m->ng_l, (int)m->r, (int)m->d, true);
	for (int i = 0; !st && i < c; i++) {
		if (i + 1 < c) st = ring(m, m->cp.buf.kv, TAG_KV, true);
		if (st) break;
		p2p_fwd_step(m, a, (m->cp.rank + c - i) % c, p, key);
		if (i + 1 < c) st = ring(m, m->cp.buf.kv, TAG_KV, false);
	}
	return st;
}

/* The backward's blocks against the chunks of rank src in kv, their dK, dV into dkv. */
static void p2p_bwd_step(mgt_model *m, layer_act *a, float *dqkv, const float *dctx, int src, float p, uint64_t key)
{
	int c2 = 2 * m->cp.size - 1;
	for (int hq = 0; hq < 2; hq++)
		for (int hk = 0; hk < 2; hk++) {
			int gk = hk ? c2 - src : src;
			if (gk > gchunk(m, hq)) continue;
			mgt_attn g = block(m, hq, m->cp.C, gk * m->cp.C, p, key);
			m->be->ops->attn_backward(m->be, &g, q_at(m, dqkv, hq), kv_at(m, m->cp.buf.dkv, hk),
						 o_at(m, (float *)dctx, hq), q_at(m, a->qkv, hq), kv_at(m, m->cp.buf.kv, hk),
						 o_at(m, a->ctx, hq), a->lse + hq * m->cp.C);
		}
}

static mgt_status p2p_bwd(mgt_model *m, layer_act *a, float *dqkv, const float *dctx, float p, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	int c = m->cp.size;
	mgt_status st = MGT_OK;
	o->attn_kv_copy(m->be, a->qkv, m->cp.buf.kv, m->T, (int)m->ng_l, (int)m->r, (int)m->d, true);
	o->zero(m->be, m->cp.buf.dkv, kv_numel(m) * sizeof(float));
	for (int i = 0; !st && i < c; i++) {
		p2p_bwd_step(m, a, dqkv, dctx, (m->cp.rank + c - i) % c, p, key);
		if (i + 1 < c) st = ring(m, m->cp.buf.kv, TAG_KV, true);
		if (!st) st = ring(m, m->cp.buf.dkv, TAG_DKV, true);
		if (!st && i + 1 < c) st = ring(m, m->cp.buf.kv, TAG_KV, false);
		if (!st) st = ring(m, m->cp.buf.dkv, TAG_DKV, false);
	}
	return st;
}

/* Between rank order (rank q's chunks q and 2c-1-q side by side, as the all-gather lays them)
 * and position order (global chunk g at g): to_glob true copies all -> glob, false glob -> all. */
static void reorder(mgt_model *m, float *all, float *glob, bool to_glob)
{
	size_t cn = chunk_numel(m, m->ng_l * 2 * m->d), bytes = cn * sizeof(float);
	for (int q = 0; q < m->cp.size; q++)
		for (int h = 0; h < 2; h++) {
			float *x = all + (2 * (size_t)q + (size_t)h) * cn;
			float *y = glob + (size_t)(h ? 2 * m->cp.size - 1 - q : q) * cn;
			m->be->ops->copy(m->be, to_glob ? y : x, to_glob ? x : y, bytes);
		}
}

/* All-gather the keys and values of the sequence into cp.buf.glob, in position order (in 16 bits
 * under a 16-bit act_t, through kv16 and all16: exact). */
static mgt_status gather_kv(mgt_model *m, layer_act *a)
{
	mgt_comm *c = m->ps->cp_comm;
	const mgt_backend_ops *o = m->be->ops;
	o->attn_kv_copy(m->be, a->qkv, m->cp.buf.kv, m->T, (int)m->ng_l, (int)m->r, (int)m->d, true);
	mgt_status st;
	if (lp(m)) {
		o->cast(m->be, m->cp.buf.kv16, m->prec.act_t, m->cp.buf.kv, kv_numel(m));
		st = c->ops->allgather(c, m->cp.buf.all16, m->cp.buf.kv16, kv_numel(m), m->prec.act_t);
		if (!st) o->widen(m->be, m->cp.buf.all, m->cp.buf.all16, m->prec.act_t, (size_t)m->cp.size * kv_numel(m));
	} else {
		st = c->ops->allgather(c, m->cp.buf.all, m->cp.buf.kv, kv_numel(m), MGT_DT_F32);
	}
	if (!st) reorder(m, m->cp.buf.all, m->cp.buf.glob, true);
	return st;
}

static mgt_status ag_fwd(mgt_model *m, layer_act *a, float p, uint64_t key)
{
	mgt_status st = gather_kv(m, a);
	for (int h = 0; !st && h < 2; h++) {
		mgt_attn g = block(m, h, (gchunk(m, h) + 1) * m->cp.C, 0, p, key);
		m->be->ops->attn_forward(m->be, &g, o_at(m, a->ctx, h), a->lse + h * m->cp.C, q_at(m, a->qkv, h),
					 m->cp.buf.glob);
	}
	return st;
}

static mgt_status ag_bwd(mgt_model *m, layer_act *a, float *dqkv, const float *dctx, float p, uint64_t key)
{
	const mgt_backend_ops *o = m->be->ops;
	mgt_comm *c = m->ps->cp_comm;
	mgt_status st = gather_kv(m, a);
	if (st) return st;
	o->zero(m->be, m->cp.buf.dglob, (size_t)m->cp.size * kv_numel(m) * sizeof(float));
	for (int h = 0; h < 2; h++) {
		mgt_attn g = block(m, h, (gchunk(m, h) + 1) * m->cp.C, 0, p, key);
		o->attn_backward(m->be, &g, q_at(m, dqkv, h), m->cp.buf.dglob, o_at(m, (float *)dctx, h), q_at(m, a->qkv, h),
				m->cp.buf.glob, o_at(m, a->ctx, h), a->lse + h * m->cp.C);
	}
	reorder(m, m->cp.buf.all, m->cp.buf.dglob, false);
	return c->ops->reduce_scatter(c, m->cp.buf.dkv, m->cp.buf.all, kv_numel(m), MGT_DT_F32);
}

/* a2a: one all-to-all over the context group of T rows of w elements of type t per rank pair,
 * from rows in the send order (block q to rank q) to rows in the receive order (block q from
 * rank q). */
mgt_status mgt_cp_a2a_move(mgt_model *m, void *dst, const void *src, size_t w, mgt_elem_type t)
{
	int64_t c = m->cp.size, *sc = m->cp.a2a.cnt, *sd = sc + c, *rc = sc + 2 * c, *rd = sc + 3 * c;
	for (int64_t q = 0; q < c; q++) {
		sc[q] = rc[q] = (int64_t)m->T * (int64_t)w;
		sd[q] = rd[q] = q * sc[q];
	}
	return mgt_comm_alltoallv(m->ps->cp_comm, dst, rc, rd, src, sc, sd, t);
}


/* Rows of w elements of type t through the all-to-all: gathered by map `before` into the send
 * order, moved, and gathered by map `after` into dst (rows_gather copies them bit for bit). */
static mgt_status a2a_exchange(mgt_model *m, void *dst, const void *src, size_t w, mgt_elem_type t, int before,
			       int after)
{
	const mgt_backend_ops *o = m->be->ops;
	int n = m->T * m->cp.size;
	o->rows_gather(m->be, m->cp.a2a.snd, src, t, m->cp.a2a.idx[before], n, (int)w);
	mgt_status st = mgt_cp_a2a_move(m, m->cp.a2a.rcv, m->cp.a2a.snd, w, t);
	if (!st) o->rows_gather(m->be, dst, m->cp.a2a.rcv, t, m->cp.a2a.idx[after], n, (int)w);
	return st;
}

/* The rank's [T, ...] rows (w: the elements of one block of ng/cp query groups in a row) to the
 * whole sequence of its own group block in position order, into glob. */
static mgt_status a2a_scatter_heads(mgt_model *m, void *glob, const void *loc, size_t w, mgt_elem_type t)
{
	return a2a_exchange(m, glob, loc, w, t, PACK, TO_GLOB);
}

/* The inverse: the whole sequence of the group block (position order) back to the ranks that
 * hold the tokens, into loc [T, ...]. */
static mgt_status a2a_gather_heads(mgt_model *m, void *loc, const void *glob, size_t w, mgt_elem_type t)
{
	return a2a_exchange(m, loc, glob, w, t, FROM_GLOB, UNPACK);
}

/* Widths of one group block in the qkv and ctx rows, and attn_forward's head0 for it. */
static size_t a2a_wq(const mgt_model *m) { return (size_t)(m->ng_l / m->cp.size * (m->r + 2) * m->d); }
static size_t a2a_wo(const mgt_model *m) { return (size_t)(m->ng_l / m->cp.size * m->r * m->d); }
static int a2a_head0(const mgt_model *m) { return (int)(m->nq_l * m->ps->tp_rank + m->ng_l / m->cp.size * m->r * m->cp.rank); }

/* The whole sequence S = s*cp of this rank's ng_l/cp query groups, causal (attn_forward's SELF);
 * qkv and ctx of type act_t, the gradients of type gt. */
static mgt_attn a2a_attn(const mgt_model *m, float p, uint64_t key, mgt_elem_type gt)
{
	const int S = m->s * m->cp.size;
	return (mgt_attn){ .kind = MGT_ATTN_SELF, .sq = S, .sk = S, .s = S, .ld_lse = S, .b = m->b,
			   .ng = (int)(m->ng_l / m->cp.size), .r = (int)m->r, .d = (int)m->d, .p = p, .key = key,
			   .head0 = a2a_head0(m), .heads_total = (int)m->c.num_attention_heads, .t = m->prec.act_t, .gt = gt,
			   .seg_start = m->cur->seg };
}

/* qkv and ctx of type act_t; the gradients dctx and dqkv of type gt. */
static mgt_status a2a_fwd(mgt_model *m, layer_act *a, float p, uint64_t key)
{
	mgt_status st = mgt_cp_use_maps(m);
	if (!st) st = a2a_scatter_heads(m, m->cp.a2a.q, a->qkv, a2a_wq(m), m->prec.act_t);
	if (st) return st;
	const mgt_attn at = a2a_attn(m, p, key, m->prec.act_t);
	m->be->ops->attn_forward(m->be, &at, m->cp.a2a.o, a->lse, m->cp.a2a.q, NULL);
	return a2a_gather_heads(m, a->ctx, m->cp.a2a.o, a2a_wo(m), m->prec.act_t);
}

static mgt_status a2a_bwd(mgt_model *m, layer_act *a, void *dqkv, const void *dctx, mgt_elem_type gt, float p,
			  uint64_t key)
{
	mgt_status st = mgt_cp_use_maps(m);
	if (!st) st = a2a_scatter_heads(m, m->cp.a2a.q, a->qkv, a2a_wq(m), m->prec.act_t);
	if (!st) st = a2a_scatter_heads(m, m->cp.a2a.o, a->ctx, a2a_wo(m), m->prec.act_t);
	if (!st) st = a2a_scatter_heads(m, m->cp.a2a.dout, dctx, a2a_wo(m), gt);
	if (st) return st;
	const mgt_attn at = a2a_attn(m, p, key, gt);
	m->be->ops->attn_backward(m->be, &at, m->cp.a2a.dq, NULL, m->cp.a2a.dout, m->cp.a2a.q, NULL, m->cp.a2a.o, a->lse);
	return a2a_gather_heads(m, dqkv, m->cp.a2a.dq, a2a_wq(m), gt);
}

/* The layer as the fp32 blocks see it: a itself, or (16-bit act_t) with qkv and ctx widened
 * into cp.buf.q32 and cp.buf.o32 (ctx only for the backward, where it holds the forward's output). */
static layer_act fp32_layer(mgt_model *m, const layer_act *a, bool with_ctx)
{
	layer_act w = *a;
	if (!lp(m)) return w;
	w.qkv = m->cp.buf.q32, w.ctx = m->cp.buf.o32;
	m->be->ops->widen(m->be, w.qkv, a->qkv, m->prec.act_t, (size_t)m->T * (size_t)m->qkv_l);
	if (with_ctx) m->be->ops->widen(m->be, w.ctx, a->ctx, m->prec.act_t, (size_t)m->T * (size_t)(m->nq_l * m->d));
	return w;
}

/* Packed documents run on a2a only (the p2p and allgather blocks take whole chunks of the row). */
static mgt_status packed_only_a2a(const mgt_model *m)
{
	return m->cur->seg ? mgt_err(MGT_ERR_USAGE, "packed sequences under context parallelism need --cp-comm-type a2a")
			   : MGT_OK;
}

mgt_status mgt_cp_attn_fwd(mgt_model *m, layer_act *a, float p, uint64_t key)
{
	if (m->L.cp_comm == MGT_CP_A2A) return a2a_fwd(m, a, p, key);
	if (packed_only_a2a(m)) return MGT_ERR_USAGE;
	layer_act w = fp32_layer(m, a, false);
	mgt_status st = m->L.cp_comm == MGT_CP_P2P ? p2p_fwd(m, &w, p, key) : ag_fwd(m, &w, p, key);
	if (!st && lp(m)) m->be->ops->cast(m->be, a->ctx, m->prec.act_t, w.ctx, (size_t)m->T * (size_t)(m->nq_l * m->d));
	return st;
}

mgt_status mgt_cp_attn_bwd(mgt_model *m, layer_act *a, void *dqkv, const void *dctx, mgt_elem_type gt, float p,
			   uint64_t key)
{
	if (m->L.cp_comm == MGT_CP_A2A) return a2a_bwd(m, a, dqkv, dctx, gt, p, key);
	if (packed_only_a2a(m)) return MGT_ERR_USAGE;
	const mgt_backend_ops *o = m->be->ops;
	const size_t nq = (size_t)m->T * (size_t)m->qkv_l, no = (size_t)m->T * (size_t)(m->nq_l * m->d);
	layer_act w = fp32_layer(m, a, true);
	float *dq = dqkv;
	const float *dc = dctx;
	if (gt != MGT_DT_F32) { /* the gradients through fp32 copies, dqkv rounded once */
		dq = m->cp.buf.dq32, dc = m->cp.buf.g32;
		o->widen(m->be, m->cp.buf.g32, dctx, gt, no);
	}
	o->zero(m->be, dq, nq * sizeof(float));
	mgt_status st = m->L.cp_comm == MGT_CP_P2P ? p2p_bwd(m, &w, dq, dc, p, key) : ag_bwd(m, &w, dq, dc, p, key);
	if (!st) o->attn_kv_copy(m->be, dq, m->cp.buf.dkv, m->T, (int)m->ng_l, (int)m->r, (int)m->d, false);
	if (!st && gt != MGT_DT_F32) o->cast(m->be, dqkv, gt, dq, nq);
	return st;
}

/* Rows [a, e) of the local [T, .] activations under context parallelism: the global row of
 * local row t is t plus the offset of its chunk. */
int64_t mgt_cp_global_row(const mgt_model *m, int64_t t)
{
	return m->cp.size <= 1 ? t : grow_of(m, m->cur ? m->cur->cp_rows : NULL, m->cp.rank, t);
}
