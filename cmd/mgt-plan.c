/* mgt-plan: choose the parallel layout (TP, PP, virtual stages, DP, micro-batch size,
 * recomputation, distributed optimizer or FSDP, sequence parallelism) for a model on a cluster.
 *
 *   mgt-plan --model NAME|FILE|DIR --cluster NAME|FILE --global-batch-size N [--bf16] [--explain]
 *            [--output plans.json]
 *
 * Manual: man/man1/mgt-plan.1, man/man5/mgt-plan.5.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "convert/convert.h"
#include "plan/plan.h"
#include "args/args.h"

static const char PROG[] = "mgt-plan";

enum {
	OPT_MODEL = CLI_FIRST_FREE, OPT_CLUSTER, OPT_NODES, OPT_GPN, OPT_GEMM_BENCH, OPT_GBS, OPT_SEQ, OPT_VOCAB,
	OPT_BF16, OPT_FP16, OPT_FP32RES, OPT_GRADBF16, OPT_FP8, OPT_TP, OPT_PP, OPT_CP, OPT_CPCOMM, OPT_VPL, OPT_VPS, OPT_MBS, OPT_MAX_TP, OPT_MAX_PP, OPT_MAX_MBS,
	OPT_RECOMP, OPT_RECOMP_ACT, OPT_SP, OPT_NO_SP, OPT_DO, OPT_NO_DO, OPT_FSDP, OPT_DPSS, OPT_INST, OPT_OGR, OPT_OPG, OPT_TPCO, OPT_HEADROOM,
	OPT_IGNORE_MEM, OPT_TOP, OPT_OUTPUT, OPT_OVERWRITE, OPT_EXPLAIN, OPT_HELP
};

static void usage(void)
{
	printf("Usage: mgt-plan --model NAME|FILE|DIR --global-batch-size N [OPTION]...\n"
	       "Choose the parallel layout for training a model on a cluster: search tensor, pipeline (with\n"
	       "virtual stages) and data parallelism, micro-batch size, activation recomputation, the\n"
	       "data-parallel sharding (distributed optimizer, FSDP) and sequence parallelism; rank the\n"
	       "layouts that fit by predicted iteration time.  Memory is what mgt-train allocates (its own\n"
	       "sizing code); time is a model of a Megatron-class implementation on the cluster\n"
	       "(mgt-plan(5)).\n\n"
	       "Model and batch:\n"
	       "  --model NAME|FILE|DIR          mgt preset (share/mgt/models), model JSON (mgt-train's keys),\n"
	       "                                 or a Hugging Face config.json or the directory holding it\n"
	       "  --vocab-size N                 vocabulary (required unless the model gives it)\n"
	       "  --seq-length N                 sequence length [the model's]\n"
	       "  --global-batch-size N          sequences an iteration (required)\n"
	       "  --bf16, --fp16                 training precision [fp32]\n"
	       "  --fp32-residual-connection     the residual stream in fp32 under --bf16/--fp16\n"
	       "  --grad-reduce-in-bf16          gradients reduced in bf16 (--bf16 only)\n"
	       "  --fp8-format e4m3|hybrid       the decoder layers' linears in fp8 (the cluster's\n"
	       "                                 fp8_gemm_tflops; GPUs of compute capability 8.9+)\n"
	       "Cluster:\n"
	       "  --cluster NAME|FILE            preset (dgx-h100, dgx-h200, dgx-a100, cpu) or file [dgx-h100]\n"
	       "  --nodes N                      nodes [the cluster's]\n"
	       "  --gpus-per-node N              GPUs (processes) a node [the cluster's]\n"
	       "  --gemm-bench FILE              calibrate GEMM rate and memory bandwidth from a\n"
	       "                                 tests/bench/gpu.sh result file\n"
	       "Layout (given: fixed; not given: searched):\n"
	       "  --tensor-model-parallel-size N\n"
	       "  --pipeline-model-parallel-size N\n"
	       "  --context-parallel-size N      context parallelism (never searched) [1]\n"
	       "  --cp-comm-type p2p|allgather|a2a   the attention layers' exchange under CP [p2p]\n"
	       "  --num-layers-per-virtual-pipeline-stage N\n"
	       "  --num-virtual-stages-per-pipeline-rank N\n"
	       "  --micro-batch-size N\n"
	       "  --max-tensor-model-parallel-size N    [GPUs a node]\n"
	       "  --max-pipeline-model-parallel-size N  [layers]\n"
	       "  --max-micro-batch-size N              [16]\n"
	       "  --recompute-granularity none|selective|full   (full: uniform, 1 layer)\n"
	       "  --recompute-activations        the same as --recompute-granularity selective\n"
	       "  --sequence-parallel, --no-sequence-parallel\n"
	       "  --use-distributed-optimizer, --no-use-distributed-optimizer   (sharding optim, no_shard)\n"
	       "  --use-megatron-fsdp            Megatron-FSDP, sharding by --data-parallel-sharding-strategy\n"
	       "  --data-parallel-sharding-strategy no_shard|optim|optim_grads|optim_grads_params\n"
	       "                                 [optim_grads_params]; without either flag all four are\n"
	       "                                 searched, FSDP's ranked after the others at equal time\n"
	       "  --num-distributed-optimizer-instances N   hybrid sharding: shards over DP/N ranks\n"
	       "                                 (memory only; no_shard and DP not divisible left out)\n"
	       "Overlap (Megatron's; time model only):\n"
	       "  --overlap-grad-reduce          gradient reduction under the last backward\n"
	       "  --overlap-param-gather         parameter all-gather under the first forward\n"
	       "  --tp-comm-overlap              tensor-parallel collectives under the GEMMs (with SP)\n"
	       "Output:\n"
	       "  --memory-headroom F            fraction of GPU memory kept free [0.05]\n"
	       "  --ignore-memory                rank layouts that do not fit too (time only)\n"
	       "  --top N                        plans written [10]\n"
	       "  --output FILE                  plans as JSON (mgt-plan(5)) [standard output]\n"
	       "  --overwrite                    replace an existing --output\n"
	       "  --explain                      print a table of the plans for people\n"
	       "  --help\n\n"
	       "Exit status: 0 ok, 1 no layout fits (the message says why and the smallest cluster that\n"
	       "fits) or a runtime error (I/O), 2 usage error (bad flag, unknown preset, contradictory\n"
	       "constraints, a layout that does not divide), 3 bad input (malformed model, cluster or\n"
	       "config.json, naming the file and key), 5 output exists.\n"
	       "See mgt-plan(1), mgt-plan(5), mgt-train(1).\n");
}

static const struct option longopts[] = {
	{"model", required_argument, 0, OPT_MODEL},
	{"cluster", required_argument, 0, OPT_CLUSTER},
	{"nodes", required_argument, 0, OPT_NODES},
	{"gpus-per-node", required_argument, 0, OPT_GPN},
	{"gemm-bench", required_argument, 0, OPT_GEMM_BENCH},
	{"global-batch-size", required_argument, 0, OPT_GBS},
	{"seq-length", required_argument, 0, OPT_SEQ},
	{"vocab-size", required_argument, 0, OPT_VOCAB},
	{"bf16", no_argument, 0, OPT_BF16},
	{"fp16", no_argument, 0, OPT_FP16},
	{"fp32-residual-connection", no_argument, 0, OPT_FP32RES},
	{"grad-reduce-in-bf16", no_argument, 0, OPT_GRADBF16},
	{"fp8-format", required_argument, 0, OPT_FP8},
	{"tensor-model-parallel-size", required_argument, 0, OPT_TP},
	{"pipeline-model-parallel-size", required_argument, 0, OPT_PP},
	{"context-parallel-size", required_argument, 0, OPT_CP},
	{"cp-comm-type", required_argument, 0, OPT_CPCOMM},
	{"num-layers-per-virtual-pipeline-stage", required_argument, 0, OPT_VPL},
	{"num-virtual-stages-per-pipeline-rank", required_argument, 0, OPT_VPS},
	{"micro-batch-size", required_argument, 0, OPT_MBS},
	{"max-tensor-model-parallel-size", required_argument, 0, OPT_MAX_TP},
	{"max-pipeline-model-parallel-size", required_argument, 0, OPT_MAX_PP},
	{"max-micro-batch-size", required_argument, 0, OPT_MAX_MBS},
	{"recompute-granularity", required_argument, 0, OPT_RECOMP},
	{"recompute-activations", no_argument, 0, OPT_RECOMP_ACT},
	{"sequence-parallel", no_argument, 0, OPT_SP},
	{"no-sequence-parallel", no_argument, 0, OPT_NO_SP},
	{"use-distributed-optimizer", no_argument, 0, OPT_DO},
	{"no-use-distributed-optimizer", no_argument, 0, OPT_NO_DO},
	{"use-megatron-fsdp", no_argument, 0, OPT_FSDP},
	{"data-parallel-sharding-strategy", required_argument, 0, OPT_DPSS},
	{"num-distributed-optimizer-instances", required_argument, 0, OPT_INST},
	{"overlap-grad-reduce", no_argument, 0, OPT_OGR},
	{"overlap-param-gather", no_argument, 0, OPT_OPG},
	{"tp-comm-overlap", no_argument, 0, OPT_TPCO},
	{"memory-headroom", required_argument, 0, OPT_HEADROOM},
	{"ignore-memory", no_argument, 0, OPT_IGNORE_MEM},
	{"top", required_argument, 0, OPT_TOP},
	{"output", required_argument, 0, OPT_OUTPUT},
	{"overwrite", no_argument, 0, OPT_OVERWRITE},
	{"explain", no_argument, 0, OPT_EXPLAIN},
	{"help", no_argument, 0, OPT_HELP},
	{0, 0, 0, 0},
};

/* A Hugging Face config.json (or its directory) rather than a preset or model JSON: a directory,
 * or a JSON object with "model_type". */
