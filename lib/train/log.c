/* lib/train/log.c: Megatron's iteration log line (megatron/training/training.py training_log), the
 * JSONL metrics file, the TensorBoard scalars (Megatron's training_log and
 * evaluate_and_print_results: the same tags), the memory report and the --debug-dump file. */
#include "train_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "ckpt/ckpt.h"
#include "tb/tb.h"

/* A "Key:  N kB" line of /proc/self/status in bytes (key with its colon), 0 if unknown. */
static size_t proc_status_bytes(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0, n = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, key, n)) kb = strtoull(line + n, NULL, 10);
	if (f) fclose(f);
	return kb * 1024;
}

size_t trainer_peak_rss(void)
{
	return proc_status_bytes("VmHWM:");
}

/* A JSON value as Python's str() prints it (True, None, 6e-05, 0.1, 4294967296.0). */
static void py_str(json_t *v, char *buf, size_t n)
{
	if (json_is_true(v)) snprintf(buf, n, "True");
	else if (json_is_false(v)) snprintf(buf, n, "False");
	else if (json_is_null(v)) snprintf(buf, n, "None");
	else if (json_is_integer(v)) snprintf(buf, n, "%lld", (long long)json_integer_value(v));
	else if (json_is_string(v)) snprintf(buf, n, "%s", json_string_value(v));
	else {
		double x = json_real_value(v);
		for (int p = 1; p <= 17; p++) { /* the shortest form that reads back, as repr */
			snprintf(buf, n, "%.*g", p, x);
			if (strtod(buf, NULL) == x) break;
		}
		if (!strpbrk(buf, ".en")) strncat(buf, ".0", n - strlen(buf) - 1);
	}
}

