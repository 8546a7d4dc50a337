#!/usr/bin/env bash
# Proves that the lab runner reports failures instead of hiding them:
#
#  1. a VM that does not boot (no kernel image; a boot timeout that cannot be
#     met) makes tests/lab/lab.py exit non-zero with "THE VM DID NOT BOOT";
#  2. a deliberately broken scenario (RLUN_LAB_SELFTEST_FAIL=1 adds
#     selftest-fail, which compares a LUN's data with a file that differs on
#     purpose) makes it exit non-zero with a readable FAIL line and counts.
#
# scripts/test.sh runs this in CI (and locally with RLUN_LAB_SELFTEST=1).
# Costs one VM boot and a short failed one (about two minutes in all).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

problems=0
check() { # check WHAT OUTPUT_FILE PATTERN: the output must match the pattern
    if grep -qE -- "$3" "$2"; then
        echo "selftest: ok: $1"
    else
        echo "selftest: FAILED: $1 (no line matching /$3/ in the runner's output)" >&2
        problems=$((problems + 1))
    fi
}

tmp=$(mktemp -d /tmp/rlun-lab-selftest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

echo "selftest: 1. a VM that does not boot must fail the run"
# 1a: vng gives up at once (the kernel image does not exist).
# 1b: the guest does not come up in time (a real kernel, a boot timeout far
#     below the ~30-80 s a boot takes under emulation).
expect_no_boot() { # expect_no_boot NAME LAB_ARGS...
    local name=$1 rc=0
    shift
    python3 tests/lab/lab.py --no-install --out "$tmp/$name" "$@" selftest-fail \
        >"$tmp/$name.log" 2>&1 || rc=$?
    sed 's/^/  | /' "$tmp/$name.log" | tail -n 12
    if [ "$rc" -eq 0 ]; then
        echo "selftest: FAILED: the runner exited 0 although the VM did not boot ($name)" >&2
        problems=$((problems + 1))
    else
        echo "selftest: ok: the runner exited $rc ($name)"
    fi
    check "the boot failure is reported ($name)" "$tmp/$name.log" "THE VM DID NOT BOOT"
    check "the scenario is not counted as passed ($name)" "$tmp/$name.log" "^lab: 0 passed, 1 failed"
}
expect_no_boot no-kernel --kernel "$tmp/no-such-kernel"
expect_no_boot boot-timeout --boot-timeout 12

echo "selftest: 2. a broken scenario must fail the run with a readable message"
rc=0
RLUN_LAB_SELFTEST_FAIL=1 python3 tests/lab/lab.py --no-install --out "$tmp/broken" \
    selftest-fail >"$tmp/broken.log" 2>&1 || rc=$?
sed 's/^/  | /' "$tmp/broken.log" | tail -n 15
if [ "$rc" -eq 0 ]; then
    echo "selftest: FAILED: the runner exited 0 although selftest-fail failed" >&2
    problems=$((problems + 1))
else
    echo "selftest: ok: the runner exited $rc"
fi
check "the failing scenario is in the summary with its reason" "$tmp/broken.log" \
    "^selftest-fail +FAIL +[0-9]+ +self-test: LUN 0 vs a file that differs on purpose: data differs"
check "the counts say it failed" "$tmp/broken.log" "^lab: 0 passed, 1 failed, 0 skipped"
check "the log of the failing scenario is named" "$tmp/broken.log" "selftest-fail failed; log: .*/logs/selftest-fail.log"

if [ "$problems" -ne 0 ]; then
    echo "selftest: $problems problem(s): the lab runner does not report failures reliably" >&2
    exit 1
fi
echo "selftest: the lab runner reports a failed boot and a failed scenario"
