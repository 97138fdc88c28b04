#!/bin/bash
# unmount.sh - unmount and recovery that scripts can rely on.
#
#  - `fusermount3 -u m; fsck.arborfs e.img` failed with "image is in use"
#    8 times in 10: the daemon still commits after the kernel let go.
#    `arbor unmount` waits for it; a mount waits for the image (10 s).
#  - a regular file is refused as a mount point (it used to mount and
#    answer EIO);
#  - a backgrounded daemon's messages go to -o log=FILE, or to stderr when
#    that is not a terminal, instead of being lost without syslog.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
CORRUPT=$BUILD/tests/arbor-corrupt

fs_mkfs -s 256M

log "a regular file as mount point"
touch "$TMP/regular"
if "$DAEMON" "$IMG" "$TMP/regular" 2>"$TMP/err"; then
	fusermount3 -u "$TMP/regular" 2>/dev/null || true
	fail "mounted on a regular file"
fi
grep -q "not a directory" "$TMP/err" || { cat "$TMP/err" >&2; fail "no reason given"; }

log "arbor unmount, then fsck at once"
for i in 1 2 3 4 5; do
	fs_mount
	head -c 20000000 /dev/urandom >"$MNT/f$i"
	"$ARBOR" unmount "$MNT" || fail "arbor unmount"
	wait_pid_gone "$DAEMON_PID" 5 || fail "daemon alive after arbor unmount returned"
	wait "$DAEMON_PID" || fail "daemon exit status"
	DAEMON_PID=
	"$FSCK" -n "$IMG" >/dev/null || fail "fsck right after arbor unmount ($i)"
done
"$ARBOR" unmount "$TMP" 2>/dev/null && fail "arbor unmount of a non-arborfs directory"

log "fusermount3 -u, then fsck and mkfs at once (they wait for the daemon)"
for i in 1 2 3; do
	fs_mount
	head -c 20000000 /dev/urandom >"$MNT/h$i"
	fusermount3 -u "$MNT"
	old=$DAEMON_PID
	DAEMON_PID=
	"$FSCK" -n "$IMG" >/dev/null || fail "fsck right after fusermount3 -u ($i)"
	wait "$old" || fail "daemon exit status"
done
fs_mount
"$FSCK" -n --no-wait "$IMG" >/dev/null 2>"$TMP/err" && fail "fsck --no-wait of a mounted image"
grep -q "in use" "$TMP/err" || fail "fsck --no-wait: no 'in use' message"
"$MKFS" -q -f --no-wait "$IMG" 2>"$TMP/err" && fail "mkfs --no-wait of a mounted image"
grep -q "in use" "$TMP/err" || fail "mkfs --no-wait: no 'in use' message"
fs_umount

log "fusermount3 -u, then mount again at once"
fs_mount
head -c 20000000 /dev/urandom >"$MNT/g"
fusermount3 -u "$MNT"
old=$DAEMON_PID
DAEMON_PID=
fs_mount
wait "$old" || fail "first daemon's exit status"
cmp -n 20000000 "$MNT/g" "$MNT/g" || fail "read back"
fs_umount

log "-o no_wait fails at once on an image in use"
fs_mount
mkdir -p "$TMP/m2"
t0=$(date +%s)
if "$DAEMON" -o no_wait "$IMG" "$TMP/m2" 2>"$TMP/err"; then
	fusermount3 -u "$TMP/m2" || true
	fail "a second mount of one image"
fi
[ $(($(date +%s) - t0)) -lt 5 ] || fail "no_wait waited"
grep -q "in use" "$TMP/err" || fail "no 'in use' message"
fs_umount
check_fsck

log "an image on a read-only filesystem: the error says -o ro"
mkdir -p "$TMP/rodir"
cp "$IMG" "$TMP/rodir/ro.img"
if mount --bind "$TMP/rodir" "$TMP/rodir" && mount -o remount,bind,ro "$TMP/rodir"; then
	if "$DAEMON" "$TMP/rodir/ro.img" "$MNT" 2>"$TMP/err"; then
		fusermount3 -u "$MNT"
		umount "$TMP/rodir"
		fail "a read-write mount of a read-only image"
	fi
	grep -q -- "-o ro" "$TMP/err" || { cat "$TMP/err" >&2; umount "$TMP/rodir"; fail "no -o ro hint"; }
	"$DAEMON" -o ro "$TMP/rodir/ro.img" "$MNT" || { umount "$TMP/rodir"; fail "-o ro mount"; }
	[ -f "$MNT/f1" ] || { fusermount3 -u "$MNT"; umount "$TMP/rodir"; fail "-o ro: no file"; }
	"$ARBOR" unmount "$MNT"
	umount "$TMP/rodir"
fi

if [ -x "$CORRUPT" ]; then
	log "messages of a background daemon: -o log=FILE, and stderr to a file"
	fs_mount
	head -c 100000 /dev/urandom >"$MNT/bad"
	fs_umount
	"$CORRUPT" "$IMG" bad-data-csum bad >/dev/null || fail "arbor-corrupt"
	for how in logfile stderr; do
		rm -f "$TMP/daemon-$how.log"
		if [ $how = logfile ]; then
			"$DAEMON" -o "log=$TMP/daemon-$how.log" "$IMG" "$MNT" </dev/null >/dev/null 2>&1 ||
				fail "background mount with log="
		else
			"$DAEMON" "$IMG" "$MNT" </dev/null >/dev/null 2>"$TMP/daemon-$how.log" ||
				fail "background mount"
		fi
		cat "$MNT/bad" >/dev/null 2>&1 && fail "a damaged sector read without error"
		"$ARBOR" unmount "$MNT" || fail "arbor unmount"
		grep -q "checksum" "$TMP/daemon-$how.log" ||
			{ cat "$TMP/daemon-$how.log" >&2; fail "$how: the daemon's error is not in the log"; }
	done
fi
finish
