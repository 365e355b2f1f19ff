#!/bin/sh
# Three Megatron flags of the Llama 3 example scripts, each against an independent reference
# (TAP, run by prove):
#   --calculate-per-token-loss: the gradient of the global batch's token mean.  Two micro-batches
#     of 2 sequences with it equal one micro-batch of the same 4 sequences without it (whose mean
#     is that token mean), within rounding; the default (the mean of the micro-batches' means)
#     differs when their token counts differ (--eod-mask-loss on short documents); DP2 equals
#     one process;
#   --decoupled-lr: AdamW's first step moves each element by about its rate (|m/sqrt(v)| = 1):
#     the word embedding (tied output layer) by --decoupled-lr, every other tensor by --lr,
#     read from the debug dump's initial parameters and the checkpoint after one step;
#   --apply-layernorm-1p: norm weights start at 0 (debug dump) and are applied as 1 + w, so the
#     first iteration is bit for bit the plain model's (weights 1); a trained 1p checkpoint
#     converts to Hugging Face with norm weights 1 + w (read with tests/hf/st.py), and that
#     model, converted back without 1p, gives mgt-eval the same logits; a 1p checkpoint loaded
#     without the flag is refused.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
small_bpe || { echo "1..0 # SKIP the tokenizer files"; exit 0; }
# short documents of 3 to 40 words: every 64-token sequence holds end-of-document tokens, a
# different number in each, so --eod-mask-loss gives micro-batches of different token counts
$PY - <<'PY'
import json, random
random.seed(7)
words = "in the beginning god created heaven and earth was without form void darkness upon face of deep".split()
with open("docs.jsonl", "w") as f:
    for i in range(3000):
        f.write(json.dumps({"text": " ".join(random.choice(words) for _ in range(random.randint(3, 40)))}) + "\n")
PY
"$BIN/mgt-preprocess" --input docs.jsonl --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }

TRAIN="$BIN/mgt-train --model tiny-gpt2 $BPE --data-path kjv_text_document --split 969,30,1 --seq-length 64
 --lr 1e-3 --lr-warmup-iters 0 --lr-decay-style constant --eval-interval 0 --log-interval 1 --threads 1
 --device cpu --hidden-dropout 0 --attention-dropout 0 --eod-mask-loss --global-batch-size 4"
L() { # L FILE...: the runs' losses side by side, checked by the Python after it
	$PY - "$@"
}

ok "per-token loss, 2 micro-batches of 2" exits 0 $TRAIN --train-iters 4 --micro-batch-size 2 \
	--calculate-per-token-loss --metrics-file pt2.jsonl
ok "default loss, 1 micro-batch of 4" exits 0 $TRAIN --train-iters 4 --micro-batch-size 4 --metrics-file d4.jsonl
ok "default loss, 2 micro-batches of 2" exits 0 $TRAIN --train-iters 4 --micro-batch-size 2 --metrics-file d2.jsonl
ok "per-token over 2 micro-batches = the one micro-batch's mean (1e-5); the default differs" L pt2.jsonl d4.jsonl d2.jsonl <<'PY'
import json, sys
r = [[(o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f)) if "lm_loss" in o] for f in sys.argv[1:]]
pt, one, dflt = r
d = max(abs(a - b) / abs(b) for x, y in zip(pt, one) for a, b in zip(x, y))
e = max(abs(a[1] - b[1]) / abs(b[1]) for a, b in zip(dflt, one))
print("# per-token vs one micro-batch: %.2e; default vs one micro-batch (grad norm): %.2e" % (d, e))
assert len(pt) == len(one) == len(dflt) == 4 and d < 1e-5 and e > 1e-4, (pt, one, dflt)
PY
if command -v mpirun >/dev/null 2>&1; then
	ok "per-token loss under mpirun, DP2" exits 0 sh "$ROOT/tests/mpirun.sh" 2 $TRAIN --train-iters 4 \
		--micro-batch-size 1 --calculate-per-token-loss --metrics-file ptdp.jsonl
	ok "... equals one process (1e-5)" L ptdp.jsonl pt2.jsonl <<'PY'
import json, sys
a, b = [[(o["lm_loss"], o["grad_norm"]) for o in map(json.loads, open(f)) if "lm_loss" in o] for f in sys.argv[1:]]
d = max(abs(x - y) / abs(y) for p, q in zip(a, b) for x, y in zip(p, q))
print("# DP2 vs one process: %.2e" % d)
assert len(a) == 4 and d < 1e-5, (a, b)
PY
else
	skip "mpirun not installed"
fi

# --decoupled-lr: one step of AdamW, weight decay off
ok "decoupled lr: one step, saved" exits 0 $TRAIN --train-iters 1 --micro-batch-size 4 --lr 1e-4 \
	--decoupled-lr 3e-3 --decoupled-min-lr 1e-5 --weight-decay 0 --debug-dump dd.h5 --save ck --save-interval 1
