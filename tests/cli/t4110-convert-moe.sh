#!/bin/sh
# mgt-ckpt-convert with Mixture-of-Experts models: tiny random Mixtral, Qwen2-MoE (gated shared
# expert, norm_topk_prob false, decoder_sparse_step 2: dense layers 0 and 2) and Qwen3-MoE
# (norm_topk_prob true, mlp_only_layers [0]) from tests/hf/make_tiny.py, checked against
# independent references:
#   - HF -> mgt (TP 1, and TP 2 x PP 2) -> HF reproduces every tensor bit for bit and config.json;
#   - the arguments recorded (experts, top-k, pre-softmax, layer list, shared expert, aux coefficient);
#   - the layouts inside the mgt checkpoint, read with h5py from model.h5: each expert tensor one
#     dataset [E, rows, cols] with fc1 = [gate; up] per expert, the router, the shared expert;
#   - mgt's logits of the converted model (mgt-train --debug-dump, iteration 1, learning rate 0:
#     mgt-eval's logits path has no MoE) equal the float64 forward of tests/hf/ref_forward.py on the
#     original safetensors within 1e-5 relative, with the same experts chosen per token and layer;
#     a run with the wrong routing (Qwen2-MoE without --moe-router-pre-softmax) does not;
#   - expert parallelism: --target-expert-parallel-size writes each expert-parallel rank's experts
#     (dp file DDD = EP rank) and an EP 2 run under mpirun has the single process's loss;
#   - models trained by mgt (no config.json recorded): the family inferred, config.json written from
#     the arguments, the Hugging Face forward equal to mgt's, and back to mgt bit for bit; a
#     sigmoid router is refused (exit 3) naming mgt-train's flag;
#   - mgt-export --format safetensors follows the converter; GGUF refuses MoE (exit 2).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
HF=$ROOT/tests/hf
export HFT=$HF
DUMP="--mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 0
	--hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 0 --threads 2 --finetune"

# same_ckpt A B VOCAB: the parameters of the newest iterations of checkpoints A and B bit for bit and
# their MoE arguments (tests/hf/same_ckpt.py)
same_ckpt() { $PY "$HF/same_ckpt.py" "$1" "$2" "$3" moe; }

# back_same TRAINED HF_DIR OUT: HF_DIR converted to mgt as OUT holds TRAINED's parameters
back_same() {
	"$BIN/mgt-ckpt-convert" --quiet --load-dir "$2" --save-dir "$3" && same_ckpt "$1" "$3" 500
}

# compare HF_DIR DUMP.h5 TOL: ref_forward.py on the dump's tokens against its logits and routing;
# exit 1 when they differ, 2 when something is missing
compare() {
	$PY - "$@" <<'EOF'
import json, os, subprocess, sys
import h5py, numpy as np
hf, dump, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = os.path.dirname(dump) + "/"
try:
    f = h5py.File(dump, "r")
    toks = " ".join(str(int(t)) for t in f["batch/tokens"][0, 0, :])
    subprocess.check_call([sys.executable, os.environ["HFT"] + "/ref_forward.py", hf, "--tokens", toks,
                           "--logits", d + "ref.npy", "--routing", d + "route.json"])
    r = np.load(d + "ref.npy")
    m = f["iter1/logits"][0, :, :r.shape[1]].astype(np.float64)
    rt = json.load(open(d + "route.json"))
    got = {k: (f["iter1/moe/%s/experts" % k][0], f["iter1/moe/%s/probs" % k][0].astype(np.float64))
           for k in rt if k.startswith("layer_")}
except (OSError, KeyError, subprocess.CalledProcessError) as e:
    print("# %s" % e)
    sys.exit(2)
rel = np.linalg.norm(m - r) / np.linalg.norm(r)
print("# max |logit diff| %.3g, relative %.3g (limit %g), logits up to %.2f; smallest router logit gap at "
      "the k-th expert %.3g" % (abs(m - r).max(), rel, tol, abs(r).max(), rt["min_gap"]))
bad = not got
for k in sorted(got):
    e, p = got[k]
    same = bool((e == np.array(rt[k]["experts"])).all())
    dp = float(abs(p - np.array(rt[k]["probs"])).max())
    print("# %s: experts %s, max |prob diff| %.2g" % (k, "equal" if same else "DIFFER", dp))
    bad |= (not same) or dp > 1e-5
sys.exit(0 if rel <= tol and not bad else 1)
EOF
}

