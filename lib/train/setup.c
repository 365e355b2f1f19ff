/* lib/train/setup.c: setup: the tokenizer, the learning-rate schedule, the backend, the model
 * chunks and their schedules, the optimizer state, the parameters (initialized or loaded), and
 * teardown (megatron/training/training.py: setup_model_and_optimizer). */
#include "train_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static mgt_status setup_tokenizer(trainer *t)
{
	mgt_args *a = t->a;
	if (!a->tokenizer_type && a->vocab_file && a->merge_file) {
		/* Megatron's GPT example passes only the vocabulary and merges files */
		if (!(a->tokenizer_type = mgt_strdup("GPT2BPETokenizer"))) return MGT_ERR_NOMEM;
		if (t->io->log) fprintf(t->io->log, "WARNING: no --tokenizer-type: GPT2BPETokenizer, from --vocab-file and --merge-file\n");
	}
	if (!a->tokenizer_type && a->vocab_file && mgt_model_family(&a->model)->recipe == MGT_STACK_ENCODER) {
		/* pretrain_bert.py's default --tokenizer-type */
		if (!(a->tokenizer_type = mgt_strdup("BertWordPieceLowerCase"))) return MGT_ERR_NOMEM;
		if (t->io->log) fprintf(t->io->log, "WARNING: no --tokenizer-type: BertWordPieceLowerCase, pretrain_bert.py's default\n");
	}
	if (!a->tokenizer_type) {
		if (!a->mock_data)
			return mgt_err(MGT_ERR_USAGE, "--tokenizer-type is required with --data-path");
		a->model.vocab_size = a->vocab_size ? a->vocab_size : 50257; /* GPT-2's, for mock data */
		t->eod = (int32_t)(a->model.vocab_size - 1);
		return MGT_OK;
	}
	mgt_tok_opts o = {
		.type = a->tokenizer_type, .vocab_file = a->vocab_file, .merge_file = a->merge_file,
		.model = a->tokenizer_model, .tiktoken_pattern = a->tiktoken_pattern,
		.tiktoken_num_special = (int)a->tiktoken_num_special_tokens, .vocab_size = a->vocab_size,
		.null_eod_id = a->null_tokenizer_eod_id,
	};
	if (a->sft && strcmp(a->tokenizer_type, "SFTTokenizer") && strcmp(a->tokenizer_type, "HuggingFaceTokenizer"))
		return mgt_err(MGT_ERR_USAGE, "--sft with --tokenizer-type %s: Megatron's SFT reads a Hugging Face "
			       "tokenizer (--tokenizer-type SFTTokenizer --tokenizer-model DIR)", a->tokenizer_type);
	o.hf_no_special_tokens = a->sft; /* SFTTokenizer: add_special_tokens=False */
	mgt_status st = mgt_tok_load(&t->tok, &o);
	if (st) return st;
	a->model.vocab_size = mgt_tok_vocab_size(t->tok);
	t->eod = mgt_tok_eod(t->tok);
	return MGT_OK;
}

static mgt_status setup_schedule(trainer *t)
{
	mgt_args *a = t->a;
	mgt_lr_sched *s = &t->sched;
	int64_t gbs = a->global_batch_size;
	memset(s, 0, sizeof *s);
	s->max_lr = a->lr;
	s->min_lr = a->min_lr;
	s->init_lr = a->lr_warmup_init;
	s->decay_steps = a->lr_decay_samples ? a->lr_decay_samples
			 : (a->lr_decay_iters ? a->lr_decay_iters : a->train_iters) * gbs;
	if (a->lr_warmup_fraction >= 0) s->warmup_steps = (int64_t)(a->lr_warmup_fraction * (double)s->decay_steps);
	else s->warmup_steps = a->lr_warmup_samples ? a->lr_warmup_samples : a->lr_warmup_iters * gbs;
	s->wsd_decay_steps = a->lr_wsd_decay_iters * gbs;
	snprintf(s->style, sizeof s->style, "%s", a->lr_decay_style ? a->lr_decay_style : "linear");
	snprintf(s->wsd_style, sizeof s->wsd_style, "%s", a->lr_wsd_decay_style ? a->lr_wsd_decay_style : "exponential");
	return mgt_lr_sched_check(s);
}

/* One AdamW state per range this rank steps: each chunk's whole buffer, or with the distributed
 * optimizer its shard of every bucket (megatron/core/optimizer/distrib_optimizer.py). */
