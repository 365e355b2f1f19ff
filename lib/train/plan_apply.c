/* lib/train/plan_apply.c: mgt-train --plan FILE[:N], a plan written by mgt-plan (mgt-plan(5)):
 * its flags go before the command line's, and after the first iterations the trainer prints
 * the plan's predicted memory and iteration time beside the computed and measured ones. */
#include "train_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Flags that fix the layout the plan was computed for: given on the command line too, they
 * must agree with the plan's. */
static const char *const LAYOUT_FLAGS[] = {
	"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
	"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
	"--micro-batch-size", "--global-batch-size", "--seq-length", "--recompute-granularity",
	"--recompute-method", "--recompute-num-layers", "--data-parallel-sharding-strategy",
	"--num-distributed-optimizer-instances", NULL,
};

static bool is_layout_flag(const char *f)
{
	for (int i = 0; LAYOUT_FLAGS[i]; i++)
		if (!strcmp(f, LAYOUT_FLAGS[i])) return true;
	return false;
}

void mgt_train_plan_free(mgt_train_plan *p)
{
	for (int i = 0; p->args && i < p->nargs; i++) free(p->args[i]);
	free(p->args);
	free(p->file);
	memset(p, 0, sizeof *p);
}

static mgt_status plan_number(json_t *o, const char *file, int rank, const char *path, double *out)
{
	json_t *v = o;
	char buf[64];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, ".")) v = json_object_get(v, k);
	if (!json_is_number(v))
		return mgt_err(MGT_ERR_INPUT, "%s: plan %d: \"%s\" is missing or not a number", file, rank, path);
	*out = json_number_value(v);
	return MGT_OK;
}

static mgt_status plan_fields(mgt_train_plan *p, json_t *pl)
{
	double gpus = 0;
	mgt_status st = plan_number(pl, p->file, p->rank, "gpus", &gpus);
	if (!st) st = plan_number(pl, p->file, p->rank, "memory.total", &p->memory_bytes);
	if (!st) st = plan_number(pl, p->file, p->rank, "memory.overhead", &p->overhead_bytes);
	if (!st) st = plan_number(pl, p->file, p->rank, "time.iteration", &p->iteration_s);
	if (!st) st = plan_number(pl, p->file, p->rank, "tflops_per_gpu", &p->tflops_per_gpu);
	if (st) return st;
	p->gpus = (int)gpus;
	json_t *args = json_object_get(pl, "args");
	if (!json_is_array(args))
		return mgt_err(MGT_ERR_INPUT, "%s: plan %d: \"args\" is missing or not an array", p->file, p->rank);
	p->nargs = (int)json_array_size(args);
	if (!(p->args = mgt_malloc(((size_t)p->nargs + 1) * sizeof *p->args))) return MGT_ERR_NOMEM;
	memset(p->args, 0, ((size_t)p->nargs + 1) * sizeof *p->args);
	for (int i = 0; i < p->nargs; i++) {
		const char *s = json_string_value(json_array_get(args, (size_t)i));
		if (!s) return mgt_err(MGT_ERR_INPUT, "%s: plan %d: args[%d] is not a string", p->file, p->rank, i);
		if (!(p->args[i] = mgt_strdup(s))) return MGT_ERR_NOMEM;
	}
	return MGT_OK;
}

/* FILE[:N]: N the plan's "rank" (1 when absent). */
static mgt_status plan_spec(mgt_train_plan *p, const char *spec)
{
	if (!(p->file = mgt_strdup(spec))) return MGT_ERR_NOMEM;
	p->rank = 1;
	char *colon = strrchr(p->file, ':'), *end;
	if (colon && colon[1]) {
		long r = strtol(colon + 1, &end, 10);
		if (!*end) {
			if (r < 1) return mgt_err(MGT_ERR_USAGE, "--plan %s: plan number %ld is not >= 1", spec, r);
			p->rank = (int)r;
			*colon = 0;
		}
	}
	return MGT_OK;
}

mgt_status mgt_train_plan_load(mgt_train_plan *p, const char *spec)
{
	memset(p, 0, sizeof *p);
	if (!spec || !*spec) return mgt_err(MGT_ERR_USAGE, "--plan needs a value: FILE or FILE:N");
	mgt_status st = plan_spec(p, spec);
	if (st) return st;
	json_error_t e;
	json_t *o = json_load_file(p->file, 0, &e);
	if (!o)
		return mgt_err(e.line > 0 ? MGT_ERR_INPUT : MGT_ERR_IO, "--plan %s: line %d: %s", p->file, e.line, e.text);
	const char *fmt = json_string_value(json_object_get(o, "format"));
	json_t *plans = json_object_get(o, "plans"), *pl = NULL;
	if (!fmt || strcmp(fmt, "mgt-plan") || !json_is_array(plans))
		st = mgt_err(MGT_ERR_INPUT, "%s: not an mgt-plan file (\"format\": \"mgt-plan\" and a \"plans\" array "
			     "expected; see mgt-plan(5))", p->file);
	for (size_t i = 0; !st && i < json_array_size(plans) && !pl; i++)
		if (json_integer_value(json_object_get(json_array_get(plans, i), "rank")) == p->rank)
			pl = json_array_get(plans, i);
	if (!st && !pl)
		st = mgt_err(MGT_ERR_USAGE, "--plan %s: no plan %d (the file holds %zu)", p->file, p->rank,
			     json_array_size(plans));
	if (!st) st = plan_fields(p, pl);
	json_decref(o);
	return st;
}

