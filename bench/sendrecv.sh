#!/usr/bin/env bash
# bench/sendrecv.sh - arbor send | arbor receive between two mounted arborfs
# images, against kernel btrfs send | btrfs receive between two btrfs loop
# devices, on the same data in the same run.  As root.
#
#   bench/sendrecv.sh [--build DIR] [--runs N] [--big SIZE] [--size SIZE]
#                     [--cases "plain zlib"] [--fs "arborfs btrfs"] [--out DIR]
#   bench/sendrecv.sh --report RAW.TSV    (the table of a run, even unfinished)
#
# ARBOR_BENCH_SCALE=small sets --big 64M (a quick trial run).
# The sources are made once in a tmpfs scratch directory (/dev/shm): a
# copy of /usr/include (`cp -a`) and one file of --big bytes (default 1G)
# from /dev/urandom.  Each --runs times (median reported), for each
# filesystem, on two fresh sparse image files of --size (default 4G)
# under /var/tmp, a source and a destination (arborfs: mkfs.arborfs and
# the build's `arborfs -f`; btrfs: `losetup --direct-io=on`, mkfs.btrfs,
# mount).  On the source a subvolume `vol` gets the include tree and the
# big file, and a read-only snapshot s1 of it is taken.
#   plain, full  `send s1 | receive DST/recv`, cold (sync, drop caches),
#                wall time including the destination's commit (`sync -f`,
#                and `arbor filesystem sync` on arborfs); then, untimed
#                for the transfer, `send s1 | wc -c` (stream bytes, and
#                its cold wall time: send alone), and the destination's
#                used space after the commit minus before (statvfs).
#   plain, incr  in vol: 100 small files of the tree appended to, 4 KiB
#                rewritten in the middle of the big file, a shared copy
#                of the big file (arborfs: plain `cp`, which is
#                copy_file_range and shares; btrfs: `cp --reflink=always`);
#                snapshot s2; then the same three measurements for
#                `send -p s1 s2 | receive`, and for arborfs the cold time
#                of `arbor send --estimate -p s1 s2`.
#   zlib, full   fresh images mounted with compression (arborfs
#                `-o compress=zlib`, btrfs `-o compress=zlib:3`), the
#                include tree only; full send as above.  btrfs sends with
#                `--proto 2 --compressed-data` (its stored extents as
#                they are); arborfs sends stored compressed extents
#                always.  The plain case uses btrfs send's default
#                protocol (1).
# Checks: arbor receive verifies the sender's digest before it publishes
# (exit status); for both, the received copy is compared with the source
# snapshot: `cmp` of the big files, `diff -r` of the include tree.  The
# arborfs images get `fsck.arborfs -n` at the end.
# Output: a markdown table (medians; arborfs/btrfs ratios), printed and
# written to bench/results/sendrecv-DATE.md; raw.tsv, meta.txt and the
# logs in bench/results/sendrecv-DATE/.  uptime is recorded at the start,
# at each round and at the end.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=$REPO/build-rel
RUNS=3
BIG=1G
[ "${ARBOR_BENCH_SCALE:-}" = small ] && BIG=64M
SIZE=4G
CASES="plain zlib"
FSES="arborfs btrfs"
OUT=
REPORT=
ARGS=$*
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	--big) BIG=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--cases) CASES=$2; shift ;;
	--fs) FSES=$2; shift ;;
	--out) OUT=$2; shift ;;
	--report) REPORT=$2; shift ;;
	-h | --help) sed -n 2,46p "$0"; exit 0 ;;
	*) echo "sendrecv.sh: unknown argument $1" >&2; exit 2 ;;
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
rows = [
    ("full_s", "full: send \\| receive, s (with commit)"),
    ("full_send_s", "full: send \\| wc -c, s"),
    ("full_stream_MB", "full: stream, MB"),
    ("full_dst_MB", "full: destination space, MB"),
    ("incr_s", "incremental: send -p \\| receive, s"),
    ("incr_send_s", "incremental: send -p \\| wc -c, s"),
    ("incr_est_s", "incremental: send --estimate, s"),
    ("incr_stream_MB", "incremental: stream, MB"),
    ("incr_dst_MB", "incremental: destination growth, MB"),
    ("zfull_s", "zlib full: send \\| receive, s"),
    ("zfull_stream_MB", "zlib full: stream, MB"),
    ("zfull_dst_MB", "zlib full: destination space, MB"),
    ("src_MB", "source data (logical), MB"),
]
def cell(fs, m):
    k = (fs, m)
    if k not in v:
        return "-"
    x = med[k]
    f = (lambda y: "%.3f" % y) if x < 10 else (lambda y: "%.1f" % y)
    s = f(x)
    if len(v[k]) > 1:
        s += " (%s-%s)" % (f(min(v[k])), f(max(v[k])))
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

