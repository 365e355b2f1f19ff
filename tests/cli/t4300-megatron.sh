#!/bin/sh
# Megatron-LM's own checkpoints (issue 49, mgt-megatron(5)): read in place by mgt-ckpt-convert,
# mgt-train --load / --pretrained-checkpoint and mgt-eval, written by mgt-ckpt-convert
# --save-format torch.  The Megatron checkpoints are made here, not downloaded: tests/cli/
# megatron_ckpt.py (Debian's python3-torch 1.13) writes an mgt checkpoint's state as Megatron-Core
# would have saved it (legacy torch files; torch_dist's .metadata and .distcp items with PyTorch's
# DCP classes), and reads Megatron checkpoints back independently (torch.load).
#   - tiny-llama (GQA, SwiGLU, RMSNorm, RoPE) trained in bf16 to iteration 5 by mgt, written as
#     Megatron's torch format at TP 2 x PP 2 with the distributed optimizer (DP 2: its padding) and
#     as torch_dist at TP 2 x PP 2 with the distributed optimizer's dp_reshardable buckets;
#     mgt-ckpt-convert of each to mgt (TP 2 x PP 2) holds every tensor of the original bit for
#     bit: the fp32 main weights, both Adam moments (tests/cli/ckpt_state.py), and the progress;
#   - mgt-train --load of each Megatron directory goes on to iteration 11 with the losses and
#     grad norms of the run resumed from mgt's own checkpoint, text-identical; the load says in one
#     line that PyTorch's RNG states do not carry over;
#   - Megatron-FSDP's fsdp_dtensor (fixture: 3 ranks of uneven dim-0 row ranges, fp32 main weights,
#     SwiGLU's fc1 as _w/_v, no common.pt: args and progress as BYTE_IO items): mgt-ckpt-convert
#     of it equals that of the torch_dist fixture bit for bit (weights, both moments, progress),
#     mgt-train --load of it has the losses of mgt's own resume, mgt-eval its loss;
#   - Megatron to Hugging Face (--save-format hf, all three formats) equals mgt to Hugging Face of the original, and
#     mgt-eval's loss of the Megatron directory equals the original's;
#   - mgt to Megatron (--save-format torch, TP 2 x PP 2, fp32 and bf16; --save-format torch_dist):
#     the files read by the independent reader (torch.load; .metadata unpickled with PyTorch's class
#     names) hold every weight of the original (bf16: rounded to nearest even) and the
#     non-distributed optimizer's state (FP32Optimizer's, Float16OptimizerWithFloat16Params' with
#     the fp32 main weights; torch_dist's optimizer.state.* keys) equal to the original's; mgt reads them back bit for bit and a run
#     resumed from them has the losses of mgt's own resume;
#   - bad input, each exit 6 naming the file and key, nothing written: a truncated zip, a pickle
#     with an unknown opcode, a missing rank file, a key the model does not have, an integer
#     tensor where a weight is; args with multi-latent attention exit 2 naming the field;
#     fsdp_dtensor: a chunk cut short, a .distcp file missing (each naming key and file), args of
#     a plain torch_dcp directory, a key the model does not have.
# Full tier: the fixtures' own selftest (t4150) covers their layouts; here the full tier adds
# tiny-moe (EP 2, chained optimizers, plain and distributed), tiny-gpt2 (tied embeddings at PP 2,
# VP 2, the local spec), tiny-llama with q/k norms and a qkv bias (Qwen's; all formats, the
# distributed optimizer), fsdp_dtensor's experts (TEGroupedMLP's weight<j>, SequentialMLP's
# local_experts.<j>, global indices) and tied GPT-2, and the --pretrained-checkpoint runs.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
MG="$PY $ROOT/tests/cli/megatron_ckpt.py"
STATE="$PY $ROOT/tests/cli/ckpt_state.py"
if ! $PY -c "import torch, h5py" 2>/dev/null; then
	skip "python3-torch and python3-h5py are needed for the Megatron fixtures"
	done_testing
fi
TRAIN="--mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length 32 --micro-batch-size 2
	--global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-interval 0 --threads 2 --device cpu"
