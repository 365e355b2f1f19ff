#!/bin/sh
# mgt-train on CPU: bitwise-exact resume (plain, with dropout, after SIGTERM), checkpoint
# atomicity, and bad input refused before anything is written (TAP, run by prove).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

# GPT-2's byte-level BPE cut to 1,100 tokens (lib.sh small_bpe): with the whole vocabulary the
# output layer was most of each step, and nothing here depends on its size
small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
D=kjv_text_document
# A small and quick configuration of the tiny GPT-2 preset; dropout on.
TRAIN="$BIN/mgt-train --model tiny-gpt2 $BPE --data-path $D --split 98,2,0 --data-cache-path cache
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3 --lr-warmup-iters 3
 --lr-decay-style cosine --eval-interval 5 --eval-iters 1 --log-interval 1 --threads 2"

# losses FILE FROM TO: "iteration lm_loss grad_norm lr" of training lines FROM..TO, exact text
losses() {
	$PY - "$@" <<'PY'
import json, sys
f, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for line in open(f):
    o = json.loads(line)
    if "lm_loss" in o and a <= o["iteration"] <= b:
        print(o["iteration"], repr(o["lm_loss"]), repr(o["grad_norm"]), repr(o["lr"]))
PY
}

ok "20 uninterrupted iterations" exits 0 $TRAIN --train-iters 20 --metrics-file full.jsonl
ok "10 iterations with --save" exits 0 $TRAIN --train-iters 20 --exit-interval 10 --save ck --metrics-file a.jsonl
ok "tracker names iteration 10" test "$(cat ck/latest_checkpointed_iteration.txt)" = 10
ok "iteration directory and no temporary" sh -c 'test -f ck/iter_0000010/metadata.json && ! ls -d ck/*.tmp 2>/dev/null'
ok "resume 10 more with --load" exits 0 $TRAIN --train-iters 20 --load ck --save ck --metrics-file b.jsonl
losses full.jsonl 1 10 >full1; losses a.jsonl 1 10 >a1
losses full.jsonl 11 20 >full2; losses b.jsonl 11 20 >b2
ok "first 10 losses identical" cmp -s full1 a1
ok "resumed losses 11-20 identical bit for bit" sh -c 'test -s b2 && cmp b2 full2'
[ -s b2 ] && cmp -s b2 full2 || { echo "# full:"; sed 's/^/#   /' full2 | head -3; echo "# resumed:"; sed 's/^/#   /' b2 | head -3; }
ok "final checkpoint at 20" test "$(cat ck/latest_checkpointed_iteration.txt)" = 20

# SIGTERM: finish the iteration, save, exit 130; resuming continues the same run.
$TRAIN --train-iters 20 --save sig --metrics-file s.jsonl >sig.out 2>sig.err &
pid=$!
i=0; while [ $i -lt 600 ] && ! grep -q 'iteration        3/' sig.err 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid; wait $pid; rc=$?
ok "SIGTERM exits 130" test $rc = 130
it=$(cat sig/latest_checkpointed_iteration.txt 2>/dev/null)
ok "SIGTERM saved a checkpoint" test -n "$it" -a -d "sig/iter_$(printf %07d "${it:-0}")"
ok "resume after SIGTERM" exits 0 $TRAIN --train-iters 20 --load sig --metrics-file s2.jsonl
losses s2.jsonl $((it + 1)) 20 >s2; losses full.jsonl $((it + 1)) 20 >f2
ok "losses after SIGTERM resume match the uninterrupted run" sh -c "test -s s2 && cmp s2 f2"

# A step whose loss or gradient norm is not finite is skipped and counted (a learning rate that
# overflows the parameters at step 1 makes every later loss NaN).
ok "runs through non-finite steps" exits 0 $TRAIN --train-iters 4 --lr 1e38 --lr-warmup-iters 0 --clip-grad 0 \
	--lr-decay-style constant --metrics-file nan.jsonl --eval-interval 0
ok "non-finite iterations skipped in the metrics" $PY -c '
import json, sys
rows = [json.loads(l) for l in open("nan.jsonl")]
assert [r["skipped"] for r in rows] == [False, True, True, True], rows
'
ok "log lines count skipped and nan iterations per interval" sh -c "grep -c 'number of skipped iterations:   1 | number of nan iterations:   1 |' '$T/err' | grep -qx 3"

