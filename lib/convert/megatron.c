/* lib/convert/megatron.c: a Megatron-LM checkpoint read in place as a model source (mgt_source kind
 * 3; mgt-megatron(5)).  The legacy format (`--ckpt-format torch`, megatron/training/checkpointing.py
 * get_checkpoint_name): SAVE/latest_checkpointed_iteration.txt ("N" or "release"),
 * SAVE/iter_%07d/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt (PPP with pipeline parallelism, EEE with
 * expert parallelism), distrib_optim.pt beside it with the distributed optimizer; `torch_dist` and
 * Megatron-FSDP's `fsdp_dtensor` are megatron_dist.c.  Each file is a torch.save zip read through
 * lib/ckpt's pickle machine.
 *
 * The model arguments come from the checkpoint's `args` (argparse.Namespace, Megatron's names, which
 * are mgt's); the tensors are the whole-model table's (Megatron-Core names, global layer indices,
 * the layouts of mgt-ckpt(5), which are Megatron's), each made whole from the rank files: the row of
 * the table of each rank (mgt_tensor_table_build_ep at the saved TP, PP x VP stages and EP) is read
 * under its Megatron key (local layer and expert indices: transformer_block.py
 * TransformerBlock.sharded_state_dict, moe/experts.py) and put in its boxes (mgt_tensor_boxes).
 * Weights come from the optimizer's fp32 main parameters when it has them (Megatron's
 * Float16OptimizerWithFloat16Params fp32_from_fp16_params, the distributed optimizer's "param"),
 * else from the model (16-bit widened exactly); the Adam moments are listed as
 * optimizer.state.exp_avg.NAME and optimizer.state.exp_avg_sq.NAME, as mgt saves them. */
#include "megatron_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const kind_prefix[3] = { "", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq." };

/* ---- where the checkpoint is ---- */

static bool is_dir(const char *p)
{
	struct stat sb;
	return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

/* 1: dir holds mp_rank_* entries (torch), 2: a .metadata file (torch_dist), 0 neither. */
static int iter_format(const char *dir)
{
	if (cv_exists(dir, ".metadata")) return 2;
	DIR *d = opendir(dir);
	int f = 0;
	for (struct dirent *e; d && !f && (e = readdir(d));)
		if (!strncmp(e->d_name, "mp_rank_", 8)) f = 1;
	if (d) closedir(d);
	return f;
}

/* The tracker's text: an iteration, or "release" (-2). */
static mgt_status read_tracker(const char *dir, int64_t *it)
{
	char *p = cv_join(dir, MGT_CKPT_TRACKER);
	FILE *f = p ? fopen(p, "r") : NULL;
	char buf[64] = "";
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f) fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r')) buf[--n] = 0;
	mgt_status st = MGT_OK;
	char *end;
	long long v = strtoll(buf, &end, 10);
	if (!p) st = MGT_ERR_NOMEM;
	else if (!f) st = mgt_err(MGT_ERR_IO, "%s: %s", p, strerror(errno));
	else if (!strcmp(buf, "release")) *it = -2;
	else if (!n || *end || v < 0) st = mgt_err(MGT_ERR_FORMAT, "%s: expected an iteration or \"release\", found \"%s\"", p, buf);
	else *it = v;
	free(p);
	return st;
}

/* The iteration directory of a Megatron checkpoint: dir itself when it holds the rank files or
 * .metadata, else iter_%07d (step > 0) or the tracker's (release/ for "release"). */
static mgt_status find_iter(mg_src *m, const char *dir, int64_t step)
{
	if (iter_format(dir)) {
		m->iter_dir = mgt_strdup(dir);
		m->iteration = -1; /* from the file */
		return m->iter_dir ? MGT_OK : MGT_ERR_NOMEM;
	}
	int64_t it = step;
	mgt_status st = step > 0 ? MGT_OK : read_tracker(dir, &it);
	if (st) return st;
	char name[32];
	if (it == -2) snprintf(name, sizeof name, "release");
	else snprintf(name, sizeof name, "iter_%07lld", (long long)it);
	m->iteration = it == -2 ? 0 : it;
	if (!(m->iter_dir = cv_join(dir, name)) || !(m->save_dir = mgt_strdup(dir))) return MGT_ERR_NOMEM;
	if (!is_dir(m->iter_dir)) return mgt_err(MGT_ERR_FORMAT, "%s: no such iteration directory (%s)", m->iter_dir,
						 step > 0 ? "--ckpt-step" : MGT_CKPT_TRACKER);
	return MGT_OK;
}

bool cv_mg_detect(const char *dir)
{
	if (iter_format(dir)) return true;
	int64_t it;
	if (read_tracker(dir, &it)) {
		mgt_err(MGT_OK, "%s", "");
		return false;
	}
	char name[32];
	if (it == -2) snprintf(name, sizeof name, "release");
	else snprintf(name, sizeof name, "iter_%07lld", (long long)it);
	char *p = cv_join(dir, name);
	bool yes = p && iter_format(p);
	free(p);
	return yes;
}

/* ---- the model arguments ---- */

/* The Namespace fields mgt takes (megatron/training/checkpointing.py load_args_from_checkpoint's
 * list, the tokenizer's and the MoE router's); others are the run's, not the model's. */
