#!/bin/bash
# subvol.sh - subvolumes and snapshots as a user drives them: `arbor
# subvolume` and `arbor property` on a real mount, shell tools on the
# trees they make.
#
#  * create; a snapshot of a live tree (data still in the kernel's
#    writeback cache included) has the same contents (manifest, diff -r);
#    writes to a snapshot and to its source are invisible in the other;
#  * a read-only snapshot refuses every change with EROFS, and the test
#    says at which call a write is refused: open(2) (the daemon sees OPEN
#    requests: after a remount of an image with subvolumes) or write(2)
#    (the mount where the first subvolume was made); a refusal only at
#    fsync/close would be data lost and fails;
#  * rename and link across subvolumes: EXDEV, and mv copies;
#  * inode numbers are unique across a source and its snapshots;
#  * a new or deleted subvolume is seen at once by another process (the
#    daemon drops the kernel's cached entries, negative ones too);
#  * delete --wait gives the space back: statfs converges;
#  * misuse: clear messages, exit 1 (failed) or 2 (usage);
#  * permissions as root and as nobody (create where mkdir is allowed,
#    snapshots of one's own subvolumes, delete root-only unless -o
#    user_subvol_rm_allowed);
#  * everything survives unmount, remount and fsck.arborfs -n; the same
#    commands on the unmounted image (--image); -o subvol= and subvolid=
#    mounts, and clear errors for bad ones;
#  * the default subvolume: set-default (root only; PATH or ID PATH) and
#    get-default on a mount and with --image, a mount without options
#    shows it, subvolid=5 the top level, deleting it is refused.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
need_nobody
ARBOR_NOBODY=$(nobody_exe "$ARBOR")
command -v setfattr >/dev/null || install_pkg setfattr attr || true

case $SCALE in
full) NFILES=3000 NSNAP=10 BIGMB=128 ;;
*) NFILES=300 NSNAP=4 BIGMB=48 ;;
esac

# expect_fail STATUS PATTERN CMD...: CMD exits with STATUS and says
# PATTERN (grep -i) on stderr
expect_fail() {
	local want=$1 pat=$2 st=0
	shift 2
	"$@" >"$TMP/out" 2>"$TMP/err" || st=$?
	if [ "$st" != "$want" ]; then
		soft_fail "$*: exit $st, want $want ($(head -c 300 "$TMP/err"))"
		return
	fi
	grep -qi -- "$pat" "$TMP/err" ||
		soft_fail "$*: message '$(head -c 300 "$TMP/err")' lacks '$pat'"
}
# erofs PYTHON-STATEMENT: EROFS as root (in $MNT)
erofs() {
	errno_check EROFS "$1" python3 || soft_fail "expected EROFS from: $1"
}
# json FILE EXPR
json() {
	python3 -c "import json,sys; j = json.load(open(sys.argv[1])); print($2)" "$1" ||
		fail "bad JSON in $1: $(head -c 300 "$1")"
}
# id_of PATH: the subvolume id holding PATH (on the mount)
id_of() {
	"$ARBOR" subvolume show --json "$1" >"$TMP/id.json" || fail "show $1 failed"
	json "$TMP/id.json" "j['id']"
}
used_bytes() {
	python3 -c 'import os,sys; s = os.statvfs(sys.argv[1]); print((s.f_blocks - s.f_bfree) * s.f_frsize)' "$MNT"
}
# where_refused FILE: at which call a write to FILE (in $MNT) fails:
# open, write, fsync, close, none
where_refused() {
	(cd "$MNT" && python3 - "$1" <<'EOF')
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY)
except OSError as e:
    print("open", errno.errorcode[e.errno]); sys.exit()
try:
    os.write(fd, b"changed")
except OSError as e:
    print("write", errno.errorcode[e.errno]); os.close(fd); sys.exit()
try:
    os.fsync(fd)
except OSError as e:
    print("fsync", errno.errorcode[e.errno]); os.close(fd); sys.exit()
try:
    os.close(fd)
except OSError as e:
    print("close", errno.errorcode[e.errno]); sys.exit()
print("none -")
EOF
}
# mmap_refused FILE: where a write through a shared mapping fails
mmap_refused() {
	(cd "$MNT" && python3 - "$1" <<'EOF')
import errno, mmap, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDWR)
except OSError as e:
    print("open", errno.errorcode[e.errno]); sys.exit()
try:
    m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:1] = b"X"
    m.flush()
    m.close()
except OSError as e:
    print("mmap", errno.errorcode[e.errno]); sys.exit()
try:
    os.fsync(fd); os.close(fd)
except OSError as e:
    print("fsync", errno.errorcode[e.errno]); sys.exit()
