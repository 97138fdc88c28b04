#!/usr/bin/env python3
"""fsx.py - seeded random operations on an arborfs mount and on a reference
directory of the host, compared after every step.

Every operation is applied to both trees; the outcome (result or errno)
must be the same, and the objects it touched must then look the same
(type, mode, nlink, size, contents, symlink target, user xattrs).  The whole
trees are compared every --full-every steps and after each remount.  At
random points the mount is unmounted and mounted again (fsx.py runs the
daemon itself, in the foreground, and stops it by its PID).

    fsx.py --daemon BUILD/fuse/arborfs --image IMG --mnt MNT --ref DIR \\
           [--seed N] [--ops N] [--remount-prob P] [--sync-every N]
           [--only OP,OP...] [--skip OP,OP...]
           [--batch N --kill-prob P --tail N --fsck FSCK --arbor ARBOR]

With --batch N (tests/integration/fsxkill.sh), every N operations the
daemon either unmounts cleanly or is killed with SIGKILL, and fsck -n runs
on the image before the next mount.  A kill point first commits (sync(2)
for the kernel's dirty pages, then fsync of the mount's root), then runs up
to --tail more operations on the mount only, then kills the daemon: when
no commit happened since the sync (`arbor filesystem generation`; mount
with commit=0,idle_commit=0 so that none comes from a timer), the mount
must come back exactly as the reference, without the tail; when one did,
the tail is committed whole, applied to the reference (same outcomes),
and then the daemon is killed.

Exit status 0 when the trees never differed; on a difference it prints the
seed, the step and the last operations, and exits 1.
"""
import argparse
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import struct
import os
import random
import stat
import subprocess
import sys
import time

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]

# arbor/ioctl.h: ARB_IOC_DEDUPE_RANGE, struct arb_ioc_dedupe_range
DEDUPE_FMT = "<IIiIQQQQII9Q"
ARB_IOC_DEDUPE_RANGE = (3 << 30) | (struct.calcsize(DEDUPE_FMT) << 16) | (ord("A") << 8) | 40
BS = 4096

NAMES = ["a", "b", "c", "d", "e", "f", "g", "h", "long-" + "x" * 200, "sp ace"]
MAX_OFF = 8 << 20
MAX_LEN = 256 << 10


class Mismatch(Exception):
    pass


def c_fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def c_renameat2(a, b, flags):
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def outcome(fn):
    """Run fn; return ("ok", value) or ("err", errno name)."""
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, str(e.errno)))


