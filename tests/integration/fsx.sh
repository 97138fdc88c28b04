#!/bin/bash
# fsx.sh - run the random-operations exerciser fsx.py against a fresh
# image, with remounts at random points, then fsck.
#   FSX_SEED=N      replay a given seed (default: random, printed)
#   FSX_OPS=N       number of operations (default 3000, 20000 with
#                   ARBOR_TEST_SCALE=full)
#   FSX_ARGS="..."  more fsx.py arguments, e.g. "--sync-every 1" to find
#                   the first operation whose commit fails, or
#                   "--skip mmap,fallocate"
. "$(dirname "$0")/lib.sh" "$@"

if [ "$SCALE" = full ]; then OPS=${FSX_OPS:-20000}; else OPS=${FSX_OPS:-3000}; fi
SEED=${FSX_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}

fs_mkfs -s 1G
mkdir "$TMP/ref"
# fsx.py starts and stops the daemon itself (by its PID); the EXIT trap of
# lib.sh still unmounts $MNT should fsx.py die.
st=0
python3 "$SRCDIR/tests/integration/fsx.py" --daemon "$DAEMON" --image "$IMG" \
	--mnt "$MNT" --ref "$TMP/ref" --seed "$SEED" --ops "$OPS" ${FSX_ARGS:-} || st=$?
if [ $st -ne 0 ]; then
	[ -s "$TMP/fsx-daemon.log" ] && tail -n 30 "$TMP/fsx-daemon.log" >&2
	fail "fsx.py failed (seed $SEED); rerun: FSX_SEED=$SEED $0 $BUILD"
fi
DAEMON_LOG=$TMP/fsx-daemon.log check_daemon_log
check_fsck
finish
