# Shared preamble of the mgt-dataset TAP tests (sourced): paths, a scratch directory (the
# current directory from here on) and the TAP helpers ok, nok, skip, check and expect_fail.
here=$(cd "$(dirname "$0")" && pwd)
BIN=$here/../../bin
PY=/usr/bin/python3
READER=$here/megatron_idx_reader.py
WRITER=$here/megatron_idx_writer.py
if ! $PY -c 'import numpy' 2>/dev/null; then echo "1..0 # SKIP /usr/bin/python3 has no numpy"; exit 0; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
check() { d=$1; shift; if "$@" >/dev/null 2>&1; then ok "$d"; else nok "$d"; fi; }
# expect_fail DESC CODE NEEDLE CMD...: exit status CODE and NEEDLE in stderr
expect_fail() {
	d=$1 code=$2 needle=$3; shift 3
	"$@" >out.txt 2>err.txt; rc=$?
	if [ $rc -eq "$code" ] && grep -qF -- "$needle" err.txt; then ok "$d"
	else nok "$d (exit $rc, stderr: $(head -c 300 err.txt))"; fi
}
