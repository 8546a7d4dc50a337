#!/usr/bin/env bash
# The VM lab run of CI, which also proves that the lab runner reports
# failures instead of hiding them:
#
#  1. the lab run itself (every default scenario, or the ones named as
#     arguments) with a deliberately broken scenario added
#     (RLUN_LAB_SELFTEST_FAIL=1 adds selftest-fail, which compares a LUN's
#     data with a file that differs on purpose): the runner must exit
#     non-zero with a readable FAIL line and counts for it — and every other
#     scenario must have passed (or been skipped with its reason), which is
#     what a plain `tests/lab/lab.py` run requires to succeed;
#  2. a VM that does not boot (no kernel image; a boot timeout that cannot be
#     met) makes tests/lab/lab.py exit non-zero with "THE VM DID NOT BOOT".
#
# scripts/test.sh runs this instead of a plain lab run in CI (and locally
# with RLUN_LAB_SELFTEST=1): one boot serves the scenarios and the check of
# the broken one. Costs the lab run plus a short failed boot.
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

echo "selftest: 1. the lab run, with a scenario broken on purpose: it must fail readably, and only it"
lab_out=$PWD/.lab-out/ci-selftest
RLUN_LAB_SELFTEST_FAIL=1 python3 tests/lab/lab.py --out "$lab_out" "$@" 2>&1 | tee "$tmp/lab.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
    echo "selftest: FAILED: the runner exited 0 although selftest-fail failed" >&2
    problems=$((problems + 1))
else
    echo "selftest: ok: the runner exited $rc"
fi
check "the failing scenario is in the summary with its reason" "$tmp/lab.log" \
    "^selftest-fail +FAIL +[0-9]+ +self-test: LUN 0 vs a file that differs on purpose: data differs"
check "the counts say one failed" "$tmp/lab.log" "^lab: [0-9]+ passed, 1 failed, [0-9]+ skipped"
check "the log of the failing scenario is named" "$tmp/lab.log" "selftest-fail failed; log: .*/logs/selftest-fail.log"
check "the end of the failing scenario's log is shown" "$tmp/lab.log" "^  \| .*data differs"
# The lab's own verdict: every scenario but the broken one passed or was
# skipped (the condition of a plain run's exit code 0).
if python3 - "$lab_out/summary.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
others = [r for r in results if r["name"] != "selftest-fail"]
failed = [r for r in others if r["status"] == "FAIL"]
for r in failed:
    print(f"selftest: scenario {r['name']} FAILED: {r['reason']}", file=sys.stderr)
sys.exit(1 if failed or not others else 0)
PY
then
    echo "selftest: ok: every other scenario passed or was skipped"
else
    echo "selftest: FAILED: the lab run has failures (see above; logs in $lab_out)" >&2
    lab_failed=1
fi

echo "selftest: 2. a VM that does not boot must fail the run"
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

if [ "${lab_failed:-0}" -ne 0 ]; then
    echo "selftest: the lab run failed" >&2
    exit 1
fi
if [ "$problems" -ne 0 ]; then
    echo "selftest: $problems problem(s): the lab runner does not report failures reliably" >&2
    exit 1
fi
echo "selftest: the lab runner reports a failed boot and a failed scenario"
