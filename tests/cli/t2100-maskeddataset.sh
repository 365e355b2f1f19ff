#!/bin/sh
# Megatron's BERT and T5 masked datasets (lib/data/masked*.c, mgt-dataset samples): the sample
# index rows, the cache files (Megatron's names, description and .npy) and every array of the
# samples equal an independent numpy reference written from megatron/core/datasets/masked_dataset.py
# (masked_ref.py), for BERT with and without the binary head and T5, at two seeds; property
# checks (loss mask within the masking budget, one sentinel per span, labels ending in eos);
# clear errors where Megatron crashes or loops.
#
# Data: a hand-made sentence-level set (empty, one-sentence and >512-token-sentence documents,
# [PAD] [CLS] [SEP] inside sentences, "##" pieces after [SEP]) over the BERT vocab and over a
# 16-token vocab (random replacements draw [PAD] often), and KJV chapters split into sentences
# with ids from a greedy WordPiece over /work/shared/data/bert/vocab.txt (or share/mgt's copy).
# Quick tier: every sample of the hand-made sets at two seeds and 40 KJV samples per case at one
# seed. Full tier (MGT_TEST_FULL=1): 200 KJV samples per split and case at two seeds, 4000
# train samples.
. "$(dirname "$0")/dataset-lib.sh"
ROOT=$(cd "$here/../.." && pwd)
D=$BIN/mgt-dataset
REF=$here/masked_ref.py
full() { [ -n "${MGT_TEST_FULL:-}" ]; }
VOCAB=${MGT_BERT_VOCAB:-/work/shared/data/bert/vocab.txt}
[ -r "$VOCAB" ] || VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
if [ ! -r "$VOCAB" ]; then echo "1..0 # SKIP no BERT vocab.txt (MGT_BERT_VOCAB)"; exit 0; fi

# same DESC PREFIX ARGS...: C and the reference print the same lines; the reference finds the
# cache files under Megatron's names with its description and rows.
same() {
	d=$1 p=$2; shift 2
	rm -rf cache
	if ! "$D" samples "$p" --data-cache-path cache "$@" >c.txt 2>c.err; then
		nok "$d (mgt-dataset failed: $(head -c 300 c.err))"
	elif ! $PY "$REF" "$p" --check-cache cache "$@" >ref.txt 2>ref.err; then
		nok "$d (reference: $(tail -c 300 ref.err))"
	elif ! cmp -s c.txt ref.txt; then
		nok "$d (differ: $(diff c.txt ref.txt | head -c 400))"
	else
		ok "$d: $(grep -c '"idx"' c.txt) samples, $(grep -c '"row"' c.txt) rows"
	fi
}

# The hand-made set: 9 documents over ids of the BERT vocab (0 [PAD], 101 [CLS], 102 [SEP],
# 2015 "##s", 2121 "##ed"); sentences separated by '|'.
$PY - <<'EOF' >tiny.txt
import random
random.seed(5)
words = [1996, 2154, 2032, 3021, 2000, 1037, 2047, 3899]
pieces = [2015, 2121, 2075]
def sent(n):
    return " ".join(str(random.choice(words + pieces + [0, 101, 102] if random.random() < 0.3 else words))
                    for _ in range(n))
docs = [
    [sent(8), sent(5), "2015 2121 " + sent(6), sent(9)],   # starts with ## pieces
    [],                                                   # empty document
    [sent(12)],                                           # one sentence
    [sent(4), sent(600), sent(3)],                        # a long sentence: skipped
    [sent(700)],                                          # one long sentence: used (no head)
    [sent(3), "0 0 101 102 " + sent(4), sent(20), sent(2), sent(30), sent(7)],
    [sent(2)] * 12,
    [sent(40), sent(50), sent(60)],
    [sent(random.randint(1, 25)) for _ in range(30)],
]
for d in docs:
    print("|".join(d))
EOF
$PY "$WRITER" write tiny uint16 <tiny.txt
check "hand-made sentence-level dataset" test -s tiny.idx

