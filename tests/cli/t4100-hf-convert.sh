#!/bin/sh
# mgt-ckpt-convert: Hugging Face <-> mgt, for a tiny random model of every family
# (tests/hf/make_tiny.py), checked against independent references:
#   - the round trip HF -> mgt (TP 2 x PP 2) -> HF reproduces every tensor bit for bit
#     (tests/hf/st.py compare: names, dtypes, shapes, bytes);
#   - mgt's logits of the converted model (mgt-eval) equal a float64 PyTorch model written from
#     Hugging Face's conventions (tests/hf/ref_forward.py: rotate_half RoPE, Conv1D, llama3
#     rope scaling, q/k norms) reading the original safetensors, within 1e-5 relative (fp32);
#   - the checkpoint loads in mgt-train --finetune and trains;
#   - Megatron's layouts inside the mgt checkpoint: linear_qkv interleaved per query group and
#     linear_fc1 = [gate; up], vocabulary rows padded with zeros (read with h5py from model.h5).
. "$(dirname "$0")/lib.sh"
HF=$ROOT/tests/hf
TOKS="5 17 998 3 250 42 7 7 1 600 31 12 999 0 77 300"

relerr() { # relerr A.npy B.npy TOL: ||a-b|| / ||b|| <= TOL
	$PY - "$@" <<'EOF'
import sys, numpy as np
a = np.load(sys.argv[1]).astype(np.float64); b = np.load(sys.argv[2]).astype(np.float64)
if a.shape != b.shape:
    print("# shapes differ: %s vs %s" % (a.shape, b.shape)); sys.exit(1)
e = np.linalg.norm(a - b) / np.linalg.norm(b)
print("# relative error %.3g (limit %s)" % (e, sys.argv[3]))
sys.exit(0 if e <= float(sys.argv[3]) else 1)
EOF
}

layout_check() { # layout_check HF_DIR CKPT_DIR: Megatron's layouts, read independently
	$PY - "$@" <<'EOF'
import json, sys, h5py, numpy as np

hf, ck = sys.argv[1], sys.argv[2]
sys.path.insert(0, __import__("os").environ["HFT"])
import st
cfg = json.load(open(hf + "/config.json"))
t = st.load_float(hf)
f = h5py.File(ck + "/iter_0000000/model.h5", "r")
meta = json.load(open(ck + "/iter_0000000/metadata.json"))
if cfg["model_type"] == "gpt2":
    sys.exit(0)
nq, h = cfg["num_attention_heads"], cfg["hidden_size"]
ng = cfg.get("num_key_value_heads", nq); d = cfg.get("head_dim") or h // nq
q = t["model.layers.0.self_attn.q_proj.weight"].astype(np.float32)
k = t["model.layers.0.self_attn.k_proj.weight"].astype(np.float32)
v = t["model.layers.0.self_attn.v_proj.weight"].astype(np.float32)
qkv = f["decoder.layers.0.self_attention.linear_qkv.weight"][...]
qpg = nq // ng
for g in range(ng):
    blk = qkv[g * (qpg + 2) * d:(g + 1) * (qpg + 2) * d]
    assert (blk[:qpg * d] == q[g * qpg * d:(g + 1) * qpg * d]).all(), "q rows of group %d" % g
    assert (blk[qpg * d:(qpg + 1) * d] == k[g * d:(g + 1) * d]).all(), "k rows of group %d" % g
    assert (blk[(qpg + 1) * d:] == v[g * d:(g + 1) * d]).all(), "v rows of group %d" % g
fc1 = f["decoder.layers.0.mlp.linear_fc1.weight"][...]
gate = t["model.layers.0.mlp.gate_proj.weight"].astype(np.float32)
up = t["model.layers.0.mlp.up_proj.weight"].astype(np.float32)
assert (fc1 == np.concatenate([gate, up])).all(), "linear_fc1 != [gate; up]"
emb = f["embedding.word_embeddings.weight"][...]
V = cfg["vocab_size"]
assert emb.shape[0] % 256 == 0 and emb.shape[0] >= V, "padded rows %d" % emb.shape[0]
assert (emb[V:] == 0).all() and (emb[:V] == t["model.embed_tokens.weight"].astype(np.float32)).all()
assert meta["args"]["padded_vocab_size"] == emb.shape[0]
EOF
}

