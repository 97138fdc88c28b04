#!/bin/bash
# scrub.sh - `arbor scrub --image` reads every tree node and data block and
# verifies it: clean on a fresh image; after a byte of one file's data is
# flipped on disk it names that file (path through the back-references) and
# exits 3, and the daemon fails only that file with EIO; a damaged tree node
# is reported too.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"

flip() { # IMAGE OFFSET: invert one byte
	python3 - "$1" "$2" <<'EOF'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0xff]))
EOF
}

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

log "four bad sectors of one file (two names): one file affected"
cp "$IMG" "$TMP/multi.img"
for o in 2097152 2101248 2621440; do
	flip "$TMP/multi.img" $((disk + o + 5))
done
st=0
out=$("$ARBOR" scrub --image "$TMP/multi.img") || st=$?
[ $st = 3 ] || fail "multi: scrub exit status $st, want 3"
grep -q "uncorrectable 4 " <<<"$out" || { echo "$out"; fail "multi: want 4 uncorrectable sectors"; }
grep -q "files affected 1$" <<<"$out" || { echo "$out"; fail "multi: want 1 file affected"; }
rm -f "$TMP/multi.img"

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


# tree nodes (not roots) with their second copies: "ADDR COPY"
roots=$("$ARBOR" dump --image "$IMG" | sed -n 's/^tree [0-9]*: root node \([0-9]*\) .*/\1/p')
cands=$("$ARBOR" dump --image "$IMG" 2 |
	sed -n 's/^  (\([0-9]*\) EXTENT_ITEM [0-9]*) .* tree owner [0-9]* level [0-9]* copy \([0-9]*\)$/\1 \2/p' |
	grep -v -F -f <(sed 's/$/ /' <<<"$roots"))
total=$(wc -l <<<"$cands")
[ "$total" -ge 10 ] || fail "only $total tree nodes with a second copy (not dup?)"
cp "$IMG" "$TMP/saved.img"

log "one copy of a tree node damaged: reported by -r, rewritten by scrub"
node=$(sed -n "$((total / 2))p" <<<"$cands")
read -r addr copy <<<"$node"
flip "$IMG" $((addr + 300))
st=0
out=$("$ARBOR" scrub -r --image "$IMG" 2>&1) || st=$?
echo "$out"
[ $st = 3 ] || fail "scrub -r exit status $st after first-copy damage, want 3"
grep -q "tree node $addr: copy at $addr: .*not rewritten: read-only" <<<"$out" ||
	fail "damaged first copy of $addr not named"
st=0
out=$("$ARBOR" scrub --image "$IMG" 2>&1) || st=$?
echo "$out"
# the open may already have healed it (a read finds the bad copy first)
grep -q "tree node $addr: copy at $addr: .*rewritten from the good copy" <<<"$out" ||
	grep -q "corrected 0" <<<"$out" || fail "scrub did not rewrite $addr"
cmp <(dd if="$IMG" bs=16384 skip=$((addr / 16384)) count=1 status=none) \
	<(dd if="$IMG" bs=16384 skip=$((copy / 16384)) count=1 status=none) ||
	fail "the two copies of $addr differ after scrub"
out=$("$ARBOR" scrub -r --image "$IMG" 2>&1) || true
grep -q "tree node $addr" <<<"$out" && fail "node $addr still reported after repair"
"$FSCK" -n "$IMG" >/dev/null || true

log "the second copy damaged: rewritten from the first"
flip "$IMG" $((copy + 500))
out=$("$ARBOR" scrub --image "$IMG" 2>&1) || true
echo "$out"
grep -q "tree node $addr: copy at $copy: .*rewritten from the good copy" <<<"$out" ||
	fail "damaged second copy of $addr not rewritten"

log "both copies damaged: uncorrectable"
found=
for i in $(seq $((total / 2 + 1)) $((total / 2 + 10))); do
	read -r addr copy <<<"$(sed -n "${i}p" <<<"$cands")"
	cp "$TMP/saved.img" "$IMG"
	flip "$IMG" $((addr + 300))
	flip "$IMG" $((copy + 300))
	st=0
	out=$("$ARBOR" scrub -r --image "$IMG" 2>&1) || st=$?
	if [ $st = 1 ] && grep -q "cannot open" <<<"$out"; then
		log "node $addr is read at open; next"
		continue
	fi
	echo "$out"
	[ $st = 3 ] || fail "scrub exit status $st after damage to both copies, want 3"
	grep -q "tree node $addr: .*second copy at $copy: .*uncorrectable" <<<"$out" ||
		fail "node $addr not reported uncorrectable"
	found=1
	break
done
[ -n "$found" ] || fail "every node tried was needed to open the image"

log "a block shared with snapshots: every path that uses it is named"
fs_mkfs -s 128M
fs_mount
mkdir -p "$MNT/d"
head -c 300000 /dev/urandom >"$MNT/d/shared"
sync -f "$MNT"
"$ARBOR" subvolume snapshot "$MNT" "$MNT/snap" >/dev/null || fail "snapshot"
"$ARBOR" subvolume snapshot -r "$MNT/snap" "$MNT/ro" >/dev/null || fail "snapshot -r"
fs_umount
ino=$("$ARBOR" dump --image "$IMG" 5 |
	sed -n "s/.*-> \([0-9]*\) 'shared'$/\1/p" | head -n1)
disk=$("$ARBOR" dump --image "$IMG" 5 |
	sed -n "s/^  ($ino EXTENT_DATA 0) .* reg disk \([0-9]*\)+.*/\1/p")
[ -n "$disk" ] || fail "no extent of 'shared' in the dump"
flip "$IMG" $((disk + 70000))
st=0
out=$("$ARBOR" scrub --image "$IMG") || st=$?
echo "$out"
[ $st = 3 ] || fail "scrub exit status $st after shared damage, want 3"
for p in /d/shared /snap/d/shared /ro/d/shared; do
	n=$(grep -c "data checksum mismatch: $p (inode" <<<"$out" || true)
	[ "$n" = 1 ] || fail "scrub named $p $n times, want once"
done
grep -q "uncorrectable 1 " <<<"$out" || fail "want 1 uncorrectable sector"
grep -q "files affected 3$" <<<"$out" || fail "want 3 files affected"
finish
