/* lib/model: the model configuration, the tensor table and the GPT forward/backward.
 *
 * A model is data (doc/design.md section 3): mgt_model_config plus the tensor table generated from
 * it.  Each row names a parameter with its Megatron-Core name, global shape, tensor-parallel shard
 * rule, pipeline stage, initializer and weight-decay flag; allocation, initialization, weight decay
 * and checkpoint I/O all iterate over the table.  Linear weights are [out, in] as in Megatron.
 *
 * The forward/backward follows Megatron-Core's (megatron/core/transformer/
 * transformer_layer.py, attention.py, mlp.py; models/gpt/gpt_model.py): pre-LN blocks, fused
 * query-group-interleaved QKV, bias-dropout-add, tied or untied output layer, vocab-parallel
 * cross-entropy over the padded vocabulary.  All math runs through backend ops (lib/backend) and
 * every tensor-parallel point calls the communicator (lib/parallel), which is the identity for one
 * process.
 */
#ifndef MGT_MODEL_H
#define MGT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "fp8/fp8.h"
#include "parallel/parallel.h"
#include "util/util.h"

/* Model shape, under Megatron's argument names (megatron/training/arguments.py
 * _add_network_size_args; megatron/core/transformer/transformer_config.py). */
typedef struct mgt_model_config {
	int64_t num_layers, hidden_size, ffn_hidden_size, num_attention_heads, kv_channels;
	bool group_query_attention;
	int64_t num_query_groups;
	int64_t seq_length, max_position_embeddings;
	char position_embedding_type[24]; /* learned_absolute | rope | none */
	double rotary_base, rotary_percent;
	char normalization[16];           /* LayerNorm | RMSNorm */
	/* --apply-layernorm-1p (Megatron-Core's layernorm_zero_centered_gamma): every norm weight w
	 * (input_layernorm, pre_mlp_layernorm, final_layernorm, q/k_layernorm) is stored zero-centred,
	 * initialized to 0 and applied as 1 + w (computed in fp32) */
	bool apply_layernorm_1p;
	double norm_epsilon;
	bool swiglu, add_bias_linear, add_qkv_bias, untie_embeddings_and_output_weights;
	int64_t make_vocab_size_divisible_by;
	double hidden_dropout, attention_dropout, init_method_std;
	/* --qk-layernorm: query and key heads normalized over kv_channels (the model's
	 * normalization and norm_epsilon) after linear_qkv, before RoPE (Megatron-Core attention.py
	 * q_layernorm / k_layernorm; Qwen3's q_norm / k_norm).  apply_wd_to_qk_layernorm: their
	 * weights (and biases) get weight decay (Megatron's --apply-wd-to-qk-layernorm). */
	bool qk_layernorm, apply_wd_to_qk_layernorm;
	/* --use-rope-scaling: Llama 3.1 frequency scaling of RoPE (Megatron RotaryEmbedding
	 * ._apply_scaling) with factor, low/high frequency factors and the original context length */
	bool use_rope_scaling;
	double rope_scaling_factor, rope_scaling_low_freq_factor, rope_scaling_high_freq_factor;
	int64_t rope_scaling_original_max_position_embeddings;
	/* --openai-gelu: the tanh approximation of GELU (HF gelu_new) instead of erf's;
	 * --squared-relu: the MLP's activation relu(z)^2 (megatron/core/activations.py squared_relu;
	 * Nemotron-H's relu2), not with --swiglu */
	bool openai_gelu, squared_relu;
	/* uneven pipeline stages: layers of the first / last stage (0: even split) */
	int64_t decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers;
	/* Mixture of Experts (Megatron-Core megatron/core/transformer/moe/, its README.md;
	 * lib/model/moe.c).  num_experts 0: every layer dense.  Layer l is an MoE layer
	 * when moe_layer_pattern[l] == '1' (a list --moe-layer-freq, expanded; "" otherwise) or,
	 * without a pattern, when l % moe_layer_freq == 0.  Experts are SwiGLU or GELU MLPs of
	 * moe_ffn_hidden_size (default ffn_hidden_size) like the dense MLP. */
	int64_t num_experts, moe_ffn_hidden_size, moe_router_topk, moe_layer_freq;
	char moe_layer_pattern[1025];
	char moe_router_score_function[16];      /* softmax | sigmoid */
	bool moe_router_pre_softmax;
	double moe_router_topk_scaling_factor;   /* 0: None */
	int64_t moe_router_num_groups, moe_router_group_topk; /* 0: None */
	bool moe_router_enable_expert_bias;
	double moe_router_bias_update_rate;
	char moe_router_load_balancing_type[16]; /* aux_loss | seq_aux_loss | none */
	double moe_aux_loss_coeff, moe_z_loss_coeff, moe_input_jitter_eps; /* 0: off */
	bool moe_router_dtype_fp32;              /* --moe-router-dtype fp32 (or fp64): gating GEMM in fp32 */
	double moe_expert_capacity_factor;       /* 0: None (dropless) */
	char moe_token_drop_policy[16];          /* probs | position */
	bool moe_pad_expert_input_to_capacity;
	int64_t moe_shared_expert_intermediate_size; /* 0: no shared expert */
	bool moe_shared_expert_gate;
	/* --moe-latent-size (transformer_config.py moe_latent_size; 0: None): the routed experts run
	 * in this latent width; moe_layer.py MoELayer's fc1_latent_proj [latent, h] projects the
	 * (routed) tokens down before dispatch, fc2_latent_proj [h, latent] the combined output
	 * back up; the router and the shared expert see the full hidden state. */
	int64_t moe_latent_size;
	/* The model family: "gpt" (or "": Megatron-Core's GPTModel, a causal decoder) or "bert"
	 * (BertModel, megatron/core/models/bert/bert_model.py: the same pre-LN layers named
	 * encoder.layers.N with bidirectional attention under the padding mask, token-type
	 * embeddings when bert_binary_head, the pooler and binary head on [CLS], the LM head with
	 * the output layer's bias).  bert_binary_head: Megatron's args.bert_binary_head
	 * (--bert-no-binary-head clears). */
	char family[8];
	bool bert_binary_head;
	/* T5 (family "t5", Megatron-Core's T5Model, megatron/core/models/T5/t5_model.py): num_layers
	 * encoder layers and as many decoder layers (Megatron builds the decoder with args.num_layers,
	 * which is --encoder-num-layers: --decoder-num-layers is ignored), the decoder's sequence
	 * length, and with --position-embedding-type relative T5's bucketed relative position bias
	 * (--relative-attention-num-buckets 32, --relative-attention-max-distance 128).  In the table
	 * the decoder's layer N is layer num_layers + N (named decoder.layers.N). */
	int64_t decoder_seq_length, relative_attention_num_buckets, relative_attention_max_distance;
	/* --no-bias-gelu-fusion: BERT's MLP uses erf GELU; by default (with biases) Megatron's fused
	 * bias-GELU, the tanh approximation (megatron/core/fusions/fused_bias_gelu.py).  mgt's GPT
	 * keeps erf GELU (--openai-gelu for tanh). */
	bool no_bias_gelu_fusion;
	/* Hybrid models (family "hybrid": Megatron-Core's HybridModel, megatron/core/models/hybrid/
	 * hybrid_model.py, pretrain_hybrid.py): --hybrid-layer-pattern, one symbol per decoder layer
	 * (decoder.layers.N is the N-th symbol, '|' between pipeline stages not counted): 'M' a
	 * Mamba-2 layer, '*' self-attention alone, '-' a dense MLP alone, 'E' an MoE layer alone;
	 * num_layers is the symbols' count ("" without: every layer attention and MLP).  The Mamba-2
	 * mixer's sizes (megatron/core/ssm/mamba_mixer.py): --mamba-state-dim N, --mamba-head-dim P,
	 * --mamba-num-groups G, --mamba-num-heads NH (0: d_inner 2 hidden_size / P heads). */
	char hybrid_layer_pattern[1025];
	int64_t mamba_state_dim, mamba_head_dim, mamba_num_groups, mamba_num_heads;
	/* derived by mgt_model_config_finalize */
	int64_t vocab_size;        /* tokenizer vocabulary (unpadded) */
	int64_t padded_vocab_size; /* multiple of make_vocab_size_divisible_by * TP */
} mgt_model_config;

/* T5's relative position bucket of rel = key position - query position (Megatron-Core
 * relative_pos_embedding.py _relative_position_bucket, adapted from Hugging Face T5):
 * bidirectional: half the buckets for rel > 0; of each half, max_exact = half / 2 buckets for
 * |rel| < max_exact exactly, the rest logarithmic up to max_distance (the last bucket beyond);
 * unidirectional (the decoder): rel > 0 counts as 0.  The logarithm as torch computes it in
 * float32.  Returns a bucket in [0, num_buckets). */
int mgt_t5_relative_bucket(int64_t rel, bool bidirectional, int num_buckets, int max_distance);

/* The model families, as data (lib/model/families.c: one row each; mgt-train's --model-family):
 *   name, title   "gpt" (also ""), "bert", "t5"; "GPT", "BERT", "T5" in messages
 *   recipe        how the layers stack: one causal decoder stack (Megatron-Core's GPTModel,
 *                 megatron/core/models/gpt/gpt_model.py); one bidirectional encoder stack under
 *                 the padding mask (BertModel, megatron/core/models/bert/bert_model.py); an
 *                 encoder stack and a decoder stack with cross-attention (T5Model,
 *                 megatron/core/models/T5/t5_model.py)
 *   moe           MoE layers may replace the MLPs (--num-experts)
 *   relative_positions  --position-embedding-type relative (T5's bucketed relative bias)
 *   lm_head       BERT's heads: the LM head's dense + GELU + LayerNorm transform and output
 *                 bias (bert_lm_head.py), the pooler and binary head with bert_binary_head
 *   hf            the Hugging Face family (mgt_hf_family) that holds it: MGT_HF_MEGATRON_BERT
 *                 for BERT; MGT_HF_FROM_LAYERS: chosen from the layers' options (GPT: gpt2,
 *                 llama, ...); MGT_HF_NONE: no transformers class computes it (Megatron's T5)
 *   bias_gelu_tanh  with linear biases (and without --no-bias-gelu-fusion) the MLP's GELU is the
 *                 tanh approximation, as Megatron's bias-GELU fusion computes it for BERT and T5
 *                 (megatron/core/fusions/fused_bias_gelu.py); GPT's is exact unless --openai-gelu */
