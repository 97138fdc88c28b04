#!/usr/bin/env python3
"""posixdiff.py ROOT - a fixed script of POSIX operations, one result line
each, for comparing two filesystems (posixdiff.sh runs it on tmpfs and on
arborfs and diffs the output).

Each case prints "name: result", where the result is what a user sees:
"ok" or the errno name, then the facts that matter (mode, owner, link
count, size, contents, which timestamps moved).  Nothing printed depends on
the filesystem's own choices (inode numbers, block counts, absolute times),
only on what POSIX and Linux define.  Some cases run as an unprivileged
user (uid/gid 65534, or 65533 with supplementary group 65534) in a forked
child.
"""
import ctypes
import errno
import os
import stat
import sys
import time

ROOT = sys.argv[1]
NOBODY = 65534
OTHER = 65533
OUT = []
libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def p(*parts):
    return os.path.join(ROOT, *parts)


def res(fn):
    try:
        r = fn()
        return "ok" if r is None else "ok %s" % (r,)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def report(name, fn):
    OUT.append("%s: %s" % (name, res(fn)))


def as_user(uid, gid, groups, fn):
    """fn() in a child with these credentials; its res() string."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.umask(0o022)
            os.write(w, res(fn).encode())
        finally:
            os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


def report_as(name, uid, gid, groups, fn):
    OUT.append("%s (uid %d): %s" % (name, uid, as_user(uid, gid, groups, fn)))


def st(path):
    try:
        s = os.lstat(path)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    kind = stat.filemode(s.st_mode)[0]
    size = s.st_size if not stat.S_ISDIR(s.st_mode) else "-"
    return "%s%04o %d:%d nlink=%d size=%s" % (kind, stat.S_IMODE(s.st_mode),
                                             s.st_uid, s.st_gid, s.st_nlink, size)


def fact(name, path):
    OUT.append("%s: %s" % (name, st(path)))


def times(path):
    s = os.lstat(path)
    return (s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns)


def moved(name, path, fn):
    """Which of a/m/c time changed across fn (after a short pause)."""
    before = times(path)
    time.sleep(0.02)
    r = res(fn)
    after = times(path)
    tags = "".join(t for t, a, b in zip("amc", before, after) if a != b) or "-"
    OUT.append("%s: %s, times moved: %s" % (name, r, tags))


def write(path, data, mode=0o644, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def renameat2(a, b, flags):
    r = libc.renameat2(-100, a.encode(), -100, b.encode(), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


os.umask(0o022)

# ---- set-group-ID directories -------------------------------------------
os.mkdir(p("sg"))
os.chown(p("sg"), 0, NOBODY)
os.chmod(p("sg"), 0o2777)
write(p("sg", "by-root"), b"x")
fact("file by root in a setgid dir", p("sg", "by-root"))
os.mkdir(p("sg", "sub"))
fact("dir by root in a setgid dir", p("sg", "sub"))
report_as("create 2755 in setgid dir, not in its group", OTHER, OTHER, [],
          lambda: write(p("sg", "other"), b"y", 0o2755))
fact("  result", p("sg", "other"))
report_as("create 2755 in setgid dir, in its group", OTHER, OTHER, [NOBODY],
          lambda: write(p("sg", "member"), b"y", 0o2755))
fact("  result", p("sg", "member"))
report_as("mkdir in setgid dir, not in its group", OTHER, OTHER, [],
          lambda: os.mkdir(p("sg", "odir"), 0o755))
fact("  result", p("sg", "odir"))
report_as("mknod fifo in setgid dir", OTHER, OTHER, [],
          lambda: os.mkfifo(p("sg", "fifo"), 0o2644))
fact("  result", p("sg", "fifo"))
report_as("symlink in setgid dir", OTHER, OTHER, [],
          lambda: os.symlink("target", p("sg", "sym")))
fact("  result", p("sg", "sym"))

# ---- chmod, chown, utimes by owners and others --------------------------
os.mkdir(p("own"))
os.chmod(p("own"), 0o777)
write(p("own", "f"), b"data")
os.chown(p("own", "f"), OTHER, OTHER)
os.chown(p("own", "f"), OTHER, NOBODY)
report_as("chmod 2755 by owner not in the group", OTHER, OTHER, [],
          lambda: os.chmod(p("own", "f"), 0o2755))
fact("  result", p("own", "f"))
report_as("chmod 4755 by owner", OTHER, OTHER, [],
          lambda: os.chmod(p("own", "f"), 0o4755))
fact("  result", p("own", "f"))
report_as("chmod by non-owner", NOBODY, NOBODY, [],
          lambda: os.chmod(p("own", "f"), 0o777))
report_as("chown to another user by owner", OTHER, OTHER, [],
          lambda: os.chown(p("own", "f"), NOBODY, -1))
report_as("chgrp to a group not a member of", OTHER, OTHER, [],
          lambda: os.chown(p("own", "f"), -1, 0))
report_as("chgrp to a supplementary group", OTHER, OTHER, [NOBODY, 100],
          lambda: os.chown(p("own", "f"), -1, 100))
fact("  result (set-user-ID cleared by chown)", p("own", "f"))
report_as("chown -1 -1 by owner", OTHER, OTHER, [],
          lambda: os.chown(p("own", "f"), -1, -1))
write(p("own", "pub"), b"p")
os.chmod(p("own", "pub"), 0o666)
report_as("utime now on another's 0666 file", NOBODY, NOBODY, [],
          lambda: os.utime(p("own", "pub")))
report_as("utime explicit on another's 0666 file", NOBODY, NOBODY, [],
          lambda: os.utime(p("own", "pub"), (1, 1)))
os.chmod(p("own", "pub"), 0o644)
report_as("utime now on another's 0644 file", NOBODY, NOBODY, [],
          lambda: os.utime(p("own", "pub")))
report_as("truncate another's 0644 file", NOBODY, NOBODY, [],
          lambda: os.truncate(p("own", "pub"), 0))
write(p("own", "secret"), b"s", 0o600)
report_as("read another's 0600 file", NOBODY, NOBODY, [],
          lambda: read(p("own", "secret")))
report_as("access R_OK on another's 0600 file", NOBODY, NOBODY, [],
          lambda: os.access(p("own", "secret"), os.R_OK))

# ---- the sticky bit ------------------------------------------------------
os.mkdir(p("sticky"))
os.chmod(p("sticky"), 0o1777)
report_as("create in sticky dir", OTHER, OTHER, [],
          lambda: write(p("sticky", "mine"), b"m"))
report_as("unlink another's file in sticky dir", NOBODY, NOBODY, [],
          lambda: os.unlink(p("sticky", "mine")))
report_as("rename another's file in sticky dir", NOBODY, NOBODY, [],
          lambda: os.rename(p("sticky", "mine"), p("sticky", "taken")))
report_as("unlink own file in sticky dir", OTHER, OTHER, [],
          lambda: os.unlink(p("sticky", "mine")))
os.mkdir(p("noexec"))
os.chmod(p("noexec"), 0o766)
write(p("noexec", "f"), b"f")
report_as("stat through a dir without search permission", NOBODY, NOBODY, [],
          lambda: os.stat(p("noexec", "f")) and None)
report_as("list a dir without search permission", NOBODY, NOBODY, [],
          lambda: sorted(os.listdir(p("noexec"))))
os.mkdir(p("closed"), 0o755)
report_as("create in a dir without write permission", NOBODY, NOBODY, [],
          lambda: write(p("closed", "nope"), b"n"))

# ---- names ------------------------------------------------------------------
os.mkdir(p("n"))
report("name of 255 bytes", lambda: write(p("n", "a" * 255), b""))
report("name of 256 bytes", lambda: write(p("n", "b" * 256), b""))
report("symlink target of 4095 bytes", lambda: os.symlink("t" * 4095, p("n", "long")))
report("readlink of it", lambda: len(os.readlink(p("n", "long"))))
report("symlink target of 4096 bytes", lambda: os.symlink("t" * 4096, p("n", "longer")))
report("O_CREAT|O_EXCL on a dangling symlink",
       lambda: (os.symlink("nowhere", p("n", "dangle")),
                os.close(os.open(p("n", "dangle"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)))[0])
report("O_CREAT through a dangling symlink",
       lambda: os.close(os.open(p("n", "dangle"), os.O_WRONLY | os.O_CREAT)))
fact("  its target", p("n", "nowhere"))
report("O_NOFOLLOW on a symlink", lambda: os.open(p("n", "dangle"), os.O_RDONLY | os.O_NOFOLLOW))
report("O_EXCL on an existing file",
       lambda: os.open(p("n", "nowhere"), os.O_WRONLY | os.O_CREAT | os.O_EXCL))
report("open a dir for writing", lambda: os.open(p("n"), os.O_WRONLY))
report("truncate a dir", lambda: os.truncate(p("n"), 0))
report("O_DIRECTORY on a file", lambda: os.open(p("n", "nowhere"), os.O_RDONLY | os.O_DIRECTORY))
report("a file as a path component", lambda: os.stat(p("n", "nowhere", "x")) and None)
report("mkdir over a file", lambda: os.mkdir(p("n", "nowhere")))
report("rmdir a file", lambda: os.rmdir(p("n", "nowhere")))
report("unlink a dir", lambda: os.unlink(p("n")))
report("rmdir .", lambda: os.rmdir(p("n", ".")))
report("rmdir a non-empty dir", lambda: os.rmdir(p("n")))
report("link a dir", lambda: os.link(p("n"), p("nlink")))
report("mknod a character device", lambda: os.mknod(p("n", "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3)))
fact("  result", p("n", "null"))
report("write to it", lambda: write(p("n", "null"), b"gone", flags=os.O_WRONLY))

# ---- links and renames ----------------------------------------------------
os.mkdir(p("r"))
os.mkdir(p("r", "d1"))
os.mkdir(p("r", "d1", "inner"))
os.mkdir(p("r", "d2"))
write(p("r", "d2", "x"), b"x")
write(p("r", "f"), b"file f")
write(p("r", "g"), b"file g")
fact("parent of 2 subdirs", p("r"))
fact("dir with a subdir", p("r", "d1"))
report("rename a dir into itself", lambda: os.rename(p("r", "d1"), p("r", "d1", "inner", "x")))
report("rename a dir over a non-empty dir", lambda: os.rename(p("r", "d1"), p("r", "d2")))
report("rename a file over a dir", lambda: os.rename(p("r", "f"), p("r", "d1")))
report("rename a dir over a file", lambda: os.rename(p("r", "d1"), p("r", "f")))
os.link(p("r", "f"), p("r", "f2"))
fact("a file with 2 links", p("r", "f"))
report("rename a link onto its other name", lambda: os.rename(p("r", "f"), p("r", "f2")))
report("  both names still there", lambda: (os.path.exists(p("r", "f")), os.path.exists(p("r", "f2"))))
report("RENAME_NOREPLACE onto an existing name", lambda: renameat2(p("r", "f"), p("r", "g"), RENAME_NOREPLACE))
report("RENAME_EXCHANGE of two files", lambda: renameat2(p("r", "f"), p("r", "g"), RENAME_EXCHANGE))
report("  contents after exchange", lambda: (read(p("r", "f")), read(p("r", "g"))))
report("RENAME_EXCHANGE of a file and a dir", lambda: renameat2(p("r", "g"), p("r", "d2"), RENAME_EXCHANGE))
fact("  g is now", p("r", "g"))
fact("  d2 is now", p("r", "d2"))
report("RENAME_EXCHANGE with a missing name", lambda: renameat2(p("r", "f"), p("r", "missing"), RENAME_EXCHANGE))
report("rename a dir over an empty dir", lambda: (os.mkdir(p("r", "empty")), os.rename(p("r", "d1"), p("r", "empty")))[0])
fact("  parent after it", p("r"))
report("  listing", lambda: sorted(os.listdir(p("r"))))
report("rename of a dir to another parent", lambda: (os.mkdir(p("r", "p2")), os.rename(p("r", "empty"), p("r", "p2", "moved")))[0])
report("  .. of the moved dir", lambda: os.stat(p("r", "p2", "moved", "..")).st_ino == os.stat(p("r", "p2")).st_ino)
fact("  old parent", p("r"))
fact("  new parent", p("r", "p2"))

# ---- timestamps: which move -------------------------------------------------
os.mkdir(p("t"))
write(p("t", "f"), b"0123456789")
moved("write: file", p("t", "f"), lambda: write(p("t", "f"), b"ab", flags=os.O_WRONLY))
moved("chmod: file", p("t", "f"), lambda: os.chmod(p("t", "f"), 0o600))
moved("chown to itself: file", p("t", "f"), lambda: os.chown(p("t", "f"), 0, 0))
# (a truncate to the same size moves the times on tmpfs, not on ext4 or
# btrfs: filesystems differ, so it is not here)
moved("truncate smaller: file", p("t", "f"), lambda: os.truncate(p("t", "f"), 4))
moved("link: file", p("t", "f"), lambda: os.link(p("t", "f"), p("t", "f-link")))
moved("rename: file", p("t", "f"), lambda: (os.rename(p("t", "f"), p("t", "f-new")), os.rename(p("t", "f-new"), p("t", "f")))[0])
moved("setxattr: file", p("t", "f"), lambda: os.setxattr(p("t", "f"), "user.k", b"v"))
moved("create: parent", p("t"), lambda: write(p("t", "new"), b""))
moved("unlink: parent", p("t"), lambda: os.unlink(p("t", "new")))
moved("mkdir: parent", p("t"), lambda: os.mkdir(p("t", "sub")))
moved("rename within: parent", p("t"), lambda: os.rename(p("t", "sub"), p("t", "sub2")))
moved("chmod: parent", p("t"), lambda: os.chmod(p("t"), 0o755))
moved("failed create: parent", p("t"), lambda: os.mkdir(p("t", "sub2")))

# ---- sizes and holes ---------------------------------------------------------
write(p("t", "sparse"), b"")
report("extend by truncate", lambda: os.truncate(p("t", "sparse"), 100000))
report("  reads zeros", lambda: read(p("t", "sparse")) == b"\0" * 100000)
report("write past the end", lambda: (lambda fd: (os.pwrite(fd, b"end", 200000), os.close(fd)))(os.open(p("t", "sparse"), os.O_WRONLY))[0])
report("  size and the gap", lambda: (os.stat(p("t", "sparse")).st_size, read(p("t", "sparse"))[150000:150004]))
report("O_APPEND writes at the end", lambda: (lambda fd: (os.write(fd, b"!"), os.close(fd)))(os.open(p("t", "sparse"), os.O_WRONLY | os.O_APPEND))[0])
report("  size", lambda: os.stat(p("t", "sparse")).st_size)
report("negative truncate", lambda: os.truncate(p("t", "sparse"), -1))
report("truncate to 1 TiB", lambda: os.truncate(p("t", "sparse"), 1 << 40))
report("write just below 1 TiB", lambda: (lambda fd: (os.pwrite(fd, b"far", (1 << 40) - 3), os.close(fd)))(os.open(p("t", "sparse"), os.O_WRONLY))[0])
report("  read it back", lambda: (lambda fd: (os.pread(fd, 8, (1 << 40) - 3), os.close(fd)))(os.open(p("t", "sparse"), os.O_RDONLY))[0])
report("  and the middle", lambda: (lambda fd: (os.pread(fd, 4, 1 << 39), os.close(fd)))(os.open(p("t", "sparse"), os.O_RDONLY))[0])
report("truncate back to 100 bytes", lambda: os.truncate(p("t", "sparse"), 100))

# ---- xattrs ----------------------------------------------------------------
write(p("x"), b"")
report("set user.a", lambda: os.setxattr(p("x"), "user.a", b"1"))
report("XATTR_CREATE on an existing one", lambda: os.setxattr(p("x"), "user.a", b"2", os.XATTR_CREATE))
report("XATTR_REPLACE on a missing one", lambda: os.setxattr(p("x"), "user.b", b"2", os.XATTR_REPLACE))
report("get a missing one", lambda: os.getxattr(p("x"), "user.b"))
report("empty value", lambda: (os.setxattr(p("x"), "user.e", b""), os.getxattr(p("x"), "user.e"))[1])
report("list", lambda: sorted(n for n in os.listxattr(p("x")) if n.startswith("user.")))
report("remove a missing one", lambda: os.removexattr(p("x"), "user.zz"))
report("unknown namespace", lambda: os.setxattr(p("x"), "bogus.a", b"1"))
report("name of 255 bytes", lambda: os.setxattr(p("x"), "user." + "n" * 250, b"1"))
report("name of 256 bytes", lambda: os.setxattr(p("x"), "user." + "n" * 251, b"1"))
os.mkfifo(p("fifo"))
report("user xattr on a fifo", lambda: os.setxattr(p("fifo"), "user.a", b"1"))
report("user xattr on a symlink", lambda: os.setxattr(p("n", "dangle"), "user.a", b"1", follow_symlinks=False))
write(p("xo"), b"", 0o644)
report_as("user xattr on another's 0644 file", NOBODY, NOBODY, [],
          lambda: os.setxattr(p("xo"), "user.a", b"1"))
report_as("read user xattr of another's 0644 file", NOBODY, NOBODY, [],
          lambda: os.getxattr(p("x"), "user.a"))

# ---- more: links across directories, times, namespaces, modes -------------
os.mkdir(p("m"))
os.mkdir(p("m", "a"))
os.mkdir(p("m", "b"))
write(p("m", "a", "f"), b"linked")
report("link into another dir", lambda: os.link(p("m", "a", "f"), p("m", "b", "g")))
report("rename one link over the other dir's name", lambda: (write(p("m", "b", "h"), b"h"), os.rename(p("m", "a", "f"), p("m", "b", "h")))[0])
fact("  the survivor", p("m", "b", "g"))
report("  names left", lambda: (sorted(os.listdir(p("m", "a"))), sorted(os.listdir(p("m", "b")))))
report("unlink one of two links", lambda: os.unlink(p("m", "b", "h")))
fact("  the other", p("m", "b", "g"))
write(p("m", "t"), b"times")
os.utime(p("m", "t"), ns=(1000000000, 2000000000))
report("UTIME_OMIT for atime", lambda: os.utime(p("m", "t"), ns=(os.stat(p("m", "t")).st_atime_ns, 3000000000)))
report("  times", lambda: (os.stat(p("m", "t")).st_atime_ns, os.stat(p("m", "t")).st_mtime_ns))
report("times before 1970", lambda: (os.utime(p("m", "t"), ns=(-1500000000, -2500000000)), os.stat(p("m", "t")).st_mtime_ns)[1])
report("times after 2038", lambda: (os.utime(p("m", "t"), ns=(4102444800123456789, 4102444800987654321)), os.stat(p("m", "t")).st_mtime_ns)[1])
report("trusted xattr as root", lambda: (os.setxattr(p("m", "t"), "trusted.k", b"v"), os.getxattr(p("m", "t"), "trusted.k"))[1])
os.chmod(p("m", "t"), 0o666)
report_as("trusted xattr as a user", NOBODY, NOBODY, [],
          lambda: os.setxattr(p("m", "t"), "trusted.k2", b"v"))
report_as("list xattrs as a user (trusted hidden)", NOBODY, NOBODY, [],
          lambda: sorted(os.listxattr(p("m", "t"))))
for i in range(30):
    os.setxattr(p("m", "t"), "user.%s%02d" % ("u" * 25, i), b"1")
    os.setxattr(p("m", "t"), "trusted.%s%02d" % ("t" * 25, i), b"1")
report_as("list 30 user and 30 trusted xattrs as a user", NOBODY, NOBODY, [],
          lambda: (len(os.listxattr(p("m", "t"))), sum(n.startswith("trusted.") for n in os.listxattr(p("m", "t")))))
report("the same as root", lambda: (len(os.listxattr(p("m", "t"))), sum(n.startswith("trusted.") for n in os.listxattr(p("m", "t")))))
report("access X_OK for root on a file without x bits", lambda: os.access(p("m", "t"), os.X_OK))
os.chmod(p("m", "t"), 0o644)
report("ftruncate through an O_RDONLY fd", lambda: (lambda fd: (os.ftruncate(fd, 0) if True else None))(os.open(p("m", "t"), os.O_RDONLY)))
report("write through an O_RDONLY fd", lambda: os.write(os.open(p("m", "t"), os.O_RDONLY), b"x"))
report("chmod 07777", lambda: (os.chmod(p("m", "t"), 0o7777), oct(stat.S_IMODE(os.stat(p("m", "t")).st_mode)))[1])
report("bind a unix socket", lambda: __import__("socket").socket(__import__("socket").AF_UNIX).bind(p("m", "sock")))
fact("  the socket", p("m", "sock"))
report("mkdir with 01777", lambda: (os.mkdir(p("m", "sd"), 0o1777), oct(stat.S_IMODE(os.stat(p("m", "sd")).st_mode)))[1])
report("mkdir with 04777 (set-user-ID is dropped)", lambda: (os.mkdir(p("m", "su"), 0o4777), oct(stat.S_IMODE(os.stat(p("m", "su")).st_mode)))[1])
report("readdir sees . and ..", lambda: sorted(n for n in os.listdir(p("m")) if n.startswith(".")) or "none (as listdir hides them)")
report("rename to a name with a slash-free 255-byte name", lambda: (os.rename(p("m", "b", "g"), p("m", "b", "z" * 255)), os.path.exists(p("m", "b", "z" * 255)))[1])

# ---- POSIX ACLs (system.posix_acl_*, binary form) ----------------------
import struct

TAGS = {"u::": 1, "u:": 2, "g::": 4, "g:": 8, "m::": 16, "o::": 32}
NAMES = {1: "u::", 2: "u:", 4: "g::", 8: "g:", 16: "m::", 32: "o::"}


def acl(*entries):
    """acl(("u::", 7), ("u:", 65534, 6), ...) in the xattr's binary form"""
    b = struct.pack("<I", 2)
    for e in entries:
        tag, perm, qual = e[0], e[-1], (e[1] if len(e) == 3 else 0xFFFFFFFF)
        b += struct.pack("<HHI", TAGS[tag], perm, qual)
    return b


