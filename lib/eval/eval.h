/* lib/eval: a model loaded from a checkpoint for inference (mgt-eval(1)).
 *
 * Use:
 *   mgt_eval_open        the checkpoint's metadata.json: its "args" read through the training
 *                        argument table (mgt_args_merge_json, the keys mgt-train writes), its
 *                        tokenizer flags
 *   mgt_eval_tok_opts    those tokenizer flags, for mgt_tok_load (optional: ids need none)
 *   mgt_eval_build       the whole model (TP = PP = 1) on a backend, for sequences of up to
 *                        seq_length tokens, its weights read from whatever TP/PP layout was saved
 *                        (mgt_ckpt_read reshards: every tensor is read whole)
 *   mgt_eval_forward     the logits of a token sequence (no dropout, fp32 GEMMs)
 *   mgt_eval_greedy      greedy continuation (argmax, ties to the lowest id), recomputing the
 *                        forward of the whole sequence for every new token (the cache is not
 *                        carried over: the reference for mgt_eval_generate's cached decoding)
 *   mgt_eval_generate    batched generation with a key/value cache (greedy or sampled)
 *   mgt_eval_free
 *
 * The forward runs exactly the positions given, on lib/model's inference path
 * (mgt_model_create_infer: parameters only, no gradients; mgt_model_infer with a key/value cache
 * of seq_length positions, here refilled from position 0 by every call).  Attention is causal
 * (megatron/core/transformer/dot_product_attention.py, the causal mask).  Logits are returned
 * for the unpadded vocabulary only: the rows Megatron adds to make the embedding table
 * divisible (--make-vocab-size-divisible-by x TP) are dropped.
 *
 * Errors are mgt_status values with a message (mgt_err_msg); nothing prints or exits.
 */
#ifndef MGT_EVAL_H
#define MGT_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "tok/tok.h"
#include "args/args.h"
#include "util/util.h"

typedef struct mgt_eval mgt_eval;

/* Open iteration ckpt_step of the checkpoint directory load_dir (ckpt_step 0: the one its
 * latest_checkpointed_iteration.txt names) and read its metadata.json: "args" merged into a
 * fresh mgt_args (mgt_args_init, then mgt_args_merge_json; the derived keys mgt_args_to_json adds
 * are accepted), "padded_vocab_size" and, where recorded, the unpadded vocabulary size
 * ("tokenizer": {"vocab_size"}).  The checkpoint stays open until mgt_eval_build.
 * Errors: MGT_ERR_USAGE (load_dir is not a directory), MGT_ERR_FORMAT (no such directory or
 * iteration, no tracker, a damaged checkpoint (mgt_ckpt_open, mgt_ckpt_check), metadata without
 * "args" or with arguments mgt does not know), MGT_ERR_NOMEM.  *out is the caller's
 * (mgt_eval_free). */
mgt_status mgt_eval_open(mgt_eval **out, const char *load_dir, int64_t ckpt_step);

/* The same for a Hugging Face directory dir (config.json, safetensors), read in place through
 * mgt_source (lib/convert; no checkpoint is written anywhere): its arguments, tokenizer and
 * tensors are those mgt-ckpt-convert would give the checkpoint made of it (TP = PP = 1), so the
 * model, its logits and all that follows are the same bit for bit; iteration 0, mgt_eval_dir
 * is dir.  Errors: MGT_ERR_USAGE (dir not a Hugging Face directory), those of mgt_source_open,
 * MGT_ERR_NOMEM.  *out is the caller's (mgt_eval_free). */
mgt_status mgt_eval_open_hf(mgt_eval **out, const char *dir);

/* The checkpoint's arguments (owned by ev; model fields as saved until mgt_eval_build, which
 * sets the sequence length and vocabulary it runs with). */
const mgt_args *mgt_eval_args(const mgt_eval *ev);
/* The iteration opened and its directory (owned by ev). */
int64_t mgt_eval_iteration(const mgt_eval *ev);
const char *mgt_eval_dir(const mgt_eval *ev);

