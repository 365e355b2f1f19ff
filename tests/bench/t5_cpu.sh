#!/bin/sh
# CPU training throughput of T5, mgt-train --model t5-base-megatron (--model-family t5, Megatron's
# 220M example's shape: encoder 512 / decoder 128 tokens) against PyTorch
# (tests/bench/torch_t5_bench.py: the same model in float32 with SDPA, fused AdamW), same shape,
# micro-batch and thread count, run one after the other.  Not a test.  mgt-train trains on KJV
# split into sentences (mgt-preprocess --split-sentences, BertWordPieceCase); torch on random ids
# with an eighth of the encoder's positions padding (the work does not depend on the values).
# Tokens are the encoder's (Megatron's seq_length x batch).  Prints tokens/s of each and the
# ratio; raw output to tests/bench/results/t5_cpu-DATE.txt.
#
# Usage: tests/bench/t5_cpu.sh [THREADS]      (default 2)
# Environment: SEQ (512), DSEQ (128), MBS (2), ITERS (3 timed after 1 warm-up), LAYERS (12)
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-2}
SEQ=${SEQ:-512} DSEQ=${DSEQ:-128} MBS=${MBS:-2} ITERS=${ITERS:-3} LAYERS=${LAYERS:-12}
PY=${PY:-/usr/bin/python3}
B=$ROOT/build/bench/t5_cpu
mkdir -p "$B" "$ROOT/tests/bench/results"
OUT=$ROOT/tests/bench/results/t5_cpu-$(date +%Y%m%d-%H%M%S).txt
VOCAB=$ROOT/share/mgt/tokenizers/bert/vocab.txt
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[ -s "$B/kjv_text_sentence.idx" ] || "$ROOT/bin/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" \
	--output-prefix "$B/kjv" --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --split-sentences \
	--workers "$THREADS" >/dev/null
N=$((ITERS + 1))
"$ROOT/bin/mgt-train" --model t5-base-megatron --num-layers "$LAYERS" --seq-length "$SEQ" \
	--decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" \
	--global-batch-size "$MBS" --train-iters "$N" --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --init-method-std 0.015 --log-interval 1 \
	--eval-interval 0 --tokenizer-type BertWordPieceCase --vocab-file "$VOCAB" --data-path "$B/kjv_text_sentence" \
	--device cpu --threads "$THREADS" --metrics-file "$B/mgt.jsonl" >"$B/mgt.log" 2>&1
# Debian's OpenBLAS 0.3.21 falls back to its SSE3 kernels on CPUs it does not know, where mgt-train
# picks the AVX ones itself (lib/backend/cpu.c): torch runs again with OPENBLAS_CORETYPE set so
CORE=$($PY -c 'import ctypes
l = ctypes.CDLL("libblas.so.3"); l.openblas_get_corename.restype = ctypes.c_char_p
core = l.openblas_get_corename().decode()
flags = set(open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split())
if core == "Prescott" and {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags: print("SkylakeX")
elif core == "Prescott" and {"avx2", "fma"} <= flags: print("Haswell")' 2>/dev/null || true)
$PY "$ROOT/tests/bench/torch_t5_bench.py" --layers "$LAYERS" --seq-length "$SEQ" \
	--decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" \
	--iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch.json"
echo '{}' >"$B/torch-blasfix.json"
[ -z "$CORE" ] || OPENBLAS_CORETYPE=$CORE $PY "$ROOT/tests/bench/torch_t5_bench.py" --layers "$LAYERS" \
	--seq-length "$SEQ" --decoder-seq-length "$DSEQ" --micro-batch-size "$MBS" --iters "$ITERS" --warmup 1 --threads "$THREADS" >"$B/torch-blasfix.json"
$PY - "$B/mgt.jsonl" "$B/torch.json" "$THREADS" "$SEQ" "$MBS" "$LAYERS" "$B/torch-blasfix.json" "$CORE" <<'PY' | tee "$OUT"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
t = json.load(open(sys.argv[2]))
ms = sum(o["elapsed_ms"] for o in m) / len(m) / 1e3
mt = int(sys.argv[5]) * int(sys.argv[4]) / ms
print("# t5-base-megatron (%s + %s layers) encoder %s / decoder 128, micro-batch %s, %s threads, CPU; means of %d timed iterations after 1" %
      (sys.argv[6], sys.argv[6], sys.argv[4], sys.argv[5], sys.argv[3], len(m)))
print("%-8s %12s %12s" % ("impl", "s/iter", "tokens/s"))
print("%-8s %12.3f %12.1f" % ("mgt", ms, mt))
print("%-8s %12.3f %12.1f" % ("torch", t["iter_s"], t["tokens_per_s"]))
print("mgt/torch tokens/s: %.2f" % (mt / t["tokens_per_s"]))
f = json.load(open(sys.argv[7]))
if f:
    print("%-8s %12.3f %12.1f   (torch with OPENBLAS_CORETYPE=%s)" % ("torch-bf", f["iter_s"], f["tokens_per_s"], sys.argv[8]))
    print("mgt/torch-blasfix tokens/s: %.2f" % (mt / f["tokens_per_s"]))
print("# torch %s" % json.dumps(t))
if f: print("# torch-blasfix %s" % json.dumps(f))
PY