typedef enum { MGT_STACK_DECODER, MGT_STACK_ENCODER, MGT_STACK_ENCODER_DECODER } mgt_stack_recipe;
typedef struct mgt_family {
	const char *name, *title;
	mgt_stack_recipe recipe;
	bool moe, relative_positions, lm_head;
	int hf;
	bool bias_gelu_tanh;
} mgt_family;
enum { MGT_HF_NONE = -1, MGT_HF_FROM_LAYERS = -2 };
/* The row named name ("" is "gpt"; static storage), or NULL when it names no family. */
const mgt_family *mgt_family_find(const char *name);
/* c->family's row; a config that mgt_model_config_finalize has not checked and that names no
 * family gets GPT's row. */
const mgt_family *mgt_model_family(const mgt_model_config *c);
/* The family names, for messages: "gpt, bert or t5". */
const char *mgt_model_family_names(void);
/* Whether c is a BERT (family "bert"), a T5 (family "t5"). */
bool mgt_model_is_bert(const mgt_model_config *c);
bool mgt_model_is_t5(const mgt_model_config *c);

/* Fill derived values (ffn_hidden_size: 4h or, with SwiGLU, int(4h*2/3/64)*64; kv_channels h/heads;
 * num_query_groups = heads without GQA; padded_vocab_size from vocab_size and tp) and check
 * consistency: heads divide hidden size (unless kv_channels is given), query groups divide heads,
 * seq_length <= max_position_embeddings for learned positions, rot_dim even, TP divides heads and
 * query groups and ffn.  Errors: MGT_ERR_USAGE with a message naming the flags. */
mgt_status mgt_model_config_finalize(mgt_model_config *c, int tp);
/* Parameters that are vocabulary padding: (padded_vocab_size - vocab_size) rows of hidden_size
 * in the word embedding, and again in an untied output layer, plus one element a row in a BERT's
 * output_layer.bias (Megatron counts them in its parameter counts; Hugging Face and GGUF models
 * have none).  c finalized. */
int64_t mgt_model_padding_params(const mgt_model_config *c);

/* The MoE part of it (lib/model/moe_config.c): nothing to check without experts; otherwise
 * top-k in 1..num_experts, the router's groups, the capacity factor, the score function and
 * load-balancing type, TP dividing the experts' FFN sizes.  Errors: MGT_ERR_USAGE naming the
 * flags. */
mgt_status mgt_moe_config_check(const mgt_model_config *c, int tp);

/* RoPE frequencies inv_freq[k], k < rot_dim/2 (rot_dim = kv_channels * rotary_percent), fp32 as
 * Megatron's RotaryEmbedding computes them (megatron/core/models/common/embeddings/
 * rotary_pos_embedding.py): 1 / base^(2k / rot_dim) in fp32; with use_rope_scaling then
 * _apply_scaling (Llama 3.1; transformers' modeling_rope_utils.py _compute_llama3_parameters):
 * wavelen = 2 pi / inv; wavelen > orig/low: inv / factor; wavelen < orig/high: inv; between:
 * (1 - s) inv / factor + s inv with s = (orig / wavelen - low) / (high - low), in fp32 in the
 * order torch evaluates Megatron's expression.  out: host array of rot_dim/2 floats. */
void mgt_model_rope_inv_freq(const mgt_model_config *c, float *out);

/* The layers [*first, *first + *n) of pipeline stage `stage` of `nstages` (virtual stages
 * included): an even split, or with decoder_first/last_pipeline_num_layers those counts on the
 * first / last stage and the rest split evenly over the stages between
 * (megatron/core/transformer/transformer_block.py get_num_layers_to_build,
 * transformer_layer.py get_transformer_layer_offset); a --hybrid-layer-pattern with '|' gives
 * stage k its k-th segment (megatron/core/models/hybrid/hybrid_layer_allocation.py
 * select_pipeline_segment).  Errors: MGT_ERR_USAGE naming the flags when the layers do not
 * divide or the segments are not one per stage (the same answer for every stage). */
mgt_status mgt_stage_layers(const mgt_model_config *c, int nstages, int stage, int64_t *first, int64_t *n);

/* ---- the tensor table ---- */
typedef enum {
	MGT_SHARD_NONE,   /* replicated over TP */
	MGT_SHARD_ROW,    /* split along dim 0 across TP (column-parallel weights and biases) */
	MGT_SHARD_COL,    /* split along dim 1 across TP (row-parallel weights) */
	MGT_SHARD_VOCAB,  /* vocab-parallel embedding / output layer: dim 0 */
	MGT_SHARD_ROW_GLU, /* SwiGLU fc1: global cat(gate, up), each half split along dim 0 (section 6.3) */
	/* row blocks (mgt_tensor.blocks): global cat(block 0, block 1, ...), each block split along
	 * dim 0 and a rank's pieces kept in block order: the Mamba mixer's in_proj [z|x|B|C|dt] and
	 * conv1d [x|B|C] (megatron/core/ssm/mamba_mixer.py; ROW_GLU is the two-block case) */
	MGT_SHARD_ROW_BLOCKS,
} mgt_shard_rule;

/* The most boxes mgt_tensor_boxes returns (up to 3 per row block). */
enum { MGT_TENSOR_MAX_BLOCKS = 5, MGT_TENSOR_MAX_BOXES = 3 * MGT_TENSOR_MAX_BLOCKS };

/* Initializers: N(0, init_std), zeros, ones; and the Mamba-2 mixer's (megatron/core/ssm/
 * mamba_mixer.py MambaMixer.__init__): U(-init_std, init_std) (the conv's kaiming_uniform with
 * a = sqrt(5), bound 1/sqrt(K)); dt_bias, the inverse softplus of dt = exp(u (ln 0.1 - ln 0.001) +
 * ln 0.001) clamped to >= 1e-4, u ~ U(0, 1); A_log, log of U(1, 16). */
typedef enum { MGT_INIT_NORMAL, MGT_INIT_ZERO, MGT_INIT_ONE, MGT_INIT_UNIFORM, MGT_INIT_DT_BIAS, MGT_INIT_A_LOG } mgt_init_kind;

/* Per-layer roles, used by the forward pass to find its tensors without index lists. */
typedef enum {
	MGT_T_WORD_EMB, MGT_T_POS_EMB,
	MGT_T_LN1_W, MGT_T_LN1_B, MGT_T_QKV_W, MGT_T_QKV_B, MGT_T_PROJ_W, MGT_T_PROJ_B,
	MGT_T_LN2_W, MGT_T_LN2_B, MGT_T_FC1_W, MGT_T_FC1_B, MGT_T_FC2_W, MGT_T_FC2_B,
	MGT_T_FINAL_LN_W, MGT_T_FINAL_LN_B, MGT_T_OUTPUT_W,
	MGT_T_QNORM_W, MGT_T_QNORM_B, MGT_T_KNORM_W, MGT_T_KNORM_B, /* --qk-layernorm ([kv_channels]) */
	/* MoE layers (their norm is MGT_T_LN2_W/B, named pre_mlp_layernorm): the router's weight
	 * [E, h] and its bias (with add_bias_linear) [E]; the expert bias [E] of aux-loss-free
	 * balancing (frozen: state, not a parameter); expert e's fc1 [2F or F, h] and fc2 [h, F]
	 * (one row per expert: mgt_tensor.expert); the shared expert's fc1, fc2 and gate [1, h] */
	MGT_T_ROUTER_W, MGT_T_ROUTER_B, MGT_T_EXPERT_BIAS, MGT_T_EXP_FC1_W, MGT_T_EXP_FC2_W,
	MGT_T_SH_FC1_W, MGT_T_SH_FC2_W, MGT_T_SH_GATE_W,
	/* BERT (family "bert"): the token-type embedding [2, h]; the LM head's dense [h, h] + bias and
	 * LayerNorm, the output layer's bias [V] (vocab-parallel); the pooler's dense [h, h] + bias;
	 * the binary (sentence-order) head [2, h] + bias */
	MGT_T_TOKTYPE_EMB, MGT_T_LMH_W, MGT_T_LMH_B, MGT_T_LMH_LN_W, MGT_T_LMH_LN_B, MGT_T_OUTPUT_B,
	MGT_T_POOL_W, MGT_T_POOL_B, MGT_T_BIN_W, MGT_T_BIN_B,
	/* T5 (family "t5"): a decoder layer's pre-cross-attention LayerNorm, its cross-attention's
	 * linear_q [nq d, h], linear_kv [2 nq d, h] (rows per head [k_h; v_h]) and linear_proj
	 * [h, nq d] with their biases; the relative position biases [buckets, heads] of the encoder
	 * (bidirectional) and the decoder (--position-embedding-type relative) */
	MGT_T_XLN_W, MGT_T_XLN_B, MGT_T_XQ_W, MGT_T_XQ_B, MGT_T_XKV_W, MGT_T_XKV_B, MGT_T_XPROJ_W, MGT_T_XPROJ_B,
	MGT_T_REL_ENC, MGT_T_REL_DEC,
	/* T5's encoder.final_layernorm (decoder.final_layernorm is MGT_T_FINAL_LN_W/B) */
	MGT_T_ENC_FINAL_LN_W, MGT_T_ENC_FINAL_LN_B,
	/* A hybrid model's Mamba-2 layer (its fused pre-norm mixer.in_proj.layer_norm_weight/bias is
	 * MGT_T_LN1_W/B): mixer.in_proj.weight [2 DI + 2 G N + NH, h] (rows z, x, B, C, dt),
	 * conv1d_weight [CD, 4] (Megatron's [CD, 1, 4]) and conv1d_bias [CD] (CD = DI + 2 G N channels
	 * x, B, C), dt_bias, A_log and D [NH], norm.weight [DI], out_proj.weight [h, DI] */
	MGT_T_M_IN_W, MGT_T_M_CONV_W, MGT_T_M_CONV_B, MGT_T_M_DT_B, MGT_T_M_A_LOG, MGT_T_M_D, MGT_T_M_NORM_W,
	MGT_T_M_OUT_W,
	/* An MoE layer's latent projections (--moe-latent-size): mlp.fc1_latent_proj.weight
	 * [latent, h] and mlp.fc2_latent_proj.weight [h, latent], replicated over TP and EP
	 * (moe_layer.py: TELinear parallel_mode="duplicated") */
	MGT_T_LAT_FC1_W, MGT_T_LAT_FC2_W,
	MGT_T_NROLES
} mgt_tensor_role;