/* The tokenizer flags the checkpoint was trained with (Megatron's --tokenizer-type, --vocab-file,
 * --merge-file, --tokenizer-model, --tiktoken-pattern, --tiktoken-num-special-tokens,
 * --vocab-size, --null-tokenizer-eod-id), strings owned by ev.  o->type is NULL when the run had
 * no tokenizer (--mock-data without --tokenizer-type); like mgt-train, vocab_file and merge_file
 * without a type mean GPT2BPETokenizer.  File paths are as the training run was given them. */
void mgt_eval_tok_opts(const mgt_eval *ev, mgt_tok_opts *o);
/* The same of any arguments a (mgt_eval_tok_opts is this of the checkpoint's); strings a's. */
void mgt_eval_args_tok_opts(const mgt_args *a, mgt_tok_opts *o);

/* Check that the vocabulary of tok (given, the tokenizer flags it was loaded with: another
 * tokenizer than the checkpoint's, or its files elsewhere) is the one the checkpoint records
 * (metadata.json "tokenizer" "vocab_size", else the args' vocab_size, as mgt_eval_build; nothing
 * to check when none is recorded).  A model's vocabulary is fixed by its embedding rows, so a
 * tokenizer of another size is another tokenizer than the model was trained with, whatever the
 * padding.  A Hugging Face directory (mgt_eval_open_hf) records config.json's vocab_size, the
 * embedding rows, which may be padded: there only a larger tokenizer is refused.
 * Errors: MGT_ERR_VOCAB naming both tokenizers (type and file) and their sizes. */
mgt_status mgt_eval_check_tok(const mgt_eval *ev, const mgt_tok *tok, const mgt_tok_opts *given);

/* What a command asks of the model (mgt_eval_supports). */
typedef enum {
	MGT_EVAL_USE_NEXT_TOKEN, /* next-token logits of one sequence: mgt_eval_forward, mgt_eval_greedy,
				  * mgt_ll_score, mgt_ll_rolling (logits, perplexity, tasks) */
	MGT_EVAL_USE_GENERATE,   /* mgt_eval_generate */
} mgt_eval_use;

/* Whether the checkpoint's family (its row, mgt_model_family: the recipe) computes what use
 * needs.  A causal decoder (MGT_STACK_DECODER, GPT) does everything.  A bidirectional encoder
 * (MGT_STACK_ENCODER, BERT: masked-token prediction, every position sees every other) has no
 * next-token distribution: nothing here but mgt-eval loss.  An encoder-decoder
 * (MGT_STACK_ENCODER_DECODER, T5) generates (the prompt to the encoder, the decoder from its
 * start token); the next-token logits of one sequence it does not have.  what names the
 * command in the message ("mgt-eval logits").  Works before mgt_eval_build.
 * Errors: MGT_ERR_FORMAT naming the family, its kind, what and what evaluates it instead. */
mgt_status mgt_eval_supports(const mgt_eval *ev, mgt_eval_use use, const char *what);

/* How to build the model. */
typedef struct mgt_eval_build_opts {
	int64_t seq_length;   /* the longest sequence mgt_eval_forward will take (> 0) */
	int64_t vocab_size;   /* the tokenizer's (unpadded) vocabulary; 0: the checkpoint's (see below) */
	const char *device;   /* "cpu", "cuda" or "auto"/NULL (cuda when built with CUDA and a GPU is present) */
	int threads;          /* CPU threads (0: all) */
} mgt_eval_build_opts;

/* Build the model of the checkpoint's arguments with TP = PP = 1, sequence length
 * o->seq_length, micro-batch 1, on the backend o->device (fp32), and read every parameter from
 * the checkpoint (closing it).  The unpadded vocabulary: o->vocab_size, else the metadata's
 * "tokenizer" "vocab_size", else the args' vocab_size (NullTokenizer, --mock-data), else with
 * --mock-data and no tokenizer 50257 (mgt-train's default); it must not exceed the saved
 * padded_vocab_size, which the model keeps (the embedding tables' rows).  Learned position
 * embeddings hold max_position_embeddings positions: a longer seq_length is refused; RoPE and
 * no positions have no table and take any length.
 * Errors: MGT_ERR_USAGE (seq_length <= 0 or more positions than the table, --device: unknown or
 * no CUDA device), MGT_ERR_VOCAB (vocabulary size unknown: no tokenizer and none recorded),
 * MGT_ERR_FORMAT (the arguments do not make a model, the vocabulary is larger than the padded
 * one, a tensor missing, of another shape, or unreadable, or a tensor of the checkpoint that
 * is not the model's; naming the directory and tensor), MGT_ERR_NOMEM, MGT_ERR_IO (device
 * upload).  Called once. */
