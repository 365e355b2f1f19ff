/* lib/convert/megatron_dist.c: the `torch_dist` and `fsdp_dtensor` formats of Megatron-LM
 * checkpoints (megatron_impl.h; facts: megatron/core/dist_checkpointing/strategies/torch.py,
 * serialization.py; PyTorch's torch/distributed/checkpoint/metadata.py and filesystem.py).
 *
 * iter_N/.metadata is pickle.dump(Metadata): state_dict_metadata {key: TensorStorageMetadata
 * (properties, size, chunks [ChunkStorageMetadata(offsets, sizes)]) or BytesStorageMetadata},
 * storage_data {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset, length)}.
 * Every chunk is a torch.save zip of one tensor at [offset, offset + length) of
 * iter_N/<relative_path>; a key's global tensor is its chunks placed at their offsets.  Keys are
 * Megatron-Core names without "model.", at TP/PP-unsplit global shapes; a homogeneous decoder's
 * layers are stacked along a leading axis under decoder.layers.<suffix> (transformer_block.py
 * TransformerBlock.sharded_state_dict), others are per layer decoder.layers.<i>.<suffix>.  The
 * gated fc1 is [W_all; V_all] (mlp.py apply_swiglu_sharded_factory), mgt's own layout.  The common
 * state (args, iteration, checkpoint_version, opt_param_scheduler) is common.pt (MCore before
 * 0.19) or the BYTE_IO item common_state/shard_0_1 holding torch.save([state]).  The optimizer: the
 * per-tensor keys optimizer.state.{exp_avg,exp_avg_sq}.<key> with the fp32 main weights as
 * optimizer.state.fp32_param.<key> (the non-distributed optimizer) or optimizer.state.param.<key>
 * (the distributed optimizer's fully_reshardable format); the default dp_reshardable buckets
 * (optimizer.distributed.*) are not read.
 *
 * Megatron-FSDP's `fsdp_dtensor` (checkpointing.py save_checkpoint: torch.distributed.checkpoint
 * .save of preprocess_fsdp_dtensor_state_dict's dict; core/transformer/fsdp_dtensor_checkpoint.py)
 * is the same .metadata + __<i>_<k>.distcp, without common.pt or common_state: every non-tensor is
 * its own BYTE_IO item (torch.save(value)) under its flattened dotted key (args, iteration,
 * opt_param_scheduler.max_lr, ...), told from a plain torch_dcp directory by args.ckpt_format
 * "fsdp_dtensor" or args.use_megatron_fsdp.  Tensors are per parameter at global shape, in dim-0
 * row ranges of uneven length (one chunk per rank holding rows):
 *   model.module.<name>                                  the fp32 main weights
 *   optimizer.state.module.module.module.<name>.exp_avg  and .exp_avg_sq (distrib_optimizer.py
 *                                                        sharded_param_state_fsdp_dtensor)
 * <name> per layer (decoder.layers.<i>.); the gated fc1 (weight and bias) as <name>_w [F, ...] and
 * <name>_v (handle_swiglu_in_state_dict; mgt's [W_all; V_all] halves); experts at global index j,
 * grouped (mlp.experts.linear_fc1.weight<j>[_w|_v]) or sequential
 * (mlp.experts.local_experts.<j>.linear_fc1.weight) (handle_experts_in_state_dict).  The
 * optimizer's param_to_group_meta and step are not read: the step is the iteration, as for
 * torch_dist. */
#include "megatron_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *fqn;
	const mgt_py *offsets;     /* TUPLE */
	const char *rel;
	int64_t off, len;
} dist_item;

typedef struct {
	void *buf;                 /* .metadata's bytes */
	mgt_pickle *pk;
	const mgt_py *sdm;         /* state_dict_metadata */
	dist_item *items;
	size_t nitems;
	float *chunk;
	size_t chunk_n;
	float *flat[3];            /* dp_reshardable: one buffer's buckets concatenated, per kind */
	size_t flat_n[3];
	int flat_g[3], flat_b[3];  /* whose: dp_group_idx, gbuf_idx (-1 none) */
	mgt_torch **objs;          /* fsdp_dtensor: the BYTE_IO items opened (mg_common) */
	size_t nobjs;
} dist_state;

static const char *py_s(const mgt_py *o, const char *attr) { return mgt_py_str(mgt_py_get(o, attr)); }

