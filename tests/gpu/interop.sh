#!/bin/sh
# tests/gpu/interop.sh: on the lent GPU machine (which has transformers and tensorboard, absent
# from Debian), mgt's files read by the reference Python tools.  Needs MGT_BIN (mgt-train,
# mgt-preprocess, mgt-ckpt-convert, mgt-eval) and python3 with torch, transformers, tensorboard.
#   1. tiny-gpt2 and tiny-llama trained 20 iterations on KJV (--device cuda --bf16), saved, with
#      --tensorboard-dir;
#   2. TensorBoard's EventAccumulator reads the event file: its 'lm loss' scalars equal the
#      metrics file's lm_loss at every iteration (float32);
#   3. mgt-ckpt-convert writes a Hugging Face directory (fp32); transformers'
#      AutoModelForCausalLM loads it, and its logits on a KJV sentence equal mgt-eval logits
#      (--device cuda, fp32) within 1e-4 normwise; the greedy continuations are the same.
# Prints ok / not ok lines; exits 1 on any failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${MGT_BIN:?MGT_BIN: the directory of the mgt programs}
PY=${PY:-python3}
W=$(mktemp -d "${TMPDIR:-/tmp}/mgt-interop.XXXXXX")
G=$ROOT/share/mgt/tokenizers/gpt2
TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $G/vocab.json --merge-file $G/merges.txt"
fail=0
# shellcheck disable=SC2086
"$B/mgt-preprocess" --input "$ROOT/share/mgt/data/kjv.jsonl.zst" --output-prefix "$W/kjv" $TOK \
	--append-eod --quiet || { echo "not ok - mgt-preprocess"; exit 1; }
for m in tiny-gpt2 tiny-llama; do
	# shellcheck disable=SC2086
	if ! "$B/mgt-train" --model "$m" --device cuda --bf16 --data-path "$W/kjv_text_document" $TOK \
		--split 969,30,1 --data-cache-path "$W/cache" --micro-batch-size 4 --global-batch-size 8 \
		--train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --eval-interval 0 --log-interval 1 --seed 1234 \
		--save "$W/$m-ck" --tensorboard-dir "$W/$m-tb" --metrics-file "$W/$m.jsonl" >"$W/$m.log" 2>&1; then
		echo "not ok - $m: mgt-train"; tail -3 "$W/$m.log"; fail=1; continue
	fi
	"$B/mgt-ckpt-convert" --load-dir "$W/$m-ck" --save-dir "$W/$m-hf" --dtype fp32 --quiet ||
		{ echo "not ok - $m: mgt-ckpt-convert to HF"; fail=1; continue; }
	ids="$(printf '%s' 'In the beginning God created the heaven and the earth. And the earth was' |
		"$PY" -c "import sys; from transformers import GPT2TokenizerFast as T; t=T('$G/vocab.json', '$G/merges.txt'); print(' '.join(map(str, t(sys.stdin.read())['input_ids'])))")"
	"$B/mgt-eval" logits --load "$W/$m-ck" --device cuda --tokens "$ids" --max-new-tokens 8 \
		--logits "$W/$m-logits.npy" >"$W/$m-greedy.txt" 2>"$W/$m-eval.err" ||
		{ echo "not ok - $m: mgt-eval logits"; cat "$W/$m-eval.err"; fail=1; continue; }
	"$PY" - "$m" "$W" "$ids" <<-'EOF' || fail=1
	import json, sys, glob
	import numpy as np, torch
	from transformers import AutoModelForCausalLM
	from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
	m, W, ids = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split()]
	bad = 0
	def out(ok, msg):
	    global bad
	    print(("ok - " if ok else "not ok - ") + m + ": " + msg); bad += not ok
	ea = EventAccumulator(W + "/" + m + "-tb", size_guidance={"scalars": 0}); ea.Reload()
	tags = ea.Tags()["scalars"]
	print("# %s: TensorBoard scalar tags: %s" % (m, ", ".join(sorted(tags))))
	met = [json.loads(l) for l in open(W + "/" + m + ".jsonl") if l.strip()]
	met = {r["iteration"]: r["lm_loss"] for r in met if "lm_loss" in r and "iteration" in r}
	if "lm loss" in tags:
	    ev = {e.step: e.value for e in ea.Scalars("lm loss")}
	    same = sorted(ev) == sorted(met) and all(np.float32(met[k]) == np.float32(ev[k]) for k in ev)
	    out(same, "EventAccumulator reads 'lm loss' at %d steps, equal to the metrics file's (%d)" % (len(ev), len(met)))
	else:
	    out(False, "EventAccumulator finds no 'lm loss' scalar")
	hf = AutoModelForCausalLM.from_pretrained(W + "/" + m + "-hf", torch_dtype=torch.float32).cuda().eval()
	torch.backends.cuda.matmul.allow_tf32 = False
	with torch.no_grad():
	    lg = hf(torch.tensor([ids]).cuda()).logits[0].double().cpu().numpy()
	ml = np.load(W + "/" + m + "-logits.npy").astype(np.float64)[: len(ids), : lg.shape[1]]
	err = np.linalg.norm(ml - lg) / np.linalg.norm(lg)
	out(ml.shape == lg.shape and err < 1e-4, "transformers %s loads the converted directory; logits %s vs mgt-eval's: err %.2e (tol 1e-4)"
	    % (type(hf).__name__, lg.shape, err))
	with torch.no_grad():
	    g = hf.generate(torch.tensor([ids]).cuda(), max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
	mg = [int(x) for l in open(W + "/" + m + "-greedy.txt") if l.startswith("ids:") for x in l.split()[1:]]
	out(g == mg, "greedy continuations: transformers %s, mgt-eval %s" % (g, mg))
	sys.exit(1 if bad else 0)
	EOF
done
rm -rf "$W"
exit $fail
