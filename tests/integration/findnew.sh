#!/bin/bash
# findnew.sh - `arbor subvolume find-new` and `arbor subvolume diff` as a
# user drives them, on a real mount and on the unmounted image:
#
#  * a subvolume is filled with shell tools, committed, snapshotted
#    read-only (A), and its generation taken (`arbor filesystem
#    generation`); then every kind of change: data written into a file,
#    a truncate, chmod, setfattr, mv of a file and of a directory, a hard
#    link, rm, rmdir, mkdir with new files (enough of them, with long
#    names, that the answer takes several ioctl pages);
#  * find-new (text and --json, validated with python3 -m json.tool)
#    names exactly the changed inodes, with all their paths, NEW for the
#    new ones and the written range; its marker round-trips (nothing
#    changed since: nothing reported);
#  * diff of A and a second read-only snapshot B names exactly what was
#    created, deleted, renamed (old -> new) and modified;
#  * the same answers with --image on the unmounted image, and after a
#    remount; fsck.arborfs -n clean;
#  * misuse: usage errors exit 2, a path off arborfs and a caller without
#    privilege exit 1 with a clear message.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
command -v setfattr >/dev/null || install_pkg setfattr attr ||
	skip "setfattr missing"
need_nobody
ARBOR_NOBODY=$(nobody_exe "$ARBOR")

case $SCALE in
full) NFILES=3000 NNEW=600 ;;
*) NFILES=300 NNEW=150 ;;
esac

# expect_fail STATUS PATTERN CMD...
expect_fail() {
	local want=$1 pat=$2 st=0
	shift 2
	"$@" >"$TMP/out" 2>"$TMP/err" || st=$?
	[ "$st" = "$want" ] ||
		fail "$*: exit $st, want $want ($(head -c 300 "$TMP/err"))"
	grep -qi -- "$pat" "$TMP/err" ||
		fail "$*: message '$(head -c 300 "$TMP/err")' lacks '$pat'"
}

fs_mkfs -s 1G
fs_mount

log "fill a subvolume"
"$ARBOR" subvolume create "$MNT/src" >/dev/null
S=$MNT/src
mkdir -p "$S/d1" "$S/d2" "$S/d3/sub" "$S/empty"
for i in $(seq 1 "$NFILES"); do
	echo "file $i" >"$S/d1/f$i"
done
dd if=/dev/urandom of="$S/d1/f1" bs=4096 count=8 status=none
echo inner >"$S/d3/sub/inner"
"$ARBOR" subvolume snapshot -r "$S" "$MNT/A" >/dev/null
"$ARBOR" filesystem sync "$MNT" >/dev/null
GEN=$("$ARBOR" filesystem generation --json "$MNT" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["generation"])')
log "generation $GEN"

log "changes"
dd if=/dev/urandom of="$S/d1/f1" bs=4096 count=1 seek=2 conv=notrunc \
	status=none
truncate -s 100 "$S/d1/f2"
chmod 600 "$S/d1/f3"
setfattr -n user.k -v v "$S/d1/f4"
mv "$S/d1/f5" "$S/d2/f5b"
ln "$S/d1/f6" "$S/d2/f6link"
rm "$S/d1/f7"
rmdir "$S/empty"
mv "$S/d3/sub" "$S/d2/sub2"
mkdir "$S/newdir"
LONG=$(printf 'n%.0s' $(seq 1 200))
for i in $(seq 1 "$NNEW"); do
	echo "$i" >"$S/newdir/$LONG$i"
done

# the expected answer of find-new: path -> flags that must be there
cat >"$TMP/expect.py" <<EOF
import json, sys
NNEW, LONG = $NNEW, "$LONG"
want = {
    "d1/f1": {"data"}, "d1/f2": set(), "d1/f3": set(), "d1/f4": {"xattr"},
    "d2/f5b": set(), "d1/f6": set(), "d1": set(), "d2": set(),
    "d3": set(), ".": set(), "newdir": {"new"}, "d2/sub2": set(),
}
for i in range(1, NNEW + 1):
    want["newdir/%s%d" % (LONG, i)] = {"new", "data"}
