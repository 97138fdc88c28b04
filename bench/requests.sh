#!/usr/bin/env bash
# bench/requests.sh - FUSE requests per operation, by kind, for the
# metadata workloads of bench/run.sh.
#
#   bench/requests.sh [--build DIR] [--files N] [-- DAEMON-OPTIONS...]
#
# Run as root.  Makes a fresh 4 GiB arborfs image in a scratch directory,
# mounts it and runs, each followed by `arbor filesystem stats` (which
# counts every request the daemon served, with its mean time in the
# daemon) and a reset:
#   untar     N files of 1 KiB in 100 directories (default 20,000), sync
#   find-cold find -printf over the tree after a remount and drop_caches
#   find-warm the same again
#   rm        rm -rf of the tree, sync
#   cp-a      cp -a /usr/include, sync
#   tar-c     tar c of the copy after a remount and drop_caches
# Each line: total requests, requests per file (or per entry), then each
# kind as count/mean microseconds.  Options after -- go to the daemon
# (e.g. -- -o open_requests).  No timings are compared here: the point is
# which requests the kernel sends, and how many (docs/PERFORMANCE.md,
# "Requests per operation").
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=$REPO/build
FILES=20000
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$(realpath "$2"); shift 2 ;;
	--files) FILES=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: bench/requests.sh [--build DIR] [--files N] [-- DAEMON-OPTIONS...]" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "bench/requests.sh: run as root" >&2; exit 1; }
ARBOR=$BUILD/cli/arbor
for b in "$BUILD/mkfs/mkfs.arborfs" "$BUILD/fuse/arborfs" "$ARBOR"; do
	[ -x "$b" ] || { echo "bench/requests.sh: $b not built" >&2; exit 1; }
done

SCRATCH=$(mktemp -d /var/tmp/arborfs-requests.XXXXXX)
M=$SCRATCH/mnt
PID=
cleanup() {
	if mountpoint -q "$M"; then
		umount "$M" 2>/dev/null || umount -l "$M"
	fi
	[ -z "$PID" ] || wait "$PID" 2>/dev/null || true
	rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$M"

mount_() {
	"$BUILD/fuse/arborfs" -f "$@" "$SCRATCH/img" "$M" 2>>"$SCRATCH/daemon.log" &
	PID=$!
	for _ in $(seq 300); do
		mountpoint -q "$M" && return 0
		kill -0 "$PID" 2>/dev/null || { cat "$SCRATCH/daemon.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "bench/requests.sh: not mounted after 30 s" >&2
	exit 1
}
umount_() {
	umount "$M"
	wait "$PID" || true
	PID=
}
cold() {
	umount_
	sync
	echo 3 >/proc/sys/vm/drop_caches
	mount_ "$@"
	"$ARBOR" filesystem stats --reset "$M" >/dev/null
}
# phase NAME UNITS: print the counts since the last reset, then reset
phase() {
	"$ARBOR" filesystem stats --json "$M" | python3 -c '
import json, sys
ops = json.load(sys.stdin)["ops"]
name, units = sys.argv[1], int(sys.argv[2])
tot = sum(v["count"] for v in ops.values())
kinds = sorted((v["count"], k, v["mean_us"]) for k, v in ops.items() if v["count"])
print("%-10s %7d requests, %5.2f per entry: %s" % (name, tot, tot / units,
      " ".join("%s=%d/%.0fus" % (k, c, us) for c, k, us in reversed(kinds))))
' "$1" "$2"
	"$ARBOR" filesystem stats --reset "$M" >/dev/null
}

python3 "$HERE/lib/wl.py" mktar "$SCRATCH/small.tar" "$FILES" 100 1024
truncate -s 4G "$SCRATCH/img"
"$BUILD/mkfs/mkfs.arborfs" -q "$SCRATCH/img"
mount_ "$@"
# the mount's first open answers ENOSYS and ends OPEN requests (and the
# RELEASE of created files): have it before counting, as any use would
echo first >"$M/first"
cat "$M/first" >/dev/null
"$ARBOR" filesystem stats --reset "$M" >/dev/null
mkdir "$M/small"
tar xf "$SCRATCH/small.tar" -C "$M/small"
sync -f "$M"
phase untar "$FILES"
entries=$((FILES + 102))
cold "$@"
[ "$(find "$M/small" -printf '%s\n' | wc -l)" = "$entries" ] || { echo "find-cold: wrong count" >&2; exit 1; }
phase find-cold "$entries"
find "$M/small" -printf '%s\n' >/dev/null
phase find-warm "$entries"
rm -rf "$M/small"
sync -f "$M"
phase rm "$FILES"
inc=$(find /usr/include | wc -l)
cp -a /usr/include "$M/inc"
sync -f "$M"
phase cp-a "$inc"
cold "$@"
tar c -C "$M" inc | wc -c >/dev/null
phase tar-c "$inc"
echo "($FILES files of 1 KiB in 100 directories; /usr/include: $inc entries; $(uname -r))"
