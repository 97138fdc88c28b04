#!/bin/bash
# mkfs.sh - mkfs.arborfs: arguments, sizes, refusing to overwrite other
# filesystems, and images that mount.
. "$(dirname "$0")/lib.sh" "$@"

install_pkg setfattr attr || true

# must_fail WHAT-IN-MESSAGE ARGS...: mkfs exits 1 and says something
must_fail() {
	local want=$1 st=0 out
	shift
	out=$("$MKFS" "$@" 2>&1) || st=$?
	[ $st -eq 1 ] || fail "mkfs.arborfs $*: status $st, want 1 ($out)"
	grep -qi -- "$want" <<<"$out" || fail "mkfs.arborfs $*: message '$out' lacks '$want'"
}

log "argument validation"
must_fail "size" -s 12X "$IMG"
must_fail "size" -s -5 "$IMG"
must_fail "size" -s 0 "$IMG"
must_fail "size" -s 99999999999999999999T "$IMG"
must_fail "node size" -n 3000 "$IMG"
must_fail "node size" -n 2K "$IMG"
must_fail "node size" -n 128K "$IMG"
must_fail "node size" -n 24K "$IMG"
must_fail "UUID" -U not-a-uuid "$IMG"
must_fail "UUID" -U 00000000-0000-0000-0000-000000000000 "$IMG"
must_fail "label" -L "$(printf 'l%.0s' $(seq 1 256))" "$IMG"
must_fail "IMAGE" -q
must_fail "unexpected" "$IMG" extra
must_fail "" -Z "$IMG"
must_fail "neither" "$TMP"
[ ! -e "$IMG" ] || fail "a failed mkfs left $IMG behind"
grep -q -- '-n NODESIZE' <<<"$("$MKFS" -h)" || fail "-h"

log "new file: default 1 GiB, sparse"
out=$("$MKFS" -L mylabel -U 0c9e8f5a-1b2c-4d3e-8f70-123456789abc "$IMG")
echo "$out"
[ "$(stat -c %s "$IMG")" = $((1 << 30)) ] || fail "default size $(stat -c %s "$IMG")"
[ "$(stat -c %b "$IMG")" -lt 65536 ] || fail "image not sparse: $(stat -c %b "$IMG") blocks"
grep -q 0c9e8f5a-1b2c-4d3e-8f70-123456789abc <<<"$out" || fail "UUID not printed"
grep -q 16384 <<<"$out" || fail "node size not printed"
grep -qi "1.00 GiB\|1073741824" <<<"$out" || fail "size not printed"
# the magic in one of the two superblock copies (64 KiB, 128 KiB)
cmp -s -n 8 -i $((65536 + 32)):0 "$IMG" <(printf 'ARBORFS!') ||
	cmp -s -n 8 -i $((131072 + 32)):0 "$IMG" <(printf 'ARBORFS!') ||
	fail "no magic at 64 KiB + 32 or 128 KiB + 32"
cmp -s -n 8 -i $((65536 + 32)):0 "$IMG" <(printf 'ARBORFS!') ||
	log "NOTE: the superblock at 64 KiB does not carry the final magic after mkfs"

log "refuse to overwrite"
must_fail "arborfs" "$IMG"
must_fail "arborfs" -s 2G "$IMG"
"$MKFS" -q -f -n 4K "$IMG" || fail "-f over arborfs"
[ "$(stat -c %s "$IMG")" = $((1 << 30)) ] || fail "existing file size not kept"
[ -z "$("$MKFS" -q -f -n 64K "$IMG")" ] || fail "-q printed something"

fake() { # fake FSNAME: an image with that filesystem's magic only
	rm -f "$IMG"
	truncate -s 64M "$IMG"
	case $1 in
	ext4) printf '\x53\xef' | dd of="$IMG" bs=1 seek=$((1024 + 56)) conv=notrunc status=none ;;
	btrfs) printf '_BHRfS_M' | dd of="$IMG" bs=1 seek=$((65536 + 64)) conv=notrunc status=none ;;
	xfs) printf 'XFSB' | dd of="$IMG" bs=1 seek=0 conv=notrunc status=none ;;
	esac
}
for t in ext4 btrfs xfs; do
	fake $t
	must_fail "${t%4}" "$IMG"
	"$MKFS" -q -f "$IMG" || fail "-f over $t"
