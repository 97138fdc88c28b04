#!/bin/bash
# opens.sh - opening files and directories costs no FUSE request, and
# everything an open must do still happens.
#
# The daemon declines the first OPEN and OPENDIR with ENOSYS; the kernel
# (5.1 and later) then opens files and directories by itself, with
# FOPEN_KEEP_CACHE (and FOPEN_CACHE_DIR), and sends no RELEASE or
# RELEASEDIR.  -o open_requests keeps the requests.  In both modes this
# test counts the requests that reading 60 files and listing 7
# directories cost (arbor filesystem stats), and checks what depends on
# opens: a file unlinked (or renamed over) while open stays readable until the
# last close and is freed then; O_TRUNC truncates (and clears set-id bits
# for an unprivileged caller); a file created 0444 is writable through the
# descriptor that created it and not openable for writing afterwards by
# its unprivileged owner; listings show creates, renames and unlinks at
# once although the kernel caches them; shared mmap writes reach the
# image.  Everything is checked again after a remount, and by fsck.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
need_nobody

for mode in "" open_requests; do
log "mounted with ${mode:-the defaults}"
fs_mkfs -s 256M
fs_mount ${mode:+-o $mode}
D=$MNT/d
mkdir "$D"
chmod 1777 "$D"
for i in 0 1 2 3 4 5; do
	mkdir "$D/dir$i"
	for j in $(seq 0 9); do
		printf 'file %s of dir %s\n' "$j" "$i" >"$D/dir$i/f$j"
	done
done
# one open, one listing and one create first: the ENOSYS answers come
# before the reset
cat "$D/dir0/f0" >/dev/null
: >"$D/first"
ls "$D" >/dev/null

"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset"
n=$(find "$D" -type f -exec cat {} + | wc -l)
[ "$n" = 60 ] || fail "read $n lines of 60 files, want 60"
open=$(op_count open) release=$(op_count release)
opendir=$(op_count opendir) releasedir=$(op_count releasedir)
log "60 files read, 7 directories listed: OPEN $open, RELEASE $release, OPENDIR $opendir, RELEASEDIR $releasedir"
if [ -z "$mode" ]; then
	[ "$open" = 0 ] && [ "$release" = 0 ] && [ "$opendir" = 0 ] && [ "$releasedir" = 0 ] ||
		soft_fail "opens cost requests (want none)"
else
	[ "$open" -ge 60 ] && [ "$release" -ge 60 ] && [ "$opendir" -ge 7 ] && [ "$releasedir" -ge 7 ] ||
		soft_fail "-o open_requests: too few open requests (want at least 60 files and 7 directories)"
fi

# creating: declined CREATE, so a MKNOD and no RELEASE per created file
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset"
for i in $(seq 0 19); do printf 'new %s\n' "$i" >"$D/dir0/new$i"; done
create=$(op_count create) mknod=$(op_count mknod) release=$(op_count release)
log "20 files created and written: CREATE $create, MKNOD $mknod, RELEASE $release"
if [ -z "$mode" ]; then
	[ "$create" = 0 ] && [ "$mknod" = 20 ] && [ "$release" = 0 ] ||
		soft_fail "creates cost a CREATE or a RELEASE (want 20 MKNOD only)"
else
	[ "$create" = 20 ] && [ "$release" -ge 20 ] ||
		soft_fail "-o open_requests: want 20 CREATE and their RELEASE"
fi
for i in $(seq 0 19); do
	[ "$(cat "$D/dir0/new$i")" = "new $i" ] || soft_fail "created file new$i reads '$(cat "$D/dir0/new$i")'"
done

log "a file unlinked or renamed over while open lives until the last close, then is freed"
python3 - "$D/orphan" "$MNT" <<'EOF' || soft_fail "unlinked open file"
import os, sys, time
p, mnt = sys.argv[1], sys.argv[2]
def used():
    # fsync reaches the daemon (sync(2) does not): pending frees commit
    fd = os.open(mnt, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    s = os.statvfs(mnt)
    return (s.f_blocks - s.f_bfree) * s.f_frsize
def closed_and_freed(fd, base, what):
    """Close fd, a file with 4 MiB and no name; used space must come
    back to base: the kernel's FORGET, after which the daemon frees the
    file, comes soon after the close."""
    held = used()
    assert held - base >= 4 << 20, "%s holds %d bytes, want 4 MiB" % (what, held - base)
    os.close(fd)
    for _ in range(100):
        now = used()
        if now - base < 1 << 20:
            break
        time.sleep(0.05)
    print("used: %d before, %d with %s open, %d after its close" % (base, held, what, now))
    assert now - base < 1 << 20, "the space of %s was not freed" % what
u0 = used()
data = os.urandom(4 << 20)
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, data)
os.fsync(fd)
os.close(fd)
fd = os.open(p, os.O_RDWR)      # opened without a request
os.unlink(p)
assert not os.path.exists(p)
assert os.pread(fd, len(data), 0) == data, "data gone after unlink"
os.pwrite(fd, b"after unlink", 100)
os.fsync(fd)
assert os.pread(fd, 12, 100) == b"after unlink", "write after unlink lost"
assert os.fstat(fd).st_nlink == 0
closed_and_freed(fd, u0, "the unlinked file")

