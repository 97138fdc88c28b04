#!/bin/bash
# basic.sh - POSIX behaviour of a mounted arborfs, then persistence across
# a remount, a read-only mount, mount(8) and fstab forms, and fsck.
. "$(dirname "$0")/lib.sh" "$@"

install_pkg setfattr attr || skip "setfattr (package attr) unavailable"
install_pkg setfacl acl || skip "setfacl (package acl) unavailable"

fs_mkfs -s 2G -L basic
fs_mount
cd "$MNT"

log "regular files"
echo hello >small
[ "$(cat small)" = hello ] || fail "small file content"
head -c 3000000 /dev/urandom >"$TMP/rand"
cp "$TMP/rand" big
cmp "$TMP/rand" big || fail "3 MB file differs"
: >empty
[ "$(stat -c %s empty)" = 0 ] || fail "empty file size"
# exactly the inline limit, and one byte past it
head -c 2048 /dev/urandom >inl2048
head -c 2049 /dev/urandom >inl2049
cat inl2048 inl2049 >concat
[ "$(stat -c %s concat)" = 4097 ] || fail "concat size"
# overwrite in the middle without truncation
printf 'XYZ' | dd of=big bs=1 seek=1000 conv=notrunc status=none
printf 'XYZ' | dd of="$TMP/rand" bs=1 seek=1000 conv=notrunc status=none
cmp "$TMP/rand" big || fail "overwrite in place"

log "directories"
mkdir -p d1/d2/d3
mkdir d1/other
touch d1/d2/d3/leaf
[ "$(stat -c %h d1)" = 4 ] || fail "nlink of d1 is $(stat -c %h d1), want 4"
[ "$(ls d1 | tr '\n' ' ')" = "d2 other " ] || fail "ls d1: $(ls d1)"
[ "$(find d1 | wc -l)" = 5 ] || fail "find d1"
rmdir d1/other
[ "$(stat -c %h d1)" = 3 ] || fail "nlink of d1 after rmdir"
[ "$(stat -c %i .)" = 256 ] || fail "root st_ino $(stat -c %i .), want 256"

log "symlinks"
ln -s small sym
ln -s /nonexistent/target dangling
long=$(printf 'x%.0s' $(seq 1 1000))
ln -s "$long" longsym
[ "$(readlink sym)" = small ] || fail readlink
[ "$(cat sym)" = hello ] || fail "read through symlink"
[ "$(readlink longsym)" = "$long" ] || fail "1000-byte symlink target"
[ "$(stat -c %F dangling)" = "symbolic link" ] || fail "dangling symlink type"

log "hard links"
echo linked >l1
ln l1 l2
mkdir ldir
ln l1 ldir/l3
[ "$(stat -c %h l1)" = 3 ] || fail "nlink 3 expected"
[ "$(stat -c %i l1)" = "$(stat -c %i ldir/l3)" ] || fail "link inode numbers"
rm l2
[ "$(stat -c %h l1)" = 2 ] || fail "nlink 2 after unlink"
[ "$(cat ldir/l3)" = linked ] || fail "content via link"

log "special files"
mkfifo fifo
mknod chr c 1 3
mknod blk b 7 0
python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind("sock")'
[ "$(stat -c %F fifo)" = fifo ] || fail "fifo type"
[ "$(stat -c '%F %t:%T' chr)" = "character special file 1:3" ] || fail "chr: $(stat -c '%F %t:%T' chr)"
[ "$(stat -c '%F %t:%T' blk)" = "block special file 7:0" ] || fail "blk"
[ "$(stat -c %F sock)" = socket ] || fail "socket type"
# the fifo works as one
(echo through-fifo >fifo &)
[ "$(cat fifo)" = through-fifo ] || fail "fifo I/O"

