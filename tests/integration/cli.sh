#!/bin/bash
# cli.sh - the arbor admin tool.
#  * online, on a mount (arbor filesystem ...): numbers parse, counters rise
#    after writes, sync returns a larger generation after a change, usage
#    adds up, users other than root may read but not sync or reset, a
#    path outside arborfs is refused;
#  * offline, on the unmounted image: usage and dump show what was written
#    through the mount; a mounted image is refused;
#  * usage's logical against stored bytes of file data: equal without
#    compression; with -o compress, less stored than logical, the ratio
#    that of `arbor filesystem du` of the root, unchanged by a reflink
#    (each extent counts once), the same on the unmounted image.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"

# json FILE EXPR: evaluate a Python expression on the JSON object j in FILE
json() {
	python3 -c "import json,sys; j = json.load(open(sys.argv[1])); print($2)" "$1" ||
		fail "bad JSON in $1: $(head -c 300 "$1")"
}
# json_ok FILE EXPR: status 0 when the expression is true
json_ok() {
	python3 -c "import json,sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"
}
# the build's arbor, where nobody can reach it (lib.sh)
ARBOR_NOBODY=$(nobody_exe "$ARBOR")

fs_mkfs -s 128M
fs_mount -o commit=0

log "arbor filesystem generation / sync"
"$ARBOR" filesystem generation --json "$MNT" >"$TMP/gen0" || fail "generation failed"
gen0=$(json "$TMP/gen0" "j['generation']")
[ "$(json "$TMP/gen0" "j['state']")" = rw ] || fail "state: $(cat "$TMP/gen0")"
"$ARBOR" filesystem generation "$MNT" | grep -q "^generation $gen0\$" ||
	fail "human generation output differs from JSON"
mkdir "$MNT/somedir"
echo small >"$MNT/somedir/inline-file"
"$ARBOR" filesystem sync --json "$MNT/somedir/inline-file" >"$TMP/sync1" || fail "sync failed"
gen1=$(json "$TMP/sync1" "j['generation']")
[ "$gen1" -gt "$gen0" ] || fail "sync after a change: generation $gen1, was $gen0"
[ "$(json "$TMP/sync1" "j['committed']")" = True ] || fail "sync did not commit"
"$ARBOR" filesystem sync "$MNT" >"$TMP/sync2" || fail "second sync failed"
grep -q "^generation $gen1 (nothing to commit)" "$TMP/sync2" ||
	fail "sync without a change: $(cat "$TMP/sync2")"

log "arbor filesystem stats: counters rise"
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset failed"
"$ARBOR" filesystem stats --json "$MNT" >"$TMP/st0" || fail "stats failed"
w0=$(json "$TMP/st0" "j['ops'].get('write', {}).get('count', 0)")
[ "$w0" = 0 ] || fail "write count $w0 right after a reset"
head -c 1000000 /dev/urandom >"$MNT/big-file"
cat "$MNT/big-file" >/dev/null
# enough inodes for a tree of two levels, whose leaves go through the
# node cache (the root node is always in memory: it counts no lookup)
mkdir "$MNT/many"
(cd "$MNT/many" && for i in $(seq 300); do echo "$i" >"f$i"; done)
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync failed"
"$ARBOR" filesystem stats --json "$MNT" >"$TMP/st1" || fail "stats failed"
[ "$(json "$TMP/st1" "j['ops']['write']['count']")" -ge 1 ] || fail "no write counted"
[ "$(json "$TMP/st1" "j['user_bytes_written']")" -ge 1000000 ] ||
	fail "user bytes written $(json "$TMP/st1" "j['user_bytes_written']") < 1000000"
[ "$(json "$TMP/st1" "j['image_bytes_written']['data']")" -ge 1000000 ] ||
	fail "image data bytes written < 1000000"
[ "$(json "$TMP/st1" "j['image_bytes_written']['metadata']")" -gt 0 ] || fail "no metadata written"
[ "$(json "$TMP/st1" "j['image_bytes_written']['superblock']")" -gt 0 ] || fail "no superblock written"
[ "$(json "$TMP/st1" "j['commits']['count']")" -ge 1 ] || fail "no commit counted"
json_ok "$TMP/st1" "j['commits']['mean_ms'] > 0" || fail "commit time 0"
json_ok "$TMP/st1" "1.0 <= j['write_amplification'] < 3" ||
	fail "write amplification $(json "$TMP/st1" "j['write_amplification']")"
