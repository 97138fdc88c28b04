#!/usr/bin/env bash
# bench/fsck.sh - time and peak memory of a full offline check: fsck.arborfs
# on an arborfs image against e2fsck -f on an ext4 image holding the same
# tree, built in the same run.  As root (ext4 goes on a loop device).
#
#   bench/fsck.sh [--files "10000 100000"] [--build DIR] [--out DIR]
#                 [--images DIR] [--fsck-args "ARGS"] [--size SIZE]
#                 [--via mount|mkfs] [--max-bytes B]
#
# For each N: N files of 0..300 bytes (so small ones are inline in arborfs
# and in the inode-less tail in ext4), 1,000 per directory, made through a
# mount of each filesystem (arborfs: its FUSE daemon; ext4: the kernel),
# then unmounted; each checker runs twice (the page cache is dropped before
# each run) and the faster run is reported (time, and peak RSS of that run
# from /usr/bin/time).  Output: a table and fsck.json in the output
# directory.  --images DIR keeps the images there (arbor-N.img, ext4-N.img)
# and reuses them when they exist, so two builds can be compared on the
# same images; --fsck-args passes extra options to fsck.arborfs.  --size
# is the image size (default 4G).  --via mkfs builds the tree once in a
# host directory and copies it in with mkfs.arborfs -r and mkfs.ext4 -d
# (minutes instead of an hour for 10^6 files through FUSE; the trees are
# then packed as a bulk load packs them, not as a mount grows them).
# --max-bytes B: file i holds i % B bytes (default 301: all inline; 8193
# gives most files a data extent).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
FILES="10000 100000"
BUILD=$REPO/build
OUT=
IMAGES=
FSCK_ARGS=
SIZE=4G
VIA=mount
MAXB=301
while [ $# -gt 0 ]; do
	case $1 in
	--files) FILES=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--out) OUT=$2; shift ;;
	--images) IMAGES=$2; shift ;;
	--fsck-args) FSCK_ARGS=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--via) VIA=$2; shift ;;
	--max-bytes) MAXB=$2; shift ;;
	-h | --help) sed -n 2,26p "$0"; exit 0 ;;
	*) echo "fsck.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "fsck.sh: run as root" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs fsck/fsck.arborfs; do
	[ -x "$BUILD/$b" ] || { echo "fsck.sh: $BUILD/$b not built" >&2; exit 1; }
