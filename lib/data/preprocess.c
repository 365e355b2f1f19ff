/* lib/data: the preprocessing pipeline of mgt-preprocess: JSONL (plain or zstd) to Megatron
 * indexed datasets, as Megatron's tools/preprocess_data.py does it, in bounded memory with worker
 * threads.  A reader thread packs lines into batches (never spanning files), worker threads parse
 * JSON and tokenize (each with its own mgt_tok_enc and sentence splitter), the calling thread
 * writes batches strictly in input order through mgt_idx_writer.  See mgt-preprocess(1).
 */
#include "data.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_KEYS MGT_PREPROCESS_MAX_KEYS
#define BATCH_BYTES (1u << 18)
#define BATCH_LINES 4096

typedef mgt_preprocess_config config;

enum { SLOT_EMPTY, SLOT_FILLED, SLOT_WORKING, SLOT_DONE };

typedef struct {
	int state;
	uint64_t seq;
	size_t file;        /* index into inputs */
	uint64_t first_line;
	mgt_buf text;       /* lines, each followed by '\n' */
	size_t *line_off;   /* start of each line in text */
	size_t n_lines, cap_lines;
	int eof;            /* the reader's last batch */
	mgt_status st;      /* reader or worker error for this batch */
	char msg[1024];
	/* results, per key: ids of all documents and each document's length (with
	 * --split-sentences: each document's number of sentences, and each sentence's length) */
	mgt_ids ids[MAX_KEYS];
	mgt_ids doc_len[MAX_KEYS];
	mgt_ids sent_len[MAX_KEYS];
	uint64_t skipped, blank;
} batch;

typedef struct {
	const config *cfg;
	batch *slots;
	size_t n_slots;
	uint64_t next_fill, next_write;
	int abort;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* progress, read by the writer */
	uint64_t bytes_in, bytes_out;
	int64_t total_size;
} pipeline;

/* ---- reader ------------------------------------------------------------------------------ */

static batch *slot_wait(pipeline *p, uint64_t seq, int state)
{
	batch *b = &p->slots[seq % p->n_slots];
	while (!p->abort && b->state != state)
		pthread_cond_wait(&p->cv, &p->mu);
	return p->abort ? NULL : b;
}

