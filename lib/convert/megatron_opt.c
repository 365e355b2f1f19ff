/* lib/convert/megatron_opt.c: the optimizer state of a legacy-format Megatron checkpoint (`torch`),
 * read per table row.
 *
 * Plain Adam (megatron/core/optimizer/optimizer.py): FP32Optimizer saves torch.optim.Adam's
 * state_dict {"state": {id: {"exp_avg", "exp_avg_sq", "step"}}, "param_groups": [{"params":
 * [ids], "wd_mult", ...}]}; Float16OptimizerWithFloat16Params saves {"optimizer": that,
 * "fp32_from_fp16_params": [[fp32 main weight per param] per group], "grad_scaler"}.  The groups
 * (optimizer/__init__.py _get_param_groups) hold the model chunks' parameters in
 * model.parameters() order (mg_param_order), weight-decayed ones and the rest (biases and 1-D
 * tensors, wd_mult 0) apart; the group's own wd_mult (or weight_decay) says which it is.
 *
 * Distributed optimizer (distrib_optimizer.py get_parameter_state_dp_zero): distrib_optim.pt is
 * {"buckets_coalesced": True, gbuf_idx: {(param_dtype, grad_dtype): {"param", "exp_avg",
 * "exp_avg_sq": fp32 [numel_unpadded], "numel_unpadded"}}}, one gbuf per model chunk (a single
 * dtype); each bucket's unpadded elements concatenated.  The buffer's layout is Megatron's DDP
 * buffer (distributed/param_and_grad_buffer.py, param_layout.py): mgt_tensor_table_layout over the
 * chunk's rows in Megatron's parameter order, with the data-parallel size and bucket size the run
 * had (one bucket without --overlap-grad-reduce, on pipeline ranks after the first and for virtual
 * chunks after the first; else --ddp-bucket-size or max(4e7, 1e6 dp): distributed_data_parallel.py). */
#include "megatron_impl.h"

#include <stdlib.h>
#include <string.h>

const mgt_py *mg_py_at(const mgt_py *d, int64_t key)
{
	if (!d || d->kind != MGT_PY_DICT) return NULL;
	for (size_t i = 0; i < d->n; i++) {
		int64_t k;
		if (mgt_py_int(d->v[2 * i], &k) && d->v[2 * i]->kind == MGT_PY_INT && k == key) return d->v[2 * i + 1];
	}
	return NULL;
}

/* The torch optimizer dict of a plain Adam (FP32Optimizer: "optimizer" itself; Float16: inside). */
static const mgt_py *torch_optim(const mgt_py *opt)
{
	const mgt_py *in = mgt_py_get(opt, "optimizer");
	return mgt_py_get(in, "param_groups") ? in : opt;
}

mgt_status mg_optim_detect(mg_src *m)
{
	const char *file = mgt_torch_name(m->root);
	const mgt_py *opt = mgt_py_get(mgt_torch_root(m->root), "optimizer");
	m->optim = 0;
	if (!opt || opt->kind == MGT_PY_NONE) return MGT_OK;
	if (opt->kind == MGT_PY_LIST) { /* ChainedOptimizer: [dense, expert] (optimizer/__init__.py) */
		if (opt->n != 2 || m->a.model.num_experts < 1)
			return mgt_err(MGT_ERR_USAGE, "%s: optimizer: a chained optimizer of %zu (expected the dense and the expert "
				       "optimizers of a Mixture-of-Experts model); --no-load-optim loads the weights", file, opt->n);
		m->chained = true;
		opt = opt->v[0];
	}
	if (m->distopt) {
		m->optim = 3;
		return MGT_OK;
	}
	if (!mgt_py_get(torch_optim(opt), "param_groups"))
		return mgt_err(MGT_ERR_FORMAT, "%s: optimizer: no param_groups (expected Megatron's optimizer state_dict)", file);
	m->optim = mgt_py_get(opt, "fp32_from_fp16_params") ? 2 : 1;
	return MGT_OK;
}

/* ---- plain Adam: the state id of each row ---- */

