#!/bin/sh
# mgt-plan and Megatron-FSDP (issue 50): the data-parallel sharding strategy searched and fixed
# (--use-megatron-fsdp --data-parallel-sharding-strategy), its memory equal to what mgt-train
# computes for the plan (DP 2 optim_grads and optim_grads_params of tiny-gpt2; the CPU backend
# under mpirun), the pick for a model that fits only with FSDP (DP 4, TP and PP 1, a small GPU),
# the FSDP traffic of the time model against its formula by hand, the plan's JSON keys, args and
# table, mgt-train --plan refusing another strategy (and timing a one-iteration run), the memory
# of distributed-optimizer instances (DP 4 x 2 instances = DP 2's optimizer state, against
# mgt-train --plan too), and bad flags (TAP, run by prove).
# Full tier: PP 2 x DP 2 optim_grads_params under mgt-train (the quick DP 2 cases run the same path).
# The quick tier takes about 35 s on two cores (three mgt-train runs of one iteration).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
P="$BIN/mgt-plan"
# get FILE EXPR: EXPR of the JSON plan file (d: the document, p: the first plan)
get() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['plans'][0]; print($2)" "$1"; }
same() { [ "$1" = "$2" ] && [ -n "$1" ] || { echo "# '$1' != '$2'"; return 1; }; }
# cluster NAME GPUS [MEMORY]: the cpu cluster with GPUS processes a node (and MEMORY bytes each)
cluster() {
	sed -e "s/\"gpus_per_node\": 1,/\"gpus_per_node\": $2,/" \
		-e "s/\"gpu_memory_bytes\": [0-9]*/\"gpu_memory_bytes\": ${3:-8589934592}/" "$SHARE/clusters/cpu.json" >"$1"
}
# computed FILE: the "memory before training: computed" MiB of an mgt-train log
computed() { sed -n 's/^memory before training: computed \([0-9.]*\) MiB.*/\1/p' "$1"; }
# planned FILE: the first plan's memory less the cluster's overhead, in MiB as mgt-train prints it
planned() { get "$1" "'%.1f' % ((p['memory']['total'] - p['memory']['overhead']) / 1048576)"; }
TRAIN="--mock-data --tokenizer-type NullTokenizer --train-iters 1 --device cpu --threads 1 --eval-interval 0"
have_mpi=1
command -v mpirun >/dev/null 2>&1 || have_mpi=0

# --- memory: DP 2 optim_grads and optim_grads_params of tiny-gpt2, mgt-plan against mgt-train --plan
cluster cpu2.json 2
for s in optim_grads optim_grads_params; do
	"$P" --model tiny-gpt2 --vocab-size 50257 --seq-length 64 --cluster cpu2.json --global-batch-size 8 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2 \
		--recompute-granularity none --use-megatron-fsdp --data-parallel-sharding-strategy $s --output $s.json 2>$s.perr
	ok "$s fixed: the plan's strategy, FSDP on, one bucket a layer" same \
		"$(get $s.json "'%s %s %s %d' % (p['data_parallel_sharding_strategy'], p['use_megatron_fsdp'], p['use_distributed_optimizer'], p['ddp_bucket_size'])")" \
		"$s True True -1"
	ok "... its args ask mgt-train for it" $PY -c "
import json, sys; a = json.load(open('$s.json'))['plans'][0]['args']
i = a.index('--data-parallel-sharding-strategy'); assert '--use-megatron-fsdp' in a and a[i + 1] == '$s', a
assert '--use-distributed-optimizer' not in a"
	if [ $have_mpi = 1 ]; then
		ok "... mgt-train --plan runs it (DP 2, one iteration)" launch 2 $s "$BIN/mgt-train" --plan $s.json $TRAIN
		want=$(computed $s.err)
		ok "... mgt-plan's memory equals mgt-train's computed $want MiB" same "$(planned $s.json)" "$want"
		ok "... the plan line's time of its one iteration is measured (not the log interval's restarted clock)" \
			grep -q "iteration time predicted [0-9.]* s, measured [0-9.]*[1-9][0-9.]* s (first iteration)" $s.err
	else
		skip "mpirun not found: $s under mgt-train"; skip "mpirun not found"
	fi
