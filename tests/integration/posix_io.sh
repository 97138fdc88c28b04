#!/bin/bash
# posix_io.sh - I/O semantics that xfstests found wrong under the
# writeback cache.
#
#  seek:  SEEK_DATA / SEEK_HOLE see data still dirty in the kernel's page
#         cache (never a hole or EOF where there is data), and report the
#         real holes once written back; with a pool of threads, with one
#         thread (-s) and with OPEN requests (-o open_requests).
#  dio:   after an asynchronous (AIO) O_DIRECT write completed, a buffered
#         read sees the new data, although two buffered readers kept
#         reading the range during the write (the kernel skips its
#         invalidation after an async direct write; the daemon drops the
#         range before it answers); with a pool and with -s.
#
# Everything is checked again after a remount, and by fsck.
. "$(dirname "$0")/lib.sh" "$@"

# ---- seek: SEEK_DATA / SEEK_HOLE over dirty pages -------------------------
# seek_check FILE-PREFIX: each case writes with write(2) (the kernel keeps
# the pages dirty) and seeks at once; python prints what differs.
seek_check() {
	python3 - "$1" <<'EOF'
import os, sys
pre = sys.argv[1]
K = 1024
bad = []

def seek(fd, off, whence):
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return "ENXIO" if e.errno == 6 else "errno %d" % e.errno

def want(name, fd, off, whence, exp):
    got = seek(fd, off, whence)
    if got != exp:
        w = "SEEK_DATA" if whence == os.SEEK_DATA else "SEEK_HOLE"
        bad.append("%s: %s %d = %s, want %s" % (name, w, off, got, exp))

def new(name):
    return os.open(pre + name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

# a new file, all of it dirty (xfs_io: pwrite 0 64k; seek -d 0; seek -h 0)
fd = new("dirty")
os.pwrite(fd, b"a" * 64 * K, 0)
want("dirty", fd, 0, os.SEEK_DATA, 0)
want("dirty", fd, 0, os.SEEK_HOLE, 64 * K)
want("dirty", fd, 64 * K, os.SEEK_DATA, "ENXIO")
os.close(fd)

# written back, then extended by dirty data past a hole
fd = new("extend")
os.pwrite(fd, b"b" * 64 * K, 0)
os.fsync(fd)
os.pwrite(fd, b"c" * 64 * K, 1024 * K)
want("extend", fd, 100 * K, os.SEEK_DATA, 1024 * K)
want("extend", fd, 0, os.SEEK_HOLE, 64 * K)
want("extend", fd, 1024 * K, os.SEEK_HOLE, 1088 * K)
os.close(fd)

# a dirty page inside a hole that was written back as a hole
fd = new("inhole")
os.pwrite(fd, b"d" * 64 * K, 0)
os.pwrite(fd, b"e" * 64 * K, 1024 * K)
os.fsync(fd)
want("inhole", fd, 64 * K, os.SEEK_DATA, 1024 * K)
os.pwrite(fd, b"f" * 4 * K, 512 * K)
want("inhole", fd, 100 * K, os.SEEK_DATA, 512 * K)
want("inhole", fd, 512 * K, os.SEEK_HOLE, 516 * K)
want("inhole", fd, 516 * K, os.SEEK_DATA, 1024 * K)
os.close(fd)

# a dirty page from a shared mapping (no inode lock at all)
import mmap
fd = new("mmap")
os.ftruncate(fd, 256 * K)
os.fsync(fd)
m = mmap.mmap(fd, 256 * K)
m[128 * K:132 * K] = b"g" * 4 * K
want("mmap", fd, 0, os.SEEK_DATA, 128 * K)
want("mmap", fd, 128 * K, os.SEEK_HOLE, 132 * K)
m.close()
os.close(fd)

for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
}

# what seek_check wrote, after a remount: the data and the holes
seek_after() {
	python3 - "$1" <<'EOF' || soft_fail "seek: wrong after remount"
import os, sys
pre = sys.argv[1]
K = 1024
exp = {
    "dirty": [(0, 64 * K, b"a")],
    "extend": [(0, 64 * K, b"b"), (1024 * K, 64 * K, b"c")],
    "inhole": [(0, 64 * K, b"d"), (512 * K, 4 * K, b"f"), (1024 * K, 64 * K, b"e")],
    "mmap": [(128 * K, 4 * K, b"g")],
}
ok = True
for name, runs in exp.items():
    with open(pre + name, "rb") as f:
        data = f.read()
    want = bytearray(runs[-1][0] + runs[-1][1] if name != "mmap" else 256 * K)
    for off, n, c in runs:
        want[off:off + n] = c * n
    if data != bytes(want):
        print("%s: content differs" % name)
        ok = False
    fd = os.open(pre + name, os.O_RDONLY)
    pos = 0
    got = []
    while True:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        got.append((d, h))
        pos = h
    os.close(fd)
    # written back: a data run may be rounded out to blocks, never less
    for off, n, c in runs:
        if not any(d <= off and off + n <= h for d, h in got):
            print("%s: [%d, %d) not inside data runs %s" % (name, off, off + n, got))
            ok = False
sys.exit(0 if ok else 1)
EOF
}

for mode in "" "-s" "-o open_requests"; do
	log "seek: ${mode:-a pool of threads}"
	fs_mkfs -s 256M
	# shellcheck disable=SC2086
	fs_mount $mode
	seek_check "$MNT/s-" || soft_fail "seek (${mode:-pool}): dirty data seen as hole or EOF"
	# shellcheck disable=SC2086
	fs_remount $mode
	seek_after "$MNT/s-"
	fs_umount
	check_fsck
done

# ---- dio: no stale pages after an AIO O_DIRECT write ----------------------
# dio_check FILE CYCLES: io_submit (raw system calls, no libaio) rewrites
# 640 KiB with a new pattern each cycle while two processes read the file
# buffered; after each completion a buffered read must see the pattern.
dio_check() {
	python3 - "$1" "$2" <<'EOF'
import ctypes, mmap, os, struct, subprocess, sys
path, cycles = sys.argv[1], int(sys.argv[2])
SIZE, CH = 640 * 1024, 64 * 1024
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SETUP, DESTROY, GETEVENTS, SUBMIT = 206, 207, 208, 209  # x86_64
ctx = ctypes.c_ulong(0)
if libc.syscall(SETUP, 64, ctypes.byref(ctx)):
    print("io_setup: errno %d" % ctypes.get_errno())
    sys.exit(2)
with open(path, "wb") as f:
    f.write(b"\0" * SIZE)
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, SIZE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
readers = [subprocess.Popen([sys.executable, "-c",
    "import sys\nwhile True:\n    open(sys.argv[1], 'rb').read()", path])
    for _ in range(2)]
n = SIZE // CH
cbs = [ctypes.create_string_buffer(64) for _ in range(n)]
arr = (ctypes.c_void_p * n)(*[ctypes.addressof(cb) for cb in cbs])
ev = ctypes.create_string_buffer(32 * n)
rc = 0
try:
    for c in range(1, cycles + 1):
        pat = bytes([c % 251 + 1])
        buf[:] = pat * SIZE
        for i, cb in enumerate(cbs):
            # struct iocb: data, key, rw_flags, opcode (1: PWRITE), prio,
            # fd, buf, nbytes, offset, reserved, flags, resfd
            struct.pack_into("<QIIHhIQQqQII", cb, 0, i, 0, 0, 1, 0, fd,
                             addr + i * CH, CH, i * CH, 0, 0, 0)
        if libc.syscall(SUBMIT, ctx, n, arr) != n:
            print("io_submit: errno %d" % ctypes.get_errno())
            rc = 2
            break
        got = 0
        while got < n:
            r = libc.syscall(GETEVENTS, ctx, 1, n - got,
                             ctypes.byref(ev, 32 * got), None)
            if r < 0:
                print("io_getevents: errno %d" % ctypes.get_errno())
                sys.exit(2)
            got += r
        if any(struct.unpack_from("<QQqq", ev, 32 * i)[2] != CH
               for i in range(n)):
            print("cycle %d: a write failed" % c)
            rc = 1
            break
        with open(path, "rb") as f:
            data = f.read()
        if data != pat * SIZE:
            bad = sum(1 for i in range(0, SIZE, 4096)
                      if data[i:i + 4096] != pat * 4096)
            print("cycle %d: %d of %d pages stale after the write completed"
                  % (c, bad, SIZE // 4096))
            rc = 1
            break
finally:
    for p in readers:
        p.kill()
        p.wait()
    libc.syscall(DESTROY, ctx)
    os.close(fd)
sys.exit(rc)
EOF
}

if [ "$(uname -m)" != x86_64 ]; then
	log "dio: skipped (the AIO system call numbers are x86_64's)"
else
	for mode in "" "-s"; do
		log "dio: ${mode:-a pool of threads}"
		fs_mkfs -s 256M
		# shellcheck disable=SC2086
		fs_mount $mode
		dio_check "$MNT/dio" 300 ||
			soft_fail "dio (${mode:-pool}): stale data after an AIO direct write"
		fs_umount
		check_fsck
	done
fi

finish
