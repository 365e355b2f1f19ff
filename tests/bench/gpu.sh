#!/bin/sh
# GPU training throughput (make bench-gpu).  Not a test.
#
#  1. the device (nvidia-smi) and the date;
#  2. build/bench/gemm_ceiling: bf16/fp16/fp32 GEMM TFLOP/s and add's GB/s through mgt's CUDA
#     backend (the ceiling MFU is also measured against);
#  3. mgt-train --device cuda --bf16 --mock-data:
#       gpt2-124m at seq 1024, micro-batch 8 (or the largest of 8, 4, 2, 1 that runs), global
#       batch 64, 30 iterations (dropout 0.1, Megatron's default);
#       llama-3.2-1b's shape at seq 2048 with its vocabulary (--vocab-size 128256), micro-batch 4
#       (or 2, 1), global batch 16, 20 iterations, dropout 0;
#       a Mixtral-like small MoE (mixtral-8x7b's layer at h 2048, 8 layers, 8 experts of 4096,
#       top-2, router in fp32) at seq 2048, micro-batch 4 (or 2, 1), global batch 16, 20 iterations;
#     and, with a dataset argument, both again on it (GPT-2 tokenizer; llama's shape then has
#     GPT-2's vocabulary).
#  From each run's --metrics-file, after 5 warm-up iterations: median iteration time, tokens/s,
#  TFLOP/s per GPU (Megatron's FLOPs formula, mgt_model_flops), MFU against the H100/H200 dense
#  bf16 peak (989 TFLOP/s; PEAK_TFLOPS) and against the measured bf16 GEMM ceiling; the memory
#  lines of the log (computed vs peak device memory) and the last loss.
#
# Usage: tests/bench/gpu.sh [PREFIX | kjv]
#   PREFIX  a tokenized dataset (PREFIX.bin, PREFIX.idx; GPT-2 BPE token ids)
#   kjv     tokenize the bundled King James Bible (share/mgt/data/kjv.jsonl.zst) with the GPT-2
#           tokenizer first, as contrib/demo.sh does (a few seconds)
# Environment: MGT_BIN (directory with mgt-train and mgt-preprocess; default bin/, else
#   build/bundle/bin), GEMM_CEILING (default build/bench/gemm_ceiling, else
#   build/bundle/bench/gemm_ceiling), PEAK_TFLOPS (989), RUN_TIMEOUT (300 s per run), GPT2_MBS
#   ("8 4 2 1"), LLAMA_MBS ("4 2 1"), MOE_MBS ("4 2 1"), GPT2_ITERS (30), LLAMA_ITERS (20),
#   MOE_ITERS (20), PY (python3), MOE (1: the Mixtral-like run; 0 skips it), GPT2_BIG_MBS (empty;
#   e.g. "64 32 16": gpt2-124m again at the largest of these that runs, and PyTorch at it unless
#   TORCH_BIG=0),
#   AB (empty; NAME=VALUE ...: gpt2-124m at micro-batch 8 again with each environment switch),
#   AB_LLAMA (the same for llama-3.2-1b at micro-batch 4),
#   FP8 (1: fp8 against bf16 (issue 31), on GPUs with fp8: llama-3.2-1b at micro-batch 4 with
#   --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max (Megatron's Llama 3
#   recipe) beside the bf16 run above, and llama-3.1-8b's shape at 2 layers, seq 8192, micro-batch
#   1, global batch 8, in bf16 and in fp8; 0 skips them; FP8_ITERS, default 12),
#   HYBRID (1: mamba2-130m at seq 2048, micro-batch 8 (or 4, 2, 1), global batch 16, and
#   PyTorch's chunked-SSD reference path (tests/bench/torch_mamba_bench.py) at the same
#   micro-batch unless TORCH=0; 0 skips them; HYBRID_ITERS, default 20).
# Raw results: tests/bench/results/gpu-<device>-<date>.txt (also copied to $OUT when set, after
# every case, so that a run cut short still leaves its results there).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${1:-}
PEAK=${PEAK_TFLOPS:-989}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
PY=${PY:-python3}
if [ -z "${MGT_BIN:-}" ]; then
	MGT_BIN=$ROOT/bin
	[ -x "$MGT_BIN/mgt-train" ] || [ ! -x "$ROOT/build/bundle/bin/mgt-train" ] || MGT_BIN=$ROOT/build/bundle/bin