static const char *const model_keys[] = {
	"num_layers", "hidden_size", "ffn_hidden_size", "seq_length", "num_attention_heads", "num_query_groups",
	"group_query_attention", "kv_channels", "max_position_embeddings", "position_embedding_type", "rotary_base",
	"rotary_percent", "rotary_interleaved", "add_bias_linear", "add_qkv_bias", "squared_relu", "swiglu",
	"untie_embeddings_and_output_weights", "apply_layernorm_1p", "normalization", "norm_epsilon", "qk_layernorm",
	"num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
	"moe_shared_expert_gate", "moe_router_score_function", "moe_router_pre_softmax", "moe_router_topk_scaling_factor",
	"moe_router_num_groups", "moe_router_group_topk", "moe_router_enable_expert_bias", "moe_layer_freq",
	"moe_latent_size",
	"make_vocab_size_divisible_by", "openai_gelu", "use_rope_scaling", "rope_scaling_factor",
	"decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "tokenizer_type", "vocab_file",
	"merge_file", "tokenizer_model", "vocab_size", "seed", "bf16", "fp16", "init_method_std",
	/* the run's: what mgt-eval and a resumed run take as the checkpoint's when not given */
	"train_iters", "train_samples", "global_batch_size", "micro_batch_size", "lr", "min_lr", "lr_decay_style",
	"lr_decay_iters", "lr_warmup_iters", "lr_warmup_fraction", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps",
	"clip_grad", "eval_iters", "eval_interval", "split", "hidden_dropout", "attention_dropout", "mock_data", NULL,
};

static json_t *py_json(const mgt_py *v)
{
	int64_t i;
	double f;
	if (!v || v->kind == MGT_PY_NONE) return json_null();
	if (v->kind == MGT_PY_BOOL) return json_boolean(v->i);
	if (mgt_py_int(v, &i)) return json_integer(i);
	if (mgt_py_float(v, &f)) return json_real(f);
	if (mgt_py_str(v)) return json_string(mgt_py_str(v));
	return NULL;
}

/* What mgt does not read, refused naming the argument. */
static mgt_status refuse_args(mg_src *m, const char *file)
{
	static const struct { const char *key, *what; } no[] = {
		{"multi_latent_attention", "multi-latent attention"}, {"mtp_num_layers", "multi-token prediction layers"},
		{"attention_output_gate", "gated attention output"}, {"heterogeneous_layers_config_path", "heterogeneous layers"},
		{"use_legacy_models", "a legacy (pre-Megatron-Core) model"}, {"hybrid_layer_pattern", "a hybrid (Mamba) model"},
		{"hybrid_override_pattern", "a hybrid (Mamba) model"}, {"num_tokentypes", "token types (BERT)"},
	};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		const mgt_py *v = mgt_py_get(m->ns, no[i].key);
		int64_t x = 0;
		bool on = v && ((mgt_py_int(v, &x) && x) || (mgt_py_str(v) && *mgt_py_str(v)));
		if (on) return mgt_err(MGT_ERR_USAGE, "%s: args.%s: %s, which mgt does not read from Megatron checkpoints",
				       file, no[i].key, no[i].what);
	}
	double ver = 0;
	if (!mgt_py_float(mg_common(m, "checkpoint_version", NULL), &ver)) ver = 3;
	if (ver < 3)
		return mgt_err(MGT_ERR_USAGE, "%s: checkpoint_version %g: a pre-Megatron-Core checkpoint (its tensor names and "
			       "query_key_value order are not read; Megatron's tools/checkpoint converts it)", file, ver);
	return MGT_OK;
}

static int64_t ns_int(const mg_src *m, const char *key, int64_t def)
{
	int64_t v;
	return mgt_py_int(mgt_py_get(m->ns, key), &v) ? v : def;
}

/* m->a from the Namespace; the layout it was saved with. */
static mgt_status read_args(mg_src *m, const char *file)
{
	if (!m->ns || (m->ns->kind != MGT_PY_OBJ && m->ns->kind != MGT_PY_DICT))
		return mgt_err(MGT_ERR_FORMAT, "%s: no \"args\" (argparse.Namespace) in the checkpoint", file);
	mgt_status st = refuse_args(m, file);
	json_t *j = json_object(), *def = NULL;
	if (!st) st = mgt_args_init(&m->a);
	if (!st) def = mgt_args_to_json(&m->a);
	for (const char *const *k = model_keys; !st && *k; k++) {
		const mgt_py *v = mgt_py_get(m->ns, *k);
		json_t *x = v && json_object_get(def, *k) ? py_json(v) : NULL;
		if (x && !(json_is_null(x) && !json_is_null(json_object_get(def, *k)))) json_object_set_new(j, *k, x);
		else json_decref(x);
	}
	if (!st) st = mgt_args_merge_json(&m->a, j, "the checkpoint's args");
	json_decref(j);
	json_decref(def);
	if (st) return mgt_err_ctx(st, "%s", file);
	m->tp = (int)ns_int(m, "tensor_model_parallel_size", ns_int(m, "model_parallel_size", 1));
	m->pp = (int)ns_int(m, "pipeline_model_parallel_size", 1);
	m->vp = (int)ns_int(m, "virtual_pipeline_model_parallel_size", 1);
	m->ep = (int)ns_int(m, "expert_model_parallel_size", 1);
	m->dp = (int)ns_int(m, "data_parallel_size", 1);
	m->distopt = ns_int(m, "use_distributed_optimizer", 0) != 0;
	/* expert data parallelism: world / (expert TP x EP x PP) (megatron/core/parallel_state.py) */
	int64_t etp = ns_int(m, "expert_tensor_parallel_size", m->tp);
	m->edp = etp > 0 && m->ep > 0 && (int64_t)m->tp * m->dp % (etp * m->ep) == 0 ? (int)((int64_t)m->tp * m->dp / (etp * m->ep)) : 1;
	if (m->tp < 1 || m->pp < 1 || m->vp < 1 || m->ep < 1 || m->dp < 1 || m->tp > 4096 || m->pp * m->vp > 65536 || m->ep > 65536)
		return mgt_err(MGT_ERR_FORMAT, "%s: args: tensor %d, pipeline %d, virtual %d, expert %d, data parallel %d: "
			       "expected positive sizes", file, m->tp, m->pp, m->vp, m->ep, m->dp);
	int64_t padded = ns_int(m, "padded_vocab_size", 0);
	if (m->a.model.vocab_size <= 0) m->a.model.vocab_size = padded;
	st = mgt_model_config_finalize(&m->a.model, 1);
	if (!st && padded > 0) m->a.model.padded_vocab_size = padded;
	if (!st && padded <= 0) st = mgt_err(MGT_ERR_FORMAT, "%s: args.padded_vocab_size missing", file);
	m->a.tensor_model_parallel_size = m->tp;
	m->a.pipeline_model_parallel_size = m->pp;
	if (m->a.model.num_experts > 0) m->a.expert_model_parallel_size = m->ep;
	return st ? mgt_err_ctx(st, "%s: the checkpoint's args", file) : MGT_OK;
}

