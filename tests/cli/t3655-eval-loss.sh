#!/bin/sh
# mgt-eval loss: the validation loss of a checkpoint equals the one mgt-train printed at that
# iteration, bit for bit (same samples, same code), in one process and under mpirun with
# TP2 x PP2; the test split; a Hugging Face directory; bad input (TAP, run by prove).
. "$(dirname "$0")/lib.sh"
export ROOT
cd "$T" || exit 1

small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
TRAIN="--model tiny-gpt2 $BPE --data-path kjv_text_document --split 90,5,5 --data-cache-path cache
 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --eval-interval 3 --eval-iters 2
 --log-interval 1 --threads 2 --train-iters 6 --save-interval 3"

# metric FILE ITER KEY: the value of KEY in the metrics line of iteration ITER that has it
metric() {
	$PY - "$@" <<'PY'
import json, sys
f, it, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for line in open(f):
    d = json.loads(line)
    if d.get("iteration") == it and key in d and not d.get("end"):
        print(repr(d[key])); break
PY
}
# same A B: the same text, else say both
same() { [ "$1" = "$2" ] && [ -n "$1" ] || { echo "# '$1' != '$2'"; return 1; }; }
json_loss() { $PY -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['lm_loss']))" "$1"; }

"$BIN/mgt-train" $TRAIN --save ck1 --metrics-file m1.jsonl >train1.log 2>&1
ok "one process: training with validation at iterations 3 and 6" test -f ck1/iter_0000006/metadata.json

"$BIN/mgt-eval" loss --load ck1 --output e6.json >e6.out 2>e6.err
ok "loss at iteration 6: exit 0" test $? = 0
ok "... loss equals mgt-train's validation at iteration 6 bit for bit" same "$(json_loss e6.json)" "$(metric m1.jsonl 6 valid_loss)"
ok "... Megatron's block on stdout" grep -q "validation loss at iteration 6 on validation set | lm loss value: .* | lm loss PPL: " e6.out
"$BIN/mgt-eval" loss --load ck1 --ckpt-step 3 --output e3.json >/dev/null 2>&1
ok "--ckpt-step 3 equals the validation at iteration 3" same "$(json_loss e3.json)" "$(metric m1.jsonl 3 valid_loss)"
"$BIN/mgt-eval" loss --load ck1 --ckpt-step 3 --eval-from-sample 16 --output e3b.json >/dev/null 2>&1
ok "--eval-from-sample 16 at iteration 3: the samples validation 2 used" test "$($PY -c "import json; print(json.load(open('e3b.json'))['first_sample'])")" = 16
"$BIN/mgt-eval" loss --load ck1 --ckpt-step 6 --eval-from-sample 0 --output e0.json >/dev/null 2>&1
ok "... iteration 6 on validation 1's samples differs from iteration 3's" sh -c "[ \"$(json_loss e0.json)\" != \"$(json_loss e3.json)\" ]"