for seed in 1234 7; do
	same "BERT, binary head, seq 32, seed $seed" tiny --dataset-type bert --vocab-file "$VOCAB" \
		--seq-length 32 --split 1,0,0 --num-samples 60 --seed $seed --index --samples 0:
	same "BERT, no binary head, seq 24, short-seq-prob 0.5, seed $seed" tiny --dataset-type bert \
		--vocab-file "$VOCAB" --seq-length 24 --short-seq-prob 0.5 --bert-no-binary-head --split 1,0,0 \
		--num-samples 40 --seed $seed --index --samples 0:
	same "T5, encoder 48, decoder 48, seed $seed" tiny --dataset-type t5 --vocab-file "$VOCAB" \
		--encoder-seq-length 48 --decoder-seq-length 48 --split 1,0,0 --num-samples 50 --seed $seed \
		--index --samples 0:
done
same "BERT, one epoch, split 6,2,1 (three splits), mask-prob 0.3" tiny --dataset-type bert \
	--vocab-file "$VOCAB" --seq-length 64 --mask-prob 0.3 --split 6,2,1 --index --samples 0:
same "T5, seq 1024 (the 700-token sentence), short-seq-prob 0" tiny --dataset-type t5 --vocab-file "$VOCAB" \
	--encoder-seq-length 1024 --decoder-seq-length 256 --short-seq-prob 0 --split 1,0,0 --num-samples 3 \
	--index --samples 0:

# A 16-token vocabulary: random replacements draw [PAD] (id 0) one time in 16.
printf '[PAD]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nd\n##x\n##y\ne\nf\ng\n##z\nh\ni\n' >small.txt
$PY - <<'EOF' | $PY "$WRITER" write small uint16
import random
random.seed(9)
for _ in range(40):
    print("|".join(" ".join(str(random.choice(range(16)) if random.random() < 0.2 else random.choice([4, 5, 6, 7, 8, 9, 10, 13]))
                            for _ in range(random.randint(1, 14))) for _ in range(random.randint(1, 6))))
EOF
for seed in 3 99; do
	same "16-token vocab, BERT seq 20 mask-prob 0.5 (replacements drawing [PAD]), seed $seed" small \
		--dataset-type bert --vocab-file small.txt --seq-length 20 --mask-prob 0.5 --split 9,1 \
		--num-samples 300,30 --seed $seed --index --samples 0:
	same "16-token vocab, T5 (8 sentinels), seed $seed" small --dataset-type t5 --vocab-file small.txt \
		--vocab-extra-ids 8 --encoder-seq-length 24 --decoder-seq-length 40 --mask-prob 0.3 --split 9,1 \
		--num-samples 200,20 --seed $seed --index --samples 0:
done

# Properties over the last BERT and T5 outputs of the 16-token set.
"$D" samples small --dataset-type bert --vocab-file small.txt --seq-length 20 --mask-prob 0.5 --split 1 \
	--num-samples 300 --seed 3 --index --samples 0: >bert.txt 2>/dev/null
"$D" samples small --dataset-type t5 --vocab-file small.txt --vocab-extra-ids 8 --encoder-seq-length 24 \
	--decoder-seq-length 40 --mask-prob 0.3 --split 1 --num-samples 200 --seed 3 --index --samples 0: \
	>t5.txt 2>/dev/null
check "some BERT padding_mask holds 0 inside the text (a [PAD] there, or a replacement that drew it)" \
	grep -q '"padding_mask":\[[01,]*0,1' bert.txt
check "properties: sum(loss_mask) <= n_maskings, near it; #sentinels = #spans; labels end in eos" \
	$PY - bert.txt t5.txt <<'EOF'
import json, sys
def lines(p):
    rows, smp = {}, []
    for l in open(p):
        o = json.loads(l)
        if "row" in o: rows[o["row"]] = o["index"]
        if "idx" in o: smp.append(o)
    return rows, smp
