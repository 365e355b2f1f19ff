/* lib/model/layer_mamba.c: the Mamba-2 layer kind ('M' in a hybrid model's pattern; Megatron-Core's
 * MambaLayer and MambaMixer, megatron/core/ssm/mamba_layer.py, mamba_mixer.py): the pre-norm fused
 * into in_proj (TELayerNormColumnParallelLinear), in_proj's [z | x | B | C | dt], the causal
 * depthwise conv1d + SiLU over xBC, the selective scan (dt softplus, A = -exp(A_log), the D skip),
 * the gated RMSNorm over groups, out_proj and the bias-dropout-add into the residual stream; their
 * backward; its table rows (mgt_layer_mamba_rows) with Megatron's initialisation.  The ops between
 * the two GEMMs are the backend's (backend.h mamba_conv_*, ssd_scan_*, mamba_gated_norm_*): fp32
 * math, the activations and their gradients stored in mgt_layer_mamba_t (the run's activation
 * type, bf16 or fp16 under --bf16 / --fp16, as the other layers' activations; under context
 * parallelism the exchanges too), the chunk states and rstd in fp32.  Buffers: layer_act's
 * ln1, mean1, rstd1 and mzx .. mrstd (model_impl.h), sized here, allocated in chunk.c (typed by
 * la_type); the backward's scratch is mgt_model.mamba's. */
#include "model_impl.h"

#include <math.h>
#include <string.h>

enum { CONV_K = MGT_MAMBA_CONV_K };
static const float GATED_EPS = MGT_MAMBA_GATED_EPS;

/* The scan's geometry over the current slot's rows: x, B, C in the conv's output, dt in zx. */
static mgt_ssd ssd_of(const mgt_model *m)
{
	const int cd = (int)m->mamba.cd_l;
	return (mgt_ssd){ .L = m->s, .b = m->b, .nh = (int)m->mamba.nh_l, .p = (int)m->mamba.p, .g = (int)m->mamba.g_l,
			  .n = (int)m->mamba.n, .ld_x = cd, .ld_bc = cd, .ld_dt = (int)m->mamba.w_l,
			  .seg_start = m->cur ? m->cur->seg : NULL };
}

size_t mgt_layer_mamba_numel(const mgt_model *m, int li, int k)
{
	const size_t T = (size_t)m->T;
	const mgt_ssd d = ssd_of(m);
	switch (k) {
	case LA_LN1: return li >= 0 && mgt_model_fp8_layer(m, li) ? 0 : T * (size_t)m->h; /* fp8: the cast keeps x */
	case LA_MEAN1: case LA_RSTD1: return (size_t)m->Th;
	case LA_M_ZX: return T * (size_t)m->mamba.w_l;
	case LA_M_CONV: return m->cp.size > 1 ? mgt_mamba_cp_numel(m, true) : T * (size_t)m->mamba.cd_l;
	case LA_M_Y: case LA_M_NORM: return T * (size_t)m->mamba.di_l;
	case LA_M_STATES: return m->cp.size > 1 ? mgt_mamba_cp_states(m) : mgt_ssd_states_floats(&d);
	case LA_M_RSTD: return T * (size_t)m->mamba.g_l;
	case LA_M_ZXG: return m->cp.size > 1 ? mgt_mamba_cp_numel(m, false) : 0;
	default: return 0;
	}
}

/* Column offsets in in_proj's output row: z, x (xBC), B, C, dt. */
static int64_t off_x(const mgt_model *m) { return m->mamba.di_l; }
static int64_t off_dt(const mgt_model *m) { return 2 * m->mamba.di_l + 2 * m->mamba.g_l * m->mamba.n; }
/* B and C in the conv's output row. */
static int64_t off_b(const mgt_model *m) { return m->mamba.di_l; }
static int64_t off_c(const mgt_model *m) { return m->mamba.di_l + m->mamba.g_l * m->mamba.n; }

mgt_elem_type mgt_layer_mamba_t(const mgt_model *m) { return m->prec.act_t; }

/* Element off of a buffer of elements of type t. */
static void *at(const void *p, int64_t off, mgt_elem_type t) { return (char *)p + off * (int64_t)mgt_elem_size(t); }