/* Whether param group g holds weight-decayed parameters. */
static bool group_wd(const mgt_py *g)
{
	double v;
	if (mgt_py_float(mgt_py_get(g, "wd_mult"), &v)) return v != 0;
	return mgt_py_float(mgt_py_get(g, "weight_decay"), &v) && v != 0;
}

/* The ids of the chunks of file f, in model_chunks order, by group: where/grp/gidx of each row. */
static mgt_status plain_map(mg_src *m, int f, const mgt_py *groups, const char *file, int exp)
{
	size_t used[2] = {0, 0};
	int gi[2] = {-1, -1};
	for (size_t g = 0; g < groups->n; g++) {
		int w = group_wd(groups->v[g]);
		if (gi[w] < 0) gi[w] = (int)g;
	}
	mgt_status st = MGT_OK;
	for (int vs = 0; !st && vs < m->vp; vs++)
		for (int ci = 0; !st && ci < m->nchunks; ci++) {
			mg_chunk *c = &m->chunks[ci];
			if (c->file != f || c->vs != vs) continue;
			int *order = malloc(((size_t)c->tt.n + 1) * sizeof *order);
			if (!c->where) {
				c->where = malloc(((size_t)c->tt.n + 1) * sizeof *c->where);
				c->grp = malloc(((size_t)c->tt.n + 1) * sizeof *c->grp);
				c->gidx = malloc(((size_t)c->tt.n + 1) * sizeof *c->gidx);
				for (int i = 0; c->where && i < c->tt.n; i++) c->where[i] = -1;
			}
			if (!order || !c->where || !c->grp || !c->gidx) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
			int n = st ? 0 : mg_param_order(m, c, order);
			for (int j = 0; !st && j < n; j++) {
				const mgt_tensor *x = &c->tt.t[order[j]];
				if (m->chained && (x->num_experts > 0) != exp) continue;
				int w = x->weight_decay;
				const mgt_py *ids = gi[w] >= 0 ? mgt_py_get(groups->v[gi[w]], "params") : NULL;
				int64_t id;
				if (!ids || ids->kind != MGT_PY_LIST || used[w] >= ids->n || !mgt_py_int(ids->v[used[w]], &id))
					st = mgt_err(MGT_ERR_FORMAT, "%s: optimizer param_groups: the %s group has fewer parameters "
						     "than the model its args describe (at %s)", file, w ? "weight-decayed" : "no-decay",
						     x->name);
				else {
					c->where[order[j]] = id;
					c->grp[order[j]] = gi[w];
					c->gidx[order[j]] = (int)used[w]++;
				}
			}
			free(order);
		}
	for (int w = 0; !st && w < 2; w++) {
		const mgt_py *ids = gi[w] >= 0 ? mgt_py_get(groups->v[gi[w]], "params") : NULL;
		if (ids && ids->n != used[w])
			st = mgt_err(MGT_ERR_FORMAT, "%s: optimizer param_groups: the %s group has %zu parameters but the model "
				     "its args describe %zu", file, w ? "weight-decayed" : "no-decay", ids->n, used[w]);
	}
	return st;
}