json_ok "$TMP/st1" "j['ops']['lookup']['mean_us'] > 0" || fail "no lookup time"
json_ok "$TMP/st1" "j['cache']['hits'] + j['cache']['misses'] > 0" ||
	fail "no node cache lookups"
"$ARBOR" filesystem stats "$MNT" >"$TMP/st.txt" || fail "human stats failed"
for w in "^write " "^node cache" "^commits" "^data " "^write amplification"; do
	grep -q "$w" "$TMP/st.txt" || fail "human stats lack '$w'"
done

log "large cold reads go past the host's page cache, and read what was written"
head -c $((8 << 20)) /dev/urandom >"$TMP/seq-src"
cp "$TMP/seq-src" "$MNT/seq-file"
fs_remount -o commit=0
echo 3 >/proc/sys/vm/drop_caches
"$ARBOR" filesystem stats --reset "$MNT" >/dev/null || fail "stats --reset failed"
cmp "$TMP/seq-src" "$MNT/seq-file" || fail "an 8 MiB file read back differs"
"$ARBOR" filesystem stats --json "$MNT" >"$TMP/st2" || fail "stats failed"
direct=$(json "$TMP/st2" "j['image_bytes_read']['direct']")
# hosts whose files take O_DIRECT (tmpfs does not say how, so it reads
# through its cache)
case $(stat -f -c %T "$IMG") in
ext2/ext3 | xfs | btrfs)
	[ "$direct" -ge $((4 << 20)) ] ||
		fail "$direct bytes read past the host's cache, want most of 8 MiB" ;;
*) log "  image on $(stat -f -c %T "$IMG"): $direct bytes read direct" ;;
esac
"$ARBOR" filesystem stats "$MNT" | grep -q "^  past cache " || fail "human stats lack 'past cache'"

log "arbor filesystem usage"
"$ARBOR" filesystem usage --json "$MNT" >"$TMP/usage.json" || fail "usage failed"
[ "$(json "$TMP/usage.json" "j['total']")" = $((128 << 20)) ] || fail "usage total"
[ "$(json "$TMP/usage.json" "j['data']")" -ge 1000000 ] || fail "usage data < 1000000"
[ "$(json "$TMP/usage.json" "j['metadata']")" -gt 0 ] || fail "usage metadata 0"
[ "$(json "$TMP/usage.json" "j['reserve']")" -gt 0 ] || fail "usage reserve 0"
[ "$(json "$TMP/usage.json" "j['generation']")" -gt "$gen1" ] || fail "usage generation"
json_ok "$TMP/usage.json" "j['data'] + j['metadata'] + j['system'] + j['uncommitted'] + j['pinned'] + j['free'] == j['total']" ||
	fail "usage does not add up: $(cat "$TMP/usage.json")"
# without compression, file data is stored as it is
json_ok "$TMP/usage.json" "j['data_logical'] == j['data_stored'] == j['data'] and j['ratio'] == 1 and j['compressed']['extents'] == 0" ||
	fail "usage without compression: logical != stored: $(cat "$TMP/usage.json")"
"$ARBOR" filesystem usage "$MNT" | grep -q "^metadata " || fail "human usage lacks metadata"

log "arbor filesystem: privileges and wrong paths"
as_nobody "$ARBOR_NOBODY" filesystem generation "$MNT" >/dev/null || fail "nobody cannot read the generation"
as_nobody "$ARBOR_NOBODY" filesystem stats "$MNT" >/dev/null || fail "nobody cannot read stats"
as_nobody "$ARBOR_NOBODY" filesystem usage "$MNT" >/dev/null || fail "nobody cannot read usage"
echo change >"$MNT/change"
st=0
as_nobody "$ARBOR_NOBODY" filesystem sync "$MNT" 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "nobody's sync: exit $st, want 1"
grep -q "Operation not permitted" "$TMP/err" || fail "nobody's sync: $(cat "$TMP/err")"
st=0
as_nobody "$ARBOR_NOBODY" filesystem stats --reset "$MNT" >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] || fail "nobody's stats --reset: exit $st, want 1"
# CAP_SYS_ADMIN without uid 0 is enough
as_nobody --inh-caps=+sys_admin --ambient-caps=+sys_admin \
	"$ARBOR_NOBODY" filesystem sync "$MNT" >/dev/null || fail "sync with CAP_SYS_ADMIN refused"
