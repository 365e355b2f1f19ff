/* cmd/eval_generate.c: mgt-eval generate: continuations of prompts with a key/value cache,
 * greedy or sampled (mgt_eval_generate); with --chat, replies to conversations rendered by the
 * tokenizer's chat template (mgt_chat_render).  See mgt-eval(1). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "eval_cmd.h"

#define PROG EVAL_PROG

enum { OPT_PROMPT = EVAL_OPT_FIRST_FREE, OPT_JSONL, OPT_MAX_NEW, OPT_GREEDY, OPT_TEMP, OPT_TOPK, OPT_TOPP, OPT_SEED,
       OPT_STOP, OPT_IGNORE_EOS, OPT_BATCH, OPT_MAX_LEN, OPT_OUTPUT, OPT_LOGITS, OPT_CHAT, OPT_CHAT_TEMPLATE,
       OPT_CHAT_DATE, OPT_SYSTEM };

static void usage(void)
{
	printf("Usage: mgt-eval generate (--load DIR | --hf DIR) [--prompt TEXT]... [OPTION]...\n"
	       "Continue prompts with the model, keeping every layer's keys and values in a cache (each\n"
	       "prompt is fed once, then one token per step), several prompts decoded together.\n\n"
	       "  --prompt TEXT         a prompt (repeatable); without --prompt, one prompt per line of stdin\n"
	       "  --jsonl               stdin lines are JSON objects {\"prompt\": TEXT, ...} (other keys ignored)\n"
	       "  --max-new-tokens N    new tokens per prompt at most [32]\n"
	       "  --greedy              the most likely token (ties to the lowest id): --top-k 1\n"
	       "  --temperature T       divide the logits by T before sampling; 0 is greedy [1.0]\n"
	       "  --top-k K             sample among the K most likely tokens (0: all) [0]\n"
	       "  --top-p P             sample among the most likely tokens of total probability P (0: off) [0]\n"
	       "  --seed N              seed of the draws; a prompt's draws depend on it and its index only [1234]\n"
	       "  --stop STRING         end a prompt's text once it contains STRING (repeatable; kept in the text)\n"
	       "  --ignore-eos          do not end at the tokenizer's end-of-document token\n"
	       "  --batch-size N        prompts decoded together [1]\n"
	       "  --max-length N        positions per sequence, prompt included [max_position_embeddings with\n"
	       "                        learned positions, else the checkpoint's seq_length]\n"
	       "  --output text|jsonl   output format [text with --batch-size 1, else jsonl]\n"
	       "  --logits FILE.npy     (one prompt) the logits each new token was chosen from, float32\n"
	       "                        [new tokens, vocabulary]\n"
	       "  --chat                prompts are a chat model's turns: each --prompt or stdin line is a user\n"
	       "                        message, each --jsonl line {\"messages\": [...], ...} a conversation (or\n"
	       "                        {\"prompt\": TEXT}), rendered by the tokenizer's chat_template with\n"
	       "                        add_generation_prompt and encoded without added special tokens, as\n"
	       "                        transformers' apply_chat_template; ends also at the end-of-turn ids\n"
	       "                        (generation_config.json's eos_token_id, tokenizer_config.json's eos_token)\n"
	       "  --system TEXT         (--chat) a system message before each user message\n"
	       "  --chat-template FILE  (--chat) a Jinja2 template instead of tokenizer_config.json's\n"
	       "  --chat-date DATE      (--chat) pin strftime_now to DATE (YYYY-MM-DD[THH:MM:SS], UTC) [today]\n"
	       "  --help\n%s%s\n"
	       "Output (stdout), as tokens are produced: text: each prompt's new text, its UTF-8 characters\n"
	       "written once complete, then a newline; jsonl: when a prompt ends, one line {\"index\": I,\n"
	       "\"prompt\": TEXT, \"ids\": [new ids, an end id included], \"text\": new text, \"finish\": \"eod\"|\"stop\"|\"length\"} (I\n"
	       "from 0 in input order; lines in the order prompts end).  An empty prompt (also one that encodes\n"
	       "to a WordPiece tokenizer's [CLS] [SEP] alone) or one longer than --max-length is bad input\n"
	       "(exit 3), named by its --prompt number or stdin line.\n\n%s"
	       "See mgt-eval(1), mgt-ckpt(5).\n", eval_model_help, mgt_cli_tok_help, eval_exit_help);
}

typedef struct {
	eval_model_opts m;
	const char **prompt;
	int nprompt;
	bool jsonl, greedy, ignore_eos, has_temp;
	long long max_new, top_k, seed, batch, max_len;
	double temperature, top_p;
	const char **stop;
	int nstop;
	const char *output, *logits;
	bool chat;
	const char *chat_template, *chat_date, *system;
} gopts;

/* --chat: the template and special tokens, and the end-of-turn ids. */
typedef struct {
	const gopts *o;
	mgt_chat_config cfg;
	mgt_ids end;
} chat_ctx;

