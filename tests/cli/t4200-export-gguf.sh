#!/bin/sh
# mgt-export: GGUF files that a real llama.cpp (npm node-llama-cpp, prebuilt linux-x64 CPU binary;
# tests/hf/llamacpp) loads and runs, compared with mgt's own forward (mgt-eval):
#   - a GPT-2 model trained by mgt-train on the King James Bible (as contrib/demo.sh with DEMO_TOKENIZER=gpt2, fewer
#     iterations) and tiny random Llama 3, Llama 3.1 (rope scaling: rope_freqs), Llama 2 (MHA),
#     Qwen2 and Qwen3 models with the GPT-2 tokenizer embedded;
#   - f32: llama.cpp's greedy continuation equals mgt's token for token, and its logits are
#     within 1e-3 relative (GPT-2: llama.cpp's GELU is an f16 lookup table) of mgt's;
#   - f16, bf16, q8_0: logits within 5e-3, 3e-2 and 6e-2 relative of mgt's fp32 logits (llama.cpp
#     also rounds activations: f16 KV cache off, q8_0 matmuls quantize activations to 8 bits), and
#     q8_0 worse than f16 (the quantization is really applied);
#   - npm @huggingface/gguf parses the file: architecture, tokenizer model and pre-tokenizer;
#   - an existing output is refused (exit 5), nothing written; a model without a tokenizer exits 4.
# The llama.cpp part is skipped with a message when npm or its registry is not reachable.
# Tiers (lib.sh): the quick tier exports the KJV model (GPT-2) in every type and Llama 3.1 (rope
# scaling) and Qwen3 (q/k norms) in f32; the full tier adds their f16, bf16 and q8_0 (the KJV
# model's cases run those writers) and Llama 3, Llama 2 and Qwen2 (the same converter and tensor
# names as Llama 3.1 and Qwen3, without their extras).
. "$(dirname "$0")/lib.sh"
HF=$ROOT/tests/hf
LC=$HF/llamacpp
G=$SHARE/tokenizers/gpt2

if sh "$LC/setup.sh" >"$T/setup.log" 2>&1; then have_lc=1; else have_lc=0; fi

quiet() { "$@" >"$T/quiet.log" 2>&1 || { tail -3 "$T/quiet.log" | sed 's/^/# /'; return 1; }; }

compare() { # compare NAME GGUF CKPT TYPE: llama.cpp against mgt-eval on the same ids
	name=$1 gguf=$2 ck=$3 type=$4
	node "$LC/run.mjs" "$gguf" --tokens "$TOKS" --n 6 >"$T/lc.json" 2>"$T/lc.err" || { sed 's/^/# /' "$T/lc.err" | tail -3; return 1; }
	"$BIN/mgt-eval" --load "$ck" --tokens "$TOKS" --max-new-tokens 6 --logits "$T/m.npy" >"$T/m.out" 2>"$T/m.err" ||
		{ sed 's/^/# /' "$T/m.err"; return 1; }
	$PY - "$T/lc.json" "$T/m.npy" "$T/m.out" "$type" "$name" <<'EOF'
import json, sys, numpy as np
j = json.load(open(sys.argv[1])); m = np.load(sys.argv[2]).astype(np.float64)
ids = [int(x) for x in open(sys.argv[3]).read().split("ids:")[1].split("\n")[0].split()]
typ, name = sys.argv[4], sys.argv[5]
n = len(j["logits"])
l = np.array(j["logits"], dtype=np.float64)
e = np.linalg.norm(l - m[:n]) / np.linalg.norm(m[:n])
tol = {"f32": 2e-3 if name.startswith("kjv") else 1e-4, "f16": 5e-3, "bf16": 3e-2, "q8_0": 6e-2}[typ]
print("# %s %s: logits relative error %.3g (limit %g); greedy llama.cpp %s, mgt %s" % (name, typ, e, tol, j["greedy"], ids))
open(sys.argv[1] + ".err", "a").write("%s %s %.6g\n" % (name, typ, e))
ok = e <= tol
if typ == "f32":
    ok = ok and j["greedy"] == ids
sys.exit(0 if ok else 1)
EOF
}

