/* tests/unit/test_packed.c: GPT with packed documents (mgt_model_layout.packed_sequences,
 * --reset-attention-mask: gpt_dataset.py _get_ltor_masks_and_position_ids, attention cut after
 * every eod, positions restarting with --reset-position-ids: the learned embedding's, while
 * RoPE keeps the row's positions as Megatron's rotary embedding does) on the CPU in fp32, learned
 * and rotary positions:
 *   - mgt_gpt_doc_starts against the starts written out by hand;
 *   - every token's loss in a packed row equals the loss of the same token when its document is
 *     alone in a row of its own (the independent reference: the plain causal model, one document
 *     a row, padding after it with no loss; RoPE's scores depend on relative positions only, so
 *     its row positions give the same losses to rounding);
 *   - changing one document's tokens leaves every other document's per-token losses bit for bit;
 *   - the backward against central finite differences of the packed forward's loss. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "data/data.h"
#include "model/model.h"

enum { S = 16, B = 2, T = S * B, V = 50, EOD = 49 };

static mgt_model_config config(bool rope)
{
	mgt_model_config c;
	memset(&c, 0, sizeof c);
	c.num_layers = 2;
	c.hidden_size = 32;
	c.num_attention_heads = 4;
	c.seq_length = S;
	c.max_position_embeddings = S;
	snprintf(c.position_embedding_type, sizeof c.position_embedding_type, rope ? "rope" : "learned_absolute");
	snprintf(c.normalization, sizeof c.normalization, rope ? "RMSNorm" : "LayerNorm");
	c.rotary_base = 10000;
	c.rotary_percent = 1.0;
	c.norm_epsilon = 1e-5;
	c.swiglu = rope;
	c.add_bias_linear = !rope;
	c.make_vocab_size_divisible_by = 8;
	c.init_method_std = 0.2;
	c.vocab_size = V;
	return c;
}

/* Documents of each row (lengths summing to S, each ending in EOD but the row's last). */
static const int docs[B][4] = { { 6, 10, 0, 0 }, { 3, 7, 6, 0 } };

typedef struct {
	int32_t tokens[T], labels[T], pos[T], seg[T], rpos[T];
	float mask[T];
} batch;

/* Row j's text: document k's tokens 1 + (7 i + 5 k + 3 j) % 47 (+ salt in document salt_doc of
 * row 1), EOD closing each but the
 * last; labels the next token (the last label of the row 0 with no loss); positions restart after
 * each EOD; starts from mgt_gpt_doc_starts. */
static void packed_batch(batch *bt, int salt_doc, int salt)
{
	int32_t row[S + 1], st[S];
	for (int j = 0; j < B; j++) {
		int i = 0;
		for (int k = 0; docs[j][k]; k++) {
			const int n = docs[j][k], last = !docs[j][k + 1];
			for (int x = 0; x < n; x++, i++)
				row[i] = x == n - 1 && !last ? EOD
					 : 1 + (7 * x + 5 * k + 3 * j + (j == 1 && k == salt_doc ? salt : 0)) % 47;
		}
		row[S] = 0;
		mgt_gpt_doc_starts(row, S, EOD, st);
		for (int q = 0; q < S; q++) {
			const int t = q * B + j;
			bt->tokens[t] = row[q];
			bt->labels[t] = row[q + 1];
			bt->mask[t] = q < S - 1;
			bt->pos[t] = q - st[q];
			bt->rpos[t] = q;
			bt->seg[t] = st[q];
		}
	}
}

/* Document k of row j of bt alone in row 0 of sb (row 1 its copy), padded with 0 after it
 * (labels 0, no loss), positions from 0; one document a row (starts 0).  *at: its offset in bt. */
static void alone_batch(const batch *bt, int j, int k, batch *sb, int *at)
{
	int off = 0;
	for (int x = 0; x < k; x++)
		off += docs[j][x];
	const int n = docs[j][k];
	memset(sb, 0, sizeof *sb);
	for (int q = 0; q < S; q++)
		for (int jj = 0; jj < B; jj++) {
			const int t = q * B + jj, src = (off + q) * B + j;
			sb->tokens[t] = q < n ? bt->tokens[src] : 0;
			sb->labels[t] = q < n ? bt->labels[src] : 0;
			sb->mask[t] = q < n ? bt->mask[src] : 0;
			sb->pos[t] = q;
		}
	*at = off;
}

static mgt_model *make(bool rope, bool packed, mgt_backend *be, mgt_parallel *ps)
{
	mgt_model_config c = config(rope);
	mgt_model_layout L;
	memset(&L, 0, sizeof L);
	L.mbs = B, L.num_stages = 1, L.slots = 1, L.dp = 1, L.packed_sequences = packed;
	mgt_model *m = NULL;
	mgt_status st = mgt_model_config_finalize(&c, 1);
	if (!st) st = mgt_model_create(&m, &c, &L, be, ps);
	if (!st) st = mgt_model_init_params(m, 4321);
	CHECK(!st, "tiny GPT (%s, packed %d): %s", rope ? "rope" : "learned", packed, st ? mgt_err_msg() : "created");
	return st ? NULL : m;
}

/* Forward of bt (packed: seg_start, and RoPE at the row's positions as Megatron's rotary
 * embedding under --reset-position-ids); per-token losses into lt; the loss sum. */