done
if command -v mkfs.ext4 >/dev/null; then
	rm -f "$IMG"
	truncate -s 64M "$IMG"
	mkfs.ext4 -q -F "$IMG"
	must_fail "ext" "$IMG"
fi

log "sizes"
rm -f "$IMG"
"$MKFS" -q -s 300M "$IMG"
[ "$(stat -c %s "$IMG")" = $((300 << 20)) ] || fail "-s 300M"
rm -f "$IMG"
truncate -s 200M "$IMG"
"$MKFS" -q "$IMG" || fail "mkfs on an existing empty-looking file"
[ "$(stat -c %s "$IMG")" = $((200 << 20)) ] || fail "existing size not used"
"$MKFS" -q -f -s 1G "$IMG" || fail "growing an existing file"
[ "$(stat -c %s "$IMG")" = $((1 << 30)) ] || fail "-s did not grow the file"
"$MKFS" -q -f -s 100M "$IMG" || fail "mkfs smaller than the file"
rm -f "$IMG"
st=0
"$MKFS" -q -s 64K "$IMG" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "64 KiB filesystem accepted"
log "64 KiB: $(cat "$TMP/err")"
[ ! -e "$IMG" ] || fail "failed mkfs left a new file behind"
# the message states the minimum, and that size works
for n in 16K 64K; do
	st=0
	"$MKFS" -q -n $n -s 3M "$IMG" 2>"$TMP/err" || st=$?
	[ $st = 1 ] || fail "3 MiB with $n nodes accepted"
	min=$(sed -n 's/.*the minimum with .* is \([0-9]*\) bytes (-s \([0-9]*[KM]\)).*/\1/p' "$TMP/err")
	[ -n "$min" ] || fail "-s 3M -n $n: no minimum in '$(cat "$TMP/err")'"
	"$MKFS" -q -n $n -s "$min" "$IMG" || fail "-n $n -s $min (the minimum stated) failed"
	rm -f "$IMG"
	st=0
	"$MKFS" -q -n $n -s $((min - 4096)) "$IMG" 2>/dev/null || st=$?
	[ $st = 1 ] || fail "-n $n: 4 KiB below the minimum stated accepted"
	rm -f "$IMG"
done

log "each node size mounts"
for n in 4K 8K 16K 32K 64K; do
	fs_mkfs -s 512M -n $n
	fs_mount
	mkdir "$MNT/d"
	head -c 200000 /dev/urandom >"$MNT/d/f"
	for i in $(seq 1 300); do echo $i >"$MNT/d/s$i"; done
	cp "$MNT/d/f" "$TMP/f"
	fs_remount
	cmp "$TMP/f" "$MNT/d/f" || fail "nodesize $n: data"
	[ "$(ls "$MNT/d" | wc -l)" = 301 ] || fail "nodesize $n: entries"
	fs_umount
	check_fsck
done