typedef struct mgt_tensor {
	char name[96];             /* Megatron-Core name */
	mgt_tensor_role role;
	int layer;                 /* global layer index, -1 outside the decoder stack */
	int ndim;
	int64_t shape[2];          /* global */
	int64_t local_shape[2];    /* this rank's piece */
	int64_t local_offset[2];   /* its offset in the global tensor */
	mgt_shard_rule shard;
	int pp_stage;              /* owning pipeline stage */
	mgt_init_kind init;
	double init_std;           /* MGT_INIT_NORMAL */
	bool weight_decay;         /* false for biases and 1-D tensors */
	/* frozen: state kept with the parameters (checkpointed, in the flat buffer) that no
	 * gradient reaches and the optimizer leaves alone (its gradient stays zero): the MoE
	 * router's expert_bias, updated by mgt_model_moe_update_bias */
	bool frozen;
	/* Experts: a row is an expert row when num_experts > 0 (0 for every other tensor, whose
	 * expert is -1 when the table builder made it); expert is its global expert index.  Rows of one
	 * expert tensor are named with Megatron-Core's SequentialMLP names,
	 * decoder.layers.N.mlp.experts.local_experts.E.linear_fc1.weight (E global); a checkpoint
	 * stores all E experts as ONE dataset, `dataset` (decoder.layers.N.mlp.experts.linear_fc1
	 * .weight), of shape [num_experts, shape[0], shape[1]], this row at index `expert` of its
	 * first dimension, so that checkpoints reshard across expert-parallel sizes. */
	int expert, num_experts;
	char dataset[96];
	/* MGT_SHARD_ROW_BLOCKS: the global rows of each block (nblocks of them, each divisible by
	 * the TP size); 0 otherwise */
	int64_t blocks[MGT_TENSOR_MAX_BLOCKS];
	int nblocks;
	size_t offset;             /* element offset in the flat local parameter buffer */
	size_t numel;              /* local elements */
} mgt_tensor;

/* A bucket of the flat gradient buffer: [offset, offset + numel), numel padded (see layout);
 * expert: it holds expert rows only (reduced over the expert-data-parallel group; Megatron keeps
 * them in expert-parallel buffers of their own), else none. */
typedef struct mgt_bucket {
	size_t offset, numel;
	bool expert;
} mgt_bucket;

typedef struct mgt_tensor_table {
	mgt_tensor *t;
	int n;
	size_t numel;              /* local parameters on this rank */
	int64_t global_numel;      /* all parameters of the model */
	size_t buf_numel;          /* flat buffer elements, padding included (>= numel) */
	mgt_bucket *buckets;       /* gradient-reduction buckets, in buffer order */
	int nbuckets;
} mgt_tensor_table;

/* Build the table for config c on tensor-parallel rank tp_rank of tp, pipeline stage pp_rank of
 * pp (this rank owns the tensors of its stage; the table lists only those).  Errors:
 * MGT_ERR_NOMEM.  Free with mgt_tensor_table_free. */
mgt_status mgt_tensor_table_build(mgt_tensor_table *tt, const mgt_model_config *c, int tp,
				  int tp_rank, int pp, int pp_rank);
/* The same on expert-parallel rank ep_rank of ep: MoE layers list only this rank's experts
 * (E/ep consecutive global experts; mgt_tensor.expert).  mgt_tensor_table_build is ep = 1.
 * Errors: also MGT_ERR_USAGE when ep does not divide num_experts. */
mgt_status mgt_tensor_table_build_ep(mgt_tensor_table *tt, const mgt_model_config *c, int tp, int tp_rank, int pp,
				     int pp_rank, int ep, int ep_rank);
void mgt_tensor_table_free(mgt_tensor_table *tt);

/* Whether layer l (global index) of c is an MoE layer (num_experts > 0 and
 * moe_layer_pattern[l] == '1', or l % moe_layer_freq == 0 without a pattern). */
bool mgt_moe_is_layer(const mgt_model_config *c, int64_t l);

/* Lay the tensors out in one flat buffer as Megatron's DDP param/grad buffer
 * (megatron/core/distributed/param_and_grad_buffer.py, distributed/distributed_data_parallel.py):
 * tensors in reverse table order (backprop order); with the distributed optimizer each start is
 * rounded up to 64 elements and each bucket's end up to lcm(dp, 128) so that it splits into dp
 * equal shards; a bucket closes once it holds >= bucket_size elements (0: one bucket) and
 * around the shared word embedding (shared_embedding: tied embeddings with PP > 1), which gets
 * a bucket of its own, and wherever the rows change between expert rows and others.  Sets every offset, buf_numel and the buckets.  mgt_tensor_table_build
 * lays out with (1, false, 0, false).  Errors: MGT_ERR_NOMEM. */
mgt_status mgt_tensor_table_layout(mgt_tensor_table *tt, int dp, bool distopt, int64_t bucket_size,
				   bool shared_embedding);
/* bucket_size MGT_BUCKETS_PER_LAYER (FSDP's units, Megatron-FSDP's TransformerLayer and MambaLayer
 * modules): a bucket closes wherever the decoder layer changes (the tensors outside layers form
 * a unit at each end of the stage), beside the expert-row rule, and
 * each end is rounded up to dp x MGT_PAGE_FLOATS so that every data-parallel shard starts on a
 * 4 KiB page of the buffer (lib/train/fsdp.c returns the pages outside a rank's shards). */
#define MGT_BUCKETS_PER_LAYER ((int64_t)-1)
#define MGT_PAGE_FLOATS 1024

/* The part [*a, *b) of t's flat-buffer range [t->offset, t->offset + t->numel) inside the
 * buffer range [lo, hi); false (and *a == *b) when they do not overlap. */
bool mgt_tensor_overlap(const mgt_tensor *t, size_t lo, size_t hi, size_t *a, size_t *b);

/* The boxes of the global tensor that hold the local elements [lo, hi) of t (0 <= lo < hi <=
 * t->numel, flat row-major over t->local_shape): at most MGT_TENSOR_MAX_BOXES (a partial row,
 * whole rows, a partial row; twice for MGT_SHARD_ROW_GLU's two halves, once per block of
 * MGT_SHARD_ROW_BLOCKS).  box[k] gets the global offset and shape (ndim entries) and first[k]
 * the local flat index of its first element; boxes come in local order, each contiguous
 * locally.  Returns the number of boxes. */
int mgt_tensor_boxes(const mgt_tensor *t, size_t lo, size_t hi, int64_t off[MGT_TENSOR_MAX_BOXES][2],
		     int64_t shape[MGT_TENSOR_MAX_BOXES][2], size_t first[MGT_TENSOR_MAX_BOXES]);
/* The row with this name, or NULL. */
const mgt_tensor *mgt_tensor_table_find(const mgt_tensor_table *tt, const char *name);

/* Initialize host buffer params [tt->numel] layout-independently: element e of the GLOBAL
 * tensor is mgt_philox_normal(mgt_hash64(name) ^ seed-derived key, e) * std, so any TP/PP split
 * draws the same values (doc/design.md section 3).  Megatron's init: N(0, init_method_std), with
 * linear_proj and linear_fc2 weights N(0, std / sqrt(2 * num_layers)); biases 0; norm weights 1. */
void mgt_tensor_table_init(const mgt_tensor_table *tt, float *params, uint64_t seed);

/* ---- the model ---- */
typedef struct mgt_model mgt_model;

/* One micro-batch, sequence-first host arrays of T = s*b elements (token t = i*b + j for
 * position i of sequence j): tokens, labels, position_ids int32; loss_mask fp32 0/1.  Under
 * BERT the labels are -1 (or anything) where loss_mask is 0. */