static int key_cmp(const void *a, const void *b)
{
	return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

/* Megatron's _print_args: every argument, sorted, dotted out to column 48. */
static void log_arguments(trainer *t)
{
	json_t *o = mgt_args_to_json(t->a);
	size_t n = json_object_size(o), k = 0;
	const char **keys = o ? mgt_malloc((n ? n : 1) * sizeof *keys) : NULL;
	const char *key;
	json_t *v;
	if (!keys) {
		json_decref(o);
		return;
	}
	json_object_foreach(o, key, v) keys[k++] = key;
	qsort(keys, n, sizeof *keys, key_cmp);
	FILE *f = t->io->log;
	fprintf(f, "------------------------ arguments ------------------------\n");
	for (size_t i = 0; i < n; i++) {
		char val[512];
		int dots = 48 - (int)strlen(keys[i]);
		py_str(json_object_get(o, keys[i]), val, sizeof val);
		fprintf(f, "  %s %.*s %s\n", keys[i], dots > 0 ? dots : 0,
			"................................................", val);
	}
	fprintf(f, "-------------------- end of arguments ---------------------\n");
	free(keys);
	json_decref(o);
}

/* Megatron's get_model: the parameters of every (tensor, pipeline) position, counted on its
 * first data-parallel and context-parallel rank (all its chunks, the tied embedding's copy included), gathered. */
static mgt_status log_param_counts(trainer *t, double *total)
{
	int tp = t->ps.tp, pp = t->ps.pp;
	double *count = mgt_malloc((size_t)(tp * pp) * sizeof *count);
	if (!count) return MGT_ERR_NOMEM;
	memset(count, 0, (size_t)(tp * pp) * sizeof *count);
	for (int c = 0; t->ps.dp_rank == 0 && t->ps.cp_rank == 0 && c < t->V; c++)
		count[t->ps.pp_rank * tp + t->ps.tp_rank] += (double)mgt_model_tensors(t->chunk[c])->numel;
	mgt_comm *w = t->ps.world;
	mgt_status st = w->size > 1 ? w->ops->allreduce(w, count, (size_t)(tp * pp), MGT_DT_F64, MGT_RED_SUM) : MGT_OK;
	*total = 0;
	for (int i = 0; !st && i < tp * pp; i++) *total += count[i];
	for (int i = 0; !st && t->io->log && i < tp * pp; i++)
		fprintf(t->io->log, " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %.0f\n",
			i % tp, i / tp, count[i]);
	free(count);
	return st;
}

mgt_status trainer_log_start(trainer *t)
{
	FILE *f = t->io->log;
	if (f) log_arguments(t);
	/* ignored_flags holds "--flag: why" lines */
	for (const char *p = t->a->ignored_flags, *e; f && p && (e = strchr(p, '\n')); p = e + 1) {
		const char *colon = strstr(p, ": ");
		fprintf(f, "WARNING: %.*s is accepted without effect: %.*s\n", (int)(colon - p), p, (int)(e - colon - 2),
			colon + 2);
	}
	if (f && t->a->use_torch_fsdp2)
		fprintf(f, "--use-torch-fsdp2: running mgt's Megatron-FSDP sharding, --data-parallel-sharding-strategy %s\n",
			mgt_args_sharding_name(t->a->dp_sharding));
	double total = 0;
	mgt_status st = log_param_counts(t, &total);
	if (!st && t->ps.world_rank == 0) st = trainer_save_room(t, total);
	if (f) fflush(f);
	return st ? st : trainer_log_tb_open(t);
}

mgt_status trainer_log_tb_open(trainer *t)
{
	/* Megatron's _set_tensorboard_writer: the last rank writes */
	if (!t->a->tensorboard_dir || t->ps.world_rank != t->ps.world_size - 1) return MGT_OK;
	mgt_status st = mgt_tb_open(&t->tb.w, t->a->tensorboard_dir, t->io->prog ? t->io->prog : "mgt-train");
	if (!st) mgt_tb_set_queue(t->tb.w, t->a->tensorboard_queue_size);
	return st ? mgt_err_ctx(st, "--tensorboard-dir") : MGT_OK;
}

/* ---- TensorBoard ---- */

/* The first write error is reported once in the log; training goes on, and trainer_log_end
 * returns the error. */
static void tb_check(trainer *t, mgt_status st)
{
	if (!st || t->tb.warned) return;
	t->tb.warned = true;
	if (t->io->log) fprintf(t->io->log, "WARNING: TensorBoard: %s; no more events are written\n", mgt_err_msg());
}

static void tb_put(trainer *t, const char *tag, double v, int64_t step)
{
	tb_check(t, mgt_tb_scalar(t->tb.w, tag, v, step));
}

/* TAG at the iteration and "TAG vs samples" at the consumed training samples (Megatron's pair). */
static void tb_pair(trainer *t, const char *tag, double v)
{
	char vs[128];
	snprintf(vs, sizeof vs, "%s vs samples", tag);
	tb_put(t, tag, v, t->iteration);
	tb_put(t, vs, v, t->consumed_train);
}

/* Megatron's write_args_to_tensorboard: every argument as a text, its value as Python's str(). */
static void tb_args(trainer *t, int64_t step)
{
	json_t *o = mgt_args_to_json(t->a), *v;
	const char *key;
	char val[4096];
	json_object_foreach(o, key, v) {
		py_str(v, val, sizeof val);
		tb_check(t, mgt_tb_text(t->tb.w, key, val, step));
	}
	json_decref(o);
	t->tb.args_written = true;
}

/* Megatron's memory tags: on CUDA the backend's device memory now and at most, on the CPU the
 * resident set now (VmRSS) and at most (VmHWM). */
static void tb_memory(trainer *t)
{
	bool cpu = t->be->host_memory;
	tb_put(t, "mem-allocated-bytes", (double)(cpu ? proc_status_bytes("VmRSS:") : t->be->bytes_in_use), t->iteration);
	tb_put(t, "mem-max-allocated-bytes", (double)(cpu ? trainer_peak_rss() : t->be->bytes_peak), t->iteration);
}

/* Megatron's MoE track names: the load-balancing loss's ("load_balancing_loss",
 * "seq_load_balancing_loss"; NULL for none) and "z_loss" with --moe-z-loss-coeff (NULL without). */
static const char *moe_lb_name(const mgt_model_config *c)
{
	if (!c->num_experts) return NULL;
	if (!strcmp(c->moe_router_load_balancing_type, "seq_aux_loss")) return "seq_load_balancing_loss";
	return strcmp(c->moe_router_load_balancing_type, "aux_loss") ? NULL : "load_balancing_loss";
}
static const char *moe_z_name(const mgt_model_config *c)
{
	return c->num_experts && c->moe_z_loss_coeff != 0 ? "z_loss" : NULL;
}

/* The MoE part of a metrics line: the two losses, per layer and averaged, and tokens per expert. */
static void metrics_moe(trainer *t, json_t *o)
{
	const mgt_model_config *c = &t->a->model;
	const char *lb = moe_lb_name(c), *z = moe_z_name(c);
	int E = (int)c->num_experts;
	json_t *m = json_object(), *la = json_array(), *lz = json_array(), *tk = json_array();
	for (int i = 0; i < t->moe.n; i++) {
		json_array_append_new(la, json_real(t->moe.aux[i]));
		json_array_append_new(lz, json_real(t->moe.z[i]));
		json_t *row = json_array();
		for (int e = 0; e < E; e++) json_array_append_new(row, json_integer((json_int_t)t->moe.tok[(size_t)i * E + e]));
		json_array_append_new(tk, row);
	}
	if (lb) json_object_set_new(o, lb, json_real(t->moe.lb));
	if (z) json_object_set_new(o, z, json_real(t->moe.zl));
	json_object_set_new(m, "load_balancing_loss", la);
	json_object_set_new(m, "z_loss", lz);
	json_object_set_new(m, "tokens_per_expert", tk);
	json_object_set_new(o, "moe_layers", m);
}

/* Megatron's MoE scalars (moe_logging.py report): the layer-averaged losses under their track
 * names; per layer, moe/NAME_layer_L (L the global layer index) with --moe-per-layer-logging. */
static void tb_moe(trainer *t)
{
	const mgt_model_config *c = &t->a->model;
	const char *lb = moe_lb_name(c), *z = moe_z_name(c);
	if (lb) tb_put(t, lb, t->moe.lb, t->iteration);
	if (z) tb_put(t, z, t->moe.zl, t->iteration);
	if (!t->a->moe_per_layer_logging) return;
	char tag[96];
	for (int l = 0, i = 0; l < c->num_layers; l++) {
		if (!mgt_moe_is_layer(c, l)) continue;
		if (lb) snprintf(tag, sizeof tag, "moe/%s_layer_%d", lb, l), tb_put(t, tag, t->moe.aux[i], t->iteration);
		if (z) snprintf(tag, sizeof tag, "moe/%s_layer_%d", z, l), tb_put(t, tag, t->moe.z[i], t->iteration);
		i++;
	}
}

/* Megatron's training_log, every --tensorboard-log-interval: this iteration's loss, the rate
 * after the scheduler step, the norm of a step taken with clipping on. */
static void tb_iteration(trainer *t, double loss, double gnorm, bool skipped)
{
	mgt_args *a = t->a;
	if (!t->tb.args_written) tb_args(t, t->iteration - 1);
	if (t->iteration % a->tensorboard_log_interval) return;
	if (a->log_learning_rate_to_tensorboard) tb_pair(t, "learning-rate", mgt_lr_get(&t->sched));
	tb_pair(t, "batch-size", (double)a->global_batch_size);
	tb_pair(t, "lm loss", loss);
	if (trainer_bert(t) && t->a->model.bert_binary_head) tb_pair(t, "sop loss", t->sop_loss);
	if (a->log_loss_scale_to_tensorboard) tb_pair(t, "loss-scale", t->scaler.scale);
	if (a->log_world_size_to_tensorboard) tb_pair(t, "world-size", (double)t->ps.world_size);
	if (!skipped && a->clip_grad > 0) tb_pair(t, "grad-norm", gnorm);
	if (a->log_params_norm && trainer_log_due(t)) tb_pair(t, "params-norm", t->params_norm);
	if (a->log_memory_to_tensorboard) tb_memory(t);
	if (t->moe.n) tb_moe(t);
}

/* Megatron's timers at a log line: the interval's time per iteration (not at the first
 * iteration) and the throughput (TFLOP/s per GPU, with --log-throughput). */
static void tb_timers(trainer *t, double elapsed, double tflops_gpu)
{
	if (!t->a->log_timers_to_tensorboard) return;
	if (t->iteration > 1) tb_put(t, "iteration-time", elapsed, t->iteration);
	if (t->a->log_throughput) tb_put(t, "throughput", tflops_gpu, t->iteration);
}

mgt_status trainer_log_end(trainer *t)
{
	mgt_status st = mgt_tb_close(t->tb.w);
	t->tb.w = NULL;
	return st ? mgt_err_ctx(st, "TensorBoard") : MGT_OK;
}

static void timestamp(char *buf, size_t n)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	localtime_r(&tv.tv_sec, &tm);
	size_t k = strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf + k, n - k, ".%06ld", (long)tv.tv_usec);
}