/* ---- rank files, chunks and keys ---- */

static char *rank_dir(const mg_src *m, int tp, int pp, int ep)
{
	char name[64];
	int n = snprintf(name, sizeof name, "mp_rank_%02d", tp);
	if (m->pp > 1) n += snprintf(name + n, sizeof name - (size_t)n, "_%03d", pp);
	if (m->ep > 1) snprintf(name + n, sizeof name - (size_t)n, "_%03d", ep);
	return cv_join(m->iter_dir, name);
}

/* Rank 0's file, probing the names of megatron/training/checkpointing.py find_checkpoint_rank_0. */
static mgt_status open_rank0(mg_src *m)
{
	static const char *const names[] = {"mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000", NULL};
	char path[4096];
	for (const char *const *n = names; *n; n++) {
		snprintf(path, sizeof path, "%s/%s/model_optim_rng.pt", m->iter_dir, *n);
		struct stat sb;
		if (!stat(path, &sb)) {
			mgt_status st = mgt_torch_open(path, 0, 0, &m->root);
			if (!st) m->common = mgt_torch_root(m->root);
			if (!st) m->ns = mgt_py_get(m->common, "args");
			return st;
		}
	}
	return mgt_err(MGT_ERR_FORMAT, "%s: no rank-0 file (mp_rank_00[_000[_000]]/model_optim_rng.pt)", m->iter_dir);
}

/* Tied embeddings under pipeline parallelism: a later stage's table row of the word embedding is
 * Megatron's output_layer.weight, the last stage's copy (gpt_model.py
 * setup_embeddings_and_output_layer, language_module.py), a parameter after the final norm. */
bool mg_is_tied_copy(const mgt_tensor *x) { return x->role == MGT_T_WORD_EMB && x->pp_stage > 0; }

static mgt_status build_chunks(mg_src *m)
{
	int nst = m->pp * m->vp, n = m->tp * nst * m->ep;
	m->nfiles = m->tp * m->pp * m->ep;
	if (!(m->chunks = calloc((size_t)n, sizeof *m->chunks)) || !(m->files = calloc((size_t)m->nfiles, sizeof *m->files)))
		return mgt_err(MGT_ERR_NOMEM, "out of memory");
	mgt_status st = MGT_OK;
	for (int f = 0; !st && f < m->nfiles; f++) {
		int tp = f % m->tp, pp = f / m->tp % m->pp, ep = f / (m->tp * m->pp);
		char *d = rank_dir(m, tp, pp, ep);
		m->files[f].path = d ? cv_join(d, "model_optim_rng.pt") : NULL;
		m->files[f].dopt_path = d ? cv_join(d, "distrib_optim.pt") : NULL;
		free(d);
		if (!m->files[f].path || !m->files[f].dopt_path) st = MGT_ERR_NOMEM;
	}
	for (int i = 0; !st && i < n; i++) {
		mg_chunk *c = &m->chunks[m->nchunks++];
		c->file = i % m->nfiles;
		c->tp = c->file % m->tp;
		c->pp = c->file / m->tp % m->pp;
		c->ep = c->file / (m->tp * m->pp);
		c->vs = i / m->nfiles;
		int64_t nl;
		int stage = c->vs * m->pp + c->pp;
		st = mgt_stage_layers(&m->a.model, nst, stage, &c->first, &nl);
		if (!st) st = mgt_tensor_table_build_ep(&c->tt, &m->a.model, m->tp, c->tp, nst, stage, m->ep, c->ep);
	}
	return st;
}

/* Replace "decoder.layers.G." by the chunk's local index and an expert's global index by its
 * local one. */
static void local_name(const mg_src *m, const mg_chunk *c, const mgt_tensor *x, char *out, size_t n)
{
	const char *p = x->name;
	int len = 0;
	if (x->layer >= 0 && !strncmp(p, "decoder.layers.", 15)) {
		p = strchr(p + 15, '.');
		len = snprintf(out, n, "decoder.layers.%lld", (long long)(x->layer - c->first));
	}
	const char *e = strstr(p, ".local_experts.");
	if (x->num_experts > 0 && e) {
		int per = x->num_experts / m->ep;
		snprintf(out + len, n - (size_t)len, "%.*s.local_experts.%d%s", (int)(e - p), p, x->expert - c->ep * per,
			 strchr(e + 15, '.'));
	} else
		snprintf(out + len, n - (size_t)len, "%s", p);
}