# 1. the KJV model: the demo's recipe with GPT-2's tokenizer (DEMO_TOKENIZER=gpt2), with --openai-gelu (Megatron's GELU form, llama.cpp's gpt2's)
TOKS="818 262 3726 373 1793 262 8701 290 262 4534 13"   # "In the beginning was God the heaven and the earth."
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix "$T/kjv" --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$G/vocab.json" --merge-file "$G/merges.txt" --append-eod --workers 2 >/dev/null 2>&1
ok "KJV: train the tiny GPT-2 (40 iterations)" quiet "$BIN/mgt-train" --model tiny-gpt2 --openai-gelu --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$G/vocab.json" --merge-file "$G/merges.txt" --data-path "$T/kjv_text_document" --split 969,30,1 \
	--micro-batch-size 8 --global-batch-size 8 --train-iters 40 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 5 \
	--lr-decay-style cosine --hidden-dropout 0 --attention-dropout 0 --eval-iters 0 --log-interval 40 \
	--save "$T/kjv-ck" --save-interval 40 --threads 2
models="kjv:$T/kjv-ck"

# 2. tiny random models with the GPT-2 tokenizer (vocab 50257)
fams="llama3 llama3.1 llama2 qwen2 qwen3"
quick && fams="llama3.1 qwen3" # the quick tier: llama3, llama2 and qwen2 (the same converter and GGUF writer) in the full tier only
for fam in $fams; do
	$PY "$HF/make_tiny.py" "$fam" "$T/hf-$fam" --dtype fp32 --vocab 50257 --hidden 64 >/dev/null 2>&1 &&
		cp "$G/vocab.json" "$G/merges.txt" "$T/hf-$fam/" &&
		"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/hf-$fam" --save-dir "$T/ck-$fam" ||
		echo "# making $fam failed"
	models="$models $fam:$T/ck-$fam"
done

for m in $models; do
	name=${m%%:*} ck=${m#*:}
	for type in f32 f16 bf16 q8_0; do
		# the quick tier: every type for the KJV model, f32 for the others
		case $name:$type in kjv:*|*:f32) ;; *) full_only "$name: mgt-export --outtype $type" || continue;; esac
		ok "$name: mgt-export --outtype $type" "$BIN/mgt-export" --quiet --load-dir "$ck" --output "$T/$name-$type.gguf" --outtype "$type"
		if [ $have_lc = 0 ]; then skip "$name $type: llama.cpp ($(tail -1 "$T/setup.log"))"; continue; fi
		[ "$name" = kjv ] || TOKS="5 17 998 3 250 42 7 7 1 600 31 12"
		ok "$name $type: llama.cpp runs it; logits (and f32 greedy) as mgt's" compare "$name" "$T/$name-$type.gguf" "$ck" "$type"
		TOKS="818 262 3726 373 1793 262 8701 290 262 4534 13"
	done
	if [ $have_lc = 1 ] && [ -e "$T/$name-q8_0.gguf" ]; then
		ok "$name: q8_0 is quantized (error above f16's)" $PY -c "
import sys
d = {l.split()[1]: float(l.split()[2]) for l in open('$T/lc.json.err') if l.split()[0] == '$name'}
sys.exit(0 if d['q8_0'] > d['f16'] else 1)"
	fi
done

if [ $have_lc = 1 ]; then
	ok "@huggingface/gguf reads the header: architecture, tokenizer" sh -c "
		node '$LC/run.mjs' '$T/llama3.1-f32.gguf' --meta >'$T/meta.json' 2>'$T/meta.err' &&
		$PY -c \"
import json, sys
m = json.load(open('$T/meta.json'))
md = m.get('metadata', m)
def val(k):
    v = md[k]
    return v.get('value', v) if isinstance(v, dict) else v
assert val('general.architecture') == 'llama', val('general.architecture')
assert val('tokenizer.ggml.model') == 'gpt2' and val('tokenizer.ggml.pre') == 'gpt-2'
assert val('llama.attention.head_count_kv') == 2
names = [t['name'] for t in m.get('tensorInfos', m.get('tensors', []))]
assert 'rope_freqs.weight' in names and 'blk.0.attn_q.weight' in names, names[:5]
\""
fi

# bad input
ok "an existing output is refused (exit 5)" exits 5 "$BIN/mgt-export" --load-dir "$T/kjv-ck" --output "$T/kjv-f32.gguf"
ok "...naming it" err_has "kjv-f32.gguf: already exists"
rm -f "$T/hf-llama3.1/vocab.json" "$T/hf-llama3.1/merges.txt"
ok "a Hugging Face directory without a tokenizer exits 4" exits 4 "$BIN/mgt-export" --load-dir "$T/hf-llama3.1" --output "$T/x.gguf"
ok "...and writes nothing" no_files "$T/x.gguf" "$T"/x.gguf.tmp*

done_testing
