#!/bin/sh
# mgt-train --plan FILE[:N] (plan files as mgt-plan(5) describes, written here by hand): the plan's
# flags are applied (the run equals the one with the same flags given directly, bit for bit), the
# command line overrides the plan's other flags, a differing layout flag, a plan for another
# number of processes and bad files are refused with their exit statuses, and the report line
# gives the predicted, computed and measured figures (TAP, run by prove).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

# plan FILE GPUS ARGS...: a one-plan file (memory 300 MB of which 100 MB overhead, 0.05 s)
plan() {
	f=$1 g=$2; shift 2
	$PY - "$f" "$g" "$@" <<'PY'
import json, sys
f, g, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
p = {"rank": 1, "gpus": g, "memory": {"total": 3e8, "overhead": 1e8}, "time": {"iteration": 0.05},
     "tflops_per_gpu": 1.0, "args": args}
json.dump({"format": "mgt-plan", "format_version": 1, "plans": [p]}, open(f, "w"))
PY
}
LAYOUT="--model tiny-gpt2 --micro-batch-size 2 --global-batch-size 4 --seq-length 32 --lr 1e-3"
RUN="--mock-data --train-iters 6 --log-interval 1 --device cpu --threads 2"
RUN2="--mock-data --train-iters 2 --log-interval 1 --device cpu --threads 2"
plan p.json 1 $LAYOUT

ok "--plan p.json: exit 0" exits 0 "$BIN/mgt-train" --plan p.json $RUN --metrics-file a.jsonl
cp "$T/err" plan.err
ok "  the same losses as the plan's flags given directly" sh -c "'$BIN/mgt-train' $LAYOUT $RUN --metrics-file b.jsonl 2>/dev/null &&
 grep -o '\"lm_loss\":[^,]*' a.jsonl >la && grep -o '\"lm_loss\":[^,]*' b.jsonl >lb && test -s la && cmp la lb"
ok "  one plan line after iteration 5" sh -c "test \$(grep -c '^plan p.json:1: memory per process predicted 286.1 MiB, computed ' plan.err) = 1 &&
 grep -n 'plan p.json:1' plan.err | cut -d: -f1 >n && grep -n 'iteration        5/' plan.err | cut -d: -f1 >i5 &&
 grep -n 'iteration        6/' plan.err | cut -d: -f1 >i6 && test \$(cat i5) -lt \$(cat n) && test \$(cat n) -lt \$(cat i6)"
ok "  its computed memory is the memory line's" $PY - plan.err <<'PY'
import re, sys
t = open(sys.argv[1]).read()
a = re.search(r"plan p.json:1: .* computed ([0-9.]+) MiB, measured ([0-9.]+) MiB", t)
b = re.search(r"memory before training: computed ([0-9.]+) MiB", t)
r = re.search(r"peak RSS ([0-9.]+) MiB", t)
print("# plan line (computed, measured) %s; memory line computed %s; peak RSS %s" % (a and a.groups(), b and b.group(1), r and r.group(1)))
sys.exit(0 if a and b and a.group(1) == b.group(1) and float(a.group(2)) > float(a.group(1)) else 1)
PY
ok "  iteration time: predicted 0.050 s and a measured mean" grep -q "iteration time predicted 0.050 s, measured [0-9.]* s (mean after the first iteration) | measured / predicted: [0-9.]*$" plan.err

ok "the command line overrides a flag that is not the layout's (--lr)" sh -c "'$BIN/mgt-train' --plan p.json --lr 2e-3 $RUN2 --metrics-file c.jsonl 2>/dev/null &&
 '$BIN/mgt-train' $LAYOUT --lr 2e-3 $RUN2 --metrics-file d.jsonl 2>/dev/null && grep -o '\"lm_loss\":[^,]*' c.jsonl >lc && grep -o '\"lm_loss\":[^,]*' d.jsonl >ld && test -s lc && cmp lc ld && head -2 la >la2 && ! cmp -s lc la2"
ok "a layout flag with another value: exit 2" exits 2 "$BIN/mgt-train" --plan p.json --micro-batch-size 4 $RUN
ok "  naming both" err_has "plan p.json:1 sets --micro-batch-size 2, the command line --micro-batch-size 4"
ok "the same value is accepted" exits 0 "$BIN/mgt-train" --plan=p.json:1 --micro-batch-size 2 --mock-data --train-iters 1 --device cpu --threads 2
ok "no plan 2: exit 2" exits 2 "$BIN/mgt-train" --plan p.json:2 $RUN
ok "  saying so" err_has "no plan 2 (the file holds 1)"
plan p2.json 2 $LAYOUT
ok "a plan for 2 processes in one: exit 2" exits 2 "$BIN/mgt-train" --plan p2.json $RUN
ok "  saying so" err_has "is for 2 processes (GPUs), this run has 1"
printf '{"format": "mgt-plan", "plans": [\n' >bad.json
ok "a plan file that is not JSON: exit 3" exits 3 "$BIN/mgt-train" --plan bad.json $RUN
ok "  naming the file and line" err_has "bad.json: line 2"
printf '{"format": "mgt-plan", "plans": [{"rank": 1, "gpus": 1, "args": []}]}\n' >nomem.json
ok "a plan without its memory: exit 3" exits 3 "$BIN/mgt-train" --plan nomem.json $RUN
ok "  naming the field" err_has '"memory.total" is missing or not a number'
printf '{"plans": []}\n' >other.json
ok "a JSON file that is not a plan: exit 3" exits 3 "$BIN/mgt-train" --plan other.json $RUN
ok "a missing plan file: exit 1" exits 1 "$BIN/mgt-train" --plan missing.json $RUN
ok "--plan without a value: exit 2" exits 2 "$BIN/mgt-train" $RUN --plan

if command -v mpirun >/dev/null 2>&1; then
	plan tp2.json 2 $LAYOUT --tensor-model-parallel-size 2
	ok "TP2 under mpirun: exit 0" exits 0 sh "$ROOT/tests/mpirun.sh" 2 "$BIN/mgt-train" --plan tp2.json $RUN
	ok "  one plan line (the last rank's)" sh -c "test \$(grep -c '^plan tp2.json:1: memory per process' '$T/err') = 1"
else
	skip "mpirun not found: TP2"; skip "mpirun not found"
fi
done_testing
