#!/bin/sh
# tests/mpirun.sh NP PROG [ARGS...]: run PROG as NP processes under OpenMPI's mpirun the way the
# tests need it on one machine, in a container, as root, with a time limit:
#   --oversubscribe           more processes than cores (CI machines have two)
#   --allow-run-as-root       CI runs as root (mpirun refuses otherwise)
#   --bind-to none            no core binding (oversubscribed, and cgroup-limited containers)
#   --mca pml ob1 --mca btl self,vader   shared memory only: no network, InfiniBand or UCX
#                             probing (slow or noisy in containers without devices)
#   --mca btl_vader_single_copy_mechanism none   no CMA (process_vm_readv), which container
#                             seccomp/ptrace rules often forbid
#   --mca mpi_yield_when_idle 1   waiting ranks yield the core: without it, 2 ranks on a
#                             2-core machine that also runs other tests spin and run ~10x slower
#   (no --quiet: it would also hide mpirun's report of a rank killed by a signal, which names
#   the rank, and of MPI_Abort)
# Sanitizer options pass through (the ranks inherit the environment; -x forwards them too), and
# LeakSanitizer gets tests/lsan-mpi.supp (in LSAN_OPTIONS: ASan's own suppressions= cannot hold
# leak: entries), which hides OpenMPI's own never-freed allocations but still reports leaks of
# our code; fast_unwind_on_malloc=0 (unless ASAN_OPTIONS says otherwise) records whole
# allocation stacks through OpenMPI, which has no frame pointers, so the patterns can match.
# A hang fails: the job is killed after MGT_MPIRUN_TIMEOUT seconds (default 600) and the wrapper
# exits 124.  Exit status: mpirun's (non-zero when any rank fails or aborts; an aborting rank's
# code when it called MPI_Abort).
set -u
if [ $# -lt 2 ]; then echo "usage: tests/mpirun.sh NP PROG [ARGS...]" >&2; exit 2; fi
np=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
supp=$here/lsan-mpi.supp
command -v mpirun >/dev/null 2>&1 || { echo "tests/mpirun.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 127; }

ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$supp:print_suppressions=0"
export ASAN_OPTIONS LSAN_OPTIONS
pass="-x ASAN_OPTIONS -x LSAN_OPTIONS"
[ -n "${UBSAN_OPTIONS:-}" ] && pass="$pass -x UBSAN_OPTIONS"
[ -n "${TSAN_OPTIONS:-}" ] && pass="$pass -x TSAN_OPTIONS"
[ -n "${OMP_NUM_THREADS:-}" ] && pass="$pass -x OMP_NUM_THREADS"

# OpenMPI's checks for root, in case an mpirun without the flag sits in front (srun, wrappers).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
# shellcheck disable=SC2086
exec timeout -k 10 "${MGT_MPIRUN_TIMEOUT:-600}" mpirun -np "$np" --oversubscribe --allow-run-as-root \
	--bind-to none --mca pml ob1 --mca btl self,vader --mca mpi_yield_when_idle 1 \
	--mca btl_vader_single_copy_mechanism none $pass "$@"