/* The prompts: their text and where each came from. */
typedef struct {
	char **text;
	char **where;
	int32_t **ids;
	int64_t *len;
	int64_t n, cap;
	const chat_ctx *chat; /* --chat: prompts are rendered conversations; NULL: text as it is */
} prompts;

static mgt_status prompts_add(prompts *p, const char *text, size_t n, const char *where)
{
	if (p->n == p->cap) {
		int64_t cap = p->cap ? 2 * p->cap : 16;
		char **t = realloc(p->text, (size_t)cap * sizeof *t), **w = t ? realloc(p->where, (size_t)cap * sizeof *w) : NULL;
		if (t) p->text = t;
		if (w) p->where = w;
		if (!t || !w) return MGT_ERR_NOMEM;
		p->cap = cap;
	}
	p->text[p->n] = mgt_malloc(n + 1);
	p->where[p->n] = mgt_strdup(where);
	if (!p->text[p->n] || !p->where[p->n]) return MGT_ERR_NOMEM;
	memcpy(p->text[p->n], text, n);
	p->text[p->n++][n] = 0;
	return MGT_OK;
}

static void prompts_free(prompts *p)
{
	for (int64_t i = 0; i < p->n; i++) {
		free(p->text[i]);
		free(p->where[i]);
		if (p->ids) free(p->ids[i]);
	}
	free(p->text);
	free(p->where);
	free(p->ids);
	free(p->len);
}

/* --chat: conversation kw (apply_chat_template's keyword arguments: messages, tools, ...)
 * rendered with add_generation_prompt (true unless kw sets it), as p's next prompt. */
static mgt_status add_rendered(prompts *p, json_t *kw, const char *where)
{
	mgt_buf out = { 0 };
	if (!json_object_get(kw, "add_generation_prompt")) json_object_set_new(kw, "add_generation_prompt", json_true());
	mgt_status st = mgt_chat_render(&p->chat->cfg, kw, p->chat->o->chat_date, &out);
	if (st) st = mgt_err_ctx(st, "%s: the chat template", where);
	else st = prompts_add(p, out.p ? out.p : "", out.n, where);
	free(out.p);
	return st;
}

/* A user message text[0..n) (after --system's message) into p: as it is without --chat. */
static mgt_status add_text(prompts *p, const char *text, size_t n, const char *where)
{
	if (!p->chat) return prompts_add(p, text, n, where);
	const char *sys = p->chat->o->system;
	json_t *msgs = sys ? json_pack("[{s:s,s:s}]", "role", "system", "content", sys) : json_array();
	json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "user", "content", text, n));
	json_t *kw = json_pack("{s:o}", "messages", msgs);
	mgt_status st = kw ? add_rendered(p, kw, where) : MGT_ERR_NOMEM;
	json_decref(kw);
	return st;
}

/* A JSONL line into p: its "prompt" string, or with --chat its "messages" list (the line's keys
 * the template's variables). */
