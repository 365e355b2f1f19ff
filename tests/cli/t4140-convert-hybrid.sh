#!/bin/sh
# mgt-ckpt-convert and mgt-export with hybrid models (Mamba-2, attention, MLP and MoE layers,
# --model-family hybrid): NemotronHForCausalLM and Mamba2ForCausalLM directories
# (tests/hf/make_tiny.py) and models trained by mgt-train, checked against independent references:
#   - HF -> mgt (TP 2 x PP 2; mamba2, one group, 4 layers: PP 2) -> HF reproduces every tensor bit for
#     bit (tests/hf/st.py compare) and config.json: nemotron_h M*M- (fp32; bf16 with
#     layers_block_type; tied at PP 2; attention_head_dim 32), ME*- (MoE: 4 experts top-2, shared expert, correction bias),
#     mamba2 MMMM;
#   - Megatron's names and layouts in the mgt checkpoint, read with h5py from model.h5: in_proj's
#     [z, x, B, C, dt] rows and conv1d_weight [CD, 4] as HF's [CD, 1, 4], linear_qkv interleaved per
#     query group from q/k/v_proj, each layer's backbone.layers.N.norm as its fused pre-norm, the MoE
#     router, expert bias, expert datasets [E, rows, cols] and shared experts;
#   - mgt's logits of the converted models (mgt-train --debug-dump, iteration 1, learning rate 0,
#     the TP 2 x PP 2 checkpoint read by a TP 1 run) equal the float64 forward of
#     tests/hf/ref_forward.py (transformers' conventions, written from the facts) on the original
#     safetensors within 1e-5 relative; the test can fail: the same reference with HF Mamba2's
#     full-width gated norm (--gated-norm full) differs from mgt's 2-group model, and the MoE model
#     with routed_scaling_factor 1 instead of 2.5 differs;
#   - latent MoE (moe_latent_size = mgt-train's --moe-latent-size; fc1_latent_proj / fc2_latent_proj
#     around the routed experts): an ME*E directory with latent 24 < h 64, HF -> mgt (TP 2 x PP 2)
#     with Megatron's names (mlp.fc1_latent_proj, experts [E, F, 24]) -> HF bit for bit with
#     config.json, mgt's logits equal ref_forward.py's within 1e-5; a model trained with latent 40
#     gets moe_latent_size and the projections, comes back bit for bit (parameters and arguments),
#     and the HF reference on the written directory equals mgt's logits;
#   - router groups (n_group / topk_group = mgt-train's --moe-router-num-groups / --moe-router-group-topk,
#     exact where k / topk_group is 2): 8 experts top-2 in 2 groups keeping 1, top-4 in 4 groups keeping
#     2, relu2 experts: HF -> mgt (TP 2) -> HF bit for bit with config.json, mgt's logits equal
#     ref_forward.py's group-limited routing (transformers: a group's score the sum of its top 2, -inf
#     elsewhere) within 1e-5 and not the reference without groups; a model trained with groups gets
#     n_group / topk_group and comes back bit for bit;
#   - models trained by mgt-train: tiny-hybrid (M*M-) gets config.json from its arguments
#     (nemotron_h: pattern, Mamba sizes, mlp_hidden_act gelu, time_step_min 0, untied) and comes back
#     to mgt at TP 1 and at TP 2 x PP 2 (the TP de-interleave of in_proj and conv1d) bit for bit; an
#     M*E- model with NemotronH's router (sigmoid, expert bias moved by 3 iterations, shared expert,
#     scale 2.5) gets the MoE keys, comes back bit for bit, and the HF reference on the written
#     directory equals mgt's logits;
#   - refusals (exit 3 unless noted, nothing written): an unknown pattern symbol, a pattern longer
#     than num_hidden_layers, MoE layers without the MoE keys, router groups with k / topk_group 4
#     (and a model trained with --moe-router-group-topk 3 of top-3, to HF), moe_latent_size 0,
#     norm_topk_prob false with top-2, an MLP activation mgt lacks (silu), a Mamba2 directory with
#     n_groups 2, a missing tensor, a softmax-routed MoE hybrid to HF, --family mamba2 for a model
#     with 2 groups (naming n_groups and pointing to nemotron_h) or with attention layers, a GGUF of
#     an MoE hybrid with GELU experts or with MLP layers beside MoE layers (llama.cpp's
#     nemotron_h_moe makes them all MoE layers) or trained with --moe-expert-capacity-factor, or of a
#     model with GELU MLP layers (exit 2);
#   - NemotronH's relu2 MLP (its default) is mgt-train's --squared-relu: converted and back bit for
#     bit; a tiny-hybrid trained with --squared-relu exports mlp_hidden_act relu2;
#   - mgt-export to GGUF, loaded by a real llama.cpp (node-llama-cpp 3.22.1, tests/hf/llamacpp,
#     whose llama.cpp, release tag v0.5.0, knows mamba2, nemotron_h and nemotron_h_moe): an all-Mamba model (6 heads: d_inner 96, not
#     2 h as llama.cpp's converter assumes) as architecture mamba2, an
#     M*MM*M model and an M-M*-M model (relu2 MLP layers) as nemotron_h (per-layer head_count_kv and feed_forward_length arrays, ssm_a =
#     -exp(A_log) [1, NH] in ggml order, ssm_conv1d {4, CD}, ssm_norm {DI/G, G}); llama.cpp's logits
#     within 1e-4 relative of ref_forward.py's and its greedy tokens equal (and not within 1e-2 of
#     the reference with a full-width gated norm: the file's groups are used).  The models are made
#     with time_step_min 0: NemotronH's torch_forward clamps dt below at time_step_min, which
#     Megatron and llama.cpp do not (facts, pitfall 3).  MoE hybrids as nemotron_h_moe (ME*EM, relu2
#     experts: 4 experts top-2, and 8 experts in 2 router groups keeping 1): the expert keys and the
#     stacked ffn_{up,down}_exps [E, rows, cols], llama.cpp's logits within 1e-4 of ref_forward.py's,
#     greedy tokens equal, and not within 1e-2 of the reference with routed_scaling_factor 1 or
#     without groups; an M*EM model trained by mgt-train: llama.cpp's logits within 1e-4 of mgt's
#     (--debug-dump), argmax equal, and the same trained with --moe-latent-size 40 (moe_latent_size,
#     ffn_latent_down {64, 40}, ffn_latent_up {40, 64}, experts {40, 48, 4}).  Skipped with a message
#     when npm is unreachable.
# Tiers (lib.sh): the quick tier runs everything above with f32 GGUF files; the full tier adds the
# f16 and q8_0 GGUF files of both (the same writer as f32 with other types) and a bf16 nemotron_h
# directory's round trip at TP 1 x PP 4 (one layer a stage).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
HF=$ROOT/tests/hf
LC=$HF/llamacpp
G=$SHARE/tokenizers/gpt2
export HFT=$HF
DUMP="--mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 0
	--hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 0 --threads 2 --finetune"
