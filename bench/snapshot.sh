#!/usr/bin/env bash
# bench/snapshot.sh - snapshot creation and deletion, arborfs against
# kernel btrfs on a loop device, on the same trees in the same run.  As
# root.
#
#   bench/snapshot.sh [--files "1000 10000 100000"] [--build DIR]
#                     [--out DIR] [--size SIZE] [--runs N]
#
# For each N: N files of 0..300 bytes, 1,000 per directory, built once in
# a host directory, copied into a fresh image of each filesystem at mkfs
# time (mkfs.arborfs -r, mkfs.btrfs --rootdir), then mounted (arborfs: its
# FUSE daemon; btrfs: the kernel).  Timed, each --runs times (the median
# is reported):
#   snapshot  `arbor subvolume snapshot -r MNT MNT/sN` against
#             `btrfs subvolume snapshot -r MNT MNT/sN`, wall time of the
#             command (both commit before they return);
#   written   bytes the snapshot wrote to the image: the daemon's wchar
#             (/proc/PID/io) for arborfs, the loop device's written
#             sectors (/sys/block/loopX/stat, after a sync) for btrfs;
#   delete    `arbor subvolume delete` against `btrfs subvolume delete`
#             (the caller's time: both return before the space is back);
#   clean     the time until the space is back: `arbor subvolume sync`
#             against `btrfs subvolume sync`, after the delete.
#
# Then, with --latency-files N (default 100,000; 1,000,000 with --full;
# 0: skip), the latency of other operations while the cleaner works: a
# tree of N files (as above) and a 256 MiB file, a snapshot of the root,
# every file of the source touched (so that the snapshot's leaves are its
# own: deleting it frees them all), then a probe (bench/lib/latprobe.py)
# alternating stat(2) of a file not looked up before and a 4 KiB pread at
# a random offset of the big file (its page cache dropped first with
# POSIX_FADV_DONTNEED, so each read reaches the filesystem), for
# --idle-secs (default 8) on the idle filesystem, then from the delete of
# the snapshot until `subvolume sync` returns, each run with cold caches
# (arborfs remounted, the kernel's dropped).  Reported: stat and read
# p50 and p99, idle and while cleaning, over the first n operations of
# each run (n the smaller count: a longer run finds more of its lookups
# cached by its own earlier ones), their ratio, and the cleaner's
# throughput (files and MiB of space given back per second, from df),
# each against btrfs.
# Output: a table with arborfs/btrfs ratios, and snapshot.json in the
# output directory.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
FILES="1000 10000 100000"
BUILD=$REPO/build
OUT=
SIZE=4G
RUNS=5
LATN=100000
IDLE_SECS=8
while [ $# -gt 0 ]; do
	case $1 in
	--full) FILES="1000 10000 100000 1000000"; LATN=1000000; SIZE=16G ;;
	--latency-files) LATN=$2; shift ;;
	--idle-secs) IDLE_SECS=$2; shift ;;
	--files) FILES=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--out) OUT=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	-h | --help) sed -n 2,41p "$0"; exit 0 ;;
	*) echo "snapshot.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "snapshot.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "snapshot.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs cli/arbor; do
	[ -x "$BUILD/$b" ] || { echo "snapshot.sh: $BUILD/$b not built" >&2; exit 1; }
done
ARBOR=$BUILD/cli/arbor
OUT=${OUT:-$REPO/bench/results/snapshot-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SCR=$(mktemp -d /var/tmp/arbor-snapbench.XXXXXX)
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

# ---- latency while cleaning -------------------------------------------

PROBE=$HERE/lib/latprobe.py
used_bytes() { df -B1 --output=used "$MNT" | tail -1 | tr -d ' '; }

# caches cold before a probe: the kernel's, and for arborfs the daemon's
# (a remount of $img): drop_caches does not empty a daemon's node cache,
# and what the touch of the source or the idle probe left in it favoured
# one run over the other
cold_caches() {
	if [ "$1" = arbor ]; then
		fusermount3 -u "$MNT"
		wait "$DPID" || true
		"$BUILD/fuse/arborfs" "$img" "$MNT" -f -o commit=30 &
		DPID=$!
		for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
		mountpoint -q "$MNT"
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# latency FS: the phases on the filesystem mounted at MNT (tree and big
# file in it); results in L[FS,...]
declare -A L
latency() {
	local fs=$1 sn=$SCR/snap del sync
	if [ "$fs" = arbor ]; then
		"$ARBOR" subvolume snapshot "$MNT" "$MNT/lat" >/dev/null
		del=("$ARBOR" subvolume delete "$MNT/lat")
		sync=("$ARBOR" subvolume sync "$MNT")
	else
		btrfs subvolume snapshot "$MNT" "$MNT/lat" >/dev/null
		# -C: commit after, which wakes its cleaner (else it waits
		# for the next periodic commit, up to 30 s)
		del=(btrfs subvolume delete -C "$MNT/lat")
		sync=(btrfs subvolume sync "$MNT")
	fi
	# the source's leaves rewritten: the snapshot's are its own
	find "$MNT" -path "$MNT/lat" -prune -o -name 'f*' -type f -print0 |
		xargs -0 touch
	sync -f "$MNT"
	if [ "$fs" = arbor ]; then "$ARBOR" filesystem sync "$MNT" >/dev/null; fi
	cold_caches "$fs"
	python3 "$PROBE" --root "$MNT" --files "$LATN" --big "$MNT/big.dat" \
		--secs "$IDLE_SECS" --seed 1 --samples >"$sn.idle"
	cold_caches "$fs"
	local u0 u1 t0 t1 ppid
	u0=$(used_bytes)
	rm -f "$sn.done" "$sn.ready"
	python3 "$PROBE" --root "$MNT" --files "$LATN" --big "$MNT/big.dat" \
		--until "$sn.done" --ready "$sn.ready" --seed 2 --samples \
		>"$sn.clean" &
	ppid=$!
	while [ ! -e "$sn.ready" ]; do sleep 0.05; done
	sleep 0.1
	t0=$(now)
	"${del[@]}" >/dev/null
	"${sync[@]}" >/dev/null
	t1=$(now)
	touch "$sn.done"
	wait "$ppid"
	rm -f "$sn.done"
	sync -f "$MNT"
	u1=$(used_bytes)
	python3 - "$sn.idle" "$sn.clean" "$t0" "$t1" "$u0" "$u1" "$LATN" >"$sn.kv" <<'EOF'
import json, sys
idle, clean = (json.load(open(p)) for p in sys.argv[1:3])
t0, t1, u0, u1, n = (float(x) for x in sys.argv[3:8])

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))] if v else 0.0

