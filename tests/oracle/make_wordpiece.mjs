#!/usr/bin/env node
// Hugging Face tokenizer.json files for BERT WordPiece, built from a vocab.txt, as transformers'
// BertTokenizerFast (convert_slow_tokenizer.BertConverter) builds them and Megatron HEAD's
// BertWordPieceLowerCase / BertWordPieceCase use them: BertNormalizer (clean text, CJK spacing,
// lowercase + strip accents only for the uncased one), BertPreTokenizer, WordPiece ("##",
// 100 characters, [UNK]), TemplateProcessing [CLS] $A [SEP], WordPiece decoder; [PAD] [UNK]
// [CLS] [SEP] [MASK] as special added tokens (normalized: false); the cased one also gets
// Megatron HEAD's <extra_id_0..99> (build_tokenizer.py) as special added tokens at V..V+99.
// Pure Node (no npm packages); deterministic output.
//
//   node tests/oracle/make_wordpiece.mjs VOCAB.txt OUTDIR
//
// Writes OUTDIR/bert-uncased.json (from VOCAB.txt), OUTDIR/vocab-cased.txt (a cased test
// vocabulary derived mechanically from the uncased one: its lines, then, for every token made of
// ASCII lower-case letters, with or without "##", its Capitalized and UPPER forms when new, then
// a few accented capitals; the real bert-base-cased vocab is not on this machine) and
// OUTDIR/bert-cased.json (from vocab-cased.txt).

import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const [vocabPath, outdir] = process.argv.slice(2);
if (!vocabPath || !outdir) {
  console.error("usage: node make_wordpiece.mjs VOCAB.txt OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });

const readVocab = (p) => {
  const lines = readFileSync(p, "utf8").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
};

function cased(lines) {
  const have = new Set(lines), out = lines.slice();
  const add = (t) => { if (!have.has(t)) { have.add(t); out.push(t); } };
  for (const t of lines) {
    const m = /^(##)?([a-z]+)$/.exec(t);
    if (!m) continue;
    const p = m[1] || "", w = m[2];
    add(p + w[0].toUpperCase() + w.slice(1));
    if (w.length > 1) add(p + w.toUpperCase());
  }
  for (const t of ["É", "Ç", "Ü", "Ö", "Ä", "Å", "Ñ", "Σ", "Ω", "Д", "Ж", "café", "Café", "naïve", "##é", "##ü"]) add(t);
  return out;
}

const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
const added = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

function tokenizerJson(lines, lowercase, extraIds) {
  const vocab = {};
  lines.forEach((t, i) => { if (!(t in vocab)) vocab[t] = i; });
  const addedTokens = specials.map((s) => added(vocab[s], s)).sort((a, b) => a.id - b.id);
  for (let i = 0; i < extraIds; i++) addedTokens.push(added(lines.length + i, `<extra_id_${i}>`));
  const st = (s) => ({ id: s, ids: [vocab[s]], tokens: [s] });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
        { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: { "[CLS]": st("[CLS]"), "[SEP]": st("[SEP]") },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}

const uncased = readVocab(vocabPath);
writeFileSync(join(outdir, "bert-uncased.json"), JSON.stringify(tokenizerJson(uncased, true, 0)));
const c = cased(uncased);
writeFileSync(join(outdir, "vocab-cased.txt"), c.join("\n") + "\n");
writeFileSync(join(outdir, "bert-cased.json"), JSON.stringify(tokenizerJson(c, false, 100)));
console.error(`make_wordpiece.mjs: ${uncased.length} uncased tokens, ${c.length} cased tokens (+100 <extra_id_N>)`);
