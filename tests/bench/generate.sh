#!/bin/sh
# Generation throughput on the CPU: mgt-eval generate (key/value cache) against llama.cpp
# (node-llama-cpp's CPU prebuilt, tests/hf/llamacpp) on the same weights, for the gpt2-124m shape
# (12 layers, h 768, 12 heads, ffn 3072, vocab 50257, 1024 positions, tied; random weights from
# tests/hf/make_tiny.py, converted with mgt-ckpt-convert, exported to GGUF f32 with mgt-export).
# Greedy decoding, 2 threads, batch 1 (one prompt) and batch 8 (eight prompts decoded together).
# Decode tokens/s = (new tokens of the long run - of the short run) / (time of the long run - of
# the short run), the runs generating NEW+1 and 1 tokens per prompt: program start, model load and
# prefill cancel out.  Each figure is the best of REPS repetitions.  Not a test (timings).
# The greedy ids of the two programs part after a few tokens: llama.cpp's GELU is an f16 lookup
# table (about 1e-3 relative in the logits, tests/cli/t4200-export-gguf.sh), and the top logits of
# a random 12-layer model are often that close; the script prints how many ids agree.
# Usage: tests/bench/generate.sh [WORKDIR]  (environment: NEW [128], REPS [3], THREADS [2])
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
w=${1:-$root/build/bench/generate}
NEW=${NEW:-128} REPS=${REPS:-3} THREADS=${THREADS:-2}
PY=/usr/bin/python3
rm -rf "$w" && mkdir -p "$w" || exit 1
echo "# tests/bench/generate.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs online"
echo "# mgt $(git -C "$root" rev-parse --short HEAD 2>/dev/null); $NEW new tokens a prompt, $THREADS threads, best of $REPS"
$PY "$root/tests/hf/make_tiny.py" gpt2 "$w/hf" --dtype fp32 --vocab 50257 --layers 12 --hidden 768 --heads 12 \
	--ffn 3072 --positions 1024 --tie >/dev/null || exit 1
cp "$root/share/mgt/tokenizers/gpt2/vocab.json" "$root/share/mgt/tokenizers/gpt2/merges.txt" "$w/hf/"
"$root/bin/mgt-ckpt-convert" --quiet --load-dir "$w/hf" --save-dir "$w/ck" || exit 1
"$root/bin/mgt-export" --quiet --load-dir "$w/ck" --output "$w/gpt2-124m-f32.gguf" --outtype f32 || exit 1
ls -l "$w/gpt2-124m-f32.gguf" | awk '{printf "# GGUF f32: %.1f MiB\n", $5 / 1048576}'

cat >"$w/prompts.txt" <<'EOF'
In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep.
And God said, Let there be light: and there was light.
And God saw the light, that it was good: and God divided the light from the darkness.
And God called the light Day, and the darkness he called Night.
And the evening and the morning were the first day.
And God said, Let there be a firmament in the midst of the waters.
And God made the firmament, and divided the waters which were under the firmament.
EOF

now() { date +%s.%N; }
# mgt_run B N: seconds of mgt-eval generate over the first B prompts, N new tokens each
mgt_run() {
	t0=$(now)
	head -n "$1" "$w/prompts.txt" | "$root/bin/mgt-eval" generate --load "$w/ck" --greedy --ignore-eos \
		--max-new-tokens "$2" --batch-size "$1" --output jsonl --threads "$THREADS" --device cpu >"$w/mgt-$1-$2.jsonl" || exit 1
	echo "$(now) - $t0" | bc -l
}
best() { sort -g | head -1; }
rate() { echo "$1 * $NEW / ($2 - $3)" | bc -l | xargs printf '%.1f'; }
for b in 1 8; do
	long=$(for i in $(seq "$REPS"); do mgt_run $b $((NEW + 1)); done | best)
	short=$(for i in $(seq "$REPS"); do mgt_run $b 1; done | best)
	printf 'mgt-eval generate  batch %d: %s tokens/s (runs %.3f s with %d new tokens a prompt, %.3f s with 1)\n' \
		$b "$(rate $b "$long" "$short")" "$long" $((NEW + 1)) "$short"
