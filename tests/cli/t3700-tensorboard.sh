#!/bin/sh
# mgt-train --tensorboard-dir (TAP, run by prove): the event files are read back by an
# independent reader (tests/tb/read_events.py: TFRecord framing and protocol buffers parsed by
# hand, every length and data CRC32C checked); the first record is the file version; the tags are
# Megatron's, present as the flags say, at the iteration and at the consumed samples; the values
# are the run's (the --metrics-file JSONL); a corrupted byte is caught; under mpirun with TP2 x PP2
# one file is written (the last rank); a directory that cannot be made is an error naming it.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
READ="$PY $ROOT/tests/tb/read_events.py"
BASE="$BIN/mgt-train --model tiny-gpt2 --mock-data --split 90,5,5 --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
 --eval-interval 3 --eval-iters 1 --train-iters 6 --threads 2 --device cpu"
ALL="--log-validation-ppl-to-tensorboard --log-world-size-to-tensorboard --log-memory-to-tensorboard
 --log-timers-to-tensorboard --log-throughput --log-params-norm"

# check EVENTS METRICS MODE WORLD DIR: the events (read_events.py's JSONL) against the metrics JSONL.
# MODE "all": every flag of $ALL, --tensorboard-log-interval 1; "sparse": interval 2, no loss
# scale, no learning rate, none of $ALL.  WORLD: the expected world size; DIR: --tensorboard-dir.
check() {
	$PY - "$@" <<'PY'
import json, math, sys
import numpy as np
ev = [json.loads(l) for l in open(sys.argv[1])]
met = [json.loads(l) for l in open(sys.argv[2])]
mode, world, tbdir = sys.argv[3], int(sys.argv[4]), sys.argv[5]
f32 = lambda x: float(np.float32(x))
bad = []
def want(cond, what):
    if not cond: bad.append(what)
want(ev[0].get("version") == "brain.Event:2" and all("version" not in e for e in ev[1:]), "file_version first, once")
sc = [e for e in ev[1:] if "value" in e]
tx = {e["tag"]: e["text"] for e in ev[1:] if "text" in e}
series = {}
for e in sc: series.setdefault(e["tag"], []).append((e["step"], e["value"]))
train = [o for o in met if "lm_loss" in o]
gbs, n = 4, len(train)
every = 1 if mode == "all" else 2
its = [o["iteration"] for o in train if o["iteration"] % every == 0]
def at(tag):
    return dict(series.get(tag, []))
def pair(tag, vals):  # vals: {iteration: value}; TAG at the iteration, TAG vs samples at 4 x it
    got, vs = series.get(tag, []), series.get(tag + " vs samples", [])
    want(got == [(i, f32(vals[i])) for i in its], "%s: %s" % (tag, got[:3]))
    want(vs == [(gbs * i, f32(vals[i])) for i in its], "%s vs samples: %s" % (tag, vs[:3]))
loss = {o["iteration"]: o["lm_loss"] for o in train}
pair("lm loss", loss)
pair("batch-size", {i: gbs for i in loss})
gn = {o["iteration"]: o["grad_norm"] for o in train}
pair("grad-norm", gn)
# the rate after the step (the log line's): the next iteration's "lr" in the metrics
lr = {o["iteration"]: o["lr"] for o in train}
post = {i: lr[i + 1] for i in lr if i + 1 in lr}
if mode == "all":
    got = at("learning-rate")
    want(all(got[i] == f32(post[i]) for i in post) and sorted(got) == its, "learning-rate: %s" % sorted(got.items())[:3])
    pair("loss-scale", {i: 1.0 for i in loss})
    pair("world-size", {i: world for i in loss})
    want(sorted(at("params-norm")) == its and all(v > 0 for v in at("params-norm").values()), "params-norm")
    for m in ("mem-allocated-bytes", "mem-max-allocated-bytes"):
        want(sorted(at(m)) == its and all(v > 1e6 for v in at(m).values()), m)
    want(all(at("mem-max-allocated-bytes")[i] >= at("mem-allocated-bytes")[i] for i in its), "peak >= now")
    want(sorted(at("iteration-time")) == its[1:] and all(v > 0 for v in at("iteration-time").values()), "iteration-time: after the first")
    want(sorted(at("throughput")) == its and all(v > 0 for v in at("throughput").values()), "throughput")
    want(tx.get("tensorboard_dir") == tbdir and tx.get("train_iters") == "6" and tx.get("log_timers_to_tensorboard") == "True",
         "the arguments as texts: %s" % {k: tx.get(k) for k in ("tensorboard_dir", "train_iters")})
    want(all(e["step"] == 0 for e in ev[1:] if "text" in e), "texts at the start iteration (0)")
    known = {"lm loss", "batch-size", "grad-norm", "learning-rate", "loss-scale", "world-size", "params-norm",
             "lm loss validation", "lm loss validation ppl", "lm loss test", "lm loss test ppl"}
    known |= {k + " vs samples" for k in known}
    known |= {"mem-allocated-bytes", "mem-max-allocated-bytes", "iteration-time", "throughput"}
else:
    known = {"lm loss", "batch-size", "grad-norm", "lm loss validation", "lm loss test"}
    known |= {k + " vs samples" for k in known}
want(set(series) == known, "tags: extra %s, missing %s" % (set(series) - known, known - set(series)))
# validation: at iterations 3, 6 and the final one (6), then the test set, each with its pair
vals = [o for o in met if "valid_loss" in o]
tests = [o for o in met if "test_loss" in o]
for tag, rows, key in (("lm loss validation", vals, "valid_loss"), ("lm loss test", tests, "test_loss")):
    want(series.get(tag) == [(o["iteration"], f32(o[key])) for o in rows] and rows, "%s: %s" % (tag, series.get(tag)))
    want(series.get(tag + " vs samples") == [(gbs * o["iteration"], f32(o[key])) for o in rows], tag + " vs samples")
    if mode == "all":
        want(series.get(tag + " ppl") == [(o["iteration"], f32(math.exp(min(20, o[key])))) for o in rows], tag + " ppl")
want(all(abs(e["wall_time"] - ev[0]["wall_time"]) < 600 for e in ev), "wall times")
for b in bad: print("# " + b)
print("# %d scalars, %d texts, %d tags" % (len(sc), len(tx), len(series)))
sys.exit(1 if bad else 0)
PY
}

