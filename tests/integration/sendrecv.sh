#!/bin/bash
# sendrecv.sh - arbor send | arbor receive between two mounted images:
# a full stream, then incremental ones (renames, a swap, a rename cycle,
# a directory moved and its old parent removed, a file replaced by a
# directory, hard links added and removed, xattrs, sparse files, FIFOs,
# devices, symlinks) through a pipe; after each, the received snapshot
# must have the manifest (an independent walker: types, modes, owners,
# mtimes, sizes, data, link groups, xattrs) and the digest of its source.
# A truncated and a corrupted stream leave nothing in the target; a
# stream whose parent is missing is refused naming it; --image works on
# an unmounted image.  Both images survive a remount and fsck -n.
# Version 2: a reflinked file and a copied range travel once and stay
# shared on the receiving side, a 4 KiB change of a big file makes a
# small incremental stream, --proto 1 still works, --extract of clones;
# compressed extents (chattr +c) go as stored and stay compressed on a
# receiver without -o compress.  A cut stream (a file cut in half, a
# pipe broken) keeps a partial receive that survives a remount and fsck
# and that send --resume TOKEN | receive --resume finishes (also on an
# unmounted image); --discard gives one up.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
IMGB=$TMP/b.img
MNTB=$TMP/mntb
B_PID=
mkdir -p "$MNTB"

test_cleanup() {
	force_unmount "$MNTB"
	if [ -n "$B_PID" ]; then
		wait_pid_gone "$B_PID" 30 || kill -TERM "$B_PID" 2>/dev/null
		wait "$B_PID" 2>/dev/null
	fi
}

mount_b() {
	"$DAEMON" -f "$IMGB" "$MNTB" >>"$TMP/daemon-b.log" 2>&1 &
	B_PID=$!
	local t=300
	until mountpoint -q "$MNTB"; do
		kill -0 "$B_PID" 2>/dev/null || fail "second daemon exited"
		t=$((t - 1))
		[ $t -gt 0 ] || fail "second mount: not mounted after 30 s"
		sleep 0.1
	done
}

umount_b() {
	sync
	unmount_retry "$MNTB"
	wait_pid_gone "$B_PID" 120 || fail "second daemon still running"
	local st=0
	wait "$B_PID" || st=$?
	B_PID=
	[ $st -eq 0 ] || fail "second daemon exited with status $st"
	if grep -q "ERROR: AddressSanitizer\|runtime error:" "$TMP/daemon-b.log"; then
		head -n 40 "$TMP/daemon-b.log" >&2
		fail "sanitizer report in the second daemon's log"
	fi
}

digest() {
	"$ARBOR" subvolume digest "$1" | cut -d' ' -f1
}

# same_tree SRC DST [portable]: manifests and digests agree (and the
# portable digests)
same_tree() {
	# a directory's nlink counts the links of nested subvolumes, which a
	# stream does not carry (their snapshot copies are stale links)
	manifest "$1" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.src"
	manifest "$2" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.dst"
	diff -u "$TMP/m.src" "$TMP/m.dst" >&2 || fail "$2 differs from $1"
	local a b
	a=$(digest "$1")
	b=$(digest "$2")
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "digest of $2 ($b) is not that of $1 ($a)"
	[ "${3:-}" = portable ] || return 0
	# the portable digest (every byte, no inode numbers) too
	a=$("$ARBOR" subvolume digest --portable "$1" | cut -d' ' -f1)
	b=$("$ARBOR" subvolume digest --portable "$2" | cut -d' ' -f1)
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "portable digest of $2 ($b) is not that of $1 ($a)"
}

fs_mkfs
# B keeps every received copy (at full scale several of 300 MB and more)
fs_mkfs_b() {
	rm -f "$IMGB"
	"$MKFS" -q -s "$([ "$SCALE" = full ] && echo 4G || echo 1G)" "$IMGB" ||
		fail "mkfs B"
}
fs_mkfs_b
fs_mount
mount_b

SEED=${ARBOR_TEST_SEED:-$RANDOM}
log "seed $SEED (ARBOR_TEST_SEED to repeat)"
N=$([ "$SCALE" = full ] && echo 2000 || echo 200)
STEPS=$([ "$SCALE" = full ] && echo 20 || echo 4)