EOF

check_find_new() { # JSON-FILE
	python3 - "$1" <<'EOF' || fail "find-new: wrong answer (above)"
import json, sys
exec(open(sys.argv[1].rsplit("/", 1)[0] + "/expect.py").read())
d = json.load(open(sys.argv[1]))
got = {}
for c in d["changes"]:
    got[c["paths"][0]] = c
    if "meta" not in c["flags"]:
        sys.exit("no meta: %s" % c)
bad = set(got) ^ set(want)
if bad:
    sys.exit("find-new: differs in %s" % sorted(bad)[:10])
for p, fl in want.items():
    if not fl <= set(got[p]["flags"]):
        sys.exit("%s: flags %s, want %s" % (p, got[p]["flags"], fl))
if sorted(got["d1/f6"]["paths"]) != ["d1/f6", "d2/f6link"]:
    sys.exit("f6 paths %s" % got["d1/f6"]["paths"])
if not any(r[0] <= 8192 and r[0] + r[1] >= 12288
           for r in got["d1/f1"]["ranges"]):
    sys.exit("f1 ranges %s" % got["d1/f1"]["ranges"])
if got["d1/f2"]["size"] != 100:
    sys.exit("f2 size %s" % got["d1/f2"]["size"])
print("find-new: %d inodes as expected, generation %d, %d nodes read" %
      (len(got), d["generation"], d["nodes_read"]))
EOF
}

log "find-new on the mount"
"$ARBOR" subvolume find-new --json "$S" "$GEN" >"$TMP/fn.json"
python3 -m json.tool "$TMP/fn.json" >/dev/null || fail "find-new --json: not JSON"
check_find_new "$TMP/fn.json"
MARK=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$TMP/fn.json")
[ "$MARK" -gt "$GEN" ] || fail "marker $MARK not above $GEN"
"$ARBOR" subvolume find-new "$S" "$GEN" >"$TMP/fn.txt"
grep -q "^inode [0-9]* .*new.* newdir$" "$TMP/fn.txt" || fail "text: newdir missing"
grep -q "^	link d2/f6link$" "$TMP/fn.txt" || fail "text: f6link missing"
grep -q "^	data " "$TMP/fn.txt" || fail "text: no data range"
tail -n 1 "$TMP/fn.txt" | grep -q "^transid marker was $MARK$" ||
	fail "text: last line $(tail -n 1 "$TMP/fn.txt")"
[ "$(grep -c '^inode ' "$TMP/fn.txt")" = $((12 + NNEW)) ] ||
	fail "text: $(grep -c '^inode ' "$TMP/fn.txt") inodes"
log "the marker round-trips"
"$ARBOR" subvolume find-new "$S" "$MARK" >"$TMP/fn2.txt"
[ "$(cat "$TMP/fn2.txt")" = "transid marker was $MARK" ] ||
	fail "find-new from the marker: $(head -c 300 "$TMP/fn2.txt")"
# also "arbor find-new", as btrfs's spelling
"$ARBOR" find-new "$S" "$MARK" >/dev/null || fail "arbor find-new"

log "diff of two read-only snapshots"
"$ARBOR" subvolume snapshot -r "$S" "$MNT/B" >/dev/null
"$ARBOR" subvolume diff "$MNT/A" "$MNT/B" >"$TMP/diff.txt"
cat >"$TMP/diffwant.txt" <<EOF
created  newdir
deleted  d1/f7
deleted  empty
renamed  d1/f5 -> d2/f5b
renamed  d1/f6 -> d1/f6, d2/f6link
renamed  d3/sub -> d2/sub2
modified .
modified d1
modified d1/f1
modified d1/f2
modified d1/f3
modified d1/f4
modified d2
modified d3
EOF
# one line per inode: kind and paths (what changed in parentheses aside)
sed -e 's/ (.*)$//' -e 's/  */ /' "$TMP/diff.txt" | grep -v "^created newdir/" |
	sort >"$TMP/diffgot.txt"
