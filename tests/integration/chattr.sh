#!/bin/bash
# chattr.sh - file attributes through chattr/lsattr (FS_IOC_GETFLAGS and
# FS_IOC_SETFLAGS) and xfs_io (FS_IOC_FSGETXATTR/FSSETXATTR): immutable
# (i), append-only (a), no-dump (d) and no-atime (A) are stored in the
# inode, survive a remount, are inherited as ext4 inherits them (d and A
# only), and are enforced for root and for an unprivileged user alike.
#
# Writes are the delicate part (fuse/iflags.c): the kernel does not know
# the flags, and with the writeback cache a write refused only at
# writeback would be data lost after write(2) succeeded.  On the first
# mount the daemon declines OPEN requests (no flagged inode yet), so a
# write must fail at write(2); after a remount the image carries
# ARB_COMPAT_PROTECTED_INODES, the daemon keeps OPEN requests and a
# write-open fails at open(2).  Reads (to EOF) and lseek(SEEK_END) of
# flagged files must keep working in both.
. "$(dirname "$0")/lib.sh" "$@"

command -v chattr >/dev/null && command -v lsattr >/dev/null ||
	install_pkg chattr e2fsprogs || skip "chattr/lsattr (e2fsprogs) missing"
need_nobody

# attrs PATH: the letters lsattr shows, dashes removed
attrs() {
	lsattr -d "$1" | cut -d' ' -f1 | tr -d -- -
}
want_attrs() {
	local a
	a=$(attrs "$1")
	[ "$a" = "$2" ] || soft_fail "$1: lsattr shows '$a', want '$2'"
}
# as_nobody_errno ERRNAME PYTHON-STATEMENT: as expect_errno, as nobody
as_nobody_errno() {
	errno_check "$1" "$2" "${NOBODY[@]}" "$PY" ||
		soft_fail "as nobody: expected $1 from: $2"
}

# ok PYTHON-STATEMENT: must succeed (in $MNT)
ok() {
	(cd "$MNT" && python3 -c "import os, sys; $1") || soft_fail "failed: $1"
}

fs_mkfs -s 256M
fs_mount
cd "$MNT"
printf 'immutable\n' >fi
printf 'append\n' >fa
printf 'nodump\n' >fd
printf 'noatime\n' >fA
printf 'control\n' >fc
mkdir di da dinh
touch di/old da/old
printf 'nobody\n' >fn
# writable by nobody: what refuses its writes is the flag, not the mode
chmod 666 fi fa
chown 65534:65534 fn

log "lsattr before: no flags; chattr of a file on the first mount"
want_attrs fi ""
chattr +i fi || fail "chattr +i failed"
chattr +a fa
chattr +d fd
chattr +A fA
chattr +i di
chattr +a da
chattr +dA dinh
want_attrs fi i
want_attrs fa a
want_attrs fd d
want_attrs fA A
want_attrs di i
want_attrs da a
want_attrs dinh dA
chattr +d fi
want_attrs fi id
chattr -d fi
want_attrs fi i

log "privilege: i and a need CAP_LINUX_IMMUTABLE, other flags the owner"
"${NOBODY[@]}" chattr +i fn 2>/dev/null && soft_fail "owner nobody set +i"
[ "$(attrs fn)" = "" ] || soft_fail "nobody set +i on fn"
"${NOBODY[@]}" chattr +d fn || soft_fail "owner nobody cannot chattr +d"
want_attrs fn d
"${NOBODY[@]}" chattr +d fc 2>/dev/null && soft_fail "nobody changed root's fc"
# root without CAP_LINUX_IMMUTABLE
setpriv --inh-caps=-linux_immutable --bounding-set=-linux_immutable chattr +i fn 2>/dev/null &&
	soft_fail "chattr +i without CAP_LINUX_IMMUTABLE"
want_attrs fn d