# a first tree: every kind of inode
python3 - "$MNT/data" "$SEED" "$N" <<'EOF'
import os, random, sys
root, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
os.makedirs(root)
dirs = [root]
files = []
for i in range(n):
    d = r.choice(dirs)
    k = r.randrange(10)
    p = os.path.join(d, "n%d" % i)
    if k < 2:
        os.mkdir(p); dirs.append(p)
    elif k == 2 and files:
        os.link(r.choice(files), p)
    elif k == 3:
        os.symlink("../t%d" % i, p)
    elif k == 4:
        os.mkfifo(p)
    elif k == 5:
        os.mknod(p, 0o20600, os.makedev(1, 7))
    else:
        with open(p, "wb") as f:
            if k == 6:   # sparse: holes at start, middle, end
                f.seek(70000); f.write(os.urandom(5000))
                f.seek(300000); f.write(os.urandom(100))
                f.truncate(1 << 20)
            elif k == 7:
                pass
            else:
                f.write(os.urandom(r.randrange(1, 60000)))
        if r.randrange(3) == 0:
            os.setxattr(p, "user.k", b"v" * r.randrange(1, 200))
        files.append(p)
EOF
# a big sparse file, mostly holes (past 4 GiB at full scale: the
# manifest reads every byte of it)
BIG=$([ "$SCALE" = full ] && echo $(((4 << 30) + 4096)) || echo $((64 << 20)))
python3 -c "
f = open('$MNT/data/big', 'wb'); f.seek($BIG); f.write(b'end'); f.close()"

"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/s0" >/dev/null || fail "snapshot s0"
log "full send through a pipe"
"$ARBOR" send "$MNT/s0" | "$ARBOR" receive "$MNTB" >/dev/null ||
	fail "send | receive of s0"
[ -d "$MNTB/s0/data" ] || fail "received s0 has no data directory"
same_tree "$MNT/s0" "$MNTB/s0"
"$ARBOR" subvolume show "$MNTB/s0" | grep -qi "received uuid" ||
	fail "received s0 shows no received UUID"
python3 -c "open('$MNTB/s0/data/new','w')" 2>/dev/null && fail "received snapshot is writable"

# incremental chain
prev=s0
for i in $(seq 1 "$STEPS"); do
	python3 - "$MNT/data" "$SEED$i" <<'EOF'
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
def walk():
    ds, fs = [], []
    for dp, dn, fn in os.walk(root):
        ds.append(dp)
        fs += [os.path.join(dp, x) for x in fn]
    return ds, fs
for j in range(30):
    ds, fs = walk()
    k = r.randrange(10)
    try:
        if k == 0 and len(fs) > 1:            # swap two names
            a, b = r.sample(fs, 2)
            os.rename(a, a + ".t"); os.rename(b, a); os.rename(a + ".t", b)
        elif k == 1 and len(fs) > 2:          # rename cycle a->b->c->a
            a, b, c = r.sample(fs, 3)
            os.rename(c, c + ".t"); os.rename(b, c); os.rename(a, b); os.rename(c + ".t", a)
        elif k == 2 and len(ds) > 2:          # a directory into a new one
            d = r.choice(ds[1:])
            nd = os.path.join(r.choice(ds), "nd%d_%d" % (seed, j))
            os.mkdir(nd)
            os.rename(d, os.path.join(nd, "moved"))
        elif k == 3 and fs:                   # file replaced by a directory
            f = r.choice(fs)
            os.unlink(f); os.mkdir(f)
        elif k == 4 and fs:                   # hard link across directories
            os.link(r.choice(fs), os.path.join(r.choice(ds), "l%d_%d" % (seed, j)))
        elif k == 5 and fs:                   # delete
            os.unlink(r.choice(fs))
        elif k == 6 and fs:                   # rewrite in the middle
            f = r.choice(fs)
            if os.path.isfile(f) and not os.path.islink(f):
                with open(f, "r+b") as h:
                    h.seek(r.randrange(100000)); h.write(os.urandom(3000))
        elif k == 7 and fs:                   # xattr and mode
            f = r.choice(fs)
            if os.path.isfile(f) and not os.path.islink(f):
                os.setxattr(f, "user.x", os.urandom(20)); os.chmod(f, 0o640)
        elif k == 8:                          # subtree moved, old parent removed
            p = os.path.join(root, "p%d_%d" % (seed, j))
            os.makedirs(os.path.join(p, "x"))
            open(os.path.join(p, "x", "f"), "w").write("x")
            os.rename(os.path.join(p, "x"), os.path.join(r.choice(ds), "x%d_%d" % (seed, j)))
            os.rmdir(p)
        else:
            open(os.path.join(r.choice(ds), "new%d_%d" % (seed, j)), "w").write("n" * j)
    except OSError:
        pass
