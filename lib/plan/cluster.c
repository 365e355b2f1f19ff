/* lib/plan/cluster.c: cluster files (mgt-plan(5)) and their calibration from the GEMM-ceiling
 * benchmark. */
#include "plan.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The keys of a cluster file: name, field offset, integer?, required?, range. */
#define OFF(f) offsetof(mgt_cluster, f)
static const struct key {
	const char *name;
	size_t off;
	char kind;                 /* 'i' int, 'd' double, 'b' bool */
	bool required;
	double lo, hi;
} keys[] = {
	{ "gpus_per_node", OFF(gpus_per_node), 'i', true, 1, 1 << 16 },
	{ "nodes", OFF(nodes), 'i', true, 1, 1 << 20 },
	{ "gpu_memory_bytes", OFF(gpu_memory), 'd', true, 1, 1e15 },
	{ "peak_tflops", OFF(peak_tflops), 'd', true, 1e-6, 1e6 },
	{ "gemm_tflops", OFF(gemm_tflops), 'd', true, 1e-6, 1e6 },
	{ "fp32_tflops", OFF(fp32_tflops), 'd', true, 1e-6, 1e6 },
	{ "fp8_gemm_tflops", OFF(fp8_gemm_tflops), 'd', false, 0, 1e6 },
	{ "memory_bandwidth_gbps", OFF(memory_bandwidth), 'd', true, 1e-6, 1e6 },
	{ "intra_node_bandwidth_gbps", OFF(intra_bandwidth), 'd', true, 1e-6, 1e6 },
	{ "inter_node_bandwidth_gbps", OFF(inter_bandwidth), 'd', true, 1e-6, 1e6 },
	{ "intra_node_latency_us", OFF(intra_latency), 'd', true, 0, 1e6 },
	{ "inter_node_latency_us", OFF(inter_latency), 'd', true, 0, 1e6 },
	{ "attention_fwd_efficiency", OFF(attention_fwd_efficiency), 'd', true, 1e-3, 1 },
	{ "attention_bwd_efficiency", OFF(attention_bwd_efficiency), 'd', true, 1e-3, 1 },
	{ "kernel_overhead_us", OFF(kernel_overhead), 'd', true, 0, 1e6 },
	{ "efficiency", OFF(efficiency), 'd', false, 1e-3, 1 },
	{ "overhead_bytes", OFF(overhead_bytes), 'd', true, 0, 1e15 },
	{ "host_memory", OFF(host_memory), 'b', false, 0, 1 },
};

/* share/mgt/clusters/NAME.json ($MGT_SHARE first, then beside the executable, as mgt-train's
 * --model presets); NAME with a '/' or ".json" is a path. */
static mgt_status cluster_path(const char *name, char *out, size_t n)
{
	char dir[PATH_MAX];
	if (mgt_share_preset("clusters", name, out, n, dir, sizeof dir)) return MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "--cluster %s: no such preset (looked in %s: dgx-h100, dgx-h200, dgx-a100, "
		       "cpu)", name, dir);
}

mgt_status mgt_cluster_load(const char *name_or_path, mgt_cluster *c)
{
	char path[PATH_MAX + 64];
	mgt_status st = cluster_path(name_or_path, path, sizeof path);
	if (st) return st;
	json_error_t e;
	json_t *o = json_load_file(path, 0, &e);
	if (!o) return mgt_err(access(path, R_OK) ? MGT_ERR_IO : MGT_ERR_INPUT, "%s:%d: %s", path, e.line, e.text);
	memset(c, 0, sizeof *c);
	c->efficiency = 1;
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	snprintf(c->name, sizeof c->name, "%.*s", (int)(strstr(base, ".json") ? strstr(base, ".json") - base : (long)strlen(base)), base);
	if (!json_is_object(o)) st = mgt_err(MGT_ERR_INPUT, "%s: expected a JSON object", path);
	const char *k;
	json_t *v;
	if (!st) json_object_foreach(o, k, v) {
		if (k[0] == '_') continue;
		if (!strcmp(k, "name")) {
			if (!json_is_string(v)) { st = mgt_err(MGT_ERR_INPUT, "%s: \"name\": expected a string", path); break; }
			snprintf(c->name, sizeof c->name, "%s", json_string_value(v));
			continue;
		}
		const struct key *d = NULL;
		for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
			if (!strcmp(keys[i].name, k)) d = &keys[i];
		if (!d) { st = mgt_err(MGT_ERR_INPUT, "%s: unknown key \"%s\" (mgt-plan(5) lists the keys)", path, k); break; }
		char *p = (char *)c + d->off;
		if (d->kind == 'b') {
			if (!json_is_boolean(v)) { st = mgt_err(MGT_ERR_INPUT, "%s: \"%s\": expected true or false", path, k); break; }
			*(bool *)p = json_is_true(v);
			continue;
		}
		if (!json_is_number(v) || (d->kind == 'i' && !json_is_integer(v))) {
			st = mgt_err(MGT_ERR_INPUT, "%s: \"%s\": expected %s", path, k, d->kind == 'i' ? "an integer" : "a number");
			break;
		}
		double x = json_number_value(v);
		if (!(x >= d->lo && x <= d->hi)) {
			st = mgt_err(MGT_ERR_INPUT, "%s: \"%s\": %g is out of range [%g, %g]", path, k, x, d->lo, d->hi);
			break;
		}
		if (d->kind == 'i') *(int *)p = (int)x;
		else *(double *)p = x;
	}
	for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++)
		if (keys[i].required && !json_object_get(o, keys[i].name))
			st = mgt_err(MGT_ERR_INPUT, "%s: missing key \"%s\"", path, keys[i].name);
	json_decref(o);
	return st;
}

