#!/bin/bash
# posix_edge.sh - corner cases of POSIX behaviour that xfstests found.
#
#  1. A listing whose reader renames each entry away and back (rename(x,
#     T), rename(T, x): x gets a new, higher DIR_INDEX) ends, and shows
#     each entry once (generic/471-like; ext4 and btrfs end).  telldir and
#     seekdir still work, and entries that exist throughout a listing are
#     seen exactly once while others are created and removed.  In both
#     opendir modes (default: no OPENDIR requests; -o open_requests).
#  2. A write, fallocate, punch hole or zero range by a user who is neither
#     in the file's group nor root clears set-group-ID even without group
#     execute (Linux 6.x, ext4, tmpfs); a user in the group keeps it.
#  3. st_blocks of a file written into preallocated space, or overwritten,
#     before the next commit counts each block once (ext4: 2048 sectors
#     for a 1 MiB fallocate then a 1 MiB write).
#  4. Entry replies for the root carry generation 0: the kernel warns
#     "fuse: root generation should be zero" (once per boot) when a lookup
#     of ".." while open_by_handle_at reconnects a directory returns
#     another.
#  5. Every filesystem-independent option of mount(8) is accepted (on a
#     new mount, and with remount on a mounted one, as mount.fuse3 passes
#     them on).
. "$(dirname "$0")/lib.sh" "$@"

need_nobody

# ---- 1. listings --------------------------------------------------------

# rename_listing DIR N: list DIR, renaming each entry away and back as it
# is met; every one of the N names must come exactly once
rename_listing() {
	python3 - "$1" "$2" <<'EOF' || soft_fail "listing of $1 with renames"
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
seen = []
for e in os.scandir(d):
    seen.append(e.name)
    if len(seen) > 3 * n:
        print("listing of %d entries gave more than %d (renames met "
              "again)" % (n, 3 * n), file=sys.stderr)
        sys.exit(1)
    os.rename(os.path.join(d, e.name), os.path.join(d, "T"))
    os.rename(os.path.join(d, "T"), os.path.join(d, e.name))
if len(seen) != n or len(set(seen)) != n:
    dup = sorted(x for x in set(seen) if seen.count(x) > 1)[:5]
    print("%d entries listed, %d distinct, want %d; repeated: %s"
          % (len(seen), len(set(seen)), n, dup), file=sys.stderr)
    sys.exit(1)
EOF
}

# seek_and_churn DIR: telldir/seekdir give the same entries again, and
# entries that exist throughout a listing that creates and removes others
# are listed exactly once
seek_and_churn() {
	python3 - "$1" <<'EOF' || soft_fail "telldir/seekdir or listing under churn in $1"
import ctypes, os, sys
d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.c_void_p
libc.readdir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.telldir.argtypes = [ctypes.c_void_p]
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.closedir.argtypes = [ctypes.c_void_p]

def name(p):
    # struct dirent: d_ino 8, d_off 8, d_reclen 2, d_type 1, d_name
    return ctypes.string_at(p + 19).decode()

def rest(h):
    out = []
    while True:
        p = libc.readdir(h)
        if not p:
            return out
        out.append(name(p))

def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)

names = ["s%04d" % i for i in range(200)]
for x in names:
    open(os.path.join(d, x), "w").close()
h = libc.opendir(d.encode())
first = [name(libc.readdir(h)) for _ in range(80)]
pos = libc.telldir(h)
after = rest(h)
libc.seekdir(h, pos)
again = rest(h)
if after != again:
    fail("seekdir to %d: %d entries, want the %d after telldir"
         % (pos, len(again), len(after)))
libc.seekdir(h, 0)
whole = rest(h)
if sorted(whole) != sorted(first + after) or len(whole) != 202:
    fail("seekdir(0): %d entries, want 202" % len(whole))
libc.closedir(h)

# a listing while others create and remove: every name that exists
# throughout comes exactly once
h = libc.opendir(d.encode())
seen = [name(libc.readdir(h)) for _ in range(60)]
gone = set()
for i in range(0, 200, 7):
    if names[i] not in seen:
        os.unlink(os.path.join(d, names[i]))
        gone.add(names[i])