fi
TRAIN=$MGT_BIN/mgt-train
if [ -z "${GEMM_CEILING:-}" ]; then
	GEMM_CEILING=$ROOT/build/bench/gemm_ceiling
	[ -x "$GEMM_CEILING" ] || [ ! -x "$ROOT/build/bundle/bench/gemm_ceiling" ] ||
		GEMM_CEILING=$ROOT/build/bundle/bench/gemm_ceiling
fi
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
SLUG=$(printf '%s' "${NAME:-unknown}" | tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9][^a-z0-9]*/-/g; s/^-//; s/-$//')
STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$ROOT/tests/bench/results"
RES=$ROOT/tests/bench/results/gpu-${SLUG:-unknown}-$STAMP.txt
W=$(mktemp -d "${TMPDIR:-/tmp}/mgt-bench-gpu.XXXXXX")
G=$ROOT/share/mgt/tokenizers/gpt2
TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt"

# save: the results so far to $OUT (the device tool returns only files under $OUT)
save() {
	if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$RES" "$OUT/" 2>/dev/null; fi
}

# summarize TAG LOG JSONL MBS: the figures of one run
summarize() {
	$PY - "$1" "$2" "$3" "$4" "$PEAK" "${CEIL:-}" <<-'EOF'
	import json, re, statistics, sys
	tag, log, jsonl, mbs, peak, ceil = sys.argv[1:7]
	peak = float(peak)
	ceil = float(ceil) if ceil else None
	try:
	    rows = [json.loads(l) for l in open(jsonl) if l.strip()]
	except (OSError, ValueError) as e:
	    print("%s: no metrics (%s)" % (tag, e)); sys.exit(0)
	rows = [r for r in rows if "tokens_per_s" in r]
	warm = 5 if len(rows) > 10 else 1
	timed = rows[warm:]
	if not timed:
	    print("%s: too few iterations in the metrics (%d)" % (tag, len(rows))); sys.exit(0)
	med = lambda k: statistics.median(float(r[k]) for r in timed)
	ms, tok, tf = med("elapsed_ms"), med("tokens_per_s"), med("tflops")
	print("%s: micro-batch %s, %d iterations (median of the last %d)" % (tag, mbs, len(rows), len(timed)))
	print("  iteration %.1f ms | %.0f tokens/s | %.1f TFLOP/s per GPU | MFU %.1f%% of %g TFLOP/s%s"
	      % (ms, tok, tf, 100 * tf / peak, peak,
	         " | %.1f%% of the measured bf16 GEMM ceiling %.1f TFLOP/s" % (100 * tf / ceil, ceil) if ceil else ""))
	if "mfu" in timed[0]:
	    print("  (metrics file mfu: %.4f)" % med("mfu"))
	fwd = [k for k in ("time_fwd_ms", "time_bwd_ms", "time_opt_ms") if k in timed[0]]
	if fwd:
	    print("  " + " | ".join("%s %.1f ms" % (k[5:8], med(k)) for k in fwd))
	loss = [float(r["lm_loss"]) for r in rows]
	skipped = sum(1 for r in rows if r.get("skipped"))
	print("  lm loss %.4f -> %.4f, %d skipped iterations" % (loss[0], loss[-1], skipped))
	comp = peakmem = None
	for line in open(log, errors="replace"):
	    if "memory" in line and ("computed" in line or "peak device memory" in line):
	        print("  " + line.strip())
	        m = re.search(r"computed ([0-9.]+) MiB", line)
	        p = re.search(r"peak device memory ([0-9.]+) MiB", line)
	        if m: comp = float(m.group(1))
	        if p: peakmem = float(p.group(1))
	if comp and peakmem:
	    print("  peak device memory / computed: %.0f / %.0f MiB = %.3f" % (peakmem, comp, peakmem / comp))
	thr = re.findall(r"throughput per GPU \(TFLOP/s/GPU\): ([0-9.]+)", open(log, errors="replace").read())
	if thr:
	    print("  log line TFLOP/s/GPU (last): %s" % thr[-1])
	EOF
}