/* The value the command line gives flag f (argv[i] "--f V" or "--f=V"), or NULL. */
static const char *cli_value(int argc, char **argv, const char *f, bool *given)
{
	size_t n = strlen(f);
	const char *v = NULL;
	*given = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], f)) {
			*given = true;
			v = i + 1 < argc ? argv[i + 1] : NULL;
		} else if (!strncmp(argv[i], f, n) && argv[i][n] == '=') {
			*given = true;
			v = argv[i] + n + 1;
		}
	}
	return v;
}

static mgt_status check_conflicts(const mgt_train_plan *p, int argc, char **argv)
{
	for (int i = 0; i < p->nargs; i++) {
		if (!is_layout_flag(p->args[i])) continue;
		const char *pv = i + 1 < p->nargs && strncmp(p->args[i + 1], "--", 2) ? p->args[i + 1] : "";
		bool given;
		const char *cv = cli_value(argc, argv, p->args[i], &given);
		if (given && (!cv || strcmp(cv, pv)))
			return mgt_err(MGT_ERR_USAGE, "--plan %s:%d sets %s %s, the command line %s %s: drop one, or "
				       "make a plan for that layout", p->file, p->rank, p->args[i], pv, p->args[i],
				       cv ? cv : "");
	}
	return MGT_OK;
}

mgt_status mgt_train_plan_argv(const mgt_train_plan *p, int argc, char **argv, int *out_argc, char ***out_argv)
{
	mgt_status st = check_conflicts(p, argc, argv);
	if (st) return st;
	char **v = mgt_malloc(((size_t)argc + (size_t)p->nargs + 1) * sizeof *v);
	if (!v) return MGT_ERR_NOMEM;
	int n = 0;
	v[n++] = argv[0];
	for (int i = 0; i < p->nargs; i++) v[n++] = p->args[i];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--plan")) { i++; continue; }
		if (!strncmp(argv[i], "--plan=", 7)) continue;
		v[n++] = argv[i];
	}
	v[n] = NULL;
	*out_argc = n;
	*out_argv = v;
	return MGT_OK;
}

/* ---- the report ---- */

/* The iteration after which the plan report is printed: the fifth, or the last when fewer. */
static int64_t report_iteration(const trainer *t)
{
	return t->a->train_iters < 5 ? t->a->train_iters : 5;
}

mgt_status trainer_plan_check(const trainer *t)
{
	const mgt_train_plan *p = t->io->plan;
	if (!p || p->gpus == t->a->world_size) return MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "--plan %s:%d is for %d processes (GPUs), this run has %lld", p->file, p->rank,
		       p->gpus, (long long)t->a->world_size);
}

void trainer_plan_iteration(trainer *t, double step_s)
{
	const mgt_train_plan *p = t->io->plan;
	if (!p) return;
	if (t->iteration == 1) t->plan_t1 = mgt_now();
	if (t->iteration != report_iteration(t)) return;
	/* one iteration only: its own time (the log line may have restarted the interval's clock) */
	double iter_s = t->iteration > 1 ? (mgt_now() - t->plan_t1) / (double)(t->iteration - 1) : step_s;
	/* the plan predicts the most loaded rank: the one with the most computed memory (the
	 * lowest such rank), measured there */
	bool cpu = t->be->host_memory;
	char what[64];
	mgt_comm *w = t->ps.world;
	double *all = mgt_malloc(2 * (size_t)w->size * sizeof *all), meas[2];
	if (!all) return;
	double *mine = all + 2 * (size_t)w->rank;
	mine[0] = cpu ? (double)trainer_peak_rss() : trainer_device_in_use(t, what, sizeof what);
	mine[1] = trainer_computed_memory(t);
	if (w->size > 1 && w->ops->allgather(w, all, mine, 2, MGT_DT_F64)) {
		free(all);
		return;
	}
	int top = 0;
	for (int r = 1; r < w->size; r++)
		if (all[2 * r + 1] > all[2 * top + 1]) top = r;
	meas[0] = all[2 * top];
	meas[1] = all[2 * top + 1];
	free(all);
	if (!t->io->log) return;
	double mb = 1024.0 * 1024.0, pred = cpu ? p->memory_bytes : p->memory_bytes - p->overhead_bytes;
	fprintf(t->io->log, "plan %s:%d: memory per %s predicted %.1f MiB, computed %.1f MiB, measured %.1f MiB (%s) | "
		"measured / predicted: %.3f | iteration time predicted %.3f s, measured %.3f s (%s) | "
		"measured / predicted: %.3f\n", p->file, p->rank, cpu ? "process" : "GPU", pred / mb, meas[1] / mb,
		meas[0] / mb, cpu ? "peak RSS of the rank with the most computed" :
		"cudaMemGetInfo on the rank with the most computed, context excluded",
		meas[0] / pred, p->iteration_s, iter_s, t->iteration > 1 ? "mean after the first iteration" : "first iteration",
		iter_s / p->iteration_s);
	fflush(t->io->log);
}
