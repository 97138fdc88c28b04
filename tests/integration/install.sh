#!/bin/bash
# install.sh - `meson install` gives working tools:
#  * into a DESTDIR: the programs, libarbor, the four man pages, the
#    bash completion and the magic(5) entry land where they belong, and
#    file(1) names an image with that entry;
#  * the programs that use libarbor.so carry a RUNPATH to the installed
#    libdir, so they run without ldconfig; from the DESTDIR (where that
#    RUNPATH does not reach) they run with LD_LIBRARY_PATH set to the
#    DESTDIR's libdir: format, check and mount an image with them.
. "$(dirname "$0")/lib.sh" "$@"

command -v meson >/dev/null || skip "meson missing"
command -v readelf >/dev/null || install_pkg readelf binutils || skip "readelf missing"

D=$TMP/dest
log "meson install --destdir"
meson install -C "$BUILD" --destdir "$D" --no-rebuild >"$TMP/install.log" 2>&1 ||
	fail "meson install failed: $(tail -20 "$TMP/install.log")"
opt() { meson introspect "$BUILD" --buildoptions |
	python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]][0])' "$1"; }
PREFIX=$(opt prefix)
LIBDIR=$(opt libdir)
case $LIBDIR in /*) ;; *) LIBDIR=$PREFIX/$LIBDIR ;; esac
SBIN=$D$PREFIX/$(opt sbindir)
BIN=$D$PREFIX/$(opt bindir)
MAN8=$D$PREFIX/$(opt mandir)/man8
SHARE=$D$PREFIX/$(opt datadir)

for f in "$SBIN/mkfs.arborfs" "$SBIN/fsck.arborfs" "$SBIN/arborfs" "$BIN/arbor" \
	"$MAN8/arborfs.8" "$MAN8/mkfs.arborfs.8" "$MAN8/fsck.arborfs.8" "$MAN8/arbor.8" \
	"$SHARE/bash-completion/completions/arbor" "$SHARE/arborfs/magic"; do
	[ -e "$f" ] || fail "not installed: ${f#"$D"}"
done
ls "$D$LIBDIR"/libarbor.so.* >/dev/null 2>&1 || fail "libarbor.so.* not in ${LIBDIR}"

log "RUNPATH $LIBDIR on the programs linked with libarbor.so"
for p in "$SBIN/mkfs.arborfs" "$SBIN/fsck.arborfs" "$SBIN/arborfs"; do
	rp=$(readelf -d "$p" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
	if [ "$PREFIX" = /usr ]; then
		[ -z "$rp" ] || fail "$(basename "$p"): RUNPATH '$rp' under prefix /usr"
	else
		[ "$rp" = "$LIBDIR" ] || fail "$(basename "$p"): RUNPATH '$rp', want '$LIBDIR'"
	fi
	# nothing of the build directory left in it
	readelf -d "$p" | grep -q "$BUILD" && fail "$(basename "$p") refers to the build directory"
done

log "the installed programs run (LD_LIBRARY_PATH to the DESTDIR's libdir)"
run() { env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$D$LIBDIR" "$@"; }
for p in "$SBIN/mkfs.arborfs" "$SBIN/fsck.arborfs" "$SBIN/arborfs" "$BIN/arbor"; do
	run "$p" --version >"$TMP/v" 2>&1 || fail "$(basename "$p") --version: $(cat "$TMP/v")"
	grep -q "(arborfs)" "$TMP/v" || fail "$(basename "$p") --version: $(cat "$TMP/v")"
	run ldd "$p" | grep -q "not found" && fail "$(basename "$p"): $(run ldd "$p" | grep "not found")"
done
run "$SBIN/mkfs.arborfs" -q -s 64M "$IMG" || fail "installed mkfs failed"
run "$SBIN/fsck.arborfs" -n "$IMG" >/dev/null || fail "installed fsck failed"
if command -v file >/dev/null; then
	run "$SBIN/mkfs.arborfs" -q -f -s 64M -L "install test" -U 01234567-89ab-cdef-0123-456789abcdef "$TMP/m.img" ||
		fail "installed mkfs failed"
	out=$(file -m "$SHARE/arborfs/magic" "$TMP/m.img")
	grep -q "arborfs filesystem image, node size 16384, 67108864 bytes, UUID 01234567-89ab-cdef-0123-456789abcdef, label \"install test\"" <<<"$out" ||
		fail "file(1) with the magic entry: $out"
	rm -f "$TMP/m.img"
fi
run "$SBIN/arborfs" "$IMG" "$MNT" -o commit=0 || fail "installed daemon did not mount"
echo hello >"$MNT/f"
run "$BIN/arbor" filesystem sync "$MNT" >/dev/null || fail "installed arbor sync failed"
fusermount3 -u "$MNT" || fail "unmount failed"
for _ in $(seq 50); do
	run "$SBIN/fsck.arborfs" -n "$IMG" >/dev/null 2>&1 && break
	sleep 0.1
done
run "$SBIN/fsck.arborfs" -n "$IMG" >/dev/null || fail "fsck after the installed daemon"
check_fsck
finish