EOF
	"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/s$i" >/dev/null || fail "snapshot s$i"
	"$ARBOR" send -p "$MNT/$prev" "$MNT/s$i" | "$ARBOR" receive "$MNTB" >/dev/null ||
		fail "incremental send | receive of s$i"
	same_tree "$MNT/s$i" "$MNTB/s$i"
	prev=s$i
done
log "$STEPS incremental streams received"
"$ARBOR" receive --list-parents "$MNTB" >"$TMP/parents" || fail "receive --list-parents"
grep -q " $prev .*received: " "$TMP/parents" || fail "--list-parents: $(cat "$TMP/parents")"

# an incremental stream is much smaller than a full one
full=$("$ARBOR" send --estimate "$MNT/$prev" | cut -d' ' -f1)
inc=$("$ARBOR" send --estimate -p "$MNT/s$((STEPS - 1))" "$MNT/$prev" | cut -d' ' -f1)
log "full stream $full bytes, last incremental $inc bytes"
[ "$inc" -lt "$full" ] || fail "incremental stream ($inc) not below full ($full)"

# broken streams leave nothing
"$ARBOR" send -f "$TMP/full.stream" "$MNT/$prev" || fail "send -f"
mkdir "$MNTB/t"
len=$(stat -c %s "$TMP/full.stream")
head -c $((len / 2)) "$TMP/full.stream" >"$TMP/cut.stream"
st=0
"$ARBOR" receive -f "$TMP/cut.stream" "$MNTB/t" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "truncated stream: exit $st"
grep -q "byte" "$TMP/err" || fail "truncated stream: message names no offset: $(cat "$TMP/err")"
[ -z "$(ls -A "$MNTB/t")" ] || fail "a truncated stream left $(ls "$MNTB/t")"
# what arrived is kept for a resume, invisibly (below); give it up
tok=$(sed -n 's/.*arbor send --resume \([^ ]*\) .*/\1/p' "$TMP/err" | head -n 1)
[ -n "$tok" ] || fail "a truncated stream printed no resume token: $(cat "$TMP/err")"
"$ARBOR" receive --discard "$tok" "$MNTB" >/dev/null || fail "receive --discard"
cp "$TMP/full.stream" "$TMP/bad.stream"
printf '\x55' | dd of="$TMP/bad.stream" bs=1 seek=$((len / 3)) conv=notrunc status=none
st=0
"$ARBOR" receive -f "$TMP/bad.stream" "$MNTB/t" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "corrupt stream: exit $st"
grep -q "command" "$TMP/err" || fail "corrupt stream: $(cat "$TMP/err")"
[ -z "$(ls -A "$MNTB/t")" ] || fail "a corrupt stream left $(ls "$MNTB/t")"
log "truncated and corrupt streams refused: $(head -c 200 "$TMP/err")"
# the intact one goes through, and --dump reads it
"$ARBOR" receive -f "$TMP/full.stream" "$MNTB/t" >/dev/null || fail "receive -f"
same_tree "$MNT/$prev" "$MNTB/t/$prev"
"$ARBOR" receive --dump -f "$TMP/full.stream" | grep -q "^end " || fail "receive --dump"
# --extract: plain files on the host's filesystem, same manifest
mkdir "$TMP/x"
"$ARBOR" receive --extract -f "$TMP/cut.stream" "$TMP/x" 2>"$TMP/err" && fail "extract of a cut stream"
[ ! -e "$TMP/x/$prev" ] && [ -d "$TMP/x/.arbor-extract-$prev" ] ||
	fail "a cut --extract: $(ls -a "$TMP/x")"
rm -rf "$TMP/x/.arbor-extract-$prev"
"$ARBOR" receive --extract -f "$TMP/full.stream" "$TMP/x" >/dev/null || fail "receive --extract"
[ "$(ls -A "$TMP/x")" = "$prev" ] || fail "--extract left $(ls -A "$TMP/x")"
manifest "$MNT/$prev" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.src"
manifest "$TMP/x/$prev" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.dst"
diff -u "$TMP/m.src" "$TMP/m.dst" >&2 || fail "--extract differs from the source"