rows, smp = lines(sys.argv[1])
near = 0
for o in smp:
    n = len(o["text"]) - o["text"][::-1].index(2)          # through the last [SEP]
    tgt = rows[o["idx"]][2]
    budget = min(0.5 * tgt, max(1, int(round(n * 0.5))))
    m = sum(o["loss_mask"])
    assert m <= budget, (o["idx"], m, budget)
    near += m >= budget - 3
assert near >= 0.9 * len(smp) and len(smp) >= 300, near
rows, smp = lines(sys.argv[2])
spans = 0
for o in smp:
    k = sum(1 for t in o["text_enc"] if t >= 16)
    assert k == sum(1 for t in o["labels"] if t >= 16) == sum(1 for t in o["text_dec"] if t >= 16), o["idx"]
    assert [t for t in o["labels"] if t >= 16] == list(range(16, 16 + k))
    L = sum(o["loss_mask"])
    assert o["labels"][L - 1] == 2 and o["text_dec"][0] == 1 and o["labels"][:L - 1] == o["text_dec"][1:L]
    spans += k
assert spans > 100, spans
EOF

# KJV chapters split into sentences, ids from a greedy longest-match WordPiece over the vocab.
if command -v zstd >/dev/null 2>&1; then
	cat >kjv.py <<'EOF'
import json, re, sys
vocab = {t: i for i, t in enumerate(open(sys.argv[1], encoding="utf-8").read().split("\n"))}
def wordpiece(w):
    out, i = [], 0
    while i < len(w):
        j = len(w)
        while j > i and (w[i:j] if i == 0 else "##" + w[i:j]) not in vocab:
            j -= 1
        if j == i:
            return [vocab["[UNK]"]]
        out.append(vocab[w[i:j] if i == 0 else "##" + w[i:j]])
        i = j
    return out
for line in sys.stdin:
    text = json.loads(line)["text"].lower()
    sents = [s for s in re.split(r"(?<=[.?!;:])\s+", text) if s.strip()]
    ids = [[t for w in re.findall(r"\w+|[^\w\s]", s) for t in wordpiece(w)] for s in sents]
    print("|".join(" ".join(map(str, s)) for s in ids if s))
EOF
	zstd -dc "$ROOT/share/mgt/data/kjv.jsonl.zst" | $PY kjv.py "$VOCAB" | $PY "$WRITER" write kjv uint16
fi
if [ -s kjv.idx ]; then
	ok "KJV sentence-level dataset ($($PY "$READER" --info kjv | $PY -c 'import json,sys; o=json.load(sys.stdin); print(o["documents"], "documents,", o["sequences"], "sentences")'))"
	if full; then seeds="1234 5"; nk=200; ns=4000,400,40; else seeds=1234; nk=40; ns=400,40,4; fi
	for seed in $seeds; do
		same "KJV BERT seq 128, binary head, seed $seed" kjv --dataset-type bert --vocab-file "$VOCAB" \
			--seq-length 128 --split 969,30,1 --num-samples $ns --seed $seed --index --samples 0:$nk
		same "KJV BERT seq 128, no binary head, seed $seed" kjv --dataset-type bert --vocab-file "$VOCAB" \
			--seq-length 128 --bert-no-binary-head --split 969,30,1 --num-samples $ns --seed $seed \
			--index --samples 0:$nk
		same "KJV T5 encoder 128 decoder 128, seed $seed" kjv --dataset-type t5 --vocab-file "$VOCAB" \
			--encoder-seq-length 128 --decoder-seq-length 128 --split 969,30,1 --num-samples $ns \
			--seed $seed --index --samples 0:$nk
	done
	check "KJV's ids include ## pieces (whole-word masking has words of several pieces)" sh -c \
		"$PY '$READER' kjv | $PY -c 'import sys; v=open(sys.argv[1], encoding=\"utf-8\").read().split(chr(10)); sys.exit(not any(v[int(t)].startswith(\"##\") for l in sys.stdin for t in l.split()))' '$VOCAB'"
else
	skip "KJV comparisons (no zstd to read share/mgt/data/kjv.jsonl.zst)"
fi