for op in ("stat", "read"):
    m = min(len(idle[op]["samples"]), len(clean[op]["samples"]))
    for p in (50, 99):
        print("%s_p%d_idle=%.1f" % (op, p, pct(idle[op]["samples"][:m], p)))
        print("%s_p%d_clean=%.1f" % (op, p, pct(clean[op]["samples"][:m], p)))
    print("%s_n_clean=%d" % (op, clean[op]["n"]))
    print("%s_n_compared=%d" % (op, m))
dt = max(t1 - t0, 1e-6)
print("clean_ms=%.1f" % (dt * 1000))
print("clean_files_s=%.0f" % (n / dt))
print("clean_mib_s=%.1f" % (max(u0 - u1, 0) / dt / 1048576))
EOF
	while IFS== read -r k v; do L[$fs,$k]=$v; done <"$sn.kv"
}

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{($2 - $1) * 1000:.1f}')"; }
median() { python3 -c "import sys,statistics;print(statistics.median(map(float,sys.argv[1:])))" "$@"; }
wchar() { awk '/^wchar/ {print $2}' "/proc/$DPID/io"; }
loop_written() { awk '{printf "%.0f\n", $7 * 512}' "/sys/block/$(basename "$LOOP")/stat"; }

declare -A R
for n in $FILES; do
	tree=$SCR/tree-$n
	populate "$tree" "$n"

	# ---- arborfs
	img=$SCR/arbor.img
	rm -f "$img"
	"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" -r "$tree" "$img" >/dev/null
	"$BUILD/fuse/arborfs" "$img" "$MNT" -f -o commit=30 &
	DPID=$!
	for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
	mountpoint -q "$MNT"
	snaps=() writes=() dels=() cleans=()
	for r in $(seq "$RUNS"); do
		sync -f "$MNT"
		w0=$(wchar); t0=$(now)
		"$ARBOR" subvolume snapshot -r "$MNT" "$MNT/s$r" >/dev/null
		t1=$(now); w1=$(wchar)
		snaps+=("$(elapsed "$t0" "$t1")"); writes+=($((w1 - w0)))
	done
	for r in $(seq "$RUNS"); do
		t0=$(now)
		"$ARBOR" subvolume delete "$MNT/s$r" >/dev/null
		t1=$(now)
		"$ARBOR" subvolume sync "$MNT" >/dev/null
		t2=$(now)
		dels+=("$(elapsed "$t0" "$t1")"); cleans+=("$(elapsed "$t1" "$t2")")
	done
	R[arbor,snap,$n]=$(median "${snaps[@]}")
	R[arbor,written,$n]=$(median "${writes[@]}")
	R[arbor,delete,$n]=$(median "${dels[@]}")
	R[arbor,clean,$n]=$(median "${cleans[@]}")
	fusermount3 -u "$MNT"
	wait "$DPID" || true
	DPID=
	rm -f "$img"

	# ---- btrfs on a loop device
	img=$SCR/btrfs.img
	truncate -s "$SIZE" "$img"
	mkfs.btrfs -q -f --rootdir "$tree" "$img" >/dev/null
	LOOP=$(losetup -f --show "$img")
	mount "$LOOP" "$MNT"
	snaps=() writes=() dels=() cleans=()
	for r in $(seq "$RUNS"); do
		sync -f "$MNT"
		w0=$(loop_written); t0=$(now)
		btrfs subvolume snapshot -r "$MNT" "$MNT/s$r" >/dev/null
		t1=$(now)
		sync -f "$MNT"
		w1=$(loop_written)
		snaps+=("$(elapsed "$t0" "$t1")"); writes+=($((w1 - w0)))
	done
	for r in $(seq "$RUNS"); do
		t0=$(now)
		btrfs subvolume delete "$MNT/s$r" >/dev/null
		t1=$(now)
		btrfs subvolume sync "$MNT" >/dev/null
		t2=$(now)
		dels+=("$(elapsed "$t0" "$t1")"); cleans+=("$(elapsed "$t1" "$t2")")
	done
	R[btrfs,snap,$n]=$(median "${snaps[@]}")
	R[btrfs,written,$n]=$(median "${writes[@]}")
	R[btrfs,delete,$n]=$(median "${dels[@]}")
	R[btrfs,clean,$n]=$(median "${cleans[@]}")
	umount "$MNT"
	losetup -d "$LOOP"
	LOOP=
	rm -f "$img"
	rm -rf "$tree"