# a missing parent is named
"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/lonely" >/dev/null || fail "snapshot lonely"
"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/lonely2" >/dev/null || fail "snapshot lonely2"
st=0
"$ARBOR" send -p "$MNT/lonely" "$MNT/lonely2" | "$ARBOR" receive "$MNTB" 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "parent" "$TMP/err" || fail "missing parent: exit $st, $(cat "$TMP/err")"
[ ! -e "$MNTB/lonely2" ] || fail "a refused stream left lonely2"

dA=$(digest "$MNT/$prev")
fs_umount
umount_b
check_fsck
"$FSCK" -n "$IMGB" || fail "fsck.arborfs -n of the receiving image"

# on images: send --image | receive --image
log "send --image | receive --image"
rm -f "$TMP/c.img"
"$MKFS" -q "$TMP/c.img" || fail "mkfs C"
"$ARBOR" send --image "$IMG" "/$prev" | "$ARBOR" receive --image "$TMP/c.img" / >/dev/null ||
	fail "send --image | receive --image"
dC=$("$ARBOR" subvolume digest --image "$TMP/c.img" "/$prev" | cut -d' ' -f1)
[ "$dA" = "$dC" ] || fail "digest on image C ($dC) is not the source's ($dA)"
"$ARBOR" receive --list-parents --image "$TMP/c.img" / | grep -q " $prev .*received: " ||
	fail "receive --list-parents --image"
"$FSCK" -n "$TMP/c.img" || fail "fsck.arborfs -n of image C"

fs_mount
mount_b
same_tree "$MNT/$prev" "$MNTB/$prev" portable

# version 2: shared data travels once and stays shared; an incremental
# stream carries the changed range of a big file, not the file
udata() {
	"$ARBOR" filesystem sync "$1" >/dev/null
	"$ARBOR" filesystem usage --json "$1" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["data"])'
}
log "reflinked data: sent once, shared on the receiving side"
BIG=$([ "$SCALE" = full ] && echo 256 || echo 24)
BIG=$((BIG << 20))
mkdir "$MNT/sh"
head -c "$BIG" /dev/urandom >"$MNT/sh/big"
cp "$MNT/sh/big" "$MNT/sh/copy" # copy_file_range: shared
python3 - "$MNT/sh/big" "$MNT/sh/part" <<'PY' || fail "copy_file_range of a part"
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o644)
n = os.path.getsize(sys.argv[1]) // 2
off_in, off_out = n // 2 // 4096 * 4096, 1 << 20
while n:
    k = os.copy_file_range(src, dst, n, off_in, off_out)
    assert k > 0
    n, off_in, off_out = n - k, off_in + k, off_out + k
PY
"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/r1" >/dev/null || fail "snapshot r1"
"$ARBOR" send --estimate "$MNT/r1" >"$TMP/est" || fail "send --estimate r1"
log "full stream of r1: $(cat "$TMP/est")"
before=$(udata "$MNTB")
"$ARBOR" send "$MNT/r1" | "$ARBOR" receive "$MNTB" >/dev/null || fail "send | receive r1"
after=$(udata "$MNTB")
same_tree "$MNT/r1" "$MNTB/r1"
cmp "$MNTB/r1/sh/big" "$MNTB/r1/sh/copy" || fail "received copy differs"
log "receiving r1 took $((after - before)) bytes of data for $((BIG * 5 / 2)) bytes of files"
[ $((after - before)) -lt $((BIG + BIG / 4)) ] ||
	fail "the shared data was stored more than once on the receiving side"
# 4 KiB rewritten in the middle of big; another reflink of it
dd if=/dev/urandom of="$MNT/sh/big" bs=4096 count=1 seek=$((BIG / 8192)) conv=notrunc status=none
cp "$MNT/sh/copy" "$MNT/sh/copy2"
"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/r2" >/dev/null || fail "snapshot r2"
read -r bytes _ _ _ data _ <<<"$("$ARBOR" send --estimate -p "$MNT/r1" "$MNT/r2")"
log "incremental r1 -> r2: $bytes stream bytes, $data of data"
[ "$bytes" -lt $((1 << 20)) ] || fail "incremental stream of a 4 KiB change is $bytes bytes"
before=$(udata "$MNTB")
"$ARBOR" send -p "$MNT/r1" "$MNT/r2" | "$ARBOR" receive "$MNTB" >/dev/null ||
	fail "send -p r1 r2 | receive"
