#!/bin/sh
# mgt-eval generate (key/value cache) against mgt-eval logits (which recomputes the whole prefix
# for every new token; t3650 checks it against a float64 PyTorch reference), on tiny random
# Hugging Face models converted with mgt-ckpt-convert: Llama-style (RoPE, GQA, SwiGLU, RMSNorm,
# untied), GPT-2-style (learned positions, LayerNorm, GELU, biases, tied), Qwen2 (QKV biases) and
# Qwen3 (q/k layernorm):
#   - greedy with the cache = greedy without it, token for token, and the logits each token was
#     chosen from within 1e-5 (of the largest |logit|) of the full forward's;
#   - batched (8 prompts of different lengths, batch 8 and batch 3 with refills) = one at a time;
#   - a seeded sampled run is reproducible and independent of the batch size; another seed differs;
#   - top-k 1 = greedy; top-k 5 draws only ids among the 5 largest logits, top-p 0.5 only ids of
#     the nucleus (from the logits of the steps);
#   - a stop string ends the text right after it; the end-of-document id ends a prompt;
#   - streamed text = the JSONL text;
#   - bad input: exit statuses and messages naming the prompt.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
if ! $PY -c 'import numpy' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 lacks numpy"; exit 0
fi
EV="$BIN/mgt-eval"
G=$SHARE/tokenizers/gpt2
P="The quick brown fox jumps over the lazy dog"
# to NAME CMD...: CMD with stdout in NAME.out, stderr in NAME.err
to() { _n=$1; shift; "$@" >"$_n.out" 2>"$_n.err" || { echo "# exit $?: $(head -c 300 "$_n.err")"; return 1; }; }
# jids FILE [INDEX]: the ids of JSONL line INDEX (0), space-separated
jids() { $PY -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["index"] == int(sys.argv[2]): print(" ".join(map(str, o["ids"])))' "$1" "${2:-0}"; }
# sorted FILE: the JSONL lines' index, ids and finish, sorted by index
sorted() { $PY -c 'import json,sys
for o in sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda o: o["index"]):
    print(o["index"], o["ids"], o["finish"])' "$1"; }
# fails CMD...: CMD fails (its output dropped)
fails() { ! "$@" >/dev/null 2>&1; }
# same A B: files equal and not empty
same() { [ -s "$1" ] && cmp -s "$1" "$2" || { echo "# $1 and $2 differ"; diff "$1" "$2" | head -5; return 1; }; }
# rows GEN.npy FULL.npy TOL: GEN's rows equal FULL's last rows (the steps) within TOL x max |FULL|
rows() {
	$PY - "$@" <<'PY'
import sys, numpy as np
g, f, tol = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64), float(sys.argv[3])
n = f.shape[0] - g.shape[0] + 1
e = np.abs(g - f[n - 1:]).max() / np.abs(f).max() if g.shape[1] == f.shape[1] and n >= 1 else np.inf
print("# %d steps: max difference / max |logit| = %.2e (tolerance %.0e)" % (g.shape[0], e, tol))
sys.exit(not e <= tol)
PY
}
# allowed GEN.npy IDS K|pP [TEMP]: every id among the top K logits of its step, or in the top-p nucleus
allowed() {
	$PY - "$@" <<'PY'
import sys, numpy as np
lg, ids, rule = np.load(sys.argv[1]).astype(np.float64), list(map(int, sys.argv[2].split())), sys.argv[3]
t = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
assert len(ids) == lg.shape[0] and ids, (len(ids), lg.shape)
for k, i in enumerate(ids):
    row = lg[k] / t
    if rule[0] == "p":
        o = np.argsort(-row, kind="stable"); pr = np.exp(row[o] - row[o[0]]); pr /= pr.sum()
        before = np.concatenate([[0.0], np.cumsum(pr)[:-1]])
        keep = set(o[before <= float(rule[1:])].tolist())
    else:
        keep = set(np.nonzero(row >= np.sort(row)[-int(rule)])[0].tolist())
    if i not in keep: sys.exit("# step %d: id %d not allowed (%d allowed)" % (k, i, len(keep)))
print("# %d ids, each allowed (%d distinct)" % (len(ids), len(set(ids))))
PY
}

for fam in llama3 gpt2 qwen2 qwen3; do
	$PY "$ROOT/tests/hf/make_tiny.py" "$fam" "hf-$fam" --dtype fp32 --vocab 50257 --hidden 64 >/dev/null 2>&1 &&
		cp "$G/vocab.json" "$G/merges.txt" "hf-$fam/" &&
		"$BIN/mgt-ckpt-convert" --quiet --load-dir "hf-$fam" --save-dir "ck-$fam" >/dev/null 2>&1
	ok "$fam: a tiny random model converted (make_tiny.py, mgt-ckpt-convert)" test -d "ck-$fam"
done

