/* tests/unit/test_jinja.c: the chat-template engine (lib/tok/jinja_*.c) on Jinja2's edge cases:
 * trim_blocks/lstrip_blocks and whitespace control, loop variables, scoping and namespace(),
 * slices, tojson spacing, Undefined, Python str()/float repr, filters and tests; then errors
 * (raise_exception's message, UndefinedError) and refusals (unsupported statements, filters,
 * tests and operations, with the template line).  The expected texts are jinja2 3.1.6's renders
 * (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols), tojson and
 * strftime_now as transformers sets them, the date pinned to 2024-07-26). */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "tok/tok.h"

static const char *const CASES[][4] = {
	{ "trim_blocks drops the newline after a block tag",
	  "{% if true %}\nA\n{% endif %}\nB",
	  "{}",
	  "A\nB" },
	{ "lstrip_blocks drops the indentation before a block tag",
	  "  {% if true %}\n  x\n  {% endif %}\ny",
	  "{}",
	  "  x\ny" },
	{ "{%+ keeps the indentation",
	  "  {%+ if true %}x{% endif %}",
	  "{}",
	  "  x" },
	{ "{{- -}} strip whitespace both ways",
	  "a  \n {{- 'b' -}}  \n c",
	  "{}",
	  "abc" },
	{ "comments: trim_blocks and {#- -#}",
	  "a\n{# c #}\nb  {#- c -#}  x\n  {# d #}\ny",
	  "{}",
	  "a\nbx\ny" },
	{ "one trailing newline of the source dropped",
	  "x\n\n",
	  "{}",
	  "x\n" },
	{ "{{ }} is not lstripped",
	  "  {{ 'v' }}\n  {% if 1 %}w{% endif %}",
	  "{}",
	  "  v\nw" },
	{ "loop variables",
	  "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
	  "{}",
	  "10TrueFalse332|21FalseFalse321|32FalseTrue310|" },
	{ "loop.previtem / nextitem",
	  "{% for x in [1,2,3] %}{{ loop.previtem|default('-') }}{{ x }}{{ loop.nextitem|default('-') }} {% endfor %}",
	  "{}",
	  "-12 123 23- " },
	{ "for ... else",
	  "{% for x in [] %}x{% else %}empty{% endfor %}",
	  "{}",
	  "empty" },
	{ "inline if filters before loop counts",
	  "{% for x in [1,2,3,4] if x is even %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}",
	  "{}",
	  "1:2/2 2:4/2 " },
	{ "tuple unpacking over items()",
	  "{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }};{% endfor %}",
	  "{}",
	  "a=1;b=[1, 2];" },
	{ "namespace mutation in a loop",
	  "{% set ns = namespace(n=0, s='') %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }}",
	  "{}",
	  "6 123" },
	{ "set inside a loop does not leak",
	  "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
	  "{}",
	  "12121" },
	{ "block set",
	  "{% set s %}a{{ 1 + 1 }}b{% endset %}[{{ s }}]",
	  "{}",
	  "[a2b]" },
	{ "set with tuple unpacking",
	  "{% set a, b = 1, 'two' %}{{ a }}{{ b }}",
	  "{}",
	  "1two" },
	{ "slices and negative indexes",
	  "{{ [1,2,3,4][1:] }} {{ 'h\303\251llo'[:-1] }} {{ [1,2,3][-1] }} {{ 'ab\303\247'[::-1] }} {{ [1,2,3,4,5][1:4:2] }} {{ 'abc'[5:] }} {{ messages[1:]|length }}",
	  "{\"messages\": [{\"role\": \"system\"}, {\"role\": \"user\"}, {\"role\": \"assistant\"}]}",
	  "[2, 3, 4] h\303\251ll 3 \303\247ba [2, 4]  2" },
	{ "tojson: spaces after , and :, ensure_ascii off",
	  "{{ {'a': [1, 2.5, none, true, '\303\251\"\\n'], 'b': {}}|tojson }}",
	  "{}",
	  "{\"a\": [1, 2.5, null, true, \"\303\251\\\"\\n\"], \"b\": {}}" },
	{ "tojson(indent=2)",
	  "{{ {'a': {'b': [1, {}], 'c': []}, 'd': 'x'}|tojson(indent=2) }}",
	  "{}",
	  "{\n  \"a\": {\n    \"b\": [\n      1,\n      {}\n    ],\n    \"c\": []\n  },\n  \"d\": \"x\"\n}" },
	{ "undefined renders empty, is falsy",
	  "[{{ nope }}]{{ nope is defined }}{{ nope is undefined }}{{ nope|length }}{{ nope|default('d') }}{% if not nope %}F{% endif %}{{ nope|list }}",
	  "{}",
	  "[]FalseTrue0dF[]" },
	{ "dict attribute access and missing keys",
	  "{{ m.role }}{{ m['content'] }}{{ m.missing is defined }}{{ m.get('missing') }}{{ m.get('role', 'x') }}",
	  "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}}",
	  "userhiFalseNoneuser" },
	{ "deep dict equality (1 == 1.0 == True)",
	  "{{ {'a': [1, {'b': 2}]} == {'a': [1, {'b': 2.0}]} }}{{ [1] == [true] }}{{ {'a': 1} != {'a': 1, 'b': 2} }}",
	  "{}",
	  "TrueTrueTrue" },
	{ "arithmetic as Python",
	  "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ 1 + 2.5 }} {{ -(3) }} {{ [1] + [2] }}",
	  "{}",
	  "3 -4 1 2 3.5 1024 a1None abab 3.5 -3 [1, 2]" },
	{ "comparisons and chains",
	  "{{ 1 < 2 < 3 }}{{ 'a' < 'b' }}{{ 2 >= 3 }}{{ [1, 2] < [1, 3] }}",
	  "{}",
	  "TrueTrueFalseTrue" },
	{ "str methods",
	  "{{ '  x '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'hELLO wORLD'.title() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'xax'.replace('x', 'y') }}|{{ 'hello World'.capitalize() }}|{{ 'xxhixx'.lstrip('x') }}{{ 'ABC'.lower() }}{{ '\303\251t\303\251'.upper() }}|{{ ', '.join(['a', 'b']) }}",
	  "{}",
	  "x|['a', 'b', '', 'c']|['a', 'b', 'c']|Hello World|TrueTrue|yay|Hello world|hixxabc\303\211T\303\211|a, b" },
	{ "filters",
	  "{{ [3,1,2]|sort }} {{ ['b','A','a']|unique|list }} {{ [1,2]|reverse|list }} {{ 'abc'|first }} {{ [1,2]|last }} {{ ['a','b']|join(', ') }} {{ -3|abs }} {{ '12'|int + 1 }} {{ 'x'|upper }} {{ {'b': 1, 'a': 2}|dictsort }} {{ 'a'|string }} {{ 3|float }} {{ ['b', 'A', 'c']|sort(reverse=true) }} {{ {'k': 'v'}|items|list }} {{ 'x y'|title }} {{ '1.5'|float }} {{ 'q'|safe }} {{ 'abc'|replace('b', 'B') }}",
	  "{}",
	  "[1, 2, 3] ['b', 'A'] [2, 1] a 2 a, b 3 13 X [('a', 2), ('b', 1)] a 3.0 ['c', 'b', 'A'] [('k', 'v')] X Y 1.5 q aBc" },
	{ "selectattr, rejectattr, map",
	  "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('/') }} {{ ms|rejectattr('role', 'equalto', 'user')|list|length }} {{ [' a ', 'b ']|map('trim')|join }} {{ ms|selectattr('tool_calls', 'defined')|list|length }} {{ ms|map(attribute='x', default='-')|join }}",
	  "{\"ms\": [{\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\", \"tool_calls\": []}, {\"role\": \"user\", \"content\": \"u2\"}]}",
	  "u1/u2 1 ab 1 ---" },
	{ "macros with defaults and keywords",
	  "{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}{{ f() }}",
	  "{}",
	  "<1B><23><B>" },
	{ "break and continue",
	  "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
	  "{}",
	  "0134" },
	{ "ternary, in, not in",
	  "{{ 'y' if 'a' in 'cat' else 'n' }}{{ 3 not in [1,2] }}{{ 'k' in {'k': 1} }}{{ 'z' if false }}|",
	  "{}",
	  "yTrueTrue|" },
	{ "tests",
	  "{{ 1 is number }}{{ true is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is iterable }}{{ none is none }}{{ 3 is odd }}{{ 4 is even }}{{ true is true }}{{ 1 is true }}{{ 'a' is sequence }}{{ 1 is integer }}{{ x is not defined }}{{ 'A' is upper }}{{ 2 is equalto 2 }}",
	  "{}",
	  "TrueTrueTrueTrueTrueFalseTrueTrueTrueTrueFalseTrueTrueTrueTrueTrue" },
	{ "indent",
	  "[{{ 'a\\nb\\n\\nc'|indent(2) }}][{{ 'a\\nb'|indent(first=true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) }}]",
	  "{}",
	  "[a\n  b\n\n  c][    a\n    b][a\n  \n  b]" },
	{ "filters bind tighter than +",
	  "{{ 'a' + ' b '|trim + 'c' }}{{ -2|abs }}",
	  "{}",
	  "abc2" },
	{ "Python str() of lists and dicts",
	  "{{ ['it\\'s', 'q\"', 'a\\nb', 1.0, none, true] }} {{ {'k': [1, 'v']} }} {{ ('a', 1) }}",
	  "{}",
	  "[\"it's\", 'q\"', 'a\\nb', 1.0, None, True] {'k': [1, 'v']} ('a', 1)" },
	{ "Python float repr",
	  "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 1e-5 }} {{ 123456789.0 * 10 }} {{ 1/3 }} {{ 2.5e16 }}",
	  "{}",
	  "0.30000000000000004 1e+20 1.0 1e-05 1234567890.0 0.3333333333333333 2.5e+16" },
	{ "adjacent string literals and escapes",
	  "{{ 'a' \"b\" }}{{ '\\t\\u00e9\\x41' }}",
	  "{}",
	  "ab\t\303\251A" },
	{ "strftime_now with a pinned date",
	  "{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }}",
	  "{}",
	  "26 Jul 2024 True" },
	{ "and/or return operands",
	  "{{ 0 or 'x' }}{{ 'a' and 'b' }}{{ none or [] }}|{{ 1 and 0 }}",
	  "{}",
	  "xb[]|0" },
};

