/* lib/data/sft.c: Megatron's SFT dataset (--sft: megatron/training/datasets/sft_dataset.py
 * SFTDataset over SFTLowLevelDataset, with SFTTokenizer's prompt formats and target rule,
 * megatron/core/tokenizers/text/libraries/sft_tokenizer.py): one JSONL line is one packed
 * sample; its messages are split into conversations at every system turn, each rendered by the
 * prompt format and tokenized, the system, user and tool turns (and the assistant prefix) taken
 * out of the targets, and the conversations packed into seq_length + 1 tokens with their
 * cu_seqlens (data.h mgt_sft_*). */
#include "data.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* One message: role and content (into the line's JSON, or static). */
typedef struct {
	const char *role, *content;
	size_t len;
	json_t *obj;        /* the line's message object as it is (NULL when a converter made it) */
} msg;

struct mgt_sft_data {
	mgt_buf text;       /* every line, '\n'-separated */
	size_t *off;        /* line k = text.p[off[k] .. off[k + 1] - 1) */
	int64_t n;
	const mgt_tok *tok;
	mgt_tok_enc *enc;
	mgt_sft_format fmt;
	const mgt_chat_config *chat; /* the default format's template and special tokens */
	const char *date;
	int S, cp;
	int32_t pad;
	char *path;
	mgt_ids ids, tgt, turn;       /* scratch: a conversation's tokens and targets, a turn's tokens */
	mgt_ids pt, py, pp, cu;       /* scratch: the pack's tokens, targets, positions; cu_seqlens */
	mgt_buf r;                    /* scratch: a rendering */
};

enum { IGNORE = -100 };

static const char *const FMT_NAME[] = { "nemotron-h-aligned", "nemotron-nano-v2", "identity", "default" };

mgt_status mgt_sft_format_parse(const char *name, mgt_sft_format *out)
{
	for (int k = 0; k < 4; k++)
		if (!strcmp(name, FMT_NAME[k])) return *out = (mgt_sft_format)k, MGT_OK;
	return mgt_err(MGT_ERR_USAGE, "--sft-tokenizer-prompt-format %s: expected nemotron-h-aligned, nemotron-nano-v2, "
		       "identity or default", name);
}