# ---- greedy with the cache = without it ----
for fam in llama3 gpt2 qwen2 qwen3; do
	ok "$fam: generate --greedy 40 tokens (cache) exits 0" to "$fam-gen" "$EV" generate --load "ck-$fam" --prompt "$P" \
		--greedy --ignore-eos --max-new-tokens 40 --output jsonl --logits "$fam-gen.npy" --threads 1
	ok "$fam: logits --max-new-tokens 40 (no cache) exits 0" to "$fam-full" "$EV" logits --load "ck-$fam" --prompt "$P" \
		--max-new-tokens 40 --logits "$fam-full.npy" --threads 1
	ok "$fam: the 40 ids are the same, token for token" test -n "$(jids "$fam-gen.out")" -a \
		"$(jids "$fam-gen.out")" = "$(sed -n 's/^ids: //p' "$fam-full.out")"
	ok "$fam: the logits of the 40 steps equal the full forward's within 1e-5" rows "$fam-gen.npy" "$fam-full.npy" 1e-5
done
$PY -c 'import numpy as np; f = np.load("llama3-full.npy"); np.save("off.npy", f[f.shape[0] - 41:-1])'
ok "the logits check fails on the full forward's rows one position off" fails rows off.npy llama3-full.npy 1e-5

# ---- batching ----
cat >prompts.txt <<'EOF'
In the beginning
The quick brown fox jumps over the lazy dog and keeps running through the field
a
Once upon a time, there was
1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20
Hello
The capital of France is Paris, and the capital of Spain is
Why?
EOF
for fam in llama3 gpt2; do
	for b in 1 3 8; do
		ok "$fam: 8 prompts, greedy, --batch-size $b" to "$fam-b$b" "$EV" generate --load "ck-$fam" --greedy --ignore-eos \
			--max-new-tokens 24 --batch-size $b --output jsonl --threads 1 <prompts.txt
		sorted "$fam-b$b.out" >"$fam-b$b.ids"
	done
	ok "$fam: batch 8 = one at a time" same "$fam-b8.ids" "$fam-b1.ids"
	ok "$fam: batch 3 (slots refilled as prompts end) = one at a time" same "$fam-b3.ids" "$fam-b1.ids"
	"$EV" generate --load "ck-$fam" --greedy --ignore-eos --max-new-tokens 24 --output jsonl --prompt "In the beginning" \
		--threads 1 >one.out 2>&1
	ok "$fam: the first prompt alone, the same ids" test "$(jids one.out 0)" = "$(jids "$fam-b1.out" 0)"
done

# ---- sampling ----
S="--load ck-llama3 --ignore-eos --max-new-tokens 24 --output jsonl --threads 1 --temperature 0.9 --top-p 0.95"
for b in 1 8 3; do
	ok "sampled, seed 7, --batch-size $b" to "s$b" "$EV" generate $S --seed 7 --batch-size $b <prompts.txt
	sorted "s$b.out" >"s$b.ids"
done
ok "sampled: batch 8 = batch 1 (a Philox stream per prompt and step)" same s8.ids s1.ids
ok "sampled: batch 3 = batch 1" same s3.ids s1.ids
"$EV" generate $S --seed 7 --batch-size 8 <prompts.txt >again.out 2>&1; sorted again.out >again.ids
ok "sampled: the same seed again, the same ids" same again.ids s1.ids
"$EV" generate $S --seed 8 --batch-size 8 <prompts.txt >seed8.out 2>&1; sorted seed8.out >seed8.ids
ok "sampled: seed 8 draws other ids" sh -c "! cmp -s seed8.ids s1.ids"
ok "sampled: not the greedy ids" sh -c "! cmp -s s1.ids llama3-b1.ids"
"$EV" generate --load ck-llama3 --ignore-eos --max-new-tokens 24 --output jsonl --threads 1 --top-k 1 --batch-size 8 \
	<prompts.txt >k1.out 2>&1; sorted k1.out >k1.ids
ok "--top-k 1 = --greedy" same k1.ids llama3-b1.ids
ok "--top-k 5: generate exits 0" to k5 "$EV" generate --load ck-llama3 --prompt "$P" --ignore-eos --max-new-tokens 40 \
	--output jsonl --top-k 5 --seed 3 --logits k5.npy --threads 1
ok "--top-k 5: every id among the 5 largest logits of its step" allowed k5.npy "$(jids k5.out)" 5
ok "... a check that fails with top 1" fails allowed k5.npy "$(jids k5.out)" 1
ok "--top-p 0.5 --temperature 2: generate exits 0" to p5 "$EV" generate --load ck-llama3 --prompt "$P" --ignore-eos \
	--max-new-tokens 40 --output jsonl --top-p 0.5 --temperature 2 --seed 3 --logits p5.npy --threads 1
ok "--top-p 0.5 --temperature 2: every id in its step's nucleus" allowed p5.npy "$(jids p5.out)" p0.5 2

