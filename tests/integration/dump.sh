#!/bin/bash
# dump.sh - `arbor dump --image IMG` prints every item type an image holds
# through lib/items (one validate/print table): a small filesystem with
# directories, an inline, a regular and a preallocated file, hard links,
# small and out-of-line xattrs, a symlink and an orphan (an unlinked file
# still open when the daemon is killed after a commit).  No item is
# "invalid"; then items made invalid (a compressed extent) or of a newer
# format (a longer ROOT_ITEM) are printed with their reason, and the dump
# goes on.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
CORRUPT=$BUILD/tests/arbor-corrupt
[ -x "$ARBOR" ] || fail "$ARBOR not built"

fs_mkfs -s 128M
fs_mount
mkdir "$MNT/d" "$MNT/d/sub"
printf 'hello\n' >"$MNT/d/small"
head -c 300000 /dev/urandom >"$MNT/d/big"
ln "$MNT/d/big" "$MNT/d/big-link"
ln "$MNT/d/big" "$MNT/big-other-dir"
ln -s small "$MNT/d/sym"
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY); os.posix_fallocate(fd, 0, 65536); os.close(fd)' "$MNT/d/prealloc"
setfattr -n user.small -v value "$MNT/d/small"
setfattr -n user.large -v "$(head -c 20000 /dev/zero | tr '\0' A)" "$MNT/d/small"
# an orphan: unlinked while open, committed, then the daemon dies
exec 3<"$MNT/d/big"
: >"$MNT/d/gone"
exec 4<"$MNT/d/gone"
rm "$MNT/d/gone"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "arbor filesystem sync"
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
exec 3<&- 4<&-
force_unmount "$MNT"

log "arbor dump of every tree"
"$ARBOR" dump --image "$IMG" >"$TMP/dump" 2>"$TMP/dump.err" ||
	fail "arbor dump failed: $(cat "$TMP/dump.err")"
[ ! -s "$TMP/dump.err" ] || fail "arbor dump said: $(cat "$TMP/dump.err")"
for t in ROOT_ITEM EXTENT_ITEM EXTENT_DATA_REF EXTENT_CSUM INODE_ITEM \
	INODE_REF DIR_ITEM DIR_INDEX XATTR_ITEM XATTR_DATA EXTENT_DATA \
	ORPHAN_ITEM; do
	grep -q "^  ([0-9]* $t [0-9]*) size " "$TMP/dump" ||
		fail "no $t in the dump"
done
# every item line went through its printer: nothing unknown or invalid
if grep -E "invalid:|newer format:|unknown" "$TMP/dump"; then
	fail "items printed as invalid"
fi
grep -q " inline 6 bytes$" "$TMP/dump" || fail "no inline extent"
grep -q " reg disk [0-9]*+" "$TMP/dump" || fail "no regular extent"
grep -q " prealloc disk [0-9]*+" "$TMP/dump" || fail "no preallocated extent"
grep -q "'user.small' 5 bytes 'value'" "$TMP/dump" || fail "no small xattr"
grep -q "'user.large' out of line: 20000 bytes in [0-9]* pieces" "$TMP/dump" ||
	fail "no out-of-line xattr"
grep -q " index [0-9]* 'big'$" "$TMP/dump" || fail "no INODE_REF of big"
grep -q "^      index [0-9]* 'big-link'$" "$TMP/dump" ||
	fail "no second INODE_REF entry of big"
grep -q "type 10 -> [0-9]* 'sym'$" "$TMP/dump" || fail "no symlink entry"
grep -q "ORPHAN_ITEM [0-9]*) size 0 inode [0-9]*$" "$TMP/dump" ||
	fail "no orphan item"
# the counts: "tree N: M items" equals the item lines of tree N
awk '/^tree [0-9]*: root node/ { t = $2; n = 0; next }
     /^  \(/ { n++ }
     /^tree [0-9]*: [0-9]* items$/ { if ($3 != n) { print "tree " t " says " $3 ", printed " n; bad = 1 } }
     END { exit bad }' "$TMP/dump" || fail "item counts differ"

# the orphan is freed by the next mount; the image is then clean
fs_mount
[ ! -e "$MNT/d/gone" ] || fail "gone is back"
fs_umount
check_fsck

if [ -x "$CORRUPT" ]; then
	log "an invalid item and a newer-format ROOT_ITEM"
	"$CORRUPT" "$IMG" compressed d/big >"$TMP/corrupt.out" 2>&1 ||
		fail "arbor-corrupt compressed: $(cat "$TMP/corrupt.out")"
	"$CORRUPT" "$IMG" newer-root-item >"$TMP/corrupt.out" 2>&1 ||
		fail "arbor-corrupt newer-root-item: $(cat "$TMP/corrupt.out")"
	"$ARBOR" dump --image "$IMG" >"$TMP/dump" 2>"$TMP/dump.err" ||
		fail "arbor dump of the damaged image failed: $(cat "$TMP/dump.err")"
	grep -q "EXTENT_DATA 0) size 53 invalid: compressed (method 7, type 1)" "$TMP/dump" ||
		fail "no invalid compressed extent in: $(grep EXTENT_DATA "$TMP/dump")"
	grep -q "^  (9 ROOT_ITEM 0) size 112 newer format: " "$TMP/dump" ||
		fail "no newer-format ROOT_ITEM in: $(grep ROOT_ITEM "$TMP/dump")"
	grep -q "^tree 5: [0-9]* items$" "$TMP/dump" ||
		fail "the dump stopped at the invalid item"
else
	log "arbor-corrupt not built (tests disabled): damaged items skipped"
fi
finish
