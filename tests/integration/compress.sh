#!/bin/bash
# compress.sh - transparent zlib compression through a real mount.
#
#  a. -o compress=zlib: a copy of /usr/include (part of it at ci scale)
#     reads back the same, stores in less than half its bytes (stats), and
#     after a remount and fsck still reads the same;
#  b. files of every size around the sector and 128 KiB chunk boundaries,
#     of zeros, text, random and mixed data, written whole and in odd
#     pieces, then edited as users edit (overwrite inside a compressed
#     chunk, truncate into one, punch a hole, fallocate, append, reflink
#     with cp, a snapshot): equal to a reference copy on the host after
#     each step, after a remount and with compress off;
#  c. attributes: chattr +c on a directory (inherited by new files, on a
#     mount without -o compress), arbor property, lsattr after a remount;
#     a file whose start does not compress gets NOCOMP (lsattr m) and
#     stays plain; compress-force keeps trying;
#  d. kill -9 of the daemon while compressed files are written: the
#     fsynced ones read back whole, fsck clean;
#  e. one stored byte of a compressed chunk flipped on the image: reads of
#     that chunk fail with EIO, the file's other chunks still read,
#     scrub and fsck name the file;
#  f. the random exerciser (fsx.py) with compressible data and a random
#     compression level, remounts included.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
command -v chattr >/dev/null && command -v lsattr >/dev/null ||
	install_pkg chattr e2fsprogs || skip "chattr/lsattr (e2fsprogs) missing"
REF=$TMP/ref
mkdir "$REF"

