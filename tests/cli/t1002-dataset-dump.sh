#!/bin/sh
# mgt-dataset dump: ids equal the independent reader's, document ranges, GPT-2 decoding (EOD
# stripping, invalid UTF-8 replaced as Python does), and preprocess -> dump reproducing the texts.
. "$(dirname "$0")/dataset-lib.sh"
GPT2=$here/../../share/mgt/tokenizers/gpt2
D="$BIN/mgt-dataset"
G="--tokenizer-type GPT2BPETokenizer --vocab-file $GPT2/vocab.json --merge-file $GPT2/merges.txt"
# same_texts DESC A.jsonl B.jsonl KEY: the KEY strings of the two JSONL files are equal, line by line
same_texts() {
	if $PY - "$2" "$3" "$4" <<'EOF'
import json, sys
a = [json.loads(l)[sys.argv[3]] for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l)[sys.argv[3]] for l in open(sys.argv[2], encoding="utf-8")]
if a != b:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            print(f"line {i + 1}: {x!r} != {y!r}", file=sys.stderr); break
    print(f"{len(a)} vs {len(b)} lines", file=sys.stderr)
sys.exit(a != b)
EOF
	then ok "$1"; else nok "$1"; fi
}

$PY - <<'EOF'
import random
random.seed(11)
with open("r.txt", "w") as f:
    for _ in range(500):
        if random.random() < 0.05:
            f.write("\n"); continue
        f.write("|".join(" ".join(str(random.randint(0, 65535)) for _ in range(random.randint(1, 30)))
                         for _ in range(random.randint(1, 3))) + "\n")
EOF
$PY "$WRITER" write r uint16 <r.txt
$PY "$READER" r >want.txt
"$D" dump --ids r >got.txt
check "dump --ids equals the independent reader (sentence-level, empty documents)" cmp want.txt got.txt
"$D" dump --ids --documents 10:20 r >got.txt
sed -n 11,20p want.txt >want2.txt
check "--documents 10:20" cmp want2.txt got.txt
"$D" dump --ids --documents 495: r >got.txt
sed -n '496,$p' want.txt >want2.txt
check "--documents 495:" cmp want2.txt got.txt
"$D" dump --ids --documents :3 r >got.txt
head -n 3 want.txt >want2.txt
check "--documents :3" cmp want2.txt got.txt
"$D" dump --ids --documents 7 r >got.txt
sed -n 8p want.txt >want2.txt
check "--documents 7 (one document)" cmp want2.txt got.txt
"$D" dump --ids --documents 5:5 r >got.txt
check "--documents 5:5 (none)" test ! -s got.txt
expect_fail "--documents beyond the end (exit 2)" 2 "out of range (the dataset has 500 documents)" \
	"$D" dump --ids --documents 0:501 r
expect_fail "--documents A > B (exit 2)" 2 "out of range" "$D" dump --ids --documents 9:3 r
expect_fail "--documents garbage (exit 2)" 2 "expected A:B" "$D" dump --ids --documents x:3 r
expect_fail "text without a tokenizer (exit 2)" 2 "needs a tokenizer" "$D" dump r
expect_fail "--strip-eod with --ids needs a tokenizer (exit 2)" 2 "--strip-eod needs a tokenizer" \
	"$D" dump --ids --strip-eod r
expect_fail "unknown option (exit 2)" 2 "unknown option '--nope'" "$D" dump --nope r
printf '1 2 3\n\n-7 2147483647\n' | $PY "$WRITER" write i int32
"$D" dump --ids i >got.txt
printf '1 2 3\n\n-7 2147483647\n' >want.txt
check "int32 ids incl. negative and INT32_MAX" cmp want.txt got.txt
"$D" dump i --tokenizer-type NullTokenizer --vocab-size 100 --documents 0:2 >got.txt
printf '{"text":"1 2 3"}\n{"text":""}\n' >want.txt
check "NullTokenizer text" cmp want.txt got.txt

