/* cmd/eval_tasks.c: mgt-eval tasks: zero-shot loglikelihood tasks (mgt-tasks(5)) scored as
 * lm-evaluation-harness scores them, results in its JSON shape.  See mgt-eval(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "eval_ll.h"

#define PROG EVAL_PROG

enum { OPT_TASK = EVAL_OPT_FIRST_FREE, OPT_TYPE, OPT_LIMIT, OPT_OUTPUT, OPT_SAMPLES, OPT_MAXLEN, OPT_STRICT, OPT_BOOT, OPT_TB };

static void usage(void)
{
	printf("Usage: mgt-eval tasks (--load DIR | --hf DIR) --task FILE.jsonl [--task FILE.jsonl]... [OPTION]...\n"
	       "Score zero-shot tasks (JSONL, mgt-tasks(5)) as lm-evaluation-harness scores them: LAMBADA-style\n"
	       "tasks by acc (the continuation is the greedy one) and perplexity, multiple-choice tasks by acc\n"
	       "and acc_norm; results as the harness's JSON.\n\n"
	       "  --task FILE           a task file (plain or zstd JSONL); its name is the basename without\n"
	       "                        .jsonl; give several to run several\n"
	       "  --task-type T         auto (from the first line's keys), lambada, hellaswag, cloze or choice [auto]\n"
	       "  --limit N             score the first N examples of each task (all are checked) [all]\n"
	       "  --max-length N        the model's context: longer requests lose tokens on the left, as in the\n"
	       "                        harness [the checkpoint's seq_length]\n"
	       "  --strict-length       a request longer than --max-length + 1 tokens is an error instead\n"
	       "  --bootstrap-iters N   resamples for perplexity_stderr (the harness's bootstrap) [100000]\n"
	       "  --output FILE         write the results JSON there (replaced atomically) instead of stdout\n"
	       "  --log-samples FILE    one JSON line per example: its requests' loglikelihoods and tokens\n"
	       "  --tensorboard-dir DIR also write the metrics as TensorBoard scalars TASK/METRIC at the\n"
	       "                        checkpoint's iteration (a new event file in DIR)\n"
	       "  --help\n%s%s\n"
	       "A summary goes to standard error.\n\n%s"
	       "See mgt-eval(1), mgt-tasks(5).\n", eval_model_help, mgt_cli_tok_help, eval_exit_help);
}

typedef struct {
	eval_model_opts m;
	const char **tasks;
	size_t n_tasks;
	mgt_task_type type;
	long long limit, max_length, boot;
	const char *output, *samples, *tb;
	bool strict;
} topts;

/* One request: context then continuation tokens, and its score. */
typedef struct { int32_t *toks; int64_t n, n_cont; double ll; bool greedy; } request;

typedef struct {
	mgt_task *task;
	request *req;       /* every example's continuations, in order */
	size_t n_req;
	size_t truncated;   /* requests that lost tokens on the left */
} task_run;

static mgt_status too_long(const mgt_task *t, const mgt_task_example *ex, const char *what, int64_t n, int64_t max)
{
	return mgt_err(MGT_ERR_INPUT, "%s:%llu: %s %lld tokens: more than the model's context of %lld%s", t->path,
		       (unsigned long long)ex->line, what, (long long)n, (long long)max,
		       strcmp(what, "the continuation is") ? " + 1 (--strict-length)" : "");
}

/* Tokens of request i of ex; checks the continuation and the length. */
static mgt_status encode_req(const topts *o, mgt_tok_enc *enc, int32_t prefix, int64_t max_len, task_run *tr,
			     const mgt_task_example *ex, size_t i, request *r)
{
	mgt_ids ids = { 0 };
	size_t n_ctx = 0;
	mgt_status st = mgt_ll_encode(enc, prefix, ex->context, strlen(ex->context), ex->conts[i], strlen(ex->conts[i]),
				      &ids, &n_ctx);
	r->toks = ids.v;
	r->n = (int64_t)ids.n;
	r->n_cont = r->n - (int64_t)n_ctx;
	const mgt_task *t = tr->task;
	if (st) return mgt_err_ctx(st, "%s:%llu", t->path, (unsigned long long)ex->line);
	if (!r->n_cont)
		return mgt_err(MGT_ERR_INPUT, "%s:%llu: continuation %zu encodes to no tokens after the context: nothing "
			       "to score", t->path, (unsigned long long)ex->line, i);
	if (r->n_cont > max_len) return too_long(t, ex, "the continuation is", r->n_cont, max_len);
	if (r->n > max_len + 1 && o->strict) return too_long(t, ex, "context and continuation are", r->n, max_len);
	tr->truncated += r->n > max_len + 1;
	return MGT_OK;
}

