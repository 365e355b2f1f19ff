#!/usr/bin/python3
"""Make the shipped chat tokenizer and chat set of the fine-tuning example (contrib/sft-example.sh,
mgt-train(1) "SUPERVISED FINE-TUNING").

usage: contrib/kjv-chat.py [ROOT]     (default: the repository; writes under ROOT/share/mgt)

share/mgt/tokenizers/kjv-4k-chat/
  tokenizer.json         the demo's kjv-4k tokenizer (ids 0..4095 unchanged) with Nemotron's
                         prompt tokens added as special tokens: <SPECIAL_10> <SPECIAL_11>
                         <SPECIAL_12> <SPECIAL_233> <unk> at ids 4096..4100, the tokens of
                         Megatron's SFTTokenizer prompt formats (megatron/core/tokenizers/text/
                         libraries/sft_tokenizer.py).
  tokenizer_config.json  a chat_template that renders a conversation as Megatron's
                         nemotron-nano-v2 prompt format does (system "<SPECIAL_10>System\\n" c
                         "\\n", user "<SPECIAL_11>User\\n" c "\\n", assistant "<SPECIAL_11>Assistant\\n"
                         c "\\n<SPECIAL_12>\\n", /think and /no_think removed and stripped as it
                         does; add_generation_prompt: "<SPECIAL_11>Assistant\\n"); eos_token
                         <SPECIAL_12> (the end of an assistant turn: where mgt-eval generate --chat
                         stops), pad_token <unk> (the format's pad).
share/mgt/data/kjv-chat.jsonl.zst
  Megatron SFT lines ({"messages": [...]}, sft_dataset.py): every verse of the chapters the demo
  trains on (Megatron's 969,30,1 split of one document per chapter: the first 1,152), as one
  conversation: system "Continue the verse.", user the first half of the verse's words (at
  least one), assistant the rest.  Verses of fewer than 4 words are left out.  Six conversations
  a line (a line is one packed sample: its conversations in order), in chapter order.
Deterministic; zstd -19.  Needs python3 and zstd.
"""
import json
import os
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SHARE = os.path.join(ROOT, "share", "mgt")
SPECIALS = ["<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<SPECIAL_233>", "<unk>"]
TRAIN_CHAPTERS = 1152
PER_LINE = 6

# nemotron-nano-v2 in Jinja2: content' = content.replace('/think','').replace('/no_think','').strip()
# for system and user, content.strip() for the assistant (sft_tokenizer.py), tool turns render nothing
TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}"
    "{{ '<SPECIAL_10>System\\n' + m['content'].replace('/think', '').replace('/no_think', '').strip() + '\\n' }}"
    "{% elif m['role'] == 'user' %}"
    "{{ '<SPECIAL_11>User\\n' + m['content'].replace('/think', '').replace('/no_think', '').strip() + '\\n' }}"
    "{% elif m['role'] == 'assistant' %}"
    "{{ '<SPECIAL_11>Assistant\\n' + m['content'].strip() + '\\n<SPECIAL_12>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<SPECIAL_11>Assistant\\n' }}{% endif %}"
)


def tokenizer():
    t = json.load(open(os.path.join(SHARE, "tokenizers", "kjv-4k", "tokenizer.json"), encoding="utf-8"))
    n = len(t["model"]["vocab"]) + len(t["added_tokens"])
    for k, name in enumerate(SPECIALS):
        t["added_tokens"].append({"id": n + k, "content": name, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
    out = os.path.join(SHARE, "tokenizers", "kjv-4k-chat")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024,
           "bos_token": None, "eos_token": "<SPECIAL_12>", "pad_token": "<unk>", "unk_token": "<unk>",
           "chat_template": TEMPLATE}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")


def conversations():
    kjv = subprocess.run(["zstd", "-dcq", os.path.join(SHARE, "data", "kjv.jsonl.zst")], check=True,
                         capture_output=True).stdout.decode("utf-8").splitlines()
    for line in kjv[:TRAIN_CHAPTERS]:
        for v in json.loads(line)["text"].split("\n")[2:]:
            w = v.partition(" ")[2].split()
            if len(w) < 4:
                continue
            h = len(w) // 2
            yield [{"role": "system", "content": "Continue the verse."},
                   {"role": "user", "content": " ".join(w[:h])},
                   {"role": "assistant", "content": " ".join(w[h:])}]


def chat_set():
    lines, cur = [], []
    for c in conversations():
        cur += c
        if len(cur) == 3 * PER_LINE:
            lines.append(json.dumps({"messages": cur}, ensure_ascii=False))
            cur = []
    if cur:
        lines.append(json.dumps({"messages": cur}, ensure_ascii=False))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    out = os.path.join(SHARE, "data", "kjv-chat.jsonl.zst")
    subprocess.run(["zstd", "-19", "-qf", "--no-check", "-o", out], input=data, check=True)


tokenizer()
chat_set()