typedef struct mgt_microbatch {
	const int32_t *tokens, *labels, *position_ids;
	const float *loss_mask;
	/* BERT (family "bert"): tokentype_ids [T] (0 or 1; read with the binary head), padding_mask
	 * [T] (BertDataset's: a key is attended where it is >= 0.5, i.e. 1), is_random [b] (the
	 * sentence-order label 0/1, -1 ignored; read with the binary head).  NULL for GPT. */
	const int32_t *tokentype_ids;
	const int64_t *padding_mask;
	const int32_t *is_random;
	/* T5 (family "t5"): tokens, position_ids and padding_mask (the encoder's key mask, as BERT's)
	 * are the encoder's [seq_length * b]; dec_tokens, dec_position_ids, labels and loss_mask the
	 * decoder's [decoder_seq_length * b].  NULL otherwise. */
	const int32_t *dec_tokens, *dec_position_ids;
	/* packed documents (layout packed_sequences): seg_start [T], element i*b + j the position
	 * where the document holding position i of sequence j starts (mgt_gpt_doc_starts); NULL
	 * otherwise */
	const int32_t *seg_start;
	/* RoPE's positions [T] where they are not position_ids: with --reset-position-ids Megatron's
	 * rotary embedding still takes each token's position in its row (GPTModel.forward builds it
	 * from the sequence length; position_ids feed only a learned position embedding).  NULL:
	 * position_ids */
	const int32_t *rope_position_ids;
	/* packed documents under context parallelism (layout packed_sequences, cp > 1): the global
	 * row (i*b + j of the whole micro-batch's [seq_length * b] rows) of local row t of context
	 * rank q at cp_rows[q*T + t], every rank's (Megatron's per-document split,
	 * mgt_sft_cp_indices); seg_start is then the whole micro-batch's [seq_length * b] in global
	 * rows, and the local arrays hold the rows cp_rows names.  NULL otherwise */
	const int32_t *cp_rows;
} mgt_microbatch;

/* How one model chunk runs.  A chunk is virtual pipeline stage `stage` of `num_stages`
 * (num_stages = PP x V; chunk c of pipeline rank r is stage c*PP + r, holding layers
 * [stage*L/num_stages, (stage+1)*L/num_stages), megatron/core/transformer/transformer_block.py
 * get_num_layers_to_build); stage 0 has the embedding, the last stage the final norm, output
 * layer and loss.  slots: micro-batches whose activations can be alive at once (pipeline schedules
 * keep several).  With sequence_parallel (TP > 1) activations outside attention and MLP are split
 * along the sequence across the tensor-parallel group (Korthikanti et al. 2022, section 4.2.2).
 * dp, distributed_optimizer and bucket_size lay the flat gradient buffer out
 * (mgt_tensor_table_layout). */
/* What data parallelism shards (Megatron-FSDP's --data-parallel-sharding-strategy,
 * megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py): nothing (DDP's
 * all-reduce), the optimizer state (the distributed optimizer, ZeRO-1), also the gradients
 * (reduce-scattered after every micro-batch's backward, ZeRO-2), also the parameters (gathered
 * per layer before its forward and its backward, ZeRO-3).  lib/train/fsdp.c. */
typedef enum { MGT_DP_NO_SHARD, MGT_DP_OPTIM, MGT_DP_OPTIM_GRADS, MGT_DP_OPTIM_GRADS_PARAMS } mgt_dp_sharding;

typedef enum { MGT_RECOMPUTE_NONE, MGT_RECOMPUTE_SELECTIVE, MGT_RECOMPUTE_FULL } mgt_recompute_granularity;
typedef enum { MGT_RECOMPUTE_UNIFORM, MGT_RECOMPUTE_BLOCK } mgt_recompute_method;

/* Activation recomputation (Megatron's --recompute-granularity, --recompute-method,
 * --recompute-num-layers; Korthikanti et al. 2022, section 5; megatron/core/recompute.py
 * checkpointed_forward, attention.py _checkpointed_attention_forward).  All-zero is NONE: every
 * activation a layer's backward reads is kept per slot (model_impl.h layer_act).
 * SELECTIVE: each layer drops core attention's outputs, the attention output ctx [T, nq/tp * d]
 * and its log-sum-exp lse [b, nq/tp, s], and the backward reruns core attention (attn_forward from the
 * kept post-RoPE qkv, same dropout key) into one shared [T, nq/tp * d] + [b nq/tp s] scratch
 * just before the layer's attention backward, which reads ctx (linear_proj's weight gradient,
 * the attention backward's rowsum(dO * O)) and lse.  Saves (slots x layers - 1) x
 * (T nq/tp d + b nq/tp s) floats.
 * FULL: a recomputed layer keeps nothing but its group's input (the [Th, h] residual stream
 * entering the group's first layer).  uniform: the chunk's layers in groups [g, g + n),
 * g = 0, n, 2n, ... (n = num_layers; the last group shorter); block: each of the chunk's first n
 * layers alone, the others keep everything (Megatron's per-pipeline-stage count; with virtual
 * stages, per chunk).  Before the backward of a group's last layer the group's forward reruns
 * from the kept input with the slot's dropout key into a scratch shared by the slots (the
 * buffers of min(n, layers) layers for uniform, of one layer for block; the group's first input
 * is the slot's), so the backward sees the same values bit for bit; the last layer's rerun stops
 * at its MLP activation (its output is not read).  num_layers >= 1 with FULL
 * (mgt_model_create: MGT_ERR_USAGE otherwise).  Forwards without a backward (evaluation) write
 * the same scratch.  mgt_model_measure counts all of it. */
typedef struct mgt_recompute {
	mgt_recompute_granularity granularity;
	mgt_recompute_method method;
	int num_layers;
} mgt_recompute;

/* How context parallelism brings the other ranks' keys and values to core attention
 * (--cp-comm-type; lib/model/cp.c): the p2p ring, an all-gather, or all-to-alls of the heads
 * (Ulysses: query groups per TP rank divisible by CP). */
typedef enum { MGT_CP_P2P, MGT_CP_ALLGATHER, MGT_CP_A2A } mgt_cp_comm;

/* Context parallelism's placement (Megatron-Core's get_batch_on_this_cp_rank): context rank q of
 * cp holds chunks q and 2cp-1-q of the 2cp chunks of a micro-batch, side by side; in the
 * sequence-first rows (t = i*b + j) a chunk is chunk_rows = seq_length/(2 cp) * b rows.  Returns
 * the row of the whole micro-batch that local row t (0 <= t < 2 chunk_rows) of rank q is. */
int64_t mgt_cp_row(int64_t chunk_rows, int cp, int q, int64_t t);

/* mbs: micro-batch size; stage of num_stages pipeline stages; slots: micro-batches in flight;
 * dp: the size of the group the gradients are reduced over (data x context parallel), which
 * pads the distributed optimizer's buckets; cp_comm: with ps->cp > 1 (the context-parallel
 * size: each rank holds seq_length / cp positions of every sequence, 2 chunks).  precision: the
 * training precision (--bf16, --fp16; zero is fp32): with bf16 or fp16 the chunk also keeps a
 * 16-bit copy of its parameters [tensors->buf_numel] that its linear layers read instead of
 * rounding the fp32 weights at every GEMM (Megatron's model parameters in the training precision
 * beside the optimizer's fp32 main parameters, megatron/core/optimizer/optimizer.py
 * Float16OptimizerWithFloat16Params): mgt_model_params marks it stale, the next forward refreshes
 * it with the backend's cast, so a GEMM sees bit for bit the operand it rounded before.  It
 * serves while the backend's precision is the layout's (mgt_backend.precision); under any other
 * the linear layers read the fp32 parameters as before.  Under bf16 or fp16 the activations are
 * stored in that type where Megatron's are (backend.h, "Storage"), the residual stream (the layer
 * inputs, the hidden states between stages) included unless fp32_residual_connection
 * (--fp32-residual-connection, megatron/core/transformer/transformer_config.py
 * fp32_residual_connection: the residual and the embeddings' output kept in fp32). */
typedef struct mgt_model_layout {
	int mbs, stage, num_stages, slots;
	bool sequence_parallel, distributed_optimizer;
	int dp;
	int64_t bucket_size;
	mgt_recompute recompute;
	mgt_cp_comm cp_comm;
	mgt_precision precision;
	bool fp32_residual_connection;
	mgt_fp8_recipe fp8; /* fp8 linear layers (lib/model/fp8lin.c); format MGT_FP8_OFF: none */
	/* packed documents (GPT, --reset-attention-mask): every micro-batch gives seg_start and
	 * attention stays within each document (backend.h attn_forward, mgt_attn.seg_start) */
	bool packed_sequences;
	/* FSDP (lib/model/shard.c): what data parallelism shards, and the size of the group the
	 * expert buckets are sharded over (0: dp).  From MGT_DP_OPTIM_GRADS on, bucket_size must be
	 * MGT_BUCKETS_PER_LAYER and the gradient buffer is reserved (backend reserve): the caller
	 * keeps only its shards and one unit at a time written; with MGT_DP_OPTIM_GRADS_PARAMS the
	 * parameters and their 16-bit copy too (see mgt_model_set_param_hook). */
	mgt_dp_sharding sharding;
	int edp;
} mgt_model_layout;

/* Create a model chunk for config c (finalized for ps->tp) on backend be with parallel state ps
 * (the communicators are used, not owned; they must outlive the model).  Allocates parameters,
 * gradients ([tensors->buf_numel] each) and activation buffers on the backend (sizes reported by
 * mgt_model_memory).  Parameters are left zero: call mgt_model_init_params or load them.
 * Errors: MGT_ERR_NOMEM, MGT_ERR_USAGE (micro-batch size or a layout that does not divide:
 * layers by stages, sequence by TP under sequence parallelism, context parallelism). */
mgt_status mgt_model_create(mgt_model **out, const mgt_model_config *c, const mgt_model_layout *L,
			    mgt_backend *be, const mgt_parallel *ps);
void mgt_model_free(mgt_model *m);