# the same for a file replaced by a rename while open
victim, other = p + "-victim", p + "-other"
with open(victim, "wb") as f:
    f.write(data)
with open(other, "wb") as f:
    f.write(b"the new one")
fd = os.open(victim, os.O_RDONLY)
os.rename(other, victim)
assert open(victim, "rb").read() == b"the new one"
assert os.pread(fd, len(data), 0) == data, "replaced file unreadable through its fd"
closed_and_freed(fd, u0, "the replaced file")
os.unlink(victim)
EOF

log "O_TRUNC truncates, and clears set-id bits for an unprivileged caller"
printf 'long contents here\n' >"$D/trunc"
python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_TRUNC); os.write(fd, b"new"); os.close(fd)' "$D/trunc"
[ "$(cat "$D/trunc")" = new ] || soft_fail "O_TRUNC: contents '$(cat "$D/trunc")', want 'new'"
printf 'data\n' >"$D/suid"
chmod 6777 "$D/suid"
"${NOBODY[@]}" "$PY" -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY|os.O_TRUNC))' "$D/suid" ||
	soft_fail "O_TRUNC as nobody"
[ "$(stat -c %a:%s "$D/suid")" = 777:0 ] ||
	soft_fail "O_TRUNC as nobody: mode:size $(stat -c %a:%s "$D/suid"), want 777:0"

log "a file created 0444 is writable through its creating descriptor only"
"${NOBODY[@]}" "$PY" - "$D/ro" <<'EOF' || soft_fail "0444 create as nobody"
import errno, os, sys
p = sys.argv[1]
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
os.write(fd, b"written through the creating fd\n")
os.close(fd)
try:
    os.open(p, os.O_WRONLY)
    sys.exit("reopened a 0444 file for writing as its owner")
except OSError as e:
    if e.errno != errno.EACCES:
        raise
assert open(p, "rb").read() == b"written through the creating fd\n"
EOF

log "cached listings see creates, renames and unlinks at once"
python3 - "$D/dir5" <<'EOF' || soft_fail "listing after changes"
import os, sys
d = sys.argv[1]
def names():
    return sorted(os.listdir(d))
base = names()
assert names() == base                      # a second listing, cached
open(os.path.join(d, "new"), "w").close()
assert names() == sorted(base + ["new"]), names()
os.rename(os.path.join(d, "new"), os.path.join(d, "renamed"))
assert names() == sorted(base + ["renamed"]), names()
os.unlink(os.path.join(d, "renamed"))
os.unlink(os.path.join(d, "f0"))
want = sorted(set(base) - {"f0"})
assert names() == want, names()
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
os.close(fd)
try:
    os.open(os.path.join(d, "f1"), os.O_RDONLY | os.O_DIRECTORY)
    sys.exit("opened a file as a directory")
except NotADirectoryError:
    pass
EOF

log "shared mmap writes reach the image"
python3 - "$D/mm" <<'EOF' || soft_fail "mmap"
import mmap, os, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 3 * 4096)
os.close(fd)
fd = os.open(p, os.O_RDWR)
m = mmap.mmap(fd, 3 * 4096)
m[4096:4096 + 14] = b"mapped writing"
m.flush()
m.close()
os.close(fd)
EOF

fs_remount ${mode:+-o $mode}
[ "$(cat "$D/trunc")" = new ] || soft_fail "after remount: trunc holds '$(cat "$D/trunc")'"
[ "$(stat -c %a:%s "$D/suid")" = 777:0 ] || soft_fail "after remount: suid is $(stat -c %a:%s "$D/suid")"
[ "$(cat "$D/ro")" = "written through the creating fd" ] || soft_fail "after remount: ro holds '$(cat "$D/ro")'"
[ "$(stat -c %a "$D/ro")" = 444 ] || soft_fail "after remount: ro has mode $(stat -c %a "$D/ro")"
[ ! -e "$D/orphan" ] || soft_fail "after remount: the orphan has a name"
[ "$(ls "$D/dir5" | tr '\n' ' ')" = "f1 f2 f3 f4 f5 f6 f7 f8 f9 " ] ||
	soft_fail "after remount: dir5 lists $(ls "$D/dir5" | tr '\n' ' ')"
python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); assert len(d) == 3*4096 and d[4096:4110] == b"mapped writing"' "$D/mm" ||
	soft_fail "after remount: the mmap write is missing"
fs_umount
check_fsck
done
finish
