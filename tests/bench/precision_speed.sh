#!/bin/sh
# CPU tokens/s of mgt-train in fp32, bf16 and fp16 (mock data, 2 threads): the mean of iterations 2.. of each run
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
cd "${TMPDIR:-/tmp}" && B=${MGT_BIN:-$root/bin}
echo "# precision speed $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(git -C "$root" rev-parse --short HEAD)"
for c in "tiny-gpt2 128 8 12" "gpt2-124m 1024 1 4"; do
	set -- $c
	for p in fp32 bf16 fp16; do
		f=; [ $p = fp32 ] || f=--$p
		rm -f sp.jsonl
		$B/mgt-train --model $1 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --seq-length $2 \
			--micro-batch-size $3 --global-batch-size $3 --train-iters $4 --lr 1e-4 --eval-interval 0 --log-interval 1 \
			--threads 2 --device cpu --metrics-file sp.jsonl $f $( [ $p = fp16 ] && echo --loss-scale 1024 ) >/dev/null 2>&1 || { echo "$1 $p failed"; continue; }
		/usr/bin/python3 -c "
import json
r=[json.loads(l) for l in open('sp.jsonl') if 'elapsed_ms' in l][1:]
ms=sum(x['elapsed_ms'] for x in r)/len(r)
print('%-10s %-5s seq %5d mbs %d: %8.1f ms/iter, %8.0f tokens/s (mean of %d iterations)' % ('$1','$p',$2,$3,ms,$2*$3/ms*1e3,len(r)))"
	done
done