static mgt_status read_file(const char *path, void **buf, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f) return mgt_err(MGT_ERR_FORMAT, "%s: cannot open", path);
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	*buf = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
	size_t got = *buf ? fread(*buf, 1, (size_t)sz, f) : 0;
	fclose(f);
	if (!*buf) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (got != (size_t)sz) return mgt_err(MGT_ERR_IO, "%s: short read", path);
	*n = got;
	return MGT_OK;
}

static int by_fqn(const void *a, const void *b)
{
	return strcmp(((const dist_item *)a)->fqn, ((const dist_item *)b)->fqn);
}

static mgt_status index_items(mg_src *m, dist_state *d)
{
	const mgt_py *md = mgt_pickle_root(d->pk), *sd = mgt_py_get(md, "storage_data");
	d->sdm = mgt_py_get(md, "state_dict_metadata");
	if (!d->sdm || d->sdm->kind != MGT_PY_DICT || !sd || sd->kind != MGT_PY_DICT)
		return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: not a torch.distributed.checkpoint Metadata (no "
			       "state_dict_metadata / storage_data dicts)", m->iter_dir);
	if (!(d->items = calloc(sd->n + 1, sizeof *d->items))) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sd->n; i++) {
		const mgt_py *k = sd->v[2 * i], *v = sd->v[2 * i + 1];
		dist_item *it = &d->items[d->nitems];
		it->fqn = py_s(k, "fqn");
		it->offsets = mgt_py_get(k, "offset");
		it->rel = py_s(v, "relative_path");
		if (!it->fqn || !it->rel || !mgt_py_int(mgt_py_get(v, "offset"), &it->off) ||
		    !mgt_py_int(mgt_py_get(v, "length"), &it->len) || it->off < 0 || it->len <= 0 || strstr(it->rel, "..") ||
		    strchr(it->rel, '/'))
			return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: storage_data entry %zu: expected MetadataIndex(fqn, offset) "
				       "-> _StorageInfo(relative_path, offset, length) with a plain file name", m->iter_dir, i);
		d->nitems++;
	}
	qsort(d->items, d->nitems, sizeof *d->items, by_fqn); /* find_item's binary search */
	return MGT_OK;
}

static bool same_offsets(const mgt_py *a, const mgt_py *b)
{
	if (!a || !b) return !a && !b;
	if (a->n != b->n) return false;
	for (size_t i = 0; i < a->n; i++) {
		int64_t x, y;
		if (!mgt_py_int(a->v[i], &x) || !mgt_py_int(b->v[i], &y) || x != y) return false;
	}
	return true;
}

/* The item of key fqn at offsets (any, when NULL): the first of fqn's run in the sorted items,
 * then along it. */
static const dist_item *find_item(const dist_state *d, const char *fqn, const mgt_py *offsets)
{
	size_t lo = 0, hi = d->nitems;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(d->items[mid].fqn, fqn) < 0) lo = mid + 1;
		else hi = mid;
	}
	for (size_t i = lo; i < d->nitems && !strcmp(d->items[i].fqn, fqn); i++)
		if (!offsets || same_offsets(d->items[i].offsets, offsets)) return &d->items[i];
	return NULL;
}

/* Item it (a torch.save at its bytes of its .distcp file); a file missing or unreadable is
 * MGT_ERR_FORMAT, as a missing rank file of the legacy format is; errors name the key. */
static mgt_status open_item(mg_src *m, const dist_item *it, mgt_torch **t)
{
	char *p = cv_join(m->iter_dir, it->rel);
	mgt_status st = p ? mgt_torch_open(p, (uint64_t)it->off, (uint64_t)it->len, t) : MGT_ERR_NOMEM;
	free(p);
	if (st && st != MGT_ERR_NOMEM) st = mgt_err_ctx(MGT_ERR_FORMAT, "%s", it->fqn);
	return st;
}

/* fsdp_dtensor's BYTE_IO item fqn (a key without chunks), opened into d->objs; its value into
 * *out. */
static mgt_status open_object(mg_src *m, dist_state *d, const char *fqn, const mgt_py **out)
{
	const dist_item *it = find_item(d, fqn, NULL);
	const mgt_py *md = mgt_py_get(d->sdm, fqn);
	*out = NULL;
	if (!it || !md || mgt_py_get(md, "chunks"))
		return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: no BYTE_IO item %s", m->iter_dir, fqn);
	mgt_torch **q = realloc(d->objs, (d->nobjs + 1) * sizeof *q);
	if (!q) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	d->objs = q;
	mgt_status st = open_item(m, it, &d->objs[d->nobjs]);
	if (st) return st;
	*out = mgt_torch_root(d->objs[d->nobjs++]);
	return MGT_OK;
}