const mgt_tensor_table *mgt_model_tensors(const mgt_model *m);
/* The chunk's layers as data, in the symbols of Megatron's hybrid layer pattern
 * (megatron/core/ssm/mamba_hybrid_layer_allocation.py, Symbols): two symbols per transformer
 * layer of the chunk (its pipeline stage's layers, first to last; a T5 chunk's encoder layers,
 * then its decoder's), the self-attention '*' (MGT_LAYER_ATTENTION) then the MLP, '-'
 * (MGT_LAYER_MLP, dense) or 'E' (MGT_LAYER_MOE, an MoE layer by mgt_moe_is_layer: --moe-layer-freq
 * or --moe-layer-pattern).  A dense GPT or Llama of 4 layers is "*-*-*-*-", tiny-moe "*E*E*E*E",
 * --moe-layer-freq 2 "*E*-*E*-".  Derived from the config once, when the chunk is made; the
 * forward and backward run the layer kinds in this order (lib/model/stack.c).  T5's decoder
 * cross-attention (lib/model/t5.c) has no symbol.  NUL-terminated; owned by m, valid until
 * mgt_model_free. */
typedef enum { MGT_LAYER_ATTENTION = '*', MGT_LAYER_MLP = '-', MGT_LAYER_MOE = 'E', MGT_LAYER_MAMBA = 'M' } mgt_layer_kind;
const char *mgt_model_layer_pattern(const mgt_model *m);

/* Hybrid models' layer patterns (lib/model/hybrid.c; issue 48: no model takes 'M' layers yet).
 * mgt_hybrid_pattern_from_ratios: Megatron's allocation of n layers from an attention and an
 * MLP ratio (megatron/core/models/hybrid/hybrid_layer_allocation.py pattern_from_ratios):
 * round(n ratio) attention layers ('*', Python's round: ties to even) spread evenly among the
 * Mamba layers ('M'), then round(n mlp_ratio) of the Mamba layers turned into MLP layers ('-')
 * the same way; (10, 0.2, 0) is "MMM*MM*MMM".  Writes n symbols and a NUL to out [n + 1].
 * Errors: MGT_ERR_USAGE (n < 1, ratios outside [0, 1] or summing past 1).
 * mgt_hybrid_pattern_check: --hybrid-layer-pattern p (symbols M * - E, '|' between pipeline
 * segments, their count a multiple of pp when there are any) into its layer count (*layers, the
 * symbols; Megatron overrides --num-layers with it) and segments (*segments, 1 without '|').
 * Errors: MGT_ERR_USAGE naming the character (another symbol; Megatron's G, D, + and the '/' of
 * multi-token prediction are not implemented), no layer, segments that do not divide into pp. */
mgt_status mgt_hybrid_pattern_from_ratios(int64_t n, double attention_ratio, double mlp_ratio, char *out);
mgt_status mgt_hybrid_pattern_check(const char *p, int pp, int64_t *layers, int *segments);
/* mgt_hybrid_symbol: the symbol of global layer l of c's --hybrid-layer-pattern ('|' skipped), 0
 * past its end or without one.  mgt_hybrid_segment_layers: the layers (symbols) of pipeline
 * segment `segment` (0-based, between the pattern's '|'), 0 past the last. */
char mgt_hybrid_symbol(const mgt_model_config *c, int64_t l);
int mgt_hybrid_segment_layers(const mgt_model_config *c, int segment);
/* The std of the output linears' init (linear_proj, linear_fc2, the experts' fc2, out_proj):
 * Megatron's output_layer_init_method, init_method_std / sqrt(m num_layers) with m = 2, or 1 in a
 * hybrid model (megatron/core/transformer/transformer_config.py __post_init__). */
double mgt_model_out_std(const mgt_model_config *c);
/* Whether t is the weight of a norm (input_layernorm, pre_mlp_layernorm, final_layernorm,
 * q_layernorm, k_layernorm): the tensors --apply-layernorm-1p stores zero-centred. */
bool mgt_tensor_is_norm_weight(const mgt_tensor *t);
/* Flat backend buffers [tensors->buf_numel] (param, grad); padding stays zero.  The caller may
 * write the parameters through the pointer until the next forward: asking for it marks the
 * 16-bit copy (mgt_model_layout.precision) stale. */
float *mgt_model_params(mgt_model *m);
float *mgt_model_grads(mgt_model *m);

/* Initialize parameters with mgt_tensor_table_init and upload them.  Errors: MGT_ERR_NOMEM, IO. */
mgt_status mgt_model_init_params(mgt_model *m, uint64_t seed);

/* Bytes the model allocates, by role (params: the fp32 parameters and their 16-bit copy). */
typedef struct { size_t params, grads, activations, workspace; } mgt_model_mem;
mgt_model_mem mgt_model_memory(const mgt_model *m);

/* What mgt_model_create would allocate for the same arguments, computed by the same code with
 * nothing allocated (no backend needed): *mem as mgt_model_memory reports it afterwards, and
 * *buf_numel the flat parameter buffer's elements (optimizer state is sized from it).
 * Errors: as mgt_model_create (a layout that does not divide, sizes out of range), NOMEM. */
mgt_status mgt_model_measure(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
			     mgt_model_mem *mem, size_t *buf_numel);
/* mgt_model_measure, and *outside (may be NULL) the flat-buffer elements of the units outside
 * layers (embeddings, final norm, output layer: the buckets whose mgt_model_bucket_unit is -1,
 * padding included) under bucket_size MGT_BUCKETS_PER_LAYER, 0 under any other layout: what
 * mgt-plan's FSDP traffic gathers after the step rather than per layer; *largest (may be NULL)
 * the elements of the largest bucket (padding included): what sizes the reduce-scatter's pack
 * (mgt_comm_mpi_pack_bytes). */
mgt_status mgt_model_measure_units(const mgt_model_config *c, const mgt_model_layout *L, const mgt_parallel *ps,
				   mgt_model_mem *mem, size_t *buf_numel, size_t *outside, size_t *largest);

/* ---- fp8 (lib/model/fp8lin.c; Transformer Engine's fp8.py and module/linear.py) ----
 * With mgt_model_layout.fp8 set, the linear layers of the dense decoder layers (linear_qkv,
 * linear_proj, linear_fc1, linear_fc2) run as Transformer Engine's fp8 linears: inputs and
 * weights cast to E4M3, gradients to E5M2 (hybrid) or E4M3, GEMMs of the fp8 values accumulated
 * in fp32 (the backend's gemm_fp8), 16-bit outputs; linear_qkv's and linear_fc1's inputs are the
 * fp32 norm outputs.  The delayed-scaling state is updated after every training forward of a
 * micro-batch and after every backward (reduced over TP x DP x CP).
 *
 * mgt_model_fp8_first_microbatch: the next forward is the first of a pass (a training step's or
 * an evaluation's schedule): it casts the weights again (TE's is_first_microbatch; later
 * micro-batches reuse the cast bytes).
 * mgt_model_fp8_view: the chunk's state, owned by the model (all zero without fp8): the host
 * metas (forward slots 3k + {0 input, 1 weight, 2 output} and backward slots 2k + {0
 * grad_output, 1 grad_input} of linear k = 4 li + j, j = 0 qkv, 1 proj, 2 fc1, 3 fc2, li the
 * local layer, global layer first_layer + li), the reduced amax rows the last forward and
 * backward updates used, and the number of linears.  The metas' row 0 holds on the host only
 * what was there after the last update: mgt_model_fp8_pending first brings the amaxes recorded
 * since (evaluation forwards') into it, reduced over TP x DP x CP as the next update will (a
 * collective: every rank of those groups calls it).  After changing the metas (a checkpoint's), call
 * mgt_model_fp8_restore: the scales, their reciprocals and row 0 go back to the backend.
 * Errors: IO (copies), NOMEM. */
typedef struct {
	mgt_fp8_meta *fwd, *bwd;
	const float *last_fwd, *last_bwd;
	int linears, first_layer;
} mgt_model_fp8_state;
void mgt_model_fp8_first_microbatch(mgt_model *m);
mgt_status mgt_model_fp8_view(mgt_model *m, mgt_model_fp8_state *v);
mgt_status mgt_model_fp8_pending(mgt_model *m);
mgt_status mgt_model_fp8_restore(mgt_model *m);

/* --fp8-param-gather (layout fp8.param_gather; Transformer Engine's
 * quantize_param_shard after Megatron's distributed-optimizer step): every rank of the data x
 * context parallel group casts its shard of each bucket (the distributed optimizer's: numel / DP
 * elements of the flat buffer at offset + rank x numel / DP) -- the fp8 linears' weights from
 * fp32 through the 16-bit copy to E4M3 with the weight slot's scale (delayed: the current one,
 * the amax recorded for the next update; tensorwise: from the weight's amax over all shards,
 * MAX-reduced over the group first), every other tensor's elements as fp32 -- and the packed
 * shards (1 byte an fp8 weight element, 4 for the rest, padded to the largest rank's) are
 * all-gathered over the group: the fp8 weights arrive as bytes (their transposes rebuilt, their
 * scale_inv kept), the rest into the fp32 parameters.  From the first call on, the forward no
 * longer casts weights (mgt_model_fp8_first_microbatch has no effect on them) and the fp32
 * parameters of the fp8 weights outside this rank's shards are stale: read them only through
 * this rank's shards (the checkpoint saves them from there).  Call after every optimizer step
 * that changed the parameters and once before the first forward (after initializing or
 * loading them); a collective over the group.  *done: whether it gathered (false, doing
 * nothing, without fp8 layers' state or param_gather: gather the fp32 buffer as without fp8).
 * Errors: the collectives' (IO). */