mgt_status mgt_eval_build(mgt_eval *ev, const mgt_eval_build_opts *o);

/* The vocabulary (unpadded): before mgt_eval_build the one the checkpoint records (0 when it
 * does not: the tokenizer's is needed), after it the one the model runs with.  The padded
 * vocabulary (saved embedding rows).  The sequence length (0 before mgt_eval_build). */
int64_t mgt_eval_vocab_size(const mgt_eval *ev);
int64_t mgt_eval_padded_vocab_size(const mgt_eval *ev);
int64_t mgt_eval_seq_length(const mgt_eval *ev);

/* The logits of tokens[0..n) (1 <= n <= seq_length, every id in [0, vocab_size)), position ids
 * 0..n-1, no dropout: logits[i * vocab_size + v] (row-major [n, vocab_size], float32, host,
 * caller-owned; NULL when not wanted) is the score of id v following tokens[0..i].  Source:
 * Megatron-Core GPTModel forward (models/gpt/gpt_model.py) as lib/model runs it.
 * Errors: MGT_ERR_USAGE (n out of range, before mgt_eval_build), MGT_ERR_FORMAT (a family without
 * next-token logits, mgt_eval_supports), MGT_ERR_INPUT (an id outside the vocabulary, naming its
 * position), MGT_ERR_NOMEM, MGT_ERR_IO (backend). */
mgt_status mgt_eval_forward(mgt_eval *ev, const int32_t *tokens, int64_t n, float *logits);

/* Greedy decoding: starting from prompt[0..n) (n >= 1), max_new times forward the sequence so
 * far and append the id of the largest logit of its last position (the lowest id among equal
 * ones).  out[0..max_new) (caller-owned) gets the new ids; n + max_new must not exceed
 * seq_length + 1 (the last new token is never fed back).  When logits is not NULL it gets the
 * logits of the last forward: every position fed, [n + max_new - 1, vocab_size] when
 * max_new > 0 and [n, vocab_size] when max_new == 0 (then it is mgt_eval_forward's).
 * Errors: those of mgt_eval_forward; MGT_ERR_USAGE (too long). */
mgt_status mgt_eval_greedy(mgt_eval *ev, const int32_t *prompt, int64_t n, int64_t max_new, int32_t *out,
			   float *logits);

/* Free everything (backend, model, an unbuilt checkpoint); NULL is fine. */
void mgt_eval_free(mgt_eval *ev);

/* ==== generation with a key/value cache (lib/eval/generate.c) ==== */

/* Check that tokens[0..n) lie in the model's vocabulary [0, mgt_eval_vocab_size).
 * Errors: MGT_ERR_INPUT naming the first id outside it and its position. */
mgt_status mgt_eval_check_ids(const mgt_eval *ev, const int32_t *tokens, int64_t n);

/* Why a prompt's generation ended: MGT_GEN_MORE while it goes on; the end-of-document id (or
 * an end id, mgt_gen_opts.end_ids) was drawn; a stop string appeared in the new text;
 * max_new_tokens were produced or the context (max_length positions) is full. */
typedef enum { MGT_GEN_MORE, MGT_GEN_EOD, MGT_GEN_STOP, MGT_GEN_LENGTH } mgt_gen_end;

/* How to generate (mgt_eval_generate).  Sampling follows Megatron's text generation
 * (megatron/inference/text_generation/sampling.py sample()): greedy is the argmax (ties to the
 * lowest id); otherwise the logits are divided by temperature, then with top_k > 1 every logit
 * below the k-th largest is removed (ties with it stay), or else with top_p > 0 the smallest set
 * of most likely ids whose probability reaches top_p is kept (sorted by decreasing probability,
 * an id is removed when the cumulative probability of the ids before it exceeds top_p; the most
 * likely id always stays), and one id is drawn from the softmax of what is left.  The draw is
 * reproducible: the uniform number of prompt i's step k takes 53 bits of words 0 and 1 of
 * Philox4x32-10 (mgt_philox) keyed by the seed, counter (i, k), so a prompt's output does not depend on the batch it is in
 * (up to the rounding of GEMMs of other shapes). */
