#!/usr/bin/env bash
# tsan.sh - the concurrency tests under ThreadSanitizer.  Not part of CI
# (scripts/test.sh runs ASan+UBSan; the two sanitizers cannot share a
# build), run it by hand or in a nightly job, as root:
#
#   scripts/tsan.sh                 build build-tsan/, run the threaded tests
#   STRESS_SECONDS=300 scripts/tsan.sh   a longer stress run
#
# What runs: the library's threaded unit test (4 threads creating, writing,
# renaming, unlinking and fsyncing while the commit thread commits every
# second) and the randomized model test; then the daemon, built with TSan,
# under tests/integration/stress.sh (16 processes of writers, readers,
# renamers, creators/deleters in one shared directory, fsyncers, xattr and
# truncate workers, results checked), crash.sh (kill -9 while fsyncing),
# resize.sh (a scrub thread while a writer runs), check.sh (the online
# check thread) and the others listed with the loop below.
# A ThreadSanitizer report anywhere fails the run (halt_on_error for the
# unit tests; lib.sh greps the daemon's log).  Ends with "N passed, N failed".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/lib-deps.sh
. scripts/lib-deps.sh
ARB_DEB_PACKAGES+=(python3 attr acl)

BUILD=${ARBOR_TSAN_BUILD_DIR:-build-tsan}
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"

if [[ ${ARBOR_SKIP_DEPS:-0} != 1 ]]; then
	arb_ensure_deps
fi
opts=(-Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false
      -Dtests=enabled -Dwerror=true)
if [[ -f $BUILD/meson-private/coredata.dat ]]; then
	meson setup --reconfigure "${opts[@]}" "$BUILD" >/dev/null
else
	meson setup "${opts[@]}" "$BUILD" >/dev/null
fi
ninja -C "$BUILD"

passed=0
failed=0
run() {
	local name=$1
	shift
	echo "==== $name ===="
	if "$@"; then
		passed=$((passed + 1))
	else
		echo "FAIL $name"
		failed=$((failed + 1))
	fi
}
run "test_fs (threads, commit thread)" env CK_RUN_CASE=lifecycle \
	"$BUILD/tests/unit/test_fs"
run "test_fs_model" "$BUILD/tests/unit/test_fs_model"
run "test_online (check thread vs writes)" "$BUILD/tests/unit/test_online"
if [[ $(id -u) == 0 && -e /dev/fuse ]]; then
	# The daemon built with TSan under the integration tests that run its
	# threads against each other:
	#  stress    16 processes of writers, readers, renamers, creators and
	#            deleters, fsyncers, xattr and truncate workers
	#  crash     kill -9 while fsyncing
	#  resize    the scrub thread while a writer runs
	#  check     the online check thread
	#  fsync     group commit: fsyncs of 8 processes gathering on one commit
	#  killpriv  the request notes of the session's own read (killpriv.c),
	#            per worker thread, and attribute notifications
	#  opens     opens without requests: orphans freed at FORGET by
	#            whichever worker reads it, while others serve the inode
	#  uring     FUSE over io_uring: ring threads against libfuse's workers
	#            and the starvation guard (skips without the kernel's
	#            support); it reruns fsx, posixdiff, killpriv, opens and
	#            fsync over the rings
	#  signals   the signal thread against the loop (SIGTERM/INT/HUP)
	# The daemon's log goes through lib.sh, which fails on a TSan report;
	# halt_on_error would only make the daemon vanish mid-test.
	for t in stress crash resize check fsync killpriv opens uring signals; do
		TSAN_OPTIONS="second_deadlock_stack=1" \
			run "$t.sh" "tests/integration/$t.sh" "$BUILD"
	done
else
	echo "not root or no /dev/fuse: daemon tests skipped"
fi
echo "$passed passed, $failed failed"
((failed == 0))
