#!/bin/bash
# snapstress.sh - many snapshots of a live tree (issue 26, "Tests"):
# writer processes change a subvolume (tests/integration/snapstress.py:
# create, overwrite, append, truncate, rename, unlink, mkdir, fsync or
# close) while the test takes snapshots of it, read-only and writable.
#
#  1. run: writers and snapshots; unmount, fsck -n;
#  2. after a remount, each snapshot holds exactly the bytes its source
#     held, for every file whose change had returned (fsync / close) before
#     the snapshot call began and was not changed again before the call
#     returned; no file in any snapshot has a zero tail or a size beyond its
#     data; writes into writable snapshots are not seen in the source and
#     the source's writes are not seen in any snapshot; unmount, fsck -n;
#  3. every snapshot deleted (random order), `arbor subvolume sync`;
#     unmount, fsck -n; the space in use (data, metadata) is exactly what
#     the remaining trees reach on the image (the source changed all along:
#     what it used before the first snapshot is no reference); then the
#     source itself is deleted and the usage returns to the empty
#     filesystem's, exactly; unmount, fsck -n.
#
#   SNAPSTRESS_SEED=N       repeat a run (the seed is printed)
#   SNAPSTRESS_SNAPSHOTS=N  how many snapshots (default 30, 300 at full scale)
#   SNAPSTRESS_WRITERS=N    writer processes (default 4, 8 at full scale)
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
[ -x "$FSCK" ] || fail "$FSCK not built"
if [ "$SCALE" = full ]; then
	NSNAP=${SNAPSTRESS_SNAPSHOTS:-300} NW=${SNAPSTRESS_WRITERS:-8} INTERVAL=0.3
else
	NSNAP=${SNAPSTRESS_SNAPSHOTS:-30} NW=${SNAPSTRESS_WRITERS:-4} INTERVAL=0.2
fi
SEED=${SNAPSTRESS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
log "seed $SEED (SNAPSTRESS_SEED=$SEED to repeat), $NSNAP snapshots, $NW writers"
RERUN="rerun: SNAPSTRESS_SEED=$SEED ARBOR_TEST_SCALE=$SCALE $0 $BUILD"

py() {
	python3 "$SRCDIR/tests/integration/snapstress.py" "$1" --root "$MNT" \
		--arbor "$ARBOR" --state "$TMP/state.json" --logdir "$TMP/logs" \
		--seed "$SEED" "${@:2}"
}
# usage_of JSON FIELD
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# at full scale the snapshots pin every version the writers make for minutes
if [ "$SCALE" = full ]; then fs_mkfs -s 8G; else fs_mkfs -s 2G; fi
fs_mount
NODE=$("$ARBOR" filesystem show "$MNT" | awk '/^node size/ { print $3 }')
[ -n "$NODE" ] || fail "no node size from arbor filesystem show"
U_EMPTY=$(py usage --sv "")
"$ARBOR" subvolume create "$MNT/sv" >/dev/null || fail "subvolume create failed"
U_BEFORE=$(py usage)
log "empty: $U_EMPTY; with the source: $U_BEFORE"

log "phase 1: $NW writers and $NSNAP snapshots"
py run --writers "$NW" --snapshots "$NSNAP" --interval "$INTERVAL" ||
	fail "run failed; $RERUN"
kill -0 "$DAEMON_PID" || fail "daemon died"
fs_umount
check_fsck

log "phase 2: contents after a remount, independence"
fs_mount
py verify || fail "snapshot contents wrong; $RERUN"
py independence || fail "snapshots and source not independent; $RERUN"
fs_umount
check_fsck

log "phase 3: delete in random order, sync, space"
fs_mount
py delete || fail "delete failed; $RERUN"
U_AFTER=$(py usage)
log "after deleting every snapshot: $U_AFTER"
fs_umount
check_fsck
# The source changed all along, so what it used before the first snapshot
# is no reference; what it reaches now is, exactly (tolerance 0): the data
# of the distinct extents its file extent items name (whole: an extent
# still partly referenced stays whole, as in btrfs, so st_blocks is no
# measure) and the nodes fsck reaches.  A snapshot tree, node or extent
# whose space did not come back is counted in use and reached by nothing.
python3 "$SRCDIR/tests/integration/snapstress.py" accounting --image "$IMG" \
	--arbor "$ARBOR" --fsck "$FSCK" ||
	soft_fail "space in use is not what the remaining trees reach; $RERUN"
fs_mount
# Every tree gone: the usage of the empty filesystem, to the byte, within
# four nodes of metadata (room for the root tree growing a level).
"$ARBOR" subvolume delete "$MNT/sv" >/dev/null || fail "delete of the source failed"
rm -rf "${MNT:?}/snaps"
"$ARBOR" subvolume sync "$MNT" || fail "subvolume sync failed"
U_END=$(py usage --sv "")
log "after deleting the source too: $U_END (empty: $U_EMPTY)"
[ "$(field "$U_END" data)" = "$(field "$U_EMPTY" data)" ] ||
	soft_fail "data in use $(field "$U_END" data) B with every tree gone, $(field "$U_EMPTY" data) B when empty"
d=$(($(field "$U_END" metadata) - $(field "$U_EMPTY" metadata)))
[ ${d#-} -le $((4 * NODE)) ] ||
	soft_fail "metadata $(field "$U_END" metadata) B with every tree gone, $(field "$U_EMPTY" metadata) B when empty; $RERUN"
fs_umount
check_fsck
finish
