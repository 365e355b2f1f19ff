/* lib/args/args.c: the one table of arguments (flags, JSON keys, defaults, help), setting them
 * from text, JSON and argv; the derived values and cross-checks are in finalize.c. */
#include "args_impl.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Kinds: I int64, F double, S owned string (NULL = None), A char array (model enums),
 * B bool set true by the flag, N bool set false by the flag (JSON key = dest, default true),
 * L --moe-layer-freq (an int64 and, for a list, model.moe_layer_pattern), H a heading in
 * --help.  Range (I and F): "[lo,hi]" with ( or ) for an open end and an empty bound for none;
 * every F must also be finite (NaN and inf are refused).  An I or F whose default is "None" is
 * Megatron's Optional: 0 stands for None (JSON null, "None" in text), and a value given must be
 * in the range. */
#define MGT_ARGS(X) \
	X(H, model_shape, _, "", "", "", "model shape") \
	X(S, model, model_name, "model", "", "", "preset name (share/mgt/models) or JSON file") \
	X(A, family, model.family, "model-family", "gpt", "", "gpt (Megatron's pretrain_gpt.py), bert (pretrain_bert.py), t5 (pretrain_t5.py) or hybrid (pretrain_hybrid.py)") \
	X(A, hybrid_layer_pattern, model.hybrid_layer_pattern, "hybrid-layer-pattern", "", "", "hybrid models: one symbol per layer, M Mamba-2, * attention, - MLP, E MoE; | ends a pipeline stage (sets --num-layers)") \
	X(F, hybrid_attention_ratio, hybrid_attention_ratio, "hybrid-attention-ratio", "0.0", "[0,1]", "hybrid models without a pattern: the share of --num-layers that are attention layers") \
	X(F, hybrid_mlp_ratio, hybrid_mlp_ratio, "hybrid-mlp-ratio", "0.0", "[0,1]", "hybrid models without a pattern: the share of --num-layers that are MLP layers") \
	X(I, mamba_state_dim, model.mamba_state_dim, "mamba-state-dim", "128", "[1,)", "Mamba-2 state size N") \
	X(I, mamba_head_dim, model.mamba_head_dim, "mamba-head-dim", "64", "[1,)", "Mamba-2 head dimension P") \
	X(I, mamba_num_groups, model.mamba_num_groups, "mamba-num-groups", "8", "[1,)", "Mamba-2 groups G of B and C") \
	X(I, mamba_num_heads, model.mamba_num_heads, "mamba-num-heads", "None", "[1,)", "Mamba-2 heads (default 2h / --mamba-head-dim)") \
	X(I, num_layers, model.num_layers, "num-layers", "0", "[0,)", "transformer layers") \
	X(I, hidden_size, model.hidden_size, "hidden-size", "0", "[0,)", "hidden size h") \
	X(I, ffn_hidden_size, model.ffn_hidden_size, "ffn-hidden-size", "0", "[0,)", "MLP size (default 4h; SwiGLU int(8h/3/64)*64)") \
	X(I, num_attention_heads, model.num_attention_heads, "num-attention-heads", "0", "[0,)", "attention heads") \
	X(I, kv_channels, model.kv_channels, "kv-channels", "0", "[0,)", "head dimension (default h/heads)") \
	X(B, group_query_attention, model.group_query_attention, "group-query-attention", "false", "", "use --num-query-groups") \
	X(I, num_query_groups, model.num_query_groups, "num-query-groups", "1", "[1,)", "key/value heads with GQA") \
	X(I, seq_length, model.seq_length, "seq-length", "0", "[0,)", "sequence length") \
	X(I, encoder_num_layers, encoder_num_layers, "encoder-num-layers", "None", "[1,)", "num_layers when --num-layers is not given (T5: the encoder's and the decoder's layers)") \
	X(I, decoder_num_layers, decoder_num_layers, "decoder-num-layers", "None", "[1,)", "T5 only: accepted and ignored, as Megatron ignores it (T5's decoder is as deep as its encoder)") \
	X(I, encoder_seq_length, encoder_seq_length, "encoder-seq-length", "None", "[1,)", "seq_length when --seq-length is not given (T5: the encoder's length)") \
	X(I, decoder_seq_length, model.decoder_seq_length, "decoder-seq-length", "None", "[1,)", "T5 only: the decoder's sequence length") \
	X(I, max_position_embeddings, model.max_position_embeddings, "max-position-embeddings", "0", "[0,)", "position table size (>= seq length)") \
	X(A, position_embedding_type, model.position_embedding_type, "position-embedding-type", "learned_absolute", "", "learned_absolute, rope or none (T5: relative too)") \
	X(I, relative_attention_num_buckets, model.relative_attention_num_buckets, "relative-attention-num-buckets", "32", "[2,)", "T5 relative positions: buckets") \
	X(I, relative_attention_max_distance, model.relative_attention_max_distance, "relative-attention-max-distance", "128", "[1,)", "T5 relative positions: largest distance told apart") \
	X(F, rotary_base, model.rotary_base, "rotary-base", "10000", "(0,)", "RoPE base") \
	X(F, rotary_percent, model.rotary_percent, "rotary-percent", "1.0", "(0,1]", "fraction of head channels rotated") \
	X(B, use_rope_scaling, model.use_rope_scaling, "use-rope-scaling", "false", "", "Llama 3.1 RoPE frequency scaling") \
	X(F, rope_scaling_factor, model.rope_scaling_factor, "rope-scaling-factor", "8.0", "(0,)", "RoPE scaling factor") \
	X(F, rope_scaling_low_freq_factor, model.rope_scaling_low_freq_factor, "rope-scaling-low-freq-factor", "1.0", "(0,)", "RoPE scaling low-frequency factor") \
	X(F, rope_scaling_high_freq_factor, model.rope_scaling_high_freq_factor, "rope-scaling-high-freq-factor", "4.0", "(0,)", "RoPE scaling high-frequency factor") \
	X(I, rope_scaling_original_max_position_embeddings, model.rope_scaling_original_max_position_embeddings, "rope-scaling-original-max-position-embeddings", "8192", "[1,)", "RoPE scaling: the original context length") \
	X(A, normalization, model.normalization, "normalization", "LayerNorm", "", "LayerNorm or RMSNorm") \
	X(F, norm_epsilon, model.norm_epsilon, "norm-epsilon", "1e-5", "(0,)", "norm epsilon") \
	X(B, qk_layernorm, model.qk_layernorm, "qk-layernorm", "false", "", "normalize query and key heads (Qwen3)") \
	X(B, apply_layernorm_1p, model.apply_layernorm_1p, "apply-layernorm-1p", "false", "", "zero-centred norm weights: stored w, applied 1 + w (initialized 0)") \
	X(B, swiglu, model.swiglu, "swiglu", "false", "", "SwiGLU MLP") \
	X(B, openai_gelu, model.openai_gelu, "openai-gelu", "false", "", "tanh-approximation GELU (GPT-2's gelu_new)") \
	X(B, squared_relu, model.squared_relu, "squared-relu", "false", "", "the MLP's activation relu(x)^2 (Nemotron-H's relu2)") \
	X(B, no_bias_gelu_fusion, model.no_bias_gelu_fusion, "no-bias-gelu-fusion", "false", "", "BERT: erf GELU in the MLP (default with biases: the fused bias-GELU's tanh approximation)") \
	X(N, bert_binary_head, model.bert_binary_head, "bert-no-binary-head", "true", "", "BERT only: no pooler, binary head and sentence-order loss") \
	X(N, add_bias_linear, model.add_bias_linear, "disable-bias-linear", "true", "", "no biases in linear layers") \
	X(B, add_qkv_bias, model.add_qkv_bias, "add-qkv-bias", "false", "", "QKV bias even without linear biases (Qwen2)") \
	X(B, untie_embeddings_and_output_weights, model.untie_embeddings_and_output_weights, "untie-embeddings-and-output-weights", "false", "", "separate output layer") \
	X(I, make_vocab_size_divisible_by, model.make_vocab_size_divisible_by, "make-vocab-size-divisible-by", "128", "[1,)", "vocabulary padding multiple") \
	X(F, hidden_dropout, model.hidden_dropout, "hidden-dropout", "0.1", "[0,1)", "dropout on hidden states") \
	X(F, attention_dropout, model.attention_dropout, "attention-dropout", "0.1", "[0,1)", "dropout on attention probabilities") \
	X(F, init_method_std, model.init_method_std, "init-method-std", "0.02", "[0,)", "N(0, std) initialization") \
	X(H, tokenizer, _, "", "", "", "tokenizer (as mgt-preprocess)") \
	X(S, tokenizer_type, tokenizer_type, "tokenizer-type", "", "", "GPT2BPETokenizer, HuggingFaceTokenizer, SFTTokenizer, SentencePieceTokenizer, Llama2Tokenizer, BertWordPieceLowerCase, BertWordPieceCase, TikTokenizer, NullTokenizer") \
	X(S, vocab_file, vocab_file, "vocab-file", "", "", "vocabulary file") \
	X(S, merge_file, merge_file, "merge-file", "", "", "BPE merges file") \
	X(S, tokenizer_model, tokenizer_model, "tokenizer-model", "", "", "tokenizer.json (or its directory), SentencePiece or tiktoken model file") \
	X(S, tiktoken_pattern, tiktoken_pattern, "tiktoken-pattern", "", "", "TikTokenizer pattern") \
	X(I, tiktoken_num_special_tokens, tiktoken_num_special_tokens, "tiktoken-num-special-tokens", "1000", "[0,)", "TikTokenizer special tokens") \
	X(I, vocab_size, vocab_size, "vocab-size", "0", "[0,)", "NullTokenizer / mock-data vocabulary") \
	X(I, null_tokenizer_eod_id, null_tokenizer_eod_id, "null-tokenizer-eod-id", "-1", "[-1,)", "NullTokenizer eod (-1: vocab size - 1)") \
	X(H, data, _, "", "", "", "data") \
	X(S, data_path, data_path, "data-path", "", "", "[WEIGHT] PREFIX ... (Megatron blend)") \
	X(S, split, split, "split", "", "", "train,valid,test weights (969,30,1 with --data-path when not given, as Megatron)") \
	X(S, data_cache_path, data_cache_path, "data-cache-path", "", "", "where index caches go") \
	X(B, mock_data, mock_data, "mock-data", "false", "", "synthetic data (benchmarks)") \
	X(B, eod_mask_loss, eod_mask_loss, "eod-mask-loss", "false", "", "no loss where the input token is eod (its label: the next document's first token)") \
	X(B, reset_position_ids, reset_position_ids, "reset-position-ids", "false", "", "restart positions after each eod") \
	X(B, sft, sft, "sft", "false", "", "supervised fine-tuning: Megatron's SFTDataset over the JSONL --data-path (packed conversations, loss on the answers; GPT)") \
	X(S, sft_tokenizer_prompt_format, sft_tokenizer_prompt_format, "sft-tokenizer-prompt-format", "nemotron-h-aligned", "", "--sft: nemotron-h-aligned, nemotron-nano-v2, identity or default (the tokenizer's chat_template)") \
	X(B, reset_attention_mask, reset_attention_mask, "reset-attention-mask", "false", "", "GPT: no attention across an eod (each document attends within itself)") \
	X(F, mask_prob, mask_prob, "mask-prob", "0.15", "(0,1)", "BERT and T5: probability of masking a token") \
	X(F, short_seq_prob, short_seq_prob, "short-seq-prob", "0.1", "[0,1]", "BERT and T5: probability of a shorter target length") \
	X(I, vocab_extra_ids, vocab_extra_ids, "vocab-extra-ids", "0", "[0,)", "T5 only: accepted without effect, as at Megatron HEAD (BertWordPieceCase brings T5's 100 sentinels)") \
	X(H, batch, _, "", "", "", "batch and run length") \
	X(I, micro_batch_size, micro_batch_size, "micro-batch-size", "0", "[0,)", "sequences per micro-batch") \
	X(I, global_batch_size, global_batch_size, "global-batch-size", "0", "[0,)", "sequences per iteration (default micro x data-parallel)") \
	X(I, train_iters, train_iters, "train-iters", "0", "[0,)", "iterations to train") \
	X(I, train_samples, train_samples, "train-samples", "0", "[0,)", "or samples to train") \
	X(I, exit_interval, exit_interval, "exit-interval", "0", "[0,)", "exit (after saving) at a multiple of this iteration") \
	X(H, optimizer, _, "", "", "", "optimizer and learning rate (AdamW)") \
	X(F, lr, lr, "lr", "0", "[0,)", "peak learning rate") \
	X(F, min_lr, min_lr, "min-lr", "0", "[0,)", "final learning rate") \
	X(F, lr_warmup_init, lr_warmup_init, "lr-warmup-init", "0", "[0,)", "learning rate at warmup start") \
	X(F, decoupled_lr, decoupled_lr, "decoupled-lr", "None", "(0,)", "peak learning rate of the word embedding and output layer (None: --lr)") \
	X(F, decoupled_min_lr, decoupled_min_lr, "decoupled-min-lr", "None", "(0,)", "their final learning rate (None: --min-lr)") \
	X(F, lr_warmup_fraction, lr_warmup_fraction, "lr-warmup-fraction", "-1", "[-1,1]", "warmup as a fraction of decay (-1: unset)") \
	X(I, lr_warmup_iters, lr_warmup_iters, "lr-warmup-iters", "0", "[0,)", "warmup iterations") \
	X(I, lr_warmup_samples, lr_warmup_samples, "lr-warmup-samples", "0", "[0,)", "warmup samples") \
	X(S, lr_decay_style, lr_decay_style, "lr-decay-style", "linear", "", "constant linear cosine inverse-square-root WSD") \
	X(I, lr_decay_iters, lr_decay_iters, "lr-decay-iters", "0", "[0,)", "decay iterations (default train iters)") \
	X(I, lr_decay_samples, lr_decay_samples, "lr-decay-samples", "0", "[0,)", "decay samples") \
	X(S, lr_wsd_decay_style, lr_wsd_decay_style, "lr-wsd-decay-style", "exponential", "", "WSD anneal: exponential linear cosine minus_sqrt") \
	X(I, lr_wsd_decay_iters, lr_wsd_decay_iters, "lr-wsd-decay-iters", "0", "[0,)", "WSD anneal iterations") \
	X(F, weight_decay, weight_decay, "weight-decay", "0.01", "[0,)", "decoupled weight decay") \
	X(B, apply_wd_to_qk_layernorm, model.apply_wd_to_qk_layernorm, "apply-wd-to-qk-layernorm", "false", "", "weight decay on the query/key norms too") \
	X(F, adam_beta1, adam_beta1, "adam-beta1", "0.9", "[0,1)", "Adam beta1") \
	X(F, adam_beta2, adam_beta2, "adam-beta2", "0.999", "[0,1)", "Adam beta2") \
	X(F, adam_eps, adam_eps, "adam-eps", "1e-8", "(0,)", "Adam epsilon") \
	X(F, clip_grad, clip_grad, "clip-grad", "1.0", "[0,)", "clip gradients to this global L2 norm (0: off)") \
	X(B, calculate_per_token_loss, calculate_per_token_loss, "calculate-per-token-loss", "false", "", "gradients of the global batch's mean over tokens (default: the mean of micro-batch means)") \
	X(H, eval, _, "", "", "", "evaluation, logging, checkpoints") \
	X(I, eval_interval, eval_interval, "eval-interval", "0", "[0,)", "validate every N iterations (0: never)") \
	X(I, eval_iters, eval_iters, "eval-iters", "100", "[0,)", "iterations per validation") \
	X(I, log_interval, log_interval, "log-interval", "100", "[1,)", "iterations between log lines") \
	X(B, log_throughput, log_throughput, "log-throughput", "false", "", "TFLOP/s in the log line") \
	X(B, log_params_norm, log_params_norm, "log-params-norm", "false", "", "L2 norm of the parameters in the log line") \
	X(S, tensorboard_dir, tensorboard_dir, "tensorboard-dir", "", "", "write TensorBoard event files to this directory (the last rank)") \
	X(I, tensorboard_log_interval, tensorboard_log_interval, "tensorboard-log-interval", "1", "[1,)", "iterations between TensorBoard scalars") \
	X(I, tensorboard_queue_size, tensorboard_queue_size, "tensorboard-queue-size", "1000", "[1,)", "TensorBoard records buffered before they are written") \
	X(B, log_timers_to_tensorboard, log_timers_to_tensorboard, "log-timers-to-tensorboard", "false", "", "iteration time and throughput to TensorBoard") \
	X(N, log_loss_scale_to_tensorboard, log_loss_scale_to_tensorboard, "no-log-loss-scale-to-tensorboard", "true", "", "no loss scale in TensorBoard") \
	X(N, log_learning_rate_to_tensorboard, log_learning_rate_to_tensorboard, "no-log-learnig-rate-to-tensorboard", "true", "", "no learning rate in TensorBoard (Megatron's spelling)") \
	X(B, log_validation_ppl_to_tensorboard, log_validation_ppl_to_tensorboard, "log-validation-ppl-to-tensorboard", "false", "", "validation perplexity to TensorBoard") \
	X(B, log_memory_to_tensorboard, log_memory_to_tensorboard, "log-memory-to-tensorboard", "false", "", "memory use to TensorBoard") \
	X(B, log_world_size_to_tensorboard, log_world_size_to_tensorboard, "log-world-size-to-tensorboard", "false", "", "world size to TensorBoard") \
	X(I, seed, seed, "seed", "1234", "[0,)", "random seed (data order, init, dropout)") \
	X(S, save, save, "save", "", "", "checkpoint directory to write") \
	X(S, load, load, "load", "", "", "checkpoint directory to resume from (the one holding the tracker; an iter_N directory is refused)") \
	X(S, pretrained_checkpoint, pretrained_checkpoint, "pretrained-checkpoint", "", "", "model to fine-tune from when --load has no checkpoint: mgt checkpoint or Hugging Face directory (weights only)") \
	X(I, save_interval, save_interval, "save-interval", "0", "[0,)", "save every N iterations") \
	X(B, no_save_optim, no_save_optim, "no-save-optim", "false", "", "save weights only") \
	X(B, no_load_optim, no_load_optim, "no-load-optim", "false", "", "do not load optimizer state") \
	X(B, overwrite_save, overwrite_save, "overwrite-save", "false", "", "start a new run in a --save directory holding another run's checkpoints, replacing them as it saves") \
	X(B, exit_on_missing_checkpoint, exit_on_missing_checkpoint, "exit-on-missing-checkpoint", "false", "", "with --load: exit (status 6) when it holds no checkpoint, instead of initializing at random") \
	X(B, finetune, finetune, "finetune", "false", "", "load weights only, start at iteration 0") \
	X(B, use_checkpoint_args, use_checkpoint_args, "use-checkpoint-args", "false", "", "model shape and tokenizer from the --load checkpoint") \
	X(I, ckpt_step, ckpt_step, "ckpt-step", "0", "[0,)", "load this iteration of --load instead of the tracker's (0: the tracker's)") \
	X(B, no_load_rng, no_load_rng, "no-load-rng", "false", "", "dropout keyed by --seed, not the checkpoint's seed") \
	X(B, no_save_rng, no_save_rng, "no-save-rng", "false", "", "do not record the seed in the checkpoint") \
	X(B, async_save, async_save, "async-save", "false", "", "write checkpoints on a thread while training goes on") \
	X(S, ckpt_format, ckpt_format, "ckpt-format", "hdf5", "", "checkpoint format: hdf5 (mgt-ckpt(5)) only") \
	X(B, exit_signal_handler, exit_signal_handler, "exit-signal-handler", "false", "", "on --exit-signal, finish the iteration, save and exit") \
	X(S, exit_signal, exit_signal, "exit-signal", "SIGTERM", "", "the signal --exit-signal-handler waits for: SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2") \
	X(F, exit_duration_in_mins, exit_duration_in_mins, "exit-duration-in-mins", "0", "[0,)", "exit (after saving) once the run has lasted this many minutes (fractions too; 0: never)") \
	X(H, parallel, _, "", "", "", "parallelism and machine") \
	X(I, tensor_model_parallel_size, tensor_model_parallel_size, "tensor-model-parallel-size", "1", "[1,)", "tensor parallel size") \
	X(I, pipeline_model_parallel_size, pipeline_model_parallel_size, "pipeline-model-parallel-size", "1", "[1,)", "pipeline parallel size") \
	X(I, num_layers_per_virtual_pipeline_stage, num_layers_per_virtual_pipeline_stage, "num-layers-per-virtual-pipeline-stage", "0", "[0,)", "layers per virtual stage (interleaved 1F1B)") \
	X(I, virtual_pipeline_model_parallel_size, virtual_pipeline_model_parallel_size, "virtual-pipeline-model-parallel-size", "0", "[0,)", "or virtual stages per pipeline rank") \
	X(I, num_virtual_stages_per_pipeline_rank, num_virtual_stages_per_pipeline_rank, "num-virtual-stages-per-pipeline-rank", "0", "[0,)", "the same (Megatron's newer name)") \
	X(I, decoder_first_pipeline_num_layers, model.decoder_first_pipeline_num_layers, "decoder-first-pipeline-num-layers", "0", "[0,)", "layers of the first pipeline stage (uneven; 0: even)") \
	X(I, decoder_last_pipeline_num_layers, model.decoder_last_pipeline_num_layers, "decoder-last-pipeline-num-layers", "0", "[0,)", "layers of the last pipeline stage (uneven; 0: even)") \
	X(I, microbatch_group_size_per_vp_stage, microbatch_group_size_per_vp_stage, "microbatch-group-size-per-virtual-pipeline-stage", "0", "[0,)", "interleaving group (0: pipeline size)") \
	X(B, sequence_parallel, sequence_parallel, "sequence-parallel", "false", "", "split norms and dropout along the sequence (TP > 1)") \
	X(I, context_parallel_size, context_parallel_size, "context-parallel-size", "1", "[1,)", "context parallel size: each sequence cut into 2 x CP chunks, two per rank") \
	X(S, cp_comm_type, cp_comm_type, "cp-comm-type", "p2p", "", "context-parallel attention: p2p (ring), allgather or a2a (heads all-to-all)") \
	X(B, use_distributed_optimizer, use_distributed_optimizer, "use-distributed-optimizer", "false", "", "shard optimizer state over data-parallel ranks") \
	X(I, num_distributed_optimizer_instances, num_distributed_optimizer_instances, "num-distributed-optimizer-instances", "1", "[1,)", "hybrid sharding: the data-parallel ranks split into this many distributed-optimizer instances, each sharding the optimizer state (with FSDP also gradients and parameters) over its own ranks; gradients reduce-scattered in an instance, then all-reduced across them") \
	X(I, ddp_bucket_size, ddp_bucket_size, "ddp-bucket-size", "0", "[0,)", "gradient bucket elements (0: one bucket, or max(4e7, 1e6 x DP) with --overlap-grad-reduce)") \
	X(B, overlap_grad_reduce, overlap_grad_reduce, "overlap-grad-reduce", "false", "", "reduce each gradient bucket during the last backward as soon as it is complete") \
	X(B, use_megatron_fsdp, use_megatron_fsdp, "use-megatron-fsdp", "false", "", "fully sharded data parallelism (Megatron-FSDP), sharding by --data-parallel-sharding-strategy") \
	X(S, data_parallel_sharding_strategy, data_parallel_sharding_strategy, "data-parallel-sharding-strategy", "optim_grads_params", "", "with FSDP: no_shard, optim (optimizer state), optim_grads (and gradients) or optim_grads_params (and parameters, gathered per layer)") \
	X(S, megatron_fsdp_grad_comm_dtype, megatron_fsdp_grad_comm_dtype, "megatron-fsdp-grad-comm-dtype", "auto", "", "with --use-megatron-fsdp: the type the gradients are reduced in, fp32, bf16, fp16 or auto (the main gradients': fp32)") \
	X(B, use_torch_fsdp2, use_torch_fsdp2, "use-torch-fsdp2", "false", "", "PyTorch FSDP2's sharding: run as --use-megatron-fsdp with optim_grads_params") \
	X(B, torch_fsdp2_no_reshard_after_forward, torch_fsdp2_no_reshard_after_forward, "torch-fsdp2-no-reshard-after-forward", "false", "", "with --use-torch-fsdp2: parameters stay whole (optim_grads)") \
	X(H, moe, _, "", "", "", "mixture of experts") \
	X(I, num_experts, model.num_experts, "num-experts", "None", "[0,)", "experts of each MoE layer (None or 0: a dense model)") \
	X(L, moe_layer_freq, model.moe_layer_freq, "moe-layer-freq", "1", "[1,)", "MoE layer every N layers, or a 0/1 list of the layers such as ([0]*1+[1]*3)") \
	X(I, moe_ffn_hidden_size, model.moe_ffn_hidden_size, "moe-ffn-hidden-size", "None", "[1,)", "expert MLP size (None: --ffn-hidden-size)") \
	X(I, moe_router_topk, model.moe_router_topk, "moe-router-topk", "2", "[1,)", "experts per token k") \
	X(A, moe_router_score_function, model.moe_router_score_function, "moe-router-score-function", "softmax", "", "softmax or sigmoid") \
	X(B, moe_router_pre_softmax, model.moe_router_pre_softmax, "moe-router-pre-softmax", "false", "", "softmax over all experts before the top-k (softmax scores)") \
	X(F, moe_router_topk_scaling_factor, model.moe_router_topk_scaling_factor, "moe-router-topk-scaling-factor", "None", "(0,)", "multiplies the routing probabilities") \
	X(I, moe_router_num_groups, model.moe_router_num_groups, "moe-router-num-groups", "None", "[1,)", "expert groups for group-limited routing") \
	X(I, moe_router_group_topk, model.moe_router_group_topk, "moe-router-group-topk", "None", "[1,)", "groups chosen per token (group-limited routing)") \
	X(B, moe_router_enable_expert_bias, model.moe_router_enable_expert_bias, "moe-router-enable-expert-bias", "false", "", "aux-loss-free balancing: a per-expert bias on the choice (sigmoid)") \
	X(F, moe_router_bias_update_rate, model.moe_router_bias_update_rate, "moe-router-bias-update-rate", "1e-3", "[0,)", "expert bias step per global batch") \
	X(S, moe_router_dtype, moe_router_dtype, "moe-router-dtype", "", "", "fp32 or fp64: the gating GEMM in fp32 (unset: the model's dtype)") \
	X(A, moe_router_load_balancing_type, model.moe_router_load_balancing_type, "moe-router-load-balancing-type", "aux_loss", "", "aux_loss, seq_aux_loss or none") \
	X(F, moe_aux_loss_coeff, model.moe_aux_loss_coeff, "moe-aux-loss-coeff", "0.0", "[0,)", "load-balancing loss coefficient (1e-2 recommended)") \
	X(F, moe_z_loss_coeff, model.moe_z_loss_coeff, "moe-z-loss-coeff", "None", "[0,)", "router z-loss coefficient (1e-3 recommended)") \
	X(F, moe_input_jitter_eps, model.moe_input_jitter_eps, "moe-input-jitter-eps", "None", "[0,1)", "router input multiplied by Uniform(1-eps, 1+eps) noise") \
	X(F, moe_expert_capacity_factor, model.moe_expert_capacity_factor, "moe-expert-capacity-factor", "None", "(0,)", "tokens per expert at most factor x tokens x k / experts (None: dropless)") \
	X(A, moe_token_drop_policy, model.moe_token_drop_policy, "moe-token-drop-policy", "probs", "", "probs or position: which tokens over capacity are dropped") \
	X(B, moe_pad_expert_input_to_capacity, model.moe_pad_expert_input_to_capacity, "moe-pad-expert-input-to-capacity", "false", "", "pad each expert's tokens to its capacity") \
	X(I, moe_shared_expert_intermediate_size, model.moe_shared_expert_intermediate_size, "moe-shared-expert-intermediate-size", "None", "[1,)", "shared expert MLP size (None: no shared expert)") \
	X(B, moe_shared_expert_gate, model.moe_shared_expert_gate, "moe-shared-expert-gate", "false", "", "sigmoid gate on the shared expert's output (Qwen2-MoE)") \
	X(I, moe_latent_size, model.moe_latent_size, "moe-latent-size", "None", "[1,)", "latent width of the routed experts: tokens projected down before them and back up after (None: no projection)") \
	X(A, moe_token_dispatcher_type, moe_token_dispatcher_type, "moe-token-dispatcher-type", "allgather", "", "allgather or alltoall") \
	X(B, moe_per_layer_logging, moe_per_layer_logging, "moe-per-layer-logging", "false", "", "each MoE layer's losses in TensorBoard too") \
	X(I, expert_model_parallel_size, expert_model_parallel_size, "expert-model-parallel-size", "1", "[1,)", "expert parallel size EP") \
	X(I, expert_tensor_parallel_size, expert_tensor_parallel_size, "expert-tensor-parallel-size", "None", "[1,)", "expert tensor parallel size (None: TP, the only value accepted)") \
	X(H, recompute, _, "", "", "", "activation recomputation") \
	X(S, recompute_granularity, recompute_granularity, "recompute-granularity", "", "", "full (whole layers) or selective (core attention); unset: keep every activation") \
	X(S, recompute_method, recompute_method, "recompute-method", "", "", "with full: uniform (groups of --recompute-num-layers layers) or block (the first --recompute-num-layers layers of each stage)") \
	X(I, recompute_num_layers, recompute_num_layers, "recompute-num-layers", "0", "[0,)", "with full: layers per group (uniform) or per stage (block); 0: unset") \
	X(B, recompute_activations, recompute_activations, "recompute-activations", "false", "", "the same as --recompute-granularity selective") \
	X(H, precision, _, "", "", "", "mixed precision") \
	X(B, bf16, bf16, "bf16", "false", "", "bf16 GEMM operands; fp32 main parameters, gradients and reductions") \
	X(B, fp16, fp16, "fp16", "false", "", "fp16 GEMM operands with loss scaling; fp32 main parameters and gradients") \
	X(B, fp32_residual_connection, fp32_residual_connection, "fp32-residual-connection", "false", "", "keep the residual stream in fp32 under --bf16/--fp16 (default: the 16-bit type)") \
	X(B, grad_reduce_in_bf16, grad_reduce_in_bf16, "grad-reduce-in-bf16", "false", "", "accumulate and reduce gradients in bf16 (--bf16 only; default: fp32)") \
	X(S, fp8_format, fp8_format, "fp8-format", "", "", "e4m3 or hybrid: the decoder layers' linear layers in fp8 (hybrid: e5m2 gradients); unset: no fp8") \
	X(A, fp8_recipe, fp8_recipe, "fp8-recipe", "delayed", "", "delayed (amax history) or tensorwise (current scaling)") \
	X(I, fp8_margin, fp8_margin, "fp8-margin", "0", "", "scales divided by 2^margin") \
	X(I, fp8_amax_history_len, fp8_amax_history_len, "fp8-amax-history-len", "1", "[1,)", "amaxes kept per tensor (delayed)") \
	X(A, fp8_amax_compute_algo, fp8_amax_compute_algo, "fp8-amax-compute-algo", "most_recent", "", "most_recent or max: the amax a scale comes from (delayed)") \
	X(B, fp8_param_gather, fp8_param_gather, "fp8-param-gather", "false", "", "the distributed optimizer's parameter all-gather, and FSDP's per-layer gathers under optim_grads_params, in fp8 (weights double-rounded fp32 -> bf16 -> fp8)") \
	X(B, first_last_layers_bf16, first_last_layers_bf16, "first-last-layers-bf16", "false", "", "keep the first and last decoder layers out of fp8 (tensorwise)") \
	X(I, num_layers_at_start_in_bf16, num_layers_at_start_in_bf16, "num-layers-at-start-in-bf16", "1", "[0,)", "with --first-last-layers-bf16: layers at the start kept out of fp8") \
	X(I, num_layers_at_end_in_bf16, num_layers_at_end_in_bf16, "num-layers-at-end-in-bf16", "1", "[0,)", "with --first-last-layers-bf16: layers at the end kept out of fp8") \
	X(S, fp8_trace, fp8_trace, "fp8-trace", "", "", "JSONL file: the delayed-scaling state after every update (mgt's own)") \
	X(F, loss_scale, loss_scale, "loss-scale", "0", "[0,)", "constant fp16 loss scale (0: dynamic)") \
	X(F, initial_loss_scale, initial_loss_scale, "initial-loss-scale", "4294967296", "(0,)", "first dynamic loss scale (2^32)") \
	X(F, min_loss_scale, min_loss_scale, "min-loss-scale", "1.0", "(0,)", "lowest dynamic loss scale") \
	X(I, loss_scale_window, loss_scale_window, "loss-scale-window", "1000", "[1,)", "clean iterations before the scale doubles") \
	X(I, hysteresis, hysteresis, "hysteresis", "2", "[1,)", "inf/NaN iterations tolerated before the scale halves") \
	X(H, device, _, "", "", "", "device and reporting") \
	X(S, device, device, "device", "auto", "", "cpu, cuda, or auto (cuda when built with CUDA and a GPU is present)") \
	X(I, threads, threads, "threads", "0", "[0,)", "CPU threads (0: all)") \
	X(F, peak_tflops, peak_tflops, "peak-tflops", "0", "[0,)", "peak TFLOP/s for MFU (0: not reported)") \
	X(S, metrics_file, metrics_file, "metrics-file", "", "", "JSONL metrics, one object per iteration") \
	X(S, comm_log, comm_log, "comm-log", "", "", "PREFIX: each rank writes PREFIX.rankN.jsonl, bytes sent per group per iteration") \
	X(S, debug_dump, debug_dump, "debug-dump", "", "", "HDF5 file: initial params, iteration-1 grads, batches")