log "rename"
echo a >ra
echo b >rb
mv ra rc
[ ! -e ra ] && [ "$(cat rc)" = a ] || fail "plain rename"
mv rc d1/rc
[ "$(cat d1/rc)" = a ] || fail "rename across directories"
mv d1/rc rb
[ "$(cat rb)" = a ] || fail "rename over a file"
mkdir rdir1 rdir2
touch rdir1/inside
mv rdir1 rdir2/
[ -e rdir2/rdir1/inside ] || fail "directory rename"
[ "$(stat -c %h rdir2)" = 3 ] || fail "parent nlink after dir move"
echo f >rfile
mkdir rfull && touch rfull/x
expect_errno ENOTEMPTY 'os.rename("rdir2", "rfull")'
expect_errno EISDIR 'os.rename("rfile", "rfull")'
expect_errno ENOTDIR 'os.rename("rdir2", "rfile")'
expect_errno EINVAL 'os.rename("d1", "d1/d2/inside")'
# renameat2 FLAGS OLD NEW [ERRNO]: without ERRNO the call must succeed
cat >"$TMP/renameat2.py" <<'EOF2'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
flags = {"noreplace": 1, "exchange": 2}[sys.argv[1]]
r = libc.renameat2(AT_FDCWD, sys.argv[2].encode(), AT_FDCWD, sys.argv[3].encode(), flags)
got = "OK" if r == 0 else errno.errorcode[ctypes.get_errno()]
want = sys.argv[4] if len(sys.argv) > 4 else "OK"
if got != want:
    sys.exit("renameat2 %s %s %s: got %s, want %s" % (sys.argv[1], sys.argv[2], sys.argv[3], got, want))
EOF2
renameat2() { python3 "$TMP/renameat2.py" "$@" || fail "renameat2 $*"; }
echo x >ex1
echo y >ex2
mkdir exd
renameat2 exchange ex1 ex2
[ "$(cat ex1)" = y ] && [ "$(cat ex2)" = x ] || fail "RENAME_EXCHANGE of files"
renameat2 exchange ex1 exd
[ -d ex1 ] && [ "$(cat exd)" = y ] || fail "RENAME_EXCHANGE file <-> dir"
renameat2 exchange ex1 exd
renameat2 noreplace ex1 ex2 EEXIST
renameat2 noreplace ex1 ex3
[ ! -e ex1 ] && [ "$(cat ex3)" = y ] || fail "RENAME_NOREPLACE to a new name"
renameat2 exchange ex3 nothere ENOENT

log "xattrs"
setfattr -n user.color -v blue small
setfattr -n user.empty small
setfattr -n trusted.secret -v 0x00ff00 small
big_val=$(head -c 3000 /dev/urandom | base64 -w0)
setfattr -n user.big -v "$big_val" small
[ "$(getfattr --only-values -n user.color small)" = blue ] || fail "getxattr"
[ "$(getfattr --only-values -n user.big small)" = "$big_val" ] || fail "3 KB xattr value"
getfattr -d -m - small | grep -q '^user.empty' || fail "empty xattr listed"
setfattr -n user.color -v red small
[ "$(getfattr --only-values -n user.color small)" = red ] || fail "xattr replace"
setfattr -n user.gone -v 1 small
setfattr -x user.gone small
getfattr -n user.gone small >/dev/null 2>&1 && fail "removed xattr still there"
expect_errno ENODATA 'os.getxattr("small", "user.nothere")'
expect_errno ENODATA 'os.removexattr("small", "user.nothere")'
expect_errno EEXIST 'os.setxattr("small", "user.color", b"x", os.XATTR_CREATE)'
expect_errno ENODATA 'os.setxattr("small", "user.new", b"x", os.XATTR_REPLACE)'
setfattr -n user.ondir -v 1 d1
setfattr -h -n trusted.onlink -v 1 sym

log "modes, owners, times"
chmod 4751 small
[ "$(stat -c %a small)" = 4751 ] || fail "chmod 4751: $(stat -c %a small)"
chmod 640 small
chown 1234:5678 small
[ "$(stat -c %u:%g small)" = 1234:5678 ] || fail chown
chown -h 42:43 sym
[ "$(stat -c %u:%g sym)" = 42:43 ] || fail "lchown"
touch -d '2001-02-03 04:05:06.123456789 UTC' small
[ "$(TZ=UTC stat -c %y small)" = "2001-02-03 04:05:06.123456789 +0000" ] ||
	fail "mtime with ns: $(TZ=UTC stat -c %y small)"
touch -a -d '1999-12-31 23:59:59.5 UTC' small
[ "$(TZ=UTC stat -c %x small)" = "1999-12-31 23:59:59.500000000 +0000" ] ||
	fail "atime: $(TZ=UTC stat -c %x small)"
touch -d '1960-01-01 00:00:00 UTC' old
[ "$(TZ=UTC stat -c %y old)" = "1960-01-01 00:00:00.000000000 +0000" ] || fail "time before 1970"
before=$(date +%s)
touch small
[ "$(stat -c %Y small)" -ge "$before" ] || fail "touch to now"

