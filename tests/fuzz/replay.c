/* Corpus replayer for fuzz targets: calls LLVMFuzzerTestOneInput once per file named on the
 * command line (a directory stands for the files in it). Linked with each tests/fuzz/fuzz_*.c
 * when not building with libFuzzer, so `make check` replays the corpora under the sanitizers. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read a whole file; NULL on failure (message printed). */
static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return NULL;
	}
	size_t cap = 4096, len = 0, k;
	uint8_t *p = malloc(cap);
	while (p && (k = fread(p + len, 1, cap - len, f)) > 0) {
		len += k;
		if (len == cap) {
			uint8_t *q = realloc(p, cap *= 2);
			if (!q)
				free(p);
			p = q;
		}
	}
	if (!p || ferror(f)) {
		fprintf(stderr, "%s: read failed\n", path);
		free(p);
		p = NULL;
	}
	fclose(f);
	*n = len;
	return p;
}

static int replay_file(const char *path)
{
	size_t n;
	uint8_t *p = slurp(path, &n);
	if (!p)
		return 1;
	/* An exact-size copy, so the sanitizers see reads past the input's end. */
	uint8_t *exact = malloc(n ? n : 1);
	memcpy(exact, p, n);
	free(p);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

static int replay_dir(const char *dir, int *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int bad = 0;
	if (!d) {
		perror(dir);
		return 1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		bad |= replay_file(path);
		++*count;
	}
	closedir(d);
	return bad;
}

int main(int argc, char **argv)
{
	int bad = 0, count = 0;
	for (int i = 1; i < argc; i++) {
		struct stat sb;
		if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
			bad |= replay_dir(argv[i], &count);
		} else {
			bad |= replay_file(argv[i]);
			count++;
		}
	}
	printf("replayed %d inputs\n", count);
	return bad;
}
