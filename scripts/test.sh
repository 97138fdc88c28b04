#!/usr/bin/env bash
# test.sh - build arborfs with ASan+UBSan and -Werror, run every test, and end
# with one line "N passed, N failed".  What CI runs (.ci/run).
#
#   scripts/test.sh            from any directory
#
# Steps: install missing Debian packages (scripts/lib-deps.sh); configure
# build-test/ (sanitizers, werror, debug); build; `meson test` (the Check unit
# suites); every executable tests/integration/*.sh, run as
# `tests/integration/x.sh BUILD_DIR` with a timeout (exit 0 = pass,
# 77 = skipped, anything else = fail).  lib.sh, files without the execute bit
# and files without a #! line are helpers, not tests.
#
# Environment:
#   ARBOR_TEST_SCALE               ci (default) or full: size of randomized tests
#   ARBOR_TEST_BUILD_DIR           build directory (default build-test)
#   ARBOR_TEST_TIMEOUT_MULTIPLIER  meson test --timeout-multiplier (default 1)
#   ARBOR_IT_TIMEOUT               seconds per integration test (default 600)
#   ARBOR_IT_JOBS                  integration tests at a time (default 2)
#   ARBOR_TEST_SERIAL=1            unit suites first, then one integration
#                                  test at a time (default: the unit suites
#                                  in the background, one at a time)
#   ARBOR_SKIP_DEPS=1              do not check/install packages
#   ASAN_OPTIONS, UBSAN_OPTIONS    appended to the defaults below
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/lib-deps.sh
. scripts/lib-deps.sh
# the integration tests also drive these (python3 for the exercisers,
# setfattr/setfacl, make and git for the real workload, rsync, stress-ng,
# strace to see the replies of the daemon in posix_edge.sh)
ARB_DEB_PACKAGES+=(python3 attr acl make git rsync stress-ng strace xz-utils e2fsprogs util-linux)

BUILD=${ARBOR_TEST_BUILD_DIR:-build-test}
SCALE=${ARBOR_TEST_SCALE:-ci}
MULT=${ARBOR_TEST_TIMEOUT_MULTIPLIER:-1}
IT_TIMEOUT=${ARBOR_IT_TIMEOUT:-600}

passed=0
failed=0
skipped=0
failures=()

section() {
	printf '\n==== %s ====\n' "$*"
}

