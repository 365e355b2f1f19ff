/* lib/model/mamba_cp.c: a Mamba-2 layer's conv and scan under context parallelism (Megatron-Core's
 * megatron/core/ssm/mamba_context_parallel.py MambaContextParallel).
 *
 * A rank holds its tokens of the zigzag (cp.c) but the conv and the scan run along the whole
 * sequence.  Before them an all-to-all over the context group gives each rank the whole sequence
 * of 1/cp of its heads (and of its groups: B and C of those heads), in position order; after the
 * scan a second all-to-all returns the output y to the ranks that hold the tokens, where the
 * gated norm and out_proj run as without context parallelism.  in_proj's z stays local (the
 * gated norm reads it there); x, B, C and dt move: wx = cd_l + nh_l columns a token, wx' of
 * them to each rank (block q: x, B, C and dt of heads [q nh', (q + 1) nh') and groups
 * [q g', (q + 1) g'), nh' = nh_l / cp, g' = g_l / cp; wx' = nh' p + 2 g' n + nh' = wx / cp).  With
 * fewer groups than context ranks g' = 1: block q holds group q / (cp / g_l), whose B and C go to
 * each of its cp / g_l ranks, and wx' = nh' p + 2 n + nh' is more than wx / cp.  The conv's
 * weights and the scan's dt_bias, A_log and D are the block's rows of the rank's tensors; their
 * gradients go to those rows only and the data-parallel x context reduction sums the blocks.
 * The backward moves dy to the whole sequence and the gradients of x, B, C and dt back.
 *
 * The columns of a block are not contiguous in in_proj's row [z | x | B | C | dt], so the send
 * buffer is gathered by rows_gather over units of u columns (u divides every block width):
 * send_map puts unit k of block q of token t at unit (q T + t) wx' / u + k.  The gradient of
 * in_proj's output is assembled the same way from the received blocks and the local dz
 * (asm_map over [rcv | dz], dz in rows of w_l as the gated norm's backward writes it).
 *
 * Every exchanged block, the whole-sequence rows and the conv's and scan's outputs and gradients are
 * in the mixer's storage type t = mgt_layer_mamba_t (the activations' type: 2 bytes under --bf16
 * and --fp16, 4 under fp32), as without context parallelism; a replicated group's dB and dC parts
 * are summed by rows_combine (fp32 sum of the 16-bit parts, rounded once).
 *
 * Bytes a rank sends a layer and micro-batch, es = t's size (cp - 1 of its cp blocks of T rows):
 * forward (cp - 1) T (wx' + di_l / cp) x es (x, B, C, dt out, y back), backward the same (dy out;
 * dx, dB, dC, ddt back); (cp - 1)/cp T (wx + di_l) x es when cp divides g_l.  Megatron's
 * pre_conv_ssm also moves z (and post_conv_ssm returns y gated by z), (cp - 1)/cp T di_l elements
 * more each way, in the activations' type; here the gated norm runs on the token ranks.
 * tests/cli/comm_volume.py checks these counts.
 */
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

/* Element off of a buffer of elements of type t. */
static void *at(const void *p, int64_t off, mgt_elem_type t) { return (char *)p + off * (int64_t)mgt_elem_size(t); }

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t r = a % b;
		a = b;
		b = r;
	}
	return a;
}

/* The per-rank block of one context rank: heads, groups, its columns, and how many context ranks
 * share each of its groups (rep: with fewer groups than ranks, Megatron replicates B and C, each
 * group on cp / g_l ranks; 1 otherwise). */
typedef struct {
	int64_t nh, g, di, gn, cd, wx, rep;
} cp_block;

static cp_block block_of(const mgt_model *m)
{
	const int64_t c = m->cp.size, nh = m->mamba.nh_l / c, gl = m->mamba.g_l, g = gl >= c ? gl / c : 1;
	const cp_block k = { nh, g, nh * m->mamba.p, g * m->mamba.n, nh * m->mamba.p + 2 * g * m->mamba.n,
			     nh * m->mamba.p + 2 * g * m->mamba.n + nh, gl >= c ? 1 : c / gl };
	return k;
}

/* The first group of block q (its heads' group, replicated or not). */
static int64_t group0(const cp_block *k, int64_t q) { return k->rep > 1 ? q / k->rep : q * k->g; }