ok "... the word embedding moved by 3e-3, the other tensors by 1e-4" $PY - <<'PY'
import h5py, numpy as np, glob
p0 = h5py.File("dd.h5", "r")["params"]
p1 = h5py.File("ck/iter_0000001/model.h5", "r")
for name, want in (("embedding.word_embeddings.weight", 3e-3), ("embedding.position_embeddings.weight", 1e-4),
                   ("decoder.layers.0.self_attention.linear_qkv.weight", 1e-4), ("decoder.layers.1.mlp.linear_fc2.weight", 1e-4)):
    d = np.abs(p1[name][...].astype(np.float64) - p0[name][...].astype(np.float64))
    moved = np.median(d[d > 0])
    print("# %s: median step %.3g (want %g)" % (name, moved, want))
    assert abs(moved / want - 1) < 0.02, (name, moved, want)
PY

# --apply-layernorm-1p
LL="$BIN/mgt-train --model tiny-llama --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 32
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 0 --lr-decay-style constant --eval-interval 0
 --log-interval 1 --threads 1 --device cpu --qk-layernorm"
ok "tiny-llama with q/k norms" exits 0 $LL --train-iters 3 --metrics-file n.jsonl --debug-dump n.h5
ok "... with --apply-layernorm-1p, saved" exits 0 $LL --train-iters 3 --metrics-file p.jsonl --debug-dump p.h5 \
	--apply-layernorm-1p --save p1 --save-interval 3
ok "1p: norm weights start at 0; iteration 1 bit for bit the plain model's; then within 1e-3" $PY - <<'PY'
import json, h5py, numpy as np
a = h5py.File("p.h5", "r")["params"]; b = h5py.File("n.h5", "r")["params"]
norms = [k for k in a if k.endswith("layernorm.weight") or k.endswith("layer_norm_weight")]
assert len(norms) >= 9 and all((a[k][...] == 0).all() and (b[k][...] == 1).all() for k in norms), norms
ga = h5py.File("p.h5", "r")["grads"]; gb = h5py.File("n.h5", "r")["grads"]
assert all((ga[k][...] == gb[k][...]).all() for k in ga), "iteration 1 gradients differ"
L = lambda f: [json.loads(l)["lm_loss"] for l in open(f) if "lm_loss" in l]
x, y = L("p.jsonl"), L("n.jsonl")
assert x[0] == y[0] and max(abs(u - v) / v for u, v in zip(x, y)) < 1e-3, (x, y)
PY
ok "1p checkpoint loaded without --apply-layernorm-1p: refused" sh -c "! $(echo $LL) --train-iters 4 --load p1 >/dev/null 2>$T/err"
ok "... naming the argument" err_has "apply_layernorm_1p"
ok "1p checkpoint -> Hugging Face" "$BIN/mgt-ckpt-convert" --quiet --load-dir p1 --save-dir hf1p
ok "... norm weights are 1 + w" env HFT="$ROOT/tests/hf" $PY - <<'PY'
import os, sys, glob, h5py, numpy as np
sys.path.insert(0, os.environ["HFT"])
import st
t = st.load_float("hf1p")
f = h5py.File("p1/iter_0000003/model.h5", "r")
pairs = {"model.norm.weight": "decoder.final_layernorm.weight",
         "model.layers.0.input_layernorm.weight": "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
         "model.layers.1.post_attention_layernorm.weight": "decoder.layers.1.mlp.linear_fc1.layer_norm_weight",
         "model.layers.0.self_attn.q_norm.weight": "decoder.layers.0.self_attention.q_layernorm.weight"}
for hf, mg in pairs.items():
    w = f[mg][...].astype(np.float32)
    assert np.abs(w).max() > 0 and (t[hf].astype(np.float32) == w + np.float32(1)).all(), hf
PY
ok "... back to mgt (no 1p)" "$BIN/mgt-ckpt-convert" --quiet --load-dir hf1p --save-dir back
TOKS="5 17 98 3 250 42 7 7 1 60 31 12 99 0 77 300"
ok "mgt-eval logits of the 1p checkpoint" exits 0 "$BIN/mgt-eval" --load p1 --tokens "$TOKS" --logits l1.npy
ok "... equal those of its conversion without 1p (1e-6)" sh -c "'$BIN/mgt-eval' --load back --tokens '$TOKS' \
	--logits l2.npy >/dev/null 2>&1 && $PY -c \"
import numpy as np; a, b = np.load('l1.npy'), np.load('l2.npy'); e = np.abs(a - b).max() / np.abs(b).max()
print('# max difference %.2e' % e); assert e < 1e-6\""
done_testing