# The default cache directory, its reuse, and a damaged file rebuilt.
rm -rf tiny/cache
"$D" samples tiny --dataset-type t5 --vocab-file "$VOCAB" --encoder-seq-length 48 --decoder-seq-length 48 \
	--split 1,0,0 --num-samples 50 --index >c1.txt 2>/dev/null
check "default cache PREFIX/cache/T5MaskedWordPieceDataset_indices: description and sample_index" \
	test "$(ls tiny/cache/T5MaskedWordPieceDataset_indices | grep -c -e '-T5MaskedWordPieceDataset-description.txt$' -e '-T5MaskedWordPieceDataset-sample_index.npy$')" = 2
npy=$(ls tiny/cache/T5MaskedWordPieceDataset_indices/*-sample_index.npy)
before=$(stat -c %i "$npy")
"$D" samples tiny --dataset-type t5 --vocab-file "$VOCAB" --encoder-seq-length 48 --decoder-seq-length 48 \
	--split 1,0,0 --num-samples 50 --index >c2.txt 2>/dev/null
check "second run loads the cache (file untouched, same rows)" sh -c "test $before = \$(stat -c %i '$npy') && cmp c1.txt c2.txt"
head -c 140 "$npy" >x && cat x >"$npy"
"$D" samples tiny --dataset-type t5 --vocab-file "$VOCAB" --encoder-seq-length 48 --decoder-seq-length 48 \
	--split 1,0,0 --num-samples 50 --index >c3.txt 2>/dev/null
check "a truncated sample_index.npy is rebuilt (same rows)" cmp c1.txt c3.txt

# Errors.
expect_fail "a split with weight but no documents (exit 3)" 3 "valid split: its share of the 9 documents rounds to none" \
	"$D" samples tiny --dataset-type bert --vocab-file "$VOCAB" --seq-length 32 --split 969,30,1 --num-samples 5,5,5
printf '5 6 7\n8 9\n10 11 12\n' | $PY "$WRITER" write docs uint16
expect_fail "document-level data with the binary head (exit 3, names the flags)" 3 "--bert-no-binary-head" \
	"$D" samples docs --dataset-type bert --vocab-file "$VOCAB" --seq-length 16 --split 1 --num-samples 10
check "(and --split-sentences)" grep -q -- "--split-sentences" err.txt
same "document-level data without the binary head" docs --dataset-type bert --vocab-file "$VOCAB" \
	--seq-length 16 --split 1 --num-samples 10 --bert-no-binary-head --index --samples 0:
expect_fail "T5 decoder input longer than --decoder-seq-length (exit 3)" 3 "raise --decoder-seq-length" \
	"$D" samples tiny --dataset-type t5 --vocab-file "$VOCAB" --encoder-seq-length 48 --decoder-seq-length 4 \
	--split 1 --num-samples 50 --samples 0:50
expect_fail "T5 with more spans than sentinels (exit 3; Megatron's IndexError past 100)" 3 "sentinel tokens" \
	"$D" samples tiny --dataset-type t5 --vocab-file "$VOCAB" --vocab-extra-ids 1 --encoder-seq-length 48 \
	--decoder-seq-length 48 --split 1 --num-samples 50 --samples 0:50
grep -v MASK small.txt >nomask.txt
expect_fail "a vocabulary without [MASK] (exit 4)" 4 "no [MASK] token" \
	"$D" samples small --dataset-type bert --vocab-file nomask.txt --seq-length 20 --split 1
expect_fail "seed 0 (exit 2)" 2 "--seed 0" "$D" samples tiny --dataset-type bert --vocab-file "$VOCAB" --seed 0
expect_fail "no --dataset-type (exit 2)" 2 "--dataset-type bert, t5 or sft" "$D" samples tiny --vocab-file "$VOCAB"
expect_fail "--mask-prob 1 (exit 2)" 2 "--mask-prob 1" \
	"$D" samples tiny --dataset-type bert --vocab-file "$VOCAB" --mask-prob 1
echo "1..$n"
