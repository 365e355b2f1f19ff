#!/bin/sh
# Megatron-LM's flags in mgt-train (TAP, run by prove): every flag of arguments.py, of every
# release from core_r0.8.0 to HEAD (all-flags.txt: arguments.py's and the config dataclasses') and
# of the example launch scripts is known (implemented, accepted without effect, or refused naming
# the flag and why); ignored flags change nothing and take no word that is not theirs; the example
# scripts' argument lists run with sizes and paths shrunk; values out of range are refused; the
# MoE flags (each bad input refused naming its flags, --moe-layer-freq's list expressions, the MoE
# presets); memory is checked before allocating; the argument dump, parameter count, params norm,
# --exit-duration-in-mins, --async-save and the test-set evaluation.
# Tiers (lib.sh): the quick tier checks every 12th refused flag's refusal, the full tier all.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
MEG=$ROOT/tests/data/megatron   # Megatron-LM's flags and example arguments (tests/data/megatron/README.md)
FLAGS=$MEG/arguments-flags.txt
ALL=$MEG/all-flags.txt          # every flag of the releases core_r0.8.0..core_r0.19.0 and HEAD, with its refs
TOKS=$SHARE/tokenizers/gpt2

# ---- classification -------------------------------------------------------------------------
"$BIN/mgt-train" --megatron-flags <"$FLAGS" >classes
ok "every flag of arguments.py is classified" sh -c "test \$(grep -vc '^#' '$FLAGS') -eq \$(wc -l <classes)"
ok "no flag of arguments.py is unknown" sh -c '! grep " unknown" classes'
for c in implemented ignored refused; do echo "# $c: $(awk -v c="$c" '{ sub(":", "", $2) } $2 == c' classes | wc -l)"; done
grep -v '^#' "$ALL" | cut -d' ' -f1 >all-flags
"$BIN/mgt-train" --megatron-flags <all-flags >all-classes
ok "every flag of Megatron-LM's releases core_r0.8.0 to HEAD is classified" sh -c "test -s all-flags &&
 test \$(wc -l <all-flags) -eq \$(wc -l <all-classes)"
ok "no flag of any release (dataclass flags included) is unknown" sh -c 'grep " unknown" all-classes | sed "s/^/# /";
 ! grep -q " unknown" all-classes'
for c in implemented ignored refused; do
	echo "# all-flags.txt $c: $(awk -v c="$c" '{ sub(":", "", $2) } $2 == c' all-classes | wc -l)"
