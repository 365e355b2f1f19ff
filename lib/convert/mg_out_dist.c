/* lib/convert/mg_out_dist.c: an mgt checkpoint written as Megatron-LM's `torch_dist` format
 * (mgt-megatron(5); the reader's facts in megatron_dist.c): iter_N/metadata.json
 * {"sharded_backend": "torch_dist", "sharded_backend_version": 1}, common.pt (args,
 * checkpoint_version, iteration: Megatron-Core <= 0.18's place, which later releases still read
 * first), __0_0.distcp holding one torch.save zip per chunk back to back, and .metadata, the
 * pickled torch.distributed.checkpoint Metadata (PyTorch >= 2.4's classes: state_dict_metadata,
 * storage_data, version "1.0.0").  Keys as Megatron-Core's sharded_state_dict names them: global
 * shapes, a homogeneous decoder stacked [layers, ...] under decoder.layers.<suffix> (one chunk per
 * layer), SequentialMLP's experts under decoder.layers.mlp.experts.experts.<suffix> [layers, E,
 * ...], per-layer keys when the layers differ (MoE on some layers); Transformer Engine's
 * _extra_state as ShardedObjects (an empty uint8 tensor, FP8 off) for every module that has one;
 * with the checkpoint's Adam state, the non-distributed optimizer's per-tensor keys
 * optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key> and its common part in common.pt.
 * The whole model is written from one rank's view, so any TP / PP layout loads it. */
#include "megatron_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	char key[256];
	int nd;                    /* 0: a BYTE_IO object */
	int64_t gs[5];
	mgt_dt dt;
} dkey;

typedef struct {
	int key;
	int64_t off[5], sz[5];
	uint64_t at, len;
} ditem;

typedef struct {
	FILE *f;
	char *path;
	uint64_t pos;
	dkey *keys;
	int nkeys;
	ditem *items;
	int nitems;
	mgt_status st;
} dstore;

static int key_of(dstore *s, const char *name, int nd, const int64_t *gs, mgt_dt dt)
{
	for (int i = 0; i < s->nkeys; i++)
		if (!strcmp(s->keys[i].key, name)) return i;
	dkey *k = realloc(s->keys, ((size_t)s->nkeys + 1) * sizeof *k);
	if (!k) {
		s->st = mgt_err(MGT_ERR_NOMEM, "out of memory");
		return -1;
	}
	s->keys = k;
	dkey *n = &k[s->nkeys];
	memset(n, 0, sizeof *n);
	snprintf(n->key, sizeof n->key, "%s", name);
	n->nd = nd;
	for (int d = 0; d < nd; d++) n->gs[d] = gs[d];
	n->dt = dt;
	return s->nkeys++;
}

/* Append one item (a torch.save zip made by w) under key k at offsets off, sizes sz. */
static void add_item(dstore *s, int k, mgt_pyw *w, const int64_t *off, const int64_t *sz)
{
	void *buf = NULL;
	size_t n = 0;
	if (!s->st) s->st = mgt_pyw_to_mem(w, "archive", &buf, &n);
	ditem *it = s->st ? NULL : realloc(s->items, ((size_t)s->nitems + 1) * sizeof *it);
	if (!s->st && !it) s->st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!s->st && fwrite(buf, 1, n, s->f) != n) s->st = mgt_err(MGT_ERR_IO, "%s: %s", s->path, strerror(errno));
	if (!s->st) {
		s->items = it;
		ditem *d = &it[s->nitems++];
		memset(d, 0, sizeof *d);
		d->key = k;
		for (int i = 0; off && i < s->keys[k].nd; i++) {
			d->off[i] = off[i];
			d->sz[i] = sz[i];
		}
		d->at = s->pos;
		d->len = n;
		s->pos += n;
	}
	free(buf);
}

/* A chunk [sz] at off of tensor key (global shape gs), data in dt. */
static void put_chunk(dstore *s, const char *key, int nd, const int64_t *gs, const int64_t *off, const int64_t *sz,
		      mgt_dt dt, const void *data)
{
	int k = key_of(s, key, nd, gs, dt);
	mgt_pyw *w = NULL;
	if (k < 0 || s->st || (s->st = mgt_pyw_new(&w))) return;
	mgt_pyw_tensor(w, dt, nd, sz, data);
	add_item(s, k, w, off, sz);
	mgt_pyw_free(w);
}