# zstat FIELD: compressed extents / ram_bytes / stored_bytes since mount
zstat() {
	"$ARBOR" filesystem stats --json "$MNT" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["compressed"][sys.argv[1]])' "$1"
}
# commit: write everything and commit (sync(1) only writes pages back)
commit() {
	sync
	"$ARBOR" filesystem sync "$MNT" >/dev/null
}
attrs() {
	lsattr -d "$1" | cut -d' ' -f1 | tr -d -- -
}
# same DIR WHEN: $MNT/DIR holds the files of $REF/DIR, byte for byte
same() {
	python3 - "$REF/$1" "$MNT/$1" <<'EOF' || fail "$MNT/$1 differs from the reference ($2)"
import os, sys
ref, mnt = sys.argv[1], sys.argv[2]
bad = []
for d, dirs, files in os.walk(ref):
    for n in files:
        a = os.path.join(d, n)
        b = os.path.join(mnt, os.path.relpath(a, ref))
        if os.path.islink(a):
            ok = os.path.islink(b) and os.readlink(a) == os.readlink(b)
        else:
            with open(a, "rb") as fa, open(b, "rb") as fb:
                ok = fa.read() == fb.read()
        if not ok:
            bad.append(os.path.relpath(a, ref))
if bad:
    sys.exit("%d files differ: %s" % (len(bad), " ".join(bad[:10])))
EOF
}
# data FILE SIZE KIND: SIZE bytes of zero|text|random|mixed into FILE
data() {
	python3 - "$@" <<'EOF'
import os, random, sys
path, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(n * 31 + len(kind))
table = bytes(b"arbor fs\n"[i % 9] for i in range(256))
def text(k):
    return r.getrandbits(8 * k).to_bytes(k, "little").translate(table) if k else b""
if kind == "zero":
    b = bytes(n)
elif kind == "text":
    b = text(n)
elif kind == "random":
    b = os.urandom(n)
else:  # mixed: 40 KiB pieces of each
    out, k = [], 0
    while k < n:
        m = min(40960, n - k)
        out.append([bytes(m), text(m), os.urandom(m)][(k // 40960) % 3])
        k += m
    b = b"".join(out)
with open(path, "wb") as f:
    f.write(b)
EOF
}

fs_mkfs -s 2G

log "a. a tree of headers with -o compress=zlib"
fs_mount -o compress=zlib
if [ "$SCALE" = full ]; then src=/usr/include; else src=/usr/include/linux; fi
[ -d "$src" ] || src=/usr/share
cp -a "$src" "$REF/inc"
cp -a "$src" "$MNT/inc"
commit
same inc "copied in"
ext=$(zstat extents)
ram=$(zstat ram_bytes)
stored=$(zstat stored_bytes)
log "$ext compressed extents: $ram bytes stored in $stored"
[ "$ext" -gt 0 ] || fail "no compressed extent written for $src"
[ $((stored * 2)) -lt "$ram" ] || fail "headers stored in $stored of $ram bytes: less than 2:1"
fs_remount -o compress=zlib
same inc "after a remount"

log "b. sizes around sector and chunk boundaries, four kinds of data"
mkdir "$REF/sz" "$MNT/sz"
sizes="1 4095 4096 4097 8191 8192 12288 131071 131072 131073 135168 262144 266240 1048577"
[ "$SCALE" = full ] && sizes="$sizes 3000000 8388608"
for s in $sizes; do
	for k in zero text random mixed; do
		data "$REF/sz/$k.$s" "$s" "$k"
		cp "$REF/sz/$k.$s" "$MNT/sz/$k.$s"
	done
done
# written in odd pieces: 1000-byte writes (no piece compressed before
# the lock: the flush does it)
python3 - "$REF/sz" "$MNT/sz" <<'EOF'
import os, sys
ref, mnt = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(ref)):
    if not name.startswith("text.") and not name.startswith("mixed."):
        continue
    b = open(os.path.join(ref, name), "rb").read()
    with open(os.path.join(mnt, "odd." + name), "wb") as f:
        for i in range(0, len(b), 1000):
            f.write(b[i:i + 1000])
    with open(os.path.join(ref, "odd." + name), "wb") as f:
        f.write(b)
EOF
commit
same sz "written"
fs_remount -o compress=zlib
same sz "after a remount"

log "b. edits of compressed files"
# edit FILE: the same edits on both copies
python3 - "$REF/sz" "$MNT/sz" <<'EOF'
import fcntl, os, sys
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
for root in sys.argv[1:]:
    def p(n):
        return os.path.join(root, n)
    # overwrite inside a chunk, across a chunk boundary
    for name, off, b in (("text.262144", 5000, b"X" * 3000),
                         ("mixed.1048577", 131000, b"Y" * 9000),
                         ("zero.266240", 4096, b"text " * 1000)):
        fd = os.open(p(name), os.O_RDWR)
        os.pwrite(fd, b, off)
        os.close(fd)
    # truncate into a compressed chunk, and grow again
    os.truncate(p("text.131072"), 70001)
    os.truncate(p("mixed.262144"), 300000)
    # append
    with open(p("text.135168"), "ab") as f:
        f.write(b"appended\n" * 5000)
    # small files stored inline, compressed: cut, zeroed inside, grown
    # past a sector
    os.truncate(p("text.4095"), 3001)
    fd = os.open(p("text.4096"), os.O_RDWR)
    os.pwrite(fd, bytes(100), 1000)
    os.close(fd)
    with open(p("zero.4095"), "ab") as f:
        f.write(b"grown past one sector\n" * 10)
    # punch a hole in the middle of a chunk (the reference: zeros)
    fd = os.open(p("text.1048577"), os.O_RDWR)
    if root == sys.argv[1]:
        os.pwrite(fd, bytes(20000), 200000)
    else:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int,
                                   ctypes.c_long, ctypes.c_long]
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE,
                          200000, 20000):
            raise OSError(ctypes.get_errno(), "punch")
        os.posix_fallocate(fd, 2000000, 100000)
    if root == sys.argv[1]:
        os.truncate(p("text.1048577"), 2100000)
    os.close(fd)