bool mg_key(const mg_src *m, const mg_chunk *c, const mgt_tensor *x, int alt, char *out, size_t n)
{
	if (mg_is_tied_copy(x)) {
		snprintf(out, n, "output_layer.weight");
		return !alt;
	}
	char loc[200];
	local_name(m, c, x, loc, sizeof loc);
	if (!alt) {
		snprintf(out, n, "%s", loc);
		return true;
	}
	static const char *const local_spec[][2] = {
		{".self_attention.linear_qkv.layer_norm_weight", ".input_layernorm.weight"},
		{".self_attention.linear_qkv.layer_norm_bias", ".input_layernorm.bias"},
		{".mlp.linear_fc1.layer_norm_weight", ".pre_mlp_layernorm.weight"},
		{".mlp.linear_fc1.layer_norm_bias", ".pre_mlp_layernorm.bias"},
	};
	if (alt == 1)
		for (size_t i = 0; i < sizeof local_spec / sizeof local_spec[0]; i++) {
			char *s = strstr(loc, local_spec[i][0]);
			if (s && !s[strlen(local_spec[i][0])]) {
				snprintf(out, n, "%.*s%s", (int)(s - loc), loc, local_spec[i][1]);
				return true;
			}
		}
	/* TEGroupedMLP: mlp.experts.linear_fc1.weight<j> (moe/experts.py) */
	const char *e = strstr(loc, ".mlp.experts.local_experts.");
	if (alt == 2 && e) {
		char *rest;
		long j = strtol(e + 27, &rest, 10);
		snprintf(out, n, "%.*s.mlp.experts%s%ld", (int)(e - loc), loc, rest, j);
		return true;
	}
	return false;
}

/* Megatron-Core's parameter order inside a layer (nn.Module.parameters(): a module's own
 * parameters, then its children in registration order): transformer_layer.py TransformerLayer
 * (input_layernorm, self_attention, pre_mlp_layernorm, mlp), attention.py (core_attention,
 * linear_proj, then SelfAttention's linear_qkv, q_layernorm, k_layernorm), Transformer Engine's
 * LayerNormLinear (layer_norm_weight, layer_norm_bias, weight, bias), mlp.py (linear_fc1,
 * linear_fc2), moe_layer.py (router, fc1_latent_proj and fc2_latent_proj with --moe-latent-size,
 * experts, shared_experts; SharedExpertMLP's gate_weight before its linear layers).  The local spec has the norms as input_layernorm / pre_mlp_layernorm. */
static int role_rank(mgt_tensor_role r, bool local_spec)
{
	static const mgt_tensor_role te[] = {
		MGT_T_WORD_EMB, MGT_T_POS_EMB, MGT_T_PROJ_W, MGT_T_PROJ_B, MGT_T_LN1_W, MGT_T_LN1_B, MGT_T_QKV_W, MGT_T_QKV_B,
		MGT_T_QNORM_W, MGT_T_QNORM_B, MGT_T_KNORM_W, MGT_T_KNORM_B, MGT_T_LN2_W, MGT_T_LN2_B, MGT_T_FC1_W, MGT_T_FC1_B,
		MGT_T_FC2_W, MGT_T_FC2_B, MGT_T_ROUTER_W, MGT_T_ROUTER_B, MGT_T_LAT_FC1_W, MGT_T_LAT_FC2_W, MGT_T_EXP_FC1_W,
		MGT_T_EXP_FC2_W, MGT_T_SH_GATE_W,
		MGT_T_SH_FC1_W, MGT_T_SH_FC2_W, MGT_T_FINAL_LN_W, MGT_T_FINAL_LN_B, MGT_T_OUTPUT_W,
	};
	static const mgt_tensor_role loc[] = {
		MGT_T_WORD_EMB, MGT_T_POS_EMB, MGT_T_LN1_W, MGT_T_LN1_B, MGT_T_PROJ_W, MGT_T_PROJ_B, MGT_T_QKV_W, MGT_T_QKV_B,
		MGT_T_QNORM_W, MGT_T_QNORM_B, MGT_T_KNORM_W, MGT_T_KNORM_B, MGT_T_LN2_W, MGT_T_LN2_B, MGT_T_FC1_W, MGT_T_FC1_B,
		MGT_T_FC2_W, MGT_T_FC2_B, MGT_T_ROUTER_W, MGT_T_ROUTER_B, MGT_T_LAT_FC1_W, MGT_T_LAT_FC2_W, MGT_T_EXP_FC1_W,
		MGT_T_EXP_FC2_W, MGT_T_SH_GATE_W,
		MGT_T_SH_FC1_W, MGT_T_SH_FC2_W, MGT_T_FINAL_LN_W, MGT_T_FINAL_LN_B, MGT_T_OUTPUT_W,
	};
	const mgt_tensor_role *o = local_spec ? loc : te;
	for (int i = 0; i < (int)(sizeof te / sizeof te[0]); i++)
		if (o[i] == r) return i;
	return 99;
}

static const mg_src *sort_m;
static const mg_chunk *sort_c;

/* Sort key: layer (the embedding first, the final norm and output layer last), then role, then
 * expert (an expert's fc1 before its fc2: SequentialMLP's local_experts in order). */