const mgt_py *mg_common(mg_src *m, const char *key, const char *sub)
{
	if (!m->dtensor) {
		const mgt_py *v = mgt_py_get(m->common, key);
		return sub ? mgt_py_get(v, sub) : v;
	}
	char fqn[256];
	const mgt_py *v = NULL;
	snprintf(fqn, sizeof fqn, "%s%s%s", key, sub ? "." : "", sub ? sub : "");
	if (open_object(m, m->dist, fqn, &v)) mgt_err(MGT_OK, "%s", ""); /* absent: the caller's default */
	return v;
}

/* Neither common.pt nor common_state: Megatron-FSDP's fsdp_dtensor when its "args" item says so
 * (checkpointing.py _get_checkpoint_format: a .metadata-only directory is torch_dcp, or
 * fsdp_dtensor with use_megatron_fsdp).  m->root: the args item's file; m->optim 6 with its
 * per-parameter moments. */
static mgt_status open_dtensor(mg_src *m, dist_state *d)
{
	if (!find_item(d, "args", NULL))
		return mgt_err(MGT_ERR_FORMAT, "%s: neither common.pt, a common_state item nor an args item in .metadata "
			       "(the args)", m->iter_dir);
	const mgt_py *ns;
	mgt_status st = open_object(m, d, "args", &ns);
	if (st) return st;
	m->root = d->objs[--d->nobjs]; /* owned as the common state's file */
	const char *fmt = mgt_py_str(mgt_py_get(ns, "ckpt_format"));
	int64_t fsdp = 0;
	mgt_py_int(mgt_py_get(ns, "use_megatron_fsdp"), &fsdp);
	if (!(fmt && !strcmp(fmt, "fsdp_dtensor")) && !fsdp)
		return mgt_err(MGT_ERR_FORMAT, "%s: a torch.distributed.checkpoint directory whose args say ckpt_format %s "
			       "without use_megatron_fsdp: not Megatron's torch_dist (no common.pt) nor fsdp_dtensor",
			       mgt_torch_name(m->root), fmt ? fmt : "(none)");
	m->dtensor = true;
	m->ns = ns;
	return MGT_OK;
}

/* The common state: common.pt, else the item common_state/shard_* (torch.save([state])). */
static mgt_status open_common(mg_src *m, dist_state *d)
{
	char *p = cv_join(m->iter_dir, "common.pt");
	mgt_status st = MGT_OK;
	if (p && cv_exists(m->iter_dir, "common.pt")) {
		st = mgt_torch_open(p, 0, 0, &m->root);
		if (!st) m->common = mgt_torch_root(m->root);
	} else if (p) {
		const dist_item *it = NULL;
		for (size_t i = 0; !it && i < d->nitems; i++)
			if (!strncmp(d->items[i].fqn, "common_state/", 13)) it = &d->items[i];
		if (!it) {
			free(p);
			return open_dtensor(m, d);
		}
		st = open_item(m, it, &m->root);
		const mgt_py *l = st ? NULL : mgt_torch_root(m->root);
		if (!st && (!l || l->kind != MGT_PY_LIST || l->n < 1))
			st = mgt_err(MGT_ERR_FORMAT, "%s: common_state: expected a list holding the state dict", mgt_torch_name(m->root));
		if (!st) m->common = l->v[0];
	} else
		st = MGT_ERR_NOMEM;
	free(p);
	if (!st) m->ns = mgt_py_get(m->common, "args");
	return st;
}

static bool has_prefix(const dist_state *d, const char *pre)
{
	for (size_t i = 0; i < d->sdm->n; i++) {
		const char *k = mgt_py_str(d->sdm->v[2 * i]);
		if (k && !strncmp(k, pre, strlen(pre))) return true;
	}
	return false;
}

mgt_status mg_dist_open(mg_src *m)
{
	dist_state *d = calloc(1, sizeof *d);
	if (!d) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int k = 0; k < 3; k++) d->flat_g[k] = d->flat_b[k] = -1;
	m->dist = d;
	char *p = cv_join(m->iter_dir, ".metadata");
	size_t n = 0;
	mgt_status st = p ? read_file(p, &d->buf, &n) : MGT_ERR_NOMEM;
	if (!st) st = mgt_pickle_load(d->buf, n, p, &d->pk);
	free(p);
	if (!st) st = index_items(m, d);
	if (!st) st = open_common(m, d);
	m->optim = 0;
	if (!st && m->dtensor) m->optim = has_prefix(d, "optimizer.state.module.module.module.") ? 6 : 0;
	else if (!st && has_prefix(d, "optimizer.state.exp_avg.")) m->optim = 4;
	else if (!st && has_prefix(d, "optimizer.distributed.")) m->optim = 5;
	else if (!st && has_prefix(d, "chained_1.optimizer.distributed.")) {
		m->optim = 5;
		m->chained = true;
	} else if (!st && has_prefix(d, "chained_"))
		m->no_optim = "a chained optimizer's per-tensor state, not read yet";
	return st;
}

