# Shared helpers for the TAP shell tests (sourced). Sets ROOT, BIN, SHARE, T (a scratch dir).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
SHARE=$ROOT/share/mgt
PY=/usr/bin/python3
READER=$ROOT/tests/cli/megatron_idx_reader.py
# MGT_TEST_KEEP=DIR: the scratch dir is DIR (made if needed) and is kept, to look at a failure
if [ -n "${MGT_TEST_KEEP:-}" ]; then T=$MGT_TEST_KEEP; mkdir -p "$T"; else T=$(mktemp -d); trap 'rm -rf "$T"' EXIT; fi
tap_n=0
tap_fail=0
# OpenMP threads (mgt's, OpenBLAS's and PyTorch's libgomp) sleep instead of spinning while they
# wait: prove -j2 runs two scripts, each with 2-thread programs, on the 2 cores of the test
# machines, where spinning waiters took the cores from the threads with work (t3000 and t3850
# side by side: 77 and 70 s spinning, 32 and 35 s passive; 27 s for t3000 alone).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file $SHARE/tokenizers/gpt2/vocab.json --merge-file $SHARE/tokenizers/gpt2/merges.txt"
# small_bpe: sets BPE to the flags of GPT-2's byte-level BPE cut to its first 843 merges (files in
# $T/bpe: vocab.json holds the 256 byte tokens, the merges' 843 tokens at GPT-2's own ids 256 +
# rank, and <|endoftext|> at 1099: 1,100 tokens).  The same tokenizer code on the same text at a
# vocabulary the tiny models can afford: with GPT-2's 50,257 rows the output layer and its
# optimizer state are about 90% of a tiny model's training step, and the parallel-layout tests
# check the layouts, not the vocabulary.
small_bpe() {
	mkdir -p "$T/bpe" && $PY - "$SHARE/tokenizers/gpt2" "$T/bpe" 843 <<'PY' || return 1
import json, sys
src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
vocab = json.load(open(f"{src}/vocab.json", encoding="utf-8"))
lines = open(f"{src}/merges.txt", encoding="utf-8").read().split("\n")
merges = [l for l in lines[1:] if l][:k]
# GPT-2's ids are 0-255 for the bytes and 256 + rank for merge rank's result: check, then cut
assert all(vocab["".join(m.split(" "))] == 256 + r for r, m in enumerate(merges))
small = {t: i for t, i in vocab.items() if i < 256 + k}
small["<|endoftext|>"] = 256 + k
json.dump(small, open(f"{dst}/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
open(f"{dst}/merges.txt", "w", encoding="utf-8").write(lines[0] + "\n" + "\n".join(merges) + "\n")
PY
	BPE="--tokenizer-type GPT2BPETokenizer --vocab-file $T/bpe/vocab.json --merge-file $T/bpe/merges.txt"
}
# ok DESC CMD...: one TAP line for the exit status of CMD
ok() {
	d=$1; shift
	tap_n=$((tap_n + 1))
	if "$@"; then echo "ok $tap_n - $d"; else echo "not ok $tap_n - $d"; tap_fail=1; fi
}
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n # skip $1"; }
# Two tiers (issue 30).  make check runs the quick tier: every program, format, op and parallel
# path at least once, each script well under a minute on two cores.  make check-full sets
# MGT_TEST_FULL=1 and runs everything: the cases that rerun a code path a quick case already runs
# (another layout of the same parallel code, another model family of the same converter, the
# long numeric comparisons).  Each script's header lists its full-tier cases and the quick case
# that runs the same path; in the quick tier each is a TAP skip naming the full tier.
full() { [ -n "${MGT_TEST_FULL:-}" ]; }
quick() { ! full; }
# full_only DESC: true in the full tier; in the quick tier a TAP skip for DESC, and false:
#   full_only "tiny-llama with biases" && ok "tiny-llama with biases" ...
full_only() { full && return 0; skip "$1 (full tier: make check-full)"; return 1; }
# exits CODE CMD...: CMD exits with CODE (stderr kept in $T/err)
exits() { c=$1; shift; "$@" >"$T/out" 2>"$T/err"; r=$?; [ "$r" = "$c" ] || { echo "# exit $r, expected $c: $(head -c 300 "$T/err")"; return 1; }; }
# no_files GLOB: nothing matches
no_files() { for f in "$@"; do [ -e "$f" ] && { echo "# unexpected file $f"; return 1; }; done; return 0; }
err_has() { grep -q -- "$1" "$T/err" || { echo "# stderr lacks '$1': $(head -c 300 "$T/err")"; return 1; }; }
done_testing() { echo "1..$tap_n"; exit $tap_fail; }
# losses_same REF RUN [FROM] (metrics files REF.jsonl, RUN.jsonl): the lm loss of every iteration
# >= FROM of RUN and the validation losses (the iterations REF has from FROM on) within 1e-5 of
# REF's (the parallel layouts' tests against one process)
losses_same() {
	$PY - "$@" <<'PY'
import json, sys
def L(f, key):
    return {(o["iteration"], o.get("end", False)): o[key] for o in map(json.loads, open(f)) if key in o}
lo = int(sys.argv[3]) if len(sys.argv) > 3 else 1
worst = 0.0
for key in ("lm_loss", "valid_loss"):
    a, b = L(sys.argv[1] + ".jsonl", key), L(sys.argv[2] + ".jsonl", key)
    want = sorted(i for i in a if i[0] >= lo)
    if sorted(b) != want: sys.exit(f"# {key} at {sorted(b)}, expected {want}")
    worst = max([worst] + [abs(a[i] - b[i]) / abs(a[i]) for i in want])
print(f"# {sys.argv[2]}: max relative difference of training and validation losses {worst:.2e}")
sys.exit(worst > 1e-5)
PY
}
# losses_exact A B (A.jsonl, B.jsonl): lm loss and grad norm text-identical on the iterations B logged
losses_exact() {
	$PY - "$@" <<'PY'
import json, sys
def L(f): return {o["iteration"]: (repr(o["lm_loss"]), repr(o["grad_norm"])) for o in map(json.loads, open(f)) if "lm_loss" in o}
a, b = L(sys.argv[1] + ".jsonl"), L(sys.argv[2] + ".jsonl")
sys.exit(not b or any(a.get(i) != v for i, v in b.items()))
PY
}
# The parallel tests' data: the small BPE and KJV preprocessed with it (kjv_text_document), or the
# whole script a TAP skip (no mpirun, no BPE, no dataset).
kjv_parallel_data() {
	command -v mpirun >/dev/null 2>&1 || { echo "1..0 # SKIP mpirun not found"; exit 0; }
	small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
	"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
		--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
}
# train_kjv NP MODEL NAME [flags]: 10 iterations on kjv_text_document at $SEQ, $MBS, $GBS (dropout
# 0.1 as the presets' default); metrics NAME.jsonl
train_kjv() {
	_np=$1 _model=$2 _name=$3; shift 3
	set -- "$BIN/mgt-train" --model "$_model" $BPE --data-path kjv_text_document --split 98,2,0 \
		--data-cache-path cache --seq-length $SEQ --micro-batch-size $MBS --global-batch-size $GBS \
		--lr 2e-3 --lr-warmup-iters 3 --eval-interval 5 --eval-iters 1 --log-interval 1 --threads 1 --train-iters 10 \
		--metrics-file "$_name.jsonl" "$@"
	launch "$_np" "$_name" "$@"
}
# kjv_volume NP MODEL NAME [key=value...]: comm_volume.py's check of run NAME's --comm-log against
# the analytic bytes per rank at $SEQ, $MBS, $GBS
kjv_volume() {
	_np=$1 _model=$2 _name=$3; shift 3
	$PY "$ROOT/tests/cli/comm_volume.py" "$SHARE/models/$_model.json" "$_name" "$_np" mbs=$MBS gbs=$GBS seq=$SEQ "$@"
}
# launch NP NAME CMD...: CMD on one process, or NP under tests/mpirun.sh; stdout NAME.out, stderr
# NAME.err, the last lines of which are printed as a TAP comment when it fails
launch() {
	_lnp=$1 _lname=$2; shift 2
	if [ "$_lnp" = 1 ]; then "$@" >"$_lname.out" 2>"$_lname.err" </dev/null
	else sh "$ROOT/tests/mpirun.sh" "$_lnp" "$@" >"$_lname.out" 2>"$_lname.err" </dev/null; fi
	_lr=$?
	[ $_lr = 0 ] || { echo "# $_lname: exit $_lr"; tail -5 "$_lname.err" | sed 's/^/#   /'; }
	return $_lr
}