typedef struct {
	char kind;
	const char *dest, *flag, *def, *range, *help;
	size_t off, size;
} arg_desc;

#define ARG_ROW(k, dest, path, flag, def, range, help) \
	{ #k[0], #dest, flag, def, range, help, offsetof(mgt_args, path), sizeof(((mgt_args *)0)->path) },
#define _ model
static const arg_desc args_table[] = { MGT_ARGS(ARG_ROW) };
#undef _
#define N_ARGS (sizeof args_table / sizeof *args_table)

static const arg_desc *find_arg(const char *key)
{
	for (size_t i = 0; i < N_ARGS; i++) {
		const arg_desc *d = &args_table[i];
		if (d->kind == 'H') continue;
		if (!strcmp(key, d->dest) || !strcmp(key, d->flag)) return d;
		/* accept the dest spelled with dashes too */
		size_t n = strlen(d->dest);
		if (strlen(key) == n) {
			size_t j = 0;
			while (j < n && (key[j] == d->dest[j] || (key[j] == '-' && d->dest[j] == '_'))) j++;
			if (j == n) return d;
		}
	}
	return NULL;
}

static mgt_status bad_value(const arg_desc *d, const char *v, const char *want)
{
	return mgt_err(MGT_ERR_USAGE, "--%s %s: expected %s", d->flag, v, want);
}

/* Whether x lies in d's range ("[lo,hi]", "(lo,)", ...); *want describes the range for the
 * message ("a number > 0", "an integer in [0, 1)"). */
static bool in_range(const arg_desc *d, double x, char *want, size_t n)
{
	const char *r = d->range, *what = d->kind == 'I' ? "an integer" : "a finite number";
	if (!*r) {
		snprintf(want, n, "%s", what);
		return true;
	}
	char *end;
	bool lo_open = r[0] == '(', hi_open = r[strlen(r) - 1] == ')';
	bool has_lo = r[1] != ',';
	double lo = has_lo ? strtod(r + 1, &end) : 0;
	const char *comma = strchr(r, ',');
	bool has_hi = comma[1] != ')' && comma[1] != ']';
	double hi = has_hi ? strtod(comma + 1, &end) : 0;
	if (has_lo && has_hi) snprintf(want, n, "%s in %.*s", what, (int)strlen(r), r);
	else if (has_lo) snprintf(want, n, "%s %s %g", what, lo_open ? ">" : ">=", lo);
	else snprintf(want, n, "%s %s %g", what, hi_open ? "<" : "<=", hi);
	if (has_lo && (lo_open ? !(x > lo) : !(x >= lo))) return false;
	return !(has_hi && (hi_open ? !(x < hi) : !(x <= hi)));
}

/* Megatron's Optional numbers: an I or F whose default is None (0 stands for it). */
static bool optional(const arg_desc *d)
{
	return (d->kind == 'I' || d->kind == 'F') && !strcmp(d->def, "None");
}

/* ---- --moe-layer-freq: an integer, or Megatron's list expression (arguments.py
 * moe_freq_type: Python's eval of a string of digits, commas, brackets, parentheses, + and *)
 * in the grammar
 *     expr   := term { '+' term }
 *     term   := factor { '*' factor }
 *     factor := INT | '(' expr ')' | '[' [ expr { ',' expr } [','] ] ']'
 * with Python's meanings (list + list joins, list * n and n * list repeat, n <= 0 empties; a
 * list's elements are integers).  The result must be a list of 0s and 1s. ---- */
#define MGT_MOE_MAX_LAYERS 1024
#define MOE_MAX_LAYERS_TEXT "1024"
_Static_assert(sizeof(((mgt_model_config *)0)->moe_layer_pattern) == MGT_MOE_MAX_LAYERS + 1,
	       "moe_layer_pattern holds MGT_MOE_MAX_LAYERS layers");

typedef struct {
	bool list;
	int64_t n;                        /* the integer, or the list's length */
	char el[MGT_MOE_MAX_LAYERS + 1];  /* the list's elements as '0' / '1' ('2': another value) */
} freq_val;

typedef struct {
	const char *s, *p, *err;
} freq_parser;

static void freq_space(freq_parser *f)
{
	while (*f->p == ' ' || *f->p == '\t') f->p++;
}

static bool freq_expr(freq_parser *f, freq_val *out, int depth);

static bool freq_fail(freq_parser *f, const char *why)
{
	if (!f->err) f->err = why;
	return false;
}

static bool freq_factor(freq_parser *f, freq_val *out, int depth)
{
	freq_space(f);
	if (depth > 64) return freq_fail(f, "nested too deeply");
	if (*f->p >= '0' && *f->p <= '9') {
		errno = 0;
		char *end;
		long long x = strtoll(f->p, &end, 10);
		if (errno || x > 1000000000) return freq_fail(f, "a number too large");
		f->p = end;
		out->list = false;
		out->n = x;
		return true;
	}
	if (*f->p == '(') {
		f->p++;
		if (!freq_expr(f, out, depth + 1)) return false;
		freq_space(f);
		if (*f->p != ')') return freq_fail(f, "a ')' missing");
		f->p++;
		return true;
	}
	if (*f->p != '[') return freq_fail(f, "a number, '(' or '[' expected");
	f->p++;
	out->list = true;
	out->n = 0;
	freq_space(f);
	while (*f->p != ']') {
		freq_val *e = mgt_malloc(sizeof *e);
		if (!e) return freq_fail(f, "out of memory");
		bool ok = freq_expr(f, e, depth + 1);
		if (ok && e->list) ok = freq_fail(f, "a list inside a list");
		if (ok && out->n >= MGT_MOE_MAX_LAYERS) ok = freq_fail(f, "more than " MOE_MAX_LAYERS_TEXT " layers");
		if (ok) out->el[out->n++] = e->n == 0 ? '0' : e->n == 1 ? '1' : '2';
		free(e);
		if (!ok) return false;
		freq_space(f);
		if (*f->p == ',') {
			f->p++;
			freq_space(f);
		} else if (*f->p != ']') {
			return freq_fail(f, "a ',' or ']' expected");
		}
	}
	f->p++;
	return true;
}

static bool freq_term(freq_parser *f, freq_val *out, int depth)
{
	if (!freq_factor(f, out, depth)) return false;
	for (;;) {
		freq_space(f);
		if (*f->p != '*') return true;
		f->p++;
		freq_val *r = mgt_malloc(sizeof *r);
		if (!r) return freq_fail(f, "out of memory");
		bool ok = freq_factor(f, r, depth);
		if (ok && out->list && r->list) ok = freq_fail(f, "a list times a list");
		if (ok && !out->list && !r->list) {
			out->n = out->n * r->n; /* both at most 1e9: fits */
			if (out->n > 1000000000) ok = freq_fail(f, "a number too large");
		} else if (ok) {
			freq_val *l = out->list ? out : r;
			int64_t times = out->list ? r->n : out->n;
			if (times <= 0) l->n = 0;
			else if (l->n && times > MGT_MOE_MAX_LAYERS / l->n)
				ok = freq_fail(f, "more than " MOE_MAX_LAYERS_TEXT " layers");
			for (int64_t i = 1; ok && i < times && l->n; i++) memcpy(l->el + i * l->n, l->el, (size_t)l->n);
			if (ok && times > 0) l->n *= times;
			if (ok && l != out) *out = *l;
		}
		free(r);
		if (!ok) return false;
	}
}

static bool freq_expr(freq_parser *f, freq_val *out, int depth)
{
	if (!freq_term(f, out, depth)) return false;
	for (;;) {
		freq_space(f);
		if (*f->p != '+') return true;
		f->p++;
		freq_val *r = mgt_malloc(sizeof *r);
		if (!r) return freq_fail(f, "out of memory");
		bool ok = freq_term(f, r, depth);
		if (ok && out->list != r->list) ok = freq_fail(f, "a list plus a number");
		else if (ok && !out->list) out->n += r->n;
		else if (ok && out->n + r->n > MGT_MOE_MAX_LAYERS)
			ok = freq_fail(f, "more than " MOE_MAX_LAYERS_TEXT " layers");
		else if (ok) {
			memcpy(out->el + out->n, r->el, (size_t)r->n);
			out->n += r->n;
		}
		free(r);
		if (!ok) return false;
	}
}

static mgt_status set_layer_freq(mgt_args *a, const arg_desc *d, const char *v)
{
	const char *want = "an integer >= 1, or a list of 0s and 1s, one per layer, such as [0,1,1,1] or ([0]*1+[1]*3)";
	if (!strchr(v, '[')) { /* an integer, as Megatron's int(x) */
		char *end;
		errno = 0;
		long long x = strtoll(v, &end, 10);
		while (*end == ' ') end++;
		if (!*v || *end || errno || x < 1) return bad_value(d, v, want);
		a->model.moe_layer_freq = x;
		a->model.moe_layer_pattern[0] = 0;
		return MGT_OK;
	}
	freq_parser f = { v, v, NULL };
	freq_val *r = mgt_malloc(sizeof *r);
	if (!r) return MGT_ERR_NOMEM;
	bool ok = freq_expr(&f, r, 0);
	freq_space(&f);
	if (ok && *f.p) ok = freq_fail(&f, "unexpected text after the expression");
	if (ok && !r->list) ok = freq_fail(&f, "a number, not a list");
	if (ok && memchr(r->el, '2', (size_t)r->n)) ok = freq_fail(&f, "an element other than 0 and 1");
	if (ok && !r->n) ok = freq_fail(&f, "an empty list");
	if (ok) {
		memcpy(a->model.moe_layer_pattern, r->el, (size_t)r->n);
		a->model.moe_layer_pattern[r->n] = 0;
		a->model.moe_layer_freq = 1;
	}
	free(r);
	if (!ok) {
		if (!strcmp(f.err, "out of memory")) return MGT_ERR_NOMEM;
		return mgt_err(MGT_ERR_USAGE, "--%s %s: %s at offset %d: expected %s", d->flag, v, f.err,
			       (int)(f.p - f.s), want);
	}
	return MGT_OK;
}

/* What a value set implies beyond its own field. */
static mgt_status after_set(mgt_args *a, const arg_desc *d)
{
	if (d->off == offsetof(mgt_args, moe_router_dtype)) {
		const char *t = a->moe_router_dtype;
		if (t && strcmp(t, "fp32") && strcmp(t, "fp64")) {
			mgt_status st = bad_value(d, t, "fp32 or fp64");
			free(a->moe_router_dtype);
			a->moe_router_dtype = NULL;
			return st;
		}
		a->model.moe_router_dtype_fp32 = t != NULL;
	}
	return MGT_OK;
}

static mgt_status set_value(mgt_args *a, const arg_desc *d, const char *v)
{
	char *p = (char *)a + d->off, *end, want[96];
	errno = 0;
	if (optional(d) && (!*v || !strcmp(v, "None"))) {
		if (d->kind == 'I') *(int64_t *)p = 0;
		else *(double *)p = 0;
		return MGT_OK;
	}
	switch (d->kind) {
	case 'L':
		return set_layer_freq(a, d, v);
	case 'I': {
		long long x = strtoll(v, &end, 10);
		bool ok = *v && !*end && !errno;
		if (!in_range(d, (double)x, want, sizeof want) || !ok) return bad_value(d, v, want);
		*(int64_t *)p = x;
		return MGT_OK;
	}
	case 'F': {
		double x = strtod(v, &end);
		bool ok = *v && !*end && !errno && isfinite(x);
		if (!in_range(d, x, want, sizeof want) || !ok) return bad_value(d, v, want);
		*(double *)p = x;
		return MGT_OK;
	}
	case 'A':
		if (strlen(v) >= d->size) return bad_value(d, v, "a shorter name");
		strcpy(p, v);
		return MGT_OK;
	case 'S': {
		char *s = *v ? mgt_strdup(v) : NULL;
		if (*v && !s) return MGT_ERR_NOMEM;
		free(*(char **)p);
		*(char **)p = s;
		return after_set(a, d);
	}
	default: /* B, N: the dest's truth value */
		if (strcmp(v, "true") && strcmp(v, "false")) return bad_value(d, v, "true or false");
		*(bool *)p = !strcmp(v, "true");
		return MGT_OK;
	}
}

mgt_status mgt_args_init(mgt_args *a)
{
	memset(a, 0, sizeof *a);
	for (size_t i = 0; i < N_ARGS; i++) {
		if (args_table[i].kind == 'H') continue;
		mgt_status st = set_value(a, &args_table[i], args_table[i].def);
		if (st) return st;
	}
	return MGT_OK;
}

void mgt_args_free(mgt_args *a)
{
	for (size_t i = 0; i < N_ARGS; i++)
		if (args_table[i].kind == 'S') free(*(char **)((char *)a + args_table[i].off));
	free(a->ignored_flags);
	memset(a, 0, sizeof *a);
}

mgt_status mgt_args_set(mgt_args *a, const char *key, const char *value)
{
	const arg_desc *d = find_arg(key);
	if (!d) return mgt_err(MGT_ERR_USAGE, "unknown argument '%s'", key);
	return set_value(a, d, value);
}

/* JSON value to the text form set_value takes. */
static mgt_status json_text(const arg_desc *d, json_t *v, char *buf, size_t n, const char *what)
{
	if (json_is_string(v) && (d->kind == 'S' || d->kind == 'A' || d->kind == 'L'))
		snprintf(buf, n, "%s", json_string_value(v));
	else if (json_is_null(v) && (d->kind == 'S' || optional(d))) buf[0] = 0;
	else if (json_is_integer(v) && d->kind == 'L') snprintf(buf, n, "%lld", (long long)json_integer_value(v));
	else if (json_is_array(v) && d->kind == 'L') { /* Megatron's list: [0, 1, 1, ...] */
		size_t i, k = 0;
		json_t *e;
		buf[k++] = '[';
		json_array_foreach(v, i, e) {
			if (!json_is_integer(e) || k + 24 >= n)
				return mgt_err(MGT_ERR_INPUT, "%s: %s: expected a list of at most %d integers", what,
					       d->dest, MGT_MOE_MAX_LAYERS);
			k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)json_integer_value(e));
		}
		snprintf(buf + k, n - k, "]");
	}
	else if (json_is_integer(v) && (d->kind == 'I' || d->kind == 'F'))
		snprintf(buf, n, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v) && d->kind == 'F') snprintf(buf, n, "%.17g", json_real_value(v));
	else if (json_is_boolean(v) && (d->kind == 'B' || d->kind == 'N'))
		snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
	else
		return mgt_err(MGT_ERR_INPUT, "%s: %s: expected %s", what, d->dest,
			       d->kind == 'I' ? "an integer" : d->kind == 'F' ? "a number" :
			       d->kind == 'B' || d->kind == 'N' ? "true or false" :
			       d->kind == 'L' ? "an integer or a list of 0s and 1s" : "a string");
	return MGT_OK;
}