static void write_metrics(trainer *t, double loss, double lr, double gnorm, bool skipped, double iter_s)
{
	mgt_args *a = t->a;
	double tokens = (double)(a->global_batch_size * a->model.seq_length);
	double tflops = mgt_model_flops(&a->model, a->global_batch_size) / iter_s / 1e12;
	json_t *o = json_pack("{s:I, s:I, s:f, s:f, s:f, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:I}",
			      "iteration", (json_int_t)t->iteration, "consumed_samples", (json_int_t)t->consumed_train,
			      "lm_loss", isfinite(loss) ? loss : -1.0, "lr", lr, "grad_norm", isfinite(gnorm) ? gnorm : -1.0,
			      "skipped", skipped, "elapsed_ms", iter_s * 1e3, "tokens_per_s", tokens / iter_s,
			      "tflops", tflops, "time_fwd_ms", t->t_fwd * 1e3, "time_bwd_ms", t->t_bwd * 1e3,
			      "time_opt_ms", t->t_opt * 1e3, "peak_rss_bytes", (json_int_t)trainer_peak_rss());
	json_object_set_new(o, "loss_scale", json_real(t->scaler.scale));
	if (a->peak_tflops > 0) json_object_set_new(o, "mfu", json_real(tflops / a->peak_tflops));
	if (t->moe.n) metrics_moe(t, o);
	if (trainer_bert(t)) json_object_set_new(o, "sop_loss", json_real(t->sop_loss));
	char *s = json_dumps(o, JSON_COMPACT);
	if (s) fprintf(t->out.metrics, "%s\n", s);
	fflush(t->out.metrics);
	free(s);
	json_decref(o);
}

