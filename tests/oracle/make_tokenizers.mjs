#!/usr/bin/env node
// Generate synthetic Hugging Face tokenizer.json files from the GPT-2 and tiktoken data files,
// to exercise HF-style pipelines without downloading real models. Pure Node (no npm packages).
//
//   node tests/oracle/make_tokenizers.mjs [--data DIR] [--only NAME[,NAME...]] [OUTDIR]
//
// DIR defaults to $MGT_DATA or /work/shared/data (needs gpt2/{vocab.json,merges.txt} and
// tiktoken/cl100k_base.{tiktoken,json}); OUTDIR defaults to tests/data/tokenizers.
// Output is deterministic (same inputs -> byte-identical files).
//
// Files (see tests/data/README.md):
//   llama3-cl100k.json  cl100k_base ranks as BPE vocab+merges (100,256 tokens), cl100k's split
//                       pattern from cl100k_base.json (contractions spelled out, no (?i:)), ignore_merges, cl100k + Llama-3 special tokens, TemplateProcessing
//                       that prepends <|begin_of_text|>. With add_special_tokens=false it must give
//                       exactly tiktoken cl100k_base's ids (with the Llama-3 specials added).
//   llama3.json         the same with Llama 3's real split pattern ((?i:...) contractions), its
//                       post-processor shape (Sequence [ByteLevel, TemplateProcessing]) and merges
//                       as "a b" strings (llama3-cl100k.json has ["a","b"] arrays).
//   qwen2.json          GPT-2 vocab/merges (without <|endoftext|> in the model vocab), NFC
//                       normalizer, Qwen2's split pattern (single digits), added tokens
//                       <|endoftext|> <|im_start|> <|im_end|>, ByteLevel post-processor (no BOS).
//   added-tokens.json   GPT-2 pipeline plus NFC normalizer and added tokens with lstrip / rstrip,
//                       non-special tokens (normalized and not), a token already in the vocab,
//                       overlapping tokens, and a template that adds <bos> ... <eos>.
// llama3*.json are ~4 MB each and are not committed (generate them at test time); qwen2.json and
// added-tokens.json are ~1.8 MB and committed.

import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
let data = process.env.MGT_DATA || "/work/shared/data";
let outdir = join(here, "..", "data", "tokenizers");
let only = null;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--data") data = argv[++i];
  else if (argv[i] === "--only") only = new Set(argv[++i].split(","));
  else if (argv[i].startsWith("-")) {
    console.error("usage: node make_tokenizers.mjs [--data DIR] [--only NAME,...] [OUTDIR]");
    process.exit(2);
  } else outdir = argv[i];
}
mkdirSync(outdir, { recursive: true });

// ---- GPT-2 bytes_to_unicode ----
const byteToChar = [];
{
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  bs.forEach((b, i) => (byteToChar[b] = String.fromCodePoint(cs[i])));
}
const latin1ToByteLevel = (s) => { let r = ""; for (let i = 0; i < s.length; i++) r += byteToChar[s.charCodeAt(i)]; return r; };

// ---- patterns ----
// cl100k_base's pattern as given in DATA/tiktoken/cl100k_base.json (contractions spelled out in
// both cases, as js-tiktoken has it, since JS regexes lack inline (?i:)), and Llama 3's published
// pattern, which is cl100k's original with a (?i:...) group. They differ only where Unicode case
// folding matters inside the contraction group (e.g. "'ſ", U+017F LATIN SMALL LETTER LONG S).
const PAT_CL100K = JSON.parse(readFileSync(join(data, "tiktoken", "cl100k_base.json"), "utf8")).pat_str;
const PAT_LLAMA3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const PAT_QWEN2 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

// ---- JSON writer: stable, one vocab/merge entry per line (diff-friendly) ----
function writeTokenizer(name, t, mergesAsArrays) {
  const { vocab, merges, ...rest } = t.model;
  const head = JSON.stringify({ ...t, model: { ...rest, vocab: "@V", merges: "@M" } }, null, 2);
  const v = "{\n" + vocab.map(([tok, id]) => `      ${JSON.stringify(tok)}: ${id}`).join(",\n") + "\n    }";
  const m = "[\n" + merges.map(([a, b]) => "      " + (mergesAsArrays ? JSON.stringify([a, b]) : JSON.stringify(a + " " + b))).join(",\n") + "\n    ]";
  const s = head.replace('"@V"', () => v).replace('"@M"', () => m) + "\n";
  JSON.parse(s); // sanity
  const p = join(outdir, name);
  writeFileSync(p, s);
  console.error(`${p}: ${vocab.length} vocab, ${merges.length} merges, ${t.added_tokens.length} added, ${s.length} bytes`);
}