/* Python's str.isspace() for the code point at s (its UTF-8 length in *n). */
static int py_space(const unsigned char *s, size_t left, size_t *n)
{
	*n = 1;
	if (*s == ' ' || (*s >= 9 && *s <= 13) || (*s >= 0x1c && *s <= 0x1f)) return 1;
	if (left >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return *n = 2, 1;
	if (left < 3) return 0;
	const unsigned cp = ((unsigned)(s[0] & 0x0F) << 12) | ((unsigned)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
	if ((s[0] & 0xF0) != 0xE0) return 0;
	*n = 3;
	return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
	       cp == 0x205F || cp == 0x3000;
}

/* Append c with Python's str.strip() applied (Unicode whitespace at both ends). */
static mgt_status add_stripped(mgt_buf *b, const char *c, size_t len)
{
	const unsigned char *s = (const unsigned char *)c;
	size_t a = 0, e = len, k;
	while (a < e && py_space(s + a, e - a, &k)) a += k;
	while (e > a) { /* the last code point */
		size_t st = e - 1;
		while (st > a && (s[st] & 0xC0) == 0x80) st--;
		if (!py_space(s + st, e - st, &k) || st + k != e) break;
		e = st;
	}
	return mgt_buf_add(b, c + a, e - a);
}

/* nano-v2's content: "/think" then "/no_think" removed (Python str.replace), then stripped. */
static mgt_status add_nothink(mgt_buf *b, const char *c, size_t len)
{
	mgt_buf t = { 0 };
	mgt_status st = mgt_buf_add(&t, c, len);
	const char *pat[2] = { "/think", "/no_think" };
	for (int k = 0; !st && k < 2; k++) {
		const size_t pl = strlen(pat[k]);
		size_t w = 0;
		for (size_t i = 0; i < t.n;)
			if (i + pl <= t.n && !memcmp(t.p + i, pat[k], pl)) i += pl;
			else t.p[w++] = t.p[i++];
		t.n = w;
	}
	if (!st) st = add_stripped(b, t.p, t.n);
	free(t.p);
	return st;
}

static mgt_status adds(mgt_buf *b, const char *s) { return mgt_buf_add(b, s, strlen(s)); }

/* One message as the prompt format's template renders it (sft_tokenizer.py's three templates;
 * roles compared exactly, as the templates do: another role renders nothing). */
static mgt_status render_msg(mgt_buf *b, mgt_sft_format f, const msg *m)
{
	const char *r = m->role;
	mgt_status st = MGT_OK;
	if (f == MGT_SFT_IDENTITY) return mgt_buf_add(b, m->content, m->len);
	const int nano = f == MGT_SFT_NEMOTRON_NANO_V2;
	mgt_status (*body)(mgt_buf *, const char *, size_t) = nano ? add_nothink : add_stripped;
	if (!strcmp(r, "system")) {
		if (!(st = adds(b, "<SPECIAL_10>System\n")) && !(st = body(b, m->content, m->len))) st = adds(b, "\n");
	} else if (!strcmp(r, "user")) {
		if (!(st = adds(b, "<SPECIAL_11>User\n")) && !(st = body(b, m->content, m->len)))
			st = adds(b, nano ? "\n" : "\n<SPECIAL_11>Assistant\n");
	} else if (!strcmp(r, "assistant")) {
		if (nano) st = adds(b, "<SPECIAL_11>Assistant\n");
		if (!st) st = add_stripped(b, m->content, m->len);
		if (!st) st = adds(b, nano ? "\n<SPECIAL_12>\n" : "\n");
	}
	return st;
}

/* The default format: messages m[0..n) as the line gives them (a converter's as {role, content})
 * through the tokenizer's chat template (mgt_chat_render: add_generation_prompt false). */
static mgt_status render_chat(mgt_sft_data *d, const msg *m, int n)
{
	json_t *a = json_array(), *kw = json_object();
	for (int k = 0; k < n; k++)
		json_array_append_new(a, m[k].obj ? json_incref(m[k].obj)
						  : json_pack("{s:s,s:s%}", "role", m[k].role, "content", m[k].content, m[k].len));
	json_object_set_new(kw, "messages", a);
	mgt_status st = mgt_chat_render(d->chat, kw, d->date, &d->r);
	json_decref(kw);
	return st;
}

/* The tokens of messages m[0..n) rendered (apply_chat_template(tokenize=True): encoded without
 * special tokens added) into ids (cleared first). */
static mgt_status tokenize(mgt_sft_data *d, const msg *m, int n, mgt_ids *ids)
{
	d->r.n = 0, ids->n = 0;
	mgt_status st = d->fmt == MGT_SFT_DEFAULT ? render_chat(d, m, n) : MGT_OK;
	for (int k = 0; !st && d->fmt != MGT_SFT_DEFAULT && k < n; k++) st = render_msg(&d->r, d->fmt, &m[k]);
	return st ? st : mgt_tok_encode(d->enc, d->r.p ? d->r.p : "", d->r.n, ids);
}

static int lower_is(const char *r, const char *want) { return !strcasecmp(r, want); }

/* SFTTokenizer.tokenize_conversation(return_target=True): tokens into d->ids, targets into
 * d->tgt (IGNORE where masked).  Errors name the line and the conversation's first message. */
static mgt_status conversation(mgt_sft_data *d, const msg *m, int n, int64_t line, int first)
{
	mgt_status st = tokenize(d, m, n, &d->ids);
	if (st) return mgt_err_ctx(st, "%s:%lld: the conversation from message %d", d->path, (long long)line + 1, first + 1);
	d->tgt.n = 0;
	for (size_t i = 0; !st && i < d->ids.n; i++) st = mgt_ids_push(&d->tgt, d->ids.v[i]);
	if (st || d->fmt == MGT_SFT_DEFAULT) return st; /* default: every token trained, no turn checked */
	int32_t *y = d->tgt.v;
	size_t idx = 0;
	for (int k = 0; k < n; k++) {
		const char *r = m[k].role;
		if (lower_is(r, "assistant") && m[k].len == 0)
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: message %d: an empty assistant turn (Megatron's SFTTokenizer "
				       "refuses it)", d->path, (long long)line + 1, first + k + 1);
		const char *prev = m[k > 0 ? k - 1 : n - 1].role; /* Python's [-1] at the first turn */
		if (lower_is(r, "assistant") && !lower_is(prev, "user") && !lower_is(prev, "tool"))
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: message %d: an assistant turn must follow a user or tool turn",
				       d->path, (long long)line + 1, first + k + 1);
		if ((st = tokenize(d, &m[k], 1, &d->turn)))
			return mgt_err_ctx(st, "%s:%lld: message %d", d->path, (long long)line + 1, first + k + 1);
		const size_t tl = d->turn.n;
		const int masked = lower_is(r, "system") || lower_is(r, "user") || lower_is(r, "tool");
		if (!masked && !lower_is(r, "assistant"))
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: message %d: role \"%s\": expected system, user, assistant or tool",
				       d->path, (long long)line + 1, first + k + 1, r);
		const size_t nm = masked ? tl : d->fmt == MGT_SFT_NEMOTRON_NANO_V2 ? 3 : 0;
		for (size_t i = 0; i < nm && idx + i < d->ids.n; i++) y[idx + i] = IGNORE;
		if (idx + tl > d->ids.n || memcmp(d->ids.v + idx, d->turn.v, tl * sizeof *d->turn.v))
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: message %d: its tokens alone differ from its tokens in the "
				       "conversation (the %s format joins turns that the tokenizer merges across; Megatron "
				       "asserts the same)", d->path, (long long)line + 1, first + k + 1, FMT_NAME[d->fmt]);
		idx += tl;
	}
	if (idx != d->ids.n)
		return mgt_err(MGT_ERR_INPUT, "%s:%lld: the turns' tokens do not add up to the conversation's", d->path,
			       (long long)line + 1);
	return MGT_OK;
}