/* A ShardedObject: torch.save([empty uint8 tensor]) under key/shard_<offsets>_<shape>. */
static void put_extra(dstore *s, const char *mod, const char *shard)
{
	char key[300];
	snprintf(key, sizeof key, "%s._extra_state/shard_%s", mod, shard);
	int k = key_of(s, key, 0, NULL, MGT_ST_U8);
	mgt_pyw *w = NULL;
	if (k < 0 || s->st || (s->st = mgt_pyw_new(&w))) return;
	int64_t zero = 0;
	mgt_pyw_list_begin(w);
	mgt_pyw_tensor(w, MGT_ST_U8, 1, &zero, "");
	mgt_pyw_list_end(w);
	add_item(s, k, w, NULL, NULL);
	mgt_pyw_free(w);
}

/* ---- the model ---- */

static bool homogeneous(const mgt_model_config *c)
{
	if (c->num_experts <= 0) return true;
	for (int64_t l = 0; l < c->num_layers; l++)
		if (!mgt_moe_is_layer(c, l)) return false;
	return true;
}

/* Whole row g (or its expert dataset) under prefix (an optimizer moment's, or "") in dt, into
 * *buf (grown). */
static mgt_status whole_of(mg_out *o, const mgt_tensor *g, const char *prefix, mgt_dt dt, void **buf, size_t *cap,
			   size_t *numel)
{
	int64_t gs[3], off[3] = {0, 0, 0};
	char name[240];
	int nd = mgt_ckpt_row_dataset(g, prefix, name, sizeof name, gs);
	size_t n = 1;
	for (int d = 0; d < nd; d++) n *= (size_t)gs[d];
	if (n * sizeof(float) > *cap) {
		void *q = realloc(*buf, n * sizeof(float));
		if (!q) return mgt_err(MGT_ERR_NOMEM, "out of memory");
		*buf = q;
		*cap = n * sizeof(float);
	}
	float *f = *buf;
	mgt_status st = mgt_source_read(o->h.src, name, nd, gs, off, gs, MGT_CKPT_F32, f);
	if (!st) st = cv_check_finite(f, n, mgt_source_dir(o->h.src), name);
	if (!st && dt != MGT_ST_F32) { /* in order, in place: element i's 16 bits land at or before float i */
		uint16_t h;
		for (size_t i = 0; i < n; i++) {
			h = dt == MGT_ST_BF16 ? mgt_f32_to_bf16(f[i]) : mgt_f32_to_f16(f[i]);
			memcpy((char *)*buf + i * 2, &h, 2);
		}
	}
	*numel = n;
	return st;
}

/* The sharded key of row g: stacked (decoder.layers.<suffix>, SequentialMLP's experts), per layer,
 * or its own name. */
static void dist_key(const mgt_tensor *g, bool stacked, char *out, size_t n)
{
	const char *name = g->num_experts > 0 ? g->dataset : g->name;
	const char *rest = g->layer >= 0 ? strchr(name + 15, '.') : NULL, *suf = strstr(name, ".mlp.experts.");
	if (g->num_experts > 0 && suf && stacked) snprintf(out, n, "decoder.layers.mlp.experts.experts.%s", suf + 13);
	else if (g->num_experts > 0 && suf) snprintf(out, n, "decoder.layers.%d.mlp.experts.experts.%s", g->layer, suf + 13);
	else if (rest && stacked) snprintf(out, n, "decoder.layers%s", rest);
	else snprintf(out, n, "%s", name);
}

/* Row g as key pre + its sharded key, from the source's prefix src in dt. */
static void put_row(mg_out *o, dstore *s, const mgt_tensor *g, bool stacked, const char *pre, const char *src, mgt_dt dt,
		    void **buf, size_t *cap)
{
	size_t numel;
	if (s->st || (s->st = whole_of(o, g, src, dt, buf, cap, &numel))) return;
	char key[256], k0[220];
	dist_key(g, stacked, k0, sizeof k0);
	snprintf(key, sizeof key, "%s%s", pre, k0);
	int64_t gs[5], off[5] = {0}, sz[5];
	int nd = 0, e = g->num_experts > 0;
	if (g->layer >= 0 && stacked) {
		gs[nd] = o->h.a.model.num_layers;
		off[nd] = g->layer;
		sz[nd++] = 1;
	}
	if (e) {
		gs[nd] = g->num_experts;
		sz[nd++] = g->num_experts;
	}
	for (int d = 0; d < g->ndim; d++) {
		gs[nd] = g->shape[d];
		sz[nd++] = g->shape[d];
	}
	put_chunk(s, key, nd, gs, off, sz, dt, *buf);
}

