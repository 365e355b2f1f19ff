#!/bin/sh
# safetensors and GGUF files written by lib/ckpt read by code that is not mgt's:
# build/tests/test_formats --write saves a one-file and a sharded safetensors model and a GGUF v3
# file with known values; tests/cli/formats_check.py parses them with json/struct + numpy and
# compares every byte with conversions done by torch (bfloat16, float16), numpy (float16) and
# ggml's Q8_0 formula written out in numpy.
. "$(dirname "$0")/lib.sh"
W=$ROOT/build/tests/test_formats
chk() { "$PY" "$ROOT/tests/cli/formats_check.py" "$@"; }
if [ ! -x "$W" ]; then echo "1..0 # SKIP build/tests/test_formats not built (run make)"; exit 0; fi
if ! $PY -c 'import numpy' 2>/dev/null; then echo "1..0 # SKIP /usr/bin/python3 has no numpy"; exit 0; fi
$PY -c 'import torch' 2>/dev/null || echo "# no torch: bfloat16 bytes are not compared"

ok "test_formats --write saves the known files" "$W" --write "$T/f"
ok "model.safetensors: header, layout and bytes as an independent parser expects" chk st "$T/f/single"
ok "sharded model: index, shard names, layout and bytes" chk st "$T/f/sharded"
ok "model.gguf: header, kv pairs, tensor infos, alignment, data (f32/f16/bf16/q8_0)" chk gguf "$T/f/model.gguf"
# the checker itself fails on a damaged copy
cp "$T/f/model.gguf" "$T/bad.gguf"
printf '\001' | dd of="$T/bad.gguf" bs=1 seek=2000 conv=notrunc 2>/dev/null
ok "the checker notices one changed byte" sh -c "! '$PY' '$ROOT/tests/cli/formats_check.py' gguf '$T/bad.gguf' >/dev/null"
done_testing
