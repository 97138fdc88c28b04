#!/usr/bin/env bash
# quickstart.sh - from a fresh Debian 12 checkout to a mounted arborfs.
#
#   scripts/quickstart.sh      from any directory; safe to run again
#
# 1. installs the missing build packages (as root; otherwise prints the
#    `sudo apt-get install ...` line and exits 1)
# 2. configures build/ (meson, -Dtests=disabled) and builds the four
#    tools only (ninja TARGETS: no tests, no benchmarks)
# 3. creates a sparse image with mkfs.arborfs, unless the image exists
#    already (an existing image is never reformatted)
# 4. mounts it with the FUSE daemon build/fuse/arborfs, when it is built;
#    without a daemon it shows what the image holds
#
# Environment (relative paths are taken from the directory you run it in):
#   ARBOR_IMAGE   image file      (default: <repo>/arborfs.img)
#   ARBOR_MNT     mount point     (default: <repo>/mnt)
#   ARBOR_SIZE    size of a new image, as mkfs.arborfs -s takes it: bytes
#                 with an optional K, M, G or T suffix (default 1G)
#   ARBOR_SKIP_DEPS=1  do not check/install packages
set -euo pipefail

ORIG_PWD=$PWD
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/lib-deps.sh
. scripts/lib-deps.sh

# absolute, with . and .. folded (lexically: no stat of a hung mount)
abspath() {
	(cd "$ORIG_PWD" && realpath -ms -- "$1")
}

BUILD=build
MKFS=$BUILD/mkfs/mkfs.arborfs
DAEMON=$BUILD/fuse/arborfs
FSCK=$BUILD/fsck/fsck.arborfs
ARBOR=$BUILD/cli/arbor
IMAGE=$(abspath "${ARBOR_IMAGE:-$ROOT/arborfs.img}")
MNT=$(abspath "${ARBOR_MNT:-$ROOT/mnt}")
SIZE=${ARBOR_SIZE:-1G}

say() {
	printf '==> %s\n' "$*"
}

die() {
	printf 'quickstart: %s\n' "$*" >&2
	exit 1
}

# Print "FSTYPE SOURCE" of the mount on $1 and return 0, or return 1 when
# nothing is mounted there.  Reads /proc/self/mountinfo instead of
# stat()ing the path, so a mount whose daemon died (ENOTCONN) is seen too.
mount_info() {
	local parent dir
	parent=$(cd "$(dirname "$1")" 2>/dev/null && pwd -P) || return 1
	dir=${parent%/}/$(basename "$1")
	awk -v want="$dir" '
		function unescape(s) {
			gsub(/\\040/, " ", s); gsub(/\\011/, "\t", s)
			gsub(/\\012/, "\n", s); gsub(/\\134/, "\\", s)
			return s
		}
		{
			# fields after the " - " separator: fstype, source, options
			for (i = 7; i <= NF && $i != "-"; i++) ;
			if (unescape($5) == want) {
				found = $(i + 1) " " unescape($(i + 2))
			}
		}
		END { if (found == "") exit 1; print found }
	' /proc/self/mountinfo
}

usage_mounted() {
	cat <<EOF

arborfs is mounted on $MNT (image $IMAGE).
  use it:      echo hello > "$MNT/hello"; ls -la "$MNT"; df -h "$MNT"
  unmount:     fusermount3 -u "$MNT"
  mount again: $ROOT/$DAEMON "$IMAGE" "$MNT"   (or rerun this script)
EOF
	if [[ -x $FSCK ]]; then
		echo "  check it:    $ROOT/$FSCK -n \"$IMAGE\"   (once unmounted)"
	fi
	if [[ -x $ARBOR ]]; then
		echo "  admin tool:  $ROOT/$ARBOR  (e.g. $ROOT/$ARBOR filesystem usage \"$MNT\";"
		echo "               --help; not installed: sudo meson install -C $ROOT/$BUILD)"
	fi
	# FUSE over io_uring: faster metadata work, if the kernel has it
	# (README, "FUSE over io_uring"); a kernel setting, so only a hint
	if [[ $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null) == N ]]; then
		echo "  faster:      this kernel can serve FUSE over io_uring but has it off;"
		echo "               echo 1 > /sys/module/fuse/parameters/enable_uring, then"
		echo "               mount again (README, \"FUSE over io_uring\")"
	fi
}

