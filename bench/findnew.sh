#!/usr/bin/env bash
# bench/findnew.sh - find-new with 10 changed files in trees of growing
# size: `arbor subvolume find-new` against `find -newer` over the same
# arborfs mount and kernel btrfs's `btrfs subvolume find-new` on a loop
# device holding the same tree, in the same run, cold.  As root.
#
#   bench/findnew.sh [--files "10000 100000 1000000"] [--build DIR]
#                    [--out DIR] [--size SIZE] [--runs N]
#
# For each N: N files of 0..300 bytes, 1,000 per directory, built once in
# a host directory and copied into a fresh image of each filesystem at
# mkfs time (mkfs.arborfs -r, mkfs.btrfs --rootdir); the generation is
# taken, then 10 random files are appended to and committed.  Each
# measurement starts cold: the filesystem is unmounted and mounted again
# and the host's page cache dropped (echo 3 > /proc/sys/vm/drop_caches),
# so the image is read from the disk.  Timed, each --runs times (median):
#   findnew    `arbor subvolume find-new --json MNT GEN`, wall time, and
#              the tree nodes it read from the image (its nodes_read);
#   find       `find MNT -type f -newer STAMP` on the arborfs mount (what
#              a tool without generations must do: stat every file);
#   btrfs      `btrfs subvolume find-new MNT GEN` on the btrfs loop mount.
# Every answer must name the 10 files (checked).  Output: a table with
# the ratios findnew/btrfs and findnew/find, and findnew.json in the
# output directory.  Build with --buildtype=release (build-rel).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
FILES="10000 100000 1000000"
BUILD=$REPO/build-rel
OUT=
SIZE=8G
RUNS=3
while [ $# -gt 0 ]; do
	case $1 in
	--files) FILES=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--out) OUT=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	-h | --help) sed -n 2,27p "$0"; exit 0 ;;
	*) echo "findnew.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "findnew.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "findnew.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs cli/arbor; do
	[ -x "$BUILD/$b" ] || { echo "findnew.sh: $BUILD/$b not built" >&2; exit 1; }