/* render src with vars (JSON text); *st gets the status; returns the text (caller frees) or NULL */
static char *render(const char *src, const char *vars, mgt_status *st)
{
	mgt_chat_template *t;
	*st = mgt_chat_template_parse(src, strlen(src), "t.jinja", &t);
	if (*st)
		return NULL;
	json_t *v = json_loads(vars, 0, NULL);
	mgt_buf out = {0};
	*st = mgt_chat_template_render(t, v, "2024-07-26", &out);
	json_decref(v);
	mgt_chat_template_free(t);
	if (*st) {
		free(out.p);
		return NULL;
	}
	char *s = malloc(out.n + 1);
	memcpy(s, out.p ? out.p : "", out.n);
	s[out.n] = 0;
	free(out.p);
	return s;
}

static void test_renders(void)
{
	for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
		mgt_status st;
		char *got = render(CASES[i][1], CASES[i][2], &st);
		CHECK(got && !strcmp(got, CASES[i][3]), "%s", CASES[i][0]);
		if (got && strcmp(got, CASES[i][3]))
			printf("#   want [%s]\n#   got  [%s]\n", CASES[i][3], got);
		free(got);
	}
	mgt_status st;
	char *got = render("{% generation %}x{{ 1 }}{% endgeneration %}y", "{}", &st);
	CHECK(got && !strcmp(got, "x1y"), "{%% generation %%} renders its body (transformers' AssistantTracker)");
	free(got);
	/* jinja2 3.1.6: map/select/selectattr/... give generators (true even when empty), dict
	 * methods give views, tuples stay tuples */
	got = render("{{ 'y' if ms|selectattr('role', 'equalto', 'none') else 'n' }} {{ {'a': 1}.items() }} "
		     "{{ {'a': 1}.keys() }} {{ {'a': 1}.values()|list }} {{ [1] == (1,) }} {{ (1, 2) + (3,) }} "
		     "{{ [1, 2]|reverse|list }} {{ ms|map(attribute='role')|list|length }}",
		     "{\"ms\": [{\"role\": \"user\"}]}", &st);
	CHECK(got && !strcmp(got, "y dict_items([('a', 1)]) dict_keys(['a']) [1] False (1, 2, 3) [2, 1] 1"),
	      "generators are true, dict views and tuples print as Python's");
	if (got && strcmp(got, "y dict_items([('a', 1)]) dict_keys(['a']) [1] False (1, 2, 3) [2, 1] 1"))
		printf("#   got  [%s]\n", got);
	free(got);
	/* jinja2 3.1.6: a for loop's else runs when no iteration reached the end of its body */
	got = render("{% for x in [1, 2] %}{% break %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{% if x == 1 %}"
		     "{% continue %}{% endif %}{{ x }}{% else %}E{% endfor %}|{% for x in [1] %}{% continue %}{% else %}E{% endfor %}",
		     "{}", &st);
	CHECK(got && !strcmp(got, "E|2|E"), "for ... else after break and continue");
	free(got);
	/* jinja2 3.1.6: a macro sees the scope it is defined in (a loop variable, an outer macro's
	 * parameter), not the caller's */
	got = render("{% for m in ['a', 'b'] %}{% macro f() %}{{ m }}{% endmacro %}{{ f() }}{% endfor %}|"
		     "{% macro outer(a) %}{% macro inner() %}[{{ a }}]{% endmacro %}{{ inner() }}{% endmacro %}{{ outer(5) }}|"
		     "{% macro g() %}{{ y }}{% endmacro %}{% for y in [1] %}{{ g() }}{% endfor %}", "{}", &st);
	CHECK(got && !strcmp(got, "ab|[5]|"), "macros see their defining scope");
	free(got);
	/* jinja2 3.1.6: the title filter splits words at - ( { [ < and whitespace only; str.title at
	 * every non-letter; Python's upper() maps sharp s to SS */
	got = render("{{ \"they're x-y\"|title }}|{{ \"they're\".title() }}|{{ 'stra\303\237e'|upper }}", "{}", &st);
	CHECK(got && !strcmp(got, "They're X-Y|They'Re|STRASSE"), "title filter vs str.title, upper of U+00DF");
	free(got);
}