for i in range(150):
    open(os.path.join(d, "new%04d" % i), "w").close()
seen += rest(h)
libc.closedir(h)
for x in names:
    if x in gone:
        continue
    if seen.count(x) != 1:
        fail("%s, there throughout, listed %d times" % (x, seen.count(x)))
dups = [x for x in set(seen) if seen.count(x) > 1]
if dups:
    fail("listed more than once: %s" % sorted(dups)[:5])
EOF
}

for mode in "" open_requests; do
	log "listings with renames (${mode:-no OPENDIR requests})"
	fs_mkfs -s 256M
	fs_mount ${mode:+-o $mode}
	mkdir "$MNT/small" "$MNT/big" "$MNT/seek"
	touch "$MNT"/small/{1,2,3,4,5,6,7,8,9,10}
	rename_listing "$MNT/small" 10
	# more than one READDIR(PLUS) reply: names of 200 bytes (a rename
	# costs milliseconds: few of them)
	python3 - "$MNT/big" <<'EOF' || fail "creating files"
import os, sys
for i in range(80):
    open(os.path.join(sys.argv[1], "%04d-%s" % (i, "x" * 195)), "w").close()
EOF
	rename_listing "$MNT/big" 80
	seek_and_churn "$MNT/seek"
	# both kinds of request served these listings
	rd=$(op_count readdir) || fail "arbor filesystem stats"
	rdp=$(op_count readdirplus) || fail "arbor filesystem stats"
	log "READDIR requests: $rd, READDIRPLUS: $rdp"
	[ "$rd" -gt 0 ] && [ "$rdp" -gt 0 ] ||
		soft_fail "want READDIR and READDIRPLUS requests, got $rd and $rdp"
	fs_umount
	check_fsck
done

# ---- 2. set-group-ID for users outside the group --------------------------

# sections 2 to 4 share a mount (an unmount costs seconds): no timed
# commit, for section 3; every request through /dev/fuse, for strace in
# section 4
log "set-group-ID after writes and fallocates by a user outside the group"
fs_mkfs -s 256M
fs_mount -o commit=0,no_uring
D=$MNT/sgid
mkdir "$D"
chmod 777 "$D"
# as_nobody OP FILE: one operation as uid/gid 65534 without groups
as_nobody() {
	"${NOBODY[@]}" "$PY" - "$1" "$2" <<'EOF' || soft_fail "as nobody: $1 on $2"
import ctypes, os, sys
op, f = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                           ctypes.c_long]
KEEP, PUNCH, ZERO = 1, 2, 16
fd = os.open(f, os.O_WRONLY)
if op == "pwrite":
    os.pwrite(fd, b"y" * 4096, 0)
elif op == "truncate":
    os.ftruncate(fd, 100)
else:
    mode, off, n = {"falloc": (0, 0, 65536), "fpunch": (PUNCH | KEEP, 0, 4096),
                    "fzero": (ZERO, 0, 4096)}[op]
    if libc.fallocate(fd, mode, off, n):
        raise OSError(ctypes.get_errno(), "fallocate " + op)
os.close(fd)
EOF
}
# want FILE MODE
want_mode() {
	local m
	m=$(stat -c %a "$1")
	[ "$m" = "$2" ] || soft_fail "$(basename "$1"): mode $m, want $2"
}
for op in pwrite falloc fpunch fzero truncate; do
	head -c 8192 /dev/zero >"$D/$op"
	chmod 2666 "$D/$op"
	as_nobody "$op" "$D/$op"
	want_mode "$D/$op" 666
	# in the file's group: the bit stays (no group execute)
	head -c 8192 /dev/zero >"$D/$op-ingroup"
	chgrp 65534 "$D/$op-ingroup"
	chmod 2666 "$D/$op-ingroup"
	as_nobody "$op" "$D/$op-ingroup"
	want_mode "$D/$op-ingroup" 2666
