/* lib/train/tokfiles.c: the tokenizer files carried inside checkpoints (train.h; mgt-ckpt(5)
 * TOKENIZER FILES), so that a checkpoint is evaluated, converted and exported from any
 * directory, as Hugging Face directories carry theirs; reading them back is lib/args/tokfiles.c. */
#include "train/train.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

#define TOK_DIR "tokenizer/"
#define MAX_FILES 8

typedef struct {
	const char *role; /* the args key it replaces, or NULL for a file read from beside another */
	char src[4300], rel[512];
} tok_file;

static bool is_dir(const char *p)
{
	struct stat sb;
	return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

static void add(tok_file *f, int *n, const char *role, const char *src)
{
	if (*n >= MAX_FILES || access(src, R_OK) || is_dir(src)) return;
	for (int i = 0; i < *n; i++)
		if (!strcmp(f[i].src, src)) return; /* the same file twice */
	const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
	tok_file *x = &f[*n];
	x->role = role;
	snprintf(x->src, sizeof x->src, "%s", src);
	snprintf(x->rel, sizeof x->rel, TOK_DIR "%s", base);
	for (int i = 0; i < *n; i++) /* another file of that name: kept apart by its role */
		if (!strcmp(f[i].rel, x->rel)) snprintf(x->rel, sizeof x->rel, TOK_DIR "%s-%s", role ? role : "extra", base);
	(*n)++;
}

/* tokenizer_config.json and special_tokens_map.json from dir (the Hugging Face tokenizer's own
 * options, which lib/tok reads beside tokenizer.json), and generation_config.json (its
 * eos_token_id list: where mgt-eval generate --chat stops, mgt_chat_end_ids). */
static void add_beside(tok_file *f, int *n, const char *dir)
{
	static const char *const extra[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"};
	char p[4300];
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, extra[i]);
		add(f, n, NULL, p);
	}
}

static int file_list(const mgt_args *a, tok_file *f)
{
	int n = 0;
	if (a->vocab_file) add(f, &n, "vocab_file", a->vocab_file);
	if (a->merge_file) add(f, &n, "merge_file", a->merge_file);
	const char *m = a->tokenizer_model;
	char p[4200];
	if (m && is_dir(m)) { /* a Hugging Face directory: its tokenizer.json */
		snprintf(p, sizeof p, "%s/tokenizer.json", m);
		add(f, &n, "tokenizer_model", p);
		add_beside(f, &n, m);
	} else if (m) {
		add(f, &n, "tokenizer_model", m);
		snprintf(p, sizeof p, "%s", m);
		char *sl = strrchr(p, '/');
		if (sl) *sl = 0;
		add_beside(f, &n, sl ? p : ".");
	}
	return n;
}

void *mgt_train_tok_files_json(const mgt_args *a)
{
	tok_file f[MAX_FILES];
	int n = file_list(a, f);
	json_t *o = json_object();
	for (int i = 0; o && i < n; i++)
		if (f[i].role && json_object_set_new(o, f[i].role, json_string(f[i].rel))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

mgt_status mgt_train_tok_files_save(const mgt_args *a, const char *save_dir, int64_t iteration)
{
	tok_file f[MAX_FILES];
	int n = file_list(a, f);
	mgt_status st = MGT_OK;
	for (int i = 0; !st && i < n; i++) st = mgt_ckpt_add_file(save_dir, iteration, f[i].rel, f[i].src);
	return st ? mgt_err_ctx(st, "copying the tokenizer files into the checkpoint") : MGT_OK;
}
