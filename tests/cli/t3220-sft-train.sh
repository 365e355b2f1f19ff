#!/bin/sh
# mgt-train --sft (Megatron's SFTDataset: packed conversations, loss on the answers) on a chat set
# made from KJV verses (each user turn half a verse, the assistant the rest; several
# conversations a line): every layout gives the single-process losses step by step (TP2 with
# SP, PP2, DP2 with the distributed optimizer; fp32, <= 1e-5); the logged training loss is the
# global token mean, the same at any micro-batch size, while validation is Megatron's SFT
# estimator, the mean of micro-batch means, which moves with it (at --lr 0, where the weights
# stay put); and what --sft cannot run with is refused naming the flags.  The samples
# themselves are checked against a reference in t1010, the packed attention in tests/unit.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
cp "$SHARE/tokenizers/kjv-4k-chat/tokenizer.json" tok.json # kjv-4k with Nemotron's prompt tokens (contrib/kjv-chat.py)
zstd -dcq "$SHARE/data/kjv.jsonl.zst" | head -40 | $PY -c '
import json, sys
for line in sys.stdin:
    verses = [v for v in json.loads(line)["text"].split("\n")[2:] if v.strip()]
    for i in range(0, len(verses) - 1, 3):
        msgs = []
        for k, v in enumerate(verses[i:i + 3]):
            w = v.partition(" ")[2].split(" "); h = len(w) // 2
            if k != 1: msgs.append({"role": "system", "content": "Continue the verse."})
            msgs += [{"role": "user", "content": " ".join(w[:h])}, {"role": "assistant", "content": " ".join(w[h:])}]
        print(json.dumps({"messages": msgs}))' >chat.jsonl
TOK="--tokenizer-type SFTTokenizer --tokenizer-model tok.json"
# the same padded vocabulary (4608) in every layout: divisible-by 512 / TP (as t3200)
V1="--make-vocab-size-divisible-by 512" V2="--make-vocab-size-divisible-by 256"
train() { # NP NAME [flags]: 8 iterations; metrics NAME.jsonl
	_np=$1 _name=$2; shift 2
	set -- "$BIN/mgt-train" --model tiny-gpt2 $TOK --sft --data-path chat.jsonl --split 90,10,0 --seq-length 64 \
		--micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --eval-interval 4 --eval-iters 2 --log-interval 1 \
		--threads 1 --train-iters 8 --device cpu --metrics-file "$_name.jsonl" "$@"
	if [ "$_np" = 1 ]; then "$@" >"$_name.out" 2>"$_name.err" </dev/null
	else $RUN "$_np" "$@" >"$_name.out" 2>"$_name.err" </dev/null; fi
	r=$?
	[ $r = 0 ] || { echo "# $_name: exit $r"; tail -5 "$_name.err" | sed 's/^/#   /'; }
	return $r
}
cmp_losses() { # REF RUN KEY MAXREL [MIN]: KEY's values of RUN within MAXREL of REF's (and some above MIN)
	$PY - "$@" <<'PY'
import json, sys
def L(f, key):
    return {(o["iteration"], o.get("end", False)): o[key] for o in map(json.loads, open(f)) if key in o}
a, b = L(sys.argv[1] + ".jsonl", sys.argv[3]), L(sys.argv[2] + ".jsonl", sys.argv[3])
if sorted(a) != sorted(b) or not a: sys.exit(f"# {sys.argv[3]} at {sorted(b)}, expected {sorted(a)}")
worst = max(abs(a[i] - b[i]) / abs(a[i]) for i in a)
print(f"# {sys.argv[2]} against {sys.argv[1]}, {sys.argv[3]}: max relative difference {worst:.2e}")
lo = float(sys.argv[5]) if len(sys.argv) > 5 else -1
sys.exit(worst > float(sys.argv[4]) or worst <= lo)
PY
}
layout() { _n=$1 _p=$2; shift 2; train "$_p" "$_n" "$@" && cmp_losses one "$_n" lm_loss 1e-5 && cmp_losses one "$_n" valid_loss 1e-5; }
ok "one process" train 1 one $V1
ok "the training loss falls (answers learned)" $PY -c "
import json, sys
l = [o['lm_loss'] for o in map(json.loads, open('one.jsonl')) if 'lm_loss' in o]
sys.exit(not l[-1] < l[0] - 0.5)"
if command -v mpirun >/dev/null 2>&1; then
	ok "TP2 with SP = one process" layout tp2sp 2 $V2 --tensor-model-parallel-size 2 --sequence-parallel
	ok "PP2 = one process" layout pp2 2 $V1 --pipeline-model-parallel-size 2
	ok "DP2 with the distributed optimizer = one process" layout dp2 2 $V1 --use-distributed-optimizer
	# CP: every conversation padded to 2 CP and split per document over the context ranks.  On
	# the lines whose conversations need no padding (the samples at CP 1 and 2 equal, positions
	# and dropout elements included) the training loss must be one process's
	L256="--seq-length 256 --max-position-embeddings 256"
	sft_samples() { "$BIN/mgt-dataset" samples chat.jsonl --dataset-type sft --tokenizer-model tok.json --seq-length 256 "$@"; }
	sft_samples >s1.jsonl && sft_samples --context-parallel-size 2 >s2.jsonl && $PY - <<'PY'
