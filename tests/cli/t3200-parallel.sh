#!/bin/sh
# mgt-train in parallel under mpirun (tests/mpirun.sh, --oversubscribe): every layout gives the
# single-process losses step by step (fp32, relative difference <= 1e-5, dropout on); the bytes
# each rank's communicators count equal the analytic volume (comm_volume.py); a checkpoint saved
# under TP2 x PP2 x DP2 resumes under other layouts; resume under a layout is bitwise exact; bad
# layouts are refused once, with every rank non-zero; a rank that fails takes the job down.
# Tiers (lib.sh): the quick tier runs tiny-gpt2 under the layouts that between them take every
# path (DP2 all-reduce and distributed optimizer overlapped in buckets, virtual and uneven pipeline
# stages with DP, TP2 with SP, TP2 x PP2 x DP2), tiny-llama under TP2 SP, PP2 with virtual stages
# and TP2 x PP2 x DP2, and the q/k features under TP2 x PP2 x DP2; the full tier adds plain DP2,
# the distributed optimizer without overlap, with buckets, TP2 and PP2 alone (for both models)
# and the q/k features under TP2, TP2 SP and PP2.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
RUN="sh $ROOT/tests/mpirun.sh"
kjv_parallel_data
SEQ=32 MBS=2 GBS=8
# train NP MODEL NAME [flags]: 10 iterations (dropout 0.1 as the presets' default); metrics NAME.jsonl
train() { train_kjv "$@"; }
same() { losses_same "$@"; }
exact() { losses_exact "$@"; }
# volume NP MODEL NAME key=value...: comm log NAME.rankN.jsonl against the analytic volume
volume() { kjv_volume "$@"; }

# The padded vocabulary must not depend on TP: 1100 (lib.sh's small_bpe) -> 1536 with
# divisible-by 512 / TP (the presets' 128 under TP2 would give 1280).
V1="--make-vocab-size-divisible-by 512" V2="--make-vocab-size-divisible-by 256" V4="--make-vocab-size-divisible-by 128"
PAD=vocab=1536
for model in tiny-gpt2 tiny-llama; do
	ok "$model: single process" train 1 $model $model-ref $V1
	while read -r np name kv flags; do
		# the quick tier: tiny-gpt2 runs the layouts that between them take every path (data-parallel
		# all-reduce and distributed optimizer with buckets and overlap, virtual and uneven pipeline
		# stages, TP with SP, all three), tiny-llama three of them
		if quick && case $model:$name in *:tp2-sp|*:pp2-vp2|*:tp2-pp2-dp2) false;;
			tiny-gpt2:dp2-overlap|tiny-gpt2:dp2-distopt-overlap|tiny-gpt2:pp2-vp2-dp2-overlap|tiny-gpt2:pp2-uneven) false;;
			esac; then
			skip "$model $name (full tier: make check-full)"; continue
		fi
		ok "$model $name: trains" train "$np" $model "$model-$name" --comm-log "$model-$name" $flags
		ok "$model $name: losses of the 10 steps match the single process" same $model-ref $model-$name
		ok "$model $name: bytes per rank per step = analytic" volume "$np" $model "$model-$name" $PAD $kv
	done <<LAYOUTS
2 dp2 tp=1 $V1
2 dp2-distopt distopt=1 $V1 --use-distributed-optimizer
2 dp2-buckets distopt=1,bucket=300000 $V1 --use-distributed-optimizer --ddp-bucket-size 300000
2 dp2-overlap tp=1 $V1 --overlap-grad-reduce --ddp-bucket-size 300000
2 dp2-distopt-overlap distopt=1,bucket=300000 $V1 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 300000
4 pp2-vp2-dp2-overlap pp=2,vp=2,distopt=1,bucket=200000 $V1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 200000
2 tp2 tp=2 $V2 --tensor-model-parallel-size 2
2 tp2-sp tp=2,sp=1 $V2 --tensor-model-parallel-size 2 --sequence-parallel
2 pp2 pp=2 $V1 --pipeline-model-parallel-size 2
2 pp2-uneven pp=2,last=1 $V1 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1
2 pp2-vp2 pp=2,vp=2 $V1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
8 tp2-pp2-dp2 tp=2,pp=2,sp=1,distopt=1 $V2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
LAYOUTS
done

