/* mgt: the dispatcher. `mgt TOOL ARG...` runs mgt-TOOL with the ARGs, as `git TOOL` runs
 * git-TOOL. See mgt(1).
 *
 * Where TOOL is looked up, first match wins:
 *   1. the directory of the mgt binary itself (/proc/self/exe, symlinks resolved; argv[0] when
 *      /proc is not mounted), so a build tree's bin/mgt runs that tree's bin/mgt-*;
 *   2. each directory of PATH, in order.
 * The tool gets argv[0] = "mgt-TOOL" and the remaining arguments unchanged; its exit status is
 * mgt's (mgt is replaced by exec).  Exit status of mgt itself: 0 for --help/--version, 1 when a
 * tool was found but could not be executed, 2 for a usage error or an unknown tool. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MGT_VERSION
#define MGT_VERSION "0.1.0"
#endif

#define TOOL_PREFIX "mgt-"
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* One-line descriptions of the tools we know of (others are listed with their path). */
static const struct { const char *name, *what; } known[] = {
	{"preprocess", "tokenize JSONL (plain or zstd) into Megatron indexed datasets (.bin/.idx)"},
	{"tokenize", "encode text to token ids, or decode ids to text"},
	{"dataset", "inspect, merge and dump indexed datasets (.bin/.idx)"},
	{"plan", "parallel layout, memory and speed for a model on a cluster"},
	{"train", "pretrain GPT, BERT and T5 models (tensor, sequence, pipeline, data, expert parallel)"},
	{"eval", "evaluate a checkpoint or Hugging Face model: loss, perplexity, generation, tasks, logits"},
	{"ckpt-convert", "convert checkpoints to and from Hugging Face, any TP/PP"},
	{"export", "export a checkpoint or Hugging Face directory to GGUF (llama.cpp)"},
};

static const char *describe(const char *tool)
{
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (!strcmp(known[i].name, tool))
			return known[i].what;
	return NULL;
}

/* The directory holding this binary, malloc'd, or NULL when it cannot be told. */
static char *self_dir(const char *argv0)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
	if (n > 0)
		buf[n] = 0;
	else if (argv0 && strchr(argv0, '/') && strlen(argv0) < sizeof buf)
		strcpy(buf, argv0);
	else
		return NULL;
	char *slash = strrchr(buf, '/');
	if (!slash)
		return NULL;
	if (slash == buf)
		slash++; /* "/mgt": the root directory */
	*slash = 0;
	return strdup(buf);
}

static int is_executable_file(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

/* A tool name is what may follow "mgt-" in a file name we run: not empty, no '/', no leading
 * '-' or '.'. */
static int valid_tool_name(const char *s)
{
	return *s && *s != '-' && *s != '.' && !strchr(s, '/');
}

/* The first dir_len bytes of dir, "/", name: a malloc'd string. */
static char *join(const char *dir, size_t dir_len, const char *name)
{
	size_t n = dir_len + strlen(name) + 2;
	char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "mgt: error: out of memory\n");
		exit(1);
	}
	snprintf(p, n, "%.*s/%s", (int)dir_len, dir, name);
	return p;
}

/* Call fn(dir, dir_len, arg) for this binary's directory, then each PATH entry, until it returns
 * nonzero; returns that value or 0. */
static int each_dir(const char *self, int (*fn)(const char *, size_t, void *), void *arg)
{
	int r = 0;
	if (self && (r = fn(self, strlen(self), arg)))
		return r;
	const char *path = getenv("PATH");
	if (!path)
		path = DEFAULT_PATH;
	for (const char *p = path;; p++) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		/* an empty PATH entry means the current directory, as for execvp */
		if ((r = fn(n ? p : ".", n ? n : 1, arg)))
			return r;
		if (!end)
			return 0;
		p = end;
	}
}

/* ---- run a tool --------------------------------------------------------------------------- */

typedef struct { const char *file; char **argv; int exec_errno; char *failed; } run_ctx;

static int try_exec(const char *dir, size_t n, void *arg)
{
	run_ctx *c = arg;
	char *path = join(dir, n, c->file);
	if (is_executable_file(path)) {
		execv(path, c->argv);
		c->exec_errno = errno; /* found but not runnable: report it rather than look further */
		c->failed = path;
		return 1;
	}
	free(path);
	return 0;
}

static int run_tool(const char *self, const char *tool, char **args)
{
	if (!valid_tool_name(tool)) {
		fprintf(stderr, "mgt: error: '%s' is not an mgt tool (see mgt --help)\n", tool);
		return 2;
	}
	size_t n = strlen(TOOL_PREFIX) + strlen(tool) + 1;
	char *full = malloc(n);
	if (!full) {
		fprintf(stderr, "mgt: error: out of memory\n");
		return 1;
	}
	snprintf(full, n, "%s%s", TOOL_PREFIX, tool);
	args[0] = full; /* the tool names itself mgt-TOOL in its messages */
	run_ctx c = {full, args, 0, NULL};
	if (each_dir(self, try_exec, &c)) {
		fprintf(stderr, "mgt: error: cannot run %s: %s\n", c.failed, strerror(c.exec_errno));
		return 1;
	}
	fprintf(stderr, "mgt: error: '%s' is not an mgt tool (see mgt --help)\n", tool);
	return 2;
}