done

if [ "$LATN" -gt 0 ]; then
	tree=$SCR/tree-lat
	populate "$tree" "$LATN"
	head -c $((256 << 20)) /dev/urandom >"$tree/big.dat"

	img=$SCR/arbor.img
	rm -f "$img"
	"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" -r "$tree" "$img" >/dev/null
	"$BUILD/fuse/arborfs" "$img" "$MNT" -f -o commit=30 &
	DPID=$!
	for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
	mountpoint -q "$MNT"
	latency arbor
	fusermount3 -u "$MNT"
	wait "$DPID" || true
	DPID=
	rm -f "$img"

	img=$SCR/btrfs.img
	truncate -s "$SIZE" "$img"
	mkfs.btrfs -q -f --rootdir "$tree" "$img" >/dev/null
	LOOP=$(losetup -f --show "$img")
	mount "$LOOP" "$MNT"
	latency btrfs
	umount "$MNT"
	losetup -d "$LOOP"
	LOOP=
	rm -f "$img"
	rm -rf "$tree"
fi

{
	printf '%-8s %-8s %12s %12s %8s\n' files metric arborfs btrfs ratio
	for n in $FILES; do
		for m in snap written delete clean; do
			a=${R[arbor,$m,$n]} b=${R[btrfs,$m,$n]}
			unit=ms; [ "$m" = written ] && unit=B
			printf '%-8s %-8s %12s %12s %8s\n' "$n" "$m($unit)" "$a" "$b" \
				"$(python3 -c "a,b=float('$a'),float('$b');print(f'{a/b:.2f}' if b else '-')")"
		done
	done
	if [ "$LATN" -gt 0 ]; then
		echo
		echo "latency while a $LATN-file snapshot is cleaned (us; clean/idle: the ratio of the two)"
		printf '%-22s %10s %10s %10s %10s %10s %10s %8s\n' metric arb-idle arb-clean clean/idle \
			btr-idle btr-clean clean/idle arb/btr
		for op in stat read; do
			for p in p50 p99; do
				ai=${L[arbor,${op}_${p}_idle]} ac=${L[arbor,${op}_${p}_clean]}
				bi=${L[btrfs,${op}_${p}_idle]} bc=${L[btrfs,${op}_${p}_clean]}
				printf '%-22s %10s %10s %10s %10s %10s %10s %8s\n' "$op $p" "$ai" "$ac" \
					"$(python3 -c "print(f'{$ac/$ai:.2f}')")" "$bi" "$bc" \
					"$(python3 -c "print(f'{$bc/$bi:.2f}')")" \
					"$(python3 -c "print(f'{$ac/$bc:.2f}')")"
			done
			printf '%-22s %10s %10s\n' "$op ops while cleaning" \
				"${L[arbor,${op}_n_clean]}" "${L[btrfs,${op}_n_clean]}"
			printf '%-22s %10s %10s\n' "$op ops compared" \
				"${L[arbor,${op}_n_compared]}" "${L[btrfs,${op}_n_compared]}"
		done
		for m in clean_ms clean_files_s clean_mib_s; do
			a=${L[arbor,$m]} b=${L[btrfs,$m]}
			printf '%-22s %10s %10s %10s\n' "$m" "$a" "$b" \
				"$(python3 -c "a,b=float('$a'),float('$b');print(f'{a/b:.2f}' if b else '-')")"
		done
	fi
} | tee "$OUT/snapshot.txt"
python3 - "$OUT/snapshot.json" "$FILES" <<EOF
import json, sys
rows = """$(for k in "${!R[@]}"; do echo "$k=${R[$k]}"; done)""".split()
lat = """$(for k in "${!L[@]}"; do echo "$k=${L[$k]}"; done)""".split()
out = {}
for r in rows:
    k, v = r.split("=")
    fs, m, n = k.split(",")
    out.setdefault(n, {}).setdefault(fs, {})[m] = float(v)
latency = {}
for r in lat:
    k, v = r.split("=")
    fs, m = k.split(",")
    latency.setdefault(fs, {})[m] = float(v)
json.dump({"date": "$(date -Is)", "commit": "$(git -C "$REPO" rev-parse --short HEAD)",
           "runs": $RUNS, "results": out, "latency_files": $LATN,
           "latency": latency}, open(sys.argv[1], "w"), indent=1)
EOF
echo "results in $OUT"
