#!/bin/sh
# Install the oracle's npm packages (pinned in package-lock.json) into tests/oracle/node_modules
# when they are missing, and check that they load.
# Exit status: 0 ready; 77 (the "skip" status of automake-style test drivers) when node/npm,
# the npm registry or the native tokenizers binding are not available.
set -u
dir=$(cd "$(dirname "$0")" && pwd) || exit 77
cd "$dir" || exit 77

skip() { echo "tests/oracle/setup.sh: $*; skipping oracle tests" >&2; exit 77; }

# One at a time: prove -j2 runs t0200 and t0210 side by side, and in a fresh clone both would
# find node_modules missing and run `npm ci` in this directory at once (npm ci deletes
# node_modules first, under the other's feet).  The lock is this directory itself (flock on a
# read-only descriptor: no lock file), held until the script exits.
if command -v flock >/dev/null 2>&1; then
  exec 9<"$dir" && flock 9 || skip "cannot lock $dir"
fi

command -v node >/dev/null 2>&1 || skip "node not found"

check() {
  node -e '
    const { Tokenizer } = require("tokenizers");
    const { get_encoding } = require("tiktoken");
    const g = require("gpt-3-encoder");
    const e = get_encoding("gpt2");
    const ids = Array.from(e.encode("Hello world")); e.free();
    if (ids.join() !== "15496,995" || g.encode("Hello world").join() !== "15496,995") process.exit(1);
    if (typeof Tokenizer.fromFile !== "function") process.exit(1);
  ' >/dev/null 2>&1
}

if [ -d node_modules ] && check; then exit 0; fi

command -v npm >/dev/null 2>&1 || skip "npm not found"
echo "tests/oracle/setup.sh: installing npm packages (npm ci)" >&2
if ! npm ci --no-audit --no-fund --loglevel=error >&2; then
  skip "npm ci failed (is the npm registry reachable?)"
fi
check || skip "installed packages do not load (no native tokenizers binding for this platform?)"
exit 0