/* ---- a line's messages (the layouts of megatron/training/datasets/varlen_dataset.py) ---- */

typedef struct {
	msg *m;
	int n, cap;
} msgs;

static mgt_status push_msg(msgs *v, const char *role, const char *c, size_t len, json_t *obj)
{
	if (v->n == v->cap) {
		int cap = v->cap ? 2 * v->cap : 8;
		msg *m = realloc(v->m, (size_t)cap * sizeof *m);
		if (!m) return MGT_ERR_NOMEM;
		v->m = m, v->cap = cap;
	}
	v->m[v->n++] = (msg){ role, c, len, obj };
	return MGT_OK;
}

/* "messages": [{"role", "content"}...] as SFTLowLevelDataset reads it (no turn added). */
static mgt_status from_messages(const mgt_sft_data *d, json_t *a, int64_t line, msgs *v)
{
	if (!json_is_array(a)) return mgt_err(MGT_ERR_INPUT, "%s:%lld: \"messages\" is not a list", d->path, (long long)line + 1);
	size_t i;
	json_t *x;
	json_array_foreach(a, i, x) {
		json_t *r = json_object_get(x, "role"), *c = json_object_get(x, "content");
		if (!json_is_string(r) || !json_is_string(c))
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: message %zu: expected string \"role\" and \"content\"", d->path,
				       (long long)line + 1, i + 1);
		mgt_status st = push_msg(v, json_string_value(r), json_string_value(c), json_string_length(c), x);
		if (st) return st;
	}
	return MGT_OK;
}

/* ShareGPT's "from" names as _SHAREGPT_ROLE_MAP maps them (others: user). */
static const char *sharegpt_role(const char *f)
{
	static const char *const as[] = { "gpt", "assistant", "model", "chatgpt", "bing", "bard" };
	static const char *const tool[] = { "tool", "function", "observation" };
	for (size_t k = 0; k < 6; k++) if (!strcmp(f, as[k])) return "assistant";
	for (size_t k = 0; k < 3; k++) if (!strcmp(f, tool[k])) return "tool";
	return !strcmp(f, "system") ? "system" : "user";
}

