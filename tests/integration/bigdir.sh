#!/bin/bash
# bigdir.sh - one directory with many entries: create, readdir, random
# lookups, remount, telldir/seekdir, changes during readdir, removal.
# ARBOR_TEST_SCALE=full: 100,000 files; otherwise 20,000.
. "$(dirname "$0")/lib.sh" "$@"

if [ "$SCALE" = full ]; then N=100000; else N=20000; fi

fs_mkfs -s 4G
fs_mount
mkdir "$MNT/big"

log "create $N files"
python3 - "$MNT/big" "$N" <<'EOF' || fail "create"
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
for i in range(n):
    fd = os.open("file-%07d" % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
    if i % 10 == 0:
        os.write(fd, b"%d\n" % i)
    os.close(fd)
os.close(dfd)
EOF

# check N: every name once, nothing else; random lookups; contents
check_dir() {
	python3 - "$MNT/big" "$1" <<'EOF' || fail "check of $MNT/big"
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
names = os.listdir(d)
assert len(names) == n, "readdir returned %d entries, want %d" % (len(names), n)
assert len(set(names)) == n, "readdir returned duplicates"
assert set(names) == {"file-%07d" % i for i in range(n)}, "wrong names"
with os.scandir(d) as it:
    cnt = sum(1 for e in it if e.is_file(follow_symlinks=False))
assert cnt == n, "scandir saw %d files" % cnt
rnd = random.Random(42)
for _ in range(2000):
    i = rnd.randrange(n)
    p = os.path.join(d, "file-%07d" % i)
    st = os.stat(p)
    if i % 10 == 0:
        assert open(p, "rb").read() == b"%d\n" % i, p
    else:
        assert st.st_size == 0, p
for i in (n, n + 1, 10 * n):
    assert not os.path.exists(os.path.join(d, "file-%07d" % i))
assert os.stat(d).st_nlink == 2, "directory nlink %d" % os.stat(d).st_nlink
EOF
}

log "readdir and lookups"
check_dir "$N"
[ "$(ls -f "$MNT/big" | wc -l)" = $((N + 2)) ] || fail "ls -f count"

log "remount"
fs_remount
check_dir "$N"

log "telldir/seekdir"
python3 - "$MNT/big" <<'EOF' || fail "telldir/seekdir"
import ctypes, ctypes.util, os, sys
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]
libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.telldir.argtypes = [ctypes.c_void_p]
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.closedir.argtypes = [ctypes.c_void_p]
dp = libc.opendir(sys.argv[1].encode())
assert dp
def read_all(dp, limit=None):
    out = []
    while limit is None or len(out) < limit:
        e = libc.readdir(dp)
        if not e:
            break
        out.append(e.contents.d_name)
    return out
first = read_all(dp, 7777)
pos = libc.telldir(dp)
rest = read_all(dp)
libc.seekdir(dp, pos)
again = read_all(dp)
assert rest == again, "seekdir to telldir position reads differently"
# and a position taken near the start
libc.seekdir(dp, 0)
assert read_all(dp, 7777) == first, "rewind"
libc.closedir(dp)
EOF

log "create and unlink during readdir"
python3 - "$MNT/big" "$N" <<'EOF' || fail "changes during readdir"
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
seen = []
removed, added = set(), set()
with os.scandir(d) as it:
    for k, e in enumerate(it):
        seen.append(e.name)
        if k == n // 3:
            # remove files at the end of the order, add new ones
            for i in range(n - 500, n):
                nm = "file-%07d" % i
                os.unlink(os.path.join(d, nm))
                removed.add(nm)
            for i in range(500):
                nm = "new-%05d" % i
                open(os.path.join(d, nm), "w").close()
                added.add(nm)
assert len(seen) == len(set(seen)), "an entry was returned twice"
untouched = {"file-%07d" % i for i in range(n)} - removed
missing = untouched - set(seen)
assert not missing, "%d untouched entries not returned, e.g. %s" % (len(missing), sorted(missing)[:3])
extra = set(seen) - untouched - removed - added
assert not extra, "unknown entries %s" % sorted(extra)[:3]
now = set(os.listdir(d))
assert now == untouched | added, "directory after the changes"
EOF

log "remove everything"
python3 - "$MNT/big" <<'EOF' || fail "unlink all"
import os, sys
d = sys.argv[1]
for nm in os.listdir(d):
    os.unlink(os.path.join(d, nm))
assert os.listdir(d) == []
os.rmdir(d)
EOF
[ ! -e "$MNT/big" ] || fail "big directory still there"
fs_remount
[ "$(ls -A "$MNT" | wc -l)" = 0 ] || fail "root not empty after remount: $(ls -A "$MNT" | head)"
fs_umount
check_fsck
finish