static void batch_publish(pipeline *p, batch *b)
{
	pthread_mutex_lock(&p->mu);
	b->state = SLOT_FILLED;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static batch *batch_take_empty(pipeline *p, size_t file, uint64_t line)
{
	pthread_mutex_lock(&p->mu);
	batch *b = slot_wait(p, p->next_fill, SLOT_EMPTY);
	if (b) {
		b->seq = p->next_fill++;
		b->file = file;
		b->first_line = line;
		b->text.n = 0;
		b->n_lines = 0;
		b->eof = 0;
		b->st = MGT_OK;
		b->skipped = b->blank = 0;
		for (int k = 0; k < MAX_KEYS; k++)
			b->ids[k].n = b->doc_len[k].n = b->sent_len[k].n = 0;
	}
	pthread_mutex_unlock(&p->mu);
	return b;
}

static mgt_status batch_add_line(batch *b, const char *line, size_t n)
{
	if (b->n_lines == b->cap_lines) {
		size_t cap = b->cap_lines ? 2 * b->cap_lines : 256;
		size_t *o = mgt_realloc(b->line_off, cap * sizeof *o);
		if (!o)
			return MGT_ERR_NOMEM;
		b->line_off = o;
		b->cap_lines = cap;
	}
	b->line_off[b->n_lines++] = b->text.n;
	mgt_status st = mgt_buf_add(&b->text, line, n);
	return st ? st : mgt_buf_add(&b->text, "\n", 1);
}

/* Read one input file into batches and publish them; batches never span files. */
static mgt_status read_file(pipeline *p, size_t fi, batch **cur)
{
	mgt_jsonl *r;
	mgt_status st = mgt_jsonl_open(&r, p->cfg->inputs[fi]);
	if (st)
		return st;
	const char *line;
	size_t n;
	uint64_t base_in = p->bytes_in, base_out = p->bytes_out;
	while (!(st = mgt_jsonl_next(r, &line, &n)) && line) {
		if (*cur && ((*cur)->text.n + n > BATCH_BYTES || (*cur)->n_lines == BATCH_LINES)) {
			batch_publish(p, *cur);
			*cur = NULL;
		}
		if (!*cur && !(*cur = batch_take_empty(p, fi, mgt_jsonl_lineno(r))))
			break;
		if ((st = batch_add_line(*cur, line, n)))
			break;
		__atomic_store_n(&p->bytes_in, base_in + mgt_jsonl_bytes_read(r), __ATOMIC_RELAXED);
		__atomic_store_n(&p->bytes_out, base_out + mgt_jsonl_bytes_out(r), __ATOMIC_RELAXED);
	}
	mgt_jsonl_close(r);
	if (*cur) { /* batches never span files: line numbers stay per file */
		batch_publish(p, *cur);
		*cur = NULL;
	}
	return st;
}

static void *reader_main(void *arg)
{
	pipeline *p = arg;
	batch *cur = NULL;
	mgt_status st = MGT_OK;
	size_t fi;
	for (fi = 0; fi < p->cfg->n_inputs && !st; fi++)
		st = read_file(p, fi, &cur);
	batch *last = batch_take_empty(p, fi ? fi - 1 : 0, 0);
	if (last) {
		last->eof = 1;
		last->st = st;
		if (st)
			snprintf(last->msg, sizeof last->msg, "%s", mgt_err_msg());
		batch_publish(p, last);
	}
	return NULL;
}

/* ---- workers ----------------------------------------------------------------------------- */

static const char *json_type_name(json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "a list";
	case JSON_INTEGER: case JSON_REAL: return "a number";
	case JSON_TRUE: case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	default: return "a string";
	}
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

/* A worker's tokenizer state. */
typedef struct {
	mgt_tok_enc *enc;
	mgt_tok_sent *splitter; /* --split-sentences */
	mgt_spans spans;
} worker_ctx;

/* Encode s under key k, appending to the batch's ids; an error names the key. */
static mgt_status encode(const config *cfg, worker_ctx *w, batch *b, int k, const char *s, size_t n)
{
	mgt_status st = mgt_tok_encode(w->enc, s, n, &b->ids[k]);
	return st && st != MGT_ERR_NOMEM ? mgt_err_ctx(st, "key '%s'", cfg->keys[k]) : st;
}

/* One sentence: its ids, and its length when it has any (Megatron drops empty ones). */
static mgt_status add_sentence(const config *cfg, worker_ctx *w, batch *b, int k, const char *s, size_t n,
			       int32_t *count)
{
	size_t before = b->ids[k].n;
	mgt_status st = encode(cfg, w, b, k, s, n);
	if (st || b->ids[k].n == before)
		return st;
	++*count;
	return mgt_ids_push(&b->sent_len[k], (int32_t)(b->ids[k].n - before));
}

/* --split-sentences: a list of strings is taken as the sentences (Megatron's two-pass route); a
 * string is split by the ICU splitter. The document's sentence count goes to doc_len. */
static mgt_status do_sentences(const config *cfg, worker_ctx *w, batch *b, int k, json_t *v)
{
	int32_t count = 0;
	mgt_status st = MGT_OK;
	if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v) && !st; i++) {
			json_t *e = json_array_get(v, i);
			if (!json_is_string(e))
				return mgt_err(MGT_ERR_INPUT, "key '%s': item %zu: expected a string, got %s", cfg->keys[k], i,
					       json_type_name(e));
			st = add_sentence(cfg, w, b, k, json_string_value(e), json_string_length(e), &count);
		}
	} else {
		w->spans.n = 0;
		const char *text = json_string_value(v);
		st = mgt_tok_sent_split(w->splitter, text, json_string_length(v), &w->spans);
		for (size_t i = 0; i < w->spans.n && !st; i++)
			st = add_sentence(cfg, w, b, k, text + w->spans.v[i].off, w->spans.v[i].len, &count);
	}
	if (!st && cfg->append_eod && count > 0) {
		st = mgt_ids_push(&b->ids[k], mgt_tok_eod(cfg->tok));
		b->sent_len[k].v[b->sent_len[k].n - 1]++;
	}
	return st ? st : mgt_ids_push(&b->doc_len[k], count);
}

