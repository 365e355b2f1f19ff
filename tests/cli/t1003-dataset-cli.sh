#!/bin/sh
# mgt-dataset command line: help texts, unknown commands and options, exit codes.
here=$(cd "$(dirname "$0")" && pwd)
D=$here/../../bin/mgt-dataset
. "$(dirname "$0")/dataset-lib.sh"
# run DESC CODE STREAM NEEDLE CMD...: exit status CODE and NEEDLE in stdout (STREAM=out) or stderr
run() {
	d=$1 code=$2 stream=$3 needle=$4; shift 4
	"$@" >out.txt 2>err.txt; rc=$?
	if [ $rc -eq "$code" ] && grep -qF -- "$needle" $stream.txt; then ok "$d"
	else nok "$d (exit $rc, $stream: $(head -c 300 $stream.txt))"; fi
}
run "--help" 0 out "Usage: mgt-dataset COMMAND" "$D" --help
run "help" 0 out "merge --output-prefix OUT" "$D" help
run "info --help" 0 out "Usage: mgt-dataset info PREFIX [--json]" "$D" info --help
run "merge --help" 0 out "--input DIR" "$D" merge --help
run "dump --help" 0 out "--strip-eod" "$D" dump -h
run "dump --help lists the tokenizer flags" 0 out "--tokenizer-type T" "$D" dump --help
run "no command (exit 2)" 2 err "mgt-dataset: error: a command is required" "$D"
run "unknown command (exit 2)" 2 err "unknown command 'frobnicate'" "$D" frobnicate
run "unknown option (exit 2)" 2 err "info: unknown option '--frob'" "$D" info --frob x
run "unknown short option (exit 2)" 2 err "unknown option '-z'" "$D" info -z x
run "missing option value (exit 2)" 2 err "option '--output-prefix' needs a value" "$D" merge --output-prefix
run "usage errors point at the command's help" 2 err "Try 'mgt-dataset merge --help'." "$D" merge x
run "info without PREFIX (exit 2)" 2 err "expected one PREFIX, got 0" "$D" info
run "missing dataset (exit 1)" 1 err "mgt-dataset: error: nothing.idx: cannot open" "$D" info nothing
run "bad tokenizer flag value (exit 2)" 2 err "--vocab-size" "$D" dump --vocab-size x y
printf 'MMIDIDX\0\0\1\0\0\0\0\0\0\0\10\0\0\0\0\0\0\0\0\1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' >e.idx
: >e.bin
run "hand-written empty dataset is valid" 0 out "documents:        0" "$D" info e
run "info --json on an empty dataset" 0 out '"sequence_length":null' "$D" info --json e
"$D" dump --ids e >out.txt 2>err.txt; rc=$?
if [ $rc -eq 0 ] && [ ! -s out.txt ]; then ok "dump of an empty dataset prints nothing"
else nok "dump of an empty dataset prints nothing (exit $rc)"; fi
echo "1..$n"