# Print the closing lines and exit: non-zero when anything failed.
finish() {
	section "summary"
	if ((${#failures[@]})); then
		printf 'FAILED: %s\n' "${failures[@]}"
	fi
	if ((skipped)); then
		echo "($skipped skipped)"
	fi
	echo "$passed passed, $failed failed"
	if ((failed)); then
		exit 1
	fi
	exit 0
}

fail_step() {
	failed=$((failed + 1))
	failures+=("$1")
}

# ---- packages ---------------------------------------------------------------
section "dependencies"
if ! arb_ensure_deps; then
	fail_step "dependencies"
	finish
fi

# ---- configure and build ----------------------------------------------------
# b_lundef=false: with sanitizers the shared library's undefined sanitizer
# symbols are resolved by the executable's runtime, not at link time.
opts=("-Db_sanitize=address,undefined" -Db_lundef=false -Dwerror=true
	-Dbuildtype=debug -Dtests=enabled "-Dtest_scale=$SCALE")

section "configure $BUILD (test_scale=$SCALE)"
configured=0
if [[ -f $BUILD/meson-private/coredata.dat ]]; then
	if meson setup --reconfigure "${opts[@]}" "$BUILD"; then
		configured=1
	else
		echo "reconfigure failed; configuring $BUILD from scratch"
	fi
fi
if ((!configured)); then
	rm -rf "$BUILD"
	if meson setup "${opts[@]}" "$BUILD"; then
		configured=1
	fi
fi
if ((!configured)); then
	fail_step "configure (meson setup)"
	finish
fi

section "build"
if ! ninja -C "$BUILD"; then
	fail_step "build (ninja)"
	finish
fi
BUILD_ABS=$(cd "$BUILD" && pwd -P)

# ---- sanitizer settings for everything below --------------------------------
# use_sigaltstack=0: libfuse cancels its worker threads when the session
# ends, and ASan's teardown of a cancelled thread (UnsetAlternateSignalStack)
# then reports a stack-buffer-underflow in its own sigaltstack call on the
# dying thread's stale stack shadow: a false positive, seen with the pool
# of threads only
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:use_sigaltstack=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ARBOR_TEST_SCALE=$SCALE

# ---- unit tests (meson test) ------------------------------------------------
# Counts come from meson-logs/testlog.json (one JSON object per test); if it
# is missing, from the summary lines of meson test ("Ok:", "Fail:", ...).

# count_testlog FILE -> "passed failed skipped"
count_testlog() {
	python3 - "$1" <<'PY'
import json, sys
p = f = s = 0
with open(sys.argv[1]) as fh:
    for line in fh:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line).get("result", "")
        if r in ("OK", "EXPECTEDFAIL"):
            p += 1
        elif r == "SKIP":
            s += 1
        else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS, ...
            f += 1
print(p, f, s)
PY
}

# count_summary FILE -> "passed failed skipped" from meson test's summary
count_summary() {
	awk '
		/^Ok:/ || /^Expected Fail:/ { p += $NF }
		/^Fail:/ || /^Unexpected Pass:/ || /^Timeout:/ { f += $NF }
		/^Skipped:/ { s += $NF }
		END { printf "%d %d %d\n", p, f, s }
	' "$1"
}

# The unit suites run in the background of the integration tests (one at
# a time: they are CPU-bound, and two lanes of integration tests mostly
# wait on mounts, fsyncs and sleeps), so that CI fits its time on two
# CPUs.  ARBOR_TEST_SERIAL=1: the unit suites first (meson's own
# parallelism), then one integration test at a time.
SERIAL=${ARBOR_TEST_SERIAL:-0}
IT_JOBS=${ARBOR_IT_JOBS:-2}
((SERIAL)) && IT_JOBS=1
testlog=$BUILD/meson-logs/testlog.json
mtest_out=$BUILD/meson-logs/test-sh-output.txt
rm -f "$testlog"

run_unit() {
	meson test -C "$BUILD" --no-rebuild --print-errorlogs \
		--timeout-multiplier "$MULT" "$@" >"$mtest_out" 2>&1
}

# count the unit tests (after run_unit)
unit_summary() {
	section "unit tests (meson test)"
	cat "$mtest_out"
	counts=""
	if [[ -s $testlog ]] && command -v python3 >/dev/null 2>&1; then
		counts=$(count_testlog "$testlog") || counts=""
	fi
	if [[ -z $counts ]]; then
		counts=$(count_summary "$mtest_out")
	fi
	read -r u_pass u_fail u_skip <<<"$counts"
	passed=$((passed + u_pass))
	failed=$((failed + u_fail))
	skipped=$((skipped + u_skip))
	if ((u_fail)); then
		failures+=("$u_fail unit test(s); see $BUILD/meson-logs/testlog.txt")
	elif ((mtest_rc != 0)); then
		# meson test failed without a failing test (it could not run them)
		fail_step "meson test exited $mtest_rc"
	fi
	echo "unit: $u_pass passed, $u_fail failed, $u_skip skipped"
}

mtest_pid=
if ((SERIAL)); then
	set +e
	run_unit
	mtest_rc=$?
	set -e
	unit_summary
else
	mtest_rcfile=$BUILD/meson-logs/test-sh-rc
	rm -f "$mtest_rcfile"
	(
		set +e
		run_unit --num-processes 1
		echo $? >"$mtest_rcfile"
	) &
	mtest_pid=$!
fi

# ---- integration tests ------------------------------------------------------
section "integration tests ($IT_JOBS at a time)"
shopt -s nullglob
its=(tests/integration/*.sh)
shopt -u nullglob
RES=$(mktemp -d /tmp/arbor-it.XXXXXX)
# tests that change what other mounts see (the fuse module's io_uring
# switch; a host filesystem made full): alone
ALONE=" uring.sh hostfull.sh "

# run_one NAME PATH: the test, its output and "status seconds" into $RES
run_one() {
	local start=$SECONDS rc
	set +e
	timeout -k 30 "$IT_TIMEOUT" "$2" "$BUILD_ABS" </dev/null >"$RES/$1.out" 2>&1
	rc=$?
	set -e
	echo "$rc $((SECONDS - start))" >"$RES/$1.rc"
}

# report NAME: its output, then its result counted
report() {
	local rc secs
	read -r rc secs <"$RES/$1.rc"
	echo "-- $1"
	cat "$RES/$1.out"
	case $rc in
	0)
		echo "PASS $1 (${secs}s)"
		passed=$((passed + 1))
		;;
	77)
		echo "SKIP $1 (${secs}s)"
		skipped=$((skipped + 1))
		;;
	124 | 137)
		echo "FAIL $1: timed out after ${IT_TIMEOUT}s"
		fail_step "$1 (timeout)"
		;;
	*)
		echo "FAIL $1: exit $rc (${secs}s)"
		fail_step "$1 (exit $rc)"
		;;
	esac
}

running=()
# report the tests of running that ended
reap() {
	local n still=()
	for n in "${running[@]}"; do
		if [[ -e $RES/$n.rc ]]; then
			report "$n"
		else
			still+=("$n")
		fi
	done
	running=("${still[@]}")
}
# wait until fewer than $1 tests run
drain() {
	while ((${#running[@]} >= $1)); do
		wait -n || true
		reap
	done
}

for t in "${its[@]}"; do
	name=${t#tests/integration/}
	# helpers sourced by the tests (lib.sh) are not tests
	if [[ $name == lib.sh || ! -x $t ]] || ! head -c2 "$t" | grep -q '^#!'; then
		echo "-- $name: helper (not executable, or no #! line), not run"
		continue
	fi
	if [[ $ALONE == *" $name "* ]]; then
		drain 1
		run_one "$name" "$t"
		report "$name"
		continue
	fi
	drain "$IT_JOBS"
	run_one "$name" "$t" &
	running+=("$name")
done
drain 1
if ((${#its[@]} == 0)); then
	echo "(none)"
fi
rm -rf "$RES"

if [[ -n $mtest_pid ]]; then
	wait "$mtest_pid" || true
	mtest_rc=$(cat "$mtest_rcfile" 2>/dev/null || echo 1)
	unit_summary
fi

finish
