#!/bin/sh
# tests/cli/megatron_ckpt_mutate.sh [WORKDIR]: break one layout rule at a time in a copy of
# megatron_ckpt.py and run its selftest; every line but the two marked "equivalent" must report
# failures (tests/cli/megatron_ckpt.md, "Mutation checks").  Needs bin/mgt-train.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-$(mktemp -d)}
mkdir -p "$W"
run() {
	name=$1; shift
	/usr/bin/python3 - "$ROOT/tests/cli/megatron_ckpt.py" "$W/m.py" "$@" <<'PY' || { echo "$name: pattern not found"; return; }
import sys
s = open(sys.argv[1]).read()
old, new = sys.argv[3], sys.argv[4]
assert old in s
open(sys.argv[2], "w").write(s.replace(old, new, 1))
PY
	r=$(/usr/bin/python3 "$W/m.py" selftest --keep "$W" --mgt-bin "$ROOT/bin" 2>&1 | grep -E "^FAIL|layouts failed" | tr '\n' ';' | cut -c1-200)
	echo "$name: $r"
}
run start-pad-64-to-1 'PARAM_START_ALIGN = 64' 'PARAM_START_ALIGN = 1'
run bucket-end-lcm-dp128-to-dp '    div = math.lcm(dp, 128)
    pad_start' '    div = dp
    pad_start'
run no-shared-embedding-bucket-dcp '            shared = {"embedding.word_embeddings.weight", "output_layer.weight"} if (m.tied and o.pp > 1 and not is_exp) else set()
            index, buckets, unp' '            shared = set()
            index, buckets, unp'
run "no-shared-embedding-bucket-legacy (equivalent)" '        if m.tied and o.pp > 1 and not is_exp:
            # language_module.py' '        if False:
            # language_module.py'
run glu-plain-row-split '        return np.concatenate([x[r * n:(r + 1) * n], x[F + r * n:F + (r + 1) * n]], 0)' '        return x[2 * r * n:2 * (r + 1) * n]'
run dist-glu-v-fragment-at-2r+1 '        pieces = [((t * n,) + rest, x[:n]), ((tp * n + t * n,) + rest, x[n:])]' '        pieces = [((2 * t * n,) + rest, x[:n]), ((2 * t * n + n,) + rest, x[n:])]'
run order-qkv-before-proj '    "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",
    "self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
    "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",' '    "self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
    "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
    "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",'
run vpp-offset-swapped '    off = c * (L // vp) + p * n' '    off = p * (L // pp) + c * n'
run "no-decay-without-bias-rule (equivalent)" '    return local_name.endswith(".bias") or len(shape) == 1' '    return len(shape) == 1'
run buffer-forward-order '    for name, numel in params[::-1]:' '    for name, numel in params:'
run qkv-strided-split '        n = x.shape[0] // tp
        return x[r * n:(r + 1) * n]' '        return x[r::tp]'
run expert-global-index '                    out.append(("decoder.layers.%d.mlp.experts.local_experts.%d.%s" % (i, j, s), g, ep_rank * per + j))' '                    out.append(("decoder.layers.%d.mlp.experts.local_experts.%d.%s" % (i, j, s), g, j * ep + ep_rank))'