done
cat "$MEG"/examples/*.args | grep -o '^--[a-z0-9-]*' | sort -u >example-flags
"$BIN/mgt-train" --megatron-flags <example-flags >example-classes
ok "no flag of the example scripts is unknown" sh -c '! grep " unknown" example-classes'
ok "the issue's flags are known" sh -c "printf '%s\n' --use-mcore-models --no-masked-softmax-fusion --distributed-backend \
 --num-workers --attention-softmax-in-fp32 --no-gradient-accumulation-fusion --transformer-impl --use-flash-attn \
 --exit-signal-handler --exit-duration-in-mins --ckpt-format --ckpt-step --no-load-rng --log-params-norm --async-save \
 --overlap-param-gather --tensorboard-dir --recompute-activations | '$BIN/mgt-train' --megatron-flags | grep -v ' unknown' | wc -l | grep -qx 18"
ok "an unknown flag is still refused" exits 2 "$BIN/mgt-train" --no-such-flag
ok "  naming it" err_has "unknown flag '--no-such-flag'"

# Every refused flag of every release: exit 2, the flag and the reason in the message.  The quick
# tier starts mgt-train for every 12th of the 458, the full tier for all: the refusal is one
# table-driven path.
bad=0
step=12; full && step=1
for f in $(awk -v s=$step '$2 == "refused:" && (n++ % s) == 0 { print $1 }' all-classes); do
	why=$(grep "^$f refused: " all-classes | sed 's/^[^:]*: //')
	"$BIN/mgt-train" "$f" >/dev/null 2>err; r=$?
	if [ $r != 2 ] || ! grep -qF -- "$f is not supported by mgt-train: $why" err; then
		bad=$((bad + 1)); echo "# $f: exit $r: $(head -c 200 err)"
	fi
done
ok "every refused flag$(quick && echo ' (every 12th: make check-full runs all)') exits 2 naming the flag and the reason" test $bad = 0
ok "a flag accepting one value refuses another" exits 2 "$BIN/mgt-train" --optimizer sgd
ok "  saying which it accepts" err_has "only adam"

# ---- values ---------------------------------------------------------------------------------
BASE="$BIN/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 32"
BASE="$BASE --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --threads 2 --device cpu"
for v in "--lr nan:a finite number >= 0" "--lr inf:a finite number >= 0" "--threads -1:an integer >= 0" \
	"--clip-grad -1:a finite number >= 0" "--train-iters -5:an integer >= 0" "--adam-beta2 1:a finite number in .0,1)" \
	"--hidden-dropout 1:a finite number in .0,1)" "--log-interval 0:an integer >= 1" "--seed -3:an integer >= 0"; do
	flag=${v%%:*}
	ok "$flag refused" exits 2 $BASE --train-iters 1 $flag
	ok "  naming the flag and the range" err_has "$flag: expected ${v#*:}"
done
echo '{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "hidden_dropout": 1.5}' >range.json
ok "a value out of range in a model JSON is refused too" exits 3 $BASE --train-iters 1 --model range.json
ok "  naming the file and the key" err_has "range.json.*hidden.dropout 1.5: expected a finite number in"

# flags Megatron accepts that arguments-flags.txt's list misses: known to mgt-train too
printf '%s\n' --exit-on-missing-checkpoint --use-mp-args-from-checkpoint-args --apply-query-key-layer-scaling \
	--local-rank | "$BIN/mgt-train" --megatron-flags >four
ok "--exit-on-missing-checkpoint implemented; --use-mp-args-from-checkpoint-args, --apply-query-key-layer-scaling and --local-rank accepted with their reasons" \
	sh -c "grep -q '^--exit-on-missing-checkpoint implemented\$' four && test \$(grep -c ' ignored: ' four) = 3 || cat four"

# ---- Mixture of Experts: flags, presets and bad input ---------------------------------------
# The MoE flags come from Megatron-Core's TransformerConfig and ModelParallelConfig (not in
# arguments-flags.txt): each is implemented, or classified with its reason.
printf '%s\n' --num-experts --moe-layer-freq --moe-ffn-hidden-size --moe-router-topk --moe-router-score-function \
	--moe-router-pre-softmax --moe-router-topk-scaling-factor --moe-router-num-groups --moe-router-group-topk \
	--moe-router-enable-expert-bias --moe-router-bias-update-rate --moe-router-dtype --moe-router-load-balancing-type \
	--moe-aux-loss-coeff --moe-z-loss-coeff --moe-input-jitter-eps --moe-expert-capacity-factor --moe-token-drop-policy \
	--moe-pad-expert-input-to-capacity --moe-shared-expert-intermediate-size --moe-shared-expert-gate \
	--moe-token-dispatcher-type --moe-per-layer-logging --expert-model-parallel-size --expert-tensor-parallel-size \
	--moe-latent-size | "$BIN/mgt-train" --megatron-flags >moe-classes
ok "the 25 MoE flags of the issue and --moe-latent-size are implemented" sh -c "test \$(grep -c ' implemented$' moe-classes) = 26"
printf '%s\n' --moe-grouped-gemm --moe-permute-fusion --moe-router-fusion --moe-shared-expert-overlap \
	--overlap-moe-expert-parallel-comm --moe-use-upcycling --moe-enable-deepep --moe-token-dropping \
	--moe-router-topk-limited-devices --moe-layer-recompute --moe-hybridep-num-sms \
	| "$BIN/mgt-train" --megatron-flags >moe-other
ok "Megatron's other MoE flags: speed and fusion knobs ignored, missing features refused" sh -c "
 grep -q '^--moe-grouped-gemm ignored: mgt always runs the local experts as one grouped GEMM' moe-other &&
 test \$(grep -c ' ignored: ' moe-other) = 6 && test \$(grep -c ' refused: ' moe-other) = 5"
ok "--moe-use-upcycling refused" exits 2 "$BIN/mgt-train" --moe-use-upcycling
ok "  naming it and why" err_has "moe-use-upcycling is not supported by mgt-train: upcycling"

MOE="$BIN/mgt-train --model tiny-moe --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 32"
MOE="$MOE --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --threads 2 --device cpu --train-iters 1"
err_says() { grep -qF -- "$1" "$T/err" || { echo "# stderr lacks '$1': $(head -c 300 "$T/err")"; return 1; }; }
# FLAGS|MESSAGE (tiny-moe: 4 layers, 4 experts, top-2 softmax): exit 2, the message naming the flags
while IFS='|' read -r flags msg; do
	[ -n "$flags" ] || continue
	ok "$flags refused" exits 2 $MOE $flags
	ok "  ($msg)" err_says "error: $msg"
done <<'E'
--expert-model-parallel-size 3|--num-experts 4 is not divisible by --expert-model-parallel-size 3
--expert-model-parallel-size 2|world size 1 is not divisible by --expert-model-parallel-size 2 x --expert-tensor-parallel-size 1 (= --tensor-model-parallel-size) x --pipeline-model-parallel-size 1
--moe-router-topk 5|--moe-router-topk 5 must be in 1..--num-experts 4
--moe-router-topk 0|--moe-router-topk 0: expected an integer >= 1
--moe-router-topk 1|--moe-router-topk 1 with --moe-router-score-function softmax needs --moe-router-pre-softmax
--moe-router-group-topk 2|--moe-router-group-topk 2 needs --moe-router-num-groups
--moe-router-num-groups 3 --moe-router-group-topk 1|--moe-router-num-groups 3 must divide --num-experts 4
--moe-router-num-groups 2 --moe-router-group-topk 3|--moe-router-group-topk 3 must be at most --moe-router-num-groups 2
--moe-router-num-groups 2 --moe-router-group-topk 2 --moe-router-topk 1 --moe-router-pre-softmax|--moe-router-group-topk 2 must be at most --moe-router-topk 1
--moe-router-num-groups 4 --moe-router-group-topk 1|--moe-router-topk 2 is more than the 1 experts of --moe-router-group-topk 1 groups of 1
--moe-expert-capacity-factor 0|--moe-expert-capacity-factor 0: expected a finite number > 0
--moe-expert-capacity-factor -0.5|--moe-expert-capacity-factor -0.5: expected a finite number > 0
--moe-pad-expert-input-to-capacity|--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor
--moe-router-enable-expert-bias|--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid
--moe-layer-freq [1,1,1]|--moe-layer-freq lists 3 layers but --num-layers is 4
--moe-layer-freq ([0]*1+[1]*4)|--moe-layer-freq lists 5 layers but --num-layers is 4
--moe-layer-freq [1,2,1,1]|--moe-layer-freq [1,2,1,1]: an element other than 0 and 1
--moe-layer-freq ([1]*3+[0]|--moe-layer-freq ([1]*3+[0]: a ')' missing
--moe-layer-freq [1]*2000|--moe-layer-freq [1]*2000: more than 1024 layers
--moe-layer-freq 0|--moe-layer-freq 0: expected an integer >= 1, or a list of 0s and 1s
--moe-layer-freq [1]*4+2|--moe-layer-freq [1]*4+2: a list plus a number
--expert-tensor-parallel-size 2|--expert-tensor-parallel-size 2: expert tensor parallelism other than --tensor-model-parallel-size 1 is not implemented
--moe-token-dispatcher-type flex|--moe-token-dispatcher-type flex (DeepEP, HybridEP, NCCL-EP) is not implemented
--moe-token-dispatcher-type all2all|--moe-token-dispatcher-type all2all: expected allgather or alltoall
--moe-router-score-function sqrtsoftplus|--moe-router-score-function sqrtsoftplus is not implemented
--moe-router-score-function tanh|--moe-router-score-function tanh: expected softmax or sigmoid
--moe-router-load-balancing-type sinkhorn|--moe-router-load-balancing-type sinkhorn is not implemented
--moe-router-load-balancing-type global_aux_loss|--moe-router-load-balancing-type global_aux_loss is not implemented
--moe-router-load-balancing-type aux|--moe-router-load-balancing-type aux: expected aux_loss, seq_aux_loss or none
--moe-token-drop-policy random|--moe-token-drop-policy random: expected probs or position
--moe-router-dtype bf16|--moe-router-dtype bf16: expected fp32 or fp64
--num-experts 100000|--num-experts 100000: more than the 1024 mgt supports
--num-experts 128 --moe-router-topk 100|--moe-router-topk 100: more than the 64 mgt supports
--num-experts -1|--num-experts -1: expected an integer >= 0
--moe-shared-expert-intermediate-size 0|--moe-shared-expert-intermediate-size 0: expected an integer >= 1
--moe-router-topk-scaling-factor 0|--moe-router-topk-scaling-factor 0: expected a finite number > 0
--moe-aux-loss-coeff -1|--moe-aux-loss-coeff -1: expected a finite number >= 0
E
ok "linear biases with experts refused" exits 2 $BASE --train-iters 1 --num-experts 4
ok "  with the advice" err_says "error: --num-experts 4: biases in the linear layers of an MoE model are not implemented in this version: add --disable-bias-linear"
ok "--expert-model-parallel-size without experts refused" exits 2 $BASE --train-iters 1 --expert-model-parallel-size 2
ok "  naming both flags" err_says "error: --expert-model-parallel-size 2 needs --num-experts"
echo '{"moe_expert_capacity_factor": 0}' >cap.json
ok "a capacity factor of 0 in a model JSON refused too" exits 3 $MOE --model cap.json
ok "  naming the file and the flag" err_says "cap.json: --moe-expert-capacity-factor 0: expected a finite number > 0"
if command -v mpirun >/dev/null 2>&1; then
	ok "TP 2 with experts and without --sequence-parallel refused (as Megatron)" exits 2 sh "$ROOT/tests/mpirun.sh" 2 $MOE \
		--tensor-model-parallel-size 2
	ok "  naming the flags" err_says "error: --num-experts with --tensor-model-parallel-size 2 needs --sequence-parallel"
	ok "EP x TP x PP not dividing the world refused" exits 2 sh "$ROOT/tests/mpirun.sh" 2 $MOE --expert-model-parallel-size 4
	ok "  naming the flags" err_says "error: world size 2 is not divisible by --expert-model-parallel-size 4 x"
else
	skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"
fi

# Megatron's list expressions for --moe-layer-freq, from a flag and from a model JSON; None is null.
ok "--moe-layer-freq ([0]*1+[1]*3) trains" exits 0 $MOE --train-iters 2 --moe-layer-freq '([0]*1+[1]*3)'
ok "  with layer 0 dense in the argument dump" grep -q '^  moe_layer_freq \.* \[0,1,1,1\]$' "$T/err"
ok "  and unset values as None" sh -c "grep -q '^  moe_expert_capacity_factor \.* None$' '$T/err' &&
 grep -q '^  expert_tensor_parallel_size \.* None$' '$T/err' && grep -q '^  moe_router_topk \.* 2$' '$T/err'"
ok "  logging load_balancing_loss" grep -q ' lm loss: [^|]* | load_balancing_loss: [0-9.E+-]* |' "$T/err"
printf '{"moe_layer_freq": [1, 0, 1, 0], "moe_expert_capacity_factor": null, "moe_z_loss_coeff": 1e-3}\n' >freq.json
ok "a JSON list for moe_layer_freq" exits 0 $MOE --model freq.json --train-iters 1
ok "  read as the list" sh -c "grep -q '^  moe_layer_freq \.* \[1,0,1,0\]$' '$T/err' && grep -q ' z_loss: ' '$T/err'"
ok "--moe-layer-freq 2 (every other layer)" exits 0 $MOE --moe-layer-freq 2
ok "  kept as the integer" grep -q '^  moe_layer_freq \.* 2$' "$T/err"

# The presets: Mixtral 8x7B's shape passes every check and is refused for memory only (46.4e9
# parameters besides the embeddings); the DeepSeek-V3-style one trains shrunk.
ok "mixtral-8x7b passes the argument checks" exits 1 $MOE --model mixtral-8x7b
ok "  and is refused for its memory only" err_has "needs .* GiB (parameters 173\.0"
ok "deepseek-v3-small trains with sizes shrunk" exits 0 $MOE --model deepseek-v3-small --train-iters 2 \
	--num-layers 4 --moe-layer-freq '[0]+[1]*3' --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 \
	--moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32 --seq-length 32 --max-position-embeddings 32
ok "  with its routing (sigmoid, expert bias, 8 groups, top-8 scaled, seq_aux_loss)" sh -c "
 grep -q '^  moe_router_score_function \.* sigmoid$' '$T/err' && grep -q '^  moe_router_enable_expert_bias \.* True$' '$T/err' &&
 grep -q '^  moe_router_group_topk \.* 4$' '$T/err' && grep -q '^  moe_router_topk_scaling_factor \.* 2\.5$' '$T/err' &&
 grep -q ' seq_load_balancing_loss: ' '$T/err'"

# ---- memory ---------------------------------------------------------------------------------
ok "a model too large for the machine is refused before allocating" exits 1 $BASE --train-iters 1 \
	--num-layers 48 --hidden-size 16384 --num-attention-heads 128
ok "  with the breakdown" err_has "GiB (parameters .*, gradients .*, optimizer .*, activations .*, workspace"
ok "  and the flag to change" err_has "tensor-model-parallel-size"
ok "activations too large name --micro-batch-size" exits 1 $BASE --train-iters 1 --micro-batch-size 256 \
	--global-batch-size 256 --seq-length 8192 --max-position-embeddings 8192
ok "  (the advice)" err_has "lower --micro-batch-size or --seq-length"
ok "--seq-length 2147483647 blames --seq-length" exits 2 $BASE --train-iters 1 --seq-length 2147483647 \
	--max-position-embeddings 2147483647
ok "  and not --micro-batch-size" sh -c "head -1 '$T/err' | grep -q '^mgt-train: error: --seq-length 2147483647: more than' "
ok "a size past what products can hold names its flag" exits 2 $BASE --train-iters 1 --num-layers 100000000
ok "  (--num-layers)" err_has "--num-layers 100000000: more than"

# ---- ignored flags change nothing (nor does --tensorboard-dir, which only writes events) -----
IGN="--use-mcore-models --no-masked-softmax-fusion --distributed-backend nccl --num-workers 4 --attention-softmax-in-fp32
 --no-gradient-accumulation-fusion --transformer-impl local --use-flash-attn --overlap-param-gather --tensorboard-dir tb
 --log-batch-size-to-tensorboard --distribute-saved-activations --recompute-modules core_attn
 --wandb-project p --profile --profile-ranks 0 1 --manual-gc --rampup-batch-size 2 2 100 --moe-grouped-gemm"
ok "plain run" exits 0 $BASE --train-iters 4 --metrics-file plain.jsonl
ok "the same run with Megatron's no-op flags" exits 0 $BASE --train-iters 4 $IGN --metrics-file ign.jsonl
cp "$T/err" ign.err
ok "  says once for each that it has no effect" sh -c "test \$(grep -c 'is accepted without effect' ign.err) -eq 18 &&
 test \$(grep -c '^WARNING: --use-mcore-models is accepted without effect' ign.err) -eq 1"
ok "  and trains bit for bit the same" sh -c "grep -o '\"lm_loss\":[^,]*' plain.jsonl >a; grep -o '\"lm_loss\":[^,]*' ign.jsonl >b; test -s a && cmp a b"
ok "an alias sets what it stands for" exits 0 $BASE --train-iters 1 --use-rotary-position-embeddings
ok "  (rope)" grep -q "position_embedding_type .* rope" "$T/err"
ok "Megatron's other name of a flag with a value sets it" exits 0 $BASE --train-iters 1 --persistent-save-interval 7
ok "  (--persistent-save-interval is --save-interval)" grep -q "^  save_interval \.* 7$" "$T/err"
ok "an ignored flag without a value leaves the next flag alone" exits 0 $BASE --train-iters 1 --one-logger-async --bf16 \
	--otel-enabled --log-params-norm --disable-jit-fuser --seed 7
ok "  (--bf16, --log-params-norm and --seed 7 taken)" sh -c "grep -q '^  bf16 \\.* True$' '$T/err' &&
 grep -q '^  log_params_norm \\.* True$' '$T/err' && grep -q '^  seed \\.* 7$' '$T/err'"

# ---- start of run: arguments, parameter count -----------------------------------------------
ok "run with a checkpoint" exits 0 $BASE --train-iters 3 --save ck --log-params-norm
cp "$T/err" run.err
ok "arguments printed as Megatron's _print_args" sh -c "grep -q '^------------------------ arguments ------------------------$' run.err &&
 grep -q '^  lr \.\{46\} 0\.001$' run.err && grep -q '^  bf16 \.\{44\} False$' run.err && grep -q '^  save_rng\|^  seed \.\{44\} 1234$' run.err"
count=$(sed -n 's/^ > number of parameters on (tensor, pipeline) model parallel rank (0, 0): //p' run.err)
if $PY -c "import h5py" 2>/dev/null; then
	ok "parameter count equals the checkpoint's parameters" $PY - ck/iter_0000003/model.h5 "$count" <<'PY'
import h5py, sys
f = h5py.File(sys.argv[1], "r")
n = sum(f[k].size for k in f if not k.startswith("optimizer."))
print("# checkpoint", n, "log", sys.argv[2]); sys.exit(1 if n != int(sys.argv[2]) else 0)
PY
	pn=$(grep "iteration        3/" run.err | sed 's/.*params norm: \([0-9.]*\) .*/\1/')
	ok "params norm equals the checkpoint's, in double precision" $PY - ck/iter_0000003/model.h5 "$pn" <<'PY'