TOKS="5 17 998 3 250 42 7 7 1 600 31 12"

quiet() { "$@" >"$T/quiet.log" 2>&1 || { tail -3 "$T/quiet.log" | sed 's/^/# /'; return 1; }; }
cfg_same() { $PY -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" "$1" "$2"; }

# layout HF_DIR CKPT: Megatron's names and layouts in model.h5 against the HF tensors
layout() {
	$PY - "$@" <<'EOF'
import os, sys, numpy as np
sys.path.insert(0, os.environ["HFT"])
from same_ckpt import hf_and_ckpt
cfg, t, f = hf_and_ckpt(sys.argv[1], sys.argv[2])
pat = cfg.get("hybrid_override_pattern") or "M" * cfg["num_hidden_layers"]
if "layers_block_type" in cfg:
    pat = "".join({"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}[k] for k in cfg["layers_block_type"])
for n, sym in enumerate(pat):
    L, D = "backbone.layers.%d." % n, "decoder.layers.%d." % n
    if sym == "M":
        M = D + "mixer."
        assert (f[M + "in_proj.layer_norm_weight"][...] == t[L + "norm.weight"]).all(), "norm of %d" % n
        assert (f[M + "in_proj.weight"][...] == t[L + "mixer.in_proj.weight"]).all(), "in_proj of %d" % n
        assert (f[M + "conv1d_weight"][...] == t[L + "mixer.conv1d.weight"][:, 0, :]).all(), "conv of %d" % n
        for a, b in (("conv1d_bias", "conv1d.bias"), ("dt_bias", "dt_bias"), ("A_log", "A_log"), ("D", "D"),
                     ("norm.weight", "norm.weight"), ("out_proj.weight", "out_proj.weight")):
            assert (f[M + a][...] == t[L + "mixer." + b]).all(), "%s of %d" % (a, n)
    elif sym == "*":
        nq, ng = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        d = cfg["head_dim"]
        q, k, v = (t[L + "mixer.%s_proj.weight" % x] for x in "qkv")
        qkv = f[D + "self_attention.linear_qkv.weight"][...]
        qpg = nq // ng
        want = np.concatenate([np.concatenate([q[g * qpg * d:(g + 1) * qpg * d], k[g * d:(g + 1) * d],
                                               v[g * d:(g + 1) * d]]) for g in range(ng)])
        assert (qkv == want).all(), "linear_qkv of %d" % n
        assert (f[D + "self_attention.linear_qkv.layer_norm_weight"][...] == t[L + "norm.weight"]).all()
        assert (f[D + "self_attention.linear_proj.weight"][...] == t[L + "mixer.o_proj.weight"]).all()
    elif sym == "E":
        M = L + "mixer."
        assert (f[D + "pre_mlp_layernorm.weight"][...] == t[L + "norm.weight"]).all()
        assert (f[D + "mlp.router.weight"][...] == t[M + "gate.weight"]).all(), "router of %d" % n
        assert (f[D + "mlp.router.expert_bias"][...] == t[M + "gate.e_score_correction_bias"]).all()
        fc1, fc2 = f[D + "mlp.experts.linear_fc1.weight"], f[D + "mlp.experts.linear_fc2.weight"]
        for e in range(cfg["n_routed_experts"]):
            assert (fc1[e] == t[M + "experts.%d.up_proj.weight" % e]).all(), "expert %d fc1" % e
            assert (fc2[e] == t[M + "experts.%d.down_proj.weight" % e]).all(), "expert %d fc2" % e
        assert (f[D + "mlp.shared_experts.linear_fc1.weight"][...] == t[M + "shared_experts.up_proj.weight"]).all()
        assert (f[D + "mlp.shared_experts.linear_fc2.weight"][...] == t[M + "shared_experts.down_proj.weight"]).all()
        if cfg.get("moe_latent_size"):  # Megatron's mlp.fc{1,2}_latent_proj, whole tensors
            for i in (1, 2):
                assert (f[D + "mlp.fc%d_latent_proj.weight" % i][...] == t[M + "fc%d_latent_proj.weight" % i]).all()
    else:
        assert (f[D + "mlp.linear_fc1.layer_norm_weight"][...] == t[L + "norm.weight"]).all()
        assert (f[D + "mlp.linear_fc1.weight"][...] == t[L + "mixer.up_proj.weight"]).all()
        assert (f[D + "mlp.linear_fc2.weight"][...] == t[L + "mixer.down_proj.weight"]).all()
assert (f["decoder.final_norm.weight"][...] == t["backbone.norm_f.weight"]).all()
V = cfg["vocab_size"]
assert (f["embedding.word_embeddings.weight"][:V] == t["backbone.embeddings.weight"]).all()
assert (f["output_layer.weight"][:V] == t["lm_head.weight"]).all()
print("# %s: %d layers checked" % (pat, len(pat)))
EOF
}

# compare HF_DIR DUMP.h5 TOL [ref_forward flags]: ref_forward.py on the dump's tokens against its
# logits; exit 1 when they differ by more than TOL (relative), 2 when something is missing.
# TOL negative: they must differ by more than -TOL (a negative control).
compare() {
	$PY - "$@" <<'EOF'
import os, subprocess, sys
import h5py, numpy as np
hf, dump, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = os.path.dirname(os.path.abspath(dump)) + "/"
try:
    f = h5py.File(dump, "r")
    toks = " ".join(str(int(t)) for t in f["batch/tokens"][0, 0, :])
    subprocess.check_call([sys.executable, os.environ["HFT"] + "/ref_forward.py", hf, "--tokens", toks,
                           "--logits", d + "ref.npy"] + sys.argv[4:])
    r = np.load(d + "ref.npy")
    m = f["iter1/logits"][0, :, :r.shape[1]].astype(np.float64)
except (OSError, KeyError, subprocess.CalledProcessError) as e:
    print("# %s" % e)
    sys.exit(2)
rel = np.linalg.norm(m - r) / np.linalg.norm(r)
print("# max |logit diff| %.3g, relative %.3g (%s %g), logits up to %.2f" % (abs(m - r).max(), rel,
      "limit" if tol > 0 else "must exceed", abs(tol), abs(r).max()))
sys.exit(0 if (rel <= tol if tol > 0 else rel > -tol) else 1)
EOF
}

# same_ckpt A B VOCAB: the parameters of the newest iterations of checkpoints A and B bit for bit and
# their hybrid arguments (tests/hf/same_ckpt.py)
same_ckpt() { $PY "$HF/same_ckpt.py" "$1" "$2" "$3" hybrid; }

variant() { # variant SRC NAME PYTHON-ON-c: a copy of SRC with config.json edited
	rm -rf "$T/$2"; cp -r "$1" "$T/$2"
	$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $3; json.dump(c, open(p, 'w'))" "$T/$2/config.json"
	echo "$T/$2"
}
dump() { # dump CKPT OUT.h5: iteration 1 of a TP 1 run from CKPT (its arguments), learning rate 0
	rm -f "$2"
	"$BIN/mgt-train" --load "$1" --use-checkpoint-args $DUMP --debug-dump "$2" >"$T/tr.log" 2>&1 ||
		sed 's/^/# /' "$T/tr.log" | tail -5
}

# 1. Hugging Face directories: round trips, layouts, mgt's logits
for spec in nemotron_h:fp32:2:2: nemotron_h:bf16:2:2:--pattern-key=list nemotron_h:fp32:2:2:--pattern=ME*- \
	mamba2:fp32:1:2:--layers=4; do
	IFS=: read -r fam dt tp pp extra <<EOF
$spec
EOF
	name=$fam-$dt${extra:+-x}
	src=$T/$name
	if ! $PY "$HF/make_tiny.py" "$fam" "$src" --dtype "$dt" --time-step-min 0 $extra >"$T/mk.log" 2>&1; then
		ok "$name: make_tiny.py" false; sed 's/^/# /' "$T/mk.log"; continue
	fi
	ck=$T/ck-$name
	ok "$name: HF -> mgt at TP $tp x PP $pp" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" --save-dir "$ck" \
		--target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp"
	ok "$name: Megatron's names and layouts (in_proj, conv1d_weight [CD, 4], linear_qkv, fused norms)" layout "$src" "$ck"
	ok "$name: mgt -> HF" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$ck" --save-dir "$T/back-$name"
	ok "$name: round trip bit for bit" $PY "$HF/st.py" compare "$src" "$T/back-$name"
	ok "$name: config.json back" cfg_same "$src/config.json" "$T/back-$name/config.json"
	[ "$dt" = fp32 ] || continue
	dump "$ck" "$T/d.h5"
	ok "$name: mgt's logits (TP $tp x PP $pp checkpoint, TP 1 run) equal the float64 HF reference" compare "$src" "$T/d.h5" 1e-5
	if [ "$name" = nemotron_h-fp32 ]; then
		ok "$name: ...and not the reference with HF Mamba2's full-width gated norm (2 groups)" \
			compare "$src" "$T/d.h5" -1e-2 --gated-norm full
	fi
	if [ "$name" = nemotron_h-fp32-x ]; then # MoE: the routing's scale matters
		d=$(variant "$src" moe-scale1 "c['routed_scaling_factor'] = 1.0")
		ok "$name: ...and not the reference with routed_scaling_factor 1 instead of 2.5" compare "$d" "$T/d.h5" -1e-2
	fi
done
ok "nemotron_h tied (tie_word_embeddings, no lm_head): HF -> mgt (PP 2) -> HF bit for bit" sh -c "
	$PY '$HF/make_tiny.py' nemotron_h '$T/tied' --tie >/dev/null &&
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/tied' --save-dir '$T/ck-tied' --target-pipeline-parallel-size 2 &&
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-tied' --save-dir '$T/back-tied' && $PY '$HF/st.py' compare '$T/tied' '$T/back-tied'"
ok "nemotron_h with attention_head_dim 32 (older configs' head_dim; not h / heads): kv_channels 32, round trip" sh -c "
	$PY '$HF/make_tiny.py' nemotron_h '$T/ahd' --head-dim 32 >/dev/null &&
	$PY -c \"import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['attention_head_dim']=c.pop('head_dim'); json.dump(c,open(p,'w'))\" '$T/ahd/config.json' &&
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ahd' --save-dir '$T/ck-ahd' &&
	$PY -c \"import json,sys; sys.exit(json.load(open(sys.argv[1]))['args']['kv_channels'] != 32)\" '$T/ck-ahd/iter_0000000/metadata.json' &&
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-ahd' --save-dir '$T/back-ahd' && $PY '$HF/st.py' compare '$T/ahd' '$T/back-ahd'"
full_only "nemotron_h bf16 at TP 1 x PP 4" && {
	"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/nemotron_h-bf16-x" --save-dir "$T/ck-pp4" --target-pipeline-parallel-size 4 &&
		"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/ck-pp4" --save-dir "$T/back-pp4"
	ok "nemotron_h bf16: TP 1 x PP 4 round trip bit for bit" $PY "$HF/st.py" compare "$T/nemotron_h-bf16-x" "$T/back-pp4"
}

# router groups (NemotronH's n_group / topk_group: Megatron's group-limited routing): 8 experts in
# 2 groups of 4 keeping 1, top-2; 8 experts in 4 groups of 2 keeping 2, top-4 (k / topk_group = 2)
for spec in 2:1:2 4:2:4; do
	IFS=: read -r ng tg k <<EOF
$spec
EOF
	name=groups-$ng-$tg src=$T/groups-$ng-$tg
	$PY "$HF/make_tiny.py" nemotron_h "$src" --dtype fp32 --time-step-min 0 --pattern ME*E --experts 8 --topk "$k" \
		--n-group "$ng" --topk-group "$tg" --mlp-act relu2 >/dev/null 2>&1 || echo "# make_tiny $name failed"
	ok "$name: HF -> mgt at TP 2" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" --save-dir "$T/ck-$name" \
		--target-tensor-parallel-size 2
	ok "$name: --moe-router-num-groups $ng --moe-router-group-topk $tg" $PY -c "
import json, sys; a = json.load(open(sys.argv[1]))['args']
print('# %s' % {k: a.get(k) for k in ('moe_router_num_groups', 'moe_router_group_topk', 'moe_router_topk')})
sys.exit((a.get('moe_router_num_groups'), a.get('moe_router_group_topk'), a.get('moe_router_topk')) != ($ng, $tg, $k))" \
		"$(ls "$T"/ck-$name/iter_*/metadata.json 2>/dev/null | head -1)"
	ok "$name: mgt -> HF bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-$name' --save-dir '$T/back-$name' &&
		$PY '$HF/st.py' compare '$src' '$T/back-$name'"
	ok "$name: config.json back (n_group, topk_group)" cfg_same "$src/config.json" "$T/back-$name/config.json"
	dump "$T/ck-$name" "$T/d.h5"
	ok "$name: mgt's logits equal the float64 HF reference (group-limited routing)" compare "$src" "$T/d.h5" 1e-5
	d=$(variant "$src" "$name-nogroups" "c['n_group'] = 1; c['topk_group'] = 1")
	ok "$name: ...and not the reference without groups" compare "$d" "$T/d.h5" -1e-2
done

# 2. a model trained by mgt-train
ok "train tiny-hybrid (M*M-) for 2 iterations" quiet "$BIN/mgt-train" --model tiny-hybrid --mock-data --vocab-size 512 \
	--tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 2 --threads 2 --save "$T/tr" \
	--save-interval 2 --log-interval 2
ok "trained: mgt -> HF (family inferred)" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/tr" --save-dir "$T/tr-hf"
ok "trained: config.json from the arguments" $PY - "$T/tr-hf/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "M*M-",
        "num_hidden_layers": 4, "hidden_size": 64, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
        "ssm_state_size": 16, "expand": 2, "conv_kernel": 4, "chunk_size": 128, "use_conv_bias": True,
        "use_bias": False, "mamba_hidden_act": "silu", "mlp_hidden_act": "gelu", "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "time_step_min": 0.0, "vocab_size": 512}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
print("# differing (got, want): %s" % bad)
sys.exit(1 if bad or abs(c["layer_norm_epsilon"] - 1e-5) > 1e-12 else 0)
EOF
ok "trained: the HF tensors" sh -c "$PY '$HF/st.py' ls '$T/tr-hf' >'$T/ls.txt' && grep -q '^backbone.layers.0.mixer.conv1d.weight F32 \[192, 1, 4\]' '$T/ls.txt' &&
	grep -q '^backbone.layers.1.mixer.k_proj.weight F32 \[32, 64\]' '$T/ls.txt' && grep -q '^lm_head.weight F32 \[512, 64\]' '$T/ls.txt'"
for tgt in 1:1 2:2; do
	tp=${tgt%:*} pp=${tgt#*:}
	ok "trained: HF -> mgt at TP $tp x PP $pp" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/tr-hf" --save-dir "$T/tr-back$tp" \
		--target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp"
	ok "trained: ...holds the trained parameters bit for bit (TP $tp x PP $pp)" same_ckpt "$T/tr" "$T/tr-back$tp" 512
done
ok "trained: the TP 2 x PP 2 checkpoint back to HF bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/tr-back2' \
	--save-dir '$T/tr-hf2' && $PY '$HF/st.py' compare '$T/tr-hf' '$T/tr-hf2'"

# a hybrid MoE model trained by mgt-train (NemotronH's router: sigmoid, expert bias, shared expert, scaling)
MOE="--hybrid-layer-pattern M*E- --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48
	--moe-shared-expert-intermediate-size 64 --moe-router-topk-scaling-factor 2.5 --moe-router-load-balancing-type none"
ok "train tiny-hybrid as M*E- with NemotronH's router (3 iterations: the expert bias moves)" quiet "$BIN/mgt-train" \
	--model tiny-hybrid $MOE --moe-router-score-function sigmoid --moe-router-enable-expert-bias --mock-data --vocab-size 512 \
	--tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 3 --threads 2 --save "$T/trm" \
	--save-interval 3 --log-interval 3
ok "trained MoE: mgt -> HF" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/trm" --save-dir "$T/trm-hf"
ok "trained MoE: config.json's MoE keys" $PY -c "
import json, sys
c = json.load(open(sys.argv[1]))
want = dict(hybrid_override_pattern='M*E-', n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
            moe_shared_expert_intermediate_size=64, routed_scaling_factor=2.5, norm_topk_prob=True, n_group=1, topk_group=1)
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
print('# differing (got, want): %s' % bad); sys.exit(1 if bad else 0)" "$T/trm-hf/config.json"
ok "trained MoE: HF -> mgt holds the trained parameters (expert bias included) bit for bit" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trm-hf' --save-dir '$T/trm-back' --target-tensor-parallel-size 2 &&
	$PY '$HF/same_ckpt.py' '$T/trm' '$T/trm-back' 512 hybrid && $PY '$HF/same_ckpt.py' '$T/trm' '$T/trm-back' 512 moe"
dump "$T/trm" "$T/d.h5"
ok "trained MoE: the HF reference on the written directory equals mgt's logits" compare "$T/trm-hf" "$T/d.h5" 1e-5
ok "train the same with router groups (2 of 2 experts, 1 kept, top-2: k / group-topk 2)" quiet "$BIN/mgt-train" \
	--model tiny-hybrid $MOE --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
	--moe-router-num-groups 2 --moe-router-group-topk 1 --squared-relu --mock-data --vocab-size 512 \
	--tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 1 --threads 2 --save "$T/trg" \
	--save-interval 1 --log-interval 1
ok "trained groups: mgt -> HF: n_group 2, topk_group 1, mlp_hidden_act relu2" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trg' --save-dir '$T/trg-hf' && $PY -c \"
import json, sys; c = json.load(open('$T/trg-hf/config.json'))
sys.exit((c['n_group'], c['topk_group'], c['mlp_hidden_act']) != (2, 1, 'relu2'))\""
ok "trained groups: HF -> mgt holds the trained parameters and the groups" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trg-hf' --save-dir '$T/trg-back' &&
	$PY '$HF/same_ckpt.py' '$T/trg' '$T/trg-back' 512 hybrid && $PY '$HF/same_ckpt.py' '$T/trg' '$T/trg-back' 512 moe"
dump "$T/trg" "$T/d.h5"
ok "trained groups: the HF reference on the written directory equals mgt's logits" compare "$T/trg-hf" "$T/d.h5" 1e-5
ok "train with groups NemotronH cannot hold (4 groups of 1, 3 kept, top-3: k / group-topk 1)" quiet "$BIN/mgt-train" \
	--model tiny-hybrid $MOE --moe-router-topk 3 --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
	--moe-router-num-groups 4 --moe-router-group-topk 3 --mock-data --vocab-size 512 \
	--tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 1 --threads 2 --save "$T/trg3" \
	--save-interval 1 --log-interval 1
ok "train the same with a softmax router" quiet "$BIN/mgt-train" --model tiny-hybrid $MOE --mock-data --vocab-size 512 \
	--tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 1 --threads 2 --save "$T/trs" \
	--save-interval 1 --log-interval 1

# latent MoE (moe_latent_size: NemotronHMoE's fc1_latent_proj / fc2_latent_proj, Megatron-Core's
# --moe-latent-size): a directory made with 24 < hidden 64, and a model trained with 40
lat=$T/nemotron_h-latent
if $PY "$HF/make_tiny.py" nemotron_h "$lat" --dtype fp32 --time-step-min 0 --pattern 'ME*E' --latent 24 >"$T/mk.log" 2>&1; then
	ok "latent: HF -> mgt at TP 2 x PP 2" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$lat" --save-dir "$T/ck-lat" \
		--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
	ok "latent: Megatron's names and layouts (mlp.fc1_latent_proj, fc2_latent_proj, experts on the latent side)" \
		layout "$lat" "$T/ck-lat"
	ok "latent: mgt -> HF, round trip bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-lat' \
		--save-dir '$T/back-lat' && $PY '$HF/st.py' compare '$lat' '$T/back-lat'"
	ok "latent: config.json back (moe_latent_size 24)" cfg_same "$lat/config.json" "$T/back-lat/config.json"
	dump "$T/ck-lat" "$T/d.h5"
	ok "latent: mgt's logits (TP 2 x PP 2 checkpoint, TP 1 run) equal the float64 HF reference" compare "$lat" "$T/d.h5" 1e-5
else
	ok "latent: make_tiny.py" false; sed 's/^/# /' "$T/mk.log"
fi
ok "train tiny-hybrid as M*E- with NemotronH's router and --moe-latent-size 40" quiet "$BIN/mgt-train" \
	--model tiny-hybrid $MOE --moe-router-score-function sigmoid --moe-router-enable-expert-bias --squared-relu \
	--moe-latent-size 40 --mock-data --vocab-size 512 --tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 \
	--train-iters 3 --threads 2 --save "$T/trl" --save-interval 3 --log-interval 3
ok "trained latent: mgt -> HF: moe_latent_size 40, the projections' shapes" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trl' --save-dir '$T/trl-hf' &&
	$PY -c \"import json, sys; sys.exit(json.load(open('$T/trl-hf/config.json')).get('moe_latent_size') != 40)\" &&
	$PY '$HF/st.py' ls '$T/trl-hf' >'$T/ls.txt' && grep -q '^backbone.layers.2.mixer.fc1_latent_proj.weight F32 \[40, 64\]' '$T/ls.txt' &&
	grep -q '^backbone.layers.2.mixer.fc2_latent_proj.weight F32 \[64, 40\]' '$T/ls.txt' &&
	grep -q '^backbone.layers.2.mixer.experts.0.up_proj.weight F32 \[48, 40\]' '$T/ls.txt'"
ok "trained latent: HF -> mgt (TP 2) holds the trained parameters and arguments bit for bit" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trl-hf' --save-dir '$T/trl-back' --target-tensor-parallel-size 2 &&
	$PY '$HF/same_ckpt.py' '$T/trl' '$T/trl-back' 512 hybrid && $PY '$HF/same_ckpt.py' '$T/trl' '$T/trl-back' 512 moe"
dump "$T/trl" "$T/d.h5"
ok "trained latent: the HF reference on the written directory equals mgt's logits" compare "$T/trl-hf" "$T/d.h5" 1e-5

# 3. refusals
refused() { # refused CODE WHAT TEXT CMD...: exit CODE, the message has TEXT, no output
	code=$1 what=$2 text=$3; shift 3
	ok "$what: exit $code" exits "$code" "$@" --save-dir "$T/no"
	ok "$what: message names it" err_has "$text"
	ok "$what: no output" no_files "$T/no" "$T"/no.tmp.*
}
refused 3 "a softmax-routed MoE hybrid to HF" "a softmax router (NemotronH's is sigmoid)" \
	"$BIN/mgt-ckpt-convert" --load-dir "$T/trs"
NH=$T/nemotron_h-fp32
d=$(variant "$NH" badsym "c['hybrid_override_pattern'] = 'M*X-'")
refused 3 "pattern symbol X" "hybrid_override_pattern\": symbol 'X'" "$BIN/mgt-ckpt-convert" --load-dir "$d"
d=$(variant "$NH" longpat "c['hybrid_override_pattern'] = 'M*M-M'")
refused 3 "pattern longer than num_hidden_layers" "has 5 layers but \"num_hidden_layers\" is 4" "$BIN/mgt-ckpt-convert" --load-dir "$d"
d=$(variant "$NH" moe "c['hybrid_override_pattern'] = 'M*ME'")
refused 3 "an MoE layer without the MoE keys" "no \"n_routed_experts\" (the pattern has MoE layers)" "$BIN/mgt-ckpt-convert" --load-dir "$d"
d=$(variant "$T/groups-4-2" moe-groups "c['topk_group'] = 1")
refused 3 "router groups with num_experts_per_tok / topk_group 4" "\"topk_group\" 1 with top-4: .*only num_experts_per_tok / topk_group = 2" \
	"$BIN/mgt-ckpt-convert" --load-dir "$d"
refused 3 "a model trained with --moe-router-group-topk 3 of top-3 to HF" "nemotron_h cannot hold.*--moe-router-group-topk" \
	"$BIN/mgt-ckpt-convert" --load-dir "$T/trg3"
d=$(variant "$T/nemotron_h-latent" moe-latent0 "c['moe_latent_size'] = 0")
refused 3 "moe_latent_size 0" "\"moe_latent_size\": expected a positive size or null" "$BIN/mgt-ckpt-convert" --load-dir "$d"
d=$(variant "$T/nemotron_h-fp32-x" moe-nonorm "c['norm_topk_prob'] = False")
refused 3 "MoE without norm_topk_prob (top-2)" "\"norm_topk_prob\" false with top-2" "$BIN/mgt-ckpt-convert" --load-dir "$d"
r2=$(variant "$NH" relu2 "del c['mlp_hidden_act']")
ok "NemotronH's default relu2 MLP converts (mgt-train's --squared-relu)" "$BIN/mgt-ckpt-convert" --quiet --load-dir "$r2" \
	--save-dir "$T/relu2-ck"
ok "  its arguments say squared_relu" $PY -c "
import json, sys; a = json.load(open(sys.argv[1]))['args']
sys.exit(not a.get('squared_relu'))" "$(ls "$T"/relu2-ck/iter_*/metadata.json 2>/dev/null | head -1)"
ok "  and back to HF bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/relu2-ck' --save-dir '$T/relu2-hf' &&
	$PY '$HF/st.py' compare '$r2' '$T/relu2-hf'"
ok "tiny-hybrid trained with --squared-relu" quiet "$BIN/mgt-train" --model tiny-hybrid --squared-relu --mock-data \
	--vocab-size 512 --tokenizer-type NullTokenizer --seq-length 32 --micro-batch-size 2 --train-iters 1 --threads 2 \
	--save "$T/trq" --save-interval 1 --log-interval 1
ok "  to HF: mlp_hidden_act relu2" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/trq' --save-dir '$T/trq-hf' &&
	$PY -c \"import json; assert json.load(open('$T/trq-hf/config.json'))['mlp_hidden_act'] == 'relu2'\""
d=$(variant "$NH" silu-mlp "c['mlp_hidden_act'] = 'silu'")
refused 3 "an MLP activation mgt does not have" "\"mlp_hidden_act\": \"silu\" is not supported" "$BIN/mgt-ckpt-convert" --load-dir "$d"
d=$(variant "$T/mamba2-fp32-x" m2groups "c['n_groups'] = 2")
refused 3 "Mamba2 with n_groups 2" "\"n_groups\" 2: transformers' Mamba2 normalizes" "$BIN/mgt-ckpt-convert" --load-dir "$d"
rm -rf "$T/missing"; cp -r "$NH" "$T/missing"
$PY -c "
import json, struct, sys
p = sys.argv[1] + '/model.safetensors'
b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
h['backbone.layers.2.mixer.dt_bias_renamed'] = h.pop('backbone.layers.2.mixer.dt_bias')
t = json.dumps(h).encode(); t += b' ' * (-len(t) % 8)
open(p, 'wb').write(struct.pack('<Q', len(t)) + t + data)" "$T/missing"
refused 3 "a missing tensor" "tensor backbone.layers.2.mixer.dt_bias is missing" "$BIN/mgt-ckpt-convert" --load-dir "$T/missing"
"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/mamba2-fp32-x" --save-dir "$T/ck-m2g1"
ok "an all-Mamba model of one group: --family mamba2 and --family nemotron_h both hold it" sh -c "
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-m2g1' --save-dir '$T/m2-as-nh' --family nemotron_h &&
	'$BIN/mgt-ckpt-convert' --quiet --load-dir '$T/ck-m2g1' --save-dir '$T/m2-as-m2' --family mamba2 &&
	$PY '$HF/st.py' compare '$T/mamba2-fp32-x' '$T/m2-as-m2' && $PY '$HF/st.py' compare '$T/m2-as-nh' '$T/m2-as-m2'"
refused 3 "--family mamba2 with attention layers" "mamba2 cannot hold this hybrid model" \
	"$BIN/mgt-ckpt-convert" --load-dir "$T/tr" --family mamba2
$PY "$HF/make_tiny.py" nemotron_h "$T/nh-mmm" --dtype fp32 --pattern MMM --groups 2 >/dev/null 2>&1 &&
	"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/nh-mmm" --save-dir "$T/ck-g2" || echo "# the 2-group all-Mamba model failed"
refused 3 "--family mamba2 with 2 groups" "n_groups would be 2 (--mamba-num-groups).*--family nemotron_h" \
	"$BIN/mgt-ckpt-convert" --load-dir "$T/ck-g2" --family mamba2
refused 2 "GGUF of an MoE hybrid with GELU experts" "trained with GELU experts (llama.cpp's nemotron_h_moe experts compute squared ReLU: --squared-relu)" \
	sh -c "'$BIN/mgt-export' --load-dir '$T/trm' --output '$T/no.gguf'; r=\$?; [ -e '$T/no.gguf' ] && exit 9; exit \$r" --
$PY "$HF/make_tiny.py" nemotron_h "$T/nh-moe-mlp" --dtype fp32 --pattern ME*- --mlp-act relu2 >/dev/null 2>&1 &&
	"$BIN/mgt-ckpt-convert" --quiet --load-dir "$T/nh-moe-mlp" --save-dir "$T/ck-moe-mlp" || echo "# making ME*- failed"
refused 2 "GGUF of an MoE hybrid with MLP layers" "MLP layers ('-') beside MoE layers" \
	sh -c "'$BIN/mgt-export' --load-dir '$T/ck-moe-mlp' --output '$T/no.gguf'; r=\$?; [ -e '$T/no.gguf' ] && exit 9; exit \$r" --
ok "train M*EM with relu2 experts and --moe-expert-capacity-factor 1" quiet "$BIN/mgt-train" --model tiny-hybrid \
	$MOE --hybrid-layer-pattern M*EM --moe-router-score-function sigmoid --moe-router-enable-expert-bias --squared-relu \
	--moe-expert-capacity-factor 1.0 --mock-data --vocab-size 512 --tokenizer-type NullTokenizer --seq-length 32 \
	--micro-batch-size 2 --train-iters 1 --threads 2 --save "$T/trc" --save-interval 1 --log-interval 1
refused 2 "GGUF of an MoE hybrid that drops tokens" "trained with --moe-expert-capacity-factor (token dropping" \
	sh -c "'$BIN/mgt-export' --load-dir '$T/trc' --output '$T/no.gguf'; r=\$?; [ -e '$T/no.gguf' ] && exit 9; exit \$r" --
refused 2 "GGUF of a model with GELU MLP layers" "llama.cpp's nemotron_h computes with squared ReLU" \
	sh -c "'$BIN/mgt-export' --load-dir '$T/tr' --output '$T/no.gguf'; r=\$?; [ -e '$T/no.gguf' ] && exit 9; exit \$r" --

# 4. GGUF through llama.cpp
if sh "$LC/setup.sh" >"$T/setup.log" 2>&1; then have_lc=1; else have_lc=0; fi
gguf_cmp() { # gguf_cmp GGUF HF_DIR TOL [ref_forward flags]: llama.cpp's logits and greedy tokens against
	# ref_forward.py; TOL negative: the logits must differ by more than -TOL (a negative control)
	_gg=$1 _gd=$2 _gtol=$3; shift 3 # not ok()'s d
	node "$LC/run.mjs" "$_gg" --tokens "$TOKS" --n 4 >"$T/lc.json" 2>"$T/lc.err" || { sed 's/^/# /' "$T/lc.err" | tail -3; return 1; }
	$PY "$HF/ref_forward.py" "$_gd" --tokens "$TOKS" --logits "$T/ref.npy" --greedy 4 "$@" >"$T/ref.json" || return 1
	$PY - "$T/lc.json" "$T/ref.npy" "$T/ref.json" "$_gtol" <<'EOF'
import json, sys, numpy as np
j = json.load(open(sys.argv[1])); r = np.load(sys.argv[2]); g = json.load(open(sys.argv[3]))["greedy"]
l = np.array(j["logits"], dtype=np.float64)
e = np.linalg.norm(l - r) / np.linalg.norm(r)
tol = float(sys.argv[4])
print("# llama.cpp vs reference: max |logit diff| %.3g, relative %.3g (%s %g); greedy %s, reference %s"
      % (abs(l - r).max(), e, "limit" if tol > 0 else "must exceed", abs(tol), j["greedy"], g))
if tol < 0:
    sys.exit(0 if e > -tol else 1)
sys.exit(0 if e <= tol and (tol > 1e-3 or j["greedy"] == g) else 1)
EOF
}
meta_check() { # meta_check GGUF ARCH PATTERN NH P N G FFN: the header as @huggingface/gguf reads it
	node "$LC/run.mjs" "$1" --meta --full >"$T/meta.json" 2>"$T/meta.err" || { sed 's/^/# /' "$T/meta.err"; return 1; }
	$PY - "$T/meta.json" "$2" "$3" "$4" "$5" "$6" "$7" "$8" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1])); arch, pat = sys.argv[2], sys.argv[3]
NH, P, N, G, FFN = map(int, sys.argv[4:9])
md = {k: v["value"] for k, v in m["metadata"].items()}
sh = {t["name"]: t["shape"] for t in m["tensorInfos"]}
DI, CD = NH * P, NH * P + 2 * G * N
want = {"general.architecture": arch, arch + ".ssm.conv_kernel": 4, arch + ".ssm.inner_size": DI,
        arch + ".ssm.state_size": N, arch + ".ssm.time_step_rank": NH, arch + ".ssm.group_count": G,
        arch + ".block_count": len(pat)}
if arch == "nemotron_h":
    want[arch + ".attention.head_count_kv"] = [2 if c == "*" else 0 for c in pat]
    want[arch + ".feed_forward_length"] = [FFN if c == "-" else 0 for c in pat]
bad = {k: (md.get(k), v) for k, v in want.items() if md.get(k) != v}
m0 = pat.index("M")
shapes = {"blk.%d.ssm_conv1d.weight" % m0: [4, CD], "blk.%d.ssm_a" % m0: [1, NH], "blk.%d.ssm_d" % m0: [1, NH],
          "blk.%d.ssm_norm.weight" % m0: [DI // G, G], "blk.%d.ssm_dt.bias" % m0: [NH],
          "blk.%d.ssm_in.weight" % m0: [64, 2 * DI + 2 * G * N + NH]}
bad.update({k: (sh.get(k), v) for k, v in shapes.items() if sh.get(k) != v})
print("# differing (got, want): %s" % bad)
sys.exit(1 if bad else 0)
EOF
}
# mamba2 with 6 heads: d_inner 96, not 2h; nemotron_h with relu2 MLP layers (mgt's --squared-relu)
for spec in nemotron_h:M*MM*M:2:8:relu2 mamba2:MMM:1:6:relu2 nemotron_h:M-M*-M:2:8:relu2; do
	IFS=: read -r fam pat grp nh act <<EOF
$spec
EOF
	tag=$fam-$(echo "$pat" | tr '*-' 'am') src=$T/g-$tag
	$PY "$HF/make_tiny.py" "$fam" "$src" --dtype fp32 --vocab 50257 --pattern "$pat" --layers 3 --groups "$grp" \
		--mamba-heads "$nh" --time-step-min 0 --mlp-act "$act" >/dev/null 2>&1 && cp "$G/vocab.json" "$G/merges.txt" "$src/" &&
		"$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" --save-dir "$T/gck-$tag" || echo "# making $tag failed"
	arch=$fam
	for type in f32 f16 q8_0; do
		[ "$type" = f32 ] || full_only "$tag: mgt-export --outtype $type" || continue
		ok "$tag: mgt-export --outtype $type (architecture $arch)" "$BIN/mgt-export" --quiet --load-dir "$T/gck-$tag" \
			--output "$T/$tag-$type.gguf" --outtype "$type"
		if [ $have_lc = 0 ]; then skip "$tag $type: llama.cpp ($(tail -1 "$T/setup.log"))"; continue; fi
		tol=$(case $type in f32) echo 1e-4;; f16) echo 1e-2;; *) echo 6e-2;; esac)
		ok "$tag $type: llama.cpp's logits and greedy tokens as the reference's" gguf_cmp "$T/$tag-$type.gguf" "$src" "$tol"
	done
	[ $have_lc = 1 ] && [ "$grp" -gt 1 ] && ok "$tag: ...and not the reference with a full-width gated norm ($grp groups)" \
		gguf_cmp "$T/$tag-f32.gguf" "$src" -1e-2 --gated-norm full
	[ $have_lc = 1 ] && ok "$tag: GGUF header (ssm keys, per-layer arrays, tensor shapes)" \
		meta_check "$T/$tag-f32.gguf" "$arch" "$pat" "$nh" 16 16 "$grp" \
			"$($PY -c "import json; print(json.load(open('$src/config.json')).get('intermediate_size', 0))")"