static int64_t order_key(const mgt_tensor *x, bool local_spec)
{
	bool copy = mg_is_tied_copy(x);
	int64_t layer = x->layer >= 0 ? x->layer + 1 : ((x->role == MGT_T_WORD_EMB && !copy) || x->role == MGT_T_POS_EMB ? 0 : 1 << 20);
	int r = role_rank(copy ? MGT_T_OUTPUT_W : x->role, local_spec);
	if (x->role == MGT_T_EXP_FC2_W) r = role_rank(MGT_T_EXP_FC1_W, local_spec);
	int64_t e = x->num_experts > 0 ? x->expert * 2 + (x->role == MGT_T_EXP_FC2_W) : 0;
	return (layer << 32) | ((int64_t)r << 20) | e;
}

static bool local_spec_of(const mg_src *m)
{
	const mgt_py *tf = mgt_py_get(m->ns, "transformer_impl");
	return tf && mgt_py_str(tf) && !strcmp(mgt_py_str(tf), "local");
}

static int cmp_rows(const void *pa, const void *pb)
{
	const mgt_tensor *a = &sort_c->tt.t[*(const int *)pa], *b = &sort_c->tt.t[*(const int *)pb];
	bool ls = local_spec_of(sort_m);
	int64_t ka = order_key(a, ls), kb = order_key(b, ls);
	return ka < kb ? -1 : ka > kb;
}

int mg_param_order(const mg_src *m, const mg_chunk *c, int *order)
{
	int n = 0;
	for (int i = 0; i < c->tt.n; i++)
		if (!c->tt.t[i].frozen) order[n++] = i;
	sort_m = m;
	sort_c = c;
	qsort(order, (size_t)n, sizeof *order, cmp_rows);
	return n;
}

/* ---- reading a rank's piece ---- */

mgt_status mg_file_open(mg_src *m, int f, bool dopt, mgt_torch **out)
{
	mg_file *x = &m->files[f];
	mgt_torch **t = dopt ? &x->dopt : &x->t;
	if (!*t) {
		const char *p = dopt ? x->dopt_path : x->path;
		struct stat sb;
		if (stat(p, &sb)) return mgt_err(MGT_ERR_FORMAT, "%s: missing (a rank file of the saved layout: TP %d, PP %d, "
						 "EP %d)", p, m->tp, m->pp, m->ep);
		mgt_status st = mgt_torch_open(p, 0, 0, t);
		if (st) return st;
	}
	*out = *t;
	return MGT_OK;
}

static const mgt_py *model_dict(const mg_src *m, mgt_torch *t, int vs)
{
	char key[32];
	if (m->vp > 1) snprintf(key, sizeof key, "model%d", vs);
	else snprintf(key, sizeof key, "model");
	return mgt_py_get(mgt_torch_root(t), key);
}

/* The tensor of row x in chunk c's model state dict, or NULL. */
static const mgt_py *model_tensor(const mg_src *m, const mg_chunk *c, const mgt_py *sd, const mgt_tensor *x, char *key,
				  size_t n)
{
	for (int alt = 0; alt < 3; alt++) {
		if (!mg_key(m, c, x, alt, key, n)) continue;
		const mgt_py *v = mgt_py_get(sd, key);
		if (v && v->kind == MGT_PY_TENSOR) return v;
	}
	mg_key(m, c, x, 0, key, n);
	return NULL;
}

/* Check tensor v against row x's local shape (a Mamba-free GPT: the conv weight's [C, 1, K] is
 * not met here) and read it as float32. */
mgt_status mg_check_float(const mgt_torch *t, const mgt_py *v, const char *what)
{
	if (!v->dtype_ok || (v->dtype != MGT_ST_F32 && v->dtype != MGT_ST_BF16 && v->dtype != MGT_ST_F16 && v->dtype != MGT_ST_F64))
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: dtype %s where a floating-point tensor was expected", mgt_torch_name(t),
			       what, v->dtype_name ? v->dtype_name : "?");
	return MGT_OK;
}

static mgt_status read_local(mgt_torch *t, const mgt_py *v, const mgt_tensor *x, const char *key, float *dst)
{
	mgt_status st = mg_check_float(t, v, key);
	if (st) return st;
	if (mgt_py_numel(v) != (int64_t)x->numel || v->ndim != x->ndim ||
	    v->size[0] != x->local_shape[0] || (x->ndim > 1 && v->size[1] != x->local_shape[1]))
		return mgt_err(MGT_ERR_FORMAT, "%s: %s: shape [%lld%s%lld] but the checkpoint's args give [%lld, %lld]",
			       mgt_torch_name(t), key, (long long)(v->ndim ? v->size[0] : 1), v->ndim > 1 ? ", " : "",
			       (long long)(v->ndim > 1 ? v->size[1] : 0), (long long)x->local_shape[0],
			       (long long)(x->ndim > 1 ? x->local_shape[1] : 1));
	return mgt_torch_read_f32(t, v, dst);
}

/* The word embedding lives on the first stage; with tied embeddings a later stage's copy is the
 * output layer's. */
static bool optional_row(const mg_chunk *c, const mgt_tensor *x)
{
	(void)c;
	return mg_is_tied_copy(x);
}