after=$(udata "$MNTB")
same_tree "$MNT/r2" "$MNTB/r2"
[ $((after - before)) -lt $((4 << 20)) ] ||
	fail "the incremental receive took $((after - before)) bytes of data"
# version 1 for an older receiver: whole files, the same tree
"$ARBOR" send --proto 1 -p "$MNT/r1" "$MNT/r2" >"$TMP/v1.stream" || fail "send --proto 1"
"$ARBOR" receive --dump -f "$TMP/v1.stream" >"$TMP/dump" || fail "receive --dump of a version 1 stream"
head -1 "$TMP/dump" | grep -q "version 1" || fail "--proto 1 wrote no version 1 stream"
[ "$(stat -c %s "$TMP/v1.stream")" -gt "$BIG" ] || fail "a version 1 stream should hold the whole file"
"$ARBOR" subvolume delete "$MNTB/r2" >/dev/null || fail "delete r2 on B"
"$ARBOR" receive -f "$TMP/v1.stream" "$MNTB" >/dev/null || fail "receive a version 1 stream"
same_tree "$MNT/r2" "$MNTB/r2"
# version 2 (ends with the portable digest), for a receiver before 3
"$ARBOR" send --proto 2 -p "$MNT/r1" "$MNT/r2" >"$TMP/v2.stream" || fail "send --proto 2"
"$ARBOR" receive --dump -f "$TMP/v2.stream" >"$TMP/dump" || fail "receive --dump of a version 2 stream"
head -1 "$TMP/dump" | grep -q "version 2" || fail "--proto 2 wrote no version 2 stream"
"$ARBOR" subvolume delete "$MNTB/r2" >/dev/null || fail "delete r2 on B"
"$ARBOR" receive -f "$TMP/v2.stream" "$MNTB" >/dev/null || fail "receive a version 2 stream"
same_tree "$MNT/r2" "$MNTB/r2"
st=0
"$ARBOR" send --proto 4 "$MNT/r2" >/dev/null 2>"$TMP/err" || st=$?
[ $st = 2 ] && grep -q "proto" "$TMP/err" || fail "send --proto 4: exit $st"
# the extract of a full stream with clones: plain files, same bytes
"$ARBOR" send -f "$TMP/r2.stream" "$MNT/r2" || fail "send -f r2"
"$ARBOR" receive --dump -f "$TMP/r2.stream" >"$TMP/dump" || fail "receive --dump r2"
grep -q "^clone " "$TMP/dump" || fail "no clone command in the full stream of r2"
mkdir "$TMP/x2"
"$ARBOR" receive --extract -f "$TMP/r2.stream" "$TMP/x2" >/dev/null || fail "receive --extract r2"
for f in big copy copy2 part; do
	cmp "$MNT/r2/sh/$f" "$TMP/x2/r2/sh/$f" || fail "extracted $f differs"
done
rm -rf "$TMP/x2"

