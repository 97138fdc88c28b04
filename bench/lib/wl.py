#!/usr/bin/env python3
"""Small workload helpers for bench/run.sh (public Python only).

Every subcommand prints one line of results on stdout, times its own work
with a monotonic clock and exits non-zero, with a message on stderr, when the
result does not check out.
"""
import ctypes
import os
import sys
import tarfile
import io
import time


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def seqwrite(path, nbytes, bs):
    """Write nbytes in bs-sized writes, fsync included: prints bytes secs."""
    nbytes, bs = int(nbytes), int(bs)
    buf = os.urandom(bs)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = 0
    while done < nbytes:
        done += os.write(fd, buf[:min(bs, nbytes - done)])
    os.fsync(fd)
    os.close(fd)
    t = time.monotonic() - t0
    size = os.stat(path).st_size
    if size != nbytes:
        die(f"seqwrite: {path} has {size} bytes, expected {nbytes}")
    print(nbytes, f"{t:.6f}")


def append_fsync(path, count):
    """count x (append 4 KiB, fsync): prints count secs."""
    count = int(count)
    buf = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t0 = time.monotonic()
    for _ in range(count):
        if os.write(fd, buf) != 4096:
            die("append-fsync: short write")
        os.fsync(fd)
    t = time.monotonic() - t0
    os.close(fd)
    size = os.stat(path).st_size
    if size != count * 4096:
        die(f"append-fsync: {path} has {size} bytes, expected {count * 4096}")
    print(count, f"{t:.6f}")


def fsync_load(path, count, bgpath, bgbytes):
    """count x (append 4 KiB, fsync) while a second process streams up to
    bgbytes of 1 MiB writes into bgpath without syncing: prints count secs
    p50 p99 max (fsync latencies in seconds), then the bytes the background
    writer managed.  Shows whether fsync of one file pays for the dirty
    data of others."""
    count, bgbytes = int(count), int(bgbytes)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            big = os.urandom(1 << 20)
            fd = os.open(bgpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            done = 0
            while done < bgbytes:
                done += os.write(fd, big)
                if done % (64 << 20) == 0:
                    # keep the file from outgrowing the image
                    os.lseek(fd, 0, os.SEEK_SET)
            os.close(fd)
        except OSError:
            code = 1
        os._exit(code)
    buf = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    time.sleep(0.5)  # let the writer get going
    lat = []
    t0 = time.monotonic()
    for _ in range(count):
        if os.write(fd, buf) != 4096:
            die("fsync-load: short write")
        t1 = time.monotonic()
        os.fsync(fd)
        lat.append(time.monotonic() - t1)
    t = time.monotonic() - t0
    os.close(fd)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    size = os.stat(path).st_size
    if size != count * 4096:
        die(f"fsync-load: {path} has {size} bytes, expected {count * 4096}")
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
    print(count, f"{t:.6f}", f"{q(0.5):.6f}", f"{q(0.99):.6f}",
          f"{lat[-1]:.6f}")


def syncfs(path):
    """syncfs(2) of the filesystem holding path (as sync -f does)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
    finally:
        os.close(fd)


def create_flat(d, n):
    """n empty files in directory d, then syncfs: prints n secs."""
    n = int(n)
    t0 = time.monotonic()
    for i in range(n):
        os.close(os.open(os.path.join(d, f"f{i:07d}"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    syncfs(d)
    t = time.monotonic() - t0
    print(n, f"{t:.6f}")


def scale(d, nfiles, ndirs, limit):
    """nfiles empty files spread round-robin over ndirs directories of d
    (ndirs=0: all in d itself).  Prints one line per tenth:
    'tenth files secs rate'; stops after limit seconds (the tenths not
    reached are missing)."""
    nfiles, ndirs, limit = int(nfiles), int(ndirs), float(limit)
    dirs = [d]
    if ndirs:
        dirs = [os.path.join(d, f"d{j:05d}") for j in range(ndirs)]
        for p in dirs:
            os.mkdir(p)
    step = nfiles // 10
    start = time.monotonic()
    t0 = start
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    nd = len(dirs)
    for tenth in range(10):
        for i in range(tenth * step, (tenth + 1) * step):
            os.close(os.open(f"{dirs[i % nd]}/f{i:08d}", flags, 0o644))
        t1 = time.monotonic()
        print(tenth + 1, step, f"{t1 - t0:.6f}", f"{step / (t1 - t0):.1f}",
              flush=True)
        t0 = t1
        if t1 - start > limit and tenth < 9:
            die(f"scale: stopped after {tenth + 1} tenths "
                f"({t1 - start:.0f} s > limit {limit:.0f} s)")


def mktar(out, n, ndirs, size):
    """A tarball of n files of size bytes (random) in ndirs directories."""
    n, ndirs, size = int(n), int(ndirs), int(size)
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tf:
        for j in range(ndirs):
            ti = tarfile.TarInfo(f"small/d{j:03d}")
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            ti.mtime = int(time.time())
            tf.addfile(ti)
        for i in range(n):
            ti = tarfile.TarInfo(f"small/d{i % ndirs:03d}/f{i:06d}")
            ti.size = size
            ti.mode = 0o644
            ti.mtime = int(time.time())
            tf.addfile(ti, io.BytesIO(os.urandom(size)))


def used(path):
    """Bytes in use on the filesystem holding path (statvfs), after an
    fsync of path: sync(2) does not reach a FUSE daemon, fsync does, so
    frees and allocations still waiting for a commit are counted."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    st = os.statvfs(path)
    print((st.f_blocks - st.f_bfree) * st.f_frsize)


def treestat(path):
    """Entry count (all types, path included) and sum of regular file sizes."""
    n, total = 0, 0
    for root, dirs, files in os.walk(path):
        n += 1
        for f in files + [x for x in dirs if os.path.islink(os.path.join(root, x))]:
            n += 1
            p = os.path.join(root, f)
            st = os.lstat(p)
            if not os.path.islink(p) and os.path.isfile(p):
                total += st.st_size
    print(n, total)


def hwm(pid):
    """Peak resident set of a process (VmHWM), bytes; 0 when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    print(int(line.split()[1]) * 1024)
                    return
    except OSError:
        pass
    print(0)


CMDS = {"seqwrite": seqwrite, "append-fsync": append_fsync,
        "fsync-load": fsync_load,
        "create-flat": create_flat, "scale": scale, "mktar": mktar,
        "used": used, "treestat": treestat, "hwm": hwm}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CMDS:
        die("usage: wl.py " + "|".join(CMDS) + " ARGS...")
    try:
        CMDS[sys.argv[1]](*sys.argv[2:])
    except OSError as e:
        die(f"{sys.argv[1]}: {e}")