EOF
cp "$MNT/sz/mixed.1048577" "$MNT/sz/clone.mixed"
cp "$REF/sz/mixed.1048577" "$REF/sz/clone.mixed"
commit
same sz "edited"
"$ARBOR" subvolume create "$MNT/sv" >/dev/null
cp -a "$MNT/sz" "$MNT/sv/sz"
"$ARBOR" subvolume snapshot -r "$MNT/sv" "$MNT/snap" >/dev/null
printf 'changed after the snapshot\n' | dd of="$MNT/sv/sz/text.262144" bs=1 seek=70000 conv=notrunc status=none
cmp "$MNT/snap/sz/text.262144" "$REF/sz/text.262144" || fail "the snapshot's copy changed"
fs_remount
same sz "remounted without -o compress"

log "c. chattr +c, inherited, on a mount without -o compress"
mkdir "$MNT/c" "$REF/c"
chattr +c "$MNT/c"
data "$REF/c/t" 600000 text
cp "$REF/c/t" "$MNT/c/t"
mkdir "$MNT/c/sub"
[ "$(attrs "$MNT/c/t")" = c ] || fail "c/t: lsattr '$(attrs "$MNT/c/t")', want c (inherited)"
[ "$(attrs "$MNT/c/sub")" = c ] || fail "c/sub did not inherit c"
data "$REF/plain" 600000 text
cp "$REF/plain" "$MNT/plain"
commit
ext=$(zstat extents)
[ "$ext" -ge 4 ] && [ "$ext" -le 6 ] ||
	fail "$ext compressed extents for one 600000-byte +c file and one plain one, want 5"
[ "$("$ARBOR" property get "$MNT/c/t" compression)" = compression=zlib ] ||
	fail "property get c/t: $("$ARBOR" property get "$MNT/c/t" compression)"
"$ARBOR" property set "$MNT/plain" compression none
[ "$(attrs "$MNT/plain")" = m ] || fail "property none: lsattr '$(attrs "$MNT/plain")'"
"$ARBOR" property set "$MNT/plain" compression ""
[ -z "$(attrs "$MNT/plain")" ] || fail "property \"\": lsattr '$(attrs "$MNT/plain")'"
expect_errno EINVAL "import fcntl, struct; fd = os.open('c/t', os.O_RDONLY); fcntl.ioctl(fd, 0x40086602, struct.pack('i', 0x404))"
st=0
"$ARBOR" property set "$MNT/plain" compression lz4 2>/dev/null || st=$?
[ $st = 2 ] || fail "property set compression lz4: exit $st, want 2"
fs_remount -o compress=zlib
[ "$(attrs "$MNT/c/t")" = c ] || fail "c lost by the remount"
same c "after a remount"

log "c. a file whose start does not compress gets NOCOMP"
data "$REF/rnd" 1000000 random
cp "$REF/rnd" "$MNT/rnd"
commit
[ "$(attrs "$MNT/rnd")" = m ] || fail "rnd: lsattr '$(attrs "$MNT/rnd")', want m"
[ "$(zstat extents)" = 0 ] || fail "random data compressed: $(zstat extents) extents"
cat "$REF/c/t" >>"$MNT/rnd"
cat "$REF/c/t" >>"$REF/rnd"
commit
[ "$(zstat extents)" = 0 ] || fail "text appended to a NOCOMP file was compressed"
cmp "$REF/rnd" "$MNT/rnd" || fail "rnd differs"
fs_remount -o compress-force=zlib:9
data "$REF/rnd2" 400000 random
cat "$REF/c/t" >>"$REF/rnd2"
cp "$REF/rnd2" "$MNT/rnd2"
commit
[ -z "$(attrs "$MNT/rnd2")" ] || fail "compress-force marked rnd2 '$(attrs "$MNT/rnd2")'"
[ "$(zstat extents)" -ge 4 ] || fail "compress-force did not compress the text after random data"
cmp "$REF/rnd2" "$MNT/rnd2" || fail "rnd2 differs"
fs_umount
st=0
"$DAEMON" -o compress=lz4 "$IMG" "$MNT" 2>"$TMP/bad.err" || st=$?
[ $st != 0 ] && grep -q "bad compress=lz4" "$TMP/bad.err" ||
	fail "-o compress=lz4: status $st, $(cat "$TMP/bad.err")"
mountpoint -q "$MNT" && fail "mounted with compress=lz4"
check_fsck