/* ---- list the tools ------------------------------------------------------------------------ */

typedef struct { char **name, **path; size_t n, cap; } tool_list;

static int list_dir(const char *dir, size_t n, void *arg)
{
	tool_list *l = arg;
	char *d = strndup(dir, n);
	DIR *dp = d ? opendir(d) : NULL;
	struct dirent *e;
	while (dp && (e = readdir(dp))) {
		const char *tool = e->d_name + strlen(TOOL_PREFIX);
		/* names with a dot (mgt-x.sh, mgt-x.tmp.123, mgt-x.1) are not listed */
		if (strncmp(e->d_name, TOOL_PREFIX, strlen(TOOL_PREFIX)) || !valid_tool_name(tool) || strchr(tool, '.'))
			continue;
		int seen = 0;
		for (size_t i = 0; i < l->n && !seen; i++)
			seen = !strcmp(l->name[i], tool);
		char *path = join(dir, n, e->d_name);
		if (seen || !is_executable_file(path)) {
			free(path);
			continue;
		}
		if (l->n == l->cap) {
			l->cap = l->cap ? 2 * l->cap : 16;
			l->name = realloc(l->name, l->cap * sizeof *l->name);
			l->path = realloc(l->path, l->cap * sizeof *l->path);
			if (!l->name || !l->path) {
				fprintf(stderr, "mgt: error: out of memory\n");
				exit(1);
			}
		}
		l->name[l->n] = strdup(tool);
		l->path[l->n++] = path;
	}
	if (dp)
		closedir(dp);
	free(d);
	return 0;
}

static void usage(FILE *f, const char *self)
{
	fprintf(f, "Usage: mgt TOOL [ARG]...\n"
		   "       mgt --help | --version\n"
		   "Run the mgt tool mgt-TOOL with the ARGs. It is looked for next to this program%s%s%s,\n"
		   "then on PATH. Each tool reads '-' as standard input, writes logs to standard error and\n"
		   "documents its exit status in its manual.\n",
		   self ? " (" : "", self ? self : "", self ? ")" : "");
}

static void help(const char *self)
{
	usage(stdout, self);
	tool_list l = {0};
	each_dir(self, list_dir, &l);
	/* sort by name: insertion sort, the list is short */
	for (size_t i = 1; i < l.n; i++)
		for (size_t j = i; j > 0 && strcmp(l.name[j - 1], l.name[j]) > 0; j--) {
			char *t = l.name[j]; l.name[j] = l.name[j - 1]; l.name[j - 1] = t;
			t = l.path[j]; l.path[j] = l.path[j - 1]; l.path[j - 1] = t;
		}
	printf("\nTools found:\n");
	if (!l.n)
		printf("  (none: no mgt-* program next to this one or on PATH)\n");
	for (size_t i = 0; i < l.n; i++) {
		const char *what = describe(l.name[i]);
		printf("  %-14s %s\n", l.name[i], what ? what : l.path[i]);
		free(l.name[i]);
		free(l.path[i]);
	}
	free(l.name);
	free(l.path);
	printf("\nRun 'mgt TOOL --help' for a tool's options. Manuals: mgt(1), mgt(7), mgt-TOOL(1).\n"
	       "Exit status: the tool's; or 1 when the tool cannot be executed, 2 for a usage error or an\n"
	       "unknown tool.\n");
}

int main(int argc, char **argv)
{
	char *self = self_dir(argc > 0 ? argv[0] : NULL);
	int rc;
	if (argc < 2) {
		usage(stderr, self);
		fprintf(stderr, "mgt: error: no tool given\nTry 'mgt --help'.\n");
		rc = 2;
	} else if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || (!strcmp(argv[1], "help") && argc == 2)) {
		help(self);
		rc = 0;
	} else if (!strcmp(argv[1], "--version")) {
		printf("mgt %s\n", MGT_VERSION);
		rc = 0;
	} else if (!strcmp(argv[1], "help") && argc == 3) {
		/* `mgt help TOOL` = `mgt TOOL --help` */
		static char help_flag[] = "--help";
		char *args[] = {argv[0], help_flag, NULL};
		rc = run_tool(self, argv[2], args);
	} else if (argv[1][0] == '-') {
		fprintf(stderr, "mgt: error: unknown option '%s'\nTry 'mgt --help'.\n", argv[1]);
		rc = 2;
	} else
		rc = run_tool(self, argv[1], argv + 1);
	free(self);
	return fflush(stdout) ? 1 : rc;
}