import h5py, sys, numpy as np
f = h5py.File(sys.argv[1], "r")
n = np.sqrt(sum(np.sum(f[k][...].astype(np.float64) ** 2) for k in f if not k.startswith("optimizer.")))
print("# checkpoint %.3f log %s" % (n, sys.argv[2])); sys.exit(1 if abs(n - float(sys.argv[2])) > 0.0015 else 0)
PY
else
	skip "no h5py"; skip "no h5py"
fi

# Under TP2 x PP2 the same norm (each element counted once) and one count per position, which
# together hold the model once plus the tied embedding's copy on the last stage.
if command -v mpirun >/dev/null 2>&1; then
	ok "TP2 x PP2 run" exits 0 sh "$ROOT/tests/mpirun.sh" 4 $BASE --train-iters 3 --log-params-norm \
		--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save pck
	cp "$T/err" par.err
	pn2=$(grep "iteration        3/" par.err | sed 's/.*params norm: \([0-9.]*\) .*/\1/')
	ok "  params norm as one process's ($pn2, $pn)" test "$pn2" = "$pn"
	h=$(sed -n 's/^  hidden_size \.* //p' run.err); v=$(sed -n 's/^  padded_vocab_size \.* //p' run.err)
	# each position's count: the parameter pieces its shards hold, plus the tied embedding's copy
	# (its TP half) that the last stage has and does not save
	ok "  each position's count as its shards hold" $PY - par.err pck/iter_0000003 $((h * v / 2)) <<'PY'
