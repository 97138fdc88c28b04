#!/usr/bin/env bash
# bench/cpushare.sh - what the daemon's way of serving requests costs a
# program that shares its CPU with a busy one, and the program on the
# other CPU.
#
#   bench/cpushare.sh [--build DIR] [--seconds S] [--rounds N]
#
# Run as root, on a machine with at least two CPUs and FUSE over io_uring
# (the fuse module's enable_uring is turned on for the run and restored
# after).  For each mode (-o no_uring, -o uring_sched=normal,
# -o uring_sched=idle), N rounds (default 2) on a fresh 1 GiB image: a busy
# loop pinned to CPU 0, and for S seconds (default 4) one process pinned to
# CPU 0 and one pinned to CPU 1, each creating a file, writing a byte to
# it and unlinking it in a loop.  Prints per process: operations, median,
# p99 and longest latency.  This measures the trade of the ring threads'
# scheduling class (fuse/uring.c; docs/design/fuse.md, "The starvation
# guard"); it asserts
# nothing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=$REPO/build
SECONDS_PER=4
ROUNDS=2
usage() { echo "usage: bench/cpushare.sh [--build DIR] [--seconds S] [--rounds N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$(realpath "${2:?}"); shift 2 ;;
	--seconds) SECONDS_PER=${2:?}; shift 2 ;;
	--rounds) ROUNDS=${2:?}; shift 2 ;;
	*) usage ;;
	esac
done
[[ $SECONDS_PER =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || usage
[ "$(id -u)" = 0 ] || { echo "bench/cpushare.sh: run as root" >&2; exit 1; }
for b in "$BUILD/mkfs/mkfs.arborfs" "$BUILD/fuse/arborfs"; do
	[ -x "$b" ] || { echo "bench/cpushare.sh: $b not built" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "bench/cpushare.sh: needs two CPUs" >&2; exit 1; }
PARAM=/sys/module/fuse/parameters/enable_uring
[ -w "$PARAM" ] || { echo "bench/cpushare.sh: no $PARAM (kernel without FUSE over io_uring)" >&2; exit 1; }

SCRATCH=$(mktemp -d /tmp/arbor-cpushare.XXXXXX)
MNT=$SCRATCH/mnt
IMG=$SCRATCH/img
OLD_PARAM=$(cat "$PARAM")
DAEMON_PID= HOG=
mkdir "$MNT"
cleanup() {
	set +e
	[ -z "$HOG" ] || kill "$HOG" 2>/dev/null
	if mountpoint -q "$MNT"; then
		umount "$MNT" 2>/dev/null || umount -l "$MNT"
	fi
	[ -z "$DAEMON_PID" ] || wait "$DAEMON_PID" 2>/dev/null
	echo "$OLD_PARAM" >"$PARAM"
	rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
echo 1 >"$PARAM"

cat >"$SCRATCH/loop.py" <<'EOF'
import os, sys, time
d, secs, label = sys.argv[1], float(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
lat = []
end = time.time() + secs
i = 0
while time.time() < end:
    t = time.perf_counter()
    p = os.path.join(d, "f%d" % i)
    with open(p, "w") as f:
        f.write("x")
    os.unlink(p)
    lat.append(time.perf_counter() - t)
    i += 1
lat.sort()
print("%s: %d ops, p50 %.3f ms, p99 %.3f ms, max %.1f ms" % (
    label, len(lat), lat[len(lat) // 2] * 1e3,
    lat[int(len(lat) * 0.99)] * 1e3, lat[-1] * 1e3))
EOF

for ((r = 1; r <= ROUNDS; r++)); do
	for mode in no_uring uring_sched=normal uring_sched=idle; do
		rm -f "$IMG"
		truncate -s 1G "$IMG"
		"$BUILD/mkfs/mkfs.arborfs" -q "$IMG"
		"$BUILD/fuse/arborfs" -f -o "$mode" "$IMG" "$MNT" &
		DAEMON_PID=$!
		for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
		mountpoint -q "$MNT" || { echo "bench/cpushare.sh: mount failed" >&2; exit 1; }
		taskset -c 0 sh -c 'while :; do :; done' &
		HOG=$!
		taskset -c 0 python3 "$SCRATCH/loop.py" "$MNT/a" "$SECONDS_PER" "CPU 0, beside a busy loop" >"$SCRATCH/a" &
		a=$!
		taskset -c 1 python3 "$SCRATCH/loop.py" "$MNT/b" "$SECONDS_PER" "CPU 1, alone" >"$SCRATCH/b" &
		b=$!
		wait "$a" "$b"
		kill "$HOG"
		wait "$HOG" 2>/dev/null || true
		HOG=
		echo "round $r, -o $mode"
		echo "  $(cat "$SCRATCH/a")"
		echo "  $(cat "$SCRATCH/b")"
		umount "$MNT"
		wait "$DAEMON_PID" || true
		DAEMON_PID=
	done
done
