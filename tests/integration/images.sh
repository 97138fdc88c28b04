#!/bin/bash
# images.sh - old images keep opening: the format-compatibility corpus.
#
# tests/images/NAME.img.xz are small images made by earlier builds (and
# with each optional feature) by tests/images/make.sh, each with the
# manifest of its tree.  Every one must pass fsck -n with the current code,
# mount, show exactly its manifest (names, types, modes, owners, sizes,
# symlink targets, contents, xattrs and ACLs), take a write, and pass fsck
# again after it.  A change that breaks old images fails here.  An image
# with subvolumes has NAME.subvols too: the id, read-only flag, state,
# source and path of each (`arbor subvolume list --image`) and the default
# subvolume unless it is 5 (get-default), checked as shipped; the first
# writable mount cleans its deleted ones (not a partial receive: it waits
# for its resume).
. "$(dirname "$0")/lib.sh" "$@"

command -v xz >/dev/null || skip "xz missing"
command -v getfattr >/dev/null || skip "getfattr (attr) missing"
ARBOR=$BUILD/cli/arbor
# subvols IMG: what tests/images/make.sh wrote into NAME.subvols
subvols() {
	"$ARBOR" subvolume list --json --image "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["subvolumes"]:
    print(s["id"], "ro" if s["readonly"] else "rw",
          "partial" if s.get("partial_receive") else
          "deleted" if s["deleted"] else "live", s["source_id"], s["path"])
' || return
	local def
	def=$("$ARBOR" subvolume get-default --image "$1" | awk '{ print $2 }') || return
	[ "$def" = 5 ] || echo "default $def"
}
IMAGES=$SRCDIR/tests/images
n=0
for xzimg in "$IMAGES"/*.img.xz; do
	name=$(basename "$xzimg" .img.xz)
	log "$name"
	xz -dc "$xzimg" >"$IMG"
	"$FSCK" -n "$IMG" >"$TMP/fsck.out" 2>&1 ||
		{ cat "$TMP/fsck.out" >&2; fail "$name: fsck -n of the image as shipped"; }
	if [ -e "$IMAGES/$name.subvols" ]; then
		subvols "$IMG" >"$TMP/now.subvols" || fail "$name: subvolume list --image"
		diff -u "$IMAGES/$name.subvols" "$TMP/now.subvols" ||
			fail "$name: the subvolumes differ from $name.subvols"
	fi
	if [ -e "$IMAGES/$name.digest" ]; then
		# digest version 2 is part of the format: computed anew, and
		# as the kept sum gives it (a full send ends with it)
		want=$(cat "$IMAGES/$name.digest")
		got=$("$ARBOR" subvolume digest --image "$IMG" /snap | cut -d' ' -f1) ||
			fail "$name: subvolume digest --image"
		[ "$got" = "$want" ] || fail "$name: digest of /snap is $got, $name.digest says $want"
		"$ARBOR" send --image "$IMG" -f "$TMP/d.stream" /snap || fail "$name: send /snap"
		"$ARBOR" receive --dump -f "$TMP/d.stream" >"$TMP/d.dump" || fail "$name: receive --dump"
		grep -q "digest=$want" "$TMP/d.dump" || fail "$name: the stream of /snap does not end with $want"
	fi
	fs_mount -o ro
	{
		(cd "$MNT" && find . -printf '%p %y %m %U %G %s %l\n' | sort)
		(cd "$MNT" && find . -type f -exec sha256sum {} + | sort -k2)
		(cd "$MNT" && getfattr -R -d -m - --absolute-names . 2>/dev/null | sort) || true
	} >"$TMP/now.manifest"
	diff -u "$IMAGES/$name.manifest" "$TMP/now.manifest" ||
		fail "$name: the tree differs from its manifest"
	fs_umount
	# the current code writes into the old image (at the top level:
	# the default subvolume may be another one)
	top=()
	[ ! -e "$IMAGES/$name.subvols" ] || top=(-o subvolid=5)
	fs_mount "${top[@]}"
	mkdir "$MNT/new"
	head -c 70000 /dev/urandom >"$MNT/new/file"
	cp "$MNT/new/file" "$TMP/copy"
	echo more >>"$MNT/inline" 2>/dev/null || true
	if [ -e "$IMAGES/$name.subvols" ]; then
		# read-only ones refuse a change; the cleaner finishes the
		# deleted ones
		while read -r _ ro state _ path; do
			[ "$ro $state" = "ro live" ] || continue
			touch "$MNT/$path/new" 2>/dev/null &&
				fail "$name: $path is read-only, touch worked"
		done <"$IMAGES/$name.subvols"
		"$ARBOR" subvolume sync "$MNT" || fail "$name: subvolume sync"
	fi
	fs_umount
	check_fsck
	if [ -e "$IMAGES/$name.subvols" ]; then
		# the deleted ones were cleaned; the others are as they were
		subvols "$IMG" >"$TMP/now.subvols" || fail "$name: subvolume list --image"
		{ grep -v ' deleted ' "$IMAGES/$name.subvols" || true; } |
			diff -u - "$TMP/now.subvols" ||
			fail "$name: after a writable mount, the subvolumes differ"
	fi
	fs_mount -o ro "${top[@]}"
	cmp "$TMP/copy" "$MNT/new/file" || fail "$name: written data after a remount"
	fs_umount
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no image in $IMAGES"
log "$n images"
finish
