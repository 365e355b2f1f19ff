#!/bin/sh
# mgt-ckpt-convert with Megatron-Core BERT and transformers' MegatronBert classes: tiny random
# MegatronBertForPreTraining / MegatronBertForMaskedLM directories (tests/hf/make_tiny_bert.py: 2
# layers, h 64, 4 heads, vocabulary 1000 so that padding rows exist, eps 1e-5, hidden_act gelu),
# checked against references written here from megatron/core/models/bert/bert_model.py, transformers' models/megatron_bert/modeling_megatron_bert.py:
#   - HF -> mgt (TP 1, TP 2 x PP 2) -> HF reproduces every tensor bit for bit (tests/hf/st.py
#     compare: names, dtypes, shapes, bytes) and config.json;
#   - every dataset of the mgt checkpoint (model.h5, read with h5py) equals an independent numpy
#     re-layout of the Hugging Face tensors: the names of section 3.2, linear_qkv per head
#     [q_n; k_n; v_n], the word embeddings, output_layer.bias (and an untied output_layer.weight)
#     padded with zero rows to a multiple of 128 x TP; no dataset more or less; the arguments
#     recorded (family bert, the binary head, --no-bias-gelu-fusion, the epsilon, the padding);
#   - MaskedLM (no binary head): no token-type, pooler or binary-head datasets, back with a zero
#     token-type table; a non-zero table is refused;
#   - files as older transformers saved them (position_ids, tied decoder copies) convert to the
#     same checkpoint; a tied copy that differs is refused;
#   - refusals with exit 3, a message naming the key, and no output: model_type bert (post-LN),
#     type_vocab_size 3, tanh and other hidden_act, relative positions, another class; the way
#     out refuses a BERT without --no-bias-gelu-fusion (exit 3) and --family llama (exit 2);
#     mgt-export refuses GGUF of a BERT (exit 2);
#   - a BERT checkpoint with no config.json recorded gets one made from its arguments and the same
#     tensors; one trained by mgt (no SAVE/hf/) gets its WordPiece vocabulary as vocab.txt, and a
#     tokenizer with more tokens than the embedding's rows is refused (exit 3).
. "$(dirname "$0")/lib.sh"
HF=$ROOT/tests/hf
export HFT=$HF
CONV=$BIN/mgt-ckpt-convert

