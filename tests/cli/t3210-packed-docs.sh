#!/bin/sh
# mgt-train --reset-attention-mask (Megatron's GPTDataset: no attention across an eod, with
# --reset-position-ids positions restarting after it): on KJV verses as documents (many eods a
# row) every layout gives the single-process losses step by step (TP2 with SP, PP2, DP2 with the
# distributed optimizer, TP2 x PP2 x DP2: the full tier; the quick tier runs those layouts with
# packed documents under --sft, t3220; fp32, relative difference <= 1e-5); the flag changes
# the losses (it is not ignored); what it cannot run with is refused, naming the flags. The
# attention itself is checked against references in tests/unit (test_backend: the op against
# double and FD; test_packed: a packed row against its documents alone, bit-for-bit isolation).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
# the verses of the first 60 chapters, one document each (about 30 tokens: a 32-token row holds 1-3)
zstd -dcq "$SHARE/data/kjv.jsonl.zst" | head -60 | $PY -c '
import json, sys
for line in sys.stdin:
    for v in json.loads(line)["text"].split("\n")[2:]:
        if v.strip(): print(json.dumps({"text": v}))' >verses.jsonl
"$BIN/mgt-preprocess" --input verses.jsonl --output-prefix v $BPE --append-eod --workers 2 --quiet >/dev/null 2>&1 ||
	{ echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
SEQ=32 MBS=2 GBS=8
# the same padded vocabulary (1024) in every layout: divisible-by 512 / TP (as t3200)
V1="--make-vocab-size-divisible-by 512" V2="--make-vocab-size-divisible-by 256"
train() { # NP NAME [flags]: 10 iterations, dropout on; metrics NAME.jsonl
	_np=$1 _name=$2; shift 2
	set -- "$BIN/mgt-train" --model tiny-gpt2 $BPE --data-path v_text_document --split 98,2,0 --data-cache-path cache \
		--seq-length $SEQ --micro-batch-size $MBS --global-batch-size $GBS --lr 2e-3 --eval-interval 5 --eval-iters 1 \
		--log-interval 1 --threads 1 --train-iters 10 --device cpu --metrics-file "$_name.jsonl" "$@"
	if [ "$_np" = 1 ]; then "$@" >"$_name.out" 2>"$_name.err" </dev/null
	else $RUN "$_np" "$@" >"$_name.out" 2>"$_name.err" </dev/null; fi
	r=$?
	[ $r = 0 ] || { echo "# $_name: exit $r"; tail -5 "$_name.err" | sed 's/^/#   /'; }
	return $r
}
cmp_losses() { # REF RUN MAXREL [MIN]: training and validation losses of RUN within MAXREL of REF's (and some above MIN)
	$PY - "$@" <<'PY'
import json, sys
def L(f, key):
    return {(o["iteration"], o.get("end", False)): o[key] for o in map(json.loads, open(f)) if key in o}
worst = 0.0
for key in ("lm_loss", "valid_loss"):
    a, b = L(sys.argv[1] + ".jsonl", key), L(sys.argv[2] + ".jsonl", key)
    if sorted(a) != sorted(b) or not a: sys.exit(f"# {key} at {sorted(b)}, expected {sorted(a)}")
    worst = max([worst] + [abs(a[i] - b[i]) / abs(a[i]) for i in a])
print(f"# {sys.argv[2]} against {sys.argv[1]}: max relative difference {worst:.2e}")
lo = float(sys.argv[4]) if len(sys.argv) > 4 else -1
sys.exit(worst > float(sys.argv[3]) or worst <= lo)
PY
}
DOC="--reset-attention-mask --reset-position-ids"
mask_only() { train 1 mask $V1 --reset-attention-mask && cmp_losses one mask 1 1e-6; }
layout() { _n=$1 _p=$2; shift 2; train "$_p" "$_n" $DOC "$@" && cmp_losses one "$_n" 1e-5; }
ok "one process with $DOC" train 1 one $V1 $DOC
ok "one process without them" train 1 plain $V1
ok "the flags change the losses (rows hold several verses)" cmp_losses plain one 1 1e-4
ok "--reset-attention-mask alone differs from it with --reset-position-ids" mask_only
if command -v mpirun >/dev/null 2>&1; then
	# the quick tier runs the same layouts with packed documents under --sft (t3220)
	full_only "TP2 with SP with $DOC" && ok "TP2 with SP = one process with $DOC" layout tp2sp 2 $V2 \
		--tensor-model-parallel-size 2 --sequence-parallel
	full_only "PP2 with $DOC" && ok "PP2 = one process" layout pp2 2 $V1 --pipeline-model-parallel-size 2
	full_only "DP2 with $DOC" && ok "DP2 with the distributed optimizer = one process" layout dp2 2 $V1 \
		--use-distributed-optimizer
	full_only "TP2 x PP2 x DP2 with $DOC" && ok "TP2 x PP2 x DP2 = one process" layout tp2pp2dp2 8 $V2 \
		--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
else
	skip "mpirun not found: the layouts"
fi
refused() { # DESCRIPTION PATTERN FLAGS...: exit 2 with PATTERN on stderr, no training
	_d=$1 _p=$2; shift 2
	"$BIN/mgt-train" --model tiny-gpt2 $BPE --data-path v_text_document --train-iters 2 --micro-batch-size 2 "$@" \
		>/dev/null 2>err </dev/null
	r=$?
	[ $r = 2 ] && grep -q -- "$_p" err && ! grep -q "iteration *1/" err || { echo "# exit $r:"; sed 's/^/#   /' err; return 1; }
}
ok "with --model-family bert: refused naming both" refused x "reset-attention-mask with --model-family bert" \
	--model-family bert --reset-attention-mask
ok "--dataloader-inter-document-masking still refused by name" refused x "dataloader-inter-document-masking" \
	--dataloader-inter-document-masking
done_testing