static void print_line(trainer *t, double lr, double gnorm, bool skipped, double elapsed, double tflops_gpu)
{
	mgt_args *a = t->a;
	FILE *f = t->io->log;
	char ts[64];
	timestamp(ts, sizeof ts);
	fprintf(f, " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f |",
		ts, (long long)t->iteration, (long long)a->train_iters, (long long)t->consumed_train, elapsed * 1e3);
	if (a->log_throughput)
		fprintf(f, " throughput per GPU (TFLOP/s/GPU): %.1f |", tflops_gpu);
	fprintf(f, " learning rate: %.6E | global batch size: %5lld |", lr, (long long)a->global_batch_size);
	if (t->interval.iters > 0) fprintf(f, " lm loss: %.6E |", t->interval.loss / (double)t->interval.iters);
	/* pretrain_bert.py's loss dict: lm loss, then sop loss (with the binary head) */
	if (t->interval.iters > 0 && trainer_bert(t) && a->model.bert_binary_head)
		fprintf(f, " sop loss: %.6E |", t->interval.sop / (double)t->interval.iters);
	/* MoE losses: Megatron puts them in total_loss_dict beside the lm loss (moe_logging.py report) */
	const char *lb = moe_lb_name(&a->model), *zn = moe_z_name(&a->model);
	double n = (double)(t->interval.iters > 0 ? t->interval.iters : 1);
	if (lb && t->moe.int_lb / n >= 0) fprintf(f, " %s: %.6E |", lb, t->moe.int_lb / n);
	if (zn && t->moe.int_zl / n >= 0) fprintf(f, " %s: %.6E |", zn, t->moe.int_zl / n);
	fprintf(f, " loss scale: %.1f |", t->scaler.scale);
	/* a skipped step has no norm (Megatron's optimizer.step returns None for it) */
	if (!skipped) fprintf(f, " grad norm: %.3f |", a->clip_grad > 0 ? gnorm : 0.0);
	if (a->log_params_norm) fprintf(f, " params norm: %.3f |", t->params_norm);
	fprintf(f, " number of skipped iterations: %3lld | number of nan iterations: %3lld |\n",
		(long long)t->interval.skipped, (long long)t->interval.nan);
	fflush(f);
}

bool trainer_log_due(const trainer *t)
{
	return t->iteration % t->a->log_interval == 0 || t->iteration == 1;
}

void trainer_log_iteration(trainer *t, double loss, double lr, double gnorm, bool skipped, double iter_s)
{
	if (t->out.metrics) write_metrics(t, loss, lr, gnorm, skipped, iter_s);
	/* Megatron's training_log: the loss averages non-skipped iterations; a skipped one counts as
	 * a nan iteration when its loss is inf or NaN (not when only gradients overflowed) */
	if (skipped) {
		t->interval.skipped++;
		t->interval.nan += !isfinite(loss);
	} else {
		t->interval.loss += loss;
		t->interval.sop += t->sop_loss;
		t->interval.iters++;
	}
	t->moe.int_lb += t->moe.lb;
	t->moe.int_zl += t->moe.zl;
	if (t->tb.w) tb_iteration(t, loss, gnorm, skipped);
	if (!trainer_log_due(t)) return;
	int64_t n = t->interval.iters + t->interval.skipped;
	double elapsed = (mgt_now() - t->interval.t0) / (double)(n > 0 ? n : 1);
	double tflops_gpu = mgt_model_flops(&t->a->model, t->a->global_batch_size) / elapsed / 1e12 / t->ps.world_size;
	if (t->tb.w) tb_timers(t, elapsed, tflops_gpu);
	if (t->io->log) print_line(t, mgt_lr_get(&t->sched), gnorm, skipped, elapsed, tflops_gpu);
	t->interval.loss = t->moe.int_lb = t->moe.int_zl = t->interval.sop = 0;
	t->interval.iters = t->interval.skipped = t->interval.nan = 0;
	t->interval.t0 = mgt_now();
}

void mgt_train_print_loss(FILE *f, const char *head, double loss)
{
	mgt_train_print_losses(f, head, loss, NAN);
}

void mgt_train_print_losses(FILE *f, const char *head, double loss, double sop)
{
	char body[512];
	int k = snprintf(body, sizeof body, "%slm loss value: %.6E | lm loss PPL: %.6E | ", head, loss, exp(fmin(20.0, loss)));
	if (!isnan(sop) && k > 0 && (size_t)k < sizeof body)
		snprintf(body + k, sizeof body - (size_t)k, "sop loss value: %.6E | sop loss PPL: %.6E | ", sop,
			 exp(fmin(20.0, sop)));
	size_t n = strlen(body) + 1;
	for (size_t i = 0; i < n; i++) fputc('-', f);
	fprintf(f, "\n%s\n", body);
	for (size_t i = 0; i < n; i++) fputc('-', f);
	fputc('\n', f);
	fflush(f);
}

void trainer_log_validation(trainer *t, const char *what, bool test, double loss)
{
	char head[160];
	if (what) snprintf(head, sizeof head, " iteration %lld %s | ", (long long)t->iteration, what);
	else snprintf(head, sizeof head, " validation loss at iteration %lld | ", (long long)t->iteration);
	bool sop = trainer_bert(t) && t->a->model.bert_binary_head;
	if (t->io->log) mgt_train_print_losses(t->io->log, head, loss, sop ? t->sop_loss : NAN);
	if (t->tb.w) { /* Megatron's evaluate_and_print_results (Megatron's lands its test set under the
		      * validation tags; mgt writes "lm loss test") */
		char tag[64];
		double ppl = exp(fmin(20.0, loss));
		snprintf(tag, sizeof tag, "lm loss %s", test ? "test" : "validation");
		tb_pair(t, tag, loss);
		strcat(tag, " ppl");
		if (t->a->log_validation_ppl_to_tensorboard) tb_pair(t, tag, ppl);
	}
	if (t->out.metrics) {
		const char *k = test ? "test" : "valid";
		fprintf(t->out.metrics, "{\"iteration\": %lld, \"%s_loss\": %.17g, \"%s_ppl\": %.17g", (long long)t->iteration, k,
			loss, k, exp(fmin(20.0, loss)));
		if (sop) fprintf(t->out.metrics, ", \"%s_sop_loss\": %.17g", k, t->sop_loss);
		fprintf(t->out.metrics, "%s}\n", what ? ", \"end\": true" : "");
		fflush(t->out.metrics);
	}
}