# compressed extents travel as stored and stay compressed on a receiver
# mounted without -o compress
log "compressed data: sent as stored, stored so on the receiving side"
zdu() {
	"$ARBOR" filesystem du --json "$1" |
		python3 -c 'import json,sys; p=json.load(sys.stdin)["paths"][0]; print(p["bytes"], p["stored"], p["compressed_bytes"])'
}
mkdir "$MNT/z"
chattr +c "$MNT/z" || fail "chattr +c"
find /usr/include -name '*.h' -size -200k | sed -n 1,400p | xargs cat >"$MNT/z/headers" 2>/dev/null || fail "cat of headers"
cp -a /usr/include/linux/b*.h "$MNT/z/" 2>/dev/null
"$ARBOR" filesystem sync "$MNT" >/dev/null
read -r zb zs zc <<<"$(zdu "$MNT/z")"
log "source: $zb bytes stored in $zs ($zc in compressed extents)"
[ "$zc" -gt 0 ] || fail "chattr +c wrote no compressed extent"
"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/r3" >/dev/null || fail "snapshot r3"
"$ARBOR" send --estimate -p "$MNT/r2" "$MNT/r3" >"$TMP/est" || fail "send --estimate r3"
log "incremental r2 -> r3: $(cat "$TMP/est")"
read -r bytes _ _ _ _ _ _ _ _ _ zsent _ <<<"$(cat "$TMP/est")"
[ "$zsent" -gt 0 ] || fail "no compressed extent sent as stored"
[ "$bytes" -lt $((zb * 3 / 4)) ] || fail "the stream ($bytes) is not below the bytes ($zb)"
"$ARBOR" send -p "$MNT/r2" "$MNT/r3" | "$ARBOR" receive "$MNTB" >/dev/null || fail "send -p r2 r3 | receive"
same_tree "$MNT/r3" "$MNTB/r3" portable
read -r db ds dc <<<"$(zdu "$MNTB/r3/z")"
log "received: $db bytes stored in $ds ($dc in compressed extents)"
# (bytes: du counts a tail item of a received compressed extent up to
# its sector, and small files inline or not: about the same, not equal)
[ "$dc" -gt $((zc * 9 / 10)) ] && [ "$ds" -lt $((zb * 3 / 4)) ] ||
	fail "the received copy is not stored compressed: $db bytes in $ds"
"$ARBOR" send -f "$TMP/r3.stream" "$MNT/r3" || fail "send -f r3"
mkdir "$TMP/x3"
"$ARBOR" receive --extract -f "$TMP/r3.stream" "$TMP/x3" >/dev/null || fail "receive --extract r3"
diff -r "$MNT/r3/z" "$TMP/x3/r3/z" >/dev/null || fail "extracted compressed files differ"
rm -rf "$TMP/x3"

# a cut stream keeps what arrived, invisibly, across a remount and fsck;
# the rest from its token finishes it
log "a cut stream: kept as a partial receive, resumed from its token"
token_of() { sed -n 's/.*arbor send --resume \([^ ]*\) .*/\1/p' "$1" | head -n 1; }
len=$(stat -c %s "$TMP/r3.stream")
mkdir "$MNTB/rs"
st=0
head -c $((len / 2)) "$TMP/r3.stream" | "$ARBOR" receive "$MNTB/rs" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "a cut stream: exit $st"
tok=$(token_of "$TMP/err")
[ -n "$tok" ] || fail "no resume token: $(cat "$TMP/err")"
[ -z "$(ls -A "$MNTB/rs")" ] || fail "a cut stream left $(ls "$MNTB/rs")"
"$ARBOR" subvolume list "$MNTB" >"$TMP/list" || fail "subvolume list"
grep "part " "$TMP/list" | grep -qF "$tok" ||
	fail "subvolume list does not show the partial receive: $("$ARBOR" subvolume list "$MNTB")"
umount_b
"$FSCK" -n "$IMGB" || fail "fsck.arborfs -n with a partial receive kept"
mount_b
"$ARBOR" subvolume list --json "$MNTB" >"$TMP/list" || fail "subvolume list --json"
grep -qF "\"resume_token\": \"$tok\"" "$TMP/list" ||
	fail "the partial receive did not survive a remount"
# --resume on the receiving side refuses a whole stream
st=0
"$ARBOR" receive --resume -f "$TMP/r3.stream" "$MNTB/rs" 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "not a resumed stream" "$TMP/err" || fail "receive --resume of a whole stream: exit $st"
st=0
"$ARBOR" send --resume "$tok" "$MNT/r2" >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "another snapshot" "$TMP/err" || fail "a token of r3 for r2: exit $st, $(cat "$TMP/err")"
"$ARBOR" send --resume "$tok" --estimate "$MNT/r3" >"$TMP/est" || fail "send --resume --estimate"
log "the rest: $(cat "$TMP/est") (the whole: $len bytes)"
"$ARBOR" send --resume "$tok" "$MNT/r3" | "$ARBOR" receive --resume "$MNTB/rs" >/dev/null ||
	fail "send --resume | receive --resume"