print("none -")
EOF
}
# check_ro DIR (relative to $MNT): every change inside refused with EROFS
check_ro() {
	local d=$1 w
	erofs "os.open('$d/new', os.O_CREAT | os.O_WRONLY, 0o644)"
	erofs "os.mknod('$d/fifo', 0o644 | 0o010000)"
	erofs "os.mkdir('$d/newdir')"
	erofs "os.symlink('x', '$d/sym')"
	erofs "os.unlink('$d/tree/f1')"
	erofs "os.rmdir('$d/tree/empty')"
	erofs "os.rename('$d/tree/f1', '$d/tree/f1.moved')"
	erofs "os.link('$d/tree/f1', '$d/tree/f1.link')"
	erofs "os.chmod('$d/tree/f1', 0o600)"
	erofs "os.chown('$d/tree/f1', 1, 1)"
	erofs "os.utime('$d/tree/f1', (1, 1))"
	erofs "os.truncate('$d/tree/f1', 0)"
	erofs "os.setxattr('$d/tree/f1', 'user.new', b'v')"
	erofs "os.removexattr('$d/tree/x1', 'user.k')"
	erofs "os.open('$d/tree/f1', os.O_RDONLY | os.O_TRUNC)"
	# the shell's way, as a user would
	touch "$MNT/$d/new" 2>/dev/null && soft_fail "touch created $d/new"
	rm -f "$MNT/$d/tree/f2" 2>/dev/null || true
	[ -e "$MNT/$d/tree/f2" ] || soft_fail "rm removed $d/tree/f2"
	mv "$MNT/$d/tree/f3" "$MNT/$d/tree/f3.mv" 2>/dev/null && soft_fail "mv renamed in $d"
	if command -v setfattr >/dev/null; then
		setfattr -n user.x -v y "$MNT/$d/tree/f1" 2>/dev/null &&
			soft_fail "setfattr changed $d/tree/f1"
	fi
	w=$(where_refused "$d/tree/f4")
	log "write to a file of a read-only snapshot: refused at ${w% *} (${w#* })"
	case $w in
	"open EROFS" | "write EROFS") ;;
	*) soft_fail "write to $d/tree/f4: refused at '$w' (want EROFS at open or write)" ;;
	esac
	echo x 2>/dev/null >"$MNT/$d/tree/f5" && soft_fail "echo > $d/tree/f5 succeeded"
	w=$(mmap_refused "$d/tree/f6")
	log "shared mmap write to a read-only snapshot: refused at ${w% *} (${w#* })"
	case $w in
	"open EROFS" | "mmap EROFS") ;;
	*) soft_fail "mmap write to $d/tree/f6: refused at '$w'" ;;
	esac
	[ "$(cat "$MNT/$d/tree/f4")" = "file 4" ] || soft_fail "$d/tree/f4 changed: $(head -c 50 "$MNT/$d/tree/f4")"
	# Where the shared mapping was written (OPEN requests declined: the
	# write could only fail at writeback), the kernel keeps the page it
	# could not write back: this mount shows it until the page cache
	# drops it, and the first call that asks for the attributes gets
	# the writeback's error (fuse/wberr.c).  The image is unchanged.
	if [ "${w% *}" = mmap ]; then
		cat "$MNT/$d/tree/f6" >/dev/null 2>&1 || true
		echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	fi
	[ "$(cat "$MNT/$d/tree/f6")" = "file 6" ] || soft_fail "$d/tree/f6 changed: $(head -c 50 "$MNT/$d/tree/f6")"
	# atime does not change
	local a1 a2
	a1=$(stat -c %X "$MNT/$d/tree/f7")
	sleep 1.1
	cat "$MNT/$d/tree/f7" >/dev/null
	a2=$(stat -c %X "$MNT/$d/tree/f7")
	[ "$a1" = "$a2" ] || soft_fail "reading $d/tree/f7 changed its atime"
}

fs_mkfs -s 1G
fs_mount

log "create"
"$ARBOR" subvolume create "$MNT/sv" >"$TMP/out" || fail "subvolume create failed"
grep -q "Created subvolume" "$TMP/out" || soft_fail "create says: $(cat "$TMP/out")"
[ -d "$MNT/sv" ] || fail "new subvolume is not a directory"
[ -z "$(ls -A "$MNT/sv")" ] || fail "new subvolume is not empty"
SV_ID=$(id_of "$MNT/sv")
[ "$SV_ID" -ge 256 ] || fail "subvolume id $SV_ID"
SV_INO=$(stat -c %i "$MNT/sv")
[ "$(json "$TMP/id.json" "j['ino']")" = "$SV_INO" ] ||
	fail "show's ino is not the st_ino of its root"
[ "$(id_of "$MNT")" = 5 ] || fail "the mount's root is not subvolume 5"
"$ARBOR" sub show "$MNT/sv" >"$TMP/show.txt" || fail "show failed"
grep -q "Subvolume ID:.*$SV_ID" "$TMP/show.txt" || fail "show: $(cat "$TMP/show.txt")"

log "a live tree in it ($NFILES files)"
T=$MNT/sv/tree
mkdir -p "$T"
for i in $(seq "$NFILES"); do
	d=$T/d$((i % 17))
	[ -d "$d" ] || mkdir "$d"
	echo "file $i" >"$T/f$i" 2>/dev/null || true
	[ $((i % 10)) = 0 ] && head -c $((i * 37)) /dev/urandom >"$d/r$i"