static size_t computed_memory(const trainer *t, mgt_model_mem *m, size_t *opt)
{
	*m = (mgt_model_mem){ 0 };
	*opt = 0;
	for (int c = 0; c < t->V; c++) {
		mgt_model_mem x = mgt_model_memory(t->chunk[c]);
		m->params += x.params; m->grads += x.grads; m->activations += x.activations; m->workspace += x.workspace;
		if (t->ddp.g16) m->grads += x.grads / 2; /* --grad-reduce-in-bf16: the bf16 copy */
	}
	for (int i = 0; i < t->nshard; i++) *opt += mgt_adamw_bytes(t->shard[i].hi - t->shard[i].lo);
	return m->params + m->grads + *opt + m->activations + m->workspace + trainer_comm_memory(t);
}

double trainer_device_in_use(const trainer *t, char *what, size_t n)
{
	size_t fr = mgt_backend_cuda_mem_available(t->be, what, n);
	if (t->dev_free0 == SIZE_MAX || fr == SIZE_MAX || t->dev_free0 < fr) return -1;
	return (double)(t->dev_free0 - fr);
}

size_t trainer_comm_memory(const trainer *t)
{
	if (!t->be->host_memory) return 0;
	/* the gradient group's reduce-scatters (the distributed optimizer, FSDP): the pack of the
	 * largest bucket (mgt_comm_mpi_pack_bytes); its all-reduce allocates nothing of mgt's */
	const mgt_args *a = t->a;
	size_t dp = 0, es = t->ddp.g16 ? mgt_elem_size(a->grad_comm_t) : sizeof(float);
	for (int c = 0; a->use_distributed_optimizer && c < t->V; c++) {
		const mgt_tensor_table *tt = mgt_model_tensors(t->chunk[c]);
		for (int b = 0; b < tt->nbuckets; b++) {
			mgt_comm *g = trainer_bucket_comm(t, &tt->buckets[b]);
			size_t x = mgt_comm_mpi_pack_bytes(g->size, tt->buckets[b].numel / (size_t)g->size, es);
			if (x > dp) dp = x;
		}
	}
	/* context parallelism's: the all-gather's temporaries, or the ring's sends of keys and
	 * values and of their gradient, each from a copy */
	size_t kv = (size_t)(a->model.seq_length / a->context_parallel_size * a->micro_batch_size) *
		    (size_t)(a->model.num_query_groups / a->tensor_model_parallel_size) * 2 *
		    (size_t)a->model.kv_channels * sizeof(float);
	size_t cp = t->ps.cp <= 1 ? 0 : a->cp_comm == MGT_CP_P2P ? 2 * kv : a->cp_comm == MGT_CP_A2A ? 0
		    : mgt_comm_mpi_scratch_bytes(t->ps.cp);
	return dp + cp;
}

double trainer_computed_memory(const trainer *t)
{
	mgt_model_mem m;
	size_t opt;
	return (double)computed_memory(t, &m, &opt);
}

void trainer_log_memory(trainer *t, const char *when)
{
	if (!t->io->log) return;
	mgt_model_mem m;
	size_t opt;
	size_t total = computed_memory(t, &m, &opt);
	double mb = 1024.0 * 1024.0;
	fprintf(t->io->log, "memory %s: computed %.1f MiB (parameters %.1f, gradients %.1f, optimizer %.1f, "
		"activations %.1f, workspace %.1f", when, (double)total / mb, (double)m.params / mb,
		(double)m.grads / mb, (double)opt / mb, (double)m.activations / mb, (double)m.workspace / mb);
	if (trainer_comm_memory(t))
		fprintf(t->io->log, ", communication %.1f", (double)trainer_comm_memory(t) / mb);
	fprintf(t->io->log, ") | ");
	if (!t->be->host_memory) {
		/* the backend's own allocations; its GEMM and kernel scratch is part of "workspace" */
		fprintf(t->io->log, "peak device memory %.1f MiB (%.1f MiB now) | peak device / computed: %.3f",
			(double)t->be->bytes_peak / mb, (double)t->be->bytes_in_use / mb,
			(double)t->be->bytes_peak / (double)total);
		/* independent of the backend's accounting (cuBLASLt and NCCL buffers, allocation
		 * granularity included) */
		char what[64];
		double used = trainer_device_in_use(t, what, sizeof what);
		if (used >= 0)
			fprintf(t->io->log, " | %s: %.1f MiB more in use than before the model", what, used / mb);
		fputc('\n', t->io->log);
	} else {
		size_t rss = trainer_peak_rss();
		fprintf(t->io->log, "peak RSS %.1f MiB, of which %.1f MiB before the model (program, libraries, "
			"tokenizer) | peak RSS over that / computed: %.3f\n", (double)rss / mb,
			(double)t->rss_baseline / mb, (double)(rss - t->rss_baseline) / (double)total);
	}
	fflush(t->io->log);
}

/* ---- --debug-dump ---- */