done
OUT=${OUT:-$REPO/bench/results/fsck-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SCR=$(mktemp -d /tmp/arbor-fsckbench.XXXXXX)
MNT=$SCR/mnt
mkdir -p "$MNT"
DPID= LOOP=
cleanup() {
	if mountpoint -q "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || umount -l "$MNT" || true
	fi
	[ -z "$DPID" ] || { kill "$DPID" 2>/dev/null || true; wait "$DPID" 2>/dev/null || true; }
	[ -z "$LOOP" ] || losetup -d "$LOOP" 2>/dev/null || true
	rm -rf "$SCR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

populate() { # DIR N
	python3 - "$1" "$2" "$MAXB" <<'EOF'
import os, sys
root, n, maxb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, "d%04d" % (i // 1000))
    if i % 1000 == 0:
        os.mkdir(d)
    with open(os.path.join(d, "file-%07d" % i), "wb") as f:
        f.write(b"x" * (i % maxb))
EOF
}

# measure NAME CMD...: best of two cold runs: "secs maxrss_kib"
measure() {
	local best= mem= t m st
	shift
	for _ in 1 2; do
		sync
		echo 3 >/proc/sys/vm/drop_caches
		st=0
		/usr/bin/time -f "%e %M" -o "$SCR/time" "$@" >"$SCR/out" 2>&1 || st=$?
		# e2fsck -n exits 0 when clean; fsck.arborfs -n likewise
		[ $st = 0 ] || { echo "fsck.sh: $* exited $st:" >&2; tail -5 "$SCR/out" >&2; echo "NA NA"; return; }
		read -r t m <"$SCR/time"
		if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a<b)}'; then
			best=$t mem=$m
		fi
	done
	echo "$best $mem"
}

echo "# $(date -Is) $(nproc) CPUs, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/fsck.txt"
printf '%-9s %12s %12s %12s %12s %8s %8s\n' files arbor_s arbor_MiB e2fsck_s e2fsck_MiB t_ratio m_ratio | tee -a "$OUT/fsck.txt"
json="["
for n in $FILES; do
	# arborfs
	img=${IMAGES:-$SCR}/arbor-$n.img
	if [ "$VIA" = mkfs ] && { [ -z "$IMAGES" ] || [ ! -s "$img.done" ] || [ ! -s "${IMAGES:-$SCR}/ext4-$n.img.done" ]; }; then
		rm -rf "$SCR/tree"
		mkdir "$SCR/tree"
		populate "$SCR/tree" "$n"
	fi
	if [ -z "$IMAGES" ] || [ ! -f "$img" ]; then
		rm -f "$img"
		truncate -s "$SIZE" "$img"
	fi
	if [ "$VIA" = mkfs ] && [ -d "$SCR/tree" ] && { [ -z "$IMAGES" ] || [ ! -s "$img.done" ]; }; then
		"$BUILD/mkfs/mkfs.arborfs" -q -f -r "$SCR/tree" "$img"
		[ -z "$IMAGES" ] || echo done >"$img.done"
	elif [ -z "$IMAGES" ] || [ ! -s "$img.done" ]; then
		"$BUILD/mkfs/mkfs.arborfs" -q -f "$img"
		"$BUILD/fuse/arborfs" -f "$img" "$MNT" 2>"$SCR/daemon.log" &
		DPID=$!
		for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
		populate "$MNT" "$n"
		fusermount3 -u "$MNT"
		wait "$DPID"
		DPID=
		[ -z "$IMAGES" ] || echo done >"$img.done"
	fi
	# shellcheck disable=SC2086
	read -r at am < <(measure fsck "$BUILD/fsck/fsck.arborfs" -n $FSCK_ARGS "$img")
	[ -n "$IMAGES" ] || rm -f "$img"
	# ext4 (default mkfs options), kernel mount on a loop device
	img=${IMAGES:-$SCR}/ext4-$n.img
	if [ "$VIA" = mkfs ] && { [ -z "$IMAGES" ] || [ ! -s "$img.done" ]; }; then
		rm -f "$img"
		truncate -s "$SIZE" "$img"
		mkfs.ext4 -q -F -d "$SCR/tree" "$img"
		[ -z "$IMAGES" ] || echo done >"$img.done"
	elif [ -z "$IMAGES" ] || [ ! -s "$img.done" ]; then
		rm -f "$img"
		truncate -s "$SIZE" "$img"
		mkfs.ext4 -q -F "$img"
		LOOP=$(losetup -f --show "$img")
		mount "$LOOP" "$MNT"
		populate "$MNT" "$n"
		umount "$MNT"
		losetup -d "$LOOP"
		LOOP=
		[ -z "$IMAGES" ] || echo done >"$img.done"
	fi
	rm -rf "$SCR/tree"
	read -r et em < <(measure e2fsck e2fsck -fn "$img")
	[ -n "$IMAGES" ] || rm -f "$img"
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a=="NA"||b=="NA"||b==0) print "NA"; else printf "%.2f", a/b }'; }
	mib() { awk -v k="$1" 'BEGIN{ if (k=="NA") print "NA"; else printf "%.1f", k/1024 }'; }
	printf '%-9s %12s %12s %12s %12s %8s %8s\n' "$n" "$at" "$(mib "$am")" "$et" "$(mib "$em")" \
		"$(ratio "$at" "$et")" "$(ratio "$am" "$em")" | tee -a "$OUT/fsck.txt"
	json+="{\"files\":$n,\"arborfs_s\":\"$at\",\"arborfs_kib\":\"$am\",\"e2fsck_s\":\"$et\",\"e2fsck_kib\":\"$em\"},"
done
echo "${json%,}]" >"$OUT/fsck.json"
echo "ratios: arborfs / e2fsck (lower is better); results in $OUT"