done

# MoE hybrids as llama.cpp's nemotron_h_moe: ME*EM (4 experts top-2, shared expert, expert bias,
# scale 2.5, relu2) and the same with 8 experts in 2 router groups keeping 1
moe_meta() { # moe_meta GGUF E K GROUPS: the MoE keys and tensor shapes as @huggingface/gguf reads them
	node "$LC/run.mjs" "$1" --meta --full >"$T/meta.json" 2>"$T/meta.err" || { sed 's/^/# /' "$T/meta.err"; return 1; }
	$PY - "$T/meta.json" "$2" "$3" "$4" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1])); E, K, G = map(int, sys.argv[2:5])
md = {k: v["value"] for k, v in m["metadata"].items()}
sh = {t["name"]: t["shape"] for t in m["tensorInfos"]}
a = "nemotron_h_moe."
want = {"general.architecture": "nemotron_h_moe", a + "expert_count": E, a + "expert_used_count": K,
        a + "expert_feed_forward_length": 48, a + "expert_shared_feed_forward_length": 96, a + "expert_shared_count": 1,
        a + "expert_weights_norm": True, a + "expert_weights_scale": 2.5, a + "feed_forward_length": [0, 48, 0, 48, 0],
        a + "attention.head_count_kv": [0, 0, 2, 0, 0]}
