/* lib/model/rows.c: the bottom of lib/model's table code, called by table.c's assembly and by the
 * layer kinds' and recipes' rows functions alike (model_impl.h, "table rows"): the row builder
 * (mgt_rows_add, mgt_rows_norm), a row's overlap with a range of the
 * buffer (mgt_tensor_overlap) and the rule that gives a layer its kinds (mgt_moe_is_layer,
 * mgt_layer_symbols: Megatron's hybrid symbols, megatron/core/ssm/mamba_hybrid_layer_allocation.py).
 * It calls no other lib/model file. */
#include "model_impl.h"

#include <string.h>

void mgt_rows_add(mgt_rows *bd, int layer, mgt_tensor_role role, const char *suffix, int64_t rows, int64_t cols,
		  mgt_shard_rule shard, mgt_init_kind init, double std)
{
	mgt_tensor_table *tt = bd->tt;
	if (bd->st) return;
	if (tt->n == bd->cap) {
		bd->cap = bd->cap ? 2 * bd->cap : 64;
		mgt_tensor *p = mgt_realloc(tt->t, (size_t)bd->cap * sizeof *p);
		if (!p) { bd->st = MGT_ERR_NOMEM; return; }
		tt->t = p;
	}
	mgt_tensor *t = &tt->t[tt->n];
	memset(t, 0, sizeof *t);
	const int L = (int)bd->c->num_layers;
	/* an encoder-decoder's layers: the encoder's [0, L), the decoder's [L, 2L) */
	mgt_stack_recipe recipe = bd->fam->recipe;
	bool enc = recipe == MGT_STACK_ENCODER || (recipe == MGT_STACK_ENCODER_DECODER && layer < L);
	if (layer >= 0)
		snprintf(t->name, sizeof t->name, "%s.layers.%d.%s", enc ? "encoder" : "decoder",
			 recipe == MGT_STACK_ENCODER_DECODER && !enc ? layer - L : layer, suffix);
	else snprintf(t->name, sizeof t->name, "%s", suffix);
	t->role = role;
	t->layer = layer;
	t->expert = -1;
	t->ndim = cols ? 2 : 1;
	t->shape[0] = rows;
	t->shape[1] = cols;
	t->shard = shard;
	t->init = init;
	t->init_std = std;
	t->weight_decay = t->ndim == 2; /* Megatron: no decay for biases and 1-D params */
	int64_t lr = rows, lc = cols;
	if (shard == MGT_SHARD_ROW || shard == MGT_SHARD_VOCAB || shard == MGT_SHARD_ROW_GLU || shard == MGT_SHARD_ROW_BLOCKS) {
		lr = rows / bd->tp;
		t->local_offset[0] = lr * bd->tp_rank; /* ROW_GLU, ROW_BLOCKS: local rows x rank (table.c segments) */
	} else if (shard == MGT_SHARD_COL) {
		lc = cols / bd->tp;
		t->local_offset[1] = lc * bd->tp_rank;
	}
	t->local_shape[0] = lr;
	t->local_shape[1] = lc;
	t->numel = (size_t)lr * (size_t)(cols ? lc : 1);
	tt->numel += t->numel;
	tt->global_numel += rows * (cols ? cols : 1);
	tt->n++;
}

void mgt_rows_add_blocks(mgt_rows *bd, int layer, mgt_tensor_role role, const char *suffix, const int64_t *blocks,
			 int nblocks, int64_t cols, mgt_init_kind init, double std)
{
	int64_t rows = 0;
	for (int k = 0; k < nblocks; k++) rows += blocks[k];
	int n0 = bd->tt->n;
	mgt_rows_add(bd, layer, role, suffix, rows, cols, MGT_SHARD_ROW_BLOCKS, init, std);
	if (bd->st || bd->tt->n == n0) return;
	mgt_tensor *t = &bd->tt->t[bd->tt->n - 1];
	memcpy(t->blocks, blocks, (size_t)nblocks * sizeof *blocks);
	t->nblocks = nblocks;
}

void mgt_rows_norm(mgt_rows *bd, int layer, mgt_tensor_role w, const char *name_w, const char *name_b)
{
	const mgt_model_config *c = bd->c;
	mgt_rows_add(bd, layer, w, name_w, c->hidden_size, 0, MGT_SHARD_NONE,
		     c->apply_layernorm_1p ? MGT_INIT_ZERO : MGT_INIT_ONE, 0);
	if (!strcmp(c->normalization, "LayerNorm"))
		mgt_rows_add(bd, layer, w + 1, name_b, c->hidden_size, 0, MGT_SHARD_NONE, MGT_INIT_ZERO, 0);
}

bool mgt_moe_is_layer(const mgt_model_config *c, int64_t l)
{
	if (c->num_experts <= 0 || l < 0) return false;
	if (c->hybrid_layer_pattern[0]) return mgt_hybrid_symbol(c, l) == MGT_LAYER_MOE;
	if (c->moe_layer_pattern[0]) return l < (int64_t)strlen(c->moe_layer_pattern) && c->moe_layer_pattern[l] == '1';
	return c->moe_layer_freq <= 1 || l % c->moe_layer_freq == 0;
}

const char *mgt_layer_symbols(const mgt_model_config *c, int64_t l)
{
	static const char dense[] = { MGT_LAYER_ATTENTION, MGT_LAYER_MLP, 0 }, moe[] = { MGT_LAYER_ATTENTION, MGT_LAYER_MOE, 0 };
	static const char one[][2] = { "M", "*", "-", "E" }; /* a hybrid model's layer: its one symbol */
	if (c->hybrid_layer_pattern[0]) {
		const char *k = strchr("M*-E", mgt_hybrid_symbol(c, l));
		return k && *k ? one[k - "M*-E"] : "";
	}
	return mgt_moe_is_layer(c, l) ? moe : dense;
}

bool mgt_tensor_overlap(const mgt_tensor *t, size_t lo, size_t hi, size_t *a, size_t *b)
{
	*a = t->offset > lo ? t->offset : lo;
	*b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
	if (*a < *b) return true;
	*b = *a;
	return false;
}
