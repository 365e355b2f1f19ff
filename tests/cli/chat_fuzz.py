#!/usr/bin/env python3
"""Differential test of mgt-tokenize --chat against jinja2 (t0250).

chat_fuzz.py MGT_TOKENIZE SEED N: renders N random templates of each kind (expressions over
Python values and Undefined; statements: for/if/set/namespace/macro/break/continue/for-else;
whitespace control with trim_blocks and lstrip_blocks) with jinja2 set up as transformers sets it
up and with mgt-tokenize --chat, one template a run, and checks that the engine never renders
differently: both render the same text, or both fail, or jinja2 renders and the engine fails (a
refusal; counted, and allowed: jinja2 prints an object's address for a generator, raises late
for lazy generators, ...).  A different text, or a text where jinja2 fails, is a failure.
Exit 0 when none; prints the counts.
"""
import datetime, json, os, random, subprocess, sys, tempfile

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

BIN, SEED, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
R = random.Random(SEED)
VARS = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": " U é "},
                     {"role": "assistant", "content": "A", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
        "n": 3, "s": "Hello World", "d": {"b": 2, "a": 1, "items": 5}, "f": 2.5, "lst": [3, 1, 2]}


def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    e.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(m):
        raise TemplateError(m)
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26).strftime(fmt)
    return e


