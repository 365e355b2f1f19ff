#!/usr/bin/env node
// Reference tokenizer ("oracle") for mgt tests.
//
// Encode: reads JSONL (stdin, a file, or a .zst file via `zstd -dc`) and prints, for each
// document, one line with the token ids of the document's `text` (or --key) value,
// space-separated; an empty line when there are no tokens.
//
//   node encode.mjs --hf tokenizer.json [--no-special] [FILE]   Hugging Face tokenizers (native)
//   node encode.mjs --tiktoken cl100k_base|o200k_base|gpt2|r50k_base|p50k_base [FILE]
//                                                                tiktoken (WASM); special tokens
//                                                                in the text are encoded as special
//                                                                (allowed_special = "all")
//   node encode.mjs --tiktoken-file RANKS --tiktoken-json JSON [FILE]
//                                                                tiktoken (WASM) built from a rank
//                                                                file and a {pat_str, special_tokens}
//                                                                JSON (e.g. /work/shared/data/tiktoken)
//   node encode.mjs --gpt3 [FILE]                                gpt-3-encoder (pure JS, GPT-2 vocab;
//                                                                never produces special tokens)
// Options:
//   --key K             JSON key to read (default: text)
//   --no-special        HF: encode(text, addSpecialTokens=false), i.e. no post-processor template
//   --ordinary          tiktoken: encode_ordinary(text): special-token strings in the text are
//                       ordinary text (Python: encode(text, disallowed_special=()))
//   --extend-special J  tiktoken: extra special tokens, JSON object {"<|x|>": id, ...}
//   --pat REGEX         tiktoken: use this split pattern instead of the encoding's own
//   --nfc               NFC-normalize each text before encoding (cross-checks of HF NFC normalizer)
//   --append-eod ID     append ID to every document that has tokens (Megatron --append-eod:
//                       no EOD for a document without tokens)
//   --lists             also accept a list of strings as the value (Megatron preprocess_data.py
//                       does: each string is tokenized on its own and the ids are concatenated)
//   --decode            the input is id lines (as printed by encode); prints one JSON line
//                       {"text": "..."} per line (HF: skip_special_tokens=false; invalid UTF-8 is
//                       replaced with U+FFFD)
//   --time              print bytes, seconds, MB/s (tokenization only, one thread) to stderr
//
// Strict input checks (exit 1 with "FILE:LINE: message" on stderr): invalid UTF-8, invalid JSON,
// blank lines, non-object lines, missing key, non-string value, strings with lone surrogates.
// A final line without a newline is accepted; a trailing "\r" before "\n" is JSON whitespace.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";

const require = createRequire(import.meta.url);

