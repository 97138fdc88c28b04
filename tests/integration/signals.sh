#!/bin/bash
# signals.sh - SIGTERM/SIGINT/SIGHUP stop the daemon without losing what
# the kernel still held in its writeback cache: the daemon flushes it
# (syncfs), unmounts, commits and exits 0.  Also with the mount busy.
. "$(dirname "$0")/lib.sh" "$@"

fs_mkfs -s 1G
head -c 5000000 /dev/urandom >"$TMP/data"

# stop_with SIG: signal the daemon, wait for it, check its status
stop_with() {
	local sig=$1 st=0
	kill -"$sig" "$DAEMON_PID"
	wait_pid_gone "$DAEMON_PID" 60 || fail "daemon alive 60 s after SIG$sig"
	wait "$DAEMON_PID" || st=$?
	DAEMON_PID=
	[ $st -eq 0 ] || fail "daemon exited with status $st after SIG$sig"
	if mountpoint -q "$MNT"; then
		fail "still mounted after SIG$sig"
	fi
}

for sig in TERM INT HUP; do
	log "SIG$sig"
	fs_mount
	# no fsync, no close-to-commit: only the kernel's cache has it
	cp "$TMP/data" "$MNT/file-$sig"
	mkdir "$MNT/dir-$sig"
	echo small >"$MNT/dir-$sig/small"
	stop_with $sig
	fs_mount
	cmp "$TMP/data" "$MNT/file-$sig" || fail "data written before SIG$sig lost"
	[ "$(cat "$MNT/dir-$sig/small")" = small ] || fail "small file before SIG$sig lost"
	fs_umount
done

log "SIGTERM with the mount busy"
fs_mount
cp "$TMP/data" "$MNT/busy-file"
# a process whose working directory is in the mount keeps it busy
(cd "$MNT" && exec sleep 300) &
SLEEPER=$!
test_cleanup() { kill "$SLEEPER" 2>/dev/null; }
sleep 0.2
stop_with TERM
kill "$SLEEPER" 2>/dev/null
wait "$SLEEPER" 2>/dev/null || true
force_unmount "$MNT"
fs_mount
cmp "$TMP/data" "$MNT/busy-file" || fail "data written before SIGTERM (busy) lost"
fs_umount

log "daemonized: mount, then unmount; the daemon commits and exits"
"$DAEMON" "$IMG" "$MNT" || fail "daemonized mount failed"
mountpoint -q "$MNT" || fail "not mounted after the daemon returned"
cp "$TMP/data" "$MNT/daemonized"
fusermount3 -u "$MNT"
for _ in $(seq 1 300); do
	flock -n "$IMG" true 2>/dev/null && break
	sleep 0.1
done
fs_mount
cmp "$TMP/data" "$MNT/daemonized" || fail "daemonized mount lost data"
fs_umount
check_fsck
finish
