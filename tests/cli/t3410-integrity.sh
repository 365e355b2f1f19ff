#!/bin/sh
# Nothing lost, nothing silently wrong (issue 29): checkpoint checksums against an independent
# reference (python3-xxhash over h5py's reads), a damaged tensor refused with exit 6 by every
# program that reads checkpoints (naming the file, the tensor and the newest whole iteration),
# a corruption sweep (tests/bench/ckpt_sweep: flips and truncations), --save holding another
# run's checkpoints refused, and the preflight of every output directory and of free space.
# Quick tier: the full sweep (every 64th byte) is tests/bench/ckpt_corruption.sh.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
SWEEP=$ROOT/build/bench/ckpt_sweep
if ! $PY -c 'import h5py, numpy, xxhash' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 lacks h5py, numpy or xxhash (python3-xxhash)"; exit 0
fi
TRAIN="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 128
 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --threads 2"
small_bpe && zstd -dc "$SHARE/data/kjv.jsonl.zst" | head -20 >k.jsonl &&
	"$BIN/mgt-preprocess" --input k.jsonl --output-prefix k $BPE --append-eod --quiet >/dev/null 2>&1
TINY="--num-layers 1 --hidden-size 32 --num-attention-heads 2 --ffn-hidden-size 64 --max-position-embeddings 32"

ok "train 2 iterations, saving each" exits 0 $TRAIN --train-iters 2 --save-interval 1 --save ck
ok "checkpoint size logged, within 10% of the shard's" $PY - "$T/err" ck/iter_0000002 <<'PY'
import os, re, sys
m = re.search(r"checkpoint size: about ([0-9.]+) MiB", open(sys.argv[1]).read())
shard = os.path.getsize(os.path.join(sys.argv[2], "model_tp00_pp000_dp000.h5")) / 2**20
print(f"# estimate {m and m.group(1)} MiB, shard {shard:.2f} MiB")
sys.exit(0 if m and abs(float(m.group(1)) / shard - 1) < 0.1 else 1)
PY

# checksums.json: every piece's xxh3_64 is python3-xxhash's of h5py's read of it; every file's
# that of its bytes; every shard and dataset listed
ok "checksums.json agrees with python3-xxhash over h5py" $PY - ck/iter_0000002 <<'PY'
import glob, json, os, sys, h5py, numpy, xxhash
d = sys.argv[1]
s = json.load(open(os.path.join(d, "checksums.json")))
assert s["algorithm"] == "xxh3_64"
for name, h in s["files"].items():
    assert xxhash.xxh3_64_hexdigest(open(os.path.join(d, name), "rb").read()) == h, name