[ "$(id -u)" = 0 ] || { echo "sendrecv.sh: run as root" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "sendrecv.sh: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd -P)
for b in mkfs/mkfs.arborfs fuse/arborfs cli/arbor fsck/fsck.arborfs; do
	[ -x "$BUILD/$b" ] || { echo "sendrecv.sh: $BUILD/$b not built" >&2; exit 1; }
done
ARBOR=$BUILD/cli/arbor
BIGB=$(numfmt --from=iec "$BIG")
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$REPO/bench/results/sendrecv-$STAMP}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd -P)
MD=$(dirname "$OUT")/$(basename "$OUT").md
SCR=$(mktemp -d /var/tmp/arbor-sendrecv.XXXXXX)
SRC=$(mktemp -d /dev/shm/arbor-sendsrc.XXXXXX)
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
used_b() { python3 -c 'import os,sys; s=os.statvfs(sys.argv[1]); print((s.f_blocks-s.f_bfree)*s.f_frsize)' "$1"; }
mb() { python3 -c "print('%.3f' % (($1) / 1e6))"; }
dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
RAW=$OUT/raw.tsv
printf 'run\tfs\tmetric\tvalue\n' >"$RAW"
rec() { printf '%s\t%s\t%s\t%s\n' "$RUN" "$1" "$2" "$3" >>"$RAW"; }
die() { echo "sendrecv.sh: $*" >&2; exit 1; }

# ---- mounting: FS I [compress] -------------------------------------------

mount_fs() {
	local fs=$1 i=$2 z=${3:-} opts=()
	local mnt=${MNTS[$i]} img=${IMGS[$i]}
	rm -f "$img"
	case $fs in
	arborfs)
		[ -z "$z" ] || opts=(-o compress=zlib)
		"$BUILD/mkfs/mkfs.arborfs" -q -s "$SIZE" "$img" >>"$LOG" 2>&1
		"$BUILD/fuse/arborfs" -f "$img" "$mnt" "${opts[@]}" >>"$LOG" 2>&1 &
		DPIDS[i]=$!
		for _ in $(seq 300); do mountpoint -q "$mnt" && return 0; sleep 0.1; done
		die "arborfs did not mount $mnt (log $LOG)"
		;;
	btrfs)
		[ -z "$z" ] || opts=(-o compress=zlib:3)
		truncate -s "$SIZE" "$img"
		LOOPS[i]=$(losetup --direct-io=on --find --show "$img")
		mkfs.btrfs -q -f "${LOOPS[$i]}" >>"$LOG" 2>&1
		mount "${opts[@]}" "${LOOPS[$i]}" "$mnt"
		;;
	esac
}