/* Transformer Engine's extra state of layer l: its linear modules and attention, a MoE layer's
 * TENorm, latent projections and experts (transformer/utils.py _get_extra_state_offsets:
 * shard_<l>_<L>). */
static void put_layer_extra(mg_out *o, dstore *s, int64_t l, bool stacked)
{
	const mgt_model_config *c = &o->h.a.model;
	bool moe = c->num_experts > 0 && mgt_moe_is_layer(c, l);
	char shard[64], mod[200], pre[64];
	if (stacked) {
		snprintf(shard, sizeof shard, "%lld_%lld", (long long)l, (long long)c->num_layers);
		snprintf(pre, sizeof pre, "decoder.layers");
	} else {
		snprintf(shard, sizeof shard, "0_1");
		snprintf(pre, sizeof pre, "decoder.layers.%lld", (long long)l);
	}
	static const char *const attn[] = {"self_attention.core_attention", "self_attention.linear_proj",
					   "self_attention.linear_qkv"};
	for (int i = 0; i < 3; i++) {
		snprintf(mod, sizeof mod, "%s.%s", pre, attn[i]);
		put_extra(s, mod, shard);
	}
	if (!moe) {
		for (int i = 1; i <= 2; i++) {
			snprintf(mod, sizeof mod, "%s.mlp.linear_fc%d", pre, i);
			put_extra(s, mod, shard);
		}
		return;
	}
	snprintf(mod, sizeof mod, "%s.pre_mlp_layernorm", pre);
	put_extra(s, mod, shard);
	for (int i = 1; c->moe_latent_size && i <= 2; i++) { /* TELinear, parallel_mode "duplicated" */
		snprintf(mod, sizeof mod, "%s.mlp.fc%d_latent_proj", pre, i);
		put_extra(s, mod, shard);
	}
	for (int64_t e = 0; e < c->num_experts; e++)
		for (int i = 1; i <= 2; i++) {
			char es[96];
			if (stacked) snprintf(es, sizeof es, "%lld.%lld_%lld.%lld", (long long)l, (long long)e, (long long)c->num_layers,
					      (long long)c->num_experts);
			else snprintf(es, sizeof es, "%lld_%lld", (long long)e, (long long)c->num_experts);
			if (stacked) snprintf(mod, sizeof mod, "decoder.layers.mlp.experts.experts.linear_fc%d", i);
			else snprintf(mod, sizeof mod, "decoder.layers.%lld.mlp.experts.experts.linear_fc%d", (long long)l, i);
			put_extra(s, mod, es);
		}
}

static void put_model(mg_out *o, dstore *s)
{
	bool stacked = homogeneous(&o->h.a.model);
	void *buf = NULL;
	size_t cap = 0;
	const mgt_tensor_table *ft = &o->h.full;
	for (int i = 0; !s->st && i < ft->n; i++) {
		const mgt_tensor *g = &ft->t[i];
		if (g->num_experts > 0 && mgt_ckpt_row_seen(ft, i)) continue;
		put_row(o, s, g, stacked, "", "", o->dt, &buf, &cap);
		/* the non-distributed optimizer's per-tensor keys (dist_checkpointing/optimizer.py
		 * optim_state_to_sharding_state; Float16OptimizerWithFloat16Params' fp32_param) */
		if (o->optim) {
			put_row(o, s, g, stacked, "optimizer.state.exp_avg.", "optimizer.state.exp_avg.", MGT_ST_F32, &buf, &cap);
			put_row(o, s, g, stacked, "optimizer.state.exp_avg_sq.", "optimizer.state.exp_avg_sq.", MGT_ST_F32, &buf, &cap);
		}
		if (o->optim && o->dt != MGT_ST_F32)
			put_row(o, s, g, stacked, "optimizer.state.fp32_param.", "", MGT_ST_F32, &buf, &cap);
	}
	for (int64_t l = 0; !s->st && l < o->h.a.model.num_layers; l++) put_layer_extra(o, s, l, stacked);
	put_extra(s, "decoder.final_layernorm", "0_1");
	free(buf);
}

/* ---- .metadata, common.pt, metadata.json ---- */