done
for i in 1 2 3 4 5 6 7; do echo "file $i" >"$T/f$i"; done
echo attr >"$T/x1"
setfattr -n user.k -v value "$T/x1" 2>/dev/null || python3 -c "import os; os.setxattr('$T/x1', 'user.k', b'value')"
ln -s f1 "$T/sym"
ln "$T/f1" "$T/hard"
head -c $((3 << 20)) /dev/urandom >"$T/big"
truncate -s 10M "$T/sparse"
echo tail >>"$T/sparse"
mkfifo "$T/fifo"
mkdir "$T/empty"
# still in the kernel's writeback cache when the snapshot is asked for
head -c 200000 /dev/urandom >"$T/unsynced"
cp "$T/unsynced" "$TMP/unsynced"

log "snapshot of the live tree"
manifest "$MNT/sv" >"$TMP/m-src"
"$ARBOR" subvolume snapshot "$MNT/sv" "$MNT/snap1" >"$TMP/out" || fail "snapshot failed"
grep -q "snapshot" "$TMP/out" || soft_fail "snapshot says: $(cat "$TMP/out")"
manifest "$MNT/snap1" >"$TMP/m-snap1"
same_manifest "$TMP/m-src" "$TMP/m-snap1"
# (diff calls two FIFOs different whatever they are)
diff -r -x fifo "$MNT/sv" "$MNT/snap1" >/dev/null 2>&1 || soft_fail "diff -r sv snap1 differs"
cmp "$TMP/unsynced" "$MNT/snap1/tree/unsynced" || soft_fail "unsynced data missing from the snapshot"
SNAP1_ID=$(id_of "$MNT/snap1")
[ "$(json "$TMP/id.json" "j['source_id']")" = "$SV_ID" ] || soft_fail "snap1's source_id is not $SV_ID"
[ "$(json "$TMP/id.json" "j['parent_uuid']")" != None ] || soft_fail "snap1 has no parent UUID"

log "snapshot into an existing directory, read-only"
mkdir "$MNT/snaps"
"$ARBOR" sub snapshot -r "$MNT/sv" "$MNT/snaps" >/dev/null || fail "snapshot -r into a directory failed"
[ -d "$MNT/snaps/sv/tree" ] || fail "snapshot into a directory: no snaps/sv"
[ "$("$ARBOR" property get "$MNT/snaps/sv" ro)" = ro=true ] || fail "snaps/sv is not read-only"
[ "$("$ARBOR" property get "$MNT/snap1")" = ro=false ] || fail "snap1 is read-only"
manifest "$MNT/snaps/sv" >"$TMP/m-ro"
same_manifest "$TMP/m-src" "$TMP/m-ro"

log "snapshots and their source are independent"
echo changed-in-source >"$T/f10"
echo appended >>"$T/big"
truncate -s 100 "$T/r20" 2>/dev/null || truncate -s 100 "$T/d3/r20"
rm "$T/f11"
mv "$T/f12" "$T/f12.renamed"
python3 -c "import os; os.setxattr('$T/x1', 'user.k', b'source')"
echo changed-in-snap >"$MNT/snap1/tree/f13"
dd if=/dev/zero of="$MNT/snap1/tree/big" bs=4096 count=1 seek=10 conv=notrunc 2>/dev/null
mkdir "$MNT/snap1/tree/newdir"
fallocate -p -o 0 -l 1M "$MNT/snap1/tree/big" 2>/dev/null || true
sync
[ "$(cat "$MNT/snap1/tree/f10")" = "file 10" ] || soft_fail "source write seen in snap1"
[ "$(cat "$MNT/snaps/sv/tree/f10")" = "file 10" ] || soft_fail "source write seen in snaps/sv"
[ -e "$MNT/snap1/tree/f11" ] || soft_fail "source unlink seen in snap1"
[ -e "$MNT/snap1/tree/f12" ] || soft_fail "source rename seen in snap1"
[ "$(python3 -c "import os; print(os.getxattr('$MNT/snap1/tree/x1', 'user.k').decode())")" = value ] ||
	soft_fail "source xattr change seen in snap1"
[ "$(cat "$T/f13")" = "file 13" ] || soft_fail "snap1 write seen in source"
[ -e "$T/newdir" ] && soft_fail "snap1 mkdir seen in source"
cmp -s "$MNT/snaps/sv/tree/big" "$MNT/snap1/tree/big" && soft_fail "snap1's write to big not in snap1"
head -c $((3 << 20)) "$T/big" | cmp -s - "$MNT/snaps/sv/tree/big" || soft_fail "source's big changed under its append"
manifest "$MNT/snaps/sv" >"$TMP/m-ro2"
same_manifest "$TMP/m-ro" "$TMP/m-ro2"

log "a read-only snapshot refuses changes (first mount: OPEN requests declined)"
check_ro snaps/sv

log "rename and link across subvolumes: EXDEV; mv copies"
expect_errno EXDEV "os.rename('sv/tree/f14', 'snap1/f14')"
expect_errno EXDEV "os.link('sv/tree/f14', 'snap1/f14')"
expect_errno EXDEV "os.rename('sv/tree/f14', 'f14')"
mv "$T/f15" "$MNT/snap1/f15.moved" || soft_fail "mv across subvolumes failed"
[ -e "$T/f15" ] && soft_fail "mv across subvolumes left the source"
[ "$(cat "$MNT/snap1/f15.moved")" = "file 15" ] || soft_fail "mv across subvolumes: wrong data"

