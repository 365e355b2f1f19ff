#!/bin/sh
# tests/parts.sh MAKE PART...: make check-PART for each PART in turn, stopping at the first that
# fails, then print each part's wall time (also after a failure), so that the test budget can
# be read from any log (issue 30).  Exit status: the failed part's, else 0.
mk=$1; shift
sum=""; rc=0; t0=$(date +%s)
for p in "$@"; do
	s=$(date +%s)
	$mk --no-print-directory "check-$p" || rc=$?
	sum="$sum $p $(( $(date +%s) - s )) s,"
	[ $rc = 0 ] || { sum="$sum (check-$p failed)"; break; }
done
echo "== make check${MGT_TEST_FULL:+-full}: wall time per part:${sum%,}; total $(( $(date +%s) - t0 )) s"
exit $rc
