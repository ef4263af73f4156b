# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# selftests/ktap.sh: KTAP output for the shell selftests (module.sh, e2e.sh).
# Sourced, never run.
#
# Uses the kernel's own tools/testing/selftests/kselftest/ktap_helpers.sh
# (ktap_print_header, ktap_set_plan, ktap_test_pass/fail/skip, ktap_finished,
# KSFT_SKIP=4, ...) from the test kernel's source tree, which the test VM
# sees read-only. It is looked for, in order, at $VNR_KTAP_HELPERS, under
# $KDIR/source (scripts/vm exports KDIR), under $KDIR, and in the newest
# $VNR_CACHE/src/linux-source-*. Without any of them a small fallback below
# defines the same functions, with the same result lines. $VNR_KTAP_FROM
# says which one is in use.
#
# The kernel's helpers take a bare test name. The vnr_* wrappers below add
# the detail lines this project prints with a result ("# ..." lines, before
# the result line, as the kselftest C harness does).
# Note: ktap_helpers.sh sets the globals result, description and directive.

vnr_ktap_find() {
	local rel=tools/testing/selftests/kselftest/ktap_helpers.sh f
	for f in ${VNR_KTAP_HELPERS:+"$VNR_KTAP_HELPERS"} \
		${KDIR:+"$KDIR/source/$rel" "$KDIR/$rel"}; do
		[ -f "$f" ] && { echo "$f"; return 0; }
	done
	f=$(printf '%s\n' "${VNR_CACHE:-/var/cache/vhost-net-rs}"/src/linux-source-*/"$rel" | sort -V | tail -n 1)
	[ -f "$f" ] && echo "$f"
}

VNR_KTAP_FROM=$(vnr_ktap_find)
if [ -n "$VNR_KTAP_FROM" ]; then
	# shellcheck source=/dev/null
	. "$VNR_KTAP_FROM"
else
	VNR_KTAP_FROM="fallback in selftests/ktap.sh (no kernel source tree found)"
	KTAP_TESTNO=1 KTAP_CNT_PASS=0 KTAP_CNT_FAIL=0 KTAP_CNT_XFAIL=0 KTAP_CNT_SKIP=0
	# shellcheck disable=SC2034  # the kernel helpers' API, for the tests
	KSFT_PASS=0 KSFT_FAIL=1 KSFT_XFAIL=2 KSFT_XPASS=3 KSFT_SKIP=4
	KSFT_NUM_TESTS=0
	ktap_print_header() { echo "TAP version 13"; }
	ktap_print_msg() { echo "# $*"; }
	ktap_set_plan() { KSFT_NUM_TESTS=$1; echo "1..$KSFT_NUM_TESTS"; }
	ktap_skip_all() { echo "1..0 # SKIP $*"; }
	__ktap_test() { # result description [directive]
		echo "$1 $KTAP_TESTNO $2${3:+ # $3}"
		KTAP_TESTNO=$((KTAP_TESTNO + 1))
	}
	ktap_test_pass() { __ktap_test ok "$1"; KTAP_CNT_PASS=$((KTAP_CNT_PASS + 1)); }
	ktap_test_skip() { __ktap_test ok "$1" SKIP; KTAP_CNT_SKIP=$((KTAP_CNT_SKIP + 1)); }
	ktap_test_xfail() { __ktap_test ok "$1" XFAIL; KTAP_CNT_XFAIL=$((KTAP_CNT_XFAIL + 1)); }
	ktap_test_fail() { __ktap_test "not ok" "$1"; KTAP_CNT_FAIL=$((KTAP_CNT_FAIL + 1)); }
	ktap_test_result() {
		local d=$1
		shift
		if "$@"; then ktap_test_pass "$d"; else ktap_test_fail "$d"; fi
	}
	ktap_print_totals() {
		echo "# Totals: pass:$KTAP_CNT_PASS fail:$KTAP_CNT_FAIL xfail:$KTAP_CNT_XFAIL xpass:0 skip:$KTAP_CNT_SKIP error:0"
	}
	ktap_exit_fail_msg() { echo "Bail out! $*"; ktap_print_totals; exit "$KSFT_FAIL"; }
	ktap_finished() {
		ktap_print_totals
		if [ $((KTAP_CNT_PASS + KTAP_CNT_SKIP + KTAP_CNT_XFAIL)) -eq "$KSFT_NUM_TESTS" ]; then
			exit "$KSFT_PASS"
		fi
		exit "$KSFT_FAIL"
	}
fi

# vnr_detail TEXT...: each line of each argument as a "# " line. Unlike
# ktap_print_msg, multi-line text (a console tail) stays commented and
# nothing is glob-expanded.
vnr_detail() {
	local a
	for a in "$@"; do
		[ -n "$a" ] && printf '%s\n' "$a" | sed 's/^/# /'
	done
	return 0
}

# vnr_ktap_start: the header and where the helpers came from. A test that
# knows its plan up front follows with ktap_set_plan N; otherwise
# vnr_ktap_finish prints it at the end. Without root, the script skips as a
# whole (kselftest's convention: "1..0 # SKIP", exit 4).
vnr_ktap_start() {
	ktap_print_header
	vnr_detail "ktap helpers: $VNR_KTAP_FROM"
	if [ "$(id -u)" != 0 ]; then
		ktap_skip_all "needs root"
		exit "$KSFT_SKIP"
	fi
}

vnr_pass() { local name=$1; shift; vnr_detail "$@"; ktap_test_pass "$name"; }   # NAME [DETAIL...]
vnr_fail() { local name=$1; shift; vnr_detail "$@"; ktap_test_fail "$name"; }   # NAME [DETAIL...]
vnr_skip() { local name=$1; shift; vnr_detail "$@"; ktap_test_skip "$name"; }   # NAME [REASON...]

# vnr_check NAME COMMAND [ARGS...]: one result from a command's status.
vnr_check() {
	local name=$1
	shift
	if "$@"; then vnr_pass "$name"; else vnr_fail "$name" "failed: $*"; fi
}

# vnr_ktap_finish: the plan if none was set, the totals, and the exit:
# KSFT_PASS when every planned test passed or was skipped, else KSFT_FAIL.
vnr_ktap_finish() {
	[ "$KSFT_NUM_TESTS" != 0 ] || ktap_set_plan $((KTAP_TESTNO - 1))
	ktap_finished
}
