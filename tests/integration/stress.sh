#!/bin/bash
# stress.sh - 16 processes at once on one mount (writers, appenders with
# fsync, readers, renamers, creators/deleters in a shared directory,
# directory builders, xattr setters, truncaters); contents checked at the
# end, after a remount, and fsck.
#   STRESS_SECONDS=N   how long (default 20, 300 with full scale)
. "$(dirname "$0")/lib.sh" "$@"

if [ "$SCALE" = full ]; then SECS=${STRESS_SECONDS:-300}; else SECS=${STRESS_SECONDS:-20}; fi
fs_mkfs -s 1G
fs_mount
python3 "$SRCDIR/tests/integration/stress.py" --root "$MNT" --seconds "$SECS" ||
	fail "stress.py found problems"
kill -0 "$DAEMON_PID" || fail "daemon died"
manifest "$MNT" >"$TMP/before"
fs_remount
manifest "$MNT" >"$TMP/after"
same_manifest "$TMP/before" "$TMP/after"
fs_umount
check_fsck
finish