done

# ---- 3. st_blocks before a commit -----------------------------------------

log "st_blocks of writes into preallocated or allocated space"
# (commit=0: the delayed blocks stay delayed until the fsync below and
# the unmount)
# each change through its own open and close: a close makes the kernel
# forget st_blocks (writeback cache), as after the xfs_io runs of the
# report; none of these commits except the fsync
python3 - "$MNT" <<'EOF' || soft_fail "st_blocks before a commit"
import os, sys
m = sys.argv[1]
bad = []
def blocks(f, want, what):
    b = os.stat(f).st_blocks
    if b != want:
        bad.append("%s: st_blocks %d, want %d" % (what, b, want))
def falloc(f, off, n):
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, off, n)
    os.close(fd)
def pwrite(f, data, off, sync=False):
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, data, off)
    if sync:
        os.fsync(fd)
    os.close(fd)

f = os.path.join(m, "prealloc")
falloc(f, 0, 1 << 20)
blocks(f, 2048, "fallocate 1 MiB")
pwrite(f, b"p" * (1 << 20), 0)
blocks(f, 2048, "fallocate 1 MiB, write 1 MiB")
os.sync()
blocks(f, 2048, "fallocate 1 MiB, write 1 MiB, sync")

f = os.path.join(m, "unaligned")
falloc(f, 4095, 2)
blocks(f, 16, "fallocate 4095+2")
pwrite(f, b"uu", 4095)
blocks(f, 16, "fallocate 4095+2, write 4095+2")

f = os.path.join(m, "overwrite")
pwrite(f, b"o" * 65536, 0, sync=True)
blocks(f, 128, "write 64 KiB, fsync")
pwrite(f, b"O" * 65536, 0)
pwrite(f, b"O" * 8192, 65536)
blocks(f, 144, "overwrite 64 KiB, append 8 KiB")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF

# ---- 4. root generation --------------------------------------------------

log "the root's generation in entry replies"
# the replies are seen through strace (the kernel warns only once per
# boot, and forces the generation to 0 itself)
mkdir -p "$MNT/h/sub"
if command -v strace >/dev/null; then
	strace -p "$DAEMON_PID" -f -e trace=writev -x -s 200 -o "$TMP/strace" 2>/dev/null &
	STRACE_PID=$!
	sleep 1
fi
python3 - "$MNT" <<'EOF' || soft_fail "open_by_handle_at"
import ctypes, os, sys
m = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
class FH(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int),
                ("f", ctypes.c_ubyte * 128)]
handles = []
for p in ("h", "h/sub"):
    fh = FH(128, 0)
    mid = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.path.join(m, p).encode(),
                              ctypes.byref(fh), ctypes.byref(mid), 0):
        raise OSError(ctypes.get_errno(), "name_to_handle_at " + p)
    handles.append(fh)
# forget the dentries: the handles must be decoded through the daemon,
# with lookups of "." and of ".." up to the root
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("2\n")
mfd = os.open(m, os.O_RDONLY | os.O_DIRECTORY)
for fh in handles:
    fd = libc.open_by_handle_at(mfd, ctypes.byref(fh), os.O_RDONLY)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "open_by_handle_at")
    os.close(fd)
os.close(mfd)
EOF
if [ -n "${STRACE_PID:-}" ]; then
	sleep 0.5
	kill "$STRACE_PID"
	wait "$STRACE_PID" 2>/dev/null || true
	# entry replies (struct fuse_entry_out after the 16-byte header)
	# that name node 1: their generation must be 0
	python3 - "$TMP/strace" <<'EOF' || soft_fail "an entry reply gives the root a generation other than 0"
import re, sys
n = bad = 0
for line in open(sys.argv[1]):
    m = re.search(r'iov_len=16\}, \{iov_base="((?:\\x[0-9a-f]{2})+)", '
                  r'iov_len=(\d+)', line)
    if not m or int(m.group(2)) < 128:
        continue
    body = bytes.fromhex(m.group(1).replace("\\x", ""))
    if int.from_bytes(body[0:8], "little") == 1:
        n += 1
        gen = int.from_bytes(body[8:16], "little")
        if gen:
            print("root entry with generation %d" % gen, file=sys.stderr)
            bad += 1
