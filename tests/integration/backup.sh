#!/bin/bash
# backup.sh - arbor backup between two mounted images, and progress of
# send and receive:
#  * the first backup is full, the next ones incremental (and their
#    streams much smaller), each received copy has its source snapshot's
#    manifest (diff -r, modes and sizes) and digest;
#  * --keep 2 keeps the newest two on each side; with DEST's newest
#    deleted by hand the next backup is incremental against the older
#    common one, and with none left on DEST it is full again;
#  * a DEST that is not arborfs fails (exit 1), a bad option exits 2,
#    --dry-run changes nothing, a backup to the same mount works;
#  * a backup stopped with SIGTERM mid-stream leaves no new snapshot on
#    either side, and the next one works;
#  * send --progress | receive --progress: the progress goes to stderr,
#    the stream through stdout is intact;
#  * --dest-image IMG: DEST in an unmounted image; a mounted image and a
#    missing DEST are refused (nothing left behind); full, then
#    incremental against the first (which receive --list-parents --image
#    offers), --keep 1 prunes both sides; the image mounted read-only
#    holds the source snapshot (diff, manifest, digest);
#  * every image unmounts and fscks clean.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
IMGB=$TMP/b.img
MNTB=$TMP/mntb
B_PID=
BK_PID=
mkdir -p "$MNTB"

test_cleanup() {
	if [ -n "$BK_PID" ]; then
		kill -TERM "$BK_PID" 2>/dev/null
		wait "$BK_PID" 2>/dev/null
	fi
	force_unmount "$MNTB"
	if [ -n "$B_PID" ]; then
		wait_pid_gone "$B_PID" 30 || kill -TERM "$B_PID" 2>/dev/null
		wait "$B_PID" 2>/dev/null
	fi
}

# mount_b [OPTIONS]: mount $IMGB at $MNTB
mount_b() {
	"$DAEMON" -f "$@" "$IMGB" "$MNTB" >>"$TMP/daemon-b.log" 2>&1 &
	B_PID=$!
	local t=300
	until mountpoint -q "$MNTB"; do
		kill -0 "$B_PID" 2>/dev/null || fail "second daemon exited"
		t=$((t - 1))
		[ $t -gt 0 ] || fail "second mount: not mounted after 30 s"
		sleep 0.1
	done
}

umount_b() {
	sync
	unmount_retry "$MNTB"
	wait_pid_gone "$B_PID" 120 || fail "second daemon still running"
	local st=0
	wait "$B_PID" || st=$?
	B_PID=
	[ $st -eq 0 ] || fail "second daemon exited with status $st"
	if grep -q "ERROR: AddressSanitizer\|runtime error:" "$TMP/daemon-b.log"; then
		head -n 40 "$TMP/daemon-b.log" >&2
		fail "sanitizer report in the second daemon's log"
	fi
}

digest() {
	"$ARBOR" subvolume digest "$1" | cut -d' ' -f1
}

# same_tree SRC DST: diff -r, modes and sizes, manifests and digests
same_tree() {
	diff -r --no-dereference "$1" "$2" >&2 || fail "diff -r: $2 differs from $1"
	(cd "$1" && find . -printf '%p %M %s %U %G\n' | sort) >"$TMP/s.src"
	(cd "$2" && find . -printf '%p %M %s %U %G\n' | sort) >"$TMP/s.dst"
	# a directory's size counts its names: equal anyway, but nested
	# subvolume links are not sent
	diff -u "$TMP/s.src" "$TMP/s.dst" >&2 || fail "modes or sizes of $2 differ from $1"
	manifest "$1" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.src"
	manifest "$2" | awk '{ if ($2 ~ /^40/) $5 = "n-"; print }' >"$TMP/m.dst"
	diff -u "$TMP/m.src" "$TMP/m.dst" >&2 || fail "$2 differs from $1"
	local a b
	a=$(digest "$1")
	b=$(digest "$2")
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "digest of $2 ($b) is not that of $1 ($a)"
}

# json FILE EXPR
json() {
	python3 -c "import json,sys; j = json.load(open(sys.argv[1])); print($2)" "$1" ||
		fail "bad JSON in $1: $(head -c 300 "$1")"
}

# backups DIR: the backup snapshots in DIR, oldest name first
backups() {
	(cd "$1" 2>/dev/null && ls -d home.* 2>/dev/null) || true
}

