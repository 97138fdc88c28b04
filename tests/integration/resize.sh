#!/bin/bash
# resize.sh - growing and shrinking a mounted filesystem and an image
# (arbor filesystem resize), -o autogrow, and an online scrub while files
# are being written (arbor scrub start -B / status / cancel).
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
MiB=$((1024 * 1024))
# the build's arbor, where nobody can reach it (lib.sh)
ARBOR_NOBODY=$(nobody_exe "$ARBOR")

df_total() { echo $(($(stat -f -c '%b*%S' "$MNT"))); }
img_size() { stat -c %s "$IMG"; }

log "grow a mounted filesystem past what it could hold"
fs_mkfs -s 64M
fs_mount
head -c $((30 * MiB)) /dev/urandom >"$TMP/a"
cp "$TMP/a" "$MNT/a"
# (with the writeback cache ENOSPC comes at fsync or close, not write)
expect_errno ENOSPC "f = open('b', 'wb'); f.write(b'x' * (60 << 20)); f.flush(); os.fsync(f.fileno())"
rm -f "$MNT/b"
out=$("$ARBOR" filesystem resize +64M "$MNT") || fail "resize +64M: $out"
echo "$out"
[ "$(img_size)" = $((128 * MiB)) ] || fail "image is $(img_size) bytes, want 128 MiB"
[ "$(df_total)" = $((128 * MiB)) ] || fail "df says $(df_total) bytes, want 128 MiB"
head -c $((60 * MiB)) /dev/urandom >"$TMP/b"
cp "$TMP/b" "$MNT/b" || fail "60 MiB do not fit after growing"

log "shrinking over data is refused with a reason; after freeing it works"
st=0
out=$("$ARBOR" filesystem resize 64M "$MNT" 2>&1) || st=$?
echo "$out"
[ $st = 1 ] || fail "shrink over data: exit $st, want 1"
grep -q "in use" <<<"$out" || fail "shrink over data: no reason given"
[ "$(img_size)" = $((128 * MiB)) ] || fail "a refused shrink changed the image"
st=0
as_nobody "$ARBOR_NOBODY" filesystem resize 200M "$MNT" 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "not permitted" "$TMP/err" || fail "non-root resize: exit $st, $(cat "$TMP/err")"
rm "$MNT/b"
# nothing is relocated: a shrink needs a free tail (second copies of tree
# nodes may live anywhere); grow, then give the untouched part back
out=$("$ARBOR" filesystem resize +64M "$MNT" 2>&1) || fail "grow to 192M: $out"
# the older order (PATH SIZE) works, with a note
out=$("$ARBOR" filesystem resize "$MNT" -32M 2>&1) || fail "shrink -32M of a free tail: $out"
grep -q "deprecated" <<<"$out" || fail "PATH SIZE: no deprecation note: $out"
[ "$(img_size)" = $((160 * MiB)) ] || fail "image is $(img_size) bytes, want 160 MiB"
[ "$(df_total)" = $((160 * MiB)) ] || fail "df says $(df_total) bytes, want 160 MiB"
cmp "$TMP/a" "$MNT/a" || fail "a changed"
fs_umount
check_fsck
fs_mount
[ "$(df_total)" = $((160 * MiB)) ] || fail "after remount df says $(df_total)"
cmp "$TMP/a" "$MNT/a" || fail "a changed after remount"

log "max: grow to an image file grown by hand, mounted and not"
truncate -s $((176 * MiB)) "$IMG"
out=$("$ARBOR" filesystem resize max "$MNT" 2>&1) || fail "resize max on a mount: $out"
[ "$(df_total)" = $((176 * MiB)) ] || fail "after max df says $(df_total), want 176 MiB"
fs_umount
truncate -s $((192 * MiB)) "$IMG"
out=$("$ARBOR" filesystem resize max --image "$IMG" 2>&1) || fail "resize max --image: $out"
grep -q "$((192 * MiB)) bytes" <<<"$out" || fail "resize max --image: $out"
check_fsck

log "resize an unmounted image"
out=$("$ARBOR" filesystem resize 256M --image "$IMG") || fail "offline resize: $out"
[ "$(img_size)" = $((256 * MiB)) ] || fail "image is $(img_size) bytes, want 256 MiB"
out=$("$ARBOR" filesystem resize --image "$IMG" 240M) || fail "offline resize, --image first: $out"
[ "$(img_size)" = $((240 * MiB)) ] || fail "image is $(img_size) bytes, want 240 MiB"
check_fsck
st=0
"$ARBOR" filesystem resize 1M --image "$IMG" 2>/dev/null || st=$?
[ $st = 1 ] || fail "resize to 1M: exit $st, want 1"
st=0
"$ARBOR" filesystem resize 12X --image "$IMG" 2>/dev/null || st=$?
[ $st = 2 ] || fail "bad size: exit $st, want 2"

log "-o autogrow: a full image grows up to the limit, then ENOSPC"
fs_mkfs -s 48M
fs_mount -o autogrow=200M
head -c $((100 * MiB)) /dev/urandom >"$TMP/c"
cp "$TMP/c" "$MNT/c" || fail "writing 100 MiB with autogrow failed"
sync -f "$MNT/c"
sz=$(img_size)
[ "$sz" -gt $((100 * MiB)) ] && [ "$sz" -le $((200 * MiB)) ] ||
	fail "image is $sz bytes after autogrow, want (100, 200] MiB"
grep -q "image grown to" "$DAEMON_LOG" || fail "no log line about the growth"
st=0
python3 - "$MNT/d" <<'EOF' || st=$?
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
try:
    for _ in range(200):
        os.write(fd, b"y" * (1 << 20))
    os.fsync(fd)
except OSError as e:
    sys.exit(0 if e.errno == errno.ENOSPC else 1)
sys.exit(2)
EOF
[ $st = 0 ] || fail "past the autogrow limit: status $st, want ENOSPC"
[ "$(img_size)" = $((200 * MiB)) ] || fail "image is $(img_size) bytes, want the 200 MiB limit"
rm -f "$MNT/d"
cmp "$TMP/c" "$MNT/c" || fail "c changed"

log "online scrub while a writer runs"
( for i in $(seq 1 40); do head -c 300000 /dev/urandom >"$MNT/w$i"; done ) &
writer=$!
out=$("$ARBOR" scrub start -B "$MNT") || fail "scrub start -B: exit $?: $out"
echo "$out"
wait $writer || fail "the writer failed during the scrub"
grep -q "^state: finished" <<<"$out" || fail "scrub did not finish"
grep -q "uncorrectable 0 " <<<"$out" || fail "scrub found errors on a healthy image"
out=$("$ARBOR" scrub status "$MNT") || fail "scrub status: $out"
grep -q "^state: finished" <<<"$out" || fail "status does not say finished"
st=0
as_nobody "$ARBOR_NOBODY" scrub start "$MNT" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "non-root scrub start: exit $st"
st=0
"$ARBOR" scrub cancel "$MNT" 2>/dev/null || st=$?
[ $st = 1 ] || fail "cancel with no scrub running: exit $st, want 1"
cmp "$TMP/c" "$MNT/c" || fail "c changed"
fs_umount
check_fsck
finish
