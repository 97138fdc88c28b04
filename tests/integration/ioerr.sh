#!/bin/bash
# ioerr.sh - I/O errors of the image under a mounted filesystem, injected by
# the LD_PRELOAD shim tests/faultshim (no device-mapper here):
#
#  a. reads of one file's data blocks fail: reading it gives EIO, the other
#     files read fine, the daemon stays up and counts the errors; once the
#     fault is gone the file reads back intact; fsck is clean;
#  b. writes fail in the middle of a commit (sync): the sync fails, the
#     daemon says why in its log, the filesystem turns read-only (creates
#     give EROFS, fsync EIO/EROFS), the unmount reports the failure; the
#     next mount (no faults) shows the last good generation, intact, and
#     fsck is clean;
#  c. flushes fail in a commit of the commit thread: the same, ended by
#     kill -9 instead of an unmount;
#  d. a flush-behind (a streaming writer's flush between commits) fails:
#     the host reports a lost write to one flush only, so the daemon must
#     keep the error: the next commit fails although the fault is gone,
#     and the next mount shows the last good generation.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
SHIM=$BUILD/tests/faultshim/arbor_faultshim.so
[ -x "$ARBOR" ] || fail "$ARBOR not built"
[ -f "$SHIM" ] || skip "$SHIM not built (configure with tests enabled)"

# Under ASan the runtime must come first in LD_PRELOAD.
preload=$SHIM
asan=$(ldd "$DAEMON" | awk '/libasan/ {print $3; exit}')
[ -z "$asan" ] || preload="$asan:$SHIM"
CTL=$TMP/faults
FAULT_ENV=(LD_PRELOAD="$preload" ARBOR_FAULT_IMAGE="$IMG" ARBOR_FAULT_CTL="$CTL")

# faults "DIRECTIVE..." : replace the control file (a new inode, so the
# shim sees the change even within one timestamp tick)
faults() {
	printf '%s\n' "$@" >"$CTL.new"
	mv -f "$CTL.new" "$CTL"
}

# umount_failed: unmount a filesystem that failed; the daemon must end
# (its status tells the final commit failed: not checked), without
# sanitizer reports
umount_failed() {
	local ok=0
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		if fusermount3 -u "$MNT" 2>/dev/null; then
			ok=1
			break
		fi
		sleep 0.5
	done
	[ $ok = 1 ] || fail "cannot unmount $MNT"
	wait_pid_gone "$DAEMON_PID" 60 || fail "daemon still running after unmount"
	wait "$DAEMON_PID" || true
	DAEMON_PID=
	check_daemon_log
}

kill_daemon() {
	kill -KILL "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
	force_unmount "$MNT"
	check_daemon_log
}

# kill_then_last_good: kill -9 the failed daemon; a mount without faults
# must show generation $good_gen with the files of $TMP/good.manifest, and
# fsck must be clean
kill_then_last_good() {
	kill_daemon
	DAEMON_ENV=()
	fs_mount
	[ "$(gen_field generation)" = "$good_gen" ] ||
		fail "after kill: generation $(gen_field generation), want $good_gen"
	manifest "$MNT" >"$TMP/after.manifest"
	same_manifest "$TMP/good.manifest" "$TMP/after.manifest"
	fs_umount
	check_fsck
}

