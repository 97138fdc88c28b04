#!/bin/bash
# whiteout.sh - renameat2(RENAME_WHITEOUT): the file moves and a whiteout
# (character device 0:0, mode 0, owned by the caller) takes its old name,
# across directories and with RENAME_NOREPLACE; with RENAME_EXCHANGE it is
# EINVAL; it survives a remount and fsck is clean.  Then an overlayfs
# with its upper and work directories on arborfs (lower on tmpfs): the
# kernel must find RENAME_WHITEOUT supported, and lower files and a lower
# directory deleted through the overlay stay deleted (an opaque directory
# made over one hides the lower content) after remounting both.  Without
# RENAME_WHITEOUT the kernel refuses arborfs as upper ("upper fs missing
# required features": FUSE counts as remote, for which it is strict).
. "$(dirname "$0")/lib.sh" "$@"

fs_mkfs
fs_mount

log "renameat2 RENAME_WHITEOUT"
python3 - "$MNT" <<'EOF' || fail "RENAME_WHITEOUT"
import ctypes, errno, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, NOREPLACE, EXCHANGE, WHITEOUT = -100, 1, 2, 4
def rename2(a, b, flags):
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), a)
def is_whiteout(p):
    st = os.lstat(p)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0 and \
        stat.S_IMODE(st.st_mode) == 0 and st.st_uid == os.getuid()
os.chdir(sys.argv[1])
bad = []
with open("a", "w") as f:
    f.write("file a")
os.mkdir("d")
os.mkdir("sub")
with open("sub/inner", "w") as f:
    f.write("inner")
# to another directory
rename2("a", "d/a2", WHITEOUT)
if not is_whiteout("a"):
    bad.append("a: no whiteout after the rename")
if open("d/a2").read() != "file a":
    bad.append("d/a2: content lost")
# a directory, in the same directory, with NOREPLACE
rename2("sub", "sub2", WHITEOUT | NOREPLACE)
if not is_whiteout("sub") or open("sub2/inner").read() != "inner":
    bad.append("sub -> sub2 with a whiteout")
# over an existing file: it is replaced
with open("b", "w") as f:
    f.write("b")
with open("c", "w") as f:
    f.write("c")
rename2("b", "c", WHITEOUT)
if not is_whiteout("b") or open("c").read() != "b":
    bad.append("b over c with a whiteout")
# NOREPLACE still refuses, and leaves no whiteout
try:
    rename2("c", "d/a2", WHITEOUT | NOREPLACE)
    bad.append("NOREPLACE|WHITEOUT over an existing name succeeded")
except OSError as e:
    if e.errno != errno.EEXIST:
        bad.append("NOREPLACE|WHITEOUT: %s" % e)
if not os.path.isfile("c"):
    bad.append("c gone after a refused rename")
# with EXCHANGE: EINVAL
try:
    rename2("c", "d/a2", WHITEOUT | EXCHANGE)
    bad.append("EXCHANGE|WHITEOUT succeeded")
except OSError as e:
    if e.errno != errno.EINVAL:
        bad.append("EXCHANGE|WHITEOUT: %s, want EINVAL" % e)
# the whiteout is an ordinary name: it can be replaced and removed
with open("a.new", "w") as f:
    pass
os.rename("a.new", "a")
os.unlink("sub")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
# the lookup that the kernel did not cache (a new dentry): from the daemon
fs_remount
python3 - "$MNT" <<'EOF' || fail "after remount"
import os, stat, sys
os.chdir(sys.argv[1])
st = os.lstat("b")
assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0 and st.st_mode & 0o7777 == 0, oct(st.st_mode)
assert os.path.isfile("a") and not os.path.exists("sub")
assert open("d/a2").read() == "file a" and open("sub2/inner").read() == "inner"
EOF

log "overlayfs with arborfs as upper"
modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || { fs_umount; check_fsck; skip "no overlayfs in this kernel"; }
LOW=$TMP/low
OVL=$TMP/ovl
mkdir -p "$LOW" "$OVL" "$MNT/up" "$MNT/work"
mount -t tmpfs tmpfs "$LOW" || fail "tmpfs"
test_cleanup() {
	umount "$OVL" 2>/dev/null
	umount "$LOW" 2>/dev/null
}
echo lower >"$LOW/lf"
echo keep >"$LOW/keep"
mkdir "$LOW/ld"
echo x >"$LOW/ld/x"
ovl_mount() {
	mount -t overlay overlay \
		-o "lowerdir=$LOW,upperdir=$MNT/up,workdir=$MNT/work" "$OVL"
}
# what the kernel says about the upper filesystem at this mount
marker="arborfs-whiteout-test-$$-$RANDOM"
echo "$marker" >/dev/kmsg 2>/dev/null || true
ovl_mount || fail "overlay mount with arborfs as upper refused: $(dmesg | tail -n 3)"
if dmesg 2>/dev/null | grep -q "$marker"; then
	msgs=$(dmesg | sed -n "/$marker/,\$p" | grep overlayfs || true)
	log "kernel: ${msgs:-nothing}"
	! grep -q "RENAME_WHITEOUT" <<<"$msgs" ||
		fail "overlayfs finds no RENAME_WHITEOUT on arborfs: $msgs"
fi
rm "$OVL/lf" || fail "rm of a lower file"
rm -r "$OVL/ld" || fail "rm -r of a lower directory"
mkdir "$OVL/ld" || fail "mkdir over a deleted lower directory"
echo new >"$OVL/ld/new" || fail "a file in the opaque directory"
[ -c "$MNT/up/lf" ] || fail "no whiteout for lf in the upper directory"
umount "$OVL"
fs_remount
ovl_mount || fail "overlay mount again"
[ ! -e "$OVL/lf" ] || fail "lf is back after the remount"
[ "$(cat "$OVL/keep")" = keep ] || fail "keep lost"
[ "$(ls "$OVL/ld")" = new ] || fail "ld shows $(ls "$OVL/ld" | tr '\n' ' '), want only new"
umount "$OVL"
fs_umount
check_fsck
finish