static mgt_status add_json(prompts *p, const char *line, const char *where)
{
	json_error_t e;
	json_t *o = json_loads(line, JSON_DECODE_ANY, &e);
	json_t *s = json_is_object(o) ? json_object_get(o, "prompt") : NULL;
	bool conv = p->chat && json_is_object(o) && json_object_get(o, "messages");
	mgt_status st = conv && !json_is_array(json_object_get(o, "messages"))
		? mgt_err(MGT_ERR_INPUT, "%s: \"messages\": expected a list of messages", where)
		: conv ? add_rendered(p, o, where)
		: json_is_string(s) ? add_text(p, json_string_value(s), json_string_length(s), where)
		: mgt_err(MGT_ERR_INPUT, "%s: expected a JSON object with a \"prompt\" string%s%s%s", where,
			  p->chat ? " or a \"messages\" list" : "", o ? "" : ": ", o ? "" : e.text);
	json_decref(o);
	return st;
}

static mgt_status read_stdin(prompts *p, bool jsonl)
{
	char *line = NULL, where[64];
	size_t cap = 0;
	ssize_t n;
	mgt_status st = MGT_OK;
	for (long long ln = 1; !st && (n = getline(&line, &cap, stdin)) >= 0; ln++) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
		snprintf(where, sizeof where, "stdin line %lld", ln);
		if ((size_t)n != strlen(line)) st = mgt_err(MGT_ERR_INPUT, "%s: a NUL byte in the prompt", where);
		else if (jsonl) st = add_json(p, line, where);
		else st = add_text(p, line, (size_t)n, where);
	}
	if (!st && ferror(stdin)) st = mgt_err(MGT_ERR_IO, "reading stdin: %s", strerror(errno));
	free(line);
	return st;
}

/* Encode every prompt; empty ones and ones longer than max_len are refused, naming them.  A
 * prompt is empty when its text is, or when it encodes to what the empty text does (a WordPiece
 * tokenizer's [CLS] [SEP] alone). */
static mgt_status encode_all(prompts *p, const mgt_tok *tok, int64_t max_len)
{
	mgt_tok_enc *enc;
	mgt_ids none = { 0 };
	mgt_status st = mgt_tok_enc_new(&enc, tok);
	if (st) return st;
	st = eval_encode_empty(enc, &none);
	p->ids = calloc((size_t)(p->n ? p->n : 1), sizeof *p->ids);
	p->len = calloc((size_t)(p->n ? p->n : 1), sizeof *p->len);
	if (!p->ids || !p->len) st = MGT_ERR_NOMEM;
	for (int64_t i = 0; !st && i < p->n; i++) {
		mgt_ids ids = { 0 };
		st = mgt_tok_encode(enc, p->text[i], strlen(p->text[i]), &ids);
		p->ids[i] = ids.v;
		p->len[i] = (int64_t)ids.n;
		if (st) st = mgt_err_ctx(st, "%s", p->where[i]);
		else if (!ids.n || !p->text[i][0] || eval_ids_same(&ids, &none))
			st = mgt_err(MGT_ERR_INPUT, "%s: empty prompt (no tokens%s)", p->where[i],
				     ids.n ? " but the ones the tokenizer adds to any text" : "");
		else if ((int64_t)ids.n > max_len)
			st = mgt_err(MGT_ERR_INPUT, "%s: the prompt is %zu tokens, longer than the context of %lld "
				     "positions (--max-length)", p->where[i], ids.n, (long long)max_len);
	}
	free(none.v);
	mgt_tok_enc_free(enc);
	return st;
}

/* What is printed as tokens come. */
typedef struct {
	const gopts *o;
	const prompts *p;
	bool jsonl;
	size_t shown;          /* text mode: bytes of the current prompt's text written */
	int32_t *ids;          /* jsonl: per prompt, its new ids so far */
	int64_t *nids, cap;
	float *logits;         /* --logits: [max_new, vocab] */
	int64_t vocab, nlog;
} out_ctx;

static const char *const finish_name[] = { "", "eod", "stop", "length" };