/* The derived values mgt_args_to_json adds after the table's keys: read back as nothing, so that a
 * checkpoint's "args" merges whole (they are recomputed by mgt_args_finalize). */
static bool is_derived(const char *key)
{
	static const char *const derived[] = { "padded_vocab_size", "num_microbatches", "data_parallel_size",
					       "world_size" };
	for (size_t i = 0; i < sizeof derived / sizeof *derived; i++)
		if (!strcmp(key, derived[i])) return true;
	return false;
}

mgt_status mgt_args_merge_json(mgt_args *a, const void *obj, const char *what)
{
	json_t *o = (json_t *)obj;
	if (!json_is_object(o)) return mgt_err(MGT_ERR_INPUT, "%s: expected a JSON object", what);
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v) {
		if (key[0] == '_' || is_derived(key)) continue;
		const arg_desc *d = find_arg(key);
		if (!d) return mgt_err(MGT_ERR_INPUT, "%s: unknown argument '%s'", what, key);
		char buf[4096];
		mgt_status st = json_text(d, v, buf, sizeof buf, what);
		if (!st) st = set_value(a, d, buf);
		if (st) return st == MGT_ERR_USAGE ? mgt_err_ctx(MGT_ERR_INPUT, "%s", what) : st;
	}
	return MGT_OK;
}