# ---- ends: stop strings, end of document; streaming ----
full_text=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' gpt2-gen.out)
stop=$(printf '%s' "$full_text" | cut -c 12-15)
ok "--stop: exits 0" to stop "$EV" generate --load ck-gpt2 --prompt "$P" --greedy --ignore-eos --max-new-tokens 40 \
	--output jsonl --stop "$stop" --stop "never appears here" --threads 1
ok "--stop: the text ends right after the stop string's first occurrence, finish stop" $PY -c '
import json, sys
o = json.loads(open("stop.out").readline()); full, s = sys.argv[1], sys.argv[2]
e = full.index(s) + len(s)
sys.exit(not (o["text"] == full[:e] and o["finish"] == "stop" and len(o["ids"]) < 40))' "$full_text" "$stop"
third=$(jids llama3-gen.out | cut -d' ' -f3)
NT="--tokenizer-type NullTokenizer --vocab-size 50257 --null-tokenizer-eod-id $third"
ok "NullTokenizer with eod = the 3rd greedy id: exits 0" to eod "$EV" generate --load ck-llama3 $NT \
	--prompt "$(sed -n 's/^prompt: //p' llama3-full.out)" --greedy --max-new-tokens 40 --output jsonl --threads 1
ok "... it ends at that id, finish eod" test "$(jids eod.out)" = "$(jids llama3-gen.out | cut -d' ' -f1-3)" -a \
	-n "$(grep '"finish":"eod"' eod.out)"
ok "streamed text (--output text): exits 0" to text "$EV" generate --load ck-gpt2 --prompt "$P" --prompt "Hello" --greedy \
	--ignore-eos --max-new-tokens 20 --threads 1
"$EV" generate --load ck-gpt2 --prompt "$P" --prompt "Hello" --greedy --ignore-eos --max-new-tokens 20 --threads 1 \
	--output jsonl >text.jsonl 2>&1
ok "... one line a prompt, equal to the JSONL texts" $PY -c '
import json, sys
want = "".join(json.loads(l)["text"] + "\n" for l in open("text.jsonl"))
got = open("text.out", encoding="utf-8").read()
sys.exit(not (got == want and got.count("\n") == 2))'

# ---- bad input ----
long=$(printf 'word %.0s' $(seq 1 40))
ok "a prompt longer than --max-length 16: exit 3" exits 3 "$EV" generate --load ck-llama3 --prompt hi --prompt "$long" --max-length 16
ok "... naming --prompt 2 and the context" err_has "--prompt 2: the prompt is .* tokens, longer than the context of 16"
printf 'hi\n%s\n' "$long" >long.txt
ok "the same on stdin line 2: exit 3" exits 3 sh -c "'$EV' generate --load ck-gpt2 --max-length 16 <long.txt"
ok "... naming stdin line 2" err_has "stdin line 2: the prompt is"
printf 'hi\n%s\n' "$(printf 'x %.0s' $(seq 1 150))" >long2.txt
ok "GPT-2 (128 learned positions): a 150-token prompt on stdin line 2 exits 3" exits 3 sh -c "'$EV' generate --load ck-gpt2 <long2.txt"
ok "... naming the context of 128 positions" err_has "stdin line 2: the prompt is .* longer than the context of 128"
printf 'hi\n\nthere\n' >empty.txt
ok "an empty stdin line: exit 3" exits 3 sh -c "'$EV' generate --load ck-gpt2 <empty.txt"
ok "... naming stdin line 2" err_has "stdin line 2: empty prompt"
printf '{"prompt": "hi"}\n{"prompt": 5}\n' >bad.jsonl
ok "--jsonl: a line without a prompt string: exit 3" exits 3 sh -c "'$EV' generate --load ck-gpt2 --jsonl <bad.jsonl"
ok "... naming stdin line 2" err_has 'stdin line 2: expected a JSON object with a "prompt" string'
printf '{"prompt": "hi", "id": 1}\n{"prompt": "there"}\n' >good.jsonl
ok "--jsonl: two prompts, two JSONL lines" sh -c "'$EV' generate --load ck-gpt2 --jsonl --batch-size 2 --max-new-tokens 3 \
	--greedy <good.jsonl | grep -c '\"index\"' | grep -qx 2"
ok "--top-k 5 with --top-p 0.5: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt hi --top-k 5 --top-p 0.5
ok "--temperature -1: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt hi --temperature -1
ok "--top-p 1.5: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt hi --top-p 1.5
ok "--logits with two prompts: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt a --prompt b --logits x.npy
ok "--max-length 200 beyond GPT-2's 128 learned positions: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt hi --max-length 200
ok "... naming max_position_embeddings" err_has "max_position_embeddings"
ok "--output xml: exit 2" exits 2 "$EV" generate --load ck-gpt2 --prompt hi --output xml
done_testing