static mgt_status torch_local(mg_src *m, const mg_chunk *c, const mgt_tensor *x, int k, float *dst, bool *absent)
{
	*absent = false;
	if (k || m->optim >= 2) return mg_optim_local(m, c, x, k, dst, absent);
	mgt_torch *t;
	mgt_status st = mg_file_open(m, c->file, false, &t);
	if (st) return st;
	const mgt_py *sd = model_dict(m, t, c->vs);
	if (!sd) return mgt_err(MGT_ERR_FORMAT, "%s: no model state dict (\"model\"%s)", mgt_torch_name(t), m->vp > 1 ? "0.." : "");
	char key[200];
	const mgt_py *v = model_tensor(m, c, sd, x, key, sizeof key);
	if (!v && optional_row(c, x)) {
		*absent = true;
		return MGT_OK;
	}
	if (!v) return mgt_err(MGT_ERR_FORMAT, "%s: missing tensor %s (of %s)", mgt_torch_name(t), key, x->name);
	return read_local(t, v, x, key, dst);
}

/* Every tensor of every rank file's model state dicts is a row of its chunk's table (Transformer
 * Engine's _extra_state aside): a key the model its args describe lacks is refused, naming it. */
static mgt_status check_keys(mg_src *m)
{
	mgt_status st = MGT_OK;
	for (int ci = 0; !st && ci < m->nchunks; ci++) {
		mg_chunk *c = &m->chunks[ci];
		mgt_torch *t;
		if ((st = mg_file_open(m, c->file, false, &t))) break;
		const mgt_py *sd = model_dict(m, t, c->vs);
		if (!sd || sd->kind != MGT_PY_DICT) {
			st = mgt_err(MGT_ERR_FORMAT, "%s: no model state dict (\"model\"%s)", mgt_torch_name(t), m->vp > 1 ? "0.." : "");
			break;
		}
		for (size_t i = 0; !st && i < sd->n; i++) {
			const char *k = mgt_py_str(sd->v[2 * i]);
			size_t kl = k ? strlen(k) : 0;
			if (k && kl > 12 && !strcmp(k + kl - 12, "_extra_state")) continue;
			bool known = false;
			char key[200];
			for (int r = 0; k && !known && r < c->tt.n; r++)
				for (int alt = 0; !known && alt < 3; alt++)
					known = mg_key(m, c, &c->tt.t[r], alt, key, sizeof key) && !strcmp(key, k);
			if (!known)
				st = mgt_err(MGT_ERR_FORMAT, "%s: model%s: tensor %s is not part of the model its args describe",
					     mgt_torch_name(t), m->vp > 1 ? "<vp>" : "", k ? k : "(a key that is not a string)");
			else if (sd->v[2 * i + 1]->kind != MGT_PY_TENSOR)
				st = mgt_err(MGT_ERR_FORMAT, "%s: model: %s is not a tensor", mgt_torch_name(t), k);
			else
				st = mg_check_float(t, sd->v[2 * i + 1], k);
		}
	}
	return st;
}

/* ---- the whole tensors ---- */

static mgt_status room(float **p, size_t *have, size_t n)
{
	if (*have >= n) return MGT_OK;
	float *q = realloc(*p, (n ? n : 1) * sizeof(float));
	if (!q) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	*p = q;
	*have = n;
	return MGT_OK;
}

/* Place local elements src of row x into whole (its global tensor, or the expert dataset
 * [E, rows, cols]). */
static void scatter(const mgt_tensor *x, const float *src, float *whole)
{
	int64_t off[MGT_TENSOR_MAX_BOXES][2], shape[MGT_TENSOR_MAX_BOXES][2];
	size_t first[MGT_TENSOR_MAX_BOXES];
	int nb = mgt_tensor_boxes(x, 0, x->numel, off, shape, first);
	int64_t cols = x->ndim > 1 ? x->shape[1] : 1;
	float *base = whole + (x->num_experts > 0 ? (size_t)x->expert * (size_t)x->shape[0] * (size_t)cols : 0);
	for (int b = 0; b < nb; b++) {
		int64_t w = x->ndim > 1 ? shape[b][1] : shape[b][0], rows = x->ndim > 1 ? shape[b][0] : 1;
		int64_t r0 = x->ndim > 1 ? off[b][0] : 0, c0 = x->ndim > 1 ? off[b][1] : off[b][0];
		for (int64_t r = 0; r < rows; r++)
			memcpy(base + (r0 + r) * cols + c0, src + first[b] + (size_t)(r * w), (size_t)w * sizeof(float));
	}
}

static bool row_is(const mgt_tensor *x, const char *base)
{
	return !strcmp(x->num_experts > 0 ? x->dataset : x->name, base);
}

/* m->whole := tensor name (kind prefix + a full-table name or dataset), from every chunk. */
static mgt_status make_whole(mg_src *m, const char *name, const mgt_tensor *g, int k, size_t numel)
{
	if (!strcmp(m->cached, name)) return MGT_OK;
	m->cached[0] = 0;
	const char *base = g->num_experts > 0 ? g->dataset : g->name;
	mgt_status st = room(&m->whole, &m->whole_n, numel);
	if (!st && m->format == 2 && m->optim != 5) {
		st = mg_dist_whole(m, g, k, m->whole);
		if (!st) snprintf(m->cached, sizeof m->cached, "%s", name);
		return st;
	}
	size_t covered = 0;
	for (int c = 0; !st && c < m->nchunks; c++) {
		mg_chunk *ch = &m->chunks[c];
		for (int i = 0; !st && i < ch->tt.n; i++) {
			const mgt_tensor *x = &ch->tt.t[i];
			/* TP-replicated rows are on every TP rank, dense rows on every EP rank: read one */
			if (!row_is(x, base) || optional_row(ch, x) || (x->shard == MGT_SHARD_NONE && ch->tp) ||
			    (x->num_experts <= 0 && ch->ep))
				continue;
			bool absent = false;
			st = room(&m->piece, &m->piece_n, x->numel);
			if (!st && m->format == 2) st = mg_dist_opt_local(m, ch, x, k, m->piece);
			else if (!st) st = torch_local(m, ch, x, k, m->piece, &absent);
			if (st || absent) continue;
			scatter(x, m->piece, m->whole);
			covered += x->numel;
		}
	}
	if (!st && covered != numel)
		st = mgt_err(MGT_ERR_FORMAT, "%s: %s: the rank files hold %zu of its %zu elements", m->iter_dir, name, covered, numel);
	if (!st) snprintf(m->cached, sizeof m->cached, "%s", name);
	return st;
}

