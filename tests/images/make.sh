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
# xattr) or FEATURE=immutable (chattr +i on a file).
set -euo pipefail
BUILD=$(realpath "$1")
NAME=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
MNT=$TMP/m
mkdir "$MNT"
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; rm -rf "$TMP"' EXIT
export ASAN_OPTIONS=detect_leaks=0:use_sigaltstack=0
"$BUILD/mkfs/mkfs.arborfs" -q -s 32M "$@" "$TMP/i.img"
"$BUILD/fuse/arborfs" "$TMP/i.img" "$MNT"
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
esac
touch -d '2020-01-02 03:04:05.123456789' inline
cd /
sync
fusermount3 -u "$MNT"
sleep 1
"$BUILD/fsck/fsck.arborfs" -n "$TMP/i.img" >/dev/null
# the manifest, taken through a mount of the new image by the same build
"$BUILD/fuse/arborfs" -o ro "$TMP/i.img" "$MNT"
(cd "$MNT" && find . -printf '%p %y %m %U %G %s %l\n' | sort) >"$HERE/$NAME.manifest"
(cd "$MNT" && find . -type f -exec sha256sum {} + | sort -k2) >>"$HERE/$NAME.manifest"
(cd "$MNT" && getfattr -R -d -m - --absolute-names . 2>/dev/null | sort) >>"$HERE/$NAME.manifest" || true
fusermount3 -u "$MNT"
sleep 1
xz -9 -c "$TMP/i.img" >"$HERE/$NAME.img.xz"
echo "$HERE/$NAME.img.xz: $(stat -c %s "$HERE/$NAME.img.xz") bytes"