static mgt_status setup_optimizer(trainer *t)
{
	mgt_args *a = t->a;
	int n = 0;
	for (int c = 0; c < t->V; c++) n += a->use_distributed_optimizer ? mgt_model_tensors(t->chunk[c])->nbuckets : 1;
	if (!(t->shard = mgt_malloc((size_t)n * sizeof *t->shard))) return MGT_ERR_NOMEM;
	memset(t->shard, 0, (size_t)n * sizeof *t->shard);
	for (int c = 0; c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		for (int b = 0; b < (a->use_distributed_optimizer ? tt->nbuckets : 1); b++) {
			opt_shard *s = &t->shard[t->nshard++];
			const mgt_comm *g = a->use_distributed_optimizer ? trainer_bucket_comm(t, &tt->buckets[b]) : NULL;
			int dp = g ? g->size : 1, d = g ? g->rank : 0;
			size_t per = a->use_distributed_optimizer ? tt->buckets[b].numel / (size_t)dp : tt->buf_numel;
			s->chunk = c;
			s->lo = a->use_distributed_optimizer ? tt->buckets[b].offset + (size_t)d * per : 0;
			s->hi = s->lo + per;
			mgt_status st = mgt_adamw_init(&s->opt, t->be, per);
			if (st) return st;
			s->opt.beta1 = a->adam_beta1;
			s->opt.beta2 = a->adam_beta2;
			s->opt.eps = a->adam_eps;
			s->opt.weight_decay = a->weight_decay;
			s->opt.clip_grad = a->clip_grad;
		}
	}
	return MGT_OK;
}

mgt_model_layout trainer_chunk_layout(const trainer *t, int c)
{
	const mgt_args *a = t->a;
	return (mgt_model_layout){
		.mbs = (int)a->micro_batch_size, .stage = c * t->ps.pp + t->ps.pp_rank, .num_stages = t->ps.pp * t->V,
		.slots = t->slots[c], .sequence_parallel = a->sequence_parallel,
		.distributed_optimizer = a->use_distributed_optimizer, .dp = t->ps.idp_comm->size, .bucket_size = a->dp_sharding >= MGT_DP_OPTIM_GRADS ? MGT_BUCKETS_PER_LAYER : a->ddp_bucket_size,
		.recompute = a->recompute, .cp_comm = a->cp_comm,
		.precision = a->bf16 ? MGT_PREC_BF16 : a->fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32,
		.fp32_residual_connection = a->fp32_residual_connection, .fp8 = a->fp8,
		.packed_sequences = a->reset_attention_mask || a->sft,
		.sharding = a->dp_sharding, .edp = t->ps.iedp_comm ? t->ps.iedp_comm->size : 0,
	};
}

/* The model chunks of this rank and the schedules that drive them. */
static mgt_status setup_pipeline(trainer *t)
{
	mgt_args *a = t->a;
	int P = t->ps.pp, r = t->ps.pp_rank, M = (int)a->num_microbatches;
	int G = (int)a->microbatch_group_size_per_vp_stage;
	t->V = a->virtual_pipeline_model_parallel_size > 0 ? (int)a->virtual_pipeline_model_parallel_size : 1;
	mgt_status st = mgt_parallel_sched_check(P, M, t->V, G);
	if (!st) st = mgt_parallel_sched_build(P, r, M, t->V, G, false, &t->acts, &t->n_acts);
	if (!st) st = mgt_parallel_sched_build(P, r, M, t->V, G, true, &t->eval_acts, &t->n_eval_acts);
	if (st) return st;
	t->chunk = mgt_malloc((size_t)t->V * sizeof *t->chunk);
	t->slots = mgt_malloc((size_t)t->V * sizeof *t->slots);
	t->mb_scale = mgt_malloc((size_t)M * sizeof *t->mb_scale);
	if (!t->chunk || !t->slots || !t->mb_scale) return MGT_ERR_NOMEM;
	memset(t->chunk, 0, (size_t)t->V * sizeof *t->chunk);
	for (int64_t l = 0; l < a->model.num_layers; l++) t->moe.n += mgt_moe_is_layer(&a->model, l);
	if (t->moe.n) {
		size_t n = (size_t)t->moe.n;
		if (!(t->moe.aux = mgt_malloc(n * (size_t)(2 + a->model.num_experts) * sizeof(double)))) return MGT_ERR_NOMEM;
		t->moe.z = t->moe.aux + n; /* one buffer: the statistics are reduced in one call */
		t->moe.tok = t->moe.z + n;
	}
	for (int c = 0; c < t->V; c++) t->slots[c] = mgt_parallel_sched_chunk_slots(t->acts, t->n_acts, c);
	st = trainer_check_memory(t);
	for (int c = 0; !st && c < t->V; c++) {
		mgt_model_layout L = trainer_chunk_layout(t, c);
		st = mgt_model_create(&t->chunk[c], &a->model, &L, t->be, &t->ps);
	}
	t->model = t->chunk[0];
	return st;
}

