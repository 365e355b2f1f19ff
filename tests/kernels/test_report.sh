#!/bin/sh
# tests/kernels/report.py's check on a made-up build: one kernel's ptxas lines and PTX, bounds
# written from it, then each fault the check exists for planted in a copy: a new spill, fewer
# registers-limited warps (more registers), a lost mma.sync, a new kernel, a removed kernel.
# Each must fail naming the kernel; the unchanged build must pass.  Bounds written by another nvcc
# turn a spill into a note, while a lost tensor-core instruction still fails.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
R="/usr/bin/python3 $(dirname "$0")/report.py"
n=0; fail=0
build() { # DIR REGS SPILL MMA [EXTRA-KERNEL]
	mkdir -p "$1/keep"
	{ echo "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'"
	  echo "ptxas info    : Function properties for _Z3fooPf"
	  echo "    0 bytes stack frame, $3 bytes spill stores, 0 bytes spill loads"
	  echo "ptxas info    : Used $2 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]"
	  [ -n "$5" ] && echo "ptxas info    : Compiling entry function '$5' for 'sm_90a'" &&
		echo "ptxas info    : Used 8 registers, used 0 barriers, 400 bytes cmem[0]"; } >"$1/k.ptxas"
	{ echo ".version 9.0"; echo ".visible .entry _Z3fooPf("; echo ".maxntid 128, 1, 1"; echo "{"
	  i=0; while [ $i -lt "$4" ]; do echo "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f1};"; i=$((i + 1)); done
	  echo "}"; } >"$1/keep/k.compute_90a.ptx"
}
expect() { # DESCRIPTION WANT-EXIT PATTERN DIR
	n=$((n + 1))
	$R "$4" --check "$T/bounds.txt" >"$T/out" 2>&1; r=$?
	if [ $r = "$2" ] && grep -q -- "$3" "$T/out"; then echo "ok $n - $1"
	else echo "not ok $n - $1 (exit $r)"; sed 's/^/#   /' "$T/out"; fail=1; fi
}
build "$T/a" 64 0 2
$R "$T/a" --write-bounds "$T/bounds.txt" >/dev/null
expect "the build the bounds were written from passes" 0 "ok" "$T/a"
build "$T/b" 64 16 2; expect "a new spill fails naming the kernel" 1 "foo(float\*): spills 16" "$T/b"
build "$T/c" 168 0 2; expect "more registers, fewer warps per SM, fails" 1 "allow 12 warps per SM, fewer than 32" "$T/c"
build "$T/d" 64 0 0; expect "a lost mma.sync fails" 1 "lost its tensor-core" "$T/d"
build "$T/e" 64 0 2 _Z3barv; expect "a kernel without bounds fails" 1 "bar(): a new kernel" "$T/e"
sed 's/nvcc [^ ]*$/nvcc V0.0.0/' "$T/bounds.txt" >"$T/other.txt" && cp "$T/bounds.txt" "$T/same.txt" && cp "$T/other.txt" "$T/bounds.txt"
expect "under another nvcc a new spill is noted, not failed" 0 "note: foo(float\*): spills 16 bytes (bound 0), another nvcc" "$T/b"
expect "under another nvcc a lost mma.sync still fails" 1 "lost its tensor-core" "$T/d"
cp "$T/same.txt" "$T/bounds.txt"
printf '_Z3bazv 8 0 64 0 0\n' >>"$T/bounds.txt"
expect "a kernel in the bounds but not built fails" 1 "baz(): in" "$T/a"
echo "1..$n"
exit $fail