# layout_check HF_DIR CKPT_DIR TP: the checkpoint's datasets against the re-layout of HF_DIR
layout_check() {
	$PY - "$@" <<'EOF'
import json, sys, h5py, numpy as np
sys.path.insert(0, __import__("os").environ["HFT"])
import st

hf, ck, tp = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = json.load(open(hf + "/config.json"))
t = {k: v.astype(np.float32) for k, v in st.load_float(hf).items()}
L, h, nq, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
d = h // nq
binary = cfg["architectures"][0] == "MegatronBertForPreTraining"
tied = cfg.get("tie_word_embeddings", True)
div = 128 * tp
Vp = (V + div - 1) // div * div

def pad(x):  # zero rows up to the padded vocabulary
    return np.concatenate([x, np.zeros((Vp - V,) + x.shape[1:], np.float32)])

def per_head(q, k, v):  # Megatron's QKV with one query group per head: [q_n; k_n; v_n] for each head n
    return np.concatenate([np.concatenate([q[n * d:(n + 1) * d], k[n * d:(n + 1) * d], v[n * d:(n + 1) * d]])
                           for n in range(nq)])

want = {"embedding.word_embeddings.weight": pad(t["bert.embeddings.word_embeddings.weight"]),
        "embedding.position_embeddings.weight": t["bert.embeddings.position_embeddings.weight"],
        "encoder.final_layernorm.weight": t["bert.encoder.ln.weight"],
        "encoder.final_layernorm.bias": t["bert.encoder.ln.bias"],
        "lm_head.dense.weight": t["cls.predictions.transform.dense.weight"],
        "lm_head.dense.bias": t["cls.predictions.transform.dense.bias"],
        "lm_head.layer_norm.weight": t["cls.predictions.transform.LayerNorm.weight"],
        "lm_head.layer_norm.bias": t["cls.predictions.transform.LayerNorm.bias"],
        "output_layer.bias": pad(t["cls.predictions.bias"])}
if not tied:
    want["output_layer.weight"] = pad(t["cls.predictions.decoder.weight"])
if binary:
    want.update({"embedding.tokentype_embeddings.weight": t["bert.embeddings.token_type_embeddings.weight"],
                 "pooler.dense.weight": t["bert.pooler.dense.weight"], "pooler.dense.bias": t["bert.pooler.dense.bias"],
                 "binary_head.weight": t["cls.seq_relationship.weight"],
                 "binary_head.bias": t["cls.seq_relationship.bias"]})
for n in range(L):
    H, M = "bert.encoder.layer.%d." % n, "encoder.layers.%d." % n
    for w in ("weight", "bias"):
        a = "attention.self."
        want[M + "self_attention.linear_qkv." + w] = per_head(t[H + a + "query." + w], t[H + a + "key." + w],
                                                              t[H + a + "value." + w])
        want[M + "self_attention.linear_qkv.layer_norm_" + w] = t[H + "attention.ln." + w]
        want[M + "self_attention.linear_proj." + w] = t[H + "attention.output.dense." + w]
        want[M + "mlp.linear_fc1.layer_norm_" + w] = t[H + "ln." + w]
        want[M + "mlp.linear_fc1." + w] = t[H + "intermediate.dense." + w]
        want[M + "mlp.linear_fc2." + w] = t[H + "output.dense." + w]
f = h5py.File(ck + "/iter_0000000/model.h5", "r")
have = set(k for k in f if not k.startswith("optimizer."))
bad = sorted(k for k in want if k in have and not (f[k].shape == want[k].shape and (f[k][...] == want[k]).all()))
a = json.load(open(ck + "/iter_0000000/metadata.json"))["args"]
args = {"family": "bert", "bert_binary_head": binary, "no_bias_gelu_fusion": True,
        "norm_epsilon": cfg["layer_norm_eps"], "padded_vocab_size": Vp,
        "untie_embeddings_and_output_weights": not tied, "num_layers": L, "hidden_size": h,
        "ffn_hidden_size": cfg["intermediate_size"], "num_attention_heads": nq}
wrong = sorted(k for k in args if a.get(k) != args[k])
print("# %d datasets; missing %s, extra %s, different %s; arguments differing %s"
      % (len(have), sorted(set(want) - have), sorted(have - set(want)), bad, [(k, a.get(k)) for k in wrong]))
sys.exit(1 if set(want) != have or bad or wrong else 0)
EOF
}

# same_h5 A B: the two checkpoints' datasets equal bit for bit (names and values)
same_h5() {
	$PY - "$@" <<'EOF'
import sys, h5py
a, b = (h5py.File(d + "/iter_0000000/model.h5", "r") for d in sys.argv[1:3])
diff = sorted(set(a) ^ set(b)) + [k for k in a if k in b and not (a[k][...] == b[k][...]).all()]
print("# %d datasets, differing: %s" % (len(a), diff[:4]))
sys.exit(1 if diff or not len(a) else 0)
EOF
}

same_config() { $PY -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" "$1" "$2"; }
cfg_edit() { # cfg_edit DIR PYTHON-ON-c
	$PY -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); exec(sys.argv[2]); json.dump(c, open(p,'w'))" "$1" "$2"
}
make_bert() { # make_bert DIR ARGS...: a tiny MegatronBert, or a failing TAP line
	d=$1; shift
	$PY "$HF/make_tiny_bert.py" "$d" "$@" >"$T/mk.log" 2>&1 || { ok "make_tiny_bert.py $*" false; sed 's/^/# /' "$T/mk.log"; }
}
refused() { # refused CODE WHAT TEXT CONVERT-ARGS...: exit CODE, stderr has TEXT, no output
	c=$1 what=$2 text=$3; shift 3
	rm -rf "$T/no"
	ok "$what: exit $c" exits "$c" "$CONV" --save-dir "$T/no" "$@"
	ok "$what: the message names it" err_has "$text"
	ok "$what: no output" no_files "$T/no" "$T"/no.tmp.*
}