import glob, h5py, re, sys
log = dict(((int(t), int(p)), int(n)) for t, p, n in re.findall(
    r"^ > number of parameters on \(tensor, pipeline\) model parallel rank \((\d), (\d)\): (\d+)$",
    open(sys.argv[1]).read(), re.M))
ok = len(log) == 4
for (t, p), n in sorted(log.items()):
    want = sum(d.size for f in glob.glob("%s/model_tp%02d_pp%03d_dp000*.h5" % (sys.argv[2], t, p))
               for k, d in h5py.File(f, "r").items() if not k.startswith("optimizer.")) + (int(sys.argv[3]) if p == 1 else 0)
    print("# (%d, %d): log %d, shards %d" % (t, p, n, want)); ok &= n == want
sys.exit(0 if ok else 1)
PY
else
	skip "no mpirun"; skip "no mpirun"; skip "no mpirun"
fi

# ---- --async-save writes the same tensors ---------------------------------------------------
ok "--async-save run" exits 0 $BASE --train-iters 3 --save ack --async-save --save-interval 2
ok "  scheduled, then saved" sh -c "grep -q 'scheduled an async checkpoint save at iteration       2' '$T/err' &&
 grep -q 'successfully saved checkpoint from iteration       2' '$T/err' && test \$(cat ack/latest_checkpointed_iteration.txt) = 3"