ATOMS = ["1", "0", "-2", "2.5", "'ab'", "''", "'Ab C'", "none", "true", "false", "[1, 2]", "[]", "{'k': 1}", "{}", "n", "s",
         "lst", "d", "nope", "f", "messages[0]", "messages[1].role", "('a', 1)", "messages[1].content"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in"]
FILTERS = ["length", "string", "trim", "upper", "lower", "first", "last", "list", "reverse", "int", "float", "abs", "tojson",
           "default('D')", "join('-')", "sort", "unique", "items", "title", "capitalize", "count", "dictsort", "tojson(indent=2)",
           "map('string')|list", "select|list", "replace('l', 'L')", "indent(2)"]
TESTS = ["defined", "none", "string", "number", "mapping", "iterable", "sequence", "true", "false", "odd", "even", "integer",
         "float", "undefined", "boolean", "lower", "upper", "equalto 1"]


def expr(d=0):
    r = R.random()
    if d > 2 or r < 0.3:
        return R.choice(ATOMS)
    if r < 0.55:
        return "(" + expr(d + 1) + " " + R.choice(BINOPS) + " " + expr(d + 1) + ")"
    if r < 0.75:
        return "(" + expr(d + 1) + "|" + R.choice(FILTERS) + ")"
    if r < 0.85:
        return "(" + expr(d + 1) + " is " + R.choice(["", "not "]) + R.choice(TESTS) + ")"
    if r < 0.92:
        return "(not " + expr(d + 1) + ")"
    return "(" + expr(d + 1) + " if " + expr(d + 1) + " else " + expr(d + 1) + ")"


SEXPR = ["m.role", "m['content']", "loop.index", "loop.first", "loop.last", "loop.length", "loop.index0 % 2", "x", "ns.c",
         "messages|length", "m.content|trim", "m.role == 'user'", "'a' ~ loop.revindex", "m is defined", "y",
         "(messages|selectattr('role', 'equalto', 'user')|list)[0].role", "messages[-1].role", "m.tool_calls is defined",
         "m.get('content', '-')", "m.items()|list|length", "x + 1", "k", "v"]


def stmts(d=0, loop=False):
    out = ""
    for _ in range(R.randint(1, 3)):
        r = R.random()
        ws = R.choice(["", "\n", "  ", "\n  "])
        dl, dr = R.choice([("{%", "%}"), ("{%-", "%}"), ("{%", "-%}"), ("{%-", "-%}")])
        e = R.choice(SEXPR)
        if d < 3 and r < 0.25:
            out += (ws + dl + " for m in messages " + R.choice(["", 'if m.role != "system"']) + " " + dr + stmts(d + 1, True)
                    + (ws + dl + " else " + dr + "E") * R.choice([0, 0, 1]) + ws + dl + " endfor " + dr)
        elif d < 3 and r < 0.4:
            out += (ws + dl + " if " + e + " " + dr + stmts(d + 1, loop)
                    + (ws + dl + " elif " + R.choice(SEXPR) + " " + dr + stmts(d + 1, loop)) * R.choice([0, 1])
                    + (ws + dl + " else " + dr + stmts(d + 1, loop)) * R.choice([0, 1]) + ws + dl + " endif " + dr)
        elif r < 0.5:
            out += ws + dl + " set x = " + e + " " + dr
        elif r < 0.58:
            out += ws + dl + " set ns.c = ns.c + 1 " + dr
        elif r < 0.63 and (loop or R.random() < 0.1):
            out += ws + dl + " " + R.choice(["break", "continue"]) + " " + dr
        elif d < 3 and r < 0.7:
            out += ws + dl + " for k, v in (m if m is mapping else {}).items() " + dr + stmts(d + 1, True) + ws + dl + " endfor " + dr
        elif r < 0.75:
            out += ws + "{{ mac(" + e + ") }}"
        else:
            out += ws + R.choice(["{{ ", "{{- "]) + e + R.choice([" }}", " -}}"]) + R.choice(["", "|", "\n"])
    return out


def stmt_template():
    return ("{% macro mac(a, b='B') %}<{{ a }}{{ b }}{{ x }}>{% endmacro %}{% set ns = namespace(c=0) %}{% set x = 0 %}"
            + stmts() + "[{{ ns.c }}{{ x }}]")


WS_INNER = ["\n", "  ", "\t", " \n", "\n  ", "a", "b\n", "  \n\n", "{{ 'v' }}", "{{- 'v' }}", "{{ 'v' -}}", "{# c #}", "{#- c -#}",
            "{# c -#}", "{%- set x = 1 -%}", "{% set x = 1 %}", "{%+ set y = 2 %}", "  {% set z = 3 %}  \n"]
WS_OPEN = [("{% if true %}", "{% endif %}"), ("{%- if true -%}", "{%- endif -%}"), ("{% if true -%}", "{%- endif %}"),
           ("{%+ if 1 %}", "{%+ endif %}"), ("{% for i in [1,2] %}", "{% endfor %}"), ("  {% for i in [1] %}\n", "  {% endfor %}\n"),
           ("{%- for i in [1,2] %}", "{% endfor -%}")]


def ws(d=0):
    s = ""
    for _ in range(R.randint(1, 4)):
        if d < 2 and R.random() < 0.4:
            o, c = R.choice(WS_OPEN)
            s += R.choice(["", " ", "\n", "  "]) + o + ws(d + 1) + R.choice(["", " ", "\n", "\t "]) + c
        else:
            s += R.choice(WS_INNER)
    return s


def main():
    e = env()
    tmp = tempfile.mkdtemp()
    tf, vf = os.path.join(tmp, "t.jinja"), os.path.join(tmp, "v.jsonl")
    with open(vf, "w") as f:
        f.write(json.dumps(VARS) + "\n")
    kinds = {"expression": lambda: "{{ " + expr() + " }}", "statement": stmt_template, "whitespace": lambda: "x" + ws() + "y"}
    bad = 0
    for kind, gen in kinds.items():
        same = refused = both_fail = 0
        for _ in range(N):
            t = gen()
            try:
                want = ("ok", e.from_string(t).render(**json.loads(json.dumps(VARS))))  # a fresh copy: do_indent extends a list in place
            except Exception as x:
                want = ("err", type(x).__name__ + ": " + str(x))
            with open(tf, "w") as f:
                f.write(t)
            p = subprocess.run([BIN, "--chat", "--chat-template", tf, "--chat-date", "2024-07-26", "-i", vf],
                               capture_output=True, text=True)
            got = ("ok", json.loads(p.stdout)["text"]) if p.returncode == 0 else ("err", p.stderr.strip())
            if p.returncode not in (0, 3, 4) or "Sanitizer" in p.stderr or "runtime error" in p.stderr:
                got = ("crash", p.stderr[-500:])
            if want == got or (want[0] == got[0] == "err"):
                same += want[0] == "ok"
                both_fail += want[0] == "err"
            elif want[0] == "ok" and got[0] == "err":
                refused += 1
            else:
                bad += 1
                print(f"# DIFFERS ({kind}): {t!r}\n#   jinja2: {want!r:.300}\n#   mgt:    {got!r:.300}")
        print(f"# {kind}: {N} templates, {same} rendered the same, {both_fail} failed in both, {refused} refused by the engine")
    print(f"# {bad} differ")
    return 1 if bad else 0


sys.exit(main())