export HFT=$HF
for spec in gpt2:bf16:--gpt2-buffers=bias gpt2:fp32:--gpt2-prefix=transformer llama2:fp16: llama3:bf16: \
	llama3.1:bf16: llama3.2:bf16: mistral:bf16: qwen2:bf16:--shard-bytes=60000 qwen3:bf16:; do
	fam=${spec%%:*}; rest=${spec#*:}; dt=${rest%%:*}; extra=${rest#*:}
	name=$fam-$dt
	src=$T/$name
	if ! $PY "$HF/make_tiny.py" "$fam" "$src" --dtype "$dt" $extra >"$T/mk.log" 2>&1; then
		ok "$name: make_tiny.py" false; cat "$T/mk.log" | sed 's/^/# /'; continue
	fi
	ok "$name: HF -> mgt at TP 2 x PP 2" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" --save-dir "$T/ck-$name" \
		--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
	ok "$name: shard files of every rank" test -f "$T/ck-$name/iter_0000000/model_tp01_pp001_dp000.h5"
	ok "$name: Megatron layouts (qkv per group, fc1 [gate; up], padded vocabulary)" layout_check "$src" "$T/ck-$name"
	ok "$name: mgt -> HF" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/ck-$name" --save-dir "$T/back-$name"
	ok "$name: round trip bit for bit" $PY "$HF/st.py" compare "$src" "$T/back-$name"
	ok "$name: config.json back" $PY -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a!=b)" \
		"$src/config.json" "$T/back-$name/config.json"
	"$BIN/mgt-eval" --load "$T/ck-$name" --tokens "$TOKS" --logits "$T/mgt-$name.npy" >/dev/null 2>"$T/eval.err" ||
		sed 's/^/# /' "$T/eval.err"
	$PY "$HF/ref_forward.py" "$src" --tokens "$TOKS" --logits "$T/ref-$name.npy" >/dev/null 2>"$T/ref.err" ||
		sed 's/^/# /' "$T/ref.err"
	ok "$name: logits equal the float64 reference within 1e-5" relerr "$T/mgt-$name.npy" "$T/ref-$name.npy" 1e-5
done

# the converted checkpoint trains: mgt-train --load --finetune --use-checkpoint-args (the model's shape and
# tokenizer from the checkpoint), under another layout (TP 1); the loaded weights are the converted ones
ok "llama3.1: mgt-train --use-checkpoint-args --finetune trains the converted model" sh -c "
	'$BIN/mgt-train' --load '$T/ck-llama3.1-bf16' --use-checkpoint-args --finetune --mock-data \
	--seq-length 16 --micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 1e-4 --log-interval 1 \
	--save '$T/ft' >'$T/ft.log' 2>&1 && grep -c 'lm loss' '$T/ft.log' | grep -qx 2" ||
	sed 's/^/# /' "$T/ft.log" | tail -5
ok "llama3.1: the fine-tuned checkpoint converts back to Hugging Face" "$BIN/mgt-ckpt-convert" --quiet \
	--load-dir "$T/ft" --save-dir "$T/ft-hf"
ok "llama3.1: its config.json is the original's" $PY -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" \
	"$T/llama3.1-bf16/config.json" "$T/ft-hf/config.json"

# models trained by mgt (no config.json recorded): the family inferred from the arguments
# (lib/model/families.c's rows, first fit): GPT-2 and Llama layouts, q/k biases (Qwen2), q/k
# norms (Qwen3, which wins over biases: the check then names the difference)
TR="--mock-data --vocab-size 500 --tokenizer-type NullTokenizer --seq-length 16 --micro-batch-size 1
	--global-batch-size 1 --train-iters 1 --lr 1e-3 --log-interval 1 --eval-interval 0 --threads 2"
for spec in "gpt2:--model tiny-gpt2" "llama:--model tiny-llama" "qwen2:--model tiny-llama --add-qkv-bias" \
	"qwen3:--model tiny-llama --qk-layernorm"; do
	fam=${spec%%:*}; fl=${spec#*:}
	"$BIN/mgt-train" $TR $fl --save "$T/tr-$fam" >"$T/tr.log" 2>&1 || sed 's/^/# /' "$T/tr.log" | tail -5
	ok "trained with $fl: mgt -> HF as $fam (inferred)" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/tr-$fam' \
		--save-dir '$T/trhf-$fam' && grep -q '\"model_type\": \"$fam\"' '$T/trhf-$fam/config.json'"
done
"$BIN/mgt-train" $TR --model tiny-llama --qk-layernorm --add-qkv-bias --save "$T/tr-qkb" >"$T/tr.log" 2>&1
ok "q/k norms and q/k biases together: no family holds them (exit 2)" sh -c "
	'$BIN/mgt-ckpt-convert' --load-dir '$T/tr-qkb' --save-dir '$T/bad' 2>'$T/err'; test \$? = 2 && grep -q 'cannot hold this model' '$T/err'"

done_testing
