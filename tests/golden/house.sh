#!/bin/sh
# tests/golden/house.sh: the structure figures issue 45 asks for, read from the tree (run from the
# repository root after make): family branches outside the family table (tests of a family's
# name or enum value; MGT_HF_* op and field constants are not families), the largest files,
# the include graph's cycles (files and folders), libs outside lib/train that include
# train/train.h, and the files one model forward visits (gdb, 200 steps from mgt_model_forward
# into a tiny GPT-2 training step: how often it returns to a file it left).
set -u
PY=/usr/bin/python3
echo "== family branches outside the family table (lib/model/famil*.c)"
FAM='MGT_HF_(GPT2|LLAMA|MISTRAL|QWEN2|QWEN3|MIXTRAL|QWEN2_MOE|QWEN3_MOE|MEGATRON_BERT)\b'
grep -rnE "mgt_model_is_(bert|t5)\\(|strcmp\\([^)]*family|family[^;]*strcmp|$FAM *[!=]=|[!=]= *$FAM|m->(t5|bert) *(\\)|&&|\\|\\||==|!=)|!m->(t5|bert)\\b" \
	lib cmd --include='*.c' | grep -v '^lib/model/famil' >/tmp/house-branches.$$
awk -F: '{print $1}' /tmp/house-branches.$$ | sort | uniq -c | sort -rn
echo "total $(wc -l </tmp/house-branches.$$)"
echo "tests of a family row's fields instead (naming scheme, MoE block, q/k bias, stack recipe): $(grep -rnE \
	'MGT_(HF_(NAMES|MOE|QKV_BIAS)|STACK)_[A-Z_]+ *[!=]=|[!=]= *MGT_(HF_(NAMES|MOE|QKV_BIAS)|STACK)_' lib cmd --include='*.c' | wc -l)"
rm -f /tmp/house-branches.$$
echo "== the largest files (lines)"
find lib cmd kernels -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' | xargs wc -l | grep -v ' total$' |
	sort -rn | head -12
echo "== lib modules outside lib/train that include train/train.h"
grep -ln '#include "train/train.h"' lib/*/*.c lib/*/*.h | grep -v '^lib/train/' || echo "none"
echo "== include cycles"
$PY - <<'PYEOF'
import os, re, collections
files = [os.path.join(d, f) for d in ("lib", "cmd") for d, _, fs in os.walk(d) for f in fs if f.endswith((".c", ".h", ".cc"))]
# calls between lib/model's .c files: a definition in one, a call from another (the circle the issue names)
inc = collections.defaultdict(set)
for f in files:
    for m in re.finditer(r'#include "([^"]+)"', open(f, errors="replace").read()):
        t = m.group(1)
        for c in (os.path.join(os.path.dirname(f), t), os.path.join("lib", t), os.path.join("cmd", t)):
            if os.path.exists(c): inc[f].add(os.path.normpath(c)); break
def cycles(g):
    idx, low, st, on, out, n = {}, {}, [], set(), [], [0]
    def sc(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in list(g): 
        if v not in idx: sc(v)
    return out
fold = collections.defaultdict(set)
for f, ts in inc.items():
    for t in ts:
        a, b = os.path.dirname(f), os.path.dirname(t)
        if a != b: fold[a].add(b)
print("file include cycles:", cycles(inc) or "none")
print("folder include cycles:", cycles(fold) or "none")
# function-call circles between lib/model's .c files
defs, calls = {}, collections.defaultdict(set)
srcs = [f for f in files if f.startswith("lib/model/") and f.endswith(".c")]
for f in srcs:
    for m in re.finditer(r'^[a-z][^\n;{]*?\b(mgt_\w+)\(', open(f).read(), re.M):
        defs[m.group(1)] = f
for f in srcs:
    s = open(f).read()
    for name, g in defs.items():
        if g != f and re.search(r'\b' + name + r'\(', s): calls[f].add(g)
print("lib/model call circles (files calling each other's functions):", cycles(calls) or "none")
PYEOF
echo "== one model forward (tiny GPT-2 training step), 200 gdb steps from mgt_model_forward"
if command -v gdb >/dev/null && [ -x bin/mgt-train ]; then
	d=$(mktemp -d)
	printf 'set pagination off\nset confirm off\nbreak mgt_model_forward\nrun\n' >"$d/g"
	i=0; while [ $i -lt 200 ]; do echo 'step' >>"$d/g"; i=$((i + 1)); done
	echo 'kill' >>"$d/g"
	gdb -q -batch -x "$d/g" --args bin/mgt-train --model tiny-gpt2 --mock-data --tokenizer-type NullTokenizer \
		--vocab-size 512 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3 \
		--device cpu --threads 1 >"$d/out" 2>&1
	grep -oE ' at [a-zA-Z0-9_/.]+\.(c|h):[0-9]+|^[0-9]+\s' "$d/out" >/dev/null
	$PY - "$d/out" <<'PYEOF'
import re, sys
seq = []
for l in open(sys.argv[1], errors="replace"):
    m = re.search(r'\bat ((?:lib|cmd|kernels)/[\w/.]+\.(?:c|h|cu)):\d+', l)
    if m: seq.append(m.group(1))
path = [f for i, f in enumerate(seq) if i == 0 or seq[i - 1] != f]
seen, returns = set(), {}
for i, f in enumerate(path):
    if f in seen: returns[f] = returns.get(f, 0) + 1
    seen.add(f)
print("files in order:", " > ".join(path[:60]))
print("returns to a file it had left:", sum(returns.values()), returns)
PYEOF
	rm -rf "$d"
else
	echo "gdb or bin/mgt-train missing"
fi
