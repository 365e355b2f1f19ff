#!/bin/sh
# mgt-plan against Megatron-Core's published weak-scaling table (GPT, H100, sequence 4096,
# vocabulary 131072; Megatron-LM's README, its performance table, copied below): for every row at
# both scales, the per-GPU TFLOP/s mgt-plan predicts for NVIDIA's layout (TP, PP, DP as
# published; micro-batch 1, no recomputation, bf16, the distributed optimizer, sequence
# parallelism with TP > 1, gradient/parameter/TP overlap as Megatron-LM's README states; the
# virtual pipeline size, not published, is chosen by mgt-plan), its error, and the layout
# mgt-plan picks by itself (searching everything, memory as mgt-train allocates it) with its
# predicted TFLOP/s.  Prints the mean absolute percentage error (the issue asks < 15%) and the
# time of the 509B row's full search.
#
# Twice: with the dgx-h100 preset's "efficiency" set to 1 (the roofline: the rates of the
# GEMM-ceiling benchmark and the sources in mgt-plan(5)), then with the preset as shipped, whose
# efficiency (0.869) comes from our own end-to-end measurement on the same H100 -- PyTorch
# (torch.compile) training llama-3.2-1b, sequence 2048, micro-batch 4, bf16, in
# tests/bench/results/gpu-*.txt -- as measured / what mgt-plan predicts for that run at
# efficiency 1 (printed first, to compare with the preset's).  No number of the table enters
# either.  Exit 1 when the second error is 15% or more.
#
#   sh tests/bench/plan_weak_scaling.sh [MGT_PLAN]
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
plan=${1:-$root/bin/mgt-plan}
[ -x "$plan" ] || { echo "no $plan (run make)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plan-ws.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# model | hidden layers heads | TP PP | DP small large | GPUs small large | GBS | TFLOP/s small large
rows='2.1B 2304 24 24 1 1 16 64 16 64 256 441 412
4.2B 3072 30 32 2 1 16 64 32 128 256 431 415
8.3B 4096 36 32 4 1 16 64 64 256 256 457 426
19.7B 6144 40 48 8 1 16 64 128 512 512 439 429
41B 8192 48 64 8 1 32 128 256 1024 768 469 439
78B 10240 60 80 8 2 32 96 512 1536 960 446 418
148B 12288 80 96 8 4 24 72 768 2304 1152 456 432
314B 16384 96 128 8 8 16 48 1024 3072 1152 490 464
509B 20480 100 128 8 20 8 24 1280 3840 1440 473 426'

results=$(ls "$root"/tests/bench/results/gpu-nvidia-h100-*.txt | tail -1)
measured=$(sed -n "s/^llama-3.2-1b-mock: .*torch at Megatron's FLOPs \([0-9.]*\) TFLOP\/s.*/\1/p" "$results")
[ -n "$measured" ] || { echo "no torch llama-3.2-1b line in $results" >&2; exit 2; }
share=$(cd "$(dirname "$plan")/../share/mgt" && pwd)
/usr/bin/python3 - "$share/clusters/dgx-h100.json" "$tmp/h100-roofline.json" <<'PY' || exit 1
import json, sys
c = json.load(open(sys.argv[1])); c["efficiency"] = 1; c["name"] = "dgx-h100-roofline"
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
"$plan" --model llama-3.2-1b --vocab-size 128256 --seq-length 2048 --global-batch-size 16 --micro-batch-size 4 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --recompute-granularity none --bf16 \
	--cluster "$tmp/h100-roofline.json" --gpus-per-node 1 --ignore-memory --top 1 --output "$tmp/torch.json" || exit 1
eff=$(/usr/bin/python3 -c "import json,sys; print('%.3f' % (float(sys.argv[2]) / json.load(open(sys.argv[1]))['plans'][0]['tflops_per_gpu']))" \
	"$tmp/torch.json" "$measured") || exit 1
echo "calibration: torch.compile llama-3.2-1b on our H100 measured $measured TFLOP/s ($results);"
echo "mgt-plan predicts $(/usr/bin/python3 -c "import json; print('%.1f' % json.load(open('$tmp/torch.json'))['plans'][0]['tflops_per_gpu'])") at efficiency 1: efficiency $eff"
echo "the dgx-h100 preset's efficiency: $(/usr/bin/python3 -c "import json; print(json.load(open('$share/clusters/dgx-h100.json')).get('efficiency', 1))")"
for cluster in "$tmp/h100-roofline.json" dgx-h100; do
echo
echo "== cluster $(basename "$cluster" .json)"
common="--cluster $cluster --bf16 --seq-length 4096 --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap"
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['plans'][0]; print($2)" "$1"; }

sum=0; count=0; : > "$tmp/timing"
printf '%-6s %5s | %-22s %9s %9s %7s | %-34s %9s %6s\n' model GPUs "NVIDIA layout" published predicted error \
	"mgt-plan's pick (TP PP VP DP MBS rc)" predicted "fits"
echo "$rows" > "$tmp/rows"
while read -r name h L heads tp pp dps dpl gs gl gbs fs fl; do
	cat > "$tmp/$name.json" <<JSON
{"num_layers": $L, "hidden_size": $h, "num_attention_heads": $heads, "ffn_hidden_size": $((4 * h)),
 "seq_length": 4096, "max_position_embeddings": 4096, "position_embedding_type": "learned_absolute",
 "normalization": "LayerNorm", "untie_embeddings_and_output_weights": true, "vocab_size": 131072}
JSON
	for scale in small large; do
		if [ $scale = small ]; then g=$gs; pub=$fs; else g=$gl; pub=$fl; fi
		nodes=$((g / 8))
		sp=""; [ "$tp" -gt 1 ] && sp=--sequence-parallel
		"$plan" --model "$tmp/$name.json" $common --nodes $nodes --global-batch-size $gbs \
			--tensor-model-parallel-size $tp --pipeline-model-parallel-size $pp --micro-batch-size 1 \
			--recompute-granularity none --use-distributed-optimizer $sp --ignore-memory --top 1 \
			--output "$tmp/fixed.json" --overwrite || exit 1
		pred=$(json "$tmp/fixed.json" "'%.1f' % p['tflops_per_gpu']")
		vp=$(json "$tmp/fixed.json" "p['virtual_stages_per_pipeline_rank']")
		t0=$(date +%s.%N)
		"$plan" --model "$tmp/$name.json" $common --nodes $nodes --global-batch-size $gbs --top 1 \
			--output "$tmp/free.json" --overwrite > "$tmp/free.err" 2>&1
		rc=$?
		t1=$(date +%s.%N)
		if [ $rc = 0 ]; then
			pick=$(json "$tmp/free.json" "'TP%d PP%d VP%d DP%d MBS%d %s' % (p['tensor_model_parallel_size'], p['pipeline_model_parallel_size'], p['virtual_stages_per_pipeline_rank'], p['data_parallel_size'], p['micro_batch_size'], p['recompute']['granularity']) + (' ' + p['data_parallel_sharding_strategy'] if p.get('use_megatron_fsdp') else '')")
			ppred=$(json "$tmp/free.json" "'%.1f' % p['tflops_per_gpu']")
			fits=yes
		else
			pick="none fits: $(head -c 60 "$tmp/free.err")"; ppred=-; fits=no
		fi
		if [ "$name" = 509B ]; then
			echo "509B $scale: full search $(echo "$t1 - $t0" | bc) s (wall, mgt-plan --top 1 incl. start-up)" >> "$tmp/timing"
		fi
		err=$(/usr/bin/python3 -c "print('%+.1f' % (100 * ($pred / $pub - 1)))")
		sum=$(/usr/bin/python3 -c "print($sum + abs($pred / $pub - 1))")
		count=$((count + 1))
		printf '%-6s %5s | TP%-2s PP%-2s VP%-2s DP%-5s %9s %9s %6s%% | %-34s %9s %6s\n' "$name" "$g" "$tp" "$pp" "$vp" \
			"$((g / tp / pp))" "$pub" "$pred" "$err" "$pick" "$ppred" "$fits"
	done
done < "$tmp/rows"
mape=$(/usr/bin/python3 -c "print('%.1f' % (100 * $sum / $count))")
echo "mean absolute percentage error over $count predictions: $mape%"
cat "$tmp/timing"
done
/usr/bin/python3 -c "import sys; sys.exit(0 if $mape < 15 else 1)"