/* The full-table row (an expert dataset's first) and kind of listed name, or NULL. */
static const mgt_tensor *find_listed(const mg_src *m, const char *name, int *k)
{
	for (*k = m->nkinds - 1; *k >= 0; (*k)--) {
		size_t pl = strlen(kind_prefix[*k]);
		if (strncmp(name, kind_prefix[*k], pl)) continue;
		for (size_t i = 0; i < m->nlist; i++)
			if (row_is(&m->full.t[m->list[i]], name + pl)) return &m->full.t[m->list[i]];
		return NULL;
	}
	return NULL;
}

/* ---- the source interface ---- */

static mgt_status no_tensor(const mg_src *m, const char *name)
{
	if (!strncmp(name, "optimizer.", 10) && !m->optim)
		return mgt_err(MGT_ERR_FORMAT, "%s: no optimizer state that mgt reads (%s): --no-load-optim (or --finetune) "
			       "loads the weights alone", m->iter_dir, m->no_optim ? m->no_optim : "saved without it");
	return mgt_err(MGT_ERR_FORMAT, "%s: no tensor %s in the model its args describe", m->iter_dir, name);
}

size_t cv_mg_count(const mg_src *m) { return m->nlist * (size_t)m->nkinds; }
const char *cv_mg_metadata(const mg_src *m) { return m->meta; }
const char *cv_mg_dir(const mg_src *m) { return m->iter_dir; }
int64_t cv_mg_iteration(const mg_src *m) { return m->iteration; }

const char *cv_mg_tensor(const mg_src *m, size_t i, int *ndim, int64_t *gs, mgt_ckpt_dtype *dt)
{
	if (i >= cv_mg_count(m)) return NULL;
	const mgt_tensor *g = &m->full.t[m->list[i % m->nlist]];
	int k = (int)(i / m->nlist);
	*ndim = mgt_ckpt_row_dataset(g, kind_prefix[k], m->names[i], sizeof m->names[i], gs);
	*dt = MGT_CKPT_F32;
	return m->names[i];
}

mgt_status cv_mg_whole(mg_src *m, const char *name, const float **out)
{
	int k;
	*out = NULL;
	const mgt_tensor *g = find_listed(m, name, &k);
	if (!g) return no_tensor(m, name);
	size_t numel = cv_row_numel(g) * (size_t)(g->num_experts > 0 ? g->num_experts : 1);
	mgt_status st = make_whole(m, name, g, k, numel);
	if (!st) *out = m->whole;
	return st;
}

mgt_status cv_mg_read(mg_src *m, const char *name, int ndim, const int64_t *gs, const int64_t *off, const int64_t *shape,
		      mgt_ckpt_dtype dt, void *dst)
{
	int k;
	const mgt_tensor *g = find_listed(m, name, &k);
	if (!g) return no_tensor(m, name);
	int64_t have[3];
	char base[200];
	int nd = mgt_ckpt_row_dataset(g, "", base, sizeof base, have);
	bool same = nd == ndim && dt == MGT_CKPT_F32;
	size_t numel = 1;
	for (int d = 0; same && d < nd; d++) {
		same = have[d] == gs[d] && off[d] >= 0 && shape[d] >= 1 && off[d] + shape[d] <= gs[d];
		numel *= (size_t)have[d];
	}
	if (!same) return mgt_err(MGT_ERR_FORMAT, "%s: tensor %s: asked for another shape, box or dtype than the "
				  "model's (%dD float32)", m->iter_dir, name, nd);
	mgt_status st = make_whole(m, name, g, k, numel);
	if (st) return st;
	cv_copy_box(m->whole, nd, gs, off, shape, dst);
	return MGT_OK;
}

/* ---- opening ---- */

/* The metadata.json text an mgt checkpoint of this one records (mgt-ckpt(5)): the arguments,
 * progress and scheduler state Megatron saved (args.consumed_train_samples, iteration,
 * opt_param_scheduler), the dropout seed from args.seed (PyTorch's RNG states do not carry over). */
