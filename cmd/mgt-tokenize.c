/* mgt-tokenize: encode text to token ids or decode ids to text, for shell use. See mgt-tokenize(1). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/data.h"

static const char *prog = "mgt-tokenize";

enum { OPT_DECODE = CLI_FIRST_FREE, OPT_JSONL, OPT_KEY, OPT_COUNT, OPT_INFO, OPT_GGUF_VOCAB, OPT_CHAT, OPT_CHAT_TEMPLATE, OPT_CHAT_DATE,
       OPT_IDS, OPT_HELP };

static void usage(void)
{
	printf("Usage: mgt-tokenize [OPTIONS] [TEXT...]\n"
	       "Encode TEXT (or standard input) to token ids, or decode ids back to text.\n\n"
	       "  --decode          read token ids (whitespace-separated) and print the text\n"
	       "  --jsonl           input is JSONL: one output line per input line (ids, or with\n"
	       "                    --decode a JSON object {KEY: text})\n"
	       "  --json-key KEY    JSONL key (default text)\n"
	       "  --count           print the number of tokens instead of the ids\n"
	       "  --info            print the tokenizer's type, vocabulary size and eod id\n"
	       "  --gguf-vocab      print the vocabulary as mgt-export puts it in GGUF (tokenizer.ggml.*)\n"
	       "                    as one JSON object\n"
	       "  --chat            render chat conversations: each JSONL input line is an object\n"
	       "                    {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": bool, ...}\n"
	       "                    (every key a template variable); prints {\"text\": RENDERED} per line\n"
	       "  --chat-template FILE  the Jinja2 chat template (default: \"chat_template\" of the\n"
	       "                    tokenizer_config.json beside --tokenizer-model)\n"
	       "  --chat-date DATE  pin strftime_now to DATE (YYYY-MM-DD[THH:MM:SS], UTC)\n"
	       "  --ids             with --chat: also encode the text (no special tokens added), as \"ids\"\n"
	       "  -i FILE           read FILE instead of standard input ('-' = stdin; zstd detected)\n"
	       "  --help\n\n%s\nExit status: 0 ok, 1 runtime error, 2 usage, 3 bad input (also an error the chat\n"
	       "template raises while rendering), 4 bad tokenizer files (also a chat template that does not\n"
	       "parse or uses what the engine does not support).\n",
	       mgt_cli_tok_help);
}

typedef struct { int decode, jsonl, count; const char *key; mgt_tok *tok; mgt_tok_enc *enc; } opts;

static void print_ids(const opts *o, const mgt_ids *ids)
{
	if (o->count) {
		printf("%zu\n", ids->n);
		return;
	}
	for (size_t i = 0; i < ids->n; i++)
		printf(i ? " %d" : "%d", ids->v[i]);
	putchar('\n');
}

static mgt_status parse_ids(const char *s, size_t n, mgt_ids *ids)
{
	char *copy = mgt_malloc(n + 1), *p, *end;
	if (!copy)
		return MGT_ERR_NOMEM;
	memcpy(copy, s, n);
	copy[n] = 0;
	mgt_status st = MGT_OK;
	for (p = copy; !st; p = end) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
			p++;
		if (!*p)
			break;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > INT32_MAX)
			st = mgt_err(MGT_ERR_INPUT, "expected a token id, got '%.20s'", p);
		else
			st = mgt_ids_push(ids, (int32_t)v);
	}
	free(copy);
	return st;
}

/* One unit of input: raw text (or ids when decoding). */
static mgt_status process(const opts *o, const char *s, size_t n)
{
	mgt_ids ids = {0};
	mgt_buf text = {0};
	mgt_status st;
	if (o->decode) {
		st = parse_ids(s, n, &ids);
		if (!st)
			st = mgt_tok_decode(o->tok, ids.v, ids.n, &text);
		if (!st && o->jsonl) {
			mgt_buf valid = {0};
			st = mgt_tok_utf8_lossy(text.p, text.n, &valid);
			json_t *j = json_object();
			json_object_set_new(j, o->key, json_stringn(valid.p ? valid.p : "", valid.n));
			free(valid.p);
			char *line = json_dumps(j, JSON_COMPACT);
			puts(line);
			free(line);
			json_decref(j);
		} else if (!st)
			fwrite(text.p, 1, text.n, stdout);
	} else {
		st = mgt_tok_encode(o->enc, s, n, &ids);
		if (!st)
			print_ids(o, &ids);
	}
	free(ids.v);
	free(text.p);
	return st;
}

