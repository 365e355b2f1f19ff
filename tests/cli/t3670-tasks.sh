#!/bin/sh
# mgt-eval tasks and mgt-eval perplexity against the float64 reference tests/eval/ref_tasks.py
# (tests/hf/ref_forward.py's torch forward of the same Hugging Face directory, the GPT-2 BPE of
# tests/eval/gpt2_bpe.py, lm-evaluation-harness's formulas written out in Python): for a tiny
# GPT-2-style model (fp32) and a tiny Llama-style one (bf16 weights, RoPE, RMSNorm, SwiGLU), on the
# shipped KJV tasks (--limit 10) and hand-made LAMBADA-, HellaSwag-, cloze- and choice-schema
# files, with a --max-length that truncates some requests on the left: token counts and is_greedy
# equal, every loglikelihood within 1e-5 relative, acc and acc_norm equal, perplexity and the
# stderrs within what that allows, the bootstrap stderr equal to the harness's draws (1e-9);
# rolling perplexity (several windows a document) likewise; bad task files refused with exit
# status 3 and FILE:LINE.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
if ! $PY -c 'import numpy, torch' 2>/dev/null; then
	echo "1..0 # SKIP /usr/bin/python3 lacks numpy or torch"; exit 0
fi
EV=$BIN/mgt-eval
TASKS=$SHARE/tasks
V=$SHARE/tokenizers/gpt2/vocab.json
M=$SHARE/tokenizers/gpt2/merges.txt
REF="$PY $ROOT/tests/eval/ref_tasks.py"
to() { _n=$1; shift; "$@" >"$_n.out" 2>"$_n.err" || { echo "# exit $?: $(head -c 300 "$_n.err")"; return 1; }; }
# json FILE EXPR: the Python expression (of the JSON document d) is true
json() { $PY -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not ($2))" "$1"; }

cat >lam.jsonl <<'EOF'
{"text": "In the beginning God created the heaven and the earth."}
{"text": "And God said, Let there be light: and there was light."}
{"text": "Then said Jesus unto them, Verily, verily, I say unto you, Except ye eat the flesh of the Son of man, and drink his blood, ye have no life in you."}
{"text": "single"}
EOF
cat >hs.jsonl <<'EOF'
{"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val", "split_type": "indomain", "label": "3"}
{"activity_label": "Home and Garden", "ctx_a": "[header] How to clean a kettle [title] Fill it  with water.", "ctx_b": "ADD the VINEGAR [step] Boil it.", "endings": ["[substeps] Let it  cool, then rinse.", "Sell the kettle.", "  Paint it red [title] done.  ", "Drink the vinegar."], "label": 0}
EOF
cat >ch.jsonl <<'EOF'
{"id": "q1", "context": "The sky is", "choices": ["blue", "green", "made of cheese and honey"], "gold": 0}
{"context": "One, two,   ", "choices": ["three", "four"], "gold": 1}
EOF
zstd -dcq "$SHARE/data/kjv.jsonl.zst" | head -3 >texts.jsonl

for fam in gpt2 llama2; do
	ok "$fam: make_tiny.py makes a tiny model with GPT-2's vocabulary" \
		sh -c "$PY '$ROOT/tests/hf/make_tiny.py' $fam $fam --vocab 50257 --positions 128 >/dev/null"
	# a cloze line whose continuation is the model's own greedy text: is_greedy true for both
	"$EV" logits --hf $fam $GPT2 --prompt "In the beginning God created" --max-new-tokens 2 --threads 1 >g.out 2>&1
	$PY -c "import json, sys; t = open('g.out').read().split('text: ', 1)[1].rstrip('\n')
