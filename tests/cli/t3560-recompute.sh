#!/bin/sh
# Activation recomputation in mgt-train (TAP, run by prove): --recompute-granularity selective
# (and --recompute-activations), full with --recompute-method uniform (1 and 2 layers a group)
# and block train bit for bit as the run without it -- lm loss, grad norm and validation loss of
# every iteration (17 digits, --metrics-file) and every gradient of --debug-dump -- for a
# GPT-2-style and a Llama-style model with dropout on, and under TP2 x PP2 with sequence
# parallelism; the activation bytes saved are what the shapes say (derived here from the
# argument dump, not from mgt's allocator); the computed memory and the peak RSS drop; Megatron's
# argument rules refuse bad combinations with exit status 2.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

BASE="$BIN/mgt-train --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 32
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --threads 1 --device cpu
 --train-iters 3 --eval-interval 2 --eval-iters 1 --split 90,5,5"
FULL="--recompute-granularity full --recompute-method"
CHOICES="sel:--recompute-granularity selective
act:--recompute-activations
u1:$FULL uniform --recompute-num-layers 1
u2:$FULL uniform --recompute-num-layers 2
u3:$FULL uniform --recompute-num-layers 3
b1:$FULL block --recompute-num-layers 1
b2:$FULL block --recompute-num-layers 2"

# figures FILE: lm_loss, grad_norm and valid_loss of every line, as written (17 digits)
figures() { grep -o '"\(lm_loss\|grad_norm\|valid_loss\)": *[^,}]*' "$1"; }
same_figures() { figures "$1" >"$1.f"; figures "$2" >"$2.f"; test -s "$1.f" && cmp -s "$1.f" "$2.f" || { echo "# $1 and $2 differ"; return 1; }; }

# expected_saved LOG KIND N: the activation bytes recomputation KIND (sel, uniform, block) with
# N layers saves on one process, from the shapes in LOG's argument dump: per layer and
# micro-batch in flight (one here) x_in, x_mid [T, h], ln1, ln2 [T, h], four norm statistics
# [T], qkv [T, (heads + 2 groups) d], ctx [T, heads d], lse [b, heads, s], fc1 [T, ffn or
# 2 ffn with SwiGLU], act [T, ffn]; selective drops ctx and lse of each layer and keeps one
# layer's; full keeps each group's input and one group's (block: one layer's) buffers but its
# first input.
expected_saved() {
	$PY - "$@" <<'PY'
import re, sys
log, kind, n = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
def arg(k):
    return re.search(r"^  %s \.+ (\S+)$" % k, log, re.M).group(1)
h, heads, L = int(arg("hidden_size")), int(arg("num_attention_heads")), int(arg("num_layers"))
ng = int(arg("num_query_groups")) if arg("group_query_attention") == "True" else heads
d = int(arg("kv_channels")) if arg("kv_channels") != "0" else h // heads
ffn, glu = int(arg("ffn_hidden_size")), arg("swiglu") == "True"
s, b = int(arg("seq_length")), int(arg("micro_batch_size"))
T = s * b
core = T * heads * d + b * heads * s
X = T * h
F = 2 * X + 2 * T * h + 4 * T + T * (heads + 2 * ng) * d + core + T * (2 * ffn if glu else ffn) + T * ffn
if kind == "sel":
    saved = (L - 1) * core
elif kind == "uniform":
    groups = (L + n - 1) // n
    saved = (L * F - groups * X) - (min(n, L) * F - X)
else:
    saved = min(n, L) * (F - X) - (F - X)
print(4 * saved)
PY
}
saved_of() { sed -n 's/^activation recomputation .*: activations \([0-9]*\) bytes (\([0-9]*\) without recomputation, \([0-9]*\) saved)$/\1 \2 \3/p' "$1"; }
act_mib() { sed -n 's/^memory before training: computed .* activations \([0-9.]*\), workspace.*/\1/p' "$1"; }

echo "$CHOICES" >choices
for model in tiny-gpt2 tiny-llama; do
	ok "$model: run without recomputation" exits 0 $BASE --model $model --metrics-file $model.none.jsonl --debug-dump $model.none.h5
	cp "$T/err" $model.none.err
	while IFS=: read -r name flags; do
		# shellcheck disable=SC2086
		$BASE --model $model $flags --metrics-file $model.$name.jsonl --debug-dump $model.$name.h5 </dev/null >/dev/null 2>$model.$name.err
		echo $? >$model.$name.rc
	done <choices
	while IFS=: read -r name flags; do
		ok "$model $name: exits 0" test "$(cat $model.$name.rc)" = 0
		ok "  lm loss, grad norm, validation loss bit for bit" same_figures $model.none.jsonl $model.$name.jsonl
	done <choices
	if $PY -c "import h5py" 2>/dev/null; then
		ok "$model: every gradient of --debug-dump bit for bit, every choice" $PY - $model <<'PY'
import h5py, numpy as np, sys
m = sys.argv[1]
a = h5py.File(m + ".none.h5", "r")["grads"]
assert len(a) > 10
for name in ("sel", "act", "u1", "u2", "u3", "b1", "b2"):
    b = h5py.File("%s.%s.h5" % (m, name), "r")["grads"]
    assert sorted(a) == sorted(b), name
    for k in a:
        assert np.array_equal(a[k][...].view(np.uint32), b[k][...].view(np.uint32)), (name, k)
