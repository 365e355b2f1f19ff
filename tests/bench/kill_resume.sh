#!/bin/bash
# Crash consistency of mgt-train's checkpoints (issue 13; a benchmark, not in CI, about 3 minutes):
#   1. a reference run: ITERS iterations, a checkpoint every SAVE iterations, per-iteration
#      metrics (--metrics-file);
#   2. in a fresh directory, KILLS times: start mgt-train with --load and --save that directory,
#      SIGKILL it after a random delay (uniform in [DMIN, DMAX] ms: in the start-up, the loading,
#      an iteration or a save), then check that every iteration directory the run left loads
#      (mgt-train --load DIR --ckpt-step N --train-iters N, the real loader: metadata, every
#      shard, every tensor and its Fletcher-32 checksum) and that the tracker names one;
#   3. a last run to the end; then every metrics line of every run, and the final sequence
#      (for each iteration the last run that produced it), compared with the reference, bit for
#      bit (17 significant digits: lm_loss, grad_norm, lr, loss_scale, consumed_samples), and
#      the final checkpoints' tensors compared (h5py, when /usr/bin/python3 has it).
# A run that a kill left with iteration directories but no tracker (killed between the first
# save's rename and its tracker write) is refused by the next start (exit 6, naming
# --ckpt-step N); the loop then resumes with that flag, as the message says, and counts it.
# Raw results: tests/bench/results/kill-resume-DATE.txt (the path is printed at the end).
#
# The loader check takes the model's flags only: the schedule's do not have to agree.
#
#   tests/bench/kill_resume.sh [KILLS [SEED]]      (environment: ITERS, SAVE, DMIN, DMAX, WORK)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KILLS=${1:-50}
SEED=${2:-13}
ITERS=${ITERS:-900}
SAVE=${SAVE:-3}
DMIN=${DMIN:-30}
DMAX=${DMAX:-550}
WORK=${WORK:-$(mktemp -d)}
OUT=$ROOT/tests/bench/results/kill-resume-$(date +%Y%m%d-%H%M%S).txt
mkdir -p "$ROOT/tests/bench/results" "$WORK"
cd "$WORK" || exit 1
RANDOM=$SEED
# Megatron's flags; the tiny GPT-2 preset at hidden size 32 on mock data, dropout on (0.1).
FLAGS="--model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer --vocab-size 512
 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --hidden-size 32 --num-layers 2
 --num-attention-heads 2 --lr 1e-3 --eval-interval 0 --log-interval 1 --device cpu --threads 1"
TR="$ROOT/bin/mgt-train $FLAGS --lr-decay-style cosine --lr-warmup-iters 10 --train-iters $ITERS --save-interval $SAVE"

log() { echo "$*" | tee -a "$OUT"; }
now_ms() { date +%s%3N; }
tracker() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

log "# mgt-train kill/resume: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -m), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
log "# kills $KILLS, seed $SEED, iterations $ITERS, save every $SAVE, kill delay ${DMIN}-${DMAX} ms, work dir $WORK"

t0=$(now_ms)
$TR --save ref --metrics-file ref.jsonl >ref.log 2>&1 || { log "reference run failed: $(tail -2 ref.log)"; exit 1; }
log "reference: $ITERS iterations in $(( $(now_ms) - t0 )) ms, tracker $(tracker ref)"

