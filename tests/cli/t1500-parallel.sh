#!/bin/sh
# lib/parallel under mpirun: build/tests/test_parallel as 1, 2, 4 and 8 processes (tests/mpirun.sh)
# checks every collective (alltoallv included), send/recv, the byte counts and the groups of
# every layout that divides the world, the expert-parallel groups included; a rank that aborts or exits takes the job down, non-zero and in time.
. "$(dirname "$0")/lib.sh"
W=$ROOT/build/tests/test_parallel
RUN=$ROOT/tests/mpirun.sh
if [ ! -x "$W" ]; then echo "1..0 # SKIP build/tests/test_parallel not built (run make)"; exit 0; fi
if ! "$W" --have-mpi; then echo "1..0 # SKIP built without MPI (make MPI=1)"; exit 0; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "1..0 # SKIP mpirun not found"; exit 0; fi

# parallel NP: test_parallel as NP processes passes; its summary (rank 0) says nothing failed
parallel() {
	sh "$RUN" "$1" "$W" >"$T/out.$1" 2>"$T/err.$1" || {
		grep -v '^ok' "$T/out.$1" | head -20 | sed 's/^/# /'; head -c 1000 "$T/err.$1" | sed 's/^/# /'
		return 1
	}
	grep -q '^[1-9][0-9]* passed, 0 failed$' "$T/out.$1" || { echo "# no summary: $(tail -3 "$T/out.$1")"; return 1; }
}
for np in 1 2 4 8; do
	ok "test_parallel passes as $np process(es) under mpirun" parallel $np
done
ok "rank 0 alone prints the passing checks" sh -c "! grep -q '^\[rank' '$T/out.8'"

# dies MODE NP: rank 1 fails on purpose (MODE die-on-rank: mgt_parallel_abort(3); exit-on-rank:
# exit 2 without MPI knowing) while the others wait in a barrier; the job must end non-zero
# (not by the 60 s time limit: 124) and rank 1's message must be there
dies() {
	MGT_MPIRUN_TIMEOUT=60 sh "$RUN" "$2" "$W" "--$1" 1 >"$T/out" 2>"$T/err"
	r=$?
	case $r in 0 | 124 | 137) echo "# exit status $r"; return 1 ;; esac
	grep -q 'test_parallel: rank 1 of [0-9]* fails on purpose' "$T/err" "$T/out" ||
		{ echo "# no message from rank 1: $(head -c 300 "$T/err")"; return 1; }
}
ok "a rank calling mgt_parallel_abort(3) ends the job of 4 with a non-zero status" dies die-on-rank 4
ok "mgt_parallel_abort's code is the job's exit status" test "$(MGT_MPIRUN_TIMEOUT=60 sh "$RUN" 2 "$W" \
	--die-on-rank 1 >/dev/null 2>&1; echo $?)" = 3
ok "a rank exiting without MPI_Finalize ends the job of 4 with a non-zero status" dies exit-on-rank 4
done_testing
