#!/usr/bin/env bash
# bench/run.sh - side-by-side filesystem benchmark: arborfs against fuse2fs,
# kernel ext4 and kernel btrfs, each on a fresh 4 GiB image.
#
#   bench/run.sh [--quick] [--runs N] [--only LIST] [--fs LIST]
#                [--out DIR] [--trace] [--build DIR]
#
# Run as root.  See bench/README.md for the workloads and how to read the
# output.  Environment knobs (rarely needed):
#   BENCH_TIMEOUT=SECS        limit for one command of a workload (900)
#   BENCH_SCALE_LIMIT=SECS    limit for one part of the scale workload (1800)
#   BENCH_SCALE_DIV=N         divide the scale workload's file counts by N
#   BENCH_MKFS_ARGS="ARGS"    extra mkfs.arborfs options (e.g. "-m single")
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
WL="python3 $HERE/lib/wl.py"

ALL_FS=arborfs,fuse2fs,ext4,btrfs
ALL_WL=(seq rand create-small create-flat fsync-append tree scale)

usage() {
	cat <<EOF
usage: bench/run.sh [--quick] [--runs N] [--only LIST] [--fs LIST]
                    [--out DIR] [--trace] [--build DIR] [--uring on|off]

  --quick       1 run, small sizes: the whole suite in a few minutes
  --runs N      rounds (default 3; 1 with --quick); rounds are interleaved
  --only LIST   comma-separated workloads: seq (seq-write, seq-read),
                rand (rand-write-4k, rand-read-4k), create-small,
                create-flat, fsync-append, tree (tree-copy, tree-read),
                scale.  A member name selects its whole group.
                Default: all but scale with --quick, all without.
  --fs LIST     filesystems, from $ALL_FS (default: all)
  --out DIR     results directory (default bench/results/<date>)
  --trace       arborfs records its image I/O (-o trace=) per workload;
                bench/iotrace-plot draws each trace as an SVG
  --build DIR   meson build directory with the arborfs binaries
                (default: build/ in the repository)
  --uring on|off  set the fuse module's enable_uring for the run (restored
                after): with it on, arborfs serves requests through per-CPU
                io_uring queues (fuse2fs, on libfuse 3.14, cannot).
                Default: leave it as it is; meta.json records it.
EOF
}

ARGS="$*"
QUICK=0 RUNS= ONLY= FSLIST=$ALL_FS OUT= TRACE=0 BUILD=$REPO/build URING=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--runs) RUNS=${2:?--runs needs N}; shift ;;
	--runs=*) RUNS=${1#*=} ;;
	--only) ONLY=${2:?--only needs a list}; shift ;;
	--only=*) ONLY=${1#*=} ;;
	--fs) FSLIST=${2:?--fs needs a list}; shift ;;
	--fs=*) FSLIST=${1#*=} ;;
	--out) OUT=${2:?--out needs a directory}; shift ;;
	--out=*) OUT=${1#*=} ;;
	--trace) TRACE=1 ;;
	--build) BUILD=${2:?--build needs a directory}; shift ;;
	--build=*) BUILD=${1#*=} ;;
	--uring) URING=${2:?--uring needs on or off}; shift ;;
	--uring=*) URING=${1#*=} ;;
	-h | --help) usage; exit 0 ;;
	*) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

die() { echo "run.sh: $*" >&2; exit 1; }
# progress goes to the script's own stderr (fd 3), also from functions
# whose stderr is redirected into an error file
exec 3>&2
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&3; }

[ "$(id -u)" = 0 ] || die "must run as root (it formats loop devices, mounts filesystems and drops caches); try: sudo $0 $ARGS"

[ -n "$RUNS" ] || { [ $QUICK = 1 ] && RUNS=1 || RUNS=3; }
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_OLD=
case $URING in
'') ;;
on | off)
	[ -w "$URING_PARAM" ] || die "--uring: no $URING_PARAM (a kernel without FUSE over io_uring?)"
	;;
*) die "--uring wants on or off, not '$URING'" ;;
esac
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs wants a positive number, not '$RUNS'"

# --- filesystems and workloads ------------------------------------------------
IFS=, read -ra FSES <<<"$FSLIST"
for fs in "${FSES[@]}"; do
	[[ ,$ALL_FS, == *,$fs,* ]] || die "unknown filesystem '$fs' (known: $ALL_FS)"
done
declare -A SEL=()
if [ -n "$ONLY" ]; then
	IFS=, read -ra want <<<"$ONLY"
	for w in "${want[@]}"; do
		case $w in
		seq | seq-write | seq-read) SEL[seq]=1 ;;
		rand | rand-write-4k | rand-read-4k) SEL[rand]=1 ;;
		create-small | create-flat | fsync-append | scale) SEL[$w]=1 ;;
		tree | tree-copy | tree-read) SEL[tree]=1 ;;
		*) die "unknown workload '$w' (known: seq-write seq-read rand-write-4k rand-read-4k create-small create-flat fsync-append tree-copy tree-read scale)" ;;
		esac
	done
else
	for w in "${ALL_WL[@]}"; do SEL[$w]=1; done
	[ $QUICK = 1 ] && unset 'SEL[scale]'
fi

# --- sizes ---------------------------------------------------------------------
MiB=$((1 << 20))
if [ $QUICK = 1 ]; then
	SEQ_BYTES=$((256 * MiB)) RAND_BYTES=$((64 * MiB)) RAND_IOS=16384
	RREAD_COLD=4096 RREAD_WARM=16384
	SMALL_N=5000 FLAT_N=5000 FSYNC_N=200 FSYNC_BG=$((512 * MiB))