st=0
"$ARBOR" filesystem generation "$TMP" >/dev/null 2>"$TMP/err" || st=$?
[ $st = 1 ] && grep -q "not on a mounted arborfs" "$TMP/err" ||
	fail "a path outside arborfs: exit $st, $(cat "$TMP/err")"
st=0
"$ARBOR" filesystem frobnicate "$MNT" >/dev/null 2>&1 || st=$?
[ $st = 2 ] || fail "unknown filesystem command: exit $st, want 2"

log "arbor filesystem on a read-only mount"
fs_remount -o ro
gen_ro=$("$ARBOR" filesystem generation --json "$MNT" >"$TMP/gen.ro" && json "$TMP/gen.ro" "j['generation']")
[ "$(json "$TMP/gen.ro" "j['state']")" = ro ] || fail "read-only mount state: $(cat "$TMP/gen.ro")"
"$ARBOR" filesystem sync "$MNT" | grep -q "^generation $gen_ro (nothing to commit)" ||
	fail "sync on a read-only mount"
"$ARBOR" filesystem usage "$MNT" >/dev/null || fail "usage on a read-only mount"
fs_remount

log "arbor usage/dump on the unmounted image"
"$ARBOR" usage --image "$IMG" >/dev/null 2>&1 && fail "arbor opened a mounted image"
fs_umount
"$ARBOR" usage --image "$IMG" >"$TMP/usage" || fail "arbor usage failed"
grep -q "^generation" "$TMP/usage" || fail "no generation in: $(cat "$TMP/usage")"
used=$(awk '/^used/ {print $2}' "$TMP/usage")
[ "$used" -ge 1000000 ] || fail "arbor usage: used $used < 1000000 written"
data=$(awk '/^data/ {print $2}' "$TMP/usage")
meta=$(awk '/^metadata/ {print $2}' "$TMP/usage")
[ "$data" -ge 1000000 ] || fail "arbor usage: data $data < 1000000 written"
[ $((data + meta)) = "$used" ] || fail "arbor usage: data $data + metadata $meta != used $used"
"$ARBOR" dump --image "$IMG" 5 >"$TMP/dump" || fail "arbor dump failed"
for name in somedir inline-file big-file; do
	grep -q "'$name'" "$TMP/dump" || fail "dump lacks $name"
done
grep -q "inline 6 bytes" "$TMP/dump" || fail "dump lacks the inline extent"
grep -q " reg disk " "$TMP/dump" || fail "dump lacks the regular extent"
"$ARBOR" dump --image "$IMG" 12345 >/dev/null 2>&1 && fail "dump of a missing tree succeeded"
st=0
"$ARBOR" frobnicate --image "$IMG" >/dev/null 2>&1 || st=$?
[ $st = 2 ] || fail "unknown command: exit $st, want 2"
check_fsck

log "filesystem show and label, on the image and on the mount"
"$ARBOR" filesystem label --image "$IMG" "offline label" || fail "label --image"
[ "$("$ARBOR" filesystem label --image "$IMG")" = "offline label" ] || fail "label --image read back"
"$ARBOR" filesystem show --image "$IMG" >"$TMP/show" || fail "show --image"
for k in label uuid size "node size" metadata generation format features; do
	grep -q "^$k " "$TMP/show" || fail "show lacks $k: $(cat "$TMP/show")"
done
grep -q "^label *offline label$" "$TMP/show" || fail "show: label"
uuid=$(awk '/^uuid/ {print $2}' "$TMP/show")
fs_mount
"$ARBOR" filesystem show --json "$MNT" >"$TMP/show.json" || fail "show --json"
python3 - "$TMP/show.json" "$uuid" <<'EOF' || fail "show --json: $(cat "$TMP/show.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["uuid"] == sys.argv[2], d
assert d["label"] == "offline label", d
assert d["node_size"] in (4096, 16384, 65536) and d["size"] > 0, d
EOF
"$ARBOR" filesystem label "$MNT" 'new "label"' || fail "label on a mount"
[ "$("$ARBOR" filesystem label "$MNT")" = 'new "label"' ] || fail "label on a mount read back"
"$ARBOR" filesystem show --json "$MNT" | python3 -c 'import json,sys; assert json.load(sys.stdin)["label"] == "new \"label\""' ||
	fail "show --json escapes the label"