done

if ! sh "$root/tests/hf/llamacpp/setup.sh" >"$w/setup.log" 2>&1; then
	echo "llama.cpp: skipped ($(tail -1 "$w/setup.log"))"
	exit 0
fi
# The llama.cpp side: token ids as mgt's tokenizer makes them (GPT-2 BPE), greedy (temperature 0),
# all sequences of a batch evaluated concurrently in one context (node-llama-cpp batches them into
# one llama_decode per step); times inside node, after the model is loaded.
while IFS= read -r line; do
	"$root/bin/mgt-tokenize" --tokenizer-type GPT2BPETokenizer --vocab-file "$w/hf/vocab.json" \
		--merge-file "$w/hf/merges.txt" "$line" | tr '\n' ' ' && echo
done <"$w/prompts.txt" >"$w/ids.txt" || { echo "llama.cpp: skipped (mgt-tokenize failed)"; exit 0; }
js="$root/tests/hf/llamacpp/.bench-generate-$$.mjs"
trap 'rm -f "$js"' EXIT
cat >"$js" <<'EOF'
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { readFileSync } from "node:fs";
const [file, idsFile, newTok, reps, threads] = process.argv.slice(2);
const prompts = readFileSync(idsFile, "utf8").trim().split("\n").map((l) => l.trim().split(/[\s,]+/).map(Number));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
async function run(b, n) {
  const ctxSize = b * 256;
  const context = await model.createContext({ contextSize: ctxSize, batchSize: ctxSize, sequences: b, threads: Number(threads),
    flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" });
  const seqs = Array.from({ length: b }, () => context.getSequence());
  const t0 = process.hrtime.bigint();
  const outs = await Promise.all(seqs.map(async (s, i) => {
    const got = [];
    for await (const t of s.evaluate(prompts[i], { temperature: 0 })) { got.push(t); if (got.length >= n) break; }
    return got;
  }));
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  await context.dispose();
  return [dt, outs];
}
for (const b of [1, 8]) {
  let long = Infinity, short = Infinity, ids = null;
  for (let r = 0; r < Number(reps); r++) {
    const [dl, o] = await run(b, Number(newTok) + 1); long = Math.min(long, dl); ids = o;
    const [ds] = await run(b, 1); short = Math.min(short, ds);
  }
  process.stdout.write(JSON.stringify({ batch: b, long, short, ids, llama_cpp: llama.llamaCppRelease }) + "\n");
}
await model.dispose();
await llama.dispose();
EOF
node "$js" "$w/gpt2-124m-f32.gguf" "$w/ids.txt" "$NEW" "$REPS" "$THREADS" >"$w/llamacpp.jsonl" 2>"$w/llamacpp.err" ||
	{ echo "llama.cpp: failed: $(tail -3 "$w/llamacpp.err")"; exit 1; }
$PY - "$w" "$NEW" <<'PY'
import json, sys
w, new = sys.argv[1], int(sys.argv[2])
for l in open(w + "/llamacpp.jsonl"):
    o = json.loads(l)
    b = o["batch"]
    print("llama.cpp (node-llama-cpp %s) batch %d: %.1f tokens/s (runs %.3f s with %d new tokens a prompt, %.3f s with 1)"
          % (o["llama_cpp"].get("release", "?"), b, b * new / (o["long"] - o["short"]), o["long"], new + 1, o["short"]))
    mgt = {}
    for m in open("%s/mgt-%d-%d.jsonl" % (w, b, new + 1)):
        m = json.loads(m); mgt[m["index"]] = m["ids"]
    pre = []
    for i in range(b):
        a, c, k = mgt[i], o["ids"][i], 0
        while k < min(len(a), len(c)) and a[k] == c[k]: k += 1
        pre.append(k)
    print("  greedy ids the same as mgt's for the first %s of %d tokens (per prompt)" % (pre, new + 1))
PY