/* "conversations" (ShareGPT): an empty system turn first unless the first speaker is system. */
static mgt_status from_sharegpt(const mgt_sft_data *d, json_t *a, int64_t line, msgs *v)
{
	if (!json_is_array(a)) return mgt_err(MGT_ERR_INPUT, "%s:%lld: \"conversations\" is not a list", d->path, (long long)line + 1);
	json_t *f0 = json_object_get(json_array_get(a, 0), "from");
	mgt_status st = json_is_string(f0) && !strcmp(sharegpt_role(json_string_value(f0)), "system")
			? MGT_OK : push_msg(v, "system", "", 0, NULL);
	size_t i;
	json_t *x;
	json_array_foreach(a, i, x) {
		json_t *f = json_object_get(x, "from"), *c = json_object_get(x, "value");
		if (st) return st;
		if (!json_is_string(f) || !json_is_string(c))
			return mgt_err(MGT_ERR_INPUT, "%s:%lld: turn %zu: expected string \"from\" and \"value\"", d->path,
				       (long long)line + 1, i + 1);
		st = push_msg(v, sharegpt_role(json_string_value(f)), json_string_value(c), json_string_length(c), NULL);
	}
	return st;
}

/* The first non-empty string among keys (NULL when none). */
static json_t *first_present(json_t *o, const char *const *keys, int n)
{
	for (int k = 0; k < n; k++) {
		json_t *x = json_object_get(o, keys[k]);
		if (json_is_string(x) && json_string_length(x)) return x;
	}
	return NULL;
}

static const char *const INSTR[] = { "instruction", "prompt", "query", "question" };
static const char *const OUTP[] = { "output", "response", "completion", "answer" };
static const char *const CTX[] = { "input", "context" };

/* Alpaca/Dolly: [system "", user instruction (+ "\n\n" + input), assistant output]; the user
 * text is built in *u (owned by the caller). */
static mgt_status from_alpaca(const mgt_sft_data *d, json_t *o, int64_t line, msgs *v, mgt_buf *u)
{
	json_t *in = first_present(o, INSTR, 4), *out = first_present(o, OUTP, 4), *ctx = first_present(o, CTX, 2);
	if (!in || !out)
		return mgt_err(MGT_ERR_INPUT, "%s:%lld: an instruction record needs a non-empty instruction|prompt|query|"
			       "question and output|response|completion|answer", d->path, (long long)line + 1);
	mgt_status st = mgt_buf_add(u, json_string_value(in), json_string_length(in));
	if (!st && ctx) st = mgt_buf_add(u, "\n\n", 2);
	if (!st && ctx) st = mgt_buf_add(u, json_string_value(ctx), json_string_length(ctx));
	if (!st) st = push_msg(v, "system", "", 0, NULL);
	if (!st) st = push_msg(v, "user", u->p, u->n, NULL);
	if (!st) st = push_msg(v, "assistant", json_string_value(out), json_string_length(out), NULL);
	return st;
}

static mgt_status line_msgs(const mgt_sft_data *d, json_t *o, int64_t line, msgs *v, mgt_buf *u)
{
	json_t *x;
	if ((x = json_object_get(o, "messages"))) return from_messages(d, x, line, v);
	if ((x = json_object_get(o, "conversations"))) return from_sharegpt(d, x, line, v);
	if (first_present(o, INSTR, 4) || first_present(o, OUTP, 4)) return from_alpaca(d, o, line, v, u);
	return mgt_err(MGT_ERR_INPUT, "%s:%lld: expected \"messages\", \"conversations\" (ShareGPT) or an instruction "
		       "and output (Alpaca)%s", d->path, (long long)line + 1,
		       json_object_get(o, "text") ? "; a \"text\" record is pretraining data (mgt-preprocess)" : "");
}

/* ---- packing (SFTDataset.__getitem__) ---- */