static mgt_status plain_local(mg_src *m, const mg_chunk *c, const mgt_tensor *x, int k, float *dst)
{
	mgt_torch *t;
	mgt_status st = mg_file_open(m, c->file, false, &t);
	if (st) return st;
	const char *file = mgt_torch_name(t);
	const mgt_py *opt = mgt_py_get(mgt_torch_root(t), "optimizer");
	int exp = m->chained && x->num_experts > 0;
	if (!c->where && m->chained) { /* both optimizers' ids */
		for (int e = 0; !st && e < 2; e++) {
			const mgt_py *o2 = opt && opt->kind == MGT_PY_LIST && opt->n == 2 ? opt->v[e] : NULL;
			const mgt_py *g2 = mgt_py_get(torch_optim(o2), "param_groups");
			if (!g2 || g2->kind != MGT_PY_LIST)
				return mgt_err(MGT_ERR_FORMAT, "%s: optimizer[%d]: no param_groups (a chained optimizer)", file, e);
			st = plain_map(m, c->file, g2, file, e);
		}
		if (st) return st;
	}
	if (m->chained) opt = opt->v[exp];
	const mgt_py *in = torch_optim(opt);
	const mgt_py *groups = mgt_py_get(in, "param_groups");
	if (!groups || groups->kind != MGT_PY_LIST) return mgt_err(MGT_ERR_FORMAT, "%s: optimizer: no param_groups", file);
	if (!c->where && (st = plain_map(m, c->file, groups, file, 0))) return st;
	int i = (int)(x - c->tt.t);
	const mgt_py *v = NULL;
	char what[240];
	if (k == 0) {
		const mgt_py *g = mgt_py_get(opt, "fp32_from_fp16_params");
		g = g && g->kind == MGT_PY_LIST && (size_t)c->grp[i] < g->n ? g->v[c->grp[i]] : NULL;
		v = g && g->kind == MGT_PY_LIST && (size_t)c->gidx[i] < g->n ? g->v[c->gidx[i]] : NULL;
		snprintf(what, sizeof what, "optimizer fp32_from_fp16_params[%d][%d] (%s)", c->grp[i], c->gidx[i], x->name);
	} else {
		const mgt_py *s = mg_py_at(mgt_py_get(in, "state"), c->where[i]);
		v = mgt_py_get(s, k == 1 ? "exp_avg" : "exp_avg_sq");
		snprintf(what, sizeof what, "optimizer state[%lld].%s (%s)", (long long)c->where[i], k == 1 ? "exp_avg" : "exp_avg_sq",
			 x->name);
	}
	if (!v || v->kind != MGT_PY_TENSOR) return mgt_err(MGT_ERR_FORMAT, "%s: missing %s", file, what);
	if ((st = mg_check_float(t, v, what))) return st;
	if (mgt_py_numel(v) != (int64_t)x->numel)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: %lld elements, the model's args give %zu", file, what,
			       (long long)mgt_py_numel(v), x->numel);
	return mgt_torch_read_f32(t, v, dst);
}

/* ---- the distributed optimizer: each row's offset in its buffer ---- */

static int64_t bucket_size(const mg_src *m, const mg_chunk *c)
{
	const mgt_py *ov = mgt_py_get(m->ns, "overlap_grad_reduce");
	int64_t on = 0, bs = 0;
	if (!mgt_py_int(ov, &on) || !on || c->pp > 0 || c->vs > 0) return 0;
	if (mgt_py_int(mgt_py_get(m->ns, "ddp_bucket_size"), &bs) && bs > 0) return bs;
	return m->dp * 1000000LL > 40000000LL ? m->dp * 1000000LL : 40000000LL;
}

static mgt_status layout_offsets(mg_src *m, mg_chunk *c, mgt_tensor_table *permp, int n, const int *rows, int exp);

mgt_status mg_dist_map(mg_src *m, mg_chunk *c)
{
	int *order = malloc(((size_t)c->tt.n * 2 + 1) * sizeof *order);
	mgt_tensor_table perm = {0};
	c->where = malloc(((size_t)c->tt.n + 1) * sizeof *c->where);
	if (!order || !c->where) {
		free(order);
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	}
	int all = mg_param_order(m, c, order);
	for (int i = 0; i < c->tt.n; i++) c->where[i] = -1;
	mgt_status st = (perm.t = malloc(((size_t)all + 1) * sizeof *perm.t)) ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int exp = 0; !st && exp < (m->chained ? 2 : 1); exp++) {
		int n = 0;
		for (int j = 0; j < all; j++)
			if (!m->chained || (c->tt.t[order[j]].num_experts > 0) == exp) {
				order[all + n] = order[j];
				perm.t[n++] = c->tt.t[order[j]];
			}
		st = layout_offsets(m, c, &perm, n, order + all, exp);
	}
	c->gbuf = c->vs;
	free(perm.t);
	free(order);
	return st;
}