if G > 1:
    want.update({a + "expert_group_count": G, a + "expert_group_used_count": 1})
bad = {k: (md.get(k), v) for k, v in want.items() if md.get(k) != v}
if G == 1 and a + "expert_group_count" in md:
    bad["group keys"] = md[a + "expert_group_count"]
shapes = {"blk.1.ffn_gate_inp.weight": [64, E], "blk.1.exp_probs_b.bias": [E], "blk.1.ffn_up_exps.weight": [64, 48, E],
          "blk.1.ffn_down_exps.weight": [48, 64, E], "blk.3.ffn_up_shexp.weight": [64, 96],
          "blk.3.ffn_down_shexp.weight": [96, 64]}
bad.update({k: (sh.get(k), v) for k, v in shapes.items() if sh.get(k) != v})
print("# differing (got, want): %s" % bad)
sys.exit(1 if bad else 0)
EOF
}
for spec in 4:1 8:2; do
	E=${spec%:*} ng=${spec#*:} tag=nemotron_h_moe-$spec src=$T/g-moe-$E
	tag=nemotron_h_moe-E$E-g$ng
	$PY "$HF/make_tiny.py" nemotron_h "$src" --dtype fp32 --vocab 50257 --pattern ME*EM --experts "$E" --n-group "$ng" \
		--topk-group 1 --time-step-min 0 --mlp-act relu2 >/dev/null 2>&1 && cp "$G/vocab.json" "$G/merges.txt" "$src/" &&
		"$BIN/mgt-ckpt-convert" --quiet --load-dir "$src" --save-dir "$T/gck-$tag" || echo "# making $tag failed"
	for type in f32 f16 q8_0; do
		[ "$type" = f32 ] || full_only "$tag: mgt-export --outtype $type" || continue
		ok "$tag: mgt-export --outtype $type (architecture nemotron_h_moe)" "$BIN/mgt-export" --quiet \
			--load-dir "$T/gck-$tag" --output "$T/$tag-$type.gguf" --outtype "$type"
		if [ $have_lc = 0 ]; then skip "$tag $type: llama.cpp ($(tail -1 "$T/setup.log"))"; continue; fi
		tol=$(case $type in f32) echo 1e-4;; f16) echo 1e-2;; *) echo 6e-2;; esac)
		ok "$tag $type: llama.cpp's logits and greedy tokens as the reference's" gguf_cmp "$T/$tag-$type.gguf" "$src" "$tol"
	done
	[ $have_lc = 1 ] || continue
	ok "$tag: GGUF header (expert keys, per-layer arrays, stacked expert shapes)" moe_meta "$T/$tag-f32.gguf" "$E" 2 "$ng"
	d=$(variant "$src" "$tag-scale1" "c['routed_scaling_factor'] = 1.0")
	ok "$tag: ...and not the reference with routed_scaling_factor 1 (expert_weights_scale is used)" \
		gguf_cmp "$T/$tag-f32.gguf" "$d" -1e-2
	if [ "$ng" -gt 1 ]; then
		d=$(variant "$src" "$tag-nogroups" "c['n_group'] = 1; c['topk_group'] = 1")
		ok "$tag: ...and not the reference without router groups" gguf_cmp "$T/$tag-f32.gguf" "$d" -1e-2
	fi