log "unique inode numbers over a source and $NSNAP more snapshots"
for i in $(seq "$NSNAP"); do
	"$ARBOR" sub snapshot "$MNT/sv" "$MNT/snaps/s$i" >/dev/null || fail "snapshot s$i failed"
done
dups=$(find "$MNT" \( -type d -o -links 1 \) -printf '%D %i\n' | sort | uniq -d | head)
[ -z "$dups" ] || soft_fail "inode numbers shared across subvolumes: $dups"
n1=$(find "$MNT/sv" -printf '%i\n' | sort -u | wc -l)
n2=$(find "$MNT/sv" "$MNT/snaps/s1" -printf '%i\n' | sort -u | wc -l)
[ "$n2" = $((2 * n1)) ] || soft_fail "sv and s1 share inode numbers ($n1 in sv, $n2 in both)"
# du counts each inode once: a snapshot must not look like hard links
d1=$(du -s --apparent-size -B1 "$MNT/sv" | cut -f1)
d2=$(du -s --apparent-size -B1 "$MNT/sv" "$MNT/snaps/s1" | awk '{ t += $1 } END { print t }')
[ "$d2" -ge $((2 * d1 - 8192)) ] || soft_fail "du sees sv and s1 as hard links ($d1 and $d2 bytes)"
[ "$(stat -c %d "$MNT/sv")" = "$(stat -c %d "$MNT")" ] || log "note: st_dev differs across subvolumes"

log "a new or deleted subvolume is seen at once by another process"
stat "$MNT/late" >/dev/null 2>&1 && fail "late exists"
# a watcher that has the negative entry cached already
python3 - "$MNT" >"$TMP/watch" 2>&1 <<'EOF' &
import os, sys, time
p = os.path.join(sys.argv[1], "late")
for _ in range(20):
    os.path.exists(p)
t = time.time()
while not os.path.exists(p):
    if time.time() - t > 10:
        print("not seen"); sys.exit(1)
    time.sleep(0.01)
print("seen")
EOF
watch=$!
sleep 0.3
"$ARBOR" sub snapshot "$MNT/sv" "$MNT/late" >/dev/null || fail "snapshot late failed"
[ -d "$MNT/late/tree" ] || soft_fail "new snapshot not seen by the next command"
# readdir is what is tested (grep without -q: no SIGPIPE for ls)
# shellcheck disable=SC2010
ls "$MNT" | grep -x late >/dev/null || soft_fail "new snapshot not listed by ls"
wait "$watch" || soft_fail "another process did not see the new snapshot: $(cat "$TMP/watch")"
"$ARBOR" sub delete "$MNT/late" >/dev/null || fail "delete late failed"
stat "$MNT/late" >/dev/null 2>&1 && soft_fail "deleted subvolume still seen by stat"
# shellcheck disable=SC2010
ls "$MNT" | grep -x late >/dev/null && soft_fail "deleted subvolume still listed by ls"

log "list"
"$ARBOR" sub list "$MNT" >"$TMP/list" || fail "list failed"
for p in sv snap1 snaps/sv snaps/s1; do
	grep -q " $p\$" "$TMP/list" || soft_fail "list lacks $p: $(cat "$TMP/list")"
done
grep -q " late\$" "$TMP/list" && soft_fail "list shows the deleted late by its path"
"$ARBOR" sub list --json "$MNT" >"$TMP/list.json" || fail "list --json failed"
n=$(json "$TMP/list.json" "len([s for s in j['subvolumes'] if not s['deleted']])")
[ "$n" = $((3 + NSNAP)) ] || soft_fail "list --json: $n subvolumes, want $((3 + NSNAP))"
"$ARBOR" sub list -r --json "$MNT" >"$TMP/list-r.json" || fail "list -r failed"
[ "$(json "$TMP/list-r.json" "[s['path'] for s in j['subvolumes']]")" = "['snaps/sv']" ] ||
	soft_fail "list -r: $(cat "$TMP/list-r.json")"
"$ARBOR" sub list -s "$MNT" >"$TMP/list-s" || fail "list -s failed"
grep -q " sv\$" "$TMP/list-s" && soft_fail "list -s shows sv, not a snapshot"

log "delete --wait gives the space back"
"$ARBOR" sub create "$MNT/bigsv" >/dev/null || fail "create bigsv"
head -c $((BIGMB << 20)) /dev/urandom >"$MNT/bigsv/data"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync"
u1=$(used_bytes)
"$ARBOR" sub snapshot "$MNT/bigsv" "$MNT/bigsnap" >/dev/null || fail "snapshot bigsnap"
# the snapshot now holds the only copy of the old data
head -c $((BIGMB << 20)) /dev/urandom >"$MNT/bigsv/data"
"$ARBOR" filesystem sync "$MNT" >/dev/null
u2=$(used_bytes)
[ $((u2 - u1)) -ge $(((BIGMB - 4) << 20)) ] || soft_fail "overwriting the source took $(((u2 - u1) >> 20)) MiB, want about $BIGMB"
"$ARBOR" sub delete --wait "$MNT/bigsnap" >"$TMP/out" || fail "delete --wait failed: $(cat "$TMP/out")"
"$ARBOR" filesystem sync "$MNT" >/dev/null
"$ARBOR" sub sync "$MNT" || soft_fail "subvolume sync failed"
u3=$(used_bytes)
log "used: $((u1 >> 20)) MiB, with the snapshot's own copy $((u2 >> 20)) MiB, after delete --wait $((u3 >> 20)) MiB"
[ $((u3 - u1)) -le $((8 << 20)) ] && [ $((u1 - u3)) -le $((8 << 20)) ] ||
	soft_fail "after delete --wait: $((u3 >> 20)) MiB used, want about $((u1 >> 20))"
