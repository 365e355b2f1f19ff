#!/bin/sh
# Manual pages and the mgt dispatcher (TAP, run by prove).
#
# For every program bin/mgt-* (and bin/mgt): a page man/man1/PROG.1 exists, and every long
# option that `PROG --help` prints (and, for a program with commands, `PROG COMMAND --help`)
# appears in it.  Every page under man/ renders with `man --warnings` silent (skipped when
# man(1) is not installed).
#
# Exit statuses: a page's EXIT STATUS section lists each status as an item (.TP, then .B N).
# Every status a program's --help names ("Exit status: 0 ok, 1 ...") is an item of its page,
# and every item is one the program returns: 0, a status of its --help, or 128 + N for a
# signal SIGxxx (number N) that the item names and the program catches (cmd/PROG.c installs
# handlers, and SIGxxx appears in lib/util/util.c or cmd/PROG.c).  mgt(7) lists exactly the
# statuses of mgt_exit_code() in lib/util/util.c, and signal statuses as above.  A status
# above 128 that a section mentions is an item of it (not hidden in prose).
#
# Cross-references: every NAME(S) in a page (.BR NAME (S), \fBNAME\fR(S)) names a page under
# man/ or one of the few system pages in $external.  mgt(1) and mgt(7) name every page under
# man/ in SEE ALSO; mgt(7) lists every bin/mgt-* as available and none of them as planned.
# No page cites a document that is not installed (megatron-reference, DESIGN.md, any .md but
# share/mgt/README.data.md).
#
# The dispatcher runs tools, passes their arguments and exit status through, and refuses
# unknown tools with exit status 2.
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
cd "$root" || exit 1

n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # skip $1"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }
check() { # check DESCRIPTION COMMAND...: ok when COMMAND succeeds
	d=$1
	shift
	if "$@"; then ok "$d"; else not_ok "$d"; fi
}

words() { # lines on stdin joined by single spaces
	tr '\n' ' ' | sed -e 's/  */ /g' -e 's/^ //' -e 's/ $//'
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/t0100.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

have_man=0
command -v man >/dev/null 2>&1 && have_man=1

progs=""
for f in bin/mgt-*; do
	case $f in *.tmp.*) continue ;; esac
	[ -f "$f" ] && [ -x "$f" ] && progs="$progs $f"
done
if [ -z "$progs" ] || [ ! -x bin/mgt ]; then
	echo "1..0 # skip programs not built (run make)"
	exit 0
fi

# The text of a page as a reader sees it: rendered by man(1) without hyphenation or line
# breaks inside words, or, without man, the source with the common roff escapes removed.
page_text() {
	if [ "$have_man" = 1 ]; then
		LC_ALL=C MANWIDTH=250 man --nh --nj -l "$1" 2>/dev/null
	else
		roff_plain "$1"
	fi
}

# A page's roff source with the common escapes removed (fonts, \-, \&, \(aq).
roff_plain() {
	sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\f\[[^]]*\]//g' -e 's/\\&//g' \
		-e 's/\\(aq/'"'"'/g' "$1"
}

# Long options printed by a help text on stdin, one per line ("--name" of "--name=VALUE" too).
long_options() {
	grep -oE -- '--[A-Za-z][A-Za-z0-9_-]*' | sed 's/-*$//' | sort -u
}

# Commands of a program whose help says "Run 'PROG COMMAND --help'": the lines of its
# "Commands:" block that start with two spaces and a word.
commands_of() {
	awk '/^Commands:/ { on = 1; next } on && /^$/ { on = 0 } on && /^  [a-z]/ { print $1 }'
}

