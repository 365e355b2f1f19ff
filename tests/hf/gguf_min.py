#!/usr/bin/python3
"""Minimal GGUF v3 writer (numpy only) turning a tiny HF model directory into a llama.cpp model.

usage: gguf_min.py HF_DIR OUT.gguf [--type f32|f16] [--no-permute] [--drop-rope-freqs]

Independent of mgt's C exporter; used to prove the node-llama-cpp harness (tests/hf/llamacpp) and
our understanding of llama.cpp's conventions.  Supported: GPT-2 (arch "gpt2") and Llama/Mistral
without biases (arch "llama", including llama3 rope scaling as rope_freqs.weight).

Format facts (ggml docs/gguf.md, llama.cpp gguf-py/gguf/constants.py and convert_hf_to_gguf.py, as
summarized in ggml's docs/gguf.md): little-endian; "GGUF", u32 version 3,
u64 tensor count, u64 kv count; kv = gguf string key (u64 length + bytes), u32 type, value; tensor info
= name, u32 n_dims, u64 ne[n_dims] (reversed: ne[0] is the innermost, PyTorch [out, in] -> ne [in, out]),
u32 ggml type, u64 offset into the data section; data section aligned to general.alignment (32 when
absent), each tensor padded to 32.  Hyperparameters are u32, floats f32.
Llama q/k rows are permuted from HF's rotate_half layout to llama.cpp's adjacent-pair layout
(w.reshape(n_head, 2, rows/n_head/2, in).swapaxes(1, 2)); --no-permute leaves them in HF order (a
deliberately wrong file, to show that the check can fail); --drop-rope-freqs likewise omits the
llama3 rope scaling factors.
GPT-2: attn_qkv = c_attn^T (rows [Q_all; K_all; V_all]), other Conv1D weights transposed; no
output.weight (tied to token_embd).
The tokenizer is a synthetic byte-level BPE ("gpt2" model): the 256 byte tokens in GPT-2's
byte-to-unicode form, then two-character tokens made by merges of printable ASCII pairs, with the
config's bos/eos ids as control tokens "<|bos|>", "<|eos|>", "<|eosN|>".
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, typ, val):
    out = gstr(key) + struct.pack("<I", typ)
    if typ == T_U32:
        out += struct.pack("<I", val)
    elif typ == T_I32:
        out += struct.pack("<i", val)
    elif typ == T_F32:
        out += struct.pack("<f", val)
    elif typ == T_BOOL:
        out += struct.pack("<B", 1 if val else 0)
    elif typ == T_STR:
        out += gstr(val)
    elif typ == T_ARR:
        et, items = val
        out += struct.pack("<IQ", et, len(items))
        for it in items:
            if et == T_STR:
                out += gstr(it)
            elif et == T_I32:
                out += struct.pack("<i", it)
            elif et == T_F32:
                out += struct.pack("<f", it)
            else:
                raise ValueError("array type")
    else:
        raise ValueError("kv type")
    return out


def write_gguf(path, kvs, tensors):
    """kvs: list of (key, type, value); tensors: list of (name, float32 array in PyTorch order, ggml type)."""
    infos, blobs, off = b"", [], 0
    for name, arr, gt in tensors:
        data = np.ascontiguousarray(arr, dtype=np.float32 if gt == GGML_F32 else np.float16).tobytes()
        ne = list(reversed(arr.shape))
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        infos += struct.pack("<IQ", gt, off)
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(kv_bytes(*kv) for kv in kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def byte_unicode():
    """GPT-2's bytes_to_unicode table: printable bytes map to themselves, the rest to 256+k."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, k = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + k)
            k += 1
    return table