log "d. kill -9 while compressed files are written"
fs_mount -o compress=zlib
mkdir "$MNT/k" "$REF/k"
for i in 1 2 3 4 5 6; do
	data "$REF/k/f$i" $((i * 150000)) mixed
done
python3 - "$REF/k" "$MNT/k" <<'EOF'
import os, sys
ref, mnt = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(ref)):
    b = open(os.path.join(ref, name), "rb").read()
    fd = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b)
    os.fsync(fd)
    os.close(fd)
# unsynced ones, being written when the daemon dies
for i in range(20):
    with open(os.path.join(mnt, "u%d" % i), "wb") as f:
        f.write(b"unsynced " * 20000)
EOF
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
force_unmount "$MNT"
check_fsck
fs_mount -o compress=zlib
for i in 1 2 3 4 5 6; do
	cmp "$REF/k/f$i" "$MNT/k/f$i" || fail "fsynced k/f$i differs after kill -9"
done
fs_umount

log "e. a damaged compressed chunk"
fs_mount -o compress=zlib
data "$MNT/bad" 524288 text
cp "$MNT/bad" "$REF/bad"
fs_umount
ino=$("$ARBOR" dump --image "$IMG" 5 | sed -n "s/.*-> \([0-9]*\) 'bad'$/\1/p" | head -n1)
[ -n "$ino" ] || fail "bad not found in the dump"
line=$("$ARBOR" dump --image "$IMG" 5 | grep "^  ($ino EXTENT_DATA 131072) " || true)
grep -q " zlib$" <<<"$line" || fail "bad's second chunk is not compressed: $line"
disk=$(sed -n 's/.* reg disk \([0-9]*\)+.*/\1/p' <<<"$line")
log "bad is inode $ino, its second chunk stored at $disk; flipping a byte"
python3 - "$IMG" $((disk + 100)) <<'EOF'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x5a]))
EOF
st=0
out=$("$ARBOR" scrub --image "$IMG" 2>&1) || st=$?
[ $st = 3 ] || fail "scrub exit status $st after damage, want 3: $out"
grep -q "data checksum mismatch: /bad (inode $ino" <<<"$out" || fail "scrub did not name /bad: $out"
st=0
out=$("$FSCK" -n "$IMG" 2>&1) || st=$?
[ $st != 0 ] && grep -q "/bad" <<<"$out" || fail "fsck did not report /bad (status $st): $out"
fs_mount -o compress=zlib
# no readahead: each read asks for its own pages only
python3 - "$MNT/bad" "$REF/bad" <<'EOF' || fail "reads of bad around its damaged chunk"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
ref = open(sys.argv[2], "rb").read()
for off in (0, 262144, 393216, 139264):
    try:
        b = os.pread(fd, 4096 if off == 139264 else 131072, off)
    except OSError as e:
        if off == 139264 and e.errno == errno.EIO:
            continue
        sys.exit("read at %d: %s" % (off, e))
    if off == 139264:
        sys.exit("the damaged chunk read without an error")
    if b != ref[off:off + len(b)] or len(b) != 131072:
        sys.exit("chunk at %d differs" % off)
EOF
rm "$MNT/bad"
fs_umount
check_fsck

log "f. the random exerciser with compression"
if [ "$SCALE" = full ]; then ops=20000; else ops=800; fi
seed=${FSX_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
level=$((seed % 9 + 1))
fs_mkfs -s 1G
mkdir "$TMP/fsxref"
st=0
python3 "$SRCDIR/tests/integration/fsx.py" --daemon "$DAEMON" --image "$IMG" \
	--mnt "$MNT" --ref "$TMP/fsxref" --seed "$seed" --ops "$ops" \
	--data mixed --daemon-opt=-o --daemon-opt="compress=zlib:$level" || st=$?
[ $st = 0 ] || fail "fsx.py with compress=zlib:$level failed (seed $seed)"
DAEMON_LOG=$TMP/fsx-daemon.log check_daemon_log
check_fsck
finish