static const char *const DCP_MD = "torch.distributed.checkpoint.metadata";

static void put_size(mgt_pyw *w, int nd, const int64_t *v)
{
	mgt_pyw_reduce_begin(w, "torch", "Size");
	mgt_pyw_tuple_begin(w);
	for (int d = 0; d < nd; d++) mgt_pyw_int(w, v[d]);
	mgt_pyw_tuple_end(w);
	mgt_pyw_reduce_end(w);
}

static const char *torch_dtype(mgt_dt dt)
{
	return dt == MGT_ST_BF16 ? "bfloat16" : dt == MGT_ST_F16 ? "float16" : dt == MGT_ST_U8 ? "uint8" : "float32";
}

/* TensorStorageMetadata(properties, size, chunks) of key k. */
static void put_tensor_md(mgt_pyw *w, const dstore *s, int k)
{
	const dkey *d = &s->keys[k];
	mgt_pyw_obj_begin(w, DCP_MD, "TensorStorageMetadata");
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "properties");
	mgt_pyw_obj_begin(w, DCP_MD, "TensorProperties"); /* __getstate__'s 5-tuple */
	mgt_pyw_tuple_begin(w);
	mgt_pyw_global(w, "torch", torch_dtype(d->dt));
	mgt_pyw_global(w, "torch", "strided");
	mgt_pyw_bool(w, false);
	mgt_pyw_reduce_begin(w, DCP_MD, "_MEM_FORMAT_ENCODING");
	mgt_pyw_int(w, 0); /* TORCH_CONTIGUOUS_FORMAT */
	mgt_pyw_reduce_end(w);
	mgt_pyw_bool(w, false);
	mgt_pyw_tuple_end(w);
	mgt_pyw_obj_end(w);
	mgt_pyw_str(w, "size");
	put_size(w, d->nd, d->gs);
	mgt_pyw_str(w, "chunks");
	mgt_pyw_list_begin(w);
	for (int i = 0; i < s->nitems; i++) {
		if (s->items[i].key != k) continue;
		mgt_pyw_obj_begin(w, DCP_MD, "ChunkStorageMetadata");
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "offsets");
		put_size(w, d->nd, s->items[i].off);
		mgt_pyw_str(w, "sizes");
		put_size(w, d->nd, s->items[i].sz);
		mgt_pyw_dict_end(w);
		mgt_pyw_obj_end(w);
	}
	mgt_pyw_list_end(w);
	mgt_pyw_dict_end(w);
	mgt_pyw_obj_end(w);
}

static void put_storage(mgt_pyw *w, const dstore *s, const char *file)
{
	mgt_pyw_dict_begin(w);
	for (int i = 0; i < s->nitems; i++) {
		const ditem *it = &s->items[i];
		const dkey *d = &s->keys[it->key];
		mgt_pyw_obj_begin(w, DCP_MD, "MetadataIndex");
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "fqn");
		mgt_pyw_str(w, d->key);
		mgt_pyw_str(w, "offset");
		if (d->nd) put_size(w, d->nd, it->off);
		else mgt_pyw_none(w);
		mgt_pyw_str(w, "index");
		mgt_pyw_none(w);
		mgt_pyw_dict_end(w);
		mgt_pyw_obj_end(w);
		mgt_pyw_obj_begin(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "relative_path");
		mgt_pyw_str(w, file);
		mgt_pyw_str(w, "offset");
		mgt_pyw_int(w, (int64_t)it->at);
		mgt_pyw_str(w, "length");
		mgt_pyw_int(w, (int64_t)it->len);
		mgt_pyw_dict_end(w);
		mgt_pyw_obj_end(w);
	}
	mgt_pyw_dict_end(w);
}

