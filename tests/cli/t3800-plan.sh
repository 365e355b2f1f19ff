#!/bin/sh
# mgt-plan: its memory figure equals what mgt-train computes and allocates for the same layout
# (the "memory before training: computed" line, CPU backend; GPT and hybrid models, a hybrid model
# under context parallelism, whose bytes over the context group equal mgt-train's counted ones and
# whose Mamba terms are in the precision's bytes); the bubble
# and the FLOPs (GPT's and Megatron's hybrid_flops) against hand-computed values; fixed layouts, config.json input, the plan's mgt-train flags; bad input
# and its exit statuses (TAP, run by prove).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
P="$BIN/mgt-plan"
# get FILE EXPR: EXPR of the JSON plan file (d: the document, p: the first plan)
get() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['plans'][0]; print($2)" "$1"; }
same() { [ "$1" = "$2" ] && [ -n "$1" ] || { echo "# '$1' != '$2'"; return 1; }; }

# --- memory: mgt-plan's figure (less the cluster's per-process overhead) against mgt-train's
for mbs in 2 4; do
	"$BIN/mgt-train" --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 \
		--seq-length 64 --micro-batch-size $mbs --global-batch-size 8 --train-iters 1 --device cpu --threads 2 \
		--eval-interval 0 >train$mbs.log 2>&1
	want=$(sed -n 's/^memory before training: computed \([0-9.]*\) MiB.*/\1/p' train$mbs.log)
	"$P" --model tiny-gpt2 --vocab-size 50257 --seq-length 64 --cluster cpu --global-batch-size 8 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size $mbs \
		--recompute-granularity none --output plan$mbs.json 2>err$mbs
	got=$(get plan$mbs.json "'%.1f' % ((p['memory']['total'] - p['memory']['overhead']) / 1048576)")
	ok "micro-batch $mbs: mgt-plan's memory equals mgt-train's computed $want MiB" same "$got" "$want"
done
ok "... and the overhead is the cpu cluster file's" same "$(get plan2.json "int(p['memory']['overhead'])")" \
	"$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['overhead_bytes'])" "$SHARE/clusters/cpu.json")"

# --- hybrid models (issue 48): memory against mgt-train's for two layouts of tiny-hybrid (full
# recomputation is mgt-plan's uniform 1 layer), the
# FLOPs of Megatron's hybrid_flops by hand for the 8B Mamba-2-Hybrid, and a plan that fits it
for lay in "2 none" "4 full"; do
	set -- $lay
	rc=""
	[ "$2" = full ] && rc="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
	"$BIN/mgt-train" --model tiny-hybrid --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 \
		--seq-length 64 --micro-batch-size $1 --global-batch-size 8 --train-iters 1 --device cpu --threads 2 \
		--eval-interval 0 $rc >trainh$1.log 2>&1
	want=$(sed -n 's/^memory before training: computed \([0-9.]*\) MiB.*/\1/p' trainh$1.log)
	"$P" --model tiny-hybrid --vocab-size 50257 --seq-length 64 --cluster cpu --global-batch-size 8 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size $1 \
		--recompute-granularity $2 --output planh$1.json 2>errh$1
	got=$(get planh$1.json "'%.1f' % ((p['memory']['total'] - p['memory']['overhead']) / 1048576)")
	ok "hybrid M*M-, micro-batch $1, recompute $2: mgt-plan's memory equals mgt-train's computed $want MiB" same "$got" "$want"
done
"$P" --model mamba2-hybrid-8b --vocab-size 256000 --global-batch-size 256 --bf16 --cluster dgx-h100 --nodes 2 \
	--output h8b.json 2>h8b.err
ok "the 8B Mamba-2-Hybrid: a plan that fits on 2 DGX H100 nodes, its pattern in the model object" $PY -c "
import json; d = json.load(open('h8b.json')); p = d['plans'][0]
print('# TP %d PP %d DP %d mbs %d: %.1f GiB, %.2f s, MFU %.3f' % (p['tensor_model_parallel_size'],
      p['pipeline_model_parallel_size'], p['data_parallel_size'], p['micro_batch_size'], p['memory']['total'] / 2**30,
      p['time']['iteration'], p['mfu']))
