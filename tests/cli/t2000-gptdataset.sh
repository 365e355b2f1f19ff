#!/bin/sh
# GPTDataset sample order (lib/data/gpt*.c): the document/sample/shuffle indices the C code caches
# as .npy files and the samples it fetches equal an independent numpy implementation of
# megatron/core/datasets/gpt_dataset.py (gptdataset_ref.py) for several seeds, splits, sequence lengths,
# multi-epoch requests with and without a separate final epoch, weighted and unweighted blends and
# mock data; cache reuse, corruption and unwritable directories; clear errors on bad input.
. "$(dirname "$0")/dataset-lib.sh"
ROOT=$(cd "$here/../.." && pwd)
SHARE=$ROOT/share/mgt
REF=$here/gptdataset_ref.py
DUMP=${GPTDATASET_DUMP:-$ROOT/build/tests/test_gptdataset}   # e.g. an ASan build
if [ ! -x "$DUMP" ] || [ ! -x "$BIN/mgt-preprocess" ]; then
	make -C "$ROOT" -s bin/mgt-preprocess build/tests/test_gptdataset >/dev/null 2>&1 ||
		{ echo "1..0 # SKIP cannot build build/tests/test_gptdataset"; exit 0; }
fi

"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv --quiet --append-eod \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$SHARE/tokenizers/gpt2/vocab.json" \
	--merge-file "$SHARE/tokenizers/gpt2/merges.txt"
check "KJV dataset (GPT-2 BPE, eod 50256)" test -s kjv_text_document.bin
KJV=kjv_text_document
GPT2="eod=50256 vocab=50257"

# A synthetic int32 dataset: documents of 1-3 sequences, some eod ids inside.
$PY - <<'EOF' | $PY "$WRITER" write syn int32
import random
random.seed(11)
for _ in range(700):
    seqs = []
    for _ in range(random.randint(1, 3)):
        n = random.randint(1, 300)
        ids = [random.choice([50256] + [random.randrange(50000)] * 30) for _ in range(n)]
        seqs.append(" ".join(map(str, ids)))
    print("|".join(seqs))
EOF
check "synthetic int32 dataset" test -s syn.bin

# same DESC ARGS...: C and the reference print the same samples; the C .npy files equal the reference.
same() {
	d=$1; shift
	rm -rf cache
	if ! "$DUMP" --dump samples=40 "$@" cache=cache >c.txt 2>c.err; then
		nok "$d (C side failed: $(head -c 300 c.err))"
	elif ! $PY "$REF" samples=40 "$@" cache=cache >ref.txt 2>ref.err; then
		nok "$d (reference: $(head -c 300 ref.err))"
	elif ! cmp -s c.txt ref.txt; then
		nok "$d (samples differ: $(diff c.txt ref.txt | head -c 300))"
	else
		ok "$d"
	fi
}

same "969,30,1, S=64, seed 1234, one epoch each" data=$KJV split=969,30,1 seq=64 seed=1234 \
	train=1000 valid=100 test=10 $GPT2
same "8,1,1, S=257, seed 7, 2-4 epochs with a separate final epoch" data=$KJV split=8,1,1 seq=257 \
	seed=7 train=3300 valid=600 test=1000 $GPT2
check "(2 to 4 epochs, separate final epochs)" sh -c "grep -q '^index train 0 epochs 2 separate 1' c.txt &&
	grep -q '^index valid 0 epochs 2 separate 1' c.txt && grep -q '^index test 0 epochs 4 separate 1' c.txt"
same "1,0,0, S=1024, seed 42, 3 epochs without a separate final epoch" data=$KJV split=1,0,0 \
	seq=1024 seed=42 train=3000 $GPT2
check "(3 epochs, no separate final epoch)" grep -q '^index train 0 epochs 3 separate 0' c.txt
same "1,0,0, S=1024, seed 42, the last sample count with a separate final epoch" data=$KJV \
	split=1,0,0 seq=1024 seed=42 train=2900 $GPT2
check "(3 epochs, separate final epoch)" grep -q '^index train 0 epochs 3 separate 1' c.txt
same "no split given, S=100, seed 0, eod mask and position reset" data=$KJV seq=100 seed=0 \
	train=20000 eodmask=1 resetpos=1 $GPT2
same "valid keeps its partial last sample (padding)" data=$KJV split=99,1,0 seq=333 seed=5 \
	train=10 valid=7 keeppartial=1 $GPT2
