#!/bin/sh
# mgt-ckpt-convert on bad input: each case exits with the documented status, names the file and
# the tensor or key, and leaves nothing under the output's name (nor its temporary).
. "$(dirname "$0")/lib.sh"
HF=$ROOT/tests/hf
good=$T/good
$PY "$HF/make_tiny.py" llama3 "$good" --dtype bf16 >/dev/null 2>&1 || { echo "1..0 # skip make_tiny.py failed"; exit 0; }
ST=$good/model.safetensors

variant() { # variant NAME: a copy of the good model to damage
	rm -rf "$T/$1"; cp -r "$good" "$T/$1"; echo "$T/$1"
}
refused() { # refused CODE DIR WHAT: conversion of DIR exits CODE, the message has WHAT, no output
	ok "$3: exit $1" exits "$1" "$BIN/mgt-ckpt-convert" --load-dir "$2" --save-dir "$T/conv"
	ok "$3: message names it" err_has "$4"
	ok "$3: no output" no_files "$T/conv" "$T"/conv.tmp.*
}
edit_header() { # edit_header FILE PYTHON-EXPR-ON-h: rewrite the JSON header (same data)
	$PY - "$1" "$2" <<'EOF'
import json, struct, sys
p, expr = sys.argv[1], sys.argv[2]
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
exec(expr)
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
open(p, "wb").write(struct.pack("<Q", len(t)) + t + data)
EOF
}

d=$(variant trunc); $PY -c "import os,sys; p=sys.argv[1]; os.truncate(p, os.path.getsize(p) - 100)" "$d/model.safetensors"
refused 6 "$d" "truncated safetensors" "model.safetensors"
d=$(variant hdrlen); $PY -c "
import struct,sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[:8]=struct.pack('<Q', len(b)*2); open(p,'wb').write(b)" "$d/model.safetensors"
refused 6 "$d" "header longer than the file" "model.safetensors"
d=$(variant overlap); edit_header "$d/model.safetensors" "
k = sorted(h, key=lambda k: h[k]['data_offsets'][0] if k != '__metadata__' else -1)[1:]
a, b = h[k[0]], h[k[1]]
if a['data_offsets'][1] - a['data_offsets'][0] == b['data_offsets'][1] - b['data_offsets'][0]: b['data_offsets'] = list(a['data_offsets'])
else: b['data_offsets'] = [a['data_offsets'][0], a['data_offsets'][0] + b['data_offsets'][1] - b['data_offsets'][0]]"
refused 6 "$d" "overlapping data offsets" "model.safetensors"
d=$(variant shape); $PY -c "
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['intermediate_size'] += 16; json.dump(c, open(p,'w'))" "$d/config.json"
refused 3 "$d" "a shape config.json contradicts" "mlp.gate_proj.weight"
d=$(variant dtype); $PY -c "
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['torch_dtype']='float16'; json.dump(c, open(p,'w'))" "$d/config.json"
refused 3 "$d" "a dtype config.json contradicts" "torch_dtype is float16"
d=$(variant missing); edit_header "$d/model.safetensors" "del h['model.layers.1.mlp.up_proj.weight']"
refused 3 "$d" "a missing tensor" "model.layers.1.mlp.up_proj.weight is missing"
d=$(variant extra); edit_header "$d/model.safetensors" "h['model.layers.7.extra.weight'] = dict(h['model.norm.weight'])"
refused 6 "$d" "an unexpected tensor (sharing another's bytes)" "model.safetensors"
d=$(variant extra3); $PY -c "
import sys; sys.path.insert(0, sys.argv[2]); import st, numpy as np
t = [(k, d, a) for k, (d, s, a) in st.load(sys.argv[1]).items()]
t.append(('model.layers.0.self_attn.extra_gate.weight', 'BF16', np.zeros(8, np.uint16)))
st.save_dir(sys.argv[1], t)" "$d" "$HF"
refused 3 "$d" "an unexpected tensor" "unexpected tensor model.layers.0.self_attn.extra_gate.weight"
d=$(variant arch); $PY -c "
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['model_type']='falcon'; json.dump(c, open(p,'w'))" "$d/config.json"
refused 3 "$d" "an unknown architecture" "model_type \"falcon\""
d=$(variant rope); $PY -c "
import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['rope_scaling']={'rope_type':'yarn','factor':4.0}; json.dump(c, open(p,'w'))" "$d/config.json"
refused 3 "$d" "an unknown rope_scaling type" "rope_scaling type \"yarn\""
d=$(variant nan); $PY - "$d/model.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); o = h["model.layers.0.self_attn.o_proj.weight"]["data_offsets"][0] + 8 + n + 2 * 5
b[o:o + 2] = b"\xc0\x7f"  # bf16 NaN at element 5
open(p, "wb").write(b)
EOF
refused 3 "$d" "a NaN weight" "o_proj.weight: element 5 is NaN"

mkdir "$T/conv"
ok "an existing output: exit 5" exits 5 "$BIN/mgt-ckpt-convert" --load-dir "$good" --save-dir "$T/conv"
ok "...naming it" err_has "already exists"
ok "...and left as it was (empty)" sh -c "[ -z \"\$(ls -A '$T/conv')\" ]"
rmdir "$T/conv"
ok "a layout that does not divide the heads: exit 2" exits 2 "$BIN/mgt-ckpt-convert" --load-dir "$good" \
	--save-dir "$T/conv" --target-tensor-parallel-size 3
ok "...nothing written" no_files "$T/conv" "$T"/conv.tmp.*
ok "the good model converts (the cases above are its only damage)" "$BIN/mgt-ckpt-convert" --quiet \
	--load-dir "$good" --save-dir "$T/conv"

done_testing
