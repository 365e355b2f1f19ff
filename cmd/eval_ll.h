/* cmd/eval_ll.h: what mgt-eval tasks and mgt-eval perplexity share (cmd/eval_ll.c). */
#ifndef MGT_EVAL_LL_H
#define MGT_EVAL_LL_H

#include "eval_cmd.h"

/* The model's context for scoring: --max-length when given (> 0), else the checkpoint's
 * seq_length; refused (MGT_ERR_USAGE) past the learned position embeddings. */
mgt_status eval_ll_max_length(const mgt_eval *ev, long long given, int64_t *out);
/* The prefix token (the tokenizer's end-of-document id). Errors: MGT_ERR_VOCAB (none). */
mgt_status eval_ll_prefix(const mgt_tok *tok, int32_t *out);
/* Write text[0, n) to path (atomically: a temporary renamed; an existing file is replaced) or
 * to stdout when path is NULL. */
mgt_status eval_ll_write(const char *path, const char *text, size_t n);
/* A JSON number or null when not finite (jansson json_t *). */
void *eval_ll_real(double v);
/* --tensorboard-dir: every number in results (jansson object {NAME: {KEY: number}}) as the
 * scalar "NAME/KEY" (the harness's ",none" filter suffix dropped) at step (the checkpoint's
 * iteration), in a new event file of dir (lib/tb).  Errors: those of mgt_tb_*, naming the flag. */
mgt_status eval_ll_tensorboard(const char *dir, const void *results, int64_t step);
/* A file's name without its directory and its .jsonl / .jsonl.zst / .zst ending, into buf. */
void eval_ll_basename(const char *path, char *buf, size_t n);

#endif
