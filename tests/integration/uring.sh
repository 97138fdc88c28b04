#!/bin/bash
# uring.sh - FUSE over io_uring (fuse/uring.c).
#
# The kernel offers it only when the fuse module's enable_uring parameter
# is on; this test turns it on for its run (and restores it after, in the
# EXIT trap), so it needs a kernel built with CONFIG_FUSE_IO_URING (Linux
# >= 6.14) and skips elsewhere.  It checks that the daemon really serves
# through the rings (arbor filesystem stats: two ring threads per CPU, and
# their request count growing), then uses the mount as a user would: a
# tree copied in and compared, 1 MiB direct writes and reads (the largest
# payloads), a directory of 3,000 names, xattrs up to 16,000 bytes, renames,
# links, truncates, concurrent writers and fsyncs on every CPU; all of it
# again after a remount and under fsck.  -o no_uring and
# -o uring_sched=normal are checked too, a bad value refused, and a kill -9
# of the daemon mid-write loses no fsynced file, and a busy loop on a CPU
# does not starve the requests made there.  Finally the model-based
# and POSIX tests (fsx, posixdiff, fsync; killpriv and opens at full
# scale) run again with the rings on.
. "$(dirname "$0")/lib.sh" "$@"

PARAM=/sys/module/fuse/parameters/enable_uring
[ -e "$PARAM" ] || skip "no FUSE over io_uring in this kernel ($PARAM)"
OLD_PARAM=$(cat "$PARAM")
test_cleanup() {
	echo "$OLD_PARAM" >"$PARAM" 2>/dev/null || true
}
echo 1 >"$PARAM" 2>/dev/null || skip "cannot write $PARAM"

ARBOR=$BUILD/cli/arbor
# the kernel has a queue per possible CPU; the daemon two threads each
NCPU=$(python3 -c '
n = 0
for part in open("/sys/devices/system/cpu/possible").read().strip().split(","):
    a, _, b = part.partition("-")
    n += int(b or a) - int(a) + 1
print(n)')

# uring FIELD: threads or requests of the mount's io_uring statistics
uring() {
	"$ARBOR" filesystem stats --json "$MNT" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["io_uring"][sys.argv[1]])' "$1"
}
# wait_threads N: the ring threads register once INIT is answered
wait_threads() {
	local t=100
	while [ "$(uring threads)" != "$1" ]; do
		t=$((t - 1))
		[ $t -gt 0 ] || fail "$(uring threads) ring threads, not $1"
		sleep 0.1
	done
}

fs_mkfs -s 1G
fs_mount
wait_threads $((2 * NCPU))
log "$(uring threads) ring threads for $NCPU CPUs"
before=$(uring requests)

log "a tree copied in"
mkdir "$MNT/tree"
tar c -C "$SRCDIR" lib tests | tar x -C "$MNT/tree"
diff -r "$SRCDIR/lib" "$MNT/tree/lib" >/dev/null || fail "copied tree differs"
after=$(uring requests)
files=$(find "$MNT/tree" | wc -l)
# each new name costs at least a LOOKUP and a CREATE or MKDIR
[ $((after - before)) -ge $((2 * files)) ] ||
	fail "only $((after - before)) requests through the rings for $files new names"
log "$((after - before)) requests through the rings for $files names"

log "1 MiB direct writes and reads"
head -c $((32 * 1024 * 1024)) /dev/urandom >"$TMP/big"
dd if="$TMP/big" of="$MNT/big" bs=1M oflag=direct status=none ||
	fail "direct 1 MiB writes failed"
dd if="$MNT/big" of="$TMP/big.back" bs=1M iflag=direct status=none ||
	fail "direct 1 MiB reads failed"
cmp "$TMP/big" "$TMP/big.back" || fail "1 MiB direct I/O read back differs"

log "a directory of 3,000 names, xattrs, renames, links, truncates"
python3 - "$MNT" <<'EOF' || fail "metadata operations through the rings"
import os, sys
m = sys.argv[1]
d = os.path.join(m, "many")
os.mkdir(d)
for i in range(3000):
    with open(os.path.join(d, "a-rather-long-name-%05d" % i), "w") as f:
        f.write("x" * (i % 97))
names = sorted(os.listdir(d))
assert len(names) == 3000, len(names)
assert names[0] == "a-rather-long-name-00000"
for i in range(0, 3000, 7):
    os.rename(os.path.join(d, "a-rather-long-name-%05d" % i),
              os.path.join(d, "renamed-%05d" % i))
assert len(os.listdir(d)) == 3000
f = os.path.join(m, "x")
open(f, "w").write("data")
for n, size in (("user.small", 10), ("user.page", 4096), ("user.big", 16000)):
    v = os.urandom(size)
    os.setxattr(f, n, v)
    assert os.getxattr(f, n) == v, n
assert sorted(os.listxattr(f)) == ["user.big", "user.page", "user.small"]
os.link(f, os.path.join(m, "x-link"))
os.symlink("x", os.path.join(m, "x-sym"))
assert os.readlink(os.path.join(m, "x-sym")) == "x"
assert os.stat(f).st_nlink == 2
os.truncate(f, 1 << 20)
assert os.stat(f).st_size == 1 << 20
with open(f, "rb") as fh:
    assert fh.read(4) == b"data" and fh.read(10) == bytes(10)