# Bad input: clear error, documented exit status, nothing written.
bad() { # bad DESC CODE NEEDLE ARGS...
	d=$1 c=$2 nd=$3; shift 3
	rm -rf out.jsonl newck
	ok "$d: exit $c" exits "$c" "$@" --save newck --metrics-file out.jsonl
	ok "$d: message" err_has "$nd"
	ok "$d: nothing written" no_files out.jsonl newck
}
bad "heads do not divide hidden" 2 "does not divide --hidden-size" $TRAIN --train-iters 5 --num-attention-heads 5
bad "groups do not divide heads" 2 "--num-query-groups 3 does not divide" $TRAIN --train-iters 5 --group-query-attention --num-query-groups 3
bad "sequence longer than positions" 2 "longer than --max-position-embeddings" $TRAIN --train-iters 5 --seq-length 256
bad "missing data prefix" 1 "nothere" $TRAIN --train-iters 5 --data-path nothere
bad "a --data-path naming the .bin file" 1 "give $D, without .bin" $TRAIN --train-iters 5 --data-path $D.bin
bad "unknown flag" 2 "unknown flag '--no-such-flag'" $TRAIN --train-iters 5 --no-such-flag
bad "checkpoint of another shape" 6 "hidden_size" $TRAIN --train-iters 5 --load ck --hidden-size 64
bad "checkpoint of another architecture" 6 "normalization" $TRAIN --train-iters 5 --load ck --normalization RMSNorm
bad "checkpoint without --qk-layernorm" 6 "qk_layernorm" $TRAIN --train-iters 5 --load ck --qk-layernorm
bad "checkpoint without --openai-gelu" 6 "openai_gelu" $TRAIN --train-iters 5 --load ck --openai-gelu
bad "--use-rope-scaling without RoPE" 2 "needs --position-embedding-type rope" $TRAIN --train-iters 5 --use-rope-scaling
bad "--rope-scaling-high-freq-factor not above the low one" 2 "0 < low < high" $TRAIN --train-iters 5 \
	--position-embedding-type rope --use-rope-scaling --rope-scaling-high-freq-factor 1
# a checkpoint written before the keys existed (metadata.json's args without them) loads with
# the features off
cp -r ck old
$PY - old/iter_0000020/metadata.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for k in ("qk_layernorm", "use_rope_scaling", "rope_scaling_factor", "rope_scaling_low_freq_factor",
          "rope_scaling_high_freq_factor", "rope_scaling_original_max_position_embeddings", "openai_gelu"):
    del m["args"][k]
json.dump(m, open(sys.argv[1], "w"))
PY
$PY "$ROOT/tests/cli/ckpt_rehash.py" old/iter_0000020
ok "a checkpoint without the newer shape keys loads" exits 0 $TRAIN --train-iters 21 --load old
bad "  but not with --qk-layernorm" 6 "qk_layernorm" $TRAIN --train-iters 21 --load old --qk-layernorm
cp -r ck trunc
f=$(ls trunc/iter_0000020/model_*.h5 | head -1)
truncate -s $(($(stat -c %s "$f") / 2)) "$f"
bad "truncated checkpoint" 6 "model_tp00" $TRAIN --train-iters 22 --load trunc
# token ids beyond the vocabulary: a NullTokenizer dataset with ids up to 999, a model of 500
printf '{"text": "1 2 3 999 4 5"}\n{"text": "7 8 9 10 11 12 13 14"}\n' >ids.jsonl
"$BIN/mgt-preprocess" --input ids.jsonl --output-prefix ids --tokenizer-type NullTokenizer --vocab-size 1000 --quiet >/dev/null 2>&1
bad "token id beyond the vocabulary" 3 "999" "$BIN/mgt-train" --model tiny-gpt2 --tokenizer-type NullTokenizer --data-cache-path cache2 \
	--vocab-size 500 --data-path ids_text_document --seq-length 4 --micro-batch-size 1 --train-iters 1 --lr 1e-3
# --data-path without --split: Megatron's legacy default 969,30,1 with its warning, so a
# validation split exists (it used to train on all of the data and validate on nothing)
NOSPLIT=$(echo "$TRAIN" | sed 's/--split 98,2,0 //')
ok "--data-path without --split" exits 0 $NOSPLIT --train-iters 5 --metrics-file nosplit.jsonl
ok "... warns as Megatron does" err_has 'WARNING: Please specify --split when using --data-path. Using legacy default value of "969, 30, 1"'
ok "... the argument dump shows the split used" err_has "split \.* 969, 30, 1"
ok "... and it validates (a validation loss at iteration 5)" $PY -c "
import json, sys
sys.exit(not any(o.get('iteration') == 5 and 'valid_loss' in o for o in map(json.loads, open('nosplit.jsonl'))))"
# --exit-on-missing-checkpoint: a --load directory without a checkpoint ends the run (Megatron's
# flag; it exits 0 there, mgt 6) instead of starting from random weights
mkdir -p empty
ok "--exit-on-missing-checkpoint with an empty --load: exit 6" exits 6 $TRAIN --train-iters 5 --load empty --exit-on-missing-checkpoint
ok "... with Megatron's line" err_has ">> '--exit-on-missing-checkpoint' set ... exiting. <<"
ok "... naming the directory and the flag" err_has "error: --load empty: no checkpoint there"
ok "... without the flag it starts from random" exits 0 $TRAIN --train-iters 5 --load empty
: >afile
ok "--save under a regular file: refused before training (exit 1)" exits 1 $TRAIN --train-iters 5 --save afile/ck
ok "... naming --save and the path" err_has "error: --save: afile/ck: cannot create directory"
ok "... before the first iteration" sh -c "! grep -q 'iteration  *1/' '$T/err'"
ok "--save into a new directory" exits 0 $TRAIN --train-iters 5 --save probed
ok "... the probe file is gone" sh -c "test -d probed/iter_0000005 && ! ls -A probed | grep -q probe"
done_testing