const addedTok = (id, content, o = {}) => ({
  id, content, single_word: false, lstrip: o.lstrip ?? false, rstrip: o.rstrip ?? false,
  normalized: o.normalized ?? false, special: o.special ?? true,
});
const splitPretok = (pat, trimOffsets) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: pat }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: trimOffsets, use_regex: false },
  ],
});
const template = (bos, bosId, eos, eosId) => {
  const single = [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }];
  const pair = [...single, { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }];
  const special_tokens = { [bos]: { id: bos, ids: [bosId], tokens: [bos] } };
  if (eos) {
    single.push({ SpecialToken: { id: eos, type_id: 0 } });
    pair.splice(2, 0, { SpecialToken: { id: eos, type_id: 0 } });
    pair.push({ SpecialToken: { id: eos, type_id: 1 } });
    special_tokens[eos] = { id: eos, ids: [eosId], tokens: [eos] };
  }
  return { type: "TemplateProcessing", single, pair, special_tokens };
};

// ---- tiktoken ranks -> BPE vocab + merges ----
function cl100kVocabMerges() {
  const lines = readFileSync(join(data, "tiktoken", "cl100k_base.tiktoken"), "utf8").split("\n").filter((l) => l.length);
  const ranks = new Map(); // latin1 string -> rank
  const byRank = [];
  for (const l of lines) {
    const [b64, r] = l.split(" ");
    const s = Buffer.from(b64, "base64").toString("latin1");
    ranks.set(s, +r);
    byRank[+r] = s;
  }
  for (let b = 0; b < 256; b++) if (!ranks.has(String.fromCharCode(b))) throw new Error(`byte ${b} has no rank`);
  const merges = [];
  for (let r = 0; r < byRank.length; r++) {
    const tok = byRank[r];
    if (tok === undefined) throw new Error(`rank ${r} missing`);
    if (tok.length < 2) continue;
    // BPE on the token's bytes using only ranks < r
    let parts = tok.split("");
    for (;;) {
      let best = -1, bestRank = r;
      for (let i = 0; i + 1 < parts.length; i++) {
        const q = ranks.get(parts[i] + parts[i + 1]);
        if (q !== undefined && q < bestRank) { bestRank = q; best = i; }
      }
      if (best < 0) break;
      parts.splice(best, 2, parts[best] + parts[best + 1]);
    }
    if (parts.length !== 2) throw new Error(`rank ${r}: BPE below its rank gives ${parts.length} parts`);
    merges.push([latin1ToByteLevel(parts[0]), latin1ToByteLevel(parts[1])]);
  }
  const vocab = byRank.map((s, r) => [latin1ToByteLevel(s), r]);
  return { vocab, merges };
}

function gpt2VocabMerges() {
  const v = JSON.parse(readFileSync(join(data, "gpt2", "vocab.json"), "utf8"));
  const vocab = Object.entries(v).sort((a, b) => a[1] - b[1]);
  const merges = readFileSync(join(data, "gpt2", "merges.txt"), "utf8")
    .split("\n").filter((l) => l.length && !l.startsWith("#version")).map((l) => l.split(" "));
  return { vocab, merges };
}

const bpeModel = (vm, o) => ({
  type: "BPE", dropout: null, unk_token: null,
  continuing_subword_prefix: o.csp ?? null, end_of_word_suffix: o.eows ?? null,
  fuse_unk: false, byte_fallback: false, ignore_merges: o.ignoreMerges,
  vocab: vm.vocab, merges: vm.merges,
});
const want = (n) => !only || only.has(n);