long=$(head -c 300 /dev/zero | tr '\0' x)
"$ARBOR" filesystem label "$MNT" "$long" 2>/dev/null && fail "a 300-byte label was taken"
fs_umount
[ "$("$ARBOR" filesystem label --image "$IMG")" = 'new "label"' ] || fail "label after unmount"
check_fsck

log "usage: logical against stored file data, with -o compress"
fs_mkfs -s 256M
fs_mount -o compress=zlib
mkdir "$MNT/z"
# 4 MiB of text (compresses), 2 MiB of random bytes (does not)
python3 - "$MNT/z/text" <<'EOF'
import random, sys
r = random.Random(7)
words = [b"arbor", b"extent", b"tree", b"leaf", b"commit", b"node", b"\n"]
out = bytearray()
while len(out) < 4 << 20:
    out += r.choice(words) + b" "
open(sys.argv[1], "wb").write(out[:4 << 20])
EOF
head -c $((2 << 20)) /dev/urandom >"$MNT/z/random"
sync
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync failed"
"$ARBOR" filesystem usage --json "$MNT" >"$TMP/zu.json" || fail "usage failed"
"$ARBOR" filesystem du --json "$MNT" >"$TMP/zdu.json" || fail "du failed"
log "  $(json "$TMP/zu.json" "'logical %d stored %d ratio %.3f, %d compressed extents' % (j['data_logical'], j['data_stored'], j['ratio'], j['compressed']['extents'])")"
json_ok "$TMP/zu.json" "j['compressed']['extents'] > 0 and j['data_stored'] == j['data'] and j['data_stored'] < j['data_logical']" ||
	fail "compressed data: stored not below logical: $(cat "$TMP/zu.json")"
# only the text compresses: the random 2 MiB stays as it is
json_ok "$TMP/zu.json" "j['data_logical'] - j['compressed']['logical'] >= 2 << 20 and j['compressed']['stored'] < j['compressed']['logical'] // 2" ||
	fail "compressed part: $(cat "$TMP/zu.json")"
python3 - "$TMP/zu.json" "$TMP/zdu.json" <<'EOF' || fail "usage and du of the root disagree: $(cat "$TMP/zdu.json")"
import json, sys
u = json.load(open(sys.argv[1]))
d = json.load(open(sys.argv[2]))["paths"][0]
ratio = d["stored"] / d["bytes"]
assert d["bytes"] == u["data_logical"], (d, u)
assert abs(ratio - u["ratio"]) < 1e-3, (ratio, u["ratio"])
EOF
# a clone shares the text's extents: nothing new is stored, nor counted
"$ARBOR" reflink "$MNT/z/text" "$MNT/z/text.clone" || fail "reflink failed"
"$ARBOR" filesystem sync "$MNT" >/dev/null || fail "sync failed"
"$ARBOR" filesystem usage --json "$MNT" >"$TMP/zu2.json" || fail "usage failed"
python3 - "$TMP/zu.json" "$TMP/zu2.json" <<'EOF' || fail "a reflink changed logical or stored bytes"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for k in ("data_logical", "data_stored", "ratio"):
    assert a[k] == b[k], (k, a[k], b[k])
EOF
"$ARBOR" filesystem usage "$MNT" >"$TMP/zu.txt" || fail "human usage failed"
grep -q "^file data .* logical" "$TMP/zu.txt" && grep -q "^ratio " "$TMP/zu.txt" ||
	fail "human usage lacks logical/ratio: $(cat "$TMP/zu.txt")"
fs_umount
"$ARBOR" usage --image "$IMG" >"$TMP/zusage" || fail "arbor usage --image failed"
[ "$(awk '/^logical/ {print $2}' "$TMP/zusage")" = "$(json "$TMP/zu2.json" "j['data_logical']")" ] ||
	fail "usage --image logical differs from the mount's: $(cat "$TMP/zusage")"
[ "$(awk '/^data/ {print $2}' "$TMP/zusage")" = "$(json "$TMP/zu2.json" "j['data']")" ] ||
	fail "usage --image data differs from the mount's"
check_fsck
finish