static double run(mgt_model *m, const batch *bt, bool packed, float *lt)
{
	mgt_microbatch mb = { .tokens = bt->tokens, .labels = bt->labels, .position_ids = bt->pos,
			      .loss_mask = bt->mask, .seg_start = packed ? bt->seg : NULL,
			      .rope_position_ids = packed ? bt->rpos : NULL };
	double l = NAN;
	if (mgt_model_forward(m, 0, &mb, true, &l) || (lt && mgt_model_outputs(m, 0, NULL, lt))) return NAN;
	return l;
}

static void test_starts(void)
{
	const int32_t tok[8] = { 5, EOD, 7, 8, EOD, EOD, 3, 4 }, want[8] = { 0, 0, 2, 2, 2, 5, 6, 6 };
	int32_t got[8];
	mgt_gpt_doc_starts(tok, 8, EOD, got);
	CHECK(!memcmp(got, want, sizeof got), "document starts after each eod (consecutive eods: a one-token document)");
}

static void test_model(bool rope)
{
	mgt_backend *be = mgt_backend_cpu_create(1);
	mgt_parallel ps;
	mgt_parallel_init_single(&ps);
	mgt_model *mp = make(rope, true, be, &ps), *mc = make(rope, false, be, &ps);
	if (!mp || !mc) goto out;
	batch bt, sb;
	packed_batch(&bt, -1, 0);
	float lp[T], la[T];
	run(mp, &bt, true, lp);
	double worst = 0;
	int n = 0;
	for (int j = 0; j < B; j++)
		for (int k = 0; docs[j][k]; k++) {
			int off;
			alone_batch(&bt, j, k, &sb, &off);
			run(mc, &sb, false, la);
			for (int q = 0; q < docs[j][k]; q++, n++)
				if (bt.mask[(off + q) * B + j] > 0)
					worst = fmax(worst, fabs(lp[(off + q) * B + j] - la[q * B]) / fabs(la[q * B]));
		}
	CHECK(n == T && worst < 2e-6, "%s: every packed token's loss = its document alone in a row (%d tokens, worst "
	      "relative difference %.2e)", rope ? "rope" : "learned", n, worst);

	if (rope) { /* RoPE reads rope_position_ids: the restarted positions instead give other bits */
		batch rs = bt;
		float lr[T];
		memcpy(rs.rpos, rs.pos, sizeof rs.pos);
		run(mp, &rs, true, lr);
		double far = 0;
		for (int t = 0; t < T; t++)
			far = fmax(far, fabs(lr[t] - lp[t]) / fabs(lp[t]));
		CHECK(memcmp(lr, lp, sizeof lr) && far < 2e-6, "rope: RoPE at the row's positions (Megatron's) or at the "
		      "restarted ones: other bits, the same losses to %.2e", far);
	}
	/* document 1 of row 1 changed (not its closing EOD): the other documents' losses keep their
	 * bits, but for the EOD before it, whose label is the document's first token */
	batch other;
	float lo[T];
	packed_batch(&other, 1, 11);
	run(mp, &other, true, lo);
	int moved = 0, inside = 0;
	for (int q = 0; q < S; q++)
		for (int j = 0; j < B; j++) {
			const int mine = j == 1 && q >= docs[1][0] - 1 && q < docs[1][0] + docs[1][1];
			const int same = !memcmp(&lp[q * B + j], &lo[q * B + j], 4);
			moved += !mine && !same;
			inside += mine && !same;
		}
	CHECK(moved == 0 && inside > 0, "%s: one document's tokens changed: %d of its losses move, %d of the others' "
	      "(bit for bit)", rope ? "rope" : "learned", inside, moved);

	/* the backward against central differences of the packed loss */
	run(mp, &bt, true, NULL);
	mgt_status st = mgt_model_backward(mp, 0, true, 1.0f);
	CHECK(!st, "packed backward: %s", st ? mgt_err_msg() : "ok");
	const mgt_tensor_table *tt = mgt_model_tensors(mp);
	float *p = mgt_model_params(mp), *g = mgt_model_grads(mp);
	int checked = 0, bad = 0;
	for (int x = 0; x < tt->n; x++) {
		const mgt_tensor *w = &tt->t[x];
		if (!strstr(w->name, "linear_qkv.weight") && !strstr(w->name, "word_embeddings")) continue;
		for (size_t e = 0; e < w->numel; e += w->numel / 9 + 1) {
			const size_t i = w->offset + e;
			const float keep = p[i], eps = 1e-2f;
			p[i] = keep + eps;
			mgt_model_params(mp);
			const double up = run(mp, &bt, true, NULL);
			p[i] = keep - eps;
			mgt_model_params(mp);
			const double dn = run(mp, &bt, true, NULL);
			p[i] = keep;
			mgt_model_params(mp);
			const double fd = (up - dn) / (2.0 * eps), an = g[i];
			if (fabs(fd) < 1e-3 && fabs(an) < 1e-3) continue;
			checked++;
			bad += fabs(fd - an) > 0.05 * fmax(fabs(fd), fabs(an));
		}
	}
	CHECK(checked >= 5 && !bad, "%s: packed gradients = central differences (%d entries, %d off by > 5%%)",
	      rope ? "rope" : "learned", checked, bad);
out:
	mgt_model_free(mp);
	mgt_model_free(mc);
	mgt_parallel_free(&ps);
	mgt_backend_destroy(be);
}

int main(void)
{
	test_starts();
	test_model(false);
	test_model(true);
	return check_finish();
}