print(json.dumps({'context': 'In the beginning God created', 'continuation': t}))
print(json.dumps({'context': 'And the evening and the morning  ', 'continuation': 'were the first day.'}))
print(json.dumps({'context': '', 'continuation': 'Hello there'}))" >cl.jsonl
	ARGS="--task $TASKS/kjv-cloze.jsonl --task $TASKS/kjv-choice.jsonl --task lam.jsonl --task hs.jsonl --task cl.jsonl --task ch.jsonl"
	ok "$fam: mgt-eval tasks, 6 tasks, --limit 10 --max-length 40" to $fam "$EV" tasks --hf $fam $GPT2 $ARGS \
		--limit 10 --max-length 40 --bootstrap-iters 2000 --log-samples $fam.samples --output $fam.json --threads 1
	ok "$fam: some requests lost tokens on the left (--max-length 40)" grep -q 'lost tokens on the left' $fam.err
	ok "$fam: every loglikelihood, is_greedy, acc, acc_norm, perplexity and stderr as the float64 reference's" \
		$REF tasks $fam "$V" "$M" $ARGS --limit 10 --max-length 40 --bootstrap-iters 2000 --results $fam.json \
		--samples $fam.samples
	ok "$fam: the model's own greedy continuation is greedy (acc 1 of the first cloze line)" \
		sh -c "grep '\"task\":\"cl\",\"doc_id\":0,' $fam.samples | grep -q '\"is_greedy\":\[true\]'"
	ok "$fam: results in the harness's shape" json $fam.json "d['results']['kjv-cloze']['alias'] == 'kjv-cloze' and
set(d['results']['kjv-cloze']) == {'alias', 'acc,none', 'acc_stderr,none', 'perplexity,none', 'perplexity_stderr,none'} and
set(d['results']['kjv-choice']) == {'alias', 'acc,none', 'acc_stderr,none', 'acc_norm,none', 'acc_norm_stderr,none'} and
d['n-samples']['kjv-choice'] == {'original': 100, 'effective': 10} and d['n-shot']['hs'] == 0 and
d['versions']['lam'] == 1.0 and d['config']['hf'] == '$fam' and d['configs']['hs']['output_type'] == 'multiple_choice'"
	ok "$fam: mgt-eval perplexity, 2 chapters in windows of 64 tokens" to p$fam "$EV" perplexity --hf $fam $GPT2 \
		--texts texts.jsonl --limit 2 --max-length 64 --output p$fam.jsonl --threads 1
	ok "$fam: per-document and total loglikelihood, word/byte perplexity, bits per byte as the reference's" \
		$REF perplexity $fam "$V" "$M" --texts texts.jsonl --limit 2 --max-length 64 --output p$fam.jsonl
done
ok "a loglikelihood changed by 1e-4 relative fails the reference check" sh -c "
	sed 's/\"loglikelihoods\":\[-\([0-9]\)/\"loglikelihoods\":[-1\1/' gpt2.samples >bad.samples &&
	! $REF tasks gpt2 '$V' '$M' $ARGS --limit 10 --max-length 40 --bootstrap-iters 2000 --results gpt2.json --samples bad.samples >/dev/null"
ok "the shipped KJV tasks: mgt-eval tasks --limit 1 exits 0" to k "$EV" tasks --hf gpt2 $GPT2 \
	--task "$TASKS/kjv-cloze.jsonl" --task "$TASKS/kjv-choice.jsonl" --limit 1 --output k.json --threads 1
ok "... kjv-cloze is a lambada task, kjv-choice a choice task, of 100 examples each" sh -c "
	grep -q 'kjv-cloze: 1 examples (lambada)' k.err && grep -q 'kjv-choice: 1 examples (choice)' k.err" &&
	json k.json "d['n-samples']['kjv-cloze']['original'] == 100 and d['n-samples']['kjv-choice']['original'] == 100"

