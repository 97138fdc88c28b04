#!/usr/bin/env bash
# bench/incremental.sh - incremental backups of a tree of many small files:
# find-new, `send -p` and receive after 0.1%, 1% and 10% of the files
# changed, arborfs against kernel btrfs on the same data in the same run.
# As root.
#
#   bench/incremental.sh [--build DIR] [--files N] [--runs N] [--size SIZE]
#                        [--fs "arborfs btrfs"] [--remount] [--out DIR]
#   bench/incremental.sh --report RAW.TSV    (the table of a run, even unfinished)
#
# ARBOR_BENCH_SCALE=small sets --files 10000 (a quick trial run).
# The data is made once in a tmpfs scratch directory (/dev/shm): --files
# (default 100000) files of 4 KiB from os.urandom, 1,000 per directory
# (d0000/f0000000 ...), and for each change fraction, 0.1%, 1% and 10%
# (N/1000, N/100, N/10 files), a seeded random choice of the files
# (random.Random(fraction).sample: the same files every run and on every
# filesystem) with new random 4 KiB contents for them, also made once.
# Each --runs times (median reported), for each filesystem, on two fresh
# sparse image files of --size (default 4G) under /var/tmp, a source and a
# destination (arborfs: mkfs.arborfs and the build's `arborfs -f`, default
# mount options; btrfs: `losetup --direct-io=on`, mkfs.btrfs, mount):
#   tree     a subvolume `vol` on the source gets the tree (`cp -a`), then
#            the commit (`sync -f`, and `arbor filesystem sync` on
#            arborfs); timed, warm, for the record; read-only snapshot s0.
#   full     `send s0 | wc -c`, cold: wall time and stream bytes; then,
#            untimed, `send s0 > FILE` (FILE in /dev/shm, so reading it
#            costs no disk and survives the cache drop), and, cold, the
#            wall time of `receive -f FILE DST/recv` plus the
#            destination's commit.
#   0.1%, 1%, 10%, one after another in the same subvolume: the chosen
#            files rewritten whole (open O_TRUNC, one 4 KiB write; python3),
#            commit, read-only snapshot sK (s1, s2, s3: each fraction's
#            parent is the snapshot before it, s0 for 0.1%); then, cold:
#     find-new  `arbor subvolume find-new --json sK GEN`, GEN the
#               generation of s(K-1) (`arbor subvolume show --json`, its
#               gen), against `btrfs subvolume find-new sK GEN+1` (btrfs
#               lists extents of generation >= GEN; its GEN is the
#               `Generation:` of `btrfs subvolume show s(K-1)`); wall
#               time; every changed file must be named, and the files
#               named are recorded (and, for arborfs, the tree nodes
#               find-new read from the image: its nodes_read);
#     send      `send -p s(K-1) sK | wc -c`: wall time and stream bytes;
#     receive   untimed `send -p s(K-1) sK > FILE`, then the wall time
#               of `receive -f FILE DST/recv` plus the destination's commit.
# The timed send of a snapshot is its first: arborfs computes the digest
# for the stream's END then, from the parent's kept sum and what differs
# between the two snapshots (docs/design/send.md, "The digest"), and
# keeps it; receive does the same for the received tree.
# "Cold" is what sendrecv.sh does: `sync; echo 3 > /proc/sys/vm/drop_caches`
# before each timed command, so both read their images from the disk; the
# arborfs daemons keep their own node cache (cache_size, 64M by default).
# --remount also unmounts and mounts both filesystems again before each
# timed command (a fresh arborfs daemon, as findnew.sh does).
# Checks: each received snapshot (s0 and every sK) is compared with the
# source's by `diff -r`, and for arborfs `arbor subvolume digest` of both
# must be equal (arbor receive also verifies the sender's digest before
# it publishes); the arborfs images get `fsck.arborfs -n` at the end.
# Output: a markdown table (medians; arborfs/btrfs ratios), printed and
# written to bench/results/incremental-DATE.md; raw.tsv, meta.txt
# (uptime at the start, each round and the end, kernel, btrfs-progs,
# commit) and the logs in bench/results/incremental-DATE/.  MB is 10^6
# bytes.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=$REPO/build-rel
FILES=100000
[ "${ARBOR_BENCH_SCALE:-}" = small ] && FILES=10000
RUNS=1
SIZE=4G
FSES="arborfs btrfs"
REMOUNT=
OUT=
REPORT=
ARGS=$*
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$2; shift ;;
	--files) FILES=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--fs) FSES=$2; shift ;;
	--remount) REMOUNT=1 ;;
	--out) OUT=$2; shift ;;
	--report) REPORT=$2; shift ;;
	-h | --help) sed -n 2,63p "$0"; exit 0 ;;
	*) echo "incremental.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