mgt_status mgt_model_fp8_gather_params(mgt_model *m, bool *done);
/* --fp8-param-gather under FSDP's optim_grads_params (layout sharding MGT_DP_OPTIM_GRADS_PARAMS,
 * dp > 1; Megatron-FSDP's copy_main_weights_to_model_weights in param_and_grad_buffer.py, then
 * the per-unit all-gather of the fp8 model weight buffer and mixed_precision.py's
 * fp8_create_transpose_cache).  mgt_model_fp8_units: whether the chunk runs so (fp8 layers,
 * param_gather, that layout).  Then mgt_model_fp8_gather_params casts and packs this rank's shard
 * of each layer bucket as above but keeps it (backend memory, pk bytes a bucket: 1 an fp8 weight
 * element, 4 any other, padded to the largest rank's and to 4), all-gathering only the buckets
 * outside layers; the scales are those of that cast (delayed: the current ones; tensorwise: from
 * the amax MAX-reduced over the group's shards) and each weight's scale_inv is kept from then.
 * mgt_model_fp8_unit_gather queues the all-gather over g (the bucket's data x context group: DP
 * ranks, this rank g->rank) of layer bucket b's packed shards (b: a bucket whose
 * mgt_model_bucket_unit >= 0); after mgt_comm_wait(g), mgt_model_fp8_unit_gathered unpacks them
 * (the fp8 weights' bytes and their transposes, the other tensors into the fp32 parameters) and
 * gives the receive pages back; mgt_model_fp8_unit_release gives back the bucket's weight bytes
 * and transposes (read again only after the next gather).  Errors: the collective's (IO). */
bool mgt_model_fp8_units(const mgt_model *m);
mgt_status mgt_model_fp8_unit_gather(mgt_model *m, int b, mgt_comm *g);
void mgt_model_fp8_unit_gathered(mgt_model *m, int b);
void mgt_model_fp8_unit_release(mgt_model *m, int b);

/* Dropout keys: mix (seed, iteration, micro-batch index) so every micro-batch of every iteration
 * draws its own masks, identically on every layout. */
void mgt_model_set_dropout_key(mgt_model *m, uint64_t seed, int64_t iteration, int64_t microbatch);

/* Pipeline pieces.  Every rank of a stage loads the same micro-batch.  Hidden states between
 * stages and their gradients are [Th, h] backend buffers of mgt_model_hidden_type elements (the
 * residual stream's storage: fp32, or the 16-bit type of a 16-bit layout precision), Th = s*mbs
 * (/TP under sequence parallelism: this rank's contiguous rows of the sequence-first tokens).
 * mgt_model_forward runs micro-batch mb in activation slot `slot` (0 <= slot < slots) with the
 * dropout key last set: a non-first stage reads mgt_model_hidden_in(m, slot), which the caller
 * filled; a non-last stage leaves its output in mgt_model_hidden_out(m, slot); the last stage
 * computes the loss (*loss_sum as mgt_model_step; 0 elsewhere).
 * mgt_model_backward runs the backward of the micro-batch in `slot` (its dropout masks are
 * recomputed from the key it was run with), accumulating parameter gradients: the last stage
 * starts from grad_scale * loss, other stages from mgt_model_hidden_grad(m), which the caller
 * filled with the gradient of the output; afterwards a non-first stage's
 * mgt_model_hidden_grad(m) holds the gradient of its input.  Errors: MGT_ERR_IO
 * (communicator). */
mgt_status mgt_model_forward(mgt_model *m, int slot, const mgt_microbatch *mb, bool train, double *loss_sum);
mgt_status mgt_model_backward(mgt_model *m, int slot, bool train, float grad_scale);
/* A callback for gradient readiness (--overlap-grad-reduce: Megatron's backward hooks that
 * launch a bucket's reduction once all its gradients are final).  While set, every
 * mgt_model_backward calls hook(ctx, m, INT_MAX) on the last stage after the output layer and
 * final norm (their gradients are complete), hook(ctx, m, g) after the backward of decoder layer
 * g (global index: the gradients of layers >= g on this chunk are complete), and at the end
 * hook(ctx, m, INT_MIN): every gradient is (the embeddings only then).  The caller sets it for the last backward of an iteration only; a non-OK
 * status from the hook ends the backward with it.  NULL clears it. */
typedef mgt_status (*mgt_grad_hook)(void *ctx, mgt_model *m, int done_from_layer);
void mgt_model_set_grad_hook(mgt_model *m, mgt_grad_hook hook, void *ctx);
/* ---- FSDP (lib/model/shard.c; megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py
 * _register_fsdp_hooks) ----
 * mgt_model_bucket_unit: the unit of bucket b of a layout by MGT_BUCKETS_PER_LAYER: the local
 * layer (0 <= li < the chunk's layers) whose tensors it holds, or -1 for tensors outside layers
 * (embeddings, final norm, output layer: Megatron-FSDP gathers them but never reshards them);
 * -1 for every bucket of another layout.
 * mgt_model_set_param_hook: while set, the forward calls hook(ctx, m, li, MGT_PARAM_NEED) before
 * local layer li's forward, then hook(.., li + 1, MGT_PARAM_PREFETCH) (the next layer's gather
 * may start, overlapped with li's compute), and hook(.., li, MGT_PARAM_RELEASE) after it; the
 * backward calls NEED for every layer of a fully recomputed group before its rerun and for each
 * layer before its backward, PREFETCH for li - 1, and RELEASE after each layer's backward.  The
 * hook brings the layer's
 * parameters (its units' buckets of mgt_model_params) and calls mgt_model_lp_refresh_range on
 * them; the forward then refreshes the 16-bit copy of the units outside layers only.  A non-OK
 * status ends the pass with it.  NULL clears it.  T5 chunks call it for their encoder layers
 * (0 to L - 1) and then their decoder layers (L to 2L - 1) in the same way, one run of units
 * (lib/model/t5.c): the forward's PREFETCH after encoder layer L - 1 names decoder layer L, the
 * backward's after decoder layer L names encoder layer L - 1.
 * mgt_model_lp_refresh_range: the 16-bit copy (and --apply-layernorm-1p's 1 + w) of the flat
 * range [lo, hi) from the fp32 parameters.  mgt_model_params_lp: the 16-bit copy
 * [tensors->buf_numel] of type mgt_precision_dtype(layout precision), or NULL (fp32).
 * mgt_model_init_params_range: mgt_model_init_params for the flat range [lo, hi) only (the
 * same values as the whole init gives there).  Errors: NOMEM, IO. */
/* FSDP's reserved buffers (mgt_model_layout.sharding: the gradients from MGT_DP_OPTIM_GRADS on,
 * the parameters and their 16-bit copy with MGT_DP_OPTIM_GRADS_PARAMS; backend.h reserve and
 * commit): every range must be committed before it is written or read.  The chunk commits what
 * its own passes write: the gradient buckets outside layers at the start of every backward
 * (all of them for T5's), each layer's gradient buckets before that layer's backward, the
 * tensors mgt_model_finish_grads reduces, and the parameters mgt_model_init_params(_range)
 * writes; the caller commits the rest (what it uploads, gathers or casts into, the shards it
 * keeps).  mgt_model_commit(m, which, lo, hi): elements [lo, hi) of buffer which (fp32
 * parameters, the 16-bit copy: 2-byte elements, or fp32 gradients); mgt_model_commit_unit(m,
 * which, u): every bucket of unit u (mgt_model_bucket_unit; -1: those outside layers; INT_MIN, or a
 * layout without units: the whole buffer).  No-ops for a buffer that is allocated rather than
 * reserved, or absent.  Errors: MGT_ERR_NOMEM (no device memory), MGT_ERR_IO (backend.h commit). */
typedef enum { MGT_BUF_PARAMS, MGT_BUF_LP, MGT_BUF_GRADS } mgt_model_buf;
mgt_status mgt_model_commit(mgt_model *m, mgt_model_buf which, size_t lo, size_t hi);
mgt_status mgt_model_commit_unit(mgt_model *m, mgt_model_buf which, int u);
typedef enum { MGT_PARAM_RELEASE, MGT_PARAM_NEED, MGT_PARAM_PREFETCH } mgt_param_use;
typedef mgt_status (*mgt_param_hook)(void *ctx, mgt_model *m, int li, mgt_param_use use);
int mgt_model_bucket_unit(const mgt_model *m, int b);
void mgt_model_set_param_hook(mgt_model *m, mgt_param_hook hook, void *ctx);
void mgt_model_lp_refresh_range(mgt_model *m, size_t lo, size_t hi);
void *mgt_model_params_lp(mgt_model *m);
mgt_status mgt_model_init_params_range(mgt_model *m, uint64_t seed, size_t lo, size_t hi);
/* mgt_tensor_table_init for the flat range [lo, hi) only: params [hi - lo] holds buffer element e
 * at params[e - lo] (elements between tensors are left as they are). */
void mgt_tensor_table_init_range(const mgt_tensor_table *tt, float *params, uint64_t seed, size_t lo, size_t hi);

void *mgt_model_hidden_in(mgt_model *m, int slot);
void *mgt_model_hidden_out(mgt_model *m, int slot);
mgt_elem_type mgt_model_hidden_type(const mgt_model *m);
void *mgt_model_hidden_grad(mgt_model *m);
size_t mgt_model_hidden_numel(const mgt_model *m);
/* Download (host) the logits [T, padded_vocab/tp] and per-token losses [T] of the last forward in
 * slot (last stage only; either pointer may be NULL), fp32 (the 16-bit logits of a bf16 or fp16
 * layout widened exactly).  Errors: MGT_ERR_USAGE, MGT_ERR_IO. */
mgt_status mgt_model_outputs(mgt_model *m, int slot, float *logits_out, float *loss_out);
bool mgt_model_is_first_stage(const mgt_model *m);
bool mgt_model_is_last_stage(const mgt_model *m);

/* After the last micro-batch's backward (Megatron's finalize_model_grads before the
 * data-parallel reduction): with sequence parallelism all-reduce over TP the gradients of
 * tensors replicated across TP (norms, row-parallel biases, position embeddings), which each
 * rank computed from its part of the sequence; with --qk-layernorm (TP > 1) always those of
 * q_layernorm and k_layernorm, which each rank computed from its own heads
 * (finalize_model_grads.py _allreduce_layernorm_grads); with tied embeddings and PP > 1 all-reduce the
 * word-embedding gradient between the first and last stage (emb_comm).  Errors: MGT_ERR_IO. */