static bool is_hf(const char *m)
{
	struct stat sb;
	if (!stat(m, &sb) && S_ISDIR(sb.st_mode)) return true;
	if (!strchr(m, '/') && !strstr(m, ".json")) return false;
	json_t *o = json_load_file(m, 0, NULL);
	bool hf = json_is_object(o) && json_object_get(o, "model_type");
	json_decref(o);
	return hf;
}

/* --model through mgt-train's resolution (mgt_args_parse_argv: preset or model JSON) or
 * mgt-ckpt-convert's config.json reading (mgt_convert_hf_config). */
static mgt_status load_model(const char *m, mgt_args *a)
{
	mgt_status st = mgt_args_init(a);
	if (st) return st;
	if (is_hf(m)) return mgt_convert_hf_config(m, a);
	char *argv[] = { (char *)PROG, (char *)"--model", (char *)m, NULL };
	return mgt_args_parse_argv(a, 3, argv);
}

static const char *gran_name(int g)
{
	return g == MGT_RECOMPUTE_FULL ? "full" : g == MGT_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

static const char *do_name(mgt_dp_sharding s)
{
	return s == MGT_DP_OPTIM_GRADS_PARAMS ? "ogp" : s == MGT_DP_OPTIM_GRADS ? "og" : s == MGT_DP_OPTIM ? "yes" : "no";
}

static json_t *plan_json(const mgt_plan_request *r, const mgt_plan *p, int rank)
{
	json_t *args = json_array();
	char **av = mgt_plan_train_args(r, p);
	for (int i = 0; av && av[i]; i++) json_array_append_new(args, json_string(av[i]));
	free(av);
	json_t *rc = json_pack("{s:s}", "granularity", gran_name(p->recompute.granularity));
	if (p->recompute.granularity == MGT_RECOMPUTE_FULL) {
		json_object_set_new(rc, "method", json_string(p->recompute.method == MGT_RECOMPUTE_BLOCK ? "block" : "uniform"));
		json_object_set_new(rc, "num_layers", json_integer(p->recompute.num_layers));
	}
	/* the sharding under Megatron's names: use_megatron_fsdp for optim_grads and
	 * optim_grads_params (no_shard and optim run as DDP and the distributed optimizer) */
	return json_pack("{s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:s, s:o, s:I, s:b, "
			 "s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i}, "
			 "s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}, s:f, s:f, s:f, s:f, s:o}",
			 "rank", rank, "tensor_model_parallel_size", p->tp, "context_parallel_size", p->cp,
			 "cp_comm_type", r->cp_comm == MGT_CP_A2A ? "a2a" : r->cp_comm == MGT_CP_ALLGATHER ? "allgather" : "p2p",
			 "pipeline_model_parallel_size", p->pp,
			 "virtual_stages_per_pipeline_rank", p->vp, "data_parallel_size", p->dp, "micro_batch_size", p->mbs,
			 "num_microbatches", p->num_microbatches, "gpus", p->gpus, "sequence_parallel", p->sp,
			 "use_distributed_optimizer", p->sharding >= MGT_DP_OPTIM,
			 "use_megatron_fsdp", p->sharding >= MGT_DP_OPTIM_GRADS,
			 "data_parallel_sharding_strategy", mgt_args_sharding_name(p->sharding), "recompute", rc,
			 "ddp_bucket_size", (json_int_t)p->bucket_size,
			 "fits", p->fits,
			 "memory", "parameters", p->mem.params, "gradients", p->mem.grads, "optimizer", p->mem.optimizer,
			 "activations", p->mem.activations, "workspace", p->mem.workspace,
			 "communication", p->mem.communication, "overhead", p->mem.overhead,
			 "total", p->mem.total, "limit", p->mem.limit, "pipeline_rank", p->mem_stage,
			 "time", "compute", p->time.compute, "recompute", p->time.recompute, "tp_comm", p->time.tp_comm,
			 "cp_comm", p->time.cp_comm, "pp_comm", p->time.pp_comm, "bubble", p->time.bubble, "dp_comm", p->time.dp_comm,
			 "optimizer", p->time.optimizer, "iteration", p->time.iteration,
			 "cp_bytes", p->cp_bytes, "model_flops", p->model_flops, "tflops_per_gpu", p->tflops_per_gpu, "mfu", p->mfu, "args", args);
}

static json_t *doc_json(const mgt_plan_request *r, const char *model, const mgt_plan *plans, int n, const mgt_plan_stats *s)
{
	const mgt_model_config *c = &r->model;
	const mgt_cluster *cl = &r->cluster;
	json_t *arr = json_array();
	for (int i = 0; i < n; i++) json_array_append_new(arr, plan_json(r, &plans[i], i + 1));
	return json_pack("{s:s, s:i, s:{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}, "
			 "s:{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f}, s:I, s:I, s:s, s:b, s:b, s:s?, "
			 "s:{s:b, s:b, s:b, s:f}, s:{s:I, s:I, s:f}, s:o}",
			 "format", "mgt-plan", "format_version", 1,
			 "model", "name", model, "num_layers", (json_int_t)c->num_layers, "hidden_size", (json_int_t)c->hidden_size,
			 "ffn_hidden_size", (json_int_t)c->ffn_hidden_size, "num_attention_heads", (json_int_t)c->num_attention_heads,
			 "num_query_groups", (json_int_t)(c->num_query_groups ? c->num_query_groups : c->num_attention_heads),
			 "vocab_size", (json_int_t)c->vocab_size, "seq_length", (json_int_t)c->seq_length, "swiglu", c->swiglu,
			 "cluster", "name", cl->name, "nodes", cl->nodes, "gpus_per_node", cl->gpus_per_node,
			 "gpu_memory_bytes", cl->gpu_memory, "peak_tflops", cl->peak_tflops, "gemm_tflops", cl->gemm_tflops,
			 "fp8_gemm_tflops", mgt_plan_fp8_tflops(cl),
			 "memory_bandwidth_gbps", cl->memory_bandwidth,
			 "global_batch_size", (json_int_t)r->global_batch_size, "seq_length", (json_int_t)c->seq_length,
			 "precision", r->precision == MGT_PLAN_BF16 ? "bf16" : r->precision == MGT_PLAN_FP16 ? "fp16" : "fp32",
			 "fp32_residual_connection", r->fp32_residual_connection, "grad_reduce_in_bf16", r->grad_reduce_in_bf16,
			 "fp8_format", r->fp8 == MGT_FP8_FMT_HYBRID ? "hybrid" : r->fp8 == MGT_FP8_FMT_E4M3 ? "e4m3" : NULL,
			 "overlap", "grad_reduce", r->overlap_grad_reduce, "param_gather", r->overlap_param_gather,
			 "tp_comm", r->tp_comm_overlap, "memory_headroom", r->headroom,
			 "search", "candidates", (json_int_t)s->candidates, "fitting", (json_int_t)s->fitting, "seconds", s->seconds,
			 "plans", arr);
}

/* doc_json with a hybrid model's --hybrid-layer-pattern in its model object. */
static json_t *doc_json_model(const mgt_plan_request *r, const char *model, const mgt_plan *plans, int n,
			      const mgt_plan_stats *s)
{
	json_t *doc = doc_json(r, model, plans, n, s);
	if (doc && r->model.hybrid_layer_pattern[0])
		json_object_set_new(json_object_get(doc, "model"), "hybrid_layer_pattern",
				    json_string(r->model.hybrid_layer_pattern));
	return doc;
}

static void explain(FILE *f, const mgt_plan_request *r, const char *model, const mgt_plan *plans, int n,
		    const mgt_plan_stats *s)
{
	const mgt_cluster *cl = &r->cluster;
	double g = 1024.0 * 1024.0 * 1024.0;
	fprintf(f, "%s on %s: %d node(s) x %d GPUs (%.1f GiB, %.0f TFLOP/s peak), global batch %lld x %lld tokens, %s%s\n",
		model, cl->name, cl->nodes, cl->gpus_per_node, cl->gpu_memory / g, cl->peak_tflops,
		(long long)r->global_batch_size, (long long)r->model.seq_length,
		r->precision == MGT_PLAN_BF16 ? "bf16" : r->precision == MGT_PLAN_FP16 ? "fp16" : "fp32",
		r->fp8 == MGT_FP8_FMT_HYBRID ? ", fp8 hybrid linears" : r->fp8 == MGT_FP8_FMT_E4M3 ? ", fp8 e4m3 linears" : "");
	fprintf(f, "%lld layouts evaluated, %lld fit, in %.2f s\n\n", (long long)s->candidates, (long long)s->fitting, s->seconds);
	fprintf(f, "%-4s %3s %3s %3s %4s %3s %4s %-4s %-4s %-9s | %8s %8s %8s %8s %8s | %9s %7s %7s %7s %7s | %7s %5s\n",
		"rank", "TP", "PP", "VP", "DP", "MBS", "M", "SP", "DO", "recompute", "mem GiB", "params", "optim", "activ",
		"limit", "iter s", "bubble", "TP com", "DP com", "recomp", "TFLOP/s", "MFU");
	for (int i = 0; i < n; i++) {
		const mgt_plan *p = &plans[i];
		fprintf(f, "%-4d %3d %3d %3d %4d %3d %4d %-4s %-4s %-9s | %8.2f %8.2f %8.2f %8.2f %8.2f | %9.3f %7.3f %7.3f %7.3f "
			"%7.3f | %7.1f %4.1f%%%s\n", i + 1, p->tp, p->pp, p->vp, p->dp, p->mbs, p->num_microbatches,
			p->sp ? "yes" : "no", do_name(p->sharding), gran_name(p->recompute.granularity), p->mem.total / g,
			(p->mem.params + p->mem.grads) / g, p->mem.optimizer / g, p->mem.activations / g, p->mem.limit / g,
			p->time.iteration, p->time.bubble, p->time.tp_comm, p->time.dp_comm, p->time.recompute,
			p->tflops_per_gpu, 100 * p->mfu, p->fits ? "" : " (does not fit)");
	}
	if (n) {
		char **av = mgt_plan_train_args(r, &plans[0]);
		fprintf(f, "\nmgt-train flags of plan 1:");
		for (int i = 0; av && av[i]; i++) fprintf(f, " %s", av[i]);
		fprintf(f, "\n");
		free(av);
	}
}

/* --use-megatron-fsdp [--data-parallel-sharding-strategy S]: the strategy fixed (mgt-train's
 * default optim_grads_params), refused where mgt-train refuses it; exits 2 on a bad value or a
 * contradiction. */
static int sharding_arg(int fsdp, const char *s, const mgt_plan_request *r)
{
	if (!fsdp) mgt_cli_usage_error(PROG, "--data-parallel-sharding-strategy needs --use-megatron-fsdp");
	if (r->distopt == 0) mgt_cli_usage_error(PROG, "--use-megatron-fsdp with --no-use-distributed-optimizer: FSDP "
						 "shards the optimizer (Megatron forces the distributed optimizer)");
	int k = 0;
	while (k < 4 && strcmp(s ? s : "optim_grads_params", mgt_args_sharding_name((mgt_dp_sharding)k))) k++;
	if (k == 4)
		mgt_cli_usage_error(PROG, "--data-parallel-sharding-strategy %s: expected no_shard, optim, optim_grads or "
				    "optim_grads_params", s);
	if (k >= MGT_DP_OPTIM_GRADS && r->grad_reduce_in_bf16)
		mgt_cli_usage_error(PROG, "--data-parallel-sharding-strategy %s with --grad-reduce-in-bf16: sharded "
				    "gradients are reduced in fp32 (as in mgt-train)", s ? s : "optim_grads_params");
	return k;
}

static int pos_int(const char *flag, const char *arg)
{
	long long v = mgt_cli_int(PROG, flag, arg);
	if (v < 1 || v > 1 << 30) mgt_cli_usage_error(PROG, "%s %s: expected a positive integer", flag, arg);
	return (int)v;
}

int main(int argc, char **argv)
{
	mgt_plan_request r;
	memset(&r, 0, sizeof r);
	r.recompute = r.sp = r.distopt = r.sharding = -1;
	r.headroom = 0.05;
	const char *model = NULL, *cluster = "dgx-h100", *bench = NULL, *output = NULL;
	int nodes = 0, gpn = 0, vpl = 0, vps = 0, overwrite = 0, want_explain = 0, fsdp = 0;
	const char *strategy = NULL;
	long long seq = 0, vocab = 0;
	bool bf16 = false, fp16 = false;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_MODEL: model = optarg; break;
		case OPT_CLUSTER: cluster = optarg; break;
		case OPT_NODES: nodes = pos_int("--nodes", optarg); break;
		case OPT_GPN: gpn = pos_int("--gpus-per-node", optarg); break;
		case OPT_GEMM_BENCH: bench = optarg; break;
		case OPT_GBS: r.global_batch_size = pos_int("--global-batch-size", optarg); break;
		case OPT_SEQ: seq = pos_int("--seq-length", optarg); break;
		case OPT_VOCAB: vocab = pos_int("--vocab-size", optarg); break;
		case OPT_BF16: bf16 = true; break;
		case OPT_FP16: fp16 = true; break;
		case OPT_FP32RES: r.fp32_residual_connection = true; break;
		case OPT_GRADBF16: r.grad_reduce_in_bf16 = true; break;
		case OPT_FP8:
			if (!strcmp(optarg, "e4m3")) r.fp8 = MGT_FP8_FMT_E4M3;
			else if (!strcmp(optarg, "hybrid")) r.fp8 = MGT_FP8_FMT_HYBRID;
			else mgt_cli_usage_error(PROG, "--fp8-format %s: expected e4m3 or hybrid", optarg);
			break;
		case OPT_TP: r.tp = pos_int("--tensor-model-parallel-size", optarg); break;
		case OPT_PP: r.pp = pos_int("--pipeline-model-parallel-size", optarg); break;
		case OPT_CP: r.cp = pos_int("--context-parallel-size", optarg); break;
		case OPT_CPCOMM:
			if (!strcmp(optarg, "p2p")) r.cp_comm = MGT_CP_P2P;
			else if (!strcmp(optarg, "allgather") || !strcmp(optarg, "all_gather")) r.cp_comm = MGT_CP_ALLGATHER;
			else if (!strcmp(optarg, "a2a")) r.cp_comm = MGT_CP_A2A;
			else mgt_cli_usage_error(PROG, "--cp-comm-type %s: expected p2p, allgather or a2a", optarg);
			break;
		case OPT_VPL: vpl = pos_int("--num-layers-per-virtual-pipeline-stage", optarg); break;
		case OPT_VPS: vps = pos_int("--num-virtual-stages-per-pipeline-rank", optarg); break;
		case OPT_MBS: r.mbs = pos_int("--micro-batch-size", optarg); break;
		case OPT_MAX_TP: r.max_tp = pos_int("--max-tensor-model-parallel-size", optarg); break;
		case OPT_MAX_PP: r.max_pp = pos_int("--max-pipeline-model-parallel-size", optarg); break;
		case OPT_MAX_MBS: r.max_mbs = pos_int("--max-micro-batch-size", optarg); break;
		case OPT_RECOMP:
			if (!strcmp(optarg, "none")) r.recompute = MGT_RECOMPUTE_NONE;
			else if (!strcmp(optarg, "selective")) r.recompute = MGT_RECOMPUTE_SELECTIVE;
			else if (!strcmp(optarg, "full")) r.recompute = MGT_RECOMPUTE_FULL;
			else mgt_cli_usage_error(PROG, "--recompute-granularity %s: expected none, selective or full", optarg);
			break;
		case OPT_RECOMP_ACT: r.recompute = MGT_RECOMPUTE_SELECTIVE; break;
		case OPT_SP: r.sp = 1; break;
		case OPT_NO_SP: r.sp = 0; break;
		case OPT_DO: r.distopt = 1; break;
		case OPT_NO_DO: r.distopt = 0; break;
		case OPT_FSDP: fsdp = 1; break;
		case OPT_DPSS: strategy = optarg; break;
		case OPT_INST: r.instances = pos_int("--num-distributed-optimizer-instances", optarg); break;
		case OPT_OGR: r.overlap_grad_reduce = true; break;
		case OPT_OPG: r.overlap_param_gather = true; break;
		case OPT_TPCO: r.tp_comm_overlap = true; break;
		case OPT_HEADROOM: {
			char *end;
			r.headroom = strtod(optarg, &end);
			if (*end || end == optarg || !(r.headroom >= 0 && r.headroom < 1))
				mgt_cli_usage_error(PROG, "--memory-headroom %s: expected a fraction in [0, 1)", optarg);
			break;
		}
		case OPT_IGNORE_MEM: r.ignore_memory = true; break;
		case OPT_TOP: r.top = pos_int("--top", optarg); break;
		case OPT_OUTPUT: output = optarg; break;
		case OPT_OVERWRITE: overwrite = 1; break;
		case OPT_EXPLAIN: want_explain = 1; break;
		case OPT_HELP: usage(); return 0;
		default: mgt_cli_usage_error(PROG, "unknown option");
		}
	}
	if (optind < argc) mgt_cli_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
	if (!model) mgt_cli_usage_error(PROG, "--model is required");
	if (!r.global_batch_size) mgt_cli_usage_error(PROG, "--global-batch-size is required");
	if (bf16 && fp16) mgt_cli_usage_error(PROG, "--bf16 and --fp16 exclude each other");
	if (r.grad_reduce_in_bf16 && !bf16)
		mgt_cli_usage_error(PROG, "--grad-reduce-in-bf16 needs --bf16 (as in mgt-train and Megatron)");
	if (vpl && vps) mgt_cli_usage_error(PROG, "give one of --num-layers-per-virtual-pipeline-stage and "
					    "--num-virtual-stages-per-pipeline-rank");
	r.precision = bf16 ? MGT_PLAN_BF16 : fp16 ? MGT_PLAN_FP16 : MGT_PLAN_FP32;
	if (fsdp || strategy) r.sharding = sharding_arg(fsdp, strategy, &r);
	if (r.instances > 1 && (r.distopt == 0 || r.sharding == MGT_DP_NO_SHARD))
		mgt_cli_usage_error(PROG, "--num-distributed-optimizer-instances %d needs the distributed optimizer (as in "
				    "mgt-train and Megatron)", r.instances);
	mgt_signals_install();

	mgt_args a;
	mgt_status st = load_model(model, &a);
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	r.model = a.model;
	if (seq) r.model.seq_length = seq;
	if (vocab) r.model.vocab_size = vocab;
	else if (a.vocab_size > 0) r.model.vocab_size = a.vocab_size;
	r.model_arg = is_hf(model) ? NULL : model;
	r.vocab_arg = vocab;
	mgt_args_free(&a);
	if (r.model.vocab_size <= 0)
		mgt_cli_usage_error(PROG, "--model %s gives no vocabulary size: add --vocab-size N", model);
	if (vpl) {
		if (!r.pp) mgt_cli_usage_error(PROG, "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size");
		if (r.model.num_layers % ((int64_t)r.pp * vpl))
			mgt_cli_usage_error(PROG, "--num-layers %lld is not divisible by --pipeline-model-parallel-size %d x "
					    "--num-layers-per-virtual-pipeline-stage %d", (long long)r.model.num_layers, r.pp, vpl);
		r.vp = (int)(r.model.num_layers / ((int64_t)r.pp * vpl));
	}
	if (vps) r.vp = vps;
	if (r.tp_comm_overlap && r.sp == 0)
		mgt_cli_usage_error(PROG, "--tp-comm-overlap needs sequence parallelism (Megatron's rule): drop "
				    "--no-sequence-parallel");

	st = mgt_cluster_load(cluster, &r.cluster);
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	if (nodes) r.cluster.nodes = nodes;
	if (gpn) r.cluster.gpus_per_node = gpn;
	if (bench && (st = mgt_cluster_calibrate(&r.cluster, bench, NULL, 0))) mgt_cli_fail(PROG, st);
	if (r.fp8 != MGT_FP8_OFF && !(mgt_plan_fp8_tflops(&r.cluster) > 0))
		mgt_cli_usage_error(PROG, "--fp8-format: cluster %s gives no fp8 GEMM rate (fp8_gemm_tflops; fp8 needs GPUs of "
				    "compute capability 8.9 or higher): add the key to its file, or give --gemm-bench a "
				    "bench-gpu result of such a GPU (its \"gemm fp8 8192^3\" line)", r.cluster.name);

	mgt_plan *plans;
	int n;
	mgt_plan_stats stats;
	char why[1024];
	st = mgt_plan_search(&r, &plans, &n, &stats, why, sizeof why);
	if (st == MGT_ERR_USAGE) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
	if (st) mgt_cli_fail(PROG, st);
	if (!n) {
		int need = 0;
		st = mgt_plan_smallest_cluster(&r, &need);
		if (st) mgt_cli_fail(PROG, st);
		char more[256];
		if (need)
			snprintf(more, sizeof more, "; the smallest %s cluster that fits has %d nodes (%d GPUs): --nodes %d",
				 r.cluster.name, need, need * r.cluster.gpus_per_node, need);
		else
			snprintf(more, sizeof more, "; no %s cluster of up to 65536 GPUs fits it", r.cluster.name);
		fprintf(stderr, "%s: error: %s on %d x %d GPUs: no layout fits: %s%s\n", PROG, model, r.cluster.nodes,
			r.cluster.gpus_per_node, why, more);
		return 1;
	}
	json_t *doc = doc_json_model(&r, model, plans, n, &stats);
	char *txt = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10)) : NULL;
	json_decref(doc);
	if (!txt) mgt_cli_fail(PROG, mgt_err(MGT_ERR_NOMEM, "out of memory"));
	if (output) {
		mgt_afile af;
		st = mgt_afile_open(&af, output, overwrite);
		if (!st) st = mgt_afile_write(&af, txt, strlen(txt));
		if (!st) st = mgt_afile_write(&af, "\n", 1);
		if (!st) st = mgt_afile_commit(&af);
		else mgt_afile_abort(&af);
		if (st) mgt_cli_fail(PROG, st);
	} else if (!want_explain) {
		printf("%s\n", txt);
	}
	if (want_explain) explain(stdout, &r, model, plans, n, &stats);
	free(txt);
	free(plans);
	return 0;
}