# ---- the table ---------------------------------------------------------------

table() { # RAW
python3 - "$1" <<'EOF'
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]).read().splitlines()[1:]:
    run, fs, m, x = line.split("\t")
    if x != "NA":
        v[(fs, m)].append(float(x))
med = {k: statistics.median(x) for k, x in v.items()}
rows = []
for k, pct in ((1, "0.1%"), (2, "1%"), (3, "10%")):
    n = med.get(("arborfs", "f%d_changed" % k), med.get(("btrfs", "f%d_changed" % k)))
    p = "%s (%d files)" % (pct, n) if n is not None else pct
    rows += [
        ("f%d_findnew_s" % k, "%s: find-new, s" % p),
        ("f%d_named" % k, "%s: find-new, files named" % p),
        ("f%d_nodes" % k, "%s: find-new, nodes read (arborfs)" % p),
        ("f%d_send_s" % k, "%s: send -p \\| wc -c, s" % p),
        ("f%d_stream_MB" % k, "%s: stream, MB" % p),
        ("f%d_recv_s" % k, "%s: receive -f (with commit), s" % p),
    ]
rows += [
    ("full_send_s", "full (s0): send \\| wc -c, s"),
    ("full_stream_MB", "full (s0): stream, MB"),
    ("full_recv_s", "full (s0): receive -f (with commit), s"),
    ("tree_s", "tree copy in (cp -a, commit, warm), s"),
]
def cell(fs, m):
    k = (fs, m)
    if k not in v:
        return "-"
    if m.endswith(("_named", "_nodes")):  # counts
        fmt = lambda y: "%g" % y
    else:
        fmt = lambda y: "%.3f" % y if y < 10 else "%.1f" % y
    s = fmt(med[k])
    if len(v[k]) > 1:
        s += " (%s-%s)" % (fmt(min(v[k])), fmt(max(v[k])))
    return s
print("| metric | arborfs | btrfs | arborfs/btrfs |")
print("| --- | ---: | ---: | ---: |")
for m, name in rows:
    if not any((fs, m) in v for fs in ("arborfs", "btrfs")):
        continue
    a, b = med.get(("arborfs", m)), med.get(("btrfs", m))
    r = "%.2f" % (a / b) if a is not None and b else "-"
    print("| %s | %s | %s | %s |" % (name, cell("arborfs", m), cell("btrfs", m), r))
EOF
}
if [ -n "$REPORT" ]; then
	table "$REPORT"
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "incremental.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "incremental.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
[ "$FILES" -ge 1000 ] 2>/dev/null || { echo "incremental.sh: --files must be at least 1000" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs cli/arbor fsck/fsck.arborfs; do
	[ -x "$BUILD/$b" ] || { echo "incremental.sh: $BUILD/$b not built" >&2; exit 1; }
done
ARBOR=$BUILD/cli/arbor
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$REPO/bench/results/incremental-$STAMP}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd -P)
MD=$(dirname "$OUT")/$(basename "$OUT").md
SCR=$(mktemp -d /var/tmp/arbor-incremental.XXXXXX)
SRC=$(mktemp -d /dev/shm/arbor-incrsrc.XXXXXX)
STREAM=$SRC/stream
# two of everything: index 0 is the source, 1 the destination
MNTS=("$SCR/src" "$SCR/dst")
IMGS=("$SCR/src.img" "$SCR/dst.img")
DPIDS=("" "")
LOOPS=("" "")
mkdir -p "${MNTS[@]}"
cleanup() {
	local i
	for i in 0 1; do
		if mountpoint -q "${MNTS[$i]}"; then
			fusermount3 -u "${MNTS[$i]}" 2>/dev/null || umount "${MNTS[$i]}" 2>/dev/null ||
				umount -l "${MNTS[$i]}" || true
		fi
		if [ -n "${DPIDS[$i]}" ]; then
			for _ in $(seq 50); do kill -0 "${DPIDS[$i]}" 2>/dev/null || break; sleep 0.2; done
			kill "${DPIDS[$i]}" 2>/dev/null || true
			wait "${DPIDS[$i]}" 2>/dev/null || true
		fi
		[ -z "${LOOPS[$i]}" ] || losetup -d "${LOOPS[$i]}" 2>/dev/null || true
	done
	rm -rf "$SCR" "$SRC"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { python3 -c "import sys; print('%.3f' % ($(now) - $1))"; }
mb() { python3 -c "print('%.3f' % (($1) / 1e6))"; }
dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
RAW=$OUT/raw.tsv
printf 'run\tfs\tmetric\tvalue\n' >"$RAW"
rec() { printf '%s\t%s\t%s\t%s\n' "$RUN" "$1" "$2" "$3" >>"$RAW"; }
die() { echo "incremental.sh: $*" >&2; exit 1; }

# ---- mounting: FS I ----------------------------------------------------------

mkfs_fs() { # FS I: a fresh image (and loop device)
	local fs=$1 i=$2 img=${IMGS[$2]}
	rm -f "$img"
	case $fs in
	arborfs)
		"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" "$img" >>"$LOG" 2>&1
		;;
	btrfs)
		truncate -s "$SIZE" "$img"
		LOOPS[i]=$(losetup --direct-io=on --find --show "$img")
		mkfs.btrfs -q -f "${LOOPS[$i]}" >>"$LOG" 2>&1
		;;
	esac
}