umount_fs() { # FS I
	local fs=$1 i=$2 rc=0
	local mnt=${MNTS[$i]}
	case $fs in
	arborfs)
		for _ in $(seq 40); do fusermount3 -u "$mnt" 2>/dev/null && break; sleep 0.5; done
		mountpoint -q "$mnt" && die "cannot unmount $mnt"
		wait "${DPIDS[$i]}" || rc=$?
		DPIDS[i]=
		[ "$rc" = 0 ] || die "arborfs exited with $rc (log $LOG)"
		"$BUILD/fsck/fsck.arborfs" -n "${IMGS[$i]}" >>"$LOG" 2>&1 ||
			die "fsck.arborfs -n found problems in ${IMGS[$i]} after $CASE (log $LOG)"
		;;
	btrfs)
		for _ in $(seq 20); do umount "$mnt" 2>/dev/null && break; sleep 0.5; done
		mountpoint -q "$mnt" && die "cannot unmount $mnt"
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
receive() { # FS DIR: stream on stdin
	case $1 in
	arborfs) "$ARBOR" receive --no-progress "$2" >>"$LOG" ;;
	btrfs) btrfs -q receive "$2" >>"$LOG" 2>&1 ;;
	esac
}
shared_copy() { # FS FROM TO
	case $1 in
	arborfs) cp "$2" "$3" ;;
	btrfs) cp --reflink=always "$2" "$3" ;;
	esac
}

# transfer FS PREFIX SNAP [SEND-ARGS...]: cold send | receive into
# DST/recv, then cold send | wc -c; records PREFIX_s, PREFIX_send_s,
# PREFIX_stream_MB, PREFIX_dst_MB
transfer() {
	local fs=$1 p=$2 snap=$3 sm=${MNTS[0]} dm=${MNTS[1]} t0 u0 u1 n
	shift 3
	commit_fs "$fs" "$dm"
	u0=$(used_b "$dm")
	dropcaches
	t0=$(now)
	send "$fs" "$@" "$snap" | receive "$fs" "$dm/recv" ||
		die "$CASE: send | receive of $snap failed (log $LOG)"
	commit_fs "$fs" "$dm"
	rec "$fs" "${p}_s" "$(since "$t0")"
	u1=$(used_b "$dm")
	rec "$fs" "${p}_dst_MB" "$(mb "$u1 - $u0")"
	dropcaches
	t0=$(now)
	n=$(send "$fs" "$@" "$snap" | wc -c)
	rec "$fs" "${p}_send_s" "$(since "$t0")"
	rec "$fs" "${p}_stream_MB" "$(mb "$n")"
	echo "  $CASE $p: stream $n bytes, destination +$((u1 - u0)) bytes" >>"$LOG"
}

# verify FS SNAP: the received copy against the source snapshot
verify() {
	local s=${MNTS[0]}/$2 d=${MNTS[1]}/recv/$2
	[ -d "$d" ] || die "$CASE: no received $d"
	diff -r --no-dereference -q "$s/include" "$d/include" >>"$LOG" 2>&1 ||
		die "$CASE: received include differs from the source (log $LOG)"
	for f in big big2; do
		[ -e "$s/$f" ] || continue
		cmp "$s/$f" "$d/$f" >>"$LOG" 2>&1 || die "$CASE: received $f differs (log $LOG)"
	done
	case $1 in
	arborfs)
		# the receiver already matched the sender's digest; the same check by hand
		[ "$("$ARBOR" subvolume digest "$s" | cut -d' ' -f1)" = \
			"$("$ARBOR" subvolume digest "$d" | cut -d' ' -f1)" ] ||
			die "$CASE: digests of $s and $d differ"
		;;
	esac
}

# ---- the cases -------------------------------------------------------------

