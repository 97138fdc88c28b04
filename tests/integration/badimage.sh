#!/bin/bash
# badimage.sh - the daemon refuses images it cannot trust: a clear message,
# a non-zero exit before anything is mounted, and the image left untouched.
. "$(dirname "$0")/lib.sh" "$@"

# patch_super IMAGE OFFSET-IN-SUPER FMT VALUE [recsum]: write a struct-packed
# value into both superblock copies (64 KiB, 128 KiB); with recsum, store a
# fresh crc32c (bytes 32..4096, ~crc32c(~0) as LE u32 in bytes 0..3) so that
# only the patched field is wrong.
patch_super() {
	python3 - "$@" <<'EOF'
import struct, sys
img, off, fmt, val = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4], 0)
recsum = len(sys.argv) > 5 and sys.argv[5] == "recsum"
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
with open(img, "r+b") as f:
    for base in (64 * 1024, 128 * 1024):
        f.seek(base)
        sb = bytearray(f.read(4096))
        struct.pack_into("<" + fmt, sb, off, val)
        if recsum:
            struct.pack_into("<I", sb, 0, crc32c(bytes(sb[32:])))
        f.seek(base)
        f.write(sb)
EOF
}

# expect_refused NAME [daemon options]: arborfs on $IMG must fail, leave
# $MNT unmounted, say something on stderr, and not change the image; both
# in the foreground and daemonized (the parent must report the failure).
expect_refused() {
	local name=$1
	shift
	local before after st out
	before=$(sha256sum "$IMG" | cut -d' ' -f1)
	for mode in -f ""; do
		st=0
		out=$(timeout 60 "$DAEMON" $mode "$@" "$IMG" "$MNT" 2>&1) || st=$?
		if mountpoint -q "$MNT"; then
			force_unmount "$MNT"
			fail "$name: mounted (${mode:-daemon})"
		fi
		[ $st -ne 0 ] || fail "$name: exit status 0 (${mode:-daemon})"
		[ $st -ne 124 ] || fail "$name: daemon hung (${mode:-daemon})"
		[ -n "$out" ] || fail "$name: no message (${mode:-daemon})"
		log "$name (${mode:-daemon}): status $st: $out"
	done
	after=$(sha256sum "$IMG" | cut -d' ' -f1)
	[ "$before" = "$after" ] || fail "$name: image changed"
	# the message names the image
	echo "$out" | grep -qF "$IMG" || fail "$name: message does not name the image"
	REFUSED_OUT=$out
}

log "not an arborfs image"
head -c $((8 << 20)) /dev/urandom >"$IMG"
expect_refused "random bytes"
truncate -s 0 "$IMG"
truncate -s 64M "$IMG"
expect_refused "zeros"
truncate -s 0 "$IMG"
expect_refused "empty file"
rm -f "$IMG"
st=0
"$DAEMON" -f "$IMG" "$MNT" 2>"$TMP/err" || st=$?
[ $st -ne 0 ] && grep -q "$IMG" "$TMP/err" || fail "missing image: status $st, $(cat "$TMP/err")"
[ ! -e "$IMG" ] || fail "the daemon created a missing image"

log "an image mkfs never finished (temporary magic)"
fs_mkfs -s 256M
patch_super "$IMG" 32 Q 0x3f5346524f425241 recsum
expect_refused "temporary magic"

log "truncated image"
fs_mkfs -s 256M
cp "$IMG" "$TMP/good"
truncate -s 100K "$IMG"
expect_refused "truncated to 100 KiB"
cp "$TMP/good" "$IMG"
truncate -s 1M "$IMG"
expect_refused "truncated to 1 MiB"

log "format version from the future"
cp "$TMP/good" "$IMG"
patch_super "$IMG" 104 I 999 recsum
expect_refused "version 999"
grep -qi "version" <<<"$REFUSED_OUT" || soft_fail "version 999: the message does not mention the version"
# the reason arb_fs_open() returns in *why goes into the daemon's own line
grep "$IMG" <<<"$REFUSED_OUT" | grep -qi "version" ||
	soft_fail "version 999: the daemon's message (the library's *why) does not name the version: $(grep "$IMG" <<<"$REFUSED_OUT")"

log "format version 1 (before duplicated metadata)"
cp "$TMP/good" "$IMG"
patch_super "$IMG" 104 I 1 recsum
expect_refused "version 1"
grep "$IMG" <<<"$REFUSED_OUT" | grep -qi "version 1" ||
	fail "version 1: the daemon's message does not name the version: $(grep "$IMG" <<<"$REFUSED_OUT")"

log "unknown incompatible feature"
cp "$TMP/good" "$IMG"
patch_super "$IMG" 112 Q 0x8000000000000000 recsum
expect_refused "incompat bit 63"

log "superblock checksum"
cp "$TMP/good" "$IMG"
patch_super "$IMG" 80 Q 12345
expect_refused "bad checksum in both copies"
grep "$IMG" <<<"$REFUSED_OUT" | grep -qi "checksum" ||
	soft_fail "bad checksum: the daemon's message (the library's *why) does not name the checksum: $(grep "$IMG" <<<"$REFUSED_OUT")"

log "one bad copy is survivable"
cp "$TMP/good" "$IMG"
# one commit after mkfs, so that both copies have been written
fs_mount
touch "$MNT/first"
fs_umount
printf 'garbage!' | dd of="$IMG" bs=1 seek=$((64 * 1024 + 200)) conv=notrunc status=none
fs_mount
touch "$MNT/ok" || fail "write after mounting from the backup superblock"
fs_umount

log "image in use"
cp "$TMP/good" "$IMG"
fs_mount
mkdir "$TMP/mnt2"
st=0
out=$(timeout 30 "$DAEMON" -f "$IMG" "$TMP/mnt2" 2>&1) || st=$?
mountpoint -q "$TMP/mnt2" && { force_unmount "$TMP/mnt2"; fail "image mounted twice"; }
[ $st -ne 0 ] && [ $st -ne 124 ] || fail "second mount of the same image: status $st"
log "second mount: $out"
fs_umount

log "bad options"
for o in commit=abc max_inline=-1 cache_size=12Q trace= dirty_limit=abc dirty_limit=1 \
	fsync_dirty_limit=abc fsync_dirty_limit=1K \
	readahead=abc readahead=12 readahead=2G; do
	st=0
	out=$("$DAEMON" -f -o "$o" "$IMG" "$MNT" 2>&1) || st=$?
	[ $st -ne 0 ] || fail "-o $o accepted"
	! mountpoint -q "$MNT" || fail "-o $o mounted"
done
st=0
"$DAEMON" "$IMG" >/dev/null 2>&1 || st=$?
[ $st -ne 0 ] || fail "no mountpoint accepted"
# (captured first: grep -q stops reading early, and under pipefail the
# daemon's SIGPIPE would fail the pipeline)
help=$("$DAEMON" --help)
grep -q 'commit=SECONDS' <<<"$help" || fail "--help lacks our options"
finish
