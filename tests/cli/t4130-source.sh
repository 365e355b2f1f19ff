#!/bin/sh
# Model sources (lib/convert/source.c, issue 45 item 4): a Hugging Face directory read in place.
# mgt-eval --hf with TMPDIR naming a directory that does not exist (no temporary checkpoint can be
# made) gives the loss, perplexity and generation of the checkpoint mgt-ckpt-convert makes of it,
# bit for bit; mgt-train --pretrained-checkpoint HF starts fine-tuning with the iteration-1 loss
# of --load CONVERTED --finetune, bit for bit.
. "$(dirname "$0")/lib.sh"
export ROOT
cd "$T" || exit 1

small_bpe || { echo "1..0 # SKIP the small BPE could not be written"; exit 0; }
"$BIN/mgt-preprocess" --input "$SHARE/data/kjv.jsonl.zst" --output-prefix kjv $BPE --append-eod \
	--workers 2 --quiet >/dev/null 2>&1 || { echo "1..0 # SKIP mgt-preprocess failed"; exit 0; }
D="--data-path kjv_text_document --split 90,5,5 --data-cache-path cache --seq-length 32 --micro-batch-size 2
 --global-batch-size 8 --threads 2"
"$BIN/mgt-train" --model tiny-gpt2 $BPE $D --lr 2e-3 --train-iters 3 --eval-iters 0 --save ck >/dev/null 2>&1
ok "training a tiny GPT-2" test -f ck/iter_0000003/metadata.json
"$BIN/mgt-ckpt-convert" --load-dir ck --save-dir hf --dtype bf16 >/dev/null 2>&1
"$BIN/mgt-ckpt-convert" --load-dir hf --save-dir conv >/dev/null 2>&1
ok "the Hugging Face directory (bf16) and its conversion back" test -f hf/model.safetensors -a -f conv/iter_0000000/metadata.json
same() { [ "$1" = "$2" ] && [ -n "$1" ] || { echo "# '$1' != '$2'"; return 1; }; }
json_loss() { $PY -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['lm_loss']))" "$1"; }
E="--eval-iters 2 --eval-interval 3 --train-iters 6 --eval-from-sample 16"
TMPDIR=/nonexistent "$BIN/mgt-eval" loss --hf hf $D $E --output lh.json >/dev/null 2>lh.err
"$BIN/mgt-eval" loss --load conv $D $E --output lc.json >/dev/null 2>&1
ok "mgt-eval loss --hf, TMPDIR=/nonexistent: the converted checkpoint's loss bit for bit" same "$(json_loss lh.json)" "$(json_loss lc.json)"
printf '{"text": "In the beginning God created the heaven and the earth."}\n{"text": "And God said, Let there be light: and there was light."}\n' >texts.jsonl
TMPDIR=/nonexistent "$BIN/mgt-eval" perplexity --hf hf --texts texts.jsonl --max-length 32 --threads 1 --output ph.jsonl >/dev/null 2>&1
"$BIN/mgt-eval" perplexity --load conv --texts texts.jsonl --max-length 32 --threads 1 --output pc.jsonl >/dev/null 2>&1
ok "mgt-eval perplexity --hf, TMPDIR=/nonexistent: the same lines as the converted checkpoint's" cmp ph.jsonl pc.jsonl
TMPDIR=/nonexistent "$BIN/mgt-eval" generate --hf hf --prompt "In the beginning" --max-new-tokens 8 --threads 1 >gh.out 2>/dev/null
"$BIN/mgt-eval" generate --load conv --prompt "In the beginning" --max-new-tokens 8 --threads 1 >gc.out 2>/dev/null
ok "mgt-eval generate --hf, TMPDIR=/nonexistent: the same greedy text" sh -c 'test -s gh.out && cmp gh.out gc.out'
ok "a corrupted safetensors header: mgt-eval --hf exits 6 (a damaged checkpoint)" sh -c "cp -r hf bad && printf 'xxxxxxxx' | dd of=bad/model.safetensors conv=notrunc 2>/dev/null; TMPDIR=/nonexistent \"$BIN/mgt-eval\" generate --hf bad --prompt a --max-new-tokens 1 >/dev/null 2>&1; test \$? = 6"

F="--model tiny-gpt2 $BPE $D --lr 1e-3 --train-iters 2 --eval-iters 0 --log-interval 1"
TMPDIR=/nonexistent "$BIN/mgt-train" $F --pretrained-checkpoint hf --metrics-file mh.jsonl >th.log 2>&1
"$BIN/mgt-train" $F --load conv --finetune --metrics-file mc.jsonl >/dev/null 2>&1
l1() { $PY -c "import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('iteration')==1 and 'lm_loss' in d: print(repr(d['lm_loss'])); break" "$1"; }
echo "# iteration-1 loss: --pretrained-checkpoint hf $(l1 mh.jsonl), --load conv --finetune $(l1 mc.jsonl)"
ok "mgt-train --pretrained-checkpoint HF: iteration 1's loss equals the converted start's, bit for bit" same "$(l1 mh.jsonl)" "$(l1 mc.jsonl)"
ok "... it fine-tunes: iteration 0 loaded, weights only" grep -q "successfully loaded checkpoint from hf \[ iteration 0 \]" th.log
"$BIN/mgt-train" $F --load conv2 --pretrained-checkpoint conv --save conv2 --metrics-file m2.jsonl >/dev/null 2>&1
ok "--pretrained-checkpoint an mgt checkpoint, --load empty: the same loss" same "$(l1 m2.jsonl)" "$(l1 mc.jsonl)"
"$BIN/mgt-train" $F --load conv2 --pretrained-checkpoint /nonexistent --train-iters 3 --metrics-file m3.jsonl >/dev/null 2>&1
ok "... once --load holds a checkpoint, it resumes from it (the pretrained one is not read)" sh -c "grep -q '\"iteration\":3' m3.jsonl && ! grep -q '\"iteration\":1,' m3.jsonl"
done_testing