static mgt_status write_metadata(const dstore *s, const char *dir, const char *file)
{
	mgt_pyw *w = NULL;
	mgt_status st = mgt_pyw_new(&w);
	if (st) return st;
	mgt_pyw_obj_begin(w, DCP_MD, "Metadata");
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "state_dict_metadata");
	mgt_pyw_dict_begin(w);
	for (int k = 0; k < s->nkeys; k++) {
		mgt_pyw_str(w, s->keys[k].key);
		if (s->keys[k].nd) put_tensor_md(w, s, k);
		else {
			mgt_pyw_obj_begin(w, DCP_MD, "BytesStorageMetadata");
			mgt_pyw_dict_begin(w);
			mgt_pyw_dict_end(w);
			mgt_pyw_obj_end(w);
		}
	}
	mgt_pyw_dict_end(w);
	mgt_pyw_str(w, "planner_data");
	mgt_pyw_none(w);
	mgt_pyw_str(w, "storage_data");
	put_storage(w, s, file);
	mgt_pyw_str(w, "storage_meta");
	mgt_pyw_none(w);
	mgt_pyw_str(w, "version");
	mgt_pyw_str(w, "1.0.0");
	mgt_pyw_dict_end(w);
	mgt_pyw_obj_end(w);
	void *buf = NULL;
	size_t n = 0;
	st = mgt_pyw_pickle(w, &buf, &n);
	char *p = st ? NULL : cv_join(dir, ".metadata");
	FILE *f = p ? fopen(p, "wb") : NULL;
	if (!st && (!f || fwrite(buf, 1, n, f) != n)) st = mgt_err(MGT_ERR_IO, "%s: %s", p ? p : dir, strerror(errno));
	if (f && fclose(f) && !st) st = mgt_err(MGT_ERR_IO, "%s: %s", p, strerror(errno));
	free(p);
	free(buf);
	mgt_pyw_free(w);
	return st;
}

static mgt_status write_common(mg_out *o, const char *dir, int64_t it, json_t *meta)
{
	mgt_pyw *w = NULL;
	mgt_status st = mgt_pyw_new(&w);
	if (st) return st;
	mgt_pyw_dict_begin(w);
	mg_put_head(o, w, it, meta);
	if (o->optim) { /* the groups without params and the common step (optimizer.py sharded_state_dict) */
		mgt_pyw_str(w, "opt_param_scheduler");
		mg_put_scheduler(o, w, meta);
		mgt_pyw_str(w, "optimizer");
		if (o->dt != MGT_ST_F32) {
			mgt_pyw_dict_begin(w);
			mgt_pyw_str(w, "optimizer");
		}
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "param_groups");
		mgt_pyw_list_begin(w);
		mg_put_group(o, w, true, 0, -1);
		mg_put_group(o, w, false, 0, -1);
		mgt_pyw_list_end(w);
		mgt_pyw_str(w, "state");
		mgt_pyw_dict_begin(w);
		mgt_pyw_str(w, "common_step");
		o->step_f = (float)json_integer_value(json_object_get(json_object_get(meta, "optimizer"), "step"));
		mgt_pyw_tensor(w, MGT_ST_F32, 0, NULL, &o->step_f);
		mgt_pyw_dict_end(w);
		mgt_pyw_dict_end(w);
		if (o->dt != MGT_ST_F32) mgt_pyw_dict_end(w);
	}
	mgt_pyw_str(w, "content_metadata"); /* checkpointing.py _build_sharded_state_dict_metadata */
	mgt_pyw_dict_begin(w);
	mgt_pyw_str(w, "singleton_local_shards");
	mgt_pyw_bool(w, false);
	mgt_pyw_str(w, "chained_optim_avoid_prefix");
	mgt_pyw_bool(w, true);
	mgt_pyw_dict_end(w);
	mgt_pyw_dict_end(w);
	char *p = cv_join(dir, "common.pt");
	st = p ? mgt_pyw_save(w, p, "common") : MGT_ERR_NOMEM;
	free(p);
	mgt_pyw_free(w);
	return st;
}

mgt_status mg_write_dist(mg_out *o, int64_t it, json_t *meta)
{
	static const char *const file = "__0_0.distcp";
	dstore s = {0};
	mgt_status st = mgt_mkdirs(o->iter);
	if (!st && !(s.path = cv_join(o->iter, file))) st = MGT_ERR_NOMEM;
	if (!st && !(s.f = fopen(s.path, "wb"))) st = mgt_err(MGT_ERR_IO, "%s: %s", s.path, strerror(errno));
	if (!st) {
		put_model(o, &s);
		st = s.st;
	}
	if (s.f && fclose(s.f) && !st) st = mgt_err(MGT_ERR_IO, "%s: %s", s.path, strerror(errno));
	if (!st) st = write_metadata(&s, o->iter, file);
	if (!st) st = write_common(o, o->iter, it, meta);
	if (!st) st = cv_write_text(o->iter, "metadata.json", "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}");
	free(s.keys);
	free(s.items);
	free(s.path);
	return st;
}