done
# full tier (the quick case DP 2 runs the same FSDP path): PP 2 x DP 2, the units outside layers
# on both end stages; the plan line's computed figure is the most loaded rank's
cluster cpu4.json 4
if [ $have_mpi = 1 ] && full_only "PP 2 x DP 2 optim_grads_params: mgt-plan's memory equals mgt-train's most loaded rank's"; then
	"$P" --model tiny-gpt2 --vocab-size 50257 --seq-length 64 --cluster cpu4.json --global-batch-size 8 \
		--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --micro-batch-size 2 --recompute-granularity none \
		--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --output pp.json 2>/dev/null
	launch 4 pp "$BIN/mgt-train" --plan pp.json $TRAIN
	ok "PP 2 x DP 2 optim_grads_params: mgt-plan's memory equals mgt-train's most loaded rank's" same "$(planned pp.json)" \
		"$(sed -n 's/^plan pp.json:1: memory per process predicted [0-9.]* MiB, computed \([0-9.]*\) MiB.*/\1/p' pp.err)"
fi
ok "optim_grads_params keeps less than optim_grads, and that less than optim (same layout)" sh -c "
'$P' --model tiny-gpt2 --vocab-size 50257 --seq-length 64 --cluster cpu2.json --global-batch-size 8 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2 --recompute-granularity none \
	--use-distributed-optimizer --output optim.json 2>/dev/null && $PY -c \"
import json; m = lambda s: json.load(open(s + '.json'))['plans'][0]['memory']
a, b, c = m('optim'), m('optim_grads'), m('optim_grads_params')
print('# MiB: optim %.1f, optim_grads %.1f, optim_grads_params %.1f' % tuple(x['total'] / 2**20 for x in (a, b, c)))
assert c['total'] <= b['total'] < a['total'] and b['gradients'] < a['gradients'] and c['parameters'] <= b['parameters']\""

# --- a model that fits only with FSDP: 8 layers of h 512 (25 M parameters in the layers, a 1024
# vocabulary), DP 4 with TP and PP 1, 380 MiB a process: neither no_shard nor optim (nor
# optim_grads) fits, optim_grads_params does (computed: optim_grads_params 346 to 353 MiB,
# optim_grads 400 to 407 MiB, the cpu cluster's 194 MiB overhead included)
cat >wide.json <<'J'
{"num_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "seq_length": 32, "max_position_embeddings": 32,
 "position_embedding_type": "learned_absolute", "normalization": "LayerNorm", "make_vocab_size_divisible_by": 128,
 "init_method_std": 0.02}
J
cluster small4.json 4 398458880
WIDE="--model wide.json --vocab-size 1024 --cluster small4.json --global-batch-size 4 --tensor-model-parallel-size 1"
WIDE="$WIDE --pipeline-model-parallel-size 1 --micro-batch-size 1 --memory-headroom 0"
ok "FSDP-only model: exit 0" exits 0 "$P" $WIDE --output only.json
ok "... mgt-plan picks optim_grads_params, every plan FSDP's" $PY -c "
import json; d = json.load(open('only.json')); p = d['plans'][0]
print('# %d of %d layouts fit; plan 1: %s, recompute %s, %.1f of %.1f MiB' % (d['search']['fitting'],
      d['search']['candidates'], p['data_parallel_sharding_strategy'], p['recompute']['granularity'],
      p['memory']['total'] / 2**20, p['memory']['limit'] / 2**20))
assert p['data_parallel_sharding_strategy'] == 'optim_grads_params' and p['use_megatron_fsdp'] and p['fits']
assert all(q['data_parallel_sharding_strategy'] == 'optim_grads_params' for q in d['plans'])"
ok "... with the distributed optimizer fixed nothing fits: exit 1" exits 1 "$P" $WIDE --use-distributed-optimizer
ok "... naming it" err_has "distributed optimizer) needs"
ok "... nor with optim_grads: exit 1" exits 1 "$P" $WIDE --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads
ok "... naming it" err_has "FSDP optim_grads) needs"
if [ $have_mpi = 1 ]; then
	ok "... mgt-train --plan runs it (DP 4, one iteration)" launch 4 only "$BIN/mgt-train" --plan only.json $TRAIN
	want=$(computed only.err)
	ok "... its memory equals mgt-train's computed $want MiB (4 processes)" same "$(planned only.json)" "$want"
	ok "... and within 3% of it on the plan line (predicted less the cluster's overhead)" $PY - only.err only.json <<'PY'
