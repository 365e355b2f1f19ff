#!/bin/sh
# Issue 49's and 50's test fixtures (tests/cli/megatron_ckpt.py, run with Debian's python3-torch):
# mgt checkpoints of tiny-llama, tiny-gpt2, tiny-moe and a 96-wide llama written as Megatron-LM
# would have saved them (--ckpt-format torch and torch_dist; TP/PP/VPP/EP/DP layouts, the
# distributed optimizer, bf16/fp16; Megatron-FSDP's fsdp_dtensor over uneven row chunks) and read
# back by the script's independent reader bit for bit.  Quick tier: 8 layouts, one per main rule;
# full tier: all 35.
. "$(dirname "$0")/lib.sh"
if ! $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 has no torch, h5py or numpy"; exit 0
fi
Q=--quick
full && Q=
ok "megatron_ckpt.py selftest ${Q:-(all layouts)}" sh -c '"$0" "$1/tests/cli/megatron_ckpt.py" selftest --keep "$2" --mgt-bin "$3" $4 >"$2/log" 2>&1 || { sed "s/^/# /" "$2/log" | tail -40; exit 1; }' "$PY" "$ROOT" "$T" "$BIN" "$Q"
done_testing