quiet() { "$@" >"$T/quiet.log" 2>&1 || { tail -3 "$T/quiet.log" | sed 's/^/# /'; return 1; }; }
# train NAME MODEL FLAGS...: to iteration 11, metrics NAME.jsonl
train() { _n=$1 _m=$2; shift 2; quiet "$BIN/mgt-train" --model "$_m" $TRAIN --train-iters 11 --metrics-file "$_n.jsonl" "$@"; }

# ---- the original run and its Megatron copies ----
ok "tiny-llama bf16 to iteration 5 (mgt)" quiet "$BIN/mgt-train" --model tiny-llama $TRAIN --bf16 --train-iters 5 \
	--save ck --save-interval 5
ok "resumed from mgt's checkpoint to iteration 11" train ref tiny-llama --bf16 --load ck
ok "Megatron torch TP2 x PP2, distributed optimizer, DP 2 (fixture)" quiet $MG to-megatron --mgt ck --out mt \
	--format torch --tp 2 --pp 2 --dp 2 --dist-opt --bf16
ok "Megatron torch_dist TP2 x PP2, dp_reshardable buckets (fixture)" quiet $MG to-megatron --mgt ck --out md \
	--format torch_dist --tp 2 --pp 2 --dp 2 --dist-opt --bf16
ok "Megatron-FSDP fsdp_dtensor, 3 ranks of uneven dim-0 rows, SwiGLU's _w/_v (fixture)" quiet $MG to-megatron --mgt ck \
	--out mf --format fsdp_dtensor --dp 3 --bf16
for f in mt md mf; do
	ok "$f to mgt at TP2 x PP2" quiet "$BIN/mgt-ckpt-convert" --load-dir $f --save-dir $f.mgt \
		--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
	ok "  every weight, moment and the progress bit for bit" $STATE ck $f.mgt
	ok "mgt-train --load $f goes on to iteration 11" train run-$f tiny-llama --bf16 --load $f
	ok "  losses and grad norms of mgt's own resume, text-identical" losses_exact ref run-$f
	ok "  the RNG line" grep -q "PyTorch RNG states (rng_state) do not carry over" quiet.log
done

ok "fsdp_dtensor's conversion equals torch_dist's bit for bit (weights, both moments, progress)" $STATE md.mgt mf.mgt
ok "  the converter's line names fsdp_dtensor" sh -c "'$BIN/mgt-ckpt-convert' --load-dir mf --save-dir mf.mgt1 2>&1 | \
	grep -q 'a Megatron-LM fsdp_dtensor checkpoint, iteration 5, 27 tensors with Adam moments'"
ok "--use-checkpoint-args takes the model from the Megatron args" quiet "$BIN/mgt-train" --load mt --use-checkpoint-args \
	--mock-data --micro-batch-size 2 --global-batch-size 4 --train-iters 6 --lr 1e-3 --threads 2 --device cpu

# ---- Hugging Face and mgt-eval ----
ok "mgt to HF (the original)" quiet "$BIN/mgt-ckpt-convert" --load-dir ck --save-dir hf-ref
ok "Megatron torch to HF" quiet "$BIN/mgt-ckpt-convert" --load-dir mt --save-dir hf-mt --save-format hf
ok "  equal bit for bit" $PY "$ROOT/tests/hf/st.py" compare hf-ref hf-mt
ok "Megatron torch_dist to HF" quiet "$BIN/mgt-ckpt-convert" --load-dir md --save-dir hf-md --save-format hf
ok "  equal bit for bit" $PY "$ROOT/tests/hf/st.py" compare hf-ref hf-md
ok "Megatron fsdp_dtensor to HF" quiet "$BIN/mgt-ckpt-convert" --load-dir mf --save-dir hf-mf --save-format hf
ok "  equal bit for bit" $PY "$ROOT/tests/hf/st.py" compare hf-ref hf-mf
EVAL="--tokenizer-type NullTokenizer --vocab-size 512 --mock-data --seq-length 32 --micro-batch-size 2 --eval-iters 2
	--split 949,50,1 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --threads 2"
