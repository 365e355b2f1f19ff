#!/bin/sh
# Megatron-LM's flags in mgt-train (TAP, run by prove): every flag of arguments.py and of the
# example launch scripts is known (implemented, accepted without effect, or refused naming the
# flag and why); ignored flags change nothing; the example scripts' argument lists run with sizes
# and paths shrunk; values out of range are refused; memory is checked before allocating; the
# argument dump, parameter count, params norm, --exit-duration-in-mins, --async-save and the
# test-set evaluation.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
MEG=$ROOT/tests/data/megatron   # Megatron-LM's flags and example arguments (tests/data/megatron/README.md)
FLAGS=$MEG/arguments-flags.txt
TOKS=$SHARE/tokenizers/gpt2

# ---- classification -------------------------------------------------------------------------
"$BIN/mgt-train" --megatron-flags <"$FLAGS" >classes
ok "every flag of arguments.py is classified" sh -c "test \$(grep -vc '^#' '$FLAGS') -eq \$(wc -l <classes)"
ok "no flag of arguments.py is unknown" sh -c '! grep " unknown" classes'
for c in implemented ignored refused; do echo "# $c: $(awk -v c="$c" '{ sub(":", "", $2) } $2 == c' classes | wc -l)"; done
cat "$MEG"/examples/*.args | grep -o '^--[a-z0-9-]*' | sort -u >example-flags
"$BIN/mgt-train" --megatron-flags <example-flags >example-classes
ok "no flag of the example scripts is unknown" sh -c '! grep " unknown" example-classes'
ok "the issue's flags are known" sh -c "printf '%s\n' --use-mcore-models --no-masked-softmax-fusion --distributed-backend \
 --num-workers --attention-softmax-in-fp32 --no-gradient-accumulation-fusion --transformer-impl --use-flash-attn \
 --exit-signal-handler --exit-duration-in-mins --ckpt-format --ckpt-step --no-load-rng --log-params-norm --async-save \
 --overlap-param-gather --tensorboard-dir --recompute-activations | '$BIN/mgt-train' --megatron-flags | grep -v ' unknown' | wc -l | grep -qx 18"
ok "an unknown flag is still refused" exits 2 "$BIN/mgt-train" --no-such-flag
ok "  naming it" err_has "unknown flag '--no-such-flag'"

# Every refused flag: exit 2, the flag and the reason in the message.
bad=0
for f in $(grep ' refused' classes | cut -d' ' -f1); do
	why=$(grep "^$f refused: " classes | sed 's/^[^:]*: //')
	"$BIN/mgt-train" "$f" >/dev/null 2>err; r=$?
	if [ $r != 2 ] || ! grep -qF -- "$f is not supported by mgt-train: $why" err; then
		bad=$((bad + 1)); echo "# $f: exit $r: $(head -c 200 err)"
	fi
done
ok "every refused flag exits 2 naming the flag and the reason" test $bad = 0
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
 --wandb-project p --profile --profile-ranks 0 1 --manual-gc --rampup-batch-size 2 2 100 --expert-model-parallel-size 1"
ok "plain run" exits 0 $BASE --train-iters 4 --metrics-file plain.jsonl
ok "the same run with Megatron's no-op flags" exits 0 $BASE --train-iters 4 $IGN --metrics-file ign.jsonl
cp "$T/err" ign.err
ok "  says once for each that it has no effect" sh -c "test \$(grep -c 'is accepted without effect' ign.err) -eq 18 &&
 test \$(grep -c '^WARNING: --use-mcore-models is accepted without effect' ign.err) -eq 1"
ok "  and trains bit for bit the same" sh -c "grep -o '\"lm_loss\":[^,]*' plain.jsonl >a; grep -o '\"lm_loss\":[^,]*' ign.jsonl >b; test -s a && cmp a b"
ok "an alias sets what it stands for" exits 0 $BASE --train-iters 1 --use-rotary-position-embeddings
ok "  (rope)" grep -q "position_embedding_type .* rope" "$T/err"

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
# one by one, and left out of the run.
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
	(cd "$T" && xargs -d '\n' -a "$n.all" "$BIN/mgt-train" --device cpu --threads 2 >"$n.all.out" 2>&1)
	first=$(echo $refused | cut -d' ' -f1)
	grep -q "error: $first" "$n.all.out" || { echo "# unchanged: $(grep error "$n.all.out")"; return 1; }
	(cd "$T" && xargs -d '\n' -a "$n.run" "$BIN/mgt-train" --device cpu --threads 2 >"$n.out" 2>&1) || { grep -v '^  [a-z]' "$n.out" | tail -3 | sed 's/^/# /'; return 1; }
	test "$(grep -c ' iteration  *[1-4]/  *4 | consumed samples' "$n.out")" = 4
}
ok "train_gpt3_175b_distributed runs without --step-batch-size-schedule" run_example train_gpt3_175b_distributed \
	"--step-batch-size-schedule"
ok "train_llama3_8b_h100_fp8 runs without fp8, layernorm-1p, decoupled lr, per-token loss, torch_dist" \
	run_example train_llama3_8b_h100_fp8 "--apply-layernorm-1p --decoupled-lr --decoupled-min-lr --calculate-per-token-loss
	--fp8-format --fp8-amax-history-len --fp8-amax-compute-algo --fp8-param-gather --ckpt-format"
ok "train_mixtral_8x7b_distributed runs without MoE, with a tokenizer.json for Llama2Tokenizer" \
	run_example train_mixtral_8x7b_distributed "--num-experts --moe-router-topk --moe-router-load-balancing-type
	--moe-aux-loss-coeff --moe-grouped-gemm --moe-token-dispatcher-type" 's/^Llama2Tokenizer$/HuggingFaceTokenizer/; s/^99990,8,2$/949,50,1/'
done_testing