else
	SEQ_BYTES=$((1024 * MiB)) RAND_BYTES=$((256 * MiB)) RAND_IOS=65536
	RREAD_COLD=16384 RREAD_WARM=65536
	SMALL_N=20000 FLAT_N=20000 FSYNC_N=1000 FSYNC_BG=$((2048 * MiB))
fi
SMALL_DIRS=100 SMALL_SIZE=1024
SCALE_DIV=${BENCH_SCALE_DIV:-1}
SCALE_FILES=$((1000000 / SCALE_DIV)) SCALE_DIRS=$((1000 / SCALE_DIV))
SCALE_FLAT=$((200000 / SCALE_DIV))
[ $SCALE_DIRS -ge 1 ] || SCALE_DIRS=1
TMO=${BENCH_TIMEOUT:-900}
# word-split on purpose: a list of mkfs.arborfs options
read -r -a MKFS_ARBOR_ARGS <<<"${BENCH_MKFS_ARGS:-}"
SCALE_LIMIT=${BENCH_SCALE_LIMIT:-1800}
TREE_SRC=/usr/include
IMG_SIZE=4G

# --- tools ----------------------------------------------------------------------
MKFS_ARBOR=$BUILD/mkfs/mkfs.arborfs
DAEMON=$BUILD/fuse/arborfs
if [[ ,$FSLIST, == *,arborfs,* ]] && ! [ -x "$MKFS_ARBOR" -a -x "$DAEMON" ]; then
	die "no arborfs binaries in $BUILD (need mkfs/mkfs.arborfs and fuse/arborfs).
Build them first: scripts/quickstart.sh, or: meson setup build && ninja -C build
(or point --build at an existing meson build directory)"
fi
command -v python3 >/dev/null || die "python3 is needed"
need_pkg() { # command package
	command -v "$1" >/dev/null && return 0
	log "installing $2 (for $1)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null 2>&1 &&
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1; } ||
		die "cannot install $2: apt-get install $2"
	command -v "$1" >/dev/null || die "$2 installed but $1 not found"
}
need_pkg fio fio
for fs in "${FSES[@]}"; do
	case $fs in
	fuse2fs) need_pkg fuse2fs fuse2fs; need_pkg mkfs.ext4 e2fsprogs ;;
	ext4) need_pkg mkfs.ext4 e2fsprogs ;;
	btrfs) need_pkg mkfs.btrfs btrfs-progs ;;
	esac
done
need_pkg losetup mount
need_pkg timeout coreutils

# --- scratch and output ---------------------------------------------------------
[ -n "$OUT" ] || OUT=$REPO/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT/logs" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd -P)
SCRATCH=$(mktemp -d /var/tmp/arborfs-bench.XXXXXX) || die "mktemp failed"
RAW=$OUT/raw.tsv
: >"$RAW"
: >"$OUT/mounts.tsv"
: >"$OUT/errors.log"

# --- state of the one filesystem that is set up at a time ------------------------
CUR_FS= CUR_IMG= CUR_MNT= CUR_PID= CUR_LOOP= CUR_TAG= CUR_KIND= PEAK_RSS=0
RUN=0 PHASE=regular
declare -A MOUNT_SEEN=()

is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# abort a FUSE connection whose daemon no longer answers
fuse_abort() {
	local mm
	mm=$(awk -v m="$1" '$5 == m { print $3 }' /proc/self/mountinfo | tail -1)
	[ -n "$mm" ] && [ -w "/sys/fs/fuse/connections/${mm#*:}/abort" ] &&
		echo 1 >"/sys/fs/fuse/connections/${mm#*:}/abort"
}

wait_pid_exit() { # pid seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null; DAEMON_RC=$?; return 0; }
		sleep 0.1
	done
	return 1
}

# mount CUR_FS's image on CUR_MNT (image formatted, loop set up)
do_mount() { # tag
	local tag=$1 log=$OUT/logs/$CUR_FS-r$RUN-$PHASE.log i opts=()
	CUR_TAG=$tag
	case $CUR_FS in
	arborfs)
		if [ $TRACE = 1 ]; then
			local tf=$OUT/trace-$tag.txt
			[ "$RUNS" -gt 1 ] && tf=$OUT/trace-$tag-r$RUN.txt
			opts=(-o "trace=$tf")
		fi
		echo "+ arborfs -f ${opts[*]} $CUR_IMG $CUR_MNT" >>"$log"
		setsid "$DAEMON" -f "${opts[@]}" "$CUR_IMG" "$CUR_MNT" >>"$log" 2>&1 </dev/null &
		CUR_PID=$!
		;;
	fuse2fs)
		echo "+ fuse2fs $CUR_IMG $CUR_MNT -f -o fakeroot" >>"$log"
		setsid fuse2fs "$CUR_IMG" "$CUR_MNT" -f -o fakeroot >>"$log" 2>&1 </dev/null &
		CUR_PID=$!
		;;
	ext4 | btrfs)
		echo "+ mount $CUR_LOOP $CUR_MNT" >>"$log"
		mount "$CUR_LOOP" "$CUR_MNT" >>"$log" 2>&1 || return 1
		;;
	esac
	for ((i = 0; i < 300; i++)); do
		is_mounted "$CUR_MNT" && break
		if [ -n "$CUR_PID" ] && ! kill -0 "$CUR_PID" 2>/dev/null; then
			wait "$CUR_PID" 2>/dev/null
			echo "$CUR_FS daemon exited before mounting; log: $log" >&2
			tail -5 "$log" >&2
			CUR_PID=
			return 1
		fi
		sleep 0.1
	done
	is_mounted "$CUR_MNT" || { echo "$CUR_FS: not mounted after 30 s" >&2; return 1; }
	echo "$CUR_PID" >"$SCRATCH/daemon.pid"
	if [ -z "${MOUNT_SEEN[$CUR_FS-$PHASE]:-}" ]; then
		MOUNT_SEEN[$CUR_FS-$PHASE]=1
		printf '%s\t%s\t%s\t%s\t%s\n' "$CUR_FS" "$PHASE" \
			"$(awk -v m="$CUR_MNT" '$2 == m { print $3 " " $4 }' /proc/mounts | tail -1)" \
			"$(sed -n 's/^+ \(mkfs\)/\1/p' "$log" | tail -1)" \
			"$(sed -n '/^+ mkfs/d; s/^+ //p' "$log" | tail -1)" >>"$OUT/mounts.tsv"
	fi
	return 0
}