# ---- bad input: exit 3 naming FILE:LINE ----
bad() { # bad NAME LINE MESSAGE [mgt-eval flags]: a file with that second line is refused
	_f=$1.jsonl _msg=$3; shift 3
	ok "$_f: exit 3" exits 3 "$EV" tasks --hf gpt2 $GPT2 --task $_f --threads 1 "$@"
	ok "... naming $_f:2 and '$_msg'" err_has "$_f:2: $_msg"
}
mk() { printf '%s\n' '{"context": "a", "choices": ["b", "c"], "gold": 0}' "$2" >$1.jsonl; }
mk empty ''
bad empty 2 "empty line"
mk malformed '{"context": "a", "choices": ["b", "c"], "gold": 0'
bad malformed 2 "malformed JSON"
mk notobj '[1, 2]'
bad notobj 2 "expected a JSON object"
mk missing '{"context": "a", "choices": ["b", "c"]}'
bad missing 2 'missing key "gold"'
mk unknown '{"context": "a", "choices": ["b", "c"], "gold": 0, "golden": 1}'
bad unknown 2 'unknown key "golden" for a choice task'
mk one '{"context": "a", "choices": ["b"], "gold": 0}'
bad one 2 '"choices": expected an array of at least 2 strings (a choice list of length 1'
mk gold '{"context": "a", "choices": ["b", "c"], "gold": 2}'
bad gold 2 '"gold": 2 is out of range: expected 0 to 1'
mk neg '{"context": "a", "choices": ["b", "c"], "gold": -1}'
bad neg 2 '"gold": expected a non-negative integer'
mk notstr '{"context": "a", "choices": ["b", 7], "gold": 0}'
bad notstr 2 '"choices"\[1\]: expected a string'
printf '%s\n%s\n' '{"text": "a b"}' '{"activity_label": "x", "ctx_a": "a", "ctx_b": "b", "endings": ["c", "d"], "label": "1"}' >kinds.jsonl
bad kinds 2 'missing key "text" (a lambada task.s lines have "text")'
printf '%s\n%s\n' '{"activity_label": "x", "ctx_a": "a", "ctx_b": "b", "endings": ["c", "d"], "label": "1"}' \
	'{"activity_label": "x", "ctx_a": "a", "ctx_b": "b", "endings": ["c", "d"], "label": "5"}' >hsbad.jsonl
bad hsbad 2 '"label": 5 is out of range: expected 0 to 1' --limit 1
printf '%s\n%s\n' '{"context": "a", "continuation": " b"}' '{"context": "a", "continuation": " b c d e f g h i j k"}' >long.jsonl
bad long 2 'the continuation is 10 tokens: more than the model.s context of 8' --max-length 8
printf '%s\n%s\n' '{"context": "a", "continuation": " b"}' '{"context": "a b c d e f g h i", "continuation": " j"}' >strict.jsonl
ok "without --strict-length a long context is truncated on the left (exit 0)" exits 0 "$EV" tasks --hf gpt2 $GPT2 \
	--task strict.jsonl --max-length 8 --threads 1
bad strict 2 'context and continuation are [0-9]* tokens: more than the model.s context of 8 + 1 (--strict-length)' \
	--max-length 8 --strict-length
printf '%s\n' '{"question": "a"}' >kind.jsonl
ok "a first line of no known kind: exit 3" exits 3 "$EV" tasks --hf gpt2 $GPT2 --task kind.jsonl
ok "... naming kind.jsonl:1 and the keys" err_has 'kind.jsonl:1: cannot tell the task.s kind: expected the key "text"'
ok "--task-type bogus: exit 2" exits 2 "$EV" tasks --hf gpt2 $GPT2 --task ch.jsonl --task-type bogus
ok "a missing task file: exit 2" exits 2 "$EV" tasks --hf gpt2 $GPT2 --task "$T/nope.jsonl"
ok "... naming it" err_has "$T/nope.jsonl"
ok "no --task: exit 2" exits 2 "$EV" tasks --hf gpt2 $GPT2
ok "--max-length past the learned positions: exit 2" exits 2 "$EV" tasks --hf gpt2 $GPT2 --task ch.jsonl --max-length 129
printf '%s\n%s\n' '{"text": "a b"}' '{"body": "c"}' >nokey.jsonl
ok "perplexity: a line without the text key: exit 3" exits 3 "$EV" perplexity --hf gpt2 $GPT2 --texts nokey.jsonl
ok "... naming nokey.jsonl:2" err_has 'nokey.jsonl:2: missing key "text"'
ok "perplexity --text-key body: exit 3 at line 1" exits 3 "$EV" perplexity --hf gpt2 $GPT2 --texts nokey.jsonl --text-key body
ok "... naming nokey.jsonl:1" err_has 'nokey.jsonl:1: missing key "body"'
printf '%s\n' '{"text": ""}' >emptytext.jsonl
printf '%s\n%s\n' '{"context": "a", "continuation": " b"}' '{"context": "a", "continuation": "b"}' >nothing.jsonl
bad nothing 2 'continuation 0 encodes to no tokens after the context'
ok "perplexity: an empty text: exit 3" exits 3 "$EV" perplexity --hf gpt2 $GPT2 --texts emptytext.jsonl
ok "... naming it" err_has 'emptytext.jsonl:1: empty text under "text"'
done_testing