log "-r DIR: populate from a directory"
SRC=$TMP/src
mkdir -p "$SRC/a/b/c" "$SRC/empty" "$SRC/private"
head -c 3000000 /dev/urandom >"$SRC/a/big"
echo small >"$SRC/a/b/small"
: >"$SRC/zero"
truncate -s 100M "$SRC/sparse"
printf 'middle' | dd of="$SRC/sparse" bs=1 seek=$((50 << 20)) conv=notrunc status=none
ln "$SRC/a/big" "$SRC/a/b/c/big-link"
ln "$SRC/a/b/small" "$SRC/small-link"
ln -s a/b/small "$SRC/sym"
ln -s /dangling "$SRC/a/dangling"
mkfifo "$SRC/fifo"
mknod "$SRC/null" c 1 3
mknod "$SRC/loop" b 7 0
chmod 4755 "$SRC/a/big"
chmod 0444 "$SRC/a/b/small"
chmod 0555 "$SRC/a/b"
chmod 0700 "$SRC/private"
chown 1234:5678 "$SRC/zero"
chown -h 42:43 "$SRC/sym"
chown 99:98 "$SRC/private"
setfattr -n user.one -v 1 "$SRC/zero" 2>/dev/null || true
setfattr -n trusted.two -v 0xdeadbeef "$SRC/a" 2>/dev/null || true
touch -d '2001-02-03 04:05:06.123456789' "$SRC/a/big"
touch -h -d '2002-01-01 00:00:00' "$SRC/sym"
touch -d '1999-01-01 12:00:00.5' "$SRC/a/b/c" "$SRC/a" "$SRC"
rm -f "$IMG"
"$MKFS" -q -s 512M -r "$SRC" "$IMG" || fail "mkfs -r"
manifest "$SRC" >"$TMP/src.manifest"
fs_mount
manifest "$MNT" >"$TMP/img.manifest"
same_manifest "$TMP/src.manifest" "$TMP/img.manifest"
[ "$(stat -c %b "$MNT/sparse")" -lt 1000 ] || fail "-r: holes not kept ($(stat -c %b "$MNT/sparse") blocks)"
[ "$(TZ=UTC stat -c %y "$MNT/a/big")" = "$(TZ=UTC stat -c %y "$SRC/a/big")" ] || fail "-r: mtime"
fs_umount
check_fsck
chmod 755 "$SRC/a/b"
st=0
"$MKFS" -q -f -r "$TMP/nonexistent" "$IMG" 2>/dev/null || st=$?
[ $st = 1 ] || fail "-r with a missing directory: status $st"
rm -f "$IMG"
"$MKFS" -q -s 64M -r /usr/include "$IMG" 2>"$TMP/err" && fail "-r of 100+ MB into 64 MiB succeeded"
log "-r too big: $(tail -n 2 "$TMP/err" | tr '\n' ' ')"

log "mkfs on an image in use"
fs_mount
st=0
"$MKFS" -q -f "$IMG" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "mkfs of a mounted image: status $st"
log "mounted: $(cat "$TMP/err")"
fs_umount

# nodes PROG IMAGE [ARGS]: walk the image's trees in Python (independent of
# the library) from the newest superblock; PROG sees the image (data, a
# bytearray written back afterwards), ns (node size), copies (superblock
# s_meta_copies) and found: (tree, level, first copy, second copy) of every
# node.
nodes() {
	python3 - "$@" <<'EOF'
import struct, sys
prog, img = sys.argv[1], sys.argv[2]
with open(img, "rb") as f:
    data = bytearray(f.read())
best = None
for off in (64 << 10, 128 << 10):
    gen = struct.unpack_from("<Q", data, off + 64)[0]
    if data[off + 32:off + 40] == b"ARBORFS!" and (best is None or gen > best[1]):
        best = (off, gen)
sb = best[0]
ns = struct.unpack_from("<I", data, sb + 96)[0]
copies = data[sb + 111]
found = []
def walk(tree, addr, mirror):
    level, nr = data[addr + 84], struct.unpack_from("<I", data, addr + 80)[0]
    found.append((tree, level, addr, mirror))
    for i in range(nr):
        if level:
            p = addr + 96 + 41 * i
            walk(tree, struct.unpack_from("<Q", data, p + 17)[0],
                 struct.unpack_from("<Q", data, p + 33)[0])
        elif tree == 1:
            it = addr + 96 + 25 * i
            oid, typ = struct.unpack_from("<QB", data, it)
            doff = struct.unpack_from("<I", data, it + 17)[0]
            if typ == 132:
                walk(oid, struct.unpack_from("<Q", data, addr + doff)[0],
                     struct.unpack_from("<Q", data, addr + doff + 96)[0])
walk(1, struct.unpack_from("<Q", data, sb + 72)[0],
     struct.unpack_from("<Q", data, sb + 408)[0])
exec(prog)
with open(img, "r+b") as f:
    f.write(data)
EOF
}

log "metadata profiles: -m single, -m dup, default dup"
must_fail "profile" -m raid1 "$IMG"
grep -q -- '-m PROFILE' <<<"$("$MKFS" -h)" || fail "-h lacks -m"
for prof in single dup default; do
	rm -f "$IMG"
	if [ $prof = default ]; then
		out=$("$MKFS" -s 256M "$IMG")
	else
		out=$("$MKFS" -s 256M -m $prof "$IMG")
	fi
	want=$([ $prof = single ] && echo single || echo dup)
	grep -q "Metadata: *$want" <<<"$out" || fail "-m $prof: mkfs says $(grep Metadata <<<"$out")"
	fs_mount
	mkdir "$MNT/d"
	for i in $(seq 1 50); do echo "file $i" >"$MNT/d/f$i"; done
	fs_umount
	fs_mount
	[ "$(cat "$MNT/d/f50")" = "file 50" ] || fail "-m $prof: contents after remount"
	fs_umount
	check_fsck
	nodes 'copies_seen = {m != 0 for (_, _, _, m) in found}
