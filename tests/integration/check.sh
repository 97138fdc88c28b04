#!/bin/bash
# check.sh - `arbor check PATH`: the checker of fsck.arborfs on a mounted
# filesystem, against the generation committed when it starts, while a
# writer keeps creating, overwriting, renaming and deleting files (and the
# daemon commits every second).  The check reports clean, twice; the
# generation moved on meanwhile; --status shows the last result; a user
# without privilege may read the status but not start a check; a path
# outside arborfs is refused; the unmounted image is clean (fsck -n).
# Unmounting while a check runs cancels it (the daemon exits cleanly).
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"

# the build's arbor, where nobody can reach it (lib.sh)
ARBOR_NOBODY=$(nobody_exe "$ARBOR")
WRITER_PID=
test_cleanup() {
	if [ -n "$WRITER_PID" ]; then
		kill "$WRITER_PID" 2>/dev/null
		wait "$WRITER_PID" 2>/dev/null
	fi
}

fs_mkfs -s 512M
fs_mount -o commit=1
log "populate"
cp -a "$SRCDIR/lib" "$MNT/lib"
mkdir "$MNT/many"
python3 -c '
import sys
for i in range(2000):
    open("%s/many/file-%05d" % (sys.argv[1], i), "w").write("y" * (i * 7 % 5000))
' "$MNT"
head -c 80000000 /dev/urandom >"$MNT/big"

# writer: until $TMP/stop exists, churn files (each round fsyncs one)
touch "$TMP/go"
python3 - "$MNT" "$TMP/stop" >"$TMP/writer.log" 2>&1 <<'PY' &
import os, random, sys
mnt, stop = sys.argv[1], sys.argv[2]
d = os.path.join(mnt, "w")
os.makedirs(d, exist_ok=True)
rnd = random.Random(7)
rounds = 0
while not os.path.exists(stop):
    i = rnd.randrange(300)
    p = os.path.join(d, "f%d" % i)
    op = rnd.randrange(5)
    if op == 0 and os.path.exists(p):
        os.unlink(p)
    elif op == 1 and os.path.exists(p):
        os.rename(p, os.path.join(d, "f%d" % rnd.randrange(300)))
    else:
        with open(p, "wb") as f:
            f.write(os.urandom(rnd.randrange(1, 200000)))
            if rounds % 20 == 0:
                f.flush()
                os.fsync(f.fileno())
    if rounds % 50 == 0:
        # rewrite part of the big file: its old extents are freed
        with open(os.path.join(mnt, "big"), "r+b") as f:
            f.seek(rnd.randrange(79000000))
            f.write(os.urandom(rnd.randrange(4096, 1000000)))
    rounds += 1
print("writer rounds", rounds)
PY
WRITER_PID=$!
sleep 1

gen0=$("$ARBOR" filesystem generation "$MNT" | sed -n 's/^generation \([0-9]*\).*/\1/p')
log "arbor check while the writer runs (generation $gen0 before)"
st=0
"$ARBOR" check "$MNT" >"$TMP/check1" 2>&1 || st=$?
cat "$TMP/check1"
[ $st = 0 ] || fail "arbor check: exit $st, want 0"
grep -q ": clean, [0-9]* nodes" "$TMP/check1" || fail "arbor check: no clean summary"
gen1=$(sed -n 's/.*: generation \([0-9]*\): clean.*/\1/p' "$TMP/check1")
[ "${gen1:-0}" -ge "$gen0" ] || fail "checked generation ${gen1:-?} older than $gen0"

log "second run, the writer still running"
# at least one commit after the first check's, whatever the writer (which
# a loaded machine may starve) did meanwhile
echo marker >"$MNT/marker" && sync -f "$MNT/marker" || fail "sync of a marker file"
st=0
"$ARBOR" check -q "$MNT" >"$TMP/check2" 2>&1 || st=$?
cat "$TMP/check2"
[ $st = 0 ] || fail "second arbor check: exit $st, want 0"
gen2=$(sed -n 's/.*: generation \([0-9]*\): clean.*/\1/p' "$TMP/check2")
[ "${gen2:-0}" -gt "$gen1" ] || fail "second check on generation ${gen2:-?}, first on $gen1: no commit in between"
gen_now=$("$ARBOR" filesystem generation "$MNT" | sed -n 's/^generation \([0-9]*\).*/\1/p')
log "generations: $gen0 before, checked $gen1 and $gen2, now $gen_now"
[ "$gen_now" -gt "$gen1" ] || fail "no commit while the checks ran"

log "status"
"$ARBOR" check --status "$MNT" >"$TMP/status" || fail "check --status failed"
grep -q "generation $gen2: clean" "$TMP/status" || fail "status: $(cat "$TMP/status")"

log "privilege"
st=0
as_nobody "$ARBOR_NOBODY" check "$MNT" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "nobody's check: exit $st, want 1"
grep -q "Operation not permitted" "$TMP/err" || fail "nobody's check: $(cat "$TMP/err")"
as_nobody "$ARBOR_NOBODY" check --status "$MNT" >/dev/null || fail "nobody cannot read the check status"
st=0
"$ARBOR" check "$TMP" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "check outside arborfs: exit $st, want 1"

touch "$TMP/stop"
wait "$WRITER_PID" || fail "writer failed: $(cat "$TMP/writer.log")"
WRITER_PID=
cat "$TMP/writer.log"
grep -q "check of generation $gen1: clean" "$DAEMON_LOG" ||
	soft_fail "the daemon did not log the check"
fs_umount
check_fsck

log "unmount while a check runs: the daemon cancels it and exits cleanly"
fs_mount
python3 - "$MNT" <<'PY' || fail "ARB_IOC_CHECK_START failed"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = bytearray(4096)
fcntl.ioctl(fd, 0xd000410a, buf)   # ARB_IOC_CHECK_START
os.close(fd)
PY
fs_umount
grep -q "check of generation [0-9]*\( cancelled\|: clean\)" "$DAEMON_LOG" ||
	soft_fail "the daemon did not log the end of the check"
check_fsck
finish