log "truncate"
head -c 100000 /dev/urandom >trfile
cp trfile "$TMP/trfile"
truncate -s 50000 trfile
truncate -s 50000 "$TMP/trfile"
cmp trfile "$TMP/trfile" || fail "truncate down"
truncate -s 3000000 trfile
truncate -s 3000000 "$TMP/trfile"
cmp trfile "$TMP/trfile" || fail "truncate up (zeros)"
truncate -s 10 trfile
truncate -s 10 "$TMP/trfile"
cmp trfile "$TMP/trfile" || fail "truncate to inline size"
truncate -s 0 trfile
[ "$(stat -c %s trfile)" = 0 ] || fail "truncate to 0"

log "large sparse file"
dd if="$TMP/rand" of=huge bs=1M count=1 seek=5000 status=none
[ "$(stat -c %s huge)" = $((5001 * 1048576)) ] || fail "size past 4 GiB"
cmp <(dd if=huge bs=1M skip=5000 status=none) <(head -c 1048576 "$TMP/rand") ||
	fail "data past 4 GiB"
[ "$(dd if=huge bs=1M skip=100 count=1 status=none | tr -d '\0' | wc -c)" = 0 ] ||
	fail "hole reads as zeros"
[ "$(stat -c %b huge)" -lt 20000 ] || fail "sparse file uses $(stat -c %b huge) blocks"

log "SEEK_DATA / SEEK_HOLE"
python3 - <<'EOF' || fail "SEEK_DATA/SEEK_HOLE"
import errno, os
fd = os.open("huge", os.O_RDONLY)
M = 1 << 20
d = os.lseek(fd, 0, os.SEEK_DATA)
assert d == 5000 * M, d
h = os.lseek(fd, 5000 * M, os.SEEK_HOLE)
assert h == 5001 * M, h
assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
try:
    os.lseek(fd, 5001 * M, os.SEEK_DATA)
    raise SystemExit("SEEK_DATA at EOF should be ENXIO")
except OSError as e:
    assert e.errno == errno.ENXIO, e
os.close(fd)
EOF

log "fallocate"
fallocate -l 1M fa
[ "$(stat -c %s fa)" = 1048576 ] || fail "fallocate size"
[ "$(stat -c %b fa)" -ge 2048 ] || fail "fallocate blocks $(stat -c %b fa)"
fallocate -n -o 1M -l 1M fa
[ "$(stat -c %s fa)" = 1048576 ] || fail "fallocate -n (keep size) changed the size"
head -c 1048576 /dev/urandom >fp
cp fp "$TMP/fp"
fallocate -p -o 4096 -l 8192 fp
python3 - "$TMP/fp" <<'EOF' || fail "punch hole content"
import sys
a = open("fp", "rb").read()
b = bytearray(open(sys.argv[1], "rb").read())
b[4096:12288] = bytes(8192)
assert a == bytes(b)
EOF
[ "$(stat -c %s fp)" = 1048576 ] || fail "punch changed the size"

