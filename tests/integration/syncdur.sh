#!/bin/bash
# syncdur.sh - sync(1) and syncfs(2) become durable soon after they return.
#
# A FUSE daemon gets no request for sync or syncfs (the kernel sends
# FUSE_SYNCFS only to virtiofs): it sees the written-back pages and
# nothing else.  The daemon commits once nothing has changed for
# idle_commit milliseconds (default 100), so with a commit interval of a
# minute a synced file must still be committed within a fraction of a
# second, and survive a kill -9 of the daemon right after that.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
gen() { "$ARBOR" filesystem generation "$MNT" | awk '{print $NF}'; }

# wait_gen_past G: the generation moves past G within 2 s (echo the ms)
wait_gen_past() {
	local g0=$1 t0 g
	t0=$(date +%s%N)
	for _ in $(seq 200); do
		g=$(gen)
		if [ "$g" != "$g0" ]; then
			echo $((($(date +%s%N) - t0) / 1000000))
			return 0
		fi
		sleep 0.01
	done
	return 1
}

crash() {
	kill -9 "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
	force_unmount "$MNT"
}

fs_mkfs -s 256M
head -c 100000 /dev/urandom >"$TMP/f1"
head -c 3000000 /dev/urandom >"$TMP/f2"

# without the idle commit, sync leaves the generation where it was
fs_mount -o commit=60,idle_commit=0
g=$(gen)
cp "$TMP/f1" "$MNT/nosync"
sync
sleep 0.5
[ "$(gen)" = "$g" ] || fail "idle_commit=0: a commit without one being due"
fs_umount

for how in sync syncfs; do
	log "$how"
	fs_mount -o commit=60
	g=$(gen)
	cp "$TMP/f1" "$MNT/$how-1"
	mkdir "$MNT/$how-dir"
	cp "$TMP/f2" "$MNT/$how-dir/2"
	if [ $how = sync ]; then
		sync
	else
		sync -f "$MNT/$how-1"
	fi
	ms=$(wait_gen_past "$g") || fail "$how: no commit within 2 s"
	log "$how: committed $ms ms after it returned"
	crash
	fs_mount -o commit=60
	cmp "$TMP/f1" "$MNT/$how-1" || fail "$how: file lost in the crash"
	cmp "$TMP/f2" "$MNT/$how-dir/2" || fail "$how: file in a new directory lost"
	fs_umount
	check_fsck
done
finish
