/* Fuzz target: the tokenizer's encode path (added-token split, NFC, regex pre-tokenizer, BPE).
 * The first byte picks the tokenizer (GPT-2 files, or the Qwen2-style tokenizer.json with NFC
 * and added tokens); the rest is the text. Valid UTF-8 must round-trip through decode (without
 * NFC), invalid UTF-8 must be refused with MGT_ERR_INPUT. Run from the repository root. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mgt_tok *load(int which)
{
	static mgt_tok *t[2];
	if (!t[which]) {
		mgt_tok_opts o = {.null_eod_id = -1};
		if (which == 0)
			o.type = "GPT2BPETokenizer", o.vocab_file = "share/mgt/tokenizers/gpt2/vocab.json",
			o.merge_file = "share/mgt/tokenizers/gpt2/merges.txt";
		else
			o.type = "HuggingFaceTokenizer", o.model = "tests/data/tokenizers/qwen2.json";
		if (mgt_tok_load(&t[which], &o))
			abort();
	}
	return t[which];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	int which = data[0] & 1;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	mgt_tok *t = load(which);
	mgt_tok_enc *e;
	if (mgt_tok_enc_new(&e, t))
		abort();
	mgt_ids ids = {0};
	mgt_buf out = {0};
	mgt_status st = mgt_tok_encode(e, s, n, &ids);
	int valid = mgt_tok_utf8_valid(s, n) == n;
	if (valid != (st == MGT_OK))
		abort();
	if (st == MGT_OK && which == 0 && (mgt_tok_decode(t, ids.v, ids.n, &out) || out.n != n || memcmp(out.p, s, n)))
		abort();
	free(ids.v);
	free(out.p);
	mgt_tok_enc_free(e);
	return 0;
}
