/* lib/args/finalize.c: mgt_args_finalize, the derived values and Megatron's cross-checks of the
 * arguments (megatron/training/arguments.py validate_args). */
#include "args_impl.h"
#include "data/data.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t mgt_args_ddp_bucket_size(int64_t dp)
{
	return dp * 1000000 > 40000000 ? dp * 1000000 : 40000000;
}

static mgt_status derive_run_length(mgt_args *a)
{
	int64_t gbs = a->global_batch_size;
	if ((a->train_iters > 0) == (a->train_samples > 0))
		return mgt_err(MGT_ERR_USAGE, "give exactly one of --train-iters and --train-samples");
	if (a->train_samples > 0) a->train_iters = (a->train_samples + gbs - 1) / gbs;
	if (a->lr < 0) return mgt_err(MGT_ERR_USAGE, "--lr %g: expected >= 0", a->lr);
	if (a->eval_interval < 0 || a->eval_iters < 0 || a->log_interval <= 0 || a->save_interval < 0)
		return mgt_err(MGT_ERR_USAGE, "--eval-interval, --eval-iters, --save-interval must be >= 0 "
			       "and --log-interval > 0");
	return MGT_OK;
}

/* --cp-comm-type: one word, or Megatron's per-layer list (nargs='+') of one kind repeated;
 * all_gather is the config's spelling of allgather (transformer_config.py). */
static mgt_status derive_cp_comm(mgt_args *a)
{
	const char *w = a->cp_comm_type ? a->cp_comm_type : "p2p";
	size_t n = strcspn(w, " ");
	for (const char *p = w; *p; p += strspn(p, " ")) {
		size_t k = strcspn(p, " ");
		if (k != n || strncmp(p, w, n))
			return mgt_err(MGT_ERR_USAGE, "--cp-comm-type %s: a different kind per layer is not implemented in this "
				       "version (give one of p2p, allgather, a2a)", w);
		p += k;
	}
	if ((n == 3 && !strncmp(w, "p2p", 3))) a->cp_comm = MGT_CP_P2P;
	else if ((n == 9 && !strncmp(w, "allgather", 9)) || (n == 10 && !strncmp(w, "all_gather", 10))) a->cp_comm = MGT_CP_ALLGATHER;
	else if (n == 3 && !strncmp(w, "a2a", 3)) a->cp_comm = MGT_CP_A2A;
	else if (n == 7 && !strncmp(w, "a2a+p2p", 7))
		return mgt_err(MGT_ERR_USAGE, "--cp-comm-type a2a+p2p: the hierarchical form (all-to-all within, ring "
			       "across --hierarchical-context-parallel-sizes) is not implemented in this version (use p2p, "
			       "allgather or a2a)");
	else return mgt_err(MGT_ERR_USAGE, "--cp-comm-type %.*s: expected p2p, allgather (all_gather), a2a or a2a+p2p",
			    (int)n, w);
	return MGT_OK;
}

