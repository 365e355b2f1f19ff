#!/bin/sh
# mgt-dataset samples --dataset-type sft (Megatron's SFTDataset, lib/data/sft.c) against an
# independent Python reference of megatron/training/datasets/sft_dataset.py and
# sft_tokenizer.py written from their code (templates rendered with Python's own str.strip and
# str.replace; the conversation split, the per-turn target rule and its assertion, packing with
# context-parallel padding, truncation and final padding): every line, every field, for the
# three prompt formats, several sequence lengths around the packs' sizes and CP 1, 2 and 4 (with
# the per-document split of every row over the context ranks, Transformer Engine's
# thd_get_partitioned_indices, and its per-shard RoPE positions); the message layouts (messages, ShareGPT, Alpaca); and the bad lines, each refused with exit 3
# naming the line.  Token ids come from mgt-tokenize (equal to Hugging Face tokenizers': t0200).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
# the demo's tokenizer with Nemotron's special tokens added (ids 4096..4100)
cp "$SHARE/tokenizers/kjv-4k-chat/tokenizer.json" tok.json # kjv-4k with Nemotron's prompt tokens (contrib/kjv-chat.py)
cat >conv.jsonl <<'EOF'
{"messages": [{"role": "system", "content": "You are a scribe."}, {"role": "user", "content": "Who made the heaven?"}, {"role": "assistant", "content": "God created the heaven and the earth."}, {"role": "user", "content": "And then? /think"}, {"role": "assistant", "content": "  Light.  "}]}
{"messages": [{"role": "user", "content": "First, with no system turn."}, {"role": "assistant", "content": "Yea."}, {"role": "system", "content": ""}, {"role": "user", "content": "Second /no_think"}, {"role": "assistant", "content": "Amen."}, {"role": "system", "content": "Third. "}, {"role": "user", "content": "Count the tribes."}, {"role": "assistant", "content": "Twelve."}]}
{"messages": [{"role": "system", "content": "\u3000Tools\u00a0"}, {"role": "user", "content": "Weigh the shekel"}, {"role": "tool", "content": "{\"weight\": 11}"}, {"role": "assistant", "content": "Eleven grams, \u00e9t\u00e9 \u2014 \u05d0."}]}
{"conversations": [{"from": "human", "value": "Say amen"}, {"from": "gpt", "value": "Amen."}, {"from": "function", "value": "ok"}, {"from": "bard", "value": "Selah."}]}
{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "user", "value": "Why?"}, {"from": "chatgpt", "value": "Because."}]}
{"instruction": "Name a king", "input": "of Israel", "output": "David"}
{"prompt": "", "question": "Who slew Goliath?", "answer": "David, the son of Jesse, with a sling and a stone out of the brook."}
{"messages": [{"role": "system", "content": "Long."}, {"role": "user", "content": "Recite the beginning."}, {"role": "assistant", "content": "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters."}, {"role": "system", "content": "Dropped when the first is cut."}, {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
EOF
# the default format: the tokenizer's own chat_template (ChatML-like), beside tok.json
$PY - <<'PY'
import json
tmpl = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
        "{% if message.name is defined %}{{ message.name }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"chat_template": tmpl, "eos_token": "<|endoftext|>", "bos_token": {"content": "<|endoftext|>"}},
          open("tokenizer_config.json", "w"))
PY
# identity joins contents as they are: these split at spaces, so each turn tokenizes alone as in the whole
cat >ident.jsonl <<'EOF'
{"messages": [{"role": "system", "content": "Scribe:"}, {"role": "user", "content": " who begat Isaac?"}, {"role": "assistant", "content": " Abraham."}]}
{"messages": [{"role": "user", "content": "Amen"}, {"role": "assistant", "content": " and amen."}, {"role": "system", "content": "New"}, {"role": "user", "content": " day"}, {"role": "assistant", "content": " dawns"}]}
EOF
cat >ref.py <<'PY'
import json, subprocess, sys
bin_, tok, path, fmt, S, CP = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
if fmt == "default":  # the template as transformers renders it (jinja2, trim_blocks, lstrip_blocks)
    import jinja2
    cfg = json.load(open("tokenizer_config.json"))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    chat = env.from_string(cfg["chat_template"])
    specials = {k: (v["content"] if isinstance(v, dict) else v) for k, v in cfg.items() if k.endswith("_token")}
SHARE = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system", "tool": "tool",
         "function": "tool", "observation": "tool"}
def messages(o):
    if "messages" in o: return o["messages"]
    if "conversations" in o:
        c = o["conversations"]
        m = [] if SHARE.get(c[0]["from"], "user") == "system" else [{"role": "system", "content": ""}]
        return m + [{"role": SHARE.get(t["from"], "user"), "content": t["value"]} for t in c]
    first = lambda keys: next((o[k] for k in keys if isinstance(o.get(k), str) and o[k]), None)
    ins, out, ctx = first(["instruction", "prompt", "query", "question"]), first(["output", "response", "completion", "answer"]), first(["input", "context"])
    return [{"role": "system", "content": ""}, {"role": "user", "content": ins + "\n\n" + ctx if ctx else ins},
            {"role": "assistant", "content": out}]
def render_all(c):
    if fmt == "default":
        return chat.render(messages=c, add_generation_prompt=False, tools=None, documents=None, **specials)
    return "".join(render(m) for m in c)
def render(m):
    r, c = m["role"], m["content"]
    if fmt == "identity": return c
    if fmt == "nemotron-h-aligned":
        return {"system": "<SPECIAL_10>System\n" + c.strip() + "\n",
                "user": "<SPECIAL_11>User\n" + c.strip() + "\n" + "<SPECIAL_11>Assistant\n",
                "assistant": c.strip() + "\n"}.get(r, "")
    c2 = c.replace("/think", "").replace("/no_think", "").strip()
    return {"system": "<SPECIAL_10>System\n" + c2 + "\n", "user": "<SPECIAL_11>User\n" + c2 + "\n",
            "assistant": "<SPECIAL_11>Assistant\n" + c.strip() + "\n<SPECIAL_12>\n"}.get(r, "")
lines = [json.loads(l) for l in open(path, encoding="utf-8")]
convs = []
for o in lines:
    cs, cur = [], []
    for m in messages(o):
        if m["role"] == "system" and cur: cs.append(cur); cur = []
        cur.append(m)
    if cur: cs.append(cur)
    convs.append(cs)
texts = sorted({render_all(c) for cs in convs for c in cs} |
               ({render(m) for cs in convs for c in cs for m in c} if fmt != "default" else set()) |
               {"<SPECIAL_233>", "<unk>", "<|endoftext|>"})
enc = subprocess.run([bin_ + "/mgt-tokenize", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok,
                      "--tokenizer-hf-no-include-special-tokens", "--jsonl"],
                     input="".join(json.dumps({"text": t}) + "\n" for t in texts), capture_output=True, text=True, check=True)
ids = {t: [int(x) for x in l.split()] for t, l in zip(texts, enc.stdout.split("\n"))}
def special(name): return ids[name][0]
pad = special({"nemotron-h-aligned": "<SPECIAL_233>", "default": "<|endoftext|>"}.get(fmt, "<unk>"))
def conversation(c):
    tokens = ids[render_all(c)]
    target, idx = list(tokens), 0
    if fmt == "default":  # every token trained, nothing checked
        return tokens, target
    for k, m in enumerate(c):
        r = m["role"].lower()
        if r == "assistant":
            assert len(m["content"]) > 0 and c[k - 1]["role"].lower() in ("user", "tool")
        tt = ids[render(m)] if render(m) else []
        if r in ("system", "user", "tool"): target[idx:idx + len(tt)] = [-100] * len(tt)
        elif r == "assistant" and fmt == "nemotron-nano-v2": target[idx:idx + 3] = [-100] * 3
        assert tokens[idx:idx + len(tt)] == tt, "turn mismatch"
        idx += len(tt)
    assert idx == len(tokens)
    return tokens, target
for n, cs in enumerate(convs):
    pt, py, pp, cu = [], [], [], [0]
    for c in cs:
        t, y = conversation(c)
        pt += t; py += y; pp += list(range(len(t)))
        if CP > 1 and len(pt) % (2 * CP):
            k = 2 * CP - len(pt) % (2 * CP)
            pt += [pad] * k; py += [pad] * k; pp += list(range(pp[-1] + 1, pp[-1] + 1 + k))
        cu.append(len(pt))
        if len(pt) >= S + 1:
            pt = pt[:S] + [pad]; py = py[:S] + [pad]; pp = pp[:S + 1]; cu[-1] = S
            break
    if len(pt) < S + 1:
        k = S + 1 - len(pt)
        pt += [pad] * k; py += [pad] * k; pp += list(range(pp[-1] + 1, pp[-1] + 1 + k)); cu[-1] = S
    labels = py[1:]
    o = {"line": n, "tokens": pt[:-1], "labels": labels, "position_ids": pp[:-1],
         "loss_mask": [0 if l == pad or l == -100 else 1 for l in labels], "cu_seqlens": cu,
         "max_seqlen": max(b - a for a, b in zip(cu, cu[1:]))}
    if CP > 1:
        # TE thd_partition_indices_kernel, as membership: position p of a segment at offset o
        # lies in chunk o // (L / 2CP), which rank chunk (< CP) or 2CP-1-chunk keeps
        def owner(p):
            k = max(i for i in range(len(cu) - 1) if cu[i] <= p)
            c = (cu[k + 1] - cu[k]) // (2 * CP)
            ch = (p - cu[k]) // c
            return ch if ch < CP else 2 * CP - 1 - ch
        o["cp_indices"] = [[p for p in range(S) if owner(p) == r] for r in range(CP)]
        # Megatron's per-shard RoPE positions (rope_utils.py _apply_rotary_pos_emb_thd under CP):
        # local index q of a segment's part with h = (L/CP)/2 is at rank*h + q (q < h), else
        # L - (rank+1)*h + (q - h); the dataset's position ids there must say the same
        for r in range(CP):
            got = [pp[p] for p in o["cp_indices"][r]]
            want = []
            for a, b in zip(cu, cu[1:]):
                L = b - a; h = L // CP // 2
                want += [r * h + q if q < h else L - (r + 1) * h + (q - h) for q in range(L // CP)]
            assert got == want, ("per-shard RoPE positions", r, got, want)
    print(json.dumps(o))
PY
check() { # FILE FORMAT S CP: mgt-dataset's samples = the reference's, line by line
	$PY ref.py "$BIN" tok.json "$1" "$2" "$3" "$4" >want.jsonl 2>ref.err || { sed 's/^/#   /' ref.err | tail -3; return 1; }
	"$BIN/mgt-dataset" samples "$1" --dataset-type sft --tokenizer-model tok.json --sft-tokenizer-prompt-format "$2" \
		--seq-length "$3" --context-parallel-size "$4" >got.jsonl 2>err || { sed 's/^/#   /' err; return 1; }
	$PY - <<'PY'
import json, sys
w = [json.loads(l) for l in open("want.jsonl")]; g = [json.loads(l) for l in open("got.jsonl")]
if len(w) != len(g): sys.exit(f"# {len(g)} samples, expected {len(w)}")
for a, b in zip(w, g):
    for k in a:
        if a[k] != b[k]: sys.exit(f"# line {a['line']}: {k} differs:\n#  want {a[k]}\n#  got  {b[k]}")
print(f"# {len(g)} samples equal, {sum(sum(x['loss_mask']) for x in g)} loss tokens")
PY
}
for f in nemotron-h-aligned nemotron-nano-v2; do
	for s in 16 24 31 32 33 64 128; do ok "$f, S $s: every field of every line = the reference" check conv.jsonl $f $s 1; done
	for s in 16 32 128; do ok "$f, S $s, CP 2: conversations padded to 4, per-document split = the reference" check conv.jsonl $f $s 2; done
done
for s in 32 128; do ok "nemotron-h-aligned, S $s, CP 4: padded to 8, per-document split = the reference" check conv.jsonl nemotron-h-aligned $s 4; done
for s in 8 12 16 64; do ok "identity, S $s = the reference" check ident.jsonl identity $s 1; done
ok "identity, S 16, CP 2 = the reference" check ident.jsonl identity 16 2
if $PY -c 'import jinja2' 2>/dev/null; then
	for s in 16 64 128; do ok "default (the tokenizer's chat_template), S $s = the reference (jinja2)" check conv.jsonl default $s 1; done
	ok "default, S 64, CP 2 = the reference" check conv.jsonl default 64 2
else
	skip "python3-jinja2 missing: the default format's reference"
fi
# a line with loss: its tokens' labels are the assistant's
ok "the loss falls on assistant content only" sh -c "$BIN/mgt-dataset samples conv.jsonl --dataset-type sft \
	--tokenizer-model tok.json --seq-length 128 --samples 5 | $PY -c '
import json, subprocess, sys
s = json.loads(sys.stdin.read())
ids = [l for l, m in zip(s[\"labels\"], s[\"loss_mask\"]) if m]
out = subprocess.run([\"$BIN/mgt-tokenize\", \"--tokenizer-type\", \"HuggingFaceTokenizer\", \"--tokenizer-model\", \"tok.json\",
    \"--decode\"], input=\" \".join(map(str, ids)), capture_output=True, text=True).stdout
sys.exit(out != \"David\n\")'"
bad() { # DESCRIPTION PATTERN LINE-JSON [FORMAT [TOKENIZER]]: exit 3, stderr names the line and PATTERN
	printf '%s\n' '{"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]}' "$3" >bad.jsonl
	"$BIN/mgt-dataset" samples bad.jsonl --dataset-type sft --tokenizer-model "${5:-tok.json}" --seq-length 32 \
		--sft-tokenizer-prompt-format "${4:-nemotron-h-aligned}" >/dev/null 2>err
	r=$?
	[ $r = 3 ] && grep -q "bad.jsonl:2:" err && grep -q -- "$2" err || { echo "# exit $r: $(cat err)"; return 1; }
}
ok "an empty assistant turn" bad x "empty assistant turn" \
	'{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]}'
ok "an assistant turn after a system turn" bad x "must follow a user or tool turn" \
	'{"messages": [{"role": "system", "content": "a"}, {"role": "assistant", "content": "b"}]}'
ok "an unknown role" bad x 'role "narrator"' \
	'{"messages": [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}]}'
ok "no messages" bad x "no messages" '{"messages": []}'
ok "a non-string content" bad x 'expected string "role" and "content"' \
	'{"messages": [{"role": "user", "content": ["a"]}]}'
ok "a pretraining text line" bad x "pretraining data" '{"text": "In the beginning"}'
ok "not JSON" bad x "bad.jsonl:2" '{"messages": '
ok "identity: turns the tokenizer merges across (Megatron's assertion)" bad x "alone differ" \
	'{"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "content": "he end"}]}' identity
noans() { # a conversation without an assistant turn: Megatron trains nothing on it (every label -100)
	printf '%s\n' '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a question"}]}' >noans.jsonl
	"$BIN/mgt-dataset" samples noans.jsonl --dataset-type sft --tokenizer-model tok.json --seq-length 32 >noans.out 2>err &&
		$PY -c 'import json,sys; s=json.load(open("noans.out")); sys.exit(sum(s["loss_mask"]) != 0 or bool(set(s["labels"]) - {-100, 4099}))'
}
ok "a conversation without an assistant turn: no loss (every label -100 or the pad)" noans
raises() { # the default format's template refuses a role: exit 3 with its raise_exception message and the line
	mkdir -p rt && cp tok.json rt/tokenizer.json &&
		$PY -c 'import json; json.dump({"chat_template": "{% for m in messages %}{% if m.role == \"system\" %}{{ raise_exception(\"System role not supported\") }}{% endif %}{{ m.content }}{% endfor %}", "pad_token": "<unk>"}, open("rt/tokenizer_config.json", "w"))' &&
		bad x "System role not supported" '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}' default rt
}
ok "a role the chat template rejects: exit 3 with its raise_exception message" raises
ok "an empty file" sh -c ": >empty.jsonl; $BIN/mgt-dataset samples empty.jsonl --dataset-type sft --tokenizer-model tok.json \
	--seq-length 8 2>err; test \$? = 3 && grep -q 'no lines' err"
ok "a tokenizer without <SPECIAL_233>: exit 2 naming it" sh -c "$BIN/mgt-dataset samples conv.jsonl --dataset-type sft \
	--tokenizer-model $SHARE/tokenizers/kjv-4k --seq-length 8 2>err; test \$? = 2 && grep -q 'SPECIAL_233' err"
ok "--sft-tokenizer-prompt-format default without a tokenizer_config.json: exit 2 naming chat_template" sh -c \
	"$BIN/mgt-dataset samples conv.jsonl --dataset-type sft --tokenizer-model $SHARE/tokenizers/kjv-4k/tokenizer.json \
	--seq-length 8 --sft-tokenizer-prompt-format default 2>err; test \$? = 2 && grep -q 'chat_template' err"
ok "CP 2 with a length not a multiple of 4: exit 2" sh -c "$BIN/mgt-dataset samples conv.jsonl --dataset-type sft \
	--tokenizer-model tok.json --seq-length 30 --context-parallel-size 2 2>err; test \$? = 2"
done_testing