/* The column in in_proj's row of column j of block q's [x | B | C | dt]. */
static int64_t zx_col(const mgt_model *m, const cp_block *k, int64_t q, int64_t j)
{
	const int64_t di = m->mamba.di_l, gn = m->mamba.g_l * m->mamba.n, b0 = group0(k, q) * m->mamba.n;
	if (j < k->di) return di + q * k->di + j;
	j -= k->di;
	if (j < k->gn) return 2 * di + b0 + j;
	j -= k->gn;
	if (j < k->gn) return 2 * di + gn + b0 + j;
	return 2 * di + 2 * gn + q * k->nh + j - k->gn;
}

/* The unit maps (host, then uploaded): send_map [T wx / u] and asm_map [T w_l / u, rep] (the
 * received units that sum into each unit of in_proj's gradient: one, or rep for a replicated
 * group's B and C; -1 where fewer). */
static mgt_status build_maps(mgt_model *m)
{
	const cp_block k = block_of(m);
	const int64_t c = m->cp.size, T = m->T, u = m->mamba.cpu, W = m->mamba.w_l, ku = k.wx / u, r = k.rep;
	const size_t ns = (size_t)(T * c * ku), na = (size_t)(T * W / u * r);
	int32_t *h = mgt_malloc((ns + na) * sizeof *h);
	if (!h) return MGT_ERR_NOMEM;
	int32_t *send = h, *asmb = h + ns;
	for (size_t i = 0; i < na; i++) asmb[i] = -1;
	for (int64_t q = 0; q < c; q++)
		for (int64_t t = 0; t < T; t++)
			for (int64_t j = 0; j < ku; j++) {
				const int64_t col = zx_col(m, &k, q, j * u), here = (q * T + t) * ku + j, d = (t * W + col) / u;
				send[here] = (int32_t)d;
				int32_t *s = asmb + d * r; /* the gradient of that unit comes back there: the first free slot */
				while (*s >= 0) s++;
				*s = (int32_t)here;
			}
	const int64_t dzu = T * c * ku; /* the dz rows ([T, w_l], z's columns) follow the received blocks */
	for (int64_t t = 0; t < T; t++)
		for (int64_t j = 0; j < m->mamba.di_l / u; j++) asmb[((t * W) / u + j) * r] = (int32_t)(dzu + (t * W) / u + j);
	mgt_status st = m->be->ops->upload(m->be, m->mamba.send_map, send, ns * sizeof *h);
	if (!st) st = m->be->ops->upload(m->be, m->mamba.asm_map, asmb, na * sizeof *h);
	free(h);
	return st;
}

mgt_status mgt_mamba_cp_alloc(mgt_model *m)
{
	const cp_block k = block_of(m);
	const size_t T = (size_t)m->T, c = (size_t)m->cp.size, W = (size_t)m->mamba.w_l, di = (size_t)m->mamba.di_l;
	m->mamba.cpu = gcd64(gcd64(k.di, k.gn ? k.gn : k.di), gcd64(gcd64(k.nh, m->mamba.di_l), m->mamba.g_l * m->mamba.n));
	const size_t u = (size_t)m->mamba.cpu, wx = (size_t)k.wx * c, es = mgt_elem_size(mgt_layer_mamba_t(m));
	mgt_status st = mgt_cp_maps_alloc(m);
#define WB(n) mgt_model_balloc(m, (size_t)(n), &m->mem.work_bytes, &st)
	m->mamba.send_map = WB(T * wx / u * 4);
	m->mamba.asm_map = WB(T * W / u * (size_t)k.rep * 4);
	m->mamba.snd = WB(T * (wx > di ? wx : di) * es);
	m->mamba.rcv = WB(T * ((wx > di ? wx : di) + W) * es); /* then dz, [T, w_l] rows of which z's columns */
	m->mamba.yg = WB(T * di * es);
	m->mamba.dzxg = WB(T * wx * es);
	m->mamba.dconvg = WB(T * c * (size_t)k.cd * es);
#undef WB
	return st || m->mem.dry ? st : build_maps(m);
}

size_t mgt_mamba_cp_numel(const mgt_model *m, bool conv)
{
	const cp_block k = block_of(m);
	return (size_t)m->T * (size_t)m->cp.size * (size_t)(conv ? k.cd : k.wx);
}

