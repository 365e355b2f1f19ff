#!/bin/sh
# mgt checkpoints (man 5 mgt-ckpt) read by tools that are not mgt: build/tests/test_ckpt --write
# saves a known checkpoint (four shards, pieces split along one and two dims, a replicated
# tensor, float32/float64/int32); Python + h5py (contrib/mgt_ckpt.py) assembles the tensors
# and finds the known values, the virtual index model.h5 presents the same whole tensors, and
# h5dump reads every file as valid HDF5, the virtual datasets included.  Then an MoE checkpoint
# (test_ckpt --write-moe): expert datasets [E, rows, cols], refused by the converters.
. "$(dirname "$0")/lib.sh"
W=$ROOT/build/tests/test_ckpt
chk() { "$PY" "$ROOT/tests/cli/ckpt_check.py" "$@"; }
lister() { "$PY" "$ROOT/contrib/mgt_ckpt.py" "$@"; }
# shards DIR: the number of *_dp000.h5 files in DIR
shards() { set -- "$1"/*_dp000.h5; echo $#; }
if [ ! -x "$W" ]; then echo "1..0 # SKIP build/tests/test_ckpt not built (run make)"; exit 0; fi
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 has no h5py or numpy"; exit 0
fi
C=$T/ck
I=$C/iter_0000007

ok "test_ckpt --write saves a checkpoint" "$W" --write "$C"
ok "the tracker says 7" test "$(cat "$C/latest_checkpointed_iteration.txt")" = 7
ok "iter_0000007 holds metadata.json, model.h5 and four shards, no .tmp left" \
	test -f "$I/metadata.json" -a -f "$I/model.h5" -a "$(shards "$I")" = 4 \
	-a ! -e "$C/iter_0000007.tmp"
ok "mgt_ckpt.load assembles the known tensors with the known values" chk values "$C"
ok "the C dump writer's expected.h5 (groups, JSON attribute) holds the same" chk expected "$C"
ok "model.h5's virtual datasets present the same whole tensors" chk virtual "$C"
ok "metadata.json, also as model.h5's attribute" chk metadata "$C"

lister "$C" >"$T/out" 2>"$T/err"
ok "mgt_ckpt.py DIR lists the tensors" grep -q "^output_layer.weight	float32	10x6	3$" "$T/out"
ok "mgt_ckpt.py DIR lists every tensor" test "$(grep -vc '^#' "$T/out")" = 11
lister --metadata "$I" >"$T/out" 2>"$T/err"
ok "mgt_ckpt.py --metadata prints metadata.json" grep -q '"iteration": 7' "$T/out"

# h5dump: every file is valid HDF5; the virtual datasets read through h5dump, from elsewhere.
if command -v h5dump >/dev/null 2>&1; then
	valid=1
	for f in "$I"/*.h5 "$C/expected.h5"; do
		h5dump -H "$f" >/dev/null 2>"$T/err" || { valid=0; echo "# h5dump -H $f failed: $(head -c 300 "$T/err")"; }
	done
	ok "h5dump reads every shard, model.h5 and expected.h5" test $valid = 1
	for n in output_layer.weight decoder.layers.self_attention.linear_qkv.weight \
		optimizer.state.exp_avg.output_layer.weight rng.counters; do
		chk raw "$C" "$n" "$T/want.bin"
		(cd / && h5dump -d "/$n" -b LE -o "$T/got.bin" "$I/model.h5" >/dev/null 2>"$T/err")
		ok "h5dump -b of virtual $n gives the known bytes" cmp "$T/want.bin" "$T/got.bin"
	done
	(cd / && h5dump -d /embedding.word_embeddings.weight "$I/model.h5" >"$T/out" 2>&1)
	ok "h5dump prints a virtual dataset's values" grep -q "(9,0):" "$T/out"
	h5dump -A "$I/model_tp01_pp001_dp000.h5" >"$T/out" 2>&1
	ok "h5dump shows the global_shape and global_offset attributes" \
		grep -q 'ATTRIBUTE "global_offset"' "$T/out"
else
	skip "h5dump (hdf5-tools) is not installed"
fi

# A lost shard: the reader refuses the tensors it cannot assemble.
cp -R "$C" "$T/lost"
rm "$T/lost/iter_0000007/model_tp01_pp000_dp000.h5"
exits 1 "$PY" -c "import sys; sys.path.insert(0, '$ROOT/contrib'); import mgt_ckpt
try:
    mgt_ckpt.load('$T/lost')
except ValueError as e:
    sys.exit(print(e, file=sys.stderr) or 1)"
ok "mgt_ckpt.load refuses a tensor with pieces missing" err_has "are in no piece"
# A truncated shard: the lister fails naming the file.
cp -R "$C" "$T/trunc"
f=$T/trunc/iter_0000007/model_tp00_pp001_dp000.h5
truncate -s 3000 "$f"
ok "mgt_ckpt.py exits 1 on a truncated shard" exits 1 lister "$T/trunc"
ok "... naming it" err_has "model_tp00_pp001_dp000.h5"
# Mixture of Experts: test_ckpt --write-moe saves a model of 4 experts as two expert-parallel
# ranks do; each expert tensor is one dataset [E, rows, cols] for h5py, the virtual index and
# h5dump; mgt-ckpt-convert, which converts MoE models (t4110), and mgt-export, which exports a
# hybrid's MoE layers (t4140), refuse this one for its missing arguments.
M=$T/moe
ok "test_ckpt --write-moe saves an MoE checkpoint (EP 2)" "$W" --write-moe "$M"
ok "expert tensors and their Adam moments are datasets [E, rows, cols] with the known values" chk moe "$M"
lister "$M" >"$T/out" 2>"$T/err"
ok "mgt_ckpt.py lists an expert dataset 4x16x8 with its pieces" \
	grep -q "^decoder.layers.0.mlp.experts.linear_fc1.weight	float32	4x16x8	[1-9]" "$T/out"
if command -v h5dump >/dev/null 2>&1; then
	(cd / && h5dump -H -d /decoder.layers.1.mlp.experts.linear_fc2.weight "$M/iter_0000005/model.h5" >"$T/out" 2>&1)
	ok "h5dump shows the virtual expert dataset ( 4, 8, 8 )" grep -q "DATASPACE  SIMPLE { ( 4, 8, 8 )" "$T/out"
else
	skip "h5dump (hdf5-tools) is not installed"
fi
ok "mgt-ckpt-convert refuses this checkpoint (exit 6)" \
	exits 6 "$BIN/mgt-ckpt-convert" --load-dir "$M" --save-dir "$T/moe-hf"
ok "... for its missing arguments" err_has 'no "args"'
ok "... writing nothing" test ! -e "$T/moe-hf"
# whether an MoE checkpoint exports to GGUF depends on its arguments (a hybrid's MoE layers do, as
# llama.cpp's nemotron_h_moe), so one without them is refused for that first, as mgt-ckpt-convert does
ok "mgt-export refuses it (exit 6)" exits 6 "$BIN/mgt-export" --load-dir "$M" --output "$T/moe.gguf"
ok "... for its missing arguments" err_has 'no "args"'
ok "... writing nothing" test ! -e "$T/moe.gguf"
done_testing
