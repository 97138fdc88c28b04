#!/bin/bash
# tools.sh - the tools behave like their peers (e2fsprogs, btrfs-progs):
#  * -h/--help print the help on stdout and exit 0; -V/--version print
#    "TOOL (arborfs) VERSION"; a bad option is a usage error (arbor 2,
#    fsck.arborfs 16 as fsck(8), mkfs.arborfs 1 as mke2fs);
#  * the man pages are built from the same text as --help
#    (docs/man/TOOL.help): every line of the help is in the page;
#  * bash completion of arbor completes commands;
#  * commands that do not exist yet say so.
. "$(dirname "$0")/lib.sh" "$@"

ARBOR=$BUILD/cli/arbor
[ -x "$ARBOR" ] || fail "$ARBOR not built"
VERSION=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$SRCDIR/meson.build" | head -1)
[ -n "$VERSION" ] || fail "no version in meson.build"

# status CMD...: run CMD, output in $TMP/out and $TMP/err, status echoed
status() {
	local st=0
	"$@" >"$TMP/out" 2>"$TMP/err" || st=$?
	echo $st
}

log "help and version"
for t in "$ARBOR:arbor:2" "$MKFS:mkfs.arborfs:1" "$FSCK:fsck.arborfs:16" \
	"$DAEMON:arborfs:1"; do
	IFS=: read -r exe name bad <<<"$t"
	for h in -h --help; do
		st=$(status "$exe" $h)
		[ "$st" = 0 ] || fail "$name $h: exit $st"
		grep -q "^usage: $name " "$TMP/out" || fail "$name $h: no usage line on stdout: $(head -3 "$TMP/out")"
		[ ! -s "$TMP/err" ] || fail "$name $h wrote to stderr: $(cat "$TMP/err")"
	done
	for v in -V --version; do
		st=$(status "$exe" $v)
		[ "$st" = 0 ] || fail "$name $v: exit $st"
		head -1 "$TMP/out" | grep -qx "$name (arborfs) $VERSION" ||
			fail "$name $v: '$(head -1 "$TMP/out")', want '$name (arborfs) $VERSION'"
	done
	st=$(status "$exe" --no-such-option)
	[ "$st" = "$bad" ] || fail "$name --no-such-option: exit $st, want $bad"
	[ ! -s "$TMP/out" ] || fail "$name --no-such-option wrote to stdout"
	grep -q . "$TMP/err" || fail "$name --no-such-option: no message"
done
st=$(status "$ARBOR")
[ "$st" = 2 ] && grep -q "^usage: arbor" "$TMP/err" || fail "arbor alone: exit $st"
st=$(status "$FSCK")
[ "$st" = 16 ] && grep -q "no IMAGE" "$TMP/err" || fail "fsck.arborfs alone: exit $st, $(cat "$TMP/err")"
st=$(status "$MKFS")
[ "$st" = 1 ] && grep -q "no IMAGE" "$TMP/err" || fail "mkfs.arborfs alone: exit $st, $(cat "$TMP/err")"
for sub in filesystem scrub check unmount; do
	st=$(status "$ARBOR" help $sub)
	[ "$st" = 0 ] && grep -q "^$sub commands" "$TMP/out" || fail "arbor help $sub: exit $st"
	st=$(status "$ARBOR" $sub --help)
	[ "$st" = 0 ] && grep -q "^$sub commands" "$TMP/out" || fail "arbor $sub --help: exit $st, $(head -2 "$TMP/out")"
done
st=$(status "$ARBOR" filesystem)
[ "$st" = 2 ] && grep -q "^filesystem commands" "$TMP/err" || fail "arbor filesystem alone: exit $st"

log "man pages are the help"
if command -v man >/dev/null; then
	for t in cli/arbor mkfs/mkfs.arborfs fsck/fsck.arborfs fuse/arborfs; do
		page=$BUILD/$t.8
		name=${t#*/}
		[ -s "$page" ] || fail "$page not built"
		MANWIDTH=200 man -l "$page" 2>/dev/null | col -b | tr -s ' \n' ' ' >"$TMP/man.txt"
		grep -q "$name - " "$TMP/man.txt" || fail "$page: no NAME line"
		# every option or command of the help is a term of the page
		"$BUILD/$t" --help | sed -n 's/^  \(-[^ ].*\|[a-z][^ ]*  *[^ ].*\)$/\1/p' |
			sed 's/  .*//' | while read -r term; do
				grep -qF -- "$term" "$TMP/man.txt" || fail "$page lacks '$term' of $name --help"
			done
	done
else
	log "  man missing: pages built, not rendered"
	for t in cli/arbor mkfs/mkfs.arborfs fsck/fsck.arborfs fuse/arborfs; do
		[ -s "$BUILD/$t.8" ] || fail "$BUILD/$t.8 not built"
	done
fi

log "bash completion of arbor"
out=$(bash -c '. "$1"; COMP_WORDS=(arbor fs ""); COMP_CWORD=2; _arbor; echo "${COMPREPLY[*]}"' _ "$SRCDIR/cli/arbor.bash-completion")
grep -qw usage <<<"$out" && grep -qw resize <<<"$out" || fail "completion of 'arbor fs ': '$out'"
out=$(bash -c '. "$1"; COMP_WORDS=(arbor sc); COMP_CWORD=1; _arbor; echo "${COMPREPLY[*]}"' _ "$SRCDIR/cli/arbor.bash-completion")
[ "$out" = scrub ] || fail "completion of 'arbor sc': '$out'"
out=$(bash -c '. "$1"; COMP_WORDS=(arbor subvolume digest --p); COMP_CWORD=3; _arbor; echo "${COMPREPLY[*]}"' _ "$SRCDIR/cli/arbor.bash-completion")
[ "$out" = --portable ] || fail "completion of 'arbor subvolume digest --p': '$out'"

# send and receive exist: without their arguments, bad usage
for c in send receive; do
	st=$(status "$ARBOR" $c)
	[ "$st" = 2 ] || fail "arbor $c: exit $st, want 2"
done
# find-new exists (arbor subvolume find-new): one argument is bad usage
st=$(status "$ARBOR" find-new x)
[ "$st" = 2 ] && grep -q "want PATH and GEN" "$TMP/err" ||
	fail "arbor find-new x: exit $st, $(cat "$TMP/err")"
st=$(status "$ARBOR" frobnicate)
[ "$st" = 2 ] && grep -q "unknown command 'frobnicate'" "$TMP/err" || fail "arbor frobnicate: exit $st, $(cat "$TMP/err")"
st=$(status "$ARBOR" usage /)
[ "$st" = 2 ] && grep -q "image" "$TMP/err" && ! grep -q "supported yet" "$TMP/err" ||
	fail "arbor usage without --image: exit $st, $(cat "$TMP/err")"
finish