# ---- each program has a page that documents every long option of its --help ---------------
for prog in bin/mgt $progs; do
	name=${prog#bin/}
	page=man/man1/$name.1
	if [ ! -f "$page" ]; then
		not_ok "$name: manual page $page exists"
		continue
	fi
	ok "$name: manual page $page exists"
	if ! "$prog" --help >"$tmp/help" 2>&1; then
		not_ok "$name --help exits 0"
		continue
	fi
	cp "$tmp/help" "$tmp/help.$name"
	if grep -q "COMMAND --help" "$tmp/help"; then
		for cmd in $(commands_of <"$tmp/help"); do
			if ! "$prog" "$cmd" --help >>"$tmp/help" 2>&1; then
				not_ok "$name $cmd --help exits 0"
			fi
		done
	fi
	page_text "$page" >"$tmp/page"
	opts=$(long_options <"$tmp/help")
	if [ -z "$opts" ]; then
		not_ok "$name --help prints long options"
		continue
	fi
	missing=""
	for opt in $opts; do
		grep -qE -- "(^|[^A-Za-z0-9_-])$opt([^A-Za-z0-9_-]|\$)" "$tmp/page" || missing="$missing $opt"
	done
	if [ -z "$missing" ]; then
		ok "$name: $page documents all $(echo "$opts" | wc -l | tr -d ' ') long options of --help"
	else
		not_ok "$name: $page documents every long option of --help"
		diag "missing from $page:$missing"
	fi
done

check "overview page man/man7/mgt.7 exists" test -f man/man7/mgt.7

# ---- every page renders without warnings -------------------------------------------------
for page in man/man[1-8]/*.[1-8]; do
	[ -f "$page" ] || continue
	if [ "$have_man" = 0 ]; then
		skip "$page renders without warnings (man is not installed)"
		continue
	fi
	out=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
	rc=$?
	if [ "$rc" = 0 ] && [ -z "$out" ]; then
		ok "$page renders without warnings"
	else
		not_ok "$page renders without warnings"
		diag "man exit status $rc" "$out"
	fi
done

# ---- exit statuses ---------------------------------------------------------------------------
# The roff source of section NAME of a page (from ".SH NAME" to the next .SH).
section() { # PAGE NAME
	awk -v h=".SH $2" -v q=".SH \"$2\"" '$0 == h || $0 == q { on = 1; next } /^\.SH/ { on = 0 } on' "$1"
}

# The items of an EXIT STATUS section (roff on stdin): "CODE TEXT" per item, an item being
# .TP followed by ".B CODE", or ".IP CODE".
exit_items() {
	awk '
	function flush() { if (code != "") print code, text; code = ""; text = "" }
	/^\.(TP|PP|P|LP|IP|SS|SH)( |$)/ {
		flush()
		tp = $1 == ".TP"
		if ($1 == ".IP" && $2 ~ /^[0-9]+$/) code = $2
		next
	}
	tp && /^\.B +[0-9]+ *$/ { code = $2; tp = 0; next }
	{ tp = 0; if (code != "") text = text " " $0 }
	END { flush() }'
}

# The statuses a help text on stdin names in its "Exit status:" paragraph: the numbers that
# start a list entry ("0 ok, 1 runtime error, ..."), not those of "mgt-train(1)".
help_exit_codes() {
	awk '/^Exit status:/ { on = 1 } on && /^$/ { on = 0 } on' |
		grep -oE '(^|[ ,:;])[0-9]+ [a-z]' | grep -oE '[0-9]+' | sort -un
}

# The statuses mgt_exit_code() returns: the "return N" lines of its body in lib/util/util.c.
table_codes=$(awk '/^int mgt_exit_code\(/ { on = 1 } on && /^}/ { exit } on' lib/util/util.c |
	grep -oE 'return [0-9]+' | grep -oE '[0-9]+' | sort -un | words)
check "mgt_exit_code() in lib/util/util.c returns statuses (found: $table_codes)" \
	test -n "$table_codes"

# signal_status_ok CODE TEXT SOURCES...: CODE is 128 + N, TEXT names the signal N (SIGxxx) and
# one of the source files mentions SIGxxx (the program catches it).
signal_status_ok() {
	code=$1 text=$2
	shift 2
	[ "$code" -gt 128 ] 2>/dev/null && [ "$code" -lt 192 ] || return 1
	sig=$(kill -l $((code - 128)) 2>/dev/null) || return 1
	sig=SIG${sig#SIG}
	printf '%s\n' "$text" | grep -qE "(^|[^A-Z])$sig([^A-Z]|\$)" || return 1
	cat "$@" 2>/dev/null | grep -qE "(^|[^A-Z])$sig([^A-Z]|\$)"
}

in_list() { # WORD LIST...
	w=$1
	shift
	for x in "$@"; do [ "$x" = "$w" ] && return 0; done
	return 1
}

# check_exit_section PAGE ALLOWED SIGSOURCES NEEDED: the page's items are in ALLOWED (and 0),
# or signal statuses caught per SIGSOURCES (none: no signal statuses); every status of NEEDED
# is an item; every status above 128 the section mentions is an item.
check_exit_section() {
	page=$1 allowed=$2 sigsrc=$3 needed=$4
	section "$page" "EXIT STATUS" >"$tmp/exsec"
	exit_items <"$tmp/exsec" >"$tmp/items"
	if [ ! -s "$tmp/items" ]; then
		not_ok "$page: EXIT STATUS lists its statuses as items (.TP, .B N)"
		return
	fi
	items=$(cut -d' ' -f1 "$tmp/items" | sort -un | words)
	bad=""
	while read -r code text; do
		# shellcheck disable=SC2086 # word lists
		in_list "$code" 0 $allowed && continue
		# shellcheck disable=SC2086
		[ -n "$sigsrc" ] && signal_status_ok "$code" "$text" $sigsrc && continue
		bad="$bad $code"
	done <"$tmp/items"
	if [ -z "$bad" ]; then
		ok "$page: every documented exit status ($items) is one the program returns"
	else
		not_ok "$page: every documented exit status is one the program returns"
		diag "not returned:$bad (statuses it returns: 0 and $allowed; 128 + N where the item names" \
			"signal N, SIGxxx, and the program catches it)"
	fi
	missing=""
	for code in $needed; do
		# shellcheck disable=SC2086
		in_list "$code" $items || missing="$missing $code"
	done
	if [ -z "$missing" ]; then
		ok "$page: EXIT STATUS documents every status of $5 ($needed)"
	else
		not_ok "$page: EXIT STATUS documents every status of $5"
		diag "missing:$missing"
	fi
	hidden=""
	for code in $(roff_plain "$tmp/exsec" | grep -oE '(^|[^0-9.])(129|1[3-9][0-9]|2[0-5][0-9])([^0-9.]|$)' |
		grep -oE '[0-9]+' | sort -un); do
		# shellcheck disable=SC2086
		in_list "$code" $items || hidden="$hidden $code"
	done
	if [ -z "$hidden" ]; then
		ok "$page: every signal status EXIT STATUS mentions is an item"
	else
		not_ok "$page: every signal status EXIT STATUS mentions is an item"
		diag "mentioned in prose only:$hidden"
	fi
}

all_help_codes=""
for prog in bin/mgt $progs; do
	name=${prog#bin/}
	page=man/man1/$name.1
	if [ ! -f "$page" ] || [ ! -f "$tmp/help.$name" ]; then continue; fi
	hc=$(help_exit_codes <"$tmp/help.$name" | words)
	if [ -z "$hc" ]; then
		not_ok "$name --help names its exit statuses (\"Exit status: 0 ok, 1 ...\")"
		continue
	fi
	all_help_codes="$all_help_codes $hc"
	bad=""
	for code in $hc; do
		# shellcheck disable=SC2086
		in_list "$code" $table_codes || bad="$bad $code"
	done
	if [ -z "$bad" ]; then
		ok "$name: the exit statuses of --help ($hc) are statuses of mgt_exit_code()"
	else
		not_ok "$name: the exit statuses of --help are statuses of mgt_exit_code()"
		diag "not in mgt_exit_code():$bad"
	fi
	src=cmd/$name.c
	sigsrc=""
	grep -qE 'signals_install|sigaction *\(|signal *\(' "$src" 2>/dev/null && sigsrc="lib/util/util.c $src"
	check_exit_section "$page" "$hc" "$sigsrc" "$hc" "$name --help"
done
all_help_codes=$(echo "$all_help_codes" | tr ' ' '\n' | grep . | sort -un | words)
# shellcheck disable=SC2086 # word list
check_exit_section man/man7/mgt.7 "$table_codes" "lib/util/util.c $(echo cmd/*.c)" \
	"$(echo $table_codes $all_help_codes | tr ' ' '\n' | sort -un | words)" \
	"mgt_exit_code() and of every --help"

# ---- cross-references ----------------------------------------------------------------------
# System pages the pages may cite; every other NAME(S) must be a page under man/.
external="copy_file_range(2) execv(2) flock(2) fsync(2) git(1) glob(7) h5dump(1) kill(1) memcpy(3)
mpirun(1) pcre2pattern(3) pread(2) prove(1) rename(2) signal(7) srun(1) strcmp(3) write(2) zstd(1)"

# The NAME(S) cross-references of a page, one per line: in text ("\fBNAME\fR(S)") and as
# arguments of the font macros (".BR NAME (S)", ".RB ( NAME (S))").
xrefs() {
	roff_plain "$1" | awk '
	/^\.(B|I|R|BR|RB|BI|IB|IR|RI) / { sub(/^\.[A-Z]+ +/, ""); gsub(/"/, ""); gsub(/ +\(/, "("); print; next }
	/^[.\047]/ { next }
	{ print }' | grep -oE '[A-Za-z][A-Za-z0-9_.+-]*\([1-8][a-z]*\)' | sed 's/^[.+-]*//' | sort -u
}

