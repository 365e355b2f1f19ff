#!/bin/sh
# mgt-eval generate --chat on a tiny Llama-style model with the shipped chat tokenizer
# (share/mgt/tokenizers/kjv-4k-chat):
#   - the prompt is the tokenizer's chat_template rendered by python3-jinja2 as transformers'
#     apply_chat_template(add_generation_prompt=True) renders it: --prompt, --system, stdin lines,
#     --jsonl conversations (several turns, add_generation_prompt given by the line);
#   - the reply is what plain generation gives from that text (the same ids);
#   - generation stops at the end-of-turn ids: tokenizer_config.json's eos_token and
#     generation_config.json's eos_token_id (an id or a list), from the checkpoint's tokenizer
#     and from a Hugging Face directory (--hf); plain generation does not stop there;
#   - the shipped template renders the shipped chat set as Megatron's nemotron-nano-v2 prompt
#     format does (mgt-dataset samples: the same tokens);
#   - bad input: exit statuses and messages.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
if ! $PY -c 'import jinja2' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 lacks jinja2"; exit 0
fi
EV="$BIN/mgt-eval"
CT=$SHARE/tokenizers/kjv-4k-chat
CHAT=$SHARE/data/kjv-chat.jsonl.zst
to() { _n=$1; shift; "$@" >"$_n.out" 2>"$_n.err" || { echo "# exit $?: $(head -c 300 "$_n.err")"; return 1; }; }
# field FILE KEY: KEY of every JSONL line (ids space-separated), one line each
field() { $PY -c 'import json,sys
for l in open(sys.argv[1]):
    v = json.loads(l)[sys.argv[2]]
    print(" ".join(map(str, v)) if isinstance(v, list) else json.dumps(v))' "$1" "$2"; }

# a random tiny Llama (one step at a negligible learning rate) with the chat tokenizer
"$BIN/mgt-train" --model tiny-llama --tokenizer-type SFTTokenizer --tokenizer-model "$CT" --sft \
	--sft-tokenizer-prompt-format nemotron-nano-v2 --data-path "$CHAT" --split 99,1,0 --seq-length 128 \
	--micro-batch-size 1 --global-batch-size 1 --lr 1e-9 --train-iters 1 --save ck --save-interval 1 \
	--threads 1 --device cpu >train.out 2>&1 || { echo "# training: $(tail -3 train.out)"; }
G="--load ck --threads 1 --greedy --output jsonl"

# reference renders: KW.jsonl lines (apply_chat_template's kwargs) -> their texts, one JSON string a line
render() {
	$PY - "$CT/tokenizer_config.json" "$1" <<'PY'
import json, sys
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
cfg = json.load(open(sys.argv[1], encoding="utf-8"))
t = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]).from_string(cfg["chat_template"])
special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if cfg.get(k)}
for line in open(sys.argv[2], encoding="utf-8"):
    kw = json.loads(line)
    kw.setdefault("add_generation_prompt", True)
    print(json.dumps(t.render(**{**special, **kw})))
PY
}
cat >kw.jsonl <<'EOF'
{"messages": [{"role": "user", "content": "In the beginning God"}]}
{"messages": [{"role": "system", "content": "Continue the verse."}, {"role": "user", "content": "And God said"}]}
{"messages": [{"role": "user", "content": "first /think"}, {"role": "assistant", "content": " an answer "}, {"role": "user", "content": "second"}]}
{"messages": [{"role": "user", "content": "no prompt at the end"}], "add_generation_prompt": false}
EOF
cat >in.jsonl <<'EOF'
{"prompt": "In the beginning God"}
{"messages": [{"role": "system", "content": "Continue the verse."}, {"role": "user", "content": "And God said"}]}
{"messages": [{"role": "user", "content": "first /think"}, {"role": "assistant", "content": " an answer "}, {"role": "user", "content": "second"}]}
{"messages": [{"role": "user", "content": "no prompt at the end"}], "add_generation_prompt": false}
EOF
ok "the model trains and saves" test -d ck/iter_0000001/tokenizer