done
# a hybrid MoE model trained by mgt-train (M*EM, relu2 experts, expert bias moved by 3 iterations):
# llama.cpp's logits of its GGUF against mgt's own (--debug-dump), argmax equal at every position
ok "train tiny-hybrid M*EM with NemotronH's router and --squared-relu (GPT-2 vocabulary)" quiet "$BIN/mgt-train" \
	--model tiny-hybrid --hybrid-layer-pattern M*EM --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 \
	--moe-shared-expert-intermediate-size 64 --moe-router-topk-scaling-factor 2.5 --moe-router-load-balancing-type none \
	--moe-router-score-function sigmoid --moe-router-enable-expert-bias --squared-relu --mock-data $GPT2 \
	--seq-length 32 --micro-batch-size 2 --train-iters 3 --threads 2 --save "$T/trz" --save-interval 3 --log-interval 3
ok "trained M*EM: mgt-export (f32)" "$BIN/mgt-export" --quiet --load-dir "$T/trz" --output "$T/trz.gguf" --outtype f32
dump "$T/trz" "$T/dz.h5"
lc_vs_mgt() { # lc_vs_mgt GGUF DUMP.h5 TOL: llama.cpp's logits on the dump's tokens against mgt's
	$PY - "$@" <<'EOF'
import json, os, subprocess, sys
import h5py, numpy as np
f = h5py.File(sys.argv[2], "r")
toks = " ".join(str(int(t)) for t in f["batch/tokens"][0, 0, :])
out = subprocess.run(["node", os.environ["HFT"] + "/llamacpp/run.mjs", sys.argv[1], "--tokens", toks],
                     capture_output=True, text=True)
if out.returncode:
    print("# %s" % out.stderr[-300:]); sys.exit(1)
l = np.array(json.loads(out.stdout)["logits"], dtype=np.float64)
m = f["iter1/logits"][0, :, :l.shape[1]].astype(np.float64)
rel = np.linalg.norm(l - m) / np.linalg.norm(m)
same = (l.argmax(1) == m.argmax(1)).all()
print("# llama.cpp vs mgt: max |logit diff| %.3g, relative %.3g (limit %s), logits up to %.2f, argmax equal: %s"
      % (abs(l - m).max(), rel, sys.argv[3], abs(m).max(), same))
sys.exit(0 if rel <= float(sys.argv[3]) and same else 1)
EOF
}
[ $have_lc = 1 ] && ok "trained M*EM: llama.cpp's logits equal mgt's" lc_vs_mgt "$T/trz.gguf" "$T/dz.h5" 1e-4
# the same with --moe-latent-size 40 (llama.cpp: nemotron_h_moe.moe_latent_size, blk.N.ffn_latent_down
# {64, 40} before the experts of width 40, ffn_latent_up {40, 64} after them)
ok "train tiny-hybrid M*EM with --moe-latent-size 40 (GPT-2 vocabulary)" quiet "$BIN/mgt-train" \
	--model tiny-hybrid --hybrid-layer-pattern M*EM --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 \
	--moe-shared-expert-intermediate-size 64 --moe-router-topk-scaling-factor 2.5 --moe-router-load-balancing-type none \
	--moe-router-score-function sigmoid --moe-router-enable-expert-bias --squared-relu --moe-latent-size 40 --mock-data \
	$GPT2 --seq-length 32 --micro-batch-size 2 --train-iters 3 --threads 2 --save "$T/trzl" --save-interval 3 --log-interval 3