static mgt_status push3(mgt_sft_data *d, int32_t t, int32_t y, int32_t p)
{
	mgt_status st = mgt_ids_push(&d->pt, t);
	if (!st) st = mgt_ids_push(&d->py, y);
	return st ? st : mgt_ids_push(&d->pp, p);
}

/* The conversation in d->ids / d->tgt appended, padded to 2 cp under context parallelism, its
 * end pushed to cu; *full when the pack reached S + 1 (truncated: last token pad, cu[-1] = S). */
static mgt_status pack_one(mgt_sft_data *d, bool *full)
{
	mgt_status st = MGT_OK;
	for (size_t i = 0; !st && i < d->ids.n; i++) st = push3(d, d->ids.v[i], d->tgt.v[i], (int32_t)i);
	const size_t g = d->cp > 1 ? 2 * (size_t)d->cp : 1;
	while (!st && d->pt.n % g) st = push3(d, d->pad, d->pad, d->pp.v[d->pp.n - 1] + 1);
	if (!st) st = mgt_ids_push(&d->cu, (int32_t)d->pt.n);
	const size_t L = (size_t)d->S;
	if (st || d->pt.n < L + 1) return st;
	d->pt.n = d->py.n = d->pp.n = L + 1;
	d->pt.v[L] = d->py.v[L] = d->pad;
	d->cu.v[d->cu.n - 1] = (int32_t)L;
	*full = true;
	return MGT_OK;
}

/* The outputs of a pack of S + 1 tokens (sample layout: data.h mgt_sft_sample). */
static void pack_out(mgt_sft_data *d, mgt_sft_sample *s)
{
	const int S = d->S;
	s->max_seqlen = 0;
	for (int q = 0; q < S; q++) {
		s->tokens[q] = d->pt.v[q];
		s->labels[q] = d->py.v[q + 1];
		s->position_ids[q] = d->pp.v[q];
		s->loss_mask[q] = s->labels[q] == d->pad || s->labels[q] == IGNORE ? 0.0f : 1.0f;
	}
	s->n_cu = (int)d->cu.n;
	for (int k = 0; k <= S; k++) s->cu_seqlens[k] = k < (int)d->cu.n ? d->cu.v[k] : S;
	for (size_t k = 1; k < d->cu.n; k++)
		if (d->cu.v[k] - d->cu.v[k - 1] > s->max_seqlen) s->max_seqlen = d->cu.v[k] - d->cu.v[k - 1];
}

mgt_status mgt_sft_get(mgt_sft_data *d, int64_t line, mgt_sft_sample *s)
{
	if (line < 0 || line >= d->n) return mgt_err(MGT_ERR_INPUT, "%s: line %lld of %lld", d->path, (long long)line + 1, (long long)d->n);
	json_error_t je;
	json_t *o = json_loadb(d->text.p + d->off[line], d->off[line + 1] - d->off[line] - 1, 0, &je);
	if (!json_is_object(o)) {
		json_decref(o);
		return mgt_err(MGT_ERR_INPUT, "%s:%lld: %s", d->path, (long long)line + 1, o ? "not a JSON object" : je.text);
	}
	msgs v = { 0 };
	mgt_buf u = { 0 };
	mgt_status st = line_msgs(d, o, line, &v, &u);
	if (!st && v.n == 0) st = mgt_err(MGT_ERR_INPUT, "%s:%lld: no messages", d->path, (long long)line + 1);
	d->pt.n = d->py.n = d->pp.n = d->cu.n = 0;
	if (!st) st = mgt_ids_push(&d->cu, 0);
	bool full = false;
	for (int a = 0, b; !st && !full && a < v.n; a = b) { /* conversations: a system turn starts one */
		for (b = a + 1; b < v.n && strcmp(v.m[b].role, "system"); b++) {}
		st = conversation(d, v.m + a, b - a, line, a);
		if (!st) st = pack_one(d, &full);
	}
	for (const size_t L = (size_t)d->S; !st && !full && d->pt.n < L + 1;)
		st = push3(d, d->pad, d->pad, d->pp.n ? d->pp.v[d->pp.n - 1] + 1 : 0);
	if (!st && !full) d->cu.v[d->cu.n - 1] = d->S;
	if (!st) pack_out(d, s);
	free(v.m), free(u.p);
	json_decref(o);
	return st;
}

