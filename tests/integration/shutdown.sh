#!/bin/bash
# shutdown.sh - FS_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN, what `xfs_io -x -c
# shutdown` sends) with each of its flags: what was fsynced survives
# always; data the daemon received but did not commit (O_DIRECT) and a
# new directory survive DEFAULT and LOGFLUSH; data only in the kernel's
# page cache survives DEFAULT; NOLOGFLUSH keeps nothing but the last
# commit.  After the shutdown every change (and stat, write(2), fsync)
# fails with EIO, the state shows, an unprivileged caller gets EPERM,
# unmounting works and the daemon exits 0; fsck is clean.
. "$(dirname "$0")/lib.sh" "$@"

# no commit but the ones asked for: what is uncommitted stays so
OPTS=commit=600,idle_commit=0
ARBOR=$BUILD/cli/arbor
HAVE_XFS_IO=0
install_pkg xfs_io xfsprogs && HAVE_XFS_IO=1

# before.py MNT: the files, fds kept open; then waits for "go" on stdin
# (the shutdown), checks the errors and closes.
cat >"$TMP/before.py" <<'EOF'
import errno, mmap, os, sys
mnt = sys.argv[1]
os.chdir(mnt)
def data(tag, n):
    return (tag.encode() * (n // len(tag) + 1))[:n]
# committed by an fsync
fd = os.open("synced", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, data("synced", 100000))
os.fsync(fd)
os.close(fd)
# received by the daemon, not committed
fd = os.open("direct", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
buf = mmap.mmap(-1, 65536)
buf.write(data("direct", 65536))
os.write(fd, buf)
os.close(fd)
os.mkdir("newdir")
# only in the kernel's page cache: kept open (close writes back)
cached = os.open("cached", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(cached, data("cached", 70000))
keep = os.open("synced", os.O_WRONLY)
print("ready", flush=True)
sys.stdin.readline()

def eio(what, fn):
    try:
        fn()
    except OSError as e:
        if e.errno != errno.EIO:
            print("%s: %s, want EIO" % (what, e), file=sys.stderr)
            sys.exit(1)
        return
    print("%s: no error, want EIO" % what, file=sys.stderr)
    sys.exit(1)
eio("write(2)", lambda: os.pwrite(keep, b"x" * 4096, 0))
eio("fsync", lambda: os.fsync(keep))
eio("create", lambda: os.open("new", os.O_CREAT | os.O_WRONLY, 0o644))
eio("mkdir", lambda: os.mkdir("newdir2"))
eio("stat", lambda: os.stat("synced"))
eio("rename", lambda: os.rename("synced", "synced2"))
# close writes the cached pages back: EIO, or nothing left to write
for fd in (cached, keep):
    try:
        os.close(fd)
    except OSError as e:
        if e.errno != errno.EIO:
            raise
print("checked", flush=True)
EOF

# after.py MNT FLAG: what the next mount shows
cat >"$TMP/after.py" <<'EOF'
import os, sys
mnt, flag = sys.argv[1], int(sys.argv[2])
os.chdir(mnt)
def data(tag, n):
    return (tag.encode() * (n // len(tag) + 1))[:n]
def content(name):
    try:
        with open(name, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
bad = []
if content("synced") != data("synced", 100000):
    bad.append("synced file lost")
d = content("direct")
want = data("direct", 65536) if flag in (0, 1) else None
if d != want:
    bad.append("direct: %s, want %s" % (None if d is None else len(d),
                                        None if want is None else len(want)))
c = content("cached")
if flag == 0 and c != data("cached", 70000):
    bad.append("cached: %s bytes, want 70000" % (None if c is None else len(c)))
if flag == 1 and c not in (None, b"", data("cached", 70000)):
    bad.append("cached: %d bytes of something" % len(c))
if flag == 2 and c is not None:
    bad.append("cached exists after nologflush")
if os.path.isdir("newdir") != (flag in (0, 1)):
    bad.append("newdir %s" % ("present" if os.path.isdir("newdir") else "gone"))
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

# shut FLAG HOW: HOW = py (ioctl from python) or xfs_io
shut() {
	local flag=$1 how=$2
	if [ "$how" = xfs_io ]; then
		case $flag in
		1) xfs_io -x -c "shutdown -f" "$MNT" ;;
		2) xfs_io -x -c "shutdown" "$MNT" ;;
		esac
	else
		python3 - "$MNT" "$flag" <<'EOF'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.ioctl(fd, 0x8004587d, struct.pack("I", int(sys.argv[2])))
EOF
	fi
}

NAMES=(default logflush nologflush)

# one_case FLAG HOW [mount options]
one_case() {
	local flag=$1 how=$2 extra=${3:-}
	log "flag $flag (${NAMES[$flag]}) through $how ${extra:+(-o $extra)}"
	: >"$DAEMON_LOG"
	fs_mkfs
	fs_mount -o "$OPTS${extra:+,$extra}"
	coproc BEFORE { python3 "$TMP/before.py" "$MNT"; }
	local line
	read -r line <&"${BEFORE[0]}" || fail "before.py died"
	[ "$line" = ready ] || fail "before.py: $line"
	shut "$flag" "$how" || fail "shutdown $flag through $how failed"
	grep -q "shut down (${NAMES[$flag]})" "$DAEMON_LOG" ||
		fail "daemon did not log a ${NAMES[$flag]} shutdown"
	echo go >&"${BEFORE[1]}"
	read -r line <&"${BEFORE[0]}" || true
	wait "$BEFORE_PID" || fail "after the shutdown: errors not as expected"
	[ "$line" = checked ] || fail "before.py did not finish"
	"$ARBOR" filesystem generation --json "$MNT" | grep -q '"state": "shutdown"' ||
		fail "arbor filesystem generation does not show the shutdown"
	# a second one is harmless
	shut "$flag" py || fail "second shutdown failed"
	fs_umount
	grep -q "final commit failed" "$DAEMON_LOG" && fail "daemon reported a failed close"
	fs_mount -o "$OPTS"
	python3 "$TMP/after.py" "$MNT" "$flag" ||
		fail "after ${NAMES[$flag]}: the next mount shows the wrong state"
	fs_umount
	check_fsck
}

log "unprivileged caller"
need_nobody
fs_mkfs
fs_mount -o "$OPTS"
chmod 777 "$MNT"
out=$("${NOBODY[@]}" "$PY" - "$MNT" 2>&1 <<'EOF'
import errno, fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, 0x8004587d, struct.pack("I", 2))
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(0)
print("none")
EOF
) || true
[ "$out" = EPERM ] || fail "shutdown by nobody: $out, want EPERM"
echo still-writable >"$MNT/f" || fail "the mount stopped after a refused shutdown"
log "unknown flag"
python3 - "$MNT" <<'EOF' || fail "flag 3 not refused with EINVAL"
import errno, fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, 0x8004587d, struct.pack("I", 3))
except OSError as e:
    sys.exit(0 if e.errno == errno.EINVAL else 1)
sys.exit(1)
EOF
fs_umount

one_case 0 py
# DEFAULT waits for the kernel's writeback: no deadlock with one thread
one_case 0 py singlethread
if [ $HAVE_XFS_IO = 1 ]; then
	one_case 1 xfs_io
	one_case 2 xfs_io
else
	log "xfs_io not available: the ioctl from python"
	one_case 1 py
	one_case 2 py
fi
finish