mgt_status mgt_args_load_json(mgt_args *a, const char *path)
{
	json_error_t e;
	json_t *o = json_load_file(path, 0, &e);
	if (!o) return mgt_err(MGT_ERR_INPUT, "%s:%d: %s", path, e.line, e.text);
	mgt_status st = mgt_args_merge_json(a, o, path);
	json_decref(o);
	return st;
}

/* share/mgt/models/NAME.json ($MGT_SHARE, or bin/../share), or NAME as a path. */
static mgt_status preset_path(const char *name, char *out, size_t n)
{
	char dir[PATH_MAX];
	if (mgt_share_preset("models", name, out, n, dir, sizeof dir)) return MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "--model %s: no such preset (looked in %s)", name, dir);
}

/* Every word after argv[*i] up to the next "--" flag, joined by spaces into *out (malloc'd). */
static mgt_status take_words(int argc, char **argv, int *i, const char *name, char **out)
{
	mgt_buf b = { 0 };
	while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2)) {
		const char *w = argv[++*i];
		if ((b.n && mgt_buf_add(&b, " ", 1)) || mgt_buf_add(&b, w, strlen(w) + 1)) {
			free(b.p);
			return MGT_ERR_NOMEM;
		}
		b.n--; /* keep the NUL out of the length */
	}
	*out = b.p;
	return b.n ? MGT_OK : mgt_err(MGT_ERR_USAGE, "--%s needs a value", name);
}