assert p['fits'] and d['model']['hybrid_layer_pattern'].count('M') == 24"
want=$($PY -c "
B, s, h, V, N, G, NH, din, nh, g, kv = 256, 4096, 4096, 256000, 128, 8, 128, 8192, 32, 8, 128
attn = 4 * B * s * h * (kv * nh / h) * (h + h * g / nh + s / 2)
mlp = 4 * 4.0 * B * s * h * h
mamba = 2 * B * s * h * (2 * din + 2 * G * N + NH) + 7 * B * s * din * N + 2 * B * s * din * h
print('%.6e' % (3 * (4 * attn + 28 * mlp + 24 * mamba + 2 * B * s * h * V)))")
ok "its FLOPs equal Megatron's hybrid_flops by hand ($want)" same "$(get h8b.json "'%.6e' % p['model_flops']")" "$want"

# --- hybrid models under context parallelism (issue 48 item 9): tiny-hybrid (M*M-) CP2 on 2
# processes, fp32 and bf16: the plan's bytes over the context group an iteration (the attention
# layer's ring, the Mamba layers' all-to-alls, in the precision's bytes) equal what mgt-train's
# --comm-log counts on each rank and what comm_volume.py computes, and its memory mgt-train's
# computed; the plan's cp_comm time is those bytes and steps on the link (a Mamba-only pattern,
# whose all-to-alls nothing hides); the Mamba mixer's traffic in the precision's bytes (a
# bandwidth-bound cluster: bf16 compute half of fp32's)
sed -e 's/"gpus_per_node": 1/"gpus_per_node": 2/' "$SHARE/clusters/cpu.json" > cpu2.json
CPL="--model tiny-hybrid --vocab-size 50257 --seq-length 64 --global-batch-size 8 --micro-batch-size 2 --context-parallel-size 2"
for prec in fp32 bf16; do
	pf=""; [ $prec = bf16 ] && pf=--bf16
	"$P" $CPL --cluster cpu2.json --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
		--recompute-granularity none --use-distributed-optimizer $pf --output cp$prec.json 2>cp$prec.perr
	ok "hybrid CP2 $prec: a plan (DP 1, CP 2 in its args)" $PY -c "
import json; p = json.load(open('cp$prec.json'))['plans'][0]; a = p['args']
assert p['context_parallel_size'] == 2 and p['data_parallel_size'] == 1, p
assert a[a.index('--context-parallel-size') + 1] == '2' and a[a.index('--cp-comm-type') + 1] == 'p2p', a"
	if command -v mpirun >/dev/null 2>&1; then
		sh "$ROOT/tests/mpirun.sh" 2 "$BIN/mgt-train" $CPL --mock-data --tokenizer-type NullTokenizer --train-iters 1 \
			--device cpu --threads 1 --eval-interval 0 --use-distributed-optimizer $pf --comm-log cl$prec \
			>cptr$prec.log 2>&1 </dev/null
		want=$(sed -n 's/^memory before training: computed \([0-9.]*\) MiB.*/\1/p' cptr$prec.log)
		ok "... its memory equals mgt-train's computed $want MiB" same \
			"$(get cp$prec.json "'%.1f' % ((p['memory']['total'] - p['memory']['overhead']) / 1048576)")" "$want"
		ok "... its context bytes equal mgt-train's counted on both ranks" $PY -c "
import json; want = json.load(open('cp$prec.json'))['plans'][0]['cp_bytes']
for r in (0, 1):
    got = [json.loads(l)['bytes']['context'] for l in open('cl$prec.rank%d.jsonl' % r)]
    print('# rank %d: counted %s, planned %.0f' % (r, got, want))
    assert got and all(g == want for g in got), (got, want)"
		ok "... and comm_volume.py's analytic ones" $PY "$ROOT/tests/cli/comm_volume.py" "$SHARE/models/tiny-hybrid.json" \
			cl$prec 2 mbs=2 gbs=8 seq=64 vocab=50304 cp=2 distopt=1 prec=$prec
	else
		skip "mpirun not found: CP2 $prec memory"; skip "mpirun not found"; skip "mpirun not found"
	fi
done
# recomputation sends the recomputed forwards' exchanges again (mgt-train: selective recomputes
# core attention's exchange, full every layer's, the Mamba all-to-alls included)
for lay in "p2p selective" "a2a full"; do
	set -- $lay
	rc="--recompute-granularity selective"
	[ $2 = full ] && rc="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
	"$P" $CPL --cp-comm-type $1 --cluster cpu2.json --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
		--recompute-granularity $2 --use-distributed-optimizer --bf16 --output cp$1$2.json 2>cp$1$2.perr
	if command -v mpirun >/dev/null 2>&1; then
		sh "$ROOT/tests/mpirun.sh" 2 "$BIN/mgt-train" $CPL --cp-comm-type $1 $rc --mock-data --tokenizer-type NullTokenizer \
			--train-iters 1 --device cpu --threads 1 --eval-interval 0 --use-distributed-optimizer --bf16 \
			--comm-log cl$1$2 >cptr$1$2.log 2>&1 </dev/null
		ok "hybrid CP2 bf16 $1, $2 recomputation: the plan's context bytes equal mgt-train's counted" $PY -c "
import json; want = json.load(open('cp$1$2.json'))['plans'][0]['cp_bytes']
got = [json.loads(l)['bytes']['context'] for r in (0, 1) for l in open('cl$1$2.rank%d.jsonl' % r)]
print('# counted %s, planned %.0f' % (got, want)); assert got and all(g == want for g in got), (got, want)"
	else
		skip "mpirun not found: CP2 $1 $2"
	fi
done
$PY - "$SHARE/models/tiny-hybrid.json" "$SHARE/clusters/cpu.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))
m.update(hybrid_layer_pattern="MMMM", seq_length=4096, max_position_embeddings=4096)
json.dump(m, open("mamba4.json", "w"))
json.dump(dict(m, seq_length=64, max_position_embeddings=64), open("mamba4s.json", "w"))
c.update(name="membound", gemm_tflops=1e6, fp32_tflops=1e6, peak_tflops=1e6, kernel_overhead_us=0)
json.dump(c, open("membound.json", "w"))
PY
for prec in fp32 bf16; do
	pf=""; [ $prec = bf16 ] && pf=--bf16
	"$P" --model ./mamba4s.json --vocab-size 50257 --global-batch-size 8 --micro-batch-size 2 --context-parallel-size 2 \
		--cluster cpu2.json --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --recompute-granularity none \
		$pf --output cpm$prec.json 2>cpm$prec.err
done
ok "Mamba-only CP2: bf16's context bytes are fp32's halved (the all-to-alls in the activations' type)" $PY -c "
import json; b = [json.load(open('cpm%s.json' % x))['plans'][0]['cp_bytes'] for x in ('fp32', 'bf16')]
print('# fp32 %.0f, bf16 %.0f bytes' % tuple(b)); assert b[1] > 0 and b[0] == 2 * b[1], b"
ok "Mamba-only CP2: cp_comm = the bytes on the intra-node link + 2 all-to-alls each way of 1 step, a layer and micro-batch" $PY -c "
import json; p = json.load(open('cpmbf16.json'))['plans'][0]; c = json.load(open('cpu2.json'))
M, L = p['num_microbatches'], 4
want = p['cp_bytes'] / (c['intra_node_bandwidth_gbps'] * 1e9) + M * L * 4 * c['intra_node_latency_us'] * 1e-6
print('# cp_comm %.9g s, bytes %.0f, expected %.9g s' % (p['time']['cp_comm'], p['cp_bytes'], want))
assert p['cp_bytes'] > 0 and abs(p['time']['cp_comm'] - want) <= 1e-9 * want
t = p['time']; parts = sum(t[k] for k in ('compute', 'recompute', 'tp_comm', 'cp_comm', 'pp_comm', 'bubble', 'dp_comm', 'optimizer'))
assert abs(parts - t['iteration']) <= 1e-9 * t['iteration'], (parts, t)"
for prec in fp32 bf16; do
	pf=""; [ $prec = bf16 ] && pf=--bf16
	"$P" --model ./mamba4.json --vocab-size 256 --cluster ./membound.json --global-batch-size 1 --micro-batch-size 1 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --recompute-granularity none --ignore-memory \
		$pf --output mb$prec.json 2>mb$prec.err
done
ok "Mamba-only, bandwidth-bound cluster: bf16's compute time is fp32's halved (the mixer's traffic in 2-byte elements)" $PY -c "
import json; a, b = (json.load(open('mb%s.json' % x))['plans'][0]['time']['compute'] for x in ('fp32', 'bf16'))
print('# fp32 %.6g s, bf16 %.6g s: ratio %.4f' % (a, b, a / b)); assert abs(a / b - 2) < 0.01"

# --- FLOPs: Megatron's formula by hand for gpt2-124m (h 768, 12 layers, padded vocab 50304,
# seq 1024): per token 72 h^2 L + 6 s h L (causal attention) + 6 h V, times the batch's tokens
"$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 64 --bf16 --cluster dgx-h100 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8 --output flops.json 2>/dev/null
want=$($PY -c "h=768;L=12;s=1024;V=50304;print('%.6e' % (64*s*(72*h*h*L+6*s*h*L+6*h*V)))")
ok "model FLOPs equal Megatron's formula by hand ($want)" same "$(get flops.json "'%.6e' % p['model_flops']")" "$want"
ok "... TFLOP/s per GPU = FLOPs / iteration / GPUs" $PY -c "
import json; p=json.load(open('flops.json'))['plans'][0]
assert abs(p['tflops_per_gpu'] - p['model_flops']/p['time']['iteration']/p['gpus']/1e12) < 1e-7 * p['tflops_per_gpu']
assert abs(p['mfu'] - p['tflops_per_gpu']/989) < 1e-9"

# --- the bubble: (p - 1) / (v m) of the steady-state time
bubble() { # PP VP M -> ok when bubble / (M x slowest micro-batch) == (PP - 1) / (VP x M)
	gbs=$3
	"$P" --model tiny-gpt2 --vocab-size 50257 --cluster dgx-h100 --gpus-per-node $1 --global-batch-size $gbs \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size $1 --num-virtual-stages-per-pipeline-rank $2 \
		--micro-batch-size 1 --recompute-granularity none --output b.json --overwrite 2>/dev/null || return 1
	$PY -c "
import json; p=json.load(open('b.json'))['plans'][0]; t=p['time']
steady = t['compute'] + t['recompute'] + t['tp_comm'] + t['pp_comm']
want = ($1 - 1) / ($2 * $3)
assert p['num_microbatches'] == $3, p['num_microbatches']
assert abs(t['bubble'] / steady - want) < 1e-9, (t['bubble'] / steady, want)"
}
ok "bubble PP 4, 8 micro-batches: 3/8" bubble 4 1 8
ok "bubble PP 2 with 2 virtual stages, 4 micro-batches: 1/8" bubble 2 2 4
ok "bubble PP 1: none" bubble 1 1 8

# --- interleaved memory: the slots of mgt-train's schedule (Megatron's warm-up count) make
# the first rank hold more activations than plain 1F1B's min(PP, M)
"$P" --model tiny-gpt2 --vocab-size 50257 --cluster cpu --gpus-per-node 2 --global-batch-size 8 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --micro-batch-size 1 \
	--num-virtual-stages-per-pipeline-rank 1 --recompute-granularity none --output v1.json 2>/dev/null
"$P" --model tiny-gpt2 --vocab-size 50257 --cluster cpu --gpus-per-node 2 --global-batch-size 8 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --micro-batch-size 1 \
	--num-virtual-stages-per-pipeline-rank 2 --recompute-granularity none --output v2.json 2>/dev/null
ok "interleaving holds more activations on the most loaded rank" $PY -c "
import json; a=json.load(open('v1.json'))['plans'][0]; b=json.load(open('v2.json'))['plans'][0]
assert b['memory']['activations'] > a['memory']['activations'], (a['memory'], b['memory'])"

# 16-bit activations under --bf16 (the residual stream too, unless --fp32-residual-connection)
for f in "" "--bf16" "--bf16 --fp32-residual-connection"; do
	n=$(echo "x$f" | tr -d ' -'); n=${n#x}; n=${n:-fp32}
	"$P" --model gpt2-124m --vocab-size 50257 --seq-length 1024 --cluster cpu --gpus-per-node 1 --global-batch-size 8 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 \
		--recompute-granularity none --ignore-memory $f --output "prec-$n.json" 2>/dev/null
done
ok "bf16 activations about half of fp32's, the fp32 residual between (gpt2-124m seq 1024)" $PY -c "
import json; A=lambda n: json.load(open('prec-%s.json' % n))['plans'][0]['memory']['activations']
a, b, c = A('fp32'), A('bf16'), A('bf16fp32residualconnection')
print('# activations MiB: fp32 %.1f, bf16 %.1f (%.3fx), bf16 fp32 residual %.1f' % (a/2**20, b/2**20, b/a, c/2**20))
assert 0.45 < b / a < 0.55 and b < c < a, (a, b, c)"
ok "... and the plan passes --fp32-residual-connection on to mgt-train" $PY -c "
import json; d=json.load(open('prec-bf16fp32residualconnection.json'))
assert d['fp32_residual_connection'] and '--fp32-residual-connection' in d['plans'][0]['args']"
# --grad-reduce-in-bf16: the data-parallel gradient reduction in bf16 (DP 8, all-reduce), the bf16
# gradient copy counted; refused without --bf16
for f in "" "--grad-reduce-in-bf16"; do
	"$P" --model gpt2-124m --vocab-size 50257 --seq-length 1024 --nodes 1 --global-batch-size 64 --bf16 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8 \
		--recompute-granularity none $f --output "grb$f.json" 2>/dev/null
done
ok "--grad-reduce-in-bf16: DP gradient reduction time down (its bandwidth part halved, latency kept), gradients 1.5x, the flag in the args" $PY -c "
import json; a=json.load(open('grb.json')); b=json.load(open('grb--grad-reduce-in-bf16.json'))
p, q = a['plans'][0], b['plans'][0]
r = q['time']['dp_comm'] / p['time']['dp_comm']; g = q['memory']['gradients'] / p['memory']['gradients']
print('# dp_comm %.4f s -> %.4f s (%.3fx), gradients %.3fx' % (p['time']['dp_comm'], q['time']['dp_comm'], r, g))
# the gradients' reduce-scatter halves; the distributed optimizer's fp32 parameter all-gather stays
assert p['data_parallel_size'] == 8 and 0.5 < r < 0.8 and abs(g - 1.5) < 1e-9, (r, g)
assert b['grad_reduce_in_bf16'] and not a['grad_reduce_in_bf16'] and '--grad-reduce-in-bf16' in q['args']"
ok "--grad-reduce-in-bf16 without --bf16: exit 2" exits 2 "$P" --model gpt2-124m --vocab-size 50257 \
	--global-batch-size 8 --grad-reduce-in-bf16
ok "... naming the flag" err_has "--grad-reduce-in-bf16 needs --bf16"

# --- a search; the plan's flags; ranking; --explain
"$P" --model llama-3.2-1b --vocab-size 128256 --seq-length 2048 --global-batch-size 64 --bf16 --nodes 1 \
	--overlap-grad-reduce --top 5 --output s.json >/dev/null 2>&1
ok "search: exit 0, 5 plans" same "$(get s.json "len(d['plans'])")" 5
ok "... ranked by iteration time, all fitting" $PY -c "
import json; d=json.load(open('s.json')); t=[p['time']['iteration'] for p in d['plans']]
assert t == sorted(t) and all(p['fits'] and p['memory']['total'] <= p['memory']['limit'] for p in d['plans'])"
ok "... args are mgt-train's flags of the layout" $PY -c "
import json; p=json.load(open('s.json'))['plans'][0]; a=p['args']
i=a.index('--tensor-model-parallel-size'); assert a[i+1] == str(p['tensor_model_parallel_size'])
i=a.index('--micro-batch-size'); assert a[i+1] == str(p['micro_batch_size'])
assert '--bf16' in a and '--overlap-grad-reduce' in a"
ok "... TP x PP x DP = GPUs" $PY -c "
import json; d=json.load(open('s.json'))
assert all(p['tensor_model_parallel_size']*p['pipeline_model_parallel_size']*p['data_parallel_size']==8 for p in d['plans'])"
ok "--explain prints the table" sh -c "'$P' --model gpt2-124m --vocab-size 50257 --global-batch-size 64 --explain --top 3 | grep -q 'mgt-train flags of plan 1: --model gpt2-124m --vocab-size 50257 --tensor-model-parallel-size'"
ok "the plans' args run in mgt-train (CPU, one process)" sh -c "
'$BIN/mgt-train' --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --train-iters 1 \
	--device cpu --threads 2 --eval-interval 0 \$($PY -c \"import json; print(' '.join(json.load(open('plan2.json'))['plans'][0]['args']))\") >run.log 2>&1"

# --- --gemm-bench: the dgx-h100 preset's GEMM rate is the benchmark file's, recomputed
res=$(ls "$ROOT"/tests/bench/results/gpu-nvidia-h100-*.txt 2>/dev/null | head -1)
if [ -n "$res" ]; then
	"$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 64 --bf16 --gemm-bench "$res" --top 1 --output gb.json 2>/dev/null
	ok "--gemm-bench recomputes the preset's 905.7 TFLOP/s and 2969 GB/s" same "$(get gb.json "'%.1f %.0f' % (d['cluster']['gemm_tflops'], d['cluster']['memory_bandwidth_gbps'])")" "905.7 2969"
else
	skip "no GPU benchmark results"
fi
# --- fp8 (--fp8-format): the decoder layers' linears at the fp8 rate, their casts as traffic
L8="--model llama-3.1-8b --vocab-size 128256 --global-batch-size 128 --seq-length 8192 --bf16
 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 --use-distributed-optimizer
 --recompute-granularity none --ignore-memory --top 1"
"$P" $L8 --output b8.json 2>/dev/null
"$P" $L8 --fp8-format hybrid --output f8.json 2>/dev/null
ok "fp8: llama-3.1-8b on dgx-h100 between 1.2x and 2x faster than bf16 (the GEMMs' 2x the bound)" $PY -c "
import json; b, f = (json.load(open(x))['plans'][0] for x in ('b8.json', 'f8.json'))
r = b['time']['iteration'] / f['time']['iteration']; print('# bf16 / fp8 iteration time: %.3f' % r)
assert 1.2 < r < 2 and f['model_flops'] == b['model_flops']"
ok "... its memory holds the fp8 weight caches (2 bytes a linear weight: 13 GiB and more) and less activation" $PY -c "
import json; b, f = (json.load(open(x))['plans'][0] for x in ('b8.json', 'f8.json'))
w = f['memory']['workspace'] - b['memory']['workspace']; a = f['memory']['activations'] - b['memory']['activations']
print('# workspace %+.2f GiB, activations %+.2f GiB' % (w / 2**30, a / 2**30)); assert w > 13 * 2**30 and a < 0"
ok "... its args ask mgt-train for it" $PY -c "
import json; a = json.load(open('f8.json'))['plans'][0]['args']; assert a[a.index('--fp8-format') + 1] == 'hybrid'"
ok "fp8 on dgx-a100 (no fp8): exit 2" exits 2 "$P" $L8 --cluster dgx-a100 --fp8-format hybrid
ok "... naming the missing rate" err_has "fp8_gemm_tflops"
ok "--fp8-format e5m2: exit 2" exits 2 "$P" $L8 --fp8-format e5m2
printf 'gemm bf16 8192^3: 600.0 TFLOP/s (median of 20, 1.900 ms; best 610.0 TFLOP/s) incl. operand casts\ngemm fp8 8192^3: 1200.0 TFLOP/s (median of 20, 0.800 ms; best 1250.0 TFLOP/s) e4m3 x e4m3, bf16 D, fast accumulation\nadd 1 GiB (x + y, 3 GiB moved): 3000.0 GB/s\n' >fake.txt
"$P" $L8 --cluster dgx-a100 --fp8-format hybrid --gemm-bench fake.txt --output fa.json 2>/dev/null
ok "--gemm-bench takes the fp8 rate from its \"gemm fp8 8192^3\" line, less its traffic" $PY -c "
import json; c = json.load(open('fa.json'))['cluster']; N = 8192.0
want = 2 * N**3 / (0.8e-3 - 4 * N * N / 3000e9) / 1e12; print('# %.1f vs %.1f' % (c['fp8_gemm_tflops'], want))
assert abs(c['fp8_gemm_tflops'] - want) < 1e-6 * want"
ok "fp8 plan memory on the cpu cluster equals mgt-train's computed" sh -c "
'$BIN/mgt-train' --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --seq-length 64 \
	--micro-batch-size 2 --global-batch-size 8 --train-iters 1 --device cpu --threads 2 --eval-interval 0 --bf16 \
	--fp8-format hybrid >t8.log 2>&1 &&
'$P' --model tiny-gpt2 --vocab-size 50257 --seq-length 64 --cluster cpu --global-batch-size 8 --bf16 --fp8-format hybrid \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2 --recompute-granularity none \
	--output p8.json 2>/dev/null &&
$PY -c \"
import json, re; p = json.load(open('p8.json'))['plans'][0]
want = re.search(r'^memory before training: computed ([0-9.]*) MiB', open('t8.log').read(), re.M).group(1)
got = '%.1f' % ((p['memory']['total'] - p['memory']['overhead']) / 1048576); print('#', got, want); assert got == want\""
ok "--gemm-bench without the benchmark's lines: exit 3" exits 3 "$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 8 --gemm-bench "$ROOT/README.md"

# --- a Hugging Face config.json
mkdir hf
cat > hf/config.json <<'J'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 688,
 "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
 "tie_word_embeddings": false}
J
ok "config.json directory: plans" exits 0 "$P" --model hf --global-batch-size 8 --cluster cpu --output hf.json
ok "... with its shape" same "$(get hf.json "'%d %d %d %d' % (d['model']['num_layers'], d['model']['hidden_size'], d['model']['num_query_groups'], d['model']['vocab_size'])")" "4 256 4 32000"

# --- bad input
ok "unknown preset: exit 2" exits 2 "$P" --model no-such-model --vocab-size 10 --global-batch-size 8
ok "... named" err_has "no-such-model"
ok "unknown cluster preset: exit 2" exits 2 "$P" --model tiny-gpt2 --vocab-size 10 --global-batch-size 8 --cluster nope
printf '{"model_type": "llama", "hidden_size": 64,' > bad.json
ok "malformed config.json: exit 3" exits 3 "$P" --model bad.json --global-batch-size 8
ok "... names the file" err_has "bad.json"
mkdir miss; printf '{"model_type": "llama", "hidden_size": 64, "vocab_size": 100}\n' > miss/config.json
ok "config.json missing a key: exit 3" exits 3 "$P" --model miss --global-batch-size 8
ok "... names the key" err_has "num_hidden_layers"
ok "no vocabulary size: exit 2" exits 2 "$P" --model tiny-gpt2 --global-batch-size 8
ok "contradictory constraints (TP 8 > max TP 4): exit 2" exits 2 "$P" --model gpt2-124m --vocab-size 50257 \
	--global-batch-size 8 --tensor-model-parallel-size 8 --max-tensor-model-parallel-size 4
ok "--sequence-parallel with TP 1: exit 2" exits 2 "$P" --model gpt2-124m --vocab-size 50257 \
	--global-batch-size 8 --tensor-model-parallel-size 1 --sequence-parallel
ok "a layout that does not divide (TP 5): exit 2" exits 2 "$P" --model gpt2-124m --vocab-size 50257 \
	--global-batch-size 8 --tensor-model-parallel-size 5 --gpus-per-node 5
printf '{"gpus_per_node": 1, "nodes": 1}\n' > c1.json
ok "cluster file missing a key: exit 3" exits 3 "$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 8 --cluster c1.json
ok "... names the key" err_has "gpu_memory_bytes"
sed -e 's/"gpu_memory_bytes": [0-9]*/"gpu_memory_bytes": 2500000000/' "$SHARE/clusters/cpu.json" > small.json
ok "fits nowhere: exit 1" exits 1 "$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 8 --cluster small.json
ok "... says why and the smallest cluster that fits" err_has "needs .* GiB .* the smallest cpu cluster that fits has [0-9]* nodes"
ok "existing --output: exit 5" exits 5 "$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 8 --output s.json
ok "... --overwrite replaces it" exits 0 "$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 8 --output s.json --overwrite
ok "no temporaries left" no_files s.json.tmp.*
done_testing
