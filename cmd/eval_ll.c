/* cmd/eval_ll.c: shared by mgt-eval tasks and mgt-eval perplexity (eval_ll.h). */
#include <math.h>
#include <string.h>

#include <jansson.h>

#include "eval_ll.h"
#include "tb/tb.h"

mgt_status eval_ll_max_length(const mgt_eval *ev, long long given, int64_t *out)
{
	const mgt_model_config *mc = &mgt_eval_args(ev)->model;
	*out = given > 0 ? given : mc->seq_length;
	if (*out < 1) return mgt_err(MGT_ERR_USAGE, "the checkpoint records no seq_length: give --max-length");
	if (!strcmp(mc->position_embedding_type, "learned_absolute") && *out > mc->max_position_embeddings)
		return mgt_err(MGT_ERR_USAGE, "--max-length %lld: more than the %lld learned position embeddings of the "
			       "checkpoint (max_position_embeddings)", (long long)*out, (long long)mc->max_position_embeddings);
	return MGT_OK;
}

mgt_status eval_ll_prefix(const mgt_tok *tok, int32_t *out)
{
	*out = mgt_tok_eod(tok);
	return *out >= 0 ? MGT_OK
			 : mgt_err(MGT_ERR_VOCAB, "the tokenizer %s has no end-of-document token (the prefix of an empty "
				   "context and of rolling windows)", mgt_tok_type_name(tok));
}

mgt_status eval_ll_write(const char *path, const char *text, size_t n)
{
	if (!path) return fwrite(text, 1, n, stdout) == n ? MGT_OK : mgt_err(MGT_ERR_IO, "standard output: write failed");
	mgt_afile af = { 0 };
	mgt_status st = mgt_afile_open(&af, path, 1);
	if (!st) st = mgt_afile_write(&af, text, n);
	if (!st) return mgt_afile_commit(&af);
	mgt_afile_abort(&af);
	return st;
}

void *eval_ll_real(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

mgt_status eval_ll_tensorboard(const char *dir, const void *results, int64_t step)
{
	mgt_tb *w = NULL;
	mgt_status st = mgt_tb_open(&w, dir, EVAL_PROG);
	const char *name, *key;
	json_t *metrics, *v;
	json_object_foreach((json_t *)results, name, metrics) {
		json_object_foreach(metrics, key, v) {
			if (st || !json_is_number(v)) continue;
			char tag[512];
			size_t k = strcspn(key, ",");
			snprintf(tag, sizeof tag, "%s/%.*s", name, (int)k, key);
			st = mgt_tb_scalar(w, tag, json_number_value(v), step);
		}
	}
	mgt_status st2 = w ? mgt_tb_close(w) : MGT_OK;
	if (!st) st = st2;
	return st ? mgt_err_ctx(st, "--tensorboard-dir %s", dir) : MGT_OK;
}

void eval_ll_basename(const char *path, char *buf, size_t n)
{
	const char *b = strrchr(path, '/');
	snprintf(buf, n, "%s", b ? b + 1 : path);
	static const char *const ends[] = {".zst", ".jsonl"};
	for (int i = 0; i < 2; i++) {
		size_t l = strlen(buf), e = strlen(ends[i]);
		if (l > e && !strcmp(buf + l - e, ends[i])) buf[l - e] = 0;
	}
}