"$ARBOR" sub list --json "$MNT" >"$TMP/list2.json"
[ "$(json "$TMP/list2.json" "len([s for s in j['subvolumes'] if s['deleted']])")" = 0 ] ||
	soft_fail "a cleaned subvolume is still listed"

log "misuse: messages and exit codes"
expect_fail 2 "usage\|subvolume" "$ARBOR" subvolume
expect_fail 2 "unknown command" "$ARBOR" subvolume frobnicate
expect_fail 2 "want one PATH" "$ARBOR" sub create
expect_fail 2 "SOURCE and DEST" "$ARBOR" sub snapshot "$MNT/sv"
expect_fail 2 "not an option" "$ARBOR" sub create --wait "$MNT/x"
expect_fail 2 "true or false" "$ARBOR" property set "$MNT/sv" ro maybe
expect_fail 2 "unknown property" "$ARBOR" property get "$MNT/sv" label
expect_fail 1 "destination exists" "$ARBOR" sub create "$MNT/sv"
# DEST a directory: basename(SOURCE) in it, as btrfs (snaps/sv exists)
expect_fail 1 "destination exists" "$ARBOR" sub snapshot "$MNT/sv" "$MNT/snaps"
expect_fail 1 "destination exists" "$ARBOR" sub snapshot "$MNT/sv" "$MNT/snaps/sv/tree/f1"
expect_fail 1 "not a subvolume" "$ARBOR" sub snapshot "$MNT/sv/tree" "$MNT/x"
expect_fail 1 "not a subvolume" "$ARBOR" sub delete "$MNT/sv/tree"
expect_fail 1 "top-level" "$ARBOR" sub delete "$MNT"
expect_fail 1 "not on a mounted arborfs" "$ARBOR" sub create "$TMP/x"
expect_fail 1 "not on a mounted arborfs" "$ARBOR" sub snapshot "$TMP" "$MNT/x"
expect_fail 1 "No such file" "$ARBOR" sub snapshot "$MNT/nonexistent" "$MNT/x"
expect_fail 1 "not a subvolume" "$ARBOR" property get "$MNT/sv/tree"
"$ARBOR" sub create "$MNT/sv/inner" >/dev/null || fail "nested create"
expect_fail 1 "holds another subvolume" "$ARBOR" sub delete "$MNT/sv"
[ -d "$MNT/sv/tree" ] || fail "a refused delete removed sv"
"$ARBOR" sub delete "$MNT/sv/inner" >/dev/null || fail "delete nested"
"$ARBOR" sub --help >/dev/null || fail "sub --help"
"$ARBOR" help subvolume | grep -q snapshot || fail "arbor help subvolume"
"$ARBOR" property --help | grep -q "ro" || fail "property --help"

log "permissions, as nobody"
mkdir "$MNT/pub"
chmod 1777 "$MNT/pub"
# nobody's own files below: the mount is allow_other (root mounted it)
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub create "$MNT/mine"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub create "$MNT/pub/mine" >/dev/null ||
	fail "nobody cannot create a subvolume in a 1777 directory"
[ "$(stat -c %u:%g "$MNT/pub/mine")" = 65534:65534 ] || soft_fail "nobody's subvolume owned by $(stat -c %u:%g "$MNT/pub/mine")"
"${NOBODY[@]}" sh -c "echo mine >'$MNT/pub/mine/f'" || soft_fail "nobody cannot write in its subvolume"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub snapshot -r "$MNT/pub/mine" "$MNT/pub/minesnap" >/dev/null ||
	soft_fail "nobody cannot snapshot its own subvolume"
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub snapshot "$MNT/sv" "$MNT/pub/x"
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub delete "$MNT/pub/minesnap"
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" property set "$MNT/sv" ro true
"${NOBODY[@]}" "$ARBOR_NOBODY" sub list "$MNT" >/dev/null || soft_fail "nobody cannot list"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub show "$MNT/sv" >/dev/null || soft_fail "nobody cannot show"
errno_check EROFS "open('pub/minesnap/f', 'w')" "${NOBODY[@]}" "$PY" ||
	soft_fail "nobody wrote to its read-only snapshot"
"${NOBODY[@]}" "$ARBOR_NOBODY" property set "$MNT/pub/minesnap" ro false ||
	soft_fail "nobody cannot make its snapshot writable"