def show_acl(path, kind):
    try:
        b = os.getxattr(path, "system.posix_acl_" + kind, follow_symlinks=False)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    out = []
    for i in range(4, len(b), 8):
        tag, perm, qual = struct.unpack("<HHI", b[i:i + 8])
        name = NAMES.get(tag, "?%d" % tag)
        out.append(name + ("%d:" % qual if tag in (2, 8) else "") + "%o" % perm)
    return ",".join(out)


def acl_fact(name, path):
    OUT.append("%s: %s access=%s default=%s" % (name, st(path), show_acl(path, "access"),
                                               show_acl(path, "default") if os.path.isdir(path) else "-"))


os.mkdir(p("acl"))
report("set a default ACL", lambda: os.setxattr(p("acl"), "system.posix_acl_default",
       acl(("u::", 7), ("u:", NOBODY, 7), ("g::", 5), ("m::", 7), ("o::", 0))))
acl_fact("  the dir", p("acl"))
write(p("acl", "f"), b"inherits", 0o666)
acl_fact("file created 0666 under it (umask 022 not applied)", p("acl", "f"))
os.mkdir(p("acl", "d"), 0o777)
acl_fact("dir created under it", p("acl", "d"))
write(p("acl", "d", "g"), b"", 0o640)
acl_fact("file created 0640 two levels down", p("acl", "d", "g"))
report_as("write through a named-user entry", NOBODY, NOBODY, [],
          lambda: write(p("acl", "f"), b"by acl", flags=os.O_WRONLY | os.O_TRUNC))