declare -A checked
killed=0 unloadable=0 refused=0 checks=0 tmp_left=0 kill_in_save=0 kill_before_load=0
# loads DIR N: the iteration loads
loads() { "$ROOT/bin/mgt-train" $FLAGS --load "$1" --ckpt-step "$2" --train-iters "$2" >chk.log 2>&1; }
# the iter_N.tmp directories being written, by name and inode
tmps() { for d in run/iter_*.tmp; do [ -d "$d" ] && echo "$d:$(stat -c %i "$d")"; done; }
extra=""
for k in $(seq 1 "$KILLS"); do
	before=$(tracker run)
	tmp_before=$(tmps)
	delay=$((DMIN + RANDOM % (DMAX - DMIN + 1)))
	$TR --load run --save run --metrics-file "att_$k.jsonl" $extra >"att_$k.log" 2>&1 &
	pid=$!
	extra=""
	sleep "$(awk "BEGIN { print $delay / 1000 }")"
	if kill -KILL $pid 2>/dev/null; then how=killed; killed=$((killed + 1)); else how=finished; fi
	wait $pid 2>/dev/null
	rc=$?
	if grep -q 'pass --ckpt-step' "att_$k.log"; then
		refused=$((refused + 1))
		extra="--ckpt-step $(grep -o 'pass --ckpt-step [0-9]*' "att_$k.log" | awk '{print $3}')"
	fi
	# where the kill landed: a save in progress leaves iter_N.tmp (the next start removes it)
	tmp_after=$(tmps)
	tmps=$(echo -n "$tmp_after" | grep -c .)
	in_save=""
	[ -n "$tmp_after" ] && [ "$tmp_after" != "$tmp_before" ] && { in_save=", in a save"; kill_in_save=$((kill_in_save + 1)); }
	grep -q 'successfully loaded\|start from random' "att_$k.log" || kill_before_load=$((kill_before_load + 1))
	last_it=$(grep -o '"iteration":[0-9]*' "att_$k.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
	bad=""
	for d in run/iter_*; do
		n=${d#run/iter_}
		case $n in *[!0-9]*) continue ;; esac
		n=$((10#$n))
		[ -n "${checked[$n]:-}" ] && [ "$n" != "$(tracker run)" ] && continue
		checks=$((checks + 1))
		if loads run "$n"; then checked[$n]=1; else unloadable=$((unloadable + 1)); bad="$bad $n($(grep error chk.log | head -1))"; fi
	done
	tr=$(tracker run)
	[ -z "$tr" ] || [ -d "run/iter_$(printf %07d "$tr")" ] || bad="$bad tracker-names-missing-$tr"
	log "kill $k: delay ${delay} ms, $how (exit $rc), tracker ${before:-none} -> ${tr:-none}, last iteration logged ${last_it:-none}, iter_*.tmp left $tmps$in_save${extra:+, refused: resume with $extra}${bad:+, UNLOADABLE:$bad}"
	[ "$how" = finished ] && [ "$tr" = "$ITERS" ] && { log "the run finished before kill $k; stopping the kills"; break; }
done

t0=$(now_ms)
$TR --load run --save run --metrics-file att_final.jsonl $extra >att_final.log 2>&1
rc=$?
log "last run: exit $rc in $(( $(now_ms) - t0 )) ms, tracker $(tracker run)"
left=$(ls -d run/*.tmp run/*.old run/*.tmp.* 2>/dev/null | wc -l)
for d in run/iter_*; do
	n=$((10#${d#run/iter_}))
	[ -n "${checked[$n]:-}" ] && continue
	checks=$((checks + 1))
	loads run "$n" || { unloadable=$((unloadable + 1)); log "UNLOADABLE at the end: $n"; }
done

/usr/bin/python3 - "$ITERS" $(ls att_*.jsonl | sort -t_ -k2 -n | grep -v final) att_final.jsonl <<'PY' | tee -a "$OUT"
import json, sys
iters, files = int(sys.argv[1]), sys.argv[2:]
keys = ("consumed_samples", "lm_loss", "grad_norm", "lr", "loss_scale", "skipped")
def rows(f):
    try:
        for line in open(f):
            try:
                o = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if "lm_loss" in o:
                yield o["iteration"], tuple(repr(o.get(k)) for k in keys)
    except FileNotFoundError:
        return
ref = dict(rows("ref.jsonl"))
final, lines, differ = {}, 0, []
for f in files:
    for it, v in rows(f):
        lines += 1
        final[it] = v
        if ref.get(it) != v:
            differ.append((f, it))
missing = [i for i in range(1, iters + 1) if i not in final]
same = sum(1 for i in range(1, iters + 1) if final.get(i) == ref.get(i))
print(f"metrics lines from all runs: {lines}, differing from the reference: {len(differ)} {differ[:5]}")
print(f"final sequence: {same} of {iters} iterations bit-identical to the reference, missing {len(missing)}")
print("final losses bit-identical:", "yes" if same == iters and not missing and not differ else "NO")
PY

cmp_ckpt="skipped (no h5py)"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
	cmp_ckpt=$(/usr/bin/python3 - "ref/iter_$(printf %07d "$ITERS")" "run/iter_$(printf %07d "$ITERS")" <<'PY'
import glob, os, sys, h5py, numpy
a, b = sys.argv[1:]
n = diff = 0
for f in sorted(glob.glob(os.path.join(a, "*.h5"))):
    if os.path.basename(f) == "model.h5":
        continue
    with h5py.File(f, "r") as x, h5py.File(os.path.join(b, os.path.basename(f)), "r") as y:
        for k in x:
            n += 1
            u, v = x[k][()], y[k][()]
            diff += not (u.dtype == v.dtype and u.shape == v.shape and u.tobytes() == v.tobytes())
print(f"{n} tensors, {diff} differ")
PY
)
fi
log "final checkpoints (iteration $ITERS), reference vs killed run: $cmp_ckpt"
log "SUMMARY: kills $killed (in a save: $kill_in_save, before the checkpoint was loaded: $kill_before_load), loader checks $checks, unloadable checkpoints $unloadable, starts refused for want of a tracker $refused, temporaries left at the end $left"
echo "raw results: $OUT"
