/* lib/args/tokfiles.c: pointing the tokenizer flags at the tokenizer files a checkpoint carries
 * (args.h; mgt-ckpt(5) TOKENIZER FILES; lib/train/tokfiles.c stores them), so that a checkpoint
 * is evaluated, converted and exported from any directory. */
#include "args/args.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

mgt_status mgt_args_tok_files_use(mgt_args *a, const void *meta, const char *iter_dir)
{
	json_t *files = json_object_get(json_object_get((const json_t *)meta, "tokenizer"), "files"), *v;
	const char *role;
	json_object_foreach(files, role, v) {
		const char *rel = json_string_value(v);
		char p[4096];
		if (!rel || rel[0] == '/' || strstr(rel, "..") ||
		    (strcmp(role, "vocab_file") && strcmp(role, "merge_file") && strcmp(role, "tokenizer_model")))
			continue;
		snprintf(p, sizeof p, "%s/%s", iter_dir, rel);
		if (access(p, R_OK)) continue;
		mgt_status st = mgt_args_set(a, role, p);
		if (st) return st;
	}
	return MGT_OK;
}
