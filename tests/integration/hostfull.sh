#!/bin/bash
# hostfull.sh - the filesystem that holds a sparse image fills up under a
# writer.  This is not arborfs's own ENOSPC (enospc.sh): the image still
# has room, the host refuses the writes of a commit.  Expected
# (docs/design/commit.md,
# "Failure handling"): the writer gets an error, no other kind than ENOSPC
# or EIO, or EROFS when the failed commit was a background one and the
# writer's next write met the read-only state it left (not, say, "no
# such file" for the file it has open); the daemon
# keeps running, says in its log that the host is full, and refuses
# changes from then on (EROFS, fsync EIO); what was committed before stays
# readable; once the host has room again the image is clean for fsck and
# mounts with that data, and writing works again.
. "$(dirname "$0")/lib.sh" "$@"

HOST=$TMP/host
mkdir -p "$HOST"
mount -t tmpfs -o size=96M tmpfs "$HOST" || skip "cannot mount a tmpfs"
test_cleanup() {
	force_unmount "$MNT"
	umount "$HOST" 2>/dev/null || umount -l "$HOST" 2>/dev/null
}
IMG=$HOST/image.img

fs_mkfs -s 1G
fs_mount

head -c 3000000 /dev/urandom >"$TMP/ref"
cp "$TMP/ref" "$MNT/keep"
# (fsync, not sync: the kernel sends no SYNCFS to a /dev/fuse daemon)
python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT/keep" ||
	fail "fsync of the first file"
REF_SUM=$(sha256sum <"$TMP/ref" | cut -d' ' -f1)

log "write 200 MiB into a 1 GiB image on a 96 MiB host"
python3 - "$MNT" <<'EOF' || fail "the writer did not see ENOSPC, EIO or EROFS"
import errno, os, sys
mnt = sys.argv[1]
buf = os.urandom(1 << 20)
try:
    fd = os.open(os.path.join(mnt, "big"), os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(200):
        os.write(fd, buf)   # into the kernel's cache, mostly
    os.fsync(fd)
except OSError as e:
    if e.errno in (errno.ENOSPC, errno.EIO, errno.EROFS):
        print("writer stopped: %s" % os.strerror(e.errno))
        # the file it holds: errors, never "no such file"
        for what, call in (("fsync", lambda: os.fsync(fd)),
                           ("write", lambda: os.write(fd, b"x"))):
            try:
                call()
            except OSError as e2:
                if e2.errno == errno.ENOENT:
                    print("%s after the failure: ENOENT" % what, file=sys.stderr)
                    sys.exit(1)
        sys.exit(0)
    print("unexpected error: %r" % e, file=sys.stderr)
    sys.exit(1)
print("200 MiB fitted on a 96 MiB host?", file=sys.stderr)
sys.exit(1)
EOF

kill -0 "$DAEMON_PID" || fail "daemon died"
grep -q "filesystem that holds the image file is full" "$DAEMON_LOG" ||
	fail "the daemon's log does not say the host is full"
[ "$(sha256sum <"$MNT/keep" | cut -d' ' -f1)" = "$REF_SUM" ] ||
	fail "committed data unreadable after the failure"
expect_errno EROFS 'open("new", "w").write("x")'
expect_errno EIO 'fd = os.open("keep", os.O_RDONLY); os.fsync(fd)'

log "unmount: the daemon reports the failed final commit"
fusermount3 -u "$MNT" || fail "cannot unmount after the failure"
wait_pid_gone "$DAEMON_PID" 60 || fail "daemon still running after unmount"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
check_daemon_log

log "room on the host again: fsck, mount, the committed data, new writes"
mount -o remount,size=512M "$HOST" || fail "cannot grow the tmpfs"
check_fsck
fs_mount
[ "$(sha256sum <"$MNT/keep" | cut -d' ' -f1)" = "$REF_SUM" ] ||
	fail "committed data damaged after remount"
head -c 50000000 /dev/urandom >"$TMP/ref2"
cp "$TMP/ref2" "$MNT/after" || fail "cannot write after the host has room"
fs_remount
cmp "$TMP/ref2" "$MNT/after" || fail "data written after the failure differs"
fs_umount
check_fsck
