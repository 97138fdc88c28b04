#!/bin/bash
# posixdiff.sh - arborfs answers POSIX operations as the kernel's tmpfs
# does.
#
# posixdiff.py runs a fixed script of about 140 operations (set-group-ID
# directories, chmod/chown/utime by owners and others, the sticky bit,
# name and symlink limits, open flags, renames with RENAME_NOREPLACE and
# RENAME_EXCHANGE, link counts, which timestamps move, holes and large
# offsets, xattr flags and limits, POSIX ACLs: default ACL inheritance,
# named-user entries and the mask, minimal and invalid ACLs), as root and
# as unprivileged users,
# and prints what a user sees for each: the errno or "ok", modes, owners,
# link counts, sizes, contents.  It runs once on a tmpfs and once on a
# fresh arborfs mount (-o dev, as tmpfs allows device nodes); the two
# outputs must be identical.  The tree must then survive a remount
# unchanged (manifest) and pass fsck.
. "$(dirname "$0")/lib.sh" "$@"

REF=$TMP/ref
mkdir -p "$REF"
test_cleanup() {
	mountpoint -q "$REF" && umount "$REF"
}
mount -t tmpfs -o mode=755,size=64M tmpfs "$REF" || skip "cannot mount a tmpfs"
# the reference must know POSIX ACLs (CONFIG_TMPFS_POSIX_ACL) and user
# xattrs (Linux 6.6) for its answers to mean anything
python3 - "$REF" <<'EOF' || skip "this kernel's tmpfs lacks POSIX ACLs or user xattrs"
import os, struct, sys
d = os.path.join(sys.argv[1], "probe")
open(d, "w").close()
os.setxattr(d, "user.probe", b"1")
# u::rw-, u:65534:rw-, g::rw-, m::rw-, o::rw- (entries in tag order)
os.setxattr(d, "system.posix_acl_access", struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", t, 6, q) for t, q in
    ((1, 0xFFFFFFFF), (2, 65534), (4, 0xFFFFFFFF), (16, 0xFFFFFFFF), (32, 0xFFFFFFFF))))
os.unlink(d)
EOF
log "reference run on tmpfs"
python3 "$SRCDIR/tests/integration/posixdiff.py" "$REF" >"$TMP/ref.out" ||
	fail "posixdiff.py failed on tmpfs"
# (retried: under load a child of the run may hold it a moment longer)
for _ in $(seq 60); do umount "$REF" 2>/dev/null && break; sleep 0.5; done
mountpoint -q "$REF" && fail "cannot unmount the tmpfs reference $REF"

fs_mkfs -s 256M
fs_mount -o dev
chmod 755 "$MNT"
log "the same on arborfs"
python3 "$SRCDIR/tests/integration/posixdiff.py" "$MNT" >"$TMP/arb.out" ||
	fail "posixdiff.py failed on arborfs"
log "$(wc -l <"$TMP/ref.out") results compared"
if ! diff -u "$TMP/ref.out" "$TMP/arb.out" >"$TMP/diff"; then
	cat "$TMP/diff" >&2
	soft_fail "arborfs differs from tmpfs (- tmpfs, + arborfs)"
fi
[ "$(wc -l <"$TMP/ref.out")" -ge 100 ] || soft_fail "only $(wc -l <"$TMP/ref.out") results"

manifest "$MNT" >"$TMP/before"
fs_remount -o dev
manifest "$MNT" >"$TMP/after"
if ! diff -u "$TMP/before" "$TMP/after" >&2; then
	soft_fail "the tree changed across a remount"
fi
fs_umount
check_fsck
finish