def tokenizer_kvs(V, bos, eos_list):
    specials = {bos: "<|bos|>"}
    for j, e in enumerate(eos_list):
        specials.setdefault(e, "<|eos|>" if j == 0 else "<|eos%d|>" % j)
    bu = byte_unicode()
    normal = [bu[b] for b in range(256)]
    printable = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    merges = []
    for x in printable:
        for y in printable:
            if len(normal) + len(specials) >= V:
                break
            normal.append(x + y)
            merges.append(x + " " + y)
    if len(normal) + len(specials) < V:
        raise SystemExit("gguf_min.py: vocabulary %d too large for the synthetic tokenizer" % V)
    tokens, types, it = [], [], iter(normal)
    for i in range(V):
        if i in specials:
            tokens.append(specials[i])
            types.append(3)
        else:
            tokens.append(next(it))
            types.append(1)
    return [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, "gpt-2"),
            ("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
            ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
            ("tokenizer.ggml.merges", T_ARR, (T_STR, merges)),
            ("tokenizer.ggml.bos_token_id", T_U32, bos), ("tokenizer.ggml.eos_token_id", T_U32, eos_list[0]),
            ("tokenizer.ggml.add_bos_token", T_BOOL, False)]


def permute(w, n_head):
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg, d):
    """rope_freqs.weight: inv_freq_default / inv_freq_scaled per frequency (llama.cpp divides by it)."""
    rs = cfg["rope_scaling"]
    theta = float(cfg["rope_theta"])
    fac, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    orig = float(rs["original_max_position_embeddings"])
    out = []
    for i in range(d // 2):
        wl = 2 * math.pi * theta ** (2.0 * i / d)
        if wl < orig / hi:
            out.append(1.0)
        elif wl > orig / lo:
            out.append(fac)
        else:
            s = (orig / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - s) / fac + s))
    return np.array(out, np.float32)