# run_backup OUT [options]: arbor backup ... --json into OUT, must succeed
run_backup() {
	local out=$1
	shift
	"$ARBOR" backup --json "$@" "$MNT/home" "$MNTB/bk" >"$out" 2>"$TMP/bk.err" ||
		{ cat "$TMP/bk.err" >&2; fail "arbor backup $*: exit $?"; }
}

fs_mkfs
rm -f "$IMGB"
"$MKFS" -q "$IMGB" || fail "mkfs B"
fs_mount
mount_b
mkdir "$MNTB/bk"

SEED=${ARBOR_TEST_SEED:-$RANDOM}
log "seed $SEED (ARBOR_TEST_SEED to repeat)"
N=$([ "$SCALE" = full ] && echo 3000 || echo 300)
STEPS=$([ "$SCALE" = full ] && echo 8 || echo 2)

"$ARBOR" subvolume create "$MNT/home" >/dev/null || fail "subvolume create"
python3 - "$MNT/home" "$SEED" "$N" <<'EOF'
import os, random, sys
root, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
dirs = [root]
for i in range(n):
    d = r.choice(dirs)
    p = os.path.join(d, "n%d" % i)
    if r.randrange(6) == 0:
        os.mkdir(p); dirs.append(p)
    else:
        with open(p, "wb") as f:
            f.write(os.urandom(r.randrange(0, 40000)))
        os.chmod(p, r.choice([0o644, 0o600, 0o755]))
EOF

log "usage errors: exit 2"
st=0; "$ARBOR" backup --bogus "$MNT/home" "$MNTB/bk" 2>/dev/null || st=$?
[ $st = 2 ] || fail "bad option: exit $st"
st=0; "$ARBOR" backup "$MNT/home" 2>/dev/null || st=$?
[ $st = 2 ] || fail "one argument: exit $st"
st=0; "$ARBOR" backup --keep 0 "$MNT/home" "$MNTB/bk" 2>/dev/null || st=$?
[ $st = 2 ] || fail "--keep 0: exit $st"

log "a DEST that is not arborfs: exit 1, a clear message"
mkdir "$TMP/plain"
st=0; "$ARBOR" backup "$MNT/home" "$TMP/plain" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "DEST not arborfs: exit $st"
grep -q "not on a mounted arborfs" "$TMP/err" || fail "DEST not arborfs: $(cat "$TMP/err")"
[ -z "$(backups "$MNT/.snapshots")" ] || fail "a refused backup left $(backups "$MNT/.snapshots")"

log "--dry-run changes nothing"
"$ARBOR" backup --dry-run "$MNT/home" "$MNTB/bk" >"$TMP/dry" || fail "--dry-run"
grep -q "would back up: .*full" "$TMP/dry" || fail "--dry-run: $(cat "$TMP/dry")"
[ ! -e "$MNT/.snapshots" ] && [ -z "$(ls -A "$MNTB/bk")" ] || fail "--dry-run made something"