/* Parallel sizes: data-parallel size from the world, virtual stages, divisibility. */
static mgt_status derive_parallel(mgt_args *a)
{
	int64_t tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size, W = a->world_size ? a->world_size : 1;
	int64_t cp = a->context_parallel_size, L = a->model.num_layers;
	if (tp < 1 || pp < 1 || cp < 1)
		return mgt_err(MGT_ERR_USAGE, "--tensor-model-parallel-size, --pipeline-model-parallel-size and "
			       "--context-parallel-size must be positive");
	if (cp > 1 && a->model.seq_length % (2 * cp))
		return mgt_err(MGT_ERR_USAGE, "--seq-length %lld is not divisible by 2 x --context-parallel-size %lld "
			       "(each sequence is cut into 2 x CP chunks)", (long long)a->model.seq_length, (long long)cp);
	if (W % (tp * pp * cp))
		return mgt_err(MGT_ERR_USAGE, "world size %lld is not divisible by --tensor-model-parallel-size %lld x "
			       "--pipeline-model-parallel-size %lld x --context-parallel-size %lld = %lld: run a multiple "
			       "of %lld processes (mpirun -np), or give sizes whose product divides %lld", (long long)W,
			       (long long)tp, (long long)pp, (long long)cp, (long long)(tp * pp * cp), (long long)(tp * pp * cp),
			       (long long)W);
	a->data_parallel_size = W / (tp * pp * cp);
	mgt_status st = derive_cp_comm(a);
	if (st) return st;
	if (tp == 1) a->sequence_parallel = false; /* Megatron turns it off silently */
	if (a->num_layers_per_virtual_pipeline_stage > 0) {
		int64_t n = a->num_layers_per_virtual_pipeline_stage;
		if (L % (pp * n))
			return mgt_err(MGT_ERR_USAGE, "--num-layers %lld is not divisible by --pipeline-model-parallel-size "
				       "%lld x --num-layers-per-virtual-pipeline-stage %lld", (long long)L, (long long)pp,
				       (long long)n);
		a->virtual_pipeline_model_parallel_size = L / (pp * n);
	}
	if (a->num_virtual_stages_per_pipeline_rank > 0) a->virtual_pipeline_model_parallel_size = a->num_virtual_stages_per_pipeline_rank;
	int64_t V = a->virtual_pipeline_model_parallel_size > 0 ? a->virtual_pipeline_model_parallel_size : 1;
	bool uneven = a->model.decoder_first_pipeline_num_layers > 0 || a->model.decoder_last_pipeline_num_layers > 0;
	if (uneven && V > 1)
		return mgt_err(MGT_ERR_USAGE, "--decoder-first/last-pipeline-num-layers with virtual pipeline stages is "
			       "not implemented");
	if (uneven && pp < 2)
		return mgt_err(MGT_ERR_USAGE, "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
	int64_t f, n;
	st = uneven ? mgt_stage_layers(&a->model, (int)pp, 0, &f, &n) : MGT_OK;
	if (st) return st;
	if (!uneven && !strchr(a->model.hybrid_layer_pattern, '|') && L % (pp * V))
		return mgt_err(MGT_ERR_USAGE, "--num-layers %lld is not divisible by --pipeline-model-parallel-size %lld "
			       "x %lld virtual stages", (long long)L, (long long)pp, (long long)V);
	if (V == 1) a->virtual_pipeline_model_parallel_size = 0;
	if (!a->microbatch_group_size_per_vp_stage) a->microbatch_group_size_per_vp_stage = pp;
	return MGT_OK;
}

/* Megatron's rules (megatron/training/arguments.py validate_args; TransformerConfig
 * __post_init__ in megatron/core/transformer/transformer_config.py) and a->recompute. */
static mgt_status derive_recompute(mgt_args *a)
{
	if (a->recompute_activations) { /* arguments.py: it wins over --recompute-granularity */
		char *s = mgt_strdup("selective");
		if (!s) return MGT_ERR_NOMEM;
		free(a->recompute_granularity);
		a->recompute_granularity = s;
	}
	const char *g = a->recompute_granularity, *m = a->recompute_method;
	int64_t n = a->recompute_num_layers;
	if (g && strcmp(g, "full") && strcmp(g, "selective"))
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity %s: expected full or selective", g);
	if (m && strcmp(m, "uniform") && strcmp(m, "block"))
		return mgt_err(MGT_ERR_USAGE, "--recompute-method %s: expected uniform or block", m);
	a->recompute = (mgt_recompute){ 0 };
	if (!g) { /* Megatron checks nothing then, and recomputes nothing */
		mgt_status st = m ? args_note_ignored(a, "recompute-method", "no --recompute-granularity: nothing is recomputed") : MGT_OK;
		if (!st && n) st = args_note_ignored(a, "recompute-num-layers", "no --recompute-granularity: nothing is recomputed");
		return st;
	}
	if (!strcmp(g, "selective")) {
		if (m) return mgt_err(MGT_ERR_USAGE, "--recompute-method %s: recompute method is not yet supported for "
				      "selective recomputing granularity", m);
		if (n) return mgt_err(MGT_ERR_USAGE, "--recompute-num-layers %lld: when using recompute_granularity: "
				      "selective recompute_num_layers must be None", (long long)n);
		a->recompute.granularity = MGT_RECOMPUTE_SELECTIVE;
		return MGT_OK;
	}
	if (!m) return mgt_err(MGT_ERR_USAGE, "--recompute-granularity full: using recompute_granularity: full so "
			       "recompute_method must be \"block\" or \"uniform\" (--recompute-method)");
	if (n < 1 || n > INT_MAX)
		return mgt_err(MGT_ERR_USAGE, "--recompute-granularity full: when using recompute_granularity: full "
			       "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: %lld "
			       "(--recompute-num-layers)", (long long)(a->model.num_layers / a->pipeline_model_parallel_size));
	a->recompute = (mgt_recompute){ .granularity = MGT_RECOMPUTE_FULL, .num_layers = (int)n,
					.method = strcmp(m, "block") ? MGT_RECOMPUTE_UNIFORM : MGT_RECOMPUTE_BLOCK };
	return MGT_OK;
}

/* The run-level MoE rules (arguments.py validate_args; parallel_state.py's expert grid;
 * moe_layer.py, which raises without sequence parallelism under TP) and
 * a->expert_data_parallel_size.  After the model's, so that --num-experts is checked. */
static mgt_status derive_moe(mgt_args *a)
{
	int64_t E = a->model.num_experts, ep = a->expert_model_parallel_size, tp = a->tensor_model_parallel_size;
	int64_t etp = a->expert_tensor_parallel_size, pp = a->pipeline_model_parallel_size, W = a->world_size ? a->world_size : 1;
	const char *disp = a->moe_token_dispatcher_type;
	if (!strcmp(disp, "flex"))
		return mgt_err(MGT_ERR_USAGE, "--moe-token-dispatcher-type flex (DeepEP, HybridEP, NCCL-EP) is not implemented: "
			       "use alltoall or allgather");
	if (strcmp(disp, "allgather") && strcmp(disp, "alltoall"))
		return mgt_err(MGT_ERR_USAGE, "--moe-token-dispatcher-type %s: expected allgather or alltoall", disp);
	if (etp && etp != tp)
		return mgt_err(MGT_ERR_USAGE, "--expert-tensor-parallel-size %lld: expert tensor parallelism other than "
			       "--tensor-model-parallel-size %lld is not implemented in this version (leave it unset: it "
			       "defaults to the tensor-parallel size)", (long long)etp, (long long)tp);
	etp = tp;
	if (ep > 1 && E <= 0)
		return mgt_err(MGT_ERR_USAGE, "--expert-model-parallel-size %lld needs --num-experts (a model with experts)",
			       (long long)ep);
	if (E > 0 && E % ep)
		return mgt_err(MGT_ERR_USAGE, "--num-experts %lld is not divisible by --expert-model-parallel-size %lld",
			       (long long)E, (long long)ep);
	if (W % (ep * etp * pp))
		return mgt_err(MGT_ERR_USAGE, "world size %lld is not divisible by --expert-model-parallel-size %lld x "
			       "--expert-tensor-parallel-size %lld (= --tensor-model-parallel-size) x "
			       "--pipeline-model-parallel-size %lld", (long long)W, (long long)ep, (long long)etp, (long long)pp);
	a->expert_data_parallel_size = W / (ep * etp * pp);
	if (E > 0 && tp > 1 && !a->sequence_parallel)
		return mgt_err(MGT_ERR_USAGE, "--num-experts with --tensor-model-parallel-size %lld needs --sequence-parallel "
			       "(as Megatron's MoE layer)", (long long)tp);
	return MGT_OK;
}

/* Whether Megatron flag `name`, accepted without effect (compat.c), was given. */
static bool ignored_given(const mgt_args *a, const char *name)
{
	char key[80];
	snprintf(key, sizeof key, "--%s:", name);
	for (const char *p = a->ignored_flags; p && (p = strstr(p, key)); p++)
		if (p == a->ignored_flags || p[-1] == '\n') return true;
	return false;
}

/* The precision flags Megatron refuses together (megatron/training/arguments.py validate_args:
 * "assert not args.bf16" under --fp16, "lm cross entropy in fp16 only support in fp16 mode"),
 * and --grad-reduce-in-bf16, which sets the bf16 main_grad buffer of --bf16 runs only. */
static mgt_status check_precision(const mgt_args *a)
{
	if (a->bf16 && a->fp16) return mgt_err(MGT_ERR_USAGE, "--bf16 and --fp16 exclude each other");
	if (a->grad_reduce_in_bf16 && !a->bf16)
		return mgt_err(MGT_ERR_USAGE, "--grad-reduce-in-bf16 needs --bf16 (it chooses how a bf16 run reduces its "
			       "gradients)%s", a->fp16 ? ", not --fp16" : "");
	if (ignored_given(a, "fp16-lm-cross-entropy") && !a->fp16)
		return mgt_err(MGT_ERR_USAGE, "--fp16-lm-cross-entropy needs --fp16 (as in Megatron)%s",
			       a->bf16 ? ", not --bf16" : "");
	return MGT_OK;
}

/* Flags that only one family reads (Megatron's pretrain_t5.py, pretrain_bert.py), given to
 * another: refused, naming the flag, its family and the run's (mgt_family rows).  Checked by
 * value: each is None, 0 or true unless given. */
static mgt_status check_family_flags(const mgt_args *a)
{
	const mgt_model_config *c = &a->model;
	const struct {
		const char *flag;
		bool given;
		mgt_stack_recipe recipe;
	} own[] = {
		{"--decoder-seq-length", c->decoder_seq_length != 0, MGT_STACK_ENCODER_DECODER},
		{"--decoder-num-layers", a->decoder_num_layers != 0, MGT_STACK_ENCODER_DECODER},
		{"--vocab-extra-ids", a->vocab_extra_ids != 0, MGT_STACK_ENCODER_DECODER},
		{"--bert-no-binary-head", !c->bert_binary_head, MGT_STACK_ENCODER},
	};
	const mgt_family *f = mgt_model_family(c);
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
		if (!own[i].given || f->recipe == own[i].recipe) continue;
		const char *of = own[i].recipe == MGT_STACK_ENCODER ? "bert" : "t5";
		return mgt_err(MGT_ERR_USAGE, "%s is a flag of %s models (--model-family %s, Megatron's pretrain_%s.py), "
			       "but this run's family is %s: give --model-family %s, or drop %s", own[i].flag,
			       mgt_family_find(of)->title, of, of, f->name, of, own[i].flag);
	}
	return MGT_OK;
}

