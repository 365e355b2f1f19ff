#!/usr/bin/python3
"""Whether two mgt checkpoints hold the same parameters and model arguments (t4110, t4140); and
hf_and_ckpt(), what the layout checks of t4100, t4110 and t4140 read.

usage: same_ckpt.py CKPT_A CKPT_B VOCAB (moe|hybrid)

The newest iteration of each (latest_checkpointed_iteration.txt), model.h5 read with h5py: every
parameter of A (optimizer state aside) is in B with the same shape and the same bits, the
embedding and output rows only below VOCAB (the vocabulary padding is not converted).  Then the
arguments of the kind: moe, the MoE arguments (the layers with experts compared as lists; the
router's GEMM precision, moe_router_dtype, is a training knob Hugging Face does not record);
hybrid, the hybrid pattern, the Mamba sizes and the layer shapes.  Exit 0 same, 1 different.
"""
import json
import sys

import h5py


def hf_and_ckpt(hf, ck):
    """(config.json, {name: float32 array} of the HF directory hf (st.py), model.h5 of iteration 0
    of the mgt checkpoint ck opened with h5py)."""
    import os
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import st
    cfg = json.load(open(hf + "/config.json"))
    t = {k: v.astype(np.float32) for k, v in st.load_float(hf).items()}
    return cfg, t, h5py.File(ck + "/iter_0000000/model.h5", "r")


def it(d, f):
    return "%s/iter_%07d/%s" % (d, int(open(d + "/latest_checkpointed_iteration.txt").read()), f)


def moe_layers(m):
    f = m["moe_layer_freq"]
    return [int(l % f == 0) for l in range(m["num_layers"])] if isinstance(f, int) else json.loads(f)


def main(argv):
    ca, cb, V, kind = argv[1], argv[2], int(argv[3]), argv[4]
    a, b = (h5py.File(it(d, "model.h5"), "r") for d in (ca, cb))
    names = [k for k in a if not k.startswith("optimizer.")]

    def rows(x, k):
        return x[k][:V] if k in ("embedding.word_embeddings.weight", "output_layer.weight") else x[k][...]
    diff = [k for k in names if k not in b or not (rows(a, k).shape == rows(b, k).shape and (rows(a, k) == rows(b, k)).all())]
    ma, mb = (json.load(open(it(d, "metadata.json")))["args"] for d in (ca, cb))
    if kind == "moe":
        ma["moe_layer_freq"], mb["moe_layer_freq"] = moe_layers(ma), moe_layers(mb)
        keys = [k for k in ma if (k.startswith("moe_router") or k in (
            "num_experts", "moe_ffn_hidden_size", "moe_layer_freq", "moe_shared_expert_intermediate_size",
            "moe_shared_expert_gate", "moe_aux_loss_coeff", "moe_latent_size")) and k != "moe_router_dtype"]
    else:
        keys = ["family", "hybrid_layer_pattern", "mamba_state_dim", "mamba_head_dim", "mamba_num_groups",
                "mamba_num_heads", "num_query_groups", "kv_channels", "ffn_hidden_size", "normalization",
                "position_embedding_type", "untie_embeddings_and_output_weights"]
    kd = [k for k in keys if ma.get(k) != mb.get(k)]
    print("# %d tensors, %d differ %s; %s arguments differing: %s" % (len(names), len(diff), diff[:3], kind, kd))
    return 1 if diff or kd or not names else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