static mgt_status process_json_line(const opts *o, const char *line, size_t n)
{
	json_error_t je;
	json_t *j = json_loadb(line, n, JSON_ALLOW_NUL, &je);
	if (!j)
		return mgt_err(MGT_ERR_INPUT, "invalid JSON at column %d: %s", je.column, je.text);
	json_t *v = json_object_get(j, o->key);
	mgt_status st;
	if (!json_is_string(v))
		st = mgt_err(MGT_ERR_INPUT, "key '%s': %s", o->key, v ? "expected a string" : "missing");
	else
		st = process(o, json_string_value(v), json_string_length(v));
	json_decref(j);
	return st;
}

/* fn(ctx, line, n) for every line of path, an error naming the file and line (mgt_jsonl: plain
 * or zstd, "-" for stdin) */
static mgt_status each_line(const char *path, mgt_status (*fn)(void *, const char *, size_t), void *ctx)
{
	mgt_jsonl *r;
	mgt_status st = mgt_jsonl_open(&r, path);
	if (st)
		return st;
	const char *line;
	size_t n;
	while (!(st = mgt_jsonl_next(r, &line, &n)) && line) {
		if ((st = fn(ctx, line, n))) {
			st = mgt_err_ctx(st, "%s:%llu", path, (unsigned long long)mgt_jsonl_lineno(r));
			break;
		}
	}
	mgt_jsonl_close(r);
	return st;
}

static mgt_status jsonl_line(void *ctx, const char *line, size_t n)
{
	const opts *o = ctx;
	return o->decode ? process(o, line, n) : process_json_line(o, line, n);
}

static mgt_status append_line(void *ctx, const char *line, size_t n)
{
	mgt_buf *all = ctx;
	return mgt_buf_add(all, line, n) || mgt_buf_add(all, "\n", 1) ? MGT_ERR_NOMEM : MGT_OK;
}

static mgt_status run_input(const opts *o, const char *path)
{
	if (o->jsonl)
		return each_line(path, jsonl_line, (void *)o);
	/* whole-input mode: lines joined by newlines; a final newline is dropped */
	mgt_buf all = {0};
	mgt_status st = each_line(path, append_line, &all);
	if (!st)
		st = process(o, all.p ? all.p : "", all.n ? all.n - 1 : 0);
	free(all.p);
	return st;
}

/* ---- --chat ------------------------------------------------------------------------------ */

/* the template and special tokens (tok.h mgt_chat_config), strftime_now's date, the encoder of --ids */
typedef struct { mgt_chat_config cfg; const char *date; mgt_tok_enc *enc; } chat;