import json
a = [json.loads(l) for l in open("s1.jsonl")]; b = [json.loads(l) for l in open("s2.jsonl")]
keep = [k for k in range(len(a)) if all(a[k][f] == b[k][f] for f in ("tokens", "labels", "position_ids", "cu_seqlens"))]
lines = open("chat.jsonl").read().splitlines()
open("chat4.jsonl", "w").write("".join(lines[k] + "\n" for k in keep))
print(f"# {len(keep)} of {len(a)} lines need no CP padding")
PY
	cp_same() { _ref=$1; shift; train "$@" $L256 --data-path chat4.jsonl && cmp_losses "$_ref" "$2" lm_loss 1e-5; } # REF NP NAME FLAGS...
	ok "one process, S 256" train 1 one256 $V1 $L256 --data-path chat4.jsonl
	ok "CP2 (a2a, per-document split) = one process" cp_same one256 2 cp2 $V1 --context-parallel-size 2 --cp-comm-type a2a
	ok "one process, S 256, --calculate-per-token-loss" train 1 one256t $V1 $L256 --data-path chat4.jsonl \
		--calculate-per-token-loss
	ok "CP2 with --calculate-per-token-loss = one process" cp_same one256t 2 cp2t $V1 --context-parallel-size 2 \
		--cp-comm-type a2a --calculate-per-token-loss
	cp_p2p() {
		$RUN 2 "$BIN/mgt-train" --model tiny-gpt2 $TOK --sft --data-path chat.jsonl --seq-length 64 --micro-batch-size 2 \
			--train-iters 2 --device cpu --context-parallel-size 2 >/dev/null 2>err </dev/null
		r=$?
		[ $r = 2 ] && grep -q "cp-comm-type a2a" err || { echo "# exit $r: $(head -c 300 err)"; return 1; }
	}
	ok "--sft with CP 2 over the p2p ring: refused naming --cp-comm-type a2a" cp_p2p
	full_only "TP2xCP2" && ok "TP2 with SP x CP2 (a2a) = one process" cp_same one256 4 tp2cp2 $V2 \
		--tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 --cp-comm-type a2a
else
	skip "mpirun not found: the layouts"
fi
# mgt-eval reads the checkpoint's --sft: its loss is the validation the run printed at that iteration
eval_same() {
	train 1 ck $V1 --save ck --save-interval 8 &&
	"$BIN/mgt-eval" loss --load ck --threads 1 >ev.out 2>ev.err &&
	a=$(grep -o 'validation loss at iteration 8 | lm loss value: [^ ]*' ck.err | head -1 | sed 's/.*value: //') &&
	b=$(grep -o 'lm loss value: [^ ]*' ev.out | head -1 | sed 's/.*value: //') &&
	{ [ -n "$a" ] && [ "$a" = "$b" ] || { echo "# run $a, mgt-eval $b"; false; }; }
}
ok "mgt-eval loss of the SFT checkpoint = the run's validation at that iteration (the SFT estimator)" eval_same
# at --lr 0 without dropout the weights and masks stay put: micro-batch size 1 against 4 (same global batch)
ok "lr 0, micro-batch 1" train 1 m1 $V1 --lr 0 --hidden-dropout 0 --attention-dropout 0 --micro-batch-size 1
ok "lr 0, micro-batch 4" train 1 m4 $V1 --lr 0 --hidden-dropout 0 --attention-dropout 0 --micro-batch-size 4
ok "the training loss is the global token mean: the same at micro-batch 1 and 4" cmp_losses m1 m4 lm_loss 1e-6
ok "validation is the mean of micro-batch means: it moves with the micro-batch size" cmp_losses m1 m4 valid_loss 1 1e-5
# Megatron's default prompt format: the tokenizer's chat template (tokenizer_config.json beside tok.json)
$PY -c 'import json; json.dump({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", "eos_token": "<|endoftext|>"}, open("tokenizer_config.json", "w"))'
dflt() {
	train 1 dflt $V1 --sft-tokenizer-prompt-format default && $PY -c "
import json, sys
l = [o['lm_loss'] for o in map(json.loads, open('dflt.jsonl')) if 'lm_loss' in o]
sys.exit(not l[-1] < l[0] - 0.5)"
}
ok "--sft-tokenizer-prompt-format default trains (every token a target) and its loss falls" dflt
refused() { # PATTERN FLAGS...: exit 2 with PATTERN on stderr
	_p=$1; shift
	"$BIN/mgt-train" --model tiny-gpt2 --data-path chat.jsonl --train-iters 2 --micro-batch-size 2 --device cpu "$@" \
		>/dev/null 2>err </dev/null
	r=$?
	[ $r = 2 ] && grep -q -- "$_p" err || { echo "# exit $r:"; sed 's/^/#   /' err; return 1; }
}
ok "--sft with BERT: refused" refused "--sft with --model-family bert" $TOK --sft --model-family bert
ok "--sft with a GPT-2 BPE tokenizer: refused naming SFTTokenizer" refused "SFTTokenizer" --sft \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$SHARE/tokenizers/gpt2/vocab.json" \
	--merge-file "$SHARE/tokenizers/gpt2/merges.txt"
ok "--sft with --reset-attention-mask: refused" refused "reset-attention-mask" $TOK --sft --reset-attention-mask
ok "--sft-mock-dataset-config-json: refused by name" refused "sft-mock-dataset-config-json" $TOK --sft \
	--sft-mock-dataset-config-json x.json
done_testing
