#!/bin/sh
# Chat templates (mgt-tokenize --chat, lib/tok/jinja_*.c) against Jinja2 as Hugging Face
# transformers runs them (chat_template_utils.py: ImmutableSandboxedEnvironment(trim_blocks=True,
# lstrip_blocks=True, loopcontrols), tojson = json.dumps(ensure_ascii=False), raise_exception,
# strftime_now; special tokens then the line's keys as variables) with Debian's python3-jinja2:
#  - every template of tests/data/chat/templates (real models' templates, sources in the README
#    there) x every conversation of tests/data/chat/conversations.jsonl, byte for byte; where
#    Jinja2 raises, mgt-tokenize must fail too, and with raise_exception's own message;
#  - random templates (chat_fuzz.py): the same text, or a failure (full tier: more seeds; the
#    quick tier runs seed 1);
#  - the template and special tokens read from the tokenizer_config.json beside
#    --tokenizer-model;
#  - exit statuses and messages: 4 for a template that does not parse or uses what the engine
#    refuses (file and template line named), 3 for a template's raise_exception or a bad JSONL
#    line (input line named), 2 for --chat without a template.
. "$(dirname "$0")/lib.sh"
D=$ROOT/tests/data/chat
TK=$BIN/mgt-tokenize
CONV=$D/conversations.jsonl

# the special tokens both sides get: transformers passes special_tokens_map's strings
mkdir -p "$T/tok"
cat >"$T/tok/tokenizer_config.json" <<'JSON'
{"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "pad_token": "<pad>", "unk_token": "<unk>"}
JSON

# ref TEMPLATE CONV: one JSON line per conversation, {"text": ...} or {"error": MESSAGE}
ref() {
	$PY - "$1" "$2" <<'PY'
import json, sys
from datetime import datetime
import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(fmt):  # transformers: datetime.now().strftime(fmt); pinned here
    return datetime(2024, 7, 26).strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
t = env.from_string(open(sys.argv[1], encoding="utf-8").read())
special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
for line in open(sys.argv[2], encoding="utf-8"):
    kw = json.loads(line)
    # apply_chat_template: render(messages=, tools=tool_schemas, documents=documents,
    # add_generation_prompt=, **{**special_tokens_map, **kwargs}); None when not given
    for k, v in (("add_generation_prompt", False), ("tools", None), ("documents", None)):
        kw.setdefault(k, v)
    try:
        print(json.dumps({"text": t.render(**{**special, **kw})}, ensure_ascii=False))
    except TemplateError as e:
        kind = "raise_exception" if type(e) is TemplateError else type(e).__name__
        print(json.dumps({"error": str(e), "kind": kind}, ensure_ascii=False))
    except Exception as e:
        print(json.dumps({"error": str(e), "kind": type(e).__name__}, ensure_ascii=False))
PY
}

# got TEMPLATE CONV FLAGS...: mgt-tokenize --chat on each line alone: {"text"} or {"rc", "err"}
got() {
	tmpl=$1 conv=$2; shift 2
	: >"$T/got"
	while IFS= read -r line; do
		printf '%s\n' "$line" >"$T/one.jsonl"
		if $TK --chat --chat-template "$tmpl" --tokenizer-model "$T/tok/tokenizer.json" --chat-date 2024-07-26 "$@" \
			-i "$T/one.jsonl" >"$T/out" 2>"$T/err"; then
			cat "$T/out" >>"$T/got"
		else
			echo $? | $PY -c 'import json,sys; print(json.dumps({"rc": int(sys.stdin.read()), "err": open(sys.argv[1]).read()}))' "$T/err" >>"$T/got"
		fi
	done <"$conv"
}

# same TEMPLATE: every conversation renders as Jinja2 renders it (or fails as it fails)
same() {
	ref "$1" "$CONV" >"$T/want" || return 1
	got "$1" "$CONV" || return 1
	$PY - "$T/want" "$T/got" "$1" <<'PY'
import json, sys
want = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
name = sys.argv[3].rsplit("/", 1)[-1]
assert len(want) == len(got), (len(want), len(got))
bad, texts, raised = 0, 0, 0
for i, (w, g) in enumerate(zip(want, got), 1):
    if "text" in w:
        texts += 1
        if g.get("text") != w["text"]:
            bad += 1
            print(f"# {name} conversation {i}:\n#  want {w['text']!r:.600}\n#  got  {g.get('text', g)!r:.600}")
        continue
    raised += 1
    # Jinja2 raised: mgt-tokenize must fail (exit 3); raise_exception's message must be the same
    ok = "rc" in g and g["rc"] == 3
    if ok and w["kind"] == "raise_exception":
        ok = ("raise_exception: " + w["error"] + "\n") in g["err"]
    if not ok:
        bad += 1
        print(f"# {name} conversation {i}: jinja2 raised {w['kind']}: {w['error']!r}; mgt-tokenize: {g!r:.400}")
print(f"# {name}: {len(want)} conversations, {texts} rendered, {raised} raised, {bad} differ")
sys.exit(1 if bad else 0)
PY
}

have_jinja=
$PY -c 'import jinja2' 2>/dev/null && have_jinja=1
n_tmpl=0
for tmpl in "$D"/templates/*.jinja; do
	n_tmpl=$((n_tmpl + 1))
	name=${tmpl##*/}
	if [ -n "$have_jinja" ]; then
		ok "$name x conversations.jsonl = python3-jinja2 (transformers' environment)" same "$tmpl"
	else
		skip "$name: python3-jinja2 is not installed (contrib/install-deps.sh test)"
	fi