mgt_status mgt_cluster_calibrate(mgt_cluster *c, const char *file, char *check, size_t n)
{
	FILE *f = fopen(file, "r");
	if (!f) return mgt_err(MGT_ERR_IO, "%s: cannot open", file);
	char line[1024];
	double big_ms = 0, bw = 0, fp8_ms = 0;
	struct { double m, n, k, tflops; } shapes[16];
	int ns = 0;
	while (fgets(line, sizeof line, f)) {
		double m, nn, k, x, ms;
		if (sscanf(line, "gemm bf16 %lf^3: %*f TFLOP/s (median of %*d, %lf ms", &m, &ms) == 2 && m == 8192) big_ms = ms;
		else if (sscanf(line, "gemm fp8 %lf^3: %*f TFLOP/s (median of %*d, %lf ms", &m, &ms) == 2 && m == 8192 &&
			 strstr(line, "e4m3 x e4m3") && !(fp8_ms > 0))
			fp8_ms = ms;
		else if (sscanf(line, "gemm bf16 %lfx%lfx%lf %*[^:]: %lf TFLOP/s", &m, &nn, &k, &x) == 4 && ns < 16)
			shapes[ns].m = m, shapes[ns].n = nn, shapes[ns].k = k, shapes[ns++].tflops = x;
		else if (!strncmp(line, "add 1 GiB", 9) && strstr(line, "): ") && sscanf(strstr(line, "): ") + 3, "%lf GB/s", &x) == 1)
			bw = x;
	}
	fclose(f);
	if (!(big_ms > 0) || !(bw > 0))
		return mgt_err(MGT_ERR_INPUT, "%s: no \"gemm bf16 8192^3: ... (median of N, T ms\" or \"add 1 GiB ...: B GB/s\" "
			       "line (the output of tests/bench/gpu.sh)", file);
	/* The benchmark times mgt's GEMM op: fp32 operands cast to bf16 (read 4, write 2 bytes an
	 * element, A and B), the bf16 GEMM, an fp32 result.  Its memory traffic at the measured
	 * bandwidth comes off the time; what is left is the compute side. */
	double N = 8192, traffic = 2 * N * N * 6 + 2 * N * N * 2 + N * N * 4;
	double compute_s = big_ms * 1e-3 - traffic / (bw * 1e9);
	if (!(compute_s > 0)) return mgt_err(MGT_ERR_INPUT, "%s: the 8192^3 GEMM time is below its memory traffic", file);
	c->memory_bandwidth = bw;
	c->gemm_tflops = 2 * N * N * N / compute_s / 1e12;
	/* gemm_fp8 on bytes already cast: A and B 1 byte an element, a bf16 result */
	double fp8_s = fp8_ms * 1e-3 - (2 * N * N + 2 * N * N) / (bw * 1e9);
	if (fp8_ms > 0 && fp8_s > 0) c->fp8_gemm_tflops = 2 * N * N * N / fp8_s / 1e12;
	if (check && n) {
		check[0] = 0;
		for (int i = 0; i < ns; i++) {
			/* "MxKxN" as gemm_ceiling prints it: tokens x in x out */
			double m = shapes[i].m, k = shapes[i].n, nn = shapes[i].k;
			double tr = (m * k + nn * k) * 6 + (m * k + nn * k) * 2 + m * nn * 4;
			double t = 2 * m * nn * k / (c->gemm_tflops * 1e12) + tr / (bw * 1e9);
			size_t l = strlen(check);
			snprintf(check + l, n - l, "%sgemm bf16 %.0fx%.0fx%.0f: measured %.1f, predicted %.1f TFLOP/s (%+.1f%%)",
				 l ? "; " : "", m, k, nn, shapes[i].tflops, 2 * m * nn * k / t / 1e12,
				 100 * (2 * m * nn * k / t / 1e12 / shapes[i].tflops - 1));
		}
	}
	return MGT_OK;
}
