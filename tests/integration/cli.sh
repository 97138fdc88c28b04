#!/bin/bash
# cli.sh - the arbor admin tool on an unmounted image: usage and dump show
# what was written through the mount; a mounted image is refused.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
fs_mkfs -s 128M
fs_mount
mkdir "$MNT/somedir"
echo small >"$MNT/somedir/inline-file"
head -c 1000000 /dev/urandom >"$MNT/big-file"
"$ARBOR" usage --image "$IMG" >/dev/null 2>&1 && fail "arbor opened a mounted image"
fs_umount
"$ARBOR" usage --image "$IMG" >"$TMP/usage" || fail "arbor usage failed"
grep -q "^generation" "$TMP/usage" || fail "no generation in: $(cat "$TMP/usage")"
used=$(awk '/^used/ {print $2}' "$TMP/usage")
[ "$used" -ge 1000000 ] || fail "arbor usage: used $used < 1000000 written"
"$ARBOR" dump --image "$IMG" 5 >"$TMP/dump" || fail "arbor dump failed"
for name in somedir inline-file big-file; do
	grep -q "'$name'" "$TMP/dump" || fail "dump lacks $name"
done
grep -q "inline 6 bytes" "$TMP/dump" || fail "dump lacks the inline extent"
grep -q " reg disk " "$TMP/dump" || fail "dump lacks the regular extent"
"$ARBOR" dump --image "$IMG" 12345 >/dev/null 2>&1 && fail "dump of a missing tree succeeded"
st=0
"$ARBOR" frobnicate --image "$IMG" >/dev/null 2>&1 || st=$?
[ $st = 2 ] || fail "unknown command: exit $st, want 2"
check_fsck
finish
