#!/bin/bash
# backintime.sh - "I deleted the wrong directory ten seconds ago".
#
# A directory is written and synced (generation G), removed with rm -rf
# and synced again; `arbor filesystem history` lists G; after unmounting,
# `arborfs -o ro,generation=G` shows the directory as it was, cp gets it
# back, and the recovered copy survives unmount, remount and fsck.  The
# grace survives a writable remount in between (the history is in the
# superblock, the kept blocks are found again at open).  Refusals: a
# generation not listed, one never committed, generation= without ro.
# Space: on a small image the kept blocks never cause ENOSPC; writes go on
# until the image is really full, and G is then no longer offered.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
gen_of() { "$ARBOR" filesystem sync "$MNT" | awk '{print $2}'; }
listed() { "$ARBOR" filesystem history --json "$@" | grep -q "\"generation\": $G[,}]"; }

fs_mkfs -s 256M
fs_mount
mkdir -p "$MNT/precious/sub/deeper"
for i in $(seq 40); do
	head -c $((i * 3000 + 17)) /dev/urandom >"$MNT/precious/f$i"
done
head -c 3000000 /dev/urandom >"$MNT/precious/sub/big"
echo hello >"$MNT/precious/sub/deeper/small"
ln -s ../f1 "$MNT/precious/sub/link"
setfattr -n user.note -v kept "$MNT/precious/f2" 2>/dev/null || true
echo keep >"$MNT/other"
G=$(gen_of)
[ -n "$G" ] || fail "no generation from arbor filesystem sync"
MANIFEST_NO_NLINK=1 manifest "$MNT/precious" >"$TMP/before"
log "generation $G holds the directory; rm -rf"
rm -rf "$MNT/precious"
echo changed >"$MNT/other"
gen_of >/dev/null
listed "$MNT" || fail "history on the mount does not list $G: $("$ARBOR" filesystem history "$MNT")"
"$ARBOR" filesystem history "$MNT"
kept=$("$ARBOR" filesystem usage --json "$MNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["history"])')
log "kept for the history: $kept bytes"
[ "$kept" -ge 3000000 ] || fail "the grace keeps $kept bytes, less than the deleted data"
# a writable remount in between keeps it recoverable
fs_remount
echo again >"$MNT/other2"
gen_of >/dev/null
fs_umount
check_fsck
listed --image "$IMG" || fail "history --image does not list $G"

log "mount generation $G read-only and copy the directory back"
fs_mount -o ro,generation="$G"
[ -d "$MNT/precious" ] || fail "generation $G has no precious/"
[ "$(cat "$MNT/other")" = keep ] || fail "generation $G: other is not as it was"
[ ! -e "$MNT/other2" ] || fail "generation $G shows a later file"
MANIFEST_NO_NLINK=1 manifest "$MNT/precious" >"$TMP/old"
same_manifest "$TMP/before" "$TMP/old"
cp -a "$MNT/precious" "$TMP/recovered"
touch "$MNT/x" 2>/dev/null && fail "generation $G is writable"
fs_umount

fs_mount
[ ! -e "$MNT/precious" ] || fail "the newest generation shows precious/"
cp -a "$TMP/recovered" "$MNT/precious"
MANIFEST_NO_NLINK=1 manifest "$MNT/precious" >"$TMP/back"
same_manifest "$TMP/before" "$TMP/back"
fs_remount
MANIFEST_NO_NLINK=1 manifest "$MNT/precious" >"$TMP/back2"
same_manifest "$TMP/before" "$TMP/back2"
fs_umount
check_fsck

log "refusals"
newest=$("$ARBOR" filesystem history --json --image "$IMG" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["generations"][0]["generation"])')
for bad in "ro,generation=$((newest + 100))" "ro,generation=1" "generation=$G"; do
	if "$DAEMON" -f -o "$bad" "$IMG" "$MNT" >"$TMP/refused" 2>&1; then
		force_unmount "$MNT"
		fail "-o $bad mounted"
	fi
	log "-o $bad: $(head -c 300 "$TMP/refused")"
	grep -q "never committed\|not in the history\|add -o ro" "$TMP/refused" ||
		fail "-o $bad: no clear reason"
done
mountpoint -q "$MNT" && fail "a refused mount left $MNT mounted"

log "a small image: the grace never causes ENOSPC"
fs_mkfs -s 64M
fs_mount -o grace=600
head -c $((24 << 20)) /dev/urandom >"$MNT/old"
G=$(gen_of)
rm "$MNT/old"
gen_of >/dev/null
listed "$MNT" || fail "history does not list $G on the small image"
avail=$(df -B1 --output=avail "$MNT" | tail -1)
log "available after the delete: $avail bytes (the kept 24 MiB included)"
# 1 MiB files, each fsynced, until ENOSPC (a streaming dd stops at a
# point that varies by tens of MiB with the writeback, grace or not)
n=0
while [ $n -lt 200 ] &&
	dd if=/dev/zero of="$MNT/fill$n" bs=1M count=1 conv=fsync status=none 2>"$TMP/dd"; do
	n=$((n + 1))
done
grep -q "No space left" "$TMP/dd" || { cat "$TMP/dd" >&2; fail "no ENOSPC after $n MiB"; }
gen_of >/dev/null || true
size=$("$ARBOR" filesystem usage --json "$MNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"])')
log "$n files of 1 MiB stored, $size bytes of data"
[ "$size" -ge $((avail - (4 << 20))) ] ||
	fail "only $size of $avail bytes stored: the grace took space"
listed "$MNT" && fail "$G is still listed although its blocks were reused"
rm -f "$MNT"/fill*
fs_umount
check_fsck
if "$DAEMON" -f -o "ro,generation=$G" "$IMG" "$MNT" >"$TMP/refused" 2>&1; then
	force_unmount "$MNT"
	fail "generation $G mounted after its blocks were reused"
fi
log "generation $G refused: $(head -c 200 "$TMP/refused")"
finish