static mgt_status dump_grow(trainer *t)
{
	dump_state *d = &t->dump;
	mgt_args *a = t->a;
	if (d->iters < d->cap) return MGT_OK;
	int64_t cap = d->cap ? 2 * d->cap : 16;
	int64_t S = a->model.seq_length > a->model.decoder_seq_length ? a->model.seq_length : a->model.decoder_seq_length;
	size_t per = (size_t)(a->global_batch_size * S) * 4; /* T5: the decoder's arrays too */
	void **arrs[] = { (void **)&d->tokens, (void **)&d->labels, (void **)&d->pos, (void **)&d->mask, (void **)&d->types,
			  (void **)&d->pad, (void **)&d->isr };
	for (size_t i = 0; i < 7; i++) {
		void *p = mgt_realloc(*arrs[i], (size_t)cap * (i < 6 ? per : (size_t)a->global_batch_size * 4));
		if (!p) return MGT_ERR_NOMEM;
		*arrs[i] = p;
	}
	double **scal[] = { &d->lm_loss, &d->lr, &d->grad_norm, &d->moe_lb, &d->moe_zl, &d->sop_loss };
	for (size_t i = 0; i < 6; i++) {
		double *p = mgt_realloc(*scal[i], (size_t)cap * sizeof(double));
		if (!p) return MGT_ERR_NOMEM;
		*scal[i] = p;
	}
	d->cap = cap;
	return MGT_OK;
}

/* The length of the labels, loss mask and logits: the decoder's for T5. */
static int dump_label_len(const trainer *t)
{
	return (int)(trainer_t5(t) ? t->a->model.decoder_seq_length : t->a->model.seq_length);
}

static mgt_status dump_start(trainer *t)
{
	dump_state *d = &t->dump;
	size_t n = mgt_model_tensors(t->model)->buf_numel, T = (size_t)(t->a->micro_batch_size * dump_label_len(t));
	d->params = mgt_malloc(n * 4);
	d->grads = mgt_malloc(n * 4);
	d->logits = mgt_malloc(T * (size_t)t->a->model.padded_vocab_size * 4);
	d->loss = mgt_malloc(T * 4);
	if (!d->params || !d->grads || !d->logits || !d->loss) return MGT_ERR_NOMEM;
	return t->be->ops->download(t->be, d->params, mgt_model_params(t->model), n * 4);
}

/* T5: the encoder's tokens, positions and padding mask [gbs, s], the decoder's tokens (in types),
 * labels and loss mask [gbs, decoder_seq_length], from sample `first` of the dump's batches. */
static void dump_t5_batch(trainer *t, size_t first)
{
	dump_state *d = &t->dump;
	const int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length, Sd = dump_label_len(t);
	for (int j = 0; j < b; j++) {
		for (int i = 0; i < S; i++) {
			size_t src = (size_t)i * (size_t)b + (size_t)j, dst = (first + (size_t)j) * (size_t)S + (size_t)i;
			d->tokens[dst] = t->mb_tokens[src];
			d->pos[dst] = t->mb_pos[src];
			d->pad[dst] = (int32_t)t->mb_pad[src];
		}
		for (int i = 0; i < Sd; i++) {
			size_t src = (size_t)i * (size_t)b + (size_t)j, dst = (first + (size_t)j) * (size_t)Sd + (size_t)i;
			d->types[dst] = t->mb_dtok[src];
			d->labels[dst] = t->mb_labels[src];
			d->mask[dst] = t->mb_mask[src];
		}
	}
}

/* Record micro-batch k (sample-major, [gbs, s]) of the current iteration. */
mgt_status trainer_dump_batch(trainer *t, int64_t k)
{
	dump_state *d = &t->dump;
	mgt_status st = MGT_OK;
	if (k == 0) {
		if (!d->params && (st = dump_start(t))) return st;
		if ((st = dump_grow(t))) return st;
		d->iters++;
	}
	int b = (int)t->a->micro_batch_size, S = (int)t->a->model.seq_length;
	size_t base = ((size_t)(d->iters - 1) * (size_t)t->a->global_batch_size + (size_t)(k * b)) * (size_t)S;
	if (trainer_t5(t)) {
		dump_t5_batch(t, base / (size_t)S);
		return st;
	}
	for (int j = 0; j < b; j++)
		for (int i = 0; i < S; i++) {
			size_t src = (size_t)i * (size_t)b + (size_t)j, dst = base + (size_t)j * (size_t)S + (size_t)i;
			d->tokens[dst] = t->mb_tokens[src];
			d->labels[dst] = t->mb_labels[src];
			d->pos[dst] = t->mb_pos[src];
			d->mask[dst] = t->mb_mask[src];
			if (t->mb_seg) d->types[dst] = t->mb_seg[src]; /* packed documents' starts (GPT: types unused) */
			if (!trainer_bert(t)) continue;
			d->types[dst] = t->mb_types[src];
			d->pad[dst] = (int32_t)t->mb_pad[src];
		}
	for (int j = 0; trainer_bert(t) && j < b; j++)
		d->isr[(size_t)(d->iters - 1) * (size_t)t->a->global_batch_size + (size_t)(k * b) + (size_t)j] = t->mb_isr[j];
	return st;
}