static mgt_status chat_line(void *ctx, const char *line, size_t n)
{
	const chat *ch = ctx;
	json_error_t je;
	json_t *j = json_loadb(line, n, JSON_ALLOW_NUL, &je);
	if (!j)
		return mgt_err(MGT_ERR_INPUT, "invalid JSON at column %d: %s", je.column, je.text);
	if (!json_is_object(j) || !json_is_array(json_object_get(j, "messages"))) {
		json_decref(j);
		return mgt_err(MGT_ERR_INPUT, "expected an object with a \"messages\" list");
	}
	mgt_buf out = {0};
	mgt_status st = mgt_chat_render(&ch->cfg, j, ch->date, &out);
	mgt_ids ids = {0};
	if (!st && ch->enc)
		st = mgt_tok_encode(ch->enc, out.p ? out.p : "", out.n, &ids);
	if (!st) {
		json_t *o = json_object();
		json_object_set_new(o, "text", json_stringn(out.p ? out.p : "", out.n));
		if (ch->enc) {
			json_t *a = json_array();
			for (size_t i = 0; i < ids.n; i++)
				json_array_append_new(a, json_integer(ids.v[i]));
			json_object_set_new(o, "ids", a);
		}
		char *s = json_dumps(o, JSON_COMPACT);
		if (!s)
			st = mgt_err(MGT_ERR_NOMEM, "out of memory");
		else
			printf("%s\n", s);
		free(s);
		json_decref(o);
	}
	free(out.p), free(ids.v);
	json_decref(j);
	return st;
}

