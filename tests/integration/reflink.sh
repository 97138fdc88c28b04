#!/bin/bash
# reflink.sh - cp shares data: copy_file_range(2) within a mount reaches
# the daemon (FUSE_COPY_FILE_RANGE) and shares the block-aligned part of
# the range (lib/fs/clone.c).
#
# A plain `cp` of a large file (128 MiB, 1 GiB at full scale) uses no
# new data space and is the same bytes; overwriting 1 MiB of the copy
# uses about 1 MiB and leaves the original alone; deleting either copy
# frees nothing until the last one goes.  Copies across subvolumes and out of read-only snapshots,
# overlapping ranges of one file (EINVAL), unaligned and incongruent
# ranges, holes and inline files are checked against the bytes Python
# copies.  `arbor reflink` shares whole files and ranges and refuses
# misaligned ones; `arbor dedupe` shares identical chunks (reclaiming
# the space of a byte copy), leaves a differing range alone, changes
# nothing with --dry-run, and refuses another user's file.  Everything
# survives a remount and fsck -n.  Both also work on the unmounted image
# (--image IMG: whole files, --range, -r), refuse a mounted image and
# name a missing path; the reflinks add no data, the dedupe frees the
# copies, arbor usage and the mount agree, fsck is clean.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
MiB=$((1 << 20))
size_mib=128
[ "$SCALE" = full ] && size_mib=1024

# free bytes of the mount after a commit (twice: the second releases what
# the first freed)
free_bytes() {
	sync -f "$MNT"
	sync -f "$MNT"
	python3 -c 'import os,sys; s=os.statvfs(sys.argv[1]); print(s.f_bfree*s.f_frsize)' "$MNT"
}