mgt_status trainer_dump_moe(trainer *t, int slot)
{
	dump_state *d = &t->dump;
	size_t Tk = (size_t)(t->a->micro_batch_size * t->a->model.seq_length * t->a->model.moe_router_topk);
	int *layers = mgt_malloc((size_t)t->moe.n * sizeof *layers);
	d->moe_exp = mgt_malloc((size_t)t->moe.n * Tk * sizeof *d->moe_exp);
	d->moe_prob = mgt_malloc((size_t)t->moe.n * Tk * sizeof *d->moe_prob);
	mgt_status st = layers && d->moe_exp && d->moe_prob ? MGT_OK : MGT_ERR_NOMEM;
	int n = st ? 0 : mgt_model_moe_layers(t->model, layers);
	for (int i = 0; !st && i < n; i++)
		st = mgt_model_moe_routing(t->model, slot, layers[i], d->moe_exp + i * Tk, d->moe_prob + i * Tk);
	free(layers);
	return st;
}

/* Sequence-first [s, b, X] to batch-first [b, s, X], in place through a copy. */
static mgt_status to_batch_first(float *x, int s, int b, size_t X)
{
	size_t n = (size_t)s * (size_t)b * X;
	float *c = mgt_malloc(n * sizeof *c);
	if (!c) return MGT_ERR_NOMEM;
	memcpy(c, x, n * sizeof *c);
	for (int i = 0; i < s; i++)
		for (int j = 0; j < b; j++)
			memcpy(x + ((size_t)j * (size_t)s + (size_t)i) * X, c + ((size_t)i * (size_t)b + (size_t)j) * X, X * sizeof *c);
	free(c);
	return MGT_OK;
}

static void piece(mgt_ckpt_piece *p, const char *name, mgt_ckpt_dtype dt, const void *data, int ndim,
		  int64_t d0, int64_t d1, int64_t d2)
{
	*p = (mgt_ckpt_piece){ .name = name, .ndim = ndim, .dtype = dt, .data = data };
	int64_t dims[3] = { d0, d1, d2 };
	for (int i = 0; i < ndim; i++) p->shape[i] = p->global_shape[i] = dims[i];
}

mgt_status trainer_dump_write(trainer *t)
{
	dump_state *d = &t->dump;
	mgt_args *a = t->a;
	if (!d->params) return MGT_OK;
	const mgt_tensor_table *tt = mgt_model_tensors(t->model);
	int b = (int)a->micro_batch_size, S = (int)a->model.seq_length, Sl = dump_label_len(t);
	int64_t V = a->model.padded_vocab_size, it = d->iters, gbs = a->global_batch_size;
	mgt_status st = to_batch_first(d->logits, Sl, b, (size_t)V);
	if (!st) st = to_batch_first(d->loss, Sl, b, 1);
	int nm = t->moe.n, K = (int)a->model.moe_router_topk, *ml = mgt_malloc((size_t)(nm ? nm : 1) * sizeof *ml);
	if (!ml) st = MGT_ERR_NOMEM;
	else if (nm) mgt_model_moe_layers(t->model, ml);
	for (int i = 0; !st && nm && d->moe_exp && i < nm; i++) { /* to batch-first (int32 moved as float bits) */
		st = to_batch_first((float *)d->moe_exp + (size_t)i * S * b * K, S, b, (size_t)K);
		if (!st) st = to_batch_first(d->moe_prob + (size_t)i * S * b * K, S, b, (size_t)K);
	}
	float *fin = mgt_malloc(tt->buf_numel * sizeof *fin);
	if (!st && !fin) st = MGT_ERR_NOMEM;
	if (!st) st = t->be->ops->download(t->be, fin, mgt_model_params(t->model), tt->buf_numel * sizeof *fin);
	size_t n = (size_t)tt->n * 3 + 15 + (size_t)nm * 2;
	mgt_ckpt_piece *p = mgt_malloc(n * sizeof *p);
	char (*names)[128] = mgt_malloc(((size_t)tt->n * 3 + (size_t)nm * 2) * sizeof *names);
	if (!st && (!p || !names)) st = MGT_ERR_NOMEM;
	for (int i = 0; !st && i < tt->n; i++) {
		const mgt_tensor *x = &tt->t[i];
		snprintf(names[2 * i], 128, "params/%s", x->name);
		snprintf(names[2 * i + 1], 128, "grads/%s", x->name);
		piece(&p[2 * i], names[2 * i], MGT_CKPT_F32, d->params + x->offset, x->ndim, x->shape[0], x->shape[1], 0);
		piece(&p[2 * i + 1], names[2 * i + 1], MGT_CKPT_F32, d->grads + x->offset, x->ndim, x->shape[0], x->shape[1], 0);
	}
	size_t k = (size_t)tt->n * 2;
	if (!st) {
		piece(&p[k++], "batch/tokens", MGT_CKPT_I32, d->tokens, 3, it, gbs, S);
		piece(&p[k++], "batch/labels", MGT_CKPT_I32, d->labels, 3, it, gbs, Sl);
		piece(&p[k++], "batch/position_ids", MGT_CKPT_I32, d->pos, 3, it, gbs, S);
		piece(&p[k++], "batch/loss_mask", MGT_CKPT_F32, d->mask, 3, it, gbs, Sl);
		piece(&p[k++], "iter1/logits", MGT_CKPT_F32, d->logits, 3, b, Sl, V);
		piece(&p[k++], "iter1/loss", MGT_CKPT_F32, d->loss, 2, b, Sl, 0);
		piece(&p[k++], "train/lm_loss", MGT_CKPT_F64, d->lm_loss, 1, it, 0, 0);
		piece(&p[k++], "train/lr", MGT_CKPT_F64, d->lr, 1, it, 0, 0);
		piece(&p[k++], "train/grad_norm", MGT_CKPT_F64, d->grad_norm, 1, it, 0, 0);
	}
	if (!st && t->mb_seg) piece(&p[k++], "batch/seg_start", MGT_CKPT_I32, d->types, 3, it, gbs, S);
	if (!st && trainer_t5(t)) {
		piece(&p[k++], "batch/dec_tokens", MGT_CKPT_I32, d->types, 3, it, gbs, Sl);
		piece(&p[k++], "batch/padding_mask", MGT_CKPT_I32, d->pad, 3, it, gbs, S);
	}
	if (!st && trainer_bert(t)) {
		piece(&p[k++], "batch/tokentype_ids", MGT_CKPT_I32, d->types, 3, it, gbs, S);
		piece(&p[k++], "batch/padding_mask", MGT_CKPT_I32, d->pad, 3, it, gbs, S);
		piece(&p[k++], "batch/is_random", MGT_CKPT_I32, d->isr, 2, it, gbs, 0);
		piece(&p[k++], "train/sop_loss", MGT_CKPT_F64, d->sop_loss, 1, it, 0, 0);
	}
	if (!st && nm) {
		piece(&p[k++], "train/load_balancing_loss", MGT_CKPT_F64, d->moe_lb, 1, it, 0, 0);
		piece(&p[k++], "train/z_loss", MGT_CKPT_F64, d->moe_zl, 1, it, 0, 0);
		char (*nn)[128] = names + (size_t)tt->n * 2;
		for (int i = 0; d->moe_exp && i < nm; i++) {
			size_t off = (size_t)i * S * b * K;
			snprintf(nn[2 * i], 128, "iter1/moe/layer_%d/experts", ml[i]);
			snprintf(nn[2 * i + 1], 128, "iter1/moe/layer_%d/probs", ml[i]);
			piece(&p[k++], nn[2 * i], MGT_CKPT_I32, d->moe_exp + off, 3, b, S, K);
			piece(&p[k++], nn[2 * i + 1], MGT_CKPT_F32, d->moe_prob + off, 3, b, S, K);
		}
		char (*fn)[128] = names + (size_t)tt->n * 2 + (size_t)nm * 2;
		for (int i = 0; i < tt->n; i++) { /* frozen state after the run: the router's expert bias */
			const mgt_tensor *x = &tt->t[i];
			if (!x->frozen) continue;
			snprintf(fn[i], 128, "final/%s", x->name);
			piece(&p[k++], fn[i], MGT_CKPT_F32, fin + x->offset, x->ndim, x->shape[0], x->shape[1], 0);
		}
	}
	json_t *meta = json_pack("{s:o}", "args", mgt_args_to_json(a));
	char *js = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS);
	if (!st) st = mgt_ckpt_dump_write(a->debug_dump, p, k, js);
	free(js);
	json_decref(meta);
	free(p);
	free(names);
	free(ml);
	free(fin);
	return st;
}

