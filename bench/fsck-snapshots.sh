#!/usr/bin/env bash
# bench/fsck-snapshots.sh - what snapshots cost the checker: fsck.arborfs
# -n of one tree without snapshots and with N of them, against `btrfs
# check --readonly` of the same tree with the same snapshots, in the same
# run.  As root (btrfs needs a loop mount to take its snapshots).
#
#   bench/fsck-snapshots.sh [--files N] [--snapshots "100 1000"]
#                           [--build DIR] [--out DIR] [--size SIZE]
#
# The tree: N files (default 10,000) of 0..300 bytes and every 100th of
# 64 KiB, 1,000 per directory, copied in at mkfs time.  arborfs takes its
# snapshots with `arbor subvolume snapshot -r --image` (no mount), btrfs
# with `btrfs subvolume snapshot -r` on a loop mount; between snapshots
# one file of the source is rewritten, so each snapshot differs.  Timed:
# the checker's wall time and peak memory (GNU time's maxrss).  The
# extent checks should cost what the physical data costs; the namespace
# passes cost the logical size of every snapshot, for both.
# Output: a table with arborfs/btrfs ratios, and fsck-snapshots.json.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
FILES=10000
SNAPS="100 1000"
BUILD=$REPO/build
OUT=
SIZE=4G
while [ $# -gt 0 ]; do
	case $1 in
	--files) FILES=$2; shift ;;
	--snapshots) SNAPS=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--out) OUT=$2; shift ;;
	--size) SIZE=$2; shift ;;
	-h | --help) sed -n 2,18p "$0"; exit 0 ;;
	*) echo "fsck-snapshots.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "fsck-snapshots.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "fsck-snapshots.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "fsck-snapshots.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fsck/fsck.arborfs cli/arbor; do
	[ -x "$BUILD/$b" ] || { echo "fsck-snapshots.sh: $BUILD/$b not built" >&2; exit 1; }
done
ARBOR=$BUILD/cli/arbor
OUT=${OUT:-$REPO/bench/results/fsck-snapshots-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SCR=$(mktemp -d /var/tmp/arbor-fscksnap.XXXXXX)
MNT=$SCR/mnt
mkdir -p "$MNT"
LOOP=
cleanup() {
	mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT" || true; }
	[ -z "$LOOP" ] || losetup -d "$LOOP" 2>/dev/null || true
	rm -rf "$SCR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 - "$SCR/tree" "$FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%04d" % (i // 1000))
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%07d" % i), "wb") as f:
        f.write(b"x" * (65536 if i % 100 == 0 else i % 301))
EOF

# timed CMD...: "seconds maxrss_kib" of CMD (exit 0 required)
timed() {
	/usr/bin/time -f "%e %M" -o "$SCR/time" "$@" >"$SCR/out" 2>&1 ||
		{ echo "fsck-snapshots.sh: failed: $*" >&2; tail -5 "$SCR/out" >&2; exit 1; }
	cat "$SCR/time"
}

declare -A R
# ---- arborfs
img=$SCR/arbor.img
"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" -r "$SCR/tree" "$img" >/dev/null
R[arbor,0]=$(timed "$BUILD/fsck/fsck.arborfs" -n "$img")
have=0
for n in $SNAPS; do
	while [ "$have" -lt "$n" ]; do
		"$ARBOR" subvolume snapshot -r --image "$img" / "/s$have" >/dev/null
		have=$((have + 1))
	done
	R[arbor,$n]=$(timed "$BUILD/fsck/fsck.arborfs" -n "$img")
done
rm -f "$img"

# ---- btrfs on a loop device
img=$SCR/btrfs.img
truncate -s "$SIZE" "$img"
mkfs.btrfs -q -f --rootdir "$SCR/tree" "$img" >/dev/null
R[btrfs,0]=$(timed btrfs check --readonly "$img")
LOOP=$(losetup -f --show "$img")
have=0
for n in $SNAPS; do
	mount "$LOOP" "$MNT"
	while [ "$have" -lt "$n" ]; do
		echo "$have" >"$MNT/d0000/f0000001"
		btrfs subvolume snapshot -r "$MNT" "$MNT/s$have" >/dev/null
		have=$((have + 1))
	done
	umount "$MNT"
	R[btrfs,$n]=$(timed btrfs check --readonly "$LOOP")
done
losetup -d "$LOOP"
LOOP=

printf '%-10s %12s %12s %8s %14s %14s\n' snapshots "arborfs s" "btrfs s" ratio "arborfs MiB" "btrfs MiB"
json="{\"files\": $FILES, \"rows\": ["
sep=
for n in 0 $SNAPS; do
	read -r at am <<<"${R[arbor,$n]}"
	read -r bt bm <<<"${R[btrfs,$n]}"
	ratio=$(python3 -c "print(f'{$at / max($bt, 0.01):.2f}')")
	printf '%-10s %12s %12s %8s %14s %14s\n' "$n" "$at" "$bt" "${ratio}x" $((am / 1024)) $((bm / 1024))
	json+="$sep{\"snapshots\": $n, \"arborfs_s\": $at, \"btrfs_s\": $bt, \"arborfs_kib\": $am, \"btrfs_kib\": $bm}"
	sep=", "
done
echo "$json]}" >"$OUT/fsck-snapshots.json"
echo "results: $OUT"