do_umount() { # [force]
	local force=${1:-} i rss
	if [ -n "$CUR_PID" ]; then
		rss=$($WL hwm "$CUR_PID")
		[ "${rss:-0}" -gt "$PEAK_RSS" ] && PEAK_RSS=$rss
	fi
	if is_mounted "$CUR_MNT"; then
		# a daemon that does not answer would hang the unmount and
		# every process waiting on it: cut its connection, kill it
		if [ -n "$force" ] && [ -n "$CUR_PID" ] && ! healthy; then
			echo "$CUR_FS: daemon $CUR_PID does not answer; aborting its connection" >&2
			fuse_abort "$CUR_MNT"
			kill -KILL "$CUR_PID" 2>/dev/null
		fi
		for ((i = 0; i < 10; i++)); do
			timeout -k 5 60 umount "$CUR_MNT" 2>/dev/null && break
			sleep 0.5
		done
		if is_mounted "$CUR_MNT"; then
			[ -z "$force" ] && echo "$CUR_FS: umount $CUR_MNT failed, forcing" >&2
			[ -n "$CUR_PID" ] && fuse_abort "$CUR_MNT"
			umount -l "$CUR_MNT" 2>/dev/null
		fi
	fi
	if [ -n "$CUR_PID" ]; then
		# arborfs makes its final commit after the unmount
		if ! wait_pid_exit "$CUR_PID" "$([ -n "$force" ] && echo 15 || echo 120)"; then
			echo "$CUR_FS: daemon $CUR_PID still running after unmount; killing it" >&2
			kill -TERM "$CUR_PID" 2>/dev/null
			wait_pid_exit "$CUR_PID" 10 || { kill -KILL "$CUR_PID" 2>/dev/null; wait_pid_exit "$CUR_PID" 5; }
			CUR_PID=
			return 1
		fi
		CUR_PID=
		if [ "${DAEMON_RC:-0}" != 0 ] && [ -z "$force" ]; then
			echo "run $RUN $CUR_FS: daemon exited with status $DAEMON_RC at unmount: $(tail -2 "$OUT/logs/$CUR_FS-r$RUN-$PHASE.log" | tr '\n' ' ')" >>"$OUT/errors.log"
		fi
	fi
	! is_mounted "$CUR_MNT"
}

# sync(1) of the filesystem under test only (syncfs): a plain sync would also
# wait for every other mount of the machine
syncfs() { timeout -k 10 "$TMO" sync -f "$CUR_MNT"; }

# cold caches: FUSE daemons are restarted, then the kernel drops its caches
make_cold() { # tag
	syncfs
	if [ "$CUR_KIND" = fuse ]; then
		do_umount || return 1
		echo 3 >/proc/sys/vm/drop_caches
		do_mount "$1" || return 1
	else
		echo 3 >/proc/sys/vm/drop_caches
	fi
}

# the mount is there and answers
healthy() { is_mounted "$CUR_MNT" && timeout 20 stat -f "$CUR_MNT" >/dev/null 2>&1; }

setup_fs() { # fs [tag of the first mount]
	CUR_FS=$1 CUR_IMG=$SCRATCH/$1.img CUR_MNT=$SCRATCH/mnt-$1 CUR_PID= CUR_LOOP= PEAK_RSS=0
	local log=$OUT/logs/$CUR_FS-r$RUN-$PHASE.log ext4opts=()
	[ "$PHASE" = scale ] && ext4opts=(-N $((SCALE_FILES + SCALE_FLAT + SCALE_DIRS + 100000)))
	mkdir -p "$CUR_MNT" && rm -f "$CUR_IMG" && truncate -s $IMG_SIZE "$CUR_IMG" || return 1
	case $CUR_FS in
	arborfs) CUR_KIND=fuse
		echo "+ mkfs.arborfs -q -s $IMG_SIZE ${MKFS_ARBOR_ARGS[*]} $CUR_IMG" >>"$log"
		"$MKFS_ARBOR" -q -s $IMG_SIZE "${MKFS_ARBOR_ARGS[@]}" "$CUR_IMG" >>"$log" 2>&1 ;;
	fuse2fs) CUR_KIND=fuse
		echo "+ mkfs.ext4 -F -q ${ext4opts[*]} $CUR_IMG" >>"$log"
		mkfs.ext4 -F -q "${ext4opts[@]}" "$CUR_IMG" >>"$log" 2>&1 ;;
	ext4 | btrfs) CUR_KIND=kernel
		CUR_LOOP=$(losetup --direct-io=on --find --show "$CUR_IMG") || return 1
		if [ $CUR_FS = ext4 ]; then
			echo "+ mkfs.ext4 -F -q ${ext4opts[*]} $CUR_LOOP" >>"$log"
			mkfs.ext4 -F -q "${ext4opts[@]}" "$CUR_LOOP" >>"$log" 2>&1
		else
			echo "+ mkfs.btrfs -f -q $CUR_LOOP" >>"$log"
			mkfs.btrfs -f -q "$CUR_LOOP" >>"$log" 2>&1
		fi ;;
	esac || { echo "$CUR_FS: mkfs failed, see $log" >&2; return 1; }
	do_mount "${2:-$PHASE}"
}

