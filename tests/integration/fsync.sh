#!/bin/bash
# fsync.sh - concurrent fsyncs share commits, and every one of them is
# durable: 8 processes each overwrite blocks inside their own existing file
# (the kind of write an fsync of another file leaves in memory) and fsync
# after each.  Then the daemon is killed with SIGKILL, without unmount or
# sync: after a remount each file must hold exactly what its last fsync
# covered, and fsck is clean.  The commit count (arbor filesystem stats)
# must stay well under the fsync count: without group commit every fsync
# was a commit of its own.  Both ways of serving requests: the default
# pool of threads (the library gathers) and -o singlethread (a commit
# thread answers queued FSYNCs, fuse/fsyncq.c).
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
NPROC=8
ROUNDS=50

# stat KEY SUB: a number from arbor filesystem stats --json
stat() {
	"$ARBOR" filesystem stats --json "$MNT" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]][sys.argv[2]])' "$1" "$2"
}
for mode in "" singlethread; do
fs_mkfs -s 1G
log "serving with ${mode:-a pool of threads}"
# the pool run also caps the mount's dirty page cache (-o dirty_limit);
# the other sets a read-ahead window other than the default 1M
limit=,dirty_limit=16M
[ -z "$mode" ] || limit=,readahead=4M
fs_mount -o commit=3600${mode:+,$mode}$limit
ra=$(cat "/sys/class/bdi/$(mountpoint -d "$MNT")/read_ahead_kb")
want=1024
[ -z "$mode" ] || want=4096
[ "$ra" = $want ] || fail "read_ahead_kb of the mount is $ra, want $want"
if [ -z "$mode" ]; then
	mb=/sys/class/bdi/$(mountpoint -d "$MNT")/max_bytes
	if [ -f "$mb" ]; then
		v=$(cat "$mb")
		log "dirty_limit=16M: the kernel's max_bytes is $v"
		[ "$v" -ge $((15 << 20)) ] && [ "$v" -le $((17 << 20)) ] ||
			fail "dirty_limit=16M left max_bytes at $v"
	else
		log "no max_bytes in sysfs (Linux < 6.2): dirty_limit not checked"
	fi
fi
mkdir "$MNT/g"
python3 - "$MNT/g" $NPROC <<'EOF' || fail "setup"
import os, sys
for p in range(int(sys.argv[2])):
    with open(f"{sys.argv[1]}/f{p}", "wb") as f:
        f.write(bytes([p]) * (1 << 20))
EOF
sync -f "$MNT" || fail "sync after setup"
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset"
c0=$(stat commits count)
[ -n "$c0" ] || fail "no commit count from arbor filesystem stats"

# each process: ROUNDS x (overwrite one 4 KiB block with a fresh pattern,
# fsync); expected contents go to $TMP/expect.P once the fsync returned
python3 - "$MNT/g" "$TMP" $NPROC $ROUNDS <<'EOF' || fail "fsync workers"
import os, random, sys
d, tmp, nproc, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pids = []
for p in range(nproc):
    pid = os.fork()
    if pid == 0:
        rnd = random.Random(p)
        img = bytearray([p]) * (1 << 20)
        fd = os.open(f"{d}/f{p}", os.O_WRONLY)
        for r in range(rounds):
            off = rnd.randrange(256) * 4096
            blk = bytes([(p * 31 + r) & 255]) * 4096
            os.pwrite(fd, blk, off)
            os.fsync(fd)
            img[off:off + 4096] = blk
        with open(f"{tmp}/expect.{p}", "wb") as f:
            f.write(img)
        os._exit(0)
    pids.append(pid)
bad = 0
for pid in pids:
    _, st = os.waitpid(pid, 0)
    bad += st != 0
sys.exit(1 if bad else 0)
EOF
c1=$(stat commits count)
fsyncs=$((NPROC * ROUNDS))
joined=$(stat fsyncs joined)
seen=$(stat fsyncs count)
log "$fsyncs fsyncs from $NPROC processes took $((c1 - c0)) commits; the daemon saw $seen fsyncs, $joined joined a group commit"
[ $((c1 - c0)) -le $((fsyncs * 3 / 4)) ] ||
	fail "$fsyncs concurrent fsyncs took $((c1 - c0)) commits: not shared"
[ "$seen" -ge "$fsyncs" ] || fail "stats count $seen fsyncs, $fsyncs were made"
[ "$joined" -gt 0 ] || fail "no fsync joined a group commit"
"$ARBOR" filesystem stats "$MNT" | grep -E "^(commit phases|fsyncs) " ||
	fail "stats lack the commit phases or the fsync line"

# crash: no unmount, no sync
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
force_unmount "$MNT"
check_fsck
fs_mount
for ((p = 0; p < NPROC; p++)); do
	cmp "$TMP/expect.$p" "$MNT/g/f$p" ||
		fail "f$p differs from what its last fsync covered"
done
fs_umount
check_fsck
done
finish