ok "mgt-eval loss of the original" quiet "$BIN/mgt-eval" loss --load ck $EVAL
grep "loss" quiet.log | sed 's/\[.*\]//' >eval-ref.txt
ok "mgt-eval loss of the Megatron torch_dist directory" quiet "$BIN/mgt-eval" loss --load md $EVAL
grep "loss" quiet.log | sed 's/\[.*\]//' >eval-md.txt
ok "  the same loss" cmp -s eval-ref.txt eval-md.txt
ok "mgt-eval loss of the Megatron fsdp_dtensor directory" quiet "$BIN/mgt-eval" loss --load mf $EVAL
grep "loss" quiet.log | sed 's/\[.*\]//' >eval-mf.txt
ok "  the same loss" cmp -s eval-ref.txt eval-mf.txt

# ---- mgt to Megatron ----
# moments_equal NPZ: the independent reader's Adam state of every tensor equals ck's
moments_equal() {
	$PY - "$@" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File("ck/iter_%07d/model.h5" % int(open("ck/latest_checkpointed_iteration.txt").read()), "r")
z = np.load(sys.argv[1])
bad = [k for k in f if k.startswith("optimizer.") and (k not in z or not np.array_equal(z[k].view(np.uint32), f[k][()].view(np.uint32)))]
bad += [k for k in f if not k.startswith("optimizer.") and not np.array_equal(z["optimizer.state.fp32_param." + k].view(np.uint32), f[k][()].view(np.uint32))]
print("# %d differ: %s" % (len(bad), bad[:3]))
sys.exit(bool(bad))
EOF
}
ok "mgt to Megatron torch TP2 x PP2, fp32" quiet "$BIN/mgt-ckpt-convert" --load-dir ck --save-dir out32 \
	--save-format torch --dtype fp32 --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
ok "mgt to Megatron torch TP2 x PP2, bf16" quiet "$BIN/mgt-ckpt-convert" --load-dir ck --save-dir out16 \
	--save-format torch --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
ok "  the independent reader (torch.load) reads both" sh -c "$MG from-megatron --dir out32 --out out32.npz && \
	$MG from-megatron --dir out16 --out out16.npz"
# weights_equal NPZ ROUND: every weight of ck in NPZ, equal (ROUND bf16: rounded to nearest even)
weights_equal() {
	$PY - "$@" <<'EOF'
import sys, h5py, numpy as np
it = int(open("ck/latest_checkpointed_iteration.txt").read())
f = h5py.File("ck/iter_%07d/model.h5" % it, "r")
z = np.load(sys.argv[1])
def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
bad = 0
for k in f:
    if k.startswith("optimizer."): continue
    want = f[k][()]
    want = bf16(want) if sys.argv[2] == "bf16" else want
    got = z[k].astype(np.float32) if k in z else None
    if got is None or got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        print("# %s differs" % k); bad += 1
extra = [k for k in z.files if not k.startswith("optimizer.") and k not in f]
if extra: print("# extra tensors %s" % extra[:5]); bad += 1
sys.exit(bad != 0)
EOF
}
ok "mgt to Megatron torch_dist (bf16)" quiet "$BIN/mgt-ckpt-convert" --load-dir ck --save-dir outd --save-format torch_dist
ok "  the independent reader (.metadata unpickled with PyTorch's class names, torch.load of each item)" \
	quiet $MG from-megatron --dir outd --out outd.npz
ok "  every weight rounded to nearest even" weights_equal outd.npz bf16
ok "  the Adam moments and fp32 main weights (optimizer.state.*) equal the original's" moments_equal outd.npz
ok "  mgt reads it back: weights, moments and progress bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet \
	--load-dir outd --save-dir outd.mgt && $STATE ck outd.mgt"
ok "  fp32: every weight bit for bit" weights_equal out32.npz fp32
ok "  bf16: every weight rounded to nearest even" weights_equal out16.npz bf16
ok "  mgt reads the fp32 files back" quiet "$BIN/mgt-ckpt-convert" --load-dir out32 --save-dir out32.mgt
ok "    weights, moments and progress bit for bit (FP32Optimizer's state)" $STATE ck out32.mgt
ok "  mgt reads the bf16 files back" quiet "$BIN/mgt-ckpt-convert" --load-dir out16 --save-dir out16.mgt
ok "    the fp32 main weights, moments and progress bit for bit (Float16Optimizer's state)" $STATE ck out16.mgt
ok "  the independent reader's Adam moments and fp32 main weights equal the original's" moments_equal out16.npz
ok "mgt to Megatron torch with the distributed optimizer's state" quiet "$BIN/mgt-ckpt-convert" --load-dir ck \
	--save-dir outdo --save-format torch --use-distributed-optimizer --target-tensor-parallel-size 2 \
	--target-pipeline-parallel-size 2