# layout HF_DIR CKPT: Megatron's MoE layouts in model.h5, read independently with h5py
layout() {
	$PY - "$@" <<'EOF'
import os, sys, numpy as np
sys.path.insert(0, os.environ["HFT"])
from same_ckpt import hf_and_ckpt
cfg, t, f = hf_and_ckpt(sys.argv[1], sys.argv[2])
fam = cfg["model_type"]
E = cfg.get("num_local_experts") or cfg["num_experts"]
seen = 0
for n in range(cfg["num_hidden_layers"]):
    L, D = "model.layers.%d." % n, "decoder.layers.%d." % n
    if D + "mlp.router.weight" not in f:
        assert (f[D + "mlp.linear_fc1.weight"][...] == np.concatenate([t[L + "mlp.gate_proj.weight"], t[L + "mlp.up_proj.weight"]])).all()
        assert (f[D + "mlp.linear_fc1.layer_norm_weight"][...] == t[L + "post_attention_layernorm.weight"]).all()
        continue
    seen += 1
    blk = L + ("block_sparse_moe." if fam == "mixtral" else "mlp.")
    nm = ("w1", "w3", "w2") if fam == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    assert (f[D + "mlp.router.weight"][...] == t[blk + "gate.weight"]).all(), "router"
    assert (f[D + "pre_mlp_layernorm.weight"][...] == t[L + "post_attention_layernorm.weight"]).all(), "norm"
    fc1, fc2 = f[D + "mlp.experts.linear_fc1.weight"], f[D + "mlp.experts.linear_fc2.weight"]
    assert fc1.shape[0] == E and fc2.shape[0] == E, "expert dimension first"
    for e in range(E):
        x = "%sexperts.%d." % (blk, e)
        assert (fc1[e] == np.concatenate([t[x + nm[0] + ".weight"], t[x + nm[1] + ".weight"]])).all(), "fc1 of %d" % e
        assert (fc2[e] == t[x + nm[2] + ".weight"]).all(), "fc2 of %d" % e
    if fam == "qwen2_moe":
        s = L + "mlp.shared_expert."
        assert (f[D + "mlp.shared_experts.linear_fc1.weight"][...] == np.concatenate([t[s + "gate_proj.weight"], t[s + "up_proj.weight"]])).all()
        assert (f[D + "mlp.shared_experts.linear_fc2.weight"][...] == t[s + "down_proj.weight"]).all()
        assert (f[D + "mlp.shared_experts.gate_weight"][...] == t[L + "mlp.shared_expert_gate.weight"]).all()
    assert not any(k.startswith(D + "mlp.experts.local_experts") for k in f), "no per-expert datasets"
print("# %d MoE layers checked" % seen)
assert seen
EOF
}

# args CKPT HF_DIR: the MoE arguments recorded against config.json
args_ok() {
	$PY - "$@" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1] + "/iter_0000000/metadata.json"))["args"]
c = json.load(open(sys.argv[2] + "/config.json"))
fam, L = c["model_type"], c["num_hidden_layers"]
want = {"num_experts": c.get("num_local_experts") or c.get("num_experts"), "moe_router_topk": c["num_experts_per_tok"],
        "moe_aux_loss_coeff": c["router_aux_loss_coef"], "moe_router_score_function": "softmax",
        "moe_router_pre_softmax": fam != "mixtral" and not c.get("norm_topk_prob", False),
        "moe_ffn_hidden_size": c["intermediate_size"] if fam == "mixtral" else c["moe_intermediate_size"],
        "moe_shared_expert_intermediate_size": c.get("shared_expert_intermediate_size"),
        "moe_shared_expert_gate": fam == "qwen2_moe", "add_qkv_bias": fam == "qwen2_moe",
        "qk_layernorm": fam == "qwen3_moe"}
pat = [1 if fam == "mixtral" or (l not in c.get("mlp_only_layers", []) and (l + 1) % c.get("decoder_sparse_step", 1) == 0)
       else 0 for l in range(L)]