assert sorted(s["files"]) == ["metadata.json", "model.h5"], s["files"].keys()
shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.h5")) if not p.endswith("/model.h5"))
assert sorted(s["shards"]) == shards, (s["shards"].keys(), shards)
n = 0
for sh in shards:
    with h5py.File(os.path.join(d, sh), "r") as f:
        assert sorted(f.keys()) == sorted(s["shards"][sh]), sh
        for k, ds in f.items():
            e, a = s["shards"][sh][k], ds[()]
            want = xxhash.xxh3_64_hexdigest(numpy.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
            assert e["xxh3_64"] == want == "%016x" % int(ds.attrs["xxh3_64"]), k
            assert e["shape"] == list(a.shape) and e["dtype"] == str(a.dtype), k
            assert e["global_shape"] == list(ds.attrs["global_shape"]) and e["global_offset"] == list(ds.attrs["global_offset"]), k
            n += 1
print(f"# {n} pieces, {len(s['files'])} files checked")
PY

# one element rewritten through h5py: HDF5's Fletcher-32 is recomputed, only the XXH3 can tell
cp -R ck dmg
$PY -c "
import h5py
with h5py.File('dmg/iter_0000002/model_tp00_pp000_dp000.h5', 'r+') as f:
    d = f['decoder.layers.0.mlp.linear_fc1.weight']; d[3, 5] = d[3, 5] + 1
"
MSG="model_tp00_pp000_dp000.h5: tensor decoder.layers.0.mlp.linear_fc1.weight: the data read back have checksum"
NEWEST="the newest whole iteration is 1: pass --ckpt-step 1 to load it"
refused() { exits 6 "$@" && err_has "$MSG" && err_has "$NEWEST"; }
ok "mgt-train --load refuses it (exit 6), naming file, tensor and iteration 1" refused $TRAIN --train-iters 3 --load dmg --save dmg
ok "... and leaves the checkpoints as they were" sh -c 'test "$(cat dmg/latest_checkpointed_iteration.txt)" = 2 && ! test -e dmg/iter_0000003'
ok "mgt-eval refuses it (exit 6)" refused "$BIN/mgt-eval" logits --load dmg --tokens "1 2 3"
ok "mgt-ckpt-convert refuses it (exit 6)" refused "$BIN/mgt-ckpt-convert" --load-dir dmg --save-dir hf
ok "... no Hugging Face directory left" no_files hf
ok "mgt-export refuses it (exit 6)" refused "$BIN/mgt-export" --load-dir dmg --format safetensors --output st
ok "... no output left" no_files st
ok "--ckpt-step 1 loads the whole iteration" exits 0 $TRAIN --train-iters 3 --load dmg --ckpt-step 1 --save dmg2

# the sweep, sampled: a byte flipped every 1021 bytes and a truncation every 16 KiB of a tiny
# model's shard: each refused or read back identical
ok "tiny model saved" exits 0 $TRAIN $TINY --train-iters 1 --save tiny
ok "sweep: no silent change, crash or hang" sh -c "'$SWEEP' tiny model_tp00_pp000_dp000.h5 1021 16384 '$T/sw' >sweep.out 2>&1"
sed 's/^/# /' sweep.out | tail -3

# datasets: PREFIX.checksums.json beside the .bin and .idx, checked by mgt-train and merge
ok "mgt-preprocess writes the dataset's checksums (python3-xxhash agrees)" $PY -c "
import json, xxhash
s = json.load(open('k_text_document.checksums.json'))
for e in ('bin', 'idx'):
    b = open('k_text_document.' + e, 'rb').read()
    assert s[e] == xxhash.xxh3_64_hexdigest(b) and s[e + '_bytes'] == len(b), e
assert s['algorithm'] == 'xxh3_64'"
cp k_text_document.bin kd.bin && cp k_text_document.idx kd.idx && cp k_text_document.checksums.json kd.checksums.json
$PY -c "
b = bytearray(open('kd.bin', 'rb').read()); b[len(b) // 2] ^= 1; open('kd.bin', 'wb').write(b)"
DTRAIN="$BIN/mgt-train --model tiny-gpt2 $BPE --split 90,10,0 --seq-length 32 --micro-batch-size 2 --global-batch-size 2
 --lr 1e-3 --train-iters 1 --threads 2"
ok "a damaged .bin: mgt-train exits 6 naming it" exits 6 $DTRAIN --data-path kd
ok "... the file and its checksum file" err_has "kd.bin: its checksum differs from kd.checksums.json's"
ok "... mgt-dataset merge refuses it too (exit 6)" exits 6 "$BIN/mgt-dataset" merge --output-prefix km kd k_text_document
ok "... writing nothing" no_files km.bin km.idx km.checksums.json
rm kd.checksums.json
ok "without the side file (Megatron's own datasets) it is read unchecked" exits 0 $DTRAIN --data-path kd
ok "mgt-dataset merge writes the merged dataset's checksums" sh -c "'$BIN/mgt-dataset' merge --output-prefix km \
	k_text_document k_text_document >/dev/null && test -s km.checksums.json"

# --save holding another run's checkpoints
ok "--save over another run's checkpoints refused (exit 2)" exits 2 $TRAIN --train-iters 2 --save ck
ok "... saying what to pass" err_has "pass --load ck to resume that run, or --overwrite-save"
ok "... the other run's tracker untouched" test "$(cat ck/latest_checkpointed_iteration.txt)" = 2
ok "--load elsewhere, --save over them: refused" exits 2 $TRAIN --train-iters 2 --load tiny --save ck --finetune
ok "--load of the same directory resumes" exits 0 $TRAIN --train-iters 3 --load ck --save ck
ok "--overwrite-save starts over on purpose" exits 0 $TRAIN $TINY --train-iters 1 --save tiny --overwrite-save

# self-contained checkpoints: tokenizer files given by paths relative to the training's working
# directory (and a Hugging Face tokenizer given as its directory) are copied into the checkpoint,
# so convert and export work from elsewhere
mkdir -p run/tok hftok && cp "$T/bpe/vocab.json" "$T/bpe/merges.txt" run/tok/ && cp "$SHARE/tokenizers/gpt2/tokenizer.json" hftok/
ok "trained with relative tokenizer paths" sh -c "cd run && '$BIN/mgt-train' --model tiny-gpt2 --tokenizer-type GPT2BPETokenizer \
	--vocab-file tok/vocab.json --merge-file tok/merges.txt --data-path ../k_text_document --split 90,10,0 --seq-length 32 \
	--micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 1 --threads 2 --save ck >/dev/null 2>&1"
ok "... the files are in the checkpoint, listed in metadata and checksums" $PY -c "
import json, sys
d = 'run/ck/iter_0000001/'
m, s = json.load(open(d + 'metadata.json')), json.load(open(d + 'checksums.json'))
f = m['tokenizer']['files']
assert f == {'vocab_file': 'tokenizer/vocab.json', 'merge_file': 'tokenizer/merges.txt'}, f
assert open(d + f['vocab_file'], 'rb').read() == open('run/tok/vocab.json', 'rb').read()
assert set(f.values()) <= set(s['files']), s['files'].keys()"
mkdir elsewhere
ok "mgt-ckpt-convert from another directory writes the tokenizer files" sh -c "cd elsewhere && \
	'$BIN/mgt-ckpt-convert' --load-dir ../run/ck --save-dir hf --quiet && cmp hf/vocab.json ../run/tok/vocab.json && \
	cmp hf/merges.txt ../run/tok/merges.txt"
ok "mgt-export from another directory embeds the tokenizer" sh -c "cd elsewhere && '$BIN/mgt-export' --load-dir ../run/ck \
	--output m.gguf --quiet && test -s m.gguf"
ok "mgt-eval from another directory encodes a prompt" sh -c "cd elsewhere && '$BIN/mgt-eval' generate --load ../run/ck \
	--prompt 'In the' --max-new-tokens 2 >/dev/null 2>&1"
cp -R run/ck bare && rm -r bare/iter_0000001/tokenizer && $PY - bare/iter_0000001/metadata.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); del m["tokenizer"]["files"]; json.dump(m, open(sys.argv[1], "w"))
PY
$PY "$ROOT/tests/cli/ckpt_rehash.py" bare/iter_0000001
ok "a checkpoint without copies, from another directory: mgt-export exits 4 naming the file" sh -c \
	"cd elsewhere && '$BIN/mgt-export' --load-dir ../bare --output b.gguf >/dev/null 2>'$T/err'; test \$? = 4" && err_has "tok/vocab.json"
ok "... and --vocab-file/--merge-file give the files' new paths" sh -c "cd elsewhere && '$BIN/mgt-export' --load-dir ../bare \
	--output b.gguf --name ck --vocab-file ../run/tok/vocab.json --merge-file ../run/tok/merges.txt --quiet && cmp -s b.gguf m.gguf"
ok "mgt-export refuses --vocab-size without --tokenizer-type (exit 2)" exits 2 "$BIN/mgt-export" --load-dir run/ck --output x.gguf \
	--vocab-size 5
ok "trained with a Hugging Face tokenizer given as its directory" exits 0 "$BIN/mgt-train" --model tiny-gpt2 \
	--tokenizer-type HuggingFaceTokenizer --tokenizer-model hftok --mock-data --seq-length 32 --micro-batch-size 2 \
	--global-batch-size 2 --lr 1e-3 --train-iters 1 --threads 2 --save hfck
ok "... mgt-ckpt-convert from another directory writes its tokenizer.json" sh -c "cd elsewhere && \
	'$BIN/mgt-ckpt-convert' --load-dir ../hfck --save-dir hf2 --quiet && cmp hf2/tokenizer.json ../hftok/tokenizer.json"

"$BIN/mgt-ckpt-convert" --load-dir run/ck --save-dir hf3 2>cv.err >/dev/null
ok "mgt-ckpt-convert counts the Hugging Face model's parameters, naming the padding left out" $PY - hf3 cv.err <<'PY'
import json, re, struct, sys
f = open(sys.argv[1] + "/model.safetensors", "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
n = 0
for k, v in h.items():
    if k != "__metadata__" and not k.endswith((".attn.bias", ".attn.masked_bias")):
        c = 1
        for d in v["shape"]: c *= d
        n += c
m = re.search(r"tensors, (\d+) parameters \(the checkpoint's (\d+) less (\d+) of vocabulary padding\)", open(sys.argv[2]).read())
print(f"# safetensors {n}, printed {m and m.groups()}")
sys.exit(0 if m and int(m.group(1)) == n and int(m.group(2)) - int(m.group(3)) == n and int(m.group(3)) > 0 else 1)
PY

# messages that say what to do
if command -v mpirun >/dev/null 2>&1; then
	RUN="sh $ROOT/tests/mpirun.sh"
	ok "under mpirun, rank 0's refusal of --save ends both ranks with exit 2" exits 2 env MGT_MPIRUN_TIMEOUT=120 $RUN 2 \
		$TRAIN --train-iters 2 --save ck
	ok "... no rank prints a SIGTERM line" sh -c "! grep -q SIGTERM '$T/err' '$T/out'"
	ok "a PP2 checkpoint" exits 0 $RUN 2 $TRAIN --train-iters 1 --pipeline-model-parallel-size 2 --global-batch-size 4 \
		--save pp2
	ok "mgt-eval loss of it in one process: exit 2" exits 2 "$BIN/mgt-eval" loss --load pp2
	ok "... saying how to run it" err_has "run it under mpirun with a multiple of 2 processes, or give sizes whose product divides 1"
else
	skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"
fi
ok "a validation split with no document: exit 3" exits 3 "$BIN/mgt-train" --model tiny-gpt2 $BPE --data-path k_text_document \
	--split 98,2,0 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 2 --threads 2 \
	--eval-interval 1 --eval-iters 1
ok "... saying what to change" err_has "give it a larger share in --split, or use more data (or --eval-iters 0"

# preflight: nothing computed before a directory that cannot be written is found
preflight() { exits 1 $TRAIN --train-iters 2 "$@" && err_has "$1" && ! grep -q "iteration  " "$T/out" "$T/err"; }
ok "--tensorboard-dir unwritable: exit 1 before training" preflight --tensorboard-dir /proc/no/tb
ok "--data-cache-path unwritable: exit 1 before training" exits 1 "$BIN/mgt-train" --model tiny-gpt2 $BPE \
	--data-path k_text_document --split 90,10,0 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 \
	--train-iters 2 --threads 2 --data-cache-path /proc/no/cache
ok "... naming it" err_has "--data-cache-path"
ok "--metrics-file in a missing directory: exit 1 before training" preflight --metrics-file nodir/m.jsonl
ok "--save unwritable: exit 1 before training" preflight --save /proc/no/ck
done_testing