"${NOBODY[@]}" sh -c "echo w >'$MNT/pub/minesnap/f'" || soft_fail "nobody cannot write to its writable snapshot"
# a group's write permission counts through a supplementary group
mkdir "$MNT/grp" && chgrp 4242 "$MNT/grp" && chmod 770 "$MNT/grp"
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub create "$MNT/grp/g"
setpriv --reuid=65534 --regid=65534 --groups=4242 "$ARBOR_NOBODY" sub create "$MNT/grp/g" >/dev/null ||
	soft_fail "a supplementary group's write permission does not count"

log "rm -r of a subvolume: rmdir takes an empty one, as btrfs since 4.18"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub create "$MNT/pub/gone" >/dev/null || fail "nobody: sub create pub/gone"
"${NOBODY[@]}" sh -c "mkdir -p '$MNT/pub/gone/a/b' && echo x >'$MNT/pub/gone/a/b/f'" ||
	fail "nobody cannot fill its subvolume"
errno_check ENOTEMPTY "os.rmdir('pub/gone')" "${NOBODY[@]}" "$PY" ||
	soft_fail "rmdir of a subvolume with files in it"
"${NOBODY[@]}" rm -r "$MNT/pub/gone" || soft_fail "nobody cannot rm -r its subvolume"
[ -e "$MNT/pub/gone" ] && soft_fail "pub/gone still there after rm -r"
"$ARBOR" sub list "$MNT" | grep -q " pub/gone\$" && soft_fail "list still shows pub/gone"
# someone else's, in a sticky directory: the kernel's rmdir rules
"$ARBOR" sub create "$MNT/pub/roots" >/dev/null || fail "sub create pub/roots"
errno_check EPERM "os.rmdir('pub/roots')" "${NOBODY[@]}" "$PY" ||
	soft_fail "nobody removed root's subvolume in a sticky directory"
rmdir "$MNT/pub/roots" || soft_fail "root cannot rmdir an empty subvolume"
[ -e "$MNT/pub/roots" ] && soft_fail "pub/roots still there after rmdir"

log "remount (OPEN requests kept: write-opens refused at open), fsck"
fs_umount
check_fsck
fs_mount
manifest "$MNT/snaps/sv" >"$TMP/m-ro3"
same_manifest "$TMP/m-ro" "$TMP/m-ro3"
manifest "$MNT/snap1" >"$TMP/m-snap1b"
[ "$(id_of "$MNT/snap1")" = "$SNAP1_ID" ] || fail "snap1's id changed across a remount"
check_ro snaps/sv
w=$(where_refused snaps/sv/tree/f4)
[ "$w" = "open EROFS" ] || soft_fail "after a remount a write-open is refused at '$w', want open"

log "-o user_subvol_rm_allowed"
fs_remount -o user_subvol_rm_allowed
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub delete "$MNT/sv"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub delete "$MNT/pub/minesnap" >/dev/null ||
	soft_fail "the owner cannot delete with user_subvol_rm_allowed"
[ -e "$MNT/pub/minesnap" ] && soft_fail "pub/minesnap still there"

log "--image on the unmounted image"
fs_umount
"$ARBOR" sub list --image "$IMG" >"$TMP/ilist" || fail "list --image failed"
grep -q " snap1\$" "$TMP/ilist" || soft_fail "list --image lacks snap1: $(cat "$TMP/ilist")"
"$ARBOR" sub create --image "$IMG" /imgsub >/dev/null || fail "create --image failed"
"$ARBOR" sub snapshot --image "$IMG" -r /sv /imgsnap >/dev/null || fail "snapshot --image failed"
"$ARBOR" sub show --json --image "$IMG" /imgsnap >"$TMP/ishow" || fail "show --image failed"
[ "$(json "$TMP/ishow" "j['readonly']")" = True ] || soft_fail "imgsnap not read-only"
[ "$("$ARBOR" property get --image "$IMG" /imgsnap ro)" = ro=true ] || soft_fail "property get --image"
"$ARBOR" property set --image "$IMG" /imgsnap ro false || soft_fail "property set --image"
[ "$("$ARBOR" property get --image "$IMG" /imgsnap ro)" = ro=false ] || soft_fail "property set --image did not stick"
"$ARBOR" sub snapshot --image "$IMG" /sv /imgsnap2 >/dev/null || fail "second snapshot --image"
"$ARBOR" sub delete --wait --image "$IMG" /imgsnap2 >/dev/null || soft_fail "delete --image --wait failed"
expect_fail 1 "not a subvolume" "$ARBOR" sub delete --image "$IMG" /sv/tree
expect_fail 1 "destination exists" "$ARBOR" sub create --image "$IMG" /sv
expect_fail 1 "cannot open" "$ARBOR" sub list --image "$TMP/nonexistent.img"
check_fsck
fs_mount
[ -d "$MNT/imgsub" ] || soft_fail "imgsub not on the mount"
manifest "$MNT/imgsnap" >"$TMP/m-img"
manifest "$MNT/sv" >"$TMP/m-sv-now"
same_manifest_soft "$TMP/m-sv-now" "$TMP/m-img"
[ -e "$MNT/imgsnap2" ] && soft_fail "imgsnap2 deleted offline is on the mount"
"$ARBOR" sub list --image "$IMG" >/dev/null 2>"$TMP/err" && soft_fail "list --image of a mounted image worked"

