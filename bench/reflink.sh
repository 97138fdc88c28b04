#!/usr/bin/env bash
# bench/reflink.sh - cp of a large file: sharing (reflink) against a byte
# copy on arborfs, and kernel btrfs `cp --reflink=always` on a loop device
# in the same run.  As root.
#
#   bench/reflink.sh [--sizes "1G 10G"] [--build DIR] [--runs N]
#
# For each size S, on a fresh image of each filesystem (sparse image
# file; btrfs on a loop device over one): a file of S bytes of zeros
# written with dd and committed (sync), then, each --runs times (median
# reported, the copies deleted and committed between runs):
#   share  arborfs: plain `cp` (coreutils uses copy_file_range, which the
#          daemon answers by sharing); btrfs: `cp --reflink=always`;
#          wall time of the cp plus the sync after it (both commit);
#   bytes  `dd bs=4M` of the same file (read and write: a byte copy),
#          wall time plus the sync after it;
#   space  bytes of free space the copy took (statvfs, after the sync).
# Goal (issue 28): share time flat in S and within a small factor of
# btrfs; share space near 0.  Prints a table with arborfs/btrfs ratios.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
SIZES="1G 10G"
BUILD=$REPO/build
RUNS=3
while [ $# -gt 0 ]; do
	case $1 in
	--sizes) SIZES=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	-h | --help) sed -n 2,19p "$0"; exit 0 ;;
	*) echo "reflink.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "reflink.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "reflink.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs; do
	[ -x "$BUILD/$b" ] || { echo "reflink.sh: $BUILD/$b not built" >&2; exit 1; }
done
SCR=$(mktemp -d /var/tmp/arbor-reflinkbench.XXXXXX)
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

bytes_of() { numfmt --from=iec "$1"; }
now() { date +%s.%N; }
free_b() { python3 -c 'import os,sys; s=os.statvfs(sys.argv[1]); print(s.f_bfree*s.f_frsize)' "$MNT"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mount_fs() { # FS SIZE_BYTES
	local img=$SCR/img
	rm -f "$img"
	truncate -s $(($2 * 5 / 2 + (1 << 30))) "$img"
	if [ "$1" = arborfs ]; then
		"$BUILD/mkfs/mkfs.arborfs" -q "$img"
		"$BUILD/fuse/arborfs" -f "$img" "$MNT" >"$SCR/daemon.log" 2>&1 &
		DPID=$!
		for _ in $(seq 300); do mountpoint -q "$MNT" && return; sleep 0.1; done
		echo "reflink.sh: arborfs did not mount" >&2
		exit 1
	fi
	LOOP=$(losetup --find --show "$img")
	mkfs.btrfs -q -f "$LOOP" >/dev/null
	mount "$LOOP" "$MNT"
}

umount_fs() {
	if [ -n "$DPID" ]; then
		# the kernel may hold the mount a moment after the last sync
		for _ in $(seq 20); do
			fusermount3 -u "$MNT" 2>/dev/null && break
			sleep 0.5
		done
		mountpoint -q "$MNT" && { echo "reflink.sh: cannot unmount $MNT" >&2; exit 1; }
		wait "$DPID" || true
		DPID=
	else
		umount "$MNT"
		losetup -d "$LOOP"
		LOOP=
	fi
}

# run FS SIZE: prints "share_s bytes_s share_space bytes_space"
run() {
	local fs=$1 size=$2 t0 t1 f0 f1 sh=() by=() shs=() bys=()
	mount_fs "$fs" "$size"
	dd if=/dev/zero of="$MNT/src" bs=4M count=$((size >> 22)) status=none
	sync -f "$MNT"
	for _ in $(seq "$RUNS"); do
		f0=$(free_b)
		t0=$(now)
		if [ "$fs" = arborfs ]; then
			cp "$MNT/src" "$MNT/share"
		else
			cp --reflink=always "$MNT/src" "$MNT/share"
		fi
		sync -f "$MNT"
		t1=$(now)
		f1=$(free_b)
		sh+=("$(echo "$t1 - $t0" | bc -l)")
		shs+=($((f0 - f1)))
		f0=$(free_b)
		t0=$(now)
		dd if="$MNT/src" of="$MNT/bytes" bs=4M status=none
		sync -f "$MNT"
		t1=$(now)
		f1=$(free_b)
		by+=("$(echo "$t1 - $t0" | bc -l)")
		bys+=($((f0 - f1)))
		rm -f "$MNT/share" "$MNT/bytes"
		sync -f "$MNT"
		sync -f "$MNT"
	done
	umount_fs
	printf '%s %s %s %s\n' \
		"$(printf '%s\n' "${sh[@]}" | median)" "$(printf '%s\n' "${by[@]}" | median)" \
		"$(printf '%s\n' "${shs[@]}" | median)" "$(printf '%s\n' "${bys[@]}" | median)"
}

printf '%-6s %-8s %10s %10s %12s %12s\n' size fs share_s bytes_s share_MiB bytes_MiB
for s in $SIZES; do
	b=$(bytes_of "$s")
	read -r a_sh a_by a_shs a_bys < <(run arborfs "$b")
	read -r b_sh b_by b_shs b_bys < <(run btrfs "$b")
	printf '%-6s %-8s %10.3f %10.3f %12.1f %12.1f\n' "$s" arborfs "$a_sh" "$a_by" \
		"$(echo "$a_shs / 1048576" | bc -l)" "$(echo "$a_bys / 1048576" | bc -l)"
	printf '%-6s %-8s %10.3f %10.3f %12.1f %12.1f\n' "$s" btrfs "$b_sh" "$b_by" \
		"$(echo "$b_shs / 1048576" | bc -l)" "$(echo "$b_bys / 1048576" | bc -l)"
	printf '%-6s %-8s %10.2f %10.2f\n' "$s" ratio "$(echo "$a_sh / $b_sh" | bc -l)" \
		"$(echo "$a_by / $b_by" | bc -l)"
done