mgt_status mgt_layer_mamba_fwd(mgt_model *m, int li, bool train, void *out)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	const int l = li + m->first_layer, T = m->T, h = (int)m->h, W = (int)m->mamba.w_l, cd = (int)m->mamba.cd_l;
	const int di = (int)m->mamba.di_l;
	const mgt_elem_type t = mgt_layer_mamba_t(m);
	mgt_elem_type lt;
	void *ln = mgt_sublayer_norm_dst(m, li, a->ln1, &lt);
	mgt_status st = mgt_sublayer_norm_gather(m, ln, lt, a->mean1, a->rstd1, a->x_in, T_(m, l, MGT_T_LN1_W),
						 T_(m, l, MGT_T_LN1_B));
	if (!st) st = mgt_sublayer_lin_fwd(m, li, 0, a->mzx, t, ln, lt, T_(m, l, MGT_T_M_IN_W), NULL, h, W);
	if (!st && m->cp.size > 1) st = mgt_mamba_cp_fwd(m, a, l);
	if (st) return st;
	if (m->cp.size == 1) {
		o->mamba_conv_fwd(m->be, a->mconv, at(a->mzx, off_x(m), t), W, P(m, T_(m, l, MGT_T_M_CONV_W)),
				  P(m, T_(m, l, MGT_T_M_CONV_B)), m->cur->seg, m->s, m->b, cd, CONV_K, t);
		const mgt_ssd d = ssd_of(m);
		o->ssd_scan_fwd(m->be, &d, a->my, a->mstates, a->mconv, at(a->mconv, off_b(m), t), at(a->mconv, off_c(m), t),
				at(a->mzx, off_dt(m), t), P(m, T_(m, l, MGT_T_M_DT_B)), P(m, T_(m, l, MGT_T_M_A_LOG)),
				P(m, T_(m, l, MGT_T_M_D)), t);
	}
	o->mamba_gated_norm_fwd(m->be, a->mnorm, a->mrstd, a->my, a->mzx, W, P(m, T_(m, l, MGT_T_M_NORM_W)), T, di,
				(int)m->mamba.g_l, GATED_EPS, t);
	if (!out) return MGT_OK; /* recomputation: the backward reads nothing past the gated norm */
	st = mgt_sublayer_lin_fwd(m, li, 1, m->scratch.dtmp_h, m->prec.act_t, a->mnorm, t, T_(m, l, MGT_T_M_OUT_W),
				  NULL, di, h);
	if (st) return st;
	return mgt_sublayer_reduce_bda(m, out, a->x_in, NULL, train, mgt_sublayer_site_key(m, l, 2), m->prec.act_t);
}

mgt_status mgt_layer_mamba_bwd(mgt_model *m, int li, bool train)
{
	const mgt_backend_ops *o = m->be->ops;
	layer_act *a = &m->cur->la[li];
	const int l = li + m->first_layer, T = m->T, h = (int)m->h, W = (int)m->mamba.w_l, cd = (int)m->mamba.cd_l;
	const int di = (int)m->mamba.di_l;
	const mgt_elem_type t = mgt_layer_mamba_t(m);
	float *dzx = m->mamba.dzx, *dconv = m->mamba.dconv, *dy = m->mamba.dy, *dnorm = m->mamba.dnorm;
	mgt_status st = mgt_sublayer_bda_bwd_gather(m, NULL, train, mgt_sublayer_site_key(m, l, 2), m->prec.act_t);
	if (!st)
		st = mgt_sublayer_lin_bwd(m, li, 1, dnorm, t, T_(m, l, MGT_T_M_OUT_W), NULL, m->scratch.dtmp_h,
					  m->prec.act_t, a->mnorm, t, di, h);
	if (st) return st;
	const mgt_tensor *nw = T_(m, l, MGT_T_M_NORM_W), *dtb = T_(m, l, MGT_T_M_DT_B), *al = T_(m, l, MGT_T_M_A_LOG);
	const mgt_tensor *D = T_(m, l, MGT_T_M_D), *cw = T_(m, l, MGT_T_M_CONV_W), *cb = T_(m, l, MGT_T_M_CONV_B);
	const bool cp = m->cp.size > 1; /* dz then waits beside the received blocks (mamba_cp.c) */
	o->mamba_gated_norm_bwd(m->be, dy, cp ? mgt_mamba_cp_dz(m) : dzx, G(m, nw), dnorm, a->my, a->mzx, W, P(m, nw),
				a->mrstd, T, di, (int)m->mamba.g_l, t);
	if (cp && (st = mgt_mamba_cp_bwd(m, a, l))) return st;
	if (!cp) {
		const mgt_ssd d = ssd_of(m);
		o->ssd_scan_bwd(m->be, &d, dconv, at(dconv, off_b(m), t), at(dconv, off_c(m), t), at(dzx, off_dt(m), t),
				G(m, dtb), G(m, al), G(m, D), dy, a->mstates, a->mconv, at(a->mconv, off_b(m), t),
				at(a->mconv, off_c(m), t), at(a->mzx, off_dt(m), t), P(m, dtb), P(m, al), P(m, D), t);
		o->mamba_conv_bwd(m->be, at(dzx, off_x(m), t), G(m, cw), G(m, cb), dconv, at(a->mzx, off_x(m), t), W,
				  P(m, cw), P(m, cb), m->cur->seg, m->s, m->b, cd, CONV_K, t);
	}
	st = mgt_sublayer_lin_bwd(m, li, 0, m->scratch.dtmp_h, m->prec.act_t, T_(m, l, MGT_T_M_IN_W), NULL, dzx, t,
				  a->ln1, m->prec.act_t, h, W);
	if (st) return st;
	return mgt_sublayer_reduce_norm_bwd(m, m->scratch.dtmp_h, a->x_in, T_(m, l, MGT_T_LN1_W), T_(m, l, MGT_T_LN1_B),
					    a->mean1, a->rstd1, NULL);
}