# Converted-model features under layouts: Qwen3-style q/k RMSNorm with Llama 3.1 RoPE scaling
# (tiny-llama) and q/k LayerNorm with biases and the tanh GELU (tiny-gpt2).  Each TP rank
# normalizes its own heads with replicated q/k norm weights, whose gradients must be summed over
# TP (with or without sequence parallelism): the weights after 3 iterations (Adam's first steps
# move every element by about the learning rate, so a rank's partial gradient would show) equal
# the single process's.  k_layernorm.bias is left out: its exact gradient is zero (softmax ignores
# a shift common to all keys), so Adam moves it by rounding noise only.
# qkw A B: the q/k norm weights of checkpoints A and B at iteration 3 within 1e-5
qkw() {
	$PY - "$ROOT/contrib" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mgt_ckpt, numpy as np
a, _ = mgt_ckpt.load(sys.argv[2], iteration=3)
b, _ = mgt_ckpt.load(sys.argv[3], iteration=3)
names = [n for n in a if n.endswith(("q_layernorm.weight", "k_layernorm.weight")) and not n.startswith("optimizer")]
if not names: sys.exit("# no q/k norm weights in " + sys.argv[2])
worst = max(float(np.abs(a[n] - b[n]).max()) for n in names)
moved = max(float(np.abs(a[n] - 1).max()) for n in names)
print(f"# {sys.argv[3]}: {len(names)} q/k norm weights, max difference {worst:.2e} (moved {moved:.2e} from 1)")
sys.exit(worst > 1e-5 or moved < 1e-4)
PY
}
for model in tiny-llama tiny-gpt2; do
	if [ $model = tiny-llama ]; then X="--qk-layernorm --use-rope-scaling --rope-scaling-original-max-position-embeddings 64"
	else X="--qk-layernorm --openai-gelu"; fi
	ok "$model $X: single process" train 1 $model qk-$model-ref $V1 $X --save qk-$model-ref.ck --save-interval 3
	while read -r np name flags; do
		if quick && [ $name != tp2-pp2-dp2 ]; then skip "$model qk $name (full tier: make check-full)"; continue; fi
		ok "$model qk $name: trains" train "$np" $model "qk-$model-$name" $flags $X --save "qk-$model-$name.ck" \
			--save-interval 3
		ok "$model qk $name: losses of the 10 steps match the single process" same qk-$model-ref "qk-$model-$name"
		ok "$model qk $name: q/k norm weights after 3 steps = the single process's" qkw qk-$model-ref.ck \
			"qk-$model-$name.ck"
	done <<LAYOUTS
2 tp2 $V2 --tensor-model-parallel-size 2
2 tp2-sp $V2 --tensor-model-parallel-size 2 --sequence-parallel
2 pp2 $V1 --pipeline-model-parallel-size 2
8 tp2-pp2-dp2 $V2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
LAYOUTS
done

# Resharding: save under TP2 x PP2 x DP2 (sequence parallel, distributed optimizer) at
# iteration 5; resume under other layouts; iterations 6-10 match the uninterrupted run.
G=tiny-gpt2
L8="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"
ok "save under TP2 x PP2 x DP2 at iteration 5" train 8 $G save $V2 $L8 --save ck --exit-interval 5
ok "every rank wrote its shard" sh -c 'test $(ls ck/iter_0000005/model_tp*_pp*_dp*.h5 | sed "s/_[0-9]*\.h5$//; s/\.h5$//" | sort -u | wc -l) = 8'
ok "resume under one process" train 1 $G r-single $V1 --load ck
ok "  losses 6-10 match" same $G-ref r-single 6
ok "resume under TP1 x PP4 x DP2" train 8 $G r-pp4 $V1 --pipeline-model-parallel-size 4 --load ck
ok "  losses 6-10 match" same $G-ref r-pp4 6
ok "resume under TP4 x DP2 (distributed optimizer)" train 8 $G r-tp4 $V4 --tensor-model-parallel-size 4 --use-distributed-optimizer --load ck
ok "  losses 6-10 match" same $G-ref r-tp4 6
ok "resume under the same layout" train 8 $G r-same $V2 $L8 --load ck
ok "  losses and grad norms 6-10 bitwise identical to the uninterrupted run" exact $G-tp2-pp2-dp2 r-same

# Layouts that do not divide: one message, every rank non-zero (each rank records its status).
# refused NP NEEDLE flags...: the job fails, NEEDLE is printed exactly once, no rank exited 0
refused() {
	np=$1 needle=$2; shift 2
	rm -f status.*
	$RUN "$np" sh -c '"$@"; echo $? >status.$OMPI_COMM_WORLD_RANK' sh "$BIN/mgt-train" --model $G $BPE \
		--data-path kjv_text_document --split 98,2,0 --data-cache-path cache --seq-length $SEQ \
		--micro-batch-size $MBS --train-iters 2 --save never "$@" >"$T/out" 2>"$T/err" </dev/null
	n=$(grep -c -- "$needle" "$T/err")
	[ "$n" = 1 ] || { echo "# '$needle' printed $n times: $(head -c 400 "$T/err")"; return 1; }
	[ "$(ls status.* | wc -l)" = "$np" ] || { echo "# ranks reporting: $(ls status.*)"; return 1; }
	! grep -qx 0 status.* && [ ! -e never ]
}
ok "world 3 under TP2 refused" refused 3 "world size 3 is not divisible by --tensor-model-parallel-size 2" \
	--tensor-model-parallel-size 2
