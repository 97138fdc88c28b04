#!/bin/bash
# bigxattr.sh - xattr values up to 64 KiB (XATTR_SIZE_MAX) through the
# mount: values past 16,000 bytes are stored out of line (XATTR_DATA
# pieces, docs/FORMAT.md); they round-trip through a remount, can be
# replaced by smaller and larger ones and removed, 65,537 bytes is E2BIG,
# and fsck finds the image clean.
. "$(dirname "$0")/lib.sh" "$@"

fs_mkfs -s 256M
fs_mount
F=$MNT/f
: >"$F"

# set NAME SIZE SEED / check NAME SIZE SEED: a value that tells sizes and
# seeds apart, through setxattr(2)/getxattr(2)
xa() {
	python3 - "$@" <<'PY'
import os, sys
op, path, name, size, seed = sys.argv[1:6]
size, seed = int(size), int(seed)
val = bytes((i * 7 + seed + i // 251) & 0xff for i in range(size))
if op == "set":
    os.setxattr(path, name, val)
else:
    got = os.getxattr(path, name)
    if got != val:
        sys.exit("%s: %d bytes back, want %d%s" % (name, len(got), size,
                 "" if len(got) != size else " (content differs)"))
PY
}

log "16,001 / 32 KiB / 65,536 bytes"
xa set "$F" user.a 16001 1 || fail "setxattr 16001"
xa set "$F" user.b 32768 2 || fail "setxattr 32768"
xa set "$F" user.c 65536 3 || fail "setxattr 65536"
xa get "$F" user.a 16001 1 || soft_fail "user.a"
xa get "$F" user.b 32768 2 || soft_fail "user.b"
xa get "$F" user.c 65536 3 || soft_fail "user.c"
# the tools too
setfattr -n user.t -v "$(head -c 40000 /dev/zero | tr '\0' A)" "$F" ||
	soft_fail "setfattr of 40,000 bytes"
[ "$(getfattr --absolute-names --only-values -n user.t "$F" | wc -c)" = 40000 ] || soft_fail "getfattr of 40,000 bytes"

log "65,537 bytes: E2BIG"
expect_errno E2BIG "os.setxattr('f', 'user.d', b'x' * 65537)"

fs_remount
log "after a remount"
xa get "$F" user.a 16001 1 || soft_fail "user.a after remount"
xa get "$F" user.b 32768 2 || soft_fail "user.b after remount"
xa get "$F" user.c 65536 3 || soft_fail "user.c after remount"

log "replace with smaller and larger values, remove"
xa set "$F" user.a 65536 4 || soft_fail "user.a larger"
xa set "$F" user.c 10 5 || soft_fail "user.c smaller"
xa set "$F" user.b 50000 6 || soft_fail "user.b larger"
setfattr -x user.t "$F" || soft_fail "removexattr user.t"
fs_remount
xa get "$F" user.a 65536 4 || soft_fail "user.a replaced"
xa get "$F" user.c 10 5 || soft_fail "user.c replaced"
xa get "$F" user.b 50000 6 || soft_fail "user.b replaced"
getfattr -n user.t "$F" >/dev/null 2>&1 && soft_fail "user.t still there"
[ "$(getfattr -d "$F" 2>/dev/null | grep -c '^user\.')" = 3 ] || soft_fail "listxattr: $(getfattr -d "$F" | grep -c '^user\.') names, want 3"

fs_umount
check_fsck
log "a file with large values, unlinked"
fs_mount
xa set "$MNT/g" user.z 65536 7 2>/dev/null || { : >"$MNT/g"; xa set "$MNT/g" user.z 65536 7; }
rm "$MNT/g"
fs_umount
check_fsck
finish