/* the render (or parse) fails with status want and a message holding each of the texts */
static void fails(const char *what, const char *src, mgt_status want, const char *m1, const char *m2)
{
	mgt_status st;
	char *got = render(src, "{\"m\": {\"role\": \"user\"}}", &st);
	const char *msg = mgt_err_msg();
	int ok = !got && st == want && strstr(msg, m1) && (!m2 || strstr(msg, m2));
	CHECK(ok, "%s", what);
	if (!ok)
		printf("#   status %d, message: %s\n", (int)st, got ? got : msg);
	free(got);
}

static void test_errors(void)
{
	fails("raise_exception: the template's message and line", "a\n{{ raise_exception('System role not supported') }}",
	      MGT_ERR_INPUT, "t.jinja:2: raise_exception: System role not supported", NULL);
	fails("an attribute of an undefined variable is jinja2's UndefinedError", "{{ nope.x }}", MGT_ERR_INPUT,
	      "UndefinedError: 'nope' is undefined", NULL);
	fails("arithmetic on Undefined is an error", "{{ m.content + 'x' }}", MGT_ERR_INPUT,
	      "UndefinedError: 'dict object' has no attribute 'content'", NULL);
	fails("str + int is a TypeError", "{{ 'a' + 1 }}", MGT_ERR_INPUT, "TypeError", NULL);
	fails("tojson of Undefined is an error", "{{ nope|tojson }}", MGT_ERR_INPUT, "not JSON serializable", NULL);
	fails("a mutating method is refused (sandbox)", "{{ [1].append(2) }}", MGT_ERR_INPUT, "unsafe", NULL);
	fails("ns.x = on a non-namespace", "{% set d = {} %}{% set d.x = 1 %}", MGT_ERR_INPUT, "non-namespace", NULL);
}