/* ---- open ---- */

/* The id of the single token that is exactly `name` (an added token), or -1. */
static int32_t token_id(mgt_tok_enc *e, const mgt_tok *t, const char *name)
{
	mgt_ids ids = { 0 };
	int32_t id = -1;
	if (!mgt_tok_encode(e, name, strlen(name), &ids) && ids.n == 1) {
		size_t n;
		const char *b = mgt_tok_token_bytes(t, ids.v[0], &n);
		if (b && n == strlen(name) && !memcmp(b, name, n)) id = ids.v[0];
	}
	free(ids.v);
	return id;
}

static mgt_status read_lines(mgt_sft_data *d, const char *path)
{
	mgt_jsonl *r;
	mgt_status st = mgt_jsonl_open(&r, path);
	size_t cap = 0;
	for (const char *line; !st;) {
		size_t len;
		if ((st = mgt_jsonl_next(r, &line, &len)) || !line) break;
		if ((size_t)d->n + 2 > cap) {
			cap = cap ? 2 * cap : 1024;
			size_t *o = realloc(d->off, cap * sizeof *o);
			if (!o) { st = MGT_ERR_NOMEM; break; }
			d->off = o;
		}
		d->off[d->n++] = d->text.n;
		if (!(st = mgt_buf_add(&d->text, line, len))) st = mgt_buf_add(&d->text, "\n", 1);
	}
	if (r) mgt_jsonl_close(r);
	if (!st && d->n == 0) st = mgt_err(MGT_ERR_INPUT, "%s: no lines (an SFT dataset is one conversation list a line)", path);
	if (!st) d->off[d->n] = d->text.n;
	return st;
}

mgt_status mgt_sft_open(const mgt_sft_config *c, mgt_sft_data **out)
{
	*out = NULL;
	if (c->seq_length < 1 || c->cp < 1 || (c->cp > 1 && c->seq_length % (2 * c->cp)))
		return mgt_err(MGT_ERR_USAGE, "SFT: seq_length %d must be >= 1 and divisible by 2 x context parallel size %d",
			       c->seq_length, c->cp);
	mgt_sft_data *d = calloc(1, sizeof *d);
	if (!d) return MGT_ERR_NOMEM;
	d->tok = c->tok, d->fmt = c->format, d->S = c->seq_length, d->cp = c->cp, d->chat = c->chat, d->date = c->date;
	mgt_status st = (d->path = strdup(c->path)) ? MGT_OK : MGT_ERR_NOMEM;
	if (!st) st = mgt_tok_enc_new(&d->enc, c->tok);
	if (!st && d->fmt == MGT_SFT_DEFAULT && (!c->chat || !c->chat->t))
		st = mgt_err(MGT_ERR_USAGE, "--sft-tokenizer-prompt-format default needs the tokenizer's chat_template "
			     "(tokenizer_config.json beside --tokenizer-model)");
	const char *pad = d->fmt == MGT_SFT_NEMOTRON_H_ALIGNED ? "<SPECIAL_233>" : "<unk>";
	if (!st && d->fmt == MGT_SFT_DEFAULT) { /* SFTTokenizer: pad_token_id, else eos_token_id */
		pad = json_string_value(json_object_get(c->chat->specials, "pad_token"));
		if (!pad) pad = json_string_value(json_object_get(c->chat->specials, "eos_token"));
		if (!pad) pad = "(no pad_token or eos_token in tokenizer_config.json)";
	}
	if (!st && (d->pad = token_id(d->enc, c->tok, pad)) < 0)
		st = mgt_err(MGT_ERR_USAGE, "--sft-tokenizer-prompt-format %s pads with %s, which the tokenizer (%s) has "
			     "no token for", FMT_NAME[d->fmt], pad, mgt_tok_type_name(c->tok));
	if (!st) st = read_lines(d, c->path);
	if (st) mgt_sft_close(d);
	else *out = d;
	return st;
}

