/* lib/backend/mem.c: how much memory a backend can still allocate (mgt-train's check before it
 * allocates).  Host: /proc/meminfo's MemAvailable and the cgroup limit (proc(5),
 * Documentation/admin-guide/cgroup-v2.rst "memory.max", cgroup-v1 memory.limit_in_bytes). */
#include "backend/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first number in a file, or SIZE_MAX when it is absent, unreadable or "max". */
static size_t file_number(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[64] = "";
	if (f && !fgets(buf, sizeof buf, f)) buf[0] = 0;
	if (f) fclose(f);
	char *end;
	unsigned long long v = strtoull(buf, &end, 10);
	return end == buf ? SIZE_MAX : (size_t)v;
}

static size_t meminfo_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	size_t kb = SIZE_MAX;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "MemAvailable:", 13)) kb = (size_t)strtoull(line + 13, NULL, 10);
	if (f) fclose(f);
	return kb == SIZE_MAX ? kb : kb * 1024;
}

/* Limit less usage of this process's cgroup (v2 at /sys/fs/cgroup, else v1's memory controller). */
static size_t cgroup_available(const char **which)
{
	size_t lim = file_number("/sys/fs/cgroup/memory.max"), use = file_number("/sys/fs/cgroup/memory.current");
	*which = "cgroup memory.max";
	if (lim == SIZE_MAX) {
		lim = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
		use = file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
		*which = "cgroup memory.limit_in_bytes";
	}
	/* v1 reports "no limit" as a huge number */
	if (lim == SIZE_MAX || lim >= ((size_t)1 << 60) || use == SIZE_MAX) return SIZE_MAX;
	return lim > use ? lim - use : 0;
}

size_t mgt_backend_mem_available(mgt_backend *be, char *what, size_t n)
{
	if (!be->host_memory) return mgt_backend_cuda_mem_available(be, what, n);
	const char *cg;
	size_t a = meminfo_available(), c = cgroup_available(&cg);
	snprintf(what, n, "%s", c < a ? cg : a == SIZE_MAX ? "unknown" : "MemAvailable");
	return c < a ? c : a;
}

static const char *const op_names[MGT_OP_COUNT] = { MGT_BACKEND_OPS(MGT_BACKEND_OP_NAME) };

#define OP_PRESENT(ret, name, params) case MGT_OP_##name: return be->ops->name != NULL;

static bool has_op(const mgt_backend *be, mgt_backend_op op)
{
	switch (op) {
	MGT_BACKEND_OPS(OP_PRESENT)
	default: return false;
	}
}

#define OP_FP32_ONLY(ret, name, params) case MGT_OP_##name: return true;

/* The ops that take fp32 elements only (backend.h: mamba_step, the Mamba-2 mixer's inference step). */
static bool fp32_only(mgt_backend_op op)
{
	switch (op) {
	case MGT_OP_mamba_step: return true;
	MGT_BACKEND_CPU_ONLY_OPS(OP_FP32_ONLY)
	default: return false;
	}
}

bool mgt_backend_supports(mgt_backend *be, mgt_backend_op op, mgt_elem_type t, char *why, size_t n)
{
	if ((int)op < 0 || op >= MGT_OP_COUNT) {
		snprintf(why, n, "no backend op number %d", (int)op);
		return false;
	}
	if (!has_op(be, op)) {
		snprintf(why, n, "the %s backend has no op %s", be->ops->name, op_names[op]);
		return false;
	}
	if (t != MGT_DT_F32 && t != MGT_DT_BF16 && t != MGT_DT_F16) {
		snprintf(why, n, "backend op %s takes fp32, bf16 or fp16 elements", op_names[op]);
		return false;
	}
	if (t != MGT_DT_F32 && fp32_only(op)) {
		snprintf(why, n, "backend op %s takes fp32 elements only", op_names[op]);
		return false;
	}
	if (be->host_memory) return true; /* the CPU runs every op it has (fp8 by emulation) */
	return mgt_backend_cuda_supports(be, op, t, why, n);
}