typedef struct mgt_gen_opts {
	int64_t max_new_tokens;  /* new tokens per prompt at most (>= 0) */
	bool greedy;             /* argmax; also when top_k == 1 (Megatron) or temperature == 0 */
	double temperature;      /* >= 0 (1: unchanged logits) */
	int64_t top_k;           /* 0: no top-k filtering; at most the vocabulary */
	double top_p;            /* 0: no top-p filtering; else in (0, 1]; not with top_k > 1 */
	uint64_t seed;
	int32_t eod;             /* end at this id (reported, not part of the text); < 0: never */
	const int32_t *end_ids;  /* nend more ids that end a prompt as eod does (a chat model's end of
				  * turn, mgt_chat_end_ids); ignored when eod < 0 */
	int nend;
	const char *const *stop; /* nstop stop strings: end once the new text contains one */
	int nstop;
	const mgt_tok *tok;      /* decodes the new text (stop strings, mgt_gen_token.text); NULL: none */
	int batch_size;          /* sequences decoded together (>= 1): continuous batching, a finished
				  * sequence's slot takes the next prompt */
	int64_t max_length;      /* positions per sequence (prompt + new tokens fed back); 0: the
				  * seq_length the model was built for, which bounds it */
} mgt_gen_opts;

/* One produced token, handed to the callback in the order produced (per step, prompts in slot
 * order; a prompt's tokens in order). */
typedef struct mgt_gen_token {
	int64_t prompt;          /* index of its prompt */
	int64_t step;            /* index among the prompt's new tokens, from 0 */
	int32_t id;
	mgt_gen_end end;         /* MGT_GEN_MORE, or why this is the prompt's last token */
	const char *text;        /* with o->tok: the prompt's new tokens decoded so far (not the EOD
				  * id; with MGT_GEN_STOP cut after the stop string), text_len bytes,
				  * not NUL-terminated, possibly ending inside a UTF-8 character; NULL
				  * without a tokenizer */
	size_t text_len;
	const float *logits;     /* the logits the id was chosen from [vocab_size] (before temperature) */
} mgt_gen_token;

/* Called for every produced token; a non-OK status stops generation and is returned. */
typedef mgt_status (*mgt_gen_cb)(void *ctx, const mgt_gen_token *t);

/* Generate continuations of prompts[i][0..lens[i]), i < nprompts (each 1 <= lens[i] <= the
 * context, ids in the vocabulary), with a key/value cache of batch_size sequences of
 * max_length positions (mgt_kv_cache_create): each prompt is prefilled in one call (with the
 * new tokens of the other sequences in the batch), then its tokens are fed one a step.  A prompt
 * ends at the eod id, a stop string, max_new_tokens, or when max_length positions are used (a
 * prompt of n tokens can get max_length + 1 - n new ones).  Greedy generation gives the ids of
 * mgt_eval_greedy (which recomputes every prefix) up to rounding.  Errors: MGT_ERR_USAGE (options
 * out of range, before mgt_eval_build), MGT_ERR_FORMAT (a family that does not generate,
 * mgt_eval_supports), MGT_ERR_INPUT (an empty prompt, a prompt longer than
 * max_length, an id outside the vocabulary: naming the prompt's index), MGT_ERR_NOMEM,
 * MGT_ERR_IO (backend), or the callback's status. */
mgt_status mgt_eval_generate(mgt_eval *ev, const mgt_gen_opts *o, int64_t nprompts, const int32_t *const *prompts,
			     const int64_t *lens, mgt_gen_cb cb, void *ctx);

/* ==== end of generation ==== */

/* ==== loglikelihoods: zero-shot tasks and the perplexity of texts (lib/eval/tasks.c) ==== */