report_as("write by another user (other: none)", OTHER, OTHER, [],
          lambda: write(p("acl", "f"), b"no", flags=os.O_WRONLY))
report("chmod 0640 of a file with an extended ACL", lambda: os.chmod(p("acl", "f"), 0o640))
acl_fact("  the mask follows the group bits", p("acl", "f"))
report_as("write through the named-user entry, mask r--", NOBODY, NOBODY, [],
          lambda: write(p("acl", "f"), b"masked", flags=os.O_WRONLY))
write(p("acl", "plain"), b"", 0o644)
report("set a minimal access ACL", lambda: os.setxattr(p("acl", "plain"), "system.posix_acl_access",
       acl(("u::", 6), ("g::", 0), ("o::", 4))))
acl_fact("  it becomes the mode", p("acl", "plain"))
report("remove the default ACL", lambda: os.removexattr(p("acl"), "system.posix_acl_default"))
write(p("acl", "after"), b"", 0o666)
acl_fact("file created after the removal", p("acl", "after"))
report("an ACL with no mask but a named user", lambda: os.setxattr(p("acl", "plain"), "system.posix_acl_access",
       acl(("u::", 6), ("u:", NOBODY, 6), ("g::", 4), ("o::", 4))))
report("an ACL with a bad version", lambda: os.setxattr(p("acl", "plain"), "system.posix_acl_access",
       b"\x03\0\0\0" + acl(("u::", 6), ("g::", 4), ("o::", 4))[4:]))
report("a default ACL on a file", lambda: os.setxattr(p("acl", "plain"), "system.posix_acl_default",
       acl(("u::", 6), ("g::", 4), ("o::", 4))))

print("\n".join(OUT))