/* Record "--name: why" once in a->ignored_flags (args_impl.h). */
mgt_status args_note_ignored(mgt_args *a, const char *name, const char *why)
{
	char line[512];
	snprintf(line, sizeof line, "--%s: %s\n", name, why);
	if (a->ignored_flags && strstr(a->ignored_flags, line)) return MGT_OK;
	size_t n = a->ignored_flags ? strlen(a->ignored_flags) : 0;
	char *p = mgt_realloc(a->ignored_flags, n + strlen(line) + 1);
	if (!p) return MGT_ERR_NOMEM;
	strcpy(p + n, line);
	a->ignored_flags = p;
	return MGT_OK;
}

/* A Megatron flag outside the table: its values read (and checked where only one is accepted),
 * then an alias applied, a no-op recorded, or the refusal returned. */
static mgt_status parse_compat(mgt_args *a, const char *name, const char *eq, int argc, char **argv, int *i)
{
	mgt_compat c;
	mgt_status st = mgt_args_compat(name, NULL, &c);
	if (st) return st;
	char *val = NULL;
	if (c.nargs == '0' && eq) return mgt_err(MGT_ERR_USAGE, "--%s takes no value", name);
	if (c.nargs != '0' && eq) val = mgt_strdup(eq + 1);
	else if (c.nargs == '1' && *i + 1 < argc) val = mgt_strdup(argv[++*i]);
	else if (c.nargs == '1') return mgt_err(MGT_ERR_USAGE, "--%s needs a value", name);
	else if (c.nargs == '+' && (st = take_words(argc, argv, i, name, &val))) return st;
	if (c.nargs != '0' && !val) return MGT_ERR_NOMEM;
	st = mgt_args_compat(name, val, &c);
	if (!st && c.ignored) st = args_note_ignored(a, name, c.why);
	else if (!st) { /* an alias: "dest=value", or "dest=" for Megatron's other name of a flag with a value */
		char dest[64];
		const char *v = strchr(c.alias, '=');
		snprintf(dest, sizeof dest, "%.*s", (int)(v - c.alias), c.alias);
		st = mgt_args_set(a, dest, v[1] || !val ? v + 1 : val);
	}
	free(val);
	return st;
}