# PreTraining, fp32, tied: TP 1 and TP 2 x PP 2
make_bert "$T/pt"
for lay in 1:1 2:2; do
	tp=${lay%:*} pp=${lay#*:} c=$T/ck-pt-$tp-$pp
	ok "PreTraining: HF -> mgt at TP $tp x PP $pp" "$CONV" --quiet --load-dir "$T/pt" --save-dir "$c" \
		--target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp"
	ok "PreTraining TP $tp x PP $pp: every dataset as the re-layout of the HF tensors, the arguments" \
		layout_check "$T/pt" "$c" "$tp"
	ok "PreTraining TP $tp x PP $pp: mgt -> HF" "$CONV" --quiet --load-dir "$c" --save-dir "$T/back-pt-$tp-$pp"
	ok "PreTraining TP $tp x PP $pp: round trip bit for bit" $PY "$HF/st.py" compare "$T/pt" "$T/back-pt-$tp-$pp"
	ok "PreTraining TP $tp x PP $pp: config.json back" same_config "$T/pt/config.json" "$T/back-pt-$tp-$pp/config.json"
done
ok "TP 2 x PP 2: a shard file per rank" test -f "$T/ck-pt-2-2/iter_0000000/model_tp01_pp001_dp000.h5"
ok "the tokenizer: vocab.txt as BertWordPieceLowerCase" $PY -c "
import json,sys; m=json.load(open(sys.argv[1])); t=m['tokenizer']
sys.exit(not (t['tokenizer_type']=='BertWordPieceLowerCase' and t['vocab_file']=='hf/vocab.txt'))" \
	"$T/ck-pt-1-1/iter_0000000/metadata.json"
ok "vocab.txt back" cmp "$T/pt/vocab.txt" "$T/back-pt-1-1/vocab.txt"
make_bert "$T/other" --seed 99
ok "the layout check tells another model's tensors apart" exits 1 layout_check "$T/other" "$T/ck-pt-1-1" 1

# bf16, untied (cls.predictions.decoder.weight is output_layer.weight), TP 2
make_bert "$T/un" --dtype bf16 --untie
ok "untied bf16: HF -> mgt at TP 2" "$CONV" --quiet --load-dir "$T/un" --save-dir "$T/ck-un" --target-tensor-parallel-size 2
ok "untied bf16: datasets (output_layer.weight padded), arguments" layout_check "$T/un" "$T/ck-un" 2
ok "untied bf16: mgt -> HF" "$CONV" --quiet --load-dir "$T/ck-un" --save-dir "$T/back-un"
ok "untied bf16: round trip bit for bit" $PY "$HF/st.py" compare "$T/un" "$T/back-un"

# MaskedLM: a BERT without the binary head
make_bert "$T/mlm" --class mlm
ok "MaskedLM: HF -> mgt at TP 2 x PP 2" "$CONV" --quiet --load-dir "$T/mlm" --save-dir "$T/ck-mlm" \
	--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
ok "MaskedLM: no token types, pooler or binary head; bert_binary_head false" layout_check "$T/mlm" "$T/ck-mlm" 2
ok "MaskedLM: mgt -> HF" "$CONV" --quiet --load-dir "$T/ck-mlm" --save-dir "$T/back-mlm"
ok "MaskedLM: round trip bit for bit (the zero token-type table too)" $PY "$HF/st.py" compare "$T/mlm" "$T/back-mlm"
make_bert "$T/mlm-tt" --class mlm --tokentype-nonzero
refused 3 "MaskedLM with token types" "token_type_embeddings.weight: element 0 is not zero" --load-dir "$T/mlm-tt"

# files as older transformers saved them: position_ids, tied decoder copies
make_bert "$T/old" --legacy
ok "legacy file: HF -> mgt" "$CONV" --quiet --load-dir "$T/old" --save-dir "$T/ck-old"
ok "legacy file: the same checkpoint as without the buffer and copies" same_h5 "$T/ck-old" "$T/ck-pt-1-1"
ok "legacy file: back, without them" "$CONV" --quiet --load-dir "$T/ck-old" --save-dir "$T/back-old"
ok "legacy file: back equals the current file bit for bit" $PY "$HF/st.py" compare "$T/pt" "$T/back-old"
cp -r "$T/old" "$T/old-bad"
$PY - "$T/old-bad" <<'EOF'
import sys; sys.path.insert(0, __import__("os").environ["HFT"]); import st
d = sys.argv[1]; t = st.load(d)
out = [(k, dt, a.copy()) for k, (dt, s, a) in t.items()]
for k, dt, a in out:
    if k == "cls.predictions.decoder.weight":
        a.reshape(-1).view("u4")[7] ^= 1  # one bit of element 7
st.save_dir(d, out)
EOF
refused 3 "a tied decoder copy that differs" "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight" \
	--load-dir "$T/old-bad"

# config.json refusals
variant() { rm -rf "$T/v"; cp -r "$T/pt" "$T/v"; cfg_edit "$T/v" "$1"; }
variant "c['model_type'] = 'bert'; c['architectures'] = ['BertForPreTraining']"
refused 3 "model_type bert" "post-LN" --load-dir "$T/v"
variant "c['type_vocab_size'] = 3"
refused 3 "type_vocab_size 3" '"type_vocab_size": expected 2' --load-dir "$T/v"
variant "c['hidden_act'] = 'gelu_new'"
refused 3 "hidden_act gelu_new" 'hidden_act "gelu_new" (the tanh approximation' --load-dir "$T/v"
variant "c['hidden_act'] = 'relu'"
refused 3 "hidden_act relu" 'hidden_act "relu" is not supported' --load-dir "$T/v"
variant "c['position_embedding_type'] = 'relative_key'"
refused 3 "relative positions" 'position_embedding_type "relative_key"' --load-dir "$T/v"
variant "c['architectures'] = ['MegatronBertForSequenceClassification']"
refused 3 "another class" 'architectures "MegatronBertForSequenceClassification"' --load-dir "$T/v"
ok "the unedited model converts (the variants' only damage is the key)" "$CONV" --quiet --load-dir "$T/pt" --save-dir "$T/again"

# the way out: the arguments decide
meta_edit() { # meta_edit CKPT PYTHON-ON-m: edit metadata.json, checksums rewritten
	$PY -c "import json,sys; p=sys.argv[1]+'/iter_0000000/metadata.json'; m=json.load(open(p)); exec(sys.argv[2]); json.dump(m, open(p,'w'))" "$1" "$2" &&
		$PY "$ROOT/tests/cli/ckpt_rehash.py" "$1/iter_0000000"
}
cp -r "$T/ck-pt-1-1" "$T/ck-tanh"
meta_edit "$T/ck-tanh" "m['args']['no_bias_gelu_fusion'] = False"
refused 3 "mgt -> HF of a BERT with the fused (tanh) bias-GELU" "no-bias-gelu-fusion" --load-dir "$T/ck-tanh"
refused 2 "mgt -> HF of a BERT as llama" "cannot hold this model" --load-dir "$T/ck-pt-1-1" --family llama
ok "mgt-export: GGUF of a BERT: exit 2" exits 2 "$BIN/mgt-export" --load-dir "$T/ck-pt-1-1" --output "$T/b.gguf"
ok "...naming it" err_has "a BERT"
cp -r "$T/ck-pt-1-1" "$T/ck-bare"
meta_edit "$T/ck-bare" "del m['hf']"
ok "no config.json recorded: mgt -> HF" "$CONV" --quiet --load-dir "$T/ck-bare" --save-dir "$T/back-bare"
ok "...the same tensors bit for bit" $PY "$HF/st.py" compare "$T/pt" "$T/back-bare"
ok "...a MegatronBertForPreTraining config.json from the arguments" $PY -c "
import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
keys = ['model_type','architectures','hidden_act','layer_norm_eps','vocab_size','hidden_size','num_hidden_layers',
        'num_attention_heads','intermediate_size','max_position_embeddings','type_vocab_size']
d = [k for k in keys if a.get(k) != b.get(k)]; print('# differing: %s' % d)
sys.exit(bool(d) or b.get('tie_word_embeddings') is not True)" "$T/pt/config.json" "$T/back-bare/config.json"
ok "...which converts in" "$CONV" --quiet --load-dir "$T/back-bare" --save-dir "$T/ck-bare2"
ok "...to the same checkpoint" same_h5 "$T/ck-bare2" "$T/ck-pt-1-1"
# a BERT trained by mgt: no SAVE/hf/, the tokenizer named by the arguments
cp -r "$T/ck-pt-1-1" "$T/ck-mgt"
rm -rf "$T/ck-mgt/hf"
meta_edit "$T/ck-mgt" "del m['hf']; del m['tokenizer']; m['args']['vocab_file'] = '$T/pt/vocab.txt'"
ok "trained by mgt: mgt -> HF" "$CONV" --quiet --load-dir "$T/ck-mgt" --save-dir "$T/back-mgt"
ok "...the WordPiece vocabulary as vocab.txt" cmp "$T/pt/vocab.txt" "$T/back-mgt/vocab.txt"
ok "...tokenizer_config.json with do_lower_case true" $PY -c "
import json,sys; sys.exit(json.load(open(sys.argv[1])).get('do_lower_case') is not True)" "$T/back-mgt/tokenizer_config.json"
ok "...the same tensors bit for bit" $PY "$HF/st.py" compare "$T/pt" "$T/back-mgt"
# BertWordPieceCase adds <extra_id_0..99> after the vocabulary: 1100 tokens, more than the 1024 rows
meta_edit "$T/ck-mgt" "m['args']['tokenizer_type'] = 'BertWordPieceCase'"
refused 3 "a tokenizer larger than the embedding" "the vocabulary has 1100 tokens" --load-dir "$T/ck-mgt"
# ...with a 900-line vocab.txt it fits (1000 tokens): the sentinels <extra_id_0..99> at 900..999 are
# written as transformers reads added tokens (issue 46 item 10: config.json said 1000 and vocab.txt
# had 900 lines): tokenizer_config.json's added_tokens_decoder and additional_special_tokens, and
# added_tokens.json; checked against mgt-tokenize's ids of the same strings under BertWordPieceCase
head -900 "$T/pt/vocab.txt" >"$T/vocab-900.txt"
meta_edit "$T/ck-mgt" "m['args']['vocab_file'] = '$T/vocab-900.txt'"
ok "BertWordPieceCase: mgt -> HF" "$CONV" --quiet --load-dir "$T/ck-mgt" --save-dir "$T/back-case"
"$BIN/mgt-tokenize" --tokenizer-type BertWordPieceCase --vocab-file "$T/vocab-900.txt" \
	"<extra_id_0> <extra_id_57> <extra_id_99>" >"$T/sentinel-ids" 2>&1
ok "...its sentinels as added tokens after vocab.txt, config.json's vocab_size the tokenizer's" $PY - \
	"$T/back-case" "$T/sentinel-ids" <<'EOF2'
import json, sys
d = sys.argv[1]
lines = sum(1 for _ in open(d + "/vocab.txt"))
tc = json.load(open(d + "/tokenizer_config.json")); at = json.load(open(d + "/added_tokens.json"))
cfg = json.load(open(d + "/config.json"))
dec = {int(k): v for k, v in tc.get("added_tokens_decoder", {}).items()}
want = {lines + i: "<extra_id_%d>" % i for i in range(100)}
ok = {k: v["content"] for k, v in dec.items()} == want and all(v["special"] for v in dec.values())
ok = ok and tc.get("additional_special_tokens") == [want[k] for k in sorted(want)]
ok = ok and at == {v: k for k, v in want.items()} and cfg["vocab_size"] == lines + 100
ok = ok and tc.get("do_lower_case") is False
ids = [int(x) for x in open(sys.argv[2]).read().split() if x.isdigit()]
print("# vocab.txt %d lines, %d added, config vocab_size %d, mgt-tokenize ids %s" % (lines, len(dec), cfg["vocab_size"], ids))
ok = ok and [at["<extra_id_0>"], at["<extra_id_57>"], at["<extra_id_99>"]] == [i for i in ids if i >= lines]
sys.exit(not ok)
EOF2

done_testing
