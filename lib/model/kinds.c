/* lib/model/kinds.c: the layer kinds, one table by their symbol in the layer pattern (Megatron's
 * megatron/core/ssm/mamba_hybrid_layer_allocation.py symbols: '*' self-attention, '-' MLP, 'E'
 * MoE, 'M' Mamba-2): each kind's rows in the tensor table, its forward from the kind's input to out, its
 * backward from dres, and (rerun) what selective recomputation reruns before the backward.
 * Symbols 2 li and 2 li + 1 are local layer li's and share its layer_act: the attention reads
 * x_in and writes x_mid, the MLP or MoE reads x_mid and writes the next layer's x_in (the last,
 * the slot's res_out); in a hybrid model a layer is one symbol, and the Mamba-2 kind ('M',
 * megatron/core/ssm/mamba_layer.py) is layer_mamba.c's.  Called by table.c and t5.c (rows)
 * and stack.c (forward, backward); it calls the kinds' files (layer_attn.c, layer_mlp.c,
 * layer_moe.c, layer_mamba.c) alone. */
#include "model_impl.h"

static const mgt_layer_kind_ops kinds[128] = {
	[MGT_LAYER_ATTENTION] = { mgt_layer_attn_rows, mgt_layer_attn_numel, mgt_layer_attn_fwd, mgt_layer_attn_bwd,
				  mgt_layer_attn_core_fwd },
	[MGT_LAYER_MLP] = { mgt_layer_mlp_rows, mgt_layer_mlp_numel, mgt_layer_mlp_fwd, mgt_layer_mlp_bwd, NULL },
	[MGT_LAYER_MOE] = { mgt_layer_moe_rows, mgt_layer_moe_numel, mgt_layer_moe_fwd, mgt_layer_moe_bwd, NULL },
	[MGT_LAYER_MAMBA] = { mgt_layer_mamba_rows, mgt_layer_mamba_numel, mgt_layer_mamba_fwd, mgt_layer_mamba_bwd, NULL },
};

const mgt_layer_kind_ops *mgt_layer_kind_of(char symbol) { return &kinds[symbol & 127]; }

void mgt_rows_layer(mgt_rows *bd, int l)
{
	for (const char *k = mgt_layer_symbols(bd->c, l); *k; k++) kinds[*k & 127].rows(bd, l);
}