done
ARBOR=$BUILD/cli/arbor
OUT=${OUT:-$REPO/bench/results/findnew-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SCR=$(mktemp -d /var/tmp/arbor-findnew.XXXXXX)
MNT=$SCR/mnt
mkdir -p "$MNT"
DPID= LOOP= IMG=
cleanup() {
	if mountpoint -q "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || umount -l "$MNT" || true
	fi
	[ -z "$DPID" ] || { wait "$DPID" 2>/dev/null || true; }
	[ -z "$LOOP" ] || losetup -d "$LOOP" 2>/dev/null || true
	rm -rf "$SCR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

populate() { # DIR N
	python3 - "$1" "$2" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%04d" % (i // 1000))
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%07d" % i), "wb") as f:
        f.write(b"x" * (i % 301))
EOF
}

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{($2 - $1) * 1000:.1f}')"; }
median() { python3 -c "import sys,statistics;print(statistics.median(map(float,sys.argv[1:])))" "$@"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
arbor_mount() {
	"$BUILD/fuse/arborfs" "$IMG" "$MNT" -f -o commit=30 &
	DPID=$!
	for _ in $(seq 300); do mountpoint -q "$MNT" && break; sleep 0.1; done
	mountpoint -q "$MNT"
}
arbor_umount() {
	"$ARBOR" unmount "$MNT" >/dev/null
	wait "$DPID" || true
	DPID=
}
# the 10 changed files named in an answer (stdin): "ok" or what is missing
check10() {
	python3 -c '
import sys
got = sys.stdin.read()
miss = [p for p in sys.argv[1:] if p not in got]
print("ok" if not miss else "missing %s" % miss)' "${CHANGED[@]}"
}

declare -A R
for n in $FILES; do
	tree=$SCR/tree-$n
	echo "== $n files: building the tree" >&2
	populate "$tree" "$n"
	CHANGED=()
	for i in $(python3 -c "import random; random.seed($n); print(' '.join(str(random.randrange($n)) for _ in range(10)))"); do
		CHANGED+=("$(printf 'd%04d/f%07d' $((i / 1000)) "$i")")
	done

	# ---- arborfs
	IMG=$SCR/arbor.img
	rm -f "$IMG"
	"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" -r "$tree" "$IMG" >/dev/null
	arbor_mount
	gen=$("$ARBOR" filesystem generation --json "$MNT" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["generation"])')
	touch "$SCR/stamp"
	sleep 0.05
	for f in "${CHANGED[@]}"; do echo changed >>"$MNT/$f"; done
	"$ARBOR" filesystem sync "$MNT" >/dev/null
	arbor_umount
	fn=() nodes=() fi=()
	for _ in $(seq "$RUNS"); do
		drop
		arbor_mount
		t0=$(now)
		"$ARBOR" subvolume find-new --json "$MNT" "$gen" >"$SCR/fn.json"
		t1=$(now)
		fn+=("$(elapsed "$t0" "$t1")")
		nodes+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes_read"])' "$SCR/fn.json")")
		[ "$(check10 <"$SCR/fn.json")" = ok ] || { echo "findnew.sh: find-new: $(check10 <"$SCR/fn.json")" >&2; exit 1; }
		arbor_umount
		drop
		arbor_mount
		t0=$(now)
		(cd "$MNT" && find . -type f -newer "$SCR/stamp") >"$SCR/find.txt"
		t1=$(now)
		fi+=("$(elapsed "$t0" "$t1")")
		[ "$(check10 <"$SCR/find.txt")" = ok ] || { echo "findnew.sh: find: $(check10 <"$SCR/find.txt")" >&2; exit 1; }
		arbor_umount
	done
	R[findnew,$n]=$(median "${fn[@]}")
	R[nodes,$n]=$(median "${nodes[@]}")
	R[find,$n]=$(median "${fi[@]}")
	rm -f "$IMG"

	# ---- btrfs on a loop device
	IMG=$SCR/btrfs.img
	truncate -s "$SIZE" "$IMG"
	mkfs.btrfs -q -f --rootdir "$tree" "$IMG" >/dev/null
	LOOP=$(losetup -f --show "$IMG")
	mount "$LOOP" "$MNT"
	sync -f "$MNT"
	bgen=$(btrfs subvolume find-new "$MNT" 99999999 | awk '/transid marker/ {print $4}')
	for f in "${CHANGED[@]}"; do echo changed >>"$MNT/$f"; done
	sync -f "$MNT"
	umount "$MNT"
	bt=()
	for _ in $(seq "$RUNS"); do
		drop
		mount "$LOOP" "$MNT"
		t0=$(now)
		btrfs subvolume find-new "$MNT" "$bgen" >"$SCR/btrfs.txt"
		t1=$(now)
		bt+=("$(elapsed "$t0" "$t1")")
		[ "$(check10 <"$SCR/btrfs.txt")" = ok ] || { echo "findnew.sh: btrfs: $(check10 <"$SCR/btrfs.txt")" >&2; exit 1; }
		umount "$MNT"
	done
	R[btrfs,$n]=$(median "${bt[@]}")
	losetup -d "$LOOP"
	LOOP=
	rm -f "$IMG"
	rm -rf "$tree"
done

ratio() { python3 -c "a,b=float('$1'),float('$2');print(f'{a/b:.2f}' if b else '-')"; }
{
	printf '%-9s %12s %8s %12s %12s %10s %10s\n' files findnew_ms nodes find_ms btrfs_ms vs_btrfs vs_find
	for n in $FILES; do
		printf '%-9s %12s %8s %12s %12s %10s %10s\n' "$n" "${R[findnew,$n]}" \
			"${R[nodes,$n]}" "${R[find,$n]}" "${R[btrfs,$n]}" \
			"$(ratio "${R[findnew,$n]}" "${R[btrfs,$n]}")" \
			"$(ratio "${R[findnew,$n]}" "${R[find,$n]}")"
	done
} | tee "$OUT/findnew.txt"
python3 - "$OUT/findnew.json" <<EOF
import json, sys
rows = """$(for k in "${!R[@]}"; do echo "$k=${R[$k]}"; done)""".split()
out = {}
for r in rows:
    k, v = r.split("=")
    m, n = k.split(",")
    out.setdefault(n, {})[m] = float(v)
json.dump({"date": "$(date -Is)", "commit": "$(git -C "$REPO" rev-parse --short HEAD)",
           "runs": $RUNS, "results": out}, open(sys.argv[1], "w"), indent=1)
EOF
echo "results in $OUT"