size_t mgt_mamba_cp_states(const mgt_model *m)
{
	const cp_block k = block_of(m);
	const mgt_ssd d = { .L = m->s * m->cp.size, .b = m->b, .nh = (int)k.nh, .p = (int)m->mamba.p, .g = (int)k.g,
			    .n = (int)m->mamba.n };
	return mgt_ssd_states_floats(&d);
}

/* The scan over the whole sequence of block k: x, B, C in the conv's three regions, dt in the
 * exchanged rows. */
static mgt_ssd glob_ssd(const mgt_model *m, const cp_block *k)
{
	return (mgt_ssd){ .L = m->s * m->cp.size, .b = m->b, .nh = (int)k->nh, .p = (int)m->mamba.p, .g = (int)k->g,
			  .n = (int)m->mamba.n, .ld_x = (int)k->di, .ld_bc = (int)k->gn, .ld_dt = (int)k->wx,
			  .seg_start = m->cur->seg };
}

/* Rows of w elements of type t from rank-ordered local blocks to the whole sequence (position
 * order), or back. */
static mgt_status to_glob(mgt_model *m, void *glob, const void *blocks, size_t w, mgt_elem_type t)
{
	const int n = m->T * m->cp.size;
	mgt_status st = mgt_cp_a2a_move(m, m->mamba.rcv, blocks, w, t);
	if (!st) m->be->ops->rows_gather(m->be, glob, m->mamba.rcv, t, m->cp.a2a.idx[TO_GLOB], n, (int)w);
	return st;
}

static mgt_status from_glob(mgt_model *m, const void *glob, size_t w, mgt_elem_type t)
{
	const int n = m->T * m->cp.size;
	m->be->ops->rows_gather(m->be, m->mamba.snd, glob, t, m->cp.a2a.idx[FROM_GLOB], n, (int)w);
	return mgt_cp_a2a_move(m, m->mamba.rcv, m->mamba.snd, w, t);
}

/* The block's conv weights (rows of x, B, C: region r of 3) and the parameters' rows. */
typedef struct {
	const mgt_tensor *cw, *cb, *dtb, *al, *D;
} mixer_params;

static mixer_params params_of(const mgt_model *m, int l)
{
	return (mixer_params){ T_(m, l, MGT_T_M_CONV_W), T_(m, l, MGT_T_M_CONV_B), T_(m, l, MGT_T_M_DT_B),
			       T_(m, l, MGT_T_M_A_LOG), T_(m, l, MGT_T_M_D) };
}

static int64_t conv_row(const mgt_model *m, const cp_block *k, int r)
{
	const int64_t q = m->cp.rank, di = m->mamba.di_l, gn = m->mamba.g_l * m->mamba.n, b0 = group0(k, q) * m->mamba.n;
	return r == 0 ? q * k->di : r == 1 ? di + b0 : di + gn + b0;
}

static void region(const cp_block *k, int r, int64_t *col, int64_t *width)
{
	*col = r == 0 ? 0 : r == 1 ? k->di : k->di + k->gn;
	*width = r == 0 ? k->di : k->gn;
}

/* The conv's three regions (x, B, C) in a whole-sequence buffer base of [Lb, cd] column blocks. */
static void regions(const cp_block *k, const void *base, int64_t Lb, mgt_elem_type t, void *cv[3])
{
	for (int r = 0; r < 3; r++) {
		int64_t col, w;
		region(k, r, &col, &w);
		cv[r] = at(base, Lb * col, t);
	}
}

