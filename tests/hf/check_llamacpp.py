#!/usr/bin/python3
"""Prove the llama.cpp harness and our reading of llama.cpp's conventions.

usage: check_llamacpp.py [--keep DIR] [--tokens N]

For gpt2, llama2, llama3, llama3.1 (rope_freqs), llama3.2 (tied, head_dim key), mistral: make a tiny
fp32 HF model (make_tiny.py), write it as GGUF with our own minimal writer (gguf_min.py), run it through
real llama.cpp (llamacpp/run.mjs, F32 KV cache) and compare its logits at every prompt position and
its greedy continuation with ref_forward.py (float64, HF conventions).  Also an f16 GGUF of the llama3
model (looser bound: ggml presumably rounds activations to f16 for f16 matmuls) and two negative controls that
must FAIL to match: q/k rows left in HF order (no permute), and the Llama 3.1 model without
rope_freqs.weight.  GPT-2: llama.cpp's CPU GELU goes through an f16 table (ggml GGML_GELU_FP16), so
the 2-layer models agree with the exact HF math only to ~1e-2 (greedy ids still equal); a 1-layer model
compared with ref_forward's emulation of that table (GELU_MODE "ggml-f16") agrees to ~5e-5.  (With two
layers the emulation only reaches ~1e-3: one-ulp f16 rounding flips in layer 1 move layer 2's inputs.)  Exit 0 all as expected, 1 otherwise, 77 when the npm packages are unavailable.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ref_forward as R  # noqa: E402

PY = sys.executable


def run_llamacpp(gguf, ids, n):
    out = subprocess.run(["node", os.path.join(HERE, "llamacpp", "run.mjs"), gguf, "--tokens",
                          " ".join(map(str, ids)), "--n", str(n)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--keep", help="keep the models in this directory")
    p.add_argument("--tokens", type=int, default=24)
    a = p.parse_args()
    rc = subprocess.run(["sh", os.path.join(HERE, "llamacpp", "setup.sh")]).returncode
    if rc != 0:
        return 77 if rc == 77 else 1
    tmp = a.keep or tempfile.mkdtemp(prefix="mgt-hf-")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(11)
    # (name, family, make_tiny args, gguf_min args, tolerance on max |logit diff| or None = must differ)
    cases = [
        ("gpt2", "gpt2", [], [], 2e-2),
        ("gpt2-openai-bf16", "gpt2", ["--dtype", "bf16", "--gpt2-buffers", "bias"], [], 2e-2),
        ("gpt2-1layer ggml-gelu", "gpt2", ["--layers", "1", "--gpt2-prefix", "transformer"], [], 2e-4),
        ("llama2", "llama2", [], [], 1e-4),
        ("llama3", "llama3", [], [], 1e-4),
        ("llama3.1", "llama3.1", [], [], 1e-4),
        ("llama3.2", "llama3.2", [], [], 1e-4),
        ("mistral", "mistral", [], [], 1e-4),
        ("llama3-f16", "llama3", ["--dtype", "fp16"], ["--type", "f16"], 5e-2),
        ("NEG llama3 no permute", "llama3", [], ["--no-permute"], None),
        ("NEG llama3.1 no rope_freqs", "llama3.1", [], ["--drop-rope-freqs"], None),
    ]
    bad = 0
    for name, fam, mk, gg, tol in cases:
        d = os.path.join(tmp, name.replace(" ", "_"))
        mk = mk if "--dtype" in mk else mk + ["--dtype", "fp32"]
        subprocess.check_call([PY, os.path.join(HERE, "make_tiny.py"), fam, d] + mk)
        g = d + ".gguf"
        subprocess.check_call([PY, os.path.join(HERE, "gguf_min.py"), d, g] + gg)
        cfg, W = R.load(d)
        ids = [int(x) for x in rng.integers(0, cfg["vocab_size"], a.tokens)]
        nsteps = 8
        R.GELU_MODE = "ggml-f16" if "ggml-gelu" in name else "exact"
        ref = R.forward(cfg, W, ids).numpy()
        ref_greedy = R.greedy(cfg, W, ids, nsteps)
        lc = run_llamacpp(g, ids, nsteps)
        got = np.array(lc["logits"], dtype=np.float64)
        if got.shape != ref.shape:
            print("%-28s shape %s vs reference %s" % (name, got.shape, ref.shape))
            bad += 1
            continue
        diff = float(np.abs(got - ref).max())
        same_greedy = lc["greedy"] == ref_greedy
        if tol is None:
            ok = diff > 1e-2
            verdict = "differs as it must" if ok else "UNEXPECTEDLY MATCHES"
        else:
            ok = diff <= tol and same_greedy
            verdict = "ok" if ok else "MISMATCH"
        print("%-28s max|logit diff| %.2e (max|logit| %.1f)  greedy %s  %s"
              % (name, diff, float(np.abs(ref).max()), "same" if same_greedy else "differs %s vs %s" % (lc["greedy"], ref_greedy), verdict))
        bad += not ok
    print("llama.cpp release: %s" % json.dumps(lc.get("llama_cpp")))
    print("check_llamacpp: %s" % ("passed" if not bad else "%d FAILED" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
