#!/bin/sh
# tests/bench/ckpt_overhead.sh NEW_MGT_TRAIN OLD_MGT_TRAIN [RUNS]: what checkpoint checksums cost
# (issue 29: goal under 5% of saving and loading a gpt2-124m checkpoint).  Both programs save a
# gpt2-124m checkpoint (fp32 weights and Adam moments, 1.49 GB) in turn, RUNS times each: the
# save's time is the "[ t X s ]" of mgt-train's "successfully saved checkpoint" line.  Then both
# load the same checkpoint (the new program's: the old one ignores checksums.json) in turn: the
# load's time is Megatron's load-checkpoint timer line that mgt-train prints (OLD must print it
# too: a build of the old code with that line added).  Prints each run and the medians.  On the
# CPU, 2 threads.
set -eu
NEW=$1 OLD=$2 RUNS=${3:-5}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
ARGS="--model gpt2-124m --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --seq-length 64
 --micro-batch-size 1 --global-batch-size 1 --lr 1e-4 --eval-iters 0 --threads 2 --device cpu --train-iters 1"
save_t() { rm -rf "$D/ck"; "$1" $ARGS --save "$D/ck" 2>&1 | sed -n 's/.*successfully saved checkpoint.*\[ t \([0-9.]*\) s \].*/\1/p'; }
load_t() { "$1" $ARGS --load "$D/ck" 2>&1 | sed -n 's/.*load-checkpoint \.*: (\([0-9.]*\), .*/\1/p'; }
med() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
: >"$D/sn"; : >"$D/so"; : >"$D/ln"; : >"$D/lo"
for i in $(seq "$RUNS"); do
	a=$(save_t "$NEW"); b=$(save_t "$OLD")
	echo "save run $i: new $a s, old $b s"; echo "$a" >>"$D/sn"; echo "$b" >>"$D/so"
done
rm -rf "$D/ck"; "$NEW" $ARGS --save "$D/ck" >/dev/null 2>&1
for i in $(seq "$RUNS"); do
	a=$(load_t "$NEW"); b=$(load_t "$OLD")
	echo "load run $i: new $a ms, old $b ms"; echo "$a" >>"$D/ln"; echo "$b" >>"$D/lo"
done
sn=$(med <"$D/sn"); so=$(med <"$D/so"); ln=$(med <"$D/ln"); lo=$(med <"$D/lo")
echo "median save: new $sn s, old $so s: $(echo "scale=1; 100 * ($sn - $so) / $so" | bc)%"
echo "median load: new $ln ms, old $lo ms: $(echo "scale=1; 100 * ($ln - $lo) / $lo" | bc)%"