mgt_status mgt_model_finish_grads(mgt_model *m);

/* Forward of one micro-batch on a single-stage model (slot 0); with grad_scale != 0 also the backward, accumulating into the
 * gradients the gradient of grad_scale * sum_t loss[t] * mask[t] (Megatron passes
 * 1 / (num_tokens * num_microbatches)).  train == false disables dropout (evaluation).
 * *loss_sum = sum_t loss[t] * mask[t] (double).  Errors: MGT_ERR_IO (backend or communicator).
 * When logits_out / loss_out are non-NULL they receive (host, sequence-first) the logits
 * [T, padded_vocab/tp] and the per-token losses [T] before the backward (debug dumps). */
mgt_status mgt_model_step(mgt_model *m, const mgt_microbatch *mb, bool train, float grad_scale,
			  double *loss_sum, float *logits_out, float *loss_out);

/* Seconds spent in forwards and backwards since the last call (then reset). */
void mgt_model_take_times(mgt_model *m, double *fwd_s, double *bwd_s);

/* ---- Mixture of Experts (lib/model/moe.c) ---- */

/* The gradient scale of the MoE auxiliary and z losses in the following backwards: Megatron's
 * MoEAuxLossAutoScaler main_loss_backward_scale, loss scale / number of micro-batches
 * (megatron/core/pipeline_parallel/schedules.py).  Default 1.  No-op without MoE layers. */
void mgt_model_set_aux_scale(mgt_model *m, float scale);

/* BERT (lib/model/bert.c), on the last stage: the masked-LM loss (sum of the masked tokens' cross
 * entropy / their count) and the sentence-order loss (0 without the binary head) of the slot's
 * last forward; their sum is what mgt_model_forward returned as the loss. */
void mgt_model_bert_losses(mgt_model *m, int slot, double *lm, double *sop);
/* After an evaluation forward (train false): the slot's masked tokens and those whose label has
 * the largest logit over the padded vocabulary (mgt's masked-token accuracy; ties count). */
void mgt_model_bert_accuracy(mgt_model *m, int slot, int64_t *masked, int64_t *correct);
/* The global indices of this chunk's MoE layers into layers (may be NULL); returns how many. */
int mgt_model_moe_layers(const mgt_model *m, int *layers);
/* Routing statistics of the training forwards since the last call, per MoE layer of the chunk
 * (in layer order; any pointer may be NULL): aux[i] and z[i] the sums over micro-batches of the
 * unscaled auxiliary loss (aux / coeff; aux_loss or seq_aux_loss) and z loss (mean
 * logsumexp^2), tokens [i * num_experts + e] the routed copies kept per expert (this rank's
 * micro-batches: all-reduce over data parallelism for the global batch's counts).  Resets them;
 * returns the number of MoE layers. */
int mgt_model_moe_take_stats(mgt_model *m, double *aux, double *z, double *tokens);
/* Aux-loss-free balancing (--moe-router-enable-expert-bias; Megatron's
 * get_updated_expert_bias): expert_bias += rate * sign(mean(count) - count_e) per MoE layer, in
 * fp32, with tokens laid out as mgt_model_moe_take_stats gives them, summed over the global
 * batch.  No-op without the flag.  Errors: IO (upload/download). */
mgt_status mgt_model_moe_update_bias(mgt_model *m, const double *tokens);
/* The routing of global layer `layer` in the last forward of slot: per token (sequence-first)
 * its k chosen experts in ascending order and their probabilities, a dropped copy as expert -1
 * and probability 0 (host arrays [T, k]).  Errors: USAGE (not an MoE layer of the chunk). */
mgt_status mgt_model_moe_routing(mgt_model *m, int slot, int layer, int32_t *experts, float *probs);

/* Expert parallelism's traffic since the model was made (0 with ep 1): out[0] routed copies
 * this rank's tokens sent to experts on other EP ranks (from the routing), out[1] rows it
 * received from other ranks (from the exchanged counts), out[2] forward dispatches.  Each
 * dispatch moves, to other ranks, out[0] rows of h + 1 floats (hidden state, probability) and
 * out[1] rows of h back; each backward as many the other way plus h floats a row (the output
 * gradient out, the input gradient and probability gradient back); the counts' all-gather sends
 * (ep - 1) x E int64. */
void mgt_model_moe_dispatch_counts(const mgt_model *m, double out[3]);

/* Model FLOPs of one global batch of gbs sequences, Megatron's formula
 * (megatron/training/training.py num_floating_point_operations):
 * causal-halved attention, fwd + bwd = 3x forward, GEMMs only; a hybrid model's by its
 * hybrid_flops, symbol by symbol (a Mamba layer's scan counted as 7 B s d_in N). */
double mgt_model_flops(const mgt_model_config *c, int64_t gbs);


/* ---- inference with a key/value cache (lib/model/infer.c) ----
 * The training forward (lib/model/stack.c) without dropout, for generation: new tokens
 * are fed a few at a time (a prompt at once, then one token per step), each layer's keys and
 * values of earlier positions are kept in a cache instead of being recomputed (Megatron-Core's
 * inference key/value memory, megatron/core/transformer/attention.py
 * _adjust_key_value_for_inference; megatron/core/inference/).  Tokens are rows of [T, .]
 * activations in any order: each names its cache sequence and position, so one call can
 * prefill several prompts of different lengths or advance several sequences by one token. */

/* A single-stage model (TP = PP = 1) holding only its parameters (zeroed: load them into
 * mgt_model_params, or mgt_model_init_params) and the RoPE table: no gradients, no training
 * activations (mgt_model_forward and mgt_model_step refuse it; mgt_model_memory reports grads
 * 0).  c must be finalized for TP 1; ps->tp must be 1.  Errors: MGT_ERR_USAGE (tp > 1),
 * MGT_ERR_NOMEM, MGT_ERR_IO (upload).  Free with mgt_model_free. */
mgt_status mgt_model_create_infer(mgt_model **out, const mgt_model_config *c, mgt_backend *be,
				  const mgt_parallel *ps);

/* Keys and values of every layer for B sequences of up to S positions: two [B, ng, S, d] fp32
 * backend buffers a layer (2 L B S ng d floats), plus scratch activations grown to the largest
 * call.  Positions are filled by mgt_model_infer; a sequence is restarted by feeding position 0
 * again.  m must outlive the cache.  Errors: MGT_ERR_USAGE (B or S < 1, S beyond the learned
 * position table (max_position_embeddings), a model that is not a single TP 1 stage),
 * MGT_ERR_NOMEM. */
typedef struct mgt_kv_cache mgt_kv_cache;
mgt_status mgt_kv_cache_create(mgt_kv_cache **out, mgt_model *m, int B, int S);
void mgt_kv_cache_free(mgt_kv_cache *kv);
/* Bytes of backend memory the cache holds (keys, values and scratch). */
size_t mgt_kv_cache_bytes(const mgt_kv_cache *kv);

/* Feed T >= 1 new tokens (host arrays [T]): tokens[t] of cache sequence seq[t] at position
 * pos[t].  A sequence's tokens in one call come in increasing positions, and each position is
 * at most one past the last filled position of its sequence (0 after creation; earlier
 * positions are overwritten, which restarts the sequence there).  Attention is causal: token t
 * sees positions 0..pos[t] of its sequence (the new ones of this call included).  Then the
 * logits of the tokens rows[0..nrows) (indices into [0, T)) go to logits (host, row-major
 * [nrows, padded_vocab_size], float32; NULL with nrows 0 computes none): the final norm and
 * output layer run on those rows only.  fp32; the CPU backend's results do not depend on how
 * tokens are grouped into calls beyond GEMM summation order.  Errors: MGT_ERR_USAGE (a model
 * or cache mismatch, T or a row out of range), MGT_ERR_INPUT (a token outside the padded
 * vocabulary, a sequence or position out of range or out of order, naming the token index),
 * MGT_ERR_NOMEM, MGT_ERR_IO (backend). */
mgt_status mgt_model_infer(mgt_model *m, mgt_kv_cache *kv, int T, const int32_t *tokens, const int32_t *seq,
			   const int32_t *pos, int nrows, const int32_t *rows, float *logits);

/* T5 (family "t5"): encode Se positions of the cache's B sequences, tokens and mask host arrays
 * [Se B] position-major (token t = i B + j is position i of sequence j; mask 1 = a real token,
 * 0 = padding, which no query attends to): the encoder's layers and final norm, then every
 * decoder layer's cross-attention keys and values (linear_kv of the encoder output), kept in the
 * cache until the next encoding; the decoder's positions restart at 0.  Then mgt_model_infer
 * runs the decoder (causal self-attention against the cache, cross-attention against the
 * encoding): its T tokens must be rows of all B sequences, token t of sequence t % B.
 * Errors: MGT_ERR_USAGE (not T5, Se out of range, a feed not in rows, no encoding),
 * MGT_ERR_INPUT (a token outside the padded vocabulary), MGT_ERR_NOMEM, MGT_ERR_IO. */
mgt_status mgt_model_encode(mgt_model *m, mgt_kv_cache *kv, int Se, const int32_t *tokens, const uint8_t *mask);

/* ---- Hugging Face names and layouts (lib/model/hf.c; mgt-hf(5)) ---- */

/* The Hugging Face model families mgt-ckpt-convert reads and writes (config.json "model_type");
 * mixtral, qwen2_moe and qwen3_moe are Mixture-of-Experts models; megatron-bert is Megatron-Core's
 * pre-LN BERT (family "bert"): MegatronBertForPreTraining with the binary head,
 * MegatronBertForMaskedLM without it (transformers'
 * models/megatron_bert/modeling_megatron_bert.py); nemotron_h (NemotronHForCausalLM) and mamba2
 * (Mamba2ForCausalLM, all-Mamba models of one group) hold mgt's hybrid models (family "hybrid";
 * transformers' models/nemotron_h/, models/mamba2/). */