done
n_conv=$(wc -l <"$CONV")
echo "# $n_tmpl templates x $n_conv conversations"

# random templates (tests/cli/chat_fuzz.py: expressions, statements, whitespace control) render
# as jinja2 renders them, or are refused; never differently.  Quick tier: 200 of each kind; full
# tier: 3 x 1,000 more
fuzz() { $PY "$ROOT/tests/cli/chat_fuzz.py" "$TK" "$@" >"$T/fuzz" 2>&1; r=$?; grep -v '^# DIFFERS\|^#   ' "$T/fuzz"; [ $r = 0 ] || head -12 "$T/fuzz"; return $r; }
if [ -n "$have_jinja" ]; then
	ok "200 random templates of each kind = python3-jinja2 (seed 1)" fuzz 1 200
	for seed in 2 3 4; do
		full_only "1,000 random templates of each kind, seed $seed" && ok "1,000 random templates of each kind = python3-jinja2 (seed $seed)" fuzz $seed 1000
	done
else
	skip "random templates: python3-jinja2 is not installed"
fi

# the template and the special tokens from the tokenizer_config.json beside --tokenizer-model
cfg_template() {
	$PY - "$D/templates/mistral-tools.jinja" "$T/cfg" <<'PY' || return 1
import json, os, sys
os.makedirs(sys.argv[2], exist_ok=True)
json.dump({"chat_template": open(sys.argv[1], encoding="utf-8").read(), "bos_token": "<s>",
           "eos_token": {"content": "</s>", "special": True}}, open(sys.argv[2] + "/tokenizer_config.json", "w"))
PY
	printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}' >"$T/c1.jsonl"
	$TK --chat --tokenizer-model "$T/cfg" -i "$T/c1.jsonl" >"$T/out" || return 1
	want='{"text":"<s>[INST]Hi[/INST] Yo </s>"}'
	[ "$(cat "$T/out")" = "$want" ] || { echo "# got $(cat "$T/out")"; return 1; }
}
ok "template, bos_token and eos_token (an AddedToken) from tokenizer_config.json beside --tokenizer-model" cfg_template

# a list of named templates: "tool_use" for lines with tools, "default" for the others
named_templates() {
	$PY - "$D/templates/mistral-tools.jinja" "$D/templates/qwen2.5-instruct.jinja" "$T/named" <<'PY' || return 1
import json, os, sys
os.makedirs(sys.argv[3], exist_ok=True)
json.dump({"chat_template": [{"name": "default", "template": open(sys.argv[1], encoding="utf-8").read()},
                             {"name": "tool_use", "template": open(sys.argv[2], encoding="utf-8").read()}],
           "bos_token": "<s>", "eos_token": "</s>"}, open(sys.argv[3] + "/tokenizer_config.json", "w"))
PY
	printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}]}' \
		'{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "f"}]}' >"$T/c2.jsonl"
	$TK --chat --tokenizer-model "$T/named/tokenizer.json" -i "$T/c2.jsonl" >"$T/out" || return 1
	head -1 "$T/out" | grep -qF '{"text":"<s>[INST]Hi[/INST]"}' && sed -n 2p "$T/out" | grep -qF '# Tools' ||
		{ echo "# got $(cat "$T/out")"; return 1; }
}
ok "named chat templates: tool_use with tools, default without (transformers' get_chat_template)" named_templates