/* One key's value of one document. */
static mgt_status do_value(const config *cfg, worker_ctx *w, batch *b, int k, json_t *v)
{
	if (!v)
		return mgt_err(MGT_ERR_INPUT, "key '%s' is missing", cfg->keys[k]);
	if (!json_is_string(v) && !(cfg->split && json_is_array(v)))
		return mgt_err(MGT_ERR_INPUT, "key '%s': expected a string%s, got %s", cfg->keys[k],
			       cfg->split ? " or a list of strings" : "", json_type_name(v));
	if (cfg->split)
		return do_sentences(cfg, w, b, k, v);
	size_t before = b->ids[k].n;
	mgt_status st = encode(cfg, w, b, k, json_string_value(v), json_string_length(v));
	if (!st && cfg->append_eod && b->ids[k].n > before)
		st = mgt_ids_push(&b->ids[k], mgt_tok_eod(cfg->tok));
	return st ? st : mgt_ids_push(&b->doc_len[k], (int32_t)(b->ids[k].n - before));
}

/* Parse and tokenize one line into the batch's per-key results. */
static mgt_status do_line(const config *cfg, worker_ctx *w, batch *b, const char *s, size_t n)
{
	json_error_t je;
	json_t *j = json_loadb(s, n, JSON_ALLOW_NUL, &je);
	if (!j && strstr(je.text, "unable to decode byte"))
		return mgt_err(MGT_ERR_INPUT, "invalid UTF-8 at column %d: %s", je.column, je.text);
	if (!j)
		return mgt_err(MGT_ERR_INPUT, "invalid JSON at column %d: %s", je.column, je.text);
	mgt_status st = MGT_OK;
	if (!json_is_object(j))
		st = mgt_err(MGT_ERR_INPUT, "expected a JSON object, got %s", json_type_name(j));
	for (int k = 0; k < cfg->n_keys && !st; k++)
		st = do_value(cfg, w, b, k, json_object_get(j, cfg->keys[k]));
	json_decref(j);
	return st;
}

static void work_batch(const config *cfg, worker_ctx *w, batch *b)
{
	for (int k = 0; k < cfg->n_keys; k++)
		b->ids[k].n = b->doc_len[k].n = b->sent_len[k].n = 0;
	b->skipped = b->blank = 0;
	for (size_t i = 0; i < b->n_lines && !b->st; i++) {
		size_t off = b->line_off[i], end = i + 1 < b->n_lines ? b->line_off[i + 1] : b->text.n;
		const char *s = b->text.p + off;
		size_t n = end - off - 1;
		if (blank(s, n)) {
			b->blank++;
			continue;
		}
		size_t keep[MAX_KEYS], keep_len[MAX_KEYS], keep_sent[MAX_KEYS];
		for (int k = 0; k < cfg->n_keys; k++)
			keep[k] = b->ids[k].n, keep_len[k] = b->doc_len[k].n, keep_sent[k] = b->sent_len[k].n;
		mgt_status st = do_line(cfg, w, b, s, n);
		if (st && cfg->skip_bad && st == MGT_ERR_INPUT) {
			for (int k = 0; k < cfg->n_keys; k++)
				b->ids[k].n = keep[k], b->doc_len[k].n = keep_len[k], b->sent_len[k].n = keep_sent[k];
			if (b->skipped++ == 0 && !cfg->quiet)
				fprintf(cfg->log, "%s: warning: %s:%llu: %s (skipped)\n", cfg->prog, cfg->inputs[b->file],
					(unsigned long long)(b->first_line + i), mgt_err_msg());
		} else if (st) {
			b->st = st;
			snprintf(b->msg, sizeof b->msg, "%s:%llu: %s", cfg->inputs[b->file],
				 (unsigned long long)(b->first_line + i), mgt_err_msg());
		}
	}
}