# ---- every flag ----------------------------------------------------------------------------
ok "a run with every TensorBoard flag" exits 0 $BASE --tensorboard-dir tb/all $ALL --metrics-file all.jsonl
ok "  one event file, named events.out.tfevents.SECS.HOST.PID.N.mgt-train" \
	sh -c 'test $(ls tb/all | wc -l) = 1 && ls tb/all | grep -qx "events\.out\.tfevents\.[0-9]*\..*\.[0-9]*\.0\.mgt-train"'
F=$(ls tb/all/events.out.tfevents.* | head -1)
ok "  the reader checks every record's length and data CRC32C" sh -c "$READ '$F' >all.ev"
ok "  tags, steps and values as Megatron's, equal to the metrics file's" check all.ev all.jsonl all 1 tb/all

# ---- the defaults and the switches ---------------------------------------------------------
ok "--tensorboard-log-interval 2, --no-log-loss-scale-to-tensorboard, --no-log-learnig-rate-to-tensorboard" \
	exits 0 $BASE --tensorboard-dir tb/sparse --tensorboard-log-interval 2 --no-log-loss-scale-to-tensorboard \
	--no-log-learnig-rate-to-tensorboard --tensorboard-queue-size 1 --metrics-file sparse.jsonl
ok "  read back" sh -c "$READ tb/sparse/events.out.tfevents.* >sparse.ev"
ok "  every second iteration, none of the switched-off tags; validation at every evaluation" \
	check sparse.ev sparse.jsonl sparse 1 tb/sparse
ok "  and the same losses as with every flag (TensorBoard changes nothing)" sh -c \
	"grep -o '\"lm_loss\":[^,]*' all.jsonl >a; grep -o '\"lm_loss\":[^,]*' sparse.jsonl >b; test -s a && cmp a b"