same_tree "$MNT/r3" "$MNTB/rs/r3"
"$ARBOR" subvolume list "$MNTB" >"$TMP/list" || fail "subvolume list"
grep -q "part " "$TMP/list" && fail "the partial receive stayed after its resume"
# the sender killed halfway through a pipe, then given up
mkdir "$MNTB/rs2"
st=0
"$ARBOR" send "$MNT/r3" | head -c $((len / 3)) | "$ARBOR" receive "$MNTB/rs2" 2>"$TMP/err" || st=$?
tok=$(token_of "$TMP/err")
[ -n "$tok" ] || fail "no resume token after a broken pipe: $(cat "$TMP/err")"
"$ARBOR" receive --discard "$tok" "$MNTB" >/dev/null || fail "receive --discard"
"$ARBOR" subvolume list "$MNTB" >"$TMP/list" || fail "subvolume list"
grep -q "part " "$TMP/list" && fail "a discarded partial receive is still listed"
st=0
"$ARBOR" receive --discard "$tok" "$MNTB" 2>/dev/null || st=$?
[ $st = 1 ] || fail "a second --discard of the same token: exit $st"
# the receiving daemon killed mid-stream: its last checkpoint (every
# 1 MiB of stream here) is a partial receive after the next mount
log "kill -9 of the receiving daemon mid-stream, then resume"
umount_b
export ARBOR_RECV_CHECKPOINT_BYTES=1048576
mount_b
unset ARBOR_RECV_CHECKPOINT_BYTES
mkdir "$MNTB/rs3"
python3 - "$TMP/r3.stream" <<'PY' | "$ARBOR" receive "$MNTB/rs3" >/dev/null 2>"$TMP/err" &
import os, sys, time
# a slow sender: 256 KiB every 50 ms (about 5 MB/s), so that the kill
# lands mid-stream
with open(sys.argv[1], "rb") as f:
    while True:
        b = f.read(1 << 18)
        if not b:
            break
        try:
            sys.stdout.buffer.write(b)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            break
        time.sleep(0.05)
PY
RCV_PID=$!
# kill once a checkpoint was committed (the partial shows in the list)
for _ in $(seq 200); do
	"$ARBOR" subvolume list "$MNTB" >"$TMP/list" 2>/dev/null || true
	grep -q "part " "$TMP/list" && break
	sleep 0.05
done
grep -q "part " "$TMP/list" || fail "no checkpoint of the running receive within 10 s"
kill -KILL "$B_PID"
wait "$RCV_PID" 2>/dev/null || true
wait "$B_PID" 2>/dev/null || true
B_PID=
force_unmount "$MNTB"
mount_b
"$ARBOR" subvolume list "$MNTB" >"$TMP/list" || fail "subvolume list after the kill"
tok=$(sed -n 's/.*(partial receive, resume token \([^)]*\)).*/\1/p' "$TMP/list" | head -n 1)
[ -n "$tok" ] || fail "no partial receive after kill -9 of the receiver: $(cat "$TMP/list")"
log "kept by a checkpoint: $tok"
"$ARBOR" send --resume "$tok" "$MNT/r3" | "$ARBOR" receive --resume "$MNTB/rs3" >/dev/null ||
	fail "resume after kill -9"
same_tree "$MNT/r3" "$MNTB/rs3/r3"
fs_umount
umount_b
# on an unmounted image
log "a cut receive --image, resumed with --image"
st=0
head -c $((len * 2 / 3)) "$TMP/r3.stream" | "$ARBOR" receive --image "$IMGB" /rs2 2>"$TMP/err" || st=$?
tok=$(token_of "$TMP/err")
[ $st = 1 ] && [ -n "$tok" ] || fail "receive --image of a cut stream: exit $st, $(cat "$TMP/err")"
"$FSCK" -n "$IMGB" || fail "fsck.arborfs -n of the image with a partial receive"
"$ARBOR" send --resume "$tok" --image "$IMG" /r3 | "$ARBOR" receive --resume --image "$IMGB" /rs2 >/dev/null ||
	fail "resume into an image"
dA=$("$ARBOR" subvolume digest --image "$IMG" /r3 | cut -d' ' -f1)
dB=$("$ARBOR" subvolume digest --image "$IMGB" /rs2/r3 | cut -d' ' -f1)
[ "$dA" = "$dB" ] || fail "resumed into an image: digest $dB, want $dA"
fs_mount
mount_b
fs_umount
umount_b
check_fsck
"$FSCK" -n "$IMGB" || fail "fsck.arborfs -n of the receiving image"
finish