import json, re, sys
t = open(sys.argv[1]).read(); p = json.load(open(sys.argv[2]))['plans'][0]
c = float(re.search(r"^plan only.json:1: memory per process predicted [0-9.]+ MiB, computed ([0-9.]+) MiB", t, re.M).group(1))
pred = (p['memory']['total'] - p['memory']['overhead']) / 2**20
print("# predicted %.1f MiB, computed %.1f MiB: %.4f" % (pred, c, pred / c)); sys.exit(abs(pred / c - 1) > 0.03)
PY
else
	skip "mpirun not found: the FSDP-only plan under mgt-train"; skip "mpirun not found"
fi

# Llama 3.1 8B with pure data parallelism on one DGX H100 node (mgt-plan(1)'s example): nothing
# fits without FSDP, and plan 1 is optim_grads_params
L8="--model llama-3.1-8b --vocab-size 128256 --seq-length 4096 --global-batch-size 128 --bf16
 --max-tensor-model-parallel-size 1 --max-pipeline-model-parallel-size 1 --overlap-grad-reduce --overlap-param-gather"
"$P" $L8 --output l8.json 2>/dev/null
ok "llama-3.1-8b, TP and PP 1 on dgx-h100: plan 1 optim_grads_params" $PY -c "
import json; p = json.load(open('l8.json'))['plans'][0]
print('# mbs %d, %s, %.1f GiB, %.3f s' % (p['micro_batch_size'], p['data_parallel_sharding_strategy'],
      p['memory']['total'] / 2**30, p['time']['iteration']))
assert p['data_parallel_sharding_strategy'] == 'optim_grads_params' and p['fits']"
ok "... without FSDP nothing fits: exit 1" exits 1 "$P" $L8 --use-distributed-optimizer

# --- time: the FSDP traffic against its formula (gpt2-124m, DP 8 on one DGX H100 node, 8
# micro-batches, no overlap): with R = ring(4N) and R_L, R_O the layers' and the rest's
# all-gathers, optim = 2R, optim_grads = (M + 1) R, optim_grads_params = M (R + 2 R_L) + R_O;
# a ring of S bytes over 8 takes 7/8 S / bw + 7 x 3 us, and the layers hold 12 (12 h^2 + 13 h) of
# the 124,475,904 parameters (within 0.2%: each unit is rounded up to 8 x 1024 elements)
for s in optim optim_grads optim_grads_params; do
	f="--use-megatron-fsdp --data-parallel-sharding-strategy $s"
	[ $s = optim ] && f=--use-distributed-optimizer
	"$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 64 --bf16 --tensor-model-parallel-size 1 \
		--pipeline-model-parallel-size 1 --micro-batch-size 1 --recompute-granularity none $f --output h-$s.json 2>/dev/null
done
ok "optim_grads: (M + 1) / 2 times the distributed optimizer's traffic, optim_grads_params the layers' gathers" $PY -c "
import json; P = lambda s: json.load(open('h-%s.json' % s))['plans'][0]
a, b, c = P('optim'), P('optim_grads'), P('optim_grads_params'); M = b['num_microbatches']; L = 7 * 3e-6
ra = b['time']['dp_comm'] / a['time']['dp_comm']
R = b['time']['dp_comm'] / (M + 1); RL = (c['time']['dp_comm'] - M * R - R - L) / (2 * M - 1)
f = 12 * (12 * 768**2 + 13 * 768) / 124475904
print('# M %d: optim_grads / optim %.4f (want %.1f); layers share of the gathers %.4f (want %.4f)' % (M, ra, (M + 1) / 2, (RL - L) / (R - L), f))
assert M == 8 and abs(ra / ((M + 1) / 2) - 1) < 0.002 and abs((RL - L) / (R - L) / f - 1) < 0.002"

# --- the search's ranking: at equal time the layout without FSDP first; --explain's DO column
"$P" --model gpt2-124m --vocab-size 50257 --global-batch-size 64 --bf16 --tensor-model-parallel-size 1 \
	--pipeline-model-parallel-size 1 --micro-batch-size 8 --recompute-granularity none --top 4 --output rk.json 2>/dev/null
ok "all four strategies searched (M 1): optim first, FSDP's after the others of its time" $PY -c "
import json; d = json.load(open('rk.json')); s = [p['data_parallel_sharding_strategy'] for p in d['plans']]
t = [p['time']['iteration'] for p in d['plans']]; print('#', list(zip(s, t)))
assert d['search']['candidates'] == 4 and sorted(s) == ['no_shard', 'optim', 'optim_grads', 'optim_grads_params'] and s[0] == 'optim'
assert t == sorted(t)"
ok "--explain: DO column ogp and the flags of plan 1" sh -c "'$P' $WIDE --explain >ex.txt &&
 grep -q '^1 .* ogp  *none' ex.txt && grep -q 'mgt-train flags of plan 1: .* --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params$' ex.txt"