ok "  the independent reader reads it" quiet $MG from-megatron --dir outdo --out outdo.npz
ok "  distrib_optim.pt's moments and fp32 main weights equal the original's" moments_equal outdo.npz
ok "  mgt reads it back bit for bit" sh -c "'$BIN/mgt-ckpt-convert' --quiet --load-dir outdo --save-dir outdo.mgt && \
	$STATE ck outdo.mgt"
ok "mgt-train --load of the bf16 files goes on to iteration 11" train run-out16 tiny-llama --bf16 --load out16
ok "  losses and grad norms of mgt's own resume, text-identical" losses_exact ref run-out16

# ---- bad input ----
# bad KIND SRC DST: a copy of Megatron directory SRC damaged as KIND
bad() {
	rm -rf "$3" && cp -r "$2" "$3" && $PY - "$@" <<'EOF'
import sys, os, io, zipfile, torch
kind, src, dst = sys.argv[1:4]
f = dst + "/iter_0000005/mp_rank_01_001/model_optim_rng.pt"
if kind == "mla": f = dst + "/iter_0000005/mp_rank_00_000/model_optim_rng.pt"
if kind == "truncated":
    n = os.path.getsize(f); open(f, "r+b").truncate(n // 2)
elif kind == "opcode":
    zin = zipfile.ZipFile(f); items = [(i, zin.read(i.filename)) for i in zin.infolist()]; zin.close()
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for i, b in items:
            z.writestr(i.filename, b"\x80\x02\xfe." if i.filename.endswith("data.pkl") else b)
elif kind == "missing":
    import shutil; shutil.rmtree(os.path.dirname(f))
else:
    sd = torch.load(f, map_location="cpu")
    if kind == "key": sd["model"]["decoder.layers.1.self_attention.linear_qkv.extra.weight"] = torch.zeros(2)
    if kind == "dtype":
        k = "decoder.layers.1.mlp.linear_fc2.weight"; sd["model"][k] = sd["model"][k].to(torch.int64)
    if kind == "mla": sd["args"].multi_latent_attention = True
    torch.save(sd, f)
EOF
}
for c in "truncated|6|mp_rank_01_001/model_optim_rng.pt" "opcode|6|unknown opcode" "missing|6|mp_rank_01_001" \
	"key|6|linear_qkv.extra.weight" "dtype|6|int64" "mla|2|multi_latent_attention"; do
	k=${c%%|*} rest=${c#*|}; code=${rest%%|*} msg=${rest#*|}
	ok "bad input: $k" bad $k mt bad-$k
	ok "  exit $code" exits $code "$BIN/mgt-ckpt-convert" --load-dir bad-$k --save-dir out-$k
	ok "  the message names $msg" err_has "$msg"
	ok "  nothing written" no_files out-$k
done

# fsdp_dtensor: a chunk cut short, a .distcp file missing, a .metadata-only directory whose args are
# not Megatron-FSDP's (plain torch_dcp), a key the model does not have, checkpoint_version 2
dbad() {
	rm -rf "$3" && cp -r "$2" "$3" && $PY - "$@" <<'EOF'
import sys, os, pickle
sys.path.insert(0, sys.argv[4])
import megatron_ckpt as M
kind, src, dst = sys.argv[1:4]
d = dst + "/iter_0000005"
if kind == "dchunk":
    f = d + "/__1_0.distcp"; n = os.path.getsize(f); open(f, "r+b").truncate(n // 2)
elif kind == "dfile":
    os.remove(d + "/__2_0.distcp")
else:
    with open(d + "/.metadata", "rb") as f:
        md = M.MetadataUnpickler(f).load()
    if kind in ("dcp", "ver"):  # an item rewritten at the end of its file
        key = [k for k in md.storage_data if k.fqn == ("args" if kind == "dcp" else "checkpoint_version")][0]
        si = md.storage_data[key]
        blob = open(os.path.join(d, si.relative_path), "rb").read()[si.offset:si.offset + si.length]
        v = M.torch_load_bytes(blob)
        if kind == "dcp":
            v.ckpt_format = "torch_dcp"; v.use_megatron_fsdp = False
        else:
            v = 2.0
        new = M.torch_save_bytes(v)
        with open(os.path.join(d, si.relative_path), "ab") as f:
            pos = f.tell(); f.write(new)
        md.storage_data[key] = M.DCP_FS._StorageInfo(si.relative_path, pos, len(new))
    else:  # key: a copy of a tensor's entry under a name the model lacks
        k = "model.module.decoder.layers.1.mlp.linear_fc3.weight"
        md.state_dict_metadata[k] = md.state_dict_metadata["model.module.decoder.layers.1.mlp.linear_fc2.weight"]
    with M._dcp_modules(), open(d + "/.metadata", "wb") as f:
        pickle.dump(md, f)
EOF
}
for c in "dchunk|6|__1_0.distcp" "dfile|6|__2_0.distcp: No such file" "dcp|6|ckpt_format torch_dcp without use_megatron_fsdp" \
	"key|6|model.module.decoder.layers.1.mlp.linear_fc3.weight" "ver|2|checkpoint_version 2"; do
	k=${c%%|*} rest=${c#*|}; code=${rest%%|*} msg=${rest#*|}
	ok "bad fsdp_dtensor input: $k" dbad $k mf badf-$k "$ROOT/tests/cli"
	ok "  exit $code" exits $code "$BIN/mgt-ckpt-convert" --load-dir badf-$k --save-dir outf-$k
	ok "  the message names $msg" err_has "$msg"
	ok "  nothing written" no_files outf-$k
done

# ---- full tier ----
if full_only "tiny-moe EP 2 (chained optimizers), tiny-gpt2 tied PP 2 x VP 2 and the local spec"; then
	ok "tiny-moe to iteration 3" quiet "$BIN/mgt-train" --model tiny-moe $TRAIN --train-iters 3 --save ckm --save-interval 3
	ok "tiny-gpt2 to iteration 3" quiet "$BIN/mgt-train" --model tiny-gpt2 $TRAIN --train-iters 3 --save ckg --save-interval 3
	ok "tiny-llama with q/k norms and a qkv bias (Qwen's) to iteration 3" quiet "$BIN/mgt-train" --model tiny-llama \
		--qk-layernorm --add-qkv-bias --bf16 $TRAIN --train-iters 3 --save ckq --save-interval 3
	for c in "ckm|--format torch --tp 2 --pp 2 --ep 2 --dp 2 --bf16" "ckm|--format torch --tp 1 --pp 2 --ep 2 --dp 4 --dist-opt --bf16" \
		"ckg|--format torch --tp 2 --pp 2 --vp 2 --dist-opt" "ckg|--format torch --tp 2 --pp 2 --local-spec --fp16" \
		"ckg|--format torch_dist --tp 2 --pp 2 --dist-opt" "ckq|--format torch --tp 2 --pp 2 --dp 2 --dist-opt --bf16" \
		"ckq|--format torch_dist --tp 2 --pp 2 --dp 2 --dist-opt --bf16" "ckm|--format fsdp_dtensor --dp 4 --ep 2 --bf16" \
		"ckm|--format fsdp_dtensor --dp 3 --local-spec" "ckg|--format fsdp_dtensor --dp 2" "ckq|--format fsdp_dtensor --dp 5"; do
		ck=${c%%|*} flags=${c#*|}
		rm -rf fx fx.mgt
		ok "$ck $flags" quiet $MG to-megatron --mgt $ck --out fx $flags
		ok "  to mgt" quiet "$BIN/mgt-ckpt-convert" --load-dir fx --save-dir fx.mgt
		ok "  bit for bit" $STATE $ck fx.mgt
	done
	ok "--pretrained-checkpoint of a Megatron directory" train pre tiny-llama --bf16 --pretrained-checkpoint mt
	ok "--pretrained-checkpoint of the fsdp_dtensor directory" train pre-mf tiny-llama --bf16 --pretrained-checkpoint mf
	ok "  the losses of the torch directory's" losses_exact pre pre-mf
fi
done_testing