typedef enum { MGT_HF_GPT2, MGT_HF_LLAMA, MGT_HF_MISTRAL, MGT_HF_QWEN2, MGT_HF_QWEN3, MGT_HF_MIXTRAL, MGT_HF_QWEN2_MOE,
	       MGT_HF_QWEN3_MOE, MGT_HF_MEGATRON_BERT, MGT_HF_NEMOTRON_H, MGT_HF_MAMBA2, MGT_HF_NFAMILIES } mgt_hf_family;
/* What a Hugging Face family is, as data (lib/model/families.c: one row per family; a family
 * that differs from an existing one only in these fields is one new row):
 *   model_type, architecture  config.json's "model_type" and "architectures"[0] (megatron-bert:
 *                "MegatronBertForPreTraining"; without the binary head MGT_HF_BERT_MLM_CLASS)
 *   names        the naming scheme of tensors and config keys: transformers' GPT2 (h.N.*,
 *                Conv1D weights [in, out]), Llama (model.layers.N.*) or MegatronBert
 *                (bert.encoder.layer.N.*) or NemotronH / Mamba2 (backbone.layers.N.norm and
 *                .mixer.*, one mixer per layer: Mamba-2, attention or MLP)
 *   moe          no experts; Mixtral's block_sparse_moe (every layer, num_local_experts,
 *                softmax over the top-k logits); Qwen-MoE's mlp.experts (num_experts,
 *                moe_intermediate_size, decoder_sparse_step / mlp_only_layers, norm_topk_prob)
 *   shared_expert  Qwen2-MoE's sigmoid-gated shared expert (mlp.shared_expert*)
 *   qk_norm      Qwen3's q_norm / k_norm
 *   qkv_bias     q/k/v biases: none (attention_bias true refused), always (Qwen2), or as
 *                config.json's qkv_bias says (Qwen2-MoE, default true)
 *   gguf_arch    llama.cpp's general.architecture; gguf_rope_permute: that architecture rotates
 *                adjacent pairs, so q_proj and k_proj rows are permuted (llama.cpp's "llama")
 * Sources: transformers' configuration_*.py and modeling_*.py of each family; llama.cpp's
 * convert_hf_to_gguf.py. */
typedef enum { MGT_HF_NAMES_GPT2, MGT_HF_NAMES_LLAMA, MGT_HF_NAMES_BERT, MGT_HF_NAMES_BACKBONE } mgt_hf_names;
typedef enum { MGT_HF_MOE_NONE, MGT_HF_MOE_MIXTRAL, MGT_HF_MOE_QWEN } mgt_hf_moe;
typedef enum { MGT_HF_QKV_BIAS_NONE, MGT_HF_QKV_BIAS_ALWAYS, MGT_HF_QKV_BIAS_KEY } mgt_hf_qkv_bias;
typedef struct mgt_hf_spec {
	const char *model_type, *architecture;
	mgt_hf_names names;
	mgt_hf_moe moe;
	bool shared_expert, qk_norm;
	mgt_hf_qkv_bias qkv_bias;
	const char *gguf_arch;
	bool gguf_rope_permute;
} mgt_hf_spec;
/* Family f's row (static storage; f < MGT_HF_NFAMILIES). */
const mgt_hf_spec *mgt_hf_spec_of(mgt_hf_family f);
const char *mgt_hf_model_type(mgt_hf_family f);
const char *mgt_hf_architecture(mgt_hf_family f);
/* The family of a config.json "model_type".  Errors: MGT_ERR_USAGE naming it. */
mgt_status mgt_hf_family_parse(const char *model_type, mgt_hf_family *f);
#define MGT_HF_BERT_MLM_CLASS "MegatronBertForMaskedLM"

/* How a table row is made from Hugging Face tensors (sources 0..n-1, row-major fp32):
 *   COPY       same shape (norms, biases, o_proj/down_proj, position embeddings);
 *   PAD_ROWS   [vocab_size, h] -> [padded_vocab_size, h], padded rows zero (Megatron's vocab
 *              padding; the way out keeps rows [0, vocab_size));
 *   TRANSPOSE  GPT-2 Conv1D [in, out] -> [out, in];
 *   QKV        q [nq d, .], k [ng d, .], v [ng d, .] -> linear_qkv rows interleaved per query
 *              group: for g: q heads g nq/ng .. (g+1) nq/ng - 1, k_g, v_g
 *              (tools/checkpoint/loader_llama_mistral.py);
 *   QKV_GPT2   GPT-2 c_attn [h, 3h] (bias [3h]), columns [Q | K | V] -> per head [q_n; k_n; v_n];
 *   GLU        gate_proj, up_proj [ffn, h] -> linear_fc1 [gate; up] (7.3).
 * Mamba-2 rows are COPY: HF's in_proj has Megatron's [z, x, B, C, dt] rows and its conv1d.weight
 * is Megatron's [CD, 1, 4] (ndim 3; mgt's row drops the unit axis, the same elements). */
typedef enum { MGT_HF_COPY, MGT_HF_PAD_ROWS, MGT_HF_TRANSPOSE, MGT_HF_QKV, MGT_HF_QKV_GPT2, MGT_HF_GLU } mgt_hf_op;
typedef struct {
	mgt_hf_op op;
	int n;                  /* sources: 1 to 3 */
	char name[3][128];      /* Hugging Face tensor names */
	int ndim[3];            /* 1 to 3 */
	int64_t shape[3][3];    /* their shapes (PyTorch order) */
} mgt_hf_map;

/* The Hugging Face tensors of row t of a table built for config c (global shapes: TP 1).
 * gpt2_prefix: "transformer." or "" (GPT-2 files exist with both); Llama-style names are
 * model.layers.N.* and lm_head.weight; NemotronH's and Mamba2's backbone.layers.N.norm / .mixer.*,
 * backbone.embeddings, backbone.norm_f and lm_head (conv1d.weight 3-D).  An expert row (t->num_experts > 0) maps to its expert's
 * tensors (Mixtral block_sparse_moe.experts.E.w1/w3/w2, Qwen-MoE mlp.experts.E.*_proj).
 * Errors: MGT_ERR_USAGE when the row has no counterpart in the family (naming the tensor). */
mgt_status mgt_hf_map_tensor(const mgt_model_config *c, mgt_hf_family f, const char *gpt2_prefix,
			     const mgt_tensor *t, mgt_hf_map *m);
/* Assemble row t ([t->shape], fp32, caller's buffer) from the sources src[0..m->n) shaped as
 * m->shape, and the inverse (dst[k] caller's buffers of m->shape[k]).  Pure permutations: the
 * values are copied bit for bit. */
void mgt_hf_to_mgt(const mgt_model_config *c, const mgt_hf_map *m, const mgt_tensor *t, const float *const src[3],
		   float *dst);
void mgt_hf_from_mgt(const mgt_model_config *c, const mgt_hf_map *m, const mgt_tensor *t, const float *src,
		     float *const dst[3]);


/* GGUF (llama.cpp) names: the GGUF tensor of Hugging Face tensor hf of family f (blk.N.attn_q.weight,
 * token_embd.weight, ...) into out[n], and what its data needs on the way: GPT-2's Conv1D weights
 * transposed to [out, in]; for llama.cpp's "llama" architecture (Llama, Mistral), whose RoPE
 * rotates adjacent pairs, q_proj and k_proj rows permuted per head from the rotate_half halves
 * (mgt_gguf_permute; llama.cpp convert_hf_to_gguf.py LlamaModel.permute); the Mamba-2 mixer's as
 * llama.cpp's conversion/mamba.py Mamba2Model.modify_tensors stores them: conv1d.weight squeezed
 * [CD, 1, 4] -> [CD, 4] (SQUEEZE), A_log as A = -exp(A_log) [NH, 1] (NEG_EXP), D [NH, 1]
 * (COLUMN), norm.weight [G, DI/G] (GROUPS; G the caller's); NemotronH's MoE as llama.cpp's
 * nemotron_h_moe (conversion/nemotron.py; constants.py TENSOR_NAMES): gate.weight ffn_gate_inp,
 * gate.e_score_correction_bias exp_probs_b.bias, shared_experts.{up,down}_proj ffn_{up,down}_shexp,
 * fc1_latent_proj ffn_latent_down and fc2_latent_proj ffn_latent_up (moe_latent_size),
 * and experts.E.{up,down}_proj one stacked tensor ffn_{up,down}_exps.weight [E, rows, cols] for all
 * E experts (EXPERTS: the caller stacks them).  Errors: MGT_ERR_USAGE for a name without a GGUF
 * counterpart. */
typedef enum { MGT_GGUF_AS_IS, MGT_GGUF_TRANSPOSE, MGT_GGUF_PERMUTE_Q, MGT_GGUF_PERMUTE_K, MGT_GGUF_EXPERTS,
	       MGT_GGUF_SQUEEZE, MGT_GGUF_NEG_EXP, MGT_GGUF_COLUMN, MGT_GGUF_GROUPS } mgt_gguf_fix;
mgt_status mgt_hf_gguf_name(mgt_hf_family f, const char *gpt2_prefix, const char *hf, char *out, size_t n,
			    mgt_gguf_fix *fix);
/* src [rows, cols] (cols 1 for a bias), rows = heads x head_dim: within each head, row
 * s * head_dim/2 + j (s = 0 first half, 1 second half) goes to row 2 j + s.  dst: caller's buffer. */
void mgt_gguf_permute(const float *src, float *dst, int64_t rows, int64_t cols, int64_t heads);

#endif
