#!/bin/sh
# Conversion time and peak RSS, both ways, for a llama-3.2-1b-shaped model with random weights
# (16 layers, h 2048, 32 heads, 8 query groups, ffn 8192, vocab 128256, tied; 2.5 GB in bf16):
# Hugging Face -> mgt at TP 2 x PP 2, then mgt -> Hugging Face, checked bit for bit.
# Usage: tests/bench/convert.sh [WORKDIR]   (needs about 13 GB of disk; /usr/bin/time -v)
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
w=${1:-$root/build/bench/convert}
rm -rf "$w" && mkdir -p "$w"
/usr/bin/python3 "$root/tests/hf/make_tiny.py" llama3.2 "$w/hf" --dtype bf16 --vocab 128256 --layers 16 --hidden 2048 \
	--heads 32 --kv-heads 8 --ffn 8192 --positions 131072 --rope-orig 8192
for dir in in out; do
	if [ $dir = in ]; then args="--load-dir $w/hf --save-dir $w/ck --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2"
	else args="--load-dir $w/ck --save-dir $w/back"; fi
	/usr/bin/time -v "$root/bin/mgt-ckpt-convert" $args 2>"$w/$dir.time"
	echo "$dir: $(grep -h converted "$w/$dir.time") | peak RSS $(awk '/Maximum resident/ {printf "%.2f GiB", $6 / 1048576}' "$w/$dir.time")"
done
/usr/bin/python3 "$root/tests/hf/st.py" compare "$w/hf" "$w/back"