mount_fs() { # FS I
	local fs=$1 i=$2 mnt=${MNTS[$2]}
	case $fs in
	arborfs)
		"$BUILD/fuse/arborfs" -f "${IMGS[$i]}" "$mnt" >>"$LOG" 2>&1 &
		DPIDS[i]=$!
		for _ in $(seq 300); do mountpoint -q "$mnt" && return 0; sleep 0.1; done
		die "arborfs did not mount $mnt (log $LOG)"
		;;
	btrfs)
		mount "${LOOPS[$i]}" "$mnt"
		;;
	esac
}

unmount_fs() { # FS I: unmount, keep the image (and loop device)
	local fs=$1 i=$2 rc=0 mnt=${MNTS[$2]}
	case $fs in
	arborfs)
		for _ in $(seq 40); do fusermount3 -u "$mnt" 2>/dev/null && break; sleep 0.5; done
		! mountpoint -q "$mnt" || die "cannot unmount $mnt"
		wait "${DPIDS[$i]}" || rc=$?
		DPIDS[i]=
		[ "$rc" = 0 ] || die "arborfs exited with $rc (log $LOG)"
		;;
	btrfs)
		for _ in $(seq 20); do umount "$mnt" 2>/dev/null && break; sleep 0.5; done
		! mountpoint -q "$mnt" || die "cannot unmount $mnt"
		;;
	esac
}

finish_fs() { # FS I: unmount, check (arborfs), detach, remove the image
	local fs=$1 i=$2
	unmount_fs "$fs" "$i"
	case $fs in
	arborfs)
		"$BUILD/fsck/fsck.arborfs" -n "${IMGS[$i]}" >>"$LOG" 2>&1 ||
			die "fsck.arborfs -n found problems in ${IMGS[$i]} after $CASE (log $LOG)"
		;;
	btrfs)
		losetup -d "${LOOPS[$i]}"
		LOOPS[i]=
		;;
	esac
	rm -f "${IMGS[$i]}"
}

commit_fs() { # FS MNT
	sync -f "$2"
	case $1 in arborfs) "$ARBOR" filesystem sync "$2" >/dev/null ;; esac
}

cold() { # FS: before a timed command
	local i
	if [ -n "$REMOUNT" ]; then
		for i in 0 1; do
			unmount_fs "$1" "$i"
			mount_fs "$1" "$i"
		done
	fi
	dropcaches
}

