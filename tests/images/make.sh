#!/bin/bash
# tests/images/make.sh BUILD_DIR NAME [mkfs options...] - add an image to
# the format-compatibility corpus.
#
# Makes a small image with BUILD_DIR's mkfs.arborfs, mounts it with that
# build's daemon, fills it with one file of every kind this format stores
# (inline and extent data, a sparse file, a hard link, a symlink, device
# nodes, a FIFO, xattrs of several sizes, an ACL, a deep directory),
# unmounts, and stores NAME.img.xz and NAME.manifest (the tree as
# tests/integration/lib.sh's manifest() prints it) here.  Run it with the
# build of the format version being added (an old checkout for an old
# version); tests/integration/images.sh then opens every image with the
# current code.  Extra steps for a feature: FEATURE=xattr-data (a 40 KiB
# xattr), FEATURE=immutable (chattr +i on a file), FEATURE=subvol
# (subvolumes: one with a nested one, a writable and a read-only snapshot,
# one deleted and not yet cleaned; also NAME.subvols, the subvolume list
# and "default ID" when the default is not the top level)
# or FEATURE=subvol-default (the same, then `arbor subvolume set-default`
# of sv: the manifest is what a mount without options shows, sv), or
# FEATURE=compress (mounted with -o compress=zlib: text files of several
# chunks, one partly overwritten, cut and cloned; a chattr +c directory),
# or FEATURE=cleaning (a subvolume of 4,000 files deleted, the daemon
# killed while the cleaner is dropping it one node per batch: the image
# holds a DROP_PROGRESS item; NAME.subvols as for subvol), or
# FEATURE=partial (a read-only snapshot of the tree, its send stream cut
# in half and received into the same image: a partial receive kept for a
# resume, format note 2.8; NAME.subvols as for subvol), or FEATURE=digest
# (a read-only snapshot whose digest is kept, format note 2.9; also
# NAME.digest, `arbor subvolume digest` of it, and NAME.subvols).
set -euo pipefail
BUILD=$(realpath "$1")
NAME=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
MNT=$TMP/m
mkdir "$MNT"
trap 'cd /; fusermount3 -u -z "$MNT" 2>/dev/null || true; rm -rf "$TMP"' EXIT
export ASAN_OPTIONS=detect_leaks=0:use_sigaltstack=0
ARBOR=$BUILD/cli/arbor
# mount (the daemon in the foreground, in the background of this script:
# FEATURE=subvol kills it); DPID its pid
mount_img() {
	"$BUILD/fuse/arborfs" -f "$@" "$TMP/i.img" "$MNT" &
	DPID=$!
	for _ in $(seq 300); do
		mountpoint -q "$MNT" && return
		kill -0 "$DPID" 2>/dev/null || { echo "arborfs exited" >&2; exit 1; }
		sleep 0.1
	done
	echo "not mounted after 30 s" >&2
	exit 1
}
umount_img() {
	fusermount3 -u "$MNT"
	wait "$DPID"
}
"$BUILD/mkfs/mkfs.arborfs" -q -s 32M "$@" "$TMP/i.img"
if [ "${FEATURE:-}" = compress ]; then
	mount_img -o compress=zlib
else
	mount_img
fi
cd "$MNT"
mkdir -p d/e/f/g
echo small >inline
head -c 40000 /dev/urandom >extent
truncate -s 5M sparse
printf 'in the middle' | dd of=sparse bs=1 seek=2000000 conv=notrunc status=none
ln extent d/hardlink
ln -s ../inline d/symlink
mknod d/char c 1 3
mknod d/block b 7 0
mkfifo d/fifo
setfattr -n user.small -v value inline
setfattr -n user.big -v "$(head -c 3000 /dev/zero | tr '\0' x)" extent
setfacl -m u:nobody:r d/e || true
echo deep >d/e/f/g/file
chmod 4755 d/e/f/g/file
case "${FEATURE:-}" in
xattr-data) setfattr -n user.huge -v "$(head -c 40000 /dev/zero | tr '\0' y)" extent ;;
immutable) echo frozen >frozen && chattr +i frozen ;;
cleaning)
	"$ARBOR" subvolume create big >/dev/null
	for d in $(seq 40); do
		mkdir big/d$d
		for f in $(seq 100); do echo "file $d $f" >big/d$d/f$f; done
	done
	"$ARBOR" filesystem sync . >/dev/null
	;;
compress)
	seq 200000 >text                       # 1.3 MB: 10 chunks and a tail
	seq 1000 | dd of=text bs=1 seek=300000 conv=notrunc status=none
	seq 50000 >cut && truncate -s 100000 cut
	cp text clone                          # shares text's extents
	printf 'after the clone' | dd of=clone bs=1 seek=140000 conv=notrunc status=none
	mkdir zdir && chattr +c zdir && seq 30000 >zdir/inherited
	;;