class Daemon:
    def __init__(self, args):
        self.args = args
        self.proc = None
        self.log = open(os.path.join(os.path.dirname(os.path.abspath(args.image)),
                                     "fsx-daemon.log"), "ab")

    def mount(self):
        assert self.proc is None
        self.proc = subprocess.Popen([self.args.daemon, "-f"] + self.args.daemon_opt +
                                     [self.args.image, self.args.mnt],
                                     stdout=self.log, stderr=self.log)
        for _ in range(300):
            if os.path.ismount(self.args.mnt):
                return
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError("arborfs exited before mounting")
            time.sleep(0.1)
        raise RuntimeError("arborfs: not mounted after 30 s")

    def umount(self):
        if self.proc is None:
            return
        os.sync()
        for _ in range(20):
            if subprocess.call(["fusermount3", "-u", self.args.mnt],
                               stderr=subprocess.DEVNULL) == 0:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("cannot unmount " + self.args.mnt)
        try:
            st = self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if st != 0:
            raise RuntimeError("arborfs exited with status %d after unmount" % st)

    def kill(self):
        """SIGKILL the daemon we started (by its PID), then take the dead
        mount away."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        for _ in range(20):
            if not os.path.ismount(self.args.mnt):
                return
            if subprocess.call(["fusermount3", "-u", self.args.mnt],
                               stderr=subprocess.DEVNULL) == 0:
                return
            time.sleep(0.5)
        if subprocess.call(["umount", "-l", self.args.mnt]) != 0:
            raise RuntimeError("cannot unmount %s after the kill" % self.args.mnt)

    def stop(self):
        """Last resort, whatever state we are in."""
        if self.proc is None:
            return
        if os.path.ismount(self.args.mnt):
            subprocess.call(["fusermount3", "-u", self.args.mnt], stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


# any byte to one of a few letters: text that zlib shrinks about 3x
TEXT_TABLE = bytes(b"arbor fs\n"[i % 9] for i in range(256))


class Fsx:
    def __init__(self, args, daemon):
        self.args = args
        self.daemon = daemon
        self.rnd = random.Random(args.seed)
        self.mnt = args.mnt
        self.ref = args.ref
        self.history = []
        self.stats = {}
        self.xattrs = self.probe_xattrs()

    def probe_xattrs(self):
        p = os.path.join(self.ref, ".probe")
        open(p, "w").close()
        try:
            os.setxattr(p, "user.probe", b"1")
            return True
        except OSError:
            print("fsx: the reference directory has no user xattrs: xattr ops off")
            return False
        finally:
            os.unlink(p)

    # ---- picking paths from the reference tree ----
    def all_paths(self):
        out = []
        for dp, dns, fns in os.walk(self.ref):
            dns.sort()
            rel = os.path.relpath(dp, self.ref)
            for n in sorted(dns + fns):
                out.append(os.path.normpath(os.path.join(rel, n)))
        return out

    def dirs(self):
        return ["."] + [p for p in self.all_paths()
                        if stat.S_ISDIR(os.lstat(os.path.join(self.ref, p)).st_mode)]

    def files(self):
        return [p for p in self.all_paths()
                if stat.S_ISREG(os.lstat(os.path.join(self.ref, p)).st_mode)]

    def existing(self):
        return self.all_paths()

    def new_path(self):
        ds = [d for d in self.dirs() if d.count("/") < 3]
        return os.path.normpath(os.path.join(self.rnd.choice(ds), self.rnd.choice(NAMES)))

    def any_path(self):
        ex = self.existing()
        if ex and self.rnd.random() < 0.8:
            return self.rnd.choice(ex)
        return self.new_path()

    def file_path(self):
        fs = self.files()
        if fs and self.rnd.random() < 0.85:
            return self.rnd.choice(fs)
        return self.new_path()

    def data(self, n):
        if n and self.args.data == "mixed":
            # for compression: a third random, a third text of a few
            # letters, a third one repeated byte
            k = self.rnd.randrange(3)
            if k == 1:
                raw = self.rnd.getrandbits(8 * n).to_bytes(n, "little")
                return raw.translate(TEXT_TABLE)
            if k == 2:
                return bytes([self.rnd.randrange(256)]) * n
        return self.rnd.getrandbits(8 * n).to_bytes(n, "little") if n else b""

    # ---- operations: each returns a function of the root and the paths
    #      it touches ----
    def op_write(self):
        p = self.file_path()
        off = self.rnd.choice([0, self.rnd.randrange(MAX_OFF), self.rnd.randrange(65536)])
        n = self.rnd.choice([1, 17, 4096, self.rnd.randrange(1, MAX_LEN)])
        buf = self.data(n)

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                return os.pwrite(fd, buf, off)
            finally:
                os.close(fd)
        return "write %s off=%d len=%d" % (p, off, n), f, [p]

    def op_append(self):
        p = self.file_path()
        buf = self.data(self.rnd.randrange(1, 10000))

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                return os.write(fd, buf)
            finally:
                os.close(fd)
        return "append %s len=%d" % (p, len(buf)), f, [p]

    def op_rewrite(self):
        # open(O_TRUNC) and write less than was there: the shell's '>'
        p = self.file_path()
        buf = self.data(self.rnd.choice([0, 3, self.rnd.randrange(1, 9000)]))

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                return os.write(fd, buf)
            finally:
                os.close(fd)
        return "rewrite %s len=%d" % (p, len(buf)), f, [p]

    def op_read(self):
        p = self.file_path()
        off = self.rnd.randrange(MAX_OFF)
        n = self.rnd.randrange(1, MAX_LEN)

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_RDONLY)
            try:
                return os.pread(fd, n, off)
            finally:
                os.close(fd)
        return "read %s off=%d len=%d" % (p, off, n), f, []

    def op_truncate(self):
        p = self.file_path()
        size = self.rnd.choice([0, self.rnd.randrange(5000), self.rnd.randrange(MAX_OFF)])
        return ("truncate %s %d" % (p, size),
                lambda root: os.truncate(os.path.join(root, p), size), [p])

    def op_fallocate(self):
        p = self.file_path()
        mode = self.rnd.choice([0, FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_ZERO_RANGE])
        off = self.rnd.randrange(MAX_OFF // 2)
        n = self.rnd.randrange(1, 1 << 20)

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_RDWR)
            try:
                return c_fallocate(fd, mode, off, n)
            finally:
                os.close(fd)
        return "fallocate %s mode=%#x off=%d len=%d" % (p, mode, off, n), f, [p]

    def op_mmap(self):
        p = self.file_path()
        full = os.path.join(self.ref, p)
        try:
            size = os.lstat(full).st_size if stat.S_ISREG(os.lstat(full).st_mode) else 0
        except OSError:
            size = 0
        if size == 0:
            return self.op_write()
        off = self.rnd.randrange(size)
        n = self.rnd.randrange(1, min(size - off, 100000) + 1)
        buf = self.data(n)

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_RDWR)
            try:
                m = mmap.mmap(fd, size, mmap.MAP_SHARED)
                m[off:off + n] = buf
                m.flush()
                m.close()
            finally:
                os.close(fd)
        return "mmap-write %s off=%d len=%d" % (p, off, n), f, [p]

    def op_rename(self):
        a, b = self.any_path(), self.any_path()
        flags = self.rnd.choice([0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE])

        def f(root):
            pa, pb = os.path.join(root, a), os.path.join(root, b)
            if flags:
                return c_renameat2(pa, pb, flags)
            return os.rename(pa, pb)
        return "rename %s %s flags=%d" % (a, b, flags), f, [a, b, os.path.dirname(a) or "."]

    def op_link(self):
        a, b = self.file_path(), self.new_path()
        return ("link %s %s" % (a, b),
                lambda root: os.link(os.path.join(root, a), os.path.join(root, b)), [a, b])

    def op_unlink(self):
        p = self.any_path()
        return "unlink %s" % p, lambda root: os.unlink(os.path.join(root, p)), [p]

    def op_mkdir(self):
        p = self.new_path()
        mode = self.rnd.choice([0o755, 0o700, 0o777, 0o1777, 0o2755])
        return ("mkdir %s %o" % (p, mode),
                lambda root: os.mkdir(os.path.join(root, p), mode), [p])

    def op_rmdir(self):
        ds = self.dirs()[1:]
        p = self.rnd.choice(ds) if ds and self.rnd.random() < 0.8 else self.any_path()
        return "rmdir %s" % p, lambda root: os.rmdir(os.path.join(root, p)), [p]

    def op_symlink(self):
        p = self.new_path()
        target = self.rnd.choice(["a", "../b", "/proc/arborfs-fsx-nonexistent", "x" * self.rnd.randrange(1, 3000)])
        return ("symlink %s -> %.40s" % (p, target),
                lambda root: os.symlink(target, os.path.join(root, p)), [p])

    def op_setxattr(self):
        p = self.any_path()
        name = "user.k%d" % self.rnd.randrange(4)
        val = self.data(self.rnd.choice([0, 5, self.rnd.randrange(800)]))  # ext4 (reference): one 4 KiB block of xattrs per inode
        flags = self.rnd.choice([0, 0, os.XATTR_CREATE, os.XATTR_REPLACE])
        return ("setxattr %s %s len=%d flags=%d" % (p, name, len(val), flags),
                lambda root: os.setxattr(os.path.join(root, p), name, val, flags,
                                         follow_symlinks=False), [p])

    def op_removexattr(self):
        p = self.any_path()
        name = "user.k%d" % self.rnd.randrange(4)
        return ("removexattr %s %s" % (p, name),
                lambda root: os.removexattr(os.path.join(root, p), name,
                                            follow_symlinks=False), [p])

    def op_chmod(self):
        p = self.any_path()
        mode = self.rnd.randrange(0o10000)
        if os.path.islink(os.path.join(self.ref, p)):
            # chmod follows symlinks: act on what the link names
            p = os.path.normpath(os.path.join(os.path.dirname(p),
                                              os.readlink(os.path.join(self.ref, p))))
            if p.startswith("/") or p.startswith(".."):
                return self.op_read()

        def f(root):
            return os.chmod(os.path.join(root, p), mode)
        return "chmod %s %o" % (p, mode), f, [p]

    def op_utime(self):
        p = self.any_path()
        ns = (self.rnd.randrange(1 << 32) * 1000000000 + self.rnd.randrange(1000000000))
        return ("utime %s %d" % (p, ns),
                lambda root: os.utime(os.path.join(root, p), ns=(ns, ns),
                                      follow_symlinks=False), [p, ("mtime", p)])

    def op_unlinked_open(self):
        p = self.new_path()
        buf = self.data(self.rnd.randrange(1, 200000))

        def f(root):
            fp = os.path.join(root, p)
            fd = os.open(fp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.unlink(fp)
                os.write(fd, buf)
                return os.pread(fd, len(buf), 0) == buf
            finally:
                os.close(fd)
        return "open-unlink-write %s len=%d" % (p, len(buf)), f, [p]

    def op_fsync(self):
        p = self.file_path()

        def f(root):
            fd = os.open(os.path.join(root, p), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return "fsync %s" % p, f, []

    # the sharing operations do not follow symlinks: one pointing out of
    # the tree would reach the host (its target, in /proc, cannot be
    # created, so the other operations fail on both sides alike)
    def copy_args(self, aligned):
        s, d = self.file_path(), self.file_path()
        if aligned:
            soff = BS * self.rnd.choice([0, self.rnd.randrange(64), self.rnd.randrange(MAX_OFF // BS)])
            doff = BS * self.rnd.choice([0, self.rnd.randrange(64), self.rnd.randrange(MAX_OFF // BS)])
            n = self.rnd.choice([BS * self.rnd.randrange(1, 256), MAX_OFF])
        else:
            soff = self.rnd.choice([0, self.rnd.randrange(1 << 20), self.rnd.randrange(MAX_OFF)])
            doff = self.rnd.choice([soff, self.rnd.randrange(1 << 20), self.rnd.randrange(MAX_OFF)])
            if self.rnd.random() < 0.3:  # congruent: head and tail copied, middle shared
                doff = doff // BS * BS + soff % BS
            n = self.rnd.choice([1, 17, self.rnd.randrange(1, MAX_LEN), MAX_OFF])
        return s, d, soff, doff, n

    @staticmethod
    def copy_range(sfd, dfd, soff, doff, n):
        done = 0
        while done < n:
            r = os.copy_file_range(sfd, dfd, n - done, soff + done, doff + done)
            if r == 0:
                break
            done += r
        return done

    def op_copy_range(self, aligned=False):
        # copy_file_range(2): the daemon shares the aligned part
        s, d, soff, doff, n = self.copy_args(aligned)

        def f(root):
            sfd = os.open(os.path.join(root, s), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                dfd = os.open(os.path.join(root, d), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                try:
                    return self.copy_range(sfd, dfd, soff, doff, n)
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
        return ("copy_range %s off=%d -> %s off=%d len=%d" % (s, soff, d, doff, n), f, [d])

    def op_clone(self):
        if self.rnd.random() < 0.5:
            return self.op_copy_range(aligned=True)
        # cp: the whole file into an emptied one
        s, d = self.file_path(), self.file_path()

        def f(root):
            sfd = os.open(os.path.join(root, s), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                if os.path.samefile(os.path.join(root, s), os.path.join(root, d)):
                    return -1
                # a directory's st_size differs between filesystems (0
                # here, 4096 on ext4): copy_file_range(2)'s answer, EISDIR,
                # must not depend on whether a length was asked for
                if stat.S_ISDIR(os.fstat(sfd).st_mode):
                    raise OSError(errno.EISDIR, "source is a directory")
                dfd = os.open(os.path.join(root, d), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                try:
                    return self.copy_range(sfd, dfd, 0, 0, os.fstat(sfd).st_size)
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
        return "clone %s -> %s" % (s, d), f, [d]

    def op_dedupe(self):
        # ARB_IOC_DEDUPE_RANGE on arborfs; on the reference, what it must
        # answer (dedupe changes no byte): same, differs or EINVAL
        s, d, soff, doff, n = self.copy_args(True)
        if self.rnd.random() < 0.5:
            d, doff = s, self.rnd.choice([doff, soff + n])

        def f(root):
            sp, dp = os.path.join(root, s), os.path.join(root, d)
            sfd = os.open(sp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                dfd = os.open(dp, os.O_RDWR | os.O_NOFOLLOW)
                try:
                    if root == self.mnt:
                        a = bytearray(struct.pack(DEDUPE_FMT, 0, 0, sfd, 0, soff, n, doff,
                                                  0, 0, 0, *([0] * 9)))
                        fcntl.ioctl(dfd, ARB_IOC_DEDUPE_RANGE, a)
                        return struct.unpack(DEDUPE_FMT, a)[8]
                    ss, ds = os.fstat(sfd), os.fstat(dfd)
                    for st_ in (ss, ds):
                        if stat.S_ISDIR(st_.st_mode):
                            raise OSError(errno.EISDIR, "a directory")
                        if not stat.S_ISREG(st_.st_mode):
                            raise OSError(errno.EINVAL, "not a file")
                    ln = min(n, max(0, ss.st_size - soff))
                    if soff >= ss.st_size or not ln:
                        return 0
                    if doff > ds.st_size or ln > ds.st_size - doff:
                        raise OSError(errno.EINVAL, "outside the destination")
                    if ss.st_ino == ds.st_ino and soff < doff + ln and doff < soff + ln:
                        raise OSError(errno.EINVAL, "overlap")
                    if not (soff + ln == ss.st_size and doff + ln == ds.st_size):
                        ln = ln // BS * BS
                    if not ln:
                        return 0
                    return 0 if os.pread(sfd, ln, soff) == os.pread(dfd, ln, doff) else 1
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
        return "dedupe %s off=%d -> %s off=%d len=%d" % (s, soff, d, doff, n), f, [d]

    OPS = [("write", 20), ("append", 4), ("rewrite", 4), ("read", 10), ("truncate", 6), ("fallocate", 6),
           ("mmap", 4), ("rename", 8), ("link", 4), ("unlink", 6), ("mkdir", 5),
           ("rmdir", 3), ("symlink", 3), ("setxattr", 4), ("removexattr", 2),
           ("chmod", 4), ("utime", 3), ("unlinked_open", 1), ("fsync", 2),
           ("copy_range", 5), ("clone", 5), ("dedupe", 4)]

    # ---- comparing ----
    def describe(self, root, rel):
        p = os.path.join(root, rel)
        try:
            st = os.lstat(p)
        except OSError as e:
            return ("missing", errno.errorcode.get(e.errno))
        m = st.st_mode
        d = {"type": stat.S_IFMT(m), "mode": stat.S_IMODE(m)}
        if not stat.S_ISDIR(m):
            d["nlink"] = st.st_nlink
            d["size"] = st.st_size
        if stat.S_ISREG(m):
            with open(p, "rb") as f:
                d["data"] = f.read()
        elif stat.S_ISLNK(m):
            d["target"] = os.readlink(p)
        else:
            d["entries"] = sorted(os.listdir(p))
        if self.xattrs:
            xs = {}
            for k in os.listxattr(p, follow_symlinks=False):
                if k.startswith("user."):
                    xs[k] = os.getxattr(p, k, follow_symlinks=False)
            d["xattrs"] = xs
        return d

    def compare(self, rel):
        if isinstance(rel, tuple):
            _, rel = rel
            a = outcome(lambda: os.lstat(os.path.join(self.ref, rel)).st_mtime_ns)
            b = outcome(lambda: os.lstat(os.path.join(self.mnt, rel)).st_mtime_ns)
            if a != b:
                raise Mismatch("mtime of %s: reference %s, arborfs %s" % (rel, a, b))
            return
        a, b = self.describe(self.ref, rel), self.describe(self.mnt, rel)
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
                det = "; ".join("%s: reference %.80r, arborfs %.80r" %
                                (k, a.get(k), b.get(k)) for k in sorted(diff))
                if "data" in diff and a.get("data") is not None and b.get("data") is not None:
                    da, db = a["data"], b["data"]
                    first = next((i for i in range(min(len(da), len(db))) if da[i] != db[i]),
                                 min(len(da), len(db)))
                    det += "; first differing byte at %d" % first
            else:
                det = "reference %.200r, arborfs %.200r" % (a, b)
            raise Mismatch("%s differs: %s" % (rel, det))

    def compare_all(self):
        ra, rb = self.all_paths(), []
        for dp, dns, fns in os.walk(self.mnt):
            rel = os.path.relpath(dp, self.mnt)
            for n in dns + fns:
                rb.append(os.path.normpath(os.path.join(rel, n)))
        if sorted(ra) != sorted(rb):
            raise Mismatch("trees differ: only in reference %s; only in arborfs %s" %
                           (sorted(set(ra) - set(rb))[:5], sorted(set(rb) - set(ra))[:5]))
        for p in ["."] + ra:
            self.compare(p)

    def commit(self):
        fd = os.open(self.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ---- batches: clean remounts and kills ----
    def fsck(self):
        if not self.args.fsck:
            return
        r = subprocess.run([self.args.fsck, "-n", self.args.image],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise Mismatch("fsck.arborfs -n: status %d:\n%s" %
                           (r.returncode, r.stdout.decode(errors="replace")[-3000:]))

    def generation(self):
        out = subprocess.check_output([self.args.arbor, "filesystem", "generation",
                                       self.mnt])
        return int(out.split()[1])

    def sync_all(self):
        # the kernel's dirty pages reach the daemon, then a commit
        os.sync()
        self.commit()

    def kill_point(self, step, names, weights):
        self.sync_all()
        g0 = self.generation()
        # the tail: on the mount only, neither committed nor checked; no
        # fsync (it commits) and no mmap (its size comes from the
        # reference, which the tail leaves behind)
        tw = [0 if n in ("fsync", "mmap") else w for n, w in zip(names, weights)]
        tail = []
        for i in range(self.rnd.randrange(self.args.tail + 1) if any(tw) else 0):
            name = self.rnd.choices(names, tw)[0]
            desc, fn, _ = getattr(self, "op_" + name)()
            self.history.append("%d: tail %s" % (step, desc))
            tail.append((desc, fn, outcome(lambda: fn(self.mnt))))
        g1 = self.generation()
        if g1 != g0:
            # something committed part of the tail: commit all of it and
            # let the reference catch up
            self.sync_all()
            for desc, fn, r2 in tail:
                r1 = outcome(lambda: fn(self.ref))
                if r1 != r2:
                    raise Mismatch("tail %s: reference gave %.100r, arborfs %.100r" %
                                   (desc, r1, r2))
            self.stats["kill-after-commit"] = self.stats.get("kill-after-commit", 0) + 1
            self.history.append("%d: kill -9 (tail of %d committed)" % (step, len(tail)))
        else:
            self.stats["kill-tail-lost"] = self.stats.get("kill-tail-lost", 0) + 1
            self.stats["tail-ops-lost"] = self.stats.get("tail-ops-lost", 0) + len(tail)
            self.history.append("%d: kill -9 (tail of %d lost)" % (step, len(tail)))
        self.daemon.kill()

    def boundary(self, step, names, weights):
        if self.rnd.random() < self.args.kill_prob:
            self.kill_point(step, names, weights)
            self.stats["kill"] = self.stats.get("kill", 0) + 1
        else:
            self.history.append("%d: remount" % step)
            self.daemon.umount()
            self.stats["remount"] = self.stats.get("remount", 0) + 1
        self.fsck()
        self.daemon.mount()
        self.compare_all()

    # ---- main loop ----
    def run(self):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        if not self.xattrs:
            weights[names.index("setxattr")] = weights[names.index("removexattr")] = 0
        for i, n in enumerate(names):
            if (self.args.only and n not in self.args.only) or n in self.args.skip:
                weights[i] = 0
        if not any(weights):
            raise RuntimeError("no operation left to run")
        for step in range(1, self.args.ops + 1):
            if self.args.batch and step > 1 and (step - 1) % self.args.batch == 0:
                self.boundary(step, names, weights)
            elif self.rnd.random() < self.args.remount_prob:
                self.history.append("%d: remount" % step)
                self.daemon.umount()
                self.daemon.mount()
                self.stats["remount"] = self.stats.get("remount", 0) + 1
                self.compare_all()
            name = self.rnd.choices(names, weights)[0]
            desc, fn, touched = getattr(self, "op_" + name)()
            self.history.append("%d: %s" % (step, desc))
            r1 = outcome(lambda: fn(self.ref))
            r2 = outcome(lambda: fn(self.mnt))
            if r1 != r2:
                raise Mismatch("%s: reference gave %.100r, arborfs %.100r" % (desc, r1, r2))
            key = name if r1[0] == "ok" else name + "(" + r1[1] + ")"
            self.stats[key] = self.stats.get(key, 0) + 1
            for t in touched:
                self.compare(t)
            if self.args.sync_every and step % self.args.sync_every == 0:
                # fsync of a directory commits (fsyncdir -> arb_fs_sync):
                # find the first operation whose commit fails
                r = outcome(lambda: self.commit())
                if r[0] != "ok":
                    raise Mismatch("commit after step %d (%s) failed: %s" % (step, desc, r[1]))
            if step % self.args.full_every == 0:
                self.compare_all()
            if step % 500 == 0:
                print("fsx: %d operations" % step, flush=True)
        self.daemon.umount()
        self.fsck()
        self.daemon.mount()
        self.compare_all()


def main():
    global MAX_OFF
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--daemon-opt", action="append", default=[],
                    help="extra daemon argument (repeatable)")
    ap.add_argument("--image", required=True)
    ap.add_argument("--mnt", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--remount-prob", type=float, default=0.003)
    ap.add_argument("--full-every", type=int, default=100)
    ap.add_argument("--only", type=lambda v: v.split(","), default=[],
                    help="comma list of operations to run (default: all)")
    ap.add_argument("--skip", type=lambda v: v.split(","), default=[],
                    help="comma list of operations not to run")
    ap.add_argument("--data", choices=["random", "mixed"], default="random",
                    help="what writes write: random bytes, or a mix of "
                    "random, text-like and repeated bytes (compression)")
    ap.add_argument("--sync-every", type=int, default=0,
                    help="commit (fsync of the mount's root) every N steps")
    ap.add_argument("--max-off", type=int, default=MAX_OFF,
                    help="offsets of writes and copies below N bytes (default 8 MiB)")
    ap.add_argument("--batch", type=int, default=0,
                    help="every N steps: a clean remount or a kill (--kill-prob)")
    ap.add_argument("--kill-prob", type=float, default=0.5,
                    help="with --batch: chance that a batch ends with SIGKILL")
    ap.add_argument("--tail", type=int, default=8,
                    help="with --batch: at most N uncommitted operations before a kill")
    ap.add_argument("--fsck", default=None,
                    help="fsck.arborfs, run with -n after each unmount or kill")
    ap.add_argument("--arbor", default=None,
                    help="the arbor tool (with --batch: the committed generation)")
    args = ap.parse_args()
    if args.batch and args.kill_prob and not args.arbor:
        ap.error("--batch with kills needs --arbor")
    MAX_OFF = args.max_off
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    print("fsx: seed %d, %d operations (rerun with --seed %d)" %
          (args.seed, args.ops, args.seed), flush=True)

    daemon = Daemon(args)
    fsx = None
    st = 0
    try:
        daemon.mount()
        fsx = Fsx(args, daemon)
        fsx.run()
        print("fsx: passed; seed %d; %s" % (args.seed, ", ".join(
            "%s=%d" % kv for kv in sorted(fsx.stats.items()))))
    except (Mismatch, RuntimeError, OSError) as e:
        print("fsx: FAILED with seed %d: %s" % (args.seed, e), file=sys.stderr)
        if fsx:
            print("fsx: last operations:\n  " + "\n  ".join(fsx.history[-15:]),
                  file=sys.stderr)
        st = 1
    finally:
        try:
            daemon.stop()
        except Exception as e:  # still report the first problem
            print("fsx: stopping the daemon: %s" % e, file=sys.stderr)
            st = 1
    return st


if __name__ == "__main__":
    sys.exit(main())