case_plain() { # FS
	local fs=$1 sm=${MNTS[0]} t0
	mount_fs "$fs" 0
	mount_fs "$fs" 1
	mkdir "${MNTS[1]}/recv"
	subvol "$fs" create "$sm/vol"
	cp -a "$SRC/include" "$sm/vol/"
	cp "$SRC/big" "$sm/vol/big"
	commit_fs "$fs" "$sm"
	subvol "$fs" snapshot -r "$sm/vol" "$sm/s1"
	commit_fs "$fs" "$sm"
	transfer "$fs" full "$sm/s1"
	verify "$fs" s1

	# 100 small files appended to, 4 KiB in the middle of big, a shared copy
	# (a file, not a pipe into head: with pipefail, sort's SIGPIPE would end the script)
	find "$sm/vol/include" -type f -size -16k | sort >"$SCR/small.txt"
	head -n 100 "$SCR/small.txt" | while read -r f; do echo "/* changed $RUN */" >>"$f"; done
	[ "$(wc -l <"$SCR/small.txt")" -ge 100 ] || die "$CASE: fewer than 100 small files"
	dd if=/dev/urandom of="$sm/vol/big" bs=4096 count=1 seek=$((BIGB / 8192)) \
		conv=notrunc status=none
	shared_copy "$fs" "$sm/vol/big" "$sm/vol/big2"
	commit_fs "$fs" "$sm"
	subvol "$fs" snapshot -r "$sm/vol" "$sm/s2"
	commit_fs "$fs" "$sm"
	if [ "$fs" = arborfs ]; then
		dropcaches
		t0=$(now)
		"$ARBOR" send --estimate -p "$sm/s1" "$sm/s2" >>"$LOG"
		rec "$fs" incr_est_s "$(since "$t0")"
	fi
	transfer "$fs" incr "$sm/s2" -p "$sm/s1"
	verify "$fs" s2
	umount_fs "$fs" 1
	umount_fs "$fs" 0
}

case_zlib() { # FS
	local fs=$1 sm=${MNTS[0]} args=()
	mount_fs "$fs" 0 z
	mount_fs "$fs" 1 z
	mkdir "${MNTS[1]}/recv"
	subvol "$fs" create "$sm/vol"
	cp -a "$SRC/include" "$sm/vol/"
	commit_fs "$fs" "$sm"
	subvol "$fs" snapshot -r "$sm/vol" "$sm/s1"
	commit_fs "$fs" "$sm"
	[ "$fs" = btrfs ] && args=(--proto 2 --compressed-data)
	transfer "$fs" zfull "$sm/s1" "${args[@]}"
	verify "$fs" s1
	umount_fs "$fs" 1
	umount_fs "$fs" 0
}

# ---- sources and rounds -----------------------------------------------------

{
	echo "sendrecv.sh: $(date -Is) $(uname -r) nproc=$(nproc) build=$BUILD big=$BIG size=$SIZE"
	echo "git: $(git -C "$REPO" describe --always --dirty)"
	echo "btrfs-progs: $(btrfs --version)"
	echo "start: $(uptime)"
} | tee "$OUT/meta.txt"
cp -a /usr/include "$SRC/include"
head -c "$BIGB" /dev/urandom >"$SRC/big"
INCB=$(find "$SRC/include" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

for RUN in $(seq "$RUNS"); do
	echo "round $RUN: $(uptime)" | tee -a "$OUT/meta.txt"
	for c in $CASES; do
		for fs in $FSES; do
			CASE="$c/$fs/run$RUN"
			LOG=$OUT/logs/$c-$fs-$RUN.log
			t0=$(now)
			case $c in
			plain) rec "$fs" src_MB "$(mb "$INCB + $BIGB")"; case_plain "$fs" ;;
			zlib) case_zlib "$fs" ;;
			*) die "unknown case $c" ;;
			esac
			printf '  %-24s %6.1f s\n' "$CASE" "$(since "$t0")"
		done
	done
done
echo "end: $(uptime)" | tee -a "$OUT/meta.txt"

{
	echo "\`bench/sendrecv.sh $ARGS\`"
	echo
	sed 's/^/    /' "$OUT/meta.txt"
	echo
	table "$RAW"
} >"$MD"
table "$RAW" | tee "$OUT/table.md"
echo "results in $MD and $OUT"