ok "trained latent M*EM: mgt-export (f32)" "$BIN/mgt-export" --quiet --load-dir "$T/trzl" --output "$T/trzl.gguf" --outtype f32
dump "$T/trzl" "$T/dzl.h5"
lat_meta() { # lat_meta GGUF: moe_latent_size 40 and the latent and expert shapes
	node "$LC/run.mjs" "$1" --meta --full >"$T/meta.json" 2>"$T/meta.err" || { sed 's/^/# /' "$T/meta.err"; return 1; }
	$PY - "$T/meta.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
md = {k: v["value"] for k, v in m["metadata"].items()}
sh = {t["name"]: t["shape"] for t in m["tensorInfos"]}
want = {"blk.2.ffn_latent_down.weight": [64, 40], "blk.2.ffn_latent_up.weight": [40, 64],
        "blk.2.ffn_up_exps.weight": [40, 48, 4], "blk.2.ffn_down_exps.weight": [48, 40, 4], "blk.2.ffn_gate_inp.weight": [64, 4],
        "blk.2.ffn_up_shexp.weight": [64, 64]}
bad = {k: (sh.get(k), v) for k, v in want.items() if sh.get(k) != v}
lat = md.get("nemotron_h_moe.moe_latent_size")
print("# moe_latent_size %s; differing (got, want): %s" % (lat, bad))
sys.exit(1 if bad or lat != 40 else 0)
EOF
}
if [ $have_lc = 1 ]; then
	ok "trained latent M*EM: GGUF header (moe_latent_size 40, the projections' and experts' shapes)" lat_meta "$T/trzl.gguf"
	ok "trained latent M*EM: llama.cpp's logits equal mgt's" lc_vs_mgt "$T/trzl.gguf" "$T/dzl.h5" 1e-4
fi

done_testing
