#!/bin/bash
# stressng.sh - stress-ng, the stressor suite reviewers run on filesystems:
# 36 of stress-ng's filesystem stressors at once on one mount, with
# --verify (the stressors that write check what they read back), beside a
# tree written before that must come through unchanged; then the same kind
# of load on an image too small for it, where the stressors run out of
# space and must see ENOSPC, not a dead daemon or a damaged image.  After
# each part: the daemon is alive, a remount, fsck clean.
#   STRESSNG_SECONDS=N   length of the first part (default 20, 300 with
#                        full scale); the second part runs a third of it,
#                        10 s at least
. "$(dirname "$0")/lib.sh" "$@"

install_pkg stress-ng stress-ng || skip "stress-ng missing and not installable"
if [ "$SCALE" = full ]; then SECS=${STRESSNG_SECONDS:-300}; else SECS=${STRESSNG_SECONDS:-20}; fi

# The filesystem class of stress-ng 0.15 (Debian 12), less the stressors
# that skip themselves here (fiemap: FUSE does not pass FS_IOC_FIEMAP on;
# verity; binderfs) and those that send the daemon next to nothing, as
# counted by `arbor filesystem stats` over 5 s of each alone: bind-mount
# 3 requests, procfs 5, eventfd 5, handle 5, lease 24.  flock, locka,
# lockf and lockofd go too: the kernel keeps a FUSE mount's locks itself,
# and in a 60 s run of the class these four used 83 of the 120 CPU
# seconds, starving the stressors that reach the daemon (lease and handle
# also keep a CPU busy alone: 9.9 and 5.0 CPU seconds in 5 s).
STRESSORS=(access chattr chdir chmod chown copy-file dentry dir dirdeep
	dirmany dnotify dup fallocate fanotify fcntl file-ioctl filename fpunch
	fsize fstat getdent hdd inode-flags inotify io iomix ioprio link mknod
	open rename symlink sync-file touch utime xattr)

# run_stress SECONDS DIR OKCODES...: the stressors of $RUN, one instance
# each, in DIR; the exit status must be one of OKCODES (0 success, 3 a
# stressor lacked resources: no space).  The output goes to
# $TMP/stress.out.
run_stress() {
	local secs=$1 dir=$2 rc=0 args=() s
	shift 2
	for s in "${RUN[@]}"; do args+=("--$s" 1); done
	timeout -k 10 $((secs + 240)) stress-ng "${args[@]}" --timeout "${secs}s" \
		--temp-path "$dir" --verify --metrics-brief >"$TMP/stress.out" 2>&1 || rc=$?
	# the table's rows: "stress-ng: metrc: [pid] NAME OPS REAL USR SYS ..."
	awk '$2 == "metrc:" && NF >= 9 && $5 ~ /^[0-9]+$/ {printf "%s=%s ", $4, $5}
		END {print ""}' "$TMP/stress.out" | sed 's/^/   bogo ops: /'
	for s in "$@"; do
		[ "$rc" = "$s" ] && return 0
	done
	grep -v "^stress-ng: metrc" "$TMP/stress.out" | tail -n 30 >&2
	fail "stress-ng exited with status $rc (allowed: $*)"
}

log "part 1: ${#STRESSORS[@]} stressors at once for ${SECS}s, 4 GiB image"
fs_mkfs -s 4G
fs_mount
mkdir "$MNT/keep" "$MNT/stress"
# a tree the stressors must not disturb: files of several sizes (inline,
# one block, several extents), a symlink, a hard link, an xattr
for i in $(seq 1 40); do
	head -c $((i * 997)) /dev/urandom >"$MNT/keep/f$i"
done
head -c $((3 << 20)) /dev/urandom >"$MNT/keep/big"
ln -s f1 "$MNT/keep/link"
ln "$MNT/keep/f2" "$MNT/keep/hard"
setfattr -n user.keep -v yes "$MNT/keep/f3" || fail "setfattr on the mount"
manifest "$MNT/keep" >"$TMP/keep.before"
RUN=("${STRESSORS[@]}")
run_stress "$SECS" "$MNT/stress" 0
kill -0 "$DAEMON_PID" 2>/dev/null || fail "daemon died under stress-ng"
manifest "$MNT/keep" >"$TMP/keep.during"
same_manifest "$TMP/keep.before" "$TMP/keep.during"
left=$(find "$MNT/stress" -mindepth 1 | wc -l)
log "stress-ng left $left entries behind"
fs_remount
manifest "$MNT/keep" >"$TMP/keep.after"
same_manifest "$TMP/keep.before" "$TMP/keep.after"
# the chattr stressor, stopped at its timeout, may leave a file immutable
# or append-only: clear the flags, as a user would, before removing
chattr -R -i -a "$MNT/stress" 2>/dev/null || true
rm -rf "$MNT/stress"
fs_umount
check_fsck

# Part 2: the same stressors on 256 MiB.  hdd and iomix alone want more
# than that, so writes fail with ENOSPC (which stress-ng must report)
# while the others go on creating, renaming and linking.  Afterwards everything they left is
# removed and the free space must come back.  Two stressors stay out:
# filename fails outright when its probe of the longest name gets ENOSPC,
# and xattr (0.15) stops replacing values at the first ENOSPC but then
# checks every value for the replacement (it reads the old value, as it
# must after a failed replace).  tests/integration/enospc.sh covers both
# operations on a full image.
RUN=()
for s in "${STRESSORS[@]}"; do
	case $s in filename | xattr) ;; *) RUN+=("$s") ;; esac
done
PART2=$((SECS / 3))
[ "$PART2" -ge 10 ] || PART2=10
log "part 2: ${#RUN[@]} of them for ${PART2}s on a 256 MiB image (full disk)"
fs_mkfs -s 256M
fs_mount
free_before=$(stat -f -c '%a' "$MNT")
mkdir "$MNT/stress"
run_stress "$PART2" "$MNT/stress" 0 3
grep -q "out of system resources\|No space left" "$TMP/stress.out" ||
	fail "no stressor ran out of space: the full image was not reached"
log "stressors ran out of space, as intended"
kill -0 "$DAEMON_PID" 2>/dev/null || fail "daemon died on a full image"
chattr -R -i -a "$MNT/stress" 2>/dev/null || true
rm -rf "$MNT/stress" || fail "cannot empty the full image"
fs_remount
free_after=$(stat -f -c '%a' "$MNT")
log "free blocks: $free_before before, $free_after after emptying"
# the same free space, within 1% (tree nodes of the now empty root
# directory may sit elsewhere)
[ $((free_after * 100)) -ge $((free_before * 99)) ] ||
	fail "free space did not come back: $free_before blocks before, $free_after after"
fs_umount
check_fsck
finish