if n == 0:
    print("no entry reply for the root seen", file=sys.stderr)
sys.exit(1 if bad or n == 0 else 0)
EOF
else
	log "strace missing: replies not checked (the kernel's warning only)"
fi
if dmesg 2>/dev/null | grep -q "root generation should be zero"; then
	log "the kernel warned about the root's generation in this boot (maybe before this test)"
fi

log "modes and st_blocks of sections 2 and 3 after a remount"
fs_remount
for op in pwrite falloc fpunch fzero truncate; do
	want_mode "$D/$op" 666
	want_mode "$D/$op-ingroup" 2666
done
for f in prealloc:2048 unaligned:16 overwrite:144; do
	b=$(stat -c %b "$MNT/${f%:*}")
	[ "$b" = "${f#*:}" ] || soft_fail "${f%:*}: st_blocks $b after a remount, want ${f#*:}"
done
fs_umount
check_fsck

# ---- 5. mount options -----------------------------------------------------

log "mount(8)'s filesystem-independent options"
GENERIC="async,atime,noatime,auto,noauto,defaults,dev,nodev,diratime,nodiratime"
GENERIC+=",dirsync,exec,noexec,group,iversion,noiversion,mand,nomand,_netdev"
GENERIC+=",nofail,relatime,norelatime,strictatime,nostrictatime,lazytime"
GENERIC+=",nolazytime,suid,nosuid,silent,loud,owner,ro,rw,sync,user,nouser"
GENERIC+=",users,X-mount.mkdir,x-systemd.automount,comment=posix_edge"
fs_mkfs -s 256M
fs_mount -o "$GENERIC"
echo data >"$MNT/written" || soft_fail "not writable with -o ...,ro,rw,..."
fs_umount
# remount: what mount.fuse3 runs for `mount -o remount,nodiratime MNT`
# (the mount's flags, remount, the new ones, the FUSE options); the
# running daemon's mount changes and no second daemon starts
fs_mount -o nodiratime
# mnt_opts: the per-mount options of $MNT
mnt_opts() {
	awk -v m="$MNT" '$5 == m { o = $6 } END { print o }' /proc/self/mountinfo
}
# remount OPTS WANT NOT: WANT in the mount's options after, NOT not
remount() {
	"$DAEMON" "$IMG" "$MNT" -o "$1" >>"$DAEMON_LOG" 2>&1 ||
		soft_fail "arborfs -o $1 failed"
	local o
	o=$(mnt_opts)
	case ",$o," in *",$2,"*) ;; *) soft_fail "-o $1: options $o, want $2" ;; esac
	case ",$o," in *",$3,"*) soft_fail "-o $1: options $o, want no $3" ;; esac
	mountpoint -q "$MNT" || fail "not mounted after -o $1"
}
FUSEOPTS=user_id=0,group_id=0,default_permissions,allow_other
remount "rw,nosuid,nodev,relatime,remount,nodiratime,$FUSEOPTS" nodiratime ro
remount "rw,nosuid,nodev,nodiratime,relatime,remount,diratime,$FUSEOPTS" relatime nodiratime
remount "rw,nosuid,nodev,relatime,remount,nodiratime,$FUSEOPTS" nodiratime ro
# mount -o remount,diratime: mount(8) drops diratime and nodiratime both
remount "rw,nosuid,nodev,relatime,remount,$FUSEOPTS" relatime nodiratime
# given alone: the rest as for a new mount (nosuid, nodev, relatime)
remount "remount,noatime" noatime relatime
remount "remount,atime" nosuid noatime
[ "$(cat "$MNT/written")" = data ] || soft_fail "contents after remounts"
echo more >"$MNT/written2" || soft_fail "not writable after remounts"
fs_umount
check_fsck
finish