# stat_of KEY: a top-level counter of `arbor filesystem stats --json`
stat_of() {
	"$ARBOR" filesystem stats --json "$MNT" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

fs_mkfs -s $((size_mib * 3 + 512))M
fs_mount
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null

log "cp of a $size_mib MiB file shares it"
head -c $((size_mib * MiB + 1234)) /dev/urandom >"$MNT/big"
sum=$(md5sum <"$MNT/big")
f0=$(free_bytes)
cp "$MNT/big" "$MNT/copy"
f1=$(free_bytes)
log "clone used $(((f0 - f1) / 1024)) KiB"
[ $((f0 - f1)) -lt $((4 * MiB)) ] || fail "cp used $((f0 - f1)) bytes"
[ "$(op_count copy_file_range)" -gt 0 ] || fail "cp sent no copy_file_range"
[ "$(stat_of cloned_bytes)" -ge $((size_mib * MiB)) ] || fail "stats: cloned_bytes $(stat_of cloned_bytes)"
[ "$(md5sum <"$MNT/copy")" = "$sum" ] || fail "copy differs"
[ "$(stat -c %s "$MNT/copy")" = $((size_mib * MiB + 1234)) ] || fail "copy size"

log "overwriting 1 MiB of the copy takes about 1 MiB"
head -c $MiB /dev/urandom >"$TMP/mid"
dd if="$TMP/mid" of="$MNT/copy" bs=$MiB seek=7 conv=notrunc status=none
f2=$(free_bytes)
log "overwrite used $(((f1 - f2) / 1024)) KiB"
[ $((f1 - f2)) -ge $MiB ] && [ $((f1 - f2)) -lt $((3 * MiB)) ] ||
	fail "overwrite of 1 MiB used $((f1 - f2)) bytes"
[ "$(md5sum <"$MNT/big")" = "$sum" ] || fail "original changed"
cmp -s <(dd if="$MNT/copy" bs=$MiB skip=7 count=1 status=none) "$TMP/mid" ||
	fail "overwritten part of the copy"

fs_remount
[ "$(md5sum <"$MNT/big")" = "$sum" ] || fail "original after remount"
python3 - "$MNT/big" "$MNT/copy" "$TMP/mid" <<'EOF' || fail "copy after remount"
import sys
a, b, mid = (open(p, "rb").read() for p in sys.argv[1:])
M = 1 << 20
assert b[:7 * M] == a[:7 * M] and b[8 * M:] == a[8 * M:] and b[7 * M:8 * M] == mid
EOF
log "deleting the original frees nothing, the last copy everything"
rm "$MNT/big"
f3=$(free_bytes)
[ $((f3 - f2)) -lt $((2 * MiB)) ] || fail "rm of the original freed $((f3 - f2)) bytes"
rm "$MNT/copy"
f4=$(free_bytes)
[ $((f4 - f3)) -ge $((size_mib * MiB)) ] || fail "rm of the last copy freed $((f4 - f3)) bytes"
fs_umount
check_fsck

log "subvolumes, snapshots, ranges, holes, inline files"
fs_mount
"$ARBOR" subvolume create "$MNT/sv" >/dev/null || fail "subvolume create"
head -c $((8 * MiB + 5)) /dev/urandom >"$MNT/sv/a"
truncate -s $((12 * MiB)) "$MNT/sv/a"       # a hole at the end
head -c 700 /dev/urandom >"$MNT/sv/small"  # inline
"$ARBOR" subvolume snapshot -r "$MNT/sv" "$MNT/snap" >/dev/null || fail "snapshot"
cp "$MNT/sv/a" "$MNT/a1"                    # across subvolumes
cp "$MNT/snap/a" "$MNT/sv/a2"               # out of a read-only snapshot
cp "$MNT/snap/small" "$MNT/small"
cmp "$MNT/sv/a" "$MNT/a1" || fail "copy across subvolumes"
cmp "$MNT/sv/a" "$MNT/sv/a2" || fail "copy out of a snapshot"
cmp "$MNT/sv/small" "$MNT/small" || fail "inline copy"
python3 - "$MNT" <<'EOF' || fail "copy_file_range against Python's bytes"
import os, random, sys
mnt = sys.argv[1]
os.chdir(mnt)
rnd = random.Random(28)
names = ["r0", "r1", "sv/r2"]
model = {}
for n in names:
    data = bytearray(rnd.randbytes(rnd.randrange(1, 3 << 20)))
    with open(n, "wb") as f:
        f.write(data)
    model[n] = data
fds = {n: os.open(n, os.O_RDWR) for n in names}
for step in range(300):
    s, d = rnd.choice(names), rnd.choice(names)
    src, dst = model[s], model[d]
    kind = rnd.randrange(3)
    soff = rnd.randrange(len(src) + 4096)
    doff = rnd.randrange(len(dst) + 8192)
    if kind == 0:
        soff &= ~4095
        doff &= ~4095
    elif kind == 1:
        doff = doff // 4096 * 4096 + soff % 4096
    ln = rnd.choice([rnd.randrange(1, 200000), len(src) + 1, 4096 * rnd.randrange(1, 64)])
    n = max(0, min(ln, len(src) - soff))
    if doff + n > (8 << 20):
        continue
    if s == d and n and soff < doff + n and doff < soff + n:
        try:
            os.copy_file_range(fds[s], fds[d], ln, soff, doff)
        except OSError as e:
            assert e.errno == 22, e
            continue
        raise SystemExit("overlap not refused")
    got = 0
    while got < n:
        r = os.copy_file_range(fds[s], fds[d], ln - got, soff + got, doff + got)
        if r == 0:
            break
        got += r
    assert got == n, (step, got, n)
    chunk = bytes(src[soff:soff + n])
    if doff > len(dst):
        dst.extend(bytes(doff - len(dst)))
    dst[doff:doff + n] = chunk
    if step % 50 == 49:
        for x in names:
            with open(x, "rb") as f:
                assert f.read() == model[x], (step, x)
for x in names:
    with open(x, "rb") as f:
        assert f.read() == model[x], x
    with open(x + ".want", "wb") as f:
        f.write(model[x])
EOF
fs_remount
for x in r0 r1 sv/r2; do
	cmp "$MNT/$x" "$MNT/$x.want" || fail "$x after remount"
done
cmp "$MNT/sv/a" "$MNT/a1" || fail "copy across subvolumes after remount"
"$ARBOR" subvolume show "$MNT/sv" >"$TMP/show" || fail "subvolume show"
grep -qi "shared" "$TMP/show" || fail "subvolume show names no shared bytes"
fs_umount
check_fsck

log "arbor reflink"
fs_mount
head -c $((4 * MiB + 100)) /dev/urandom >"$MNT/s"
"$ARBOR" reflink "$MNT/s" "$MNT/t" || fail "arbor reflink"
cmp "$MNT/s" "$MNT/t" || fail "arbor reflink: copy differs"
"$ARBOR" reflink "$MNT/s" "$MNT/t" --range 4096 8192 12288 || fail "arbor reflink --range"
python3 - "$MNT/s" "$MNT/t" <<'EOF' || fail "arbor reflink --range: bytes"
import sys
s, t = (open(p, "rb").read() for p in sys.argv[1:])
want = bytearray(s)
want[12288:20480] = s[4096:12288]
assert t == bytes(want)
EOF
for bad in "1 4096 0" "0 100 0" "0 4096 8"; do
	# shellcheck disable=SC2086
	if "$ARBOR" reflink "$MNT/s" "$MNT/t" --range $bad 2>"$TMP/err"; then
		fail "arbor reflink --range $bad: not refused"
	fi
	grep -q "multiple" "$TMP/err" || fail "arbor reflink --range $bad: $(cat "$TMP/err")"
done
# the unaligned tail of the source onto the end of the destination
"$ARBOR" reflink "$MNT/s" "$MNT/t" --range $((4 * MiB)) 0 $((4 * MiB)) ||
	fail "reflink of the tail onto the end"
cmp -s "$MNT/s" "$MNT/t" && fail "reflink --range: t should differ from s at 12288"
[ "$(stat -c %s "$MNT/t")" = $((4 * MiB + 100)) ] || fail "reflink of the tail: size"

log "arbor dedupe"
head -c $((8 * MiB)) /dev/urandom >"$MNT/d1"
# dd: read and write (cat and cp would share)
dd if="$MNT/d1" of="$MNT/d2" bs=1M status=none
dd if="$MNT/d1" of="$MNT/d3" bs=1M status=none
printf 'x' | dd of="$MNT/d3" bs=1 seek=$((3 * MiB + 5)) conv=notrunc status=none
cp "$MNT/d3" "$TMP/d3"
g0=$(free_bytes)
"$ARBOR" dedupe --dry-run "$MNT/d1" "$MNT/d2" "$MNT/d3" >"$TMP/out" || fail "dedupe --dry-run"
log "$(cat "$TMP/out")"
if "$ARBOR" dedupe --range "$MNT/d1" 0 $((8 * MiB)) "$MNT/d3" 0 >"$TMP/out"; then
	fail "dedupe --range of differing files"
fi
grep -q differs "$TMP/out" || fail "dedupe --range: $(cat "$TMP/out")"
[ "$(free_bytes)" = "$g0" ] || fail "dry run or differing range changed the space"
mkdir "$MNT/dd"
mv "$MNT/d2" "$MNT/d3" "$MNT/dd/"
"$ARBOR" dedupe -r "$MNT/d1" "$MNT/dd" >"$TMP/out" || fail "dedupe -r"
log "$(cat "$TMP/out")"
g1=$(free_bytes)
log "dedupe reclaimed $(((g1 - g0) / 1024)) KiB"
# all of d2; of d3 only its extents without the differing byte (an
# extent is freed whole, when nothing uses any of it)
[ $((g1 - g0)) -ge $((8 * MiB)) ] || fail "dedupe reclaimed $((g1 - g0)) bytes"
cmp "$MNT/d1" "$MNT/dd/d2" || fail "dedupe changed d2"
[ "$(stat_of deduped_bytes)" -ge $((15 * MiB)) ] || fail "stats: deduped_bytes $(stat_of deduped_bytes)"
cmp "$TMP/d3" "$MNT/dd/d3" || fail "dedupe changed d3"
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
	chmod 755 "$MNT" "$MNT/dd"
	chmod 644 "$MNT/d1" "$MNT/dd/d2"
	ab=$(nobody_exe "$ARBOR")
	if as_nobody "$ab" dedupe --range "$MNT/d1" 0 $MiB "$MNT/dd/d2" 0 2>"$TMP/err"; then
		fail "dedupe into another user's file"
	fi
	grep -q "not permitted" "$TMP/err" || fail "dedupe as nobody: $(cat "$TMP/err")"
fi
fs_remount
cmp "$MNT/d1" "$MNT/dd/d2" || fail "d2 after remount"
cmp "$TMP/d3" "$MNT/dd/d3" || fail "d3 after remount"
fs_umount
check_fsck

log "arbor reflink and dedupe --image, on the unmounted image"
fs_mount
mkdir -p "$MNT/img/dir"
head -c $((4 * MiB + 100)) /dev/urandom >"$MNT/img/a"
head -c $((4 * MiB)) /dev/urandom >"$MNT/img/e1"
# dd: read and write (cp would share)
dd if="$MNT/img/e1" of="$MNT/img/dir/e2" bs=1M status=none
dd if="$MNT/img/e1" of="$MNT/img/dir/e3" bs=1M status=none
cp "$MNT/img/a" "$TMP/a"
cp "$MNT/img/e1" "$TMP/e1"
st=0
"$ARBOR" reflink --image "$IMG" /img/a /img/b 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "$IMG" "$TMP/err" && grep -qi "mount\|in use\|busy" "$TMP/err" ||
	fail "reflink --image of a mounted image: exit $st, $(cat "$TMP/err")"
st=0
"$ARBOR" dedupe --image "$IMG" -r /img 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -qi "mount\|in use\|busy" "$TMP/err" ||
	fail "dedupe --image of a mounted image: exit $st, $(cat "$TMP/err")"
fs_umount
# image_data: the data bytes of the unmounted image (arbor usage)
image_data() {
	"$ARBOR" usage --image "$IMG" | awk '/^data / {print $2}'
}
u0=$(image_data)
"$ARBOR" reflink --image "$IMG" /img/a /img/b || fail "reflink --image"
"$ARBOR" reflink --image "$IMG" /img/a /img/b --range 4096 8192 12288 ||
	fail "reflink --image --range"
"$ARBOR" reflink --image "$IMG" /img/a /img/c --range $((4 * MiB)) 0 0 ||
	fail "reflink --image --range of the tail into a new file"
st=0
"$ARBOR" reflink --image "$IMG" /img/a /img/b --range 1 4096 0 2>"$TMP/err" || st=$?
[ $st = 2 ] && grep -q multiple "$TMP/err" || fail "reflink --image misaligned: exit $st, $(cat "$TMP/err")"
st=0
"$ARBOR" reflink --image "$IMG" /img/nothere /img/x 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "/img/nothere" "$TMP/err" ||
	fail "reflink --image of a missing file: exit $st, $(cat "$TMP/err")"
u1=$(image_data)
log "reflinks in the image: data $u0 -> $u1 bytes"
[ "$u1" -le "$u0" ] || fail "reflink --image grew data from $u0 to $u1"
"$ARBOR" dedupe --image "$IMG" --range /img/e1 0 $MiB /img/dir/e2 0 >"$TMP/out" ||
	fail "dedupe --image --range: $(cat "$TMP/out")"
grep -q "deduplicated $MiB bytes" "$TMP/out" || fail "dedupe --image --range: $(cat "$TMP/out")"
st=0
"$ARBOR" dedupe --image "$IMG" --range /img/a 0 $MiB /img/dir/e3 0 >"$TMP/out" || st=$?
[ $st = 3 ] && grep -q differs "$TMP/out" || fail "dedupe --image --range of differing bytes: exit $st"
st=0
"$ARBOR" dedupe --image "$IMG" /img/dir 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q -- "-r" "$TMP/err" || fail "dedupe --image of a directory without -r: exit $st"
st=0
"$ARBOR" dedupe --image "$IMG" -r /img/nothere 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "/img/nothere" "$TMP/err" || fail "dedupe --image of a missing path: exit $st"
"$ARBOR" dedupe --image "$IMG" -r /img/e1 /img/dir >"$TMP/out" || fail "dedupe --image -r"
log "$(cat "$TMP/out")"
u2=$(image_data)
log "dedupe in the image: data $u1 -> $u2 bytes"
[ $((u1 - u2)) -ge $((8 * MiB)) ] || fail "dedupe --image freed $((u1 - u2)) bytes, want 8 MiB"
check_fsck
fs_mount -o ro
python3 - "$TMP/a" "$MNT/img/b" "$MNT/img/c" <<'EOF' || fail "reflink --image: bytes"
import sys
a, b, c = (open(p, "rb").read() for p in sys.argv[1:])
want = bytearray(a)
want[12288:20480] = a[4096:12288]
assert b == bytes(want), "b"
assert c == a[4 << 20:], "c"
EOF
for f in e1 dir/e2 dir/e3; do
	cmp "$TMP/e1" "$MNT/img/$f" || fail "dedupe --image changed $f"
done
"$ARBOR" filesystem usage --json "$MNT" >"$TMP/u.json" || fail "usage"
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"])' "$TMP/u.json")" = "$u2" ] ||
	fail "usage on the mount differs from the image's"
fs_umount
check_fsck
finish