/* Sources (EleutherAI/lm-evaluation-harness, read for the facts, code our own):
 * lm_eval/api/model.py (TemplateLM.loglikelihood, _encode_pair), lm_eval/models/huggingface.py
 * (_loglikelihood_tokens: left truncation, is_greedy; loglikelihood_rolling), lm_eval/utils.py
 * (get_rolling_token_windows, make_disjoint_window), lm_eval/api/task.py (process_results),
 * lm_eval/api/metrics.py (mean, mean_stderr, perplexity, weighted_perplexity, bits_per_byte,
 * bootstrap_stderr), lm_eval/tasks/{lambada,hellaswag,wikitext}.  See mgt-eval(1), mgt-tasks(5). */

/* Tokens of a (context, continuation) request as the harness makes them for a causal model:
 * trailing white space of the context (Python's str.isspace) moves to the front of the
 * continuation; whole = encode(context + continuation), ctx = encode(context), the continuation
 * is whole[len(ctx):].  An empty context (or one of white space only) becomes [prefix] and the
 * continuation encode(continuation) -- unless that starts with prefix, which then is the context
 * (TemplateLM.loglikelihood).  toks (appended to, caller-owned) gets context then continuation;
 * *n_ctx the context's length.  The continuation may come out empty (the caller decides).
 * Errors: those of mgt_tok_encode (MGT_ERR_INPUT: invalid UTF-8), MGT_ERR_NOMEM. */
mgt_status mgt_ll_encode(mgt_tok_enc *enc, int32_t prefix, const char *ctx, size_t ctx_len, const char *cont,
			 size_t cont_len, mgt_ids *toks, size_t *n_ctx);

/* Positions a request of n tokens feeds the model when max_len positions fit: the last
 * max_len + 1 tokens less the last (min(n, max_len + 1) - 1). */
int64_t mgt_ll_input_len(int64_t n, int64_t max_len);

/* Loglikelihood of toks[n - n_cont, n) given what comes before, left-truncated as the harness
 * does: the model is fed the last max_len + 1 tokens less the last one, and the n_cont
 * continuation tokens are scored from its last n_cont positions.  *ll = sum over them of the
 * log-softmax (float64 from the float32 logits: m + log(sum exp(x - m))) of the continuation
 * token; *greedy: every continuation token is its position's argmax (lowest id on ties, like
 * torch.argmax).  logits: caller-owned scratch of mgt_ll_input_len(n, max_len) x vocab floats.
 * Needs 1 <= n_cont <= max_len, n_cont < n, and a model built for mgt_ll_input_len(n, max_len)
 * positions.  Errors: MGT_ERR_USAGE (lengths), those of mgt_eval_forward. */
mgt_status mgt_ll_score(mgt_eval *ev, const int32_t *toks, int64_t n, int64_t n_cont, int64_t max_len, float *logits,
			double *ll, bool *greedy);

/* Rolling loglikelihood of a whole text toks[0, n) (n >= 1): get_rolling_token_windows with
 * prefix token prefix, max_seq_len max_len and context_len 1, each window made disjoint
 * (make_disjoint_window) and scored with mgt_ll_score; *ll is the sum over windows (every token
 * scored once), *windows their number.  logits: scratch of max_len x vocab floats; the model
 * built for max_len positions (or n when shorter).  Errors: those of mgt_ll_score, MGT_ERR_NOMEM. */
mgt_status mgt_ll_rolling(mgt_eval *ev, const int32_t *toks, int64_t n, int32_t prefix, int64_t max_len, float *logits,
			  double *ll, int64_t *windows);

/* ---- text helpers (Python str semantics on UTF-8) ---- */
/* Python's str.isspace for one code point (ASCII \t\n\v\f\r\x1c-\x1f and space, U+0085,
 * U+00A0, and the categories Zs, Zl, Zp). */
bool mgt_text_isspace(int32_t cp);
/* Code points of valid UTF-8 s[0, n) (Python len(str)); invalid bytes count one each. */
size_t mgt_text_len(const char *s, size_t n);
/* Python len(re.split(r"\s+", s)): one more than the runs of white space. */
size_t mgt_text_words(const char *s, size_t n);