log "-o subvol= and subvolid= mounts"
echo root-of-sv >"$MNT/sv/marker"
fs_umount
fs_mount -o subvol=sv
[ "$(cat "$MNT/marker")" = root-of-sv ] || fail "subvol=sv: wrong root"
[ -d "$MNT/tree" ] || fail "subvol=sv: no tree"
[ "$(stat -c %i "$MNT")" = "$SV_INO" ] || soft_fail "subvol=sv: the root's st_ino is $(stat -c %i "$MNT"), want $SV_INO"
[ "$(id_of "$MNT")" = "$SV_ID" ] || soft_fail "subvol=sv: the root is subvolume $(id_of "$MNT")"
grep -q "Mounted as the root" < <("$ARBOR" sub show "$MNT") || soft_fail "show does not say the root is mounted"
expect_fail 1 "mounted root\|mount point" "$ARBOR" sub delete "$MNT"
echo via-subvol-mount >"$MNT/written"
"$ARBOR" sub snapshot "$MNT" "$MNT/tree/inner-snap" >/dev/null || soft_fail "snapshot of the mounted root failed"
ls -la "$MNT" >/dev/null || soft_fail "ls of a subvol= mount"
fs_umount
fs_mount -o "subvolid=$SNAP1_ID"
[ "$(cat "$MNT/tree/f13")" = changed-in-snap ] || fail "subvolid=$SNAP1_ID: wrong root"
[ -e "$MNT/written" ] && soft_fail "subvolid=$SNAP1_ID shows sv's file"
fs_umount
fs_mount -o subvolid=5
[ "$(cat "$MNT/sv/written")" = via-subvol-mount ] || soft_fail "a write through subvol=sv is not in sv"
[ -d "$MNT/sv/tree/inner-snap/tree" ] || soft_fail "snapshot made through subvol=sv missing"
fs_umount
# bad ones: a clear error, nothing mounted
for bad in "subvol=nonexistent:No such file" "subvol=sv/tree:not a subvolume" \
	"subvolid=999999:no such subvolume" "subvolid=abc:bad subvolid" \
	"subvol=../x:not allowed" "subvol=sv,subvolid=$SNAP1_ID:not subvolid"; do
	opt=${bad%%:*}
	want=${bad#*:}
	st=0
	timeout 60 "$DAEMON" -f -o "$opt" "$IMG" "$MNT" >"$TMP/out" 2>&1 || st=$?
	mountpoint -q "$MNT" && { force_unmount "$MNT"; fail "-o $opt mounted"; }
	[ $st != 0 ] || soft_fail "-o $opt: exit 0"
	grep -qi -- "$want" "$TMP/out" || soft_fail "-o $opt: message '$(head -c 300 "$TMP/out")' lacks '$want'"
done
check_fsck

log "the default subvolume: set-default, get-default, a mount without options"
fs_mount
[ "$("$ARBOR" sub get-default "$MNT")" = "ID 5 (FS_TREE)" ] ||
	soft_fail "get-default of a new default: $("$ARBOR" sub get-default "$MNT" 2>&1)"
expect_fail 1 "permission denied" "${NOBODY[@]}" "$ARBOR_NOBODY" sub set-default "$MNT/sv"
expect_fail 2 "want PATH" "$ARBOR" sub set-default
expect_fail 2 "want PATH" "$ARBOR" sub set-default 1 2 3
expect_fail 2 "bad subvolume id" "$ARBOR" sub set-default abc "$MNT"
expect_fail 1 "no such subvolume" "$ARBOR" sub set-default 999999 "$MNT"
expect_fail 2 "not an option" "$ARBOR" sub get-default --wait "$MNT"
# the subvolume holding PATH (a directory inside it)
"$ARBOR" sub set-default "$MNT/sv/tree" >"$TMP/out" || fail "set-default sv/tree failed"
grep -q "ID $SV_ID (sv)" "$TMP/out" || soft_fail "set-default says: $(cat "$TMP/out")"
"${NOBODY[@]}" "$ARBOR_NOBODY" sub get-default "$MNT" >"$TMP/out" || soft_fail "nobody cannot get-default"
grep -qx "ID $SV_ID gen [0-9]* top level 5 path sv" "$TMP/out" || soft_fail "get-default: $(cat "$TMP/out")"
expect_fail 1 "default subvolume" "$ARBOR" sub delete "$MNT/sv"
[ -d "$MNT/sv/tree" ] || fail "a refused delete of the default removed it"
fs_umount
fs_mount
[ "$(cat "$MNT/marker" 2>&1)" = root-of-sv ] || fail "a mount without options does not show the default sv"
[ "$(id_of "$MNT")" = "$SV_ID" ] || soft_fail "the default mount's root is subvolume $(id_of "$MNT")"
grep -q "Mounted as the root" < <("$ARBOR" sub show "$MNT") || soft_fail "show: the default is not the mounted root"
grep -qx "ID $SV_ID gen [0-9]* top level 5 path sv" < <("$ARBOR" sub get-default "$MNT/tree") ||
	soft_fail "get-default on the default's mount"
fs_umount
fs_mount -o subvolid=5
for d in sv/tree snap1/tree; do
	[ -d "$MNT/$d" ] || fail "subvolid=5 does not show the top level ($d)"
done
[ "$(id_of "$MNT")" = 5 ] || soft_fail "subvolid=5: the root is subvolume $(id_of "$MNT")"
# ID PATH, as btrfs
"$ARBOR" sub set-default "$SNAP1_ID" "$MNT" >/dev/null || fail "set-default $SNAP1_ID failed"
grep -qx "ID $SNAP1_ID gen [0-9]* top level 5 path snap1" < <("$ARBOR" sub get-default "$MNT") ||
	soft_fail "get-default after set-default $SNAP1_ID: $("$ARBOR" sub get-default "$MNT" 2>&1)"
expect_fail 1 "default subvolume" "$ARBOR" sub delete "$MNT/snap1"
[ -d "$MNT/snap1/tree" ] || fail "a refused delete of the default removed it"
fs_umount
fs_mount
[ "$(cat "$MNT/tree/f13")" = changed-in-snap ] || fail "a mount without options does not show the default snap1"
fs_umount
fs_mount -o subvolid=5
# 0 is the top level, as btrfs
"$ARBOR" sub set-default 0 "$MNT" >/dev/null || fail "set-default 0 failed"
[ "$("$ARBOR" sub get-default "$MNT")" = "ID 5 (FS_TREE)" ] || soft_fail "set-default 0 did not make 5 the default"
fs_umount
fs_mount
[ -d "$MNT/sv/tree" ] || fail "the top level is not mounted after set-default 0"
fs_umount

log "the default subvolume with --image"
[ "$("$ARBOR" sub get-default --image "$IMG")" = "ID 5 (FS_TREE)" ] || soft_fail "get-default --image"
"$ARBOR" sub set-default --image "$IMG" /snap1 >"$TMP/out" || fail "set-default --image /snap1 failed"
grep -q "ID $SNAP1_ID (snap1)" "$TMP/out" || soft_fail "set-default --image says: $(cat "$TMP/out")"
grep -qx "ID $SNAP1_ID gen [0-9]* top level 5 path snap1" < <("$ARBOR" sub get-default --image "$IMG" /) ||
	soft_fail "get-default --image after set-default"
# the library's refusal (no check of the command's own before it)
expect_fail 1 "default subvolume cannot be deleted" "$ARBOR" sub delete --image "$IMG" /snap1
expect_fail 1 "no such subvolume" "$ARBOR" sub set-default --image "$IMG" 999999 /
"$ARBOR" sub set-default --image "$IMG" "$SV_ID" / >/dev/null || fail "set-default --image $SV_ID failed"
check_fsck
fs_mount
[ "$(cat "$MNT/marker")" = root-of-sv ] || fail "set-default --image: the mount does not show sv"
fs_umount
"$ARBOR" sub set-default --image "$IMG" 5 / >/dev/null || fail "set-default --image 5 failed"
fs_mount
[ -d "$MNT/sv/tree" ] || fail "set-default --image 5: the top level is not mounted"

log "exclusive and shared bytes (show), exact"
"$ARBOR" sub create "$MNT/u" >/dev/null || fail "create u"
head -c 1048576 /dev/urandom >"$MNT/u/one"
sync -f "$MNT"
"$ARBOR" sub show --json "$MNT/u" >"$TMP/u.json" || fail "show u"
[ "$(json "$TMP/u.json" 'j["exclusive"], j["shared"]')" = "1048576 0" ] ||
	fail "u alone: $(cat "$TMP/u.json")"
"$ARBOR" sub snapshot -r "$MNT/u" "$MNT/u-snap" >/dev/null || fail "snapshot u"
"$ARBOR" sub show --json "$MNT/u" >"$TMP/u.json" || fail "show u"
"$ARBOR" sub show --json "$MNT/u-snap" >"$TMP/us.json" || fail "show u-snap"
[ "$(json "$TMP/u.json" 'j["exclusive"], j["shared"]')" = "0 1048576" ] ||
	fail "u after a snapshot: $(cat "$TMP/u.json")"
[ "$(json "$TMP/us.json" 'j["exclusive"], j["shared"]')" = "0 1048576" ] ||
	fail "u-snap: $(cat "$TMP/us.json")"
head -c 65536 /dev/urandom >"$MNT/u/two"
sync -f "$MNT"
"$ARBOR" sub show "$MNT/u" >"$TMP/u.txt" || fail "show u"
grep -q "Exclusive data:.*65536 bytes" "$TMP/u.txt" || fail "u's new file: $(cat "$TMP/u.txt")"
"$ARBOR" sub delete "$MNT/u" >/dev/null && "$ARBOR" sub sync "$MNT" >/dev/null || fail "delete u"
"$ARBOR" sub show --json "$MNT/u-snap" >"$TMP/us.json" || fail "show u-snap"
[ "$(json "$TMP/us.json" 'j["exclusive"], j["shared"]')" = "1048576 0" ] ||
	fail "u-snap alone: $(cat "$TMP/us.json")"
fs_umount
"$ARBOR" sub show --json --image "$IMG" /u-snap >"$TMP/us.json" || fail "show --image"
[ "$(json "$TMP/us.json" 'j["exclusive"]')" = 1048576 ] || fail "show --image: $(cat "$TMP/us.json")"
check_fsck
finish