static mgt_status print_jsonl(out_ctx *c, const mgt_gen_token *t)
{
	mgt_buf lossy = { 0 };
	mgt_status st = mgt_tok_utf8_lossy(t->text ? t->text : "", t->text_len, &lossy);
	json_t *ids = json_array();
	for (int64_t k = 0; ids && k < c->nids[t->prompt]; k++)
		json_array_append_new(ids, json_integer(c->ids[t->prompt * c->cap + k]));
	json_t *o = st || !ids ? NULL : json_pack("{s:I, s:s, s:o, s:s%, s:s}", "index", (json_int_t)t->prompt, "prompt",
						  c->p->text[t->prompt], "ids", ids, "text", lossy.p ? lossy.p : "",
						  lossy.n, "finish", finish_name[t->end]);
	char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (!st && !line) st = MGT_ERR_NOMEM;
	if (line) printf("%s\n", line);
	free(line);
	json_decref(o);
	free(lossy.p);
	return st;
}

static mgt_status print_text(out_ctx *c, const mgt_gen_token *t)
{
	size_t n = t->text_len < c->shown ? c->shown : t->text_len;
	size_t ok = c->shown + mgt_tok_utf8_valid(t->text + c->shown, n - c->shown);
	mgt_status st = MGT_OK;
	if (t->end == MGT_GEN_MORE) {
		fwrite(t->text + c->shown, 1, ok - c->shown, stdout);
		c->shown = ok;
	} else {
		mgt_buf lossy = { 0 };
		st = mgt_tok_utf8_lossy(t->text + c->shown, t->text_len - c->shown, &lossy);
		if (!st) printf("%.*s\n", (int)lossy.n, lossy.p ? lossy.p : "");
		free(lossy.p);
		c->shown = 0;
	}
	fflush(stdout);
	return st;
}

static mgt_status on_token(void *ctx, const mgt_gen_token *t)
{
	out_ctx *c = ctx;
	if (c->logits && t->prompt == 0 && c->nlog < c->o->max_new)
		memcpy(c->logits + (c->nlog++) * c->vocab, t->logits, (size_t)c->vocab * sizeof *c->logits);
	if (!c->jsonl) return print_text(c, t);
	if (c->nids[t->prompt] < c->cap) c->ids[t->prompt * c->cap + c->nids[t->prompt]++] = t->id;
	return t->end == MGT_GEN_MORE ? MGT_OK : print_jsonl(c, t);
}

/* --logits: [rows, vocab] float32 .npy (little-endian hosts write their floats as they are). */
static mgt_status write_npy(const char *path, const float *v, int64_t rows, int64_t vocab)
{
	const uint32_t one = 1;
	unsigned char le;
	memcpy(&le, &one, 1);
	if (!le) return mgt_err(MGT_ERR_USAGE, "--logits: needs a little-endian host");
	int64_t shape[2] = { rows, vocab };
	return mgt_npy_write(path, "<f4", 2, shape, v, (size_t)(rows * vocab) * sizeof *v);
}

/* The context: --max-length, else the learned table or the checkpoint's sequence length. */
static int64_t context_length(const gopts *o, const mgt_eval *ev)
{
	const mgt_args *a = mgt_eval_args(ev);
	if (o->max_len) return o->max_len;
	bool learned = !strcmp(a->model.position_embedding_type, "learned_absolute");
	return learned ? a->model.max_position_embeddings : a->model.seq_length;
}

static mgt_status generate(const gopts *o, eval_model *em, prompts *p, int64_t ctx_len)
{
	mgt_gen_opts go = {
		.max_new_tokens = o->max_new, .greedy = o->greedy, .temperature = o->temperature, .top_k = o->top_k,
		.top_p = o->top_p, .seed = (uint64_t)o->seed, .eod = o->ignore_eos ? -1 : mgt_tok_eod(em->tok),
		.stop = o->stop, .nstop = o->nstop, .tok = em->tok, .batch_size = (int)o->batch, .max_length = ctx_len,
		.end_ids = p->chat ? p->chat->end.v : NULL, .nend = p->chat ? (int)p->chat->end.n : 0,
	};
	out_ctx c = { .o = o, .p = p, .cap = o->max_new, .vocab = mgt_eval_vocab_size(em->ev) };
	c.jsonl = o->output ? !strcmp(o->output, "jsonl") : o->batch > 1;
	mgt_status st = MGT_OK;
	if (c.jsonl) {
		c.ids = mgt_malloc((size_t)(p->n * c.cap + 1) * sizeof *c.ids);
		c.nids = calloc((size_t)p->n + 1, sizeof *c.nids);
		if (!c.ids || !c.nids) st = MGT_ERR_NOMEM;
	}
	if (!st && o->logits && !(c.logits = mgt_malloc((size_t)(o->max_new * c.vocab + 1) * sizeof *c.logits)))
		st = MGT_ERR_NOMEM;
	if (!st) st = mgt_eval_generate(em->ev, &go, p->n, (const int32_t *const *)p->ids, p->len, on_token, &c);
	if (!st && o->logits) st = write_npy(o->logits, c.logits, c.nlog, c.vocab);
	free(c.ids);
	free(c.nids);
	free(c.logits);
	return st;
}