PY
	else
		skip "no h5py"
	fi
	for c in "sel sel 0" "act sel 0" "u1 uniform 1" "u2 uniform 2" "u3 uniform 3" "b1 block 1" "b2 block 2"; do
		# shellcheck disable=SC2086
		set -- $c
		name=$1
		want=$(expected_saved $model.none.err $2 $3)
		got=$(saved_of $model.$name.err)
		ok "$model $name: activation bytes saved as the shapes say ($want)" test "${got##* }" = "$want"
		# shellcheck disable=SC2086
		set -- $got 0 0
		ok "  without it: the computed activations of the plain run ($(act_mib $model.none.err) MiB)" \
			test "$($PY -c "print('%.1f' % ($2 / 1048576))")" = "$(act_mib $model.none.err)"
		ok "  with it: those of its own memory report ($(act_mib $model.$name.err) MiB)" \
			test "$($PY -c "print('%.1f' % ($1 / 1048576))")" = "$(act_mib $model.$name.err)"
	done
	ok "$model: strictly less for every choice but block 1 (one micro-batch: its scratch is the layer it drops)" \
		sh -c "for c in sel act u1 u2 u3 b2; do s=\$(sed -n 's/.*, \([0-9]*\) saved)\$/\1/p' $model.\$c.err); test \"\$s\" -gt 0 || exit 1; done"
done
ok "--recompute-activations shows as --recompute-granularity selective in the argument dump" \
	grep -q '^  recompute_granularity \.* selective$' tiny-gpt2.act.err

# ---- peak RSS: longer sequences, where activations dominate ---------------------------------
BIG="$BASE --model tiny-gpt2 --seq-length 128 --micro-batch-size 8 --global-batch-size 8 --train-iters 2 --eval-interval 0"
ok "larger activations: without recomputation" exits 0 $BIG --metrics-file big.none.jsonl
cp "$T/err" big.none.err
ok "  with full uniform 1" exits 0 $BIG $FULL uniform --recompute-num-layers 1 --metrics-file big.u1.jsonl
cp "$T/err" big.u1.err
ok "  same figures" same_figures big.none.jsonl big.u1.jsonl
rss() { sed -n 's/.*"peak_rss_bytes": *\([0-9]*\).*/\1/p' "$1" | tail -1; }
saved=$(saved_of big.u1.err); saved=${saved##* }
ok "  peak RSS lower by at least half the computed saving ($(rss big.none.jsonl) - $(rss big.u1.jsonl) vs $saved)" \
	test $(($(rss big.none.jsonl) - $(rss big.u1.jsonl))) -ge $((saved / 2))

# ---- TP2 x PP2 with sequence parallelism: 4 micro-batches, several in flight on stage 0 ------
if command -v mpirun >/dev/null 2>&1; then
	PAR="$BASE --model tiny-gpt2 --global-batch-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --sequence-parallel"
	ok "TP2 x PP2 without recomputation" exits 0 sh "$ROOT/tests/mpirun.sh" 4 $PAR --metrics-file par.none.jsonl
	ok "TP2 x PP2 with full uniform 1" exits 0 sh "$ROOT/tests/mpirun.sh" 4 $PAR $FULL uniform --recompute-num-layers 1 \
		--metrics-file par.u1.jsonl
	ok "  lm loss, grad norm, validation loss bit for bit" same_figures par.none.jsonl par.u1.jsonl
	ok "  and activations saved on the last rank" sh -c "grep -q ', [1-9][0-9]* saved)\$' '$T/err'"
	ok "TP2 x PP2 with selective" exits 0 sh "$ROOT/tests/mpirun.sh" 4 $PAR --recompute-activations --metrics-file par.sel.jsonl
	ok "  lm loss, grad norm, validation loss bit for bit" same_figures par.none.jsonl par.sel.jsonl
else
	skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"; skip "no mpirun"
fi

# ---- Megatron's rules (arguments.py, TransformerConfig.__post_init__) -----------------------
R="$BASE --model tiny-gpt2 --train-iters 1"
bad() { # DESCRIPTION MESSAGE FLAGS...
	d=$1; m=$2; shift 2
	ok "$d: exit 2" exits 2 $R "$@"
	ok "  saying '$m'" err_has "$m"
}
bad "full without a method" 'recompute_method must be "block" or "uniform"' --recompute-granularity full
bad "full without a layer count" "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 4" \
	$FULL uniform
bad "full with 0 layers" "recompute_num_layers must be between 1" $FULL block --recompute-num-layers 0
bad "selective with a method" "recompute method is not yet supported for selective recomputing granularity" \
	--recompute-granularity selective --recompute-method uniform
bad "--recompute-activations with a method (it wins over full)" "recompute method is not yet supported" \
	--recompute-activations $FULL uniform --recompute-num-layers 1
bad "selective with a layer count" "selective recompute_num_layers must be None" --recompute-granularity selective \
	--recompute-num-layers 2
bad "an unknown granularity" "--recompute-granularity partial: expected full or selective" --recompute-granularity partial
bad "an unknown method" "--recompute-method all: expected uniform or block" $FULL all --recompute-num-layers 1
bad "--recompute-modules other than core_attn" "--recompute-modules mlp is not supported by mgt-train (only core_attn)" \
	--recompute-granularity selective --recompute-modules mlp
bad "--checkpoint-activations (removed from Megatron-LM)" "use --recompute-activations" --checkpoint-activations
ok "a method without a granularity: accepted" exits 0 $R --recompute-method block --recompute-num-layers 2
ok "  without effect, as Megatron, with a warning each" sh -c "grep -c 'WARNING: --recompute-\(method\|num-layers\) is accepted without effect: no --recompute-granularity' '$T/err' | grep -qx 2 &&
 ! grep -q '^activation recomputation' '$T/err'"
done_testing
