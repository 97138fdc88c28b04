#!/bin/bash
# fullwrite.sh - a full filesystem stops buffered writers.
#
# With the writeback cache, write(2) only fills the kernel's page cache,
# and a failed writeback used to be reported only at fsync or close: `dd
# if=/dev/zero of=m/f bs=1M` on a 64 MiB image ran for ten minutes and made
# an 804 GB file.  Here each writer must stop with "No space left on
# device" well within its timeout (fuse/wberr.c), the daemon must live, and
# a file whose data did not all fit must hold a prefix of what was written
# (no hole of zeros, its size what was stored) after a remount.
. "$(dirname "$0")/lib.sh" "$@"

fs_mkfs -s 64M
fs_mount

# the data of a file must be one run from 0 to its size (no hole)
no_hole() {
	python3 - "$1" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
if size == 0:
    sys.exit(0)
d = os.lseek(fd, 0, os.SEEK_DATA)
h = os.lseek(fd, d, os.SEEK_HOLE)
if d != 0 or h != size:
    print("%s: data %d..%d of size %d" % (sys.argv[1], d, h, size), file=sys.stderr)
    sys.exit(1)
EOF
}

# writer NAME CMD...: must fail with ENOSPC before the timeout
writer() {
	local name=$1
	shift
	log "$name"
	local st=0
	timeout 60 "$@" 2>"$TMP/err" || st=$?
	[ $st -ne 124 ] || fail "$name: still writing after 60 s"
	[ $st -ne 0 ] || fail "$name: filled a 64 MiB filesystem without an error"
	grep -q "No space left on device" "$TMP/err" ||
		{ cat "$TMP/err" >&2; fail "$name: no ENOSPC"; }
	kill -0 "$DAEMON_PID" || fail "$name: daemon died"
}

writer "dd" dd if=/dev/zero of="$MNT/dd" bs=1M
writer "dd conv=fsync" dd if=/dev/zero of="$MNT/ddsync" bs=1M conv=fsync
rm -f "$MNT/dd" "$MNT/ddsync"
# space is back: an explicit sync succeeds (it said ENOSPC with 59 MB free)
"$BUILD/cli/arbor" filesystem sync "$MNT" >/dev/null 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "arbor filesystem sync after freeing"; }
writer "cat" sh -c "cat /dev/zero >'$MNT/cat'"
rm -f "$MNT/cat"

# cp of random data that does not fit: a prefix, checked after a remount
head -c $((80 << 20)) /dev/urandom >"$TMP/src"
writer "cp" cp "$TMP/src" "$MNT/cp"
fs_remount
size=$(stat -c %s "$MNT/cp")
log "cp kept $size of $((80 << 20)) bytes"
[ "$size" -lt $((80 << 20)) ] || fail "cp: a file of full size on a 64 MiB filesystem"
no_hole "$MNT/cp" || fail "cp: a hole in what was stored"
cmp -n "$size" "$TMP/src" "$MNT/cp" || fail "cp: stored data differs from the source"

# once space is freed, writing works again and nothing stale is reported
rm -f "$MNT/cp"
head -c $((8 << 20)) /dev/urandom >"$TMP/small"
cp "$TMP/small" "$MNT/small" || fail "write after freeing"
sync -f "$MNT/small" || fail "syncfs after freeing reports an error"
fs_remount
cmp "$TMP/small" "$MNT/small" || fail "data after freeing"
rm -f "$MNT/small"

# df counts what is stored, not what operations reserve: 4,000 files of
# 1 KiB took 105,865 bytes each in df before the next commit (423 MB)
used() { python3 -c 'import os,sys; s=os.statvfs(sys.argv[1]); print((s.f_blocks-s.f_bfree)*s.f_frsize)' "$MNT"; }
fs_remount -o commit=60,idle_commit=0
u0=$(used)
mkdir "$MNT/many"
python3 - "$MNT/many" <<'EOF'
import os, sys
for i in range(4000):
    with open(os.path.join(sys.argv[1], "f%d" % i), "wb") as f:
        f.write(b"x" * 1024)
EOF
per=$((($(used) - u0) / 4000))
log "df: $per bytes used per 1 KiB file before a commit"
[ $per -lt 8192 ] || fail "df counts $per bytes per 1 KiB file"
rm -rf "$MNT/many"

# a filesystem filled to within a few MiB still takes small files that fit
log "small files on a nearly full filesystem"
python3 - "$MNT" <<'EOF' || fail "small files that fit got an error"
import errno, os, sys
mnt = sys.argv[1]
def avail():
    s = os.statvfs(mnt)
    return s.f_bavail * s.f_frsize
os.mkdir(os.path.join(mnt, "fill"))
i = 0
try:
    while avail() > (6 << 20):
        with open(os.path.join(mnt, "fill", "%06d" % i), "wb") as f:
            f.write(os.urandom(16384))
        i += 1
    print("filled with %d files, %d bytes available" % (i, avail()))
    os.mkdir(os.path.join(mnt, "more"))
    for j in range(500):
        with open(os.path.join(mnt, "more", "%04d" % j), "wb") as f:
            f.write(os.urandom(1024))
except OSError as e:
    sys.exit("%s after %d files with %d bytes available" % (e, i, avail()))
print("500 more files of 1 KiB, %d bytes available" % avail())
EOF
fs_umount
check_fsck
finish