static mgt_status make_meta(mg_src *m)
{
	const char *sch = mg_common(m, "opt_param_scheduler", NULL) || mg_common(m, "opt_param_scheduler", "max_lr") ?
		"opt_param_scheduler" : "lr_scheduler";
	int64_t it = m->iteration;
	if (m->iteration < 0 && !mgt_py_int(mg_common(m, "iteration", NULL), &it)) it = 0;
	m->iteration = it;
	double flops = 0, max_lr = 0, min_lr = 0;
	mgt_py_float(mg_common(m, "num_floating_point_operations_so_far", NULL), &flops);
	mgt_py_float(mg_common(m, sch, "max_lr"), &max_lr);
	mgt_py_float(mg_common(m, sch, "min_lr"), &min_lr);
	int64_t steps = 0, warm = 0, decay = 0, step = it;
	mgt_py_int(mg_common(m, sch, "num_steps"), &steps);
	mgt_py_int(mg_common(m, sch, "lr_warmup_steps"), &warm);
	mgt_py_int(mg_common(m, sch, "lr_decay_steps"), &decay);
	const char *style = mgt_py_str(mg_common(m, sch, "lr_decay_style"));
	const char *fmt = m->format == 1 ? "torch" : m->dtensor ? "fsdp_dtensor" : "torch_dist";
	mgt_tensor_table *ft = &m->full;
	json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:{s:s?, s:s?, s:s?, s:s?, s:I, s:I}, "
			      "s:{s:i, s:i, s:i, s:b, s:i, s:i, s:i}, s:o, s:{s:f, s:f, s:I, s:I, s:I, s:s}, s:{s:I}, s:{s:I}, "
			      "s:{s:s, s:s}}",
			      "format", "megatron", "format_version", 1, "iteration", (json_int_t)it,
			      "consumed_train_samples", (json_int_t)ns_int(m, "consumed_train_samples", 0),
			      "consumed_valid_samples", (json_int_t)ns_int(m, "consumed_valid_samples", 0),
			      "skipped_iterations", (json_int_t)0, "nan_iterations", (json_int_t)0,
			      "num_floating_point_operations_so_far", flops, "args", mgt_args_to_json(&m->a),
			      "tokenizer", "tokenizer_type", m->a.tokenizer_type, "vocab_file", m->a.vocab_file, "merge_file",
			      m->a.merge_file, "tokenizer_model", m->a.tokenizer_model,
			      "padded_vocab_size", (json_int_t)m->a.model.padded_vocab_size,
			      "vocab_size", (json_int_t)m->a.model.vocab_size,
			      "layout", "tensor_model_parallel_size", m->tp, "pipeline_model_parallel_size", m->pp,
			      "data_parallel_size", m->dp, "use_distributed_optimizer", m->distopt,
			      "virtual_pipeline_model_parallel_size", m->vp, "expert_model_parallel_size", m->ep,
			      "world_size", m->tp * m->pp * m->dp,
			      "tensors", (json_t *)mgt_ckpt_tensors_json(ft),
			      "opt_param_scheduler", "max_lr", max_lr, "min_lr", min_lr, "lr_warmup_steps", (json_int_t)warm,
			      "lr_decay_steps", (json_int_t)decay, "num_steps", (json_int_t)steps, "lr_decay_style",
			      style ? style : "linear",
			      "optimizer", "step", (json_int_t)step, "rng", "seed", (json_int_t)ns_int(m, "seed", 1234),
			      "megatron", "ckpt_format", fmt, "dir", m->iter_dir);
	if (o && m->optim == 0) json_object_del(o, "optimizer");
	m->meta = o ? json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_decref(o);
	return m->meta ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "out of memory");
}

static mgt_status make_list(mg_src *m)
{
	mgt_status st = mgt_tensor_table_build(&m->full, &m->a.model, 1, 0, 1, 0);
	if (!st && !(m->list = malloc(((size_t)m->full.n + 1) * sizeof *m->list))) st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	for (int i = 0; !st && i < m->full.n; i++)
		if (m->full.t[i].num_experts <= 0 || !mgt_ckpt_row_seen(&m->full, i)) m->list[m->nlist++] = i;
	m->nkinds = m->optim ? 3 : 1;
	if (!st && !(m->names = calloc(m->nlist * (size_t)m->nkinds + 1, sizeof *m->names)))
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	return st;
}

mgt_status cv_mg_open(const char *dir, int64_t step, mg_src **out)
{
	*out = NULL;
	mg_src *m = calloc(1, sizeof *m);
	if (!m) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	mgt_status st = find_iter(m, dir, step);
	if (!st) m->format = iter_format(m->iter_dir);
	if (!st && !m->format) st = mgt_err(MGT_ERR_FORMAT, "%s: neither mp_rank_* files nor .metadata", m->iter_dir);
	if (!st) st = m->format == 2 ? mg_dist_open(m) : open_rank0(m);
	if (!st) st = read_args(m, mgt_torch_name(m->root));
	if (!st && m->format == 1) st = mg_optim_detect(m);
	if (!st && (m->format == 1 || m->optim == 5)) st = build_chunks(m);
	if (!st && m->format == 1) st = check_keys(m);
	if (!st) st = make_list(m);
	if (!st && m->format == 2) st = mg_dist_check_keys(m);
	if (!st) st = make_meta(m);
	if (st) {
		cv_mg_close(m);
		return st;
	}
	*out = m;
	return MGT_OK;
}

void cv_mg_close(mg_src *m)
{
	if (!m) return;
	for (int c = 0; c < m->nchunks; c++) {
		mgt_tensor_table_free(&m->chunks[c].tt);
		free(m->chunks[c].where);
		free(m->chunks[c].grp);
		free(m->chunks[c].gidx);
	}
	for (int f = 0; m->files && f < m->nfiles; f++) {
		mgt_torch_close(m->files[f].t);
		mgt_torch_close(m->files[f].dopt);
		free(m->files[f].path);
		free(m->files[f].dopt_path);
	}
	if (m->format == 2) mg_dist_close(m);
	free(m->chunks);
	free(m->files);
	mgt_torch_close(m->root);
	mgt_tensor_table_free(&m->full);
	mgt_args_free(&m->a);
	free(m->list);
	free(m->names);
	free(m->meta);
	free(m->whole);
	free(m->piece);
	free(m->save_dir);
	free(m->iter_dir);
	free(m);
}