/* ---- task files (lib/eval/taskfile.c; the format is mgt-tasks(5)) ---- */
typedef enum {
	MGT_TASK_AUTO = 0,   /* detected from the first line's keys */
	MGT_TASK_LAMBADA,    /* {"text"}: context = all but the last ' '-separated word, target ' ' + it */
	MGT_TASK_HELLASWAG,  /* {"activity_label","ctx_a","ctx_b","endings","label"}: utils.py preprocess */
	MGT_TASK_CLOZE,      /* {"context","continuation"} */
	MGT_TASK_CHOICE,     /* {"context","choices","gold"}: continuations " " + choice */
} mgt_task_type;

/* One example: its requests (context, continuations[i]); continuations as scored, the
 * delimiter included; choice_chars[i] the code points of choice i without the delimiter
 * (acc_norm's length). gold: the right choice (0 for loglikelihood tasks). */
typedef struct mgt_task_example {
	char *context;
	char **conts;
	size_t *choice_chars;
	size_t n_conts;
	int64_t gold;
	uint64_t line;          /* 1-based line of the file */
} mgt_task_example;

typedef struct mgt_task {
	char *path, *name;       /* name: the basename without .jsonl (or .json) */
	mgt_task_type type;
	bool multiple_choice;    /* output_type multiple_choice (else loglikelihood) */
	mgt_task_example *ex;
	size_t n;                /* examples kept (at most limit) */
	size_t n_total;          /* examples in the file */
} mgt_task;

/* "lambada", "hellaswag", "cloze", "choice", "auto". */
const char *mgt_task_type_name(mgt_task_type t);
/* Errors: MGT_ERR_USAGE (unknown name). */
mgt_status mgt_task_type_parse(const char *s, mgt_task_type *out);

/* Read a task file (JSONL, plain or zstd): every line is checked, the first limit examples kept
 * (limit < 0: all).  type MGT_TASK_AUTO: from the first line's keys ("text": lambada, "endings":
 * hellaswag, "choices": choice, "continuation": cloze).  Errors: MGT_ERR_IO (cannot read),
 * MGT_ERR_INPUT naming PATH:LINE and what was expected (an empty line, malformed JSON, not an
 * object, a missing, unknown or mistyped key, fewer than 2 choices, a gold label out of range,
 * invalid UTF-8, no examples at all), MGT_ERR_NOMEM.  *out is the caller's (mgt_task_free). */
mgt_status mgt_task_load(mgt_task **out, const char *path, mgt_task_type type, int64_t limit);
void mgt_task_free(mgt_task *t);

/* HellaSwag's preprocess (tasks/hellaswag/utils.py) of s[0, n) into out (appended): strip white
 * space, " [title]" -> ". ", drop every "[...]" (shortest), "  " -> " " (one pass, left to right). */
mgt_status mgt_task_hellaswag_preprocess(const char *s, size_t n, mgt_buf *out);

/* ---- metrics (lib/eval/metrics.c) ---- */
/* mean: sum / n.  mean_stderr: the sample standard deviation (n - 1) / sqrt(n); NaN for n < 2
 * (the harness writes "N/A"). */
double mgt_stat_mean(const double *x, size_t n);
double mgt_stat_mean_stderr(const double *x, size_t n);
/* exp(-mean(ll)): LAMBADA's perplexity of per-document loglikelihoods. */
double mgt_stat_perplexity(const double *ll, size_t n);
/* The harness's bootstrap_stderr(perplexity, ll, iters): iters / c chunks of c = min(1000,
 * iters) resamples, chunk i drawn by Python's random.Random(i) (MT19937 seeded by
 * init_by_array({i}), random() of 53 bits) as rnd.choices(ll, k=n) (index floor(random() * n)),
 * the sample standard deviation of the exp(-mean) of every resample.  The same draws as the
 * harness's, so the same value up to rounding.  NaN for n < 2 or iters < 1.
 * Errors: MGT_ERR_NOMEM. */
mgt_status mgt_stat_perplexity_stderr(const double *ll, size_t n, int64_t iters, double *out);


/* ==== end of loglikelihoods ==== */

#endif