# the commands, the same shape for both
subvol() { # FS create|snapshot ARGS...
	local fs=$1 op=$2
	shift 2
	case $fs in
	arborfs) "$ARBOR" subvolume "$op" "$@" >>"$LOG" ;;
	btrfs) btrfs subvolume "$op" "$@" >>"$LOG" ;;
	esac
}
send() { # FS [SEND-ARGS...] SNAP: stream on stdout
	local fs=$1
	shift
	case $fs in
	arborfs) "$ARBOR" send --no-progress "$@" ;;
	btrfs) btrfs -q send "$@" ;;
	esac
}
receive() { # FS FILE DIR
	case $1 in
	arborfs) "$ARBOR" receive --no-progress -f "$2" "$3" >>"$LOG" ;;
	btrfs) btrfs -q receive -f "$2" "$3" >>"$LOG" 2>&1 ;;
	esac
}
# the GEN to give find-new for what changed after snapshot SNAP
gen_after() { # FS SNAP
	case $1 in
	arborfs)
		"$ARBOR" subvolume show --json "$2" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["gen"])'
		;;
	btrfs)
		btrfs subvolume show "$2" | awk '$1 == "Generation:" {print $2 + 1}'
		;;
	esac
}
findnew() { # FS SNAP GEN: the answer on stdout
	case $1 in
	arborfs) "$ARBOR" subvolume find-new --json "$2" "$3" ;;
	btrfs) btrfs subvolume find-new "$2" "$3" ;;
	esac
}
# check_findnew FS ANSWER LIST: "NAMED NODES" when every file of LIST
# (relative paths) is in the answer; dies otherwise
check_findnew() {
	python3 - "$@" <<'EOF'
import json, sys
fs, answer, lst = sys.argv[1:]
want = set(open(lst).read().split())
if fs == "arborfs":
    j = json.load(open(answer))
    named = {p for c in j["changes"] if "data" in c["flags"] for p in c["paths"]}
    nodes = j["nodes_read"]
else:
    # inode I file offset O len L disk start D offset X gen G flags F PATH
    named = set()
    for line in open(answer):
        if line.startswith("inode "):
            named.add(line.rstrip("\n").split(" flags ", 1)[1].split(" ", 1)[1])
    nodes = "NA"
miss = want - named
if miss:
    sys.exit("find-new missed %d of %d changed files, e.g. %s" % (len(miss), len(want), sorted(miss)[:3]))
print(len(named), nodes)
EOF
}

# verify FS SNAP: the received copy against the source snapshot
verify() {
	local s=${MNTS[0]}/$2 d=${MNTS[1]}/recv/$2
	[ -d "$d" ] || die "$CASE: no received $d"
	diff -r --no-dereference -q "$s" "$d" >>"$LOG" 2>&1 ||
		die "$CASE: received $2 differs from the source (log $LOG)"
	case $1 in
	arborfs)
		# the receiver already matched the sender's digest; the same check by hand
		[ "$("$ARBOR" subvolume digest "$s" | cut -d' ' -f1)" = \
			"$("$ARBOR" subvolume digest "$d" | cut -d' ' -f1)" ] ||
			die "$CASE: digests of $s and $d differ"
		;;
	esac
}

# transfer FS PREFIX SNAP [SEND-ARGS...]: cold send | wc -c, then untimed
# send > STREAM and cold receive -f STREAM + commit; records PREFIX_send_s,
# PREFIX_stream_MB, PREFIX_recv_s
transfer() {
	local fs=$1 p=$2 snap=$3 dm=${MNTS[1]} t0 n
	shift 3
	cold "$fs"
	t0=$(now)
	n=$(send "$fs" "$@" "$snap" | wc -c)
	rec "$fs" "${p}_send_s" "$(since "$t0")"
	rec "$fs" "${p}_stream_MB" "$(mb "$n")"
	send "$fs" "$@" "$snap" >"$STREAM" || die "$CASE: send of $snap failed (log $LOG)"
	echo "  $CASE $p: stream $n bytes, to the file $(stat -c %s "$STREAM")" >>"$LOG"
	cold "$fs"
	t0=$(now)
	receive "$fs" "$STREAM" "$dm/recv" || die "$CASE: receive of $snap failed (log $LOG)"
	commit_fs "$fs" "$dm"
	rec "$fs" "${p}_recv_s" "$(since "$t0")"
	rm -f "$STREAM"
}

# ---- one filesystem ------------------------------------------------------------

