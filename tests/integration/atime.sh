#!/bin/bash
# atime.sh - relatime holds for files read from the page cache.
#
# The kernel never updates the atime of a FUSE inode and reads served from
# its page cache never reach the daemon, so `: > f; sleep 1; echo x >> f;
# sleep 1; stat -c %X f; cat f; stat -c %X f` printed the same value twice
# (ext4: the first read after a change updates it).  A changed file's
# cached pages are now dropped a moment after the change (fuse/atime.c), and
# the daemon stamps times with the kernel's coarse clock, so that a new
# file's atime is never "after" the mtime the kernel gives its data.
. "$(dirname "$0")/lib.sh" "$@"

fs_mkfs -s 256M
fs_mount

at() { stat -c %X.%x "$1" | sed 's/^[0-9]*\.//'; }

log "the issue's reproduction"
cd "$MNT"
: >f
sleep 1
echo x >>f
sleep 1
a1=$(at f)
cat f >/dev/null
a2=$(at f)
[ "$a1" != "$a2" ] || fail "atime unchanged by the first read after a change ($a1)"
# relatime: a second read right away changes nothing
cat f >/dev/null
[ "$(at f)" = "$a2" ] || fail "atime changed by a second read"

log "a new file, written and read"
for i in 1 2 3 4 5; do
	echo "data $i" >"n$i"
	sleep 0.6
	python3 - "n$i" <<'EOF' || fail "n$i: atime not after mtime once read"
import os, sys
p = sys.argv[1]
open(p, "rb").read()
s = os.stat(p)
if s.st_atime_ns <= s.st_mtime_ns:
    sys.exit("atime %d <= mtime %d after a read" % (s.st_atime_ns, s.st_mtime_ns))
EOF
done

log "read back after a remount keeps the updated atime"
cd /
a=$(at "$MNT/f")
fs_remount
[ "$(at "$MNT/f")" = "$a" ] || fail "atime lost at unmount"

log "-o noatime: never"
fs_remount -o noatime
cd "$MNT"
echo y >>f
sleep 1
a1=$(at f)
cat f >/dev/null
sleep 0.5
cat f >/dev/null
[ "$(at f)" = "$a1" ] || fail "noatime mount updated atime"
cd /
fs_umount
check_fsck
finish