/* Megatron's arguments.py: --encoder-num-layers and --encoder-seq-length stand in for
 * --num-layers and --seq-length (each pair exclusive), the decoder's length within the position
 * table; T5 needs a decoder length and a dataset. */
static mgt_status check_encdec(mgt_args *a)
{
	mgt_model_config *c = &a->model;
	if (a->encoder_num_layers && c->num_layers)
		return mgt_err(MGT_ERR_USAGE, "--num-layers and --encoder-num-layers: give one (Megatron: cannot have both "
			       "num-layers and encoder-num-layers specified)");
	if (a->encoder_num_layers) c->num_layers = a->encoder_num_layers;
	if (a->encoder_seq_length && c->seq_length)
		return mgt_err(MGT_ERR_USAGE, "--seq-length and --encoder-seq-length: give one (T5's --seq-length is its "
			       "encoder's length)");
	if (a->encoder_seq_length) c->seq_length = a->encoder_seq_length;
	if (c->decoder_seq_length && c->max_position_embeddings && c->max_position_embeddings < c->decoder_seq_length)
		return mgt_err(MGT_ERR_USAGE, "--decoder-seq-length %lld is more than --max-position-embeddings %lld",
			       (long long)c->decoder_seq_length, (long long)c->max_position_embeddings);
	if (mgt_model_family(c)->recipe != MGT_STACK_ENCODER_DECODER) return MGT_OK;
	if (!c->decoder_seq_length)
		return mgt_err(MGT_ERR_USAGE, "--model-family t5 needs --decoder-seq-length (the decoder's input and labels)");
	if (a->context_parallel_size > 1)
		return mgt_err(MGT_ERR_USAGE, "--context-parallel-size %lld with --model-family t5: context parallelism is "
			       "not supported for T5", (long long)a->context_parallel_size);
	if (a->mock_data)
		return mgt_err(MGT_ERR_USAGE, "--mock-data with --model-family t5: give a sentence-level --data-path "
			       "(mgt-preprocess --split-sentences)");
	return MGT_OK;
}