if [ -f "$GPT2/vocab.json" ]; then
	printf '15496 995 50256\n\n50256\n15496|995\n' | $PY "$WRITER" write g uint16
	"$D" dump g $G >got.txt
	printf '%s\n' '{"text":"Hello world<|endoftext|>"}' '{"text":""}' '{"text":"<|endoftext|>"}' \
		'{"text":"Hello world"}' >want.txt
	check "GPT-2 decode, compact JSON" cmp want.txt got.txt
	"$D" dump g $G --strip-eod --json-key content >got.txt
	printf '%s\n' '{"content":"Hello world"}' '{"content":""}' '{"content":""}' \
		'{"content":"Hello world"}' >want.txt
	check "--strip-eod and --json-key" cmp want.txt got.txt
	# Bytes that are not UTF-8 decode to U+FFFD as Python's bytes.decode(errors="replace") does.
	$PY - "$GPT2/vocab.json" <<'EOF'
import json, sys
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
k = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
byte_token = {b: vocab[chr(c)] for b, c in zip(bs, cs)}
cases = [b"A\xe2\x82B", b"\xff\xfe", b"\xf0\x9f\x98", b"\xed\xa0\x80x", b"\xc0\xafok", b"\xe2\x82\xac\xf4\x90\x80\x80"]
with open("u.txt", "w") as f, open("u.want.jsonl", "w", encoding="utf-8") as w:
    for c in cases:
        f.write(" ".join(str(byte_token[b]) for b in c) + "\n")
        w.write(json.dumps({"text": c.decode("utf-8", errors="replace")}, ensure_ascii=False) + "\n")
EOF
	$PY "$WRITER" write u uint16 <u.txt
	"$D" dump u $G >u.got.jsonl
	same_texts "invalid UTF-8 replaced like Python's decode(errors='replace')" u.want.jsonl u.got.jsonl text
	printf '60000\n' | $PY "$WRITER" write oov int32
	expect_fail "id outside the vocabulary (exit 3)" 3 "oov: document 0: token id 60000" "$D" dump oov $G

	# preprocess -> dump reproduces the texts
	$PY - <<'EOF'
import json
texts = ["Hello world", "", "naïve café — «quotes» \"double\" \\back\\slash\n\ttab", "emoji 😀👍🏽 and CJK 漢字かな",
         "nul \u0000 inside", "line\r\nbreaks\n\n", " leading and trailing spaces  ", "<|endoftext|> in text",
         "x" * 5000, "\u2028\u2029 separators", "Ünïcödé NFC vs NFD: e\u0301"]
with open("docs.jsonl", "w", encoding="utf-8") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t}) + "\n")
EOF
	if [ -x "$BIN/mgt-preprocess" ]; then
		"$BIN/mgt-preprocess" --input docs.jsonl --output-prefix pp $G --workers 2 --quiet 2>err.txt
		check "mgt-preprocess made pp_text_document" test -f pp_text_document.idx
		"$D" dump pp_text_document $G >pp.jsonl
		same_texts "preprocess then dump reproduces the texts" docs.jsonl pp.jsonl text
		"$BIN/mgt-preprocess" --input docs.jsonl --output-prefix ppe --append-eod $G --workers 2 --quiet 2>err.txt
		"$D" dump ppe_text_document $G --strip-eod >ppe.jsonl
		same_texts "preprocess --append-eod then dump --strip-eod reproduces the texts" docs.jsonl ppe.jsonl text
		check "non-ASCII is written as UTF-8, not \\u escapes" grep -q 'café' pp.jsonl
	else
		skip "no bin/mgt-preprocess"; skip "no bin/mgt-preprocess"; skip "no bin/mgt-preprocess"
		skip "no bin/mgt-preprocess"
	fi
else
	for i in 1 2 3 4 5 6 7 8 9; do skip "no GPT-2 vocabulary"; done
fi
echo "1..$n"