# What the superblock slots of the image say (format.h: slots at 64 KiB and
# 128 KiB; magic at +32, generation +64, total bytes +80, nodesize +96,
# label +144).  Checksums are not verified here: fsck.arborfs does that.
show_super() {
	local slot off magic gen total nodesize label valid=0
	for slot in 0 1; do
		off=$(((slot + 1) * 65536))
		magic=$(dd if="$IMAGE" bs=1 skip=$((off + 32)) count=8 \
			status=none | tr -cd '[:print:]')
		if [[ $magic != 'ARBORFS!' ]]; then
			# mkfs leaves its temporary magic in the slot that
			# its single commit did not write
			echo "  slot $slot: no committed superblock" \
				"yet${magic:+ (magic \"$magic\")}"
			continue
		fi
		valid=$((valid + 1))
		gen=$(od -An -v -t u8 --endian=little -j $((off + 64)) -N 8 \
			"$IMAGE" | tr -d ' ')
		total=$(od -An -v -t u8 --endian=little -j $((off + 80)) -N 8 \
			"$IMAGE" | tr -d ' ')
		nodesize=$(od -An -v -t u4 --endian=little -j $((off + 96)) \
			-N 4 "$IMAGE" | tr -d ' ')
		label=$(dd if="$IMAGE" bs=1 skip=$((off + 144)) count=256 \
			status=none | tr -cd '[:print:]')
		echo "  slot $slot: generation $gen, $total bytes," \
			"nodesize $nodesize${label:+, label \"$label\"}"
	done
	if ((valid == 0)); then
		echo "  no slot holds a finished arborfs superblock"
	fi
}

# ---- 1. packages ------------------------------------------------------------
say "checking packages"
arb_ensure_deps || exit 1

# ---- 2. configure and build -------------------------------------------------
if [[ -f $BUILD/meson-private/coredata.dat ]]; then
	say "reconfiguring $BUILD"
	meson setup --reconfigure -Dtests=disabled "$BUILD" || die "meson setup failed"
else
	say "configuring $BUILD"
	meson setup -Dtests=disabled "$BUILD" || die "meson setup failed"
fi
# the tools only (their man pages come with them); scripts/test.sh builds
# the tests in build-test/, `ninja -C build` builds the benchmarks too
say "building the tools"
ninja -C "$BUILD" "${MKFS#"$BUILD"/}" "${DAEMON#"$BUILD"/}" \
	"${FSCK#"$BUILD"/}" "${ARBOR#"$BUILD"/}" || die "build failed"

# ---- 3. image ---------------------------------------------------------------
mkfs_out=""
if [[ -e $IMAGE ]]; then
	say "image $IMAGE exists; not formatting it (delete it to start over)"
else
	[[ -x $MKFS ]] || die "$MKFS was not built; cannot create an image"
	say "creating a $SIZE sparse image $IMAGE"
	mkdir -p "$(dirname "$IMAGE")"
	if ! mkfs_out=$("$MKFS" -s "$SIZE" "$IMAGE" 2>&1); then
		printf '%s\n' "$mkfs_out" >&2
		rm -f "$IMAGE"
		die "mkfs.arborfs failed (image removed)"
	fi
	printf '%s\n' "$mkfs_out"
fi

# ---- 4. mount (or show the image) -------------------------------------------
if info=$(mount_info "$MNT"); then
	fstype=${info%% *}
	src=${info#* }
	if [[ $fstype != *arborfs* ]]; then
		die "$MNT already has a $fstype mount of $src;" \
			"choose another mount point with ARBOR_MNT=..."
	fi
	if ! stat "$MNT" >/dev/null 2>&1; then
		die "$MNT is mounted ($src) but does not answer (daemon" \
			"gone?); unmount it with: fusermount3 -u \"$MNT\""
	fi
	say "already mounted: $src on $MNT ($fstype)"
	usage_mounted
	exit 0
fi

if [[ ! -x $DAEMON ]]; then
	say "the FUSE daemon ($DAEMON) is not built yet; the image holds:"
	if [[ -x $FSCK ]]; then
		"$FSCK" -n "$IMAGE" || echo "  (fsck.arborfs -n exited $?)"
	elif [[ -n $mkfs_out ]]; then
		echo "  (see the mkfs.arborfs output above)"
	fi
	show_super
	echo
	echo "Rerun scripts/quickstart.sh once fuse/ is built to mount it on $MNT."
	exit 0
fi

mkdir -p "$MNT"
say "mounting $IMAGE on $MNT"
if [[ ! -e /dev/fuse ]]; then
	die "/dev/fuse is missing (modprobe fuse, or give the container the device)"
fi
"$DAEMON" "$IMAGE" "$MNT" || die "arborfs could not mount $IMAGE on $MNT"
# the daemon returns once it is mounted; allow a slow start all the same
for _ in 1 2 3 4 5 6 7 8 9 10; do
	mount_info "$MNT" >/dev/null && break
	sleep 0.5
done
mount_info "$MNT" >/dev/null || die "arborfs started but $MNT is not mounted"
usage_mounted