t_jsonl() { # prompts of --jsonl lines = python3-jinja2's renders
	render kw.jsonl >want && $EV generate $G --chat --max-new-tokens 4 --jsonl <in.jsonl >j.out 2>j.err || return 1
	$PY - <<'PY'
import json, sys
got = {json.loads(l)["index"]: json.loads(l)["prompt"] for l in open("j.out")}
want = [json.loads(l) for l in open("want")]
bad = [i for i in range(len(want)) if got.get(i) != want[i]]
for i in bad: print("# line", i, repr(got.get(i)), "want", repr(want[i]))
sys.exit(bool(bad) or len(got) != 4)
PY
}
ok "--jsonl: prompts as python3-jinja2 renders the template (4 conversations)" t_jsonl
t_system() {
	$EV generate $G --chat --system 'Continue the verse.' --prompt 'And God said' --max-new-tokens 4 >p.out 2>p.err &&
		[ "$(field p.out prompt)" = "$(sed -n 2p want)" ]
}
ok "--prompt with --system = the same conversation as a JSONL line" t_system
t_stdin() {
	printf 'In the beginning God\n' | $EV generate $G --chat --max-new-tokens 4 >s.out 2>s.err &&
		[ "$(field s.out prompt)" = "$(sed -n 1p want)" ]
}
ok "stdin lines are user messages" t_stdin

# the tokenizer with an end-of-turn that greedy decoding never reaches, then the ones it does
mkdir -p tk && cp "$CT/tokenizer.json" tk/ &&
	sed 's/"eos_token": "<SPECIAL_12>"/"eos_token": "<SPECIAL_233>"/' "$CT/tokenizer_config.json" >tk/tokenizer_config.json
TK="--tokenizer-model tk"
gen() { _n=$1; shift; $EV generate $G $TK --prompt 'And God said' --max-new-tokens 6 "$@" >"$_n.out" 2>"$_n.err"; }
to free $EV generate $G $TK --chat --prompt "And God said" --max-new-tokens 6
ids=$(field free.out ids)
a=$(echo "$ids" | cut -d' ' -f1) b=$(echo "$ids" | cut -d' ' -f2) c=$(echo "$ids" | cut -d' ' -f3)
t_free() { [ "$(field free.out finish)" = '"length"' ] && [ "$(echo "$ids" | wc -w)" = 6 ]; }
ok "without an end-of-turn id met: 6 new tokens (finish length)" t_free
t_plain() {
	printf '{"prompt": %s}\n' "$(field free.out prompt)" >plain.jsonl &&
		$EV generate $G $TK --jsonl --max-new-tokens 6 --ignore-eos <plain.jsonl >plain.out 2>plain.err &&
		[ "$(field plain.out ids)" = "$ids" ]
}
ok "chat reply = plain generation from the rendered text" t_plain
t_list() {
	echo "{\"eos_token_id\": [$b, 4099]}" >tk/generation_config.json && gen e1 --chat &&
		[ "$(field e1.out ids)" = "$a $b" ] && [ "$(field e1.out finish)" = '"eod"' ]
}
ok "generation_config.json eos_token_id list [b, 4099]: stops at b (finish eod)" t_list
t_int() { echo "{\"eos_token_id\": $c}" >tk/generation_config.json && gen e2 --chat && [ "$(field e2.out ids)" = "$a $b $c" ]; }
ok "generation_config.json eos_token_id an id (c): stops at c" t_int
t_nochat() { gen e3 && [ "$(field e3.out ids | wc -w)" = 6 ]; }
ok "plain generation does not stop at the end-of-turn ids" t_nochat
t_eos() {
	rm -f tk/generation_config.json
	_s=$($BIN/mgt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model tk/tokenizer.json --decode "$a") || return 1
	$PY -c 'import json,sys; c=json.load(open("tk/tokenizer_config.json")); c["eos_token"]=sys.argv[1]; json.dump(c,open("tk/tokenizer_config.json","w"))' "$_s" &&
		gen e4 --chat && [ "$(field e4.out ids)" = "$a" ] && [ "$(field e4.out text)" = '""' ] && [ "$(field e4.out finish)" = '"eod"' ]
}
ok "tokenizer_config.json eos_token (the token of a): stops at once" t_eos
t_hf() {
	$BIN/mgt-ckpt-convert --load-dir ck --save-dir hf >cv.out 2>&1 || { echo "# $(tail -2 cv.out)"; return 1; }
	cp tk/tokenizer.json "$CT/tokenizer_config.json" hf/ && echo "{\"eos_token_id\": [$b]}" >hf/generation_config.json &&
		$EV generate --hf hf --threads 1 --greedy --output jsonl --chat --prompt 'And God said' --max-new-tokens 6 >h.out 2>h.err &&
		[ "$(field h.out ids)" = "$a $b" ]
}
ok "--hf: the converted directory's generation_config.json ends the reply too" t_hf

