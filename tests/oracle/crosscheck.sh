#!/bin/sh
# Cross-check the oracles against each other and print their throughput on KJV (one thread).
#
#   tests/oracle/crosscheck.sh [TOKDIR]     (TOKDIR as for make_fixtures.sh)
#
# Exit 0 when every check agrees, 1 otherwise, 77 when the oracles are unavailable.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
DATA=${MGT_DATA:-/work/shared/data}
TOKDIR=${1:-$root/tests/data/tokenizers}
KJV=$DATA/kjv/kjv.jsonl.zst
U=$root/tests/data/unicode.jsonl
A=$root/tests/data/added_tokens.jsonl
GPT2=$DATA/gpt2/tokenizer.json
TK=$DATA/tiktoken
"$here/setup.sh" || exit $?
[ -f "$TOKDIR/llama3.json" ] || node "$here/make_tokenizers.mjs" --data "$DATA" "$TOKDIR" || exit 1
w=$(mktemp -d "${TMPDIR:-/tmp}/mgt-crosscheck.XXXXXX")
trap 'rm -rf "$w"' EXIT INT TERM
pin=""; command -v taskset >/dev/null 2>&1 && pin="taskset -c 0"
E() { $pin node "$here/encode.mjs" "$@"; }
fail=0
same() { # same LABEL FILE1 FILE2 ...
  s_label=$1; s_ref=$2; shift 2
  for s_f in "$@"; do
    if ! cmp -s "$s_ref" "$s_f"; then
      s_n=$(awk 'NR==FNR{a[FNR]=$0;next} a[FNR]!=$0' "$s_ref" "$s_f" | wc -l)
      echo "DIFF  $s_label: $(basename "$s_ref") vs $(basename "$s_f"): $s_n lines differ"; fail=1; return
    fi
  done
  echo "OK    $s_label ($(wc -l <"$s_ref") docs, $(wc -w <"$s_ref") ids)"
}
LLAMA='{"<|begin_of_text|>":100277,"<|end_of_text|>":100278,"<|reserved_special_token_0|>":100279,"<|reserved_special_token_1|>":100280,"<|reserved_special_token_2|>":100281,"<|reserved_special_token_3|>":100282,"<|start_header_id|>":100283,"<|end_header_id|>":100284,"<|reserved_special_token_4|>":100285,"<|eot_id|>":100286}'
QPAT="(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
QSPEC='{"<|im_start|>":50257,"<|im_end|>":50258}'

echo "throughput on KJV (tokenization only, one thread${pin:+, $pin}):"
for c in kjv:$KJV uni:$U; do
  n=${c%%:*}; f=${c#*:}
  t=""; [ $n = kjv ] && t=--time
  E $t --hf "$GPT2" "$f" >"$w/$n.hf"
  E $t --tiktoken gpt2 "$f" >"$w/$n.tk"
  E $t --gpt3 "$f" >"$w/$n.g3"
  E --tiktoken gpt2 --ordinary "$f" >"$w/$n.tko"
  E --tiktoken cl100k_base --extend-special "$LLAMA" "$f" >"$w/$n.cl"
  E $t --tiktoken-file "$TK/cl100k_base.tiktoken" --tiktoken-json "$TK/cl100k_base.json" --extend-special "$LLAMA" "$f" >"$w/$n.clf"
  E $t --tiktoken o200k_base "$f" >"$w/$n.o2"
  E --tiktoken-file "$TK/o200k_base.tiktoken" --tiktoken-json "$TK/o200k_base.json" "$f" >"$w/$n.o2f"
  E $t --no-special --hf "$TOKDIR/llama3-cl100k.json" "$f" >"$w/$n.l3c"
  E --no-special --hf "$TOKDIR/llama3.json" "$f" >"$w/$n.l3"
  E $t --hf "$TOKDIR/qwen2.json" "$f" >"$w/$n.qw"
  E --tiktoken gpt2 --pat "$QPAT" --nfc --extend-special "$QSPEC" "$f" >"$w/$n.qwtk"
done 2>&1 | sed 's/^/    /'
for n in kjv uni; do
  same "$n: GPT-2: HF tokenizers = tiktoken gpt2" "$w/$n.hf" "$w/$n.tk"
  if [ $n = kjv ]; then same "$n: GPT-2: tiktoken gpt2 = gpt-3-encoder" "$w/$n.tk" "$w/$n.g3"; else
    # gpt-3-encoder never produces <|endoftext|> (50256): compare the lines without that string
    grep -v -n -F '<|endoftext|>' "$U" | cut -d: -f1 >"$w/keep"
    for x in tk g3; do awk 'NR==FNR{k[$1]=1;next} (FNR in k)' "$w/keep" "$w/$n.$x" >"$w/$n.$x.nospecial"; done
    same "$n: GPT-2: tiktoken gpt2 = gpt-3-encoder, lines without <|endoftext|>" "$w/$n.tk.nospecial" "$w/$n.g3.nospecial"
  fi
  same "$n: GPT-2: tiktoken gpt2 encode_ordinary = gpt-3-encoder (Megatron GPT2BPETokenizer)" "$w/$n.tko" "$w/$n.g3"
  same "$n: cl100k: tiktoken bundled = rank file" "$w/$n.cl" "$w/$n.clf"
  same "$n: o200k: tiktoken bundled = rank file" "$w/$n.o2" "$w/$n.o2f"
  same "$n: cl100k: tiktoken = HF llama3-cl100k.json/llama3.json (no special)" "$w/$n.cl" "$w/$n.l3c" "$w/$n.l3"
  same "$n: qwen2: HF qwen2.json = tiktoken gpt2 + Qwen2 pattern + JS NFC" "$w/$n.qw" "$w/$n.qwtk"
done
E --hf "$TOKDIR/qwen2.json" "$A" >"$w/a.qw"; E --tiktoken gpt2 --pat "$QPAT" --nfc --extend-special "$QSPEC" "$A" >"$w/a.qwtk"
same "added_tokens: qwen2 HF = tiktoken" "$w/a.qw" "$w/a.qwtk"
# HF must see the added-token ids as written in the files (it silently renumbers otherwise)
for t in llama3-cl100k llama3 qwen2 added-tokens; do
  (cd "$here" && node -e '
    const { Tokenizer } = require("tokenizers"); const f = process.argv[1];
    const j = JSON.parse(require("fs").readFileSync(f, "utf8")); const t = Tokenizer.fromFile(f);
    const bad = j.added_tokens.filter((a) => t.tokenToId(a.content) !== a.id);
    if (bad.length) { console.log("DIFF  " + f + ": HF renumbers added tokens " + bad.map((a) => a.content).join(" ")); process.exit(1); }
    console.log("OK    " + f.split("/").pop() + ": HF keeps the " + j.added_tokens.length + " added-token ids");
  ' "$TOKDIR/$t.json") || fail=1
done
exit $fail
