#!/bin/bash
# trim.sh - freed space goes back to the host, and nothing committed is
# lost doing it.
#
# fstrim(8) reaches the daemon as FITRIM on the mount point and punches
# holes into the free runs of the image; -o discard punches what each
# commit freed.  The host's du of the image must fall back near the live
# data, fsck must be clean, and a kill -9 of the daemon while trims and
# deletes run must lose nothing that was fsynced and not deleted.
. "$(dirname "$0")/lib.sh" "$@"

command -v fstrim >/dev/null || skip "fstrim (util-linux) missing"
ARBOR=$BUILD/cli/arbor
host_kib() { du -k "$IMG" | cut -f1; }

fs_mkfs -s 1G
# no history: the blocks of the last commits' generations are kept from
# reuse and from trimming on purpose (docs/design/space.md, "History and
# grace"); here fstrim must punch everything the delete freed
fs_mount -o grace_commits=0
head -c 1000000 /dev/urandom >"$TMP/keep"
cp "$TMP/keep" "$MNT/keep"
head -c $((200 << 20)) /dev/urandom >"$MNT/big"
mkdir "$MNT/small"
for i in $(seq 300); do head -c 7000 /dev/urandom >"$MNT/small/$i"; done
sync -f "$MNT/keep"
full=$(host_kib)
rm -rf "$MNT/big" "$MNT/small"
# the kernel tells the daemon that big is gone (FORGET) when it evicts the
# inode, asynchronously: its blocks are free, and trimmed, only then; so
# fstrim again until they were (or 10 s)
for _ in $(seq 50); do
	out=$(fstrim -v "$MNT") || fail "fstrim"
	[ "$(host_kib)" -lt 20000 ] && break
	sleep 0.2
done
log "$out"
after=$(host_kib)
log "host: $full KiB full, $after KiB after delete and fstrim"
[ "$after" -lt 20000 ] || fail "fstrim left $after KiB on the host"
"$ARBOR" filesystem usage "$MNT" | grep -q "^host " || fail "usage shows no host bytes"
cmp "$TMP/keep" "$MNT/keep" || fail "live data after fstrim"
# only root trims
if id nobody >/dev/null 2>&1; then
	chmod 755 "$MNT"
	su nobody -s /bin/sh -c "fstrim '$MNT'" 2>/dev/null &&
		fail "fstrim as an unprivileged user"
fi
fs_umount
check_fsck

log "-o discard gives freed space back after commits"
# (grace_commits=0: space freed by a commit is discarded by the next
# one, not two commits later; the wait allows for a loaded machine)
fs_mount -o discard,grace_commits=0
head -c $((200 << 20)) /dev/urandom >"$MNT/big"
sync
before=$(host_kib)
rm -f "$MNT/big"
for _ in $(seq 150); do
	[ "$(host_kib)" -lt 20000 ] && break
	sleep 0.2
done
log "host: $before KiB, then $(host_kib) KiB after the delete"
[ "$(host_kib)" -lt 20000 ] || fail "discard did not give space back"
cmp "$TMP/keep" "$MNT/keep" || fail "live data after discard"
fs_umount
check_fsck

log "kill -9 while deletes and trims run"
rounds=4
[ "$SCALE" = full ] && rounds=20
for r in $(seq $rounds); do
	fs_mount -o discard
	python3 - "$MNT" "$r" 2>/dev/null <<'EOF' &
import os, random, sys, time
mnt, r = sys.argv[1], int(sys.argv[2])
rnd = random.Random(r)
d = os.path.join(mnt, "r%d" % r)
os.mkdir(d)
kept = []
for i in range(400):
    name = os.path.join(d, "%d" % i)
    data = rnd.randbytes(rnd.choice([3000, 40000, 300000]))
    with open(name, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    # a manifest of what is fsynced, itself fsynced; a file leaves the
    # manifest (durably) before it is unlinked, so that no durable
    # manifest names a file that a crash may find deleted
    kept.append(i)
    gone = None
    if len(kept) > 5 and rnd.random() < 0.5:
        gone = kept.pop(rnd.randrange(len(kept)))
    with open(os.path.join(d, "manifest.tmp"), "w") as f:
        f.write(" ".join(map(str, kept)))
        f.flush()
        os.fsync(f.fileno())
    os.rename(os.path.join(d, "manifest.tmp"), os.path.join(d, "manifest"))
    os.fsync(os.open(d, os.O_RDONLY))
    if gone is not None:
        os.unlink(os.path.join(d, "%d" % gone))
        os.fsync(os.open(d, os.O_RDONLY))
EOF
	writer=$!
	(while kill -0 $writer 2>/dev/null; do fstrim "$MNT" 2>/dev/null; sleep 0.05; done) &
	trimmer=$!
	# kill at a random instant once the writer is under way
	for _ in $(seq 300); do
		[ -f "$MNT/r$r/manifest" ] && break
		sleep 0.05
	done
	sleep "$((RANDOM % 2)).$((RANDOM % 10))"
	kill -9 "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
	wait $writer 2>/dev/null || true
	wait $trimmer 2>/dev/null || true
	force_unmount "$MNT"
	check_fsck
	fs_mount
	# every file the manifest names reads back whole (its checksum is
	# verified by the daemon on read)
	[ -f "$MNT/r$r/manifest" ] || fail "round $r: the fsynced manifest is gone"
	n=0
	for i in $(cat "$MNT/r$r/manifest"); do
		cat "$MNT/r$r/$i" >/dev/null || fail "round $r: file $i lost or damaged"
		n=$((n + 1))
	done
	log "round $r: $n fsynced files intact"
	[ $n -gt 0 ] || fail "round $r: nothing was written before the kill"
	rm -rf "$MNT/r$r"
	cmp "$TMP/keep" "$MNT/keep" || fail "round $r: live data"
	fs_umount
done
check_fsck
finish
