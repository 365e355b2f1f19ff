#!/bin/sh
# mgt-dataset merge: bytes equal to a Python IndexedDatasetBuilder.add_index merge, readable by an
# independent numpy reader, directory inputs sorted by name, refusals (dtype, exists, malformed),
# nothing left behind on failure, memory that does not grow with the data.
. "$(dirname "$0")/dataset-lib.sh"
write() { $PY "$WRITER" write "$@"; }
merge() { "$BIN/mgt-dataset" merge "$@" 2>merge.err; }

printf '1 2 3\n\n4|5 6\n65535 0\n\n' | write a uint16
printf '7\n8 9|10\n' | write b uint16
: | write c uint16                       # no documents at all
printf '\n\n' | write e uint16           # only empty documents
printf '70000 -5\n\n1|2|3\n' | write i int32

merge --output-prefix out a b c e
check "merge exits 0" test $? -eq 0
$PY "$WRITER" merge ref a b c e
check ".bin equals the Python add_index merge" cmp out.bin ref.bin
check ".idx equals the Python add_index merge" cmp out.idx ref.idx
check "independent reader accepts the output (strict)" $PY "$READER" --strict out
for p in a b c e; do $PY "$READER" $p; done >want.txt
$PY "$READER" out >got.txt
check "documents are the inputs' documents in order" cmp want.txt got.txt
check "summary on stderr" grep -q "merged 4 datasets into out: 9 documents, 12 tokens" merge.err
check "no temporaries left" test -z "$(ls | grep tmp)"

merge --output-prefix iout i i
$PY "$WRITER" merge iref i i
check "int32 merge equals Python (ids above 65535, negative ids)" cmp iout.idx iref.idx
check "int32 merge .bin" cmp iout.bin iref.bin

mkdir d
for p in a b; do cp $p.bin d/x-$p.bin; cp $p.idx d/x-$p.idx; done
cp e.bin d/w.bin; cp e.idx d/w.idx
echo "not a dataset" >d/README.txt
merge --output-prefix dout d
$PY "$WRITER" merge dref d/w d/x-a d/x-b
check "directory input: every pair, sorted by name" cmp dout.idx dref.idx
check "directory input .bin" cmp dout.bin dref.bin
merge --output-prefix dout2 --input d
check "--input DIR (Megatron's flag) is the same" cmp dout2.idx dref.idx
merge --output-prefix dout3 d/x-a d/x-b.idx a.bin
$PY "$WRITER" merge dref3 d/x-a d/x-b a
check "inputs named PREFIX, PREFIX.idx or PREFIX.bin" cmp dout3.idx dref3.idx

expect_fail "existing output refused (exit 5)" 5 "out.bin: output already exists" \
	"$BIN/mgt-dataset" merge --output-prefix out a
merge --output-prefix out --overwrite b
check "--overwrite replaces the output" cmp out.bin b.bin
check "--overwrite: new .idx" cmp out.idx b.idx

expect_fail "dtype mismatch refused (exit 6)" 6 "i: dtype is int32 (expected uint16, the dtype of bad)" \
	"$BIN/mgt-dataset" merge --output-prefix bad a i
check "dtype mismatch leaves nothing" test -z "$(ls | grep '^bad')"

cp a.bin m.bin; cp a.idx m.idx; printf 'MMIDIDY' | dd of=m.idx bs=1 conv=notrunc 2>/dev/null
expect_fail "malformed input refused (exit 6)" 6 "m.idx: bad magic (expected MMIDIDX)" \
	"$BIN/mgt-dataset" merge --output-prefix bad2 a m
check "malformed input leaves nothing" test -z "$(ls | grep '^bad2')"
expect_fail "missing input is a runtime error (exit 1)" 1 "nope.idx: cannot open" \
	"$BIN/mgt-dataset" merge --output-prefix bad3 a nope
mkdir lonely; cp a.idx lonely/
expect_fail ".idx without .bin in a directory (exit 6)" 6 "lonely/a.idx: no matching .bin" \
	"$BIN/mgt-dataset" merge --output-prefix bad4 lonely
mkdir empty
expect_fail "directory without datasets (exit 2)" 2 "hold no datasets" \
	"$BIN/mgt-dataset" merge --output-prefix bad5 empty
expect_fail "--output-prefix is required (exit 2)" 2 "--output-prefix is required" \
	"$BIN/mgt-dataset" merge a
expect_fail "no INPUT (exit 2)" 2 "no INPUT" "$BIN/mgt-dataset" merge --output-prefix x
expect_fail "output directory missing (exit 1)" 1 "cannot create" \
	"$BIN/mgt-dataset" merge --output-prefix no/such/dir/x a

# Random datasets: sentence-level documents, empty documents, several dtypes.
$PY - <<'EOF'
import random
random.seed(7)
for name, hi in (("r1", 50000), ("r2", 50000), ("r3", 65535)):
    with open(name + ".txt", "w") as f:
        for _ in range(random.randint(200, 600)):
            if random.random() < 0.05:
                f.write("\n"); continue
            seqs = [" ".join(str(random.randint(0, hi)) for _ in range(random.randint(1, 40)))
                    for _ in range(random.randint(1, 3))]
            f.write("|".join(seqs) + "\n")
EOF
for r in r1 r2 r3; do write $r uint16 <$r.txt; done
merge --output-prefix rout r1 r2 r3
$PY "$WRITER" merge rref r1 r2 r3
check "random sentence-level datasets: .idx equals Python" cmp rout.idx rref.idx
check "random sentence-level datasets: .bin equals Python" cmp rout.bin rref.bin

# Peak memory must not follow the data: merge 3 x 24 MiB .bin files.
$PY - <<'EOF'
import numpy, struct
rng = numpy.random.default_rng(1)
lengths = numpy.full(6000, 2048, dtype=numpy.int32)
ids = rng.integers(0, 65535, size=int(lengths.sum()), dtype=numpy.uint16)
open("big.bin", "wb").write(ids.tobytes())
ptr = numpy.zeros(len(lengths), dtype=numpy.int64); ptr[1:] = numpy.cumsum(lengths[:-1]) * 2
with open("big.idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
    f.write(lengths.tobytes()); f.write(ptr.tobytes())
    f.write(numpy.arange(len(lengths) + 1, dtype=numpy.int64).tobytes())
EOF
rss=$($PY - "$BIN/mgt-dataset" <<'EOF'
import resource, subprocess, sys
subprocess.run([sys.argv[1], "merge", "--output-prefix", "bigout", "big", "big", "big"], check=True,
               stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
EOF
)
check "72 MiB merge: output size" test "$(wc -c <bigout.bin)" -eq $((3 * 6000 * 2048 * 2))
if [ -n "$rss" ] && [ "$rss" -lt 40000 ]; then ok "72 MiB merge: peak RSS ${rss} KiB < 40 MiB"
else nok "72 MiB merge: peak RSS ${rss} KiB (expected < 40 MiB)"; fi
check "72 MiB merge: reader accepts it" $PY "$READER" --strict --info bigout
echo "1..$n"