ok "sync run" exits 0 $BASE --train-iters 3 --save sck --save-interval 2
if $PY -c "import h5py" 2>/dev/null; then
	ok "every tensor of both saves is identical" $PY - ack sck <<'PY'
import h5py, sys, numpy as np
for it in ("iter_0000002", "iter_0000003"):
    a = h5py.File(sys.argv[1] + "/" + it + "/model.h5", "r"); b = h5py.File(sys.argv[2] + "/" + it + "/model.h5", "r")
    assert sorted(a) == sorted(b) and len(a) > 0
    for k in a:
        assert np.array_equal(a[k][...], b[k][...]), (it, k)
PY
else
	skip "no h5py"
fi

# ---- --exit-duration-in-mins ----------------------------------------------------------------
ok "--exit-duration-in-mins stops, saves and exits 0" exits 0 $BASE --train-iters 100000 --exit-duration-in-mins 0.01 --save dck
ok "  saying so" err_has "exiting program after"
ok "  at the iteration the tracker names" sh -c "i=\$(cat dck/latest_checkpointed_iteration.txt); test \$i -gt 0 && test \$i -lt 100000"

# ---- test set at the end --------------------------------------------------------------------
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $GPT2 --append-eod --workers 2 --quiet >/dev/null 2>&1
KJV="--model tiny-gpt2 $GPT2 --data-path kjv_text_document --data-cache-path cache --seq-length 32 --micro-batch-size 2
 --lr 1e-3 --threads 2 --device cpu --log-interval 1"