void mg_dist_close(mg_src *m)
{
	dist_state *d = m->dist;
	if (!d) return;
	mgt_pickle_free(d->pk);
	free(d->buf);
	free(d->items);
	free(d->chunk);
	for (int k = 0; k < 3; k++) free(d->flat[k]);
	for (size_t i = 0; i < d->nobjs; i++) mgt_torch_close(d->objs[i]);
	free(d->objs);
	free(d);
	m->dist = NULL;
}

/* ---- reading a box of a key ---- */

static int64_t tuple_at(const mgt_py *t, size_t i)
{
	int64_t v = -1;
	if (t && (t->kind == MGT_PY_TUPLE || t->kind == MGT_PY_LIST) && i < t->n) mgt_py_int(t->v[i], &v);
	return v;
}

/* The key's metadata: a TensorStorageMetadata, its global size (nd dims), or NULL. */
static const mgt_py *key_md(const dist_state *d, const char *key)
{
	const mgt_py *v = mgt_py_get(d->sdm, key);
	return v && mgt_py_get(v, "chunks") ? v : NULL;
}

/* dst [shape] := the box [off, off + shape) of key (nd dims, up to 4), from its chunks. */
static mgt_status read_box(mg_src *m, dist_state *d, const char *key, const mgt_py *md, int nd, const int64_t *off,
			   const int64_t *shape, float *dst)
{
	const mgt_py *chunks = mgt_py_get(md, "chunks");
	size_t covered = 0, want = 1;
	for (int i = 0; i < nd; i++) want *= (size_t)shape[i];
	for (size_t c = 0; chunks && c < chunks->n; c++) {
		const mgt_py *co = mgt_py_get(chunks->v[c], "offsets"), *cs = mgt_py_get(chunks->v[c], "sizes");
		int64_t lo[4], hi[4], csz[4], cof[4];
		bool hit = co && cs && co->n == (size_t)nd && cs->n == (size_t)nd;
		for (int i = 0; hit && i < nd; i++) {
			cof[i] = tuple_at(co, (size_t)i);
			csz[i] = tuple_at(cs, (size_t)i);
			lo[i] = cof[i] > off[i] ? cof[i] : off[i];
			hi[i] = cof[i] + csz[i] < off[i] + shape[i] ? cof[i] + csz[i] : off[i] + shape[i];
			hit = cof[i] >= 0 && csz[i] >= 1 && lo[i] < hi[i];
		}
		if (!hit) continue;
		const dist_item *it = find_item(d, key, co);
		if (!it) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: a chunk without storage_data", m->iter_dir, key);
		mgt_torch *t = NULL;
		mgt_status st = open_item(m, it, &t);
		const mgt_py *x = st ? NULL : mgt_torch_root(t);
		size_t cn = 1;
		for (int i = 0; i < nd; i++) cn *= (size_t)csz[i];
		if (!st && (!x || x->kind != MGT_PY_TENSOR || mgt_py_numel(x) != (int64_t)cn))
			st = mgt_err(MGT_ERR_FORMAT, "%s: %s: the chunk is not a tensor of its %zu elements", mgt_torch_name(t), key, cn);
		if (!st) st = mg_check_float(t, x, key);
		if (!st && cn > d->chunk_n) {
			float *q = realloc(d->chunk, cn * sizeof(float));
			if (!q) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
			else {
				d->chunk = q;
				d->chunk_n = cn;
			}
		}
		if (!st) st = mgt_torch_read_f32(t, x, d->chunk);
		mgt_torch_close(t);
		if (st) return st;
		/* copy the intersection, row by row of the last dim */
		int64_t idx[4] = {0}, w = hi[nd - 1] - lo[nd - 1];
		for (int i = 0; i < nd; i++) idx[i] = lo[i];
		for (;;) {
			size_t so = 0, doff = 0;
			for (int i = 0; i < nd; i++) {
				so = so * (size_t)csz[i] + (size_t)(idx[i] - cof[i]);
				doff = doff * (size_t)shape[i] + (size_t)(idx[i] - off[i]);
			}
			memcpy(dst + doff, d->chunk + so, (size_t)w * sizeof(float));
			covered += (size_t)w;
			int i = nd - 2;
			while (i >= 0 && ++idx[i] == hi[i]) {
				idx[i] = lo[i];
				i--;
			}
			if (i < 0) break;
		}
	}
	if (covered != want)
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: its chunks cover %zu of the %zu elements asked", m->iter_dir, key, covered, want);
	return MGT_OK;
}