# case TAG MODEL SEQ GBS ITERS "MBS..." FLAGS...: the first micro-batch size that runs
run_case() {
	tag=$1 model=$2 seq=$3 gbs=$4 iters=$5 mbss=$6
	shift 6
	for mbs in $mbss; do
		log=$W/$tag-mbs$mbs.log jsonl=$W/$tag-mbs$mbs.jsonl
		rm -f "$jsonl"
		echo "# $tag: mgt-train --model $model --seq-length $seq --micro-batch-size $mbs --global-batch-size $gbs --train-iters $iters --bf16 $*"
		t0=$(date +%s)
		# shellcheck disable=SC2086
		timeout "$RUN_TIMEOUT" "$TRAIN" --model "$model" --device cuda --bf16 --seq-length "$seq" \
			--micro-batch-size "$mbs" --global-batch-size "$gbs" --train-iters "$iters" \
			--lr 3e-4 --min-lr 3e-5 --lr-warmup-iters 5 --lr-decay-style cosine --eval-interval 0 \
			--log-interval 10 --log-throughput --peak-tflops "$PEAK" --seed 1234 \
			--metrics-file "$jsonl" "$@" >"$log" 2>&1
		rc=$?
		echo "# exit $rc after $(( $(date +%s) - t0 )) s"
		if [ $rc = 0 ]; then
			grep 'iteration .*lm loss' "$log" | sed 's/^/#   /'
			summarize "$tag" "$log" "$jsonl" "$mbs"
			echo "$mbs" >"$W/$tag.mbs"
			echo
			return 0
		fi
		tail -4 "$log" | sed 's/^/#   /'
		if [ $rc = 124 ]; then
			echo "$tag: timed out after $RUN_TIMEOUT s at micro-batch $mbs (not retried)"
			echo
			return 1
		fi
		echo "# micro-batch $mbs failed (out of memory?); trying a smaller one"
	done
	echo "$tag: failed at every micro-batch size ($mbss)"
	echo
	return 1
}

# torch_case TAG MODEL SEQ GBS ITERS FLAGS...: PyTorch on the same GPU (tests/bench/torch_gpu_bench.py)
# at the micro-batch size the mgt run TAG used; tokens/s of both and their ratio
torch_case() {
	tag=$1 model=$2 seq=$3 gbs=$4 iters=$5
	shift 5
	TPY=${TORCH_PY:-python3}
	if ! $TPY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
		echo "$tag torch: no PyTorch with CUDA ($TPY), skipped"; return 1
	fi
	[ -s "$W/$tag.mbs" ] || { echo "$tag torch: no mgt run to compare with, skipped"; return 1; }
	mbs=$(cat "$W/$tag.mbs") jsonl=$W/$tag-mbs$(cat "$W/$tag.mbs").jsonl
	echo "# $tag torch: torch_gpu_bench.py --model $model --seq-length $seq --micro-batch-size $mbs --global-batch-size $gbs --iters $iters $*"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	timeout "$RUN_TIMEOUT" $TPY "$ROOT/tests/bench/torch_gpu_bench.py" --model "$model" --seq-length "$seq" \
		--micro-batch-size "$mbs" --global-batch-size "$gbs" --iters "$iters" "$@" >"$W/$tag-torch.json" 2>"$W/$tag-torch.err"
	echo "# exit $? after $(( $(date +%s) - t0 )) s"
	grep -v '^\s*$' "$W/$tag-torch.err" | tail -5 | sed 's/^/#   /'
	cat "$W/$tag-torch.json"
	$PY - "$tag" "$jsonl" "$W/$tag-torch.json" "$PEAK" <<-'EOF'
	import json, statistics, sys
	tag, jsonl, tj, peak = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
	rows = [json.loads(l) for l in open(jsonl) if l.strip()]
	rows = [r for r in rows if "tokens_per_s" in r]
	timed = rows[5 if len(rows) > 10 else 1:]
	mt = statistics.median(float(r["tokens_per_s"]) for r in timed)
	mf = statistics.median(float(r["tflops"]) for r in timed)
	try:
	    t = json.load(open(tj))
	except ValueError:
	    print("%s: torch printed no result" % tag); sys.exit(0)
	tt = t["tokens_per_s"]
	print("%s: mgt %.0f tokens/s, torch (%s) %.0f tokens/s: mgt/torch %.3f; torch at Megatron's FLOPs %.1f TFLOP/s (MFU %.1f%%), peak memory %.0f MiB"
	      % (tag, mt, t["mode"], tt, mt / tt, mf * tt / mt, 100 * mf * tt / mt / peak, t["peak_memory_mib"]))
	EOF
	echo
}

