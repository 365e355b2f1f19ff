#!/bin/sh
# mgt-dataset info: counts and length statistics equal numpy's (independent reader), text and
# JSON output, and the reader's validation of malformed .idx/.bin files (exit 6, naming the field).
. "$(dirname "$0")/dataset-lib.sh"
# same_json DESC A B: the two JSON objects are equal (numbers compared as Python floats/ints);
# keys only in A (mgt's "prefix") are ignored.
same_json() {
	if $PY - "$2" "$3" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
a.pop("prefix", None)
sys.exit(0 if a == b else (print(a, b, file=sys.stderr) or 1))
EOF
	then ok "$1"; else nok "$1"; fi
}

printf '1 2 3\n\n4|5 6\n65535 0\n\n' | $PY "$WRITER" write a uint16
: | $PY "$WRITER" write empty uint16
printf '\n\n\n' | $PY "$WRITER" write emptydocs int32
printf '5\n' | $PY "$WRITER" write one int64
printf '1 1 1|1\n1 1 1 1\n1 1\n' | $PY "$WRITER" write m4 uint16   # median of 1 2 3 4 is 2.5
$PY - <<'EOF'
import random
random.seed(3)
for name, count in (("odd", 1001), ("even", 1000), ("long", 300)):
    with open(name + ".txt", "w") as f:
        for _ in range(count):
            if random.random() < 0.03:
                f.write("\n"); continue
            big = 70000 if name == "long" and random.random() < 0.1 else 300
            f.write(" ".join("1" for _ in range(random.randint(1, big))) + "\n")
EOF
for p in odd even long; do $PY "$WRITER" write $p int32 <$p.txt; done

for p in a empty emptydocs one m4 odd even long; do
	"$BIN/mgt-dataset" info --json $p >$p.mgt.json 2>err.txt
	$PY "$READER" --info $p >$p.py.json
	same_json "info --json $p equals numpy (counts, min/mean/median/p99/max)" $p.mgt.json $p.py.json
done

"$BIN/mgt-dataset" info a >info.txt
check "text: dtype" grep -q '^dtype: *uint16 (code 8)$' info.txt
check "text: sequences" grep -q '^sequences: *4$' info.txt
check "text: documents" grep -q '^documents: *5$' info.txt
check "text: empty documents" grep -q '^empty documents: *2$' info.txt
check "text: tokens" grep -q '^tokens: *8$' info.txt
check "text: lengths" grep -q '^sequence length: *min 1, mean 2.00, median 2, p99 2.97, max 3$' info.txt
"$BIN/mgt-dataset" info m4 >info.txt
check "text: median of an even count is the mean of the middle two" grep -q 'median 2.5, p99 3.97,' info.txt
"$BIN/mgt-dataset" info empty >info.txt
check "text: empty dataset" grep -q 'no sequences' info.txt
"$BIN/mgt-dataset" info a.idx >info2.txt
check "info accepts PREFIX.idx" grep -q '^tokens: *8$' info2.txt
check "--json is one line of JSON" test "$(wc -l <a.mgt.json)" -eq 1

# Malformed files: each must be refused with exit 6 and a message naming the file and field.
# a: N = 4, D1 = 6; lengths at 34, pointers at 50, document_indices at 82, size 130.
corrupt() { # NAME OFFSET PRINTF-BYTES: a copy of a with bytes replaced
	cp a.bin "$1.bin"; cp a.idx "$1.idx"
	printf "$3" | dd of="$1.idx" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
corrupt magic 0 'X'
expect_fail "bad magic" 6 "magic.idx: bad magic (expected MMIDIDX)" "$BIN/mgt-dataset" info magic
corrupt version 9 '\002'
expect_fail "version 2" 6 "version.idx: version is 2 (expected 1)" "$BIN/mgt-dataset" info version
corrupt dtype 17 '\011'
expect_fail "dtype code 9" 6 "dtype.idx: dtype code is 9 (expected 1 to 8)" "$BIN/mgt-dataset" info dtype
corrupt count 18 '\005'
expect_fail "sequence_count too large for the file" 6 "count.idx: file is 130 bytes, header says 142" \
	"$BIN/mgt-dataset" info count
cp a.bin trunc.bin; head -c 129 a.idx >trunc.idx
expect_fail "truncated .idx" 6 "trunc.idx: file is 129 bytes, header says 130" "$BIN/mgt-dataset" info trunc
cp a.bin short.bin; head -c 30 a.idx >short.idx
expect_fail ".idx shorter than the header" 6 "short.idx: file is 30 bytes, too short" "$BIN/mgt-dataset" info short
corrupt docend 114 '\003\0\0\0\0\0\0\0\003'
expect_fail "document_indices not ending at N" 6 "docend.idx: document_indices ends at 3 (expected sequence_count 4)" \
	"$BIN/mgt-dataset" info docend
corrupt docfirst 82 '\001'
expect_fail "document_indices[0] != 0" 6 "docfirst.idx: document_indices[0] is 1 (expected 0)" \
	"$BIN/mgt-dataset" info docfirst
corrupt ptr 58 '\007'
expect_fail "pointer not the running sum" 6 "ptr.idx: sequence_pointers[1] is 7 (expected 6" "$BIN/mgt-dataset" info ptr
corrupt len 34 '\377\377\377\377'
expect_fail "negative length" 6 "len.idx: sequence_lengths[0] is -1" "$BIN/mgt-dataset" info len
cp a.idx binsize.idx; head -c 14 a.bin >binsize.bin
expect_fail ".bin size" 6 "binsize.bin: file is 14 bytes, binsize.idx says 16" "$BIN/mgt-dataset" info binsize
check "the independent reader also refuses the bad magic" sh -c "! $PY '$READER' magic"
check "the independent reader also refuses document_indices not ending at N" sh -c "! $PY '$READER' docend"
expect_fail "missing dataset (exit 1)" 1 "nope.idx: cannot open" "$BIN/mgt-dataset" info nope
cp a.idx nobin.idx
expect_fail "missing .bin (exit 1)" 1 "nobin.bin: cannot open" "$BIN/mgt-dataset" info nobin
expect_fail "two prefixes (exit 2)" 2 "expected one PREFIX" "$BIN/mgt-dataset" info a a
echo "1..$n"