/* --chat: the template (--chat-template, else the tokenizer's tokenizer_config.json) and the
 * end-of-turn ids. */
static mgt_status chat_open(chat_ctx *c, const gopts *o, const eval_model *em)
{
	mgt_status st = mgt_chat_config_open(&c->cfg, o->chat_template, em->tok_model);
	if (st && !o->chat_template) st = mgt_err_ctx(st, "--chat");
	return st ? st : mgt_chat_end_ids(&c->cfg, em->tok, em->tok_model, &c->end);
}

static mgt_status run(const gopts *o)
{
	eval_model em;
	chat_ctx chat = { .o = o };
	prompts p = { .chat = o->chat ? &chat : NULL };
	char where[64];
	mgt_status st = eval_model_open(&o->m, true, &em);
	if (!st && o->chat) st = chat_open(&chat, o, &em);
	for (int i = 0; !st && i < o->nprompt; i++) {
		snprintf(where, sizeof where, "--prompt %d", i + 1);
		st = add_text(&p, o->prompt[i], strlen(o->prompt[i]), where);
	}
	if (!st && !o->nprompt) st = read_stdin(&p, o->jsonl);
	if (!st && o->logits && p.n != 1) st = mgt_err(MGT_ERR_USAGE, "--logits: needs exactly one prompt, got %lld", (long long)p.n);
	int64_t ctx_len = st ? 0 : context_length(o, em.ev);
	if (!st) st = encode_all(&p, em.tok, ctx_len);
	if (!st) st = eval_model_build(&o->m, &em, ctx_len);
	if (!st) st = generate(o, &em, &p, ctx_len);
	prompts_free(&p);
	mgt_chat_config_close(&chat.cfg);
	free(chat.end.v);
	eval_model_close(&em);
	return st;
}

static double parse_double(const char *flag, const char *arg, double lo, double hi)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (end == arg || *end || errno || !(v >= lo && v <= hi))
		mgt_cli_usage_error(PROG, "%s '%s': expected a number in [%g, %g]", flag, arg, lo, hi);
	return v;
}

static void push(const char ***v, int *n, const char *s)
{
	const char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
	if (!nv) mgt_cli_fail(PROG, MGT_ERR_NOMEM);
	nv[(*n)++] = s;
	*v = nv;
}

static void check_opts(gopts *o)
{
	eval_model_check(&o->m);
	if (o->greedy && (o->top_k > 1 || o->top_p > 0 || o->has_temp))
		mgt_cli_usage_error(PROG, "--greedy takes no --temperature, --top-k or --top-p");
	if (o->top_k > 1 && o->top_p > 0) mgt_cli_usage_error(PROG, "give one of --top-k and --top-p");
	if (o->batch < 1 || o->batch > 4096) mgt_cli_usage_error(PROG, "--batch-size %lld: expected 1 to 4096", o->batch);
	if (o->max_new > (1LL << 24)) mgt_cli_usage_error(PROG, "--max-new-tokens %lld: too many", o->max_new);
	if (o->max_len > (1LL << 24)) mgt_cli_usage_error(PROG, "--max-length %lld: too many", o->max_len);
	if (o->output && strcmp(o->output, "text") && strcmp(o->output, "jsonl"))
		mgt_cli_usage_error(PROG, "--output '%s': expected text or jsonl", o->output);
	if (o->nprompt && o->jsonl) mgt_cli_usage_error(PROG, "--jsonl reads stdin: give no --prompt");
	for (int i = 0; i < o->nstop; i++)
		if (!o->stop[i][0]) mgt_cli_usage_error(PROG, "--stop: an empty string");
	if (!o->chat && (o->chat_template || o->chat_date || o->system))
		mgt_cli_usage_error(PROG, "--chat-template, --chat-date and --system need --chat");
	if (o->chat) o->m.tok.hf_no_special_tokens = 1; /* apply_chat_template: add_special_tokens=False */
}