# the test split at the end of training: mgt-train's "on test set" line (metrics test_loss)
"$BIN/mgt-eval" loss --load ck1 --eval-split test --output et.json >et.out 2>/dev/null
tl=$($PY -c "
import json
for l in open('m1.jsonl'):
    d = json.loads(l)
    if 'test_loss' in d: print(repr(d['test_loss']))")
ok "--eval-split test equals mgt-train's test-set loss" same "$(json_loss et.json)" "$tl"
ok "... named the test set" grep -q "on test set" et.out

# TP2 x PP2 under mpirun, evaluated in the same layout
if command -v mpirun >/dev/null 2>&1; then
	RUN="sh $ROOT/tests/mpirun.sh"
	$RUN 4 "$BIN/mgt-train" $TRAIN --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
		--save ck4 --metrics-file m4.jsonl >train4.log 2>&1
	ok "TP2 x PP2: training" test -f ck4/iter_0000006/metadata.json
	$RUN 4 "$BIN/mgt-eval" loss --load ck4 --output e4.json >e4.out 2>e4.err
	ok "TP2 x PP2: mgt-eval loss under mpirun, the checkpoint's layout, exit 0" test -f e4.json
	ok "... equals mgt-train's validation at iteration 6 bit for bit" same "$(json_loss e4.json)" "$(metric m4.jsonl 6 valid_loss)"
	ok "... one block on stdout" test "$(grep -c 'validation loss at iteration 6' e4.out)" = 1
	"$BIN/mgt-eval" loss --load ck4 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
		--output e41.json >/dev/null 2>&1
	ok "the TP2 x PP2 checkpoint in one process: within 1e-5 of its validation" $PY -c "
import json,sys
a=json.load(open('e41.json'))['lm_loss']; b=json.load(open('e4.json'))['lm_loss']
sys.exit(abs(a-b) > 1e-5*abs(b))"
else
	skip "mpirun not found"
fi

# a Hugging Face directory: evaluated as the checkpoint mgt-ckpt-convert makes of it (not as ck1:
# the vocabulary's padding rows, which Megatron's loss includes, do not go to Hugging Face)
"$BIN/mgt-ckpt-convert" --load-dir ck1 --save-dir hf1 --dtype fp32 >/dev/null 2>&1
"$BIN/mgt-ckpt-convert" --load-dir hf1 --save-dir back1 >/dev/null 2>&1
DATA="--data-path kjv_text_document --split 90,5,5 --data-cache-path cache --seq-length 32 --micro-batch-size 2
 --global-batch-size 8 --eval-iters 2 --eval-interval 3 --train-iters 6 --eval-from-sample 16 --threads 2"
mkdir tmp
TMPDIR=$T/tmp "$BIN/mgt-eval" loss --hf hf1 $DATA --output ehf.json >/dev/null 2>ehf.err
"$BIN/mgt-eval" loss --load back1 $DATA --output eback.json >/dev/null 2>&1
ok "--hf: the loss of the converted checkpoint, bit for bit" same "$(json_loss ehf.json)" "$(json_loss eback.json)"
ok "... its temporary checkpoint (in \$TMPDIR) is removed" test -z "$(ls tmp)"

# TensorBoard: loss, tasks and perplexity write event files an independent reader accepts (every
# CRC checked), holding the values of their JSON output at the checkpoint's iteration
"$BIN/mgt-eval" loss --load ck1 --tensorboard-dir tb --log-validation-ppl-to-tensorboard --output tbl.json >/dev/null 2>&1
"$BIN/mgt-eval" tasks --load ck1 --task "$SHARE/tasks/kjv-choice.jsonl" --limit 4 --max-length 128 --threads 2 \
	--tensorboard-dir tb --output tbt.json 2>/dev/null
echo '{"text": "In the beginning God created the heaven and the earth."}' >texts.jsonl
"$BIN/mgt-eval" perplexity --load ck1 --texts texts.jsonl --tensorboard-dir tb --output tbp.jsonl 2>/dev/null
ok "TensorBoard: three event files" test "$(ls tb | grep -c '^events.out.tfevents.*mgt-eval$')" = 3
ok "... every record's CRC checks, and the values are the JSON outputs' at iteration 6" $PY - <<'PY'
import json, os, subprocess, sys
import numpy as np
vals = {}
for f in os.listdir("tb"):
    out = subprocess.run(["/usr/bin/python3", os.environ["ROOT"] + "/tests/tb/read_events.py", "tb/" + f],
                         capture_output=True, text=True)
    if out.returncode: sys.exit("reader failed on " + f + ": " + out.stderr)
    for line in out.stdout.splitlines():
        r = json.loads(line)
        if "tag" in r: vals[(r["tag"], r["step"])] = r["value"]
want = {}
l = json.load(open("tbl.json"))
want[("lm loss validation", 6)] = l["lm_loss"]
want[("lm loss validation ppl", 6)] = l["ppl"]
t = json.load(open("tbt.json"))["results"]["kjv-choice"]
for k in ("acc", "acc_norm", "acc_stderr"): want[("kjv-choice/" + k, 6)] = t[k + ",none"]
p = json.loads(open("tbp.jsonl").read().splitlines()[-1])["total"]
for k in ("perplexity", "bits_per_byte", "tokens"): want[("texts/" + k, 6)] = p[k]
bad = [(k, v, vals.get(k)) for k, v in want.items() if vals.get(k) != float(np.float32(v))]
sys.exit(("mismatch: %s" % bad) if bad else 0)
PY

# bad input
ok "no --load: exit 2" exits 2 "$BIN/mgt-eval" loss
ok "missing checkpoint: exit 6" exits 6 "$BIN/mgt-eval" loss --load nothere
ok "... naming it" err_has nothere
ok "a model flag that does not match the checkpoint: exit 6" exits 6 "$BIN/mgt-eval" loss --load ck1 --num-layers 3
ok "... naming the argument" err_has num_layers
ok "--eval-split bogus: exit 2" exits 2 "$BIN/mgt-eval" loss --load ck1 --eval-split bogus
ok "an unknown flag: exit 2" exits 2 "$BIN/mgt-eval" loss --load ck1 --no-such-flag
ok "a missing data prefix: exit 1 (as mgt-train)" exits 1 "$BIN/mgt-eval" loss --load ck1 --data-path nothere
ok "--output into a missing directory: exit 1" exits 1 "$BIN/mgt-eval" loss --load ck1 --output no/dir/x.json
done_testing