pages=""
for page in man/man[1-8]/*.[1-8]; do
	[ -f "$page" ] && pages="$pages $page"
done
for page in $pages; do
	bad=""
	for ref in $(xrefs "$page"); do
		nm=${ref%(*}
		sec=${ref#*(}
		sec=${sec%)}
		[ -f "man/man${sec%%[a-z]*}/$nm.$sec" ] && continue
		# shellcheck disable=SC2086 # word list
		in_list "$ref" $external && continue
		bad="$bad $ref"
	done
	if [ -z "$bad" ]; then
		ok "$page: every cross-reference names a page under man/ or a known system page"
	else
		not_ok "$page: every cross-reference names a page under man/ or a known system page"
		diag "no such page:$bad"
	fi
done

for page in man/man1/mgt.1 man/man7/mgt.7; do
	section "$page" "SEE ALSO" >"$tmp/see"
	missing=""
	for p in $pages; do
		[ "$p" = "$page" ] && continue
		f=${p##*/}
		ref="${f%.*}(${f##*.})"
		xrefs "$tmp/see" | grep -qxF "$ref" || missing="$missing $ref"
	done
	if [ -z "$missing" ]; then
		ok "$page: SEE ALSO names every page under man/"
	else
		not_ok "$page: SEE ALSO names every page under man/"
		diag "missing:$missing"
	fi