subvol | subvol-default)
	"$ARBOR" subvolume create sv >/dev/null
	mkdir -p sv/dir/sub
	echo in-sv >sv/dir/file
	setfattr -n user.sv -v yes sv/dir/file
	seq 5000 >sv/dir/sub/data # several blocks, small once compressed
	ln -s dir/file sv/link
	# nested: the snapshots below hold a stale copy of its link
	"$ARBOR" subvolume create sv/inner >/dev/null
	echo inner >sv/inner/file
	"$ARBOR" subvolume snapshot sv snap-rw >/dev/null
	echo changed-in-snapshot >snap-rw/dir/file
	echo new >snap-rw/new
	rm snap-rw/link
	echo after-the-snapshot >sv/dir/later
	mkdir snaps
	"$ARBOR" subvolume snapshot -r sv snaps >/dev/null
	echo after-the-ro-snapshot >>sv/dir/sub/data
	# deleted, not yet cleaned: a file of it open pins its tree, and the
	# daemon dies (the deletion is committed when the call returns)
	"$ARBOR" subvolume create doomed >/dev/null
	echo doomed >doomed/file
	"$ARBOR" filesystem sync . >/dev/null
	exec 3<doomed/file
	"$ARBOR" subvolume delete doomed >/dev/null
	;;
esac
touch -d '2020-01-02 03:04:05.123456789' inline
if [ "${FEATURE:-}" = subvol-default ]; then
	"$ARBOR" subvolume set-default sv >/dev/null
fi
case "${FEATURE:-}" in
cleaning)
	cd /
	umount_img
	mount_img -o clean_batch=1
	"$ARBOR" subvolume delete "$MNT/big" >/dev/null
	"$ARBOR" filesystem sync "$MNT" >/dev/null
	kill -9 "$DPID"
	wait "$DPID" || true
	fusermount3 -u -z "$MNT"
	"$ARBOR" subvolume list --image "$TMP/i.img" | grep -q "being cleaned" ||
		{ echo "the cleaning was not caught: $("$ARBOR" subvolume list --image "$TMP/i.img")" >&2; exit 1; }
	;;
partial)
	"$ARBOR" subvolume snapshot -r . snap >/dev/null
	mkdir recv
	cd /
	umount_img
	"$ARBOR" send --image "$TMP/i.img" /snap >"$TMP/s.stream"
	len=$(stat -c %s "$TMP/s.stream")
	head -c $((len / 2)) "$TMP/s.stream" >"$TMP/cut.stream"
	if "$ARBOR" receive --image "$TMP/i.img" -f "$TMP/cut.stream" /recv 2>"$TMP/err"; then
		echo "a cut stream was received whole" >&2
		exit 1
	fi
	grep -q "arbor send --resume" "$TMP/err" ||
		{ echo "no partial receive: $(cat "$TMP/err")" >&2; exit 1; }
	;;
digest)
	"$ARBOR" subvolume snapshot -r . snap >/dev/null
	"$ARBOR" subvolume digest snap | cut -d' ' -f1 >"$TMP/digest"
	cd /
	sync
	umount_img
	cp "$TMP/digest" "$HERE/$NAME.digest"
	;;
subvol | subvol-default)
	"$ARBOR" filesystem sync . >/dev/null
	cd /
	kill -9 "$DPID"
	wait "$DPID" || true
	exec 3<&-
	fusermount3 -u -z "$MNT"
	;;
*)
	cd /
	sync
	umount_img
	;;
esac
"$BUILD/fsck/fsck.arborfs" -n "$TMP/i.img" >/dev/null
case "${FEATURE:-}" in
subvol | subvol-default | cleaning | partial | digest)
	# id, flags, source and path of every subvolume (the deleted one too)
	"$ARBOR" subvolume list --json --image "$TMP/i.img" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["subvolumes"]:
    print(s["id"], "ro" if s["readonly"] else "rw",
          "partial" if s.get("partial_receive") else
          "deleted" if s["deleted"] else "live", s["source_id"], s["path"])
' >"$HERE/$NAME.subvols"
	# and the default subvolume, when it is not the top level (a build
	# without get-default: none)
	def=$("$ARBOR" subvolume get-default --image "$TMP/i.img" 2>/dev/null | awk '{ print $2 }') || true
	if [ -n "$def" ] && [ "$def" != 5 ]; then
		echo "default $def" >>"$HERE/$NAME.subvols"
	fi
	;;
esac
# the manifest, taken through a mount of the new image by the same build
mount_img -o ro
(cd "$MNT" && find . -printf '%p %y %m %U %G %s %l\n' | sort) >"$HERE/$NAME.manifest"
(cd "$MNT" && find . -type f -exec sha256sum {} + | sort -k2) >>"$HERE/$NAME.manifest"
(cd "$MNT" && getfattr -R -d -m - --absolute-names . 2>/dev/null | sort) >>"$HERE/$NAME.manifest" || true
umount_img
xz -9 -c "$TMP/i.img" >"$HERE/$NAME.img.xz"
echo "$HERE/$NAME.img.xz: $(stat -c %s "$HERE/$NAME.img.xz") bytes"