void trainer_dump_free(trainer *t)
{
	dump_state *d = &t->dump;
	void *p[] = { d->params, d->grads, d->logits, d->loss, d->tokens, d->labels, d->pos, d->mask,
		      d->lm_loss, d->lr, d->grad_norm, d->moe_lb, d->moe_zl, d->moe_exp, d->moe_prob, d->types, d->pad,
		      d->isr, d->sop_loss };
	for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
	memset(d, 0, sizeof *d);
}

/* n floats as a JSON array ("%.9g": each float read back exactly). */
static void json_floats(FILE *f, const float *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++) fprintf(f, i ? ",%.9g" : "%.9g", (double)v[i]);
	fputc(']', f);
}

mgt_status trainer_fp8_trace(trainer *t, int c, int mb, bool backward)
{
	mgt_model_fp8_state v;
	mgt_status st = mgt_model_fp8_view(t->chunk[c], &v);
	if (st || !v.fwd) return st;
	const mgt_fp8_meta *meta = backward ? v.bwd : v.fwd;
	FILE *f = t->out.fp8_trace;
	fprintf(f, "{\"iteration\":%lld,\"microbatch\":%d,\"chunk\":%d,\"pass\":\"%s\",\"first_layer\":%d,\"linears\":%d,"
		   "\"amax\":", (long long)t->iteration + 1, mb, c, backward ? "backward" : "forward", v.first_layer, v.linears);
	json_floats(f, backward ? v.last_bwd : v.last_fwd, meta->slots);
	fputs(",\"scale\":", f);
	json_floats(f, meta->scale, meta->slots);
	fputs(",\"history\":[", f);
	for (int r = 0; r < meta->len; r++) {
		if (r) fputc(',', f);
		json_floats(f, meta->history + (size_t)r * meta->slots, meta->slots);
	}
	fputs("]}\n", f);
	if (fflush(f) || ferror(f)) return mgt_err(MGT_ERR_IO, "--fp8-trace %s: write failed", t->a->fp8_trace);
	return MGT_OK;
}
