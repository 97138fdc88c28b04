# shellcheck shell=bash
# tests/integration/lib.sh - helpers for the integration tests.
#
# A test does:   . "$(dirname "$0")/lib.sh" "$@"
# and is run as: tests/integration/NAME.sh BUILD_DIR   (as root)
# Exit status: 0 pass, 1 fail, 77 skip (no /dev/fuse, not root).
#
# Everything lives in one private directory ($TMP) that the EXIT trap
# removes, after unmounting $MNT and stopping the daemon the test started
# (by its PID), whether the test passed or failed.

set -euo pipefail

if [ $# -lt 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 1
fi
BUILD=$(realpath "$1")
SRCDIR=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../..")
MKFS=$BUILD/mkfs/mkfs.arborfs
DAEMON=$BUILD/fuse/arborfs
FSCK=$BUILD/fsck/fsck.arborfs
TEST_NAME=$(basename "$0" .sh)
SCALE=${ARBOR_TEST_SCALE:-ci}

log() { echo "== $TEST_NAME: $*"; }
skip() {
	echo "SKIP $TEST_NAME: $*"
	exit 77
}
fail() {
	echo "FAIL $TEST_NAME: $*" >&2
	exit 1
}
# soft_fail: a failure after which the test can go on; the test still
# fails at the end (finish).
SOFT_FAILS=0
soft_fail() {
	echo "FAIL $TEST_NAME (continuing): $*" >&2
	SOFT_FAILS=$((SOFT_FAILS + 1))
}
# finish: the last line of every test.
finish() {
	[ "$SOFT_FAILS" = 0 ] || fail "$SOFT_FAILS failure(s) above"
	exit 0
}

[ -c /dev/fuse ] || skip "/dev/fuse missing"
[ "$(id -u)" = 0 ] || skip "must run as root"
[ -x "$MKFS" ] || fail "$MKFS not built"
[ -x "$DAEMON" ] || fail "$DAEMON not built"
command -v python3 >/dev/null || skip "python3 missing"

TMP=$(mktemp -d /tmp/arbor-"$TEST_NAME".XXXXXX)
chmod 755 "$TMP"
IMG=$TMP/image.img
MNT=$TMP/mnt
DAEMON_LOG=$TMP/daemon.log
DAEMON_PID=
mkdir -p "$MNT"

# Unmount $1 if mounted: fusermount3 -u, umount, umount -l as a last resort.
force_unmount() {
	local m=$1
	mountpoint -q "$m" 2>/dev/null || return 0
	fusermount3 -u "$m" 2>/dev/null && return 0
	umount "$m" 2>/dev/null && return 0
	echo "$TEST_NAME: lazy unmount of $m" >&2
	umount -l "$m" 2>/dev/null || true
}

# Wait up to $2 seconds for PID $1 to end; 0 if it did.
wait_pid_gone() {
	local pid=$1 t=$(($2 * 10))
	while kill -0 "$pid" 2>/dev/null; do
		t=$((t - 1))
		[ $t -gt 0 ] || return 1
		sleep 0.1
	done
	return 0
}

_cleanup() {
	local rc=$?
	set +e
	trap - EXIT
	cd /
	force_unmount "$MNT"
	if [ -n "$DAEMON_PID" ]; then
		if ! wait_pid_gone "$DAEMON_PID" 30; then
			kill -TERM "$DAEMON_PID" 2>/dev/null
			wait_pid_gone "$DAEMON_PID" 10 ||
				kill -KILL "$DAEMON_PID" 2>/dev/null
		fi
		wait "$DAEMON_PID" 2>/dev/null
	fi
	if declare -F test_cleanup >/dev/null; then
		test_cleanup
	fi
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -s "$DAEMON_LOG" ]; then
		echo "---- daemon log (last 30 lines) ----" >&2
		tail -n 30 "$DAEMON_LOG" >&2
	fi
	force_unmount "$MNT"
	if [ $rc -ne 0 ] && [ "${ARBOR_DAEMON_DEBUG:-0}" != 0 ]; then
		cp "$DAEMON_LOG" "/tmp/arbor-$TEST_NAME-daemon.log" 2>/dev/null &&
			echo "daemon log kept in /tmp/arbor-$TEST_NAME-daemon.log" >&2
	fi
	rm -rf "$TMP"
	if [ $rc -eq 0 ]; then
		echo "PASS $TEST_NAME"
	elif [ $rc -ne 77 ]; then
		echo "FAIL $TEST_NAME (status $rc)" >&2
	fi
	exit $rc
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fs_mkfs [mkfs options...]: a fresh image at $IMG.
fs_mkfs() {
	rm -f "$IMG"
	"$MKFS" -q "$@" "$IMG" || fail "mkfs.arborfs $* failed"
}

# Environment of the daemon only (VAR=value ...), e.g. an LD_PRELOAD.
DAEMON_ENV=()

# fs_mount [-o opts]: start the daemon in the foreground (background job),
# wait until $MNT is a mountpoint (30 s at most).
fs_mount() {
	[ -z "$DAEMON_PID" ] || fail "fs_mount: already mounted"
	# ARBOR_DAEMON_DEBUG=1: log every FUSE request (-d) to $DAEMON_LOG
	local dbg=()
	[ "${ARBOR_DAEMON_DEBUG:-0}" = 0 ] || dbg=(-d)
	# ARBOR_MOUNT_OPTS="-o x,y": added to every mount of the test
	# shellcheck disable=SC2206
	local extra=(${ARBOR_MOUNT_OPTS:-})
	env "${DAEMON_ENV[@]}" "$DAEMON" -f "${dbg[@]}" "${extra[@]}" "$@" "$IMG" "$MNT" \
		>>"$DAEMON_LOG" 2>&1 &
	DAEMON_PID=$!
	local t=300
	until mountpoint -q "$MNT"; do
		if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
			wait "$DAEMON_PID" 2>/dev/null || true
			DAEMON_PID=
			tail -n 20 "$DAEMON_LOG" >&2
			fail "arborfs $* exited before mounting"
		fi
		t=$((t - 1))
		[ $t -gt 0 ] || fail "arborfs $*: not mounted after 30 s"
		sleep 0.1
	done
}

# unmount_retry DIR: fusermount3 -u, retried for up to 30 s: under load
# (two tests at a time beside the unit suites) the test's own workers
# may take seconds to let go of the mount; fails the test after that
unmount_retry() {
	local _
	for _ in $(seq 60); do
		fusermount3 -u "$1" 2>/dev/null && return 0
		sleep 0.5
	done
	fail "cannot unmount $1 (busy?)"
}

# fs_umount: unmount (everything is committed) and wait for the daemon;
# fails if the daemon does not exit cleanly.
fs_umount() {
	[ -n "$DAEMON_PID" ] || fail "fs_umount: not mounted"
	sync
	unmount_retry "$MNT"
	wait_pid_gone "$DAEMON_PID" 120 || fail "daemon still running 120 s after unmount"
	local st=0
	wait "$DAEMON_PID" || st=$?
	DAEMON_PID=
	# a sanitizer's report explains a bad status better than its tail
	[ $st -eq 0 ] || { check_daemon_log; fail "daemon exited with status $st (see $DAEMON_LOG)"; }
	check_daemon_log
}

# check_daemon_log: sanitizer reports (-Db_sanitize=...) fail the test
check_daemon_log() {
	if grep -q "ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer" "$DAEMON_LOG" 2>/dev/null; then
		grep -A 15 "ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer" "$DAEMON_LOG" | head -n 40 >&2
		fail "sanitizer report in the daemon log"
	fi
}

# fs_remount [-o opts]
fs_remount() {
	fs_umount
	fs_mount "$@"
}

# check_fsck: fsck.arborfs -n on the unmounted image, when it is built.
check_fsck() {
	[ -z "$DAEMON_PID" ] || fail "check_fsck: image still mounted"
	if [ -x "$FSCK" ]; then
		log "fsck -n"
		"$FSCK" -n "$IMG" || fail "fsck.arborfs -n reports problems"
	else
		log "fsck.arborfs not built; check skipped"
	fi
}

# expect_errno ERRNAME PYTHON-STATEMENT: the statement must raise OSError
# with that errno (run in $MNT, os/errno imported).
expect_errno() {
	errno_check "$1" "$2" python3 || fail "expected $1 from: $2"
}

# errno_check ERRNAME PYTHON-STATEMENT PYTHON...: 0 if the statement, run
# in $MNT by the python command given (a runner such as setpriv may come
# first), raised OSError with that errno
errno_check() {
	local want=$1 stmt=$2
	shift 2
	(cd "$MNT" && "$@" - "$want" "$stmt" <<'EOF')
import errno, os, sys
want, stmt = sys.argv[1], sys.argv[2]
try:
    exec(stmt)
except OSError as e:
    got = errno.errorcode.get(e.errno, str(e.errno))
    if got != want:
        print("got %s (%s), want %s" % (got, e, want), file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
print("no error, want %s" % want, file=sys.stderr)
sys.exit(1)
EOF
}

# manifest DIR: one line per object below DIR, sorted: path, type, mode,
# uid, gid, nlink, size, mtime (ns), link group, symlink target or sha256,
# xattrs.  Two trees with the same manifest are the same to a user.
# MANIFEST_NO_NLINK=1 leaves out nlink and link groups (for copies made by
# tools that do not keep hard links).
manifest() {
	python3 - "$1" <<'EOF'
import hashlib, os, stat, sys
root = sys.argv[1]
no_nlink = os.environ.get("MANIFEST_NO_NLINK") == "1"
inos = {}
out = []
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in [""] + sorted(dirnames + filenames):
        p = os.path.join(dirpath, name) if name else dirpath
        if name == "" and dirpath != root:
            continue
        rel = os.path.relpath(p, root)
        st = os.lstat(p)
        m = st.st_mode
        if stat.S_ISREG(m):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            what = h.hexdigest()
        elif stat.S_ISLNK(m):
            what = "-> " + os.readlink(p)
        elif stat.S_ISCHR(m) or stat.S_ISBLK(m):
            what = "dev %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        else:
            what = "-"
        group = inos.setdefault(st.st_ino, rel) if not stat.S_ISDIR(m) else rel
        try:
            xa = sorted(os.listxattr(p, follow_symlinks=False))
            xs = ",".join("%s=%s" % (k, os.getxattr(p, k, follow_symlinks=False).hex())
                          for k in xa)
        except OSError:
            xs = "?"
        size = st.st_size if not stat.S_ISDIR(m) else "-"
        mtime = "m=%d" % st.st_mtime_ns if not stat.S_ISLNK(m) else "m=-"
        if no_nlink:
            out.append("%s %o %d %d %s %s %s %s" % (rel, m, st.st_uid, st.st_gid,
                       size, mtime, what, xs))
        else:
            out.append("%s %o %d %d n%d %s %s g=%s %s %s" % (rel, m, st.st_uid,
                       st.st_gid, st.st_nlink, size, mtime, group, what, xs))
for line in sorted(out):
    print(line)
EOF
}

# same_manifest A B: compare two manifest files, showing the difference.
# When only modification times differ, the test goes on (soft_fail), so
# that one known problem does not hide the others.
same_manifest() {
	diff -u "$1" "$2" >"$TMP/manifest.diff" && return 0
	if diff -q <(sed 's/ m=[-0-9]*//' "$1") <(sed 's/ m=[-0-9]*//' "$2") >/dev/null; then
		soft_fail "only mtimes differ ($1 vs $2), in: $(grep '^+[^+]' "$TMP/manifest.diff" | cut -d' ' -f1 | cut -c2-60 | tr '\n' ' ' | cut -c1-300)"
		return 0
	fi
	{ grep "^[-+][^-+]" "$TMP/manifest.diff" | cut -c1-220 | head -n 40 >&2; } || true
	cp "$TMP/manifest.diff" "/tmp/arbor-$TEST_NAME-manifest.diff"
	fail "trees differ ($1 vs $2); diff kept in /tmp/arbor-$TEST_NAME-manifest.diff"
}

# same_manifest_soft A B: like same_manifest, but the test goes on.
same_manifest_soft() {
	diff -u "$1" "$2" >"$TMP/manifest.diff" && return 0
	{ grep "^[-+][^-+]" "$TMP/manifest.diff" | cut -c1-220 | head -n 6 >&2; } || true
	cp "$TMP/manifest.diff" "/tmp/arbor-$TEST_NAME-manifest.diff"
	soft_fail "trees differ ($1 vs $2; $(grep -c '^+[^+]' "$TMP/manifest.diff") lines); diff kept in /tmp/arbor-$TEST_NAME-manifest.diff"
}

# install_pkg CMD PACKAGE: make CMD available (apt-get), or return 1.
install_pkg() {
	command -v "$1" >/dev/null && return 0
	command -v apt-get >/dev/null || return 1
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null 2>&1 &&
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1; } ||
		return 1
	command -v "$1" >/dev/null
}

# op_count OP: FUSE requests of kind OP since the last `arbor filesystem
# stats --reset` of $MNT
op_count() {
	"$BUILD/cli/arbor" filesystem stats --json "$MNT" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["ops"].get(sys.argv[1], {}).get("count", 0))' "$1"
}