printf '%s\n' --tensorboard-dir --tensorboard-log-interval --tensorboard-queue-size --log-timers-to-tensorboard \
	--log-validation-ppl-to-tensorboard --log-memory-to-tensorboard --log-world-size-to-tensorboard \
	--log-loss-scale-to-tensorboard --no-log-loss-scale-to-tensorboard --disable-log-loss-scale-to-tensorboard \
	--no-log-learnig-rate-to-tensorboard --log-learning-rate-to-tensorboard --no-log-learning-rate-to-tensorboard \
	| "$BIN/mgt-train" --megatron-flags >classes
ok "Megatron's TensorBoard flags are implemented" sh -c "test \$(grep -c ' implemented' classes) = 13"
ok "--log-batch-size-to-tensorboard (removed from Megatron-LM) is accepted, saying why" sh -c \
	"echo --log-batch-size-to-tensorboard | '$BIN/mgt-train' --megatron-flags | grep -q 'ignored: the batch size is always written'"

# ---- the reader can fail -------------------------------------------------------------------
# corrupt FILE OFFSET OUT: a copy of FILE with the byte at OFFSET (negative: from the end) flipped
corrupt() { $PY -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[int(sys.argv[2])] ^= 0x20; open(sys.argv[3], 'wb').write(b)" "$@"; }
SIZE=$(wc -c <"$F")
corrupt "$F" $((SIZE / 2)) mid.bin
ok "a byte flipped in the middle: the reader fails" exits 1 $READ mid.bin
ok "  naming a CRC" err_has "CRC 0x"
corrupt "$F" 3 len.bin
ok "a byte of the first length flipped: the reader fails" exits 1 $READ len.bin
ok "  on the length CRC" err_has "record 0 at byte 0: length CRC"
corrupt "$F" -1 tail.bin
ok "the last data CRC flipped: the reader fails" exits 1 $READ tail.bin
ok "  on that record's data CRC" err_has "data CRC"
head -c $((SIZE - 3)) "$F" >short.bin
ok "a truncated file: the reader fails" exits 1 $READ short.bin

# ---- bad input -----------------------------------------------------------------------------
echo x >plain
ok "--tensorboard-dir under a file: exit 1" exits 1 $BASE --tensorboard-dir plain/tb
ok "  naming the flag, the directory and why" err_has "error: --tensorboard-dir: plain/tb: cannot create directory: plain: Not a directory"
ok "  before training" sh -c "! grep -q 'iteration  *1/' '$T/err'"
ok "--tensorboard-log-interval 0 refused" exits 2 $BASE --tensorboard-dir tb/x --tensorboard-log-interval 0
ok "--tensorboard-queue-size 0 refused" exits 2 $BASE --tensorboard-dir tb/x --tensorboard-queue-size 0
ok "  and nothing written" no_files tb/x

# A write that fails during training (past `ulimit -f`; stderr goes through a pipe, not limited)
( ulimit -f 10; $BASE --train-iters 20 --log-interval 20 --tensorboard-dir tb/full --tensorboard-queue-size 1; \
	echo "exit status $?" ) 2>&1 | cat >full.err
ok "a write that fails during training: a WARNING naming the file, at once" \
	grep -q "^WARNING: TensorBoard: tb/full/events.out.tfevents.*: write failed: File too large; no more events are written" full.err
ok "  training goes on to the end" grep -q "iteration  *20/  *20" full.err
ok "  then exit status 1 with the error" sh -c "tail -2 full.err | grep -q '^mgt-train: error: TensorBoard: tb/full/.*: write failed: File too large' &&
 tail -1 full.err | grep -qx 'exit status 1'"

# ---- TP2 x PP2 under mpirun: one file, the last rank's ---------------------------------------
if command -v mpirun >/dev/null 2>&1; then
	ok "TP2 x PP2 under mpirun" exits 0 sh "$ROOT/tests/mpirun.sh" 4 $BASE --threads 1 --tensor-model-parallel-size 2 \
		--pipeline-model-parallel-size 2 --tensorboard-dir tb/mp $ALL --metrics-file mp.jsonl
	ok "  exactly one event file" test "$(ls tb/mp | wc -l)" = 1
	ok "  read back, CRCs good" sh -c "$READ tb/mp/events.out.tfevents.* >mp.ev"
	ok "  the last rank's values (its metrics file), world size 4" check mp.ev mp.jsonl all 4 tb/mp
else
	skip "mpirun not found"
fi

done_testing