int64_t mgt_sft_lines(const mgt_sft_data *d) { return d->n; }
int32_t mgt_sft_pad(const mgt_sft_data *d) { return d->pad; }

void mgt_sft_close(mgt_sft_data *d)
{
	if (!d) return;
	mgt_ids *ids[] = { &d->ids, &d->tgt, &d->turn, &d->pt, &d->py, &d->pp, &d->cu };
	for (size_t k = 0; k < sizeof ids / sizeof *ids; k++) free(ids[k]->v);
	free(d->text.p), free(d->off), free(d->r.p), free(d->path);
	mgt_tok_enc_free(d->enc);
	free(d);
}

/* ---- mgt-dataset samples --dataset-type sft ---- */

mgt_status mgt_sft_cp_indices(const int32_t *cu, int n_cu, int S, int cp, int rank, int32_t *idx)
{
	int n = 0;
	for (int k = 0; k + 1 < n_cu; k++) {
		const int L = cu[k + 1] - cu[k], c = L / (2 * cp);
		if (L % (2 * cp))
			return mgt_err(MGT_ERR_INPUT, "segment %d of the packed row is %d tokens, not a multiple of 2 x CP = %d",
				       k, L, 2 * cp);
		for (int h = 0; h < 2; h++)
			for (int i = 0, g = cu[k] + (h ? 2 * cp - 1 - rank : rank) * c; i < c; i++) idx[n++] = g + i;
	}
	if (n_cu < 2 || cu[0] || cu[n_cu - 1] != S)
		return mgt_err(MGT_ERR_INPUT, "the packed row's cu_seqlens do not cover its %d positions", S);
	return MGT_OK;
}

static void put_list(FILE *f, const int32_t *v, int n)
{
	fputc('[', f);
	for (int k = 0; k < n; k++) fprintf(f, k ? ", %d" : "%d", (int)v[k]);
	fputc(']', f);
}

static void put_arr(FILE *f, const char *key, const int32_t *v, int n)
{
	fprintf(f, ", \"%s\": ", key);
	put_list(f, v, n);
}

mgt_status mgt_sft_write(FILE *f, mgt_sft_data *d, int64_t first, int64_t end)
{
	const size_t S = (size_t)d->S;
	int32_t *a = malloc((4 * S + 1) * sizeof *a);
	float *mask = malloc(S * sizeof *mask);
	mgt_status st = a && mask ? MGT_OK : MGT_ERR_NOMEM;
	mgt_sft_sample s = { a, a + S, a + 2 * S, a + 3 * S, mask, 0, 0 };
	if (end > d->n) end = d->n;
	for (int64_t k = first < 0 ? 0 : first; !st && k < end; k++) {
		if ((st = mgt_sft_get(d, k, &s))) break;
		int32_t *m = a + 2 * S; /* the loss mask as 0/1 ints, in position_ids' storage once printed */
		fprintf(f, "{\"line\": %lld", (long long)k);
		put_arr(f, "tokens", s.tokens, d->S);
		put_arr(f, "labels", s.labels, d->S);
		put_arr(f, "position_ids", s.position_ids, d->S);
		for (size_t q = 0; q < S; q++) m[q] = mask[q] > 0;
		put_arr(f, "loss_mask", m, d->S);
		put_arr(f, "cu_seqlens", s.cu_seqlens, s.n_cu);
		fprintf(f, ", \"max_seqlen\": %d", s.max_seqlen);
		if (d->cp > 1) fprintf(f, ", \"cp_indices\": [");
		for (int q = 0; !st && d->cp > 1 && q < d->cp; q++) { /* the split, in position_ids' storage */
			st = mgt_sft_cp_indices(s.cu_seqlens, s.n_cu, d->S, d->cp, q, m);
			if (q) fprintf(f, ", ");
			if (!st) put_list(f, m, d->S / d->cp);
		}
		fprintf(f, "%s}\n", d->cp > 1 ? "]" : "");
	}
	free(a), free(mask);
	return st;
}