static void *worker_main(void *arg)
{
	pipeline *p = arg;
	worker_ctx w = {0};
	mgt_status st = mgt_tok_enc_new(&w.enc, p->cfg->tok);
	if (!st && p->cfg->split)
		st = mgt_tok_sent_new(&w.splitter, p->cfg->lang, p->cfg->keep_newlines);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		batch *b = NULL;
		for (uint64_t s = p->next_write; s < p->next_fill && !b; s++)
			if (p->slots[s % p->n_slots].state == SLOT_FILLED)
				b = &p->slots[s % p->n_slots];
		if (p->abort)
			break;
		if (!b) {
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		b->state = SLOT_WORKING;
		pthread_mutex_unlock(&p->mu);
		if (st && !b->eof) {
			b->st = st;
			snprintf(b->msg, sizeof b->msg, "%s", mgt_err_msg());
		} else if (!b->eof)
			work_batch(p->cfg, &w, b);
		pthread_mutex_lock(&p->mu);
		b->state = SLOT_DONE;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	mgt_tok_enc_free(w.enc);
	mgt_tok_sent_free(w.splitter);
	free(w.spans.v);
	return NULL;
}

/* ---- writer and progress ------------------------------------------------------------------ */

typedef struct {
	mgt_idx_writer *w[MAX_KEYS];
	uint64_t docs, tokens, skipped, blank, lines, unk;
	int32_t unk_id;             /* the tokenizer's unknown token, or -1 */
	double t0, last_log;
	uint64_t last_logged_docs;
	int tty;
} writer_state;

static void fmt_eta(char *buf, size_t n, double sec)
{
	if (sec < 0 || sec > 1e7)
		snprintf(buf, n, "--:--");
	else
		snprintf(buf, n, "%d:%02d:%02d", (int)sec / 3600, (int)sec / 60 % 60, (int)sec % 60);
}

static void progress(pipeline *p, writer_state *ws, int final)
{
	const config *cfg = p->cfg;
	double now = mgt_now(), dt = now - ws->t0;
	if (cfg->quiet || (!final && now - ws->last_log < (ws->tty ? 0.25 : 1.0)))
		return;
	if (!ws->tty && !final && ws->docs / (uint64_t)cfg->log_interval == ws->last_logged_docs / (uint64_t)cfg->log_interval)
		return;
	uint64_t in = __atomic_load_n(&p->bytes_in, __ATOMIC_RELAXED), out = __atomic_load_n(&p->bytes_out, __ATOMIC_RELAXED);
	double mbs = dt > 0 ? out / dt / 1e6 : 0, tps = dt > 0 ? ws->tokens / dt : 0;
	char docs[32], eta[32] = "";
	if (p->total_size > 0 && in > 0 && !final) {
		char e[16];
		fmt_eta(e, sizeof e, dt * ((double)p->total_size / in - 1));
		snprintf(eta, sizeof eta, ", %.0f%%, ETA %s", 100.0 * in / p->total_size, e);
	}
	fprintf(cfg->log, "%s%s documents, %.1f MB/s, %.2f M tokens/s%s%s", ws->tty ? "\r" : "",
		mgt_fmt_count(docs, ws->docs), mbs, tps / 1e6, eta, ws->tty ? "\033[K" : "\n");
	if (ws->tty && final)
		fputc('\n', cfg->log);
	ws->last_log = now;
	ws->last_logged_docs = ws->docs;
}

static mgt_status write_batch(const config *cfg, writer_state *ws, batch *b)
{
	for (int k = 0; k < cfg->n_keys; k++) {
		const int32_t *ids = b->ids[k].v, *lens = b->sent_len[k].v;
		for (size_t d = 0; d < b->doc_len[k].n; d++) {
			size_t n = (size_t)b->doc_len[k].v[d], tokens = n;
			if (cfg->split)
				for (size_t i = tokens = 0; i < n; i++)
					tokens += (size_t)lens[i];
			mgt_status st = cfg->split ? mgt_idx_writer_add_sequences(ws->w[k], ids, lens, n)
						   : mgt_idx_writer_add_document(ws->w[k], ids, n);
			if (st)
				return st;
			for (size_t i = 0; ws->unk_id >= 0 && i < tokens; i++)
				ws->unk += ids[i] == ws->unk_id;
			ids += tokens;
			lens += cfg->split ? n : 0;
			ws->tokens += tokens;
		}
	}
	ws->docs += cfg->n_keys ? b->doc_len[0].n : 0;
	ws->skipped += b->skipped;
	ws->blank += b->blank;
	ws->lines += b->n_lines;
	return MGT_OK;
}

/* Consume batches in order until the reader's last one. */
static mgt_status drain(pipeline *p, writer_state *ws)
{
	mgt_status st = MGT_OK;
	for (int eof = 0; !eof && !st;) {
		pthread_mutex_lock(&p->mu);
		batch *b = slot_wait(p, p->next_write, SLOT_DONE);
		pthread_mutex_unlock(&p->mu);
		if (!b)
			return MGT_ERR_INTR;
		eof = b->eof;
		if (b->st)
			st = mgt_err(b->st, "%s", b->msg);
		else
			st = write_batch(p->cfg, ws, b);
		pthread_mutex_lock(&p->mu);
		b->state = SLOT_EMPTY;
		p->next_write++;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		progress(p, ws, 0);
	}
	return st;
}

static void stop_threads(pipeline *p, pthread_t *th, int n)
{
	pthread_mutex_lock(&p->mu);
	p->abort = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

char *mgt_preprocess_output_name(const mgt_preprocess_config *cfg, int k)
{
	size_t n = strlen(cfg->output_prefix) + strlen(cfg->keys[k]) + 16;
	char *s = mgt_malloc(n);
	if (s)
		snprintf(s, n, "%s_%s_%s", cfg->output_prefix, cfg->keys[k], cfg->split ? "sentence" : "document");
	return s;
}

static mgt_status open_outputs(const config *cfg, writer_state *ws)
{
	mgt_dtype dt = mgt_dtype_optimal(mgt_tok_vocab_size(cfg->tok));
	mgt_status st = MGT_OK;
	for (int k = 0; k < cfg->n_keys && !st; k++) {
		char *name = mgt_preprocess_output_name(cfg, k);
		st = name ? mgt_idx_writer_open(&ws->w[k], name, dt, cfg->overwrite) : MGT_ERR_NOMEM;
		free(name);
	}
	return st;
}

mgt_status mgt_preprocess_run(const mgt_preprocess_config *cfg, mgt_preprocess_stats *out)
{
	writer_state ws = {.t0 = mgt_now(), .tty = isatty(fileno(cfg->log)), .unk_id = mgt_tok_special_id(cfg->tok, "unk")};
	pipeline p = {.cfg = cfg, .n_slots = 2 * (size_t)cfg->workers + 2, .total_size = 0};
	mgt_status st = open_outputs(cfg, &ws);
	for (size_t i = 0; i < cfg->n_inputs; i++) { /* for the ETA; stdin and pipes have no size */
		struct stat sb;
		int known = strcmp(cfg->inputs[i], "-") && stat(cfg->inputs[i], &sb) == 0 && S_ISREG(sb.st_mode);
		p.total_size = !known || p.total_size < 0 ? -1 : p.total_size + (int64_t)sb.st_size;
	}
	p.slots = calloc(p.n_slots, sizeof *p.slots);
	if (!st && !p.slots)
		st = mgt_err(MGT_ERR_NOMEM, "out of memory");
	pthread_t th[257];
	int nth = 0;
	if (!st) {
		pthread_mutex_init(&p.mu, NULL);
		pthread_cond_init(&p.cv, NULL);
		int workers = 0;
		if (pthread_create(&th[nth], NULL, reader_main, &p) == 0)
			nth++;
		for (int i = 0; nth && i < cfg->workers; i++)
			if (pthread_create(&th[nth], NULL, worker_main, &p) == 0)
				nth++, workers++;
		st = workers ? drain(&p, &ws) : mgt_err(MGT_ERR_NOMEM, "cannot start threads");
		stop_threads(&p, th, nth);
	}
	for (int k = 0; k < cfg->n_keys; k++) {
		mgt_status fs = st ? MGT_OK : mgt_idx_writer_finish(ws.w[k]);
		if (st)
			mgt_idx_writer_abort(ws.w[k]);
		st = st ? st : fs;
	}
	if (!st && !cfg->quiet && ws.tty)
		progress(&p, &ws, 1); /* the last progress line, ended */
	*out = (mgt_preprocess_stats){.documents = ws.docs, .tokens = ws.tokens, .skipped = ws.skipped,
				      .blank = ws.blank, .lines = ws.lines, .unk = ws.unk, .bytes_out = p.bytes_out,
				      .seconds = mgt_now() - ws.t0};
	for (size_t i = 0; p.slots && i < p.n_slots; i++) {
		batch *b = &p.slots[i];
		free(b->text.p), free(b->line_off);
		for (int k = 0; k < MAX_KEYS; k++)
			free(b->ids[k].v), free(b->doc_len[k].v), free(b->sent_len[k].v);
	}
	free(p.slots);
	return st;
}