teardown_fs() { # [force]
	[ -n "$CUR_FS" ] || return 0
	do_umount "${1:-}"
	if [ -n "$CUR_LOOP" ]; then
		losetup -d "$CUR_LOOP" 2>/dev/null || { sleep 1; losetup -d "$CUR_LOOP"; }
		CUR_LOOP=
	fi
	rm -f "$CUR_IMG"
	rmdir "$CUR_MNT" 2>/dev/null
	CUR_FS=
}

CLEANED=0
cleanup() {
	[ $CLEANED = 1 ] && return
	CLEANED=1
	watchdog_stop
	teardown_fs force
	rm -rf "$SCRATCH"
	[ -z "$URING_OLD" ] || echo "$URING_OLD" >"$URING_PARAM"
}
on_signal() {
	trap '' INT TERM
	echo >&3
	log "interrupted: cleaning up (unmounting, detaching loop devices, removing $SCRATCH)"
	cleanup
	[ -s "$RAW" ] && python3 "$HERE/lib/report.py" "$OUT" >"$OUT/table.txt" 2>/dev/null
	log "partial results in $OUT"
	exit 130
}
trap cleanup EXIT
trap on_signal INT TERM HUP
if [ -n "$URING" ]; then
	URING_OLD=$(cat "$URING_PARAM")
	[ "$URING" = on ] && echo 1 >"$URING_PARAM" || echo 0 >"$URING_PARAM"
fi

