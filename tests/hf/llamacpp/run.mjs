// Run a GGUF file through real llama.cpp (node-llama-cpp's linux-x64 CPU prebuilt), or dump its
// metadata with @huggingface/gguf.  A test reference for mgt-export.
//
//   node run.mjs MODEL.gguf --tokens "1 2 3" [--n 16] [--last] [--threads N] [--kv f32|f16]
//     -> {"n_vocab": V, "greedy": [N ids], "logits": [[V floats] for each prompt position],
//         "greedy_from_logits": first id by argmax of the last row, "llama_cpp": release info}
//     Token ids go in directly (no tokenization, no BOS added).  Logits are llama.cpp's raw logits
//     (LlamaContextSequence.controlledEvaluate with generateNext.logits, no sampling options);
//     greedy ids come from LlamaContextSequence.evaluate(..., {temperature: 0}) on a cleared sequence.
//     --last keeps only the last position's logits.  The KV cache is F32 by default (llama.cpp's own
//     default, F16, costs ~3e-3 in the logits of a tiny model); flash attention is off.
//   node run.mjs MODEL.gguf --meta [--full]
//     -> {"version", "metadata": {key: {"type": gguf type name, "value"}}, "tensorInfos":
//         [{"name", "shape" (ne order, innermost first), "dtype" (ggml type number), "offset"}]}
//     Arrays of more than 64 elements are shortened to {"length", "head"} unless --full.
// Exit status 0, 1 on an error (message on stderr), 2 on usage.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { gguf } from "@huggingface/gguf";

function usage() {
  process.stderr.write("usage: node run.mjs MODEL.gguf (--tokens \"ID ...\" [--n N] [--last] [--threads N] | --meta [--full])\n");
  process.exit(2);
}

const args = process.argv.slice(2);
if (args.length < 2) usage();
const file = args[0];
const opt = { kv: "f32", n: 0, last: false, meta: false, full: false, threads: 1, tokens: null };
for (let i = 1; i < args.length; i++) {
  const a = args[i];
  if (a === "--tokens") opt.tokens = args[++i];
  else if (a === "--n") opt.n = Number(args[++i]);
  else if (a === "--threads") opt.threads = Number(args[++i]);
  else if (a === "--last") opt.last = true;
  else if (a === "--kv") opt.kv = args[++i];
  else if (a === "--meta") opt.meta = true;
  else if (a === "--full") opt.full = true;
  else usage();
}

const jsonSafe = (k, v) => (typeof v === "bigint" ? (Number.isSafeInteger(Number(v)) ? Number(v) : v.toString()) : v);
const TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"];

async function meta() {
  const r = await gguf(file, { allowLocalFile: true, typedMetadata: true });
  const md = {};
  for (const [k, tv] of Object.entries(r.typedMetadata)) {
    let v = tv.value;
    let type = TYPE_NAMES[tv.type] ?? String(tv.type);
    if (tv.type === 9) type = "array[" + (TYPE_NAMES[tv.subType] ?? String(tv.subType)) + "]";
    if (Array.isArray(v) && v.length > 64 && !opt.full) v = { length: v.length, head: v.slice(0, 8) };
    md[k] = { type, value: v };
  }
  const tensorInfos = r.tensorInfos.map((t) => ({ name: t.name, shape: t.shape, dtype: t.dtype, offset: t.offset }));
  process.stdout.write(JSON.stringify({ version: r.metadata.version, metadata: md, tensorInfos }, jsonSafe) + "\n");
}

async function evaluate() {
  const tokens = opt.tokens.split(/[\s,]+/).filter((s) => s.length).map(Number);
  if (!tokens.length || tokens.some((t) => !Number.isInteger(t) || t < 0)) usage();
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  const ctxSize = Math.max(32, tokens.length + opt.n + 8);
  const kv = opt.kv === "f16" ? "F16" : "F32";
  const context = await model.createContext({ contextSize: ctxSize, batchSize: ctxSize, sequences: 1, threads: opt.threads,
    flashAttention: false, experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv });
  const seq = context.getSequence();

  const input = tokens.map((t, i) => (opt.last && i < tokens.length - 1 ? t : [t, { generateNext: { logits: true } }]));
  const res = await seq.controlledEvaluate(input);
  const logits = [];
  let V = null;
  for (let i = 0; i < tokens.length; i++) {
    const out = res[i];
    if (!out || !out.next || !out.next.logits) continue;
    const m = out.next.logits;
    if (V === null) {
      V = 0;
      for (const k of m.keys()) V = Math.max(V, k + 1);
    }
    const row = new Array(V).fill(null);
    for (const [k, v] of m) row[k] = v;
    logits.push(row);
  }
  const lastRow = logits[logits.length - 1];
  let am = 0;
  for (let k = 1; k < lastRow.length; k++) if (lastRow[k] > lastRow[am]) am = k;

  const greedy = [];
  if (opt.n > 0) {
    await seq.clearHistory();
    for await (const t of seq.evaluate(tokens, { temperature: 0 })) {
      greedy.push(t);
      if (greedy.length >= opt.n) break;
    }
  }
  const out = { n_vocab: V, greedy, greedy_from_logits: am, logits, llama_cpp: llama.llamaCppRelease };
  process.stdout.write(JSON.stringify(out, jsonSafe) + "\n");
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

try {
  if (opt.meta) await meta();
  else if (opt.tokens !== null) await evaluate();
  else usage();
} catch (e) {
  process.stderr.write("run.mjs: " + (e && e.stack ? e.stack : String(e)) + "\n");
  process.exit(1);
}
