#!/bin/bash
# scrub.sh - `arbor scrub --image` reads every tree node and data block and
# verifies it: clean on a fresh image; after a byte of one file's data is
# flipped on disk it names that file (path through the back-references) and
# exits 3, and the daemon fails only that file with EIO; a damaged tree node
# is reported too.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"

fs_mkfs -s 256M
fs_mount
mkdir -p "$MNT/d/e"
head -c 3000000 /dev/urandom >"$TMP/big"
cp "$TMP/big" "$MNT/d/e/big"
head -c 200000 /dev/urandom >"$TMP/other"
cp "$TMP/other" "$MNT/other"
echo small >"$MNT/small"
cp -a "$SRCDIR/lib" "$MNT/lib"
ln "$MNT/d/e/big" "$MNT/biglink"
# enough names for a multi-level fs tree (nodes that are not roots)
mkdir "$MNT/many"
python3 -c '
import sys
for i in range(3000):
    open("%s/many/file-with-a-longish-name-%05d" % (sys.argv[1], i), "w").write("x" * (i % 300))
' "$MNT"
fs_umount

log "scrub of the fresh image"
out=$("$ARBOR" scrub --image "$IMG") || fail "scrub of a clean image failed: $out"
echo "$out"
grep -q "uncorrectable 0" <<<"$out" || fail "clean image: errors reported"
nodes=$(sed -n 's/^scrub done: \([0-9]*\) tree nodes, \([0-9]*\) data sectors.*/\1 \2/p' <<<"$out")
read -r n_nodes n_sectors <<<"$nodes"
[ "${n_nodes:-0}" -ge 4 ] || fail "only ${n_nodes:-0} tree nodes checked"
# 3,000,000 + 200,000 bytes of file data at least, in 4 KiB sectors
[ "${n_sectors:-0}" -ge 781 ] || fail "only ${n_sectors:-0} data sectors checked"

# the disk address of big's (only) extent, from the fs tree's EXTENT_DATA
ino=$("$ARBOR" dump --image "$IMG" 5 |
	sed -n "s/.*-> \([0-9]*\) 'big'$/\1/p" | head -n1)
[ -n "$ino" ] || fail "big not found in the dump"
disk=$("$ARBOR" dump --image "$IMG" 5 |
	sed -n "s/^  ($ino EXTENT_DATA 0) .* reg disk \([0-9]*\)+.*/\1/p")
[ -n "$disk" ] || fail "no extent of inode $ino in the dump"
log "big is inode $ino, extent at $disk; flipping a byte 1 MiB into it"
python3 - "$IMG" $((disk + 1048576 + 17)) <<'EOF'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x5a]))
EOF

st=0
out=$("$ARBOR" scrub --image "$IMG") || st=$?
echo "$out"
[ $st = 3 ] || fail "scrub exit status $st after data damage, want 3"
grep -q "data checksum mismatch: /d/e/big (inode $ino, file offset 1048576" <<<"$out" ||
	grep -q "data checksum mismatch: /biglink (inode $ino, file offset 1048576" <<<"$out" ||
	fail "scrub did not name /d/e/big at file offset 1048576"
grep -q "uncorrectable 1 " <<<"$out" || fail "want exactly 1 uncorrectable sector"

log "the daemon: EIO for big's damaged block only"
fs_mount
expect_errno EIO "open('d/e/big','rb').read()"
python3 - "$MNT/d/e/big" "$TMP/big" <<'EOF' || fail "undamaged parts of big do not read back"
import sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as g:
    # everything before the damaged sector reads and matches
    f.seek(0); g.seek(0)
    assert f.read(1048576) == g.read(1048576)
    f.seek(1048576 + 4096); g.seek(1048576 + 4096)
    assert f.read() == g.read()
EOF
cmp "$MNT/other" "$TMP/other" || fail "other file damaged"
diff -r "$SRCDIR/lib" "$MNT/lib" >/dev/null || fail "copied tree differs"
fs_umount

log "a damaged tree node (not a root) is reported"
roots=$("$ARBOR" dump --image "$IMG" | sed -n 's/^tree [0-9]*: root node \([0-9]*\) .*/\1/p')
# nodes read at open (roots, the path to the highest inode, ...) stop the
# open itself; try tree nodes from the middle of the address range until
# one of them is not on that path
cands=$("$ARBOR" dump --image "$IMG" 2 |
	sed -n 's/^  (\([0-9]*\) EXTENT_ITEM [0-9]*) .* tree$/\1/p' |
	grep -vxF "$roots")
total=$(wc -l <<<"$cands")
[ "$total" -ge 10 ] || fail "only $total tree nodes other than the roots"
cp "$IMG" "$TMP/saved.img"
found=
for i in $(seq $((total / 2)) $((total / 2 + 9))); do
	node=$(sed -n "${i}p" <<<"$cands")
	cp "$TMP/saved.img" "$IMG"
	python3 - "$IMG" $((node + 300)) <<'EOF'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0xff]))
EOF
	st=0
	out=$("$ARBOR" scrub --image "$IMG" 2>&1) || st=$?
	if [ $st = 1 ] && grep -q "cannot open" <<<"$out"; then
		log "node $node is read at open; next"
		continue
	fi
	echo "$out"
	[ $st = 3 ] || fail "scrub exit status $st after node damage, want 3"
	grep -q "tree node $node: .*checksum" <<<"$out" || fail "damaged node $node not named"
	grep -q "uncorrectable 2 " <<<"$out" || fail "want 2 uncorrectable (1 node, 1 sector)"
	found=1
	break
done
[ -n "$found" ] || fail "every node tried was needed to open the image"
finish