/* --reset-attention-mask: GPT's documents packed in a row (gpt_dataset.py
 * _get_ltor_masks_and_position_ids), without context parallelism (Megatron's inter-document
 * masking has no CP form either: its issue #6156). */
static mgt_status check_packed(const mgt_args *a)
{
	if (a->sft) {
		if (mgt_model_family(&a->model)->recipe != MGT_STACK_DECODER)
			return mgt_err(MGT_ERR_USAGE, "--sft with --model-family %s: Megatron fine-tunes GPT models "
				       "(pretrain_gpt.py --sft)", mgt_model_family(&a->model)->name);
		if (a->context_parallel_size > 1 && a->cp_comm != MGT_CP_A2A)
			return mgt_err(MGT_ERR_USAGE, "--sft with --context-parallel-size %lld: packed conversations under "
				       "context parallelism (Megatron's per-document split) run with --cp-comm-type a2a; the "
				       "p2p ring and allgather, whose blocks take whole chunks of the row, do not take them "
				       "yet", (long long)a->context_parallel_size);
		if (a->context_parallel_size > 1 && a->model.num_experts > 0)
			return mgt_err(MGT_ERR_USAGE, "--sft with --context-parallel-size %lld and --num-experts: MoE routing "
				       "under context parallelism keeps the fixed split's rows, not the per-document split's",
				       (long long)a->context_parallel_size);
		if (a->mock_data || !a->data_path || strchr(a->data_path, ' '))
			return mgt_err(MGT_ERR_USAGE, "--sft reads one JSONL --data-path (no blend, no --mock-data)");
		if (a->reset_attention_mask || a->reset_position_ids)
			return mgt_err(MGT_ERR_USAGE, "--sft with --reset-attention-mask or --reset-position-ids: the SFT "
				       "dataset packs conversations itself (Megatron asserts the same)");
		mgt_sft_format f;
		mgt_status st = mgt_sft_format_parse(a->sft_tokenizer_prompt_format, &f);
		if (st) return st;
	}
	if (!a->reset_attention_mask) return MGT_OK;
	const mgt_family *f = mgt_model_family(&a->model);
	if (f->recipe != MGT_STACK_DECODER)
		return mgt_err(MGT_ERR_USAGE, "--reset-attention-mask with --model-family %s: it masks attention across "
			       "the eod tokens of GPT's packed documents (Megatron's GPTDataset)", f->name);
	if (a->context_parallel_size > 1)
		return mgt_err(MGT_ERR_USAGE, "--reset-attention-mask with --context-parallel-size %lld: document "
			       "masking under context parallelism is not implemented (nor in Megatron's GPTDataset: "
			       "its issue 6156)", (long long)a->context_parallel_size);
	return MGT_OK;
}