log "O_APPEND, O_EXCL, mmap"
python3 - <<'EOF' || fail "O_APPEND/O_EXCL/mmap"
import errno, mmap, os
fd = os.open("app", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, b"one\n")
os.lseek(fd, 0, os.SEEK_SET)
os.write(fd, b"two\n")
os.close(fd)
assert open("app", "rb").read() == b"one\ntwo\n"
fd = os.open("excl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.close(fd)
try:
    os.open("excl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    raise SystemExit("O_EXCL on an existing file succeeded")
except OSError as e:
    assert e.errno == errno.EEXIST
with open("mm", "wb") as f:
    f.write(b"\0" * 3 * 4096)
with open("mm", "r+b") as f:
    m = mmap.mmap(f.fileno(), 3 * 4096, mmap.MAP_SHARED)
    m[4090:4102] = b"mmap-written"
    m.flush()
    m.close()
data = open("mm", "rb").read()
assert data[4090:4102] == b"mmap-written" and len(data) == 3 * 4096
EOF
cp mm "$TMP/mm"

log "error codes"
expect_errno ENAMETOOLONG "open('$(printf 'n%.0s' $(seq 1 256))', 'w')"
touch "$(printf 'm%.0s' $(seq 1 255))" || fail "255-byte name"
expect_errno ENOTEMPTY 'os.rmdir("d1")'
expect_errno EISDIR 'open("d1", "w")'
expect_errno ENOTDIR 'os.listdir("small")'
expect_errno ENOTDIR 'open("small/x", "w")'
ln -s loop1 loop2
ln -s loop2 loop1
expect_errno ELOOP 'open("loop1")'
expect_errno ENOENT 'os.stat("nothere")'
expect_errno EEXIST 'os.mkdir("d1")'
expect_errno EPERM 'os.link("d1", "d1link")'
expect_errno ENOTDIR 'os.rmdir("small")'
expect_errno EISDIR 'os.unlink("d1")'

log "permissions (uid 65534)"
mkdir private
chmod 700 private
echo secret >private/f
echo public >pub
chmod 644 pub
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
nobody cat pub >/dev/null || fail "nobody cannot read a 644 file"
nobody cat private/f 2>/dev/null && fail "nobody read into a 700 directory"
nobody touch newfile 2>/dev/null && fail "nobody created a file in a 755 root"
nobody sh -c 'echo x >>pub' 2>/dev/null && fail "nobody wrote a 644 file"
mkdir open && chmod 1777 open
nobody touch open/mine || fail "nobody cannot create in a 1777 directory"
[ "$(stat -c %u:%g open/mine)" = 65534:65534 ] || fail "owner of a file created by nobody"
touch open/roots
nobody rm -f open/roots 2>/dev/null || true
[ -e open/roots ] || fail "sticky bit ignored"

log "POSIX ACLs"
echo acl >acl1
chmod 600 acl1
nobody cat acl1 2>/dev/null && fail "600 file readable before the ACL"
setfacl -m u:65534:r acl1
getfacl -n -c acl1 | grep -q '^user:65534:r--' || fail "getfacl"
# setting an access ACL sets the group bits of the mode to the ACL mask
[ "$(stat -c %a acl1)" = 640 ] || soft_fail "mode after setfacl is $(stat -c %a acl1), want 640 (mask r--)"
nobody cat acl1 >/dev/null 2>&1 || soft_fail "ACL u:65534:r not honoured"
echo acl >acl2
chmod 644 acl2
setfacl -m u:65534:--- acl2
nobody cat acl2 2>/dev/null && soft_fail "ACL u:65534:--- not honoured"
# chmod changes the ACL mask
chmod 600 acl1
getfacl -n -c acl1 | grep -q '^mask::---' || soft_fail "chmod 600 did not set the ACL mask to ---: $(getfacl -n -c acl1 | tr '\n' ' ')"
nobody cat acl1 2>/dev/null && soft_fail "ACL still grants after chmod 600"
mkdir acldir
setfacl -d -m u:65534:rwx acldir
touch acldir/inherits
mkdir acldir/subdir
getfacl -n -c acldir/inherits 2>/dev/null | grep -q '^user:65534:rwx' ||
	soft_fail "default ACL not inherited by a new file"
getfacl -n -c -d acldir/subdir 2>/dev/null | grep -q '^user:65534:rwx' ||
	soft_fail "default ACL not inherited as default ACL by a new directory"

echo m >"$TMP/mode644"
chmod 644 "$TMP/mode644"
cp -a "$TMP/mode644" acl-cp
[ "$(stat -c %a acl-cp)" = 644 ] || soft_fail "cp -a of a 644 file gave mode $(stat -c %a acl-cp) (minimal ACL not turned into the mode)"

log "statfs"
read -r total used avail <<<"$(df -B1 --output=size,used,avail "$MNT" | tail -n 1)"
[ "$total" -gt $((1900 * 1048576)) ] && [ "$total" -le $((2048 * 1048576)) ] ||
	fail "df size $total for a 2 GiB image"
[ "$used" -gt 0 ] && [ "$used" -lt "$total" ] || fail "df used $used"
[ "$avail" -gt 0 ] && [ "$avail" -le $((total - used)) ] || fail "df avail $avail"
[ "$(stat -f -c %l "$MNT")" = 255 ] || fail "namemax $(stat -f -c %l "$MNT")"

log "unlinked but open file"
python3 - <<'EOF' || fail "unlinked open file"
import os
fd = os.open("ghost", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"boo" * 10000)
os.unlink("ghost")
assert not os.path.exists("ghost")
os.lseek(fd, 0, 0)
assert os.read(fd, 30000) == b"boo" * 10000
assert os.fstat(fd).st_nlink == 0
os.close(fd)
EOF

log "sync and fsync"
python3 -c 'import os; fd = os.open("small", os.O_RDONLY); os.fsync(fd); os.fdatasync(fd); os.close(fd)'
python3 -c 'import os; fd = os.open(".", os.O_RDONLY); os.fsync(fd); os.close(fd)'
sync -f .

cd /
manifest "$MNT" >"$TMP/m1"
grep -q '^small ' "$TMP/m1" || fail "manifest misses small"

log "remount: everything persisted"
fs_remount
manifest "$MNT" >"$TMP/m2"
same_manifest "$TMP/m1" "$TMP/m2"
cmp "$TMP/rand" "$MNT/big" || fail "big after remount"
cmp "$TMP/mm" "$MNT/mm" || fail "mmap data after remount"
[ "$(TZ=UTC stat -c %x "$MNT/old")" = "1960-01-01 00:00:00.000000000 +0000" ] ||
	fail "atime of old after remount"
[ ! -e "$MNT/ghost" ] || fail "ghost file reappeared"

log "read-only mount"
fs_remount -o ro
expect_errno EROFS 'open("newfile", "w")'
expect_errno EROFS 'os.mkdir("newdir")'
expect_errno EROFS 'os.unlink("small")'
expect_errno EROFS 'os.setxattr("small", "user.x", b"1")'
expect_errno EROFS 'os.chmod("small", 0o777)'
manifest "$MNT" >"$TMP/m3"
same_manifest "$TMP/m1" "$TMP/m3"
fs_umount

log "-o noacl: no ACLs, cp -a keeps modes"
fs_mount -o noacl
echo m >"$TMP/mode644"
chmod 644 "$TMP/mode644"
cp -a "$TMP/mode644" "$MNT/noacl-copy"
[ "$(stat -c %a "$MNT/noacl-copy")" = 644 ] || fail "noacl: cp -a gave mode $(stat -c %a "$MNT/noacl-copy")"
setfacl -m u:65534:r "$MNT/noacl-copy" 2>/dev/null && fail "noacl: setfacl succeeded"
expect_errno ENOTSUP 'os.getxattr("noacl-copy", "system.posix_acl_access")'
rm "$MNT/noacl-copy"
fs_umount

log "mount -t fuse.arborfs and fstab"
# wait_unlocked: the daemon started by mount(8) commits after the unmount
# and releases its lock on the image last
wait_unlocked() {
	for _ in $(seq 1 300); do
		flock -n "$IMG" true 2>/dev/null && return 0
		sleep 0.1
	done
	fail "image still locked after the unmount"
}
# the old "program#source" form names the daemon by its path
mount -t fuse "$DAEMON#$IMG" "$MNT" -o rw,dev,suid,noatime,commit=1 ||
	fail "mount -t fuse $DAEMON#$IMG"
grep -q " $MNT fuse.arborfs " /proc/mounts || fail "/proc/mounts type: $(grep " $MNT " /proc/mounts)"
grep -q "^$IMG $MNT " /proc/mounts || fail "/proc/mounts source"
[ "$(cat "$MNT/small")" = hello ] || fail "read via mount(8)"
echo via-mount >"$MNT/viamount"
umount "$MNT" || fail "umount"
wait_unlocked
# mount(8) runs mount.fuse3, which runs "arborfs" from a fixed PATH: put a
# link to the build there for the time of the test, unless one exists
LINK=
for d in /usr/local/sbin /usr/local/bin; do
	if [ -d "$d" ] && [ ! -e "$d/arborfs" ]; then
		ln -s "$DAEMON" "$d/arborfs" && LINK=$d/arborfs && break
	fi
done
test_cleanup() { [ -z "$LINK" ] || rm -f "$LINK"; }
if [ -n "$LINK" ] || command -v arborfs >/dev/null; then
	mount -t fuse.arborfs "$IMG" "$MNT" -o rw,dev,suid,relatime ||
		fail "mount -t fuse.arborfs"
	[ "$(cat "$MNT/viamount")" = via-mount ] || fail "file written through mount(8)"
	umount "$MNT"
	wait_unlocked
	echo "$IMG $MNT fuse.arborfs defaults,noauto,nofail,x-test.opt=1 0 0" >"$TMP/fstab"
	mount -T "$TMP/fstab" "$MNT" || fail "mount from an fstab line"
	[ "$(cat "$MNT/small")" = hello ] || fail "read via fstab mount"
	umount "$MNT"
	wait_unlocked
else
	log "no place for an arborfs link in PATH: mount -t fuse.arborfs skipped"
fi

check_fsck
finish