/* An expert dataset g (decoder.layers.N.mlp.experts.linear_fc1.weight, [E, rows, cols]) under
 * prefix pre: SequentialMLP's key decoder.layers.mlp.experts.experts.<suffix> stacked [L, E, rows,
 * cols], or per layer decoder.layers.N.mlp.experts.experts.<suffix> [E, rows, cols]
 * (moe/experts.py SequentialMLP.sharded_state_dict). */
static mgt_status read_experts(mg_src *m, dist_state *d, const mgt_tensor *g, const char *pre, float *dst, bool *found)
{
	const char *rest = strchr(g->dataset + 15, '.'), *suf = strstr(g->dataset, ".mlp.experts.");
	char key[300];
	*found = false;
	if (!rest || !suf) return MGT_OK;
	suf += 13;
	int64_t E = g->num_experts, r = g->shape[0], c = g->ndim > 1 ? g->shape[1] : 1;
	snprintf(key, sizeof key, "%sdecoder.layers.%d.mlp.experts.experts.%s", pre, g->layer, suf);
	const mgt_py *md = key_md(d, key);
	if (md) {
		int64_t off[3] = {0, 0, 0}, shape[3] = {E, r, c};
		*found = true;
		return read_box(m, d, key, md, g->ndim + 1, off, shape, dst);
	}
	snprintf(key, sizeof key, "%sdecoder.layers.mlp.experts.experts.%s", pre, suf);
	if (!(md = key_md(d, key))) return MGT_OK;
	const mgt_py *sz = mgt_py_get(md, "size");
	if (!sz || sz->n != (size_t)g->ndim + 2 || tuple_at(sz, 1) != E || tuple_at(sz, 2) != r)
		return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: stacked shape other than [layers, %lld experts, %lld, ...]",
			       m->iter_dir, key, (long long)E, (long long)r);
	int64_t off[4] = {g->layer, 0, 0, 0}, shape[4] = {1, E, r, c};
	*found = true;
	return read_box(m, d, key, md, g->ndim + 2, off, shape, dst);
}

/* Row g of kind k under prefix pre: its own key, else layer g->layer of the stacked key. */
static mgt_status read_row(mg_src *m, dist_state *d, const mgt_tensor *g, const char *pre, float *dst, bool *found)
{
	if (g->num_experts > 0) return read_experts(m, d, g, pre, dst, found);
	char key[300];
	snprintf(key, sizeof key, "%s%s", pre, g->name);
	const mgt_py *md = key_md(d, key);
	int64_t off[4] = {0}, shape[4] = {g->shape[0], g->ndim > 1 ? g->shape[1] : 1};
	*found = true;
	if (md) {
		const mgt_py *sz = mgt_py_get(md, "size");
		if (!sz || sz->n != (size_t)g->ndim || tuple_at(sz, 0) != g->shape[0] || (g->ndim > 1 && tuple_at(sz, 1) != g->shape[1]))
			return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: global shape other than the [%lld, %lld] the args give",
				       m->iter_dir, key, (long long)g->shape[0], (long long)(g->ndim > 1 ? g->shape[1] : 1));
		return read_box(m, d, key, md, g->ndim, off, shape, dst);
	}
	const char *rest = g->layer >= 0 && !strncmp(g->name, "decoder.layers.", 15) ? strchr(g->name + 15, '.') : NULL;
	if (rest) snprintf(key, sizeof key, "%sdecoder.layers%s", pre, rest);
	md = rest ? key_md(d, key) : NULL;
	if (!md) {
		*found = false;
		snprintf(key, sizeof key, "%s%s", pre, g->name);
		return MGT_OK;
	}
	const mgt_py *sz = mgt_py_get(md, "size");
	if (!sz || sz->n != (size_t)g->ndim + 1 || tuple_at(sz, 0) != m->a.model.num_layers || tuple_at(sz, 1) != g->shape[0] ||
	    (g->ndim > 1 && tuple_at(sz, 2) != g->shape[1]))
		return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: stacked shape other than [%lld, %lld, %lld] (layers, the "
			       "args' shape)", m->iter_dir, key, (long long)m->a.model.num_layers, (long long)g->shape[0],
			       (long long)(g->ndim > 1 ? g->shape[1] : 1));
	int64_t off3[4] = {g->layer, 0, 0}, shape3[4] = {1, g->shape[0], g->ndim > 1 ? g->shape[1] : 1};
	return read_box(m, d, key, md, g->ndim + 1, off3, shape3, dst);
}