static mgt_status parse_flag(mgt_args *a, int argc, char **argv, int *i)
{
	char *arg = argv[*i], name[128], *eq = strchr(arg, '=');
	size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
	if (n >= sizeof name) return mgt_err(MGT_ERR_USAGE, "unknown flag '%s'", arg);
	memcpy(name, arg + 2, n);
	name[n] = 0;
	const arg_desc *d = find_arg(name);
	if (!d || strcmp(name, d->flag)) return parse_compat(a, name, eq, argc, argv, i);
	if (d->kind == 'B' || d->kind == 'N') {
		if (eq) return mgt_err(MGT_ERR_USAGE, "--%s takes no value", name);
		return set_value(a, d, d->kind == 'B' ? "true" : "false");
	}
	if (eq) return set_value(a, d, eq + 1);
	if (*i + 1 >= argc) return mgt_err(MGT_ERR_USAGE, "--%s needs a value", name);
	if (strcmp(d->dest, "data_path") && strcmp(d->dest, "cp_comm_type")) return set_value(a, d, argv[++*i]);
	char *words = NULL;
	mgt_status st = take_words(argc, argv, i, name, &words);
	if (!st) st = set_value(a, d, words);
	free(words);
	return st;
}

void mgt_args_classify(const char *flag, const char **cls, const char **why)
{
	while (*flag == '-') flag++;
	const arg_desc *d = find_arg(flag);
	mgt_compat c = { 0 }; /* why stays NULL for a flag mgt does not know */
	*why = "";
	if (d && !strcmp(flag, d->flag)) {
		*cls = "implemented";
	} else if (mgt_args_compat(flag, NULL, &c) == MGT_OK) {
		*cls = c.alias ? "implemented" : "ignored";
		*why = c.alias ? "" : c.why;
	} else {
		*cls = c.why ? "refused" : "unknown";
		*why = c.why ? c.why : "";
	}
}