done

# mgt(7): the programs of bin/ are available today, not planned.
awk '/^\.SS Programs available/ { on = 1; next } /^\.S[HS]/ { on = 0 } on' man/man7/mgt.7 >"$tmp/avail"
awk '/^\.SS Programs planned/ { on = 1; next } /^\.S[HS]/ { on = 0 } on' man/man7/mgt.7 >"$tmp/planned"
missing=""
for prog in $progs; do
	name=${prog#bin/}
	xrefs "$tmp/avail" | grep -qxF "$name(1)" || missing="$missing $name"
	# a planned item (.TP, then .B NAME) that names a program of bin/
	awk 'p == ".TP" { print } { p = $0 }' "$tmp/planned" | roff_plain /dev/stdin |
		grep -qE "^\.BR? +$name( |\$)" && missing="$missing $name(planned)"
done
if [ -s "$tmp/avail" ] && [ -z "$missing" ]; then
	ok "mgt(7) lists every program of bin/ under 'Programs available' and none as planned"
else
	not_ok "mgt(7) lists every program of bin/ under 'Programs available' and none as planned"
	diag "wrong:$missing"
fi

# ---- no citations of documents that are not installed ---------------------------------------
bad=""
for page in $pages; do
	roff_plain "$page" | grep -nE 'megatron-reference|DESIGN\.md|[A-Za-z0-9_-]\.md([^A-Za-z0-9]|$)' |
		grep -vE 'README\.data\.md' | sed "s|^|$page:|" >"$tmp/cites"
	[ -s "$tmp/cites" ] && bad="$bad$(cat "$tmp/cites")
"
done
bad=${bad%
}
if [ -z "$bad" ]; then
	ok "no page cites a document that is not installed (megatron-reference, DESIGN.md, *.md)"
else
	not_ok "no page cites a document that is not installed (megatron-reference, DESIGN.md, *.md)"
	diag "$bad"
fi

# ---- the dispatcher ------------------------------------------------------------------------
bin/mgt tokenize --help >"$tmp/out" 2>"$tmp/err"
rc=$?
check "mgt tokenize --help runs mgt-tokenize --help" \
	test "$rc" = 0 -a -s "$tmp/out"
check "mgt tokenize --help prints mgt-tokenize's usage" grep -q "^Usage: mgt-tokenize" "$tmp/out"

bin/mgt tokenize --tokenizer-type NullTokenizer --vocab-size 100 "1 2" "3" >"$tmp/out" 2>&1
check "mgt passes the tool's arguments unchanged" test "$(cat "$tmp/out")" = "1 2 3"

bin/mgt tokenize --no-such-option >/dev/null 2>&1
rc=$?
check "mgt returns the tool's exit status (usage error: 2, got $rc)" test "$rc" = 2

bin/mgt nosuch >"$tmp/out" 2>"$tmp/err"
rc=$?
check "mgt nosuch exits 2 (got $rc)" test "$rc" = 2
check "mgt nosuch says it is not an mgt tool" \
	grep -qF "mgt: error: 'nosuch' is not an mgt tool (see mgt --help)" "$tmp/err"

bin/mgt ../bin/mgt-tokenize --help >/dev/null 2>&1
rc=$?
check "mgt refuses a tool name with a slash (exit 2, got $rc)" test "$rc" = 2

bin/mgt >/dev/null 2>&1
rc=$?
check "mgt without a tool exits 2 (got $rc)" test "$rc" = 2

bin/mgt --bogus >/dev/null 2>&1
rc=$?
check "mgt --bogus exits 2 (got $rc)" test "$rc" = 2

bin/mgt --version >"$tmp/out" 2>&1
rc=$?
check "mgt --version exits 0 and prints 'mgt VERSION'" test "$rc" = 0 -a -n "$(grep '^mgt [0-9]' "$tmp/out")"

bin/mgt --help >"$tmp/out" 2>&1
rc=$?
check "mgt --help exits 0" test "$rc" = 0
listed=1
for prog in $progs; do
	grep -qE "^  ${prog#bin/mgt-}( |\$)" "$tmp/out" || listed=0
done
check "mgt --help lists every bin/mgt-* tool" test "$listed" = 1

bin/mgt help tokenize >"$tmp/out" 2>&1
check "mgt help tokenize shows mgt-tokenize --help" grep -q "^Usage: mgt-tokenize" "$tmp/out"

# A tool on PATH, found when it is not next to mgt.
mkdir -p "$tmp/path"
# shellcheck disable=SC2016 # expanded by the fake tool, not here
printf '#!/bin/sh\necho "zzfake:$0:$#:$*"\nexit 7\n' >"$tmp/path/mgt-zzfake"
chmod +x "$tmp/path/mgt-zzfake"
PATH="$tmp/path:$PATH" bin/mgt zzfake "a b" c >"$tmp/out" 2>&1
rc=$?
check "mgt finds a tool on PATH and passes its arguments and exit status" \
	test "$rc" = 7 -a "$(cat "$tmp/out")" = "zzfake:$tmp/path/mgt-zzfake:2:a b c"

# The directory of mgt comes before PATH, and is found through a symbolic link.
mkdir -p "$tmp/self" "$tmp/link"
cp bin/mgt "$tmp/self/mgt"
printf '#!/bin/sh\necho self-tokenize\n' >"$tmp/self/mgt-tokenize"
chmod +x "$tmp/self/mgt-tokenize"
ln -s "$tmp/self/mgt" "$tmp/link/mgt"
PATH="$root/bin:$PATH" "$tmp/self/mgt" tokenize >"$tmp/out" 2>&1
check "mgt runs the tool next to itself before one on PATH" test "$(cat "$tmp/out")" = self-tokenize
PATH="$root/bin:$PATH" "$tmp/link/mgt" tokenize >"$tmp/out" 2>&1
check "mgt reached through a symbolic link looks next to its target" test "$(cat "$tmp/out")" = self-tokenize

# Every family --model-family names (its pretrain_*.py) is in mgt-train --help's opening lines,
# mgt-train(1)'s NAME line and the README's mgt-train row (issue 46: docs that said GPT only).
fams=$(bin/mgt-train --help | grep -- '^  --model-family' | grep -oE 'pretrain_[a-z0-9]+\.py' | sed 's/pretrain_//; s/\.py//' | tr '\n' ' ')
named=1
for f in $fams; do
	F=$(echo "$f" | tr a-z A-Z)
	bin/mgt-train --help | sed -n 2,3p | grep -q "pretrain_$f.py" || { echo "# mgt-train --help's opening lacks pretrain_$f.py"; named=0; }
	grep -A1 '^\.SH NAME' man/man1/mgt-train.1 | grep -qi "$F" || { echo "# mgt-train(1) NAME lacks $F"; named=0; }
	grep '^| `mgt-train`' README.md | grep -qi "$F" || { echo "# README's mgt-train row lacks $F"; named=0; }
done
check "mgt-train's --help, NAME and README row name every family (${fams:-none})" test "$named" = 1 -a -n "$fams"

echo "1..$n"
[ "$fails" = 0 ]