static json_t *str_array(char *const *s, const size_t *len, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		json_t *x = json_stringn(s[i], len ? len[i] : strlen(s[i]));
		if (!x || json_array_append_new(a, x)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* --gguf-vocab: mgt_tok_vocab_get as JSON (keys named after the GGUF keys' last part). */
static mgt_status print_gguf_vocab(const mgt_tok *t)
{
	mgt_tok_vocab v;
	mgt_status st = mgt_tok_vocab_get(t, &v);
	if (st)
		return st;
	json_t *j = json_object(), *types = json_array(), *scores = v.scores ? json_array() : json_null();
	json_object_set_new(j, "model", json_string(v.model));
	json_object_set_new(j, "pre", v.pre ? json_string(v.pre) : json_null());
	json_t *tokens = str_array(v.tokens, v.token_len, v.n), *merges = v.merges ? str_array(v.merges, NULL, v.nmerges) : json_null();
	for (size_t i = 0; i < v.n; i++) {
		json_array_append_new(types, json_integer(v.types[i]));
		if (v.scores)
			json_array_append_new(scores, json_real(v.scores[i]));
	}
	json_object_set_new(j, "tokens", tokens ? tokens : json_null());
	json_object_set_new(j, "token_type", types);
	json_object_set_new(j, "scores", scores);
	json_object_set_new(j, "merges", merges ? merges : json_null());
	json_object_set_new(j, "bos_token_id", json_integer(v.bos));
	json_object_set_new(j, "eos_token_id", json_integer(v.eos));
	json_object_set_new(j, "unknown_token_id", json_integer(v.unk));
	json_object_set_new(j, "padding_token_id", json_integer(v.pad));
	json_object_set_new(j, "add_bos_token", json_boolean(v.add_bos));
	mgt_tok_vocab_free(&v);
	char *out = tokens && merges ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!out)
		return mgt_err(MGT_ERR_VOCAB, "the vocabulary has a token that is not valid UTF-8");
	puts(out);
	free(out);
	return MGT_OK;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		MGT_CLI_TOK_LONGOPTS,
		{"decode", no_argument, 0, OPT_DECODE}, {"jsonl", no_argument, 0, OPT_JSONL},
		{"json-key", required_argument, 0, OPT_KEY}, {"count", no_argument, 0, OPT_COUNT},
		{"info", no_argument, 0, OPT_INFO}, {"gguf-vocab", no_argument, 0, OPT_GGUF_VOCAB},
		{"chat", no_argument, 0, OPT_CHAT}, {"chat-template", required_argument, 0, OPT_CHAT_TEMPLATE},
		{"chat-date", required_argument, 0, OPT_CHAT_DATE}, {"ids", no_argument, 0, OPT_IDS},
		{"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
	mgt_tok_opts to;
	mgt_cli_tok_defaults(&to);
	mgt_signals_install();
	opts o = {.key = "text"};
	const char *input = NULL;
	int c, info = 0, gguf_vocab = 0, chat_mode = 0, chat_ids = 0;
	const char *chat_template = NULL, *chat_date = NULL;
	while ((c = getopt_long(argc, argv, "i:", longopts, NULL)) != -1) {
		if (mgt_cli_tok_option(prog, c, optarg, &to))
			continue;
		switch (c) {
		case OPT_DECODE: o.decode = 1; break;
		case OPT_JSONL: o.jsonl = 1; break;
		case OPT_KEY: o.key = optarg; break;
		case OPT_COUNT: o.count = 1; break;
		case OPT_INFO: info = 1; break;
		case OPT_GGUF_VOCAB: gguf_vocab = 1; break;
		case OPT_CHAT: chat_mode = 1; break;
		case OPT_CHAT_TEMPLATE: chat_template = optarg; break;
		case OPT_CHAT_DATE: chat_date = optarg; break;
		case OPT_IDS: chat_ids = 1; break;
		case 'i': input = optarg; break;
		case OPT_HELP: usage(); return 0;
		default: mgt_cli_usage_error(prog, "unknown option");
		}
	}
	mgt_status st;
	if (chat_mode) {
		/* the template alone: no tokenizer is loaded (--tokenizer-model only locates the config) */
		if (optind < argc)
			mgt_cli_usage_error(prog, "--chat reads JSONL from -i FILE or standard input, not arguments");
		chat ch = {.date = chat_date};
		/* --ids: transformers encodes the text with add_special_tokens=False */
		to.hf_no_special_tokens = 1;
		st = chat_ids ? mgt_tok_load(&o.tok, &to) : MGT_OK;
		if (!st && chat_ids)
			st = mgt_tok_enc_new(&ch.enc, o.tok);
		if (!st)
			st = mgt_chat_config_open(&ch.cfg, chat_template, to.model);
		if (!st)
			st = each_line(input ? input : "-", chat_line, &ch);
		mgt_chat_config_close(&ch.cfg);
		mgt_tok_enc_free(ch.enc);
		mgt_tok_free(o.tok);
		if (fflush(stdout) != 0 && !st)
			st = mgt_err(MGT_ERR_IO, "standard output: write failed");
		if (st)
			mgt_cli_fail(prog, st);
		return 0;
	}
	if (chat_template || chat_date || chat_ids)
		mgt_cli_usage_error(prog, "--chat-template, --chat-date and --ids need --chat");
	st = mgt_tok_load(&o.tok, &to);
	if (st)
		mgt_cli_fail(prog, st);
	if (info) {
		printf("type %s\nvocab_size %lld\neod %d\n", mgt_tok_type_name(o.tok),
		       (long long)mgt_tok_vocab_size(o.tok), mgt_tok_eod(o.tok));
		mgt_tok_free(o.tok);
		return 0;
	}
	if (gguf_vocab) {
		st = print_gguf_vocab(o.tok);
		mgt_tok_free(o.tok);
		if (!st && fflush(stdout) != 0)
			st = mgt_err(MGT_ERR_IO, "standard output: write failed");
		if (st)
			mgt_cli_fail(prog, st);
		return 0;
	}
	if ((st = mgt_tok_enc_new(&o.enc, o.tok)))
		mgt_cli_fail(prog, st);
	if (optind < argc) {
		mgt_buf text = {0};
		for (int i = optind; i < argc && !st; i++)
			st = mgt_buf_add(&text, argv[i], strlen(argv[i])) || (i + 1 < argc && mgt_buf_add(&text, " ", 1))
				     ? MGT_ERR_NOMEM : MGT_OK;
		if (!st)
			st = process(&o, text.p, text.n);
		free(text.p);
	} else
		st = run_input(&o, input ? input : "-");
	mgt_tok_enc_free(o.enc);
	mgt_tok_free(o.tok);
	if (fflush(stdout) != 0 && !st)
		st = mgt_err(MGT_ERR_IO, "standard output: write failed");
	if (st)
		mgt_cli_fail(prog, st);
	return 0;
}