def main(argv=None):
    p = argparse.ArgumentParser(description="tiny HF directory -> GGUF v3 (llama / gpt2 arch)")
    p.add_argument("hf_dir")
    p.add_argument("out")
    p.add_argument("--type", choices=("f32", "f16"), default="f32")
    p.add_argument("--no-permute", action="store_true")
    p.add_argument("--drop-rope-freqs", action="store_true", help="omit rope_freqs.weight (a wrong file)")
    a = p.parse_args(argv)
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    W = {k: v.astype(np.float32) for k, v in st.load_float(a.hf_dir).items()}
    gt = GGML_F32 if a.type == "f32" else GGML_F16
    mt = cfg["model_type"]
    eos = cfg["eos_token_id"]
    eos = eos if isinstance(eos, list) else [eos]
    V = cfg["vocab_size"]
    kvs = [("general.architecture", T_STR, "gpt2" if mt == "gpt2" else "llama"),
           ("general.name", T_STR, "tiny-" + mt), ("general.file_type", T_U32, 0 if gt == GGML_F32 else 1)]
    T = []

    def mat(name, w):  # 2-D weights in the chosen type; 1-D tensors always f32 as llama.cpp expects
        T.append((name, w, gt if w.ndim == 2 else GGML_F32))

    if mt == "gpt2":
        pre = "transformer." if any(k.startswith("transformer.") for k in W) else ""
        H, L = cfg["n_embd"], cfg["n_layer"]
        kvs += [("gpt2.context_length", T_U32, cfg["n_positions"]), ("gpt2.embedding_length", T_U32, H),
                ("gpt2.feed_forward_length", T_U32, cfg.get("n_inner") or 4 * H), ("gpt2.block_count", T_U32, L),
                ("gpt2.attention.head_count", T_U32, cfg["n_head"]),
                ("gpt2.attention.layer_norm_epsilon", T_F32, cfg["layer_norm_epsilon"])]
        g = lambda n: W[pre + n]  # noqa: E731
        mat("token_embd.weight", g("wte.weight"))
        mat("position_embd.weight", g("wpe.weight"))
        for i in range(L):
            s, b = "h.%d." % i, "blk.%d." % i
            mat(b + "attn_norm.weight", g(s + "ln_1.weight"))
            mat(b + "attn_norm.bias", g(s + "ln_1.bias"))
            mat(b + "attn_qkv.weight", g(s + "attn.c_attn.weight").T)
            mat(b + "attn_qkv.bias", g(s + "attn.c_attn.bias"))
            mat(b + "attn_output.weight", g(s + "attn.c_proj.weight").T)
            mat(b + "attn_output.bias", g(s + "attn.c_proj.bias"))
            mat(b + "ffn_norm.weight", g(s + "ln_2.weight"))
            mat(b + "ffn_norm.bias", g(s + "ln_2.bias"))
            mat(b + "ffn_up.weight", g(s + "mlp.c_fc.weight").T)
            mat(b + "ffn_up.bias", g(s + "mlp.c_fc.bias"))
            mat(b + "ffn_down.weight", g(s + "mlp.c_proj.weight").T)
            mat(b + "ffn_down.bias", g(s + "mlp.c_proj.bias"))
        mat("output_norm.weight", g("ln_f.weight"))
        mat("output_norm.bias", g("ln_f.bias"))
    elif mt in ("llama", "mistral"):
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise SystemExit("gguf_min.py: biases not supported")
        H, L, nq = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        nkv = cfg.get("num_key_value_heads") or nq
        d = cfg.get("head_dim") or H // nq
        kvs += [("llama.context_length", T_U32, cfg["max_position_embeddings"]), ("llama.embedding_length", T_U32, H),
                ("llama.block_count", T_U32, L), ("llama.feed_forward_length", T_U32, cfg["intermediate_size"]),
                ("llama.rope.dimension_count", T_U32, d), ("llama.attention.head_count", T_U32, nq),
                ("llama.attention.head_count_kv", T_U32, nkv),
                ("llama.attention.layer_norm_rms_epsilon", T_F32, cfg["rms_norm_eps"]),
                ("llama.rope.freq_base", T_F32, float(cfg.get("rope_theta", 10000.0))),
                ("llama.vocab_size", T_U32, V)]
        if d != H // nq:
            kvs += [("llama.attention.key_length", T_U32, d), ("llama.attention.value_length", T_U32, d)]
        rs = cfg.get("rope_scaling")
        if rs and rs.get("rope_type") == "llama3" and a.drop_rope_freqs:
            pass
        elif rs and rs.get("rope_type") == "llama3":
            T.append(("rope_freqs.weight", llama3_factors(cfg, d), GGML_F32))
        elif rs:
            raise SystemExit("gguf_min.py: rope_scaling %r not supported" % rs)
        pq = (lambda w, n: w) if a.no_permute else permute
        mat("token_embd.weight", W["model.embed_tokens.weight"])
        for i in range(L):
            s, b = "model.layers.%d." % i, "blk.%d." % i
            mat(b + "attn_norm.weight", W[s + "input_layernorm.weight"])
            mat(b + "attn_q.weight", pq(W[s + "self_attn.q_proj.weight"], nq))
            mat(b + "attn_k.weight", pq(W[s + "self_attn.k_proj.weight"], nkv))
            mat(b + "attn_v.weight", W[s + "self_attn.v_proj.weight"])
            mat(b + "attn_output.weight", W[s + "self_attn.o_proj.weight"])
            mat(b + "ffn_norm.weight", W[s + "post_attention_layernorm.weight"])
            mat(b + "ffn_gate.weight", W[s + "mlp.gate_proj.weight"])
            mat(b + "ffn_up.weight", W[s + "mlp.up_proj.weight"])
            mat(b + "ffn_down.weight", W[s + "mlp.down_proj.weight"])
        mat("output_norm.weight", W["model.norm.weight"])
        if not cfg.get("tie_word_embeddings"):
            mat("output.weight", W["lm_head.weight"])
    else:
        raise SystemExit("gguf_min.py: model_type %r not supported (gpt2, llama, mistral)" % mt)
    kvs += tokenizer_kvs(V, cfg["bos_token_id"], eos)
    write_gguf(a.out, kvs, T)
    return 0


if __name__ == "__main__":
    sys.exit(main())