static void test_refusals(void)
{
	fails("include is refused with its name and line", "x\n\n{% include 'other.jinja' %}", MGT_ERR_VOCAB,
	      "t.jinja:3:", "'include' is not supported");
	fails("extends is refused", "{% extends 'base' %}", MGT_ERR_VOCAB, "'extends' is not supported", NULL);
	fails("call blocks are refused", "{% call f() %}x{% endcall %}", MGT_ERR_VOCAB, "'call' is not supported", NULL);
	fails("filter blocks are refused", "{% filter upper %}x{% endfilter %}", MGT_ERR_VOCAB, "'filter' is not supported", NULL);
	fails("raw is refused", "{% raw %}{{ x }}{% endraw %}", MGT_ERR_VOCAB, "'raw' is not supported", NULL);
	fails("an unknown filter is refused at parse time", "a\n{{ x|wordcount }}", MGT_ERR_VOCAB, "t.jinja:2:",
	      "filter 'wordcount' is not supported");
	fails("an unknown test is refused", "{{ x is escaped }}", MGT_ERR_VOCAB, "test 'escaped' is not supported", NULL);
	fails("recursive loops are refused", "{% for x in y recursive %}{% endfor %}", MGT_ERR_VOCAB, "recursive", NULL);
	fails("string %% formatting is refused", "{{ 'a %s' % 1 }}", MGT_ERR_INPUT, "string % formatting", NULL);
	fails("an unimplemented str method is refused", "{{ 'a'.zfill(3) }}", MGT_ERR_INPUT, "str.zfill()", NULL);
	fails("a filtered block set is refused", "{% set x | upper %}a{% endset %}", MGT_ERR_VOCAB, "filtered block set", NULL);
	fails("an unclosed block is a syntax error", "{% if x %}a", MGT_ERR_VOCAB, "endif", NULL);
	fails("an unclosed tag is a syntax error", "{{ x ", MGT_ERR_VOCAB, "unclosed", NULL);
	fails("integer overflow is refused (Python integers are unbounded)", "{{ 10 ** 20 }}", MGT_ERR_INPUT, "big integers", NULL);
	fails("a big integer literal is refused", "{{ 99999999999999999999 }}", MGT_ERR_VOCAB, "big integers", NULL);
	fails("Final_Sigma lower-casing is refused", "{{ '\316\243'|lower }}", MGT_ERR_INPUT, "U+03A3", NULL);
	fails("len() of a generator is a TypeError", "{{ [1, 2]|select|length }}", MGT_ERR_INPUT, "has no len()", NULL);
	fails("printing a generator is refused", "{{ [1]|map('string') }}", MGT_ERR_INPUT, "generator", "not supported");
	fails("a consumed generator is refused", "{% set g = [1]|select %}{{ g|list }}{{ g|list }}", MGT_ERR_INPUT,
	      "consumed generator", NULL);
	fails("a list as a dict key is unhashable", "{{ [] in {} }}", MGT_ERR_INPUT, "unhashable type: 'list'", NULL);
	fails("break outside a loop is a syntax error", "{% if 1 %}{% break %}{% endif %}", MGT_ERR_VOCAB, "'break' outside a loop", NULL);
	fails("continue in a macro body is outside a loop", "{% for x in [1] %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}",
	      MGT_ERR_VOCAB, "'continue' outside a loop", NULL);
	fails("cycler is refused", "{{ cycler('a') }}", MGT_ERR_INPUT, "'cycler' is not supported", NULL);
}

int main(void)
{
	test_renders();
	test_errors();
	test_refusals();
	return check_finish();
}