static mgt_status encode_task(const topts *o, mgt_tok_enc *enc, int32_t prefix, int64_t max_len, task_run *tr)
{
	const mgt_task *t = tr->task;
	for (size_t e = 0; e < t->n; e++) tr->n_req += t->ex[e].n_conts;
	if (!(tr->req = calloc(tr->n_req ? tr->n_req : 1, sizeof *tr->req))) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	size_t k = 0;
	for (size_t e = 0; e < t->n; e++)
		for (size_t i = 0; i < t->ex[e].n_conts; i++) {
			mgt_status st = encode_req(o, enc, prefix, max_len, tr, &t->ex[e], i, &tr->req[k++]);
			if (st) return st;
		}
	return MGT_OK;
}

/* The longest input any request feeds. */
static int64_t longest_input(const task_run *tr, size_t n, int64_t max_len)
{
	int64_t m = 1;
	for (size_t t = 0; t < n; t++)
		for (size_t i = 0; i < tr[t].n_req; i++) {
			int64_t l = mgt_ll_input_len(tr[t].req[i].n, max_len);
			if (l > m) m = l;
		}
	return m;
}

static mgt_status score_all(mgt_eval *ev, task_run *tr, size_t n, int64_t max_len, int64_t seq)
{
	float *logits = mgt_malloc((size_t)seq * (size_t)mgt_eval_vocab_size(ev) * sizeof *logits);
	if (!logits) return MGT_ERR_NOMEM;
	mgt_status st = MGT_OK;
	for (size_t t = 0; !st && t < n; t++)
		for (size_t i = 0; !st && i < tr[t].n_req; i++) {
			request *r = &tr[t].req[i];
			st = mgt_ll_score(ev, r->toks, r->n, r->n_cont, max_len, logits, &r->ll, &r->greedy);
			if (st) st = mgt_err_ctx(st, "%s", tr[t].task->path);
		}
	free(logits);
	return st;
}

/* Per-example metrics: acc (and acc_norm) in [0, 1], ll of LAMBADA-style tasks. */
typedef struct { double *acc, *acc_norm, *ll; } per_example;

static void example_metrics(const task_run *tr, per_example *pe)
{
	const mgt_task *t = tr->task;
	const request *r = tr->req;
	for (size_t e = 0; e < t->n; r += t->ex[e++].n_conts) {
		if (!t->multiple_choice) {
			pe->acc[e] = r[0].greedy;
			pe->ll[e] = r[0].ll;
			continue;
		}
		size_t best = 0, best_norm = 0;
		const mgt_task_example *ex = &t->ex[e];
		for (size_t i = 1; i < ex->n_conts; i++) { /* np.argmax: the first of equal values */
			if (r[i].ll > r[best].ll) best = i;
			if (r[i].ll / (double)ex->choice_chars[i] > r[best_norm].ll / (double)ex->choice_chars[best_norm])
				best_norm = i;
		}
		pe->acc[e] = best == (size_t)ex->gold;
		pe->acc_norm[e] = best_norm == (size_t)ex->gold;
	}
}

static void set_metric(json_t *res, const char *name, double v, double se)
{
	char key[64];
	snprintf(key, sizeof key, "%s,none", name);
	json_object_set_new(res, key, eval_ll_real(v));
	snprintf(key, sizeof key, "%s_stderr,none", name);
	json_object_set_new(res, key, isnan(se) ? json_string("N/A") : eval_ll_real(se));
}