sed 's/  */ /' "$TMP/diffwant.txt" | sort | diff - "$TMP/diffgot.txt" ||
	fail "diff: not the expected answer"
[ "$(grep -c '^created  newdir/' "$TMP/diff.txt")" = "$NNEW" ] ||
	fail "diff: $(grep -c '^created  newdir/' "$TMP/diff.txt") new files"
grep -q "^modified d1/f1 (.*data" "$TMP/diff.txt" || fail "diff: f1 not data"
grep -q "^modified d1/f4 (.*xattr" "$TMP/diff.txt" || fail "diff: f4 not xattr"
grep -q "^modified d1/f2 (.*size" "$TMP/diff.txt" || fail "diff: f2 not size"
"$ARBOR" subvolume diff --json "$MNT/A" "$MNT/B" >"$TMP/diff.json"
python3 -m json.tool "$TMP/diff.json" >/dev/null || fail "diff --json: not JSON"
python3 - "$TMP/diff.json" <<'EOF' || fail "diff --json: wrong"
import json, sys
d = json.load(open(sys.argv[1]))
k = {}
for c in d["changes"]:
    k.setdefault(c["kind"], []).append(c)
r = [c for c in k["renamed"] if c["paths"] == ["d2/sub2"]]
if not r or r[0]["old_paths"] != ["d3/sub"]:
    sys.exit("renamed sub: %s" % k["renamed"])
if sorted(c["paths"][0] for c in k["deleted"]) != ["d1/f7", "empty"]:
    sys.exit("deleted: %s" % k["deleted"])
EOF
"$ARBOR" subvolume diff "$MNT/A" "$MNT/A" >"$TMP/same.txt"
[ ! -s "$TMP/same.txt" ] || fail "diff of A with itself: $(head -c 200 "$TMP/same.txt")"

log "misuse"
expect_fail 2 "want PATH and GEN" "$ARBOR" subvolume find-new "$S"
expect_fail 2 "not a generation" "$ARBOR" subvolume find-new "$S" 12x
expect_fail 2 "not a generation" "$ARBOR" subvolume find-new "$S" -- -1
expect_fail 2 "want SNAP_A and SNAP_B" "$ARBOR" subvolume diff "$MNT/A"
expect_fail 1 "not" "$ARBOR" subvolume find-new /tmp 1
expect_fail 1 "not on a mounted arborfs" "$ARBOR" subvolume diff "$MNT/A" /tmp
expect_fail 1 "permission denied" as_nobody "$ARBOR_NOBODY" subvolume find-new "$S" "$GEN"
"$ARBOR" subvolume find-new --help | grep -q "find-new" || fail "--help"

log "remount"
fs_remount
"$ARBOR" subvolume find-new --json "$S" "$GEN" >"$TMP/fn3.json"
check_find_new "$TMP/fn3.json"
"$ARBOR" subvolume diff "$MNT/A" "$MNT/B" >"$TMP/diff2.txt"
cmp "$TMP/diff.txt" "$TMP/diff2.txt" || fail "diff after a remount differs"
fs_umount

log "--image on the unmounted image"
"$ARBOR" subvolume find-new --json --image "$IMG" src "$GEN" >"$TMP/fn4.json"
check_find_new "$TMP/fn4.json"
"$ARBOR" subvolume diff --image "$IMG" A B >"$TMP/diff3.txt"
cmp "$TMP/diff.txt" "$TMP/diff3.txt" || fail "diff --image differs"
expect_fail 1 "No such file" "$ARBOR" subvolume find-new --image "$IMG" nosuch 1
check_fsck
finish