function usage(msg) {
  if (msg) process.stderr.write(`encode.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node encode.mjs (--hf FILE | --tiktoken NAME | --tiktoken-file RANKS --tiktoken-json JSON | --gpt3)\n" +
      "                       [--key K] [--no-special] [--ordinary] [--extend-special JSON] [--pat REGEX] [--nfc]\n" +
      "                       [--append-eod ID] [--lists] [--decode] [--time] [FILE]\n",
  );
  process.exit(2);
}

const opt = { key: "text", special: true, decode: false, time: false, input: null, eod: null, extend: null };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const val = () => {
    if (i + 1 >= argv.length) usage(`${a} needs a value`);
    return argv[++i];
  };
  if (a === "--hf") { opt.mode = "hf"; opt.hf = val(); }
  else if (a === "--tiktoken") { opt.mode = "tiktoken"; opt.tiktoken = val(); }
  else if (a === "--tiktoken-file") { opt.mode = "tiktoken"; opt.tkFile = val(); }
  else if (a === "--tiktoken-json") { opt.tkJson = val(); }
  else if (a === "--gpt3") opt.mode = "gpt3";
  else if (a === "--key") opt.key = val();
  else if (a === "--no-special") opt.special = false;
  else if (a === "--ordinary") opt.ordinary = true;
  else if (a === "--extend-special") opt.extend = JSON.parse(val());
  else if (a === "--pat") opt.pat = val();
  else if (a === "--nfc") opt.nfc = true;
  else if (a === "--lists") opt.lists = true;
  else if (a === "--append-eod") opt.eod = Number(val());
  else if (a === "--decode") opt.decode = true;
  else if (a === "--time") opt.time = true;
  else if (a === "-h" || a === "--help") usage();
  else if (a.startsWith("--")) usage(`unknown option ${a}`);
  else if (opt.input === null) opt.input = a;
  else usage("more than one input file");
}
if (!opt.mode) usage("choose one of --hf, --tiktoken, --tiktoken-file, --gpt3");
if (opt.tkFile && !opt.tkJson) usage("--tiktoken-file needs --tiktoken-json");

const inputName = opt.input ?? "<stdin>";
function die(line, msg) {
  process.stderr.write(`${inputName}:${line}: ${msg}\n`);
  process.exit(1);
}

// ---- read input as bytes ----
let buf;
try {
  if (opt.input === null) buf = readFileSync(0);
  else if (opt.input.endsWith(".zst"))
    buf = execFileSync("zstd", ["-dc", "--", opt.input], { maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "pipe"] });
  else buf = readFileSync(opt.input);
} catch (e) {
  process.stderr.write(`encode.mjs: cannot read ${inputName}: ${(e.stderr && e.stderr.toString().trim()) || e.message}\n`);
  process.exit(1);
}

// split into lines on "\n"; a final line without "\n" counts; no line after a final "\n"
const lines = [];
{
  let start = 0;
  while (start < buf.length) {
    let nl = buf.indexOf(10, start);
    if (nl < 0) nl = buf.length;
    lines.push(buf.subarray(start, nl));
    start = nl + 1;
  }
}
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

// ---- tokenizer backends: encode(text) -> number[], decode(ids) -> string ----
let enc, dec, finish = () => {};
if (opt.mode === "hf") {
  const { Tokenizer } = require("tokenizers");
  const tok = Tokenizer.fromFile(opt.hf);
  const eo = { addSpecialTokens: opt.special };
  enc = async (t) => (await tok.encode(t, null, eo)).getIds();
  dec = async (ids) => tok.decode(ids, false);
} else if (opt.mode === "tiktoken") {
  const tk = require("tiktoken");
  let e;
  if (opt.tkFile) {
    const j = JSON.parse(readFileSync(opt.tkJson, "utf8"));
    const specials = { ...j.special_tokens, ...(opt.extend ?? {}) };
    e = new tk.Tiktoken(readFileSync(opt.tkFile, "utf8"), specials, j.pat_str);
  } else if (opt.pat) {
    const j = require(`tiktoken/encoders/${opt.tiktoken}.json`);
    e = new tk.Tiktoken(j.bpe_ranks, { ...j.special_tokens, ...(opt.extend ?? {}) }, opt.pat);
  } else {
    e = tk.get_encoding(opt.tiktoken, opt.extend ?? undefined);
  }
  enc = opt.ordinary ? (t) => e.encode_ordinary(t) : (t) => e.encode(t, "all", []);
  const td = new TextDecoder("utf-8", { ignoreBOM: true });
  dec = (ids) => td.decode(e.decode(Uint32Array.from(ids)));
  finish = () => e.free();
} else {
  const g = require("gpt-3-encoder");
  enc = (t) => g.encode(t);
  dec = (ids) => g.decode(ids);
}

// ---- main loop ----
const out = [];
let bytes = 0, secs = 0;
for (let i = 0; i < lines.length; i++) {
  const ln = i + 1;
  let s;
  try {
    s = utf8.decode(lines[i]);
  } catch {
    die(ln, "invalid UTF-8");
  }
  if (opt.decode) {
    const t = s.trim();
    const ids = t === "" ? [] : t.split(/\s+/).map(Number);
    if (ids.some((x) => !Number.isInteger(x) || x < 0)) die(ln, "not a list of token ids");
    out.push(JSON.stringify({ text: await dec(ids) }));
    continue;
  }
  if (s.trim() === "") die(ln, "blank line");
  let obj;
  try {
    obj = JSON.parse(s);
  } catch (e) {
    die(ln, `invalid JSON: ${e.message}`);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) die(ln, "not a JSON object");
  if (!Object.prototype.hasOwnProperty.call(obj, opt.key)) die(ln, `missing key "${opt.key}"`);
  const val = obj[opt.key];
  let texts;
  if (typeof val === "string") texts = [val];
  else if (opt.lists && Array.isArray(val) && val.every((x) => typeof x === "string")) texts = val;
  else die(ln, `value of "${opt.key}" is not a string${opt.lists ? " or a list of strings" : ""}`);
  const ids = [];
  for (let text of texts) {
    if (!text.isWellFormed()) die(ln, `value of "${opt.key}" has a lone surrogate`);
    if (opt.nfc) text = text.normalize("NFC");
    const t0 = process.hrtime.bigint();
    const part = await enc(text);
    secs += Number(process.hrtime.bigint() - t0) / 1e9;
    bytes += Buffer.byteLength(text, "utf8");
    for (const x of part) ids.push(x);
  }
  if (ids.some((x) => x === undefined || x === null)) die(ln, "tokenizer returned an undefined id");
  if (opt.eod !== null && ids.length > 0) ids.push(opt.eod);
  out.push(ids.join(" "));
}
finish();
if (out.length) process.stdout.write(out.join("\n") + "\n");
if (opt.time) {
  const base = (p) => p.split("/").pop();
  const label = opt.mode === "hf" ? `hf(${base(opt.hf)})`
    : opt.mode === "gpt3" ? "gpt-3-encoder"
    : `tiktoken(${opt.tkFile ? base(opt.tkFile) : opt.tiktoken}${opt.pat ? ", --pat" : ""}${opt.nfc ? ", --nfc" : ""})`;
  process.stderr.write(
    `${label}: ${lines.length} docs, ${bytes} bytes, ${secs.toFixed(3)} s, ${(bytes / 1e6 / secs).toFixed(3)} MB/s\n`,
  );
}
