# Shared helpers for the TAP shell tests (sourced). Sets ROOT, BIN, SHARE, T (a scratch dir).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
SHARE=$ROOT/share/mgt
PY=/usr/bin/python3
READER=$ROOT/tests/cli/megatron_idx_reader.py
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
tap_n=0
tap_fail=0
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file $SHARE/tokenizers/gpt2/vocab.json --merge-file $SHARE/tokenizers/gpt2/merges.txt"
# ok DESC CMD...: one TAP line for the exit status of CMD
ok() {
	d=$1; shift
	tap_n=$((tap_n + 1))
	if "$@"; then echo "ok $tap_n - $d"; else echo "not ok $tap_n - $d"; tap_fail=1; fi
}
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n # skip $1"; }
# quick: true under MGT_TEST_QUICK=1 (.ci/run's second pass, under AddressSanitizer and UBSan),
# where the longest scripts leave out the cases that rerun code paths their other cases already
# run (another layout of the same parallel code, another model family of the same converter);
# each case left out is a TAP skip naming MGT_TEST_QUICK.
quick() { [ -n "${MGT_TEST_QUICK:-}" ]; }
# exits CODE CMD...: CMD exits with CODE (stderr kept in $T/err)
exits() { c=$1; shift; "$@" >"$T/out" 2>"$T/err"; r=$?; [ "$r" = "$c" ] || { echo "# exit $r, expected $c: $(head -c 300 "$T/err")"; return 1; }; }
# no_files GLOB: nothing matches
no_files() { for f in "$@"; do [ -e "$f" ] && { echo "# unexpected file $f"; return 1; }; done; return 0; }
err_has() { grep -q -- "$1" "$T/err" || { echo "# stderr lacks '$1': $(head -c 300 "$T/err")"; return 1; }; }
done_testing() { echo "1..$tap_n"; exit $tap_fail; }