# --- recording ---------------------------------------------------------------------
# raw.tsv: run phase fs test unit better value error
record() { # test unit better value [error]
	local err=${5:-}
	err=${err//$'\t'/ }
	err=${err//$'\n'/ | }
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$RUN" "$PHASE" "$CUR_FS" \
		"$1" "$2" "$3" "$4" "${err:0:400}" >>"$RAW"
	if [ "$4" = NA ]; then
		log "  $CUR_FS $1: NA ($err)"
		printf 'run %s %s %s: %s\n' "$RUN" "$CUR_FS" "$1" "$err" >>"$OUT/errors.log"
	else
		log "  $CUR_FS $1: $4 $2"
	fi
}
# record NA for each "test|unit|better" of a failed workload
record_na() { # error spec...
	local err=$1 s
	shift
	for s in "$@"; do
		IFS='|' read -r t u b <<<"$s"
		record "$t" "$u" "$b" NA "$err"
	done
}
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f\n", a / b; else print "NA" }'; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f\n", b - a }'; }
tmo() {
	timeout -k 10 "$TMO" "$@"
	local rc=$?
	{ [ $rc = 124 ] || [ $rc = 137 ]; } && echo "$1: timed out after $TMO s" >&2
	return $rc
}
ERR=$SCRATCH/err
errtxt() {
	grep -v 'line [0-9]*: *[0-9]* Killed ' "$ERR" 2>/dev/null | tail -n 4 | tr '\n' ' ' | tail -c 400 |
		sed 's/fio: fio:/fio:/g; s/ *$//'
}
fio_json() { # file expr (python over j = fio's json)
	python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

# --- workloads ------------------------------------------------------------------------
# Each: fresh directory, checks its own result, records NA with the error.

wl_seq() {
	local d=$CUR_MNT/seq t out specs=("seq-write|MB/s|higher" "seq-read|MB/s|higher")
	mkdir "$d" || { record_na "mkdir failed" "${specs[@]}"; return; }
	if ! out=$(tmo $WL seqwrite "$d/file" $SEQ_BYTES $MiB 2>"$ERR"); then
		record_na "seq-write: $(errtxt)" "${specs[@]}"; return
	fi
	record seq-write MB/s higher "$(div "${out% *}" "$(awk -v t="${out#* }" 'BEGIN { print t * 1e6 }')")"
	make_cold seq-read 2>"$ERR" || { record_na "remount: $(errtxt)" "${specs[1]}"; return; }
	if ! tmo fio --name=seqread --filename="$d/file" --rw=read --bs=1M --size=$SEQ_BYTES \
		--ioengine=psync --iodepth=1 --output-format=json --output="$SCRATCH/fio.json" >/dev/null 2>"$ERR"; then
		record_na "$(errtxt)" "${specs[1]}"; return
	fi
	out=$(fio_json "$SCRATCH/fio.json" "j['jobs'][0]['read']['io_bytes'], j['jobs'][0]['read']['bw_bytes'], j['jobs'][0]['error']")
	read -r bytes bw ferr <<<"$out"
	if [ "$bytes" != $SEQ_BYTES ] || [ "$ferr" != 0 ]; then
		record_na "seq-read read $bytes of $SEQ_BYTES bytes (fio error $ferr)" "${specs[1]}"; return
	fi
	record seq-read MB/s higher "$(div "$bw" 1000000)"
	rm -rf "$d"
}

fio_randread() { # file count extra-args... -> iops or error
	tmo fio --name=randread --filename="$1" --rw=randread --bs=4k --size=$RAND_BYTES \
		--number_ios="$2" --ioengine=psync --iodepth=1 --norandommap --randrepeat=0 \
		"${@:3}" --output-format=json --output="$SCRATCH/fio.json" >/dev/null 2>"$ERR" ||
		{ echo "$(errtxt)"; return 1; }
	read -r n iops ferr <<<"$(fio_json "$SCRATCH/fio.json" \
		"j['jobs'][0]['read']['total_ios'], j['jobs'][0]['read']['iops'], j['jobs'][0]['error']")"
	[ "$n" = "$2" ] && [ "$ferr" = 0 ] || { echo "did $n of $2 reads (fio error $ferr)"; return 1; }
	printf '%.1f\n' "$iops"
}

wl_rand() {
	local d=$CUR_MNT/rand t0 t out n ferr
	local specs=("rand-write-4k|IOPS|higher" "rand-read-4k cold|IOPS|higher" "rand-read-4k warm|IOPS|higher")
	mkdir "$d" || { record_na "mkdir failed" "${specs[@]}"; return; }
	# the file exists first, so that the timed part overwrites in place
	tmo $WL seqwrite "$d/file" $RAND_BYTES $MiB >/dev/null 2>"$ERR" ||
		{ record_na "layout: $(errtxt)" "${specs[@]}"; return; }
	syncfs
	t0=$(now)
	if ! tmo fio --name=randwrite --filename="$d/file" --rw=randwrite --bs=4k --size=$RAND_BYTES \
		--number_ios=$RAND_IOS --end_fsync=1 --ioengine=psync --iodepth=1 --overwrite=1 \
		--output-format=json --output="$SCRATCH/fio.json" >/dev/null 2>"$ERR"; then
		record_na "$(errtxt)" "${specs[@]}"; return
	fi
	t=$(since "$t0")
	read -r n ferr <<<"$(fio_json "$SCRATCH/fio.json" "j['jobs'][0]['write']['total_ios'], j['jobs'][0]['error']")"
	if [ "$n" != $RAND_IOS ] || [ "$ferr" != 0 ] || [ "$(stat -c %s "$d/file")" != $RAND_BYTES ]; then
		record_na "did $n of $RAND_IOS writes (fio error $ferr), size $(stat -c %s "$d/file")" "${specs[@]}"; return
	fi
	# wall clock, fsync included (fio's own runtime leaves the end fsync out)
	record rand-write-4k IOPS higher "$(div $RAND_IOS "$t")"
	make_cold rand-read-4k 2>"$ERR" || { record_na "remount: $(errtxt)" "${specs[@]:1}"; return; }
	if out=$(fio_randread "$d/file" $RREAD_COLD); then
		record "rand-read-4k cold" IOPS higher "$out"
	else
		record "rand-read-4k cold" IOPS higher NA "$out"
	fi
	# warm: the whole file read once, and fio keeps the page cache (no invalidate)
	cat "$d/file" >/dev/null
	if out=$(fio_randread "$d/file" $RREAD_WARM --invalidate=0); then
		record "rand-read-4k warm" IOPS higher "$out"
	else
		record "rand-read-4k warm" IOPS higher NA "$out"
	fi
	rm -rf "$d"
}

SMALL_TAR=
wl_create_small() {
	local d=$CUR_MNT/small t0 t u0 u1 n bytes
	local specs=("create-small|files/s|higher" "create-small space|bytes/byte|lower"
		"stat cold|entries/s|higher" "stat warm|entries/s|higher" "delete-small|files/s|higher")
	if [ -z "$SMALL_TAR" ]; then
		SMALL_TAR=$SCRATCH/small.tar
		$WL mktar "$SMALL_TAR" $SMALL_N $SMALL_DIRS $SMALL_SIZE || { SMALL_TAR=; record_na "mktar failed" "${specs[@]}"; return; }
	fi
	mkdir "$d" || { record_na "mkdir failed" "${specs[@]}"; return; }
	syncfs
	u0=$(tmo $WL used "$d")
	t0=$(now)
	if ! tmo tar xf "$SMALL_TAR" -C "$d" 2>"$ERR" || ! syncfs 2>>"$ERR"; then
		record_na "tar: $(errtxt)" "${specs[@]}"; return
	fi
	t=$(since "$t0")
	u1=$(tmo $WL used "$d")
	read -r n bytes <<<"$(find "$d/small" -type f -printf '%s\n' 2>"$ERR" | awk '{ n++; s += $1 } END { print n + 0, s + 0 }')"
	if [ "$n" != $SMALL_N ] || [ "$bytes" != $((SMALL_N * SMALL_SIZE)) ]; then
		record_na "untar gave $n files, $bytes bytes (want $SMALL_N, $((SMALL_N * SMALL_SIZE)))" "${specs[@]}"; return
	fi
	record create-small files/s higher "$(div $SMALL_N "$t")"
	if [ "${u1:-0}" -gt "${u0:-0}" ]; then
		record "create-small space" bytes/byte lower "$(div $((u1 - u0)) $((SMALL_N * SMALL_SIZE)))"
	else
		record "create-small space" bytes/byte lower NA "statvfs used went from $u0 to $u1 bytes"
	fi
	local want=$((SMALL_N + SMALL_DIRS + 2)) c
	make_cold create-small-stat 2>"$ERR" || { record_na "remount: $(errtxt)" "${specs[@]:2}"; return; }
	for c in cold warm; do
		t0=$(now)
		n=$(tmo find "$d" -printf '%s\n' 2>"$ERR" | wc -l)
		t=$(since "$t0")
		if [ "$n" = $want ]; then
			record "stat $c" entries/s higher "$(div $want "$t")"
		else
			record "stat $c" entries/s higher NA "find saw $n entries, want $want $(errtxt)"
		fi
	done
	t0=$(now)
	if tmo rm -rf "$d" 2>"$ERR" && syncfs 2>>"$ERR" && ! [ -e "$d" ]; then
		record delete-small files/s higher "$(div $SMALL_N "$(since "$t0")")"
	else
		record delete-small files/s higher NA "rm -rf: $(errtxt)"
	fi
}

wl_create_flat() {
	local d=$CUR_MNT/flat out t0 t n c
	local specs=("create-flat|files/s|higher" "readdir cold|entries/s|higher" "readdir warm|entries/s|higher")
	mkdir "$d" || { record_na "mkdir failed" "${specs[@]}"; return; }
	if ! out=$(tmo $WL create-flat "$d" $FLAT_N 2>"$ERR"); then
		record_na "create: $(errtxt)" "${specs[@]}"; return
	fi
	n=$(ls -f "$d" | wc -l)
	[ "$n" = $((FLAT_N + 2)) ] || { record_na "ls -f | wc -l printed $n, want $((FLAT_N + 2))" "${specs[@]}"; return; }
	record create-flat files/s higher "$(div "${out% *}" "${out#* }")"
	make_cold create-flat-readdir 2>"$ERR" || { record_na "remount: $(errtxt)" "${specs[@]:1}"; return; }
	for c in cold warm; do
		t0=$(now)
		n=$(tmo ls -f "$d" 2>"$ERR" | wc -l)
		t=$(since "$t0")
		if [ "$n" = $((FLAT_N + 2)) ]; then
			record "readdir $c" entries/s higher "$(div "$n" "$t")"
		else
			record "readdir $c" entries/s higher NA "ls -f | wc -l printed $n, want $((FLAT_N + 2)) $(errtxt)"
		fi
	done
	tmo rm -rf "$d"
}

wl_fsync_append() {
	local d=$CUR_MNT/fsync out
	mkdir "$d" || { record fsync-append ops/s higher NA "mkdir failed"; return; }
	if out=$(tmo $WL append-fsync "$d/log" $FSYNC_N 2>"$ERR"); then
		record fsync-append ops/s higher "$(div "${out% *}" "${out#* }")"
	else
		record fsync-append ops/s higher NA "$(errtxt)"
	fi
	# the same with a second process streaming 1 MiB writes into another
	# file without syncing: does fsync of one file pay for others' data?
	local c t p50 p99 max
	if out=$(tmo $WL fsync-load "$d/log2" $((FSYNC_N / 5)) "$d/bg" $FSYNC_BG 2>"$ERR"); then
		read -r c t p50 p99 max <<<"$out"
		record fsync-load ops/s higher "$(div "$c" "$t")"
		record "fsync-load p50" ms lower "$(awk -v x="$p50" 'BEGIN{printf "%.3f", x*1000}')"
		record "fsync-load p99" ms lower "$(awk -v x="$p99" 'BEGIN{printf "%.3f", x*1000}')"
	else
		record fsync-load ops/s higher NA "$(errtxt)"
	fi
	rm -rf "$d"
}

SRC_STAT= SRC_TAR=
wl_tree() {
	local d=$CUR_MNT/tree t0 t n bytes st tb
	local specs=("tree-copy|MB/s|higher" "tree-copy files|files/s|higher" "tree-read|MB/s|higher")
	local base=${TREE_SRC##*/} parent=${TREE_SRC%/*}
	if [ -z "$SRC_STAT" ]; then
		SRC_STAT=$($WL treestat "$TREE_SRC")
		SRC_TAR=$(tar c -C "${parent:-/}" "$base" 2>/dev/null | wc -c)
	fi
	read -r n bytes <<<"$SRC_STAT"
	mkdir "$d" || { record_na "mkdir failed" "${specs[@]}"; return; }
	t0=$(now)
	if ! tmo cp -a "$TREE_SRC" "$d/" 2>"$ERR" || ! syncfs 2>>"$ERR"; then
		record_na "cp -a: $(errtxt)" "${specs[@]}"; return
	fi
	t=$(since "$t0")
	st=$($WL treestat "$d/$base" 2>"$ERR")
	if [ "$st" != "$SRC_STAT" ]; then
		record_na "copy has (entries bytes) $st, source $SRC_STAT" "${specs[@]}"; return
	fi
	record tree-copy MB/s higher "$(div "$bytes" "$(awk -v t="$t" 'BEGIN { print t * 1e6 }')")"
	record "tree-copy files" files/s higher "$(div "$n" "$t")"
	make_cold tree-read 2>"$ERR" || { record_na "remount: $(errtxt)" "${specs[2]}"; return; }
	t0=$(now)
	tb=$(tmo tar c -C "$d" "$base" 2>"$ERR" | wc -c)
	t=$(since "$t0")
	if [ "$tb" = "$SRC_TAR" ]; then
		record tree-read MB/s higher "$(div "$tb" "$(awk -v t="$t" 'BEGIN { print t * 1e6 }')")"
	else
		record tree-read MB/s higher NA "tar of the copy is $tb bytes, of the source $SRC_TAR $(errtxt)"
	fi
	tmo rm -rf "$d"
}

wl_scale() {
	local part d out line tenth files secs rate ok
	for part in dirs flat; do
		d=$CUR_MNT/scale-$part
		mkdir "$d" || { record "scale-$part tenth 1" files/s higher NA "mkdir failed"; continue; }
		log "  $CUR_FS scale-$part: $([ $part = dirs ] && echo "$SCALE_FILES files in $SCALE_DIRS directories" || echo "$SCALE_FLAT files in one directory")"
		if [ $part = dirs ]; then
			timeout -k 10 $((SCALE_LIMIT + 600)) $WL scale "$d" $SCALE_FILES $SCALE_DIRS $SCALE_LIMIT >"$SCRATCH/scale.out" 2>"$ERR"
		else
			timeout -k 10 $((SCALE_LIMIT + 600)) $WL scale "$d" $SCALE_FLAT 0 $SCALE_LIMIT >"$SCRATCH/scale.out" 2>"$ERR"
		fi
		ok=$?
		for ((tenth = 1; tenth <= 10; tenth++)); do
			line=$(awk -v t=$tenth '$1 == t' "$SCRATCH/scale.out")
			if [ -n "$line" ]; then
				record "scale-$part tenth $(printf %02d $tenth)" files/s higher "${line##* }"
			else
				record "scale-$part tenth $(printf %02d $tenth)" files/s higher NA "exit $ok: $(errtxt)"
			fi
		done
		syncfs
	done
}

# unmount and remove; the FUSE daemon's peak RSS over the mounts of this round
finish_fs() {
	local fs=$CUR_FS
	teardown_fs || echo "run $RUN $fs: unclean teardown" >>"$OUT/errors.log"
	CUR_FS=$fs
	[ "$PEAK_RSS" -gt 0 ] && record "daemon peak RSS" MiB lower "$(div "$PEAK_RSS" $MiB)"
	CUR_FS=
}

# --- main ------------------------------------------------------------------------------
# the filesystem answers and takes a new directory
usable() {
	healthy && timeout 20 mkdir "$CUR_MNT/.probe" 2>/dev/null &&
		timeout 20 rmdir "$CUR_MNT/.probe" 2>/dev/null
}

# a failed workload left the filesystem unusable (read-only, hung, gone):
# keep what helps to debug it (fsck.arborfs output, the first broken arborfs
# image), then continue on a fresh filesystem
KEPT_IMAGE=0
recreate_fs() { # next-workload
	local fs=$CUR_FS tag=$CUR_FS-r$RUN-before-$1 fsck=$BUILD/fsck/fsck.arborfs rc
	log "  $fs is not usable before $1: making a fresh filesystem (log: $OUT/logs/$fs-r$RUN-$PHASE.log)"
	echo "run $RUN $fs: filesystem unusable before $1; continuing on a fresh one" >>"$OUT/errors.log"
	do_umount force 2>>"$OUT/errors.log"
	if [ "$fs" = arborfs ] && [ -x "$fsck" ]; then
		timeout 300 "$fsck" -n -v "$CUR_IMG" >"$OUT/logs/fsck-$tag.txt" 2>&1
		rc=$?
		echo "run $RUN $fs: fsck.arborfs -n exit $rc: $OUT/logs/fsck-$tag.txt" >>"$OUT/errors.log"
		if [ $rc != 0 ] && [ $KEPT_IMAGE = 0 ]; then
			KEPT_IMAGE=1
			mv "$CUR_IMG" "$OUT/broken-$tag.img" &&
				echo "run $RUN $fs: image kept as $OUT/broken-$tag.img" >>"$OUT/errors.log"
		fi
	fi
	teardown_fs force
	setup_fs "$fs" "$(wl_tag "$1")"
}

# trace name of the first part of each workload group
wl_tag() {
	case $1 in
	seq) echo seq-write ;; rand) echo rand-write-4k ;; tree) echo tree-copy ;;
	*) echo "$1" ;;
	esac
}

# A FUSE daemon that stops answering leaves every process that touches the
# mount (this script too) waiting.  The watchdog aborts the connection after
# WDOG seconds, so that the workload fails (NA) and the suite goes on.
WDOG=${BENCH_WATCHDOG:-$((2 * TMO))} WDOG_PID=
watchdog_start() {
	[ "$CUR_KIND" = fuse ] || return 0
	(
		trap 'kill $! 2>/dev/null; exit 0' TERM
		sleep "$WDOG" &
		wait $!
		echo "run $RUN $CUR_FS: watchdog: $1 still running after $WDOG s; aborting the FUSE connection" >>"$OUT/errors.log"
		# without fusectl mounted there is no abort file: killing the
		# daemon ends the connection too
		fuse_abort "$CUR_MNT" || kill -KILL "$(cat "$SCRATCH/daemon.pid")" 2>/dev/null
	) &
	WDOG_PID=$!
}
watchdog_stop() {
	[ -n "$WDOG_PID" ] || return 0
	kill "$WDOG_PID" 2>/dev/null
	wait "$WDOG_PID" 2>/dev/null
	WDOG_PID=
}

run_workload() { # group
	local fn=wl_${1//-/_} tag
	tag=$(wl_tag "$1")
	if ! usable; then
		recreate_fs "$1" 2>>"$OUT/errors.log" || return 1
	elif [ $TRACE = 1 ] && [ "$CUR_KIND" = fuse ] && [ "$CUR_TAG" != "$tag" ]; then
		do_umount && do_mount "$tag" || return 1
	fi
	log " $CUR_FS: $1"
	watchdog_start "$1"
	$fn
	watchdog_stop
}

machine_json() {
	python3 - "$@" <<'EOF'
import json, os, platform, subprocess, sys
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return ""
model = ""
for l in open("/proc/cpuinfo"):
    if l.startswith("model name"):
        model = l.split(":", 1)[1].strip(); break
mem = 0
for l in open("/proc/meminfo"):
    if l.startswith("MemTotal"):
        mem = int(l.split()[1]) * 1024
a = dict(x.split("=", 1) for x in sys.argv[1:])
print(json.dumps({
    "date": sh("date -Is"), "host": platform.node(),
    "nproc": os.cpu_count(), "cpu_model": model, "ram_bytes": mem,
    "kernel": platform.release(), "loadavg_start": open("/proc/loadavg").read().split()[:3],
    "git": sh(f"git -C {a['repo']} describe --always --dirty 2>/dev/null"),
    "versions": {"fio": sh("fio --version"), "fuse2fs": sh("fuse2fs -V 2>&1 | head -1"),
                 "mkfs.btrfs": sh("mkfs.btrfs --version 2>&1 | head -1"),
                 "mkfs.ext4": sh("mkfs.ext4 -V 2>&1 | head -1"),
                 "arborfs": sh(f"{a['daemon']} -V 2>&1 | grep -m1 arborfs")},
    "args": a["args"], "quick": a["quick"] == "1", "runs": int(a["runs"]),
    "trace": a["trace"] == "1", "scratch": a["scratch"],
    "fuse_enable_uring": sh("cat /sys/module/fuse/parameters/enable_uring 2>/dev/null"),
    "sizes": {k: int(v) for k, v in (x.split(":") for x in a["sizes"].split(","))},
}, indent=1))
EOF
}

log "results in $OUT, scratch in $SCRATCH"
log "filesystems: ${FSES[*]}; workloads: ${!SEL[*]}; runs: $RUNS$([ $QUICK = 1 ] && echo ' (quick)')"
machine_json repo="$REPO" daemon="$DAEMON" args="$ARGS" quick=$QUICK runs=$RUNS trace=$TRACE \
	scratch="$SCRATCH" \
	sizes="seq_bytes:$SEQ_BYTES,rand_bytes:$RAND_BYTES,rand_writes:$RAND_IOS,rand_reads_cold:$RREAD_COLD,rand_reads_warm:$RREAD_WARM,small_files:$SMALL_N,small_dirs:$SMALL_DIRS,flat_files:$FLAT_N,fsyncs:$FSYNC_N,scale_files:$SCALE_FILES,scale_dirs:$SCALE_DIRS,scale_flat:$SCALE_FLAT" \
	>"$OUT/meta.json"

REGULAR=()
for w in seq rand create-small create-flat fsync-append tree; do
	[ -n "${SEL[$w]:-}" ] && REGULAR+=("$w")
done
for ((RUN = 1; RUN <= RUNS; RUN++)); do
	if [ ${#REGULAR[@]} -gt 0 ]; then
		PHASE=regular
		for fs in "${FSES[@]}"; do
			log "round $RUN/$RUNS: $fs"
			if ! setup_fs "$fs" "$(wl_tag "${REGULAR[0]}")" 2>"$SCRATCH/setup.err"; then
				log "$fs: setup failed: $(cat "$SCRATCH/setup.err")"
				echo "run $RUN $fs: setup failed: $(cat "$SCRATCH/setup.err")" >>"$OUT/errors.log"
				record "setup" - higher NA "$(cat "$SCRATCH/setup.err")"
				teardown_fs force
				continue
			fi
			for w in "${REGULAR[@]}"; do
				run_workload "$w" || record "$w" - higher NA "could not get a working filesystem: $(tail -c 300 "$OUT/errors.log")"
			done
			finish_fs
		done
	fi
	if [ -n "${SEL[scale]:-}" ]; then
		PHASE=scale
		for fs in "${FSES[@]}"; do
			log "round $RUN/$RUNS: $fs scale"
			if ! setup_fs "$fs" scale 2>"$SCRATCH/setup.err"; then
				record "setup" - higher NA "$(cat "$SCRATCH/setup.err")"
				teardown_fs force
				continue
			fi
			run_workload scale
			finish_fs
		done
	fi
done

python3 "$HERE/lib/report.py" "$OUT" | tee "$OUT/table.txt"
if [ $TRACE = 1 ]; then
	for tf in "$OUT"/trace-*.txt; do
		[ -s "$tf" ] && python3 "$HERE/iotrace-plot" "$tf" -o "${tf%.txt}.svg" --title "arborfs: $(basename "${tf%.txt}")"
	done
fi
[ -s "$OUT/errors.log" ] && log "failures: see $OUT/errors.log"
log "done: $OUT/results.json"