log "first backup: full"
run_backup "$TMP/b1"
[ "$(json "$TMP/b1" "j['mode']")" = full ] || fail "first backup not full: $(cat "$TMP/b1")"
full_bytes=$(json "$TMP/b1" "j['bytes']")
s1=$(basename "$(json "$TMP/b1" "j['snapshot']")")
[[ $s1 =~ ^home\.[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z(\.[0-9]+)?$ ]] ||
	fail "snapshot name $s1"
[ -d "$MNT/.snapshots/$s1" ] && [ -d "$MNTB/bk/$s1" ] || fail "$s1 missing on a side"
same_tree "$MNT/.snapshots/$s1" "$MNTB/bk/$s1"
log "full: $full_bytes bytes in $(json "$TMP/b1" "j['seconds']") s"

# the human output, and the same second: a suffix
"$ARBOR" backup --no-progress "$MNT/home" "$MNTB/bk" >"$TMP/b1h" 2>"$TMP/err" ||
	fail "second backup: $(cat "$TMP/err")"
grep -q "backed up: snapshot .*incremental against .*$s1" "$TMP/b1h" ||
	fail "human output: $(cat "$TMP/b1h")"
grep -q "^received .* bytes" "$TMP/b1h" || fail "human output: $(cat "$TMP/b1h")"
run_backup "$TMP/b1s"
run_backup "$TMP/b1t"
n=$(backups "$MNTB/bk" | wc -l)
[ "$n" = 4 ] || fail "4 backups made, $n on DEST: $(backups "$MNTB/bk")"
backups "$MNTB/bk" | grep -q '\.[0-9]$' || log "(no two backups in one second)"

change() {
	python3 - "$MNT/home" "$1" <<'EOF'
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
fs = []
for dp, dn, fn in os.walk(root):
    fs += [os.path.join(dp, x) for x in fn]
fs.sort()
r.shuffle(fs)
for i in range(5):                              # create
    open(os.path.join(root, "c%d_%d" % (seed, i)), "wb").write(os.urandom(5000))
for f in fs[0:3]:                               # delete
    os.unlink(f)
for f in fs[3:6]:                               # rename
    os.rename(f, f + ".r%d" % seed)
for f in fs[6:9]:                               # overwrite
    open(f, "wb").write(os.urandom(3000))
os.chmod(fs[9], 0o640)
EOF
}

prev=$s1
for i in $(seq 1 "$STEPS"); do
	change "$SEED$i"
	run_backup "$TMP/b.$i"
	[ "$(json "$TMP/b.$i" "j['mode']")" = incremental ] || fail "backup $i not incremental: $(cat "$TMP/b.$i")"
	inc=$(json "$TMP/b.$i" "j['bytes']")
	[ "$inc" -lt $((full_bytes / 5)) ] || fail "incremental stream $inc bytes, full $full_bytes"
	s=$(basename "$(json "$TMP/b.$i" "j['snapshot']")")
	same_tree "$MNT/.snapshots/$s" "$MNTB/bk/$s"
	log "incremental $i: $inc bytes (full $full_bytes) in $(json "$TMP/b.$i" "j['seconds']") s"
	prev=$s
done

log "--keep 2: the newest two on each side"
change "${SEED}90"
run_backup "$TMP/k1" --keep 2
[ "$(backups "$MNT/.snapshots" | wc -l)" = 2 ] || fail "--keep 2 left on the source: $(backups "$MNT/.snapshots")"
[ "$(backups "$MNTB/bk" | wc -l)" = 2 ] || fail "--keep 2 left on DEST: $(backups "$MNTB/bk")"
newest=$(basename "$(json "$TMP/k1" "j['snapshot']")")
[ -d "$MNT/.snapshots/$newest" ] && [ -d "$MNTB/bk/$newest" ] || fail "--keep 2 removed the newest"
[ "$(json "$TMP/k1" "len(j['deleted'])")" -gt 0 ] || fail "--keep 2 reports nothing deleted"
older=$(cd "$MNT/.snapshots" && ls -d home.* | grep -vx "$newest")

log "DEST's newest deleted by hand: incremental against the older common one"
"$ARBOR" subvolume delete "$MNTB/bk/$newest" >/dev/null || fail "delete by hand"
change "${SEED}91"
run_backup "$TMP/k2" --keep 2
[ "$(json "$TMP/k2" "j['mode']")" = incremental ] || fail "after a hand delete: $(cat "$TMP/k2")"
[ "$(basename "$(json "$TMP/k2" "j['parent']")")" = "$older" ] ||
	fail "parent $(json "$TMP/k2" "j['parent']"), want $older"
s=$(basename "$(json "$TMP/k2" "j['snapshot']")")
same_tree "$MNT/.snapshots/$s" "$MNTB/bk/$s"
# the source keeps its newest two, DEST its two (the older common one
# and the new one)
[ "$(backups "$MNT/.snapshots" | tr '\n' ' ')" = "$(printf '%s\n' "$newest" "$s" | sort | tr '\n' ' ')" ] ||
	fail "source after keep: $(backups "$MNT/.snapshots")"
[ "$(backups "$MNTB/bk" | tr '\n' ' ')" = "$(printf '%s\n' "$older" "$s" | sort | tr '\n' ' ')" ] ||
	fail "DEST after keep: $(backups "$MNTB/bk")"

log "no common snapshot left: full again"
# DEST keeps $older, which the source no longer has
"$ARBOR" subvolume delete "$MNTB/bk/$s" >/dev/null || fail "delete by hand"
run_backup "$TMP/f2" --keep 2
[ "$(json "$TMP/f2" "j['mode']")" = full ] || fail "no common one: $(cat "$TMP/f2")"
s=$(basename "$(json "$TMP/f2" "j['snapshot']")")
same_tree "$MNT/.snapshots/$s" "$MNTB/bk/$s"
[ "$(backups "$MNTB/bk" | tr '\n' ' ')" = "$(printf '%s\n' "$older" "$s" | sort | tr '\n' ' ')" ] ||
	fail "DEST after a full backup with --keep 2: $(backups "$MNTB/bk")"

log "--keep 1: one on each side, the common one, and the next is incremental"
change "${SEED}94"
run_backup "$TMP/k3" --keep 1
s=$(basename "$(json "$TMP/k3" "j['snapshot']")")
[ "$(backups "$MNT/.snapshots")" = "$s" ] || fail "--keep 1, source: $(backups "$MNT/.snapshots")"
[ "$(backups "$MNTB/bk")" = "$s" ] || fail "--keep 1, DEST: $(backups "$MNTB/bk")"
change "${SEED}95"
run_backup "$TMP/k4" --keep 2
[ "$(json "$TMP/k4" "j['mode']")" = incremental ] &&
	[ "$(basename "$(json "$TMP/k4" "j['parent']")")" = "$s" ] ||
	fail "after --keep 1: $(cat "$TMP/k4")"

log "a backup stopped by SIGTERM leaves nothing new, and the next one works"
BIGMB=$([ "$SCALE" = full ] && echo 256 || echo 16)
head -c $((BIGMB << 20)) /dev/urandom >"$MNT/home/big" || fail "big file"
before_src=$(backups "$MNT/.snapshots")
before_dst=$(backups "$MNTB/bk")
"$ARBOR" backup --progress --bwlimit 4M "$MNT/home" "$MNTB/bk" >"$TMP/int.out" 2>"$TMP/int.err" &
BK_PID=$!
# wait for the stream to move (the progress line shows bytes)
for _ in $(seq 100); do
	grep -q "MiB" "$TMP/int.err" && break
	sleep 0.1
done
grep -q "MiB" "$TMP/int.err" || fail "no progress before the stop: $(cat "$TMP/int.err")"
kill -TERM "$BK_PID"
st=0
wait "$BK_PID" || st=$?
BK_PID=
[ $st = 1 ] || fail "stopped backup: exit $st, $(cat "$TMP/int.err")"
grep -q "interrupted" "$TMP/int.err" || fail "stopped backup: $(cat "$TMP/int.err")"
log "stopped: $(tr '\r' '\n' <"$TMP/int.err" | grep -v '^$' | tail -n 3 | tr '\n' '|')"
[ "$(backups "$MNT/.snapshots")" = "$before_src" ] || fail "a stopped backup left a source snapshot"
[ "$(backups "$MNTB/bk")" = "$before_dst" ] || fail "a stopped backup left $(backups "$MNTB/bk")"
[ -z "$(ls -A "$MNTB/bk" | grep -v '^home\.')" ] || fail "a stopped backup left $(ls -A "$MNTB/bk")"
# nor a partial receive (its snapshot is gone: the rest could never come)
"$ARBOR" subvolume list "$MNTB" >"$TMP/list" || fail "subvolume list"
grep -q " part " "$TMP/list" &&
	fail "a stopped backup left a partial receive: $("$ARBOR" subvolume list "$MNTB")"
run_backup "$TMP/a1" --keep 2
[ "$(json "$TMP/a1" "j['mode']")" = incremental ] || fail "after the stop: $(cat "$TMP/a1")"
s=$(basename "$(json "$TMP/a1" "j['snapshot']")")
same_tree "$MNT/.snapshots/$s" "$MNTB/bk/$s"

log "SIGKILL mid-stream: the stream still ends, complete on both sides"
# a process in a FUSE ioctl dies only once the daemon answers; the pump
# (a process of its own) carries the stream to its end meanwhile
head -c $((BIGMB << 20)) /dev/urandom >"$MNT/home/big" || fail "big file"
"$ARBOR" backup --progress --bwlimit 8M "$MNT/home" "$MNTB/bk" >/dev/null 2>"$TMP/int.err" &
BK_PID=$!
for _ in $(seq 100); do
	grep -q "MiB" "$TMP/int.err" && break
	sleep 0.1
done
kill -KILL "$BK_PID"
wait "$BK_PID" 2>/dev/null || true
BK_PID=
k=$(cd "$MNT/.snapshots" && ls -d home.* | tail -n 1)
[ -d "$MNTB/bk/$k" ] || fail "after SIGKILL: $k not on DEST: $(backups "$MNTB/bk")"
same_tree "$MNT/.snapshots/$k" "$MNTB/bk/$k"
run_backup "$TMP/a2" --keep 2
[ "$(json "$TMP/a2" "j['mode']")" = incremental ] &&
	[ "$(basename "$(json "$TMP/a2" "j['parent']")")" = "$k" ] || fail "after SIGKILL: $(cat "$TMP/a2")"

log "a failing receive (DEST read-only): nothing left on either side"
"$ARBOR" subvolume create "$MNTB/ro" >/dev/null || fail "create ro"
"$ARBOR" property set "$MNTB/ro" ro true >/dev/null 2>&1 || fail "property set ro"
st=0
"$ARBOR" backup --snapdir "$MNT/.snapshots" "$MNT/home" "$MNTB/ro" >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "backup into a read-only subvolume: exit $st"
[ "$(backups "$MNT/.snapshots" | wc -l)" = 2 ] ||
	fail "a failed backup left a source snapshot: $(backups "$MNT/.snapshots")"
log "refused: $(tail -n 2 "$TMP/err" | tr '\n' '|')"

log "a backup into the same mount"
mkdir "$MNT/local"
"$ARBOR" backup --json --no-progress "$MNT/home" "$MNT/local" >"$TMP/l1" || fail "backup to the same mount"
s=$(basename "$(json "$TMP/l1" "j['snapshot']")")
same_tree "$MNT/.snapshots/$s" "$MNT/local/$s"
change "${SEED}92"
"$ARBOR" backup --json --no-progress "$MNT/home" "$MNT/local" >"$TMP/l2" || fail "second backup to the same mount"
[ "$(json "$TMP/l2" "j['mode']")" = incremental ] || fail "same mount: $(cat "$TMP/l2")"

log "a name taken in the same second: a suffix"
mkdir "$MNT/local2"
now=$(date +%s)
for d in 0 1 2 3 4 5; do
	mkdir "$MNT/local2/home.$(date -u -d "@$((now + d))" +%Y-%m-%dT%H:%M:%SZ)"
done
"$ARBOR" backup --json --no-progress "$MNT/home" "$MNT/local2" >"$TMP/l3" || fail "backup beside taken names"
s=$(basename "$(json "$TMP/l3" "j['snapshot']")")
[[ $s =~ Z\.1$ ]] || fail "a taken name: the backup is named $s"
[ -d "$MNT/local2/$s" ] || fail "$s not in local2"

log "send --progress | receive --progress: progress on stderr only"
"$ARBOR" subvolume snapshot -r "$MNT/home" "$MNT/p1" >/dev/null || fail "snapshot p1"
"$ARBOR" send --progress "$MNT/p1" 2>"$TMP/send.err" |
	"$ARBOR" receive --progress "$MNTB" >"$TMP/recv.out" 2>"$TMP/recv.err" ||
	fail "send --progress | receive --progress: $(cat "$TMP/send.err" "$TMP/recv.err")"
same_tree "$MNT/p1" "$MNTB/p1"
tr '\r' '\n' <"$TMP/send.err" | grep -q "^send: .* bytes) in .* commands" || fail "send progress: $(cat "$TMP/send.err")"
tr '\r' '\n' <"$TMP/recv.err" | grep -q "^receive: .* bytes) in " || fail "receive progress: $(cat "$TMP/recv.err")"
grep -q "^Received subvolume 'p1'" "$TMP/recv.out" || fail "receive stdout: $(cat "$TMP/recv.out")"
[ "$(wc -l <"$TMP/recv.out")" = 1 ] || fail "receive stdout: $(cat "$TMP/recv.out")"
# -f FILE: the same bytes as without progress; an incremental one shows an ETA
change "${SEED}93"
"$ARBOR" subvolume snapshot -r "$MNT/home" "$MNT/p2" >/dev/null || fail "snapshot p2"
"$ARBOR" send --no-progress -f "$TMP/p2.a" -p "$MNT/p1" "$MNT/p2" || fail "send -f"
"$ARBOR" send --progress -p "$MNT/p1" "$MNT/p2" >"$TMP/p2.b" 2>"$TMP/send.err" || fail "send --progress -p"
cmp "$TMP/p2.a" "$TMP/p2.b" || fail "the stream differs with --progress"
"$ARBOR" receive --progress -f "$TMP/p2.b" "$MNTB" >/dev/null 2>"$TMP/recv.err" || fail "receive --progress -f"
log "incremental send: $(tr '\r' '\n' <"$TMP/send.err" | grep -v '^$' | head -n 1)"
same_tree "$MNT/p2" "$MNTB/p2"
"$ARBOR" send --no-progress -p "$MNT/p1" "$MNT/p2" 2>"$TMP/send.err" | cmp - "$TMP/p2.a" ||
	fail "send --no-progress to stdout"
[ ! -s "$TMP/send.err" ] || fail "--no-progress wrote $(cat "$TMP/send.err")"

log "--dest-image: backups into an unmounted image"
IMGC=$TMP/c.img
"$MKFS" -q "$IMGC" || fail "mkfs C"
"$ARBOR" subvolume create --image "$IMGC" /bk >/dev/null || fail "subvolume create --image C /bk"
nsnap=$(backups "$MNT/.snapshots" | wc -l)
st=0
"$ARBOR" backup --dest-image "$IMGB" "$MNT/home" /bk >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "in use" "$TMP/err" || fail "--dest-image of a mounted image: exit $st, $(cat "$TMP/err")"
st=0
"$ARBOR" backup --dest-image "$IMGC" "$MNT/home" /nothere >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "/nothere" "$TMP/err" || fail "--dest-image, missing DEST: exit $st, $(cat "$TMP/err")"
[ "$(backups "$MNT/.snapshots" | wc -l)" = "$nsnap" ] || fail "a refused backup left a snapshot"
# img_backup OUT [options]: arbor backup --dest-image C ... /bk, must succeed
img_backup() {
	local out=$1
	shift
	"$ARBOR" backup --json --no-progress --dest-image "$IMGC" "$@" "$MNT/home" /bk >"$out" 2>"$TMP/bk.err" ||
		{ cat "$TMP/bk.err" >&2; fail "arbor backup --dest-image $*: exit $?"; }
}
img_backup "$TMP/c1"
[ "$(json "$TMP/c1" "j['mode']")" = full ] || fail "first backup into C not full: $(cat "$TMP/c1")"
[ "$(json "$TMP/c1" "j['dest_image']")" = "$IMGC" ] || fail "JSON lacks dest_image: $(cat "$TMP/c1")"
c1=$(basename "$(json "$TMP/c1" "j['snapshot']")")
"$ARBOR" receive --list-parents --image "$IMGC" /bk >"$TMP/lp" || fail "receive --list-parents --image"
grep -q "$c1" "$TMP/lp" || fail "C does not offer $c1 as a parent: $(cat "$TMP/lp")"
change "${SEED}95"
img_backup "$TMP/c2"
[ "$(json "$TMP/c2" "j['mode']")" = incremental ] || fail "second backup into C: $(cat "$TMP/c2")"
[ "$(basename "$(json "$TMP/c2" "j['parent']")")" = "$c1" ] || fail "second backup into C: parent $(json "$TMP/c2" "j['parent']")"
cfull=$(json "$TMP/c1" "j['bytes']")
cinc=$(json "$TMP/c2" "j['bytes']")
log "into C: full $cfull bytes, incremental $cinc"
[ $((cinc * 4)) -lt "$cfull" ] || fail "incremental stream into C ($cinc) not much smaller than the full one ($cfull)"
change "${SEED}96"
img_backup "$TMP/c3" --keep 1
[ "$(json "$TMP/c3" "j['mode']")" = incremental ] || fail "third backup into C: $(cat "$TMP/c3")"
c3=$(basename "$(json "$TMP/c3" "j['snapshot']")")
# (through a file: grep -q stops reading at the first match, and the
# writer's broken pipe would fail json)
json "$TMP/c3" "'\n'.join(j['deleted'])" >"$TMP/c3.deleted"
grep -q "$IMGC:/bk/$c1" "$TMP/c3.deleted" ||
	fail "--keep 1 did not prune C: $(cat "$TMP/c3")"
"$ARBOR" subvolume list --image "$IMGC" / >"$TMP/clist" || fail "subvolume list --image C"
[ "$(grep -c 'home\.' "$TMP/clist")" = 1 ] && grep -q "$c3" "$TMP/clist" ||
	fail "C after --keep 1: $(cat "$TMP/clist")"
[ "$(backups "$MNT/.snapshots")" = "$c3" ] || fail "source after --keep 1: $(backups "$MNT/.snapshots")"
umount_b
IMGB=$IMGC mount_b -o ro
same_tree "$MNT/.snapshots/$c3" "$MNTB/bk/$c3"
umount_b
"$FSCK" -n "$IMGC" || fail "fsck.arborfs -n of the backup image"

fs_umount
check_fsck
"$FSCK" -n "$IMGB" || fail "fsck.arborfs -n of the receiving image"
finish