/* results.TASK, and the summary line. */
static mgt_status task_results(const topts *o, const task_run *tr, json_t *res)
{
	const mgt_task *t = tr->task;
	size_t n = t->n;
	per_example pe = { calloc(n, sizeof(double)), calloc(n, sizeof(double)), calloc(n, sizeof(double)) };
	mgt_status st = pe.acc && pe.acc_norm && pe.ll ? MGT_OK : mgt_err(MGT_ERR_NOMEM, "out of memory");
	if (!st) example_metrics(tr, &pe);
	double ppl_se = NAN;
	if (!st && !t->multiple_choice) st = mgt_stat_perplexity_stderr(pe.ll, n, o->boot, &ppl_se);
	if (!st) {
		json_object_set_new(res, "alias", json_string(t->name));
		double acc = mgt_stat_mean(pe.acc, n);
		set_metric(res, "acc", acc, mgt_stat_mean_stderr(pe.acc, n));
		fprintf(stderr, "%s: %s: %zu examples (%s): acc %.4f", PROG, t->name, n, mgt_task_type_name(t->type), acc);
		if (t->multiple_choice) {
			double an = mgt_stat_mean(pe.acc_norm, n);
			set_metric(res, "acc_norm", an, mgt_stat_mean_stderr(pe.acc_norm, n));
			fprintf(stderr, ", acc_norm %.4f\n", an);
		} else {
			double ppl = mgt_stat_perplexity(pe.ll, n);
			set_metric(res, "perplexity", ppl, ppl_se);
			fprintf(stderr, ", perplexity %.4f\n", ppl);
		}
		if (tr->truncated)
			fprintf(stderr, "%s: %s: %zu requests lost tokens on the left (--max-length)\n", PROG, t->name,
				tr->truncated);
	}
	free(pe.acc);
	free(pe.acc_norm);
	free(pe.ll);
	return st;
}

static json_t *task_config(const topts *o, const mgt_task *t, int64_t max_len)
{
	json_t *metrics = json_array();
	const char *names[] = { "acc", t->multiple_choice ? "acc_norm" : "perplexity" };
	for (int i = 0; i < 2; i++)
		json_array_append_new(metrics, json_pack("{s:s, s:s, s:b}", "metric", names[i], "aggregation",
							 i && !t->multiple_choice ? "perplexity" : "mean", "higher_is_better",
							 !(i && !t->multiple_choice)));
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:o, s:I, s:b, s:{s:f}}", "task", t->name, "dataset_path",
			 t->path, "task_type", mgt_task_type_name(t->type), "output_type",
			 t->multiple_choice ? "multiple_choice" : "loglikelihood", "target_delimiter",
			 t->multiple_choice ? " " : "", "num_fewshot", 0, "metric_list", metrics, "max_length",
			 (json_int_t)max_len, "strict_length", o->strict, "metadata", "version", 1.0);
}

/* Everything but results: group_subtasks, configs, versions, n-shot, higher_is_better, n-samples. */
static void add_task_info(json_t *root, const topts *o, const mgt_task *t, int64_t max_len)
{
	json_object_set_new(json_object_get(root, "group_subtasks"), t->name, json_array());
	json_object_set_new(json_object_get(root, "configs"), t->name, task_config(o, t, max_len));
	json_object_set_new(json_object_get(root, "versions"), t->name, json_real(1.0));
	json_object_set_new(json_object_get(root, "n-shot"), t->name, json_integer(0));
	json_object_set_new(json_object_get(root, "higher_is_better"), t->name,
			    json_pack("{s:b, s:b}", "acc", 1, t->multiple_choice ? "acc_norm" : "perplexity",
				      t->multiple_choice));
	json_object_set_new(json_object_get(root, "n-samples"), t->name,
			    json_pack("{s:I, s:I}", "original", (json_int_t)t->n_total, "effective", (json_int_t)t->n));
}

static json_t *run_config(const topts *o, const mgt_eval *ev, int64_t max_len)
{
	json_t *c = json_pack("{s:s, s:s, s:s?, s:s?, s:I, s:s, s:i, s:I, s:I}", "model", "mgt", "model_path",
			      o->m.hf ? o->m.hf : mgt_eval_dir(ev), "load", o->m.load, "hf", o->m.hf, "iteration",
			      (json_int_t)mgt_eval_iteration(ev), "device", o->m.device, "batch_size", 1, "max_length",
			      (json_int_t)max_len, "bootstrap_iters", (json_int_t)o->boot);
	json_object_set_new(c, "limit", o->limit >= 0 ? json_integer(o->limit) : json_null());
	return c;
}