n = 2 if "'"$want"'" == "dup" else 1
assert copies == n and copies_seen == {n == 2}, (copies, copies_seen)
print("%d nodes, %d cop%s each" % (len(found), n, "ies" if n > 1 else "y"))' "$IMG" ||
		fail "-m $prof: superblock or pointers do not match the profile"
done

log "self-heal: first copies damaged in every tree"
fs_mkfs -s 256M
fs_mount
mkdir "$MNT/d"
for i in $(seq 1 400); do
	printf 'small file %d\n' $i >"$MNT/d/f$i"
	[ $((i % 40)) -ne 0 ] || head -c $((i * 1000)) /dev/urandom >"$MNT/d/big$i"
done
manifest "$MNT" >"$TMP/heal.before"
fs_umount
# flip a bit in the first copy of every node (every tree, every level)
nodes 'import random
for tree, level, a, m in found:
    assert m and data[a:a + ns] == data[m:m + ns]
    data[a + random.randrange(ns)] ^= 1 << random.randrange(8)
print("damaged the first copy of %d nodes in trees %s, levels up to %d" % (
      len(found), sorted({t for t, *_ in found}), max(l for _, l, *_ in found)))
open(sys.argv[3], "w").write("%d\n" % len(found))' "$IMG" "$TMP/damaged"
damaged=$(cat "$TMP/damaged")
[ "$damaged" -ge 8 ] || fail "only $damaged nodes"
: >"$DAEMON_LOG"
fs_mount
manifest "$MNT" >"$TMP/heal.after"
same_manifest "$TMP/heal.before" "$TMP/heal.after"
# the mount's counters say so too (arbor filesystem stats)
if [ -x "$BUILD/cli/arbor" ]; then
	counted=$("$BUILD/cli/arbor" filesystem stats --json "$MNT" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["healed"])')
	[ "$counted" -eq "$damaged" ] ||
		fail "arbor filesystem stats counts $counted heals, $damaged first copies were damaged"
fi
fs_umount
healed=$(grep -c "healed from the second copy" "$DAEMON_LOG" || true)
log "daemon log: $healed heals, e.g. $(grep -m1 "healed from" "$DAEMON_LOG")"
[ "$healed" -eq "$damaged" ] || fail "$damaged first copies damaged, $healed heals logged"
nodes 'bad = [a for _, _, a, m in found if data[a:a + ns] != data[m:m + ns]]
assert not bad, "first copies not rewritten: %s" % bad' "$IMG" ||
	fail "the first copies were not rewritten"
check_fsck
if [ -x "$FSCK" ]; then
	log "fsck -n reports a bad second copy"
	nodes 'data[found[-1][3] + 200] ^= 4' "$IMG"
	st=0
	"$FSCK" -n "$IMG" >"$TMP/fsck.out" 2>&1 || st=$?
	[ $st -ne 0 ] && grep -qi "second copy" "$TMP/fsck.out" ||
		fail "fsck -n: status $st on a bad second copy: $(head -c 400 "$TMP/fsck.out")"
	log "fsck: $(grep -i -m1 "second copy" "$TMP/fsck.out")"
fi

if [ -e /dev/loop-control ] && command -v losetup >/dev/null; then
	log "block device"
	truncate -s 128M "$TMP/loopback"
	LOOP=$(losetup -f --show "$TMP/loopback" 2>/dev/null) || LOOP=
	if [ -n "$LOOP" ]; then
		test_cleanup() { losetup -d "$LOOP" 2>/dev/null; }
		"$MKFS" -q "$LOOP" || fail "mkfs on $LOOP"
		must_fail "arborfs" "$LOOP"
		IMG=$LOOP fs_mount
		echo on-loop >"$MNT/x"
		fs_umount
		IMG=$LOOP check_fsck
	else
		log "no free loop device: skipped"
	fi
fi
finish
