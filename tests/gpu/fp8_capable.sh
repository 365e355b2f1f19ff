#!/bin/sh
# tests/gpu/fp8_capable.sh: exit 0 when GPU 0 runs fp8 GEMMs (compute capability 8.9 or higher, as
# mgt_backend_cuda_fp8_supported requires), 1 otherwise or without nvidia-smi.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
[ -n "$cc" ] || exit 1
awk -v c="$cc" 'BEGIN { exit !(c + 0 >= 8.9) }'
