#!/bin/bash
# images.sh - old images keep opening: the format-compatibility corpus.
#
# tests/images/NAME.img.xz are small images made by earlier builds (and
# with each optional feature) by tests/images/make.sh, each with the
# manifest of its tree.  Every one must pass fsck -n with the current code,
# mount, show exactly its manifest (names, types, modes, owners, sizes,
# symlink targets, contents, xattrs and ACLs), take a write, and pass fsck
# again after it.  A change that breaks old images fails here.
. "$(dirname "$0")/lib.sh" "$@"

command -v xz >/dev/null || skip "xz missing"
command -v getfattr >/dev/null || skip "getfattr (attr) missing"
IMAGES=$SRCDIR/tests/images
n=0
for xzimg in "$IMAGES"/*.img.xz; do
	name=$(basename "$xzimg" .img.xz)
	log "$name"
	xz -dc "$xzimg" >"$IMG"
	"$FSCK" -n "$IMG" >"$TMP/fsck.out" 2>&1 ||
		{ cat "$TMP/fsck.out" >&2; fail "$name: fsck -n of the image as shipped"; }
	fs_mount -o ro
	{
		(cd "$MNT" && find . -printf '%p %y %m %U %G %s %l\n' | sort)
		(cd "$MNT" && find . -type f -exec sha256sum {} + | sort -k2)
		(cd "$MNT" && getfattr -R -d -m - --absolute-names . 2>/dev/null | sort) || true
	} >"$TMP/now.manifest"
	diff -u "$IMAGES/$name.manifest" "$TMP/now.manifest" ||
		fail "$name: the tree differs from its manifest"
	fs_umount
	# the current code writes into the old image
	fs_mount
	mkdir "$MNT/new"
	head -c 70000 /dev/urandom >"$MNT/new/file"
	cp "$MNT/new/file" "$TMP/copy"
	echo more >>"$MNT/inline" 2>/dev/null || true
	fs_umount
	check_fsck
	fs_mount -o ro
	cmp "$TMP/copy" "$MNT/new/file" || fail "$name: written data after a remount"
	fs_umount
	n=$((n + 1))
done
[ $n -gt 0 ] || fail "no image in $IMAGES"
log "$n images"
finish