case_fs() { # FS
	local fs=$1 sm=${MNTS[0]} dm=${MNTS[1]} t0 k prev gen out
	mkfs_fs "$fs" 0
	mkfs_fs "$fs" 1
	mount_fs "$fs" 0
	mount_fs "$fs" 1
	mkdir "$dm/recv"
	subvol "$fs" create "$sm/vol"
	t0=$(now)
	cp -a "$SRC/tree/." "$sm/vol/"
	commit_fs "$fs" "$sm"
	rec "$fs" tree_s "$(since "$t0")"
	subvol "$fs" snapshot -r "$sm/vol" "$sm/s0"
	commit_fs "$fs" "$sm"
	commit_fs "$fs" "$dm"
	transfer "$fs" full "$sm/s0"
	verify "$fs" s0
	prev=s0
	for k in 1 2 3; do
		# the chosen files rewritten whole, then the snapshot
		python3 - "$SRC/chg$k" "$SRC/chg$k.txt" "$sm/vol" <<'EOF'
import os, sys
src, lst, dst = sys.argv[1:]
for p in open(lst).read().split():
    with open(os.path.join(src, p), "rb") as f:
        b = f.read()
    with open(os.path.join(dst, p), "wb") as f:
        f.write(b)
EOF
		commit_fs "$fs" "$sm"
		subvol "$fs" snapshot -r "$sm/vol" "$sm/s$k"
		commit_fs "$fs" "$sm"
		rec "$fs" "f${k}_changed" "$(wc -l <"$SRC/chg$k.txt")"
		gen=$(gen_after "$fs" "$sm/$prev")
		[ -n "$gen" ] || die "$CASE: no generation for $prev"
		cold "$fs"
		t0=$(now)
		findnew "$fs" "$sm/s$k" "$gen" >"$SCR/findnew.out" ||
			die "$CASE: find-new s$k $gen failed (log $LOG)"
		rec "$fs" "f${k}_findnew_s" "$(since "$t0")"
		out=$(check_findnew "$fs" "$SCR/findnew.out" "$SRC/chg$k.txt" 2>&1) ||
			die "$CASE: s$k (GEN $gen): $out"
		rec "$fs" "f${k}_named" "${out% *}"
		[ "$fs" != arborfs ] || rec "$fs" "f${k}_nodes" "${out#* }"
		echo "  $CASE find-new s$k $gen: files named, nodes read: $out" >>"$LOG"
		transfer "$fs" "f$k" "$sm/s$k" -p "$sm/$prev"
		verify "$fs" "s$k"
		prev=s$k
	done
	finish_fs "$fs" 1
	finish_fs "$fs" 0
}

# ---- data and rounds ---------------------------------------------------------

{
	echo "incremental.sh: $(date -Is) $(uname -r) nproc=$(nproc) build=$BUILD files=$FILES size=$SIZE runs=$RUNS${REMOUNT:+ remount}"
	echo "git: $(git -C "$REPO" describe --always --dirty) ($(git -C "$REPO" rev-parse HEAD))"
	echo "btrfs-progs: $(btrfs --version)"
	echo "start: $(uptime)"
} | tee "$OUT/meta.txt"
echo "making the data in $SRC" >&2
python3 - "$SRC" "$FILES" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
name = lambda i: "d%04d/f%07d" % (i // 1000, i)
for i in range(n):
    if i % 1000 == 0:
        os.makedirs(os.path.join(root, "tree", "d%04d" % (i // 1000)))
    with open(os.path.join(root, "tree", name(i)), "wb") as f:
        f.write(os.urandom(4096))
# 0.1%, 1%, 10%: seeded choices, new contents made once
for k, div in ((1, 1000), (2, 100), (3, 10)):
    pick = sorted(random.Random(k).sample(range(n), max(1, n // div)))
    for i in pick:
        os.makedirs(os.path.join(root, "chg%d" % k, "d%04d" % (i // 1000)), exist_ok=True)
        with open(os.path.join(root, "chg%d" % k, name(i)), "wb") as f:
            f.write(os.urandom(4096))
    with open(os.path.join(root, "chg%d.txt" % k), "w") as f:
        f.write("".join(name(i) + "\n" for i in pick))
EOF

for RUN in $(seq "$RUNS"); do
	echo "round $RUN: $(uptime)" | tee -a "$OUT/meta.txt"
	for fs in $FSES; do
		CASE="$fs/run$RUN"
		LOG=$OUT/logs/$fs-$RUN.log
		t0=$(now)
		case_fs "$fs"
		printf '  %-24s %6.1f s\n' "$CASE" "$(since "$t0")"
	done
done
echo "end: $(uptime)" | tee -a "$OUT/meta.txt"

{
	echo "\`bench/incremental.sh $ARGS\`"
	echo
	sed 's/^/    /' "$OUT/meta.txt"
	echo
	table "$RAW"
} >"$MD"
table "$RAW" | tee "$OUT/table.md"
echo "results in $MD and $OUT"