# need_nobody: set NOBODY (a command prefix that runs as uid/gid 65534
# without groups) and PY (the system's python3: a per-user one, pyenv,
# may be out of nobody's reach), or skip the test
need_nobody() {
	command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
	NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
	PY=/usr/bin/python3
	[ -x "$PY" ] || PY=$(command -v python3)
}

# as_nobody [--setpriv-option...] CMD...: run CMD as uid/gid 65534 without
# capabilities, with the library copy nobody_exe made (NOBODY_LIB)
as_nobody() {
	local opts=()
	while [[ $1 == --* ]]; do
		opts+=("$1")
		shift
	done
	setpriv --reuid=65534 --regid=65534 --clear-groups "${opts[@]}" \
		env LD_LIBRARY_PATH="$NOBODY_LIB" "$@"
}

# nobody_exe EXE: print the path of a copy of EXE, made in a directory
# every user may enter, with the build's libarbor beside it; run it as
# another user with LD_LIBRARY_PATH=$NOBODY_LIB.  A test that runs a tool
# of the build as another user must not depend on where the checkout is:
# in a 0700 home, "Permission denied" (exit 126) would stand for the tool.
NOBODY_LIB=
nobody_exe() {
	NOBODY_LIB=$TMP/nobody-bin
	mkdir -p "$NOBODY_LIB"
	cp "$1" "$NOBODY_LIB/"
	cp -P "$BUILD"/lib/libarbor.so* "$NOBODY_LIB/" 2>/dev/null || true
	chmod -R a+rX "$NOBODY_LIB"
	echo "$NOBODY_LIB/$(basename "$1")"
}