/* ---- fsdp_dtensor's per-parameter keys ---- */

/* Megatron-FSDP's parameter name of expert e of row g (alt 0: TEGroupedMLP's
 * mlp.experts.linear_fc1.weight<e>; 1: SequentialMLP's mlp.experts.local_experts.<e>.linear_fc1
 * .weight), or g's own name (a dense row), into out. */
static void dtensor_name(const mgt_tensor *g, int64_t e, int alt, char *out, size_t n)
{
	const char *suf = g->num_experts > 0 ? strstr(g->dataset, ".mlp.experts.") : NULL;
	if (!suf) snprintf(out, n, "%s", g->name);
	else if (!alt) snprintf(out, n, "%s%lld", g->dataset, (long long)e);
	else snprintf(out, n, "%.*s.mlp.experts.local_experts.%lld.%s", (int)(suf - g->dataset), g->dataset, (long long)e, suf + 13);
}

/* Whether name is a gated fc1 that handle_swiglu_in_state_dict splits into _w and _v. */
static bool dtensor_glu(const mg_src *m, const char *name)
{
	return m->a.model.swiglu && strstr(name, "linear_fc1.") != NULL;
}

/* The .metadata key of parameter name (part: "", "_w" or "_v") of kind k into out. */
static void dtensor_key(const char *name, const char *part, int k, char *out, size_t n)
{
	static const char *const kind[3] = {"", ".exp_avg", ".exp_avg_sq"};
	snprintf(out, n, "%s%s%s%s", k ? "optimizer.state.module.module.module." : "model.module.", name, part, kind[k]);
}

/* dst [rows, cols] := parameter name of kind k, whole or as its _w / _v halves of rows / 2 each;
 * *found false (nothing read) when its first key is absent. */
static mgt_status dtensor_param(mg_src *m, dist_state *d, const char *name, int nd, int64_t rows, int64_t cols, int k,
				float *dst, bool *found)
{
	bool glu = dtensor_glu(m, name);
	int np = glu ? 2 : 1;
	int64_t pr = rows / np, shape[2] = {pr, cols}, off[2] = {0, 0};
	static const char *const parts[2] = {"_w", "_v"};
	char key[320];
	*found = true;
	for (int p = 0; p < np; p++) {
		dtensor_key(name, glu ? parts[p] : "", k, key, sizeof key);
		const mgt_py *md = key_md(d, key), *sz = md ? mgt_py_get(md, "size") : NULL;
		if (!md && !p) {
			*found = false;
			return MGT_OK;
		}
		if (!md) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: no key %s (the other half of a SwiGLU fc1)", m->iter_dir, key);
		if (!sz || sz->n != (size_t)nd || tuple_at(sz, 0) != pr || (nd > 1 && tuple_at(sz, 1) != cols))
			return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: global shape other than the [%lld, %lld] the args give",
				       m->iter_dir, key, (long long)pr, (long long)cols);
		mgt_status st = read_box(m, d, key, md, nd, off, shape, dst + (size_t)(p * pr * cols));
		if (st) return st;
	}
	return MGT_OK;
}

/* Row g (an expert dataset: all its experts, [E, rows, cols]) of kind k into dst. */
static mgt_status dtensor_whole(mg_src *m, dist_state *d, const mgt_tensor *g, int k, float *dst)
{
	int64_t E = g->num_experts > 0 ? g->num_experts : 1, cols = g->ndim > 1 ? g->shape[1] : 1;
	size_t each = cv_row_numel(g);
	char name[256], key[320];
	mgt_status st = MGT_OK;
	for (int64_t e = 0; !st && e < E; e++) {
		bool found = false;
		for (int alt = 0; !st && !found && alt < (g->num_experts > 0 ? 2 : 1); alt++) {
			dtensor_name(g, e, alt, name, sizeof name);
			st = dtensor_param(m, d, name, g->ndim, g->shape[0], cols, k, dst + (size_t)e * each, &found);
		}
		if (!st && !found) {
			dtensor_name(g, e, 0, name, sizeof name);
			dtensor_key(name, dtensor_glu(m, name) ? "_w" : "", k, key, sizeof key);
			st = mgt_err(MGT_ERR_FORMAT, "%s/.metadata: no key %s%s", m->iter_dir, key,
				     g->num_experts > 0 ? " (nor SequentialMLP's local_experts one)" : "");
		}
	}
	return st;
}

