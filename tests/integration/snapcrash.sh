#!/bin/bash
# snapcrash.sh - kill -9 the daemon at random instants while snapshots are
# made, deleted and cleaned (tests/integration/snapcrash.py; issue 26,
# "Tests").  After each kill: fsck.arborfs -n clean, the image mounts,
# every snapshot `arbor` reported created is there and holds what its
# source held when it was asked for, one cut off is there complete or not
# at all, a deleted one is gone, no unknown subvolume shows, `arbor
# subvolume sync` returns and no deleted subvolume is left.  At the end
# every subvolume is deleted and the usage is that of the new image.
#   SNAPCRASH_SEED=N    repeat a run (the seed is printed)
#   SNAPCRASH_ROUNDS=N  kills (default 12, 120 at full scale), a third
#                       each during creation, deletion and cleaning
#   SNAPCRASH_BIG=N     then kills during the cleaning of a big deleted
#                       subvolume (default 2 of 20,000 files; 6 of
#                       100,000 at full scale): fsck, the progress on the
#                       image, the next mount finishes it
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
[ -x "$FSCK" ] || fail "$FSCK not built"
if [ "$SCALE" = full ]; then ROUNDS=${SNAPCRASH_ROUNDS:-120}; else ROUNDS=${SNAPCRASH_ROUNDS:-12}; fi
if [ "$SCALE" = full ]; then BIG=${SNAPCRASH_BIG:-6}; BIGN=100000; else BIG=${SNAPCRASH_BIG:-1}; BIGN=20000; fi
SEED=${SNAPCRASH_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
log "seed $SEED (SNAPCRASH_SEED=$SEED to repeat), $ROUNDS kills"

fs_mkfs -s 1G
st=0
python3 "$SRCDIR/tests/integration/snapcrash.py" --daemon "$DAEMON" --arbor "$ARBOR" \
	--fsck "$FSCK" --image "$IMG" --mnt "$MNT" --log "$DAEMON_LOG" \
	--rounds "$ROUNDS" --seed "$SEED" --big-rounds "$BIG" --big-files "$BIGN" || st=$?
[ $st = 0 ] || fail "snapcrash.py failed; rerun: SNAPCRASH_SEED=$SEED ARBOR_TEST_SCALE=$SCALE $0 $BUILD"
check_daemon_log
check_fsck
finish