# --ids: the rendered text encoded without added special tokens (apply_chat_template(tokenize=True)
# encodes with add_special_tokens=False), the same ids mgt-tokenize gives the text itself with
# --tokenizer-hf-no-include-special-tokens; added tokens in the text (<|endoftext|>) are matched
chat_ids() {
	K="--tokenizer-type HuggingFaceTokenizer --tokenizer-model $SHARE/tokenizers/kjv-4k"
	printf '{%%- for m in messages %%}{{ m.role }}: {{ m.content }}<|endoftext|>{%% endfor %%}' >"$T/eot.jinja"
	$TK --chat --ids $K --chat-template "$T/eot.jinja" -i "$CONV" >"$T/ids.jsonl" || return 1
	$PY - "$T/ids.jsonl" "$T/texts.jsonl" "$T/want.ids" <<'PY' || return 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
with open(sys.argv[2], "w", encoding="utf-8") as t, open(sys.argv[3], "w") as w:
    for r in rows:
        t.write(json.dumps({"text": r["text"]}, ensure_ascii=False) + "\n")
        w.write(" ".join(map(str, r["ids"])) + "\n")
PY
	$TK $K --tokenizer-hf-no-include-special-tokens --jsonl -i "$T/texts.jsonl" >"$T/got.ids" || return 1
	cmp -s "$T/want.ids" "$T/got.ids" || { echo "# --chat --ids differs from encoding the text"; return 1; }
	eot=$($TK $K --tokenizer-hf-no-include-special-tokens '<|endoftext|>')
	[ "$(sed -n 2p "$T/want.ids" | tr " " "\n" | grep -cx "$eot")" = 3 ] || { echo "# <|endoftext|> ($eot) not matched 3 times in line 2"; return 1; }
}
ok "--chat --ids: the text's ids without added special tokens, <|endoftext|> matched" chat_ids

# errors: exit status and what the message names
printf '%s\n' '{"messages": [{"role": "user", "content": "x"}]}' >"$T/u.jsonl"
printf 'a\n{%% if x %%}\n{{ x|wordcount }}\n{%% endif %%}\n' >"$T/bad-filter.jinja"
printf '{%% for m in messages %%}\n{%% include "x" %%}{%% endfor %%}' >"$T/bad-stmt.jinja"
printf '{{ x + }}' >"$T/bad-syntax.jinja"
printf '{\n"messages": 1}\n' >"$T/bad.jsonl"
has() { grep -qF -- "$1" "$T/err" || { echo "# stderr lacks '$1': $(head -c 300 "$T/err")"; return 1; }; }
ok "an unsupported filter: exit 4, template file and line named" \
	eval 'exits 4 $TK --chat --chat-template $T/bad-filter.jinja -i $T/u.jsonl && has "bad-filter.jinja:3: filter '"'wordcount'"' is not supported"'
ok "an unsupported statement: exit 4, named with its line" \
	eval 'exits 4 $TK --chat --chat-template $T/bad-stmt.jinja -i $T/u.jsonl && has "bad-stmt.jinja:2: statement '"'include'"' is not supported"'
ok "a syntax error: exit 4" exits 4 $TK --chat --chat-template "$T/bad-syntax.jinja" -i "$T/u.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}]}' '{"messages": [{"role": "system", "content": "s"}]}' >"$T/sys.jsonl"
ok "raise_exception: exit 3, input line, template line and the template's message" \
	eval 'exits 3 $TK --chat --chat-template $D/templates/gemma-7b-it.jinja -i $T/sys.jsonl && has "sys.jsonl:2: " && has "gemma-7b-it.jinja:1: raise_exception: System role not supported"'
ok "the lines before an error are printed" eval '[ "$(wc -l <$T/out)" = 1 ]'
ok "a JSONL line without a messages list: exit 3, input line named" \
	eval 'exits 3 $TK --chat --chat-template $D/templates/gemma-7b-it.jinja -i $T/bad.jsonl && has "bad.jsonl:1"'
ok "--chat without a template: exit 2" exits 2 $TK --chat -i "$T/u.jsonl"
ok "--chat-template without --chat: exit 2" exits 2 $TK --chat-template "$T/bad-syntax.jinja" x
ok "--ids without --chat: exit 2" exits 2 $TK --ids x
ok "strftime_now without --chat-date renders today's date" \
	eval '$TK --chat --chat-template $D/templates/llama-3.1-json-tools.jinja -i $T/u.jsonl | grep -qF "Today Date: $(date +"%d %b %Y")"'
echo "1..$tap_n"
exit $tap_fail