bench() {
	echo "# bench-gpu $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
	echo "# device: ${NAME:-unknown (nvidia-smi failed)}"
	nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv 2>&1 | sed 's/^/# /'
	nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used --format=csv 2>&1 | sed 's/^/# at start: /'
	echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
	echo "# mgt-train: $TRAIN"
	if [ ! -x "$TRAIN" ]; then
		echo "bench-gpu: $TRAIN is not built"
		return 1
	fi
	echo
	echo "## GEMM and memory ceilings through the CUDA backend ($GEMM_CEILING)"
	CEIL=
	if [ -x "$GEMM_CEILING" ]; then
		timeout 300 "$GEMM_CEILING" 2>&1 | tee "$W/gemm.txt"
		CEIL=$(sed -n 's/^gemm-typed bf16 8192^3: \([0-9.]*\) TFLOP.*/\1/p' "$W/gemm.txt")
		[ -n "$CEIL" ] || CEIL=$(sed -n 's/^gemm bf16 8192^3: \([0-9.]*\) TFLOP.*/\1/p' "$W/gemm.txt")
	else
		echo "gemm_ceiling is not built"
	fi
	echo
	save

	echo "## mock data (--mock-data)"
	run_case gpt2-124m-mock gpt2-124m 1024 64 "${GPT2_ITERS:-30}" "${GPT2_MBS:-8 4 2 1}" --mock-data
	save
	run_case llama-3.2-1b-mock llama-3.2-1b 2048 16 "${LLAMA_ITERS:-20}" "${LLAMA_MBS:-4 2 1}" --mock-data \
		--vocab-size 128256 --hidden-dropout 0 --attention-dropout 0
	save
	# PyTorch (torch.compile) at the same two shapes, early: mgt/PyTorch in the same call is the
	# figure wanted most, before the optional runs below
	if [ "${TORCH:-1}" = 1 ]; then
		echo "## PyTorch on the same GPU, the same shapes (random token ids)"
		torch_case gpt2-124m-mock gpt2-124m 1024 64 "${GPT2_ITERS:-30}"
		save
		torch_case llama-3.2-1b-mock llama-3.2-1b 2048 16 "${LLAMA_ITERS:-20}" --vocab-size 128256
		save
	fi
	# gpt2-124m at the largest micro-batch of GPT2_BIG_MBS that runs (llm.c trains it at 64)
	if [ -n "${GPT2_BIG_MBS:-}" ]; then
		run_case gpt2-124m-big gpt2-124m 1024 64 "${GPT2_ITERS:-30}" "$GPT2_BIG_MBS" --mock-data
		save
		if [ "${TORCH:-1}" = 1 ] && [ "${TORCH_BIG:-1}" = 1 ]; then
			torch_case gpt2-124m-big gpt2-124m 1024 64 "${GPT2_ITERS:-30}"
			save
		fi
	fi
	# A/B variants: gpt2-124m at micro-batch 8 again under each NAME=VALUE of AB (environment
	# switches such as MGT_ATTN_KERNEL=mma-nocp), beside the default run above
	for ab in ${AB:-}; do
		abn=${ab%%=*} abv=${ab#*=}
		export "$abn=$abv"
		run_case "gpt2-124m-$abn-$abv" gpt2-124m 1024 64 "${GPT2_ITERS:-30}" 8 --mock-data
		unset "$abn"
		save
	done
	for ab in ${AB_LLAMA:-}; do
		abn=${ab%%=*} abv=${ab#*=}
		export "$abn=$abv"
		run_case "llama-3.2-1b-$abn-$abv" llama-3.2-1b 2048 16 "${LLAMA_ITERS:-20}" 4 --mock-data \
			--vocab-size 128256 --hidden-dropout 0 --attention-dropout 0
		unset "$abn"
		save
	done
	if [ "${FP8:-1}" = 1 ] && grep -q '^gemm fp8 8192' "$W/gemm.txt" 2>/dev/null; then
		F8="--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
		# shellcheck disable=SC2086
		run_case llama-3.2-1b-fp8 llama-3.2-1b 2048 16 "${FP8_ITERS:-12}" 4 --mock-data \
			--vocab-size 128256 --hidden-dropout 0 --attention-dropout 0 $F8
		save
		L8="--vocab-size 128256 --num-layers 2 --hidden-dropout 0 --attention-dropout 0"
		# shellcheck disable=SC2086
		run_case llama-8b-2l-bf16 llama-3.1-8b 8192 8 "${FP8_ITERS:-12}" 1 --mock-data $L8
		save
		# shellcheck disable=SC2086
		run_case llama-8b-2l-fp8 llama-3.1-8b 8192 8 "${FP8_ITERS:-12}" 1 --mock-data $L8 $F8
		save
	fi
	if [ "${HYBRID:-1}" = 1 ]; then
		# issue 48: the 130M-like Mamba-2 (24 Mamba-2 layers; the mixer's conv, scan and gated norm
		# in fp32: kernels/mamba.cu, ssd.cu) at seq 2048, and PyTorch's reference path (the
		# chunked SSD in torch ops, bf16 autocast) at the micro-batch mgt ran
		run_case mamba2-130m-mock mamba2-130m 2048 16 "${HYBRID_ITERS:-20}" "${HYBRID_MBS:-8 4 2 1}" --mock-data \
			--vocab-size 50280 --hidden-dropout 0 --attention-dropout 0 --max-position-embeddings 2048
		save
		if [ "${TORCH:-1}" = 1 ] && [ -s "$W/mamba2-130m-mock.mbs" ]; then
			mbs=$(cat "$W/mamba2-130m-mock.mbs")
			echo "# mamba2-130m torch: torch_mamba_bench.py --device cuda --bf16 --seq-length 2048 --micro-batch-size $mbs"
			timeout "$RUN_TIMEOUT" "${TORCH_PY:-python3}" "$ROOT/tests/bench/torch_mamba_bench.py" --device cuda --bf16 \
				--seq-length 2048 --micro-batch-size "$mbs" --vocab 50304 --iters 10 --warmup 2 \
				>"$W/mamba2-torch.json" 2>"$W/mamba2-torch.err"
			echo "# exit $?"; tail -3 "$W/mamba2-torch.err" | sed 's/^/#   /'; cat "$W/mamba2-torch.json"
			save
		fi
	fi
	if [ "${MOE:-1}" = 1 ]; then
		# a Mixtral-like small shape (issue 17): Mixtral's layer with h 2048, 8 experts of 4096,
		# top-2, 8 layers (1.7B parameters, 0.5B active), router in fp32, aux loss 1e-2
		run_case mixtral-small-mock mixtral-8x7b 2048 16 "${MOE_ITERS:-20}" "${MOE_MBS:-4 2 1}" --mock-data \
			--vocab-size 32000 --num-layers 8 --hidden-size 2048 --ffn-hidden-size 4096 --moe-ffn-hidden-size 4096 \
			--num-attention-heads 16 --num-query-groups 8 --moe-router-dtype fp32 --hidden-dropout 0 --attention-dropout 0
		save
	fi

	if [ -n "$DATA" ]; then
		if [ "$DATA" = kjv ]; then
			src=$ROOT/share/mgt/data/kjv.jsonl.zst
			[ -f "$src" ] || src=$ROOT/../shared/data/kjv/kjv.jsonl.zst
			mkdir -p "$W/data"
			echo "## tokenizing $src (GPT-2 BPE)"
			# shellcheck disable=SC2086
			if timeout 300 "$MGT_BIN/mgt-preprocess" --input "$src" --output-prefix "$W/data/kjv" $TOK \
				--append-eod --quiet >"$W/preprocess.log" 2>&1; then
				DATA=$W/data/kjv_text_document
			else
				tail -3 "$W/preprocess.log"
				DATA=
			fi
		fi
		if [ -n "$DATA" ] && [ -f "$DATA.bin" ] && [ -f "$DATA.idx" ]; then
			echo "## dataset $DATA"
			mkdir -p "$W/cache"
			# shellcheck disable=SC2086
			run_case gpt2-124m-data gpt2-124m 1024 64 "${GPT2_ITERS:-30}" "${GPT2_MBS:-8 4 2 1}" \
				--data-path "$DATA" --split 969,30,1 --data-cache-path "$W/cache" $TOK
			save
			# shellcheck disable=SC2086
			run_case llama-3.2-1b-data llama-3.2-1b 2048 16 "${LLAMA_ITERS:-20}" "${LLAMA_MBS:-4 2 1}" \
				--data-path "$DATA" --split 969,30,1 --data-cache-path "$W/cache" $TOK \
				--hidden-dropout 0 --attention-dropout 0
		else
			echo "## dataset ${DATA:-}: not found (PREFIX.bin and PREFIX.idx), skipped"
		fi
	fi
	nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used --format=csv 2>&1 | sed 's/^/# at end: /'
	echo "# done $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
}

bench 2>&1 | tee "$RES"
save
echo "saved $RES${OUT:+ (and copied to $OUT)}"
rm -rf "$W"
