#!/bin/bash
# killpriv.sh - set-user-ID and set-group-ID bits are cleared where Linux
# clears them, and a write costs no round trip for security.capability.
#
# The daemon negotiates FUSE_HANDLE_KILLPRIV_V2 (fuse/killpriv.c): the
# kernel stops asking for security.capability before every write(2), and
# the daemon clears the set-id bits itself when the kernel says so (a
# write or truncate by a caller without CAP_FSETID, any chown; a fallocate
# by anyone but root, which carries no flag; set-group-ID without group
# execute only when the caller is outside the file's group).  This test checks both
# halves: the modes after writes, truncates, O_TRUNC opens, O_DIRECT
# writes, fallocates and chowns by an unprivileged user and by root,
# through the kernel at once and from the image after a remount; a file
# capability removed by a write; and the number of GETXATTR requests that
# 1,000 small writes cost (arbor filesystem stats).
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
need_nobody

# open_requests: the O_TRUNC kill then comes with an OPEN (opens.sh)
for mode in "" singlethread open_requests; do
log "serving with ${mode:-a pool of threads}"
fs_mkfs -s 256M
fs_mount ${mode:+-o $mode}
D=$MNT/d
mkdir "$D"
chmod 1777 "$D"

# mk NAME MODE: a root-owned file with some data and exactly MODE
mk() {
	printf 'some data\n' >"$D/$1"
	chmod "$2" "$D/$1"
}
# as_nobody PYTHON-STATEMENT FILE
as_nobody() {
	"${NOBODY[@]}" "$PY" -c "import os, mmap, sys; f = sys.argv[1]; $1" "$2" ||
		soft_fail "as nobody: $1 on $2"
}
as_root() {
	python3 -c "import os, mmap, sys; f = sys.argv[1]; $1" "$2" ||
		soft_fail "as root: $1 on $2"
}
WRITE='fd = os.open(f, os.O_WRONLY | os.O_APPEND); os.write(fd, b"more\n"); os.close(fd)'
TRUNC='os.truncate(f, 3)'
OTRUNC='os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))'
DIRECT='m = mmap.mmap(-1, 4096); m.write(b"x" * 4096); fd = os.open(f, os.O_WRONLY | os.O_DIRECT); os.pwrite(fd, m, 0); os.close(fd)'
FALLOC='fd = os.open(f, os.O_WRONLY); os.posix_fallocate(fd, 0, 65536); os.close(fd)'

EXPECT=$TMP/expect
: >"$EXPECT"
# want NAME MODE: the file's mode must be MODE (octal, permission bits)
want() {
	echo "$1 $2" >>"$EXPECT"
	local m
	m=$(stat -c %a "$D/$1")
	[ "$m" = "$2" ] || soft_fail "$1: mode $m, want $2 (through the kernel)"
}

log "unprivileged writer: set-id bits go"
mk w-suid 6777; as_nobody "$WRITE" "$D/w-suid"; want w-suid 777
# without group execute: gone for a writer outside the file's group
# (Linux 6.2 and later, ext4, tmpfs), kept for one in it
mk w-sgid-nox 2766; as_nobody "$WRITE" "$D/w-sgid-nox"; want w-sgid-nox 766
mk w-sgid-grp 2766; chgrp 65534 "$D/w-sgid-grp"
as_nobody "$WRITE" "$D/w-sgid-grp"; want w-sgid-grp 2766
mk w-sgid 2777; as_nobody "$WRITE" "$D/w-sgid"; want w-sgid 777
mk t-suid 6777; as_nobody "$TRUNC" "$D/t-suid"; want t-suid 777
mk o-suid 6777; as_nobody "$OTRUNC" "$D/o-suid"; want o-suid 777
mk d-suid 6777; as_nobody "$DIRECT" "$D/d-suid"; want d-suid 777
# no kill flag on FALLOCATE: the daemon clears them for a caller not root
mk f-suid 6777; as_nobody "$FALLOC" "$D/f-suid"; want f-suid 777
# a second write after the first cleared the bits, then a new chmod +s:
# the kernel must ask again, not trust what it saw before
mk w2-suid 6777; as_nobody "$WRITE" "$D/w2-suid"; chmod 4777 "$D/w2-suid"
as_nobody "$WRITE" "$D/w2-suid"; want w2-suid 777

log "root (CAP_FSETID) keeps them on write and truncate"
mk r-w 6777; as_root "$WRITE" "$D/r-w"; want r-w 6777
mk r-t 6777; as_root "$TRUNC" "$D/r-t"; want r-t 6777
mk r-o 6777; as_root "$OTRUNC" "$D/r-o"; want r-o 6777
mk r-d 6777; as_root "$DIRECT" "$D/r-d"; want r-d 6777
mk r-f 6777; as_root "$FALLOC" "$D/r-f"; want r-f 6777

log "chown clears them, even by root (sgid only with group execute)"
mk c-suid 6755; chown 65534 "$D/c-suid"; want c-suid 755
mk c-sgid-nox 2745; chown :65534 "$D/c-sgid-nox"; want c-sgid-nox 2745
mk c-dir-none 0755; chown 65534 "$D/c-dir-none"; want c-dir-none 755
mkdir "$D/sdir"; chmod 2755 "$D/sdir"; chown 65534 "$D/sdir"
echo "sdir 2755" >>"$EXPECT"
[ "$(stat -c %a "$D/sdir")" = 2755 ] || soft_fail "sdir: a directory keeps its set-group-ID bit on chown"

log "a file capability goes with a write"
mk cap 0755
# version 2 capability data: CAP_NET_RAW (13) permitted and effective
python3 - "$D/cap" <<'EOF' || fail "setting security.capability"
import os, struct, sys
os.setxattr(sys.argv[1], "security.capability",
            struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0))
EOF
python3 -c 'import os,sys; os.getxattr(sys.argv[1], "security.capability")' "$D/cap" ||
	fail "security.capability did not stick"
as_root "$WRITE" "$D/cap"
if python3 -c 'import os,sys; os.getxattr(sys.argv[1], "security.capability")' "$D/cap" 2>/dev/null; then
	soft_fail "security.capability survived a write"
fi

log "1,000 small writes: no GETXATTR round trip each"
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset"
python3 - "$D/many" <<'EOF' || fail "writes"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(1000):
    os.pwrite(fd, b"z" * 4096, (i * 7919 % 1000) * 4096)
os.close(fd)
EOF
n=$(op_count getxattr) || fail "arbor filesystem stats"
log "GETXATTR requests for 1,000 writes: $n"
[ "$n" -le 10 ] || soft_fail "$n GETXATTR requests for 1,000 writes (want at most 10)"

log "after a remount the image holds the same modes"
fs_remount
while read -r name want_mode; do
	m=$(stat -c %a "$D/$name")
	[ "$m" = "$want_mode" ] || soft_fail "$name: mode $m after remount, want $want_mode"
done <"$EXPECT"
fs_umount
check_fsck
done
finish
