/* lib/eval/eval_impl.h: struct mgt_eval, shared by the files of lib/eval (not a public header). */
#ifndef MGT_EVAL_IMPL_H
#define MGT_EVAL_IMPL_H

#include "eval.h"

#include "backend/backend.h"
#include "ckpt/ckpt.h"
#include "convert/convert.h"
#include "parallel/parallel.h"
#include "model/model.h"

struct mgt_eval {
	mgt_args a;
	bool args_ok;               /* a initialized (mgt_args_free) */
	mgt_ckpt *ck;               /* open until built (--load) */
	mgt_source *src;            /* or this (mgt_eval_open_hf), open until built */
	char *dir;                  /* the iteration directory */
	char *load_dir;             /* the directory of iterations it is in (--load) */
	bool hf;                    /* mgt_eval_open_hf: the vocabulary recorded is config.json's rows */
	int64_t iteration;
	int64_t padded_vocab;       /* saved */
	int64_t meta_vocab;         /* metadata tokenizer.vocab_size, 0 when absent */
	/* built */
	mgt_backend *be;
	mgt_parallel ps;
	bool ps_ok;
	mgt_model *m;               /* mgt_model_create_infer */
	mgt_kv_cache *kv;           /* one sequence of s positions: mgt_eval_forward's (made at its first call) */
	int64_t vocab, s;
	int32_t *seq, *pos;         /* [s]: zeros, 0..s-1 */
	float *full;                /* [s, padded_vocab] host logits */
};

#endif