# gen_field FIELD: a field of `arbor filesystem generation --json`
gen_field() {
	"$ARBOR" filesystem generation --json "$MNT" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# ---- a. read errors on the data of one file ----------------------------------
log "a: read errors on the data blocks of one file"
fs_mkfs -s 64M
fs_mount
head -c 1048576 /dev/urandom >"$MNT/victim"
head -c 1048576 /dev/urandom >"$MNT/other"
echo "inline text" >"$MNT/small"
mkdir "$MNT/dir"
cp "$MNT/other" "$MNT/dir/copy"
victim_ino=$(stat -c %i "$MNT/victim")
sum_victim=$(sha "$MNT/victim")
sum_other=$(sha "$MNT/other")
fs_umount

# the victim's extents, from the dump of the fs tree:
#   (INO EXTENT_DATA OFF) size N reg disk START+LEN off ...
"$ARBOR" dump --image "$IMG" 5 >"$TMP/dump" || fail "arbor dump failed"
ranges=$(awk -v ino="($victim_ino" '$1 == ino && / reg disk / {
	for (i = 1; i <= NF; i++) if ($i == "disk") { split($(i+1), r, "+"); print "read_eio", r[1], r[2] } }' "$TMP/dump")
[ -n "$ranges" ] || fail "no extent of inode $victim_ino in the dump"
mapfile -t directives <<<"$ranges"
faults "${directives[@]}"

DAEMON_ENV=("${FAULT_ENV[@]}")
fs_mount
expect_errno EIO "open('victim','rb').read()"
[ "$(sha "$MNT/other")" = "$sum_other" ] || fail "other file reads wrong"
[ "$(sha "$MNT/dir/copy")" = "$sum_other" ] || fail "dir/copy reads wrong"
[ "$(cat "$MNT/small")" = "inline text" ] || fail "small file reads wrong"
kill -0 "$DAEMON_PID" || fail "daemon died"
mountpoint -q "$MNT" || fail "no longer mounted"
grep -q "arbor-faultshim: read .*: EIO" "$DAEMON_LOG" || fail "the shim injected no read error"
grep -q "inode $victim_ino offset .*read error" "$DAEMON_LOG" ||
	fail "the daemon did not log the read error with the inode"
errs=$("$ARBOR" filesystem stats --json "$MNT" |
	python3 -c "import json,sys; print(json.load(sys.stdin)['ops']['read']['errors'])")
[ "$errs" -ge 1 ] || fail "stats count no read error"
[ "$(gen_field state)" = rw ] || fail "a read error changed the state"
# the fault gone, the same file reads back intact
faults "# nothing"
[ "$(sha "$MNT/victim")" = "$sum_victim" ] || fail "victim wrong after the fault went"
DAEMON_ENV=()
fs_umount
check_fsck

# ---- b. write errors during a commit ------------------------------------------
log "b: write errors in the middle of a commit (sync)"
fs_mkfs -s 64M
faults "# nothing"
DAEMON_ENV=("${FAULT_ENV[@]}")
fs_mount -o commit=0
mkdir "$MNT/keep"
for i in 1 2 3 4 5; do
	head -c $((i * 100000)) /dev/urandom >"$MNT/keep/f$i"
done
echo "committed" >"$MNT/keep/note"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync before the faults failed"
good_gen=$(gen_field generation)
manifest "$MNT" >"$TMP/good.manifest"
# changes of the next generation: new files, a rewrite, a removal
mkdir "$MNT/lost"
head -c 300000 /dev/urandom >"$MNT/lost/new"
head -c 50000 /dev/urandom | dd of="$MNT/keep/f3" bs=50000 seek=1 conv=notrunc status=none
rm "$MNT/keep/f1"
# let two writes through (part of the commit reaches the image), fail the rest
faults "write_eio_after 2"
st=0
"$ARBOR" filesystem sync "$MNT" >"$TMP/sync.out" 2>&1 || st=$?
[ $st != 0 ] || fail "sync succeeded with failing writes"
grep -q "Input/output error" "$TMP/sync.out" || fail "sync error is not EIO: $(cat "$TMP/sync.out")"
grep -q "commit of generation $((good_gen + 1)) failed: Input/output error" "$DAEMON_LOG" ||
	fail "no log line naming the failed commit and its error"
grep -q "generation $good_gen is the last one on disk" "$DAEMON_LOG" ||
	fail "the log does not name the last good generation"
[ "$(gen_field state)" = failed ] || fail "state is not failed"
[ "$(gen_field generation)" = "$good_gen" ] || fail "generation moved"
[ "$(gen_field error)" = 5 ] || fail "error is not EIO"
kill -0 "$DAEMON_PID" || fail "daemon died"
# writes fail now
expect_errno EROFS "open('newfile','w')"
expect_errno EROFS "os.mkdir('newdir')"
(cd "$MNT" && python3 - <<'EOF') || fail "a write with fsync did not fail"
import errno, os, sys
try:
    fd = os.open("keep/note", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"more\n")
    os.fsync(fd)
except OSError as e:
    sys.exit(0 if e.errno in (errno.EIO, errno.EROFS) else 1)
sys.exit(1)
EOF
# (statvfs cannot show it: the kernel fills f_flag from the mount flags,
# not from the daemon's answer)
# the mount went back to the last commit: once the kernel forgot what it
# cached, the lost changes are gone and the rest reads as committed
faults "# nothing"
sync
echo 3 >/proc/sys/vm/drop_caches
[ ! -e "$MNT/lost" ] || fail "after the failure the mount still shows lost/"
manifest "$MNT" >"$TMP/failed.manifest"
same_manifest "$TMP/good.manifest" "$TMP/failed.manifest"
"$ARBOR" filesystem usage "$MNT" >/dev/null || fail "usage after the failure"
umount_failed
grep -q "final commit failed" "$DAEMON_LOG" || fail "unmount did not report the failure"
DAEMON_ENV=()
fs_mount
[ "$(gen_field generation)" = "$good_gen" ] || fail "remount: generation $(gen_field generation), want $good_gen"
[ "$(gen_field state)" = rw ] || fail "remount: not read-write"
manifest "$MNT" >"$TMP/after.manifest"
same_manifest "$TMP/good.manifest" "$TMP/after.manifest"
# and it takes changes again
echo again >"$MNT/again"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync after remount failed"
fs_umount
check_fsck

# ---- c. flush errors in a commit of the commit thread, then kill -9 -----------
log "c: flush errors in the commit thread, then kill -9"
fs_mkfs -s 64M
faults "# nothing"
DAEMON_ENV=("${FAULT_ENV[@]}")
fs_mount -o commit=1
for i in 1 2 3; do
	head -c 200000 /dev/urandom >"$MNT/g$i"
done
# the manifest first: its reads move atimes (relatime, files never read),
# and the commit thread (commit=1) would commit that before or after the
# faults come, by chance (CI at 0c1ea7e: "generation 3, want 2")
manifest "$MNT" >"$TMP/good.manifest"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync before the faults failed"
good_gen=$(gen_field generation)
faults "flush_eio_after 0"
# the commit thread may fail its commit while this file is being written
# (its create made the filesystem dirty): the write or the close then fails
# with EIO/EROFS, which is what this part tests, not a failure of the test
head -c 200000 /dev/urandom >"$MNT/lost" 2>/dev/null || true
sync -f "$MNT/lost" 2>/dev/null || true # the kernel's pages reach the daemon
for _ in $(seq 50); do
	[ "$(gen_field state)" = failed ] && break
	sleep 0.2
done
[ "$(gen_field state)" = failed ] || fail "the commit thread's failed flush did not fail the filesystem"
grep -q "commit of generation $((good_gen + 1)) failed: Input/output error" "$DAEMON_LOG" ||
	fail "no log line naming the failed commit"
expect_errno EROFS "open('newfile','w')"
kill_then_last_good

# ---- d. a failed flush-behind fails the next commit ---------------------------
log "d: a flush-behind fails; the next commit must fail too"
fs_mkfs -s 512M
faults "# nothing"
DAEMON_ENV=("${FAULT_ENV[@]}")
# no commit of the commit thread during the test: only the flush-behind
# meets the fault
fs_mount -o commit=3600,idle_commit=0
head -c 300000 /dev/urandom >"$MNT/before"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync before the faults failed"
good_gen=$(gen_field generation)
manifest "$MNT" >"$TMP/good.manifest"
faults "flush_eio_after 0"
# direct writes reach the daemon at once, as 1 MiB WRITEs; well past the
# daemon's delayed data and flush-behind limits
dd if=/dev/urandom of="$MNT/stream" bs=1M count=128 oflag=direct status=none ||
	fail "the streaming write failed"
grep -q "flushing the image failed: Input/output error; no later commit can succeed" "$DAEMON_LOG" ||
	fail "no flush-behind failed (log: $(tail -n 3 "$DAEMON_LOG" | tr '\n' ' '))"
behind=$("$ARBOR" filesystem stats --json "$MNT" |
	python3 -c "import json,sys; print(json.load(sys.stdin)['commits'].get('flushes_behind', -1))")
[ "$behind" = 0 ] || fail "stats count $behind successful flushes behind, want 0"
[ "$(gen_field state)" = rw ] || fail "the state changed before a commit"
# the fault is gone: a flush now succeeds on the host, but the data the
# failed one covered may be lost: the commit must fail anyway
faults "# nothing"
if "$ARBOR" filesystem sync "$MNT" >/dev/null 2>&1; then
	fail "a commit after a failed flush-behind succeeded"
fi
[ "$(gen_field state)" = failed ] || fail "state $(gen_field state) after the failed commit, want failed"
kill_then_last_good
finish