// ---- llama3-style ----
if (want("llama3-cl100k") || want("llama3")) {
  const vm = cl100kVocabMerges();
  const cl = JSON.parse(readFileSync(join(data, "tiktoken", "cl100k_base.json"), "utf8"));
  const llamaSpecial = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"];
  const firstLlama = Math.max(...Object.values(cl.special_tokens)) + 1; // 100277
  const added = [
    ...Object.entries(cl.special_tokens).map(([c, id]) => addedTok(id, c)),
    ...llamaSpecial.map((c, i) => addedTok(firstLlama + i, c)),
  ].sort((a, b) => a.id - b.id);
  // HF tokenizers ignores the "id" of an added token that is not in the model vocab and gives it
  // the next free id (vocab size, then max id + 1, in list order). cl100k's special ids have holes
  // (100256, 100261..100275), so fill them with unused special tokens to keep the ids as written.
  for (let id = vm.vocab.length, i = 0; i < added.length; id++, i++)
    if (added[i].id !== id) added.splice(i, 0, addedTok(id, `<|cl100k_unused_${id}|>`));
  const bos = "<|begin_of_text|>", bosId = firstLlama;
  const base = {
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
  };
  const dec = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  if (want("llama3-cl100k"))
    writeTokenizer("llama3-cl100k.json", {
      ...base,
      pre_tokenizer: splitPretok(PAT_CL100K, true),
      post_processor: template(bos, bosId),
      decoder: dec,
      model: bpeModel(vm, { ignoreMerges: true }),
    }, true);
  if (want("llama3"))
    writeTokenizer("llama3.json", {
      ...base,
      pre_tokenizer: splitPretok(PAT_LLAMA3, true),
      post_processor: {
        type: "Sequence",
        processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          template(bos, bosId),
        ],
      },
      decoder: dec,
      model: bpeModel(vm, { ignoreMerges: true }),
    }, false);
}

// ---- qwen2-style ----
if (want("qwen2")) {
  const vm = gpt2VocabMerges();
  vm.vocab = vm.vocab.filter(([t]) => t !== "<|endoftext|>");
  const n = vm.vocab.length; // 50256
  const bl = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  writeTokenizer("qwen2.json", {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [addedTok(n, "<|endoftext|>"), addedTok(n + 1, "<|im_start|>"), addedTok(n + 2, "<|im_end|>")],
    normalizer: { type: "NFC" },
    pre_tokenizer: splitPretok(PAT_QWEN2, false),
    post_processor: bl,
    decoder: bl,
    model: bpeModel(vm, { ignoreMerges: false, csp: "", eows: "" }),
  }, false);
}

// ---- added tokens: lstrip / rstrip / non-special / normalized ----
if (want("added-tokens")) {
  const vm = gpt2VocabMerges(); // includes <|endoftext|> = 50256 in the model vocab, like GPT-2
  const n = vm.vocab.length; // 50257
  const helloId = vm.vocab.find(([t]) => t === "Hello")[1]; // 15496
  const added = [
    addedTok(helloId, "Hello", { special: false, normalized: true }), // already in the vocab
    addedTok(50256, "<|endoftext|>", { normalized: true }),
    addedTok(n + 0, "<mask>", { lstrip: true }),
    addedTok(n + 1, "<sep>", { rstrip: true }),
    addedTok(n + 2, "<both>", { lstrip: true, rstrip: true }),
    addedTok(n + 3, "<user>", { special: false, normalized: false }),
    addedTok(n + 4, "hello world", { special: false, normalized: true }),
    addedTok(n + 5, "café", { special: false, normalized: true }), // precomposed; NFC text matches
    addedTok(n + 6, "naïve", { special: false, normalized: false }), // precomposed; raw text only
    addedTok(n + 7, "<|a|>", {}),
    addedTok(n + 8, "<|a|><|b|>", {}), // longest match wins over <|a|>
    addedTok(n + 9, " spaced ", { special: false, normalized: false }), // content with spaces
    addedTok(n + 10, "<bos>", {}),
    addedTok(n + 11, "<eos>", {}),
    addedTok(n + 12, "<lstrip-ns>", { special: false, lstrip: true, normalized: false }),
    addedTok(n + 13, "<rstrip-ns>", { special: false, rstrip: true, normalized: true }),
  ];
  writeTokenizer("added-tokens.json", {
    version: "1.0", truncation: null, padding: null,
    added_tokens: added,
    normalizer: { type: "NFC" },
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: template("<bos>", n + 10, "<eos>", n + 11),
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: bpeModel(vm, { ignoreMerges: false, csp: "", eows: "" }),
  }, true);
}
