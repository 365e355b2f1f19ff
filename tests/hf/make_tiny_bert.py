#!/usr/bin/python3
"""Make a tiny random Hugging Face MegatronBert directory (config.json, safetensors, vocab.txt).

usage: make_tiny_bert.py OUTDIR [--class pretraining|mlm] [--dtype bf16|fp16|fp32] [--vocab N]
                         [--layers N] [--hidden N] [--heads N] [--ffn N] [--positions N] [--eps X]
                         [--act NAME] [--type-vocab N] [--untie] [--legacy] [--tokentype-nonzero]
                         [--seed N] [--model-type NAME]

Facts (transformers' models/megatron_bert/{configuration,modeling}_megatron_bert.py; mgt's
transformers' models/megatron_bert/modeling_megatron_bert.py):
- MegatronBertForPreTraining: bert.embeddings.{word,position,token_type}_embeddings.weight (no
  embedding LayerNorm); per layer bert.encoder.layer.N.attention.ln (pre-attention LayerNorm),
  attention.self.{query,key,value}, attention.output.dense, ln (pre-MLP LayerNorm),
  intermediate.dense, output.dense; bert.encoder.ln (final); bert.pooler.dense;
  cls.predictions.transform.{dense,LayerNorm}, cls.predictions.bias [vocab];
  cls.predictions.decoder.weight tied to the word embeddings (not saved when tied; saved when
  tie_word_embeddings is false); cls.seq_relationship [2, h].
- MegatronBertForMaskedLM: the same without bert.pooler and cls.seq_relationship
  (add_pooling_layer=False, MegatronBertOnlyMLMHead); the token-type table is there all the same.
- Linear weights [out, in]; every linear has a bias.
- config.json keys as save_pretrained writes them (tie_word_embeddings only when false: true is
  PretrainedConfig's default and is left out).
- --legacy: a file as older transformers saved it, with the position_ids buffer
  (bert.embeddings.position_ids, int64 [1, P]) and the tied cls.predictions.decoder.weight and
  cls.predictions.decoder.bias written as copies of their twins.
- MaskedLM's token-type table is zeros unless --tokentype-nonzero (a Megatron BERT without the
  binary head has no token types; the zero table is the one Hugging Face form of it).
Values: random normal (std 0.05-0.4 by role), norm weights 1 + 0.1 N(0,1), drawn in float32 and
rounded to the file dtype.  vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK], then tok5, tok6, ...
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ST_DTYPE = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}
CLASSES = {"pretraining": "MegatronBertForPreTraining", "mlm": "MegatronBertForMaskedLM"}


def config(a):
    c = {"architectures": [CLASSES[a.cls]], "attention_probs_dropout_prob": 0.1, "hidden_act": a.act,
         "hidden_dropout_prob": 0.1, "hidden_size": a.hidden, "initializer_range": 0.02,
         "intermediate_size": a.ffn, "layer_norm_eps": a.eps, "max_position_embeddings": a.positions,
         "model_type": a.model_type, "num_attention_heads": a.heads, "num_hidden_layers": a.layers,
         "pad_token_id": 0, "position_embedding_type": "absolute", "torch_dtype": TORCH_DTYPE[a.dtype],
         "transformers_version": "4.46.3", "type_vocab_size": a.type_vocab, "use_cache": True,
         "vocab_size": a.vocab}
    if not a.tied:
        c["tie_word_embeddings"] = False
    return c


def weights(a):
    rng = np.random.default_rng(a.seed)
    sdt = ST_DTYPE[a.dtype]
    out = []

    def put(name, shape, std=None, mean=0.0, value=None):
        if value is None:
            value = mean + std * rng.standard_normal(shape, dtype=np.float32)
        out.append((name, sdt, st.from_f32(np.asarray(value, np.float32).reshape(shape), sdt)))
        return out[-1][2]

    def norm(prefix):
        put(prefix + ".weight", (H,), 0.1, 1.0)
        put(prefix + ".bias", (H,), 0.05)

    def linear(prefix, rows, cols, std):
        put(prefix + ".weight", (rows, cols), std)
        put(prefix + ".bias", (rows,), 0.1)

    H, V, F = a.hidden, a.vocab, a.ffn
    emb = put("bert.embeddings.word_embeddings.weight", (V, H), 0.4)
    if a.legacy:
        out.append(("bert.embeddings.position_ids", "I64", np.arange(a.positions, dtype=np.int64).reshape(1, -1)))
    put("bert.embeddings.position_embeddings.weight", (a.positions, H), 0.1)
    tt = (a.type_vocab, H)
    if a.cls == "mlm" and not a.tokentype_nonzero:
        put("bert.embeddings.token_type_embeddings.weight", tt, value=np.zeros(tt, np.float32))
    else:
        put("bert.embeddings.token_type_embeddings.weight", tt, 0.1)
    for n in range(a.layers):
        L = "bert.encoder.layer.%d." % n
        norm(L + "attention.ln")
        linear(L + "attention.self.query", H, H, 0.25)
        linear(L + "attention.self.key", H, H, 0.25)
        linear(L + "attention.self.value", H, H, 0.12)
        linear(L + "attention.output.dense", H, H, 0.12)
        norm(L + "ln")
        linear(L + "intermediate.dense", F, H, 0.12)
        linear(L + "output.dense", H, F, 0.06)
    norm("bert.encoder.ln")
    if a.cls == "pretraining":
        linear("bert.pooler.dense", H, H, 0.12)
    linear("cls.predictions.transform.dense", H, H, 0.12)
    norm("cls.predictions.transform.LayerNorm")
    bias = put("cls.predictions.bias", (V,), 0.1)
    if not a.tied:
        put("cls.predictions.decoder.weight", (V, H), 0.3)
    elif a.legacy:
        out.append(("cls.predictions.decoder.weight", sdt, emb.copy()))
    if a.legacy:
        out.append(("cls.predictions.decoder.bias", sdt, bias.copy()))
    if a.cls == "pretraining":
        linear("cls.seq_relationship", 2, H, 0.12)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="make a tiny random MegatronBert directory")
    p.add_argument("outdir")
    p.add_argument("--class", dest="cls", choices=sorted(CLASSES), default="pretraining")
    p.add_argument("--dtype", choices=sorted(TORCH_DTYPE), default="fp32")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--positions", type=int, default=64)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--act", default="gelu")
    p.add_argument("--type-vocab", type=int, default=2)
    p.add_argument("--untie", dest="tied", action="store_false")
    p.add_argument("--legacy", action="store_true")
    p.add_argument("--tokentype-nonzero", action="store_true")
    p.add_argument("--model-type", default="megatron-bert")
    p.add_argument("--seed", type=int, default=4321)
    a = p.parse_args(argv)
    if a.hidden % a.heads:
        p.error("--hidden must be a multiple of --heads")
    os.makedirs(a.outdir, exist_ok=True)
    st.save_dir(a.outdir, weights(a))
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(config(a), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(a.outdir, "vocab.txt"), "w") as f:
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        f.write("\n".join(specials + ["tok%d" % i for i in range(len(specials), a.vocab)]) + "\n")
    with open(os.path.join(a.outdir, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