static int own_option(int c, const char *arg, void *ctx)
{
	gopts *o = ctx;
	switch (c) {
	case OPT_PROMPT: push(&o->prompt, &o->nprompt, arg); return 1;
	case OPT_JSONL: o->jsonl = true; return 1;
	case OPT_MAX_NEW: o->max_new = mgt_cli_int(PROG, "--max-new-tokens", arg); return 1;
	case OPT_GREEDY: o->greedy = true; return 1;
	case OPT_TEMP: o->temperature = parse_double("--temperature", arg, 0, 1e6); o->has_temp = true; return 1;
	case OPT_TOPK: o->top_k = mgt_cli_int(PROG, "--top-k", arg); return 1;
	case OPT_TOPP: o->top_p = parse_double("--top-p", arg, 0, 1); return 1;
	case OPT_SEED: o->seed = mgt_cli_int(PROG, "--seed", arg); return 1;
	case OPT_STOP: push(&o->stop, &o->nstop, arg); return 1;
	case OPT_IGNORE_EOS: o->ignore_eos = true; return 1;
	case OPT_BATCH: o->batch = mgt_cli_int(PROG, "--batch-size", arg); return 1;
	case OPT_MAX_LEN: o->max_len = mgt_cli_int(PROG, "--max-length", arg); return 1;
	case OPT_OUTPUT: o->output = arg; return 1;
	case OPT_LOGITS: o->logits = arg; return 1;
	case OPT_CHAT: o->chat = true; return 1;
	case OPT_CHAT_TEMPLATE: o->chat_template = arg; return 1;
	case OPT_CHAT_DATE: o->chat_date = arg; return 1;
	case OPT_SYSTEM: o->system = arg; return 1;
	default: return 0;
	}
}

static void parse(gopts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		EVAL_MODEL_LONGOPTS,
		{"prompt", required_argument, 0, OPT_PROMPT}, {"jsonl", no_argument, 0, OPT_JSONL},
		{"max-new-tokens", required_argument, 0, OPT_MAX_NEW}, {"greedy", no_argument, 0, OPT_GREEDY},
		{"temperature", required_argument, 0, OPT_TEMP}, {"top-k", required_argument, 0, OPT_TOPK},
		{"top-p", required_argument, 0, OPT_TOPP}, {"seed", required_argument, 0, OPT_SEED},
		{"stop", required_argument, 0, OPT_STOP}, {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
		{"batch-size", required_argument, 0, OPT_BATCH}, {"max-length", required_argument, 0, OPT_MAX_LEN},
		{"output", required_argument, 0, OPT_OUTPUT}, {"logits", required_argument, 0, OPT_LOGITS},
		{"chat", no_argument, 0, OPT_CHAT}, {"chat-template", required_argument, 0, OPT_CHAT_TEMPLATE},
		{"chat-date", required_argument, 0, OPT_CHAT_DATE}, {"system", required_argument, 0, OPT_SYSTEM},
		{0, 0, 0, 0}};
	eval_parse(argc, argv, longopts, &o->m, own_option, o, usage);
}

int eval_cmd_generate(int argc, char **argv)
{
	gopts o = { .max_new = 32, .temperature = 1.0, .seed = 1234, .batch = 1 };
	eval_model_defaults(&o.m);
	o.m.command = EVAL_PROG " generate";
	o.m.use = MGT_EVAL_USE_GENERATE;
	parse(&o, argc, argv);
	check_opts(&o);
	mgt_status st = run(&o);
	free(o.prompt);
	free(o.stop);
	return eval_finish(st);
}
