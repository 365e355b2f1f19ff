#!/bin/sh
# Manual pages and the mgt dispatcher (TAP, run by prove).
#
# For every program bin/mgt-* (and bin/mgt): a page man/man1/PROG.1 exists, and every long
# option that `PROG --help` prints (and, for a program with commands, `PROG COMMAND --help`)
# appears in it.  Every page under man/ renders with `man --warnings` silent (skipped when
# man(1) is not installed).  The dispatcher runs tools, passes their arguments and exit
# status through, and refuses unknown tools with exit status 2.
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
		MANWIDTH=250 man --nh --nj -l "$1" 2>/dev/null
	else
		sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\&//g' -e 's/\\(aq/'"'"'/g' "$1"
	fi
}

# Long options printed by a help text on stdin, one per line.
long_options() {
	grep -oE -- '--[a-z][a-z0-9-]*' | sed 's/-*$//' | sort -u
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
		grep -qE -- "(^|[^a-zA-Z0-9-])$opt([^a-zA-Z0-9-]|\$)" "$tmp/page" || missing="$missing $opt"
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

echo "1..$n"
[ "$fails" = 0 ]