check "one valid sample (of all, printed) is padded: loss mask 0 at its end" sh -c \
	"test \$(grep '^len valid' c.txt | cut -d' ' -f3) -le 40 &&
	 test \$(grep '^valid' c.txt | awk -F'|' '{n = split(\$4, a, \" \"); print a[n]}' | grep -c 0) -eq 1"
same "int32 multi-sequence documents, 8,1,1, S=50" data=syn split=8,1,1 seq=50 seed=99 train=4000 \
	valid=300 test=300 eod=50256 vocab=50257 eodmask=1
same "blend 0.3 KJV 0.7 synthetic (BlendedDataset cached too)" data="0.3 $KJV 0.7 syn" \
	split=969,30,1 seq=128 seed=1234 train=2000 valid=200 test=50 $GPT2
same "blend with one weighted prefix" data="2 syn" split=8,1,1 seq=64 seed=3 train=700 valid=70 \
	test=7 $GPT2
same "unweighted blend, exhaustive (no size)" data="$KJV syn" split=8,1,1 seq=32 seed=1 \
	train=none valid=none test=none $GPT2
same "unweighted blend capped at the size" data="syn $KJV" split=8,1,1 seq=512 seed=2 train=300 \
	valid=20 test=20 $GPT2
same "mock data, vocabulary 1000" mock=1 split=99,1,0 seq=2048 seed=1234 train=500 valid=50 \
	eod=999 vocab=1000
same "mock data, Megatron's ids (j + 1)" mock=1 split=1,0,0 seq=4096 seed=9 train=100 eod=50256 \
	vocab=50257

# Cache: the default directory, reuse, corruption, an unwritable directory.
rm -rf $KJV
"$DUMP" --dump data=$KJV split=8,1,1 seq=64 train=500 valid=50 test=50 $GPT2 >c.txt 2>c.err
check "default cache directory PREFIX/cache/GPTDataset_indices" \
	test "$(ls $KJV/cache/GPTDataset_indices | wc -l)" -eq 12
check "reference agrees with the files there" sh -c \
	"$PY '$REF' data=$KJV split=8,1,1 seq=64 train=500 valid=50 test=50 $GPT2 checkcache=1 >ref.txt && cmp c.txt ref.txt"
desc=$(ls $KJV/cache/GPTDataset_indices/*-GPTDataset-train-description.txt)
before=$(stat -c %i "$desc")
"$DUMP" --dump data=$KJV split=8,1,1 seq=64 train=500 valid=50 test=50 $GPT2 >c2.txt 2>c.err
check "second run reuses the cache" sh -c "test $before = $(stat -c %i "$desc") && cmp c.txt c2.txt"
for f in $KJV/cache/GPTDataset_indices/*-sample_index.npy; do head -c 150 "$f" >x && cat x >"$f"; done
"$DUMP" --dump data=$KJV split=8,1,1 seq=64 train=500 valid=50 test=50 $GPT2 >c3.txt 2>c.err
check "truncated cache files are rebuilt (same samples)" cmp c.txt c3.txt
check "and rewritten" sh -c \
	"$PY '$REF' data=$KJV split=8,1,1 seq=64 train=500 valid=50 test=50 $GPT2 checkcache=1 >/dev/null"
: >plain
"$DUMP" --dump data=$KJV split=8,1,1 seq=64 train=500 $GPT2 cache=plain/sub >c4.txt 2>c.err
check "unwritable cache directory: built in memory, a note" sh -c \
	"grep -q 'kept in memory' c.err && head -1 c4.txt | grep -q '^len train'"

# Bad input.
expect_fail "missing prefix (exit 1)" 1 "data prefix nope" "$DUMP" --dump data=nope seq=8 train=1
printf '1 2 3\n4 70000 6|7\n8\n' | $PY "$WRITER" write big int32
expect_fail "token id beyond the vocabulary (exit 3)" 3 \
	"big.bin: document 1 (sequence 1), token 1: id 70000 is beyond the vocabulary" \
	"$DUMP" --dump data=big seq=2 train=1 $GPT2
printf '1 2 3\n4 5\n6 7 8 9\n' | $PY "$WRITER" write tiny uint16
expect_fail "samples from an empty split (exit 3)" 3 "test split (sequences [3, 3) of 3)" \
	"$DUMP" --dump data=tiny split=969,30,1 seq=2 train=1 test=4 $GPT2
expect_fail "bad split (exit 2)" 2 "split '1,2,3,4'" "$DUMP" --dump data=tiny split=1,2,3,4 seq=2 $GPT2
expect_fail "weights without sizes (exit 2)" 2 "needs a sample count" \
	"$DUMP" --dump data="1 tiny 1 syn" seq=2 train=none $GPT2
echo "1..$n"