# the template = Megatron's nemotron-nano-v2 format on the shipped chat set: the same tokens
samples() { $BIN/mgt-dataset samples "$CHAT" --dataset-type sft --tokenizer-model "$CT" --seq-length 256 --samples 0:20 "$@"; }
t_nano() {
	samples --sft-tokenizer-prompt-format nemotron-nano-v2 >nano.txt 2>nano.err &&
		samples --sft-tokenizer-prompt-format default >dflt.txt 2>dflt.err || { echo "# $(cat nano.err dflt.err)"; return 1; }
	field nano.txt tokens >a.tok && field dflt.txt tokens >b.tok && [ "$(wc -l <a.tok)" = 20 ] && cmp -s a.tok b.tok
}
ok "the shipped template renders the chat set as nemotron-nano-v2 (20 lines, tokens)" t_nano

t_regen() { # contrib/kjv-chat.py over copies of its inputs writes the shipped files byte for byte
	mkdir -p r/share/mgt/tokenizers/kjv-4k r/share/mgt/data &&
		cp "$SHARE/tokenizers/kjv-4k/tokenizer.json" r/share/mgt/tokenizers/kjv-4k/ &&
		cp "$SHARE/data/kjv.jsonl.zst" r/share/mgt/data/ && $PY "$ROOT/contrib/kjv-chat.py" r || return 1
	for f in tokenizers/kjv-4k-chat/tokenizer.json tokenizers/kjv-4k-chat/tokenizer_config.json data/kjv-chat.jsonl.zst; do
		cmp "r/share/mgt/$f" "$SHARE/$f" || return 1
	done
}
full_only "contrib/kjv-chat.py regenerates" && ok "contrib/kjv-chat.py writes the shipped tokenizer and chat set again" t_regen

t_example() { # contrib/sft-example.sh, shortened: every step runs, the replies are there
	SFT_DIR="$T/ex" SFT_PRETRAIN_ITERS=20 SFT_ITERS=10 SFT_THREADS=2 sh "$ROOT/contrib/sft-example.sh" >ex.out 2>&1 ||
		{ tail -5 ex.out | sed 's/^/#   /'; return 1; }
	[ "$(wc -l <ex/before.jsonl)" = 3 ] && [ "$(wc -l <ex/after.jsonl)" = 3 ] && [ -f ex/ckpt/latest_checkpointed_iteration.txt ]
}
full_only "the SFT example" && ok "contrib/sft-example.sh runs end to end (20 + 10 iterations)" t_example

# bad input
ok "--system without --chat: exit 2" exits 2 "$EV" generate $G --system x --prompt y
mkdir -p nt && cp "$CT/tokenizer.json" nt/
ok "--chat with a tokenizer that has no chat template: exit 2" exits 2 "$EV" generate $G --tokenizer-model nt --chat --prompt x
ok "  naming --chat and the missing chat template" sh -c "grep -q -- '--chat' '$T/err' && grep -q 'no chat template' '$T/err'"
t_notlist() { echo '{"messages": 5}' | $EV generate $G --chat --jsonl >/dev/null 2>"$T/err"; }
ok "a \"messages\" that is not a list: exit 3" exits 3 t_notlist
ok "  naming the line" err_has 'stdin line 1'
printf '{{ raise_exception("no") }}' >bad.jinja
ok "the template's raise_exception: exit 3" exits 3 "$EV" generate $G --chat --chat-template bad.jinja --prompt x
ok "  naming the prompt and the message" sh -c "grep -q -- '--prompt 1' '$T/err' && grep -q 'raise_exception: no' '$T/err'"
done_testing