ok "layers not divisible by PP x VPP refused" refused 2 "is not divisible by --pipeline-model-parallel-size 2 x --num-layers-per-virtual-pipeline-stage 3" \
	--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
ok "uneven stages that do not divide refused" refused 4 "leave 2 of --num-layers 4 for 3 middle pipeline stages" \
	--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2
ok "query groups not divisible by TP refused" refused 4 "tensor-model-parallel-size 4" --model tiny-llama \
	--tensor-model-parallel-size 4
ok "vocabulary padding of another TP refused on load" sh -c "! $RUN 2 $BIN/mgt-train --model $G $BPE \
	--data-path kjv_text_document --split 98,2,0 --data-cache-path cache --seq-length $SEQ --micro-batch-size $MBS \
	--train-iters 6 --tensor-model-parallel-size 2 --load ck >/dev/null 2>'$T/err' </dev/null" && err_has "padded_vocab_size"
ok "... naming the flag and the value that loads it" err_has "give --make-vocab-size-divisible-by 256 with TP 2"

# A rank that fails takes the job down, naming itself: corrupt a tensor only pipeline stage 1
# reads, then resume under PP2 (stage 0 waits in a collective meanwhile).
ok "corrupt decoder.layers.3 in the checkpoint" $PY - <<'PY'
import glob, h5py
name = "decoder.layers.3.mlp.linear_fc2.weight"
n = 0
for path in glob.glob("ck/iter_0000005/*.h5"):
    with h5py.File(path, "r") as f:
        if name not in f or f[name].attrs.get("global_shape") is None: continue
        info = f[name].id.get_chunk_info(0)
    with open(path, "r+b") as g:
        g.seek(info.byte_offset + info.size // 2); b = g.read(1); g.seek(-1, 1); g.write(bytes([b[0] ^ 0xFF]))
    n += 1
assert n, "no shard holds " + name
PY
ok "the failing rank ends the job, naming itself" sh -c "MGT_MPIRUN_TIMEOUT=120 $RUN 2 $BIN/mgt-train --model $G \
	$BPE --data-path kjv_text_document --split 98,2,0 --data-cache-path cache --seq-length $SEQ \
	--micro-batch-size $MBS --train-iters 6 $V1 --pipeline-model-parallel-size 2 --load ck >/dev/null 2>'$T/err'; \
	r=\$?; [ \$r != 0 ] && [ \$r != 124 ]" && err_has "rank 1 of 2: error:"

# a --save that cannot be written: rank 0's preflight ends the job before training (exit 1)
: >afile
ok "--save under a regular file under mpirun: the job ends with exit 1 before training" sh -c "MGT_MPIRUN_TIMEOUT=120 \
	$RUN 2 $BIN/mgt-train --model $G --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --seq-length $SEQ \
	--micro-batch-size $MBS --train-iters 6 $V1 --save afile/ck >/dev/null 2>'$T/err' </dev/null; test \$? = 1 &&
	grep -q 'rank 0 of 2: error: --save: afile/ck: cannot create directory' '$T/err' && ! grep -q 'iteration  *1/' '$T/err'"

# A rank killed mid-run: mpirun ends the job, non-zero, naming the rank, instead of hanging.
MGT_MPIRUN_TIMEOUT=120 $RUN 2 "$BIN/mgt-train" --model $G $BPE --data-path kjv_text_document --split 98,2,0 \
	--data-cache-path cache --seq-length $SEQ --micro-batch-size $MBS --train-iters 100000 --log-interval 1 \
	$V1 --pipeline-model-parallel-size 2 >kill.out 2>kill.err </dev/null &
job=$!
i=0; while [ $i -lt 600 ] && ! grep -q 'iteration        2/' kill.err 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
victim=$(for p in $(pgrep -f "mgt-train --model $G.*100000"); do
	tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && echo $p; done | head -1)
[ -n "$victim" ] && kill -KILL "$victim"
wait $job; rc=$?
ok "killing rank 0 ends the job non-zero (not by the time limit)" test -n "$victim" -a $rc != 0 -a $rc != 124
ok "mpirun names the dead rank" grep -q "rank 0" kill.err
grep -q "rank 0" kill.err || sed 's/^/#   /' kill.err | tail -15
done_testing