static mgt_status write_results(const topts *o, const mgt_eval *ev, task_run *tr, int64_t max_len)
{
	json_t *root = json_object(), *results = json_object();
	json_object_set_new(root, "results", results);
	static const char *const objs[] = { "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
					    "n-samples" };
	for (size_t i = 0; i < 6; i++) json_object_set_new(root, objs[i], json_object());
	mgt_status st = MGT_OK;
	for (size_t t = 0; !st && t < o->n_tasks; t++) {
		json_t *r = json_object();
		json_object_set_new(results, tr[t].task->name, r);
		st = task_results(o, &tr[t], r);
		add_task_info(root, o, tr[t].task, max_len);
	}
	if (!st && o->tb) st = eval_ll_tensorboard(o->tb, results, mgt_eval_iteration(ev));
	json_object_set_new(root, "config", run_config(o, ev, max_len));
	json_object_set_new(root, "date", json_real((double)time(NULL)));
	char *text = st ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
	if (!st && !text) st = mgt_err(MGT_ERR_NOMEM, "results: out of memory");
	if (!st) {
		size_t n = strlen(text);
		text[n] = '\n'; /* json_dumps's NUL becomes the last newline */
		st = eval_ll_write(o->output, text, n + 1);
	}
	free(text);
	json_decref(root);
	return st;
}

/* --log-samples: {"task", "doc_id", "line", "gold", "loglikelihoods", "is_greedy", "tokens": [[ctx, cont]]}. */
static mgt_status write_samples(const char *path, const task_run *tr, size_t n_tasks)
{
	mgt_buf b = { 0 };
	mgt_status st = MGT_OK;
	for (size_t t = 0; !st && t < n_tasks; t++) {
		const request *r = tr[t].req;
		for (size_t e = 0; !st && e < tr[t].task->n; r += tr[t].task->ex[e++].n_conts) {
			const mgt_task_example *ex = &tr[t].task->ex[e];
			json_t *ll = json_array(), *g = json_array(), *tk = json_array();
			for (size_t i = 0; i < ex->n_conts; i++) {
				json_array_append_new(ll, json_real(r[i].ll));
				json_array_append_new(g, json_boolean(r[i].greedy));
				json_array_append_new(tk, json_pack("[I, I]", (json_int_t)(r[i].n - r[i].n_cont),
								    (json_int_t)r[i].n_cont));
			}
			json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:o, s:o, s:o}", "task", tr[t].task->name, "doc_id",
					      (json_int_t)e, "line", (json_int_t)ex->line, "gold", (json_int_t)ex->gold,
					      "loglikelihoods", ll, "is_greedy", g, "tokens", tk);
			char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
			st = s ? mgt_buf_add(&b, s, strlen(s)) : mgt_err(MGT_ERR_NOMEM, "out of memory");
			if (!st) st = mgt_buf_add(&b, "\n", 1);
			free(s);
			json_decref(o);
		}
	}
	if (!st) st = eval_ll_write(path, b.p ? b.p : "", b.n);
	free(b.p);
	return st;
}

static mgt_status load_tasks(const topts *o, task_run *tr)
{
	for (size_t t = 0; t < o->n_tasks; t++) {
		mgt_status st = mgt_task_load(&tr[t].task, o->tasks[t], o->type, o->limit);
		if (st == MGT_ERR_IO) st = mgt_err_ctx(MGT_ERR_USAGE, "--task");
		if (st) return st;
		for (size_t u = 0; u < t; u++)
			if (!strcmp(tr[u].task->name, tr[t].task->name))
				return mgt_err(MGT_ERR_USAGE, "--task %s and --task %s: two tasks named %s", o->tasks[u],
					       o->tasks[t], tr[t].task->name);
	}
	return MGT_OK;
}

