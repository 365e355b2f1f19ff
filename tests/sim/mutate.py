#!/usr/bin/python3
"""tests/sim/mutate.py: mutation test of make check-sim's op checks (not in CI; make mutate-sim).

Copies the source tree (git ls-files, plus uncommitted changes) into a scratch directory, builds
the simulated test_cuda_ops there once (CUDA=0 MPI=0 DEPS=0), checks that the unmutated program
passes, then for each mutant of tests/sim/mutants.txt: applies it, rebuilds, runs the op checks
(MGT_TEST_SMALL=1, fixed seeds, MGT_TEST_FAILFAST=1 so that a killed mutant stops at its first
failure; an "access" mutant under the access profile and tests/sim/access-bounds.txt, as make
check-sim-access runs them), restores the file.  A mutant is killed when the program exits non-zero (a failed check,
a simulator report, a crash or a hang past --timeout); it survives when every check passes; a mutant that does not
compile is named and not counted.

Prints one line per mutant (killed/survived, the first failure and the seconds it took), then the
kill ratio; exits 0 (the ratio is the result), 2 when a mutant does not apply or the unmutated
tree fails.

  /usr/bin/python3 tests/sim/mutate.py [--tree DIR] [--only ID,ID] [--timeout S] [--keep]

--tree runs the mutants against another checkout (an older commit, to compare), with this
file's list unless --list is given."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse(path):
    """The mutants of `path`: dicts id, cls, what, file, edits [(anchor, old, new)]."""
    muts, cur, anchor, old = [], None, None, None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"\[([\w-]+)\]\s+(\w+):\s+(.*)$", line)
        if m:
            cur = dict(id=m.group(1), cls=m.group(2), what=m.group(3), file=None, edits=[])
            muts.append(cur)
            anchor = old = None
        elif cur is None:
            sys.exit(f"{path}:{n}: a line before the first [id] header")
        elif line.startswith("@ "):
            anchor = line[2:].strip()
        elif line.startswith("- "):
            old = line[2:].strip()
        elif line.startswith("+ "):
            if old is None:
                sys.exit(f"{path}:{n}: '+' without a '-' before it")
            cur["edits"].append((anchor, old, line[2:].strip()))
            old = None
        elif cur["file"] is None:
            cur["file"] = line.strip()
        else:
            sys.exit(f"{path}:{n}: expected '@ ', '- ' or '+ ', got {line!r}")
    for m in muts:
        if not m["file"] or not m["edits"]:
            sys.exit(f"{path}: mutant {m['id']}: no file or no edits")
    return muts


def apply(text, edits, mid):
    """text with the edits made; exits 2 when one does not apply to exactly one line."""
    lines = text.split("\n")
    for anchor, old, new in edits:
        start = 0
        if anchor:
            hits = [i for i, l in enumerate(lines) if anchor in l]
            if not hits:
                print(f"mutant {mid}: anchor {anchor!r} not found"), sys.exit(2)
            start = hits[0]
        hits = [i for i in range(start, len(lines)) if lines[i].strip() == old]
        if not hits:
            print(f"mutant {mid}: line {old!r} not found"), sys.exit(2)
        if not anchor and len(hits) > 1:
            print(f"mutant {mid}: line {old!r} found {len(hits)} times (add an '@ ' anchor)"), sys.exit(2)
        i = hits[0]
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = indent + new
    return "\n".join(lines)


def copy_tree(src, dst):
    files = subprocess.run(["git", "-C", src, "ls-files", "-co", "--exclude-standard"], check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for f in filter(None, files):
        s = os.path.join(src, f)
        if not os.path.isfile(s):
            continue
        d = os.path.join(dst, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(s, d)


MAKE = ["make", "-s", "CUDA=0", "MPI=0", "DEPS=0", "build/sim/test_cuda_ops_sim"]


def build(work):
    r = subprocess.run(MAKE, cwd=work, capture_output=True, text=True)
    return r.returncode == 0, (r.stdout + r.stderr)[-2000:]


def run(work, timeout, access=False):
    """access: under the access profile and its bounds, with their seeds (make check-sim-access)."""
    env = dict(os.environ, MGT_TEST_SMALL="1", MGT_TEST_SEED="12345", MGT_SIM_SEED="12345",
               MGT_TEST_FAILFAST="1")
    if access:
        env.update(MGT_TEST_SEED="1", MGT_SIM_SEED="1",
                   MGT_SIM_PROFILE=os.path.join(work, "build/sim/access-profile.txt"),
                   MGT_SIM_PROFILE_BOUNDS=os.path.join(work, "tests/sim/access-bounds.txt"))
    t0 = time.time()
    try:
        r = subprocess.run(["build/sim/test_cuda_ops_sim"], cwd=work, env=env, capture_output=True,
                           text=True, timeout=timeout)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = -1, f"timeout after {timeout} s\n" + (e.stdout or b"").decode(errors="replace")[-2000:]
    lines = out.split("\n")
    report = [l for l in lines if l.startswith("cuda sim:") and "block order" not in l]
    fails = [l for l in lines if l.startswith("not ok") or l.startswith("timeout")]
    why = (report or fails or [""])[0]
    if rc and not why:
        why = f"exit {rc}: " + out.strip().split("\n")[-1] if out.strip() else f"exit {rc}"
    return rc, why, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--list", default=os.path.join(HERE, "mutants.txt"))
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--keep", action="store_true", help="keep the scratch tree")
    a = ap.parse_args()
    muts = parse(a.list)
    if a.only:
        want = set(a.only.split(","))
        muts = [m for m in muts if m["id"] in want]
    work = tempfile.mkdtemp(prefix="mgt-mutate.")
    print(f"# tree {a.tree}, scratch {work}, {len(muts)} mutants", flush=True)
    copy_tree(a.tree, work)
    ok, log = build(work)
    if not ok:
        print(log), print("# the unmutated tree does not build"), sys.exit(2)
    rc, why, dt = run(work, a.timeout)
    if rc:
        print(f"# the unmutated tree fails ({why}); nothing to compare"), sys.exit(2)
    print(f"# unmutated: passes in {dt:.0f} s", flush=True)
    killed = counted = 0
    for m in muts:
        path = os.path.join(work, m["file"])
        orig = open(path, encoding="utf-8").read()
        open(path, "w", encoding="utf-8").write(apply(orig, m["edits"], m["id"]))
        ok, log = build(work)
        if ok:
            rc, why, dt = run(work, a.timeout, m["cls"] == "access")
        else:
            rc, why, dt = None, "does not compile (not counted): " + log.strip().split("\n")[-1], 0
        open(path, "w", encoding="utf-8").write(orig)
        os.utime(path)
        if rc is None:
            print(f"{'STILLBORN':8} {m['id']:18} {m['cls']:9}     -    {why[:150]}", flush=True)
            continue
        counted += 1
        killed += rc != 0
        state = "killed" if rc else "SURVIVED"
        print(f"{state:8} {m['id']:18} {m['cls']:9} {dt:5.0f} s  {why[:150]}", flush=True)
    print(f"# kill ratio {killed}/{counted}")
    build(work)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