mgt_status mgt_args_parse_argv(mgt_args *a, int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++) /* the preset first, so that flags override it */
		if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8)) {
			const char *name = argv[i][7] == '=' ? argv[i] + 8 : argv[i + 1];
			char path[PATH_MAX + 64];
			mgt_status st = preset_path(name, path, sizeof path);
			if (!st) st = mgt_args_load_json(a, path);
			if (st) return st;
		}
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--", 2))
			return mgt_err(MGT_ERR_USAGE, "unexpected argument '%s'", argv[i]);
		mgt_status st = parse_flag(a, argc, argv, &i);
		if (st) return st;
	}
	return MGT_OK;
}

/* --moe-layer-freq as JSON: the integer, or the list as the string "[0,1,1,...]" (what the
 * flag reads back). */
static json_t *layer_freq_json(const mgt_model_config *c)
{
	if (!c->moe_layer_pattern[0]) return json_integer(c->moe_layer_freq);
	char buf[2 * MGT_MOE_MAX_LAYERS + 3];
	size_t k = 0;
	buf[k++] = '[';
	for (const char *q = c->moe_layer_pattern; *q; q++) {
		if (q != c->moe_layer_pattern) buf[k++] = ',';
		buf[k++] = *q;
	}
	buf[k++] = ']';
	buf[k] = 0;
	return json_string(buf);
}