ok "validation and test sets at the end" exits 0 "$BIN/mgt-train" $KJV --train-iters 2 --split 90,5,5 --eval-interval 2 --eval-iters 1
ok "  'on validation set', then 'on test set'" sh -c "grep -n 'iteration 2 on validation set | lm loss value' '$T/err' | cut -d: -f1 >v &&
 grep -n 'iteration 2 on test set | lm loss value' '$T/err' | cut -d: -f1 >t && test -s v && test \$(cat v) -lt \$(cat t)"
ok "no test line without a test split" exits 0 "$BIN/mgt-train" $KJV --train-iters 2 --split 90,10,0 --eval-interval 2 --eval-iters 1
ok "  (none)" sh -c "! grep -q 'on test set' '$T/err'"

# ---- Megatron's example scripts -------------------------------------------------------------
# Each runs with sizes and paths shrunk; the flags mgt refuses are named here, checked refused
# one by one, and left out of the run (none: the whole script runs).
run_example() { # NAME "REFUSED FLAGS" [sed expression]
	n=$1; refused=$2; sedx=${3:-}
	drops=""; for f in $refused; do drops="$drops --drop=$f"; done
	$PY "$ROOT/tests/cli/megatron_example_args.py" "$MEG/examples/$n.args" --data "$T/kjv_text_document" \
		--vocab "$TOKS/vocab.json" --merges "$TOKS/merges.txt" --tokenizer-json "$TOKS/tokenizer.json" --dir "$T/$n" \
		>"$n.all" || return 1
	$PY "$ROOT/tests/cli/megatron_example_args.py" "$MEG/examples/$n.args" --data "$T/kjv_text_document" \
		--vocab "$TOKS/vocab.json" --merges "$TOKS/merges.txt" --tokenizer-json "$TOKS/tokenizer.json" --dir "$T/$n" \
		$drops | sed "$sedx" >"$n.run" || return 1
	for f in $refused; do
		"$BIN/mgt-train" --megatron-flags <<-E | grep -q " refused\|^--tokenizer-type implemented\|^--ckpt-format implemented" || { echo "# $f not refused"; return 1; }
		$f
		E
	done
	if [ -n "$refused" ]; then
		(cd "$T" && xargs -d '\n' -a "$n.all" "$BIN/mgt-train" --device cpu --threads 2 >"$n.all.out" 2>&1)
		first=$(echo $refused | cut -d' ' -f1)
		grep -q "error: $first" "$n.all.out" || { echo "# unchanged: $(grep error "$n.all.out")"; return 1; }
	fi
	(cd "$T" && xargs -d '\n' -a "$n.run" "$BIN/mgt-train" --device cpu --threads 2 >"$n.out" 2>&1) || { grep -v '^  [a-z]' "$n.out" | tail -3 | sed 's/^/# /'; return 1; }
	test "$(grep -c ' iteration  *[1-4]/  *4 | consumed samples' "$n.out")" = 4
}
ok "train_gpt3_175b_distributed runs without --step-batch-size-schedule" run_example train_gpt3_175b_distributed \
	"--step-batch-size-schedule"