/* Rows perm.t[0..n) (table rows rows[]) laid out as Megatron's buffer: where[] of each. */
static mgt_status layout_offsets(mg_src *m, mg_chunk *c, mgt_tensor_table *permp, int n, const int *rows, int exp)
{
	mgt_tensor_table perm = *permp;
	perm.n = n;
	perm.buckets = NULL;
	bool shared = !m->a.model.untie_embeddings_and_output_weights && m->pp > 1 && !exp;
	mgt_status st = mgt_tensor_table_layout(&perm, exp ? m->edp : m->dp, true, bucket_size(m, c), shared);
	/* the offset in the concatenation of each bucket's unpadded elements */
	int64_t skipped = 0;
	for (int b = 0; !st && b < perm.nbuckets; b++) {
		const mgt_bucket *k = &perm.buckets[b];
		size_t end = k->offset;
		for (int j = 0; j < n; j++)
			if (perm.t[j].offset >= k->offset && perm.t[j].offset < k->offset + k->numel) {
				c->where[rows[j]] = (int64_t)perm.t[j].offset - skipped;
				if (perm.t[j].offset + perm.t[j].numel > end) end = perm.t[j].offset + perm.t[j].numel;
			}
		skipped += (int64_t)(k->offset + k->numel - end);
	}
	c->ends[exp] = 0;
	for (int j = 0; !st && j < n; j++)
		if (c->where[rows[j]] + (int64_t)perm.t[j].numel > c->ends[exp]) c->ends[exp] = c->where[rows[j]] + (int64_t)perm.t[j].numel;
	free(perm.buckets);
	return st;
}

static mgt_status dist_local(mg_src *m, mg_chunk *c, const mgt_tensor *x, int k, float *dst)
{
	mgt_torch *t;
	mgt_status st = mg_file_open(m, c->file, true, &t);
	if (st) return st;
	if (!c->where && (st = mg_dist_map(m, c))) return st;
	const char *file = mgt_torch_name(t);
	const mgt_py *root = mgt_torch_root(t);
	int exp = m->chained && x->num_experts > 0;
	if (m->chained) root = root && root->kind == MGT_PY_LIST && root->n == 2 ? root->v[exp] : NULL;
	const mgt_py *gb = mg_py_at(root, c->gbuf);
	if (!gb || gb->kind != MGT_PY_DICT || gb->n != 1)
		return mgt_err(MGT_ERR_FORMAT, "%s: no buffer %d with one dtype (expected Megatron's coalesced buckets)", file, c->gbuf);
	const char *key = k == 0 ? "param" : k == 1 ? "exp_avg" : "exp_avg_sq";
	const mgt_py *v = mgt_py_get(gb->v[1], key);
	int64_t off = c->where[x - c->tt.t];
	if (!v || v->kind != MGT_PY_TENSOR || v->ndim != 1)
		return mgt_err(MGT_ERR_FORMAT, "%s: buffer %d: no 1-D tensor \"%s\"", file, c->gbuf, key);
	if ((st = mg_check_float(t, v, key))) return st;
	int64_t total = v->size[0], want = c->ends[exp];
	if (off < 0 || total != want)
		return mgt_err(MGT_ERR_FORMAT, "%s: %sbuffer %d holds %lld elements but Megatron's layout of the model its args "
			       "describe (data parallel %d, reverse parameter order, 64-element starts) ends at %lld", file,
			       exp ? "expert " : "", c->gbuf, (long long)total, exp ? m->edp : m->dp, (long long)want);
	mgt_py view = *v; /* the row's elements: a view of the buffer */
	view.offset += off * v->stride[0];
	view.size[0] = (int64_t)x->numel;
	return mgt_torch_read_f32(t, &view, dst);
}

mgt_status mg_optim_local(mg_src *m, const mg_chunk *c, const mgt_tensor *x, int k, float *dst, bool *absent)
{
	*absent = false;
	if (m->optim == 0) return mgt_err(MGT_ERR_FORMAT, "%s: no optimizer state", m->iter_dir);
	mg_chunk *cc = (mg_chunk *)c;
	if (m->optim == 3) {
		if (!cc->where) {
			mgt_status st = mg_dist_map(m, cc);
			if (st) return st;
		}
		if (cc->where[x - c->tt.t] < 0) *absent = x->role == MGT_T_WORD_EMB;
		return *absent ? MGT_OK : dist_local(m, cc, x, k, dst);
	}
	if (k == 0 && m->optim == 1) return mgt_err(MGT_ERR_USAGE, "internal: fp32 weights are the model's");
	return plain_local(m, c, x, k, dst);
}