void *mgt_args_to_json(const mgt_args *a)
{
	json_t *o = json_object();
	for (size_t i = 0; i < N_ARGS; i++) {
		const arg_desc *d = &args_table[i];
		const char *p = (const char *)a + d->off;
		json_t *v = NULL;
		switch (d->kind) {
		case 'H': continue;
		case 'I': v = optional(d) && !*(const int64_t *)p ? json_null() : json_integer(*(const int64_t *)p); break;
		case 'F': v = optional(d) && *(const double *)p == 0 ? json_null() : json_real(*(const double *)p); break;
		case 'L': v = layer_freq_json(&a->model); break;
		case 'A': v = json_string(p); break;
		case 'S': v = *(char *const *)p ? json_string(*(char *const *)p) : json_null(); break;
		default: v = json_boolean(*(const bool *)p); break;
		}
		json_object_set_new(o, d->dest, v);
	}
	json_object_set_new(o, "padded_vocab_size", json_integer(a->model.padded_vocab_size));
	json_object_set_new(o, "num_microbatches", json_integer(a->num_microbatches));
	json_object_set_new(o, "data_parallel_size", json_integer(a->data_parallel_size));
	json_object_set_new(o, "world_size", json_integer(a->world_size ? a->world_size : 1));
	return o;
}

void mgt_args_help(FILE *f)
{
	for (size_t i = 0; i < N_ARGS; i++) {
		const arg_desc *d = &args_table[i];
		if (d->kind == 'H') {
			fprintf(f, "\n%c%s:\n", d->help[0] - 32 * (d->help[0] >= 'a'), d->help + 1);
			continue;
		}
		char left[96];
		const char *meta = d->kind == 'I' ? " N" : d->kind == 'F' ? " X" : d->kind == 'L' ? " N|LIST" :
				   d->kind == 'B' || d->kind == 'N' ? "" : " S";
		snprintf(left, sizeof left, "--%s%s", d->flag, meta);
		const char *def = d->kind == 'B' || d->kind == 'N' || !*d->def ? NULL : d->def;
		fprintf(f, "  %-40s %s%s%s%s\n", left, d->help, def ? " [" : "", def ? def : "", def ? "]" : "");
	}
}
