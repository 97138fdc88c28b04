#!/bin/bash
# crash.sh - SIGKILL the daemon at random instants during fsync / rename-over
# workloads; after each kill fsck must be clean and every fsynced file and
# completed rename-over intact (tests/integration/crash.py).
#   CRASH_SEED=N    repeat a run       CRASH_ROUNDS=N  kills (default 25,
#                                                      300 with full scale)
. "$(dirname "$0")/lib.sh" "$@"

[ -x "$FSCK" ] || fail "$FSCK not built"
if [ "$SCALE" = full ]; then ROUNDS=${CRASH_ROUNDS:-300}; else ROUNDS=${CRASH_ROUNDS:-25}; fi
SEED=${CRASH_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}

fs_mkfs -s 512M
st=0
python3 "$SRCDIR/tests/integration/crash.py" --daemon "$DAEMON" --fsck "$FSCK" \
	--image "$IMG" --mnt "$MNT" --journal "$TMP/journal" \
	--log "$TMP/crash-daemon.log" --rounds "$ROUNDS" --seed "$SEED" || st=$?
if [ $st -ne 0 ]; then
	tail -n 30 "$TMP/crash-daemon.log" >&2 || true
	fail "crash.py failed; rerun: CRASH_SEED=$SEED $0 $BUILD"
fi
finish