os.truncate(f, 2)
assert open(f).read() == "da"
try:
    os.rmdir(d)
    raise SystemExit("rmdir of a full directory succeeded")
except OSError as e:
    assert e.errno == 39, e
EOF

log "writers and fsyncs on every CPU at once"
writers=()
for c in $(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))'); do
	for w in 1 2; do
		taskset -c "$c" python3 - "$MNT/w$c-$w" <<'EOF' &
import os, sys
os.mkdir(sys.argv[1])
for i in range(150):
    p = os.path.join(sys.argv[1], "f%d" % i)
    with open(p, "wb") as f:
        f.write(bytes([i % 251]) * (100 + i * 37))
        if i % 5 == 0:
            os.fsync(f.fileno())
EOF
		writers+=($!)
	done
done
wait_all=0
for job in "${writers[@]}"; do
	wait "$job" || wait_all=1
done
[ $wait_all = 0 ] || fail "a concurrent writer failed"
manifest "$MNT" >"$TMP/m1"

log "remount: the same tree"
fs_remount
wait_threads $((2 * NCPU))
manifest "$MNT" >"$TMP/m2"
same_manifest "$TMP/m1" "$TMP/m2"
cmp "$TMP/big" "$MNT/big" || fail "big file differs after remount"
diff -r "$SRCDIR/lib" "$MNT/tree/lib" >/dev/null || fail "tree differs after remount"
fs_umount
check_fsck

log "-o no_uring: everything through /dev/fuse"
fs_mount -o no_uring
ls -R "$MNT" >/dev/null
cat "$MNT/tree/lib"/*/*.c >/dev/null
[ "$(uring threads)" = 0 ] || fail "ring threads with -o no_uring"
[ "$(uring requests)" = 0 ] || fail "requests through rings with -o no_uring"
fs_umount

log "-o uring_sched=normal"
fs_mount -o uring_sched=normal
wait_threads $((2 * NCPU))
diff -r "$SRCDIR/lib" "$MNT/tree/lib" >/dev/null || fail "tree differs (uring_sched=normal)"
fs_umount
if "$DAEMON" -f -o uring_sched=fast "$IMG" "$MNT" 2>"$TMP/err"; then
	force_unmount "$MNT"
	fail "uring_sched=fast accepted"
fi
grep -q "uring_sched=" "$TMP/err" || fail "no message for uring_sched=fast: $(cat "$TMP/err")"

log "kill -9 of the daemon mid-write"
fs_mount
wait_threads $((2 * NCPU))
python3 - "$MNT/crash" "$TMP/done" <<'EOF' &
import os, sys
os.mkdir(sys.argv[1])
with open(sys.argv[2], "w") as log:
    for i in range(100000):
        p = os.path.join(sys.argv[1], "f%d" % i)
        try:
            with open(p, "wb") as f:
                f.write(str(i).encode() * 100)
                os.fsync(f.fileno())
            fd = os.open(sys.argv[1], os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        except OSError:
            break
        log.write("%d\n" % i)
        log.flush()
EOF
writer=$!
sleep 2
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
force_unmount "$MNT"
wait "$writer" 2>/dev/null || true
n=$(wc -l <"$TMP/done")
[ "$n" -gt 0 ] || fail "no file was fsynced before the kill"
fs_mount
python3 - "$MNT/crash" "$TMP/done" <<'EOF' || fail "fsynced files lost in the kill"
import os, sys
for line in open(sys.argv[2]):
    i = int(line)
    with open(os.path.join(sys.argv[1], "f%d" % i), "rb") as f:
        assert f.read() == str(i).encode() * 100, i
EOF
log "$n fsynced files survived"
fs_umount
check_fsck

log "a busy loop beside a program on CPU 0: no starving ring thread"
# The daemon runs in the foreground, in this shell's scheduling group, so a
# busy loop on CPU 0 leaves a SCHED_IDLE ring thread of CPU 0 no time at
# all, until the guard (fuse/uring.c) moves it to normal priority: without
# the guard the 1,000 creates below took about 170 s (a request of CPU 0
# waited 166 ms on average), with it about 1 s.
fs_mount
wait_threads $((2 * NCPU))
taskset -c 0 sh -c 'while :; do :; done' &
busy=$!
st=0
timeout 60 taskset -c 0 python3 - "$MNT/busy" <<'EOF' || st=$?
import os, sys
os.mkdir(sys.argv[1])
for i in range(1000):
    p = os.path.join(sys.argv[1], "f%d" % i)
    with open(p, "w") as f:
        f.write("x")
    os.unlink(p)
EOF
kill "$busy"
wait "$busy" 2>/dev/null || true
[ $st = 0 ] || fail "1,000 creates beside a busy loop: status $st (124: starved for 60 s)"
log "ring threads found starving and moved: $(uring starved)"
fs_umount

# the other tests, with the rings on (at ci scale the three that cover
# the most request kinds; killpriv and opens also at full scale)
others="fsx posixdiff fsync"
[ "$SCALE" = full ] && others="$others killpriv opens"
for t in $others; do
	log "$t.sh over io_uring"
	st=0
	"$SRCDIR/tests/integration/$t.sh" "$BUILD" >"$TMP/$t.log" 2>&1 || st=$?
	if [ $st -ne 0 ] && [ $st -ne 77 ]; then
		tail -n 30 "$TMP/$t.log" >&2
		soft_fail "$t.sh failed over io_uring"
	fi
done
finish