static mgt_status init_params(trainer *t)
{
	mgt_status st = MGT_OK;
	for (int c = 0; !st && c < t->V; c++)
		st = trainer_fsdp_params(t) ? trainer_fsdp_init_params(t, t->chunk[c], (uint64_t)t->a->seed)
					    : mgt_model_init_params(t->chunk[c], (uint64_t)t->a->seed);
	return st;
}

/* The GPU of this process: its rank on the node (OpenMPI, Slurm) modulo the GPUs it sees. */
static int local_device(const trainer *t, int ndev)
{
	const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	if (!v) v = getenv("SLURM_LOCALID");
	int r = v ? atoi(v) : t->ps.world_rank;
	return (r < 0 ? 0 : r) % ndev;
}

/* --device: the CUDA backend for cuda (or auto with a GPU present), else the CPU backend; the
 * GEMM precision from --bf16/--fp16; the fp16 loss scaler. */
static mgt_status setup_backend(trainer *t)
{
	mgt_args *a = t->a;
	const char *dev = a->device ? a->device : "auto";
	int ndev = strcmp(dev, "cpu") ? mgt_backend_cuda_devices() : 0;
	mgt_status st = MGT_OK;
	if (!strcmp(dev, "cuda") && ndev == 0) {
		t->be = mgt_backend_cuda_create(0, &st); /* says why: no CUDA build, no GPU */
		if (!t->be && !st) st = mgt_err(MGT_ERR_USAGE, "--device cuda: no CUDA device");
	} else if (ndev > 0) {
		t->be = mgt_backend_cuda_create(local_device(t, ndev), &st);
	} else if (!(t->be = mgt_backend_cpu_create((int)a->threads))) {
		st = MGT_ERR_NOMEM;
	}
	if (st || !t->be) return st ? st : MGT_ERR_NOMEM;
	t->be->precision = a->bf16 ? MGT_PREC_BF16 : a->fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32;
	char why[256];
	if (a->fp8.format != MGT_FP8_OFF && !mgt_backend_supports(t->be, MGT_OP_gemm_fp8, mgt_precision_dtype(t->be->precision), why, sizeof why))
		return mgt_err(MGT_ERR_USAGE, "--fp8-format %s: %s (or run on the CPU with --device cpu)", a->fp8_format, why);
	if (!a->fp16) return mgt_loss_scaler_init(&t->scaler, 1.0, 1.0, 1.0, 1, 1);
	return mgt_loss_scaler_init(&t->scaler, a->loss_scale, a->initial_loss_scale, a->min_loss_scale,
				    a->loss_scale_window, a->hysteresis);
}