/* ---- the chunk's dimensions and scratch ---- */

void mgt_layer_mamba_dims(mgt_model *m)
{
	const mgt_model_config *c = &m->c;
	const int tp = m->ps->tp;
	m->mamba.p = c->mamba_head_dim;
	m->mamba.n = c->mamba_state_dim;
	m->mamba.nh_l = c->mamba_num_heads / tp;
	m->mamba.g_l = c->mamba_num_groups / tp;
	m->mamba.di_l = m->mamba.nh_l * m->mamba.p;
	m->mamba.cd_l = m->mamba.di_l + 2 * m->mamba.g_l * m->mamba.n;
	m->mamba.w_l = m->mamba.di_l + m->mamba.cd_l + m->mamba.nh_l;
}

mgt_status mgt_layer_mamba_alloc(mgt_model *m)
{
	if (!strchr(m->pattern, MGT_LAYER_MAMBA)) return MGT_OK;
	mgt_status st = m->cp.size > 1 ? mgt_mamba_cp_alloc(m) : MGT_OK;
	const size_t T = (size_t)m->T, es = mgt_elem_size(mgt_layer_mamba_t(m));
	m->mamba.dzx = mgt_model_balloc(m, T * (size_t)m->mamba.w_l * es, &m->mem.work_bytes, &st);
	m->mamba.dconv = mgt_model_balloc(m, T * (size_t)m->mamba.cd_l * es, &m->mem.work_bytes, &st);
	m->mamba.dy = mgt_model_balloc(m, T * (size_t)m->mamba.di_l * es, &m->mem.work_bytes, &st);
	m->mamba.dnorm = mgt_model_balloc(m, T * (size_t)m->mamba.di_l * es, &m->mem.work_bytes, &st);
	return st;
}

/* ---- the table rows ---- */

void mgt_layer_mamba_rows(mgt_rows *bd, int i)
{
	const mgt_model_config *c = bd->c;
	const int64_t h = c->hidden_size, P = c->mamba_head_dim, N = c->mamba_state_dim, G = c->mamba_num_groups;
	const int64_t NH = c->mamba_num_heads, DI = NH * P;
	/* MambaMixer.__init__'s order: in_proj (its fused norm first, as TE registers it), conv1d,
	 * dt_bias, A_log, D, norm, out_proj.  The conv's kaiming_uniform(a = sqrt(5)) over fan-in K
	 * is U(-1/sqrt(K), 1/sqrt(K)), its bias the same bound. */
	mgt_rows_norm(bd, i, MGT_T_LN1_W, "mixer.in_proj.layer_norm_weight", "mixer.in_proj.layer_norm_bias");
	/* under TP each rank holds its heads' and groups' piece of every block (section 4 of the
	 * facts: [z_r|x_r|B_r|C_r|dt_r] and [x_r|B_r|C_r]) */
	const int64_t zx[] = { DI, DI, G * N, G * N, NH }, xbc[] = { DI, G * N, G * N };
	mgt_rows_add_blocks(bd, i, MGT_T_M_IN_W, "mixer.in_proj.weight", zx, 5, h, MGT_INIT_NORMAL, c->init_method_std);
	const double bound = 1.0 / sqrt((double)CONV_K);
	mgt_rows_add_blocks(bd, i, MGT_T_M_CONV_W, "mixer.conv1d_weight", xbc, 3, CONV_K, MGT_INIT_UNIFORM, bound);
	mgt_rows_add_blocks(bd, i, MGT_T_M_CONV_B, "mixer.conv1d_bias", xbc, 3, 0, MGT_INIT_UNIFORM, bound);
	mgt_rows_add(bd, i, MGT_T_M_DT_B, "mixer.dt_bias", NH, 0, MGT_SHARD_ROW, MGT_INIT_DT_BIAS, 0);
	mgt_rows_add(bd, i, MGT_T_M_A_LOG, "mixer.A_log", NH, 0, MGT_SHARD_ROW, MGT_INIT_A_LOG, 0);
	mgt_rows_add(bd, i, MGT_T_M_D, "mixer.D", NH, 0, MGT_SHARD_ROW, MGT_INIT_ONE, 0);
	mgt_rows_add(bd, i, MGT_T_M_NORM_W, "mixer.norm.weight", DI, 0, MGT_SHARD_ROW, MGT_INIT_ONE, 0);
	mgt_rows_add(bd, i, MGT_T_M_OUT_W, "mixer.out_proj.weight", h, DI, MGT_SHARD_COL, MGT_INIT_NORMAL, mgt_model_out_std(c));
}
