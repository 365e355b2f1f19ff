#!/bin/sh
# Install node-llama-cpp (with only its linux-x64 CPU prebuilt) and @huggingface/gguf, pinned in
# package-lock.json, into tests/hf/llamacpp/node_modules when they are missing, and check that
# llama.cpp loads without building anything.
# A plain `npm install node-llama-cpp` pulls every platform's optional prebuilt (about 731 MB);
# `--omit=optional` skips them, and package.json names @node-llama-cpp/linux-x64 as a regular
# dependency, so only that one (about 30 MB; node_modules about 91 MB in all, ~10 s) is installed.
# `npm install --no-save` rather than `npm ci`: the lock file was made against a registry mirror
# without the mac/win/riscv64 prebuilts, and npm ci refuses a lock that lacks optional entries;
# npm install keeps every version the lock pins and leaves package-lock.json unchanged.
# Exit status: 0 ready; 77 (the "skip" status of automake-style test drivers) when node/npm, the npm
# registry or the prebuilt binary for this platform are not available.
set -u
dir=$(cd "$(dirname "$0")" && pwd) || exit 77
cd "$dir" || exit 77

skip() { echo "tests/hf/llamacpp/setup.sh: $*; skipping llama.cpp tests" >&2; exit 77; }

command -v node >/dev/null 2>&1 || skip "node not found"

check() {
  node -e '
    Promise.all([import("node-llama-cpp"), import("@huggingface/gguf")]).then(async ([m, g]) => {
      if (typeof g.gguf !== "function") process.exit(1);
      const l = await m.getLlama({ gpu: false, build: "never", logLevel: m.LlamaLogLevel.error, progressLogs: false });
      await l.dispose();
    }).catch(() => process.exit(1));
  ' >/dev/null 2>&1
}

if [ -d node_modules ] && check; then exit 0; fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) skip "the pinned prebuilt is for linux-x64 only" ;;
esac
command -v npm >/dev/null 2>&1 || skip "npm not found"
echo "tests/hf/llamacpp/setup.sh: installing npm packages (npm install --omit=optional --no-save)" >&2
if ! npm install --omit=optional --no-save --no-audit --no-fund --loglevel=error >&2; then
  skip "npm install failed (is the npm registry reachable?)"
fi
check || skip "node-llama-cpp does not load its linux-x64 CPU prebuilt"
exit 0