static mgt_status score_tasks(const topts *o, eval_model *em, task_run *tr)
{
	int32_t prefix;
	int64_t max_len;
	mgt_tok_enc *enc = NULL;
	mgt_status st = eval_ll_prefix(em->tok, &prefix);
	if (!st) st = eval_ll_max_length(em->ev, o->max_length, &max_len);
	if (!st) st = mgt_tok_enc_new(&enc, em->tok);
	for (size_t t = 0; !st && t < o->n_tasks; t++) st = encode_task(o, enc, prefix, max_len, &tr[t]);
	mgt_tok_enc_free(enc);
	int64_t seq = st ? 0 : longest_input(tr, o->n_tasks, max_len);
	if (!st) st = eval_model_build(&o->m, em, seq);
	if (!st) st = score_all(em->ev, tr, o->n_tasks, max_len, seq);
	if (!st && o->samples) st = write_samples(o->samples, tr, o->n_tasks);
	if (!st) st = write_results(o, em->ev, tr, max_len);
	return st;
}

static mgt_status run(const topts *o)
{
	task_run *tr = calloc(o->n_tasks, sizeof *tr);
	if (!tr) return mgt_err(MGT_ERR_NOMEM, "out of memory");
	eval_model em = { 0 };
	mgt_status st = load_tasks(o, tr);
	if (!st) st = eval_model_open(&o->m, true, &em);
	if (!st) st = score_tasks(o, &em, tr);
	for (size_t t = 0; t < o->n_tasks; t++) {
		for (size_t i = 0; i < tr[t].n_req; i++) free(tr[t].req[i].toks);
		free(tr[t].req);
		mgt_task_free(tr[t].task);
	}
	free(tr);
	eval_model_close(&em);
	return st;
}

static int own_option(int c, const char *arg, void *ctx)
{
	topts *o = ctx;
	switch (c) {
	case OPT_TASK:
		o->tasks = realloc(o->tasks, (o->n_tasks + 1) * sizeof *o->tasks);
		if (!o->tasks) mgt_cli_fail(PROG, mgt_err(MGT_ERR_NOMEM, "out of memory"));
		o->tasks[o->n_tasks++] = arg;
		break;
	case OPT_TYPE:
		if (mgt_task_type_parse(arg, &o->type)) mgt_cli_usage_error(PROG, "%s", mgt_err_msg());
		break;
	case OPT_LIMIT: o->limit = mgt_cli_int(PROG, "--limit", arg); break;
	case OPT_MAXLEN: o->max_length = mgt_cli_int(PROG, "--max-length", arg); break;
	case OPT_BOOT: o->boot = mgt_cli_int(PROG, "--bootstrap-iters", arg); break;
	case OPT_OUTPUT: o->output = arg; break;
	case OPT_SAMPLES: o->samples = arg; break;
	case OPT_TB: o->tb = arg; break;
	case OPT_STRICT: o->strict = true; break;
	default: return 0;
	}
	return 1;
}

int eval_cmd_tasks(int argc, char **argv)
{
	static const struct option longopts[] = {
		EVAL_MODEL_LONGOPTS,
		{"task", required_argument, 0, OPT_TASK}, {"task-type", required_argument, 0, OPT_TYPE},
		{"limit", required_argument, 0, OPT_LIMIT}, {"output", required_argument, 0, OPT_OUTPUT},
		{"log-samples", required_argument, 0, OPT_SAMPLES}, {"max-length", required_argument, 0, OPT_MAXLEN},
		{"strict-length", no_argument, 0, OPT_STRICT}, {"bootstrap-iters", required_argument, 0, OPT_BOOT},
		{"tensorboard-dir", required_argument, 0, OPT_TB},
		{0, 0, 0, 0}};
	topts o = { .limit = -1, .boot = 100000 };
	eval_model_defaults(&o.m);
	o.m.command = EVAL_PROG " tasks";
	o.m.use = MGT_EVAL_USE_NEXT_TOKEN;
	eval_parse(argc, argv, longopts, &o.m, own_option, &o, usage);
	eval_model_check(&o.m);
	if (!o.n_tasks) mgt_cli_usage_error(PROG, "tasks: give --task FILE.jsonl (mgt-tasks(5))");
	if (o.limit == 0 || o.limit < -1) mgt_cli_usage_error(PROG, "--limit %lld: expected at least 1", o.limit);
	if (o.max_length < 0) mgt_cli_usage_error(PROG, "--max-length %lld: expected at least 1", o.max_length);
	if (o.boot < 0 || o.boot > 100000000) mgt_cli_usage_error(PROG, "--bootstrap-iters %lld: expected 0 to 1e8", o.boot);
	int r = eval_finish(run(&o));
	free(o.tasks);
	return r;
}
