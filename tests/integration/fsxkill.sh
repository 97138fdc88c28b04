#!/bin/bash
# fsxkill.sh - the random exerciser fsx.py (clone, copy_file_range and
# dedupe among its operations) in batches through a real mount: each
# batch ends with a clean unmount or with SIGKILL of the daemon (after a
# commit and a few uncommitted operations, which the kill must lose);
# fsck.arborfs -n after each, then the mount must equal the reference
# directory (fsx.py, "--batch"; whole trees are compared there only,
# the objects an operation touched after each).  The daemon commits only
# on sync and fsync (commit=0,idle_commit=0), so that what a kill loses
# is known.  Offsets below 2 MiB (fsx.sh: 8 MiB): files that stay small
# enough to be read whole after every operation of a 100,000-op run, and
# ranges that overlap more often.
#   FSXKILL_SEED=N   replay a given seed (default: random, printed)
#   FSXKILL_OPS=N    operations (default 1000; 100000 with
#                    ARBOR_TEST_SCALE=full)
#   FSXKILL_BATCH=N  operations per batch (default 100; 500 at full scale)
#   FSX_ARGS="..."   more fsx.py arguments, e.g. "--skip mmap"
. "$(dirname "$0")/lib.sh" "$@"

[ -x "$FSCK" ] || fail "$FSCK not built"
ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
if [ "$SCALE" = full ]; then
	OPS=${FSXKILL_OPS:-100000}
	BATCH=${FSXKILL_BATCH:-500}
else
	OPS=${FSXKILL_OPS:-1000}
	BATCH=${FSXKILL_BATCH:-100}
fi
SEED=${FSXKILL_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}

fs_mkfs -s 1G
mkdir "$TMP/ref"
log "seed $SEED, $OPS operations, batches of $BATCH"
# fsx.py starts, kills and stops the daemon itself (by its PID); the EXIT
# trap of lib.sh still unmounts $MNT should fsx.py die.
st=0
python3 "$SRCDIR/tests/integration/fsx.py" --daemon "$DAEMON" --image "$IMG" \
	--mnt "$MNT" --ref "$TMP/ref" --seed "$SEED" --ops "$OPS" \
	--daemon-opt=-o --daemon-opt=commit=0,idle_commit=0 \
	--remount-prob 0 --batch "$BATCH" --full-every "$BATCH" --kill-prob 0.5 --tail 8 \
	--max-off $((2 << 20)) \
	--fsck "$FSCK" --arbor "$ARBOR" ${FSX_ARGS:-} || st=$?
if [ $st -ne 0 ]; then
	[ -s "$TMP/fsx-daemon.log" ] && tail -n 30 "$TMP/fsx-daemon.log" >&2
	fail "fsx.py failed (seed $SEED); rerun: FSXKILL_SEED=$SEED $0 $BUILD"
fi
DAEMON_LOG=$TMP/fsx-daemon.log check_daemon_log
check_fsck
finish