# check_enforced HOW: what the flags refuse, as root and as nobody
check_enforced() {
	local how=$1
	log "$how: immutable file"
	# first mount: the open may succeed, the write must not; after the
	# remount the open itself fails
	expect_errno EPERM "fd = os.open('fi', os.O_WRONLY); os.write(fd, b'x')"
	expect_errno EPERM "fd = os.open('fi', os.O_RDWR | os.O_APPEND); os.write(fd, b'x')"
	expect_errno EPERM "os.truncate('fi', 0)"
	expect_errno EPERM "os.open('fi', os.O_WRONLY | os.O_TRUNC)"
	expect_errno EPERM "os.unlink('fi')"
	expect_errno EPERM "os.rename('fi', 'fi2')"
	expect_errno EPERM "os.rename('fc', 'fi')"
	expect_errno EPERM "os.link('fi', 'fi-link')"
	expect_errno EPERM "os.chmod('fi', 0o600)"
	expect_errno EPERM "os.chown('fi', 1, 1)"
	expect_errno EPERM "os.utime('fi', (1, 1))"
	expect_errno EPERM "os.utime('fi')"
	expect_errno EPERM "os.setxattr('fi', 'user.x', b'1')"
	as_nobody_errno EPERM "fd = os.open('fi', os.O_WRONLY); os.write(fd, b'x')"
	# reading to EOF and lseek(SEEK_END) ask GETATTR with the file too
	[ "$(cat fi)" = immutable ] || soft_fail "$how: cannot read fi"
	ok "fd = os.open('fi', os.O_RDONLY); assert os.lseek(fd, 0, os.SEEK_END) == 10"
	[ "$("${NOBODY[@]}" cat fi)" = immutable ] || soft_fail "$how: nobody cannot read fi"
	ls -l fi-link fi2 2>/dev/null && soft_fail "$how: fi-link or fi2 exists"

	log "$how: immutable directory"
	expect_errno EPERM "open('di/new', 'w')"
	expect_errno EPERM "os.mkdir('di/sub')"
	expect_errno EPERM "os.symlink('x', 'di/sym')"
	expect_errno EPERM "os.unlink('di/old')"
	expect_errno EPERM "os.rename('di/old', 'old2')"
	expect_errno EPERM "os.rename('fc', 'di/fc')"

	log "$how: append-only file"
	ok "fd = os.open('fa', os.O_WRONLY | os.O_APPEND); os.write(fd, b'more\n'); os.close(fd)"
	expect_errno EPERM "fd = os.open('fa', os.O_WRONLY); os.write(fd, b'x')"
	expect_errno EPERM "fd = os.open('fa', os.O_RDWR); os.pwrite(fd, b'x', 0)"
	expect_errno EPERM "os.truncate('fa', 0)"
	expect_errno EPERM "os.open('fa', os.O_WRONLY | os.O_APPEND | os.O_TRUNC)"
	expect_errno EPERM "os.unlink('fa')"
	expect_errno EPERM "os.rename('fa', 'fa2')"
	expect_errno EPERM "os.link('fa', 'fa-link')"
	expect_errno EPERM "os.chmod('fa', 0o600)"
	expect_errno EPERM "os.setxattr('fa', 'user.x', b'1')"
	[ "$(head -c 7 fa)" = append ] || soft_fail "$how: fa lost its start"

	log "$how: append-only directory"
	ok "open('da/new-$how', 'w').close()"
	expect_errno EPERM "os.unlink('da/old')"
	expect_errno EPERM "os.rename('da/old', 'old3')"
}
check_enforced "first mount"

log "inheritance: d and A from the directory, never i or a"
touch dinh/f da/f2
mkdir dinh/sub
want_attrs dinh/f dA
want_attrs dinh/sub dA
want_attrs da/f2 ""

log "data written just before chattr +i reaches the image"
head -c 300000 /dev/urandom >fw
sum_fw=$(sha256sum <fw)
chattr +i fw

if command -v xfs_io >/dev/null; then
	log "xfs_io lsattr/chattr (FS_IOC_FSGETXATTR/FSSETXATTR)"
	xfs_io -c 'chattr +d' fc || soft_fail "xfs_io chattr +d"
	xfs_io -c lsattr fi | grep -q '^-*i' || soft_fail "xfs_io lsattr fi: $(xfs_io -c lsattr fi)"
	want_attrs fc d
	xfs_io -c 'chattr -d' fc
	want_attrs fc ""
fi

cd /
fs_remount
cd "$MNT"
log "after a remount: flags kept, OPEN requests kept for write-opens"
want_attrs fi i
want_attrs fa a
want_attrs fd d
want_attrs fA A
want_attrs di i
want_attrs da a
want_attrs dinh/f dA
want_attrs fw i
[ "$(sha256sum <fw)" = "$sum_fw" ] || soft_fail "fw: data written before chattr +i lost"
expect_errno EPERM "os.open('fi', os.O_WRONLY)"
expect_errno EPERM "os.open('fa', os.O_WRONLY)"

# (after the remount: reads of pages still cached reach no one)
log "noatime: a read leaves atime alone"
touch -a -d '2001-01-01' fA fc
cat fA fc >/dev/null
[ "$(stat -c %X fA)" = "$(date -d 2001-01-01 +%s)" ] || soft_fail "atime of fA changed by a read"
[ "$(stat -c %X fc)" != "$(date -d 2001-01-01 +%s)" ] || soft_fail "atime of fc (control) not updated"
as_nobody_errno EPERM "os.open('fi', os.O_WRONLY)"
check_enforced "remount"

log "clearing the flags lifts the restrictions"
chattr -i fi di fw
chattr -a fa da
want_attrs fi ""
ok "fd = os.open('fi', os.O_WRONLY | os.O_TRUNC); os.write(fd, b'x'); os.close(fd)"
ok "os.truncate('fa', 1); os.unlink('fa'); os.unlink('di/old'); os.unlink('da/old')"
[ "$(cat fi)" = x ] || soft_fail "fi: '$(cat fi)' after rewrite"

cd /
fs_umount
check_fsck
finish