mgt_status trainer_setup(trainer *t)
{
	mgt_args *a = t->a;
	a->world_size = mgt_parallel_world_size();
	mgt_status st = t->eval_only ? MGT_OK : trainer_plan_check(t);
	if (!st) st = trainer_checkpoint_args(a);
	if (!st) st = trainer_default_split(t);
	if (!st) st = setup_tokenizer(t);
	if (!st) st = mgt_args_finalize(a);
	if (!st && !t->eval_only && mgt_parallel_world_rank() == 0) st = trainer_preflight(a);
	if (!t->eval_only) st = mgt_parallel_agree_root(st); /* rank 0's refusal ends every rank alike */
	if (!st && a->debug_dump && a->world_size > 1)
		st = mgt_err(MGT_ERR_USAGE, "--debug-dump works with one process only");
	if (!st) st = mgt_parallel_init_hsdp(&t->ps, (int)a->tensor_model_parallel_size, (int)a->pipeline_model_parallel_size,
					     (int)a->context_parallel_size,
					     a->expert_model_parallel_size > 0 ? (int)a->expert_model_parallel_size : 1,
					     (int)a->num_distributed_optimizer_instances);
	if (st) return st;
	if ((st = setup_backend(t))) return st;
	/* the data-parallel collectives on a stream of their own: overlapped buckets, FSDP */
	bool side = a->overlap_grad_reduce || a->dp_sharding >= MGT_DP_OPTIM_GRADS;
	if ((st = mgt_parallel_to_device(&t->ps, t->be, side))) return st;
	t->rss_baseline = trainer_peak_rss();
	if (!t->be->host_memory) {
		char what[64];
		t->dev_free0 = mgt_backend_cuda_mem_available(t->be, what, sizeof what);
	}
	st = setup_pipeline(t);
	if (!st && !t->eval_only) st = trainer_log_start(t);
	if (!st) st = setup_schedule(t);
	if (!st) st = trainer_plan_overlap(t);
	if (!st) st = trainer_fsdp_setup(t);
	if (!st) st = trainer_alloc_grad16(t);
	if (!st && !t->eval_only) st = setup_optimizer(t);
	bool loaded = false;
	if (!st) st = trainer_load(t, &loaded);
	if (!st && !loaded && t->eval_only)
		st = mgt_err(MGT_ERR_FORMAT, "--load %s: no checkpoint to evaluate (no %s, no iteration)",
			     a->load ? a->load : "(none)", MGT_CKPT_TRACKER);
	if (!st && loaded) trainer_fsdp_shard_params(t);
	if (!st && !loaded) st = init_params(t);
	for (int c = 0; !st && !t->eval_only && c < t->V; c++) st = trainer_gather_params(t, t->chunk[c], true);
	if (!st) st = trainer_open_data(t);
	if (!st) st = trainer_alloc_batch(t);
	if (!st && a->metrics_file && t->io->log && !(t->out.metrics = fopen(a->metrics_file, t->iteration ? "a" : "w")))
		st = mgt_err(MGT_ERR_IO, "%s: cannot open for writing", a->metrics_file);
	if (!st && a->fp8_trace && t->ps.world_rank == 0 && !(t->out.fp8_trace = fopen(a->fp8_trace, t->iteration ? "a" : "w")))
		st = mgt_err(MGT_ERR_IO, "--fp8-trace %s: cannot open for writing", a->fp8_trace);
	if (!st && a->comm_log) {
		char path[4096];
		snprintf(path, sizeof path, "%s.rank%d.jsonl", a->comm_log, t->ps.world_rank);
		if (!(t->out.comm_log = fopen(path, t->iteration ? "a" : "w")))
			st = mgt_err(MGT_ERR_IO, "%s: cannot open for writing", path);
	}
	return st;
}

void trainer_teardown(trainer *t)
{
	trainer_save_abandon(t);
	if (t->out.metrics) fclose(t->out.metrics);
	if (t->out.comm_log) fclose(t->out.comm_log);
	if (t->out.fp8_trace) fclose(t->out.fp8_trace);
	trainer_dump_free(t);
	trainer_free_batch(t);
	for (int i = 0; i < t->nshard; i++) mgt_adamw_free(&t->shard[i].opt);
	free(t->shard);
	json_decref((json_t *)t->hf_meta);
	trainer_fsdp_free(t); /* before the chunks: their sizes size the side buffers */
	for (int c = 0; t->chunk && c < t->V; c++) mgt_model_free(t->chunk[c]);
	free(t->chunk);
	free(t->slots);
	free(t->mb_scale);
	free(t->moe.aux); /* moe.z and moe.tok point into it */
	free(t->moe.first);
	for (int c = 0; t->ddp.bucket_ready && c < t->V; c++) free(t->ddp.bucket_ready[c]);
	free(t->ddp.bucket_ready);
	free(t->ddp.last_bwd);
	free(t->ddp.buckets_done);
	for (int c = 0; t->ddp.g16 && c < t->V; c++) t->be->ops->free(t->be, t->ddp.g16[c]);
	free(t->ddp.g16);
	free(t->acts);
	free(t->eval_acts);
	mgt_gpt_data_close(t->data);
	trainer_masked_free(t);
	trainer_sft_free(t);
	if (t->ps.world) mgt_parallel_free(&t->ps); /* device communicators need the backend */
	if (t->be) mgt_backend_destroy(t->be);
	mgt_tok_free(t->tok);
}
