#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# uring_skip.sh NO_IO_URING TEST: where io_uring is refused (NO_IO_URING runs
# TEST under a seccomp filter that fails io_uring_setup), the io_uring run of
# TEST reports skipped (77) with its reason, KVT_TEST_REQUIRE_IO_URING=1 turns
# that into a failure, and the thread-pool run still runs and passes.
set -u
wrap=$1 test=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

env -u KVT_TEST_REQUIRE_IO_URING "$wrap" "$test" >"$out" 2>&1
rc=$?
[ $rc -eq 77 ] || fail "without io_uring, $test exited $rc, not 77 (skipped)"
grep -q '^SKIP: no io_uring here' "$out" || fail "the skip printed no reason"
echo "ok: skipped, with its reason: $(grep '^SKIP:' "$out")"

KVT_TEST_REQUIRE_IO_URING=1 "$wrap" "$test" >"$out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 77 ] || fail "KVT_TEST_REQUIRE_IO_URING=1: $test exited $rc, not a failure"
grep -q 'KVT_TEST_REQUIRE_IO_URING=1' "$out" || fail "the failure does not name KVT_TEST_REQUIRE_IO_URING"
echo "ok: KVT_TEST_REQUIRE_IO_URING=1 makes it a failure (exit $rc)"

env -u KVT_TEST_REQUIRE_IO_URING "$wrap" "$test" threads >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "the thread-pool run exited $rc without io_uring"
echo "ok: the thread-pool run passes without io_uring"