want["moe_layer_freq"] = 1 if all(pat) else "[" + ",".join(map(str, pat)) + "]"
bad = {k: (a.get(k), v) for k, v in want.items() if a.get(k) != v}
print("# recorded: " + ", ".join("%s=%s" % (k, a.get(k)) for k in want))
sys.exit(1 if bad and print("# differ (recorded, expected): %s" % bad) is None else 0)
EOF
}

for spec in mixtral:bf16 qwen2_moe:bf16 qwen3_moe:fp16; do
	fam=${spec%%:*}; dt=${spec#*:}
	src=$T/$fam
	if ! $PY "$HF/make_tiny.py" "$fam" "$src" --dtype "$dt" >"$T/mk.log" 2>&1; then
		ok "$fam: make_tiny.py" false; sed 's/^/# /' "$T/mk.log"; continue
	fi
	for lay in 1x1 2x2; do
		ck=$T/ck-$fam-$lay back=$T/back-$fam-$lay
		ok "$fam: HF -> mgt at TP ${lay%x*} x PP ${lay#*x}" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" \
			--save-dir "$ck" --target-tensor-parallel-size "${lay%x*}" --target-pipeline-parallel-size "${lay#*x}"
		ok "$fam $lay: mgt -> HF" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$ck" --save-dir "$back"
		ok "$fam $lay: round trip bit for bit" $PY "$HF/st.py" compare "$src" "$back"
		ok "$fam $lay: config.json back" $PY -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" \
			"$src/config.json" "$back/config.json"
	done
	ck=$T/ck-$fam-2x2
	ok "$fam: shard files of every rank" test -f "$ck/iter_0000000/model_tp01_pp001_dp000_1.h5"
	ok "$fam: the MoE arguments recorded" args_ok "$ck" "$src"
	ok "$fam: Megatron's layouts (expert datasets [E, rows, cols], fc1 [gate; up], router, shared expert)" layout "$src" "$ck"
	# the TP 2 x PP 2 checkpoint, read by a TP 1 run
	rm -f "$T/d.h5"
	# --use-checkpoint-args takes the routing (top-k, pre-softmax) from the checkpoint, as Megatron's
	# load_args_from_checkpoint does
	"$BIN/mgt-train" --load "$ck" --use-checkpoint-args $DUMP --debug-dump "$T/d.h5" >"$T/tr.log" 2>&1 ||
		sed 's/^/# /' "$T/tr.log" | tail -5
	ok "$fam: logits and routing equal the float64 reference (routing from the checkpoint's args)" compare "$src" "$T/d.h5" 1e-5
done

# the test can fail: Qwen2-MoE routed without pre-softmax (top-k renormalized), from a copy of the
# checkpoint whose recorded arguments say so
rm -f "$T/d.h5"
cp -r "$T/ck-qwen2_moe-2x2" "$T/ck-renorm"
$PY -c "
import json, sys
f = sys.argv[1] + '/iter_0000000/metadata.json'
m = json.load(open(f)); m['args']['moe_router_pre_softmax'] = False; json.dump(m, open(f, 'w'))" "$T/ck-renorm"
$PY "$ROOT/tests/cli/ckpt_rehash.py" "$T/ck-renorm/iter_0000000"
"$BIN/mgt-train" --load "$T/ck-renorm" --use-checkpoint-args $DUMP --debug-dump "$T/d.h5" \
	>"$T/tr.log" 2>&1 || sed 's/^/# /' "$T/tr.log" | tail -5
ok "qwen2_moe routed with renormalized top-k differs from the reference" exits 1 compare "$T/qwen2_moe" "$T/d.h5" 1e-3
sed 's/^/# /' "$T/out"

# expert parallelism: TP 2 x PP 2 x EP 4 (8 experts: 2 per rank)
ck=$T/ck-ep
ok "qwen2_moe: HF -> mgt at TP 2 x PP 2 x EP 4" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/qwen2_moe" --save-dir "$ck" \
	--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --target-expert-parallel-size 4
ok "... expert-parallel rank 3 holds experts 6 and 7 of layer 3 (its TP 1 half), no dense rows" $PY -c "
import h5py, sys
f = h5py.File(sys.argv[1] + '/iter_0000000/model_tp01_pp001_dp003.h5', 'r')
d = f['decoder.layers.3.mlp.experts.linear_fc2.weight']
g = h5py.File(sys.argv[1] + '/iter_0000000/model_tp01_pp001_dp003_1.h5', 'r')['decoder.layers.3.mlp.experts.linear_fc1.weight']
print('# names:', sorted(f), 'offset', list(d.attrs['global_offset']), 'shape', d.shape)
sys.exit(not (sorted(f) == ['decoder.layers.3.mlp.experts.linear_fc1.weight', 'decoder.layers.3.mlp.experts.linear_fc2.weight']
    and list(d.attrs['global_offset']) == [6, 0, 24] and d.shape == (2, 64, 24)
    and list(g.attrs['global_offset']) == [6, 72, 0] and g.shape == (2, 24, 64)))" "$ck"
ok "... layout recorded" $PY -c "
import json, sys
l = json.load(open(sys.argv[1] + '/iter_0000000/metadata.json'))['layout']
sys.exit(not (l['expert_model_parallel_size'] == 4 and l['data_parallel_size'] == 4 and l['world_size'] == 16))" "$ck"
ok "... and back to HF bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$ck' --save-dir '$T/back-ep' &&
	$PY '$HF/st.py' compare '$T/qwen2_moe' '$T/back-ep'"
ok "an expert-parallel size that does not divide the experts: exit 2" exits 2 "$BIN/mgt-ckpt-convert" \
	--load-dir "$T/qwen2_moe" --save-dir "$T/bad" --target-expert-parallel-size 3
ok "... naming the flag" err_has "target-expert-parallel-size 3"
$PY "$HF/make_tiny.py" llama3 "$T/llama3" >/dev/null 2>&1
ok "... and one for a dense model: exit 2" exits 2 "$BIN/mgt-ckpt-convert" --load-dir "$T/llama3" --save-dir "$T/bad" \
	--target-expert-parallel-size 2
ok "... saying it has no experts" err_has "dense model"
if command -v mpirun >/dev/null 2>&1; then
	EPRUN="--load $ck --use-checkpoint-args --mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 2
		--train-iters 1 --lr 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 0 --threads 1
		--finetune"
	"$BIN/mgt-train" $EPRUN >"$T/ep1.log" 2>&1
	sh "$ROOT/tests/mpirun.sh" 2 "$BIN/mgt-train" $EPRUN --expert-model-parallel-size 2 >"$T/ep2.log" 2>&1
	l1=$(grep -o "lm loss: [^ ]*" "$T/ep1.log"); l2=$(grep -o "lm loss: [^ ]*" "$T/ep2.log")
	echo "# one process: $l1; EP 2 x DP 2 under mpirun: $l2"
	ok "the EP 4 checkpoint loads under EP 2 (mpirun) with the single process's loss" test -n "$l1" -a "$l1" = "$l2"
else
	skip "mpirun not found"
fi

# models trained by mgt: no config.json recorded; the family is inferred and config.json written
TR="--mock-data --vocab-size 500 --tokenizer-type NullTokenizer --seq-length 16 --micro-batch-size 1
	--global-batch-size 1 --train-iters 1 --lr 1e-3 --log-interval 1 --eval-interval 0 --threads 2 --model tiny-moe"
for spec in "mixtral:" "qwen2_moe:--add-qkv-bias --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --moe-router-pre-softmax --moe-layer-freq [0,1,0,1] --moe-ffn-hidden-size 32 --moe-router-topk 3" \
	"qwen3_moe:--qk-layernorm --moe-layer-freq 2 --moe-ffn-hidden-size 32"; do
	fam=${spec%%:*}; fl=${spec#*:}
	tr=$T/tr-$fam
	"$BIN/mgt-train" $TR $fl --save "$tr" >"$T/tr.log" 2>&1 || sed 's/^/# /' "$T/tr.log" | tail -5
	ok "trained $fam-like: mgt -> HF as $fam (inferred)" sh -c "'$BIN/mgt-ckpt-convert' --load-dir '$tr' --save-dir '$T/trhf-$fam' 2>'$T/err' &&
		grep -q '$fam, F32' '$T/err' && grep -q '\"model_type\": \"$fam\"' '$T/trhf-$fam/config.json'"
	rm -f "$T/d.h5"
	"$BIN/mgt-train" --load "$tr" --use-checkpoint-args --vocab-size 500 --tokenizer-type NullTokenizer $DUMP $fl \
		--debug-dump "$T/d.h5" >"$T/tr.log" 2>&1 || sed 's/^/# /' "$T/tr.log" | tail -5
	ok "... its Hugging Face forward (from the written config.json) equals mgt's" compare "$T/trhf-$fam" "$T/d.h5" 1e-5
	ok "... and it converts back to mgt with the same tensors and MoE arguments" back_same "$tr" "$T/trhf-$fam" "$T/trck-$fam"
done
"$BIN/mgt-train" $TR --moe-router-score-function sigmoid --moe-router-enable-expert-bias --save "$T/tr-sig" >"$T/tr.log" 2>&1
ok "a sigmoid router with expert bias: exit 3 (the input, not a flag of mgt-ckpt-convert)" exits 3 "$BIN/mgt-ckpt-convert" \
	--load-dir "$T/tr-sig" --save-dir "$T/bad"
ok "... naming the training flag as mgt-train's, without --help advice" sh -c "grep -q \"trained with mgt-train's --moe-router-score-function sigmoid\" '$T/err' && ! grep -q 'Try ' '$T/err'"
ok "--family qwen3_moe for a Mixtral-like model: exit 2" exits 2 "$BIN/mgt-ckpt-convert" --load-dir "$T/tr-mixtral" \
	--save-dir "$T/bad" --family qwen3_moe
ok "--family llama for an MoE model: exit 2" exits 2 "$BIN/mgt-ckpt-convert" --load-dir "$T/tr-mixtral" \
	--save-dir "$T/bad" --family llama
ok "no output left by the refusals" no_files "$T/bad" "$T"/bad.tmp.*

# bad Hugging Face input
cp -r "$T/qwen3_moe" "$T/noexp"
$PY - "$T/noexp/model.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); del h["model.layers.2.mlp.experts.5.up_proj.weight"]
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
open(p, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
EOF
ok "an expert tensor missing: exit 3" exits 3 "$BIN/mgt-ckpt-convert" --load-dir "$T/noexp" --save-dir "$T/bad"
ok "... naming it" err_has "model.layers.2.mlp.experts.5.up_proj.weight is missing"
cp -r "$T/qwen3_moe" "$T/topk"
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['num_experts_per_tok']=9; json.dump(c, open(p,'w'))" "$T/topk/config.json"
ok "num_experts_per_tok above num_experts: exit 2" exits 2 "$BIN/mgt-ckpt-convert" --load-dir "$T/topk" --save-dir "$T/bad"
ok "... naming the flag" err_has "moe-router-topk"
cp -r "$T/mixtral" "$T/noE"
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); del c['num_local_experts']; json.dump(c, open(p,'w'))" "$T/noE/config.json"
ok "Mixtral without num_local_experts: exit 3 naming the key" sh -c "
	'$BIN/mgt-ckpt-convert' --load-dir '$T/noE' --save-dir '$T/bad' 2>'$T/err'; test \$? = 3 && grep -q num_local_experts '$T/err'"
ok "no output left" no_files "$T/bad" "$T"/bad.tmp.*

# mgt-export: safetensors follows the converter; GGUF refuses MoE
ok "mgt-export --format safetensors of the Mixtral checkpoint" "$BIN/mgt-export" --quiet --format safetensors \
	--load-dir "$T/ck-mixtral-2x2" --output "$T/exp-st"
ok "... bit for bit the original" $PY "$HF/st.py" compare "$T/mixtral" "$T/exp-st"
ok "mgt-export to GGUF refuses an MoE checkpoint: exit 2" exits 2 "$BIN/mgt-export" --load-dir "$T/ck-mixtral-2x2" \
	--output "$T/m.gguf"
ok "... naming an expert dataset" err_has "mlp.experts.linear_fc1.weight: a Mixture-of-Experts"
ok "... and a Hugging Face MoE directory: exit 2" exits 2 "$BIN/mgt-export" --load-dir "$T/qwen2_moe" --output "$T/m.gguf"
ok "... naming the family" err_has "Mixture-of-Experts model (qwen2_moe)"
done_testing