/* Whether key (a model.module. tensor) is a parameter of the model the args describe. */
static bool dtensor_known(const mg_src *m, const char *key)
{
	char name[256], want[320];
	for (int r = 0; r < m->full.n; r++) {
		const mgt_tensor *g = &m->full.t[r];
		for (int alt = 0; alt < (g->num_experts > 0 ? 2 : 1); alt++) {
			dtensor_name(g, g->num_experts > 0 ? g->expert : 0, alt, name, sizeof name);
			bool glu = dtensor_glu(m, name);
			for (int p = 0; p < (glu ? 2 : 1); p++) {
				dtensor_key(name, glu ? (p ? "_v" : "_w") : "", 0, want, sizeof want);
				if (!strcmp(key, want)) return true;
			}
		}
	}
	return false;
}

mgt_status mg_dist_whole(mg_src *m, const mgt_tensor *g, int k, float *dst)
{
	dist_state *d = m->dist;
	if (m->dtensor) return dtensor_whole(m, d, g, k, dst);
	bool found = false;
	mgt_status st = MGT_OK;
	static const char *const main_pre[] = {"optimizer.state.fp32_param.", "optimizer.state.param.", ""};
	static const char *const moment_pre[] = {"", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq."};
	if (k == 0)
		for (int i = m->optim ? 0 : 2; !st && !found && i < 3; i++) st = read_row(m, d, g, main_pre[i], dst, &found);
	else
		st = read_row(m, d, g, moment_pre[k], dst, &found);
	if (!st && !found)
		st = mgt_err(MGT_ERR_FORMAT, "%s/.metadata: no key %s%s (nor the stacked decoder.layers one)", m->iter_dir,
			     moment_pre[k], g->num_experts > 0 ? g->dataset : g->name);
	return st;
}

/* ---- the distributed optimizer's dp_reshardable buckets ---- */

/* Bucket b of key prefix base (…gbuf_idx_<g>.dtype_<…>.bucket_idx_<b>.<kind>): its key, or NULL. */
static const char *bucket_key(const dist_state *d, const char *base, int b, const char *kind)
{
	char want[64];
	snprintf(want, sizeof want, ".bucket_idx_%d.%s", b, kind);
	size_t bl = strlen(base), wl = strlen(want);
	for (size_t i = 0; i < d->sdm->n; i++) {
		const char *k = mgt_py_str(d->sdm->v[2 * i]);
		size_t kl = k ? strlen(k) : 0;
		if (k && kl > bl + wl && !strncmp(k, base, bl) && !strcmp(k + kl - wl, want)) return k;
	}
	return NULL;
}

/* d->flat[k] := the buckets of buffer gbuf of model-parallel group g concatenated
 * (distrib_optimizer.py sharded_param_state_dp_reshardable: each bucket one key of its unpadded
 * length; the group index is the model-parallel rank, pp x tp + tp_rank). */
static mgt_status load_flat(mg_src *m, dist_state *d, int g, int gbuf, int k, int exp)
{
	if (d->flat_g[k] == g * 2 + exp && d->flat_b[k] == gbuf) return MGT_OK;
	static const char *const kinds[3] = {"param", "exp_avg", "exp_avg_sq"};
	char base[160], pre[32] = "";
	if (m->chained) snprintf(pre, sizeof pre, "chained_%d.", exp);
	snprintf(base, sizeof base, "%soptimizer.distributed.dp_group_idx_%d.gbuf_idx_%d.dtype_", pre, g, gbuf);
	size_t n = 0;
	mgt_status st = MGT_OK;
	for (int b = 0; !st; b++) {
		const char *key = bucket_key(d, base, b, kinds[k]);
		if (!key && !b) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: no key %s...bucket_idx_0.%s", m->iter_dir, base, kinds[k]);
		if (!key) break;
		const mgt_py *md = key_md(d, key), *sz = md ? mgt_py_get(md, "size") : NULL;
		int64_t len = tuple_at(sz, 0);
		if (!sz || sz->n != 1 || len < 1) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: %s: expected a 1-D tensor", m->iter_dir, key);
		float *q = realloc(d->flat[k], (n + (size_t)len) * sizeof(float));
		if (!q) return mgt_err(MGT_ERR_NOMEM, "out of memory");
		d->flat[k] = q;
		int64_t off = 0;
		st = read_box(m, d, key, md, 1, &off, &len, q + n);
		n += (size_t)len;
	}
	d->flat_n[k] = n;
	d->flat_g[k] = st ? -1 : g * 2 + exp;
	d->flat_b[k] = st ? -1 : gbuf;
	return st;
}

mgt_status mg_dist_opt_local(mg_src *m, mg_chunk *c, const mgt_tensor *x, int k, float *dst)
{
	dist_state *d = m->dist;
	mgt_status st = c->where ? MGT_OK : mg_dist_map(m, c);
	if (st) return st;
	/* the group: the model-parallel rank, or for the expert optimizer the rank in the
	 * tensor x expert x pipeline group (expert TP = TP) */
	int exp = m->chained && x->num_experts > 0;
	int g = exp ? c->tp + m->tp * (c->ep + m->ep * c->pp) : c->pp * m->tp + c->tp;
	if ((st = load_flat(m, d, g, c->gbuf, k, exp))) return st;
	int64_t off = c->where[x - c->tt.t], want = c->ends[exp];
	if (off < 0 || (int64_t)d->flat_n[k] != want)
		return mgt_err(MGT_ERR_FORMAT, "%s: optimizer.distributed.dp_group_idx_%d.gbuf_idx_%d: its buckets hold %zu "
			       "elements but Megatron's layout of the model its args describe (data parallel %d) ends at %lld",
			       m->iter_dir, g, c->gbuf, d->flat_n[k], m->dp, (long long)want);
	memcpy(dst, d->flat[k] + off, x->numel * sizeof(float));
	return MGT_OK;
}

/* fsdp_dtensor: every tensor key outside optimizer.* and rng_state is a model.module. parameter. */
static mgt_status dtensor_check_keys(mg_src *m, const dist_state *d)
{
	for (size_t i = 0; i < d->sdm->n; i++) {
		const char *k = mgt_py_str(d->sdm->v[2 * i]);
		if (!k) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: a state_dict_metadata key that is not a string", m->iter_dir);
		if (!key_md(d, k) || !strncmp(k, "optimizer.", 10) || !strncmp(k, "rng_state", 9) || strstr(k, "_extra_state"))
			continue;
		if (!dtensor_known(m, k))
			return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: tensor %s is not part of the model its args describe", m->iter_dir, k);
	}
	return MGT_OK;
}

mgt_status mg_dist_check_keys(mg_src *m)
{
	const dist_state *d = m->dist;
	if (m->dtensor) return dtensor_check_keys(m, d);
	static const char *const other[] = {"optimizer.", "chained_", "rng_state", "common_state", "rerun_state_machine", NULL};
	for (size_t i = 0; i < d->sdm->n; i++) {
		const char *k = mgt_py_str(d->sdm->v[2 * i]);
		if (!k) return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: a state_dict_metadata key that is not a string", m->iter_dir);
		bool skip = strstr(k, "_extra_state") != NULL;
		for (const char *const *o = other; !skip && *o; o++) skip = !strncmp(k, *o, strlen(*o));
		bool known = skip;
		for (int r = 0; !known && r < m->full.n; r++) {
			const mgt_tensor *g = &m->full.t[r];
			const char *n = g->num_experts > 0 ? g->dataset : g->name;
			const char *rest = g->layer >= 0 && !strncmp(n, "decoder.layers.", 15) ? strchr(n + 15, '.') : NULL;
			char alt[300] = "";
			const char *suf = g->num_experts > 0 ? strstr(n, ".mlp.experts.") : NULL;
			if (suf) snprintf(alt, sizeof alt, ".mlp.experts.experts.%s", suf + 13);
			known = !strcmp(k, n) || (rest && !strncmp(k, "decoder.layers", 14) && !strcmp(k + 14, rest)) ||
				(suf && !strncmp(k, "decoder.layers", 14) && !strcmp(k + 14, alt));
			if (!known && suf) { /* per layer: decoder.layers.N.mlp.experts.experts.<suffix> */
				char pl[300];
				snprintf(pl, sizeof pl, "decoder.layers.%d%s", g->layer, alt);
				known = !strcmp(k, pl);
			}
		}
		if (!known)
			return mgt_err(MGT_ERR_FORMAT, "%s/.metadata: tensor %s is not part of the model its args describe", m->iter_dir, k);
	}
	return MGT_OK;
}