mgt_status mgt_mamba_cp_fwd(mgt_model *m, layer_act *a, int l)
{
	const mgt_backend_ops *o = m->be->ops;
	const cp_block k = block_of(m);
	const int64_t c = m->cp.size, T = m->T, u = m->mamba.cpu, Lb = T * c, q = m->cp.rank;
	const mgt_elem_type t = mgt_layer_mamba_t(m);
	const mixer_params p = params_of(m, l);
	mgt_status st = mgt_cp_use_maps(m);
	if (st) return st;
	o->rows_gather(m->be, m->mamba.snd, a->mzx, t, m->mamba.send_map, (int)(T * c * k.wx / u), (int)u);
	if ((st = to_glob(m, a->mzxg, m->mamba.snd, (size_t)k.wx, t))) return st;
	void *cv[3];
	regions(&k, a->mconv, Lb, t, cv);
	for (int r = 0; r < 3; r++) {
		int64_t col, w;
		region(&k, r, &col, &w);
		const int64_t row = conv_row(m, &k, r);
		o->mamba_conv_fwd(m->be, cv[r], at(a->mzxg, col, t), (int)k.wx, P(m, p.cw) + row * MGT_MAMBA_CONV_K,
				  P(m, p.cb) + row, m->cur->seg, m->s * (int)c, m->b, (int)w, MGT_MAMBA_CONV_K, t);
	}
	const mgt_ssd d = glob_ssd(m, &k);
	o->ssd_scan_fwd(m->be, &d, m->mamba.yg, a->mstates, cv[0], cv[1], cv[2], at(a->mzxg, k.cd, t),
			P(m, p.dtb) + q * k.nh, P(m, p.al) + q * k.nh, P(m, p.D) + q * k.nh, t);
	if ((st = from_glob(m, m->mamba.yg, (size_t)k.di, t))) return st;
	o->rows_gather(m->be, a->my, m->mamba.rcv, t, m->cp.a2a.idx[UNPACK], (int)(T * c), (int)k.di);
	return MGT_OK;
}

mgt_status mgt_mamba_cp_bwd(mgt_model *m, layer_act *a, int l)
{
	const mgt_backend_ops *o = m->be->ops;
	const cp_block k = block_of(m);
	const int64_t c = m->cp.size, T = m->T, u = m->mamba.cpu, Lb = T * c, q = m->cp.rank;
	const mgt_elem_type t = mgt_layer_mamba_t(m);
	const mixer_params p = params_of(m, l);
	/* dy (local, m->mamba.dy) to the whole sequence of the block */
	o->rows_gather(m->be, m->mamba.snd, m->mamba.dy, t, m->cp.a2a.idx[PACK], (int)(T * c), (int)k.di);
	mgt_status st = to_glob(m, m->mamba.yg, m->mamba.snd, (size_t)k.di, t);
	if (st) return st;
	void *cv[3], *dcv[3];
	regions(&k, a->mconv, Lb, t, cv);
	regions(&k, m->mamba.dconvg, Lb, t, dcv);
	const mgt_ssd d = glob_ssd(m, &k);
	o->ssd_scan_bwd(m->be, &d, dcv[0], dcv[1], dcv[2], at(m->mamba.dzxg, k.cd, t), G(m, p.dtb) + q * k.nh,
			G(m, p.al) + q * k.nh, G(m, p.D) + q * k.nh, m->mamba.yg, a->mstates, cv[0], cv[1], cv[2],
			at(a->mzxg, k.cd, t), P(m, p.dtb) + q * k.nh, P(m, p.al) + q * k.nh, P(m, p.D) + q * k.nh, t);
	for (int r = 0; r < 3; r++) {
		int64_t col, w;
		region(&k, r, &col, &w);
		const int64_t row = conv_row(m, &k, r);
		o->mamba_conv_bwd(m->be, at(m->mamba.dzxg, col, t), G(m, p.cw) + row * MGT_MAMBA_CONV_K, G(m, p.cb) + row,
				  dcv[r], at(a->mzxg, col, t), (int)k.wx, P(m, p.cw) + row * MGT_MAMBA_CONV_K, P(m, p.cb) + row,
				  m->cur->seg, m->s * (int)c, m->b, (int)w, MGT_MAMBA_CONV_K, t);
	}
	/* the blocks' gradients back to the token ranks; with the local dz after them */
	if ((st = from_glob(m, m->mamba.dzxg, (size_t)k.wx, t))) return st;
	if (k.rep == 1) o->rows_gather(m->be, m->mamba.dzx, m->mamba.rcv, t, m->mamba.asm_map, (int)(T * m->mamba.w_l / u), (int)u);
	else o->rows_combine(m->be, m->mamba.dzx, m->mamba.rcv, t, m->mamba.asm_map, (int)(T * m->mamba.w_l / u),
			     (int)k.rep, (int)u); /* a replicated group's dB, dC: its ranks' parts summed */
	return MGT_OK;
}

void *mgt_mamba_cp_dz(const mgt_model *m)
{
	const cp_block k = block_of(m);
	return at(m->mamba.rcv, m->T * k.wx * m->cp.size, mgt_layer_mamba_t(m));
}