ok "--grad-reduce-in-bf16: no FSDP strategy searched" sh -c "'$P' --model gpt2-124m --vocab-size 50257 --global-batch-size 64 \
 --bf16 --grad-reduce-in-bf16 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8 \
 --recompute-granularity none --output g.json 2>/dev/null && test \$($PY -c \"import json; print(json.load(open('g.json'))['search']['candidates'])\") = 2"

# --- mgt-train --plan: another strategy on the command line is refused
ok "mgt-train --plan with another --data-parallel-sharding-strategy: exit 2" exits 2 "$BIN/mgt-train" \
	--plan optim_grads.json --data-parallel-sharding-strategy optim $TRAIN
ok "... naming both" err_has "sets --data-parallel-sharding-strategy optim_grads, the command line --data-parallel-sharding-strategy optim"

# --- distributed-optimizer instances (--num-distributed-optimizer-instances): DP 4 x 2 instances
# counts DP 2's optimizer state (twice DP 4's), its args carry the flag, and mgt-train --plan
# computes the same memory
I="--model tiny-gpt2 --vocab-size 50257 --seq-length 64 --global-batch-size 8 --tensor-model-parallel-size 1
	--pipeline-model-parallel-size 1 --micro-batch-size 2 --recompute-granularity none --use-distributed-optimizer"
"$P" $I --cluster cpu4.json --num-distributed-optimizer-instances 2 --output i2.json 2>/dev/null
"$P" $I --cluster cpu4.json --output d4.json 2>/dev/null
ok "DP 4 x 2 instances: the optimizer state of DP 2 (optim.json), twice DP 4's; args with the flag" $PY -c "
import json; m = lambda s: json.load(open(s + '.json'))['plans'][0]
i, o, d = m('i2'), m('optim'), m('d4')
print('# optimizer bytes: 2 instances %d, DP 2 %d, DP 4 %d' % (i['memory']['optimizer'], o['memory']['optimizer'], d['memory']['optimizer']))
assert i['memory']['optimizer'] == o['memory']['optimizer'] == 2 * d['memory']['optimizer']
a = i['args']; assert a[a.index('--num-distributed-optimizer-instances') + 1] == '2', a"
if [ $have_mpi = 1 ]; then
	ok "... mgt-train --plan runs it (DP 4 x 2 instances, one iteration)" launch 4 i2 "$BIN/mgt-train" --plan i2.json $TRAIN
	ok "... mgt-plan's memory equals mgt-train's computed" same "$(planned i2.json)" "$(computed i2.err)"
else
	skip "mpirun not found: instances under mgt-train"; skip "mpirun not found"
fi
ok "instances not dividing DP: no layout, exit 2" exits 2 "$P" $I --cluster cpu4.json --num-distributed-optimizer-instances 3
ok "instances with --no-use-distributed-optimizer: exit 2" exits 2 "$P" --model tiny-gpt2 --vocab-size 50257 \
	--global-batch-size 8 --no-use-distributed-optimizer --num-distributed-optimizer-instances 2
ok "... saying so" err_has "--num-distributed-optimizer-instances 2 needs the distributed optimizer"

# --- bad flags
ok "--data-parallel-sharding-strategy without --use-megatron-fsdp: exit 2" exits 2 "$P" --model tiny-gpt2 \
	--vocab-size 50257 --global-batch-size 8 --data-parallel-sharding-strategy optim_grads
ok "... saying so" err_has "needs --use-megatron-fsdp"
ok "an unknown strategy: exit 2" exits 2 "$P" --model tiny-gpt2 --vocab-size 50257 --global-batch-size 8 \
	--use-megatron-fsdp --data-parallel-sharding-strategy zero3
ok "... naming the four" err_has "expected no_shard, optim, optim_grads or optim_grads_params"
ok "--use-megatron-fsdp with --no-use-distributed-optimizer: exit 2" exits 2 "$P" --model tiny-gpt2 \
	--vocab-size 50257 --global-batch-size 8 --use-megatron-fsdp --no-use-distributed-optimizer
ok "optim_grads with --grad-reduce-in-bf16: exit 2" exits 2 "$P" --model tiny-gpt2 --vocab-size 50257 \
	--global-batch-size 8 --bf16 --grad-reduce-in-bf16 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads
done_testing