static mgt_status check_bert(const mgt_args *a)
{
	if (mgt_model_family(&a->model)->recipe != MGT_STACK_ENCODER) return MGT_OK;
	if (a->context_parallel_size > 1)
		return mgt_err(MGT_ERR_USAGE, "--context-parallel-size %lld with --model-family bert: BERT's bidirectional "
			       "attention under a padding mask has no context-parallel form in Megatron (its ring splits "
			       "causal attention); use --tensor-model-parallel-size with --sequence-parallel",
			       (long long)a->context_parallel_size);
	if (a->calculate_per_token_loss)
		return mgt_err(MGT_ERR_USAGE, "--calculate-per-token-loss with --model-family bert: pretrain_bert.py's "
			       "loss is the mean of each micro-batch's masked-LM and sentence-order losses");
	if (a->mock_data)
		return mgt_err(MGT_ERR_USAGE, "--mock-data with --model-family bert: give a sentence-level --data-path "
			       "(mgt-preprocess --split-sentences)");
	return MGT_OK;
}

/* The fp8 flags by Megatron's rules (megatron/core/transformer/transformer_config.py
 * __post_init__, megatron/training/arguments.py _add_transformer_engine_args) into a->fp8. */
static mgt_status check_fp8(mgt_args *a)
{
	mgt_fp8_recipe *r = &a->fp8;
	memset(r, 0, sizeof *r);
	const char *f = a->fp8_format, *rc = a->fp8_recipe, *al = a->fp8_amax_compute_algo;
	if (!f) {
		if (a->fp8_param_gather)
			return mgt_err(MGT_ERR_USAGE, "--fp8-param-gather needs --fp8-format (fp8 parameters are kept only "
				       "for fp8 training)");
		return MGT_OK;
	}
	if (strcmp(f, "e4m3") && strcmp(f, "hybrid"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-format: expected e4m3 or hybrid, got '%s'", f);
	r->format = !strcmp(f, "e4m3") ? MGT_FP8_FMT_E4M3 : MGT_FP8_FMT_HYBRID;
	if (!strcmp(rc, "mxfp8"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-recipe mxfp8: MXFP8 runs on Blackwell GPUs only (Transformer Engine "
			       "enables it for compute capability 10.x and 11.x); use delayed or tensorwise");
	if (!strcmp(rc, "blockwise"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-recipe blockwise is not implemented (128x128 block scales, "
			       "software-emulated GEMMs on Hopper); use delayed or tensorwise");
	if (!strcmp(rc, "custom"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-recipe custom needs --fp8-quantizer-factory, a Python class: "
			       "not available in mgt; use delayed or tensorwise");
	if (strcmp(rc, "delayed") && strcmp(rc, "tensorwise"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-recipe: expected delayed or tensorwise, got '%s'", rc);
	r->recipe = !strcmp(rc, "delayed") ? MGT_FP8_DELAYED : MGT_FP8_TENSORWISE;
	if (strcmp(al, "most_recent") && strcmp(al, "max"))
		return mgt_err(MGT_ERR_USAGE, "--fp8-amax-compute-algo: expected most_recent or max, got '%s'", al);
	r->algo = !strcmp(al, "max") ? MGT_FP8_AMAX_MAX : MGT_FP8_AMAX_MOST_RECENT;
	if (a->fp8_margin < -64 || a->fp8_margin > 64)
		return mgt_err(MGT_ERR_USAGE, "--fp8-margin %lld: expected -64 to 64", (long long)a->fp8_margin);
	r->margin = (int)a->fp8_margin;
	r->history_len = (int)(a->fp8_amax_history_len > 1 << 20 ? 1 << 20 : a->fp8_amax_history_len);
	if (a->fp8_param_gather && !a->use_distributed_optimizer)
		return mgt_err(MGT_ERR_USAGE, "--fp8-param-gather needs --use-distributed-optimizer, or --use-megatron-fsdp "
			       "with --data-parallel-sharding-strategy optim or beyond (as in Megatron: the fp8 parameters "
			       "are all-gathered by it)");
	r->param_gather = a->fp8_param_gather;
	if (!a->first_last_layers_bf16) return MGT_OK;
	if (r->recipe == MGT_FP8_DELAYED)
		return mgt_err(MGT_ERR_USAGE, "--first-last-layers-bf16: delayed scaling does not support first / last "
			       "layers in bf16 (as in Megatron); use --fp8-recipe tensorwise");
	int64_t per = a->model.num_layers / (a->pipeline_model_parallel_size > 0 ? a->pipeline_model_parallel_size : 1);
	if (a->num_layers_at_start_in_bf16 > per || a->num_layers_at_end_in_bf16 > per)
		return mgt_err(MGT_ERR_USAGE, "--num-layers-at-start-in-bf16 %lld / --num-layers-at-end-in-bf16 %lld: "
			       "expected 0 to num_layers / pipeline size (%lld)", (long long)a->num_layers_at_start_in_bf16,
			       (long long)a->num_layers_at_end_in_bf16, (long long)per);
	r->bf16_start = (int)a->num_layers_at_start_in_bf16;
	r->bf16_end = (int)a->num_layers_at_end_in_bf16;
	return MGT_OK;
}

/* Hybrid models (megatron/training/arguments.py, argument_utils.py; hybrid_layer_allocation.py):
 * --hybrid-layer-pattern (or the ratios' pattern over --num-layers) makes the run hybrid and sets
 * --num-layers to its symbols (a different --num-layers given is said in one line); its '|'
 * segments, pp x virtual stages of them, set the virtual pipeline size. */
static mgt_status derive_hybrid(mgt_args *a)
{
	mgt_model_config *c = &a->model;
	bool ratios = a->hybrid_attention_ratio > 0 || a->hybrid_mlp_ratio > 0, hybrid = !strcmp(c->family, "hybrid");
	if (!c->hybrid_layer_pattern[0] && !ratios && !hybrid) return MGT_OK;
	if (!hybrid && c->family[0] && strcmp(c->family, "gpt"))
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern or the hybrid ratios with --model-family %s: hybrid "
			       "layers are decoder layers (--model-family hybrid, Megatron's pretrain_hybrid.py)", c->family);
	snprintf(c->family, sizeof c->family, "hybrid");
	if (c->hybrid_layer_pattern[0] && ratios)
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern with --hybrid-attention-ratio or --hybrid-mlp-ratio: "
			       "give the pattern or the ratios, not both (as Megatron's HybridModel)");
	if (!c->hybrid_layer_pattern[0]) {
		if (c->num_layers < 1 || c->num_layers >= (int64_t)sizeof c->hybrid_layer_pattern)
			return mgt_err(MGT_ERR_USAGE, "--model-family hybrid without --hybrid-layer-pattern: --num-layers %lld "
				       "(expected 1 to %d) for the ratios' pattern", (long long)c->num_layers,
				       (int)sizeof c->hybrid_layer_pattern - 1);
		mgt_status st = mgt_hybrid_pattern_from_ratios(c->num_layers, a->hybrid_attention_ratio, a->hybrid_mlp_ratio,
							       c->hybrid_layer_pattern);
		if (st) return st;
	}
	int64_t n, pp = a->pipeline_model_parallel_size;
	int segs;
	mgt_status st = mgt_hybrid_pattern_check(c->hybrid_layer_pattern, pp > 0 ? (int)pp : 1, &n, &segs);
	if (st) return st;
	if (c->num_layers && c->num_layers != n) {
		char why[96];
		snprintf(why, sizeof why, "%lld given; --hybrid-layer-pattern has %lld layers, which win (as in Megatron)",
			 (long long)c->num_layers, (long long)n);
		if ((st = args_note_ignored(a, "num-layers", why))) return st;
	}
	c->num_layers = n;
	if (segs > 1 && (a->num_layers_per_virtual_pipeline_stage > 0 || a->num_virtual_stages_per_pipeline_rank > 0))
		return mgt_err(MGT_ERR_USAGE, "--hybrid-layer-pattern with '|' and virtual pipeline flags: the %d segments "
			       "already give %lld virtual stages per pipeline rank", segs, (long long)(segs / pp));
	if (segs > pp) a->virtual_pipeline_model_parallel_size = segs / pp;
	return MGT_OK;
}

static const char *const sharding_names[] = { "no_shard", "optim", "optim_grads", "optim_grads_params" };

const char *mgt_args_sharding_name(mgt_dp_sharding s) { return sharding_names[s]; }

/* What FSDP's combinations with other flags Megatron refuses, or mgt does not implement. */
static mgt_status check_sharding(const mgt_args *a)
{
	const char *f = a->use_torch_fsdp2 ? "--use-torch-fsdp2" : "--data-parallel-sharding-strategy";
	const char *v = a->use_torch_fsdp2 ? "" : sharding_names[a->dp_sharding];
	if (a->use_torch_fsdp2 && a->use_distributed_optimizer)
		return mgt_err(MGT_ERR_USAGE, "--use-torch-fsdp2 with --use-distributed-optimizer: FSDP2 shards the "
			       "optimizer itself (as in Megatron, which refuses both)");
	if (a->use_torch_fsdp2 && (a->pipeline_model_parallel_size > 1 || a->fp16))
		return mgt_err(MGT_ERR_USAGE, "--use-torch-fsdp2 with %s: Megatron runs FSDP2 without pipeline parallelism "
			       "and fp16; use --use-megatron-fsdp", a->fp16 ? "--fp16" : "--pipeline-model-parallel-size > 1");
	if (a->dp_sharding < MGT_DP_OPTIM_GRADS) return MGT_OK;
	if (a->grad_reduce_in_bf16)
		return mgt_err(MGT_ERR_USAGE, "%s %s with --grad-reduce-in-bf16: sharded gradients are kept in fp32; "
			       "--megatron-fsdp-grad-comm-dtype bf16 reduce-scatters them in bf16", f, v);
	return MGT_OK;
}

/* --megatron-fsdp-grad-comm-dtype (Megatron's megatron_fsdp_grad_comm_dtype,
 * megatron/core/distributed/distributed_data_parallel_config.py: the gradients' reduce-scatter
 * or all-reduce type; auto is the main gradients', fp32 in mgt) into grad_comm_t; read with
 * --use-megatron-fsdp only, as in Megatron (said in one line otherwise). */
static mgt_status derive_grad_comm(mgt_args *a)
{
	const char *s = a->megatron_fsdp_grad_comm_dtype ? a->megatron_fsdp_grad_comm_dtype : "auto";
	a->grad_comm_t = a->grad_reduce_in_bf16 ? MGT_DT_BF16 : MGT_DT_F32;
	if (strcmp(s, "auto") && strcmp(s, "fp32") && strcmp(s, "bf16") && strcmp(s, "fp16"))
		return mgt_err(MGT_ERR_USAGE, "--megatron-fsdp-grad-comm-dtype: expected fp32, fp16, bf16 or auto, got '%s'", s);
	if (!strcmp(s, "auto") || !strcmp(s, "fp32")) return MGT_OK;
	if (!a->use_megatron_fsdp)
		return args_note_ignored(a, "megatron-fsdp-grad-comm-dtype", "read by Megatron-FSDP only (--use-megatron-fsdp)");
	a->grad_comm_t = !strcmp(s, "bf16") ? MGT_DT_BF16 : MGT_DT_F16;
	return MGT_OK;
}

/* FSDP (megatron/training/arguments.py validate_args: --use-megatron-fsdp forces
 * --use-distributed-optimizer; --use-torch-fsdp2's reshard_after_forward) into dp_sharding. */
static mgt_status derive_sharding(mgt_args *a)
{
	a->dp_sharding = a->use_distributed_optimizer ? MGT_DP_OPTIM : MGT_DP_NO_SHARD;
	if (a->torch_fsdp2_no_reshard_after_forward && !a->use_torch_fsdp2)
		return mgt_err(MGT_ERR_USAGE, "--torch-fsdp2-no-reshard-after-forward needs --use-torch-fsdp2");
	if (a->use_megatron_fsdp && a->use_torch_fsdp2)
		return mgt_err(MGT_ERR_USAGE, "--use-megatron-fsdp with --use-torch-fsdp2: choose one FSDP");
	if (a->use_torch_fsdp2) {
		a->dp_sharding = a->torch_fsdp2_no_reshard_after_forward ? MGT_DP_OPTIM_GRADS : MGT_DP_OPTIM_GRADS_PARAMS;
		mgt_status st = check_sharding(a);
		a->use_distributed_optimizer = true; /* the optimizer steps the shards */
		return st;
	}
	if (!a->use_megatron_fsdp) return MGT_OK;
	const char *s = a->data_parallel_sharding_strategy ? a->data_parallel_sharding_strategy : "optim_grads_params";
	int k = 0;
	while (k < 4 && strcmp(s, sharding_names[k])) k++;
	if (k == 4)
		return mgt_err(MGT_ERR_USAGE, "--data-parallel-sharding-strategy: expected no_shard, optim, optim_grads or "
			       "optim_grads_params, got '%s'", s);
	a->dp_sharding = (mgt_dp_sharding)k;
	a->use_distributed_optimizer = k >= MGT_DP_OPTIM;
	return check_sharding(a);
}

/* --num-distributed-optimizer-instances N > 1 (megatron/core/distributed/distributed_data_parallel.py:
 * "Partial DistOpt cannot be used without DistOpt"; parallel_state.py: N divides the data x
 * context-parallel size and the expert-data-parallel size).  mgt runs it for the distributed
 * optimizer and Megatron-FSDP's optim, optim_grads and optim_grads_params (HSDP with
 * --outer-dp-sharding-strategy no_shard); FSDP's no_shard, FSDP2, the fp8 parameter gather and
 * the 16-bit reduction of sharded gradients (--megatron-fsdp-grad-comm-dtype) with instances are
 * not implemented.  After derive_sharding and derive_moe. */
static mgt_status check_instances(const mgt_args *a)
{
	const char *f = "--num-distributed-optimizer-instances";
	long long n = (long long)a->num_distributed_optimizer_instances, dpc = (long long)(a->data_parallel_size * a->context_parallel_size);
	long long edp = (long long)a->expert_data_parallel_size;
	if (n <= 1) return MGT_OK;
	if (a->use_megatron_fsdp && a->dp_sharding == MGT_DP_NO_SHARD)
		return mgt_err(MGT_ERR_USAGE, "%s %lld with --data-parallel-sharding-strategy no_shard: Megatron-FSDP's "
			       "hybrid all-reduce of unsharded gradients is not implemented; use optim, optim_grads or "
			       "optim_grads_params", f, n);
	if (!a->use_distributed_optimizer)
		return mgt_err(MGT_ERR_USAGE, "%s %lld needs --use-distributed-optimizer: the instances are replicas of the "
			       "distributed optimizer (Megatron: Partial DistOpt cannot be used without DistOpt)", f, n);
	if (a->use_torch_fsdp2)
		return mgt_err(MGT_ERR_USAGE, "%s %lld with --use-torch-fsdp2: FSDP2's hybrid sharding is not implemented; "
			       "use --use-megatron-fsdp", f, n);
	if (a->fp8_param_gather)
		return mgt_err(MGT_ERR_USAGE, "%s %lld with --fp8-param-gather: the fp8 parameter gather within an instance "
			       "is not implemented", f, n);
	if (a->use_megatron_fsdp && a->dp_sharding >= MGT_DP_OPTIM_GRADS && a->grad_comm_t != MGT_DT_F32)
		return mgt_err(MGT_ERR_USAGE, "%s %lld with --megatron-fsdp-grad-comm-dtype %s: the 16-bit gradient "
			       "reduction of sharded gradients within an instance is not implemented", f, n,
			       a->megatron_fsdp_grad_comm_dtype ? a->megatron_fsdp_grad_comm_dtype : "auto");
	if (dpc % n)
		return mgt_err(MGT_ERR_USAGE, "%s %lld does not divide the data-parallel size %lld (x --context-parallel-size "
			       "%lld): world %lld / (--tensor-model-parallel-size x --pipeline-model-parallel-size)", f, n,
			       (long long)a->data_parallel_size, (long long)a->context_parallel_size,
			       (long long)(a->world_size ? a->world_size : 1));
	if (edp % n)
		return mgt_err(MGT_ERR_USAGE, "%s %lld does not divide the expert-data-parallel size %lld (the data-parallel "
			       "size / --expert-model-parallel-size %lld)", f, n, edp, (long long)a->expert_model_parallel_size);
	return MGT_OK;
}

mgt_status mgt_args_finalize(mgt_args *a)
{
	mgt_status st = derive_hybrid(a);
	if (!st) st = derive_parallel(a);
	if (!st) st = derive_recompute(a);
	if (st) return st;
	if (a->micro_batch_size <= 0) return mgt_err(MGT_ERR_USAGE, "--micro-batch-size must be given and positive");
	if ((st = derive_sharding(a)) || (st = derive_grad_comm(a)) || (st = check_precision(a)) || (st = check_fp8(a)) || (st = check_family_flags(a)) || (st = check_encdec(a)) ||
	    (st = check_bert(a)) || (st = check_packed(a)))
		return st;
	if (a->calculate_per_token_loss && a->model.num_experts > 0)
		return mgt_err(MGT_ERR_USAGE, "--calculate-per-token-loss with --num-experts is not implemented (the "
			       "auxiliary losses' scaling)");
	if (a->ckpt_step && !a->load)
		return mgt_err(MGT_ERR_USAGE, "--ckpt-step %lld needs --load (the checkpoint directory to load it from)",
			       (long long)a->ckpt_step);
	if (a->ckpt_format && strcmp(a->ckpt_format, "hdf5"))
		return mgt_err(MGT_ERR_USAGE, "--ckpt-format %s: mgt-train writes hdf5 checkpoints only (mgt-ckpt(5)); "
			       "Megatron-LM's torch, torch_dist and fsdp_dtensor checkpoints are read through --load or "
			       "--pretrained-checkpoint DIR (mgt-megatron(5)) and written by mgt-ckpt-convert", a->ckpt_format);
	if (a->overlap_grad_reduce && a->ddp_bucket_size <= 0)
		a->ddp_bucket_size = mgt_args_ddp_bucket_size(a->data_parallel_size);
	const char *dev = a->device ? a->device : "auto";
	if (strcmp(dev, "auto") && strcmp(dev, "cpu") && strcmp(dev, "cuda"))
		return mgt_err(MGT_ERR_USAGE, "--device: expected auto, cpu or cuda, got '%s'", dev);
	if (!a->global_batch_size) a->global_batch_size = a->micro_batch_size * a->data_parallel_size;
	int64_t per = a->micro_batch_size * a->data_parallel_size;
	if (a->global_batch_size <= 0 || a->global_batch_size % per)
		return mgt_err(MGT_ERR_USAGE, "--global-batch-size %lld is not a multiple of micro-batch size x "
			       "data-parallel size (%lld)", (long long)a->global_batch_size, (long long)per);
	a->num_microbatches = a->global_batch_size / per;
	st = derive_run_length(a);
	if (!st) st = mgt_model_config_finalize(&a->model, (int)a->tensor_model_parallel_size);
	if (!st) st = derive_moe(a);
	return st ? st : check_instances(a);
}