ok "train_llama3_8b_h100_fp8 runs whole but torch_dist: fp8 (hybrid, history 1024, max, fp8 param gather), layernorm-1p, decoupled lr, per-token loss" \
	run_example train_llama3_8b_h100_fp8 "--ckpt-format"
ok "  fp8 hybrid with delayed scaling, history 1024, max; 1p norms, decoupled lr, per-token loss" sh -c "
 grep -q '^  fp8_format \.* hybrid$' train_llama3_8b_h100_fp8.out && grep -q '^  fp8_amax_history_len \.* 1024$' train_llama3_8b_h100_fp8.out &&
 grep -q '^  fp8_amax_compute_algo \.* max$' train_llama3_8b_h100_fp8.out && grep -q '^  fp8_param_gather \.* True$' train_llama3_8b_h100_fp8.out &&
 grep -q '^  apply_layernorm_1p \.* True$' train_llama3_8b_h100_fp8.out && grep -q '^  decoupled_lr \.* 0.0005$' train_llama3_8b_h100_fp8.out &&
 grep -q '^  calculate_per_token_loss \.* True$' train_llama3_8b_h100_fp8.out"
ok "train_mixtral_8x7b_distributed runs whole (MoE included), with a tokenizer.json for Llama2Tokenizer" \
	run_example train_mixtral_8x7b_distributed "" 's/^Llama2Tokenizer$/HuggingFaceTokenizer/; s/^99990,8,2$/949,50,1/'
ok "  8 experts, top-2, aux_loss 1e-2, alltoall, logging load_balancing_loss" sh -c "
 grep -q '^  num_experts \.* 8$' train_mixtral_8x7b_distributed.out && grep -q '^  moe_router_topk \.* 2$' train_mixtral_8x7b_distributed.out &&
 grep -q '^  moe_aux_loss_coeff \.* 0\.01$' train_mixtral_8x7b_distributed.out &&
 grep -q '^  moe_token_dispatcher_type \.* alltoall$' train_mixtral_8x7b_distributed.out &&
 test \$(grep -c ' iteration .* | load_balancing_loss: [0-9.E+-]* |' train_mixtral_8x7b_distributed.out) = 4 &&
 grep -q '^WARNING: --moe-grouped-gemm is accepted without effect' train_mixtral_8x7b_distributed.out"
done_testing
