#!/bin/bash
# stress.sh - 16 processes at once on one mount (writers, appenders with
# fsync, readers, renamers, creators/deleters in a shared directory,
# directory builders, xattr setters, truncaters), and beside them scrub and
# the online check in a loop, each of which must come back clean; contents
# checked at the end, after a remount, and fsck.
#   STRESS_SECONDS=N   how long (default 20, 300 with full scale)
. "$(dirname "$0")/lib.sh" "$@"

if [ "$SCALE" = full ]; then SECS=${STRESS_SECONDS:-300}; else SECS=${STRESS_SECONDS:-20}; fi
fs_mkfs -s 1G
fs_mount
ARBOR=$BUILD/cli/arbor
python3 "$SRCDIR/tests/integration/stress.py" --root "$MNT" --seconds "$SECS" &
STRESS_PID=$!
test_cleanup() { kill "$STRESS_PID" 2>/dev/null; }
# scrub and online check while the 16 processes run: both read the
# committed state under the writers' feet and must find nothing wrong
scrubs=0 checks=0
while kill -0 "$STRESS_PID" 2>/dev/null; do
	"$ARBOR" scrub start -B "$MNT" >"$TMP/scrub.out" 2>&1 ||
		{ cat "$TMP/scrub.out" >&2; fail "scrub during the stress run found problems"; }
	scrubs=$((scrubs + 1))
	kill -0 "$STRESS_PID" 2>/dev/null || break
	"$ARBOR" check -q "$MNT" >"$TMP/check.out" 2>&1 ||
		{ cat "$TMP/check.out" >&2; fail "online check during the stress run found problems"; }
	checks=$((checks + 1))
done
wait "$STRESS_PID" || fail "stress.py found problems"
log "$scrubs scrubs and $checks online checks during the run, all clean"
[ $scrubs -ge 1 ] || fail "no scrub ran during the stress run"
kill -0 "$DAEMON_PID" || fail "daemon died"
manifest "$MNT" >"$TMP/before"
fs_remount
manifest "$MNT" >"$TMP/after"
same_manifest "$TMP/before" "$TMP/after"
fs_umount
check_fsck
finish
